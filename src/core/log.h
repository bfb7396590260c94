/* log.h: structured logging. One line per event, text ("ts level msg k=v ...") or JSON
 * ({"ts":..,"level":..,"msg":..,"k":"v"}). Thread-safe: each line is written with one
 * write(2). Levels: ERROR < WARN < INFO < VERBOSE(n). */
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

#define LOG_E(...) log_event(LOG_ERROR, NULL, __VA_ARGS__)
#define LOG_W(...) log_event(LOG_WARN, NULL, __VA_ARGS__)
#define LOG_I(...) log_event(LOG_INFO, NULL, __VA_ARGS__)
#define LOG_V(n, ...) \
  do { if (log_verbosity() >= (n)) log_event(LOG_VERBOSE, NULL, __VA_ARGS__); } while (0)

#endif
