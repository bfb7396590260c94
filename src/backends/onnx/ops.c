/* ops.c: reference kernels and shape inference for elementwise, shape and indexing
 * operators, plus the operator table. Reference kernels favour clarity; float32 paths are
 * vectorisable loops, other dtypes go through generic element accessors. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/opool.h"
#include "backends/onnx/ops_util.h"

/* ======================= broadcasting ======================= */

cinfer_status *bcast_shape(const ot *a, const ot *b, ot *out, const onnx_node *n) {
  int r = a->ndim > b->ndim ? a->ndim : b->ndim;
  int64_t d[OT_MAX_DIMS];
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->ndim), ib = i - (r - b->ndim);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char sa[128], sb[128];
      ot_shape_str(a, sa, sizeof sa);
      ot_shape_str(b, sb, sizeof sb);
      return NODE_ERR(n, CINFER_INVALID_ARG, "shapes %s and %s do not broadcast", sa, sb);
    }
    d[i] = da == 1 ? db : da;
  }
  out->ndim = r;
  memcpy(out->dims, d, sizeof(int64_t) * (size_t)r);
  return NULL;
}

/* strides of t when broadcast to out (0 on broadcast dims) */
static void bstrides(const ot *t, const ot *out, int64_t *s) {
  int r = out->ndim, off = r - t->ndim;
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; i--) {
    int it = i - off;
    if (it < 0 || t->dims[it] == 1) s[i] = 0;
    else {
      s[i] = acc;
    }
    if (it >= 0) acc *= t->dims[it];
  }
}

/* Calls f(ctx, out_offset, a_offset, b_offset, count, sa_inner, sb_inner) over rows.
 * Dims of size 1 are dropped and adjacent dims merged wherever every operand is laid out
 * contiguously across them (outer stride == inner stride * inner dim; broadcast dims
 * have stride 0 in both), so [1,4420,2] * [1,4420,2] is one row of 8840 rather than
 * 4420 rows of 2. Visits the same elements in the same order as without merging. */
typedef void (*row_fn)(void *ctx, int64_t o, int64_t ia, int64_t ib, int64_t ic, int64_t n,
                       int64_t sa, int64_t sb, int64_t sc);
static void bcast_iter3_t(const ot *out, const ot *a, const ot *b, const ot *c, row_fn f, void *ctx,
                          int threads);
static void bcast_iter3(const ot *out, const ot *a, const ot *b, const ot *c, row_fn f,
                        void *ctx) {
  bcast_iter3_t(out, a, b, c, f, ctx, 1);
}

/* bcast_iter3 over the elements [e0, e1) of the merged iteration space */
static void bcast_span(int r, const int64_t *dims, const int64_t *sa, const int64_t *sb, const int64_t *sc,
                       int64_t e0, int64_t e1, row_fn f, void *ctx) {
  int64_t inner = dims[r - 1], row = e0 / inner, col = e0 % inner;
  int64_t idx[OT_MAX_DIMS] = {0}, oa = col * sa[r - 1], ob = col * sb[r - 1], oc = col * sc[r - 1];
  for (int d = r - 2; d >= 0; d--) {
    idx[d] = row % dims[d];
    row /= dims[d];
    oa += idx[d] * sa[d];
    ob += idx[d] * sb[d];
    oc += idx[d] * sc[d];
  }
  for (int64_t o = e0; o < e1;) {
    int64_t n = inner - col < e1 - o ? inner - col : e1 - o;
    f(ctx, o, oa, ob, oc, n, sa[r - 1], sb[r - 1], sc[r - 1]);
    o += n;
    oa -= col * sa[r - 1];
    ob -= col * sb[r - 1];
    oc -= col * sc[r - 1];
    col = 0;
    for (int d = r - 2; d >= 0; d--) {
      idx[d]++;
      oa += sa[d];
      ob += sb[d];
      oc += sc[d];
      if (idx[d] < dims[d]) break;
      oa -= sa[d] * idx[d];
      ob -= sb[d] * idx[d];
      oc -= sc[d] * idx[d];
      idx[d] = 0;
    }
  }
}

typedef struct {
  int r;
  const int64_t *dims, *sa, *sb, *sc;
  int64_t total, per;
  row_fn f;
  void *ctx;
} bspan_ctx;

static void bspan_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const bspan_ctx *b = vc;
  int64_t e0 = c * b->per, e1 = e0 + b->per < b->total ? e0 + b->per : b->total;
  bcast_span(b->r, b->dims, b->sa, b->sb, b->sc, e0, e1, b->f, b->ctx);
}

/* threads > 1: f must be safe to call concurrently on disjoint output ranges */
static void bcast_iter3_t(const ot *out, const ot *a, const ot *b, const ot *c, row_fn f, void *ctx,
                          int threads) {
  int r0 = out->ndim;
  int64_t sa0[OT_MAX_DIMS], sb0[OT_MAX_DIMS], sc0[OT_MAX_DIMS];
  bstrides(a, out, sa0);
  bstrides(b, out, sb0);
  if (c) bstrides(c, out, sc0); else memset(sc0, 0, sizeof sc0);
  int64_t total = ot_numel(out);
  if (total <= 0) return;
  int64_t dims[OT_MAX_DIMS], sa[OT_MAX_DIMS], sb[OT_MAX_DIMS], sc[OT_MAX_DIMS];
  int r = 0;
  for (int d = 0; d < r0; d++) {
    int64_t n = out->dims[d];
    if (n == 1) continue;
    if (r > 0 && sa[r - 1] == sa0[d] * n && sb[r - 1] == sb0[d] * n && sc[r - 1] == sc0[d] * n) {
      dims[r - 1] *= n;
      sa[r - 1] = sa0[d];
      sb[r - 1] = sb0[d];
      sc[r - 1] = sc0[d];
      continue;
    }
    dims[r] = n;
    sa[r] = sa0[d];
    sb[r] = sb0[d];
    sc[r] = sc0[d];
    r++;
  }
  if (r == 0) {
    f(ctx, 0, 0, 0, 0, 1, 0, 0, 0);
    return;
  }
  int64_t nch = threads > 1 ? opool_chunks(total / 16, (double)total, OPOOL_MIN_ELEMS) : 1;
  if (nch > 1) { /* chunks of whole 16-element runs, so a vector sees the same elements */
    bspan_ctx bc = {r, dims, sa, sb, sc, total, (total / 16 + nch - 1) / nch * 16, f, ctx};
    opool_par((total + bc.per - 1) / bc.per, bspan_chunk, &bc);
    return;
  }
  bcast_span(r, dims, sa, sb, sc, 0, total, f, ctx);
}

/* ======================= unary ======================= */

typedef enum {
  U_ABS, U_NEG, U_SQRT, U_EXP, U_LOG, U_RECIP, U_FLOOR, U_CEIL, U_ROUND, U_SIGN, U_SIN,
  U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_ERF,
  U_SIGMOID, U_TANH, U_RELU, U_LEAKY, U_ELU, U_SELU, U_HSIG, U_HSWISH, U_SOFTPLUS,
  U_SOFTSIGN, U_THRELU, U_CELU, U_MISH, U_NOT, U_ISNAN, U_ISINF, U_IDENT
} unop;

static const struct { const char *name; unop op; int since; } unops[] = {
    {"Abs", U_ABS, 6}, {"Neg", U_NEG, 6}, {"Sqrt", U_SQRT, 6}, {"Exp", U_EXP, 6},
    {"Log", U_LOG, 6}, {"Reciprocal", U_RECIP, 6}, {"Floor", U_FLOOR, 6}, {"Ceil", U_CEIL, 6},
    {"Round", U_ROUND, 11}, {"Sign", U_SIGN, 9}, {"Sin", U_SIN, 7}, {"Cos", U_COS, 7},
    {"Tan", U_TAN, 7}, {"Asin", U_ASIN, 7}, {"Acos", U_ACOS, 7}, {"Atan", U_ATAN, 7},
    {"Sinh", U_SINH, 9}, {"Cosh", U_COSH, 9}, {"Asinh", U_ASINH, 9}, {"Acosh", U_ACOSH, 9},
    {"Atanh", U_ATANH, 9}, {"Erf", U_ERF, 9}, {"Sigmoid", U_SIGMOID, 6}, {"Tanh", U_TANH, 6},
    {"Relu", U_RELU, 6}, {"LeakyRelu", U_LEAKY, 6}, {"Elu", U_ELU, 6}, {"Selu", U_SELU, 6},
    {"HardSigmoid", U_HSIG, 6}, {"HardSwish", U_HSWISH, 14}, {"Softplus", U_SOFTPLUS, 1},
    {"Softsign", U_SOFTSIGN, 1}, {"ThresholdedRelu", U_THRELU, 10}, {"Celu", U_CELU, 12},
    {"Mish", U_MISH, 18}, {"Not", U_NOT, 1}, {"IsNaN", U_ISNAN, 9}, {"IsInf", U_ISINF, 10},
};

static unop unop_of(const onnx_node *n) {
  for (size_t i = 0; i < sizeof unops / sizeof unops[0]; i++)
    if (!strcmp(unops[i].name, n->op_type)) return unops[i].op;
  return U_IDENT;
}

static cinfer_status *unary_infer(const onnx_node *n, ot **in, ot **out) {
  unop u = unop_of(n);
  cinfer_dtype t = in[0]->dtype;
  copy_shape(out[0], in[0]);
  if (u == U_NOT) {
    REQUIRE_DTYPE(n, in[0], t == CINFER_TYPE_BOOL);
  } else if (u == U_ISNAN || u == U_ISINF) {
    REQUIRE_DTYPE(n, in[0], dt_is_float(t));
    out[0]->dtype = CINFER_TYPE_BOOL;
  } else if (u == U_ABS || u == U_NEG || u == U_SIGN || u == U_RELU) {
    REQUIRE_DTYPE(n, in[0], dt_is_numeric(t));
  } else {
    REQUIRE_DTYPE(n, in[0], dt_is_float(t));
  }
  return NULL;
}

static inline double unary_d(unop u, double x, double a, double b) {
  switch (u) {
    case U_ABS: return fabs(x);
    case U_NEG: return -x;
    case U_SQRT: return sqrt(x);
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_RECIP: return 1.0 / x;
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return nearbyint(x);
    case U_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_TAN: return tan(x);
    case U_ASIN: return asin(x);
    case U_ACOS: return acos(x);
    case U_ATAN: return atan(x);
    case U_SINH: return sinh(x);
    case U_COSH: return cosh(x);
    case U_ASINH: return asinh(x);
    case U_ACOSH: return acosh(x);
    case U_ATANH: return atanh(x);
    case U_ERF: return erf(x);
    case U_SIGMOID: return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case U_TANH: return tanh(x);
    case U_RELU: return x > 0 ? x : 0;
    case U_LEAKY: return x >= 0 ? x : a * x;
    case U_ELU: return x >= 0 ? x : a * (exp(x) - 1);
    case U_SELU: return x > 0 ? b * x : b * (a * exp(x) - a);
    case U_HSIG: { double v = a * x + b; return v < 0 ? 0 : v > 1 ? 1 : v; }
    case U_HSWISH: { double v = x / 6 + 0.5; return x * (v < 0 ? 0 : v > 1 ? 1 : v); }
    case U_SOFTPLUS: return x > 20 ? x : log1p(exp(x));
    case U_SOFTSIGN: return x / (1 + fabs(x));
    case U_THRELU: return x > a ? x : 0;
    case U_CELU: return (x > 0 ? x : 0) + fmin(0, a * (exp(x / a) - 1));
    case U_MISH: return x * tanh(x > 20 ? x : log1p(exp(x)));
    case U_NOT: return x == 0;
    case U_ISNAN: return isnan(x);
    case U_ISINF: return isinf(x) ? 1 : 0;
    default: return x;
  }
}

static inline float unary_f(unop u, float x, float a, float b) {
  switch (u) {
    case U_RELU: return x > 0 ? x : 0;
    case U_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case U_TANH: return tanhf(x);
    case U_EXP: return expf(x);
    case U_LEAKY: return x >= 0 ? x : a * x;
    case U_NEG: return -x;
    case U_ABS: return fabsf(x);
    case U_SQRT: return sqrtf(x);
    case U_RECIP: return 1.0f / x;
    default: return (float)unary_d(u, x, a, b);
  }
}

typedef struct {
  unop u;
  const float *s;
  float *d;
  int64_t cnt;
  float a, b;
  int64_t nch;
} unary_ctx;

static void unary_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const unary_ctx *x = vc;
  int64_t lo, hi;
  opool_range(x->cnt, x->nch, c, &lo, &hi);
  const float *s = x->s;
  float *d = x->d;
  if (x->u == U_RELU) { /* a loop of its own vectorises */
    for (int64_t i = lo; i < hi; i++) d[i] = s[i] > 0 ? s[i] : 0;
    return;
  }
  for (int64_t i = lo; i < hi; i++) d[i] = unary_f(x->u, s[i], x->a, x->b);
}

static void unary_params(const onnx_node *n, unop u, float *a, float *b) {
  *a = 0;
  *b = 0;
  switch (u) {
    case U_LEAKY: *a = attr_f(n, "alpha", 0.01f); break;
    case U_ELU: case U_CELU: case U_THRELU: *a = attr_f(n, "alpha", 1.0f); break;
    case U_SELU: *a = attr_f(n, "alpha", 1.67326319217681884765625f);
      *b = attr_f(n, "gamma", 1.05070102214813232421875f); break;
    case U_HSIG: *a = attr_f(n, "alpha", 0.2f); *b = attr_f(n, "beta", 0.5f); break;
    default: break;
  }
}

static cinfer_status *unary_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  unop u = unop_of(n);
  float a, b;
  unary_params(n, u, &a, &b);
  int64_t cnt = ot_numel(in[0]);
  if (u == U_ISINF) {
    int64_t pos = attr_i(n, "detect_positive", 1), neg = attr_i(n, "detect_negative", 1);
    for (int64_t i = 0; i < cnt; i++) {
      double v = ot_get_f(in[0], i);
      ((uint8_t *)out[0]->data)[i] = isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
    }
    return NULL;
  }
  if (in[0]->dtype == CINFER_TYPE_FP32 && out[0]->dtype == CINFER_TYPE_FP32) {
    const float *s = in[0]->data;
    float *d = out[0]->data;
    unary_ctx uc = {u, s, d, cnt, a, b, x->threads > 1 ? opool_chunks(cnt, (double)cnt, OPOOL_MIN_ELEMS) : 1};
    opool_par(uc.nch, unary_chunk, &uc);
    return NULL;
  }
  if (dt_is_int(in[0]->dtype) && (u == U_ABS || u == U_NEG)) {
    for (int64_t i = 0; i < cnt; i++) {
      uint64_t v = ot_get_bits(in[0], i); /* wraps as ORT: Neg(-128) is -128 in INT8 */
      bool neg = !dt_is_unsigned(in[0]->dtype) && (int64_t)v < 0;
      uint64_t r = u == U_ABS ? (neg ? 0 - v : v) : 0 - v;
      ot_set_i(out[0], i, (int64_t)r);
    }
    return NULL;
  }
  for (int64_t i = 0; i < cnt; i++) ot_set_f(out[0], i, unary_d(u, ot_get_f(in[0], i), a, b));
  return NULL;
}

/* ======================= binary / variadic ======================= */

typedef enum {
  B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MOD, B_MAX, B_MIN, B_PRELU, B_EQ, B_LT, B_GT, B_LE,
  B_GE, B_AND, B_OR, B_XOR, B_FIRST
} binop;

static binop binop_of(const char *t) {
  static const struct { const char *n; binop b; } tab[] = {
      {"Add", B_ADD}, {"Sub", B_SUB}, {"Mul", B_MUL}, {"Div", B_DIV}, {"Pow", B_POW},
      {"Mod", B_MOD}, {"Max", B_MAX}, {"Min", B_MIN}, {"Sum", B_ADD}, {"Mean", B_ADD},
      {"PRelu", B_PRELU}, {"Equal", B_EQ}, {"Less", B_LT}, {"Greater", B_GT},
      {"LessOrEqual", B_LE}, {"GreaterOrEqual", B_GE}, {"And", B_AND}, {"Or", B_OR},
      {"Xor", B_XOR}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (!strcmp(tab[i].n, t)) return tab[i].b;
  return B_FIRST;
}
static bool binop_is_cmp(binop b) { return b >= B_EQ && b <= B_GE; }
static bool binop_is_logic(binop b) { return b >= B_AND && b <= B_XOR; }

static cinfer_status *binary_infer(const onnx_node *n, ot **in, ot **out) {
  binop b = binop_of(n->op_type);
  ot acc = *in[0];
  for (int i = 1; i < n->n_in; i++) {
    if (!in[i]) return NODE_ERR(n, CINFER_INVALID_ARG, "input %d is empty", i);
    if (in[i]->dtype != in[0]->dtype && b != B_POW)
      return NODE_ERR(n, CINFER_INVALID_ARG, "input types %s and %s differ",
                      cinfer_dtype_name(in[0]->dtype), cinfer_dtype_name(in[i]->dtype));
    cinfer_status *st = bcast_shape(&acc, in[i], &acc, n);
    if (st) return st;
  }
  if (binop_is_logic(b)) REQUIRE_DTYPE(n, in[0], in[0]->dtype == CINFER_TYPE_BOOL);
  else if (b == B_EQ) REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype) || in[0]->dtype == CINFER_TYPE_BOOL);
  else REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  if (b == B_POW) REQUIRE_DTYPE(n, in[1], dt_is_numeric(in[1]->dtype));
  if (b == B_PRELU && (acc.ndim != in[0]->ndim || memcmp(acc.dims, in[0]->dims, sizeof(int64_t) * (size_t)acc.ndim)))
    return NODE_ERR(n, CINFER_INVALID_ARG, "slope does not broadcast to X");
  set_shape(out[0], binop_is_cmp(b) ? CINFER_TYPE_BOOL : in[0]->dtype, acc.ndim, acc.dims);
  return NULL;
}

static inline float bin_f(binop b, float x, float y) {
  switch (b) {
    case B_ADD: return x + y;
    case B_SUB: return x - y;
    case B_MUL: return x * y;
    case B_DIV: return x / y;
    case B_POW: return powf(x, y);
    case B_MAX: return x > y || isnan(x) ? x : y;
    case B_MIN: return x < y || isnan(x) ? x : y;
    case B_PRELU: return x >= 0 ? x : x * y;
    case B_FIRST: return x;
    default: return 0;
  }
}

typedef struct { binop b; const ot *a, *bb; ot *o; int fmod_; } bin_ctx;

static void bin_row_f32(void *vc, int64_t o, int64_t ia, int64_t ib, int64_t ic, int64_t n,
                        int64_t sa, int64_t sb, int64_t sc) {
  bin_ctx *c = vc;
  const float *A = (const float *)c->a->data + ia, *B = (const float *)c->bb->data + ib;
  float *O = (float *)c->o->data + o;
  binop b = c->b;
  if (sa == 1 && sb == 1) {
    switch (b) {
      case B_ADD: for (int64_t i = 0; i < n; i++) O[i] = A[i] + B[i]; return;
      case B_MUL: for (int64_t i = 0; i < n; i++) O[i] = A[i] * B[i]; return;
      case B_SUB: for (int64_t i = 0; i < n; i++) O[i] = A[i] - B[i]; return;
      case B_DIV: for (int64_t i = 0; i < n; i++) O[i] = A[i] / B[i]; return;
      default: break;
    }
  } else if (sa == 1 && sb == 0) {
    float y = B[0];
    switch (b) {
      case B_ADD: for (int64_t i = 0; i < n; i++) O[i] = A[i] + y; return;
      case B_MUL: for (int64_t i = 0; i < n; i++) O[i] = A[i] * y; return;
      case B_SUB: for (int64_t i = 0; i < n; i++) O[i] = A[i] - y; return;
      case B_DIV: for (int64_t i = 0; i < n; i++) O[i] = A[i] / y; return;
      case B_PRELU: for (int64_t i = 0; i < n; i++) O[i] = A[i] >= 0 ? A[i] : A[i] * y; return;
      default: break;
    }
  }
  for (int64_t i = 0; i < n; i++) O[i] = bin_f(b, A[i * sa], B[i * sb]);
}

static int64_t ipow(int64_t x, int64_t y) {
  if (y < 0) return x == 1 ? 1 : x == -1 ? (y & 1 ? -1 : 1) : 0;
  int64_t r = 1;
  while (y) {
    if (y & 1) r = (int64_t)((uint64_t)r * (uint64_t)x);
    x = (int64_t)((uint64_t)x * (uint64_t)x);
    y >>= 1;
  }
  return r;
}

/* integers: two's complement wrap-around in the type's width (computed on 64 bits, the
 * low bits stored), unsigned division/comparison for unsigned types; division or modulo
 * by zero gives 0 (ORT raises SIGFPE) */
static void bin_row_int(bin_ctx *c, int64_t o, int64_t pa, int64_t pb) {
  uint64_t ux = ot_get_bits(c->a, pa), uy = ot_get_bits(c->bb, pb), v;
  int64_t x = (int64_t)ux, y = (int64_t)uy;
  bool u = dt_is_unsigned(c->a->dtype);
  switch (c->b) {
    case B_ADD: v = ux + uy; break;
    case B_SUB: v = ux - uy; break;
    case B_MUL: v = ux * uy; break;
    case B_DIV:
      if (uy == 0) v = 0;
      else if (u) v = ux / uy;
      else v = y == -1 ? 0 - ux : (uint64_t)(x / y);
      break;
    case B_MOD:
      if (uy == 0) v = 0;
      else if (u) v = ux % uy;
      else if (y == -1) v = 0;
      else {
        int64_t r = x % y;
        if (!c->fmod_ && r != 0 && ((r < 0) != (y < 0))) r += y;
        v = (uint64_t)r;
      }
      break;
    case B_POW:
      if (dt_is_int(c->bb->dtype)) {
        v = (uint64_t)ipow(x, y);
      } else {
        double d = pow(u ? (double)ux : (double)x, ot_get_f(c->bb, pb));
        v = (uint64_t)(d > -9.2e18 && d < 9.2e18 ? (int64_t)d : d > 0 ? INT64_MAX : INT64_MIN);
      }
      break;
    case B_MAX: v = (u ? ux > uy : x > y) ? ux : uy; break;
    case B_MIN: v = (u ? ux < uy : x < y) ? ux : uy; break;
    case B_PRELU: v = x >= 0 ? ux : ux * uy; break;
    case B_EQ: v = ux == uy; break;
    case B_LT: v = u ? ux < uy : x < y; break;
    case B_GT: v = u ? ux > uy : x > y; break;
    case B_LE: v = u ? ux <= uy : x <= y; break;
    case B_GE: v = u ? ux >= uy : x >= y; break;
    default: v = ux; break;
  }
  ot_set_i(c->o, o, (int64_t)v);
}

static void bin_row_gen(void *vc, int64_t o, int64_t ia, int64_t ib, int64_t ic, int64_t n,
                        int64_t sa, int64_t sb, int64_t sc) {
  bin_ctx *c = vc;
  bool isint = dt_is_int(c->a->dtype) || (c->a->dtype == CINFER_TYPE_BOOL && c->b == B_EQ);
  for (int64_t i = 0; i < n; i++) {
    int64_t pa = ia + i * sa, pb = ib + i * sb;
    double r;
    if (isint) {
      bin_row_int(c, o + i, pa, pb);
      continue;
    }
    double x = ot_get_f(c->a, pa), y = ot_get_f(c->bb, pb);
    switch (c->b) {
      case B_ADD: r = x + y; break;
      case B_SUB: r = x - y; break;
      case B_MUL: r = x * y; break;
      case B_DIV: r = x / y; break;
      case B_POW: r = pow(x, y); break;
      case B_MOD: r = fmod(x, y); if (!c->fmod_ && r != 0 && ((r < 0) != (y < 0))) r += y; break;
      case B_MAX: r = x > y || isnan(x) ? x : y; break;
      case B_MIN: r = x < y || isnan(x) ? x : y; break;
      case B_PRELU: r = x >= 0 ? x : x * y; break;
      case B_EQ: r = x == y; break;
      case B_LT: r = x < y; break;
      case B_GT: r = x > y; break;
      case B_LE: r = x <= y; break;
      case B_GE: r = x >= y; break;
      case B_AND: r = (x != 0) && (y != 0); break;
      case B_OR: r = (x != 0) || (y != 0); break;
      case B_XOR: r = (x != 0) != (y != 0); break;
      default: r = x; break;
    }
    ot_set_f(c->o, o + i, r);
  }
}

static void run_binary(binop b, const ot *A, const ot *B, ot *O, int fmod_, int threads) {
  bin_ctx c = {b, A, B, O, fmod_};
  if (A->dtype == CINFER_TYPE_FP32 && B->dtype == CINFER_TYPE_FP32 && O->dtype == CINFER_TYPE_FP32 && b != B_MOD)
    bcast_iter3_t(O, A, B, NULL, bin_row_f32, &c, O == A || O == B ? 1 : threads); /* rows are independent */
  else
    bcast_iter3(O, A, B, NULL, bin_row_gen, &c);
}

static cinfer_status *binary_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  binop b = binop_of(n->op_type);
  int fm = (int)attr_i(n, "fmod", 0);
  if (b == B_MOD && dt_is_float(in[0]->dtype) && !fm)
    return NODE_ERR(n, CINFER_INVALID_ARG, "Mod on floats requires fmod=1");
  if (n->n_in == 1) {
    run_binary(B_FIRST, in[0], in[0], out[0], 0, x->threads);
  } else if (n->n_in == 2) {
    run_binary(b, in[0], in[1], out[0], fm, x->threads);
  } else {
    /* variadic: out = in0 (broadcast), then out = out op in_i */
    run_binary(B_FIRST, in[0], in[0], out[0], 0, x->threads);
    for (int i = 1; i < n->n_in; i++) run_binary(b, out[0], in[i], out[0], fm, x->threads);
  }
  if (!strcmp(n->op_type, "Mean")) {
    int64_t cnt = ot_numel(out[0]);
    for (int64_t i = 0; i < cnt; i++) ot_set_f(out[0], i, ot_get_f(out[0], i) / n->n_in);
  }
  return NULL;
}

/* Where(cond, X, Y) */
static cinfer_status *where_infer(const onnx_node *n, ot **in, ot **out) {
  ot acc;
  cinfer_status *st = bcast_shape(in[0], in[1], &acc, n);
  if (!st) st = bcast_shape(&acc, in[2], &acc, n);
  if (st) return st;
  if (in[1]->dtype != in[2]->dtype) return NODE_ERR(n, CINFER_INVALID_ARG, "X and Y types differ");
  set_shape(out[0], in[1]->dtype, acc.ndim, acc.dims);
  return NULL;
}
typedef struct { const ot *c, *x, *y; ot *o; size_t es; } where_ctx;
static void where_row(void *vc, int64_t o, int64_t ia, int64_t ib, int64_t ic, int64_t n,
                      int64_t sa, int64_t sb, int64_t sc) {
  where_ctx *w = vc;
  const uint8_t *C = w->c->data;
  for (int64_t i = 0; i < n; i++) {
    bool c = C[ia + i * sa] != 0;
    const char *src = c ? (const char *)w->x->data + (size_t)(ib + i * sb) * w->es
                        : (const char *)w->y->data + (size_t)(ic + i * sc) * w->es;
    memcpy((char *)w->o->data + (size_t)(o + i) * w->es, src, w->es);
  }
}
static cinfer_status *where_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  where_ctx w = {in[0], in[1], in[2], out[0], ot_esize(out[0]->dtype)};
  bcast_iter3(out[0], in[0], in[1], in[2], where_row, &w);
  return NULL;
}

/* Clip: opset < 11 attributes min/max; 11+ optional inputs. */
static cinfer_status *clip_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  copy_shape(out[0], in[0]);
  return NULL;
}
void clip_bounds(const onnx_node *n, ot **in, double *lo, double *hi) {
  *lo = -INFINITY;
  *hi = INFINITY;
  if (n->opset < 11) {
    *lo = attr_f(n, "min", -FLT_MAX);
    *hi = attr_f(n, "max", FLT_MAX);
  } else {
    if (n->n_in > 1 && in[1] && in[1]->data && ot_numel(in[1]) > 0) *lo = ot_get_f(in[1], 0);
    if (n->n_in > 2 && in[2] && in[2]->data && ot_numel(in[2]) > 0) *hi = ot_get_f(in[2], 0);
  }
}
static cinfer_status *clip_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  double lo, hi;
  clip_bounds(n, in, &lo, &hi);
  int64_t c = ot_numel(in[0]);
  if (in[0]->dtype == CINFER_TYPE_FP32) {
    const float *s = in[0]->data;
    float *d = out[0]->data, l = (float)lo, h = (float)hi;
    for (int64_t i = 0; i < c; i++) d[i] = s[i] < l ? l : s[i] > h ? h : s[i];
  } else {
    for (int64_t i = 0; i < c; i++) {
      double v = ot_get_f(in[0], i);
      ot_set_f(out[0], i, v < lo ? lo : v > hi ? hi : v);
    }
  }
  return NULL;
}

/* ======================= type / shape ops ======================= */

/* Cast, CastLike: ops_cast.c */

static cinfer_status *copy_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  if (out[0]->data != in[0]->data && ot_nbytes(in[0]))
    memmove(out[0]->data, in[0]->data, ot_nbytes(in[0]));
  return NULL;
}

static cinfer_status *identity_infer(const onnx_node *n, ot **in, ot **out) {
  copy_shape(out[0], in[0]);
  if (n->n_in > 2 && in[2]) {
    REQUIRE_STATIC(n, in[2], "training_mode");
    if (ot_numel(in[2]) > 0 && ot_get_i(in[2], 0))
      return NODE_ERR(n, CINFER_UNSUPPORTED, "training_mode=true (random dropout)");
  }
  if (n->opset < 7 && attr_i(n, "is_test", 0) == 0 && !strcmp(n->op_type, "Dropout"))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "is_test=0 (training dropout)");
  if (n->n_out > 1 && out[1]) { /* Dropout mask */
    copy_shape(out[1], in[0]);
    out[1]->dtype = CINFER_TYPE_BOOL;
  }
  return NULL;
}
static cinfer_status *dropout_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  copy_exec(x, n, in, out);
  if (n->n_out > 1 && out[1]) memset(out[1]->data, 1, ot_nbytes(out[1]));
  return NULL;
}

static cinfer_status *shape_infer(const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int64_t s = attr_i(n, "start", 0), e = attr_i(n, "end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = s < 0 ? 0 : s > r ? r : s;
  e = e < 0 ? 0 : e > r ? r : e;
  int64_t len = e > s ? e - s : 0;
  set_shape(out[0], CINFER_TYPE_INT64, 1, &len);
  return NULL;
}
static cinfer_status *shape_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int64_t s = attr_i(n, "start", 0);
  if (s < 0) s += r;
  s = s < 0 ? 0 : s > r ? r : s;
  for (int64_t i = 0; i < out[0]->dims[0]; i++) ((int64_t *)out[0]->data)[i] = in[0]->dims[s + i];
  return NULL;
}
static cinfer_status *size_infer(const onnx_node *n, ot **in, ot **out) {
  set_shape(out[0], CINFER_TYPE_INT64, 0, NULL);
  return NULL;
}
static cinfer_status *size_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  *(int64_t *)out[0]->data = ot_numel(in[0]);
  return NULL;
}

static cinfer_status *reshape_infer(const onnx_node *n, ot **in, ot **out) {
  const int64_t *sv = NULL;
  int64_t tmp[OT_MAX_DIMS];
  int r;
  if (n->opset < 5) {
    r = attr_ints(n, "shape", &sv);
  } else {
    if (n->n_in < 2) return NODE_ERR(n, CINFER_INVALID_ARG, "missing shape input");
    REQUIRE_STATIC(n, in[1], "the shape input");
    if (in[1]->ndim != 1 || in[1]->dtype != CINFER_TYPE_INT64)
      return NODE_ERR(n, CINFER_INVALID_ARG, "shape input must be a 1-D int64 tensor");
    r = (int)(in[1]->dims[0] > OT_MAX_DIMS ? OT_MAX_DIMS + 1 : in[1]->dims[0]);
    if (r <= OT_MAX_DIMS)
      for (int i = 0; i < r; i++) tmp[i] = ((int64_t *)in[1]->data)[i];
    sv = tmp;
  }
  if (r > OT_MAX_DIMS) return NODE_ERR(n, CINFER_UNSUPPORTED, "rank over %d", OT_MAX_DIMS);
  int64_t allowzero = attr_i(n, "allowzero", 0);
  int64_t d[OT_MAX_DIMS], known = 1, total = ot_numel(in[0]);
  int neg = -1;
  for (int i = 0; i < r; i++) {
    d[i] = sv[i];
    if (d[i] == 0 && !allowzero) {
      if (i >= in[0]->ndim) return NODE_ERR(n, CINFER_INVALID_ARG, "0 in shape past the input rank");
      d[i] = in[0]->dims[i];
    }
    if (d[i] == -1) {
      if (neg >= 0) return NODE_ERR(n, CINFER_INVALID_ARG, "more than one -1 in shape");
      neg = i;
    } else if (d[i] < 0) {
      return NODE_ERR(n, CINFER_INVALID_ARG, "negative dim %lld in shape", (long long)d[i]);
    } else {
      if (d[i] && known > INT64_MAX / d[i]) return NODE_ERR(n, CINFER_INVALID_ARG, "shape overflows");
      known *= d[i];
    }
  }
  if (neg >= 0) {
    if (known == 0 || total % known)
      return NODE_ERR(n, CINFER_INVALID_ARG, "cannot infer -1: %lld elements into %lld",
                      (long long)total, (long long)known);
    d[neg] = total / known;
  } else if (known != total) {
    char s[128];
    ot_shape_str(in[0], s, sizeof s);
    return NODE_ERR(n, CINFER_INVALID_ARG, "cannot reshape %s (%lld elements) to %lld elements",
                    s, (long long)total, (long long)known);
  }
  set_shape(out[0], in[0]->dtype, r, d);
  return NULL;
}

static cinfer_status *flatten_infer(const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int64_t a = attr_i(n, "axis", 1);
  if (a < 0) a += r;
  if (a < 0 || a > r) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  int64_t d[2] = {prod(in[0]->dims, 0, (int)a), prod(in[0]->dims, (int)a, r)};
  set_shape(out[0], in[0]->dtype, 2, d);
  return NULL;
}

static cinfer_status *get_axes(const onnx_node *n, ot **in, int idx, int64_t *axes, int *na,
                               bool *present) {
  const int64_t *av;
  *present = false;
  int k = attr_ints(n, "axes", &av);
  if (k) {
    *present = true;
  } else if (n->n_in > idx && in[idx]) {
    REQUIRE_STATIC(n, in[idx], "the axes input");
    k = (int)(ot_numel(in[idx]) > OT_MAX_DIMS ? OT_MAX_DIMS + 1 : ot_numel(in[idx]));
    *present = true;
    if (k <= OT_MAX_DIMS)
      for (int i = 0; i < k; i++) axes[i] = ot_get_i(in[idx], i);
    av = NULL;
  }
  if (k > OT_MAX_DIMS) return NODE_ERR(n, CINFER_INVALID_ARG, "too many axes");
  if (av) memcpy(axes, av, sizeof(int64_t) * (size_t)k);
  *na = k;
  return NULL;
}

static cinfer_status *unsqueeze_infer(const onnx_node *n, ot **in, ot **out) {
  int64_t axes[OT_MAX_DIMS + 1];
  int na;
  bool present;
  cinfer_status *st = get_axes(n, in, 1, axes, &na, &present);
  if (st) return st;
  int r = in[0]->ndim + na;
  if (r > OT_MAX_DIMS) return NODE_ERR(n, CINFER_UNSUPPORTED, "rank over %d", OT_MAX_DIMS);
  bool mark[OT_MAX_DIMS] = {0};
  for (int i = 0; i < na; i++) {
    int a = norm_axis(axes[i], r);
    if (a < 0 || mark[a]) return NODE_ERR(n, CINFER_INVALID_ARG, "bad or repeated axis %lld", (long long)axes[i]);
    mark[a] = true;
  }
  int64_t d[OT_MAX_DIMS];
  for (int i = 0, j = 0; i < r; i++) d[i] = mark[i] ? 1 : in[0]->dims[j++];
  set_shape(out[0], in[0]->dtype, r, d);
  return NULL;
}

static cinfer_status *squeeze_infer(const onnx_node *n, ot **in, ot **out) {
  int64_t axes[OT_MAX_DIMS + 1];
  int na;
  bool present;
  cinfer_status *st = get_axes(n, in, 1, axes, &na, &present);
  if (st) return st;
  int r = in[0]->ndim;
  bool mark[OT_MAX_DIMS] = {0};
  if (!present || na == 0) {
    for (int i = 0; i < r; i++) mark[i] = in[0]->dims[i] == 1;
  } else {
    for (int i = 0; i < na; i++) {
      int a = norm_axis(axes[i], r);
      if (a < 0 || in[0]->dims[a] != 1)
        return NODE_ERR(n, CINFER_INVALID_ARG, "cannot squeeze axis %lld", (long long)axes[i]);
      mark[a] = true;
    }
  }
  int64_t d[OT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < r; i++)
    if (!mark[i]) d[k++] = in[0]->dims[i];
  set_shape(out[0], in[0]->dtype, k, d);
  return NULL;
}

static cinfer_status *transpose_infer(const onnx_node *n, ot **in, ot **out) {
  const int64_t *p;
  int k = attr_ints(n, "perm", &p);
  int r = in[0]->ndim;
  int64_t d[OT_MAX_DIMS];
  if (k && k != r) return NODE_ERR(n, CINFER_INVALID_ARG, "perm has %d entries for rank %d", k, r);
  bool seen[OT_MAX_DIMS] = {0};
  for (int i = 0; i < r; i++) {
    int64_t a = k ? p[i] : r - 1 - i;
    if (a < 0 || a >= r || seen[a]) return NODE_ERR(n, CINFER_INVALID_ARG, "invalid perm");
    seen[a] = true;
    d[i] = in[0]->dims[a];
  }
  set_shape(out[0], in[0]->dtype, r, d);
  return NULL;
}
static cinfer_status *transpose_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  const int64_t *p;
  int k = attr_ints(n, "perm", &p);
  int r = in[0]->ndim;
  size_t es = ot_esize(in[0]->dtype);
  int64_t istr[OT_MAX_DIMS], s[OT_MAX_DIMS];
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; i--) { istr[i] = acc; acc *= in[0]->dims[i]; }
  for (int i = 0; i < r; i++) s[i] = istr[k ? p[i] : r - 1 - i];
  int64_t total = ot_numel(out[0]);
  if (total == 0) return NULL;
  int64_t idx[OT_MAX_DIMS] = {0}, off = 0;
  const char *src = in[0]->data;
  char *dst = out[0]->data;
  int64_t inner = r ? out[0]->dims[r - 1] : 1, si = r ? s[r - 1] : 0;
  for (int64_t o = 0; o < total; o += inner) {
    if (es == 4) {
      const float *S = (const float *)src + off;
      float *D = (float *)dst + o;
      for (int64_t i = 0; i < inner; i++) D[i] = S[i * si];
    } else {
      for (int64_t i = 0; i < inner; i++) memcpy(dst + (size_t)(o + i) * es, src + (size_t)(off + i * si) * es, es);
    }
    for (int d = r - 2; d >= 0; d--) {
      idx[d]++;
      off += s[d];
      if (idx[d] < out[0]->dims[d]) break;
      off -= s[d] * idx[d];
      idx[d] = 0;
    }
  }
  return NULL;
}

static cinfer_status *concat_infer(const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", n->opset < 4 ? 1 : 0), r);
  if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  int64_t d[OT_MAX_DIMS];
  memcpy(d, in[0]->dims, sizeof d);
  d[a] = 0;
  for (int i = 0; i < n->n_in; i++) {
    if (!in[i] || in[i]->ndim != r || in[i]->dtype != in[0]->dtype)
      return NODE_ERR(n, CINFER_INVALID_ARG, "input %d rank/type differs", i);
    for (int j = 0; j < r; j++)
      if (j != a && in[i]->dims[j] != in[0]->dims[j])
        return NODE_ERR(n, CINFER_INVALID_ARG, "input %d dim %d is %lld, expected %lld", i, j,
                        (long long)in[i]->dims[j], (long long)in[0]->dims[j]);
    d[a] += in[i]->dims[a];
  }
  set_shape(out[0], in[0]->dtype, r, d);
  return NULL;
}
static cinfer_status *concat_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", n->opset < 4 ? 1 : 0), r);
  size_t es = ot_esize(in[0]->dtype);
  int64_t outer = prod(out[0]->dims, 0, a), inner = prod(out[0]->dims, a + 1, r);
  size_t orow = (size_t)(out[0]->dims[a] * inner) * es;
  size_t off = 0;
  for (int i = 0; i < n->n_in; i++) {
    size_t row = (size_t)(in[i]->dims[a] * inner) * es;
    if (row % 4 == 0 && row <= 32 && orow % 4 == 0 && off % 4 == 0) {
      /* short rows (UltraFace's [1,4420,2] box halves): word copies, no memcpy call per row */
      uint32_t *d = (uint32_t *)out[0]->data + off / 4;
      const uint32_t *sp = in[i]->data;
      size_t w = row / 4, ow = orow / 4;
      for (int64_t o = 0; o < outer; o++, d += ow, sp += w)
        for (size_t k = 0; k < w; k++) d[k] = sp[k];
    } else {
      for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out[0]->data + (size_t)o * orow + off, (char *)in[i]->data + (size_t)o * row, row);
    }
    off += row;
  }
  return NULL;
}

static cinfer_status *split_sizes(const onnx_node *n, ot **in, int64_t *sz, int *axis) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", 0), r);
  if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  *axis = a;
  const int64_t *sv;
  int k = attr_ints(n, "split", &sv);
  if (!k && n->n_in > 1 && in[1]) {
    REQUIRE_STATIC(n, in[1], "the split input");
    k = (int)ot_numel(in[1]);
    if (k != n->n_out) return NODE_ERR(n, CINFER_INVALID_ARG, "split has %d entries for %d outputs", k, n->n_out);
    int64_t s = 0;
    for (int i = 0; i < k; i++) { sz[i] = ot_get_i(in[1], i); if (sz[i] < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "negative split"); s += sz[i]; }
    if (s != in[0]->dims[a]) return NODE_ERR(n, CINFER_INVALID_ARG, "split sums to %lld, dim is %lld", (long long)s, (long long)in[0]->dims[a]);
    return NULL;
  }
  if (k) {
    if (k != n->n_out) return NODE_ERR(n, CINFER_INVALID_ARG, "split has %d entries for %d outputs", k, n->n_out);
    int64_t s = 0;
    for (int i = 0; i < k; i++) { sz[i] = sv[i]; if (sz[i] < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "negative split"); s += sz[i]; }
    if (s != in[0]->dims[a]) return NODE_ERR(n, CINFER_INVALID_ARG, "split sums to %lld, dim is %lld", (long long)s, (long long)in[0]->dims[a]);
    return NULL;
  }
  int64_t D = in[0]->dims[a], no = n->n_out;
  int64_t each = (D + no - 1) / no;
  for (int i = 0; i < no; i++) {
    int64_t left = D - each * i;
    sz[i] = left < 0 ? 0 : left < each ? left : each;
  }
  if (n->opset < 18 && D % no) return NODE_ERR(n, CINFER_INVALID_ARG, "dim %lld not divisible into %d outputs", (long long)D, n->n_out);
  return NULL;
}
static cinfer_status *split_infer(const onnx_node *n, ot **in, ot **out) {
  int64_t *sz = calloc((size_t)n->n_out + 1, sizeof *sz);
  if (!sz) return NODE_ERR(n, CINFER_INTERNAL, "out of memory");
  int a;
  cinfer_status *st = split_sizes(n, in, sz, &a);
  for (int i = 0; !st && i < n->n_out; i++) {
    if (!out[i]) continue;
    copy_shape(out[i], in[0]);
    out[i]->dims[a] = sz[i];
  }
  free(sz);
  return st;
}
static cinfer_status *split_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", 0), r);
  size_t es = ot_esize(in[0]->dtype);
  int64_t outer = prod(in[0]->dims, 0, a), inner = prod(in[0]->dims, a + 1, r);
  size_t irow = (size_t)(in[0]->dims[a] * inner) * es, off = 0;
  for (int i = 0; i < n->n_out; i++) {
    int64_t len = 0;
    /* recompute sizes from the output shapes set by infer */
    if (out[i]) len = out[i]->dims[a];
    else {
      int64_t *sz = calloc((size_t)n->n_out + 1, sizeof *sz);
      int aa;
      if (!sz) return NODE_ERR(n, CINFER_INTERNAL, "out of memory");
      cinfer_status *st = split_sizes(n, in, sz, &aa);
      len = sz[i];
      free(sz);
      if (st) return st;
    }
    size_t row = (size_t)(len * inner) * es;
    if (out[i])
      for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out[i]->data + (size_t)o * row, (char *)in[0]->data + (size_t)o * irow + off, row);
    off += row;
  }
  return NULL;
}

/* Slice: opset < 10 attributes starts/ends/axes; 10+ inputs (starts, ends, axes, steps). */
typedef struct { int64_t start[OT_MAX_DIMS], step[OT_MAX_DIMS]; } slice_p;
static cinfer_status *slice_params(const onnx_node *n, ot **in, slice_p *p, int64_t *od) {
  int r = in[0]->ndim;
  int64_t st_[OT_MAX_DIMS * 4], en[OT_MAX_DIMS * 4], ax[OT_MAX_DIMS * 4], sp[OT_MAX_DIMS * 4];
  int k;
  if (n->opset < 10) {
    const int64_t *s, *e, *a;
    k = attr_ints(n, "starts", &s);
    if (attr_ints(n, "ends", &e) != k) return NODE_ERR(n, CINFER_INVALID_ARG, "starts/ends length differ");
    int ka = attr_ints(n, "axes", &a);
    if (ka && ka != k) return NODE_ERR(n, CINFER_INVALID_ARG, "axes length differs");
    if (k > OT_MAX_DIMS) return NODE_ERR(n, CINFER_INVALID_ARG, "too many axes");
    for (int i = 0; i < k; i++) { st_[i] = s[i]; en[i] = e[i]; ax[i] = ka ? a[i] : i; sp[i] = 1; }
  } else {
    if (n->n_in < 3) return NODE_ERR(n, CINFER_INVALID_ARG, "needs starts and ends inputs");
    REQUIRE_STATIC(n, in[1], "starts");
    REQUIRE_STATIC(n, in[2], "ends");
    k = (int)ot_numel(in[1]);
    if (k > OT_MAX_DIMS || ot_numel(in[2]) != k) return NODE_ERR(n, CINFER_INVALID_ARG, "starts/ends lengths");
    for (int i = 0; i < k; i++) { st_[i] = ot_get_i(in[1], i); en[i] = ot_get_i(in[2], i); ax[i] = i; sp[i] = 1; }
    if (n->n_in > 3 && in[3]) {
      REQUIRE_STATIC(n, in[3], "axes");
      if (ot_numel(in[3]) != k) return NODE_ERR(n, CINFER_INVALID_ARG, "axes length");
      for (int i = 0; i < k; i++) ax[i] = ot_get_i(in[3], i);
    }
    if (n->n_in > 4 && in[4]) {
      REQUIRE_STATIC(n, in[4], "steps");
      if (ot_numel(in[4]) != k) return NODE_ERR(n, CINFER_INVALID_ARG, "steps length");
      for (int i = 0; i < k; i++) sp[i] = ot_get_i(in[4], i);
    }
  }
  for (int i = 0; i < r; i++) { p->start[i] = 0; p->step[i] = 1; od[i] = in[0]->dims[i]; }
  bool seen[OT_MAX_DIMS] = {0};
  for (int i = 0; i < k; i++) {
    int a = norm_axis(ax[i], r);
    if (a < 0 || seen[a]) return NODE_ERR(n, CINFER_INVALID_ARG, "bad or repeated axis %lld", (long long)ax[i]);
    seen[a] = true;
    int64_t D = in[0]->dims[a], s = st_[i], e = en[i], step = sp[i];
    if (step == 0) return NODE_ERR(n, CINFER_INVALID_ARG, "step 0");
    if (s < 0) s += D;
    if (e < 0 && e > INT64_MIN / 2) e += D;
    if (step > 0) {
      s = s < 0 ? 0 : s > D ? D : s;
      e = e < 0 ? 0 : e > D ? D : e;
      od[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = s < 0 ? -1 : s > D - 1 ? D - 1 : s;
      e = e < -1 ? -1 : e > D - 1 ? D - 1 : e;
      od[a] = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    p->start[a] = s;
    p->step[a] = step;
  }
  return NULL;
}
/* The Slice keeps every element in place (FPN crops to the size the upsampling already has) */
bool slice_is_noop(const onnx_node *n, ot **in) {
  slice_p p;
  int64_t od[OT_MAX_DIMS];
  cinfer_status *st = slice_params(n, in, &p, od);
  if (st) { cinfer_status_free(st); return false; }
  for (int i = 0; i < in[0]->ndim; i++)
    if (od[i] != in[0]->dims[i] || (od[i] > 1 && (p.start[i] || p.step[i] != 1))) return false;
  return true;
}
static cinfer_status *slice_infer(const onnx_node *n, ot **in, ot **out) {
  slice_p p;
  int64_t od[OT_MAX_DIMS];
  cinfer_status *st = slice_params(n, in, &p, od);
  if (st) return st;
  set_shape(out[0], in[0]->dtype, in[0]->ndim, od);
  return NULL;
}
static cinfer_status *slice_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  slice_p p;
  int64_t od[OT_MAX_DIMS];
  cinfer_status *st = slice_params(n, in, &p, od);
  if (st) return st;
  int r = in[0]->ndim;
  size_t es = ot_esize(in[0]->dtype);
  int64_t istr[OT_MAX_DIMS] = {0}, acc = 1;
  for (int i = r - 1; i >= 0; i--) { istr[i] = acc; acc *= in[0]->dims[i]; }
  int64_t total = ot_numel(out[0]);
  if (!total) return NULL;
  int64_t base = 0;
  for (int i = 0; i < r; i++) base += p.start[i] * istr[i];
  int64_t idx[OT_MAX_DIMS] = {0}, off = base;
  int64_t inner = r ? od[r - 1] : 1, si = r ? p.step[r - 1] * istr[r - 1] : 0;
  const char *S = in[0]->data;
  char *D = out[0]->data;
  bool outer_full = r >= 2;
  for (int d = 0; d < r - 1; d++) outer_full &= p.start[d] == 0 && p.step[d] == 1 && od[d] == in[0]->dims[d];
  if (outer_full && si == 1 && es == 4 && inner <= 8) {
    /* only the last axis is cut, into short rows (box coordinates): one strided loop */
    const uint32_t *sp = (const uint32_t *)(const void *)S + off;
    uint32_t *d = (uint32_t *)(void *)D;
    int64_t rs = in[0]->dims[r - 1];
    for (int64_t o = 0; o < total; o += inner, sp += rs)
      for (int64_t i = 0; i < inner; i++) d[o + i] = sp[i];
    return NULL;
  }
  for (int64_t o = 0; o < total; o += inner) {
    if (si == 1 && es == 4 && inner <= 16) /* short rows (box coordinates): no memcpy call per row */
      for (int64_t i = 0; i < inner; i++) ((uint32_t *)(void *)D)[o + i] = ((const uint32_t *)(const void *)S)[off + i];
    else if (si == 1) memcpy(D + (size_t)o * es, S + (size_t)off * es, (size_t)inner * es);
    else for (int64_t i = 0; i < inner; i++) memcpy(D + (size_t)(o + i) * es, S + (size_t)(off + i * si) * es, es);
    for (int d = r - 2; d >= 0; d--) {
      idx[d]++;
      off += p.step[d] * istr[d];
      if (idx[d] < od[d]) break;
      off -= p.step[d] * istr[d] * idx[d];
      idx[d] = 0;
    }
  }
  return NULL;
}

static cinfer_status *gather_infer(const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", 0), r);
  if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  REQUIRE_DTYPE(n, in[1], in[1]->dtype == CINFER_TYPE_INT64 || in[1]->dtype == CINFER_TYPE_INT32);
  int q = in[1]->ndim;
  if (r - 1 + q > OT_MAX_DIMS) return NODE_ERR(n, CINFER_UNSUPPORTED, "rank too large");
  int64_t d[OT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < a; i++) d[k++] = in[0]->dims[i];
  for (int i = 0; i < q; i++) d[k++] = in[1]->dims[i];
  for (int i = a + 1; i < r; i++) d[k++] = in[0]->dims[i];
  set_shape(out[0], in[0]->dtype, k, d);
  return NULL;
}
static cinfer_status *gather_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", 0), r);
  size_t es = ot_esize(in[0]->dtype);
  int64_t outer = prod(in[0]->dims, 0, a), inner = prod(in[0]->dims, a + 1, r), D = in[0]->dims[a];
  int64_t ni = ot_numel(in[1]);
  size_t row = (size_t)inner * es;
  for (int64_t j = 0; j < ni; j++) {
    int64_t ix = ot_get_i(in[1], j);
    if (ix < 0) ix += D;
    if (ix < 0 || ix >= D)
      return NODE_ERR(n, CINFER_INVALID_ARG, "index %lld out of range [-%lld, %lld)",
                      (long long)ot_get_i(in[1], j), (long long)D, (long long)D);
    for (int64_t o = 0; o < outer; o++)
      memcpy((char *)out[0]->data + ((size_t)o * (size_t)ni + (size_t)j) * row,
             (char *)in[0]->data + ((size_t)o * (size_t)D + (size_t)ix) * row, row);
  }
  return NULL;
}

static cinfer_status *constant_infer(const onnx_node *n, ot **in, ot **out) {
  const onnx_attr *a = node_attr(n, "value");
  if (a && a->type == ATTR_T) { copy_shape(out[0], a->t); return NULL; }
  if ((a = node_attr(n, "value_float"))) { set_shape(out[0], CINFER_TYPE_FP32, 0, NULL); return NULL; }
  if ((a = node_attr(n, "value_int"))) { set_shape(out[0], CINFER_TYPE_INT64, 0, NULL); return NULL; }
  if ((a = node_attr(n, "value_floats")) && a->type == ATTR_FS) { int64_t d = a->n; set_shape(out[0], CINFER_TYPE_FP32, 1, &d); return NULL; }
  if ((a = node_attr(n, "value_ints")) && a->type == ATTR_IS) { int64_t d = a->n; set_shape(out[0], CINFER_TYPE_INT64, 1, &d); return NULL; }
  return NODE_ERR(n, CINFER_UNSUPPORTED, "no supported value attribute");
}
static cinfer_status *constant_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  const onnx_attr *a = node_attr(n, "value");
  if (a && a->type == ATTR_T) { memcpy(out[0]->data, a->t->data, ot_nbytes(a->t)); return NULL; }
  if ((a = node_attr(n, "value_float"))) { *(float *)out[0]->data = a->f; return NULL; }
  if ((a = node_attr(n, "value_int"))) { *(int64_t *)out[0]->data = a->i; return NULL; }
  if ((a = node_attr(n, "value_floats"))) { memcpy(out[0]->data, a->fs, sizeof(float) * (size_t)a->n); return NULL; }
  if ((a = node_attr(n, "value_ints"))) { memcpy(out[0]->data, a->is, sizeof(int64_t) * (size_t)a->n); return NULL; }
  return NULL;
}

static cinfer_status *cos_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_STATIC(n, in[0], "the shape input");
  int64_t k = ot_numel(in[0]);
  if (in[0]->ndim != 1 || k > OT_MAX_DIMS) return NODE_ERR(n, CINFER_INVALID_ARG, "shape must be 1-D with at most %d dims", OT_MAX_DIMS);
  int64_t d[OT_MAX_DIMS];
  for (int i = 0; i < k; i++) { d[i] = ot_get_i(in[0], i); if (d[i] < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "negative dim"); }
  const onnx_attr *a = node_attr(n, "value");
  set_shape(out[0], a && a->type == ATTR_T ? a->t->dtype : CINFER_TYPE_FP32, (int)k, d);
  return NULL;
}
static cinfer_status *cos_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  const onnx_attr *a = node_attr(n, "value");
  int64_t c = ot_numel(out[0]);
  size_t es = ot_esize(out[0]->dtype);
  if (a && a->type == ATTR_T && ot_numel(a->t) >= 1)
    for (int64_t i = 0; i < c; i++) memcpy((char *)out[0]->data + (size_t)i * es, a->t->data, es);
  else memset(out[0]->data, 0, (size_t)c * es);
  return NULL;
}

static cinfer_status *range_infer(const onnx_node *n, ot **in, ot **out) {
  for (int i = 0; i < 3; i++) REQUIRE_STATIC(n, in[i], "Range inputs");
  double s = ot_get_f(in[0], 0), l = ot_get_f(in[1], 0), d = ot_get_f(in[2], 0);
  if (d == 0) return NODE_ERR(n, CINFER_INVALID_ARG, "delta is 0");
  double c = ceil((l - s) / d);
  int64_t cnt = c > 0 ? (int64_t)c : 0;
  if (c > 1e9) return NODE_ERR(n, CINFER_INVALID_ARG, "range too long");
  set_shape(out[0], in[0]->dtype, 1, &cnt);
  return NULL;
}
static cinfer_status *range_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int64_t c = out[0]->dims[0];
  if (dt_is_int(in[0]->dtype)) {
    int64_t s = ot_get_i(in[0], 0), d = ot_get_i(in[2], 0);
    for (int64_t i = 0; i < c; i++) ot_set_f(out[0], i, (double)(s + i * d));
  } else {
    double s = ot_get_f(in[0], 0), d = ot_get_f(in[2], 0);
    for (int64_t i = 0; i < c; i++) ot_set_f(out[0], i, s + (double)i * d);
  }
  return NULL;
}

static cinfer_status *expand_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_STATIC(n, in[1], "the shape input");
  ot s = {0};
  int64_t k = ot_numel(in[1]);
  if (k > OT_MAX_DIMS) return NODE_ERR(n, CINFER_UNSUPPORTED, "rank too large");
  s.ndim = (int)k;
  for (int i = 0; i < k; i++) s.dims[i] = ot_get_i(in[1], i);
  ot r;
  cinfer_status *st = bcast_shape(in[0], &s, &r, n);
  if (st) return st;
  set_shape(out[0], in[0]->dtype, r.ndim, r.dims);
  return NULL;
}
static cinfer_status *expand_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  where_ctx w = {NULL, in[0], NULL, out[0], ot_esize(in[0]->dtype)};
  (void)w;
  /* copy via the broadcast iterator: a = input */
  int r = out[0]->ndim;
  int64_t sa[OT_MAX_DIMS];
  bstrides(in[0], out[0], sa);
  int64_t total = ot_numel(out[0]);
  size_t es = ot_esize(in[0]->dtype);
  int64_t idx[OT_MAX_DIMS] = {0}, off = 0;
  for (int64_t o = 0; o < total; o++) {
    memcpy((char *)out[0]->data + (size_t)o * es, (char *)in[0]->data + (size_t)off * es, es);
    for (int d = r - 1; d >= 0; d--) {
      idx[d]++;
      off += sa[d];
      if (idx[d] < out[0]->dims[d]) break;
      off -= sa[d] * idx[d];
      idx[d] = 0;
    }
  }
  return NULL;
}

static cinfer_status *tile_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_STATIC(n, in[1], "repeats");
  if (ot_numel(in[1]) != in[0]->ndim) return NODE_ERR(n, CINFER_INVALID_ARG, "repeats length != rank");
  int64_t d[OT_MAX_DIMS];
  for (int i = 0; i < in[0]->ndim; i++) {
    int64_t rp = ot_get_i(in[1], i);
    if (rp < 0 || (rp && in[0]->dims[i] > INT32_MAX / rp)) return NODE_ERR(n, CINFER_INVALID_ARG, "bad repeat");
    d[i] = in[0]->dims[i] * rp;
  }
  set_shape(out[0], in[0]->dtype, in[0]->ndim, d);
  return NULL;
}
static cinfer_status *tile_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = out[0]->ndim;
  size_t es = ot_esize(in[0]->dtype);
  int64_t total = ot_numel(out[0]), istr[OT_MAX_DIMS], acc = 1;
  for (int i = r - 1; i >= 0; i--) { istr[i] = acc; acc *= in[0]->dims[i]; }
  int64_t idx[OT_MAX_DIMS] = {0};
  for (int64_t o = 0; o < total; o++) {
    int64_t off = 0;
    for (int d = 0; d < r; d++) off += (idx[d] % in[0]->dims[d]) * istr[d];
    memcpy((char *)out[0]->data + (size_t)o * es, (char *)in[0]->data + (size_t)off * es, es);
    for (int d = r - 1; d >= 0; d--) { if (++idx[d] < out[0]->dims[d]) break; idx[d] = 0; }
  }
  return NULL;
}

/* Pad: opset < 11 attributes pads/value; 11+ inputs pads, constant_value (, axes 18). */
static cinfer_status *pad_params(const onnx_node *n, ot **in, int64_t *pads, double *val) {
  int r = in[0]->ndim;
  *val = 0;
  if (n->opset < 11) {
    const int64_t *p;
    int k = attr_ints(n, "pads", &p);
    if (!k) k = attr_ints(n, "paddings", &p);
    if (k != 2 * r) return NODE_ERR(n, CINFER_INVALID_ARG, "pads has %d entries for rank %d", k, r);
    memcpy(pads, p, sizeof(int64_t) * (size_t)k);
    *val = attr_f(n, "value", 0);
  } else {
    REQUIRE_STATIC(n, in[1], "pads");
    int64_t k = ot_numel(in[1]);
    int64_t axes[OT_MAX_DIMS];
    int na = r;
    for (int i = 0; i < r; i++) axes[i] = i;
    if (n->n_in > 3 && in[3]) {
      REQUIRE_STATIC(n, in[3], "axes");
      na = (int)ot_numel(in[3]);
      if (na > r) return NODE_ERR(n, CINFER_INVALID_ARG, "too many axes");
      for (int i = 0; i < na; i++) { int a = norm_axis(ot_get_i(in[3], i), r); if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "bad axis"); axes[i] = a; }
    }
    if (k != 2 * na) return NODE_ERR(n, CINFER_INVALID_ARG, "pads has %lld entries for %d axes", (long long)k, na);
    for (int i = 0; i < 2 * r; i++) pads[i] = 0;
    for (int i = 0; i < na; i++) { pads[axes[i]] = ot_get_i(in[1], i); pads[axes[i] + r] = ot_get_i(in[1], i + na); }
    if (n->n_in > 2 && in[2]) { REQUIRE_STATIC(n, in[2], "constant_value"); if (ot_numel(in[2]) > 0) *val = ot_get_f(in[2], 0); }
  }
  return NULL;
}
static cinfer_status *pad_infer(const onnx_node *n, ot **in, ot **out) {
  int64_t pads[2 * OT_MAX_DIMS];
  double v;
  cinfer_status *st = pad_params(n, in, pads, &v);
  if (st) return st;
  const char *mode = attr_s(n, "mode", "constant");
  if (strcmp(mode, "constant") && strcmp(mode, "reflect") && strcmp(mode, "edge"))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "mode '%s'", mode);
  int r = in[0]->ndim;
  int64_t d[OT_MAX_DIMS];
  for (int i = 0; i < r; i++) {
    d[i] = in[0]->dims[i] + pads[i] + pads[i + r];
    if (d[i] < 0 || pads[i] > INT32_MAX || pads[i + r] > INT32_MAX) return NODE_ERR(n, CINFER_INVALID_ARG, "pads out of range");
    if (!strcmp(mode, "reflect") && (pads[i] >= in[0]->dims[i] || pads[i + r] >= in[0]->dims[i]) && (pads[i] || pads[i + r]))
      return NODE_ERR(n, CINFER_INVALID_ARG, "reflect pad larger than the dim");
    if (!strcmp(mode, "edge") && in[0]->dims[i] == 0 && (pads[i] || pads[i + r]))
      return NODE_ERR(n, CINFER_INVALID_ARG, "edge pad of an empty dim");
  }
  set_shape(out[0], in[0]->dtype, r, d);
  return NULL;
}
bool pad_is_noop(const onnx_node *n, ot **in) {
  int64_t pads[2 * OT_MAX_DIMS];
  double v;
  cinfer_status *st = pad_params(n, in, pads, &v);
  if (st) { cinfer_status_free(st); return false; }
  for (int i = 0; i < 2 * in[0]->ndim; i++)
    if (pads[i]) return false;
  return true;
}

static cinfer_status *pad_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int64_t pads[2 * OT_MAX_DIMS];
  double v;
  cinfer_status *st = pad_params(n, in, pads, &v);
  if (st) return st;
  bool noop = true;
  for (int i = 0; i < 2 * in[0]->ndim; i++) noop = noop && !pads[i];
  if (noop) return copy_exec(x, n, in, out); /* may share its input's bytes (plan.c) */
  const char *mode = attr_s(n, "mode", "constant");
  int md = !strcmp(mode, "reflect") ? 1 : !strcmp(mode, "edge") ? 2 : 0;
  int r = out[0]->ndim;
  size_t es = ot_esize(in[0]->dtype);
  if (md == 0 && r >= 1 && in[0]->dtype == CINFER_TYPE_FP32) {
    /* constant mode: fill, then copy the input rows (innermost dim) into place */
    int64_t total = ot_numel(out[0]);
    float *D = out[0]->data, fv = (float)v;
    const float *S = in[0]->data;
    for (int64_t i = 0; i < total; i++) D[i] = fv;
    int64_t rows = prod(in[0]->dims, 0, r - 1), W = in[0]->dims[r - 1];
    int64_t ostr[OT_MAX_DIMS], acc = 1;
    for (int i = r - 1; i >= 0; i--) { ostr[i] = acc; acc *= out[0]->dims[i]; }
    int64_t idx[OT_MAX_DIMS] = {0};
    for (int64_t row = 0; row < rows && W > 0; row++) {
      int64_t off = 0;
      bool ok = true;
      for (int d = 0; d < r - 1; d++) {
        int64_t o = idx[d] + pads[d];
        if (o < 0 || o >= out[0]->dims[d]) { ok = false; break; }
        off += o * ostr[d];
      }
      /* negative pads crop: copy the overlapping part of the row */
      int64_t pb_ = pads[r - 1], pe_ = pads[2 * r - 1];
      int64_t lo = pb_ < 0 ? -pb_ : 0, cnt = W - lo - (pe_ < 0 ? -pe_ : 0);
      if (ok && cnt > 0) memcpy(D + off + lo + pb_, S + row * W + lo, sizeof(float) * (size_t)cnt);
      for (int d = r - 2; d >= 0; d--) { if (++idx[d] < in[0]->dims[d]) break; idx[d] = 0; }
    }
    return NULL;
  }
  int64_t total = ot_numel(out[0]), istr[OT_MAX_DIMS], acc = 1;
  for (int i = r - 1; i >= 0; i--) { istr[i] = acc; acc *= in[0]->dims[i]; }
  int64_t idx[OT_MAX_DIMS] = {0};
  bool f32 = in[0]->dtype == CINFER_TYPE_FP32;
  for (int64_t o = 0; o < total; o++) {
    int64_t off = 0;
    bool outside = false;
    for (int d = 0; d < r; d++) {
      int64_t i = idx[d] - pads[d], D = in[0]->dims[d];
      if (i < 0 || i >= D) {
        if (md == 0) { outside = true; break; }
        if (md == 2) i = i < 0 ? 0 : D - 1;
        else { while (i < 0 || i >= D) { if (i < 0) i = -i; if (i >= D) i = 2 * (D - 1) - i; } }
      }
      off += i * istr[d];
    }
    if (outside) {
      if (f32) ((float *)out[0]->data)[o] = (float)v; else ot_set_f(out[0], o, v);
    } else memcpy((char *)out[0]->data + (size_t)o * es, (char *)in[0]->data + (size_t)off * es, es);
    for (int d = r - 1; d >= 0; d--) { if (++idx[d] < out[0]->dims[d]) break; idx[d] = 0; }
  }
  return NULL;
}

/* ======================= reductions ======================= */

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LSE, R_SSQ, R_LOGSUM } redop;
static redop redop_of(const char *t) {
  if (!strcmp(t, "ReduceMean")) return R_MEAN;
  if (!strcmp(t, "ReduceMax")) return R_MAX;
  if (!strcmp(t, "ReduceMin")) return R_MIN;
  if (!strcmp(t, "ReduceProd")) return R_PROD;
  if (!strcmp(t, "ReduceL1")) return R_L1;
  if (!strcmp(t, "ReduceL2")) return R_L2;
  if (!strcmp(t, "ReduceLogSumExp")) return R_LSE;
  if (!strcmp(t, "ReduceSumSquare")) return R_SSQ;
  if (!strcmp(t, "ReduceLogSum")) return R_LOGSUM;
  return R_SUM;
}
static cinfer_status *reduce_axes(const onnx_node *n, ot **in, bool *mark, bool *noop) {
  int r = in[0]->ndim;
  int64_t axes[OT_MAX_DIMS + 1];
  int na = 0;
  bool present = false;
  bool input_form = (!strcmp(n->op_type, "ReduceSum") && n->opset >= 13) || n->opset >= 18;
  *noop = false;
  if (input_form) {
    if (n->n_in > 1 && in[1]) {
      REQUIRE_STATIC(n, in[1], "axes");
      na = (int)ot_numel(in[1]);
      if (na > OT_MAX_DIMS) return NODE_ERR(n, CINFER_INVALID_ARG, "too many axes");
      for (int i = 0; i < na; i++) axes[i] = ot_get_i(in[1], i);
      present = na > 0;
    }
  } else {
    const int64_t *a;
    na = attr_ints(n, "axes", &a);
    if (na > OT_MAX_DIMS) return NODE_ERR(n, CINFER_INVALID_ARG, "too many axes");
    memcpy(axes, a ? a : axes, sizeof(int64_t) * (size_t)na);
    present = na > 0;
  }
  for (int i = 0; i < r; i++) mark[i] = !present;
  if (!present && input_form && attr_i(n, "noop_with_empty_axes", 0)) {
    *noop = true;
    for (int i = 0; i < r; i++) mark[i] = false;
  }
  for (int i = 0; i < na; i++) {
    int a = norm_axis(axes[i], r);
    if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis %lld out of range", (long long)axes[i]);
    mark[a] = true;
  }
  return NULL;
}
static cinfer_status *reduce_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  bool mark[OT_MAX_DIMS], noop;
  cinfer_status *st = reduce_axes(n, in, mark, &noop);
  if (st) return st;
  bool keep = attr_i(n, "keepdims", 1) != 0;
  int64_t d[OT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < in[0]->ndim; i++) {
    if (!mark[i]) d[k++] = in[0]->dims[i];
    else if (keep) d[k++] = 1;
  }
  set_shape(out[0], in[0]->dtype, k, d);
  return NULL;
}
static cinfer_status *reduce_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  bool mark[OT_MAX_DIMS], noop;
  cinfer_status *st = reduce_axes(n, in, mark, &noop);
  if (st) return st;
  redop op = redop_of(n->op_type);
  int r = in[0]->ndim;
  int64_t on = ot_numel(out[0]);
  double *acc = malloc(sizeof(double) * (size_t)(on ? on : 1));
  int64_t *cnt = calloc((size_t)(on ? on : 1), sizeof *cnt);
  if (!acc || !cnt) { free(acc); free(cnt); return NODE_ERR(n, CINFER_INTERNAL, "out of memory"); }
  double init = op == R_MAX ? -INFINITY : op == R_MIN ? INFINITY : op == R_PROD ? 1 : 0;
  if (op == R_MAX && dt_is_int(in[0]->dtype)) init = -DBL_MAX;
  for (int64_t i = 0; i < on; i++) acc[i] = init;
  /* output strides in the full-rank (keepdims) index space */
  int64_t ostr[OT_MAX_DIMS], a2 = 1;
  for (int i = r - 1; i >= 0; i--) { ostr[i] = mark[i] ? 0 : a2; if (!mark[i]) a2 *= in[0]->dims[i]; }
  int64_t total = ot_numel(in[0]), idx[OT_MAX_DIMS] = {0}, o = 0;
  double lse_max = 0;
  (void)lse_max;
  for (int64_t i = 0; i < total; i++) {
    double v = ot_get_f(in[0], i);
    switch (op) {
      case R_SUM: case R_MEAN: case R_LOGSUM: acc[o] += v; break;
      case R_MAX: if (v > acc[o] || isnan(v)) acc[o] = v; break;
      case R_MIN: if (v < acc[o] || isnan(v)) acc[o] = v; break;
      case R_PROD: acc[o] *= v; break;
      case R_L1: acc[o] += fabs(v); break;
      case R_L2: case R_SSQ: acc[o] += v * v; break;
      case R_LSE: acc[o] += exp(v); break;
    }
    cnt[o]++;
    for (int d = r - 1; d >= 0; d--) {
      idx[d]++;
      o += ostr[d];
      if (idx[d] < in[0]->dims[d]) break;
      o -= ostr[d] * idx[d];
      idx[d] = 0;
    }
  }
  for (int64_t i = 0; i < on; i++) {
    double v = acc[i];
    if (op == R_MEAN) v = cnt[i] ? v / (double)cnt[i] : NAN;
    else if (op == R_L2) v = sqrt(v);
    else if (op == R_LSE || op == R_LOGSUM) v = log(v);
    if ((op == R_MAX || op == R_MIN) && cnt[i] == 0 && dt_is_int(in[0]->dtype)) v = 0;
    ot_set_f(out[0], i, v);
  }
  free(acc);
  free(cnt);
  return NULL;
}

static cinfer_status *argm_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", 0), r);
  if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  int64_t d[OT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < r; i++) {
    if (i != a) d[k++] = in[0]->dims[i];
    else if (attr_i(n, "keepdims", 1)) d[k++] = 1;
  }
  set_shape(out[0], CINFER_TYPE_INT64, k, d);
  return NULL;
}
static cinfer_status *argm_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", 0), r);
  bool mx = !strcmp(n->op_type, "ArgMax"), last = attr_i(n, "select_last_index", 0);
  int64_t outer = prod(in[0]->dims, 0, a), inner = prod(in[0]->dims, a + 1, r), D = in[0]->dims[a];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t best = 0;
      double bv = D ? ot_get_f(in[0], o * D * inner + i) : 0;
      for (int64_t j = 1; j < D; j++) {
        double v = ot_get_f(in[0], (o * D + j) * inner + i);
        if (mx ? (v > bv || (last && v == bv)) : (v < bv || (last && v == bv))) { bv = v; best = j; }
      }
      ((int64_t *)out[0]->data)[o * inner + i] = best;
    }
  return NULL;
}

static cinfer_status *topk_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", -1), r);
  if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  int64_t k;
  if (n->opset < 10) k = attr_i(n, "k", -1);
  else { REQUIRE_STATIC(n, in[1], "K"); k = ot_get_i(in[1], 0); }
  if (k < 0 || k > in[0]->dims[a]) return NODE_ERR(n, CINFER_INVALID_ARG, "k=%lld out of range", (long long)k);
  copy_shape(out[0], in[0]);
  out[0]->dims[a] = k;
  if (n->n_out > 1 && out[1]) { copy_shape(out[1], out[0]); out[1]->dtype = CINFER_TYPE_INT64; }
  return NULL;
}
static cinfer_status *topk_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int a = norm_axis(attr_i(n, "axis", -1), r);
  bool largest = attr_i(n, "largest", 1) != 0;
  int64_t outer = prod(in[0]->dims, 0, a), inner = prod(in[0]->dims, a + 1, r), D = in[0]->dims[a];
  int64_t k = out[0]->dims[a];
  int64_t *ix = malloc(sizeof(int64_t) * (size_t)(D ? D : 1));
  if (!ix) return NODE_ERR(n, CINFER_INTERNAL, "out of memory");
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t j = 0; j < D; j++) ix[j] = j;
      /* partial selection sort: k picks, stable by index on ties */
      for (int64_t s = 0; s < k; s++) {
        int64_t b = s;
        double bv = ot_get_f(in[0], (o * D + ix[s]) * inner + i);
        for (int64_t j = s + 1; j < D; j++) {
          double v = ot_get_f(in[0], (o * D + ix[j]) * inner + i);
          if (largest ? (v > bv || (v == bv && ix[j] < ix[b])) : (v < bv || (v == bv && ix[j] < ix[b]))) { b = j; bv = v; }
        }
        int64_t t = ix[s]; ix[s] = ix[b]; ix[b] = t;
        int64_t op = (o * k + s) * inner + i;
        ot_set_f(out[0], op, ot_get_f(in[0], (o * D + ix[s]) * inner + i));
        if (n->n_out > 1 && out[1]) ((int64_t *)out[1]->data)[op] = ix[s];
      }
    }
  free(ix);
  return NULL;
}

static cinfer_status *d2s_infer(const onnx_node *n, ot **in, ot **out) {
  int64_t b = attr_i(n, "blocksize", 0);
  if (in[0]->ndim != 4 || b <= 0 || b > 4096) return NODE_ERR(n, CINFER_INVALID_ARG, "needs rank 4 and blocksize > 0");
  const int64_t *d = in[0]->dims;
  int64_t o[4];
  if (!strcmp(n->op_type, "DepthToSpace")) {
    if (d[1] % (b * b)) return NODE_ERR(n, CINFER_INVALID_ARG, "channels not divisible by blocksize^2");
    o[0] = d[0]; o[1] = d[1] / (b * b); o[2] = d[2] * b; o[3] = d[3] * b;
  } else {
    if (d[2] % b || d[3] % b) return NODE_ERR(n, CINFER_INVALID_ARG, "H/W not divisible by blocksize");
    o[0] = d[0]; o[1] = d[1] * b * b; o[2] = d[2] / b; o[3] = d[3] / b;
  }
  set_shape(out[0], in[0]->dtype, 4, o);
  return NULL;
}
static cinfer_status *d2s_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int64_t b = attr_i(n, "blocksize", 0);
  size_t es = ot_esize(in[0]->dtype);
  bool d2s = !strcmp(n->op_type, "DepthToSpace"), crd = !strcmp(attr_s(n, "mode", "DCR"), "CRD");
  const int64_t *id = in[0]->dims, *od = out[0]->dims;
  int64_t N = od[0], C = od[1], H = od[2], W = od[3];
  for (int64_t nn = 0; nn < N; nn++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          int64_t src;
          if (d2s) {
            int64_t bh = h % b, bw = w % b, ic = crd ? c * b * b + bh * b + bw : (bh * b + bw) * C + c;
            src = ((nn * id[1] + ic) * id[2] + h / b) * id[3] + w / b;
          } else {
            int64_t ic = c % id[1], blk = c / id[1], bh = blk / b, bw = blk % b;
            src = ((nn * id[1] + ic) * id[2] + h * b + bh) * id[3] + w * b + bw;
          }
          memcpy((char *)out[0]->data + (size_t)(((nn * C + c) * H + h) * W + w) * es, (char *)in[0]->data + (size_t)src * es, es);
        }
  return NULL;
}

static cinfer_status *cumsum_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  REQUIRE_STATIC(n, in[1], "axis");
  if (norm_axis(ot_get_i(in[1], 0), in[0]->ndim) < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  copy_shape(out[0], in[0]);
  return NULL;
}
static cinfer_status *cumsum_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim, a = norm_axis(ot_get_i(in[1], 0), r);
  bool excl = attr_i(n, "exclusive", 0), rev = attr_i(n, "reverse", 0);
  int64_t outer = prod(in[0]->dims, 0, a), inner = prod(in[0]->dims, a + 1, r), D = in[0]->dims[a];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double s = 0;
      for (int64_t jj = 0; jj < D; jj++) {
        int64_t j = rev ? D - 1 - jj : jj, p = (o * D + j) * inner + i;
        double v = ot_get_f(in[0], p);
        if (excl) { ot_set_f(out[0], p, s); s += v; } else { s += v; ot_set_f(out[0], p, s); }
      }
    }
  return NULL;
}

/* GatherElements(data, indices, axis): out has the indices' shape */
static cinfer_status *gel_infer(const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  if (norm_axis(attr_i(n, "axis", 0), r) < 0 || in[1]->ndim != r)
    return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range or rank mismatch");
  REQUIRE_DTYPE(n, in[1], in[1]->dtype == CINFER_TYPE_INT64 || in[1]->dtype == CINFER_TYPE_INT32);
  set_shape(out[0], in[0]->dtype, r, in[1]->dims);
  return NULL;
}
static cinfer_status *gel_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim, a = norm_axis(attr_i(n, "axis", 0), r);
  size_t es = ot_esize(in[0]->dtype);
  int64_t istr[OT_MAX_DIMS], acc = 1, total = ot_numel(out[0]), idx[OT_MAX_DIMS] = {0};
  for (int d = r - 1; d >= 0; d--) { istr[d] = acc; acc *= in[0]->dims[d]; }
  for (int64_t o = 0; o < total; o++) {
    int64_t off = 0, j = ot_get_i(in[1], o), D = in[0]->dims[a];
    if (j < 0) j += D;
    if (j < 0 || j >= D) return NODE_ERR(n, CINFER_INVALID_ARG, "index %lld out of range", (long long)ot_get_i(in[1], o));
    for (int d = 0; d < r; d++) {
      int64_t i = d == a ? j : idx[d];
      if (i >= in[0]->dims[d]) return NODE_ERR(n, CINFER_INVALID_ARG, "indices shape exceeds data");
      off += i * istr[d];
    }
    memcpy((char *)out[0]->data + (size_t)o * es, (char *)in[0]->data + (size_t)off * es, es);
    for (int d = r - 1; d >= 0; d--) { if (++idx[d] < out[0]->dims[d]) break; idx[d] = 0; }
  }
  return NULL;
}

/* Trilu(input, k): keep the upper (j - i >= k) or lower (j - i <= k) triangle */
static cinfer_status *trilu_infer(const onnx_node *n, ot **in, ot **out) {
  if (in[0]->ndim < 2) return NODE_ERR(n, CINFER_INVALID_ARG, "rank < 2");
  if (n->n_in > 1 && in[1]) REQUIRE_STATIC(n, in[1], "k");
  copy_shape(out[0], in[0]);
  return NULL;
}
static cinfer_status *trilu_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int64_t k = n->n_in > 1 && in[1] && ot_numel(in[1]) > 0 ? ot_get_i(in[1], 0) : 0;
  bool upper = attr_i(n, "upper", 1) != 0;
  int r = in[0]->ndim;
  int64_t R = in[0]->dims[r - 2], C = in[0]->dims[r - 1], mats = prod(in[0]->dims, 0, r - 2);
  size_t es = ot_esize(in[0]->dtype);
  for (int64_t m = 0; m < mats; m++)
    for (int64_t i = 0; i < R; i++)
      for (int64_t j = 0; j < C; j++) {
        size_t off = (size_t)((m * R + i) * C + j) * es;
        bool keep = upper ? j - i >= k : j - i <= k;
        if (keep) memcpy((char *)out[0]->data + off, (char *)in[0]->data + off, es);
        else memset((char *)out[0]->data + off, 0, es);
      }
  return NULL;
}

/* Shrink: x < -lambd -> x + bias; x > lambd -> x - bias; else 0 */
static cinfer_status *shrink_infer(const onnx_node *n, ot **in, ot **out) {
  REQUIRE_DTYPE(n, in[0], dt_is_numeric(in[0]->dtype));
  copy_shape(out[0], in[0]);
  return NULL;
}
static cinfer_status *shrink_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  double l = attr_f(n, "lambd", 0.5f), b = attr_f(n, "bias", 0.0f);
  for (int64_t i = 0; i < ot_numel(in[0]); i++) {
    double v = ot_get_f(in[0], i);
    ot_set_f(out[0], i, v < -l ? v + b : v > l ? v - b : 0);
  }
  return NULL;
}

/* ======================= operator table ======================= */

#define NN_OP(fn) cinfer_status *fn##_infer(const onnx_node *, ot **, ot **); \
  cinfer_status *fn##_exec(onnx_exec *, const onnx_node *, ot **, ot **);
NN_OP(conv) NN_OP(convt) NN_OP(pool) NN_OP(gpool) NN_OP(bn) NN_OP(inorm) NN_OP(lnorm)
NN_OP(gemm) NN_OP(matmul) NN_OP(softmax) NN_OP(resize) NN_OP(lrn)
cinfer_status *conv_exec(onnx_exec *, const onnx_node *, ot **, ot **);

#define U(name, since) {name, since, 1, 1, unary_infer, unary_exec, 0}
static const onnx_op op_table[] = {
    U("Abs", 6), U("Neg", 6), U("Sqrt", 6), U("Exp", 6), U("Log", 6), U("Reciprocal", 6),
    U("Floor", 6), U("Ceil", 6), U("Round", 11), U("Sign", 9), U("Sin", 7), U("Cos", 7),
    U("Tan", 7), U("Asin", 7), U("Acos", 7), U("Atan", 7), U("Sinh", 9), U("Cosh", 9),
    U("Asinh", 9), U("Acosh", 9), U("Atanh", 9), U("Erf", 9), U("Sigmoid", 6), U("Tanh", 6),
    U("Relu", 6), U("LeakyRelu", 6), U("Elu", 6), U("Selu", 6), U("HardSigmoid", 6),
    U("HardSwish", 14), U("Softplus", 1), U("Softsign", 1), U("ThresholdedRelu", 10),
    U("Celu", 12), U("Mish", 18), U("Not", 1), U("IsNaN", 9), U("IsInf", 10),
    {"Add", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Sub", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Mul", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Div", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Pow", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Mod", 10, 2, 2, binary_infer, binary_exec, 0},
    {"PRelu", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Max", 8, 1, 64, binary_infer, binary_exec, 0},
    {"Min", 8, 1, 64, binary_infer, binary_exec, 0},
    {"Sum", 8, 1, 64, binary_infer, binary_exec, 0},
    {"Mean", 8, 1, 64, binary_infer, binary_exec, 0},
    {"Equal", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Less", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Greater", 7, 2, 2, binary_infer, binary_exec, 0},
    {"LessOrEqual", 12, 2, 2, binary_infer, binary_exec, 0},
    {"GreaterOrEqual", 12, 2, 2, binary_infer, binary_exec, 0},
    {"And", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Or", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Xor", 7, 2, 2, binary_infer, binary_exec, 0},
    {"Where", 9, 3, 3, where_infer, where_exec, 0, STR_IN(1) | STR_IN(2)},
    {"Clip", 6, 1, 3, clip_infer, clip_exec, 0},
    {"Cast", 6, 1, 1, cast_infer, cast_exec, 0, STR_IN(0)},
    {"Identity", 1, 1, 1, identity_infer, copy_exec, OP_ALIAS, STR_IN(0)},
    {"Dropout", 1, 1, 3, identity_infer, dropout_exec, OP_ALIAS},
    {"Shape", 1, 1, 1, shape_infer, shape_exec, OP_SHAPE_ONLY, STR_IN(0)},
    {"Size", 1, 1, 1, size_infer, size_exec, OP_SHAPE_ONLY, STR_IN(0)},
    {"Reshape", 1, 1, 2, reshape_infer, copy_exec, OP_ALIAS, STR_IN(0)},
    {"Flatten", 1, 1, 1, flatten_infer, copy_exec, OP_ALIAS, STR_IN(0)},
    {"Squeeze", 1, 1, 2, squeeze_infer, copy_exec, OP_ALIAS, STR_IN(0)},
    {"Unsqueeze", 1, 1, 2, unsqueeze_infer, copy_exec, OP_ALIAS, STR_IN(0)},
    {"Transpose", 1, 1, 1, transpose_infer, transpose_exec, 0, STR_IN(0)},
    {"Concat", 4, 1, 4096, concat_infer, concat_exec, 0, STR_ALL},
    {"Split", 2, 1, 2, split_infer, split_exec, 0, STR_IN(0)},
    {"Slice", 1, 1, 5, slice_infer, slice_exec, 0, STR_IN(0)},
    {"Gather", 1, 2, 2, gather_infer, gather_exec, 0, STR_IN(0)},
    {"Constant", 1, 0, 0, constant_infer, constant_exec, 0},
    {"ConstantOfShape", 9, 1, 1, cos_infer, cos_exec, 0},
    {"Range", 11, 3, 3, range_infer, range_exec, 0},
    {"Expand", 8, 2, 2, expand_infer, expand_exec, 0, STR_IN(0)},
    {"Tile", 6, 2, 2, tile_infer, tile_exec, 0, STR_IN(0)},
    {"Pad", 2, 1, 4, pad_infer, pad_exec, 0},
    {"ReduceSum", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceMean", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceMax", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceMin", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceProd", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceL1", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceL2", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceLogSumExp", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceLogSum", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ReduceSumSquare", 1, 1, 2, reduce_infer, reduce_exec, 0},
    {"ArgMax", 1, 1, 1, argm_infer, argm_exec, 0},
    {"ArgMin", 1, 1, 1, argm_infer, argm_exec, 0},
    {"TopK", 1, 1, 2, topk_infer, topk_exec, 0},
    {"DepthToSpace", 1, 1, 1, d2s_infer, d2s_exec, 0},
    {"SpaceToDepth", 1, 1, 1, d2s_infer, d2s_exec, 0},
    {"CumSum", 11, 2, 2, cumsum_infer, cumsum_exec, 0},
    {"GatherElements", 11, 2, 2, gel_infer, gel_exec, 0, STR_IN(0)},
    {"Trilu", 14, 1, 2, trilu_infer, trilu_exec, 0},
    {"CastLike", 15, 2, 2, castlike_infer, cast_exec, 0, STR_IN(0) | STR_IN(1)},
    {"Shrink", 9, 1, 1, shrink_infer, shrink_exec, 0},
    {"Conv", 1, 2, 3, conv_infer, conv_exec, 0},
    {"ConvTranspose", 1, 2, 3, convt_infer, convt_exec, 0},
    {"MaxPool", 1, 1, 1, pool_infer, pool_exec, 0},
    {"AveragePool", 1, 1, 1, pool_infer, pool_exec, 0},
    {"LpPool", 2, 1, 1, pool_infer, pool_exec, 0},
    {"GlobalAveragePool", 1, 1, 1, gpool_infer, gpool_exec, 0},
    {"GlobalMaxPool", 1, 1, 1, gpool_infer, gpool_exec, 0},
    {"GlobalLpPool", 2, 1, 1, gpool_infer, gpool_exec, 0},
    {"BatchNormalization", 6, 5, 5, bn_infer, bn_exec, 0},
    {"InstanceNormalization", 6, 3, 3, inorm_infer, inorm_exec, 0},
    {"LayerNormalization", 17, 2, 3, lnorm_infer, lnorm_exec, 0},
    {"LRN", 1, 1, 1, lrn_infer, lrn_exec, 0},
    {"Gemm", 7, 2, 3, gemm_infer, gemm_exec, 0},
    {"MatMul", 1, 2, 2, matmul_infer, matmul_exec, 0},
    {"Softmax", 1, 1, 1, softmax_infer, softmax_exec, 0},
    {"LogSoftmax", 1, 1, 1, softmax_infer, softmax_exec, 0},
    {"Hardmax", 1, 1, 1, softmax_infer, softmax_exec, 0},
    {"Resize", 10, 1, 4, resize_infer, resize_exec, 0},
    {"Upsample", 7, 1, 2, resize_infer, resize_exec, 0},
};

const onnx_op *onnx_op_find(const char *op_type, const char *domain, int opset) {
  if (domain && *domain && strcmp(domain, "ai.onnx")) return NULL;
  for (size_t i = 0; i < sizeof op_table / sizeof op_table[0]; i++)
    if (!strcmp(op_table[i].name, op_type)) return opset >= op_table[i].since ? &op_table[i] : NULL;
  return NULL;
}
int onnx_op_count(void) { return (int)(sizeof op_table / sizeof op_table[0]); }
const onnx_op *onnx_op_at(int i) { return &op_table[i]; }
