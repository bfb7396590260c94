/* frontend.c: KServe v2 over HTTP/1.1 (see frontend.h).
 *
 * Inference path: handler (I/O thread) -> acquire model -> kserve_decode (binary inputs are
 * views into the received body, which the net layer keeps alive until we answer) ->
 * cinfer_server_infer_async -> response callback (worker thread) encodes the response and
 * answers the exchange -> the per-exchange context is freed on the exchange's I/O loop,
 * after which no cancel notification can arrive for it. */
#include "cinfer/model_control.h"
#include "cinfer/trace.h"
#include "core/clock.h"
#include "frontend/frontend.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "frontend/frontend_internal.h"
#include "frontend/kserve.h"
#include "net/http.h"

#ifndef CINFER_VERSION
#define CINFER_VERSION "0.0.0"
#endif


static const http_header json_hdr[] = {{"Content-Type", 12, "application/json", 16}};

static void respond_json(http_exchange *ex, int status, cbuf *b) {
  if (b->oom) {
    cbuf_free(b);
    static const char oom[] = "{\"error\":\"out of memory\"}";
    http_respond(ex, 500, json_hdr, 1, oom, sizeof oom - 1);
    return;
  }
  http_respond_owned(ex, status, json_hdr, 1, b->data, b->len, free);
  b->data = NULL;
}

void respond_error(http_exchange *ex, int status, const char *msg) {
  cbuf b = {0};
  kserve_encode_error(&b, msg);
  respond_json(ex, status, &b);
}

void respond_status(http_exchange *ex, cinfer_status *st) {
  int status = cinfer_code_http_status(cinfer_status_code(st));
  if (status == 503) {
    /* a refusal for load (max_queue_size, cinfer.max_inflight, shutting down): nothing was
     * done, the client (or a gateway in front) may retry, after this many seconds */
    static const http_header retry_hdr[] = {{"Content-Type", 12, "application/json", 16},
                                            {"Retry-After", 11, "1", 1}};
    cbuf b = {0};
    kserve_encode_error(&b, cinfer_status_message(st));
    cinfer_status_free(st);
    if (b.oom) return respond_json(ex, 503, &b);
    http_respond_owned(ex, 503, retry_hdr, 2, b.data, b.len, free);
    return;
  }
  respond_error(ex, status, cinfer_status_message(st));
  cinfer_status_free(st);
}

/* ---- path handling -------------------------------------------------------------------- */

bool parse_version(const char *s, int64_t *v) {
  if (!*s || strlen(s) > 18) return false;
  int64_t x = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return false;
    x = x * 10 + (*p - '0');
  }
  *v = x;
  return true;
}

/* ---- inference ------------------------------------------------------------------------ */

typedef struct infer_ctx {
  frontend *fe;
  http_exchange *ex;
  cinfer_request *req;
  kserve_request *kreq;
  cinfer_model *model;
  uint64_t t0;
  cinfer_response *resp;  /* the FINAL response, handed to the I/O loop */
  void *inflated;         /* the decompressed body (Content-Encoding), or NULL */
  compress_kind accept;   /* response compression (Accept-Encoding) */
  _Atomic bool answered;
  loop_task task;         /* the one hand-off to the I/O loop (no allocation per request) */
} infer_ctx;

static void ctx_free(void *arg) {
  infer_ctx *c = arg;
  cinfer_request_release(c->req);
  kserve_request_free(c->kreq);
  cinfer_model_release(c->model);
  free(c->inflated); /* after the request: its inputs may borrow it */
  free(c);
}

#define CTX_OF(t) ((infer_ctx *)((char *)(t) - offsetof(infer_ctx, task)))

static void ctx_free_task(loop_task *t) { ctx_free(CTX_OF(t)); }

/* Frees c on its exchange's loop, after whatever that loop still has to do for it. */
static void ctx_free_on_loop(infer_ctx *c, net_loop *loop) {
  c->task.fn = ctx_free_task;
  loop_post_task(loop, &c->task);
}

static void on_cancel(void *arg) {
  infer_ctx *c = arg;
  if (!atomic_load(&c->answered)) cinfer_request_cancel(c->req);
}

static void log_request(infer_ctx *c, int status, const char *err) {
  if (log_verbosity() < 1) return;
  char ver[32], code[8], us[32];
  snprintf(ver, sizeof ver, "%lld", (long long)cinfer_model_version(c->model));
  snprintf(code, sizeof code, "%d", status);
  snprintf(us, sizeof us, "%.1f", (double)(clock_now_ns() - c->t0) / 1e3);
  const char *id = kserve_request_id(c->kreq);
  const char *kv[] = {"request_id", id ? id : "", "model", cinfer_model_name(c->model), "version", ver,
                      "status", code, "duration_us", us, err ? "error" : NULL, err, NULL};
  log_event(LOG_VERBOSE, kv, "infer");
}

/* Encodes the response and answers the exchange. Runs on the exchange's I/O loop, not on
 * the model's worker thread: the worker goes straight back to the batcher for its next
 * batch while the I/O threads serialise responses (a device is never idle waiting for
 * JSON encoding). */
static void respond_task(void *arg) {
  infer_ctx *c = arg;
  cinfer_response *resp = c->resp;
  cinfer_trace *tr = cinfer_request_trace(c->req);
  if (tr) cinfer_trace_stamp(tr, CINFER_TRACE_HTTP_SEND_START);
  const cinfer_status *err = cinfer_response_error(resp);
  if (err) {
    log_request(c, cinfer_code_http_status(cinfer_status_code(err)), cinfer_status_message(err));
    respond_error(c->ex, cinfer_code_http_status(cinfer_status_code(err)), cinfer_status_message(err));
  } else {
    cbuf b = {0};
    size_t jlen = 0;
    cinfer_status *pst = kserve_prepare_response(c->kreq, resp, cinfer_model_config_get(c->model),
                                                 cinfer_model_directory(c->model));
    if (pst) {
      int code = cinfer_code_http_status(cinfer_status_code(pst));
      log_request(c, code, cinfer_status_message(pst));
      respond_status(c->ex, pst);
    } else if (!kserve_encode_response(&b, &jlen, cinfer_model_name(c->model),
                                       cinfer_model_version(c->model), c->kreq, resp)) {
      cbuf_free(&b);
      respond_error(c->ex, 500, "out of memory encoding the response");
    } else if (jlen < b.len) {
      char hl[32];
      int hn = snprintf(hl, sizeof hl, "%zu", jlen);
      http_header h[2] = {{"Content-Type", 12, "application/octet-stream", 24},
                          {"Inference-Header-Content-Length", 31, hl, (size_t)hn}};
      kserve_ext_respond_infer(c->ex, c->accept, h, 2, b.data, b.len);
    } else {
      kserve_ext_respond_infer(c->ex, c->accept, json_hdr, 1, b.data, b.len);
    }
    if (!pst) log_request(c, 200, NULL);
  }
  if (tr) cinfer_trace_stamp(tr, CINFER_TRACE_HTTP_SEND_END);
  c->resp = NULL;
  cinfer_response_free(resp);
  /* On the loop thread after the answer: no cancel notification can follow. */
  ctx_free(c);
}

static void respond_task_fn(loop_task *t) { respond_task(CTX_OF(t)); }

static void on_response(void *user, cinfer_response *resp, uint32_t flags) {
  infer_ctx *c = user;
  if (!(flags & CINFER_RESPONSE_FINAL)) { /* decoupled partials are not sent over KServe HTTP */
    cinfer_response_free(resp);
    return;
  }
  atomic_store(&c->answered, true);
  cinfer_trace *tr = cinfer_request_trace(c->req);
  if (tr) cinfer_trace_stamp(tr, CINFER_TRACE_INFER_RESPONSE_COMPLETE);
  c->resp = resp;
  c->task.fn = respond_task_fn;
  loop_post_task(http_exchange_loop(c->ex), &c->task);
}

cinfer_status *frontend_forward_headers(frontend *fe, const http_request *req, cinfer_request *r) {
  if (!fe->fwd.on) return NULL;
  for (size_t i = 0; i < req->num_headers; i++) {
    const http_header *h = &req->headers[i];
    cinfer_status *st = kserve_fwd_header(&fe->fwd, h->name, h->name_len, h->value, h->value_len, r);
    if (st) return st;
  }
  return NULL;
}

static void handle_infer(frontend *fe, http_exchange *ex, const http_request *req,
                         const char *model, int64_t version) {
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(fe->server, model, version, &m);
  if (st) return respond_status(ex, st);
  int64_t hlen = -1;
  size_t vl;
  const char *hv = http_request_header(req, "Inference-Header-Content-Length", &vl);
  if (hv) {
    char tmp[24];
    int64_t v;
    if (vl == 0 || vl >= sizeof tmp) goto bad_hlen;
    memcpy(tmp, hv, vl);
    tmp[vl] = 0;
    if (!parse_version(tmp, &v)) goto bad_hlen;
    hlen = v;
  }
  infer_ctx *c = calloc(1, sizeof *c);
  if (!c) {
    cinfer_model_release(m);
    return respond_error(ex, 500, "out of memory");
  }
  c->fe = fe;
  c->ex = ex;
  c->model = m;
  c->t0 = clock_now_ns();
  size_t ael;
  const char *ae = http_request_header(req, "Accept-Encoding", &ael);
  c->accept = ae ? compress_pick_response(ae, ael) : COMPRESS_IDENTITY;
  const char *body = req->body;
  size_t body_len = req->body_len;
  int zcode;
  if ((st = kserve_ext_inflate(fe, req, &c->inflated, &body_len, &zcode))) {
    respond_error(ex, zcode, cinfer_status_message(st));
    cinfer_status_free(st);
    ctx_free(c);
    return;
  }
  if (c->inflated) body = c->inflated;
  kserve_decode_ctx dctx = {.shm = fe->shm, .config = cinfer_model_config_get(m)};
  if ((st = kserve_decode_with(body, body_len, hlen, &fe->limits, &dctx, &c->kreq)) ||
      (st = cinfer_request_create(m, &c->req)) || (st = kserve_apply(c->kreq, c->req)) ||
      (st = frontend_forward_headers(fe, req, c->req))) {
    respond_status(ex, st);
    ctx_free(c);
    return;
  }
  cinfer_request_set_recv_times(c->req, req->recv_start_ns, c->t0); /* the handler has the whole body */
  if (log_verbosity() >= 1) /* Triton logs the same at verbose 1 */
    for (size_t i = 0; i < kserve_request_input_count(c->kreq); i++)
      if (kserve_request_input(c->kreq, i)->shm)
        LOG_V(1, "HTTP: using shared-memory for input '%s' of model '%s'",
              kserve_request_input(c->kreq, i)->t.name, model);
  cinfer_request_set_callback(c->req, on_response, c);
  http_exchange_set_cancel(ex, on_cancel, c);
  if ((st = cinfer_server_infer_async(fe->server, c->req))) {
    atomic_store(&c->answered, true);
    net_loop *loop = http_exchange_loop(ex);
    respond_status(ex, st);
    ctx_free_on_loop(c, loop);
  }
  return;
bad_hlen:
  cinfer_model_release(m);
  respond_error(ex, 400, "Inference-Header-Content-Length must be a non-negative integer");
}

/* ---- metadata, config, stats ---------------------------------------------------------- */

static void put_io(cbuf *b, const cinfer_config_io *io, bool batching) {
  cbuf_puts(b, "{\"name\":");
  cbuf_json_string(b, io->name, strlen(io->name));
  cbuf_printf(b, ",\"datatype\":\"%s\",\"shape\":[", cinfer_dtype_name(io->dtype));
  int k = 0;
  if (batching) cbuf_printf(b, "%s-1", k++ ? "," : "");
  for (int d = 0; d < io->ndim; d++) cbuf_printf(b, "%s%lld", k++ ? "," : "", (long long)io->dims[d]);
  cbuf_puts(b, "]}");
}

static void handle_model_metadata(frontend *fe, http_exchange *ex, const char *name, int64_t version) {
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(fe->server, name, version, &m);
  if (st) return respond_status(ex, st);
  const cinfer_config *c = cinfer_model_config_get(m);
  bool batching = cinfer_config_max_batch_size(c) > 0;
  cinfer_config_io io;
  cbuf b = {0};
  cbuf_puts(&b, "{\"name\":");
  cbuf_json_string(&b, name, strlen(name));
  cbuf_puts(&b, ",\"versions\":[");
  /* Every ready version: the call writes at most cap, so a full array asks again with a
   * bigger one (a model may keep any number of versions: version_policy all). */
  int64_t small[64], *vs = small;
  size_t cap = 64, nv;
  while ((nv = cinfer_server_model_versions(fe->server, name, vs, cap)) == cap) {
    int64_t *bigger = cap <= SIZE_MAX / 2 / sizeof *vs ? malloc(2 * cap * sizeof *vs) : NULL;
    if (!bigger) {
      if (vs != small) free(vs);
      cbuf_free(&b);
      cinfer_model_release(m);
      return respond_error(ex, 500, "out of memory");
    }
    if (vs != small) free(vs);
    vs = bigger;
    cap *= 2;
  }
  for (size_t i = 0; i < nv; i++) cbuf_printf(&b, "%s\"%lld\"", i ? "," : "", (long long)vs[i]);
  if (vs != small) free(vs);
  cbuf_puts(&b, "],\"platform\":");
  const char *plat = cinfer_model_platform(m);
  cbuf_json_string(&b, plat, strlen(plat));
  cbuf_puts(&b, ",\"inputs\":[");
  for (uint32_t i = 0; cinfer_config_input(c, i, &io); i++) {
    if (i) cbuf_puts(&b, ",");
    put_io(&b, &io, batching);
  }
  cbuf_puts(&b, "],\"outputs\":[");
  for (uint32_t i = 0; cinfer_config_output(c, i, &io); i++) {
    if (i) cbuf_puts(&b, ",");
    put_io(&b, &io, batching);
  }
  cbuf_puts(&b, "]}");
  cinfer_model_release(m);
  respond_json(ex, 200, &b);
}

static void handle_model_config(frontend *fe, http_exchange *ex, const char *name, int64_t version) {
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(fe->server, name, version, &m);
  if (st) return respond_status(ex, st);
  char *json = cinfer_config_json(cinfer_model_config_get(m), NULL);
  cinfer_model_release(m);
  if (!json) return respond_error(ex, 500, "out of memory");
  http_respond_owned(ex, 200, json_hdr, 1, json, strlen(json), free);
}

static void put_stat(cbuf *b, const char *k, const cinfer_duration_stat *d, bool comma) {
  cbuf_printf(b, "%s\"%s\":{\"count\":%llu,\"ns\":%llu}", comma ? "," : "", k,
              (unsigned long long)d->count, (unsigned long long)d->ns);
}

static void handle_stats(frontend *fe, http_exchange *ex, const char *name, int64_t version) {
  cinfer_model_stats *a;
  size_t n;
  cinfer_status *st = cinfer_server_model_stats(fe->server, name, version, &a, &n);
  if (st) return respond_status(ex, st);
  cbuf b = {0};
  cbuf_puts(&b, "{\"model_stats\":[");
  static const cinfer_duration_stat zero;
  for (size_t i = 0; i < n; i++) {
    const cinfer_model_stats *s = &a[i];
    cbuf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
    cbuf_json_string(&b, s->name, strlen(s->name));
    cbuf_printf(&b, ",\"version\":\"%lld\",\"last_inference\":%llu,\"inference_count\":%llu,"
                "\"execution_count\":%llu,\"inference_stats\":{",
                (long long)s->version, (unsigned long long)s->last_inference_ms,
                (unsigned long long)s->inference_count, (unsigned long long)s->execution_count);
    put_stat(&b, "success", &s->success, false);
    put_stat(&b, "fail", &s->fail, true);
    put_stat(&b, "queue", &s->queue, true);
    put_stat(&b, "compute_input", &s->compute_input, true);
    put_stat(&b, "compute_infer", &s->compute_infer, true);
    put_stat(&b, "compute_output", &s->compute_output, true);
    put_stat(&b, "cache_hit", &zero, true);
    put_stat(&b, "cache_miss", &zero, true);
    cbuf_puts(&b, "},\"batch_stats\":[]}");
  }
  cbuf_puts(&b, "]}");
  free(a);
  respond_json(ex, 200, &b);
}

static void handle_index(frontend *fe, http_exchange *ex, const http_request *req) {
  bool ready_only = false;
  if (req->body_len) {
    cJSON *j = cJSON_ParseWithLength(req->body, req->body_len);
    if (!j || !cJSON_IsObject(j)) {
      cJSON_Delete(j);
      return respond_error(ex, 400, "repository index: body must be a JSON object");
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "ready");
    if (r && !cJSON_IsBool(r)) {
      cJSON_Delete(j);
      return respond_error(ex, 400, "repository index: Invalid value for 'ready': expected a boolean");
    }
    ready_only = cJSON_IsTrue(r);
    cJSON_Delete(j);
  }
  cinfer_model_index_entry *e;
  size_t n;
  cinfer_status *st = cinfer_server_repository_index(fe->server, ready_only, &e, &n);
  if (st) return respond_status(ex, st);
  cbuf b = {0};
  cbuf_puts(&b, "[");
  for (size_t i = 0; i < n; i++) {
    cbuf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
    cbuf_json_string(&b, e[i].name, strlen(e[i].name));
    if (e[i].version >= 0) cbuf_printf(&b, ",\"version\":\"%lld\"", (long long)e[i].version);
    cbuf_printf(&b, ",\"state\":\"%s\",\"reason\":", e[i].state);
    cbuf_json_string(&b, e[i].reason, strlen(e[i].reason));
    cbuf_puts(&b, "}");
  }
  cbuf_puts(&b, "]");
  cinfer_model_index_free(e, n);
  respond_json(ex, 200, &b);
}

/* Load/unload run on their own thread: loading can take seconds and must not stall the
 * I/O thread's other connections. */
typedef struct ctl_job {
  frontend *fe;
  http_exchange *ex;
  bool load, unload_dependents;
  char name[HTTP_PATH_SEG_CAP]; /* a path segment: any model name fits */
  char *config;
  cinfer_model_file *files;  /* "file:<path>" parameters, decoded (paths and data owned) */
  size_t n_files;
} ctl_job;

static void ctl_free(ctl_job *j) {
  for (size_t i = 0; i < j->n_files; i++) {
    free((char *)j->files[i].path);
    free((void *)j->files[i].data);
  }
  free(j->files);
  free(j->config);
  free(j);
}

static void *ctl_main(void *arg) {
  ctl_job *j = arg;
  cinfer_status *st =
      !j->load      ? cinfer_server_unload_model_dependents(j->fe->server, j->name, j->unload_dependents)
      : j->n_files  ? cinfer_server_load_model_files(j->fe->server, j->name, j->config, j->files, j->n_files)
                    : cinfer_server_load_model(j->fe->server, j->name, j->config);
  if (st) respond_status(j->ex, st);
  else http_respond(j->ex, 200, json_hdr, 1, "{}", 2);
  ctl_free(j);
  return NULL;
}

/* Triton's "file:<path>": base64 contents (OpenSSL's decoder), added to j. */
static void ctl_add_file(ctl_job *j, const cJSON *it, char *err, size_t cap) {
  const char *path = it->string + 5;
  if (!cJSON_IsString(it)) {
    snprintf(err, cap, "load parameter 'file:%.200s' must be a string holding the file's contents "
             "in base64", path);
    return;
  }
  size_t len = strlen(it->valuestring);
  if (len % 4) {
    snprintf(err, cap, "load parameter 'file:%.200s': invalid base64 (length %zu is not a multiple "
             "of 4)", path, len);
    return;
  }
  if (len > (size_t)INT32_MAX) {
    snprintf(err, cap, "load parameter 'file:%.200s' is too large", path);
    return;
  }
  unsigned char *data = malloc(len / 4 * 3 + 1);
  cinfer_model_file *nf = realloc(j->files, (j->n_files + 1) * sizeof *nf);
  char *p = strdup(path);
  if (nf) j->files = nf;
  if (!data || !nf || !p) {
    free(data), free(p);
    snprintf(err, cap, "out of memory");
    return;
  }
  int n = len ? EVP_DecodeBlock(data, (const unsigned char *)it->valuestring, (int)len) : 0;
  if (n < 0) {
    free(data), free(p);
    snprintf(err, cap, "load parameter 'file:%.200s': invalid base64", path);
    return;
  }
  /* EVP_DecodeBlock counts the padding as zero bytes */
  if (len && it->valuestring[len - 1] == '=') n--;
  if (len > 1 && it->valuestring[len - 2] == '=') n--;
  j->files[j->n_files++] = (cinfer_model_file){.path = p, .data = data, .len = (size_t)n};
}

static void handle_control(frontend *fe, http_exchange *ex, const http_request *req,
                           const char *name, bool load) {
  ctl_job *j = calloc(1, sizeof *j);
  if (!j) return respond_error(ex, 500, "out of memory");
  j->fe = fe;
  j->ex = ex;
  j->load = load;
  snprintf(j->name, sizeof j->name, "%s", name);
  if (req->body_len) {
    cJSON *b = cJSON_ParseWithLength(req->body, req->body_len);
    if (!b || !cJSON_IsObject(b)) {
      cJSON_Delete(b);
      free(j);
      return respond_error(ex, 400, "repository load/unload: body must be a JSON object");
    }
    /* Triton's load parameters: "config" (a ModelConfig as a JSON string) replaces
     * config.pbtxt; "file:<path>" (base64 model files) make a temporary model directory
     * (cinfer/model_control.h). Unload: "unload_dependents" (bool). */
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "parameters");
    char err[512] = "";
    if (p && !cJSON_IsObject(p))
      snprintf(err, sizeof err, "repository load/unload: 'parameters' must be a JSON object");
    for (const cJSON *it = cJSON_IsObject(p) ? p->child : NULL; it && !err[0]; it = it->next) {
      if (!strncmp(it->string, "file:", 5) && !load)
        snprintf(err, sizeof err, "unload parameter '%.200s' is only valid for a load", it->string);
      else if (!strncmp(it->string, "file:", 5))
        ctl_add_file(j, it, err, sizeof err);
      else if (!strcmp(it->string, "unload_dependents") && load)
        snprintf(err, sizeof err, "load parameter 'unload_dependents' is only valid for an unload");
      else if (!strcmp(it->string, "unload_dependents") && !cJSON_IsBool(it))
        snprintf(err, sizeof err, "unload parameter 'unload_dependents' must be a boolean");
      else if (!strcmp(it->string, "unload_dependents"))
        j->unload_dependents = cJSON_IsTrue(it);
      else if (strcmp(it->string, "config"))
        snprintf(err, sizeof err, "%s parameter '%.200s' is not known (%s)", load ? "load" : "unload",
                 it->string, load ? "config, file:<path>" : "unload_dependents");
      else if (!strcmp(it->string, "config") && !load)
        snprintf(err, sizeof err, "unload parameter 'config' is only valid for a load");
      else if (!strcmp(it->string, "config") && !cJSON_IsString(it))
        snprintf(err, sizeof err, "load parameter 'config' must be a string holding the model "
                 "configuration as JSON");
      else if (!strcmp(it->string, "config") && !(j->config = strdup(it->valuestring)))
        snprintf(err, sizeof err, "out of memory");
    }
    cJSON_Delete(b);
    if (err[0]) {
      ctl_free(j);
      return respond_error(ex, strcmp(err, "out of memory") ? 400 : 500, err);
    }
  }
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &at, ctl_main, j)) {
    ctl_free(j);
    respond_error(ex, 503, "cannot start the load thread");
  }
  pthread_attr_destroy(&at);
}

static void handle_metrics(frontend *fe, http_exchange *ex) {
  openai_update_metrics(fe->server);
  char *text;
  size_t len;
  cinfer_status *st = cinfer_server_metrics_text(fe->server, &text, &len);
  if (st) return respond_status(ex, st);
  static const http_header h[] = {{"Content-Type", 12, "text/plain; version=0.0.4", 25}};
  http_respond_owned(ex, 200, h, 1, text, len, free);
}

static void handle_server_metadata(http_exchange *ex) {
  static const char body[] =
      "{\"name\":\"cinfer\",\"version\":\"" CINFER_VERSION "\",\"extensions\":["
      "\"sequence\",\"sequence(string_id)\"," /* sequence_batching (server/sequence.c) */
      "\"binary_tensor_data\",\"classification\",\"model_configuration\",\"model_repository\","
      "\"parameters\",\"schedule_policy\",\"statistics\",\"system_shared_memory\",\"trace\",\"logging\","
      "\"generate\",\"model_repository(unload_dependents)\"]}";
  http_respond(ex, 200, json_hdr, 1, body, sizeof body - 1);
}

/* ---- routing -------------------------------------------------------------------------- */

static void method_not_allowed(http_exchange *ex, const char *allow) {
  char msg[128];
  snprintf(msg, sizeof msg, "method not allowed; use %s", allow);
  respond_error(ex, 405, msg);
}

static void route(http_exchange *ex, const http_request *req, void *user) {
  frontend *fe = user;
  char denied[256];
  int code = api_restrictions_check_request(&fe->restrict_, req, denied, sizeof denied);
  if (code) return respond_error(ex, code, denied);
  if (fe->extra_route && fe->extra_route(fe->extra_route_user, ex, req)) return;
  if (openai_route(fe, ex, req)) return;
  http_path_segs p;
  if (!http_path_split(req->path, req->path_len, &p)) {
    char why[160];
    http_path_error(&p, why, sizeof why);
    return respond_error(ex, 400, why);
  }
  bool get = req->method_id == HTTP_GET || req->method_id == HTTP_HEAD;
  bool post = req->method_id == HTTP_POST;
  if (p.n == 1 && !strcmp(p.seg[0], "metrics")) {
    if (!get) return method_not_allowed(ex, "GET");
    return handle_metrics(fe, ex);
  }
  if (p.n == 0 || strcmp(p.seg[0], "v2")) return respond_error(ex, 404, "not found");
  if (settings_route(fe, ex, req, &p) || generate_route(fe, ex, req, &p) || kserve_ext_route(fe, ex, req, &p)) return;
  if (p.n == 1) {
    if (!get) return method_not_allowed(ex, "GET");
    return handle_server_metadata(ex);
  }
  if (p.n == 3 && !strcmp(p.seg[1], "health")) {
    if (!get) return method_not_allowed(ex, "GET");
    bool ok;
    if (!strcmp(p.seg[2], "live")) ok = cinfer_server_is_live(fe->server);
    else if (!strcmp(p.seg[2], "ready")) ok = cinfer_server_is_ready(fe->server);
    else return respond_error(ex, 404, "not found");
    return http_respond(ex, ok ? 200 : 503, NULL, 0, NULL, 0);
  }
  if (!strcmp(p.seg[1], "repository")) {
    if (p.n == 3 && !strcmp(p.seg[2], "index")) {
      if (!post) return method_not_allowed(ex, "POST");
      return handle_index(fe, ex, req);
    }
    if (p.n == 5 && !strcmp(p.seg[2], "models") &&
        (!strcmp(p.seg[4], "load") || !strcmp(p.seg[4], "unload"))) {
      if (!post) return method_not_allowed(ex, "POST");
      return handle_control(fe, ex, req, p.seg[3], !strcmp(p.seg[4], "load"));
    }
    return respond_error(ex, 404, "not found");
  }
  if (strcmp(p.seg[1], "models")) return respond_error(ex, 404, "not found");
  if (p.n == 3 && !strcmp(p.seg[2], "stats")) {
    if (!get) return method_not_allowed(ex, "GET");
    return handle_stats(fe, ex, NULL, 0);
  }
  if (p.n < 3) return respond_error(ex, 404, "not found");
  const char *name = p.seg[2];
  int64_t version = 0;
  int rest = 3;
  if (p.n >= 5 && !strcmp(p.seg[3], "versions")) {
    if (!parse_version(p.seg[4], &version) || version <= 0) {
      char msg[320];
      snprintf(msg, sizeof msg, "invalid model version '%s'", p.seg[4]);
      return respond_error(ex, 400, msg);
    }
    rest = 5;
  }
  const char *action = p.n > rest ? p.seg[rest] : "";
  if (p.n > rest + 1) return respond_error(ex, 404, "not found");
  if (!action[0]) {
    if (!get) return method_not_allowed(ex, "GET");
    return handle_model_metadata(fe, ex, name, version);
  }
  if (!strcmp(action, "ready")) {
    if (!get) return method_not_allowed(ex, "GET");
    cinfer_model *m;
    cinfer_status *st = cinfer_server_model_acquire(fe->server, name, version, &m);
    if (st && cinfer_status_code(st) == CINFER_NOT_FOUND) return respond_status(ex, st);
    bool ready = st == NULL;
    cinfer_status_free(st);
    if (ready) cinfer_model_release(m);
    return http_respond(ex, ready ? 200 : 400, NULL, 0, NULL, 0);
  }
  if (!strcmp(action, "infer")) {
    if (!post) return method_not_allowed(ex, "POST");
    return handle_infer(fe, ex, req, name, version);
  }
  if (!strcmp(action, "config")) {
    if (!get) return method_not_allowed(ex, "GET");
    return handle_model_config(fe, ex, name, version);
  }
  if (!strcmp(action, "stats")) {
    if (!get) return method_not_allowed(ex, "GET");
    return handle_stats(fe, ex, name, version);
  }
  respond_error(ex, 404, "not found");
}

static void route_metrics_only(http_exchange *ex, const http_request *req, void *user) {
  if (req->path_len == 8 && !memcmp(req->path, "/metrics", 8)) {
    if (req->method_id != HTTP_GET && req->method_id != HTTP_HEAD) return method_not_allowed(ex, "GET");
    return handle_metrics(user, ex);
  }
  respond_error(ex, 404, "not found");
}

/* One worker wake-up per epoll batch of requests instead of one per request. */
static void batch_begin(void *arg) {
  (void)arg;
  cinfer_server_defer_wakeups_begin();
}
static void batch_end(void *arg) {
  (void)arg;
  cinfer_server_defer_wakeups_flush();
}

cinfer_status *frontend_start(cinfer_server *s, const frontend_opts *o, frontend **out) {
  frontend *fe = calloc(1, sizeof *fe);
  if (!fe) return cinfer_status_oom(NULL);
  fe->server = s;
  fe->limits.max_tensor_elements = o->max_tensor_elements > 0 ? o->max_tensor_elements : (1 << 26);
  fe->limits.max_json_depth = 100; /* Triton accepts JSON nested 100 deep */
  fe->limits.max_input_bytes = o->max_input_bytes ? o->max_input_bytes : (size_t)1 << 26;
  fe->shm = o->shm;
  fe->shm_owned = !o->shm;
  fe->extra_route = o->extra_route;
  fe->extra_route_user = o->extra_route_user;
  cinfer_status *st = o->shm ? NULL : shm_registry_create(&fe->shm);
  for (size_t i = 0; !st && i < o->n_restricted_api; i++) {
    char err[256];
    if (!api_restrictions_add(&fe->restrict_, o->restricted_api[i], err, sizeof err)) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "--http-restricted-api '%s': %s", o->restricted_api[i], err);
      break;
    }
  }
  if (!st) st = kserve_fwd_init(&fe->fwd, "--http-header-forward-pattern", o->header_forward_pattern);
  if (!st && (o->tls_cert || o->tls_key)) {
    if (!o->tls_cert || !o->tls_key)
      st = cinfer_status_new(CINFER_INVALID_ARG, "--tls-cert and --tls-key go together");
    else
      st = net_tls_create(&(net_tls_opts){.server = true, .cert_file = o->tls_cert, .key_file = o->tls_key},
                          &fe->tls);
  }
  if (st) {
    frontend_destroy(fe);
    return st;
  }
  http_server_opts ho = {.host = o->host, .port = o->http_port, .io_threads = o->io_threads,
                         .max_body_bytes = o->max_body_bytes,
                         .header_timeout_ms = o->header_timeout_ms,
                         .body_timeout_ms = o->body_timeout_ms,
                         .idle_keepalive_ms = o->idle_timeout_ms,
                         .max_body_chunks = o->max_body_chunks,
                         .batch_begin = batch_begin,
                         .batch_end = batch_end,
                         .tls = fe->tls};
  st = http_server_create(&ho, route, fe, &fe->http);
  if (st) {
    frontend_destroy(fe);
    return cinfer_status_prefix(st, "HTTP port %u", o->http_port);
  }
  if (o->metrics_port >= 0) {
    http_server_opts mo = ho;
    mo.port = (uint16_t)o->metrics_port;
    mo.io_threads = 1;
    mo.tls = NULL; /* Prometheus scrapes the metrics port in plain HTTP */
    if ((st = http_server_create(&mo, route_metrics_only, fe, &fe->metrics_http))) {
      frontend_destroy(fe);
      return cinfer_status_prefix(st, "metrics port %d", o->metrics_port);
    }
  }
  *out = fe;
  return NULL;
}

uint16_t frontend_http_port(const frontend *f) { return http_server_port(f->http); }
uint16_t frontend_metrics_port(const frontend *f) {
  return f->metrics_http ? http_server_port(f->metrics_http) : 0;
}

void frontend_shutdown(frontend *f, int timeout_ms) {
  if (f->metrics_http) http_server_stop_accepting(f->metrics_http);
  http_server_shutdown(f->http, timeout_ms);
}

void frontend_destroy(frontend *f) {
  if (!f) return;
  http_server_destroy(f->http);
  http_server_destroy(f->metrics_http);
  net_tls_destroy(f->tls);
  api_restrictions_free(&f->restrict_);
  kserve_fwd_free(&f->fwd);
  if (f->shm_owned) shm_registry_destroy(f->shm);
  free(f);
}
