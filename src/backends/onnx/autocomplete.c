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
#include "cinfer/backend.h"

#define ONNX_AUTO_MAX_BATCH 8

cinfer_status *onnx_autocomplete(cinfer_autocomplete *ac, const char *version_dir) {
  const cinfer_config *c = cinfer_autocomplete_config(ac);
  const char *name = cinfer_config_name(c);
  char path[4096];
  if (snprintf(path, sizeof path, "%s/model.onnx", version_dir) >= (int)sizeof path)
    return cinfer_status_new(CINFER_INVALID_ARG, "model path too long");
  onnx_model *m;
  cinfer_status *st = onnx_model_load_file(path, &m);
  if (st) return st;
  uint32_t n_in0 = cinfer_config_input_count(c), n_out0 = cinfer_config_output_count(c);
  bool empty = n_in0 == 0 && n_out0 == 0;
  int64_t mbs = cinfer_config_max_batch_size(c);
  if (empty && mbs == 0 && onnx_model_batchable(m)) {
    if ((st = cinfer_autocomplete_set_max_batch_size(ac, ONNX_AUTO_MAX_BATCH))) goto out;
    mbs = ONNX_AUTO_MAX_BATCH;
  }
  int skip = mbs > 0 ? 1 : 0;
  if (skip && !onnx_model_batchable(m)) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "model '%s': max_batch_size %lld, but %s cannot be batched along dim 0 "
                           "(set max_batch_size: 0)", name, (long long)mbs, path);
    goto out;
  }
  for (int side = 0; side < 2 && !st; side++) {
    int n = side ? onnx_model_output_count(m) : onnx_model_input_count(m);
    for (int i = 0; i < n && !st; i++) {
      const onnx_io_info *io = side ? onnx_model_output(m, i) : onnx_model_input(m, i);
      cinfer_config_io have;
      bool listed = side ? cinfer_config_output_by_name(c, io->name, &have)
                         : cinfer_config_input_by_name(c, io->name, &have);
      int nd = io->ndim < 0 ? 0 : io->ndim - skip;
      if (io->ndim >= 0 && nd < 0) {
        st = cinfer_status_new(CINFER_INVALID_ARG, "model '%s': %s '%s' is a scalar and cannot be batched",
                               name, side ? "output" : "input", io->name);
        break;
      }
      if (listed) { /* listed: check it against the model */
        if (have.dtype != CINFER_TYPE_INVALID && have.dtype != io->dtype)
          st = cinfer_status_new(CINFER_INVALID_ARG,
                                 "model '%s': %s '%s' has data_type %s in config.pbtxt but %s in %s",
                                 name, side ? "output" : "input", io->name,
                                 cinfer_dtype_config_name(have.dtype),
                                 cinfer_dtype_config_name(io->dtype), path);
        else if (io->ndim >= 0 && have.reshape_ndim < 0 && have.ndim != nd)
          st = cinfer_status_new(CINFER_INVALID_ARG,
                                 "model '%s': %s '%s' has %d dims in config.pbtxt but the model "
                                 "has %d (without the batch dim when max_batch_size > 0)",
                                 name, side ? "output" : "input", io->name, have.ndim, nd);
        continue;
      }
      if (!empty && !side) continue; /* a partial list: inputs the config omits stay omitted */
      if (!empty && side && n_out0 > 0) continue; /* outputs: only when the config lists none */
      int64_t dims[CINFER_MAX_DIMS];
      for (int d = 0; d < nd; d++) dims[d] = io->shape[d + skip] < 0 ? -1 : io->shape[d + skip];
      st = side ? cinfer_autocomplete_add_output(ac, io->name, io->dtype, nd, dims)
                : cinfer_autocomplete_add_input(ac, io->name, io->dtype, nd, dims);
    }
  }
out:
  onnx_model_destroy(m);
  return st;
}
