/* test_onnx_interop.c: inter-op sections (src/backends/onnx/interop.c), on by default at
 * 2 threads (CINFER_ONNX_INTEROP=0 turns them off).
 *
 * Model: x [1,16,40,40] feeds two branches of the same cost,
 *   A: conv3x3 (16->32, pad 1) + Relu -> conv1x1 (32->32) -> a
 *   B: conv3x3 (16->32, pad 1) + Relu -> conv1x1 (32->32) -> b, and b -> GlobalAveragePool
 *      -> gap (a graph output produced inside the section)
 *   out = a + b (the join: after the section).
 *   - at 2 threads the profile shows one section with both groups; both
 *     outputs equal the 1-thread session's bit for bit, over many runs (the groups' steps
 *     run whole, as on one thread; with buffers shared between the groups the runs
 *     that overlap would differ);
 *   - with CINFER_ONNX_INTEROP_ORDER=01 and =10 (each section's groups run one after the
 *     other, in both orders) the outputs are the same: the memory plan lets a group's
 *     buffers share bytes only with the same group's (b1 and gap may), never with the other
 *     group's, which one of the two orders would overwrite;
 *   - with CINFER_ONNX_INTEROP=0, or with 1 or 3 threads, no section is made;
 *   - a value other than 0 or 1 ("off") fails the run, naming the variable, instead of
 *     leaving the sections on. */
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

#define HW 40

static float *rnd(int64_t n, unsigned *seed) {
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    v[i] = (float)((*seed >> 9) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

static onnx_model *branchy(void) {
  mb b;
  mb_init(&b, 13);
  unsigned seed = 3;
  int64_t xd[4] = {1, 16, HW, HW};
  mb_input(&b, "x", 4, xd);
  int64_t w3d[4] = {32, 16, 3, 3}, w1d[4] = {32, 32, 1, 1};
  float *wa = rnd(32 * 16 * 9, &seed), *wb = rnd(32 * 16 * 9, &seed), *va = rnd(32 * 32, &seed),
        *vb = rnd(32 * 32, &seed);
  mb_init_f(&b, "wa", 4, w3d, wa);
  mb_init_f(&b, "wb", 4, w3d, wb);
  mb_init_f(&b, "va", 4, w1d, va);
  mb_init_f(&b, "vb", 4, w1d, vb);
  const char *ia[2] = {"x", "wa"}, *oa = "a0", *ra = "a1", *ja[2] = {"a1", "va"}, *a2 = "a";
  Onnx__NodeProto *n = mb_node(&b, "Conv", "conv_a", 2, ia, 1, &oa);
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_node(&b, "Relu", "relu_a", 1, &oa, 1, &ra);
  mb_node(&b, "Conv", "conv_a2", 2, ja, 1, &a2);
  const char *ib[2] = {"x", "wb"}, *ob = "b0", *rb = "b1", *jb[2] = {"b1", "vb"}, *b2 = "b", *g = "gap";
  n = mb_node(&b, "Conv", "conv_b", 2, ib, 1, &ob);
  mb_attr_ints(&b, n, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_node(&b, "Relu", "relu_b", 1, &ob, 1, &rb);
  mb_node(&b, "Conv", "conv_b2", 2, jb, 1, &b2);
  mb_node(&b, "GlobalAveragePool", "gap_b", 1, &b2, 1, &g);
  const char *iadd[2] = {"a", "b"}, *out = "out";
  mb_node(&b, "Add", "join", 2, iadd, 1, &out);
  mb_output(&b, "out");
  mb_output(&b, "gap");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  mb_done(&b);
  free(wa);
  free(wb);
  free(va);
  free(vb);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  return m;
}

#define N_OUT ((size_t)32 * HW * HW)

/* runs the model `reps` times on a `threads` session; every run's outputs must equal
 * want (when given); returns the last run's outputs (out, gap) and the profile */
static void run(onnx_model *m, int threads, const float *x, int reps, const float *want, const float *want_gap,
                float *got, float *got_gap, char **prof) {
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = threads, .profile = true}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 16, HW, HW}, .data = x,
                      .byte_size = (size_t)16 * HW * HW * 4},
                o[2];
  for (int r = 0; r < reps; r++) {
    cinfer_status *st = onnx_session_run(s, &in, 1, o);
    if (st) fail_msg("run (%d threads): %s", threads, cinfer_status_message(st));
    assert_int_equal(o[0].byte_size, N_OUT * 4);
    assert_int_equal(o[1].byte_size, 32 * 4);
    if (want && memcmp(o[0].data, want, N_OUT * 4)) fail_msg("%d threads, run %d: out differs from 1 thread", threads, r);
    if (want_gap && memcmp(o[1].data, want_gap, 32 * 4)) fail_msg("%d threads, run %d: gap differs from 1 thread", threads, r);
  }
  memcpy(got, o[0].data, N_OUT * 4);
  memcpy(got_gap, o[1].data, 32 * 4);
  size_t plen = 0;
  FILE *f = open_memstream(prof, &plen);
  onnx_session_profile_print(s, f);
  fclose(f);
  onnx_session_destroy(s);
}

static void test_sections_equal_one_thread(void **state) {
  (void)state;
  onnx_model *m = branchy();
  unsigned seed = 21;
  float *x = rnd(16 * HW * HW, &seed);
  float *one = malloc(N_OUT * 4), *one_gap = malloc(32 * 4), *got = malloc(N_OUT * 4), *got_gap = malloc(32 * 4);
  char *prof = NULL;
  unsetenv("CINFER_ONNX_INTEROP");
  run(m, 1, x, 1, NULL, NULL, one, one_gap, &prof);
  if (strstr(prof, "inter-op section")) fail_msg("1 thread made a section:\n%s", prof);
  free(prof);
  run(m, 2, x, 200, one, one_gap, got, got_gap, &prof);
  if (!strstr(prof, "inter-op section 1: steps 0-4 ") ||
      (!strstr(prof, "groups of 2 and 3 steps") && !strstr(prof, "groups of 3 and 2 steps")))
    fail_msg("2 threads: no section with both branches:\n%s", prof);
  free(prof);
  for (int o = 0; o < 2; o++) {
    setenv("CINFER_ONNX_INTEROP_ORDER", o ? "10" : "01", 1);
    run(m, 2, x, 3, one, one_gap, got, got_gap, &prof);
    if (!strstr(prof, "inter-op section 1: steps 0-4 ")) fail_msg("order %d: no section:\n%s", o, prof);
    free(prof);
  }
  unsetenv("CINFER_ONNX_INTEROP_ORDER");
  run(m, 3, x, 3, one, one_gap, got, got_gap, &prof);
  if (strstr(prof, "inter-op section")) fail_msg("3 threads made a section:\n%s", prof);
  free(prof);
  setenv("CINFER_ONNX_INTEROP", "0", 1);
  run(m, 2, x, 3, one, one_gap, got, got_gap, &prof);
  if (strstr(prof, "inter-op section")) fail_msg("a section with CINFER_ONNX_INTEROP=0:\n%s", prof);
  unsetenv("CINFER_ONNX_INTEROP");
  free(prof);
  free(one);
  free(one_gap);
  free(got);
  free(got_gap);
  free(x);
  onnx_model_destroy(m);
}

static void test_bad_value_refused(void **state) {
  (void)state;
  onnx_model *m = branchy();
  unsigned seed = 5;
  float *x = rnd(16 * HW * HW, &seed);
  onnx_session *s;
  setenv("CINFER_ONNX_INTEROP", "off", 1);
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 2}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 16, HW, HW}, .data = x,
                      .byte_size = (size_t)16 * HW * HW * 4},
                o[2];
  cinfer_status *st = onnx_session_run(s, &in, 1, o);
  unsetenv("CINFER_ONNX_INTEROP");
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "CINFER_ONNX_INTEROP: 'off' is not 0 or 1"));
  cinfer_status_free(st);
  setenv("CINFER_ONNX_INTEROP_ORDER", "ba", 1);
  st = onnx_session_run(s, &in, 1, o);
  unsetenv("CINFER_ONNX_INTEROP_ORDER");
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "CINFER_ONNX_INTEROP_ORDER: 'ba' is not 01 or 10"));
  cinfer_status_free(st);
  /* the session is still usable once the variable is fixed */
  assert_null(onnx_session_run(s, &in, 1, o));
  onnx_session_destroy(s);
  free(x);
  onnx_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sections_equal_one_thread),
      cmocka_unit_test(test_bad_value_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
