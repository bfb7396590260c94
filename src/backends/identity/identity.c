/* identity.c: the identity backend. Output i equals input i (same datatype and shape, all
 * KServe datatypes including BYTES, FP16 and BF16). It exists for protocol tests and to
 * measure the server's own overhead. Config: inputs and outputs pair up by position; an
 * output's data_type must equal its input's.
 *
 * It uses nothing but include/cinfer/backend.h, and so is also built as a shared object
 * (CMake target cinfer_identity_so: <build>/backends/identity_so/libcinfer_identity_so.so,
 * backend name "identity_so") that `cinfer serve --backend-directory` loads: the proof
 * that the ABI carries a whole backend. With CINFER_IDENTITY_SHARED defined this file
 * exports cinfer_backend_entry() instead of the built-in iface; CINFER_IDENTITY_NAME and
 * CINFER_IDENTITY_ABI_MAJOR override the name and the ABI major it claims (the
 * version-check tests build one with a wrong major). */
#include <stdlib.h>
#include <string.h>

#include "cinfer/backend.h"

typedef struct identity_pair {
  const char *in, *out; /* borrowed from the config, which outlives the model */
} identity_pair;

typedef struct identity_model {
  uint32_t n;
  identity_pair pairs[]; /* one per output */
} identity_model;

static cinfer_status *id_load(const cinfer_model_load_info *info, void **model) {
  const cinfer_config *c = info->config;
  uint32_t ni = cinfer_config_input_count(c), no = cinfer_config_output_count(c);
  if (no > ni)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "identity model '%s': %u outputs but only %u inputs",
                             info->model_name, no, ni);
  identity_model *m = calloc(1, sizeof *m + no * sizeof m->pairs[0]);
  if (!m) return cinfer_status_oom(NULL);
  for (uint32_t i = 0; i < no; i++) {
    cinfer_config_io in, out;
    cinfer_config_input(c, i, &in);
    cinfer_config_output(c, i, &out);
    if (in.dtype != out.dtype) {
      free(m);
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "identity model '%s': output '%s' must have the datatype of input '%s'",
                               info->model_name, out.name, in.name);
    }
    m->pairs[i] = (identity_pair){in.name, out.name};
  }
  m->n = no;
  *model = m;
  return NULL;
}

static void id_unload(void *model) { free(model); }

static cinfer_status *id_instance_create(void *model, const cinfer_instance_info *info,
                                         void **instance) {
  *instance = model;
  return NULL;
}

static void id_instance_destroy(void *instance) {}

static cinfer_status *id_execute(void *instance, cinfer_batch *b) {
  identity_model *m = instance;
  for (uint32_t i = 0; i < m->n; i++) {
    const cinfer_tensor *in = NULL;
    for (uint32_t k = 0; k < b->n_inputs; k++)
      if (!strcmp(b->inputs[k].name, m->pairs[i].in)) in = &b->inputs[k];
    if (!in || !cinfer_batch_output_requested(b, m->pairs[i].out)) continue;
    void *out;
    cinfer_status *st = cinfer_batch_output(b, m->pairs[i].out, in->dtype, in->ndim, in->shape,
                                            in->byte_size, &out);
    if (st) return st;
    memcpy(out, in->data, in->byte_size);
  }
  return NULL;
}

#ifndef CINFER_IDENTITY_SHARED

const cinfer_backend_iface cinfer_identity_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "identity",
    .model_load = id_load,
    .model_unload = id_unload,
    .instance_create = id_instance_create,
    .instance_destroy = id_instance_destroy,
    .execute = id_execute,
};

#else

#ifndef CINFER_IDENTITY_NAME
#define CINFER_IDENTITY_NAME "identity_so"
#endif
#ifndef CINFER_IDENTITY_ABI_MAJOR
#define CINFER_IDENTITY_ABI_MAJOR CINFER_BACKEND_ABI_MAJOR
#endif

static const cinfer_backend_iface identity_shared = {
    .abi_major = CINFER_IDENTITY_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = CINFER_IDENTITY_NAME,
    .model_load = id_load,
    .model_unload = id_unload,
    .instance_create = id_instance_create,
    .instance_destroy = id_instance_destroy,
    .execute = id_execute,
};

/* The core checks the version it gets back; this backend needs nothing newer than what
 * it was built with, so it answers every core and lets the core decide. */
CINFER_BACKEND_EXPORT const cinfer_backend_iface *cinfer_backend_entry(uint32_t core_abi_major,
                                                                       uint32_t core_abi_minor) {
  return &identity_shared;
}

#endif
