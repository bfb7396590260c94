/* kern_smallk.c: the "smallk" family: small-K convolutions (Cin <= 4 and Cin*KH*KW <= 32,
 * 2-D, ungrouped, plain input: kern_small_k; the first layer of vision models), which
 * read raw pixels, and their rounding error is amplified by the whole network (RetinaFace's
 * landmark outputs move by ~4e-5 when this layer is summed in oneDNN's order). They are
 * computed in float in ONNX Runtime's order, so they round like the ORT runs that produced
 * the models' reference outputs:
 *   M % 8 == 0 (MLAS NCHWc "NCHW input" algorithm): per input channel c a fused-multiply-add
 *     chain over (kh, kw) from 0, channels summed in order (s0 + s1) + s2 ..., then + bias;
 *   otherwise (MLAS im2col + SGEMM): one FMA chain over k = (c, kh, kw) from 0, then + bias;
 * padded taps contribute exact zeros. Plain output: vectorised over 16 output pixels of a
 * row (gathered per thread into an im2col strip P[k][ow]), 4 output channels per pass.
 * nChw8c output (M % 8 == 0): kdir_row_direct, broadcasting taps from padded copies of the
 * input rows, or from the image's rows in place when it is large (kdir_bases).
 * Element-wise ops with constants in front (step_pre) are applied as the input is read.
 * A depthwise 3x3 stride-1 conv right after it (M % 16 == 0, AVX-512; smallk_takes_dw,
 * fuse_dw in plan.c) runs in the same step: smallk_dw_rows keeps 3 rows of the first conv
 * in a ring and writes only the depthwise conv's output (dw_row16).
 * Layout: plain NCHW input (and fused Add operand); output plain, or nChw8c when every
 * consumer reads blocked, M % 8 == 0 and there is no fused Add (CINFER_ONNX_PLAIN: plain).
 * Invariants: K = C*KH*KW <= 32 (kdir_row_direct's tap offsets); per-thread scratch in
 * temp[0] (k64_temp_per_thread each), so run allocates nothing. test_conv_shapes
 * (test_onnx_kernels.c) compares it with the reference conv, test_pre_exact checks the
 * fused input ops bit for bit against separate ones. CINFER_ONNX_NO_K64 turns it off. */

#include "backends/onnx/kern_util.h"

typedef struct {
  fast_kernel base;
  conv_geom g;
  bool blocked_out; /* writes nChw<blk>c (w_data: [M/8][K][8] weights, bias, slopes) */
  int64_t blk;      /* 8 or 16: kern_block() when M is a multiple of it, else 8 */
  bool w16;         /* blk 16 on an AVX-512 build: w_data is [M/16][K][16] (kdir_row_direct16) */
  bool in_place;    /* blocked_out: reads the image's rows in place (kdir_bases) */
  float *w_data;
  /* with a depthwise 3x3 stride-1 conv fused (s->dw, smallk_takes_dw): its weights as
   * [M/16][9][16] then bias [M], its Relu; the small-K conv's rows go through a ring of 3
   * rows per thread and never to memory (smallk_dw_rows) */
  float *dw_w;
  bool dw_relu;
} smallk_kernel;

#define KDIR_DIRECT_BYTES (512 * 1024) /* an image above it is read in place (kdir_bases) */

#if defined(__AVX512F__)
#include <immintrin.h>
#define KDIR16 1
typedef float v16f __attribute__((vector_size(64)));
typedef float v16fu __attribute__((vector_size(64), aligned(4)));
typedef int v16i __attribute__((vector_size(64)));
KERN_DEF_TANH(v16_tanh, v16f, v16i)
#else
#define KDIR16 0
#endif

static bool smallk_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  (void)keep;
  return kern_conv_eligible(p, s) && kern_small_k(p, s);
}

static bool smallk_takes_pre(const onnx_plan *p, const plan_step *s) { return smallk_can_take(p, s, false); }

static void smallk_destroy(fast_kernel *fk) {
  smallk_kernel *k = (smallk_kernel *)fk;
  free(k->w_data);
  free(k->dw_w);
  free(k);
}

/* width of the per-thread im2col strip: both row kernels read whole 16- or 6-pixel groups */
static int64_t kdir_owp(int64_t OW) { return ((OW + 5) / 6 * 6 + 15) / 16 * 16; }

static int64_t kdir_rw(const conv_geom *g);

static int64_t kdir_span(const conv_geom *g) { return 5 * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1; }

/* per-thread scratch of the small-K conv: the im2col strip, or (blocked output) the padded
 * input rows R, a tail of 2 blocks x 6 pixels (16 floats each), a zero row and the edge
 * windows of kdir_group_taps; 64-byte multiples */
static size_t k64_temp_per_thread(const conv_geom *g, int64_t K, bool blocked) {
  int64_t rows = g->C * g->k[0];
  size_t n = blocked ? (size_t)(rows * kdir_rw(g) + 192 + kdir_rw(g) + (g->out[1] + 5) / 6 * rows * kdir_span(g))
                     : (size_t)(K * kdir_owp(g->out[1]));
  return (n * sizeof(float) + 63) & ~(size_t)63;
}

/* floats of one ring row of the fused depthwise conv: M/16 blocks of OW + 2 pixels (a zero
 * pixel at each end), and the per-thread scratch it adds: 4 ring rows (the fourth all
 * zeros: the padding rows above and below) and one output row for a plain destination */
static int64_t dw_ring_row(const conv_geom *g, int64_t M) { return M / 16 * (g->out[1] + 2) * 16; }
static size_t dw_temp_per_thread(const conv_geom *g, int64_t M) {
  return ((size_t)(4 * dw_ring_row(g, M) + M * g->out[1]) * sizeof(float) + 63) & ~(size_t)63;
}

#if KDIR16
/* Fusion query (fuse_dw): s a small-K conv whose output (M a multiple of 16, nChw16c on an
 * AVX-512 build) only t reads, t a depthwise 3x3 stride-1 pad-1 conv (group M, dilation 1)
 * with an optional Relu. UltraFace's Conv_0 -> Conv_2: the 1.2 MB between them stays in a
 * ring of three rows. */
static bool smallk_takes_dw(const onnx_plan *p, const plan_step *s, const plan_step *t) {
  if (!smallk_can_take(p, s, true) || !kern_conv_eligible(p, t) || kern_block() != 16 || getenv("CINFER_ONNX_PLAIN") ||
      getenv("CINFER_ONNX_NO_K64_16") || getenv("CINFER_ONNX_NO_K64_DW") || s->sum_id >= 0 || t->sum_id >= 0 ||
      t->pre.n || (t->has_fused && t->fused.act != ACT_RELU) || s->in[0]->ndim != 4)
    return false;
  const ot *w = s->in[1], *wt = t->in[1];
  int64_t M = w->dims[0];
  conv_geom g, gt;
  if (M % 16 || !kern_geom(s->node, s->in[0], w->dims + 2, false, &g) || wt->ndim != 4 ||
      !kern_geom(t->node, s->out[0], wt->dims + 2, false, &gt))
    return false;
  return attr_i(t->node, "group", 1) == M && wt->dims[0] == M && wt->dims[1] == 1 && gt.k[0] == 3 && gt.k[1] == 3 &&
         gt.stride[0] == 1 && gt.stride[1] == 1 && gt.dil[0] == 1 && gt.dil[1] == 1 && gt.pb[0] == 1 &&
         gt.pb[1] == 1 && gt.pe[0] == 1 && gt.pe[1] == 1 && gt.out[0] == g.out[0] && gt.out[1] == g.out[1];
}
#endif

/* keep: every consumer takes oneDNN's blocked layout; with M % 8 == 0 (the MLAS NCHWc
 * order) and no fused Add the output is then written in nChw8c directly (RetinaFace's
 * first layer: saves a 6.5 MB reorder per image) */
static cinfer_status *smallk_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  smallk_kernel *k = calloc(1, sizeof *k);
  if (!k) return kern_oom();
  cinfer_status *st = conv_geom_make(s->node, s->in[0], s->in[1]->dims + 2, false, &k->g);
  if (st) { free(k); return st; }
  int64_t K = s->in[1]->dims[1] * s->in[1]->dims[2] * s->in[1]->dims[3], M = s->in[1]->dims[0];
  bool dw = s->dw.w != NULL; /* fuse_dw asked smallk_takes_dw: M % 16 == 0, a 16-lane build */
  if (dw && (!KDIR16 || M % 16 || kern_block() != 16)) {
    free(k);
    return cinfer_status_new(CINFER_INTERNAL, "%s: a fused depthwise conv this kernel cannot run", s->node->name);
  }
  if (dw || (keep && M % 8 == 0 && s->sum_id < 0 && !getenv("CINFER_ONNX_PLAIN"))) {
    /* weights [M/8][K][8], bias [M], PRelu slopes [M] */
    size_t wbytes = sizeof(float) * (size_t)((K + 2) * M);
    float *wb = kern_alloc64(wbytes);
    k->blk = M % kern_block() == 0 ? kern_block() : 8;
    if (dw) { /* [M/16][9][16] weights, bias [M] */
      k->dw_w = kern_alloc64(sizeof(float) * (size_t)(10 * M));
      if (k->dw_w) {
        const float *dwW = s->dw.w->data, *dwB = s->dw.b ? s->dw.b->data : NULL;
        for (int64_t m = 0; m < M; m++) {
          for (int64_t t = 0; t < 9; t++) k->dw_w[((m / 16) * 9 + t) * 16 + m % 16] = dwW[m * 9 + t];
          k->dw_w[9 * M + m] = dwB ? dwB[m] : 0.0f;
        }
      }
      k->dw_relu = s->dw.act == ACT_RELU;
    }
    if (!wb || (dw && !k->dw_w) || (keep && !kern_out_blocked(p, s, M, (int)k->blk))) {
      free(wb);
      free(k->dw_w);
      free(k);
      return kern_oom();
    }
    const float *W = s->in[1]->data, *B = s->n_in > 2 && s->in[2] ? s->in[2]->data : NULL;
    k->w16 = KDIR16 && k->blk == 16 && (dw || !getenv("CINFER_ONNX_NO_K64_16"));
    int64_t wl = k->w16 ? 16 : 8; /* weight vector width */
    for (int64_t m = 0; m < M; m++) {
      for (int64_t kk = 0; kk < K; kk++) wb[((m / wl) * K + kk) * wl + m % wl] = W[m * K + kk];
      wb[K * M + m] = B ? B[m] : 0.0f;
      wb[(K + 1) * M + m] = kern_prelu_slope(s, m);
    }
    k->w_data = wb;
    k->blocked_out = keep || !dw; /* with dw: the depthwise conv's output, plain unless keep */
    /* CINFER_ONNX_K64_IN_PLACE=1 / 0 (tests): always / never, whatever the image's size */
    const char *ip = getenv("CINFER_ONNX_K64_IN_PLACE");
    k->in_place = !s->pre.n && (ip ? !strcmp(ip, "1")
                                   : k->g.C * k->g.in[0] * k->g.in[1] * (int64_t)sizeof(float) > KDIR_DIRECT_BYTES);
  }
  s->temp_bytes[0] = (size_t)p->threads * (k64_temp_per_thread(&k->g, K, k->blocked_out || dw) +
                                           (dw ? dw_temp_per_thread(&k->g, M) : 0));
  *out = &k->base;
  return NULL;
}

/* Stores 8 lanes (n valid) of channel row y: + sum operand, activation. */
static inline void kdir_store(v8f v, float *y, const float *sr, int64_t n, const onnx_fused *f,
                              int64_t m) {
  if (n == 8 && (!f || f->act == ACT_NONE || f->act == ACT_RELU || f->act == ACT_PRELU ||
                 f->act == ACT_TANH || f->act == ACT_SIGMOID)) {
    if (sr) v = v + *(const v8fu *)sr;
    if (f && f->act == ACT_RELU) v = v8_relu(v);
    if (f && f->act == ACT_TANH) v = v8_tanh(v);
    if (f && f->act == ACT_SIGMOID) v = v8_sigmoid(v);
    if (f && f->act == ACT_PRELU) v = v8_prelu(v, v8_splat(f->slope[f->slope_n == 1 ? 0 : m]));
    *(v8fu *)y = v;
    return;
  }
  float r[8];
  __builtin_memcpy(r, &v, sizeof r);
  for (int64_t q = 0; q < n; q++) {
    float o = r[q];
    if (sr) o += sr[q];
    y[q] = f ? act_apply_c(f, o, m) : o;
  }
}

/* MB output channels x 16 output pixels: 2*MB independent FMA chains */
static inline __attribute__((always_inline)) void kdir_block(int MB, bool per_c, int64_t C, int64_t T,
                                                             int64_t K, const float *W, const float *P,
                                                             int64_t OWp, int64_t ow, v8f out[8]) {
  v8f t[8] = {0}, acc[8] = {0};
  for (int64_t c = 0; c < C; c++) {
    if (per_c || c == 0)
      for (int j = 0; j < 2 * MB; j++) acc[j] = (v8f){0};
    for (int64_t kk = c * T; kk < (c + 1) * T; kk++) {
      v8f x0 = *(const v8fu *)(P + kk * OWp + ow), x1 = *(const v8fu *)(P + kk * OWp + ow + 8);
#pragma GCC unroll 4
      for (int j = 0; j < MB; j++) {
        v8f wv = v8_splat(W[j * K + kk]);
        acc[2 * j] = v8_fma(x0, wv, acc[2 * j]);
        acc[2 * j + 1] = v8_fma(x1, wv, acc[2 * j + 1]);
      }
    }
    if (per_c)
      for (int j = 0; j < 2 * MB; j++) t[j] = c == 0 ? acc[j] : acc[j] + t[j];
  }
  for (int j = 0; j < 2 * MB; j++) out[j] = per_c ? t[j] : acc[j];
}

/* one output row of the small-K conv: Y[m][ow] for m in [0, M), from the strip P
 * (OWp: a multiple of 16) */
static void kdir_row(const conv_geom *g, const float *W, const float *B, const float *P, int64_t OWp,
                     int64_t M, int64_t OW, float *Yrow, size_t ystride, const float *Srow,
                     const onnx_fused *f) {
  int64_t C = g->C, T = g->k[0] * g->k[1], K = C * T;
  bool per_c = M % 8 == 0;
  for (int64_t m0 = 0; m0 < M; m0 += 4) {
    int64_t mb = M - m0 < 4 ? M - m0 : 4;
    for (int64_t ow = 0; ow < OW; ow += 16) {
      v8f o[8];
      const float *Wm = W + m0 * K;
      if (mb == 4 && per_c) kdir_block(4, true, C, T, K, Wm, P, OWp, ow, o);
      else if (mb == 4) kdir_block(4, false, C, T, K, Wm, P, OWp, ow, o);
      else { /* a tail of 1..3 channels: M % 4 != 0, so not per_c */
        for (int64_t j = 0; j < mb; j++) {
          v8f one[8];
          kdir_block(1, false, C, T, K, Wm + j * K, P, OWp, ow, one);
          o[2 * j] = one[0];
          o[2 * j + 1] = one[1];
        }
      }
      for (int64_t j = 0; j < mb; j++) {
        float *y = Yrow + (size_t)(m0 + j) * ystride + ow;
        const float *sr = Srow ? Srow + (size_t)(m0 + j) * ystride + ow : NULL;
        float bj = B ? B[m0 + j] : 0.0f;
        int64_t n0 = OW - ow < 8 ? OW - ow : 8, n1 = OW - ow - 8 < 8 ? OW - ow - 8 : 8;
        kdir_store(B ? o[2 * j] + bj : o[2 * j], y, sr, n0, f, m0 + j);
        if (n1 > 0) kdir_store(B ? o[2 * j + 1] + bj : o[2 * j + 1], y + 8, sr ? sr + 8 : NULL, n1, f, m0 + j);
      }
    }
  }
}

/* dst[j] = the fused input ops (step_pre) applied to src[j] (channel ch), j < n; dst may be
 * src. One pass per op (the first one reads src): each result is stored, so it is rounded
 * to float like the separate op's (a Mul then an Add never contract into one FMA). */
static void pre_copy(const step_pre *pre, int64_t ch, const float *src, float *dst, int64_t n) {
  if (!pre->n && dst != src) memcpy(dst, src, sizeof(float) * (size_t)n);
  for (int i = 0; i < pre->n; i++) {
    const float *a = i ? dst : src;
    float k = pre->op[i].c[pre->op[i].per_channel ? ch : 0];
    bool cf = pre->op[i].c_first;
    switch (pre->op[i].op) {
      case '+': for (int64_t j = 0; j < n; j++) dst[j] = a[j] + k; break;
      case '*': for (int64_t j = 0; j < n; j++) dst[j] = a[j] * k; break;
      case '-':
        if (cf) for (int64_t j = 0; j < n; j++) dst[j] = k - a[j];
        else for (int64_t j = 0; j < n; j++) dst[j] = a[j] - k;
        break;
      default:
        if (cf) for (int64_t j = 0; j < n; j++) dst[j] = k / a[j];
        else for (int64_t j = 0; j < n; j++) dst[j] = a[j] / k;
        break;
    }
  }
}

/* the im2col strip of output row (n, oh): P[(c*KH + kh)*KW + kw][ow], zeros for padding
 * and for ow in [OW, OWp); the fused input ops applied to the image's taps */
static void kdir_strip(const conv_geom *g, const float *X, int64_t n, int64_t oh, float *P, int64_t OWp,
                       const step_pre *pre) {
  int64_t C = g->C, KH = g->k[0], KW = g->k[1], OW = g->out[1], IH = g->in[0], IW = g->in[1];
  int64_t sw = g->stride[1];
  for (int64_t c = 0; c < C; c++)
    for (int64_t kh = 0; kh < KH; kh++) {
      int64_t ih = oh * g->stride[0] - g->pb[0] + kh * g->dil[0];
      for (int64_t kw = 0; kw < KW; kw++) {
        float *pr = P + ((c * KH + kh) * KW + kw) * OWp;
        if (ih < 0 || ih >= IH) { memset(pr, 0, sizeof(float) * (size_t)OWp); continue; }
        const float *xr = X + ((n * C + c) * IH + ih) * IW;
        int64_t off = kw * g->dil[1] - g->pb[1]; /* iw = ow * sw + off */
        /* valid ow: 0 <= ow*sw + off < IW */
        int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
        int64_t hi = IW - off <= 0 ? 0 : (IW - off + sw - 1) / sw;
        if (lo > OW) lo = OW;
        if (hi > OW) hi = OW;
        if (hi < lo) hi = lo;
        int64_t ow = 0;
        for (; ow < lo; ow++) pr[ow] = 0.0f;
        if (sw == 1) memcpy(pr + lo, xr + lo + off, sizeof(float) * (size_t)(hi - lo));
        else if (sw == 2) { /* even elements of two vectors */
          for (ow = lo; ow + 8 <= hi && 2 * ow + off + 16 <= IW; ow += 8) {
            v8f a = *(const v8fu *)(xr + 2 * ow + off), b = *(const v8fu *)(xr + 2 * ow + off + 8);
            *(v8fu *)(pr + ow) = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14); /* GCC >= 12, clang */
          }
          for (; ow < hi; ow++) pr[ow] = xr[2 * ow + off];
        }
        else
          for (ow = lo; ow < hi; ow++) pr[ow] = xr[ow * sw + off];
        for (ow = hi; ow < OWp; ow++) pr[ow] = 0.0f;
        pre_copy(pre, c, pr + lo, pr + lo, hi - lo);
      }
    }
}

/* Blocked output (nChw8c) without the im2col strip: per output row, the C*KH input rows it
 * reads are copied once into padded rows (pre-ops applied, zeros for padding; row c*KH+kh
 * holds iw = j - pl at j), and the kernel broadcasts taps straight from them (stride sw),
 * like MLAS's NCHW-input kernel. Per output element the order is kdir_block's with per_c:
 * an FMA chain per input channel over (kh, kw) from 0, channels added in order, + bias.
 * Width of one padded row: every tap of every group of 6 output pixels. */
static int64_t kdir_rw(const conv_geom *g) {
  int64_t OWr = (g->out[1] + 5) / 6 * 6;
  int64_t need = (OWr - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1, have = g->pb[1] + g->in[1];
  return ((need > have ? need : have) + 7) & ~(int64_t)7;
}

/* The C*KH input rows of output row (n, oh): input column iw of row i = c*KH + kh at
 * rb[i] + iw. Read in place (the result is true) when there are no fused input ops and an
 * image is larger than KDIR_DIRECT_BYTES: the image's own rows (iw in [0, IW); a padding
 * row is the zero row Z, RW floats), and groups of pixels that read past the row's ends go
 * through kdir_group_taps. Else the rows are copied into R with the ops applied and zeros
 * around (valid for iw in [-pl, RW - pl)). Why both (session 21, Zen 4 guest, 1 MB L2,
 * first layer timed in the model by --profile, 10-12 alternating rounds): UltraFace's
 * 921 KB image comes from L3 and its copy (memmove, 5.3% of a 1-thread profile against
 * 7.2% for the kernel) is bandwidth-bound; read in place the layer takes 0.91x the time.
 * MobileFaceNet's 150 KB image is in L2, the copy is cheap and fills L1 for the kernel's
 * second pass over the channel blocks; read in place it took 1.04-1.10x. */
static bool kdir_bases(const conv_geom *g, const float *X, int64_t n, int64_t oh, float *R, int64_t RW,
                       const float *Z, const step_pre *pre, bool direct, const float **rb) {
  int64_t C = g->C, KH = g->k[0], IH = g->in[0], IW = g->in[1], pl = g->pb[1];
  direct = direct && !pre->n;
  for (int64_t c = 0; c < C; c++)
    for (int64_t kh = 0; kh < KH; kh++) {
      int64_t i = c * KH + kh, ih = oh * g->stride[0] - g->pb[0] + kh * g->dil[0];
      const float *x = ih < 0 || ih >= IH ? NULL : X + ((n * C + c) * IH + ih) * IW;
      if (direct) { rb[i] = x ? x : Z + pl; continue; }
      float *r = R + i * RW;
      rb[i] = r + pl;
      if (!x) { memset(r, 0, sizeof(float) * (size_t)RW); continue; }
      memset(r, 0, sizeof(float) * (size_t)pl);
      pre_copy(pre, c, x, r + pl, IW);
      memset(r + pl + IW, 0, sizeof(float) * (size_t)(RW - pl - IW));
    }
  return direct;
}

/* The tap pointers of group gi of 6 output pixels, whose first pixel's first tap reads
 * column i0 = ow * sw - pl: tap kk of the group's pixel q at t[kk] + *shift + q * sw. tp[kk]
 * = rb[kk / KW] + (kk % KW) * dil. A group of direct rows that reads outside [0, IW) (the
 * left and right padding, the pixels past OW of a short last group) reads its window from
 * E's slot gi (rows of span floats, zeros outside the image; copied there when build, the
 * row's first pass over the channel blocks) through te. */
/* kdir_group_taps' window copy: rows of span floats, [lo, hi) from the image, zeros around */
static __attribute__((noinline)) void kdir_edge(const float *const *rb, int64_t rows, int64_t i0, int64_t span,
                                                int64_t IW, float *E) {
  int64_t lo = i0 < 0 ? -i0 : 0, hi = IW - i0 < span ? IW - i0 : span; /* valid j: [lo, hi) */
  if (hi < lo) hi = lo;
#if KDIR16
  if (span <= 16) { /* one masked load per row: the lanes outside [lo, hi) are not read */
    __mmask16 mk = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1)), st = (__mmask16)((1u << span) - 1);
    for (int64_t i = 0; i < rows; i++) {
      const float *src = (const float *)((uintptr_t)rb[i] + (uintptr_t)(i0 * (int64_t)sizeof(float)));
      _mm512_mask_storeu_ps(E + i * span, st, _mm512_maskz_loadu_ps(mk, src));
    }
    return;
  }
#endif
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < span; j++) E[i * span + j] = j >= lo && j < hi ? rb[i][i0 + j] : 0.0f;
}

static inline __attribute__((always_inline)) const float *const *kdir_group_taps(
    const conv_geom *g, const float *const *rb, const float *const *tp, bool direct, int64_t gi, int64_t i0, int64_t K,
    float *E, bool build, const float **te, int64_t *shift) {
  int64_t span = kdir_span(g), IW = g->in[1], KW = g->k[1], dil = g->dil[1];
  *shift = i0;
  if (!direct || (i0 >= 0 && i0 + span <= IW)) return tp;
  E += gi * (K / KW) * span;
  if (build) kdir_edge(rb, K / KW, i0, span, IW, E);
  for (int64_t i = 0, kk = 0; kk < K; i++) /* no division per tap: this runs per group */
    for (int64_t kx = 0; kx < KW; kx++, kk++) te[kk] = E + i * span + kx * dil;
  *shift = 0;
  return te;
}

static void kdir_taps(const conv_geom *g, const float *const *rb, int64_t K, const float **tp) {
  for (int64_t i = 0, kk = 0; kk < K; i++)
    for (int64_t kx = 0; kx < g->k[1]; kx++, kk++) tp[kk] = rb[i] + kx * g->dil[1];
}

/* The FMA chains of one input channel: taps [k0, k1) (off[kk]: the tap's offset in R from
 * the group's first pixel), 6 pixels sw apart, NB blocks (w: block 0's [K][8] weights). */
static inline __attribute__((always_inline)) void kdir_chain(int NB, int SW, int64_t sw, const float *w, int64_t K,
                                                             const float *const *tp, int64_t shift, int64_t k0,
                                                             int64_t k1, v8f acc[12]) {
  if (SW) sw = SW;
  for (int q = 0; q < 6 * NB; q++) acc[q] = (v8f){0};
  for (int64_t kk = k0; kk < k1; kk++) {
    v8f w0 = *(const v8fu *)(w + kk * 8), w1 = NB == 2 ? *(const v8fu *)(w + (K + kk) * 8) : w0;
    const float *x = tp[kk] + shift;
    __asm__("" : "+r"(x)); /* one base register, the 6 taps as displacements (no index adds) */
#pragma GCC unroll 6
    for (int q = 0; q < 6; q++) {
      v8f xv = v8_splat(x[q * sw]);
      acc[q] = v8_fma(xv, w0, acc[q]);
      if (NB == 2) acc[6 + q] = v8_fma(xv, w1, acc[6 + q]);
    }
  }
}

/* NB (1 or 2) channel blocks x 6 output pixels from ow: 6*NB FMA chains per input channel.
 * The running channel sum lives in y[b] (the output row, or a scratch for a short tail):
 * the first channel's store brings the output line into the cache while the next channels
 * compute (measured faster than summing in an L1 scratch and storing once). The last
 * channel adds the bias and applies the activation (ACT 0 none, 1 Relu, 2 any other). */
static inline __attribute__((always_inline)) void kdir_direct_pass(int NB, int SW, int ACT, const conv_geom *g,
                                                                   const float *w, int64_t K, const float *const *tp,
                                                                   int64_t shift, float *y[2],
                                                                   int64_t ps, const float *bias, const float *slope,
                                                                   const onnx_fused *f) {
  int64_t C = g->C, T = g->k[0] * g->k[1], sw = g->stride[1];
  for (int64_t c = 0; c < C; c++) {
    v8f acc[12];
    kdir_chain(NB, SW, sw, w, K, tp, shift, c * T, (c + 1) * T, acc);
    bool last = c == C - 1;
    for (int b = 0; b < NB; b++) {
      v8f bv = *(const v8fu *)(bias + b * 8);
#pragma GCC unroll 6
      for (int q = 0; q < 6; q++) {
        v8f v = acc[6 * b + q];
        if (c) v = *(const v8fu *)(y[b] + q * ps) + v;
        if (last) {
          v = v + bv;
          if (ACT == 1) v = v8_relu(v);
          if (ACT == 2) v = v8_act(v, f, slope + b * 8);
        }
        *(v8fu *)(y[b] + q * ps) = v;
      }
    }
  }
}

/* Yb: the output row in a layout of blocks of B channels (8 or 16; bstride floats between
 * two blocks' planes): 8-channel vector c8 of pixel ow at Yb + (c8 / (B / 8)) * bstride +
 * (c8 % (B / 8)) * 8 + ow * B */
static void kdir_row_direct(const conv_geom *g, const float *wb, int64_t M, const float *const *rb, bool direct,
                            int64_t OW, float *Yb, size_t bstride, int64_t B, const onnx_fused *f, float *scratch,
                            float *E) {
  int64_t K = g->C * g->k[0] * g->k[1], sw = g->stride[1];
  const float *bias = wb + K * M, *slope = bias + M;
  float *tail = scratch;
  const float *tp[32], *te[32]; /* K <= 32 (small_k) */
  kdir_taps(g, rb, K, tp);
  int act = !f ? 0 : f->act == ACT_RELU ? 1 : 2;
  for (int64_t cb = 0; cb < M / 8;) {
    int nb = M / 8 - cb >= 2 ? 2 : 1;
    const float *w = wb + cb * K * 8, *bs = bias + cb * 8, *sl = slope + cb * 8;
    for (int64_t ow = 0; ow < OW; ow += 6) {
      int64_t np = OW - ow < 6 ? OW - ow : 6, shift;
      const float *const *t = kdir_group_taps(g, rb, tp, direct, ow / 6, ow * sw - g->pb[1], K, E, cb == 0, te, &shift);
      float *y[2];
      const int64_t RB = B / 8, ps = np == 6 ? B : 8;
      for (int b = 0; b < 2; b++)
        y[b] = np == 6 ? Yb + (size_t)((cb + b) / RB) * bstride + (size_t)((cb + b) % RB) * 8 + (size_t)(ow * B)
                       : tail + b * 48;
      if (nb == 2 && sw == 2 && act == 1) kdir_direct_pass(2, 2, 1, g, w, K, t, shift, y, ps, bs, sl, f);
      else if (nb == 2 && sw == 1 && act == 1) kdir_direct_pass(2, 1, 1, g, w, K, t, shift, y, ps, bs, sl, f);
      else if (nb == 2 && act == 0) kdir_direct_pass(2, 0, 0, g, w, K, t, shift, y, ps, bs, sl, f);
      else if (nb == 2) kdir_direct_pass(2, 0, 2, g, w, K, t, shift, y, ps, bs, sl, f);
      else if (act == 0) kdir_direct_pass(1, 0, 0, g, w, K, t, shift, y, ps, bs, sl, f);
      else kdir_direct_pass(1, 0, 2, g, w, K, t, shift, y, ps, bs, sl, f);
      if (np < 6)
        for (int b = 0; b < nb; b++)
          for (int64_t q = 0; q < np; q++)
            memcpy(Yb + (size_t)((cb + b) / RB) * bstride + (size_t)((cb + b) % RB) * 8 + (size_t)((ow + q) * B),
                   tail + b * 48 + q * 8, sizeof(float) * 8);
    }
    cb += nb;
  }
}

#if KDIR16
/* kdir_chain with 16-channel weight vectors (one nChw16c block per zmm): the same FMA
 * chain per lane, so the same bits, with half the instructions of two 8-lane blocks. */
static inline __attribute__((always_inline)) void kdir_chain16(int NB, int SW, int64_t sw, const float *w, int64_t K,
                                                               const float *const *tp, int64_t shift, int64_t k0,
                                                               int64_t k1, v16f acc[12]) {
  if (SW) sw = SW;
  for (int q = 0; q < 6 * NB; q++) acc[q] = (v16f){0};
  for (int64_t kk = k0; kk < k1; kk++) {
    v16f w0 = *(const v16fu *)(w + kk * 16), w1 = NB == 2 ? *(const v16fu *)(w + (K + kk) * 16) : w0;
    const float *x = tp[kk] + shift;
    __asm__("" : "+r"(x));
#pragma GCC unroll 6
    for (int q = 0; q < 6; q++) {
      v16f xv = (v16f)_mm512_set1_ps(x[q * sw]);
      acc[q] = (v16f)_mm512_fmadd_ps((__m512)xv, (__m512)w0, (__m512)acc[q]);
      if (NB == 2) acc[6 + q] = (v16f)_mm512_fmadd_ps((__m512)xv, (__m512)w1, (__m512)acc[6 + q]);
    }
  }
}

/* the activation of kdir_direct_pass (ACT 1 Relu, 3 Tanh on 16 lanes, 2 v8_act on each
 * 8-lane half) */
static inline __attribute__((always_inline)) v16f kdir_act16(int ACT, v16f v, const onnx_fused *f,
                                                             const float *slope16) {
  if (ACT == 1) return (v16f)((v16i)v & (v16i)(v > 0));
  if (ACT == 3) return v16_tanh(v);
  v8f lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  v8f hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  lo = v8_act(lo, f, slope16);
  hi = v8_act(hi, f, slope16 + 8);
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* kdir_direct_pass for NB (1 or 2) nChw16c blocks: per output element the same order
 * (an FMA chain per input channel, the running sum in y, + bias, activation). */
static inline __attribute__((always_inline)) void kdir_direct_pass16(int NB, int SW, int ACT, const conv_geom *g,
                                                                     const float *w, int64_t K, const float *const *tp,
                                                                     int64_t shift, float *y[2],
                                                                     const float *bias, const float *slope,
                                                                     const onnx_fused *f) {
  int64_t C = g->C, T = g->k[0] * g->k[1], sw = g->stride[1];
  for (int64_t c = 0; c < C; c++) {
    v16f acc[12];
    kdir_chain16(NB, SW, sw, w, K, tp, shift, c * T, (c + 1) * T, acc);
    bool last = c == C - 1;
    for (int b = 0; b < NB; b++) {
      v16f bv = *(const v16fu *)(bias + b * 16);
#pragma GCC unroll 6
      for (int q = 0; q < 6; q++) {
        v16f v = acc[6 * b + q];
        if (c) v = *(const v16fu *)(y[b] + q * 16) + v;
        if (last) {
          v = v + bv;
          if (ACT) v = kdir_act16(ACT, v, f, slope + b * 16);
        }
        *(v16fu *)(y[b] + q * 16) = v;
      }
    }
  }
}

/* kdir_row_direct for nChw16c output with [M/16][K][16] weights: block j of pixel ow at
 * Yb + j * bstride + ow * 16 */
static void kdir_row_direct16(const conv_geom *g, const float *wb, int64_t M, const float *const *rb, bool direct,
                              int64_t OW, float *Yb, size_t bstride, const onnx_fused *f, float *scratch, float *E) {
  int64_t K = g->C * g->k[0] * g->k[1], sw = g->stride[1];
  const float *bias = wb + K * M, *slope = bias + M;
  float *tail = scratch;
  const float *tp[32], *te[32]; /* K <= 32 (small_k) */
  kdir_taps(g, rb, K, tp);
  int act = !f ? 0 : f->act == ACT_RELU ? 1 : f->act == ACT_TANH ? 3 : 2;
  for (int64_t cb = 0; cb < M / 16;) {
    int nb = M / 16 - cb >= 2 ? 2 : 1;
    const float *w = wb + cb * K * 16, *bs = bias + cb * 16, *sl = slope + cb * 16;
    for (int64_t ow = 0; ow < OW; ow += 6) {
      int64_t np = OW - ow < 6 ? OW - ow : 6, shift;
      const float *const *t = kdir_group_taps(g, rb, tp, direct, ow / 6, ow * sw - g->pb[1], K, E, cb == 0, te, &shift);
      float *y[2];
      for (int b = 0; b < 2; b++) y[b] = np == 6 ? Yb + (size_t)(cb + b) * bstride + (size_t)(ow * 16) : tail + b * 96;
      if (nb == 2 && sw == 2 && act == 1) kdir_direct_pass16(2, 2, 1, g, w, K, t, shift, y, bs, sl, f);
      else if (nb == 2 && sw == 1 && act == 1) kdir_direct_pass16(2, 1, 1, g, w, K, t, shift, y, bs, sl, f);
      else if (nb == 2 && act == 0) kdir_direct_pass16(2, 0, 0, g, w, K, t, shift, y, bs, sl, f);
      else if (nb == 2 && act == 3) kdir_direct_pass16(2, 0, 3, g, w, K, t, shift, y, bs, sl, f);
      else if (nb == 2 && sw == 2) kdir_direct_pass16(2, 2, 2, g, w, K, t, shift, y, bs, sl, f);
      else if (nb == 2) kdir_direct_pass16(2, 0, 2, g, w, K, t, shift, y, bs, sl, f);
      else if (sw == 1 && act == 1) kdir_direct_pass16(1, 1, 1, g, w, K, t, shift, y, bs, sl, f);
      else if (sw == 2 && act == 1) kdir_direct_pass16(1, 2, 1, g, w, K, t, shift, y, bs, sl, f);
      else if (act == 0) kdir_direct_pass16(1, 0, 0, g, w, K, t, shift, y, bs, sl, f);
      else if (act == 3) kdir_direct_pass16(1, 0, 3, g, w, K, t, shift, y, bs, sl, f);
      else kdir_direct_pass16(1, 0, 2, g, w, K, t, shift, y, bs, sl, f);
      if (np < 6)
        for (int b = 0; b < nb; b++)
          for (int64_t q = 0; q < np; q++)
            memcpy(Yb + (size_t)(cb + b) * bstride + (size_t)((ow + q) * 16), tail + b * 96 + q * 16,
                   sizeof(float) * 16);
    }
    cb += nb;
  }
}
#endif

#if KDIR16
/* One output row of the fused depthwise 3x3 conv for one 16-channel block: r[kh] points at
 * pixel -1 of input row oh - 1 + kh (OW + 2 pixels of 16 floats: zero pixels at both ends,
 * a whole zero row above and below the image), w the block's [9][16] weights, b its bias;
 * y gets OW pixels of 16 floats. Per pixel one FMA chain over (kh, kw) from 0, + bias, then
 * Relu; 8 pixels at once (8 chains: the FMA latency). */
static void dw_row16(const float *const r[3], const float *w, const float *b, bool relu, int64_t OW, float *y) {
  v16f wv[9], bv = *(const v16fu *)b, zero = {0};
  for (int t = 0; t < 9; t++) wv[t] = *(const v16fu *)(w + 16 * t);
  int64_t ow = 0;
  for (; ow + 8 <= OW; ow += 8) {
    v16f acc[8] = {0};
    for (int kh = 0; kh < 3; kh++)
      for (int kw = 0; kw < 3; kw++) {
        const float *x = r[kh] + (ow + kw) * 16;
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
          acc[q] = (v16f)_mm512_fmadd_ps(_mm512_loadu_ps(x + 16 * q), (__m512)wv[kh * 3 + kw], (__m512)acc[q]);
      }
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
      v16f v = acc[q] + bv;
      *(v16fu *)(y + (ow + q) * 16) = relu ? (v16f)_mm512_max_ps((__m512)v, (__m512)zero) : v;
    }
  }
  for (; ow < OW; ow++) {
    v16f acc = {0};
    for (int kh = 0; kh < 3; kh++)
      for (int kw = 0; kw < 3; kw++)
        acc = (v16f)_mm512_fmadd_ps(_mm512_loadu_ps(r[kh] + (ow + kw) * 16), (__m512)wv[kh * 3 + kw], (__m512)acc);
    v16f v = acc + bv;
    *(v16fu *)(y + ow * 16) = relu ? (v16f)_mm512_max_ps((__m512)v, (__m512)zero) : v;
  }
}

/* Rows [r0, r1) of the fused small-K + depthwise conv's output (row = n * OH + oh): the
 * small-K rows oh - 1 .. oh + 1 are computed into a ring of three (each once per chunk;
 * a chunk recomputes the row above and below its range), then the depthwise row from them.
 * The small-K rows are exactly the unfused kernel's (kdir_row_direct16), so the depthwise
 * conv reads the same values; its own sums are in dw_row16's order, not oneDNN's. */
static void smallk_dw_rows(const smallk_kernel *k, const plan_step *s, int64_t r0, int64_t r1, int tid) {
  const conv_geom *g = &k->g;
  const float *X = s->in[0]->data;
  const onnx_fused *f = s->has_fused && s->fused.act != ACT_NONE ? &s->fused : NULL;
  float *Y = s->out[0]->data;
  int64_t K = g->C * g->k[0] * g->k[1], M = s->in[1]->dims[0], NB = M / 16;
  int64_t OH = g->out[0], OW = g->out[1], RW = kdir_rw(g), rows = g->C * g->k[0];
  size_t per = k64_temp_per_thread(g, K, true) + dw_temp_per_thread(g, M);
  float *P = (float *)((char *)s->temp[0] + per * (size_t)tid);
  float *tail = P + rows * RW, *Z = tail + 192, *E = Z + RW;
  float *ring = (float *)((char *)P + k64_temp_per_thread(g, K, true)), *yrow = ring + 4 * dw_ring_row(g, M);
  int64_t RR = dw_ring_row(g, M), BS = (OW + 2) * 16; /* a ring row; one block within it */
  if (k->in_place) memset(Z, 0, sizeof(float) * (size_t)RW); /* the padding rows read in place */
  memset(ring, 0, sizeof(float) * (size_t)(4 * RR)); /* the zero pixels, and row 3 all zeros */
  int64_t have_n = -1, have = -1;                    /* ring holds small-K rows <= have of image have_n */
  for (int64_t row = r0; row < r1; row++) {
    int64_t n = row / OH, oh = row % OH;
    if (n != have_n) have_n = n, have = -1;
    int64_t q = oh - 1 > have + 1 ? oh - 1 : have + 1;
    if (q < 0) q = 0;
    for (; q <= oh + 1 && q < OH; q++) {
      const float *rb[32];
      bool direct = kdir_bases(g, X, n, q, P, RW, Z, &s->pre, k->in_place, rb);
      kdir_row_direct16(g, k->w_data, M, rb, direct, OW, ring + (q % 3) * RR + 16, (size_t)BS, f, tail, E);
      have = q;
    }
    for (int64_t b = 0; b < NB; b++) {
      const float *r[3];
      for (int kh = 0; kh < 3; kh++) {
        int64_t ih = oh - 1 + kh;
        r[kh] = (ih < 0 || ih >= OH ? ring + 3 * RR : ring + (ih % 3) * RR) + b * BS;
      }
      float *y = k->blocked_out ? Y + (size_t)(((n * NB + b) * OH + oh) * OW * 16) : yrow + b * OW * 16;
      dw_row16(r, k->dw_w + b * 9 * 16, k->dw_w + 9 * M + b * 16, k->dw_relu, OW, y);
    }
    if (!k->blocked_out) /* plain NCHW: channel m's row from lane m % 16 of block m / 16 */
      for (int64_t m = 0; m < M; m++) {
        float *dst = Y + (size_t)(((n * M + m) * OH + oh) * OW);
        const float *src = yrow + (m / 16) * OW * 16 + m % 16;
        for (int64_t ow = 0; ow < OW; ow++) dst[ow] = src[ow * 16];
      }
  }
}
#endif

static void smallk_rows(const fast_kernel *fk, const plan_step *s, int64_t r0, int64_t r1, int tid) {
  const smallk_kernel *k = (const smallk_kernel *)fk;
  const conv_geom *g = &k->g;
  const ot *w = s->in[1];
  const float *X = s->in[0]->data, *W = w->data;
  const float *B = s->n_in > 2 && s->in[2] ? s->in[2]->data : NULL;
  const onnx_fused *f = s->has_fused ? &s->fused : NULL;
  const float *S = f && f->sum ? f->sum->data : NULL;
  float *Y = s->out[0]->data;
  int64_t K = g->C * g->k[0] * g->k[1], M = w->dims[0];
  int64_t OH = g->out[0], OW = g->out[1], OWp = kdir_owp(OW);
  bool blk = k->blocked_out;
  int64_t RW = kdir_rw(g);
  size_t per = k64_temp_per_thread(g, K, blk);
  if (f && f->act == ACT_NONE && !S) f = NULL;
  {
    float *P = (float *)((char *)s->temp[0] + per * (size_t)tid);
    /* blocked: R (rows * RW), tail (192), zero row Z (RW), edge windows E */
    int64_t rows = g->C * g->k[0];
    float *tail = P + rows * RW, *Z = tail + 192, *E = Z + RW;
    if (blk && k->in_place) memset(Z, 0, sizeof(float) * (size_t)RW); /* the padding rows read in place */
    for (int64_t row = r0; row < r1; row++) {
      int64_t n = row / OH, oh = row % OH;
      if (blk) {
        const float *rb[32]; /* C * KH <= K <= 32 */
        bool direct = kdir_bases(g, X, n, oh, P, RW, Z, &s->pre, k->in_place, rb);
        int64_t Bk = k->blk;
#if KDIR16
        if (k->w16) {
          kdir_row_direct16(g, k->w_data, M, rb, direct, OW, Y + (size_t)((n * M * OH + oh * Bk) * OW),
                            (size_t)(OH * OW * Bk), f, tail, E);
          continue;
        }
#endif
        kdir_row_direct(g, k->w_data, M, rb, direct, OW, Y + (size_t)((n * M * OH + oh * Bk) * OW),
                        (size_t)(OH * OW * Bk), Bk, f, tail, E);
        continue;
      }
      kdir_strip(g, X, n, oh, P, OWp, &s->pre);
      size_t base = (size_t)((n * M * OH + oh) * OW);
      kdir_row(g, W, B, P, OWp, M, OW, Y + base, (size_t)(OH * OW), S ? S + base : NULL, f);
    }
  }
}

typedef struct {
  const fast_kernel *fk;
  const plan_step *s;
  int64_t rows, n;
} srow_ctx;

static void smallk_chunk(void *vc, int64_t c, int tid) {
  const srow_ctx *x = vc;
  int64_t lo, hi;
  opool_range(x->rows, x->n, c, &lo, &hi);
#if KDIR16
  if (((const smallk_kernel *)x->fk)->dw_w) {
    smallk_dw_rows((const smallk_kernel *)x->fk, x->s, lo, hi, tid);
    return;
  }
#endif
  smallk_rows(x->fk, x->s, lo, hi, tid);
}

static cinfer_status *smallk_run(fast_kernel *fk, plan_step *s, int threads) {
  (void)threads;
  const conv_geom *g = &((const smallk_kernel *)fk)->g;
  int64_t rows = g->N * g->out[0];
  double macs = (double)ot_numel(s->out[0]) * (double)(g->C * g->k[0] * g->k[1]) * OPOOL_COST_SMALLK +
                plan_step_act_cost(s);
  bool dw = ((const smallk_kernel *)fk)->dw_w != NULL;
  if (dw) macs += (double)ot_numel(s->out[0]) * 9 * 3; /* the depthwise MACs, memory-bound ones */
  int64_t n = opool_chunks(rows, macs, OPOOL_MIN_MACS);
  if (dw && n > 2 * (int64_t)opool_cur_threads()) /* each chunk recomputes 2 small-K rows */
    n = 2 * (int64_t)opool_cur_threads();
  srow_ctx x = {fk, s, rows, n};
  opool_par(x.n, smallk_chunk, &x);
  return NULL;
}

const kern_family kern_smallk = {
    .name = "smallk", .can_take = smallk_can_take, .prepare = smallk_prepare, .run = smallk_run,
    .destroy = smallk_destroy, .takes_pre = smallk_takes_pre,
#if KDIR16
    .takes_dw = smallk_takes_dw,
#endif
};
