/* cinfer/backend.h: the ABI between the server core and a model engine ("backend").
 *
 * Lifecycle (as Triton's): backend -> model -> instance -> execute(instance, batch).
 *   model_load      once per loaded model version; reads the files in version_dir.
 *   instance_create once per instance of instance_group (count x kind x gpus).
 *   execute         called by the instance's worker thread, one batch at a time per
 *                   instance; different instances of one model run concurrently.
 *   instance_destroy, model_unload  in reverse order, only after every request that
 *                   used them has completed.
 *
 * Versioning: a backend fills abi_major/abi_minor with the values it was built against.
 * The core refuses a backend whose major differs or whose minor is newer than its own.
 * The struct only ever grows at the end (minor bump); an optional member that is NULL
 * takes the default written beside it.
 *
 * Two execution styles:
 *   batch (default): execute() reads batch->inputs (one tensor per model input, all the
 *     requests' rows concatenated along dim 0 when max_batch_size > 0), allocates each
 *     output with cinfer_batch_output() and writes it, and returns. The core slices every
 *     output back into per-request views (no copy) and completes the requests.
 *   decoupled (CINFER_BACKEND_DECOUPLED): execute() takes over the requests. The backend
 *     later calls cinfer_request_respond() 0..N times per request, the last one with
 *     CINFER_RESPONSE_FINAL, from any thread. Generative models (LLM streaming) use this.
 */
#ifndef CINFER_BACKEND_H
#define CINFER_BACKEND_H

#include "cinfer/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CINFER_BACKEND_ABI_MAJOR 1
#define CINFER_BACKEND_ABI_MINOR 1

struct cinfer_model_config; /* src/repo/config.h: the parsed config.pbtxt */
typedef struct cinfer_request cinfer_request; /* opaque */
struct cinfer_backend_metric;

enum {
  CINFER_BACKEND_DECOUPLED = 1u << 0, /* execute() takes over responding (see above) */
};

enum {
  CINFER_INSTANCE_KIND_CPU = 0,
  CINFER_INSTANCE_KIND_GPU = 1,
};

typedef struct cinfer_model_load_info {
  const struct cinfer_model_config *config; /* borrowed; lives as long as the model */
  const char *model_dir;                    /* <repo>/<model>; borrowed, same lifetime */
  const char *version_dir;                  /* <repo>/<model>/<version> */
  int64_t version;
  int threads_per_instance;                 /* kernel threads each instance may use */
} cinfer_model_load_info;

typedef struct cinfer_instance_info {
  int index;      /* 0..count-1 over the whole instance_group list */
  int kind;       /* CINFER_INSTANCE_KIND_* */
  int device_id;  /* GPU id for KIND_GPU, -1 for CPU */
  int threads;    /* kernel threads this instance may use */
} cinfer_instance_info;

typedef struct cinfer_batch {
  uint32_t n_requests;
  cinfer_request *const *requests; /* borrowed; decoupled backends take them over */
  int64_t batch_size;              /* rows: sum of each request's dim 0 (or 1 each
                                      when the model does not batch) */
  uint32_t n_inputs;
  const cinfer_tensor *inputs;     /* borrowed for the call; config input order */
  void *core_;                     /* private to the core */
} cinfer_batch;

typedef struct cinfer_backend_iface {
  uint32_t abi_major;
  uint32_t abi_minor;
  const char *name;   /* "identity", "sim", "onnxruntime", "llm" */
  uint32_t flags;     /* CINFER_BACKEND_* */

  /* Optional (NULL: no auto-complete). Fills inputs, outputs and max_batch_size that the
   * config omits, from the model file in version_dir. May be called before model_load. */
  cinfer_status *(*autocomplete)(struct cinfer_model_config *config, const char *version_dir);

  cinfer_status *(*model_load)(const cinfer_model_load_info *info, void **model);
  void (*model_unload)(void *model);
  cinfer_status *(*instance_create)(void *model, const cinfer_instance_info *info,
                                    void **instance);
  void (*instance_destroy)(void *instance);
  /* Batch style: fill outputs and return; a non-NULL status fails every request in the
   * batch with that message. Decoupled style: see the file comment. */
  cinfer_status *(*execute)(void *instance, cinfer_batch *batch);

  /* ---- ABI 1.1: optional methods of generative (text) models ---------------------------
   * Each takes the model state model_load returned, is thread-safe and may be called from
   * any thread (the frontends call them on their I/O threads) while the model is loaded.
   * NULL means "not supported": the server's wrappers (cinfer.h, cinfer_model_tokenize ...)
   * then return CINFER_UNSUPPORTED naming the model, which a frontend answers with 501. */
  /* Text -> token ids. *ids is malloc'd and owned by the caller (NULL on error). */
  cinfer_status *(*tokenize)(void *model, const char *text, size_t len, bool add_special,
                             bool parse_special, int32_t **ids, size_t *n);
  /* Token ids -> UTF-8 text (special: render control tokens). *text is malloc'd, NUL-
   * terminated and owned by the caller; an id outside the vocabulary is INVALID_ARG. */
  cinfer_status *(*detokenize)(void *model, const int32_t *ids, size_t n, bool special,
                               char **text, size_t *len);
  /* Renders chat messages with the model's template. *out is malloc'd, owned by the caller. */
  cinfer_status *(*render_chat)(void *model, const char *const *roles,
                                const char *const *contents, size_t n,
                                bool add_generation_prompt, char **out);
  /* Called (any thread, must not block) once when a request that execute() took over is
   * cancelled; r stays valid for the call. NULL: the backend only polls
   * cinfer_request_is_cancelled. Either way the backend still sends the FINAL response
   * (conventionally an error CINFER_CANCELLED); the core ignores it being late. A call for
   * a request the backend has already finished must be a no-op. */
  void (*cancel)(void *model, cinfer_request *r);
  /* Writes up to cap of the model's current metrics (names borrowed from the backend,
   * static) and returns how many it has; the frontend exports them at /metrics with the
   * label model="<name>". NULL: none. Counters are cumulative since model_load. */
  uint32_t (*metrics)(void *model, struct cinfer_backend_metric *out, uint32_t cap);
  /* ---- end of ABI 1.1 ------------------------------------------------------------------ */
} cinfer_backend_iface;

enum { CINFER_BACKEND_METRIC_GAUGE = 0, CINFER_BACKEND_METRIC_COUNTER = 1 };
typedef struct cinfer_backend_metric {
  const char *name;  /* Prometheus family name ("cinfer_llm_running_sequences") */
  const char *help;
  int kind;          /* CINFER_BACKEND_METRIC_* */
  double value;
} cinfer_backend_metric;

/* ---- services the core offers to backends -------------------------------------------- */

/* Allocates the batch-wide output `name` (whole batch: dim 0 = batch_size when the model
 * batches). The memory belongs to the batch and stays valid until every request's response
 * is freed; *data is 64-byte aligned. For BYTES, byte_size is the total encoded size;
 * otherwise it must equal elements x dtype size. Outputs the client did not request may be
 * skipped by checking cinfer_batch_output_requested(). */
cinfer_status *cinfer_batch_output(cinfer_batch *b, const char *name, cinfer_dtype dtype,
                                   int ndim, const int64_t *shape, size_t byte_size,
                                   void **data);
bool cinfer_batch_output_requested(const cinfer_batch *b, const char *name);

/* Per-request access (both styles). Results are borrowed until the request completes. */
uint32_t cinfer_request_input_count(const cinfer_request *r);
const cinfer_tensor *cinfer_request_input(const cinfer_request *r, uint32_t i);
const cinfer_tensor *cinfer_request_input_by_name(const cinfer_request *r, const char *name);
const char *cinfer_request_id(const cinfer_request *r); /* "" when the client gave none */
/* Request parameters (KServe "parameters"). Each returns false when absent or of another
 * type; strings are borrowed. */
bool cinfer_request_param_string(const cinfer_request *r, const char *key, const char **out);
bool cinfer_request_param_int(const cinfer_request *r, const char *key, int64_t *out);
bool cinfer_request_param_double(const cinfer_request *r, const char *key, double *out);
bool cinfer_request_param_bool(const cinfer_request *r, const char *key, bool *out);
/* True once the client has gone away; a decoupled backend should stop and finish the
 * request with CINFER_RESPONSE_FINAL (the error is then ignored). */
bool cinfer_request_is_cancelled(const cinfer_request *r);

enum { CINFER_RESPONSE_FINAL = 1u << 0 };

/* Decoupled style only. Sends one response: the n outputs are copied, so they may live on
 * the caller's stack. `error` (owned by the callee when non-NULL) fails the request and
 * implies FINAL. Thread-safe. After a FINAL response r must not be used again. */
cinfer_status *cinfer_request_respond(cinfer_request *r, const cinfer_tensor *outputs,
                                      uint32_t n, uint32_t flags, cinfer_status *error);

/* Registers a built-in backend (called once at start-up by the core for each backend it is
 * built with). Returns an error when the ABI version does not match or the name is taken. */
cinfer_status *cinfer_backend_register(const cinfer_backend_iface *iface);

#ifdef __cplusplus
}
#endif
#endif
