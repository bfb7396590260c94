/* frontend.h: the HTTP frontend of `cinfer serve`: KServe v2 (health, metadata, config,
 * infer with JSON and binary tensors, repository, statistics) and /metrics, on the
 * src/net HTTP server. It translates HTTP to the in-process API (cinfer.h) and back; it
 * never knows how a model runs. */
#ifndef CINFER_FRONTEND_H
#define CINFER_FRONTEND_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/cinfer.h"

struct http_exchange;
struct http_request;

typedef struct frontend frontend;

typedef struct frontend_opts {
  const char *host;
  uint16_t http_port;          /* 0 = ephemeral (tests) */
  int metrics_port;            /* -1 = none (metrics only on the HTTP port) */
  int io_threads;
  size_t max_body_bytes;       /* 413 beyond */
  int64_t max_tensor_elements; /* per input; 400 beyond */
  /* Triton's --http-max-input-size: the inflated size of a compressed body, the JSON
   * header, a raw binary body, each JSON input's bytes. 0 = Triton's 64 MiB. */
  size_t max_input_bytes;
  /* HTTP chunked bodies: at most this many chunks (0 = net's default); 400 beyond. */
  size_t max_body_chunks;
  int header_timeout_ms, body_timeout_ms, idle_timeout_ms;
  const char *tls_cert, *tls_key;  /* both set: HTTPS on the HTTP port (reloaded on change) */
  /* Triton's --http-restricted-api values, "GROUP[,GROUP...]:KEY=VALUE" each (net/apigroup.h):
   * a call of a restricted group without that header is refused with 403 naming the group. */
  const char *const *restricted_api;
  size_t n_restricted_api;
  /* Triton's --http-header-forward-pattern: matching request headers become string parameters
   * of infer and generate requests (kserve.h, kserve_fwd); NULL = none. */
  const char *header_forward_pattern;
  /* The system shared-memory registry (frontend/shm.h), borrowed: serve.c creates one and
   * hands it to the HTTP and gRPC endpoints, so a region registered on one is usable on the
   * other. NULL: the frontend makes its own. */
  struct shm_registry *shm;
  /* Pages of another subsystem on the HTTP port, asked before the KServe routes (after
   * --http-restricted-api): true when it answered. serve.c mounts the /streams live page
   * of src/streams with --streams-page. NULL: none. */
  bool (*extra_route)(void *user, struct http_exchange *ex, const struct http_request *req);
  void *extra_route_user;
} frontend_opts;

cinfer_status *frontend_start(cinfer_server *s, const frontend_opts *o, frontend **out);
uint16_t frontend_http_port(const frontend *f);
uint16_t frontend_metrics_port(const frontend *f); /* 0 when none */
/* Stops accepting, lets in-flight exchanges finish (bounded by timeout_ms). */
void frontend_shutdown(frontend *f, int timeout_ms);
void frontend_destroy(frontend *f);

#endif
