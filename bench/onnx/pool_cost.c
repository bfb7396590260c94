/* pool_cost.c: what the ONNX engine's pool (src/backends/onnx/opool.c) costs per split,
 * and from what size splitting a memory-bound loop over 2 threads pays.
 *
 *   cc -O3 -D_GNU_SOURCE -fopenmp -I src -I include bench/onnx/pool_cost.c src/backends/onnx/opool.c \
 *      src/core/cpool.c src/core/status.c -lm -o /tmp/pool_cost && /tmp/pool_cost
 *
 * 1. hand-off: opool_for of 2 empty chunks on a held 2-thread pool (the worker spinning)
 *    against calling them inline: the caller's cost of one split;
 * 2. y[i] = x[i] > 0 ? x[i] : 0 (Relu, the cheapest memory-bound kernel) over n floats,
 *    whole on the caller against split into 2 chunks on the pool, n = 1K .. 1M, x and y
 *    in cache (the same buffers every time, as consecutive operators of one inference).
 * 3. wake-up cost (fork/join): opool_for of 2 chunks of W us of busy work each; the
 *    excess over W is what one split costs end to end when the worker takes the second
 *    chunk (hand-off + join), measured (a) held, the worker spinning between runs (the
 *    operators of one inference), (b) cold, the pool released and idle 2 ms before each
 *    run (the first split of an inference: the worker wakes from its condition variable).
 *    Also the share of runs in which the worker ran a chunk (on a loaded host it often
 *    does not: the caller then runs both, 2W).
 * Minimum and median over many repetitions, alternating the two variants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/onnx/opool.h"
#include "core/clock.h"

typedef struct {
  const float *x;
  float *y;
  int64_t n, nch;
} relu_ctx;

static void relu_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const relu_ctx *r = vc;
  int64_t lo, hi;
  opool_range(r->n, r->nch, c, &lo, &hi);
  for (int64_t i = lo; i < hi; i++) r->y[i] = r->x[i] > 0 ? r->x[i] : 0;
}

static void empty_chunk(void *vc, int64_t c, int tid) {
  (void)vc;
  (void)c;
  (void)tid;
}

typedef struct {
  double us;
  _Atomic int on_worker;
} busy_ctx;

static void busy_chunk(void *vc, int64_t c, int tid) {
  (void)c;
  busy_ctx *b = vc;
  if (tid) b->on_worker = 1;
  uint64_t end = clock_now_ns() + (uint64_t)(b->us * 1e3);
  while (clock_now_ns() < end) {
  }
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  opool *p;
  if (opool_create(2, &p)) return 1;
  /* no contention guard: its solo periods would hide the worker being measured */
  opool_set_guard(p, 20000000, 100, 0);
  opool_hold(p, true);
  enum { R = 4001 };
  static double t_in[R], t_pool[R];
  for (int r = 0; r < R; r++) {
    uint64_t a = clock_now_ns();
    for (int c = 0; c < 2; c++) empty_chunk(NULL, c, 0);
    uint64_t b = clock_now_ns();
    opool_for(p, 2, empty_chunk, NULL);
    uint64_t e = clock_now_ns();
    t_in[r] = (double)(b - a) / 1e3;
    t_pool[r] = (double)(e - b) / 1e3;
  }
  qsort(t_in, R, sizeof(double), cmpd);
  qsort(t_pool, R, sizeof(double), cmpd);
  printf("hand-off of 2 empty chunks: inline min %.2f med %.2f us; pool min %.2f med %.2f p90 %.2f us\n", t_in[0],
         t_in[R / 2], t_pool[0], t_pool[R / 2], t_pool[R * 9 / 10]);
  int64_t N = 1 << 20;
  float *x = malloc(sizeof(float) * (size_t)N), *y = malloc(sizeof(float) * (size_t)N);
  for (int64_t i = 0; i < N; i++) x[i] = (float)((i * 7919) % 1000) - 500.0f;
  printf("%10s %14s %14s %8s\n", "floats", "whole us min/med", "2 chunks min/med", "med ratio");
  for (int64_t n = 1024; n <= N; n *= 2) {
    int reps = n <= 65536 ? 2001 : 301;
    double *a1 = malloc(sizeof(double) * (size_t)reps), *a2 = malloc(sizeof(double) * (size_t)reps);
    relu_ctx whole = {x, y, n, 1}, two = {x, y, n, 2};
    for (int r = 0; r < reps; r++) {
      uint64_t t0 = clock_now_ns();
      relu_chunk(&whole, 0, 0);
      uint64_t t1 = clock_now_ns();
      opool_for(p, 2, relu_chunk, &two);
      uint64_t t2 = clock_now_ns();
      a1[r] = (double)(t1 - t0) / 1e3;
      a2[r] = (double)(t2 - t1) / 1e3;
    }
    qsort(a1, (size_t)reps, sizeof(double), cmpd);
    qsort(a2, (size_t)reps, sizeof(double), cmpd);
    printf("%10lld %7.2f/%7.2f %7.2f/%7.2f %8.2f\n", (long long)n, a1[0], a1[reps / 2], a2[0], a2[reps / 2],
           a2[reps / 2] / a1[reps / 2]);
    free(a1);
    free(a2);
  }
  printf("wake-up cost (2 chunks of W us each; excess over W, runs where the worker took a chunk):\n");
  for (int cold = 0; cold <= 1; cold++)
    for (double w = 5; w <= 40; w *= 2) {
      enum { RW = 401 };
      static double ex[RW];
      int took = 0;
      busy_ctx b = {w, 0};
      for (int r = 0; r < RW; r++) {
        if (cold) {
          opool_hold(p, false);
          struct timespec ts = {0, 2000000};
          nanosleep(&ts, NULL);
          opool_hold(p, true);
        }
        b.on_worker = 0;
        uint64_t t0 = clock_now_ns();
        opool_for(p, 2, busy_chunk, &b);
        ex[r] = (double)(clock_now_ns() - t0) / 1e3 - w;
        took += b.on_worker;
      }
      qsort(ex, RW, sizeof(double), cmpd);
      printf("  %s W %5.1f us: excess min %.2f med %.2f p90 %.2f us; worker took a chunk in %d%% of runs\n",
             cold ? "cold (idle 2 ms)" : "held (spinning)", w, ex[0], ex[RW / 2], ex[RW * 9 / 10], took * 100 / RW);
    }
  opool_stats st;
  opool_get_stats(p, &st);
  printf("pool: %llu of %llu runs parallel, %llu sleeps, %llu solo switches\n", (unsigned long long)st.parallel_runs,
         (unsigned long long)st.runs, (unsigned long long)st.sleeps, (unsigned long long)st.solo_events);
  opool_hold(p, false);
  opool_destroy(p);
  free(x);
  free(y);
  return 0;
}
