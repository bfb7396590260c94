/* fuzz_settings.c: libFuzzer harness for the control-plane parsers of Triton's trace,
 * logging and model-control extensions: the trace setting body (settings_parse_trace), the
 * logging body (settings_parse_logging), `--trace-config` values (cli_trace_config is in
 * the binary, not a library: its grammar is small and tested by test_trace.py) and the
 * model file paths of a load with "file:" contents, whose checks must refuse every path
 * that could leave the temporary directory before anything is written. Byte 0 selects the
 * parser; the rest is its input. A path the checker accepts is written into a fresh
 * directory and the harness asserts nothing appeared outside it. */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "frontend/frontend_internal.h"
#include "server/override.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  char msg[512];
  int status = 0;
  switch (data[0] % 3) {
    case 0: {
      cinfer_trace_update u;
      if (!settings_parse_trace(body, len, &u, &status, msg, sizeof msg))
        assert(status >= 400 && status < 600 && msg[0]);
      else
        assert(!u.has_file && (!u.has_rate || u.v.rate <= UINT32_MAX) && (!u.has_count || u.v.count >= -1));
      break;
    }
    case 1: {
      settings_log_update u;
      if (!settings_parse_logging(body, len, &u, &status, msg, sizeof msg))
        assert(status >= 400 && status < 600 && msg[0]);
      else
        assert(u.verbose >= -1 && u.on[0] >= -1 && u.on[0] <= 1);
      break;
    }
    default: { /* one model file path: accepted ones stay inside the new directory */
      char *path = malloc(len + 1);
      if (!path) return 0;
      memcpy(path, body, len);
      path[len] = 0;
      if (strlen(path) != len) { /* an embedded NUL cannot come from JSON text */
        free(path);
        return 0;
      }
      cinfer_model_file f = {.path = path, .data = "x", .len = 1};
      char *dir = NULL;
      cinfer_status *st = override_dir_create(&f, 1, &dir);
      if (!st) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", dir, path);
        char *real = realpath(full, NULL);
        assert(real && !strncmp(real, dir, strlen(dir)) && real[strlen(dir)] == '/');
        free(real);
        override_dir_remove(dir);
        free(dir);
      }
      cinfer_status_free(st);
      free(path);
      break;
    }
  }
  return 0;
}
