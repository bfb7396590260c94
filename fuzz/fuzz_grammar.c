/* fuzz_grammar.c: structured-output parsers on arbitrary bytes. The first byte picks the
 * input kind: even, a GBNF grammar; odd, a JSON Schema. What follows the first NUL is text
 * fed to the compiled grammar in two pieces (so characters are split across "tokens").
 * Invariants: a schema that translates gives a grammar that compiles; accepting text never
 * crashes, and text accepted whole is accepted again when fed in pieces. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llm/grammar.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0) /* NDEBUG-proof */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bool schema = data[0] & 1;
  const char *src = (const char *)data + 1;
  size_t n = size - 1;
  const char *nul = memchr(src, 0, n);
  size_t src_len = nul ? (size_t)(nul - src) : n;
  const char *text = nul ? nul + 1 : NULL;
  size_t text_len = nul ? n - src_len - 1 : 0;
  char *gbnf = NULL;
  cinfer_status *st = NULL;
  if (schema) {
    st = llm_json_schema_to_gbnf(src, src_len, &gbnf);
    if (st) {
      CHECK(!gbnf);
      cinfer_status_free(st);
      return 0;
    }
  }
  llm_grammar *g = NULL;
  st = llm_grammar_compile(gbnf ? gbnf : src, gbnf ? strlen(gbnf) : src_len, &g);
  CHECK(!gbnf || !st); /* the translation always compiles */
  free(gbnf);
  if (st) {
    CHECK(!g);
    cinfer_status_free(st);
    return 0;
  }
  llm_grammar_state *a = NULL, *b = NULL;
  st = llm_grammar_state_create(g, &a);
  if (!st) st = llm_grammar_state_create(g, &b);
  if (st) { /* a grammar too ambiguous to start: refused with a status, no state */
    CHECK(!b);
    cinfer_status_free(st);
  } else if (text) {
    bool whole = llm_grammar_accept_text(a, text, text_len);
    size_t cut = text_len / 2;
    bool parts = llm_grammar_accept_text(b, text, cut) && llm_grammar_accept_text(b, text + cut, text_len - cut);
    if (whole) CHECK(parts && llm_grammar_can_end(a) == llm_grammar_can_end(b));
  }
  llm_grammar_state_destroy(a);
  llm_grammar_state_destroy(b);
  llm_grammar_unref(g);
  return 0;
}
