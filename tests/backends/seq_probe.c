/* seq_probe.c: a test backend for the sequence batcher, loaded as a shared object
 * (`cinfer serve --backend-directory`), in the role of Triton's dyna_sequence test backend.
 * It reads the batch the sequence batcher built (INT32 INPUT; INT32 START, END, READY;
 * CORRID as UINT64 or STRING, a string being parsed as a decimal integer) and an implicit
 * state STATE_IN (INT32), and answers per row:
 *   acc       = (START ? 0 : STATE_IN) + INPUT
 *   OUTPUT    = acc + (END ? CORRID : 0)
 *   STATE_OUT = acc
 * which is what Triton's simple_http_sequence_sync_infer_client.py -d expects from its
 * simple_string_dyna_sequence model. Any missing or mistyped tensor is an error naming it,
 * so a test sees exactly what the batcher handed over. Uses only include/cinfer/backend.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/backend.h"

static cinfer_status *probe_load(const cinfer_model_load_info *info, void **model) {
  (void)info;
  *model = (void *)1;
  return NULL;
}
static void probe_unload(void *model) { (void)model; }
static cinfer_status *probe_instance_create(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  *inst = model;
  return NULL;
}
static void probe_instance_destroy(void *inst) { (void)inst; }

static const cinfer_tensor *find(const cinfer_batch *b, const char *name) {
  for (uint32_t i = 0; i < b->n_inputs; i++)
    if (!strcmp(b->inputs[i].name, name)) return &b->inputs[i];
  return NULL;
}

static cinfer_status *need_i32(const cinfer_batch *b, const char *name, const int32_t **out) {
  const cinfer_tensor *t = find(b, name);
  if (!t || t->dtype != CINFER_TYPE_INT32 || t->byte_size != (size_t)b->batch_size * 4)
    return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: input '%s' missing or not INT32 [%lld, 1]",
                             name, (long long)b->batch_size);
  *out = t->data;
  return NULL;
}

/* CORRID of each row as an integer. */
static cinfer_status *corrids(const cinfer_batch *b, int64_t *ids) {
  const cinfer_tensor *t = find(b, "CORRID");
  if (!t) return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: input 'CORRID' missing");
  if (t->dtype == CINFER_TYPE_UINT64 && t->byte_size == (size_t)b->batch_size * 8) {
    memcpy(ids, t->data, t->byte_size);
    return NULL;
  }
  if (t->dtype != CINFER_TYPE_BYTES) return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: CORRID type");
  const unsigned char *p = t->data;
  size_t off = 0;
  for (int64_t r = 0; r < b->batch_size; r++) {
    if (off + 4 > t->byte_size) return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: CORRID too short");
    uint32_t l = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                 (uint32_t)p[off + 3] << 24;
    off += 4;
    if (l > t->byte_size - off || l > 30) return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: CORRID length");
    char buf[32];
    memcpy(buf, p + off, l);
    buf[l] = 0;
    off += l;
    char *end;
    ids[r] = strtoll(buf, &end, 10);
    if (!l || *end) return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: CORRID '%s' is not a number", buf);
  }
  if (off != t->byte_size) return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: CORRID has extra bytes");
  return NULL;
}

static cinfer_status *probe_execute(void *inst, cinfer_batch *b) {
  (void)inst;
  const int32_t *in, *start, *end, *ready, *state;
  cinfer_status *st;
  if ((st = need_i32(b, "INPUT", &in)) || (st = need_i32(b, "START", &start)) ||
      (st = need_i32(b, "END", &end)) || (st = need_i32(b, "READY", &ready)) ||
      (st = need_i32(b, "STATE_IN", &state)))
    return st;
  int64_t n = b->batch_size;
  int64_t *ids = calloc((size_t)n + 1, sizeof *ids);
  if (!ids) return cinfer_status_new(CINFER_INTERNAL, "seq_probe: out of memory");
  if ((st = corrids(b, ids))) {
    free(ids);
    return st;
  }
  int64_t shape[2] = {n, 1};
  int32_t *out, *sout;
  if ((st = cinfer_batch_output(b, "OUTPUT", CINFER_TYPE_INT32, 2, shape, (size_t)n * 4, (void **)&out)) ||
      (st = cinfer_batch_output(b, "STATE_OUT", CINFER_TYPE_INT32, 2, shape, (size_t)n * 4, (void **)&sout))) {
    free(ids);
    return st;
  }
  for (int64_t r = 0; r < n; r++) {
    if (ready[r] != 1) {
      free(ids);
      return cinfer_status_new(CINFER_INVALID_ARG, "seq_probe: row %lld is not READY", (long long)r);
    }
    int32_t acc = (start[r] ? 0 : state[r]) + in[r];
    sout[r] = acc;
    out[r] = acc + (end[r] ? (int32_t)ids[r] : 0);
  }
  free(ids);
  return NULL;
}

static const cinfer_backend_iface probe = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "seq_probe",
    .model_load = probe_load,
    .model_unload = probe_unload,
    .instance_create = probe_instance_create,
    .instance_destroy = probe_instance_destroy,
    .execute = probe_execute,
};

CINFER_BACKEND_EXPORT const cinfer_backend_iface *cinfer_backend_entry(uint32_t core_abi_major,
                                                                       uint32_t core_abi_minor) {
  (void)core_abi_major;
  (void)core_abi_minor;
  return &probe;
}
