/* backend_config.c: the model configuration as backends see it (include/cinfer/backend.h,
 * "model configuration"): the read-only cinfer_config accessors and the auto-complete
 * setters. Both opaque handles are the core's cinfer_model_config (src/repo/config.h);
 * this file is the only place that converts between them, so no backend depends on the
 * struct's layout. The setters check their arguments here and the core runs the full
 * model_config_validate() after auto-complete (model_create).
 *
 * May call: nothing of src/server. */
#include <stdlib.h>
#include <string.h>

#include "cinfer/backend.h"
#include "repo/config.h"
#include "server/backend_config.h"

static const cinfer_model_config *cc(const cinfer_config *c) {
  return (const cinfer_model_config *)(const void *)c;
}
static cinfer_model_config *ac_cfg(cinfer_autocomplete *ac) {
  return (cinfer_model_config *)(void *)ac;
}

const cinfer_config *backend_config_of(const cinfer_model_config *c) {
  return (const cinfer_config *)(const void *)c;
}
cinfer_autocomplete *backend_autocomplete_of(cinfer_model_config *c) {
  return (cinfer_autocomplete *)(void *)c;
}

const char *cinfer_config_name(const cinfer_config *c) { return cc(c)->name; }
int64_t cinfer_config_max_batch_size(const cinfer_config *c) { return cc(c)->max_batch_size; }
const char *cinfer_config_parameter(const cinfer_config *c, const char *key) {
  return key ? model_config_parameter(cc(c), key) : NULL;
}
uint32_t cinfer_config_input_count(const cinfer_config *c) { return (uint32_t)cc(c)->n_inputs; }
uint32_t cinfer_config_output_count(const cinfer_config *c) { return (uint32_t)cc(c)->n_outputs; }

static void io_fill(const model_config_io *io, cinfer_config_io *out) {
  memset(out, 0, sizeof *out);
  out->name = io->name;
  out->dtype = io->data_type;
  out->ndim = io->ndims < 0 ? 0 : io->ndims;
  memcpy(out->dims, io->dims, sizeof out->dims);
  out->reshape_ndim = io->has_reshape ? io->reshape_ndims : -1;
  memcpy(out->reshape, io->reshape, sizeof out->reshape);
  out->optional = io->optional;
}

bool cinfer_config_input(const cinfer_config *c, uint32_t i, cinfer_config_io *out) {
  if (i >= cc(c)->n_inputs) return false;
  io_fill(&cc(c)->inputs[i], out);
  return true;
}
bool cinfer_config_output(const cinfer_config *c, uint32_t i, cinfer_config_io *out) {
  if (i >= cc(c)->n_outputs) return false;
  io_fill(&cc(c)->outputs[i], out);
  return true;
}
bool cinfer_config_input_by_name(const cinfer_config *c, const char *name, cinfer_config_io *out) {
  const model_config_io *io = name ? model_config_input(cc(c), name) : NULL;
  if (io) io_fill(io, out);
  return io != NULL;
}
bool cinfer_config_output_by_name(const cinfer_config *c, const char *name, cinfer_config_io *out) {
  const model_config_io *io = name ? model_config_output(cc(c), name) : NULL;
  if (io) io_fill(io, out);
  return io != NULL;
}

const char *cinfer_config_output_label_filename(const cinfer_config *c, const char *name) {
  const model_config_io *io = name ? model_config_output(cc(c), name) : NULL;
  return io && io->label_filename && io->label_filename[0] ? io->label_filename : NULL;
}

char *cinfer_config_json(const cinfer_config *c, uint32_t *version) {
  if (version) *version = CINFER_CONFIG_JSON_VERSION;
  return model_config_to_json(cc(c));
}

/* ---- auto-complete setters ---------------------------------------------------------------- */

const cinfer_config *cinfer_autocomplete_config(const cinfer_autocomplete *ac) {
  return (const cinfer_config *)(const void *)ac;
}

#define AC_ERR(code, ...) cinfer_status_prefix(cinfer_status_new(code, __VA_ARGS__), \
                                               "auto-complete of model '%s'", c->name)

cinfer_status *cinfer_autocomplete_set_max_batch_size(cinfer_autocomplete *ac, int64_t n) {
  cinfer_model_config *c = ac_cfg(ac);
  if (n < 0 || n > INT32_MAX)
    return AC_ERR(CINFER_INVALID_ARG, "max_batch_size %lld is not in [0, %d]", (long long)n,
                  INT32_MAX);
  c->max_batch_size = (int32_t)n;
  return NULL;
}

static cinfer_status *add_io(cinfer_autocomplete *ac, bool input, const char *name,
                             cinfer_dtype dtype, int ndim, const int64_t *dims) {
  cinfer_model_config *c = ac_cfg(ac);
  const char *side = input ? "input" : "output";
  if (!name || !name[0]) return AC_ERR(CINFER_INVALID_ARG, "an %s has an empty name", side);
  if (dtype <= CINFER_TYPE_INVALID || dtype >= CINFER_TYPE_COUNT_)
    return AC_ERR(CINFER_INVALID_ARG, "%s '%s': data_type %d is not a cinfer_dtype", side, name,
                  (int)dtype);
  if (ndim < 0 || ndim > CINFER_MAX_DIMS || (ndim > 0 && !dims))
    return AC_ERR(CINFER_INVALID_ARG, "%s '%s': %d dims (limit %d)", side, name, ndim,
                  CINFER_MAX_DIMS);
  for (int d = 0; d < ndim; d++)
    if (dims[d] < -1 || dims[d] == 0)
      return AC_ERR(CINFER_INVALID_ARG, "%s '%s': dims[%d] = %lld (each dim is >= 1 or -1)",
                    side, name, d, (long long)dims[d]);
  cinfer_status *st = input ? model_config_add_input(c, name, dtype, ndim, dims, NULL)
                            : model_config_add_output(c, name, dtype, ndim, dims, NULL);
  return st ? cinfer_status_prefix(st, "auto-complete") : NULL;
}

cinfer_status *cinfer_autocomplete_add_input(cinfer_autocomplete *ac, const char *name,
                                             cinfer_dtype dtype, int ndim, const int64_t *dims) {
  return add_io(ac, true, name, dtype, ndim, dims);
}
cinfer_status *cinfer_autocomplete_add_output(cinfer_autocomplete *ac, const char *name,
                                              cinfer_dtype dtype, int ndim, const int64_t *dims) {
  return add_io(ac, false, name, dtype, ndim, dims);
}

cinfer_status *cinfer_autocomplete_set_parameter(cinfer_autocomplete *ac, const char *key,
                                                 const char *value) {
  cinfer_model_config *c = ac_cfg(ac);
  if (!key || !key[0]) return AC_ERR(CINFER_INVALID_ARG, "a parameter has an empty key");
  if (!value) return AC_ERR(CINFER_INVALID_ARG, "parameter '%s' has no value", key);
  cinfer_status *st = model_config_set_parameter(c, key, value);
  return st ? cinfer_status_prefix(st, "auto-complete of model '%s'", c->name) : NULL;
}

cinfer_status *cinfer_autocomplete_set_dynamic_batching(cinfer_autocomplete *ac) {
  cinfer_model_config *c = ac_cfg(ac);
  if (c->sequence_batching || c->ensemble_scheduling)
    return AC_ERR(CINFER_INVALID_ARG, "dynamic_batching cannot be set: the config uses %s",
                  c->sequence_batching ? "sequence_batching" : "ensemble_scheduling");
  if (!c->has_dynamic_batching) {
    memset(&c->dynamic_batching, 0, sizeof c->dynamic_batching);
    c->has_dynamic_batching = true;
  }
  return NULL;
}

cinfer_status *cinfer_autocomplete_set_decoupled(cinfer_autocomplete *ac, bool decoupled) {
  ac_cfg(ac)->decoupled = decoupled;
  return NULL;
}
