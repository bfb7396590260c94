/* settings.c: Triton's trace and logging extensions over HTTP.
 *
 *   GET|POST /v2/trace/setting, /v2/models/M/trace/setting   (docs/protocol/extension_trace.md)
 *   GET|POST /v2/logging                                      (extension_logging.md)
 *
 * Both answer the settings in effect after the update, in Triton's JSON: trace values are
 * strings ("trace_level" an array of them), logging values typed. Errors use Triton's texts
 * where Triton has one; where Triton accepts a value it then ignores (an unknown trace
 * level, a negative rate that stoi wraps to 2^32-1, an unknown key) we answer 400 naming
 * it (docs/api.md lists these). An update is checked whole before anything changes. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/trace.h"
#include "core/log.h"
#include "frontend/frontend_internal.h"
#include "frontend/settings.h"

static const http_header json_hdr[] = {{"Content-Type", 12, "application/json", 16}};

static void respond_buf(http_exchange *ex, cbuf *b) {
  if (b->oom) {
    cbuf_free(b);
    return respond_error(ex, 500, "out of memory");
  }
  http_respond_owned(ex, 200, json_hdr, 1, b->data, b->len, free);
  b->data = NULL;
}

/* ---- trace ---------------------------------------------------------------------------- */

/* A trace number: Triton sends them as strings; a JSON integer is taken too. Returns
 * false with msg set. */
static bool trace_number(const cJSON *v, const char *key, long long lo, long long hi,
                         long long *out, char *msg, size_t cap) {
  char text[64];
  if (cJSON_IsNumber(v)) {
    snprintf(text, sizeof text, "%.17g", v->valuedouble);
  } else if (cJSON_IsString(v)) {
    snprintf(text, sizeof text, "%s", v->valuestring);
  } else {
    snprintf(msg, cap, "'%s' must be a string holding an integer", key);
    return false;
  }
  char *end;
  errno = 0;
  long long x = strtoll(text, &end, 10);
  if (end == text || *end || errno) {
    snprintf(msg, cap, "Unable to parse '%s', got: %s", key, text);
    return false;
  }
  if (x < lo || x > hi) {
    if (!strcmp(key, "trace_count"))
      snprintf(msg, cap, "Unable to parse 'trace_count'. Expecting value >= -1, got:%s", text);
    else
      snprintf(msg, cap, "Unable to parse '%s', value is out of range [ %lld, %lld ], got: %s", key,
               lo, hi, text);
    return false;
  }
  *out = x;
  return true;
}

static bool parse_trace_update(const cJSON *j, cinfer_trace_update *u, int *status, char *msg,
                               size_t cap) {
  *status = 400;
  for (const cJSON *it = j->child; it; it = it->next) {
    const char *k = it->string;
    bool null = cJSON_IsNull(it);
    long long x;
    if (!strcmp(k, "trace_file")) {
      *status = 501; /* Triton: UNSUPPORTED */
      snprintf(msg, cap, "trace file location can not be updated through network protocol");
      return false;
    } else if (!strcmp(k, "trace_level")) {
      if (null) {
        u->clear_level = true;
        continue;
      }
      if (!cJSON_IsArray(it)) {
        snprintf(msg, cap, "'trace_level' must be an array of strings (OFF, TIMESTAMPS, TENSORS)");
        return false;
      }
      uint32_t level = 0;
      int n = cJSON_GetArraySize(it);
      for (const cJSON *e = it->child; e; e = e->next) {
        if (!cJSON_IsString(e)) {
          snprintf(msg, cap, "'trace_level' must be an array of strings (OFF, TIMESTAMPS, TENSORS)");
          return false;
        }
        if (!strcmp(e->valuestring, "OFF")) {
          if (n != 1) {
            snprintf(msg, cap, "Expect only one trace level 'OFF' is specified");
            return false;
          }
        } else if (!strcmp(e->valuestring, "TIMESTAMPS")) {
          level |= CINFER_TRACE_TIMESTAMPS;
        } else if (!strcmp(e->valuestring, "TENSORS")) {
          level |= CINFER_TRACE_TENSORS;
        } else {
          snprintf(msg, cap, "unknown trace level '%.100s' (expected OFF, TIMESTAMPS or TENSORS)",
                   e->valuestring);
          return false;
        }
      }
      if (n == 0) {
        snprintf(msg, cap, "'trace_level' must name at least one level (OFF, TIMESTAMPS, TENSORS)");
        return false;
      }
      u->has_level = true;
      u->v.level = level;
    } else if (!strcmp(k, "trace_rate")) {
      if (null) u->clear_rate = true;
      else if (!trace_number(it, k, 0, UINT32_MAX, &x, msg, cap)) return false;
      else u->has_rate = true, u->v.rate = (uint32_t)x;
    } else if (!strcmp(k, "trace_count")) {
      if (null) u->clear_count = true;
      else if (!trace_number(it, k, -1, INT32_MAX, &x, msg, cap)) return false;
      else u->has_count = true, u->v.count = (int32_t)x;
    } else if (!strcmp(k, "log_frequency")) {
      if (null) u->clear_log_frequency = true;
      else if (!trace_number(it, k, 0, UINT32_MAX, &x, msg, cap)) return false;
      else u->has_log_frequency = true, u->v.log_frequency = (uint32_t)x;
    } else if (!strcmp(k, "trace_mode")) {
      if (!null && !(cJSON_IsString(it) && !strcmp(it->valuestring, "triton"))) {
        snprintf(msg, cap, "trace_mode: only 'triton' is supported (OpenTelemetry is not)");
        return false;
      }
    } else {
      snprintf(msg, cap, "unknown trace setting '%.100s' (trace_level, trace_rate, trace_count, "
               "log_frequency, trace_file)", k);
      return false;
    }
  }
  return true;
}

bool settings_parse_trace(const char *body, size_t len, cinfer_trace_update *u, int *status,
                          char *msg, size_t cap) {
  *u = (cinfer_trace_update){0};
  cJSON *j = cJSON_ParseWithLength(body, len);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    *status = 400;
    snprintf(msg, cap, "trace setting: the request body must be a JSON object");
    return false;
  }
  bool ok = parse_trace_update(j, u, status, msg, cap);
  cJSON_Delete(j);
  return ok;
}

cinfer_status *settings_trace_apply(cinfer_server *s, const char *model, const char *body,
                                    size_t len, cinfer_trace_setting *out) {
  cinfer_status *st = NULL;
  if (model) { /* Triton: the model must be ready */
    cinfer_model *m;
    if ((st = cinfer_server_model_acquire(s, model, 0, &m))) {
      cinfer_status_free(st);
      st = cinfer_status_new(CINFER_INVALID_ARG, "Request for unknown model : %s", model);
    } else {
      cinfer_model_release(m);
    }
  }
  if (!st && len) {
    cinfer_trace_update u;
    char msg[512];
    int status;
    if (!settings_parse_trace(body, len, &u, &status, msg, sizeof msg))
      st = cinfer_status_new(status == 501 ? CINFER_UNSUPPORTED : CINFER_INVALID_ARG, "%s", msg);
    else
      st = cinfer_server_trace_update(s, model, &u);
  }
  cinfer_server_trace_get(s, model, out);
  return st;
}

static void handle_trace(frontend *fe, http_exchange *ex, const http_request *req, const char *model) {
  bool get = req->method_id == HTTP_GET || req->method_id == HTTP_HEAD;
  if (!get && req->method_id != HTTP_POST) {
    respond_error(ex, 405, "method not allowed; use GET or POST");
    return;
  }
  cinfer_trace_setting v;
  cinfer_status *st = settings_trace_apply(fe->server, model, req->body, get ? 0 : req->body_len, &v);
  if (st) {
    respond_error(ex, cinfer_code_http_status(cinfer_status_code(st)), cinfer_status_message(st));
    cinfer_status_free(st);
    return;
  }
  cbuf b = {0};
  cbuf_puts(&b, "{\"trace_level\":[");
  if (!v.level) cbuf_puts(&b, "\"OFF\"");
  if (v.level & CINFER_TRACE_TIMESTAMPS) cbuf_puts(&b, "\"TIMESTAMPS\"");
  if (v.level & CINFER_TRACE_TENSORS) cbuf_puts(&b, v.level & CINFER_TRACE_TIMESTAMPS ? ",\"TENSORS\"" : "\"TENSORS\"");
  cbuf_printf(&b, "],\"trace_rate\":\"%u\",\"trace_count\":\"%d\",\"log_frequency\":\"%u\",\"trace_file\":",
              v.rate, v.count, v.log_frequency);
  cbuf_json_string(&b, v.file, strlen(v.file));
  cbuf_puts(&b, ",\"trace_mode\":\"triton\"}");
  respond_buf(ex, &b);
}

/* ---- logging -------------------------------------------------------------------------- */

bool settings_parse_logging(const char *body, size_t len, settings_log_update *u, int *status,
                            char *msg, size_t cap) {
  *u = (settings_log_update){.on = {-1, -1, -1}, .verbose = -1};
  *status = 400;
  msg[0] = 0;
  cJSON *j = cJSON_ParseWithLength(body, len);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    snprintf(msg, cap, "logging: the request body must be a JSON object");
    return false;
  }
  static const char *const bools[3] = {"log_error", "log_warning", "log_info"};
  for (const cJSON *it = j->child; it && !msg[0]; it = it->next) {
    const char *k = it->string;
    if (cJSON_IsNull(it) && strcmp(k, "log_file")) continue; /* Triton: null leaves it be */
    int bi = -1;
    for (int i = 0; i < 3; i++)
      if (!strcmp(k, bools[i])) bi = i;
    if (!strcmp(k, "log_file")) {
      if (!cJSON_IsNull(it)) {
        *status = 501; /* Triton: UNSUPPORTED */
        snprintf(msg, cap, "log file location can not be updated through network protocol");
      }
    } else if (bi >= 0) {
      if (!cJSON_IsBool(it)) snprintf(msg, cap, "'%s' must be a boolean", k);
      else u->on[bi] = cJSON_IsTrue(it);
    } else if (!strcmp(k, "log_verbose_level")) {
      double d = it->valuedouble;
      if (!cJSON_IsNumber(it) || !(d >= 0 && d <= INT_MAX) || d != (double)(long long)d)
        snprintf(msg, cap, "'log_verbose_level' must be a non-negative integer");
      else u->verbose = (long long)d;
    } else if (!strcmp(k, "log_format")) {
      if (!cJSON_IsString(it)) {
        snprintf(msg, cap, "'log_format' must be a string (default, ISO8601 or json)");
      } else if (strcmp(it->valuestring, "default") && strcmp(it->valuestring, "ISO8601") &&
                 strcmp(it->valuestring, "json") && strcmp(it->valuestring, "text")) {
        snprintf(msg, cap, "invalid argument for --log_format, got: %.200s", it->valuestring);
      } else {
        snprintf(u->format, sizeof u->format, "%s", it->valuestring);
      }
    } else {
      snprintf(msg, cap, "unknown logging setting '%.100s' (log_file, log_info, log_warning, "
               "log_error, log_verbose_level, log_format)", k);
    }
  }
  cJSON_Delete(j);
  return !msg[0];
}

cinfer_status *settings_logging_apply(const char *body, size_t len, settings_log_view *out) {
  cinfer_status *st = NULL;
  if (len) {
    /* Check everything, then apply: a bad field changes nothing. */
    settings_log_update u;
    char msg[512];
    int status;
    if (!settings_parse_logging(body, len, &u, &status, msg, sizeof msg)) {
      st = cinfer_status_new(status == 501 ? CINFER_UNSUPPORTED : CINFER_INVALID_ARG, "%s", msg);
    } else {
      for (int i = 0; i < 3; i++)
        if (u.on[i] >= 0) log_enable((log_level)i, u.on[i] != 0);
      if (u.verbose >= 0) log_set_verbosity((int)u.verbose);
      if (u.format[0]) log_set_format(u.format);
    }
  }
  out->file = log_file_name();
  out->info = log_enabled(LOG_INFO);
  out->warning = log_enabled(LOG_WARN);
  out->error = log_enabled(LOG_ERROR);
  out->verbose = log_verbosity();
  out->format = log_format_name();
  return st;
}

static void handle_logging(http_exchange *ex, const http_request *req) {
  bool get = req->method_id == HTTP_GET || req->method_id == HTTP_HEAD;
  if (!get && req->method_id != HTTP_POST) {
    respond_error(ex, 405, "method not allowed; use GET or POST");
    return;
  }
  settings_log_view v;
  cinfer_status *st = settings_logging_apply(req->body, get ? 0 : req->body_len, &v);
  if (st) {
    respond_error(ex, cinfer_code_http_status(cinfer_status_code(st)), cinfer_status_message(st));
    cinfer_status_free(st);
    return;
  }
  cbuf b = {0};
  cbuf_puts(&b, "{\"log_file\":");
  cbuf_json_string(&b, v.file, strlen(v.file));
  cbuf_printf(&b, ",\"log_info\":%s,\"log_warning\":%s,\"log_error\":%s,\"log_verbose_level\":%d,"
              "\"log_format\":\"%s\"}",
              v.info ? "true" : "false", v.warning ? "true" : "false", v.error ? "true" : "false",
              v.verbose, v.format);
  respond_buf(ex, &b);
}

bool settings_route(frontend *fe, http_exchange *ex, const http_request *req,
                    const http_path_segs *p) {
  if (p->n < 2 || strcmp(p->seg[0], "v2")) return false;
  if (p->n == 2 && !strcmp(p->seg[1], "logging")) {
    handle_logging(ex, req);
    return true;
  }
  if (p->n == 3 && !strcmp(p->seg[1], "trace") && !strcmp(p->seg[2], "setting")) {
    handle_trace(fe, ex, req, NULL);
    return true;
  }
  if (p->n == 5 && !strcmp(p->seg[1], "models") && !strcmp(p->seg[3], "trace") &&
      !strcmp(p->seg[4], "setting")) {
    handle_trace(fe, ex, req, p->seg[2]);
    return true;
  }
  return false;
}
