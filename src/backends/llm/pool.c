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
 * its core can then be pulled by the scheduler onto the caller's idle core. */
#include "backends/llm/pool.h"

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
  if (!p) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "pool: out of memory");
  p->n = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  p->th = calloc((size_t)n_threads, sizeof *p->th);
  if (!p->th) {
    llm_pool_destroy(p);
    return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "pool: out of memory");
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

void llm_pool_run_chunks(llm_pool *p, llm_chunk_fn fn, void *ctx, int n_chunks) {
  if (n_chunks <= 0) return;
  if (p->n == 1 || n_chunks == 1) {
    for (int c = 0; c < n_chunks; c++) fn(ctx, c, n_chunks, 0);
    return;
  }
  if (n_chunks > LLM_POOL_MAX_CHUNKS) n_chunks = LLM_POOL_MAX_CHUNKS; /* callers stay below; never overflow */
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  publish(p, (uint64_t)n_chunks);
  work(p, 0);
  /* Workers hold the last chunks: spin a little (they usually finish within microseconds),
   * then sleep until the last one signals. */
  if (atomic_load_explicit(&p->done, memory_order_acquire) >= n_chunks) return;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 1;; i++) {
    if (atomic_load_explicit(&p->done, memory_order_acquire) >= n_chunks) return;
    CPU_RELAX();
    if (i % 64 == 0) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > CALLER_SPIN_NS) break;
    }
  }
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->caller_sleeps, true);
  while (atomic_load(&p->done) < n_chunks) pthread_cond_wait(&p->done_cv, &p->mu);
  atomic_store(&p->caller_sleeps, false);
  pthread_mutex_unlock(&p->mu);
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
