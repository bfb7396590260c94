/* stable.c: perf_analyzer's stability rule over measurement windows (see bench.h). */
#include "bench/bench.h"

static bool within(const double *v, size_t k, double tol) {
  double sum = 0, lo = v[0], hi = v[0];
  for (size_t i = 0; i < k; i++) {
    if (!(v[i] > 0)) return false; /* empty window or NaN: never stable */
    sum += v[i];
    if (v[i] < lo) lo = v[i];
    if (v[i] > hi) hi = v[i];
  }
  double mean = sum / (double)k;
  return hi / mean - 1.0 <= tol && 1.0 - lo / mean <= tol;
}

bool bench_stable(const double *throughput, const double *latency, size_t n, size_t k,
                  double tol) {
  if (k == 0 || n < k) return false;
  return within(throughput + n - k, k, tol) && within(latency + n - k, k, tol);
}
