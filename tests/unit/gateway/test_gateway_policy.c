/* test_gateway_policy.c: the gateway's pure policies with a seeded RNG and a fake clock:
 * balancer choice distributions, smooth weighted round robin exactness, nginx limit_req
 * arithmetic (rate, burst, nodelay, delay, Retry-After), the health state machine and
 * passive ejection with growing ejection time. */
#include <math.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/gateway.h"

/* ---- balancer ------------------------------------------------------------------------ */

static void test_p2c_prefers_less_loaded(void **st) {
  (void)st;
  uint64_t rng = 42, rr = 0;
  uint32_t out[4] = {10, 0, 10, 10};
  int counts[4] = {0};
  for (int i = 0; i < 30000; i++) counts[gw_balance_pick(GW_BAL_P2C, 4, out, NULL, &rng, &rr)]++;
  /* replica 1 wins whenever it is one of the two drawn: P = 1 - C(3,2)/C(4,2) = 1/2 */
  assert_true(fabs(counts[1] / 30000.0 - 0.5) < 0.02);
  /* the most loaded one never wins against a less loaded draw */
  uint32_t out2[3] = {0, 1, 100};
  int c2[3] = {0};
  for (int i = 0; i < 30000; i++) c2[gw_balance_pick(GW_BAL_P2C, 3, out2, NULL, &rng, &rr)]++;
  assert_int_equal(c2[2], 0);
  /* 0 wins when drawn (2/3 of the pairs); 1 only in the pair {1,2} (1/3) */
  assert_true(fabs(c2[0] / 30000.0 - 2.0 / 3) < 0.02);
  assert_true(fabs(c2[1] / 30000.0 - 1.0 / 3) < 0.02);
}

static void test_p2c_uniform_when_equal_and_deterministic(void **st) {
  (void)st;
  uint32_t out[5] = {3, 3, 3, 3, 3};
  int counts[5] = {0};
  uint64_t rng = 7, rr = 0;
  int seq1[64];
  for (int i = 0; i < 50000; i++) {
    int k = gw_balance_pick(GW_BAL_P2C, 5, out, NULL, &rng, &rr);
    assert_true(k >= 0 && k < 5);
    if (i < 64) seq1[i] = k;
    counts[k]++;
  }
  for (int i = 0; i < 5; i++) assert_true(fabs(counts[i] / 50000.0 - 0.2) < 0.015);
  rng = 7;
  for (int i = 0; i < 64; i++) assert_int_equal(gw_balance_pick(GW_BAL_P2C, 5, out, NULL, &rng, &rr), seq1[i]);
  assert_int_equal(gw_balance_pick(GW_BAL_P2C, 0, out, NULL, &rng, &rr), -1);
  assert_int_equal(gw_balance_pick(GW_BAL_P2C, 1, out, NULL, &rng, &rr), 0);
}

static void test_round_robin_and_weighted(void **st) {
  (void)st;
  uint64_t rng = 99, rr = 0;
  uint32_t out[3] = {0};
  for (int i = 0; i < 9; i++) assert_int_equal(gw_balance_pick(GW_BAL_ROUND_ROBIN, 3, out, NULL, &rng, &rr), i % 3);
  int w[3] = {1, 2, 7};
  int counts[3] = {0};
  for (int i = 0; i < 100000; i++) counts[gw_balance_pick(GW_BAL_WEIGHTED, 3, out, w, &rng, &rr)]++;
  assert_true(fabs(counts[0] / 100000.0 - 0.1) < 0.01);
  assert_true(fabs(counts[1] / 100000.0 - 0.2) < 0.01);
  assert_true(fabs(counts[2] / 100000.0 - 0.7) < 0.01);
}

static void test_swrr_exact_split(void **st) {
  (void)st;
  int w[2] = {90, 10};
  long long cur[2] = {0};
  int counts[2] = {0};
  for (int i = 0; i < 10000; i++) counts[gw_swrr_pick(2, w, cur)]++;
  assert_int_equal(counts[0], 9000);
  assert_int_equal(counts[1], 1000);
  /* smooth: never two canary picks in a row at 90/10 */
  long long c2[2] = {0};
  int prev = -1;
  for (int i = 0; i < 1000; i++) {
    int k = gw_swrr_pick(2, w, c2);
    assert_false(k == 1 && prev == 1);
    prev = k;
  }
  int z[3] = {0, 0, 0};
  long long c3[3] = {0};
  assert_int_equal(gw_swrr_pick(3, z, c3), -1);
  int w3[3] = {5, 0, 1};
  int n3[3] = {0};
  for (int i = 0; i < 600; i++) n3[gw_swrr_pick(3, w3, c3)]++;
  assert_int_equal(n3[0], 500);
  assert_int_equal(n3[1], 0);
  assert_int_equal(n3[2], 100);
}

/* ---- token bucket ---------------------------------------------------------------------- */

static void test_bucket_burst_then_rate_nodelay(void **st) {
  (void)st;
  gw_bucket b = {0};
  uint64_t t = 1000000;
  int admitted = 0;
  /* 10 r/s, burst 5, all at once: nginx admits 1 + burst */
  for (int i = 0; i < 20; i++) {
    gw_bucket_result r = gw_bucket_take(&b, 10, 5, true, t);
    if (r.admitted) {
      admitted++;
      assert_int_equal(r.delay_ms, 0);
    } else {
      assert_int_equal(r.retry_after_s, 1);
    }
  }
  assert_int_equal(admitted, 6);
  /* then exactly one more every 100 ms */
  for (int step = 1; step <= 50; step++) {
    t += 100;
    assert_true(gw_bucket_take(&b, 10, 5, true, t).admitted);
    assert_false(gw_bucket_take(&b, 10, 5, true, t).admitted);
  }
  /* over t seconds of saturation: R*t + B + 1 */
  gw_bucket c = {0};
  uint64_t t0 = 5000000;
  int n = 0;
  for (uint64_t ms = 0; ms <= 10000; ms++)
    for (int k = 0; k < 3; k++) n += gw_bucket_take(&c, 20, 30, true, t0 + ms).admitted;
  assert_int_equal(n, 20 * 10 + 30 + 1);
}

static void test_bucket_delay_and_retry_after(void **st) {
  (void)st;
  gw_bucket b = {0};
  uint64_t t = 1000;
  /* without nodelay, the k-th excess request waits k / rate seconds */
  assert_int_equal(gw_bucket_take(&b, 2, 4, false, t).delay_ms, 0);
  assert_int_equal(gw_bucket_take(&b, 2, 4, false, t).delay_ms, 500);
  assert_int_equal(gw_bucket_take(&b, 2, 4, false, t).delay_ms, 1000);
  assert_int_equal(gw_bucket_take(&b, 2, 4, false, t).delay_ms, 1500);
  assert_int_equal(gw_bucket_take(&b, 2, 4, false, t).delay_ms, 2000);
  gw_bucket_result r = gw_bucket_take(&b, 2, 4, false, t);
  assert_false(r.admitted);
  assert_int_equal(r.retry_after_s, 1);
  /* a slow rate gives a longer Retry-After: 0.1 r/s, burst 0 -> 10 s */
  gw_bucket s = {0};
  assert_true(gw_bucket_take(&s, 0.1, 0, true, t).admitted);
  r = gw_bucket_take(&s, 0.1, 0, true, t + 1000);
  assert_false(r.admitted);
  assert_int_equal(r.retry_after_s, 9);
  assert_true(gw_bucket_take(&s, 0.1, 0, true, t + 10000).admitted);
  /* a long idle period empties the bucket (no negative excess) */
  gw_bucket u = {0};
  for (int i = 0; i < 6; i++) gw_bucket_take(&u, 10, 5, true, 0);
  for (int i = 0; i < 6; i++) assert_true(gw_bucket_take(&u, 10, 5, true, 3600000).admitted || i == 5);
}

/* ---- health ---------------------------------------------------------------------------- */

static void test_health_thresholds(void **st) {
  (void)st;
  gw_health_params p = {.healthy_threshold = 2, .unhealthy_threshold = 3,
                        .eject_consecutive = 5, .eject_base_ms = 1000, .eject_max_ms = 2500};
  gw_health h = {0};
  assert_false(gw_health_usable(&h, 0));
  assert_true(gw_health_check_result(&h, &p, true));  /* first check decides */
  assert_int_equal(h.state, GW_H_HEALTHY);
  assert_false(gw_health_check_result(&h, &p, false));
  assert_false(gw_health_check_result(&h, &p, false));
  assert_false(gw_health_check_result(&h, &p, true));  /* resets the failure run */
  assert_false(gw_health_check_result(&h, &p, false));
  assert_false(gw_health_check_result(&h, &p, false));
  assert_true(gw_health_check_result(&h, &p, false));
  assert_int_equal(h.state, GW_H_UNHEALTHY);
  assert_false(gw_health_usable(&h, 0));
  assert_false(gw_health_check_result(&h, &p, true));
  assert_true(gw_health_check_result(&h, &p, true));
  assert_int_equal(h.state, GW_H_HEALTHY);
  gw_health f = {0};
  assert_true(gw_health_check_result(&f, &p, false));
  assert_int_equal(f.state, GW_H_UNHEALTHY);
}

static void test_passive_ejection_grows_and_is_capped(void **st) {
  (void)st;
  gw_health_params p = {.healthy_threshold = 1, .unhealthy_threshold = 1,
                        .eject_consecutive = 3, .eject_base_ms = 1000, .eject_max_ms = 2500};
  gw_health h = {.state = GW_H_HEALTHY};
  uint64_t t = 10000;
  assert_false(gw_health_passive(&h, &p, true, true, t));
  assert_false(gw_health_passive(&h, &p, false, true, t));  /* success resets the run */
  assert_false(gw_health_passive(&h, &p, true, true, t));
  assert_false(gw_health_passive(&h, &p, true, true, t));
  assert_true(gw_health_passive(&h, &p, true, true, t));
  assert_int_equal(h.ejected_until_ms, t + 1000);
  assert_false(gw_health_usable(&h, t + 999));
  assert_true(gw_health_usable(&h, t + 1000));
  t += 1000;
  for (int i = 0; i < 2; i++) assert_false(gw_health_passive(&h, &p, true, true, t));
  assert_true(gw_health_passive(&h, &p, true, true, t));
  assert_int_equal(h.ejected_until_ms, t + 2000);  /* second ejection: 2 x base */
  t += 2000;
  for (int i = 0; i < 2; i++) gw_health_passive(&h, &p, true, true, t);
  assert_true(gw_health_passive(&h, &p, true, true, t));
  assert_int_equal(h.ejected_until_ms, t + 2500);  /* capped at max */
  /* the ejected-share cap refuses */
  gw_health k = {.state = GW_H_HEALTHY};
  for (int i = 0; i < 10; i++) assert_false(gw_health_passive(&k, &p, true, false, t));
  assert_true(gw_health_usable(&k, t));
  /* consecutive_failures 0 disables ejection */
  gw_health_params off = p;
  off.eject_consecutive = 0;
  for (int i = 0; i < 10; i++) assert_false(gw_health_passive(&k, &off, true, true, t));
}

/* ---- affinity ------------------------------------------------------------------------ */

static void test_affinity_sticky_spread_minimal_moves_bounded(void **st) {
  (void)st;
  uint64_t ids[5];
  for (int i = 0; i < 5; i++) {
    char a[32];
    snprintf(a, sizeof a, "10.0.0.%d:8000", i + 1);
    ids[i] = gw_hash64(a, strlen(a));
  }
  uint32_t idle[5] = {0};
  int counts[5] = {0}, before[4000];
  for (int k = 0; k < 4000; k++) {
    char key[32];
    snprintf(key, sizeof key, "session-%d", k);
    uint64_t h = gw_hash64(key, strlen(key));
    int a = gw_affinity_pick(5, ids, h, idle, 1.25);
    assert_int_equal(gw_affinity_pick(5, ids, h, idle, 1.25), a);  /* sticky */
    before[k] = a;
    counts[a]++;
  }
  for (int i = 0; i < 5; i++) assert_true(counts[i] > 650 && counts[i] < 950);  /* ~800 each */
  /* remove candidate 2: only its keys move */
  uint64_t ids4[4] = {ids[0], ids[1], ids[3], ids[4]};
  int map[5] = {0, 1, -1, 2, 3};
  for (int k = 0; k < 4000; k++) {
    char key[32];
    snprintf(key, sizeof key, "session-%d", k);
    int a = gw_affinity_pick(4, ids4, gw_hash64(key, strlen(key)), idle, 1.25);
    if (before[k] != 2) assert_int_equal(a, map[before[k]]);
  }
  /* bounded load: a swamped favourite is skipped */
  uint64_t h = gw_hash64("hot", 3);
  int fav = gw_affinity_pick(5, ids, h, idle, 1.25);
  uint32_t load[5] = {2, 2, 2, 2, 2};
  load[fav] = 10;  /* mean 3.6 -> bound 5.75 */
  int alt = gw_affinity_pick(5, ids, h, load, 1.25);
  assert_true(alt >= 0 && alt != fav);
  load[fav] = 4;  /* mean 2.4 -> bound 4.25 */
  assert_int_equal(gw_affinity_pick(5, ids, h, load, 1.25), fav);
  assert_int_equal(gw_affinity_pick(0, ids, h, load, 1.25), -1);
}

/* Token budget: admitted while above zero, the answer's tokens taken after (debt allowed),
 * refilled at tpm/60 per second up to tpm; Retry-After covers the debt. */
static void test_token_budget(void **state) {
  (void)state;
  gw_tokens t = {0};
  assert_int_equal(gw_tokens_admit(&t, 60, 1000), 0);   /* a new key starts full (60) */
  gw_tokens_charge(&t, 60, 50, 1000);
  assert_int_equal(gw_tokens_admit(&t, 60, 1000), 0);   /* 10 left */
  gw_tokens_charge(&t, 60, 40, 1000);                   /* -30: in debt */
  assert_int_equal(gw_tokens_admit(&t, 60, 1000), 31);  /* 1 token/s: 30 s, then above zero */
  assert_int_equal(gw_tokens_admit(&t, 60, 21000), 11); /* 20 s later: -10 */
  assert_int_equal(gw_tokens_admit(&t, 60, 31500), 0);  /* +0.5 */
  assert_int_equal(gw_tokens_admit(&t, 60, 1000000), 0);
  assert_true(t.level <= 60.0); /* capped at one minute's worth */
}

/* Usage counting fed in pieces of every size: total_tokens wins; chunks otherwise. */
static void test_usage_counting(void **state) {
  (void)state;
  const char *whole = "{\"choices\":[{\"text\":\"x\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":16,"
                      "\"total_tokens\":23}}";
  const char *sse = "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"index\":0,"
                    "\"text\":\"b\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\ndata: [DONE]\n\n";
  for (size_t piece = 1; piece <= 64; piece++) {
    gw_tok_usage u;
    gw_tok_usage_init(&u);
    for (size_t i = 0; i < strlen(whole); i += piece)
      gw_tok_usage_feed(&u, whole + i, strlen(whole) - i < piece ? strlen(whole) - i : piece);
    assert_int_equal(gw_tok_usage_tokens(&u), 23);
    gw_tok_usage_init(&u);
    for (size_t i = 0; i < strlen(sse); i += piece)
      gw_tok_usage_feed(&u, sse + i, strlen(sse) - i < piece ? strlen(sse) - i : piece);
    assert_int_equal(gw_tok_usage_tokens(&u), 3);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_token_budget),
      cmocka_unit_test(test_usage_counting),
      cmocka_unit_test(test_p2c_prefers_less_loaded),
      cmocka_unit_test(test_p2c_uniform_when_equal_and_deterministic),
      cmocka_unit_test(test_round_robin_and_weighted),
      cmocka_unit_test(test_swrr_exact_split),
      cmocka_unit_test(test_bucket_burst_then_rate_nodelay),
      cmocka_unit_test(test_bucket_delay_and_retry_after),
      cmocka_unit_test(test_health_thresholds),
      cmocka_unit_test(test_passive_ejection_grows_and_is_capped),
      cmocka_unit_test(test_affinity_sticky_spread_minimal_moves_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
