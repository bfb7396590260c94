/* test_onnx_hostile.c: corrupt, truncated and hostile model files must fail to load (or
 * to run) with an error that names the problem, never crash or leak (run under ASan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "model_builder.h"

static void expect_error(mb *b, const char *base_dir, const char *needle) {
  uint8_t *buf;
  size_t len = mb_pack(b, &buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, base_dir, &m);
  free(buf);
  if (!st) {
    onnx_model_destroy(m);
    fail_msg("loaded, expected an error containing '%s'", needle);
  }
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("error '%s' does not contain '%s'", cinfer_status_message(st), needle);
  assert_null(m);
  cinfer_status_free(st);
}

/* x -> Relu -> out, the smallest valid model */
static void base(mb *b) {
  mb_init(b, 13);
  mb_input(b, "x", 2, (int64_t[]){2, 3});
  const char *i = "x", *o = "out";
  mb_node(b, "Relu", "relu", 1, &i, 1, &o);
  mb_output(b, "out");
}

static void test_garbage_and_truncated(void **s) {
  onnx_model *m = NULL;
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x34};
  cinfer_status *st = onnx_model_load_buffer(junk, sizeof junk, NULL, &m);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "not a valid ONNX ModelProto"));
  cinfer_status_free(st);
  mb b;
  base(&b);
  float w[6] = {1, 2, 3, 4, 5, 6};
  mb_init_f(&b, "w", 2, (int64_t[]){2, 3}, w);
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  for (size_t cut = 1; cut < len; cut += 7) { /* every truncation fails cleanly or loads */
    st = onnx_model_load_buffer(buf, cut, NULL, &m);
    if (st) cinfer_status_free(st);
    else onnx_model_destroy(m);
  }
  free(buf);
  mb_done(&b);
  st = onnx_model_load_file("/nonexistent/model.onnx", &m);
  assert_non_null(strstr(cinfer_status_message(st), "No such file"));
  cinfer_status_free(st);
}

static void test_huge_dims(void **s) {
  mb b;
  base(&b);
  Onnx__TensorProto *t = mb_init_f(&b, "w", 2, (int64_t[]){1, 1}, NULL);
  t->dims[0] = (int64_t)1 << 40;
  t->dims[1] = (int64_t)1 << 40;
  expect_error(&b, NULL, "dims too large");
  mb_done(&b);
  base(&b);
  t = mb_init_f(&b, "w", 2, (int64_t[]){2, 2}, NULL);
  t->dims[1] = -5;
  expect_error(&b, NULL, "negative");
  mb_done(&b);
}

static void test_raw_data_mismatch(void **s) {
  mb b;
  base(&b);
  float w[4] = {0};
  Onnx__TensorProto *t = mb_init_f(&b, "w", 1, (int64_t[]){4}, w);
  t->raw_data.len = 10;
  expect_error(&b, NULL, "raw_data has 10 bytes");
  mb_done(&b);
  base(&b);
  t = mb_init_f(&b, "w", 1, (int64_t[]){4}, NULL);
  float fd[3] = {1, 2, 3};
  t->n_float_data = 3;
  t->float_data = fd;
  expect_error(&b, NULL, "float_data has 3 values, shape needs 4");
  mb_done(&b);
}

static void test_cycle_and_names(void **s) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){4});
  const char *a_in[2] = {"x", "b"}, *a_out = "a", *b_in = "a", *b_out = "b";
  mb_node(&b, "Add", "add_a", 2, a_in, 1, &a_out);
  mb_node(&b, "Relu", "relu_b", 1, &b_in, 1, &b_out);
  mb_output(&b, "b");
  expect_error(&b, NULL, "cycle");
  mb_done(&b);
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){4});
  const char *i = "nowhere", *o = "out";
  mb_node(&b, "Relu", "r", 1, &i, 1, &o);
  mb_output(&b, "out");
  expect_error(&b, NULL, "'nowhere' is used but never produced");
  mb_done(&b);
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){4});
  const char *ii = "x", *o2 = "out";
  mb_node(&b, "Relu", "r1", 1, &ii, 1, &o2);
  mb_node(&b, "Relu", "r2", 1, &ii, 1, &o2);
  mb_output(&b, "out");
  expect_error(&b, NULL, "already defined");
  mb_done(&b);
}

static void test_unsupported_op(void **s) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){4});
  const char *i = "x", *o = "out";
  mb_node(&b, "FrobnicateTensor", "frob_7", 1, &i, 1, &o);
  mb_output(&b, "out");
  expect_error(&b, NULL, "unsupported operator FrobnicateTensor (opset 13) at node 'frob_7'");
  mb_done(&b);
}

static void test_external_data(void **s) {
  char dir[] = "/tmp/onnx_hostile_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/w.bin", dir);
  FILE *f = fopen(path, "wb");
  float w[4] = {1, 2, 3, 4};
  fwrite(w, 1, sizeof w, f);
  fclose(f);
  const char *cases[][3] = {
      {"../../etc/passwd", "0", "must be a relative path"},
      {"/etc/passwd", "0", "must be a relative path"},
      {"w.bin", "8", "past the end"},
      {"missing.bin", "0", "No such file"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    mb b;
    base(&b);
    Onnx__TensorProto *t = mb_init_f(&b, "w", 1, (int64_t[]){4}, NULL);
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    Onnx__StringStringEntryProto e[2], *ep[2] = {&e[0], &e[1]};
    onnx__string_string_entry_proto__init(&e[0]);
    onnx__string_string_entry_proto__init(&e[1]);
    e[0].key = (char *)"location";
    e[0].value = (char *)cases[c][0];
    e[1].key = (char *)"offset";
    e[1].value = (char *)cases[c][1];
    t->n_external_data = 2;
    t->external_data = ep;
    expect_error(&b, dir, cases[c][2]);
    if (c == 0) expect_error(&b, NULL, "external data needs the model's folder");
    mb_done(&b);
  }
  /* a valid external tensor loads */
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){4});
  Onnx__TensorProto *t = mb_init_f(&b, "w", 1, (int64_t[]){4}, NULL);
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  Onnx__StringStringEntryProto e = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *ep = &e;
  e.key = (char *)"location";
  e.value = (char *)"w.bin";
  t->n_external_data = 1;
  t->external_data = &ep;
  const char *ai[2] = {"x", "w"}, *ao = "out";
  mb_node(&b, "Add", "add", 2, ai, 1, &ao);
  mb_output(&b, "out");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, dir, &m);
  if (st) fail_msg("%s", cinfer_status_message(st));
  free(buf);
  onnx_session *sess;
  assert_null(onnx_session_create(m, NULL, &sess));
  float x[4] = {10, 20, 30, 40};
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {4}, .data = x, .byte_size = 16}, out;
  assert_null(onnx_session_run(sess, &in, 1, &out));
  assert_float_equal(((const float *)out.data)[3], 44.0f, 0);
  /* wrong input shape and byte size are rejected at run time */
  in.shape[0] = 5;
  in.byte_size = 20;
  st = onnx_session_run(sess, &in, 1, &out);
  assert_non_null(strstr(cinfer_status_message(st), "dim 0 is 5, model expects 4"));
  cinfer_status_free(st);
  onnx_session_destroy(sess);
  onnx_model_destroy(m);
  mb_done(&b);
  unlink(path);
  rmdir(dir);
}

static void test_bad_reshape_at_run(void **s) {
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){6});
  Onnx__TensorProto *t = mb_init_f(&b, "shape", 1, (int64_t[]){2}, NULL);
  int64_t sv[2] = {4, 4};
  t->data_type = 7;
  t->n_int64_data = 2;
  t->int64_data = sv;
  const char *ri[2] = {"x", "shape"}, *ro = "out";
  mb_node(&b, "Reshape", "bad_reshape", 2, ri, 1, &ro);
  mb_output(&b, "out");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  onnx_model *m;
  assert_null(onnx_model_load_buffer(buf, len, NULL, &m));
  free(buf);
  onnx_session *sess;
  assert_null(onnx_session_create(m, NULL, &sess));
  float x[6] = {0};
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {6}, .data = x, .byte_size = 24}, out;
  cinfer_status *st = onnx_session_run(sess, &in, 1, &out);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "node 'bad_reshape' (Reshape): cannot reshape"));
  cinfer_status_free(st);
  onnx_session_destroy(sess);
  onnx_model_destroy(m);
  mb_done(&b);
}

/* Fuzzing finding tests/data/onnx_findings/convtranspose_overread.onnx: ConvTranspose whose
 * W is a FLOAT16 graph input. The kernel reads W as float, i.e. twice its byte size past
 * the buffer; the run must instead fail naming the node and the type. Without the type
 * check the run succeeds (and ASan reports the over-read), so this test fails. */
static void test_finding_convtranspose_fp16_weights(void **s) {
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_file(ONNX_FINDINGS_DIR "/convtranspose_overread.onnx", &m);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  onnx_session *sess;
  assert_null(onnx_session_create(m, NULL, &sess));
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  uint16_t w[18];
  for (int i = 0; i < 18; i++) w[i] = 0x3c00; /* 1.0 in binary16 */
  cinfer_tensor in[2] = {
      {.name = "X", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 1, 3, 3}, .data = x, .byte_size = sizeof x},
      {.name = "W", .dtype = CINFER_TYPE_FP16, .ndim = 4, .shape = {1, 2, 3, 3}, .data = w, .byte_size = sizeof w}};
  cinfer_tensor out;
  st = onnx_session_run(sess, in, 2, &out);
  if (!st) fail_msg("ran a ConvTranspose with FLOAT16 weights as float");
  assert_non_null(strstr(cinfer_status_message(st), "(ConvTranspose): input type"));
  assert_non_null(strstr(cinfer_status_message(st), cinfer_dtype_name(CINFER_TYPE_FP16)));
  cinfer_status_free(st);
  onnx_session_destroy(sess);
  onnx_model_destroy(m);
}

/* Runs a model the way the fuzz harness does: zero inputs of the declared shapes
 * (unknown dims = 1), reference kernels, one thread. Returns the run's status. */
static cinfer_status *run_like_fuzzer(const char *path) {
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_file(path, &m);
  if (st) fail_msg("load %s: %s", path, cinfer_status_message(st));
  int n = onnx_model_input_count(m);
  assert_true(n <= 8);
  cinfer_tensor in[8];
  void *bufs[8] = {0};
  for (int i = 0; i < n; i++) {
    const onnx_io_info *info = onnx_model_input(m, i);
    memset(&in[i], 0, sizeof in[i]);
    in[i].name = info->name;
    in[i].dtype = info->dtype;
    in[i].ndim = info->ndim;
    for (int d = 0; d < info->ndim; d++) in[i].shape[d] = info->shape[d] < 0 ? 1 : info->shape[d];
    in[i].byte_size = (size_t)cinfer_shape_elements(in[i].shape, in[i].ndim) * cinfer_dtype_size(info->dtype);
    bufs[i] = calloc(1, in[i].byte_size + 1);
    in[i].data = bufs[i];
  }
  onnx_session *sess = NULL;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 1, .no_fast = true}, &sess));
  cinfer_tensor *out = calloc((size_t)onnx_model_output_count(m) + 1, sizeof *out);
  st = onnx_session_run(sess, in, n, out);
  free(out);
  onnx_session_destroy(sess);
  for (int i = 0; i < 8; i++) free(bufs[i]);
  onnx_model_destroy(m);
  return st;
}

/* Fuzzing finding tests/data/onnx_findings/instancenorm_fp16_scale.onnx (the harness's
 * run mode): an InstanceNormalization whose scale/B are not float was read as float past
 * their end. The run must fail naming the node type and the input type instead. */
static void test_finding_instancenorm_nonfloat_scale(void **s) {
  (void)s;
  cinfer_status *st = run_like_fuzzer(ONNX_FINDINGS_DIR "/instancenorm_fp16_scale.onnx");
  if (!st) fail_msg("ran an InstanceNormalization with non-float scale/B");
  assert_non_null(strstr(cinfer_status_message(st), "(InstanceNormalization): input type"));
  cinfer_status_free(st);
}

/* Fuzzing finding tests/data/onnx_findings/lrn_huge_size.onnx: an LRN with size 2^31 - 2
 * looped over the whole window per element (the run took minutes: a model file could hold
 * a server's worker for ever). The window is clipped to the channels; the run finishes at
 * once with the values of a window that covers every channel. */
static void test_finding_lrn_huge_size(void **s) {
  (void)s;
  cinfer_status *st = run_like_fuzzer(ONNX_FINDINGS_DIR "/lrn_huge_size.onnx");
  if (st) fail_msg("LRN with a huge size: %s", cinfer_status_message(st));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_finding_lrn_huge_size),
      cmocka_unit_test(test_garbage_and_truncated),
      cmocka_unit_test(test_finding_instancenorm_nonfloat_scale), cmocka_unit_test(test_huge_dims),
      cmocka_unit_test(test_raw_data_mismatch),     cmocka_unit_test(test_cycle_and_names),
      cmocka_unit_test(test_unsupported_op),        cmocka_unit_test(test_external_data),
      cmocka_unit_test(test_bad_reshape_at_run),   cmocka_unit_test(test_finding_convtranspose_fp16_weights),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
