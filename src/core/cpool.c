/* cpool.c: the thread pool of cpool.h.
 *
 * One 64-bit word `ticket` describes the current run: generation (24 bits) | first
 * unclaimed chunk `lo` (20 bits) | one past the last unclaimed chunk `hi` (20 bits). The
 * caller publishes a run of n chunks by storing a new ticket with lo = 0, hi = n (after
 * fn/ctx/n_run, seq_cst); every thread claims chunks with compare-and-swap until lo == hi,
 * and counts each finished chunk in `done`. The caller returns when done == n.
 * Who takes which end: the caller claims from the front (lo++), the workers from the back
 * (hi--). So on two threads, when both are there, the caller runs the first chunks of every
 * operator and the worker the last ones: the channels (or rows) a thread wrote in one
 * operator are the ones it reads in the next, from its own cache. With one shared counter
 * both took chunks in arrival order, and an operator's input came half from the other
 * core's cache: on a 2-vCPU AMD EPYC guest UltraFace's depthwise convs that follow a split
 * 1x1 conv took 2-2.7x their one-thread time (docs/benchmarks-onnx.md, session 18). A
 * worker that is late or descheduled still delays a run by at most the chunk it holds.
 * Invariants: fn/ctx/n_run change only between runs (after done == n), and a thread that
 * claimed a chunk of run G holds run G open until it finishes that chunk, so reading them
 * after a successful claim sees run G's values. A claim never passes the end (lo < hi is
 * checked in the same compare-and-swap). A run of 0 chunks is a wake-up (cpool_hold(true),
 * cpool_destroy).
 * Sleeping: a worker going to sleep increments `sleepers` under the mutex and re-checks
 * the ticket; the caller stores the ticket and then reads `sleepers` (both seq_cst), so
 * either the worker sees the new ticket or the caller sees the sleeper and broadcasts.
 * The same handshake, with `caller_sleeps`, for the caller waiting on `done`. Sleeping,
 * not yielding, matters on a shared machine: a worker descheduled behind another process
 * on its core can then be pulled by the scheduler onto the caller's idle core.
 * Spinning follows the policy (cpool.h); the clock is read every 64 pauses only. */
#include "core/cpool.h"

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
#define LO_SHIFT 20
#define FIELD 0xFFFFFull

struct cpool {
  int n;
  cpool_policy pol;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv, done_cv;
  _Atomic uint64_t ticket;
  atomic_int done;
  atomic_int sleepers;
  atomic_bool stop, hold, caller_sleeps;
  bool alone; /* cpool_set_alone: every run on the caller, workers left asleep */
  cpool_fn fn;
  void *ctx;
  int64_t n_run; /* chunks of the current run */
  /* contention guard and statistics (caller only, except the atomics) */
  int64_t g_run_ns, g_wait_ns, solo_until_ns, solo_cur_ns;
  uint64_t g_chunks, g_wchunks0; /* the window's chunks; worker_chunks when it opened */
  uint64_t runs, parallel_runs, solo_events;
  _Atomic uint64_t sleeps, chunks, worker_chunks;
};

typedef struct {
  cpool *p;
  int tid;
} warg;

/* Claims and runs chunks of the run published in the ticket until none is left, from the
 * front (the caller, tid 0) or from the back (workers); returns the run's generation. */
static uint64_t work(cpool *p, int tid) {
  uint64_t t = atomic_load_explicit(&p->ticket, memory_order_acquire);
  for (;;) {
    uint64_t lo = (t >> LO_SHIFT) & FIELD, hi = t & FIELD;
    if (lo >= hi) return t >> GEN_SHIFT;
    uint64_t claimed = tid ? t - 1 : t + (1ull << LO_SHIFT);
    if (!atomic_compare_exchange_weak_explicit(&p->ticket, &t, claimed, memory_order_acq_rel, memory_order_acquire))
      continue; /* t now holds the current ticket */
    int64_t idx = (int64_t)(tid ? hi - 1 : lo), n = p->n_run;
    p->fn(p->ctx, idx, n, tid);
    if (tid) atomic_fetch_add_explicit(&p->worker_chunks, 1, memory_order_relaxed);
    if (atomic_fetch_add(&p->done, 1) + 1 == n && tid != 0 && atomic_load(&p->caller_sleeps)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->mu);
    }
    t = atomic_load_explicit(&p->ticket, memory_order_acquire);
  }
}

static inline uint64_t gen_of(cpool *p) { return atomic_load_explicit(&p->ticket, memory_order_acquire) >> GEN_SHIFT; }

static void *worker(void *arg) {
  cpool *p = ((warg *)arg)->p;
  int tid = ((warg *)arg)->tid;
  free(arg);
  const cpool_policy *pol = &p->pol;
  if (pol->worker_init) pol->worker_init();
  bool timed = pol->spin_ns > 0 || pol->yield_ns > 0;
  uint64_t seen = 0;
  for (;;) {
    int64_t t0 = 0, ty = 0;
    for (int64_t i = 1; gen_of(p) == seen && (pol->spin_idle || atomic_load_explicit(&p->hold, memory_order_relaxed));
         i++) {
      CPU_RELAX();
      if (pol->spin_pauses && i >= pol->spin_pauses) break;
      if (!timed || i % 64) continue;
      int64_t now = (int64_t)clock_now_ns();
      if (!t0) t0 = ty = now;
      if (pol->spin_ns && now - t0 > pol->spin_ns) break;
      if (pol->yield_ns && now - ty > pol->yield_ns) {
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

/* Publishes a run of n chunks (n = 0: a wake-up with no work). */
static void publish(cpool *p, uint64_t n) {
  uint64_t gen = ((atomic_load_explicit(&p->ticket, memory_order_relaxed) >> GEN_SHIFT) + 1) & 0xFFFFFFull;
  if (gen == 0) gen = 1; /* workers start with seen = 0 */
  atomic_store(&p->ticket, gen << GEN_SHIFT | n);
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
  }
}

cinfer_status *cpool_create(int threads, const cpool_policy *pol, const char *what, cpool **out) {
  *out = NULL;
  if (threads < 1 || threads > 256) return cinfer_status_new(CINFER_INVALID_ARG, "threads must be 1..256, got %d", threads);
  if (!pol->spin_ns && !pol->spin_pauses)
    return cinfer_status_new(CINFER_INTERNAL, "%s: a spin limit (time or pauses) is required", what);
  cpool *p = calloc(1, sizeof *p);
  if (!p) return cinfer_status_oom(what);
  p->n = 1;
  p->pol = *pol;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  if (!(p->th = calloc((size_t)threads, sizeof *p->th))) {
    cpool_destroy(p);
    return cinfer_status_oom(what);
  }
  for (int i = 1; i < threads; i++) {
    warg *a = malloc(sizeof *a);
    if (!a) {
      cpool_destroy(p);
      return cinfer_status_oom(what);
    }
    a->p = p;
    a->tid = i;
    if (pthread_create(&p->th[i], NULL, worker, a)) {
      free(a);
      cpool_destroy(p);
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "%s: cannot start thread %d of %d", what, i, threads);
    }
    p->n = i + 1;
  }
  *out = p;
  return NULL;
}

void cpool_destroy(cpool *p) {
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

int cpool_size(const cpool *p) { return p ? p->n : 1; }

void cpool_hold(cpool *p, bool on) {
  if (!p || p->n == 1) return;
  on = on && !p->alone; /* alone: the workers stay asleep */
  atomic_store(&p->hold, on);
  if (on && (int64_t)clock_now_ns() >= p->solo_until_ns) publish(p, 0); /* wake them now: they start spinning */
}

void cpool_set_alone(cpool *p, bool on) {
  if (p) p->alone = on;
}

/* Waits for the workers' last chunks of a run: spins a little (they usually finish within
 * microseconds), then sleeps until the last one signals. */
static void wait_done(cpool *p, int64_t n) {
  int64_t t0 = (int64_t)clock_now_ns();
  for (int i = 1; atomic_load_explicit(&p->done, memory_order_acquire) < n; i++) {
    CPU_RELAX();
    if (i % 64 == 0 && (int64_t)clock_now_ns() - t0 > p->pol.caller_spin_ns) {
      pthread_mutex_lock(&p->mu);
      atomic_store(&p->caller_sleeps, true);
      while (atomic_load(&p->done) < n) pthread_cond_wait(&p->done_cv, &p->mu);
      atomic_store(&p->caller_sleeps, false);
      pthread_mutex_unlock(&p->mu);
      return;
    }
  }
}

/* The contention guard's bookkeeping after a split run (t0 start, t1 the caller's chunks
 * done, t2 all done). */
static void guard(cpool *p, int64_t n, int64_t t0, int64_t t1, int64_t t2) {
  const cpool_policy *pol = &p->pol;
  p->g_run_ns += t2 - t0;
  p->g_wait_ns += t2 - t1;
  p->g_chunks += (uint64_t)n;
  if (p->g_run_ns < pol->guard_window_ns) return;
  /* a window closes whether or not its last run waited; alone also when the workers ran
   * almost none of the window's chunks (not on a core when work is published: a loaded
   * host): splitting then only costs the caller */
  uint64_t wc = atomic_load_explicit(&p->worker_chunks, memory_order_relaxed) - p->g_wchunks0;
  if (p->g_wait_ns * 100 > p->g_run_ns * pol->guard_wait_pct ||
      wc * 100 < p->g_chunks * (uint64_t)pol->guard_min_worker_pct) {
    /* alone for a while; longer each time the next try waits too much again */
    p->solo_cur_ns = p->solo_cur_ns ? p->solo_cur_ns * 2 : pol->guard_solo_ns;
    if (p->solo_cur_ns > pol->guard_solo_max_ns && pol->guard_solo_ns <= pol->guard_solo_max_ns)
      p->solo_cur_ns = pol->guard_solo_max_ns;
    p->solo_until_ns = t2 + p->solo_cur_ns;
    p->solo_events++;
  } else {
    p->solo_cur_ns = 0;
  }
  p->g_run_ns = p->g_wait_ns = 0;
  p->g_chunks = 0;
  p->g_wchunks0 = atomic_load_explicit(&p->worker_chunks, memory_order_relaxed);
}

void cpool_run(cpool *p, int64_t n, cpool_fn fn, void *ctx) {
  if (n <= 0) return;
  if (p && n > 1) p->runs++;
  int64_t t0 = p && p->n > 1 && n > 1 ? (int64_t)clock_now_ns() : 0;
  if (!p || p->n == 1 || n == 1 || n > CPOOL_MAX_CHUNKS || p->alone || t0 < p->solo_until_ns) {
    for (int64_t c = 0; c < n; c++) fn(ctx, c, n, 0);
    return;
  }
  p->parallel_runs++;
  atomic_fetch_add_explicit(&p->chunks, (uint64_t)n, memory_order_relaxed);
  p->fn = fn;
  p->ctx = ctx;
  p->n_run = n;
  atomic_store_explicit(&p->done, 0, memory_order_relaxed);
  publish(p, (uint64_t)n);
  (void)work(p, 0);
  int64_t t1 = (int64_t)clock_now_ns(), t2 = t1;
  if (atomic_load_explicit(&p->done, memory_order_acquire) < n) {
    wait_done(p, n);
    t2 = (int64_t)clock_now_ns();
  }
  guard(p, n, t0, t1, t2);
}

bool cpool_solo(const cpool *p) {
  return !p || p->n == 1 || p->alone || (int64_t)clock_now_ns() < p->solo_until_ns;
}

void cpool_get_stats(const cpool *p, cpool_stats *st) {
  *st = (cpool_stats){0};
  if (!p) return;
  cpool *q = (cpool *)p; /* the atomics' loads */
  st->runs = p->runs;
  st->parallel_runs = p->parallel_runs;
  st->sleeps = atomic_load(&q->sleeps);
  st->solo_events = p->solo_events;
  st->chunks = atomic_load(&q->chunks);
  st->worker_chunks = atomic_load(&q->worker_chunks);
}

void cpool_set_guard(cpool *p, int64_t window_ns, int wait_pct, int64_t solo_ns) {
  if (p->pol.guard_solo_max_ns == p->pol.guard_solo_ns) p->pol.guard_solo_max_ns = solo_ns; /* still no doubling */
  p->pol.guard_window_ns = window_ns;
  p->pol.guard_wait_pct = wait_pct;
  p->pol.guard_solo_ns = solo_ns;
  p->solo_cur_ns = 0;
}
