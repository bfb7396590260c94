/* fuzz_kv_memory.c: llm_parse_kv_memory (--kv-cache-memory, the model parameter
 * kv_cache_memory) on arbitrary text. Invariants: never crashes; an accepted size is at least
 * one byte and at most the machine's memory; a refusal names the flag and sets no size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llm/llm.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0) /* NDEBUG-proof */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 256) return 0;
  char text[257];
  memcpy(text, data, size);
  text[size] = 0;
  size_t bytes = 1;
  cinfer_status *st = llm_parse_kv_memory("--kv-cache-memory", text, &bytes);
  if (st) {
    CHECK(bytes == 0);
    CHECK(strstr(cinfer_status_message(st), "--kv-cache-memory") != NULL);
    cinfer_status_free(st);
    return 0;
  }
  size_t mem = llm_machine_memory();
  CHECK(bytes >= 1);
  CHECK(mem == 0 || bytes <= mem);
  return 0;
}
