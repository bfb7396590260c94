/* test_quant.c: every fast kernel against its scalar reference, and each quantised dot
 * product against dequantise-then-dot in float, on random data from a fixed seed. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/llm/model.h"
#include "backends/llm/quant.h"

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static void fill_bytes(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(frand() * 127.0f + 128.0f);
}

/* Random weight blocks with sane fp16 scales: random bytes, then overwrite scale fields. */
static void make_weights(llm_type t, void *w, int64_t n) {
  size_t bytes = llm_row_bytes(t, n);
  fill_bytes(w, bytes);
  size_t bb = llm_type_block_bytes(t);
  uint8_t *p = w;
  for (size_t off = 0; off < bytes; off += bb) {
    uint16_t d = llm_fp32_to_fp16(0.01f + 0.02f * fabsf(frand())), m = llm_fp32_to_fp16(-0.1f * fabsf(frand()));
    switch (t) {
      case LLM_Q4_0: case LLM_Q8_0: case LLM_Q5_0: memcpy(p + off, &d, 2); break;
      case LLM_Q4_1: case LLM_Q5_1: case LLM_Q4_K: case LLM_Q5_K: memcpy(p + off, &d, 2); memcpy(p + off + 2, &m, 2); break;
      case LLM_Q6_K: memcpy(p + off + 208, &d, 2); break;
      default: break;
    }
  }
}

static void check_type(llm_type t) {
  const int64_t n = 1024;
  uint8_t w[4096], a[8192];
  float x[1024], wd[1024];
  for (int rep = 0; rep < 20; rep++) {
    make_weights(t, w, n);
    for (int i = 0; i < n; i++) x[i] = frand() * (rep % 3 == 0 ? 10.0f : 1.0f);
    llm_type vt = llm_type_vec_dot_type(t);
    llm_quantize_row(vt, x, a, n);
    float ref = llm_vec_dot_get_ref(t)(n, w, a);
    float fast = llm_vec_dot_get(t)(n, w, a);
    /* fast vs reference: same integer products, only float summation order differs */
    assert_true(fabsf(fast - ref) <= 1e-4f * (1.0f + fabsf(ref)));
    /* reference vs float: dequantised weights . dequantised activations */
    llm_dequant_row(t, w, wd, n);
    float xa[1024];
    llm_dequant_row(vt, a, xa, n);
    double exact = 0, mag = 0;
    for (int i = 0; i < n; i++) {
      exact += (double)wd[i] * xa[i];
      mag += fabs((double)wd[i] * xa[i]);
    }
    if (fabs(ref - exact) > 2e-3 * (mag + 1))
      fail_msg("%s: ref %f vs dequant dot %f (mag %f)", llm_type_name(t), ref, exact, mag);
  }
}

static void test_q4_0(void **s) { check_type(LLM_Q4_0); }
static void test_q4_1(void **s) { check_type(LLM_Q4_1); }
static void test_q5_0(void **s) { check_type(LLM_Q5_0); }
static void test_q5_1(void **s) { check_type(LLM_Q5_1); }
static void test_q8_0(void **s) { check_type(LLM_Q8_0); }
static void test_q4_K(void **s) { check_type(LLM_Q4_K); }
static void test_q5_K(void **s) { check_type(LLM_Q5_K); }
static void test_q6_K(void **s) { check_type(LLM_Q6_K); }

static void test_activation_quant_error(void **s) {
  /* Q8 quantisation keeps each value within half a step of the original */
  float x[256], y[256];
  uint8_t q[400];
  for (int i = 0; i < 256; i++) x[i] = frand() * 3;
  llm_type ts[] = {LLM_Q8_0, LLM_Q8_1, LLM_Q8_K};
  for (int k = 0; k < 3; k++) {
    llm_quantize_row(ts[k], x, q, 256);
    llm_dequant_row(ts[k], q, y, 256);
    for (int i = 0; i < 256; i++) assert_true(fabsf(x[i] - y[i]) <= 3.0f / 127 * 0.51f + 3e-3f);
  }
}

static void test_fp16(void **s) {
  /* all 65536 halves round-trip through float, portable and F16C paths agree */
  for (uint32_t h = 0; h < 65536; h++) {
    float a = llm_fp16_to_fp32((uint16_t)h), b = llm_fp16_to_fp32_ref((uint16_t)h);
    if (isnan(a)) { assert_true(isnan(b)); continue; }
    assert_memory_equal(&a, &b, 4);
    assert_int_equal(llm_fp32_to_fp16_ref(a), h);
  }
  for (int i = 0; i < 100000; i++) {
    float f = frand() * 70000.0f * (i % 7 == 0 ? 1e-6f : 1.0f);
    assert_int_equal(llm_fp32_to_fp16(f), llm_fp32_to_fp16_ref(f));
  }
  uint16_t x[77], y[77];
  for (int i = 0; i < 77; i++) { x[i] = llm_fp32_to_fp16(frand()); y[i] = llm_fp32_to_fp16(frand()); }
  float r = llm_dot_f16_ref(77, x, y), f = llm_dot_f16(77, x, y);
  assert_true(fabsf(r - f) < 1e-4f);
}

static void test_matmul_threads(void **s) {
  /* batched matmul (several tokens, threads) equals the per-row reference */
  enum { K = 256, N = 40, T = 5 };
  static uint8_t w[N * (K / 32) * 20];
  static float x[T * K], y[T * N], yr[T * N];
  static uint8_t xq[T * K * 4];
  for (int r = 0; r < N; r++) make_weights(LLM_Q4_1, w + (size_t)r * llm_row_bytes(LLM_Q4_1, K), K);
  for (int i = 0; i < T * K; i++) x[i] = frand();
  llm_pool *p;
  assert_null(llm_pool_create(3, &p));
  llm_matmul(p, w, LLM_Q4_1, N, K, x, T, xq, y, false);
  llm_matmul(NULL, w, LLM_Q4_1, N, K, x, T, xq, yr, true);
  for (int i = 0; i < T * N; i++) assert_true(fabsf(y[i] - yr[i]) <= 1e-4f * (1 + fabsf(yr[i])));
  llm_pool_destroy(p);
  llm_pool_destroy(NULL);
}

static void test_dot4_matches_single(void **s) {
  /* the multi-row kernels give bit-identical results to the single-row fast path */
  llm_type ts[] = {LLM_Q4_0, LLM_Q4_1, LLM_Q8_0};
  for (int k = 0; k < 3; k++) {
    llm_vec_dot4_fn d4 = llm_vec_dot4_get(ts[k]);
    if (!d4) {
      assert_false(llm_cpu_has_avx2()); /* only absent without AVX2 */
      continue;
    }
    enum { N = 512 };
    uint8_t w[N * 2], a[4][N * 2];
    float x[N];
    llm_type vt = llm_type_vec_dot_type(ts[k]);
    size_t as = sizeof a[0];
    make_weights(ts[k], w, N);
    for (int j = 0; j < 4; j++) {
      for (int i = 0; i < N; i++) x[i] = frand();
      llm_quantize_row(vt, x, a[j], N);
    }
    for (int nt = 1; nt <= 4; nt++) {
      float y[4];
      d4(N, w, a, as, nt, y);
      for (int j = 0; j < nt; j++) {
        float one = llm_vec_dot_get(ts[k])(N, w, a[j]);
        assert_memory_equal(&one, &y[j], 4);
      }
    }
  }
}

/* The tiled GEMM against per-output dot products, for every shape class the tiling has:
 * rows a multiple of 4 or not, activation rows 1..10 (full tiles of 3 and every tail),
 * strided output. Bit-identical to the single-row fast kernel and close to the scalar
 * reference. */
static void test_gemm_matches_dot(void **s) {
  llm_type ts[] = {LLM_Q4_0, LLM_Q4_1, LLM_Q5_0, LLM_Q8_0, LLM_Q4_K, LLM_Q6_K};
  enum { K = 512, MAXR = 11, MAXT = 10, LDY = 13 };
  static uint8_t w[MAXR * K * 2], a[MAXT * K * 2];
  static float x[K], y[MAXT * LDY];
  for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
    llm_gemm_fn gemm = llm_gemm_get(ts[k]);
    if (!gemm) {
      assert_false(llm_cpu_has_avx2()); /* only absent without AVX2 */
      continue;
    }
    llm_type vt = llm_type_vec_dot_type(ts[k]);
    size_t wrow = llm_row_bytes(ts[k], K), arow = llm_row_bytes(vt, K);
    for (int r = 0; r < MAXR; r++) make_weights(ts[k], w + r * wrow, K);
    for (int t = 0; t < MAXT; t++) {
      for (int i = 0; i < K; i++) x[i] = frand() * (t % 3 == 0 ? 5.0f : 1.0f);
      llm_quantize_row(vt, x, a + t * arow, K);
    }
    int rows[] = {1, 3, 4, 5, 8, 11};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
      for (int nt = 1; nt <= MAXT; nt++) {
        for (int i = 0; i < MAXT * LDY; i++) y[i] = -12345.0f;
        gemm(K, w, wrow, rows[ri], a, arow, nt, y, LDY);
        for (int t = 0; t < MAXT; t++)
          for (int r = 0; r < LDY; r++) {
            float got = y[t * LDY + r];
            if (t >= nt || r >= rows[ri]) { /* nothing outside the nr x nt block is written */
              assert_true(got == -12345.0f);
              continue;
            }
            float one = llm_vec_dot_get(ts[k])(K, w + r * wrow, a + t * arow);
            float ref = llm_vec_dot_get_ref(ts[k])(K, w + r * wrow, a + t * arow);
            if (memcmp(&one, &got, 4))
              fail_msg("%s: rows %d nt %d (%d,%d): gemm %.9g vs vec_dot %.9g", llm_type_name(ts[k]), rows[ri], nt, r, t,
                       got, one);
            assert_true(fabsf(got - ref) <= 1e-4f * (1.0f + fabsf(ref)));
          }
      }
  }
}

static void test_quantize_matches_ref(void **s) {
  /* the vectorised activation quantiser writes the reference's bytes: random rows of
   * several magnitudes, an all-zero block, exact halves (round half to even) */
  enum { N = 256 };
  float x[N];
  uint8_t q[2][N * 2];
  llm_type ts[] = {LLM_Q8_0, LLM_Q8_1, LLM_Q8_K};
  for (int rep = 0; rep < 50; rep++) {
    float mag = rep % 5 == 0 ? 1e-3f : rep % 5 == 1 ? 100.0f : 1.0f;
    for (int i = 0; i < N; i++) x[i] = frand() * mag;
    if (rep == 1)
      for (int i = 0; i < 32; i++) x[i] = 0;
    if (rep == 2)
      for (int i = 0; i < 32; i++) x[i] = (i == 0 ? 127.0f : (float)(i % 7) - 2.5f); /* v * 127/127: halves */
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
      size_t bytes = llm_row_bytes(ts[k], N);
      memset(q, 0, sizeof q);
      llm_quantize_row(ts[k], x, q[0], N);
      llm_quantize_row_ref(ts[k], x, q[1], N);
      assert_memory_equal(q[0], q[1], bytes);
    }
  }
}

static void test_attention_helpers_match_ref(void **s) {
  /* fp16 row conversion, fp16 axpy and the 32-lane reduction: fast == reference, bit for
   * bit, for lengths with and without a tail */
  enum { MAXN = 77 };
  float x[MAXN], acc[2][32 * MAXN], o[2][MAXN];
  uint16_t h[2][MAXN], v[MAXN];
  int ns[] = {1, 8, 13, 64, 77};
  for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
    int n = ns[k];
    for (int i = 0; i < n; i++) x[i] = frand() * (i % 5 == 0 ? 70000.0f : 3.0f);
    llm_fp32_to_fp16_row(h[0], x, n);
    llm_fp32_to_fp16_row_ref(h[1], x, n);
    assert_memory_equal(h[0], h[1], (size_t)n * 2);
    for (int i = 0; i < 32 * n; i++) acc[0][i] = acc[1][i] = frand();
    for (int rep = 0; rep < 40; rep++) {
      for (int i = 0; i < n; i++) v[i] = llm_fp32_to_fp16(frand() * 4);
      float p = frand();
      llm_axpy_f16(n, acc[0] + (rep & 31) * n, v, p);
      llm_axpy_f16_ref(n, acc[1] + (rep & 31) * n, v, p);
    }
    assert_memory_equal(acc[0], acc[1], (size_t)32 * n * 4);
    llm_reduce_lanes32(n, acc[0], o[0]);
    llm_reduce_lanes32_ref(n, acc[1], o[1]);
    assert_memory_equal(o[0], o[1], (size_t)n * 4);
  }
}

/* The vectorised argmax against the scalar loop: every length up to 70 (vector body and
 * tails), the maximum at every position, ties (the first wins), infinities and NaNs. */
static void test_argmax_matches_ref(void **s) {
  (void)s;
  static float x[49152];
  for (int n = 1; n <= 70; n++)
    for (int at = 0; at < n; at++) {
      for (int i = 0; i < n; i++) x[i] = frand();
      x[at] = 7.0f;
      assert_int_equal(llm_argmax(x, n), at);
      assert_int_equal(llm_argmax_ref(x, n), at);
      if (at + 1 < n) { /* a later tie does not move the choice */
        x[n - 1] = 7.0f;
        assert_int_equal(llm_argmax(x, n), at);
      }
      x[at] = NAN; /* a NaN is never chosen: the reference's choice among the rest */
      assert_int_equal(llm_argmax(x, n), llm_argmax_ref(x, n));
      if (n > 1) assert_false(llm_argmax(x, n) == at);
    }
  for (int i = 0; i < 49152; i++) x[i] = frand() * 30.0f;
  x[49151] = INFINITY;
  assert_int_equal(llm_argmax(x, 49152), 49151);
  for (int i = 0; i < 49152; i++) x[i] = -INFINITY;
  x[33333] = -1e30f;
  assert_int_equal(llm_argmax(x, 49152), 33333);
  x[33333] = -INFINITY;
  assert_int_equal(llm_argmax(x, 49152), 0);
  for (int i = 0; i < 100; i++) x[i] = NAN;
  assert_int_equal(llm_argmax(x, 100), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_q4_0), cmocka_unit_test(test_q4_1), cmocka_unit_test(test_q5_0),
      cmocka_unit_test(test_q5_1), cmocka_unit_test(test_q8_0), cmocka_unit_test(test_q4_K),
      cmocka_unit_test(test_q5_K), cmocka_unit_test(test_q6_K), cmocka_unit_test(test_activation_quant_error),
      cmocka_unit_test(test_fp16), cmocka_unit_test(test_matmul_threads),
      cmocka_unit_test(test_dot4_matches_single), cmocka_unit_test(test_gemm_matches_dot),
      cmocka_unit_test(test_quantize_matches_ref), cmocka_unit_test(test_attention_helpers_match_ref),
      cmocka_unit_test(test_argmax_matches_ref),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
