/* test_onnx_subnormal.c: subnormal FP32 weights are loaded as 0 (loader.c flush_subnormal).
 * Trained models carry them (SSR-Net's gender model has 13,331), and a multiply by one
 * takes a slow microcode path on x86. The model: y = x * c, c an initializer holding
 * subnormals of both signs, the smallest normal, an ordinary value and 0. With x = 1e30 an
 * unflushed subnormal would give a visible product (~1e-9); flushed, it gives exactly 0,
 * while normal weights are kept bit for bit.
 * Subnormal results are flushed too (core/fpenv.h): y = x * 1e-20 with x = 1e-20 is 1e-40
 * in IEEE arithmetic and exactly 0 from the engine, on the caller and on the pool's
 * workers (2 threads, a Mul large enough to be split), while the caller's own floating
 * point mode is the same after the run as before it. */
#include <float.h>
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

static void subnormal_weights_become_zero(void **state) {
  (void)state;
  const float c[5] = {FLT_MIN / 4, -FLT_MIN / 8, FLT_MIN, 2.5f, 0.0f};
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){5});
  mb_init_f(&b, "c", 1, (int64_t[]){5}, c);
  const char *in[] = {"x", "c"}, *o = "y";
  mb_node(&b, "Mul", "mul", 2, in, 1, &o);
  mb_output(&b, "y");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  mb_done(&b);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  for (int no_fast = 0; no_fast < 2; no_fast++) { /* the oracle sees the same weights */
    onnx_session *s = NULL;
    st = onnx_session_create(m, &(onnx_options){.threads = 1, .no_fast = no_fast}, &s);
    if (st) fail_msg("session: %s", cinfer_status_message(st));
    float x[5] = {1e30f, 1e30f, 1.0f, 4.0f, 1e30f};
    cinfer_tensor t = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {5},
                       .data = x, .byte_size = sizeof x};
    cinfer_tensor out;
    st = onnx_session_run(s, &t, 1, &out);
    if (st) fail_msg("run: %s", cinfer_status_message(st));
    assert_int_equal(out.shape[0], 5);
    const float *y = out.data;
    assert_true(y[0] == 0.0f); /* 1e30 * FLT_MIN/4 would be ~2.9e-9 */
    assert_true(y[1] == 0.0f);
    assert_true(y[2] == FLT_MIN); /* the smallest normal is kept */
    assert_true(y[3] == 10.0f);
    assert_true(y[4] == 0.0f);
    onnx_session_destroy(s);
  }
  onnx_model_destroy(m);
}

/* a product the caller's own (IEEE) mode keeps as a subnormal */
static float caller_product(void) {
  volatile float a = 1e-20f, b = 1e-20f;
  return a * b;
}

static void subnormal_results_become_zero(void **state) {
  (void)state;
  assert_true(caller_product() > 0.0f); /* the test's own mode is IEEE: the check can fail */
  enum { N = 1 << 18 };
  const float c[1] = {1e-20f};
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){N});
  mb_init_f(&b, "c", 1, (int64_t[]){1}, c);
  const char *in[] = {"x", "c"}, *o = "y";
  mb_node(&b, "Mul", "mul", 2, in, 1, &o);
  mb_output(&b, "y");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  mb_done(&b);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  float *x = malloc(N * sizeof *x);
  assert_non_null(x);
  for (int i = 0; i < N; i++) x[i] = i == 7 ? 3e10f : 1e-20f; /* one normal product: 3e-10 */
  for (int threads = 1; threads <= 2; threads++)
    for (int no_fast = 0; no_fast < 2; no_fast++) {
      onnx_session *s = NULL;
      st = onnx_session_create(m, &(onnx_options){.threads = threads, .no_fast = no_fast}, &s);
      if (st) fail_msg("session: %s", cinfer_status_message(st));
      cinfer_tensor t = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {N},
                         .data = x, .byte_size = N * sizeof *x};
      for (int rep = 0; rep < 3; rep++) { /* later runs may take the pool or run alone */
        cinfer_tensor out;
        st = onnx_session_run(s, &t, 1, &out);
        if (st) fail_msg("run: %s", cinfer_status_message(st));
        const float *y = out.data;
        int64_t nonzero = 0;
        for (int i = 0; i < N; i++) nonzero += i != 7 && y[i] != 0.0f;
        assert_int_equal(nonzero, 0);
        assert_true(y[7] == 3e10f * 1e-20f);
        assert_true(caller_product() > 0.0f); /* the caller's mode is restored */
      }
      onnx_session_destroy(s);
    }
  free(x);
  onnx_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(subnormal_weights_become_zero),
                                     cmocka_unit_test(subnormal_results_become_zero)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
