/* test_grammar.c: the GBNF compiler, the matcher, the JSON Schema translation, and the
 * token mask (trie walk) against its scalar reference (every token tried on its own with
 * llm_grammar_allows) on SmolLM2's real vocabulary. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "backends/llm/gguf.h"
#include "backends/llm/grammar.h"
#include "backends/llm/tokenizer.h"

static llm_grammar *compile_ok(const char *text) {
  llm_grammar *g = NULL;
  cinfer_status *st = llm_grammar_compile(text, strlen(text), &g);
  if (st) fail_msg("compile failed: %s\n%s", cinfer_status_message(st), text);
  return g;
}

static void compile_err(const char *text, const char *want) {
  llm_grammar *g = NULL;
  cinfer_status *st = llm_grammar_compile(text, strlen(text), &g);
  assert_non_null(st);
  assert_null(g);
  if (!strstr(cinfer_status_message(st), want))
    fail_msg("error '%s' does not contain '%s'", cinfer_status_message(st), want);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  cinfer_status_free(st);
}

/* Whether the whole text is a sentence of g. */
static bool matches(llm_grammar *g, const char *text) {
  llm_grammar_state *s;
  assert_null(llm_grammar_state_create(g, &s));
  bool ok = llm_grammar_accept_text(s, text, strlen(text)) && llm_grammar_can_end(s);
  llm_grammar_state_destroy(s);
  return ok;
}

/* Whether text is a prefix of some sentence. */
static bool prefix_ok(llm_grammar *g, const char *text) {
  llm_grammar_state *s;
  assert_null(llm_grammar_state_create(g, &s));
  bool ok = llm_grammar_accept_text(s, text, strlen(text));
  llm_grammar_state_destroy(s);
  return ok;
}

static void test_syntax_errors(void **state) {
  (void)state;
  compile_err("root ::= \"a\" (\"b\"\n", "line 1, column 14: unbalanced '('");
  compile_err("root ::= foo\n", "rule 'foo' is used but not defined");
  compile_err("start ::= \"a\"\n", "no rule named 'root'");
  compile_err("root ::= root \"a\" | \"b\"\n", "rule 'root' is left-recursive");
  compile_err("root ::= x\nx ::= y? root \"a\"\ny ::= \"b\"\n", "left-recursive");
  compile_err("root ::= \"a\"{2000}\n", "repetition bound is above 1000");
  compile_err("root ::= \"a\"{3,2}\n", "m <= n");
  compile_err("root ::= [b-a]\n", "end before its start");
  compile_err("root ::= \"abc\n", "line 1, column 10: unterminated string literal");
  compile_err("root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule defined twice: 'root'");
  compile_err("root ::= \"\\q\"\n", "unknown escape");
  compile_err("root = \"a\"\n", "expected '::='");
  compile_err("root ::= \"a\" )\n", "unexpected character");
}

static void test_matching(void **state) {
  (void)state;
  llm_grammar *g = compile_ok(
      "# a comment line\n"
      "root ::= greeting \" \" name (\"!\" | \".\")?   # trailing comment\n"
      "greeting ::= \"hello\" | \"hi\"\n"
      "name ::= [A-Z] [a-z]{1,5}\n");
  assert_true(matches(g, "hello Bob!"));
  assert_true(matches(g, "hi Alice"));
  assert_true(matches(g, "hi Alicex."));
  assert_false(matches(g, "hi Alicexy"));   /* 6 lowercase letters: above {1,5} */
  assert_false(matches(g, "hey Bob"));
  assert_false(matches(g, "hello B"));      /* at least one lowercase */
  assert_true(prefix_ok(g, "hello B"));
  assert_false(prefix_ok(g, "hello b"));
  llm_grammar_unref(g);

  /* multi-line alternatives after '|' and inside parentheses; right recursion; repetition */
  g = compile_ok("root ::= item (\",\" item)* |\n  \"none\"\nitem ::= (\n  \"a\" |\n  \"b\" item\n)\n");
  assert_true(matches(g, "a,ba,bbba"));
  assert_true(matches(g, "none"));
  assert_false(matches(g, "a,"));
  assert_false(matches(g, "b"));
  llm_grammar_unref(g);

  /* escapes, negated classes, any character, code points beyond ASCII */
  g = compile_ok("root ::= \"\\x41\\u00e9\" [^\\n\"]+ \"\\n\" . \"€\"\n");
  assert_true(matches(g, "Aé xyz\nq€"));
  assert_true(matches(g, "Aé日本\n\xF0\x9F\x98\x80€"));
  assert_false(matches(g, "Aé\"\n.€"));
  llm_grammar_unref(g);
}

/* A character split across two pieces (byte-level vocabularies do this). */
static void test_partial_utf8(void **state) {
  (void)state;
  llm_grammar *g = compile_ok("root ::= \"<\" [α-ω]+ \">\"\n");
  llm_grammar_state *s;
  assert_null(llm_grammar_state_create(g, &s));
  assert_true(llm_grammar_accept_text(s, "<\xCE", 2)); /* first byte of β (U+03B2 = CE B2) */
  assert_false(llm_grammar_can_end(s));
  assert_false(llm_grammar_accept_text(s, "\x41", 1)); /* not a continuation byte */
  assert_true(llm_grammar_accept_text(s, "\xB2>", 2));
  assert_true(llm_grammar_can_end(s));
  assert_true(llm_grammar_must_end(s));
  llm_grammar_state_destroy(s);
  /* a lead byte whose characters the class cannot hold is refused at once */
  assert_null(llm_grammar_state_create(g, &s));
  assert_false(llm_grammar_accept_text(s, "<\xE6", 2)); /* U+6000.. is not Greek */
  llm_grammar_state_destroy(s);
  llm_grammar_unref(g);
  /* overlong spellings and surrogates are not characters: E0 80 A2 would be '"' in 3 bytes */
  g = compile_ok("root ::= \"\\\"\" [^\\x00]*\n");
  assert_null(llm_grammar_state_create(g, &s));
  assert_false(llm_grammar_accept_text(s, "\xE0\x80\xA2", 3));
  assert_false(llm_grammar_accept_text(s, "\xE0\x80", 2)); /* no 3-byte character starts so */
  assert_false(llm_grammar_accept_text(s, "\xC1\xA2", 2));
  assert_true(llm_grammar_accept_text(s, "\"", 1));
  assert_false(llm_grammar_accept_text(s, "\xED\xA0\x80", 3)); /* U+D800 */
  assert_false(llm_grammar_accept_text(s, "\xF0\x80\x80\xA2", 4));
  assert_true(llm_grammar_accept_text(s, "\xE2\x82\xAC\xF0\x9F\x98\x80", 7)); /* € 😀 */
  llm_grammar_state_destroy(s);
  llm_grammar_unref(g);
}

static void test_json_object_grammar(void **state) {
  (void)state;
  const char *t = llm_grammar_json_object_gbnf();
  llm_grammar *g = compile_ok(t);
  assert_true(matches(g, "{}"));
  assert_true(matches(g, "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\\n\"], \"b\": {\"c\": {}}}"));
  assert_false(matches(g, "[1, 2]"));          /* the top level is an object */
  assert_false(matches(g, "{\"a\": 01}"));     /* no leading zeros */
  assert_false(matches(g, "{\"a\": \"\x01\"}")); /* raw control characters */
  assert_false(matches(g, "{'a': 1}"));
  assert_false(matches(g, "{\"a\": 1,}"));
  llm_grammar_unref(g);
}

static llm_grammar *schema_grammar(const char *schema) {
  char *gbnf = NULL;
  cinfer_status *st = llm_json_schema_to_gbnf(schema, strlen(schema), &gbnf);
  if (st) fail_msg("schema failed: %s", cinfer_status_message(st));
  llm_grammar *g = compile_ok(gbnf);
  free(gbnf);
  return g;
}

static void schema_err(const char *schema, const char *want) {
  char *gbnf = NULL;
  cinfer_status *st = llm_json_schema_to_gbnf(schema, strlen(schema), &gbnf);
  assert_non_null(st);
  assert_null(gbnf);
  if (!strstr(cinfer_status_message(st), want))
    fail_msg("error '%s' does not contain '%s'", cinfer_status_message(st), want);
  cinfer_status_free(st);
}

static void test_json_schema(void **state) {
  (void)state;
  llm_grammar *g = schema_grammar(
      "{\"type\":\"object\",\"properties\":{"
      "\"name\":{\"type\":\"string\",\"maxLength\":8},"
      "\"age\":{\"type\":\"integer\"},"
      "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",3]},\"minItems\":1,\"maxItems\":2},"
      "\"kind\":{\"const\":\"person\"},"
      "\"nick\":{\"type\":[\"string\",\"null\"]}},"
      "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}");
  assert_true(matches(g, "{\"name\":\"Ann\",\"age\":31}"));
  assert_true(matches(g, "{ \"name\": \"Ann\", \"age\": -3, \"tags\": [\"b\", 3], \"kind\": \"person\", \"nick\": null }"));
  assert_true(matches(g, "{\"name\":\"\",\"age\":0,\"nick\":\"x\"}"));
  assert_false(matches(g, "{\"age\":31,\"name\":\"Ann\"}"));          /* declared order */
  assert_false(matches(g, "{\"name\":\"Ann\"}"));                     /* age is required */
  assert_false(matches(g, "{\"name\":\"Ann\",\"age\":3.5}"));          /* integer */
  assert_false(matches(g, "{\"name\":\"Annabelle!\",\"age\":1}"));     /* maxLength 8 */
  assert_false(matches(g, "{\"name\":\"A\",\"age\":1,\"tags\":[]}"));   /* minItems 1 */
  assert_false(matches(g, "{\"name\":\"A\",\"age\":1,\"tags\":[\"a\",\"a\",\"a\"]}"));
  assert_false(matches(g, "{\"name\":\"A\",\"age\":1,\"tags\":[\"c\"]}")); /* enum */
  assert_false(matches(g, "{\"name\":\"A\",\"age\":1,\"x\":1}"));      /* no other keys */
  assert_false(matches(g, "{\"name\":\"A\",\"age\":1,\"kind\":\"cat\"}"));
  llm_grammar_unref(g);

  /* recursion through $defs, anyOf, tuples */
  g = schema_grammar(
      "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
      "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
      "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},"
      "{\"type\":\"string\"}],\"items\":false}]}");
  assert_true(matches(g, "{\"v\":1,\"kids\":[{\"v\":2.5},{\"v\":3,\"kids\":[]}]}"));
  assert_true(matches(g, "[true,\"x\"]"));
  assert_false(matches(g, "[true]"));
  assert_false(matches(g, "{\"kids\":[]}"));
  llm_grammar_unref(g);

  /* a schema of annotations only is any JSON value */
  g = schema_grammar("{\"title\":\"anything\"}");
  assert_true(matches(g, "[1,{\"a\":null}]"));
  llm_grammar_unref(g);

  schema_err("{\"type\":\"string\",\"pattern\":\"^a\"}", "unsupported keyword (its constraint would not be enforced): 'pattern'");
  schema_err("{\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":0}}}", "at '/properties/a'");
  schema_err("{\"type\":\"strin\"}", "unknown type 'strin'");
  schema_err("{\"$ref\":\"#/$defs/missing\"}", "does not exist");
  schema_err("{\"$ref\":\"http://example.com/s.json\"}", "only local references");
  schema_err("{\"type\":\"array\",\"maxItems\":5000}", "above 1000");
  schema_err("{\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "does not declare");
  schema_err("{\"type\":\"object\"", "JSON");
  schema_err("false", "admits no value");
}

/* ---- the token mask on SmolLM2's vocabulary ---- */

static char g_model[4096];
static const char *model_path(void) {
  if (g_model[0]) return g_model;
  const char *env = getenv("CINFER_SMOLLM2_GGUF");
  if (env) {
    snprintf(g_model, sizeof g_model, "%s", env);
    return g_model;
  }
  FILE *p = popen(LLM_SOURCE_DIR "/scripts/find_smollm2.sh \"" LLM_BINARY_DIR "\"", "r");
  if (p && fgets(g_model, sizeof g_model, p)) g_model[strcspn(g_model, "\n")] = 0;
  if (p) pclose(p);
  if (!g_model[0]) fail_msg("SmolLM2 GGUF not found: run scripts/setup.sh or set CINFER_SMOLLM2_GGUF");
  return g_model;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The trie mask equals the per-token reference at each prefix of a sentence; the accepted
 * text is then followed token by token with the mask's choice. */
static void check_mask(const llm_tokenizer *t, const llm_grammar_vocab *v, llm_grammar *g, const char *text) {
  int nv = llm_tokenizer_n_vocab(t);
  float *logits = malloc((size_t)nv * sizeof *logits);
  assert_non_null(logits);
  llm_grammar_state *s;
  assert_null(llm_grammar_state_create(g, &s));
  int32_t *ids;
  size_t n_ids;
  assert_null(llm_tokenize(t, text, strlen(text), false, false, &ids, &n_ids));
  double t_mask = 0;
  for (size_t k = 0; k <= n_ids; k++) {
    for (int i = 0; i < nv; i++) logits[i] = 0;
    double t0 = now_s();
    int allowed = llm_grammar_mask(s, v, t, logits, nv);
    t_mask += now_s() - t0;
    assert_true(allowed > 0);
    int ref = 0;
    for (int32_t id = 0; id < nv; id++) {
      bool a = llm_grammar_allows(s, t, id);
      ref += a;
      if (a != !isinf(logits[id]))
        fail_msg("token %d ('%s') after %zu tokens of '%s': mask %d, reference %d", id,
                 llm_token_piece(t, id, false, &(size_t){0}), k, text, !isinf(logits[id]), a);
    }
    assert_int_equal(allowed, ref);
    if (k < n_ids) {
      assert_false(isinf(logits[ids[k]])); /* the sentence's own next token is allowed */
      assert_true(llm_grammar_accept(s, t, ids[k]));
    }
  }
  assert_true(llm_grammar_can_end(s));
  assert_true(llm_grammar_allows(s, t, llm_tokenizer_eos(t)));
  print_message("mask: %.3f ms per step over %zu steps (%s)\n", t_mask * 1e3 / (double)(n_ids + 1), n_ids + 1, text);
  free(ids);
  free(logits);
  llm_grammar_state_destroy(s);
}

static void test_mask_matches_reference(void **state) {
  (void)state;
  llm_gguf *gf;
  llm_tokenizer *t;
  assert_null(llm_gguf_open(model_path(), &gf));
  assert_null(llm_tokenizer_create(gf, &t));
  llm_grammar_vocab *v;
  assert_null(llm_grammar_vocab_create(t, &v));
  const char *j = llm_grammar_json_object_gbnf();
  llm_grammar *g = compile_ok(j);
  check_mask(t, v, g, "{\"city\": \"Zürich\", \"n\": [1, 2.5], \"ok\": true}");
  llm_grammar_unref(g);
  g = schema_grammar("{\"type\":\"object\",\"properties\":{\"answer\":{\"enum\":[\"yes\",\"no\"]},"
                     "\"why\":{\"type\":\"string\"}},\"required\":[\"answer\",\"why\"]}");
  check_mask(t, v, g, "{\"answer\": \"no\", \"why\": \"日本 is far\"}");
  llm_grammar_unref(g);
  /* end of generation only where the grammar accepts */
  g = compile_ok("root ::= \"ab\" \"c\"?\n");
  llm_grammar_state *s;
  assert_null(llm_grammar_state_create(g, &s));
  assert_false(llm_grammar_allows(s, t, llm_tokenizer_eos(t)));
  assert_true(llm_grammar_accept_text(s, "ab", 2));
  assert_true(llm_grammar_allows(s, t, llm_tokenizer_eos(t)));
  assert_false(llm_grammar_must_end(s));
  llm_grammar_state_destroy(s);
  llm_grammar_unref(g);
  llm_grammar_vocab_destroy(v);
  llm_tokenizer_destroy(t);
  llm_gguf_close(gf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_syntax_errors),   cmocka_unit_test(test_matching),
      cmocka_unit_test(test_partial_utf8),    cmocka_unit_test(test_json_object_grammar),
      cmocka_unit_test(test_json_schema),     cmocka_unit_test(test_mask_matches_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
