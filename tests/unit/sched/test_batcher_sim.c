/* test_batcher_sim.c: a virtual-time model-level check of the dynamic batcher.
 *
 * Poisson arrivals (one row each) feed a batcher; c identical instances execute batches
 * with the cost model  time(n) = base + per_item * n  (base 2000 us, per_item 100 us,
 * max_batch_size 32). Nothing sleeps and nothing reads a clock: time is a variable, so the
 * result is exact and repeatable. It checks the scheduling goals of issue 3:
 *   - at saturation (offered load >= capacity) throughput >= 0.95 of the ideal
 *     c * 32 / time(32);
 *   - below saturation the p99 queue delay <= max_queue_delay + time(32).
 * and prints the table quoted in docs/design/scheduling.md. This is a check of the
 * scheduling policy, not a benchmark of the server (that one runs real threads and the sim
 * backend).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sched/batcher.h"

#define US 1000ull
#define BASE_NS (2000 * US)
#define PER_ITEM_NS (100 * US)
#define MAX_BATCH 32
#define MAX_INST 4

static uint64_t cost_ns(size_t n) { return BASE_NS + PER_ITEM_NS * n; }

static uint64_t rng;
static double uniform01(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return ((rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct sim_result {
  double efficiency;  /* throughput in the window / ideal capacity (= load below saturation) */
  double busy;        /* instance busy time / instance time in the window */
  double mean_batch;
  double p50_us, p99_us, max_us; /* queue delay: enqueue -> dispatch */
} sim_result;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Runs n_req Poisson arrivals at `load` x capacity through one batcher and `inst`
 * instances. */
static sim_result simulate(int inst, double load, batcher_wait_mode mode, uint64_t delay_us,
                           const int64_t *pref, size_t npref, size_t n_req, uint64_t seed) {
  batcher_config c;
  memset(&c, 0, sizeof c);
  c.max_batch_size = MAX_BATCH;
  c.preferred_batch_sizes = pref;
  c.n_preferred_batch_sizes = npref;
  c.max_queue_delay_us = delay_us;
  c.wait_mode = mode;
  batcher *b = NULL;
  assert_null(batcher_create(&c, &b));
  rng = seed;

  double capacity = (double)inst * MAX_BATCH / (double)cost_ns(MAX_BATCH); /* items per ns */
  double mean_gap = 1.0 / (capacity * load);
  uint64_t *enq_at = malloc(n_req * sizeof *enq_at);
  uint64_t *qdelay = malloc(n_req * sizeof *qdelay);
  assert_non_null(enq_at);
  assert_non_null(qdelay);
  uint64_t busy_until[MAX_INST] = {0};
  size_t running[MAX_INST] = {0}; /* items of the batch in flight */
  uint64_t next_arrival = (uint64_t)(-log(1.0 - uniform01()) * mean_gap);
  size_t arrived = 0, dispatched = 0, batches = 0;
  uint64_t wake = UINT64_MAX, now = 0;
  /* saturated-window accounting: items completed between 10% and 90% of the arrivals */
  uint64_t win_start = 0, win_end = 0;
  size_t win_items = 0;
  uint64_t win_busy = 0;
  batcher_item out[MAX_BATCH];

  while (dispatched < n_req) {
    uint64_t t = wake;
    if (arrived < n_req && next_arrival < t) t = next_arrival;
    for (int i = 0; i < inst; i++)
      if (running[i] && busy_until[i] < t) t = busy_until[i];
    assert_true(t != UINT64_MAX && t >= now);
    now = t;
    for (int i = 0; i < inst; i++) {
      if (running[i] && busy_until[i] <= now) {
        if (win_start && !win_end) {
          win_items += running[i];
          win_busy += cost_ns(running[i]);
        }
        running[i] = 0;
      }
    }
    while (arrived < n_req && next_arrival <= now) {
      batcher_item it = {.seq = arrived, .rows = 1};
      assert_null(batcher_enqueue(b, &it, next_arrival, NULL));
      enq_at[arrived++] = next_arrival;
      next_arrival += (uint64_t)(-log(1.0 - uniform01()) * mean_gap) + 1;
      if (arrived == n_req / 10) win_start = next_arrival;
      if (arrived == n_req * 9 / 10) win_end = next_arrival;
    }
    wake = UINT64_MAX;
    for (int i = 0; i < inst; i++) {
      if (running[i]) continue;
      size_t n;
      uint64_t w;
      assert_null(batcher_next(b, now, out, MAX_BATCH, &n, &w));
      if (n == 0) {
        wake = w; /* an instance is idle: come back at the batcher's time */
        break;
      }
      for (size_t k = 0; k < n; k++) qdelay[out[k].seq] = now - enq_at[out[k].seq];
      running[i] = n;
      busy_until[i] = now + cost_ns(n);
      dispatched += n;
      batches++;
    }
  }
  sim_result r;
  r.mean_batch = (double)n_req / (double)batches;
  double window = (double)(win_end - win_start);
  r.efficiency = window > 0 ? (double)win_items / (window * capacity) : 0;
  r.busy = window > 0 ? (double)win_busy / (window * inst) : 0;
  qsort(qdelay, n_req, sizeof *qdelay, cmp_u64);
  r.p50_us = (double)qdelay[n_req / 2] / US;
  r.p99_us = (double)qdelay[n_req * 99 / 100] / US;
  r.max_us = (double)qdelay[n_req - 1] / US;
  free(enq_at);
  free(qdelay);
  batcher_destroy(b);
  return r;
}

/* Closed loop, like perf_analyzer's default concurrency mode: `clients` clients each send
 * their next request the moment the previous answer arrives. */
typedef struct closed_result {
  double per_ms, mean_batch, p50_us, p99_us; /* latency: enqueue -> completion */
} closed_result;

static closed_result simulate_closed(int inst, int clients, batcher_wait_mode mode,
                                     uint64_t delay_us, size_t n_done) {
  batcher_config c;
  memset(&c, 0, sizeof c);
  c.max_batch_size = MAX_BATCH;
  c.max_queue_delay_us = delay_us;
  c.wait_mode = mode;
  batcher *b = NULL;
  assert_null(batcher_create(&c, &b));
  uint64_t *lat = malloc(n_done * sizeof *lat);
  uint64_t *enq_at = malloc((size_t)clients * sizeof *enq_at);
  assert_non_null(lat);
  assert_non_null(enq_at);
  uint64_t busy_until[MAX_INST] = {0};
  size_t running[MAX_INST] = {0};
  uint64_t batch_clients[MAX_INST][MAX_BATCH];
  batcher_item out[MAX_BATCH];
  for (int k = 0; k < clients; k++) { /* the clients start 1 us apart */
    enq_at[k] = (uint64_t)k * US;
    batcher_item it = {.seq = (uint64_t)k, .rows = 1};
    assert_null(batcher_enqueue(b, &it, enq_at[k], NULL));
  }
  uint64_t now = (uint64_t)clients * US, wake = now;
  size_t done = 0, batches = 0, items = 0;
  while (done < n_done) {
    uint64_t t = wake;
    for (int i = 0; i < inst; i++)
      if (running[i] && busy_until[i] < t) t = busy_until[i];
    assert_true(t != UINT64_MAX && t >= now);
    now = t;
    for (int i = 0; i < inst; i++) {
      if (!running[i] || busy_until[i] > now) continue;
      for (size_t k = 0; k < running[i]; k++) {
        uint64_t cl = batch_clients[i][k];
        if (done < n_done) lat[done++] = now - enq_at[cl];
        enq_at[cl] = now;
        batcher_item it = {.seq = cl, .rows = 1};
        assert_null(batcher_enqueue(b, &it, now, NULL));
      }
      running[i] = 0;
    }
    wake = UINT64_MAX;
    for (int i = 0; i < inst; i++) {
      if (running[i]) continue;
      size_t n;
      uint64_t w;
      assert_null(batcher_next(b, now, out, MAX_BATCH, &n, &w));
      if (n == 0) {
        wake = w;
        break;
      }
      for (size_t k = 0; k < n; k++) batch_clients[i][k] = out[k].seq;
      running[i] = n;
      busy_until[i] = now + cost_ns(n);
      batches++;
      items += n;
    }
  }
  closed_result r;
  r.per_ms = (double)done / ((double)now / 1e6);
  r.mean_batch = (double)items / (double)batches;
  qsort(lat, n_done, sizeof *lat, cmp_u64);
  r.p50_us = (double)lat[n_done / 2] / US;
  r.p99_us = (double)lat[n_done * 99 / 100] / US;
  free(lat);
  free(enq_at);
  batcher_destroy(b);
  return r;
}

static void test_closed_loop(void **s) {
  const int conc[] = {4, 16, 64};
  printf("closed loop (perf_analyzer-style concurrency), 1 instance, max_queue_delay 2000 us\n"
         "| concurrency | policy | requests/ms | mean batch | p50 latency us | p99 latency us |\n"
         "|---|---|---|---|---|---|\n");
  for (size_t k = 0; k < sizeof conc / sizeof conc[0]; k++) {
    closed_result ad = simulate_closed(1, conc[k], BATCHER_WAIT_ADAPTIVE, 2000, 20000);
    closed_result tr = simulate_closed(1, conc[k], BATCHER_WAIT_FULL_DELAY, 2000, 20000);
    printf("| %d | adaptive (default) | %.2f | %.1f | %.0f | %.0f |\n", conc[k], ad.per_ms,
           ad.mean_batch, ad.p50_us, ad.p99_us);
    printf("| %d | full delay (Triton) | %.2f | %.1f | %.0f | %.0f |\n", conc[k], tr.per_ms,
           tr.mean_batch, tr.p50_us, tr.p99_us);
    /* with fewer clients than a batch, waiting cannot fill it: never slower than Triton */
    assert_true(ad.per_ms >= tr.per_ms * 0.99);
    if (conc[k] < MAX_BATCH) assert_true(ad.p50_us < tr.p50_us);
  }
}

static void test_simulation(void **s) {
  const double loads[] = {0.1, 0.5, 0.9, 1.0, 1.2, 2.0};
  const struct {
    batcher_wait_mode mode;
    uint64_t delay_us;
    const int64_t *pref;
    size_t npref;
    const char *name;
  } pols[] = {
      {BATCHER_WAIT_ADAPTIVE, 2000, NULL, 0, "adaptive (default)"},
      {BATCHER_WAIT_FULL_DELAY, 2000, NULL, 0, "full delay (Triton)"},
      {BATCHER_WAIT_ADAPTIVE, 10000, NULL, 0, "adaptive (default)"},
      {BATCHER_WAIT_FULL_DELAY, 10000, NULL, 0, "full delay (Triton)"},
      {BATCHER_WAIT_FULL_DELAY, 0, NULL, 0, "no delay"},
  };
  const size_t n_req = 40000;
  printf("virtual time; cost %llu us + %llu us/item, max_batch_size %d, %zu Poisson "
         "arrivals per row; load = offered / ideal capacity\n",
         BASE_NS / US, PER_ITEM_NS / US, MAX_BATCH, n_req);
  printf("| instances | delay us | policy | load | throughput/ideal | busy | mean batch | "
         "p50 queue us | p99 queue us | max queue us |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int inst = 1; inst <= 2; inst++) {
    for (size_t p = 0; p < sizeof pols / sizeof pols[0]; p++) {
      for (size_t l = 0; l < sizeof loads / sizeof loads[0]; l++) {
        sim_result r = simulate(inst, loads[l], pols[p].mode, pols[p].delay_us, pols[p].pref,
                                pols[p].npref, n_req,
                                0x5EED0000ull + 131 * l + 7 * (uint64_t)inst);
        const double bound_us = (double)pols[p].delay_us + (double)cost_ns(MAX_BATCH) / US;
        printf("| %d | %llu | %s | %.1f | %.3f | %.3f | %.1f | %.0f | %.0f | %.0f |\n", inst,
               (unsigned long long)pols[p].delay_us, pols[p].name, loads[l], r.efficiency,
               r.busy, r.mean_batch, r.p50_us, r.p99_us, r.max_us);
        if (loads[l] >= 1.0) {
          if (r.efficiency < 0.95)
            fail_msg("%d instance(s), load %.1f, %s: efficiency %.3f < 0.95", inst, loads[l],
                     pols[p].name, r.efficiency);
        } else if (pols[p].delay_us > 0 && r.p99_us > bound_us) {
          /* (with no delay the bound is one batch time; Poisson bursts of more than 32
           * rows per batch time break it near 0.9: reported, not asserted) */
          fail_msg("%d instance(s), load %.1f, %s: p99 queue delay %.0f us > %.0f us", inst,
                   loads[l], pols[p].name, r.p99_us, bound_us);
        }
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_simulation),
                                     cmocka_unit_test(test_closed_loop)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
