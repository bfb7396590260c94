/* test_bench_hist.c: the HDR histogram against a sorted-array oracle (nearest-rank
 * percentiles), its bucket precision (3 significant digits), merging across "threads",
 * exact mean/stddev, and the stability rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bench/bench.h"

static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Oracle: nearest rank with p given in thousandths of a percent (exact integer math). */
static uint64_t oracle(const uint64_t *sorted, size_t n, uint64_t p_milli) {
  uint64_t rank = (p_milli * n + 100000 - 1) / 100000;
  if (rank < 1) rank = 1;
  return sorted[rank - 1];
}

static void test_bucket_precision(void **st) {
  uint64_t s = 7;
  for (int i = 0; i < 200000; i++) {
    int bits = (int)(rng(&s) % 41);
    uint64_t v = bits ? rng(&s) >> (64 - bits) : 0;
    uint64_t lo = bench_hist_lowest_equiv(v), hi = bench_hist_highest_equiv(v);
    assert_true(lo <= v && v <= hi);
    uint64_t width = hi - lo + 1;
    if (v < 2048) assert_int_equal(width, 1); /* exact below 2048 */
    else assert_true(width * 1024 <= lo);     /* <= 1/1024 of the value: 3 sig. digits */
    assert_int_equal(bench_hist_lowest_equiv(lo), lo);
    assert_int_equal(bench_hist_highest_equiv(hi), hi);
    assert_true(bench_hist_index(v) < BENCH_HIST_BUCKETS);
  }
  /* buckets are contiguous and increasing */
  for (uint64_t v = 0; v < 200000; v++)
    assert_true(bench_hist_index(v + 1) == bench_hist_index(v) ||
                bench_hist_index(v + 1) == bench_hist_index(v) + 1);
  assert_int_equal(bench_hist_index(BENCH_HIST_MAX), BENCH_HIST_BUCKETS - 1);
}

static void check_against_oracle(uint64_t *vals, size_t n) {
  bench_hist *h = bench_hist_create();
  assert_non_null(h);
  long double sum = 0;
  for (size_t i = 0; i < n; i++) {
    bench_hist_record(h, vals[i]);
    sum += vals[i];
  }
  qsort(vals, n, sizeof *vals, cmp_u64);
  assert_int_equal(bench_hist_count(h), n);
  assert_int_equal(bench_hist_min(h), vals[0]);
  assert_int_equal(bench_hist_max(h), vals[n - 1]);
  static const uint64_t ps[] = {0, 1000, 25000, 50000, 90000, 95000, 99000, 99900, 99990, 100000};
  for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
    uint64_t want = oracle(vals, n, ps[k]);
    uint64_t got = bench_hist_percentile(h, (double)ps[k] / 1000.0);
    /* same bucket as the true value, and within its precision */
    assert_int_equal(bench_hist_lowest_equiv(got), bench_hist_lowest_equiv(want));
    uint64_t diff = got > want ? got - want : want - got;
    assert_true(diff * 1024 <= want || diff == 0);
  }
  double mean = (double)(sum / n);
  assert_true(fabs(bench_hist_mean(h) - mean) <= 1e-9 * mean + 1e-9);
  long double var = 0;
  for (size_t i = 0; i < n; i++) var += ((long double)vals[i] - mean) * ((long double)vals[i] - mean);
  double sd = sqrt((double)(var / n));
  assert_true(fabs(bench_hist_stddev(h) - sd) <= 1e-6 * sd + 1e-6);
  bench_hist_destroy(h);
}

static void test_oracle_distributions(void **st) {
  uint64_t s = 42;
  enum { N = 100000 };
  uint64_t *v = malloc(N * sizeof *v);
  assert_non_null(v);
  /* small exact values */
  for (size_t i = 0; i < N; i++) v[i] = rng(&s) % 3000;
  check_against_oracle(v, N);
  /* latency-like: log-uniform from 10 us to 10 s in ns */
  for (size_t i = 0; i < N; i++)
    v[i] = (uint64_t)(1e4 * pow(1e6, (double)(rng(&s) >> 11) * 0x1.0p-53));
  check_against_oracle(v, N);
  /* heavy tail: mostly 1 ms, 0.5% at 50-100 ms */
  for (size_t i = 0; i < N; i++)
    v[i] = rng(&s) % 200 == 0 ? 50000000 + rng(&s) % 50000000 : 1000000 + rng(&s) % 1000;
  check_against_oracle(v, N);
  /* tiny sample sizes */
  for (size_t n = 1; n <= 20; n++) {
    for (size_t i = 0; i < n; i++) v[i] = 1000 + rng(&s) % 100000;
    check_against_oracle(v, n);
  }
  free(v);
}

static void test_merge(void **st) {
  uint64_t s = 9;
  bench_hist *all = bench_hist_create(), *part[4], *merged = bench_hist_create();
  for (int t = 0; t < 4; t++) part[t] = bench_hist_create();
  for (int i = 0; i < 40000; i++) {
    uint64_t v = 500 + rng(&s) % 5000000;
    bench_hist_record(all, v);
    bench_hist_record(part[i % 4], v);
  }
  for (int t = 0; t < 4; t++) bench_hist_merge(merged, part[t]);
  assert_int_equal(bench_hist_count(merged), bench_hist_count(all));
  assert_int_equal(bench_hist_min(merged), bench_hist_min(all));
  assert_int_equal(bench_hist_max(merged), bench_hist_max(all));
  assert_true(bench_hist_mean(merged) == bench_hist_mean(all));
  for (double p = 0; p <= 100; p += 0.5)
    assert_int_equal(bench_hist_percentile(merged, p), bench_hist_percentile(all, p));
  /* reset empties; recording again works; merging an empty one changes nothing */
  bench_hist_reset(part[0]);
  assert_int_equal(bench_hist_count(part[0]), 0);
  assert_int_equal(bench_hist_percentile(part[0], 50), 0);
  bench_hist_merge(merged, part[0]);
  assert_int_equal(bench_hist_count(merged), 40000);
  bench_hist_record(part[0], 77);
  assert_int_equal(bench_hist_percentile(part[0], 99), 77);
  for (int t = 0; t < 4; t++) bench_hist_destroy(part[t]);
  bench_hist_destroy(all);
  bench_hist_destroy(merged);
  bench_hist_destroy(NULL);
}

static void test_clamp(void **st) {
  bench_hist *h = bench_hist_create();
  bench_hist_record(h, UINT64_MAX);
  bench_hist_record(h, BENCH_HIST_MAX + 5);
  assert_int_equal(bench_hist_max(h), BENCH_HIST_MAX);
  assert_int_equal(bench_hist_percentile(h, 100), BENCH_HIST_MAX);
  bench_hist_destroy(h);
}

static void test_stability(void **st) {
  double t[] = {100, 50, 100, 105, 96}, l[] = {10, 30, 10, 10.5, 9.7};
  assert_false(bench_stable(t, l, 2, 3, 0.10)); /* too few windows */
  assert_false(bench_stable(t, l, 3, 3, 0.10)); /* 100, 50, 100 */
  assert_true(bench_stable(t, l, 5, 3, 0.10));  /* 100, 105, 96 and 10, 10.5, 9.7 */
  double l2[] = {10, 30, 10, 10, 13};            /* latency jumps: 13 vs mean 11 */
  assert_false(bench_stable(t, l2, 5, 3, 0.10));
  assert_true(bench_stable(t, l2, 5, 3, 0.20));
  double t0[] = {0, 0, 0}, l0[] = {1, 1, 1};    /* nothing completed: never stable */
  assert_false(bench_stable(t0, l0, 3, 3, 0.10));
  double te[] = {100, 111, 100}, le[] = {1, 1, 1}; /* 111 vs mean 103.7: +7% ok */
  assert_true(bench_stable(te, le, 3, 3, 0.10));
  double tf[] = {100, 135, 100};                   /* 135 vs mean 111.7: +21% */
  assert_false(bench_stable(tf, le, 3, 3, 0.10));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bucket_precision), cmocka_unit_test(test_oracle_distributions),
      cmocka_unit_test(test_merge), cmocka_unit_test(test_clamp),
      cmocka_unit_test(test_stability),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
