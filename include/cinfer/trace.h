/* cinfer/trace.h: request tracing as Triton does it (docs/user_guide/trace.md, the trace
 * extension). A server has one global trace setting and optional per-model settings that
 * override some of its fields; each setting samples requests (one every `rate`, at most
 * `count`), and a sampled request carries a trace that the server core stamps at each
 * stage of its path. When the request is gone the trace is appended, in Triton's JSON
 * trace format, to the setting's trace file (`file`, or `file.N` every `log_frequency`
 * traces or once `count` traces are all collected).
 *
 * Cost: an untraced request pays one branch per stage (r->trace == NULL); while every
 * setting is OFF, sampling is one relaxed atomic load. A traced request pays one clock
 * read per stage, and most stages reuse the clock read the statistics already make.
 *
 * Threading: every function is thread-safe. */
#ifndef CINFER_TRACE_H
#define CINFER_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/cinfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* trace_level bits. 0 = OFF. */
#define CINFER_TRACE_TIMESTAMPS 1u
#define CINFER_TRACE_TENSORS 2u

/* Timestamps of one request, in the order of its path (Triton's names). */
typedef enum cinfer_trace_point {
  CINFER_TRACE_HTTP_RECV_START = 0,
  CINFER_TRACE_HTTP_RECV_END,
  CINFER_TRACE_REQUEST_START,
  CINFER_TRACE_QUEUE_START,
  CINFER_TRACE_COMPUTE_START,
  CINFER_TRACE_COMPUTE_INPUT_END,
  CINFER_TRACE_COMPUTE_OUTPUT_START,
  CINFER_TRACE_COMPUTE_END,
  CINFER_TRACE_REQUEST_END,
  CINFER_TRACE_INFER_RESPONSE_COMPLETE,
  CINFER_TRACE_HTTP_SEND_START,
  CINFER_TRACE_HTTP_SEND_END,
  CINFER_TRACE_POINT_COUNT_
} cinfer_trace_point;

typedef struct cinfer_trace_setting {
  uint32_t level;         /* CINFER_TRACE_* bits; 0 = OFF */
  uint32_t rate;          /* one request in `rate` is traced; >= 1 while tracing */
  int32_t count;          /* traces left to take; -1 = no limit */
  uint32_t log_frequency; /* 0: everything to `file` (closed at shutdown); n: file.0, file.1, ... every n traces */
  char file[1024];        /* "" = none (then tracing cannot be on) */
} cinfer_trace_setting;

/* An update: only the fields whose has_* / clear_* flag is set change. clear_* drops a
 * model's own value so the global one shows through (for the global setting: back to the
 * start-up value). */
typedef struct cinfer_trace_update {
  bool has_level, has_rate, has_count, has_log_frequency, has_file;
  bool clear_level, clear_rate, clear_count, clear_log_frequency;
  cinfer_trace_setting v;
} cinfer_trace_update;

/* model NULL: the global setting. A model setting may exist before the model is loaded.
 * INVALID_ARG, naming the field, for a setting that turns tracing on without a file or
 * with rate 0 (Triton: "Attempting to set invalid trace setting :..."). */
cinfer_status *cinfer_server_trace_update(cinfer_server *s, const char *model,
                                          const cinfer_trace_update *u);
/* The setting in effect for model (NULL: global). */
void cinfer_server_trace_get(cinfer_server *s, const char *model, cinfer_trace_setting *out);
/* Sets the start-up value of the global setting (what clear_* returns to) and the current
 * one. For `cinfer serve --trace-config`. */
cinfer_status *cinfer_server_trace_init(cinfer_server *s, const cinfer_trace_setting *v);

/* The trace of a request, or NULL when it is not traced (sampling happens when the
 * request is submitted). Borrowed while the caller holds the request. */
typedef struct cinfer_trace cinfer_trace;
cinfer_trace *cinfer_request_trace(const cinfer_request *r);
/* Records point now (one clock read) / at ns (CLOCK_MONOTONIC, clock_now_ns()). t may be
 * NULL (nothing happens), so a caller writes `cinfer_trace_stamp(cinfer_request_trace(r), ...)`. */
void cinfer_trace_stamp(cinfer_trace *t, cinfer_trace_point p);
void cinfer_trace_stamp_at(cinfer_trace *t, cinfer_trace_point p, uint64_t ns);
/* A frontend that knows when a request began to arrive hands it over before submitting
 * (recorded as HTTP_RECV_START / HTTP_RECV_END if the request is sampled). */
void cinfer_request_set_recv_times(cinfer_request *r, uint64_t start_ns, uint64_t end_ns);

#ifdef __cplusplus
}
#endif
#endif
