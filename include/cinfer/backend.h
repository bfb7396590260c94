/* cinfer/backend.h: the ABI between the server core and a model engine ("backend").
 *
 * Lifecycle (as Triton's): backend -> model -> instance -> execute(instance, batch).
 *   autocomplete    optional; before model_load, may add what config.pbtxt leaves out.
 *   model_load      once per loaded model version; reads the files in version_dir.
 *   instance_create once per instance of instance_group (count x kind x gpus).
 *   execute         called by the instance's worker thread, one batch at a time per
 *                   instance; different instances of one model run concurrently.
 *   instance_destroy, model_unload  in reverse order, only after every request that
 *                   used them has completed.
 *
 * Versioning (CINFER_BACKEND_ABI_MAJOR / _MINOR):
 *   - A backend fills abi_major/abi_minor with the values it was built against. The core
 *     refuses a backend whose major differs from its own or whose minor is newer, with a
 *     reason naming both versions.
 *   - MINOR grows when something is only appended: a member at the end of
 *     cinfer_backend_iface (the core reads it only from backends whose abi_minor has it:
 *     CINFER_BACKEND_HAS), a field at the end of a struct that the core allocates and
 *     hands over as a pointer to one object (cinfer_model_load_info, cinfer_instance_info,
 *     cinfer_batch), a new service function, a new enum value. Existing members keep
 *     their position, type and meaning.
 *   - MAJOR grows for anything else: a member removed, moved, retyped or given a new
 *     meaning, a service function whose contract changes, and any change to the size of
 *     cinfer_tensor or cinfer_config_io (tensors travel in arrays both ways and a
 *     cinfer_config_io is filled in the backend's memory, so their size is part of the
 *     ABI; new fields there are appended, so source code with designated initializers
 *     keeps compiling, but backends must be rebuilt). 2.0 is such a change: cinfer_tensor
 *     gained memory_type/device_id and the load info lost the core's config struct.
 *   - Every optional iface member (marked "Optional") may be NULL: the core then does what
 *     is written beside it. A member appended in minor N is read only from backends whose
 *     abi_minor >= N; for older backends it counts as NULL.
 *   - No private struct of the core crosses this header: configuration reaches a backend
 *     as versioned JSON and through the opaque cinfer_config accessors below.
 *
 * Two execution styles:
 *   batch (default): execute() reads batch->inputs (one tensor per model input, all the
 *     requests' rows concatenated along dim 0 when max_batch_size > 0), allocates each
 *     output with cinfer_batch_output() and writes it, and returns. The core slices every
 *     output back into per-request views (no copy) and completes the requests.
 *   decoupled (CINFER_BACKEND_DECOUPLED): execute() takes over the requests. The backend
 *     later calls cinfer_request_respond() 0..N times per request, the last one with
 *     CINFER_RESPONSE_FINAL, from any thread. Generative models (LLM streaming) use this.
 *
 * Memory: every tensor says where its bytes are (cinfer_tensor.memory_type, device_id;
 * zero = CPU). This core reads and writes CPU memory only (CPU and CPU_PINNED); it gives
 * backends CPU memory and refuses GPU memory wherever it would have to touch the bytes
 * (request inputs, decoupled responses) with an INVALID_ARG that names the tensor.
 *
 * Shared-object backends: a backend that is not built in is loaded at the first model that
 * names it, from <backend-directory>/<name>/libcinfer_<name>.so (cinfer serve
 * --backend-directory DIR), by dlopen and the one exported symbol cinfer_backend_entry()
 * (see the end of this file). Everything declared here is exported by the cinfer binary,
 * so the library links against nothing of cinfer's. A loaded library stays loaded until
 * the process exits.
 */
#ifndef CINFER_BACKEND_H
#define CINFER_BACKEND_H

#include "cinfer/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CINFER_BACKEND_ABI_MAJOR 2
#define CINFER_BACKEND_ABI_MINOR 3

typedef struct cinfer_request cinfer_request; /* opaque */
struct cinfer_backend_metric;

enum {
  CINFER_BACKEND_DECOUPLED = 1u << 0, /* execute() takes over responding (see above) */
  /* With DECOUPLED: a model answers 0..N responses per request only when its config says
   * model_transaction_policy { decoupled: true }; otherwise exactly one (the python backend,
   * as Triton's). Unary protocols (gRPC ModelInfer) and plain ensemble steps then serve it.
   * (A flag bit: backends built without it are unaffected, so the ABI version stays.) */
  CINFER_BACKEND_DECOUPLED_BY_CONFIG = 1u << 1,
};

enum {
  CINFER_INSTANCE_KIND_CPU = 0,
  CINFER_INSTANCE_KIND_GPU = 1,
};

/* ---- model configuration ----------------------------------------------------------------
 *
 * The configuration a backend sees is the model's config.pbtxt after auto-complete and
 * validation. Two views of one thing:
 *   - config_json in cinfer_model_load_info: the whole config in Triton's JSON form (what
 *     GET /v2/models/NAME/config answers: protobuf JSON, original field names, every field
 *     printed, 64-bit integers as numbers). Its layout version is config_json_version;
 *     CINFER_CONFIG_JSON_VERSION is the one this header describes. Like the ABI, a new
 *     field in the JSON does not change the version; a changed meaning does.
 *   - accessors on the opaque cinfer_config, for what backends need most often, so that
 *     most backends never parse JSON. */

#define CINFER_CONFIG_JSON_VERSION 1

typedef struct cinfer_config cinfer_config;             /* opaque, read-only */
typedef struct cinfer_autocomplete cinfer_autocomplete; /* opaque, see autocomplete */

/* One input or output of the config. Filled by the core; strings borrowed from the config. */
typedef struct cinfer_config_io {
  const char *name;
  cinfer_dtype dtype;            /* CINFER_TYPE_INVALID when the config does not say */
  int ndim;                      /* entries in dims, 0..CINFER_MAX_DIMS */
  int64_t dims[CINFER_MAX_DIMS]; /* without the batch dim when max_batch_size > 0; -1 = any */
  int reshape_ndim;              /* -1 when the config has no reshape */
  int64_t reshape[CINFER_MAX_DIMS];
  bool optional;                 /* inputs only */
} cinfer_config_io;

/* All borrowed strings live as long as the cinfer_config they came from. */
const char *cinfer_config_name(const cinfer_config *c);
int64_t cinfer_config_max_batch_size(const cinfer_config *c); /* 0 = the model does not batch */
/* parameters { key: K value { string_value: V } } -> V (borrowed), NULL when absent. */
const char *cinfer_config_parameter(const cinfer_config *c, const char *key);
uint32_t cinfer_config_input_count(const cinfer_config *c);
uint32_t cinfer_config_output_count(const cinfer_config *c);
/* Fill *out with input/output i (config order); false when i is out of range. */
bool cinfer_config_input(const cinfer_config *c, uint32_t i, cinfer_config_io *out);
bool cinfer_config_output(const cinfer_config *c, uint32_t i, cinfer_config_io *out);
/* The same by name; false when the config has no such input/output. */
bool cinfer_config_input_by_name(const cinfer_config *c, const char *name, cinfer_config_io *out);
bool cinfer_config_output_by_name(const cinfer_config *c, const char *name, cinfer_config_io *out);
/* Output `name`'s label_filename (borrowed; relative to the model's directory), NULL when
 * the output has none or the config has no such output. */
const char *cinfer_config_output_label_filename(const cinfer_config *c, const char *name);
/* The config in Triton's JSON form as it is now (during autocomplete: with the changes
 * made so far). *version (optional) receives CINFER_CONFIG_JSON_VERSION. The caller owns
 * the string and frees it with free(); NULL when out of memory. */
char *cinfer_config_json(const cinfer_config *c, uint32_t *version);

/* Auto-complete setters. Each validates its arguments and returns an error naming the
 * model and the field (INVALID_ARG; ALREADY_EXISTS for a name that is taken); on error the
 * config is unchanged. Strings and dims are copied. The core validates the whole result
 * again after autocomplete returns (every input/output needs a data_type and dims). */
const cinfer_config *cinfer_autocomplete_config(const cinfer_autocomplete *ac); /* current */
cinfer_status *cinfer_autocomplete_set_max_batch_size(cinfer_autocomplete *ac, int64_t n);
cinfer_status *cinfer_autocomplete_add_input(cinfer_autocomplete *ac, const char *name,
                                             cinfer_dtype dtype, int ndim, const int64_t *dims);
cinfer_status *cinfer_autocomplete_add_output(cinfer_autocomplete *ac, const char *name,
                                              cinfer_dtype dtype, int ndim, const int64_t *dims);
/* Adds or replaces parameters { key: K value { string_value: V } }. */
cinfer_status *cinfer_autocomplete_set_parameter(cinfer_autocomplete *ac, const char *key,
                                                 const char *value);
/* ABI 2.1. Adds dynamic_batching { } (defaults) when the config has no dynamic_batching
 * (no-op when it has one; INVALID_ARG when it uses another scheduler); sets
 * model_transaction_policy { decoupled: d } (the core refuses decoupled: true later for a
 * backend that is not decoupled). */
cinfer_status *cinfer_autocomplete_set_dynamic_batching(cinfer_autocomplete *ac);
cinfer_status *cinfer_autocomplete_set_decoupled(cinfer_autocomplete *ac, bool decoupled);

/* ---- what the core hands the backend ------------------------------------------------------ */

typedef struct cinfer_model_load_info {
  const char *model_name;            /* borrowed; lives as long as the model */
  const char *model_dir;             /* <repo>/<model>; borrowed, same lifetime */
  const char *version_dir;           /* <repo>/<model>/<version>; same lifetime */
  int64_t version;
  int threads_per_instance;          /* kernel threads each instance may use */
  const cinfer_config *config;       /* borrowed; valid until model_unload returns */
  const char *config_json;           /* Triton JSON form; borrowed for the call only */
  uint32_t config_json_version;      /* CINFER_CONFIG_JSON_VERSION of config_json */
  /* ABI 2.1: the server that loads the model, for backends that submit requests to other
   * models (the Python backend's BLS) with the request API of cinfer.h
   * (cinfer_server_model_acquire, cinfer_request_create, cinfer_server_infer_async).
   * Borrowed; valid until model_unload returns. A backend that submits requests must
   * have them all completed before its model_unload returns. */
  struct cinfer_server *server;
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
  const cinfer_tensor *inputs;     /* borrowed for the call; config input order; host
                                      memory (CPU, or CPU_PINNED when a request's own
                                      pinned buffer is passed through unbatched) */
  void *core_;                     /* private to the core */
} cinfer_batch;

typedef struct cinfer_backend_iface {
  uint32_t abi_major; /* CINFER_BACKEND_ABI_MAJOR the backend was built with */
  uint32_t abi_minor; /* CINFER_BACKEND_ABI_MINOR the backend was built with */
  const char *name;   /* "identity", "sim", "onnxruntime", "llm"; for a shared object, the
                         <name> of its file name */
  uint32_t flags;     /* CINFER_BACKEND_* */

  /* Optional (NULL: the config is used as written). Fills inputs, outputs, max_batch_size
   * or parameters that the config omits, from the model files in version_dir, through the
   * cinfer_autocomplete_* setters. Called before model_load, on the loading thread. ac is
   * borrowed for the call. An error fails the model's load with that reason; changes made
   * before the error are discarded with the config. */
  cinfer_status *(*autocomplete)(cinfer_autocomplete *ac, const char *version_dir);

  /* Required. On success *model is the backend's model state (may be NULL), owned by the
   * backend and handed back to model_unload. On error the backend has freed everything it
   * made (*model is ignored) and the caller owns the status. */
  cinfer_status *(*model_load)(const cinfer_model_load_info *info, void **model);
  /* Required. Frees the model state; runs after every instance has been destroyed. */
  void (*model_unload)(void *model);
  /* Required. Same ownership as model_load. When one instance fails, the core destroys the
   * instances already created and unloads the model. */
  cinfer_status *(*instance_create)(void *model, const cinfer_instance_info *info,
                                    void **instance);
  /* Required. Runs after the instance's last execute has returned. */
  void (*instance_destroy)(void *instance);
  /* Required. Batch style: fill outputs and return; a non-NULL status (owned by the core
   * from then on) fails every request of the batch with that message, and outputs
   * allocated so far are freed by the core. Decoupled style: on success the backend owns
   * the batch's requests (see cinfer_request_respond); when it returns an error instead,
   * it has not responded to any of them and the core fails them all. */
  cinfer_status *(*execute)(void *instance, cinfer_batch *batch);

  /* ---- optional methods of generative (text) models (ABI 2.0) ---------------------------
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
  /* ---- end of the text methods ---------------------------------------------------------- */
  /* Members appended later go here (minor bump), each Optional with its default. */
  /* ABI 2.2. Optional. The tokenizer's description as a JSON object (malloc'd, owned by the
   * caller): "bos_token", "eos_token" (text, or null), "chat_template" (or null),
   * "max_model_len", "vocab_size" — what vLLM's /tokenizer_info gives. NULL: the server
   * answers CINFER_UNSUPPORTED naming the model. */
  cinfer_status *(*tokenizer_info)(void *model, char **json);
} cinfer_backend_iface;

/* For the core: true when `iface` has the optional `member` that was appended in ABI
 * minor `since` and sets it. The minor is tested first: an older backend's iface object
 * ends before that member, so reading it would run past the object. */
#define CINFER_BACKEND_HAS(iface, member, since) \
  ((iface)->abi_minor >= (since) && (iface)->member != NULL)

enum { CINFER_BACKEND_METRIC_GAUGE = 0, CINFER_BACKEND_METRIC_COUNTER = 1 };
typedef struct cinfer_backend_metric {
  const char *name;  /* Prometheus family name ("cinfer_llm_running_sequences") */
  const char *help;
  int kind;          /* CINFER_BACKEND_METRIC_* */
  double value;
} cinfer_backend_metric;

/* ---- services the core offers to backends -------------------------------------------- */

/* The server's Prometheus registry (src/metrics/metrics.h) for backends built into the
 * cinfer binary that export labelled series of their own (the Python backend's custom
 * metrics); the `metrics` iface member above is the way for other backends. */
struct metrics_registry *cinfer_server_metrics_registry(struct cinfer_server *s);

/* Allocates the batch-wide output `name` (whole batch: dim 0 = batch_size when the model
 * batches) in CPU memory. The memory belongs to the batch and stays valid until every
 * request's response is freed; *data is 64-byte aligned. For BYTES, byte_size is the total
 * encoded size; otherwise it must equal elements x dtype size. On error nothing was
 * allocated and the caller owns the status (returning it from execute fails the batch).
 * Outputs the client did not request may be skipped by checking
 * cinfer_batch_output_requested(). */
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
/* ABI 2.1. The outputs the client asked for, in its order (count 0: it asked for none, so
 * every output is returned), and the keys of the request's parameters (read each with the
 * typed getters above). Names are borrowed until the request completes; NULL past the end. */
uint32_t cinfer_request_output_count(const cinfer_request *r);
const char *cinfer_request_output_name(const cinfer_request *r, uint32_t i);
uint32_t cinfer_request_param_count(const cinfer_request *r);
const char *cinfer_request_param_key(const cinfer_request *r, uint32_t i);
/* True once the client has gone away. Requests cancelled while queued never reach
 * execute. A decoupled backend should stop work on a cancelled request soon and still
 * finish it with exactly one FINAL cinfer_request_respond(), normally with the error
 * cinfer_status_new(CINFER_CANCELLED, ...): until then the request stays the backend's.
 * A batch-style backend need not look. */
bool cinfer_request_is_cancelled(const cinfer_request *r);

enum { CINFER_RESPONSE_FINAL = 1u << 0 };

/* Decoupled style only. Sends one response: the n outputs (CPU memory) are copied, so they
 * may live on the caller's stack. Thread-safe; responses to one request must not be sent
 * from two threads at once.
 * Ownership: `error`, when non-NULL, is taken by the callee whatever happens; it fails the
 * request and implies FINAL. After a FINAL response (or an error) r belongs to the core
 * again and must not be used. A non-NULL return (owned by the caller) says the response
 * could not be sent (out of memory, an output in GPU memory): the core has then already
 * failed and finished the request with that error, so r must not be used either. */
cinfer_status *cinfer_request_respond(cinfer_request *r, const cinfer_tensor *outputs,
                                      uint32_t n, uint32_t flags, cinfer_status *error);
/* ABI 2.3. The same, with parameters for the response (keys and strings copied): what
 * Triton's TRITONBACKEND_ResponseSet*Parameter give a response. A key given twice, an
 * empty key or a string parameter without a value is refused with INVALID_ARG (the
 * request is then failed, as for any response that cannot be sent). Ignored with an
 * error. */
cinfer_status *cinfer_request_respond_params(cinfer_request *r, const cinfer_tensor *outputs,
                                             uint32_t n, uint32_t flags, cinfer_status *error,
                                             const cinfer_param *params, uint32_t n_params);

/* Registers a backend under iface->name (the core calls it once at start-up for each
 * backend it is built with; an embedding application may add its own before creating
 * the server). iface is borrowed for the life of the process. Returns an error (caller
 * owns it) naming both versions when the ABI does not match, or ALREADY_EXISTS when
 * another iface has the name; registering the same iface twice is a no-op. */
cinfer_status *cinfer_backend_register(const cinfer_backend_iface *iface);

/* ---- shared-object backends ------------------------------------------------------------
 *
 * A shared-object backend exports exactly one symbol:
 *
 *   CINFER_BACKEND_EXPORT const cinfer_backend_iface *
 *   cinfer_backend_entry(uint32_t core_abi_major, uint32_t core_abi_minor);
 *
 * The core calls it once, right after dlopen, with its own ABI version. It returns the
 * backend's iface (static storage, never freed), or NULL to refuse this core (the load then
 * fails naming the core's version). The core checks abi_major/abi_minor as for a built-in
 * backend and that iface->name is the name the library was loaded by, and registers it
 * itself: neither the entry nor the library's constructors may call
 * cinfer_backend_register (the core holds the backend table's lock meanwhile). */
#define CINFER_BACKEND_ENTRY_SYMBOL "cinfer_backend_entry"
#define CINFER_BACKEND_EXPORT __attribute__((visibility("default")))
typedef const cinfer_backend_iface *(*cinfer_backend_entry_fn)(uint32_t core_abi_major,
                                                                uint32_t core_abi_minor);

#ifdef __cplusplus
}
#endif
#endif
