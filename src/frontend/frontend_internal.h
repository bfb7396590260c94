/* frontend_internal.h: what the KServe and OpenAI halves of the HTTP frontend share. */
#ifndef CINFER_FRONTEND_INTERNAL_H
#define CINFER_FRONTEND_INTERNAL_H

#include "cinfer/trace.h"
#include "net/apigroup.h"
#include "frontend/frontend.h"
#include "frontend/compress.h"
#include "frontend/kserve.h"
#include "frontend/shm.h"
#include "metrics/metrics.h"
#include "net/http.h"

struct frontend {
  cinfer_server *server;
  http_server *http, *metrics_http;
  kserve_limits limits;
  net_tls *tls;                 /* HTTPS on the HTTP port, or NULL */
  api_restrictions restrict_;   /* --http-restricted-api */
  kserve_fwd fwd;               /* --http-header-forward-pattern */
  shm_registry *shm;            /* system shared-memory regions (kserve_ext.c) */
  bool shm_owned;               /* created here (else borrowed from frontend_opts) */
  bool (*extra_route)(void *, struct http_exchange *, const struct http_request *); /* frontend_opts */
  void *extra_route_user;
};

/* Triton's shared-memory extension routes (kserve_ext.c): /v2/systemsharedmemory/... and
 * /v2/cudasharedmemory/... (refused with a clear error: no GPU). Returns false when the
 * path is not one of them (the exchange is then untouched). */
bool kserve_ext_route(frontend *fe, http_exchange *ex, const http_request *req,
                      const http_path_segs *p);
/* Inflates the body of a request with Content-Encoding gzip/deflate (limit: the frontend's
 * max_input_bytes). *body is NULL for an identity body. On error *http_status is 400
 * (corrupt, unsupported encoding) or 413 (too large). */
cinfer_status *kserve_ext_inflate(frontend *fe, const http_request *req, void **body,
                                  size_t *len, int *http_status);
/* Answers a successful infer response, compressed when the request's Accept-Encoding asks
 * (Triton compresses inference responses only). Takes ownership of body (free()). */
void kserve_ext_respond_infer(http_exchange *ex, compress_kind kind, const http_header *h,
                              size_t nh, char *body, size_t len);

/* --http-header-forward-pattern: the request's matching headers as parameters of r. */
cinfer_status *frontend_forward_headers(frontend *fe, const http_request *req, cinfer_request *r);

/* frontend.c's answers, for every route: Triton's {"error": msg} with `status` (500 with
 * "out of memory" when the body cannot be built); respond_status takes st and answers
 * with its code's HTTP status. parse_version: a version segment ("1".."999999999999999999"). */
void respond_error(http_exchange *ex, int status, const char *msg);
void respond_status(http_exchange *ex, cinfer_status *st);
bool parse_version(const char *s, int64_t *v);

/* The server's metrics registry (src/server), for frontend-owned metric families. */
metrics_registry *cinfer_server_metrics_registry(cinfer_server *s);

/* OpenAI-compatible routes (/v1/..., /tokenize, /detokenize, /health). Returns false when
 * the path is not one of them (the exchange is then untouched). */
bool openai_route(frontend *fe, http_exchange *ex, const http_request *req);
/* Refreshes the backend metrics of every loaded model (cinfer_model_backend_metrics: the
 * llm backend's sequences, KV usage and token counters) before /metrics. */
void openai_update_metrics(cinfer_server *s);

/* Triton's generate extension (generate.c): /v2/models/M[/versions/V]/generate[_stream].
 * Returns false when the path is not one of them (the exchange is then untouched). */
bool generate_route(frontend *fe, http_exchange *ex, const http_request *req,
                    const http_path_segs *p);
/* The generate mapping alone (fuzz/fuzz_generate.c): a request for m from a generate body;
 * *id is the body's "id" or NULL (malloc'd). On error nothing is left to free. */
cinfer_status *generate_build_request(cinfer_model *m, const char *body, size_t len,
                                      size_t max_elems, cinfer_request **out, char **id);
/* Triton's trace and logging extensions (settings.c): /v2/trace/setting,
 * /v2/models/M/trace/setting, /v2/logging. Returns false when the path is not one of them. */
bool settings_route(frontend *fe, http_exchange *ex, const http_request *req,
                    const http_path_segs *p);
/* The parsers alone (fuzz/fuzz_settings.c): false with *status and msg set for a bad body. */
bool settings_parse_trace(const char *body, size_t len, cinfer_trace_update *u, int *status,
                          char *msg, size_t cap);
typedef struct settings_log_update {
  int on[3];          /* LOG_ERROR, LOG_WARN, LOG_INFO: 1 on, 0 off, -1 unchanged */
  long long verbose;  /* -1 unchanged */
  char format[16];    /* "" unchanged */
} settings_log_update;
bool settings_parse_logging(const char *body, size_t len, settings_log_update *u, int *status,
                            char *msg, size_t cap);

#endif
