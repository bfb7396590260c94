/* test_onnx_strings.c: STRING tensors at the engine's edges (strings.c): the
 * length-prefixed layout in and out of onnx_session_run, hostile layouts (a length past the
 * end, a prefix cut short, bytes left over), STRING initializers (string_data only, counts
 * checked), operators that cannot take strings refused at load, and an output that turns
 * out STRING where the model declares a number (refused, never raw descriptors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "model_builder.h"

enum { T_FLOAT = 1, T_INT32 = 6, T_STRING = 8 };

static void set_elem(Onnx__ValueInfoProto *v, int elem) { v->type->tensor_type->elem_type = elem; }

/* the length-prefixed layout of n C strings; *len its size (caller frees) */
static uint8_t *pack(const char *const *s, int n, size_t *len) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += 4 + strlen(s[i]);
  uint8_t *b = malloc(total + 1), *p = b;
  for (int i = 0; i < n; i++) {
    uint32_t l = (uint32_t)strlen(s[i]);
    memcpy(p, &l, 4);
    memcpy(p + 4, s[i], l);
    p += 4 + l;
  }
  *len = total;
  return b;
}

static onnx_model *load(mb *b) {
  uint8_t *buf;
  size_t len = mb_pack(b, &buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  return m;
}

static void expect_load_error(mb *b, const char *needle) {
  uint8_t *buf;
  size_t len = mb_pack(b, &buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (!st) {
    onnx_model_destroy(m);
    fail_msg("loaded, expected an error containing '%s'", needle);
  }
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("error '%s' does not contain '%s'", cinfer_status_message(st), needle);
  cinfer_status_free(st);
}

/* x: STRING [3] -> Concat(x, c) -> y: STRING [5], c a STRING initializer {"k", ""} */
static void concat_model(mb *b, int n_string_data, bool raw) {
  mb_init(b, 13);
  mb_input(b, "x", 1, (int64_t[]){3});
  set_elem(b->graph.input[0], T_STRING);
  Onnx__TensorProto *c = mb_init_f(b, "c", 1, (int64_t[]){2}, NULL);
  c->data_type = T_STRING;
  static ProtobufCBinaryData sd[2] = {{1, (uint8_t *)"k"}, {0, (uint8_t *)""}};
  c->n_string_data = (size_t)n_string_data;
  c->string_data = sd;
  if (raw) {
    c->has_raw_data = 1;
    c->raw_data.len = 2;
    c->raw_data.data = (uint8_t *)"ab";
  }
  const char *in[2] = {"x", "c"}, *o = "y";
  Onnx__NodeProto *n = mb_node(b, "Concat", "cat", 2, in, 1, &o);
  mb_attr_i(b, n, "axis", 0);
  mb_output(b, "y");
  set_elem(b->graph.output[0], T_STRING);
}

static cinfer_status *run1(onnx_session *s, const void *data, size_t len, int64_t n, cinfer_tensor *out) {
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_BYTES, .ndim = 1, .shape = {n}, .data = data,
                      .byte_size = len};
  return onnx_session_run(s, &in, 1, out);
}

static void test_strings_in_and_out(void **st_) {
  (void)st_;
  mb b;
  concat_model(&b, 2, false);
  onnx_model *m = load(&b);
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = 2}, &s));
  const char *words[3] = {"hello", "", "na\xc3\xafve"};
  size_t len;
  uint8_t *x = pack(words, 3, &len);
  cinfer_tensor out;
  cinfer_status *st = run1(s, x, len, 3, &out);
  if (st) fail_msg("run: %s", cinfer_status_message(st));
  const char *want_s[5] = {"hello", "", "na\xc3\xafve", "k", ""};
  size_t wlen;
  uint8_t *want = pack(want_s, 5, &wlen);
  assert_int_equal(out.dtype, CINFER_TYPE_BYTES);
  assert_int_equal(out.shape[0], 5);
  assert_int_equal(out.byte_size, wlen);
  assert_memory_equal(out.data, want, wlen);
  free(want);

  /* hostile layouts: each a clear error naming the input, then a good run again */
  uint8_t bad[64];
  memcpy(bad, x, len);
  uint32_t huge = 200;
  memcpy(bad + 9, &huge, 4); /* element 1's length */
  st = run1(s, bad, len, 3, &out);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "input 'x': element 1: length 200 is past the end"));
  cinfer_status_free(st);
  st = run1(s, x, 11, 3, &out); /* cut inside element 1's prefix */
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "input 'x': element 1: the length prefix is past the end"));
  cinfer_status_free(st);
  memcpy(bad, x, len);
  memcpy(bad + len, "zzz", 3);
  st = run1(s, bad, len + 3, 3, &out); /* three strings, bytes left over */
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "3 strings end at byte"));
  cinfer_status_free(st);
  st = run1(s, x, len, 3, &out);
  if (st) fail_msg("run after errors: %s", cinfer_status_message(st));
  assert_int_equal(out.byte_size, wlen);
  free(x);
  onnx_session_destroy(s);
  onnx_model_destroy(m);
  mb_done(&b);
}

static void test_string_initializers(void **st_) {
  (void)st_;
  mb b;
  concat_model(&b, 1, false);
  expect_load_error(&b, "string_data has 1 values, shape needs 2");
  mb_done(&b);
  concat_model(&b, 2, true);
  expect_load_error(&b, "keeps its values in string_data");
  mb_done(&b);
}

static void test_ops_that_refuse_strings(void **st_) {
  (void)st_;
  static const char *const ops[] = {"Add", "Relu", "MatMul", "ReduceSum"};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    mb b;
    mb_init(&b, 13);
    mb_input(&b, "x", 2, (int64_t[]){2, 2});
    set_elem(b.graph.input[0], T_STRING);
    const char *in[2] = {"x", "x"}, *o = "y";
    bool two = !strcmp(ops[k], "Add") || !strcmp(ops[k], "MatMul");
    mb_node(&b, ops[k], "the_node", two ? 2 : 1, in, 1, &o);
    mb_output(&b, "y");
    char want[128];
    snprintf(want, sizeof want, "node 'the_node' (%s): input 0 ('x') is STRING; %s does not take strings",
             ops[k], ops[k]);
    expect_load_error(&b, want);
    mb_done(&b);
  }
  /* a Cast to STRING feeding Add: found by following the types through the graph */
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){2});
  const char *i0 = "x", *c = "s", *in[2] = {"s", "s"}, *o = "y";
  Onnx__NodeProto *cast = mb_node(&b, "Cast", "to_s", 1, &i0, 1, &c);
  mb_attr_i(&b, cast, "to", T_STRING);
  mb_node(&b, "Mul", "mul", 2, in, 1, &o);
  mb_output(&b, "y");
  expect_load_error(&b, "node 'mul' (Mul): input 0 ('s') is STRING");
  mb_done(&b);
}

static void test_undeclared_string_output(void **st_) {
  (void)st_;
  mb b;
  mb_init(&b, 13);
  mb_input(&b, "x", 1, (int64_t[]){2});
  set_elem(b.graph.input[0], T_STRING);
  const char *i0 = "x", *o = "y";
  mb_node(&b, "Identity", "id", 1, &i0, 1, &o);
  mb_output(&b, "y"); /* declared FLOAT */
  onnx_model *m = load(&b);
  onnx_session *s;
  assert_null(onnx_session_create(m, NULL, &s));
  const char *w[2] = {"a", "b"};
  size_t len;
  uint8_t *x = pack(w, 2, &len);
  cinfer_tensor out;
  cinfer_status *st = run1(s, x, len, 2, &out);
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "output 'y' is STRING, but the model declares it FP32"));
  cinfer_status_free(st);
  free(x);
  onnx_session_destroy(s);
  onnx_model_destroy(m);
  mb_done(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strings_in_and_out),
      cmocka_unit_test(test_string_initializers),
      cmocka_unit_test(test_ops_that_refuse_strings),
      cmocka_unit_test(test_undeclared_string_output),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
