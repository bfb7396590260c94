/* sequence.c: the sequence batcher. See sequence.h for the contract and
 * docs/design/scheduling.md ("The sequence batcher") for the policy.
 *
 * Layout. A sequence (seqsched_seq) is heap-allocated and owns a FIFO of its queued
 * requests (qnode list). Open sequences are found by key in a chained hash table; a
 * closing sequence (its END was queued) is no longer in the table but lives until its last
 * request has run. Slots are an array of sequence pointers with a count of free ones;
 * sequences without a slot wait in the backlog list (FIFO).
 *
 * States of a sequence:
 *
 *   (START) --> OPEN, in the table --END queued--> CLOSING, out of the table
 *                 |   slot -1 (backlog) or a slot          | queue empty, not running
 *                 |                                        v
 *                 +--idle past max_sequence_idle--------> FREED (slot to the backlog head)
 *
 * Invariants (seqsched_check verifies them):
 *  1. slot_seq[i] == q  <=>  q->slot == i; a sequence with slot -1 is in the backlog list
 *     exactly once; n_free_slots = the number of NULL entries.
 *  2. A sequence is in the table iff q->open; keys in the table are unique.
 *  3. A running sequence has a slot; a closing sequence has a queued or running request.
 *  4. n_queued is the sum of the sequences' queue lengths; n_seqs counts every sequence
 *     not freed.
 *  5. The backlog is empty while a slot is free.
 */
#include "sched/sequence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"

typedef struct qnode {
  seq_req req;
  uint64_t enq_ns, ord;
  struct qnode *next;
} qnode;

struct seqsched_seq {
  bool is_string;
  uint64_t id;
  char *str;
  size_t len;
  uint64_t hash;
  bool open;        /* in the table */
  bool running;     /* one request executing */
  int32_t slot;     /* -1: in the backlog */
  qnode *head, *tail;
  uint32_t n_queued;
  uint64_t last_ns; /* last enqueue or completion */
  void *state;      /* the caller's */
  seqsched_seq *hnext, *bnext;
};

struct seqsched {
  seqsched_config cfg;
  int64_t *pref;        /* ascending */
  size_t npref;
  int64_t pref_max;
  int64_t cap;          /* max(1, max_batch_size) */
  uint32_t n_slots, spi; /* slots; slots per instance (direct) */
  seqsched_seq **slot_seq;
  uint32_t n_free_slots;
  seqsched_seq **table;
  size_t n_buckets;
  seqsched_seq *back_head, *back_tail;
  uint64_t n_queued, n_seqs, n_open, ord;
  seqsched_seq **scratch; /* n_slots: candidates in seqsched_next */
};

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)

cinfer_status *seqsched_config_check(const seqsched_config *c) {
  if (c->n_instances < 1) return BAD("sequence_batching: the model has no instances");
  if (c->max_batch_size < 0) return BAD("sequence_batching: max_batch_size %lld is negative", (long long)c->max_batch_size);
  if (!(c->minimum_slot_utilization >= 0.0 && c->minimum_slot_utilization <= 1.0))
    return BAD("sequence batching minimum slot utilization must be in range (0.0, 1.0] "
               "(sequence_batching.direct.minimum_slot_utilization is %g)",
               c->minimum_slot_utilization);
  uint64_t spi = c->max_batch_size > 0 ? (uint64_t)c->max_batch_size : 1;
  if (c->strategy == SEQ_DIRECT && spi * (uint64_t)c->n_instances > SEQSCHED_MAX_SLOTS)
    return BAD("sequence_batching.direct: %llu slots (instances x max_batch_size); at most %u",
               (unsigned long long)(spi * (uint64_t)c->n_instances), SEQSCHED_MAX_SLOTS);
  if (c->strategy == SEQ_OLDEST && c->max_candidate_sequences > SEQSCHED_MAX_SLOTS)
    return BAD("sequence_batching.oldest.max_candidate_sequences %u is more than %u",
               c->max_candidate_sequences, SEQSCHED_MAX_SLOTS);
  for (size_t i = 0; i < c->n_preferred; i++) {
    if (c->preferred[i] <= 0)
      return BAD("sequence batching preferred batch size must be positive "
                 "(sequence_batching.oldest.preferred_batch_size %lld)", (long long)c->preferred[i]);
    if (c->preferred[i] > (int64_t)spi)
      return BAD("sequence batching preferred batch size must be <= max batch size "
                 "(sequence_batching.oldest.preferred_batch_size %lld, max_batch_size %lld)",
                 (long long)c->preferred[i], (long long)c->max_batch_size);
  }
  if (c->max_queue_delay_us > UINT64_MAX / 1000 || c->max_sequence_idle_us > UINT64_MAX / 2000)
    return BAD("sequence_batching: a delay is too large");
  return NULL;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

cinfer_status *seqsched_create(const seqsched_config *cfg, seqsched **out) {
  *out = NULL;
  cinfer_status *st = seqsched_config_check(cfg);
  if (st) return st;
  seqsched *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom("sequence batcher");
  s->cfg = *cfg;
  s->cfg.preferred = NULL;
  s->cap = cfg->max_batch_size > 0 ? cfg->max_batch_size : 1;
  if (cfg->strategy == SEQ_DIRECT) {
    s->spi = (uint32_t)s->cap;
    s->n_slots = s->spi * (uint32_t)cfg->n_instances;
  } else {
    s->spi = 0;
    s->n_slots = cfg->max_candidate_sequences ? cfg->max_candidate_sequences : 1;
  }
  s->pref = calloc(cfg->n_preferred + 1, sizeof *s->pref);
  s->slot_seq = calloc(s->n_slots, sizeof *s->slot_seq);
  s->scratch = calloc(s->n_slots, sizeof *s->scratch);
  s->n_buckets = 64;
  s->table = calloc(s->n_buckets, sizeof *s->table);
  if (!s->pref || !s->slot_seq || !s->scratch || !s->table) {
    seqsched_destroy(s);
    return cinfer_status_oom("sequence batcher");
  }
  for (size_t i = 0; i < cfg->n_preferred; i++) s->pref[i] = cfg->preferred[i];
  s->npref = cfg->n_preferred;
  if (s->npref == 0) s->pref[s->npref++] = s->cap;
  qsort(s->pref, s->npref, sizeof *s->pref, cmp_i64);
  s->pref_max = s->pref[s->npref - 1];
  s->n_free_slots = s->n_slots;
  *out = s;
  return NULL;
}

static void seq_free(seqsched *s, seqsched_seq *q) {
  for (qnode *n = q->head, *nx; n; n = nx) {
    nx = n->next;
    free(n);
  }
  if (q->state && s->cfg.free_state) s->cfg.free_state(q->state);
  free(q->str);
  free(q);
}

void seqsched_destroy(seqsched *s) {
  if (!s) return;
  /* every sequence is in a slot or the backlog */
  for (uint32_t i = 0; s->slot_seq && i < s->n_slots; i++)
    if (s->slot_seq[i]) seq_free(s, s->slot_seq[i]);
  for (seqsched_seq *q = s->back_head, *nx; q; q = nx) {
    nx = q->bnext;
    seq_free(s, q);
  }
  free(s->pref);
  free(s->slot_seq);
  free(s->scratch);
  free(s->table);
  free(s);
}

/* ---- keys ----------------------------------------------------------------------------- */

static uint64_t key_hash(const seq_key *k) {
  if (k->is_string) return hash_mix64(hash_fnv1a(HASH_FNV_SEED, k->str, k->len));
  return hash_mix64(k->id ^ 0x5e9u);
}

static bool key_eq(const seqsched_seq *q, const seq_key *k) {
  if (q->is_string != k->is_string) return false;
  if (!k->is_string) return q->id == k->id;
  return q->len == k->len && !memcmp(q->str, k->str, k->len);
}

static seqsched_seq *table_find(const seqsched *s, const seq_key *k, uint64_t h) {
  for (seqsched_seq *q = s->table[h & (s->n_buckets - 1)]; q; q = q->hnext)
    if (q->hash == h && key_eq(q, k)) return q;
  return NULL;
}

static void table_remove(seqsched *s, seqsched_seq *q) {
  seqsched_seq **pp = &s->table[q->hash & (s->n_buckets - 1)];
  while (*pp && *pp != q) pp = &(*pp)->hnext;
  if (*pp) *pp = q->hnext;
  q->hnext = NULL;
  q->open = false;
  s->n_open--;
}

static bool table_insert(seqsched *s, seqsched_seq *q) {
  if (s->n_open + 1 > 2 * s->n_buckets) { /* grow (failure only makes chains longer) */
    size_t nb = s->n_buckets * 2;
    seqsched_seq **nt = calloc(nb, sizeof *nt);
    if (nt) {
      for (size_t b = 0; b < s->n_buckets; b++)
        for (seqsched_seq *x = s->table[b], *nx; x; x = nx) {
          nx = x->hnext;
          x->hnext = nt[x->hash & (nb - 1)];
          nt[x->hash & (nb - 1)] = x;
        }
      free(s->table);
      s->table = nt;
      s->n_buckets = nb;
    }
  }
  seqsched_seq **b = &s->table[q->hash & (s->n_buckets - 1)];
  q->hnext = *b;
  *b = q;
  q->open = true;
  s->n_open++;
  return true;
}

/* ---- slots ---------------------------------------------------------------------------- */

/* A free slot: direct spreads sequences over instances (the instance with the fewest
 * sequences, then the lowest index); oldest takes the lowest free slot. -1 when none. */
static int32_t pick_slot(const seqsched *s) {
  if (s->n_free_slots == 0) return -1;
  if (s->cfg.strategy == SEQ_OLDEST) {
    for (uint32_t i = 0; i < s->n_slots; i++)
      if (!s->slot_seq[i]) return (int32_t)i;
    return -1;
  }
  int32_t best = -1;
  uint32_t best_used = UINT32_MAX;
  for (uint32_t inst = 0; inst < (uint32_t)s->cfg.n_instances; inst++) {
    uint32_t used = 0;
    int32_t first_free = -1;
    for (uint32_t j = 0; j < s->spi; j++) {
      uint32_t i = inst * s->spi + j;
      if (s->slot_seq[i]) used++;
      else if (first_free < 0) first_free = (int32_t)i;
    }
    if (first_free >= 0 && used < best_used) {
      best = first_free;
      best_used = used;
    }
  }
  return best;
}

static void slot_take(seqsched *s, seqsched_seq *q, int32_t slot) {
  s->slot_seq[slot] = q;
  q->slot = slot;
  s->n_free_slots--;
}

/* Frees q's slot (the backlog head takes it) and q itself. */
static void seq_release(seqsched *s, seqsched_seq *q) {
  if (q->open) table_remove(s, q);
  int32_t slot = q->slot;
  if (slot >= 0) {
    s->slot_seq[slot] = NULL;
    s->n_free_slots++;
    seqsched_seq *b = s->back_head;
    if (b) {
      s->back_head = b->bnext;
      if (!s->back_head) s->back_tail = NULL;
      b->bnext = NULL;
      slot_take(s, b, slot);
    }
  }
  s->n_queued -= q->n_queued;
  s->n_seqs--;
  seq_free(s, q);
}

/* ---- enqueue -------------------------------------------------------------------------- */

seqsched_result seqsched_enqueue(seqsched *s, const seq_req *req, uint64_t now_ns) {
  const seq_key *k = &req->key;
  if (k->is_string ? (k->len == 0 || k->len > SEQSCHED_MAX_KEY || !k->str) : k->id == 0)
    return SEQSCHED_BAD_KEY;
  uint64_t h = key_hash(k);
  seqsched_seq *q = table_find(s, k, h);
  if (!q && !req->start) return SEQSCHED_NOT_STARTED;
  qnode *n = calloc(1, sizeof *n);
  if (!n) return SEQSCHED_NO_MEMORY;
  if (!q) {
    if (s->n_seqs >= SEQSCHED_MAX_SEQUENCES) {
      free(n);
      return SEQSCHED_TOO_MANY;
    }
    q = calloc(1, sizeof *q);
    if (!q) {
      free(n);
      return SEQSCHED_NO_MEMORY;
    }
    q->is_string = k->is_string;
    q->id = k->id;
    q->hash = h;
    if (k->is_string) {
      q->str = malloc(k->len);
      if (!q->str) {
        free(q), free(n);
        return SEQSCHED_NO_MEMORY;
      }
      memcpy(q->str, k->str, k->len);
      q->len = k->len;
    }
    table_insert(s, q);
    s->n_seqs++;
    int32_t slot = pick_slot(s);
    if (slot >= 0) {
      slot_take(s, q, slot);
    } else {
      q->slot = -1;
      if (s->back_tail) s->back_tail->bnext = q;
      else s->back_head = q;
      s->back_tail = q;
    }
  }
  n->req = *req;
  n->req.seq = q;
  n->enq_ns = now_ns;
  n->ord = s->ord++;
  if (q->tail) q->tail->next = n;
  else q->head = n;
  q->tail = n;
  q->n_queued++;
  q->last_ns = now_ns;
  s->n_queued++;
  if (req->end) table_remove(s, q); /* the key is free for a new START at once */
  return SEQSCHED_OK;
}

/* ---- batches -------------------------------------------------------------------------- */

static int cmp_head_ord(const void *a, const void *b) {
  uint64_t x = (*(seqsched_seq *const *)a)->head->ord, y = (*(seqsched_seq *const *)b)->head->ord;
  return x < y ? -1 : x > y;
}

void seqsched_next(seqsched *s, int inst, uint64_t now_ns, seq_req *out, size_t cap, size_t *n,
                   uint64_t *wake_ns) {
  *n = 0;
  *wake_ns = UINT64_MAX;
  uint32_t lo = 0, hi = s->n_slots;
  if (s->cfg.strategy == SEQ_DIRECT) {
    if (inst < 0 || inst >= s->cfg.n_instances) return;
    lo = (uint32_t)inst * s->spi;
    hi = lo + s->spi;
  }
  /* candidates: sequences in these slots with a request waiting and none running */
  size_t nc = 0;
  seqsched_seq *oldest = NULL;
  for (uint32_t i = lo; i < hi; i++) {
    seqsched_seq *q = s->slot_seq[i];
    if (!q || q->running || !q->head) continue;
    if (!oldest || q->head->ord < oldest->head->ord) oldest = q;
    s->scratch[nc++] = q;
  }
  if (!oldest) return;
  /* the oldest request's shape leads; others of its shape follow, oldest first */
  uint64_t shape = oldest->head->req.shape_key;
  size_t m = 0;
  for (size_t i = 0; i < nc; i++)
    if (s->scratch[i]->head->req.shape_key == shape) s->scratch[m++] = s->scratch[i];
  qsort(s->scratch, m, sizeof *s->scratch, cmp_head_ord);
  size_t limit = (size_t)s->cap < cap ? (size_t)s->cap : cap;
  size_t take = m < limit ? m : limit;
  uint64_t delay_ns = s->cfg.max_queue_delay_us * 1000u;
  uint64_t due = oldest->head->enq_ns + delay_ns;
  bool go = delay_ns == 0 || now_ns >= due;
  if (!go && s->cfg.strategy == SEQ_DIRECT) {
    double need = ceil(s->cfg.minimum_slot_utilization * (double)s->spi);
    if (need < 1) need = 1;
    go = (double)take >= need || take == s->spi;
  } else if (!go) {
    if ((int64_t)take >= s->pref_max) {
      go = true;
    } else {
      for (size_t i = 0; i < s->npref; i++)
        if (s->pref[i] == (int64_t)take) go = true;
    }
  }
  if (s->cfg.strategy == SEQ_OLDEST && (int64_t)take > s->pref_max) take = (size_t)s->pref_max;
  if (!go) {
    *wake_ns = due;
    return;
  }
  for (size_t i = 0; i < take; i++) {
    seqsched_seq *q = s->scratch[i];
    qnode *h = q->head;
    q->head = h->next;
    if (!q->head) q->tail = NULL;
    q->n_queued--;
    s->n_queued--;
    q->running = true;
    out[i] = h->req;
    out[i].seq = q;
    out[i].state = &q->state;
    free(h);
  }
  *n = take;
}

void seqsched_done(seqsched *s, const seq_req *reqs, size_t n, uint64_t now_ns) {
  for (size_t i = 0; i < n; i++) {
    seqsched_seq *q = reqs[i].seq;
    if (!q) continue;
    q->running = false;
    q->last_ns = now_ns;
    if (!q->open && !q->head) seq_release(s, q); /* its END has run */
  }
}

static bool idle_due(const seqsched *s, const seqsched_seq *q, uint64_t *at) {
  if (!q || !q->open || q->running || q->head || s->cfg.max_sequence_idle_us == 0) return false;
  *at = q->last_ns + s->cfg.max_sequence_idle_us * 1000u + 1; /* idle "longer than" */
  return true;
}

size_t seqsched_expire(seqsched *s, uint64_t now_ns) {
  size_t n = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    uint64_t at;
    seqsched_seq *q = s->slot_seq[i];
    if (idle_due(s, q, &at) && now_ns >= at) {
      seq_release(s, q);
      n++;
    }
  }
  return n;
}

uint64_t seqsched_expire_at(const seqsched *s) {
  uint64_t best = UINT64_MAX;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    uint64_t at;
    if (idle_due(s, s->slot_seq[i], &at) && at < best) best = at;
  }
  return best;
}

static size_t drain_seq(seqsched *s, seqsched_seq *q, seq_req *out, size_t cap, size_t k) {
  while (q && q->head && k < cap) {
    qnode *h = q->head;
    q->head = h->next;
    if (!q->head) q->tail = NULL;
    q->n_queued--;
    s->n_queued--;
    out[k] = h->req;
    out[k].seq = NULL; /* never run: nothing to pass to seqsched_done */
    out[k].state = NULL;
    k++;
    free(h);
  }
  return k;
}

size_t seqsched_drain(seqsched *s, seq_req *out, size_t cap) {
  size_t k = 0;
  for (uint32_t i = 0; i < s->n_slots && k < cap; i++) k = drain_seq(s, s->slot_seq[i], out, cap, k);
  for (seqsched_seq *q = s->back_head; q && k < cap; q = q->bnext) k = drain_seq(s, q, out, cap, k);
  /* a closing sequence left with nothing would never be released (invariant 3) */
  for (seqsched_seq **pp = &s->back_head; *pp;) {
    seqsched_seq *q = *pp;
    if (!q->open && !q->head) {
      *pp = q->bnext;
      if (s->back_tail == q) s->back_tail = NULL;
      s->n_seqs--;
      seq_free(s, q);
    } else {
      pp = &q->bnext;
    }
  }
  if (!s->back_tail)
    for (seqsched_seq *q = s->back_head; q; q = q->bnext) s->back_tail = q;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    seqsched_seq *q = s->slot_seq[i];
    if (q && !q->open && !q->running && !q->head) {
      seq_release(s, q);
      i--; /* a backlog sequence may have taken the slot: look at it again */
    }
  }
  return k;
}

void seqsched_get_stats(const seqsched *s, seqsched_stats *o) {
  o->queued = s->n_queued;
  o->open = s->n_seqs;
  o->slots_used = s->n_slots - s->n_free_slots;
  o->backlog = 0;
  for (seqsched_seq *q = s->back_head; q; q = q->bnext) o->backlog++;
}

#define CHECK(c, ...) \
  do {                \
    if (!(c)) return cinfer_status_new(CINFER_INTERNAL, __VA_ARGS__); \
  } while (0)

cinfer_status *seqsched_check(const seqsched *s) {
  uint64_t queued = 0, seqs = 0, open = 0;
  uint32_t nfree = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    seqsched_seq *q = s->slot_seq[i];
    if (!q) {
      nfree++;
      continue;
    }
    CHECK(q->slot == (int32_t)i, "invariant 1: slot %u holds a sequence with slot %d", i, q->slot);
    CHECK(q->open || q->running || q->head, "invariant 3: a closing sequence in slot %u has nothing left", i);
    uint32_t len = 0;
    for (qnode *n = q->head; n; n = n->next) len++;
    CHECK(len == q->n_queued, "invariant 4: queue length %u, count %u", len, q->n_queued);
    queued += len;
    seqs++;
    open += q->open;
  }
  CHECK(nfree == s->n_free_slots, "invariant 1: %u free slots, counted %u", nfree, s->n_free_slots);
  for (seqsched_seq *q = s->back_head; q; q = q->bnext) {
    CHECK(q->slot == -1, "invariant 1: a backlog sequence has slot %d", q->slot);
    CHECK(!q->running, "invariant 3: a backlog sequence is running");
    CHECK(nfree == 0, "invariant 5: backlog while %u slots are free", nfree);
    uint32_t len = 0;
    for (qnode *n = q->head; n; n = n->next) len++;
    CHECK(len == q->n_queued, "invariant 4: backlog queue length %u, count %u", len, q->n_queued);
    queued += len;
    seqs++;
    open += q->open;
  }
  CHECK(queued == s->n_queued, "invariant 4: %llu queued, counted %llu", (unsigned long long)s->n_queued,
        (unsigned long long)queued);
  CHECK(seqs == s->n_seqs, "invariant 4: %llu sequences, counted %llu", (unsigned long long)s->n_seqs,
        (unsigned long long)seqs);
  uint64_t in_table = 0;
  for (size_t b = 0; b < s->n_buckets; b++)
    for (seqsched_seq *q = s->table[b]; q; q = q->hnext) {
      CHECK(q->open, "invariant 2: a closed sequence is in the table");
      for (seqsched_seq *r = q->hnext; r; r = r->hnext)
        CHECK(!(r->is_string == q->is_string && (q->is_string ? (r->len == q->len && !memcmp(r->str, q->str, q->len)) : r->id == q->id)),
              "invariant 2: a key is in the table twice");
      in_table++;
    }
  CHECK(in_table == open && open == s->n_open, "invariant 2: %llu in the table, %llu open, count %llu",
        (unsigned long long)in_table, (unsigned long long)open, (unsigned long long)s->n_open);
  return NULL;
}
