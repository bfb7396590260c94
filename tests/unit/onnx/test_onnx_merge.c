/* test_onnx_merge.c: sibling convs merged into one (merge_siblings in plan.c).
 *
 * A trunk conv (3x3, 16 -> 64, Relu: a blocked output on the fast path) feeds
 *   - three 1x1 heads 64 -> 4, 8 and 20 with biases, graph outputs (RetinaFace's
 *     detection heads): merged into one conv of 32 channels;
 *   - two 3x3 pad-1 convs 64 -> 12 and 64 -> 5 + Relu, no bias, read by a Transpose and a
 *     graph output (plain consumers): merged into one of 17;
 *   - a 1x1 64 -> 8 with stride 2 (another geometry: stays alone).
 * At 1 and 2 threads, batch 1 and 3: the profile names the merged steps ("Conv[x3]",
 * "Conv+Relu[x2]") at batch 1 (one-row plans: also the 2-thread batch's row groups), every output is within
 * 1e-5 (relative to max|ref|) of the reference kernels, and equal bit for bit to the same
 * session with the merge turned off (CINFER_ONNX_NO_MERGE=1, read at plan build). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "model_builder.h"

#define H 19
#define W 23
#define NOUT 6

static const char *out_names[NOUT] = {"cls", "box", "lmk", "t12", "r5", "s2"};

static float *rnd(int64_t n, unsigned *seed) {
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    v[i] = (float)((*seed >> 9) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

static void conv(mb *b, const char *name, const char *x, const char *y, int64_t M, int64_t C, int64_t k, int pad,
                 int stride, bool bias, unsigned *seed) {
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s_w", name);
  snprintf(bn, sizeof bn, "%s_b", name);
  int64_t wd[4] = {M, C, k, k}, bd[1] = {M};
  float *w = rnd(M * C * k * k, seed), *bv = rnd(M, seed);
  mb_init_f(b, wn, 4, wd, w);
  if (bias) mb_init_f(b, bn, 1, bd, bv);
  const char *in[3] = {x, wn, bn};
  Onnx__NodeProto *n = mb_node(b, "Conv", name, bias ? 3 : 2, in, 1, &y);
  if (pad) mb_attr_ints(b, n, "pads", 4, (int64_t[]){pad, pad, pad, pad});
  if (stride > 1) mb_attr_ints(b, n, "strides", 2, (int64_t[]){stride, stride});
  free(w);
  free(bv);
}

static onnx_model *heads(void) {
  mb b;
  mb_init(&b, 13);
  unsigned seed = 3;
  int64_t xd[4] = {-1, 16, H, W};
  mb_input(&b, "x", 4, xd);
  conv(&b, "trunk", "x", "t0", 64, 16, 3, 1, 1, true, &seed);
  const char *t0 = "t0", *t = "t";
  mb_node(&b, "Relu", "trunk_relu", 1, &t0, 1, &t);
  conv(&b, "cls", "t", "cls", 4, 64, 1, 0, 1, true, &seed);
  conv(&b, "box", "t", "box", 8, 64, 1, 0, 1, true, &seed);
  conv(&b, "s2", "t", "s2", 8, 64, 1, 0, 2, true, &seed);
  conv(&b, "lmk", "t", "lmk", 20, 64, 1, 0, 1, true, &seed);
  conv(&b, "c12", "t", "a12", 12, 64, 3, 1, 1, false, &seed);
  conv(&b, "c5", "t", "a5", 5, 64, 3, 1, 1, false, &seed);
  const char *a12 = "a12", *r12 = "r12", *a5 = "a5", *r5 = "r5", *t12 = "t12";
  mb_node(&b, "Relu", "relu12", 1, &a12, 1, &r12);
  mb_node(&b, "Relu", "relu5", 1, &a5, 1, &r5);
  Onnx__NodeProto *tr = mb_node(&b, "Transpose", "tr12", 1, &r12, 1, &t12);
  mb_attr_ints(&b, tr, "perm", 4, (int64_t[]){0, 2, 3, 1});
  for (int i = 0; i < NOUT; i++) mb_output(&b, out_names[i]);
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  mb_done(&b);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  return m;
}

typedef struct {
  float *o[NOUT];
  size_t n[NOUT];
  char *prof;
} result;

static void run(onnx_model *m, int threads, bool no_fast, bool no_merge, const float *x, int64_t N, result *r) {
  if (no_merge) setenv("CINFER_ONNX_NO_MERGE", "1", 1);
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = threads, .no_fast = no_fast, .profile = true}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {N, 16, H, W}, .data = x,
                      .byte_size = (size_t)(N * 16 * H * W) * 4},
                o[NOUT];
  for (int rep = 0; rep < 3; rep++) { /* 2 threads: both modes of opool_mode run */
    cinfer_status *st = onnx_session_run(s, &in, 1, o);
    if (st) fail_msg("run (%d threads): %s", threads, cinfer_status_message(st));
  }
  unsetenv("CINFER_ONNX_NO_MERGE");
  for (int i = 0; i < NOUT; i++) {
    int k = -1;
    for (int j = 0; j < NOUT; j++)
      if (!strcmp(o[j].name, out_names[i])) k = j;
    assert_true(k >= 0);
    assert_int_equal(o[k].shape[0], N);
    r->n[i] = o[k].byte_size / 4;
    r->o[i] = malloc(o[k].byte_size);
    memcpy(r->o[i], o[k].data, o[k].byte_size);
  }
  size_t plen = 0;
  FILE *f = open_memstream(&r->prof, &plen);
  onnx_session_profile_print(s, f);
  fclose(f);
  onnx_session_destroy(s);
}

static void result_free(result *r) {
  for (int i = 0; i < NOUT; i++) free(r->o[i]);
  free(r->prof);
}

static void test_sibling_convs(void **state) {
  (void)state;
  onnx_model *m = heads();
  unsigned seed = 17;
  const size_t per_row[NOUT] = {4 * H * W, 8 * H * W, 20 * H * W, 12 * H * W, 5 * H * W,
                                8 * ((H + 1) / 2) * ((W + 1) / 2)};
  for (int64_t N = 1; N <= 3; N += 2) {
    float *x = rnd(N * 16 * H * W, &seed);
    result ref;
    run(m, 1, true, false, x, N, &ref);
    for (int T = 1; T <= 2; T++) {
      result fast, sep;
      run(m, T, false, false, x, N, &fast);
      run(m, T, false, true, x, N, &sep);
      /* batch 1, and the 2-thread batch (one-row plans on the workers): merged */
      if ((N == 1 || T == 2) && (!strstr(fast.prof, "Conv[x3]") || !strstr(fast.prof, "Conv+Relu[x2]")))
        fail_msg("N=%lld T=%d: no merged convs in the profile:\n%s", (long long)N, T, fast.prof);
      if (strstr(sep.prof, "[x2]") || strstr(sep.prof, "[x3]"))
        fail_msg("N=%lld T=%d: merged with CINFER_ONNX_NO_MERGE:\n%s", (long long)N, T, sep.prof);
      for (int i = 0; i < NOUT; i++) {
        assert_int_equal(ref.n[i], per_row[i] * (size_t)N);
        assert_int_equal(fast.n[i], ref.n[i]);
        assert_int_equal(sep.n[i], ref.n[i]);
        double mx = 0;
        for (size_t e = 0; e < ref.n[i]; e++) mx = fmax(mx, fabs(ref.o[i][e]));
        for (size_t e = 0; e < ref.n[i]; e++) {
          if (fabs(fast.o[i][e] - ref.o[i][e]) > 1e-5 * fmax(1.0, mx))
            fail_msg("N=%lld T=%d %s[%zu]: %.9g, reference %.9g", (long long)N, T, out_names[i], e, fast.o[i][e],
                     ref.o[i][e]);
          if (memcmp(&fast.o[i][e], &sep.o[i][e], sizeof(float)))
            fail_msg("N=%lld T=%d %s[%zu]: merged %.9g, separate %.9g", (long long)N, T, out_names[i], e,
                     fast.o[i][e], sep.o[i][e]);
        }
      }
      result_free(&fast);
      result_free(&sep);
    }
    result_free(&ref);
    free(x);
  }
  onnx_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sibling_convs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
