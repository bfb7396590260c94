/* report.h: cinfer bench's results and their renderings (report.c): a run is levels, each
 * with latency distributions from the HDR histograms of bench.h; the table, JSON, CSV and SVG
 * plot of docs/bench.md. Exported: `cinfer streams` reports its stream statistics with it. */
#ifndef CINFER_BENCH_REPORT_H
#define CINFER_BENCH_REPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/bench.h"

/* the error classes a request can end in (engine.c counts them, the report names them) */
enum {
  BENCH_ERR_CONNECT = 0,
  BENCH_ERR_RESET,    /* reset, EOF or broken pipe mid-request */
  BENCH_ERR_TIMEOUT,
  BENCH_ERR_PROTOCOL, /* unparseable response */
  BENCH_ERR_HTTP,     /* a non-2xx status (per code in status[]) */
  BENCH_ERR_OVERLOAD, /* open loop: backlog full, request dropped */
  BENCH_ERR_N
};
extern const char *const bench_err_names[BENCH_ERR_N];

typedef struct bench_dist {
  uint64_t count;
  double mean, stddev, min, max, p50, p90, p95, p99, p999; /* microseconds */
} bench_dist;
void bench_dist_from(bench_dist *d, const bench_hist *h);

typedef struct bench_level {
  char label[48];
  bool open;
  int concurrency;
  double target_rate;
  bool stable;
  int windows;
  double duration_s;
  uint64_t ok, errors, err[BENCH_ERR_N];
  uint64_t status_non2xx[600];
  double throughput;    /* successful requests / s */
  double tokens_out_s;  /* output tokens / s (OpenAI) */
  uint64_t tokens_out, tokens_in;
  double bytes_in_s;
  bench_dist lat, ttft, itl, tpot;
  bench_dist refused;   /* time to a 429/503 refusal */
  double cpu_pct;       /* the tool's CPU, percent of one core */
  int threads;          /* worker threads the level used */
  bool has_server;
  double srv_queue_us, srv_cin_us, srv_infer_us, srv_cout_us;
  uint64_t srv_count;
  char first_error[200];
} bench_level;

typedef struct bench_report {
  const bench_config *cfg;
  bench_level *levels;
  int n_levels;
  bool interrupted;
  const char *mode;   /* "concurrency", "rate", "stress", "slo" */
  double capacity;    /* stress/slo: measured capacity (req/s) */
  double slo_rate;    /* slo: best rate found */
  int slo_level;      /* index of the best level, -1 when none */
} bench_report;

void bench_report_table(const bench_report *r, void *file /* FILE* */);
cinfer_status *bench_report_json(const bench_report *r, const char *path);
cinfer_status *bench_report_csv(const bench_report *r, const char *path);
cinfer_status *bench_report_svg(const bench_report *r, const char *path);

#endif
