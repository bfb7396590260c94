/* test_gemma3.c: the Gemma 3 family (GGUF arch "gemma3") on the real gemma-3-270m Q4_K_M
 * file against llama.cpp (tests/data/llm/make_gemma3_fixtures.py writes the fixtures):
 *  - the hyperparameters llama.cpp derives (head_dim 256 from key_length, the 5-local/1-global
 *    sliding-window pattern, the local RoPE base, the q scale);
 *  - the SentencePiece tokenizer (Gemma's 262k vocab, byte fallback, no space prefix)
 *    reproduces llama.cpp's ids on a multilingual / whitespace / code corpus;
 *  - the Gemma 3 chat template (tests/data/llm/gemma3_chat_template.jinja: the GGUF has none)
 *    renders through the engine's Jinja to the prompt ids llama.cpp was given;
 *  - greedy decoding reproduces llama.cpp's ids for raw and chat prompts and for a prompt
 *    longer than the 512-token window, one at a time, batched with chunked prefill, and under
 *    KV pressure (preemption and recompute).
 * The model path comes from scripts/find_gemma3.sh (it assembles the file from the PyPI chunk
 * packages installed by scripts/setup.sh) or $CINFER_GEMMA3_GGUF. */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/llm/gguf.h"
#include "backends/llm/llm.h"
#include "backends/llm/model.h"
#include "backends/llm/tokenizer.h"
#include "llm_golden.h"
#include "utf8_check.h"

static char g_model[4096];
static const char *model_path(void) { return golden_model_path(g_model, sizeof g_model, "CINFER_GEMMA3_GGUF", "find_gemma3.sh", "Gemma 3"); }

static llm_engine *make_engine(int kv_blocks, int max_step_tokens, bool prefix, const char *tpl) {
  llm_engine_opts o = {.threads = 2, .ctx_len = 1024, .kv_blocks = kv_blocks, .block_size = 16, .max_seqs = 8,
                       .max_step_tokens = max_step_tokens, .manual_step = true, .no_prefix_cache = !prefix,
                       .chat_template = tpl};
  llm_engine *e;
  cinfer_status *st = llm_engine_create(model_path(), &o, &e);
  if (st) fail_msg("engine: %s", cinfer_status_message(st));
  return e;
}

/* ---- hyperparameters ---- */
static void test_hparams(void **s) {
  (void)s;
  llm_gguf *g;
  llm_model *m;
  assert_null(llm_gguf_open(model_path(), &g));
  assert_null(llm_model_create(g, &m));
  const llm_hparams *hp = llm_model_hparams(m);
  assert_string_equal(llm_model_arch_name(m), "gemma3");
  assert_int_equal(hp->arch, LLM_ARCH_GEMMA3);
  assert_int_equal(hp->dim, 640);
  assert_int_equal(hp->n_layers, 18);
  assert_int_equal(hp->n_heads, 4);
  assert_int_equal(hp->n_kv_heads, 1);
  assert_int_equal(hp->head_dim, 256); /* attention.key_length, not dim / heads = 160 */
  assert_int_equal(hp->q_dim, 1024);
  assert_int_equal(hp->n_vocab, 262144);
  assert_int_equal(hp->n_swa, 512);
  assert_true(hp->rope_base == 1000000.0f && hp->rope_base_swa == 10000.0f);
  assert_true(hp->q_scale == 0.0625f && hp->kq_scale == 1.0f);
  /* llama.cpp's set_swa_pattern(6): layers 5, 11, 17 global, the rest local */
  for (int l = 0; l < 18; l++) assert_int_equal(llm_model_layer_swa(m, l), l % 6 != 5);
  assert_false(llm_model_layer_swa(m, 18));
  llm_model_destroy(m);
  llm_gguf_close(g);
}

/* ---- tokenizer ---- */
static void test_tokenizer_fixtures(void **s) {
  (void)s;
  llm_gguf *g;
  llm_tokenizer *t;
  assert_null(llm_gguf_open(model_path(), &g));
  assert_null(llm_tokenizer_create(g, &t));
  assert_int_equal(llm_tokenizer_bos(t), 2);
  assert_true(llm_tokenizer_add_bos(t));
  assert_false(llm_tokenizer_add_space_prefix(t));
  assert_true(llm_tokenizer_is_eog(t, 1));   /* <eos> */
  assert_true(llm_tokenizer_is_eog(t, 106)); /* <end_of_turn> */
  cJSON *j = load_json("tokenizer_gemma3.json");
  int n_cases = 0;
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    bool special = cJSON_IsTrue(cJSON_GetObjectItem(c, "special"));
    int nw;
    int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids"), &nw);
    int32_t *got;
    size_t ng;
    assert_null(llm_tokenize(t, text, strlen(text), false, special, &got, &ng));
    if (!(ng == (size_t)nw && !memcmp(got, want, ng * 4))) {
      fprintf(stderr, "text: %s\nwant:", text);
      for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
      fprintf(stderr, "\ngot: ");
      for (size_t i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
      fprintf(stderr, "\n");
      fail_msg("tokenization differs from llama.cpp");
    }
    /* streaming detokenisation: complete UTF-8 chunks whose concatenation is the text */
    static char out[16384];
    size_t o = 0;
    llm_detok d = {0};
    for (size_t i = 0; i < ng; i++) {
      char piece[512];
      size_t k = llm_detok_push(t, &d, got[i], special, piece, sizeof piece);
      assert_true(k <= sizeof piece);
      assert_true(valid_utf8(piece, k));
      memcpy(out + o, piece, k);
      o += k;
    }
    o += llm_detok_flush(&d, out + o, 64);
    assert_int_equal(o, strlen(text));
    assert_memory_equal(out, text, o);
    free(want);
    free(got);
    n_cases++;
  }
  assert_true(n_cases >= 40);
  cJSON_Delete(j);
  llm_tokenizer_destroy(t);
  llm_gguf_close(g);
}

/* ---- greedy golden ---- */

static int load_golden(gcase *gc, cJSON **keep) { return load_golden_file("greedy_gemma3.json", gc, keep); }

static char *read_template(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/gemma3_chat_template.jinja", LLM_TEST_DATA);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  static char buf[8192];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* The chat cases' messages rendered by the engine (Jinja, the leading <bos> dropped because
 * the tokenizer adds it) and tokenized as the server does give llama.cpp's prompt ids. */
static void test_chat_template(void **s) {
  (void)s;
  llm_engine *e = make_engine(16, 64, false, read_template());
  cJSON *j = load_json("greedy_gemma3.json");
  int n_chat = 0;
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
    if (!cJSON_IsTrue(cJSON_GetObjectItem(c, "chat"))) continue;
    const cJSON *msgs = cJSON_GetObjectItem(c, "messages");
    const char *roles[8], *contents[8];
    int nm = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
      roles[nm] = cJSON_GetObjectItem(m, "role")->valuestring;
      contents[nm++] = cJSON_GetObjectItem(m, "content")->valuestring;
    }
    char *out;
    assert_null(llm_engine_chat_render(e, roles, contents, (size_t)nm, true, &out));
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    assert_true(!strncmp(text, "<bos>", 5));
    assert_string_equal(out, text + 5);
    int32_t *ids;
    size_t n;
    assert_null(llm_engine_tokenize(e, out, strlen(out), true, true, &ids, &n));
    int nw;
    int32_t *want = json_ids(cJSON_GetObjectItem(c, "prompt_ids"), &nw);
    assert_int_equal(n, (size_t)nw);
    assert_memory_equal(ids, want, n * 4);
    free(want);
    free(ids);
    free(out);
    n_chat++;
  }
  assert_true(n_chat >= 3);
  cJSON_Delete(j);
  llm_engine_destroy(e);
}

static void test_greedy_single(void **s) {
  (void)s;
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  assert_true(n >= 6);
  bool long_case = false;
  for (int i = 0; i < n; i++) long_case |= gc[i].n_prompt > 512; /* crosses the sliding window */
  assert_true(long_case);
  llm_engine *e = make_engine(256, 1024, false, NULL);
  static collect col;
  for (int i = 0; i < n; i++) {
    submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col);
    run_all(e);
    check_case(&gc[i], &col);
  }
  llm_engine_destroy(e);
  free_golden(gc, n, j);
  fprintf(stderr, "gemma3 greedy: %d of %d positions identical to llama.cpp\n", g_exact_positions, g_total_positions);
}

static void test_greedy_batched_chunked(void **s) {
  (void)s;
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  llm_engine *e = make_engine(256, 48, true, NULL);
  static collect col[16];
  for (int i = 0; i < n; i++) submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col[i]);
  run_all(e);
  for (int i = 0; i < n; i++) check_case(&gc[i], &col[i]);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_greedy_preemption(void **s) {
  (void)s;
  gcase gc[16];
  cJSON *j;
  int n_all = load_golden(gc, &j), n = n_all < 4 ? n_all : 4; /* the short prompts: enough to force preemption */
  int maxb = 0;
  for (int i = 0; i < n; i++) {
    int b = (gc[i].n_prompt + gc[i].n_want + 15) / 16;
    if (b > maxb) maxb = b;
  }
  llm_engine *e = make_engine(maxb + 3, 1024, true, NULL);
  static collect col[16];
  for (int i = 0; i < n; i++) submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col[i]);
  run_all(e);
  for (int i = 0; i < n; i++) check_case(&gc[i], &col[i]);
  llm_engine_stats st;
  llm_engine_get_stats(e, &st);
  assert_true(st.preemptions_total > 0);
  llm_engine_destroy(e);
  free_golden(gc, n_all, j);
}

/* ---- bad metadata: clear errors, no crash (an in-memory GGUF of keys only) ---- */
typedef struct { uint8_t b[4096]; size_t n; } gbuf;
static void put(gbuf *f, const void *p, size_t n) { memcpy(f->b + f->n, p, n); f->n += n; }
static void u32(gbuf *f, uint32_t v) { put(f, &v, 4); }
static void u64(gbuf *f, uint64_t v) { put(f, &v, 8); }
static void str(gbuf *f, const char *v) { u64(f, strlen(v)); put(f, v, strlen(v)); }
static void kv_u32(gbuf *f, const char *k, uint32_t v) { str(f, k); u32(f, GGUF_U32); u32(f, v); }

/* gemma3 metadata: key_length/value_length as given (0: absent), plus an extra key */
static void make_meta(gbuf *f, uint32_t key_len, uint32_t val_len, const char *extra_f32) {
  memset(f, 0, sizeof *f);
  put(f, "GGUF", 4);
  u32(f, 3);
  u64(f, 0); /* tensors */
  size_t nkv_at = f->n;
  u64(f, 0);
  uint64_t nkv = 0;
  str(f, "general.architecture"); u32(f, GGUF_STRING); str(f, "gemma3"); nkv++;
  kv_u32(f, "gemma3.embedding_length", 640); nkv++;
  kv_u32(f, "gemma3.block_count", 18); nkv++;
  kv_u32(f, "gemma3.attention.head_count", 4); nkv++;
  kv_u32(f, "gemma3.attention.head_count_kv", 1); nkv++;
  kv_u32(f, "gemma3.feed_forward_length", 2048); nkv++;
  kv_u32(f, "gemma3.context_length", 32768); nkv++;
  kv_u32(f, "gemma3.attention.sliding_window", 512); nkv++;
  if (key_len) { kv_u32(f, "gemma3.attention.key_length", key_len); nkv++; }
  if (val_len) { kv_u32(f, "gemma3.attention.value_length", val_len); nkv++; }
  if (extra_f32) {
    float v = 30.0f;
    str(f, extra_f32); u32(f, GGUF_F32); put(f, &v, 4); nkv++;
  }
  memcpy(f->b + nkv_at, &nkv, 8);
}

static void expect_model_error(gbuf *f, const char *needle) {
  llm_gguf *g;
  assert_null(llm_gguf_open_memory(f->b, f->n, &g));
  llm_model *m = (llm_model *)1;
  cinfer_status *st = llm_model_create(g, &m);
  assert_null(m);
  if (!st) fail_msg("expected an error containing '%s'", needle);
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("error '%s' lacks '%s'", cinfer_status_message(st), needle);
  cinfer_status_free(st);
  llm_gguf_close(g);
}

static void test_bad_metadata(void **s) {
  (void)s;
  gbuf f;
  make_meta(&f, 0, 256, NULL);
  expect_model_error(&f, "gemma3.attention.key_length");
  make_meta(&f, 256, 128, NULL); /* keys and values of different widths */
  expect_model_error(&f, "value_length");
  make_meta(&f, 4096, 4096, NULL);
  expect_model_error(&f, "key_length");
  make_meta(&f, 256, 256, "gemma3.final_logit_softcapping"); /* parsed by llama.cpp, not implemented here */
  expect_model_error(&f, "gemma3.final_logit_softcapping is not supported");
  make_meta(&f, 256, 256, "gemma3.rope.scaling.factor");
  expect_model_error(&f, "gemma3.rope.scaling.factor is not supported");
  make_meta(&f, 256, 256, NULL); /* valid keys, no tensors */
  expect_model_error(&f, "token_embd.weight");
}

/* The tiny gemma3 model (tests/data/llm/make_gemma3_tiny.py: 6 layers, window 4, F32):
 * 60 positions, far past the window, in one sequence; the same prompts batched with chunked
 * prefill and under preemption give the same ids and logprobs bit for bit (each token's
 * computation is independent of its batch). Needs no download; runs under ASan in CI. */
static void test_tiny_sliding_window(void **s) {
  (void)s;
  const char *path = LLM_TEST_DATA "/gemma3_tiny.gguf";
  static const int32_t p0[] = {2, 6, 7, 6, 7, 8, 7}, p1[] = {2, 7, 7, 7, 8, 6, 6, 7, 8, 8, 6};
  static collect ref[2], got[2];
  for (int mode = 0; mode < 3; mode++) {
    llm_engine_opts o = {.threads = 2, .ctx_len = 64, .kv_blocks = mode == 2 ? 5 : 32, .block_size = 16,
                         .max_seqs = 4, .max_step_tokens = mode ? 5 : 64, .manual_step = true};
    llm_engine *e;
    cinfer_status *st = llm_engine_create(path, &o, &e);
    if (st) fail_msg("engine: %s", cinfer_status_message(st));
    llm_sampling sp = greedy(48);
    sp.ignore_eos = true;
    collect *c = mode ? got : ref;
    if (mode == 0) {
      submit_ids(e, p0, 7, sp, &c[0]);
      run_all(e);
      submit_ids(e, p1, 11, sp, &c[1]);
      run_all(e);
    } else {
      submit_ids(e, p0, 7, sp, &c[0]);
      submit_ids(e, p1, 11, sp, &c[1]);
      run_all(e);
      for (int i = 0; i < 2; i++) {
        assert_int_equal(got[i].n_ids, ref[i].n_ids);
        assert_memory_equal(got[i].ids, ref[i].ids, (size_t)ref[i].n_ids * 4);
        for (int k = 0; k < ref[i].n_ids; k++) assert_true(got[i].lp[k] == ref[i].lp[k]);
      }
    }
    for (int i = 0; i < 2; i++) assert_int_equal(c[i].n_ids, 48);
    if (mode == 2) {
      llm_engine_stats est;
      llm_engine_get_stats(e, &est);
      assert_true(est.preemptions_total > 0);
    }
    llm_engine_destroy(e);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_metadata),  cmocka_unit_test(test_tiny_sliding_window),
      cmocka_unit_test(test_hparams),
      cmocka_unit_test(test_tokenizer_fixtures),
      cmocka_unit_test(test_chat_template), cmocka_unit_test(test_greedy_single),
      cmocka_unit_test(test_greedy_batched_chunked), cmocka_unit_test(test_greedy_preemption),
  };
  const char *only = getenv("CINFER_TEST_FILTER"); /* e.g. "test_bad*": run a subset */
  if (only) cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
