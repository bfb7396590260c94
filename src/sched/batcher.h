/* sched/batcher.h: the dynamic batcher (Triton's `dynamic_batching` semantics) and the
 * response reorder helper for `preserve_ordering`. The contract of src/sched.
 *
 * Pure, deterministic logic: no threads, no clock, no I/O. Every call that depends on time
 * takes `now_ns` (any monotonic nanosecond clock; the same clock for every call on one
 * object, never going backwards). A batcher or an order object is not thread-safe: the
 * caller (the model's scheduler thread) holds its lock around every call.
 *
 * How the caller drives a batcher (one per model version):
 *
 *   enqueue:  st = batcher_enqueue(b, &item, now, &ticket)
 *                                                   -> NULL, or a status to fail the request
 *                                                      (UNAVAILABLE = 503 queue full,
 *                                                       INVALID_ARG = 400)
 *   client gone: batcher_cancel(b, ticket, &item)   -> true: removed, fail it as cancelled
 *   loop:     n = batcher_expire(b, now, out, cap)  -> fail these with a timeout error
 *             while an instance is free:
 *               batcher_next(b, now, out, cap, &n, &wake)
 *               if n == 0: break; else run out[0..n) on that instance
 *             sleep until `wake` (or batcher_expire_at(b) when no instance is free),
 *             a new enqueue, or an instance finishing; then loop.
 *
 * Semantics (docs/design/scheduling.md has the reasoning and the differences from Triton):
 *  - Levels: priority 1 is the highest; 0 means "the default level". With priority_levels
 *    == 0 there is one level and item priorities are ignored.
 *  - A batch is led by the oldest item of the highest-priority non-empty level (items whose
 *    DELAY timeout expired come after that level's other items). It then takes, in that
 *    order and then from lower levels, the items with the same shape_key, skipping items
 *    of other shapes, stopping at the first same-shape item that would push the rows past
 *    max_batch_size. Items of one (level, shape) therefore leave in arrival order.
 *  - Rows: an item counts max(1, rows) towards max_batch_size and preferred sizes.
 *  - Dispatch now when a preferred size (or, with none configured, max_batch_size) can be
 *    formed: the largest preferred size reachable; when the head cannot grow to the largest
 *    preferred size, what is reachable. Otherwise wait at most max_queue_delay for the
 *    oldest item of the batch, then send everything that fits. max_queue_delay 0 = never
 *    wait. BATCHER_WAIT_ADAPTIVE (the default) also stops waiting as soon as the observed
 *    arrival rate says the next preferred size will not be reached before the delay ends.
 *  - Timeouts (queue policy per level): an item is timed out when now > enqueue time +
 *    timeout. REJECT: it leaves the queue and is returned by batcher_expire. DELAY: it stays
 *    queued but moves behind every non-timed-out item of its level.
 *  - max_batch_size 0: the model does not batch; every item is a batch of its own, sent at
 *    once (priorities and queue policies still apply).
 */
#ifndef CINFER_SCHED_BATCHER_H
#define CINFER_SCHED_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration (mirrors config.pbtxt `dynamic_batching`) ------------------------- */

typedef enum batcher_timeout_action {
  BATCHER_TIMEOUT_REJECT = 0, /* Triton's default */
  BATCHER_TIMEOUT_DELAY = 1
} batcher_timeout_action;

typedef struct batcher_queue_policy {       /* ModelQueuePolicy */
  batcher_timeout_action timeout_action;
  uint64_t default_timeout_us;  /* 0 = no timeout */
  bool allow_timeout_override;  /* a request may shorten (never lengthen) the timeout */
  uint32_t max_queue_size;      /* per level, timed-out DELAY items included; 0 = unlimited */
} batcher_queue_policy;

typedef struct batcher_level_policy {       /* one entry of priority_queue_policy */
  uint32_t level;               /* 1..priority_levels */
  batcher_queue_policy policy;
} batcher_level_policy;

typedef enum batcher_wait_mode {
  BATCHER_WAIT_ADAPTIVE = 0,    /* default: wait only while the batch can still fill */
  BATCHER_WAIT_FULL_DELAY = 1   /* Triton: always wait out max_queue_delay */
} batcher_wait_mode;

#define BATCHER_MAX_PRIORITY_LEVELS 4096u

typedef struct batcher_config {
  int64_t max_batch_size;                 /* 0 = no batching */
  const int64_t *preferred_batch_sizes;   /* borrowed for the create call; may be NULL */
  size_t n_preferred_batch_sizes;         /* none = max_batch_size is the preferred size */
  uint64_t max_queue_delay_us;            /* 0 = never wait */
  bool preserve_ordering;                 /* not used by the batcher: the caller releases
                                             responses through a sched_order when set */
  uint32_t priority_levels;               /* 0 = one level; at most BATCHER_MAX_PRIORITY_LEVELS */
  uint32_t default_priority_level;        /* 1..priority_levels, or 0 when priority_levels 0 */
  batcher_queue_policy default_queue_policy;
  const batcher_level_policy *priority_queue_policy; /* borrowed for the create call */
  size_t n_priority_queue_policy;
  batcher_wait_mode wait_mode;
} batcher_config;

/* Checks a configuration; the error names the field ("dynamic_batching.preferred_batch_size
 * 64 is larger than max_batch_size 32"). batcher_create runs it too. */
cinfer_status *batcher_config_check(const batcher_config *cfg);

/* ---- items ---------------------------------------------------------------------------- */

typedef struct batcher_item {
  uint64_t seq;        /* caller's id (e.g. from sched_order_next_seq); not interpreted */
  int64_t rows;        /* dim 0 of the request; counts max(1, rows) towards batch sizes */
  uint64_t shape_key;  /* hash of non-batch dims + dtypes; different keys never share a batch */
  uint32_t priority;   /* 0 = default level; 1 = highest */
  uint64_t timeout_us; /* 0 = the level's default; honoured only with allow_timeout_override,
                          and only when shorter than the default (a default of 0 = none) */
  void *user;          /* caller's pointer, returned untouched */
} batcher_item;

/* The shape_key for a request: a hash of each input's name, dtype and dims except dim 0
 * (all dims when `batched` is false), independent of the order of the inputs. Requests
 * with equal keys can be concatenated along dim 0. inputs is borrowed. */
uint64_t batcher_shape_key(const cinfer_tensor *inputs, size_t n_inputs, bool batched);

/* ---- the batcher ---------------------------------------------------------------------- */

typedef struct batcher batcher;

/* Copies cfg (the arrays it points to may be freed after the call). */
cinfer_status *batcher_create(const batcher_config *cfg, batcher **out);
/* Frees the batcher. Items still queued are dropped without notice: drain them first with
 * batcher_drain if their requests must be failed. NULL is a no-op. */
void batcher_destroy(batcher *b);

/* Queues a copy of *item. Errors (the item is not queued):
 *  INVALID_ARG  rows < 0, rows > max_batch_size, priority outside 1..priority_levels;
 *  UNAVAILABLE  the item's level already holds max_queue_size items.
 * *ticket (when ticket is not NULL) receives an opaque handle for batcher_cancel.
 * Amortised O(log n) (O(1) without a timeout); allocates only to grow its arrays. */
cinfer_status *batcher_enqueue(batcher *b, const batcher_item *item, uint64_t now_ns,
                               uint64_t *ticket);

/* Takes the item with this ticket out of the batcher (the client went away) and copies it
 * to *out. Returns false, changing nothing, when the item already left (dispatched,
 * expired and collected, drained or cancelled): a ticket never names a later item. O(log n). */
bool batcher_cancel(batcher *b, uint64_t ticket, batcher_item *out);

/* Called when an instance is free. Writes the batch to run now into out[0..*n) (highest
 * priority first, then arrival order) or sets *n = 0. *wake_at_ns: when *n == 0, the time
 * to call again if nothing else happens (delay expiry, a timeout, the adaptive give-up
 * point; now_ns when timed-out items wait for batcher_expire; UINT64_MAX when the queue is
 * empty); when *n > 0, now_ns (call again if another instance is free). cap must be at
 * least max(1, max_batch_size) (INVALID_ARG otherwise). Cost: O(batch + skipped items). */
cinfer_status *batcher_next(batcher *b, uint64_t now_ns, batcher_item *out, size_t cap,
                            size_t *n, uint64_t *wake_at_ns);

/* Removes items whose REJECT timeout passed by now_ns; writes up to cap of them into out
 * and returns how many (call again while it returns cap). */
size_t batcher_expire(batcher *b, uint64_t now_ns, batcher_item *out, size_t cap);

/* The earliest time at which a queued item times out (batcher_expire or the batch order
 * would change then); UINT64_MAX when no queued item has a timeout. */
uint64_t batcher_expire_at(const batcher *b);

/* Removes every item (queued, delayed, timed out), highest priority first: for unload and
 * shutdown, so their requests can be failed. Returns how many were written (<= cap). */
size_t batcher_drain(batcher *b, batcher_item *out, size_t cap);

/* Items and rows waiting (timed-out REJECT items not yet collected excluded): the
 * cinfer_pending_requests gauge. Either pointer may be NULL. */
void batcher_pending(const batcher *b, uint64_t *requests, uint64_t *rows);

/* Walks every internal structure and checks the invariants listed in batcher.c; NULL when
 * they hold, else an INTERNAL status naming the first broken one. O(n): for tests and
 * debugging, not for the request path. */
cinfer_status *batcher_check(const batcher *b);

/* ---- preserve_ordering: release responses in arrival order ---------------------------- */

/* Give each request a seq at enqueue (sched_order_next_seq), in arrival order. When its
 * response (or error: every seq must be completed exactly once, failures included) is
 * ready, call sched_order_complete: it returns the run of seqs [*first, *first + *count)
 * that may now be sent, in that order (count 0: wait for an earlier one). The window of
 * outstanding seqs grows as needed (amortised). */
typedef struct sched_order sched_order;

cinfer_status *sched_order_create(sched_order **out);
void sched_order_destroy(sched_order *o);
uint64_t sched_order_next_seq(sched_order *o);
/* INVALID_ARG when seq was never issued or was already completed. */
cinfer_status *sched_order_complete(sched_order *o, uint64_t seq, uint64_t *first,
                                    uint64_t *count);
/* Seqs issued and not yet released. */
uint64_t sched_order_outstanding(const sched_order *o);

#ifdef __cplusplus
}
#endif
#endif
