/* order.c: sched_order, the response reorder helper behind preserve_ordering.
 *
 * Seqs are issued consecutively from 0. `base` is the first seq not yet released; `next`
 * the next seq to issue. done[] is a ring (power-of-two size) of flags for the window
 * [base, next): flag set = completed but waiting for an earlier seq. Completing `base`
 * releases the run of consecutive completed seqs that follows it, which is why a run is
 * always a contiguous range and needs no output array.
 *
 * Invariants: base <= next; next - base <= cap; done[s & (cap-1)] is 0 for every s outside
 * [base, next).
 */
#include <stdlib.h>
#include <string.h>

#include "sched/batcher.h"

struct sched_order {
  uint8_t *done;
  uint64_t cap; /* power of two */
  uint64_t base, next;
};

cinfer_status *sched_order_create(sched_order **out) {
  sched_order *o = calloc(1, sizeof *o);
  if (o) {
    o->cap = 64;
    o->done = calloc(o->cap, 1);
  }
  if (!o || !o->done) {
    sched_order_destroy(o);
    *out = NULL;
    return cinfer_status_oom("creating a sched_order");
  }
  *out = o;
  return NULL;
}

void sched_order_destroy(sched_order *o) {
  if (!o) return;
  free(o->done);
  free(o);
}

/* Doubles the ring, keeping each outstanding seq's flag at its new slot. */
static int grow(sched_order *o) {
  uint64_t ncap = o->cap * 2;
  uint8_t *nd = calloc(ncap, 1);
  if (!nd) return -1;
  for (uint64_t s = o->base; s != o->next; s++) nd[s & (ncap - 1)] = o->done[s & (o->cap - 1)];
  free(o->done);
  o->done = nd;
  o->cap = ncap;
  return 0;
}

uint64_t sched_order_next_seq(sched_order *o) {
  /* If the ring cannot grow (out of memory), the seq is still issued; completing it then
   * fails loudly in sched_order_complete rather than corrupting another seq's flag. */
  if (o->next - o->base == o->cap) (void)grow(o);
  return o->next++;
}

cinfer_status *sched_order_complete(sched_order *o, uint64_t seq, uint64_t *first,
                                    uint64_t *count) {
  *first = o->base;
  *count = 0;
  if (seq >= o->next)
    return cinfer_status_new(CINFER_INVALID_ARG, "sched_order: seq %llu was never issued",
                             (unsigned long long)seq);
  if (seq >= o->base && seq - o->base >= o->cap)
    return cinfer_status_new(CINFER_INTERNAL, "sched_order: seq %llu is outside the window "
                             "(out of memory when it was issued)", (unsigned long long)seq);
  if (seq < o->base || o->done[seq & (o->cap - 1)])
    return cinfer_status_new(CINFER_INVALID_ARG, "sched_order: seq %llu completed twice",
                             (unsigned long long)seq);
  o->done[seq & (o->cap - 1)] = 1;
  while (o->base != o->next && o->done[o->base & (o->cap - 1)]) {
    o->done[o->base & (o->cap - 1)] = 0;
    o->base++;
  }
  *count = o->base - *first;
  return NULL;
}

uint64_t sched_order_outstanding(const sched_order *o) { return o->next - o->base; }
