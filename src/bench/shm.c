/* shm.c: `cinfer bench --shared-memory system`, as perf_analyzer has it: every input
 * tensor variant and every requested output lives in a POSIX shared-memory object that the
 * bench registers with the server (Triton's system shared-memory extension) before the
 * load and unregisters and unlinks afterwards. Requests then carry only the JSON header
 * that names the regions. Output regions are shared by the requests in flight (their
 * contents are not checked, as in perf_analyzer). */
#include "bench/bench_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct shm_entry {
  char name[64], key[96];
  void *p;
  size_t len;
  bool registered;
} shm_entry;

struct bench_shm {
  const bench_config *c;
  bench_addr a;
  shm_entry *e;
  size_t n, cap;
};

cinfer_status *bench_shm_create(const bench_config *c, const bench_addr *a, bench_shm **out) {
  bench_shm *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom(NULL);
  s->c = c;
  s->a = *a;
  *out = s;
  return NULL;
}

cinfer_status *bench_shm_add(bench_shm *s, const void *data, size_t len, const char **name) {
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 16;
    shm_entry *ne = realloc(s->e, nc * sizeof *ne);
    if (!ne) return cinfer_status_oom(NULL);
    s->e = ne;
    s->cap = nc;
  }
  shm_entry *e = &s->e[s->n];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "cinfer_bench_%d_%zu", (int)getpid(), s->n);
  snprintf(e->key, sizeof e->key, "/%s", e->name);
  size_t map = len ? len : 1;
  int fd = shm_open(e->key, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return cinfer_status_new(CINFER_UNAVAILABLE, "shm_open %s: %s", e->key, strerror(errno));
  if (ftruncate(fd, (off_t)map) != 0) {
    close(fd);
    shm_unlink(e->key);
    return cinfer_status_new(CINFER_UNAVAILABLE, "ftruncate %s to %zu bytes: %s", e->key, map,
                             strerror(errno));
  }
  e->p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (e->p == MAP_FAILED) {
    shm_unlink(e->key);
    return cinfer_status_new(CINFER_UNAVAILABLE, "mmap %s: %s", e->key, strerror(errno));
  }
  e->len = map;
  s->n++;
  if (data && len) memcpy(e->p, data, len);
  if (s->c->grpc) {
    cinfer_status *st = bench_grpc_shm_register(s->c, &s->a, e->name, e->key, map);
    if (st) return st;
    e->registered = true;
    *name = e->name;
    return NULL;
  }
  char path[160], body[256];
  snprintf(path, sizeof path, "/v2/systemsharedmemory/region/%s/register", e->name);
  int bl = snprintf(body, sizeof body, "{\"key\":\"%s\",\"offset\":0,\"byte_size\":%zu}", e->key, map);
  int status = 0;
  char *resp = NULL;
  cinfer_status *st = bench_http_simple(s->c, &s->a, "POST", path, body, (size_t)bl, 10000, &status,
                                        &resp, NULL);
  if (!st && status != 200)
    st = cinfer_status_new(CINFER_UNAVAILABLE, "registering shared-memory region %s: HTTP %d: %.300s",
                           e->name, status, resp ? resp : "");
  free(resp);
  if (st) return st;
  e->registered = true;
  *name = e->name;
  return NULL;
}

void bench_shm_destroy(bench_shm *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) {
    shm_entry *e = &s->e[i];
    if (e->registered && s->c->grpc) {
      bench_grpc_shm_unregister(s->c, &s->a, e->name);
    } else if (e->registered) {
      char path[160];
      snprintf(path, sizeof path, "/v2/systemsharedmemory/region/%s/unregister", e->name);
      int status;
      cinfer_status_free(bench_http_simple(s->c, &s->a, "POST", path, "", 0, 10000, &status, NULL, NULL));
    }
    munmap(e->p, e->len);
    shm_unlink(e->key);
  }
  free(s->e);
  free(s);
}
