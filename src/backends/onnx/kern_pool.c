/* kern_pool.c: the pooling family, two entries: MaxPool / AveragePool (2-D, float, one
 * output) on
 *   "pool8c"    nChw8c in and out (our kernel; between blocked convs: DenseNet's 3x3
 *               stride-2 MaxPool took 1.18 ms on oneDNN 2.6's AVX2 pooling, 0.58 on ONNX
 *               Runtime), taken when the input is nChw8c and every consumer reads blocked
 *               (CINFER_ONNX_NO_BPOOL, CINFER_ONNX_PLAIN: off);
 *   "dnnlpool"  anything else: oneDNN's jit pooling on nChw8c, with reorders from the
 *               producer's layout and to plain NCHW when a consumer wants plain.
 * CINFER_ONNX_NO_FAST_POOL turns both off. Average pooling whose ceil_mode window reaches
 * past the declared end padding stays on the reference kernel (oneDNN would count the
 * extra cells). Numerics: max is exact (the reference's NaN rule: the first tap taken as
 * is, later ones when greater); average sums in float (the reference in double), then
 * divides once. Invariants: pool_geom is the one test both entries and reads_blocked use,
 * so a step whose input the plan kept blocked is always taken by one of them; pool8c
 * needs C % 8 == 0 (whole vectors, no padded channels); dnnlpool's reorders go through
 * temp[0] (in) and temp[1] (out); neither allocates in run. */

#include "backends/onnx/kern_util.h"

typedef struct {
  fast_kernel base;
  conv_geom g;
  bool max, incl; /* MaxPool; AveragePool with count_include_pad */
  int64_t blk;     /* the layout's block, 8 or 16 (kern_block()); vectors of 8 channels */
} pool8c_kernel;

typedef struct {
  fast_kernel base;
  dnnl_primitive_t prim, src_reorder, dst_reorder;
  dnnl_memory_t src_user, src_mem, dst_mem, dst_user;
  dnnl_stream_t stream;
} dnnlpool_kernel;

/* Whether the pooling fast paths take step s, and its geometry (right pads as oneDNN
 * wants them). The single source of that decision for both entries and reads_blocked. */
static bool pool_geom(const plan_step *s, conv_geom *g, dnnl_dims_t pr) {
  if ((strcmp(s->node->op_type, "MaxPool") && strcmp(s->node->op_type, "AveragePool")) ||
      getenv("CINFER_ONNX_NO_FAST_POOL"))
    return false;
  const ot *x = s->in[0], *y = s->out[0];
  bool maxp = !strcmp(s->node->op_type, "MaxPool");
  if (x->ndim != 4 || x->dtype != CINFER_TYPE_FP32 || ot_numel(y) == 0 || (s->n_out > 1 && s->out[1]))
    return false;
  if (!kern_geom(s->node, x, NULL, true, g)) return false;
  for (int i = 0; i < 2; i++) {
    pr[i] = (y->dims[2 + i] - 1) * g->stride[i] + (g->k[i] - 1) * g->dil[i] + 1 - x->dims[2 + i] - g->pb[i];
    if (!maxp && pr[i] != g->pe[i]) return false;
    if (pr[i] < 0) pr[i] = 0;
  }
  return true;
}

/* either entry reads a blocked input (dnnlpool reorders any blocking it does not take) */
static bool pool_reads_blocked(const onnx_plan *p, const plan_step *s, int j) {
  (void)p;
  conv_geom g;
  dnnl_dims_t pr;
  return j == 0 && pool_geom(s, &g, pr);
}

static bool pool8c_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  conv_geom g;
  dnnl_dims_t pr;
  return keep && pool_geom(s, &g, pr) && !getenv("CINFER_ONNX_PLAIN") && !getenv("CINFER_ONNX_NO_BPOOL") &&
         s->in[0]->dims[1] % kern_block() == 0 && g.sp == 2 && kern_is_blocked(p->layout[s->in_id[0]], s->in[0], kern_block());
}

static cinfer_status *pool8c_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  (void)keep;
  pool8c_kernel *k = calloc(1, sizeof *k);
  dnnl_dims_t pr;
  if (!k || !kern_out_blocked(p, s, s->out[0]->dims[1], kern_block())) {
    free(k);
    return kern_oom();
  }
  pool_geom(s, &k->g, pr);
  k->blk = kern_block();
  k->max = !strcmp(s->node->op_type, "MaxPool");
  k->incl = attr_i(s->node, "count_include_pad", 0) != 0;
  *out = &k->base;
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

/* one output vector of pool8c_run, any window position (borders: taps checked one by one) */
static inline v8f pool8c_one(const conv_geom *g, const float *xc, int64_t B, int64_t IH, int64_t IW, int64_t ih0,
                             int64_t iw0, bool maxp, bool incl) {
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
      v8f v = *(const v8fu *)(xc + (size_t)(ih * IW + iw) * (size_t)B);
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

/* 8 channels per vector, with the reference's rules (pool_exec): max over the taps inside
 * the image, the first taken as is and later ones when greater (NaN as there; no tap:
 * -inf); average over the taps inside the image, or with count_include_pad over those
 * inside the declared padding (a window stops at the declared end padding). Columns whose
 * window lies inside the image take a loop without per-tap checks. */
static void pool8c_rows(const fast_kernel *fk, const plan_step *s, int64_t r0, int64_t r1) {
  const pool8c_kernel *k = (const pool8c_kernel *)fk;
  const conv_geom *g = &k->g;
  int64_t IH = g->in[0], IW = g->in[1], OH = g->out[0], OW = g->out[1];
  int64_t KH = g->k[0], KW = g->k[1], DH = g->dil[0], DW = g->dil[1], SW = g->stride[1], PW = g->pb[1];
  const float *X = s->in[0]->data;
  float *Y = s->out[0]->data;
  bool maxp = k->max, incl = k->incl;
  /* vector c8 of a pixel: block c8 / R, lanes (c8 % R) * 8; pixels B floats apart */
  const int64_t B = k->blk, R = B / 8, C8 = g->C / 8;
  /* columns whose KW taps all lie inside the image: [ow_lo, ow_hi) */
  int64_t ow_lo = (PW + SW - 1) / SW, last = IW - 1 + PW - (KW - 1) * DW;
  int64_t ow_hi = last < 0 ? 0 : last / SW + 1;
  if (ow_hi > OW) ow_hi = OW;
  if (ow_lo > ow_hi) ow_lo = ow_hi;
  for (int64_t row = r0; row < r1; row++) {
    int64_t nc = row / OH, oh = row % OH, ih0 = oh * g->stride[0] - g->pb[0];
    int64_t n = nc / C8, c8 = nc % C8, plane = n * (C8 / R) + c8 / R, lane = (c8 % R) * 8;
    const float *xc = X + (size_t)(plane * IH * IW * B + lane);
    float *yr = Y + (size_t)((plane * OH + oh) * OW * B + lane);
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
    for (; ow < lo; ow++) *(v8fu *)(yr + ow * B) = pool8c_one(g, xc, B, IH, IW, ih0, ow * SW - PW, maxp, incl);
    /* interior: no checks; same taps in the same order as pool8c_one */
    const float *x0 = xc + (size_t)((ih0 + kv * DH) * IW * B);
    if (maxp)
      for (; ow < hi; ow++) {
        const float *xp = x0 + (size_t)((ow * SW - PW) * B);
        v8f acc = *(const v8fu *)xp;
        for (int64_t kh = 0; kh < nkv; kh++)
          for (int64_t kw = 0; kw < KW; kw++)
            acc = v8_max_keep(*(const v8fu *)(xp + (size_t)((kh * DH * IW + kw * DW) * B)), acc);
        *(v8fu *)(yr + ow * B) = acc;
      }
    else {
      v8f dv = v8_splat((float)((incl ? npad : nkv) * KW));
      for (; ow < hi; ow++) {
        const float *xp = x0 + (size_t)((ow * SW - PW) * B);
        v8f acc = {0};
        for (int64_t kh = 0; kh < nkv; kh++)
          for (int64_t kw = 0; kw < KW; kw++) acc = acc + *(const v8fu *)(xp + (size_t)((kh * DH * IW + kw * DW) * B));
        *(v8fu *)(yr + ow * B) = acc / dv;
      }
    }
    for (; ow < OW; ow++) *(v8fu *)(yr + ow * B) = pool8c_one(g, xc, B, IH, IW, ih0, ow * SW - PW, maxp, incl);
  }
}

typedef struct {
  const fast_kernel *fk;
  const plan_step *s;
  int64_t rows, n;
} prow_ctx;

static void pool8c_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const prow_ctx *x = vc;
  int64_t lo, hi;
  opool_range(x->rows, x->n, c, &lo, &hi);
  pool8c_rows(x->fk, x->s, lo, hi);
}

static cinfer_status *pool8c_run(fast_kernel *fk, plan_step *s, int threads) {
  (void)threads;
  const conv_geom *g = &((const pool8c_kernel *)fk)->g;
  int64_t rows = g->N * (g->C / 8) * g->out[0];
  double work = (double)(rows * g->out[1] * 8) * (double)(g->k[0] * g->k[1]); /* taps read */
  prow_ctx x = {fk, s, rows, opool_chunks(rows, work, OPOOL_MIN_ELEMS)};
  opool_par(x.n, pool8c_chunk, &x);
  return NULL;
}

static bool dnnlpool_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  (void)keep;
  return pool_reads_blocked(p, s, 0);
}

static void dnnlpool_destroy(fast_kernel *fk) {
  dnnlpool_kernel *k = (dnnlpool_kernel *)fk;
  dnnl_primitive_t prims[] = {k->prim, k->src_reorder, k->dst_reorder};
  for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++) if (prims[i]) dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {k->src_user, k->src_mem, k->dst_mem, k->dst_user};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++) if (mems[i]) dnnl_memory_destroy(mems[i]);
  if (k->stream) dnnl_stream_destroy(k->stream);
  free(k);
}

/* keep: every consumer takes the blocked layout: the output stays nChw8c. A blocked input
 * (from a conv) is read as is (or reordered from another blocking). oneDNN's jit pooling
 * wants the blocked layout (its NCHW pooling is a slow generic one): reorder in, pool,
 * reorder out. */
static cinfer_status *dnnlpool_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  cinfer_status *st = NULL;
  const ot *x = s->in[0], *y = s->out[0];
  bool maxp = !strcmp(s->node->op_type, "MaxPool");
  conv_geom g;
  dnnl_dims_t pr;
  pool_geom(s, &g, pr);
  dnnl_dims_t xd = {x->dims[0], x->dims[1], x->dims[2], x->dims[3]};
  dnnl_dims_t yd = {y->dims[0], y->dims[1], y->dims[2], y->dims[3]};
  dnnl_dims_t strides = {g.stride[0], g.stride[1]}, kern = {g.k[0], g.k[1]};
  dnnl_dims_t dil = {g.dil[0] - 1, g.dil[1] - 1}, pl = {g.pb[0], g.pb[1]};
  bool incl = attr_i(s->node, "count_include_pad", 0) != 0;
  dnnlpool_kernel *k = calloc(1, sizeof *k);
  if (!k) return kern_oom();
  dnnl_memory_desc_t x_md, y_md, xb_md, yb_md;
  dnnl_pooling_v2_desc_t pdsc;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_engine_t eng = kern_engine();
  DN(dnnl_memory_desc_init_by_tag(&x_md, 4, xd, dnnl_f32, dnnl_nchw));
  DN(dnnl_memory_desc_init_by_tag(&y_md, 4, yd, dnnl_f32, dnnl_nchw));
  /* the plan's block (nChw16c on an AVX-512 host) when the channels fill it, else 8 */
  dnnl_format_tag_t btag = kern_block() == 16 && xd[1] % 16 == 0 ? dnnl_aBcd16b : dnnl_aBcd8b;
  DN(dnnl_memory_desc_init_by_tag(&xb_md, 4, xd, dnnl_f32, btag));
  DN(dnnl_memory_desc_init_by_tag(&yb_md, 4, yd, dnnl_f32, btag));
  DN(dnnl_pooling_v2_forward_desc_init(&pdsc, dnnl_forward_inference,
                                       maxp ? dnnl_pooling_max : incl ? dnnl_pooling_avg_include_padding
                                                                       : dnnl_pooling_avg_exclude_padding,
                                       &xb_md, &yb_md, strides, kern, dil, pl, pr));
  DN(dnnl_primitive_desc_create(&pd, &pdsc, NULL, eng, NULL));
  dnnl_status_t r = dnnl_primitive_create(&k->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  DN(r);
  DN(dnnl_stream_create(&k->stream, eng, dnnl_stream_default_flags));
  const dnnl_memory_desc_t *x_have = p->layout[s->in_id[0]] ? p->layout[s->in_id[0]] : &x_md;
  DN(dnnl_memory_create(&k->src_mem, &xb_md, eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&k->dst_mem, &yb_md, eng, DNNL_MEMORY_NONE));
  if (!dnnl_memory_desc_equal(x_have, &xb_md)) {
    DN(dnnl_memory_create(&k->src_user, x_have, eng, DNNL_MEMORY_NONE));
    DN(kern_make_reorder(x_have, &xb_md, &k->src_reorder));
    s->temp_bytes[0] = dnnl_memory_desc_get_size(&xb_md);
  }
  if (keep && !getenv("CINFER_ONNX_PLAIN")) {
    dnnl_memory_desc_t *l = malloc(sizeof *l);
    if (!l) { st = kern_oom(); goto fail; }
    *l = yb_md;
    p->layout[s->out_id[0]] = l;
    p->bytes[s->out_id[0]] = dnnl_memory_desc_get_size(&yb_md);
  } else {
    DN(dnnl_memory_create(&k->dst_user, &y_md, eng, DNNL_MEMORY_NONE));
    DN(kern_make_reorder(&yb_md, &y_md, &k->dst_reorder));
    s->temp_bytes[1] = dnnl_memory_desc_get_size(&yb_md);
  }
  *out = &k->base;
  return NULL;
fail:
  dnnlpool_destroy(&k->base);
  return st;
}

static cinfer_status *dnnlpool_run(fast_kernel *fk, plan_step *s, int threads) {
  (void)threads; /* runs on the calling thread (oneDNN held to one OpenMP thread) */
  dnnlpool_kernel *k = (dnnlpool_kernel *)fk;
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

const kern_family kern_pool8c = {
    .name = "pool8c", .can_take = pool8c_can_take, .prepare = pool8c_prepare, .run = pool8c_run,
    .destroy = kern_free, .reads_blocked = pool_reads_blocked};

const kern_family kern_dnnlpool = {
    .name = "dnnlpool", .can_take = dnnlpool_can_take, .prepare = dnnlpool_prepare, .run = dnnlpool_run,
    .destroy = dnnlpool_destroy, .reads_blocked = pool_reads_blocked};
