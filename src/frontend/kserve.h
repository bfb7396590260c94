/* kserve.h: the KServe v2 inference protocol codec (JSON tensors and the binary tensor
 * data extension), independent of the transport.
 *
 * decode: body bytes -> kserve_request (inputs as tensor views, requested outputs,
 *         parameters). Binary inputs are views into the body (zero copy); JSON "data" is
 *         converted into buffers owned by the kserve_request.
 * encode: a response's output tensors -> JSON header (+ binary section).
 * Every size from the body is checked against the limits before anything is allocated. */
#ifndef CINFER_FRONTEND_KSERVE_H
#define CINFER_FRONTEND_KSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <regex.h>

#include "cinfer/cinfer.h"
#include "core/buf.h"
#include "frontend/shm.h"

/* Per-server limits. Besides these, a request may carry at most CINFER_MAX_INPUTS
 * inputs and CINFER_MAX_OUTPUTS requested outputs, and a shape at most CINFER_MAX_DIMS
 * dims (include/cinfer/types.h); the error names the constant. */
typedef struct kserve_limits {
  int64_t max_tensor_elements; /* per input tensor */
  int max_json_depth;          /* nesting of objects/arrays */
  /* Triton's --http-max-input-size: the JSON header, a raw binary body and each input's
   * bytes from JSON are at most this long (0 = no limit). */
  size_t max_input_bytes;
} kserve_limits;

typedef struct kserve_input {
  cinfer_tensor t;   /* name points into the request; data into the body or `owned` */
  void *owned;       /* buffer converted from JSON data, or NULL */
  shm_region *shm;   /* the region t.data points into (a reference), or NULL */
} kserve_input;

typedef struct kserve_output_req {
  const char *name;
  bool binary;        /* binary_data; an output the request does not list follows the
                         request-level binary_data_output (Triton's precedence) */
  uint32_t class_count;          /* "classification": K (0: none) */
  shm_region *shm;               /* output to shared memory (a reference), or NULL */
  void *shm_addr;
  uint64_t shm_size;
  /* set by kserve_prepare_response for a classification output */
  bool cls_done;
  cbuf cls;                      /* serialized BYTES */
  int64_t cls_shape[2];
  int cls_ndim;
} kserve_output_req;

/* What decoding may consult beyond the body. */
typedef struct kserve_decode_ctx {
  /* Regions named by shared_memory_region parameters; NULL: such parameters are refused. */
  shm_registry *shm;
  /* The model's configuration: a raw binary request (header length 0) takes its single
   * input's name, type and shape from it; NULL: a raw request is refused. */
  const cinfer_config *config;
} kserve_decode_ctx;

typedef struct kserve_request kserve_request;

/* Decodes an infer request. header_len is the Inference-Header-Content-Length value, or -1
 * when the header is absent (the whole body is JSON). The body must outlive the request.
 * On error returns an INVALID_ARG status naming the problem and *out is NULL. */
cinfer_status *kserve_decode(const char *body, size_t body_len, int64_t header_len,
                             const kserve_limits *lim, kserve_request **out);
/* The same with shared memory and raw binary requests (Triton's rules: header_len 0 makes
 * the whole body the tensor of the model's only input, shape from the config with at most
 * one variable dimension deduced from the size, batch 1 prepended for a batching model,
 * every output binary). ctx NULL: as kserve_decode. */
cinfer_status *kserve_decode_with(const char *body, size_t body_len, int64_t header_len,
                                  const kserve_limits *lim, const kserve_decode_ctx *ctx,
                                  kserve_request **out);
void kserve_request_free(kserve_request *k);

const char *kserve_request_id(const kserve_request *k);  /* NULL when absent */
size_t kserve_request_input_count(const kserve_request *k);
kserve_input *kserve_request_input(kserve_request *k, size_t i);
size_t kserve_request_output_count(const kserve_request *k);
const kserve_output_req *kserve_request_output(const kserve_request *k, size_t i);
bool kserve_request_binary_default(const kserve_request *k);

/* Fills a cinfer request from a decoded one: inputs (ownership of converted buffers moves
 * to the cinfer request), requested outputs, parameters, id, priority and timeout. */
cinfer_status *kserve_apply(kserve_request *k, cinfer_request *r);

/* After a successful response and before encoding it: copies each output that the request
 * sends to shared memory into its region (INVALID_ARG, Triton's text, when the region is
 * smaller than the output) and computes each classification output (labels from the
 * output's label_filename in model_dir). cfg/model_dir may be NULL (no labels, no batch
 * dimension). */
cinfer_status *kserve_prepare_response(kserve_request *k, const cinfer_response *resp,
                                       const cinfer_config *cfg, const char *model_dir);

/* True when the response output named `name` goes to the binary section: its
 * binary_data parameter when the request lists it, else the request's binary_data_output.
 * req may be NULL (every output as JSON). */
bool kserve_output_binary(const kserve_request *req, const char *name);
/* Encodes a successful response to the decoded request req (NULL: no id, every output as
 * JSON). Outputs that kserve_output_binary selects go to the binary section; then
 * *json_len < out->len and the caller sets Inference-Header-Content-Length. Every output
 * of the response is encoded, however many. Returns false on allocation failure. */
bool kserve_encode_response(cbuf *out, size_t *json_len, const char *model, int64_t version,
                            const kserve_request *req, const cinfer_response *resp);
/* {"error":"..."} */
void kserve_encode_error(cbuf *out, const char *msg);
/* The elements of t as a JSON array (the "data" of a KServe output), appended to out. */
void kserve_encode_data(cbuf *out, const cinfer_tensor *t);

/* ---- rules shared by every encoding (kserve_rules.c) ---------------------------------- */
/* The KServe HTTP codec above and the gRPC codec (src/grpc) describe each input with these,
 * in this order, so every limit and check is written once. Each returns INVALID_ARG naming
 * the input (or the limit) and leaves the tensor partly set on error. */
cinfer_status *kserve_check_input_count(size_t n);   /* 1..CINFER_MAX_INPUTS */
cinfer_status *kserve_check_output_count(size_t n);  /* 0..CINFER_MAX_OUTPUTS */
/* Non-empty and not a name of the n_prev inputs already described; sets t->name (borrowed). */
cinfer_status *kserve_input_name(const kserve_input *prev, size_t n_prev, const char *name,
                                 cinfer_tensor *t);
/* A KServe datatype name ("FP32"; not the config spelling "TYPE_FP32"). */
cinfer_status *kserve_input_datatype(const char *name, const char *dt, size_t len,
                                     cinfer_tensor *t);
/* At most CINFER_MAX_DIMS dims, each non-negative, at most lim->max_tensor_elements. */
cinfer_status *kserve_input_shape(const char *name, const int64_t *dims, size_t nd,
                                  const kserve_limits *lim, cinfer_tensor *t);
/* The input's bytes (borrowed): byte size against shape x dtype (BYTES: the length
 * prefixes), copied to aligned memory in ki->owned when misaligned for the dtype. */
cinfer_status *kserve_input_bytes(kserve_input *ki, const void *data, size_t len);
/* Triton core's text for a fixed-size tensor whose bytes do not match its shape (clients
 * and Triton's QA match on it); NULL when they match, the type is BYTES or cfg is NULL. */
cinfer_status *kserve_check_byte_size(const cinfer_tensor *t, const cinfer_config *cfg);
/* An input read from shared memory (name, dtype and shape already set): the region's window
 * checks (shm_acquire), the byte size against the shape (kserve_check_byte_size with cfg),
 * then zero copy, except BYTES (their lengths are checked once and must not change after)
 * and data misaligned for the dtype, which are copied to ki->owned. ki->shm holds the
 * region's reference. */
cinfer_status *kserve_input_shm(kserve_input *ki, shm_registry *r, const char *region,
                                uint64_t offset, uint64_t byte_size,
                                const cinfer_config *cfg);
/* A requested output written to shared memory: the window checks; ko->shm, shm_addr and
 * shm_size are set. */
cinfer_status *kserve_output_shm(kserve_output_req *ko, shm_registry *r, const char *region,
                                 uint64_t offset, uint64_t byte_size);
/* Copies output t into ko's region; INVALID_ARG (Triton's text) when the region is smaller. */
cinfer_status *kserve_output_to_shm(const kserve_output_req *ko, const cinfer_tensor *t);

/* ---- request parameters and forwarded headers (both protocols) ---- */

/* A request parameter's key as Triton allows it: keys starting with "triton_" are Triton's
 * (INVALID_ARG, Triton's text); gRPC's triton_enable_empty_final_response is handled by the
 * caller before it asks. */
cinfer_status *kserve_param_key_check(const char *key);

/* Triton's --http-header-forward-pattern / --grpc-header-forward-pattern: request headers
 * (gRPC: call metadata) whose name the pattern matches anywhere (RE2::PartialMatch on
 * Triton; here a POSIX extended regular expression) become string parameters of the
 * request. Names are matched case-insensitively unless the pattern begins with Triton's
 * "(?-i)"; a leading "(?i)" is accepted too. A matched header named as a reserved parameter
 * (sequence_id, sequence_start, sequence_end, priority, timeout, headers,
 * binary_data_output) or starting with "triton_" refuses the request (Triton's text). */
typedef struct kserve_fwd {
  bool on;
  regex_t re;
} kserve_fwd;
/* pattern NULL or "": off. INVALID_ARG naming `flag` when the pattern does not compile. */
cinfer_status *kserve_fwd_init(kserve_fwd *f, const char *flag, const char *pattern);
void kserve_fwd_free(kserve_fwd *f);
/* Whether f is on and matches the header name. */
bool kserve_fwd_match(const kserve_fwd *f, const char *name, size_t name_len);
/* One header: set as a parameter of r when f matches its name. */
cinfer_status *kserve_fwd_header(const kserve_fwd *f, const char *name, size_t name_len, const char *value,
                                 size_t value_len, cinfer_request *r);

#endif
