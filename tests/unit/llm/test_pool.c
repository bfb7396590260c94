/* test_pool.c: the thread pool runs every chunk exactly once per run, on valid thread ids,
 * across many back-to-back runs of varying sizes (workers spinning, sleeping, joining late)
 * and for pool sizes 1..4; llm_pool_run gives each part 0..size-1 once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_chunks_once)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
