/* cinfer/cinfer.h: the in-process inference server. The CLI and the HTTP frontend are
 * clients of this API; an embedding application can be one too.
 *
 *   server  = a model repository + loaded models + their schedulers and instances
 *   model   = one loaded version of one model; reference-counted so that an unload or
 *             reload never frees a model that an admitted request still uses
 *   request = named input tensors + requested outputs + parameters; reference-counted
 *   response= what the model produced for a request (0..N per request, the last FINAL)
 *
 * Threading: every function is thread-safe. Response callbacks run on an instance worker
 * thread (or the backend's own thread for decoupled models) and must not block.
 */
#ifndef CINFER_CINFER_H
#define CINFER_CINFER_H

#include "cinfer/backend.h"
#include "cinfer/types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cinfer_model_config; /* the core's parsed config.pbtxt; not part of the backend ABI */
typedef struct cinfer_server cinfer_server;
typedef struct cinfer_model cinfer_model;
typedef struct cinfer_response cinfer_response;

typedef enum cinfer_model_control {
  CINFER_MODEL_CONTROL_NONE = 0, /* load everything at start, never change */
  CINFER_MODEL_CONTROL_POLL,     /* load everything, then follow repository changes */
  CINFER_MODEL_CONTROL_EXPLICIT  /* load only what is asked (startup list, load API) */
} cinfer_model_control;

typedef struct cinfer_server_options {
  const char *model_repository;         /* borrowed for the call */
  cinfer_model_control control_mode;
  const char *const *startup_models;    /* EXPLICIT mode: names to load; "*" = all */
  size_t n_startup_models;
  int repository_poll_secs;             /* POLL mode interval; default 15 */
  int threads;                          /* whole-process budget; 0 = number of CPUs */
  int io_threads;                       /* part of the budget kept for the frontend */
  bool strict_readiness;                /* ready only when every model loaded (Triton) */
  /* Where backends that are not built in are loaded from: backend "foo" is
   * <backend_directory>/foo/libcinfer_foo.so (see cinfer/backend.h). NULL or "": built-in
   * backends only. Borrowed for the call; must be a readable folder when given. */
  const char *backend_directory;
} cinfer_server_options;

/* Creates the server and loads the models the control mode asks for. A model that fails
 * to load is recorded UNAVAILABLE with its reason; it does not fail the server unless the
 * repository itself cannot be read. *out is owned by the caller. */
cinfer_status *cinfer_server_create(const cinfer_server_options *opts, cinfer_server **out);
/* Stops polling, unloads every model, waits until every model is destroyed (so requests
 * in flight complete first; a model or request the caller never releases makes it wait
 * forever), frees everything. */
void cinfer_server_destroy(cinfer_server *s);
bool cinfer_server_is_live(const cinfer_server *s);
bool cinfer_server_is_ready(const cinfer_server *s);
/* From now on the server reports not ready and rejects new requests with UNAVAILABLE;
 * in-flight requests finish. Returns the number of requests still in flight. */
void cinfer_server_begin_shutdown(cinfer_server *s);
size_t cinfer_server_inflight(const cinfer_server *s);

/* ---- models ------------------------------------------------------------------------ */

/* The longest model name, in bytes (without the terminating NUL). A model is a folder of the
 * repository, and a folder name is at most NAME_MAX (255) bytes on Linux, so no name the
 * repository can hold is refused. The one limit of every front end: an HTTP path segment
 * (net/http.h HTTP_PATH_SEG_CAP), the OpenAI `model`, gRPC's model_name, and the loader
 * (a `file:` load, which needs no folder, too). */
#define CINFER_MODEL_NAME_MAX 255
/* NULL when name can be a model's name; else INVALID_ARG naming the limit: "model name of N
 * bytes is longer than the limit of 255 bytes (CINFER_MODEL_NAME_MAX)", or "model name is
 * empty". Loads, unloads and lookups (cinfer_server_model_acquire) check it, so a front end
 * that passes a name on gets this answer. */
cinfer_status *cinfer_model_name_check(const char *name);

/* Loads (or reloads) every version the model's version_policy selects. config_json, when
 * non-NULL, is a ModelConfig in Triton's JSON form (what GET .../config returns) that
 * replaces config.pbtxt for this load (Triton's load-with-config); borrowed for the call.
 * The old versions keep serving until the new ones are ready, then drain and unload.
 * Load and unload return CINFER_UNAVAILABLE unless control_mode is EXPLICIT (Triton:
 * "explicit model load / unload is not allowed if polling is enabled"). */
cinfer_status *cinfer_server_load_model(cinfer_server *s, const char *name,
                                        const char *config_json);
cinfer_status *cinfer_server_unload_model(cinfer_server *s, const char *name);

typedef struct cinfer_model_index_entry {
  char *name;
  int64_t version;     /* -1 when no version could be determined */
  const char *state;   /* "UNAVAILABLE", "LOADING", "READY", "UNLOADING"; static */
  char *reason;        /* "" when none */
} cinfer_model_index_entry;

/* Lists every model in the repository with each known version's state. The array and its
 * strings are owned by the caller: free with cinfer_model_index_free. */
cinfer_status *cinfer_server_repository_index(cinfer_server *s, bool ready_only,
                                              cinfer_model_index_entry **out, size_t *n);
void cinfer_model_index_free(cinfer_model_index_entry *e, size_t n);

/* Finds a READY model; version 0 = the highest ready version. The caller owns one reference
 * and releases it with cinfer_model_release. NOT_FOUND names the model/version; UNAVAILABLE
 * when it exists but is not ready. */
cinfer_status *cinfer_server_model_acquire(cinfer_server *s, const char *name,
                                           int64_t version, cinfer_model **out);
void cinfer_model_release(cinfer_model *m);
const char *cinfer_model_name(const cinfer_model *m);
int64_t cinfer_model_version(const cinfer_model *m);
/* m's configuration through the public accessors of cinfer/backend.h (cinfer_config_*,
 * cinfer_config_json for Triton's JSON form); borrowed while m is held. */
const cinfer_config *cinfer_model_config_get(const cinfer_model *m);
const char *cinfer_model_platform(const cinfer_model *m);  /* "onnxruntime_onnx", ... */
bool cinfer_model_is_decoupled(const cinfer_model *m);
/* Whether every request of m gets exactly one response, so that a one-answer protocol (gRPC
 * ModelInfer) or a plain ensemble step can serve it: false when its config says
 * model_transaction_policy { decoupled: true }, or its backend is decoupled and decides that
 * itself (the LLM backends). The python backend takes over every request, but its models
 * are decoupled only by their config, as on Triton. */
bool cinfer_model_answers_once(const cinfer_model *m);
/* The name of the backend serving m ("onnxruntime", "llm", ...). */
const char *cinfer_model_backend_name(const cinfer_model *m);
/* The model's directory in the repository (label files of the classification extension
 * are read from it); borrowed while m is held. */
const char *cinfer_model_directory(const cinfer_model *m);
/* Text services of generative models: the backend's optional methods (backend.h, ABI
 * 1.1). A backend without one answers CINFER_UNSUPPORTED "model 'M' does not support ...".
 * Thread-safe; outputs are malloc'd and owned by the caller. */
bool cinfer_model_is_generative(const cinfer_model *m);   /* decoupled, and tokenizes */
bool cinfer_model_supports_chat(const cinfer_model *m);   /* has render_chat */
cinfer_status *cinfer_model_tokenize(const cinfer_model *m, const char *text, size_t len,
                                     bool add_special, bool parse_special, int32_t **ids,
                                     size_t *n);
cinfer_status *cinfer_model_detokenize(const cinfer_model *m, const int32_t *ids, size_t n,
                                       bool special, char **text, size_t *len);
cinfer_status *cinfer_model_render_chat(const cinfer_model *m, const char *const *roles,
                                        const char *const *contents, size_t n,
                                        bool add_generation_prompt, char **out);
/* The tokenizer's description as a JSON object (backend.h, ABI 2.2 tokenizer_info). */
cinfer_status *cinfer_model_tokenizer_info(const cinfer_model *m, char **json);
/* The backend's current metrics (backend.h); returns how many it has (may exceed cap). */
uint32_t cinfer_model_backend_metrics(const cinfer_model *m, cinfer_backend_metric *out,
                                      uint32_t cap);
/* Ready versions of a model name, highest first; returns how many were written. */
size_t cinfer_server_model_versions(cinfer_server *s, const char *name, int64_t *versions,
                                    size_t cap);

/* ---- requests ---------------------------------------------------------------------- */

/* Called once per response. flags has CINFER_RESPONSE_FINAL on the last one. The callee
 * owns resp (free with cinfer_response_free, from any thread). */
typedef void (*cinfer_response_fn)(void *user, cinfer_response *resp, uint32_t flags);

/* Creates a request for model m (the request takes its own reference on m). The caller
 * owns one reference to the request. */
cinfer_status *cinfer_request_create(cinfer_model *m, cinfer_request **out);
void cinfer_request_ref(cinfer_request *r);
void cinfer_request_release(cinfer_request *r);
void cinfer_request_set_id(cinfer_request *r, const char *id, size_t len); /* copied */
/* Adds an input. The name is copied; the data is borrowed until the FINAL response has
 * been delivered (the frontend keeps the received body alive that long). Checks the name,
 * datatype and shape against the model config and byte size against shape x dtype. */
cinfer_status *cinfer_request_add_input(cinfer_request *r, const cinfer_tensor *t);
/* The same, and on success the request takes `owned` (malloc'd, freed with free() when the
 * request is destroyed): for data the frontend had to convert. On error the caller keeps
 * it. */
cinfer_status *cinfer_request_add_input_owned(cinfer_request *r, const cinfer_tensor *t,
                                              void *owned);
/* Restricts the outputs returned (none added = all). Unknown names are an error. */
cinfer_status *cinfer_request_add_output(cinfer_request *r, const char *name);
cinfer_status *cinfer_request_set_param_string(cinfer_request *r, const char *key,
                                               const char *val, size_t len);
cinfer_status *cinfer_request_set_param_int(cinfer_request *r, const char *key, int64_t v);
cinfer_status *cinfer_request_set_param_double(cinfer_request *r, const char *key, double v);
cinfer_status *cinfer_request_set_param_bool(cinfer_request *r, const char *key, bool v);
void cinfer_request_set_callback(cinfer_request *r, cinfer_response_fn fn, void *user);
/* Marks the request cancelled (the client went away). Queued requests are dropped without
 * running; decoupled backends see cinfer_request_is_cancelled(). */
void cinfer_request_cancel(cinfer_request *r);

/* Submits the request. On success the callback will run exactly once with FINAL (possibly
 * carrying an error: queue full, timeout, backend failure). On error nothing was
 * submitted and no callback runs. Either way the caller keeps its own reference. */
cinfer_status *cinfer_server_infer_async(cinfer_server *s, cinfer_request *r);

/* Coalesced wake-ups, per calling thread: between begin and flush, requests submitted by
 * this thread are queued as usual but the model's workers are woken once, at flush,
 * instead of once per request. A thread that submits several requests in a burst (an
 * I/O thread handling one epoll batch) saves a futex wake and a context switch per
 * request and hands the batcher the whole burst at once. flush without begin is a no-op. */
void cinfer_server_defer_wakeups_begin(void);
void cinfer_server_defer_wakeups_flush(void);

/* ---- responses --------------------------------------------------------------------- */

const cinfer_status *cinfer_response_error(const cinfer_response *resp); /* borrowed */
uint32_t cinfer_response_output_count(const cinfer_response *resp);
const cinfer_tensor *cinfer_response_output(const cinfer_response *resp, uint32_t i);
cinfer_request *cinfer_response_request(const cinfer_response *resp); /* borrowed */
/* The response's parameters (Triton's response parameters: a Python model's
 * InferenceResponse(parameters=...), an ensemble's sequence flags); borrowed from resp. */
uint32_t cinfer_response_param_count(const cinfer_response *resp);
const cinfer_param *cinfer_response_param(const cinfer_response *resp, uint32_t i);
void cinfer_response_free(cinfer_response *resp);

/* ---- statistics and metrics -------------------------------------------------------- */

typedef struct cinfer_duration_stat {
  uint64_t count;
  uint64_t ns;
} cinfer_duration_stat;

typedef struct cinfer_model_stats {
  char name[CINFER_MODEL_NAME_MAX + 1];
  int64_t version;
  uint64_t last_inference_ms;   /* unix time of the last inference, ms */
  uint64_t inference_count;     /* rows inferred (batch dim counted) */
  uint64_t execution_count;     /* backend executions (batches) */
  cinfer_duration_stat success, fail, queue, compute_input, compute_infer, compute_output;
} cinfer_model_stats;

/* Statistics of every loaded version (name NULL) or of one model (version 0 = all its
 * versions). The array is owned by the caller (free()). */
cinfer_status *cinfer_server_model_stats(cinfer_server *s, const char *name, int64_t version,
                                         cinfer_model_stats **out, size_t *n);
/* Prometheus text exposition of everything the server measures. Caller frees *text. */
cinfer_status *cinfer_server_metrics_text(cinfer_server *s, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
