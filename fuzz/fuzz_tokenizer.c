/* fuzz_tokenizer.c: libFuzzer harness for the BPE tokenizer and streaming detokeniser,
 * over the real SmolLM2 vocabulary ($CINFER_SMOLLM2_GGUF, else scripts/find_smollm2.sh's
 * default location). Checks: tokenize never crashes; valid UTF-8 input round-trips through
 * detokenisation exactly; the streaming detokeniser emits only complete UTF-8. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llm/gguf.h"
#include "backends/llm/tokenizer.h"

static llm_gguf *g_gguf;
static llm_tokenizer *g_tok;

static void load(void) {
  const char *path = getenv("CINFER_SMOLLM2_GGUF");
  char buf[4096];
  if (!path) {
    FILE *p = popen("scripts/find_smollm2.sh", "r");
    if (p && fgets(buf, sizeof buf, p)) {
      buf[strcspn(buf, "\n")] = 0;
      path = buf;
    }
    if (p) pclose(p);
  }
  cinfer_status *st = path ? llm_gguf_open(path, &g_gguf) : cinfer_status_new(CINFER_NOT_FOUND, "no model");
  if (!st) st = llm_tokenizer_create(g_gguf, &g_tok);
  if (st) {
    fprintf(stderr, "fuzz_tokenizer: %s (set CINFER_SMOLLM2_GGUF)\n", cinfer_status_message(st));
    abort();
  }
}

/* GPT-2's byte -> printable code point map (bytes_to_unicode). */
static uint32_t byte_cp(uint8_t b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
  uint32_t n = 0;
  for (int c = 0; c < b; c++)
    if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) n++;
  return 256 + n;
}

static bool all_bytes_in_vocab(const char *text, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = byte_cp((uint8_t)text[i]);
    char u[4];
    size_t l;
    if (cp < 0x80) u[0] = (char)cp, l = 1;
    else u[0] = (char)(0xc0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3f)), l = 2;
    if (llm_token_lookup(g_tok, u, l) < 0) return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_tok) load();
  if (size < 1) return 0;
  bool special = data[0] & 1;
  const char *text = (const char *)data + 1;
  size_t n = size - 1;
  int32_t *ids;
  size_t nid;
  cinfer_status *st = llm_tokenize(g_tok, text, n, false, special, &ids, &nid);
  if (st) {
    cinfer_status_free(st);
    return 0;
  }
  char *out = malloc(n * 3 + 64);
  size_t o = 0;
  llm_detok d = {0};
  for (size_t i = 0; i < nid; i++) {
    char piece[4096];
    size_t k = llm_detok_push(g_tok, &d, ids[i], special, piece, sizeof piece);
    if (k > sizeof piece) abort();
    memcpy(out + o, piece, k);
    o += k;
  }
  o += llm_detok_flush(&d, out + o, 64);
  /* Exact round trip, except for bytes whose byte-level symbol is not in the vocabulary:
   * those are dropped, exactly as llama.cpp drops them (SmolLM2 has no tokens for most C0
   * control bytes). */
  if (!special && (o != n || memcmp(out, text, n)) && all_bytes_in_vocab(text, n)) abort();
  free(out);
  free(ids);
  return 0;
}
