/* test_core.c: status objects, dtype names, tensor byte-size checks, number formatting. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "cinfer/types.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/numfmt.h"

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

/* The fast shortest-text paths against the printf/strtod loops, byte for byte: random
 * bit patterns (all exponents, and a bias toward the magnitudes models produce), every
 * power of two, values next to powers of ten, subnormals, signed zeros and non-finite. */
static uint64_t xs = 88172645463325252ull;
static uint64_t xrand(void) { xs ^= xs << 13; xs ^= xs >> 7; xs ^= xs << 17; return xs; }

static void check_f(float f) {
  char a[NUMFMT_BUF], b[NUMFMT_BUF];
  size_t na = numfmt_float(a, f), nb = numfmt_float_ref(b, f);
  if (na != nb || strcmp(a, b)) fail_msg("float %a: fast '%s' reference '%s'", (double)f, a, b);
}
static void check_d(double d) {
  char a[NUMFMT_BUF], b[NUMFMT_BUF];
  size_t na = numfmt_double(a, d), nb = numfmt_double_ref(b, d);
  if (na != nb || strcmp(a, b)) fail_msg("double %a: fast '%s' reference '%s'", d, a, b);
}

static void test_numfmt(void **s) {
  (void)s;
  char buf[NUMFMT_BUF];
  assert_int_equal(numfmt_float(buf, 0.5f), 3), assert_string_equal(buf, "0.5");
  numfmt_float(buf, 0.1f), assert_string_equal(buf, "0.1");
  numfmt_float(buf, -0.0f), assert_string_equal(buf, "-0");
  numfmt_float(buf, 1e9f), assert_string_equal(buf, "1e+09");
  numfmt_float(buf, 123456792.0f), assert_string_equal(buf, "1.2345679e+08");
  numfmt_float(buf, 1.0f / 3.0f), assert_string_equal(buf, "0.33333334");
  numfmt_double(buf, 0.1), assert_string_equal(buf, "0.1");
  numfmt_double(buf, 1.0 / 3.0), assert_string_equal(buf, "0.3333333333333333");
  numfmt_double(buf, 1e-7), assert_string_equal(buf, "1e-07");
  for (int i = 0; i < 50000; i++) {
    uint32_t u = (uint32_t)xrand();
    if (i % 3 == 0) u = (u & 0x807fffffu) | (uint32_t)(100 + xrand() % 60) << 23;
    float f;
    memcpy(&f, &u, 4);
    check_f(f);
    uint64_t v = xrand();
    if (i % 2 == 0) v = (v & 0x800fffffffffffffull) | (uint64_t)(983 + xrand() % 80) << 52;
    if (i % 5 == 0) v &= ~0xffffffffull; /* short mantissas: few digits */
    double d;
    memcpy(&d, &v, 8);
    check_d(d);
  }
  for (int ex = -149; ex <= 127; ex++) {
    float f = ldexpf(1.0f, ex);
    check_f(f), check_f(nextafterf(f, 0)), check_f(nextafterf(f, INFINITY));
  }
  for (int ex = -1074; ex <= 1023; ex++) check_d(ldexp(1.0, ex));
  for (int k = -45; k <= 38; k++) {
    float f = (float)pow(10, k);
    check_f(f), check_f(nextafterf(f, 0)), check_f(nextafterf(f, INFINITY));
    double d = pow(10, k);
    check_d(d), check_d(nextafter(d, 0)), check_d(nextafter(d, INFINITY));
  }
  const float sf[] = {0.0f, -0.0f, 1.4e-45f, FLT_MIN, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof sf / sizeof *sf; i++) check_f(sf[i]);
  const double sd[] = {0.0, -0.0, 4.9e-324, DBL_MIN, DBL_MAX, -DBL_MAX, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof sd / sizeof *sd; i++) check_d(sd[i]);
}

/* cbuf: appends keep a terminated string, JSON escaping, invalid UTF-8 becomes U+FFFD,
 * take hands over the bytes, and a failed allocation sticks (later appends are no-ops). */
static void test_buf(void **s) {
  (void)s;
  cbuf b = {0};
  cbuf_puts(&b, "a");
  cbuf_printf(&b, "%d-%s", 42, "x");
  for (int i = 0; i < 100; i++) cbuf_printf(&b, "%0300d", i); /* forces several regrowths */
  assert_int_equal(b.len, 5 + 100 * 300);
  assert_int_equal(strlen(b.data), b.len);
  assert_memory_equal(b.data, "a42-x", 5);
  cbuf_free(&b);
  cbuf_json_string(&b, "q\"\\\n\x01z", 6);
  assert_string_equal(b.data, "\"q\\\"\\\\\\n\\u0001z\"");
  cbuf_free(&b);
  cbuf_json_string_utf8(&b, "\xc3\xa9\xff\xe2\x82", 5);
  assert_string_equal(b.data, "\"\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  char *t = cbuf_take(&b);
  assert_non_null(t);
  assert_null(b.data);
  free(t);
  t = cbuf_take(&b); /* empty: "" */
  assert_string_equal(t, "");
  free(t);
  cbuf_puts(&b, "kept");
  b.oom = true; /* as after a failed realloc */
  cbuf_puts(&b, "dropped");
  assert_int_equal(b.len, 4);
  assert_null(cbuf_take(&b));
  assert_null(b.data);
  assert_false(cbuf_reserve(&b, SIZE_MAX - 8)); /* overflow is an allocation failure */
  assert_true(b.oom);
  cbuf_free(&b);
}

/* The clocks move forward and agree with each other; deadlines land in the future. */
static void test_clock(void **s) {
  (void)s;
  uint64_t a = clock_now_ns(), ms = clock_now_ms();
  assert_true(clock_now_ns() >= a);
  assert_true(ms >= a / 1000000u && ms <= clock_now_ns() / 1000000u);
  assert_true(clock_unix_ms() > 1700000000000ull);
  struct timespec d = clock_abs_after_ms(1500), now;
  clock_gettime(CLOCK_REALTIME, &now);
  double dt = (double)(d.tv_sec - now.tv_sec) + (double)(d.tv_nsec - now.tv_nsec) * 1e-9;
  assert_true(dt > 1.0 && dt <= 1.5);
  assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
}

/* Issue 15: out of memory answered 429 (RESOURCE_EXHAUSTED invites a retry storm). Every
 * OOM is built by cinfer_status_oom: INTERNAL, HTTP 500. */
static void test_status_oom(void **state) {
  (void)state;
  cinfer_status *st = cinfer_status_oom("kv");
  assert_int_equal(cinfer_status_code(st), CINFER_INTERNAL);
  assert_int_equal(cinfer_code_http_status(cinfer_status_code(st)), 500);
  assert_string_equal(cinfer_status_message(st), "kv: out of memory");
  cinfer_status_free(st);
  st = cinfer_status_oom(NULL);
  assert_int_equal(cinfer_status_code(st), CINFER_INTERNAL);
  assert_string_equal(cinfer_status_message(st), "out of memory");
  cinfer_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status),
      cmocka_unit_test(test_status_oom),
      cmocka_unit_test(test_dtype),
      cmocka_unit_test(test_tensor_check),
      cmocka_unit_test(test_numfmt),
      cmocka_unit_test(test_buf),
      cmocka_unit_test(test_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
