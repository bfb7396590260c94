/* cpool.h: a fixed thread pool for data-parallel kernels with dynamically claimed chunks,
 * shared by the ONNX engine (src/backends/onnx/opool.h) and the LLM engine
 * (src/backends/llm/pool.h); the two differ only in their waiting policy (cpool_policy).
 *
 * cpool_run(p, n, fn, ctx) calls fn(ctx, c, n, tid) exactly once for every chunk
 * c = 0..n-1 and returns when all have finished. Chunks are claimed from one shared counter
 * by whichever threads are running: the caller (tid 0) and the workers (1..size-1), so a
 * worker that is late to wake or descheduled (another process on its core) delays a run by
 * at most the chunk it holds: the caller claims the rest. tid < cpool_size(p) indexes
 * per-thread scratch. One run at a time (the pool has one owner thread). n is at most
 * CPOOL_MAX_CHUNKS; a larger n, n == 1, a one-thread pool, a pool set alone (cpool_set_alone)
 * and the contention guard's solo period run every chunk on the caller, in order.
 *
 * Waiting policy (cpool_policy, fixed at creation):
 *   - an idle worker spins (pause) while the pool is held (cpool_hold) or, with spin_idle,
 *     always; for at most spin_ns of wall-clock time and/or spin_pauses pauses (0: no such
 *     limit; one of them must be set), calling sched_yield every yield_ns (0: never); then
 *     it sleeps on a condition variable until the next run;
 *   - the caller, once no chunk is left to claim, spins up to caller_spin_ns for the
 *     chunks in flight, then sleeps until the last one signals;
 *   - contention guard: per window of guard_window_ns of multi-thread runs, when the
 *     caller waited for chunks workers held more than guard_wait_pct of the time, or the
 *     workers ran fewer than guard_min_worker_pct of the window's chunks, the pool runs
 *     everything on the caller alone for guard_solo_ns, doubled for each window in a row
 *     that fails again, up to guard_solo_max_ns (== guard_solo_ns: no doubling);
 *   - worker_init, when set, runs first on every worker thread (the ONNX engine holds
 *     oneDNN's OpenMP to one thread there). */
#ifndef CINFER_CORE_CPOOL_H
#define CINFER_CORE_CPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/types.h"

#define CPOOL_MAX_CHUNKS 65536

typedef struct cpool cpool;
typedef void (*cpool_fn)(void *ctx, int64_t chunk, int64_t n_chunks, int tid);

typedef struct {
  bool spin_idle;       /* spin also when the pool is not held */
  int64_t spin_ns;      /* wall-clock spin limit of an idle worker (0: none) */
  int64_t spin_pauses;  /* pause-count spin limit of an idle worker (0: none) */
  int64_t yield_ns;     /* sched_yield this often while spinning (0: never) */
  int64_t caller_spin_ns;
  int64_t guard_window_ns, guard_solo_ns, guard_solo_max_ns;
  int guard_wait_pct, guard_min_worker_pct;
  void (*worker_init)(void);
} cpool_policy;

/* statistics: runs (calls of 2+ chunks), those split over threads, worker sleeps, switches
 * to running alone, the split runs' chunks and those run by workers */
typedef struct {
  uint64_t runs, parallel_runs, sleeps, solo_events, chunks, worker_chunks;
} cpool_stats;

/* threads: 1..256 (the caller is one of them); what names the pool in errors */
cinfer_status *cpool_create(int threads, const cpool_policy *pol, const char *what, cpool **out);
void cpool_destroy(cpool *p);
int cpool_size(const cpool *p);
void cpool_run(cpool *p, int64_t n_chunks, cpool_fn fn, void *ctx);
/* an inference (a burst of runs) begins (true) / ends (false): without spin_idle idle
 * workers spin only while held; true also wakes sleeping workers (a run of no chunks) so
 * their wake-up overlaps the caller's first steps */
void cpool_hold(cpool *p, bool on);
/* on: every run executes on the caller, in order, and cpool_hold leaves the workers asleep,
 * until called with off (the owner's choice for a whole inference: the ONNX engine's
 * opool_mode, which measures both ways); call it between runs, outside a hold */
void cpool_set_alone(cpool *p, bool on);
/* whether a run now would execute on the caller alone (one thread, set alone, or the guard's
 * solo period) */
bool cpool_solo(const cpool *p);
void cpool_get_stats(const cpool *p, cpool_stats *st);
/* tests: the guard's window (ns), wait share (percent) and solo time (ns) */
void cpool_set_guard(cpool *p, int64_t window_ns, int wait_pct, int64_t solo_ns);

#endif
