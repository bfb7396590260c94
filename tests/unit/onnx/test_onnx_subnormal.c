/* test_onnx_subnormal.c: subnormal FP32 weights are loaded as 0 (loader.c flush_subnormal).
 * Trained models carry them (SSR-Net's gender model has 13,331), and a multiply by one
 * takes a slow microcode path on x86. The model: y = x * c, c an initializer holding
 * subnormals of both signs, the smallest normal, an ordinary value and 0. With x = 1e30 an
 * unflushed subnormal would give a visible product (~1e-9); flushed, it gives exactly 0,
 * while normal weights are kept bit for bit. */
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(subnormal_weights_become_zero)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
