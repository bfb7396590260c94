/* tensor_pb.h: private bridge between the generated protobuf-c types and the engine. */
#ifndef CINFER_ONNX_TENSOR_PB_H
#define CINFER_ONNX_TENSOR_PB_H
#include "backends/onnx/onnx_impl.h"
#include "onnx/onnx.pb-c.h"

/* Converts and validates; base_dir (may be NULL) resolves external data. *out owned by
 * the caller. */
cinfer_status *onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir,
                                      ot **out);
/* Reads a whole regular file of at most max bytes; *buf owned by the caller (free). */
cinfer_status *onnx_read_file(const char *path, size_t max, void **buf, size_t *len);
#endif
