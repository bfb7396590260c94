/* hist.c: HDR histogram (see bench.h for the bucket layout and its precision).
 *
 * Invariants: counts[i] is the number of recorded values whose index is i; total is their
 * sum; lo_idx..hi_idx bounds the non-zero counts (lo_idx > hi_idx when empty) so reset and
 * merge touch only the used range; min/max are exact; sum/sumsq are exact for values below
 * 2^40 and fewer than 2^48 records (sum in u128). Not thread-safe: one writer, or a lock. */
#include "bench/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bench_hist {
  uint64_t total;
  uint64_t min, max;
  unsigned __int128 sum, sumsq;
  size_t lo_idx, hi_idx;
  uint64_t counts[BENCH_HIST_BUCKETS];
};

size_t bench_hist_index(uint64_t v) {
  if (v > BENCH_HIST_MAX) v = BENCH_HIST_MAX;
  int msb = 63 - __builtin_clzll(v | 1);
  int shift = msb - BENCH_HIST_SUB_BITS;
  if (shift < 0) shift = 0;
  return ((size_t)shift << BENCH_HIST_SUB_BITS) + (size_t)(v >> shift);
}

static int index_shift(size_t idx) {
  size_t b = idx >> BENCH_HIST_SUB_BITS;
  return b == 0 ? 0 : (int)b - 1;
}

/* The lowest value of bucket idx. */
static uint64_t index_value(size_t idx) {
  int s = index_shift(idx);
  uint64_t sub = (uint64_t)idx - ((uint64_t)s << BENCH_HIST_SUB_BITS);
  return sub << s;
}

uint64_t bench_hist_lowest_equiv(uint64_t v) { return index_value(bench_hist_index(v)); }

uint64_t bench_hist_highest_equiv(uint64_t v) {
  size_t i = bench_hist_index(v);
  return index_value(i) + ((UINT64_C(1) << index_shift(i)) - 1);
}

bench_hist *bench_hist_create(void) {
  bench_hist *h = calloc(1, sizeof *h);
  if (h) bench_hist_reset(h);
  return h;
}

void bench_hist_destroy(bench_hist *h) { free(h); }

void bench_hist_reset(bench_hist *h) {
  if (h->lo_idx <= h->hi_idx && h->total)
    memset(&h->counts[h->lo_idx], 0, (h->hi_idx - h->lo_idx + 1) * sizeof h->counts[0]);
  h->total = 0;
  h->min = UINT64_MAX;
  h->max = 0;
  h->sum = h->sumsq = 0;
  h->lo_idx = BENCH_HIST_BUCKETS;
  h->hi_idx = 0;
}

void bench_hist_record(bench_hist *h, uint64_t v) {
  if (v > BENCH_HIST_MAX) v = BENCH_HIST_MAX;
  size_t i = bench_hist_index(v);
  h->counts[i]++;
  h->total++;
  if (i < h->lo_idx) h->lo_idx = i;
  if (i > h->hi_idx) h->hi_idx = i;
  if (v < h->min) h->min = v;
  if (v > h->max) h->max = v;
  h->sum += v;
  h->sumsq += (unsigned __int128)v * v;
}

void bench_hist_merge(bench_hist *dst, const bench_hist *src) {
  if (!src->total) return;
  for (size_t i = src->lo_idx; i <= src->hi_idx; i++) dst->counts[i] += src->counts[i];
  dst->total += src->total;
  if (src->lo_idx < dst->lo_idx) dst->lo_idx = src->lo_idx;
  if (src->hi_idx > dst->hi_idx) dst->hi_idx = src->hi_idx;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
  dst->sum += src->sum;
  dst->sumsq += src->sumsq;
}

uint64_t bench_hist_count(const bench_hist *h) { return h->total; }
uint64_t bench_hist_min(const bench_hist *h) { return h->total ? h->min : 0; }
uint64_t bench_hist_max(const bench_hist *h) { return h->total ? h->max : 0; }

double bench_hist_mean(const bench_hist *h) {
  return h->total ? (double)h->sum / (double)h->total : 0.0;
}

double bench_hist_stddev(const bench_hist *h) {
  if (h->total < 2) return 0.0;
  /* n*sumsq - sum^2 is exact in u128 for our limits when it fits; fall back to long
   * double otherwise. */
  long double n = (long double)h->total, s = (long double)h->sum,
              q = (long double)h->sumsq;
  long double var = (q - s * s / n) / n;
  return var > 0 ? sqrt((double)var) : 0.0;
}

uint64_t bench_hist_percentile(const bench_hist *h, double p) {
  if (!h->total) return 0;
  if (p < 0) p = 0;
  if (p > 100) p = 100;
  /* the tiny relative nudge keeps 99.9% of 1000 at rank 999 despite 0.999 being inexact */
  double r = p / 100.0 * (double)h->total;
  uint64_t rank = (uint64_t)ceil(r - r * 1e-12);
  if (rank < 1) rank = 1;
  if (rank > h->total) rank = h->total;
  uint64_t seen = 0;
  for (size_t i = h->lo_idx; i <= h->hi_idx; i++) {
    seen += h->counts[i];
    if (seen >= rank) {
      uint64_t v = index_value(i) + ((UINT64_C(1) << index_shift(i)) - 1);
      if (v > h->max) v = h->max;
      if (v < h->min) v = h->min;
      return v;
    }
  }
  return h->max;
}
