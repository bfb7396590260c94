/* cpu_share.c: how much of each CPU a thread gets, alone and with the other CPU busy.
 *
 *   cc -O2 -march=native -pthread bench/onnx/cpu_share.c -o /tmp/cpu_share && /tmp/cpu_share [rounds]
 *
 * On a 2-vCPU guest the second vCPU is sometimes slower than the first for seconds at a
 * time (the host gives its core to someone else): the ONNX engine's pool then loses to
 * one thread, and every 2-thread timing of that window with it. This measures it directly.
 * Each round pins one thread to CPU 0 and one to CPU 1 and, for 0.3 s each:
 *   fma:    8 independent chains of 8-lane multiply-adds (compute only, no memory);
 *   stream: y = x * w + y over 256 KiB arrays (L2-resident loads and stores);
 * first each CPU alone, then both at once. It prints the rates (G lane-FMAs/s and GB/s
 * per thread) and, per round, cpu1/cpu0 alone: a ratio well below 1 says the second vCPU
 * is not a whole core right now. Rounds 0.5 s apart (default 5). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef float v8 __attribute__((vector_size(32)));

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
  int cpu, kind;
  double rate;
  pthread_barrier_t *bar;
} job;

#define ARRAY_FLOATS (256 * 1024 / 4)
#define WINDOW_S 0.3

static void *run(void *v) {
  job *j = v;
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(j->cpu, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof s, &s)) {
    fprintf(stderr, "cpu_share: cannot run on CPU %d\n", j->cpu);
    exit(1);
  }
  float *x = aligned_alloc(64, ARRAY_FLOATS * sizeof(float)), *y = aligned_alloc(64, ARRAY_FLOATS * sizeof(float));
  if (!x || !y) exit(1);
  for (int i = 0; i < ARRAY_FLOATS; i++) x[i] = 1.0f + (float)(i % 7), y[i] = 0;
  v8 acc[8], w = {0.999f, 0.999f, 0.999f, 0.999f, 0.999f, 0.999f, 0.999f, 0.999f};
  for (int k = 0; k < 8; k++) acc[k] = w;
  pthread_barrier_wait(j->bar);
  double t0 = now(), work = 0;
  while (now() - t0 < WINDOW_S) {
    if (j->kind == 0) {
      for (int r = 0; r < 4096; r++)
        for (int k = 0; k < 8; k++) acc[k] = acc[k] * w + w;
      work += 4096.0 * 8 * 8; /* lane multiply-adds */
    } else {
      for (int i = 0; i < ARRAY_FLOATS; i += 8) {
        v8 a = *(v8 *)(x + i), b = *(v8 *)(y + i);
        *(v8 *)(y + i) = a * w + b;
      }
      work += ARRAY_FLOATS * 12.0; /* bytes: two loads and a store per float */
    }
  }
  j->rate = work / (now() - t0) / 1e9;
  float z = 0;
  for (int k = 0; k < 8; k++)
    for (int l = 0; l < 8; l++) z += acc[k][l];
  if (z == 1234.5f) printf("%f %f\n", (double)z, (double)y[3]); /* keep the work */
  free(x);
  free(y);
  return NULL;
}

/* rates[i] of the threads on the CPUs in cpus[0..n) */
static void measure(int kind, const int *cpus, int n, double *rates) {
  pthread_t t[2];
  job j[2];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    j[i] = (job){cpus[i], kind, 0, &bar};
    pthread_create(&t[i], NULL, run, &j[i]);
  }
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    rates[i] = j[i].rate;
  }
  pthread_barrier_destroy(&bar);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  if (rounds < 1 || rounds > 1000) {
    fprintf(stderr, "usage: cpu_share [rounds 1-1000]\n");
    return 2;
  }
  const char *name[2] = {"fma (G lane-FMA/s)", "stream (GB/s)"};
  for (int r = 0; r < rounds; r++) {
    for (int kind = 0; kind < 2; kind++) {
      double a0, a1, both[2];
      int c0 = 0, c1 = 1, cb[2] = {0, 1};
      measure(kind, &c0, 1, &a0);
      measure(kind, &c1, 1, &a1);
      measure(kind, cb, 2, both);
      printf("round %d %-20s alone cpu0 %6.2f cpu1 %6.2f (cpu1/cpu0 %.2f)   both cpu0 %6.2f cpu1 %6.2f\n", r, name[kind], a0,
             a1, a1 / a0, both[0], both[1]);
    }
    fflush(stdout);
    struct timespec ts = {0, 500000000};
    nanosleep(&ts, NULL);
  }
  return 0;
}
