/* openai.c: the OpenAI-compatible API of `cinfer serve` for generative models (a decoupled
 * backend with the optional text methods of backend.h, e.g. `llm`): GET /v1/models,
 * POST /v1/completions, POST /v1/chat/completions (streamed as server-sent events ending in
 * `data: [DONE]`, or whole), plus llama.cpp-style /tokenize, /detokenize and /health.
 *
 * Flow (one request path, as KServe's): the handler (I/O thread) parses and checks the
 * JSON, acquires the model, renders the chat template (cinfer_model_render_chat), builds a
 * cinfer_request (input text_input, sampling as parameters, stream=true; see
 * backends/llm_serving/llm_backend.h for the protocol) and submits it with
 * cinfer_server_infer_async: queue, statistics, in-flight count, request log and the drain
 * at shutdown see it like any other request. The backend streams one response per token
 * from the engine's step thread; the response callback only observes the TTFT /
 * inter-token histograms and pushes it on respq (respq.h, shared with the generate
 * extension), which posts the context's one loop_task to the exchange's I/O loop, which
 * encodes every queued response (SSE chunks, or the whole answer at the FINAL one). The SSE stream begins with the first response, so an error before any token
 * (a prompt longer than the context, a bad sampling value) is a plain 4xx. A client that
 * disconnects, or whose stream write fails, cancels the request; the backend stops its
 * sequences and finishes with CANCELLED. The context is freed on its I/O loop after the
 * answer, so no cancel notification can follow.
 *
 * Errors use OpenAI's object: {"error": {"message", "type", "param", "code"}}. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/clock.h"
#include "frontend/frontend_internal.h"
#include "frontend/kserve.h"
#include "frontend/openai_lp.h"
#include "frontend/respq.h"
#include "metrics/metrics.h"

#define MAX_N 16
#define MAX_STOP 8
/* tool_choice: none (tools shown, never called), auto (prose, or calls that always parse),
 * required (one or more calls), a named function (one call of it). */
enum { TOOLS_OFF, TOOLS_NONE, TOOLS_AUTO, TOOLS_REQUIRED, TOOLS_NAMED };
#define MAX_TOOLS 128
#define MAX_PARALLEL_CALLS 8

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
  cbuf b = {0};
  cbuf_puts(&b, "{\"error\":{\"message\":");
  cbuf_json_string(&b, msg, strlen(msg));
  cbuf_printf(&b, ",\"type\":\"%s\",\"param\":", type);
  if (param) cbuf_json_string(&b, param, strlen(param));
  else cbuf_puts(&b, "null");
  cbuf_puts(&b, ",\"code\":null}}");
  if (b.oom) {
    cbuf_free(&b);
    http_respond(ex, 500, json_hdr, 1, "{}", 2);
    return;
  }
  /* a refusal for load (the engine's or the server's queue is full, a budget is spent, the
   * model is not ready yet): the client may retry, after this many seconds */
  if (status == 503 || status == 429) {
    static const http_header retry_hdr[] = {{"Content-Type", 12, "application/json", 16},
                                            {"Retry-After", 11, "1", 1}};
    http_respond_owned(ex, status, retry_hdr, 2, b.data, b.len, free);
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

/* Latency histograms, observed by the frontend from the responses it receives (the backend
 * reports the rest, see openai_update_metrics). */
typedef struct llm_metrics {
  metric *ttft, *itl, *e2e;
} llm_metrics;

typedef struct llm_metrics_entry {
  char name[CINFER_MODEL_NAME_MAX + 1];
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
  e->m.ttft = H("cinfer_llm_time_to_first_token_seconds", "Time from request to the first generated token");
  e->m.itl = H("cinfer_llm_inter_token_latency_seconds", "Time between consecutive generated tokens");
  e->m.e2e = H("cinfer_llm_e2e_request_seconds", "Time from request to the last token");
#undef H
  e->next = metrics_list;
  metrics_list = e;
out:
  pthread_mutex_unlock(&metrics_mu);
  return e ? &e->m : NULL;
}

/* Backend metrics (cinfer_model_backend_metrics) as series with model="<name>". Gauges are
 * set; backend counters are cumulative per loaded model version while the series is per
 * model name, so the growth since the last scrape is added (a reload restarts the count). */
typedef struct bm_entry {
  const char *name;   /* the backend's static family name */
  metric *series;
  double last;
  struct bm_entry *next;
  char model[];       /* the whole name: a truncated one would never match again */
} bm_entry;

static bm_entry *bm_list; /* under metrics_mu */

static bm_entry *bm_for(cinfer_server *s, const char *model, const cinfer_backend_metric *bm) {
  for (bm_entry *e = bm_list; e; e = e->next)
    if (e->name == bm->name && !strcmp(e->model, model)) return e;
  size_t ml = strlen(model);
  bm_entry *e = calloc(1, sizeof *e + ml + 1);
  if (!e) return NULL;
  memcpy(e->model, model, ml + 1);
  e->name = bm->name;
  const char *lab[] = {"model", e->model, NULL};
  bool counter = bm->kind == CINFER_BACKEND_METRIC_COUNTER;
  e->series = metrics_series(metrics_family(cinfer_server_metrics_registry(s), bm->name, bm->help,
                                            counter ? METRIC_COUNTER : METRIC_GAUGE, NULL, 0), lab);
  e->next = bm_list;
  bm_list = e;
  return e;
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
    /* the backend says how many it has: ask again with room for all of them */
    cinfer_backend_metric small[16], *bm = small;
    uint32_t k = cinfer_model_backend_metrics(m, small, 16);
    if (k > 16) {
      uint32_t cap = k;
      if ((bm = calloc(cap, sizeof *bm))) {
        k = cinfer_model_backend_metrics(m, bm, cap);
        if (k > cap) k = cap; /* grew meanwhile: the rest at the next scrape */
      } else {
        bm = small, k = 16; /* out of memory: only the first 16 this scrape */
      }
    }
    pthread_mutex_lock(&metrics_mu);
    for (uint32_t j = 0; j < k; j++) {
      bm_entry *e = bm_for(s, cinfer_model_name(m), &bm[j]);
      if (!e || !e->series) continue;
      if (bm[j].kind == CINFER_BACKEND_METRIC_COUNTER) {
        double v = bm[j].value;
        metric_inc(e->series, v >= e->last ? v - e->last : v);
        e->last = v;
      } else {
        metric_set(e->series, bm[j].value);
      }
    }
    pthread_mutex_unlock(&metrics_mu);
    if (bm != small) free(bm);
    cinfer_model_release(m);
  }
  cinfer_model_index_free(idx, n);
}

/* ---- request state ------------------------------------------------------------------- */

typedef struct oai_choice {
  cbuf text;        /* whole answers */
  cbuf logprobs;    /* chat, whole answers: JSON array body of per-token logprob entries */
  int n_logprobs;
  oai_lp_list gen_lp;    /* completions, whole answers: the generated tokens' logprobs */
  oai_lp_list prompt_lp; /* completions, echo + logprobs: the prompt's tokens' (ch[0] only) */
  cbuf vllm_plp;    /* prompt_logprobs (vLLM): one entry per prompt token, without brackets */
  char finish[16];  /* "" until the choice's last response */
  int completion_tokens;
  bool role_sent;
  bool echo_sent;   /* streamed completions with echo: the prompt's chunk is out */
  int text_off;     /* streamed completions logprobs: characters before the next token */
  int tool_state;   /* streamed with tools: 0 undecided (text held in `text`), 1 prose, 2 calls */
  /* response-callback thread only (metrics) */
  uint64_t t_last;
  int token_count;
} oai_choice;

typedef struct oai_ctx {
  frontend *fe;
  http_exchange *ex;
  net_loop *loop;
  cinfer_model *model;
  cinfer_request *req;
  llm_metrics *lm;
  bool chat, stream, include_usage, echo;
  int n, logprobs;
  int prompt_logprobs;    /* vLLM's prompt_logprobs: -1 not asked, else top-k per position */
  int tool_mode;          /* TOOLS_* of the request */
  char id[48];
  long long created;
  char *prompt;           /* completions echo */
  int prompt_tokens, cached_tokens;
  uint64_t t0;
  _Atomic bool answered;  /* the FINAL response has arrived: a late cancel is moot */
  /* I/O loop only */
  bool stream_begun, client_gone;
  respq q;                /* the responses waiting for the I/O loop (callback -> task) */
  loop_task task;
  oai_choice ch[MAX_N];
  oai_lp_list stream_lp; /* streamed completions: one token's logprobs, cleared per token */
} oai_ctx;

static bool put_tool_calls(cbuf *b, const oai_ctx *c, int choice, const char *text, size_t len);

static void ctx_free(oai_ctx *c) {
  for (int i = 0; i < MAX_N; i++) {
    cbuf_free(&c->ch[i].text);
    cbuf_free(&c->ch[i].logprobs);
    oai_lp_list_free(&c->ch[i].gen_lp);
    oai_lp_list_free(&c->ch[i].prompt_lp);
    cbuf_free(&c->ch[i].vllm_plp);
  }
  oai_lp_list_free(&c->stream_lp);
  respq_destroy(&c->q);
  free(c->prompt);
  cinfer_request_release(c->req);
  cinfer_model_release(c->model);
  free(c);
}

#define CTX_OF(t) ((oai_ctx *)((char *)(t) - offsetof(oai_ctx, task)))

static void ctx_free_task(loop_task *t) { ctx_free(CTX_OF(t)); }

/* I/O loop: the client went away (or a write failed): stop generating. */
static void on_cancel(void *arg) {
  oai_ctx *c = arg;
  c->client_gone = true;
  if (!atomic_load(&c->answered)) cinfer_request_cancel(c->req);
}

static void put_usage(cbuf *b, const oai_ctx *c) {
  int comp = 0;
  for (int i = 0; i < c->n; i++) comp += c->ch[i].completion_tokens;
  cbuf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
              c->prompt_tokens, comp, c->prompt_tokens + comp, c->cached_tokens);
}

static void chunk_head(cbuf *b, const oai_ctx *c) {
  cbuf_printf(b, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", c->id,
              c->chat ? "chat.completion.chunk" : "text_completion", c->created);
  const char *mn = cinfer_model_name(c->model);
  cbuf_json_string(b, mn, strlen(mn));
}

/* A token's text (may be a partial UTF-8 sequence); malloc'd, NULL (taken as "") when the
 * model cannot detokenize it. */
static char *token_text(const cinfer_model *m, int32_t id, size_t *n) {
  char *s = NULL;
  *n = 0;
  cinfer_status *st = cinfer_model_detokenize(m, &id, 1, true, &s, n);
  if (st) {
    cinfer_status_free(st);
    *n = 0;
    return NULL;
  }
  return s;
}

/* Token text for logprobs as openai_lp writes it (invalid bytes become U+FFFD). */
static void put_token_text(cbuf *b, const cinfer_model *m, int32_t id) {
  size_t n;
  char *s = token_text(m, id, &n);
  oai_lp_string(b, s ? s : "", n, NULL);
  free(s);
}

/* One response's outputs (backend protocol: llm_backend.h); absent ones are NULL. */
typedef struct tok_resp {
  const char *text;
  size_t text_len;
  int32_t index, token;
  int32_t prompt_pos;     /* >= 0: a prompt token's logprob (echo), not a generated token */
  int32_t rank;           /* prompt tokens: vLLM's rank (0 when absent) */
  const float *logprob, *top_lp;
  const int32_t *top_ids, *usage;
  int n_top;
  const char *finish;
  size_t finish_len;
} tok_resp;

static const char *bytes_elem(const cinfer_tensor *t, size_t *len) {
  if (!t || t->dtype != CINFER_TYPE_BYTES || t->byte_size < 4) return NULL;
  const unsigned char *p = t->data;
  uint32_t l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  if (l > t->byte_size - 4) return NULL;
  *len = l;
  return (const char *)p + 4;
}

static void read_resp(const cinfer_response *resp, tok_resp *o) {
  memset(o, 0, sizeof *o);
  o->token = -1;
  o->prompt_pos = -1;
  uint32_t n = cinfer_response_output_count(resp);
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    int64_t el = t->ndim == 1 ? t->shape[0] : 0;
    bool i32 = t->dtype == CINFER_TYPE_INT32, f32 = t->dtype == CINFER_TYPE_FP32;
    if (!strcmp(t->name, "text_output")) o->text = bytes_elem(t, &o->text_len);
    else if (!strcmp(t->name, "finish_reason")) o->finish = bytes_elem(t, &o->finish_len);
    else if (i32 && el == 1 && !strcmp(t->name, "index")) o->index = *(const int32_t *)t->data;
    else if (i32 && el == 1 && !strcmp(t->name, "token_id")) o->token = *(const int32_t *)t->data;
    else if (i32 && el == 1 && !strcmp(t->name, "prompt_pos")) o->prompt_pos = *(const int32_t *)t->data;
    else if (i32 && el == 1 && !strcmp(t->name, "rank")) o->rank = *(const int32_t *)t->data;
    else if (f32 && el == 1 && !strcmp(t->name, "logprob")) o->logprob = t->data;
    else if (i32 && el == 3 && !strcmp(t->name, "usage")) o->usage = t->data;
    else if (i32 && !strcmp(t->name, "top_token_ids")) o->top_ids = t->data, o->n_top = (int)el;
    else if (f32 && !strcmp(t->name, "top_logprobs")) o->top_lp = t->data;
  }
  if (!o->top_lp) o->n_top = 0;
}

/* A chat logprobs entry: {"token", "logprob", "top_logprobs": [{"token", "logprob"}]}. */
static void put_logprob_entry(cbuf *b, oai_ctx *c, const tok_resp *r) {
  int k = r->n_top < c->logprobs ? r->n_top : c->logprobs;
  cbuf_puts(b, "{\"token\":");
  put_token_text(b, c->model, r->token);
  cbuf_puts(b, ",\"logprob\":");
  oai_lp_logprob(b, r->logprob ? *r->logprob : 0);
  cbuf_puts(b, ",\"top_logprobs\":[");
  for (int i = 0; i < k; i++) {
    cbuf_puts(b, i ? ",{\"token\":" : "{\"token\":");
    put_token_text(b, c->model, r->top_ids[i]);
    cbuf_puts(b, ",\"logprob\":");
    oai_lp_logprob(b, r->top_lp[i]);
    cbuf_puts(b, "}");
  }
  cbuf_puts(b, "]}");
}

/* A completions token (and its alternatives, when it has a logprob) into l. */
static void lp_list_add(oai_lp_list *l, oai_ctx *c, const tok_resp *r) {
  size_t n;
  char *s = token_text(c->model, r->token, &n);
  oai_lp_list_token(l, s ? s : "", n, r->logprob);
  free(s);
  int k = r->n_top < c->logprobs ? r->n_top : c->logprobs;
  for (int i = 0; r->logprob && i < k; i++) {
    s = token_text(c->model, r->top_ids[i], &n);
    oai_lp_list_top(l, s ? s : "", n, r->top_lp[i]);
    free(s);
  }
  oai_lp_list_end(l);
}

/* vLLM's prompt_logprobs entry of one prompt token: null for the first, else
 * {"<id>": {"logprob", "rank", "decoded_token"}} for the token and its top alternatives. */
static void put_vllm_prompt_logprob(cbuf *b, oai_ctx *c, const tok_resp *r) {
  if (b->len) cbuf_puts(b, ",");
  if (!r->logprob) {
    cbuf_puts(b, "null");
    return;
  }
  cbuf_printf(b, "{\"%d\":{\"logprob\":", r->token);
  oai_lp_logprob(b, *r->logprob);
  cbuf_printf(b, ",\"rank\":%d,\"decoded_token\":", r->rank);
  put_token_text(b, c->model, r->token);
  cbuf_puts(b, "}");
  int k = r->n_top < c->prompt_logprobs ? r->n_top : c->prompt_logprobs;
  for (int i = 0; i < k; i++) {
    if (r->top_ids[i] == r->token) continue;
    cbuf_printf(b, ",\"%d\":{\"logprob\":", r->top_ids[i]);
    oai_lp_logprob(b, r->top_lp[i]);
    cbuf_printf(b, ",\"rank\":%d,\"decoded_token\":", i + 1);
    put_token_text(b, c->model, r->top_ids[i]);
    cbuf_puts(b, "}");
  }
  cbuf_puts(b, "}");
}

/* The completions logprobs of one streamed token: the object a whole answer has, for this
 * one token (the same writer, openai_lp.c); *off carries text_offset from chunk to chunk. */
static void put_stream_completion_logprobs(cbuf *b, oai_ctx *c, const tok_resp *r, int *off) {
  oai_lp_list *l = &c->stream_lp; /* reused: its buffers are allocated once per request */
  oai_lp_list_clear(l);
  lp_list_add(l, c, r);
  if (oai_lp_list_failed(l)) b->oom = true;
  else oai_lp_list_write(b, l, NULL, off);
}

static int status_http(const cinfer_status *st) {
  return cinfer_code_http_status(cinfer_status_code(st));
}

static void answer_whole(oai_ctx *c, const cinfer_status *err) {
  if (err) {
    int code = status_http(err);
    if (code >= 500) oai_error(c->ex, code, "server_error", NULL, "%s", cinfer_status_message(err));
    else oai_error(c->ex, code, code == 404 ? "not_found_error" : "invalid_request_error", NULL, "%s",
                   cinfer_status_message(err));
    return;
  }
  cbuf b = {0};
  cbuf_printf(&b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", c->id,
              c->chat ? "chat.completion" : "text_completion", c->created);
  const char *mn = cinfer_model_name(c->model);
  cbuf_json_string(&b, mn, strlen(mn));
  cbuf_puts(&b, ",\"choices\":[");
  for (int i = 0; i < c->n; i++) {
    oai_choice *ch = &c->ch[i];
    cbuf_printf(&b, "%s{\"index\":%d,", i ? "," : "", i);
    const char *txt = ch->text.data ? ch->text.data : "";
    bool calls = false;
    if (c->chat) {
      cbuf_puts(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
      size_t mark = b.len;
      if (c->tool_mode >= TOOLS_AUTO) {
        cbuf_puts(&b, "null,");
        calls = put_tool_calls(&b, c, i, txt, ch->text.len);
        if (!calls && !b.oom) b.len = mark, b.data[mark] = 0;
      }
      if (!calls) cbuf_json_string(&b, txt, ch->text.len);
      cbuf_puts(&b, "},\"logprobs\":");
      if (c->logprobs >= 0 && ch->logprobs.data) {
        cbuf_puts(&b, "{\"content\":[");
        cbuf_put(&b, ch->logprobs.data, ch->logprobs.len);
        cbuf_puts(&b, "]}");
      } else if (c->logprobs >= 0) {
        cbuf_puts(&b, "{\"content\":[]}");
      } else {
        cbuf_puts(&b, "null");
      }
    } else {
      cbuf_puts(&b, "\"text\":");
      if (c->echo && c->prompt) {
        cbuf t = {0};
        cbuf_puts(&t, c->prompt);
        cbuf_put(&t, txt, ch->text.len);
        cbuf_json_string(&b, t.data ? t.data : "", t.len);
        cbuf_free(&t);
      } else {
        cbuf_json_string(&b, txt, ch->text.len);
      }
      cbuf_puts(&b, ",\"logprobs\":");
      if (c->logprobs >= 0) {
        int off = 0;
        const oai_lp_list *plp = c->echo ? &c->ch[0].prompt_lp : NULL;
        if (oai_lp_list_failed(&ch->gen_lp) || (plp && oai_lp_list_failed(plp))) b.oom = true;
        oai_lp_list_write(&b, plp, &ch->gen_lp, &off);
      }
      else cbuf_puts(&b, "null");
    }
    if (c->prompt_logprobs >= 0) {
      cbuf_puts(&b, ",\"prompt_logprobs\":[");
      const cbuf *plp = &c->ch[0].vllm_plp; /* the choices share the prompt (scored once) */
      if (plp->data) cbuf_put(&b, plp->data, plp->len);
      cbuf_puts(&b, "]");
    }
    cbuf_printf(&b, ",\"finish_reason\":\"%s\"}", calls ? "tool_calls" : ch->finish[0] ? ch->finish : "stop");
  }
  cbuf_puts(&b, "],");
  put_usage(&b, c);
  cbuf_puts(&b, "}");
  if (b.oom) {
    cbuf_free(&b);
    oai_error(c->ex, 500, "server_error", NULL, "out of memory");
    return;
  }
  http_respond_owned(c->ex, 200, json_hdr, 1, b.data, b.len, free);
}

static void stream_begin(oai_ctx *c) {
  if (c->stream_begun) return;
  c->stream_begun = true;
  http_stream_begin(c->ex, 200, sse_hdr, 2);
}

/* Appends the SSE chunk(s) of one token response to b (I/O loop). */
static void stream_event(oai_ctx *c, cbuf *b, const tok_resp *r);

/* Streamed with tools: prose streams as it comes once its first character shows it is not a
 * call; calls are held and sent whole, as one tool_calls delta, when the choice ends. */
static void stream_event_tools(oai_ctx *c, cbuf *b, const tok_resp *r) {
  oai_choice *ch = &c->ch[r->index];
  if (ch->tool_state == 1) {
    stream_event(c, b, r);
    return;
  }
  if (r->text_len) cbuf_put(&ch->text, r->text, r->text_len);
  if (ch->tool_state == 0) {
    size_t i = 0;
    while (i < ch->text.len && strchr(" \t\r\n", ch->text.data[i])) i++;
    if (i < ch->text.len) ch->tool_state = ch->text.data[i] == '[' ? 2 : 1;
    if (ch->tool_state == 1 || (ch->tool_state == 0 && r->finish)) { /* prose: what was held, then on */
      ch->tool_state = 1;
      tok_resp held = *r;
      held.text = ch->text.data;
      held.text_len = ch->text.len;
      stream_event(c, b, &held);
      return;
    }
  }
  if (!r->finish) return;
  /* the calls, whole */
  chunk_head(b, c);
  cbuf_printf(b, ",\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":null,", r->index);
  size_t mark = b->len;
  bool calls = put_tool_calls(b, c, r->index, ch->text.data ? ch->text.data : "", ch->text.len);
  if (!calls && !b->oom) { /* cut by max_tokens: the text as it is */
    b->len = mark - strlen("\"content\":null,");
    b->data[b->len] = 0;
    cbuf_puts(b, "\"content\":");
    cbuf_json_string(b, ch->text.data ? ch->text.data : "", ch->text.len);
  }
  ch->role_sent = true;
  cbuf_printf(b, "},\"logprobs\":null,\"finish_reason\":\"%s\"}]}\n\n",
              calls ? "tool_calls" : ch->finish[0] ? ch->finish : "length");
}

/* Streamed completions with echo: the prompt (with its logprobs when asked) is the choice's
 * first chunk, as vLLM streams it. */
static void stream_echo(oai_ctx *c, cbuf *b, int index) {
  oai_choice *ch = &c->ch[index];
  ch->echo_sent = true;
  if (!c->prompt || !c->prompt[0]) return;
  chunk_head(b, c);
  cbuf_printf(b, ",\"choices\":[{\"index\":%d,\"text\":", index);
  cbuf_json_string(b, c->prompt, strlen(c->prompt));
  cbuf_puts(b, ",\"logprobs\":");
  if (c->logprobs >= 0 && oai_lp_list_failed(&c->ch[0].prompt_lp)) b->oom = true;
  if (c->logprobs >= 0) oai_lp_list_write(b, &c->ch[0].prompt_lp, NULL, &ch->text_off);
  else cbuf_puts(b, "null");
  cbuf_puts(b, ",\"finish_reason\":null}]}\n\n");
}

static void stream_event(oai_ctx *c, cbuf *b, const tok_resp *r) {
  oai_choice *ch = &c->ch[r->index];
  if (!c->chat && c->echo && !ch->echo_sent) stream_echo(c, b, r->index);
  bool lp = c->logprobs >= 0 && r->token >= 0 && r->logprob; /* a chunk per token then */
  if (!(r->text_len || !ch->role_sent || r->finish || lp)) return;
  chunk_head(b, c);
  cbuf_printf(b, ",\"choices\":[{\"index\":%d,", r->index);
  if (c->chat) {
    cbuf_puts(b, "\"delta\":{");
    if (!ch->role_sent) cbuf_puts(b, "\"role\":\"assistant\"");
    if (r->text_len) {
      cbuf_puts(b, ch->role_sent ? "\"content\":" : ",\"content\":");
      cbuf_json_string(b, r->text, r->text_len);
    }
    cbuf_puts(b, "}");
  } else {
    cbuf_puts(b, "\"text\":");
    cbuf_json_string(b, r->text ? r->text : "", r->text_len);
  }
  ch->role_sent = true;
  cbuf_puts(b, ",\"logprobs\":");
  if (lp && c->chat) {
    cbuf_puts(b, "{\"content\":[");
    put_logprob_entry(b, c, r);
    cbuf_puts(b, "]}");
  } else if (lp) {
    put_stream_completion_logprobs(b, c, r, &ch->text_off);
  } else { /* no token in this chunk (the last one, or held text) */
    cbuf_puts(b, "null");
  }
  cbuf_puts(b, ",\"finish_reason\":");
  if (r->finish) cbuf_printf(b, "\"%.*s\"", (int)r->finish_len, r->finish);
  else cbuf_puts(b, "null");
  cbuf_puts(b, "}]}\n\n");
}

static void stream_finish(oai_ctx *c, cbuf *b, const cinfer_status *err) {
  if (err) {
    const char *msg = cinfer_status_message(err);
    cbuf_puts(b, "data: {\"error\":{\"message\":");
    cbuf_json_string(b, msg, strlen(msg));
    cbuf_puts(b, ",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
  }
  if (c->include_usage) {
    chunk_head(b, c);
    cbuf_puts(b, ",\"choices\":[],");
    put_usage(b, c);
    cbuf_puts(b, "}\n\n");
  }
  cbuf_puts(b, "data: [DONE]\n\n");
}

static void log_request(oai_ctx *c, int status, const char *err) {
  if (log_verbosity() < 1) return;
  char ver[32], code[8], us[32];
  snprintf(ver, sizeof ver, "%lld", (long long)cinfer_model_version(c->model));
  snprintf(code, sizeof code, "%d", status);
  snprintf(us, sizeof us, "%.1f", (double)(clock_now_ns() - c->t0) / 1e3);
  const char *kv[] = {"request_id", c->id, "model", cinfer_model_name(c->model), "version", ver,
                      "status", code, "duration_us", us, "api", c->chat ? "chat" : "completions",
                      err ? "error" : NULL, err, NULL};
  log_event(LOG_VERBOSE, kv, "infer");
}

/* The context's task on its I/O loop: encodes every queued response in one write; after the
 * FINAL one answers (or ends the stream) and frees the context. */
static void drain_task(loop_task *t) {
  oai_ctx *c = CTX_OF(t);
  respq_node *q = respq_take(&c->q);
  cbuf b = {0};
  cinfer_response *final_resp = NULL;
  for (respq_node *nx; q; q = nx) {
    nx = q->next;
    cinfer_response *resp = q->resp;
    if (q->final) final_resp = resp; /* always the last one queued */
    respq_node_free(&c->q, q);
    tok_resp r;
    read_resp(resp, &r);
    if (!cinfer_response_error(resp) && cinfer_response_output_count(resp) > 0 && r.index >= 0 &&
        r.index < c->n) {
      oai_choice *ch = &c->ch[r.index];
      if (r.prompt_pos >= 0 && c->prompt_logprobs >= 0) put_vllm_prompt_logprob(&ch->vllm_plp, c, &r);
      if (r.prompt_pos >= 0 && !(c->echo && c->logprobs >= 0)) {
        if (resp != final_resp) cinfer_response_free(resp);
        continue;
      }
      if (r.prompt_pos >= 0) { /* echo + logprobs: the prompt's tokens, the first without one */
        lp_list_add(&ch->prompt_lp, c, &r);
        if (resp != final_resp) cinfer_response_free(resp);
        continue;
      }
      if (r.token >= 0 && c->logprobs >= 0 && r.logprob && !c->stream) { /* whole answers */
        if (!c->chat) {
          lp_list_add(&ch->gen_lp, c, &r);
        } else {
          if (ch->n_logprobs++) cbuf_puts(&ch->logprobs, ",");
          put_logprob_entry(&ch->logprobs, c, &r);
        }
      }
      if (r.finish) snprintf(ch->finish, sizeof ch->finish, "%.*s", (int)r.finish_len, r.finish);
      if (c->stream) {
        if (!c->client_gone) {
          if (c->chat && c->tool_mode >= TOOLS_AUTO) stream_event_tools(c, &b, &r);
          else stream_event(c, &b, &r);
        }
      } else if (r.text_len) {
        cbuf_put(&ch->text, r.text, r.text_len);
      }
      if (r.finish) {
        if (r.usage) {
          ch->completion_tokens = r.usage[1];
          if (r.index == 0) c->prompt_tokens = r.usage[0], c->cached_tokens = r.usage[2];
        }
      }
    }
    if (resp != final_resp) cinfer_response_free(resp);
  }
  if (!final_resp) {
    if (c->stream && b.len && !c->client_gone) {
      stream_begin(c);
      if (b.oom || !http_stream_write(c->ex, b.data, b.len)) on_cancel(c);
    }
    cbuf_free(&b);
    return;
  }
  /* FINAL: answer, then free (on this loop: no cancel notification can follow). An error
   * before anything was streamed is a plain HTTP error. */
  const cinfer_status *err = cinfer_response_error(final_resp);
  if (c->stream && (c->stream_begun || b.len || !err)) {
    stream_begin(c);
    stream_finish(c, &b, err);
    if (!b.oom && !c->client_gone) http_stream_write(c->ex, b.data, b.len);
    http_stream_end(c->ex);
  } else {
    answer_whole(c, err);
  }
  log_request(c, err ? status_http(err) : 200, err ? cinfer_status_message(err) : NULL);
  cbuf_free(&b);
  cinfer_response_free(final_resp);
  ctx_free(c);
}

/* Response callback (the backend's thread): observes the latency histograms, queues the
 * response for the I/O loop and posts the context's task unless it is already queued. */
static void on_response(void *user, cinfer_response *resp, uint32_t flags) {
  oai_ctx *c = user;
  uint64_t now = clock_now_ns();
  bool final = (flags & CINFER_RESPONSE_FINAL) != 0;
  if (c->lm && !cinfer_response_error(resp)) {
    tok_resp r;
    read_resp(resp, &r);
    if (r.token >= 0 && r.prompt_pos < 0 && r.index >= 0 && r.index < c->n) {
      oai_choice *ch = &c->ch[r.index];
      if (ch->token_count++ == 0) metric_observe(c->lm->ttft, (double)(now - c->t0) * 1e-9);
      else metric_observe(c->lm->itl, (double)(now - ch->t_last) * 1e-9);
      ch->t_last = now;
    }
    if (final) metric_observe(c->lm->e2e, (double)(now - c->t0) * 1e-9);
  }
  if (final) atomic_store(&c->answered, true);
  respq_push(&c->q, resp, final); /* a token lost to memory is dropped; FINAL always arrives */
}

/* ---- request parsing ----------------------------------------------------------------- */

/* The sampling fields shared by both endpoints, checked for type here; their ranges are
 * the backend's to check (its INVALID_ARG names the field and arrives before any token). */
static const char *const float_keys[] = {"temperature", "top_p", "min_p", "repetition_penalty",
                                         "presence_penalty", "frequency_penalty"};
#define N_FLOATS (sizeof float_keys / sizeof float_keys[0])

typedef struct parsed {
  double f[N_FLOATS];
  bool f_given[N_FLOATS];
  int64_t max_tokens, top_k, seed; /* -1: not given */
  int64_t priority; /* -1: not given; else the server queue's priority level (1 = highest) */
  const cJSON *stop;               /* string or array of strings, or NULL */
  int n;
  bool stream, include_usage, echo, ignore_eos;
  int logprobs; /* -1 none */
  int prompt_logprobs; /* vLLM's extension: -1 none, else the alternatives per prompt token */
  /* structured output (at most one): response_format json_schema's schema, json_object,
   * or a GBNF grammar (llama.cpp's `grammar` field) */
  const cJSON *schema;
  bool json_object;
  const char *grammar;
  /* tool calling (chat): the request's tools, the choice, parallel_tool_calls */
  const cJSON *tools;
  int tool_mode;          /* TOOLS_* */
  const char *tool_name;  /* TOOLS_NAMED */
  bool parallel;
} parsed;


/* response_format, grammar, and the fields whose effect is not implemented (refused, never
 * ignored). Returns false after answering. */
static bool valid_tool_name(const char *n) {
  size_t l = strlen(n);
  if (l < 1 || l > 64) return false;
  for (size_t i = 0; i < l; i++)
    if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= 'A' && n[i] <= 'Z') || (n[i] >= '0' && n[i] <= '9') ||
          n[i] == '_' || n[i] == '-'))
      return false;
  return true;
}

/* tools, tool_choice, parallel_tool_calls. Returns false after answering. */
static bool parse_tools(http_exchange *ex, const cJSON *j, bool chat, parsed *p) {
  if (cJSON_GetObjectItemCaseSensitive(j, "functions") || cJSON_GetObjectItemCaseSensitive(j, "function_call")) {
    oai_error(ex, 400, "invalid_request_error", "functions",
              "'functions' and 'function_call' are deprecated and not supported; use 'tools' and 'tool_choice'");
    return false;
  }
  const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
  const cJSON *choice = cJSON_GetObjectItemCaseSensitive(j, "tool_choice");
  const cJSON *par = cJSON_GetObjectItemCaseSensitive(j, "parallel_tool_calls");
  p->parallel = true;
  if (par && !cJSON_IsNull(par)) {
    if (!cJSON_IsBool(par)) {
      oai_error(ex, 400, "invalid_request_error", "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
      return false;
    }
    p->parallel = cJSON_IsTrue(par);
  }
  if (!tools || cJSON_IsNull(tools) || (cJSON_IsArray(tools) && !tools->child)) {
    if (choice && !cJSON_IsNull(choice) && !(cJSON_IsString(choice) && !strcmp(choice->valuestring, "none"))) {
      oai_error(ex, 400, "invalid_request_error", "tool_choice", "'tool_choice' needs 'tools'");
      return false;
    }
    return true;
  }
  if (!chat) {
    oai_error(ex, 400, "invalid_request_error", "tools", "'tools' is for /v1/chat/completions");
    return false;
  }
  if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) > MAX_TOOLS) {
    oai_error(ex, 400, "invalid_request_error", "tools", "'tools' must be an array of at most %d tools", MAX_TOOLS);
    return false;
  }
  int k = 0;
  for (const cJSON *t = tools->child; t; t = t->next, k++) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    const cJSON *pa = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "parameters") : NULL;
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsObject(fn)) {
      oai_error(ex, 400, "invalid_request_error", "tools", "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", k);
      return false;
    }
    if (!cJSON_IsString(nm) || !valid_tool_name(nm->valuestring)) {
      oai_error(ex, 400, "invalid_request_error", "tools",
                "tools[%d].function.name must be 1 to 64 letters, digits, '_' or '-'", k);
      return false;
    }
    for (const cJSON *u = tools->child; u != t; u = u->next)
      if (!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "function"), "name")->valuestring,
                  nm->valuestring)) {
        oai_error(ex, 400, "invalid_request_error", "tools", "tools[%d]: the function name '%s' is used twice", k,
                  nm->valuestring);
        return false;
      }
    if (pa && !cJSON_IsNull(pa) && !cJSON_IsObject(pa)) {
      oai_error(ex, 400, "invalid_request_error", "tools",
                "tools[%d].function.parameters must be a JSON Schema object", k);
      return false;
    }
  }
  p->tools = tools;
  p->tool_mode = TOOLS_AUTO;
  if (cJSON_IsString(choice)) {
    const char *c = choice->valuestring;
    p->tool_mode = !strcmp(c, "none") ? TOOLS_NONE : !strcmp(c, "auto") ? TOOLS_AUTO
                   : !strcmp(c, "required") ? TOOLS_REQUIRED : -1;
    if (p->tool_mode < 0) {
      oai_error(ex, 400, "invalid_request_error", "tool_choice",
                "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      return false;
    }
  } else if (choice && !cJSON_IsNull(choice)) {
    const cJSON *fn = cJSON_IsObject(choice) ? cJSON_GetObjectItemCaseSensitive(choice, "function") : NULL;
    const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    if (!cJSON_IsString(nm)) {
      oai_error(ex, 400, "invalid_request_error", "tool_choice",
                "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      return false;
    }
    bool found = false;
    for (const cJSON *t = tools->child; t && !found; t = t->next)
      found = !strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name")->valuestring,
                      nm->valuestring);
    if (!found) {
      oai_error(ex, 400, "invalid_request_error", "tool_choice", "'tool_choice' names '%s', which is not in 'tools'",
                nm->valuestring);
      return false;
    }
    p->tool_mode = TOOLS_NAMED;
    p->tool_name = nm->valuestring;
  }
  if (p->tool_mode >= TOOLS_AUTO && (p->schema || p->json_object || p->grammar)) {
    oai_error(ex, 400, "invalid_request_error", "tools",
              "give 'tools' (with a tool_choice other than 'none') or a structured 'response_format' / 'grammar', not both");
    return false;
  }
  return true;
}

static bool parse_structured(http_exchange *ex, const cJSON *j, bool chat, parsed *p) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "response_format");
  if (v && !cJSON_IsNull(v)) {
    const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
    if (!cJSON_IsString(t)) {
      oai_error(ex, 400, "invalid_request_error", "response_format",
                "'response_format' must be an object with a string 'type'");
      return false;
    }
    if (!strcmp(t->valuestring, "json_object")) {
      p->json_object = true;
    } else if (!strcmp(t->valuestring, "json_schema")) {
      const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
      const cJSON *sc = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
      if (!cJSON_IsObject(sc) && !cJSON_IsBool(sc)) {
        oai_error(ex, 400, "invalid_request_error", "response_format",
                  "'response_format' of type 'json_schema' needs 'json_schema': {\"name\": ..., \"schema\": {...}}");
        return false;
      }
      p->schema = sc;
    } else if (strcmp(t->valuestring, "text")) {
      oai_error(ex, 400, "invalid_request_error", "response_format",
                "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '%s'", t->valuestring);
      return false;
    }
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "grammar");
  if (v && !cJSON_IsNull(v)) {
    if (!cJSON_IsString(v)) {
      oai_error(ex, 400, "invalid_request_error", "grammar", "'grammar' must be a string (GBNF)");
      return false;
    }
    if (p->schema || p->json_object) {
      oai_error(ex, 400, "invalid_request_error", "grammar", "give 'grammar' or a JSON 'response_format', not both");
      return false;
    }
    p->grammar = v->valuestring;
  }
  v = cJSON_GetObjectItemCaseSensitive(j, "logit_bias");
  if (v && !cJSON_IsNull(v) && !(cJSON_IsObject(v) && !v->child)) {
    oai_error(ex, 400, "invalid_request_error", "logit_bias", "'logit_bias' is not supported by this server");
    return false;
  }
  return parse_tools(ex, j, chat, p);
}

/* The request fields each endpoint reads. Anything else is refused with OpenAI's own answer
 * to an unknown field (400 "Unrecognized request argument supplied: ..."), never ignored: a
 * client sending vLLM's min_tokens or best_of, or a misspelt max_tokens, learns that it had
 * no effect. Fields that describe the caller and change nothing in the answer (user,
 * metadata, store, service_tier) are accepted. Refused with a reason of their own further
 * on: logit_bias, functions, function_call, tools on completions. */
static const char *const common_keys[] = {
    "model", "temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "max_tokens", "top_k", "n", "seed", "priority", "stop", "stream",
    "stream_options", "ignore_eos", "prompt_logprobs", "logprobs", "response_format", "grammar",
    "logit_bias", "user", "metadata", "store", "service_tier", "tools", "functions", "function_call"};
static const char *const chat_keys[] = {"messages", "max_completion_tokens", "top_logprobs", "tool_choice",
                                        "parallel_tool_calls"};
static const char *const completion_keys[] = {"prompt", "echo"};

static bool key_in(const char *k, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(k, list[i])) return true;
  return false;
}

/* Returns false after answering. */
static bool known_fields(http_exchange *ex, const cJSON *j, bool chat) {
  for (const cJSON *e = j->child; e; e = e->next) {
    const char *k = e->string ? e->string : "";
    if (key_in(k, common_keys, sizeof common_keys / sizeof *common_keys) ||
        (chat && key_in(k, chat_keys, sizeof chat_keys / sizeof *chat_keys)) ||
        (!chat && key_in(k, completion_keys, sizeof completion_keys / sizeof *completion_keys)))
      continue;
    oai_error(ex, 400, "invalid_request_error", k, "Unrecognized request argument supplied: %.200s "
              "(cinfer does not implement it on %s)", k, chat ? "/v1/chat/completions" : "/v1/completions");
    return false;
  }
  return true;
}

/* Returns false after answering. */
static bool parse_common(http_exchange *ex, const cJSON *j, bool chat, parsed *p) {
  memset(p, 0, sizeof *p);
  if (!known_fields(ex, j, chat)) return false;
  p->n = 1;
  p->logprobs = -1;
  p->max_tokens = p->top_k = p->seed = -1;
#define NUM(key) (cJSON_GetObjectItemCaseSensitive(j, key))
  const cJSON *v;
  for (size_t i = 0; i < N_FLOATS; i++) {
    v = NUM(float_keys[i]);
    if (!v || cJSON_IsNull(v)) continue;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
      oai_error(ex, 400, "invalid_request_error", float_keys[i], "'%s' must be a number", float_keys[i]);
      return false;
    }
    p->f[i] = v->valuedouble;
    p->f_given[i] = true;
  }
  const char *mt_key = chat && NUM("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  struct { const char *key; int64_t lo, hi; } ints[] = {
      {mt_key, INT32_MIN, INT32_MAX}, {"top_k", 0, INT32_MAX}, {"n", INT32_MIN, INT32_MAX},
      {"seed", INT64_MIN / 2, INT64_MAX / 2}, {"priority", 0, UINT32_MAX}};
  int64_t vals[5] = {-1, -1, 1, -1, -1};
  bool given[5] = {0};
  for (int i = 0; i < 5; i++) {
    v = NUM(ints[i].key);
    if (!v || cJSON_IsNull(v)) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)ints[i].lo || v->valuedouble > (double)ints[i].hi) {
      oai_error(ex, 400, "invalid_request_error", ints[i].key, "'%s' must be an integer", ints[i].key);
      return false;
    }
    vals[i] = (int64_t)v->valuedouble;
    given[i] = true;
  }
  if (given[0] && vals[0] <= 0) {
    oai_error(ex, 400, "invalid_request_error", mt_key, "'%s' must be at least 1, got %lld", mt_key,
              (long long)vals[0]);
    return false;
  }
  if (vals[2] < 1 || vals[2] > MAX_N) {
    oai_error(ex, 400, "invalid_request_error", "n", "'n' must be between 1 and %d, got %lld", MAX_N,
              (long long)vals[2]);
    return false;
  }
  p->max_tokens = vals[0];
  p->top_k = vals[1];
  p->n = (int)vals[2];
  p->seed = given[3] ? vals[3] : -1;
  p->priority = given[4] ? vals[4] : -1;
  v = NUM("stop");
  if (cJSON_IsString(v)) {
    p->stop = v;
  } else if (cJSON_IsArray(v)) {
    int k = 0;
    for (const cJSON *e = v->child; e; e = e->next, k++) {
      if (!cJSON_IsString(e) || k == MAX_STOP) {
        oai_error(ex, 400, "invalid_request_error", "stop", "'stop' must be a string or up to %d strings", MAX_STOP);
        return false;
      }
    }
    p->stop = k ? v : NULL;
  } else if (v && !cJSON_IsNull(v)) {
    oai_error(ex, 400, "invalid_request_error", "stop", "'stop' must be a string or an array of strings");
    return false;
  }
  v = NUM("stream");
  if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) {
    oai_error(ex, 400, "invalid_request_error", "stream", "'stream' must be a boolean");
    return false;
  }
  p->stream = cJSON_IsTrue(v);
  const cJSON *so = NUM("stream_options");
  p->include_usage = cJSON_IsObject(so) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(so, "include_usage"));
  p->ignore_eos = cJSON_IsTrue(NUM("ignore_eos"));
  p->prompt_logprobs = -1;
  v = NUM("prompt_logprobs");
  if (v && !cJSON_IsNull(v)) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 20) {
      oai_error(ex, 400, "invalid_request_error", "prompt_logprobs", "'prompt_logprobs' must be an integer between 0 "
                "and 20");
      return false;
    }
    if (p->stream) {
      oai_error(ex, 400, "invalid_request_error", "prompt_logprobs", "'prompt_logprobs' is not supported with "
                "'stream': the prompt's logprobs come with the whole answer");
      return false;
    }
    p->prompt_logprobs = (int)v->valuedouble;
  }
  if (chat) {
    v = NUM("logprobs");
    const cJSON *tl = NUM("top_logprobs");
    if (tl && !cJSON_IsNull(tl) && !cJSON_IsTrue(v)) { /* as OpenAI and vLLM: not ignored */
      oai_error(ex, 400, "invalid_request_error", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
      return false;
    }
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
  if (!parse_structured(ex, j, chat, p)) return false;
#undef NUM
  return true;
}

static const char *tool_fn_name(const cJSON *tool) {
  return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tool, "function"), "name")->valuestring;
}

/* The JSON Schema of an answer that calls tools: an array of {"name": N, "arguments": A}
 * where A follows N's parameters (any object when it has none). NULL on OOM. */
static char *tool_calls_schema(const parsed *p) {
  cJSON *root = cJSON_CreateObject(), *items = cJSON_CreateObject(), *any = cJSON_CreateArray();
  bool ok = root && items && any;
  for (const cJSON *t = p->tools ? p->tools->child : NULL; ok && t; t = t->next) {
    const char *name = tool_fn_name(t);
    if (p->tool_mode == TOOLS_NAMED && strcmp(name, p->tool_name)) continue;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "parameters");
    cJSON *call = cJSON_CreateObject(), *props = cJSON_CreateObject(), *nm = cJSON_CreateObject();
    cJSON *args = cJSON_IsObject(params) ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
    cJSON *req = cJSON_CreateArray();
    ok = call && props && nm && args && req && cJSON_AddStringToObject(nm, "const", name) &&
         cJSON_AddItemToObject(props, "name", nm) && cJSON_AddItemToObject(props, "arguments", args) &&
         cJSON_AddItemToArray(req, cJSON_CreateString("name")) && cJSON_AddItemToArray(req, cJSON_CreateString("arguments")) &&
         cJSON_AddStringToObject(call, "type", "object") && cJSON_AddItemToObject(call, "properties", props) &&
         cJSON_AddItemToObject(call, "required", req) && cJSON_AddFalseToObject(call, "additionalProperties") &&
         cJSON_AddItemToArray(any, call);
    if (!ok) {
      cJSON_Delete(call);
      cJSON_Delete(props);
      cJSON_Delete(nm);
      cJSON_Delete(args);
      cJSON_Delete(req);
    }
    if (ok && !cJSON_IsObject(params)) cJSON_AddStringToObject(args, "type", "object");
  }
  int max = p->tool_mode == TOOLS_NAMED || !p->parallel ? 1 : MAX_PARALLEL_CALLS;
  ok = ok && cJSON_AddItemToObject(items, "anyOf", any) && (any = NULL, 1) &&
       cJSON_AddStringToObject(root, "type", "array") && cJSON_AddItemToObject(root, "items", items) &&
       (items = NULL, 1) && cJSON_AddNumberToObject(root, "minItems", 1) && cJSON_AddNumberToObject(root, "maxItems", max);
  char *out = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(any);
  cJSON_Delete(items);
  cJSON_Delete(root);
  return out;
}

/* The text that tells the model about its tools (a system message; the chat templates we
 * render have no tool syntax of their own). NULL on OOM. */
static char *tools_system_text(const parsed *p, const char *system) {
  cbuf b = {0};
  if (system && *system) {
    cbuf_puts(&b, system);
    cbuf_puts(&b, "\n\n");
  }
  cbuf_puts(&b, "You can call these functions (their parameters are JSON Schemas):\n");
  for (const cJSON *t = p->tools->child; t; t = t->next) {
    char *js = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t, "function"));
    if (!js) {
      cbuf_free(&b);
      return NULL;
    }
    cbuf_puts(&b, js);
    cbuf_puts(&b, "\n");
    free(js);
  }
  if (p->tool_mode == TOOLS_NONE)
    cbuf_puts(&b, "Do not call a function now: answer in text.");
  else
    cbuf_puts(&b, "To call functions, answer with only a JSON array of calls, "
                  "[{\"name\": \"<function name>\", \"arguments\": {<arguments>}}]"
                  "; to answer without a call, write text.");
  return cbuf_take(&b);
}

/* An assistant message's tool_calls as the text the model writes for them. */
static bool render_tool_calls(const cJSON *calls, cbuf *b) {
  cbuf_puts(b, "[");
  int k = 0;
  for (const cJSON *tc = calls->child; tc; tc = tc->next, k++) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
    const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    const cJSON *ar = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
    if (!cJSON_IsString(nm) || !cJSON_IsString(ar)) return false;
    cbuf_puts(b, k ? ", {\"name\": " : "{\"name\": ");
    cbuf_json_string(b, nm->valuestring, strlen(nm->valuestring));
    cbuf_puts(b, ", \"arguments\": ");
    cJSON *parsed_args = cJSON_Parse(ar->valuestring);
    char *js = parsed_args ? cJSON_PrintUnformatted(parsed_args) : NULL;
    cbuf_puts(b, js ? js : "{}");
    free(js);
    cJSON_Delete(parsed_args);
    cbuf_puts(b, "}");
  }
  cbuf_puts(b, "]");
  return true;
}

/* A choice's text as OpenAI tool_calls ("[...]" of {name, arguments}); false when the text is
 * not such an array (prose, or cut by max_tokens). */
static bool put_tool_calls(cbuf *b, const oai_ctx *c, int choice, const char *text, size_t len) {
  size_t i = 0;
  while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) i++;
  if (i == len || text[i] != '[') return false;
  cJSON *arr = cJSON_ParseWithLength(text + i, len - i);
  bool ok = cJSON_IsArray(arr) && arr->child;
  for (const cJSON *e = ok ? arr->child : NULL; e && ok; e = e->next)
    ok = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "name")) &&
         cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(e, "arguments"));
  if (ok) {
    cbuf_puts(b, "\"tool_calls\":[");
    int k = 0;
    for (const cJSON *e = arr->child; e; e = e->next, k++) {
      const char *nm = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
      char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(e, "arguments"));
      cbuf_printf(b, "%s{\"index\":%d,\"id\":\"call_%s_%d_%d\",\"type\":\"function\",\"function\":{\"name\":",
                  k ? "," : "", k, c->id, choice, k);
      cbuf_json_string(b, nm, strlen(nm));
      cbuf_puts(b, ",\"arguments\":");
      cbuf_json_string(b, args ? args : "{}", args ? strlen(args) : 2);
      if (!args) b->oom = true;
      free(args);
      cbuf_puts(b, "}}");
    }
    cbuf_puts(b, "]");
  }
  cJSON_Delete(arr);
  return ok;
}

/* The request for the backend (protocol in backends/llm_serving/llm_backend.h): the prompt
 * as text_input, the sampling as parameters, stream=true (one response per token). */
/* ids_json: the prompt as token ids (a JSON array) when the client gave ids; the backend
 * then uses them as they are, and prompt is their text (for echo). */
static cinfer_status *build_request(cinfer_model *m, const parsed *p, const char *prompt, const char *ids_json,
                                    cinfer_request **out) {
  cinfer_request *r;
  cinfer_status *st = cinfer_request_create(m, &r);
  if (st) return st;
  size_t pl = strlen(prompt);
  unsigned char *buf = pl <= UINT32_MAX - 4 ? malloc(4 + pl) : NULL;
  if (!buf) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  uint32_t l = (uint32_t)pl;
  memcpy(buf, &l, 4); /* little-endian hosts only, as the rest of the codec */
  memcpy(buf + 4, prompt, pl);
  cinfer_tensor t = {.name = "text_input", .dtype = CINFER_TYPE_BYTES, .ndim = 1, .shape = {1},
                     .data = buf, .byte_size = 4 + pl};
  if ((st = cinfer_request_add_input_owned(r, &t, buf))) {
    free(buf);
    goto fail;
  }
  /* The backend reports the chosen token's logprob when logprobs > 0; top_n 0 still needs it. */
  int lp = p->logprobs < 0 ? 0 : (p->logprobs ? p->logprobs : 1);
  if (p->prompt_logprobs > lp) lp = p->prompt_logprobs;
  if ((ids_json && (st = cinfer_request_set_param_string(r, "prompt_token_ids", ids_json, strlen(ids_json)))) ||
      (st = cinfer_request_set_param_bool(r, "stream", true)) ||
      (st = cinfer_request_set_param_bool(r, "parse_special", true)) ||
      (st = cinfer_request_set_param_int(r, "n", p->n)) ||
      (p->max_tokens > 0 && (st = cinfer_request_set_param_int(r, "max_tokens", p->max_tokens))) ||
      (p->top_k >= 0 && (st = cinfer_request_set_param_int(r, "top_k", p->top_k))) ||
      (p->seed >= 0 && (st = cinfer_request_set_param_int(r, "seed", p->seed))) ||
      (p->priority >= 0 && (st = cinfer_request_set_param_int(r, "priority", p->priority))) ||
      (lp && (st = cinfer_request_set_param_int(r, "logprobs", lp))) ||
      /* echo + logprobs (legacy completions, as OpenAI and vLLM): the prompt's logprobs too,
       * computed in the prefill (streamed: in the echo chunk); vLLM's prompt_logprobs is for
       * whole answers only (refused with stream above) */
      (((p->echo && p->logprobs >= 0) || (p->prompt_logprobs >= 0 && !p->stream)) &&
       (st = cinfer_request_set_param_bool(r, "prompt_logprobs", true))) ||
      (p->ignore_eos && (st = cinfer_request_set_param_bool(r, "ignore_eos", true))))
    goto fail;
  for (size_t i = 0; i < N_FLOATS; i++)
    if (p->f_given[i] && (st = cinfer_request_set_param_double(r, float_keys[i], p->f[i]))) goto fail;
  if (p->tool_mode >= TOOLS_AUTO) {
    char *js = tool_calls_schema(p);
    st = js ? cinfer_request_set_param_string(r, "json_schema", js, strlen(js)) : cinfer_status_oom(NULL);
    free(js);
    if (!st && p->tool_mode == TOOLS_AUTO) st = cinfer_request_set_param_bool(r, "json_schema_or_text", true);
  } else if (p->grammar) {
    st = cinfer_request_set_param_string(r, "grammar", p->grammar, strlen(p->grammar));
  } else if (p->json_object) {
    st = cinfer_request_set_param_bool(r, "json_object", true);
  } else if (p->schema) {
    char *js = cJSON_PrintUnformatted(p->schema);
    st = js ? cinfer_request_set_param_string(r, "json_schema", js, strlen(js)) : cinfer_status_oom(NULL);
    free(js);
  }
  if (st) goto fail;
  if (cJSON_IsString(p->stop)) {
    st = cinfer_request_set_param_string(r, "stop", p->stop->valuestring, strlen(p->stop->valuestring));
  } else if (p->stop) {
    char *js = cJSON_PrintUnformatted(p->stop);
    st = js ? cinfer_request_set_param_string(r, "stop_list", js, strlen(js))
            : cinfer_status_oom(NULL);
    free(js);
  }
  if (st) goto fail;
  *out = r;
  return NULL;
fail:
  cinfer_request_release(r);
  return st;
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
  if (!cinfer_model_is_generative(m)) {
    oai_error(ex, 400, "invalid_request_error", "model",
              "model '%s' is not a language model (backend '%s' does not generate text); use the "
              "KServe v2 API", mv->valuestring, cinfer_model_backend_name(m));
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
  char *prompt = NULL, *ids_json = NULL;
  if (!parse_common(ex, j, chat, &p) || !(m = get_llm_model(fe, ex, j))) goto out;
  if (chat) {
    if (!cinfer_model_supports_chat(m)) {
      oai_error(ex, 400, "invalid_request_error", "model",
                "model '%s' does not support chat (its backend renders no chat template); use "
                "/v1/completions", cinfer_model_name(m));
      goto out;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    int nm = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
    if (nm < 1 || nm > 4096) {
      oai_error(ex, 400, "invalid_request_error", "messages", "'messages' must be a non-empty array");
      goto out;
    }
    /* one more slot: the tools' system message may be inserted first */
    const char **roles = calloc((size_t)nm + 1, sizeof *roles), **contents = calloc((size_t)nm + 1, sizeof *contents);
    char **owned = calloc((size_t)nm + 1, sizeof *owned);
    bool ok = roles && contents && owned;
    if (!ok) oai_error(ex, 500, "server_error", NULL, "out of memory");
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
      const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
      if (!strcmp(role->valuestring, "assistant") && cJSON_IsArray(calls) && calls->child) {
        cbuf t = {0};
        if (!render_tool_calls(calls, &t)) {
          cbuf_free(&t);
          oai_error(ex, 400, "invalid_request_error", "messages",
                    "messages[%d].tool_calls[] must be {\"function\": {\"name\": string, \"arguments\": string}}", i);
          ok = false;
          break;
        }
        if (!(owned[i] = cbuf_take(&t))) {
          oai_error(ex, 500, "server_error", NULL, "out of memory");
          ok = false;
          break;
        }
        contents[i] = owned[i];
      } else if (cJSON_IsString(content)) {
        contents[i] = content->valuestring;
      } else if (cJSON_IsArray(content)) { /* [{"type":"text","text":"..."}] */
        cbuf t = {0};
        for (const cJSON *part = content->child; part; part = part->next) {
          const cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
          const cJSON *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
          if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx)) {
            oai_error(ex, 400, "invalid_request_error", "messages",
                      "messages[%d].content: only text parts are supported", i);
            ok = false;
            break;
          }
          cbuf_puts(&t, tx->valuestring);
        }
        if (t.oom) {
          cbuf_free(&t);
          oai_error(ex, 500, "server_error", NULL, "out of memory");
          ok = false;
        }
        if (!ok) break;
        owned[i] = t.data ? t.data : strdup("");
        contents[i] = owned[i];
        if (!owned[i]) {
          oai_error(ex, 500, "server_error", NULL, "out of memory");
          ok = false;
        }
      } else if (cJSON_IsNull(content) || !content) {
        contents[i] = "";
      } else {
        oai_error(ex, 400, "invalid_request_error", "messages", "messages[%d].content must be a string", i);
        ok = false;
      }
    }
    if (ok && p.tools) { /* the tools, told in the system message */
      bool sys = !strcmp(roles[0], "system");
      char *t = tools_system_text(&p, sys ? contents[0] : NULL);
      if (!t) {
        oai_error(ex, 500, "server_error", NULL, "out of memory");
        ok = false;
      } else if (sys) {
        free(owned[0]);
        owned[0] = t;
        contents[0] = t;
      } else {
        memmove(roles + 1, roles, (size_t)nm * sizeof *roles);
        memmove(contents + 1, contents, (size_t)nm * sizeof *contents);
        memmove(owned + 1, owned, (size_t)nm * sizeof *owned);
        roles[0] = "system";
        contents[0] = owned[0] = t;
        nm++;
      }
    }
    cinfer_status *st = NULL;
    if (ok) st = cinfer_model_render_chat(m, roles, contents, (size_t)nm, true, &prompt);
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
    /* a string, an array of token ids, or an array of one of those (OpenAI's forms; one
     * prompt per request) */
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && (cJSON_IsString(pr->child) || cJSON_IsArray(pr->child)))
      pr = pr->child;
    if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) > 0 && cJSON_IsNumber(pr->child)) {
      int nt = cJSON_GetArraySize(pr), k = 0;
      int32_t *ids = nt <= 1 << 20 ? malloc(sizeof *ids * (size_t)nt) : NULL;
      for (const cJSON *t = pr->child; ids && t; t = t->next, k++) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble > INT32_MAX) {
          free(ids);
          oai_error(ex, 400, "invalid_request_error", "prompt", "prompt[%d] is not a token id", k);
          goto out;
        }
        ids[k] = (int32_t)t->valuedouble;
      }
      size_t pl = 0;
      cinfer_status *st = ids ? cinfer_model_detokenize(m, ids, (size_t)nt, true, &prompt, &pl)
                              : nt > 1 << 20 ? cinfer_status_new(CINFER_INVALID_ARG, "the prompt has %d tokens "
                                                                 "(limit %d)", nt, 1 << 20)
                                             : cinfer_status_oom(NULL);
      free(ids);
      if (st) {
        oai_status_error(ex, st, "prompt");
        goto out;
      }
      if (!(ids_json = cJSON_PrintUnformatted(pr))) {
        oai_error(ex, 500, "server_error", NULL, "out of memory");
        goto out;
      }
    } else if (cJSON_IsString(pr)) {
      prompt = strdup(pr->valuestring);
    } else {
      oai_error(ex, 400, "invalid_request_error", "prompt",
                "'prompt' must be a string or an array of token ids (or an array of one of those: one prompt "
                "per request)");
      goto out;
    }
  }
  if (!prompt) {
    oai_error(ex, 500, "server_error", NULL, "out of memory");
    goto out;
  }

  oai_ctx *c = calloc(1, sizeof *c);
  cinfer_status *st = c ? build_request(m, &p, prompt, ids_json, &c->req) : NULL;
  if (!c || st) {
    if (st) oai_status_error(ex, st, NULL);
    else oai_error(ex, 500, "server_error", NULL, "out of memory");
    free(c);
    goto out;
  }
  c->fe = fe;
  c->ex = ex;
  c->loop = http_exchange_loop(ex);
  c->model = m;
  m = NULL; /* the context owns the reference now */
  c->lm = metrics_for(fe->server, cinfer_model_name(c->model));
  c->chat = chat;
  c->stream = p.stream;
  c->include_usage = p.include_usage;
  c->echo = p.echo;
  c->n = p.n;
  c->logprobs = p.logprobs;
  c->prompt_logprobs = p.prompt_logprobs;
  c->tool_mode = chat ? p.tool_mode : TOOLS_OFF;
  c->created = (long long)time(NULL);
  c->t0 = clock_now_ns();
  c->task.fn = drain_task;
  respq_init(&c->q, c->loop, &c->task);
  static _Atomic uint64_t counter;
  snprintf(c->id, sizeof c->id, "%s-%llx%06llx", chat ? "chatcmpl" : "cmpl",
           (unsigned long long)c->created, (unsigned long long)(atomic_fetch_add(&counter, 1) & 0xffffff));
  cinfer_request_set_id(c->req, c->id, strlen(c->id));
  if (p.echo) c->prompt = prompt, prompt = NULL;
  cinfer_request_set_callback(c->req, on_response, c);
  http_exchange_set_cancel(ex, on_cancel, c);
  if ((st = cinfer_server_infer_async(fe->server, c->req))) {
    atomic_store(&c->answered, true);
    oai_status_error(ex, st, NULL);
    c->task.fn = ctx_free_task; /* after whatever the loop still has to do for it */
    loop_post_task(c->loop, &c->task);
  }
out:
  free(prompt);
  free(ids_json);
  cinfer_model_release(m);
  cJSON_Delete(j);
}

static void handle_models(frontend *fe, http_exchange *ex) {
  cinfer_model_index_entry *idx;
  size_t n;
  cinfer_status *st = cinfer_server_repository_index(fe->server, true, &idx, &n);
  if (st) return oai_status_error(ex, st, NULL);
  cbuf b = {0};
  cbuf_puts(&b, "{\"object\":\"list\",\"data\":[");
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    if (i && !strcmp(idx[i].name, idx[i - 1].name)) continue; /* one entry per model name */
    cinfer_model *m;
    if ((st = cinfer_server_model_acquire(fe->server, idx[i].name, 0, &m))) {
      cinfer_status_free(st);
      continue;
    }
    if (cinfer_model_is_generative(m)) {
      cbuf_puts(&b, k++ ? ",{\"id\":" : "{\"id\":");
      cbuf_json_string(&b, idx[i].name, strlen(idx[i].name));
      cbuf_puts(&b, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"cinfer\"}");
    }
    cinfer_model_release(m);
  }
  cbuf_puts(&b, "]}");
  cinfer_model_index_free(idx, n);
  if (b.oom) {
    cbuf_free(&b);
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
      if (cinfer_model_is_generative(m) && (!found || strcmp(cinfer_model_name(found), idx[i].name))) {
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
  cbuf b = {0};
  if (!detok) {
    /* llama.cpp's {"content", "add_special" (default false)} or vLLM's {"prompt",
     * "add_special_tokens" (default true)} */
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(j, "content");
    const cJSON *vprompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (!cJSON_IsString(content) && !cJSON_IsString(vprompt)) {
      oai_error(ex, 400, "invalid_request_error", content ? "content" : "prompt",
                "'content' (or 'prompt') must be a string");
      goto out;
    }
    const cJSON *text = cJSON_IsString(content) ? content : vprompt;
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(j, "add_special_tokens");
    if (!as) as = cJSON_GetObjectItemCaseSensitive(j, "add_special");
    bool add = as ? cJSON_IsTrue(as) : text == vprompt;
    int32_t *toks = NULL;
    size_t n = 0;
    cinfer_status *st = cinfer_model_tokenize(m, text->valuestring, strlen(text->valuestring), add, true,
                                            &toks, &n);
    if (st) {
      oai_status_error(ex, st, "content");
      goto out;
    }
    cbuf_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) cbuf_printf(&b, i ? ",%d" : "%d", toks[i]);
    cbuf_printf(&b, "],\"count\":%zu}", n);
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
    cinfer_status *st = ids ? cinfer_model_detokenize(m, ids, (size_t)k, true, &s, &sl)
                            : cinfer_status_oom(NULL);
    free(ids);
    if (st) {
      oai_status_error(ex, st, "tokens");
      goto out;
    }
    cbuf_puts(&b, "{\"content\":"); /* llama.cpp's name, and vLLM's */
    cbuf_json_string(&b, s, sl);
    cbuf_puts(&b, ",\"prompt\":");
    cbuf_json_string(&b, s, sl);
    cbuf_puts(&b, "}");
    free(s);
  }
  if (b.oom) oai_error(ex, 500, "server_error", NULL, "out of memory");
  else http_respond_owned(ex, 200, json_hdr, 1, b.data, b.len, free), b.data = NULL;
out:
  cbuf_free(&b);
  cinfer_model_release(m);
  cJSON_Delete(j);
}

/* GET /tokenizer_info (vLLM): the special tokens, chat template and context of the only
 * language model (?model=NAME otherwise). */
static void handle_tokenizer_info(frontend *fe, http_exchange *ex, const http_request *req) {
  cJSON *j = cJSON_CreateObject();
  for (size_t i = 0; j && i + 6 <= req->query_len; i++) /* model=NAME (names need no decoding) */
    if ((i == 0 || req->query[i - 1] == '&') && !memcmp(req->query + i, "model=", 6)) {
      size_t e = i + 6;
      while (e < req->query_len && req->query[e] != '&') e++;
      if (e - i - 6 > CINFER_MODEL_NAME_MAX) { /* never cut to a name that may exist */
        cJSON_Delete(j);
        oai_error(ex, 400, "invalid_request_error", "model",
                  "model name of %zu bytes is longer than the limit of %d bytes "
                  "(CINFER_MODEL_NAME_MAX)", e - i - 6, CINFER_MODEL_NAME_MAX);
        return;
      }
      char name[CINFER_MODEL_NAME_MAX + 1];
      snprintf(name, sizeof name, "%.*s", (int)(e - i - 6), req->query + i + 6);
      cJSON_AddStringToObject(j, "model", name);
      break;
    }
  cinfer_model *m = j ? default_llm(fe, ex, j) : NULL;
  cJSON_Delete(j);
  if (!m) return;
  char *info = NULL;
  cinfer_status *st = cinfer_model_tokenizer_info(m, &info);
  cinfer_model_release(m);
  if (st) oai_status_error(ex, st, NULL);
  else http_respond_owned(ex, 200, json_hdr, 1, info, strlen(info), free);
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
  } else if (IS("/tokenizer_info")) {
    if (!get) oai_error(ex, 405, "invalid_request_error", NULL, "method not allowed; use GET");
    else handle_tokenizer_info(fe, ex, req);
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
