/* pool.h: a small fixed thread pool for data-parallel kernels, with dynamic chunking.
 *
 * llm_pool_run_chunks(p, fn, ctx, n) calls fn(ctx, c, n, tid) exactly once for every chunk
 * c = 0..n-1 and returns when all have finished. Chunks are claimed from a shared counter
 * by whichever threads are running (the caller is tid 0, workers 1..size-1), so a worker
 * that is descheduled (a shared machine) or late to wake delays a run by at most the chunk
 * it holds, never by a fixed share of the work. tid < llm_pool_size(p) indexes per-thread
 * scratch. llm_pool_run(p, fn, ctx) is the same with n = llm_pool_size(p) chunks and
 * fn(ctx, c, n): part c of n (on any thread). One run at a time (the engine's step thread
 * owns the pool). n is at most LLM_POOL_MAX_CHUNKS.
 *
 * Contention guard: when, over a window of multi-thread runs, the caller spends more than a
 * set share of the time waiting for workers to finish chunks they hold (a worker
 * descheduled behind another process or a CPU quota), the pool runs everything on the
 * caller alone for a while, then tries its workers again (defaults: 20 ms window, 40%,
 * 400 ms). llm_pool_solo_events counts the switches to running alone. */
#ifndef CINFER_LLM_POOL_H
#define CINFER_LLM_POOL_H

#include "cinfer/types.h"

#define LLM_POOL_MAX_CHUNKS 65536

typedef struct llm_pool llm_pool;
typedef void (*llm_task_fn)(void *ctx, int ith, int nth);
typedef void (*llm_chunk_fn)(void *ctx, int chunk, int n_chunks, int tid);

cinfer_status *llm_pool_create(int n_threads, llm_pool **out);
void llm_pool_destroy(llm_pool *p);
int llm_pool_size(const llm_pool *p);
void llm_pool_run(llm_pool *p, llm_task_fn fn, void *ctx);
void llm_pool_run_chunks(llm_pool *p, llm_chunk_fn fn, void *ctx, int n_chunks);
uint64_t llm_pool_solo_events(const llm_pool *p);
/* Tests and tuning: window (ns of multi-thread runs), wait share (percent), solo time (ns). */
void llm_pool_set_guard(llm_pool *p, int64_t window_ns, int wait_pct, int64_t solo_ns);

#endif
