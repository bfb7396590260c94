/* pool.c: thread pool with dynamically claimed chunks (see pool.h).
 *
 * One 64-bit word `ticket` describes the current run: generation (24 bits) | number of
 * chunks (20 bits) | next unclaimed chunk (20 bits). The caller publishes a run by storing
 * a new ticket (after fn/ctx, with release order); every thread, caller included, claims
 * chunks with fetch_add until the claimed index reaches the chunk count, and counts each
 * finished chunk in `done`. The caller returns when done == n.
 * Invariants: fn/ctx change only between runs (after done == n), and a thread that claimed
 * a valid chunk of run G holds run G open until it finishes that chunk, so reading fn/ctx
 * after a successful claim always sees run G's values. A claim past the end (idx >= n) is
 * harmless: at most one per thread per run, far below the 20-bit field.
 * Workers spin briefly on the ticket, then sleep on a condition variable; the caller
 * broadcasts only when some worker sleeps (seq_cst on `sleepers` and `ticket` on both
 * sides, so a worker going to sleep re-checks the ticket under the mutex and cannot miss
 * a run).
 * The caller, once no chunk is left to claim, spins for CALLER_SPIN_NS while workers
 * finish theirs, then sleeps on `done_cv` until done == n; the thread that finishes the
 * last chunk signals when `caller_sleeps` (the same seq_cst handshake). Sleeping, not
 * yielding, matters on a shared machine: a worker descheduled behind another process on
 * its core can then be pulled by the scheduler onto the caller's idle core.
 * Contention guard: the caller measures, per window of GUARD_WINDOW_NS of multi-thread
 * runs, how long it waited for workers after its own chunks were done. A worker that is
 * descheduled while it holds a chunk (another process on its core, a CPU quota) makes
 * every run wait for it; when waiting exceeds GUARD_WAIT_PCT of the window, the caller runs
 * everything alone for the next GUARD_SOLO_NS and then tries the workers again. Without
 * contention the wait is the tail of the last chunk, a few percent. */
#include "backends/llm/pool.h"
#include "core/clock.h"

#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define GEN_SHIFT 40
#define N_SHIFT 20
#define FIELD 0xFFFFFull
#define CALLER_SPIN_NS 50000 /* 50 us */
#define GUARD_WINDOW_NS 20000000LL /* 20 ms of multi-thread runs */
#define GUARD_WAIT_PCT 40
#define GUARD_SOLO_NS 400000000LL /* 400 ms */

struct llm_pool {
  int n;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic uint64_t ticket;
  atomic_int done;
  atomic_int sleepers;
  atomic_bool stop;
  atomic_bool caller_sleeps;
  /* contention guard (caller only) */
  int64_t g_run_ns, g_wait_ns, solo_until_ns, window_ns, solo_ns;
  int wait_pct;
  uint64_t solo_events;
  pthread_cond_t done_cv;  /* with mu: the caller waits for done == n_chunks */
  llm_chunk_fn fn;
  void *ctx;
  /* llm_pool_run's adapter */
  llm_task_fn task;
  void *task_ctx;
};

typedef struct { llm_pool *p; int ith; } warg;

/* Claims and runs chunks of the run published in the ticket until none is left. */
static uint64_t work(llm_pool *p, int tid) {
  uint64_t gen = 0;
  for (;;) {
    uint64_t t = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_acq_rel);
    gen = t >> GEN_SHIFT;
    int n = (int)((t >> N_SHIFT) & FIELD), idx = (int)(t & FIELD);
    if (idx >= n) return gen;
    p->fn(p->ctx, idx, n, tid);
    if (atomic_fetch_add(&p->done, 1) + 1 == n && tid != 0 && atomic_load(&p->caller_sleeps)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

static void *worker(void *arg) {
  llm_pool *p = ((warg *)arg)->p;
  int tid = ((warg *)arg)->ith;
  free(arg);
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while ((atomic_load_explicit(&p->ticket, memory_order_acquire) >> GEN_SHIFT) == seen && spins < 20000) {
      CPU_RELAX();
      spins++;
    }
    if ((atomic_load(&p->ticket) >> GEN_SHIFT) == seen) {
      pthread_mutex_lock(&p->mu);
      atomic_fetch_add(&p->sleepers, 1);
      while ((atomic_load(&p->ticket) >> GEN_SHIFT) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
      atomic_fetch_sub(&p->sleepers, 1);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = work(p, tid);
  }
}

cinfer_status *llm_pool_create(int n_threads, llm_pool **out) {
  *out = NULL;
  if (n_threads < 1 || n_threads > 256)
    return cinfer_status_new(CINFER_INVALID_ARG, "threads must be 1..256, got %d", n_threads);
  llm_pool *p = calloc(1, sizeof *p);
  if (!p) return cinfer_status_oom("pool");
  p->n = n_threads;
  p->window_ns = GUARD_WINDOW_NS;
  p->solo_ns = GUARD_SOLO_NS;
  p->wait_pct = GUARD_WAIT_PCT;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  p->th = calloc((size_t)n_threads, sizeof *p->th);
  if (!p->th) {
    llm_pool_destroy(p);
    return cinfer_status_oom("pool");
  }
  for (int i = 1; i < n_threads; i++) {
    warg *a = malloc(sizeof *a);
    if (!a || pthread_create(&p->th[i], NULL, worker, (a->p = p, a->ith = i, a))) {
      free(a);
      p->n = i;
      llm_pool_destroy(p);
      return cinfer_status_new(CINFER_INTERNAL, "pool: cannot start thread %d", i);
    }
  }
  *out = p;
  return NULL;
}

/* Publishes a run of n chunks (n = 0: a wake-up with no work). */
static void publish(llm_pool *p, uint64_t n) {
  uint64_t gen = ((atomic_load_explicit(&p->ticket, memory_order_relaxed) >> GEN_SHIFT) + 1) & 0xFFFFFFull;
  if (gen == 0) gen = 1; /* workers start with seen = 0 */
  atomic_store(&p->ticket, gen << GEN_SHIFT | n << N_SHIFT);
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
}

void llm_pool_destroy(llm_pool *p) {
  if (!p) return;
  atomic_store(&p->stop, true);
  publish(p, 0);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++)
    if (p->th && p->th[i]) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  pthread_cond_destroy(&p->done_cv);
  free(p->th);
  free(p);
}

int llm_pool_size(const llm_pool *p) { return p->n; }

/* Waits for the workers' last chunks of a run: spins a little (they usually finish within
 * microseconds), then sleeps until the last one signals. */
static void wait_done(llm_pool *p, int n_chunks) {
  int64_t t0 = (int64_t)clock_now_ns();
  for (int i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks; i++) {
    CPU_RELAX();
    if (i % 64 == 0 && (int64_t)clock_now_ns() - t0 > CALLER_SPIN_NS) {
      pthread_mutex_lock(&p->mu);
      atomic_store(&p->caller_sleeps, true);
      while (atomic_load(&p->done) < n_chunks) pthread_cond_wait(&p->done_cv, &p->mu);
      atomic_store(&p->caller_sleeps, false);
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
}

void llm_pool_run_chunks(llm_pool *p, llm_chunk_fn fn, void *ctx, int n_chunks) {
  if (n_chunks <= 0) return;
  int64_t t0 = p->n > 1 && n_chunks > 1 ? (int64_t)clock_now_ns() : 0;
  if (p->n == 1 || n_chunks == 1 || t0 < p->solo_until_ns) {
    for (int c = 0; c < n_chunks; c++) fn(ctx, c, n_chunks, 0);
    return;
  }
  if (n_chunks > LLM_POOL_MAX_CHUNKS) n_chunks = LLM_POOL_MAX_CHUNKS; /* callers stay below; never overflow */
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  publish(p, (uint64_t)n_chunks);
  work(p, 0);
  int64_t t1 = (int64_t)clock_now_ns(), t2 = t1;
  if (atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks) {
    wait_done(p, n_chunks);
    t2 = (int64_t)clock_now_ns();
  }
  p->g_run_ns += t2 - t0;
  p->g_wait_ns += t2 - t1;
  if (p->g_run_ns >= p->window_ns) { /* a window closes whether or not its last run waited */
    if (p->g_wait_ns * 100 > p->g_run_ns * p->wait_pct) {
      p->solo_until_ns = t2 + p->solo_ns;
      p->solo_events++;
    }
    p->g_run_ns = p->g_wait_ns = 0;
  }
}

uint64_t llm_pool_solo_events(const llm_pool *p) { return p->solo_events; }

void llm_pool_set_guard(llm_pool *p, int64_t window_ns, int wait_pct, int64_t solo_ns) {
  p->window_ns = window_ns;
  p->wait_pct = wait_pct;
  p->solo_ns = solo_ns;
}

static void task_adapter(void *ctx, int c, int n, int tid) {
  (void)tid;
  llm_pool *p = ctx;
  p->task(p->task_ctx, c, n);
}

void llm_pool_run(llm_pool *p, llm_task_fn fn, void *ctx) {
  p->task = fn;
  p->task_ctx = ctx;
  llm_pool_run_chunks(p, task_adapter, p, p->n);
}
