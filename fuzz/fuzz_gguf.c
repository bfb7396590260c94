/* fuzz_gguf.c: libFuzzer harness for the GGUF parser. Any input must either parse (then
 * the dump and typed getters must walk it safely) or fail with a status; never crash.
 * Build: clang -fsanitize=fuzzer,address,undefined (the lead wires it in fuzz/CMakeLists). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llm/gguf.h"
#include "backends/llm/model.h"
#include "backends/llm/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* exact-size copy so reads past the end are caught */
  uint8_t *p = malloc(size ? size : 1);
  if (!p) return 0;
  memcpy(p, data, size);
  llm_gguf *g;
  cinfer_status *st = llm_gguf_open_memory(p, size, &g);
  if (st) {
    cinfer_status_free(st);
  } else {
    FILE *dev = fopen("/dev/null", "w");
    if (dev) {
      llm_gguf_dump(g, dev);
      fclose(dev);
    }
    uint32_t u;
    float f;
    llm_gguf_get_u32(g, "llama.block_count", &u);
    llm_gguf_get_f32(g, "llama.rope.freq_base", &f);
    llm_model *m;
    if (!(st = llm_model_create(g, &m))) llm_model_destroy(m);
    cinfer_status_free(st);
    llm_tokenizer *t;
    if (!(st = llm_tokenizer_create(g, &t))) {
      int32_t *ids;
      size_t n;
      if (!llm_tokenize(t, "hello 123", 9, true, true, &ids, &n)) free(ids);
      llm_tokenizer_destroy(t);
    }
    cinfer_status_free(st);
    llm_gguf_close(g);
  }
  free(p);
  return 0;
}
