/* test_gateway_config.c: the gateway's JSON configuration: a full document is read into
 * the right fields; a table of bad documents each fails with a message naming the key;
 * host:port parsing; final validation. Run under ASan, it also shows that error paths free
 * whatever was parsed before the error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/gateway.h"

static void test_full_document(void **st) {
  (void)st;
  static const char doc[] =
      "{\"listen\":{\"host\":\"127.0.0.1\",\"port\":9000,\"io_threads\":3,\"drain_timeout_ms\":5000,\"max_body_mb\":2},"
      "\"upstreams\":{\"static\":[\"10.0.0.1:8000\",{\"address\":\"[::1]:8001\",\"group\":\"canary\",\"weight\":3}],"
      "\"dns\":[\"replicas.svc:8000\",{\"name\":\"other\",\"port\":9,\"group\":\"g\"}],"
      "\"dns_interval_ms\":1500,\"file\":\"/tmp/x\",\"file_interval_ms\":200,\"models_interval_ms\":700},"
      "\"balancer\":\"weighted\",\"seed\":5,"
      "\"health\":{\"path\":\"/ready\",\"interval_ms\":300,\"timeout_ms\":100,\"unhealthy_threshold\":4,\"healthy_threshold\":3},"
      "\"outlier\":{\"consecutive_failures\":7,\"base_ejection_ms\":100,\"max_ejection_ms\":900,\"max_ejected_percent\":30},"
      "\"retry\":{\"retries\":0,\"budget_ratio\":0.5,\"budget_min\":2,\"connect_timeout_ms\":50,\"try_timeout_ms\":60,\"request_timeout_ms\":70,\"max_idle_per_pool\":8},"
      "\"rate_limit\":{\"rate\":12.5,\"burst\":4,\"nodelay\":true,\"key_header\":\"X-Tenant\",\"max_keys\":99},"
      "\"concurrency\":{\"max\":64,\"priority_header\":\"X-P\",\"classes\":[{\"name\":\"hi\",\"share\":1},{\"name\":\"lo\",\"share\":0.25}]},"
      "\"canary\":{\"m\":{\"variants\":[{\"name\":\"v1\",\"version\":1,\"weight\":90},{\"name\":\"v2\",\"group\":\"canary\",\"weight\":10}],\"rollback\":{\"max_error_rate\":0.1,\"min_requests\":50}}},"
      "\"affinity\":{\"session_header\":\"X-S\",\"prefix_bytes\":64,\"load_factor\":1.5},"
      "\"variant_header\":\"X-V\",\"admin_token\":\"t\"}";
  gw_config c;
  gw_config_defaults(&c);
  cinfer_status *s = gw_config_apply_json(&c, doc, sizeof doc - 1, "doc");
  assert_null(s);
  assert_string_equal(c.host, "127.0.0.1");
  assert_int_equal(c.port, 9000);
  assert_int_equal(c.io_threads, 3);
  assert_int_equal(c.max_body_bytes, 2u << 20);
  assert_int_equal(c.n_statics, 2);
  assert_string_equal(c.statics[1].address, "[::1]:8001");
  assert_string_equal(c.statics[1].group, "canary");
  assert_int_equal(c.statics[1].weight, 3);
  assert_int_equal(c.n_dns, 2);
  assert_string_equal(c.dns[0].name, "replicas.svc");
  assert_int_equal(c.dns[0].port, 8000);
  assert_int_equal(c.dns[1].port, 9);
  assert_int_equal(c.balancer, GW_BAL_WEIGHTED);
  assert_int_equal(c.seed, 5);
  assert_string_equal(c.health_path, "/ready");
  assert_int_equal(c.unhealthy_threshold, 4);
  assert_int_equal(c.eject_consecutive, 7);
  assert_int_equal(c.retries, 0);
  assert_true(c.retry_budget_ratio == 0.5);
  assert_true(c.rate == 12.5);
  assert_true(c.nodelay);
  assert_string_equal(c.rate_key_header, "X-Tenant");
  assert_int_equal(c.n_classes, 2);
  assert_true(c.classes[1].share == 0.25);
  assert_int_equal(c.n_canaries, 1);
  assert_int_equal(c.canaries[0].variants[0].version, 1);
  assert_string_equal(c.canaries[0].variants[1].group, "canary");
  assert_string_equal(c.admin_token, "t");
  assert_true(c.canaries[0].max_error_rate == 0.1);
  assert_int_equal(c.canaries[0].min_requests, 50);
  assert_string_equal(c.session_header, "X-S");
  assert_int_equal(c.prefix_bytes, 64);
  assert_true(c.affinity_load_factor == 1.5);
  assert_null(gw_config_validate(&c));
  gw_config_free(&c);
  gw_config_free(&c);  /* idempotent */
}

static const struct { const char *doc, *want; } bad[] = {
    {"{\"listen\":{\"port\":-1}}", "f: listen.port: must be an integer in [0, 65535]"},
    {"{\"listen\":{\"port\":1.5}}", "listen.port: must be an integer"},
    {"{\"listen\":[]}", "f: listen: must be an object"},
    {"{\"lisen\":{}}", "f: lisen: unknown key"},
    {"{\"listen\":{\"hots\":\"x\"}}", "listen.hots: unknown key"},
    {"{\"listen\":{\"host\":\"\"}}", "listen.host: must be a non-empty string"},
    {"{\"upstreams\":{\"static\":{}}}", "upstreams.static: must be an array"},
    {"{\"upstreams\":{\"static\":[\"a:1\",\"b\"]}}", "upstreams.static[1].address: 'b' is not host:port"},
    {"{\"upstreams\":{\"static\":[\"a:0\"]}}", "'a:0' is not host:port"},
    {"{\"upstreams\":{\"static\":[\"a:65536\"]}}", "'a:65536' is not host:port"},
    {"{\"upstreams\":{\"static\":[{\"group\":\"x\"}]}}", "upstreams.static[0].address: missing"},
    {"{\"upstreams\":{\"static\":[{\"address\":\"a:1\",\"weight\":0}]}}", "upstreams.static[0].weight: must be an integer in [1, 1000000]"},
    {"{\"upstreams\":{\"static\":[7]}}", "upstreams.static[0]: must be \"host:port\" or an object"},
    {"{\"upstreams\":{\"dns\":[{\"name\":\"x\"}]}}", "upstreams.dns[0].port: missing"},
    {"{\"upstreams\":{\"dns_interval_ms\":5}}", "upstreams.dns_interval_ms: must be an integer in [100, 86400000]"},
    {"{\"balancer\":3}", "balancer: must be a string"},
    {"{\"balancer\":\"random\"}", "balancer: 'random' is not p2c, round_robin, weighted or kv_aware"},
    {"{\"listen\":{\"grpc_port\":70000}}", "listen.grpc_port: must be an integer in [-1, 65535]"},
    {"{\"upstreams\":{\"grpc_port\":0.5}}", "upstreams.grpc_port: must be an integer in [0, 65535]"},
    {"{\"upstreams\":{\"static\":[{\"address\":\"a:1\",\"grpc_port\":0}]}}", "upstreams.static[0].grpc_port: must be an integer in [1, 65535]"},
    {"{\"affinity\":{\"prefix_bonus\":-1}}", "affinity.prefix_bonus: must be a number in [0, 1e+06]"},
    {"{\"health\":{\"path\":\"ready\"}}", "health.path: must start with '/'"},
    {"{\"health\":{\"path\":\"/a b\"}}", "health.path: contains a space"},
    {"{\"health\":{\"unhealthy_threshold\":0}}", "health.unhealthy_threshold: must be an integer in [1, 1000]"},
    {"{\"outlier\":{\"max_ejected_percent\":101}}", "outlier.max_ejected_percent: must be an integer in [0, 100]"},
    {"{\"retry\":{\"retries\":2}}", "retry.retries: must be an integer in [0, 1]"},
    {"{\"retry\":{\"budget_ratio\":\"x\"}}", "retry.budget_ratio: must be a number in [0, 1]"},
    {"{\"rate_limit\":{\"rate\":0}}", "rate_limit.rate: must be a number"},
    {"{\"rate_limit\":{\"burst\":1}}", "rate_limit.rate: missing"},
    {"{\"rate_limit\":{\"rate\":1,\"nodelay\":1}}", "rate_limit.nodelay: must be true or false"},
    {"{\"concurrency\":{\"classes\":[{\"share\":0.5}]}}", "concurrency.classes[0].name: missing"},
    {"{\"concurrency\":{\"classes\":[{\"name\":\"a\",\"share\":2}]}}", "concurrency.classes[0].share: must be a number in [0.001, 1]"},
    {"{\"canary\":{\"m\":{}}}", "canary.m.variants: must be an array of 1 to 16 variants"},
    {"{\"canary\":{\"m\":{\"variants\":[{\"name\":\"a\"}]}}}", "canary.m.variants[0].weight: missing"},
    {"{\"canary\":{\"m\":{\"variants\":[{\"name\":\"a\",\"weight\":1},{\"name\":\"a\",\"weight\":1}]}}}", "canary.m.variants[1].name: duplicate variant 'a'"},
    {"{\"canary\":{\"m\":{\"variants\":[{\"name\":\"a\",\"weight\":1,\"x\":1}]}}}", "canary.m.variants[0].x: unknown key"},
    {"{\"auth\":{\"key_file\":\"k\"}}", "auth.key_file: unknown key"},
    {"{\"auth\":{\"trusted_proxies\":[\"10.0.0.0/8\",\"10.0.0.0/40\"]}}", "auth.trusted_proxies[1]: must be an address or CIDR"},
    {"{\"auth\":{\"trusted_proxies\":\"10.0.0.0/8\"}}", "auth.trusted_proxies: must be an array"},
    {"{\"auth\":{\"public_groups\":[\"health\",\"admin\"]}}", "auth.public_groups[1]: not an API group"},
    {"{\"auth\":{\"reload_interval_ms\":1}}", "auth.reload_interval_ms: must be an integer in [10, 3600000]"},
    {"{\"canary\":{\"m\":{\"variants\":[{\"name\":\"a\",\"weight\":0}]}}}", "canary.m.variants: the weights sum to 0"},
    {"{\"seed\":-1}", "seed: must be an integer"},
    {"{\"affinity\":{\"load_factor\":0.5}}", "affinity.load_factor: must be a number in [1, 100]"},
    {"{\"canary\":{\"m\":{\"variants\":[{\"name\":\"a\",\"weight\":1}],\"rollback\":{\"max_error_rate\":2}}}}", "canary.m.rollback.max_error_rate: must be a number in [0, 1]"},
    {"[1]", "f: the top level must be a JSON object"},
    {"{\n  \"listen\": {\n    \"port\": 80,\n  }\n}", "f:4:"},
    {"", "f:1:1: invalid JSON"},
};

static void test_bad_documents_name_the_key(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gw_config c;
    gw_config_defaults(&c);
    cinfer_status *s = gw_config_apply_json(&c, bad[i].doc, strlen(bad[i].doc), "f");
    if (!s || !strstr(cinfer_status_message(s), bad[i].want))
      fail_msg("case %zu: %s\n  got:  %s\n  want: %s", i, bad[i].doc,
               s ? cinfer_status_message(s) : "(ok)", bad[i].want);
    cinfer_status_free(s);
    gw_config_free(&c);
  }
}

static void test_validate(void **st) {
  (void)st;
  gw_config c;
  gw_config_defaults(&c);
  cinfer_status *s = gw_config_validate(&c);
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "upstreams: none configured"));
  cinfer_status_free(s);
  static const char d1[] = "{\"upstreams\":{\"static\":[\"a:1\"]},\"health\":{\"interval_ms\":100,\"timeout_ms\":200}}";
  assert_null(gw_config_apply_json(&c, d1, sizeof d1 - 1, "f"));
  s = gw_config_validate(&c);
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "health.timeout_ms (200) must not exceed health.interval_ms (100)"));
  cinfer_status_free(s);
  static const char d2[] = "{\"health\":{\"timeout_ms\":50},\"concurrency\":{\"classes\":[{\"name\":\"a\"}]}}";
  assert_null(gw_config_apply_json(&c, d2, sizeof d2 - 1, "f"));
  s = gw_config_validate(&c);
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "concurrency.classes: needs concurrency.max"));
  cinfer_status_free(s);
  gw_config_free(&c);
  s = gw_config_load_file(&c, "/nonexistent/gw.json");
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "/nonexistent/gw.json: No such file"));
  cinfer_status_free(s);
}

static void test_hostport(void **st) {
  (void)st;
  char h[64];
  uint16_t p;
  assert_true(gw_parse_hostport("127.0.0.1:8000", h, sizeof h, &p));
  assert_string_equal(h, "127.0.0.1");
  assert_int_equal(p, 8000);
  assert_true(gw_parse_hostport("[fe80::1]:9", h, sizeof h, &p));
  assert_string_equal(h, "fe80::1");
  assert_int_equal(p, 9);
  assert_true(gw_parse_hostport("svc.ns.local:65535", h, sizeof h, &p));
  const char *badv[] = {"", ":80", "host", "host:", "host:x", "host:80x", "a:b:80", "[::1]80",
                        "[]:80", "ho st:80", "host:-1", "host:0", "host:65536"};
  for (size_t i = 0; i < sizeof badv / sizeof badv[0]; i++)
    if (gw_parse_hostport(badv[i], h, sizeof h, &p)) fail_msg("accepted '%s'", badv[i]);
  char tiny[4];
  assert_false(gw_parse_hostport("longhost:1", tiny, sizeof tiny, &p));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_document),
      cmocka_unit_test(test_bad_documents_name_the_key),
      cmocka_unit_test(test_validate),
      cmocka_unit_test(test_hostport),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
