/* registry.c: the process-wide table of backends: the built-in ones (backends.c,
 * registered at the first server creation) and shared objects loaded on first use from the
 * backend directory (docs/design/backend-abi.md). An entry is never removed, so an iface
 * pointer stays valid for the life of the process. Thread-safe (backends_mu).
 *
 * May call: nothing of src/server. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "server/internal.h"

/* The process-wide table of backends: the built-in ones (backends.c, registered at the
 * first server creation) and shared objects loaded on first use by backend_lookup. An
 * entry is never removed, so an iface pointer stays valid for the life of the process. */
#define MAX_BACKENDS 64
static const cinfer_backend_iface *backends[MAX_BACKENDS];
static int n_backends;
static pthread_mutex_t backends_mu = PTHREAD_MUTEX_INITIALIZER;

/* NULL when iface may be used by this core; `where` (may be "") names the file. */
static cinfer_status *backend_check(const cinfer_backend_iface *iface, const char *where) {
  if (!iface->name || !iface->name[0])
    return cinfer_status_new(CINFER_INVALID_ARG, "backend%s has no name", where);
  if (iface->abi_major != CINFER_BACKEND_ABI_MAJOR || iface->abi_minor > CINFER_BACKEND_ABI_MINOR)
    return cinfer_status_new(CINFER_UNSUPPORTED,
                             "backend '%s'%s was built for backend ABI %u.%u; this server has "
                             "%u.%u (the major must be equal, the minor at most the server's)",
                             iface->name, where, iface->abi_major, iface->abi_minor,
                             CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR);
  const char *missing = !iface->model_load         ? "model_load"
                        : !iface->model_unload     ? "model_unload"
                        : !iface->instance_create  ? "instance_create"
                        : !iface->instance_destroy ? "instance_destroy"
                        : !iface->execute          ? "execute"
                                                   : NULL;
  if (missing)
    return cinfer_status_new(CINFER_INVALID_ARG, "backend '%s'%s has no %s (a required member)",
                             iface->name, where, missing);
  return NULL;
}

static const cinfer_backend_iface *find_locked(const char *name) {
  for (int i = 0; i < n_backends; i++)
    if (!strcmp(backends[i]->name, name)) return backends[i];
  return NULL;
}

static cinfer_status *register_locked(const cinfer_backend_iface *iface) {
  const cinfer_backend_iface *have = find_locked(iface->name);
  if (have)
    return have == iface ? NULL
                         : cinfer_status_new(CINFER_ALREADY_EXISTS,
                                             "backend '%s' is already registered", iface->name);
  if (n_backends == MAX_BACKENDS)
    return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "backend '%s': too many backends (at most %d)",
                             iface->name, MAX_BACKENDS);
  backends[n_backends++] = iface;
  return NULL;
}

cinfer_status *cinfer_backend_register(const cinfer_backend_iface *iface) {
  if (!iface) return cinfer_status_new(CINFER_INVALID_ARG, "cinfer_backend_register(NULL)");
  cinfer_status *st = backend_check(iface, "");
  if (st) return st;
  pthread_mutex_lock(&backends_mu);
  st = register_locked(iface);
  pthread_mutex_unlock(&backends_mu);
  return st;
}

const cinfer_backend_iface *backend_find(const char *name) {
  pthread_mutex_lock(&backends_mu);
  const cinfer_backend_iface *b = find_locked(name);
  pthread_mutex_unlock(&backends_mu);
  return b;
}

/* A backend name that can stand in a file name: no '/', no leading '.'. */
static bool backend_name_is_file_safe(const char *n) {
  if (!n[0] || n[0] == '.' || strlen(n) > 128) return false;
  for (const char *p = n; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      return false;
  return true;
}

/* Loads <dir>/<name>/libcinfer_<name>.so and registers its iface. Under backends_mu. */
static cinfer_status *load_shared_locked(const char *name, const char *dir,
                                         const cinfer_backend_iface **out) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s/libcinfer_%s.so", dir, name, name) >= (int)sizeof path)
    return cinfer_status_new(CINFER_INVALID_ARG, "backend '%s': the library path is too long", name);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return cinfer_status_new(CINFER_NOT_FOUND,
                             "backend '%s' is not built in and cannot be loaded from %s: %s", name,
                             path, strerror(errno));
  dlerror();
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    return cinfer_status_new(CINFER_NOT_FOUND,
                             "backend '%s' is not built in and cannot be loaded from %s: %s", name,
                             path, e ? e : "dlopen failed");
  }
  cinfer_backend_entry_fn entry;
  *(void **)&entry = dlsym(h, CINFER_BACKEND_ENTRY_SYMBOL);
  if (!entry) {
    dlclose(h);
    return cinfer_status_new(CINFER_INVALID_ARG, "backend '%s': %s does not export %s()", name,
                             path, CINFER_BACKEND_ENTRY_SYMBOL);
  }
  const cinfer_backend_iface *iface = entry(CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR);
  if (!iface) {
    dlclose(h);
    return cinfer_status_new(CINFER_UNSUPPORTED,
                             "backend '%s': %s refused this server's backend ABI %u.%u", name,
                             path, CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR);
  }
  char where[4200];
  snprintf(where, sizeof where, " (%s)", path);
  cinfer_status *st = backend_check(iface, where);
  if (!st && strcmp(iface->name, name))
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "backend '%s': %s calls itself '%s'; the library of backend '%s' must "
                           "name itself '%s'", name, path, iface->name, name, name);
  if (!st) st = register_locked(iface);
  if (st) {
    dlclose(h);
    return st;
  }
  /* h stays open for the life of the process: the iface and its code live in it. */
  LOG_I("loaded backend '%s' from %s (backend ABI %u.%u)", name, path, iface->abi_major,
        iface->abi_minor);
  *out = iface;
  return NULL;
}

cinfer_status *backend_lookup(const char *name, const char *backend_dir,
                              const cinfer_backend_iface **out) {
  *out = NULL;
  if (!name || !name[0])
    return cinfer_status_new(CINFER_INVALID_ARG, "the model names no backend");
  pthread_mutex_lock(&backends_mu);
  cinfer_status *st = NULL;
  if ((*out = find_locked(name))) {
  } else if (!backend_dir || !backend_dir[0]) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "unknown backend '%s': it is not built in and no backend directory is "
                           "set (cinfer serve --backend-directory DIR)", name);
  } else if (!backend_name_is_file_safe(name)) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "unknown backend '%s': it is not built in, and a backend loaded from "
                           "the backend directory needs a name of letters, digits, '_', '-' "
                           "and '.' (not first)", name);
  } else {
    st = load_shared_locked(name, backend_dir, out);
  }
  pthread_mutex_unlock(&backends_mu);
  return st;
}

