/* log.c: see log.h. */
#include "core/log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Format: 0 default (text), 1 ISO8601 (text), 2 json. */
enum { FMT_DEFAULT, FMT_ISO8601, FMT_JSON };
static _Atomic int log_fmt;
static _Atomic int log_verbose;
static _Atomic unsigned log_mask = 7u; /* bit per level: ERROR, WARN, INFO */
static _Atomic int log_fd = STDERR_FILENO;
static char *log_path; /* set once, before other threads log */

bool log_configure(const char *format, int verbose) {
  if (format && strcmp(format, "json") == 0) atomic_store(&log_fmt, FMT_JSON);
  else if (!format || strcmp(format, "text") == 0) atomic_store(&log_fmt, FMT_DEFAULT);
  else return false;
  atomic_store(&log_verbose, verbose);
  return true;
}

int log_verbosity(void) { return atomic_load_explicit(&log_verbose, memory_order_relaxed); }
void log_set_verbosity(int verbose) { atomic_store(&log_verbose, verbose < 0 ? 0 : verbose); }

void log_enable(log_level level, bool on) {
  if (level > LOG_INFO) return;
  if (on) atomic_fetch_or(&log_mask, 1u << level);
  else atomic_fetch_and(&log_mask, ~(1u << level));
}
bool log_enabled(log_level level) {
  return level > LOG_INFO || (atomic_load(&log_mask) >> level & 1u);
}

bool log_set_format(const char *name) {
  if (!strcmp(name, "default") || !strcmp(name, "text")) atomic_store(&log_fmt, FMT_DEFAULT);
  else if (!strcmp(name, "ISO8601")) atomic_store(&log_fmt, FMT_ISO8601);
  else if (!strcmp(name, "json")) atomic_store(&log_fmt, FMT_JSON);
  else return false;
  return true;
}
const char *log_format_name(void) {
  static const char *const names[] = {"default", "ISO8601", "json"};
  return names[atomic_load(&log_fmt)];
}

bool log_set_file(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  char *p = strdup(path);
  if (!p) {
    close(fd);
    return false;
  }
  int old = atomic_exchange(&log_fd, fd);
  if (old != STDERR_FILENO) close(old);
  free(log_path);
  log_path = p;
  return true;
}
const char *log_file_name(void) { return log_path ? log_path : ""; }

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
  if (level == LOG_VERBOSE ? log_verbosity() <= 0 : !(atomic_load(&log_mask) >> level & 1u)) return;
  bool log_json = atomic_load(&log_fmt) == FMT_JSON;
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
  ssize_t w = write(atomic_load(&log_fd), buf, n);
  (void)w;
}
