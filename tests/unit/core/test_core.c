/* test_core.c: status objects, dtype names and tensor byte-size checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "cinfer/types.h"

static void test_status(void **s) {
  assert_null(NULL);
  assert_int_equal(cinfer_status_code(NULL), CINFER_OK);
  cinfer_status *st = cinfer_status_new(CINFER_NOT_FOUND, "model '%s'", "x");
  assert_int_equal(cinfer_status_code(st), CINFER_NOT_FOUND);
  assert_int_equal(cinfer_code_http_status(cinfer_status_code(st)), 404);
  st = cinfer_status_prefix(st, "load %d", 3);
  assert_string_equal(cinfer_status_message(st), "load 3: model 'x'");
  cinfer_status_free(st);
  cinfer_status_free(NULL);
}

static void test_dtype(void **s) {
  assert_int_equal(cinfer_dtype_parse("FP32", 4), CINFER_TYPE_FP32);
  assert_int_equal(cinfer_dtype_parse("TYPE_STRING", 11), CINFER_TYPE_BYTES);
  assert_int_equal(cinfer_dtype_parse("TYPE_BF16", 9), CINFER_TYPE_BF16);
  assert_int_equal(cinfer_dtype_parse("FP3", 3), CINFER_TYPE_INVALID);
  assert_int_equal(cinfer_dtype_size(CINFER_TYPE_FP16), 2);
  assert_string_equal(cinfer_dtype_config_name(CINFER_TYPE_BYTES), "TYPE_STRING");
}

static void test_tensor_check(void **s) {
  float f[6] = {0};
  cinfer_tensor t = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {2, 3},
                     .data = f, .byte_size = sizeof f};
  assert_null(cinfer_tensor_check(&t));
  t.byte_size = 20;
  cinfer_status *st = cinfer_tensor_check(&t);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "need 24 bytes, got 20"));
  cinfer_status_free(st);
  t.shape[0] = INT64_MAX; /* overflow */
  st = cinfer_tensor_check(&t);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  cinfer_status_free(st);

  const unsigned char b[] = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
  cinfer_tensor bt = {.name = "s", .dtype = CINFER_TYPE_BYTES, .ndim = 1, .shape = {2},
                      .data = b, .byte_size = sizeof b};
  assert_null(cinfer_tensor_check(&bt));
  bt.byte_size = 9; /* second length truncated */
  st = cinfer_tensor_check(&bt);
  assert_non_null(strstr(cinfer_status_message(st), "missing its length"));
  cinfer_status_free(st);
  bt.shape[0] = 1; bt.byte_size = sizeof b; /* left over */
  st = cinfer_tensor_check(&bt);
  assert_non_null(strstr(cinfer_status_message(st), "left over"));
  cinfer_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status),
      cmocka_unit_test(test_dtype),
      cmocka_unit_test(test_tensor_check),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
