/* override.c: the temporary model directory of a load with "file:" contents (Triton's
 * load API, cinfer/model_control.h). The directory is made by mkdtemp under $TMPDIR (or
 * /tmp); each path is checked segment by segment before anything is written, folders are
 * created with mkdirat relative to the new directory and files with openat(O_CREAT|O_EXCL|
 * O_NOFOLLOW), so neither "..", an absolute path, nor a symbolic link can lead outside.
 *
 * May call: nothing of src/server. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cinfer/model_control.h"
#include "server/override.h"

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)

static cinfer_status *check_path(const char *p) {
  if (!p[0]) return BAD("model file path is empty");
  if (p[0] == '/') return BAD("model file path 'file:%s' must be relative to the model directory", p);
  if (strlen(p) > 1024) return BAD("model file path 'file:%.64s...' is longer than 1024 bytes", p);
  for (const char *s = p;;) {
    const char *e = strchr(s, '/');
    size_t l = e ? (size_t)(e - s) : strlen(s);
    if (l == 0 || (l == 1 && s[0] == '.') || (l == 2 && s[0] == '.' && s[1] == '.'))
      return BAD("model file path 'file:%s' may not have an empty, '.' or '..' segment (it must "
                 "stay inside the model directory)", p);
    if (memchr(s, '\\', l)) return BAD("model file path 'file:%s' may not contain '\\'", p);
    if (!e) break;
    s = e + 1;
  }
  return NULL;
}

/* Creates the folders of rel under dirfd, then the file; all relative to dirfd. */
static cinfer_status *write_file(int dirfd, const char *root, const cinfer_model_file *f) {
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s", f->path);
  int fd = dup(dirfd);
  if (fd < 0) return cinfer_status_new(CINFER_INTERNAL, "override directory '%s': %s", root, strerror(errno));
  char *s = tmp;
  for (char *e; (e = strchr(s, '/')); s = e + 1) {
    *e = 0;
    if (mkdirat(fd, s, 0755) != 0 && errno != EEXIST) goto fail;
    int nfd = openat(fd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0) goto fail;
    close(fd);
    fd = nfd;
  }
  int out = openat(fd, s, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (out < 0) {
    if (errno == EEXIST) {
      close(fd);
      return BAD("model file 'file:%s' is given twice", f->path);
    }
    goto fail;
  }
  close(fd);
  const char *p = f->data;
  for (size_t left = f->len; left;) {
    ssize_t w = write(out, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      close(out);
      return cinfer_status_new(CINFER_INTERNAL, "writing model file 'file:%s': %s", f->path, strerror(err));
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(out) != 0)
    return cinfer_status_new(CINFER_INTERNAL, "writing model file 'file:%s': %s", f->path, strerror(errno));
  return NULL;
fail:;
  int err = errno;
  close(fd);
  return cinfer_status_new(err == ENOTDIR || err == ELOOP ? CINFER_INVALID_ARG : CINFER_INTERNAL,
                           "model file 'file:%s': %s", f->path, strerror(err));
}

cinfer_status *override_dir_create(const cinfer_model_file *files, size_t n, char **out) {
  *out = NULL;
  for (size_t i = 0; i < n; i++) {
    cinfer_status *st = check_path(files[i].path);
    if (st) return st;
  }
  const char *tmp = getenv("TMPDIR");
  char *dir = NULL;
  if (asprintf(&dir, "%s/cinfer-model-XXXXXX", tmp && tmp[0] ? tmp : "/tmp") < 0) return cinfer_status_oom(NULL);
  if (!mkdtemp(dir)) {
    cinfer_status *st = cinfer_status_new(CINFER_INTERNAL, "cannot create a temporary model directory: %s",
                                          strerror(errno));
    free(dir);
    return st;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cinfer_status *st = dfd < 0 ? cinfer_status_new(CINFER_INTERNAL, "%s: %s", dir, strerror(errno)) : NULL;
  for (size_t i = 0; !st && i < n; i++) st = write_file(dfd, dir, &files[i]);
  if (dfd >= 0) close(dfd);
  if (st) {
    override_dir_remove(dir);
    free(dir);
    return st;
  }
  *out = dir;
  return NULL;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

void override_dir_remove(const char *dir) {
  if (dir) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
