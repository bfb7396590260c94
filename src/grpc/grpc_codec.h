/* grpc_codec.h: ModelInferRequest / ModelInferResponse (protobuf-c, grpc_service.proto)
 * to and from the in-process request. No sockets: the fuzz harness and the transport
 * (grpc_server.c) share it.
 *
 * decode: message bytes -> grpc_infer: the unpacked message plus one kserve_input per
 *         input, described with the same rules as the KServe HTTP codec
 *         (kserve_input_name/_datatype/_shape/_bytes in frontend/kserve.h). Raw inputs
 *         are views into the unpacked message; typed `contents` are converted into
 *         buffers owned by the grpc_infer until apply hands them to the request.
 * encode: a response's outputs -> ModelInferResponse with raw_output_contents (what
 *         Triton sends and tritonclient reads), framed with the 5-byte gRPC prefix. */
#ifndef CINFER_GRPC_CODEC_H
#define CINFER_GRPC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "core/buf.h"
#include "frontend/kserve.h"
#include "grpc_service.pb-c.h"

typedef struct grpc_infer {
  Inference__ModelInferRequest *msg; /* owns every string and raw byte the inputs point at */
  kserve_input *inputs;
  size_t n_inputs;
  int64_t version;     /* model_version parsed; 0 = the highest ready one */
  bool empty_final;    /* parameter triton_enable_empty_final_response */
} grpc_infer;

/* Parses a model version string as Triton does ("" = 0, else a positive integer). */
cinfer_status *grpc_parse_version(const char *s, int64_t *v);

/* Decodes a ModelInferRequest message. On error returns INVALID_ARG (or UNSUPPORTED) naming
 * the problem and *out is NULL. */
cinfer_status *grpc_infer_decode(const uint8_t *buf, size_t len, const kserve_limits *lim,
                                 grpc_infer **out);
/* Fills r: id, inputs (converted buffers move to r), requested outputs, parameters. */
cinfer_status *grpc_infer_apply(grpc_infer *g, cinfer_request *r);
void grpc_infer_free(grpc_infer *g);

/* Appends one framed message: a ModelInferResponse (stream false) or a
 * ModelStreamInferResponse holding it (stream true). final_param: -1 none, else the value
 * of the triton_final_response parameter. False on allocation failure. */
bool grpc_infer_encode(cbuf *out, bool stream, const char *model, int64_t version,
                       const char *id, const cinfer_response *resp, int final_param);
/* Appends a framed ModelStreamInferResponse carrying only error_message (and the request
 * id and model, so a client can tell which request failed). */
bool grpc_stream_error_encode(cbuf *out, const char *model, const char *id, const char *msg);
/* Appends any message, framed. */
bool grpc_pack(cbuf *out, const ProtobufCMessage *m);

#endif
