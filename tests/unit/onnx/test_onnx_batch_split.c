/* test_onnx_batch_split.c: batch parallelism (session.c, run_workers): with threads T > 1
 * a batch of a batchable model is split into groups of rows that the pool's threads claim
 * from one counter, each run by that thread's one-thread worker session, whose outputs are
 * copied into the batch's rows.
 *
 *   - every row of a T-thread batch (T = 2, 3; N = 2, 3, 5, 8, 13, each row different)
 *     equals that row run alone on a one-thread session (within 1e-5: a group of rows may
 *     run as one plan), for both outputs of the model, whose row sizes differ (a conv map
 *     and its global average);
 *   - one session takes batches of changing sizes one after the other (its output buffers
 *     and worker plans are reused and grown);
 *   - the outputs carry the batch in dim 0 and the model's names, and the profile says
 *     the rows ran on the workers;
 *   - a batch whose input bytes do not match its shape is refused (INVALID_ARG) before
 *     any split, and the session still runs afterwards. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "model_builder.h"

#define C_IN 8
#define C_OUT 24
#define H 17
#define W 19

static float *rnd(int64_t n, unsigned *seed) {
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    v[i] = (float)((*seed >> 9) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

/* x [N,8,17,19] -> conv3x3 (8->24, pad 1) + bias -> Relu -> map [N,24,17,19]
 *   map -> GlobalAveragePool -> avg [N,24,1,1] */
static onnx_model *two_output_model(void) {
  mb b;
  mb_init(&b, 13);
  unsigned seed = 5;
  int64_t xd[4] = {-1, C_IN, H, W};
  mb_input(&b, "x", 4, xd);
  int64_t wd[4] = {C_OUT, C_IN, 3, 3}, bd[1] = {C_OUT};
  float *w = rnd(C_OUT * C_IN * 9, &seed), *bias = rnd(C_OUT, &seed);
  mb_init_f(&b, "w", 4, wd, w);
  mb_init_f(&b, "b", 1, bd, bias);
  const char *ic[3] = {"x", "w", "b"}, *oc = "c";
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv", 3, ic, 1, &oc);
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  const char *om = "map";
  mb_node(&b, "Relu", "relu", 1, &oc, 1, &om);
  const char *oa = "avg";
  mb_node(&b, "GlobalAveragePool", "gap", 1, &om, 1, &oa);
  mb_output(&b, "map");
  mb_output(&b, "avg");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  mb_done(&b);
  free(w);
  free(bias);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  return m;
}

static const size_t ROW_IN = (size_t)C_IN * H * W, ROW_MAP = (size_t)C_OUT * H * W, ROW_AVG = C_OUT;

static void close_to(const float *got, const float *want, size_t n, const char *what, long long row) {
  for (size_t i = 0; i < n; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-5f + 1e-5f * fabsf(want[i])))
      fail_msg("%s row %lld element %zu: %.9g, alone %.9g", what, row, i, got[i], want[i]);
}

static void test_rows_equal_single_rows(void **state) {
  (void)state;
  onnx_model *m = two_output_model();
  unsigned seed = 77;
  /* changing sizes on one session, down and up again; 3, 5 and 7 on 2 threads and 5, 7
   * and 8 on 3 leave remainder rows that run on the session's own plan (run_rest) */
  const int64_t Ns[] = {2, 3, 5, 8, 13, 2, 7, 8};
  float *x = rnd(13 * (int64_t)ROW_IN, &seed);
  /* each row alone on a one-thread session */
  float *map1 = malloc(sizeof(float) * 13 * ROW_MAP), *avg1 = malloc(sizeof(float) * 13 * ROW_AVG);
  onnx_session *one;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1}, &one));
  for (int r = 0; r < 13; r++) {
    cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, C_IN, H, W},
                        .data = x + (size_t)r * ROW_IN, .byte_size = ROW_IN * 4},
                  out[2];
    cinfer_status *st = onnx_session_run(one, &in, 1, out);
    if (st) fail_msg("one row: %s", cinfer_status_message(st));
    memcpy(map1 + (size_t)r * ROW_MAP, out[0].data, ROW_MAP * 4);
    memcpy(avg1 + (size_t)r * ROW_AVG, out[1].data, ROW_AVG * 4);
  }
  onnx_session_destroy(one);
  for (int T = 2; T <= 3; T++) {
    onnx_session *s;
    assert_null(onnx_session_create(m, &(onnx_options){.threads = T, .profile = true}, &s));
    for (size_t k = 0; k < sizeof Ns / sizeof Ns[0]; k++) {
      int64_t N = Ns[k];
      for (int rep = 0; rep < 2; rep++) {
        cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {N, C_IN, H, W},
                            .data = x, .byte_size = (size_t)N * ROW_IN * 4},
                      out[2];
        cinfer_status *st = onnx_session_run(s, &in, 1, out);
        if (st) fail_msg("%d threads, batch %lld: %s", T, (long long)N, cinfer_status_message(st));
        assert_string_equal(out[0].name, "map");
        assert_string_equal(out[1].name, "avg");
        assert_int_equal(out[0].ndim, 4);
        assert_int_equal(out[1].ndim, 4);
        assert_int_equal(out[0].shape[0], N);
        assert_int_equal(out[0].shape[1], C_OUT);
        assert_int_equal(out[0].shape[2], H);
        assert_int_equal(out[0].shape[3], W);
        assert_int_equal(out[1].shape[0], N);
        assert_int_equal(out[1].shape[1], C_OUT);
        assert_int_equal(out[1].shape[2], 1);
        assert_int_equal(out[0].byte_size, (size_t)N * ROW_MAP * 4);
        assert_int_equal(out[1].byte_size, (size_t)N * ROW_AVG * 4);
        for (int64_t r = 0; r < N; r++) {
          close_to((const float *)out[0].data + (size_t)r * ROW_MAP, map1 + (size_t)r * ROW_MAP, ROW_MAP, "map", r);
          close_to((const float *)out[1].data + (size_t)r * ROW_AVG, avg1 + (size_t)r * ROW_AVG, ROW_AVG, "avg", r);
        }
      }
    }
    char *prof = NULL;
    size_t plen = 0;
    FILE *f = open_memstream(&prof, &plen);
    onnx_session_profile_print(s, f);
    fclose(f);
    if (!strstr(prof, "batch rows")) fail_msg("%d threads: the profile does not show the workers:\n%s", T, prof);
    free(prof);
    /* a batch whose input does not match its shape is refused before any split */
    cinfer_tensor bad = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {4, C_IN, H, W},
                         .data = x, .byte_size = 3 * ROW_IN * 4},
                  out[2];
    cinfer_status *st = onnx_session_run(s, &bad, 1, out);
    assert_non_null(st);
    assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
    cinfer_status_free(st);
    cinfer_tensor good = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {3, C_IN, H, W},
                          .data = x + ROW_IN, .byte_size = 3 * ROW_IN * 4};
    if ((st = onnx_session_run(s, &good, 1, out))) fail_msg("after a refusal: %s", cinfer_status_message(st));
    for (int64_t r = 0; r < 3; r++)
      close_to((const float *)out[0].data + (size_t)r * ROW_MAP, map1 + (size_t)(r + 1) * ROW_MAP, ROW_MAP, "map", r + 1);
    onnx_session_destroy(s);
  }
  free(map1);
  free(avg1);
  free(x);
  onnx_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_equal_single_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
