/* opool.h: the ONNX engine's thread pool (replaces OpenMP's teams for the engine's
 * operators; see docs/design/onnx.md, "Threads").
 *
 * opool_for(p, n, fn, ctx) calls fn(ctx, c, tid) exactly once for every chunk c = 0..n-1
 * and returns when all have finished. Chunks are claimed from one shared counter by the
 * threads that are running: the caller (tid 0) and the workers (1..threads-1). A worker that
 * is late to wake or descheduled (another process on its core) delays a run by at most
 * the chunk it holds: the caller claims the rest. tid < opool_threads(p) indexes
 * per-thread scratch. One run at a time (a session runs on one thread at a time).
 *
 * Waiting policy, without tuning knobs:
 *   - between the operators of one inference (opool_hold(p, true) .. (p, false)) an idle
 *     worker spins, with pause, for up to OPOOL_SPIN_NS of wall-clock time (not a count
 *     of pauses, whose length differs 10x between CPUs), then sleeps on a condition
 *     variable; the next operator usually follows within microseconds;
 *   - outside an inference (hold off) a worker that finishes its chunk sleeps at once, so
 *     an idle server's pools cost nothing and several instances do not spin against each
 *     other between requests;
 *   - the caller, once no chunk is left to claim, spins up to OPOOL_CALLER_SPIN_NS for the
 *     chunks in flight, then sleeps until the last one signals;
 *   - contention guard: when, over a window of multi-thread runs, the caller waits more
 *     than a share of the time for chunks workers hold (a worker descheduled behind
 *     another process), or the workers ran almost none of the chunks, the pool runs everything on the caller alone for a while (200
 *     ms, doubled up to 3.2 s while every try waits too much again) and then tries
 *     again (see opool.c);
 *   - pool or alone, measured (opool_mode below): a session times its inferences with the
 *     pool and alone (opool_set_alone) and runs the faster, probing the other now and then.
 *
 * The thread-local "current pool" is what the kernels use: opool_par(n, fn, ctx) runs on
 * opool_current() (set by the session around a plan run), inline when there is none. */
#ifndef CINFER_ONNX_OPOOL_H
#define CINFER_ONNX_OPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/types.h"

#define OPOOL_MAX_CHUNKS 65536

typedef struct opool opool;
typedef void (*opool_fn)(void *ctx, int64_t chunk, int tid);

cinfer_status *opool_create(int threads, opool **out);
void opool_destroy(opool *p);
int opool_threads(const opool *p);
void opool_for(opool *p, int64_t n_chunks, opool_fn fn, void *ctx);
/* an inference begins (true) / ends (false): idle workers spin only while held */
void opool_hold(opool *p, bool on);
/* statistics (tests, profile): runs given to workers, worker sleeps, solo switches */
typedef struct {
  uint64_t runs, parallel_runs, sleeps, solo_events; /* runs: opool_for calls of 2+ chunks */
  uint64_t chunks, worker_chunks; /* chunks of the parallel runs; those run by workers */
} opool_stats;
void opool_get_stats(const opool *p, opool_stats *st);
/* tests: the contention guard's window (ns of multi-thread runs), wait share (percent)
 * and solo time (ns) */
void opool_set_guard(opool *p, int64_t window_ns, int wait_pct, int64_t solo_ns);

/* on: the pool runs everything on the caller and leaves its workers asleep (one inference
 * at a time, chosen by opool_mode below); call it outside opool_hold */
void opool_set_alone(opool *p, bool on);

/* Pool or alone, measured (docs/design/onnx.md, "Pool or alone"). A session with a pool
 * times every inference of a plan (the same work each time) and keeps the last
 * OPOOL_MODE_KEEP times of each mode: OPOOL_POOL (operators split over the pool) and
 * OPOOL_ALONE (the same plan on the caller only, outputs bit-identical). While learning it
 * alternates until each mode has OPOOL_MODE_LEARN times; then it runs the mode whose
 * median is lower, and the other one as a probe. The gap between probes starts at
 * OPOOL_PROBE_FIRST runs and doubles after each probe that loses, up to OPOOL_PROBE_EVERY
 * (OPOOL_PROBE_RARELY when the two medians differ by more than a quarter: a probe then
 * costs more and is less likely to change the answer); a probe that wins (faster than
 * the median in use) is repeated at once, and two winning probes in a row switch modes
 * (the gap stays as it was). Only probes switch: when the median of the mode in use rises
 * more than 1/OPOOL_CHALLENGE above the other's, the other is probed at once (its kept
 * times may be many runs old; with a median of three compared against them, two slow
 * pool runs in a row, a few ms of the other core taken by the host, switched UltraFace at
 * 2 threads to alone, 50% slower, for 16-64 runs). The learning runs are a process's
 * first, cold ones, when the pool's runs often pay more of a cold start than alone's
 * (UltraFace at 2 threads: pool 4.6 ms against alone 3.7 while learning, 2.0 against 3.0
 * ten runs later): the short first gaps correct such a choice within a few runs instead
 * of 64. A change of conditions that slows the mode in use raises its median (three slow
 * runs of five) and brings the two probes at once. So the pool can only be slower than
 * running alone by the probes' share, and on a host where the pool helps, alone costs the
 * same share. Pure logic: the caller measures (tests inject times). */
enum { OPOOL_POOL = 0, OPOOL_ALONE = 1 };
#define OPOOL_MODE_KEEP 5
#define OPOOL_MODE_LEARN 2
#define OPOOL_PROBE_FIRST 2
#define OPOOL_PROBE_EVERY 16
#define OPOOL_PROBE_RARELY 64
#define OPOOL_CHALLENGE 4 /* the mode in use 1/4 slower than the other: probe at once */
typedef struct {
  int64_t t[2][OPOOL_MODE_KEEP]; /* the last times of each mode (a ring) */
  int n[2], pos[2];              /* times kept (<= KEEP), next slot */
  int cur;                       /* the mode in use (the lower median) */
  int since;                     /* runs in the mode in use since the last probe */
  int gap;                       /* runs from one probe to the next (0: OPOOL_PROBE_FIRST) */
  bool again;                    /* the last probe won: the next run probes again */
  uint64_t runs[2], probes;      /* statistics: runs recorded per mode, probes */
} opool_mode;
/* the mode of the next run (a zeroed opool_mode is a fresh one) */
int opool_mode_pick(const opool_mode *c);
/* the time of a run in mode `mode` (a run whose time is not the plan's work, e.g. one that
 * built a plan, is not recorded) */
void opool_mode_record(opool_mode *c, int mode, int64_t ns);
/* the median of a mode's kept times (-1: none) */
int64_t opool_mode_estimate(const opool_mode *c, int mode);

/* whether a run now would execute on the caller alone (no pool, one thread, or the
 * contention guard's solo period): a kernel may then pick its one-thread variant */
bool opool_solo(const opool *p);
bool opool_cur_solo(void);

/* the pool the calling thread's kernels run on (NULL: inline); returns the previous one */
opool *opool_set_current(opool *p);
opool *opool_current(void);
/* threads of the current pool (1 without one) */
int opool_cur_threads(void);
/* opool_for on the current pool (inline without one) */
void opool_par(int64_t n_chunks, opool_fn fn, void *ctx);

/* Chunk count for `work` units of an operator split over the current pool's threads:
 * 1 (no split) when the work is below `min_per_chunk` units per chunk for two chunks,
 * else up to 4 chunks per thread, never more than items. The unit is the caller's (an
 * element, a multiply-add); callers pass min_per_chunk from the measured thresholds in
 * kern_util.h. */
int64_t opool_chunks(int64_t items, double work, double min_per_chunk);
/* Split thresholds (the smallest chunk worth handing to another thread), measured on the
 * 2-core test host (docs/benchmarks-onnx.md, "Split thresholds"): a hand-off to a
 * spinning worker costs ~1-3 us of the caller's time, a chunk must be several times that.
 *   OPOOL_MIN_ELEMS: float elements of a memory-bound elementwise or copy loop;
 *   OPOOL_MIN_MACS:  multiply-adds of a convolution slice. */
#define OPOOL_MIN_ELEMS 16384.0
#define OPOOL_MIN_MACS 1048576.0
/* OPOOL_MIN_DW_MACS: multiply-adds of a grouped (depthwise) conv slice, which reads only
 * its channels; a depthwise MAC takes ~3x a dense one (RetinaFace's 128-channel 3x3
 * depthwise convs at 40x40, 1.8 M MACs, take ~65 us, a dense 1x1 of 26 M ~340 us). A
 * depthwise conv mostly follows a 1x1 conv split by channels, so left whole it reads
 * half its input from the other core's cache: UltraFace's 64-channel ones at 30x40
 * (0.7 M MACs, 23 us alone) took 50-60 us whole at 2 threads. 150 K (0.4x the 384 K of
 * session 10) splits them: UltraFace 0.92x, RetinaFace 0.92x the 2-thread p50 (pool mode,
 * alternating rounds, session 18); 0.2x measured the same as 0.4x. */
#define OPOOL_MIN_DW_MACS 153600.0
/* Costs in dense-conv multiply-adds, shared by the split thresholds and interop.c's
 * section costs: a first-layer (smallk, C*KH*KW <= 32) MAC runs at ~25 GMAC/s against
 * ~75 for a 1x1 conv; a fused tanh or sigmoid costs ~20 per output element (SSR-Net
 * gender's 3 -> 16 Conv+Tanh at 64x64, 1.8 M MACs, takes as long as its 3 -> 32 Conv+Relu
 * of 3.5 M: ~0.1 ms, which split well at 2 threads but fell under the MAC threshold). */
#define OPOOL_COST_SMALLK 3.0
#define OPOOL_COST_TANH 20.0

/* [*lo, *hi) of chunk c of n over `items` items, balanced */
static inline void opool_range(int64_t items, int64_t n, int64_t c, int64_t *lo, int64_t *hi) {
  *lo = items * c / n;
  *hi = items * (c + 1) / n;
}

#endif
