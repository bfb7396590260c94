/* test_jinja.c: the chat-template renderer against the real Jinja2 (tests/data/llm/
 * jinja_cases.json, written by make_jinja_cases.py with transformers' settings): the
 * templates of common open models and edge cases, byte for byte, errors included; and the
 * constructs we do not support fail compilation naming themselves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "backends/llm/jinja.h"
#include "core/buf.h"

static cJSON *cases(void) {
  cbuf b = {0};
  cinfer_status *st = cbuf_read_file(&b, LLM_TEST_DATA "/jinja_cases.json", 1 << 24);
  if (st) fail_msg("%s", cinfer_status_message(st));
  cJSON *j = cJSON_Parse(b.data);
  cbuf_free(&b);
  assert_non_null(j);
  return j;
}

static void test_matches_jinja2(void **state) {
  (void)state;
  cJSON *j = cases();
  const cJSON *tpls = cJSON_GetObjectItem(j, "templates"), *msgsets = cJSON_GetObjectItem(j, "messages");
  int n = 0, errors = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
    const char *tn = cJSON_GetObjectItem(c, "template")->valuestring;
    const char *src = cJSON_GetObjectItem(tpls, tn)->valuestring;
    llm_jinja *t;
    cinfer_status *st = llm_jinja_compile(src, strlen(src), &t);
    if (st) fail_msg("template %s: %s", tn, cinfer_status_message(st));
    const cJSON *ms = cJSON_GetObjectItem(msgsets, cJSON_GetObjectItem(c, "messages")->valuestring);
    llm_jinja_msg m[8];
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ms) {
      m[k].role = cJSON_GetObjectItem(e, "role")->valuestring;
      m[k].content = cJSON_GetObjectItem(e, "content")->valuestring;
      k++;
    }
    char *out = NULL;
    st = llm_jinja_render(t, m, k, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")), "<s>", "</s>", &out);
    const cJSON *want = cJSON_GetObjectItem(c, "output"), *werr = cJSON_GetObjectItem(c, "error");
    if (want) {
      if (st) fail_msg("%s/%s: %s", tn, cJSON_GetObjectItem(c, "messages")->valuestring, cinfer_status_message(st));
      if (strcmp(out, want->valuestring))
        fail_msg("%s/%s gen=%d:\n got: [%s]\nwant: [%s]", tn, cJSON_GetObjectItem(c, "messages")->valuestring,
                 cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")), out, want->valuestring);
    } else {
      assert_non_null(st);
      if (!strstr(cinfer_status_message(st), werr->valuestring))
        fail_msg("%s: error '%s' lacks '%s'", tn, cinfer_status_message(st), werr->valuestring);
      errors++;
      cinfer_status_free(st);
    }
    free(out);
    llm_jinja_free(t);
    n++;
  }
  assert_true(n >= 80);
  assert_true(errors > 0); /* raise_exception cases (Mistral and Gemma with a system message) */
  cJSON_Delete(j);
}

static void unsupported(const char *src, const char *want) {
  llm_jinja *t = NULL;
  cinfer_status *st = llm_jinja_compile(src, strlen(src), &t);
  assert_non_null(st);
  assert_null(t);
  if (!strstr(cinfer_status_message(st), want)) fail_msg("'%s': error '%s' lacks '%s'", src, cinfer_status_message(st), want);
  cinfer_status_free(st);
}

static void test_unsupported_constructs_are_named(void **state) {
  (void)state;
  unsupported("{% macro f(x) %}{{ x }}{% endmacro %}", "line 1: unsupported Jinja statement 'macro'");
  unsupported("a\n{% include 'other.j2' %}", "line 2: unsupported Jinja statement 'include'");
  unsupported("{{ messages | wordcount }}", "unsupported filter 'wordcount'");
  unsupported("{% if x is divisibleby(3) %}{% endif %}", "unsupported test 'divisibleby'");
  unsupported("{{ render_tools(tools) }}", "unsupported function 'render_tools'");
  unsupported("{% for x in xs recursive %}{% endfor %}", "recursive");
  unsupported("{% if x %}", "the template ends inside a block");
  unsupported("{% endfor %}", "unexpected '{% endfor %}'");
  unsupported("{{ 'abc }}", "unterminated");
  unsupported("{% set x %}y{% endset %}", "'set' block");
  unsupported("{{ x[::2] }}", "slice steps");
}

static void test_runtime_errors(void **state) {
  (void)state;
  llm_jinja *t;
  const char *src = "{{ 'a' + 1 }}";
  assert_null(llm_jinja_compile(src, strlen(src), &t));
  char *out = NULL;
  llm_jinja_msg m = {"user", "hi"};
  cinfer_status *st = llm_jinja_render(t, &m, 1, true, "", "", &out);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "unsupported operand types for +: string and int"));
  cinfer_status_free(st);
  llm_jinja_free(t);
}

/* Literals and argument lists as long as the template makes them (no fixed bound). */
static void test_long_lists(void **state) {
  (void)state;
  cbuf src = {0};
  cbuf_puts(&src, "{% set ns = namespace(");
  for (int i = 0; i < 40; i++) cbuf_printf(&src, "%sa%d=%d", i ? ", " : "", i, i);
  cbuf_puts(&src, ") %}{% set xs = [");
  for (int i = 0; i < 1000; i++) cbuf_printf(&src, "%s%d", i ? "," : "", i);
  cbuf_puts(&src, "] %}{% set d = {");
  for (int i = 0; i < 300; i++) cbuf_printf(&src, "%s'k%d': %d", i ? "," : "", i, i);
  cbuf_puts(&src, "} %}{{ xs | length }} {{ xs[999] }} {{ ns.a39 }} {{ d | length }} {{ d['k299'] }}");
  assert_false(src.oom);
  llm_jinja *t;
  cinfer_status *st = llm_jinja_compile(src.data, src.len, &t);
  if (st) fail_msg("%s", cinfer_status_message(st));
  char *out = NULL;
  llm_jinja_msg m = {"user", "hi"};
  assert_null(llm_jinja_render(t, &m, 1, false, "", "", &out));
  assert_string_equal(out, "1000 999 39 300 299");
  free(out);
  llm_jinja_free(t);
  cbuf_free(&src);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_jinja2),
      cmocka_unit_test(test_unsupported_constructs_are_named),
      cmocka_unit_test(test_runtime_errors),
      cmocka_unit_test(test_long_lists),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
