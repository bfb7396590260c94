/* grpc_int.h: the gRPC side of the generator (`cinfer bench --grpc`), private to src/bench.
 *   grpc_client.c  blocking setup calls (ModelMetadata, ModelStatistics), request framing
 *   grpc_engine.c  the hot path: nghttp2 client sessions on the workers' epoll loops */
#ifndef CINFER_BENCH_GRPC_INT_H
#define CINFER_BENCH_GRPC_INT_H

#include <nghttp2/nghttp2.h>

#include "bench/bench_int.h"

/* One input tensor of a request: raw little-endian bytes (BYTES: 4-byte length + bytes). */
typedef struct bench_grpc_input {
  const char *name;
  cinfer_dtype dtype;
  int ndim;
  const int64_t *shape;
  const void *data;
  size_t len;
  const char *region;  /* --shared-memory system: the region holding data (len bytes), or NULL */
} bench_grpc_input;

#define BENCH_GRPC_HDR_SCRATCH 8192
#define BENCH_GRPC_NV_MAX (8 + BENCH_MAX_HEADERS)

/* The request headers of a call to path (POST, h2c, application/grpc, te: trailers, and
 * every --header as lower-cased metadata copied into scratch). Returns the count. */
int bench_grpc_headers(const bench_config *c, const char *path, nghttp2_nv *nv, int cap,
                       char *scratch, size_t scap);
/* "NOT_FOUND" for 5, ... */
const char *bench_grpc_status_name(int code);

/* Appends one framed ModelInferRequest for c's model with these inputs as
 * raw_input_contents; with --streaming it asks for the empty final response. */
cinfer_status *bench_grpc_request(const bench_config *c, const bench_grpc_input *in, int nin,
                                  const bench_grpc_output *outs, int nout, cbuf *out);

/* The engine behind bench_engine_* when c->grpc: engine.c collects, stops and counts
 * through its pacer (pacer.h) and destroys it (stopping first). */
typedef struct bench_grpc_engine bench_grpc_engine;
cinfer_status *bench_grpc_engine_start(const bench_config *c, const bench_addr *a,
                                       const bench_reqset *rs, const bench_loadspec *ls,
                                       bench_grpc_engine **out);
struct bench_pacer *bench_grpc_engine_pacer(bench_grpc_engine *e);
void bench_grpc_engine_destroy(bench_grpc_engine *e);

#endif
