/* fuzz_onnx_loader.c: libFuzzer harness for the ONNX loader and graph compiler
 * (onnx_model_load_buffer: protobuf decoding, tensor validation, topological sort,
 * constant folding, fusion, batch analysis). External data is disabled (base_dir NULL).
 * When a model loads, a session runs it once on zero inputs of its declared shape when
 * that shape is fully known and small (STRING inputs: empty strings), so plan building is
 * fuzzed as well. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(data, size, NULL, &m);
  if (st) {
    cinfer_status_free(st);
    return 0;
  }
  /* Running the loaded graph (reference kernels on zero inputs) is on by default since
   * the ConvTranspose and InstanceNormalization findings were fixed (tests in
   * test_onnx_hostile); CINFER_FUZZ_ONNX_LOAD_ONLY=1 fuzzes loading and compilation only. */
  static int run = -1;
  if (run < 0) run = getenv("CINFER_FUZZ_ONNX_LOAD_ONLY") == NULL;
  if (!run) {
    onnx_model_destroy(m);
    return 0;
  }
  int n = onnx_model_input_count(m);
  cinfer_tensor in[8];
  void *bufs[8] = {0};
  bool ok = n <= 8;
  for (int i = 0; ok && i < n; i++) {
    const onnx_io_info *info = onnx_model_input(m, i);
    memset(&in[i], 0, sizeof in[i]);
    in[i].name = info->name;
    in[i].dtype = info->dtype;
    in[i].ndim = info->ndim;
    bool str = info->dtype == CINFER_TYPE_BYTES; /* STRING: every element empty (a zero length) */
    if (info->ndim < 0 || (!str && !cinfer_dtype_size(info->dtype))) { ok = false; break; }
    for (int d = 0; d < info->ndim; d++) in[i].shape[d] = info->shape[d] < 0 ? 1 : info->shape[d];
    int64_t el = cinfer_shape_elements(in[i].shape, in[i].ndim);
    if (el < 0 || el > 4096) { ok = false; break; }
    in[i].byte_size = (size_t)el * (str ? 4 : cinfer_dtype_size(info->dtype));
    bufs[i] = calloc(1, in[i].byte_size + 1);
    in[i].data = bufs[i];
  }
  onnx_session *s = NULL;
  if (ok && !onnx_session_create(m, &(onnx_options){.threads = 1, .no_fast = true}, &s)) {
    cinfer_tensor *out = calloc((size_t)onnx_model_output_count(m) + 1, sizeof *out);
    if (out) {
      st = onnx_session_run(s, in, n, out);
      cinfer_status_free(st);
      free(out);
    }
    onnx_session_destroy(s);
  }
  for (int i = 0; i < 8; i++) free(bufs[i]);
  onnx_model_destroy(m);
  return 0;
}
