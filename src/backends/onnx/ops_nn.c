/* ops_nn.c: reference kernels for the neural-network operators (Conv, ConvTranspose,
 * pooling, normalisations, Gemm/MatMul, Softmax family, Resize/Upsample, LRN). These are
 * the oracle for the oneDNN fast paths (kern_*.c) and the fallback when no fast path
 * applies. Float32 only; other dtypes are reported as unsupported at plan time. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/opool.h"
#include "backends/onnx/ops_util.h"

#define NEED_F32(n, t) REQUIRE_DTYPE(n, t, (t)->dtype == CINFER_TYPE_FP32)

/* ======================= geometry ======================= */

cinfer_status *conv_geom_make(const onnx_node *n, const ot *x, const int64_t *kshape,
                              bool pool, conv_geom *g) {
  memset(g, 0, sizeof *g);
  if (x->ndim < 3 || x->ndim > 5)
    return NODE_ERR(n, CINFER_UNSUPPORTED, "input rank %d (need 3 to 5)", x->ndim);
  int sp = x->ndim - 2;
  g->sp = sp;
  g->N = x->dims[0];
  g->C = x->dims[1];
  const int64_t *ks, *st, *dl, *pd;
  int nks = attr_ints(n, "kernel_shape", &ks);
  int nst = attr_ints(n, "strides", &st);
  int ndl = attr_ints(n, "dilations", &dl);
  int npd = attr_ints(n, "pads", &pd);
  if (nks && nks != sp) return NODE_ERR(n, CINFER_INVALID_ARG, "kernel_shape has %d dims, input has %d spatial", nks, sp);
  if (nst && nst != sp) return NODE_ERR(n, CINFER_INVALID_ARG, "strides has %d entries", nst);
  if (ndl && ndl != sp) return NODE_ERR(n, CINFER_INVALID_ARG, "dilations has %d entries", ndl);
  if (npd && npd != 2 * sp) return NODE_ERR(n, CINFER_INVALID_ARG, "pads has %d entries", npd);
  if (!nks && !kshape) return NODE_ERR(n, CINFER_INVALID_ARG, "kernel_shape is required");
  const char *ap = attr_s(n, "auto_pad", "NOTSET");
  bool ceil_mode = pool && attr_i(n, "ceil_mode", 0);
  for (int i = 0; i < 3; i++) {
    g->in[i] = g->k[i] = g->out[i] = g->stride[i] = g->dil[i] = 1;
    g->pb[i] = g->pe[i] = 0;
  }
  for (int i = 0; i < sp; i++) {
    g->in[i] = x->dims[2 + i];
    g->k[i] = nks ? ks[i] : kshape[i];
    g->stride[i] = nst ? st[i] : 1;
    g->dil[i] = ndl ? dl[i] : 1;
    g->pb[i] = npd ? pd[i] : 0;
    g->pe[i] = npd ? pd[i + sp] : 0;
    if (g->k[i] <= 0 || g->k[i] > 65536 || g->stride[i] <= 0 || g->stride[i] > 65536 ||
        g->dil[i] <= 0 || g->dil[i] > 65536 || g->pb[i] < 0 || g->pe[i] < 0 ||
        g->pb[i] > 65536 || g->pe[i] > 65536)
      return NODE_ERR(n, CINFER_INVALID_ARG, "invalid kernel/stride/dilation/pad on axis %d", i);
    int64_t ek = (g->k[i] - 1) * g->dil[i] + 1;
    if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
      int64_t o = (g->in[i] + g->stride[i] - 1) / g->stride[i];
      int64_t tot = (o - 1) * g->stride[i] + ek - g->in[i];
      if (tot < 0) tot = 0;
      g->pb[i] = !strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
      g->pe[i] = tot - g->pb[i];
      g->out[i] = o;
    } else {
      if (!strcmp(ap, "VALID")) g->pb[i] = g->pe[i] = 0;
      else if (strcmp(ap, "NOTSET")) return NODE_ERR(n, CINFER_INVALID_ARG, "auto_pad '%s'", ap);
      int64_t span = g->in[i] + g->pb[i] + g->pe[i] - ek;
      if (span < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "kernel larger than padded input on axis %d", i);
      g->out[i] = (ceil_mode ? (span + g->stride[i] - 1) / g->stride[i] : span / g->stride[i]) + 1;
      if (ceil_mode && (g->out[i] - 1) * g->stride[i] >= g->in[i] + g->pb[i]) g->out[i]--;
    }
  }
  return NULL;
}

/* ======================= Conv ======================= */

cinfer_status *conv_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  NEED_F32(n, in[1]);
  const ot *x = in[0], *w = in[1];
  if (w->ndim != x->ndim) return NODE_ERR(n, CINFER_INVALID_ARG, "W rank %d != X rank %d", w->ndim, x->ndim);
  conv_geom g;
  cinfer_status *st = conv_geom_make(n, x, w->dims + 2, false, &g);
  if (st) return st;
  int64_t G = attr_i(n, "group", 1);
  if (G <= 0 || g.C % G || w->dims[0] % G || w->dims[1] * G != g.C)
    return NODE_ERR(n, CINFER_INVALID_ARG, "group %lld does not fit C=%lld, W=[%lld,%lld,...]",
                    (long long)G, (long long)g.C, (long long)w->dims[0], (long long)w->dims[1]);
  for (int i = 0; i < g.sp; i++)
    if (w->dims[2 + i] != g.k[i]) return NODE_ERR(n, CINFER_INVALID_ARG, "kernel_shape disagrees with W");
  if (n->n_in > 2 && in[2]) NEED_F32(n, in[2]);
  if (n->n_in > 2 && in[2] && (in[2]->ndim != 1 || in[2]->dims[0] != w->dims[0]))
    return NODE_ERR(n, CINFER_INVALID_ARG, "bias shape must be [%lld]", (long long)w->dims[0]);
  int64_t d[OT_MAX_DIMS] = {g.N, w->dims[0]};
  for (int i = 0; i < g.sp; i++) d[2 + i] = g.out[i];
  set_shape(out[0], CINFER_TYPE_FP32, x->ndim, d);
  return NULL;
}

typedef struct {
  conv_geom g;
  int64_t M, Mg, Cg, osz, isz, ksz;
  const float *X, *W, *B, *S;
  float *Y;
  const onnx_fused *f;
} refconv_ctx;

/* one (image, output channel) plane of ref_conv */
static void ref_conv_plane(void *vc, int64_t nm, int tid) {
  (void)tid;
  const refconv_ctx *r = vc;
  const conv_geom g = r->g;
  int64_t M = r->M, Mg = r->Mg, Cg = r->Cg, osz = r->osz, isz = r->isz, ksz = r->ksz;
  const float *X = r->X, *W = r->W, *B = r->B, *S = r->S;
  float *Y = r->Y;
  const onnx_fused *f = r->f;
  int64_t nn = nm / M, m = nm % M;
  {
      int64_t gi = m / Mg;
      for (int64_t o0 = 0; o0 < g.out[0]; o0++)
        for (int64_t o1 = 0; o1 < g.out[1]; o1++)
          for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
            double acc = B ? B[m] : 0;
            for (int64_t c = 0; c < Cg; c++) {
              const float *xc = X + (nn * g.C + gi * Cg + c) * isz;
              const float *wc = W + (m * Cg + c) * ksz;
              for (int64_t k0 = 0; k0 < g.k[0]; k0++) {
                int64_t i0 = o0 * g.stride[0] - g.pb[0] + k0 * g.dil[0];
                if (i0 < 0 || i0 >= g.in[0]) continue;
                for (int64_t k1 = 0; k1 < g.k[1]; k1++) {
                  int64_t i1 = o1 * g.stride[1] - g.pb[1] + k1 * g.dil[1];
                  if (i1 < 0 || i1 >= g.in[1]) continue;
                  for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                    int64_t i2 = o2 * g.stride[2] - g.pb[2] + k2 * g.dil[2];
                    if (i2 < 0 || i2 >= g.in[2]) continue;
                    acc += (double)xc[(i0 * g.in[1] + i1) * g.in[2] + i2] *
                           wc[(k0 * g.k[1] + k1) * g.k[2] + k2];
                  }
                }
              }
            }
            int64_t oi = (nn * M + m) * osz + (o0 * g.out[1] + o1) * g.out[2] + o2;
            float v = (float)acc;
            if (S) v += S[oi];
            Y[oi] = f ? act_apply_c(f, v, m) : v;
          }
    }

}

cinfer_status *ref_conv(const onnx_node *n, const ot *x, const ot *w, const ot *b, ot *y,
                        const onnx_fused *f) {
  conv_geom g;
  cinfer_status *st = conv_geom_make(n, x, w->dims + 2, false, &g);
  if (st) return st;
  int64_t G = attr_i(n, "group", 1), M = w->dims[0], Cg = g.C / G, Mg = M / G;
  const float *X = x->data, *W = w->data, *B = b ? b->data : NULL;
  const float *S = f && f->sum ? f->sum->data : NULL;
  float *Y = y->data;
  int64_t osz = g.out[0] * g.out[1] * g.out[2], isz = g.in[0] * g.in[1] * g.in[2];
  int64_t ksz = g.k[0] * g.k[1] * g.k[2];
  refconv_ctx rc = {g, M, Mg, Cg, osz, isz, ksz, X, W, B, S, Y, f};
  opool_par(g.N * M, ref_conv_plane, &rc);
  return NULL;
}

cinfer_status *conv_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  return ref_conv(n, in[0], in[1], n->n_in > 2 ? in[2] : NULL, out[0], x->fused);
}

/* ======================= ConvTranspose ======================= */

typedef struct { conv_geom g; int64_t opad[3]; } convt_geom;
static cinfer_status *convt_make(const onnx_node *n, ot **in, convt_geom *cg) {
  const ot *x = in[0], *w = in[1];
  conv_geom *g = &cg->g;
  memset(cg, 0, sizeof *cg);
  if (x->ndim < 3 || x->ndim > 5 || w->ndim != x->ndim)
    return NODE_ERR(n, CINFER_UNSUPPORTED, "input rank %d", x->ndim);
  int sp = x->ndim - 2;
  int64_t G = attr_i(n, "group", 1);
  if (G <= 0 || x->dims[1] != w->dims[0] || w->dims[0] % G)
    return NODE_ERR(n, CINFER_INVALID_ARG, "W shape does not match input channels/group");
  g->sp = sp; g->N = x->dims[0]; g->C = x->dims[1]; g->G = G; g->M = w->dims[1] * G;
  if (n->n_in > 2 && in[2] && (in[2]->ndim != 1 || in[2]->dims[0] != g->M))
    return NODE_ERR(n, CINFER_INVALID_ARG, "B must have shape [%lld]", (long long)g->M);
  const int64_t *st, *dl, *pd, *op, *os;
  int nst = attr_ints(n, "strides", &st), ndl = attr_ints(n, "dilations", &dl);
  int npd = attr_ints(n, "pads", &pd), nop = attr_ints(n, "output_padding", &op);
  int nos = attr_ints(n, "output_shape", &os);
  const char *ap = attr_s(n, "auto_pad", "NOTSET");
  for (int i = 0; i < 3; i++) { g->in[i] = g->k[i] = g->out[i] = g->stride[i] = g->dil[i] = 1; }
  for (int i = 0; i < sp; i++) {
    g->in[i] = x->dims[2 + i];
    g->k[i] = w->dims[2 + i];
    g->stride[i] = nst == sp ? st[i] : 1;
    g->dil[i] = ndl == sp ? dl[i] : 1;
    cg->opad[i] = nop == sp ? op[i] : 0;
    g->pb[i] = npd == 2 * sp ? pd[i] : 0;
    g->pe[i] = npd == 2 * sp ? pd[i + sp] : 0;
    if (g->stride[i] <= 0 || g->dil[i] <= 0 || g->k[i] <= 0 || g->stride[i] > 4096 || g->dil[i] > 4096 ||
        g->pb[i] < 0 || g->pe[i] < 0 || g->pb[i] > 65536 || g->pe[i] > 65536 || cg->opad[i] < 0 || cg->opad[i] > 4096)
      return NODE_ERR(n, CINFER_INVALID_ARG, "invalid stride/dilation/pads");
    int64_t full = g->stride[i] * (g->in[i] - 1) + cg->opad[i] + (g->k[i] - 1) * g->dil[i] + 1;
    if (nos == sp || nos == sp + 2) {
      int64_t want = os[nos - sp + i];
      if (want <= 0 || want > (int64_t)1 << 24)
        return NODE_ERR(n, CINFER_INVALID_ARG, "invalid output_shape");
      int64_t tot = full - want;
      if (tot < 0) tot = 0;
      if (!strcmp(ap, "SAME_UPPER")) { g->pb[i] = tot / 2; g->pe[i] = tot - tot / 2; }
      else { g->pe[i] = tot / 2; g->pb[i] = tot - tot / 2; }
      g->out[i] = want;
    } else {
      if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
        int64_t want = g->in[i] * g->stride[i];
        int64_t tot = full - want;
        if (tot < 0) tot = 0;
        if (!strcmp(ap, "SAME_UPPER")) { g->pb[i] = tot / 2; g->pe[i] = tot - tot / 2; }
        else { g->pe[i] = tot / 2; g->pb[i] = tot - tot / 2; }
      }
      g->out[i] = full - g->pb[i] - g->pe[i];
    }
    if (g->out[i] <= 0) return NODE_ERR(n, CINFER_INVALID_ARG, "output size <= 0");
  }
  return NULL;
}
cinfer_status *convt_infer(const onnx_node *n, ot **in, ot **out) {
  /* X, W and B are all read as float: a W or B of another type (the fuzzing finding
   * tests/data/onnx_findings/convtranspose_overread.onnx has a FLOAT16 W) would be read
   * past its end. */
  NEED_F32(n, in[0]);
  NEED_F32(n, in[1]);
  if (n->n_in > 2 && in[2]) NEED_F32(n, in[2]);
  convt_geom cg;
  cinfer_status *st = convt_make(n, in, &cg);
  if (st) return st;
  int64_t d[OT_MAX_DIMS] = {cg.g.N, cg.g.M};
  for (int i = 0; i < cg.g.sp; i++) d[2 + i] = cg.g.out[i];
  set_shape(out[0], CINFER_TYPE_FP32, in[0]->ndim, d);
  return NULL;
}
cinfer_status *convt_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  convt_geom cg;
  cinfer_status *st = convt_make(n, in, &cg);
  if (st) return st;
  conv_geom *g = &cg.g;
  int64_t G = g->G, Cg = g->C / G, Mg = g->M / G;
  const float *X = in[0]->data, *W = in[1]->data, *B = n->n_in > 2 && in[2] ? in[2]->data : NULL;
  float *Y = out[0]->data;
  int64_t osz = g->out[0] * g->out[1] * g->out[2], isz = g->in[0] * g->in[1] * g->in[2];
  int64_t ksz = g->k[0] * g->k[1] * g->k[2];
  for (int64_t nn = 0; nn < g->N; nn++)
    for (int64_t m = 0; m < g->M; m++)
      for (int64_t i = 0; i < osz; i++) Y[(nn * g->M + m) * osz + i] = B ? B[m] : 0;
  for (int64_t nn = 0; nn < g->N; nn++)
    for (int64_t c = 0; c < g->C; c++) {
      int64_t gi = c / Cg;
      for (int64_t i0 = 0; i0 < g->in[0]; i0++)
        for (int64_t i1 = 0; i1 < g->in[1]; i1++)
          for (int64_t i2 = 0; i2 < g->in[2]; i2++) {
            float xv = X[(nn * g->C + c) * isz + (i0 * g->in[1] + i1) * g->in[2] + i2];
            for (int64_t mm = 0; mm < Mg; mm++) {
              int64_t m = gi * Mg + mm;
              const float *wk = W + (c * Mg + mm) * ksz;
              for (int64_t k0 = 0; k0 < g->k[0]; k0++) {
                int64_t o0 = i0 * g->stride[0] + k0 * g->dil[0] - g->pb[0];
                if (o0 < 0 || o0 >= g->out[0]) continue;
                for (int64_t k1 = 0; k1 < g->k[1]; k1++) {
                  int64_t o1 = i1 * g->stride[1] + k1 * g->dil[1] - g->pb[1];
                  if (o1 < 0 || o1 >= g->out[1]) continue;
                  for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
                    int64_t o2 = i2 * g->stride[2] + k2 * g->dil[2] - g->pb[2];
                    if (o2 < 0 || o2 >= g->out[2]) continue;
                    Y[(nn * g->M + m) * osz + (o0 * g->out[1] + o1) * g->out[2] + o2] +=
                        xv * wk[(k0 * g->k[1] + k1) * g->k[2] + k2];
                  }
                }
              }
            }
          }
    }
  return NULL;
}

/* ======================= pooling ======================= */

cinfer_status *pool_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  conv_geom g;
  cinfer_status *st = conv_geom_make(n, in[0], NULL, true, &g);
  if (st) return st;
  if (strcmp(n->op_type, "MaxPool") && node_attr(n, "dilations")) {
    const int64_t *dl;
    int k = attr_ints(n, "dilations", &dl);
    for (int i = 0; i < k; i++) if (dl[i] != 1) return NODE_ERR(n, CINFER_UNSUPPORTED, "dilated average pooling");
  }
  if (!strcmp(n->op_type, "MaxPool") && attr_i(n, "storage_order", 0))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "storage_order=1");
  int64_t d[OT_MAX_DIMS] = {g.N, g.C};
  for (int i = 0; i < g.sp; i++) d[2 + i] = g.out[i];
  set_shape(out[0], CINFER_TYPE_FP32, in[0]->ndim, d);
  if (n->n_out > 1 && out[1]) { copy_shape(out[1], out[0]); out[1]->dtype = CINFER_TYPE_INT64; }
  return NULL;
}

typedef struct {
  conv_geom g;
  int kind;
  bool incl;
  float p;
  const float *X;
  float *Y;
  int64_t *I;
  int64_t osz, isz;
} refpool_ctx;

/* one (image, channel) plane of pool_exec */
static void pool_plane(void *vc, int64_t nc, int tid) {
  (void)tid;
  const refpool_ctx *r = vc;
  const conv_geom g = r->g;
  int kind = r->kind;
  bool incl = r->incl;
  float p = r->p;
  const float *X = r->X;
  float *Y = r->Y;
  int64_t *I = r->I, osz = r->osz, isz = r->isz;
  {
    const float *xc = X + nc * isz;
    for (int64_t o0 = 0; o0 < g.out[0]; o0++)
      for (int64_t o1 = 0; o1 < g.out[1]; o1++)
        for (int64_t o2 = 0; o2 < g.out[2]; o2++) {
          float best = -INFINITY;
          int64_t bi = -1;
          double sum = 0;
          int64_t cnt = 0, cnt_pad = 0;
          int64_t s0 = o0 * g.stride[0] - g.pb[0], s1 = o1 * g.stride[1] - g.pb[1], s2 = o2 * g.stride[2] - g.pb[2];
          for (int64_t k0 = 0; k0 < g.k[0]; k0++) {
            int64_t i0 = s0 + k0 * g.dil[0];
            if (i0 >= g.in[0] + g.pe[0]) break;
            for (int64_t k1 = 0; k1 < g.k[1]; k1++) {
              int64_t i1 = s1 + k1 * g.dil[1];
              if (i1 >= g.in[1] + g.pe[1]) break;
              for (int64_t k2 = 0; k2 < g.k[2]; k2++) {
                int64_t i2 = s2 + k2 * g.dil[2];
                if (i2 >= g.in[2] + g.pe[2]) break;
                cnt_pad++;
                if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                int64_t ii = (i0 * g.in[1] + i1) * g.in[2] + i2;
                float v = xc[ii];
                if (v > best || bi < 0) { if (v > best || bi < 0) { best = v; bi = ii; } }
                sum += kind == 2 ? pow(fabs(v), p) : v;
                cnt++;
              }
            }
          }
          int64_t oi = nc * osz + (o0 * g.out[1] + o1) * g.out[2] + o2;
          if (kind == 0) {
            Y[oi] = best;
            if (I) I[oi] = bi < 0 ? 0 : nc * isz + bi;
          } else if (kind == 1) {
            int64_t dv = incl ? cnt_pad : cnt;
            Y[oi] = dv ? (float)(sum / (double)dv) : 0;
          } else {
            Y[oi] = (float)pow(sum, 1.0 / p);
          }
        }
  }

}

cinfer_status *pool_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  conv_geom g;
  cinfer_status *st = conv_geom_make(n, in[0], NULL, true, &g);
  if (st) return st;
  int kind = !strcmp(n->op_type, "MaxPool") ? 0 : !strcmp(n->op_type, "AveragePool") ? 1 : 2;
  bool incl = attr_i(n, "count_include_pad", 0) != 0;
  float p = (float)attr_i(n, "p", 2);
  const float *X = in[0]->data;
  float *Y = out[0]->data;
  int64_t *I = n->n_out > 1 && out[1] ? out[1]->data : NULL;
  int64_t osz = g.out[0] * g.out[1] * g.out[2], isz = g.in[0] * g.in[1] * g.in[2];
  (void)x;
  refpool_ctx rc = {g, kind, incl, p, X, Y, I, osz, isz};
  opool_par(g.N * g.C, pool_plane, &rc);
  return NULL;
}

cinfer_status *gpool_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  if (in[0]->ndim < 3) return NODE_ERR(n, CINFER_INVALID_ARG, "rank %d < 3", in[0]->ndim);
  copy_shape(out[0], in[0]);
  for (int i = 2; i < in[0]->ndim; i++) out[0]->dims[i] = 1;
  return NULL;
}
cinfer_status *gpool_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int64_t nc = in[0]->dims[0] * in[0]->dims[1], sz = prod(in[0]->dims, 2, in[0]->ndim);
  int kind = !strcmp(n->op_type, "GlobalAveragePool") ? 0 : !strcmp(n->op_type, "GlobalMaxPool") ? 1 : 2;
  float p = (float)attr_i(n, "p", 2);
  const float *X = in[0]->data;
  float *Y = out[0]->data;
  for (int64_t i = 0; i < nc; i++) {
    const float *s = X + i * sz;
    if (kind == 1) {
      float m = -INFINITY;
      for (int64_t j = 0; j < sz; j++) m = s[j] > m ? s[j] : m;
      Y[i] = m;
    } else if (kind == 0) {
      double a = 0;
      for (int64_t j = 0; j < sz; j++) a += s[j];
      Y[i] = (float)(a / (double)sz);
    } else {
      double a = 0;
      for (int64_t j = 0; j < sz; j++) a += pow(fabs(s[j]), p);
      Y[i] = (float)pow(a, 1.0 / p);
    }
  }
  return NULL;
}

/* ======================= normalisation ======================= */

cinfer_status *bn_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  if (attr_i(n, "training_mode", 0)) return NODE_ERR(n, CINFER_UNSUPPORTED, "training_mode=1");
  if (in[0]->ndim < 2) return NODE_ERR(n, CINFER_INVALID_ARG, "rank < 2");
  for (int i = 1; i < 5; i++) {
    NEED_F32(n, in[i]);
    if (ot_numel(in[i]) != in[0]->dims[1]) return NODE_ERR(n, CINFER_INVALID_ARG, "input %d must have C=%lld values", i, (long long)in[0]->dims[1]);
  }
  for (int i = 1; i < n->n_out; i++)
    if (out[i]) return NODE_ERR(n, CINFER_UNSUPPORTED, "training outputs");
  copy_shape(out[0], in[0]);
  return NULL;
}
cinfer_status *bn_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  float eps = attr_f(n, "epsilon", 1e-5f);
  int64_t N = in[0]->dims[0], C = in[0]->dims[1], S = prod(in[0]->dims, 2, in[0]->ndim);
  const float *X = in[0]->data, *sc = in[1]->data, *b = in[2]->data, *mu = in[3]->data, *var = in[4]->data;
  float *Y = out[0]->data;
  for (int64_t c = 0; c < C; c++) {
    float a = sc[c] / sqrtf(var[c] + eps), bb = b[c] - mu[c] * a;
    for (int64_t nn = 0; nn < N; nn++) {
      const float *s = X + (nn * C + c) * S;
      float *d = Y + (nn * C + c) * S;
      if (x->fused && x->fused->act == ACT_RELU)
        for (int64_t i = 0; i < S; i++) { float v = s[i] * a + bb; d[i] = v > 0 ? v : 0; }
      else if (x->fused) for (int64_t i = 0; i < S; i++) d[i] = act_apply_c(x->fused, s[i] * a + bb, c);
      else for (int64_t i = 0; i < S; i++) d[i] = s[i] * a + bb;
    }
  }
  return NULL;
}

cinfer_status *inorm_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  NEED_F32(n, in[1]);
  NEED_F32(n, in[2]);
  if (in[0]->ndim < 3) return NODE_ERR(n, CINFER_INVALID_ARG, "rank < 3");
  if (ot_numel(in[1]) != in[0]->dims[1] || ot_numel(in[2]) != in[0]->dims[1])
    return NODE_ERR(n, CINFER_INVALID_ARG, "scale/B must have C values");
  copy_shape(out[0], in[0]);
  return NULL;
}
cinfer_status *inorm_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  float eps = attr_f(n, "epsilon", 1e-5f);
  int64_t N = in[0]->dims[0], C = in[0]->dims[1], S = prod(in[0]->dims, 2, in[0]->ndim);
  const float *X = in[0]->data, *sc = in[1]->data, *b = in[2]->data;
  float *Y = out[0]->data;
  for (int64_t nc = 0; nc < N * C; nc++) {
    const float *s = X + nc * S;
    double m = 0, v = 0;
    for (int64_t i = 0; i < S; i++) m += s[i];
    m /= (double)S;
    for (int64_t i = 0; i < S; i++) v += (s[i] - m) * (s[i] - m);
    v /= (double)S;
    float a = (float)(sc[nc % C] / sqrt(v + eps));
    for (int64_t i = 0; i < S; i++) Y[nc * S + i] = (float)(s[i] - m) * a + b[nc % C];
  }
  return NULL;
}

cinfer_status *lnorm_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  int r = in[0]->ndim, a = norm_axis(attr_i(n, "axis", -1), r);
  if (a < 0) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  int64_t inner = prod(in[0]->dims, a, r);
  NEED_F32(n, in[1]);
  if (n->n_in > 2 && in[2]) NEED_F32(n, in[2]);
  if (ot_numel(in[1]) != inner || (n->n_in > 2 && in[2] && ot_numel(in[2]) != inner))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "scale/bias must cover the normalised dims exactly");
  copy_shape(out[0], in[0]);
  for (int i = 1; i < n->n_out && i < 3; i++)
    if (out[i]) {
      copy_shape(out[i], in[0]);
      for (int j = a; j < r; j++) out[i]->dims[j] = 1;
    }
  return NULL;
}
cinfer_status *lnorm_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim, a = norm_axis(attr_i(n, "axis", -1), r);
  float eps = attr_f(n, "epsilon", 1e-5f);
  int64_t outer = prod(in[0]->dims, 0, a), inner = prod(in[0]->dims, a, r);
  const float *X = in[0]->data, *sc = in[1]->data, *b = n->n_in > 2 && in[2] ? in[2]->data : NULL;
  float *Y = out[0]->data;
  for (int64_t o = 0; o < outer; o++) {
    const float *s = X + o * inner;
    double m = 0, v = 0;
    for (int64_t i = 0; i < inner; i++) m += s[i];
    m /= (double)inner;
    for (int64_t i = 0; i < inner; i++) v += (s[i] - m) * (s[i] - m);
    v /= (double)inner;
    double rs = 1.0 / sqrt(v + eps);
    for (int64_t i = 0; i < inner; i++) Y[o * inner + i] = (float)((s[i] - m) * rs) * sc[i] + (b ? b[i] : 0);
    if (n->n_out > 1 && out[1]) ((float *)out[1]->data)[o] = (float)m;
    if (n->n_out > 2 && out[2]) ((float *)out[2]->data)[o] = (float)rs;
  }
  return NULL;
}

cinfer_status *lrn_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  if (in[0]->ndim < 3 || attr_i(n, "size", 0) <= 0) return NODE_ERR(n, CINFER_INVALID_ARG, "needs rank >= 3 and size > 0");
  copy_shape(out[0], in[0]);
  return NULL;
}
cinfer_status *lrn_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int64_t size = attr_i(n, "size", 1);
  float alpha = attr_f(n, "alpha", 1e-4f), beta = attr_f(n, "beta", 0.75f), bias = attr_f(n, "bias", 1.0f);
  int64_t N = in[0]->dims[0], C = in[0]->dims[1], S = prod(in[0]->dims, 2, in[0]->ndim);
  const float *X = in[0]->data;
  float *Y = out[0]->data;
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  for (int64_t nn = 0; nn < N; nn++)
    for (int64_t c = 0; c < C; c++) {
      /* the window clipped to the channels, without forming c +- a huge size (a model file
       * may say size = 2^31: the loop must cost C, not size) */
      int64_t j0 = lo >= c ? 0 : c - lo, j1 = hi >= C - 1 - c ? C - 1 : c + hi;
      for (int64_t i = 0; i < S; i++) {
        double s = 0;
        for (int64_t j = j0; j <= j1; j++) { double v = X[(nn * C + j) * S + i]; s += v * v; }
        Y[(nn * C + c) * S + i] = (float)(X[(nn * C + c) * S + i] / pow(bias + alpha / (double)size * s, beta));
      }
    }
  return NULL;
}

/* ======================= Gemm / MatMul ======================= */

void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc) {
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * ldc;
    if (beta == 0) for (int64_t j = 0; j < N; j++) c[j] = 0;
    else if (beta != 1) for (int64_t j = 0; j < N; j++) c[j] *= beta;
    for (int64_t k = 0; k < K; k++) {
      float a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
      if (!tb) {
        const float *b = B + k * ldb;
        for (int64_t j = 0; j < N; j++) c[j] += a * b[j];
      } else {
        for (int64_t j = 0; j < N; j++) c[j] += a * B[j * ldb + k];
      }
    }
  }
}

cinfer_status *gemm_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  NEED_F32(n, in[1]);
  if (in[0]->ndim != 2 || in[1]->ndim != 2) return NODE_ERR(n, CINFER_INVALID_ARG, "A and B must be 2-D");
  bool ta = attr_i(n, "transA", 0), tb = attr_i(n, "transB", 0);
  int64_t M = in[0]->dims[ta ? 1 : 0], K = in[0]->dims[ta ? 0 : 1];
  int64_t K2 = in[1]->dims[tb ? 1 : 0], N = in[1]->dims[tb ? 0 : 1];
  if (K != K2) return NODE_ERR(n, CINFER_INVALID_ARG, "inner dims %lld and %lld differ", (long long)K, (long long)K2);
  int64_t d[2] = {M, N};
  set_shape(out[0], CINFER_TYPE_FP32, 2, d);
  if (n->n_in > 2 && in[2]) {
    NEED_F32(n, in[2]);
    ot t;
    cinfer_status *st = bcast_shape(out[0], in[2], &t, n);
    if (st) return st;
    if (t.ndim != 2 || t.dims[0] != M || t.dims[1] != N) return NODE_ERR(n, CINFER_INVALID_ARG, "C does not broadcast to [M,N]");
  }
  return NULL;
}
cinfer_status *gemm_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  bool ta = attr_i(n, "transA", 0), tb = attr_i(n, "transB", 0);
  float alpha = attr_f(n, "alpha", 1), beta = attr_f(n, "beta", 1);
  int64_t M = out[0]->dims[0], N = out[0]->dims[1], K = in[0]->dims[ta ? 0 : 1];
  float *Y = out[0]->data;
  const ot *c = n->n_in > 2 ? in[2] : NULL;
  if (c) {
    int64_t s0 = c->ndim == 2 && c->dims[0] != 1 ? c->dims[1] : 0;
    int64_t s1 = c->ndim >= 1 && c->dims[c->ndim - 1] != 1 ? 1 : 0;
    const float *C = c->data;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) Y[i * N + j] = C[i * s0 + j * s1];
  }
  ref_gemm(ta, tb, M, N, K, alpha, in[0]->data, in[0]->dims[1], in[1]->data, in[1]->dims[1],
           c ? beta : 0, Y, N);
  if (x->fused)
    for (int64_t i = 0; i < M * N; i++) Y[i] = act_apply(x->fused, Y[i]);
  return NULL;
}

cinfer_status *matmul_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  NEED_F32(n, in[1]);
  ot a = *in[0], b = *in[1];
  if (a.ndim == 0 || b.ndim == 0) return NODE_ERR(n, CINFER_INVALID_ARG, "scalar operand");
  bool a1 = a.ndim == 1, b1 = b.ndim == 1;
  if (a1) { a.ndim = 2; a.dims[1] = a.dims[0]; a.dims[0] = 1; }
  if (b1) { b.ndim = 2; b.dims[1] = 1; }
  if (a.dims[a.ndim - 1] != b.dims[b.ndim - 2])
    return NODE_ERR(n, CINFER_INVALID_ARG, "inner dims %lld and %lld differ", (long long)a.dims[a.ndim - 1], (long long)b.dims[b.ndim - 2]);
  ot ba = a, bb = b, bo;
  ba.ndim -= 2;
  bb.ndim -= 2;
  cinfer_status *st = bcast_shape(&ba, &bb, &bo, n);
  if (st) return st;
  int64_t d[OT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < bo.ndim; i++) d[k++] = bo.dims[i];
  if (!a1) d[k++] = a.dims[a.ndim - 2];
  if (!b1) d[k++] = b.dims[b.ndim - 1];
  set_shape(out[0], CINFER_TYPE_FP32, k, d);
  return NULL;
}
cinfer_status *matmul_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  ot a = *in[0], b = *in[1];
  if (a.ndim == 1) { a.ndim = 2; a.dims[1] = a.dims[0]; a.dims[0] = 1; }
  if (b.ndim == 1) { b.ndim = 2; b.dims[1] = 1; }
  int64_t M = a.dims[a.ndim - 2], K = a.dims[a.ndim - 1], N = b.dims[b.ndim - 1];
  ot ba = a, bb = b, bo;
  ba.ndim -= 2;
  bb.ndim -= 2;
  bcast_shape(&ba, &bb, &bo, n);
  int64_t sa[OT_MAX_DIMS], sb[OT_MAX_DIMS];
  int r = bo.ndim;
  int64_t acc = 1;
  for (int i = r - 1; i >= 0; i--) {
    int ia = i - (r - ba.ndim), ib = i - (r - bb.ndim);
    sa[i] = ia >= 0 && ba.dims[ia] != 1 ? 1 : 0;
    sb[i] = ib >= 0 && bb.dims[ib] != 1 ? 1 : 0;
  }
  /* convert to element strides of whole matrices */
  int64_t pa = 1, pb = 1;
  for (int i = r - 1; i >= 0; i--) {
    int ia = i - (r - ba.ndim), ib = i - (r - bb.ndim);
    int64_t da = ia >= 0 ? ba.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
    sa[i] *= pa; sb[i] *= pb;
    pa *= da; pb *= db;
  }
  (void)acc;
  int64_t batches = prod(bo.dims, 0, r);
  const float *A = a.data, *B = b.data;
  float *Y = out[0]->data;
  for (int64_t t = 0; t < batches; t++) {
    int64_t rem = t, oa = 0, ob = 0;
    for (int i = r - 1; i >= 0; i--) { int64_t ix = rem % bo.dims[i]; rem /= bo.dims[i]; oa += ix * sa[i]; ob += ix * sb[i]; }
    ref_gemm(false, false, M, N, K, 1.0f, A + oa * M * K, K, B + ob * K * N, N, 0.0f, Y + t * M * N, N);
  }
  return NULL;
}

/* ======================= Softmax family ======================= */

cinfer_status *softmax_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  int r = in[0]->ndim;
  int64_t a = attr_i(n, "axis", n->opset < 13 ? 1 : -1);
  if (a < 0) a += r;
  if (a < 0 || a >= (r ? r : 1)) return NODE_ERR(n, CINFER_INVALID_ARG, "axis out of range");
  copy_shape(out[0], in[0]);
  return NULL;
}
cinfer_status *softmax_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  int r = in[0]->ndim;
  int64_t a = attr_i(n, "axis", n->opset < 13 ? 1 : -1);
  if (a < 0) a += r;
  int64_t outer, D, inner;
  if (n->opset < 13) { outer = prod(in[0]->dims, 0, (int)a); D = prod(in[0]->dims, (int)a, r); inner = 1; }
  else { outer = prod(in[0]->dims, 0, (int)a); D = in[0]->dims[a]; inner = prod(in[0]->dims, (int)a + 1, r); }
  int kind = !strcmp(n->op_type, "Softmax") ? 0 : !strcmp(n->op_type, "LogSoftmax") ? 1 : 2;
  const float *X = in[0]->data;
  float *Y = out[0]->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *s = X + o * D * inner + i;
      float *d = Y + o * D * inner + i;
      float m = -INFINITY;
      int64_t am = 0;
      for (int64_t j = 0; j < D; j++) if (s[j * inner] > m) { m = s[j * inner]; am = j; }
      if (kind == 2) { for (int64_t j = 0; j < D; j++) d[j * inner] = j == am; continue; }
      double sum = 0;
      for (int64_t j = 0; j < D; j++) sum += exp((double)s[j * inner] - m);
      if (kind == 0) { for (int64_t j = 0; j < D; j++) d[j * inner] = (float)(exp((double)s[j * inner] - m) / sum); }
      else { double l = log(sum); for (int64_t j = 0; j < D; j++) d[j * inner] = (float)((double)s[j * inner] - m - l); }
    }
  return NULL;
}

/* ======================= Resize / Upsample ======================= */

typedef struct resize_p {
  int mode;   /* 0 nearest, 1 linear, 2 cubic */
  int ctm;    /* 0 half_pixel 1 asymmetric 2 align_corners 3 pytorch_half_pixel
                 4 tf_half_pixel_for_nearest 5 tf_crop_and_resize */
  int nmode;  /* 0 round_prefer_floor 1 round_prefer_ceil 2 floor 3 ceil */
  float cubic_a, extrap;
  bool exclude_outside;
  double scale[OT_MAX_DIMS], roi_s[OT_MAX_DIMS], roi_e[OT_MAX_DIMS];
  int64_t out[OT_MAX_DIMS];
  double out_f[OT_MAX_DIMS]; /* in * scale, unrounded (what align_corners divides by) */
} resize_p;

static cinfer_status *resize_params(const onnx_node *n, ot **in, resize_p *p) {
  int r = in[0]->ndim;
  bool up = !strcmp(n->op_type, "Upsample");
  bool old = up || n->opset < 11;
  const char *mode = attr_s(n, "mode", "nearest");
  p->mode = !strcmp(mode, "nearest") ? 0 : (!strcmp(mode, "linear") || !strcmp(mode, "bilinear")) ? 1 : !strcmp(mode, "cubic") ? 2 : -1;
  if (p->mode < 0) return NODE_ERR(n, CINFER_UNSUPPORTED, "mode '%s'", mode);
  const char *ct = old ? "asymmetric" : attr_s(n, "coordinate_transformation_mode", "half_pixel");
  static const char *cts[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nearest", "tf_crop_and_resize"};
  p->ctm = -1;
  for (int i = 0; i < 6; i++) if (!strcmp(ct, cts[i])) p->ctm = i;
  if (p->ctm < 0) return NODE_ERR(n, CINFER_UNSUPPORTED, "coordinate_transformation_mode '%s'", ct);
  const char *nm = old ? "floor" : attr_s(n, "nearest_mode", "round_prefer_floor");
  static const char *nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  p->nmode = -1;
  for (int i = 0; i < 4; i++) if (!strcmp(nm, nms[i])) p->nmode = i;
  if (p->nmode < 0) return NODE_ERR(n, CINFER_UNSUPPORTED, "nearest_mode '%s'", nm);
  if (node_attr(n, "axes") || strcmp(attr_s(n, "keep_aspect_ratio_policy", "stretch"), "stretch"))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "axes / keep_aspect_ratio_policy");
  if (attr_i(n, "antialias", 0)) return NODE_ERR(n, CINFER_UNSUPPORTED, "antialias=1");
  p->cubic_a = attr_f(n, "cubic_coeff_a", -0.75f);
  p->extrap = attr_f(n, "extrapolation_value", 0.0f);
  p->exclude_outside = attr_i(n, "exclude_outside", 0) != 0;
  for (int i = 0; i < r; i++) { p->roi_s[i] = 0; p->roi_e[i] = 1; }
  const ot *scales = NULL, *sizes = NULL, *roi = NULL;
  const onnx_attr *sa = NULL;
  if (up && n->opset < 9) {
    sa = node_attr(n, "scales");
    if (!sa || sa->type != ATTR_FS || sa->n != r) return NODE_ERR(n, CINFER_INVALID_ARG, "scales attribute must have %d values", r);
  } else if (old) {
    if (n->n_in < 2) return NODE_ERR(n, CINFER_INVALID_ARG, "missing scales input");
    scales = in[1];
  } else {
    roi = n->n_in > 1 ? in[1] : NULL;
    scales = n->n_in > 2 ? in[2] : NULL;
    sizes = n->n_in > 3 ? in[3] : NULL;
  }
  if (scales && ot_numel(scales) == 0) scales = NULL;
  if (sizes && ot_numel(sizes) == 0) sizes = NULL;
  if (roi && ot_numel(roi) == 0) roi = NULL;
  if (scales) REQUIRE_STATIC(n, scales, "scales");
  if (sizes) REQUIRE_STATIC(n, sizes, "sizes");
  if (roi && p->ctm == 5) {
    REQUIRE_STATIC(n, roi, "roi");
    if (ot_numel(roi) != 2 * r) return NODE_ERR(n, CINFER_INVALID_ARG, "roi must have %d values", 2 * r);
    for (int i = 0; i < r; i++) { p->roi_s[i] = ot_get_f(roi, i); p->roi_e[i] = ot_get_f(roi, i + r); }
  }
  if (!sa && !scales && !sizes) return NODE_ERR(n, CINFER_INVALID_ARG, "needs scales or sizes");
  if ((scales && ot_numel(scales) != r) || (sizes && ot_numel(sizes) != r))
    return NODE_ERR(n, CINFER_INVALID_ARG, "scales/sizes must have %d values", r);
  for (int i = 0; i < r; i++) {
    if (sizes) {
      p->out[i] = ot_get_i(sizes, i);
      if (p->out[i] < 0 || p->out[i] > (1 << 24)) return NODE_ERR(n, CINFER_INVALID_ARG, "bad size");
      p->scale[i] = in[0]->dims[i] ? (double)p->out[i] / (double)in[0]->dims[i] : 1;
      p->out_f[i] = (double)p->out[i];
    } else {
      double s = sa ? sa->fs[i] : ot_get_f(scales, i);
      if (!(s > 0) || s > 65536) return NODE_ERR(n, CINFER_INVALID_ARG, "bad scale %g", s);
      p->scale[i] = s;
      double o = floor((double)in[0]->dims[i] * (p->roi_e[i] - p->roi_s[i]) * s + 1e-9);
      if (o > (1 << 24)) return NODE_ERR(n, CINFER_INVALID_ARG, "output too large");
      p->out[i] = (int64_t)o;
      p->out_f[i] = (double)in[0]->dims[i] * s;
    }
  }
  return NULL;
}

cinfer_status *resize_infer(const onnx_node *n, ot **in, ot **out) {
  NEED_F32(n, in[0]);
  resize_p p;
  cinfer_status *st = resize_params(n, in, &p);
  if (st) return st;
  set_shape(out[0], CINFER_TYPE_FP32, in[0]->ndim, p.out);
  return NULL;
}

static double resize_coord(const resize_p *p, int d, int64_t x, int64_t in, int64_t out) {
  double s = p->scale[d];
  switch (p->ctm) {
    case 0: return ((double)x + 0.5) / s - 0.5;
    case 1: return (double)x / s;
    case 2: return out == 1 ? 0 : (double)x * (double)(in - 1) / (p->out_f[d] - 1);
    case 3: return out > 1 ? ((double)x + 0.5) / s - 0.5 : 0;
    case 4: return ((double)x + 0.5) / s;
    default:
      return out > 1 ? p->roi_s[d] * (double)(in - 1) + (double)x * (p->roi_e[d] - p->roi_s[d]) * (double)(in - 1) / (double)(out - 1)
                     : 0.5 * (p->roi_s[d] + p->roi_e[d]) * (double)(in - 1);
  }
}

static double cubic_w(double t, double a) {
  t = fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

static int64_t resize_nearest(const resize_p *p, int d, int64_t x, int64_t in, int64_t out) {
  double c = resize_coord(p, d, x, in, out), f;
  switch (p->nmode) {
    case 0: f = (c == floor(c) + 0.5) ? floor(c) : round(c); break;
    case 1: f = (c == floor(c) + 0.5) ? ceil(c) : round(c); break;
    case 2: f = floor(c); break;
    default: f = ceil(c); break;
  }
  int64_t i = (int64_t)f;
  return i < 0 ? 0 : i >= in ? in - 1 : i;
}

/* Resamples along dim d: src shape sd -> dst (same but dims[d] = out). Separable. */
static void resize_axis(const resize_p *p, int d, const float *src, const int64_t *sd, int r,
                        float *dst, int64_t out) {
  int64_t outer = prod(sd, 0, d), inner = prod(sd, d + 1, r), in = sd[d];
  for (int64_t x = 0; x < out; x++) {
    double c = resize_coord(p, d, x, in, out);
    int64_t idx[4];
    double w[4];
    int taps = 0;
    bool outside = p->ctm == 5 && (c < 0 || c > (double)(in - 1));
    if (p->mode == 0) {
      double f;
      switch (p->nmode) {
        case 0: f = (c == floor(c) + 0.5) ? floor(c) : round(c); break;
        case 1: f = (c == floor(c) + 0.5) ? ceil(c) : round(c); break;
        case 2: f = floor(c); break;
        default: f = ceil(c); break;
      }
      int64_t i = (int64_t)f;
      idx[0] = i < 0 ? 0 : i >= in ? in - 1 : i;
      w[0] = 1;
      taps = 1;
    } else if (p->mode == 1) {
      double cc = c < 0 ? 0 : c > (double)(in - 1) ? (double)(in - 1) : c;
      int64_t i0 = (int64_t)floor(cc), i1 = i0 + 1 < in ? i0 + 1 : in - 1;
      double t = cc - (double)i0;
      idx[0] = i0; w[0] = 1 - t; idx[1] = i1; w[1] = t;
      taps = 2;
    } else {
      int64_t i0 = (int64_t)floor(c);
      double t = c - (double)i0, sum = 0;
      for (int k = 0; k < 4; k++) {
        int64_t i = i0 - 1 + k;
        double ww = cubic_w(t - (k - 1), p->cubic_a);
        if (p->exclude_outside && (i < 0 || i >= in)) ww = 0;
        idx[k] = i < 0 ? 0 : i >= in ? in - 1 : i;
        w[k] = ww;
        sum += ww;
      }
      if (p->exclude_outside && sum != 0) for (int k = 0; k < 4; k++) w[k] /= sum;
      taps = 4;
    }
    for (int64_t o = 0; o < outer; o++) {
      float *dd = dst + (o * out + x) * inner;
      const float *ss = src + o * in * inner;
      if (outside) { for (int64_t i = 0; i < inner; i++) dd[i] = p->extrap; continue; }
      for (int64_t i = 0; i < inner; i++) {
        double v = 0;
        for (int k = 0; k < taps; k++) v += w[k] * ss[idx[k] * inner + i];
        dd[i] = (float)v;
      }
    }
  }
}

typedef struct {
  const resize_p *p;
  const float *S;
  float *D;
  int r;
  int64_t istr[OT_MAX_DIMS], in_dims[OT_MAX_DIMS], W, inW, rows, nch;
  bool tab, dup2;
  int64_t col[1024];
} nearest_ctx;

/* output rows [lo, hi) of chunk c of a nearest resize (resize_exec); a row reading the same
 * source row as the previous one of the chunk is a copy of it */
static void nearest_chunk(void *vc, int64_t ch, int tid) {
  (void)tid;
  const nearest_ctx *c = vc;
  const resize_p *p = c->p;
  int r = c->r;
  int64_t lo = 0, hi = c->rows;
  if (c->nch > 1) opool_range(c->rows, c->nch, ch, &lo, &hi);
  int64_t idx[OT_MAX_DIMS] = {0}, rem = lo, W = c->W, inW = c->inW;
  for (int d = r - 2; d >= 0; d--) { idx[d] = rem % p->out[d]; rem /= p->out[d]; }
  const float *S = c->S;
  float *D = c->D;
  int64_t prev = -1;
  for (int64_t row = lo; row < hi; row++) {
    int64_t o = row * W, base = 0;
    for (int d = 0; d < r - 1; d++) base += resize_nearest(p, d, idx[d], c->in_dims[d], p->out[d]) * c->istr[d];
    if (base == prev) memcpy(D + o, D + o - W, sizeof(float) * (size_t)W);
    else if (c->dup2) {
      typedef float v8 __attribute__((vector_size(32), aligned(4)));
      int64_t xi = 0;
      for (; xi + 8 <= inW; xi += 8) { /* __builtin_shufflevector: GCC >= 12 and clang */
        v8 a = *(const v8 *)(S + base + xi);
        *(v8 *)(D + o + 2 * xi) = __builtin_shufflevector(a, a, 0, 0, 1, 1, 2, 2, 3, 3);
        *(v8 *)(D + o + 2 * xi + 8) = __builtin_shufflevector(a, a, 4, 4, 5, 5, 6, 6, 7, 7);
      }
      for (; xi < inW; xi++) D[o + 2 * xi] = D[o + 2 * xi + 1] = S[base + xi];
    } else if (c->tab) for (int64_t xo = 0; xo < W; xo++) D[o + xo] = S[base + c->col[xo]];
    else for (int64_t xo = 0; xo < W; xo++) D[o + xo] = S[base + resize_nearest(p, r - 1, xo, inW, W)];
    prev = base;
    for (int d = r - 2; d >= 0; d--) { if (++idx[d] < p->out[d]) break; idx[d] = 0; }
  }
}

cinfer_status *resize_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  resize_p p;
  cinfer_status *st = resize_params(n, in, &p);
  if (st) return st;
  int r = in[0]->ndim;
  int64_t cur[OT_MAX_DIMS];
  memcpy(cur, in[0]->dims, sizeof cur);
  int todo[OT_MAX_DIMS], nt = 0;
  for (int d = 0; d < r; d++)
    if (p.out[d] != cur[d] || p.scale[d] != 1.0 || p.ctm == 5) todo[nt++] = d;
  if (nt == 0) { memcpy(out[0]->data, in[0]->data, ot_nbytes(in[0])); return NULL; }
  if (p.mode == 0 && p.ctm != 5) {
    /* nearest: one gather pass, no scratch (same index rule as resize_axis), over row
     * ranges on the pool (a row's values do not depend on the range it is in) */
    nearest_ctx c = {.p = &p, .S = in[0]->data, .D = out[0]->data, .r = r};
    int64_t acc = 1, total = ot_numel(out[0]);
    for (int d = r - 1; d >= 0; d--) { c.istr[d] = acc; acc *= in[0]->dims[d]; }
    memcpy(c.in_dims, in[0]->dims, sizeof c.in_dims);
    c.W = p.out[r - 1];
    c.inW = in[0]->dims[r - 1];
    /* the column index rule is the same for every row: tabulate it (rows up to 1024 wide) */
    c.tab = c.W <= 1024;
    if (c.tab)
      for (int64_t xo = 0; xo < c.W; xo++) c.col[xo] = resize_nearest(&p, r - 1, xo, c.inW, c.W);
    /* the FPN's 2x upsampling: col[xo] == xo / 2, every source value written twice */
    c.dup2 = c.tab && c.W == 2 * c.inW;
    for (int64_t xo = 0; c.dup2 && xo < c.W; xo++) c.dup2 = c.col[xo] == xo / 2;
    c.rows = c.W ? total / c.W : 0;
    c.nch = x->threads > 1 ? opool_chunks(c.rows, (double)total, OPOOL_MIN_ELEMS) : 1;
    if (c.nch > 1) opool_par(c.nch, nearest_chunk, &c);
    else if (c.rows) nearest_chunk(&c, 0, 0);
    return NULL;
  }
  /* two scratch buffers as large as the largest intermediate */
  int64_t maxe = ot_numel(in[0]), e = maxe;
  for (int i = 0; i < nt; i++) {
    e = e / (cur[todo[i]] ? cur[todo[i]] : 1) * p.out[todo[i]];
    cur[todo[i]] = p.out[todo[i]];
    if (e > maxe) maxe = e;
  }
  memcpy(cur, in[0]->dims, sizeof cur);
  float *buf[2] = {malloc(sizeof(float) * (size_t)(maxe + 1)), malloc(sizeof(float) * (size_t)(maxe + 1))};
  if (!buf[0] || !buf[1]) { free(buf[0]); free(buf[1]); return NODE_ERR(n, CINFER_INTERNAL, "out of memory"); }
  const float *src = in[0]->data;
  for (int i = 0; i < nt; i++) {
    float *dst = i == nt - 1 ? out[0]->data : buf[i & 1];
    resize_axis(&p, todo[i], src, cur, r, dst, p.out[todo[i]]);
    cur[todo[i]] = p.out[todo[i]];
    src = dst;
  }
  free(buf[0]);
  free(buf[1]);
  return NULL;
}
