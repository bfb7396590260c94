/* grpc.h: the KServe v2 / Triton gRPC endpoint of `cinfer serve`
 * (inference.GRPCInferenceService and grpc.health.v1.Health) on its own port: HTTP/2 from
 * nghttp2 on cinfer's event loops (src/net/loop.h), messages from protobuf-c. It is a
 * client of the in-process API (cinfer.h) like the HTTP frontend, and describes requests
 * with the same KServe rules (frontend/kserve.h). See docs/design/grpc.md. */
#ifndef CINFER_GRPC_H
#define CINFER_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h"

typedef struct grpc_server grpc_server;

typedef struct grpc_opts {
  const char *host;            /* NULL/"" = 0.0.0.0 */
  uint16_t port;               /* 0 = ephemeral (tests) */
  int io_threads;              /* loops, one SO_REUSEPORT listener each (default 1) */
  size_t max_message_bytes;    /* largest request message (after decompression) */
  int64_t max_tensor_elements; /* per input, as over HTTP */
  /* The system shared-memory registry shared with the HTTP endpoint (borrowed; it must
   * outlive the server). NULL: the shared-memory RPCs answer UNAVAILABLE and requests
   * naming a region are refused. */
  struct shm_registry *shm;
  /* Triton's --grpc-restricted-protocol values, "GROUP[,GROUP...]:KEY=VALUE" each (the
   * groups of net/apigroup.h): a call of a restricted group without metadata KEY: VALUE is
   * refused with PERMISSION_DENIED naming the group. */
  const char *const *restricted;
  size_t n_restricted;
  /* Triton's --grpc-use-ssl: TLS (1.2+, ALPN h2) with this certificate chain and key, both
   * reloaded when they change (net/tls.h). tls_ca set: mutual TLS, clients must present a
   * certificate it signed (--grpc-use-ssl-mutual with --grpc-root-cert). */
  const char *tls_cert, *tls_key, *tls_ca;
  /* Triton's --grpc-header-forward-pattern: call metadata whose key it matches become string
   * parameters of each inference request of the call (frontend/kserve.h, kserve_fwd). */
  const char *header_forward_pattern;
} grpc_opts;

cinfer_status *grpc_server_start(cinfer_server *s, const grpc_opts *o, grpc_server **out);
uint16_t grpc_server_port(const grpc_server *g);
/* Stops accepting, sends GOAWAY, lets calls in flight finish (bounded by timeout_ms). */
void grpc_server_shutdown(grpc_server *g, int timeout_ms);
/* Cancels what is left, waits until every call has completed, frees. NULL is a no-op. */
void grpc_server_destroy(grpc_server *g);

#endif
