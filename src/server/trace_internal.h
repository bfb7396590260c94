/* trace_internal.h: the server core's side of request tracing (trace.c, cinfer/trace.h).
 * Each stage of the request path calls these only when r->trace is non-NULL, so an
 * untraced request pays one branch per stage. */
#ifndef CINFER_SERVER_TRACE_INTERNAL_H
#define CINFER_SERVER_TRACE_INTERNAL_H

#include "cinfer/trace.h"

typedef struct trace_mgr trace_mgr;

trace_mgr *trace_mgr_create(void);
/* After every request is gone (their traces hold the settings they were sampled under). */
void trace_mgr_destroy(trace_mgr *m);

/* At submission: samples r by its model's setting; a traced request gets REQUEST_START,
 * the frontend's receive times and (TENSORS) its inputs as TENSOR_QUEUE_INPUT. */
void trace_request_start(trace_mgr *m, cinfer_request *r);
cinfer_trace *trace_sample(trace_mgr *m, const char *model);
bool trace_wants_tensors(const cinfer_trace *t);
/* One TENSORS entry (activity "TENSOR_QUEUE_INPUT" / "TENSOR_BACKEND_OUTPUT"). */
void trace_tensor(cinfer_trace *t, const char *activity, const cinfer_tensor *x);
/* The request is destroyed: t's entries are written (or queued for writing); frees t. */
void trace_finish(cinfer_trace *t, const char *model, int64_t version, const char *request_id);

#endif
