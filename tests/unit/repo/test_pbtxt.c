/* test_pbtxt.c: the protobuf text parser on its own: every syntax form it promises,
 * number/escape edge cases, limits, and error positions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repo/pbtxt.h"

static pbtxt_node *parse_ok(const char *text) {
  pbtxt_node *root = NULL;
  cinfer_status *st = pbtxt_parse("t.pbtxt", text, strlen(text), &root);
  if (st) fail_msg("unexpected error: %s", cinfer_status_message(st));
  assert_non_null(root);
  return root;
}

static void expect_err(const char *text, const char *msg) {
  pbtxt_node *root = (pbtxt_node *)1;
  cinfer_status *st = pbtxt_parse("t.pbtxt", text, strlen(text), &root);
  assert_non_null(st);
  assert_null(root);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_string_equal(cinfer_status_message(st), msg);
  cinfer_status_free(st);
}

static void test_repeated_styles_equivalent(void **state) {
  (void)state;
  pbtxt_node *a = parse_ok("dims: 1 dims: 2\ndims: -3");
  pbtxt_node *b = parse_ok("dims: [1, 2, -3]");
  assert_int_equal(a->n_children, 3);
  assert_int_equal(b->n_children, 3);
  for (size_t i = 0; i < 3; i++) {
    int64_t x, y;
    assert_string_equal(a->children[i]->name, "dims");
    assert_string_equal(b->children[i]->name, "dims");
    assert_true(pbtxt_as_int64(a->children[i], &x));
    assert_true(pbtxt_as_int64(b->children[i], &y));
    assert_int_equal(x, y);
    assert_false(a->children[i]->in_list);
    assert_true(b->children[i]->in_list);
  }
  /* positions: the value of the third element */
  assert_int_equal(a->children[2]->line, 2);
  assert_int_equal(a->children[2]->vcol, 7);
  assert_int_equal(b->children[2]->vcol, 14);
  pbtxt_free(a);
  pbtxt_free(b);
}

static void test_messages_all_spellings(void **state) {
  (void)state;
  pbtxt_node *r = parse_ok("a { x: 1 } b: { x: 2 } c < x: 3 > d: < x: 4 >\n"
                           "e [ { x: 5 }, < x: 6 > ] f: []");
  assert_int_equal(r->n_children, 6); /* f: [] adds nothing */
  const char *names[] = {"a", "b", "c", "d", "e", "e"};
  for (size_t i = 0; i < 6; i++) {
    const pbtxt_node *m = r->children[i];
    assert_string_equal(m->name, names[i]);
    assert_int_equal(m->kind, PBTXT_MESSAGE);
    assert_int_equal(m->n_children, 1);
    int64_t v;
    assert_true(pbtxt_as_int64(pbtxt_child(m, "x"), &v));
    assert_int_equal(v, (int64_t)i + 1);
  }
  pbtxt_free(r);
}

static void test_separators_and_comments(void **state) {
  (void)state;
  pbtxt_node *r = parse_ok("# leading comment\n a: 1; b: 2, c { d: 3; } # trailing\n e: 4 # end");
  assert_int_equal(r->n_children, 4);
  assert_string_equal(r->children[3]->name, "e");
  pbtxt_free(r);
  expect_err("a: 1 ;; b: 2", "t.pbtxt:1:7: expected a field name, found ';'");
  expect_err(", a: 1", "t.pbtxt:1:1: expected a field name, found ','");
}

static void test_strings(void **state) {
  (void)state;
  pbtxt_node *r = parse_ok("s: \"a\\n\\t\\\\\\'\\\"\\x41\\101\\0z\" 'single' \"\" 'x\"y'\n t: '\\x4a\\x4B'");
  const pbtxt_node *s = pbtxt_child(r, "s");
  static const char want[] = "a\n\t\\'\"AA\0zsinglex\"y";
  assert_int_equal(s->kind, PBTXT_STRING);
  assert_int_equal(s->len, sizeof want - 1);
  assert_memory_equal(s->str, want, sizeof want - 1);
  assert_string_equal(pbtxt_child(r, "t")->str, "JK");
  pbtxt_free(r);
  expect_err("s: \"abc", "t.pbtxt:1:4: unterminated string (missing closing \")");
  expect_err("s: 'ab\ncd'", "t.pbtxt:1:4: unterminated string (missing closing ')");
  expect_err("s: \"\\xZZ\"", "t.pbtxt:1:5: invalid escape '\\x' without hex digits in string");
  expect_err("s: \"\\777\"", "t.pbtxt:1:5: octal escape out of range in string");
  expect_err("s: \"ok\" \"\\q\"", "t.pbtxt:1:10: invalid escape '\\' followed by 'q' in string");
}

static void test_numbers(void **state) {
  (void)state;
  pbtxt_node *r = parse_ok("a: 0x1F b: 017 c: -9223372036854775808 d: 18446744073709551615 e: 1.5e3 "
                           "f: -.25 g: 2.5f h: inf i: -inf j: nan k: 0 l: 1E-2");
  int64_t v;
  uint64_t u;
  double d;
  assert_true(pbtxt_as_int64(pbtxt_child(r, "a"), &v));
  assert_int_equal(v, 31);
  assert_true(pbtxt_as_int64(pbtxt_child(r, "b"), &v));
  assert_int_equal(v, 15);
  assert_true(pbtxt_as_int64(pbtxt_child(r, "c"), &v));
  assert_true(v == INT64_MIN);
  assert_false(pbtxt_as_uint64(pbtxt_child(r, "c"), &u));
  assert_false(pbtxt_as_int64(pbtxt_child(r, "d"), &v));
  assert_true(pbtxt_as_uint64(pbtxt_child(r, "d"), &u));
  assert_true(u == UINT64_MAX);
  assert_int_equal(pbtxt_child(r, "e")->kind, PBTXT_FLOAT);
  assert_true(pbtxt_as_double(pbtxt_child(r, "e"), &d) && d == 1500.0);
  assert_true(pbtxt_as_double(pbtxt_child(r, "f"), &d) && d == -0.25);
  assert_true(pbtxt_as_double(pbtxt_child(r, "g"), &d) && d == 2.5);
  assert_true(pbtxt_as_double(pbtxt_child(r, "h"), &d) && isinf(d) && d > 0);
  assert_true(pbtxt_as_double(pbtxt_child(r, "i"), &d) && isinf(d) && d < 0);
  assert_true(pbtxt_as_double(pbtxt_child(r, "j"), &d) && isnan(d));
  assert_false(pbtxt_as_int64(pbtxt_child(r, "e"), &v)); /* a float is not an int */
  assert_true(pbtxt_as_double(pbtxt_child(r, "l"), &d) && d == 0.01);
  pbtxt_free(r);
  expect_err("a: 18446744073709551616", "t.pbtxt:1:4: integer '18446744073709551616' is out of range");
  expect_err("a: 12abc", "t.pbtxt:1:4: invalid number '12abc'");
  expect_err("a: 089", "t.pbtxt:1:4: invalid number '089'");
  expect_err("a: - 1", "t.pbtxt:1:4: expected a number after '-', found ' '");
  expect_err("a: -foo", "t.pbtxt:1:4: invalid number '-foo'");
}

static void test_bools(void **state) {
  (void)state;
  pbtxt_node *r = parse_ok("a: true b: True c: t d: 1 e: false f: False g: f h: 0 i: 2 j: yes");
  const char *yes = "abcd", *no = "efgh";
  bool b;
  for (const char *p = yes; *p; p++) {
    char n[2] = {*p, 0};
    assert_true(pbtxt_as_bool(pbtxt_child(r, n), &b));
    assert_true(b);
  }
  for (const char *p = no; *p; p++) {
    char n[2] = {*p, 0};
    assert_true(pbtxt_as_bool(pbtxt_child(r, n), &b));
    assert_false(b);
  }
  assert_false(pbtxt_as_bool(pbtxt_child(r, "i"), &b));
  assert_false(pbtxt_as_bool(pbtxt_child(r, "j"), &b));
  pbtxt_free(r);
}

static void test_structure_errors(void **state) {
  (void)state;
  expect_err("dims 3", "t.pbtxt:1:6: expected ':' or '{' after field name 'dims'");
  expect_err("a: }", "t.pbtxt:1:4: expected a value after ':' for field 'a', found '}'");
  expect_err("a { b: 1", "t.pbtxt:1:9: unexpected end of input: expected '}' to close 'a' opened at 1:3");
  expect_err("a < b: 1 }", "t.pbtxt:1:10: expected '>' to close 'a' opened at 1:3, found '}'");
  expect_err("}", "t.pbtxt:1:1: unexpected '}' outside any message");
  expect_err("a: [1 2]", "t.pbtxt:1:7: expected ',' or ']' in list for field 'a', found number '2'");
  expect_err("a: [1,]", "t.pbtxt:1:7: expected a value in list for field 'a', found ']'");
  expect_err("a: [[1]]", "t.pbtxt:1:5: expected a value in list for field 'a', found '['");
  expect_err("a: 1 $", "t.pbtxt:1:6: unexpected character '$'");
  expect_err("\"name\": 1", "t.pbtxt:1:1: expected a field name, found a string");
  /* a NUL byte in the input is an error, not the end of the text */
  pbtxt_node *r = (pbtxt_node *)1;
  cinfer_status *st = pbtxt_parse("t.pbtxt", "a: 1\0b: 2", 9, &r);
  assert_non_null(st);
  assert_string_equal(cinfer_status_message(st), "t.pbtxt:1:5: unexpected character '\\x00'");
  cinfer_status_free(st);
}

static void test_depth_limit(void **state) {
  (void)state;
  /* exactly PBTXT_MAX_DEPTH nested messages are fine; one more is an error */
  char buf[4 * (PBTXT_MAX_DEPTH + 1) + 16];
  for (int depth = PBTXT_MAX_DEPTH; depth <= PBTXT_MAX_DEPTH + 1; depth++) {
    size_t n = 0;
    for (int i = 0; i < depth; i++) n += (size_t)sprintf(buf + n, "a{");
    for (int i = 0; i < depth; i++) buf[n++] = '}';
    buf[n] = '\0';
    pbtxt_node *r = NULL;
    cinfer_status *st = pbtxt_parse("t.pbtxt", buf, n, &r);
    if (depth == PBTXT_MAX_DEPTH) {
      assert_null(st);
      pbtxt_free(r);
    } else {
      assert_non_null(st);
      assert_string_equal(cinfer_status_message(st), "t.pbtxt:1:130: messages nested deeper than 64 levels");
      cinfer_status_free(st);
    }
  }
  /* lists of messages count towards the same limit */
  size_t n = 0;
  for (int i = 0; i < PBTXT_MAX_DEPTH + 1; i++) n += (size_t)sprintf(buf + n, "a:[{");
  pbtxt_node *r = NULL;
  cinfer_status *st = pbtxt_parse("t.pbtxt", buf, n, &r);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "nested deeper than 64 levels"));
  cinfer_status_free(st);
}

static void test_size_and_node_limits(void **state) {
  (void)state;
  size_t big = PBTXT_MAX_INPUT + 1;
  char *text = malloc(big);
  assert_non_null(text);
  memset(text, ' ', big);
  pbtxt_node *r = NULL;
  cinfer_status *st = pbtxt_parse("t.pbtxt", text, big, &r);
  assert_non_null(st);
  assert_string_equal(cinfer_status_message(st), "t.pbtxt:1:1: input is too large (1048577 bytes, limit 1048576)");
  cinfer_status_free(st);
  /* within the size limit but over the node limit: "a:[0,0,0,...]" */
  size_t n = 0;
  n += (size_t)sprintf(text, "a:[0");
  for (unsigned i = 1; i <= PBTXT_MAX_NODES; i++) {
    text[n++] = ',';
    text[n++] = '0';
  }
  text[n++] = ']';
  st = pbtxt_parse("t.pbtxt", text, n, &r);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "too many fields (limit 262144)"));
  cinfer_status_free(st);
  free(text);
}

static void test_empty_and_null_path(void **state) {
  (void)state;
  pbtxt_node *r = NULL;
  assert_null(pbtxt_parse(NULL, "", 0, &r));
  assert_int_equal(r->n_children, 0);
  pbtxt_free(r);
  pbtxt_free(NULL);
  cinfer_status *st = pbtxt_parse(NULL, "x", 1, &r);
  assert_string_equal(cinfer_status_message(st), "<input>:1:2: expected ':' or '{' after field name 'x'");
  cinfer_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_repeated_styles_equivalent),
      cmocka_unit_test(test_messages_all_spellings),
      cmocka_unit_test(test_separators_and_comments),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_bools),
      cmocka_unit_test(test_structure_errors),
      cmocka_unit_test(test_depth_limit),
      cmocka_unit_test(test_size_and_node_limits),
      cmocka_unit_test(test_empty_and_null_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
