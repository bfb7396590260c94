/* sequence.c: models with `sequence_batching` (Triton's stateful models). The policy
 * (slots, backlog, when a batch goes, idle release) is src/sched/sequence.c; this file is
 * the server's side of it:
 *   - the config is parsed in sequence_config.c (shared types: sequence_int.h);
 *   - enqueue: the request's sequence_id / sequence_start / sequence_end parameters,
 *     checked with Triton's error texts;
 *   - the workers (one per instance): take a batch from the sequence batcher, add to each
 *     request its control tensors (START, END, READY, CORRID) and its implicit state
 *     inputs, run it through model.c's batch path, then keep each request's state outputs
 *     for the next request of its sequence (model_seq_after_execute). The backend sees
 *     control and state tensors as ordinary inputs and outputs; clients never see them.
 *
 * Threads: everything that touches m->seq->sched holds m->mu. A sequence's state is only
 * touched by the worker that runs its (single) executing request, between seqsched_next
 * and seqsched_done, so it needs no lock of its own.
 *
 * May call: batch.c, request.c, sequence_state.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "server/sequence_int.h"

/* With m->mu held: the gauges after a change. */
static void gauges_locked(cinfer_model *m) {
  seqsched_stats ss;
  seqsched_get_stats(m->seq->sched, &ss);
  metric_set(m->m.pending, (double)ss.queued);
  metric_set(m->seq->m_open, (double)ss.open);
}

/* ---- enqueue -------------------------------------------------------------------------- */

static const req_param *param(const cinfer_request *r, const char *key) {
  for (uint32_t i = 0; i < r->n_params; i++)
    if (!strcmp(r->params[i].key, key)) return &r->params[i];
  return NULL;
}

static cinfer_status *flag_param(const cinfer_request *r, const char *key, bool *out) {
  *out = false;
  const req_param *p = param(r, key);
  if (!p) return NULL;
  if (p->type != PARAM_BOOL)
    return cinfer_status_new(CINFER_INVALID_ARG, "parameter '%s' must be a boolean", key);
  *out = p->b;
  return NULL;
}

static void key_text(const seq_key *k, char *buf, size_t cap) {
  if (k->is_string) snprintf(buf, cap, "%.*s", (int)(k->len > 200 ? 200 : k->len), k->str);
  else snprintf(buf, cap, "%llu", (unsigned long long)k->id);
}

cinfer_status *seqmodel_enqueue(cinfer_model *m, cinfer_request *r) {
  seqmodel *sm = m->seq;
  if (m->batching && r->rows > 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "inference request to model '%s' must specify "
                             "batch-size 1 due to requirements of sequence batcher", m->name);
  seq_req q = {.shape_key = r->shape_key, .user = r};
  const req_param *id = param(r, "sequence_id");
  if (id && id->type == PARAM_STRING) {
    q.key.is_string = true;
    q.key.str = id->s;
    q.key.len = strlen(id->s);
  } else if (id && id->type == PARAM_INT && id->i >= 0) {
    q.key.id = (uint64_t)id->i;
  } else if (id) {
    return cinfer_status_new(CINFER_INVALID_ARG, "parameter 'sequence_id' must be an unsigned integer "
                             "(below 2^53 over JSON) or a string");
  }
  if (q.key.is_string ? q.key.len == 0 : q.key.id == 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "inference request to model '%s' must specify a "
                             "non-zero or non-empty correlation ID", m->name);
  if (q.key.is_string && q.key.len > SEQSCHED_MAX_KEY)
    return cinfer_status_new(CINFER_INVALID_ARG, "parameter 'sequence_id' is longer than %u bytes",
                             SEQSCHED_MAX_KEY);
  cinfer_status *st = flag_param(r, "sequence_start", &q.start);
  if (!st) st = flag_param(r, "sequence_end", &q.end);
  if (st) return st;
  const seq_ctl *cid = &sm->ctl[CTL_CORRID];
  if (cid->on) {
    bool want_string = cid->dtype == CINFER_TYPE_BYTES;
    if (want_string != q.key.is_string)
      return cinfer_status_new(CINFER_INVALID_ARG, "sequence batching control '%s' data-type is '%s', but "
                               "model '%s' expects '%s'", cid->name, q.key.is_string ? "BYTES" : "UINT64",
                               m->name, cinfer_dtype_name(cid->dtype));
  }
  pthread_mutex_lock(&m->mu);
  seqsched_result res = seqsched_enqueue(sm->sched, &q, r->t_arrival);
  if (res == SEQSCHED_OK) {
    gauges_locked(m);
    pthread_cond_broadcast(&m->cv); /* direct: only the sequence's instance can take it */
  }
  pthread_mutex_unlock(&m->mu);
  char kt[256];
  switch (res) {
    case SEQSCHED_OK: return NULL;
    case SEQSCHED_NOT_STARTED:
      key_text(&q.key, kt, sizeof kt);
      return cinfer_status_new(CINFER_INVALID_ARG, "inference request for sequence %s to model '%s' must "
                               "specify the START flag on the first request of the sequence", kt, m->name);
    case SEQSCHED_TOO_MANY:
      metric_inc(m->m.fail_rejected, 1);
      return cinfer_status_new(CINFER_UNAVAILABLE, "model '%s' has %u open sequences (the limit): a new "
                               "sequence must wait for one to end", m->name, SEQSCHED_MAX_SEQUENCES);
    case SEQSCHED_BAD_KEY:
      return cinfer_status_new(CINFER_INVALID_ARG, "inference request to model '%s' must specify a "
                               "non-zero or non-empty correlation ID", m->name);
    case SEQSCHED_NO_MEMORY: break;
  }
  return cinfer_status_oom("sequence batcher");
}

/* ---- the batch: control and state inputs ---------------------------------------------- */

static cinfer_status *append_input(cinfer_request *r, const char *name, cinfer_dtype dt, int ndim,
                                   const int64_t *shape, void *data, size_t bytes, int cfg_index) {
  if (r->n_inputs == r->cap_inputs) {
    uint32_t nc = r->cap_inputs ? r->cap_inputs * 2 : 4;
    req_input *ni = realloc(r->inputs, nc * sizeof *ni);
    if (!ni) {
      free(data);
      return cinfer_status_oom(NULL);
    }
    r->inputs = ni;
    r->cap_inputs = nc;
  }
  req_input *in = &r->inputs[r->n_inputs];
  memset(in, 0, sizeof *in);
  if (!(in->name = strdup(name))) {
    free(data);
    return cinfer_status_oom(NULL);
  }
  in->t.name = in->name;
  in->t.dtype = dt;
  in->t.ndim = ndim;
  memcpy(in->t.shape, shape, sizeof(int64_t) * (size_t)ndim);
  in->t.data = data;
  in->t.byte_size = bytes;
  in->owned = data;
  in->cfg_index = cfg_index;
  r->n_inputs++;
  return NULL;
}

static cinfer_status *add_controls(cinfer_model *m, cinfer_request *r, const seq_req *q) {
  seqmodel *sm = m->seq;
  int ci = m->n_inputs;
  int bd = m->batching ? 1 : 0;
  int64_t shape[2] = {1, 1};
  for (int k = 0; k < CTL_N; k++) {
    const seq_ctl *c = &sm->ctl[k];
    if (!c->on) continue;
    void *data;
    size_t bytes;
    if (k == CTL_CORRID) {
      if (c->dtype == CINFER_TYPE_BYTES) {
        bytes = 4 + q->key.len;
        if (!(data = malloc(bytes))) return cinfer_status_oom(NULL);
        uint32_t l = (uint32_t)q->key.len;
        unsigned char *b = data;
        b[0] = (unsigned char)l, b[1] = (unsigned char)(l >> 8), b[2] = (unsigned char)(l >> 16),
        b[3] = (unsigned char)(l >> 24);
        memcpy(b + 4, q->key.str, q->key.len);
      } else {
        bytes = cinfer_dtype_size(c->dtype);
        if (!(data = calloc(1, 8))) return cinfer_status_oom(NULL);
        uint64_t v = q->key.id; /* narrower types take the low bits, as a C cast does */
        if (c->dtype == CINFER_TYPE_UINT64 || c->dtype == CINFER_TYPE_INT64) memcpy(data, &v, 8);
        else {
          uint32_t w = (uint32_t)v;
          memcpy(data, &w, 4);
        }
      }
    } else {
      bool on = k == CTL_START ? q->start : k == CTL_END ? q->end : true; /* READY: a real request */
      bytes = c->dtype == CINFER_TYPE_BOOL ? 1 : 4;
      if (!(data = malloc(4))) return cinfer_status_oom(NULL);
      memcpy(data, c->val[on], bytes);
    }
    cinfer_status *st = append_input(r, c->name, c->dtype, 1 + bd, shape, data, bytes, ci++);
    if (st) return st;
  }
  return NULL;
}

static cinfer_status *add_states(cinfer_model *m, cinfer_request *r, const seq_req *q) {
  seqmodel *sm = m->seq;
  int ci = m->n_inputs + sm->n_extra - sm->n_states;
  int bd = m->batching ? 1 : 0;
  seq_vals *vs = *q->state;
  for (int i = 0; i < sm->n_states; i++) {
    const seq_state_def *sd = &sm->states[i];
    const void *src = sd->init;
    size_t bytes = sd->init_bytes;
    int ndim = sd->ndim;
    const int64_t *dims = sd->dims;
    if (!q->start && vs && vs->v[i].data) { /* a START resets the state */
      src = vs->v[i].data;
      bytes = vs->v[i].bytes;
      ndim = vs->v[i].ndim;
      dims = vs->v[i].shape;
    }
    int64_t shape[CINFER_MAX_DIMS + 1];
    shape[0] = 1;
    memcpy(shape + bd, dims, sizeof(int64_t) * (size_t)ndim);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) return cinfer_status_oom(NULL);
    if (bytes) memcpy(data, src, bytes);
    cinfer_status *st = append_input(r, sd->in, sd->dtype, ndim + bd, shape, data, bytes, ci++);
    if (st) return st;
  }
  return NULL;
}

/* ---- workers -------------------------------------------------------------------------- */

void *seq_worker_main(model_instance *inst) {
  cinfer_model *m = inst->model;
  seqmodel *sm = m->seq;
  size_t cap = m->batching ? (size_t)m->max_batch : 1;
  seq_req *items = calloc(cap, sizeof *items);
  cinfer_request **batch = calloc(cap, sizeof *batch);
  size_t nin = (size_t)(m->n_inputs + m->n_extra_inputs) + 1;
  cinfer_tensor *inputs = calloc(nin, sizeof *inputs);
  void **bufs = calloc(nin, sizeof *bufs);
  if (!items || !batch || !inputs || !bufs) {
    LOG_E("model '%s': instance %d cannot allocate its batch buffers", m->name, inst->index);
    free(items), free(batch), free(inputs), free(bufs);
    return NULL;
  }
  pthread_mutex_lock(&m->mu);
  for (;;) {
    uint64_t now = clock_now_ns();
    size_t released = seqsched_expire(sm->sched, now);
    if (released) {
      LOG_V(1, "model '%s': released %zu idle sequence(s)", m->name, released);
      gauges_locked(m);
      pthread_cond_broadcast(&m->cv); /* a backlog sequence may have a slot now */
    }
    size_t n = 0;
    uint64_t wake = UINT64_MAX;
    seqsched_next(sm->sched, inst->index, now, items, cap, &n, &wake);
    if (n == 0) {
      seqsched_stats ss;
      seqsched_get_stats(sm->sched, &ss);
      if (m->stopping && ss.queued == 0) break;
      uint64_t exp = seqsched_expire_at(sm->sched);
      if (exp < wake) wake = exp;
      model_wait_locked(m, wake, now);
      continue;
    }
    gauges_locked(m);
    pthread_mutex_unlock(&m->mu);

    uint64_t t = clock_now_ns();
    uint32_t live = 0;
    for (size_t i = 0; i < n; i++) {
      cinfer_request *r = items[i].user;
      r->t_exec_start = t;
      cinfer_status *st = NULL;
      if (cinfer_request_is_cancelled(r)) st = cinfer_status_new(CINFER_CANCELLED, "request cancelled");
      if (!st) st = add_controls(m, r, &items[i]);
      if (!st) st = add_states(m, r, &items[i]);
      if (st) {
        model_fail_request(m, r, st);
        continue;
      }
      r->seq_state = items[i].state;
      batch[live++] = r;
    }
    if (live) model_run_batch(inst, batch, live, inputs, bufs);
    uint64_t t_end = clock_now_ns();
    pthread_mutex_lock(&m->mu);
    inst->busy_ns += t_end - t;
    seqsched_done(sm->sched, items, n, t_end);
    gauges_locked(m);
    pthread_cond_broadcast(&m->cv);
  }
  pthread_mutex_unlock(&m->mu);
  free(items);
  free(batch);
  free(inputs);
  free(bufs);
  return NULL;
}
