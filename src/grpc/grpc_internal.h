/* grpc_internal.h: what the transport (grpc_server.c) and the RPC handlers
 * (grpc_service.c) share. Everything here runs on the connection's loop thread unless it
 * says otherwise.
 *
 * A gstream is one RPC (one HTTP/2 stream). The transport frames incoming DATA into
 * messages and calls the method's handler once per message (unary: once, after the
 * client's END_STREAM). Handlers answer with gstream_send (a framed message) and
 * gstream_finish (the status, as trailers). Work that completes later (an inference, a
 * model load) is a gop attached to the stream: the stream may be reset or its connection
 * closed before the work completes; then gop_stream() returns NULL, on_detach has run
 * (it cancels the request), and the op still completes normally (gop_done). */
#ifndef CINFER_GRPC_INTERNAL_H
#define CINFER_GRPC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "cinfer/cinfer.h"
#include "core/buf.h"
#include "frontend/kserve.h"
#include "grpc/grpc.h"
#include "net/apigroup.h"
#include "net/loop.h"

typedef struct gconn gconn;
typedef struct gstream gstream;
typedef struct gloop gloop;

typedef void (*grpc_handler)(gstream *gs, const uint8_t *msg, size_t len);

typedef struct grpc_method {
  const char *path;  /* "/inference.GRPCInferenceService/ModelInfer" */
  bool streaming;    /* bidirectional: handler per message, responses any time */
  grpc_handler fn;
} grpc_method;

/* The method table (grpc_service.c). */
const grpc_method *grpc_find_method(const char *path, size_t len);

struct grpc_server {
  cinfer_server *server;
  kserve_limits limits;
  size_t max_msg;
  shm_registry *shm;      /* borrowed (grpc_opts.shm) */
  api_restrictions restrict_; /* --grpc-restricted-protocol */
  kserve_fwd fwd;         /* --grpc-header-forward-pattern */
  bool restricted;        /* any group is */
  struct net_tls *tls;    /* --grpc-use-ssl, else NULL */
  uint16_t port;
  gloop *loops;
  int n_loops;
  pthread_mutex_t mu;     /* inflight, cv */
  pthread_cond_t cv;
  size_t inflight;        /* attached ops not yet done */
};

grpc_server *gstream_server(gstream *gs);
/* The call's metadata that --grpc-header-forward-pattern matched (kept as received), for
 * kserve_fwd_header on each request of the call. */
const http_header *gstream_forwarded(const gstream *gs, size_t *n);
/* Appends framed message bytes (from grpc_pack) to the stream's output and sends the
 * response headers first if needed. b is emptied. */
void gstream_send(gstream *gs, cbuf *b);
/* Ends the RPC with a gRPC status and message (trailers; trailers-only when nothing was
 * sent). Later sends and finishes are ignored. */
void gstream_finish(gstream *gs, int status, const char *msg);
/* gstream_finish with the status's mapped code and message; frees st. */
void gstream_finish_status(gstream *gs, cinfer_status *st);
bool gstream_finished(const gstream *gs);

typedef struct gop {
  gconn *c;
  gstream *gs;                   /* NULL once detached */
  struct gop *next, *prev;       /* in gs's list */
  void (*on_detach)(struct gop *op);
} gop;

/* Attaches op to gs (counts as in flight until gop_done). */
void gop_attach(gstream *gs, gop *op, void (*on_detach)(gop *op));
gstream *gop_stream(gop *op);
/* Any thread. The loop that gop_done and the op's deliveries must run on. */
net_loop *gop_loop(const gop *op);
/* The op is complete: detaches it; ends a streaming RPC whose client has half-closed when
 * this was its last op; flushes the connection. The op's memory is the caller's again. */
void gop_done(gop *op);
/* Sends what the op's stream queued (call after gstream_send from a delivery). */
void gop_flush(gop *op);

#endif
