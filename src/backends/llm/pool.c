/* pool.c: thread pool (see pool.h). Workers wait on a generation counter: each run bumps
 * it under the mutex and broadcasts; workers spin briefly before sleeping so back-to-back
 * kernels in one forward pass do not pay a futex wake each. `pending` counts workers
 * still inside the current run; the caller waits for it to reach zero. */
#include "backends/llm/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

struct llm_pool {
  int n;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv, done_cv;
  atomic_uint gen;
  atomic_int pending;
  llm_task_fn fn;
  void *ctx;
  bool stop;
};

typedef struct { llm_pool *p; int ith; } warg;

static void *worker(void *arg) {
  llm_pool *p = ((warg *)arg)->p;
  int ith = ((warg *)arg)->ith;
  free(arg);
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && spins < 20000) {
      CPU_RELAX();
      spins++;
    }
    if (g == seen) {
      pthread_mutex_lock(&p->mu);
      while ((g = atomic_load(&p->gen)) == seen && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
      bool stop = p->stop;
      pthread_mutex_unlock(&p->mu);
      if (stop && g == seen) return NULL;
    }
    seen = g;
    if (p->stop) return NULL;
    p->fn(p->ctx, ith, p->n);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->mu);
    }
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

void llm_pool_destroy(llm_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  atomic_fetch_add(&p->gen, 1);
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

void llm_pool_run(llm_pool *p, llm_task_fn fn, void *ctx) {
  if (p->n == 1) {
    fn(ctx, 0, 1);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  atomic_store(&p->pending, p->n - 1);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  fn(ctx, 0, p->n);
  int spins = 0;
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < 20000) {
    CPU_RELAX();
    spins++;
  }
  if (atomic_load(&p->pending) > 0) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
}
