/* conv.c: `--conversation` (OpenAI chat): one multi-turn conversation per user (connection).
 *
 * Every conversation begins with the same system prompt (--system-prompt-len words, seeded by
 * --seed: shared by all users, as an application's instructions are), then alternates a user
 * turn (--prompt-len words drawn from the user's own generator) and the assistant's answer as
 * the server gave it (streamed deltas or the whole message), so each request carries the
 * whole history and the server's prefix cache can reuse the previous turn. After --turns
 * answers the user starts a new conversation. Between an answer and the next turn the user
 * thinks for --think-ms, drawn uniformly in [0.5, 1.5] x the mean (users start spread over
 * [0, 1] x the mean so they do not arrive together), each at a random turn of its first
 * conversation with a made-up earlier history (bench_conv_start). A refused or failed turn is
 * asked again after the think time, with the same history.
 *
 * Unlike the pre-serialised modes, each turn's request is built when it is sent (a few
 * allocations per request: at LLM request rates this is not the bottleneck). */
#include "bench/bench_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *const conv_words[] = {
    "history", "science", "music", "art", "travel", "food", "weather", "river", "mountain", "city",
    "garden", "planet", "ocean", "language", "machine", "friend", "winter", "summer", "market", "library",
    "train", "bridge", "forest", "recipe", "season", "festival", "painting", "island", "desert", "castle",
    "museum", "village"};
#define N_WORDS (sizeof conv_words / sizeof conv_words[0])

static void add_words(cbuf *b, uint64_t *rng, int n) {
  for (int i = 0; i < n; i++) {
    if (i) cbuf_puts(b, " ");
    cbuf_puts(b, conv_words[bench_rng_next(rng) % N_WORDS]);
  }
}

cinfer_status *bench_conv_system(const bench_config *c, char **out) {
  *out = NULL;
  if (c->system_len <= 0) return NULL;
  uint64_t rng = c->seed * 0x2545F4914F6CDD1Dull + 7;
  cbuf b = {0};
  cbuf_puts(&b, "You are the assistant of a company's employees. Answer briefly and politely. Topics: ");
  add_words(&b, &rng, c->system_len);
  cbuf_puts(&b, ".");
  if (b.oom) {
    cbuf_free(&b);
    return cinfer_status_oom("the system prompt");
  }
  *out = b.data;
  return NULL;
}

static void add_msg(cJSON *msgs, const char *role, const char *text) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", role);
  cJSON_AddStringToObject(m, "content", text);
  cJSON_AddItemToArray(msgs, m);
}

static double unit(uint64_t *rng) { return (double)(bench_rng_next(rng) >> 11) * 0x1.0p-53; }

void bench_conv_init(bench_conv *cv, uint64_t seed) {
  memset(cv, 0, sizeof *cv);
  cv->rng = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
}

void bench_conv_free(bench_conv *cv) {
  cJSON_Delete(cv->msgs);
  cv->msgs = NULL;
  free(cv->req.data);
  cv->req.data = NULL;
  cbuf_free(&cv->reply);
}

/* Users start at a random turn of their conversation, with an earlier history of that many
 * turns (answers of --max-tokens words, not the model's), so the mix of history lengths is the
 * steady state's from the first request even when a run is shorter than a think time. */
void bench_conv_start(bench_conv *cv, const bench_config *c, const char *system, uint64_t now) {
  cv->ready_at = now + (uint64_t)(unit(&cv->rng) * (double)c->think_ms * 1e6);
  int k = (int)(bench_rng_next(&cv->rng) % (uint64_t)c->turns);
  if (k == 0 || cv->msgs) return;
  cv->msgs = cJSON_CreateArray();
  if (system) add_msg(cv->msgs, "system", system);
  for (int t = 0; t < k; t++) {
    cbuf q = {0}, a = {0};
    cbuf_printf(&q, "Question %d: tell me about ", t + 1);
    add_words(&q, &cv->rng, c->prompt_len);
    cbuf_puts(&q, "?");
    add_words(&a, &cv->rng, c->max_tokens);
    add_msg(cv->msgs, "user", q.data ? q.data : "");
    add_msg(cv->msgs, "assistant", a.data ? a.data : "");
    cbuf_free(&q);
    cbuf_free(&a);
  }
  cv->turn = k;
}

cinfer_status *bench_conv_build(bench_conv *cv, const bench_config *c, const char *system) {
  cbuf_free(&cv->reply);
  if (cv->pending) return NULL; /* a retry: the same request again */
  if (!cv->msgs) {
    cv->msgs = cJSON_CreateArray();
    if (system) add_msg(cv->msgs, "system", system);
    cv->turn = 0;
  }
  cbuf q = {0};
  cbuf_printf(&q, "Question %d: tell me about", cv->turn + 1);
  cbuf_puts(&q, " ");
  add_words(&q, &cv->rng, c->prompt_len);
  cbuf_puts(&q, "?");
  add_msg(cv->msgs, "user", q.data ? q.data : "");
  cbuf_free(&q);
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "model", c->model);
  cJSON_AddItemReferenceToObject(j, "messages", cv->msgs);
  cbuf b = {0};
  /* deletes j: the reference, not the history */
  cinfer_status *st = bench_openai_request(c, "/v1/chat/completions", j, &b);
  if (st) {
    cbuf_free(&b);
    return st;
  }
  free(cv->req.data);
  cv->req.data = b.data;
  cv->req.len = b.len;
  cv->pending = true;
  return NULL;
}

/* The assistant text of one streamed chunk: choices[0].delta.content. */
void bench_conv_on_event(bench_conv *cv, const char *d, size_t n) {
  if (n == 6 && !memcmp(d, "[DONE]", 6)) return;
  cJSON *j = cJSON_ParseWithLength(d, n);
  const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "delta"), "content");
  if (cJSON_IsString(t)) cbuf_puts(&cv->reply, t->valuestring);
  cJSON_Delete(j);
}

void bench_conv_on_body(bench_conv *cv, const char *body, size_t n) {
  cJSON *j = cJSON_ParseWithLength(body, n);
  const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
  const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content");
  if (cJSON_IsString(t)) cbuf_puts(&cv->reply, t->valuestring);
  cJSON_Delete(j);
}

void bench_conv_done(bench_conv *cv, const bench_config *c, bool ok, uint64_t now) {
  cv->ready_at = now + (uint64_t)((0.5 + unit(&cv->rng)) * (double)c->think_ms * 1e6);
  if (!ok) return; /* asked again (pending) after the think time */
  cv->pending = false;
  add_msg(cv->msgs, "assistant", cv->reply.data && !cv->reply.oom ? cv->reply.data : "");
  cbuf_free(&cv->reply);
  if (++cv->turn >= c->turns) { /* a new conversation */
    cJSON_Delete(cv->msgs);
    cv->msgs = NULL;
    cv->conversations++;
  }
}
