/* settings.h: Triton's trace and logging settings (the extensions behind /v2/trace/setting,
 * /v2/models/M/trace/setting and /v2/logging), independent of the transport: an update is
 * Triton's HTTP JSON object; the gRPC endpoint translates its TraceSetting and LogSettings
 * messages into the same object, so every rule and text exists once (settings.c).
 *
 * An update is checked whole before anything changes. Errors: INVALID_ARG (HTTP 400, gRPC
 * INVALID_ARGUMENT) with Triton's text where Triton has one, UNSUPPORTED (501,
 * UNIMPLEMENTED) for the file locations, which cannot change over the network. */
#ifndef CINFER_FRONTEND_SETTINGS_H
#define CINFER_FRONTEND_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer/cinfer.h"
#include "cinfer/trace.h"

/* Applies the update in body[0..len) (len 0: none, read only) to model's trace setting
 * (model NULL: the global one; a named model must be ready: "Request for unknown model :
 * M"), then reads the setting in effect into *out (also on error). */
cinfer_status *settings_trace_apply(cinfer_server *s, const char *model, const char *body,
                                    size_t len, cinfer_trace_setting *out);

typedef struct settings_log_view {
  const char *file;        /* "" when logging to stderr */
  bool info, warning, error;
  int verbose;
  const char *format;      /* "default", "ISO8601" or "json" */
} settings_log_view;

/* Applies the update in body[0..len) (len 0: none) to the process's log, then reads it. */
cinfer_status *settings_logging_apply(const char *body, size_t len, settings_log_view *out);

#endif
