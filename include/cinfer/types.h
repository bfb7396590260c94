/* cinfer/types.h: the vocabulary shared by the server API (cinfer.h) and the backend
 * ABI (backend.h): status objects, data types, tensors.
 *
 * Conventions (see docs/design/api.md):
 *  - A function that can fail returns `cinfer_status *`: NULL means success; otherwise the
 *    caller owns the status and frees it with cinfer_status_free().
 *  - Opaque handles come in create/destroy pairs; destroy(NULL) does nothing.
 *  - Every pointer parameter says who owns it. "Borrowed" means valid only for the call.
 */
#ifndef CINFER_TYPES_H
#define CINFER_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------------------ */

/* Error codes follow Triton's, and map to HTTP status codes the same way. Append only. */
typedef enum cinfer_code {
  CINFER_OK = 0,
  CINFER_UNKNOWN = 1,          /* 500 */
  CINFER_INTERNAL = 2,         /* 500 */
  CINFER_NOT_FOUND = 3,        /* 404 */
  CINFER_INVALID_ARG = 4,      /* 400 */
  CINFER_UNAVAILABLE = 5,      /* 503 */
  CINFER_UNSUPPORTED = 6,      /* 501 */
  CINFER_ALREADY_EXISTS = 7,   /* 409 */
  CINFER_CANCELLED = 8,        /* 499-style: the client went away */
  CINFER_RESOURCE_EXHAUSTED = 9, /* 429 when rate limited, 413 for body limits */
  CINFER_DEADLINE_EXCEEDED = 10  /* 504 / timeout */
} cinfer_code;

typedef struct cinfer_status cinfer_status;

/* Creates a status with a printf-style message. Never returns NULL (falls back to a static
 * out-of-memory status that cinfer_status_free ignores). */
cinfer_status *cinfer_status_new(cinfer_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The status for a failed allocation: CINFER_INTERNAL (HTTP 500; never RESOURCE_EXHAUSTED,
 * whose 429 invites the client to retry at once), message "WHAT: out of memory", or "out
 * of memory" when what is NULL. Every out-of-memory error is built here. */
cinfer_status *cinfer_status_oom(const char *what);
cinfer_code cinfer_status_code(const cinfer_status *st);       /* NULL -> CINFER_OK */
const char *cinfer_status_message(const cinfer_status *st);    /* NULL -> "" ; borrowed */
const char *cinfer_code_name(cinfer_code code);                /* "INVALID_ARG", ... */
int cinfer_code_http_status(cinfer_code code);                 /* 400, 404, 500, ... */
void cinfer_status_free(cinfer_status *st);
/* Prepends "prefix: " to the message of st (which must be non-NULL) and returns st. */
cinfer_status *cinfer_status_prefix(cinfer_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- data types -------------------------------------------------------------------- */

/* KServe v2 datatypes. Append only; numbers are part of the ABI. */
typedef enum cinfer_dtype {
  CINFER_TYPE_INVALID = 0,
  CINFER_TYPE_BOOL,
  CINFER_TYPE_UINT8,
  CINFER_TYPE_UINT16,
  CINFER_TYPE_UINT32,
  CINFER_TYPE_UINT64,
  CINFER_TYPE_INT8,
  CINFER_TYPE_INT16,
  CINFER_TYPE_INT32,
  CINFER_TYPE_INT64,
  CINFER_TYPE_FP16,
  CINFER_TYPE_FP32,
  CINFER_TYPE_FP64,
  CINFER_TYPE_BYTES, /* each element: uint32 little-endian length, then that many bytes */
  CINFER_TYPE_BF16,
  CINFER_TYPE_COUNT_
} cinfer_dtype;

/* Size of one element in bytes; 0 for BYTES (variable) and INVALID. */
size_t cinfer_dtype_size(cinfer_dtype t);
/* "FP32", "BYTES", ... (KServe names). */
const char *cinfer_dtype_name(cinfer_dtype t);
/* Parses a KServe name ("FP32") or a Triton config name ("TYPE_FP32", "TYPE_STRING").
 * Returns CINFER_TYPE_INVALID when unknown. n is the length of s. */
cinfer_dtype cinfer_dtype_parse(const char *s, size_t n);
/* "TYPE_FP32", "TYPE_STRING", ... (Triton config names). */
const char *cinfer_dtype_config_name(cinfer_dtype t);

/* ---- limits ------------------------------------------------------------------------ */

/* One constant per count that comes from outside (a model file, a config.pbtxt, a
 * request). Each is checked where the number enters (the ONNX loader, config validation,
 * KServe request decoding) and the error names the constant, e.g. "model has 70000
 * outputs; the limit is CINFER_MAX_OUTPUTS = 4096". Past that check every array is sized
 * from the model or the request, never clamped to a guess. The values are generous (Triton
 * has no practical limit for inputs or outputs); they exist so that a hostile file or body
 * cannot ask for unbounded work (name lookups are linear per tensor). */
#define CINFER_MAX_INPUTS 4096  /* inputs of a model; inputs of one request */
#define CINFER_MAX_OUTPUTS 4096 /* outputs of a model; outputs requested by one request */
#define CINFER_MAX_DIMS 8       /* dimensions of a tensor */

/* ---- tensors ----------------------------------------------------------------------- */

/* Where a tensor's bytes are. Append only; numbers are part of the ABI. */
typedef enum cinfer_memory_type {
  CINFER_MEMORY_CPU = 0,        /* ordinary host memory (the default: a zeroed field) */
  CINFER_MEMORY_CPU_PINNED = 1, /* page-locked host memory; readable like CPU memory */
  CINFER_MEMORY_GPU = 2,        /* memory of GPU `device_id`; not addressable by the CPU */
  CINFER_MEMORY_TYPE_COUNT_
} cinfer_memory_type;

/* "CPU", "CPU_PINNED", "GPU"; "INVALID" for anything else. */
const char *cinfer_memory_type_name(cinfer_memory_type t);

/* A tensor view: a name, a type, a shape and bytes. It never owns `data` or `name`; the
 * object that produced it says how long they live. Fields are only ever appended, so
 * designated initializers keep working: a tensor that does not set memory_type/device_id
 * is in CPU memory (device 0). */
typedef struct cinfer_tensor {
  const char *name;
  cinfer_dtype dtype;
  int ndim;
  int64_t shape[CINFER_MAX_DIMS];
  const void *data;
  size_t byte_size;
  cinfer_memory_type memory_type; /* where `data` is; CINFER_MEMORY_CPU = 0 */
  int32_t device_id;              /* GPU ordinal for CINFER_MEMORY_GPU; 0 otherwise */
} cinfer_tensor;

/* A response parameter (KServe "parameters" of a response, Triton's response parameters):
 * a key and a value of one of four kinds. Strings are NUL-terminated; both pointers are
 * borrowed from whoever holds the parameter. */
typedef enum cinfer_param_type {
  CINFER_PARAM_BOOL = 0,
  CINFER_PARAM_INT,
  CINFER_PARAM_DOUBLE,
  CINFER_PARAM_STRING,
} cinfer_param_type;

typedef struct cinfer_param {
  const char *key;
  cinfer_param_type type;
  bool b;
  int64_t i;
  double d;
  const char *s;
} cinfer_param;

/* Product of the dims, or -1 when a dim is negative or the product overflows int64. */
int64_t cinfer_shape_elements(const int64_t *shape, int ndim);
/* Checks that byte_size matches shape x dtype (for BYTES: walks the length prefixes and
 * checks that exactly `elements` strings fill byte_size). NULL if consistent. The bytes
 * must be in host memory (CPU or CPU_PINNED): a GPU (or unknown) memory_type is refused
 * with INVALID_ARG naming the tensor, its memory type and device, before any byte is read.
 * Every place where the core reads tensor bytes goes through this check. */
cinfer_status *cinfer_tensor_check(const cinfer_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
