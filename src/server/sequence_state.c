/* sequence_state.c: a sequence's state values (sequence_batching's `state`): the state
 * outputs a batch produced become its sequences' state, and are never returned to a
 * client. Used by batch.c after each execution and by sequence_config.c / sequence.c.
 *
 * May call: nothing of src/server (data of sequence_int.h only). */
#include <stdlib.h>
#include <string.h>

#include "server/sequence_int.h"

void seq_vals_free(void *p) {
  seq_vals *vs = p;
  if (!vs) return;
  for (int i = 0; i < vs->n; i++) free(vs->v[i].data);
  free(vs);
}

bool model_seq_hidden_output(const cinfer_model *m, const char *name) {
  const seqmodel *sm = m->seq;
  for (int i = 0; sm && i < sm->n_states; i++)
    if (!strcmp(sm->states[i].out, name)) return true;
  return false;
}

/* After a successful execution: each request's rows of the state outputs become its
 * sequence's state. Requests are batch-size 1, so request k is row k (non-batching models
 * run one request per batch). */
cinfer_status *model_seq_after_execute(cinfer_model *m, cinfer_request **reqs, uint32_t n,
                                       const batch_block *bl) {
  seqmodel *sm = m->seq;
  if (!sm || sm->n_states == 0) return NULL;
  for (int i = 0; i < sm->n_states; i++) {
    const seq_state_def *sd = &sm->states[i];
    const cinfer_tensor *t = NULL;
    for (uint32_t j = 0; bl && j < bl->n; j++)
      if (!strcmp(bl->out[j].name, sd->out)) t = &bl->out[j].t;
    if (!t)
      return cinfer_status_new(CINFER_INTERNAL, "model '%s' did not produce the state output '%s'",
                               m->name, sd->out);
    int bd = m->batching ? 1 : 0;
    if (t->dtype != sd->dtype || t->ndim != sd->ndim + bd || (bd && t->shape[0] != (int64_t)n))
      return cinfer_status_new(CINFER_INTERNAL, "model '%s': state output '%s' is %s with rank %d; the "
                               "state is %s with %d dims (plus the batch dim)", m->name, sd->out,
                               cinfer_dtype_name(t->dtype), t->ndim, cinfer_dtype_name(sd->dtype), sd->ndim);
    for (int d = 0; d < sd->ndim; d++)
      if (sd->dims[d] >= 0 && t->shape[d + bd] != sd->dims[d])
        return cinfer_status_new(CINFER_INTERNAL, "model '%s': state output '%s' dim %d is %lld, the "
                                 "state's dims say %lld", m->name, sd->out, d,
                                 (long long)t->shape[d + bd], (long long)sd->dims[d]);
  }
  for (uint32_t k = 0; k < n; k++) {
    void **slot = reqs[k]->seq_state;
    if (!slot) continue;
    seq_vals *vs = *slot;
    if (!vs) {
      vs = calloc(1, sizeof *vs + (size_t)sm->n_states * sizeof vs->v[0]);
      if (!vs) return cinfer_status_oom("sequence state");
      vs->n = sm->n_states;
      *slot = vs;
    }
    for (int i = 0; i < sm->n_states; i++) {
      const cinfer_tensor *t = NULL;
      for (uint32_t j = 0; j < bl->n; j++)
        if (!strcmp(bl->out[j].name, sm->states[i].out)) t = &bl->out[j].t;
      int bd = m->batching ? 1 : 0;
      size_t row = bd ? t->byte_size / n : t->byte_size;
      void *data = malloc(row ? row : 1);
      if (!data) return cinfer_status_oom("sequence state");
      if (row) memcpy(data, (const char *)t->data + (bd ? row * k : 0), row);
      free(vs->v[i].data);
      vs->v[i].data = data;
      vs->v[i].bytes = row;
      vs->v[i].ndim = t->ndim - bd;
      memcpy(vs->v[i].shape, t->shape + bd, sizeof(int64_t) * (size_t)(t->ndim - bd));
    }
  }
  return NULL;
}
