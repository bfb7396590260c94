/* kern_util.h: helpers shared by the kernel family files (kern_*.c; private to them):
 * 8-lane float vectors (GCC vector extensions, AVX2-sized; one v8f is one channel block
 * of nChw8c), the activations on them, the one oneDNN engine, and the checks several
 * families make (conv eligibility, nChw8c layouts, declaring a step's output nChw8c).
 * Numerics: every v8_* function states its accuracy against libm or the reference
 * operator; the kernels that use them are compared with the references in
 * tests/unit/onnx/test_onnx_families.c. */
#ifndef CINFER_ONNX_KERN_UTIL_H
#define CINFER_ONNX_KERN_UTIL_H
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "backends/onnx/kern.h"
#include "backends/onnx/opool.h"
#include "backends/onnx/ops_util.h"

typedef float v8f __attribute__((vector_size(32)));
typedef float v8fu __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* one float in 8 lanes: a single vbroadcastss (`(v8f){0} + x` costs an extra add, which
 * the compiler must keep because 0 + -0 is +0) */
static inline v8f v8_splat(float x) { return (v8f){x, x, x, x, x, x, x, x}; }

static inline v8f v8_fma(v8f a, v8f b, v8f c) {
#if defined(__FMA__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  v8f r;
  for (int i = 0; i < 8; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]);
  return r;
#endif
}

/* v > 0 ? v : 0, NaN -> 0 */
static inline v8f v8_relu(v8f v) { return (v8f)((v8i)v & (v8i)(v > 0)); }

/* v < 0 ? v * a : v, branch-free (half the values are negative: a branch mispredicts);
 * NaN stays NaN, as in act_apply_c */
static inline v8f v8_prelu(v8f v, v8f a) {
  v8i neg = (v8i)(v < 0);
  return (v8f)(((v8i)(v * a) & neg) | ((v8i)v & ~neg));
}

/* tanh: Eigen's float rational approximation (odd degree-13 numerator, even degree-6
 * denominator, input clamped to [-9, 9]; also what MLAS uses), within a few ulp of tanhf;
 * NaN stays NaN. Replaces one libm tanhf call per element (ssrnet's Conv+Tanh spent 40% of
 * its time in libm). KERN_DEF_TANH(name, float vector type, int vector type) defines it for
 * one vector width: v8_tanh here, v16_tanh in kern_smallk.c's AVX-512 path, the same
 * operations per lane in the same order, so the same bits (test_smallk16_equals_8lane). */
#define KERN_DEF_TANH(NAME, VF, VI)                                                   \
  static inline VF NAME(VF x) {                                                        \
    VI nan = (VI)(x != x);                                                             \
    VF lo = (VF){0} - 9.0f, hi = (VF){0} + 9.0f;                                       \
    x = (VF)(((VI)lo & (VI)(x < lo)) | ((VI)x & ~(VI)(x < lo)));                       \
    x = (VF)(((VI)hi & (VI)(x > hi)) | ((VI)x & ~(VI)(x > hi)));                       \
    VF x2 = x * x;                                                                     \
    VF p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;                        \
    p = p * x2 + -8.60467152213735e-11f;                                               \
    p = p * x2 + 5.12229709037114e-08f;                                                \
    p = p * x2 + 1.48572235717979e-05f;                                                \
    p = p * x2 + 6.37261928875436e-04f;                                                \
    p = p * x2 + 4.89352455891786e-03f;                                                \
    p = p * x;                                                                         \
    VF q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;                         \
    q = q * x2 + 2.26843463243900e-03f;                                                \
    q = q * x2 + 4.89352518554385e-03f;                                                \
    VF r = p / q;                                                                      \
    return (VF)((nan & (VI)x) | (~nan & (VI)r));                                       \
  }
KERN_DEF_TANH(v8_tanh, v8f, v8i)

/* sigmoid through tanh: 1/2 tanh(v/2) + 1/2 */
static inline v8f v8_sigmoid(v8f v) { return v8_tanh(v * 0.5f) * 0.5f + 0.5f; }

/* a fused activation on 8 output channels (a channel block; slope8: their PRelu slopes) */
static inline v8f v8_act(v8f v, const onnx_fused *f, const float *slope8) {
  switch (f->act) {
    case ACT_RELU: return v8_relu(v);
    case ACT_PRELU: return v8_prelu(v, *(const v8fu *)slope8);
    case ACT_TANH: return v8_tanh(v);
    case ACT_SIGMOID: return v8_sigmoid(v);
    default: {
      float r[8];
      __builtin_memcpy(r, &v, sizeof r);
      for (int i = 0; i < 8; i++) r[i] = act_apply(f, r[i]);
      __builtin_memcpy(&v, r, sizeof r);
      return v;
    }
  }
}

/* e^x on 8 lanes for |x| <= 87 (callers check the range): Cephes' expf, x = n ln2 + r,
 * degree-6 polynomial in r, 2^n through the exponent bits; within 2 ulp of expf there
 * (test_exp_fast). */
static inline v8f v8_exp(v8f x) {
  v8f fx = x * 1.44269504088896341f + 0.5f;
  v8f t = __builtin_convertvector(__builtin_convertvector(fx, v8i), v8f); /* floor(fx) */
  t = t - (v8f)((v8i)v8_splat(1.0f) & (v8i)(t > fx));
  x = x - t * 0.693359375f;
  x = x - t * -2.12194440e-4f;
  v8f z = x * x;
  v8f y = x * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * z + x + 1.0f;
  v8i e = (__builtin_convertvector(t, v8i) + 127) << 23;
  return y * (v8f)e;
}

static inline bool v8_in_exp_range(v8f x) {
  v8i ok = (v8i)(x >= -87.0f) & (v8i)(x <= 87.0f); /* NaN: out */
#if defined(__AVX__)
  return __builtin_ia32_movmskps256((v8f)ok) == 0xff;
#else
  return (ok[0] & ok[1] & ok[2] & ok[3] & ok[4] & ok[5] & ok[6] & ok[7]) != 0;
#endif
}

static inline cinfer_status *kern_oom(void) {
  return cinfer_status_oom(NULL);
}

/* n bytes, 64-byte aligned, the size rounded up to a multiple of 64; NULL when out of memory */
static inline void *kern_alloc64(size_t n) { return aligned_alloc(64, (n + 63) & ~(size_t)63); }

/* PRelu's slope for output channel m of s, 0 when s has no fused PRelu */
static inline float kern_prelu_slope(const plan_step *s, int64_t m) {
  return s->has_fused && s->fused.act == ACT_PRELU ? s->fused.slope[s->fused.slope_n == 1 ? 0 : m] : 0.0f;
}

/* Error path of a oneDNN call in a prepare function: sets st (naming s's node) and jumps
 * to the function's `fail` label. */
#define DN(call)                                                                      \
  do {                                                                                \
    dnnl_status_t r_ = (call);                                                        \
    if (r_ != dnnl_success) {                                                         \
      st = NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN %s failed (status %d)", #call, \
                    (int)r_);                                                         \
      goto fail;                                                                      \
    }                                                                                 \
  } while (0)

/* kern.c */
/* destroy of a kernel that owns nothing but its own struct */
void kern_free(fast_kernel *k);
/* the process's oneDNN CPU engine, created once; NULL when oneDNN has none */
dnnl_engine_t kern_engine(void);
/* a reorder primitive from one layout to another */
dnnl_status_t kern_make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, dnnl_primitive_t *out);
/* whether layout (a dnnl_memory_desc_t *, NULL: plain) is nChw<B>c (B 8 or 16) for the
 * 4-D shape of t; kern_is_nchw8c: B = 8 */
bool kern_is_blocked(const void *layout, const ot *t, int B);
bool kern_is_nchw8c(const void *layout, const ot *t);
/* Declares step s's output nChw8c with C channels (the plan owns the descriptor; C % 8 ==
 * 0, so its size is the plain one); false when out of memory */
bool kern_out_nchw8c(onnx_plan *p, plan_step *s, int64_t C);
/* the same for nChw<B>c (B 8 or 16; C % B == 0 for the plain size) */
bool kern_out_blocked(onnx_plan *p, plan_step *s, int64_t C, int B);
/* conv_geom_make without the status: false when the node's geometry is invalid (its
 * reference kernel then reports why) */
bool kern_geom(const onnx_node *n, const ot *x, const int64_t *kshape, bool pool, conv_geom *g);
/* A float Conv with static weights (and bias) on 1-D/2-D data and a non-empty output:
 * what every convolution family requires. CINFER_ONNX_FAST_SKIP=S keeps nodes whose name
 * contains S on the reference, CINFER_ONNX_FAST_SKIP_DW / _PW grouped / ungrouped convs. */
bool kern_conv_eligible(const onnx_plan *p, const plan_step *s);
/* A 2-D ungrouped conv on a plain input with C <= 4 and C*KH*KW <= 32 (a first layer):
 * kern_smallk's; unless CINFER_ONNX_NO_K64. */
bool kern_small_k(const onnx_plan *p, const plan_step *s);
#endif
