/* trace_config.c: `cinfer serve --trace-config` as Triton spells it (docs/user_guide/
 * trace.md): "[triton,]SETTING=VALUE" with the global settings rate, level (repeatable:
 * the levels add up; OFF clears them), count and mode (triton only), and the Triton-mode
 * settings file and log-frequency. Every mistake is an error naming the flag's text. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static bool num(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || errno || x < lo || x > hi) return false;
  *out = x;
  return true;
}

bool cli_trace_config(const char *arg, cinfer_trace_setting *v, char *err, size_t cap) {
  const char *s = arg;
  bool triton = false;
  if (!strncmp(s, "triton,", 7)) s += 7, triton = true;
  else if (!strncmp(s, "opentelemetry,", 14)) {
    snprintf(err, cap, "--trace-config '%s': mode opentelemetry is not supported (only triton)", arg);
    return false;
  }
  const char *eq = strchr(s, '=');
  if (!eq || eq == s) {
    snprintf(err, cap, "--trace-config '%s': expected [triton,]SETTING=VALUE", arg);
    return false;
  }
  size_t kl = (size_t)(eq - s);
  const char *val = eq + 1;
  long long x;
#define KEY(k) (kl == strlen(k) && !strncmp(s, k, kl))
  if (KEY("file")) {
    if (!val[0] || strlen(val) >= sizeof v->file) {
      snprintf(err, cap, "--trace-config '%s': file must be a path of 1 to %zu bytes", arg, sizeof v->file - 1);
      return false;
    }
    snprintf(v->file, sizeof v->file, "%s", val);
  } else if (KEY("log-frequency")) {
    if (!num(val, 0, UINT32_MAX, &x)) goto bad_num;
    v->log_frequency = (uint32_t)x;
  } else if (triton) {
    snprintf(err, cap, "--trace-config '%s': triton mode has the settings file and log-frequency", arg);
    return false;
  } else if (KEY("rate")) {
    if (!num(val, 1, UINT32_MAX, &x)) goto bad_num;
    v->rate = (uint32_t)x;
  } else if (KEY("count")) {
    if (!num(val, -1, INT32_MAX, &x)) goto bad_num;
    v->count = (int32_t)x;
  } else if (KEY("level")) {
    if (!strcmp(val, "OFF")) v->level = 0;
    else if (!strcmp(val, "TIMESTAMPS")) v->level |= CINFER_TRACE_TIMESTAMPS;
    else if (!strcmp(val, "TENSORS")) v->level |= CINFER_TRACE_TENSORS;
    else {
      snprintf(err, cap, "--trace-config '%s': level is OFF, TIMESTAMPS or TENSORS", arg);
      return false;
    }
  } else if (KEY("mode")) {
    if (strcmp(val, "triton")) {
      snprintf(err, cap, "--trace-config '%s': only mode triton is supported", arg);
      return false;
    }
  } else {
    snprintf(err, cap, "--trace-config '%s': unknown setting (rate, level, count, mode, "
             "triton,file, triton,log-frequency)", arg);
    return false;
  }
#undef KEY
  return true;
bad_num:
  snprintf(err, cap, "--trace-config '%s': '%s' is not a valid number for this setting%s", arg, val,
           s[0] == 'r' ? " (rate >= 1)" : s[0] == 'c' ? " (count >= -1)" : " (>= 0)");
  return false;
}
