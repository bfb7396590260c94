/* opool.c: the ONNX engine's thread pool (opool.h).
 *
 * One 64-bit word `ticket` describes the current run: generation (24 bits) | number of
 * chunks (20 bits) | next unclaimed chunk (20 bits). The caller publishes a run by storing
 * a new ticket (after fn/ctx, seq_cst); every thread, caller included, claims chunks with
 * fetch_add until the claimed index reaches the chunk count, and counts each finished
 * chunk in `done`. The caller returns when done == n.
 * Invariants: fn/ctx change only between runs (after done == n), and a thread that claimed
 * a valid chunk of run G holds run G open until it finishes that chunk, so reading fn/ctx
 * after a successful claim sees run G's values. A claim past the end (idx >= n) is
 * harmless: at most one per thread per run, far below the 20-bit field. A run of 0 chunks
 * is a wake-up (opool_hold(true) publishes one so the workers' wake-up latency overlaps
 * the inference's first steps).
 * Sleeping: a worker going to sleep increments `sleepers` under the mutex and re-checks
 * the ticket; the caller stores the ticket and then reads `sleepers` (both seq_cst), so
 * either the worker sees the new ticket or the caller sees the sleeper and broadcasts.
 * The same handshake, with `caller_sleeps`, for the caller waiting on `done`.
 * Spinning: an idle worker spins only while the pool is held (an inference is running),
 * for at most SPIN_NS of wall-clock time, and calls sched_yield every YIELD_NS of it, so
 * a spinning worker that shares a core with the caller or another process gives the core
 * away at once instead of at the end of its time slice. */
#include "backends/onnx/opool.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/clock.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define GEN_SHIFT 40
#define N_SHIFT 20
#define FIELD 0xFFFFFull
/* See docs/benchmarks-onnx.md ("Waking a thread"): a futex wake-up of a sleeping thread
 * on a KVM guest takes tens of microseconds, a spin hand-off well under one. The gaps
 * between the parallel operators of one inference are mostly below 100 us. */
#define SPIN_NS 300000LL        /* an idle worker spins this long inside an inference */
#define YIELD_NS 50000LL        /* ... and yields its core this often while it does */
#define CALLER_SPIN_NS 50000LL  /* the caller spins this long for chunks in flight */
#define GUARD_WINDOW_NS 20000000LL /* 20 ms of multi-thread runs */
#define GUARD_WAIT_PCT 30
#define GUARD_MIN_WORKER_PCT 10 /* workers ran fewer of a window's chunks: they are not there */
#define GUARD_SOLO_NS 200000000LL /* 200 ms, doubled for each window in a row that waited too long */
#define GUARD_SOLO_MAX_NS 3200000000LL

struct opool {
  int n;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv, done_cv;
  _Atomic uint64_t ticket;
  atomic_int done;
  atomic_int sleepers;
  atomic_bool stop, hold, caller_sleeps;
  opool_fn fn;
  void *ctx;
  /* contention guard and statistics (caller only, except sleeps) */
  int64_t g_run_ns, g_wait_ns, solo_until_ns, window_ns, solo_ns, solo_cur_ns;
  uint64_t g_chunks, g_wchunks0; /* the window's chunks; worker_chunks when it opened */
  int wait_pct;
  uint64_t runs, parallel_runs, solo_events;
  _Atomic uint64_t sleeps, chunks, worker_chunks;
};

static _Thread_local opool *cur; /* the calling thread's current pool (opool_set_current) */

typedef struct {
  opool *p;
  int tid;
} warg;

static uint64_t work(opool *p, int tid) {
  for (;;) {
    uint64_t t = atomic_fetch_add_explicit(&p->ticket, 1, memory_order_acq_rel);
    int64_t n = (int64_t)((t >> N_SHIFT) & FIELD), idx = (int64_t)(t & FIELD);
    if (idx >= n) return t >> GEN_SHIFT;
    p->fn(p->ctx, idx, tid);
    if (tid) atomic_fetch_add_explicit(&p->worker_chunks, 1, memory_order_relaxed);
    if (atomic_fetch_add(&p->done, 1) + 1 == n && tid != 0 && atomic_load(&p->caller_sleeps)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->mu);
    }
  }
}

static inline uint64_t gen_of(opool *p) { return atomic_load_explicit(&p->ticket, memory_order_acquire) >> GEN_SHIFT; }

static void *worker(void *arg) {
  opool *p = ((warg *)arg)->p;
  int tid = ((warg *)arg)->tid;
  free(arg);
  /* oneDNN (an OpenMP build) runs its primitives inline on a thread whose OpenMP count is
   * one: the pool splits the work, never an OpenMP team (plan_build) */
  omp_set_num_threads(1);
  uint64_t seen = 0;
  for (;;) {
    int64_t t0 = 0, ty = 0;
    for (int i = 1; gen_of(p) == seen && atomic_load_explicit(&p->hold, memory_order_relaxed); i++) {
      CPU_RELAX();
      if (i % 64) continue;
      int64_t now = (int64_t)clock_now_ns();
      if (!t0) t0 = ty = now;
      if (now - t0 > SPIN_NS) break;
      if (now - ty > YIELD_NS) {
        sched_yield();
        ty = now;
      }
    }
    if (gen_of(p) == seen) {
      pthread_mutex_lock(&p->mu);
      atomic_fetch_add(&p->sleepers, 1);
      if ((atomic_load(&p->ticket) >> GEN_SHIFT) == seen && !atomic_load(&p->stop)) atomic_fetch_add(&p->sleeps, 1);
      while ((atomic_load(&p->ticket) >> GEN_SHIFT) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
      atomic_fetch_sub(&p->sleepers, 1);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = work(p, tid);
  }
}

static void publish(opool *p, uint64_t n) {
  uint64_t gen = ((atomic_load_explicit(&p->ticket, memory_order_relaxed) >> GEN_SHIFT) + 1) & 0xFFFFFFull;
  if (gen == 0) gen = 1; /* workers start with seen = 0 */
  atomic_store(&p->ticket, gen << GEN_SHIFT | n << N_SHIFT);
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
}

cinfer_status *opool_create(int threads, opool **out) {
  *out = NULL;
  if (threads < 1 || threads > 256) return cinfer_status_new(CINFER_INVALID_ARG, "threads must be 1..256, got %d", threads);
  opool *p = calloc(1, sizeof *p);
  if (!p) return cinfer_status_oom("thread pool");
  p->n = 1;
  p->window_ns = GUARD_WINDOW_NS;
  p->wait_pct = GUARD_WAIT_PCT;
  p->solo_ns = GUARD_SOLO_NS;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  if (!(p->th = calloc((size_t)threads, sizeof *p->th))) {
    opool_destroy(p);
    return cinfer_status_oom("thread pool");
  }
  for (int i = 1; i < threads; i++) {
    warg *a = malloc(sizeof *a);
    if (!a) {
      opool_destroy(p);
      return cinfer_status_oom("thread pool");
    }
    a->p = p;
    a->tid = i;
    if (pthread_create(&p->th[i], NULL, worker, a)) {
      free(a);
      opool_destroy(p);
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "thread pool: cannot start thread %d of %d", i, threads);
    }
    p->n = i + 1;
  }
  *out = p;
  return NULL;
}

void opool_destroy(opool *p) {
  if (!p) return;
  atomic_store(&p->stop, true);
  publish(p, 0);
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  pthread_cond_destroy(&p->done_cv);
  free(p->th);
  free(p);
}

int opool_threads(const opool *p) { return p ? p->n : 1; }

void opool_hold(opool *p, bool on) {
  if (!p || p->n == 1) return;
  atomic_store(&p->hold, on);
  if (on && (int64_t)clock_now_ns() >= p->solo_until_ns) publish(p, 0); /* wake them now: they start spinning */
}

static void wait_done(opool *p, int64_t n) {
  int64_t t0 = (int64_t)clock_now_ns();
  for (int i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < n; i++) {
    CPU_RELAX();
    if (i % 64 == 0 && (int64_t)clock_now_ns() - t0 > CALLER_SPIN_NS) {
      pthread_mutex_lock(&p->mu);
      atomic_store(&p->caller_sleeps, true);
      while (atomic_load(&p->done) < n) pthread_cond_wait(&p->done_cv, &p->mu);
      atomic_store(&p->caller_sleeps, false);
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
}

void opool_for(opool *p, int64_t n, opool_fn fn, void *ctx) {
  if (n <= 0) return;
  if (p && n > 1) p->runs++;
  int64_t t0 = p && p->n > 1 && n > 1 ? (int64_t)clock_now_ns() : 0;
  if (!p || p->n == 1 || n == 1 || n > OPOOL_MAX_CHUNKS || t0 < p->solo_until_ns) {
    for (int64_t c = 0; c < n; c++) fn(ctx, c, 0);
    return;
  }
  p->parallel_runs++;
  atomic_fetch_add_explicit(&p->chunks, (uint64_t)n, memory_order_relaxed);
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  publish(p, (uint64_t)n);
  (void)work(p, 0);
  int64_t t1 = (int64_t)clock_now_ns(), t2 = t1;
  if (atomic_load_explicit(&p->done, memory_order_acquire) < n) {
    wait_done(p, n);
    t2 = (int64_t)clock_now_ns();
  }
  p->g_run_ns += t2 - t0;
  p->g_wait_ns += t2 - t1;
  p->g_chunks += (uint64_t)n;
  if (p->g_run_ns >= p->window_ns) { /* a window closes whether or not its last run waited */
    /* alone also when the workers ran almost none of the window's chunks (not on a core
     * when work is published: a loaded host): splitting then only costs the caller */
    uint64_t wc = atomic_load_explicit(&p->worker_chunks, memory_order_relaxed) - p->g_wchunks0;
    if (p->g_wait_ns * 100 > p->g_run_ns * p->wait_pct || wc * 100 < p->g_chunks * GUARD_MIN_WORKER_PCT) {
      /* alone for a while; longer each time the next try waits too much again */
      p->solo_cur_ns = p->solo_cur_ns ? p->solo_cur_ns * 2 : p->solo_ns;
      if (p->solo_cur_ns > GUARD_SOLO_MAX_NS && p->solo_ns <= GUARD_SOLO_MAX_NS) p->solo_cur_ns = GUARD_SOLO_MAX_NS;
      p->solo_until_ns = t2 + p->solo_cur_ns;
      p->solo_events++;
    } else {
      p->solo_cur_ns = 0;
    }
    p->g_run_ns = p->g_wait_ns = 0;
    p->g_chunks = 0;
    p->g_wchunks0 = atomic_load_explicit(&p->worker_chunks, memory_order_relaxed);
  }
}

void opool_get_stats(const opool *p, opool_stats *st) {
  *st = (opool_stats){0};
  if (!p) return;
  st->runs = p->runs;
  st->parallel_runs = p->parallel_runs;
  st->sleeps = atomic_load(&((opool *)p)->sleeps);
  st->solo_events = p->solo_events;
  st->chunks = atomic_load(&((opool *)p)->chunks);
  st->worker_chunks = atomic_load(&((opool *)p)->worker_chunks);
}

void opool_set_guard(opool *p, int64_t window_ns, int wait_pct, int64_t solo_ns) {
  p->window_ns = window_ns;
  p->wait_pct = wait_pct;
  p->solo_ns = solo_ns;
  p->solo_cur_ns = 0;
}

bool opool_solo(const opool *p) { return !p || p->n == 1 || (int64_t)clock_now_ns() < p->solo_until_ns; }

bool opool_cur_solo(void) { return opool_solo(cur); }

opool *opool_set_current(opool *p) {
  opool *old = cur;
  cur = p;
  return old;
}

opool *opool_current(void) { return cur; }

int opool_cur_threads(void) { return opool_threads(cur); }

void opool_par(int64_t n, opool_fn fn, void *ctx) { opool_for(cur, n, fn, ctx); }

int64_t opool_chunks(int64_t items, double work, double min_per_chunk) {
  int T = opool_threads(cur);
  if (T <= 1 || items <= 1 || work < 2 * min_per_chunk) return 1;
  int64_t n = (int64_t)(work / min_per_chunk);
  if (n > 4 * (int64_t)T) n = 4 * (int64_t)T;
  if (n > items) n = items;
  return n < 1 ? 1 : n;
}
