/* internal.h: the server core's private structures (requests, responses, loaded models,
 * schedulers). Only the files of src/server include this.
 *
 * Reference counting:
 *   - cinfer_model: one reference held by the server's model table while the version is
 *     listed, one by every request created for it. When the count reaches zero the model
 *     is handed to the reaper thread, which stops its workers and unloads the backend
 *     (never on a worker thread, which could not join itself).
 *   - cinfer_request: the creator's reference, plus one while the server is working on it
 *     (from infer_async until the FINAL response has been delivered).
 *   - batch_block: the batch's output buffers; one reference per response that views it.
 */
#ifndef CINFER_SERVER_INTERNAL_H
#define CINFER_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "cinfer/cinfer.h"
#include "core/clock.h"
#include "core/hash.h"
#include "metrics/metrics.h"
#include "sched/batcher.h"
#include "server/cfgview.h"

typedef struct req_param {
  char *key;
  enum { PARAM_STRING, PARAM_INT, PARAM_DOUBLE, PARAM_BOOL } type;
  char *s;
  int64_t i;
  double d;
  bool b;
} req_param;

typedef struct req_input {
  cinfer_tensor t;    /* t.name == name below */
  char *name;
  void *owned;        /* freed with the request */
  int cfg_index;      /* index in the model config's inputs */
} req_input;

struct cinfer_request {
  _Atomic int refs;
  cinfer_model *model;
  char *id;
  req_input *inputs;
  uint32_t n_inputs, cap_inputs;
  char **outputs;     /* requested output names; none = all */
  uint32_t n_outputs;
  req_param *params;
  uint32_t n_params, cap_params;
  uint32_t priority;  /* 0 = the model's default level */
  uint64_t timeout_us;
  cinfer_response_fn cb;
  void *cb_user;
  _Atomic bool cancelled;
  _Atomic bool final_sent;
  _Atomic bool submitted;
  _Atomic bool respond_oom; /* a partial response was lost: the FINAL one becomes an error */
  bool has_seq;       /* preserve_ordering: the response waits for earlier ones */
  bool inflight_counted; /* counted in model->inflight (max_inflight) until FINAL */
  uint64_t seq;
  /* scheduling */
  int64_t rows;       /* dim 0 when the model batches, else 1 */
  uint64_t shape_key; /* hash of non-batch dims; equal keys may share a batch */
  uint64_t t_arrival, t_exec_start;
  void **seq_state;   /* sequence models: the state slot of its sequence while it runs */
  cinfer_request *next;
  /* tracing (trace.c): NULL unless sampled; the frontend's receive times, 0 = unknown */
  struct cinfer_trace *trace;
  uint64_t recv_start_ns, recv_end_ns;
};

typedef struct batch_block {
  _Atomic int refs;
  uint32_t n;
  struct { char *name; void *data; size_t cap; cinfer_tensor t; } out[]; /* data: bigbuf, cap */
} batch_block;

struct cinfer_response {
  cinfer_request *req;      /* one reference held */
  cinfer_status *error;
  uint32_t n;
  cinfer_tensor *outputs;
  batch_block *block;       /* batch style: outputs view it */
  void *owned;              /* decoupled style: copies of the outputs */
  struct cinfer_response **held; /* ensemble: the step responses its outputs view (owned) */
  uint32_t n_held;
  cinfer_param *params;     /* response parameters: keys and strings owned */
  uint32_t n_params;
};

typedef struct model_instance {
  cinfer_model *model;
  int index;
  void *state;              /* the backend's instance */
  pthread_t thread;
  bool started;
  uint64_t busy_ns;
  metric *m_busy;
} model_instance;

typedef struct model_metrics {
  metric *success, *fail_backend, *fail_rejected, *fail_timeout, *fail_cancelled;
  metric *inference_count, *execution_count;
  metric *request_dur, *queue_dur, *compute_dur, *batch_size, *pending;
} model_metrics;

/* A model the core runs itself instead of through a backend's instances (an ensemble,
 * ensemble.c): whoever creates it (lifecycle.c) passes its kind to model_create, so that
 * model.c never calls up into ensemble.c. */
typedef struct model_kind {
  const cinfer_backend_iface *iface; /* m->backend: model_unload, cancel (never execute) */
  /* In place of iface->model_load: builds m's state (m->backend_model). */
  cinfer_status *(*load)(cinfer_server *s, cinfer_model *m, void **state);
  /* In place of the queue: takes a validated request (model_enqueue). */
  cinfer_status *(*submit)(cinfer_model *m, cinfer_request *r);
} model_kind;

struct cinfer_model {
  _Atomic int refs;
  cinfer_server *server;
  char *name;
  int64_t version;
  char *model_dir, *version_dir;
  cinfer_model_config *config;  /* owned */
  const cinfer_backend_iface *backend;
  void *backend_model;
  const model_kind *kind;       /* NULL: a backend's model, run by instances */
  bool batching;                /* max_batch_size > 0 */
  int64_t max_batch;
  cfg_dynamic_batching db;
  int n_inputs, n_outputs;
  cfg_io *inputs, *outputs;
  struct seqmodel *seq;         /* sequence_batching (sequence.c), or NULL */
  int n_extra_inputs;           /* control + state inputs the sequence batcher adds */

  /* scheduler */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  batcher *batcher;
  batcher_item *scratch;        /* batch buffer for batcher_next, cap = max(1, max_batch) */
  size_t scratch_cap;
  sched_order *order;           /* preserve_ordering, or NULL */
  pthread_mutex_t order_mu;
  struct held_resp { uint64_t seq; cinfer_request *r; cinfer_response *resp; } *held;
  size_t n_held, cap_held;
  metric *m_rejected_full, *m_rejected_timeout, *m_rejected_inflight;
  _Atomic int inflight;         /* admitted requests before FINAL (counted when max_inflight > 0) */
  int max_inflight;             /* parameter max_inflight, 0 = no limit */
  bool stopping;
  int n_instances;
  model_instance *instances;

  /* statistics (under stats_mu) */
  pthread_mutex_t stats_mu;
  cinfer_model_stats stats;
  model_metrics m;

  cinfer_model *reap_next;
};

/* The request's FINAL went out: it leaves its model's in-flight count (max_inflight). */
static inline void request_inflight_done(cinfer_request *r) {
  if (r->inflight_counted) atomic_fetch_sub(&r->model->inflight, 1);
  r->inflight_counted = false;
}

/* handle.c */
void model_ref(cinfer_model *m);

/* stats.c: a model's statistics and metric series */
void stats_add(cinfer_duration_stat *s, uint64_t n, uint64_t ns);
/* A failed request: counted with its time in the queue and the reason's metric (NULL: the
 * one of code). */
void stats_record_failure(cinfer_model *m, cinfer_request *r, cinfer_code code, metric *reason);
/* Decoupled backends: counts r's FINAL response (err NULL: a success) in the statistics. */
void model_record_final(cinfer_model *m, cinfer_request *r, const cinfer_status *err);
/* With stats_mu held: r's queue and compute phases (t0..t2: the batch's input assembly
 * and execution; t_out: end of its output phase). */
void stats_phases_locked(cinfer_model *m, const cinfer_request *r, uint64_t t0, uint64_t t1,
                        uint64_t t2, uint64_t t_out);
/* The model's series; false when one could not be allocated (the caller removes the
 * others with model_metrics_fini and fails the load). */
bool model_metrics_init(cinfer_model *m);
void model_metrics_fini(cinfer_model *m);
void model_busy_update(cinfer_model *m, uint64_t window_ns);

/* request.c */
void request_complete_error(cinfer_request *r, cinfer_status *st); /* takes st */
/* Copies params[0..n) into resp (replacing any it had). INVALID_ARG for an empty or
 * repeated key or a string without a value; OOM; resp unchanged on error. */
cinfer_status *response_set_params(cinfer_response *resp, const cinfer_param *params, uint32_t n);
void request_deliver(cinfer_request *r, cinfer_response *resp, uint32_t flags);
/* Hands a FINAL response to the callback, releasing the server's reference. */
void request_deliver_now(cinfer_request *r, cinfer_response *resp, uint32_t flags);
/* preserve_ordering: queues a FINAL response until every earlier one is out. */
void model_order_release(cinfer_model *m, cinfer_request *r, cinfer_response *resp);
bool request_output_wanted(const cinfer_request *r, const char *name);

/* model.c */
/* Creates a model version from config (taken, freed on error too) with its backend's
 * instances, or, with a kind, a model the core runs itself. */
cinfer_status *model_create(cinfer_server *s, const char *name, int64_t version,
                            const char *model_dir, cinfer_model_config *config,
                            const model_kind *kind, cinfer_model **out);
cinfer_status *model_enqueue(cinfer_model *m, cinfer_request *r);
void model_destroy_now(cinfer_model *m); /* reaper: stop workers, unload */

/* batch.c */
void model_fail_request(cinfer_model *m, cinfer_request *r, cinfer_status *st); /* takes st */
/* The same, counted under `reason` (one of the model's failure metrics). */
void model_fail_request_reason(cinfer_model *m, cinfer_request *r, cinfer_status *st,
                               metric *reason);
/* A worker with m->mu held: sleeps on m->cv until signalled or until `wake` (monotonic ns;
 * UINT64_MAX: no deadline, nothing when wake <= now) passes. */
void model_wait_locked(cinfer_model *m, uint64_t wake, uint64_t now);
/* Runs reqs[0..n) as one batch on inst and delivers (or fails) each request. inputs, bufs:
 * scratch of n_inputs + n_extra_inputs + 1 entries. */
void model_run_batch(model_instance *inst, cinfer_request **reqs, uint32_t n,
                     cinfer_tensor *inputs, void **bufs);

/* sequence.c: models with sequence_batching */
typedef struct seqmodel seqmodel;
/* Parses config's sequence_batching (needs m->inputs/outputs and n_instances); sets m->seq
 * and m->n_extra_inputs. NULL (nothing set) when the model has none. */
cinfer_status *seqmodel_create(cinfer_model *m);
void seqmodel_destroy(seqmodel *sm);
cinfer_status *seqmodel_enqueue(cinfer_model *m, cinfer_request *r);
void *seq_worker_main(model_instance *inst);
/* sequence_state.c: state outputs: produced for the server, never returned to a client. */
bool model_seq_hidden_output(const cinfer_model *m, const char *name);
cinfer_status *model_seq_after_execute(cinfer_model *m, cinfer_request **reqs, uint32_t n,
                                       const batch_block *bl);

/* registry.c */
const cinfer_backend_iface *backend_find(const char *name);
/* The backend called `name`: a registered one, else <backend_dir>/<name>/libcinfer_<name>.so
 * loaded, checked and registered (backend_dir NULL: built-in backends only). The error
 * names the backend, the path searched and, for a version mismatch, both ABI versions. */
cinfer_status *backend_lookup(const char *name, const char *backend_dir,
                              const cinfer_backend_iface **out);

#endif
