/* pipeline.c: how a frame goes through the model: in-process (a cinfer_server on the
 * repository, the request submitted asynchronously, so frames of every stream meet in the
 * step models' dynamic batchers) or over HTTP to a `cinfer serve` (KServe v2 with binary
 * tensors, one keep-alive connection per sender thread). Both end in
 * streams_frame_set_outputs, so the JSON lines are the same whichever way a frame went. */
#include "streams/streams.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cinfer/cinfer.h"
#include "core/buf.h"
#include "core/clock.h"
#include "net/http.h"

struct streams_pipeline {
  const streams_config *cfg;
  streams_done_fn done;
  void *user;
  bool jpeg;
  char input[128];
  /* in-process */
  cinfer_server *srv;
  cinfer_model *model;
  /* HTTP */
  bool remote;
  streams_addr addr;
  pthread_t *senders;
  int n_senders;
  pthread_mutex_t mu;
  pthread_cond_t cv, idle;
  streams_frame *qhead, *qtail;
  bool stop;
  int inflight;
};

bool streams_pipeline_wants_jpeg(const streams_pipeline *p) { return p->jpeg; }

/* ---- outputs to JSON ------------------------------------------------------------------ */

static void json_elems(cbuf *b, const streams_output *o, int dim, size_t *idx, const uint8_t **bp,
                       const uint8_t *end, bool *bad) {
  int64_t n = o->ndim ? o->shape[dim] : 1;
  bool leaf = dim >= o->ndim - 1;
  if (o->ndim) cbuf_puts(b, "[");
  for (int64_t i = 0; i < n && !*bad; i++) {
    if (i) cbuf_puts(b, ",");
    if (!leaf) {
      json_elems(b, o, dim + 1, idx, bp, end, bad);
      continue;
    }
    size_t k = (*idx)++;
    switch (o->dtype) {
      case CINFER_TYPE_FP32: {
        float v;
        memcpy(&v, (const char *)o->data + k * 4, 4);
        if (v != v || v > 3e38f || v < -3e38f) cbuf_puts(b, "null");
        else cbuf_printf(b, "%.6g", (double)v);
        break;
      }
      case CINFER_TYPE_INT32: {
        int32_t v;
        memcpy(&v, (const char *)o->data + k * 4, 4);
        cbuf_printf(b, "%d", v);
        break;
      }
      case CINFER_TYPE_INT64: {
        int64_t v;
        memcpy(&v, (const char *)o->data + k * 8, 8);
        cbuf_printf(b, "%lld", (long long)v);
        break;
      }
      case CINFER_TYPE_UINT8: cbuf_printf(b, "%u", ((const uint8_t *)o->data)[k]); break;
      case CINFER_TYPE_BYTES: {
        uint32_t len;
        if (end - *bp < 4) {
          *bad = true;
          break;
        }
        memcpy(&len, *bp, 4);
        *bp += 4;
        if ((size_t)(end - *bp) < len) {
          *bad = true;
          break;
        }
        cbuf_json_string_utf8(b, (const char *)*bp, len);
        *bp += len;
        break;
      }
      default: cbuf_puts(b, "null"); break;
    }
  }
  if (o->ndim) cbuf_puts(b, "]");
}

static const streams_output *find_out(const streams_output *o, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(o[i].name, name)) return &o[i];
  return NULL;
}

/* row r of a [N, 1] (or [N]) BYTES tensor as a C string into dst */
static void bytes_row(const streams_output *o, int64_t r, char *dst, size_t cap) {
  dst[0] = 0;
  const uint8_t *p = o->data, *end = p + o->byte_size;
  for (int64_t i = 0; p + 4 <= end; i++) {
    uint32_t len;
    memcpy(&len, p, 4);
    p += 4;
    if ((size_t)(end - p) < len) return;
    if (i == r) {
      snprintf(dst, cap, "%.*s", (int)len, (const char *)p);
      return;
    }
    p += len;
  }
}

cinfer_status *streams_frame_set_outputs(streams_frame *f, const streams_output *o, int n) {
  cbuf b = {0};
  cbuf_puts(&b, "{");
  for (int i = 0; i < n; i++) {
    /* elements, saturating (a remote answer's shape is outside input) */
    uint64_t el = 1;
    for (int d = 0; d < o[i].ndim; d++) {
      uint64_t v = o[i].shape[d] < 0 ? 0 : (uint64_t)o[i].shape[d];
      el = v && el > UINT64_MAX / 2 / v ? UINT64_MAX / 2 : el * v;
    }
    cinfer_dtype dt = o[i].dtype;
    bool known = dt == CINFER_TYPE_FP32 || dt == CINFER_TYPE_INT32 || dt == CINFER_TYPE_INT64 ||
                 dt == CINFER_TYPE_UINT8 || dt == CINFER_TYPE_BYTES;
    size_t es = cinfer_dtype_size(dt);
    if (dt != CINFER_TYPE_BYTES && known && (el > SIZE_MAX / 8 || el * es > o[i].byte_size)) {
      cbuf_free(&b);
      return cinfer_status_new(CINFER_INTERNAL, "output '%s': %zu bytes for %llu elements", o[i].name,
                               o[i].byte_size, (unsigned long long)el);
    }
    if (i) cbuf_puts(&b, ",");
    cbuf_json_string(&b, o[i].name, strlen(o[i].name));
    cbuf_puts(&b, ":");
    size_t idx = 0;
    const uint8_t *bp = o[i].data, *end = bp + o[i].byte_size;
    bool bad = false;
    if (el == 0 && o[i].ndim) {
      cbuf_puts(&b, "[]");
      continue;
    }
    if (!known) { /* a type no pipeline output has: named, not printed */
      cbuf_printf(&b, "{\"datatype\":\"%s\"}", cinfer_dtype_name(dt));
      continue;
    }
    json_elems(&b, &o[i], 0, &idx, &bp, end, &bad);
    if (bad) {
      cbuf_free(&b);
      return cinfer_status_new(CINFER_INTERNAL, "output '%s': malformed BYTES tensor", o[i].name);
    }
  }
  cbuf_puts(&b, "}");
  if (b.oom) return cinfer_status_oom(NULL);
  f->json = cbuf_take(&b);
  /* boxes and labels for the live page */
  const streams_output *bx = find_out(o, n, "BOXES");
  if (bx && bx->dtype == CINFER_TYPE_FP32 && bx->ndim == 2 && bx->shape[1] == 4 && bx->shape[0] > 0 &&
      (size_t)bx->shape[0] * 16 <= bx->byte_size) {
    int nb = (int)(bx->shape[0] > 64 ? 64 : bx->shape[0]);
    f->boxes = malloc((size_t)nb * 16);
    f->labels = calloc((size_t)nb, sizeof *f->labels);
    if (!f->boxes || !f->labels) return cinfer_status_oom(NULL);
    memcpy(f->boxes, bx->data, (size_t)nb * 16);
    f->n_boxes = nb;
    const streams_output *sc = find_out(o, n, "SCORES"), *age = find_out(o, n, "AGE"),
                         *gen = find_out(o, n, "GENDER"), *ex = find_out(o, n, "EXPRESSION");
    for (int k = 0; k < nb; k++) {
      char l[160] = "", g[48], e[48];
      size_t off = 0;
      if (sc && sc->dtype == CINFER_TYPE_FP32 && (size_t)(k + 1) * 4 <= sc->byte_size) {
        float v;
        memcpy(&v, (const char *)sc->data + k * 4, 4);
        off += (size_t)snprintf(l + off, sizeof l - off, "%.2f", (double)v);
      }
      if (age && age->dtype == CINFER_TYPE_FP32 && (size_t)(k + 1) * 4 <= age->byte_size) {
        float v;
        memcpy(&v, (const char *)age->data + k * 4, 4);
        off += (size_t)snprintf(l + off, sizeof l - off, " age %.0f", (double)v);
      }
      if (gen && gen->dtype == CINFER_TYPE_BYTES) {
        bytes_row(gen, k, g, sizeof g);
        if (off < sizeof l) off += (size_t)snprintf(l + off, sizeof l - off, " %s", g);
      }
      if (ex && ex->dtype == CINFER_TYPE_BYTES) {
        bytes_row(ex, k, e, sizeof e);
        if (off < sizeof l) snprintf(l + off, sizeof l - off, " %s", e);
      }
      f->labels[k] = strdup(l);
    }
  }
  return NULL;
}

/* ---- in-process ----------------------------------------------------------------------- */

static void inproc_cb(void *user, cinfer_response *resp, uint32_t flags) {
  streams_frame *f = user;
  if (!(flags & CINFER_RESPONSE_FINAL)) { /* a decoupled pipeline: only the final one counts */
    cinfer_response_free(resp);
    return;
  }
  streams_pipeline *p = NULL;
  memcpy(&p, &f->next, sizeof p); /* stashed by submit; the frame's list link is free now */
  f->next = NULL;
  const cinfer_status *e = cinfer_response_error(resp);
  if (e) {
    f->error = cinfer_status_new(cinfer_status_code(e), "%s", cinfer_status_message(e));
  } else {
    uint32_t n = cinfer_response_output_count(resp);
    streams_output *o = calloc(n ? n : 1, sizeof *o);
    if (!o) {
      f->error = cinfer_status_oom(NULL);
    } else {
      for (uint32_t i = 0; i < n; i++) {
        const cinfer_tensor *t = cinfer_response_output(resp, i);
        o[i] = (streams_output){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data,
                                .byte_size = t->byte_size};
        memcpy(o[i].shape, t->shape, sizeof t->shape);
      }
      f->error = streams_frame_set_outputs(f, o, (int)n);
      free(o);
    }
  }
  cinfer_response_free(resp);
  f->done_ns = clock_now_ns();
  p->done(p->user, f);
  pthread_mutex_lock(&p->mu);
  if (--p->inflight == 0) pthread_cond_broadcast(&p->idle);
  pthread_mutex_unlock(&p->mu);
}

static cinfer_status *inproc_submit(streams_pipeline *p, streams_frame *f) {
  cinfer_request *r = NULL;
  cinfer_status *st = cinfer_request_create(p->model, &r);
  if (st) return st;
  cinfer_tensor t = {.name = p->input};
  if (p->jpeg) {
    t.dtype = CINFER_TYPE_BYTES;
    t.ndim = 2;
    t.shape[0] = 1;
    t.shape[1] = 1;
    t.data = f->jpeg;
    t.byte_size = f->jpeg_len;
  } else {
    t.dtype = CINFER_TYPE_UINT8;
    t.ndim = 4;
    t.shape[0] = 1;
    t.shape[1] = f->h;
    t.shape[2] = f->w;
    t.shape[3] = 3;
    t.data = f->rgb;
    t.byte_size = (size_t)f->w * (size_t)f->h * 3;
  }
  if ((st = cinfer_request_add_input(r, &t))) {
    cinfer_request_release(r);
    return st;
  }
  memcpy(&f->next, &p, sizeof p);
  cinfer_request_set_callback(r, inproc_cb, f);
  pthread_mutex_lock(&p->mu);
  p->inflight++;
  pthread_mutex_unlock(&p->mu);
  st = cinfer_server_infer_async(p->srv, r);
  cinfer_request_release(r);
  if (st) {
    f->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (--p->inflight == 0) pthread_cond_broadcast(&p->idle);
    pthread_mutex_unlock(&p->mu);
  }
  return st;
}

static cinfer_status *inproc_create(streams_pipeline *p) {
  const streams_config *c = p->cfg;
  const char *startup[1] = {c->model};
  cinfer_server_options o = {.model_repository = c->repository,
                             .control_mode = CINFER_MODEL_CONTROL_EXPLICIT,
                             .startup_models = startup,
                             .n_startup_models = 1,
                             .threads = c->threads};
  cinfer_status *st = cinfer_server_create(&o, &p->srv);
  if (st) return st;
  if ((st = cinfer_server_model_acquire(p->srv, c->model, 0, &p->model))) {
    cinfer_model_index_entry *e = NULL;
    size_t n = 0;
    const char *why = NULL;
    if (!cinfer_server_repository_index(p->srv, false, &e, &n))
      for (size_t i = 0; i < n; i++)
        if (!strcmp(e[i].name, c->model) && e[i].reason && e[i].reason[0]) why = e[i].reason;
    cinfer_status *s2 = cinfer_status_new(cinfer_status_code(st), "model '%s' in '%s' is not ready: %s",
                                          c->model, c->repository, why ? why : cinfer_status_message(st));
    cinfer_model_index_free(e, n);
    cinfer_status_free(st);
    return s2;
  }
  const cinfer_config *cc = cinfer_model_config_get(p->model);
  cinfer_config_io in;
  if (cinfer_config_input_count(cc) != 1 || !cinfer_config_input(cc, 0, &in))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "model '%s' has %u inputs; cinfer streams feeds a pipeline with one image input",
                             c->model, cinfer_config_input_count(cc));
  snprintf(p->input, sizeof p->input, "%s", in.name);
  if (in.dtype == CINFER_TYPE_BYTES) p->jpeg = true;
  else if (in.dtype != CINFER_TYPE_UINT8)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "model '%s' input '%s' is %s; cinfer streams sends UINT8 [1, H, W, 3] frames or "
                             "BYTES (JPEG)",
                             c->model, in.name, cinfer_dtype_name(in.dtype));
  return NULL;
}

/* ---- HTTP ----------------------------------------------------------------------------- */

/* One request on *fd (reconnecting once when a kept-alive connection was closed). The
 * response body goes to *body (head in *hdr_len bytes parsed into status/ihcl). */
static cinfer_status *http_exchange_once(streams_pipeline *p, int *fd, const cbuf *req, int *status,
                                         long long *ihcl, cbuf *body) {
  for (int attempt = 0; attempt < 2; attempt++) {
    if (*fd < 0 && (*fd = streams_tcp_connect(&p->addr, 30)) < 0)
      return cinfer_status_new(CINFER_UNAVAILABLE, "cannot connect to %s:%s: %s", p->addr.host, p->addr.port,
                               strerror(errno));
    body->len = 0;
    if (!streams_send_all(*fd, req->data, req->len)) {
      close(*fd);
      *fd = -1;
      continue;
    }
    char head[16384];
    size_t hl = 0;
    http_header hs[64];
    http_response r;
    http_parse_error pe;
    http_limits lim = {.max_header_bytes = sizeof head, .max_headers = 64};
    for (;;) {
      ssize_t k = recv(*fd, head + hl, sizeof head - hl, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      size_t prev = hl;
      hl += (size_t)k;
      http_parse_result pr = http_parse_response(head, hl, prev, &lim, false, hs, 64, &r, &pe);
      if (pr == HTTP_PARSE_ERROR) {
        close(*fd);
        *fd = -1;
        return cinfer_status_new(CINFER_INTERNAL, "bad HTTP response from %s:%s: %s", p->addr.host, p->addr.port,
                                 pe.message);
      }
      if (pr == HTTP_PARSE_OK) {
        if (r.body_kind != HTTP_BODY_LENGTH && r.body_kind != HTTP_BODY_NONE) {
          close(*fd);
          *fd = -1;
          return cinfer_status_new(CINFER_INTERNAL, "HTTP response from %s:%s is not Content-Length framed",
                                   p->addr.host, p->addr.port);
        }
        *status = r.status;
        size_t vl = 0;
        const char *v = http_find_header(r.headers, r.num_headers, "Inference-Header-Content-Length", &vl);
        *ihcl = v ? strtoll(v, NULL, 10) : -1;
        uint64_t want = r.body_kind == HTTP_BODY_LENGTH ? r.content_length : 0;
        if (want > (1u << 30)) {
          close(*fd);
          *fd = -1;
          return cinfer_status_new(CINFER_INTERNAL, "HTTP response of %llu bytes", (unsigned long long)want);
        }
        cbuf_put(body, head + r.head_len, hl - r.head_len);
        if (!cbuf_reserve(body, (size_t)want)) return cinfer_status_oom(NULL);
        while (body->len < want) {
          ssize_t m = recv(*fd, body->data + body->len, (size_t)want - body->len, 0);
          if (m < 0 && errno == EINTR) continue;
          if (m <= 0) {
            close(*fd);
            *fd = -1;
            return cinfer_status_new(CINFER_UNAVAILABLE, "%s:%s closed the connection mid-response",
                                     p->addr.host, p->addr.port);
          }
          body->len += (size_t)m;
        }
        body->data[body->len] = 0;
        if (!r.keep_alive) {
          close(*fd);
          *fd = -1;
        }
        return NULL;
      }
      if (hl == sizeof head) break;
    }
    close(*fd);
    *fd = -1;
    if (hl) return cinfer_status_new(CINFER_UNAVAILABLE, "%s:%s: truncated HTTP response", p->addr.host, p->addr.port);
    /* nothing came back on a reused connection: retry once on a fresh one */
  }
  return cinfer_status_new(CINFER_UNAVAILABLE, "%s:%s closed the connection", p->addr.host, p->addr.port);
}

cinfer_status *streams_kserve_response(streams_frame *f, const char *data, size_t len, long long ihcl) {
  const struct {
    const char *data;
    size_t len;
  } b0 = {data, len}, *body = &b0;
  size_t jl = ihcl >= 0 ? (size_t)ihcl : body->len;
  if (jl > body->len) return cinfer_status_new(CINFER_INTERNAL, "Inference-Header-Content-Length past the body");
  cJSON *j = cJSON_ParseWithLength(body->data, jl);
  if (!j) return cinfer_status_new(CINFER_INTERNAL, "response is not JSON");
  const cJSON *outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
  int n = cJSON_GetArraySize(outs);
  streams_output *o = calloc((size_t)(n ? n : 1), sizeof *o);
  void **own = calloc((size_t)(n ? n : 1), sizeof *own);
  cinfer_status *st = NULL;
  if (!o || !own) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  size_t off = jl;
  int i = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, outs) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(x, "datatype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(x, "shape");
    if (!cJSON_IsString(nm) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
        cJSON_GetArraySize(sh) > CINFER_MAX_DIMS) {
      st = cinfer_status_new(CINFER_INTERNAL, "response output %d lacks name, datatype or shape", i);
      goto out;
    }
    streams_output *t = &o[i];
    t->name = nm->valuestring;
    t->dtype = cinfer_dtype_parse(dt->valuestring, strlen(dt->valuestring));
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
      if (!cJSON_IsNumber(d) || !(d->valuedouble >= 0 && d->valuedouble <= 1e12) ||
          d->valuedouble != (double)(int64_t)d->valuedouble) {
        st = cinfer_status_new(CINFER_INTERNAL, "output '%s': bad shape", t->name);
        goto out;
      }
      t->shape[t->ndim++] = (int64_t)d->valuedouble;
    }
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(x, "parameters"),
                                                       "binary_data_size");
    if (cJSON_IsNumber(bs)) {
      if (!(bs->valuedouble >= 0 && bs->valuedouble <= (double)(body->len - off))) {
        st = cinfer_status_new(CINFER_INTERNAL, "output '%s': binary data past the body", t->name);
        goto out;
      }
      size_t sz = (size_t)bs->valuedouble;
      if (sz > body->len - off) {
        st = cinfer_status_new(CINFER_INTERNAL, "output '%s': binary data past the body", t->name);
        goto out;
      }
      t->data = body->data + off;
      t->byte_size = sz;
      off += sz;
    } else { /* JSON data (e.g. every output empty): FP32 and BYTES are what pipelines return */
      const cJSON *arr = cJSON_GetObjectItemCaseSensitive(x, "data");
      cbuf b = {0};
      const cJSON *v;
      cJSON_ArrayForEach(v, arr) {
        if (t->dtype == CINFER_TYPE_BYTES && cJSON_IsString(v)) {
          uint32_t l = (uint32_t)strlen(v->valuestring);
          cbuf_put(&b, &l, 4);
          cbuf_put(&b, v->valuestring, l);
        } else if (t->dtype == CINFER_TYPE_FP32 && cJSON_IsNumber(v)) {
          double dv = v->valuedouble;
          float fv = dv > 3.4e38 ? INFINITY : dv < -3.4e38 ? -INFINITY : (float)dv;
          cbuf_put(&b, &fv, 4);
        } else {
          cbuf_free(&b);
          st = cinfer_status_new(CINFER_INTERNAL, "output '%s': JSON data of %s not supported", t->name,
                                 dt->valuestring);
          goto out;
        }
      }
      own[i] = b.data;
      t->data = b.data ? b.data : "";
      t->byte_size = b.len;
    }
    i++;
  }
  st = streams_frame_set_outputs(f, o, i);
out:
  for (int k = 0; own && k < n; k++) free(own[k]);
  free(own);
  free(o);
  cJSON_Delete(j);
  return st;
}

static void http_run_frame(streams_pipeline *p, int *fd, streams_frame *f, cbuf *req, cbuf *body) {
  size_t data_len = p->jpeg ? f->jpeg_len : (size_t)f->w * (size_t)f->h * 3;
  char hdr[512];
  int hl;
  if (p->jpeg)
    hl = snprintf(hdr, sizeof hdr,
                  "{\"inputs\":[{\"name\":\"%s\",\"shape\":[1,1],\"datatype\":\"BYTES\","
                  "\"parameters\":{\"binary_data_size\":%zu}}],\"parameters\":{\"binary_data_output\":true}}",
                  p->input, data_len);
  else
    hl = snprintf(hdr, sizeof hdr,
                  "{\"inputs\":[{\"name\":\"%s\",\"shape\":[1,%d,%d,3],\"datatype\":\"UINT8\","
                  "\"parameters\":{\"binary_data_size\":%zu}}],\"parameters\":{\"binary_data_output\":true}}",
                  p->input, f->h, f->w, data_len);
  req->len = 0;
  cbuf_printf(req,
              "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/octet-stream\r\n"
              "Inference-Header-Content-Length: %d\r\nContent-Length: %zu\r\n\r\n",
              p->cfg->model, p->addr.host, p->addr.port, hl, (size_t)hl + data_len);
  cbuf_put(req, hdr, (size_t)hl);
  cbuf_put(req, p->jpeg ? (const void *)f->jpeg : (const void *)f->rgb, data_len);
  if (req->oom) {
    f->error = cinfer_status_oom(NULL);
    return;
  }
  int status = 0;
  long long ihcl = -1;
  cinfer_status *st = http_exchange_once(p, fd, req, &status, &ihcl, body);
  if (st) {
    f->error = st;
    return;
  }
  if (status != 200) {
    cJSON *j = cJSON_ParseWithLength(body->data ? body->data : "", body->len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    f->error = cinfer_status_new(status >= 500 ? CINFER_INTERNAL : CINFER_INVALID_ARG, "HTTP %d: %s", status,
                                 cJSON_IsString(e) ? e->valuestring : "(no error message)");
    cJSON_Delete(j);
    return;
  }
  f->error = streams_kserve_response(f, body->data ? body->data : "", body->len, ihcl);
}

static void *sender_main(void *arg) {
  streams_pipeline *p = arg;
  int fd = -1;
  cbuf req = {0}, body = {0};
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->qhead && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
    if (!p->qhead) break;
    streams_frame *f = p->qhead;
    p->qhead = f->next;
    if (!p->qhead) p->qtail = NULL;
    f->next = NULL;
    pthread_mutex_unlock(&p->mu);
    http_run_frame(p, &fd, f, &req, &body);
    f->done_ns = clock_now_ns();
    p->done(p->user, f);
    pthread_mutex_lock(&p->mu);
    if (--p->inflight == 0) pthread_cond_broadcast(&p->idle);
  }
  pthread_mutex_unlock(&p->mu);
  if (fd >= 0) close(fd);
  cbuf_free(&req);
  cbuf_free(&body);
  return NULL;
}

/* one blocking GET for setup */
static cinfer_status *http_get(streams_pipeline *p, const char *path, int *status, cbuf *body) {
  cbuf req = {0};
  cbuf_printf(&req, "GET %s HTTP/1.1\r\nHost: %s:%s\r\n\r\n", path, p->addr.host, p->addr.port);
  int fd = -1;
  long long ih;
  cinfer_status *st = req.oom ? cinfer_status_oom(NULL) : http_exchange_once(p, &fd, &req, status, &ih, body);
  if (fd >= 0) close(fd);
  cbuf_free(&req);
  return st;
}

static cinfer_status *remote_create(streams_pipeline *p) {
  const streams_config *c = p->cfg;
  cinfer_status *st = streams_addr_parse("--url", c->url, &p->addr);
  if (st) return st;
  char path[600];
  snprintf(path, sizeof path, "/v2/models/%s", c->model);
  int status = 0;
  cbuf body = {0};
  st = http_get(p, path, &status, &body);
  if (st) {
    cbuf_free(&body);
    return st;
  }
  cJSON *j = cJSON_ParseWithLength(body.data ? body.data : "", body.len);
  if (status != 200) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    st = cinfer_status_new(CINFER_NOT_FOUND, "model '%s' at %s: HTTP %d: %s", c->model, c->url, status,
                           cJSON_IsString(e) ? e->valuestring : "");
  } else {
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(j, "inputs");
    const cJSON *in0 = cJSON_GetArrayItem(ins, 0);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(in0, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in0, "datatype");
    if (cJSON_GetArraySize(ins) != 1 || !cJSON_IsString(nm) || !cJSON_IsString(dt)) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "model '%s' at %s: needs exactly one input", c->model, c->url);
    } else {
      snprintf(p->input, sizeof p->input, "%s", nm->valuestring);
      if (!strcmp(dt->valuestring, "BYTES")) p->jpeg = true;
      else if (strcmp(dt->valuestring, "UINT8"))
        st = cinfer_status_new(CINFER_INVALID_ARG, "model '%s' input '%s' is %s; UINT8 or BYTES needed",
                               c->model, nm->valuestring, dt->valuestring);
    }
  }
  cJSON_Delete(j);
  cbuf_free(&body);
  if (st) return st;
  int n = c->streams * (c->max_inflight > 0 ? c->max_inflight : 1);
  if (c->find_max && c->max_streams * c->max_inflight > n) n = c->max_streams * c->max_inflight;
  if (n > 512) n = 512;
  p->senders = calloc((size_t)n, sizeof *p->senders);
  if (!p->senders) return cinfer_status_oom(NULL);
  for (int i = 0; i < n; i++) {
    if (pthread_create(&p->senders[i], NULL, sender_main, p)) break;
    p->n_senders++;
  }
  if (!p->n_senders) return cinfer_status_new(CINFER_INTERNAL, "cannot start sender threads");
  return NULL;
}

/* ---- common --------------------------------------------------------------------------- */

cinfer_status *streams_pipeline_create(const streams_config *c, streams_done_fn done, void *user,
                                       streams_pipeline **out) {
  *out = NULL;
  streams_pipeline *p = calloc(1, sizeof *p);
  if (!p) return cinfer_status_oom(NULL);
  p->cfg = c;
  p->done = done;
  p->user = user;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  pthread_cond_init(&p->idle, NULL);
  p->remote = c->url != NULL;
  cinfer_status *st = p->remote ? remote_create(p) : inproc_create(p);
  if (st) {
    streams_pipeline_destroy(p);
    return st;
  }
  *out = p;
  return NULL;
}

cinfer_status *streams_pipeline_submit(streams_pipeline *p, streams_frame *f) {
  if (!p->remote) return inproc_submit(p, f);
  pthread_mutex_lock(&p->mu);
  f->next = NULL;
  if (p->qtail) p->qtail->next = f;
  else p->qhead = f;
  p->qtail = f;
  p->inflight++;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void streams_pipeline_destroy(streams_pipeline *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  while (p->inflight > 0) pthread_cond_wait(&p->idle, &p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n_senders; i++) pthread_join(p->senders[i], NULL);
  free(p->senders);
  if (p->model) cinfer_model_release(p->model);
  if (p->srv) cinfer_server_destroy(p->srv);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  pthread_cond_destroy(&p->idle);
  free(p);
}
