/* model.c: one loaded model version: its backend state, its instances (one worker thread
 * each) and the scheduler that feeds them.
 *
 * Scheduling (this file): requests queue FIFO per model under m->mu. A free worker takes
 * the oldest request and, when the model batches and dynamic_batching is configured, every
 * following request with the same shape key while the rows fit max_batch_size.
 * Batch assembly copies each input once into a 64-byte-aligned buffer (a single-request
 * batch passes the request's own tensors through, no copy); outputs are allocated once per
 * batch and every response views its rows of them (no copy).
 *
 * Invariants: a request in the queue holds a reference on the model, so the model cannot
 * be destroyed while its queue is non-empty; workers exit only when m->stopping is set by
 * the reaper after the last reference is gone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bigbuf.h"
#include "core/log.h"
#include "server/backend_config.h"
#include "server/ensemble.h"
#include "server/server_int.h"
#include "server/trace_internal.h"

/* ---- batch outputs -------------------------------------------------------------------- */

typedef struct batch_core {
  batch_block *block;
  uint32_t cap;
  cinfer_model *model;
} batch_core;

cinfer_status *cinfer_batch_output(cinfer_batch *b, const char *name, cinfer_dtype dtype,
                                   int ndim, const int64_t *shape, size_t byte_size,
                                   void **data) {
  batch_core *c = b->core_;
  if (!c) return cinfer_status_new(CINFER_INTERNAL, "cinfer_batch_output on a decoupled batch");
  if (ndim < 0 || ndim > CINFER_MAX_DIMS)
    return cinfer_status_new(CINFER_INTERNAL, "output '%s': bad rank %d", name, ndim);
  if (c->model->batching && (ndim < 1 || shape[0] != b->batch_size))
    return cinfer_status_new(CINFER_INTERNAL,
                             "backend produced output '%s' whose first dim is not the batch "
                             "size %lld", name, (long long)b->batch_size);
  cinfer_tensor t = {.name = name, .dtype = dtype, .ndim = ndim, .byte_size = byte_size};
  memcpy(t.shape, shape, sizeof(int64_t) * (size_t)ndim);
  if (dtype != CINFER_TYPE_BYTES) {
    cinfer_status *st = cinfer_tensor_check(&t);
    if (st) return cinfer_status_prefix(st, "backend output");
  }
  batch_block *bl = c->block;
  if (!bl || bl->n == c->cap) {
    uint32_t ncap = c->cap ? c->cap * 2 : 4;
    batch_block *nb = realloc(bl, sizeof *nb + ncap * sizeof nb->out[0]);
    if (!nb) return cinfer_status_oom(NULL);
    if (!bl) {
      atomic_init(&nb->refs, 1);
      nb->n = 0;
    }
    c->block = bl = nb;
    c->cap = ncap;
  }
  size_t cap = 0;
  void *p = bigbuf_get(byte_size, &cap);
  if (!p) return cinfer_status_new(CINFER_INTERNAL, "out of memory for output '%s'", name);
  char *nm = strdup(name);
  if (!nm) {
    bigbuf_put(p, cap);
    return cinfer_status_oom(NULL);
  }
  uint32_t i = bl->n++;
  bl->out[i].name = nm;
  bl->out[i].data = p;
  bl->out[i].cap = cap;
  t.name = nm;
  t.data = p;
  bl->out[i].t = t;
  *data = p;
  return NULL;
}

bool cinfer_batch_output_requested(const cinfer_batch *b, const char *name) {
  if (b->n_requests && model_seq_hidden_output(b->requests[0]->model, name)) return true;
  for (uint32_t i = 0; i < b->n_requests; i++)
    if (request_output_wanted(b->requests[i], name)) return true;
  return false;
}

static void fail_request_reason(cinfer_model *m, cinfer_request *r, cinfer_status *st,
                                metric *reason) {
  record_failure(m, r, cinfer_status_code(st), reason);
  request_complete_error(r, st);
}

static void fail_request(cinfer_model *m, cinfer_request *r, cinfer_status *st) {
  record_failure(m, r, cinfer_status_code(st), NULL);
  request_complete_error(r, st);
}

void model_fail_request(cinfer_model *m, cinfer_request *r, cinfer_status *st) {
  fail_request(m, r, st);
}

/* ---- execution ------------------------------------------------------------------------ */

/* Builds responses viewing each request's rows of the batch outputs and delivers them.
 * t0..t2: the batch's input assembly and execution. Each request's statistics are added
 * under one lock just before its response goes out, so a client that has its response
 * sees it counted. */
static void deliver_batch(cinfer_model *m, cinfer_request **reqs, uint32_t n, batch_block *bl,
                          uint64_t t0, uint64_t t1, uint64_t t2) {
  int64_t row0 = 0;
  for (uint32_t k = 0; k < n; k++) {
    cinfer_request *r = reqs[k];
    int64_t rows = r->rows; /* r may be freed once its response is delivered */
    cinfer_response *resp = calloc(1, sizeof *resp);
    cinfer_tensor *ts = bl ? calloc(bl->n ? bl->n : 1, sizeof *ts) : NULL;
    if (!resp || (bl && !ts)) {
      free(resp), free(ts);
      fail_request(m, r, cinfer_status_oom(NULL));
      row0 += rows;
      continue;
    }
    uint32_t no = 0;
    for (uint32_t i = 0; bl && i < bl->n; i++) {
      const cinfer_tensor *bt = &bl->out[i].t;
      if (!request_output_wanted(r, bt->name) || model_seq_hidden_output(m, bt->name)) continue;
      cinfer_tensor t = *bt;
      if (m->batching && n > 1) {
        int64_t total = bt->shape[0];
        t.shape[0] = r->rows;
        if (bt->dtype != CINFER_TYPE_BYTES) {
          size_t row = total ? bt->byte_size / (size_t)total : 0;
          t.data = (const char *)bt->data + (size_t)row0 * row;
          t.byte_size = row * (size_t)r->rows;
        } else { /* walk the length prefixes to find this request's rows */
          int64_t per_row = cinfer_shape_elements(bt->shape + 1, bt->ndim - 1);
          const unsigned char *p = bt->data;
          size_t off = 0, start = 0;
          for (int64_t e = 0; e < (row0 + r->rows) * per_row && off + 4 <= bt->byte_size; e++) {
            if (e == row0 * per_row) start = off;
            uint32_t l = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 |
                         (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
            off += 4 + l;
          }
          if (row0 == 0 && per_row == 0) start = 0;
          t.data = p + start;
          t.byte_size = off - start;
        }
      }
      ts[no++] = t;
    }
    if (bl) atomic_fetch_add(&bl->refs, 1);
    cinfer_request_ref(r);
    resp->req = r;
    resp->outputs = ts;
    resp->n = no;
    resp->block = bl;
    uint64_t t_end = clock_now_ns();
    if (r->trace) cinfer_trace_stamp_at(r->trace, CINFER_TRACE_COMPUTE_END, t_end);
    pthread_mutex_lock(&m->stats_mu);
    stat_add(&m->stats.success, 1, t_end - r->t_arrival);
    stat_phases_locked(m, r, t0, t1, t2, t_end);
    pthread_mutex_unlock(&m->stats_mu);
    metric_inc(m->m.success, 1);
    metric_observe(m->m.request_dur, (double)(t_end - r->t_arrival) * 1e-9);
    request_deliver(r, resp, CINFER_RESPONSE_FINAL);
    row0 += rows;
  }
}

/* inputs, bufs: the worker's scratch, m->n_inputs entries each (sized from the config). */
void model_run_batch(model_instance *inst, cinfer_request **reqs, uint32_t n,
                     cinfer_tensor *inputs, void **bufs) {
  cinfer_model *m = inst->model;
  uint64_t t0 = clock_now_ns();
  int64_t rows = 0;
  for (uint32_t k = 0; k < n; k++) rows += reqs[k]->rows;

  /* Assemble inputs: one tensor per input the first request carries, config order. */
  uint32_t n_in = 0;
  cinfer_status *st = NULL;
  cinfer_request *r0 = reqs[0];
  /* config inputs, then the sequence batcher's control and state inputs */
  int n_all = m->n_inputs + m->n_extra_inputs;
  memset(bufs, 0, (size_t)n_all * sizeof *bufs);
  size_t caps_small[16], *caps = caps_small; /* bigbuf capacities of bufs */
  if (n > 1 && n_all > 16 && !(caps = calloc((size_t)n_all, sizeof *caps))) {
    caps = caps_small;
    st = cinfer_status_oom("assembling a batch");
    n_all = 0;
  }
  for (int ci = 0; ci < n_all; ci++) {
    const cinfer_tensor *tin = NULL;
    for (uint32_t i = 0; i < r0->n_inputs; i++)
      if (r0->inputs[i].cfg_index == ci) tin = &r0->inputs[i].t;
    if (!tin) continue;
    if (n == 1) {
      inputs[n_in++] = *tin;
      continue;
    }
    size_t total = 0;
    for (uint32_t k = 0; k < n; k++)
      total += cinfer_request_input_by_name(reqs[k], tin->name)->byte_size;
    char *buf = bigbuf_get(total, &caps[n_in]);
    if (!buf) {
      st = cinfer_status_oom("assembling a batch");
      break;
    }
    bufs[n_in] = buf;
    size_t off = 0;
    for (uint32_t k = 0; k < n; k++) {
      const cinfer_tensor *t = cinfer_request_input_by_name(reqs[k], tin->name);
      memcpy(buf + off, t->data, t->byte_size);
      off += t->byte_size;
    }
    inputs[n_in] = *tin;
    inputs[n_in].shape[0] = rows;
    inputs[n_in].data = buf;
    inputs[n_in].byte_size = total;
    inputs[n_in].memory_type = CINFER_MEMORY_CPU; /* the copy is ordinary host memory */
    inputs[n_in].device_id = 0;
    n_in++;
  }
  uint64_t t1 = clock_now_ns();
  batch_core core = {.model = m};
  cinfer_batch b = {.n_requests = n, .requests = reqs, .batch_size = rows,
                    .n_inputs = n_in, .inputs = inputs, .core_ = &core};
  bool decoupled = cinfer_model_is_decoupled(m);
  if (decoupled) b.core_ = NULL;
  /* A decoupled backend may send FINAL, which releases the server's reference, before
   * execute returns (from its own thread, too): hold each request until the statistics
   * below have read it. */
  for (uint32_t k = 0; decoupled && k < n; k++) cinfer_request_ref(reqs[k]);
  if (!st) st = m->backend->execute(inst->state, &b);
  if (!st && m->seq) st = model_seq_after_execute(m, reqs, n, core.block);
  uint64_t t2 = clock_now_ns();
  for (uint32_t i = 0; i < n_in; i++) bigbuf_put(bufs[i], bufs[i] ? caps[i] : 0);
  if (caps != caps_small) free(caps);
  for (uint32_t k = 0; k < n; k++) /* traced requests only; the statistics' clock reads */
    if (reqs[k]->trace) {
      cinfer_trace *tr = reqs[k]->trace;
      cinfer_trace_stamp_at(tr, CINFER_TRACE_COMPUTE_START, t0);
      cinfer_trace_stamp_at(tr, CINFER_TRACE_COMPUTE_INPUT_END, t1);
      cinfer_trace_stamp_at(tr, CINFER_TRACE_COMPUTE_OUTPUT_START, t2);
      if (decoupled) cinfer_trace_stamp_at(tr, CINFER_TRACE_COMPUTE_END, t2);
    }

  pthread_mutex_lock(&m->stats_mu);
  m->stats.execution_count++;
  m->stats.inference_count += (uint64_t)rows;
  m->stats.last_inference_ms = clock_unix_ms();
  /* A decoupled backend streams the responses itself: the compute phases end here. */
  for (uint32_t k = 0; decoupled && !st && k < n; k++) stat_phases_locked(m, reqs[k], t0, t1, t2, t2);
  pthread_mutex_unlock(&m->stats_mu);
  metric_inc(m->m.execution_count, 1);
  metric_inc(m->m.inference_count, (double)rows);
  metric_observe(m->m.batch_size, (double)rows);
  metric_observe(m->m.compute_dur, (double)(t2 - t0) * 1e-9);
  for (uint32_t k = 0; k < n; k++)
    metric_observe(m->m.queue_dur, (double)(reqs[k]->t_exec_start - reqs[k]->t_arrival) * 1e-9);

  if (decoupled && !st) { /* the backend responds */
    for (uint32_t k = 0; k < n; k++) cinfer_request_release(reqs[k]);
    return;
  }
  if (st) {
    for (uint32_t k = 0; k < n; k++) {
      cinfer_status *e = cinfer_status_new(cinfer_status_code(st) == CINFER_OK ? CINFER_INTERNAL
                                                                                : cinfer_status_code(st),
                                           "%s", cinfer_status_message(st));
      fail_request(m, reqs[k], e);
    }
    for (uint32_t k = 0; decoupled && k < n; k++) cinfer_request_release(reqs[k]);
    cinfer_status_free(st);
    if (core.block) {
      batch_block *bl = core.block;
      atomic_store(&bl->refs, 1);
      for (uint32_t i = 0; i < bl->n; i++) free(bl->out[i].name), bigbuf_put(bl->out[i].data, bl->out[i].cap);
      free(bl);
    }
    return;
  }
  deliver_batch(m, reqs, n, core.block, t0, t1, t2);
  if (core.block) { /* drop the batch's own reference */
    batch_block *bl = core.block;
    if (atomic_fetch_sub(&bl->refs, 1) == 1) {
      for (uint32_t i = 0; i < bl->n; i++) free(bl->out[i].name), bigbuf_put(bl->out[i].data, bl->out[i].cap);
      free(bl);
    }
  }
}

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
      fail_request_reason(m, r, cinfer_status_new(CINFER_UNAVAILABLE,
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
      if (wake == UINT64_MAX) {
        pthread_cond_wait(&m->cv, &m->mu);
      } else if (wake > now) {
        struct timespec ts; /* the condvar uses CLOCK_MONOTONIC (model_create) */
        ts.tv_sec = (time_t)(wake / 1000000000ull);
        ts.tv_nsec = (long)(wake % 1000000000ull);
        pthread_cond_timedwait(&m->cv, &m->mu, &ts);
      }
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
        fail_request(m, r, cinfer_status_new(CINFER_CANCELLED, "request cancelled"));
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
  metrics_fini(m);
  model_free(m);
}

cinfer_status *model_create(cinfer_server *s, const char *name, int64_t version,
                            const char *model_dir, cinfer_model_config *config,
                            cinfer_model **out) {
  *out = NULL;
  const char *bname = cfg_backend(config);
  const cinfer_backend_iface *be;
  bool ens = ensemble_config_is(config); /* run by the core (ensemble.c), not a backend */
  cinfer_status *bst = NULL;
  if (ens) be = ensemble_iface();
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
  st = ens ? ensemble_load(s, m, &m->backend_model) : be->model_load(&li, &m->backend_model);
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
  if (!metrics_init(m)) {
    metrics_fini(m);
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
    if (!have && !m->inputs[ci].optional)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "expected %d inputs but got %u inputs for model '%s': input '%s' "
                               "is missing", m->n_inputs, r->n_inputs, m->name, m->inputs[ci].name);
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
  if (model_is_ensemble(m)) return ensemble_submit(m, r);
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
  atomic_fetch_add(&s->inflight, 1);
  cinfer_request_ref(r); /* the server's reference, dropped after FINAL */
  trace_request_start(s->trace, r);
  cinfer_status *st = model_enqueue(r->model, r);
  if (st) {
    cinfer_request_release(r);
    atomic_fetch_sub(&s->inflight, 1);
  }
  return st;
}
