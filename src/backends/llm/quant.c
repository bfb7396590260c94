/* quant.c: ggml-compatible block formats: dequantisation, activation quantisation, and
 * dot products (scalar references + AVX2/FMA fast paths). Block layouts are bit-exact
 * with ggml (see ggml-common.h); all sizes are checked by the GGUF loader before use. */
#include "backends/llm/quant.h"

#include <math.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LLM_AVX2 1
#endif
#if defined(__F16C__)
#include <immintrin.h>
#endif

#define QK 32
#define QKK 256
typedef struct { uint16_t d; uint8_t qs[16]; } blk_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } blk_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } blk_q8_0;
typedef struct { uint16_t d, s; int8_t qs[32]; } blk_q8_1;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } blk_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } blk_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } blk_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } blk_q8_K;
_Static_assert(sizeof(blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1");
_Static_assert(sizeof(blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(blk_q8_1) == 36, "q8_1");
_Static_assert(sizeof(blk_q4_K) == 144, "q4_K");
_Static_assert(sizeof(blk_q5_K) == 176, "q5_K");
_Static_assert(sizeof(blk_q6_K) == 210, "q6_K");
_Static_assert(sizeof(blk_q8_K) == 292, "q8_K");

static const struct { const char *name; int block; size_t bytes; bool supported; } type_info[LLM_TYPE_COUNT_] = {
    [LLM_F32] = {"F32", 1, 4, true},       [LLM_F16] = {"F16", 1, 2, true},
    [LLM_Q4_0] = {"Q4_0", 32, 18, true},   [LLM_Q4_1] = {"Q4_1", 32, 20, true},
    [LLM_Q5_0] = {"Q5_0", 32, 22, true},   [LLM_Q5_1] = {"Q5_1", 32, 24, true},
    [LLM_Q8_0] = {"Q8_0", 32, 34, true},   [LLM_Q8_1] = {"Q8_1", 32, 36, false},
    [LLM_Q2_K] = {"Q2_K", 256, 84, false}, [LLM_Q3_K] = {"Q3_K", 256, 110, false},
    [LLM_Q4_K] = {"Q4_K", 256, 144, true}, [LLM_Q5_K] = {"Q5_K", 256, 176, true},
    [LLM_Q6_K] = {"Q6_K", 256, 210, true}, [LLM_Q8_K] = {"Q8_K", 256, 292, false},
    [LLM_BF16] = {"BF16", 1, 2, true},
};

int llm_type_block(llm_type t) { return (unsigned)t < LLM_TYPE_COUNT_ ? type_info[t].block : 0; }
size_t llm_type_block_bytes(llm_type t) { return (unsigned)t < LLM_TYPE_COUNT_ ? type_info[t].bytes : 0; }
const char *llm_type_name(llm_type t) {
  return (unsigned)t < LLM_TYPE_COUNT_ && type_info[t].name ? type_info[t].name : "?";
}
bool llm_type_supported(llm_type t) { return (unsigned)t < LLM_TYPE_COUNT_ && type_info[t].supported; }
size_t llm_row_bytes(llm_type t, int64_t n) {
  return (size_t)(n / llm_type_block(t)) * llm_type_block_bytes(t);
}
llm_type llm_type_vec_dot_type(llm_type t) {
  switch (t) {
    case LLM_Q4_0: case LLM_Q5_0: case LLM_Q8_0: return LLM_Q8_0;
    case LLM_Q4_1: case LLM_Q5_1: return LLM_Q8_1;
    case LLM_Q4_K: case LLM_Q5_K: case LLM_Q6_K: return LLM_Q8_K;
    default: return LLM_F32;
  }
}

/* ---- fp16 / bf16 ---- */
float llm_fp16_to_fp32_ref(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
  if (e == 0) {
    if (m == 0) f = s;
    else { /* subnormal */
      float v = ldexpf((float)m, -24);
      memcpy(&f, &v, 4);
      f |= s;
    }
  } else if (e == 31) f = s | 0x7f800000 | (m << 13);
  else f = s | ((e + 112) << 23) | (m << 13);
  float r;
  memcpy(&r, &f, 4);
  return r;
}
uint16_t llm_fp32_to_fp16_ref(float x) { /* round to nearest even */
  uint32_t b;
  memcpy(&b, &x, 4);
  uint32_t s = (b >> 16) & 0x8000;
  int32_t e = (int32_t)((b >> 23) & 0xff) - 127 + 15;
  uint32_t m = b & 0x7fffff;
  if (((b >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
  if (e >= 31) return (uint16_t)(s | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)s;
    m |= 0x800000;
    uint32_t shift = (uint32_t)(14 - e), r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(s | r);
  }
  uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(s | r);
}
float llm_fp16_to_fp32(uint16_t h) {
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return llm_fp16_to_fp32_ref(h);
#endif
}
uint16_t llm_fp32_to_fp16(float f) {
#ifdef __F16C__
  return (uint16_t)_cvtss_sh(f, 0);
#else
  return llm_fp32_to_fp16_ref(f);
#endif
}
float llm_bf16_to_fp32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#define H2F llm_fp16_to_fp32

/* ---- dequantisation (reference) ---- */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

void llm_dequant_row(llm_type t, const void *src, float *y, int64_t n) {
  switch (t) {
    case LLM_F32: memcpy(y, src, (size_t)n * 4); return;
    case LLM_F16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) y[i] = H2F(s[i]); return; }
    case LLM_BF16: { const uint16_t *s = src; for (int64_t i = 0; i < n; i++) y[i] = llm_bf16_to_fp32(s[i]); return; }
    case LLM_Q4_0: {
      const blk_q4_0 *b = src;
      for (int64_t i = 0; i < n / QK; i++, y += QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
          y[j] = ((b[i].qs[j] & 0xF) - 8) * d;
          y[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case LLM_Q4_1: {
      const blk_q4_1 *b = src;
      for (int64_t i = 0; i < n / QK; i++, y += QK) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        for (int j = 0; j < 16; j++) {
          y[j] = (b[i].qs[j] & 0xF) * d + m;
          y[j + 16] = (b[i].qs[j] >> 4) * d + m;
        }
      }
      return;
    }
    case LLM_Q5_0: case LLM_Q5_1: {
      bool one = t == LLM_Q5_1;
      const uint8_t *p = src;
      size_t bb = one ? 24 : 22;
      for (int64_t i = 0; i < n / QK; i++, y += QK, p += bb) {
        uint16_t dh, mh = 0;
        memcpy(&dh, p, 2);
        if (one) memcpy(&mh, p + 2, 2);
        const uint8_t *qhp = p + (one ? 4 : 2), *qs = qhp + 4;
        uint32_t qh;
        memcpy(&qh, qhp, 4);
        float d = H2F(dh), m = one ? H2F(mh) : 0;
        for (int j = 0; j < 16; j++) {
          int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
          int x0 = (qs[j] & 0xF) | xh0, x1 = (qs[j] >> 4) | xh1;
          if (one) { y[j] = x0 * d + m; y[j + 16] = x1 * d + m; }
          else { y[j] = (x0 - 16) * d; y[j + 16] = (x1 - 16) * d; }
        }
      }
      return;
    }
    case LLM_Q8_0: {
      const blk_q8_0 *b = src;
      for (int64_t i = 0; i < n / QK; i++, y += QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = b[i].qs[j] * d;
      }
      return;
    }
    case LLM_Q8_1: {
      const blk_q8_1 *b = src;
      for (int64_t i = 0; i < n / QK; i++, y += QK) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 32; j++) y[j] = b[i].qs[j] * d;
      }
      return;
    }
    case LLM_Q8_K: {
      const blk_q8_K *b = src;
      for (int64_t i = 0; i < n / QKK; i++, y += QKK)
        for (int j = 0; j < QKK; j++) y[j] = b[i].d * b[i].qs[j];
      return;
    }
    case LLM_Q4_K: {
      const blk_q4_K *b = src;
      for (int64_t i = 0; i < n / QKK; i++) {
        const uint8_t *q = b[i].qs;
        float d = H2F(b[i].d), mn = H2F(b[i].dmin);
        int is = 0;
        for (int j = 0; j < QKK; j += 64) {
          uint8_t sc, m;
          scale_min_k4(is, b[i].scales, &sc, &m);
          float d1 = d * sc, m1 = mn * m;
          scale_min_k4(is + 1, b[i].scales, &sc, &m);
          float d2 = d * sc, m2 = mn * m;
          for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
          for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
          q += 32;
          is += 2;
        }
      }
      return;
    }
    case LLM_Q5_K: {
      const blk_q5_K *b = src;
      for (int64_t i = 0; i < n / QKK; i++) {
        const uint8_t *ql = b[i].qs, *qh = b[i].qh;
        float d = H2F(b[i].d), mn = H2F(b[i].dmin);
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QKK; j += 64) {
          uint8_t sc, m;
          scale_min_k4(is, b[i].scales, &sc, &m);
          float d1 = d * sc, m1 = mn * m;
          scale_min_k4(is + 1, b[i].scales, &sc, &m);
          float d2 = d * sc, m2 = mn * m;
          for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
          for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
          ql += 32;
          is += 2;
          u1 = (uint8_t)(u1 << 2);
          u2 = (uint8_t)(u2 << 2);
        }
      }
      return;
    }
    case LLM_Q6_K: {
      const blk_q6_K *b = src;
      for (int64_t i = 0; i < n / QKK; i++) {
        float d = H2F(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int nn = 0; nn < QKK; nn += 128) {
          for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
          }
          y += 128;
          ql += 64;
          qh += 32;
          sc += 8;
        }
      }
      return;
    }
    default: memset(y, 0, (size_t)n * 4); return;
  }
}

/* ---- activation quantisation ---- */
static void quant_q8_ref(const float *x, int8_t *q, float *d_out, int *sum_out);
static void quant_q8(const float *x, int8_t *q, float *d_out, int *sum_out) {
#ifdef LLM_AVX2
  /* the scalar code below, 32 lanes at once: max and the integer sum are exact, the
   * product and round-half-even are the same IEEE operations */
  __m256 v[4], am = _mm256_setzero_ps();
  for (int k = 0; k < 4; k++) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    am = _mm256_max_ps(am, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float vmax = _mm_cvtss_f32(m4);
  const float vd = vmax / 127.f, vid = vmax != 0.0f ? 127.f / vmax : 0.0f;
  __m256i iv[4], isum = _mm256_setzero_si256();
  for (int k = 0; k < 4; k++) {
    iv[k] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(vid)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    isum = _mm256_add_epi32(isum, iv[k]);
  }
  __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
  _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(isum), _mm256_extracti128_si256(isum, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
  *d_out = vd;
  *sum_out = _mm_cvtsi128_si32(s4);
#else
  quant_q8_ref(x, q, d_out, sum_out);
#endif
}
static void quant_q8_ref(const float *x, int8_t *q, float *d_out, int *sum_out) {
  float amax = 0;
  for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
  float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
  int sum = 0;
  for (int j = 0; j < QK; j++) {
    int v = (int)nearbyintf(x[j] * id); /* default rounding mode: half to even */
    q[j] = (int8_t)v;
    sum += v;
  }
  *d_out = d;
  *sum_out = sum;
}

static inline int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i;
  memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

static void quantize_row(llm_type t, const float *x, void *dst, int64_t n, bool ref) {
  void (*quant_q8_fn)(const float *, int8_t *, float *, int *) = ref ? quant_q8_ref : quant_q8;
  switch (t) {
    case LLM_Q8_0: {
      blk_q8_0 *b = dst;
      for (int64_t i = 0; i < n / QK; i++) {
        float d;
        int s;
        quant_q8_fn(x + i * QK, b[i].qs, &d, &s);
        b[i].d = llm_fp32_to_fp16(d);
      }
      return;
    }
    case LLM_Q8_1: {
      blk_q8_1 *b = dst;
      for (int64_t i = 0; i < n / QK; i++) {
        float d;
        int s;
        quant_q8_fn(x + i * QK, b[i].qs, &d, &s);
        b[i].d = llm_fp32_to_fp16(d);
        b[i].s = llm_fp32_to_fp16(d * (float)s);
      }
      return;
    }
    case LLM_Q8_K: {
      blk_q8_K *b = dst;
      for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        float max = 0, amax = 0;
        for (int j = 0; j < QKK; j++) {
          float ax = fabsf(x[j]);
          if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
          memset(&b[i], 0, sizeof b[i]);
          continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QKK; j++) {
          int v = nearest_int(iscale * x[j]);
          b[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QKK / 16; j++) {
          int sum = 0;
          for (int ii = 0; ii < 16; ++ii) sum += b[i].qs[j * 16 + ii];
          b[i].bsums[j] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
      }
      return;
    }
    case LLM_F16: {
      uint16_t *o = dst;
      for (int64_t i = 0; i < n; i++) o[i] = llm_fp32_to_fp16(x[i]);
      return;
    }
    default: memcpy(dst, x, (size_t)n * 4); return;
  }
}
void llm_quantize_row(llm_type t, const float *x, void *dst, int64_t n) { quantize_row(t, x, dst, n, false); }
void llm_quantize_row_ref(llm_type t, const float *x, void *dst, int64_t n) { quantize_row(t, x, dst, n, true); }

/* ---- scalar reference dot products ---- */
static float dot_f32_ref(int64_t n, const void *w, const void *a) {
  const float *x = w, *y = a;
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}
static float dot_f16w_ref(int64_t n, const void *w, const void *a) {
  const uint16_t *x = w;
  const float *y = a;
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += H2F(x[i]) * y[i];
  return s;
}
static float dot_bf16w_ref(int64_t n, const void *w, const void *a) {
  const uint16_t *x = w;
  const float *y = a;
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += llm_bf16_to_fp32(x[i]) * y[i];
  return s;
}
static float dot_q4_0_ref(int64_t n, const void *w, const void *a) {
  const blk_q4_0 *x = w;
  const blk_q8_0 *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QK; i++) {
    int isum = 0;
    for (int j = 0; j < 16; j++)
      isum += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    s += isum * H2F(x[i].d) * H2F(y[i].d);
  }
  return s;
}
static float dot_q4_1_ref(int64_t n, const void *w, const void *a) {
  const blk_q4_1 *x = w;
  const blk_q8_1 *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QK; i++) {
    int isum = 0;
    for (int j = 0; j < 16; j++)
      isum += (x[i].qs[j] & 0xF) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    s += (H2F(x[i].d) * H2F(y[i].d)) * isum + H2F(x[i].m) * H2F(y[i].s);
  }
  return s;
}
static float dot_q5_0_ref(int64_t n, const void *w, const void *a) {
  const blk_q5_0 *x = w;
  const blk_q8_0 *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QK; i++) {
    uint32_t qh;
    memcpy(&qh, x[i].qh, 4);
    int isum = 0;
    for (int j = 0; j < 16; j++) {
      int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
      isum += (((x[i].qs[j] & 0xF) | xh0) - 16) * y[i].qs[j] +
              (((x[i].qs[j] >> 4) | xh1) - 16) * y[i].qs[j + 16];
    }
    s += isum * H2F(x[i].d) * H2F(y[i].d);
  }
  return s;
}
static float dot_q5_1_ref(int64_t n, const void *w, const void *a) {
  const blk_q5_1 *x = w;
  const blk_q8_1 *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QK; i++) {
    uint32_t qh;
    memcpy(&qh, x[i].qh, 4);
    int isum = 0;
    for (int j = 0; j < 16; j++) {
      int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
      isum += ((x[i].qs[j] & 0xF) | xh0) * y[i].qs[j] + ((x[i].qs[j] >> 4) | xh1) * y[i].qs[j + 16];
    }
    s += (H2F(x[i].d) * H2F(y[i].d)) * isum + H2F(x[i].m) * H2F(y[i].s);
  }
  return s;
}
static float dot_q8_0_ref(int64_t n, const void *w, const void *a) {
  const blk_q8_0 *x = w, *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QK; i++) {
    int isum = 0;
    for (int j = 0; j < QK; j++) isum += x[i].qs[j] * y[i].qs[j];
    s += isum * (H2F(x[i].d) * H2F(y[i].d));
  }
  return s;
}
static float dot_q4_K_ref(int64_t n, const void *w, const void *a) {
  const blk_q4_K *x = w;
  const blk_q8_K *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QKK; i++) {
    float d = H2F(x[i].d) * y[i].d, dmin = H2F(x[i].dmin) * y[i].d;
    const uint8_t *q = x[i].qs;
    const int8_t *q8 = y[i].qs;
    for (int j = 0; j < 4; j++) {
      uint8_t sc1, m1, sc2, m2;
      scale_min_k4(2 * j, x[i].scales, &sc1, &m1);
      scale_min_k4(2 * j + 1, x[i].scales, &sc2, &m2);
      int s1 = 0, s2 = 0;
      for (int l = 0; l < 32; l++) {
        s1 += (q[l] & 0xF) * q8[l];
        s2 += (q[l] >> 4) * q8[l + 32];
      }
      int b1 = y[i].bsums[4 * j] + y[i].bsums[4 * j + 1], b2 = y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3];
      s += d * (sc1 * s1 + sc2 * s2) - dmin * (m1 * b1 + m2 * b2);
      q += 32;
      q8 += 64;
    }
  }
  return s;
}
static float dot_q5_K_ref(int64_t n, const void *w, const void *a) {
  const blk_q5_K *x = w;
  const blk_q8_K *y = a;
  float s = 0;
  for (int64_t i = 0; i < n / QKK; i++) {
    float d = H2F(x[i].d) * y[i].d, dmin = H2F(x[i].dmin) * y[i].d;
    const uint8_t *ql = x[i].qs, *qh = x[i].qh;
    const int8_t *q8 = y[i].qs;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 4; j++) {
      uint8_t sc1, m1, sc2, m2;
      scale_min_k4(2 * j, x[i].scales, &sc1, &m1);
      scale_min_k4(2 * j + 1, x[i].scales, &sc2, &m2);
      int s1 = 0, s2 = 0;
      for (int l = 0; l < 32; l++) {
        s1 += ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) * q8[l];
        s2 += ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) * q8[l + 32];
      }
      int b1 = y[i].bsums[4 * j] + y[i].bsums[4 * j + 1], b2 = y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3];
      s += d * (sc1 * s1 + sc2 * s2) - dmin * (m1 * b1 + m2 * b2);
      ql += 32;
      q8 += 64;
      u1 = (uint8_t)(u1 << 2);
      u2 = (uint8_t)(u2 << 2);
    }
  }
  return s;
}
static float dot_q6_K_ref(int64_t n, const void *w, const void *a) {
  const blk_q6_K *x = w;
  const blk_q8_K *y = a;
  float s = 0;
  int8_t q6[QKK];
  for (int64_t i = 0; i < n / QKK; i++) {
    const uint8_t *ql = x[i].ql, *qh = x[i].qh;
    for (int nn = 0; nn < QKK; nn += 128) {
      for (int l = 0; l < 32; l++) {
        q6[nn + l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        q6[nn + l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        q6[nn + l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        q6[nn + l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
      ql += 64;
      qh += 32;
    }
    int isum = 0;
    for (int g = 0; g < 16; g++) {
      int gs = 0;
      for (int l = 0; l < 16; l++) gs += q6[g * 16 + l] * y[i].qs[g * 16 + l];
      isum += x[i].scales[g] * gs;
    }
    s += H2F(x[i].d) * y[i].d * isum;
  }
  return s;
}

/* ---- AVX2 / FMA ---- */
#ifdef LLM_AVX2
static inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}
static inline __m256i nibbles32(const uint8_t *p) {
  __m128i t = _mm_loadu_si128((const __m128i *)p);
  __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(_mm256_set1_epi8(0xF), b);
}
static inline __m256 sum_i8_pairs(__m256i x, __m256i y) {
  __m256i ax = _mm256_sign_epi8(x, x), sy = _mm256_sign_epi8(y, x);
  __m256i dot = _mm256_maddubs_epi16(ax, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)));
}
static inline __m256 sum_u8_i8_pairs(__m256i ux, __m256i sy) {
  __m256i dot = _mm256_maddubs_epi16(ux, sy);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)));
}
static float dot_q4_0_avx2(int64_t n, const void *w, const void *a) {
  const blk_q4_0 *x = w;
  const blk_q8_0 *y = a;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK; i++) {
    __m256 d = _mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d));
    __m256i qx = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
    __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc = _mm256_fmadd_ps(d, sum_i8_pairs(qx, qy), acc);
  }
  return hsum8(acc);
}
static float dot_q4_1_avx2(int64_t n, const void *w, const void *a) {
  const blk_q4_1 *x = w;
  const blk_q8_1 *y = a;
  __m256 acc = _mm256_setzero_ps();
  float summs = 0;
  for (int64_t i = 0; i < n / QK; i++) {
    summs = fmaf(H2F(x[i].m), H2F(y[i].s), summs);
    __m256 d = _mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d));
    __m256i qx = nibbles32(x[i].qs);
    __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc = _mm256_fmadd_ps(d, sum_u8_i8_pairs(qx, qy), acc);
  }
  return hsum8(acc) + summs;
}
static float dot_q8_0_avx2(int64_t n, const void *w, const void *a) {
  const blk_q8_0 *x = w, *y = a;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK; i++) {
    __m256 d = _mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d));
    __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
    __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc = _mm256_fmadd_ps(d, sum_i8_pairs(qx, qy), acc);
  }
  return hsum8(acc);
}
/* One weight row against up to 4 activation rows: the weight block is unpacked once and
 * used for every row. Per row the operations and their order are those of the single-row
 * kernel above, so results are bit-identical to it. */
static void dot4_q4_0_avx2(int64_t n, const void *w, const void *a, size_t as, int nt, float *y) {
  const blk_q4_0 *x = w;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < n / QK; i++) {
    float dx = H2F(x[i].d);
    __m256i qx = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
    for (int j = 0; j < nt; j++) {
      const blk_q8_0 *yb = (const blk_q8_0 *)((const uint8_t *)a + (size_t)j * as) + i;
      __m256 d = _mm256_set1_ps(dx * H2F(yb->d));
      acc[j] = _mm256_fmadd_ps(d, sum_i8_pairs(qx, _mm256_loadu_si256((const __m256i *)yb->qs)), acc[j]);
    }
  }
  for (int j = 0; j < nt; j++) y[j] = hsum8(acc[j]);
}
static void dot4_q4_1_avx2(int64_t n, const void *w, const void *a, size_t as, int nt, float *y) {
  const blk_q4_1 *x = w;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  float summs[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n / QK; i++) {
    float dx = H2F(x[i].d), mx = H2F(x[i].m);
    __m256i qx = nibbles32(x[i].qs);
    for (int j = 0; j < nt; j++) {
      const blk_q8_1 *yb = (const blk_q8_1 *)((const uint8_t *)a + (size_t)j * as) + i;
      summs[j] = fmaf(mx, H2F(yb->s), summs[j]);
      __m256 d = _mm256_set1_ps(dx * H2F(yb->d));
      acc[j] = _mm256_fmadd_ps(d, sum_u8_i8_pairs(qx, _mm256_loadu_si256((const __m256i *)yb->qs)), acc[j]);
    }
  }
  for (int j = 0; j < nt; j++) y[j] = hsum8(acc[j]) + summs[j];
}
static void dot4_q8_0_avx2(int64_t n, const void *w, const void *a, size_t as, int nt, float *y) {
  const blk_q8_0 *x = w;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < n / QK; i++) {
    float dx = H2F(x[i].d);
    __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
    for (int j = 0; j < nt; j++) {
      const blk_q8_0 *yb = (const blk_q8_0 *)((const uint8_t *)a + (size_t)j * as) + i;
      __m256 d = _mm256_set1_ps(dx * H2F(yb->d));
      acc[j] = _mm256_fmadd_ps(d, sum_i8_pairs(qx, _mm256_loadu_si256((const __m256i *)yb->qs)), acc[j]);
    }
  }
  for (int j = 0; j < nt; j++) y[j] = hsum8(acc[j]);
}
/* Q5_0's fifth bits as ggml's AVX2 kernel applies them: byte j = 0xF0 where bit j of qh is
 * clear, so nibble | that = (nibble | bit << 4) - 16 as a signed byte. */
static inline __m256i q5_high(const uint8_t *qh) {
  uint32_t x32;
  memcpy(&x32, qh, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  __m256i set = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
  return _mm256_andnot_si256(set, _mm256_set1_epi8((char)0xF0));
}
static float dot_q5_0_avx2(int64_t n, const void *w, const void *a) {
  const blk_q5_0 *x = w;
  const blk_q8_0 *y = a;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK; i++) {
    __m256 d = _mm256_set1_ps(H2F(x[i].d) * H2F(y[i].d));
    __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), q5_high(x[i].qh));
    __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
    acc = _mm256_fmadd_ps(d, sum_i8_pairs(qx, qy), acc);
  }
  return hsum8(acc);
}

/* Q4_K x Q8_K and Q6_K x Q8_K: ggml's AVX2 kernels (integer sums per 256-block with the
 * 6-bit scales applied by madd, one float fma per block; Q4_K's mins from the block sums). */
static float dot_q4_K_avx2(int64_t n, const void *w, const void *a) {
  const blk_q4_K *x = w;
  const blk_q8_K *y = a;
  const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_m = _mm_setzero_ps();
  for (int64_t i = 0; i < n / QKK; i++) {
    const float d = y[i].d * H2F(x[i].d), dmin = -y[i].d * H2F(x[i].dmin);
    uint32_t utmp[4];
    memcpy(utmp, x[i].scales, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    const uint8_t *q4 = x[i].qs;
    const int8_t *q8 = y[i].qs;
    const __m256i mins_and_scales =
        _mm256_cvtepu8_epi16(_mm_set_epi32((int)utmp[3], (int)utmp[2], (int)utmp[1], (int)utmp[0]));
    const __m256i q8sums = _mm256_loadu_si256((const __m256i *)y[i].bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
    const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
    acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < QKK / 64; ++j) {
      /* 16-bit scale 2j (low nibbles) and 2j+1 (high nibbles) in every lane */
      const __m256i scale_l = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)((4 * j + 1) << 8 | 4 * j)));
      const __m256i scale_h = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)((4 * j + 3) << 8 | (4 * j + 2))));
      const __m256i q4bits = _mm256_loadu_si256((const __m256i *)q4);
      q4 += 32;
      const __m256i q4l = _mm256_and_si256(q4bits, m4), q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
      __m256i p16l = _mm256_maddubs_epi16(q4l, _mm256_loadu_si256((const __m256i *)q8));
      q8 += 32;
      __m256i p16h = _mm256_maddubs_epi16(q4h, _mm256_loadu_si256((const __m256i *)q8));
      q8 += 32;
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(scale_l, p16l), _mm256_madd_epi16(scale_h, p16h)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
  acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
  return hsum8(acc) + _mm_cvtss_f32(acc_m);
}
static float dot_q6_K_avx2(int64_t n, const void *w, const void *a) {
  const blk_q6_K *x = w;
  const blk_q8_K *y = a;
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), m32s = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QKK; i++) {
    const float d = y[i].d * H2F(x[i].d);
    const uint8_t *q4 = x[i].ql, *qh = x[i].qh;
    const int8_t *q8 = y[i].qs;
    const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < QKK / 128; ++j) {
      __m256i sc[4];
      for (int k = 0; k < 4; k++) /* scales 8j+2k (first 16 values) and 8j+2k+1 (next 16) */
        sc[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
            scales, _mm_set_epi64x((long long)(0x0101010101010101ull * (uint64_t)(8 * j + 2 * k + 1)),
                                   (long long)(0x0101010101010101ull * (uint64_t)(8 * j + 2 * k)))));
      const __m256i q4bits1 = _mm256_loadu_si256((const __m256i *)q4), q4bits2 = _mm256_loadu_si256((const __m256i *)(q4 + 32));
      const __m256i q4bitsH = _mm256_loadu_si256((const __m256i *)qh);
      q4 += 64;
      qh += 32;
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(q4bits1, m4), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(q4bits2, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 6), m2), 4));
      for (int k = 0; k < 4; k++) {
        const __m256i q8k = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
        __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], q8k), _mm256_maddubs_epi16(m32s, q8k));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc[k], p16));
      }
      q8 += 128;
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum8(acc);
}

/* ---- tiled GEMM (weights x activations), AVX2 ----
 * A tile of RM weight rows x RN activation rows keeps RM*RN 8-lane accumulators in
 * registers: each weight block is unpacked once per tile and each activation block loaded
 * once per tile, instead of once per output. The per-output operations and their order
 * (block by block: d = dx*dy, acc = fma(d, int-dot, acc); Q4_1's min term fma'd into a
 * scalar) are those of the single-row kernels above, and the integer dot of two blocks is
 * exact whichever operand carries the sign, so every output is bit-identical to
 * llm_vec_dot_get(t) and hence to llama.cpp's own vec_dot on this CPU. */
#define GEMM_RN 2 /* activation rows per tile (RM = 4 weight rows): 8 accumulators, no spills in 16 ymm */
/* Under AddressSanitizer a tile checks, once on entry, the whole ranges it reads (RM weight
 * rows and RN activation rows of nb blocks) and writes (RM outputs per activation row), and
 * its loads are not instrumented one by one: per-load checks made these tiles 8x slower and
 * 80% of the sanitizer run of the LLM tests (perf, test_structured_output: 190 s against 49 s
 * unsanitized). A block read past a row's end is still reported, as a read of the range.
 * The helpers the tiles inline are uninstrumented too: with GCC a helper's scope marks
 * (ASAN_MARK) would still poison the stack inside an uninstrumented tile, which does not
 * unpoison its frame on return (a false stack-use-after-scope in the next caller). */
#if defined(__SANITIZE_ADDRESS__)
#define GEMM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GEMM_ASAN 1
#endif
#endif
#ifdef GEMM_ASAN
#define ALWAYS_INLINE inline __attribute__((always_inline, no_sanitize_address))
#else
#define ALWAYS_INLINE inline __attribute__((always_inline))
#endif
#define UNROLL _Pragma("GCC unroll 4") /* tile loops: fully unrolled, arrays in registers */

/* exact 32-lane int8 x int8 dot summed per 4-byte group as floats: u (= |v|, unsigned) x
 * sign(x, v) */
static ALWAYS_INLINE __m256 dot_i8_abs(__m256i u, __m256i x, __m256i v) {
  __m256i dot = _mm256_maddubs_epi16(u, _mm256_sign_epi8(x, v));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)));
}

/* Both nibble halves of a 16-byte block: one broadcast load, a per-half shift, a mask. */
static ALWAYS_INLINE __m256i nibbles32b(const uint8_t *p) {
  __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
  return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0xF));
}
static ALWAYS_INLINE uint32_t ld32(const void *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
/* A 4-row tile's weights are contiguous (4 * wrow bytes) and the next tiles follow. While
 * at block i, prefetch the matching 4 blocks' worth of bytes GEMM_PF tiles ahead, so the
 * stream of weights (the whole model per decode step) arrives before it is needed. */
#define GEMM_PF 8
static ALWAYS_INLINE void gemm_prefetch(const uint8_t *w, size_t wrow, int64_t i, size_t bb) {
  const char *p = (const char *)w + GEMM_PF * 4 * wrow + (size_t)i * 4 * bb;
  _mm_prefetch(p, _MM_HINT_T0);
  _mm_prefetch(p + 64, _MM_HINT_T0);
}

/* The first 4 bytes of block i of RM (4 or 1) weight rows, converted as 2 fp16 words each:
 * lane 2r is row r's d (H2F, the value the single-row kernels compute), lane 2r+1 Q4_1's m
 * (for the other types two quant bytes, never used). One conversion for all rows. */
static ALWAYS_INLINE __m256 row_scales(const uint8_t *w, size_t wrow, size_t bbytes, int64_t i, const int RM) {
  const uint8_t *b = w + (size_t)i * bbytes;
  __m128i dm = RM == 4 ? _mm_setr_epi32((int)ld32(b), (int)ld32(b + wrow), (int)ld32(b + 2 * wrow), (int)ld32(b + 3 * wrow))
                       : _mm_cvtsi32_si128((int)ld32(b));
  return _mm256_cvtph_ps(dm);
}

/* Per-block scales of a tile without shuffles: the products d[r] * dy (lanes 2r of one
 * multiply of the row scales by dy) are stored to a small table and each output's factor
 * is a broadcast load from it, which runs on a load port instead of a shuffle unit. */
static ALWAYS_INLINE __m256 bcast_from(const float *tab, int lane) { return _mm256_broadcast_ss(tab + lane); }

static ALWAYS_INLINE void tile_q4_1(int64_t nb, const uint8_t *w, size_t wrow, const uint8_t *a, size_t arow,
                                    float *y, size_t ldy, const int RM, const int RN) {
  __m256 acc[4][GEMM_RN];
  __m256 summs[GEMM_RN]; /* lane 2r+1: fmaf chain of m[r] * sy, row r's min term */
  float dtab[GEMM_RN][8] __attribute__((aligned(32)));
  UNROLL for (int t = 0; t < RN; t++) {
    summs[t] = _mm256_setzero_ps();
    UNROLL for (int r = 0; r < RM; r++) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; i++) {
    if (RM == 4) gemm_prefetch(w, wrow, i, sizeof(blk_q4_1));
    __m256 dm = row_scales(w, wrow, sizeof(blk_q4_1), i, RM); /* d0 m0 d1 m1 ... */
    UNROLL for (int t = 0; t < RN; t++) {
      const blk_q8_1 *yb = (const blk_q8_1 *)(a + (size_t)t * arow) + i;
      /* (dy, sy) in every lane pair: lane 2r = d[r] * dy, lane 2r+1 = fmaf(m[r], sy, .) */
      __m256 ys = _mm256_castpd_ps(
          _mm256_broadcastsd_pd(_mm_castps_pd(_mm_cvtph_ps(_mm_cvtsi32_si128((int)ld32(yb))))));
      _mm256_store_ps(dtab[t], _mm256_mul_ps(dm, ys));
      summs[t] = _mm256_fmadd_ps(dm, ys, summs[t]);
    }
    UNROLL for (int r = 0; r < RM; r++) {
      __m256i qx = nibbles32b(((const blk_q4_1 *)(w + (size_t)r * wrow) + i)->qs);
      UNROLL for (int t = 0; t < RN; t++) {
        const blk_q8_1 *yb = (const blk_q8_1 *)(a + (size_t)t * arow) + i;
        __m256i qy = _mm256_loadu_si256((const __m256i *)yb->qs);
        acc[r][t] = _mm256_fmadd_ps(bcast_from(dtab[t], 2 * r), sum_u8_i8_pairs(qx, qy), acc[r][t]);
      }
    }
  }
  UNROLL for (int t = 0; t < RN; t++) {
    float sm[8];
    _mm256_storeu_ps(sm, summs[t]);
    UNROLL for (int r = 0; r < RM; r++) y[(size_t)t * ldy + r] = hsum8(acc[r][t]) + sm[2 * r + 1];
  }
}

/* Q4_0 (nibble - 8) and Q8_0 weights against Q8_0 activations. Q4_0 puts the sign on the
 * weight (|y| x sign(x, y), y never -128); Q8_0 weights may hold -128, so there the sign
 * goes on the activation as in the single-row kernel (|x| x sign(y, x)). */
static ALWAYS_INLINE void tile_q8a(int64_t nb, const uint8_t *w, size_t wrow, const uint8_t *a, size_t arow,
                                   float *y, size_t ldy, const int RM, const int RN, const int kind) {
  const bool q4 = kind != 8; /* Q4_0 and Q5_0: small signed weights, sign on the weight */
  __m256 acc[4][GEMM_RN];
  float dtab[GEMM_RN][8] __attribute__((aligned(32)));
  UNROLL for (int r = 0; r < RM; r++)
    UNROLL for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
  const size_t bb = kind == 4 ? sizeof(blk_q4_0) : kind == 5 ? sizeof(blk_q5_0) : sizeof(blk_q8_0);
  for (int64_t i = 0; i < nb; i++) {
    if (RM == 4) gemm_prefetch(w, wrow, i, bb);
    __m256 dx = row_scales(w, wrow, bb, i, RM); /* lane 2r: d[r] */
    UNROLL for (int t = 0; t < RN; t++) {
      const blk_q8_0 *yb = (const blk_q8_0 *)(a + (size_t)t * arow) + i;
      _mm256_store_ps(dtab[t], _mm256_mul_ps(dx, _mm256_set1_ps(H2F(yb->d)))); /* lane 2r: dx[r] * dy */
    }
    __m256i qx[4], sx[4];
    UNROLL for (int r = 0; r < RM; r++) {
      const uint8_t *b = w + (size_t)r * wrow + (size_t)i * bb;
      if (kind == 4) {
        qx[r] = _mm256_sub_epi8(nibbles32b(((const blk_q4_0 *)b)->qs), _mm256_set1_epi8(8));
      } else if (kind == 5) {
        const blk_q5_0 *b5 = (const blk_q5_0 *)b;
        qx[r] = _mm256_or_si256(nibbles32b(b5->qs), q5_high(b5->qh));
      } else {
        sx[r] = _mm256_loadu_si256((const __m256i *)((const blk_q8_0 *)b)->qs);
        qx[r] = _mm256_sign_epi8(sx[r], sx[r]);
      }
    }
    UNROLL for (int t = 0; t < RN; t++) {
      const blk_q8_0 *yb = (const blk_q8_0 *)(a + (size_t)t * arow) + i;
      __m256i qy = _mm256_loadu_si256((const __m256i *)yb->qs), ay = q4 ? _mm256_sign_epi8(qy, qy) : qy;
      UNROLL for (int r = 0; r < RM; r++) {
        __m256 p = q4 ? dot_i8_abs(ay, qx[r], qy) : dot_i8_abs(qx[r], qy, sx[r]);
        acc[r][t] = _mm256_fmadd_ps(bcast_from(dtab[t], 2 * r), p, acc[r][t]);
      }
    }
  }
  UNROLL for (int r = 0; r < RM; r++)
    UNROLL for (int t = 0; t < RN; t++) y[(size_t)t * ldy + r] = hsum8(acc[r][t]);
}

#ifdef GEMM_ASAN
#include <sanitizer/asan_interface.h>
#define GEMM_TILE_ATTR __attribute__((no_sanitize_address, noinline))
static void gemm_asan_range(const void *p, size_t n, bool write) {
  void *bad = __asan_region_is_poisoned((void *)p, n);
  if (bad) __asan_report_error(__builtin_return_address(0), __builtin_frame_address(0), __builtin_frame_address(0), bad, write, 1);
}
static void gemm_asan_tile(int64_t nb, const uint8_t *w, size_t wrow, size_t wbb, const uint8_t *a, size_t arow,
                           size_t abb, float *y, size_t ldy, int RM, int RN) {
  for (int r = 0; r < RM; r++) gemm_asan_range(w + (size_t)r * wrow, (size_t)nb * wbb, false);
  for (int t = 0; t < RN; t++) {
    gemm_asan_range(a + (size_t)t * arow, (size_t)nb * abb, false);
    gemm_asan_range(y + (size_t)t * ldy, (size_t)RM * sizeof(float), true);
  }
}
#define GEMM_ASAN_TILE(...) gemm_asan_tile(__VA_ARGS__)
#else
#define GEMM_TILE_ATTR
#define GEMM_ASAN_TILE(...) ((void)0)
#endif

/* Instantiates the tiles for (RM in {4, 1}) x (RN in {1, 2}) and walks the output: rows in
 * groups of 4 outermost (they stay in L1 while all activation rows pass). WB and AB: the
 * bytes of one weight block and of one activation block. */
#define GEMM_TILE(NAME, TILE, WB, AB, RM, RN, ...)                                                              \
  static GEMM_TILE_ATTR void NAME##_t##RM##RN(int64_t nb, const uint8_t *w, size_t wr, const uint8_t *a,       \
                                              size_t ar, float *y, size_t ldy) {                              \
    GEMM_ASAN_TILE(nb, w, wr, WB, a, ar, AB, y, ldy, RM, RN);                                                 \
    TILE(nb, w, wr, a, ar, y, ldy, RM, RN __VA_ARGS__);                                                       \
  }
#define GEMM_DEFINE(NAME, TILE, WB, AB, ...)                                                                    \
  GEMM_TILE(NAME, TILE, WB, AB, 4, 1, __VA_ARGS__)                                                              \
  GEMM_TILE(NAME, TILE, WB, AB, 4, 2, __VA_ARGS__)                                                              \
  GEMM_TILE(NAME, TILE, WB, AB, 1, 1, __VA_ARGS__)                                                              \
  GEMM_TILE(NAME, TILE, WB, AB, 1, 2, __VA_ARGS__)                                                              \
  static void NAME(int64_t n, const void *wv, size_t wrow, int nr, const void *av, size_t arow, int nt, float *y, \
                   size_t ldy) {                                                                                \
    const uint8_t *w = wv, *a = av;                                                                             \
    int64_t nb = n / QK;                                                                                        \
    int r = 0;                                                                                                  \
    for (; r < nr; r += 4) {                                                                                    \
      const uint8_t *wr = w + (size_t)r * wrow;                                                                 \
      bool four = r + 4 <= nr;                                                                                  \
      int t = 0;                                                                                                \
      for (; t + 2 <= nt; t += 2)                                                                               \
        if (four) NAME##_t42(nb, wr, wrow, a + (size_t)t * arow, arow, y + (size_t)t * ldy + r, ldy);           \
        else                                                                                                    \
          for (int rr = r; rr < nr; rr++)                                                                       \
            NAME##_t12(nb, w + (size_t)rr * wrow, wrow, a + (size_t)t * arow, arow, y + (size_t)t * ldy + rr, ldy); \
      if (t < nt) {                                                                                             \
        if (four) NAME##_t41(nb, wr, wrow, a + (size_t)t * arow, arow, y + (size_t)t * ldy + r, ldy);           \
        else                                                                                                    \
          for (int rr = r; rr < nr; rr++)                                                                       \
            NAME##_t11(nb, w + (size_t)rr * wrow, wrow, a + (size_t)t * arow, arow, y + (size_t)t * ldy + rr, ldy); \
      }                                                                                                         \
    }                                                                                                           \
  }
_Static_assert(GEMM_RN == 2, "GEMM_DEFINE instantiates RN = 1, 2");
GEMM_DEFINE(gemm_q4_1, tile_q4_1, sizeof(blk_q4_1), sizeof(blk_q8_1))
GEMM_DEFINE(gemm_q4_0, tile_q8a, sizeof(blk_q4_0), sizeof(blk_q8_0), , 4)
GEMM_DEFINE(gemm_q5_0, tile_q8a, sizeof(blk_q5_0), sizeof(blk_q8_0), , 5)
GEMM_DEFINE(gemm_q8_0, tile_q8a, sizeof(blk_q8_0), sizeof(blk_q8_0), , 8)

/* K-quants: one weight row against up to 4 activation rows. The weight block is unpacked
 * (nibbles, high bits, scales) once and used for every activation row; per row the
 * integer sums (exact) and the float operations and their order are those of the
 * single-row kernels above, so results are bit-identical to them. */
static ALWAYS_INLINE void multi_q4_K(int64_t n, const uint8_t *w, const uint8_t *a, size_t arow, float *y,
                                     size_t ldy, const int RN) {
  const blk_q4_K *x = (const blk_q4_K *)w;
  const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[4];
  __m128 acc_m[4];
  UNROLL for (int t = 0; t < RN; t++) {
    acc[t] = _mm256_setzero_ps();
    acc_m[t] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / QKK; i++) {
    const float xd = H2F(x[i].d), xmin = H2F(x[i].dmin);
    uint32_t utmp[4];
    memcpy(utmp, x[i].scales, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    const __m256i mins_and_scales =
        _mm256_cvtepu8_epi16(_mm_set_epi32((int)utmp[3], (int)utmp[2], (int)utmp[1], (int)utmp[0]));
    const __m128i mins = _mm256_extracti128_si256(mins_and_scales, 1);
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    const __m256i scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
    __m256i sumi[4];
    UNROLL for (int t = 0; t < RN; t++) {
      const blk_q8_K *yb = (const blk_q8_K *)(a + (size_t)t * arow) + i;
      const __m256i q8sums = _mm256_loadu_si256((const __m256i *)yb->bsums);
      const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
      const float dmin = -yb->d * xmin;
      acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[t]);
      sumi[t] = _mm256_setzero_si256();
    }
    const uint8_t *q4 = x[i].qs;
    for (int j = 0; j < QKK / 64; ++j) {
      const __m256i scale_l = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)((4 * j + 1) << 8 | 4 * j)));
      const __m256i scale_h = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)((4 * j + 3) << 8 | (4 * j + 2))));
      const __m256i q4bits = _mm256_loadu_si256((const __m256i *)(q4 + 32 * j));
      const __m256i q4l = _mm256_and_si256(q4bits, m4), q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
      UNROLL for (int t = 0; t < RN; t++) {
        const int8_t *q8 = ((const blk_q8_K *)(a + (size_t)t * arow) + i)->qs + 64 * j;
        __m256i p16l = _mm256_maddubs_epi16(q4l, _mm256_loadu_si256((const __m256i *)q8));
        __m256i p16h = _mm256_maddubs_epi16(q4h, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(scale_l, p16l), _mm256_madd_epi16(scale_h, p16h)));
      }
    }
    UNROLL for (int t = 0; t < RN; t++) {
      const float d = ((const blk_q8_K *)(a + (size_t)t * arow) + i)->d * xd;
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
  }
  UNROLL for (int t = 0; t < RN; t++) {
    __m128 m = _mm_add_ps(acc_m[t], _mm_movehl_ps(acc_m[t], acc_m[t]));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    y[(size_t)t * ldy] = hsum8(acc[t]) + _mm_cvtss_f32(m);
  }
}

static ALWAYS_INLINE void multi_q6_K(int64_t n, const uint8_t *w, const uint8_t *a, size_t arow, float *y,
                                     size_t ldy, const int RN) {
  const blk_q6_K *x = (const blk_q6_K *)w;
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), m32s = _mm256_set1_epi8(32);
  __m256 acc[4];
  UNROLL for (int t = 0; t < RN; t++) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QKK; i++) {
    const float xd = H2F(x[i].d);
    const uint8_t *q4 = x[i].ql, *qh = x[i].qh;
    const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);
    __m256i sumi[4];
    UNROLL for (int t = 0; t < RN; t++) sumi[t] = _mm256_setzero_si256();
    for (int j = 0; j < QKK / 128; ++j) {
      __m256i sc[4];
      for (int k = 0; k < 4; k++)
        sc[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
            scales, _mm_set_epi64x((long long)(0x0101010101010101ull * (uint64_t)(8 * j + 2 * k + 1)),
                                   (long long)(0x0101010101010101ull * (uint64_t)(8 * j + 2 * k)))));
      const __m256i q4bits1 = _mm256_loadu_si256((const __m256i *)q4), q4bits2 = _mm256_loadu_si256((const __m256i *)(q4 + 32));
      const __m256i q4bitsH = _mm256_loadu_si256((const __m256i *)qh);
      q4 += 64;
      qh += 32;
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(q4bits1, m4), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(q4bits2, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 6), m2), 4));
      UNROLL for (int t = 0; t < RN; t++) {
        const int8_t *q8 = ((const blk_q8_K *)(a + (size_t)t * arow) + i)->qs + 128 * j;
        for (int k = 0; k < 4; k++) {
          const __m256i q8k = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
          __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], q8k), _mm256_maddubs_epi16(m32s, q8k));
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(sc[k], p16));
        }
      }
    }
    UNROLL for (int t = 0; t < RN; t++) {
      const float d = ((const blk_q8_K *)(a + (size_t)t * arow) + i)->d * xd;
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
  }
  UNROLL for (int t = 0; t < RN; t++) y[(size_t)t * ldy] = hsum8(acc[t]);
}

/* K-quant GEMM: rows one at a time (the weight stream prefetched GEMM_PF * 4 rows ahead),
 * activation rows in groups of up to 4 per unpacked weight block. */
#define GEMM_KQ_TILE(NAME, MULTI, WB, RN)                                                                       \
  static GEMM_TILE_ATTR void NAME##_m##RN(int64_t n, const uint8_t *w, const uint8_t *a, size_t ar, float *y,  \
                                          size_t ldy) {                                                         \
    GEMM_ASAN_TILE(n / 256, w, 0, WB, a, ar, sizeof(blk_q8_K), y, ldy, 1, RN);                                  \
    MULTI(n, w, a, ar, y, ldy, RN);                                                                             \
  }
#define GEMM_KQ(NAME, MULTI, WB)                                                                                \
  GEMM_KQ_TILE(NAME, MULTI, WB, 1)                                                                              \
  GEMM_KQ_TILE(NAME, MULTI, WB, 2)                                                                              \
  GEMM_KQ_TILE(NAME, MULTI, WB, 3)                                                                              \
  GEMM_KQ_TILE(NAME, MULTI, WB, 4)                                                                              \
  static void NAME(int64_t n, const void *wv, size_t wrow, int nr, const void *av, size_t arow, int nt, float *y, \
                   size_t ldy) {                                                                                \
    const uint8_t *w = wv, *a = av;                                                                             \
    for (int r = 0; r < nr; r++) {                                                                              \
      const uint8_t *wr = w + (size_t)r * wrow;                                                                 \
      const char *pf = (const char *)w + (size_t)(r + GEMM_PF * 4) * wrow;                                     \
      for (size_t o = 0; o < wrow; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);                                  \
      int t = 0;                                                                                                \
      for (; t + 4 <= nt; t += 4) NAME##_m4(n, wr, a + (size_t)t * arow, arow, y + (size_t)t * ldy + r, ldy);   \
      switch (nt - t) {                                                                                         \
        case 3: NAME##_m3(n, wr, a + (size_t)t * arow, arow, y + (size_t)t * ldy + r, ldy); break;             \
        case 2: NAME##_m2(n, wr, a + (size_t)t * arow, arow, y + (size_t)t * ldy + r, ldy); break;             \
        case 1: NAME##_m1(n, wr, a + (size_t)t * arow, arow, y + (size_t)t * ldy + r, ldy); break;             \
        default: break;                                                                                         \
      }                                                                                                         \
    }                                                                                                           \
  }
GEMM_KQ(gemm_q4_K, multi_q4_K, sizeof(blk_q4_K))
GEMM_KQ(gemm_q6_K, multi_q6_K, sizeof(blk_q6_K))


static float dot_f32_avx2(int64_t n, const void *w, const void *a) {
  const float *x = w, *y = a;
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  float s = hsum8(acc);
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}
#endif

llm_vec_dot_fn llm_vec_dot_get_ref(llm_type t) {
  switch (t) {
    case LLM_F32: return dot_f32_ref;
    case LLM_F16: return dot_f16w_ref;
    case LLM_BF16: return dot_bf16w_ref;
    case LLM_Q4_0: return dot_q4_0_ref;
    case LLM_Q4_1: return dot_q4_1_ref;
    case LLM_Q5_0: return dot_q5_0_ref;
    case LLM_Q5_1: return dot_q5_1_ref;
    case LLM_Q8_0: return dot_q8_0_ref;
    case LLM_Q4_K: return dot_q4_K_ref;
    case LLM_Q5_K: return dot_q5_K_ref;
    case LLM_Q6_K: return dot_q6_K_ref;
    default: return NULL;
  }
}

bool llm_cpu_has_avx2(void) {
#ifdef LLM_AVX2
  return true;
#else
  return false;
#endif
}

llm_vec_dot_fn llm_vec_dot_get(llm_type t) {
#ifdef LLM_AVX2
  switch (t) {
    case LLM_F32: return dot_f32_avx2;
    case LLM_Q4_0: return dot_q4_0_avx2;
    case LLM_Q4_1: return dot_q4_1_avx2;
    case LLM_Q5_0: return dot_q5_0_avx2;
    case LLM_Q8_0: return dot_q8_0_avx2;
    case LLM_Q4_K: return dot_q4_K_avx2;
    case LLM_Q6_K: return dot_q6_K_avx2;
    default: break;
  }
#endif
  return llm_vec_dot_get_ref(t);
}

llm_gemm_fn llm_gemm_get(llm_type t) {
#ifdef LLM_AVX2
  switch (t) {
    case LLM_Q4_0: return gemm_q4_0;
    case LLM_Q4_1: return gemm_q4_1;
    case LLM_Q5_0: return gemm_q5_0;
    case LLM_Q8_0: return gemm_q8_0;
    case LLM_Q4_K: return gemm_q4_K;
    case LLM_Q6_K: return gemm_q6_K;
    default: break;
  }
#endif
  (void)t;
  return NULL;
}

llm_vec_dot4_fn llm_vec_dot4_get(llm_type t) {
#ifdef LLM_AVX2
  switch (t) {
    case LLM_Q4_0: return dot4_q4_0_avx2;
    case LLM_Q4_1: return dot4_q4_1_avx2;
    case LLM_Q8_0: return dot4_q8_0_avx2;
    default: break;
  }
#endif
  (void)t;
  return NULL;
}

float llm_dot_f16_ref(int n, const uint16_t *x, const uint16_t *y) {
  float s = 0;
  for (int i = 0; i < n; i++) s += H2F(x[i]) * H2F(y[i]);
  return s;
}

/* ggml_vec_dot_f16's order: 4 accumulators of 8 lanes over steps of 32, reduced as
 * (a0+a2)+(a1+a3), then halves and two horizontal adds; the tail adds in double. */
float llm_dot_f16(int n, const uint16_t *x, const uint16_t *y) {
#if defined(LLM_AVX2) && defined(__F16C__)
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int np = n & ~31;
  for (int i = 0; i < np; i += 32)
    for (int j = 0; j < 4; j++) {
      __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + j * 8)));
      __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + j * 8)));
      acc[j] = _mm256_fmadd_ps(a, b, acc[j]);
    }
  acc[0] = _mm256_add_ps(acc[0], acc[2]);
  acc[1] = _mm256_add_ps(acc[1], acc[3]);
  acc[0] = _mm256_add_ps(acc[0], acc[1]);
  __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
  __m128 t1 = _mm_hadd_ps(t0, t0);
  double s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  for (int i = np; i < n; i++) s += (double)(H2F(x[i]) * H2F(y[i]));
  return (float)s;
#else
  return llm_dot_f16_ref(n, x, y);
#endif
}

/* ggml_v_expf (AVX2): the vectorised exp ggml uses in softmax and SiLU, so probabilities
 * match llama.cpp bit for bit. Scalar fallback: expf. */
#ifdef LLM_AVX2
static inline __m256 v_expf(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c = _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                     _mm256_set1_epi32((int)0x82000000u));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i d = _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(_mm256_castsi256_ps(d),
                       _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                    _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}
#endif

double llm_softmax_exp(int n, float *x, float max) {
  int i = 0;
  double sum = 0;
#ifdef LLM_AVX2
  for (; i + 7 < n; i += 8) {
    __m256 v = v_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
    _mm256_storeu_ps(x + i, v);
    __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    sum += (double)_mm_cvtss_f32(h);
  }
#endif
  for (; i < n; i++) {
    x[i] = expf(x[i] - max);
    sum += (double)x[i];
  }
  return sum;
}

int32_t llm_argmax_ref(const float *x, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best] || (x[best] != x[best] && x[i] == x[i])) best = i;
  return best;
}

int32_t llm_argmax(const float *x, int n) {
#ifdef LLM_AVX2
  if (n >= 16) {
    /* pass 1: the maximum (max_ps drops a NaN in its first operand); pass 2: its first index */
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float mx = _mm_cvtss_f32(h);
    for (; i < n; i++)
      if (x[i] > mx) mx = x[i];
    if (mx == -INFINITY) return llm_argmax_ref(x, n); /* all -inf or NaN: the reference's choice */
    __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
      int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
      if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    for (; i < n; i++)
      if (x[i] == mx) return i;
  }
#endif
  return llm_argmax_ref(x, n);
}

void llm_swiglu(int n, float *g, const float *u) {
  int i = 0;
#ifdef LLM_AVX2
  for (; i + 7 < n; i += 8) {
    __m256 x = _mm256_loadu_ps(g + i);
    __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1), v_expf(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
#endif
  for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- attention helpers (fp16 K/V rows) ---- */
void llm_fp32_to_fp16_row_ref(uint16_t *o, const float *x, int n) {
  for (int i = 0; i < n; i++) o[i] = llm_fp32_to_fp16(x[i]);
}
void llm_fp32_to_fp16_row(uint16_t *o, const float *x, int n) {
  int i = 0;
#if defined(LLM_AVX2) && defined(__F16C__)
  for (; i + 8 <= n; i += 8) /* vcvtps2ph mode 0: round to nearest even, as _cvtss_sh(x, 0) */
    _mm_storeu_si128((__m128i *)(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  llm_fp32_to_fp16_row_ref(o + i, x + i, n - i);
}

void llm_axpy_f16_ref(int n, float *acc, const uint16_t *v, float p) {
  for (int d = 0; d < n; d++) acc[d] = fmaf(H2F(v[d]), p, acc[d]);
}
void llm_axpy_f16(int n, float *acc, const uint16_t *v, float p) {
  int d = 0;
#if defined(LLM_AVX2) && defined(__F16C__)
  __m256 pv = _mm256_set1_ps(p); /* lane-wise the same fmaf */
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d))), pv,
                                              _mm256_loadu_ps(acc + d)));
#endif
  llm_axpy_f16_ref(n - d, acc + d, v + d, p);
}

/* lane l of position-lane set e is acc[e * n + d]; ggml_vec_dot_f16's reduction tree */
static void reduce_lanes32_from(int n, int d0, const float *acc, float *o) {
  for (int d = d0; d < n; d++) {
    float r[8];
    for (int e = 0; e < 8; e++) {
      float x0 = acc[(size_t)e * n + d] + acc[(size_t)(16 + e) * n + d];
      float x1 = acc[(size_t)(8 + e) * n + d] + acc[(size_t)(24 + e) * n + d];
      r[e] = x0 + x1;
    }
    float t0 = r[0] + r[4], t1 = r[1] + r[5], t2 = r[2] + r[6], t3 = r[3] + r[7];
    o[d] = (t0 + t1) + (t2 + t3);
  }
}
void llm_reduce_lanes32_ref(int n, const float *acc, float *o) { reduce_lanes32_from(n, 0, acc, o); }
void llm_reduce_lanes32(int n, const float *acc, float *o) {
  int d0 = 0;
#ifdef LLM_AVX2
  for (; d0 + 8 <= n; d0 += 8) { /* the scalar tree, 8 values of d at a time */
    __m256 r[8];
    for (int e = 0; e < 8; e++) {
      __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(acc + (size_t)e * n + d0), _mm256_loadu_ps(acc + (size_t)(16 + e) * n + d0));
      __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(acc + (size_t)(8 + e) * n + d0), _mm256_loadu_ps(acc + (size_t)(24 + e) * n + d0));
      r[e] = _mm256_add_ps(x0, x1);
    }
    __m256 t0 = _mm256_add_ps(r[0], r[4]), t1 = _mm256_add_ps(r[1], r[5]), t2 = _mm256_add_ps(r[2], r[6]),
           t3 = _mm256_add_ps(r[3], r[7]);
    _mm256_storeu_ps(o + d0, _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));
  }
#endif
  reduce_lanes32_from(n, d0, acc, o);
}
