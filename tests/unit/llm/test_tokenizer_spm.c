/* test_tokenizer_spm.c: the SentencePiece tokenizer (tokenizer.ggml.model = "llama") on
 * tests/data/llm/spm_tiny.gguf, a vocab-only GGUF trained by make_spm_fixture.py, against
 * the ids, pieces and detokenisation llama.cpp (llama-cpp-python, version in the JSON)
 * produces for the same file (tokenizer_spm.json):
 *  - ids equal llama.cpp's for every corpus string (specials parsed or not);
 *  - each token's piece equals llama_token_to_piece's; streaming detokenisation with the
 *    leading-space strip equals llama_detokenize and emits only complete UTF-8;
 *  - byte fallback: characters absent from the vocabulary become their <0xXX> tokens;
 *  - BOS is added by default; an unknown tokenizer.ggml.model or bad scores are errors
 *    naming the value or field. */
#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/llm/gguf.h"
#include "backends/llm/tokenizer.h"
#include "utf8_check.h"

#ifndef LLM_TEST_DATA
#define LLM_TEST_DATA "tests/data/llm"
#endif

static char *read_file(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", LLM_TEST_DATA, name);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  assert_true(n >= 0);
  char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  b[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return b;
}

typedef struct {
  llm_gguf *g;
  llm_tokenizer *t;
  cJSON *j;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  char path[1024];
  snprintf(path, sizeof path, "%s/spm_tiny.gguf", LLM_TEST_DATA);
  cinfer_status *st = llm_gguf_open(path, &f->g);
  if (!st) st = llm_tokenizer_create(f->g, &f->t);
  if (st) {
    fprintf(stderr, "%s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return -1;
  }
  char *b = read_file("tokenizer_spm.json", NULL);
  f->j = cJSON_Parse(b);
  free(b);
  if (!f->j) return -1;
  *state = f;
  return 0;
}
static int teardown(void **state) {
  fixture *f = *state;
  cJSON_Delete(f->j);
  llm_tokenizer_destroy(f->t);
  llm_gguf_close(f->g);
  free(f);
  return 0;
}

static int32_t *json_ids(const cJSON *a, size_t *n) {
  *n = (size_t)cJSON_GetArraySize(a);
  int32_t *v = malloc((*n + 1) * sizeof *v);
  assert_non_null(v);
  size_t i = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, a) v[i++] = (int32_t)x->valuedouble;
  return v;
}

static void test_ids_match_llama_cpp(void **state) {
  fixture *f = *state;
  const cJSON *c;
  int n_cases = 0, n_bytes_fallback = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(f->j, "cases")) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    bool special = cJSON_IsTrue(cJSON_GetObjectItem(c, "special"));
    size_t nw, ng;
    int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids"), &nw), *got;
    cinfer_status *st = llm_tokenize(f->t, text, strlen(text), false, special, &got, &ng);
    if (st) fail_msg("tokenize '%s': %s", text, cinfer_status_message(st));
    if (ng != nw || memcmp(got, want, ng * sizeof *got)) {
      fprintf(stderr, "text: '%s' special=%d\nwant:", text, special);
      for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
      fprintf(stderr, "\ngot: ");
      for (size_t i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
      fprintf(stderr, "\n");
      fail_msg("tokenization differs from llama.cpp");
    }
    for (size_t i = 0; i < ng; i++) {
      size_t l;
      const char *p = llm_token_piece(f->t, got[i], true, &l);
      if (l == 6 && !memcmp(p, "<0x", 3)) fail_msg("byte token %d gave its text", got[i]);
      char name[8];
      snprintf(name, sizeof name, "<0x%02X>", (unsigned char)p[0]);
      if (l == 1 && llm_token_lookup(f->t, name, 6) == got[i]) n_bytes_fallback++;
    }
    free(want);
    free(got);
    n_cases++;
  }
  assert_true(n_cases >= 30);
  assert_true(n_bytes_fallback >= 20); /* the corpus exercises byte fallback */
}

static void test_detok_matches_llama_cpp(void **state) {
  fixture *f = *state;
  assert_true(llm_tokenizer_add_space_prefix(f->t));
  const cJSON *c;
  int n_roundtrip = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(f->j, "cases")) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    const char *want = cJSON_GetObjectItem(c, "detok")->valuestring;
    size_t n;
    int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
    /* pieces: llama_token_to_piece(special = false, lstrip = 0) */
    const cJSON *pc = cJSON_GetObjectItem(c, "pieces");
    assert_int_equal((size_t)cJSON_GetArraySize(pc), n);
    for (size_t i = 0; i < n; i++) {
      const cJSON *pw = cJSON_GetArrayItem(pc, (int)i);
      size_t l;
      const char *p = llm_token_piece(f->t, ids[i], false, &l);
      assert_int_equal(l, (size_t)cJSON_GetArraySize(pw));
      for (size_t k = 0; k < l; k++)
        assert_int_equal((unsigned char)p[k], (int)cJSON_GetArrayItem(pw, (int)k)->valuedouble);
    }
    /* streaming with the first-token space strip = llama_detokenize */
    char out[4096];
    size_t o = 0;
    llm_detok d = {.lstrip = llm_tokenizer_add_space_prefix(f->t)};
    for (size_t i = 0; i < n; i++) {
      char piece[512];
      size_t k = llm_detok_push(f->t, &d, ids[i], false, piece, sizeof piece);
      assert_true(k <= sizeof piece);
      assert_true(valid_utf8(piece, k)); /* never half a character, even mid byte-fallback */
      assert_true(o + k < sizeof out - 64);
      memcpy(out + o, piece, k);
      o += k;
    }
    o += llm_detok_flush(&d, out + o, 64);
    if (o != strlen(want) || memcmp(out, want, o))
      fail_msg("detokenisation of '%s' is '%.*s', llama.cpp gives '%s'", text, (int)o, out, want);
    if (!strcmp(want, text)) n_roundtrip++;
    free(ids);
  }
  assert_true(n_roundtrip >= 25); /* most of the corpus round-trips, as in llama.cpp */
}

static void test_byte_fallback_and_bos(void **state) {
  fixture *f = *state;
  const cJSON *meta = cJSON_GetObjectItem(f->j, "meta");
  assert_int_equal(llm_tokenizer_bos(f->t), (int)cJSON_GetObjectItem(meta, "bos")->valuedouble);
  assert_int_equal(llm_tokenizer_eos(f->t), (int)cJSON_GetObjectItem(meta, "eos")->valuedouble);
  assert_int_equal(llm_tokenizer_n_vocab(f->t), (int)cJSON_GetObjectItem(meta, "n_vocab")->valuedouble);
  assert_true(llm_tokenizer_add_bos(f->t));
  size_t nw, ng;
  int32_t *want = json_ids(cJSON_GetObjectItem(meta, "hello_world_with_bos"), &nw), *got;
  assert_null(llm_tokenize(f->t, "Hello world", 11, true, false, &got, &ng));
  assert_int_equal(ng, nw);
  assert_memory_equal(got, want, ng * sizeof *got);
  free(want);
  free(got);
  /* "Ж" (D0 96) is not in the vocabulary: "▁" then one <0xXX> token per byte */
  assert_null(llm_tokenize(f->t, "\xD0\x96", 2, false, false, &got, &ng));
  assert_int_equal(ng, 3);
  assert_int_equal(got[0], llm_token_lookup(f->t, "\xE2\x96\x81", 3));
  assert_int_equal(got[1], llm_token_lookup(f->t, "<0xD0>", 6));
  assert_int_equal(got[2], llm_token_lookup(f->t, "<0x96>", 6));
  size_t l;
  assert_memory_equal(llm_token_piece(f->t, got[1], false, &l), "\xD0", 1);
  assert_int_equal(l, 1);
  /* streaming holds the first byte until the character is complete */
  llm_detok d = {.lstrip = true};
  char out[64];
  assert_int_equal(llm_detok_push(f->t, &d, got[0], false, out, sizeof out), 0); /* stripped space */
  assert_int_equal(llm_detok_push(f->t, &d, got[1], false, out, sizeof out), 0);
  assert_int_equal(llm_detok_push(f->t, &d, got[2], false, out, sizeof out), 2);
  assert_memory_equal(out, "\xD0\x96", 2);
  free(got);
  /* invalid UTF-8 is an error naming the byte, as for BPE */
  cinfer_status *st = llm_tokenize(f->t, "ok\xff", 3, false, false, &got, &ng);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "invalid UTF-8 at byte 2"));
  cinfer_status_free(st);
}

/* A minimal GGUF v3: tokenizer.ggml.model = model, tokens ["a", "b"], and when
 * scores_type >= 0 a tokenizer.ggml.scores array of that GGUF type with n_scores 4-byte
 * elements. */
static size_t put_str(uint8_t *b, size_t o, const char *s) {
  uint64_t n = strlen(s);
  memcpy(b + o, &n, 8);
  memcpy(b + o + 8, s, n);
  return o + 8 + n;
}
static size_t put_u32(uint8_t *b, size_t o, uint32_t v) { return memcpy(b + o, &v, 4), o + 4; }
static size_t put_u64(uint8_t *b, size_t o, uint64_t v) { return memcpy(b + o, &v, 8), o + 8; }
static cinfer_status *create_from(const char *model, int scores_type, uint64_t n_scores) {
  uint8_t b[512];
  memcpy(b, "GGUF", 4);
  size_t o = put_u32(b, 4, 3);
  o = put_u64(b, o, 0);                    /* tensors */
  o = put_u64(b, o, scores_type >= 0 ? 3 : 2); /* kv */
  o = put_str(b, o, "tokenizer.ggml.model");
  o = put_u32(b, o, 8); /* string */
  o = put_str(b, o, model);
  o = put_str(b, o, "tokenizer.ggml.tokens");
  o = put_u32(b, o, 9); /* array */
  o = put_u32(b, o, 8); /* of strings */
  o = put_u64(b, o, 2);
  o = put_str(b, o, "a");
  o = put_str(b, o, "b");
  if (scores_type >= 0) {
    o = put_str(b, o, "tokenizer.ggml.scores");
    o = put_u32(b, o, 9);
    o = put_u32(b, o, (uint32_t)scores_type);
    o = put_u64(b, o, n_scores);
    for (uint64_t i = 0; i < n_scores; i++) o = put_u32(b, o, 0);
  }
  llm_gguf *g;
  cinfer_status *st = llm_gguf_open_memory(b, o, &g);
  if (st) fail_msg("gguf: %s", cinfer_status_message(st));
  llm_tokenizer *t = (llm_tokenizer *)1;
  st = llm_tokenizer_create(g, &t);
  if (st) assert_null(t);
  llm_tokenizer_destroy(t);
  llm_gguf_close(g);
  return st;
}

static void test_bad_metadata_is_named(void **state) {
  (void)state;
  cinfer_status *st = create_from("wordpiece-x", -1, 0);
  assert_non_null(st);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  assert_non_null(strstr(cinfer_status_message(st), "'wordpiece-x'"));
  cinfer_status_free(st);
  /* scores must be f32 (type 6) and as long as tokens */
  st = create_from("llama", 5, 2);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "tokenizer.ggml.scores"));
  cinfer_status_free(st);
  st = create_from("llama", 6, 3);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "tokenizer.ggml.scores"));
  cinfer_status_free(st);
  /* without scores (all 0 then, as in llama.cpp) and without byte tokens, a SentencePiece
   * vocabulary still loads, as in llama.cpp */
  assert_null(create_from("llama", -1, 0));
  assert_null(create_from("llama", 6, 2));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ids_match_llama_cpp),
      cmocka_unit_test(test_detok_matches_llama_cpp),
      cmocka_unit_test(test_byte_fallback_and_bos),
      cmocka_unit_test(test_bad_metadata_is_named),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
