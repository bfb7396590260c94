/* test_onnx_kernels.c: every fast kernel against its reference kernel.
 * Builds small Conv graphs in memory over odd sizes, strides, asymmetric padding, groups
 * (incl. depthwise), dilation, 1-D convs, fused activation and Conv+Add, and chains that
 * keep oneDNN's blocked layout between convolutions; runs each with the reference kernels
 * only and with the fast paths, and requires them to agree. Also checks that a batch runs
 * like the same rows one by one, and that plans are reused across runs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <oneapi/dnnl/dnnl.h>

#include "backends/onnx/kern.h"
#include "backends/onnx/onnx.h"
#include "model_builder.h"

static uint32_t rng = 12345;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static float *rand_buf(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

typedef struct conv_cfg {
  int64_t N, C, H, W, M, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, group;
  int bias, act; /* act: 0 none, 1 Relu, 2 Clip(0,6), 3 LeakyRelu, 4 PRelu (slope [M,1,1]),
                    5 PRelu (one slope), 6 Tanh, 7 Sigmoid */
  int chain;     /* 1: append 1x1 conv + Add(+Relu) + depthwise 3x3: blocked layouts, sum fusion;
                    2: depthwise 3x3 stride 1 (bias, Relu) + 1x1 conv, 3: depthwise 3x3 stride 1
                    (bias) as the output: the small-K conv's fused depthwise conv */
  int one_d;     /* 1-D conv (uses H as length) */
  int pre;       /* element-wise ops with constants in front of the conv, fused into a
                    small-K conv's input read: 1 (x - 0.25) * 1.5 (scalar constants);
                    2 0.5 / x (one per channel, [C,1,1]) + c ([1,C,1,1]); 3 as 1, but the
                    Sub's output also feeds a second branch (not fusable), added to out */
} conv_cfg;

/* adds cfg->pre's nodes from "x"; returns the name of the conv's input */
static const char *build_pre(mb *b, const conv_cfg *c) {
  if (!c->pre) return "x";
  const char *s = "pre_s", *o = "pre_o";
  if (c->pre == 1 || c->pre == 3) {
    float a = 0.25f, k = 1.5f;
    mb_init_f(b, "pre_a", 1, (int64_t[]){1}, &a);
    mb_init_f(b, "pre_k", 0, NULL, &k);
    mb_node(b, "Sub", "pre_sub", 2, (const char *[]){"x", "pre_a"}, 1, &s);
    mb_node(b, "Mul", "pre_mul", 2, (const char *[]){s, "pre_k"}, 1, &o);
    return o;
  }
  float *num = malloc(sizeof(float) * (size_t)c->C), *add = malloc(sizeof(float) * (size_t)c->C);
  for (int64_t i = 0; i < c->C; i++) { num[i] = 0.5f + 0.25f * (float)i; add[i] = -0.125f * (float)i; }
  mb_init_f(b, "pre_n", 3, (int64_t[]){c->C, 1, 1}, num);
  mb_init_f(b, "pre_c", 4, (int64_t[]){1, c->C, 1, 1}, add);
  mb_node(b, "Div", "pre_div", 2, (const char *[]){"pre_n", "x"}, 1, &s);
  mb_node(b, "Add", "pre_add", 2, (const char *[]){s, "pre_c"}, 1, &o);
  free(num);
  free(add);
  return o;
}

static uint8_t *build(const conv_cfg *c, size_t *len, int64_t batch_dim) {
  mb b;
  mb_init(&b, 13);
  int64_t xd[4] = {batch_dim, c->C, c->H, c->W};
  int nd = c->one_d ? 3 : 4;
  if (c->one_d) xd[2] = c->W;
  mb_input(&b, "x", nd, xd);
  int64_t wd[4] = {c->M, c->C / c->group, c->KH, c->KW};
  if (c->one_d) wd[2] = c->KW;
  int64_t wn = wd[0] * wd[1] * wd[2] * (c->one_d ? 1 : wd[3]);
  float *w = rand_buf(wn), *bias = rand_buf(c->M);
  mb_init_f(&b, "w0", nd, wd, w);
  if (c->bias) mb_init_f(&b, "b0", 1, &c->M, bias);
  const char *cin[3] = {build_pre(&b, c), "w0", "b0"};
  const char *y0 = c->act || c->chain || c->pre == 3 ? "y0" : "out";
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv0", c->bias ? 3 : 2, cin, 1, &y0);
  if (c->one_d) {
    mb_attr_ints(&b, n, "strides", 1, (int64_t[]){c->sw});
    mb_attr_ints(&b, n, "pads", 2, (int64_t[]){c->pl, c->pr});
    mb_attr_ints(&b, n, "dilations", 1, (int64_t[]){c->dw});
  } else {
    mb_attr_ints(&b, n, "strides", 2, (int64_t[]){c->sh, c->sw});
    mb_attr_ints(&b, n, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
    mb_attr_ints(&b, n, "dilations", 2, (int64_t[]){c->dh, c->dw});
  }
  mb_attr_i(&b, n, "group", c->group);
  const char *y1 = c->chain || c->pre == 3 ? "y1" : "out";
  if (c->act == 1) mb_node(&b, "Relu", "act", 1, &y0, 1, &y1);
  if (c->act == 3) {
    Onnx__NodeProto *l = mb_node(&b, "LeakyRelu", "act", 1, &y0, 1, &y1);
    Onnx__AttributeProto *a = &b.attrs[b.n_attrs++];
    onnx__attribute_proto__init(a);
    a->name = mb_str(&b, "alpha");
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    a->has_f = 1;
    a->f = 0.1f;
    l->attribute[l->n_attribute++] = a;
  }
  if (c->act == 2) {
    float lo = 0, hi = 6;
    mb_init_f(&b, "lo", 0, NULL, &lo);
    mb_init_f(&b, "hi", 0, NULL, &hi);
    const char *ci[3] = {"y0", "lo", "hi"};
    mb_node(&b, "Clip", "act", 3, ci, 1, &y1);
  }
  float *slope = NULL;
  if (c->act == 4 || c->act == 5) {
    slope = rand_buf(c->M);
    int64_t sd[3] = {c->M, 1, 1};
    mb_init_f(&b, "slope", c->act == 4 ? 3 : 1, c->act == 4 ? sd : (int64_t[]){1}, slope);
    const char *pi[2] = {"y0", "slope"};
    mb_node(&b, "PRelu", "act", 2, pi, 1, &y1);
  }
  if (c->act == 6) mb_node(&b, "Tanh", "act", 1, &y0, 1, &y1);
  if (c->act == 7) mb_node(&b, "Sigmoid", "act", 1, &y0, 1, &y1);
  if (!c->act && (c->chain || c->pre == 3)) y1 = "y0";
  float *wb = NULL;
  if (c->pre == 3) { /* the same conv geometry on the Sub's output: out = y1 + conv(pre_s) */
    wb = rand_buf(wn);
    mb_init_f(&b, "wb", nd, wd, wb);
    const char *bi[2] = {"pre_s", "wb"}, *bo = "yb", *ai[2] = {y1, "yb"}, *ao = c->chain == 1 ? "yab" : "out";
    Onnx__NodeProto *cb = mb_node(&b, "Conv", "convb", 2, bi, 1, &bo);
    mb_attr_ints(&b, cb, "strides", 2, (int64_t[]){c->sh, c->sw});
    mb_attr_ints(&b, cb, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
    mb_attr_ints(&b, cb, "dilations", 2, (int64_t[]){c->dh, c->dw});
    mb_node(&b, "Add", "addb", 2, ai, 1, &ao);
    y1 = ao;
  }
  float *w1 = NULL, *w2 = NULL;
  float *wdw = NULL, *bdw = NULL, *w3 = NULL;
  if (c->chain >= 2) {
    int64_t wdd[4] = {c->M, 1, 3, 3}, w3d[4] = {c->M, c->M, 1, 1};
    wdw = rand_buf(c->M * 9);
    bdw = rand_buf(c->M);
    mb_init_f(&b, "wdw", 4, wdd, wdw);
    mb_init_f(&b, "bdw", 1, &c->M, bdw);
    const char *di[3] = {y1, "wdw", "bdw"}, *dout = c->chain == 2 ? "d" : "out";
    Onnx__NodeProto *dn = mb_node(&b, "Conv", "convdw", 3, di, 1, &dout);
    mb_attr_i(&b, dn, "group", c->M);
    mb_attr_ints(&b, dn, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (c->chain == 2) {
      const char *dr = "dr", *i3[2] = {"dr", "w3"}, *o3 = "out";
      mb_node(&b, "Relu", "relu_dw", 1, &dout, 1, &dr);
      w3 = rand_buf(c->M * c->M);
      mb_init_f(&b, "w3", 4, w3d, w3);
      mb_node(&b, "Conv", "conv3", 2, i3, 1, &o3);
    }
  }
  if (c->chain == 1) {
    int64_t w1d[4] = {c->M, c->M, 1, 1}, w2d[4] = {c->M, 1, 3, 3};
    w1 = rand_buf(c->M * c->M);
    w2 = rand_buf(c->M * 9);
    mb_init_f(&b, "w1", 4, w1d, w1);
    mb_init_f(&b, "w2", 4, w2d, w2);
    const char *i1[2] = {y1, "w1"}, *o1 = "c1";
    mb_node(&b, "Conv", "conv1", 2, i1, 1, &o1);
    const char *ia[2] = {"c1", y1}, *oa = "s";
    mb_node(&b, "Add", "add", 2, ia, 1, &oa);
    const char *or_ = "r";
    mb_node(&b, "Relu", "relu2", 1, &oa, 1, &or_);
    const char *i2[2] = {"r", "w2"}, *o2 = "out";
    Onnx__NodeProto *dw = mb_node(&b, "Conv", "conv2", 2, i2, 1, &o2);
    mb_attr_i(&b, dw, "group", c->M);
    mb_attr_ints(&b, dw, "pads", 4, (int64_t[]){1, 1, 1, 1});
  }
  mb_output(&b, "out");
  uint8_t *buf;
  *len = mb_pack(&b, &buf);
  free(w);
  free(bias);
  free(w1);
  free(w2);
  free(wdw);
  free(bdw);
  free(w3);
  free(wb);
  free(slope);
  mb_done(&b);
  return buf;
}

/* s's profile print as a string (caller frees) */
static char *profile_text(const onnx_session *s) {
  char *prof = NULL;
  size_t plen = 0;
  FILE *f = open_memstream(&prof, &plen);
  onnx_session_profile_print(s, f);
  fclose(f);
  return prof;
}

/* whether a profile's operator table has a row run by a fast kernel (a kernel column
 * other than "ref"; the columns: operator, nodes, kernel, ms/run, share) */
static bool profile_has_fast(const char *prof) {
  for (const char *l = prof; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    char op[64], kern[32];
    int nodes;
    bool row = l[0] == ' ' && l[1] == ' ' && l[2] != ' '; /* table rows: indented by two */
    if (row && sscanf(l, "%63s %d %31s", op, &nodes, kern) == 3 && strcmp(kern, "ref")) return true;
  }
  return false;
}

static void run(onnx_model *m, bool fast, const float *x, const int64_t *shape, int nd,
                float **out, size_t *out_n, bool *used_fast) {
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 2, .no_fast = !fast, .profile = true}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = nd, .data = x};
  memcpy(in.shape, shape, sizeof(int64_t) * (size_t)nd);
  in.byte_size = (size_t)cinfer_shape_elements(shape, nd) * 4;
  cinfer_tensor o;
  for (int rep = 0; rep < 2; rep++) { /* second run reuses the cached plan */
    cinfer_status *st = onnx_session_run(s, &in, 1, &o);
    if (st) fail_msg("run: %s", cinfer_status_message(st));
  }
  *out_n = o.byte_size / 4;
  *out = malloc(o.byte_size + 4);
  memcpy(*out, o.data, o.byte_size);
  char *prof = profile_text(s);
  *used_fast = profile_has_fast(prof);
  free(prof);
  onnx_session_destroy(s);
}

/* Packs the builder's model (releasing the builder) and loads it; fails the test on error. */
static onnx_model *load_built(mb *b) {
  uint8_t *buf;
  size_t len = mb_pack(b, &buf);
  mb_done(b);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  free(buf);
  return m;
}

/* Runs m on x with the reference kernels only and with the fast paths (which must really
 * run); returns the largest |ref - fast| and in *mx the largest |ref|. */
static double ref_fast_max_diff(onnx_model *m, const float *x, const int64_t *shape, int nd, double *mx) {
  float *ref, *fast;
  size_t nr, nf;
  bool fr, ff;
  run(m, false, x, shape, nd, &ref, &nr, &fr);
  run(m, true, x, shape, nd, &fast, &nf, &ff);
  assert_false(fr);
  assert_true(ff);
  assert_int_equal(nr, nf);
  double md = 0;
  *mx = 0;
  for (size_t i = 0; i < nr; i++) {
    *mx = fmax(*mx, fabs(ref[i]));
    md = fmax(md, fabs(ref[i] - fast[i]));
  }
  free(ref);
  free(fast);
  return md;
}

/* The profile of one run of m on x (one thread, fast paths), as a string (caller frees). */
static char *profile_run(onnx_model *m, const float *x, const int64_t *shape, int nd) {
  onnx_session *se;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1, .profile = true}, &se));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = nd, .data = x,
                      .byte_size = (size_t)cinfer_shape_elements(shape, nd) * 4},
                o;
  memcpy(in.shape, shape, sizeof(int64_t) * (size_t)nd);
  assert_null(onnx_session_run(se, &in, 1, &o));
  char *prof = profile_text(se);
  onnx_session_destroy(se);
  return prof;
}

static void check_cfg(const conv_cfg *c) {
  size_t len;
  uint8_t *buf = build(c, &len, c->N);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  free(buf);
  int nd = c->one_d ? 3 : 4;
  int64_t shape[4] = {c->N, c->C, c->H, c->W};
  if (c->one_d) shape[2] = c->W;
  float *x = rand_buf(cinfer_shape_elements(shape, nd));
  double mx, md = ref_fast_max_diff(m, x, shape, nd, &mx);
  if (md > 1e-5 * fmax(1.0, mx))
    fail_msg("conv N%lld C%lld %lldx%lld M%lld k%lldx%lld s%lld,%lld p%lld,%lld,%lld,%lld d%lld,%lld g%lld act%d chain%d pre%d: max diff %g (max %g)",
             (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->M,
             (long long)c->KH, (long long)c->KW, (long long)c->sh, (long long)c->sw, (long long)c->pt,
             (long long)c->pl, (long long)c->pb, (long long)c->pr, (long long)c->dh, (long long)c->dw,
             (long long)c->group, c->act, c->chain, c->pre, md, mx);
  free(x);
  onnx_model_destroy(m);
}

static void test_conv_shapes(void **state) {
  const conv_cfg cfgs[] = {
      /* N  C  H  W   M  KH KW sh sw pt pl pb pr dh dw g  bias act chain 1d */
      {1, 3, 17, 23, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},   /* small-K first layer */
      {1, 3, 16, 16, 16, 3, 3, 2, 2, 0, 1, 1, 0, 1, 1, 1, 1, 2, 1, 0},  /* asym pads + chain */
      /* small-K float kernel: M % 8 != 0 (GEMM order, 4+2 channel blocks), row tails */
      {1, 3, 19, 37, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
      {2, 1, 20, 41, 16, 5, 5, 3, 3, 2, 0, 1, 2, 1, 1, 1, 0, 3, 0, 0},  /* C=1, stride 3, leaky */
      {1, 4, 9, 50, 9, 2, 4, 1, 2, 0, 3, 1, 0, 2, 1, 1, 1, 2, 0, 0},    /* K=32, dilated, clip */
      {1, 3, 12, 21, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 0, 0},  /* small-K + PRelu */
      {1, 3, 12, 21, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 5, 0, 0},   /* small-K + scalar PRelu */
      {1, 3, 11, 19, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 0, 0},  /* small-K + Tanh */
      {1, 3, 11, 19, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7, 0, 0},   /* small-K + Sigmoid */
      {1, 16, 9, 11, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 0},  /* oneDNN + PRelu, blocked chain */
      /* small-K writing nChw8c for a blocked consumer chain (M % 8 == 0), row tails of 6 */
      {1, 3, 13, 23, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {2, 3, 9, 17, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 0},
      {1, 2, 8, 10, 24, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 6, 1, 0},
      {1, 3, 9, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0},
      {2, 8, 7, 9, 24, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 4, 0, 0},    /* oneDNN 1x1 + PRelu, plain out */
      {1, 10, 6, 7, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 10, 0, 5, 1, 0},  /* depthwise + scalar PRelu */
      {1, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 0},   /* oneDNN + Tanh */
      {2, 16, 13, 11, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {1, 8, 15, 9, 8, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 8, 1, 1, 0, 0},   /* depthwise dilated */
      {1, 12, 10, 14, 18, 3, 5, 2, 1, 1, 2, 0, 3, 1, 2, 3, 0, 0, 0, 0}, /* grouped */
      {1, 32, 7, 7, 64, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 3, 1, 0},  /* 1x1, leaky */
      {1, 5, 1, 31, 7, 1, 4, 1, 3, 0, 1, 0, 2, 1, 2, 1, 1, 0, 0, 1},   /* 1-D */
      {3, 24, 9, 9, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 24, 1, 2, 1, 0}, /* dw stride 2, clip */
      /* small-K into nChw8c (direct kernel): stride 1 + Relu, 2 blocks; dilated with
       * stride (1, 2) and asymmetric pads; 5x5 stride 3 (generic stride), 3 blocks */
      {1, 3, 12, 21, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {1, 3, 15, 20, 16, 3, 3, 1, 2, 2, 1, 0, 2, 2, 2, 1, 1, 1, 1, 0},
      {2, 1, 20, 41, 24, 5, 5, 3, 3, 2, 0, 1, 2, 1, 1, 1, 1, 3, 1, 0},
      /* fused input ops in front of a small-K conv: blocked out (direct kernel), plain
       * out (strip), per-channel constants, and a Sub output with a second use */
      {1, 3, 17, 23, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},
      {2, 3, 11, 13, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 0, 2},
      {1, 3, 17, 23, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1},
      {1, 4, 9, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2},
      {1, 3, 13, 15, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 3},
      {1, 3, 13, 15, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 3},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check_cfg(&cfgs[i]);
}

/* Whether c's fast outputs are equal bit for bit with environment variable var set to va
 * and to vb (NULL: unset; read when plans are built); var is unset afterwards. */
static bool same_bits_under(const conv_cfg *c, const char *var, const char *va, const char *vb) {
  size_t len;
  uint8_t *buf = build(c, &len, c->N);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  free(buf);
  int64_t shape[4] = {c->N, c->C, c->H, c->W};
  float *x = rand_buf(cinfer_shape_elements(shape, 4)), *out[2];
  size_t n[2];
  bool fast[2];
  for (int k = 0; k < 2; k++) {
    const char *v = k ? vb : va;
    if (v) setenv(var, v, 1);
    else unsetenv(var);
    run(m, true, x, shape, 4, &out[k], &n[k], &fast[k]);
  }
  unsetenv(var);
  assert_true(fast[0] && fast[1]);
  assert_int_equal(n[0], n[1]);
  bool same = !memcmp(out[0], out[1], n[0] * sizeof(float));
  free(out[0]);
  free(out[1]);
  free(x);
  onnx_model_destroy(m);
  return same;
}

/* The small-K direct kernel's 16-lane path (kdir_row_direct16: nChw16c output with
 * 16-channel weight vectors, AVX-512 builds on a host where kern_block() is 16) against
 * its 8-lane path (CINFER_ONNX_NO_K64_16, read when plans are built): the same FMA chain
 * per lane, so the outputs must be equal bit for bit. One and two 16-channel blocks per
 * pass (M 16, 32, 48), stride 1 and 2 with Relu (the specialised passes), Tanh, PRelu and
 * no activation, row tails (OW % 6 != 0), batch 2. On a build or host without it both runs
 * take the 8-lane path. */
static void test_smallk16_equals_8lane(void **state) {
  (void)state;
  const conv_cfg cfgs[] = {
      /* N  C  H  W   M  KH KW sh sw pt pl pb pr dh dw g  bias act chain 1d */
      {1, 3, 13, 23, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {2, 3, 17, 29, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {1, 3, 11, 19, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 0},
      {1, 3, 12, 20, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 0},
      {1, 2, 9, 14, 32, 3, 3, 1, 2, 0, 1, 0, 2, 2, 1, 1, 0, 0, 1, 0},
      {1, 3, 10, 13, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {1, 3, 15, 21, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 0}, /* two blocks, Tanh */
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    const conv_cfg *c = &cfgs[i];
    if (!same_bits_under(c, "CINFER_ONNX_NO_K64_16", NULL, "1"))
      fail_msg("case %zu (M%lld s%lld,%lld act%d): 16-lane and 8-lane small-K outputs differ", i, (long long)c->M,
               (long long)c->sh, (long long)c->sw, c->act);
  }
}

/* The small-K direct kernel reading the image's rows in place (large images, no fused
 * input ops; kdir_bases, kdir_group_taps) against copying them into padded rows
 * (CINFER_ONNX_K64_IN_PLACE=1 / 0, read when plans are built): the same values in the same
 * FMA chains, so equal bit for bit; and in place against the reference conv. Left and right
 * padding wider than a group's first tap, rows of padding above and below, short last groups
 * (OW % 6 != 0) that read past the row, dilation, stride 1, 2 and 3, one and two blocks per
 * pass, 8- and 16-lane weight vectors (CINFER_ONNX_NO_K64_16), batch 2. */
static void test_smallk_in_place_equals_copy(void **state) {
  (void)state;
  const conv_cfg cfgs[] = {
      /* N  C  H  W   M  KH KW sh sw pt pl pb pr dh dw g  bias act chain 1d */
      {1, 3, 13, 23, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
      {2, 3, 17, 29, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 0},
      {1, 3, 15, 20, 16, 3, 3, 1, 2, 2, 1, 0, 2, 2, 2, 1, 1, 1, 1, 0},
      {2, 1, 20, 41, 24, 5, 5, 3, 3, 2, 0, 1, 2, 1, 1, 1, 1, 3, 1, 0},
      {1, 3, 11, 19, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 1, 0},
      {1, 2, 9, 14, 32, 3, 3, 1, 2, 0, 1, 0, 2, 2, 1, 1, 0, 0, 1, 0},
      {1, 3, 8, 7, 8, 3, 3, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 0, 1, 0}, /* pads 3: rows of zeros, OW < 6 */
  };
  for (int lanes = 0; lanes < 2; lanes++) {
    if (lanes) setenv("CINFER_ONNX_NO_K64_16", "1", 1);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
      const conv_cfg *c = &cfgs[i];
      setenv("CINFER_ONNX_K64_IN_PLACE", "1", 1);
      check_cfg(c);
      if (!same_bits_under(c, "CINFER_ONNX_K64_IN_PLACE", "1", "0"))
        fail_msg("case %zu lanes %d (M%lld s%lld,%lld): in-place and copied small-K outputs differ", i, lanes ? 8 : 16,
                 (long long)c->M, (long long)c->sh, (long long)c->sw);
    }
  }
  unsetenv("CINFER_ONNX_K64_IN_PLACE");
  unsetenv("CINFER_ONNX_NO_K64_16");
}

/* A small-K conv followed by a depthwise 3x3 stride-1 conv (UltraFace's Conv_0 -> Conv_2)
 * runs as one smallk step on AVX-512 builds (smallk_takes_dw: the first layer's rows go
 * through a ring of three, never to memory): at 1 and 2 threads the profile shows the fused
 * step (two Convs in one smallk row) and the output matches the reference. One and two
 * 16-channel blocks, stride 1 and 2 below it, a Relu, Tanh or none on the first conv, the
 * depthwise conv with Relu into a 1x1 conv (blocked output) or as the model's output
 * (plain), rows and pixels that are not multiples of 8, batch 2, fused input ops, the image
 * read in place and copied. On a build or host without 16-lane blocks nothing is fused and
 * the outputs are still checked. */
static void test_smallk_dw_fusion(void **state) {
  (void)state;
  const conv_cfg cfgs[] = {
      /* N  C  H  W   M  KH KW sh sw pt pl pb pr dh dw g  bias act chain 1d pre */
      {1, 3, 24, 34, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 0},
      {1, 3, 13, 19, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 3, 0, 0},
      {2, 3, 17, 29, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 6, 2, 0, 0},
      {1, 3, 20, 21, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 3, 0, 0},
      {1, 3, 17, 23, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 1},
  };
#if defined(__AVX512F__)
  bool can = kern_block() == 16; /* smallk's 16-lane kernel and nChw16c */
#else
  bool can = false;
#endif
  bool sixteen = false;
  for (int ip = 0; ip < 2; ip++) {
    setenv("CINFER_ONNX_K64_IN_PLACE", ip ? "1" : "0", 1);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
      const conv_cfg *c = &cfgs[i];
      size_t len;
      uint8_t *buf = build(c, &len, c->N);
      onnx_model *m;
      cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
      if (st) fail_msg("load: %s", cinfer_status_message(st));
      free(buf);
      int64_t shape[4] = {c->N, c->C, c->H, c->W};
      float *x = rand_buf(cinfer_shape_elements(shape, 4)), *ref;
      size_t nr;
      bool fr;
      run(m, false, x, shape, 4, &ref, &nr, &fr);
      for (int threads = 1; threads <= 2; threads++) {
        onnx_session *s;
        assert_null(onnx_session_create(m, &(onnx_options){.threads = threads, .profile = true}, &s));
        cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .data = x}, o;
        memcpy(in.shape, shape, sizeof shape);
        in.byte_size = (size_t)cinfer_shape_elements(shape, 4) * 4;
        for (int rep = 0; rep < 2; rep++)
          if ((st = onnx_session_run(s, &in, 1, &o))) fail_msg("run: %s", cinfer_status_message(st));
        assert_int_equal(o.byte_size, nr * 4);
        double md = 0, mx = 0;
        for (size_t j = 0; j < nr; j++) {
          mx = fmax(mx, fabs(ref[j]));
          md = fmax(md, fabs(ref[j] - ((const float *)o.data)[j]));
        }
        if (md > 1e-5 * fmax(1.0, mx))
          fail_msg("case %zu, %d threads, in place %d: max diff %g (max %g)", i, threads, ip, md, mx);
        char *prof = profile_text(s);
        bool fused = false;
        for (const char *l = prof; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
          char op[64], kern[32];
          int nodes;
          if (l[0] == ' ' && l[1] == ' ' && l[2] != ' ' && sscanf(l, "%63s %d %31s", op, &nodes, kern) == 3 &&
              !strcmp(kern, "smallk") && strstr(op, "Conv") && strstr(strstr(op, "Conv") + 4, "Conv")) /* two convs */
            fused = true;
        }
        if (fused) sixteen = true;
        else if (can)
          fail_msg("case %zu, %d threads: the depthwise conv is not fused into the small-K step:\n%s", i, threads, prof);
        free(prof);
        onnx_session_destroy(s);
      }
      free(ref);
      free(x);
      onnx_model_destroy(m);
    }
  }
  unsetenv("CINFER_ONNX_K64_IN_PLACE");
  assert_true(sixteen == can);
}

/* MaxPool / AveragePool: oneDNN pooling vs the reference */
typedef struct pool_cfg { const char *op; int64_t C, H, W, kh, kw, sh, sw, pt, pl, pb, pr, ceil, incl, dh; } pool_cfg;

/* the pooling node of c, in -> out */
static void pool_node(mb *b, const pool_cfg *c, const char *in, const char *out) {
  Onnx__NodeProto *n = mb_node(b, c->op, "pool", 1, &in, 1, &out);
  mb_attr_ints(b, n, "kernel_shape", 2, (int64_t[]){c->kh, c->kw});
  mb_attr_ints(b, n, "strides", 2, (int64_t[]){c->sh, c->sw});
  mb_attr_ints(b, n, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
  if (c->ceil) mb_attr_i(b, n, "ceil_mode", 1);
  if (c->incl) mb_attr_i(b, n, "count_include_pad", 1);
  if (c->dh > 1) mb_attr_ints(b, n, "dilations", 2, (int64_t[]){c->dh, c->dh});
}

/* "MaxPool C5 17x13 k3x3 s2 p1,1,1,1 ceil0 incl0" with C channels */
static const char *pool_str(const pool_cfg *c, int64_t C) {
  static char buf[160];
  snprintf(buf, sizeof buf, "%s C%lld %lldx%lld k%lldx%lld s%lld p%lld,%lld,%lld,%lld ceil%lld incl%lld", c->op,
           (long long)C, (long long)c->H, (long long)c->W, (long long)c->kh, (long long)c->kw, (long long)c->sh,
           (long long)c->pt, (long long)c->pl, (long long)c->pb, (long long)c->pr, (long long)c->ceil,
           (long long)c->incl);
  return buf;
}

static void check_pool(const pool_cfg *c) {
  mb b;
  mb_init(&b, 13);
  int64_t xd[4] = {2, c->C, c->H, c->W};
  mb_input(&b, "x", 4, xd);
  pool_node(&b, c, "x", "out");
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  float *x = rand_buf(cinfer_shape_elements(xd, 4)), *ref, *fast;
  size_t nr, nf;
  bool fr, ff;
  run(m, false, x, xd, 4, &ref, &nr, &fr);
  run(m, true, x, xd, 4, &fast, &nf, &ff);
  assert_int_equal(nr, nf);
  for (size_t k = 0; k < nr; k++)
    if (fabsf(ref[k] - fast[k]) > 1e-6f)
      fail_msg("%s: element %zu ref %g fast %g", pool_str(c, c->C), k, ref[k], fast[k]);
  free(x);
  free(ref);
  free(fast);
  onnx_model_destroy(m);
}

/* The same pooling between two convolutions: nChw8c in and out, so cinfer's own blocked
 * pooling kernel runs (16 channels: two blocks), against the reference. */
static void check_pool_blocked(const pool_cfg *c) {
  mb b;
  mb_init(&b, 13);
  int64_t xd[4] = {1, 3, c->H, c->W};
  mb_input(&b, "x", 4, xd);
  float *w0 = rand_buf(16 * 3 * 9), *w1 = rand_buf(8 * 16);
  mb_init_f(&b, "w0", 4, (int64_t[]){16, 3, 3, 3}, w0);
  mb_init_f(&b, "w1", 4, (int64_t[]){8, 16, 1, 1}, w1);
  const char *c0i[2] = {"x", "w0"}, *c0o = "c0", *c1i[2] = {"p0", "w1"}, *out = "out";
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv0", 2, c0i, 1, &c0o);
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  pool_node(&b, c, "c0", "p0");
  mb_node(&b, "Conv", "conv1", 2, c1i, 1, &out);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  free(w0);
  free(w1);
  float *x = rand_buf(cinfer_shape_elements(xd, 4));
  double mx, md = ref_fast_max_diff(m, x, xd, 4, &mx);
  if (md > 1e-5 * fmax(1.0, mx))
    fail_msg("blocked %s: max diff %g (max %g)", pool_str(c, 16), md, mx);
  free(x);
  onnx_model_destroy(m);
}

/* x [1,8,12,14] -> 1x1 conv (8 -> 16) -> "c0" -> the caller's nodes, ending in `mid` ->
 * 1x1 conv (16 -> 16) -> out. sandwich_begin adds the input and the first conv;
 * sandwich_end adds the second conv, loads the model, requires the fast paths to agree with
 * the reference and returns the profile of a one-thread run (caller frees). */
static void sandwich_begin(mb *b) {
  mb_init(b, 13);
  mb_input(b, "x", 4, (int64_t[]){1, 8, 12, 14});
  float *w0 = rand_buf(16 * 8), *w1 = rand_buf(16 * 16);
  mb_init_f(b, "w0", 4, (int64_t[]){16, 8, 1, 1}, w0); /* copied */
  mb_init_f(b, "w1", 4, (int64_t[]){16, 16, 1, 1}, w1);
  free(w0);
  free(w1);
  const char *c0i[2] = {"x", "w0"}, *c0o = "c0";
  mb_node(b, "Conv", "conv0", 2, c0i, 1, &c0o);
}

static char *sandwich_end(mb *b, const char *mid, const char *what) {
  const char *c1i[2] = {mid, "w1"}, *out = "out";
  mb_node(b, "Conv", "conv1", 2, c1i, 1, &out);
  mb_output(b, "out");
  onnx_model *m = load_built(b);
  int64_t xd[4] = {1, 8, 12, 14};
  float *x = rand_buf(cinfer_shape_elements(xd, 4));
  double mx, md = ref_fast_max_diff(m, x, xd, 4, &mx);
  if (md > 1e-5 * fmax(1.0, mx)) fail_msg("%s: max diff %g (max %g)", what, md, mx);
  char *prof = profile_run(m, x, xd, 4);
  free(x);
  onnx_model_destroy(m);
  return prof;
}

/* Conv -> Pad(all zero) -> Identity -> AveragePool -> Conv (DenseNet's transition): the
 * no-op Pad and the Identity leave the plan, so the pool reads the conv's blocked output;
 * against the reference, and the profile has no Pad or Identity step. */
static void test_noop_elided(void **state) {
  mb b;
  sandwich_begin(&b);
  int64_t zero[8] = {0};
  Onnx__TensorProto *t0 = mb_init_f(&b, "pads", 1, (int64_t[]){8}, NULL);
  t0->data_type = 7;
  t0->n_int64_data = 8;
  t0->int64_data = zero;
  const char *pi[2] = {"c0", "pads"}, *po = "p0", *io = "i0", *ao = "a0";
  mb_node(&b, "Pad", "pad", 2, pi, 1, &po);
  mb_node(&b, "Identity", "id", 1, &po, 1, &io);
  Onnx__NodeProto *n = mb_node(&b, "AveragePool", "pool", 1, &io, 1, &ao);
  mb_attr_ints(&b, n, "kernel_shape", 2, (int64_t[]){2, 2});
  mb_attr_ints(&b, n, "strides", 2, (int64_t[]){2, 2});
  char *prof = sandwich_end(&b, "a0", "conv-pad-pool chain");
  if (strstr(prof, "Pad") || strstr(prof, "Identity") || !strstr(prof, "AveragePool")) fail_msg("steps:\n%s", prof);
  free(prof);
}

/* Conv -> Slice -> Conv: a Slice that keeps every element (ends past the end) leaves the
 * plan; one that reverses the last axis (same shape, step -1) stays; both against the
 * reference. */
static void check_slice_elision(bool reverse) {
  mb b;
  sandwich_begin(&b);
  int64_t st[2] = {0, reverse ? -1 : 0}, en[2] = {12, reverse ? INT64_MIN : INT64_MAX}, ax[2] = {2, 3},
          sp[2] = {1, reverse ? -1 : 1};
  const char *names[4] = {"st", "en", "ax", "sp"};
  int64_t *vals[4] = {st, en, ax, sp};
  for (int i = 0; i < 4; i++) {
    Onnx__TensorProto *t = mb_init_f(&b, names[i], 1, (int64_t[]){2}, NULL);
    t->data_type = 7;
    t->n_int64_data = 2;
    t->int64_data = vals[i];
  }
  const char *si[5] = {"c0", "st", "en", "ax", "sp"}, *so = "s0";
  mb_node(&b, "Slice", "slice", 5, si, 1, &so);
  char *prof = sandwich_end(&b, "s0", reverse ? "conv-slice(reversing)-conv" : "conv-slice-conv");
  if (!strstr(prof, "Slice") != !reverse) fail_msg("reverse %d, steps:\n%s", reverse, prof);
  free(prof);
}

static void test_slice_elided(void **state) {
  check_slice_elision(false);
  check_slice_elision(true);
}

/* 1x1 conv -> 3x3 conv (+bias, +Relu/PRelu) -> 1x1 conv: the 3x3 conv reads and writes
 * nChw8c, so the Winograd kernel runs it (the profile says so); against the reference over
 * batches, channel counts off the 32-channel register block, odd sizes, asymmetric and
 * no padding, a 1x1 image. */
typedef struct { int64_t N, C, M, H, W, pt, pl, pb, pr; int bias, act; } wino_cfg;
static void check_winograd(const wino_cfg *c) {
  mb b;
  mb_init(&b, 13);
  int64_t xd[4] = {c->N, 8, c->H, c->W};
  mb_input(&b, "x", 4, xd);
  float *w0 = rand_buf(c->C * 8), *w1 = rand_buf(c->M * c->C * 9), *w2 = rand_buf(8 * c->M);
  float *b1 = rand_buf(c->M), *sl = rand_buf(c->M);
  mb_init_f(&b, "w0", 4, (int64_t[]){c->C, 8, 1, 1}, w0);
  mb_init_f(&b, "w1", 4, (int64_t[]){c->M, c->C, 3, 3}, w1);
  mb_init_f(&b, "w2", 4, (int64_t[]){8, c->M, 1, 1}, w2);
  mb_init_f(&b, "b1", 1, (int64_t[]){c->M}, b1);
  mb_init_f(&b, "sl", 3, (int64_t[]){c->M, 1, 1}, sl);
  const char *c0i[2] = {"x", "w0"}, *c0o = "c0", *c1i[3] = {"c0", "w1", "b1"}, *c1o = "c1", *ao = "a1";
  const char *ri[2] = {"c1", "sl"}, *c2i[2] = {c->act ? "a1" : "c1", "w2"}, *out = "out";
  mb_node(&b, "Conv", "conv0", 2, c0i, 1, &c0o);
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv1", c->bias ? 3 : 2, c1i, 1, &c1o);
  mb_attr_ints(&b, n, "kernel_shape", 2, (int64_t[]){3, 3});
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
  if (c->act == 1) mb_node(&b, "Relu", "act", 1, &c1o, 1, &ao);
  if (c->act == 2) mb_node(&b, "PRelu", "act", 2, ri, 1, &ao);
  mb_node(&b, "Conv", "conv2", 2, c2i, 1, &out);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  free(w0);
  free(w1);
  free(w2);
  free(b1);
  free(sl);
  float *x = rand_buf(cinfer_shape_elements(xd, 4));
  double mx, md = ref_fast_max_diff(m, x, xd, 4, &mx);
  if (md > 1e-5 * fmax(1.0, mx))
    fail_msg("winograd N%lld C%lld M%lld %lldx%lld p%lld,%lld,%lld,%lld bias%d act%d: max diff %g (max %g)",
             (long long)c->N, (long long)c->C, (long long)c->M, (long long)c->H, (long long)c->W, (long long)c->pt,
             (long long)c->pl, (long long)c->pb, (long long)c->pr, c->bias, c->act, md, mx);
  /* with 16-channel blocks (an AVX-512 host) only C, M multiples of 16, not M = 16 from
   * C = 16, and >= 64 output pixels (wino_can_take; test_onnx_kernels_avx2 runs every
   * case with 8-channel blocks) */
  int64_t pix = (c->H + c->pt + c->pb - 2) * (c->W + c->pl + c->pr - 2);
  bool at16 = c->C % 16 == 0 && c->M % 16 == 0 && !(c->M % 32 && c->C <= 16) && pix >= 64;
  if (c->N == 1 && (kern_block() == 8 || at16)) {
    char *prof = profile_run(m, x, xd, 4);
    if (!strstr(prof, "winograd")) fail_msg("C%lld M%lld: no winograd step:\n%s", (long long)c->C, (long long)c->M, prof);
    free(prof);
  }
  free(x);
  onnx_model_destroy(m);
}

static void test_winograd(void **state) {
  const wino_cfg cfgs[] = {
      {1, 16, 8, 7, 9, 1, 1, 1, 1, 1, 1},     {2, 24, 40, 12, 13, 1, 1, 1, 1, 0, 0},
      {1, 32, 64, 10, 6, 0, 0, 0, 0, 1, 2},   {1, 16, 32, 9, 11, 2, 1, 0, 1, 1, 1},
      {1, 128, 32, 14, 14, 1, 1, 1, 1, 0, 0}, {1, 16, 16, 1, 1, 1, 1, 1, 1, 1, 0},
      {3, 16, 24, 5, 4, 1, 0, 1, 2, 1, 2},    {1, 16, 32, 32, 32, 1, 1, 1, 1, 1, 1},
      {1, 32, 64, 34, 32, 1, 0, 1, 2, 1, 2},  {1, 32, 16, 12, 12, 1, 1, 1, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check_winograd(&cfgs[i]);
}

/* The Winograd kernel's 16-lane GEMMs (wino_gemm16, AVX-512 builds with nChw16c) against
 * its 8-lane ones (CINFER_ONNX_NO_WINO16, read when plans are built): every product is the
 * same FMA chain over the input channels, so the outputs must be equal bit for bit. M 32,
 * 64 and 16 (one 16-channel half of a 32-group), tile tails (tiles % 6 != 0), batch 2.
 * Without an AVX-512 build or host both runs take the 8-lane path. */
static void test_winograd16_equals_8lane(void **state) {
  (void)state;
  const wino_cfg cfgs[] = {
      {1, 16, 32, 32, 32, 1, 1, 1, 1, 1, 1}, {2, 32, 64, 13, 17, 1, 0, 1, 2, 1, 2}, {1, 32, 16, 12, 12, 1, 1, 1, 1, 0, 0},
      {1, 64, 32, 9, 11, 1, 1, 1, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    const wino_cfg *c = &cfgs[i];
    mb b;
    mb_init(&b, 13);
    int64_t xd[4] = {c->N, 8, c->H, c->W};
    mb_input(&b, "x", 4, xd);
    float *w0 = rand_buf(c->C * 8), *w1 = rand_buf(c->M * c->C * 9), *b1 = rand_buf(c->M), *w2 = rand_buf(8 * c->M);
    mb_init_f(&b, "w0", 4, (int64_t[]){c->C, 8, 1, 1}, w0);
    mb_init_f(&b, "w1", 4, (int64_t[]){c->M, c->C, 3, 3}, w1);
    mb_init_f(&b, "b1", 1, (int64_t[]){c->M}, b1);
    mb_init_f(&b, "w2", 4, (int64_t[]){8, c->M, 1, 1}, w2);
    free(w0);
    free(w1);
    free(b1);
    free(w2);
    /* a 1x1 conv first: the 3x3 conv's input arrives blocked, as winograd needs */
    const char *c0i[2] = {"x", "w0"}, *c0o = "c0", *c1i[3] = {"c0", "w1", "b1"}, *c1o = "c1", *c2i[2] = {"c1", "w2"},
               *out = "out";
    mb_node(&b, "Conv", "conv0", 2, c0i, 1, &c0o);
    Onnx__NodeProto *n = mb_node(&b, "Conv", "conv1", 3, c1i, 1, &c1o);
    mb_attr_ints(&b, n, "kernel_shape", 2, (int64_t[]){3, 3});
    mb_attr_ints(&b, n, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
    mb_node(&b, "Conv", "conv2", 2, c2i, 1, &out);
    mb_output(&b, "out");
    onnx_model *m = load_built(&b);
    float *x = rand_buf(cinfer_shape_elements(xd, 4));
    if (kern_block() == 16) { /* else both runs are the 8-lane path */
      char *prof = profile_run(m, x, xd, 4);
      if (!strstr(prof, "winograd")) fail_msg("case %zu: no winograd step:\n%s", i, prof);
      free(prof);
    }
    size_t na, nb;
    bool fa, fb;
    float *ya, *yb;
    run(m, true, x, xd, 4, &ya, &na, &fa);
    setenv("CINFER_ONNX_NO_WINO16", "1", 1);
    run(m, true, x, xd, 4, &yb, &nb, &fb);
    unsetenv("CINFER_ONNX_NO_WINO16");
    assert_int_equal(na, nb);
    if (memcmp(ya, yb, na * sizeof(float)))
      fail_msg("case %zu (C%lld M%lld): 16-lane and 8-lane winograd outputs differ", i, (long long)c->C, (long long)c->M);
    free(ya);
    free(yb);
    free(x);
    onnx_model_destroy(m);
  }
}

/* Short rows (the copies take word loops instead of a memcpy per row): Slice cutting only
 * the last axis into rows of 3, and Concat on the last axis of rows of 2 and 3 words,
 * against the definition. */
static void test_short_rows(void **state) {
  mb b;
  mb_init(&b, 13);
  int64_t xd[3] = {3, 50, 6};
  mb_input(&b, "x", 3, xd);
  int64_t st[1] = {1}, en[1] = {4}, ax[1] = {2};
  Onnx__TensorProto *t;
  const char *names[3] = {"st", "en", "ax"};
  int64_t *vals[3] = {st, en, ax};
  for (int i = 0; i < 3; i++) {
    t = mb_init_f(&b, names[i], 1, (int64_t[]){1}, NULL);
    t->data_type = 7;
    t->n_int64_data = 1;
    t->int64_data = vals[i];
  }
  const char *si[4] = {"x", "st", "en", "ax"}, *so = "s", *ci[2] = {"x", "s"}, *co = "out";
  mb_node(&b, "Slice", "slice", 4, si, 1, &so);
  mb_attr_i(&b, mb_node(&b, "Concat", "cat", 2, ci, 1, &co), "axis", 2);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  float *x = rand_buf(3 * 50 * 6), *got;
  size_t n;
  bool fast;
  run(m, false, x, xd, 3, &got, &n, &fast);
  assert_int_equal(n, 3 * 50 * 9);
  for (int64_t r = 0; r < 150; r++)
    for (int64_t k = 0; k < 9; k++) {
      float want = k < 6 ? x[r * 6 + k] : x[r * 6 + 1 + (k - 6)];
      if (memcmp(&want, &got[r * 9 + k], sizeof want)) fail_msg("row %lld col %lld: want %g got %g", (long long)r, (long long)k, want, got[r * 9 + k]);
    }
  free(x);
  free(got);
  onnx_model_destroy(m);
}

static void test_pool_shapes(void **state) {
  const pool_cfg cfgs[] = {
      {"MaxPool", 5, 17, 13, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1},
      {"MaxPool", 3, 16, 16, 3, 2, 2, 3, 0, 1, 1, 0, 1, 0, 1},
      {"MaxPool", 4, 15, 15, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, 2},
      {"AveragePool", 6, 14, 11, 2, 3, 2, 2, 0, 1, 0, 1, 0, 0, 1},
      {"AveragePool", 6, 14, 11, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 1},
      {"AveragePool", 7, 9, 9, 3, 3, 2, 2, 0, 0, 0, 0, 1, 0, 1},
      {"AveragePool", 8, 28, 28, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1},
      /* padded windows that end at the declared padding (the fast paths take them) */
      {"AveragePool", 6, 15, 13, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 1},
      {"AveragePool", 6, 15, 13, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1},
      {"MaxPool", 6, 15, 13, 3, 3, 2, 2, 1, 0, 1, 2, 1, 0, 1},
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    check_pool(&cfgs[i]);
    check_pool_blocked(&cfgs[i]);
  }
}

/* Pools inside a conv chain take and keep oneDNN's blocked layout: x -> Conv(C -> M, 3x3)
 * -> MaxPool 2x2 -> Conv 1x1 -> AveragePool 3x3 s2 (pads) -> out, fast vs reference.
 * M = 10 exercises a padded channel block. */
static void check_pool_chain(int64_t C, int64_t M, int64_t H, int64_t W) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){2, C, H, W});
  float *w0 = rand_buf(M * C * 9), *w1 = rand_buf(M * M);
  mb_init_f(&b, "w0", 4, (int64_t[]){M, C, 3, 3}, w0);
  mb_init_f(&b, "w1", 4, (int64_t[]){M, M, 1, 1}, w1);
  const char *c0i[2] = {"x", "w0"}, *c0o = "c0", *p0o = "p0", *c1i[2] = {"p0", "w1"}, *c1o = "c1", *out = "out";
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv0", 2, c0i, 1, &c0o);
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  n = mb_node(&b, "MaxPool", "pool0", 1, &c0o, 1, &p0o);
  mb_attr_ints(&b, n, "kernel_shape", 2, (int64_t[]){2, 2});
  mb_attr_ints(&b, n, "strides", 2, (int64_t[]){2, 2});
  mb_node(&b, "Conv", "conv1", 2, c1i, 1, &c1o);
  n = mb_node(&b, "AveragePool", "pool1", 1, &c1o, 1, &out);
  mb_attr_ints(&b, n, "kernel_shape", 2, (int64_t[]){3, 3});
  mb_attr_ints(&b, n, "strides", 2, (int64_t[]){2, 2});
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  free(w0);
  free(w1);
  int64_t shape[4] = {2, C, H, W};
  float *x = rand_buf(cinfer_shape_elements(shape, 4));
  double mx, md = ref_fast_max_diff(m, x, shape, 4, &mx);
  if (md > 1e-5 * fmax(1.0, mx)) fail_msg("pool chain C%lld M%lld: max diff %g (max %g)", (long long)C, (long long)M, md, mx);
  free(x);
  onnx_model_destroy(m);
}

static void test_pool_chain(void **state) {
  check_pool_chain(8, 16, 12, 14);
  check_pool_chain(5, 10, 11, 9);
}

/* Conv -> Mul(constant) is folded into W and B at load time; the result must equal the
 * same graph with the scale fed as a graph input (not foldable). sdims: the scale's shape
 * ([M,1,1], scalar, or [W]: broadcast along width, which must not be folded). */
static float *conv_mul_out(int64_t M, const int64_t *sdims, int snd, bool as_input, const float *x,
                           const float *w, const float *bias, const float *scale, size_t *n) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){1, 3, 6, 7});
  if (as_input) mb_input(&b, "s", snd, sdims);
  else mb_init_f(&b, "s", snd, sdims, scale);
  mb_init_f(&b, "w", 4, (int64_t[]){M, 3, 3, 3}, w);
  mb_init_f(&b, "b", 1, &M, bias);
  const char *ci[3] = {"x", "w", "b"}, *co = "c", *mi[2] = {"c", "s"}, *mo = "out";
  Onnx__NodeProto *nd = mb_node(&b, "Conv", "conv", 3, ci, 1, &co);
  mb_attr_ints(&b, nd, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_node(&b, "Mul", "mul", 2, mi, 1, &mo);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1}, &s));
  int64_t sn = cinfer_shape_elements(sdims, snd);
  cinfer_tensor in[2] = {{.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 3, 6, 7}, .data = x,
                          .byte_size = 3 * 6 * 7 * 4},
                         {.name = "s", .dtype = CINFER_TYPE_FP32, .ndim = snd, .data = scale, .byte_size = (size_t)sn * 4}};
  memcpy(in[1].shape, sdims, sizeof(int64_t) * (size_t)snd);
  cinfer_tensor o;
  cinfer_status *st = onnx_session_run(s, in, as_input ? 2 : 1, &o);
  if (st) fail_msg("run: %s", cinfer_status_message(st));
  float *r = malloc(o.byte_size);
  memcpy(r, o.data, o.byte_size);
  *n = o.byte_size / 4;
  onnx_session_destroy(s);
  onnx_model_destroy(m);
  return r;
}

static void test_conv_mul_fold(void **state) {
  const int64_t M = 7;
  float *x = rand_buf(3 * 6 * 7), *w = rand_buf(M * 27), *bias = rand_buf(M), *scale = rand_buf(M);
  const int64_t shapes[3][3] = {{M, 1, 1}, {0}, {7}};
  const int nds[3] = {3, 0, 1};
  for (int k = 0; k < 3; k++) {
    size_t n1, n2;
    float *folded = conv_mul_out(M, shapes[k], nds[k], false, x, w, bias, scale, &n1);
    float *plain = conv_mul_out(M, shapes[k], nds[k], true, x, w, bias, scale, &n2);
    assert_int_equal(n1, n2);
    for (size_t i = 0; i < n1; i++)
      if (fabsf(folded[i] - plain[i]) > 1e-5f * fmaxf(1.0f, fabsf(plain[i])))
        fail_msg("scale shape %d: element %zu folded %g plain %g", k, i, folded[i], plain[i]);
    free(folded);
    free(plain);
  }
  free(x);
  free(w);
  free(bias);
  free(scale);
}

/* batch of 3 == three batch-1 runs */
static void test_batch_rows(void **state) {
  conv_cfg c = {1, 4, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  size_t len;
  uint8_t *buf = build(&c, &len, -1);
  onnx_model *m;
  assert_null(onnx_model_load_buffer(buf, len, NULL, &m));
  free(buf);
  assert_true(onnx_model_batchable(m));
  int64_t s3[4] = {3, 4, 9, 9}, s1[4] = {1, 4, 9, 9};
  float *x = rand_buf(3 * 4 * 81), *all, *one;
  size_t na, n1;
  bool f;
  run(m, true, x, s3, 4, &all, &na, &f);
  for (int r = 0; r < 3; r++) {
    run(m, true, x + r * 4 * 81, s1, 4, &one, &n1, &f);
    assert_int_equal(na, 3 * n1);
    for (size_t i = 0; i < n1; i++) assert_float_equal(all[r * n1 + i], one[i], 1e-5);
    free(one);
  }
  free(all);
  free(x);
  onnx_model_destroy(m);
}

/* Sub-batching (onnx_options.sub_batch): a batch run as consecutive runs of 1 or 2 rows
 * (5 = 2 + 2 + 1: two plans) gives what the whole batch in one run gives; the gathered
 * outputs are right again after a larger (buffers grow) and a smaller batch. */
static void test_sub_batch(void **state) {
  conv_cfg c = {1, 4, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  size_t len;
  uint8_t *buf = build(&c, &len, -1);
  onnx_model *m;
  assert_null(onnx_model_load_buffer(buf, len, NULL, &m));
  free(buf);
  assert_true(onnx_model_batchable(m));
  const int64_t rows_in = 4 * 81;
  float *x = rand_buf(7 * rows_in);
  /* split[1..3] have threads > 1: their batches run on one-thread workers (2 or 3 row
   * ranges, each sub-batched or not), the profile is the first worker's */
  enum { NS = 4 };
  onnx_session *whole, *split[NS];
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1, .sub_batch = -1}, &whole));
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1, .sub_batch = 1}, &split[0]));
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 2, .sub_batch = 2}, &split[1]));
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 3, .sub_batch = 1, .profile = true}, &split[2]));
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 2}, &split[3]));
  const int64_t batches[5] = {5, 5, 7, 3, 2};
  for (int k = 0; k < 5; k++) {
    int64_t n = batches[k];
    cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {n, 4, 9, 9}, .data = x,
                        .byte_size = (size_t)(n * rows_in) * 4};
    cinfer_tensor ow, os;
    cinfer_status *st = onnx_session_run(whole, &in, 1, &ow);
    if (st) fail_msg("run: %s", cinfer_status_message(st));
    for (int j = 0; j < NS; j++) {
      if ((st = onnx_session_run(split[j], &in, 1, &os))) fail_msg("run: %s", cinfer_status_message(st));
      assert_int_equal(os.ndim, ow.ndim);
      assert_memory_equal(os.shape, ow.shape, sizeof(int64_t) * (size_t)ow.ndim);
      assert_int_equal(os.shape[0], n);
      assert_int_equal(os.byte_size, ow.byte_size);
      const float *a = ow.data, *b = os.data;
      for (size_t i = 0; i < ow.byte_size / 4; i++)
        if (fabsf(a[i] - b[i]) > 1e-5f * fmaxf(1.0f, fabsf(a[i])))
          fail_msg("batch %lld session %d: element %zu whole %g split %g", (long long)n, j, i, a[i], b[i]);
    }
  }
  char *prof = profile_text(split[2]);
  assert_non_null(strstr(prof, "worker 1 of 3"));
  assert_non_null(strstr(prof, "Conv"));
  free(prof);
  onnx_session_destroy(whole);
  for (int j = 0; j < NS; j++) onnx_session_destroy(split[j]);
  free(x);
  onnx_model_destroy(m);
}

/* A Pad whose pads are all zero shares its input's bytes (plan aliasing); the graph output
 * read through it must still be x -> Relu, and the input must stay untouched. A non-zero
 * Pad in the same graph still pads. */
static void test_noop_pad_alias(void **state) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){1, 2, 3, 4});
  int64_t zero[8] = {0}, one[8] = {0, 0, 1, 0, 0, 0, 0, 1};
  Onnx__TensorProto *t0 = mb_init_f(&b, "p0", 1, (int64_t[]){8}, NULL);
  t0->data_type = 7;
  t0->n_int64_data = 8;
  t0->int64_data = zero;
  Onnx__TensorProto *t1 = mb_init_f(&b, "p1", 1, (int64_t[]){8}, NULL);
  t1->data_type = 7;
  t1->n_int64_data = 8;
  t1->int64_data = one;
  const char *x = "x", *r = "r", *pi0[2] = {"r", "p0"}, *o0 = "same", *pi1[2] = {"same", "p1"}, *o1 = "padded";
  mb_node(&b, "Relu", "relu", 1, &x, 1, &r);
  mb_node(&b, "Pad", "pad0", 2, pi0, 1, &o0);
  mb_node(&b, "Pad", "pad1", 2, pi1, 1, &o1);
  mb_output(&b, "same");
  mb_output(&b, "padded");
  onnx_model *m = load_built(&b);
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1}, &s));
  float xv[24], keep[24];
  for (int i = 0; i < 24; i++) xv[i] = keep[i] = (float)(i % 5) - 2.0f;
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 2, 3, 4}, .data = xv, .byte_size = sizeof xv};
  cinfer_tensor out[2];
  cinfer_status *st = onnx_session_run(s, &in, 1, out);
  if (st) fail_msg("run: %s", cinfer_status_message(st));
  assert_memory_equal(xv, keep, sizeof xv);
  const float *same = out[0].data, *pad = out[1].data;
  assert_int_equal(out[0].byte_size, sizeof xv);
  for (int i = 0; i < 24; i++) assert_true(same[i] == (xv[i] > 0 ? xv[i] : 0));
  assert_int_equal(out[1].ndim, 4);
  assert_int_equal(out[1].shape[2], 4);
  assert_int_equal(out[1].shape[3], 5);
  for (int c = 0; c < 2; c++)
    for (int h = 0; h < 4; h++)
      for (int w = 0; w < 5; w++) {
        float want = h == 0 || w == 4 ? 0.0f : same[(c * 3 + h - 1) * 4 + w];
        assert_true(pad[(c * 4 + h) * 5 + w] == want);
      }
  onnx_session_destroy(s);
  onnx_model_destroy(m);
}


/* Concat / BatchNormalization(+Relu) / Relu on blocked layouts (kern_blocked.c), against
 * the reference, in a DenseNet/RetinaFace-like graph (x: [N, 8, H, W]):
 *   c0 = Conv3x3(x) 16ch; c1 = Conv1x1(c0) 8ch; cat1 = Concat(c0, c1)        blocked in/out
 *   r1 = BN+Relu(cat1); c2 = Conv3x3(r1) 16ch                                 blocked BN+Relu
 *   cat2 = Concat(cat1, c2, x)       (x: a plain graph input mixed with blocked ones)
 *   b2 = BN(cat2) (no Relu); c3 = Conv1x1(b2) 8ch; c4 = Conv1x1(b2) 8ch
 *   out = Conv1x1(Relu(Concat(c3, c4)))                                       blocked Relu
 *   out2 = Concat(c2, c3)            (graph output: blocked inputs, plain output)
 *   out3 = Relu(BN(cat1))            (graph output: blocked input, plain output)
 * and torchvision's DenseNet pattern, where each Concat's inputs extend the previous one's
 * (one image: written in place, each Concat output a prefix view of the next):
 *   k1 = Concat(c0); n1 = Conv1x1(BN+Relu(k1)) 8ch; k2 = Concat(c0, n1);
 *   n2 = Conv3x3(BN+Relu(k2)) 8ch; out4 = Concat(c0, n1, n2)
 *   k5 = Concat(x, n1); out5 = Concat(x, n1, n2)   (x: a graph input, copied) */
static void add_bn(mb *b, const char *name, int64_t C, const char *in, const char *outn, float **keep) {
  float *p = rand_buf(4 * C);
  for (int64_t c = 0; c < C; c++) p[3 * C + c] = fabsf(p[3 * C + c]) + 0.5f; /* variance > 0 */
  mb_bn(b, name, C, in, outn, p);
  *keep = p;
}

static void add_conv(mb *b, const char *name, int64_t M, int64_t C, int64_t k, const char *in, const char *outn,
                     float **keep) {
  float *w = rand_buf(M * C * k * k);
  char wn[32];
  snprintf(wn, sizeof wn, "%s_w", name);
  mb_init_f(b, wn, 4, (int64_t[]){M, C, k, k}, w);
  const char *ci[2] = {in, wn};
  Onnx__NodeProto *n = mb_node(b, "Conv", name, 2, ci, 1, &outn);
  int64_t pd = k / 2;
  mb_attr_ints(b, n, "pads", 4, (int64_t[]){pd, pd, pd, pd});
  *keep = w;
}

static void check_blocked_ops(int64_t N, int64_t H, int64_t W, bool plain) {
  if (plain) setenv("CINFER_ONNX_PLAIN", "1", 1); /* read when plans are built */
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){N, 8, H, W});
  float *keep[16];
  int nk = 0;
  add_conv(&b, "conv0", 16, 8, 3, "x", "c0", &keep[nk++]);
  add_conv(&b, "conv1", 8, 16, 1, "c0", "c1", &keep[nk++]);
  const char *ci1[2] = {"c0", "c1"}, *cat1 = "cat1";
  mb_attr_i(&b, mb_node(&b, "Concat", "concat1", 2, ci1, 1, &cat1), "axis", 1);
  add_bn(&b, "bn1", 24, "cat1", "b1", &keep[nk++]);
  const char *b1 = "b1", *r1 = "r1";
  mb_node(&b, "Relu", "relu1", 1, &b1, 1, &r1);
  add_conv(&b, "conv2", 16, 24, 3, "r1", "c2", &keep[nk++]);
  const char *ci2[3] = {"cat1", "c2", "x"}, *cat2 = "cat2";
  mb_attr_i(&b, mb_node(&b, "Concat", "concat2", 3, ci2, 1, &cat2), "axis", 1);
  add_bn(&b, "bn2", 48, "cat2", "b2", &keep[nk++]);
  add_conv(&b, "conv3", 8, 48, 1, "b2", "c3", &keep[nk++]);
  add_conv(&b, "conv4", 8, 48, 1, "b2", "c4", &keep[nk++]);
  const char *ci3[2] = {"c3", "c4"}, *cat3 = "cat3", *r3 = "r3";
  mb_attr_i(&b, mb_node(&b, "Concat", "concat3", 2, ci3, 1, &cat3), "axis", 1);
  mb_node(&b, "Relu", "relu3", 1, &cat3, 1, &r3);
  add_conv(&b, "conv5", 8, 16, 1, "r3", "out", &keep[nk++]);
  const char *ci4[2] = {"c2", "c3"}, *out2 = "out2";
  mb_attr_i(&b, mb_node(&b, "Concat", "concat4", 2, ci4, 1, &out2), "axis", 1);
  add_bn(&b, "bn3", 24, "cat1", "b3", &keep[nk++]);
  const char *b3 = "b3", *out3 = "out3";
  mb_node(&b, "Relu", "relu4", 1, &b3, 1, &out3);
  const char *k1 = "k1", *k2 = "k2", *ci5[2] = {"c0", "n1"}, *ci6[3] = {"c0", "n1", "n2"}, *out4 = "out4";
  mb_attr_i(&b, mb_node(&b, "Concat", "concat5", 1, ci5, 1, &k1), "axis", 1);
  add_bn(&b, "bn4", 16, "k1", "b4", &keep[nk++]);
  const char *b4 = "b4", *r4 = "r4";
  mb_node(&b, "Relu", "relu5", 1, &b4, 1, &r4);
  add_conv(&b, "conv6", 8, 16, 1, "r4", "n1", &keep[nk++]);
  mb_attr_i(&b, mb_node(&b, "Concat", "concat6", 2, ci5, 1, &k2), "axis", 1);
  add_bn(&b, "bn5", 24, "k2", "b5", &keep[nk++]);
  const char *b5 = "b5", *r5 = "r5";
  mb_node(&b, "Relu", "relu6", 1, &b5, 1, &r5);
  add_conv(&b, "conv7", 8, 24, 3, "r5", "n2", &keep[nk++]);
  mb_attr_i(&b, mb_node(&b, "Concat", "concat7", 3, ci6, 1, &out4), "axis", 1);
  const char *ci8[2] = {"x", "n1"}, *ci9[3] = {"x", "n1", "n2"}, *k5 = "k5", *out5 = "out5";
  mb_attr_i(&b, mb_node(&b, "Concat", "concat8", 2, ci8, 1, &k5), "axis", 1);
  add_conv(&b, "conv8", 8, 16, 1, "k5", "out6", &keep[nk++]);
  mb_attr_i(&b, mb_node(&b, "Concat", "concat9", 3, ci9, 1, &out5), "axis", 1);
  mb_output(&b, "out");
  mb_output(&b, "out2");
  mb_output(&b, "out3");
  mb_output(&b, "out4");
  mb_output(&b, "out5");
  mb_output(&b, "out6");
  onnx_model *m = load_built(&b);
  for (int i = 0; i < nk; i++) free(keep[i]);
  int64_t shape[4] = {N, 8, H, W};
  float *x = rand_buf(cinfer_shape_elements(shape, 4));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .data = x,
                      .byte_size = (size_t)cinfer_shape_elements(shape, 4) * 4};
  memcpy(in.shape, shape, sizeof shape);
  float *res[2][6];
  size_t cnt[2][6];
  for (int fast = 0; fast < 2; fast++) {
    onnx_session *s;
    assert_null(onnx_session_create(m, &(onnx_options){.threads = 1 + fast, .no_fast = !fast, .profile = true}, &s));
    cinfer_tensor o[6];
    for (int rep = 0; rep < 2; rep++) {
      cinfer_status *st = onnx_session_run(s, &in, 1, o);
      if (st) fail_msg("run: %s", cinfer_status_message(st));
    }
    for (int k = 0; k < 6; k++) {
      cnt[fast][k] = o[k].byte_size / 4;
      res[fast][k] = malloc(o[k].byte_size);
      memcpy(res[fast][k], o[k].data, o[k].byte_size);
    }
    char *prof = profile_text(s);
    if (fast && !plain) { /* the blocked kernels ran (profile: kernel column of Concat/BN/Relu rows) */
      assert_non_null(strstr(prof, "Concat                            9  blocked"));
      assert_non_null(strstr(prof, "BatchNormalization+Relu           4  blocked"));
      assert_non_null(strstr(prof, "Relu                              1  blocked"));
    }
    if (fast && plain && N == 1) /* plain layouts: Concats still run in place (most of them) */
      assert_non_null(strstr(prof, "Concat                            7  blocked"));
    free(prof);
    onnx_session_destroy(s);
  }
  for (int k = 0; k < 6; k++) {
    assert_int_equal(cnt[0][k], cnt[1][k]);
    double mx = 0, md = 0;
    for (size_t i = 0; i < cnt[0][k]; i++) {
      mx = fmax(mx, fabs(res[0][k][i]));
      md = fmax(md, fabs(res[0][k][i] - res[1][k][i]));
    }
    if (md > 1e-5 * fmax(1.0, mx))
      fail_msg("blocked ops N%lld %lldx%lld plain %d output %d: max diff %g (max %g)", (long long)N, (long long)H,
               (long long)W, plain, k, md, mx);
    free(res[0][k]);
    free(res[1][k]);
  }
  free(x);
  onnx_model_destroy(m);
  unsetenv("CINFER_ONNX_PLAIN");
}

static void test_blocked_ops(void **state) {
  check_blocked_ops(1, 7, 9, false);
  check_blocked_ops(2, 5, 13, false);
  check_blocked_ops(3, 1, 1, false);
  check_blocked_ops(1, 6, 5, true);
  check_blocked_ops(2, 3, 4, true);
}

/* A conv whose left/top padding is wider than oneDNN's AVX2 direct kernel takes (UltraFace:
 * 3x3, dilation 5, pads 5) and whose input is blocked (from a 1x1 conv) runs on an input we
 * pad ourselves (kern_onednn_conv.c pad_blocked); fast vs reference, asymmetric pads, stride 2 and
 * an input column the strided window never reaches. */
typedef struct prepad_cfg { int64_t N, H, W, d, s, pt, pl, pb, pr; } prepad_cfg;

static void check_prepad(const prepad_cfg *c) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){c->N, 8, c->H, c->W});
  float *w0, *w1;
  add_conv(&b, "conv0", 16, 8, 1, "x", "c0", &w0);
  w1 = rand_buf(16 * 16 * 9);
  mb_init_f(&b, "w1", 4, (int64_t[]){16, 16, 3, 3}, w1);
  const char *ci[2] = {"c0", "w1"}, *co = "out";
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv1", 2, ci, 1, &co);
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){c->pt, c->pl, c->pb, c->pr});
  mb_attr_ints(&b, n, "dilations", 2, (int64_t[]){c->d, c->d});
  mb_attr_ints(&b, n, "strides", 2, (int64_t[]){c->s, c->s});
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  free(w0);
  free(w1);
  int64_t shape[4] = {c->N, 8, c->H, c->W};
  float *x = rand_buf(cinfer_shape_elements(shape, 4));
  double mx, md = ref_fast_max_diff(m, x, shape, 4, &mx);
  if (md > 1e-5 * fmax(1.0, mx))
    fail_msg("prepad N%lld %lldx%lld d%lld s%lld pads %lld,%lld,%lld,%lld: max diff %g (max %g)", (long long)c->N,
             (long long)c->H, (long long)c->W, (long long)c->d, (long long)c->s, (long long)c->pt, (long long)c->pl,
             (long long)c->pb, (long long)c->pr, md, mx);
  free(x);
  onnx_model_destroy(m);
}

static void test_prepad_conv(void **state) {
  const prepad_cfg cfgs[] = {
      {1, 13, 17, 5, 1, 5, 5, 5, 5}, /* UltraFace's shape of problem */
      {2, 9, 11, 4, 1, 6, 3, 2, 7},  /* asymmetric */
      {1, 15, 14, 1, 2, 4, 4, 1, 0}, /* stride 2: the last input column is never read */
      {1, 7, 6, 3, 1, 0, 6, 9, 0},   /* left pad only on one axis, top only on the other */
  };
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check_prepad(&cfgs[i]);
}

/* Nearest Resize by 2 along W (the FPN upsampling; ops_nn.c writes each source value twice
 * with vector shuffles) against the definition out[c][y][x] = in[c][y / 2][x / 2], for
 * half_pixel (the default) and asymmetric coordinates, widths with and without a tail, maps
 * small (one run) and large (row ranges on the pool at 2 threads). */
static void check_resize2x(int64_t C, int64_t H, int64_t W, const char *ctm) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){1, C, H, W});
  float sc[4] = {1, 1, 2, 2};
  mb_init_f(&b, "scales", 1, (int64_t[]){4}, sc);
  const char *ri[3] = {"x", "", "scales"}, *ro = "out";
  Onnx__NodeProto *n = mb_node(&b, "Resize", "resize", 3, ri, 1, &ro);
  Onnx__AttributeProto *a = &b.attrs[b.n_attrs++];
  onnx__attribute_proto__init(a);
  a->name = mb_str(&b, "coordinate_transformation_mode");
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  a->has_s = 1;
  a->s.data = (uint8_t *)mb_str(&b, ctm);
  a->s.len = strlen(ctm);
  n->attribute[n->n_attribute++] = a;
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  int64_t shape[4] = {1, C, H, W};
  float *x = rand_buf(C * H * W), *y;
  size_t ny;
  bool f;
  run(m, true, x, shape, 4, &y, &ny, &f); /* 2 threads: large maps in row ranges on the pool */
  assert_int_equal(ny, (size_t)(C * 2 * H * 2 * W));
  for (int64_t c = 0; c < C; c++)
    for (int64_t h = 0; h < 2 * H; h++)
      for (int64_t w = 0; w < 2 * W; w++)
        if (y[(c * 2 * H + h) * 2 * W + w] != x[(c * H + h / 2) * W + w / 2])
          fail_msg("resize 2x C%lld H%lld W%lld %s: out[%lld][%lld][%lld] = %g, want %g", (long long)C, (long long)H,
                   (long long)W, ctm, (long long)c, (long long)h, (long long)w, y[(c * 2 * H + h) * 2 * W + w],
                   x[(c * H + h / 2) * W + w / 2]);
  free(x);
  free(y);
  onnx_model_destroy(m);
}

static void test_resize_2x(void **state) {
  check_resize2x(2, 3, 19, "half_pixel");
  check_resize2x(2, 3, 16, "asymmetric");
  check_resize2x(2, 3, 5, "half_pixel");
  /* 104,960 output values: 6 row ranges at 2 threads, not aligned with the channels */
  check_resize2x(16, 40, 41, "half_pixel");
  check_resize2x(9, 37, 64, "asymmetric");
}

/* Softmax over a short innermost axis in float (kern_softmax.c) against the
 * double-precision reference: last axis (opset 13), the opset-11 coerced 2-D form over the
 * trailing dims, inputs up to +-100 (overflows unless the max is subtracted), one and 64-wide rows; a 65-wide
 * axis stays on the reference. */
static void check_softmax_s(int opset, int nd, const int64_t *dims, int64_t axis, bool want_fast, float scale) {
  mb b;
  mb_init(&b, opset);
  mb_input(&b, "x", nd, dims);
  const char *i = "x", *o = "out";
  mb_attr_i(&b, mb_node(&b, "Softmax", "sm", 1, &i, 1, &o), "axis", axis);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  int64_t n = cinfer_shape_elements(dims, nd);
  float *x = rand_buf(n), *ref, *fast;
  for (int64_t k = 0; k < n; k++) x[k] *= scale; /* 100: expf overflows past 88.7 */
  size_t nr, nf;
  bool fr, ff;
  run(m, false, x, dims, nd, &ref, &nr, &fr);
  run(m, true, x, dims, nd, &fast, &nf, &ff);
  assert_int_equal(ff, want_fast);
  assert_int_equal(nr, nf);
  for (size_t k = 0; k < nr; k++)
    if (fabsf(ref[k] - fast[k]) > 1e-6f * fmaxf(fabsf(ref[k]), 1e-30f) + 1e-12f)
      fail_msg("softmax opset %d axis %lld: element %zu ref %.9g fast %.9g", opset, (long long)axis, k, ref[k], fast[k]);
  free(x);
  free(ref);
  free(fast);
  onnx_model_destroy(m);
}

static void check_softmax(int opset, int nd, const int64_t *dims, int64_t axis, bool want_fast) {
  check_softmax_s(opset, nd, dims, axis, want_fast, 100.0f);
}

static void test_softmax_fast(void **state) {
  /* rows of 2, 8 at a time through v8_exp (inputs within +-4), and a tail of 5 rows */
  check_softmax_s(13, 3, (int64_t[]){1, 4421, 2}, -1, true, 4.0f);
  check_softmax_s(11, 4, (int64_t[]){1, 3, 41, 2}, 3, true, 4.0f); /* opset 11, last axis */
  check_softmax(13, 3, (int64_t[]){3, 5, 2}, -1, true);
  check_softmax(13, 4, (int64_t[]){1, 7, 9, 2}, 3, true);
  check_softmax(11, 2, (int64_t[]){2, 7}, 1, true);
  check_softmax(11, 4, (int64_t[]){4, 3, 2, 5}, 2, true); /* rows of 2 * 5 */
  check_softmax(13, 2, (int64_t[]){5, 64}, 1, true);
  check_softmax(13, 2, (int64_t[]){6, 1}, 1, true);
  check_softmax(13, 3, (int64_t[]){2, 3, 65}, 2, false);
  check_softmax(13, 3, (int64_t[]){2, 3, 4}, 1, false); /* not the innermost axis */
}

/* Exp's fast path (v8_exp where every lane of 8 is within +-87, expf elsewhere) against the
 * reference (expf): within 2 ulp, and exact where expf is used (specials, overflow,
 * subnormal results, the tail). */
static void test_exp_fast(void **state) {
  mb b;
  mb_init(&b, 13);
  int64_t n = 4099;
  mb_input(&b, "x", 1, &n);
  const char *i = "x", *o = "out";
  mb_node(&b, "Exp", "exp", 1, &i, 1, &o);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  float *x = rand_buf(n), *ref, *fast;
  for (int64_t k = 0; k < n; k++) x[k] *= k < 2048 ? 10.0f : 95.0f;
  const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 88.7f, 88.8f, -87.5f, -103.0f, -104.0f, 87.0f, -87.0f};
  for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) x[3000 + 8 * k] = sp[k];
  size_t nr, nf;
  bool fr, ff;
  run(m, false, x, &n, 1, &ref, &nr, &fr);
  run(m, true, x, &n, 1, &fast, &nf, &ff);
  assert_true(ff);
  assert_int_equal(nr, nf);
  for (size_t k = 0; k < nr; k++) {
    bool same = memcmp(&ref[k], &fast[k], sizeof(float)) == 0 || (isnan(ref[k]) && isnan(fast[k]));
    if (!same && !(isfinite(ref[k]) && fabsf(ref[k] - fast[k]) <= 2.5e-7f * fabsf(ref[k])))
      fail_msg("exp(%.9g): reference %.9g fast %.9g", x[k], ref[k], fast[k]);
  }
  free(x);
  free(ref);
  free(fast);
  onnx_model_destroy(m);
}

/* Broadcasting float binary ops split over 2 threads (more than 65536 outputs): every
 * element against the definition, a (4-D) op b (b right-aligned, dims 1 broadcast). */
static void check_binary_threads(const char *op, const int64_t *ad, int bn, const int64_t *bd) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, ad);
  int64_t nb = cinfer_shape_elements(bd, bn);
  float *bv = rand_buf(nb);
  for (int64_t k = 0; k < nb; k++) bv[k] += bv[k] >= 0 ? 0.5f : -0.5f; /* no division by ~0 */
  mb_init_f(&b, "y", bn, bd, bv);
  const char *in[2] = {"x", "y"}, *o = "out";
  mb_node(&b, op, "bin", 2, in, 1, &o);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  int64_t na = cinfer_shape_elements(ad, 4);
  float *x = rand_buf(na), *got;
  size_t n;
  bool fast;
  run(m, false, x, ad, 4, &got, &n, &fast); /* reference kernels, 2 threads */
  assert_int_equal(n, (size_t)na);
  int64_t b4[4] = {1, 1, 1, 1};
  for (int i = 0; i < bn; i++) b4[4 - bn + i] = bd[i];
  for (int64_t i0 = 0, k = 0; i0 < ad[0]; i0++)
    for (int64_t i1 = 0; i1 < ad[1]; i1++)
      for (int64_t i2 = 0; i2 < ad[2]; i2++)
        for (int64_t i3 = 0; i3 < ad[3]; i3++, k++) {
          int64_t j = (((b4[0] > 1 ? i0 : 0) * b4[1] + (b4[1] > 1 ? i1 : 0)) * b4[2] + (b4[2] > 1 ? i2 : 0)) * b4[3] +
                      (b4[3] > 1 ? i3 : 0);
          float a = x[k], c = bv[j];
          float want = !strcmp(op, "Add") ? a + c : !strcmp(op, "Sub") ? a - c : !strcmp(op, "Mul") ? a * c : a / c;
          if (memcmp(&want, &got[k], sizeof want)) fail_msg("%s element %lld: want %.9g got %.9g", op, (long long)k, want, got[k]);
        }
  free(bv);
  free(x);
  free(got);
  onnx_model_destroy(m);
}

static void test_binary_threads(void **state) {
  /* batch 1 (a larger batch would run on one-thread workers); the split points fall
   * inside rows of the merged iteration space */
  check_binary_threads("Add", (int64_t[]){1, 6, 130, 170}, 3, (int64_t[]){6, 1, 170});
  check_binary_threads("Mul", (int64_t[]){1, 64, 80, 80}, 4, (int64_t[]){1, 64, 80, 80});
  check_binary_threads("Sub", (int64_t[]){1, 9, 120, 70}, 4, (int64_t[]){1, 9, 1, 70});
  check_binary_threads("Div", (int64_t[]){1, 3, 211, 173}, 1, (int64_t[]){173});
}

/* 1x1 conv -> depthwise 3x3 stride-2 conv run as one oneDNN primitive (dw post-op) when the
 * 1x1's output is >= 2 MiB: against the reference, odd sizes (the stride-2 output rounds
 * up), with/without activations and depthwise bias, blocked (a 1x1 conv after it) or plain
 * (graph output) destination; the profile must show the pair as one step. */
/* Independent of the engine: whether this host's oneDNN has a non-reference implementation
 * of 1x1 conv (C -> M, HxW, Relu or not) + dw 3x3 stride-2 post-op (Relu or not), under the
 * same ISA cap the engine sets (AVX2 unless DNNL_MAX_CPU_ISA). Where it has none (the
 * AVX-512 test host answers ref_fused_convolution) the engine must leave the pair unfused. */
static bool onednn_has_dw_pair(int64_t C, int64_t M, int64_t H, int64_t W, bool relu1, bool relu2) {
  dnnl_engine_t eng;
  if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return false;
  dnnl_dims_t xd = {1, C, H, W}, wd = {M, C, 1, 1}, yd = {1, M, H, W}, one = {1, 1}, zero = {0, 0};
  dnnl_memory_desc_t xa, wa, ya;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  const char *impl = NULL;
  bool ok = dnnl_memory_desc_init_by_tag(&xa, 4, xd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            dnnl_memory_desc_init_by_tag(&ya, 4, yd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            dnnl_primitive_attr_create(&attr) == dnnl_success && dnnl_post_ops_create(&po) == dnnl_success &&
            (!relu1 || dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0) == dnnl_success) &&
            dnnl_post_ops_append_dw(po, dnnl_f32, dnnl_f32, dnnl_f32, 3, 2, 1, 0, 0, NULL) == dnnl_success &&
            (!relu2 || dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0, 0) == dnnl_success) &&
            dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success &&
            dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &xa, &wa, NULL,
                                               &ya, one, zero, zero) == dnnl_success &&
            dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL) == dnnl_success &&
            dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
            strncmp(impl, "ref", 3) && !strstr(impl, "gemm");
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  dnnl_engine_destroy(eng);
  return ok;
}

static void check_dw_fusion(int64_t C, int64_t M, int64_t H, int64_t W, bool relu1, bool relu2, bool dw_bias,
                            bool tail) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 4, (int64_t[]){1, C, H, W});
  float *w0 = rand_buf(M * C), *w1 = rand_buf(M * 9), *b1 = rand_buf(M), *w2 = rand_buf(M * M);
  mb_init_f(&b, "w0", 4, (int64_t[]){M, C, 1, 1}, w0);
  mb_init_f(&b, "w1", 4, (int64_t[]){M, 1, 3, 3}, w1);
  mb_init_f(&b, "b1", 1, (int64_t[]){M}, b1);
  mb_init_f(&b, "w2", 4, (int64_t[]){M, M, 1, 1}, w2);
  const char *c0i[2] = {"x", "w0"}, *c0o = "c0", *r0o = "r0", *c1i[3] = {relu1 ? "r0" : "c0", "w1", "b1"};
  const char *c1o = "c1", *r1o = "r1", *c2i[2] = {relu2 ? "r1" : "c1", "w2"}, *out = "out";
  mb_node(&b, "Conv", "pw", 2, c0i, 1, &c0o);
  if (relu1) mb_node(&b, "Relu", "relu1", 1, &c0o, 1, &r0o);
  const char *dwo = tail ? c1o : relu2 ? c1o : out;
  Onnx__NodeProto *n = mb_node(&b, "Conv", "dw", dw_bias ? 3 : 2, c1i, 1, &dwo);
  mb_attr_i(&b, n, "group", M);
  mb_attr_ints(&b, n, "strides", 2, (int64_t[]){2, 2});
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  if (relu2) mb_node(&b, "Relu", "relu2", 1, &c1o, 1, tail ? &r1o : &out);
  if (tail) mb_node(&b, "Conv", "tail", 2, c2i, 1, &out);
  mb_output(&b, "out");
  onnx_model *m = load_built(&b);
  free(w0);
  free(w1);
  free(b1);
  free(w2);
  int64_t shape[4] = {1, C, H, W};
  float *x = rand_buf(cinfer_shape_elements(shape, 4));
  double mx, md = ref_fast_max_diff(m, x, shape, 4, &mx);
  if (md > 1e-5 * fmax(1.0, mx))
    fail_msg("dw fusion C%lld M%lld %lldx%lld relu %d/%d bias %d tail %d: max diff %g (max %g)", (long long)C,
             (long long)M, (long long)H, (long long)W, relu1, relu2, dw_bias, tail, md, mx);
  char *prof = profile_run(m, x, shape, 4); /* runs the plan first: the engine has set the ISA cap */
  bool fused = strstr(prof, relu1 ? "Conv+Relu+Conv" : "Conv+Conv") != NULL;
  bool jit = onednn_has_dw_pair(C, M, H, W, relu1, relu2);
  if (fused != jit)
    fail_msg("%s, although oneDNN %s a jit implementation of the pair:\n%s", fused ? "fused" : "not fused",
             jit ? "has" : "has no", prof);
  if (!jit) print_message("dw fusion C%lld M%lld: this host's oneDNN has no jit pair; checked unfused\n",
                          (long long)C, (long long)M);
  free(prof);
  free(x);
  onnx_model_destroy(m);
}

static void test_dw_fusion(void **state) {
  check_dw_fusion(16, 32, 97, 171, true, true, true, true);    /* 2.1 MB, odd: rounds up */
  check_dw_fusion(8, 16, 131, 251, false, true, false, false); /* plain destination */
  check_dw_fusion(24, 24, 120, 184, true, false, true, false);
}

/* The fused input ops round like the separate ops: Sub -> Mul -> small-K Conv -> Relu ->
 * 1x1 Conv on x equals, bit for bit, the same graph without Sub/Mul fed (x - a) * k
 * computed here; both with the fast kernels (blocked and plain outputs). */
static void check_pre_exact(int chain) {
  conv_cfg c = {1, 3, 19, 26, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, chain, 0, 1};
  size_t len;
  uint8_t *buf = build(&c, &len, 1);
  onnx_model *mp, *mq;
  assert_null(onnx_model_load_buffer(buf, len, NULL, &mp));
  free(buf);
  rng = 777; /* the same weights again */
  c.pre = 0;
  buf = build(&c, &len, 1);
  assert_null(onnx_model_load_buffer(buf, len, NULL, &mq));
  free(buf);
  int64_t shape[4] = {1, 3, 19, 26};
  int64_t n = cinfer_shape_elements(shape, 4);
  float *x = rand_buf(n), *xq = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    volatile float t = x[i] - 0.25f;
    xq[i] = t * 1.5f;
  }
  float *yp, *yq;
  size_t np, nq;
  bool fp, fq;
  run(mp, true, x, shape, 4, &yp, &np, &fp);
  run(mq, true, xq, shape, 4, &yq, &nq, &fq);
  assert_true(fp && fq);
  assert_int_equal(np, nq);
  for (size_t i = 0; i < np; i++)
    if (memcmp(&yp[i], &yq[i], sizeof(float)))
      fail_msg("chain %d: element %zu fused %.9g, separate %.9g", chain, i, yp[i], yq[i]);
  free(x);
  free(xq);
  free(yp);
  free(yq);
  onnx_model_destroy(mp);
  onnx_model_destroy(mq);
}

static void test_pre_exact(void **state) {
  rng = 777;
  check_pre_exact(1);
  rng = 777;
  check_pre_exact(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_shapes),
      cmocka_unit_test(test_smallk16_equals_8lane),
      cmocka_unit_test(test_smallk_in_place_equals_copy),
      cmocka_unit_test(test_smallk_dw_fusion),
      cmocka_unit_test(test_pre_exact),
      cmocka_unit_test(test_dw_fusion),
      cmocka_unit_test(test_batch_rows),
      cmocka_unit_test(test_pool_shapes),
      cmocka_unit_test(test_noop_pad_alias),
      cmocka_unit_test(test_noop_elided),
      cmocka_unit_test(test_slice_elided),
      cmocka_unit_test(test_winograd),
      cmocka_unit_test(test_winograd16_equals_8lane),
      cmocka_unit_test(test_short_rows),
      cmocka_unit_test(test_pool_chain),
      cmocka_unit_test(test_conv_mul_fold),
      cmocka_unit_test(test_blocked_ops),
      cmocka_unit_test(test_sub_batch),
      cmocka_unit_test(test_prepad_conv),
      cmocka_unit_test(test_resize_2x),
      cmocka_unit_test(test_softmax_fast),
      cmocka_unit_test(test_exp_fast),
      cmocka_unit_test(test_binary_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
