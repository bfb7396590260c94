/* test_pool.c: the thread pool runs every chunk exactly once per run, on valid thread ids,
 * across many back-to-back runs of varying sizes (workers spinning, sleeping, joining late)
 * and for pool sizes 1..4; llm_pool_run gives each part 0..size-1 once. The contention
 * guard runs everything on the caller while workers keep it waiting, then uses them again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "backends/llm/pool.h"

enum { MAXC = 4096 };
typedef struct {
  atomic_int hits[MAXC];
  atomic_int bad;
  int size, n;
} run_ctx;

static void chunk_fn(void *c, int chunk, int n, int tid) {
  run_ctx *r = c;
  if (n != r->n || chunk < 0 || chunk >= n || tid < 0 || tid >= r->size) atomic_fetch_add(&r->bad, 1);
  else atomic_fetch_add(&r->hits[chunk], 1);
}
static void part_fn(void *c, int ith, int nth) { chunk_fn(c, ith, nth, 0); }

static void test_chunks_once(void **s) {
  (void)s;
  static run_ctx r;
  for (int size = 1; size <= 4; size++) {
    llm_pool *p;
    assert_null(llm_pool_create(size, &p));
    assert_int_equal(llm_pool_size(p), size);
    for (int run = 0; run < 3000; run++) {
      int n = run % 7 == 0 ? 1 : run % 5 == 0 ? MAXC : 1 + (run * 37) % 97;
      memset(&r, 0, sizeof r);
      r.size = size;
      r.n = n;
      llm_pool_run_chunks(p, chunk_fn, &r, n);
      assert_int_equal(atomic_load(&r.bad), 0);
      for (int c = 0; c < n; c++)
        if (atomic_load(&r.hits[c]) != 1) fail_msg("size %d run %d: chunk %d of %d ran %d times", size, run, c, n, atomic_load(&r.hits[c]));
    }
    memset(&r, 0, sizeof r);
    r.size = size;
    r.n = size;
    llm_pool_run(p, part_fn, &r);
    for (int c = 0; c < size; c++) assert_int_equal(atomic_load(&r.hits[c]), 1);
    llm_pool_run_chunks(p, chunk_fn, &r, 0); /* no chunks: returns at once */
    llm_pool_destroy(p);
  }
  llm_pool_destroy(NULL);
  llm_pool *p;
  cinfer_status *st = llm_pool_create(0, &p);
  assert_non_null(st);
  assert_null(p);
  cinfer_status_free(st);
}

static int64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct {
  atomic_int on_worker, total;
  int slow_us; /* a worker's chunk takes this long: a worker descheduled while holding it */
} slow_ctx;

static void slow_fn(void *c, int chunk, int n, int tid) {
  (void)chunk, (void)n;
  slow_ctx *s = c;
  if (tid != 0) {
    atomic_fetch_add(&s->on_worker, 1);
    if (s->slow_us) usleep((useconds_t)s->slow_us);
  } else {
    int64_t t0 = mono_ns();
    while (mono_ns() - t0 < 20000) {
    } /* 20 us of work */
  }
  atomic_fetch_add(&s->total, 1);
}

static void test_guard_runs_alone_under_contention(void **st) {
  (void)st;
  llm_pool *p;
  assert_null(llm_pool_create(2, &p));
  llm_pool_set_guard(p, 5000000 /* 5 ms */, 40, 300000000 /* 300 ms */);
  static slow_ctx s;
  /* slow workers: the guard trips within a bounded number of runs */
  s.slow_us = 3000;
  int runs = 0;
  while (llm_pool_solo_events(p) == 0 && runs < 2000) {
    llm_pool_run_chunks(p, slow_fn, &s, 16);
    runs++;
  }
  assert_int_equal(llm_pool_solo_events(p), 1);
  /* alone now: every chunk on the caller, and still every chunk once */
  atomic_store(&s.on_worker, 0);
  atomic_store(&s.total, 0);
  for (int i = 0; i < 3; i++) llm_pool_run_chunks(p, slow_fn, &s, 16);
  assert_int_equal(atomic_load(&s.on_worker), 0);
  assert_int_equal(atomic_load(&s.total), 48);
  /* after the solo period the workers take chunks again (bounded wait on that condition) */
  s.slow_us = 0;
  int64_t deadline = mono_ns() + 20000000000LL;
  while (atomic_load(&s.on_worker) == 0 && mono_ns() < deadline) llm_pool_run_chunks(p, slow_fn, &s, 16);
  assert_true(atomic_load(&s.on_worker) > 0);
  llm_pool_destroy(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_chunks_once),
                                     cmocka_unit_test(test_guard_runs_alone_under_contention)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
