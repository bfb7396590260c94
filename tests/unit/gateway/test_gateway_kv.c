/* test_gateway_kv.c: the kv_aware balancer's pure parts: reading the replicas' LLM load
 * from Prometheus text (the series cinfer serve exports, by model label; versions add up;
 * malformed lines skipped) and the scoring (load, KV usage, prefix affinity, ties). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/gateway.h"

static void test_parse_metrics(void **st) {
  (void)st;
  static const char text[] =
      "# HELP cinfer_llm_running_sequences Sequences in the running batch\n"
      "# TYPE cinfer_llm_running_sequences gauge\n"
      "cinfer_llm_running_sequences{model=\"smollm2\"} 3\n"
      "cinfer_llm_waiting_sequences{model=\"smollm2\"} 1\n"
      "cinfer_llm_kv_cache_usage_ratio{model=\"smollm2\"} 0.25\n"
      "cinfer_pending_requests{model=\"smollm2\",version=\"1\"} 2\n"
      "cinfer_pending_requests{model=\"smollm2\",version=\"2\"} 1\n"
      "cinfer_pending_requests{model=\"identity\",version=\"1\"} 7\n"
      "cinfer_llm_prefix_cache_hits_total{model=\"smollm2\"} 120\n"
      "cinfer_llm_running_sequences_other{model=\"smollm2\"} 99\n"   /* another name */
      "cinfer_llm_running_sequences{model=\"bad\"} x\n"               /* not a number */
      "cinfer_llm_running_sequences{model=\"neg\"} -1\n"              /* negative */
      "cinfer_llm_running_sequences{version=\"1\"} 5\n"                /* no model label */
      "cinfer_llm_running_sequences{model=\"unterminated} 5\n"
      "cinfer_llm_running_sequences{model=\"x\"";                      /* cut short */
  gw_kv_stat s[8];
  size_t n = gw_kv_parse_metrics(text, sizeof text - 1, s, 8);
  assert_int_equal(n, 2);
  assert_string_equal(s[0].model, "smollm2");
  assert_true(s[0].running == 3 && s[0].waiting == 1 && s[0].kv_usage == 0.25);
  assert_true(s[0].pending == 3);  /* both versions */
  assert_true(s[0].prefix_hits == 120);
  assert_string_equal(s[1].model, "identity");
  assert_true(s[1].pending == 7 && s[1].running == 0);
  gw_kv_free(s, n);
  /* capacity: extra models are dropped, not overflowed */
  assert_int_equal(gw_kv_parse_metrics(text, sizeof text - 1, s, 1), 1);
  gw_kv_free(s, 1);
  assert_int_equal(gw_kv_parse_metrics("", 0, s, 8), 0);
  /* a long name is read whole */
  char name[301], line[400];
  memset(name, 'm', 300);
  name[300] = 0;
  int ll = snprintf(line, sizeof line, "cinfer_llm_running_sequences{model=\"%s\"} 4\n", name);
  assert_int_equal(gw_kv_parse_metrics(line, (size_t)ll, s, 8), 1);
  assert_string_equal(s[0].model, name);
  assert_true(s[0].running == 4);
  gw_kv_free(s, 1);
}

static void test_kv_pick(void **st) {
  (void)st;
  uint64_t ids[3] = {11, 22, 33};
  gw_kv_load l[3];
  memset(l, 0, sizeof l);
  for (int i = 0; i < 3; i++) l[i].known = true;
  /* no key: the least loaded wins; running + 2 * waiting + pending counts */
  l[0].running = 4;
  l[1].running = 1, l[1].waiting = 2;  /* 5 */
  l[2].running = 2;
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 2.0), 2);
  /* the gateway's own in-flight count wins when larger than the (stale) metrics */
  l[2].outstanding = 9;
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 2.0), 0);
  l[2].outstanding = 0;
  /* a full KV cache costs kv_weight sequences */
  l[2].kv_usage = 1.0;  /* 2 + 4 = 6 > 4 */
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 2.0), 0);
  /* up to half full it costs nothing (its running sequences are counted already), then it
   * grows linearly: 0.75 full costs kv_weight / 2 */
  l[2].kv_usage = 0.5;  /* 2 < 4 */
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 2.0), 2);
  l[2].kv_usage = 0.75; /* 2 + 2 = 4 < replica 1's 5 */
  l[0].kv_usage = 0.8;  /* 4 + 2.4 */
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 2.0), 2);
  l[2].kv_usage = 0.9;  /* 2 + 3.2 = 5.2 < 6.4 but > replica 1's 5: its metrics say 1 running + 2 x 2 waiting */
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 2.0), 1);
  l[0].kv_usage = l[2].kv_usage = 0;
  /* prefix affinity: with equal loads every key goes to its rendezvous replica, always */
  memset(l, 0, sizeof l);
  for (int i = 0; i < 3; i++) l[i].known = true;
  int seen[3] = {0};
  for (uint64_t key = 1; key <= 300; key++) {
    int a = gw_kv_pick(3, l, ids, true, key, 4.0, 2.0);
    assert_true(a >= 0 && a < 3);
    assert_int_equal(gw_kv_pick(3, l, ids, true, key, 4.0, 2.0), a);
    seen[a]++;
  }
  assert_true(seen[0] > 50 && seen[1] > 50 && seen[2] > 50);  /* spread, not one replica */
  /* the bonus holds up to prefix_bonus extra load, not beyond */
  uint64_t key = 7;
  int a = gw_kv_pick(3, l, ids, true, key, 4.0, 2.0);
  l[a].running = 1.5;
  assert_int_equal(gw_kv_pick(3, l, ids, true, key, 4.0, 2.0), a);
  l[a].running = 3;
  assert_int_not_equal(gw_kv_pick(3, l, ids, true, key, 4.0, 2.0), a);
  /* two running sequences whose blocks fill half the cache: the key's replica keeps the key
   * (their KV use is their load, not a second cost) */
  l[a].running = 2, l[a].kv_usage = 0.48;
  assert_int_equal(gw_kv_pick(3, l, ids, true, key, 4.0, 2.0), a);
  l[a].kv_usage = 0;
  /* unknown metrics: only outstanding counts */
  memset(l, 0, sizeof l);
  l[0].outstanding = 2, l[1].outstanding = 0, l[2].outstanding = 1;
  assert_int_equal(gw_kv_pick(3, l, ids, false, 0, 4.0, 0.0), 1);
  assert_int_equal(gw_kv_pick(0, l, ids, false, 0, 4.0, 0.0), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_parse_metrics), cmocka_unit_test(test_kv_pick)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
