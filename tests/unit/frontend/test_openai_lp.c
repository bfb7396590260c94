/* test_openai_lp.c: the streamed completions logprobs are written directly (openai_lp.c);
 * before, each chunk's arrays went through a cJSON parse and print of entries written with
 * cbuf_json_string_utf8 and "%.6g", and the whole answer still does. The two must agree byte
 * for byte: quotes, backslashes, every control character, invalid UTF-8 (a byte-fallback
 * token's lone bytes), a NUL byte, and numbers of every size, each against that round trip
 * and some against literal text. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <cmocka.h>

#include "frontend/openai_lp.h"

/* What the old path printed for a token text, and the characters it counted. */
static char *old_string(const char *s, size_t n, int *chars) {
  cbuf t = {0};
  cbuf_json_string_utf8(&t, s, n);
  cJSON *v = cJSON_ParseWithLength(t.data, t.len);
  assert_non_null(v);
  char *out = cJSON_PrintUnformatted(v);
  *chars = 0;
  for (const char *p = cJSON_GetStringValue(v); *p; p++) *chars += ((unsigned char)*p & 0xC0) != 0x80;
  cJSON_Delete(v);
  cbuf_free(&t);
  return out;
}

static char *old_number(float f) {
  char t[64];
  snprintf(t, sizeof t, "%.6g", f);
  cJSON *v = cJSON_Parse(t);
  assert_non_null(v);
  char *out = cJSON_PrintUnformatted(v);
  cJSON_Delete(v);
  return out;
}

static void same_string(const char *s, size_t n) {
  int want_chars, chars = 3; /* grows from what it was */
  char *want = old_string(s, n, &want_chars);
  cbuf b = {0};
  cbuf_puts(&b, "x");
  oai_lp_string(&b, s, n, &chars);
  assert_false(b.oom);
  if (strcmp(b.data + 1, want)) fail_msg("string of %zu bytes: %s, before %s", n, b.data + 1, want);
  assert_int_equal(chars, 3 + want_chars);
  free(want);
  cbuf_free(&b);
}

static void expect_text(const char *s, size_t n, const char *text, int chars) {
  same_string(s, n);
  cbuf b = {0};
  int k = 0;
  oai_lp_string(&b, s, n, &k);
  assert_string_equal(b.data, text);
  assert_int_equal(k, chars);
  cbuf_free(&b);
}

static void test_special_strings(void **st) {
  (void)st;
  expect_text("\"", 1, "\"\\\"\"", 1);
  expect_text("\\", 1, "\"\\\\\"", 1);
  expect_text("a\"b\\c", 5, "\"a\\\"b\\\\c\"", 5);
  expect_text("\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\"", 5);
  expect_text("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"", 3);
  /* a byte-fallback token: one byte of a UTF-8 sequence, alone or cut short */
  expect_text("\xff", 1, "\"\xef\xbf\xbd\"", 1);
  expect_text("\xe2\x82", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"", 2);
  expect_text(" \xc3\xa9\xf0\x9f\x98\x80", 7, "\" \xc3\xa9\xf0\x9f\x98\x80\"", 3);
  /* the text the escapes look like, as text */
  expect_text("\\u0008\\u0000", 12, "\"\\\\u0008\\\\u0000\"", 12);
  /* a NUL byte ends a cJSON string */
  expect_text("a\0b", 3, "\"a\"", 1);
  expect_text("\0", 1, "\"\"", 0);
  expect_text("", 0, "\"\"", 0);
  for (int c = 0; c < 256; c++) {
    char s[3] = {'x', (char)c, 'y'};
    same_string(s, 3);
  }
}

static void test_random_strings(void **st) {
  (void)st;
  static const char pool[] = {'a', ' ', '"', '\\', 'u', '0', '\b', '\f', '\n', '\x01', '\x1f',
                              '\x7f', (char)0x80, (char)0xbf, (char)0xc3, (char)0xa9, (char)0xe2,
                              (char)0x82, (char)0xac, (char)0xf0, (char)0x9f, (char)0xff, 0};
  uint64_t r = 12345;
  for (int i = 0; i < 20000; i++) {
    char s[12];
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = (size_t)(r >> 60) % sizeof s;
    for (size_t k = 0; k < n; k++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      s[k] = pool[(r >> 33) % sizeof pool];
    }
    same_string(s, n);
  }
}

static void same_number(float f, const char *text) {
  char *want = old_number(f);
  cbuf b = {0};
  oai_lp_number(&b, f);
  if (strcmp(b.data, want)) fail_msg("%.9g: %s, before %s", (double)f, b.data, want);
  if (text) assert_string_equal(b.data, text);
  free(want);
  cbuf_free(&b);
}

static void test_numbers(void **st) {
  (void)st;
  same_number(0.0f, "0");
  same_number(-0.0f, "-0");
  same_number(-1.0f, "-1");
  same_number(-2.5f, "-2.5");
  same_number(-0.123456789f, "-0.123457");
  same_number(-1e-5f, "-1e-05");
  same_number(-3.0e-12f, "-3e-12");
  same_number(-123456.7f, "-123457");
  same_number(-1234567.0f, "-1234570");
  same_number(-3.5e9f, "-3500000000");
  same_number(-1e20f, "-1e+20");
  same_number(-FLT_MAX, NULL);
  same_number(FLT_MIN, NULL);
  same_number(1e-45f, NULL); /* subnormal */
  uint64_t r = 99;
  for (int i = 0; i < 100000; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = (uint32_t)(r >> 32);
    float f;
    memcpy(&f, &bits, sizeof f);
    if (isfinite(f)) same_number(f, NULL);
  }
  /* "%.6g" wrote -inf or nan, which no JSON reader took (the chunk lost its arrays);
   * now the value is null, as cJSON prints a non-finite number */
  cbuf b = {0};
  oai_lp_number(&b, -INFINITY);
  oai_lp_number(&b, NAN);
  assert_string_equal(b.data, "nullnull");
  cbuf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_special_strings),
      cmocka_unit_test(test_random_strings),
      cmocka_unit_test(test_numbers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
