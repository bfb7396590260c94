/* bench.h: the contract of cinfer_bench, the load generator behind `cinfer bench`.
 *
 * Pieces, each usable (and unit-tested) on its own:
 *   - bench_hist:   HDR histogram of uint64 values (nanoseconds), exact to 3 significant
 *                   digits (every recorded value lands in a bucket whose width is at most
 *                   1/1024 of its lower edge), mergeable, exact min/max/mean/stddev.
 *   - bench_http_resp: resumable HTTP/1.1 response parser (status line, Content-Length,
 *                   chunked, read-until-close), copying nothing.
 *   - bench_sse:    Server-Sent-Events line parser (OpenAI streaming).
 *   - bench_stable: perf_analyzer's stability rule over measurement windows.
 *   - bench_config / bench_args_parse: the command line.
 *   - bench_main:   the whole tool (targets, load modes, measurement, reports).
 *
 * Conventions: functions that can fail return cinfer_status * (NULL = OK, caller frees);
 * destroy(NULL) is a no-op; "borrowed" pointers are valid only for the call.
 */
#ifndef CINFER_BENCH_H
#define CINFER_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

/* ---- HDR histogram ------------------------------------------------------------------ */

/* Values 0 .. BENCH_HIST_MAX (2^40 - 1 ns, about 18 minutes); larger values are clamped
 * to the maximum and counted in `clamped`. Sub-bucket count 2048 (half 1024): values below
 * 2048 are exact; above, the bucket holding v is [v & ~(2^s - 1), +2^s) with
 * s = msb(v) - 10, so its width is <= 1/1024 of its lower edge (3 significant digits). */
#define BENCH_HIST_SUB_BITS 10
#define BENCH_HIST_MAX_BITS 40
#define BENCH_HIST_MAX ((UINT64_C(1) << BENCH_HIST_MAX_BITS) - 1)
#define BENCH_HIST_BUCKETS \
  ((BENCH_HIST_MAX_BITS - BENCH_HIST_SUB_BITS + 1) << BENCH_HIST_SUB_BITS)

typedef struct bench_hist bench_hist;

bench_hist *bench_hist_create(void); /* NULL on out of memory */
void bench_hist_destroy(bench_hist *h);
void bench_hist_reset(bench_hist *h);
/* Hot path: no allocation, a few instructions. */
void bench_hist_record(bench_hist *h, uint64_t v);
/* dst += src (counts, min, max, sums). */
void bench_hist_merge(bench_hist *dst, const bench_hist *src);
uint64_t bench_hist_count(const bench_hist *h);
uint64_t bench_hist_min(const bench_hist *h);   /* exact; 0 when empty */
uint64_t bench_hist_max(const bench_hist *h);   /* exact; 0 when empty */
double bench_hist_mean(const bench_hist *h);    /* exact (from the running sum) */
double bench_hist_stddev(const bench_hist *h);  /* population stddev, exact sums */
/* Nearest-rank percentile (p in [0,100]): the value at rank ceil(p/100 * count) of the
 * sorted values, reported as the highest value equivalent to it at this precision
 * (clamped to the exact max). 0 when empty. */
uint64_t bench_hist_percentile(const bench_hist *h, double p);
/* Bucket helpers (exposed for tests): index of v, and the lowest / highest value that
 * share v's bucket. */
size_t bench_hist_index(uint64_t v);
uint64_t bench_hist_lowest_equiv(uint64_t v);
uint64_t bench_hist_highest_equiv(uint64_t v);

/* ---- HTTP/1.1 response parser ------------------------------------------------------- */

typedef enum {
  BENCH_HTTP_MORE = 0, /* need more bytes (not an error) */
  BENCH_HTTP_DONE = 1, /* one complete response */
  BENCH_HTTP_ERROR = -1
} bench_http_rc;

/* Called with body bytes (after de-chunking) as they arrive; borrowed. */
typedef void (*bench_body_fn)(void *ud, const char *p, size_t n);

typedef struct bench_http_resp {
  /* results, valid once the header is parsed */
  int status;            /* 200, 404, ... */
  bool chunked;
  bool conn_close;       /* server said Connection: close (or HTTP/1.0 without keep-alive) */
  bool event_stream;     /* Content-Type: text/event-stream */
  bool header_done;
  int64_t content_length; /* -1 when absent */
  uint64_t body_bytes;   /* de-chunked body bytes seen so far */
  const char *error;     /* static text when BENCH_HTTP_ERROR was returned */
  /* private state */
  int st;
  size_t scanned;        /* header bytes already searched for the blank line */
  uint64_t remaining;    /* bytes left in the body or the current chunk */
  int chunk_digits;
  bool is_head;          /* the request was HEAD: no body whatever the header says */
} bench_http_resp;

/* Prepares r for a new response. */
void bench_http_resp_init(bench_http_resp *r, bool is_head);
/* Feeds bytes. The header must arrive contiguous: until it is complete the parser consumes
 * nothing (returns MORE with *consumed = 0) and the caller keeps the bytes and appends more
 * after them. Once the header is complete every body byte given is consumed up to the end
 * of the response; on DONE, *consumed tells where the next response begins. Body bytes go
 * to on_body (may be NULL). max_header: a header longer than this is an error. */
bench_http_rc bench_http_feed(bench_http_resp *r, const char *data, size_t len,
                              size_t *consumed, bench_body_fn on_body, void *ud,
                              size_t max_header);
/* The peer closed the connection: DONE when the body was delimited by the close, else
 * ERROR (truncated response). */
bench_http_rc bench_http_eof(bench_http_resp *r);

/* ---- Server-Sent Events -------------------------------------------------------------- */

/* One event: the `data:` lines joined by '\n' (borrowed). */
typedef void (*bench_sse_fn)(void *ud, const char *data, size_t n);

typedef struct bench_sse {
  char *line;   /* current line (owned, fixed capacity) */
  size_t line_len, cap;
  char *data;   /* current event's data (owned, fixed capacity) */
  size_t data_len;
  bool has_data;
  bool last_cr;
  bool overflow;
} bench_sse;

/* cap: longest line and event accepted. Returns NULL status or out-of-memory. */
cinfer_status *bench_sse_init(bench_sse *s, size_t cap);
void bench_sse_reset(bench_sse *s); /* between streams; keeps the buffers */
void bench_sse_free(bench_sse *s);
/* Feeds body bytes; calls on_event per complete event. Returns false when a line or an
 * event exceeded cap (the stream is then unusable). */
bool bench_sse_feed(bench_sse *s, const char *p, size_t n, bench_sse_fn on_event, void *ud);

/* Minimal JSON peeks used on streamed chunks (no allocation): the integer after "key":
 * (first occurrence; false when absent or not an integer), and whether "key": is followed
 * by a non-empty string. */
bool bench_json_peek_int(const char *p, size_t n, const char *key, int64_t *out);
bool bench_json_peek_nonempty_string(const char *p, size_t n, const char *key);

/* ---- stability rule ----------------------------------------------------------------- */

/* perf_analyzer's rule: the last `k` windows are stable when, for throughput and for
 * latency separately, every value is within tol (e.g. 0.10) of their mean:
 * max/mean - 1 <= tol and 1 - min/mean <= tol. Needs n >= k; a window with no completed
 * requests is never stable. */
bool bench_stable(const double *throughput, const double *latency, size_t n, size_t k,
                  double tol);

/* ---- configuration ------------------------------------------------------------------ */

typedef enum {
  BENCH_TARGET_NONE = 0,
  BENCH_TARGET_HTTP_GET,  /* --http-get PATH */
  BENCH_TARGET_HTTP_POST, /* --http-post PATH --body FILE */
  BENCH_TARGET_KSERVE,    /* --model NAME (KServe v2 infer) */
  BENCH_TARGET_OPENAI     /* --openai chat|completions --model NAME */
} bench_target;

typedef enum { BENCH_LOAD_CLOSED = 0, BENCH_LOAD_RATE, BENCH_LOAD_STRESS, BENCH_LOAD_SLO } bench_load;

#define BENCH_MAX_LEVELS 64
#define BENCH_MAX_SHAPES 16
#define BENCH_MAX_HEADERS 16

typedef struct bench_shape_opt {
  char name[128];
  int ndim;
  int64_t dims[CINFER_MAX_DIMS];
} bench_shape_opt;

typedef struct bench_config {
  /* target */
  char host[256];
  char port[8];
  char host_header[300]; /* "host:port" as sent */
  bench_target target;
  const char *path;       /* raw modes; borrowed from argv */
  const char *body_file;  /* --body */
  const char *content_type;
  const char *headers[BENCH_MAX_HEADERS]; /* --header "Name: value", borrowed from argv */
  int n_headers;
  const char *model;
  const char *model_version;
  bench_shape_opt shapes[BENCH_MAX_SHAPES];
  int n_shapes;
  bool binary;
  bool grpc;              /* --grpc: KServe v2 over gRPC (ModelInfer) instead of HTTP */
  bool grpc_stream;       /* --streaming: ModelStreamInfer, one long stream per user */
  int streams_per_conn;   /* --streams-per-connection: gRPC calls sharing one connection (1) */
  bool shm_system;        /* --shared-memory system: tensors in registered regions */
  int64_t output_shm_size; /* --output-shared-memory-size (default 102400, perf_analyzer's) */
  const char *input_data;
  const char *images_dir; /* --images: PNG/JPEG files for the image input */
  double image_mean[3], image_std[3]; /* value = (pixel - mean[c]) / std[c], RGB order */
  bool image_bgr;         /* channel order of the tensor */
  bool openai_chat;       /* chat vs completions */
  int max_tokens;
  int prompt_len;
  bool stream;
  bool conversation;      /* --conversation (chat): one multi-turn conversation per user (conv.c) */
  int turns;              /* answers per conversation (4) */
  int think_ms;           /* mean think time between an answer and the next turn (0) */
  int system_len;         /* words of the shared system prompt (64) */
  /* load */
  bench_load load;
  int concurrency[BENCH_MAX_LEVELS];
  int n_concurrency;
  double rates[BENCH_MAX_LEVELS];
  int n_rates;
  bool poisson;
  double stress_pct;
  int stress_steps;
  double slo_p99_ms;
  int slo_iterations;
  int threads;            /* 0 = one per core (capped by connections) */
  int max_connections;    /* open loop: most connections in flight */
  uint64_t seed;
  int64_t requests;       /* >0: fixed request count per level instead of windows */
  /* measurement */
  int warmup_ms;
  int window_ms;
  int max_windows;
  double stability;       /* 0.10 */
  int timeout_ms;
  /* output */
  const char *json_path;
  const char *csv_path;
  const char *plot_path;
  double cost_per_hour;
  bool quiet;
} bench_config;

/* Fills defaults. */
void bench_config_default(bench_config *c);
/* Parses `bench` arguments (argv[0] is the subcommand name). *help is set when --help was
 * given (then nothing else is checked). Errors name the flag and the bad value. */
cinfer_status *bench_args_parse(bench_config *c, int argc, char **argv, bool *help);
void bench_usage(void *file /* FILE* */);

/* Runs the tool; returns the process exit code (0 ok, 1 run failed, 2 usage). */
int bench_main(int argc, char **argv);

#endif
