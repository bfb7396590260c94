/* identity.c: the identity backend. Output i equals input i (same datatype and shape, all
 * KServe datatypes including BYTES, FP16 and BF16). It exists for protocol tests and to
 * measure the server's own overhead. Config: inputs and outputs pair up by position; an
 * output's data_type must equal its input's. */
#include <stdlib.h>
#include <string.h>

#include "cinfer/backend.h"
#include "repo/config.h"

typedef struct identity_model {
  const cinfer_model_config *cfg;
} identity_model;

static cinfer_status *id_load(const cinfer_model_load_info *info, void **model) {
  const cinfer_model_config *c = info->config;
  if (c->n_outputs > c->n_inputs)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "identity model '%s': %zu outputs but only %zu inputs", c->name,
                             c->n_outputs, c->n_inputs);
  for (size_t i = 0; i < c->n_outputs; i++)
    if (c->outputs[i].data_type != c->inputs[i].data_type)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "identity model '%s': output '%s' must have the datatype of input '%s'",
                               c->name, c->outputs[i].name, c->inputs[i].name);
  identity_model *m = calloc(1, sizeof *m);
  if (!m) return cinfer_status_oom(NULL);
  m->cfg = c;
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
  const cinfer_model_config *c = m->cfg;
  for (size_t i = 0; i < c->n_outputs; i++) {
    const char *in_name = c->inputs[i].name;
    const cinfer_tensor *in = NULL;
    for (uint32_t k = 0; k < b->n_inputs; k++)
      if (!strcmp(b->inputs[k].name, in_name)) in = &b->inputs[k];
    if (!in || !cinfer_batch_output_requested(b, c->outputs[i].name)) continue;
    void *out;
    cinfer_status *st = cinfer_batch_output(b, c->outputs[i].name, in->dtype, in->ndim,
                                            in->shape, in->byte_size, &out);
    if (st) return st;
    memcpy(out, in->data, in->byte_size);
  }
  return NULL;
}

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
