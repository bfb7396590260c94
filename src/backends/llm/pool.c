/* pool.c: the LLM engine's thread pool (pool.h): the core pool (src/core/cpool.h) with the
 * engine's waiting policy. The engine's step thread runs one forward pass after another,
 * so idle workers always spin (about 20000 pauses, no clock reads), then sleep; the caller
 * spins CALLER_SPIN_NS for the chunks in flight, then sleeps. Contention guard: a window
 * of GUARD_WINDOW_NS of multi-thread runs in which the caller waited more than
 * GUARD_WAIT_PCT for chunks workers held makes the pool run alone for GUARD_SOLO_NS (no
 * doubling, no worker-share test). */
#include "backends/llm/pool.h"

#include "core/cpool.h"

#define SPIN_PAUSES 20000
#define CALLER_SPIN_NS 50000 /* 50 us */
#define GUARD_WINDOW_NS 20000000LL /* 20 ms of multi-thread runs */
#define GUARD_WAIT_PCT 40
#define GUARD_SOLO_NS 400000000LL /* 400 ms */

_Static_assert(LLM_POOL_MAX_CHUNKS == CPOOL_MAX_CHUNKS, "one chunk limit");

static const cpool_policy llm_policy = {
    .spin_idle = true,
    .spin_pauses = SPIN_PAUSES,
    .caller_spin_ns = CALLER_SPIN_NS,
    .guard_window_ns = GUARD_WINDOW_NS,
    .guard_solo_ns = GUARD_SOLO_NS,
    .guard_solo_max_ns = GUARD_SOLO_NS,
    .guard_wait_pct = GUARD_WAIT_PCT,
};

/* an llm_pool is a cpool (the type stays the engine's own name) */
#define CP(p) ((cpool *)(p))

cinfer_status *llm_pool_create(int n_threads, llm_pool **out) {
  cpool *p;
  cinfer_status *st = cpool_create(n_threads, &llm_policy, "pool", &p);
  *out = (llm_pool *)p;
  return st;
}

void llm_pool_destroy(llm_pool *p) { cpool_destroy(CP(p)); }

int llm_pool_size(const llm_pool *p) { return cpool_size((const cpool *)p); }

typedef struct {
  llm_chunk_fn fn;
  llm_task_fn task;
  void *ctx;
} run_ctx;

static void run_chunk(void *vc, int64_t c, int64_t n, int tid) {
  const run_ctx *r = vc;
  r->fn(r->ctx, (int)c, (int)n, tid);
}

void llm_pool_run_chunks(llm_pool *p, llm_chunk_fn fn, void *ctx, int n_chunks) {
  run_ctx r = {.fn = fn, .ctx = ctx};
  cpool_run(CP(p), n_chunks, run_chunk, &r);
}

uint64_t llm_pool_solo_events(const llm_pool *p) {
  cpool_stats st;
  cpool_get_stats((const cpool *)p, &st);
  return st.solo_events;
}

void llm_pool_set_guard(llm_pool *p, int64_t window_ns, int wait_pct, int64_t solo_ns) {
  cpool_set_guard(CP(p), window_ns, wait_pct, solo_ns);
}

static void run_task(void *vc, int64_t c, int64_t n, int tid) {
  (void)tid;
  const run_ctx *r = vc;
  r->task(r->ctx, (int)c, (int)n);
}

void llm_pool_run(llm_pool *p, llm_task_fn fn, void *ctx) {
  run_ctx r = {.task = fn, .ctx = ctx};
  cpool_run(CP(p), llm_pool_size(p), run_task, &r);
}
