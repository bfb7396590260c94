/* test_llm_backend.c: the llm backend through the server's one request path (cinfer.h),
 * with the real SmolLM2 GGUF: the streamed response protocol of llm_backend.h, the whole
 * (KServe) form, cancellation of a running and of a queued request, the prompt-length
 * error, statistics, and the optional text methods of backend.h (ABI 1.1) with their
 * "not supported" default on a backend without them (identity). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cinfer/cinfer.h"

static char g_model[4096];
static char g_repo[256];
static cinfer_server *g_srv;

static const char *model_path(void) {
  const char *env = getenv("CINFER_SMOLLM2_GGUF");
  if (env) return env;
  FILE *p = popen(LLM_SOURCE_DIR "/scripts/find_smollm2.sh \"" LLM_BINARY_DIR "\" 2>/dev/null", "r");
  if (p && fgets(g_model, sizeof g_model, p)) g_model[strcspn(g_model, "\n")] = 0;
  if (p) pclose(p);
  if (!g_model[0]) { /* the example repository's link (scripts/setup.sh makes it) */
    char *rp = realpath(LLM_SOURCE_DIR "/examples/model_repository/smollm2/1/model.gguf", NULL);
    if (rp) snprintf(g_model, sizeof g_model, "%s", rp);
    free(rp);
  }
  return g_model;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  (void)state;
  const char *gguf = model_path();
  if (!gguf[0]) {
    fprintf(stderr, "SmolLM2 GGUF not found: run scripts/setup.sh or set CINFER_SMOLLM2_GGUF\n");
    return -1;
  }
  snprintf(g_repo, sizeof g_repo, "/tmp/cinfer-llmb-XXXXXX");
  if (!mkdtemp(g_repo)) return -1;
  char p[512];
  snprintf(p, sizeof p, "%s/smollm2", g_repo);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/smollm2/1", g_repo);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/smollm2/1/model.gguf", g_repo);
  if (symlink(gguf, p)) return -1;
  snprintf(p, sizeof p, "%s/smollm2/config.pbtxt", g_repo);
  write_file(p, "name: \"smollm2\"\nbackend: \"llm\"\nmax_batch_size: 0\n"
                "parameters { key: \"ctx_len\" value: { string_value: \"256\" } }\n"
                "parameters { key: \"max_seqs\" value: { string_value: \"8\" } }\n");
  snprintf(p, sizeof p, "%s/identity", g_repo);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/identity/1", g_repo);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/identity/config.pbtxt", g_repo);
  write_file(p, "name: \"identity\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
                "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
                "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n");
  cinfer_server_options o = {.model_repository = g_repo, .threads = 2};
  cinfer_status *st = cinfer_server_create(&o, &g_srv);
  if (st) {
    fprintf(stderr, "%s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  /* A FINAL callback runs before the worker counts the request done: destroy once the
   * server has nothing in flight (bounded). */
  for (long i = 0; i < 100000000 && cinfer_server_inflight(g_srv) != 0; i++) sched_yield();
  cinfer_server_destroy(g_srv);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_repo);
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- a collecting response callback --------------------------------------------------- */

typedef struct collect {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int responses, tokens[4], finishes[4], usage_completion[4];
  char text[4][4096];
  size_t text_len[4];
  bool final, final_had_outputs;
  cinfer_code final_code;
  char final_msg[512];
} collect;

static const cinfer_tensor *out_named(const cinfer_response *r, const char *name) {
  for (uint32_t i = 0; i < cinfer_response_output_count(r); i++)
    if (!strcmp(cinfer_response_output(r, i)->name, name)) return cinfer_response_output(r, i);
  return NULL;
}

static const char *bytes0(const cinfer_tensor *t, size_t *len) {
  uint32_t l;
  memcpy(&l, t->data, 4);
  *len = l;
  return (const char *)t->data + 4;
}

static void on_resp(void *user, cinfer_response *resp, uint32_t flags) {
  collect *c = user;
  pthread_mutex_lock(&c->mu);
  if (flags & CINFER_RESPONSE_FINAL) {
    const cinfer_status *e = cinfer_response_error(resp);
    c->final_code = cinfer_status_code(e);
    snprintf(c->final_msg, sizeof c->final_msg, "%s", cinfer_status_message(e));
    c->final_had_outputs = cinfer_response_output_count(resp) > 0;
    const cinfer_tensor *t = out_named(resp, "text_output");
    if (t && !out_named(resp, "index")) { /* whole mode */
      size_t l;
      const char *s = bytes0(t, &l);
      memcpy(c->text[0], s, l < 4095 ? l : 4095);
      c->text_len[0] = l;
    }
    c->final = true;
  } else {
    c->responses++;
    const cinfer_tensor *idx = out_named(resp, "index"), *tok = out_named(resp, "token_id");
    const cinfer_tensor *txt = out_named(resp, "text_output");
    assert_non_null(idx);
    assert_non_null(tok);
    assert_non_null(txt);
    int i = *(const int32_t *)idx->data;
    assert_true(i >= 0 && i < 4);
    if (*(const int32_t *)tok->data >= 0) c->tokens[i]++;
    size_t l;
    const char *s = bytes0(txt, &l);
    if (c->text_len[i] + l < sizeof c->text[i]) memcpy(c->text[i] + c->text_len[i], s, l), c->text_len[i] += l;
    const cinfer_tensor *fin = out_named(resp, "finish_reason"), *use = out_named(resp, "usage");
    if (fin) {
      c->finishes[i]++;
      assert_non_null(use);
      assert_int_equal(use->shape[0], 3);
      c->usage_completion[i] = ((const int32_t *)use->data)[1];
    }
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  cinfer_response_free(resp);
}

/* Waits (bounded: a hang fails instead of blocking ctest) until pred holds. */
static bool wait_for(collect *c, bool (*pred)(const collect *)) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 120;
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  while (!pred(c) && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
  bool ok = pred(c);
  pthread_mutex_unlock(&c->mu);
  return ok;
}

static bool is_final(const collect *c) { return c->final; }
static bool three_tokens(const collect *c) { return c->tokens[0] >= 3 || c->final; }

static collect *collect_new(void) {
  collect *c = calloc(1, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  return c;
}

static void collect_free(collect *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static cinfer_model *acquire(const char *name) {
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(g_srv, name, 0, &m);
  if (st) fail_msg("%s", cinfer_status_message(st));
  return m;
}

/* A request for prompt with the given int/bool parameters ("k=v" strings; v true/false for
 * bools, a number otherwise). */
static cinfer_request *make_req(cinfer_model *m, const char *prompt, collect *c, ...) {
  cinfer_request *r;
  assert_null(cinfer_request_create(m, &r));
  size_t pl = strlen(prompt);
  unsigned char *buf = malloc(4 + pl);
  uint32_t l = (uint32_t)pl;
  memcpy(buf, &l, 4);
  memcpy(buf + 4, prompt, pl);
  cinfer_tensor t = {.name = "text_input", .dtype = CINFER_TYPE_BYTES, .ndim = 1, .shape = {1},
                     .data = buf, .byte_size = 4 + pl};
  assert_null(cinfer_request_add_input_owned(r, &t, buf));
  va_list ap;
  va_start(ap, c);
  for (const char *kv; (kv = va_arg(ap, const char *));) {
    char key[64];
    const char *eq = strchr(kv, '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    cinfer_status *st;
    if (!strcmp(eq + 1, "true") || !strcmp(eq + 1, "false")) st = cinfer_request_set_param_bool(r, key, eq[1] == 't');
    else if (strchr(eq + 1, '.')) st = cinfer_request_set_param_double(r, key, atof(eq + 1));
    else st = cinfer_request_set_param_int(r, key, atoll(eq + 1));
    assert_null(st);
  }
  va_end(ap);
  cinfer_request_set_callback(r, on_resp, c);
  return r;
}

static void stats(const char *name, uint64_t *ok, uint64_t *fail) {
  cinfer_model_stats *a;
  size_t n;
  assert_null(cinfer_server_model_stats(g_srv, name, 0, &a, &n));
  assert_int_equal(n, 1);
  *ok = a[0].success.count;
  *fail = a[0].fail.count;
  free(a);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_stream_protocol_two_choices(void **state) {
  (void)state;
  cinfer_model *m = acquire("smollm2");
  uint64_t ok0, fail0, ok1, fail1;
  stats("smollm2", &ok0, &fail0);
  collect *c = collect_new();
  cinfer_request *r = make_req(m, "The capital of France is", c, "stream=true", "n=2", "max_tokens=5",
                               "temperature=0.0", "ignore_eos=true", "seed=7", NULL);
  assert_null(cinfer_server_infer_async(g_srv, r));
  assert_true(wait_for(c, is_final));
  assert_int_equal(c->final_code, CINFER_OK);
  assert_false(c->final_had_outputs); /* the last token response came before it */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c->tokens[i], 5);
    assert_int_equal(c->finishes[i], 1);
    assert_int_equal(c->usage_completion[i], 5);
  }
  /* greedy: both choices say the same */
  assert_int_equal(c->text_len[0], c->text_len[1]);
  assert_memory_equal(c->text[0], c->text[1], c->text_len[0]);
  stats("smollm2", &ok1, &fail1);
  assert_int_equal(ok1, ok0 + 1);
  assert_int_equal(fail1, fail0);
  cinfer_request_release(r);
  collect_free(c);
  cinfer_model_release(m);
}

static void test_whole_text_matches_stream(void **state) {
  (void)state;
  cinfer_model *m = acquire("smollm2");
  collect *a = collect_new(), *b = collect_new();
  cinfer_request *ra = make_req(m, "Once upon a time", a, "stream=true", "max_tokens=12", "temperature=0.0", NULL);
  cinfer_request *rb = make_req(m, "Once upon a time", b, "max_tokens=12", "temperature=0.0", NULL);
  assert_null(cinfer_server_infer_async(g_srv, ra));
  assert_null(cinfer_server_infer_async(g_srv, rb));
  assert_true(wait_for(a, is_final));
  assert_true(wait_for(b, is_final));
  assert_int_equal(a->final_code, CINFER_OK);
  assert_int_equal(b->final_code, CINFER_OK);
  assert_true(b->final_had_outputs);
  assert_true(a->text_len[0] > 0);
  assert_int_equal(a->text_len[0], b->text_len[0]);
  assert_memory_equal(a->text[0], b->text[0], a->text_len[0]);
  cinfer_request_release(ra);
  cinfer_request_release(rb);
  collect_free(a);
  collect_free(b);
  cinfer_model_release(m);
}

static void test_cancel_running_request_stops_generation(void **state) {
  (void)state;
  cinfer_model *m = acquire("smollm2");
  uint64_t ok0, fail0, ok1, fail1;
  stats("smollm2", &ok0, &fail0);
  collect *c = collect_new();
  cinfer_request *r = make_req(m, "Write a long story.", c, "stream=true", "max_tokens=200",
                               "temperature=0.8", "ignore_eos=true", NULL);
  assert_null(cinfer_server_infer_async(g_srv, r));
  assert_true(wait_for(c, three_tokens));
  cinfer_request_cancel(r);
  assert_true(wait_for(c, is_final));
  assert_int_equal(c->final_code, CINFER_CANCELLED);
  assert_true(c->tokens[0] < 200);
  assert_int_equal(c->finishes[0], 0); /* no "stop"/"length" for a cancelled choice */
  stats("smollm2", &ok1, &fail1);
  assert_int_equal(ok1, ok0);
  assert_int_equal(fail1, fail0 + 1);
  cinfer_request_release(r);
  collect_free(c);
  cinfer_model_release(m);
}

static void test_cancel_before_submit(void **state) {
  (void)state;
  cinfer_model *m = acquire("smollm2");
  collect *c = collect_new();
  cinfer_request *r = make_req(m, "Hello", c, "stream=true", "max_tokens=50", NULL);
  cinfer_request_cancel(r);
  assert_null(cinfer_server_infer_async(g_srv, r));
  assert_true(wait_for(c, is_final));
  assert_int_equal(c->final_code, CINFER_CANCELLED);
  assert_int_equal(c->tokens[0], 0);
  cinfer_request_release(r);
  collect_free(c);
  cinfer_model_release(m);
}

static void test_errors_are_final_responses(void **state) {
  (void)state;
  cinfer_model *m = acquire("smollm2");
  char prompt[8192] = "";
  for (int i = 0; i < 400; i++) strcat(prompt, "hello ");
  collect *c = collect_new();
  cinfer_request *r = make_req(m, prompt, c, "max_tokens=4", NULL);
  assert_null(cinfer_server_infer_async(g_srv, r));
  assert_true(wait_for(c, is_final));
  assert_int_equal(c->final_code, CINFER_INVALID_ARG);
  assert_non_null(strstr(c->final_msg, "maximum context length is 256"));
  cinfer_request_release(r);
  collect_free(c);
  /* a sampling value out of range, n > 1 without stream */
  const char *bad[][2] = {{"temperature=-1.0", "temperature"}, {"n=2", "'n'"}, {"n=17", "'n'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    c = collect_new();
    r = make_req(m, "Hi", c, bad[i][0], NULL);
    assert_null(cinfer_server_infer_async(g_srv, r));
    assert_true(wait_for(c, is_final));
    assert_int_equal(c->final_code, CINFER_INVALID_ARG);
    assert_non_null(strstr(c->final_msg, bad[i][1]));
    cinfer_request_release(r);
    collect_free(c);
  }
  cinfer_model_release(m);
}

static void test_text_methods_and_defaults(void **state) {
  (void)state;
  cinfer_model *m = acquire("smollm2");
  assert_true(cinfer_model_is_generative(m));
  assert_true(cinfer_model_supports_chat(m));
  int32_t *ids;
  size_t n;
  const char *text = "Hello, world!";
  assert_null(cinfer_model_tokenize(m, text, strlen(text), false, false, &ids, &n));
  assert_true(n > 1);
  char *back;
  size_t bl;
  assert_null(cinfer_model_detokenize(m, ids, n, false, &back, &bl));
  assert_int_equal(bl, strlen(text));
  assert_memory_equal(back, text, bl);
  free(back);
  free(ids);
  const char *roles[] = {"user"}, *contents[] = {"Hi"};
  char *chat;
  assert_null(cinfer_model_render_chat(m, roles, contents, 1, true, &chat));
  assert_non_null(strstr(chat, "Hi"));
  free(chat);
  cinfer_backend_metric bm[64];
  uint32_t k = cinfer_model_backend_metrics(m, bm, 64);
  assert_true(k > 0 && k <= 64);
  bool found = false;
  for (uint32_t i = 0; i < k; i++) found |= !strcmp(bm[i].name, "cinfer_llm_generation_tokens_total") && bm[i].value > 0;
  assert_true(found);
  cinfer_model_release(m);

  /* identity has none of the optional methods: each answers UNSUPPORTED naming the model */
  m = acquire("identity");
  assert_false(cinfer_model_is_generative(m));
  assert_false(cinfer_model_supports_chat(m));
  cinfer_status *st = cinfer_model_tokenize(m, "x", 1, false, false, &ids, &n);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  assert_non_null(strstr(cinfer_status_message(st), "model 'identity' does not support"));
  assert_null(ids);
  cinfer_status_free(st);
  int32_t one = 1;
  st = cinfer_model_detokenize(m, &one, 1, false, &back, &bl);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  cinfer_status_free(st);
  st = cinfer_model_render_chat(m, roles, contents, 1, true, &chat);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  cinfer_status_free(st);
  assert_int_equal(cinfer_model_backend_metrics(m, bm, 16), 0);
  cinfer_model_release(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_protocol_two_choices),
      cmocka_unit_test(test_whole_text_matches_stream),
      cmocka_unit_test(test_cancel_running_request_stops_generation),
      cmocka_unit_test(test_cancel_before_submit),
      cmocka_unit_test(test_errors_are_final_responses),
      cmocka_unit_test(test_text_methods_and_defaults),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
