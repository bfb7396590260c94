/* opool.c: the ONNX engine's thread pool (opool.h): the core pool (src/core/cpool.h) with
 * the engine's waiting policy, plus the thread-local current pool the kernels run on.
 * Idle workers spin only while an inference holds the pool, for at most SPIN_NS of
 * wall-clock time, and call sched_yield every YIELD_NS of it, so a spinning worker that
 * shares a core with the caller or another process gives the core away at once instead
 * of at the end of its time slice. */
#include "backends/onnx/opool.h"

#include <omp.h>

#include "core/cpool.h"
#include "core/fpenv.h"

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

/* oneDNN (an OpenMP build) runs its primitives inline on a thread whose OpenMP count is
 * one: the pool splits the work, never an OpenMP team (plan_build). A worker runs only
 * kernels: subnormals are flushed on it for good, as on the caller during a run (fpenv.h). */
static void worker_init(void) {
  omp_set_num_threads(1);
  (void)fpenv_flush_begin();
}

static const cpool_policy onnx_policy = {
    .spin_idle = false,
    .spin_ns = SPIN_NS,
    .yield_ns = YIELD_NS,
    .caller_spin_ns = CALLER_SPIN_NS,
    .guard_window_ns = GUARD_WINDOW_NS,
    .guard_solo_ns = GUARD_SOLO_NS,
    .guard_solo_max_ns = GUARD_SOLO_MAX_NS,
    .guard_wait_pct = GUARD_WAIT_PCT,
    .guard_min_worker_pct = GUARD_MIN_WORKER_PCT,
    .worker_init = worker_init,
};

/* an opool is a cpool (the type stays the engine's own name) */
#define CP(p) ((cpool *)(p))

_Static_assert(OPOOL_MAX_CHUNKS == CPOOL_MAX_CHUNKS, "one chunk limit");

static _Thread_local opool *cur; /* the calling thread's current pool (opool_set_current) */

cinfer_status *opool_create(int threads, opool **out) {
  cpool *p;
  cinfer_status *st = cpool_create(threads, &onnx_policy, "thread pool", &p);
  *out = (opool *)p;
  return st;
}

void opool_destroy(opool *p) { cpool_destroy(CP(p)); }

int opool_threads(const opool *p) { return cpool_size((const cpool *)p); }

void opool_hold(opool *p, bool on) { cpool_hold(CP(p), on); }

typedef struct {
  opool_fn fn;
  void *ctx;
} run_ctx;

static void run_chunk(void *vc, int64_t c, int64_t n, int tid) {
  (void)n;
  const run_ctx *r = vc;
  r->fn(r->ctx, c, tid);
}

void opool_for(opool *p, int64_t n, opool_fn fn, void *ctx) {
  run_ctx r = {fn, ctx};
  cpool_run(CP(p), n, run_chunk, &r);
}

void opool_get_stats(const opool *p, opool_stats *st) {
  cpool_stats c;
  cpool_get_stats((const cpool *)p, &c);
  *st = (opool_stats){.runs = c.runs, .parallel_runs = c.parallel_runs, .sleeps = c.sleeps,
                      .solo_events = c.solo_events, .chunks = c.chunks, .worker_chunks = c.worker_chunks};
}

void opool_set_guard(opool *p, int64_t window_ns, int wait_pct, int64_t solo_ns) {
  cpool_set_guard(CP(p), window_ns, wait_pct, solo_ns);
}

void opool_set_alone(opool *p, bool on) { cpool_set_alone(CP(p), on); }

int64_t opool_mode_estimate(const opool_mode *c, int mode) {
  int n = c->n[mode];
  if (n <= 0) return -1;
  int64_t v[OPOOL_MODE_KEEP];
  for (int i = 0; i < n; i++) { /* insertion sort of the kept times */
    int64_t x = c->t[mode][i];
    int j = i;
    for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
    v[j] = x;
  }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* runs from one probe to the next (a zeroed opool_mode has gap 0: the first gap) */
static int probe_gap(const opool_mode *c) { return c->gap ? c->gap : OPOOL_PROBE_FIRST; }

static bool learning(const opool_mode *c) {
  return c->n[OPOOL_POOL] < OPOOL_MODE_LEARN || c->n[OPOOL_ALONE] < OPOOL_MODE_LEARN;
}

int opool_mode_pick(const opool_mode *c) {
  if (learning(c)) /* alternate */
    return c->n[OPOOL_ALONE] < c->n[OPOOL_POOL] ? OPOOL_ALONE : OPOOL_POOL;
  if (c->again) return !c->cur;
  int64_t e = opool_mode_estimate(c, c->cur), o = opool_mode_estimate(c, !c->cur);
  /* the mode in use has become clearly slower than the other one was: probe the other now
   * (its times may be old; it takes two winning probes to switch) */
  if (e > o + o / OPOOL_CHALLENGE) return !c->cur;
  int cap = o - e > e / 4 ? OPOOL_PROBE_RARELY : OPOOL_PROBE_EVERY;
  int gap = probe_gap(c);
  return c->since >= (gap < cap ? gap : cap) - 1 ? !c->cur : c->cur;
}

void opool_mode_record(opool_mode *c, int mode, int64_t ns) {
  if (mode != OPOOL_POOL && mode != OPOOL_ALONE) return;
  bool was_learning = learning(c);
  bool won = !was_learning && mode != c->cur && ns < opool_mode_estimate(c, c->cur);
  c->t[mode][c->pos[mode]] = ns;
  c->pos[mode] = (c->pos[mode] + 1) % OPOOL_MODE_KEEP;
  if (c->n[mode] < OPOOL_MODE_KEEP) c->n[mode]++;
  c->runs[mode]++;
  if (was_learning) {
    c->since = 0;
    if (!learning(c)) /* the first choice: the lower median */
      c->cur = opool_mode_estimate(c, OPOOL_ALONE) < opool_mode_estimate(c, OPOOL_POOL) ? OPOOL_ALONE : OPOOL_POOL;
    return;
  }
  if (mode == c->cur) {
    c->since++;
    return;
  }
  /* a probe. Two winning probes in a row (each faster than the median of the mode in use)
   * switch; the gap stays (on a noisy host where the two modes are close, switches come
   * and go and must not bring back the first, short gaps). A win is tried once more at
   * once; a loss doubles the gap to the next probe. */
  c->probes++;
  c->since = 0;
  if (won && c->again) {
    c->cur = mode;
    c->again = false;
    return;
  }
  c->again = won;
  if (!won) {
    int gap = probe_gap(c);
    c->gap = gap < OPOOL_PROBE_RARELY ? 2 * gap : OPOOL_PROBE_RARELY;
  }
}

bool opool_solo(const opool *p) { return cpool_solo((const cpool *)p); }

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
