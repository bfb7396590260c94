/* grpc_client.c: the generator's gRPC setup calls (`cinfer bench --grpc`): one blocking
 * unary call over a fresh HTTP/2 connection (nghttp2 client session; never on the hot path,
 * so it may allocate), the model metadata turned into the JSON shape of the HTTP endpoint's
 * (so target.c reads one form), ModelStatistics for the server-side figures, and the framed
 * ModelInferRequest of one pre-serialised request. The hot path is grpc_engine.c. */
#include "bench/grpc_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_service.pb-c.h"

const char *bench_grpc_status_name(int code) {
  static const char *const names[] = {
      "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
      "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? names[code] : "?";
}

int bench_grpc_headers(const bench_config *c, const char *path, nghttp2_nv *nv, int cap,
                       char *scratch, size_t scap) {
#define NV(n, v) ((nghttp2_nv){(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE})
  int k = 0;
  nv[k++] = NV(":method", "POST");
  nv[k++] = NV(":scheme", "http");
  nv[k++] = NV(":path", path);
  nv[k++] = NV(":authority", c->host_header);
  nv[k++] = NV("content-type", "application/grpc");
  nv[k++] = NV("te", "trailers");
  nv[k++] = NV("user-agent", "cinfer-bench");
#undef NV
  /* --header 'Name: value' (checked by args.c) as metadata: HTTP/2 wants lower-case names,
   * so the name is copied lower-cased into scratch, the value without leading blanks */
  size_t used = 0;
  for (int i = 0; i < c->n_headers && k < cap; i++) {
    const char *h = c->headers[i], *colon = strchr(h, ':');
    size_t nl = (size_t)(colon - h);
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    size_t vl = strlen(v);
    if (used + nl + vl > scap) break;
    char *name = scratch + used;
    for (size_t j = 0; j < nl; j++) name[j] = (char)((h[j] >= 'A' && h[j] <= 'Z') ? h[j] + 32 : h[j]);
    memcpy(scratch + used + nl, v, vl);
    nv[k++] = (nghttp2_nv){(uint8_t *)name, (uint8_t *)(scratch + used + nl), nl, vl, NGHTTP2_NV_FLAG_NONE};
    used += nl + vl;
  }
  return k;
}

/* ---- one blocking call ---- */

typedef struct simple_call {
  int32_t sid;
  bool closed;
  uint32_t h2_error;
  int http_status;
  int grpc_status;
  char grpc_msg[300];
  cbuf body;          /* DATA: framed messages */
  const uint8_t *req;
  size_t req_len, req_off;
} simple_call;

static ssize_t simple_read(nghttp2_session *s, int32_t sid, uint8_t *buf, size_t len,
                           uint32_t *flags, nghttp2_data_source *src, void *ud) {
  (void)s;
  (void)sid;
  (void)src;
  simple_call *sc = ud;
  size_t n = sc->req_len - sc->req_off;
  if (n > len) n = len;
  memcpy(buf, sc->req + sc->req_off, n);
  sc->req_off += n;
  if (sc->req_off == sc->req_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static int simple_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                         size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  (void)s;
  (void)flags;
  simple_call *sc = ud;
  if (f->hd.stream_id != sc->sid) return 0;
  if (nlen == 7 && !memcmp(name, ":status", 7)) sc->http_status = atoi((const char *)value);
  else if (nlen == 11 && !memcmp(name, "grpc-status", 11)) sc->grpc_status = atoi((const char *)value);
  else if (nlen == 12 && !memcmp(name, "grpc-message", 12))
    snprintf(sc->grpc_msg, sizeof sc->grpc_msg, "%.*s", (int)vlen, (const char *)value);
  return 0;
}

static int simple_data(nghttp2_session *s, uint8_t flags, int32_t sid, const uint8_t *p,
                       size_t n, void *ud) {
  (void)s;
  (void)flags;
  simple_call *sc = ud;
  if (sid == sc->sid) cbuf_put(&sc->body, (const char *)p, n);
  return 0;
}

static int simple_close(nghttp2_session *s, int32_t sid, uint32_t err, void *ud) {
  (void)s;
  simple_call *sc = ud;
  if (sid == sc->sid) {
    sc->closed = true;
    sc->h2_error = err;
  }
  return 0;
}

static cinfer_status *simple_io(nghttp2_session *h2, int fd, simple_call *sc, uint64_t deadline) {
  uint8_t rbuf[16384];
  while (!sc->closed) {
    const uint8_t *out;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(h2, &out)) > 0) {
      size_t off = 0;
      while (off < (size_t)n) {
        ssize_t w = send(fd, out + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w > 0) {
          off += (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
          if (bench_wait_fd(fd, POLLOUT, deadline) <= 0) return cinfer_status_new(CINFER_UNAVAILABLE, "timed out sending");
        } else {
          return cinfer_status_new(CINFER_UNAVAILABLE, "send: %s", strerror(errno));
        }
      }
    }
    if (n < 0) return cinfer_status_new(CINFER_INTERNAL, "HTTP/2: %s", nghttp2_strerror((int)n));
    if (sc->closed) break;
    int rc = bench_wait_fd(fd, POLLIN, deadline);
    if (rc <= 0) return cinfer_status_new(CINFER_UNAVAILABLE, "no answer in time");
    ssize_t r = recv(fd, rbuf, sizeof rbuf, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r <= 0)
      return cinfer_status_new(CINFER_UNAVAILABLE, "the server closed the connection (is this its gRPC port? "
                               "an HTTP/1.1 port closes on the HTTP/2 preface)");
    ssize_t used = nghttp2_session_mem_recv(h2, rbuf, (size_t)r);
    if (used < 0) return cinfer_status_new(CINFER_UNAVAILABLE, "HTTP/2: %s (is this a gRPC port?)", nghttp2_strerror((int)used));
  }
  return NULL;
}

/* Calls method (e.g. "ModelMetadata") with the packed message; on gRPC OK *resp is the
 * unpacked reply message's bytes (without the 5-byte prefix; caller frees). A non-OK gRPC
 * status is an error naming it. */
static cinfer_status *grpc_simple(const bench_config *c, const bench_addr *a, const char *method,
                                  const ProtobufCMessage *msg, int timeout_ms, uint8_t **resp,
                                  size_t *resp_len) {
  *resp = NULL;
  *resp_len = 0;
  uint64_t deadline = clock_now_ns() + (uint64_t)timeout_ms * 1000000u;
  size_t mlen = protobuf_c_message_get_packed_size(msg);
  uint8_t *framed = malloc(mlen + 5);
  if (!framed) return cinfer_status_oom(NULL);
  framed[0] = 0;
  framed[1] = (uint8_t)(mlen >> 24), framed[2] = (uint8_t)(mlen >> 16);
  framed[3] = (uint8_t)(mlen >> 8), framed[4] = (uint8_t)mlen;
  protobuf_c_message_pack(msg, framed + 5);
  simple_call sc = {.grpc_status = -1, .req = framed, .req_len = mlen + 5};
  cinfer_status *st = NULL;
  nghttp2_session *h2 = NULL;
  int fd;
  if ((st = bench_connect_blocking(c, a, deadline, &fd))) {
    free(framed);
    return st;
  }
  nghttp2_session_callbacks *cb;
  if (nghttp2_session_callbacks_new(&cb)) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  nghttp2_session_callbacks_set_on_header_callback(cb, simple_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, simple_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, simple_close);
  int rc = nghttp2_session_client_new(&h2, cb, &sc);
  nghttp2_session_callbacks_del(cb);
  if (rc) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, NULL, 0);
  char path[128];
  snprintf(path, sizeof path, "/inference.GRPCInferenceService/%s", method);
  nghttp2_nv nv[8 + BENCH_MAX_HEADERS];
  char scratch[BENCH_GRPC_HDR_SCRATCH];
  int nnv = bench_grpc_headers(c, path, nv, 8 + BENCH_MAX_HEADERS, scratch, sizeof scratch);
  nghttp2_data_provider dp = {.read_callback = simple_read};
  sc.sid = nghttp2_submit_request(h2, NULL, nv, (size_t)nnv, &dp, &sc);
  if (sc.sid < 0) {
    st = cinfer_status_new(CINFER_INTERNAL, "HTTP/2: %s", nghttp2_strerror(sc.sid));
    goto out;
  }
  if ((st = simple_io(h2, fd, &sc, deadline))) {
    st = cinfer_status_prefix(st, "gRPC %s to %s", method, c->host_header);
    goto out;
  }
  if (sc.http_status != 200 || sc.grpc_status != 0) {
    if (sc.grpc_status > 0)
      st = cinfer_status_new(sc.grpc_status == 5 ? CINFER_NOT_FOUND : CINFER_UNAVAILABLE,
                             "gRPC %s: %s: %s", method, bench_grpc_status_name(sc.grpc_status), sc.grpc_msg);
    else
      st = cinfer_status_new(CINFER_UNAVAILABLE, "gRPC %s: HTTP/2 status %d, stream error %u, no grpc-status",
                             method, sc.http_status, sc.h2_error);
    goto out;
  }
  if (sc.body.oom) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  const uint8_t *b = (const uint8_t *)sc.body.data;
  size_t blen = 0;
  if (sc.body.len >= 5) blen = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
  if (sc.body.len < 5 || b[0] != 0 || blen != sc.body.len - 5) {
    st = cinfer_status_new(CINFER_UNAVAILABLE, "gRPC %s: the answer is not one uncompressed message", method);
    goto out;
  }
  *resp = malloc(blen ? blen : 1);
  if (!*resp) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  memcpy(*resp, b + 5, blen);
  *resp_len = blen;
out:
  if (h2) nghttp2_session_del(h2);
  close(fd);
  free(framed);
  cbuf_free(&sc.body);
  return st;
}

/* ---- metadata, statistics ---- */

static void tensors_json(cJSON *o, const char *key, Inference__ModelMetadataResponse__TensorMetadata **t,
                         size_t n) {
  cJSON *arr = cJSON_AddArrayToObject(o, key);
  for (size_t i = 0; arr && i < n; i++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", t[i]->name);
    cJSON_AddStringToObject(x, "datatype", t[i]->datatype);
    cJSON *sh = cJSON_AddArrayToObject(x, "shape");
    for (size_t d = 0; sh && d < t[i]->n_shape; d++)
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i]->shape[d]));
    cJSON_AddItemToArray(arr, x);
  }
}

cinfer_status *bench_grpc_metadata_json(const bench_config *c, const bench_addr *a, char **json) {
  *json = NULL;
  Inference__ModelMetadataRequest rq = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  rq.name = (char *)c->model;
  rq.version = (char *)(c->model_version ? c->model_version : "");
  uint8_t *b;
  size_t n;
  cinfer_status *st = grpc_simple(c, a, "ModelMetadata", &rq.base, 10000, &b, &n);
  if (st) return st;
  Inference__ModelMetadataResponse *m = inference__model_metadata_response__unpack(NULL, n, b);
  free(b);
  if (!m) return cinfer_status_new(CINFER_UNAVAILABLE, "gRPC ModelMetadata: the answer does not decode");
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", m->name);
  tensors_json(o, "inputs", m->inputs, m->n_inputs);
  tensors_json(o, "outputs", m->outputs, m->n_outputs);
  inference__model_metadata_response__free_unpacked(m, NULL);
  *json = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return *json ? NULL : cinfer_status_oom(NULL);
}

void bench_grpc_stats_get(const bench_config *c, const bench_addr *a, bench_server_stats *s) {
  memset(s, 0, sizeof *s);
  Inference__ModelStatisticsRequest rq = INFERENCE__MODEL_STATISTICS_REQUEST__INIT;
  rq.name = (char *)c->model;
  rq.version = (char *)(c->model_version ? c->model_version : "");
  uint8_t *b;
  size_t n;
  cinfer_status *st = grpc_simple(c, a, "ModelStatistics", &rq.base, 2000, &b, &n);
  if (st) {
    cinfer_status_free(st);
    return;
  }
  Inference__ModelStatisticsResponse *r = inference__model_statistics_response__unpack(NULL, n, b);
  free(b);
  if (!r) return;
  for (size_t i = 0; i < r->n_model_stats; i++) {
    const Inference__ModelStatistics *m = r->model_stats[i];
    const Inference__InferStatistics *is = m->inference_stats;
    if (!is) continue;
    s->ok = true;
#define D(f, x) (is->f ? is->f->x : 0)
    s->success_count += D(success, count);
    s->queue_ns += D(queue, ns);
    s->cin_ns += D(compute_input, ns);
    s->infer_ns += D(compute_infer, ns);
    s->cout_ns += D(compute_output, ns);
#undef D
    s->exec_count += m->execution_count;
    s->infer_count += m->inference_count;
  }
  inference__model_statistics_response__free_unpacked(r, NULL);
}

/* ---- requests ---- */

cinfer_status *bench_grpc_shm_register(const bench_config *c, const bench_addr *a, const char *name,
                                       const char *key, size_t byte_size) {
  Inference__SystemSharedMemoryRegisterRequest rq = INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_REQUEST__INIT;
  rq.name = (char *)name;
  rq.key = (char *)key;
  rq.byte_size = byte_size;
  uint8_t *b;
  size_t n;
  cinfer_status *st = grpc_simple(c, a, "SystemSharedMemoryRegister", &rq.base, 10000, &b, &n);
  if (st) return cinfer_status_prefix(st, "registering shared-memory region %s", name);
  free(b);
  return NULL;
}

void bench_grpc_shm_unregister(const bench_config *c, const bench_addr *a, const char *name) {
  Inference__SystemSharedMemoryUnregisterRequest rq = INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_REQUEST__INIT;
  rq.name = (char *)name;
  uint8_t *b = NULL;
  size_t n;
  cinfer_status_free(grpc_simple(c, a, "SystemSharedMemoryUnregister", &rq.base, 10000, &b, &n));
  free(b);
}

/* A tensor's shared_memory_region / shared_memory_byte_size parameters (Triton's), as
 * input entries (e, p) or requested-output entries (oe, op). */
typedef struct shm_params {
  Inference__InferParameter reg, size;
  Inference__ModelInferRequest__InferInputTensor__ParametersEntry e[2], *p[2];
  Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry oe[2], *op[2];
} shm_params;

static void shm_params_set(shm_params *sp, const char *region, size_t size) {
  inference__infer_parameter__init(&sp->reg);
  inference__infer_parameter__init(&sp->size);
  sp->reg.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
  sp->reg.string_param = (char *)region;
  sp->size.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
  sp->size.int64_param = (int64_t)size;
  static const char *const keys[2] = {"shared_memory_region", "shared_memory_byte_size"};
  Inference__InferParameter *vals[2] = {&sp->reg, &sp->size};
  for (int i = 0; i < 2; i++) {
    inference__model_infer_request__infer_input_tensor__parameters_entry__init(&sp->e[i]);
    inference__model_infer_request__infer_requested_output_tensor__parameters_entry__init(&sp->oe[i]);
    sp->e[i].key = sp->oe[i].key = (char *)keys[i];
    sp->e[i].value = sp->oe[i].value = vals[i];
    sp->p[i] = &sp->e[i];
    sp->op[i] = &sp->oe[i];
  }
}

cinfer_status *bench_grpc_request(const bench_config *c, const bench_grpc_input *in, int nin,
                                  const bench_grpc_output *outs, int nout, cbuf *out) {
  Inference__ModelInferRequest rq = INFERENCE__MODEL_INFER_REQUEST__INIT;
  rq.model_name = (char *)c->model;
  rq.model_version = (char *)(c->model_version ? c->model_version : "");
  Inference__ModelInferRequest__InferInputTensor *tv = calloc((size_t)nin, sizeof *tv);
  Inference__ModelInferRequest__InferInputTensor **tp = calloc((size_t)nin, sizeof *tp);
  ProtobufCBinaryData *raw = calloc((size_t)nin, sizeof *raw);
  shm_params *isp = calloc((size_t)nin + (size_t)nout, sizeof *isp);
  Inference__ModelInferRequest__InferRequestedOutputTensor *ov = calloc((size_t)nout + 1, sizeof *ov);
  Inference__ModelInferRequest__InferRequestedOutputTensor **opp = calloc((size_t)nout + 1, sizeof *opp);
  size_t n_raw = 0;
  cinfer_status *st = NULL;
  if (!tv || !tp || !raw || !isp || !ov || !opp) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  for (int k = 0; k < nin; k++) {
    inference__model_infer_request__infer_input_tensor__init(&tv[k]);
    tv[k].name = (char *)in[k].name;
    tv[k].datatype = (char *)cinfer_dtype_name(in[k].dtype);
    tv[k].n_shape = (size_t)in[k].ndim;
    tv[k].shape = (int64_t *)in[k].shape;
    tp[k] = &tv[k];
    if (in[k].region) { /* the tensor is in the region: no raw contents entry */
      shm_params_set(&isp[k], in[k].region, in[k].len);
      tv[k].n_parameters = 2;
      tv[k].parameters = isp[k].p;
      continue;
    }
    raw[n_raw].data = (uint8_t *)in[k].data;
    raw[n_raw++].len = in[k].len;
  }
  for (int k = 0; k < nout; k++) {
    inference__model_infer_request__infer_requested_output_tensor__init(&ov[k]);
    ov[k].name = outs[k].name;
    shm_params_set(&isp[nin + k], outs[k].region, outs[k].size);
    ov[k].n_parameters = 2;
    ov[k].parameters = isp[nin + k].op;
    opp[k] = &ov[k];
  }
  rq.n_inputs = (size_t)nin;
  rq.inputs = tp;
  rq.n_raw_input_contents = n_raw;
  rq.raw_input_contents = raw;
  rq.n_outputs = (size_t)nout;
  rq.outputs = opp;
  /* streaming: ask for the FINAL-only marker, so that a decoupled model's 0..N responses
   * end with one that says so (perf_analyzer does the same) */
  Inference__InferParameter pv = INFERENCE__INFER_PARAMETER__INIT;
  pv.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
  pv.bool_param = 1;
  Inference__ModelInferRequest__ParametersEntry pe = INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
  pe.key = "triton_enable_empty_final_response";
  pe.value = &pv;
  Inference__ModelInferRequest__ParametersEntry *pp = &pe;
  if (c->grpc_stream) {
    rq.n_parameters = 1;
    rq.parameters = &pp;
  }
  size_t n = inference__model_infer_request__get_packed_size(&rq);
  if (n > UINT32_MAX - 5) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "request too large for one gRPC message (%zu bytes)", n);
    goto out;
  }
  if (!cbuf_reserve(out, n + 5)) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  uint8_t *p = (uint8_t *)out->data + out->len;
  p[0] = 0;
  p[1] = (uint8_t)(n >> 24), p[2] = (uint8_t)(n >> 16), p[3] = (uint8_t)(n >> 8), p[4] = (uint8_t)n;
  inference__model_infer_request__pack(&rq, p + 5);
  out->len += n + 5;
out:
  free(tv);
  free(tp);
  free(raw);
  free(isp);
  free(ov);
  free(opp);
  return st;
}
