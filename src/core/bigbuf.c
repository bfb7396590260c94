/* bigbuf.c: see bigbuf.h. */
#include "core/bigbuf.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { void *p; size_t cap; } slots[BIGBUF_SLOTS];
static size_t n_slots, held;

void *bigbuf_get(size_t n, size_t *cap) {
  size_t want = n ? (n + 63) & ~(size_t)63 : 64;
  if (want < n) return NULL; /* overflow */
  if (want >= BIGBUF_MIN) {
    pthread_mutex_lock(&mu);
    size_t best = n_slots;
    for (size_t i = 0; i < n_slots; i++) /* the smallest that fits, at most twice the size */
      if (slots[i].cap >= want && slots[i].cap / 2 <= want && (best == n_slots || slots[i].cap < slots[best].cap))
        best = i;
    if (best < n_slots) {
      void *p = slots[best].p;
      *cap = slots[best].cap;
      held -= slots[best].cap;
      slots[best] = slots[--n_slots];
      pthread_mutex_unlock(&mu);
      return p;
    }
    pthread_mutex_unlock(&mu);
  }
  void *p = NULL;
  if (posix_memalign(&p, 64, want)) return NULL;
  *cap = want;
  return p;
}

void bigbuf_put(void *p, size_t cap) {
  if (!p) return;
  if (cap >= BIGBUF_MIN) {
    pthread_mutex_lock(&mu);
    if (n_slots < BIGBUF_SLOTS && held + cap <= BIGBUF_MAX_BYTES) {
      slots[n_slots].p = p;
      slots[n_slots++].cap = cap;
      held += cap;
      p = NULL;
    }
    pthread_mutex_unlock(&mu);
  }
  free(p);
}
