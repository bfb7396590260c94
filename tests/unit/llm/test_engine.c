/* test_engine.c: the LLM engine on the real SmolLM2-135M Q4_1 model against fixtures made
 * by llama.cpp (the JSON files in tests/data/llm, see make_fixtures.py):
 *  - the tokenizer reproduces llama.cpp's ids on a multilingual/emoji/code/whitespace
 *    corpus; detokenisation round-trips; streaming never splits a UTF-8 character;
 *  - greedy decoding reproduces llama.cpp's token ids, one sequence at a time AND all
 *    prompts batched together (continuous batching) AND under KV pressure that forces
 *    preemption and recompute;
 *  - prefix caching, cancellation, stop strings, max_tokens, seeds, bad input; no KV block
 *    is left in use after any test.
 * The model path comes from scripts/find_smollm2.sh (the venv of scripts/setup.sh) or
 * $CINFER_SMOLLM2_GGUF. The engine runs with manual_step so the tests are deterministic
 * and need no waiting. */
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
#include "backends/llm/tokenizer.h"
#include "llm_golden.h"
#include "utf8_check.h"

#ifndef LLM_Q4KM_PATH
#define LLM_Q4KM_PATH "build/smollm2-q4km.gguf"
#endif

static char g_model[4096];
static const char *model_path(void) { return golden_model_path(g_model, sizeof g_model, "CINFER_SMOLLM2_GGUF", "find_smollm2.sh", "SmolLM2"); }

static llm_engine *make_engine(int kv_blocks, int max_step_tokens, bool prefix) {
  llm_engine_opts o = {.threads = 1, .ctx_len = 512, .kv_blocks = kv_blocks, .block_size = 16, .max_seqs = 8,
                       .max_step_tokens = max_step_tokens, .manual_step = true, .no_prefix_cache = !prefix};
  llm_engine *e;
  cinfer_status *st = llm_engine_create(model_path(), &o, &e);
  if (st) fail_msg("engine: %s", cinfer_status_message(st));
  return e;
}

/* ---- tokenizer ---- */
static void test_tokenizer_fixtures(void **s) {
  llm_gguf *g;
  llm_tokenizer *t;
  assert_null(llm_gguf_open(model_path(), &g));
  assert_null(llm_tokenizer_create(g, &t));
  cJSON *j = load_json("tokenizer_smollm2.json");
  cJSON *cases = cJSON_GetObjectItem(j, "cases");
  int n_cases = 0;
  cJSON *c;
  cJSON_ArrayForEach(c, cases) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    bool special = cJSON_IsTrue(cJSON_GetObjectItem(c, "special"));
    int nw;
    int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids"), &nw);
    int32_t *got;
    size_t ng;
    assert_null(llm_tokenize(t, text, strlen(text), false, special, &got, &ng));
    bool same = ng == (size_t)nw && !memcmp(got, want, ng * 4);
    if (!same) {
      fprintf(stderr, "text: %s\nwant:", text);
      for (int i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
      fprintf(stderr, "\ngot: ");
      for (size_t i = 0; i < ng; i++) fprintf(stderr, " %d", got[i]);
      fprintf(stderr, "\n");
      fail_msg("tokenization differs from llama.cpp");
    }
    /* streaming detokenisation: complete UTF-8 chunks whose concatenation is the text */
    char out[4096];
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
  assert_true(n_cases >= 20);
  cJSON_Delete(j);
  /* invalid UTF-8 is an error naming the byte */
  int32_t *ids;
  size_t n;
  cinfer_status *st = llm_tokenize(t, "ok\xff", 3, false, false, &ids, &n);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "invalid UTF-8 at byte 2"));
  cinfer_status_free(st);
  llm_tokenizer_destroy(t);
  llm_gguf_close(g);
}

static void test_chat_template(void **s) {
  llm_engine *e = make_engine(64, 256, true);
  const char *roles[] = {"user"}, *contents[] = {"What is the capital of France?"};
  char *out;
  assert_null(llm_engine_chat_render(e, roles, contents, 1, true, &out));
  cJSON *j = load_json("tokenizer_smollm2.json");
  cJSON *c, *chat = NULL;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) if (cJSON_IsTrue(cJSON_GetObjectItem(c, "special"))) chat = c;
  assert_non_null(chat);
  assert_string_equal(out, cJSON_GetObjectItem(chat, "text")->valuestring);
  free(out);
  cJSON_Delete(j);
  llm_engine_destroy(e);
  /* an override is a Jinja template too; one using a construct the renderer lacks fails the
   * engine's creation, naming the construct */
  llm_engine_opts o = {.threads = 1, .ctx_len = 64, .kv_blocks = 8, .manual_step = true,
                       .chat_template = "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}{% endfor %}"};
  assert_null(llm_engine_create(model_path(), &o, &e));
  assert_null(llm_engine_chat_render(e, roles, contents, 1, true, &out));
  assert_string_equal(out, "[USER] What is the capital of France?");
  free(out);
  llm_engine_destroy(e);
  o.chat_template = "{% macro f() %}{% endmacro %}";
  cinfer_status *st = llm_engine_create(model_path(), &o, &e);
  assert_non_null(st);
  assert_null(e);
  assert_non_null(strstr(cinfer_status_message(st), "unsupported Jinja statement 'macro'"));
  assert_non_null(strstr(cinfer_status_message(st), "chat_template"));
  cinfer_status_free(st);
}

/* ---- greedy golden ---- */

static int load_golden(gcase *gc, cJSON **keep) { return load_golden_file("greedy_smollm2.json", gc, keep); }

static void test_greedy_single(void **s) {
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  assert_true(n >= 4);
  llm_engine *e = make_engine(256, 512, false);
  static collect col;
  for (int i = 0; i < n; i++) {
    submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col);
    run_all(e);
    check_case(&gc[i], &col);
  }
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_greedy_batched_chunked(void **s) {
  /* all prompts at once, small step budget: chunked prefill interleaved with decodes */
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  llm_engine *e = make_engine(256, 24, true);
  static collect col[16];
  for (int i = 0; i < n; i++) submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col[i]);
  run_all(e);
  for (int i = 0; i < n; i++) check_case(&gc[i], &col[i]);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_greedy_preemption(void **s) {
  /* KV cache too small for all sequences at once: preemption + recompute, same ids */
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  int maxb = 0;
  for (int i = 0; i < n; i++) {
    int b = (gc[i].n_prompt + gc[i].n_want + 15) / 16;
    if (b > maxb) maxb = b;
  }
  llm_engine *e = make_engine(maxb + 3, 512, true);
  static collect col[16];
  for (int i = 0; i < n; i++) submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col[i]);
  run_all(e);
  for (int i = 0; i < n; i++) check_case(&gc[i], &col[i]);
  llm_engine_stats st;
  llm_engine_get_stats(e, &st);
  assert_true(st.preemptions_total > 0);
  assert_int_equal(st.requests_finished_total, n);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_greedy_kquant(void **s) {
  /* SmolLM2 requantised by llama.cpp to Q4_K_M (Q4_K, Q6_K, Q5_0, Q8_0 weights): made by the
   * ctest fixture llm_make_kquant (tests/data/llm/make_kquant.py) */
  const char *path = getenv("CINFER_SMOLLM2_Q4KM_GGUF");
  if (!path) path = LLM_Q4KM_PATH;
  gcase gc[8];
  cJSON *j;
  int n = load_golden_file("greedy_smollm2_q4km.json", gc, &j);
  assert_true(n >= 2);
  llm_engine_opts o = {.threads = 1, .ctx_len = 256, .kv_blocks = 64, .max_seqs = 4, .manual_step = true};
  llm_engine *e;
  cinfer_status *st = llm_engine_create(path, &o, &e);
  if (st) fail_msg("%s (run the llm_make_kquant test first)", cinfer_status_message(st));
  static collect col[8];
  for (int i = 0; i < n; i++) submit_ids(e, gc[i].prompt, gc[i].n_prompt, greedy(gc[i].n_want), &col[i]);
  run_all(e);
  for (int i = 0; i < n; i++) check_case(&gc[i], &col[i]);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_prefix_cache(void **s) {
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  const gcase *chat = NULL;
  for (int i = 0; i < n; i++)
    if (strstr(gc[i].name, "chat")) chat = &gc[i];
  assert_non_null(chat);
  llm_engine *e = make_engine(64, 512, true);
  static collect c1, c2;
  submit_ids(e, chat->prompt, chat->n_prompt, greedy(chat->n_want), &c1);
  run_all(e);
  check_case(chat, &c1);
  assert_int_equal(c1.final.cached_tokens, 0);
  submit_ids(e, chat->prompt, chat->n_prompt, greedy(chat->n_want), &c2);
  run_all(e);
  check_case(chat, &c2); /* same result from the shared blocks */
  /* full blocks are shared; the prompt's last, partial block was also cached if the first
   * sequence went on to fill it (it computed n_prompt + n_want - 1 positions): then its rows
   * are copied and only the prompt's last token is computed */
  int full = (chat->n_prompt - 1) / 16;
  bool tail_cached = (full + 1) * 16 <= chat->n_prompt + chat->n_want - 1;
  assert_true(tail_cached); /* the fixture is long enough to exercise the copy */
  assert_int_equal(c2.final.cached_tokens, chat->n_prompt - 1);
  assert_true(full > 0);
  llm_engine_stats st;
  llm_engine_get_stats(e, &st);
  assert_int_equal(st.prefix_hits_total, (uint64_t)c2.final.cached_tokens);
  assert_int_equal(st.prefix_queries_total, (uint64_t)chat->n_prompt * 2);
  assert_true(st.kv_blocks_cached > 0);
  /* a shorter prompt (the same minus its last 2 tokens) copies a shorter part of that block;
   * its greedy ids equal those of an engine without prefix caching, which computes all */
  int n3 = chat->n_prompt - 2;
  static collect c3, c4;
  submit_ids(e, chat->prompt, n3, greedy(8), &c3);
  run_all(e);
  assert_int_equal(c3.final.cached_tokens, n3 - 1);
  llm_engine *plain = make_engine(64, 512, false);
  submit_ids(plain, chat->prompt, n3, greedy(8), &c4);
  run_all(plain);
  assert_int_equal(c4.final.cached_tokens, 0);
  assert_int_equal(c3.n_ids, c4.n_ids);
  assert_memory_equal(c3.ids, c4.ids, (size_t)c3.n_ids * sizeof c3.ids[0]);
  for (int i = 0; i < c3.n_ids; i++) assert_true(c3.lp[i] == c4.lp[i]); /* bit for bit */
  llm_engine_destroy(plain);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_cancel_stop_length(void **s) {
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  llm_engine *e = make_engine(64, 512, true);
  static collect c1, c2, c3;
  /* cancel after a few steps: final CANCELLED, blocks freed */
  uint64_t id = submit_ids(e, gc[0].prompt, gc[0].n_prompt, greedy(100), &c1);
  llm_engine_step(e);
  llm_engine_step(e);
  assert_null(llm_engine_cancel(e, id));
  run_all(e);
  assert_int_equal(c1.n_final, 1);
  assert_int_equal(c1.final.finish, LLM_FINISH_CANCELLED);
  cinfer_status *st = llm_engine_cancel(e, id);
  assert_int_equal(cinfer_status_code(st), CINFER_NOT_FOUND);
  cinfer_status_free(st);
  /* max_tokens: exactly that many tokens, finish length, prefix of the greedy ids */
  submit_ids(e, gc[0].prompt, gc[0].n_prompt, greedy(5), &c2);
  run_all(e);
  assert_int_equal(c2.final.finish, LLM_FINISH_LENGTH);
  assert_int_equal(c2.n_ids, 5);
  assert_memory_equal(c2.ids, gc[0].want, 5 * 4);
  assert_int_equal(c2.final.completion_tokens, 5);
  assert_int_equal(c2.final.prompt_tokens, gc[0].n_prompt);
  /* stop string: take a piece of the full greedy text; output ends right before it */
  collect full;
  submit_ids(e, gc[0].prompt, gc[0].n_prompt, greedy(gc[0].n_want), &full);
  run_all(e);
  assert_true(full.text_n > 12);
  char stop[8];
  memcpy(stop, full.text + 8, 4);
  stop[4] = 0;
  const char *stops[] = {"zzzz-never", stop};
  llm_sampling sp = greedy(gc[0].n_want);
  sp.stop = stops;
  sp.n_stop = 2;
  submit_ids(e, gc[0].prompt, gc[0].n_prompt, sp, &c3);
  run_all(e);
  assert_int_equal(c3.final.finish, LLM_FINISH_STOP);
  const char *first = strstr(full.text, stop);
  assert_non_null(first);
  assert_int_equal(c3.text_n, (size_t)(first - full.text));
  assert_memory_equal(c3.text, full.text, c3.text_n);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static void test_sampling_seed_logprobs(void **s) {
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  llm_engine *e = make_engine(64, 512, true);
  static collect a, b, c;
  llm_sampling sp;
  llm_sampling_default(&sp);
  sp.temperature = 0.9f;
  sp.top_k = 40;
  sp.top_p = 0.95f;
  sp.min_p = 0.02f;
  sp.repetition_penalty = 1.1f;
  sp.seed = 1234;
  sp.max_tokens = 12;
  submit_ids(e, gc[1].prompt, gc[1].n_prompt, sp, &a);
  submit_ids(e, gc[1].prompt, gc[1].n_prompt, sp, &b); /* same step, same seed */
  run_all(e);
  assert_int_equal(a.n_ids, b.n_ids);
  assert_memory_equal(a.ids, b.ids, (size_t)a.n_ids * 4);
  /* asking for logprobs does not change greedy decoding */
  llm_sampling g = greedy(4);
  g.logprobs = 3;
  submit_ids(e, gc[0].prompt, gc[0].n_prompt, g, &c);
  run_all(e);
  assert_memory_equal(c.ids, gc[0].want, 4 * 4);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

static int lp_checked;
static void on_lp(void *u, const llm_event *ev) {
  if (ev->token < 0) return;
  assert_int_equal(ev->n_top, 3);
  assert_int_equal(ev->top[0].id, ev->token);
  assert_true(ev->logprob <= 0 && ev->logprob == ev->top[0].logprob);
  assert_true(ev->top[0].logprob >= ev->top[1].logprob && ev->top[1].logprob >= ev->top[2].logprob);
  lp_checked++;
}

static void test_logprobs(void **s) {
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  llm_engine *e = make_engine(64, 512, true);
  llm_sampling g = greedy(4);
  g.logprobs = 3;
  llm_request r = {.tokens = gc[0].prompt, .n_tokens = (size_t)gc[0].n_prompt, .sampling = g};
  assert_null(llm_engine_submit(e, &r, on_lp, NULL, NULL));
  run_all(e);
  assert_int_equal(lp_checked, 4);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

/* ---- gauges ---- */
/* What a sequence's final event sees in the engine's gauges: its own sequence already out
 * of running and waiting (they are published before the event, so a client holding its
 * response never reads itself as still running; /metrics reads these). */
typedef struct {
  llm_engine *e;
  int finals, running[4], waiting[4];
  uint64_t finished[4];
} gauge_seen;

static void on_gauge(void *u, const llm_event *ev) {
  gauge_seen *g = u;
  if (ev->finish == LLM_FINISH_NONE || g->finals >= 4) return;
  llm_engine_stats st;
  llm_engine_get_stats(g->e, &st);
  g->running[g->finals] = st.running;
  g->waiting[g->finals] = st.waiting;
  g->finished[g->finals] = st.requests_finished_total;
  g->finals++;
}

static void test_gauges_published_before_final_event(void **s) {
  gcase gc[16];
  cJSON *j;
  int n = load_golden(gc, &j);
  llm_engine *e = make_engine(64, 512, false);
  gauge_seen g = {.e = e};
  /* two sequences running together: the short one ends first, the long one after */
  llm_request r1 = {.tokens = gc[0].prompt, .n_tokens = (size_t)gc[0].n_prompt, .sampling = greedy(2)};
  llm_request r2 = {.tokens = gc[1].prompt, .n_tokens = (size_t)gc[1].n_prompt, .sampling = greedy(6)};
  assert_null(llm_engine_submit(e, &r1, on_gauge, &g, NULL));
  assert_null(llm_engine_submit(e, &r2, on_gauge, &g, NULL));
  run_all(e);
  assert_int_equal(g.finals, 2);
  assert_int_equal(g.running[0], 1); /* the long one still runs */
  assert_int_equal(g.waiting[0], 0);
  assert_int_equal(g.running[1], 0);
  assert_int_equal(g.waiting[1], 0);
  assert_int_equal(g.finished[0], 1);
  assert_int_equal(g.finished[1], 2);
  llm_engine_destroy(e);
  free_golden(gc, n, j);
}

/* ---- prompt logprobs ---- */
typedef struct plp_collect {
  int n, last_pos, dup_or_disorder;
  int32_t tok[512];
  float lp[512];
  int32_t best[512];
  bool seen[512];
  int n_final;
} plp_collect;

static void on_plp(void *u, const llm_event *ev) {
  plp_collect *c = u;
  if (ev->finish != LLM_FINISH_NONE) {
    c->n_final++;
    return;
  }
  if (!ev->prompt) return;
  assert_true(ev->pos > 0 && ev->pos < 512);
  assert_string_equal(ev->text, "");
  if (ev->pos <= c->last_pos || c->seen[ev->pos]) c->dup_or_disorder++;
  c->last_pos = ev->pos;
  c->seen[ev->pos] = true;
  c->tok[ev->pos] = ev->token;
  c->lp[ev->pos] = ev->logprob;
  c->best[ev->pos] = ev->n_top ? ev->top[0].id : -1;
  assert_true(ev->logprob <= 0);
  for (int i = 1; i < ev->n_top; i++) assert_true(ev->top[i - 1].logprob >= ev->top[i].logprob);
  c->n++;
}

static void run_plp(llm_engine *e, const int32_t *ids, int n, plp_collect *c) {
  memset(c, 0, sizeof *c);
  llm_sampling sp = greedy(1);
  sp.logprobs = 3;
  sp.prompt_logprobs = true;
  llm_request r = {.tokens = ids, .n_tokens = (size_t)n, .sampling = sp};
  assert_null(llm_engine_submit(e, &r, on_plp, c, NULL));
  run_all(e);
  assert_int_equal(c->n_final, 1);
  assert_int_equal(c->dup_or_disorder, 0);
  assert_int_equal(c->n, n - 1); /* every prompt position after the first, once */
  for (int p = 1; p < n; p++) {
    assert_true(c->seen[p]);
    assert_int_equal(c->tok[p], ids[p]);
  }
}

/* The logprob the engine reports for a prompt token equals the one it reported when it
 * generated that token: greedy-generate 8 tokens after a fixture prompt, then score prompt +
 * those tokens as a prompt. Repeated on an engine whose prefix cache holds the prompt (it
 * must be computed anyway) and with prefill chunks of 16 tokens (rows cut by the budget). */
static void test_prompt_logprobs(void **s) {
  gcase gc[16];
  cJSON *j;
  int ng = load_golden(gc, &j);
  llm_engine *e = make_engine(64, 512, true);
  collect gen;
  submit_ids(e, gc[0].prompt, gc[0].n_prompt, greedy(8), &gen);
  run_all(e);
  assert_int_equal(gen.n_ids, 8);
  int n = gc[0].n_prompt + 8;
  int32_t ids[512];
  memcpy(ids, gc[0].prompt, (size_t)gc[0].n_prompt * sizeof *ids);
  memcpy(ids + gc[0].n_prompt, gen.ids, 8 * sizeof *ids);
  static plp_collect a, b, c;
  run_plp(e, ids, n, &a);
  for (int i = 0; i < 8; i++) {
    int p = gc[0].n_prompt + i;
    assert_true(fabsf(a.lp[p] - gen.lp[i]) < 2e-3f);
    assert_int_equal(a.best[p], gen.top_id[i][0]);
  }
  run_plp(e, ids, n, &b); /* the prompt's blocks are in the prefix cache now */
  for (int p = 1; p < n; p++) assert_true(fabsf(a.lp[p] - b.lp[p]) < 1e-4f);
  llm_engine_destroy(e);
  e = make_engine(64, 16, true);
  run_plp(e, ids, n, &c);
  for (int p = 1; p < n; p++) assert_true(fabsf(a.lp[p] - c.lp[p]) < 2e-3f);
  llm_engine_destroy(e);
  free_golden(gc, ng, j);
}

static void test_bad_input(void **s) {
  llm_engine *e = make_engine(8, 64, true);
  collect c;
  llm_request r = {.prompt = "hello", .prompt_len = 5, .sampling = greedy(0)};
  cinfer_status *st = llm_engine_submit(e, &r, on_ev, &c, NULL);
  assert_non_null(strstr(cinfer_status_message(st), "max_tokens"));
  cinfer_status_free(st);
  r.sampling = greedy(4);
  r.sampling.top_p = 0;
  st = llm_engine_submit(e, &r, on_ev, &c, NULL);
  assert_non_null(strstr(cinfer_status_message(st), "top_p"));
  cinfer_status_free(st);
  r.sampling = greedy(4);
  r.sampling.temperature = -1;
  st = llm_engine_submit(e, &r, on_ev, &c, NULL);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  cinfer_status_free(st);
  /* prompt longer than the context / KV cache */
  static char longp[20000];
  for (int i = 0; i < 4000; i++) memcpy(longp + i * 4, " cat", 4);
  r = (llm_request){.prompt = longp, .prompt_len = 16000, .sampling = greedy(4)};
  st = llm_engine_submit(e, &r, on_ev, &c, NULL);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_non_null(strstr(cinfer_status_message(st), "prompt has"));
  cinfer_status_free(st);
  int32_t bad = 999999;
  r = (llm_request){.tokens = &bad, .n_tokens = 1, .sampling = greedy(4)};
  st = llm_engine_submit(e, &r, on_ev, &c, NULL);
  assert_non_null(strstr(cinfer_status_message(st), "out of range"));
  cinfer_status_free(st);
  run_all(e);
  llm_engine_destroy(e);
  /* a missing file / not a GGUF */
  llm_engine_opts o = {.threads = 1};
  st = llm_engine_create("/nonexistent.gguf", &o, &e);
  assert_int_equal(cinfer_status_code(st), CINFER_NOT_FOUND);
  assert_null(e);
  cinfer_status_free(st);
  st = llm_engine_create(LLM_TEST_DATA "/make_fixtures.py", &o, &e);
  assert_non_null(strstr(cinfer_status_message(st), "bad magic"));
  cinfer_status_free(st);
  llm_engine_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tokenizer_fixtures),  cmocka_unit_test(test_chat_template),
      cmocka_unit_test(test_greedy_single),       cmocka_unit_test(test_greedy_batched_chunked),
      cmocka_unit_test(test_greedy_preemption),   cmocka_unit_test(test_greedy_kquant),
      cmocka_unit_test(test_prefix_cache),
      cmocka_unit_test(test_cancel_stop_length),  cmocka_unit_test(test_sampling_seed_logprobs),
      cmocka_unit_test(test_logprobs),            cmocka_unit_test(test_prompt_logprobs),
      cmocka_unit_test(test_gauges_published_before_final_event),
      cmocka_unit_test(test_bad_input),
  };
  int rc;
  if (getenv("CINFER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINFER_TEST_FILTER")); /* e.g. "test_greedy*" */
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  fprintf(stderr, "golden positions identical to llama.cpp: %d of %d compared\n", g_exact_positions,
          g_total_positions);
  return rc;
}
