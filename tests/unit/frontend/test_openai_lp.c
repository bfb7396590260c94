/* test_openai_lp.c: every logprobs value of the OpenAI answers is written directly
 * (openai_lp.c). Before, the arrays went through a cJSON parse and print of entries written
 * with cbuf_json_string_utf8 and "%.6g"; the writer prints what that round trip printed
 * (quotes, backslashes, every control character, invalid UTF-8: a byte-fallback token's lone
 * bytes; numbers of every size), checked against it, except where the round trip was wrong:
 * a NUL byte cut the text (now \u0000, the text whole), and -inf or NaN made the entries
 * unreadable (now -9999, vLLM's floor, and null). The completions arrays (oai_lp_list) are
 * read back with cJSON. */
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

/* The old round trip, piece by piece between NUL bytes, which are now \u0000 (a character). */
static char *want_string(const char *s, size_t n, int *chars) {
  cbuf w = {0};
  *chars = 0;
  cbuf_puts(&w, "\"");
  for (size_t i = 0;;) {
    const char *z = memchr(s + i, 0, n - i);
    size_t e = z ? (size_t)(z - s) : n;
    int k;
    char *part = old_string(s + i, e - i, &k);
    cbuf_put(&w, part + 1, strlen(part) - 2);
    free(part);
    *chars += k;
    if (!z) break;
    cbuf_puts(&w, "\\u0000");
    (*chars)++;
    i = e + 1;
  }
  cbuf_puts(&w, "\"");
  return cbuf_take(&w);
}

static void same_string(const char *s, size_t n) {
  int want_chars, chars = 3; /* grows from what it was */
  char *want = want_string(s, n, &want_chars);
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
  /* a NUL byte is kept (cJSON's round trip ended the text there) */
  expect_text("a\0b", 3, "\"a\\u0000b\"", 3);
  expect_text("\0", 1, "\"\\u0000\"", 1);
  expect_text("\xc3\0\xa9", 3, "\"\xef\xbf\xbd\\u0000\xef\xbf\xbd\"", 3);
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
   * a plain number is null then, as cJSON prints a non-finite number */
  cbuf b = {0};
  oai_lp_number(&b, -INFINITY);
  oai_lp_number(&b, NAN);
  assert_string_equal(b.data, "nullnull");
  cbuf_free(&b);
}

static void expect_logprob(float v, const char *text) {
  cbuf b = {0};
  oai_lp_logprob(&b, v);
  assert_false(b.oom);
  if (strcmp(b.data, text)) fail_msg("logprob %.9g: %s, want %s", (double)v, b.data, text);
  cbuf_free(&b);
}

/* A logprob is a number, floored at vLLM's -9999; NaN and +inf (impossible) are null. */
static void test_logprobs(void **st) {
  (void)st;
  expect_logprob(-INFINITY, "-9999");
  expect_logprob(-FLT_MAX, "-9999");
  expect_logprob(-1e5f, "-9999");
  expect_logprob(-9999.0f, "-9999");
  expect_logprob(-9998.5f, "-9998.5");
  expect_logprob(-0.5f, "-0.5");
  expect_logprob(-0.0f, "-0");
  expect_logprob(NAN, "null");
  expect_logprob(INFINITY, "null");
  uint64_t r = 7;
  for (int i = 0; i < 20000; i++) { /* above the floor, the same as a number */
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    float f = -(float)((r >> 11) % 100000000) / 10000.0f;
    cbuf a = {0}, b = {0};
    oai_lp_logprob(&a, f);
    oai_lp_number(&b, f);
    assert_string_equal(a.data, b.data);
    cbuf_free(&a);
    cbuf_free(&b);
  }
}

static const cJSON *arr(const cJSON *o, const char *k, int n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsArray(a));
  assert_int_equal(cJSON_GetArraySize(a), n);
  return a;
}

/* The completions arrays: a prompt part (its first token without a logprob) then a
 * generated part, read back by a JSON parser, with NUL bytes, -inf and text_offset. */
static void test_list(void **st) {
  (void)st;
  oai_lp_list p = {0}, g = {0};
  oai_lp_list_token(&p, "Hi", 2, NULL);
  oai_lp_list_end(&p);
  float lp1 = -1.5f;
  oai_lp_list_token(&p, " \xc3\xa9", 3, &lp1);
  oai_lp_list_top(&p, " \xc3\xa9", 3, -1.5f);
  oai_lp_list_top(&p, "x", 1, -2.25f);
  oai_lp_list_end(&p);
  float lp2 = -INFINITY, lp3 = -0.25f;
  oai_lp_list_token(&g, "a\0b", 3, &lp2);
  oai_lp_list_top(&g, "\0", 1, -INFINITY);
  oai_lp_list_end(&g);
  oai_lp_list_token(&g, "\"", 1, &lp3);
  oai_lp_list_end(&g);
  assert_false(oai_lp_list_failed(&p) || oai_lp_list_failed(&g));
  cbuf b = {0};
  int off = 10;
  oai_lp_list_write(&b, &p, &g, &off);
  assert_int_equal(off, 10 + 2 + 2 + 3 + 1);
  cJSON *o = cJSON_ParseWithLength(b.data, b.len);
  if (!o) fail_msg("not JSON: %s", b.data);
  const cJSON *toks = arr(o, "tokens", 4), *lps = arr(o, "token_logprobs", 4);
  const cJSON *tops = arr(o, "top_logprobs", 4), *offs = arr(o, "text_offset", 4);
  assert_string_equal(cJSON_GetArrayItem(toks, 0)->valuestring, "Hi");
  assert_string_equal(cJSON_GetArrayItem(toks, 1)->valuestring, " \xc3\xa9");
  assert_true(cJSON_IsNull(cJSON_GetArrayItem(lps, 0)));
  assert_true(cJSON_IsNull(cJSON_GetArrayItem(tops, 0)));
  assert_true(cJSON_GetArrayItem(lps, 1)->valuedouble == -1.5);
  assert_true(cJSON_GetArrayItem(lps, 2)->valuedouble == -9999.0);
  assert_true(cJSON_GetArrayItem(lps, 3)->valuedouble == -0.25);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 1)), 2);
  assert_true(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tops, 1), "x")->valuedouble == -2.25);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 2)), 1);
  assert_true(cJSON_GetArrayItem(tops, 2)->child->valuedouble == -9999.0);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(tops, 3)), 0);
  int want_off[4] = {10, 12, 14, 17};
  for (int i = 0; i < 4; i++) assert_int_equal(cJSON_GetArrayItem(offs, i)->valueint, want_off[i]);
  /* cJSON stops a string at NUL; the bytes themselves keep it */
  assert_non_null(strstr(b.data, "\"a\\u0000b\""));
  assert_non_null(strstr(b.data, "{\"\\u0000\":-9999}"));
  cJSON_Delete(o);
  cbuf_free(&b);
  /* one part alone, and none */
  off = 0;
  oai_lp_list_write(&b, NULL, &g, &off);
  assert_int_equal(off, 4);
  assert_string_equal(b.data, "{\"tokens\":[\"a\\u0000b\",\"\\\"\"],\"token_logprobs\":[-9999,-0.25],"
                              "\"top_logprobs\":[{\"\\u0000\":-9999},{}],\"text_offset\":[0,3]}");
  cbuf_free(&b);
  oai_lp_list empty = {0};
  oai_lp_list_write(&b, &empty, NULL, &off);
  assert_string_equal(b.data, "{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]}");
  cbuf_free(&b);
  /* cleared, p keeps its buffers and then writes as a fresh list (a stream's per-token use) */
  char *keep = p.tokens.data;
  oai_lp_list_clear(&p);
  assert_ptr_equal(p.tokens.data, keep);
  oai_lp_list_write(&b, &p, NULL, &off);
  assert_string_equal(b.data, "{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]}");
  cbuf_free(&b);
  oai_lp_list_token(&p, "\"", 1, &lp3);
  oai_lp_list_end(&p);
  off = 0;
  oai_lp_list_write(&b, &p, NULL, &off);
  assert_string_equal(b.data, "{\"tokens\":[\"\\\"\"],\"token_logprobs\":[-0.25],\"top_logprobs\":[{}],\"text_offset\":[0]}");
  assert_int_equal(off, 1);
  cbuf_free(&b);
  oai_lp_list_free(&p);
  oai_lp_list_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_special_strings),
      cmocka_unit_test(test_random_strings),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_logprobs),
      cmocka_unit_test(test_list),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
