/* test_config_oom.c: allocation-failure torture for the config layer (curl-style). Every
 * allocation made by the parser, the mapper and the JSON printer is failed in turn; each
 * run must end in either the normal result or an "out of memory" status (never another
 * error, a crash or a leak: LeakSanitizer checks the latter in the ASan build).
 *
 * malloc/calloc/realloc/strdup/strndup are wrapped at link time (-Wl,--wrap=...), which
 * covers our static libraries; cJSON allocates through hooks set to the same counter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repo/config.h"

#include "../core/torture.h"

static char *read_data(const char *rel, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", CINFER_CONFIG_DIR, rel);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* One full pass; returns the JSON (or the error message) for comparison. */
static char *run_once(const char *name, const char *text, size_t len, bool *oom) {
  cinfer_model_config *c = NULL;
  cinfer_status *st = model_config_parse(name, text, len, &c);
  char *result = NULL;
  *oom = false;
  if (st) {
    if (cinfer_status_code(st) == CINFER_INTERNAL && !strcmp(cinfer_status_message(st), "out of memory")) {
      *oom = true;
    } else {
      long saved = torture_budget;
      torture_budget = -1;
      result = __real_strdup(cinfer_status_message(st));
      torture_budget = saved;
    }
    assert_null(c);
    cinfer_status_free(st);
    return result;
  }
  st = model_config_validate(c);
  if (st) {
    *oom = cinfer_status_code(st) == CINFER_INTERNAL;
    cinfer_status_free(st);
  }
  if (!*oom) {
    result = model_config_to_json(c);
    if (!result) *oom = true;
  }
  model_config_free(c);
  return result;
}

static void torture(const char *rel) {
  size_t len;
  char *text = read_data(rel, &len);
  bool oom;
  torture_budget = -1;
  char *want = run_once(rel, text, len, &oom);
  assert_false(oom);
  assert_non_null(want);
  long n;
  for (n = 0;; n++) {
    torture_budget = n;
    torture_failures = 0;
    char *got = run_once(rel, text, len, &oom);
    torture_budget = -1;
    if (torture_failures == 0) { /* the run needed fewer than n allocations: done */
      assert_false(oom);
      assert_string_equal(got, want);
      free(got);
      break;
    }
    if (!oom) {
      if (!got) fail_msg("%s: allocation %ld failed but no error was reported", rel, n);
      assert_string_equal(got, want); /* a failure that was recovered from must not change the result */
    }
    free(got);
  }
  assert_true(n > 10); /* the pass really allocates */
  free(want);
  free(text);
}

static void test_torture_corpus(void **state) {
  (void)state;
  static const char *files[] = {
      "densenet_onnx.pbtxt", "resnet50_dynamic.pbtxt", "face_detect_priority.pbtxt",
      "ensemble_face_pipeline.pbtxt", "sequence_stateful.pbtxt", "bert_tokenizer_python.pbtxt",
      "warmup_classifier.pbtxt", "tensorrt_profiles.pbtxt", "versioned_cached.pbtxt",
      "syntax_variants.pbtxt", "llm_decoupled.pbtxt", "ragged_batch_io.pbtxt",
      "identity_minimal.pbtxt", "bad/duplicate_input.pbtxt", "bad/unclosed_message.pbtxt"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) torture(files[i]);
}

int main(void) {
  torture_armed = true; /* single-threaded: the main thread is the tortured one */
  cJSON_Hooks hooks = {torture_hook_malloc, torture_hook_free};
  cJSON_InitHooks(&hooks);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_torture_corpus)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
