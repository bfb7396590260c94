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

/* An input's shared_memory_* parameters (region NULL: the bytes are in the message). */
typedef struct grpc_shm_param {
  const char *region;  /* points into msg */
  uint64_t offset, byte_size;
} grpc_shm_param;

typedef struct grpc_infer {
  Inference__ModelInferRequest *msg; /* owns every string and raw byte the inputs point at */
  kserve_input *inputs;
  size_t n_inputs;
  grpc_shm_param *shm_in;  /* per input */
  bool any_shm;            /* an input or an output names a region */
  bool any_cls;            /* an output asks for classification (outs[i].class_count) */
  /* The requested outputs (msg->outputs, in order): name, and after grpc_infer_bind the
   * region an output is written to. */
  kserve_output_req *outs;
  int64_t version;     /* model_version parsed; 0 = the highest ready one */
  bool empty_final;    /* parameter triton_enable_empty_final_response */
} grpc_infer;

/* Parses a model version string as Triton does ("" = 0, else a positive integer). */
cinfer_status *grpc_parse_version(const char *s, int64_t *v);

/* Decodes a ModelInferRequest message. On error returns INVALID_ARG (or UNSUPPORTED) naming
 * the problem and *out is NULL. */
cinfer_status *grpc_infer_decode(const uint8_t *buf, size_t len, const kserve_limits *lim,
                                 grpc_infer **out);
/* Binds the inputs and outputs that name a shared-memory region to it (the KServe rules
 * shared with HTTP: kserve_input_shm, kserve_output_shm); cfg names the model in the byte
 * size text. A request naming a region when shm is NULL is refused. */
cinfer_status *grpc_infer_bind(grpc_infer *g, shm_registry *shm, const cinfer_config *cfg);
/* Fills r: id, inputs (converted buffers move to r), requested outputs, parameters. */
cinfer_status *grpc_infer_apply(grpc_infer *g, cinfer_request *r);
void grpc_infer_free(grpc_infer *g);

/* Before encoding a successful response: computes each output that the request asks to
 * classify (Triton's classification extension: "value:index[:label]" BYTES strings, labels
 * from the output's label_filename in model_dir; classify.h); grpc_infer_encode then sends
 * them in place of the tensor. g NULL or no classification: nothing to do. */
cinfer_status *grpc_infer_classify(grpc_infer *g, const cinfer_response *resp,
                                   const cinfer_config *cfg, const char *model_dir);
/* Before encoding a successful response: copies every output the request sends to shared
 * memory into its region (kserve_output_to_shm). g NULL: nothing to do. */
cinfer_status *grpc_infer_outputs_to_shm(const grpc_infer *g, const cinfer_response *resp);
/* Appends one framed message: a ModelInferResponse (stream false) or a
 * ModelStreamInferResponse holding it (stream true). final_param: -1 none, else the value
 * of the triton_final_response parameter. An output that g sends to shared memory gets an
 * empty raw_output_contents entry (as Triton: one entry per output). g may be NULL.
 * False on allocation failure. */
bool grpc_infer_encode(cbuf *out, bool stream, const char *model, int64_t version,
                       const char *id, const cinfer_response *resp, int final_param,
                       const grpc_infer *g);
/* Appends a framed ModelStreamInferResponse carrying only error_message (and the request
 * id and model, so a client can tell which request failed). */
bool grpc_stream_error_encode(cbuf *out, const char *model, const char *id, const char *msg);
/* Appends any message, framed. */
bool grpc_pack(cbuf *out, const ProtobufCMessage *m);

#endif
