/* test_cpool.c: the core thread pool (src/core/cpool.h) under policies of both shapes
 * (spin limit by time with yields and a hold, as the ONNX engine's; by pauses, always
 * spinning, as the LLM engine's): every chunk runs exactly once with its chunk count and
 * a tid below the pool size, the caller takes chunks from the front and the workers from
 * the back, runs too large for the ticket run inline and in order, a
 * policy without a spin limit is refused, statistics count what ran. The engines' own
 * tests (test_onnx_pool, test_llm_pool) cover their wrappers and the contention guard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/cpool.h"

static const cpool_policy timed = {.spin_ns = 100000, .yield_ns = 20000, .caller_spin_ns = 20000,
                                   .guard_window_ns = 20000000, .guard_solo_ns = 200000000,
                                   .guard_solo_max_ns = 3200000000LL, .guard_wait_pct = 30,
                                   .guard_min_worker_pct = 10};
static const cpool_policy pauses = {.spin_idle = true, .spin_pauses = 20000, .caller_spin_ns = 50000,
                                    .guard_window_ns = 20000000, .guard_solo_ns = 400000000,
                                    .guard_solo_max_ns = 400000000, .guard_wait_pct = 40};

typedef struct {
  atomic_int *hits;
  int64_t n;
  int size;
  atomic_int bad;   /* a chunk saw a wrong n or tid */
  int64_t last;     /* inline runs: the previous chunk (order check) */
  atomic_int order; /* inline runs out of order */
} ctx_t;

static void count(void *vc, int64_t c, int64_t n, int tid) {
  ctx_t *x = vc;
  if (n != x->n || tid < 0 || tid >= x->size || c < 0 || c >= n) atomic_store(&x->bad, 1);
  else atomic_fetch_add(&x->hits[c], 1);
}

static void check_runs(const cpool_policy *pol, int threads) {
  cpool *p;
  assert_null(cpool_create(threads, pol, "test pool", &p));
  assert_int_equal(cpool_size(p), threads);
  const int64_t sizes[] = {1, 2, 3, 7, 64, 1000, 4096};
  for (int rep = 0; rep < 50; rep++) {
    cpool_hold(p, rep % 2 == 0);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      int64_t n = sizes[k];
      ctx_t x = {calloc((size_t)n, sizeof(atomic_int)), n, threads, 0, 0, 0};
      cpool_run(p, n, count, &x);
      assert_int_equal(atomic_load(&x.bad), 0);
      for (int64_t c = 0; c < n; c++)
        if (atomic_load(&x.hits[c]) != 1) fail_msg("%d threads, run of %lld: chunk %lld ran %d times", threads,
                                                   (long long)n, (long long)c, atomic_load(&x.hits[c]));
      free(x.hits);
    }
  }
  cpool_hold(p, false);
  cpool_stats st;
  cpool_get_stats(p, &st);
  assert_int_equal(st.runs, 50 * 6); /* every run of 2+ chunks */
  if (threads > 1) assert_true(st.parallel_runs + st.solo_events > 0);
  assert_true(st.worker_chunks <= st.chunks);
  cpool_destroy(p);
}

static void test_timed_policy(void **state) {
  (void)state;
  check_runs(&timed, 1);
  check_runs(&timed, 2);
  check_runs(&timed, 3);
}

static void test_pause_policy(void **state) {
  (void)state;
  check_runs(&pauses, 2);
  check_runs(&pauses, 4);
}

static void ordered(void *vc, int64_t c, int64_t n, int tid) {
  ctx_t *x = vc;
  if (tid != 0 || n != x->n) atomic_store(&x->bad, 1);
  if (c != x->last + 1) atomic_store(&x->order, 1);
  x->last = c;
}

/* more chunks than the ticket's field holds: all of them, inline on the caller, in order */
static void test_too_many_chunks_inline(void **state) {
  (void)state;
  cpool *p;
  assert_null(cpool_create(2, &timed, "test pool", &p));
  ctx_t x = {NULL, CPOOL_MAX_CHUNKS + 5, 2, 0, -1, 0};
  cpool_run(p, x.n, ordered, &x);
  assert_int_equal(atomic_load(&x.bad), 0);
  assert_int_equal(atomic_load(&x.order), 0);
  assert_int_equal(x.last, CPOOL_MAX_CHUNKS + 4);
  cpool_run(p, 0, ordered, &x); /* nothing */
  assert_int_equal(x.last, CPOOL_MAX_CHUNKS + 4);
  cpool_destroy(p);
  cpool_destroy(NULL);
}

/* who ran each chunk; a little work per chunk so that the workers take part */
typedef struct {
  atomic_int tid[64];
  atomic_int seq; /* the caller's chunks in the order it ran them */
  int64_t caller_order[64];
} ends_t;

static void note_tid(void *vc, int64_t c, int64_t n, int tid) {
  (void)n;
  ends_t *e = vc;
  volatile double a = 1.0;
  for (int i = 0; i < 2000; i++) a = a * 1.0000001 + 0.5;
  atomic_store(&e->tid[c], tid);
  if (tid == 0) e->caller_order[atomic_fetch_add(&e->seq, 1)] = c;
}

/* The caller claims chunks from the front (in order), the workers from the back: in every
 * run the caller's chunks are a prefix 0..k-1 and the workers' the rest, so on two threads
 * each runs the same end of every operator (the data it wrote last time is in its own
 * cache). Bounded: up to 20000 runs until the workers have taken part in 50. */
static void check_ends(int threads) {
  cpool *p;
  assert_null(cpool_create(threads, &timed, "test pool", &p));
  cpool_hold(p, true);
  int workers_ran = 0;
  for (int r = 0; r < 20000 && workers_ran < 50; r++) {
    ends_t e;
    memset(&e, 0, sizeof e);
    cpool_run(p, 64, note_tid, &e);
    int k = 0;
    while (k < 64 && atomic_load(&e.tid[k]) == 0) k++;
    for (int c = k; c < 64; c++)
      if (atomic_load(&e.tid[c]) == 0) fail_msg("%d threads: chunk %d ran on the caller after a worker's chunk %d", threads, c, k);
    assert_int_equal(atomic_load(&e.seq), k);
    for (int c = 0; c < k; c++) assert_int_equal(e.caller_order[c], c);
    workers_ran += k < 64;
  }
  cpool_hold(p, false);
  assert_int_equal(workers_ran, 50);
  cpool_destroy(p);
}

static void test_caller_front_workers_back(void **state) {
  (void)state;
  check_ends(2);
  check_ends(3);
}

static void test_refusals(void **state) {
  (void)state;
  cpool *p = (cpool *)&p;
  cpool_policy none = timed;
  none.spin_ns = 0;
  cinfer_status *st = cpool_create(2, &none, "test pool", &p);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "test pool: a spin limit"));
  assert_null(p);
  cinfer_status_free(st);
  st = cpool_create(0, &timed, "test pool", &p);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "threads must be 1..256, got 0"));
  cinfer_status_free(st);
  st = cpool_create(257, &timed, "test pool", &p);
  assert_non_null(st);
  cinfer_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_timed_policy),
      cmocka_unit_test(test_pause_policy),
      cmocka_unit_test(test_too_many_chunks_inline),
      cmocka_unit_test(test_caller_front_workers_back),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
