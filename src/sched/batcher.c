/* batcher.c: the dynamic batcher. See batcher.h for the contract and
 * docs/design/scheduling.md for the policy and how it differs from Triton.
 *
 * Layout. Items live in a node pool (array, free list, doubled when full; indices are
 * stable). Each priority level has two doubly linked lists of node indices: `queued`
 * (arrival order) and `delayed` (items whose DELAY timeout passed, in expiry order).
 * Items whose REJECT timeout passed sit in one `expired` list until batcher_expire takes
 * them. Items with a timeout are also in a binary min-heap keyed by (deadline, arrival
 * order), each node knowing its heap slot, so removal at dispatch is O(log n).
 *
 * Invariants (batcher_check verifies them all; the randomized test calls it):
 *  1. A node is in exactly one of: free list, one level's queued list, one level's delayed
 *     list, the expired list (its `state` says which).
 *  2. A node is in the heap iff it is QUEUED and has a deadline; heap_pos is its slot.
 *  3. level.count = its queued + delayed nodes; pending_reqs/pending_rows sum them.
 *  4. first_level <= the smallest level with count > 0 (a hint for the head search).
 *  5. Timeouts are applied (heap top has deadline >= now) before a batch is formed.
 */
#include "core/hash.h"
#include "sched/batcher.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define MAX_NODES (UINT32_MAX / 2)
#define NO_DEADLINE UINT64_MAX

enum { ST_FREE = 0, ST_QUEUED, ST_DELAYED, ST_EXPIRED };

typedef struct bnode {
  batcher_item item;
  uint64_t enq_ns;
  uint64_t deadline_ns; /* timed out when now > deadline_ns; NO_DEADLINE = never */
  uint64_t ord;         /* arrival number: heap tie-break, deterministic */
  int64_t rows;         /* counted rows: max(1, item.rows) */
  uint32_t prev, next;
  uint32_t heap_pos;
  uint32_t level; /* 0-based */
  uint32_t gen;   /* bumped each time the node is freed: stale tickets do not match */
  uint8_t state;
} bnode;

typedef struct blist {
  uint32_t head, tail;
} blist;

typedef struct blevel {
  batcher_queue_policy policy;
  blist queued, delayed;
  uint32_t count;
} blevel;

struct batcher {
  int64_t max_batch;  /* 0 = no batching */
  int64_t *pref;      /* ascending, unique; {max_batch} when none configured */
  size_t npref;
  int64_t pref_max;
  uint64_t delay_ns;
  batcher_wait_mode wait_mode;
  bool priorities;        /* priority_levels > 0: item priorities are honoured */
  uint32_t nlevels;       /* >= 1 */
  uint32_t default_level; /* 0-based */
  blevel *levels;
  uint32_t first_level;

  bnode *nodes;
  uint32_t cap, free_head;
  uint32_t *heap;
  uint32_t heap_n;
  blist expired;
  uint64_t expired_n;
  uint64_t pending_reqs;
  uint64_t pending_rows;
  uint64_t next_ord;

  /* candidate batch scratch: at most max(1, max_batch) items (each counts >= 1 row) */
  uint32_t *cand;
  int64_t *cum;
  size_t cand_cap;
  size_t skip_limit; /* other-shape items a batch search may step over */

  /* arrival-rate estimate for BATCHER_WAIT_ADAPTIVE: EWMA of ns between rows, averaging
   * over about one largest-preferred batch of rows (so a burst of simultaneous requests,
   * e.g. a closed-loop client group, does not read as an unbounded rate) */
  double ewma_alpha;
  double gap_ns_per_row;
  uint64_t last_arrival_ns;
  uint32_t arrivals; /* saturates; 0 = no arrival yet, 1 = no gap yet */
};

/* ---- small helpers ------------------------------------------------------------------ */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t us_to_ns(uint64_t us) { return us > UINT64_MAX / 1000 ? UINT64_MAX : us * 1000; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void list_push_back(batcher *b, blist *l, uint32_t i) {
  bnode *n = &b->nodes[i];
  n->prev = l->tail;
  n->next = NIL;
  if (l->tail != NIL) b->nodes[l->tail].next = i;
  else l->head = i;
  l->tail = i;
}

static void list_unlink(batcher *b, blist *l, uint32_t i) {
  bnode *n = &b->nodes[i];
  if (n->prev != NIL) b->nodes[n->prev].next = n->next;
  else l->head = n->next;
  if (n->next != NIL) b->nodes[n->next].prev = n->prev;
  else l->tail = n->prev;
  n->prev = n->next = NIL;
}

/* ---- timeout heap ------------------------------------------------------------------- */

static bool heap_less(const batcher *b, uint32_t x, uint32_t y) {
  const bnode *a = &b->nodes[x], *c = &b->nodes[y];
  if (a->deadline_ns != c->deadline_ns) return a->deadline_ns < c->deadline_ns;
  return a->ord < c->ord;
}

static void heap_set(batcher *b, uint32_t pos, uint32_t i) {
  b->heap[pos] = i;
  b->nodes[i].heap_pos = pos;
}

static void heap_up(batcher *b, uint32_t pos) {
  uint32_t i = b->heap[pos];
  while (pos > 0) {
    uint32_t parent = (pos - 1) / 2;
    if (!heap_less(b, i, b->heap[parent])) break;
    heap_set(b, pos, b->heap[parent]);
    pos = parent;
  }
  heap_set(b, pos, i);
}

static void heap_down(batcher *b, uint32_t pos) {
  uint32_t i = b->heap[pos];
  for (;;) {
    uint32_t l = 2 * pos + 1, r = l + 1, m = pos;
    uint32_t best = i;
    if (l < b->heap_n && heap_less(b, b->heap[l], best)) { m = l; best = b->heap[l]; }
    if (r < b->heap_n && heap_less(b, b->heap[r], best)) { m = r; best = b->heap[r]; }
    if (m == pos) break;
    heap_set(b, pos, best);
    pos = m;
  }
  heap_set(b, pos, i);
}

static void heap_remove(batcher *b, uint32_t i) {
  uint32_t pos = b->nodes[i].heap_pos;
  assert(pos < b->heap_n && b->heap[pos] == i);
  b->nodes[i].heap_pos = NIL;
  uint32_t last = b->heap[--b->heap_n];
  if (pos == b->heap_n) return;
  heap_set(b, pos, last);
  if (pos > 0 && heap_less(b, last, b->heap[(pos - 1) / 2])) heap_up(b, pos);
  else heap_down(b, pos);
}

/* ---- node pool ---------------------------------------------------------------------- */

static bool pool_grow(batcher *b) {
  if (b->cap >= MAX_NODES) return false;
  uint32_t ncap = b->cap ? (b->cap > MAX_NODES / 2 ? MAX_NODES : b->cap * 2) : 64;
  bnode *nodes = realloc(b->nodes, (size_t)ncap * sizeof *nodes);
  if (!nodes) return false;
  b->nodes = nodes;
  uint32_t *heap = realloc(b->heap, (size_t)ncap * sizeof *heap);
  if (!heap) return false; /* nodes stays grown; cap unchanged, still consistent */
  b->heap = heap;
  for (uint32_t i = ncap; i-- > b->cap;) {
    memset(&nodes[i], 0, sizeof nodes[i]);
    nodes[i].state = ST_FREE;
    nodes[i].next = b->free_head;
    b->free_head = i;
  }
  b->cap = ncap;
  return true;
}

static void node_free(batcher *b, uint32_t i) {
  b->nodes[i].state = ST_FREE;
  b->nodes[i].gen++;
  b->nodes[i].next = b->free_head;
  b->free_head = i;
}

/* Takes node i out of its level (queued or delayed) and the heap; does not free it. */
static void node_detach(batcher *b, uint32_t i) {
  bnode *n = &b->nodes[i];
  blevel *lv = &b->levels[n->level];
  if (n->state == ST_QUEUED) {
    list_unlink(b, &lv->queued, i);
    if (n->heap_pos != NIL) heap_remove(b, i);
  } else {
    assert(n->state == ST_DELAYED);
    list_unlink(b, &lv->delayed, i);
  }
  lv->count--;
  b->pending_reqs--;
  b->pending_rows -= (uint64_t)n->rows;
}

/* ---- configuration ------------------------------------------------------------------ */

static cinfer_status *check_policy(const batcher_queue_policy *p, const char *where) {
  if (p->timeout_action != BATCHER_TIMEOUT_REJECT && p->timeout_action != BATCHER_TIMEOUT_DELAY)
    return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.%s.timeout_action %d is not "
                             "REJECT or DELAY", where, (int)p->timeout_action);
  return NULL;
}

cinfer_status *batcher_config_check(const batcher_config *cfg) {
  if (!cfg) return cinfer_status_new(CINFER_INVALID_ARG, "batcher config is NULL");
  if (cfg->max_batch_size < 0 || cfg->max_batch_size > INT32_MAX)
    return cinfer_status_new(CINFER_INVALID_ARG, "max_batch_size %lld is outside 0..%d",
                             (long long)cfg->max_batch_size, INT32_MAX);
  if (cfg->n_preferred_batch_sizes && !cfg->preferred_batch_sizes)
    return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.preferred_batch_size: "
                             "%zu sizes but no array", cfg->n_preferred_batch_sizes);
  for (size_t i = 0; i < cfg->n_preferred_batch_sizes; i++) {
    int64_t p = cfg->preferred_batch_sizes[i];
    if (cfg->max_batch_size == 0)
      return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.preferred_batch_size is "
                               "set but max_batch_size is 0 (the model does not batch)");
    if (p < 1)
      return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.preferred_batch_size %lld "
                               "must be positive", (long long)p);
    if (p > cfg->max_batch_size)
      return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.preferred_batch_size %lld "
                               "is larger than max_batch_size %lld", (long long)p,
                               (long long)cfg->max_batch_size);
  }
  if (cfg->wait_mode != BATCHER_WAIT_ADAPTIVE && cfg->wait_mode != BATCHER_WAIT_FULL_DELAY)
    return cinfer_status_new(CINFER_INVALID_ARG, "batcher wait_mode %d is unknown",
                             (int)cfg->wait_mode);
  if (cfg->priority_levels > BATCHER_MAX_PRIORITY_LEVELS)
    return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.priority_levels %u is more "
                             "than the supported %u", cfg->priority_levels,
                             BATCHER_MAX_PRIORITY_LEVELS);
  if (cfg->priority_levels == 0) {
    if (cfg->default_priority_level != 0)
      return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.default_priority_level %u "
                               "needs priority_levels > 0", cfg->default_priority_level);
  } else if (cfg->default_priority_level < 1 ||
             cfg->default_priority_level > cfg->priority_levels) {
    return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.default_priority_level %u "
                             "must be in 1..%u (priority_levels)", cfg->default_priority_level,
                             cfg->priority_levels);
  }
  cinfer_status *st = check_policy(&cfg->default_queue_policy, "default_queue_policy");
  if (st) return st;
  if (cfg->n_priority_queue_policy && !cfg->priority_queue_policy)
    return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.priority_queue_policy: "
                             "%zu entries but no array", cfg->n_priority_queue_policy);
  for (size_t i = 0; i < cfg->n_priority_queue_policy; i++) {
    const batcher_level_policy *lp = &cfg->priority_queue_policy[i];
    if (lp->level < 1 || lp->level > cfg->priority_levels)
      return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.priority_queue_policy key "
                               "%u must be in 1..%u (priority_levels)", lp->level,
                               cfg->priority_levels);
    for (size_t j = 0; j < i; j++)
      if (cfg->priority_queue_policy[j].level == lp->level)
        return cinfer_status_new(CINFER_INVALID_ARG, "dynamic_batching.priority_queue_policy "
                                 "key %u is given twice", lp->level);
    st = check_policy(&lp->policy, "priority_queue_policy");
    if (st) return cinfer_status_prefix(st, "level %u", lp->level);
  }
  return NULL;
}

cinfer_status *batcher_create(const batcher_config *cfg, batcher **out) {
  if (!out) return cinfer_status_new(CINFER_INVALID_ARG, "batcher_create: out is NULL");
  *out = NULL;
  cinfer_status *st = batcher_config_check(cfg);
  if (st) return st;
  batcher *b = calloc(1, sizeof *b);
  if (!b) return cinfer_status_oom("creating a batcher");
  b->max_batch = cfg->max_batch_size;
  b->delay_ns = us_to_ns(cfg->max_queue_delay_us);
  b->wait_mode = cfg->wait_mode;
  b->priorities = cfg->priority_levels > 0;
  b->nlevels = cfg->priority_levels ? cfg->priority_levels : 1;
  b->default_level = cfg->priority_levels ? cfg->default_priority_level - 1 : 0;
  b->free_head = NIL;
  b->expired.head = b->expired.tail = NIL;
  b->cand_cap = b->max_batch > 0 ? (size_t)b->max_batch : 1;
  b->skip_limit = 4 * b->cand_cap + 64;

  size_t np = cfg->n_preferred_batch_sizes;
  b->pref = malloc((np ? np : 1) * sizeof *b->pref);
  b->levels = calloc(b->nlevels, sizeof *b->levels);
  b->cand = malloc(b->cand_cap * sizeof *b->cand);
  b->cum = malloc(b->cand_cap * sizeof *b->cum);
  if (!b->pref || !b->levels || !b->cand || !b->cum) {
    batcher_destroy(b);
    return cinfer_status_oom("creating a batcher");
  }
  if (np) {
    memcpy(b->pref, cfg->preferred_batch_sizes, np * sizeof *b->pref);
    qsort(b->pref, np, sizeof *b->pref, cmp_i64);
    size_t u = 0; /* Triton keeps them in a set: duplicates merge */
    for (size_t i = 0; i < np; i++)
      if (u == 0 || b->pref[u - 1] != b->pref[i]) b->pref[u++] = b->pref[i];
    b->npref = u;
  } else if (b->max_batch > 0) {
    b->pref[0] = b->max_batch; /* Triton: no preferred sizes = max_batch_size */
    b->npref = 1;
  }
  b->pref_max = b->npref ? b->pref[b->npref - 1] : 1;
  b->ewma_alpha = 1.0 / (double)(b->pref_max < 4 ? 4 : b->pref_max > 64 ? 64 : b->pref_max);

  for (uint32_t l = 0; l < b->nlevels; l++) {
    b->levels[l].policy = cfg->default_queue_policy;
    b->levels[l].queued.head = b->levels[l].queued.tail = NIL;
    b->levels[l].delayed.head = b->levels[l].delayed.tail = NIL;
  }
  for (size_t i = 0; i < cfg->n_priority_queue_policy; i++)
    b->levels[cfg->priority_queue_policy[i].level - 1].policy = cfg->priority_queue_policy[i].policy;
  *out = b;
  return NULL;
}

void batcher_destroy(batcher *b) {
  if (!b) return;
  free(b->pref);
  free(b->levels);
  free(b->cand);
  free(b->cum);
  free(b->nodes);
  free(b->heap);
  free(b);
}

/* ---- enqueue ------------------------------------------------------------------------ */

static void note_arrival(batcher *b, uint64_t now_ns, int64_t rows) {
  if (b->arrivals > 0 && now_ns >= b->last_arrival_ns) {
    double sample = (double)(now_ns - b->last_arrival_ns) / (double)rows;
    if (b->arrivals == 1) b->gap_ns_per_row = sample;
    else b->gap_ns_per_row += (sample - b->gap_ns_per_row) * b->ewma_alpha;
  }
  if (b->arrivals < UINT32_MAX) b->arrivals++;
  b->last_arrival_ns = now_ns;
}

cinfer_status *batcher_enqueue(batcher *b, const batcher_item *item, uint64_t now_ns,
                               uint64_t *ticket) {
  if (item->rows < 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "batch dimension %lld is negative",
                             (long long)item->rows);
  if (b->max_batch > 0 && item->rows > b->max_batch)
    return cinfer_status_new(CINFER_INVALID_ARG, "batch size %lld exceeds the model's "
                             "max_batch_size %lld", (long long)item->rows,
                             (long long)b->max_batch);
  uint32_t level = b->default_level;
  if (b->priorities && item->priority != 0) {
    if (item->priority > b->nlevels)
      return cinfer_status_new(CINFER_INVALID_ARG, "priority %u is outside 1..%u (0 = the "
                               "default level %u)", item->priority, b->nlevels,
                               b->default_level + 1);
    level = item->priority - 1;
  }
  blevel *lv = &b->levels[level];
  if (lv->policy.max_queue_size && lv->count >= lv->policy.max_queue_size) {
    if (b->priorities)
      return cinfer_status_new(CINFER_UNAVAILABLE, "Exceeds maximum queue size: inference request "
                               "queue is full (max_queue_size %u, priority level %u)",
                               lv->policy.max_queue_size, level + 1);
    return cinfer_status_new(CINFER_UNAVAILABLE, "Exceeds maximum queue size: inference request "
                             "queue is full (max_queue_size %u)", lv->policy.max_queue_size);
  }
  if (b->free_head == NIL && !pool_grow(b))
    return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "batcher queue cannot grow past %u "
                             "items (out of memory or at its limit)", b->cap);

  uint64_t timeout_us = lv->policy.default_timeout_us;
  if (lv->policy.allow_timeout_override && item->timeout_us != 0 &&
      (timeout_us == 0 || item->timeout_us < timeout_us))
    timeout_us = item->timeout_us;

  uint32_t i = b->free_head;
  bnode *n = &b->nodes[i];
  b->free_head = n->next;
  n->item = *item;
  n->rows = item->rows > 0 ? item->rows : 1;
  n->enq_ns = now_ns;
  n->deadline_ns = timeout_us ? min_u64(sat_add(now_ns, us_to_ns(timeout_us)), NO_DEADLINE - 1)
                              : NO_DEADLINE;
  n->ord = b->next_ord++;
  n->level = level;
  n->state = ST_QUEUED;
  n->heap_pos = NIL;
  list_push_back(b, &lv->queued, i);
  if (n->deadline_ns != NO_DEADLINE) {
    b->heap[b->heap_n] = i;
    b->heap_n++;
    heap_up(b, b->heap_n - 1);
  }
  lv->count++;
  b->pending_reqs++;
  b->pending_rows += (uint64_t)n->rows;
  if (level < b->first_level) b->first_level = level;
  note_arrival(b, now_ns, n->rows);
  if (ticket) *ticket = (uint64_t)n->gen << 32 | i;
  return NULL;
}

bool batcher_cancel(batcher *b, uint64_t ticket, batcher_item *out) {
  uint32_t i = (uint32_t)ticket;
  if (i >= b->cap || b->nodes[i].gen != (uint32_t)(ticket >> 32) || b->nodes[i].state == ST_FREE)
    return false;
  *out = b->nodes[i].item;
  if (b->nodes[i].state == ST_EXPIRED) {
    list_unlink(b, &b->expired, i);
    b->expired_n--;
  } else {
    node_detach(b, i);
  }
  node_free(b, i);
  return true;
}

/* ---- timeouts ----------------------------------------------------------------------- */

static void apply_timeouts(batcher *b, uint64_t now_ns) {
  while (b->heap_n > 0) {
    uint32_t i = b->heap[0];
    bnode *n = &b->nodes[i];
    if (!(now_ns > n->deadline_ns)) break;
    blevel *lv = &b->levels[n->level];
    heap_remove(b, i);
    list_unlink(b, &lv->queued, i);
    if (lv->policy.timeout_action == BATCHER_TIMEOUT_DELAY) {
      n->state = ST_DELAYED;
      list_push_back(b, &lv->delayed, i);
    } else {
      lv->count--;
      b->pending_reqs--;
      b->pending_rows -= (uint64_t)n->rows;
      n->state = ST_EXPIRED;
      list_push_back(b, &b->expired, i);
      b->expired_n++;
    }
  }
}

uint64_t batcher_expire_at(const batcher *b) {
  return b->heap_n ? b->nodes[b->heap[0]].deadline_ns + 1 : UINT64_MAX;
}

/* Moves up to cap REJECT-timed-out items into out; returns how many. */
static size_t take_expired(batcher *b, batcher_item *out, size_t cap) {
  size_t k = 0;
  while (k < cap && b->expired.head != NIL) {
    uint32_t i = b->expired.head;
    list_unlink(b, &b->expired, i);
    b->expired_n--;
    out[k++] = b->nodes[i].item;
    node_free(b, i);
  }
  return k;
}

size_t batcher_expire(batcher *b, uint64_t now_ns, batcher_item *out, size_t cap) {
  apply_timeouts(b, now_ns);
  return take_expired(b, out, cap);
}

/* ---- batch formation ---------------------------------------------------------------- */

static uint32_t head_level(batcher *b) {
  while (b->first_level < b->nlevels && b->levels[b->first_level].count == 0) b->first_level++;
  return b->first_level;
}

static bool is_preferred(const batcher *b, int64_t rows) {
  return bsearch(&rows, b->pref, b->npref, sizeof *b->pref, cmp_i64) != NULL;
}

/* Fills cand/cum with the candidate batch led by the head item. Returns the count;
 * *overflow says a same-shape item was left out because it would pass max_batch_size. */
static size_t collect(batcher *b, uint32_t h, bool *overflow) {
  const blevel *hl = &b->levels[h];
  uint32_t head = hl->queued.head != NIL ? hl->queued.head : hl->delayed.head;
  uint64_t shape = b->nodes[head].item.shape_key;
  int64_t limit = b->max_batch > 0 ? b->max_batch : 0;
  size_t k = 0, skipped = 0;
  int64_t rows = 0;
  *overflow = false;
  if (limit == 0) { /* no batching: the head alone */
    b->cand[0] = head;
    b->cum[0] = b->nodes[head].rows;
    return 1;
  }
  for (uint32_t l = h; l < b->nlevels; l++) {
    const blevel *lv = &b->levels[l];
    if (lv->count == 0) continue;
    for (int cls = 0; cls < 2; cls++) {
      for (uint32_t i = cls ? lv->delayed.head : lv->queued.head; i != NIL; i = b->nodes[i].next) {
        const bnode *n = &b->nodes[i];
        if (n->item.shape_key != shape) {
          if (++skipped > b->skip_limit) return k;
          continue;
        }
        if (rows + n->rows > limit) {
          *overflow = true;
          return k;
        }
        rows += n->rows;
        b->cand[k] = i;
        b->cum[k] = rows;
        k++;
        if (rows == limit) return k; /* full: the decision no longer depends on more */
      }
    }
  }
  return k;
}

/* BATCHER_WAIT_ADAPTIVE: is the next preferred size expected before the delay ends?
 * Sets *give_up_ns to the time after which, without new arrivals, it no longer is. */
static bool worth_waiting(const batcher *b, int64_t rows, uint64_t now_ns, uint64_t delay_end,
                          uint64_t *give_up_ns) {
  *give_up_ns = delay_end;
  if (b->wait_mode == BATCHER_WAIT_FULL_DELAY) return true;
  if (b->arrivals < 2) return false; /* no rate known: an idle server answers at once */
  int64_t target = b->pref_max;
  for (size_t i = 0; i < b->npref; i++)
    if (b->pref[i] > rows) { target = b->pref[i]; break; }
  double fill_ns = (double)(target - rows) * b->gap_ns_per_row;
  double left_ns = (double)(delay_end - now_ns);
  if (!(fill_ns < left_ns)) return false;
  *give_up_ns = delay_end - (uint64_t)fill_ns;
  if (*give_up_ns <= now_ns) *give_up_ns = now_ns + 1;
  return true;
}

cinfer_status *batcher_next(batcher *b, uint64_t now_ns, batcher_item *out, size_t cap,
                            size_t *n, uint64_t *wake_at_ns) {
  *n = 0;
  *wake_at_ns = UINT64_MAX;
  if (cap < b->cand_cap)
    return cinfer_status_new(CINFER_INVALID_ARG, "batcher_next: out has room for %zu items, "
                             "a batch can hold %zu", cap, b->cand_cap);
  apply_timeouts(b, now_ns);
  if (b->expired_n) *wake_at_ns = now_ns;
  if (b->pending_reqs == 0) return NULL;

  uint32_t h = head_level(b);
  assert(h < b->nlevels);
  bool overflow;
  size_t k = collect(b, h, &overflow);
  assert(k > 0);
  size_t take = 0;
  if (b->max_batch == 0) {
    take = 1;
  } else {
    /* Triton's choice of the "best preferred" prefix: the largest prefix whose rows are a
     * preferred size, or, if none, the prefix before the first item that would pass the
     * largest preferred size. */
    ptrdiff_t best = -1;
    for (size_t i = 0; i < k; i++) {
      if (i > 0 && best < 0 && b->cum[i] > b->pref_max) best = (ptrdiff_t)i - 1;
      if (b->cum[i] <= b->pref_max && is_preferred(b, b->cum[i])) best = (ptrdiff_t)i;
    }
    if (best < 0 && overflow && k > 0) best = (ptrdiff_t)k - 1;
    uint64_t oldest = UINT64_MAX;
    for (size_t i = 0; i < k; i++) oldest = min_u64(oldest, b->nodes[b->cand[i]].enq_ns);
    uint64_t delay_end = sat_add(oldest, b->delay_ns);
    bool delay_exceeded = b->delay_ns != 0 && now_ns >= delay_end;
    uint64_t give_up = UINT64_MAX;
    if (best >= 0 && !delay_exceeded) take = (size_t)best + 1;
    else if (overflow || b->cum[k - 1] >= b->pref_max || delay_exceeded || b->delay_ns == 0)
      take = k;
    else if (!worth_waiting(b, b->cum[k - 1], now_ns, delay_end, &give_up))
      take = k;
    if (take == 0) {
      *wake_at_ns = min_u64(min_u64(*wake_at_ns, give_up), batcher_expire_at(b));
      return NULL;
    }
  }
  for (size_t i = 0; i < take; i++) {
    uint32_t c = b->cand[i];
    out[i] = b->nodes[c].item;
    node_detach(b, c);
    node_free(b, c);
  }
  *n = take;
  *wake_at_ns = now_ns;
  return NULL;
}

size_t batcher_drain(batcher *b, batcher_item *out, size_t cap) {
  size_t k = take_expired(b, out, cap);
  for (uint32_t l = 0; l < b->nlevels && k < cap; l++) {
    blevel *lv = &b->levels[l];
    for (int cls = 0; cls < 2 && k < cap; cls++) {
      blist *list = cls ? &lv->delayed : &lv->queued;
      while (k < cap && list->head != NIL) {
        uint32_t i = list->head;
        out[k++] = b->nodes[i].item;
        node_detach(b, i);
        node_free(b, i);
      }
    }
  }
  return k;
}

void batcher_pending(const batcher *b, uint64_t *requests, uint64_t *rows) {
  if (requests) *requests = b->pending_reqs;
  if (rows) *rows = b->pending_rows;
}

/* ---- integrity check ---------------------------------------------------------------- */

#define BAD(...) return cinfer_status_new(CINFER_INTERNAL, "batcher invariant: " __VA_ARGS__)

/* Checks one list: links both ways, every node in `state` (and `level` unless NIL). */
static cinfer_status *check_list(const batcher *b, const blist *l, int state, uint32_t level,
                                 uint64_t *count, uint64_t *rows, uint64_t *seen) {
  uint32_t prev = NIL;
  for (uint32_t i = l->head; i != NIL; i = b->nodes[i].next) {
    if (i >= b->cap) BAD("list link %u out of range", i);
    const bnode *n = &b->nodes[i];
    if (n->state != state) BAD("node %u in a list of state %d has state %d", i, state, n->state);
    if (level != NIL && n->level != level) BAD("node %u on level %u's list says level %u", i,
                                               level, n->level);
    if (n->prev != prev) BAD("node %u prev link %u, expected %u", i, n->prev, prev);
    if (n->rows < 1 || (b->max_batch > 0 && n->rows > b->max_batch)) BAD("node %u rows %lld", i,
                                                                         (long long)n->rows);
    if (++*seen > b->cap) BAD("a list has a cycle");
    (*count)++;
    *rows += (uint64_t)n->rows;
    prev = i;
  }
  if (l->tail != prev) BAD("list tail %u, last node %u", l->tail, prev);
  return NULL;
}

cinfer_status *batcher_check(const batcher *b) {
  cinfer_status *st;
  uint64_t seen = 0, total = 0, total_rows = 0, in_heap = 0;
  for (uint32_t l = 0; l < b->nlevels; l++) {
    const blevel *lv = &b->levels[l];
    uint64_t count = 0, rows = 0;
    if ((st = check_list(b, &lv->queued, ST_QUEUED, l, &count, &rows, &seen))) return st;
    for (uint32_t i = lv->queued.head; i != NIL; i = b->nodes[i].next) {
      const bnode *n = &b->nodes[i];
      if ((n->deadline_ns != NO_DEADLINE) != (n->heap_pos != NIL))
        BAD("queued node %u: deadline and heap membership disagree", i);
      in_heap += n->heap_pos != NIL;
    }
    if ((st = check_list(b, &lv->delayed, ST_DELAYED, l, &count, &rows, &seen))) return st;
    if (count != lv->count) BAD("level %u count %u, lists hold %llu", l + 1, lv->count,
                                (unsigned long long)count);
    if (count && l < b->first_level) BAD("level %u has items below first_level %u", l + 1,
                                         b->first_level + 1);
    total += count;
    total_rows += rows;
  }
  if (total != b->pending_reqs || total_rows != b->pending_rows)
    BAD("pending %llu/%llu, lists hold %llu/%llu", (unsigned long long)b->pending_reqs,
        (unsigned long long)b->pending_rows, (unsigned long long)total,
        (unsigned long long)total_rows);
  uint64_t expired = 0, expired_rows = 0;
  if ((st = check_list(b, &b->expired, ST_EXPIRED, NIL, &expired, &expired_rows, &seen))) return st;
  if (expired != b->expired_n) BAD("expired count %llu, list holds %llu",
                                   (unsigned long long)b->expired_n, (unsigned long long)expired);
  if (in_heap != b->heap_n) BAD("heap holds %u, queued nodes with deadlines %llu", b->heap_n,
                                (unsigned long long)in_heap);
  for (uint32_t p = 0; p < b->heap_n; p++) {
    uint32_t i = b->heap[p];
    if (i >= b->cap || b->nodes[i].heap_pos != p) BAD("heap slot %u names node %u", p, i);
    if (p > 0 && heap_less(b, i, b->heap[(p - 1) / 2])) BAD("heap order broken at slot %u", p);
  }
  uint64_t free_n = 0;
  for (uint32_t i = b->free_head; i != NIL; i = b->nodes[i].next) {
    if (i >= b->cap || b->nodes[i].state != ST_FREE) BAD("free list node %u not free", i);
    if (++free_n > b->cap) BAD("the free list has a cycle");
  }
  if (seen + free_n != b->cap) BAD("%llu nodes in lists + %llu free != %u", (unsigned long long)seen,
                                   (unsigned long long)free_n, b->cap);
  return NULL;
}

/* ---- shape keys --------------------------------------------------------------------- */

uint64_t batcher_shape_key(const cinfer_tensor *inputs, size_t n_inputs, bool batched) {
  uint64_t key = hash_mix64(n_inputs);
  for (size_t i = 0; i < n_inputs; i++) {
    const cinfer_tensor *t = &inputs[i];
    uint64_t h = HASH_FNV_SEED;
    if (t->name) h = hash_fnv1a(h, t->name, strlen(t->name) + 1);
    int32_t meta[2] = {(int32_t)t->dtype, t->ndim};
    h = hash_fnv1a(h, meta, sizeof meta);
    int first = batched ? 1 : 0;
    for (int d = first; d < t->ndim && d < CINFER_MAX_DIMS; d++)
      h = hash_fnv1a(h, &t->shape[d], sizeof t->shape[d]);
    key += hash_mix64(h); /* a sum: the order of the inputs does not matter */
  }
  return key;
}
