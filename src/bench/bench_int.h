/* bench_int.h: private interfaces between the files of src/bench (not part of the
 * contract in bench.h; tests may use them).
 *   engine.c  epoll workers that drive the load (the hot path)
 *   target.c  pre-serialised requests for each target; metadata and stats
 *   client.c  a blocking one-shot HTTP client for setup (metadata, stats, reachability)
 *   run.c     load modes, warm-up, windows, stability, Ctrl-C
 *   report.c  table, JSON, CSV, SVG plot */
#ifndef CINFER_BENCH_INT_H
#define CINFER_BENCH_INT_H

#include <stdatomic.h>
#include <sys/socket.h>

#include "bench/bench.h"
#include "bench/report.h" /* error classes and results: levels, distributions, renderings */
#include "core/buf.h"
#include "core/clock.h"


/* splitmix64: the seeded generator for inputs, prompts and Poisson arrivals. */
static inline uint64_t bench_rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- the server address ---- */
typedef struct bench_addr {
  struct sockaddr_storage sa;
  socklen_t len;
  int family;
} bench_addr;
cinfer_status *bench_resolve(const bench_config *c, bench_addr *out);

/* ---- pre-serialised requests ---- */
typedef struct bench_req {
  char *data; /* full HTTP request: head and body (owned by the set) */
  size_t len;
} bench_req;

typedef struct bench_reqset {
  bench_req *v;
  size_t n;
  bool openai;        /* parse OpenAI responses (usage, SSE tokens) */
  bool stream;        /* expect text/event-stream */
  char path[720];     /* for messages */
  size_t input_bytes; /* tensor bytes per request (KServe) */
  char *system;       /* --conversation: the shared system prompt, or NULL */
  struct bench_shm *shm; /* --shared-memory system: the registered regions, or NULL */
  /* --grpc --shared-memory system: the model's outputs and their regions (names owned,
   * regions borrowed from shm) */
  struct bench_grpc_output *gouts;
  int n_gouts;
} bench_reqset;

typedef struct bench_grpc_output {
  char *name;
  const char *region;
  size_t size;
} bench_grpc_output;

/* --shared-memory system (shm.c): POSIX objects registered with the server. add copies
 * data (NULL: zeroes) into a new region of len bytes and registers it; *name is borrowed
 * until destroy, which unregisters, unmaps and unlinks every region. */
typedef struct bench_shm bench_shm;
cinfer_status *bench_shm_create(const bench_config *c, const bench_addr *a, bench_shm **out);
cinfer_status *bench_shm_add(bench_shm *s, const void *data, size_t len, const char **name);
void bench_shm_destroy(bench_shm *s);

/* Builds the requests for c's target (fetches KServe metadata over the network).
 * rs is owned by the caller; free with bench_reqset_free. */
cinfer_status *bench_reqset_build(const bench_config *c, const bench_addr *a, bench_reqset *rs);
void bench_reqset_free(bench_reqset *rs);

/* Setup only (client.c): poll fd for ev until deadline (clock_now_ns): poll's result, 0 at
 * the deadline. A blocking connect (TCP_NODELAY, bounded by deadline) for the setup clients
 * of both protocols; errors name the server ("cannot connect to HOST:PORT: ..."). */
int bench_wait_fd(int fd, short ev, uint64_t deadline);
cinfer_status *bench_connect_blocking(const bench_config *c, const bench_addr *a, uint64_t deadline,
                                     int *fd);

/* An OpenAI request to path (target.c, conversations too): adds the generator's fields to
 * the body j (max_tokens, ignore_eos, temperature 0, stream with usage), prints and deletes
 * j, and appends the whole HTTP request to b. */
struct cJSON;
cinfer_status *bench_openai_request(const bench_config *c, const char *path, struct cJSON *j,
                                    cbuf *b);

/* One blocking request (setup only): status and body (owned by caller, NUL-terminated). */
cinfer_status *bench_http_simple(const bench_config *c, const bench_addr *a, const char *method,
                                 const char *path, const char *body, size_t body_len,
                                 int timeout_ms, int *status, char **resp, size_t *resp_len);

/* KServe server-side statistics (cumulative), from GET .../stats. */
typedef struct bench_server_stats {
  bool ok;
  uint64_t success_count, queue_ns, cin_ns, infer_ns, cout_ns, exec_count, infer_count;
} bench_server_stats;
void bench_server_stats_get(const bench_config *c, const bench_addr *a, bench_server_stats *s);

/* --grpc (grpc_client.c): the model's metadata over gRPC, as the JSON text the HTTP endpoint
 * answers ({"name","inputs":[{"name","datatype","shape"}],"outputs":[...]}, caller frees),
 * and the server statistics from ModelStatistics. */
cinfer_status *bench_grpc_metadata_json(const bench_config *c, const bench_addr *a, char **json);
void bench_grpc_stats_get(const bench_config *c, const bench_addr *a, bench_server_stats *s);
/* System shared-memory regions over gRPC (SystemSharedMemoryRegister / Unregister). */
cinfer_status *bench_grpc_shm_register(const bench_config *c, const bench_addr *a, const char *name,
                                       const char *key, size_t byte_size);
void bench_grpc_shm_unregister(const bench_config *c, const bench_addr *a, const char *name);

/* ---- images (image.c) ---- */
/* Decodes a PNG or JPEG file to 8-bit RGB (*rgb: w*h*3 bytes, caller frees). */
cinfer_status *bench_image_load(const char *path, uint8_t **rgb, int *w, int *h);
/* Bilinear resize (half-pixel centres) of RGB8 src to float RGB dst (dw*dh*3). */
void bench_image_resize(const uint8_t *src, int sw, int sh, float *dst, int dw, int dh);

/* ---- conversations (conv.c, --conversation) ---- */
typedef struct bench_conv {
  struct cJSON *msgs;  /* the history: [system], user, assistant, ..., user */
  int turn;            /* answers so far in this conversation */
  bool pending;        /* req holds a turn not yet answered (sent again on retry) */
  uint64_t rng;
  uint64_t ready_at;   /* the user thinks until then */
  uint64_t conversations; /* finished */
  cbuf reply;          /* the assistant text of the answer arriving */
  bench_req req;       /* the turn's request (owned) */
} bench_conv;
/* The shared system prompt (malloc'd; NULL when --system-prompt-len is 0). */
cinfer_status *bench_conv_system(const bench_config *c, char **out);
void bench_conv_init(bench_conv *cv, uint64_t seed);
void bench_conv_free(bench_conv *cv);
void bench_conv_start(bench_conv *cv, const bench_config *c, const char *system, uint64_t now);
/* Builds cv->req for the next turn (or keeps the unanswered one). */
cinfer_status *bench_conv_build(bench_conv *cv, const bench_config *c, const char *system);
void bench_conv_on_event(bench_conv *cv, const char *data, size_t n);
void bench_conv_on_body(bench_conv *cv, const char *body, size_t n);
/* The answer ended: ok appends it to the history (and may end the conversation); else the
 * same turn is asked again. Either way the user thinks before the next request. */
void bench_conv_done(bench_conv *cv, const bench_config *c, bool ok, uint64_t now);

/* ---- measurement sample (one window, one worker) ---- */

typedef struct bench_sample {
  bench_hist *lat, *ttft, *itl, *tpot;
  bench_hist *refused;  /* time to a 429 or 503 answer (admission refusals) */
  uint64_t ok, err[BENCH_ERR_N];
  uint64_t status[600];
  uint64_t bytes_in, tokens_out, tokens_in;
  char first_error[200];
} bench_sample;

bench_sample *bench_sample_create(void);
void bench_sample_destroy(bench_sample *s);
void bench_sample_reset(bench_sample *s);
void bench_sample_merge(bench_sample *dst, const bench_sample *src);
uint64_t bench_sample_errors(const bench_sample *s);

/* ---- the engine ---- */
typedef struct bench_loadspec {
  bool open;         /* open loop (rate) vs closed loop (concurrency) */
  int concurrency;
  double rate;       /* requests/s, open loop */
  bool poisson;
  int64_t requests;  /* >0: stop after this many requests */
} bench_loadspec;

typedef struct bench_engine bench_engine;
/* Starts the workers. c, a and rs are borrowed and must outlive the engine. */
cinfer_status *bench_engine_start(const bench_config *c, const bench_addr *a,
                                  const bench_reqset *rs, const bench_loadspec *ls,
                                  bench_engine **out);
/* Moves what the workers measured since the last collect into `into` (merged). */
void bench_engine_collect(bench_engine *e, bench_sample *into);
/* Fixed-count mode: true once every request has finished. */
bool bench_engine_done(bench_engine *e);
/* Stops sending, waits (bounded by the timeout) for requests in flight, joins the
 * workers. What they measured can still be collected afterwards. */
void bench_engine_stop(bench_engine *e);
void bench_engine_destroy(bench_engine *e); /* stops if needed, frees; NULL is a no-op */
int bench_engine_threads(const bench_engine *e);

#endif
