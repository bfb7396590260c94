/* dnnl_ops.c: oneDNN fast paths (C API, oneDNN 2.6, OpenMP runtime: the thread count is
 * set per run with omp_set_num_threads in plan_run).
 *
 * Conv (1-D/2-D, grouped, depthwise, dilated, strided, padded) with fused post-ops
 * (sum for Conv+Add, then relu/leaky/clip/sigmoid/tanh; PRelu applied by us after the
 * primitive). Weights are reordered once at plan time into the layout the primitive
 * prefers. Activations stay in oneDNN's blocked layout between consecutive convolutions
 * (plan->layout[v]); a value goes back to plain NCHW as soon as any consumer is not a
 * oneDNN convolution. First layers (small K) run on our own float kernel summed in ONNX
 * Runtime's order (see kdir_*). oneDNN pooling. Concat/BatchNormalization/Relu on blocked
 * layouts are blocked_ops.c's (kind 3), dispatched from here. Every path here has a
 * reference in ops.c/ops_nn.c and is compared with it in tests/unit/onnx. No allocation
 * in fast_run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>
#include <pthread.h>

#include <dnnl.h>

#include "backends/onnx/ops_util.h"
#include "backends/onnx/plan.h"

struct fast_kernel {
  int kind;               /* 0 oneDNN convolution, 1 small-K float conv, 2 oneDNN pooling,
                             3 blocked-layout Concat/BN/Relu (blk), 4 float Softmax over a
                             short innermost axis (sm_outer rows of sm_d), 5 float Exp,
                             6 MaxPool/AveragePool on nChw8c (bpool_run), 7 Winograd
                             F(2x2,3x3) conv on nChw8c (wino_run; w_data: U, bias, slopes) */
  int64_t sm_outer, sm_d;
  bool pool_max, pool_incl; /* kind 6 (geometry in g) */
  blk_kernel *blk;        /* kind 3 */
  conv_geom g;            /* kinds 1, 6, 7 */
  dnnl_primitive_t prim;
  dnnl_primitive_t src_reorder, dst_reorder, sum_reorder;
  dnnl_memory_t src_user, src_mem, w_mem, b_mem, dst_mem, dst_user, sum_user;
  /* Conv+PRelu: oneDNN 2.6 runs convolutions with a prelu post-op only in its reference
   * implementation, so PRelu is applied here to the conv's destination in its own layout
   * (prelu_blk: 1 plain NCHW, 8/16 nChw8c/nChw16c) with slopes padded to the block */
  int prelu_blk;
  float *prelu_slope;
  int64_t prelu_n, prelu_c, prelu_hw;
  dnnl_stream_t stream;
  void *w_data;
  dnnl_memory_t dw_w_mem, dw_b_mem; /* kind 0 with a fused depthwise conv (s->dw) */
  void *dw_w_data;
  float *dw_b_data, *zero_bias;   /* zero_bias: the 1x1's, when it has none (see conv_prepare) */
  bool sum_copy; /* sum operand has dst's layout: memcpy */
  bool blocked_out; /* kind 1: writes nChw8c (w_data: [M/8][K][8] weights, bias, slopes) */
  size_t dst_bytes;
  /* kind 0 with pad_in: the nChw8c input is copied into temp[0] with its padding made
   * explicit ([N][C/8][ph][pw][8], pt/pl zero rows/columns first) and the primitive runs
   * unpadded (see conv_prepare) */
  bool pad_in;
  int64_t pad_t, pad_l, ph, pw;
};

static dnnl_engine_t engine(void) {
  static dnnl_engine_t eng;
  static int once;
  if (!__atomic_load_n(&once, __ATOMIC_ACQUIRE)) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (!once) {
      if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) eng = NULL;
      __atomic_store_n(&once, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
  }
  return eng;
}

void fast_layout_free(void *layout) { free(layout); }

const char *fast_kernel_label(const fast_kernel *k) { return k->kind == 7 ? "winograd" : "onednn"; }

void fast_destroy(fast_kernel *k) {
  if (!k) return;
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
  blk_destroy(k->blk);
  free(k);
}

static bool conv_eligible(const onnx_plan *p, const plan_step *s) {
  if (p->no_fast || strcmp(s->node->op_type, "Conv")) return false;
  const ot *x = s->in[0], *w = s->in[1];
  if (x->dtype != CINFER_TYPE_FP32 || (x->ndim != 4 && x->ndim != 3)) return false;
  if (!p->is_static[s->in_id[1]] || w->dtype != CINFER_TYPE_FP32) return false;
  if (s->n_in > 2 && s->in[2] && !p->is_static[s->in_id[2]]) return false;
  if (getenv("CINFER_ONNX_FAST_SKIP") && strstr(s->node->name, getenv("CINFER_ONNX_FAST_SKIP"))) return false;
  if (getenv("CINFER_ONNX_FAST_SKIP_DW") && attr_i(s->node, "group", 1) > 1) return false;
  if (getenv("CINFER_ONNX_FAST_SKIP_PW") && attr_i(s->node, "group", 1) == 1) return false;
  return ot_numel(s->out[0]) > 0;
}

static bool small_k(const onnx_plan *p, const plan_step *s) {
  const ot *w = s->in[1];
  return s->in[0]->ndim == 4 && attr_i(s->node, "group", 1) == 1 && !p->layout[s->in_id[0]] &&
         w->dims[1] <= 4 && w->dims[1] * w->dims[2] * w->dims[3] <= 32 && !getenv("CINFER_ONNX_NO_K64");
}

static bool pool_geom(const onnx_plan *p, const plan_step *s, conv_geom *g, dnnl_dims_t pr);

bool fast_takes_pre(const onnx_plan *p, const plan_step *s) { return conv_eligible(p, s) && small_k(p, s); }

static bool impl_slow(dnnl_primitive_desc_t pd);
static dnnl_status_t conv_post_ops(dnnl_post_ops_t po, const plan_step *s, act_kind dw_act, bool dw);

/* s: 1x1 conv (stride 1, no pads, no fused Add, Relu or no activation), t: its consumer, a
 * depthwise 3x3 stride-2 pad-1 conv (Relu or none), both on the fast path, and oneDNN has
 * a jit implementation of the pair (a trial primitive descriptor). */
bool fast_takes_dw(const onnx_plan *p, const plan_step *s, const plan_step *t) {
  if (!conv_eligible(p, s) || !conv_eligible(p, t) || s->in[0]->ndim != 4 || small_k(p, s) || s->sum_id >= 0 ||
      t->sum_id >= 0 || attr_i(s->node, "group", 1) != 1 || (s->has_fused && s->fused.act != ACT_RELU) ||
      (t->has_fused && t->fused.act != ACT_RELU))
    return false;
  const ot *w = s->in[1], *wt = t->in[1], *x = s->in[0];
  int64_t M = w->dims[0];
  conv_geom g, gt;
  cinfer_status *st = conv_geom_make(s->node, x, w->dims + 2, false, &g);
  if (st) { cinfer_status_free(st); return false; }
  if ((st = conv_geom_make(t->node, s->out[0], wt->dims + 2, false, &gt))) { cinfer_status_free(st); return false; }
  if (g.k[0] != 1 || g.k[1] != 1 || g.stride[0] != 1 || g.stride[1] != 1 || g.pb[0] || g.pb[1] || g.pe[0] ||
      g.pe[1] || attr_i(t->node, "group", 1) != M || wt->ndim != 4 || wt->dims[0] != M || wt->dims[1] != 1 ||
      gt.k[0] != 3 || gt.k[1] != 3 || gt.stride[0] != 2 || gt.stride[1] != 2 || gt.dil[0] != 1 || gt.dil[1] != 1 ||
      gt.pb[0] != 1 || gt.pb[1] != 1 || gt.out[0] != (g.out[0] + 1) / 2 || gt.out[1] != (g.out[1] + 1) / 2)
    return false;
  dnnl_engine_t eng = engine();
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

bool fast_can_take_blocked(const onnx_plan *p, const plan_step *s, int j) {
  conv_geom g;
  dnnl_dims_t pr;
  if (j == 0 && pool_geom(p, s, &g, pr)) return true;
  if (blk_can_take(p, s, j)) return true;
  /* the small-K kernel reads its input and its fused Add operand in plain NCHW */
  return conv_eligible(p, s) && s->in[0]->ndim == 4 && (j == 0 || j == s->n_in) && !small_k(p, s);
}

static dnnl_status_t make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                  dnnl_primitive_t *out) {
  dnnl_primitive_desc_t pd;
  dnnl_status_t r = dnnl_reorder_primitive_desc_create(&pd, from, engine(), to, engine(), NULL);
  if (r != dnnl_success) return r;
  r = dnnl_primitive_create(out, pd);
  dnnl_primitive_desc_destroy(pd);
  return r;
}

#define DN(call)                                                                      \
  do {                                                                                \
    dnnl_status_t r_ = (call);                                                        \
    if (r_ != dnnl_success) {                                                         \
      st = NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN %s failed (status %d)", #call, \
                    (int)r_);                                                         \
      goto fail;                                                                      \
    }                                                                                 \
  } while (0)

static void prelu_inplace(const fast_kernel *k, float *y, int threads);

/* a primitive oneDNN runs as im2col + GEMM or in its reference implementation */
static bool impl_slow(dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
         !strncmp(impl, "ref", 3) || strstr(impl, "gemm");
}

/* X (nChw8c, [N][C/8][H][W][8]) into P ([N][C/8][ph][pw][8]) at row pt, column pl, zeros
 * around; input pixels past the padded extent (a negative end pad) are left out */
static void pad_blocked(const float *X, float *P, int64_t N, int64_t C, int64_t H, int64_t W, int64_t pt,
                        int64_t pl, int64_t ph, int64_t pw, int threads) {
  int64_t CB = C / 8;
  int64_t w0 = pl, w1 = pl + W < pw ? pl + W : pw; /* destination columns holding input */
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static) if (threads > 1)
  for (int64_t nc = 0; nc < N * CB; nc++)
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

/* to (a memory with its own layout) = src in layout `from`, by a one-off reorder (weights,
 * at plan time) */
static dnnl_status_t reorder_once(const dnnl_memory_desc_t *from, const void *src, dnnl_memory_t to,
                                  dnnl_stream_t stream) {
  const dnnl_memory_desc_t *to_md;
  dnnl_memory_t m;
  dnnl_primitive_t r;
  dnnl_status_t rs = dnnl_memory_get_memory_desc(to, &to_md);
  if (rs != dnnl_success) return rs;
  if ((rs = dnnl_memory_create(&m, from, engine(), (void *)src)) != dnnl_success) return rs; /* only read */
  if ((rs = make_reorder(from, to_md, &r)) == dnnl_success) {
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, to}};
    rs = dnnl_primitive_execute(r, stream, 2, a);
    if (rs == dnnl_success) rs = dnnl_stream_wait(stream);
    dnnl_primitive_destroy(r);
  }
  dnnl_memory_destroy(m);
  return rs;
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

static cinfer_status *conv_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  cinfer_status *st = NULL;
  const ot *x = s->in[0], *w = s->in[1], *b = s->n_in > 2 ? s->in[2] : NULL;
  ot *y = s->out[0];
  conv_geom g;
  if ((st = conv_geom_make(s->node, x, w->dims + 2, false, &g))) return st;
  int64_t G = attr_i(s->node, "group", 1);
  fast_kernel *k = calloc(1, sizeof *k);
  if (!k) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
  /* oneDNN 2.6's 1x1 conv with a fused depthwise conv reads a bias even when it was
   * created without one (segfault): give it zeros */
  ot zb = {0};
  if (s->dw.w && !b) {
    if (!(k->zero_bias = calloc((size_t)w->dims[0] + 16, sizeof(float)))) {
      free(k);
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
    }
    zb.data = k->zero_bias;
    b = &zb;
  }
  dnnl_engine_t eng = engine();
  if (!eng) { free(k); return NULL; }
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
  /* prefer consuming the producer's layout as is */
  if (p->layout[s->in_id[0]]) {
    DN(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                  x_have, &w_any, b ? &b_md : NULL, &y_any, strides, dil, pl, pr));
    if (dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) != dnnl_success) pd = NULL;
    const char *impl = NULL;
    if (pd && (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
               !impl || !strncmp(impl, "ref", 3))) {
      dnnl_primitive_desc_destroy(pd); /* only the slow reference takes this layout */
      pd = NULL;
    }
  }
  if (!pd) {
    DN(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                  &x_any, &w_any, b ? &b_md : NULL, &y_any, strides, dil, pl, pr));
    DN(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
  }
  /* oneDNN 2.6's AVX2 direct convolution refuses a left padding wider than its 3-pixel
   * register block (UltraFace's 3x3 dilation-5 convs, pads 5) and falls back to im2col +
   * GEMM on plain NCHW with reorders around it. With the nChw8c input padded by us into a
   * temporary, the direct convolution runs unpadded. */
  dnnl_memory_desc_t x8;
  if (p->layout[s->in_id[0]] && sp == 2 && (pl[0] > 0 || pl[1] > 0) && impl_slow(pd) &&
      dnnl_memory_desc_init_by_tag(&x8, 4, xd, dnnl_f32, dnnl_aBcd8b) == dnnl_success &&
      dnnl_memory_desc_equal(x_have, &x8) && xd[1] % 8 == 0 && !getenv("CINFER_ONNX_NO_PREPAD")) {
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
  dnnl_status_t pr_ = dnnl_primitive_create(&k->prim, pd);
  dnnl_memory_desc_t xw = *x_want, ww = *w_want, yg = *y_got;
  dnnl_primitive_desc_destroy(pd);
  DN(pr_);
  DN(dnnl_stream_create(&k->stream, eng, dnnl_stream_default_flags));
  /* weights: reorder once */
  size_t wbytes = dnnl_memory_desc_get_size(&ww);
  k->w_data = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
  if (!k->w_data) { st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory"); goto fail; }
  DN(dnnl_memory_create(&k->w_mem, &ww, eng, k->w_data));
  DN(reorder_once(&w_plain, w->data, k->w_mem, k->stream));
  if (b) DN(dnnl_memory_create(&k->b_mem, &b_md, eng, b->data));
  if (dw) { /* depthwise weights [C,1,3,3] (goihw, groups C) into the post-op's layout, once */
    int64_t C = yd[1];
    dnnl_dims_t gd = {C, 1, 1, 3, 3};
    dnnl_memory_desc_t g_plain;
    DN(dnnl_memory_desc_init_by_tag(&g_plain, 5, gd, dnnl_f32, dnnl_goihw));
    size_t nb = dnnl_memory_desc_get_size(&dww);
    k->dw_w_data = aligned_alloc(64, (nb + 63) & ~(size_t)63);
    k->dw_b_data = calloc((size_t)C + 16, sizeof(float));
    if (!k->dw_w_data || !k->dw_b_data) { st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory"); goto fail; }
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
    DN(make_reorder(x_have, &xw, &k->src_reorder));
    s->temp_bytes[0] = dnnl_memory_desc_get_size(&xw);
  }
  /* dst */
  k->dst_bytes = dnnl_memory_desc_get_size(&yg);
  DN(dnnl_memory_create(&k->dst_mem, &yg, eng, DNNL_MEMORY_NONE));
  bool blocked = !dnnl_memory_desc_equal(&yg, &y_plain);
  if (blocked && keep) {
    dnnl_memory_desc_t *l = malloc(sizeof *l);
    if (!l) { st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory"); goto fail; }
    *l = yg;
    p->layout[s->out_id[0]] = l;
    p->bytes[s->out_id[0]] = k->dst_bytes;
  } else if (blocked) {
    DN(dnnl_memory_create(&k->dst_user, &y_plain, eng, DNNL_MEMORY_NONE));
    DN(make_reorder(&yg, &y_plain, &k->dst_reorder));
    s->temp_bytes[1] = k->dst_bytes;
  }
  if (s->has_fused && s->fused.act == ACT_PRELU) {
    /* the layout PRelu sees: the primitive's destination (before any reorder to plain) */
    dnnl_memory_desc_t b8, b16;
    DN(dnnl_memory_desc_init_by_tag(&b8, 4, yd, dnnl_f32, dnnl_aBcd8b));
    DN(dnnl_memory_desc_init_by_tag(&b16, 4, yd, dnnl_f32, dnnl_aBcd16b));
    k->prelu_blk = dnnl_memory_desc_equal(&yg, &y_plain) ? 1 : dnnl_memory_desc_equal(&yg, &b8) ? 8
                   : dnnl_memory_desc_equal(&yg, &b16) ? 16 : 0;
    if (!k->prelu_blk) {
      st = NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN chose a destination layout PRelu does not handle");
      goto fail;
    }
    int64_t C = yd[1], Cp = (C + 15) / 16 * 16;
    k->prelu_slope = calloc((size_t)Cp, sizeof(float));
    if (!k->prelu_slope) { st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory"); goto fail; }
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
      DN(make_reorder(sl, &yg, &k->sum_reorder));
    }
  }
  *out = k;
  return NULL;
fail:
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  fast_destroy(k);
  return st;
}

/* Small-K convolutions (Cin <= 4 and Cin*KH*KW <= 32: the first layer of vision models)
 * read raw pixels, and their rounding error is amplified by the whole network (RetinaFace's
 * landmark outputs move by ~4e-5 when this layer is summed in oneDNN's order). They are
 * computed in float in ONNX Runtime's order, so they round like the ORT runs that produced
 * the models' reference outputs:
 *   M % 8 == 0 (MLAS NCHWc "NCHW input" algorithm): per input channel c a fused-multiply-add
 *     chain over (kh, kw) from 0, channels summed in order (s0 + s1) + s2 ..., then + bias;
 *   otherwise (MLAS im2col + SGEMM): one FMA chain over k = (c, kh, kw) from 0, then + bias;
 * padded taps contribute exact zeros. Plain output: vectorised over 16 output pixels of a
 * row (gathered per thread into an im2col strip P[k][ow]), 4 output channels per pass.
 * nChw8c output (M % 8 == 0): kdir_row_direct, broadcasting taps from padded input rows.
 * Element-wise ops with constants in front (step_pre) are applied as the input is read.
 * ref_conv is the reference in tests/unit/onnx/test_onnx_kernels.c (test_conv_shapes), and
 * test_pre_exact checks the fused input ops bit for bit against separate ones. */

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

/* width of the per-thread im2col strip: both row kernels read whole 16- or 6-pixel groups */
static int64_t kdir_owp(int64_t OW) { return ((OW + 5) / 6 * 6 + 15) / 16 * 16; }

static int64_t kdir_rw(const conv_geom *g);

/* Declares step s's output nChw8c with C channels (the plan owns the descriptor; C % 8 ==
 * 0, so its size is the plain one); false when out of memory */
static bool out_nchw8c(onnx_plan *p, plan_step *s, int64_t C) {
  const ot *y = s->out[0];
  dnnl_dims_t yd = {y->dims[0], C, y->dims[2], y->dims[3]};
  dnnl_memory_desc_t *l = malloc(sizeof *l);
  if (!l || dnnl_memory_desc_init_by_tag(l, 4, yd, dnnl_f32, dnnl_aBcd8b) != dnnl_success) {
    free(l);
    return false;
  }
  p->layout[s->out_id[0]] = l;
  p->bytes[s->out_id[0]] = dnnl_memory_desc_get_size(l);
  return true;
}

/* per-thread scratch of the small-K conv: the im2col strip, or (blocked output) the padded
 * input rows and a tail of 2 blocks x 6 pixels; 64-byte multiples */
static size_t k64_temp_per_thread(const conv_geom *g, int64_t K, bool blocked) {
  size_t n = blocked ? (size_t)(g->C * g->k[0] * kdir_rw(g) + 96) : (size_t)(K * kdir_owp(g->out[1]));
  return (n * sizeof(float) + 63) & ~(size_t)63;
}

/* keep: every consumer takes oneDNN's blocked layout; with M % 8 == 0 (the MLAS NCHWc
 * order) and no fused Add the output is then written in nChw8c directly (RetinaFace's
 * first layer: saves a 6.5 MB reorder per image) */
static cinfer_status *k64_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  fast_kernel *k = calloc(1, sizeof *k);
  if (!k) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
  cinfer_status *st = conv_geom_make(s->node, s->in[0], s->in[1]->dims + 2, false, &k->g);
  if (st) { free(k); return st; }
  k->kind = 1;
  int64_t K = s->in[1]->dims[1] * s->in[1]->dims[2] * s->in[1]->dims[3], M = s->in[1]->dims[0];
  if (keep && M % 8 == 0 && s->sum_id < 0 && !getenv("CINFER_ONNX_PLAIN")) {
    /* weights [M/8][K][8], bias [M], PRelu slopes [M] */
    size_t wbytes = sizeof(float) * (size_t)((K + 2) * M);
    float *wb = aligned_alloc(64, (wbytes + 63) & ~(size_t)63); /* size: a multiple of 64 */
    if (!wb || !out_nchw8c(p, s, M)) {
      free(wb);
      free(k);
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
    }
    const float *W = s->in[1]->data, *B = s->n_in > 2 && s->in[2] ? s->in[2]->data : NULL;
    for (int64_t m = 0; m < M; m++) {
      for (int64_t kk = 0; kk < K; kk++) wb[((m / 8) * K + kk) * 8 + m % 8] = W[m * K + kk];
      wb[K * M + m] = B ? B[m] : 0.0f;
      wb[(K + 1) * M + m] = s->has_fused && s->fused.act == ACT_PRELU
                                ? s->fused.slope[s->fused.slope_n == 1 ? 0 : m] : 0.0f;
    }
    k->w_data = wb;
    k->blocked_out = true;
  }
  s->temp_bytes[0] = (size_t)p->threads * k64_temp_per_thread(&k->g, K, k->blocked_out);
  *out = k;
  return NULL;
}

/* tanh on 8 lanes: Eigen's float rational approximation (odd degree-13 numerator, even
 * degree-6 denominator, input clamped to [-9, 9]; also what MLAS uses), within a few ulp of
 * tanhf; NaN stays NaN. Replaces one libm tanhf call per element (ssrnet's Conv+Tanh spent
 * 40% of its time in libm). */
static inline v8f v8_tanh(v8f x) {
  v8i nan = (v8i)(x != x);
  v8f lo = v8_splat(-9.0f), hi = v8_splat(9.0f);
  x = (v8f)(((v8i)lo & (v8i)(x < lo)) | ((v8i)x & ~(v8i)(x < lo)));
  x = (v8f)(((v8i)hi & (v8i)(x > hi)) | ((v8i)x & ~(v8i)(x > hi)));
  v8f x2 = x * x;
  v8f p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * x;
  v8f q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  v8f r = p / q;
  return (v8f)((nan & (v8i)x) | (~nan & (v8i)r));
}

/* Stores 8 lanes (n valid) of channel row y: + sum operand, activation. */
static inline void kdir_store(v8f v, float *y, const float *sr, int64_t n, const onnx_fused *f,
                              int64_t m) {
  if (n == 8 && (!f || f->act == ACT_NONE || f->act == ACT_RELU || f->act == ACT_PRELU ||
                 f->act == ACT_TANH || f->act == ACT_SIGMOID)) {
    if (sr) v = v + *(const v8fu *)sr;
    if (f && f->act == ACT_RELU) v = (v8f)((v8i)v & (v8i)(v > 0)); /* v > 0 ? v : 0, NaN -> 0 */
    if (f && f->act == ACT_TANH) v = v8_tanh(v);
    if (f && f->act == ACT_SIGMOID) v = v8_tanh(v * 0.5f) * 0.5f + 0.5f;
    if (f && f->act == ACT_PRELU) { /* v < 0 ? v * slope : v */
      v8i neg = (v8i)(v < 0);
      v8f sv = v * f->slope[f->slope_n == 1 ? 0 : m];
      v = (v8f)(((v8i)sv & neg) | ((v8i)v & ~neg));
    }
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
      else if (per_c) kdir_block(1, true, C, T, K, Wm, P, OWp, ow, o); /* not reached: M % 8 == 0 */
      else {
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

/* activation on 8 output channels (a channel block) */
static inline v8f v8_act(v8f v, const onnx_fused *f, const float *slope8) {
  switch (f->act) {
    case ACT_RELU: return (v8f)((v8i)v & (v8i)(v > 0));
    case ACT_PRELU: {
      v8i neg = (v8i)(v < 0);
      return (v8f)(((v8i)(v * *(const v8fu *)slope8) & neg) | ((v8i)v & ~neg));
    }
    case ACT_TANH: return v8_tanh(v);
    case ACT_SIGMOID: return v8_tanh(v * 0.5f) * 0.5f + 0.5f;
    default: {
      float r[8];
      __builtin_memcpy(r, &v, sizeof r);
      for (int i = 0; i < 8; i++) r[i] = act_apply(f, r[i]);
      __builtin_memcpy(&v, r, sizeof r);
      return v;
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

static void kdir_rows(const conv_geom *g, const float *X, int64_t n, int64_t oh, float *R, int64_t RW,
                      const step_pre *pre) {
  int64_t C = g->C, KH = g->k[0], IH = g->in[0], IW = g->in[1], pl = g->pb[1];
  for (int64_t c = 0; c < C; c++)
    for (int64_t kh = 0; kh < KH; kh++) {
      float *r = R + (c * KH + kh) * RW;
      int64_t ih = oh * g->stride[0] - g->pb[0] + kh * g->dil[0];
      if (ih < 0 || ih >= IH) { memset(r, 0, sizeof(float) * (size_t)RW); continue; }
      memset(r, 0, sizeof(float) * (size_t)pl);
      pre_copy(pre, c, X + ((n * C + c) * IH + ih) * IW, r + pl, IW);
      memset(r + pl + IW, 0, sizeof(float) * (size_t)(RW - pl - IW));
    }
}

/* The FMA chains of one input channel: taps [k0, k1) (off[kk]: the tap's offset in R from
 * the group's first pixel), 6 pixels sw apart, NB blocks (w: block 0's [K][8] weights). */
static inline __attribute__((always_inline)) void kdir_chain(int NB, int SW, int64_t sw, const float *w, int64_t K,
                                                             const float *x0, const int64_t *off, int64_t k0,
                                                             int64_t k1, v8f acc[12]) {
  if (SW) sw = SW;
  for (int q = 0; q < 6 * NB; q++) acc[q] = (v8f){0};
  for (int64_t kk = k0; kk < k1; kk++) {
    v8f w0 = *(const v8fu *)(w + kk * 8), w1 = NB == 2 ? *(const v8fu *)(w + (K + kk) * 8) : w0;
    const float *x = x0 + off[kk];
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
                                                                   const float *w, int64_t K, const float *R,
                                                                   const int64_t *off, int64_t ow, float *y[2],
                                                                   const float *bias, const float *slope,
                                                                   const onnx_fused *f) {
  int64_t C = g->C, T = g->k[0] * g->k[1], sw = g->stride[1];
  const float *x0 = R + ow * sw;
  for (int64_t c = 0; c < C; c++) {
    v8f acc[12];
    kdir_chain(NB, SW, sw, w, K, x0, off, c * T, (c + 1) * T, acc);
    bool last = c == C - 1;
    for (int b = 0; b < NB; b++) {
      v8f bv = *(const v8fu *)(bias + b * 8);
#pragma GCC unroll 6
      for (int q = 0; q < 6; q++) {
        v8f v = acc[6 * b + q];
        if (c) v = *(const v8fu *)(y[b] + q * 8) + v;
        if (last) {
          v = v + bv;
          if (ACT == 1) v = (v8f)((v8i)v & (v8i)(v > 0)); /* v > 0 ? v : 0, NaN -> 0 */
          if (ACT == 2) v = v8_act(v, f, slope + b * 8);
        }
        *(v8fu *)(y[b] + q * 8) = v;
      }
    }
  }
}

static void kdir_row_direct(const conv_geom *g, const float *wb, int64_t M, const float *R, int64_t RW,
                            int64_t OW, float *Yb, size_t bstride, const onnx_fused *f, float *scratch) {
  int64_t K = g->C * g->k[0] * g->k[1], KW = g->k[1], sw = g->stride[1];
  const float *bias = wb + K * M, *slope = bias + M;
  float *tail = scratch;
  int64_t off[32]; /* K <= 32 (small_k) */
  for (int64_t kk = 0; kk < K; kk++) off[kk] = (kk / KW) * RW + (kk % KW) * g->dil[1];
  int act = !f ? 0 : f->act == ACT_RELU ? 1 : 2;
  for (int64_t cb = 0; cb < M / 8;) {
    int nb = M / 8 - cb >= 2 ? 2 : 1;
    const float *w = wb + cb * K * 8, *bs = bias + cb * 8, *sl = slope + cb * 8;
    for (int64_t ow = 0; ow < OW; ow += 6) {
      int64_t np = OW - ow < 6 ? OW - ow : 6;
      float *y[2];
      for (int b = 0; b < 2; b++) y[b] = np == 6 ? Yb + (size_t)(cb + b) * bstride + (size_t)ow * 8 : tail + b * 48;
      if (nb == 2 && sw == 2 && act == 1) kdir_direct_pass(2, 2, 1, g, w, K, R, off, ow, y, bs, sl, f);
      else if (nb == 2 && sw == 1 && act == 1) kdir_direct_pass(2, 1, 1, g, w, K, R, off, ow, y, bs, sl, f);
      else if (nb == 2 && act == 0) kdir_direct_pass(2, 0, 0, g, w, K, R, off, ow, y, bs, sl, f);
      else if (nb == 2) kdir_direct_pass(2, 0, 2, g, w, K, R, off, ow, y, bs, sl, f);
      else if (act == 0) kdir_direct_pass(1, 0, 0, g, w, K, R, off, ow, y, bs, sl, f);
      else kdir_direct_pass(1, 0, 2, g, w, K, R, off, ow, y, bs, sl, f);
      if (np < 6)
        for (int b = 0; b < nb; b++)
          memcpy(Yb + (size_t)(cb + b) * bstride + (size_t)ow * 8, tail + b * 48, sizeof(float) * 8 * (size_t)np);
    }
    cb += nb;
  }
}

static void k64_run(const fast_kernel *k, plan_step *s, int threads) {
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
#pragma omp parallel num_threads(threads)
  {
    float *P = (float *)((char *)s->temp[0] + per * (size_t)omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t row = 0; row < g->N * OH; row++) {
      int64_t n = row / OH, oh = row % OH;
      if (blk) {
        kdir_rows(g, X, n, oh, P, RW, &s->pre);
        kdir_row_direct(g, k->w_data, M, P, RW, OW, Y + (size_t)((n * M * OH + oh * 8) * OW), (size_t)(OH * OW * 8), f,
                        P + g->C * g->k[0] * RW);
        continue;
      }
      kdir_strip(g, X, n, oh, P, OWp, &s->pre);
      size_t base = (size_t)((n * M * OH + oh) * OW);
      kdir_row(g, W, B, P, OWp, M, OW, Y + base, (size_t)(OH * OW), S ? S + base : NULL, f);
    }
  }
}

/* MaxPool / AveragePool (2-D, float, plain NCHW in and out). Average pooling whose
 * ceil_mode window reaches past the declared end padding stays on the reference kernel
 * (oneDNN would count the extra cells). */
/* Whether the pooling fast path takes step s, and its geometry (right pads as oneDNN
 * wants them). The single source of that decision: fast_can_take_blocked relies on it. */
static bool pool_geom(const onnx_plan *p, const plan_step *s, conv_geom *g, dnnl_dims_t pr) {
  if (p->no_fast || (strcmp(s->node->op_type, "MaxPool") && strcmp(s->node->op_type, "AveragePool")) ||
      getenv("CINFER_ONNX_NO_FAST_POOL"))
    return false;
  const ot *x = s->in[0], *y = s->out[0];
  bool maxp = !strcmp(s->node->op_type, "MaxPool");
  if (x->ndim != 4 || x->dtype != CINFER_TYPE_FP32 || ot_numel(y) == 0 || (s->n_out > 1 && s->out[1]))
    return false;
  cinfer_status *st = conv_geom_make(s->node, x, NULL, true, g);
  if (st) { cinfer_status_free(st); return false; } /* the reference kernel reports it */
  for (int i = 0; i < 2; i++) {
    pr[i] = (y->dims[2 + i] - 1) * g->stride[i] + (g->k[i] - 1) * g->dil[i] + 1 - x->dims[2 + i] - g->pb[i];
    if (!maxp && pr[i] != g->pe[i]) return false;
    if (pr[i] < 0) pr[i] = 0;
  }
  return true;
}

/* keep: every consumer takes the blocked layout: the output stays nChw8c. A blocked input
 * (from a conv) is read as is (or reordered from another blocking). */
static cinfer_status *pool_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  cinfer_status *st = NULL;
  const ot *x = s->in[0], *y = s->out[0];
  bool maxp = !strcmp(s->node->op_type, "MaxPool");
  conv_geom g;
  dnnl_dims_t pr;
  if (!pool_geom(p, s, &g, pr)) return NULL;
  dnnl_dims_t xd = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
  dnnl_dims_t yd = {y->dims[0], y->dims[1], y->dims[2], y->dims[3]};
  dnnl_dims_t strides = {g.stride[0], g.stride[1]}, kern = {g.k[0], g.k[1]};
  dnnl_dims_t dil = {g.dil[0] - 1, g.dil[1] - 1}, pl = {g.pb[0], g.pb[1]};
  bool incl = attr_i(s->node, "count_include_pad", 0) != 0;
  fast_kernel *k = calloc(1, sizeof *k);
  if (!k) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
  k->kind = 2;
  dnnl_memory_desc_t x8;
  if (keep && !getenv("CINFER_ONNX_PLAIN") && !getenv("CINFER_ONNX_NO_BPOOL") && p->layout[s->in_id[0]] &&
      x->dims[1] % 8 == 0 && g.sp == 2 && dnnl_memory_desc_init_by_tag(&x8, 4, xd, dnnl_f32, dnnl_aBcd8b) == dnnl_success &&
      dnnl_memory_desc_equal(p->layout[s->in_id[0]], &x8)) {
    /* nChw8c in and out: our kernel (oneDNN 2.6's AVX2 pooling took 1.18 ms on DenseNet's
     * 3x3 stride-2 MaxPool, ONNX Runtime 0.58) */
    if (!out_nchw8c(p, s, y->dims[1])) {
      free(k);
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
    }
    k->kind = 6;
    k->g = g;
    k->pool_max = maxp;
    k->pool_incl = incl;
    *out = k;
    return NULL;
  }
  dnnl_memory_desc_t x_md, y_md;
  dnnl_pooling_v2_desc_t pdsc;
  dnnl_primitive_desc_t pd = NULL;
  /* oneDNN's jit pooling wants the blocked layout (its NCHW pooling is a slow generic
   * one): reorder in, pool, reorder out */
  dnnl_memory_desc_t xb_md, yb_md;
  DN(dnnl_memory_desc_init_by_tag(&x_md, 4, xd, dnnl_f32, dnnl_nchw));
  DN(dnnl_memory_desc_init_by_tag(&y_md, 4, yd, dnnl_f32, dnnl_nchw));
  DN(dnnl_memory_desc_init_by_tag(&xb_md, 4, xd, dnnl_f32, dnnl_aBcd8b));
  DN(dnnl_memory_desc_init_by_tag(&yb_md, 4, yd, dnnl_f32, dnnl_aBcd8b));
  DN(dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_inference,
                                       maxp ? dnnl_pooling_max : incl ? dnnl_pooling_avg_include_padding
                                                                       : dnnl_pooling_avg_exclude_padding,
                                       &xb_md, &yb_md, strides, kern, dil, pl, pr));
  DN(dnnl_primitive_desc_create(&pd, &pdsc, NULL, engine(), NULL));
  dnnl_status_t r = dnnl_primitive_create(&k->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  DN(r);
  DN(dnnl_stream_create(&k->stream, engine(), dnnl_stream_default_flags));
  const dnnl_memory_desc_t *x_have = p->layout[s->in_id[0]] ? p->layout[s->in_id[0]] : &x_md;
  DN(dnnl_memory_create(&k->src_mem, &xb_md, engine(), DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&k->dst_mem, &yb_md, engine(), DNNL_MEMORY_NONE));
  if (!dnnl_memory_desc_equal(x_have, &xb_md)) {
    DN(dnnl_memory_create(&k->src_user, x_have, engine(), DNNL_MEMORY_NONE));
    DN(make_reorder(x_have, &xb_md, &k->src_reorder));
    s->temp_bytes[0] = dnnl_memory_desc_get_size(&xb_md);
  }
  if (keep && !getenv("CINFER_ONNX_PLAIN")) {
    dnnl_memory_desc_t *l = malloc(sizeof *l);
    if (!l) { st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory"); goto fail; }
    *l = yb_md;
    p->layout[s->out_id[0]] = l;
    p->bytes[s->out_id[0]] = dnnl_memory_desc_get_size(&yb_md);
  } else {
    DN(dnnl_memory_create(&k->dst_user, &y_md, engine(), DNNL_MEMORY_NONE));
    DN(make_reorder(&yb_md, &y_md, &k->dst_reorder));
    s->temp_bytes[1] = dnnl_memory_desc_get_size(&yb_md);
  }
  *out = k;
  return NULL;
fail:
  fast_destroy(k);
  return st;
}

static cinfer_status *pool_run(fast_kernel *k, plan_step *s) {
  void *src = k->src_reorder ? s->temp[0] : s->in[0]->data, *dst = k->dst_reorder ? s->temp[1] : s->out[0]->data;
  if ((k->src_user && dnnl_memory_set_data_handle(k->src_user, s->in[0]->data) != dnnl_success) ||
      (k->dst_user && dnnl_memory_set_data_handle(k->dst_user, s->out[0]->data) != dnnl_success) ||
      dnnl_memory_set_data_handle(k->src_mem, src) != dnnl_success ||
      dnnl_memory_set_data_handle(k->dst_mem, dst) != dnnl_success)
    return NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN memory handle");
  dnnl_exec_arg_t in_[] = {{DNNL_ARG_FROM, k->src_user}, {DNNL_ARG_TO, k->src_mem}};
  dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, k->src_mem}, {DNNL_ARG_DST, k->dst_mem}};
  dnnl_exec_arg_t out_[] = {{DNNL_ARG_FROM, k->dst_mem}, {DNNL_ARG_TO, k->dst_user}};
  if ((k->src_reorder && dnnl_primitive_execute(k->src_reorder, k->stream, 2, in_) != dnnl_success) ||
      dnnl_primitive_execute(k->prim, k->stream, 2, a) != dnnl_success ||
      (k->dst_reorder && dnnl_primitive_execute(k->dst_reorder, k->stream, 2, out_) != dnnl_success) ||
      dnnl_stream_wait(k->stream) != dnnl_success)
    return NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN pooling failed");
  return NULL;
}

/* v > acc ? v : acc: a NaN already in acc stays, a later one is skipped (maxps's rule) */
static inline v8f v8_max_keep(v8f v, v8f acc) {
#if defined(__AVX__)
  return __builtin_ia32_maxps256(v, acc);
#else
  return (v8f)(((v8i)v & (v8i)(v > acc)) | ((v8i)acc & ~(v8i)(v > acc)));
#endif
}

/* one output vector of bpool_run, any window position (borders: taps checked one by one) */
static inline v8f bpool_one(const conv_geom *g, const float *xc, int64_t IH, int64_t IW, int64_t ih0, int64_t iw0,
                            bool maxp, bool incl) {
  int64_t cnt = 0, cnt_pad = 0;
  v8f acc = maxp ? v8_splat(-INFINITY) : (v8f){0};
  for (int64_t kh = 0; kh < g->k[0]; kh++) {
    int64_t ih = ih0 + kh * g->dil[0];
    if (ih >= IH + g->pe[0]) break;
    for (int64_t kw = 0; kw < g->k[1]; kw++) {
      int64_t iw = iw0 + kw * g->dil[1];
      if (iw >= IW + g->pe[1]) break;
      cnt_pad++;
      if (ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
      v8f v = *(const v8fu *)(xc + (size_t)(ih * IW + iw) * 8);
      if (!maxp) acc = acc + v;
      else acc = cnt ? v8_max_keep(v, acc) : v;
      cnt++;
    }
  }
  if (!maxp) {
    int64_t dv = incl ? cnt_pad : cnt;
    acc = dv ? acc / (float)dv : (v8f){0};
  }
  return acc;
}

/* MaxPool / AveragePool (2-D) on nChw8c in and out, 8 channels per vector, with the
 * reference's rules (pool_exec): max over the taps inside the image, the first taken as
 * is and later ones when greater (NaN as there; no tap: -inf); average over the taps inside
 * the image, or with count_include_pad over those inside the declared padding (a window
 * stops at the declared end padding; summed in float, the reference in double). Columns
 * whose window lies inside the image take a loop without per-tap checks. */
static void bpool_run(const fast_kernel *k, plan_step *s, int threads) {
  const conv_geom *g = &k->g;
  int64_t NC = g->N * (g->C / 8), IH = g->in[0], IW = g->in[1], OH = g->out[0], OW = g->out[1];
  int64_t KH = g->k[0], KW = g->k[1], DH = g->dil[0], DW = g->dil[1], SW = g->stride[1], PW = g->pb[1];
  const float *X = s->in[0]->data;
  float *Y = s->out[0]->data;
  bool maxp = k->pool_max, incl = k->pool_incl;
  /* columns whose KW taps all lie inside the image: [ow_lo, ow_hi) */
  int64_t ow_lo = (PW + SW - 1) / SW, last = IW - 1 + PW - (KW - 1) * DW;
  int64_t ow_hi = last < 0 ? 0 : last / SW + 1;
  if (ow_hi > OW) ow_hi = OW;
  if (ow_lo > ow_hi) ow_lo = ow_hi;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t row = 0; row < NC * OH; row++) {
    int64_t nc = row / OH, oh = row % OH, ih0 = oh * g->stride[0] - g->pb[0];
    const float *xc = X + (size_t)(nc * IH * IW) * 8;
    float *yr = Y + (size_t)(row * OW) * 8;
    /* this row's taps inside the image: kh in [kv, kv + nkv); before the end padding: npad */
    int64_t kv = 0, nkv = 0, npad = 0;
    for (int64_t kh = 0; kh < KH; kh++) {
      int64_t ih = ih0 + kh * DH;
      if (ih >= IH + g->pe[0]) break;
      npad++;
      if (ih < 0) kv = kh + 1;
      else if (ih < IH) nkv++;
    }
    int64_t lo = nkv ? ow_lo : OW, hi = nkv ? ow_hi : OW, ow = 0;
    for (; ow < lo; ow++) *(v8fu *)(yr + ow * 8) = bpool_one(g, xc, IH, IW, ih0, ow * SW - PW, maxp, incl);
    /* interior: no checks; same taps in the same order as bpool_one */
    const float *x0 = xc + (size_t)((ih0 + kv * DH) * IW) * 8;
    if (maxp)
      for (; ow < hi; ow++) {
        const float *xp = x0 + (size_t)(ow * SW - PW) * 8;
        v8f acc = *(const v8fu *)xp;
        for (int64_t kh = 0; kh < nkv; kh++)
          for (int64_t kw = 0; kw < KW; kw++)
            acc = v8_max_keep(*(const v8fu *)(xp + (size_t)(kh * DH * IW + kw * DW) * 8), acc);
        *(v8fu *)(yr + ow * 8) = acc;
      }
    else {
      v8f dv = v8_splat((float)((incl ? npad : nkv) * KW));
      for (; ow < hi; ow++) {
        const float *xp = x0 + (size_t)(ow * SW - PW) * 8;
        v8f acc = {0};
        for (int64_t kh = 0; kh < nkv; kh++)
          for (int64_t kw = 0; kw < KW; kw++) acc = acc + *(const v8fu *)(xp + (size_t)(kh * DH * IW + kw * DW) * 8);
        *(v8fu *)(yr + ow * 8) = acc / dv;
      }
    }
    for (; ow < OW; ow++) *(v8fu *)(yr + ow * 8) = bpool_one(g, xc, IH, IW, ih0, ow * SW - PW, maxp, incl);
  }
}

/* v < 0 ? v * a : v, branch-free (half the values are negative: a branch mispredicts) */
static inline v8f v8_prelu(v8f v, v8f a) {
  v8i neg = (v8i)(v < 0);
  return (v8f)(((v8i)(v * a) & neg) | ((v8i)v & ~neg));
}

/* y = y < 0 ? y * slope[c] : y over the conv destination, in its layout (prelu_blk);
 * same rule as act_apply_c (NaN stays NaN) */
static void prelu_inplace(const fast_kernel *k, float *y, int threads) {
  int64_t N = k->prelu_n, C = k->prelu_c, HW = k->prelu_hw, blk = k->prelu_blk;
  const float *sl = k->prelu_slope;
  if (blk == 1) {
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < C; c++) {
        float *p = y + (n * C + c) * HW, a = sl[c];
        int64_t i = 0;
        for (; i + 8 <= HW; i += 8) *(v8fu *)(p + i) = v8_prelu(*(const v8fu *)(p + i), v8_splat(a));
        for (; i < HW; i++) p[i] = p[i] < 0 ? p[i] * a : p[i];
      }
    return;
  }
  int64_t CB = (C + blk - 1) / blk, L = HW * blk / 8; /* blk is 8 or 16: whole vectors */
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int64_t cb = 0; cb < CB; cb++) {
      float *p = y + (n * CB + cb) * HW * blk;
      v8f a0 = *(const v8fu *)(sl + cb * blk), a1 = blk == 16 ? *(const v8fu *)(sl + cb * blk + 8) : a0;
      for (int64_t i = 0; i < L; i++) *(v8fu *)(p + 8 * i) = v8_prelu(*(const v8fu *)(p + 8 * i), i & 1 ? a1 : a0);
    }
}

/* Softmax over a short innermost axis (detection heads: [N, H, W, 2]) in float: per row
 * m = max, e = expf(x - m), y = e / sum(e) (sum in float, in order). The reference
 * (ops_nn.c softmax_exec) works in double and calls exp twice per element; this is within
 * a few ulp of it (test_softmax_fast), as ONNX Runtime's float softmax is. */
static bool softmax_geom(const onnx_plan *p, const plan_step *s, int64_t *outer, int64_t *d) {
  if (p->no_fast || strcmp(s->node->op_type, "Softmax") || getenv("CINFER_ONNX_NO_FAST_SOFTMAX")) return false;
  const ot *x = s->in[0];
  int r = x->ndim;
  if (x->dtype != CINFER_TYPE_FP32 || r < 1 || ot_numel(x) <= 0) return false;
  int64_t a = attr_i(s->node, "axis", s->node->opset < 13 ? 1 : -1);
  if (a < 0) a += r;
  if (a < 0 || a >= r) return false;
  int64_t D = s->node->opset < 13 ? prod(x->dims, (int)a, r) : x->dims[a];
  if ((s->node->opset >= 13 && a != r - 1) || D > 64) return false; /* innermost, contiguous */
  *d = D;
  *outer = ot_numel(x) / D;
  return true;
}

/* e^x on 8 lanes for |x| <= 87 (callers check the range): Cephes' expf, x = n ln2 + r,
 * degree-6 polynomial in r, 2^n through the exponent bits; within 2 ulp of expf there
 * (test_exp8). */
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

/* y = e^x elementwise: v8_exp where all 8 lanes are within its range, expf elsewhere */
static void exp_f32(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f v = *(const v8fu *)(x + i);
    if (v8_in_exp_range(v)) *(v8fu *)(y + i) = v8_exp(v);
    else for (int j = 0; j < 8; j++) y[i + j] = expf(x[i + j]);
  }
  for (; i < n; i++) y[i] = expf(x[i]);
}

/* Softmax over rows of D (the reference's order: max, e^(x - max), sum in order, divide).
 * Rows of 2 (detection heads' two classes), 8 rows at a time: the pairs deinterleaved into
 * two vectors, e^ by v8_exp (expf for a group with a difference below -87 or a NaN). */
static void softmax_run(const fast_kernel *k, plan_step *s, int threads) {
  const float *X = s->in[0]->data;
  float *Y = s->out[0]->data;
  int64_t D = k->sm_d, R = k->sm_outer, R8 = D == 2 ? R / 8 * 8 : 0;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && R * D > 65536)
  for (int64_t o = 0; o < R8; o += 8) {
    v8f p0 = *(const v8fu *)(X + o * 2), p1 = *(const v8fu *)(X + o * 2 + 8);
    v8f a = __builtin_shufflevector(p0, p1, 0, 2, 4, 6, 8, 10, 12, 14);
    v8f b = __builtin_shufflevector(p0, p1, 1, 3, 5, 7, 9, 11, 13, 15);
    v8f m = (v8f)(((v8i)b & (v8i)(b > a)) | ((v8i)a & ~(v8i)(b > a))); /* b > a ? b : a */
    v8f da = a - m, db = b - m, ea, eb;
    if (v8_in_exp_range(da) && v8_in_exp_range(db)) {
      ea = v8_exp(da);
      eb = v8_exp(db);
    } else {
      float fa[8], fb[8];
      __builtin_memcpy(fa, &da, sizeof fa);
      __builtin_memcpy(fb, &db, sizeof fb);
      for (int j = 0; j < 8; j++) { fa[j] = expf(fa[j]); fb[j] = expf(fb[j]); }
      __builtin_memcpy(&ea, fa, sizeof fa);
      __builtin_memcpy(&eb, fb, sizeof fb);
    }
    v8f sum = ea + eb;
    ea = ea / sum;
    eb = eb / sum;
    *(v8fu *)(Y + o * 2) = __builtin_shufflevector(ea, eb, 0, 8, 1, 9, 2, 10, 3, 11);
    *(v8fu *)(Y + o * 2 + 8) = __builtin_shufflevector(ea, eb, 4, 12, 5, 13, 6, 14, 7, 15);
  }
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && (R - R8) * D > 65536)
  for (int64_t o = R8; o < R; o++) {
    const float *x = X + o * D;
    float *y = Y + o * D, m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < D; j++) if (x[j] > m) m = x[j];
    for (int64_t j = 0; j < D; j++) sum += y[j] = expf(x[j] - m);
    for (int64_t j = 0; j < D; j++) y[j] /= sum;
  }
}

/* Exp (float, plain): exp_f32 */
static void exp_run(plan_step *s, int threads) {
  const float *X = s->in[0]->data;
  float *Y = s->out[0]->data;
  int64_t n = ot_numel(s->in[0]), per = ((n + threads - 1) / threads + 7) / 8 * 8;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && n > 65536)
  for (int64_t i0 = 0; i0 < n; i0 += per) exp_f32(X + i0, Y + i0, n - i0 < per ? n - i0 : per);
}

/* Winograd F(2x2, 3x3) (kind 7): 3x3 stride-1 undilated convolutions with nChw8c input and
 * output, C and M multiples of 8. Each 2x2 block of output pixels (a tile) comes from the
 * 4x4 input patch around it: V = B' d B per input channel, P = sum over input channels
 * of U . V per output channel (U = G g G', the weights transformed once at load, in
 * double), and Y = A' P A: 16 multiply-adds per channel pair and tile instead of 36.
 * Tiles go in chunks of WINO_T (the transformed inputs and products of a chunk stay in the
 * L1/L2 caches); each of the 16 products is a GEMM [tiles x C] . [C x M] run by a 3-tile x
 * 32-channel register kernel. The sums are in another order than the direct convolution
 * and the transforms add a few roundings (test_winograd: within 1e-5 of the reference on
 * unit-scale data; the six vision models still pass their test sets at rtol 1e-4 / atol
 * 1e-5). ONNX Runtime's MLAS has no Winograd on CPU; oneDNN 2.6 has it for AVX-512 only.
 * DenseNet's 3x3 128->32 conv at 56x56, alone between two 1x1 convs: 1.72 ms against
 * oneDNN's direct 3.26 ms (1 thread), 0.90 against 1.79 (2 threads). */
#define WINO_T 24
/* floats between two of the 16 planes of a chunk's V (n = C) or products (n = M): one
 * cache line more than the data, so that the 16 values of one tile do not all fall in the
 * same L1 set (C = 128: planes 12 KiB apart, a multiple of 4 KiB) */
#define WINO_VS(n) (WINO_T * (n) + 16)
/* U (16 C x M floats) larger than half this core's L2 */
#define WINO_BIG_U(C, M) ((C) * (M) * 64 > (512 << 10))

static bool wino_ok(const onnx_plan *p, const plan_step *s, bool keep) {
  const ot *x = s->in[0], *w = s->in[1];
  if (!keep || getenv("CINFER_ONNX_NO_WINO") || getenv("CINFER_ONNX_PLAIN") || s->sum_id >= 0 || s->dw.w ||
      x->ndim != 4 || w->ndim != 4 || attr_i(s->node, "group", 1) != 1 || w->dims[2] != 3 || w->dims[3] != 3 ||
      x->dims[1] % 8 || w->dims[0] % 8 || x->dims[1] < 16 || (s->has_fused && s->fused.sum) || !p->layout[s->in_id[0]])
    return false;
  conv_geom g;
  cinfer_status *st = conv_geom_make(s->node, x, w->dims + 2, false, &g);
  if (st) { cinfer_status_free(st); return false; }
  if (g.stride[0] != 1 || g.stride[1] != 1 || g.dil[0] != 1 || g.dil[1] != 1) return false;
  /* Every chunk reads all of U (64 C M bytes). Beyond the L2 that needs chunks of >= 12
   * tiles, and then too few tiles for every thread leave oneDNN faster (512 -> 512 at 7x7
   * on 2 threads: 5.3 against 2.5 ms; at 1 thread 4.0 against 4.3) */
  int64_t ntiles = g.N * ((g.out[0] + 1) / 2) * ((g.out[1] + 1) / 2);
  if (WINO_BIG_U(x->dims[1], w->dims[0]) && p->threads > 1 && ntiles < 12 * (int64_t)p->threads) return false;
  /* U takes 16/9 of the weights' memory: above 64 MiB (C x M > 2^20) keep oneDNN's copy */
  if (x->dims[1] * w->dims[0] > ((int64_t)1 << 20)) return false;
  dnnl_dims_t xd = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
  dnnl_memory_desc_t x8;
  return dnnl_memory_desc_init_by_tag(&x8, 4, xd, dnnl_f32, dnnl_aBcd8b) == dnnl_success &&
         dnnl_memory_desc_equal(p->layout[s->in_id[0]], &x8);
}

/* per-thread scratch: the chunk's transformed inputs [16][WINO_T][C] and products [16][WINO_T][M] */
static size_t wino_temp_per_thread(int64_t C, int64_t M) {
  return ((size_t)(16 * (WINO_VS(C) + WINO_VS(M))) * sizeof(float) + 63) & ~(size_t)63;
}

static cinfer_status *wino_prepare(onnx_plan *p, plan_step *s, fast_kernel **out) {
  const ot *w = s->in[1], *b = s->n_in > 2 ? s->in[2] : NULL;
  int64_t M = w->dims[0], C = w->dims[1];
  fast_kernel *k = calloc(1, sizeof *k);
  if (!k) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
  cinfer_status *st = conv_geom_make(s->node, s->in[0], w->dims + 2, false, &k->g);
  if (st) { free(k); return st; }
  k->kind = 7;
  /* U [16][M/32][C][32] (the last group of 32 output channels zero-padded): the GEMM's
   * pass over one group reads C x 32 contiguous floats (as [C][M] its rows were M floats
   * apart, 2 KiB at M = 512, and fell in a few L1 sets); then bias [M] and PRelu slopes [M] */
  int64_t MG = (M + 31) / 32;
  size_t n = (size_t)(16 * MG * 32 * C + 2 * M);
  float *U = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
  if (!U || !out_nchw8c(p, s, M)) {
    free(U);
    free(k);
    return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
  }
  memset(U, 0, n * sizeof(float));
  const float *W = w->data;
  for (int64_t m = 0; m < M; m++)
    for (int64_t c = 0; c < C; c++) {
      const float *g = W + (m * C + c) * 9;
      double t[4][3], u[4][4];
      for (int j = 0; j < 3; j++) { /* G g */
        t[0][j] = g[j];
        t[1][j] = 0.5 * ((double)g[j] + g[3 + j] + g[6 + j]);
        t[2][j] = 0.5 * ((double)g[j] - g[3 + j] + g[6 + j]);
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; i++) { /* (G g) G' */
        u[i][0] = t[i][0];
        u[i][1] = 0.5 * (t[i][0] + t[i][1] + t[i][2]);
        u[i][2] = 0.5 * (t[i][0] - t[i][1] + t[i][2]);
        u[i][3] = t[i][2];
      }
      for (int e = 0; e < 16; e++) U[(((size_t)e * MG + m / 32) * C + c) * 32 + m % 32] = (float)u[e / 4][e % 4];
    }
  for (int64_t m = 0; m < M; m++) {
    U[16 * MG * 32 * C + m] = b ? ((const float *)b->data)[m] : 0.0f;
    U[16 * MG * 32 * C + M + m] = s->has_fused && s->fused.act == ACT_PRELU ? s->fused.slope[s->fused.slope_n == 1 ? 0 : m] : 0.0f;
  }
  k->w_data = U;
  s->temp_bytes[0] = (size_t)p->threads * wino_temp_per_thread(C, M);
  *out = k;
  return NULL;
}

/* products of TJ tiles (rows of V, C apart) and NB*8 output channels (rows of U, 32 apart),
 * into rows of P (M apart) */
static inline __attribute__((always_inline)) void wino_mm(int NB, int TJ, const float *U, int64_t M, const float *V,
                                                          int64_t C, float *P) {
  v8f acc[3][4];
  for (int j = 0; j < TJ; j++)
    for (int q = 0; q < NB; q++) acc[j][q] = (v8f){0};
  for (int64_t c = 0; c < C; c++) {
    v8f bc[3];
    for (int j = 0; j < TJ; j++) bc[j] = v8_splat(V[j * C + c]);
    for (int q = 0; q < NB; q++) {
      v8f u = *(const v8f *)(U + c * 32 + q * 8);
      /* one load per weight vector: GCC would fold it into each of the TJ FMAs (TJ loads) */
#if defined(__AVX__)
      __asm__("" : "+x"(u));
#endif
      for (int j = 0; j < TJ; j++) acc[j][q] = v8_fma(bc[j], u, acc[j][q]);
    }
  }
  for (int j = 0; j < TJ; j++)
    for (int q = 0; q < NB; q++) *(v8f *)(P + j * M + q * 8) = acc[j][q];
}

/* output channels outer: a pass over the tiles reads one C x 32 group of U (32 KiB at
 * C = 256), where tiles outer re-read the whole C x M plane per 3 tiles (1 MiB at 512 x 512) */
static void wino_gemm(const float *U, int64_t M, const float *V, int64_t C, float *P, int64_t T) {
  for (int64_t m = 0; m < M; m += 32) {
    int NB = M - m < 32 ? (int)(M - m) / 8 : 4;
    for (int64_t t = 0; t < T; t += 3) {
      int TJ = T - t < 3 ? (int)(T - t) : 3;
      const float *u = U + m * C;
      const float *v = V + t * C;
      float *o = P + t * M + m;
#define WMM(nb, tj) \
  case nb * 4 + tj: wino_mm(nb, tj, u, M, v, C, o); break;
      switch (NB * 4 + TJ) {
        WMM(1, 1) WMM(1, 2) WMM(1, 3) WMM(2, 1) WMM(2, 2) WMM(2, 3)
        WMM(3, 1) WMM(3, 2) WMM(3, 3) WMM(4, 1) WMM(4, 2) WMM(4, 3)
      }
#undef WMM
    }
  }
}

/* V = B' d B for one 4x4 patch of 8 channels (rows rs floats apart): within each row
 * (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then the same across rows; V[e] at v + e * es */
static inline void wino_in(const float *x, int64_t rs, float *v, size_t es) {
  v8f c[4][4];
  for (int i = 0; i < 4; i++) {
    const float *r = x + i * rs;
    v8f d0 = *(const v8fu *)r, d1 = *(const v8fu *)(r + 8), d2 = *(const v8fu *)(r + 16), d3 = *(const v8fu *)(r + 24);
    c[i][0] = d0 - d2;
    c[i][1] = d1 + d2;
    c[i][2] = d2 - d1;
    c[i][3] = d1 - d3;
  }
  for (int j = 0; j < 4; j++) {
    *(v8f *)(v + (size_t)j * es) = c[0][j] - c[2][j];
    *(v8f *)(v + (size_t)(4 + j) * es) = c[1][j] + c[2][j];
    *(v8f *)(v + (size_t)(8 + j) * es) = c[2][j] - c[1][j];
    *(v8f *)(v + (size_t)(12 + j) * es) = c[1][j] - c[3][j];
  }
}

static void wino_run(const fast_kernel *k, plan_step *s, int threads) {
  const conv_geom *g = &k->g;
  int64_t C = g->C, M = s->in[1]->dims[0], IH = g->in[0], IW = g->in[1], OH = g->out[0], OW = g->out[1];
  int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2, ntiles = g->N * TH * TW, CT = WINO_T;
  if (threads > 1) { /* at least two chunks per thread (a 7x7 image has 16 tiles) */
    int64_t want = (ntiles + 2 * threads - 1) / (2 * threads);
    want = (want + 2) / 3 * 3;
    if (WINO_BIG_U(C, M) && want < 12) want = 12; /* each chunk streams U: see wino_ok */
    if (want < CT) CT = want;
  }
  int64_t nchunks = (ntiles + CT - 1) / CT;
  int64_t pt = g->pb[0], pl = g->pb[1];
  size_t UE = (size_t)((M + 31) / 32 * 32 * C); /* floats per plane of U */
  const float *X = s->in[0]->data, *U = k->w_data, *bias = U + 16 * UE, *slope = bias + M;
  float *Y = s->out[0]->data;
  const onnx_fused *f = s->has_fused && s->fused.act != ACT_NONE ? &s->fused : NULL;
  size_t per = wino_temp_per_thread(C, M);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float *V = (float *)((char *)s->temp[0] + per * (size_t)omp_get_thread_num()), *P = V + 16 * WINO_VS(C);
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nchunks; ch++) {
      int64_t t0 = ch * CT, T = ntiles - t0 < CT ? ntiles - t0 : CT;
      for (int64_t tl = 0; tl < T; tl++) { /* V = B' d B */
        int64_t t = t0 + tl, n = t / (TH * TW), th = t / TW % TH, tw = t % TW;
        int64_t ih0 = 2 * th - pt, iw0 = 2 * tw - pl;
        bool inside = ih0 >= 0 && ih0 + 4 <= IH && iw0 >= 0 && iw0 + 4 <= IW;
        for (int64_t cb = 0; cb < C / 8; cb++) {
          const float *xc = X + (size_t)((n * (C / 8) + cb) * IH * IW) * 8;
          float *v = V + tl * C + cb * 8;
          if (inside) {
            wino_in(xc + (size_t)(ih0 * IW + iw0) * 8, IW * 8, v, (size_t)WINO_VS(C));
            continue;
          }
          float d[16 * 8] __attribute__((aligned(32))); /* the patch, zeros outside the image */
          for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
              int64_t ih = ih0 + i, iw = iw0 + j;
              v8f e = ih >= 0 && ih < IH && iw >= 0 && iw < IW ? *(const v8fu *)(xc + (size_t)(ih * IW + iw) * 8)
                                                                : (v8f){0};
              *(v8f *)(d + (i * 4 + j) * 8) = e;
            }
          wino_in(d, 32, v, (size_t)WINO_VS(C));
        }
      }
      for (int e = 0; e < 16; e++)
        wino_gemm(U + (size_t)e * UE, M, V + (size_t)e * WINO_VS(C), C, P + (size_t)e * WINO_VS(M), T);
      for (int64_t tl = 0; tl < T; tl++) { /* Y = A' P A, + bias, activation */
        int64_t t = t0 + tl, n = t / (TH * TW), oh = 2 * (t / TW % TH), ow = 2 * (t % TW);
        for (int64_t mb = 0; mb < M / 8; mb++) {
          const float *pp = P + tl * M + mb * 8;
          v8f q[4][4];
          for (int e = 0; e < 16; e++) q[e / 4][e % 4] = *(const v8f *)(pp + (size_t)e * WINO_VS(M));
          v8f a[2][4], y[2][2];
          for (int j = 0; j < 4; j++) {
            a[0][j] = q[0][j] + q[1][j] + q[2][j];
            a[1][j] = q[1][j] - q[2][j] - q[3][j];
          }
          v8f bv = *(const v8f *)(bias + mb * 8);
          for (int i = 0; i < 2; i++) {
            y[i][0] = a[i][0] + a[i][1] + a[i][2] + bv;
            y[i][1] = a[i][1] - a[i][2] - a[i][3] + bv;
          }
          float *yc = Y + (size_t)((n * (M / 8) + mb) * OH * OW) * 8;
          for (int i = 0; i < 2 && oh + i < OH; i++)
            for (int j = 0; j < 2 && ow + j < OW; j++) {
              v8f v = f ? v8_act(y[i][j], f, slope + mb * 8) : y[i][j];
              *(v8fu *)(yc + (size_t)((oh + i) * OW + ow + j) * 8) = v;
            }
        }
      }
    }
  }
}

cinfer_status *fast_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **k) {
  *k = NULL;
  int64_t sm_outer, sm_d;
  if (!p->no_fast && !strcmp(s->node->op_type, "Exp") && s->in[0]->dtype == CINFER_TYPE_FP32 &&
      !p->layout[s->in_id[0]] && !getenv("CINFER_ONNX_NO_FAST_EXP")) {
    if (!(*k = calloc(1, sizeof **k))) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
    (*k)->kind = 5;
    return NULL;
  }
  if (softmax_geom(p, s, &sm_outer, &sm_d) && !p->layout[s->in_id[0]]) {
    if (!(*k = calloc(1, sizeof **k))) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
    (*k)->kind = 4;
    (*k)->sm_outer = sm_outer;
    (*k)->sm_d = sm_d;
    return NULL;
  }
  if (!strcmp(s->node->op_type, "MaxPool") || !strcmp(s->node->op_type, "AveragePool")) {
    cinfer_status *st = pool_prepare(p, s, keep, k);
    if (st || *k) return st;
  }
  if (!strcmp(s->node->op_type, "Concat") || !strcmp(s->node->op_type, "BatchNormalization") ||
      !strcmp(s->node->op_type, "Relu")) {
    blk_kernel *b = NULL;
    cinfer_status *st = blk_prepare(p, s, keep, &b);
    if (st) return st;
    if (b) {
      if (!(*k = calloc(1, sizeof **k))) {
        blk_destroy(b);
        return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "out of memory");
      }
      (*k)->kind = 3;
      (*k)->blk = b;
      return NULL;
    }
  }
  if (conv_eligible(p, s) && small_k(p, s)) return k64_prepare(p, s, keep, k);
  if (conv_eligible(p, s) && wino_ok(p, s, keep)) return wino_prepare(p, s, k);
  if (conv_eligible(p, s)) return conv_prepare(p, s, keep && s->in[0]->ndim == 4, k);
  /* a reference kernel must never see a blocked tensor */
  for (int j = 0; j < s->n_in; j++)
    if (s->in_id[j] >= 0 && p->layout[s->in_id[j]])
      return NODE_ERR(s->node, CINFER_INTERNAL, "blocked input reached a reference kernel");
  return NULL;
}

#define RUN(call)                                                                     \
  do {                                                                                \
    if ((call) != dnnl_success)                                                       \
      return NODE_ERR(s->node, CINFER_INTERNAL, "oneDNN execution failed: %s", #call); \
  } while (0)

cinfer_status *fast_run(fast_kernel *k, plan_step *s, int threads) {
  if (k->kind == 1) {
    k64_run(k, s, threads);
    return NULL;
  }
  if (k->kind == 2) return pool_run(k, s);
  if (k->kind == 3) {
    blk_run(k->blk, s, threads);
    return NULL;
  }
  if (k->kind == 4) {
    softmax_run(k, s, threads);
    return NULL;
  }
  if (k->kind == 5) {
    exp_run(s, threads);
    return NULL;
  }
  if (k->kind == 6) {
    bpool_run(k, s, threads);
    return NULL;
  }
  if (k->kind == 7) {
    wino_run(k, s, threads);
    return NULL;
  }
  void *src = s->in[0]->data;
  if (k->pad_in) {
    const ot *x = s->in[0];
    pad_blocked(src, s->temp[0], x->dims[0], x->dims[1], x->dims[2], x->dims[3], k->pad_t, k->pad_l, k->ph, k->pw,
                threads);
    RUN(dnnl_memory_set_data_handle(k->src_mem, s->temp[0]));
  } else if (k->src_reorder) {
    RUN(dnnl_memory_set_data_handle(k->src_user, src));
    RUN(dnnl_memory_set_data_handle(k->src_mem, s->temp[0]));
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, k->src_user}, {DNNL_ARG_TO, k->src_mem}};
    RUN(dnnl_primitive_execute(k->src_reorder, k->stream, 2, a));
  } else {
    RUN(dnnl_memory_set_data_handle(k->src_mem, src));
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
    prelu_inplace(k, dst, threads);
  }
  if (k->dst_reorder) {
    RUN(dnnl_memory_set_data_handle(k->dst_user, s->out[0]->data));
    dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, k->dst_mem}, {DNNL_ARG_TO, k->dst_user}};
    RUN(dnnl_primitive_execute(k->dst_reorder, k->stream, 2, a));
  }
  RUN(dnnl_stream_wait(k->stream));
  return NULL;
}
