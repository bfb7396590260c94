/* quant.h: ggml tensor types (block layouts bit-compatible with ggml), fp16/bf16
 * conversion, dequantisation, activation quantisation and dot products.
 *
 * A weight row of type T is dotted with an activation row quantised to
 * llm_type_vec_dot_type(T) (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the
 * K-quants, F32 for F32/F16/BF16), exactly as ggml's CPU backend does, so results match
 * llama.cpp up to float summation order.
 *
 * Every dot product has a scalar reference (`*_ref`) and, where the CPU has AVX2+FMA, a
 * fast path; tests/unit/llm/test_quant.c compares them. */
#ifndef CINFER_LLM_QUANT_H
#define CINFER_LLM_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum llm_type {
  LLM_F32 = 0, LLM_F16 = 1, LLM_Q4_0 = 2, LLM_Q4_1 = 3, LLM_Q5_0 = 6, LLM_Q5_1 = 7,
  LLM_Q8_0 = 8, LLM_Q8_1 = 9, LLM_Q2_K = 10, LLM_Q3_K = 11, LLM_Q4_K = 12, LLM_Q5_K = 13,
  LLM_Q6_K = 14, LLM_Q8_K = 15, LLM_BF16 = 30, LLM_TYPE_COUNT_ = 31
} llm_type;

/* Elements per block and bytes per block; 0 for types this engine does not know. */
int llm_type_block(llm_type t);
size_t llm_type_block_bytes(llm_type t);
const char *llm_type_name(llm_type t);
/* Bytes of a row of n elements (n must be a multiple of the block). */
size_t llm_row_bytes(llm_type t, int64_t n);
/* True when weights of this type can be used in a matmul (dequant + vec_dot present). */
bool llm_type_supported(llm_type t);
llm_type llm_type_vec_dot_type(llm_type t);

float llm_fp16_to_fp32(uint16_t h);
uint16_t llm_fp32_to_fp16(float f);
float llm_bf16_to_fp32(uint16_t h);
/* Portable (no F16C) conversions, round to nearest even: references for the above. */
float llm_fp16_to_fp32_ref(uint16_t h);
uint16_t llm_fp32_to_fp16_ref(float f);

/* Dequantises n elements (multiple of the block) of a row. Scalar; the reference. */
void llm_dequant_row(llm_type t, const void *src, float *dst, int64_t n);
/* Quantises an activation row to Q8_0 / Q8_1 / Q8_K / F16 (t = the vec-dot type; for F32
 * it copies). dst holds llm_row_bytes(t, n). Q8_0/Q8_1 follow ggml's x86 SIMD quantiser
 * (scale 127/amax, round half to even), which is what llama.cpp runs on this CPU. */
void llm_quantize_row(llm_type t, const float *src, void *dst, int64_t n);
/* Scalar reference of llm_quantize_row (same bytes). */
void llm_quantize_row_ref(llm_type t, const float *src, void *dst, int64_t n);

/* Dot of weight row w (type t) with activation row a (type llm_type_vec_dot_type(t)). */
typedef float (*llm_vec_dot_fn)(int64_t n, const void *w, const void *a);
llm_vec_dot_fn llm_vec_dot_get(llm_type t);      /* fastest available */
llm_vec_dot_fn llm_vec_dot_get_ref(llm_type t);  /* scalar reference */
bool llm_cpu_has_avx2(void);
/* One weight row against nt <= 4 activation rows (a + j*a_stride): y[j]. Bit-identical to
 * nt calls of llm_vec_dot_get(t); NULL when the type has no such kernel. */
typedef void (*llm_vec_dot4_fn)(int64_t n, const void *w, const void *a, size_t a_stride, int nt, float *y);
llm_vec_dot4_fn llm_vec_dot4_get(llm_type t);

/* Tiled matrix product: y[t * ldy + r] = W[r] . A[t] for r < nr, t < nt, where weight row r
 * (type t) is at w + r * wrow and activation row t (type llm_type_vec_dot_type(t), as
 * llm_quantize_row writes it) at a + t * arow; n elements per row. Each output is
 * bit-identical to llm_vec_dot_get(t) on the same rows. NULL when the type has no tiled
 * kernel (callers then use the vec_dot kernels). */
typedef void (*llm_gemm_fn)(int64_t n, const void *w, size_t wrow, int nr, const void *a, size_t arow, int nt,
                            float *y, size_t ldy);
llm_gemm_fn llm_gemm_get(llm_type t);

/* fp16 dot (attention scores) and y += a*x over fp16 x (attention values). */
float llm_dot_f16(int n, const uint16_t *x, const uint16_t *y);
float llm_dot_f16_ref(int n, const uint16_t *x, const uint16_t *y);

/* Attention helpers, each with a scalar reference giving the same bits:
 * o[i] = fp16(x[i]) (round to nearest even); acc[d] = fmaf(v[d], p, acc[d]) over fp16 v;
 * o[d] = ggml's f16-dot reduction tree over 32 position lanes, lane e at acc[e * n + d]. */
void llm_fp32_to_fp16_row(uint16_t *o, const float *x, int n);
void llm_fp32_to_fp16_row_ref(uint16_t *o, const float *x, int n);
void llm_axpy_f16(int n, float *acc, const uint16_t *v, float p);
void llm_axpy_f16_ref(int n, float *acc, const uint16_t *v, float p);
void llm_reduce_lanes32(int n, const float *acc, float *o);
void llm_reduce_lanes32_ref(int n, const float *acc, float *o);

/* exp(x[i] - max) in place, returning the sum (double), with ggml's vectorised exp
 * (softmax). Pad x to a multiple of 8 with -INFINITY to get ggml's values everywhere. */
double llm_softmax_exp(int n, float *x, float max);
/* g[i] = silu(g[i]) * u[i] with ggml's vectorised exp (SwiGLU). */
void llm_swiglu(int n, float *g, const float *u);

/* Index of the largest of x[0..n) (n >= 1), the first one on ties; NaNs are never chosen
 * unless every element is NaN (then 0). Greedy sampling. */
int32_t llm_argmax(const float *x, int n);
int32_t llm_argmax_ref(const float *x, int n);

#endif
