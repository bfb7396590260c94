/* test_gguf.c: the GGUF parser on a small file built here: a valid one parses with the
 * right values; every truncation, and each corrupted field, fails with a clear error and
 * no crash (run under ASan in CI); random byte corruption never crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/llm/gguf.h"

typedef struct { uint8_t b[4096]; size_t n; } buf;
static void put(buf *f, const void *p, size_t n) { memcpy(f->b + f->n, p, n); f->n += n; }
static void u32(buf *f, uint32_t v) { put(f, &v, 4); }
static void u64(buf *f, uint64_t v) { put(f, &v, 8); }
static void str(buf *f, const char *s) { u64(f, strlen(s)); put(f, s, strlen(s)); }

/* offsets of interesting fields, filled by build() */
static size_t off_version, off_nkv, off_ndims, off_dim0, off_type, off_offset, off_strlen, off_arrn;

static void build(buf *f) {
  memset(f, 0, sizeof *f);
  put(f, "GGUF", 4);
  off_version = f->n; u32(f, 3);
  u64(f, 2);               /* tensors */
  off_nkv = f->n; u64(f, 3); /* kv */
  str(f, "general.architecture"); u32(f, GGUF_STRING); off_strlen = f->n; str(f, "llama");
  str(f, "llama.block_count"); u32(f, GGUF_U32); u32(f, 7);
  str(f, "tokenizer.ggml.tokens"); u32(f, GGUF_ARRAY); u32(f, GGUF_STRING); off_arrn = f->n; u64(f, 2);
  str(f, "a"); str(f, "bc");
  str(f, "w"); off_ndims = f->n; u32(f, 2); off_dim0 = f->n; u64(f, 4); u64(f, 2); off_type = f->n; u32(f, 0);
  off_offset = f->n; u64(f, 0);
  str(f, "q"); u32(f, 1); u64(f, 32); u32(f, 8 /* Q8_0 */); u64(f, 32);
  while (f->n % 32) f->b[f->n++] = 0;
  for (int i = 0; i < 8; i++) { float v = (float)i; put(f, &v, 4); }
  f->n += 34; /* one Q8_0 block (zeros) */
}

static void expect_error(buf *f, const char *needle) {
  llm_gguf *g = (llm_gguf *)1;
  cinfer_status *st = llm_gguf_open_memory(f->b, f->n, &g);
  assert_null(g);
  if (!st) fail_msg("expected an error containing '%s'", needle);
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("error '%s' lacks '%s'", cinfer_status_message(st), needle);
  cinfer_status_free(st);
}

static void test_valid(void **s) {
  buf f;
  build(&f);
  llm_gguf *g;
  assert_null(llm_gguf_open_memory(f.b, f.n, &g));
  assert_int_equal(llm_gguf_version(g), 3);
  uint32_t v;
  assert_true(llm_gguf_get_u32(g, "llama.block_count", &v));
  assert_int_equal(v, 7);
  llm_gguf_str a;
  assert_true(llm_gguf_get_str(g, "general.architecture", &a));
  assert_int_equal(a.n, 5);
  assert_memory_equal(a.p, "llama", 5);
  const llm_gguf_kv *kv = llm_gguf_find(g, "tokenizer.ggml.tokens");
  assert_non_null(kv);
  assert_int_equal(kv->arr_n, 2);
  assert_int_equal(kv->strs[1].n, 2);
  const llm_gguf_tensor *t = llm_gguf_tensor_find(g, "w");
  assert_non_null(t);
  assert_int_equal(t->ne[0], 4);
  assert_int_equal(t->ne[1], 2);
  assert_int_equal(t->size, 32);
  assert_int_equal(((const float *)t->data)[5], 5);
  assert_int_equal(llm_gguf_tensor_find(g, "q")->size, 34);
  assert_null(llm_gguf_tensor_find(g, "nope"));
  assert_false(llm_gguf_get_u32(g, "general.architecture", &v)); /* wrong type */
  FILE *dev = fopen("/dev/null", "w");
  llm_gguf_dump(g, dev);
  fclose(dev);
  llm_gguf_close(g);
  llm_gguf_close(NULL);
}

static void test_truncated(void **s) {
  buf f;
  build(&f);
  size_t full = f.n;
  for (size_t n = 0; n < full; n++) {
    /* copy into an exact-size heap block so ASan catches any over-read */
    uint8_t *p = malloc(n ? n : 1);
    memcpy(p, f.b, n);
    llm_gguf *g;
    cinfer_status *st = llm_gguf_open_memory(p, n, &g);
    if (!st) fail_msg("truncation at %zu bytes was accepted", n);
    cinfer_status_free(st);
    free(p);
  }
}

static void test_corrupt_fields(void **s) {
  buf f;
  build(&f); memcpy(f.b, "GGUX", 4); expect_error(&f, "bad magic");
  build(&f); f.b[off_version] = 1; expect_error(&f, "version 1 not supported");
  build(&f); memset(f.b + off_nkv, 0xff, 8); expect_error(&f, "n_kv");
  build(&f); f.b[off_ndims] = 5; expect_error(&f, "n_dims 5");
  build(&f); memset(f.b + off_dim0, 0, 8); expect_error(&f, "bad dim 0");
  build(&f); memset(f.b + off_dim0, 0xff, 8); expect_error(&f, "bad dim 0");
  build(&f); f.b[off_type] = 99; expect_error(&f, "unsupported type 99");
  build(&f); f.b[off_offset] = 4; expect_error(&f, "not aligned");
  build(&f); f.b[off_offset + 1] = 1; expect_error(&f, "past end of file");
  build(&f); memset(f.b + off_strlen, 0x7f, 8); expect_error(&f, "truncated or invalid");
  build(&f); memset(f.b + off_arrn, 0x7f, 8); expect_error(&f, "string array count");
  build(&f); f.b[off_type] = 2; /* Q4_0 with a row of 4 */ expect_error(&f, "not a multiple");
}

static void test_random_corruption(void **s) {
  buf f;
  uint64_t r = 12345;
  int ok = 0, bad = 0;
  for (int it = 0; it < 20000; it++) {
    build(&f);
    for (int k = 0; k < 1 + it % 4; k++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      f.b[(r >> 33) % f.n] ^= (uint8_t)(1u << ((r >> 20) % 8));
    }
    uint8_t *p = malloc(f.n);
    memcpy(p, f.b, f.n);
    llm_gguf *g;
    cinfer_status *st = llm_gguf_open_memory(p, f.n, &g);
    if (st) {
      bad++;
      cinfer_status_free(st);
    } else {
      ok++;
      FILE *dev = fopen("/dev/null", "w");
      llm_gguf_dump(g, dev);
      fclose(dev);
      llm_gguf_close(g);
    }
    free(p);
  }
  assert_true(bad > 0 && ok > 0); /* both outcomes occur: flips in data bytes are harmless */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_corrupt_fields),
      cmocka_unit_test(test_random_corruption),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
