/* test_gateway_auth.c: the gateway's pure security policies: key file parsing (a table of
 * bad files, each naming file:line and the field), key lookup by SHA-256, the access
 * decision for every (group, role) pair, model allow-lists, client identity behind trusted
 * proxies (forged X-Forwarded-For entries are ignored) and the filtering of listings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gateway/gateway.h"

static char H_ALICE[65], H_OPS[65];

static gw_keyset *parse_ok(const char *text) {
  gw_keyset *ks = NULL;
  cinfer_status *st = gw_keys_parse(text, strlen(text), "keys.txt", &ks);
  if (st) fail_msg("unexpected error: %s", cinfer_status_message(st));
  return ks;
}

static void test_keys_parse_and_find(void **st) {
  (void)st;
  gw_sha256_hex("alice-secret", 12, H_ALICE);
  gw_sha256_hex("ops-secret", 10, H_OPS);
  /* sha256("abc") is the FIPS 180-2 test vector */
  char abc[65];
  gw_sha256_hex("abc", 3, abc);
  assert_string_equal(abc, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  char text[1024];
  snprintf(text, sizeof text,
           "# comment\n\nalice %s tenant identity,simple rate=5 burst=2  # trailing comment\n"
           "ops %s operator *\n",
           H_ALICE, H_OPS);
  gw_keyset *ks = parse_ok(text);
  assert_int_equal(ks->n, 2);
  const gw_key *a = gw_keys_find(ks, "alice-secret", 12);
  assert_non_null(a);
  assert_string_equal(a->id, "alice");
  assert_int_equal(a->role, GW_ROLE_TENANT);
  assert_false(a->all_models);
  assert_int_equal(a->n_models, 2);
  assert_true(gw_key_allows_model(a, "simple"));
  assert_false(gw_key_allows_model(a, "identity2"));
  assert_true(a->rate == 5 && a->burst == 2);
  const gw_key *o = gw_keys_find(ks, "ops-secret", 10);
  assert_non_null(o);
  assert_int_equal(o->role, GW_ROLE_OPERATOR);
  assert_true(o->all_models);
  assert_null(gw_keys_find(ks, "alice-secre", 11));
  assert_null(gw_keys_find(ks, H_ALICE, 64));  /* the hash itself is not a key */
  assert_null(gw_keys_find(ks, "", 0));
  gw_keyset_ref(ks);
  gw_keyset_unref(ks);
  gw_keyset_unref(ks);
  gw_keyset_unref(NULL);
}

static void test_bad_key_files_name_line_and_field(void **st) {
  (void)st;
  char h[65];
  gw_sha256_hex("k", 1, h);
  struct { const char *fmt; const char *want; } rows[] = {
      {"a %s tenant\n", "keys.txt:1: want ID SHA256 ROLE MODELS"},
      {"\n\na %s admin *\n", "keys.txt:3: role: 'admin' is not tenant or operator"},
      {"a abc tenant *\n%.0s", "keys.txt:1: sha256: want 64 hex digits"},
      {"a %1$s tenant *\na %1$s tenant *\n", "keys.txt:2: id: 'a' appears twice"},
      {"b@d %s tenant *\n", "keys.txt:1: id: 'b@d' must be"},
      {"a %s tenant m,,n\n", "keys.txt:1: models: 'm,,n' must be * or a comma list"},
      {"a %s tenant m rate=0\n", "keys.txt:1: 'rate=0': not a number in range"},
      {"a %s tenant m tokens=100\n", "keys.txt:1: 'tokens=100': options are rate=R"},
      {"a %s tenant m rate=x\n", "keys.txt:1: 'rate=x': not a number"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    char text[512];
    snprintf(text, sizeof text, rows[i].fmt, h);
    gw_keyset *ks = (gw_keyset *)1;
    cinfer_status *s = gw_keys_parse(text, strlen(text), "keys.txt", &ks);
    if (!s) fail_msg("row %zu: accepted", i);
    if (!strstr(cinfer_status_message(s), rows[i].want))
      fail_msg("row %zu: '%s' lacks '%s'", i, cinfer_status_message(s), rows[i].want);
    assert_null(ks);
    cinfer_status_free(s);
  }
  gw_keyset *ks = NULL;
  cinfer_status *s = gw_keys_load("/nonexistent/keys.txt", &ks);
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "/nonexistent/keys.txt"));
  cinfer_status_free(s);
  /* an empty file is valid: nobody gets in */
  ks = parse_ok("# nobody yet\n");
  assert_int_equal(ks->n, 0);
  gw_keyset_unref(ks);
}

static void test_access_decisions(void **st) {
  (void)st;
  bool pub[API_GROUP_COUNT] = {0};
  pub[API_HEALTH] = pub[API_METADATA] = pub[API_INFERENCE] = true;
  gw_key tenant = {.id = "t", .role = GW_ROLE_TENANT};
  char *models[] = {"mine"};
  tenant.models = models;
  tenant.n_models = 1;
  char msg[300];
  /* rows: group, listing, role, keys configured, bad credential, model -> status */
  struct { api_group g; bool listing; gw_role role; bool keys, bad; const char *model; int want; const char *in_msg; } rows[] = {
      /* no key file: public groups open, the rest needs an operator */
      {API_INFERENCE, false, GW_ROLE_ANON, false, false, "x", 0, ""},
      {API_HEALTH, false, GW_ROLE_ANON, false, false, "", 0, ""},
      {API_METADATA, true, GW_ROLE_ANON, false, false, "", 0, ""},
      {API_MODEL_REPOSITORY, false, GW_ROLE_ANON, false, false, "x", 403, "API group 'model-repository'"},
      {API_MODEL_REPOSITORY, true, GW_ROLE_ANON, false, false, "", 403, "model-repository"},
      {API_MODEL_CONFIG, false, GW_ROLE_ANON, false, false, "x", 403, "'model-config'"},
      {API_STATISTICS, false, GW_ROLE_ANON, false, false, "", 403, "'statistics'"},
      {API_TRACE, false, GW_ROLE_ANON, false, false, "", 403, "'trace'"},
      {API_LOGGING, false, GW_ROLE_ANON, false, false, "", 403, "'logging'"},
      {API_SHARED_MEMORY, false, GW_ROLE_ANON, false, false, "", 403, "'shared-memory'"},
      {API_GROUP_UNKNOWN, false, GW_ROLE_ANON, false, false, "", 403, "not a known API route"},
      {API_MODEL_REPOSITORY, false, GW_ROLE_OPERATOR, false, false, "x", 0, ""},
      {API_GROUP_UNKNOWN, false, GW_ROLE_OPERATOR, false, false, "", 0, ""},
      /* key file: anonymous is 401, whatever the group */
      {API_HEALTH, false, GW_ROLE_ANON, true, false, "", 401, "missing API key"},
      {API_INFERENCE, false, GW_ROLE_ANON, true, true, "x", 401, "unknown API key"},
      /* tenants: public groups on their models, listings filtered, nothing else */
      {API_INFERENCE, false, GW_ROLE_TENANT, true, false, "mine", 0, ""},
      {API_INFERENCE, false, GW_ROLE_TENANT, true, false, "theirs", 403, "API key 't' may not use model 'theirs'"},
      {API_METADATA, false, GW_ROLE_TENANT, true, false, "theirs", 403, "'theirs'"},
      {API_HEALTH, false, GW_ROLE_TENANT, true, false, "theirs", 403, "'theirs'"},
      {API_MODEL_REPOSITORY, true, GW_ROLE_TENANT, true, false, "", 0, ""},
      {API_MODEL_REPOSITORY, false, GW_ROLE_TENANT, true, false, "mine", 403, "operator credential"},
      {API_STATISTICS, false, GW_ROLE_TENANT, true, false, "mine", 403, "'statistics'"},
      {API_MODEL_REPOSITORY, false, GW_ROLE_OPERATOR, true, false, "theirs", 0, ""},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    gw_access_in in = {.group = rows[i].g, .listing = rows[i].listing, .role = rows[i].role,
                       .key_id = rows[i].role == GW_ROLE_TENANT ? "t" : NULL,
                       .keys = rows[i].keys, .bad_credential = rows[i].bad, .public_groups = pub,
                       .key = rows[i].role == GW_ROLE_TENANT ? &tenant : NULL,
                       .model = rows[i].model};
    int got = gw_access_decide(&in, msg, sizeof msg);
    if (got != rows[i].want || !strstr(msg, rows[i].in_msg))
      fail_msg("row %zu: got %d '%s', want %d '%s'", i, got, msg, rows[i].want, rows[i].in_msg);
  }
  /* a public group configured away is restricted too */
  pub[API_METADATA] = false;
  gw_access_in in = {.group = API_METADATA, .public_groups = pub, .model = ""};
  assert_int_equal(gw_access_decide(&in, msg, sizeof msg), 403);
}

static void test_cidr_and_client_identity(void **st) {
  (void)st;
  gw_cidr c[3];
  assert_true(gw_cidr_parse("10.0.0.0/8", &c[0]));
  assert_true(gw_cidr_parse("::1", &c[1]));
  assert_true(gw_cidr_parse("192.168.1.128/25", &c[2]));
  gw_cidr x;
  assert_false(gw_cidr_parse("10.0.0.0/33", &x));
  assert_false(gw_cidr_parse("10.0.0/8", &x));
  assert_false(gw_cidr_parse("host.example", &x));
  assert_false(gw_cidr_parse("::/129", &x));
  assert_false(gw_cidr_parse("1.2.3.4/", &x));
  assert_true(gw_cidr_match(&c[0], "10.255.0.1"));
  assert_false(gw_cidr_match(&c[0], "11.0.0.1"));
  assert_true(gw_cidr_match(&c[0], "::ffff:10.1.2.3"));  /* v4-mapped */
  assert_true(gw_cidr_match(&c[1], "::1"));
  assert_false(gw_cidr_match(&c[1], "::2"));
  assert_true(gw_cidr_match(&c[2], "192.168.1.200"));
  assert_false(gw_cidr_match(&c[2], "192.168.1.100"));

  char out[64];
  struct { const char *peer, *xff; size_t nt; const char *want; } rows[] = {
      /* no trusted proxies: the peer, whatever the header says */
      {"203.0.113.9", "1.1.1.1", 0, "203.0.113.9"},
      /* untrusted peer with a forged header: the peer */
      {"203.0.113.9", "1.1.1.1", 3, "203.0.113.9"},
      /* trusted proxy: the address it appended */
      {"10.0.0.5", "198.51.100.7", 3, "198.51.100.7"},
      /* a forged entry to the left of what our proxies appended is ignored */
      {"10.0.0.5", "1.1.1.1, 198.51.100.7, 10.0.0.9", 3, "198.51.100.7"},
      /* every entry is a proxy: the leftmost */
      {"10.0.0.5", "10.0.0.7,10.0.0.8", 3, "10.0.0.7"},
      /* garbage where the client should be: the peer */
      {"10.0.0.5", "not-an-ip", 3, "10.0.0.5"},
      {"::1", " 2001:db8::1 ", 3, "2001:db8::1"},
      {"10.0.0.5", "", 3, "10.0.0.5"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    gw_client_addr(rows[i].peer, rows[i].xff, strlen(rows[i].xff), c, rows[i].nt, out, sizeof out);
    if (strcmp(out, rows[i].want)) fail_msg("row %zu: got '%s', want '%s'", i, out, rows[i].want);
  }
}

static void test_filter_listing(void **st) {
  (void)st;
  gw_key k = {.id = "t", .role = GW_ROLE_TENANT};
  char *models[] = {"a", "c"};
  k.models = models;
  k.n_models = 2;
  const char idx[] = "[{\"name\":\"a\",\"version\":\"1\",\"state\":\"READY\"},{\"name\":\"b\"},{\"name\":\"c\"},{\"x\":1}]";
  size_t n = 0;
  char *o = gw_filter_listing(idx, sizeof idx - 1, false, &k, &n);
  assert_non_null(o);
  assert_string_equal(o, "[{\"name\":\"a\",\"version\":\"1\",\"state\":\"READY\"},{\"name\":\"c\"}]");
  assert_int_equal(n, strlen(o));
  free(o);
  const char oai[] = "{\"object\":\"list\",\"data\":[{\"id\":\"b\",\"object\":\"model\"},{\"id\":\"c\",\"object\":\"model\"}]}";
  o = gw_filter_listing(oai, sizeof oai - 1, true, &k, &n);
  assert_string_equal(o, "{\"object\":\"list\",\"data\":[{\"id\":\"c\",\"object\":\"model\"}]}");
  free(o);
  assert_null(gw_filter_listing("{\"x\":1}", 7, false, &k, &n));
  assert_null(gw_filter_listing("[1", 2, false, &k, &n));
  assert_null(gw_filter_listing("[]", 2, true, &k, &n));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keys_parse_and_find),
      cmocka_unit_test(test_bad_key_files_name_line_and_field),
      cmocka_unit_test(test_access_decisions),
      cmocka_unit_test(test_cidr_and_client_identity),
      cmocka_unit_test(test_filter_listing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
