/* test_json.c: the request-body JSON reader (core/json): tree shape, escapes, numbers
 * exactly as strtod reads them, arena growth past the inline block, and one error per
 * rule with the byte offset it names.
 *
 * Every text is parsed from a buffer that ends flush against a PROT_NONE guard page
 * (guard_page.h), so a read of even one byte past the given length faults; and every
 * truncation of a corpus of valid documents is parsed the same way (each is either valid
 * JSON itself or a "malformed JSON" error, never a fault or another error). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cinfer/types.h"
#include "core/json.h"
#include "guard_page.h"

/* json_parse of text[0..n) placed against a guard page (the tree owns copies of every
 * string, so the page can go as soon as the parse returns) */
static cinfer_status *parse_guarded(const char *text, size_t n, json_doc **d) {
  guard g = guard_place(text, n);
  cinfer_status *st = json_parse(g.data, n, 32, d);
  guard_free(&g);
  return st;
}

static json_doc *parse_ok(const char *text) {
  json_doc *d = NULL;
  cinfer_status *st = parse_guarded(text, strlen(text), &d);
  if (st) fail_msg("'%s': %s", text, cinfer_status_message(st));
  return d;
}

static void expect_error(const char *text, const char *msg) {
  json_doc *d = NULL;
  cinfer_status *st = parse_guarded(text, strlen(text), &d);
  if (!st) fail_msg("'%s' parsed", text);
  assert_null(d);
  if (!strstr(cinfer_status_message(st), msg))
    fail_msg("'%s': got '%s', want '%s'", text, cinfer_status_message(st), msg);
  cinfer_status_free(st);
}

static void test_tree(void **s) {
  (void)s;
  json_doc *d = parse_ok(" {\"a\": [1, -2.5, true, false, null], \"b\": {\"c\": \"x\"}, \"a\": 3}\n");
  const json_value *r = json_root(d);
  assert_true(json_is(r, JSON_OBJECT));
  assert_int_equal(r->len, 3);
  const json_value *a = json_get(r, "a"); /* the first of duplicates */
  assert_true(json_is(a, JSON_ARRAY));
  assert_int_equal(a->len, 5);
  const json_value *e = a->u.child;
  assert_true(json_is(e, JSON_NUMBER) && e->u.num == 1.0);
  e = e->next;
  assert_true(e->u.num == -2.5);
  e = e->next;
  assert_int_equal(e->type, JSON_TRUE);
  assert_int_equal(e->next->type, JSON_FALSE);
  assert_int_equal(e->next->next->type, JSON_NULL);
  assert_null(e->next->next->next);
  const json_value *c = json_get(json_get(r, "b"), "c");
  assert_true(json_is(c, JSON_STRING));
  assert_string_equal(c->u.str, "x");
  assert_string_equal(c->key, "c");
  assert_null(json_get(r, "zz"));
  assert_null(json_get(a, "a")); /* not an object */
  assert_null(json_get(NULL, "a"));
  json_doc_free(d);
  json_doc_free(NULL);

  d = parse_ok("[[], {}, \"\"]");
  r = json_root(d);
  assert_int_equal(r->len, 3);
  assert_int_equal(r->u.child->len, 0);
  assert_null(r->u.child->u.child);
  assert_int_equal(r->u.child->next->type, JSON_OBJECT);
  assert_int_equal(r->u.child->next->next->len, 0);
  json_doc_free(d);
}

static void test_strings(void **s) {
  (void)s;
  json_doc *d = parse_ok("\"q\\\"b\\\\s\\/\\b\\f\\n\\r\\t \\u00e9 \\u20ac \\ud83d\\ude00 \\u0000z\"");
  const json_value *v = json_root(d);
  const char want[] = "q\"b\\s/\b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \0z";
  assert_int_equal(v->len, sizeof want - 1);
  assert_memory_equal(v->u.str, want, sizeof want - 1);
  assert_int_equal(v->u.str[v->len], 0);
  json_doc_free(d);
  d = parse_ok("\"h\xc3\xa9llo\""); /* raw UTF-8 passes through */
  assert_string_equal(json_root(d)->u.str, "h\xc3\xa9llo");
  json_doc_free(d);
}

static void test_numbers(void **s) {
  (void)s;
  const char *cases[] = {"0", "-0", "1", "-1", "0.5", "1e3", "1E+3", "1e-3", "123456789012345678",
                         "9007199254740993", "12345678901234567890123", "0.1", "0.3",
                         "3.141592653589793238462643383279", "1e22", "1e23", "4.9e-324",
                         "2.2250738585072011e-308", "1.7976931348623157e308", "1e400", "-1e400",
                         "0.000000000000000000000000001", "123.456e-7", "5e-1", "100000000000000000000000000000e-29"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    json_doc *d = parse_ok(cases[i]);
    double want = strtod(cases[i], NULL), got = json_root(d)->u.num;
    if (memcmp(&want, &got, sizeof got)) fail_msg("%s: got %a want %a", cases[i], got, want);
    json_doc_free(d);
  }
  /* Random decimals: the fast path and strtod agree bit for bit. */
  uint64_t x = 12345;
  char buf[64];
  for (int i = 0; i < 20000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int digits = 1 + (int)(x % 20), point = (int)((x >> 8) % (uint64_t)(digits + 1));
    int exp = (int)((x >> 16) % 61) - 30;
    char *o = buf;
    if (x >> 63) *o++ = '-';
    uint64_t y = x * 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < digits; k++) {
      if (k == point && k) *o++ = '.';
      int dg = (int)(y % 10);
      if (k == 0 && dg == 0) dg = 1;
      *o++ = (char)('0' + dg);
      y /= 10;
      if (!y) y = x;
    }
    if ((x >> 24) & 1) o += sprintf(o, "e%d", exp);
    *o = 0;
    json_doc *d = parse_ok(buf);
    double want = strtod(buf, NULL), got = json_root(d)->u.num;
    if (memcmp(&want, &got, sizeof got)) fail_msg("%s: got %a want %a", buf, got, want);
    json_doc_free(d);
  }
  json_doc *d = parse_ok("[NaN, Infinity, -Infinity]");
  const json_value *e = json_root(d)->u.child;
  assert_true(isnan(e->u.num));
  assert_true(isinf(e->next->u.num) && e->next->u.num > 0);
  assert_true(isinf(e->next->next->u.num) && e->next->next->u.num < 0);
  json_doc_free(d);
}

/* Far past the inline block: the arena chains blocks and every value survives. */
static void test_large(void **s) {
  (void)s;
  size_t n = 200000;
  char *t = malloc(n * 12 + 16), *o = t;
  *o++ = '[';
  for (size_t i = 0; i < n; i++) o += sprintf(o, i ? ",%zu.25" : "%zu.25", i);
  *o++ = ']';
  json_doc *d = NULL;
  assert_null(json_parse(t, (size_t)(o - t), 32, &d));
  const json_value *r = json_root(d);
  assert_int_equal(r->len, n);
  size_t i = 0;
  for (const json_value *e = r->u.child; e; e = e->next, i++) assert_true(e->u.num == (double)i + 0.25);
  assert_int_equal(i, n);
  json_doc_free(d);
  free(t);
}

static void test_errors(void **s) {
  (void)s;
  expect_error("", "near byte 0: expected a value");
  expect_error("   ", "near byte 3: expected a value");
  expect_error("{\"a\":}", "near byte 5: expected a value");
  expect_error("{\"a\" 1}", "near byte 5: expected ':'");
  expect_error("{a:1}", "near byte 1: expected a string member name");
  expect_error("{\"a\":1,}", "near byte 7: expected a string member name");
  expect_error("[1,]", "near byte 3: expected a value");
  expect_error("[1 2]", "near byte 3: expected ',' or ']'");
  expect_error("{\"a\":1 \"b\":2}", "near byte 7: expected ',' or '}'");
  expect_error("[1", "near byte 2: expected ',' or ']'");
  expect_error("\"abc", "near byte 0: unterminated string");
  expect_error("\"abc\\", "near byte 0: unterminated string");
  expect_error("\"a\tb\"", "near byte 2: control character");
  expect_error("\"\\x\"", "near byte 1: invalid escape");
  expect_error("\"\\u12\"", "near byte 1: \\u needs four hex digits");
  expect_error("\"\\udc00\"", "near byte 1: \\u escape is a lone low surrogate");
  expect_error("\"\\ud800x\"", "near byte 1: \\u escape is a high surrogate");
  expect_error("\"\\ud800\\u0041\"", "near byte 1: \\u escape is a high surrogate");
  expect_error("01", "near byte 1: unexpected data after the JSON value");
  expect_error("1.", "near byte 2: invalid number: digits must follow '.'");
  expect_error("1e+", "near byte 3: invalid number: digits must follow the exponent");
  expect_error("-", "near byte 0: invalid number");
  expect_error("-NaN", "near byte 0: invalid number");
  expect_error("+1", "near byte 0: expected a value");
  expect_error("tru", "near byte 0: expected a value");
  expect_error("{} x", "near byte 3: unexpected data after the JSON value");
  char deep[80];
  memset(deep, '[', 33);
  memset(deep + 33, ']', 33);
  deep[66] = 0;
  expect_error(deep, "JSON nesting depth exceeds maximum allowed limit (32)");
  memset(deep + 32, ']', 32); /* exactly 32 levels is fine */
  deep[64] = 0;
  json_doc *d = parse_ok(deep);
  json_doc_free(d);
}

/* Valid documents that reach every branch of the reader: each one whole, then every
 * prefix, against the guard page. */
static const char *const CORPUS[] = {
    "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,4],\"data\":[1,2.5,-3e2,4E-1]}],"
    "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}],\"id\":\"r1\"}",
    " [ true , false , null , 0 , -0 , 0.5 , 1e+10 , -1E-10 ] ",
    "[NaN,Infinity,-Infinity,123456789012345678901234567890,0.1234567890123456789012345]",
    "\"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u20ac \\ud83d\\ude00 end\"",
    "{\"a\":{\"b\":{\"c\":[[[]],{}]}},\"\":\"\",\"k\\u0000\":1}",
    "1.00000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000000000000000000000001e-5",
    "\"\xc3\xa9\xe2\x82\xac raw UTF-8\"",
    "-12345.678e-3",
    "[]",
};

static void test_guard_truncations(void **s) {
  (void)s;
  for (size_t c = 0; c < sizeof CORPUS / sizeof *CORPUS; c++) {
    size_t len = strlen(CORPUS[c]);
    json_doc *d = NULL;
    cinfer_status *st = parse_guarded(CORPUS[c], len, &d);
    if (st) fail_msg("corpus %zu: %s", c, cinfer_status_message(st));
    json_doc_free(d);
    for (size_t k = 0; k < len; k++) {
      d = NULL;
      st = parse_guarded(CORPUS[c], k, &d);
      if (!st) { /* a prefix that is a document itself ("1" of "12") */
        assert_non_null(d);
        json_doc_free(d);
        continue;
      }
      assert_null(d);
      assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
      if (!strstr(cinfer_status_message(st), "malformed JSON near byte"))
        fail_msg("corpus %zu cut at %zu: '%s'", c, k, cinfer_status_message(st));
      cinfer_status_free(st);
    }
  }
}

/* Malformed texts whose error is found at the very last byte, each against the guard page:
 * the reader must decide from the bytes it was given, never peek past them. */
static void test_guard_malformed(void **s) {
  (void)s;
  static const struct { const char *in, *msg; } C[] = {
      {"\"\\", "unterminated string"},          {"\"\\u", "unterminated string"},
      {"\"\\u00", "unterminated string"},       {"\"\\ud800\\u", "unterminated string"},
      {"\"\\u12\"", "four hex digits"},         {"\"\\ud800\\udc\"", "high surrogate"},
      {"t", "expected a value"},                {"nul", "expected a value"},
      {"fals", "expected a value"},             {"N", "invalid number"},
      {"Infinit", "invalid number"},            {"-Infinit", "invalid number"},
      {"1e", "digits must follow the exponent"}, {"1.", "digits must follow '.'"},
      {"-", "invalid number"},                  {"{", "expected a string member name"},
      {"{\"a\"", "expected ':'"},               {"{\"a\":", "expected a value"},
      {"{\"a\":1", "expected ',' or '}'"},       {"[", "expected a value"},
      {"[1,", "expected a value"},              {"[1", "expected ',' or ']'"},
      {"\"abc", "unterminated string"},         {"\"\x01\"", "control character"},
  };
  for (size_t i = 0; i < sizeof C / sizeof *C; i++) expect_error(C[i].in, C[i].msg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tree),    cmocka_unit_test(test_strings), cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_large),   cmocka_unit_test(test_errors),
      cmocka_unit_test(test_guard_truncations), cmocka_unit_test(test_guard_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
