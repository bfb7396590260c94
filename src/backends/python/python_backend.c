/* python_backend.c: backend "python", Triton's Python backend for cinfer (user guide
 * docs/python-backend.md, design docs/design/python-backend.md).
 *
 * Every instance runs the model's model.py in its own stub process (pyproc.c), with two
 * sockets: the stub's main thread's (init, execute, finalize), which the server thread that
 * sent the message reads itself until the reply (exec_wait; the instance worker for
 * execute, so a request costs one wake-up here), and the one of the stub's other threads
 * (decoupled responses, BLS from threads), read by the instance's reader thread. Both
 * answer what arrives (handle_msg): requests, is_cancelled, BLS requests on the server,
 * logs, custom metrics (pymetrics.c). The instance runs one batch at a time as every cinfer
 * instance does and the batcher queues meanwhile. When the process dies, the reader fails
 * its requests with a message naming the instance and what happened, and the next batch
 * starts a new process. EXECUTION_ENV_PATH: pyenv.c. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cinfer/backend.h"
#include "cinfer/cinfer.h"
#include "core/buf.h"
#include "core/json.h"
#include "core/log.h"
#include "pyenv.h"
#include "pymetrics.h"
#include "pyproc.h"

#define PY_JSON_DEPTH 64
#define PY_FINALIZE_WAIT_MS 10000 /* finalize() gets this long, then SIGKILL */
#define PY_CANCEL_GRACE_MS 5000   /* a batch whose clients all left gets this long */
#define PY_MAX_INSTANCES 256      /* the core's limit on instances of a model */

struct py_instance;

typedef struct py_model {
  char *name, *model_dir, *version_dir, *model_file, *python, *config_json;
  char **envp; /* EXECUTION_ENV_PATH: the stub's environment (NULL: the server's) */
  int64_t version;
  bool decoupled;
  int64_t execute_timeout_ms; /* 0: wait as long as execute() takes */
  const cinfer_config *config;
  cinfer_server *server;
  pthread_mutex_t inst_mu; /* insts, for the cancel notification */
  struct py_instance *insts[PY_MAX_INSTANCES];
  int n_insts;
} py_model;

typedef struct py_pending {
  uint64_t rid, batch;
  cinfer_request *r;
  struct py_pending *next;
} py_pending;

typedef struct py_instance {
  py_model *m;
  int index;
  char name[192]; /* "<model>_0_<index>", as Triton names instances */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* the current process (under mu): conn is the socket of the stub's main thread (init,
   * execute, finalize), read by the thread that waits for their replies; oconn the one of
   * its other threads, read by the reader thread */
  py_conn *conn, *oconn;
  int wake_fd; /* eventfd: the cancel notification wakes a worker waiting in exec_wait */
  char *rbuf;  /* PY_MAX_MSG + 1 bytes for exec_wait (one caller at a time per instance) */
  pym_table metrics; /* the current process's custom Metric objects */
  pid_t pid;
  pthread_t reader;
  bool has_reader, alive;
  bool stopping; /* proc_stop ends it: not an error to report */
  char kill_why[256]; /* why we killed it (timeout), for the failure messages */
  char dead_why[512]; /* how the last process ended */
  uint64_t next_rid, next_batch, done_batch;
  py_pending *pending;
  /* Reused shared memory of execute messages (one execute at a time per instance):
   * inputs, written by the worker; the memfd goes to a process once per generation. */
  int in_fd;
  void *in_base;
  size_t in_cap;
  uint64_t in_gen, in_sent_gen;
  pid_t in_sent_pid;
  /* outputs of execute_done: the stub's region, mapped by the worker */
  void *out_base;
  size_t out_size;
  uint64_t out_gen;
} py_instance;

/* ---- small helpers ------------------------------------------------------------------------ */

static cinfer_code code_from_name(const char *s) {
  static const struct { const char *n; cinfer_code c; } t[] = {
      {"UNKNOWN", CINFER_UNKNOWN},         {"INTERNAL", CINFER_INTERNAL},
      {"NOT_FOUND", CINFER_NOT_FOUND},     {"INVALID_ARG", CINFER_INVALID_ARG},
      {"UNAVAILABLE", CINFER_UNAVAILABLE}, {"UNSUPPORTED", CINFER_UNSUPPORTED},
      {"ALREADY_EXISTS", CINFER_ALREADY_EXISTS}, {"CANCELLED", CINFER_CANCELLED}};
  for (size_t i = 0; s && i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(t[i].n, s)) return t[i].c;
  return CINFER_INTERNAL;
}

static const char *code_to_name(cinfer_code c) {
  switch (c) {
    case CINFER_UNKNOWN: return "UNKNOWN";
    case CINFER_NOT_FOUND: return "NOT_FOUND";
    case CINFER_INVALID_ARG: return "INVALID_ARG";
    case CINFER_UNAVAILABLE: return "UNAVAILABLE";
    case CINFER_UNSUPPORTED: return "UNSUPPORTED";
    case CINFER_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case CINFER_CANCELLED: return "CANCELLED";
    default: return "INTERNAL";
  }
}

/* A status from an {"message","code"} object of the stub. */
static cinfer_status *status_from_wire(const py_instance *inst, const json_value *e) {
  const json_value *msg = json_get(e, "message"), *code = json_get(e, "code");
  return cinfer_status_new(code_from_name(json_is(code, JSON_STRING) ? code->u.str : NULL),
                           "python model '%s': %s", inst->m->name,
                           json_is(msg, JSON_STRING) ? msg->u.str : "(no message)");
}

/* The error of an InferenceResponse(error=...) the model built: its message as the model
 * wrote it, as Triton passes it on (clients match on it: L0_http/generate_endpoint_test.py
 * compares {"error": "An Error Occurred"} exactly). */
static cinfer_status *response_error_from_wire(const json_value *e) {
  const json_value *msg = json_get(e, "message"), *code = json_get(e, "code");
  return cinfer_status_new(code_from_name(json_is(code, JSON_STRING) ? code->u.str : NULL), "%s",
                           json_is(msg, JSON_STRING) ? msg->u.str : "(no message)");
}

static const char *jstr(const json_value *v, const char *key) {
  const json_value *x = json_get(v, key);
  return json_is(x, JSON_STRING) ? x->u.str : NULL;
}

static bool jnum(const json_value *v, const char *key, double *out) {
  const json_value *x = json_get(v, key);
  if (!json_is(x, JSON_NUMBER)) return false;
  *out = x->u.num;
  return true;
}

static bool send_buf(py_conn *c, cbuf *b, int fd) {
  if (!b->data) return false; /* out of memory while building it */
  return py_conn_send(c, b->data, b->len, fd);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- answering requests ------------------------------------------------------------------ */

static void fail_request(cinfer_request *r, cinfer_status *st) {
  cinfer_status_free(cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, st));
}

/* Sends outputs t[0..n) of a response to r: only the ones the client asked for. Like
 * Triton's Python backend, an output keeps the datatype the model gave it (Triton's own
 * examples return INT64 arrays for TYPE_INT32 outputs, and clients see INT64). */
static void respond_outputs(py_instance *inst, cinfer_request *r, const cinfer_tensor *t,
                            uint32_t n, uint32_t flags, const json_value *params) {
  uint32_t np = json_is(params, JSON_OBJECT) ? params->len : 0;
  cinfer_tensor *keep = calloc(n ? n : 1, sizeof *keep);
  cinfer_param *ps = np ? calloc(np, sizeof *ps) : NULL;
  if (!keep || (np && !ps)) {
    free(keep), free(ps);
    cinfer_status_free(cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL,
                                              cinfer_status_oom("python response")));
    return;
  }
  /* InferenceResponse(parameters=...): the stub checked them (str keys; bool, int or str
   * values, as Triton's stub does); anything else here is refused, not dropped. */
  uint32_t k = 0;
  for (const json_value *v = np ? params->u.child : NULL; v; v = v->next, k++) {
    ps[k].key = v->key;
    if (json_is(v, JSON_TRUE) || json_is(v, JSON_FALSE)) {
      ps[k].type = CINFER_PARAM_BOOL;
      ps[k].b = json_is(v, JSON_TRUE);
    } else if (json_is(v, JSON_NUMBER) && (v->int_flags & JSON_INT_I64)) {
      ps[k].type = CINFER_PARAM_INT;
      ps[k].i = v->ix.i;
    } else if (json_is(v, JSON_STRING)) {
      ps[k].type = CINFER_PARAM_STRING;
      ps[k].s = v->u.str;
    } else {
      free(keep), free(ps);
      fail_request(r, cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': response parameter "
                                        "'%s' must be a bool, an int64 or a str", inst->m->name, v->key));
      return;
    }
  }
  uint32_t asked = cinfer_request_output_count(r);
  k = 0;
  for (uint32_t i = 0; i < n; i++) {
    bool want = asked == 0;
    for (uint32_t j = 0; j < asked && !want; j++) want = !strcmp(cinfer_request_output_name(r, j), t[i].name);
    if (want) keep[k++] = t[i];
  }
  cinfer_status_free(cinfer_request_respond_params(r, keep, k, flags, NULL, ps, np));
  free(keep);
  free(ps);
}

/* Takes rid out of the pending list (under mu). */
static py_pending *pending_take_locked(py_instance *inst, uint64_t rid) {
  for (py_pending **pp = &inst->pending; *pp; pp = &(*pp)->next)
    if ((*pp)->rid == rid) {
      py_pending *p = *pp;
      *pp = p->next;
      return p;
    }
  return NULL;
}

static py_pending *pending_find_locked(py_instance *inst, uint64_t rid) {
  for (py_pending *p = inst->pending; p; p = p->next)
    if (p->rid == rid) return p;
  return NULL;
}

/* Takes every pending request of batch (all when batch == 0) out of the list (under mu). */
static py_pending *pending_take_batch_locked(py_instance *inst, uint64_t batch) {
  py_pending *out = NULL;
  for (py_pending **pp = &inst->pending; *pp;) {
    py_pending *p = *pp;
    if (batch == 0 || p->batch == batch) {
      *pp = p->next;
      p->next = out;
      out = p;
    } else {
      pp = &p->next;
    }
  }
  return out;
}

/* True when batch has pending requests and every one is cancelled (under mu). */
static bool batch_cancelled_locked(py_instance *inst, uint64_t batch) {
  bool any = false;
  for (py_pending *p = inst->pending; p; p = p->next) {
    if (p->batch != batch) continue;
    if (!cinfer_request_is_cancelled(p->r)) return false;
    any = true;
  }
  return any;
}

static void fail_list(py_pending *p, const py_instance *inst, cinfer_code code, const char *why) {
  while (p) {
    py_pending *next = p->next;
    fail_request(p->r, cinfer_status_new(code, "python model '%s' instance %s: %s", inst->m->name,
                                         inst->name, why));
    free(p);
    p = next;
  }
}

/* ---- messages of the stub (the reader thread) ---------------------------------------------- */

/* Maps the memfd of a message and decodes its "tensors". */
typedef struct py_msg_tensors {
  void *base;
  size_t size;
  cinfer_tensor *t;
  uint32_t n;
} py_msg_tensors;

static cinfer_status *msg_tensors(const json_value *root, int fd, py_msg_tensors *mt) {
  memset(mt, 0, sizeof *mt);
  cinfer_status *st = NULL;
  if (fd >= 0 && (st = py_shm_map(fd, &mt->base, &mt->size))) return st;
  if ((st = py_tensors_decode(json_get(root, "tensors"), mt->base, mt->size, &mt->t, &mt->n))) {
    if (mt->base) munmap(mt->base, mt->size);
    mt->base = NULL;
  }
  return st;
}

static void msg_tensors_free(py_msg_tensors *mt) {
  free(mt->t);
  if (mt->base) munmap(mt->base, mt->size);
  memset(mt, 0, sizeof *mt);
}

/* The tensors of an execute_done, in the stub's reused output region: a memfd comes with
 * the message when the stub made a new one (generation "shm_gen"); the reader keeps it
 * mapped. The returned mt does not own the mapping. */
static cinfer_status *out_region_tensors(py_instance *inst, const json_value *root, int fd,
                                         py_msg_tensors *mt) {
  memset(mt, 0, sizeof *mt);
  double gen;
  if (!jnum(root, "shm_gen", &gen)) return msg_tensors(root, fd, mt);
  if (fd >= 0) {
    void *base;
    size_t size;
    cinfer_status *st = py_shm_map(fd, &base, &size);
    if (st) return st;
    if (inst->out_base) munmap(inst->out_base, inst->out_size);
    inst->out_base = base;
    inst->out_size = size;
    inst->out_gen = (uint64_t)gen;
  } else if ((uint64_t)gen != inst->out_gen) {
    return cinfer_status_new(CINFER_INTERNAL, "execute_done names shared memory generation %.0f; "
                             "the server has %llu", gen, (unsigned long long)inst->out_gen);
  }
  return py_tensors_decode(json_get(root, "tensors"), inst->out_base, inst->out_size, &mt->t, &mt->n);
}

static void on_response(py_instance *inst, const json_value *root, int fd) {
  double rid_d;
  if (!jnum(root, "rid", &rid_d)) return;
  uint64_t rid = (uint64_t)rid_d;
  const json_value *fin = json_get(root, "final");
  bool final = json_is(fin, JSON_TRUE);
  pthread_mutex_lock(&inst->mu);
  py_pending *p = final ? pending_take_locked(inst, rid) : pending_find_locked(inst, rid);
  cinfer_request *r = p ? p->r : NULL;
  pthread_mutex_unlock(&inst->mu);
  if (!r) {
    LOG_W("python model '%s' instance %s: a response for a request that is complete; dropped",
          inst->m->name, inst->name);
    return;
  }
  if (final) free(p);
  const json_value *err = json_get(root, "error");
  if (err && json_is(err, JSON_OBJECT)) {
    if (!final) { /* an error ends the request; the stub's later responses are dropped */
      pthread_mutex_lock(&inst->mu);
      p = pending_take_locked(inst, rid);
      pthread_mutex_unlock(&inst->mu);
      free(p);
    }
    fail_request(r, response_error_from_wire(err));
    return;
  }
  py_msg_tensors mt;
  cinfer_status *st = msg_tensors(root, fd, &mt);
  if (st) {
    if (!final) {
      pthread_mutex_lock(&inst->mu);
      p = pending_take_locked(inst, rid);
      pthread_mutex_unlock(&inst->mu);
      free(p);
    }
    fail_request(r, cinfer_status_prefix(st, "python model '%s' response", inst->m->name));
    return;
  }
  respond_outputs(inst, r, mt.t, mt.n, final ? CINFER_RESPONSE_FINAL : 0, json_get(root, "params"));
  msg_tensors_free(&mt);
}

/* Fails every request of batch that is still open with the stub's error err. */
static void fail_batch(py_instance *inst, uint64_t batch, const json_value *err) {
  pthread_mutex_lock(&inst->mu);
  py_pending *p = pending_take_batch_locked(inst, batch);
  pthread_mutex_unlock(&inst->mu);
  while (p) {
    py_pending *next = p->next;
    fail_request(p->r, status_from_wire(inst, err));
    free(p);
    p = next;
  }
}

/* A decoupled model's execute() failed (on the other socket, after the responses it sent). */
static void on_execute_error(py_instance *inst, const json_value *root) {
  double b_d = 0;
  const json_value *err = json_get(root, "error");
  if (jnum(root, "batch", &b_d) && json_is(err, JSON_OBJECT)) fail_batch(inst, (uint64_t)b_d, err);
}

/* execute() of the stub returned: complete what it answered (batch style) or, on an
 * error, every request of the batch that is still open. */
static void on_execute_done(py_instance *inst, const json_value *root, int fd) {
  double b_d = 0;
  jnum(root, "batch", &b_d);
  uint64_t batch = (uint64_t)b_d;
  const json_value *err = json_get(root, "error");
  if (err && json_is(err, JSON_OBJECT)) {
    fail_batch(inst, batch, err);
  } else if (!inst->m->decoupled) {
    py_msg_tensors mt;
    cinfer_status *st = out_region_tensors(inst, root, fd, &mt);
    const json_value *resps = json_get(root, "responses");
    for (const json_value *e = !st && json_is(resps, JSON_ARRAY) ? resps->u.child : NULL; e; e = e->next) {
      double rid_d, first = 0, count = 0;
      if (!jnum(e, "rid", &rid_d)) continue;
      pthread_mutex_lock(&inst->mu);
      py_pending *p = pending_take_locked(inst, (uint64_t)rid_d);
      pthread_mutex_unlock(&inst->mu);
      if (!p) continue;
      const json_value *rerr = json_get(e, "error");
      jnum(e, "first", &first);
      jnum(e, "count", &count);
      if (rerr && json_is(rerr, JSON_OBJECT)) {
        fail_request(p->r, response_error_from_wire(rerr));
      } else if (first < 0 || count < 0 || first + count > mt.n) {
        fail_request(p->r, cinfer_status_new(CINFER_INTERNAL, "python model '%s': a malformed "
                                             "response", inst->m->name));
      } else {
        respond_outputs(inst, p->r, mt.t + (uint32_t)first, (uint32_t)count, CINFER_RESPONSE_FINAL,
                        json_get(e, "params"));
      }
      free(p);
    }
    pthread_mutex_lock(&inst->mu);
    py_pending *rest = pending_take_batch_locked(inst, batch);
    pthread_mutex_unlock(&inst->mu);
    while (rest) {
      py_pending *next = rest->next;
      fail_request(rest->r, st ? cinfer_status_prefix(cinfer_status_new(cinfer_status_code(st), "%s",
                                                                        cinfer_status_message(st)),
                                                      "python model '%s'", inst->m->name)
                               : cinfer_status_new(CINFER_INTERNAL, "python model '%s': execute() "
                                                   "gave no response to this request", inst->m->name));
      free(rest);
      rest = next;
    }
    cinfer_status_free(st);
    msg_tensors_free(&mt);
  }
  pthread_mutex_lock(&inst->mu);
  if (batch > inst->done_batch) inst->done_batch = batch;
  pthread_cond_broadcast(&inst->cv);
  pthread_mutex_unlock(&inst->mu);
}

static void on_is_cancelled(py_instance *inst, py_conn *c, const json_value *root) {
  double rid = 0, call = 0;
  jnum(root, "rid", &rid);
  jnum(root, "call", &call);
  pthread_mutex_lock(&inst->mu);
  py_pending *p = pending_find_locked(inst, (uint64_t)rid);
  bool cancelled = p && cinfer_request_is_cancelled(p->r);
  pthread_mutex_unlock(&inst->mu);
  char msg[128];
  int n = snprintf(msg, sizeof msg, "{\"type\":\"reply\",\"call\":%.0f,\"cancelled\":%s}", call,
                   cancelled ? "true" : "false");
  py_conn_send(c, msg, (size_t)n, -1);
}

/* pb_utils.MetricFamily / Metric operations (pymetrics.c); replies when asked. */
static void on_metric(py_instance *inst, py_conn *c, const json_value *root) {
  double call = -1;
  bool want = jnum(root, "call", &call);
  cbuf b = {0};
  cbuf_printf(&b, "{\"type\":\"reply\",\"call\":%.0f,", call);
  size_t head = b.len;
  pym_on_message(&inst->metrics, inst->m->server ? cinfer_server_metrics_registry(inst->m->server) : NULL,
                 inst->m->name, root, &b);
  if (b.len == head) cbuf_puts(&b, "\"ok\":true");
  cbuf_puts(&b, "}");
  if (want) send_buf(c, &b, -1);
  cbuf_free(&b);
}

/* ---- BLS: a request of the model to another model of the server ------------------------------ */

typedef struct bls_call {
  py_conn *conn;
  uint64_t call;
  void *in_base; /* the request's inputs point into this mapping until FINAL */
  size_t in_size;
  cinfer_tensor *in_t;
  json_doc *doc; /* input names point into it */
  cinfer_request *req;
} bls_call;

static void bls_free(bls_call *bc) {
  if (bc->req) cinfer_request_release(bc->req);
  free(bc->in_t);
  if (bc->in_base) munmap(bc->in_base, bc->in_size);
  json_doc_free(bc->doc);
  py_conn_release(bc->conn);
  free(bc);
}

/* One infer_response message: outputs in a new memfd, or the error. */
static void bls_send(py_conn *c, uint64_t call, bool final, const cinfer_status *err,
                     const cinfer_tensor *t, uint32_t n, const cinfer_response *resp) {
  cbuf b = {0};
  cbuf_printf(&b, "{\"type\":\"infer_response\",\"call\":%llu,\"final\":%s,",
              (unsigned long long)call, final ? "true" : "false");
  int fd = -1;
  void *base = NULL;
  size_t total = 0;
  size_t *off = calloc(n ? n : 1, sizeof *off);
  cinfer_status *st = off ? NULL : cinfer_status_oom("BLS response");
  if (!err && !st) {
    total = py_layout(t, n, off);
    if (total && !(st = py_shm_create(total, &fd, &base)))
      for (uint32_t i = 0; i < n; i++)
        if (t[i].byte_size) memcpy((char *)base + off[i], t[i].data, t[i].byte_size);
  }
  const cinfer_status *e = err ? err : st;
  if (e) {
    cbuf_puts(&b, "\"error\":{\"message\":");
    const char *m = cinfer_status_message(e);
    cbuf_json_string(&b, m, strlen(m));
    cbuf_printf(&b, ",\"code\":\"%s\"}}", code_to_name(cinfer_status_code(e)));
  } else {
    /* The response's parameters: the BLS caller's response.parameters(). */
    uint32_t np = resp ? cinfer_response_param_count(resp) : 0;
    for (uint32_t i = 0; i < np; i++) {
      const cinfer_param *p = cinfer_response_param(resp, i);
      cbuf_puts(&b, i ? "," : "\"params\":{");
      cbuf_json_string(&b, p->key, strlen(p->key));
      cbuf_put(&b, ":", 1);
      cbuf_json_param_value(&b, p);
      cbuf_puts(&b, i + 1 == np ? "}," : "");
    }
    py_json_tensors(&b, t, n, off, NULL);
    cbuf_puts(&b, "}");
  }
  send_buf(c, &b, e ? -1 : fd);
  if (base) munmap(base, total);
  if (fd >= 0) close(fd);
  cbuf_free(&b);
  cinfer_status_free(st);
  free(off);
}

static void bls_on_response(void *user, cinfer_response *resp, uint32_t flags) {
  bls_call *bc = user;
  bool final = (flags & CINFER_RESPONSE_FINAL) != 0;
  uint32_t n = cinfer_response_output_count(resp);
  cinfer_tensor *t = calloc(n ? n : 1, sizeof *t);
  if (!t) {
    cinfer_status *oom = cinfer_status_oom("BLS response");
    bls_send(bc->conn, bc->call, final, oom, NULL, 0, NULL);
    cinfer_status_free(oom);
  } else {
    for (uint32_t i = 0; i < n; i++) t[i] = *cinfer_response_output(resp, i);
    bls_send(bc->conn, bc->call, final, cinfer_response_error(resp), t, n, resp);
    free(t);
  }
  cinfer_response_free(resp);
  if (final) bls_free(bc);
}

/* Sets the request parameters of a JSON object. */
static cinfer_status *bls_params(cinfer_request *r, const json_value *params) {
  if (!json_is(params, JSON_OBJECT)) return NULL;
  cinfer_status *st = NULL;
  for (const json_value *p = params->u.child; p && !st; p = p->next) {
    if (json_is(p, JSON_STRING)) st = cinfer_request_set_param_string(r, p->key, p->u.str, p->len);
    else if (json_is_bool(p)) st = cinfer_request_set_param_bool(r, p->key, p->type == JSON_TRUE);
    else if (json_is(p, JSON_NUMBER) && p->u.num == (double)(int64_t)p->u.num)
      st = cinfer_request_set_param_int(r, p->key, (int64_t)p->u.num);
    else if (json_is(p, JSON_NUMBER)) st = cinfer_request_set_param_double(r, p->key, p->u.num);
    else st = cinfer_status_new(CINFER_INVALID_ARG, "parameter '%s' is not a string, number or bool", p->key);
  }
  return st;
}

/* Takes doc; the caller closes fd (the mapping outlives it). */
static void on_infer(py_instance *inst, py_conn *c, json_doc *doc, int fd) {
  const json_value *root = json_root(doc);
  double call = 0, ver = -1;
  jnum(root, "call", &call);
  jnum(root, "version", &ver);
  const char *model = jstr(root, "model"), *id = jstr(root, "id");
  bls_call *bc = calloc(1, sizeof *bc);
  if (!bc) {
    cinfer_status *oom = cinfer_status_oom("BLS request");
    bls_send(c, (uint64_t)call, true, oom, NULL, 0, NULL);
    cinfer_status_free(oom);
    json_doc_free(doc);
    return;
  }
  bc->conn = py_conn_ref(c);
  bc->call = (uint64_t)call;
  bc->doc = doc;
  cinfer_status *st = NULL;
  py_msg_tensors mt = {0};
  cinfer_model *target = NULL;
  if (!inst->m->server)
    st = cinfer_status_new(CINFER_UNSUPPORTED, "BLS needs the server handle (backend ABI 2.1)");
  else if (!model || !model[0])
    st = cinfer_status_new(CINFER_INVALID_ARG, "BLS request without a model_name");
  if (!st && !(st = msg_tensors(root, fd, &mt))) {
    bc->in_base = mt.base; /* bls_free unmaps */
    bc->in_size = mt.size;
    bc->in_t = mt.t;
    st = cinfer_server_model_acquire(inst->m->server, model, (int64_t)ver, &target);
  }
  if (!st) {
    st = cinfer_request_create(target, &bc->req);
    cinfer_model_release(target); /* the request holds its own reference */
  }
  if (!st && id && id[0]) cinfer_request_set_id(bc->req, id, strlen(id));
  for (uint32_t i = 0; !st && i < mt.n; i++) st = cinfer_request_add_input(bc->req, &mt.t[i]);
  const json_value *outs = json_get(root, "outputs");
  for (const json_value *o = !st && json_is(outs, JSON_ARRAY) ? outs->u.child : NULL; o && !st; o = o->next)
    if (json_is(o, JSON_STRING)) st = cinfer_request_add_output(bc->req, o->u.str);
  if (!st) st = bls_params(bc->req, json_get(root, "params"));
  if (!st) {
    cinfer_request_set_callback(bc->req, bls_on_response, bc);
    st = cinfer_server_infer_async(inst->m->server, bc->req);
    if (!st) return; /* bls_on_response finishes bc */
  }
  bls_send(c, bc->call, true, st, NULL, 0, NULL);
  cinfer_status_free(st);
  bls_free(bc);
}

/* One message of the stub (from either socket), answered here. Returns the document
 * when its type is `want` (the caller frees it), otherwise NULL; *bad says why the
 * message is a protocol error (the process must be killed). Closes fd. */
static json_doc *handle_msg(py_instance *inst, py_conn *c, bool main_sock, const char *buf,
                            size_t n, int fd, const char *want, const char **bad) {
  *bad = NULL;
  json_doc *doc = NULL;
  cinfer_status *st = json_parse(buf, n, PY_JSON_DEPTH, &doc);
  if (st) {
    cinfer_status_free(st);
    if (fd >= 0) close(fd);
    *bad = "sent a malformed message";
    return NULL;
  }
  const json_value *root = json_root(doc);
  const char *type = jstr(root, "type");
  if (!type) type = "";
  if (!strcmp(type, "log")) {
    const char *lvl = jstr(root, "level"), *msg = jstr(root, "msg");
    if (!lvl) lvl = "info";
    if (!msg) msg = "";
    if (!strcmp(lvl, "error")) LOG_E("python model '%s' (%s): %s", inst->m->name, inst->name, msg);
    else if (!strcmp(lvl, "warn")) LOG_W("python model '%s' (%s): %s", inst->m->name, inst->name, msg);
    else if (!strcmp(lvl, "verbose")) LOG_V(1, "python model '%s' (%s): %s", inst->m->name, inst->name, msg);
    else LOG_I("python model '%s' (%s): %s", inst->m->name, inst->name, msg);
  } else if (!strcmp(type, "response")) {
    on_response(inst, root, fd);
  } else if (!strcmp(type, "execute_done") && main_sock) {
    on_execute_done(inst, root, fd);
    if (want && !strcmp(want, type)) {
      if (fd >= 0) close(fd);
      return doc;
    }
  } else if (!strcmp(type, "is_cancelled")) {
    on_is_cancelled(inst, c, root);
  } else if (!strcmp(type, "metric")) {
    on_metric(inst, c, root);
  } else if (!strcmp(type, "execute_error")) {
    on_execute_error(inst, root);
  } else if (!strcmp(type, "infer")) {
    on_infer(inst, c, doc, fd); /* takes doc; the mapping outlives fd */
    if (fd >= 0) close(fd);
    return NULL;
  } else if (want && !strcmp(want, type)) {
    if (fd >= 0) close(fd);
    return doc;
  } else {
    LOG_W("python model '%s' (%s): unexpected message '%s'", inst->m->name, inst->name, type);
  }
  if (fd >= 0) close(fd);
  json_doc_free(doc);
  return NULL;
}

/* The reader thread of one stub process: the messages of the stub's other threads
 * (decoupled responses, BLS, logs); at EOF the process is gone: fail what it had and
 * wake the worker. */
typedef struct reader_arg {
  py_instance *inst;
  py_conn *conn;
  pid_t pid;
} reader_arg;

static void *reader_main(void *arg) {
  reader_arg ra = *(reader_arg *)arg;
  free(arg);
  py_instance *inst = ra.inst;
  char *buf = malloc(PY_MAX_MSG + 1);
  const char *why_io = NULL;
  while (buf) {
    int fd;
    ssize_t n = py_conn_recv(ra.conn, buf, PY_MAX_MSG + 1, &fd);
    if (n == 0) break;
    if (n < 0) {
      why_io = errno == EMSGSIZE ? "sent a message larger than the protocol allows" : "failed its socket";
      break;
    }
    json_doc_free(handle_msg(inst, ra.conn, false, buf, (size_t)n, fd, NULL, &why_io));
    if (why_io) break;
  }
  free(buf);
  /* The process is gone or must go: make sure, and collect its status. */
  kill(ra.pid, SIGKILL);
  int status = 0;
  while (waitpid(ra.pid, &status, 0) < 0 && errno == EINTR) {
  }
  char how[160];
  py_describe_status(status, how, sizeof how);
  pthread_mutex_lock(&inst->mu);
  if (inst->kill_why[0])
    snprintf(inst->dead_why, sizeof inst->dead_why, "%s; the process was killed", inst->kill_why);
  else if (why_io)
    snprintf(inst->dead_why, sizeof inst->dead_why, "the stub process %s and was killed", why_io);
  else
    snprintf(inst->dead_why, sizeof inst->dead_why, "the stub process (pid %d) %s", (int)ra.pid, how);
  inst->alive = false;
  py_pending *p = pending_take_batch_locked(inst, 0);
  bool expected = inst->stopping;
  char why[512];
  snprintf(why, sizeof why, "%s", inst->dead_why);
  pthread_cond_broadcast(&inst->cv);
  pthread_mutex_unlock(&inst->mu);
  if (!expected || p)
    LOG_E("python model '%s' instance %s: %s%s", inst->m->name, inst->name, why,
          p ? "; its requests failed and the instance restarts with the next request" : "");
  char why2[640];
  snprintf(why2, sizeof why2, "%s; the request failed (the instance restarts)", why);
  fail_list(p, inst, CINFER_INTERNAL, why2);
  py_conn_release(ra.conn);
  return NULL;
}

/* Kills the current process for `why` (NULL: keep an earlier reason) and waits (under mu)
 * until its reader has recorded its end. */
static void kill_and_wait_locked(py_instance *inst, const char *why) {
  if (why && !inst->kill_why[0]) snprintf(inst->kill_why, sizeof inst->kill_why, "%s", why);
  if (inst->alive) kill(inst->pid, SIGKILL);
  while (inst->alive) pthread_cond_wait(&inst->cv, &inst->mu);
}

/* The thread that sent the stub's main thread a message (init, execute, finalize) reads
 * that socket itself until the reply `want` arrives (no hand-off to another thread: one
 * wake-up per request), answering whatever else comes meanwhile (BLS, logs, responses).
 * For "execute_done", bno is the batch, and the wait ends early PY_CANCEL_GRACE_MS after
 * every request of the batch was cancelled (the cancel hook writes wake_fd). timeout_ms 0
 * = no limit, else the process is killed with kill_why when it passes. Returns the reply
 * (the caller frees it), or NULL once the process has ended (its reader has failed the
 * requests). Called without mu. */
static json_doc *exec_wait(py_instance *inst, py_conn *c, const char *want, uint64_t bno,
                           int64_t timeout_ms, const char *timeout_why) {
  char *buf = inst->rbuf;
  uint64_t t_end = timeout_ms > 0 ? now_ms() + (uint64_t)timeout_ms : 0, t_cancel = 0;
  bool is_exec = !strcmp(want, "execute_done");
  for (;;) {
    if (is_exec && !t_cancel) {
      pthread_mutex_lock(&inst->mu);
      if (batch_cancelled_locked(inst, bno)) t_cancel = now_ms() + PY_CANCEL_GRACE_MS;
      pthread_mutex_unlock(&inst->mu);
    }
    uint64_t wake = t_end && t_cancel ? (t_end < t_cancel ? t_end : t_cancel) : t_end ? t_end : t_cancel;
    int wait_ms = -1;
    if (wake) {
      uint64_t now = now_ms();
      if (now >= wake) {
        char why[256];
        if (t_end && now >= t_end) snprintf(why, sizeof why, "%s", timeout_why);
        else snprintf(why, sizeof why, "every request of the batch was cancelled and execute() "
                      "did not return within %d ms of that", PY_CANCEL_GRACE_MS);
        pthread_mutex_lock(&inst->mu);
        kill_and_wait_locked(inst, why);
        pthread_mutex_unlock(&inst->mu);
        return NULL;
      }
      wait_ms = (int)(wake - now);
    }
    struct pollfd pf[2] = {{.fd = c->sock, .events = POLLIN}, {.fd = inst->wake_fd, .events = POLLIN}};
    int pr = poll(pf, 2, wait_ms);
    if (pr < 0 && errno != EINTR) pf[0].revents = POLLERR;
    if (pr <= 0) continue;
    if (pf[1].revents & POLLIN) {
      uint64_t v;
      if (read(inst->wake_fd, &v, sizeof v) < 0) { /* drained; EAGAIN when another took it */
      }
    }
    if (!pf[0].revents) continue;
    int fd;
    ssize_t n = py_conn_recv(c, buf, PY_MAX_MSG + 1, &fd);
    const char *bad = NULL;
    json_doc *d = NULL;
    if (n > 0) d = handle_msg(inst, c, true, buf, (size_t)n, fd, want, &bad);
    else if (n < 0 && errno == EMSGSIZE) bad = "sent a message larger than the protocol allows";
    if (d && is_exec) {
      double b = 0;
      jnum(json_root(d), "batch", &b);
      if ((uint64_t)b < bno) { /* an older batch's (cannot happen: one at a time) */
        json_doc_free(d);
        continue;
      }
    }
    if (d) return d;
    if (n <= 0 || bad) { /* the process ended (or must) */
      char why[256];
      if (bad) snprintf(why, sizeof why, "the stub process %s", bad);
      pthread_mutex_lock(&inst->mu);
      kill_and_wait_locked(inst, bad ? why : NULL);
      pthread_mutex_unlock(&inst->mu);
      return NULL;
    }
  }
}

/* ---- process lifecycle (the worker, the loading thread) ------------------------------------ */

/* Ends the current process (finalize first when graceful) and joins its reader. */
static void proc_stop(py_instance *inst, bool graceful) {
  pthread_mutex_lock(&inst->mu);
  if (!inst->has_reader) {
    pthread_mutex_unlock(&inst->mu);
    return;
  }
  inst->stopping = true;
  py_conn *c = inst->conn;
  if (inst->alive && graceful) {
    pthread_mutex_unlock(&inst->mu);
    char why[128];
    snprintf(why, sizeof why, "finalize() did not return within %d ms", PY_FINALIZE_WAIT_MS);
    if (py_conn_send(c, "{\"type\":\"finalize\"}", 19, -1))
      json_doc_free(exec_wait(inst, c, "finalize_done", 0, PY_FINALIZE_WAIT_MS, why));
    pthread_mutex_lock(&inst->mu);
  }
  if (inst->alive) kill(inst->pid, SIGKILL);
  pthread_t t = inst->reader;
  inst->has_reader = false;
  py_conn *oc = inst->oconn;
  inst->conn = inst->oconn = NULL;
  pthread_mutex_unlock(&inst->mu);
  pthread_join(t, NULL);
  py_conn_release(c);
  py_conn_release(oc);
  pym_table_clear(&inst->metrics); /* the process's Metric objects are gone with it */
  if (inst->out_base) munmap(inst->out_base, inst->out_size);
  inst->out_base = NULL;
  inst->out_size = 0;
  inst->out_gen = 0;
}

static void json_kv(cbuf *b, const char *k, const char *v, bool comma) {
  if (comma) cbuf_puts(b, ",");
  cbuf_json_string(b, k, strlen(k));
  cbuf_puts(b, ":");
  cbuf_json_string(b, v, strlen(v));
}

/* Starts a process and runs initialize(args). */
static cinfer_status *proc_start(py_instance *inst) {
  proc_stop(inst, false); /* the previous process's reader, if it has ended */
  py_model *m = inst->m;
  pid_t pid;
  py_conn *c, *oc;
  cinfer_status *st = py_spawn(m->python, m->envp, &pid, &c, &oc);
  if (st) return cinfer_status_prefix(st, "python model '%s' instance %s", m->name, inst->name);
  reader_arg *ra = malloc(sizeof *ra);
  if (!ra) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    py_conn_release(c), py_conn_release(oc);
    return cinfer_status_oom("python instance");
  }
  *ra = (reader_arg){inst, py_conn_ref(oc), pid};
  pthread_mutex_lock(&inst->mu);
  inst->conn = c;
  inst->oconn = oc;
  inst->pid = pid;
  inst->alive = true;
  inst->stopping = false;
  inst->kill_why[0] = 0;
  int e = pthread_create(&inst->reader, NULL, reader_main, ra);
  if (e) {
    inst->alive = false;
    inst->conn = inst->oconn = NULL;
    pthread_mutex_unlock(&inst->mu);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    py_conn_release(c), py_conn_release(oc), py_conn_release(oc), free(ra);
    return cinfer_status_new(CINFER_INTERNAL, "python instance: pthread_create: %s", strerror(e));
  }
  inst->has_reader = true;
  pthread_mutex_unlock(&inst->mu);

  char ver[32], dev[8];
  snprintf(ver, sizeof ver, "%lld", (long long)m->version);
  snprintf(dev, sizeof dev, "0");
  cbuf b = {0};
  cbuf_puts(&b, "{\"type\":\"init\",\"decoupled\":");
  cbuf_puts(&b, m->decoupled ? "true" : "false");
  cbuf_puts(&b, ",\"model_file\":");
  cbuf_json_string(&b, m->model_file, strlen(m->model_file));
  cbuf_puts(&b, ",\"args\":{");
  json_kv(&b, "model_config", m->config_json, false);
  json_kv(&b, "model_instance_kind", "CPU", true);
  json_kv(&b, "model_instance_name", inst->name, true);
  json_kv(&b, "model_instance_device_id", dev, true);
  json_kv(&b, "model_repository", m->model_dir, true);
  json_kv(&b, "model_version", ver, true);
  json_kv(&b, "model_name", m->name, true);
  cbuf_puts(&b, "}}");
  bool sent = b.len <= PY_MAX_MSG && send_buf(c, &b, -1);
  size_t blen = b.len;
  cbuf_free(&b);
  json_doc *reply = sent ? exec_wait(inst, c, "init_done", 0, 0, NULL) : NULL;
  char why[512];
  if (!reply) {
    proc_stop(inst, false);
    if (!sent && blen > PY_MAX_MSG)
      return cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': the config is too large "
                               "for the stub protocol (%zu bytes; limit %u)", m->name, blen, PY_MAX_MSG);
    pthread_mutex_lock(&inst->mu);
    snprintf(why, sizeof why, "%s", inst->dead_why);
    pthread_mutex_unlock(&inst->mu);
    return cinfer_status_new(CINFER_INTERNAL, "python model '%s' instance %s: %s before initialize() "
                             "returned (interpreter '%s')", m->name, inst->name, why, m->python);
  }
  const json_value *err = json_get(json_root(reply), "error");
  if (err && json_is(err, JSON_OBJECT)) {
    const char *msg = jstr(err, "message");
    st = cinfer_status_new(CINFER_INVALID_ARG, "python model '%s' instance %s: initialize() failed: %s",
                           m->name, inst->name, msg ? msg : "");
    json_doc_free(reply);
    proc_stop(inst, false);
    return st;
  }
  json_doc_free(reply);
  LOG_I("python model '%s' instance %s: stub process %d started", m->name, inst->name, (int)pid);
  return NULL;
}

/* ---- the iface ------------------------------------------------------------------------------ */

static void model_free(py_model *m) {
  if (!m) return;
  pthread_mutex_destroy(&m->inst_mu);
  free(m->name), free(m->model_dir), free(m->version_dir), free(m->model_file);
  free(m->python), free(m->config_json);
  py_env_vars_free(m->envp);
  free(m);
}

/* The stub's interpreter: EXECUTION_ENV_PATH's bin/python3 (with *envp for it), the
 * parameter python_executable, $CINFER_PYTHON, or python3 from PATH. */
static cinfer_status *python_of(const cinfer_config *c, const char *model_dir, const char *name,
                                char **python, char ***envp) {
  *python = NULL;
  *envp = NULL;
  const char *env = cinfer_config_parameter(c, "EXECUTION_ENV_PATH");
  const char *p = cinfer_config_parameter(c, "python_executable");
  if (env) {
    if (p && p[0])
      return cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': parameters EXECUTION_ENV_PATH "
                               "and python_executable both name an interpreter; set one of them", name);
    char *root;
    cinfer_status *st = py_env_prepare(env, model_dir, name, &root);
    if (st) return st;
    if (asprintf(python, "%s/bin/python3", root) < 0) *python = NULL;
    *envp = py_env_vars(root);
    free(root);
    if (!*python || !*envp) {
      free(*python), py_env_vars_free(*envp);
      *python = NULL, *envp = NULL;
      return cinfer_status_oom("python environment");
    }
    return NULL;
  }
  if (!p || !p[0]) p = getenv("CINFER_PYTHON");
  *python = strdup(p && p[0] ? p : "python3");
  return *python ? NULL : cinfer_status_oom("python model");
}

static cinfer_status *py_model_load(const cinfer_model_load_info *info, void **out) {
  py_model *m = calloc(1, sizeof *m);
  if (!m) return cinfer_status_oom("python model");
  pthread_mutex_init(&m->inst_mu, NULL);
  cinfer_status *st = python_of(info->config, info->model_dir, info->model_name, &m->python, &m->envp);
  if (st) {
    model_free(m);
    return st;
  }
  m->name = strdup(info->model_name);
  m->model_dir = strdup(info->model_dir);
  m->version_dir = strdup(info->version_dir);
  m->config_json = strdup(info->config_json);
  m->version = info->version;
  m->config = info->config;
  m->server = info->server;
  if (asprintf(&m->model_file, "%s/model.py", info->version_dir) < 0) m->model_file = NULL;
  if (!m->name || !m->model_dir || !m->version_dir || !m->python || !m->config_json || !m->model_file) {
    model_free(m);
    return cinfer_status_oom("python model");
  }
  struct stat sb;
  if (stat(m->model_file, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = cinfer_status_new(CINFER_NOT_FOUND, "python model '%s': %s: %s", m->name, m->model_file,
                           errno ? strerror(errno) : "not a file");
    model_free(m);
    return st;
  }
  const char *to = cinfer_config_parameter(info->config, "execute_timeout_ms");
  if (to) {
    char *end;
    errno = 0;
    long long v = strtoll(to, &end, 10);
    if (errno || end == to || *end || v < 0) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': parameter execute_timeout_ms "
                             "'%s' is not a count of milliseconds (0 = no limit)", m->name, to);
      model_free(m);
      return st;
    }
    m->execute_timeout_ms = v;
  }
  json_doc *doc = NULL;
  if (!(st = json_parse(info->config_json, strlen(info->config_json), PY_JSON_DEPTH, &doc))) {
    const json_value *mtp = json_get(json_root(doc), "model_transaction_policy");
    m->decoupled = json_is(json_get(mtp, "decoupled"), JSON_TRUE);
    json_doc_free(doc);
  } else {
    model_free(m);
    return st;
  }
  *out = m;
  return NULL;
}

static void py_model_unload(void *model) { model_free(model); }

static void unregister(py_instance *inst) {
  py_model *m = inst->m;
  pthread_mutex_lock(&m->inst_mu);
  for (int i = 0; i < m->n_insts; i++)
    if (m->insts[i] == inst) m->insts[i] = m->insts[--m->n_insts];
  pthread_mutex_unlock(&m->inst_mu);
}

static cinfer_status *py_instance_create(void *model, const cinfer_instance_info *info, void **out) {
  py_model *m = model;
  if (info->kind == CINFER_INSTANCE_KIND_GPU)
    return cinfer_status_new(CINFER_UNSUPPORTED, "python model '%s': instance_group kind KIND_GPU "
                             "is not implemented by cinfer's Python backend (use KIND_CPU)", m->name);
  py_instance *inst = calloc(1, sizeof *inst);
  if (!inst) return cinfer_status_oom("python instance");
  inst->m = m;
  inst->index = info->index;
  inst->in_fd = -1;
  pym_table_init(&inst->metrics);
  inst->rbuf = malloc(PY_MAX_MSG + 1);
  if (!inst->rbuf) {
    free(inst);
    return cinfer_status_oom("python instance");
  }
  inst->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (inst->wake_fd < 0) {
    int e = errno;
    free(inst->rbuf), free(inst);
    return cinfer_status_new(CINFER_INTERNAL, "python instance: eventfd: %s", strerror(e));
  }
  snprintf(inst->name, sizeof inst->name, "%s_0_%d", m->name, info->index);
  pthread_mutex_init(&inst->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&inst->cv, &ca);
  pthread_condattr_destroy(&ca);
  cinfer_status *st = NULL;
  pthread_mutex_lock(&m->inst_mu);
  if (m->n_insts == PY_MAX_INSTANCES)
    st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "python model '%s': more than %d instances",
                           m->name, PY_MAX_INSTANCES);
  else
    m->insts[m->n_insts++] = inst;
  pthread_mutex_unlock(&m->inst_mu);
  if (!st && (st = proc_start(inst))) unregister(inst);
  if (st) {
    close(inst->wake_fd);
    free(inst->rbuf);
    pym_table_destroy(&inst->metrics);
    pthread_cond_destroy(&inst->cv);
    pthread_mutex_destroy(&inst->mu);
    free(inst);
    return st;
  }
  *out = inst;
  return NULL;
}

static void py_instance_destroy(void *instance) {
  py_instance *inst = instance;
  unregister(inst);
  proc_stop(inst, true);
  /* Requests a decoupled model never finished: the process is gone, so they end here. */
  pthread_mutex_lock(&inst->mu);
  py_pending *p = pending_take_batch_locked(inst, 0);
  pthread_mutex_unlock(&inst->mu);
  fail_list(p, inst, CINFER_UNAVAILABLE, "the model was unloaded before the request finished");
  if (inst->in_base) munmap(inst->in_base, inst->in_cap);
  if (inst->in_fd >= 0) close(inst->in_fd);
  close(inst->wake_fd);
  free(inst->rbuf);
  pym_table_destroy(&inst->metrics);
  pthread_cond_destroy(&inst->cv);
  pthread_mutex_destroy(&inst->mu);
  free(inst);
}

/* Replaces the input region by one of at least `need` bytes (the worker only). */
static cinfer_status *in_region_grow(py_instance *inst, size_t need) {
  size_t cap = inst->in_cap ? inst->in_cap : 64 * 1024;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  int fd;
  void *base;
  cinfer_status *st = py_shm_create(cap, &fd, &base);
  if (st) return cinfer_status_prefix(st, "python model '%s' inputs", inst->m->name);
  if (inst->in_base) munmap(inst->in_base, inst->in_cap);
  if (inst->in_fd >= 0) close(inst->in_fd);
  inst->in_fd = fd;
  inst->in_base = base;
  inst->in_cap = cap;
  inst->in_gen++;
  return NULL;
}

/* Appends the request's parameters as a JSON object. */
static void json_params(cbuf *b, const cinfer_request *r) {
  cbuf_puts(b, "{");
  uint32_t n = cinfer_request_param_count(r);
  for (uint32_t i = 0; i < n; i++) {
    const char *k = cinfer_request_param_key(r, i), *s;
    int64_t iv;
    double dv;
    bool bv;
    if (i) cbuf_puts(b, ",");
    cbuf_json_string(b, k, strlen(k));
    cbuf_puts(b, ":");
    if (cinfer_request_param_string(r, k, &s)) cbuf_json_string(b, s, strlen(s));
    else if (cinfer_request_param_bool(r, k, &bv)) cbuf_puts(b, bv ? "true" : "false");
    else if (cinfer_request_param_int(r, k, &iv)) cbuf_printf(b, "%lld", (long long)iv);
    else if (cinfer_request_param_double(r, k, &dv)) cbuf_printf(b, "%.17g", dv);
    else cbuf_puts(b, "null");
  }
  cbuf_puts(b, "}");
}

static cinfer_status *py_execute(void *instance, cinfer_batch *batch) {
  py_instance *inst = instance;
  py_model *m = inst->m;
  pthread_mutex_lock(&inst->mu);
  bool alive = inst->alive;
  pthread_mutex_unlock(&inst->mu);
  if (!alive) {
    LOG_I("python model '%s' instance %s: restarting the stub process", m->name, inst->name);
    cinfer_status *st = proc_start(inst);
    if (st) return st;
  }
  /* The message: one entry per request, the inputs of all requests in one memfd. */
  uint32_t nt = 0;
  for (uint32_t k = 0; k < batch->n_requests; k++) nt += cinfer_request_input_count(batch->requests[k]);
  cinfer_tensor *ts = calloc(nt ? nt : 1, sizeof *ts);
  size_t *off = calloc(nt ? nt : 1, sizeof *off);
  uint64_t *rids = calloc(nt ? nt : 1, sizeof *rids);
  py_pending **pend = calloc(batch->n_requests, sizeof *pend);
  cinfer_status *st = NULL;
  if (!ts || !off || !rids || !pend) st = cinfer_status_oom("python batch");
  for (uint32_t k = 0; !st && k < batch->n_requests; k++)
    if (!(pend[k] = calloc(1, sizeof **pend))) st = cinfer_status_oom("python batch");
  cbuf b = {0};
  int fd = -1; /* the input region's memfd when this process has not got it yet */
  size_t total = 0;
  uint64_t bno = 0;
  if (!st) {
    pthread_mutex_lock(&inst->mu);
    bno = ++inst->next_batch;
    for (uint32_t k = 0; k < batch->n_requests; k++) pend[k]->rid = ++inst->next_rid;
    pthread_mutex_unlock(&inst->mu);
    cbuf_printf(&b, "{\"type\":\"execute\",\"batch\":%llu,\"model\":", (unsigned long long)bno);
    cbuf_json_string(&b, m->name, strlen(m->name));
    cbuf_puts(&b, ",\"requests\":[");
    uint32_t i = 0;
    for (uint32_t k = 0; k < batch->n_requests; k++) {
      cinfer_request *r = batch->requests[k];
      const char *id = cinfer_request_id(r);
      cbuf_printf(&b, "%s{\"rid\":%llu,\"id\":", k ? "," : "", (unsigned long long)pend[k]->rid);
      cbuf_json_string(&b, id, strlen(id));
      cbuf_puts(&b, ",\"params\":");
      json_params(&b, r);
      cbuf_puts(&b, ",\"outputs\":[");
      for (uint32_t j = 0; j < cinfer_request_output_count(r); j++) {
        const char *o = cinfer_request_output_name(r, j);
        if (j) cbuf_puts(&b, ",");
        cbuf_json_string(&b, o, strlen(o));
      }
      cbuf_puts(&b, "]}");
      for (uint32_t j = 0; j < cinfer_request_input_count(r); j++, i++) {
        ts[i] = *cinfer_request_input(r, j);
        rids[i] = pend[k]->rid;
      }
    }
    cbuf_puts(&b, "],");
    total = py_layout(ts, nt, off);
    py_json_tensors(&b, ts, nt, off, rids);
    /* A decoupled model's threads may read a batch's inputs after execute() returned:
     * every batch gets a region of its own there (the stub's arrays keep the old one
     * mapped). Batch-style models reuse the region: inputs live until execute() returns. */
    if (total > inst->in_cap || (m->decoupled && total)) st = in_region_grow(inst, total);
    cbuf_printf(&b, ",\"shm_gen\":%llu}", (unsigned long long)inst->in_gen);
    if (st) {
    } else if (!b.data) st = cinfer_status_oom("python batch");
    else if (b.len > PY_MAX_MSG)
      st = cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': the batch's request headers "
                             "(ids, parameters, names) take %zu bytes; the limit is %u", m->name,
                             b.len, PY_MAX_MSG);
    for (uint32_t j = 0; !st && j < nt; j++)
      if (ts[j].byte_size) memcpy((char *)inst->in_base + off[j], ts[j].data, ts[j].byte_size);
  }
  free(ts), free(off), free(rids);
  if (st) {
    for (uint32_t k = 0; pend && k < batch->n_requests; k++) free(pend[k]);
    free(pend);
    cbuf_free(&b);
    return st;
  }
  /* From here the requests are the backend's: registered before the send, so that the
   * reader (which answers them) always finds them. */
  pthread_mutex_lock(&inst->mu);
  if (!inst->alive) { /* died since the check above: its reader has failed what it had */
    char why[512];
    snprintf(why, sizeof why, "%s", inst->dead_why);
    pthread_mutex_unlock(&inst->mu);
    for (uint32_t k = 0; k < batch->n_requests; k++) free(pend[k]);
    free(pend);
    cbuf_free(&b);
    return cinfer_status_new(CINFER_INTERNAL, "python model '%s' instance %s: %s (the instance "
                             "restarts)", m->name, inst->name, why);
  }
  for (uint32_t k = 0; k < batch->n_requests; k++) {
    pend[k]->batch = bno;
    pend[k]->r = batch->requests[k];
    pend[k]->next = inst->pending;
    inst->pending = pend[k];
  }
  py_conn *c = py_conn_ref(inst->conn);
  pid_t cur_pid = inst->pid;
  pthread_mutex_unlock(&inst->mu);
  free(pend);
  if (inst->in_base && (inst->in_sent_gen != inst->in_gen || inst->in_sent_pid != cur_pid)) {
    fd = inst->in_fd;
    inst->in_sent_gen = inst->in_gen;
    inst->in_sent_pid = cur_pid;
  }
  bool sent = py_conn_send(c, b.data, b.len, fd);
  cbuf_free(&b);
  if (!sent) {
    /* The process died meanwhile; its reader fails the requests (or has). Make sure. */
    pthread_mutex_lock(&inst->mu);
    kill_and_wait_locked(inst, NULL);
    pthread_mutex_unlock(&inst->mu);
    py_conn_release(c);
    return NULL;
  }
  /* Wait for execute() to return in the stub, reading its replies here: until
   * execute_done, the process's end, execute_timeout_ms, or PY_CANCEL_GRACE_MS after every
   * request of the batch was cancelled (the clients are gone and execute() does not
   * return: a hung model must not hold the instance, or the server's shutdown, forever). */
  char why[160];
  snprintf(why, sizeof why, "execute() did not return within %lld ms (parameter execute_timeout_ms)",
           (long long)m->execute_timeout_ms);
  json_doc_free(exec_wait(inst, c, "execute_done", bno, m->execute_timeout_ms, why));
  py_conn_release(c);
  return NULL;
}

/* The core's cancel notification (any thread, must not block long): wakes the worker of
 * the instance that has the request, which then checks its batch. */
static void py_cancel(void *model, cinfer_request *r) {
  py_model *m = model;
  pthread_mutex_lock(&m->inst_mu);
  for (int i = 0; i < m->n_insts; i++) {
    py_instance *inst = m->insts[i];
    pthread_mutex_lock(&inst->mu);
    for (py_pending *p = inst->pending; p; p = p->next)
      if (p->r == r) {
        uint64_t one = 1;
        if (write(inst->wake_fd, &one, sizeof one) < 0) { /* EAGAIN: a wake-up is pending */
        }
      }
    pthread_mutex_unlock(&inst->mu);
  }
  pthread_mutex_unlock(&m->inst_mu);
}

/* ---- auto-complete: auto_complete_config() in a short-lived stub ------------------------------ */

static cinfer_status *apply_ops(cinfer_autocomplete *ac, const json_value *ops) {
  cinfer_status *st = NULL;
  for (const json_value *o = json_is(ops, JSON_ARRAY) ? ops->u.child : NULL; o && !st; o = o->next) {
    const char *op = jstr(o, "op");
    double v = 0;
    if (!op) continue;
    if (!strcmp(op, "max_batch_size")) {
      jnum(o, "value", &v);
      st = cinfer_autocomplete_set_max_batch_size(ac, (int64_t)v);
    } else if (!strcmp(op, "dynamic_batching")) {
      st = cinfer_autocomplete_set_dynamic_batching(ac);
    } else if (!strcmp(op, "decoupled")) {
      st = cinfer_autocomplete_set_decoupled(ac, json_is(json_get(o, "value"), JSON_TRUE));
    } else if (!strcmp(op, "add_input") || !strcmp(op, "add_output")) {
      const char *name = jstr(o, "name"), *dt = jstr(o, "data_type");
      const json_value *dims = json_get(o, "dims");
      int64_t d[CINFER_MAX_DIMS];
      int nd = 0;
      cinfer_dtype t = dt ? cinfer_dtype_parse(dt, strlen(dt)) : CINFER_TYPE_INVALID;
      if (t == CINFER_TYPE_INVALID)
        return cinfer_status_new(CINFER_INVALID_ARG, "auto_complete_config: %s '%s': unknown "
                                 "data_type '%s'", op + 4, name ? name : "", dt ? dt : "");
      for (const json_value *x = json_is(dims, JSON_ARRAY) ? dims->u.child : NULL; x; x = x->next) {
        if (nd == CINFER_MAX_DIMS || !json_is(x, JSON_NUMBER))
          return cinfer_status_new(CINFER_INVALID_ARG, "auto_complete_config: %s '%s': bad dims "
                                   "(at most %d numbers)", op + 4, name ? name : "", CINFER_MAX_DIMS);
        d[nd++] = (int64_t)x->u.num;
      }
      st = op[4] == 'i' ? cinfer_autocomplete_add_input(ac, name, t, nd, d)
                        : cinfer_autocomplete_add_output(ac, name, t, nd, d);
    }
  }
  return st;
}

static cinfer_status *py_autocomplete(cinfer_autocomplete *ac, const char *version_dir) {
  const cinfer_config *cfg = cinfer_autocomplete_config(ac);
  const char *name = cinfer_config_name(cfg);
  char file[4096], model_dir[4096];
  snprintf(model_dir, sizeof model_dir, "%s", version_dir);
  char *slash = strrchr(model_dir, '/');
  if (slash && slash != model_dir) *slash = 0;
  if (snprintf(file, sizeof file, "%s/model.py", version_dir) >= (int)sizeof file)
    return cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': the path is too long", name);
  struct stat sb;
  if (stat(file, &sb) != 0)
    return cinfer_status_new(CINFER_NOT_FOUND, "python model '%s': %s: %s", name, file, strerror(errno));
  char *python;
  char **envp;
  cinfer_status *st = python_of(cfg, model_dir, name, &python, &envp);
  if (st) return st;
  char *json = cinfer_config_json(cfg, NULL);
  if (!json) {
    free(python), py_env_vars_free(envp);
    return cinfer_status_oom("python auto-complete");
  }
  pid_t pid;
  py_conn *c, *oc;
  st = py_spawn(python, envp, &pid, &c, &oc);
  py_env_vars_free(envp);
  if (st) {
    free(json);
    free(python);
    return cinfer_status_prefix(st, "python model '%s' auto-complete", name);
  }
  cbuf b = {0};
  cbuf_puts(&b, "{\"type\":\"autocomplete\",\"model_file\":");
  cbuf_json_string(&b, file, strlen(file));
  cbuf_puts(&b, ",\"config\":");
  cbuf_json_string(&b, json, strlen(json));
  cbuf_puts(&b, "}");
  free(json);
  bool sent = b.len <= PY_MAX_MSG && send_buf(c, &b, -1);
  cbuf_free(&b);
  char *buf = malloc(PY_MAX_MSG + 1);
  json_doc *reply = NULL;
  const char *fail = sent ? NULL : "could not be sent the config";
  while (!fail && buf) { /* logs may come first; the stub has 60 s */
    struct pollfd pfd = {.fd = c->sock, .events = POLLIN};
    int pr = poll(&pfd, 1, 60000);
    if (pr <= 0) {
      fail = "did not answer within 60 s";
      break;
    }
    int fd;
    ssize_t n = py_conn_recv(c, buf, PY_MAX_MSG + 1, &fd);
    if (fd >= 0) close(fd);
    if (n <= 0) {
      fail = "ended";
      break;
    }
    json_doc *d = NULL;
    cinfer_status *pst = json_parse(buf, (size_t)n, PY_JSON_DEPTH, &d);
    if (pst) {
      cinfer_status_free(pst);
      fail = "sent a malformed message";
      break;
    }
    const char *type = jstr(json_root(d), "type");
    if (type && !strcmp(type, "autocomplete_done")) {
      reply = d;
      break;
    }
    if (type && !strcmp(type, "log")) {
      const char *msg = jstr(json_root(d), "msg");
      LOG_I("python model '%s' (auto-complete): %s", name, msg ? msg : "");
    } else if (type && !strcmp(type, "metric")) { /* no registry here: an error reply */
      double call = -1;
      if (jnum(json_root(d), "call", &call)) {
        char msg[256];
        int k = snprintf(msg, sizeof msg, "{\"type\":\"reply\",\"call\":%.0f,\"error\":{\"message\":"
                         "\"custom metrics are not available in auto_complete_config\",\"code\":"
                         "\"UNAVAILABLE\"}}", call);
        py_conn_send(c, msg, (size_t)k, -1);
      }
    }
    json_doc_free(d);
  }
  free(buf);
  py_conn_release(c); /* the stub sees EOF and exits */
  py_conn_release(oc);
  kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!reply) {
    char how[160];
    py_describe_status(status, how, sizeof how);
    st = cinfer_status_new(CINFER_INTERNAL, "python model '%s': the auto-complete stub process "
                           "%s (%s; interpreter '%s')", name, fail ? fail : "failed", how, python);
    free(python);
    return st;
  }
  free(python);
  const json_value *err = json_get(json_root(reply), "error");
  if (err && json_is(err, JSON_OBJECT)) {
    const char *msg = jstr(err, "message");
    st = cinfer_status_new(CINFER_INVALID_ARG, "python model '%s': auto_complete_config() failed: %s",
                           name, msg ? msg : "");
  } else {
    st = apply_ops(ac, json_get(json_root(reply), "ops"));
  }
  json_doc_free(reply);
  return st;
}

const cinfer_backend_iface cinfer_python_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "python",
    .flags = CINFER_BACKEND_DECOUPLED | CINFER_BACKEND_DECOUPLED_BY_CONFIG,
    .autocomplete = py_autocomplete,
    .model_load = py_model_load,
    .model_unload = py_model_unload,
    .instance_create = py_instance_create,
    .instance_destroy = py_instance_destroy,
    .execute = py_execute,
    .cancel = py_cancel,
};
