/* wake_cost.c: what handing work to another thread costs on this host.
 *
 *   cc -O2 -pthread bench/onnx/wake_cost.c -o /tmp/wake_cost && /tmp/wake_cost [rounds]
 *
 * Three hand-offs, each measured as the time from the moment thread A publishes a value
 * until thread B has seen it (B reads the clock; CLOCK_MONOTONIC is shared):
 *   spin:     B spins on an atomic with pause;
 *   futex:    B sleeps in FUTEX_WAIT, A stores and calls FUTEX_WAKE;
 *   condvar:  B sleeps on a pthread condition variable, A signals under the mutex;
 * and for futex and condvar both "hot" (B went to sleep just before, the core has not
 * gone idle) and "cold" (B has slept 2 ms: its core idles, as between two inferences).
 * Also what the waker pays: the FUTEX_WAKE call itself. Medians and 90th percentiles
 * over `rounds` hand-offs (default 2000). */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define RELAX() _mm_pause()
#else
#define RELAX() ((void)0)
#endif

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

enum { SPIN, FUTEX, CONDVAR };
static int mode;
static atomic_int word;            /* the published value (round number) */
static atomic_int ready;           /* B is waiting for round `ready` */
static _Atomic int64_t seen_at;    /* when B saw it */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int rounds;

static long futex(atomic_int *a, int op, int v) { return syscall(SYS_futex, (int *)a, op, v, NULL, NULL, 0); }

static void *thread_b(void *arg) {
  (void)arg;
  for (int r = 1; r <= rounds; r++) {
    atomic_store(&ready, r);
    if (mode == SPIN) {
      while (atomic_load_explicit(&word, memory_order_acquire) != r) RELAX();
    } else if (mode == FUTEX) {
      while (atomic_load(&word) != r) futex(&word, FUTEX_WAIT_PRIVATE, r - 1);
    } else {
      pthread_mutex_lock(&mu);
      while (atomic_load(&word) != r) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
    }
    atomic_store(&seen_at, now_ns());
  }
  return NULL;
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static void run(const char *name, int m, int64_t idle_ns) {
  mode = m;
  atomic_store(&word, 0);
  atomic_store(&ready, 0);
  int64_t *lat = calloc((size_t)rounds, sizeof *lat), *cost = calloc((size_t)rounds, sizeof *cost);
  pthread_t b;
  pthread_create(&b, NULL, thread_b, NULL);
  for (int r = 1; r <= rounds; r++) {
    while (atomic_load(&ready) != r) RELAX();
    /* let B reach its wait: spin 20 us (hot) or sleep idle_ns (cold) */
    if (idle_ns) {
      struct timespec ts = {0, idle_ns};
      nanosleep(&ts, NULL);
    } else {
      int64_t t = now_ns();
      while (now_ns() - t < 20000) RELAX();
    }
    atomic_store(&seen_at, 0);
    int64_t t0 = now_ns();
    if (m == SPIN) {
      atomic_store(&word, r);
    } else if (m == FUTEX) {
      atomic_store(&word, r);
      futex(&word, FUTEX_WAKE_PRIVATE, 1);
    } else {
      pthread_mutex_lock(&mu);
      atomic_store(&word, r);
      pthread_cond_signal(&cv);
      pthread_mutex_unlock(&mu);
    }
    int64_t t1 = now_ns();
    int64_t s;
    while (!(s = atomic_load(&seen_at))) RELAX();
    lat[r - 1] = s - t0;
    cost[r - 1] = t1 - t0;
  }
  pthread_join(b, NULL);
  qsort(lat, (size_t)rounds, sizeof *lat, cmp);
  qsort(cost, (size_t)rounds, sizeof *cost, cmp);
  printf("%-22s wake-up p50 %8.2f us  p90 %8.2f us   waker's call p50 %6.2f us\n", name, lat[rounds / 2] / 1e3,
         lat[rounds * 9 / 10] / 1e3, cost[rounds / 2] / 1e3);
  free(lat);
  free(cost);
}

int main(int argc, char **argv) {
  rounds = argc > 1 ? atoi(argv[1]) : 2000;
  if (rounds < 10) rounds = 10;
  run("spin", SPIN, 0);
  run("futex hot", FUTEX, 0);
  run("condvar hot", CONDVAR, 0);
  int r = rounds;
  rounds = r / 4 > 10 ? r / 4 : 10; /* 2 ms each */
  run("futex cold (2 ms idle)", FUTEX, 2000000);
  run("condvar cold (2 ms)", CONDVAR, 2000000);
  rounds = r;
  return 0;
}
