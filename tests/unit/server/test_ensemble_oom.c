/* test_ensemble_oom.c: allocation-failure torture of ensembles (as test_server_oom.c does
 * for a model load). Every allocation made on the test thread is failed in turn
 *   - while an ensemble loads (its plan, its checks against the loaded step models, its
 *     dispatcher, its metrics): each run ends READY with the same metric series, or with
 *     an "out of memory" status and the ensemble not READY;
 *   - while an ensemble request is submitted (the run, the first step's child request,
 *     its inputs and outputs): each run either refuses the submission with "out of
 *     memory" or answers through the callback, correctly or with "out of memory".
 * LeakSanitizer (ASan build) checks that nothing leaks on any of those paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <sched.h>

#include "server_test_util.h"

#include "../core/torture.h"

static const char *const STEP_CFG =
    "name: \"%s\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n";

static const char *const ENS_CFG =
    "name: \"t\"\nplatform: \"ensemble\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "ensemble_scheduling { step [\n"
    "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"INPUT0\" } output_map { key: \"OUTPUT0\" value: \"m\" } },\n"
    "  { model_name: \"b\" input_map { key: \"INPUT0\" value: \"m\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n";

static char *make_repo(void) {
  char *repo = tu_repo();
  char text[1024];
  snprintf(text, sizeof text, STEP_CFG, "a");
  tu_model(repo, "a", 1, text);
  snprintf(text, sizeof text, STEP_CFG, "b");
  tu_model(repo, "b", 1, text);
  tu_model(repo, "t", 1, ENS_CFG);
  return repo;
}

static void test_torture_ensemble_load(void **state) {
  (void)state;
  char *repo = make_repo();
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  cinfer_status *st = cinfer_server_load_model(s, "t", NULL); /* loads a and b too */
  if (st) fail_msg("reference load: %s", cinfer_status_message(st));
  char *want = tu_model_series(s, "t");
  assert_non_null(strstr(want, "cinfer_request_success_total"));
  tu_unload_wait(s, "t"); /* a and b stay loaded */
  long n;
  for (n = 0;; n++) {
    torture_failures = 0;
    torture_budget = n;
    torture_armed = true;
    st = cinfer_server_load_model(s, "t", NULL);
    torture_armed = false;
    torture_budget = -1;
    const char *stt = tu_state(s, "t", 1, NULL, 0);
    if (!st) {
      assert_string_equal(stt, "READY");
      char *got = tu_model_series(s, "t");
      if (strcmp(got, want)) fail_msg("allocation %ld failed, loaded with other metrics:\n%s", n, got);
      free(got);
      tu_unload_wait(s, "t");
    } else {
      if (!strstr(cinfer_status_message(st), "out of memory"))
        fail_msg("allocation %ld failed: the load reported '%s'", n, cinfer_status_message(st));
      assert_string_not_equal(stt, "READY");
      cinfer_status_free(st);
    }
    if (torture_failures == 0) break;
  }
  print_message("ensemble load: %ld allocations failed in turn\n", n);
  assert_true(n > 20);
  assert_null(cinfer_server_load_model(s, "t", NULL));
  free(want);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

static void test_torture_ensemble_request(void **state) {
  (void)state;
  char *repo = make_repo();
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, "t", NULL));
  long n;
  int ok = 0, oom = 0;
  for (n = 0;; n++) {
    cinfer_model *m = NULL;
    assert_null(cinfer_server_model_acquire(s, "t", -1, &m));
    cinfer_request *r = NULL;
    assert_null(cinfer_request_create(m, &r));
    cinfer_model_release(m);
    float x[2] = {(float)n, 1};
    cinfer_tensor t = {.name = "INPUT0", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {1, 2},
                       .data = x, .byte_size = 8};
    assert_null(cinfer_request_add_input(r, &t));
    tu_call c;
    tu_call_init(&c);
    cinfer_request_set_callback(r, tu_cb, &c);
    torture_failures = 0;
    torture_budget = n;
    torture_armed = true;
    cinfer_status *st = cinfer_server_infer_async(s, r);
    torture_armed = false;
    torture_budget = -1;
    if (st) {
      if (!strstr(cinfer_status_message(st), "out of memory"))
        fail_msg("allocation %ld failed: submission refused with '%s'", n, cinfer_status_message(st));
      cinfer_status_free(st);
      oom++;
    } else {
      assert_true(tu_call_wait(&c));
      if (c.code == CINFER_OK) {
        assert_int_equal(c.n_out, 2);
        assert_true(c.out[0] == (float)n && c.out[1] == 1);
        ok++;
      } else if (!strstr(c.msg, "out of memory")) {
        fail_msg("allocation %ld failed: the request answered '%s'", n, c.msg);
      } else {
        oom++;
      }
    }
    cinfer_request_release(r);
    if (torture_failures == 0) break;
  }
  print_message("ensemble request: %ld allocations failed in turn (%d answered, %d out of memory)\n",
                n, ok, oom);
  assert_true(n > 5);
  assert_true(oom > 0);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

int main(void) {
  cJSON_Hooks hooks = {torture_hook_malloc, torture_hook_free};
  cJSON_InitHooks(&hooks);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_torture_ensemble_load),
      cmocka_unit_test(test_torture_ensemble_request),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
