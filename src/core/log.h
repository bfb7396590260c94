/* log.h: structured logging. One line per event, text ("ts level msg k=v ...") or JSON
 * ({"ts":..,"level":..,"msg":..,"k":"v"}). Levels: ERROR < WARN < INFO < VERBOSE(n).
 *
 * Thread-safe, and changeable while the server runs (Triton's logging extension,
 * /v2/logging): every setting is an atomic read on each call, each line is written with
 * one write(2) to the current destination (stderr, or the --log-file opened O_APPEND), so a
 * change takes effect for the next line of every thread and lines never interleave. */
#ifndef CINFER_CORE_LOG_H
#define CINFER_CORE_LOG_H

#include <stdbool.h>

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_VERBOSE = 3 } log_level;

/* format: "text" or "json"; verbose: 0 = INFO and above, n>0 also VERBOSE lines up to n. */
bool log_configure(const char *format, int verbose);
int log_verbosity(void);
/* kv: NULL-terminated list of key, value string pairs (may be NULL). */
void log_event(log_level level, const char *const *kv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- live settings (the logging extension) ------------------------------------------ */

/* Turns the ERROR, WARN or INFO lines on or off (all on by default). */
void log_enable(log_level level, bool on);
bool log_enabled(log_level level);
void log_set_verbosity(int verbose);
/* Line formats by Triton's names: "default" (text, the default), "ISO8601" (text: our
 * timestamps are ISO 8601 already), or "json"; "text" is taken as "default". False for
 * any other name (nothing changes). */
bool log_set_format(const char *name);
const char *log_format_name(void);  /* "default", "ISO8601" or "json" */
/* Sends the lines to path (opened for appending, created 0644) instead of stderr. False
 * with errno set when it cannot be opened (nothing changes). Set once at start up. */
bool log_set_file(const char *path);
const char *log_file_name(void);    /* "" for stderr */

#define LOG_E(...) log_event(LOG_ERROR, NULL, __VA_ARGS__)
#define LOG_W(...) log_event(LOG_WARN, NULL, __VA_ARGS__)
#define LOG_I(...) log_event(LOG_INFO, NULL, __VA_ARGS__)
#define LOG_V(n, ...) \
  do { if (log_verbosity() >= (n)) log_event(LOG_VERBOSE, NULL, __VA_ARGS__); } while (0)

#endif
