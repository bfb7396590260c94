/* shm.c: the system shared-memory region registry. See shm.h.
 *
 * Invariants: (1) every region on the list has refs >= 1, one of them the list's; (2) a
 * region's mapping is unmapped exactly once, when refs drops to 0, which happens only after
 * it left the list; (3) the list holds at most SHM_MAX_REGIONS regions with distinct
 * names; (4) base[0..byte_size) is mapped for as long as refs > 0; (5) a region marked
 * doomed (unregistered while requests held it) is on the list, and usable, until the last
 * request holding it releases it; refs changes under the registry's mutex while the region
 * is on the list. */
#include "frontend/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct shm_region {
  _Atomic int refs;
  shm_region *next;      /* on the registry's list while registered */
  char *name, *key;
  uint64_t offset, byte_size;
  void *base;            /* mapping of [offset, offset + byte_size) of the object */
  size_t map_len;        /* what was mapped (byte_size, or 1 for an empty window) */
  size_t map_skew;       /* offset % page: base = mapping + map_skew */
  shm_registry *reg;     /* NULL once the registry is destroyed */
  bool doomed;           /* unregistered while in use: leaves at the last release */
};

struct shm_registry {
  pthread_mutex_t mu;
  shm_region *head;
  size_t n;
  char *key_prefix;   /* NULL: any key */
  uint64_t max_bytes; /* 0: no limit */
};

/* Reserved by Triton for its Python backend's own regions. */
static const char reserved_prefix[] = "triton_python_backend_shm_region_";

cinfer_status *shm_registry_create(shm_registry **out) {
  shm_registry *r = calloc(1, sizeof *r);
  if (!r) return cinfer_status_oom("shared-memory registry");
  pthread_mutex_init(&r->mu, NULL);
  *out = r;
  return NULL;
}

cinfer_status *shm_registry_set_policy(shm_registry *r, const char *key_prefix, uint64_t max_bytes) {
  size_t k = key_prefix ? strspn(key_prefix, "/") : 0;
  if (key_prefix && strlen(key_prefix + k) > SHM_MAX_NAME)
    return cinfer_status_new(CINFER_INVALID_ARG, "the shared-memory key prefix is longer than %d bytes", SHM_MAX_NAME);
  char *p = key_prefix && key_prefix[k] ? strdup(key_prefix + k) : NULL;
  if (key_prefix && key_prefix[k] && !p) return cinfer_status_oom("shared-memory key prefix");
  free(r->key_prefix);
  r->key_prefix = p;
  r->max_bytes = max_bytes;
  return NULL;
}

static void region_free(shm_region *g) {
  if (g->base) munmap((char *)g->base - g->map_skew, g->map_len);
  free(g->name);
  free(g->key);
  free(g);
}

static void unlink_locked(shm_registry *r, shm_region *g) {
  for (shm_region **pp = &r->head; *pp; pp = &(*pp)->next)
    if (*pp == g) {
      *pp = g->next;
      r->n--;
      return;
    }
}

void shm_region_release(shm_region *g) {
  if (!g) return;
  shm_registry *r = g->reg;
  if (r) pthread_mutex_lock(&r->mu);
  int left = atomic_fetch_sub(&g->refs, 1) - 1;
  if (r && left == 1 && g->doomed) { /* the last request of an unregistered region */
    unlink_locked(r, g);
    left = atomic_fetch_sub(&g->refs, 1) - 1;
  }
  if (r) pthread_mutex_unlock(&r->mu);
  if (left == 0) region_free(g);
}

void shm_registry_destroy(shm_registry *r) {
  if (!r) return;
  shm_unregister(r, NULL);
  /* Regions still held (none once the endpoints are gone) leave now; their holders' last
   * release frees them. */
  pthread_mutex_lock(&r->mu);
  shm_region *left = r->head;
  r->head = NULL;
  r->n = 0;
  for (shm_region *g = left; g; g = g->next) g->reg = NULL;
  pthread_mutex_unlock(&r->mu);
  while (left) {
    shm_region *nx = left->next;
    shm_region_release(left);
    left = nx;
  }
  pthread_mutex_destroy(&r->mu);
  free(r->key_prefix);
  free(r);
}

static shm_region *find(shm_registry *r, const char *name) {
  for (shm_region *g = r->head; g; g = g->next)
    if (!strcmp(g->name, name)) return g;
  return NULL;
}

static cinfer_status *bad(const char *fmt, const char *a, const char *b) {
  return cinfer_status_new(CINFER_INVALID_ARG, fmt, a, b);
}

cinfer_status *shm_register(shm_registry *r, const char *name, const char *key, uint64_t offset,
                            uint64_t byte_size) {
  if (!name || !name[0])
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "'region name' is necessary to register system shared memory region");
  if (strlen(name) > SHM_MAX_NAME || strlen(key) > SHM_MAX_NAME)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "cannot register shared memory region: the name and the key are "
                             "limited to %d bytes (SHM_MAX_NAME)", SHM_MAX_NAME);
  size_t k = strspn(key, "/");
  if (!key[k])
    return bad("cannot register shared memory region '%s' - invalid shm key '%s'", name, key);
  if (!strncmp(key + k, reserved_prefix, sizeof reserved_prefix - 1))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "cannot register shared memory region '%s' with key '%s' as the key "
                             "contains the reserved prefix '%s'", name, key, reserved_prefix);
  if (offset > (uint64_t)SIZE_MAX || byte_size > (uint64_t)SIZE_MAX - offset)
    return bad("failed to register shared memory region '%s': invalid args%s", name, "");
  /* the server's policy: a client maps only the objects meant for it, and no more than that */
  if (r->key_prefix && strncmp(key + k, r->key_prefix, strlen(r->key_prefix)))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "cannot register shared memory region '%s': key '%s' does not start with the "
                             "prefix '%s' this server allows (--shared-memory-key-prefix)", name, key,
                             r->key_prefix);
  if (r->max_bytes && byte_size > r->max_bytes)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "cannot register shared memory region '%s': %llu bytes is more than the %llu this "
                             "server allows per region (--shared-memory-max-bytes)", name,
                             (unsigned long long)byte_size, (unsigned long long)r->max_bytes);

  pthread_mutex_lock(&r->mu);
  cinfer_status *st = NULL;
  int fd = -1;
  shm_region *g = NULL;
  if (find(r, name)) {
    st = bad("shared memory region '%s' already in manager%s", name, "");
    goto out;
  }
  if (r->n >= SHM_MAX_REGIONS) {
    st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED,
                           "cannot register shared memory region '%s': %d regions are registered "
                           "(the limit, SHM_MAX_REGIONS)", name, SHM_MAX_REGIONS);
    goto out;
  }
  fd = shm_open(key, O_RDWR, S_IRUSR | S_IWUSR);
  if (fd < 0) {
    st = bad("Unable to open shared memory region: '%s'%s", key, "");
    goto out;
  }
  struct stat sb;
  if (fstat(fd, &sb) < 0 || sb.st_size < 0) {
    st = bad("Invalid shared memory region: '%s'%s", key, "");
    goto out;
  }
  if (offset + byte_size > (uint64_t)sb.st_size) {
    st = bad("failed to register shared memory region '%s': invalid args%s", name, "");
    goto out;
  }
  g = calloc(1, sizeof *g);
  if (!g || !(g->name = strdup(name)) || !(g->key = strdup(key))) {
    st = cinfer_status_oom("registering a shared-memory region");
    goto out;
  }
  long page = sysconf(_SC_PAGESIZE);
  g->map_skew = (size_t)(offset % (uint64_t)(page > 0 ? page : 4096));
  g->map_len = (size_t)byte_size + g->map_skew;
  if (!g->map_len) g->map_len = 1; /* an empty window still gets a valid address */
  void *m = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 (off_t)(offset - g->map_skew));
  if (m == MAP_FAILED) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "failed to register shared memory region '%s': unable to process "
                           "address space%s", name, strerror(errno));
    goto out;
  }
  g->base = (char *)m + g->map_skew;
  g->offset = offset;
  g->byte_size = byte_size;
  atomic_init(&g->refs, 1);
  g->reg = r;
  g->next = r->head;
  r->head = g;
  r->n++;
  g = NULL;
out:
  pthread_mutex_unlock(&r->mu);
  if (fd >= 0) close(fd);
  if (g) region_free(g);
  return st;
}

cinfer_status *shm_unregister(shm_registry *r, const char *name) {
  pthread_mutex_lock(&r->mu);
  shm_region *gone = NULL;
  for (shm_region **pp = &r->head; *pp;) {
    shm_region *g = *pp;
    if (name && strcmp(g->name, name)) {
      pp = &g->next;
      continue;
    }
    if (atomic_load(&g->refs) > 1) { /* in use: listed until its requests are done (Triton) */
      g->doomed = true;
      pp = &g->next;
      if (name) break;
      continue;
    }
    *pp = g->next;
    r->n--;
    g->next = gone;
    gone = g;
    if (name) break;
  }
  pthread_mutex_unlock(&r->mu);
  while (gone) {
    shm_region *nx = gone->next;
    shm_region_release(gone); /* the list's reference; requests may hold more */
    gone = nx;
  }
  return NULL;
}

cinfer_status *shm_status_each(shm_registry *r, const char *name, shm_status_fn fn, void *user) {
  pthread_mutex_lock(&r->mu);
  cinfer_status *st = NULL;
  if (name) {
    const shm_region *g = find(r, name);
    if (g) fn(user, g->name, g->key, g->offset, g->byte_size);
    else
      st = cinfer_status_new(CINFER_NOT_FOUND,
                             "Unable to find system shared memory region: '%s'", name);
  } else {
    for (const shm_region *g = r->head; g; g = g->next) fn(user, g->name, g->key, g->offset, g->byte_size);
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

typedef struct put_ctx {
  cbuf *b;
  bool first;
} put_ctx;

static void put_region(void *user, const char *name, const char *key, uint64_t offset,
                       uint64_t byte_size) {
  put_ctx *p = user;
  cbuf *b = p->b;
  if (!p->first) cbuf_puts(b, ",");
  p->first = false;
  cbuf_puts(b, "{\"name\":");
  cbuf_json_string(b, name, strlen(name));
  cbuf_puts(b, ",\"key\":");
  cbuf_json_string(b, key, strlen(key));
  cbuf_printf(b, ",\"offset\":%llu,\"byte_size\":%llu}", (unsigned long long)offset,
              (unsigned long long)byte_size);
}

cinfer_status *shm_status_json(shm_registry *r, const char *name, cbuf *out) {
  put_ctx p = {out, true};
  cbuf_puts(out, "[");
  cinfer_status *st = shm_status_each(r, name, put_region, &p);
  cbuf_puts(out, "]");
  return st;
}

size_t shm_region_count(shm_registry *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

cinfer_status *shm_acquire(shm_registry *r, const char *name, uint64_t offset, uint64_t byte_size,
                           shm_region **region, void **addr) {
  *region = NULL;
  *addr = NULL;
  pthread_mutex_lock(&r->mu);
  cinfer_status *st = NULL;
  shm_region *g = find(r, name);
  if (!g)
    st = cinfer_status_new(CINFER_NOT_FOUND, "Unable to find shared memory region: '%s'", name);
  else if (offset >= g->byte_size && !(offset == 0 && byte_size == 0))
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "Invalid offset for shared memory region: '%s'", name);
  else if (byte_size > UINT64_MAX - offset)
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "Integer overflow detected: byte_size (%llu) + offset (%llu) exceeds "
                           "maximum value (%llu) for region '%s'", (unsigned long long)byte_size,
                           (unsigned long long)offset, (unsigned long long)UINT64_MAX, name);
  else if (offset + byte_size > g->byte_size)
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "Invalid offset + byte size for shared memory region: '%s'", name);
  if (!st) {
    atomic_fetch_add(&g->refs, 1);
    *region = g;
    *addr = (char *)g->base + offset;
  }
  pthread_mutex_unlock(&r->mu);
  return st;
}

cinfer_status *shm_cuda_call(const char *action, const char *name) {
  bool all = !name || !name[0];
  if (!strcmp(action, "status"))
    return all ? NULL : cinfer_status_new(CINFER_NOT_FOUND,
                                          "Unable to find cuda shared memory region: '%s'", name);
  if (!strcmp(action, "register") && all)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "'region name' is necessary to register cuda shared memory region");
  if (all) return NULL; /* unregister all: there are none */
  return cinfer_status_new(CINFER_INVALID_ARG,
                           "failed to %s CUDA shared memory region: '%s', GPUs not supported "
                           "(CUDA shared memory is not supported: this server has no GPU)",
                           action, name);
}
