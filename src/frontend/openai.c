/* openai.c: the OpenAI-compatible API of `cinfer serve` for models served by the `llm`
 * backend: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (streamed as
 * server-sent events ending in `data: [DONE]`, or whole), plus llama.cpp-style /tokenize,
 * /detokenize and /health.
 *
 * Flow: the handler (I/O thread) parses and checks the JSON, acquires the model (so it
 * cannot be unloaded under the request), renders the chat template, starts the SSE stream
 * when asked, and submits n sequences to the engine. Engine events arrive on the engine's
 * step thread: streamed pieces are written as chunks at once; whole answers accumulate.
 * Completion is counted with `pending` (1 for the handler + 1 per submitted sequence):
 * whoever drops it to zero answers. A client that disconnects cancels its sequences, which
 * frees their KV blocks.
 *
 * Errors use OpenAI's object: {"error": {"message", "type", "param", "code"}}. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/llm_serving/llm_backend.h"
#include "frontend/frontend_internal.h"
#include "frontend/kserve.h"
#include "metrics/metrics.h"

#define MAX_N 16
#define MAX_STOP 8

static const http_header json_hdr[] = {{"Content-Type", 12, "application/json", 16}};
static const http_header sse_hdr[] = {{"Content-Type", 12, "text/event-stream", 17},
                                      {"Cache-Control", 13, "no-cache", 8}};

static void oai_error(http_exchange *ex, int status, const char *type, const char *param,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void oai_error(http_exchange *ex, int status, const char *type, const char *param,
                      const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kbuf b = {0};
  kbuf_puts(&b, "{\"error\":{\"message\":");
  kbuf_json_string(&b, msg, strlen(msg));
  kbuf_printf(&b, ",\"type\":\"%s\",\"param\":", type);
  if (param) kbuf_json_string(&b, param, strlen(param));
  else kbuf_puts(&b, "null");
  kbuf_puts(&b, ",\"code\":null}}");
  if (b.oom) {
    kbuf_free(&b);
    http_respond(ex, 500, json_hdr, 1, "{}", 2);
    return;
  }
  http_respond_owned(ex, status, json_hdr, 1, b.data, b.len, free);
}

static void oai_status_error(http_exchange *ex, cinfer_status *st, const char *param) {
  int code = cinfer_code_http_status(cinfer_status_code(st));
  oai_error(ex, code, code == 404 ? "not_found_error" : code >= 500 ? "server_error" : "invalid_request_error",
            param, "%s", cinfer_status_message(st));
  cinfer_status_free(st);
}

/* ---- metrics ------------------------------------------------------------------------- */

typedef struct llm_metrics {
  metric *ttft, *itl, *e2e, *running, *waiting, *kv, *prompt, *gen, *pq, *ph, *preempt;
  uint64_t last_prompt, last_gen, last_pq, last_ph, last_preempt;
} llm_metrics;

typedef struct llm_metrics_entry {
  char name[128];
  llm_metrics m;
  struct llm_metrics_entry *next;
} llm_metrics_entry;

static pthread_mutex_t metrics_mu = PTHREAD_MUTEX_INITIALIZER;
static llm_metrics_entry *metrics_list;

static llm_metrics *metrics_for(cinfer_server *s, const char *model) {
  pthread_mutex_lock(&metrics_mu);
  llm_metrics_entry *e;
  for (e = metrics_list; e; e = e->next)
    if (!strcmp(e->name, model)) goto out;
  e = calloc(1, sizeof *e);
  if (!e) goto out;
  snprintf(e->name, sizeof e->name, "%s", model);
  metrics_registry *r = cinfer_server_metrics_registry(s);
  const char *lab[] = {"model", e->name, NULL};
#define H(n, h) metrics_series(metrics_family(r, n, h, METRIC_HISTOGRAM, metrics_latency_buckets, metrics_latency_buckets_n), lab)
#define G(n, h) metrics_series(metrics_family(r, n, h, METRIC_GAUGE, NULL, 0), lab)
#define C(n, h) metrics_series(metrics_family(r, n, h, METRIC_COUNTER, NULL, 0), lab)
  e->m.ttft = H("cinfer_llm_time_to_first_token_seconds", "Time from request to the first generated token");
  e->m.itl = H("cinfer_llm_inter_token_latency_seconds", "Time between consecutive generated tokens");
  e->m.e2e = H("cinfer_llm_e2e_request_seconds", "Time from request to the last token");
  e->m.running = G("cinfer_llm_running_sequences", "Sequences in the running batch");
  e->m.waiting = G("cinfer_llm_waiting_sequences", "Sequences waiting for admission");
  e->m.kv = G("cinfer_llm_kv_cache_usage_ratio", "Used fraction of the KV cache blocks");
  e->m.prompt = C("cinfer_llm_prompt_tokens_total", "Prompt tokens processed");
  e->m.gen = C("cinfer_llm_generation_tokens_total", "Tokens generated");
  e->m.pq = C("cinfer_llm_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache");
  e->m.ph = C("cinfer_llm_prefix_cache_hits_total", "Prompt tokens found in the prefix cache");
  e->m.preempt = C("cinfer_llm_preemptions_total", "Sequences preempted for lack of KV blocks");
#undef H
#undef G
#undef C
  e->next = metrics_list;
  metrics_list = e;
out:
  pthread_mutex_unlock(&metrics_mu);
  return e ? &e->m : NULL;
}

void openai_update_metrics(cinfer_server *s) {
  cinfer_model_index_entry *idx;
  size_t n;
  if (cinfer_server_repository_index(s, true, &idx, &n)) return;
  for (size_t i = 0; i < n; i++) {
    cinfer_model *m;
    cinfer_status *st = cinfer_server_model_acquire(s, idx[i].name, idx[i].version, &m);
    if (st) {
      cinfer_status_free(st);
      continue;
    }
    if (!strcmp(cinfer_model_backend_name(m), "llm")) {
      llm_engine *e = llm_backend_engine(cinfer_model_backend_state(m));
      llm_metrics *lm = metrics_for(s, cinfer_model_name(m));
      if (e && lm) {
        llm_engine_stats es;
        llm_engine_get_stats(e, &es);
        pthread_mutex_lock(&metrics_mu);
        metric_set(lm->running, es.running);
        metric_set(lm->waiting, es.waiting);
        metric_set(lm->kv, es.kv_usage);
        /* Engine counters are cumulative per engine; the metrics are per model name, so
         * add the growth since the last scrape (a reload restarts the engine's counts). */
#define DELTA(field, met, last)                                                   \
  do {                                                                            \
    uint64_t v = es.field;                                                        \
    metric_inc(lm->met, (double)(v >= lm->last ? v - lm->last : v));               \
    lm->last = v;                                                                 \
  } while (0)
        DELTA(prompt_tokens_total, prompt, last_prompt);
        DELTA(generation_tokens_total, gen, last_gen);
        DELTA(prefix_queries_total, pq, last_pq);
        DELTA(prefix_hits_total, ph, last_ph);
        DELTA(preemptions_total, preempt, last_preempt);
#undef DELTA
        pthread_mutex_unlock(&metrics_mu);
      }
    }
    cinfer_model_release(m);
  }
  cinfer_model_index_free(idx, n);
}

/* ---- request state ------------------------------------------------------------------- */

typedef struct oai_choice {
  kbuf text;        /* whole answers */
  kbuf logprobs;    /* JSON array body of per-token logprob entries */
  int n_logprobs;
  llm_finish finish;
  int completion_tokens;
  bool role_sent;
  uint64_t t_last;
  int token_count;
} oai_choice;

typedef struct oai_ctx {
  frontend *fe;
  http_exchange *ex;
  net_loop *loop;
  cinfer_model *model;
  llm_engine *eng;
  llm_metrics *lm;
  bool chat, stream, include_usage, echo;
  int n, logprobs;
  char id[48];
  long long created;
  char *prompt;           /* completions echo */
  uint64_t seq[MAX_N];
  int n_submitted;
  _Atomic int pending;
  _Atomic bool client_gone;
  int prompt_tokens, cached_tokens;
  uint64_t t0;
  char *error;            /* first engine error */
  oai_choice ch[MAX_N];
} oai_ctx;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ctx_free(void *arg) {
  oai_ctx *c = arg;
  for (int i = 0; i < MAX_N; i++) {
    kbuf_free(&c->ch[i].text);
    kbuf_free(&c->ch[i].logprobs);
  }
  free(c->prompt);
  free(c->error);
  cinfer_model_release(c->model);
  free(c);
}

static void on_cancel(void *arg) {
  oai_ctx *c = arg;
  atomic_store(&c->client_gone, true);
  for (int i = 0; i < c->n_submitted; i++) cinfer_status_free(llm_engine_cancel(c->eng, c->seq[i]));
}

static const char *finish_name(llm_finish f) {
  return f == LLM_FINISH_LENGTH ? "length" : f == LLM_FINISH_STOP ? "stop" : f == LLM_FINISH_CANCELLED ? "cancelled" : "error";
}

static void put_usage(kbuf *b, const oai_ctx *c) {
  int comp = 0;
  for (int i = 0; i < c->n; i++) comp += c->ch[i].completion_tokens;
  kbuf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
              c->prompt_tokens, comp, c->prompt_tokens + comp, c->cached_tokens);
}

static void chunk_head(kbuf *b, const oai_ctx *c) {
  kbuf_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", c->id,
              c->chat ? "chat.completion.chunk" : "text_completion", c->created);
  const char *mn = cinfer_model_name(c->model);
  kbuf_json_string(b, mn, strlen(mn));
}

/* Token text for logprobs (may be a partial UTF-8 sequence: escaped as is). */
static void put_token_text(kbuf *b, llm_engine *e, int32_t id) {
  char *s = NULL;
  size_t n = 0;
  cinfer_status *st = llm_engine_detokenize(e, &id, 1, true, &s, &n);
  if (st) {
    cinfer_status_free(st);
    kbuf_puts(b, "\"\"");
    return;
  }
  kbuf_json_string_utf8(b, s, n);
  free(s);
}

static void put_logprob_entry(kbuf *b, oai_ctx *c, const llm_event *ev) {
  if (c->chat) {
    kbuf_puts(b, "{\"token\":");
    put_token_text(b, c->eng, ev->token);
    kbuf_printf(b, ",\"logprob\":%.6g,\"top_logprobs\":[", ev->logprob);
    for (int k = 0; k < ev->n_top && k < c->logprobs; k++) {
      kbuf_puts(b, k ? ",{\"token\":" : "{\"token\":");
      put_token_text(b, c->eng, ev->top[k].id);
      kbuf_printf(b, ",\"logprob\":%.6g}", ev->top[k].logprob);
    }
    kbuf_puts(b, "]}");
  } else { /* completions: parallel arrays are assembled at the end; keep entries */
    kbuf_puts(b, "{\"token\":");
    put_token_text(b, c->eng, ev->token);
    kbuf_printf(b, ",\"logprob\":%.6g,\"top\":{", ev->logprob);
    for (int k = 0; k < ev->n_top && k < c->logprobs; k++) {
      if (k) kbuf_puts(b, ",");
      put_token_text(b, c->eng, ev->top[k].id);
      kbuf_printf(b, ":%.6g", ev->top[k].logprob);
    }
    kbuf_puts(b, "}}");
  }
}

/* completions logprobs: {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{..}],"text_offset":[]} */
static void put_completion_logprobs(kbuf *b, const oai_choice *ch) {
  cJSON *arr = cJSON_ParseWithLength(ch->logprobs.data ? ch->logprobs.data : "[]",
                                     ch->logprobs.data ? ch->logprobs.len : 2);
  cJSON *wrap = NULL;
  if (ch->logprobs.data) { /* stored without brackets */
    kbuf t = {0};
    kbuf_puts(&t, "[");
    kbuf_put(&t, ch->logprobs.data, ch->logprobs.len);
    kbuf_puts(&t, "]");
    cJSON_Delete(arr);
    arr = t.data ? cJSON_Parse(t.data) : NULL;
    kbuf_free(&t);
  }
  wrap = cJSON_CreateObject();
  cJSON *toks = cJSON_AddArrayToObject(wrap, "tokens");
  cJSON *lps = cJSON_AddArrayToObject(wrap, "token_logprobs");
  cJSON *tops = cJSON_AddArrayToObject(wrap, "top_logprobs");
  cJSON_AddArrayToObject(wrap, "text_offset");
  for (cJSON *e = arr ? arr->child : NULL; e; e = e->next) {
    cJSON_AddItemToArray(toks, cJSON_Duplicate(cJSON_GetObjectItem(e, "token"), 1));
    cJSON_AddItemToArray(lps, cJSON_Duplicate(cJSON_GetObjectItem(e, "logprob"), 1));
    cJSON_AddItemToArray(tops, cJSON_Duplicate(cJSON_GetObjectItem(e, "top"), 1));
  }
  char *s = cJSON_PrintUnformatted(wrap);
  if (s) kbuf_puts(b, s);
  else kbuf_puts(b, "null");
  free(s);
  cJSON_Delete(wrap);
  cJSON_Delete(arr);
}

static void answer_whole(oai_ctx *c) {
  if (c->error) {
    oai_error(c->ex, 500, "server_error", NULL, "generation failed: %s", c->error);
    return;
  }
  kbuf b = {0};
  kbuf_printf(&b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", c->id,
              c->chat ? "chat.completion" : "text_completion", c->created);
  const char *mn = cinfer_model_name(c->model);
  kbuf_json_string(&b, mn, strlen(mn));
  kbuf_puts(&b, ",\"choices\":[");
  for (int i = 0; i < c->n; i++) {
    oai_choice *ch = &c->ch[i];
    kbuf_printf(&b, "%s{\"index\":%d,", i ? "," : "", i);
    const char *txt = ch->text.data ? ch->text.data : "";
    if (c->chat) {
      kbuf_puts(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
      kbuf_json_string(&b, txt, ch->text.len);
      kbuf_puts(&b, "},\"logprobs\":");
      if (c->logprobs >= 0 && ch->logprobs.data) {
        kbuf_puts(&b, "{\"content\":[");
        kbuf_put(&b, ch->logprobs.data, ch->logprobs.len);
        kbuf_puts(&b, "]}");
      } else if (c->logprobs >= 0) {
        kbuf_puts(&b, "{\"content\":[]}");
      } else {
        kbuf_puts(&b, "null");
      }
    } else {
      kbuf_puts(&b, "\"text\":");
      if (c->echo && c->prompt) {
        kbuf t = {0};
        kbuf_puts(&t, c->prompt);
        kbuf_put(&t, txt, ch->text.len);
        kbuf_json_string(&b, t.data ? t.data : "", t.len);
        kbuf_free(&t);
      } else {
        kbuf_json_string(&b, txt, ch->text.len);
      }
      kbuf_puts(&b, ",\"logprobs\":");
      if (c->logprobs >= 0) put_completion_logprobs(&b, ch);
      else kbuf_puts(&b, "null");
    }
    kbuf_printf(&b, ",\"finish_reason\":\"%s\"}", finish_name(ch->finish));
  }
  kbuf_puts(&b, "],");
  put_usage(&b, c);
  kbuf_puts(&b, "}");
  if (b.oom) {
    kbuf_free(&b);
    oai_error(c->ex, 500, "server_error", NULL, "out of memory");
    return;
  }
  http_respond_owned(c->ex, 200, json_hdr, 1, b.data, b.len, free);
}

static void finish_stream(oai_ctx *c) {
  kbuf b = {0};
  if (c->error) {
    kbuf_puts(&b, "data: {\"error\":{\"message\":");
    kbuf_json_string(&b, c->error, strlen(c->error));
    kbuf_puts(&b, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
  }
  if (c->include_usage) {
    chunk_head(&b, c);
    kbuf_puts(&b, ",\"choices\":[],");
    put_usage(&b, c);
    kbuf_puts(&b, "}\n\n");
  }
  kbuf_puts(&b, "data: [DONE]\n\n");
  if (!b.oom) http_stream_write(c->ex, b.data, b.len);
  kbuf_free(&b);
  http_stream_end(c->ex);
}

/* Drops one reference; the last one answers and frees (on the I/O loop). */
static void ctx_put(oai_ctx *c) {
  if (atomic_fetch_sub(&c->pending, 1) != 1) return;
  if (c->stream) finish_stream(c);
  else answer_whole(c);
  if (!loop_post(c->loop, ctx_free, c)) ctx_free(c);
}

typedef struct seq_user {
  oai_ctx *c;
  int index;
} seq_user;

static void on_event(void *user, const llm_event *ev) {
  seq_user *su = user;
  oai_ctx *c = su->c;
  int i = su->index;
  oai_choice *ch = &c->ch[i];
  uint64_t now = mono_ns();
  if (ev->token >= 0) {
    if (c->lm) {
      if (ch->token_count == 0) metric_observe(c->lm->ttft, (double)(now - c->t0) * 1e-9);
      else metric_observe(c->lm->itl, (double)(now - ch->t_last) * 1e-9);
    }
    ch->token_count++;
    ch->t_last = now;
    if (c->logprobs >= 0 && ev->n_top >= 0) {
      if (ch->n_logprobs++) kbuf_puts(&ch->logprobs, ",");
      put_logprob_entry(&ch->logprobs, c, ev);
    }
  }
  if (c->stream && !atomic_load(&c->client_gone) && (ev->text_len || !ch->role_sent || ev->finish != LLM_FINISH_NONE)) {
    kbuf b = {0};
    chunk_head(&b, c);
    kbuf_printf(&b, ",\"choices\":[{\"index\":%d,", i);
    if (c->chat) {
      kbuf_puts(&b, "\"delta\":{");
      if (!ch->role_sent) kbuf_puts(&b, "\"role\":\"assistant\"");
      if (ev->text_len) {
        kbuf_puts(&b, ch->role_sent ? "\"content\":" : ",\"content\":");
        kbuf_json_string(&b, ev->text, ev->text_len);
      }
      kbuf_puts(&b, "}");
    } else {
      kbuf_puts(&b, "\"text\":");
      kbuf_json_string(&b, ev->text ? ev->text : "", ev->text_len);
    }
    ch->role_sent = true;
    kbuf_puts(&b, ",\"logprobs\":null,\"finish_reason\":");
    if (ev->finish != LLM_FINISH_NONE) kbuf_printf(&b, "\"%s\"", finish_name(ev->finish));
    else kbuf_puts(&b, "null");
    kbuf_puts(&b, "}]}\n\n");
    if (!b.oom && !http_stream_write(c->ex, b.data, b.len)) atomic_store(&c->client_gone, true);
    kbuf_free(&b);
  } else if (!c->stream && ev->text_len) {
    kbuf_put(&ch->text, ev->text, ev->text_len);
  }
  if (ev->finish == LLM_FINISH_NONE) return;
  ch->finish = ev->finish;
  ch->completion_tokens = ev->completion_tokens;
  if (i == 0) {
    c->prompt_tokens = ev->prompt_tokens;
    c->cached_tokens = ev->cached_tokens;
  }
  if (ev->finish == LLM_FINISH_ERROR && !c->error) c->error = strdup(ev->error ? ev->error : "unknown error");
  if (c->lm) metric_observe(c->lm->e2e, (double)(now - c->t0) * 1e-9);
  free(su);
  ctx_put(c);
}

/* ---- request parsing ----------------------------------------------------------------- */

typedef struct parsed {
  llm_sampling s;
  const char *stops[MAX_STOP];
  int n;
  bool stream, include_usage, echo;
  int logprobs; /* -1 none */
} parsed;

/* Reads the sampling fields shared by both endpoints. Returns false after answering. */
static bool parse_common(http_exchange *ex, const cJSON *j, bool chat, parsed *p) {
  llm_sampling_default(&p->s);
  p->n = 1;
  p->logprobs = -1;
#define NUM(key) (cJSON_GetObjectItemCaseSensitive(j, key))
  const cJSON *v;
  struct { const char *key; float *f; } floats[] = {
      {"temperature", &p->s.temperature}, {"top_p", &p->s.top_p}, {"min_p", &p->s.min_p},
      {"repetition_penalty", &p->s.repetition_penalty}, {"presence_penalty", &p->s.presence_penalty},
      {"frequency_penalty", &p->s.frequency_penalty}};
  for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
    v = NUM(floats[i].key);
    if (!v || cJSON_IsNull(v)) continue;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
      oai_error(ex, 400, "invalid_request_error", floats[i].key, "'%s' must be a number", floats[i].key);
      return false;
    }
    *floats[i].f = (float)v->valuedouble;
  }
  const char *mt_key = chat && NUM("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  struct { const char *key; int64_t lo, hi; int64_t *out; } ints[] = {
      {mt_key, INT32_MIN, INT32_MAX, NULL}, {"top_k", 0, INT32_MAX, NULL}, {"n", INT32_MIN, INT32_MAX, NULL},
      {"seed", INT64_MIN / 2, INT64_MAX / 2, NULL}};
  int64_t vals[4] = {p->s.max_tokens, 0, 1, -1};
  for (int i = 0; i < 4; i++) {
    v = NUM(ints[i].key);
    if (!v || cJSON_IsNull(v)) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)ints[i].lo || v->valuedouble > (double)ints[i].hi) {
      oai_error(ex, 400, "invalid_request_error", ints[i].key, "'%s' must be an integer", ints[i].key);
      return false;
    }
    vals[i] = (int64_t)v->valuedouble;
  }
  if (vals[0] <= 0) {
    oai_error(ex, 400, "invalid_request_error", mt_key, "'%s' must be at least 1, got %lld", mt_key,
              (long long)vals[0]);
    return false;
  }
  if (vals[2] < 1 || vals[2] > MAX_N) {
    oai_error(ex, 400, "invalid_request_error", "n", "'n' must be between 1 and %d, got %lld", MAX_N,
              (long long)vals[2]);
    return false;
  }
  p->s.max_tokens = (int)vals[0];
  p->s.top_k = (int)vals[1];
  p->n = (int)vals[2];
  p->s.seed = vals[3];
  v = NUM("stop");
  if (cJSON_IsString(v)) {
    p->stops[p->s.n_stop++] = v->valuestring;
  } else if (cJSON_IsArray(v)) {
    for (const cJSON *e = v->child; e; e = e->next) {
      if (!cJSON_IsString(e) || p->s.n_stop == MAX_STOP) {
        oai_error(ex, 400, "invalid_request_error", "stop", "'stop' must be a string or up to %d strings", MAX_STOP);
        return false;
      }
      p->stops[p->s.n_stop++] = e->valuestring;
    }
  } else if (v && !cJSON_IsNull(v)) {
    oai_error(ex, 400, "invalid_request_error", "stop", "'stop' must be a string or an array of strings");
    return false;
  }
  p->s.stop = p->stops;
  v = NUM("stream");
  if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
    oai_error(ex, 400, "invalid_request_error", "stream", "'stream' must be a boolean");
    return false;
  }
  p->stream = cJSON_IsTrue(v);
  const cJSON *so = NUM("stream_options");
  p->include_usage = cJSON_IsObject(so) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
  v = NUM("ignore_eos");
  p->s.ignore_eos = cJSON_IsTrue(v);
  if (chat) {
    v = NUM("logprobs");
    if (cJSON_IsTrue(v)) {
      p->logprobs = 0;
      const cJSON *t = NUM("top_logprobs");
      if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble > 20) {
          oai_error(ex, 400, "invalid_request_error", "top_logprobs", "'top_logprobs' must be between 0 and 20");
          return false;
        }
        p->logprobs = (int)t->valuedouble;
      }
    }
  } else {
    v = NUM("logprobs");
    if (v && !cJSON_IsNull(v)) {
      if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 20) {
        oai_error(ex, 400, "invalid_request_error", "logprobs", "'logprobs' must be between 0 and 20");
        return false;
      }
      p->logprobs = (int)v->valuedouble;
    }
    p->echo = cJSON_IsTrue(NUM("echo"));
  }
  /* The engine reports the chosen token's logprob when logprobs > 0; top_n 0 still needs it. */
  p->s.logprobs = p->logprobs < 0 ? 0 : (p->logprobs ? p->logprobs : 1);
  cinfer_status *st = llm_sampling_check(&p->s);
  if (st) {
    oai_error(ex, 400, "invalid_request_error", NULL, "%s", cinfer_status_message(st));
    cinfer_status_free(st);
    return false;
  }
#undef NUM
  return true;
}

/* Acquires the llm model named by the request. Returns NULL after answering. */
static cinfer_model *get_llm_model(frontend *fe, http_exchange *ex, const cJSON *j) {
  const cJSON *mv = cJSON_GetObjectItemCaseSensitive(j, "model");
  if (!cJSON_IsString(mv)) {
    oai_error(ex, 400, "invalid_request_error", "model", "'model' is required and must be a string");
    return NULL;
  }
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(fe->server, mv->valuestring, 0, &m);
  if (st) {
    if (cinfer_status_code(st) == CINFER_NOT_FOUND) {
      cinfer_status_free(st);
      oai_error(ex, 404, "not_found_error", "model", "The model '%s' does not exist", mv->valuestring);
    } else {
      oai_status_error(ex, st, "model");
    }
    return NULL;
  }
  if (strcmp(cinfer_model_backend_name(m), "llm") != 0) {
    oai_error(ex, 400, "invalid_request_error", "model",
              "model '%s' is not a language model (backend '%s'); use the KServe v2 API",
              mv->valuestring, cinfer_model_backend_name(m));
    cinfer_model_release(m);
    return NULL;
  }
  return m;
}

static cJSON *parse_body(http_exchange *ex, const http_request *req) {
  if (!req->body_len) {
    oai_error(ex, 400, "invalid_request_error", NULL, "request body must be a JSON object");
    return NULL;
  }
  int depth = 0, maxd = 0;
  bool in_str = false;
  for (size_t i = 0; i < req->body_len; i++) { /* bound recursion before cJSON sees it */
    char ch = req->body[i];
    if (in_str) { if (ch == '\\') i++; else if (ch == '"') in_str = false; }
    else if (ch == '"') in_str = true;
    else if (ch == '{' || ch == '[') { if (++depth > maxd) maxd = depth; }
    else if (ch == '}' || ch == ']') depth--;
  }
  if (maxd > 32) {
    oai_error(ex, 400, "invalid_request_error", NULL, "JSON nesting is deeper than 32 levels");
    return NULL;
  }
  cJSON *j = cJSON_ParseWithLength(req->body, req->body_len);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    oai_error(ex, 400, "invalid_request_error", NULL, "malformed JSON: request body must be a JSON object");
    return NULL;
  }
  return j;
}

static void handle_generate(frontend *fe, http_exchange *ex, const http_request *req, bool chat) {
  cJSON *j = parse_body(ex, req);
  if (!j) return;
  parsed p;
  cinfer_model *m = NULL;
  char *prompt = NULL;
  if (!parse_common(ex, j, chat, &p) || !(m = get_llm_model(fe, ex, j))) goto out;
  llm_engine *eng = llm_backend_engine(cinfer_model_backend_state(m));
  if (chat) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int nm = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
    if (nm < 1 || nm > 4096) {
      oai_error(ex, 400, "invalid_request_error", "messages", "'messages' must be a non-empty array");
      goto out;
    }
    const char **roles = calloc((size_t)nm, sizeof *roles), **contents = calloc((size_t)nm, sizeof *contents);
    char **owned = calloc((size_t)nm, sizeof *owned);
    bool ok = roles && contents && owned;
    int i = 0;
    for (const cJSON *msg = msgs->child; ok && msg; msg = msg->next, i++) {
      const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
      const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
      if (!cJSON_IsString(role)) {
        oai_error(ex, 400, "invalid_request_error", "messages", "messages[%d].role must be a string", i);
        ok = false;
        break;
      }
      roles[i] = role->valuestring;
      if (cJSON_IsString(content)) {
        contents[i] = content->valuestring;
      } else if (cJSON_IsArray(content)) { /* [{"type":"text","text":"..."}] */
        kbuf t = {0};
        for (const cJSON *part = content->child; part; part = part->next) {
          const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
          const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
          if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
            oai_error(ex, 400, "invalid_request_error", "messages",
                      "messages[%d].content: only text parts are supported", i);
            ok = false;
            break;
          }
          kbuf_puts(&t, tx->valuestring);
        }
        owned[i] = t.data ? t.data : strdup("");
        contents[i] = owned[i];
      } else if (cJSON_IsNull(content) || !content) {
        contents[i] = "";
      } else {
        oai_error(ex, 400, "invalid_request_error", "messages", "messages[%d].content must be a string", i);
        ok = false;
      }
    }
    cinfer_status *st = NULL;
    if (ok) st = llm_engine_chat_render(eng, roles, contents, (size_t)nm, true, &prompt);
    for (int k = 0; owned && k < nm; k++) free(owned[k]);
    free(owned);
    free(roles);
    free(contents);
    if (!ok) goto out;
    if (st) {
      oai_status_error(ex, st, "messages");
      goto out;
    }
  } else {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && cJSON_IsString(pr->child)) pr = pr->child;
    if (!cJSON_IsString(pr)) {
      oai_error(ex, 400, "invalid_request_error", "prompt", "'prompt' must be a string (or an array of one string)");
      goto out;
    }
    prompt = strdup(pr->valuestring);
  }
  if (!prompt) {
    oai_error(ex, 500, "server_error", NULL, "out of memory");
    goto out;
  }
  /* Check the prompt against the context before anything is streamed. */
  int32_t *toks = NULL;
  size_t nt = 0;
  cinfer_status *st = llm_engine_tokenize(eng, prompt, strlen(prompt), true, true, &toks, &nt);
  free(toks);
  if (st) {
    oai_status_error(ex, st, chat ? "messages" : "prompt");
    goto out;
  }
  llm_model_info info;
  llm_engine_model_info(eng, &info);
  if ((long long)nt >= info.ctx_len) {
    oai_error(ex, 400, "invalid_request_error", chat ? "messages" : "prompt",
              "This model's maximum context length is %d tokens; the prompt has %zu tokens",
              info.ctx_len, nt);
    goto out;
  }

  oai_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    oai_error(ex, 500, "server_error", NULL, "out of memory");
    goto out;
  }
  c->fe = fe;
  c->ex = ex;
  c->loop = http_exchange_loop(ex);
  c->model = m;
  m = NULL; /* the context owns the reference now */
  c->eng = eng;
  c->lm = metrics_for(fe->server, cinfer_model_name(c->model));
  c->chat = chat;
  c->stream = p.stream;
  c->include_usage = p.include_usage;
  c->echo = p.echo;
  c->n = p.n;
  c->logprobs = p.logprobs;
  c->created = (long long)time(NULL);
  c->t0 = mono_ns();
  static _Atomic uint64_t counter;
  snprintf(c->id, sizeof c->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl",
           (unsigned long long)c->created, (unsigned long long)(atomic_fetch_add(&counter, 1) & 0xffffff));
  if (p.echo) c->prompt = strdup(prompt);
  atomic_init(&c->pending, 1);
  if (c->stream) http_stream_begin(ex, 200, sse_hdr, 2);
  http_exchange_set_cancel(ex, on_cancel, c);
  for (int i = 0; i < p.n; i++) {
    seq_user *su = malloc(sizeof *su);
    llm_request lr = {.prompt = prompt, .prompt_len = strlen(prompt), .add_special = true,
                      .parse_special = true, .sampling = p.s};
    if (p.s.seed >= 0) lr.sampling.seed = p.s.seed + i;
    if (!su) {
      c->error = strdup("out of memory");
      break;
    }
    su->c = c;
    su->index = i;
    atomic_fetch_add(&c->pending, 1);
    c->n_submitted = i + 1; /* before submit: an early cancel must see it */
    st = llm_engine_submit(eng, &lr, on_event, su, &c->seq[i]);
    if (st) {
      c->n_submitted = i;
      atomic_fetch_sub(&c->pending, 1);
      free(su);
      if (!c->error) c->error = strdup(cinfer_status_message(st));
      bool first = i == 0 && !c->stream;
      if (first) { /* nothing submitted: a plain 4xx */
        int code = cinfer_code_http_status(cinfer_status_code(st));
        oai_error(ex, code, "invalid_request_error", NULL, "%s", cinfer_status_message(st));
        cinfer_status_free(st);
        atomic_store(&c->pending, 0);
        if (!loop_post(c->loop, ctx_free, c)) ctx_free(c);
        goto out;
      }
      cinfer_status_free(st);
      for (int k = 0; k < c->n_submitted; k++) cinfer_status_free(llm_engine_cancel(eng, c->seq[k]));
      c->n = c->n_submitted;
      break;
    }
  }
  ctx_put(c); /* the handler's reference */
out:
  free(prompt);
  cinfer_model_release(m);
  cJSON_Delete(j);
}

static void handle_models(frontend *fe, http_exchange *ex) {
  cinfer_model_index_entry *idx;
  size_t n;
  cinfer_status *st = cinfer_server_repository_index(fe->server, true, &idx, &n);
  if (st) return oai_status_error(ex, st, NULL);
  kbuf b = {0};
  kbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    if (i && !strcmp(idx[i].name, idx[i - 1].name)) continue; /* one entry per model name */
    cinfer_model *m;
    if ((st = cinfer_server_model_acquire(fe->server, idx[i].name, 0, &m))) {
      cinfer_status_free(st);
      continue;
    }
    if (!strcmp(cinfer_model_backend_name(m), "llm")) {
      kbuf_puts(&b, k++ ? ",{\"id\":" : "{\"id\":");
      kbuf_json_string(&b, idx[i].name, strlen(idx[i].name));
      kbuf_puts(&b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"cinfer\"}");
    }
    cinfer_model_release(m);
  }
  kbuf_puts(&b, "]}");
  cinfer_model_index_free(idx, n);
  if (b.oom) {
    kbuf_free(&b);
    return oai_error(ex, 500, "server_error", NULL, "out of memory");
  }
  http_respond_owned(ex, 200, json_hdr, 1, b.data, b.len, free);
}

/* /tokenize {"model"?, "content", "add_special"?} and /detokenize {"model"?, "tokens"}:
 * the model defaults to the only loaded llm model. */
static cinfer_model *default_llm(frontend *fe, http_exchange *ex, const cJSON *j) {
  if (cJSON_GetObjectItemCaseSensitive(j, "model")) return get_llm_model(fe, ex, j);
  cinfer_model_index_entry *idx;
  size_t n;
  cinfer_model *found = NULL;
  int count = 0;
  if (cinfer_server_repository_index(fe->server, true, &idx, &n) == NULL) {
    for (size_t i = 0; i < n; i++) {
      cinfer_model *m;
      cinfer_status *st = cinfer_server_model_acquire(fe->server, idx[i].name, 0, &m);
      if (st) { cinfer_status_free(st); continue; }
      if (!strcmp(cinfer_model_backend_name(m), "llm") && (!found || strcmp(cinfer_model_name(found), idx[i].name))) {
        count++;
        if (!found) { found = m; continue; }
      }
      cinfer_model_release(m);
    }
    cinfer_model_index_free(idx, n);
  }
  if (count != 1) {
    cinfer_model_release(found);
    oai_error(ex, 400, "invalid_request_error", "model",
              count ? "several language models are loaded: name one with 'model'" : "no language model is loaded");
    return NULL;
  }
  return found;
}

static void handle_tokenize(frontend *fe, http_exchange *ex, const http_request *req, bool detok) {
  cJSON *j = parse_body(ex, req);
  if (!j) return;
  cinfer_model *m = default_llm(fe, ex, j);
  if (!m) {
    cJSON_Delete(j);
    return;
  }
  llm_engine *eng = llm_backend_engine(cinfer_model_backend_state(m));
  kbuf b = {0};
  if (!detok) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content");
    if (!cJSON_IsString(content)) {
      oai_error(ex, 400, "invalid_request_error", "content", "'content' must be a string");
      goto out;
    }
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(j, "add_special");
    int32_t *toks = NULL;
    size_t n = 0;
    cinfer_status *st = llm_engine_tokenize(eng, content->valuestring, strlen(content->valuestring),
                                            cJSON_IsTrue(as), true, &toks, &n);
    if (st) {
      oai_status_error(ex, st, "content");
      goto out;
    }
    kbuf_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) kbuf_printf(&b, i ? ",%d" : "%d", toks[i]);
    kbuf_puts(&b, "]}");
    free(toks);
  } else {
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    int n = cJSON_IsArray(tokens) ? cJSON_GetArraySize(tokens) : -1;
    if (n < 0 || n > 1 << 20) {
      oai_error(ex, 400, "invalid_request_error", "tokens", "'tokens' must be an array of token ids");
      goto out;
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
    int k = 0;
    for (const cJSON *t = tokens->child; ids && t; t = t->next) {
      if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
          t->valuedouble > INT32_MAX) {
        free(ids);
        oai_error(ex, 400, "invalid_request_error", "tokens", "tokens[%d] is not a token id", k);
        goto out;
      }
      ids[k++] = (int32_t)t->valuedouble;
    }
    char *s = NULL;
    size_t sl = 0;
    cinfer_status *st = ids ? llm_engine_detokenize(eng, ids, (size_t)k, false, &s, &sl)
                            : cinfer_status_new(CINFER_INTERNAL, "out of memory");
    free(ids);
    if (st) {
      oai_status_error(ex, st, "tokens");
      goto out;
    }
    kbuf_puts(&b, "{\"content\":");
    kbuf_json_string(&b, s, sl);
    kbuf_puts(&b, "}");
    free(s);
  }
  if (b.oom) oai_error(ex, 500, "server_error", NULL, "out of memory");
  else http_respond_owned(ex, 200, json_hdr, 1, b.data, b.len, free), b.data = NULL;
out:
  kbuf_free(&b);
  cinfer_model_release(m);
  cJSON_Delete(j);
}

bool openai_route(frontend *fe, http_exchange *ex, const http_request *req) {
  const char *p = req->path;
  size_t n = req->path_len;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(p, s, n))
  bool get = req->method_id == HTTP_GET || req->method_id == HTTP_HEAD;
  bool post = req->method_id == HTTP_POST;
  if (IS("/v1/models")) {
    if (!get) oai_error(ex, 405, "invalid_request_error", NULL, "method not allowed; use GET");
    else handle_models(fe, ex);
  } else if (IS("/v1/completions") || IS("/v1/chat/completions")) {
    if (!post) oai_error(ex, 405, "invalid_request_error", NULL, "method not allowed; use POST");
    else handle_generate(fe, ex, req, IS("/v1/chat/completions"));
  } else if (IS("/tokenize") || IS("/detokenize")) {
    if (!post) oai_error(ex, 405, "invalid_request_error", NULL, "method not allowed; use POST");
    else handle_tokenize(fe, ex, req, IS("/detokenize"));
  } else if (IS("/health")) {
    bool ok = cinfer_server_is_ready(fe->server);
    const char *body = ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}";
    http_respond(ex, ok ? 200 : 503, json_hdr, 1, body, strlen(body));
  } else if (n >= 4 && !memcmp(p, "/v1/", 4)) {
    oai_error(ex, 404, "invalid_request_error", NULL, "unknown endpoint %.*s", (int)n, p);
  } else {
    return false;
  }
#undef IS
  return true;
}
