/* pyenv.c: EXECUTION_ENV_PATH, Triton's execution environments for Python models
 * (pyenv.h; docs/python-backend.md "The interpreter"). */
#include "pyenv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/buf.h"

#define PARAM "EXECUTION_ENV_PATH"
#define MODEL_DIR_VAR "$$TRITON_MODEL_DIRECTORY"

extern char **environ;

static cinfer_status *env_err(const char *model, const char *path, const char *fmt, const char *detail) {
  char what[512];
  snprintf(what, sizeof what, fmt, detail ? detail : "");
  return cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': parameter " PARAM " '%s': %s", model,
                           path, what);
}

/* The parameter with $$TRITON_MODEL_DIRECTORY replaced (every occurrence); a relative
 * result is taken relative to the model's folder. */
static char *substitute(const char *param, const char *model_dir) {
  cbuf b = {0};
  size_t vl = strlen(MODEL_DIR_VAR);
  if (param[0] != '/' && strncmp(param, MODEL_DIR_VAR, vl) != 0) {
    cbuf_puts(&b, model_dir);
    cbuf_puts(&b, "/");
  }
  for (const char *p = param; *p;) {
    if (!strncmp(p, MODEL_DIR_VAR, vl)) {
      cbuf_puts(&b, model_dir);
      p += vl;
    } else {
      cbuf_put(&b, p++, 1);
    }
  }
  cbuf_put(&b, "", 1);
  return b.data; /* NULL when out of memory */
}

static bool is_archive(const char *path) {
  size_t n = strlen(path);
  static const char *ext[] = {".tar.gz", ".tgz", ".tar"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
    size_t k = strlen(ext[i]);
    if (n > k && !strcmp(path + n - k, ext[i])) return true;
  }
  return false;
}

/* Runs `tar -xf archive -C dir`; on failure *why holds the first line tar wrote. */
static bool untar(const char *archive, const char *dir, char *why, size_t cap) {
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC)) {
    snprintf(why, cap, "pipe: %s", strerror(errno));
    return false;
  }
  char *argv[] = {"tar", "-xf", (char *)archive, "-C", (char *)dir, "--no-same-owner", NULL};
  pid_t p = fork();
  if (p < 0) {
    snprintf(why, cap, "fork: %s", strerror(errno));
    close(pfd[0]), close(pfd[1]);
    return false;
  }
  if (p == 0) { /* async-signal-safe calls only */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp("tar", argv);
    _exit(127);
  }
  close(pfd[1]);
  char out[1024];
  size_t n = 0;
  ssize_t r;
  while ((r = read(pfd[0], out + n, sizeof out - 1 - n)) > 0 || (r < 0 && errno == EINTR))
    if (r > 0) n += (size_t)r;
  char sink[512];
  while ((r = read(pfd[0], sink, sizeof sink)) > 0 || (r < 0 && errno == EINTR)) {
  }
  close(pfd[0]);
  out[n] = 0;
  int status = 0;
  while (waitpid(p, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  char *nl = strchr(out, '\n');
  if (nl) *nl = 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !out[0])
    snprintf(why, cap, "the tar program could not be run");
  else
    snprintf(why, cap, "%s", out[0] ? out : "tar failed");
  return false;
}

static void rm_rf(const char *dir) {
  pid_t p = fork();
  if (p == 0) {
    char *argv[] = {"rm", "-rf", "--", (char *)dir, NULL};
    execvp("rm", argv);
    _exit(127);
  }
  if (p > 0)
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
    }
}

static cinfer_status *check_root(const char *model, const char *shown, const char *root) {
  char py[PATH_MAX];
  if (snprintf(py, sizeof py, "%s/bin/python3", root) >= (int)sizeof py)
    return env_err(model, shown, "%sthe path is too long", NULL);
  if (access(py, X_OK) != 0)
    return env_err(model, shown, "the environment has no executable bin/python3 (%s)", strerror(errno));
  return NULL;
}

cinfer_status *py_env_prepare(const char *param, const char *model_dir, const char *model, char **root) {
  *root = NULL;
  if (!param[0]) return env_err(model, param, "%sthe path is empty", NULL);
  char *path = substitute(param, model_dir);
  if (!path) return cinfer_status_oom("python environment");
  struct stat sb;
  if (stat(path, &sb) != 0) {
    cinfer_status *st = env_err(model, path, "%s", strerror(errno));
    free(path);
    return st;
  }
  cinfer_status *st = NULL;
  if (S_ISDIR(sb.st_mode)) { /* an unpacked environment */
    if (!(st = check_root(model, path, path))) *root = path;
    else free(path);
    return st;
  }
  if (!S_ISREG(sb.st_mode) || !is_archive(path)) {
    st = env_err(model, path, "%snot a directory nor a .tar.gz, .tgz or .tar archive", NULL);
    free(path);
    return st;
  }
  /* The cache: one folder per archive (its real path, size and time), unpacked once. */
  const char *base = getenv("CINFER_PYTHON_ENV_CACHE");
  char cache[PATH_MAX], real[PATH_MAX], dest[PATH_MAX], tmp[PATH_MAX + 32];
  if (!base || !base[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(cache, sizeof cache, "%s/cinfer-python-envs-%d", t && t[0] ? t : "/tmp", (int)getuid());
  } else {
    snprintf(cache, sizeof cache, "%s", base);
  }
  if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the real path */
  for (const char *p = real; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  const char *name = strrchr(real, '/');
  name = name ? name + 1 : real;
  snprintf(dest, sizeof dest, "%s/%.64s-%016llx-%lld-%lld", cache, name, (unsigned long long)h,
           (long long)sb.st_size, (long long)sb.st_mtime);
  if (mkdir(cache, 0700) != 0 && errno != EEXIST) {
    st = env_err(model, path, "cannot make the unpack cache folder: %s", strerror(errno));
    free(path);
    return st;
  }
  struct stat cb; /* in a shared /tmp: a folder of ours, not one someone else put there */
  if (lstat(cache, &cb) != 0 || !S_ISDIR(cb.st_mode) || cb.st_uid != getuid()) {
    char detail[PATH_MAX + 96];
    snprintf(detail, sizeof detail, "the unpack cache folder %s is not a folder of this user "
             "(set CINFER_PYTHON_ENV_CACHE)", cache);
    st = env_err(model, path, "%s", detail);
    free(path);
    return st;
  }
  struct stat db;
  if (stat(dest, &db) != 0) { /* not unpacked yet: into a private folder, then renamed */
    snprintf(tmp, sizeof tmp, "%s.tmp%d.%lx", dest, (int)getpid(), (unsigned long)pthread_self());
    if (mkdir(tmp, 0700) != 0) {
      st = env_err(model, path, "cannot make an unpack folder: %s", strerror(errno));
      free(path);
      return st;
    }
    char why[600];
    if (!untar(path, tmp, why, sizeof why)) {
      rm_rf(tmp);
      char detail[700];
      snprintf(detail, sizeof detail, "could not be unpacked (%s)", why);
      st = env_err(model, path, "%s", detail);
      free(path);
      return st;
    }
    if ((st = check_root(model, path, tmp))) {
      rm_rf(tmp);
      free(path);
      return st;
    }
    if (rename(tmp, dest) != 0) rm_rf(tmp); /* another load unpacked it first: use that */
  }
  free(path);
  if ((st = check_root(model, param, dest))) return st;
  *root = strdup(dest);
  return *root ? NULL : cinfer_status_oom("python environment");
}

char **py_env_vars(const char *root) {
  size_t n = 0;
  for (char **e = environ; *e; e++) n++;
  char **v = calloc(n + 4, sizeof *v);
  if (!v) return NULL;
  const char *path = getenv("PATH"), *ld = getenv("LD_LIBRARY_PATH");
  size_t k = 0;
  bool ok = asprintf(&v[k++], "PATH=%s/bin%s%s", root, path ? ":" : "", path ? path : "") >= 0;
  ok = ok && asprintf(&v[k++], "LD_LIBRARY_PATH=%s/lib%s%s", root, ld ? ":" : "", ld ? ld : "") >= 0;
  ok = ok && (v[k++] = strdup("PYTHONNOUSERSITE=1")) != NULL;
  for (char **e = environ; ok && *e; e++) {
    if (!strncmp(*e, "PATH=", 5) || !strncmp(*e, "LD_LIBRARY_PATH=", 16) ||
        !strncmp(*e, "PYTHONHOME=", 11) || !strncmp(*e, "PYTHONPATH=", 11) ||
        !strncmp(*e, "PYTHONNOUSERSITE=", 17))
      continue;
    ok = (v[k++] = strdup(*e)) != NULL;
  }
  if (!ok) {
    py_env_vars_free(v);
    return NULL;
  }
  return v;
}

void py_env_vars_free(char **v) {
  for (char **e = v; e && *e; e++) free(*e);
  free(v);
}
