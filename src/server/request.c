/* request.c: inference requests and responses (cinfer.h), and the per-request services
 * backends use (backend.h). A request validates each input against the model config as
 * it is added, so a bad request never reaches a queue.
 *
 * May call: handle.c, stats.c, trace.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bigbuf.h"
#include "core/log.h"
#include "server/server_int.h"
#include "server/trace_internal.h"

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)
#define OOM() cinfer_status_oom(NULL)

cinfer_status *cinfer_request_create(cinfer_model *m, cinfer_request **out) {
  cinfer_request *r = calloc(1, sizeof *r);
  if (!r) return OOM();
  atomic_init(&r->refs, 1);
  model_ref(m);
  r->model = m;
  r->rows = 1;
  *out = r;
  return NULL;
}

void cinfer_request_ref(cinfer_request *r) { atomic_fetch_add(&r->refs, 1); }

void cinfer_request_release(cinfer_request *r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    free(r->inputs[i].name);
    free(r->inputs[i].owned);
  }
  free(r->inputs);
  for (uint32_t i = 0; i < r->n_outputs; i++) free(r->outputs[i]);
  free(r->outputs);
  for (uint32_t i = 0; i < r->n_params; i++) {
    free(r->params[i].key);
    free(r->params[i].s);
  }
  free(r->params);
  if (r->trace) trace_finish(r->trace, r->model->name, r->model->version, r->id);
  free(r->id);
  cinfer_model_release(r->model);
  free(r);
}

cinfer_trace *cinfer_request_trace(const cinfer_request *r) { return r->trace; }
void cinfer_request_set_recv_times(cinfer_request *r, uint64_t start_ns, uint64_t end_ns) {
  r->recv_start_ns = start_ns;
  r->recv_end_ns = end_ns;
}

void cinfer_request_set_id(cinfer_request *r, const char *id, size_t len) {
  free(r->id);
  r->id = strndup(id, len);
}

static void fmt_shape(char *buf, size_t cap, const int64_t *shape, int nd) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < nd && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

cinfer_status *cinfer_request_add_input_owned(cinfer_request *r, const cinfer_tensor *t,
                                              void *owned) {
  cinfer_model *m = r->model;
  const char *name = t->name ? t->name : "";
  int ci = -1;
  for (int i = 0; i < m->n_inputs; i++)
    if (!strcmp(m->inputs[i].name, name)) ci = i;
  if (ci < 0) return BAD("unexpected inference input '%s' for model '%s'", name, m->name);
  for (uint32_t i = 0; i < r->n_inputs; i++)
    if (!strcmp(r->inputs[i].name, name))
      return BAD("input '%s' already exists in request", name); /* Triton's text */
  const cfg_io *io = &m->inputs[ci];
  if (t->dtype != io->dtype)
    return BAD("inference input '%s' data-type is '%s', but model '%s' expects '%s'", name,
               cinfer_dtype_name(t->dtype), m->name, cinfer_dtype_name(io->dtype));
  int bd = m->batching ? 1 : 0;
  bool ok = t->ndim == io->ndim + bd;
  for (int d = 0; ok && d < io->ndim; d++)
    if (io->dims[d] >= 0 && t->shape[d + bd] != io->dims[d]) ok = false;
  if (ok && bd && (t->shape[0] < 1 || t->shape[0] > m->max_batch)) {
    return BAD("inference input '%s' has batch size %lld; model '%s' accepts 1 to %lld", name,
               (long long)t->shape[0], m->name, (long long)m->max_batch);
  }
  if (!ok) {
    char want[256], got[256];
    int64_t w[CINFER_MAX_DIMS + 1];
    if (bd) w[0] = -1;
    memcpy(w + bd, io->dims, sizeof(int64_t) * (size_t)io->ndim);
    fmt_shape(want, sizeof want, w, io->ndim + bd);
    fmt_shape(got, sizeof got, t->shape, t->ndim);
    return BAD("unexpected shape for input '%s' for model '%s'. Expected %s, got %s", name,
               m->name, want, got);
  }
  cinfer_status *st = cinfer_tensor_check(t);
  if (st) return st;
  if (r->n_inputs == r->cap_inputs) {
    uint32_t nc = r->cap_inputs ? r->cap_inputs * 2 : 4;
    req_input *ni = realloc(r->inputs, nc * sizeof *ni);
    if (!ni) return OOM();
    r->inputs = ni;
    r->cap_inputs = nc;
  }
  req_input *in = &r->inputs[r->n_inputs];
  in->name = strdup(name);
  if (!in->name) return OOM();
  in->t = *t;
  in->t.name = in->name;
  in->owned = owned;
  in->cfg_index = ci;
  if (io->reshape_ndim >= 0) { /* the backend sees the reshaped dims */
    int64_t batch = bd ? t->shape[0] : 0;
    in->t.ndim = io->reshape_ndim + bd;
    if (bd) in->t.shape[0] = batch;
    int64_t el = cinfer_shape_elements(t->shape + bd, t->ndim - bd);
    int64_t wild = -1, known = 1;
    for (int d = 0; d < io->reshape_ndim; d++) {
      in->t.shape[d + bd] = io->reshape[d];
      if (io->reshape[d] < 0) wild = d;
      else known *= io->reshape[d];
    }
    if (wild >= 0 && known > 0) in->t.shape[wild + bd] = el / known;
    if (cinfer_shape_elements(in->t.shape + bd, in->t.ndim - bd) != el) {
      free(in->name);
      return BAD("input '%s' cannot be reshaped to the model's reshape dims", name);
    }
  }
  r->n_inputs++;
  return NULL;
}

cinfer_status *cinfer_request_add_input(cinfer_request *r, const cinfer_tensor *t) {
  return cinfer_request_add_input_owned(r, t, NULL);
}

cinfer_status *cinfer_request_add_output(cinfer_request *r, const char *name) {
  cinfer_model *m = r->model;
  bool found = false;
  for (int i = 0; i < m->n_outputs; i++)
    if (!strcmp(m->outputs[i].name, name)) found = true;
  if (!found && !cinfer_model_is_decoupled(m))
    return BAD("unexpected inference output '%s' for model '%s'", name, m->name);
  for (uint32_t i = 0; i < r->n_outputs; i++)
    if (!strcmp(r->outputs[i], name)) return BAD("output '%s' is requested more than once", name);
  char **no = realloc(r->outputs, (r->n_outputs + 1) * sizeof *no);
  if (!no) return OOM();
  r->outputs = no;
  if (!(no[r->n_outputs] = strdup(name))) return OOM();
  r->n_outputs++;
  return NULL;
}

bool request_output_wanted(const cinfer_request *r, const char *name) {
  if (r->n_outputs == 0) return true;
  for (uint32_t i = 0; i < r->n_outputs; i++)
    if (!strcmp(r->outputs[i], name)) return true;
  return false;
}

static cinfer_status *param_slot(cinfer_request *r, const char *key, req_param **out) {
  for (uint32_t i = 0; i < r->n_params; i++)
    if (!strcmp(r->params[i].key, key)) return BAD("parameter '%s' is given twice", key);
  if (r->n_params == r->cap_params) {
    uint32_t nc = r->cap_params ? r->cap_params * 2 : 4;
    req_param *np = realloc(r->params, nc * sizeof *np);
    if (!np) return OOM();
    r->params = np;
    r->cap_params = nc;
  }
  req_param *p = &r->params[r->n_params];
  memset(p, 0, sizeof *p);
  if (!(p->key = strdup(key))) return OOM();
  r->n_params++;
  *out = p;
  return NULL;
}

cinfer_status *cinfer_request_set_param_string(cinfer_request *r, const char *key,
                                               const char *val, size_t len) {
  req_param *p;
  cinfer_status *st = param_slot(r, key, &p);
  if (st) return st;
  p->type = PARAM_STRING;
  if (!(p->s = strndup(val, len))) return OOM();
  return NULL;
}

cinfer_status *cinfer_request_set_param_int(cinfer_request *r, const char *key, int64_t v) {
  if (!strcmp(key, "priority")) {
    if (v < 0 || v > UINT32_MAX) return BAD("parameter 'priority' must be >= 0");
    r->priority = (uint32_t)v;
  } else if (!strcmp(key, "timeout")) {
    if (v < 0) return BAD("parameter 'timeout' must be >= 0 (microseconds)");
    r->timeout_us = (uint64_t)v;
  }
  req_param *p;
  cinfer_status *st = param_slot(r, key, &p);
  if (st) return st;
  p->type = PARAM_INT;
  p->i = v;
  p->d = (double)v;
  return NULL;
}

cinfer_status *cinfer_request_set_param_double(cinfer_request *r, const char *key, double v) {
  if (!strcmp(key, "priority") || !strcmp(key, "timeout"))
    return BAD("parameter '%s' must be an integer", key);
  req_param *p;
  cinfer_status *st = param_slot(r, key, &p);
  if (st) return st;
  p->type = PARAM_DOUBLE;
  p->d = v;
  return NULL;
}

cinfer_status *cinfer_request_set_param_bool(cinfer_request *r, const char *key, bool v) {
  req_param *p;
  cinfer_status *st = param_slot(r, key, &p);
  if (st) return st;
  p->type = PARAM_BOOL;
  p->b = v;
  return NULL;
}

void cinfer_request_set_callback(cinfer_request *r, cinfer_response_fn fn, void *user) {
  r->cb = fn;
  r->cb_user = user;
}

/* The first cancel of a request tells a backend with a cancel method at once (a decoupled
 * LLM sequence stops generating and frees its KV blocks); the backend ignores a request it
 * does not hold (still queued: the scheduler drops it; or already finished). r is kept
 * alive by the caller's reference for the call. */
void cinfer_request_cancel(cinfer_request *r) {
  if (atomic_exchange(&r->cancelled, true)) return;
  cinfer_model *m = r->model;
  if (m->backend->cancel && atomic_load(&r->submitted) && !atomic_load(&r->final_sent))
    m->backend->cancel(m->backend_model, r);
}
bool cinfer_request_is_cancelled(const cinfer_request *r) {
  return atomic_load(&((cinfer_request *)r)->cancelled);
}

/* ---- backend-facing accessors --------------------------------------------------------- */

uint32_t cinfer_request_input_count(const cinfer_request *r) { return r->n_inputs; }
const cinfer_tensor *cinfer_request_input(const cinfer_request *r, uint32_t i) {
  return i < r->n_inputs ? &r->inputs[i].t : NULL;
}
const cinfer_tensor *cinfer_request_input_by_name(const cinfer_request *r, const char *name) {
  for (uint32_t i = 0; i < r->n_inputs; i++)
    if (!strcmp(r->inputs[i].name, name)) return &r->inputs[i].t;
  return NULL;
}
const char *cinfer_request_id(const cinfer_request *r) { return r->id ? r->id : ""; }
uint32_t cinfer_request_output_count(const cinfer_request *r) { return r->n_outputs; }
const char *cinfer_request_output_name(const cinfer_request *r, uint32_t i) {
  return i < r->n_outputs ? r->outputs[i] : NULL;
}
uint32_t cinfer_request_param_count(const cinfer_request *r) { return r->n_params; }
const char *cinfer_request_param_key(const cinfer_request *r, uint32_t i) {
  return i < r->n_params ? r->params[i].key : NULL;
}

static const req_param *find_param(const cinfer_request *r, const char *key) {
  for (uint32_t i = 0; i < r->n_params; i++)
    if (!strcmp(r->params[i].key, key)) return &r->params[i];
  return NULL;
}
bool cinfer_request_param_string(const cinfer_request *r, const char *key, const char **out) {
  const req_param *p = find_param(r, key);
  if (!p || p->type != PARAM_STRING) return false;
  *out = p->s;
  return true;
}
bool cinfer_request_param_int(const cinfer_request *r, const char *key, int64_t *out) {
  const req_param *p = find_param(r, key);
  if (!p || p->type != PARAM_INT) return false;
  *out = p->i;
  return true;
}
bool cinfer_request_param_double(const cinfer_request *r, const char *key, double *out) {
  const req_param *p = find_param(r, key);
  if (!p || (p->type != PARAM_DOUBLE && p->type != PARAM_INT)) return false;
  *out = p->d;
  return true;
}
bool cinfer_request_param_bool(const cinfer_request *r, const char *key, bool *out) {
  const req_param *p = find_param(r, key);
  if (!p || p->type != PARAM_BOOL) return false;
  *out = p->b;
  return true;
}

/* ---- responses ------------------------------------------------------------------------ */

const cinfer_status *cinfer_response_error(const cinfer_response *resp) { return resp->error; }
uint32_t cinfer_response_output_count(const cinfer_response *resp) { return resp->n; }
const cinfer_tensor *cinfer_response_output(const cinfer_response *resp, uint32_t i) {
  return i < resp->n ? &resp->outputs[i] : NULL;
}
cinfer_request *cinfer_response_request(const cinfer_response *resp) { return resp->req; }
uint32_t cinfer_response_param_count(const cinfer_response *resp) { return resp->n_params; }
const cinfer_param *cinfer_response_param(const cinfer_response *resp, uint32_t i) {
  return i < resp->n_params ? &resp->params[i] : NULL;
}


cinfer_status *response_set_params(cinfer_response *resp, const cinfer_param *params, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (!params[i].key || !params[i].key[0]) return BAD("response parameter %u has no key", i);
    if (params[i].type > CINFER_PARAM_STRING)
      return BAD("response parameter '%s' has an unknown type %d", params[i].key, (int)params[i].type);
    if (params[i].type == CINFER_PARAM_STRING && !params[i].s)
      return BAD("response parameter '%s' is a string without a value", params[i].key);
    for (uint32_t j = 0; j < i; j++)
      if (!strcmp(params[j].key, params[i].key)) return BAD("response parameter '%s' is given twice", params[i].key);
  }
  /* One allocation: the array, then every key and string (a response per token of an
   * ensemble's LLM step carries three). */
  size_t bytes = (size_t)n * sizeof(cinfer_param);
  for (uint32_t i = 0; i < n; i++)
    bytes += strlen(params[i].key) + 1 + (params[i].type == CINFER_PARAM_STRING ? strlen(params[i].s) + 1 : 0);
  cinfer_param *cp = n ? malloc(bytes) : NULL;
  if (n && !cp) return OOM();
  char *text = (char *)(cp + n);
  for (uint32_t i = 0; i < n; i++) {
    cp[i] = params[i];
    size_t kl = strlen(params[i].key) + 1;
    cp[i].key = memcpy(text, params[i].key, kl);
    text += kl;
    cp[i].s = NULL;
    if (params[i].type == CINFER_PARAM_STRING) {
      size_t sl = strlen(params[i].s) + 1;
      cp[i].s = memcpy(text, params[i].s, sl);
      text += sl;
    }
  }
  free(resp->params);
  resp->params = cp;
  resp->n_params = n;
  return NULL;
}

static void block_release(batch_block *b) {
  if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
  for (uint32_t i = 0; i < b->n; i++) {
    free(b->out[i].name);
    bigbuf_put(b->out[i].data, b->out[i].cap);
  }
  free(b);
}

void cinfer_response_free(cinfer_response *resp) {
  if (!resp) return;
  cinfer_status_free(resp->error);
  free(resp->outputs);
  free(resp->owned);
  block_release(resp->block);
  for (uint32_t i = 0; i < resp->n_held; i++) cinfer_response_free(resp->held[i]);
  free(resp->held);
  free(resp->params);
  cinfer_request_release(resp->req);
  free(resp);
}

/* Hands a response to the request's callback. FINAL drops the server's reference. With
 * preserve_ordering the FINAL response may first wait for earlier requests' responses. */
void request_deliver(cinfer_request *r, cinfer_response *resp, uint32_t flags) {
  if (flags & CINFER_RESPONSE_FINAL) {
    if (atomic_exchange(&r->final_sent, true)) { /* a second FINAL is a backend bug */
      cinfer_response_free(resp);
      return;
    }
    if (r->has_seq) {
      model_order_release(r->model, r, resp);
      return;
    }
  }
  request_deliver_now(r, resp, flags);
}

void request_deliver_now(cinfer_request *r, cinfer_response *resp, uint32_t flags) {
  cinfer_server *s = r->model->server;
  bool final = (flags & CINFER_RESPONSE_FINAL) != 0;
  cinfer_response_fn cb = r->cb;
  void *user = r->cb_user;
  if (r->trace) { /* traced only: the outputs (TENSORS) and the end of the request */
    for (uint32_t i = 0; i < resp->n && trace_wants_tensors(r->trace); i++)
      trace_tensor(r->trace, "TENSOR_BACKEND_OUTPUT", &resp->outputs[i]);
    if (final) cinfer_trace_stamp(r->trace, CINFER_TRACE_REQUEST_END);
  }
  /* The server's reference goes before the callback (resp holds its own reference on r, so
   * r and its model live as long as the response): after the callback the only thing
   * touched is the in-flight count, so a caller that waits for 0 in flight may destroy the
   * server at once. */
  if (final) {
    request_inflight_done(r);
    cinfer_request_release(r);
  }
  if (cb) cb(user, resp, flags);
  else cinfer_response_free(resp);
  if (final) server_request_done(s);
}

void request_complete_error(cinfer_request *r, cinfer_status *st) {
  cinfer_response *resp = calloc(1, sizeof *resp);
  if (!resp) { /* cannot report: still finish so nothing leaks or hangs */
    cinfer_status_free(st);
    if (!atomic_exchange(&r->final_sent, true)) {
      request_inflight_done(r);
      server_request_done(r->model->server);
      cinfer_request_release(r);
    }
    return;
  }
  cinfer_request_ref(r);
  resp->req = r;
  resp->error = st;
  request_deliver(r, resp, CINFER_RESPONSE_FINAL);
}

cinfer_status *cinfer_request_respond(cinfer_request *r, const cinfer_tensor *outputs,
                                      uint32_t n, uint32_t flags, cinfer_status *error) {
  return cinfer_request_respond_params(r, outputs, n, flags, error, NULL, 0);
}

cinfer_status *cinfer_request_respond_params(cinfer_request *r, const cinfer_tensor *outputs,
                                             uint32_t n, uint32_t flags, cinfer_status *error,
                                             const cinfer_param *params, uint32_t n_params) {
  bool final = error || (flags & CINFER_RESPONSE_FINAL);
  /* A partial response that could not be sent was not silently skipped: the stream is
   * incomplete, so its FINAL response is an error. */
  if (final && !error && atomic_load(&r->respond_oom))
    error = cinfer_status_new(CINFER_INTERNAL, "out of memory sending a response: the answer is incomplete");
  /* Decoupled requests are counted here, where the backend finishes them (batch-style
   * ones in model.c's output phase). */
  if (final && !atomic_load(&r->final_sent))
    model_record_final(r->model, r, error);
  if (error) {
    request_complete_error(r, error);
    return NULL;
  }
  for (uint32_t i = 0; i < n; i++) /* the copy below reads the bytes: host memory only */
    if (outputs[i].memory_type != CINFER_MEMORY_CPU && outputs[i].memory_type != CINFER_MEMORY_CPU_PINNED) {
      cinfer_status *e = cinfer_status_prefix(cinfer_tensor_check(&outputs[i]), "backend response");
      cinfer_status *ret = cinfer_status_new(cinfer_status_code(e), "%s", cinfer_status_message(e));
      request_complete_error(r, e);
      return ret;
    }
  size_t bytes = 0;
  for (uint32_t i = 0; i < n; i++) bytes += outputs[i].byte_size + strlen(outputs[i].name) + 1 + 64;
  cinfer_response *resp = calloc(1, sizeof *resp);
  char *own = malloc(bytes + 1);
  cinfer_tensor *ts = calloc(n ? n : 1, sizeof *ts);
  if (!resp || !own || !ts) {
    free(resp), free(own), free(ts);
    if (flags & CINFER_RESPONSE_FINAL) {
      request_complete_error(r, OOM());
    } else { /* r stays the backend's until its FINAL response, which will carry the error */
      atomic_store(&r->respond_oom, true);
    }
    return OOM();
  }
  char *p = own;
  for (uint32_t i = 0; i < n; i++) {
    ts[i] = outputs[i];
    ts[i].memory_type = CINFER_MEMORY_CPU; /* the copy is ordinary host memory */
    ts[i].device_id = 0;
    size_t nl = strlen(outputs[i].name) + 1;
    memcpy(p, outputs[i].name, nl);
    ts[i].name = p;
    p += nl;
    p = (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    if (outputs[i].byte_size) memcpy(p, outputs[i].data, outputs[i].byte_size);
    ts[i].data = p;
    p += outputs[i].byte_size;
  }
  resp->n = n;
  resp->outputs = ts;
  resp->owned = own;
  cinfer_status *pst = n_params ? response_set_params(resp, params, n_params) : NULL;
  if (pst) { /* a bad parameter fails the request, like any response that cannot be sent */
    cinfer_response_free(resp);
    cinfer_status *ret = cinfer_status_new(cinfer_status_code(pst), "%s", cinfer_status_message(pst));
    request_complete_error(r, cinfer_status_prefix(pst, "backend response"));
    return ret;
  }
  cinfer_request_ref(r);
  resp->req = r;
  request_deliver(r, resp, flags & CINFER_RESPONSE_FINAL);
  return NULL;
}

/* ---- preserve_ordering ---------------------------------------------------------------- */

void model_order_release(cinfer_model *m, cinfer_request *r, cinfer_response *resp) {
  pthread_mutex_lock(&m->order_mu);
  uint64_t first = 0, count = 0;
  cinfer_status *st = sched_order_complete(m->order, r->seq, &first, &count);
  if (st) { /* a bug: deliver rather than hang the client */
    LOG_E("model '%s': %s", m->name, cinfer_status_message(st));
    cinfer_status_free(st);
    pthread_mutex_unlock(&m->order_mu);
    request_deliver_now(r, resp, CINFER_RESPONSE_FINAL);
    return;
  }
  if (m->n_held == m->cap_held) {
    size_t nc = m->cap_held ? m->cap_held * 2 : 16;
    struct held_resp *nh = realloc(m->held, nc * sizeof *nh);
    if (nh) {
      m->held = nh;
      m->cap_held = nc;
    }
  }
  if (m->n_held == m->cap_held) { /* out of memory: deliver out of order rather than lose it */
    pthread_mutex_unlock(&m->order_mu);
    request_deliver_now(r, resp, CINFER_RESPONSE_FINAL);
    return;
  }
  m->held[m->n_held++] = (struct held_resp){r->seq, r, resp};
  /* Release [first, first+count) in order. Delivery happens under order_mu so that two
   * threads releasing consecutive runs cannot overtake each other. */
  for (uint64_t s = first; s < first + count; s++) {
    for (size_t i = 0; i < m->n_held; i++) {
      if (m->held[i].seq != s) continue;
      struct held_resp h = m->held[i];
      m->held[i] = m->held[--m->n_held];
      request_deliver_now(h.r, h.resp, CINFER_RESPONSE_FINAL);
      break;
    }
  }
  pthread_mutex_unlock(&m->order_mu);
}
