/* status.c: cinfer_status, the error object every fallible function returns (NULL = OK).
 * Allocation failure while building a status yields a static status, which _free ignores,
 * so error paths never need their own error handling. */
#include "cinfer/types.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cinfer_status {
  cinfer_code code;
  char *msg;
};

static struct cinfer_status oom_status = {CINFER_INTERNAL, (char *)"out of memory"};

static cinfer_status *status_vnew(cinfer_code code, const char *fmt, va_list ap) {
  cinfer_status *st = malloc(sizeof *st);
  if (!st) return &oom_status;
  char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0) {
    free(st);
    return &oom_status;
  }
  st->code = code;
  st->msg = msg;
  return st;
}

cinfer_status *cinfer_status_new(cinfer_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cinfer_status *st = status_vnew(code, fmt, ap);
  va_end(ap);
  return st;
}

cinfer_status *cinfer_status_oom(const char *what) {
  if (!what || !what[0]) return cinfer_status_new(CINFER_INTERNAL, "out of memory");
  return cinfer_status_new(CINFER_INTERNAL, "%s: out of memory", what);
}

cinfer_status *cinfer_status_prefix(cinfer_status *st, const char *fmt, ...) {
  if (!st || st == &oom_status) return st;
  char *pre = NULL, *msg = NULL;
  va_list ap;
  va_start(ap, fmt);
  int n = vasprintf(&pre, fmt, ap);
  va_end(ap);
  if (n < 0) return st;
  if (asprintf(&msg, "%s: %s", pre, st->msg) >= 0) {
    free(st->msg);
    st->msg = msg;
  }
  free(pre);
  return st;
}

cinfer_code cinfer_status_code(const cinfer_status *st) { return st ? st->code : CINFER_OK; }
const char *cinfer_status_message(const cinfer_status *st) { return st ? st->msg : ""; }

void cinfer_status_free(cinfer_status *st) {
  if (!st || st == &oom_status) return;
  free(st->msg);
  free(st);
}

const char *cinfer_code_name(cinfer_code code) {
  switch (code) {
    case CINFER_OK: return "OK";
    case CINFER_UNKNOWN: return "UNKNOWN";
    case CINFER_INTERNAL: return "INTERNAL";
    case CINFER_NOT_FOUND: return "NOT_FOUND";
    case CINFER_INVALID_ARG: return "INVALID_ARG";
    case CINFER_UNAVAILABLE: return "UNAVAILABLE";
    case CINFER_UNSUPPORTED: return "UNSUPPORTED";
    case CINFER_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case CINFER_CANCELLED: return "CANCELLED";
    case CINFER_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case CINFER_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
  }
  return "UNKNOWN";
}

int cinfer_code_http_status(cinfer_code code) {
  switch (code) {
    case CINFER_OK: return 200;
    case CINFER_NOT_FOUND: return 404;
    case CINFER_INVALID_ARG: return 400;
    case CINFER_UNAVAILABLE: return 503;
    case CINFER_UNSUPPORTED: return 501;
    case CINFER_ALREADY_EXISTS: return 409;
    case CINFER_CANCELLED: return 499;
    case CINFER_RESOURCE_EXHAUSTED: return 429;
    case CINFER_DEADLINE_EXCEEDED: return 504;
    case CINFER_UNKNOWN:
    case CINFER_INTERNAL: return 500;
  }
  return 500;
}
