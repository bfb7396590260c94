/* test_kserve_oom.c: allocation-failure torture (curl-style, as tests/unit/repo/
 * test_config_oom.c) for KServe request decoding: every allocation made while a body is
 * decoded (kserve_decode: the JSON arena, the input table, converted data, aligned copies
 * of binary inputs) and applied to a real request of a loaded model (kserve_apply:
 * inputs, outputs, parameters) is failed in turn. Each run must end in the normal result
 * or an "out of memory" error with code INTERNAL (HTTP 500), never another error, a crash
 * or a leak (LeakSanitizer checks leaks in the ASan build).
 *
 * malloc/calloc/realloc/strdup/strndup/posix_memalign are wrapped at link time
 * (-Wl,--wrap=...), which covers our static libraries. Only the test's own thread has
 * allocations failed: the server's idle worker threads are left alone. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cinfer/cinfer.h"
#include "kserve_cases.h"

#define TORTURE_WRAP_POSIX_MEMALIGN
#include "../core/torture.h"

static cinfer_server *server;
static cinfer_model *model;
static char repo[] = "/tmp/cinfer-kserve-oom-XXXXXX";

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  (void)state;
  assert_non_null(mkdtemp(repo));
  char p[256];
  snprintf(p, sizeof p, "%s/m", repo);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/m/1", repo);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/m/config.pbtxt", repo);
  write_file(p, kserve_model_config);
  cinfer_server_options o = {.model_repository = repo, .threads = 1};
  cinfer_status *st = cinfer_server_create(&o, &server);
  if (st) fail_msg("%s", cinfer_status_message(st));
  if ((st = cinfer_server_model_acquire(server, "m", 0, &model))) fail_msg("%s", cinfer_status_message(st));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  cinfer_model_release(model);
  cinfer_server_destroy(server);
  char p[256];
  snprintf(p, sizeof p, "%s/m/config.pbtxt", repo);
  unlink(p);
  snprintf(p, sizeof p, "%s/m/1", repo);
  rmdir(p);
  snprintf(p, sizeof p, "%s/m", repo);
  rmdir(p);
  rmdir(repo);
  return 0;
}

static char *copy_unfailed(const char *s) {
  long saved = torture_budget;
  torture_budget = -1;
  char *r = __real_strdup(s);
  torture_budget = saved;
  return r;
}

/* True when st is the out-of-memory error a failed allocation must give (then freed). */
static bool is_oom(cinfer_status *st) {
  bool oom = cinfer_status_code(st) == CINFER_INTERNAL && strstr(cinfer_status_message(st), "out of memory");
  if (oom) cinfer_status_free(st);
  return oom;
}

/* One decode + apply; returns what it produced (the request's description, or the error
 * message), or NULL with *oom set. */
static char *run_once(const char *body, size_t len, int64_t hl, bool *oom) {
  *oom = false;
  kserve_limits lim = {.max_tensor_elements = 1000, .max_json_depth = 32};
  kserve_request *k = NULL;
  cinfer_status *st = kserve_decode(body, len, hl, &lim, &k);
  if (st) {
    assert_null(k);
    if (is_oom(st)) return *oom = true, NULL;
    char *r = copy_unfailed(cinfer_status_message(st));
    cinfer_status_free(st);
    return r;
  }
  char desc[1024];
  kserve_describe(k, desc, sizeof desc); /* before apply moves the converted buffers */
  cinfer_request *r = NULL;
  st = cinfer_request_create(model, &r);
  if (!st) st = kserve_apply(k, r);
  cinfer_request_release(r);
  kserve_request_free(k);
  if (st) {
    if (is_oom(st)) return *oom = true, NULL;
    char msg[1200];
    snprintf(msg, sizeof msg, "%s -> %s", desc, cinfer_status_message(st));
    cinfer_status_free(st);
    return copy_unfailed(msg);
  }
  return copy_unfailed(desc);
}

static void torture(const char *name, const char *body, size_t len, int64_t hl, const char *want_desc) {
  bool oom;
  torture_budget = -1;
  char *want = run_once(body, len, hl, &oom);
  assert_false(oom);
  assert_non_null(want);
  if (want_desc && strcmp(want, want_desc)) fail_msg("%s: '%s', want '%s'", name, want, want_desc);
  long n;
  for (n = 0;; n++) {
    torture_budget = n;
    torture_failures = 0;
    char *got = run_once(body, len, hl, &oom);
    torture_budget = -1;
    if (torture_failures == 0) { /* the run needed fewer than n allocations: done */
      assert_false(oom);
      assert_string_equal(got, want);
      free(got);
      break;
    }
    if (!oom) {
      if (!got) fail_msg("%s: allocation %ld failed but no error was reported", name, n);
      if (strcmp(got, want)) /* a failure that was recovered from must not change the result */
        fail_msg("%s: allocation %ld failed: '%s', want '%s'", name, n, got, want);
    }
    free(got);
  }
  assert_true(n >= 3); /* the pass really allocates */
  free(want);
}

static void test_torture_cases(void **state) {
  (void)state;
  torture_armed = true; /* this thread only: the tortured code runs here */
  for (size_t c = 0; c < sizeof KSERVE_CASES / sizeof *KSERVE_CASES; c++) {
    const kserve_case *kc = &KSERVE_CASES[c];
    size_t len;
    int64_t hl;
    char *body = kserve_case_body(kc, &len, &hl);
    torture(kc->name, body, len, hl, kc->describe);
    free(body);
  }
}

/* Bodies that fail after allocating: the error path must free what was built. */
static void test_torture_errors(void **state) {
  (void)state;
  torture_armed = true; /* this thread only: the tortured code runs here */
  static const char *const bodies[] = {
      /* fails in decode, after the first input's data was converted */
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,2]},"
      "{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"abc\"]},"
      "{\"name\":\"I8\",\"datatype\":\"INT8\",\"shape\":[2],\"data\":[1]}]}",
      /* decodes; apply fails on the unknown output after adding every input */
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,2],\"data\":[1,2]},"
      "{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"abc\"]}],"
      "\"outputs\":[{\"name\":\"OUTPUT0\"},{\"name\":\"NOPE\"}],\"parameters\":{\"p\":\"v\"}}",
      /* decodes; apply fails on a parameter after the string one */
      "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,1],\"data\":[1]}],"
      "\"parameters\":{\"a\":\"x\",\"priority\":-1}}",
      /* decodes; apply fails on the second input's type */
      "{\"inputs\":[{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"abc\"]},"
      "{\"name\":\"INPUT0\",\"datatype\":\"INT8\",\"shape\":[1,1],\"data\":[1]}]}",
  };
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    char name[32];
    snprintf(name, sizeof name, "error body %zu", i);
    torture(name, bodies[i], strlen(bodies[i]), -1, NULL);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_torture_cases),
                                     cmocka_unit_test(test_torture_errors)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
