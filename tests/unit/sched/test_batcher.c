/* test_batcher.c: the dynamic batcher and sched_order, driven by a fake clock.
 * Each rule of batcher.h has a test with hand-checked expectations; test_random_property
 * then runs thousands of random enqueue/next/expire/complete steps against an independent
 * model of the queue and checks the invariants (nothing lost or duplicated, rows <= max,
 * one shape per batch, priority and arrival order, delay bound, wake times, ordering). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sched/batcher.h"

#define US 1000ull /* ns */

static batcher_config base_cfg(int64_t max_batch) {
  batcher_config c;
  memset(&c, 0, sizeof c);
  c.max_batch_size = max_batch;
  c.wait_mode = BATCHER_WAIT_FULL_DELAY;
  return c;
}

static batcher *make(const batcher_config *c) {
  batcher *b = NULL;
  cinfer_status *st = batcher_create(c, &b);
  if (st) fail_msg("batcher_create: %s", cinfer_status_message(st));
  return b;
}

static void enq_full(batcher *b, uint64_t seq, int64_t rows, uint64_t shape, uint32_t prio,
                     uint64_t timeout_us, uint64_t now) {
  batcher_item it = {.seq = seq, .rows = rows, .shape_key = shape, .priority = prio,
                     .timeout_us = timeout_us};
  cinfer_status *st = batcher_enqueue(b, &it, now, NULL);
  if (st) fail_msg("enqueue seq %llu: %s", (unsigned long long)seq, cinfer_status_message(st));
}

static void enq(batcher *b, uint64_t seq, int64_t rows, uint64_t now) {
  enq_full(b, seq, rows, 0, 0, 0, now);
}

/* Calls batcher_next and returns n; seqs into out_seq. */
static size_t next(batcher *b, uint64_t now, uint64_t *out_seq, uint64_t *wake) {
  batcher_item items[64];
  size_t n = 0;
  uint64_t w = 0;
  cinfer_status *st = batcher_next(b, now, items, 64, &n, &w);
  if (st) fail_msg("next: %s", cinfer_status_message(st));
  for (size_t i = 0; i < n; i++) out_seq[i] = items[i].seq;
  if (wake) *wake = w;
  return n;
}

static void expect_seqs(const uint64_t *got, size_t n, const uint64_t *want, size_t nw) {
  assert_int_equal(n, nw);
  for (size_t i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

static void expect_error(cinfer_status *st, cinfer_code code, const char *needle) {
  assert_non_null(st);
  assert_int_equal(cinfer_status_code(st), code);
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("message '%s' lacks '%s'", cinfer_status_message(st), needle);
  cinfer_status_free(st);
}

/* ---- configuration ---------------------------------------------------------------- */

static void test_config_errors(void **s) {
  batcher *b = NULL;
  int64_t pref[] = {4, 64};
  batcher_config c = base_cfg(32);
  c.preferred_batch_sizes = pref;
  c.n_preferred_batch_sizes = 2;
  expect_error(batcher_create(&c, &b), CINFER_INVALID_ARG, "preferred_batch_size 64 is larger "
               "than max_batch_size 32");
  assert_null(b);
  pref[1] = 0;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "must be positive");
  c = base_cfg(0);
  c.preferred_batch_sizes = pref;
  c.n_preferred_batch_sizes = 1;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "max_batch_size is 0");
  c = base_cfg(-1);
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "max_batch_size -1");
  c = base_cfg(8);
  c.priority_levels = 3;
  c.default_priority_level = 4;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "default_priority_level 4 must be in 1..3");
  c.default_priority_level = 0;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "default_priority_level 0");
  c.priority_levels = 0;
  c.default_priority_level = 2;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "needs priority_levels > 0");
  c.priority_levels = BATCHER_MAX_PRIORITY_LEVELS + 1;
  c.default_priority_level = 1;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "priority_levels");
  batcher_level_policy lp[2] = {{.level = 2}, {.level = 2}};
  c.priority_levels = 2;
  c.priority_queue_policy = lp;
  c.n_priority_queue_policy = 2;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "key 2 is given twice");
  lp[1].level = 3;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "key 3 must be in 1..2");
  lp[1].level = 1;
  lp[1].policy.timeout_action = (batcher_timeout_action)7;
  expect_error(batcher_config_check(&c), CINFER_INVALID_ARG, "timeout_action 7");
  lp[1].policy.timeout_action = BATCHER_TIMEOUT_DELAY;
  assert_null(batcher_config_check(&c));
  batcher_destroy(NULL);
}

/* dynamic_batching { }: as large as possible, no delay. */
static void test_empty_dynamic_batching(void **s) {
  batcher_config c = base_cfg(8);
  c.wait_mode = BATCHER_WAIT_ADAPTIVE; /* the default; no delay makes it irrelevant */
  batcher *b = make(&c);
  uint64_t got[64], w;
  assert_int_equal(next(b, 0, got, &w), 0);
  assert_int_equal(w, UINT64_MAX);
  for (uint64_t i = 0; i < 3; i++) enq(b, i, 1, 10);
  expect_seqs(got, next(b, 10, got, &w), (uint64_t[]){0, 1, 2}, 3);
  assert_int_equal(w, 10);
  for (uint64_t i = 10; i < 20; i++) enq(b, i, 1, 20);
  expect_seqs(got, next(b, 20, got, NULL), (uint64_t[]){10, 11, 12, 13, 14, 15, 16, 17}, 8);
  expect_seqs(got, next(b, 20, got, NULL), (uint64_t[]){18, 19}, 2);
  assert_int_equal(next(b, 20, got, &w), 0);
  assert_int_equal(w, UINT64_MAX);
  batcher_destroy(b);
}

/* Triton's preferred sizes: a reachable preferred size goes at once, the largest one. */
static void test_preferred_sizes(void **s) {
  int64_t pref[] = {8, 4, 4}; /* unsorted with a duplicate: merged like Triton's set */
  batcher_config c = base_cfg(16);
  c.preferred_batch_sizes = pref;
  c.n_preferred_batch_sizes = 3;
  c.max_queue_delay_us = 1000;
  batcher *b = make(&c);
  uint64_t got[64], w;
  for (uint64_t i = 0; i < 3; i++) enq(b, i, 1, 0);
  assert_int_equal(next(b, 5 * US, got, &w), 0);
  assert_int_equal(w, 1000 * US); /* delay end of the oldest */
  enq(b, 3, 1, 6 * US);
  expect_seqs(got, next(b, 6 * US, got, NULL), (uint64_t[]){0, 1, 2, 3}, 4);
  /* 7 queued: Triton sends 4 (the largest preferred size reachable), 3 wait */
  for (uint64_t i = 10; i < 17; i++) enq(b, i, 1, 10 * US);
  expect_seqs(got, next(b, 10 * US, got, NULL), (uint64_t[]){10, 11, 12, 13}, 4);
  assert_int_equal(next(b, 10 * US, got, &w), 0);
  assert_int_equal(w, 1010 * US);
  for (uint64_t i = 17; i < 22; i++) enq(b, i, 1, 11 * US);
  /* 8 queued = the largest preferred size */
  expect_seqs(got, next(b, 11 * US, got, NULL), (uint64_t[]){14, 15, 16, 17, 18, 19, 20, 21}, 8);
  /* more than the largest preferred size: still 8, rest waits */
  for (uint64_t i = 30; i < 42; i++) enq(b, i, 1, 20 * US);
  assert_int_equal(next(b, 20 * US, got, NULL), 8);
  assert_int_equal(got[0], 30);
  expect_seqs(got, next(b, 20 * US, got, NULL), (uint64_t[]){38, 39, 40, 41}, 4);
  /* multi-row items: 3+3 passes 4 before reaching 8 exactly: the largest exact hit wins */
  enq(b, 50, 4, 30 * US);
  enq(b, 51, 3, 30 * US);
  enq(b, 52, 3, 30 * US);
  expect_seqs(got, next(b, 30 * US, got, NULL), (uint64_t[]){50}, 1);
  /* 3+3 = 6: no preferred size reachable and nothing more: wait, then send all */
  assert_int_equal(next(b, 31 * US, got, &w), 0);
  assert_int_equal(w, 1030 * US);
  expect_seqs(got, next(b, 1030 * US, got, NULL), (uint64_t[]){51, 52}, 2);
  /* no exact preferred hit and the next item passes the largest: send what fits */
  enq(b, 60, 5, 2000 * US);
  enq(b, 61, 5, 2000 * US);
  expect_seqs(got, next(b, 2000 * US, got, NULL), (uint64_t[]){60}, 1);
  batcher_destroy(b);
}

static void test_delay_expiry(void **s) {
  batcher_config c = base_cfg(8);
  c.max_queue_delay_us = 500;
  batcher *b = make(&c);
  uint64_t got[64], w;
  enq(b, 1, 1, 0);
  enq(b, 2, 1, 100 * US);
  assert_int_equal(next(b, 200 * US, got, &w), 0);
  assert_int_equal(w, 500 * US);
  assert_int_equal(next(b, 500 * US - 1, got, &w), 0);
  enq(b, 3, 2, 499 * US);
  expect_seqs(got, next(b, 500 * US, got, &w), (uint64_t[]){1, 2, 3}, 3);
  /* the delay counts from the oldest item of the batch, not from the call */
  enq(b, 4, 1, 600 * US);
  assert_int_equal(next(b, 1000 * US, got, &w), 0);
  assert_int_equal(w, 1100 * US);
  uint64_t req, rows;
  batcher_pending(b, &req, &rows);
  assert_int_equal(req, 1);
  assert_int_equal(rows, 1);
  expect_seqs(got, next(b, 1200 * US, got, NULL), (uint64_t[]){4}, 1);
  batcher_destroy(b);
}

static void test_max_batch_and_rows(void **s) {
  batcher_config c = base_cfg(8);
  batcher *b = make(&c);
  uint64_t got[64];
  enq(b, 1, 3, 0);
  enq(b, 2, 3, 0);
  enq(b, 3, 3, 0);
  enq(b, 4, 0, 0); /* counts one row */
  uint64_t req, rows;
  batcher_pending(b, &req, &rows);
  assert_int_equal(req, 4);
  assert_int_equal(rows, 10);
  /* 3+3 = 6; item 3 would make 9 > 8: stop there (arrival order within a shape) */
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){1, 2}, 2);
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){3, 4}, 2);
  batcher_item it = {.seq = 9, .rows = 9};
  expect_error(batcher_enqueue(b, &it, 0, NULL), CINFER_INVALID_ARG, "batch size 9 exceeds the "
               "model's max_batch_size 8");
  it.rows = -2;
  expect_error(batcher_enqueue(b, &it, 0, NULL), CINFER_INVALID_ARG, "negative");
  /* exactly max rows in one item */
  enq(b, 10, 8, 0);
  enq(b, 11, 1, 0);
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){10}, 1);
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){11}, 1);
  /* a too small output array is an error, not an overrun */
  batcher_item small[4];
  size_t n;
  uint64_t w;
  expect_error(batcher_next(b, 0, small, 4, &n, &w), CINFER_INVALID_ARG, "room for 4");
  batcher_destroy(b);
}

static void test_priorities(void **s) {
  batcher_config c = base_cfg(1);
  c.priority_levels = 3;
  c.default_priority_level = 2;
  batcher *b = make(&c);
  uint64_t got[64];
  enq_full(b, 1, 1, 0, 0, 0, 0); /* default: level 2 */
  enq_full(b, 2, 1, 0, 3, 0, 1);
  enq_full(b, 3, 1, 0, 1, 0, 2);
  enq_full(b, 4, 1, 0, 2, 0, 3);
  enq_full(b, 5, 1, 0, 1, 0, 4);
  batcher_item it = {.seq = 9, .rows = 1, .priority = 4};
  expect_error(batcher_enqueue(b, &it, 5, NULL), CINFER_INVALID_ARG, "priority 4 is outside 1..3");
  uint64_t order[] = {3, 5, 1, 4, 2};
  for (int i = 0; i < 5; i++) expect_seqs(got, next(b, 10, got, NULL), &order[i], 1);
  batcher_destroy(b);

  /* a batch takes lower levels after the higher ones, same shape only */
  c.max_batch_size = 8;
  b = make(&c);
  enq_full(b, 1, 1, 7, 3, 0, 0);
  enq_full(b, 2, 1, 7, 0, 0, 1);
  enq_full(b, 3, 1, 9, 1, 0, 2);
  enq_full(b, 4, 1, 7, 1, 0, 3);
  expect_seqs(got, next(b, 10, got, NULL), (uint64_t[]){3}, 1); /* head level 1, shape 9 */
  expect_seqs(got, next(b, 10, got, NULL), (uint64_t[]){4, 2, 1}, 3);
  batcher_destroy(b);

  /* priority_levels 0: priorities are ignored (one level), as in Triton */
  c = base_cfg(1);
  b = make(&c);
  enq_full(b, 1, 1, 0, 5, 0, 0);
  enq_full(b, 2, 1, 0, 1, 0, 1);
  expect_seqs(got, next(b, 2, got, NULL), (uint64_t[]){1}, 1);
  expect_seqs(got, next(b, 2, got, NULL), (uint64_t[]){2}, 1);
  batcher_destroy(b);
}

static void test_timeout_reject(void **s) {
  batcher_config c = base_cfg(4);
  c.max_queue_delay_us = 10000;
  c.default_queue_policy.default_timeout_us = 1000;
  batcher *b = make(&c);
  uint64_t got[64], w;
  batcher_item out[8];
  enq(b, 1, 1, 0);
  enq(b, 2, 1, 500 * US);
  assert_int_equal(batcher_expire_at(b), 1000 * US + 1);
  assert_int_equal(next(b, 1000 * US, got, &w), 0); /* timed out only when now > deadline */
  assert_int_equal(w, 1000 * US + 1);
  assert_int_equal(batcher_expire(b, 1000 * US, out, 8), 0);
  assert_int_equal(next(b, 1000 * US + 1, got, &w), 0);
  assert_int_equal(w, 1000 * US + 1); /* an expired item waits for batcher_expire */
  uint64_t req;
  batcher_pending(b, &req, NULL);
  assert_int_equal(req, 1);
  assert_int_equal(batcher_expire(b, 1000 * US + 1, out, 8), 1);
  assert_int_equal(out[0].seq, 1);
  assert_int_equal(next(b, 1000 * US + 1, got, &w), 0);
  assert_int_equal(w, 1500 * US + 1);
  assert_int_equal(batcher_expire(b, 2000 * US, out, 8), 1);
  assert_int_equal(out[0].seq, 2);
  assert_int_equal(next(b, 2000 * US, got, &w), 0);
  assert_int_equal(w, UINT64_MAX);
  assert_int_equal(batcher_expire_at(b), UINT64_MAX);
  batcher_destroy(b);
}

static void test_timeout_override(void **s) {
  batcher_config c = base_cfg(4);
  c.max_queue_delay_us = 1000000;
  c.default_queue_policy.default_timeout_us = 1000;
  batcher *b = make(&c);
  enq_full(b, 1, 1, 0, 0, 100, 0); /* override not allowed: default 1000 us */
  assert_int_equal(batcher_expire_at(b), 1000 * US + 1);
  batcher_destroy(b);

  c.default_queue_policy.allow_timeout_override = true;
  b = make(&c);
  enq_full(b, 1, 1, 0, 0, 100, 0); /* shorter: honoured */
  assert_int_equal(batcher_expire_at(b), 100 * US + 1);
  batcher_item out[4];
  assert_int_equal(batcher_expire(b, 101 * US, out, 4), 1);
  enq_full(b, 2, 1, 0, 0, 5000, 200 * US); /* longer than the default: not honoured */
  assert_int_equal(batcher_expire_at(b), 1200 * US + 1);
  batcher_destroy(b);

  /* default 0 = no timeout: a request's own timeout applies (Triton ignores it here) */
  c.default_queue_policy.default_timeout_us = 0;
  b = make(&c);
  enq_full(b, 1, 1, 0, 0, 0, 0);
  assert_int_equal(batcher_expire_at(b), UINT64_MAX);
  enq_full(b, 2, 1, 0, 0, 300, 0);
  assert_int_equal(batcher_expire_at(b), 300 * US + 1);
  batcher_destroy(b);
}

static void test_timeout_delay(void **s) {
  batcher_level_policy lp = {.level = 1, .policy = {.timeout_action = BATCHER_TIMEOUT_DELAY,
                                                    .allow_timeout_override = true}};
  batcher_config c = base_cfg(1);
  c.priority_levels = 2;
  c.default_priority_level = 1;
  c.priority_queue_policy = &lp;
  c.n_priority_queue_policy = 1;
  batcher *b = make(&c);
  uint64_t got[64];
  enq_full(b, 1, 1, 0, 1, 100, 0);  /* level 1, times out at 100 us: delayed */
  enq_full(b, 2, 1, 0, 1, 0, 10);   /* level 1, no timeout */
  enq_full(b, 3, 1, 0, 2, 0, 20);   /* level 2 */
  enq_full(b, 4, 1, 0, 1, 500, 30); /* level 1, not yet timed out at 200 us */
  batcher_item out[4];
  assert_int_equal(batcher_expire(b, 200 * US, out, 4), 0); /* DELAY never rejects */
  uint64_t order[] = {2, 4, 1, 3}; /* delayed level-1 item after level 1, before level 2 */
  for (int i = 0; i < 4; i++) expect_seqs(got, next(b, 200 * US, got, NULL), &order[i], 1);
  batcher_destroy(b);

  /* delayed items still batch, after the others */
  c.max_batch_size = 8;
  b = make(&c);
  enq_full(b, 1, 1, 0, 1, 100, 0);
  enq_full(b, 2, 1, 0, 1, 0, 0);
  enq_full(b, 3, 1, 0, 2, 0, 0);
  expect_seqs(got, next(b, 200 * US, got, NULL), (uint64_t[]){2, 1, 3}, 3);
  batcher_destroy(b);
}

static void test_queue_full(void **s) {
  batcher_level_policy lp = {.level = 1, .policy = {.max_queue_size = 2,
                                                    .timeout_action = BATCHER_TIMEOUT_DELAY,
                                                    .default_timeout_us = 10}};
  batcher_config c = base_cfg(4);
  c.max_queue_delay_us = 1000;
  c.priority_levels = 2;
  c.default_priority_level = 2;
  c.priority_queue_policy = &lp;
  c.n_priority_queue_policy = 1;
  batcher *b = make(&c);
  uint64_t got[64];
  enq_full(b, 1, 1, 0, 1, 0, 0);
  enq_full(b, 2, 1, 0, 1, 0, 0);
  batcher_item it = {.seq = 3, .rows = 1, .priority = 1};
  /* the two are DELAY-timed-out by now: they still count */
  assert_int_equal(next(b, 50 * US, got, NULL), 0);
  expect_error(batcher_enqueue(b, &it, 50 * US, NULL), CINFER_UNAVAILABLE,
               "inference request queue is full (max_queue_size 2, priority level 1)");
  for (int i = 0; i < 5; i++) enq_full(b, 10 + i, 1, 0, 2, 0, 50 * US); /* level 2: unlimited */
  assert_int_equal(next(b, 50 * US, got, NULL), 4);
  assert_null(batcher_enqueue(b, &it, 50 * US, NULL)); /* room again */
  batcher_destroy(b);

  c = base_cfg(4);
  c.default_queue_policy.max_queue_size = 1;
  b = make(&c);
  enq(b, 1, 1, 0);
  it.priority = 0;
  expect_error(batcher_enqueue(b, &it, 0, NULL), CINFER_UNAVAILABLE,
               "inference request queue is full (max_queue_size 1)");
  batcher_destroy(b);
}

static void test_mixed_shapes(void **s) {
  batcher_config c = base_cfg(8);
  batcher *b = make(&c);
  uint64_t got[64];
  uint64_t shapes[] = {0xA, 0xB, 0xA, 0xB, 0xA, 0xC};
  for (uint64_t i = 0; i < 6; i++) enq_full(b, i, 1, shapes[i], 0, 0, 0);
  /* Triton would cut the batch at the first B; we skip it */
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){0, 2, 4}, 3);
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){1, 3}, 2);
  expect_seqs(got, next(b, 0, got, NULL), (uint64_t[]){5}, 1);
  batcher_destroy(b);
}

static void test_max_batch_size_zero(void **s) {
  batcher_config c = base_cfg(0);
  c.max_queue_delay_us = 1000; /* nothing to wait for: no batching */
  batcher *b = make(&c);
  uint64_t got[64], w;
  enq(b, 1, 5, 0); /* rows are not limited: the model sees the request as sent */
  enq(b, 2, 7, 0);
  expect_seqs(got, next(b, 0, got, &w), (uint64_t[]){1}, 1);
  expect_seqs(got, next(b, 0, got, &w), (uint64_t[]){2}, 1);
  assert_int_equal(next(b, 0, got, &w), 0);
  batcher_item one[1];
  size_t n;
  assert_null(batcher_next(b, 0, one, 1, &n, &w)); /* cap 1 is enough */
  batcher_destroy(b);
}

/* BATCHER_WAIT_ADAPTIVE: waits only while the batch is expected to fill in time. */
static void test_adaptive_wait(void **s) {
  batcher_config c = base_cfg(32);
  c.wait_mode = BATCHER_WAIT_ADAPTIVE;
  c.max_queue_delay_us = 2000;
  batcher *b = make(&c);
  uint64_t got[64], w;
  uint64_t t = 0;
  enq(b, 1, 1, t); /* no rate known yet: sent at once, like an idle server should */
  expect_seqs(got, next(b, t, got, NULL), (uint64_t[]){1}, 1);
  /* sparse traffic: one request every 50 ms; 31 more would take 1.5 s >> 2 ms delay */
  for (uint64_t i = 2; i < 6; i++) {
    t += 50000 * US;
    enq(b, i, 1, t);
    expect_seqs(got, next(b, t, got, NULL), &i, 1);
  }
  batcher_destroy(b);

  /* dense traffic: one request every 20 us; 32 rows take ~640 us < 2 ms: wait */
  b = make(&c);
  t = 0;
  for (uint64_t i = 0; i < 10; i++, t += 20 * US) enq(b, i, 1, t);
  t -= 20 * US;
  assert_int_equal(next(b, t, got, &w), 0);
  /* give up when the remaining 22 rows (440 us) no longer fit before 2000 us */
  assert_int_equal(w, 2000 * US - 22 * 20 * US);
  assert_int_equal(next(b, w - 1, got, NULL), 0);
  assert_int_equal(next(b, w, got, NULL), 10);
  /* after an idle gap the rate estimate is low: the first request goes at once; as the
   * dense stream goes on the estimate recovers and batches fill to 32 before the delay */
  t = 5000 * US;
  size_t sizes[200], nb = 0, sent = 0;
  for (uint64_t i = 0; i < 200; i++, t += 20 * US) {
    enq(b, 100 + i, 1, t);
    size_t n = next(b, t, got, NULL);
    if (n) sizes[nb++] = n;
    sent += n;
  }
  assert_true(nb >= 3);
  assert_int_equal(sizes[0], 1);
  assert_int_equal(sizes[nb - 1], 32);
  assert_int_equal(sizes[nb - 2], 32);
  uint64_t req;
  batcher_pending(b, &req, NULL);
  assert_int_equal(sent + req, 200);

  /* Triton's FULL_DELAY holds a lone request for the whole delay */
  c.wait_mode = BATCHER_WAIT_FULL_DELAY;
  batcher *tb = make(&c);
  enq(tb, 1, 1, 0);
  assert_int_equal(next(tb, 0, got, &w), 0);
  assert_int_equal(w, 2000 * US);
  batcher_destroy(tb);
  batcher_destroy(b);
}

static void test_drain(void **s) {
  batcher_config c = base_cfg(4);
  c.priority_levels = 2;
  c.default_priority_level = 2;
  c.max_queue_delay_us = 100000;
  c.default_queue_policy.default_timeout_us = 10;
  batcher *b = make(&c);
  enq_full(b, 1, 1, 0, 2, 0, 0);
  enq_full(b, 2, 1, 0, 1, 0, 100 * US);
  uint64_t got[64];
  assert_int_equal(next(b, 20 * US, got, NULL), 0); /* item 1 timed out (REJECT) */
  enq_full(b, 3, 1, 0, 2, 0, 100 * US);
  batcher_item out[8];
  assert_int_equal(batcher_drain(b, out, 2), 2);
  assert_int_equal(out[0].seq, 1); /* timed out first, then level 1, then level 2 */
  assert_int_equal(out[1].seq, 2);
  assert_int_equal(batcher_drain(b, out, 8), 1);
  assert_int_equal(out[0].seq, 3);
  assert_int_equal(batcher_drain(b, out, 8), 0);
  uint64_t req = 1, rows = 1;
  batcher_pending(b, &req, &rows);
  assert_int_equal(req, 0);
  assert_int_equal(rows, 0);
  batcher_destroy(b);
}

static void test_shape_key(void **s) {
  cinfer_tensor a[2] = {
      {.name = "image", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 3, 640, 640}},
      {.name = "scale", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {1, 1}}};
  cinfer_tensor b[2] = {a[1], a[0]}; /* other input order, other batch size */
  b[0].shape[0] = 5;
  b[1].shape[0] = 5;
  uint64_t ka = batcher_shape_key(a, 2, true);
  assert_int_equal(ka, batcher_shape_key(b, 2, true));
  assert_int_not_equal(ka, batcher_shape_key(b, 2, false)); /* dim 0 counts when unbatched */
  b[1].shape[2] = 480; /* another image size */
  assert_int_not_equal(ka, batcher_shape_key(b, 2, true));
  b[1].shape[2] = 640;
  b[1].dtype = CINFER_TYPE_FP16;
  assert_int_not_equal(ka, batcher_shape_key(b, 2, true));
  b[1].dtype = CINFER_TYPE_FP32;
  b[1].name = "img";
  assert_int_not_equal(ka, batcher_shape_key(b, 2, true));
  assert_int_not_equal(ka, batcher_shape_key(a, 1, true)); /* an input missing */
  /* the dims split differently must not collide: [3, 64] vs [36, 4] etc. */
  cinfer_tensor x = {.name = "x", .dtype = CINFER_TYPE_INT64, .ndim = 3, .shape = {1, 3, 64}};
  cinfer_tensor y = {.name = "x", .dtype = CINFER_TYPE_INT64, .ndim = 3, .shape = {1, 64, 3}};
  assert_int_not_equal(batcher_shape_key(&x, 1, true), batcher_shape_key(&y, 1, true));
}

static void test_cancel(void **s) {
  batcher_level_policy lp = {.level = 2, .policy = {.timeout_action = BATCHER_TIMEOUT_DELAY,
                                                    .default_timeout_us = 10}};
  batcher_config c = base_cfg(8);
  c.max_queue_delay_us = 100000;
  c.priority_levels = 2;
  c.default_priority_level = 1;
  c.default_queue_policy.default_timeout_us = 10; /* level 1: REJECT after 10 us */
  c.priority_queue_policy = &lp;
  c.n_priority_queue_policy = 1;
  batcher *b = make(&c);
  uint64_t t[4];
  batcher_item it = {.seq = 1, .rows = 2, .priority = 1};
  assert_null(batcher_enqueue(b, &it, 0, &t[0]));
  it.seq = 2, it.priority = 2;
  assert_null(batcher_enqueue(b, &it, 0, &t[1]));
  it.seq = 3, it.priority = 1;
  assert_null(batcher_enqueue(b, &it, 50 * US, &t[2]));
  uint64_t got[64];
  assert_int_equal(next(b, 50 * US, got, NULL), 0); /* 1 timed out (REJECT), 2 delayed */
  batcher_item out;
  assert_true(batcher_cancel(b, t[0], &out)); /* timed out, not yet collected */
  assert_int_equal(out.seq, 1);
  assert_true(batcher_cancel(b, t[1], &out)); /* delayed */
  assert_int_equal(out.seq, 2);
  assert_false(batcher_cancel(b, t[1], &out)); /* twice */
  uint64_t req, rows;
  batcher_pending(b, &req, &rows);
  assert_int_equal(req, 1);
  assert_int_equal(rows, 2);
  batcher_item exp[4];
  assert_int_equal(batcher_expire(b, 50 * US, exp, 4), 0); /* the cancelled one is gone */
  /* a freed node is reused: the old ticket must not name the new item */
  it.seq = 4, it.priority = 2; /* level 2: DELAY, so still sent at the end */
  assert_null(batcher_enqueue(b, &it, 60 * US, &t[3]));
  assert_false(batcher_cancel(b, t[0], &out));
  assert_false(batcher_cancel(b, t[1], &out));
  assert_false(batcher_cancel(b, UINT64_MAX, &out));
  assert_true(batcher_cancel(b, t[2], &out)); /* queued */
  assert_int_equal(out.seq, 3);
  expect_seqs(got, next(b, 200000 * US, got, NULL), (uint64_t[]){4}, 1);
  assert_false(batcher_cancel(b, t[3], &out)); /* dispatched */
  batcher_destroy(b);
}

/* ---- sched_order -------------------------------------------------------------------- */

static void test_order(void **s) {
  sched_order *o;
  assert_null(sched_order_create(&o));
  for (uint64_t i = 0; i < 5; i++) assert_int_equal(sched_order_next_seq(o), i);
  uint64_t first, count;
  assert_null(sched_order_complete(o, 2, &first, &count));
  assert_int_equal(count, 0);
  assert_null(sched_order_complete(o, 0, &first, &count));
  assert_int_equal(first, 0);
  assert_int_equal(count, 1);
  assert_null(sched_order_complete(o, 1, &first, &count));
  assert_int_equal(first, 1);
  assert_int_equal(count, 2); /* 1 and the waiting 2 */
  assert_null(sched_order_complete(o, 4, &first, &count));
  assert_int_equal(count, 0);
  assert_int_equal(sched_order_outstanding(o), 2);
  expect_error(sched_order_complete(o, 4, &first, &count), CINFER_INVALID_ARG, "completed twice");
  expect_error(sched_order_complete(o, 1, &first, &count), CINFER_INVALID_ARG, "completed twice");
  expect_error(sched_order_complete(o, 5, &first, &count), CINFER_INVALID_ARG, "never issued");
  assert_null(sched_order_complete(o, 3, &first, &count));
  assert_int_equal(first, 3);
  assert_int_equal(count, 2);
  assert_int_equal(sched_order_outstanding(o), 0);

  /* a large window completed in a random order grows the ring and releases in order */
  enum { N = 5000 };
  static uint64_t perm[N];
  for (uint64_t i = 0; i < N; i++) perm[i] = sched_order_next_seq(o);
  srand(7);
  for (int i = N - 1; i > 0; i--) {
    int j = rand() % (i + 1);
    uint64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  uint64_t expect = 5, released = 0;
  for (int i = 0; i < N; i++) {
    assert_null(sched_order_complete(o, perm[i], &first, &count));
    if (count) {
      assert_int_equal(first, expect);
      expect += count;
      released += count;
    }
  }
  assert_int_equal(released, N);
  sched_order_destroy(o);
  sched_order_destroy(NULL);
}

/* ---- randomized property test ------------------------------------------------------- */

enum { M_Q, M_D, M_X, M_GONE };
typedef struct mitem {
  int used;
  uint32_t level; /* 0-based */
  uint64_t shape;
  int64_t rows;   /* counted */
  uint64_t enq, ord, deadline; /* deadline UINT64_MAX = none */
  int delay_action;
  int state;
  int completed;  /* sched_order */
  uint64_t ticket;
} mitem;

typedef struct model {
  batcher_config cfg;
  int64_t pref[4];
  size_t npref;
  batcher_level_policy lp[3];
  mitem *it;
  size_t n, cap;
  uint64_t ord;
} model;

static uint64_t rnd_state;
static uint64_t rnd(void) { /* xorshift64*: deterministic per seed */
  rnd_state ^= rnd_state >> 12;
  rnd_state ^= rnd_state << 25;
  rnd_state ^= rnd_state >> 27;
  return rnd_state * 2685821657736338717ull;
}
static uint64_t rndn(uint64_t n) { return n ? rnd() % n : 0; }

static const batcher_queue_policy *policy_of(const model *m, uint32_t level) {
  for (size_t i = 0; i < m->cfg.n_priority_queue_policy; i++)
    if (m->lp[i].level == level + 1) return &m->lp[i].policy;
  return &m->cfg.default_queue_policy;
}

static void model_apply_timeouts(model *m, uint64_t now) {
  for (size_t i = 0; i < m->n; i++) {
    mitem *x = &m->it[i];
    if (x->used && x->state == M_Q && now > x->deadline)
      x->state = x->delay_action ? M_D : M_X;
  }
}

/* Walk order: level, then queued (by arrival) before delayed (by deadline, arrival). */
static int walk_cmp(const mitem *a, const mitem *b) {
  if (a->level != b->level) return a->level < b->level ? -1 : 1;
  if (a->state != b->state) return a->state == M_Q ? -1 : 1;
  if (a->state == M_D && a->deadline != b->deadline) return a->deadline < b->deadline ? -1 : 1;
  return a->ord < b->ord ? -1 : (a->ord > b->ord);
}

static model *g_sort_model;
static int walk_cmp_idx(const void *x, const void *y) {
  return walk_cmp(&g_sort_model->it[*(const size_t *)x], &g_sort_model->it[*(const size_t *)y]);
}

/* Fills walk[] with the indices of queued/delayed items in walk order; returns count. */
static size_t model_walk(model *m, size_t *walk) {
  size_t k = 0;
  for (size_t i = 0; i < m->n; i++)
    if (m->it[i].used && (m->it[i].state == M_Q || m->it[i].state == M_D)) walk[k++] = i;
  g_sort_model = m;
  qsort(walk, k, sizeof *walk, walk_cmp_idx);
  return k;
}

static bool model_is_pref(const model *m, int64_t rows) {
  if (m->npref == 0) return rows == m->cfg.max_batch_size;
  for (size_t i = 0; i < m->npref; i++) if (m->pref[i] == rows) return true;
  return false;
}
static int64_t model_pref_max(const model *m) {
  int64_t mx = m->cfg.max_batch_size;
  if (m->npref) { mx = 0; for (size_t i = 0; i < m->npref; i++) if (m->pref[i] > mx) mx = m->pref[i]; }
  return mx;
}

typedef struct rstats {
  uint64_t rejected, batches, waits, expired, delayed_sent, multi_level, cancelled;
} rstats;

static void random_round(uint64_t seed, int steps, rstats *rs) {
  rnd_state = seed * 0x9E3779B97F4A7C15ull + 1;
  model m;
  memset(&m, 0, sizeof m);
  int64_t maxes[] = {0, 1, 4, 8, 32};
  m.cfg.max_batch_size = maxes[rndn(5)];
  if (m.cfg.max_batch_size > 1 && rndn(2)) {
    m.npref = 1 + rndn(3);
    for (size_t i = 0; i < m.npref; i++) m.pref[i] = 1 + (int64_t)rndn((uint64_t)m.cfg.max_batch_size);
    m.cfg.preferred_batch_sizes = m.pref;
    m.cfg.n_preferred_batch_sizes = m.npref;
  }
  uint64_t delays[] = {0, 100, 1000};
  m.cfg.max_queue_delay_us = delays[rndn(3)];
  m.cfg.wait_mode = rndn(2) ? BATCHER_WAIT_ADAPTIVE : BATCHER_WAIT_FULL_DELAY;
  uint32_t levels[] = {0, 1, 3};
  m.cfg.priority_levels = levels[rndn(3)];
  m.cfg.default_priority_level = m.cfg.priority_levels ? 1 + (uint32_t)rndn(m.cfg.priority_levels) : 0;
  batcher_queue_policy *pols[4] = {&m.cfg.default_queue_policy, &m.lp[0].policy, &m.lp[1].policy,
                                   &m.lp[2].policy};
  for (int i = 0; i < 4; i++) {
    pols[i]->timeout_action = rndn(2) ? BATCHER_TIMEOUT_DELAY : BATCHER_TIMEOUT_REJECT;
    pols[i]->default_timeout_us = rndn(3) ? 0 : 200 + rndn(2000);
    pols[i]->allow_timeout_override = rndn(2);
    pols[i]->max_queue_size = rndn(3) ? 0 : 1 + (uint32_t)rndn(20);
  }
  if (m.cfg.priority_levels) {
    m.cfg.n_priority_queue_policy = rndn(m.cfg.priority_levels + 1);
    for (size_t i = 0; i < m.cfg.n_priority_queue_policy; i++) m.lp[i].level = (uint32_t)i + 1;
    m.cfg.priority_queue_policy = m.lp;
  }
  batcher *b = make(&m.cfg);
  sched_order *ord;
  assert_null(sched_order_create(&ord));
  m.cap = (size_t)steps + 1;
  m.it = calloc(m.cap, sizeof *m.it);
  size_t *walk = malloc(m.cap * sizeof *walk);
  assert_non_null(m.it);
  assert_non_null(walk);
  uint64_t max_b = m.cfg.max_batch_size > 0 ? (uint64_t)m.cfg.max_batch_size : 1;
  batcher_item *out = malloc(64 * sizeof *out);
  uint64_t now = 1000, next_release = 0;
  uint64_t dispatched = 0, expired = 0, cancelled = 0, rejected_enq = 0;
  uint64_t pm = (uint64_t)model_pref_max(&m);
  uint64_t delay_ns = m.cfg.max_queue_delay_us * US;
  size_t skip_limit = 4 * max_b + 64;

  for (int step = 0; step < steps; step++) {
    uint64_t op = rndn(100);
    now += rndn(3) ? rndn(50 * US) : rndn(1500 * US);
    if (op < 45) { /* enqueue */
      mitem x = {0};
      uint32_t prio = m.cfg.priority_levels ? (uint32_t)rndn(m.cfg.priority_levels + 1) : 0;
      if (rndn(40) == 0) prio = m.cfg.priority_levels + 1; /* invalid when levels > 0 */
      int64_t rows = m.cfg.max_batch_size ? (int64_t)rndn(max_b + 1) : (int64_t)rndn(5);
      if (rndn(50) == 0) rows = m.cfg.max_batch_size + 1; /* invalid when batching */
      uint64_t tmo = rndn(3) ? 0 : 100 + rndn(3000);
      batcher_item it = {.seq = m.n, .rows = rows, .shape_key = rndn(3), .priority = prio,
                         .timeout_us = tmo};
      x.level = (m.cfg.priority_levels && prio && prio <= m.cfg.priority_levels) ? prio - 1
                : (m.cfg.priority_levels ? m.cfg.default_priority_level - 1 : 0);
      const batcher_queue_policy *p = policy_of(&m, x.level);
      uint64_t count = 0;
      for (size_t i = 0; i < m.n; i++)
        if (m.it[i].used && m.it[i].level == x.level && (m.it[i].state == M_Q || m.it[i].state == M_D))
          count++;
      bool bad = (m.cfg.priority_levels && prio > m.cfg.priority_levels) ||
                 (m.cfg.max_batch_size > 0 && rows > m.cfg.max_batch_size);
      bool full = !bad && p->max_queue_size && count >= p->max_queue_size;
      uint64_t ticket = 0;
      cinfer_status *st = batcher_enqueue(b, &it, now, &ticket);
      if (bad || full) {
        assert_non_null(st);
        assert_int_equal(cinfer_status_code(st), bad ? CINFER_INVALID_ARG : CINFER_UNAVAILABLE);
        cinfer_status_free(st);
        rejected_enq++;
        continue;
      }
      assert_null(st);
      uint64_t t = p->default_timeout_us;
      if (p->allow_timeout_override && tmo && (t == 0 || tmo < t)) t = tmo;
      x.used = 1;
      x.shape = it.shape_key;
      x.rows = rows > 0 ? rows : 1;
      x.enq = now;
      x.ord = m.ord++;
      x.deadline = t ? now + t * US : UINT64_MAX;
      x.delay_action = p->timeout_action == BATCHER_TIMEOUT_DELAY;
      x.state = M_Q;
      x.ticket = ticket;
      assert_int_equal(sched_order_next_seq(ord), m.n);
      m.it[m.n++] = x;
    } else if (op < 83) { /* next */
      model_apply_timeouts(&m, now);
      size_t k = model_walk(&m, walk);
      /* the model's candidate: same-shape prefix of the walk, led by walk[0] */
      size_t cand[64], nc = 0, skipped = 0;
      int64_t cum[64], rows = 0;
      bool overflow = false;
      for (size_t i = 0; i < k && nc < 64; i++) {
        mitem *x = &m.it[walk[i]];
        if (x->shape != m.it[walk[0]].shape) { if (++skipped > skip_limit) break; continue; }
        if (m.cfg.max_batch_size == 0) { if (nc == 0) { cand[nc] = walk[i]; cum[nc++] = x->rows; } break; }
        if (rows + x->rows > m.cfg.max_batch_size) { overflow = true; break; }
        rows += x->rows;
        cand[nc] = walk[i];
        cum[nc++] = rows;
        if (rows == m.cfg.max_batch_size) break;
      }
      size_t n;
      uint64_t w;
      assert_null(batcher_next(b, now, out, 64, &n, &w));
      if (k == 0) {
        assert_int_equal(n, 0);
        continue;
      }
      if (n == 0) {
        /* waiting is allowed only while batching with a delay, below the largest
         * preferred size, with no preferred size reachable and the delay not over */
        assert_true(m.cfg.max_batch_size > 0 && delay_ns > 0);
        assert_false(overflow);
        assert_true((uint64_t)cum[nc - 1] < pm);
        for (size_t i = 0; i < nc; i++) assert_false(model_is_pref(&m, cum[i]));
        uint64_t oldest = UINT64_MAX;
        for (size_t i = 0; i < nc; i++) if (m.it[cand[i]].enq < oldest) oldest = m.it[cand[i]].enq;
        assert_true(now < oldest + delay_ns);
        rs->waits++;
        bool uncollected = false;
        for (size_t i = 0; i < m.n; i++) uncollected |= m.it[i].used && m.it[i].state == M_X;
        if (uncollected) {
          assert_int_equal(w, now); /* timed-out items wait for batcher_expire */
          continue;
        }
        assert_true(w > now && w <= oldest + delay_ns);
        /* nothing changes before the wake time */
        uint64_t t = now + rndn(w - now);
        size_t n2;
        uint64_t w2;
        assert_null(batcher_next(b, t, out, 64, &n2, &w2));
        assert_int_equal(n2, 0);
        assert_int_equal(w2, w);
        now = t;
        continue;
      }
      assert_int_equal(w, now);
      /* the batch is a prefix of the candidate: one shape, priority and arrival order */
      assert_true(n <= nc);
      int64_t sum = 0;
      for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].seq, cand[i]);
        mitem *x = &m.it[cand[i]];
        assert_true(x->state == M_Q || x->state == M_D);
        sum += x->rows;
        x->state = M_GONE;
      }
      if (m.cfg.max_batch_size > 0) assert_true(sum <= m.cfg.max_batch_size);
      else assert_int_equal(n, 1);
      rs->batches++;
      for (size_t i = 0; i < n; i++) {
        rs->delayed_sent += m.it[cand[i]].state == M_GONE && now > m.it[cand[i]].deadline &&
                            m.it[cand[i]].delay_action;
        if (i > 0 && m.it[cand[i]].level != m.it[cand[0]].level) { rs->multi_level++; break; }
      }
      if (n < nc) /* cut short only at a preferred size or before passing the largest */
        assert_true(model_is_pref(&m, cum[n - 1]) || (uint64_t)cum[n] > pm);
      uint64_t oldest = UINT64_MAX;
      for (size_t i = 0; i < nc; i++) if (m.it[cand[i]].enq < oldest) oldest = m.it[cand[i]].enq;
      if (delay_ns && now >= oldest + delay_ns) assert_int_equal(n, nc);
      dispatched += n;
    } else if (op < 90) { /* expire */
      model_apply_timeouts(&m, now);
      size_t want = 0;
      for (size_t i = 0; i < m.n; i++) if (m.it[i].used && m.it[i].state == M_X) want++;
      size_t got = 0, r;
      while ((r = batcher_expire(b, now, out, 8)) > 0) {
        for (size_t i = 0; i < r; i++) {
          mitem *x = &m.it[out[i].seq];
          assert_int_equal(x->state, M_X);
          assert_false(x->delay_action);
          assert_true(now > x->deadline);
          x->state = M_GONE;
        }
        got += r;
      }
      assert_int_equal(got, want);
      expired += got;
      rs->expired += got;
    } else if (op < 94) { /* cancel a random item, queued or long gone */
      if (m.n == 0) continue;
      size_t i = rndn(m.n);
      mitem *x = &m.it[i];
      batcher_item got;
      bool present = x->state == M_Q || x->state == M_D || x->state == M_X;
      assert_int_equal(batcher_cancel(b, x->ticket, &got), present);
      if (present) {
        assert_int_equal(got.seq, i);
        x->state = M_GONE;
        cancelled++;
        rs->cancelled++;
      }
    } else { /* complete some finished items; check the released run */
      for (int t = 0; t < 4; t++) {
        if (m.n == 0) break;
        size_t i = rndn(m.n);
        mitem *x = &m.it[i];
        if (x->state != M_GONE || x->completed) continue;
        x->completed = 1;
        uint64_t first, count;
        assert_null(sched_order_complete(ord, i, &first, &count));
        if (count) assert_int_equal(first, next_release);
        for (uint64_t s2 = first; s2 < first + count; s2++) assert_true(m.it[s2].completed);
        next_release += count;
        if (next_release < m.n) assert_false(m.it[next_release].completed);
      }
    }
    if (step % 25 == 0) {
      cinfer_status *bad = batcher_check(b);
      if (bad) fail_msg("seed %llu step %d: %s", (unsigned long long)seed, step,
                        cinfer_status_message(bad));
    }
    /* pending matches the model (after the last timeout application) */
    uint64_t req, rws, mreq = 0, mrows = 0;
    batcher_pending(b, &req, &rws);
    for (size_t i = 0; i < m.n; i++)
      if (m.it[i].used && (m.it[i].state == M_Q || m.it[i].state == M_D)) {
        mreq++;
        mrows += (uint64_t)m.it[i].rows;
      }
    /* REJECT-timed-out items leave the pending count when the batcher applies timeouts,
     * which happens exactly where the model applies them (next/expire) */
    assert_int_equal(req, mreq);
    assert_int_equal(rws, mrows);
  }
  /* drain: every remaining item comes out exactly once */
  model_apply_timeouts(&m, now);
  size_t r, drained = 0;
  while ((r = batcher_drain(b, out, 16)) > 0) {
    for (size_t i = 0; i < r; i++) {
      mitem *x = &m.it[out[i].seq];
      assert_true(x->state != M_GONE);
      x->state = M_GONE;
    }
    drained += r;
  }
  for (size_t i = 0; i < m.n; i++) assert_int_equal(m.it[i].state, M_GONE);
  assert_null(batcher_check(b));
  assert_int_equal(dispatched + expired + cancelled + drained, m.n);
  /* complete everything: all seqs are released once, in order */
  for (size_t i = 0; i < m.n; i++) {
    if (m.it[i].completed) continue;
    uint64_t first, count;
    assert_null(sched_order_complete(ord, i, &first, &count));
    if (count) assert_int_equal(first, next_release);
    next_release += count;
  }
  assert_int_equal(next_release, m.n);
  assert_int_equal(sched_order_outstanding(ord), 0);
  free(out);
  free(walk);
  free(m.it);
  sched_order_destroy(ord);
  batcher_destroy(b);
  rs->rejected += rejected_enq;
}

static void test_random_property(void **s) {
  rstats rs = {0};
  for (uint64_t seed = 1; seed <= 60; seed++) random_round(seed, 3000, &rs);
  printf("random: %llu batches, %llu waits, %llu REJECT timeouts, %llu DELAY-timed-out items "
         "sent, %llu batches spanning levels, %llu enqueue errors, %llu cancelled\n",
         (unsigned long long)rs.batches, (unsigned long long)rs.waits,
         (unsigned long long)rs.expired, (unsigned long long)rs.delayed_sent,
         (unsigned long long)rs.multi_level, (unsigned long long)rs.rejected,
         (unsigned long long)rs.cancelled);
  /* every rule was exercised */
  assert_true(rs.rejected > 0 && rs.waits > 0 && rs.expired > 0 && rs.delayed_sent > 0 &&
              rs.multi_level > 0 && rs.cancelled > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_errors),     cmocka_unit_test(test_empty_dynamic_batching),
      cmocka_unit_test(test_preferred_sizes),   cmocka_unit_test(test_delay_expiry),
      cmocka_unit_test(test_max_batch_and_rows), cmocka_unit_test(test_priorities),
      cmocka_unit_test(test_timeout_reject),    cmocka_unit_test(test_timeout_override),
      cmocka_unit_test(test_timeout_delay),     cmocka_unit_test(test_queue_full),
      cmocka_unit_test(test_mixed_shapes),      cmocka_unit_test(test_max_batch_size_zero),
      cmocka_unit_test(test_adaptive_wait),     cmocka_unit_test(test_drain),
      cmocka_unit_test(test_shape_key),         cmocka_unit_test(test_cancel),         cmocka_unit_test(test_order),             cmocka_unit_test(test_random_property),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
