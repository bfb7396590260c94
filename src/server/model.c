/* model.c: one loaded model version: its backend state, its instances (one worker thread
 * each), the dynamic-batching scheduler that feeds them, and submission
 * (cinfer_server_infer_async). A model the core runs itself (an ensemble) comes with a
 * model_kind from its creator and gets its requests through kind->submit.
 *
 * Scheduling (this file): requests queue FIFO per model under m->mu. A free worker takes
 * the oldest request and, when the model batches and dynamic_batching is configured, every
 * following request with the same shape key while the rows fit max_batch_size; batch.c
 * runs the batch. Sequence models queue in sequence.c instead.
 *
 * Admission beyond the queue: the model parameter cinfer.max_inflight bounds the requests
 * admitted and not yet finished (FINAL sent), wherever they are: queued, in a batch, or
 * inside a decoupled backend (an LLM request leaves the queue as soon as the engine takes
 * it, so max_queue_size does not bound its work). Past it, a request is refused at once
 * (UNAVAILABLE: 503, the OpenAI frontend adds Retry-After), counted in
 * cinfer_rejected_total{reason="max_inflight"}.
 *
 * Invariants: a request in the queue holds a reference on the model, so the model cannot
 * be destroyed while its queue is non-empty; workers exit only when m->stopping is set by
 * the reaper after the last reference is gone.
 *
 * May call: batch.c, sequence.c, sequence_config.c, request.c, stats.c, handle.c,
 * registry.c, cfgview.c, backend_config.c, trace.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "server/backend_config.h"
#include "server/server_int.h"
#include "server/trace_internal.h"

/* Fails requests whose REJECT timeout passed while queued. Called with m->mu held;
 * drops and retakes it around the callbacks. */
static void expire_locked(cinfer_model *m, uint64_t now) {
  batcher_item out[32];
  size_t n;
  while ((n = batcher_expire(m->batcher, now, out, 32)) > 0) {
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; i < n; i++) {
      cinfer_request *r = out[i].user;
      metric_inc(m->m_rejected_timeout, 1);
      model_fail_request_reason(m, r, cinfer_status_new(CINFER_UNAVAILABLE,
                                                  "request timed out after waiting %.3f ms in the "
                                                  "queue of model '%s'",
                                                  (double)(now - r->t_arrival) / 1e6, m->name),
                          m->m.fail_timeout);
    }
    pthread_mutex_lock(&m->mu);
    if (n < 32) break;
  }
}

static void update_pending_locked(cinfer_model *m) {
  uint64_t reqs = 0;
  batcher_pending(m->batcher, &reqs, NULL);
  metric_set(m->m.pending, (double)reqs);
}

static void *worker_main(void *arg) {
  model_instance *inst = arg;
  cinfer_model *m = inst->model;
  if (m->seq) return seq_worker_main(inst);
  size_t cap = m->scratch_cap;
  batcher_item *items = calloc(cap, sizeof *items);
  cinfer_request **batch = calloc(cap, sizeof *batch);
  cinfer_tensor *inputs = calloc((size_t)m->n_inputs + 1, sizeof *inputs);
  void **bufs = calloc((size_t)m->n_inputs + 1, sizeof *bufs);
  if (!items || !batch || !inputs || !bufs) {
    LOG_E("model '%s': instance %d cannot allocate its batch buffers", m->name, inst->index);
    free(items), free(batch), free(inputs), free(bufs);
    return NULL;
  }
  pthread_mutex_lock(&m->mu);
  for (;;) {
    uint64_t now = clock_now_ns();
    expire_locked(m, now);
    size_t n = 0;
    uint64_t wake = UINT64_MAX;
    cinfer_status *st = batcher_next(m->batcher, now, items, cap, &n, &wake);
    if (st) { /* cap is sized from the config: cannot happen */
      LOG_E("model '%s': %s", m->name, cinfer_status_message(st));
      cinfer_status_free(st);
      n = 0;
    }
    if (n == 0) {
      uint64_t reqs = 0;
      batcher_pending(m->batcher, &reqs, NULL);
      if (m->stopping && reqs == 0) break;
      model_wait_locked(m, wake, now);
      continue;
    }
    update_pending_locked(m);
    /* Another instance may be able to start the next batch right away. */
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);

    uint64_t t = clock_now_ns();
    uint32_t live = 0;
    for (size_t i = 0; i < n; i++) {
      cinfer_request *r = items[i].user;
      r->t_exec_start = t;
      if (cinfer_request_is_cancelled(r))
        model_fail_request(m, r, cinfer_status_new(CINFER_CANCELLED, "request cancelled"));
      else
        batch[live++] = r;
    }
    if (live) model_run_batch(inst, batch, live, inputs, bufs);
    uint64_t busy = clock_now_ns() - t;
    pthread_mutex_lock(&m->mu);
    inst->busy_ns += busy;
  }
  pthread_mutex_unlock(&m->mu);
  free(items);
  free(batch);
  free(inputs);
  free(bufs);
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

static void model_free(cinfer_model *m) {
  seqmodel_destroy(m->seq);
  batcher_destroy(m->batcher);
  sched_order_destroy(m->order);
  free(m->held);
  pthread_mutex_destroy(&m->order_mu);
  free(m->instances);
  free(m->inputs);
  free(m->outputs);
  free(m->name);
  free(m->model_dir);
  free(m->version_dir);
  cfg_free(m->config);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  pthread_mutex_destroy(&m->stats_mu);
  free(m);
}

void model_destroy_now(cinfer_model *m) {
  pthread_mutex_lock(&m->mu);
  m->stopping = true;
  pthread_cond_broadcast(&m->cv);
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < m->n_instances; i++)
    if (m->instances[i].started) pthread_join(m->instances[i].thread, NULL);
  for (int i = 0; i < m->n_instances; i++)
    if (m->instances[i].state) m->backend->instance_destroy(m->instances[i].state);
  if (m->backend_model) m->backend->model_unload(m->backend_model);
  LOG_I("unloaded model '%s' version %lld", m->name, (long long)m->version);
  model_metrics_fini(m);
  model_free(m);
}

/* The model parameter cinfer.max_inflight: a count in [0, 2^24], 0 or absent = no limit. */
static cinfer_status *parse_max_inflight(const cinfer_model_config *config, int *out) {
  *out = 0;
  const char *v = cinfer_config_parameter(backend_config_of(config), "cinfer.max_inflight");
  if (!v) return NULL;
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (!*v || *end || errno || n < 0 || n > (1 << 24))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "parameter 'cinfer.max_inflight' = '%s' is not an integer in [0, %d] (0 = no limit)",
                             v, 1 << 24);
  *out = (int)n;
  return NULL;
}

/* Counts r in its model's in-flight requests; UNAVAILABLE when cinfer.max_inflight are already. */
static cinfer_status *inflight_admit(cinfer_model *m, cinfer_request *r) {
  if (m->max_inflight <= 0) return NULL;
  int n = atomic_fetch_add(&m->inflight, 1);
  if (n >= m->max_inflight) {
    atomic_fetch_sub(&m->inflight, 1);
    metric_inc(m->m.fail_rejected, 1);
    metric_inc(m->m_rejected_inflight, 1);
    return cinfer_status_new(CINFER_UNAVAILABLE,
                             "inference request for model '%s' rejected: %d requests in flight "
                             "(parameter cinfer.max_inflight %d); retry later", m->name, n, m->max_inflight);
  }
  r->inflight_counted = true;
  return NULL;
}

cinfer_status *model_create(cinfer_server *s, const char *name, int64_t version,
                            const char *model_dir, cinfer_model_config *config,
                            const model_kind *kind, cinfer_model **out) {
  *out = NULL;
  const char *bname = cfg_backend(config);
  const cinfer_backend_iface *be;
  bool ens = kind != NULL; /* run by the core (ensemble.c), not a backend */
  cinfer_status *bst = NULL;
  if (ens) be = kind->iface;
  else bst = backend_lookup(bname, server_backend_directory(s), &be);
  if (bst) { /* an unsupported field may explain it better than the unknown backend */
    cinfer_status *unsup = cfg_check_supported(config, bname, false);
    if (unsup) {
      cinfer_status_free(bst);
      bst = unsup;
    }
    cfg_free(config);
    return bst;
  }
  cinfer_model *m = calloc(1, sizeof *m);
  if (!m) {
    cfg_free(config);
    return cinfer_status_oom(NULL);
  }
  atomic_init(&m->refs, 1);
  m->server = s;
  m->config = config;
  m->backend = be;
  m->kind = kind;
  m->version = version;
  pthread_mutex_init(&m->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&m->stats_mu, NULL);
  pthread_mutex_init(&m->order_mu, NULL);
  m->name = strdup(name);
  m->model_dir = strdup(model_dir);
  if (asprintf(&m->version_dir, "%s/%lld", model_dir, (long long)version) < 0) m->version_dir = NULL;
  cinfer_status *st = NULL;
  if (!m->name || !m->model_dir || !m->version_dir) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  snprintf(m->stats.name, sizeof m->stats.name, "%s", name);
  m->stats.version = version;
  if (be->autocomplete && (st = be->autocomplete(backend_autocomplete_of(config), m->version_dir)))
    goto fail;
  if ((st = cfg_validate(config))) goto fail;
  if ((st = cfg_check_supported(config, be->name, (be->flags & CINFER_BACKEND_DECOUPLED) != 0))) goto fail;
  if ((st = cfg_check_label_files(config, model_dir))) goto fail;
  if ((st = parse_max_inflight(config, &m->max_inflight))) goto fail;
  m->max_batch = cfg_max_batch_size(config);
  m->batching = m->max_batch > 0;
  cfg_get_dynamic_batching(config, &m->db);
  {
    /* Sized from the config (its lists are bounded where it is validated). */
    batcher_config bc = {.max_batch_size = m->batching && m->db.enabled ? m->max_batch : 0};
    int64_t *pref = NULL;
    batcher_level_policy *lp = NULL;
    if (m->db.enabled) {
      pref = calloc((size_t)m->db.n_preferred + 1, sizeof *pref);
      lp = calloc((size_t)m->db.n_level_policies + 1, sizeof *lp);
      if (!pref || !lp) {
        free(pref), free(lp);
        st = cinfer_status_oom("batcher configuration");
        goto fail;
      }
      for (int i = 0; i < m->db.n_preferred; i++) pref[i] = m->db.preferred[i];
      bc.preferred_batch_sizes = pref;
      bc.n_preferred_batch_sizes = (size_t)m->db.n_preferred;
      bc.max_queue_delay_us = m->db.max_queue_delay_us;
      bc.preserve_ordering = m->db.preserve_ordering;
      bc.priority_levels = m->db.priority_levels;
      bc.default_priority_level = m->db.default_priority_level;
      const cfg_queue_policy *dp = &m->db.default_policy;
      bc.default_queue_policy = (batcher_queue_policy){
          dp->reject_on_timeout ? BATCHER_TIMEOUT_REJECT : BATCHER_TIMEOUT_DELAY,
          dp->default_timeout_us, dp->allow_timeout_override, dp->max_queue_size};
      for (int i = 0; i < m->db.n_level_policies; i++) {
        uint32_t level;
        cfg_queue_policy q;
        cfg_level_policy(config, i, &level, &q);
        lp[i] = (batcher_level_policy){level,
                                       {q.reject_on_timeout ? BATCHER_TIMEOUT_REJECT : BATCHER_TIMEOUT_DELAY,
                                        q.default_timeout_us, q.allow_timeout_override, q.max_queue_size}};
      }
      bc.priority_queue_policy = lp;
      bc.n_priority_queue_policy = (size_t)m->db.n_level_policies;
    }
    st = batcher_create(&bc, &m->batcher); /* copies the lists */
    free(pref);
    free(lp);
    if (st) goto fail;
    m->scratch_cap = bc.max_batch_size > 0 ? (size_t)bc.max_batch_size : 1;
    if (m->db.enabled && m->db.preserve_ordering && (st = sched_order_create(&m->order))) goto fail;
  }
  m->n_inputs = cfg_input_count(config);
  m->n_outputs = cfg_output_count(config);
  m->inputs = calloc((size_t)m->n_inputs + 1, sizeof *m->inputs);
  m->outputs = calloc((size_t)m->n_outputs + 1, sizeof *m->outputs);
  if (!m->inputs || !m->outputs) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  for (int i = 0; i < m->n_inputs; i++) cfg_input(config, i, &m->inputs[i]);
  for (int i = 0; i < m->n_outputs; i++) cfg_output(config, i, &m->outputs[i]);

  int ng = cfg_instance_group_count(config), total = 0;
  for (int g = 0; g < ng; g++) {
    cfg_instance_group ig;
    cfg_get_instance_group(config, g, &ig);
    total += ig.count > 0 ? ig.count * (ig.n_gpus > 0 && ig.kind == CINFER_INSTANCE_KIND_GPU ? ig.n_gpus : 1) : 1;
  }
  if (total <= 0) total = 1;
  if (ens) total = 0; /* an ensemble's steps run on their own models' instances */
  if (total > 256) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "instance_group asks for %d instances (at most 256)", total);
    goto fail;
  }
  m->instances = calloc((size_t)total + 1, sizeof *m->instances);
  if (!m->instances) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  m->n_instances = total;
  if ((st = seqmodel_create(m))) goto fail;
  int budget = server_thread_budget(s);
  int per = total > 0 && budget / total > 0 ? budget / total : 1;
  /* The backend's view of the config: the accessors (for the model's lifetime) and the
   * JSON form (for the call). */
  char *config_json = cinfer_config_json(backend_config_of(config), NULL);
  if (!config_json) {
    st = cinfer_status_new(CINFER_INTERNAL, "out of memory");
    goto fail;
  }
  cinfer_model_load_info li = {.model_name = m->name, .model_dir = m->model_dir,
                               .version_dir = m->version_dir, .version = version,
                               .threads_per_instance = per,
                               .config = backend_config_of(config),
                               .config_json = config_json,
                               .config_json_version = CINFER_CONFIG_JSON_VERSION,
                               .server = s};
  st = ens ? kind->load(s, m, &m->backend_model) : be->model_load(&li, &m->backend_model);
  free(config_json);
  if (st) {
    m->backend_model = NULL; /* the backend freed what it made */
    goto fail;
  }
  int idx = 0;
  for (int g = 0; g < (ng > 0 ? ng : 1) && !ens; g++) {
    cfg_instance_group ig = {.count = 1, .kind = CINFER_INSTANCE_KIND_CPU};
    if (ng > 0) cfg_get_instance_group(config, g, &ig);
    int per_dev = ig.count > 0 ? ig.count : 1;
    int ndev = ig.kind == CINFER_INSTANCE_KIND_GPU && ig.n_gpus > 0 ? ig.n_gpus : 1;
    for (int d = 0; d < ndev; d++)
      for (int c = 0; c < per_dev; c++, idx++) {
        model_instance *in = &m->instances[idx];
        in->model = m;
        in->index = idx;
        cinfer_instance_info ii = {.index = idx, .kind = ig.kind,
                                   .device_id = ig.kind == CINFER_INSTANCE_KIND_GPU ? (ig.n_gpus > 0 ? ig.gpus[d] : 0) : -1,
                                   .threads = per};
        if ((st = be->instance_create(m->backend_model, &ii, &in->state))) {
          st = cinfer_status_prefix(st, "instance %d", idx);
          goto fail;
        }
      }
  }
  if (!model_metrics_init(m)) {
    model_metrics_fini(m);
    st = cinfer_status_oom("metrics of the model");
    goto fail;
  }
  for (int i = 0; i < m->n_instances; i++) {
    if (pthread_create(&m->instances[i].thread, NULL, worker_main, &m->instances[i])) {
      st = cinfer_status_new(CINFER_INTERNAL, "cannot start instance thread");
      model_destroy_now(m);
      return st;
    }
    m->instances[i].started = true;
  }
  *out = m;
  return NULL;
fail:
  for (int i = 0; m->instances && i < m->n_instances; i++)
    if (m->instances[i].state) be->instance_destroy(m->instances[i].state);
  if (m->backend_model) be->model_unload(m->backend_model);
  model_free(m);
  return st;
}

/* Hash of the non-batch dims and the set of inputs: requests may share a batch only when
 * equal. */
static uint64_t shape_key(const cinfer_request *r, int bd) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    const cinfer_tensor *t = &r->inputs[i].t;
    h = (h ^ (uint64_t)r->inputs[i].cfg_index) * 1099511628211ull;
    for (int d = bd; d < t->ndim; d++) h = (h ^ (uint64_t)t->shape[d]) * 1099511628211ull;
  }
  return h;
}

/* ---- coalesced wake-ups (cinfer_server_defer_wakeups_begin) ---------------------------- */

#define DEFER_MAX 8
static _Thread_local struct {
  bool on;
  int n;
  cinfer_model *models[DEFER_MAX]; /* each holds a reference until the flush */
} tl_defer;

void cinfer_server_defer_wakeups_begin(void) { tl_defer.on = true; }

void cinfer_server_defer_wakeups_flush(void) {
  tl_defer.on = false;
  for (int i = 0; i < tl_defer.n; i++) {
    cinfer_model *m = tl_defer.models[i];
    /* Without the mutex is fine: the items were queued under it, and a worker checks the
     * queue under it before it waits. */
    pthread_cond_signal(&m->cv);
    cinfer_model_release(m);
  }
  tl_defer.n = 0;
}

/* With m->mu held: true when the wake-up of m's workers is left to the flush. */
static bool defer_wakeup(cinfer_model *m) {
  if (!tl_defer.on) return false;
  for (int i = 0; i < tl_defer.n; i++)
    if (tl_defer.models[i] == m) return true;
  if (tl_defer.n == DEFER_MAX) return false;
  model_ref(m);
  tl_defer.models[tl_defer.n++] = m;
  return true;
}

cinfer_status *model_enqueue(cinfer_model *m, cinfer_request *r) {
  /* Completeness: required inputs present, one batch size across inputs. */
  for (int ci = 0; ci < m->n_inputs; ci++) {
    bool have = false;
    for (uint32_t i = 0; i < r->n_inputs; i++)
      if (r->inputs[i].cfg_index == ci) have = true;
    if (!have && !m->inputs[ci].optional) {
      int required = 0; /* Triton's two texts: exact, or a range when some are optional */
      for (int k = 0; k < m->n_inputs; k++) required += !m->inputs[k].optional;
      if (required == m->n_inputs)
        return cinfer_status_new(CINFER_INVALID_ARG,
                                 "expected %d inputs but got %u inputs for model '%s': input '%s' "
                                 "is missing", m->n_inputs, r->n_inputs, m->name, m->inputs[ci].name);
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "expected number of inputs between %d and %d but got %u inputs for "
                               "model '%s': input '%s' is missing", required, m->n_inputs,
                               r->n_inputs, m->name, m->inputs[ci].name);
    }
  }
  r->rows = 1;
  if (m->batching) {
    r->rows = r->inputs[0].t.shape[0];
    for (uint32_t i = 1; i < r->n_inputs; i++)
      if (r->inputs[i].t.shape[0] != r->rows)
        return cinfer_status_new(CINFER_INVALID_ARG,
                                 "inputs '%s' and '%s' have different batch sizes (%lld, %lld)",
                                 r->inputs[0].name, r->inputs[i].name, (long long)r->rows,
                                 (long long)r->inputs[i].t.shape[0]);
  }
  r->shape_key = shape_key(r, m->batching ? 1 : 0);
  r->t_arrival = clock_now_ns();
  if (r->trace) cinfer_trace_stamp_at(r->trace, CINFER_TRACE_QUEUE_START, r->t_arrival);
  if (m->kind) return m->kind->submit(m, r);
  if (m->seq) return seqmodel_enqueue(m, r);
  batcher_item it = {.rows = m->batching && m->db.enabled ? r->rows : 1, .shape_key = r->shape_key,
                     .priority = r->priority, .timeout_us = r->timeout_us, .user = r};
  pthread_mutex_lock(&m->mu);
  if (m->order) {
    pthread_mutex_lock(&m->order_mu);
    r->seq = it.seq = sched_order_next_seq(m->order);
    pthread_mutex_unlock(&m->order_mu);
  }
  cinfer_status *st = batcher_enqueue(m->batcher, &it, r->t_arrival, NULL);
  if (st) {
    if (m->order) { /* the seq was issued: complete it so later responses are not held */
      pthread_mutex_lock(&m->order_mu);
      uint64_t first, count;
      cinfer_status_free(sched_order_complete(m->order, r->seq, &first, &count));
      pthread_mutex_unlock(&m->order_mu);
    }
    pthread_mutex_unlock(&m->mu);
    if (cinfer_status_code(st) == CINFER_UNAVAILABLE) {
      metric_inc(m->m.fail_rejected, 1);
      metric_inc(m->m_rejected_full, 1);
      return cinfer_status_prefix(st, "inference request for model '%s' rejected", m->name);
    }
    return st;
  }
  r->has_seq = m->order != NULL;
  update_pending_locked(m);
  if (!defer_wakeup(m)) pthread_cond_signal(&m->cv);
  pthread_mutex_unlock(&m->mu);
  return NULL;
}

/* ---- submission ----------------------------------------------------------------------- */

cinfer_status *cinfer_server_infer_async(cinfer_server *s, cinfer_request *r) {
  if (atomic_load(&s->shutting_down))
    return cinfer_status_new(CINFER_UNAVAILABLE, "server is shutting down");
  if (r->model->server != s)
    return cinfer_status_new(CINFER_INVALID_ARG, "request belongs to another server");
  if (atomic_exchange(&r->submitted, true))
    return cinfer_status_new(CINFER_INVALID_ARG, "request was already submitted");
  cinfer_status *st = inflight_admit(r->model, r);
  if (st) return st;
  atomic_fetch_add(&s->inflight, 1);
  cinfer_request_ref(r); /* the server's reference, dropped after FINAL */
  trace_request_start(s->trace, r);
  st = model_enqueue(r->model, r);
  if (st) {
    request_inflight_done(r);
    cinfer_request_release(r);
    atomic_fetch_sub(&s->inflight, 1);
  }
  return st;
}
