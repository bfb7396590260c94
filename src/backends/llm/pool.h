/* pool.h: a small fixed thread pool for data-parallel kernels. llm_pool_run(p, fn, ctx)
 * calls fn(ctx, ith, nth) for ith = 0..nth-1 on nth threads (the caller is thread 0) and
 * returns when all have finished. One run at a time (the engine's step thread owns it). */
#ifndef CINFER_LLM_POOL_H
#define CINFER_LLM_POOL_H

#include "cinfer/types.h"

typedef struct llm_pool llm_pool;
typedef void (*llm_task_fn)(void *ctx, int ith, int nth);

cinfer_status *llm_pool_create(int n_threads, llm_pool **out);
void llm_pool_destroy(llm_pool *p);
int llm_pool_size(const llm_pool *p);
void llm_pool_run(llm_pool *p, llm_task_fn fn, void *ctx);

#endif
