/* ensemble.c: ensembles in the server core (ensemble.h; docs/design/ensemble.md).
 *
 * The plan (struct ensemble, built once at load, read-only afterwards):
 *   tensors  every ensemble tensor: the ensemble's inputs, then each step's output_map
 *            values. Each has one producer (a step, or -1 for an ensemble input) and a
 *            list of readers (one entry per input_map binding that names it).
 *   steps    model name and version, input bindings (step-model input <- tensor) and
 *            output bindings (step-model output -> tensor), and `holds`: how many uses
 *            a step's response has (reader bindings of its tensors + ensemble outputs).
 *
 * A run (struct ens_run) is one ensemble request in flight. Its state, under run->mu:
 *
 *   step state:  WAITING ──(every input binding resolved: claim)──▶ RUNNING ──▶ DONE
 *                (a step is claimed exactly once, by whoever resolves its last input)
 *
 *   - A tensor is resolved when its producer is DONE (or, for an ensemble input, at the
 *     start); it may be resolved without a value (an optional input not given, an output
 *     the step model did not return), and the child request then simply lacks it.
 *   - Claimed steps go on the run's ready list; the thread that claimed them submits them
 *     after dropping run->mu (a submission takes the step model's locks; nothing takes
 *     run->mu while holding a model's lock).
 *   - Tensors are never copied: val[t] views the ensemble request's input (alive until
 *     the ensemble's FINAL response) or the FINAL response of the step that produced it
 *     (resp[p], kept until holds[p] reaches 0 or moved into the ensemble's response,
 *     which owns it from then on: cinfer_response.held).
 *
 * Invariants:
 *   1. outstanding = number of RUNNING steps; the run finishes (exactly once, `finished`)
 *      when outstanding is 0 and either every step is DONE or err is set.
 *   2. After err is set no step is submitted; in-flight children are cancelled and
 *      waited for, so the ensemble's FINAL response comes after every child's.
 *   3. refs: the submitter while in ensemble_submit, one per child callback pending, one
 *      for a job queued on the dispatcher; the run is freed at 0, after finish. The run
 *      holds a reference on the ensemble model (so on the plan) until it is freed.
 *
 * A decoupled step may be the last one (check_streaming): its partial responses go on as
 * partial responses of the ensemble request (forward_partial), its FINAL one ends it.
 *
 * Child responses delivered under a step model's preserve_ordering lock (model.c holds
 * order_mu while it delivers in order) must not submit from that thread: a submission
 * to the same model would take that lock again. Those completions hand the submission to
 * the ensemble's dispatcher thread; every other completion submits inline.
 *
 * May call: model.c (cinfer_server_infer_async), request.c, stats.c, table.c (acquire),
 * handle.c. Loading a step model is lifecycle.c's: ensemble_load reaches it through the
 * s->ensure_loaded hook, the one way up the file graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "repo/config.h"
#include "server/ensemble.h"
#include "server/server_int.h"

enum { STEP_WAITING = 0, STEP_RUNNING, STEP_DONE };

typedef struct ens_bind {
  const char *io; /* the step model's input/output name (borrowed from the config) */
  int tensor;     /* index in ensemble.tensors */
} ens_bind;

typedef struct ens_step {
  const char *model;
  int64_t version; /* 0 = the highest ready version */
  ens_bind *in, *out;
  int n_in, n_out;
  int holds;
  bool decoupled;  /* the step model was decoupled when the ensemble loaded */
} ens_step;

typedef struct ens_tensor {
  const char *name;
  int producer; /* step index, or -1 for an ensemble input */
  int input;    /* index in the ensemble's inputs, or -1 */
  int output;   /* index in the ensemble's outputs, or -1 */
  int *readers; /* step index per reading binding */
  int n_readers;
} ens_tensor;

typedef struct ens_run ens_run;

typedef struct ens_job {
  ens_run *run;
  struct ens_job *next;
} ens_job;

typedef struct ensemble {
  cinfer_model *model; /* back pointer: the plan lives inside the model */
  cinfer_server *server;
  ens_step *steps;
  int n_steps;
  ens_tensor *tensors;
  int n_tensors;
  int *out_tensor; /* per ensemble output */
  int stream_step;  /* the decoupled last step whose responses stream out, or -1 */
  int fan_step;     /* the decoupled middle step whose responses each run the steps after
                       it (a sub-run per response), or -1 */
  uint8_t *down;    /* per step: 1 when it reads (directly or not) from fan_step */
  int *fan_wait;    /* per step after fan_step: its input bindings that a sub-run resolves
                       (from fan_step or a step after it); the others are resolved before */
  int *topo;        /* the steps in an order where producers come first */
  ens_bind *binds; /* storage of every step's bindings */
  int *readers;    /* storage of every tensor's readers */
  pthread_mutex_t mu; /* runs, jobs, stop */
  pthread_cond_t cv;
  ens_run *runs;   /* every run not yet finished (for cancellation) */
  ens_job *jobs, *jobs_tail;
  bool stop, thread_started;
  pthread_t thread;
} ensemble;

typedef struct ens_slot {
  ens_run *run;
  int step;
} ens_slot;

struct ens_run {
  _Atomic int refs;
  ensemble *e;
  cinfer_request *req; /* borrows the server's reference until finish */
  pthread_mutex_t mu;
  ens_run *prev, *next; /* e->runs, under e->mu */
  bool listed;
  cinfer_status *err;
  bool finished;
  int outstanding, n_done;
  int ready_head, ready_tail; /* claimed steps to submit; next_ready links them */
  int *next_ready;
  cinfer_tensor *val;
  int64_t *batch;           /* per tensor: its batch size, -1 when it is not batched */
  bool *have;
  int *waiting;
  int *holds;
  uint8_t *state;
  cinfer_request **child;   /* in flight: the run's reference */
  cinfer_response **resp;
  cinfer_request **cancel;  /* scratch for the one thread that sets err */
  cinfer_response *spare;   /* made at the start: the FINAL response when memory runs out */
  ens_slot *slots;
  uint8_t *needed;          /* fan ensembles: per step after fan_step, whether it runs */
  /* A sub-run (one response of the fan step): its parent run and its index there. */
  ens_run *parent;
  uint64_t iter;
  /* A run with a fan step, under mu: its sub-runs not yet finished, how many were made,
   * and their responses waiting to go out in order (emit_mu serialises the delivery). */
  int subs_active;
  uint64_t n_iter, next_emit;
  struct ens_emit *emit;    /* sorted by iter */
  pthread_mutex_t emit_mu;
};

typedef struct ens_emit {
  uint64_t iter;
  cinfer_response *resp; /* NULL: nothing to send for that iteration */
  struct ens_emit *next;
} ens_emit;

static cinfer_status *ens_unsupported_load(const cinfer_model_load_info *i, void **m) {
  (void)i, (void)m;
  return cinfer_status_new(CINFER_INTERNAL, "the ensemble scheduler is not a loadable backend");
}
static void ensemble_unload(void *plan);
static cinfer_status *ens_no_instance(void *m, const cinfer_instance_info *i, void **o) {
  (void)m, (void)i, (void)o;
  return cinfer_status_new(CINFER_INTERNAL, "an ensemble has no instances");
}
static void ens_no_instance_destroy(void *i) { (void)i; }
static cinfer_status *ens_no_execute(void *i, cinfer_batch *b) {
  (void)i, (void)b;
  return cinfer_status_new(CINFER_INTERNAL, "an ensemble is not executed by a backend");
}
static void ensemble_cancel(void *plan, cinfer_request *r);

static const cinfer_backend_iface ens_iface = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR, .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "ensemble", .model_load = ens_unsupported_load, .model_unload = ensemble_unload,
    .instance_create = ens_no_instance, .instance_destroy = ens_no_instance_destroy,
    .execute = ens_no_execute, .cancel = ensemble_cancel};
/* The same for an ensemble whose last step is decoupled: the ensemble is decoupled too
 * (Triton sets it from the steps), its responses stream out as that step's come. */
static const cinfer_backend_iface ens_iface_decoupled = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR, .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "ensemble", .flags = CINFER_BACKEND_DECOUPLED, .model_load = ens_unsupported_load,
    .model_unload = ensemble_unload, .instance_create = ens_no_instance,
    .instance_destroy = ens_no_instance_destroy, .execute = ens_no_execute,
    .cancel = ensemble_cancel};

const cinfer_backend_iface *ensemble_iface(void) { return &ens_iface; }
bool model_is_ensemble(const cinfer_model *m) {
  return m->backend == &ens_iface || m->backend == &ens_iface_decoupled;
}

static const model_kind ens_kind = {&ens_iface, ensemble_load, ensemble_submit};
const model_kind *ensemble_kind(void) { return &ens_kind; }

bool ensemble_config_is(const cinfer_model_config *c) {
  return c->platform && !strcmp(c->platform, "ensemble");
}

bool ensemble_depends_on(const cinfer_model *m, const char *name) {
  if (!model_is_ensemble(m) || !m->backend_model) return false;
  const ensemble *e = m->backend_model;
  for (int i = 0; i < e->n_steps; i++)
    if (!strcmp(e->steps[i].model, name)) return true;
  return false;
}

/* ---- load: plan and checks --------------------------------------------------------------- */

static int tensor_find(const ensemble *e, const char *name) {
  for (int i = 0; i < e->n_tensors; i++)
    if (!strcmp(e->tensors[i].name, name)) return i;
  return -1;
}

/* What is known of a tensor at one end of a connection: the model it comes from, that
 * model's batching, and its dtype and dims (as configured, without the batch dim). */
typedef struct endpoint {
  const char *model;
  bool batching;
  cinfer_dtype dtype;
  int ndim;
  const int64_t *dims;
} endpoint;

static bool dims_match(const int64_t *a, int na, const int64_t *b, int nb) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return false;
  return true;
}

static void dims_str(char *buf, size_t cap, const endpoint *p) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  int k = 0;
  if (p->batching) n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s-1", k++ ? "," : "");
  for (int i = 0; i < p->ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", k++ ? "," : "", (long long)p->dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Triton's rule (ensemble_utils.cc): equal dtypes; dims equal with -1 as a wildcard, or
 * else the full shapes (batch dim included) equal, so that a non-batching model's
 * [-1, d...] may feed a batching model's [d...]. */
static cinfer_status *check_consistent(const char *ens, const char *tensor, const endpoint *a,
                                       const endpoint *b) {
  if (a->dtype != b->dtype)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "in ensemble '%s', ensemble tensor '%s': inconsistent data type: %s "
                             "is inferred from model '%s' while %s is inferred from model '%s'",
                             ens, tensor, cinfer_dtype_name(a->dtype), a->model,
                             cinfer_dtype_name(b->dtype), b->model);
  if (dims_match(a->dims, a->ndim, b->dims, b->ndim)) return NULL;
  int64_t fa[CINFER_MAX_DIMS + 1], fb[CINFER_MAX_DIMS + 1];
  int na = 0, nb = 0;
  if (a->batching) fa[na++] = -1;
  for (int i = 0; i < a->ndim; i++) fa[na++] = a->dims[i];
  if (b->batching) fb[nb++] = -1;
  for (int i = 0; i < b->ndim; i++) fb[nb++] = b->dims[i];
  if (dims_match(fa, na, fb, nb)) return NULL;
  char sa[256], sb[256];
  dims_str(sa, sizeof sa, a);
  dims_str(sb, sizeof sb, b);
  return cinfer_status_new(CINFER_INVALID_ARG,
                           "in ensemble '%s', ensemble tensor '%s': inconsistent shape: %s is "
                           "inferred from model '%s' while %s is inferred from model '%s'",
                           ens, tensor, sa, a->model, sb, b->model);
}

/* Steps that can never run: the tensors form a cycle. Names one cycle. */
static cinfer_status *check_acyclic(ensemble *e, const char *ens) {
  int n = e->n_steps, n_topo = 0;
  uint8_t *done = calloc((size_t)n + 1, 1);
  int *path = calloc((size_t)n + 1, sizeof *path);
  if (!done || !path) {
    free(done), free(path);
    return cinfer_status_oom(NULL);
  }
  for (bool progress = true; progress;) { /* Kahn's order, O(steps x bindings) */
    progress = false;
    for (int s = 0; s < n; s++) {
      if (done[s]) continue;
      bool ready = true;
      for (int k = 0; k < e->steps[s].n_in && ready; k++) {
        int p = e->tensors[e->steps[s].in[k].tensor].producer;
        if (p >= 0 && !done[p]) ready = false;
      }
      if (ready) done[s] = 1, progress = true, e->topo[n_topo++] = s;
    }
  }
  int start = -1;
  for (int s = 0; s < n && start < 0; s++)
    if (!done[s]) start = s;
  cinfer_status *st = NULL;
  if (start >= 0) { /* walk back through unfinished producers until a step repeats */
    int len = 0, s = start;
    uint8_t *seen = done; /* reuse: 2 marks a step on the walk */
    while (seen[s] != 2) {
      seen[s] = 2;
      path[len++] = s;
      int next = -1;
      for (int k = 0; k < e->steps[s].n_in && next < 0; k++) {
        int p = e->tensors[e->steps[s].in[k].tensor].producer;
        if (p >= 0 && seen[p] != 1) next = p;
      }
      s = next; /* exists: s is not done, so some producer is not done */
    }
    char msg[1024];
    size_t m = 0;
    int first = 0;
    while (path[first] != s) first++;
    m += (size_t)snprintf(msg, sizeof msg, "step %d ('%s')", s, e->steps[s].model);
    for (int i = first; i < len && m < sizeof msg; i++) {
      const ens_step *a = &e->steps[path[i]];
      int p = i + 1 < len ? path[i + 1] : s;
      const char *via = "";
      for (int k = 0; k < a->n_in; k++)
        if (e->tensors[a->in[k].tensor].producer == p) via = e->tensors[a->in[k].tensor].name;
      m += (size_t)snprintf(msg + m, sizeof msg - m, "%s reads '%s' from step %d ('%s')",
                            i > first ? ", which" : "", via, p, e->steps[p].model);
    }
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "in ensemble '%s', ensemble_scheduling has a cycle: %s (a step can "
                           "only read tensors of earlier steps)", ens, msg);
  }
  free(done);
  free(path);
  return st;
}

/* Ensembles being loaded on this thread, outermost first: a step that names one of them
 * is a circular dependency (Triton: "circular dependency between ensembles"). */
#define ENS_MAX_DEPTH 32
static _Thread_local const char *tl_loading[ENS_MAX_DEPTH];
static _Thread_local int tl_n_loading;

static cinfer_status *check_step(ensemble *e, cinfer_model *ens, int si) {
  ens_step *s = &e->steps[si];
  const char *en = ens->name;
  for (int i = 0; i < tl_n_loading; i++)
    if (!strcmp(tl_loading[i], s->model)) {
      char chain[1024];
      size_t m = 0;
      for (int k = i; k < tl_n_loading && m < sizeof chain; k++)
        m += (size_t)snprintf(chain + m, sizeof chain - m, "'%s' -> ", tl_loading[k]);
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "circular dependency between ensembles: %s'%s' (step %d of '%s')",
                               chain, s->model, si, en);
    }
  cinfer_status *st = e->server->ensure_loaded(e->server, s->model);
  if (st)
    return cinfer_status_prefix(st, "ensemble '%s' depends on '%s' (step %d), which could not "
                                "be loaded", en, s->model, si);
  cinfer_model *sm = NULL;
  if ((st = cinfer_server_model_acquire(e->server, s->model, s->version, &sm)))
    return cinfer_status_prefix(st, "ensemble '%s' depends on '%s' (step %d)%s", en, s->model, si,
                                s->version > 0 ? " at the version it names" : "");
  /* check_streaming decides; a Python model that is not decoupled answers once (Triton's
   * L0_simple_ensemble partial_add_sub is one, as a middle step) */
  s->decoupled = !cinfer_model_answers_once(sm);
  if (sm->max_batch != 0 && ens->max_batch > sm->max_batch) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "ensemble '%s' allows maximum batch size %lld, but it contains model "
                           "'%s' which only allows maximum batch size to be %lld", en,
                           (long long)ens->max_batch, s->model, (long long)sm->max_batch);
    goto out;
  }
  for (int k = 0; k < s->n_in && !st; k++) {
    int ci = -1;
    for (int i = 0; i < sm->n_inputs; i++)
      if (!strcmp(sm->inputs[i].name, s->in[k].io)) ci = i;
    if (ci < 0) {
      st = cinfer_status_new(CINFER_INVALID_ARG,
                             "in ensemble '%s', step %d: input_map maps ensemble tensor '%s' to "
                             "'%s', which is not an input of model '%s'", en, si,
                             e->tensors[s->in[k].tensor].name, s->in[k].io, s->model);
      break;
    }
    for (int j = 0; j < k; j++)
      if (!strcmp(s->in[j].io, s->in[k].io))
        st = cinfer_status_new(CINFER_INVALID_ARG,
                               "in ensemble '%s', step %d: input '%s' of model '%s' is mapped to "
                               "multiple ensemble tensors", en, si, s->in[k].io, s->model);
  }
  for (int i = 0; i < sm->n_inputs && !st; i++) {
    bool mapped = false;
    for (int k = 0; k < s->n_in; k++)
      if (!strcmp(sm->inputs[i].name, s->in[k].io)) mapped = true;
    if (!mapped && !sm->inputs[i].optional)
      st = cinfer_status_new(CINFER_INVALID_ARG,
                             "in ensemble '%s', step %d: input '%s' of model '%s' is not mapped "
                             "to any ensemble tensor (input_map)", en, si, sm->inputs[i].name,
                             s->model);
  }
  for (int k = 0; k < s->n_out && !st; k++) {
    bool found = false;
    for (int i = 0; i < sm->n_outputs; i++)
      if (!strcmp(sm->outputs[i].name, s->out[k].io)) found = true;
    if (!found)
      st = cinfer_status_new(CINFER_INVALID_ARG,
                             "in ensemble '%s', step %d: output_map maps '%s', which is not an "
                             "output of model '%s', to ensemble tensor '%s'", en, si, s->out[k].io,
                             s->model, e->tensors[s->out[k].tensor].name);
    for (int j = 0; j < k && !st; j++)
      if (!strcmp(s->out[j].io, s->out[k].io))
        st = cinfer_status_new(CINFER_INVALID_ARG,
                               "in ensemble '%s', step %d: output '%s' of model '%s' is mapped "
                               "twice", en, si, s->out[k].io, s->model);
  }
out:
  cinfer_model_release(sm);
  return st;
}

/* The endpoint of tensor t as its producer sees it: the ensemble's input config, or the
 * producing step model's output config (looked up in the loaded model). */
static bool producer_endpoint(const ensemble *e, cinfer_model *ens, int t, cinfer_model **held,
                              endpoint *out) {
  const ens_tensor *x = &e->tensors[t];
  if (x->producer < 0) {
    const cfg_io *io = &ens->inputs[x->input];
    bool rs = io->reshape_ndim >= 0;
    *out = (endpoint){ens->name, ens->batching, io->dtype, rs ? io->reshape_ndim : io->ndim,
                      rs ? io->reshape : io->dims};
    return true;
  }
  const ens_step *s = &e->steps[x->producer];
  cinfer_model *sm = held[x->producer];
  for (int k = 0; k < s->n_out; k++) {
    if (s->out[k].tensor != t) continue;
    for (int i = 0; i < sm->n_outputs; i++)
      if (!strcmp(sm->outputs[i].name, s->out[k].io)) {
        const cfg_io *io = &sm->outputs[i];
        *out = (endpoint){sm->name, sm->batching, io->dtype, io->ndim, io->dims};
        return true;
      }
  }
  return false;
}

/* dtype and shape of every connection whose two ends are known (after check_step). */
static cinfer_status *check_connections(ensemble *e, cinfer_model *ens) {
  cinfer_model **held = calloc((size_t)e->n_steps + 1, sizeof *held);
  if (!held) return cinfer_status_oom(NULL);
  cinfer_status *st = NULL;
  for (int i = 0; i < e->n_steps && !st; i++)
    st = cinfer_server_model_acquire(e->server, e->steps[i].model, e->steps[i].version, &held[i]);
  for (int si = 0; si < e->n_steps && !st; si++) {
    const ens_step *s = &e->steps[si];
    cinfer_model *sm = held[si];
    for (int k = 0; k < s->n_in && !st; k++) {
      endpoint a, b;
      if (!producer_endpoint(e, ens, s->in[k].tensor, held, &a)) continue;
      for (int i = 0; i < sm->n_inputs; i++)
        if (!strcmp(sm->inputs[i].name, s->in[k].io)) {
          const cfg_io *io = &sm->inputs[i];
          b = (endpoint){sm->name, sm->batching, io->dtype, io->ndim, io->dims};
          st = check_consistent(ens->name, e->tensors[s->in[k].tensor].name, &a, &b);
        }
    }
  }
  for (int j = 0; j < ens->n_outputs && !st; j++) {
    endpoint a, b;
    int t = e->out_tensor[j];
    if (!producer_endpoint(e, ens, t, held, &a)) continue;
    const cfg_io *io = &ens->outputs[j];
    bool rs = io->reshape_ndim >= 0;
    b = (endpoint){ens->name, ens->batching, io->dtype, rs ? io->reshape_ndim : io->ndim,
                   rs ? io->reshape : io->dims};
    st = check_consistent(ens->name, io->name, &a, &b);
  }
  for (int i = 0; i < e->n_steps; i++) cinfer_model_release(held[i]);
  free(held);
  return st;
}

static void *dispatcher_main(void *arg);

/* Decoupled steps (Triton's ensemble_scheduler). One whose outputs nothing reads, and
 * which produces every ensemble output, is the streaming step: its responses stream out as
 * the ensemble's. One whose outputs other steps read is the fan step: each of its
 * responses with outputs runs the steps after it once more (a sub-run), and each sub-run's
 * outputs are one response of the ensemble, in the order of the fan step's responses (a
 * pre-processing -> LLM -> post-processing ensemble streams each token through the
 * post-processing model). Either makes the ensemble decoupled. Refused, naming the steps:
 * two of them, a decoupled step after the fan step, an ensemble output that does not come
 * from the fan step or after it, and a step after the fan step that reads a tensor of a
 * step running beside it (Triton would pair iterations of the two; cinfer does not). */
static cinfer_status *check_streaming(ensemble *e, cinfer_model *ens) {
  e->stream_step = e->fan_step = -1;
  for (int si = 0; si < e->n_steps; si++) {
    const ens_step *s = &e->steps[si];
    if (!s->decoupled) continue;
    bool read = false;
    for (int k = 0; k < s->n_out; k++) read |= e->tensors[s->out[k].tensor].n_readers > 0;
    int *slot = read ? &e->fan_step : &e->stream_step;
    if (*slot >= 0 || (read ? e->stream_step : e->fan_step) >= 0) {
      int other = *slot >= 0 ? *slot : read ? e->stream_step : e->fan_step;
      return cinfer_status_new(CINFER_UNSUPPORTED,
                               "in ensemble '%s', steps %d ('%s') and %d ('%s') are both "
                               "decoupled; cinfer runs one decoupled step per ensemble (the "
                               "last one, or one whose responses each run the steps after it)",
                               ens->name, other, e->steps[other].model, si, s->model);
    }
    *slot = si;
  }
  int last = e->stream_step >= 0 ? e->stream_step : e->fan_step;
  if (last < 0) return NULL;
  if (e->fan_step >= 0) { /* the steps after it, in topological order */
    e->down = calloc((size_t)e->n_steps + 1, 1);
    e->fan_wait = calloc((size_t)e->n_steps + 1, sizeof *e->fan_wait);
    uint8_t *anc = calloc((size_t)e->n_steps + 1, 1);
    if (!e->down || !e->fan_wait || !anc) {
      free(anc);
      return cinfer_status_oom(NULL);
    }
    for (int i = 0; i < e->n_steps; i++) { /* producers come first in topo */
      int si = e->topo[i];
      for (int k = 0; k < e->steps[si].n_in; k++) {
        int p = e->tensors[e->steps[si].in[k].tensor].producer;
        if (p >= 0 && (p == e->fan_step || e->down[p])) e->down[si] = 1, e->fan_wait[si]++;
      }
    }
    for (int i = e->n_steps - 1; i >= 0; i--) { /* the fan step's ancestors */
      int si = e->topo[i];
      if (si != e->fan_step && !anc[si]) continue;
      for (int k = 0; k < e->steps[si].n_in; k++) {
        int p = e->tensors[e->steps[si].in[k].tensor].producer;
        if (p >= 0) anc[p] = 1;
      }
    }
    cinfer_status *st = NULL;
    for (int si = 0; si < e->n_steps && !st; si++) {
      if (!e->down[si]) continue;
      if (e->steps[si].decoupled)
        st = cinfer_status_new(CINFER_UNSUPPORTED,
                               "in ensemble '%s', step %d ('%s') is decoupled and runs after the "
                               "decoupled step %d ('%s'); cinfer runs one decoupled step per "
                               "ensemble", ens->name, si, e->steps[si].model, e->fan_step,
                               e->steps[e->fan_step].model);
      for (int k = 0; k < e->steps[si].n_in && !st; k++) {
        int t = e->steps[si].in[k].tensor, p = e->tensors[t].producer;
        if (p >= 0 && p != e->fan_step && !e->down[p] && !anc[p])
          st = cinfer_status_new(CINFER_UNSUPPORTED,
                                 "in ensemble '%s', step %d ('%s') runs once per response of the "
                                 "decoupled step %d ('%s') and reads '%s' from step %d ('%s'), "
                                 "which runs beside that step, not before it; cinfer does not "
                                 "pair their responses", ens->name, si, e->steps[si].model,
                                 e->fan_step, e->steps[e->fan_step].model, e->tensors[t].name, p,
                                 e->steps[p].model);
      }
    }
    free(anc);
    if (st) return st;
  }
  for (int j = 0; j < ens->n_outputs; j++) {
    int p = e->tensors[e->out_tensor[j]].producer;
    if (p != last && !(e->fan_step >= 0 && e->down[p]))
      return cinfer_status_new(CINFER_UNSUPPORTED,
                               "in ensemble '%s', ensemble output '%s' comes from step %d "
                               "('%s'), not from the decoupled step %d ('%s')%s: with a decoupled "
                               "step every ensemble output must come from it%s", ens->name,
                               ens->outputs[j].name, p, e->steps[p].model, last,
                               e->steps[last].model, e->fan_step >= 0 ? " or a step after it" : "",
                               e->fan_step >= 0 ? " or after it" : "");
  }
  ens->backend = &ens_iface_decoupled;
  return NULL;
}

static void plan_free(ensemble *e) {
  if (!e) return;
  if (e->thread_started) {
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
  }
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e->steps);
  free(e->tensors);
  free(e->out_tensor);
  free(e->topo);
  free(e->down);
  free(e->fan_wait);
  free(e->binds);
  free(e->readers);
  free(e);
}

static void ensemble_unload(void *plan) { plan_free(plan); }

cinfer_status *ensemble_load(cinfer_server *s, cinfer_model *m, void **plan) {
  const cinfer_model_config *c = m->config;
  *plan = NULL;
  ensemble *e = calloc(1, sizeof *e);
  if (!e) return cinfer_status_oom(NULL);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->model = m;
  e->server = s;
  e->n_steps = (int)c->n_ensemble_steps; /* <= MODEL_CONFIG_MAX_ENTRIES (config.c) */
  size_t nb = 0, nt = c->n_inputs;
  for (size_t i = 0; i < c->n_ensemble_steps; i++) {
    nb += c->ensemble_steps[i].n_input_map + c->ensemble_steps[i].n_output_map;
    nt += c->ensemble_steps[i].n_output_map;
  }
  e->steps = calloc((size_t)e->n_steps + 1, sizeof *e->steps);
  e->tensors = calloc(nt + 1, sizeof *e->tensors);
  e->binds = calloc(nb + 1, sizeof *e->binds);
  e->readers = calloc(nb + 1, sizeof *e->readers);
  e->out_tensor = calloc(c->n_outputs + 1, sizeof *e->out_tensor);
  e->topo = calloc((size_t)e->n_steps + 1, sizeof *e->topo);
  cinfer_status *st = NULL;
  if (!e->steps || !e->tensors || !e->binds || !e->readers || !e->out_tensor || !e->topo) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  /* Tensors: inputs, then step outputs (config.c checked that each is written once and
   * that every tensor read is an input or written by a step). */
  for (size_t i = 0; i < c->n_inputs; i++)
    e->tensors[e->n_tensors++] = (ens_tensor){c->inputs[i].name, -1, (int)i, -1, NULL, 0};
  ens_bind *bp = e->binds;
  for (int si = 0; si < e->n_steps; si++) {
    const model_ensemble_step *cs = &c->ensemble_steps[si];
    ens_step *st_ = &e->steps[si];
    st_->model = cs->model_name;
    st_->version = cs->model_version > 0 ? cs->model_version : 0;
    st_->out = bp;
    st_->n_out = (int)cs->n_output_map;
    for (size_t k = 0; k < cs->n_output_map; k++) {
      int t = tensor_find(e, cs->output_map[k].value);
      if (t < 0) {
        t = e->n_tensors++;
        e->tensors[t] = (ens_tensor){cs->output_map[k].value, si, -1, -1, NULL, 0};
      } else if (e->tensors[t].producer != si) { /* config.c refuses this; be sure */
        st = cinfer_status_new(CINFER_INVALID_ARG, "in ensemble '%s', ensemble tensor '%s' is "
                               "written twice", m->name, cs->output_map[k].value);
        goto fail;
      }
      *bp++ = (ens_bind){cs->output_map[k].key, t};
    }
  }
  for (int si = 0; si < e->n_steps; si++) {
    const model_ensemble_step *cs = &c->ensemble_steps[si];
    ens_step *st_ = &e->steps[si];
    st_->in = bp;
    st_->n_in = (int)cs->n_input_map;
    for (size_t k = 0; k < cs->n_input_map; k++) {
      int t = tensor_find(e, cs->input_map[k].value);
      if (t < 0) {
        st = cinfer_status_new(CINFER_INVALID_ARG, "in ensemble '%s', step %d ('%s') reads '%s', "
                               "which is neither an ensemble input nor written by a step",
                               m->name, si, cs->model_name, cs->input_map[k].value);
        goto fail;
      }
      e->tensors[t].n_readers++;
      *bp++ = (ens_bind){cs->input_map[k].key, t};
    }
  }
  int *rp = e->readers;
  for (int t = 0; t < e->n_tensors; t++) {
    e->tensors[t].readers = rp;
    rp += e->tensors[t].n_readers;
    e->tensors[t].n_readers = 0;
  }
  for (int si = 0; si < e->n_steps; si++)
    for (int k = 0; k < e->steps[si].n_in; k++) {
      ens_tensor *x = &e->tensors[e->steps[si].in[k].tensor];
      x->readers[x->n_readers++] = si;
    }
  for (size_t j = 0; j < c->n_outputs; j++) {
    int t = tensor_find(e, c->outputs[j].name);
    if (t < 0 || e->tensors[t].producer < 0) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "ensemble output '%s' is not written by any step",
                             c->outputs[j].name);
      goto fail;
    }
    e->tensors[t].output = (int)j;
    e->out_tensor[j] = t;
  }
  for (int t = 0; t < e->n_tensors; t++) {
    ens_tensor *x = &e->tensors[t];
    if (x->producer >= 0) e->steps[x->producer].holds += x->n_readers + (x->output >= 0);
  }
  /* model_namespace (Triton's --model-namespacing) is parsed and dropped by config.c: a
   * non-empty one would be ignored here, so it fails the load. */
  for (size_t i = 0; c->ensemble_scheduling && i < c->ensemble_scheduling->n_children; i++) {
    const pbtxt_node *ns = pbtxt_child(c->ensemble_scheduling->children[i], "model_namespace");
    if (ns && ns->kind == PBTXT_STRING && ns->len > 0) {
      st = cinfer_status_new(CINFER_UNSUPPORTED,
                             "%s:%d: ensemble_scheduling.step.model_namespace '%s' is not "
                             "implemented by cinfer (no model namespacing); the model cannot "
                             "load with it (remove it)", c->source_path ? c->source_path : "config",
                             ns->line, ns->str);
      goto fail;
    }
  }
  if ((st = check_acyclic(e, m->name))) goto fail;
  /* The step models, loaded first if they are not; then every connection. */
  if (tl_n_loading == ENS_MAX_DEPTH) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "ensemble '%s': ensembles nest deeper than %d",
                           m->name, ENS_MAX_DEPTH);
    goto fail;
  }
  tl_loading[tl_n_loading++] = m->name;
  for (int si = 0; si < e->n_steps && !st; si++) st = check_step(e, m, si);
  tl_n_loading--;
  if (st) goto fail;
  if ((st = check_connections(e, m))) goto fail;
  if ((st = check_streaming(e, m))) goto fail;
  if (pthread_create(&e->thread, NULL, dispatcher_main, e)) {
    st = cinfer_status_new(CINFER_INTERNAL, "ensemble '%s': cannot start its dispatcher thread",
                           m->name);
    goto fail;
  }
  e->thread_started = true;
  *plan = e;
  return NULL;
fail:
  plan_free(e);
  return st;
}

/* ---- runs ------------------------------------------------------------------------------- */

/* The run's reference on the ensemble model goes last: a callback may drop the run's last
 * reference after the ensemble's FINAL response, when nothing else holds the model (and
 * so the plan this reads). */
static void run_release(ens_run *run);
static void run_free(ens_run *run) {
  ensemble *e = run->e;
  cinfer_model *m = e->model;
  for (int i = 0; i < e->n_steps; i++) {
    cinfer_response_free(run->resp[i]);
    cinfer_request_release(run->child[i]);
  }
  for (ens_emit *x = run->emit, *nx; x; x = nx) { /* not sent: the request failed */
    nx = x->next;
    cinfer_response_free(x->resp);
    free(x);
  }
  ens_run *parent = run->parent;
  cinfer_status_free(run->err);
  free(run->spare);
  pthread_mutex_destroy(&run->mu);
  pthread_mutex_destroy(&run->emit_mu);
  free(run);
  if (parent) run_release(parent); /* the sub-run viewed its tensors until now */
  cinfer_model_release(m);
}

static void run_release(ens_run *run) {
  if (atomic_fetch_sub(&run->refs, 1) == 1) run_free(run);
}

/* One allocation: the run, then its per-tensor and per-step arrays (8-byte aligned). */
/* sub: a sub-run, which answers through its parent and needs no spare response. */
static ens_run *run_new(ensemble *e, cinfer_request *r, bool sub) {
  size_t nt = (size_t)e->n_tensors, ns = (size_t)e->n_steps;
#define AL(x) (((x) + 7) & ~(size_t)7)
  size_t off_val = AL(sizeof(ens_run));
  size_t off_batch = off_val + AL(nt * sizeof(cinfer_tensor));
  size_t off_have = off_batch + AL(nt * sizeof(int64_t));
  size_t off_wait = off_have + AL(nt);
  size_t off_holds = off_wait + AL(ns * sizeof(int));
  size_t off_next = off_holds + AL(ns * sizeof(int));
  size_t off_state = off_next + AL(ns * sizeof(int));
  size_t off_child = off_state + AL(ns);
  size_t off_resp = off_child + AL(ns * sizeof(void *));
  size_t off_cancel = off_resp + AL(ns * sizeof(void *));
  size_t off_slots = off_cancel + AL(ns * sizeof(void *));
  size_t off_needed = off_slots + AL(ns * sizeof(ens_slot));
  size_t total = off_needed + AL(ns);
#undef AL
  char *p = calloc(1, total);
  cinfer_response *spare = sub ? NULL : calloc(1, sizeof *spare);
  if (!p || (!sub && !spare)) {
    free(p), free(spare);
    return NULL;
  }
  ens_run *run = (ens_run *)p;
  run->spare = spare;
  atomic_init(&run->refs, 1);
  model_ref(e->model); /* released by run_free */
  run->e = e;
  run->req = r;
  pthread_mutex_init(&run->mu, NULL);
  pthread_mutex_init(&run->emit_mu, NULL);
  run->needed = (uint8_t *)(p + off_needed);
  run->val = (cinfer_tensor *)(p + off_val);
  run->batch = (int64_t *)(p + off_batch);
  run->have = (bool *)(p + off_have);
  run->waiting = (int *)(p + off_wait);
  run->holds = (int *)(p + off_holds);
  run->next_ready = (int *)(p + off_next);
  run->state = (uint8_t *)(p + off_state);
  run->child = (cinfer_request **)(p + off_child);
  run->resp = (cinfer_response **)(p + off_resp);
  run->cancel = (cinfer_request **)(p + off_cancel);
  run->slots = (ens_slot *)(p + off_slots);
  run->ready_head = run->ready_tail = -1;
  for (size_t i = 0; i < ns; i++) {
    run->waiting[i] = e->steps[i].n_in;
    run->holds[i] = e->steps[i].holds;
    run->slots[i] = (ens_slot){run, (int)i};
  }
  return run;
}

/* With run->mu held: tensor t is resolved (with or without a value); claims the steps
 * whose last input it was. */
static void resolve_locked(ens_run *run, int t) {
  const ens_tensor *x = &run->e->tensors[t];
  for (int k = 0; k < x->n_readers; k++) {
    int s = x->readers[k];
    if (--run->waiting[s] > 0 || run->state[s] != STEP_WAITING || run->err) continue;
    run->state[s] = STEP_RUNNING;
    run->outstanding++;
    run->next_ready[s] = -1;
    if (run->ready_tail >= 0) run->next_ready[run->ready_tail] = s;
    else run->ready_head = s;
    run->ready_tail = s;
  }
}

/* With run->mu held: the first error of the run (taken). Returns how many in-flight
 * children were put in run->cancel (each with a reference) for the caller to cancel
 * after dropping the lock. */
static int fail_locked(ens_run *run, cinfer_status *err) {
  if (run->err) {
    cinfer_status_free(err);
    return 0;
  }
  run->err = err ? err : cinfer_status_oom(NULL);
  int n = 0;
  for (int i = 0; i < run->e->n_steps; i++)
    if (run->child[i]) {
      cinfer_request_ref(run->child[i]);
      run->cancel[n++] = run->child[i];
    }
  /* Claimed but not yet submitted steps are abandoned by their submitter (it sees err). */
  return n;
}

static void cancel_children(ens_run *run, int n) {
  for (int i = 0; i < n; i++) {
    cinfer_request_cancel(run->cancel[i]);
    cinfer_request_release(run->cancel[i]);
  }
}

/* With run->mu held: step s is DONE. resp (taken; NULL when the step failed or was not
 * run) carries its outputs; synth (a batching model, batch 0) makes its outputs empty
 * tensors; err (taken) is its failure. Returns the number of children to cancel. */
static int step_done_locked(ens_run *run, int s, cinfer_response *resp, cinfer_model *synth,
                            cinfer_status *err) {
  ensemble *e = run->e;
  const ens_step *st = &e->steps[s];
  run->state[s] = STEP_DONE;
  run->outstanding--;
  run->n_done++;
  /* The step no longer reads its inputs: release the responses that held them. */
  for (int k = 0; k < st->n_in; k++) {
    int p = e->tensors[st->in[k].tensor].producer;
    if (p >= 0 && --run->holds[p] == 0) {
      cinfer_response_free(run->resp[p]);
      run->resp[p] = NULL;
    }
  }
  if (err || run->err) {
    cinfer_response_free(resp);
    return err ? fail_locked(run, err) : 0;
  }
  static const char empty[1];
  for (int k = 0; k < st->n_out; k++) {
    int t = st->out[k].tensor;
    if (synth) {
      for (int i = 0; i < synth->n_outputs; i++) {
        const cfg_io *io = &synth->outputs[i];
        if (strcmp(io->name, st->out[k].io)) continue;
        cinfer_tensor v = {.name = io->name, .dtype = io->dtype, .ndim = io->ndim + 1,
                           .data = empty, .byte_size = 0};
        for (int d = 0; d < io->ndim; d++) v.shape[d + 1] = io->dims[d] < 0 ? 0 : io->dims[d];
        run->val[t] = v;
        run->have[t] = true;
        run->batch[t] = 0;
      }
    }
    for (uint32_t i = 0; resp && i < resp->n; i++)
      if (!strcmp(resp->outputs[i].name, st->out[k].io)) {
        run->val[t] = resp->outputs[i];
        run->have[t] = true;
        run->batch[t] = resp->req->model->batching ? resp->req->rows : -1;
      }
  }
  if (resp && run->holds[s] > 0) run->resp[s] = resp;
  else cinfer_response_free(resp);
  for (int k = 0; k < st->n_out; k++) resolve_locked(run, st->out[k].tensor);
  return 0;
}

static void finish(ens_run *run);

/* Finishes the run if nothing is left to do (invariant 1). */
static void maybe_finish(ens_run *run) {
  pthread_mutex_lock(&run->mu);
  bool go = !run->finished && run->outstanding == 0 && run->subs_active == 0 &&
            (run->err || run->n_done == run->e->n_steps);
  if (go) run->finished = true;
  pthread_mutex_unlock(&run->mu);
  if (go) finish(run);
}

static void child_cb(void *user, cinfer_response *resp, uint32_t flags);
static void sub_start(ens_run *parent, cinfer_response *cresp);
static void drain(ens_run *run);

static bool dims_fit(const int64_t *cfg, int ncfg, const int64_t *shape, int nshape) {
  if (ncfg != nshape) return false;
  for (int i = 0; i < ncfg; i++)
    if (cfg[i] >= 0 && cfg[i] != shape[i]) return false;
  return true;
}

/* Triton's batch / non-batch conversion (ensemble_scheduler.cc, ReshapeTensorDims): a
 * tensor that is not batched (batch -1) feeding a batching model gets a batch dim of 1
 * when its shape is the model's dims; a batched tensor of batch 1 feeding a non-batching
 * model loses its batch dim when its shape is not the model's dims. Otherwise the shape
 * stays (so [N, ...] from a non-batching step feeds a batching model as a batch of N).
 * Only the shape changes: the data is the same bytes. */
static void reshape_for(cinfer_tensor *t, const cfg_io *io, bool batching, int64_t batch) {
  const int64_t *cd = io->reshape_ndim >= 0 ? io->reshape : io->dims;
  int cn = io->reshape_ndim >= 0 ? io->reshape_ndim : io->ndim;
  if (batching == (batch >= 0)) return;
  if (batching) {
    if (t->ndim < CINFER_MAX_DIMS && dims_fit(cd, cn, t->shape, t->ndim)) {
      memmove(t->shape + 1, t->shape, sizeof(int64_t) * (size_t)t->ndim);
      t->shape[0] = 1;
      t->ndim++;
    }
  } else if (batch == 1 && t->ndim >= 1 && !dims_fit(cd, cn, t->shape, t->ndim)) {
    memmove(t->shape, t->shape + 1, sizeof(int64_t) * (size_t)(t->ndim - 1));
    t->ndim--;
  }
}

static cinfer_status *step_error(const ensemble *e, int s, const cinfer_status *st) {
  return cinfer_status_new(cinfer_status_code(st) == CINFER_OK ? CINFER_INTERNAL : cinfer_status_code(st),
                           "in ensemble '%s', step %d (model '%s'): %s", e->model->name, s,
                           e->steps[s].model, cinfer_status_message(st));
}

/* The tensor of sp's input binding k as model sm takes it (named, reshaped); false when
 * the tensor has no value. */
static bool input_view(const ens_run *run, const ens_step *sp, int k, const cinfer_model *sm,
                       cinfer_tensor *v) {
  int t = sp->in[k].tensor;
  if (!run->have[t]) return false;
  *v = run->val[t];
  v->name = sp->in[k].io;
  for (int i = 0; i < sm->n_inputs; i++)
    if (!strcmp(sm->inputs[i].name, v->name)) reshape_for(v, &sm->inputs[i], sm->batching, run->batch[t]);
  return true;
}

/* Step s was claimed (RUNNING); submits it as a child request, or finishes it at once
 * (batch 0, or an error). No lock held. */
static void submit_step(ens_run *run, int s) {
  ensemble *e = run->e;
  const ens_step *sp = &e->steps[s];
  cinfer_request *req = run->req;
  cinfer_model *sm = NULL;
  cinfer_request *child = NULL;
  cinfer_status *st = NULL;
  int ncancel = 0;
  bool parent_failed = false;
  if (run->parent) { /* a sub-run: the request it answers may have failed meanwhile */
    pthread_mutex_lock(&run->parent->mu);
    parent_failed = run->parent->err != NULL;
    pthread_mutex_unlock(&run->parent->mu);
  }
  pthread_mutex_lock(&run->mu);
  bool failed = run->err != NULL;
  if (!failed && (parent_failed || cinfer_request_is_cancelled(req)))
    ncancel = fail_locked(run, cinfer_status_new(CINFER_CANCELLED, "request cancelled"));
  failed = run->err != NULL;
  pthread_mutex_unlock(&run->mu);
  cancel_children(run, ncancel);
  if (failed) goto abandon;
  /* The tensors this step reads were resolved before it was claimed and never change
   * afterwards, so they are read here without the lock. */
  if ((st = cinfer_server_model_acquire(e->server, sp->model, sp->version, &sm))) goto abandon;
  if (sm->batching) { /* a batch of 0 (no faces in the frame): nothing to run */
    bool zero = false;
    for (int k = 0; k < sp->n_in; k++) {
      cinfer_tensor v;
      if (input_view(run, sp, k, sm, &v) && v.ndim >= 1 && v.shape[0] == 0) zero = true;
    }
    if (zero) {
      pthread_mutex_lock(&run->mu);
      ncancel = step_done_locked(run, s, NULL, sm, NULL);
      pthread_mutex_unlock(&run->mu);
      cancel_children(run, ncancel);
      cinfer_model_release(sm);
      return;
    }
  }
  st = cinfer_request_create(sm, &child);
  cinfer_model_release(sm); /* the child holds its own reference */
  sm = NULL;
  if (st) goto abandon;
  const cinfer_model *cm = child->model; /* held by the child */
  if (req->id) cinfer_request_set_id(child, req->id, strlen(req->id));
  /* Triton passes the ensemble request's priority, timeout and parameters to every step. */
  for (uint32_t i = 0; i < req->n_params && !st; i++) {
    const req_param *p = &req->params[i];
    st = p->type == PARAM_STRING ? cinfer_request_set_param_string(child, p->key, p->s, strlen(p->s))
         : p->type == PARAM_INT  ? cinfer_request_set_param_int(child, p->key, p->i)
         : p->type == PARAM_DOUBLE ? cinfer_request_set_param_double(child, p->key, p->d)
                                   : cinfer_request_set_param_bool(child, p->key, p->b);
  }
  for (int k = 0; k < sp->n_in && !st; k++) {
    cinfer_tensor v;
    if (input_view(run, sp, k, cm, &v)) st = cinfer_request_add_input(child, &v);
    /* else an optional input absent: the model decides */
  }
  for (int k = 0; k < sp->n_out && !st; k++) st = cinfer_request_add_output(child, sp->out[k].io);
  if (st) goto abandon;
  cinfer_request_set_callback(child, child_cb, &run->slots[s]);
  pthread_mutex_lock(&run->mu);
  failed = run->err != NULL;
  if (!failed) {
    run->child[s] = child; /* the run's reference */
    atomic_fetch_add(&run->refs, 1); /* the callback's */
  }
  pthread_mutex_unlock(&run->mu);
  if (failed) goto abandon;
  if ((st = cinfer_server_infer_async(e->server, child))) {
    pthread_mutex_lock(&run->mu);
    run->child[s] = NULL;
    ncancel = step_done_locked(run, s, NULL, NULL, step_error(e, s, st));
    pthread_mutex_unlock(&run->mu);
    cancel_children(run, ncancel);
    cinfer_status_free(st);
    cinfer_request_release(child);
    run_release(run); /* no callback will come */
  }
  return;
abandon:
  pthread_mutex_lock(&run->mu);
  ncancel = step_done_locked(run, s, NULL, NULL, st ? step_error(e, s, st) : NULL);
  pthread_mutex_unlock(&run->mu);
  cancel_children(run, ncancel);
  cinfer_status_free(st);
  cinfer_request_release(child);
}

/* Submits every claimed step; any thread may drain, each pop is under the lock. */
static void drain(ens_run *run) {
  for (;;) {
    pthread_mutex_lock(&run->mu);
    int s = run->ready_head;
    if (s >= 0) {
      run->ready_head = run->next_ready[s];
      if (run->ready_head < 0) run->ready_tail = -1;
    }
    pthread_mutex_unlock(&run->mu);
    if (s < 0) return;
    submit_step(run, s);
  }
}

static void *dispatcher_main(void *arg) {
  ensemble *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    while (!e->jobs && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
    if (!e->jobs) break; /* stopped: no run is left (each holds the model) */
    ens_job *j = e->jobs;
    e->jobs = j->next;
    if (!e->jobs) e->jobs_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    drain(j->run);
    maybe_finish(j->run);
    run_release(j->run);
    free(j);
    pthread_mutex_lock(&e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* A partial response of the decoupled last step s: sent on as a partial response of the
 * ensemble request, its outputs renamed to the ensemble's (views; it holds the step's
 * response). The step's FINAL response comes after every partial one (the backend sends
 * them in order), so the ensemble request is still unfinished here. */
static void forward_partial(ens_run *run, int s, cinfer_response *cresp) {
  ensemble *e = run->e;
  cinfer_model *m = e->model;
  pthread_mutex_lock(&run->mu);
  bool go = s == e->stream_step && !run->err && !run->finished;
  cinfer_request *req = run->req;
  pthread_mutex_unlock(&run->mu);
  cinfer_response *resp = go ? calloc(1, sizeof *resp) : NULL;
  cinfer_tensor *ts = resp ? calloc((size_t)m->n_outputs + 1, sizeof *ts) : NULL;
  cinfer_response **held = ts ? calloc(1, sizeof *held) : NULL;
  if (s != e->stream_step) { /* a decoupled middle step answered more than once */
    free(resp), free(ts), free(held);
    cinfer_response_free(cresp);
    pthread_mutex_lock(&run->mu);
    int n = run->err || run->finished
                ? 0
                : fail_locked(run, cinfer_status_new(CINFER_UNSUPPORTED,
                                                     "in ensemble '%s', step %d (model '%s'): the decoupled "
                                                     "step sent a partial response; in the middle of an "
                                                     "ensemble cinfer takes one answer per request from a "
                                                     "decoupled step (its FINAL response)",
                                                     m->name, s, e->steps[s].model));
    pthread_mutex_unlock(&run->mu);
    cancel_children(run, n);
    return;
  }
  if (!held) { /* not sent on (cancelled, failed, or out of memory) */
    free(resp), free(ts);
    cinfer_response_free(cresp);
    if (go) { /* a lost partial response is not skipped silently: the request fails */
      pthread_mutex_lock(&run->mu);
      int n = fail_locked(run, cinfer_status_oom("a streamed response of the ensemble"));
      pthread_mutex_unlock(&run->mu);
      cancel_children(run, n);
    }
    return;
  }
  const ens_step *sp = &e->steps[s];
  int64_t batch = cresp->req->model->batching ? cresp->req->rows : -1;
  for (int j = 0; j < m->n_outputs; j++) {
    if (!request_output_wanted(req, m->outputs[j].name)) continue;
    for (int k = 0; k < sp->n_out; k++) {
      if (sp->out[k].tensor != e->out_tensor[j]) continue;
      for (uint32_t i = 0; i < cresp->n; i++)
        if (!strcmp(cresp->outputs[i].name, sp->out[k].io)) {
          ts[resp->n] = cresp->outputs[i];
          ts[resp->n].name = m->outputs[j].name;
          reshape_for(&ts[resp->n], &m->outputs[j], m->batching, batch);
          resp->n++;
        }
    }
  }
  resp->outputs = ts;
  resp->held = held;
  held[resp->n_held++] = cresp;
  cinfer_request_ref(req);
  resp->req = req;
  request_deliver(req, resp, 0);
}

/* Sends the parent's queued sub-run responses that are next in order (partial responses
 * of its request). emit_mu makes one thread at a time deliver, so they go out in the
 * order of the fan step's responses; a thread that queued one always passes here, so the
 * last sub-run cannot finish before what it queued has gone out. */
static void emit_flush(ens_run *run) {
  pthread_mutex_lock(&run->emit_mu);
  for (;;) {
    pthread_mutex_lock(&run->mu);
    ens_emit *x = run->emit;
    if (x && x->iter == run->next_emit) {
      run->emit = x->next;
      run->next_emit++;
    } else {
      x = NULL;
    }
    bool drop = run->err != NULL;
    pthread_mutex_unlock(&run->mu);
    if (!x) break;
    if (x->resp && !drop) {
      cinfer_request_ref(run->req);
      x->resp->req = run->req;
      request_deliver(run->req, x->resp, 0);
    } else {
      cinfer_response_free(x->resp);
    }
    free(x);
  }
  pthread_mutex_unlock(&run->emit_mu);
}

/* A response (taken) of the fan step with outputs: a sub-run of the steps after it, with
 * the tensors the parent had when the fan step started (views: the parent keeps every
 * step response until its last sub-run is freed) and the fan step's outputs. */
static void sub_start(ens_run *parent, cinfer_response *cresp) {
  ensemble *e = parent->e;
  ens_run *sr = run_new(e, parent->req, true);
  int ncancel = 0;
  pthread_mutex_lock(&parent->mu);
  bool go = sr && !parent->err && !parent->finished;
  if (go) {
    size_t nt = (size_t)e->n_tensors;
    memcpy(sr->val, parent->val, nt * sizeof *sr->val);
    memcpy(sr->have, parent->have, nt * sizeof *sr->have);
    memcpy(sr->batch, parent->batch, nt * sizeof *sr->batch);
    memcpy(sr->needed, parent->needed, (size_t)e->n_steps);
    sr->parent = parent;
    atomic_fetch_add(&parent->refs, 1); /* released by run_free(sr) */
    sr->iter = parent->n_iter++;
    parent->subs_active++;
  } else if (!sr && !parent->err) { /* a lost response is not skipped silently */
    ncancel = fail_locked(parent, cinfer_status_oom("a response of the ensemble's decoupled step"));
  }
  pthread_mutex_unlock(&parent->mu);
  cancel_children(parent, ncancel);
  if (!go) {
    cinfer_response_free(cresp);
    if (sr) run_release(sr);
    return;
  }
  for (int i = 0; i < e->n_steps; i++) {
    if (i == e->fan_step) {
      sr->state[i] = STEP_RUNNING;
      sr->outstanding = 1;
    } else if (e->down[i] && sr->needed[i]) { /* waits for what the fan step starts */
      sr->waiting[i] = e->fan_wait[i];
    } else {
      sr->state[i] = STEP_DONE;
      sr->n_done++;
    }
  }
  pthread_mutex_lock(&sr->mu);
  ncancel = step_done_locked(sr, e->fan_step, cresp, NULL, NULL);
  pthread_mutex_unlock(&sr->mu);
  cancel_children(sr, ncancel);
  drain(sr);
  maybe_finish(sr);
  run_release(sr);
}

static void child_cb(void *user, cinfer_response *resp, uint32_t flags) {
  ens_slot *slot = user;
  ens_run *run = slot->run;
  int s = slot->step;
  if (!(flags & CINFER_RESPONSE_FINAL)) {
    if (s == run->e->fan_step) sub_start(run, resp); /* runs the steps after it */
    else forward_partial(run, s, resp);             /* the decoupled last step streams */
    return;
  }
  const cinfer_status *re = cinfer_response_error(resp);
  cinfer_status *err = re ? step_error(run->e, s, re) : NULL;
  /* Delivered in order under the step model's order_mu: submit from the dispatcher. */
  bool ordered = resp->req && resp->req->model->order != NULL;
  if (err) {
    cinfer_response_free(resp);
    resp = NULL;
  } else if (s == run->e->fan_step) { /* a FINAL response with outputs is one more */
    if (resp->n) sub_start(run, resp);
    else cinfer_response_free(resp);
    resp = NULL;
  }
  pthread_mutex_lock(&run->mu);
  cinfer_request *child = run->child[s];
  run->child[s] = NULL;
  int ncancel = step_done_locked(run, s, resp, NULL, err);
  pthread_mutex_unlock(&run->mu);
  cancel_children(run, ncancel);
  cinfer_request_release(child);
  if (ordered) {
    ens_job *j = malloc(sizeof *j);
    if (j) {
      ensemble *e = run->e;
      j->run = run; /* takes the callback's reference */
      j->next = NULL;
      pthread_mutex_lock(&e->mu);
      if (e->jobs_tail) e->jobs_tail->next = j;
      else e->jobs = j;
      e->jobs_tail = j;
      pthread_cond_signal(&e->cv);
      pthread_mutex_unlock(&e->mu);
      return;
    }
    /* Out of memory: fail the run rather than risk the lock (its children finish it). */
    pthread_mutex_lock(&run->mu);
    ncancel = fail_locked(run, cinfer_status_oom("scheduling the next ensemble step"));
    while (run->ready_head >= 0) { /* abandon the claimed steps */
      int c = run->ready_head;
      run->ready_head = run->next_ready[c];
      step_done_locked(run, c, NULL, NULL, NULL);
    }
    run->ready_tail = -1;
    pthread_mutex_unlock(&run->mu);
    cancel_children(run, ncancel);
  } else {
    drain(run);
  }
  maybe_finish(run);
  run_release(run);
}

static void unlist(ens_run *run) {
  ensemble *e = run->e;
  pthread_mutex_lock(&e->mu);
  if (run->listed) {
    if (run->prev) run->prev->next = run->next;
    else e->runs = run->next;
    if (run->next) run->next->prev = run->prev;
    run->listed = false;
  }
  pthread_mutex_unlock(&e->mu);
}

/* Triton's ensemble response parameters: when an output comes from a step, the response
 * carries the request's sequence_id (0 when none), sequence_start and sequence_end, or the
 * values the step's response (step, may be NULL) gave for them (a composing model may
 * override them). */
static cinfer_status *sequence_params(const cinfer_request *req, const cinfer_response *step,
                                      cinfer_response *resp) {
  cinfer_param ps[3] = {{.key = "sequence_id", .type = CINFER_PARAM_INT},
                        {.key = "sequence_start", .type = CINFER_PARAM_BOOL},
                        {.key = "sequence_end", .type = CINFER_PARAM_BOOL}};
  if (!cinfer_request_param_int(req, "sequence_id", &ps[0].i) &&
      cinfer_request_param_string(req, "sequence_id", &ps[0].s))
    ps[0].type = CINFER_PARAM_STRING;
  cinfer_request_param_bool(req, "sequence_start", &ps[1].b);
  cinfer_request_param_bool(req, "sequence_end", &ps[2].b);
  for (uint32_t i = 0; step && i < cinfer_response_param_count(step); i++) {
    const cinfer_param *q = cinfer_response_param(step, i);
    for (int k = 0; k < 3; k++)
      if (!strcmp(q->key, ps[k].key) && (k == 0 ? q->type == CINFER_PARAM_INT || q->type == CINFER_PARAM_STRING
                                                : q->type == CINFER_PARAM_BOOL)) {
        const char *key = ps[k].key; /* ours: q's lives in the step response */
        ps[k] = *q;
        ps[k].key = key;
      }
  }
  return response_set_params(resp, ps, 3);
}

/* The response of a finished run without error: the wanted outputs it has, viewing the
 * step responses that hold them (moved into resp->held), and the sequence parameters.
 * An output the run does not have is left out: a streamed or fanned-out ensemble's FINAL
 * response carries none, and Triton leaves out an output its step did not return. */
static cinfer_status *build_response(ens_run *run, cinfer_response **out) {
  ensemble *e = run->e;
  cinfer_model *m = e->model;
  const cinfer_request *req = run->req;
  bool from_step = false;                 /* an output comes from a step */
  const cinfer_response *seq_from = NULL; /* that step's response (NULL: a batch of 0) */
  bool streamed = !run->parent && (e->stream_step >= 0 || e->fan_step >= 0);
  uint32_t nw = 0;
  for (int j = 0; j < m->n_outputs; j++)
    if (request_output_wanted(req, m->outputs[j].name)) nw++;
  cinfer_response *resp = calloc(1, sizeof *resp);
  cinfer_tensor *ts = calloc(nw + 1, sizeof *ts);
  cinfer_response **held = calloc(nw + 1, sizeof *held);
  *out = NULL;
  if (!resp || !ts || !held) {
    free(resp), free(ts), free(held);
    return cinfer_status_oom("the ensemble response");
  }
  resp->outputs = ts;
  resp->held = held;
  for (int j = 0; j < m->n_outputs; j++) {
    if (!request_output_wanted(req, m->outputs[j].name)) continue;
    int t = e->out_tensor[j], p = e->tensors[t].producer;
    if (!run->have[t] && streamed) continue; /* the FINAL response of a stream may be empty */
    if (!run->have[t]) { /* Triton leaves an output its step did not return out */
      LOG_V(1, "ensemble '%s': Composing models did not output tensor %s (step %d, model '%s')",
            m->name, m->outputs[j].name, p, e->steps[p].model);
      continue;
    }
    if (p >= 0 && !from_step) from_step = true, seq_from = run->resp[p];
    ts[resp->n] = run->val[t];
    ts[resp->n].name = m->outputs[j].name; /* the config outlives the response */
    reshape_for(&ts[resp->n], &m->outputs[j], m->batching, run->batch[t]);
    resp->n++;
    if (run->resp[p]) { /* the response now owns the step's response */
      held[resp->n_held++] = run->resp[p];
      run->resp[p] = NULL;
    }
  }
  cinfer_status *err = from_step ? sequence_params(req, seq_from, resp) : NULL;
  if (err) {
    cinfer_response_free(resp); /* frees the held step responses, no request yet */
    return err;
  }
  *out = resp;
  return NULL;
}

/* A sub-run finished: its response goes in the parent's queue at its index (nothing when
 * it has no output), its error fails the parent (the ensemble request). */
static void sub_finish(ens_run *run) {
  ens_run *parent = run->parent;
  cinfer_status *err = run->err;
  run->err = NULL;
  cinfer_response *resp = NULL;
  if (!err) err = build_response(run, &resp);
  if (resp && resp->n == 0) {
    cinfer_response_free(resp);
    resp = NULL;
  }
  ens_emit *x = err ? NULL : malloc(sizeof *x);
  if (!err && !x) err = cinfer_status_oom("a response of the ensemble");
  int ncancel = 0;
  pthread_mutex_lock(&parent->mu);
  if (err) {
    cinfer_response_free(resp);
    resp = NULL;
    ncancel = fail_locked(parent, err);
  }
  if (x) { /* sorted by iter */
    x->iter = run->iter;
    x->resp = resp;
    ens_emit **pp = &parent->emit;
    while (*pp && (*pp)->iter < x->iter) pp = &(*pp)->next;
    x->next = *pp;
    *pp = x;
  } /* else the request failed: no partial response goes out any more */
  pthread_mutex_unlock(&parent->mu);
  cancel_children(parent, ncancel);
  emit_flush(parent);
  pthread_mutex_lock(&parent->mu);
  parent->subs_active--;
  pthread_mutex_unlock(&parent->mu);
  maybe_finish(parent);
}

/* The FINAL response of the ensemble request: its wanted outputs, or the run's error. */
static void finish(ens_run *run) {
  if (run->parent) {
    sub_finish(run);
    return;
  }
  ensemble *e = run->e;
  cinfer_model *m = e->model;
  unlist(run);
  cinfer_status *err = run->err;
  run->err = NULL;
  cinfer_response *resp = NULL;
  if (!err) err = build_response(run, &resp);
  cinfer_request *req = run->req;
  run->req = NULL;
  /* After every partial response of the sub-runs (emit_mu: none is being delivered). */
  pthread_mutex_lock(&run->emit_mu);
  if (err) { /* the spare response: an error is answered even when memory runs out */
    model_record_final(m, req, err);
    cinfer_response *er = run->spare;
    run->spare = NULL;
    cinfer_request_ref(req);
    er->req = req;
    er->error = err;
    request_deliver(req, er, CINFER_RESPONSE_FINAL);
    pthread_mutex_unlock(&run->emit_mu);
    return;
  }
  pthread_mutex_lock(&m->stats_mu);
  m->stats.execution_count++;
  m->stats.inference_count += (uint64_t)req->rows;
  m->stats.last_inference_ms = clock_unix_ms();
  pthread_mutex_unlock(&m->stats_mu);
  metric_inc(m->m.execution_count, 1);
  metric_inc(m->m.inference_count, (double)req->rows);
  model_record_final(m, req, NULL);
  cinfer_request_ref(req);
  resp->req = req;
  request_deliver(req, resp, CINFER_RESPONSE_FINAL);
  pthread_mutex_unlock(&run->emit_mu);
}

/* With run->mu held, before anything runs: only the steps needed for the requested
 * outputs run (Triton: asking for OUTPUT0 alone does not run the step that makes only
 * OUTPUT1). One pass in reverse topological order: a step is needed when one of its
 * tensors is a wanted ensemble output or is read by a needed step. The others are DONE
 * from the start and release their hold on the responses they would have read. */
static void prune_locked(ens_run *run) {
  ensemble *e = run->e;
  cinfer_model *m = e->model;
  for (int i = e->n_steps - 1; i >= 0; i--) {
    int s = e->topo[i];
    const ens_step *sp = &e->steps[s];
    bool needed = false;
    for (int k = 0; k < sp->n_out && !needed; k++) {
      const ens_tensor *x = &e->tensors[sp->out[k].tensor];
      if (x->output >= 0 && request_output_wanted(run->req, m->outputs[x->output].name)) needed = true;
      for (int j = 0; j < x->n_readers && !needed; j++)
        if (run->state[x->readers[j]] != STEP_DONE) needed = true;
    }
    if (needed) continue;
    run->state[s] = STEP_DONE;
    run->n_done++;
    for (int k = 0; k < sp->n_in; k++) {
      int p = e->tensors[sp->in[k].tensor].producer;
      if (p >= 0) run->holds[p]--;
    }
  }
}

cinfer_status *ensemble_submit(cinfer_model *m, cinfer_request *r) {
  ensemble *e = m->backend_model;
  ens_run *run = run_new(e, r, false);
  if (!run) return cinfer_status_oom("an ensemble request");
  pthread_mutex_lock(&e->mu);
  run->next = e->runs;
  if (e->runs) e->runs->prev = run;
  e->runs = run;
  run->listed = true;
  pthread_mutex_unlock(&e->mu);
  pthread_mutex_lock(&run->mu);
  prune_locked(run);
  /* The steps after the fan step run in its sub-runs, never in this run: DONE here, with
   * their holds kept (the sub-runs view the responses they read until the run is freed). */
  for (int i = 0; e->fan_step >= 0 && i < e->n_steps; i++)
    if (e->down[i] && run->state[i] == STEP_WAITING) {
      run->needed[i] = 1;
      run->state[i] = STEP_DONE;
      run->n_done++;
    }
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    int t = r->inputs[i].cfg_index; /* ensemble inputs are tensors 0..n_inputs-1 */
    run->val[t] = r->inputs[i].t;
    run->have[t] = true;
    run->batch[t] = m->batching ? r->rows : -1;
  }
  for (int t = 0; t < m->n_inputs; t++) resolve_locked(run, t);
  pthread_mutex_unlock(&run->mu);
  drain(run);
  maybe_finish(run);
  run_release(run);
  return NULL;
}

/* Marks the run of r cancelled and cancels its in-flight children (a queued child is
 * dropped by its scheduler, a running one sees cinfer_request_is_cancelled). */
static void ensemble_cancel(void *plan, cinfer_request *r) {
  ensemble *e = plan;
  ens_run *run = NULL;
  pthread_mutex_lock(&e->mu);
  for (ens_run *x = e->runs; x && !run; x = x->next)
    if (x->req == r) run = x;
  if (run) atomic_fetch_add(&run->refs, 1);
  pthread_mutex_unlock(&e->mu);
  if (!run) return;
  pthread_mutex_lock(&run->mu);
  int n = run->finished ? 0 : fail_locked(run, cinfer_status_new(CINFER_CANCELLED, "request cancelled"));
  pthread_mutex_unlock(&run->mu);
  cancel_children(run, n);
  maybe_finish(run);
  run_release(run);
}
