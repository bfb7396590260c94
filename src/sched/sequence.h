/* sched/sequence.h: the sequence batcher (Triton's `sequence_batching` semantics) for
 * stateful models. Pure, deterministic logic like batcher.h: no threads, no clock, no I/O;
 * every call that depends on time takes `now_ns`; the caller (the model's scheduler) holds
 * its lock around every call.
 *
 * Sequences. A request belongs to the sequence named by its key (a non-zero integer or a
 * non-empty string: the request's `sequence_id`). A request with START opens a sequence
 * (if the key already names one, the new START continues in that sequence: its queued
 * requests run first, as in Triton, and the caller resets the state at the START); a
 * request without START must name an open sequence (else SEQSCHED_NOT_STARTED). A request
 * with END closes the key at once: a later request with that key must START again, while
 * the closing sequence's queued requests still run. At most one request of a sequence is
 * executing at a time, and a sequence's requests execute in arrival order.
 *
 * Slots. Each open sequence needs a slot to run. With SEQ_DIRECT the slots are
 * (instance, row) pairs: n_instances x max(1, max_batch_size); a sequence keeps its slot
 * (so its instance) for its life, and a batch for instance i holds the next request of
 * some of i's sequences. With SEQ_OLDEST there are max_candidate_sequences slots not bound
 * to an instance: any free instance takes a batch of the oldest waiting requests of the
 * candidate sequences, one request per sequence. A sequence that finds no free slot waits
 * in the backlog (FIFO) until one frees. A slot frees when its sequence's END request has
 * executed, or when the sequence was idle (nothing queued, nothing executing) for longer
 * than max_sequence_idle_us (seqsched_expire): later requests of that key are then
 * SEQSCHED_NOT_STARTED.
 *
 * When a batch goes (requests in one batch always have equal shape_key; the oldest waiting
 * request leads, other shapes wait for a later batch):
 *   DIRECT  at once when at least ceil(minimum_slot_utilization x slots) of the instance's
 *           slots have a request waiting (at least one), or every slot does, or
 *           max_queue_delay is 0; otherwise when the oldest waiting request has waited
 *           max_queue_delay.
 *   OLDEST  at once when the largest preferred size (default max_batch_size) is reached,
 *           or the number waiting is a preferred size, or max_queue_delay is 0; otherwise
 *           when the oldest waiting request has waited max_queue_delay.
 *
 * Usage (the server's worker for instance i):
 *   enqueue:  seqsched_enqueue(s, &req, now)     -> SEQSCHED_OK or an error code
 *   loop:     seqsched_expire(s, now)            (frees idle sequences; their states go to
 *                                                 cfg.free_state)
 *             seqsched_next(s, i, now, out, cap, &n, &wake)
 *             n > 0: run out[0..n) on instance i, then seqsched_done(s, out, n, now_after)
 *             n == 0: sleep until min(wake, seqsched_expire_at(s)), an enqueue or a done.
 */
#ifndef CINFER_SCHED_SEQUENCE_H
#define CINFER_SCHED_SEQUENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum seq_strategy { SEQ_DIRECT = 0, SEQ_OLDEST = 1 } seq_strategy;

/* Open sequences (in slots or in the backlog) at most; a START beyond is refused. */
#define SEQSCHED_MAX_SEQUENCES 65536u
#define SEQSCHED_MAX_SLOTS 65536u
#define SEQSCHED_MAX_KEY 1024u /* bytes of a string sequence id */

typedef struct seqsched_config {
  seq_strategy strategy;
  int n_instances;                  /* >= 1 */
  int64_t max_batch_size;           /* 0 = the model does not batch: batches of one */
  uint64_t max_sequence_idle_us;    /* 0 = never released for idleness */
  uint64_t max_queue_delay_us;      /* direct and oldest */
  double minimum_slot_utilization;  /* direct: 0..1 */
  uint32_t max_candidate_sequences; /* oldest: slots; 0 = 1 (Triton's default) */
  const int64_t *preferred;         /* oldest; borrowed for the create call */
  size_t n_preferred;
  void (*free_state)(void *state);  /* frees a sequence's caller state (may be NULL) */
} seqsched_config;

/* Checks a configuration; the error names the field. */
cinfer_status *seqsched_config_check(const seqsched_config *cfg);

typedef struct seq_key {
  bool is_string;
  uint64_t id;     /* is_string false: non-zero */
  const char *str; /* is_string true: str[0..len), len 1..SEQSCHED_MAX_KEY; the batcher
                      keeps a copy; the request's own pointer comes back in its seq_req,
                      so it must live as long as the request (it points into it) */
  size_t len;
} seq_key;

typedef struct seqsched_seq seqsched_seq; /* an open (or closing) sequence */

typedef struct seq_req {
  seq_key key;
  bool start, end;
  uint64_t shape_key;  /* requests with different keys never share a batch */
  void *user;          /* the caller's request, returned untouched */
  /* filled by seqsched_next: */
  seqsched_seq *seq;   /* pass back to seqsched_done */
  void **state;        /* the sequence's caller-state slot (NULL at first; the caller may
                          set it while the request executes; freed with free_state) */
} seq_req;

typedef enum seqsched_result {
  SEQSCHED_OK = 0,
  SEQSCHED_NOT_STARTED,   /* no open sequence with this key and no START */
  SEQSCHED_TOO_MANY,      /* SEQSCHED_MAX_SEQUENCES open */
  SEQSCHED_BAD_KEY,       /* id 0, empty or too long string */
  SEQSCHED_NO_MEMORY
} seqsched_result;

typedef struct seqsched seqsched;

cinfer_status *seqsched_create(const seqsched_config *cfg, seqsched **out);
/* Frees everything; queued requests are dropped without notice (drain them first);
 * caller states go to free_state. */
void seqsched_destroy(seqsched *s);

seqsched_result seqsched_enqueue(seqsched *s, const seq_req *req, uint64_t now_ns);

/* The batch instance `inst` should run now: out[0..*n), at most one request per sequence,
 * oldest first. cap must be >= max(1, max_batch_size). *wake_ns when *n == 0: when to call
 * again if nothing happens (UINT64_MAX: nothing is waiting for this instance). */
void seqsched_next(seqsched *s, int inst, uint64_t now_ns, seq_req *out, size_t cap, size_t *n,
                   uint64_t *wake_ns);

/* The requests of a batch have finished (delivered or failed): their sequences may run
 * their next request; a sequence whose END ran frees its slot (the oldest backlog
 * sequence takes it). */
void seqsched_done(seqsched *s, const seq_req *reqs, size_t n, uint64_t now_ns);

/* Releases sequences idle past max_sequence_idle_us; returns how many. */
size_t seqsched_expire(seqsched *s, uint64_t now_ns);
/* When the next idle release is due (UINT64_MAX: none). */
uint64_t seqsched_expire_at(const seqsched *s);

/* Takes every queued request out (unload): up to cap into out; returns how many. */
size_t seqsched_drain(seqsched *s, seq_req *out, size_t cap);

typedef struct seqsched_stats {
  uint64_t queued;      /* requests waiting */
  uint64_t open;        /* sequences open or closing */
  uint64_t backlog;     /* sequences waiting for a slot */
  uint64_t slots_used;
} seqsched_stats;
void seqsched_get_stats(const seqsched *s, seqsched_stats *out);

/* Checks the invariants listed in sequence.c (tests). */
cinfer_status *seqsched_check(const seqsched *s);

#ifdef __cplusplus
}
#endif
#endif
