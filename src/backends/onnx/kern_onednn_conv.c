/* kern_onednn_conv.c: the "onednn" family: every eligible Conv the other conv families do
 * not take (1-D/2-D, grouped, depthwise, dilated, strided, padded) as a oneDNN 2.6
 * convolution primitive (C API; Debian's is an OpenMP build, held to one OpenMP thread
 * everywhere: threads come from the engine's pool, conv_slices), with fused post-ops: sum for Conv+Add, then
 * relu/leaky/clip/sigmoid/tanh; PRelu applied by us after the primitive (prelu_inplace);
 * a following depthwise 3x3 stride-2 conv as oneDNN's dw post-op (takes_dw, s->dw).
 * Layout: weights are reordered once at plan time into the layout the primitive prefers.
 * The input is read in its producer's layout when a fast implementation takes it, else
 * reordered into temp[0]; a blocked input whose left/top padding oneDNN's AVX2 direct
 * kernel refuses is padded by us into temp[0] (pad_in). The output stays in oneDNN's
 * blocked layout when every consumer reads blocked (keep), else is reordered to plain
 * NCHW through temp[1]. Invariants: run allocates nothing; every primitive, memory and
 * buffer is the kernel's and freed by conv_destroy. CINFER_ONNX_NO_PREPAD turns pad_in
 * off; CINFER_ONNX_FAST_SKIP* (kern_conv_eligible) keep convs on the reference. */
#include <stdatomic.h>

#include "backends/onnx/kern_util.h"

/* One output-channel slice of a convolution (threads > 1, see conv_slices): its own
 * primitive, weights, memories and stream, so slices run concurrently on the pool. */
typedef struct {
  dnnl_primitive_t prim, sum_reorder, dst_reorder;
  dnnl_memory_t src_mem, w_mem, b_mem, dst_mem, dst_user, sum_user, dw_w_mem, dw_b_mem;
  dnnl_stream_t stream;
  void *w_data, *dw_w_data;
  float *dw_b_data;
  size_t src_off, dst_off, dst_bytes; /* floats, floats, bytes (image 0) */
  int64_t c0, c1;                     /* output channels [c0, c1) */
} conv_slice;

typedef struct {
  fast_kernel base;
  int nsl; /* > 0: the convolution runs as nsl slices on the pool */
  bool whole_ok; /* with slices: alone, the whole primitive runs instead (same bits, conv_prepare) */
  conv_slice *sl;
  char label[24]; /* "onednn/<slices>" when sliced */
  dnnl_primitive_t prim;
  dnnl_primitive_t src_reorder, dst_reorder, sum_reorder;
  dnnl_memory_t src_user, src_mem, w_mem, b_mem, dst_mem, dst_user, sum_user;
  /* Conv+PRelu: oneDNN 2.6 runs convolutions with a prelu post-op only in its reference
   * implementation, so PRelu is applied here to the conv's destination in its own layout
   * (prelu_blk: 1 plain NCHW, 8/16 nChw8c/nChw16c, -1 NHWC: oneDNN's AVX-512 brgemm
   * convolutions) with slopes padded to the block */
  int prelu_blk;
  float *prelu_slope;
  int64_t prelu_n, prelu_c, prelu_hw;
  dnnl_stream_t stream;
  void *w_data;
  dnnl_memory_t dw_w_mem, dw_b_mem; /* with a fused depthwise conv (s->dw) */
  void *dw_w_data;
  float *dw_b_data, *zero_bias;   /* zero_bias: the 1x1's, when it has none (see conv_prepare) */
  bool sum_copy; /* sum operand has dst's layout: memcpy */
  size_t dst_bytes;
  /* pad_in: the nChw8c input is copied into temp[0] with its padding made explicit
   * ([N][C/8][ph][pw][8], pt/pl zero rows/columns first) and the primitive runs unpadded
   * (see conv_prepare) */
  bool pad_in;
  int64_t pad_t, pad_l, ph, pw;
} conv_kernel;

static void slice_free(conv_slice *q) {
  dnnl_primitive_t prims[] = {q->prim, q->sum_reorder, q->dst_reorder};
  for (size_t i = 0; i < 3; i++) if (prims[i]) dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {q->src_mem, q->w_mem, q->b_mem, q->dst_mem, q->dst_user, q->sum_user, q->dw_w_mem, q->dw_b_mem};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++) if (mems[i]) dnnl_memory_destroy(mems[i]);
  if (q->stream) dnnl_stream_destroy(q->stream);
  free(q->w_data);
  free(q->dw_w_data);
  free(q->dw_b_data);
  memset(q, 0, sizeof *q);
}

static void conv_destroy(fast_kernel *fk) {
  conv_kernel *k = (conv_kernel *)fk;
  for (int i = 0; i < k->nsl; i++) slice_free(&k->sl[i]);
  free(k->sl);
  dnnl_primitive_t prims[] = {k->prim, k->src_reorder, k->dst_reorder, k->sum_reorder};
  for (size_t i = 0; i < 4; i++) if (prims[i]) dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {k->src_user, k->src_mem, k->w_mem,    k->b_mem,   k->dst_mem,
                          k->dst_user, k->sum_user, k->dw_w_mem, k->dw_b_mem};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++) if (mems[i]) dnnl_memory_destroy(mems[i]);
  free(k->dw_w_data);
  free(k->dw_b_data);
  free(k->zero_bias);
  free(k->prelu_slope);
  if (k->stream) dnnl_stream_destroy(k->stream);
  free(k->w_data);
  free(k);
}

static bool conv_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  (void)keep;
  return kern_conv_eligible(p, s);
}

/* the input and the fused Add operand; a small-K conv is kern_smallk's, which reads them
 * plain (it comes first in kern_families[]) */
static bool conv_reads_blocked(const onnx_plan *p, const plan_step *s, int j) {
  return kern_conv_eligible(p, s) && s->in[0]->ndim == 4 && (j == 0 || j == s->n_in) && !kern_small_k(p, s);
}

/* a primitive oneDNN runs as im2col + GEMM or in its reference implementation */
static bool impl_slow(dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
         !strncmp(impl, "ref", 3) || strstr(impl, "gemm");
}

/* A conv step's post-ops: sum (Conv+Add), its activation (not PRelu: applied after the
 * primitive), then with dw the fused depthwise 3x3 stride-2 conv and its activation. */
static dnnl_status_t conv_post_ops(dnnl_post_ops_t po, const plan_step *s, act_kind dw_act, bool dw) {
  dnnl_status_t r = dnnl_success;
  if (s->sum_id >= 0) r = dnnl_post_ops_append_sum(po, 1.0f);
  if (r == dnnl_success && s->has_fused && s->fused.act != ACT_NONE && s->fused.act != ACT_PRELU) {
    dnnl_alg_kind_t alg = dnnl_eltwise_relu;
    float a = 0, bb = 0;
    switch (s->fused.act) {
      case ACT_LEAKY: a = s->fused.a; break;
      case ACT_CLIP: alg = dnnl_eltwise_clip_v2; a = s->fused.a; bb = s->fused.b; break;
      case ACT_SIGMOID: alg = dnnl_eltwise_logistic; break;
      case ACT_TANH: alg = dnnl_eltwise_tanh; break;
      default: break;
    }
    r = dnnl_post_ops_append_eltwise(po, 1.0f, alg, a, bb);
  }
  if (r == dnnl_success && dw) r = dnnl_post_ops_append_dw(po, dnnl_f32, dnnl_f32, dnnl_f32, 3, 2, 1, 0, 0, NULL);
  if (r == dnnl_success && dw && dw_act == ACT_RELU) r = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0);
  return r;
}

/* s: 1x1 conv (stride 1, no pads, no fused Add, Relu or no activation), t: its consumer, a
 * depthwise 3x3 stride-2 pad-1 conv (Relu or none), both on the fast path, and oneDNN has
 * a jit implementation of the pair (a trial primitive descriptor). */
static bool conv_takes_dw(const onnx_plan *p, const plan_step *s, const plan_step *t) {
  if (!kern_conv_eligible(p, s) || !kern_conv_eligible(p, t) || s->in[0]->ndim != 4 || kern_small_k(p, s) ||
      ot_nbytes(s->out[0]) < ((size_t)2 << 20) || /* fits L2: no gain measured (fuse_dw in plan.c) */
      s->sum_id >= 0 || t->sum_id >= 0 || attr_i(s->node, "group", 1) != 1 || (s->has_fused && s->fused.act != ACT_RELU) ||
      (t->has_fused && t->fused.act != ACT_RELU))
    return false;
  const ot *w = s->in[1], *wt = t->in[1], *x = s->in[0];
  int64_t M = w->dims[0];
  conv_geom g, gt;
  if (!kern_geom(s->node, x, w->dims + 2, false, &g) || !kern_geom(t->node, s->out[0], wt->dims + 2, false, &gt))
    return false;
  if (g.k[0] != 1 || g.k[1] != 1 || g.stride[0] != 1 || g.stride[1] != 1 || g.pb[0] || g.pb[1] || g.pe[0] ||
      g.pe[1] || attr_i(t->node, "group", 1) != M || wt->ndim != 4 || wt->dims[0] != M || wt->dims[1] != 1 ||
      gt.k[0] != 3 || gt.k[1] != 3 || gt.stride[0] != 2 || gt.stride[1] != 2 || gt.dil[0] != 1 || gt.dil[1] != 1 ||
      gt.pb[0] != 1 || gt.pb[1] != 1 || gt.out[0] != (g.out[0] + 1) / 2 || gt.out[1] != (g.out[1] + 1) / 2)
    return false;
  dnnl_engine_t eng = kern_engine();
  if (!eng) return false;
  dnnl_dims_t xd = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]}, wd = {M, x->dims[1], 1, 1};
  dnnl_dims_t yd = {x->dims[0], M, g.out[0], g.out[1]}, one = {1, 1}, zero = {0, 0};
  dnnl_memory_desc_t xa, wa, ya;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  bool ok = dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success;
  ok = ok && conv_post_ops(po, s, t->has_fused ? t->fused.act : ACT_NONE, true) == dnnl_success &&
       dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
       dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &xa, &wa, NULL, &ya,
                                          one, zero, zero) == dnnl_success &&
       dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) == dnnl_success && !impl_slow(pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return ok;
}

/* X (nChw8c, [N][C/8][H][W][8]) into P ([N][C/8][ph][pw][8]) at row pt, column pl, zeros
 * around; input pixels past the padded extent (a negative end pad) are left out */
typedef struct {
  const float *X;
  float *P;
  int64_t H, W, pt, pl, ph, pw;
} pad_ctx;

static void pad_plane(void *vc, int64_t nc, int tid) {
  (void)tid;
  const pad_ctx *c = vc;
  const float *X = c->X;
  float *P = c->P;
  int64_t H = c->H, W = c->W, pt = c->pt, pl = c->pl, ph = c->ph, pw = c->pw;
  int64_t w0 = pl, w1 = pl + W < pw ? pl + W : pw; /* destination columns holding input */
  {
    for (int64_t y = 0; y < ph; y++) {
      float *d = P + ((size_t)nc * (size_t)ph + (size_t)y) * (size_t)pw * 8;
      int64_t h = y - pt;
      if (h < 0 || h >= H) {
        memset(d, 0, sizeof(float) * 8 * (size_t)pw);
        continue;
      }
      memset(d, 0, sizeof(float) * 8 * (size_t)w0);
      memcpy(d + 8 * w0, X + ((size_t)nc * (size_t)H + (size_t)h) * (size_t)W * 8, sizeof(float) * 8 * (size_t)(w1 - w0));
      memset(d + 8 * w1, 0, sizeof(float) * 8 * (size_t)(pw - w1));
    }
  }
}

static void pad_blocked(const float *X, float *P, int64_t N, int64_t C, int64_t H, int64_t W, int64_t pt,
                        int64_t pl, int64_t ph, int64_t pw) {
  pad_ctx c = {X, P, H, W, pt, pl, ph, pw};
  int64_t planes = N * (C / 8);
  if (opool_chunks(planes, (double)(planes * ph * pw * 8), OPOOL_MIN_ELEMS) > 1) opool_par(planes, pad_plane, &c);
  else for (int64_t i = 0; i < planes; i++) pad_plane(&c, i, 0);
}

/* to (a memory with its own layout) = src in layout `from`, by a one-off reorder (weights,
 * at plan time) */
static dnnl_status_t reorder_once(const dnnl_memory_desc_t *from, const void *src, dnnl_memory_t to,
                                  dnnl_stream_t stream) {
  const dnnl_memory_desc_t *to_md;
  dnnl_memory_t m;
  dnnl_primitive_t r;
  dnnl_status_t rs = dnnl_memory_get_memory_desc(to, &to_md);
  if (rs != dnnl_success) return rs;
  if ((rs = dnnl_memory_create(&m, from, kern_engine(), (void *)src)) != dnnl_success) return rs; /* only read */
  if ((rs = kern_make_reorder(from, to_md, &r)) == dnnl_success) {
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, to}};
    rs = dnnl_primitive_execute(r, stream, 2, a);
    if (rs == dnnl_success) rs = dnnl_stream_wait(stream);
    dnnl_primitive_destroy(r);
  }
  dnnl_memory_destroy(m);
  return rs;
}

/* y = y < 0 ? y * slope[c] : y over the conv destination, in its layout (prelu_blk);
 * same rule as act_apply_c (NaN stays NaN). One plane: image n, channel (plain) or channel
 * block cb (blocked). */
static void prelu_plane(const conv_kernel *k, float *y, int64_t n, int64_t c) {
  int64_t C = k->prelu_c, HW = k->prelu_hw, blk = k->prelu_blk;
  const float *sl = k->prelu_slope;
  if (blk == -1) { /* NHWC: c is a pixel, its C channels contiguous */
    float *p = y + (n * HW + c) * C;
    int64_t i = 0;
    for (; i + 8 <= C; i += 8) *(v8fu *)(p + i) = v8_prelu(*(const v8fu *)(p + i), *(const v8fu *)(sl + i));
    for (; i < C; i++) p[i] = p[i] < 0 ? p[i] * sl[i] : p[i];
    return;
  }
  if (blk == 1) {
    float *p = y + (n * C + c) * HW, a = sl[c];
    int64_t i = 0;
    for (; i + 8 <= HW; i += 8) *(v8fu *)(p + i) = v8_prelu(*(const v8fu *)(p + i), v8_splat(a));
    for (; i < HW; i++) p[i] = p[i] < 0 ? p[i] * a : p[i];
    return;
  }
  int64_t CB = (C + blk - 1) / blk, L = HW * blk / 8; /* blk is 8 or 16: whole vectors */
  float *p = y + (n * CB + c) * HW * blk;
  v8f a0 = *(const v8fu *)(sl + c * blk), a1 = blk == 16 ? *(const v8fu *)(sl + c * blk + 8) : a0;
  for (int64_t i = 0; i < L; i++) *(v8fu *)(p + 8 * i) = v8_prelu(*(const v8fu *)(p + 8 * i), i & 1 ? a1 : a0);
}

typedef struct {
  const conv_kernel *k;
  float *y;
  int64_t planes;
} prelu_ctx;

static void prelu_chunk(void *vc, int64_t i, int tid) {
  (void)tid;
  const prelu_ctx *c = vc;
  int64_t planes = c->planes;
  prelu_plane(c->k, c->y, i / planes, i % planes);
}

static void prelu_inplace(const conv_kernel *k, float *y) {
  int64_t blk = k->prelu_blk, planes = blk == -1 ? k->prelu_hw : blk == 1 ? k->prelu_c : (k->prelu_c + blk - 1) / blk;
  prelu_ctx c = {k, y, planes};
  int64_t n = k->prelu_n * planes;
  if (opool_chunks(n, (double)(k->prelu_n * k->prelu_c * k->prelu_hw), OPOOL_MIN_ELEMS) > 1) opool_par(n, prelu_chunk, &c);
  else for (int64_t i = 0; i < n; i++) prelu_chunk(&c, i, 0);
}

/* What conv_slices needs from conv_prepare: the full primitive's geometry and layouts. */
typedef struct {
  int64_t G, KH, KW;
  dnnl_dims_t strides, dil, pl, pr, yd, yf;
  dnnl_memory_desc_t xw, yg; /* the full primitive's source and destination */
  const dnnl_memory_desc_t *sum_l; /* the fused Add operand's layout (sum_reorder), or NULL */
  const float *b;                  /* bias, or NULL */
  bool full_slow;
  const char *impl;                /* the full primitive's implementation (oneDNN's name) */
} slice_geom;

/* pd's implementation is `impl` (oneDNN's name) */
static bool same_impl(dnnl_primitive_desc_t pd, const char *impl) {
  const char *i = NULL;
  return impl && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &i) == dnnl_success && i && !strcmp(i, impl);
}

/* the tag among nchw, nChw8c and nChw16c that md has for dims d, or 0 */
static dnnl_format_tag_t tag_of(const dnnl_memory_desc_t *md, const dnnl_dims_t d) {
  dnnl_memory_desc_t t;
  if (dnnl_memory_desc_init_by_tag(&t, 4, d, dnnl_f32, dnnl_nchw) == dnnl_success && dnnl_memory_desc_equal(md, &t))
    return dnnl_nchw;
  if (dnnl_memory_desc_init_by_tag(&t, 4, d, dnnl_f32, dnnl_aBcd8b) == dnnl_success && dnnl_memory_desc_equal(md, &t))
    return dnnl_aBcd8b;
  if (dnnl_memory_desc_init_by_tag(&t, 4, d, dnnl_f32, dnnl_aBcd16b) == dnnl_success && dnnl_memory_desc_equal(md, &t))
    return dnnl_aBcd16b;
  return (dnnl_format_tag_t)0;
}

/* channels per block of a tag_of answer (1 for nchw) */
static int64_t tag_block(dnnl_format_tag_t t) { return t == dnnl_aBcd16b ? 16 : t == dnnl_aBcd8b ? 8 : 1; }

/* Threads > 1, one image: the convolution is split by output channels (groups for a
 * grouped conv) into slices of whole channel blocks (8 or 16), each a primitive created for one
 * thread; in nChw8c, nChw16c and NCHW a block-aligned channel range of one image is contiguous, so a slice reads
 * and writes plain offsets of the step's buffers. Returns false (the full primitive runs,
 * on one thread) when the conv is too small to gain (OPOOL_MIN_MACS per slice), the
 * layouts are not nchw/nChw8c/nChw16c, or oneDNN answers a slice with a slower implementation. */
static bool conv_slices(onnx_plan *p, plan_step *s, conv_kernel *k, const slice_geom *q) {
  const ot *x = s->in[0], *w = s->in[1];
  /* CINFER_ONNX_SLICE_THREADS=<n>: slice as for n threads at any thread count (to measure
   * on one thread what slicing costs) */
  const char *force = getenv("CINFER_ONNX_SLICE_THREADS");
  int64_t T = force ? strtol(force, NULL, 10) : p->threads;
  if (T < 2 || T > 256 || x->dims[0] != 1 || getenv("CINFER_ONNX_NO_SLICE")) return false;
  int64_t M = w->dims[0], G = q->G, Mg = M / G, Cg = w->dims[1], KH = q->KH, KW = q->KW;
  dnnl_format_tag_t ytag = tag_of(&q->yg, q->yf), xtag = (dnnl_format_tag_t)0, stag = (dnnl_format_tag_t)0;
  if (!ytag) return false;
  dnnl_dims_t xs = {q->xw.dims[0], q->xw.dims[1], q->xw.dims[2], q->xw.dims[3]};
  if (G > 1 && !(xtag = tag_of(&q->xw, xs))) return false;
  if (q->sum_l && !(stag = tag_of(q->sum_l, q->yf))) return false;
  /* a unit: u groups (G > 1) or one block of yb channels (G == 1): whole blocks of the
   * destination (and of the source, G > 1) */
  int64_t u = 1, yb = tag_block(ytag) > 8 ? tag_block(ytag) : 8, xb = tag_block(xtag) > 8 ? tag_block(xtag) : 8;
  if (G > 1) {
    while (u <= G && ((u * Mg) % yb || (u * Cg) % xb || G % u)) u++;
    if (u > G) return false;
  }
  if (stag && tag_block(stag) > yb) return false;
  int64_t units = G > 1 ? G / u : (M + yb - 1) / yb, per_unit = G > 1 ? u * Mg : yb;
  double macs = (double)(q->yd[1] * q->yd[2] * q->yd[3]) * (double)(Cg * KH * KW);
  /* T slices, or 2T (a late worker's share taken by the others) when each still has 4x
   * the threshold's work; a slice costs its own primitive call and reads the whole input
   * (G == 1), so a conv below 2 x OPOOL_MIN_MACS stays whole. A grouped (depthwise)
   * slice reads only its own channels, and a depthwise MAC is memory-bound (~3x the time
   * of a dense one): its threshold is OPOOL_MIN_DW_MACS. */
  double min_macs = G > 1 ? OPOOL_MIN_DW_MACS : OPOOL_MIN_MACS;
  int64_t S = macs >= 2.0 * (double)T * 4 * min_macs ? 2 * T : T;
  if (S > units) S = units;
  if ((double)S * min_macs > macs) S = (int64_t)(macs / min_macs);
  if (S < 2) return false;
  dnnl_engine_t eng = kern_engine();
  conv_slice *sl = calloc((size_t)S, sizeof *sl);
  if (!sl) return false;
  bool ok = true, dw = s->dw.w != NULL;
  int64_t fhw = q->yf[2] * q->yf[3];
  for (int64_t i = 0; i < S && ok; i++) {
    conv_slice *c = &sl[i];
    int64_t u0 = units * i / S, u1 = units * (i + 1) / S;
    c->c0 = u0 * per_unit;
    c->c1 = u1 * per_unit < M ? u1 * per_unit : M;
    int64_t Mi = c->c1 - c->c0, Gi = G > 1 ? (u1 - u0) * u : 1;
    dnnl_memory_desc_t xm = q->xw, wa, wp, bm, ya, yexp;
    dnnl_dims_t yd = {1, Mi, q->yd[2], q->yd[3]}, yf = {1, Mi, q->yf[2], q->yf[3]}, bd = {Mi};
    c->dst_off = (size_t)(c->c0 * fhw);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_convolution_desc_t cd;
    if (G > 1) {
      dnnl_dims_t xd = {1, Gi * Cg, xs[2], xs[3]};
      c->src_off = (size_t)(u0 * u * Cg * xs[2] * xs[3]);
      dnnl_dims_t wd = {Gi, Mg, Cg, KH, KW};
      ok = dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_f32, xtag) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wa, 5, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wp, 5, wd, dnnl_f32, dnnl_goihw) == dnnl_success;
    } else {
      dnnl_dims_t wd = {Mi, Cg, KH, KW};
      ok = dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wp, 4, wd, dnnl_f32, dnnl_oihw) == dnnl_success;
    }
    ok = ok && dnnl_memory_desc_init_by_tag(&bm, 1, bd, dnnl_f32, dnnl_x) == dnnl_success &&
         dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, dw ? dnnl_format_tag_any : ytag) == dnnl_success &&
         dnnl_memory_desc_init_by_tag(&yexp, 4, yf, dnnl_f32, ytag) == dnnl_success &&
         dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success &&
         conv_post_ops(po, s, s->dw.act, dw) == dnnl_success && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
         dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &xm, &wa,
                                                    q->b ? &bm : NULL, &ya, q->strides, q->dil, q->pl,
                                                    q->pr) == dnnl_success &&
         dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    /* the slice must read and write exactly the layouts given, as fast as the whole */
    ok = ok && (q->full_slow || !impl_slow(pd)) &&
         dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), &xm) &&
         dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &yexp);
    if (ok && !same_impl(pd, q->impl)) k->whole_ok = false;
    const dnnl_memory_desc_t *ww = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    const dnnl_memory_desc_t *dww = ok && dw ? dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS) : NULL;
    const dnnl_memory_desc_t *dwb = ok && dw ? dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS) : NULL;
    ok = ok && ww && (!dw || (dww && dwb)) && dnnl_primitive_create(&c->prim, pd) == dnnl_success &&
         dnnl_stream_create(&c->stream, eng, dnnl_stream_default_flags) == dnnl_success &&
         (c->w_data = kern_alloc64(dnnl_memory_desc_get_size(ww))) != NULL &&
         dnnl_memory_create(&c->w_mem, ww, eng, c->w_data) == dnnl_success &&
         reorder_once(&wp, (const float *)w->data + c->c0 * Cg * KH * KW, c->w_mem, c->stream) == dnnl_success &&
         (!q->b || dnnl_memory_create(&c->b_mem, &bm, eng, (void *)(q->b + c->c0)) == dnnl_success) &&
         dnnl_memory_create(&c->src_mem, &xm, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&c->dst_mem, &yexp, eng, DNNL_MEMORY_NONE) == dnnl_success;
    c->dst_bytes = dnnl_memory_desc_get_size(&yexp);
    if (ok && dw) { /* the depthwise post-op's weights [Mi,1,1,3,3] and bias, from channel c0 */
      dnnl_dims_t gd = {Mi, 1, 1, 3, 3};
      dnnl_memory_desc_t g_plain;
      ok = dnnl_memory_desc_init_by_tag(&g_plain, 5, gd, dnnl_f32, dnnl_goihw) == dnnl_success &&
           (c->dw_w_data = kern_alloc64(dnnl_memory_desc_get_size(dww))) != NULL &&
           (c->dw_b_data = calloc((size_t)Mi + 16, sizeof(float))) != NULL &&
           dnnl_memory_create(&c->dw_w_mem, dww, eng, c->dw_w_data) == dnnl_success &&
           dnnl_memory_create(&c->dw_b_mem, dwb, eng, c->dw_b_data) == dnnl_success &&
           reorder_once(&g_plain, (const float *)s->dw.w->data + c->c0 * 9, c->dw_w_mem, c->stream) == dnnl_success;
      if (ok && s->dw.b) memcpy(c->dw_b_data, (const float *)s->dw.b->data + c->c0, sizeof(float) * (size_t)Mi);
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (ok && k->dst_reorder) { /* blocked slice -> its plain channels */
      dnnl_memory_desc_t yp;
      ok = dnnl_memory_desc_init_by_tag(&yp, 4, yf, dnnl_f32, dnnl_nchw) == dnnl_success &&
           dnnl_memory_create(&c->dst_user, &yp, eng, DNNL_MEMORY_NONE) == dnnl_success &&
           kern_make_reorder(&yexp, &yp, &c->dst_reorder) == dnnl_success;
    }
    if (ok && q->sum_l) { /* the Add operand's channels, in its layout, into the slice */
      dnnl_memory_desc_t sm;
      ok = dnnl_memory_desc_init_by_tag(&sm, 4, yf, dnnl_f32, stag) == dnnl_success &&
           dnnl_memory_create(&c->sum_user, &sm, eng, DNNL_MEMORY_NONE) == dnnl_success &&
           kern_make_reorder(&sm, &yexp, &c->sum_reorder) == dnnl_success;
    }
  }
  if (!ok) {
    for (int64_t i = 0; i < S; i++) slice_free(&sl[i]);
    free(sl);
    return false;
  }
  k->sl = sl;
  k->nsl = (int)S;
  snprintf(k->label, sizeof k->label, "onednn/%d", k->nsl);
  return true;
}

/* Threads > 1, one image, a conv whose source and destination are each one channel block
 * (C, M <= the block: RetinaFace's 16-channel context convs, UltraFace's first depthwise
 * conv on nChw16c), which conv_slices cannot split by channels: split by output rows
 * instead. In a one-block layout a row range is contiguous ([rows][W][B]), so each slice
 * is its own primitive on the input rows its output rows read (the slice's top and bottom
 * padding are the real padding where it reaches the image's edge, else none). Each output
 * pixel is computed from the same taps in the same order as by the whole primitive. Not
 * taken with a fused Add, PRelu, a fused depthwise conv, a reorder of the destination
 * (these work per channel range) or explicit padding (pad_in). */
static bool conv_row_slices(onnx_plan *p, plan_step *s, conv_kernel *k, const slice_geom *q) {
  const ot *x = s->in[0], *w = s->in[1];
  const char *force = getenv("CINFER_ONNX_SLICE_THREADS");
  int64_t T = force ? strtol(force, NULL, 10) : p->threads;
  if (T < 2 || T > 256 || x->dims[0] != 1 || x->ndim != 4 || getenv("CINFER_ONNX_NO_SLICE") || s->dw.w ||
      s->sum_id >= 0 || k->prelu_blk || k->dst_reorder || k->pad_in)
    return false;
  int64_t M = w->dims[0], G = q->G, Cg = w->dims[1], KH = q->KH, KW = q->KW;
  dnnl_dims_t xs = {q->xw.dims[0], q->xw.dims[1], q->xw.dims[2], q->xw.dims[3]};
  dnnl_format_tag_t ytag = tag_of(&q->yg, q->yf), xtag = tag_of(&q->xw, xs);
  int64_t B = tag_block(ytag);
  if (B < 8 || tag_block(xtag) != B || xs[1] > B || M > B || (G > 1 && (G != M || Cg != 1))) return false;
  int64_t OH = q->yd[2], IH = xs[2], IW = xs[3], OW = q->yd[3];
  double macs = (double)(q->yd[1] * OH * OW) * (double)(Cg * KH * KW);
  int64_t S = macs >= 2.0 * (double)T * 4 * OPOOL_MIN_MACS ? 2 * T : T;
  if (S > OH) S = OH;
  if ((double)S * OPOOL_MIN_MACS > macs) S = (int64_t)(macs / OPOOL_MIN_MACS);
  if (S < 2) return false;
  dnnl_engine_t eng = kern_engine();
  conv_slice *sl = calloc((size_t)S, sizeof *sl);
  if (!sl) return false;
  bool ok = true;
  for (int64_t i = 0; i < S && ok; i++) {
    conv_slice *c = &sl[i];
    int64_t o0 = OH * i / S, o1 = OH * (i + 1) / S;
    int64_t lo = o0 * q->strides[0] - q->pl[0], hi = (o1 - 1) * q->strides[0] - q->pl[0] + (KH - 1) * (q->dil[0] + 1) + 1;
    int64_t in0 = lo > 0 ? lo : 0, in1 = hi < IH ? hi : IH;
    if (in1 <= in0) { ok = false; break; }
    c->c0 = 0;
    c->c1 = M;
    c->src_off = (size_t)(in0 * IW * B);
    c->dst_off = (size_t)(o0 * OW * B);
    dnnl_dims_t xd = {1, xs[1], in1 - in0, IW}, yd = {1, M, o1 - o0, OW}, bd = {M};
    dnnl_dims_t pl = {in0 - lo, q->pl[1]}, pr = {hi - in1, q->pr[1]};
    dnnl_memory_desc_t xm, ym, wa, wp, bm;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_convolution_desc_t cd;
    if (G > 1) {
      dnnl_dims_t wd = {G, 1, 1, KH, KW};
      ok = dnnl_memory_desc_init_by_tag(&wa, 5, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wp, 5, wd, dnnl_f32, dnnl_goihw) == dnnl_success;
    } else {
      dnnl_dims_t wd = {M, Cg, KH, KW};
      ok = dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wp, 4, wd, dnnl_f32, dnnl_oihw) == dnnl_success;
    }
    ok = ok && dnnl_memory_desc_init_by_tag(&xm, 4, xd, dnnl_f32, xtag) == dnnl_success &&
         dnnl_memory_desc_init_by_tag(&ym, 4, yd, dnnl_f32, ytag) == dnnl_success &&
         dnnl_memory_desc_init_by_tag(&bm, 1, bd, dnnl_f32, dnnl_x) == dnnl_success &&
         dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success &&
         conv_post_ops(po, s, s->dw.act, false) == dnnl_success && dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
         dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &xm, &wa,
                                                    q->b ? &bm : NULL, &ym, q->strides, q->dil, pl, pr) == dnnl_success &&
         dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    ok = ok && (q->full_slow || !impl_slow(pd)) &&
         dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), &xm) &&
         dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), &ym);
    if (ok && !same_impl(pd, q->impl)) k->whole_ok = false;
    const dnnl_memory_desc_t *ww = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    ok = ok && ww && dnnl_primitive_create(&c->prim, pd) == dnnl_success &&
         dnnl_stream_create(&c->stream, eng, dnnl_stream_default_flags) == dnnl_success &&
         (c->w_data = kern_alloc64(dnnl_memory_desc_get_size(ww))) != NULL &&
         dnnl_memory_create(&c->w_mem, ww, eng, c->w_data) == dnnl_success &&
         reorder_once(&wp, w->data, c->w_mem, c->stream) == dnnl_success &&
         (!q->b || dnnl_memory_create(&c->b_mem, &bm, eng, (void *)q->b) == dnnl_success) &&
         dnnl_memory_create(&c->src_mem, &xm, eng, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&c->dst_mem, &ym, eng, DNNL_MEMORY_NONE) == dnnl_success;
    if (ok) c->dst_bytes = dnnl_memory_desc_get_size(&ym);
    if (pd) dnnl_primitive_desc_destroy(pd);
  }
  if (!ok) {
    for (int64_t i = 0; i < S; i++) slice_free(&sl[i]);
    free(sl);
    return false;
  }
  k->sl = sl;
  k->nsl = (int)S;
  snprintf(k->label, sizeof k->label, "onednn/%dr", k->nsl);
  return true;
}

static bool whole_same(const onnx_plan *p, plan_step *s, conv_kernel *k);

static cinfer_status *conv_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  cinfer_status *st = NULL;
  const ot *x = s->in[0], *w = s->in[1], *b = s->n_in > 2 ? s->in[2] : NULL;
  ot *y = s->out[0];
  conv_geom g;
  if ((st = conv_geom_make(s->node, x, w->dims + 2, false, &g))) return st;
  int64_t G = attr_i(s->node, "group", 1);
  conv_kernel *k = calloc(1, sizeof *k);
  if (!k) return kern_oom();
  /* oneDNN 2.6's 1x1 conv with a fused depthwise conv reads a bias even when it was
   * created without one (segfault): give it zeros */
  ot zb = {0};
  if (s->dw.w && !b) {
    if (!(k->zero_bias = calloc((size_t)w->dims[0] + 16, sizeof(float)))) {
      free(k);
      return kern_oom();
    }
    zb.data = k->zero_bias;
    b = &zb;
  }
  dnnl_engine_t eng = kern_engine();
  if (!eng) { conv_destroy(&k->base); return NULL; }
  /* 1-D convs run as 2-D with H = 1 */
  int sp = x->ndim - 2;
  dnnl_dims_t xd = {x->dims[0], x->dims[1], sp == 2 ? x->dims[2] : 1, x->dims[sp + 1]};
  /* yd: the convolution's own output; yf: the step's (the fused depthwise conv's, if any) */
  bool dw = s->dw.w != NULL;
  dnnl_dims_t yf = {y->dims[0], y->dims[1], sp == 2 ? y->dims[2] : 1, y->dims[sp + 1]};
  dnnl_dims_t yd = {yf[0], yf[1], yf[2], yf[3]};
  if (dw) memcpy(yd, s->dw.mid, sizeof yd);
  int64_t KH = sp == 2 ? w->dims[2] : 1, KW = w->dims[sp + 1];
  dnnl_dims_t strides = {sp == 2 ? g.stride[0] : 1, g.stride[sp - 1]};
  dnnl_dims_t dil = {sp == 2 ? g.dil[0] - 1 : 0, g.dil[sp - 1] - 1};
  dnnl_dims_t pl = {sp == 2 ? g.pb[0] : 0, g.pb[sp - 1]}, pr = {sp == 2 ? g.pe[0] : 0, g.pe[sp - 1]};
  /* oneDNN wants right padding consistent with the output size */
  for (int i = 0; i < 2; i++) {
    int64_t in_ = xd[2 + i], k_ = i == 0 ? KH : KW, o_ = yd[2 + i];
    pr[i] = (o_ - 1) * strides[i] + (k_ - 1) * (dil[i] + 1) + 1 - in_ - pl[i];
  }
  /* Before the first DN(): its error path releases these. */
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_memory_desc_t x_plain, x_any, w_plain, w_any, b_md, y_plain, y_any;
  DN(dnnl_memory_desc_init_by_tag(&x_plain, 4, xd, dnnl_f32, dnnl_nchw));
  DN(dnnl_memory_desc_init_by_tag(&x_any, 4, xd, dnnl_f32, dnnl_format_tag_any));
  DN(dnnl_memory_desc_init_by_tag(&y_plain, 4, yf, dnnl_f32, dnnl_nchw));
  DN(dnnl_memory_desc_init_by_tag(&y_any, 4, yd, dnnl_f32, dnnl_format_tag_any));
  if (G == 1) {
    dnnl_dims_t wd = {w->dims[0], w->dims[1], KH, KW};
    DN(dnnl_memory_desc_init_by_tag(&w_plain, 4, wd, dnnl_f32, dnnl_oihw));
    DN(dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any));
  } else {
    dnnl_dims_t wd = {G, w->dims[0] / G, w->dims[1], KH, KW};
    DN(dnnl_memory_desc_init_by_tag(&w_plain, 5, wd, dnnl_f32, dnnl_goihw));
    DN(dnnl_memory_desc_init_by_tag(&w_any, 5, wd, dnnl_f32, dnnl_format_tag_any));
  }
  dnnl_dims_t bd = {w->dims[0]};
  DN(dnnl_memory_desc_init_by_tag(&b_md, 1, bd, dnnl_f32, dnnl_x));
  const dnnl_memory_desc_t *x_have = p->layout[s->in_id[0]] ? p->layout[s->in_id[0]] : &x_plain;

  DN(dnnl_primitive_attr_create(&attr));
  DN(dnnl_post_ops_create(&po));
  DN(conv_post_ops(po, s, s->dw.act, dw));
  DN(dnnl_primitive_attr_set_post_ops(attr, po));
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  /* Tries in order, the first whose implementation is fast wins (the last is taken as
   * is): the producer's layout as is, else oneDNN's choice of source; on an AVX-512 host
   * each first with an nChw16c destination. oneDNN 2.6 answers a destination left to
   * it ("any") there with its NHWC kernels (brgconv, brdgmm_dw), or for a depthwise conv
   * on nChw16c with its reference: two reorders around the step, where its nChw16c
   * kernels (jit, jit_1x1, jit_dw) read and write the plan's layout directly. Fast: not
   * the reference, and on an AVX-512 host AVX-512 code (an nChw8c input from
   * kern_smallk or pool8c has only AVX2 kernels: reordering it costs less than the
   * wider vectors gain). */
  {
    bool b16 = kern_block() == 16 && !dw;
    dnnl_memory_desc_t y_16, x_16;
    if (b16 && (dnnl_memory_desc_init_by_tag(&y_16, 4, yd, dnnl_f32, dnnl_aBcd16b) != dnnl_success ||
                dnnl_memory_desc_init_by_tag(&x_16, 4, xd, dnnl_f32, dnnl_aBcd16b) != dnnl_success))
      b16 = false;
    const dnnl_memory_desc_t *tries[5][2];
    int nt = 0;
    if (p->layout[s->in_id[0]]) {
      if (b16) { tries[nt][0] = x_have; tries[nt++][1] = &y_16; }
      tries[nt][0] = x_have; tries[nt++][1] = &y_any;
    }
    /* a grouped conv whose source is left to oneDNN gets NHWC (brdgmm_dw) even with an
     * nChw16c destination: ask for nChw16c on both sides first */
    if (b16 && G > 1) { tries[nt][0] = &x_16; tries[nt++][1] = &y_16; }
    if (b16) { tries[nt][0] = &x_any; tries[nt++][1] = &y_16; }
    tries[nt][0] = &x_any; tries[nt++][1] = &y_any;
    for (int t = 0; t < nt && !pd; t++) {
      DN(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                    tries[t][0], &w_any, b ? &b_md : NULL, tries[t][1], strides,
                                                    dil, pl, pr));
      if (t == nt - 1) {
        DN(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
        break;
      }
      if (dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) != dnnl_success) {
        pd = NULL;
        continue;
      }
      const char *impl = NULL;
      if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
          !strncmp(impl, "ref", 3) || (kern_block() == 16 && !strstr(impl, "avx512"))) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
      }
    }
  }
  /* oneDNN 2.6's AVX2 direct convolution refuses a left padding wider than its 3-pixel
   * register block (UltraFace's 3x3 dilation-5 convs, pads 5) and falls back to im2col +
   * GEMM on plain NCHW with reorders around it. With the nChw8c input padded by us into a
   * temporary, the direct convolution runs unpadded. */
  if (p->layout[s->in_id[0]] && sp == 2 && (pl[0] > 0 || pl[1] > 0) && impl_slow(pd) &&
      kern_is_nchw8c(x_have, x) && xd[1] % 8 == 0 && !getenv("CINFER_ONNX_NO_PREPAD")) {
    int64_t ph = (yd[2] - 1) * strides[0] + (KH - 1) * (dil[0] + 1) + 1;
    int64_t pw = (yd[3] - 1) * strides[1] + (KW - 1) * (dil[1] + 1) + 1;
    dnnl_dims_t xpd = {xd[0], xd[1], ph, pw}, zero = {0, 0};
    dnnl_memory_desc_t xp;
    dnnl_primitive_desc_t pd2 = NULL;
    if (dnnl_memory_desc_init_by_tag(&xp, 4, xpd, dnnl_f32, dnnl_aBcd8b) == dnnl_success &&
        dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &xp,
                                                   &w_any, b ? &b_md : NULL, &y_any, strides, dil, zero,
                                                   zero) == dnnl_success &&
        dnnl_primitive_desc_create(&pd2, &cd, attr, eng, NULL) == dnnl_success && !impl_slow(pd2) &&
        dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(pd2, dnnl_query_src_md, 0), &xp)) {
      dnnl_primitive_desc_destroy(pd);
      pd = pd2;
      k->pad_in = true;
      k->pad_t = pl[0];
      k->pad_l = pl[1];
      k->ph = ph;
      k->pw = pw;
    } else if (pd2) {
      dnnl_primitive_desc_destroy(pd2);
    }
  }
  dnnl_post_ops_destroy(po);
  po = NULL;
  dnnl_primitive_attr_destroy(attr);
  attr = NULL;
  const dnnl_memory_desc_t *x_want = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *w_want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *y_got = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  dnnl_memory_desc_t dww = {0}, dwb = {0};
  if (dw) {
    const dnnl_memory_desc_t *a = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
    const dnnl_memory_desc_t *b2 = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS);
    if (!a || !b2) {
      dnnl_primitive_desc_destroy(pd);
      st = NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN gave no depthwise post-op weights layout");
      goto fail;
    }
    dww = *a;
    dwb = *b2;
  }
  bool slow_full = impl_slow(pd);
  char impl_full[128] = "";
  {
    const char *i = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &i) == dnnl_success && i)
      snprintf(impl_full, sizeof impl_full, "%s", i);
  }
  dnnl_status_t pr_ = dnnl_primitive_create(&k->prim, pd);
  dnnl_memory_desc_t xw = *x_want, ww = *w_want, yg = *y_got;
  dnnl_primitive_desc_destroy(pd);
  DN(pr_);
  DN(dnnl_stream_create(&k->stream, eng, dnnl_stream_default_flags));
  /* weights: reorder once */
  size_t wbytes = dnnl_memory_desc_get_size(&ww);
  k->w_data = kern_alloc64(wbytes);
  if (!k->w_data) { st = kern_oom(); goto fail; }
  DN(dnnl_memory_create(&k->w_mem, &ww, eng, k->w_data));
  DN(reorder_once(&w_plain, w->data, k->w_mem, k->stream));
  if (b) DN(dnnl_memory_create(&k->b_mem, &b_md, eng, b->data));
  if (dw) { /* depthwise weights [C,1,3,3] (goihw, groups C) into the post-op's layout, once */
    int64_t C = yd[1];
    dnnl_dims_t gd = {C, 1, 1, 3, 3};
    dnnl_memory_desc_t g_plain;
    DN(dnnl_memory_desc_init_by_tag(&g_plain, 5, gd, dnnl_f32, dnnl_goihw));
    size_t nb = dnnl_memory_desc_get_size(&dww);
    k->dw_w_data = kern_alloc64(nb);
    k->dw_b_data = calloc((size_t)C + 16, sizeof(float));
    if (!k->dw_w_data || !k->dw_b_data) { st = kern_oom(); goto fail; }
    if (s->dw.b) memcpy(k->dw_b_data, s->dw.b->data, sizeof(float) * (size_t)C);
    DN(dnnl_memory_create(&k->dw_w_mem, &dww, eng, k->dw_w_data));
    DN(dnnl_memory_create(&k->dw_b_mem, &dwb, eng, k->dw_b_data));
    DN(reorder_once(&g_plain, s->dw.w->data, k->dw_w_mem, k->stream));
  }
  /* src */
  DN(dnnl_memory_create(&k->src_mem, &xw, eng, DNNL_MEMORY_NONE));
  if (k->pad_in) {
    s->temp_bytes[0] = dnnl_memory_desc_get_size(&xw);
  } else if (!dnnl_memory_desc_equal(x_have, &xw)) {
    DN(dnnl_memory_create(&k->src_user, x_have, eng, DNNL_MEMORY_NONE));
    DN(kern_make_reorder(x_have, &xw, &k->src_reorder));
    s->temp_bytes[0] = dnnl_memory_desc_get_size(&xw);
  }
  /* dst */
  k->dst_bytes = dnnl_memory_desc_get_size(&yg);
  DN(dnnl_memory_create(&k->dst_mem, &yg, eng, DNNL_MEMORY_NONE));
  bool blocked = !dnnl_memory_desc_equal(&yg, &y_plain);
  /* the consumers of a kept value read plain, nChw8c and nChw16c only (kern.h): any
   * other choice of oneDNN's (nhwc, ...) is reordered into nChw<kern_block()>c */
  dnnl_memory_desc_t y_blk;
  if (blocked && keep && !tag_of(&yg, yf)) {
    DN(dnnl_memory_desc_init_by_tag(&y_blk, 4, yf, dnnl_f32, kern_block() == 16 ? dnnl_aBcd16b : dnnl_aBcd8b));
    dnnl_memory_desc_t *l = malloc(sizeof *l);
    if (!l) { st = kern_oom(); goto fail; }
    *l = y_blk;
    p->layout[s->out_id[0]] = l;
    p->bytes[s->out_id[0]] = dnnl_memory_desc_get_size(&y_blk);
    DN(dnnl_memory_create(&k->dst_user, &y_blk, eng, DNNL_MEMORY_NONE));
    DN(kern_make_reorder(&yg, &y_blk, &k->dst_reorder));
    s->temp_bytes[1] = k->dst_bytes;
  } else if (blocked && keep) {
    dnnl_memory_desc_t *l = malloc(sizeof *l);
    if (!l) { st = kern_oom(); goto fail; }
    *l = yg;
    p->layout[s->out_id[0]] = l;
    p->bytes[s->out_id[0]] = k->dst_bytes;
  } else if (blocked) {
    DN(dnnl_memory_create(&k->dst_user, &y_plain, eng, DNNL_MEMORY_NONE));
    DN(kern_make_reorder(&yg, &y_plain, &k->dst_reorder));
    s->temp_bytes[1] = k->dst_bytes;
  }
  if (s->has_fused && s->fused.act == ACT_PRELU) {
    /* the layout PRelu sees: the primitive's destination (before any reorder to plain) */
    dnnl_memory_desc_t b8, b16, cl;
    DN(dnnl_memory_desc_init_by_tag(&b8, 4, yd, dnnl_f32, dnnl_aBcd8b));
    DN(dnnl_memory_desc_init_by_tag(&b16, 4, yd, dnnl_f32, dnnl_aBcd16b));
    DN(dnnl_memory_desc_init_by_tag(&cl, 4, yd, dnnl_f32, dnnl_nhwc));
    k->prelu_blk = dnnl_memory_desc_equal(&yg, &y_plain) ? 1 : dnnl_memory_desc_equal(&yg, &b8) ? 8
                   : dnnl_memory_desc_equal(&yg, &b16) ? 16 : dnnl_memory_desc_equal(&yg, &cl) ? -1 : 0;
    if (!k->prelu_blk) {
      st = NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN chose a destination layout PRelu does not handle");
      goto fail;
    }
    int64_t C = yd[1], Cp = (C + 15) / 16 * 16;
    k->prelu_slope = calloc((size_t)Cp, sizeof(float));
    if (!k->prelu_slope) { st = kern_oom(); goto fail; }
    for (int64_t c = 0; c < C; c++) k->prelu_slope[c] = s->fused.slope[s->fused.slope_n == 1 ? 0 : c];
    k->prelu_n = yd[0];
    k->prelu_c = C;
    k->prelu_hw = yd[2] * yd[3];
  }
  if (s->sum_id >= 0) {
    const dnnl_memory_desc_t *sl = p->layout[s->sum_id] ? p->layout[s->sum_id] : &y_plain;
    if (dnnl_memory_desc_equal(sl, &yg)) k->sum_copy = true;
    else {
      DN(dnnl_memory_create(&k->sum_user, sl, eng, DNNL_MEMORY_NONE));
      DN(kern_make_reorder(sl, &yg, &k->sum_reorder));
    }
  }
  {
    slice_geom q = {.G = G, .KH = KH, .KW = KW, .xw = xw, .yg = yg, .b = b ? b->data : NULL};
    memcpy(q.strides, strides, sizeof strides);
    memcpy(q.dil, dil, sizeof dil);
    if (!k->pad_in) {
      memcpy(q.pl, pl, sizeof pl);
      memcpy(q.pr, pr, sizeof pr);
    }
    memcpy(q.yd, yd, sizeof yd);
    memcpy(q.yf, yf, sizeof yf);
    if (s->sum_id >= 0 && !k->sum_copy) q.sum_l = p->layout[s->sum_id] ? p->layout[s->sum_id] : &y_plain;
    q.full_slow = slow_full;
    q.impl = impl_full[0] ? impl_full : NULL;
    /* Alone (opool_cur_solo) the whole primitive runs in place of the slices when it gives
     * the same bits: the same oneDNN jit implementation as every slice (a direct kernel
     * sums each output over the input channels and taps in one order whatever its output
     * channel count or rows), not a GEMM or reference one (whose blocking depends on the
     * shape: DenseNet's outputs moved with the mode); it saves the slices' extra input
     * reads and calls (RetinaFace alone: ~5% CPU). Else the slices run in order. */
    k->whole_ok = !slow_full && !getenv("CINFER_ONNX_ALONE_SLICES");
    if (!conv_slices(p, s, k, &q)) (void)conv_row_slices(p, s, k, &q);
    if (k->nsl && k->whole_ok) k->whole_ok = whole_same(p, s, k);
    if (k->nsl && !k->whole_ok) { /* the slices do all the work: the whole primitive and its weights go */
      dnnl_primitive_destroy(k->prim);
      dnnl_memory_destroy(k->w_mem);
      free(k->w_data);
      k->prim = NULL;
      k->w_mem = NULL;
      k->w_data = NULL;
    }
  }
  *out = &k->base;
  return NULL;
fail:
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  conv_destroy(&k->base);
  return st;
}


#define RUN(call)                                                                     \
  do {                                                                                \
    if ((call) != dnnl_success)                                                       \
      return NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN execution failed: %s", #call); \
  } while (0)

typedef struct {
  const conv_kernel *k;
  const plan_step *s;
  float *src, *dst; /* after the whole-tensor padding / reorder; before the reorder to plain */
  atomic_bool failed;
} slice_run_ctx;

/* one slice: the Add operand's channels into it, the primitive, PRelu, the reorder of its
 * channels to plain */
static void slice_run(void *vc, int64_t i, int tid) {
  (void)tid;
  slice_run_ctx *c = vc;
  const conv_kernel *k = c->k;
  const plan_step *s = c->s;
  const conv_slice *q = &k->sl[i];
  float *dst = c->dst + q->dst_off;
  bool ok = dnnl_memory_set_data_handle(q->src_mem, c->src + q->src_off) == dnnl_success &&
            dnnl_memory_set_data_handle(q->dst_mem, dst) == dnnl_success;
  if (ok && s->sum_id >= 0) {
    const float *sum = (const float *)s->fused.sum->data + q->dst_off;
    if (k->sum_copy) {
      memcpy(dst, sum, q->dst_bytes);
    } else {
      dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, q->sum_user}, {DNNL_ARG_TO, q->dst_mem}};
      ok = dnnl_memory_set_data_handle(q->sum_user, (void *)sum) == dnnl_success &&
           dnnl_primitive_execute(q->sum_reorder, q->stream, 2, a) == dnnl_success;
    }
  }
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, q->src_mem}, {DNNL_ARG_WEIGHTS, q->w_mem}, {DNNL_ARG_DST, q->dst_mem}};
  int na = 3;
  if (q->b_mem) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, q->b_mem};
  if (q->dw_w_mem) {
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, q->dw_w_mem};
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, q->dw_b_mem};
  }
  ok = ok && dnnl_primitive_execute(q->prim, q->stream, na, args) == dnnl_success;
  if (ok && k->prelu_blk) { /* N = 1; prelu_blk is 1, 8 or 16 (conv_slices takes nchw / nChw8c / nChw16c) */
    ok = dnnl_stream_wait(q->stream) == dnnl_success;
    int64_t b = k->prelu_blk;
    for (int64_t pl = q->c0 / b; ok && pl < (q->c1 + b - 1) / b; pl++) prelu_plane(k, c->dst, 0, pl);
  }
  if (ok && q->dst_reorder) {
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, q->dst_mem}, {DNNL_ARG_TO, q->dst_user}};
    ok = dnnl_memory_set_data_handle(q->dst_user, (float *)s->out[0]->data + q->dst_off) == dnnl_success &&
         dnnl_primitive_execute(q->dst_reorder, q->stream, 2, a) == dnnl_success;
  }
  ok = ok && dnnl_stream_wait(q->stream) == dnnl_success;
  if (!ok) atomic_store(&c->failed, true);
}

enum { RUN_AUTO, RUN_WHOLE, RUN_SLICES };

/* the step; how: RUN_AUTO (slices, or alone the whole primitive when whole_ok), or forced
 * (whole_same) */
static cinfer_status *conv_exec(conv_kernel *k, plan_step *s, int how) {
  void *src = s->in[0]->data;
  if (k->pad_in) {
    const ot *x = s->in[0];
    pad_blocked(src, s->temp[0], x->dims[0], x->dims[1], x->dims[2], x->dims[3], k->pad_t, k->pad_l, k->ph, k->pw);
    RUN(dnnl_memory_set_data_handle(k->src_mem, s->temp[0]));
  } else if (k->src_reorder) {
    RUN(dnnl_memory_set_data_handle(k->src_user, src));
    RUN(dnnl_memory_set_data_handle(k->src_mem, s->temp[0]));
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, k->src_user}, {DNNL_ARG_TO, k->src_mem}};
    RUN(dnnl_primitive_execute(k->src_reorder, k->stream, 2, a));
  } else {
    RUN(dnnl_memory_set_data_handle(k->src_mem, src));
  }
  bool slices = how == RUN_SLICES || (how == RUN_AUTO && k->nsl && !(k->whole_ok && opool_cur_solo()));
  if (slices) { /* alone: the slices in order, or the whole primitive (whole_ok) */
    if (k->src_reorder) RUN(dnnl_stream_wait(k->stream));
    slice_run_ctx c = {k, s, k->pad_in || k->src_reorder ? s->temp[0] : src,
                       k->dst_reorder ? s->temp[1] : s->out[0]->data, 0};
    opool_par(k->nsl, slice_run, &c);
    if (atomic_load(&c.failed)) return NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN execution of a slice failed");
    return NULL;
  }
  void *dst = k->dst_reorder ? s->temp[1] : s->out[0]->data;
  RUN(dnnl_memory_set_data_handle(k->dst_mem, dst));
  if (s->sum_id >= 0) {
    if (k->sum_copy) memcpy(dst, s->fused.sum->data, k->dst_bytes);
    else {
      RUN(dnnl_memory_set_data_handle(k->sum_user, s->fused.sum->data));
      dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, k->sum_user}, {DNNL_ARG_TO, k->dst_mem}};
      RUN(dnnl_primitive_execute(k->sum_reorder, k->stream, 2, a));
    }
  }
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, k->src_mem}, {DNNL_ARG_WEIGHTS, k->w_mem}, {DNNL_ARG_DST, k->dst_mem}};
  int na = 3;
  if (k->b_mem) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, k->b_mem};
  if (k->dw_w_mem) {
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, k->dw_w_mem};
    args[na++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, k->dw_b_mem};
  }
  RUN(dnnl_primitive_execute(k->prim, k->stream, na, args));
  if (k->prelu_blk) {
    RUN(dnnl_stream_wait(k->stream));
    prelu_inplace(k, dst);
  }
  if (k->dst_reorder) {
    RUN(dnnl_memory_set_data_handle(k->dst_user, s->out[0]->data));
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, k->dst_mem}, {DNNL_ARG_TO, k->dst_user}};
    RUN(dnnl_primitive_execute(k->dst_reorder, k->stream, 2, a));
  }
  RUN(dnnl_stream_wait(k->stream));
  return NULL;
}

static cinfer_status *conv_run(fast_kernel *fk, plan_step *s, int threads) {
  (void)threads;
  return conv_exec((conv_kernel *)fk, s, RUN_AUTO);
}

/* Whether the whole primitive gives the same bits as the slices (whole_ok): both run once,
 * at plan time, on the same pseudo-random input (and Add operand) in the step's layouts,
 * and their outputs are compared. oneDNN's implementation names do not tell: on AVX-512
 * its jit_1x1 kernel summed DenseNet's and MobileFaceNet's 1x1 convs differently for the
 * whole and the slices, RetinaFace's and UltraFace's the same. */
static bool whole_same(const onnx_plan *p, plan_step *s, conv_kernel *k) {
  if (s->n_in > 3) return false;
  size_t xb = p->bytes[s->in_id[0]] ? p->bytes[s->in_id[0]] : ot_nbytes(s->in[0]);
  size_t yb = !s->n_merged && p->bytes[s->out_id[0]] ? p->bytes[s->out_id[0]] : ot_nbytes(s->out[0]);
  size_t sb = s->sum_id >= 0 ? (p->bytes[s->sum_id] ? p->bytes[s->sum_id] : ot_nbytes(s->fused.sum)) : 0;
  float *X = kern_alloc64(xb + 64), *Y = kern_alloc64(yb + 64), *Y1 = kern_alloc64(yb + 64);
  float *S = sb ? kern_alloc64(sb + 64) : NULL;
  void *t0 = s->temp_bytes[0] ? kern_alloc64(s->temp_bytes[0]) : NULL, *t1 = s->temp_bytes[1] ? kern_alloc64(s->temp_bytes[1]) : NULL;
  bool same = X && Y && Y1 && (!sb || S) && (!s->temp_bytes[0] || t0) && (!s->temp_bytes[1] || t1);
  if (same) {
    uint32_t seed = 12345;
    for (size_t i = 0; i < xb / 4; i++) X[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;
    for (size_t i = 0; i < sb / 4; i++) S[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;
    ot xo = *s->in[0], yo = *s->out[0], so = {0};
    xo.data = X;
    yo.data = Y;
    if (sb) {
      so = *s->fused.sum;
      so.data = S;
    }
    ot *in[3] = {&xo, s->n_in > 1 ? s->in[1] : NULL, s->n_in > 2 ? s->in[2] : NULL}, *out[1] = {&yo};
    plan_step t = *s;
    t.in = in;
    t.out = out;
    t.n_out = 1;
    t.temp[0] = t0;
    t.temp[1] = t1;
    if (sb) t.fused.sum = &so;
    opool *cur = opool_set_current(NULL); /* on this thread, the workers left alone */
    cinfer_status *st = conv_exec(k, &t, RUN_WHOLE);
    if (!st) {
      memcpy(Y1, Y, yb);
      st = conv_exec(k, &t, RUN_SLICES);
    }
    opool_set_current(cur);
    same = !st && !memcmp(Y, Y1, yb);
    cinfer_status_free(st);
  }
  free(X);
  free(Y);
  free(Y1);
  free(S);
  free(t0);
  free(t1);
  return same;
}

static const char *conv_label(const fast_kernel *fk) {
  const conv_kernel *k = (const conv_kernel *)fk;
  return k->nsl ? k->label : "onednn";
}

const kern_family kern_onednn_conv = {
    .name = "onednn", .can_take = conv_can_take, .prepare = conv_prepare, .run = conv_run, .destroy = conv_destroy,
    .reads_blocked = conv_reads_blocked, .takes_dw = conv_takes_dw, .label = conv_label};
