/* test_server_oom.c: allocation-failure torture of model load (curl-style, as
 * tests/unit/repo/test_config_oom.c does for the config layer). Every allocation that
 * cinfer_server_load_model makes on the calling thread (repository scan, config parse or
 * JSON override, model, scheduler, metrics, backend load) is failed in turn; each run must
 * end either exactly as the normal load does (READY, the same metric series) or with an
 * "out of memory" status and the model not READY, and the next load must work (no state
 * left half-made, no leak: LeakSanitizer checks that in the ASan build).
 *
 * Only the test thread's allocations are counted: the server's own threads (reaper,
 * instance workers) run unfailed, so a failure is always one the load path must handle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <sched.h>

#include "server_test_util.h"

#include "../core/torture.h"

static const char *const CFG =
    "name: \"t\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "dynamic_batching { preferred_batch_size: [ 2, 4 ] preserve_ordering: true priority_levels: 3\n"
    "  default_priority_level: 2\n"
    "  priority_queue_policy { key: 3 value: { max_queue_size: 5 } } }\n"
    "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    "parameters { key: \"a\" value: { string_value: \"b\" } }\n";

static const char *const JSON =
    "{\"name\":\"t\",\"backend\":\"identity\",\"max_batch_size\":4,"
    "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[\"-1\"]}],"
    "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
    "\"dynamic_batching\":{\"priority_levels\":2,\"default_priority_level\":1,"
    "\"priority_queue_policy\":{\"2\":{\"max_queue_size\":3}}},"
    "\"instance_group\":[{\"count\":2,\"kind\":\"KIND_CPU\"}],"
    "\"parameters\":{\"a\":{\"string_value\":\"b\"}}}";

/* A sequence model (server/sequence.c parses its sequence_batching): controls of every
 * form, a string CORRID, an implicit state with an initial_state. */
static const char *const SEQ_CFG =
    "name: \"t\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "sequence_batching { max_sequence_idle_microseconds: 5000000\n"
    "  direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 }\n"
    "  control_input [ { name: \"START\" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },\n"
    "    { name: \"END\" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },\n"
    "    { name: \"READY\" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },\n"
    "    { name: \"CORRID\" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]\n"
    "  state [ { input_name: \"S\" output_name: \"S_OUT\" data_type: TYPE_FP32 dims: [ 2 ]\n"
    "            initial_state { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: \"z\" } } ] }\n"
    "instance_group [ { count: 2 kind: KIND_CPU } ]\n";

static const char *const SEQ_JSON =
    "{\"name\":\"t\",\"backend\":\"identity\",\"max_batch_size\":4,"
    "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[\"-1\"]}],"
    "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
    "\"sequence_batching\":{\"max_sequence_idle_microseconds\":\"5000000\","
    "\"oldest\":{\"max_candidate_sequences\":4,\"preferred_batch_size\":[2]},"
    "\"control_input\":[{\"name\":\"START\",\"control\":[{\"kind\":\"CONTROL_SEQUENCE_START\","
    "\"int32_false_true\":[0,1]}]},{\"name\":\"READY\",\"control\":[{\"kind\":"
    "\"CONTROL_SEQUENCE_READY\",\"bool_false_true\":[false,true]}]},{\"name\":\"CORRID\",\"control\":[{\"kind\":"
    "\"CONTROL_SEQUENCE_CORRID\",\"data_type\":\"TYPE_UINT64\"}]}],"
    "\"state\":[{\"input_name\":\"S\",\"output_name\":\"S_OUT\",\"data_type\":\"TYPE_INT32\","
    "\"dims\":[\"3\"]}]},"
    "\"instance_group\":[{\"count\":2,\"kind\":\"KIND_CPU\"}]}";

static void torture_load(const char *cfg, const char *json) {
  char *repo = tu_repo();
  tu_model(repo, "t", 1, cfg);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  /* the reference run */
  cinfer_status *st = cinfer_server_load_model(s, "t", json);
  if (st) fail_msg("reference load: %s", cinfer_status_message(st));
  char *want = tu_model_series(s, "t");
  assert_non_null(strstr(want, "cinfer_request_success_total"));
  tu_unload_wait(s, "t");
  long n;
  for (n = 0;; n++) {
    torture_failures = 0;
    torture_budget = n;
    torture_armed = true;
    st = cinfer_server_load_model(s, "t", json);
    torture_armed = false;
    torture_budget = -1;
    const char *state = tu_state(s, "t", 1, NULL, 0);
    if (!st) {
      assert_string_equal(state, "READY");
      char *got = tu_model_series(s, "t");
      if (strcmp(got, want))
        fail_msg("allocation %ld failed, the load succeeded but its metrics differ:\n%s\nwant:\n%s", n, got, want);
      free(got);
      tu_unload_wait(s, "t");
    } else {
      if (!strstr(cinfer_status_message(st), "out of memory"))
        fail_msg("allocation %ld failed: the load reported '%s', not out of memory", n,
                 cinfer_status_message(st));
      assert_string_not_equal(state, "READY");
      cinfer_status_free(st);
    }
    if (torture_failures == 0) break; /* the load needed fewer than n allocations: done */
  }
  print_message("%s: %ld allocations failed in turn\n", json ? "config JSON" : "config.pbtxt", n);
  assert_true(n > 20); /* the load really allocates */
  /* And the server still loads and serves it. */
  assert_null(cinfer_server_load_model(s, "t", json));
  assert_string_equal(tu_state(s, "t", 1, NULL, 0), "READY");
  free(want);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

static void test_torture_load_from_file(void **state) {
  (void)state;
  torture_load(CFG, NULL);
}

static void test_torture_load_with_config_json(void **state) {
  (void)state;
  torture_load(CFG, JSON);
}

static void test_torture_load_sequence_model(void **state) {
  (void)state;
  torture_load(SEQ_CFG, NULL);
  torture_load(CFG, SEQ_JSON);
}

int main(void) {
  cJSON_Hooks hooks = {torture_hook_malloc, torture_hook_free};
  cJSON_InitHooks(&hooks);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torture_load_from_file),
      cmocka_unit_test(test_torture_load_with_config_json),
      cmocka_unit_test(test_torture_load_sequence_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
