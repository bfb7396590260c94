/* generate.c: Triton's generate extension (docs/protocol/extension_generate.md):
 *   POST /v2/models/M[/versions/V]/generate          one JSON object
 *   POST /v2/models/M[/versions/V]/generate_stream   server-sent events, `data: {...}\n\n`
 *
 * Request mapping, as Triton's HTTP frontend does it (http_server.cc, ConvertGenerateRequest):
 * every top-level key of the body, and every key of its "parameters" object, that names a
 * model input becomes that input (a JSON scalar or a 1-D array; the shape is the input's
 * with its fixed dims filled and the innermost variable dim taking the rest, the others 1);
 * every other key becomes a request parameter (string, int, double or bool); "id" is the
 * request id. For the `llm` backend that is {"text_input": "...", "parameters":
 * {"max_tokens": 16, "stream": true, ...}} (backends/llm_serving/llm_backend.h).
 * Response mapping: "id" (when given), "model_name", "model_version", then every output
 * tensor as a top-level field: a scalar when it has one element, else an array.
 *
 * generate expects exactly one response (Triton's rule and text); a model that streams
 * more is cancelled at the second and answered 400. generate_stream sends one event per
 * response; a request refused before it runs is a plain JSON error with its status; an
 * error response of the model is a `data: {"error": "..."}` event that ends the stream: under
 * the error's status when it is the first response, else after 200 (the status line has gone
 * out already), as in Triton (L0_http/generate_endpoint_test.py). A decoupled model's FINAL response without outputs only
 * ends the stream (Triton's flag-only response). A client that goes away cancels the
 * request (the LLM engine stops the sequence and frees its KV blocks).
 *
 * One request path: the request is a cinfer_request submitted like any other (queue,
 * statistics, tracing, in-flight count); responses reach the I/O loop through respq, the
 * hand-off the OpenAI frontend uses. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/trace.h"
#include "core/clock.h"
#include "core/log.h"
#include "frontend/frontend_internal.h"
#include "frontend/respq.h"

static const http_header json_hdr[] = {{"Content-Type", 12, "application/json", 16}};
static const http_header sse_hdr[] = {{"Content-Type", 12, "text/event-stream; charset=utf-8", 32},
                                      {"Cache-Control", 13, "no-cache", 8}};

/* ---- request context ------------------------------------------------------------------ */

typedef struct gen_ctx {
  frontend *fe;
  http_exchange *ex;
  cinfer_model *model;
  cinfer_request *req;
  bool stream, decoupled;
  char *id;
  uint64_t t0;
  _Atomic bool answered;   /* FINAL arrived: a late cancel is moot */
  /* I/O loop only */
  bool stream_begun, client_gone, too_many;
  int n_content;           /* responses that carry outputs (generate: must be 1) */
  cbuf one;                /* generate: the one response's JSON */
  respq q;
  loop_task task;
} gen_ctx;

#define CTX_OF(t) ((gen_ctx *)((char *)(t) - offsetof(gen_ctx, task)))

static void ctx_free(gen_ctx *c) {
  respq_destroy(&c->q);
  cbuf_free(&c->one);
  free(c->id);
  cinfer_request_release(c->req);
  cinfer_model_release(c->model);
  free(c);
}

static void free_task(loop_task *t) { ctx_free(CTX_OF(t)); }

static void on_cancel(void *arg) {
  gen_ctx *c = arg;
  c->client_gone = true;
  if (!atomic_load(&c->answered)) cinfer_request_cancel(c->req);
}

/* Appends the generate response object of resp to b. */
static void encode(gen_ctx *c, cbuf *b, const cinfer_response *resp) {
  cbuf_puts(b, "{");
  if (c->id) {
    cbuf_puts(b, "\"id\":");
    cbuf_json_string(b, c->id, strlen(c->id));
    cbuf_puts(b, ",");
  }
  const char *mn = cinfer_model_name(c->model);
  cbuf_puts(b, "\"model_name\":");
  cbuf_json_string(b, mn, strlen(mn));
  cbuf_printf(b, ",\"model_version\":\"%lld\"", (long long)cinfer_model_version(c->model));
  uint32_t n = cinfer_response_output_count(resp);
  /* The response's parameters are fields of the object too, as on Triton; one whose key
   * is taken (id, model_name, model_version, an output's name) stays out of it. */
  for (uint32_t i = 0, np = cinfer_response_param_count(resp); i < np; i++) {
    const cinfer_param *p = cinfer_response_param(resp, i);
    bool taken = !strcmp(p->key, "id") || !strcmp(p->key, "model_name") || !strcmp(p->key, "model_version");
    for (uint32_t j = 0; j < n && !taken; j++) taken = !strcmp(cinfer_response_output(resp, j)->name, p->key);
    if (taken) continue;
    cbuf_puts(b, ",");
    cbuf_json_string(b, p->key, strlen(p->key));
    cbuf_puts(b, ":");
    cbuf_json_param_value(b, p);
  }
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    cbuf_puts(b, ",");
    cbuf_json_string(b, t->name, strlen(t->name));
    cbuf_puts(b, ":");
    cbuf data = {0};
    kserve_encode_data(&data, t);
    if (data.oom) b->oom = true;
    else if (cinfer_shape_elements(t->shape, t->ndim) == 1 && data.len >= 2)
      cbuf_put(b, data.data + 1, data.len - 2); /* one element: the value, not an array */
    else
      cbuf_put(b, data.data, data.len);
    cbuf_free(&data);
  }
  cbuf_puts(b, "}");
}

static void sse_event(cbuf *b, const char *json, size_t len) {
  cbuf_puts(b, "data: ");
  cbuf_put(b, json, len);
  cbuf_puts(b, "\n\n");
}

static void log_request(gen_ctx *c, int status, const char *err) {
  if (log_verbosity() < 1) return;
  char ver[32], code[8], us[32];
  snprintf(ver, sizeof ver, "%lld", (long long)cinfer_model_version(c->model));
  snprintf(code, sizeof code, "%d", status);
  snprintf(us, sizeof us, "%.1f", (double)(clock_now_ns() - c->t0) / 1e3);
  const char *kv[] = {"request_id", c->id ? c->id : "", "model", cinfer_model_name(c->model),
                      "version", ver, "status", code, "duration_us", us,
                      "api", c->stream ? "generate_stream" : "generate",
                      err ? "error" : NULL, err, NULL};
  log_event(LOG_VERBOSE, kv, "infer");
}

static const char too_many_msg[] =
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses";

/* The context's task on its I/O loop: encodes what is queued; after FINAL answers or ends
 * the stream and frees the context. */
static void drain_task(loop_task *t) {
  gen_ctx *c = CTX_OF(t);
  cinfer_trace *tr = cinfer_request_trace(c->req);
  cbuf b = {0};
  cinfer_response *final_resp = NULL;
  for (respq_node *n = respq_take(&c->q), *nx; n; n = nx) {
    nx = n->next;
    cinfer_response *resp = n->resp;
    if (n->final) final_resp = resp;
    respq_node_free(&c->q, n);
    bool content = !cinfer_response_error(resp) &&
                   !(final_resp == resp && c->decoupled && cinfer_response_output_count(resp) == 0);
    if (content) {
      c->n_content++;
      if (!c->stream) {
        if (c->n_content == 1) encode(c, &c->one, resp);
        else if (!c->too_many) { /* Triton's rule: stop the model, answer 400 at FINAL */
          c->too_many = true;
          if (!atomic_load(&c->answered)) cinfer_request_cancel(c->req);
        }
      } else if (!c->client_gone) {
        cbuf ev = {0};
        encode(c, &ev, resp);
        if (ev.oom) b.oom = true;
        else sse_event(&b, ev.data, ev.len);
        cbuf_free(&ev);
      }
    }
    if (resp != final_resp) cinfer_response_free(resp);
  }
  if (c->stream && !c->client_gone && atomic_load(&c->q.dropped) == 0 && (b.len || b.oom)) {
    if (!c->stream_begun) {
      c->stream_begun = true;
      cinfer_trace_stamp(tr, CINFER_TRACE_HTTP_SEND_START);
      http_stream_begin(c->ex, 200, sse_hdr, 2);
    }
    if (b.oom || !http_stream_write(c->ex, b.data, b.len)) on_cancel(c);
  }
  cbuf_free(&b);
  if (!final_resp) return;

  const cinfer_status *err = cinfer_response_error(final_resp);
  char msg[1200];
  int status = 200;
  if (atomic_load(&c->q.dropped)) {
    snprintf(msg, sizeof msg, "out of memory queueing a response: the answer is incomplete");
    status = 500;
  } else if (c->too_many) {
    snprintf(msg, sizeof msg, "%s", too_many_msg);
    status = 400;
  } else if (err) {
    snprintf(msg, sizeof msg, "%s", cinfer_status_message(err));
    status = cinfer_code_http_status(cinfer_status_code(err));
  } else if (!c->stream && c->n_content != 1) {
    snprintf(msg, sizeof msg, "%s", too_many_msg);
    status = 400;
  }
  if (!c->stream_begun) cinfer_trace_stamp(tr, CINFER_TRACE_HTTP_SEND_START);
  if (c->stream && c->stream_begun) { /* mid-stream: an error event, then the end */
    if (status != 200 && !c->client_gone) {
      cbuf e = {0}, ev = {0};
      kserve_encode_error(&e, msg);
      if (!e.oom) sse_event(&ev, e.data, e.len);
      if (!ev.oom) http_stream_write(c->ex, ev.data, ev.len);
      cbuf_free(&e);
      cbuf_free(&ev);
    }
    http_stream_end(c->ex);
  } else if (status != 200 && c->stream && !c->client_gone && err && !atomic_load(&c->q.dropped)) {
    /* The model's first response is an error: its status, and the error as the stream's one
     * event (Triton's generate_stream; a request refused before it runs stays plain JSON). */
    cbuf e = {0}, ev = {0};
    kserve_encode_error(&e, msg);
    if (!e.oom) sse_event(&ev, e.data, e.len);
    http_stream_begin(c->ex, status, sse_hdr, 2);
    if (!ev.oom) http_stream_write(c->ex, ev.data, ev.len);
    http_stream_end(c->ex);
    cbuf_free(&e);
    cbuf_free(&ev);
  } else if (status != 200) {
    respond_error(c->ex, status, msg);
  } else if (c->stream) { /* no events at all: an empty stream */
    http_stream_begin(c->ex, 200, sse_hdr, 2);
    http_stream_end(c->ex);
  } else if (c->one.oom) {
    respond_error(c->ex, 500, "out of memory encoding the response");
  } else {
    http_respond_owned(c->ex, 200, json_hdr, 1, c->one.data, c->one.len, free);
    c->one = (cbuf){0};
  }
  cinfer_trace_stamp(tr, CINFER_TRACE_HTTP_SEND_END);
  log_request(c, status, status == 200 ? NULL : msg);
  cinfer_response_free(final_resp);
  ctx_free(c); /* on the loop, after the answer: no cancel notification can follow */
}

static void on_response(void *user, cinfer_response *resp, uint32_t flags) {
  gen_ctx *c = user;
  bool final = (flags & CINFER_RESPONSE_FINAL) != 0;
  cinfer_trace_stamp(cinfer_request_trace(c->req), CINFER_TRACE_INFER_RESPONSE_COMPLETE);
  if (final) atomic_store(&c->answered, true);
  respq_push(&c->q, resp, final);
}

/* ---- request mapping ------------------------------------------------------------------ */

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)

static cinfer_status *set_param(cinfer_request *r, const char *key, const cJSON *v) {
  if (cJSON_IsString(v)) return cinfer_request_set_param_string(r, key, v->valuestring, strlen(v->valuestring));
  if (cJSON_IsBool(v)) return cinfer_request_set_param_bool(r, key, cJSON_IsTrue(v));
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) <= 9007199254740992.0) return cinfer_request_set_param_int(r, key, (int64_t)d);
    return cinfer_request_set_param_double(r, key, d);
  }
  return BAD("parameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", key);
}

/* One JSON element into p as dtype dt. */
static cinfer_status *put_elem(const char *name, cinfer_dtype dt, const cJSON *e, unsigned char *p) {
  if (dt == CINFER_TYPE_BOOL) {
    if (!cJSON_IsBool(e))
      return BAD("generate input '%s': attempt to access JSON non-boolean as boolean", name);
    *p = cJSON_IsTrue(e);
    return NULL;
  }
  if (!cJSON_IsNumber(e))
    return BAD("generate input '%s': expected a number for datatype %s", name, cinfer_dtype_name(dt));
  double d = e->valuedouble;
  bool integral = d == floor(d) && isfinite(d);
  double lo = 0, hi = 0;
  switch (dt) {
    case CINFER_TYPE_UINT8: lo = 0, hi = 255; break;
    case CINFER_TYPE_UINT16: lo = 0, hi = 65535; break;
    case CINFER_TYPE_UINT32: lo = 0, hi = 4294967295.0; break;
    case CINFER_TYPE_UINT64: lo = 0, hi = 9007199254740992.0; break;
    case CINFER_TYPE_INT8: lo = -128, hi = 127; break;
    case CINFER_TYPE_INT16: lo = -32768, hi = 32767; break;
    case CINFER_TYPE_INT32: lo = -2147483648.0, hi = 2147483647.0; break;
    case CINFER_TYPE_INT64: lo = -9007199254740992.0, hi = 9007199254740992.0; break;
    case CINFER_TYPE_FP32: { float f = (float)d; memcpy(p, &f, 4); return NULL; }
    case CINFER_TYPE_FP64: memcpy(p, &d, 8); return NULL;
    default:
      return BAD("generate input '%s' has unsupported datatype %s", name, cinfer_dtype_name(dt));
  }
  if (!integral || d < lo || d > hi)
    return BAD("generate input '%s': %.17g is not a %s value (integers beyond 2^53 cannot be "
               "given exactly in JSON)", name, d, cinfer_dtype_name(dt));
  switch (dt) {
    case CINFER_TYPE_UINT8: *p = (uint8_t)d; break;
    case CINFER_TYPE_INT8: { int8_t v = (int8_t)d; memcpy(p, &v, 1); break; }
    case CINFER_TYPE_UINT16: { uint16_t v = (uint16_t)d; memcpy(p, &v, 2); break; }
    case CINFER_TYPE_INT16: { int16_t v = (int16_t)d; memcpy(p, &v, 2); break; }
    case CINFER_TYPE_UINT32: { uint32_t v = (uint32_t)d; memcpy(p, &v, 4); break; }
    case CINFER_TYPE_INT32: { int32_t v = (int32_t)d; memcpy(p, &v, 4); break; }
    case CINFER_TYPE_UINT64: { uint64_t v = (uint64_t)d; memcpy(p, &v, 8); break; }
    default: { int64_t v = (int64_t)d; memcpy(p, &v, 8); break; }
  }
  return NULL;
}

/* A model input from a JSON scalar or 1-D array (Triton's ExactMappingInput). */
static cinfer_status *add_tensor(cinfer_request *r, const cinfer_config_io *io, bool batching,
                                 const cJSON *v, size_t max_elems) {
  const char *name = io->name;
  size_t n = cJSON_IsArray(v) ? (size_t)cJSON_GetArraySize(v) : 1;
  if (n > max_elems)
    return BAD("generate input '%s' has %zu elements; the limit is %zu (--max-tensor-elements)", name, n, max_elems);
  cinfer_tensor t = {.name = name, .dtype = io->dtype, .memory_type = CINFER_MEMORY_CPU};
  int nd = 0;
  if (batching) t.shape[nd++] = -1;
  for (int d = 0; d < io->ndim; d++) t.shape[nd++] = io->dims[d];
  t.ndim = nd;
  /* Fixed dims take their share; the innermost variable dim the rest, other ones 1. */
  size_t left = n;
  for (int d = nd - 1; d >= 0; d--)
    if (t.shape[d] != -1) {
      if (t.shape[d] == 0 || left % (size_t)t.shape[d])
        return BAD("The schema can not convert input '%s' to tensor with proper shape", name);
      left /= (size_t)t.shape[d];
    }
  for (int d = nd - 1; d >= 0; d--)
    if (t.shape[d] == -1) {
      t.shape[d] = (int64_t)left;
      left = 1;
    }
  if (left != 1) return BAD("The schema can not convert input '%s' to tensor with proper shape", name);
  const cJSON *first = cJSON_IsArray(v) ? v->child : v;
  unsigned char *buf = NULL;
  size_t bytes = 0;
  if (t.dtype == CINFER_TYPE_BYTES) {
    for (const cJSON *e = first; e && (e == first || cJSON_IsArray(v)); e = e->next) {
      if (!cJSON_IsString(e)) /* Triton's words (L0_http/generate_endpoint_test.py matches them) */
        return BAD("generate input '%s': attempt to access JSON non-string as string (expected a "
                   "string for datatype BYTES)", name);
      bytes += 4 + strlen(e->valuestring);
      if (!cJSON_IsArray(v)) break;
    }
    if (!(buf = malloc(bytes ? bytes : 1))) return cinfer_status_oom(NULL);
    size_t off = 0;
    for (const cJSON *e = first; e; e = e->next) {
      uint32_t l = (uint32_t)strlen(e->valuestring);
      buf[off] = (unsigned char)l, buf[off + 1] = (unsigned char)(l >> 8);
      buf[off + 2] = (unsigned char)(l >> 16), buf[off + 3] = (unsigned char)(l >> 24);
      memcpy(buf + off + 4, e->valuestring, l);
      off += 4 + l;
      if (!cJSON_IsArray(v)) break;
    }
  } else {
    size_t es = cinfer_dtype_size(t.dtype);
    if (!es) return BAD("generate input '%s' has unsupported datatype %s", name, cinfer_dtype_name(t.dtype));
    bytes = n * es;
    if (!(buf = malloc(bytes ? bytes : 1))) return cinfer_status_oom(NULL);
    size_t i = 0;
    for (const cJSON *e = first; e && i < n; e = e->next, i++) {
      if (cJSON_IsArray(e) || cJSON_IsObject(e)) {
        free(buf);
        return BAD("generate input '%s' must be a scalar or a 1-D array", name);
      }
      cinfer_status *st = put_elem(name, t.dtype, e, buf + i * es);
      if (st) {
        free(buf);
        return st;
      }
      if (!cJSON_IsArray(v)) break;
    }
  }
  t.data = buf;
  t.byte_size = bytes;
  cinfer_status *st = cinfer_request_add_input_owned(r, &t, buf);
  if (st) free(buf);
  return st;
}

/* Every key of obj: an input when the model has one of that name, else a parameter. */
static cinfer_status *map_keys(cinfer_request *r, size_t max_elems, const cinfer_config *mc,
                               const cJSON *obj, bool top) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    const char *k = it->string;
    if (top && !strcmp(k, "id")) continue;
    cinfer_config_io in;
    const cinfer_config_io *io = cinfer_config_input_by_name(mc, k, &in) ? &in : NULL;
    if (top && !strcmp(k, "parameters")) {
      if (io) return BAD("Keyword 'parameters' for nested schema also given as input tensor name");
      if (!cJSON_IsObject(it)) return BAD("Expected JSON object for keyword: 'parameters'");
      cinfer_status *st = map_keys(r, max_elems, mc, it, false);
      if (st) return cinfer_status_prefix(st, "Converting keyword: 'parameters'");
      continue;
    }
    cinfer_status *st = io ? add_tensor(r, io, cinfer_config_max_batch_size(mc) > 0, it, max_elems)
                           : set_param(r, k, it);
    if (st) return st;
  }
  return NULL;
}

cinfer_status *generate_build_request(cinfer_model *m, const char *body, size_t len,
                                     size_t max_elems, cinfer_request **out, char **id) {
  *out = NULL;
  *id = NULL;
  cJSON *j = NULL;
  if (len) {
    j = cJSON_ParseWithLength(body, len);
    if (!j || !cJSON_IsObject(j)) {
      cJSON_Delete(j);
      return BAD("generate: the request body must be a JSON object");
    }
  }
  cinfer_status *st = NULL;
  const cJSON *jid = j ? cJSON_GetObjectItemCaseSensitive(j, "id") : NULL;
  if (jid && !cJSON_IsString(jid)) st = BAD("generate: 'id' must be a string");
  else if (jid && jid->valuestring[0] && !(*id = strdup(jid->valuestring))) st = cinfer_status_oom(NULL);
  if (!st) st = cinfer_request_create(m, out);
  if (!st && *id) cinfer_request_set_id(*out, *id, strlen(*id));
  if (!st && j) st = map_keys(*out, max_elems, cinfer_model_config_get(m), j, true);
  cJSON_Delete(j);
  if (st) {
    cinfer_request_release(*out);
    *out = NULL;
    free(*id);
    *id = NULL;
  }
  return st;
}

static void handle_generate(frontend *fe, http_exchange *ex, const http_request *req,
                            const char *model, int64_t version, bool stream) {
  uint64_t t0 = clock_now_ns();
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(fe->server, model, version, &m);
  if (st) return respond_status(ex, st);
  gen_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    cinfer_model_release(m);
    return respond_error(ex, 500, "out of memory");
  }
  c->fe = fe;
  c->ex = ex;
  c->model = m;
  c->stream = stream;
  c->decoupled = cinfer_model_is_decoupled(m);
  c->t0 = t0;
  c->task.fn = drain_task;
  respq_init(&c->q, http_exchange_loop(ex), &c->task);
  size_t lim = fe->limits.max_input_bytes;
  if (lim && req->body_len > lim) { /* Triton's limit and text, as for the infer JSON */
    char msg[256];
    snprintf(msg, sizeof msg, "request JSON size of %zu bytes exceeds the maximum allowed input size "
             "of %zu bytes. Use --http-max-input-size to increase the limit.", req->body_len, lim);
    respond_error(ex, 400, msg);
    ctx_free(c);
    return;
  }
  if ((st = generate_build_request(m, req->body, req->body_len, (size_t)fe->limits.max_tensor_elements,
                                   &c->req, &c->id)) ||
      (st = frontend_forward_headers(fe, req, c->req))) {
    respond_status(ex, st);
    ctx_free(c);
    return;
  }
  cinfer_request_set_recv_times(c->req, req->recv_start_ns, t0);
  cinfer_request_set_callback(c->req, on_response, c);
  http_exchange_set_cancel(ex, on_cancel, c);
  if ((st = cinfer_server_infer_async(fe->server, c->req))) {
    atomic_store(&c->answered, true);
    net_loop *loop = http_exchange_loop(ex);
    respond_status(ex, st);
    /* No callback will run: free on the loop, after what it still does for the exchange. */
    c->task.fn = free_task;
    loop_post_task(loop, &c->task);
  }
}

bool generate_route(frontend *fe, http_exchange *ex, const http_request *req,
                    const http_path_segs *p) {
  /* v2 models NAME [versions V] generate|generate_stream */
  if (p->n < 4 || strcmp(p->seg[0], "v2") || strcmp(p->seg[1], "models")) return false;
  int rest = 3;
  int64_t version = 0;
  if (p->n == 6 && !strcmp(p->seg[3], "versions")) rest = 5;
  if (p->n != rest + 1) return false;
  const char *action = p->seg[rest];
  bool stream = !strcmp(action, "generate_stream");
  if (!stream && strcmp(action, "generate")) return false;
  if (rest == 5 && (!parse_version(p->seg[4], &version) || version <= 0)) {
    char msg[320];
    snprintf(msg, sizeof msg, "invalid model version '%s'", p->seg[4]);
    respond_error(ex, 400, msg);
    return true;
  }
  if (req->method_id != HTTP_POST) {
    respond_error(ex, 405, "method not allowed; use POST");
    return true;
  }
  handle_generate(fe, ex, req, p->seg[2], version, stream);
  return true;
}
