/* fuzz_config.c: libFuzzer harness over the config layer: model_config_parse (and through
 * it the pbtxt lexer/parser and every mapping/validation rule), then the operations a
 * server performs on a parsed config (validate, JSON, parameter lookup, auto-complete).
 *
 * Build and run (seeds from the test corpus; the first directory is where libFuzzer
 * writes new inputs, so it must not be the test data folder):
 *   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCINFER_FUZZ=ON
 *   cmake --build build-fuzz -j2 --target fuzz_config
 *   mkdir -p build-fuzz/corpus-config
 *   build-fuzz/fuzz/fuzz_config -max_total_time=30 -max_len=8192 \
 *       -dict=fuzz/fuzz_config.dict build-fuzz/corpus-config tests/data/configs
 * Invariants checked: no crash, no sanitizer report, no leak (LeakSanitizer), status
 * and output agree (exactly one of them is set), JSON is produced for every config that
 * parses. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "repo/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cinfer_model_config *c = NULL;
  cinfer_status *st = model_config_parse("fuzz.pbtxt", (const char *)data, size, &c);
  if ((st == NULL) == (c == NULL)) abort();
  if (st) {
    if (!cinfer_status_message(st)[0]) abort(); /* every error says something */
    cinfer_status_free(st);
    return 0;
  }
  cinfer_status_free(model_config_validate(c));
  char *json = model_config_to_json(c);
  if (!json) abort();
  free(json);
  (void)model_config_parameter(c, "cinfer.threads_per_instance");
  /* auto-complete on top of whatever was parsed, then re-validate */
  const int64_t dims[2] = {-1, 4};
  cinfer_status_free(model_config_add_input(c, "fuzz_in", CINFER_TYPE_FP32, 2, dims, NULL));
  cinfer_status_free(model_config_add_output(c, "fuzz_out", CINFER_TYPE_FP32, 2, dims, NULL));
  cinfer_status_free(model_config_set_name(c, "fuzzed"));
  cinfer_status_free(model_config_validate(c));
  json = model_config_to_json(c);
  if (!json) abort();
  free(json);
  model_config_free(c);
  return 0;
}
