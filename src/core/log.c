/* log.c: see log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool log_json;
static int log_verbose;

bool log_configure(const char *format, int verbose) {
  if (format && strcmp(format, "json") == 0) log_json = true;
  else if (!format || strcmp(format, "text") == 0) log_json = false;
  else return false;
  log_verbose = verbose;
  return true;
}

int log_verbosity(void) { return log_verbose; }

/* Appends s to buf at *n, JSON-escaped when json, never past cap-1. */
static void put(char *buf, size_t cap, size_t *n, const char *s, bool json) {
  for (; *s && *n + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (json && (c == '"' || c == '\\')) {
      buf[(*n)++] = '\\';
      buf[(*n)++] = (char)c;
    } else if (json && c < 0x20) {
      *n += (size_t)snprintf(buf + *n, cap - *n, "\\u%04x", c);
    } else if (!json && c == '\n') {
      buf[(*n)++] = ' ';
    } else {
      buf[(*n)++] = (char)c;
    }
  }
}

void log_event(log_level level, const char *const *kv, const char *fmt, ...) {
  if (level == LOG_VERBOSE && log_verbose <= 0) return;
  static const char *names[] = {"error", "warn", "info", "verbose"};
  char msg[2048], buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char tbuf[96];
  snprintf(tbuf, sizeof tbuf, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
  size_t n = 0, cap = sizeof buf;
  if (log_json) {
    n += (size_t)snprintf(buf, cap, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", tbuf,
                          names[level]);
    put(buf, cap, &n, msg, true);
    put(buf, cap, &n, "\"", false);
    for (const char *const *p = kv; p && p[0] && p[1]; p += 2) {
      put(buf, cap, &n, ",\"", false);
      put(buf, cap, &n, p[0], true);
      put(buf, cap, &n, "\":\"", false);
      put(buf, cap, &n, p[1], true);
      put(buf, cap, &n, "\"", false);
    }
    put(buf, cap, &n, "}", false);
  } else {
    n += (size_t)snprintf(buf, cap, "%s %-5s %s", tbuf, names[level], "");
    put(buf, cap, &n, msg, false);
    for (const char *const *p = kv; p && p[0] && p[1]; p += 2) {
      put(buf, cap, &n, " ", false);
      put(buf, cap, &n, p[0], false);
      put(buf, cap, &n, "=", false);
      put(buf, cap, &n, p[1], false);
    }
  }
  if (n > cap - 2) n = cap - 2;
  buf[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, n);
  (void)w;
}
