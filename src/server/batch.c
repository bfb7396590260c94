/* batch.c: running one batch of a model: batch assembly, the backend's execute, the
 * batch outputs of backend.h (cinfer_batch_output) and the responses that view them, and
 * failing a request with its statistics; and the workers' wait for work. Called by the two
 * schedulers, model.c's dynamic batcher and sequence.c's sequence batcher.
 *
 * Batch assembly copies each input once into a 64-byte-aligned buffer (a single-request
 * batch passes the request's own tensors through, no copy); outputs are allocated once per
 * batch and every response views its rows of them (no copy).
 *
 * May call: request.c, stats.c, handle.c, sequence_state.c, trace.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bigbuf.h"
#include "core/log.h"
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

void model_fail_request_reason(cinfer_model *m, cinfer_request *r, cinfer_status *st,
                                metric *reason) {
  stats_record_failure(m, r, cinfer_status_code(st), reason);
  request_complete_error(r, st);
}

void model_fail_request(cinfer_model *m, cinfer_request *r, cinfer_status *st) {
  stats_record_failure(m, r, cinfer_status_code(st), NULL);
  request_complete_error(r, st);
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
      model_fail_request(m, r, cinfer_status_oom(NULL));
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
    stats_add(&m->stats.success, 1, t_end - r->t_arrival);
    stats_phases_locked(m, r, t0, t1, t2, t_end);
    pthread_mutex_unlock(&m->stats_mu);
    metric_inc(m->m.success, 1);
    metric_observe(m->m.request_dur, (double)(t_end - r->t_arrival) * 1e-9);
    request_deliver(r, resp, CINFER_RESPONSE_FINAL);
    row0 += rows;
  }
}

void model_wait_locked(cinfer_model *m, uint64_t wake, uint64_t now) {
  if (wake == UINT64_MAX) {
    pthread_cond_wait(&m->cv, &m->mu);
  } else if (wake > now) {
    struct timespec ts; /* the condvar uses CLOCK_MONOTONIC (model_create) */
    ts.tv_sec = (time_t)(wake / 1000000000ull);
    ts.tv_nsec = (long)(wake % 1000000000ull);
    pthread_cond_timedwait(&m->cv, &m->mu, &ts);
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
  for (uint32_t k = 0; decoupled && !st && k < n; k++) stats_phases_locked(m, reqs[k], t0, t1, t2, t2);
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
      model_fail_request(m, reqs[k], e);
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
