/* test_onnx_families.c: walks the table of fast kernel families (src/backends/onnx/kern.h)
 * as ggml's test-backend-ops walks its operators. For every family in kern_families[]:
 *   - the cases below that name it (at least one, else the test fails: a family added to
 *     the table without cases is a failure, not a pass);
 *   - each case is a small graph built so that the family takes a step of it (several
 *     shapes: odd sizes, padding, strides, dilation, channel counts off the 8-channel
 *     block where the family allows them); it runs once with the reference kernels only
 *     (no_fast) and once with the fast paths, whose profile must show the family in its
 *     kernel column (else the case fails as "not exercised": unsupported never passes);
 *   - every output element is compared with the reference under the family's bound
 *     |ref - fast| <= atol * max(1, max |ref|) + rtol * |ref| (NaN equal to NaN).
 * Also checks the table itself: unique names, required members present. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "backends/onnx/kern.h"
#include "backends/onnx/onnx.h"
#include "model_builder.h"

static uint32_t rng = 4242;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static float *rand_buf(int64_t n) {
  float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

/* One case: the graph is x (shape x[0..nd)) -> build() -> "out". Parameters by builder:
 *   conv:    p = {M, KH, KW, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, dil, group,
 *                 act (0 none, 1 Relu, 2 PRelu per channel, 3 Clip 0..6, 4 Tanh),
 *                 pre (a 1x1 conv 8 -> C in front: a blocked input; x then has 8 channels),
 *                 post (a 1x1 conv after: every consumer reads blocked), add (out + input)}
 *   pool:    p = {max, KH, KW, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, ceil,
 *                 count_include_pad, dil, sandwich (1x1 convs 8 -> C before and after)}
 *   softmax: p = {axis}, with the case's opset
 *   exp:     p = {} (x scaled by `scale`, specials written in)
 *   blocked: p = {variant: 0 Concat + BN+Relu, 1 Relu, 2 Concat with the plain input;
 *                 wide: 1 for channel counts in whole 16-blocks (nChw16c on AVX-512)} */
typedef struct fam_case {
  const char *family, *what;
  void (*build)(mb *b, const struct fam_case *c);
  int opset, nd;
  int64_t x[4];
  int64_t p[16];
  float scale;
  bool blk8; /* the family takes the case only with 8-channel blocks (kern_block() 8) */
} fam_case;

enum { C_M, C_KH, C_KW, C_SH, C_SW, C_PT, C_PL, C_PB, C_PR, C_DIL, C_G, C_ACT, C_PRE, C_POST, C_ADD };
enum { P_MAX, P_KH, P_KW, P_SH, P_SW, P_PT, P_PL, P_PB, P_PR, P_CEIL, P_INCL, P_DIL, P_SAND };

/* a conv node in -> out with random weights [M, C/g, kh, kw] (1-D when the input is) */
static Onnx__NodeProto *add_conv(mb *b, const char *name, const char *in, const char *out, int nd, int64_t C,
                                 int64_t M, int64_t kh, int64_t kw, int64_t g, bool bias) {
  char wn[40], bn[40];
  snprintf(wn, sizeof wn, "%s_w", name);
  snprintf(bn, sizeof bn, "%s_b", name);
  int64_t wd[4] = {M, C / g, nd == 3 ? kw : kh, kw};
  int64_t n = M * (C / g) * kh * kw;
  float *w = rand_buf(n), *bv = rand_buf(M);
  mb_init_f(b, wn, nd, wd, w); /* copied */
  if (bias) mb_init_f(b, bn, 1, &M, bv);
  free(w);
  free(bv);
  const char *ci[3] = {in, wn, bn};
  Onnx__NodeProto *nd_ = mb_node(b, "Conv", name, bias ? 3 : 2, ci, 1, &out);
  if (g > 1) mb_attr_i(b, nd_, "group", g);
  return nd_;
}

static void build_conv(mb *b, const fam_case *c) {
  const int64_t *p = c->p;
  int nd = c->nd;
  int64_t C = c->x[1];
  const char *h = "x";
  if (p[C_PRE]) { /* x has 8 channels: 1x1 conv 8 -> C, whose output stays blocked */
    add_conv(b, "pre", "x", "h", nd, 8, p[C_PRE], 1, 1, 1, false);
    C = p[C_PRE];
    h = "h";
  }
  const char *y = p[C_ACT] || p[C_ADD] || p[C_POST] ? "y" : "out";
  Onnx__NodeProto *n = add_conv(b, "conv", h, y, nd, C, p[C_M], p[C_KH], p[C_KW], p[C_G], true);
  if (nd == 3) {
    mb_attr_ints(b, n, "strides", 1, (int64_t[]){p[C_SW]});
    mb_attr_ints(b, n, "pads", 2, (int64_t[]){p[C_PL], p[C_PR]});
    mb_attr_ints(b, n, "dilations", 1, (int64_t[]){p[C_DIL]});
  } else {
    mb_attr_ints(b, n, "strides", 2, (int64_t[]){p[C_SH], p[C_SW]});
    mb_attr_ints(b, n, "pads", 4, (int64_t[]){p[C_PT], p[C_PL], p[C_PB], p[C_PR]});
    mb_attr_ints(b, n, "dilations", 2, (int64_t[]){p[C_DIL], p[C_DIL]});
  }
  const char *a = y; /* conv -> Add -> activation -> 1x1 conv, each optional */
  if (p[C_ADD]) { /* the conv keeps C channels and the spatial size: Conv+Add */
    a = p[C_ACT] || p[C_POST] ? "s" : "out";
    mb_node(b, "Add", "add", 2, (const char *[]){y, h}, 1, &a);
  }
  if (p[C_ACT]) {
    const char *in = a;
    a = p[C_POST] ? "a" : "out";
    if (p[C_ACT] == 1) mb_node(b, "Relu", "relu", 1, &in, 1, &a);
    if (p[C_ACT] == 2) {
      float *sl = rand_buf(p[C_M]);
      mb_init_f(b, "slope", 3, (int64_t[]){p[C_M], 1, 1}, sl);
      free(sl);
      mb_node(b, "PRelu", "prelu", 2, (const char *[]){in, "slope"}, 1, &a);
    }
    if (p[C_ACT] == 3) {
      float lo = 0, hi = 6;
      mb_init_f(b, "lo", 0, NULL, &lo);
      mb_init_f(b, "hi", 0, NULL, &hi);
      mb_node(b, "Clip", "clip", 3, (const char *[]){in, "lo", "hi"}, 1, &a);
    }
    if (p[C_ACT] == 4) mb_node(b, "Tanh", "tanh", 1, &in, 1, &a);
  }
  if (p[C_POST]) add_conv(b, "post", a, "out", nd, p[C_M], 8, 1, 1, 1, false);
}

static void build_pool(mb *b, const fam_case *c) {
  const int64_t *p = c->p;
  int64_t C = c->x[1];
  const char *in = "x", *out = p[P_SAND] ? "q" : "out";
  if (p[P_SAND]) {
    add_conv(b, "pre", "x", "h", 4, 8, p[P_SAND], 1, 1, 1, false);
    C = p[P_SAND];
    in = "h";
  }
  Onnx__NodeProto *n = mb_node(b, p[P_MAX] ? "MaxPool" : "AveragePool", "pool", 1, &in, 1, &out);
  mb_attr_ints(b, n, "kernel_shape", 2, (int64_t[]){p[P_KH], p[P_KW]});
  mb_attr_ints(b, n, "strides", 2, (int64_t[]){p[P_SH], p[P_SW]});
  mb_attr_ints(b, n, "pads", 4, (int64_t[]){p[P_PT], p[P_PL], p[P_PB], p[P_PR]});
  if (p[P_CEIL]) mb_attr_i(b, n, "ceil_mode", 1);
  if (p[P_INCL]) mb_attr_i(b, n, "count_include_pad", 1);
  if (p[P_DIL] > 1) mb_attr_ints(b, n, "dilations", 2, (int64_t[]){p[P_DIL], p[P_DIL]});
  if (p[P_SAND]) add_conv(b, "post", "q", "out", 4, C, 8, 1, 1, 1, false);
}

static void build_softmax(mb *b, const fam_case *c) {
  const char *i = "x", *o = "out";
  mb_attr_i(b, mb_node(b, "Softmax", "sm", 1, &i, 1, &o), "axis", c->p[0]);
}

static void build_exp(mb *b, const fam_case *c) {
  (void)c;
  const char *i = "x", *o = "out";
  mb_node(b, "Exp", "e", 1, &i, 1, &o);
}

static void add_bn(mb *b, const char *name, int64_t C, const char *in, const char *out) {
  float *p = rand_buf(4 * C);
  for (int64_t c = 0; c < C; c++) p[3 * C + c] = fabsf(p[3 * C + c]) + 0.5f; /* variance > 0 */
  mb_bn(b, name, C, in, out, p);
  free(p);
}

/* x [N, 8, H, W] -> c0 = 1x1 conv 8 -> 16, c1 = 3x3 conv 16 -> 8 (pads 1), then
 *   variant 0: Concat(c0, c1) -> BN+Relu -> 1x1 conv (DenseNet's dense block);
 *   variant 1: Concat(c0, c1) -> Relu -> 1x1 conv (RetinaFace's SSH module);
 *   variant 2: Concat(c0, c1, x) -> BN+Relu -> 1x1 conv (x: a plain graph input) */
static void build_blocked(mb *b, const fam_case *c) {
  /* p[1]: the convs give 32 and 16 channels (48 concatenated: whole nChw16c blocks) */
  int64_t M0 = c->p[1] ? 32 : 16, M1 = c->p[1] ? 16 : 8;
  add_conv(b, "c0", "x", "c0", 4, 8, M0, 1, 1, 1, true);
  Onnx__NodeProto *n = add_conv(b, "c1", "c0", "c1", 4, M0, M1, 3, 3, 1, false);
  mb_attr_ints(b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  const char *cat = "cat", *bn = "bn", *r = "r";
  const char *ci[3] = {"c0", "c1", "x"};
  int64_t C = M0 + M1 + (c->p[0] == 2 ? 8 : 0);
  mb_attr_i(b, mb_node(b, "Concat", "concat", c->p[0] == 2 ? 3 : 2, ci, 1, &cat), "axis", 1);
  if (c->p[0] == 1) mb_node(b, "Relu", "relu", 1, &cat, 1, &r);
  else {
    add_bn(b, "bn", C, "cat", "bn");
    mb_node(b, "Relu", "relu", 1, &bn, 1, &r);
  }
  add_conv(b, "c2", "r", "out", 4, C, 8, 1, 1, 1, false);
}

#define CONV(fam, what, N, C, H, W, ...) \
  {fam, what, build_conv, 13, 4, {N, C, H, W}, {__VA_ARGS__}, 1.0f}
/* a case whose channel counts are not multiples of 16 (taken with 8-channel blocks only) */
#define POOL8(fam, what, N, C, H, W, ...) \
  {fam, what, build_pool, 13, 4, {N, C, H, W}, {__VA_ARGS__}, 1.0f, true}
#define CONV8(fam, what, N, C, H, W, ...) \
  {fam, what, build_conv, 13, 4, {N, C, H, W}, {__VA_ARGS__}, 1.0f, true}
#define POOL(fam, what, N, C, H, W, ...) \
  {fam, what, build_pool, 13, 4, {N, C, H, W}, {__VA_ARGS__}, 1.0f}

/*                                        M  KH KW sh sw pt pl pb pr dil g act pre post add */
static const fam_case cases[] = {
    {"exp", "4099 values, scale 10", build_exp, 13, 1, {4099}, {0}, 10.0f},
    {"exp", "overflow and underflow, scale 95", build_exp, 13, 2, {7, 131}, {0}, 95.0f},
    {"exp", "7 values: tail only", build_exp, 13, 1, {7}, {0}, 3.0f},
    {"softmax", "rows of 2, 8 at a time + tail", build_softmax, 13, 3, {1, 4421, 2}, {-1}, 4.0f},
    {"softmax", "rows of 2, +-100", build_softmax, 13, 4, {1, 7, 9, 2}, {3}, 100.0f},
    {"softmax", "opset 11 coerced rows of 10", build_softmax, 11, 4, {4, 3, 2, 5}, {2}, 1.0f},
    {"softmax", "rows of 64", build_softmax, 13, 2, {5, 64}, {1}, 1.0f},
    {"softmax", "rows of 1", build_softmax, 13, 2, {6, 1}, {1}, 1.0f},
    /*                                               max KH KW sh sw pt pl pb pr ceil incl dil sand */
    POOL("pool8c", "max 3x3 s2 p1", 1, 8, 17, 13, 1, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, 16),
    POOL8("pool8c", "avg 2x2 s2, batch 2", 2, 8, 14, 12, 0, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 24),
    POOL("pool8c", "avg 3x3 s2 p1 include pad", 1, 8, 15, 13, 0, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 1, 16),
    POOL("pool8c", "max ceil, asymmetric pads", 1, 8, 15, 13, 1, 3, 3, 2, 2, 1, 0, 1, 2, 1, 0, 1, 16),
    POOL8("pool8c", "max dilated 2, 1 pixel out", 1, 8, 5, 5, 1, 3, 3, 1, 1, 0, 0, 0, 0, 0, 0, 2, 8),
    POOL("pool8c", "max 3x3 s2 p1, C 48, batch 2", 2, 8, 15, 17, 1, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, 48),
    POOL("pool8c", "avg 2x2 s2, C 32 (16-blocks)", 1, 8, 14, 12, 0, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 32),
    POOL("dnnlpool", "max 3x3 s2 p1, C 5", 2, 5, 17, 13, 1, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 1, 0),
    POOL("dnnlpool", "max 3x2 ceil, C 3", 2, 3, 16, 16, 1, 3, 2, 2, 3, 0, 1, 1, 0, 1, 0, 1, 0),
    POOL("dnnlpool", "avg 2x3 exclude pad, C 6", 2, 6, 14, 11, 0, 2, 3, 2, 2, 0, 1, 0, 1, 0, 0, 1, 0),
    POOL("dnnlpool", "avg 3x3 include pad, C 6", 2, 6, 15, 13, 0, 3, 3, 2, 2, 1, 1, 1, 1, 0, 1, 1, 0),
    POOL("dnnlpool", "max dilated 2, C 4", 2, 4, 15, 15, 1, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, 2, 0),
    {"blocked", "Concat + BN+Relu between convs", build_blocked, 13, 4, {1, 8, 7, 9}, {0}, 1.0f},
    {"blocked", "Concat + BN+Relu, batch 2", build_blocked, 13, 4, {2, 8, 5, 13}, {0}, 1.0f},
    {"blocked", "Concat -> Relu, 1x1 image, batch 3", build_blocked, 13, 4, {3, 8, 1, 1}, {1}, 1.0f},
    {"blocked", "Concat with a plain graph input", build_blocked, 13, 4, {1, 8, 6, 5}, {2}, 1.0f},
    {"blocked", "Concat 32+16 + BN+Relu (16-blocks)", build_blocked, 13, 4, {1, 8, 7, 9}, {0, 1}, 1.0f},
    {"blocked", "Concat 32+16 -> Relu, batch 2 (16-blocks)", build_blocked, 13, 4, {2, 8, 5, 6}, {1, 1}, 1.0f},
    {"blocked", "Concat 32+16+8 with a plain input", build_blocked, 13, 4, {1, 8, 6, 5}, {2, 1}, 1.0f},
    /*                                                    M  KH KW sh sw pt pl pb pr dil g act pre post add */
    CONV("smallk", "C3 M8 3x3 s2 Relu, plain out", 1, 3, 17, 23, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0),
    CONV("smallk", "C3 M6 (GEMM order) row tails", 1, 3, 19, 37, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0),
    CONV("smallk", "C1 M16 5x5 s3 asymmetric, blocked out", 2, 1, 20, 41, 16, 5, 5, 3, 3, 2, 0, 1, 2, 1, 1, 1, 0, 1, 0),
    CONV("smallk", "C4 K32 dilated 2 Clip", 1, 4, 9, 50, 9, 2, 4, 1, 2, 0, 3, 1, 0, 2, 1, 3, 0, 0, 0),
    CONV("smallk", "C3 M16 PRelu blocked out", 1, 3, 12, 21, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 1, 0),
    CONV("smallk", "C2 M24 no pad Tanh blocked out", 1, 2, 8, 10, 24, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 4, 0, 1, 0),
    CONV8("winograd", "C16 M8 7x9 Relu", 1, 8, 7, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, 0),
    CONV8("winograd", "C24 M40 12x13 batch 2", 2, 8, 12, 13, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 24, 1, 0),
    /* with 16-channel blocks winograd takes neither M = 16 from C = 16 nor outputs below 64
     * pixels (kern_winograd.c, wino_can_take): oneDNN's there */
    CONV8("winograd", "C32 M64 no pad PRelu", 1, 8, 10, 6, 64, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 2, 32, 1, 0),
    CONV("winograd", "C16 M32 asymmetric pads", 1, 8, 9, 11, 32, 3, 3, 1, 1, 2, 1, 0, 1, 1, 1, 1, 16, 1, 0),
    CONV8("winograd", "C16 M16 1x1 image", 1, 8, 1, 1, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 16, 1, 0),
    CONV("winograd", "C16 M32 32x32 Relu", 1, 8, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 16, 1, 0),
    CONV("winograd", "C32 M16 12x12 Relu", 1, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 32, 1, 0),
    CONV("winograd", "C32 M64 34x32 asymmetric pads PRelu", 1, 8, 34, 32, 64, 3, 3, 1, 1, 1, 0, 1, 2, 1, 1, 2, 32, 1, 0),
    CONV("onednn", "C16 M12 3x3 PRelu blocked in/out", 1, 8, 9, 11, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 16, 1, 0),
    CONV("onednn", "C32 M48 3x3 PRelu blocked in/out", 1, 8, 12, 11, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 32, 1, 0),
    CONV("onednn", "depthwise C32 blocked in/out Relu", 1, 8, 9, 11, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 32, 1, 32, 1, 0),
    CONV("onednn", "depthwise C48 s2 blocked in/out PRelu", 1, 8, 17, 15, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 48, 2, 48, 1, 0),
    CONV("onednn", "grouped C12 g3 M18 3x5 s(2,1) d2", 1, 12, 10, 14, 18, 3, 5, 2, 1, 1, 2, 0, 3, 2, 3, 0, 0, 0, 0),
    CONV("onednn", "depthwise C10 dilated 2 Relu", 1, 10, 15, 9, 10, 3, 3, 1, 1, 2, 2, 2, 2, 2, 10, 1, 0, 0, 0),
    CONV("onednn", "depthwise C24 s2 Clip batch 3", 3, 24, 9, 9, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 24, 3, 0, 0, 0),
    CONV("onednn", "1x1 C16 M16 + Add + Relu", 1, 16, 7, 7, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1),
    CONV("onednn", "C16 M16 3x3 d5 p5, pre-padded", 1, 8, 13, 17, 16, 3, 3, 1, 1, 5, 5, 5, 5, 5, 1, 0, 16, 0, 0),
    CONV("onednn", "C5 M7 stride 3 Tanh", 2, 5, 11, 13, 7, 3, 3, 3, 3, 1, 0, 1, 2, 1, 1, 4, 0, 0, 0),
    {"onednn", "1-D C5 M7 k4 s3 d2", build_conv, 13, 3, {1, 5, 31}, {7, 1, 4, 1, 3, 0, 1, 0, 2, 2, 1, 0, 0, 0, 0},
     1.0f},
};

/* per-family error bounds (see the file comment) */
static const struct { const char *family; double atol, rtol; } bounds[] = {
    {"exp", 0, 2.5e-7},      /* v8_exp: 2 ulp of expf */
    {"softmax", 1e-12, 1e-6}, /* float against the double reference */
    {"pool8c", 1e-5, 0},      /* between two oneDNN convs */
    {"dnnlpool", 1e-6, 0},    /* float average sums */
    {"blocked", 1e-5, 0},     /* exact itself; oneDNN convs around it */
    {"smallk", 1e-5, 0},  {"winograd", 1e-5, 0}, {"onednn", 1e-5, 0},
};

/* whether the profile's operator table has a row whose kernel column is `kern` (rows:
 * two spaces, operator, nodes, kernel, ms/run, share) */
static bool profile_has_kernel(const char *prof, const char *kern) {
  for (const char *l = prof; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    char op[64], k[32];
    int nodes;
    bool row = l[0] == ' ' && l[1] == ' ' && l[2] != ' ';
    if (row && sscanf(l, "%63s %d %31s", op, &nodes, k) == 3 && !strcmp(k, kern)) return true;
  }
  return false;
}

/* runs m on x; returns the output (caller frees) and the profile (caller frees) */
static float *run_model(onnx_model *m, bool fast, const float *x, int nd, const int64_t *shape, size_t *n,
                        char **prof) {
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 2, .no_fast = !fast, .profile = true}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = nd, .data = x,
                      .byte_size = (size_t)cinfer_shape_elements(shape, nd) * 4},
                o;
  memcpy(in.shape, shape, sizeof(int64_t) * (size_t)nd);
  cinfer_status *st = onnx_session_run(s, &in, 1, &o);
  if (st) fail_msg("run (%s): %s", fast ? "fast" : "reference", cinfer_status_message(st));
  *n = o.byte_size / 4;
  float *r = malloc(o.byte_size + 4);
  memcpy(r, o.data, o.byte_size);
  size_t plen = 0;
  FILE *f = open_memstream(prof, &plen);
  onnx_session_profile_print(s, f);
  fclose(f);
  onnx_session_destroy(s);
  return r;
}

/* avail: the family runs in this process (kern_family_available). A family that does not
 * (nChw8c-only ones on an AVX-512 host, where blocked values are nChw16c) must not show
 * in the profile; whatever ran instead is still compared with the reference. The
 * test_onnx_families_avx2 registration runs the same cases with oneDNN held to AVX2,
 * where every family is available. */
static void check_case(const fam_case *c, double atol, double rtol, bool avail) {
  mb b;
  mb_init(&b, c->opset);
  mb_input(&b, "x", c->nd, c->x);
  c->build(&b, c);
  mb_output(&b, "out");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  mb_done(&b);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("%s / %s: load: %s", c->family, c->what, cinfer_status_message(st));
  int64_t n = cinfer_shape_elements(c->x, c->nd);
  float *x = rand_buf(n);
  for (int64_t i = 0; i < n; i++) x[i] *= c->scale;
  if (!strcmp(c->family, "exp") && n > 3000) { /* specials, 8 apart: each in its own vector */
    const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 88.7f, 88.8f, -87.5f, -103.0f, -104.0f, 87.0f, -87.0f};
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++) x[2000 + 8 * k] = sp[k];
  }
  size_t nr, nf;
  char *pr, *pf;
  float *ref = run_model(m, false, x, c->nd, c->x, &nr, &pr);
  float *fast = run_model(m, true, x, c->nd, c->x, &nf, &pf);
  if (c->blk8 && kern_block() != 8) avail = false;
  if (avail && !profile_has_kernel(pf, c->family))
    fail_msg("%s / %s: not exercised (no step ran on the family):\n%s", c->family, c->what, pf);
  if (!avail && profile_has_kernel(pf, c->family))
    fail_msg("%s / %s: ran although not available in this process:\n%s", c->family, c->what, pf);
  assert_int_equal(nr, nf);
  double mx = 0;
  for (size_t i = 0; i < nr; i++)
    if (isfinite(ref[i])) mx = fmax(mx, fabs(ref[i]));
  for (size_t i = 0; i < nr; i++) {
    if (isnan(ref[i]) && isnan(fast[i])) continue;
    if (ref[i] == fast[i]) continue; /* also equal infinities */
    double d = fabs((double)ref[i] - (double)fast[i]);
    if (!(d <= atol * fmax(1.0, mx) + rtol * fabs(ref[i])))
      fail_msg("%s / %s: element %zu reference %.9g fast %.9g (max |ref| %g)", c->family, c->what, i, ref[i], fast[i],
               mx);
  }
  free(pr);
  free(pf);
  free(ref);
  free(fast);
  free(x);
  onnx_model_destroy(m);
}

/* the table: unique names, required members; every case names a family of the table */
static void test_table(void **state) {
  (void)state;
  assert_true(kern_n_families > 0);
  for (int i = 0; i < kern_n_families; i++) {
    const kern_family *f = kern_families[i];
    assert_non_null(f->name);
    assert_true(f->can_take && f->prepare && f->run && f->destroy);
    assert_string_not_equal(f->name, "ref"); /* the profile's word for no family */
    for (int j = 0; j < i; j++) assert_string_not_equal(f->name, kern_families[j]->name);
  }
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int found = 0;
    for (int i = 0; i < kern_n_families; i++) found += !strcmp(cases[k].family, kern_families[i]->name);
    if (!found) fail_msg("case '%s' names '%s', which is not in kern_families[]", cases[k].what, cases[k].family);
  }
}

/* every family against the reference, in table order */
static void test_walk_families(void **state) {
  (void)state;
  for (int i = 0; i < kern_n_families; i++) {
    const char *name = kern_families[i]->name;
    int nb = -1;
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++)
      if (!strcmp(bounds[k].family, name)) nb = (int)k;
    if (nb < 0) fail_msg("family '%s' has no error bound in test_onnx_families.c", name);
    int ran = 0;
    bool avail = kern_family_available(kern_families[i]);
    int others = 0; /* cases the family does not take here (blk8 at block 16) */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
      if (!strcmp(cases[k].family, name)) {
        check_case(&cases[k], bounds[nb].atol, bounds[nb].rtol, avail);
        ran++;
        others += avail && cases[k].blk8 && kern_block() != 8;
      }
    if (avail && others == ran) fail_msg("family '%s': no case it takes with %d-channel blocks", name, kern_block());
    if (!ran) fail_msg("family '%s' has no test cases: not exercised", name);
    if (avail && others) printf("family %-10s %d cases passed (%d of them on the others: 8-channel blocks only)\n", name, ran, others);
    else if (avail) printf("family %-10s %d cases passed\n", name, ran);
    else printf("family %-10s not available in this process (nChw16c plan): %d cases passed on the others\n", name, ran);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_walk_families),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
