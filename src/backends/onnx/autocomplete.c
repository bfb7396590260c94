/* autocomplete.c: config auto-complete for ONNX models (Triton's behaviour for its
 * ONNX Runtime backend): inputs, outputs and max_batch_size the config leaves out are read
 * from <version_dir>/model.onnx; inputs and outputs the config does list are checked
 * against the model (name, datatype, rank).
 *
 * Batching: when the config lists no inputs/outputs and says nothing about batching
 * (max_batch_size 0) and the model is batchable (dim 0 of every input and output is a
 * batch dimension the graph never mixes), max_batch_size becomes ONNX_AUTO_MAX_BATCH and
 * dims leave out dim 0. With max_batch_size > 0 in the config, dims leave out dim 0 too;
 * with max_batch_size 0 they are the full shape. Symbolic dims become -1. */
#include <stdio.h>
#include <string.h>

#include "backends/onnx/onnx.h"
#include "repo/config.h"

#define ONNX_AUTO_MAX_BATCH 8

cinfer_status *onnx_autocomplete(cinfer_model_config *c, const char *version_dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/model.onnx", version_dir) >= (int)sizeof path)
    return cinfer_status_new(CINFER_INVALID_ARG, "model path too long");
  onnx_model *m;
  cinfer_status *st = onnx_model_load_file(path, &m);
  if (st) return st;
  bool empty = c->n_inputs == 0 && c->n_outputs == 0;
  if (empty && c->max_batch_size == 0 && onnx_model_batchable(m)) c->max_batch_size = ONNX_AUTO_MAX_BATCH;
  int skip = c->max_batch_size > 0 ? 1 : 0;
  if (skip && !onnx_model_batchable(m)) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "model '%s': max_batch_size %d, but %s cannot be batched along dim 0 "
                           "(set max_batch_size: 0)", c->name, c->max_batch_size, path);
    goto out;
  }
  for (int side = 0; side < 2 && !st; side++) {
    int n = side ? onnx_model_output_count(m) : onnx_model_input_count(m);
    for (int i = 0; i < n && !st; i++) {
      const onnx_io_info *io = side ? onnx_model_output(m, i) : onnx_model_input(m, i);
      const model_config_io *have = side ? model_config_output(c, io->name) : model_config_input(c, io->name);
      int nd = io->ndim < 0 ? 0 : io->ndim - skip;
      if (io->ndim >= 0 && nd < 0) {
        st = cinfer_status_new(CINFER_INVALID_ARG, "model '%s': %s '%s' is a scalar and cannot be batched",
                               c->name, side ? "output" : "input", io->name);
        break;
      }
      if (have) { /* listed: check it against the model */
        if (have->data_type != CINFER_TYPE_INVALID && have->data_type != io->dtype)
          st = cinfer_status_new(CINFER_INVALID_ARG,
                                 "model '%s': %s '%s' has data_type %s in config.pbtxt but %s in %s",
                                 c->name, side ? "output" : "input", io->name,
                                 cinfer_dtype_config_name(have->data_type),
                                 cinfer_dtype_config_name(io->dtype), path);
        else if (io->ndim >= 0 && have->ndims >= 0 && !have->has_reshape && have->ndims != nd)
          st = cinfer_status_new(CINFER_INVALID_ARG,
                                 "model '%s': %s '%s' has %d dims in config.pbtxt but the model "
                                 "has %d (without the batch dim when max_batch_size > 0)",
                                 c->name, side ? "output" : "input", io->name, have->ndims, nd);
        continue;
      }
      if (!empty && !side) continue; /* a partial list: inputs the config omits stay omitted */
      if (!empty && side && c->n_outputs > 0) continue;
      int64_t dims[CINFER_MAX_DIMS];
      for (int d = 0; d < nd; d++) dims[d] = io->shape[d + skip] < 0 ? -1 : io->shape[d + skip];
      st = side ? model_config_add_output(c, io->name, io->dtype, nd, dims, NULL)
                : model_config_add_input(c, io->name, io->dtype, nd, dims, NULL);
    }
  }
out:
  onnx_model_destroy(m);
  return st;
}
