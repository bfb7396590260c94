/* test_grpc_codec.c: the gRPC message framing, gzip decompression, status mapping and
 * header helpers (grpc_wire.c), and ModelInferRequest decoding (grpc_codec.c):
 *  - a framed message is found whole, "incomplete" at every shorter length, refused when it
 *    announces more than the limit or carries a bad flag;
 *  - gzip round trips; truncated, trailing-garbage and over-limit inputs fail with their codes;
 *  - a valid typed and a valid raw request decode to the tensors they describe, and every
 *    truncation of them, placed against a PROT_NONE guard page, fails cleanly or decodes;
 *  - malformed requests fail with the shared KServe rule's message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zlib.h>

#include "../core/guard_page.h"
#include "grpc/grpc_codec.h"
#include "grpc/grpc_wire.h"

static const kserve_limits LIM = {.max_tensor_elements = 1000, .max_json_depth = 32};

static void test_framing(void **state) {
  uint8_t buf[5 + 3] = {0, 0, 0, 0, 3, 'a', 'b', 'c'};
  grpc_msg m;
  size_t used = 0;
  for (size_t n = 0; n < sizeof buf; n++) {
    guard g = guard_place(buf, n);
    assert_int_equal(grpc_frame_next((uint8_t *)g.data, n, 100, &m, &used), GRPC_FRAME_INCOMPLETE);
    guard_free(&g);
  }
  assert_int_equal(grpc_frame_next(buf, sizeof buf, 100, &m, &used), GRPC_FRAME_OK);
  assert_int_equal(used, 8);
  assert_int_equal(m.len, 3);
  assert_memory_equal(m.data, "abc", 3);
  assert_false(m.compressed);
  assert_int_equal(grpc_frame_next(buf, sizeof buf, 2, &m, &used), GRPC_FRAME_TOO_LARGE);
  buf[0] = 1;
  assert_int_equal(grpc_frame_next(buf, sizeof buf, 100, &m, &used), GRPC_FRAME_OK);
  assert_true(m.compressed);
  buf[0] = 2;
  assert_int_equal(grpc_frame_next(buf, sizeof buf, 100, &m, &used), GRPC_FRAME_BAD_FLAG);
  uint8_t huge[5] = {0, 0xff, 0xff, 0xff, 0xff};
  assert_int_equal(grpc_frame_next(huge, 5, UINT32_MAX, &m, &used), GRPC_FRAME_INCOMPLETE);
  assert_int_equal(grpc_frame_next(huge, 5, 1u << 20, &m, &used), GRPC_FRAME_TOO_LARGE);
  cbuf b = {0};
  grpc_frame_prefix(&b, 0x01020304);
  assert_int_equal(b.len, 5);
  assert_memory_equal(b.data, "\x00\x01\x02\x03\x04", 5);
  cbuf_free(&b);
}

static size_t gz(const uint8_t *in, size_t n, uint8_t *out, size_t cap) {
  z_stream z;
  memset(&z, 0, sizeof z);
  assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  size_t len = cap - z.avail_out;
  deflateEnd(&z);
  return len;
}

static void test_gunzip(void **state) {
  static uint8_t plain[100000], packed[120000];
  for (size_t i = 0; i < sizeof plain; i++) plain[i] = (uint8_t)(i * 7 % 251);
  size_t n = gz(plain, sizeof plain, packed, sizeof packed);
  uint8_t *out;
  size_t len;
  assert_null(grpc_gunzip(packed, n, sizeof plain, &out, &len));
  assert_int_equal(len, sizeof plain);
  assert_memory_equal(out, plain, len);
  free(out);
  cinfer_status *st = grpc_gunzip(packed, n, sizeof plain - 1, &out, &len);
  assert_int_equal(cinfer_status_code(st), CINFER_RESOURCE_EXHAUSTED);
  assert_null(out);
  cinfer_status_free(st);
  for (size_t cut = 0; cut < n; cut += 97) {
    guard g = guard_place(packed, cut);
    st = grpc_gunzip((uint8_t *)g.data, cut, sizeof plain, &out, &len);
    assert_int_equal(cinfer_status_code(st), CINFER_INTERNAL);
    cinfer_status_free(st);
    guard_free(&g);
  }
  packed[n] = 'x';
  st = grpc_gunzip(packed, n + 1, sizeof plain, &out, &len);
  assert_int_equal(cinfer_status_code(st), CINFER_INTERNAL);
  assert_non_null(strstr(cinfer_status_message(st), "after its end"));
  cinfer_status_free(st);
  st = grpc_gunzip((const uint8_t *)"not gzip", 8, 100, &out, &len);
  assert_int_equal(cinfer_status_code(st), CINFER_INTERNAL);
  cinfer_status_free(st);
}

static void test_status_and_headers(void **state) {
  assert_int_equal(grpc_status_of(CINFER_INVALID_ARG), GRPC_INVALID_ARGUMENT);
  assert_int_equal(grpc_status_of(CINFER_NOT_FOUND), GRPC_NOT_FOUND);
  assert_int_equal(grpc_status_of(CINFER_UNSUPPORTED), GRPC_UNIMPLEMENTED);
  assert_int_equal(grpc_status_of(CINFER_UNAVAILABLE), GRPC_UNAVAILABLE);
  assert_int_equal(grpc_status_of(CINFER_CANCELLED), GRPC_CANCELLED);
  assert_int_equal(grpc_status_of(CINFER_INTERNAL), GRPC_INTERNAL);
  assert_string_equal(grpc_status_name(GRPC_UNIMPLEMENTED), "UNIMPLEMENTED");
  char out[16];
  grpc_percent_encode("a%b\n\xc3\xa9", out, sizeof out);
  assert_string_equal(out, "a%25b%0A%C3%A9");
  grpc_percent_encode("abcdef%", out, 8); /* never a cut escape */
  assert_string_equal(out, "abcdef");
  uint64_t ms;
  assert_true(grpc_parse_timeout("100m", 4, &ms) && ms == 100);
  assert_true(grpc_parse_timeout("2S", 2, &ms) && ms == 2000);
  assert_true(grpc_parse_timeout("1500u", 5, &ms) && ms == 2);
  assert_false(grpc_parse_timeout("10", 2, &ms));
  assert_false(grpc_parse_timeout("1x", 2, &ms));
  assert_false(grpc_parse_timeout("1234567890S", 11, &ms));
}

/* Packs a request with one INT16 input [1,3] (typed, or raw) and one requested output. */
static size_t pack_request(bool raw, uint8_t *out, size_t cap) {
  Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor in = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
  Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  Inference__ModelInferRequest__InferInputTensor *ip = &in;
  Inference__ModelInferRequest__InferRequestedOutputTensor o = INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT;
  Inference__ModelInferRequest__InferRequestedOutputTensor *op = &o;
  Inference__InferParameter pv = INFERENCE__INFER_PARAMETER__INIT;
  Inference__ModelInferRequest__ParametersEntry pe = INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
  Inference__ModelInferRequest__ParametersEntry *pp = &pe;
  int64_t shape[2] = {1, 3};
  int32_t vals[3] = {-5, 0, 32767};
  int16_t rawv[3] = {-5, 0, 32767};
  ProtobufCBinaryData rd = {sizeof rawv, (uint8_t *)rawv};
  r.model_name = "m";
  r.model_version = "2";
  r.id = "req";
  in.name = "IN";
  in.datatype = "INT16";
  in.n_shape = 2;
  in.shape = shape;
  if (raw) {
    r.n_raw_input_contents = 1;
    r.raw_input_contents = &rd;
  } else {
    c.n_int_contents = 3;
    c.int_contents = vals;
    in.contents = &c;
  }
  r.n_inputs = 1;
  r.inputs = &ip;
  o.name = "OUT";
  r.n_outputs = 1;
  r.outputs = &op;
  pv.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
  pv.bool_param = 1;
  pe.key = "triton_enable_empty_final_response";
  pe.value = &pv;
  r.n_parameters = 1;
  r.parameters = &pp;
  size_t n = inference__model_infer_request__get_packed_size(&r);
  assert_true(n <= cap);
  inference__model_infer_request__pack(&r, out);
  return n;
}

static void test_decode_valid_and_truncated(void **state) {
  for (int raw = 0; raw < 2; raw++) {
    uint8_t buf[256];
    size_t n = pack_request(raw, buf, sizeof buf);
    grpc_infer *g = NULL;
    assert_null(grpc_infer_decode(buf, n, &LIM, &g));
    assert_int_equal(g->version, 2);
    assert_true(g->empty_final);
    assert_int_equal(g->n_inputs, 1);
    const cinfer_tensor *t = &g->inputs[0].t;
    assert_string_equal(t->name, "IN");
    assert_int_equal(t->dtype, CINFER_TYPE_INT16);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->byte_size, 6);
    int16_t want[3] = {-5, 0, 32767};
    assert_memory_equal(t->data, want, 6);
    grpc_infer_free(g);
    for (size_t cut = 0; cut < n; cut++) {
      guard gp = guard_place(buf, cut);
      cinfer_status *st = grpc_infer_decode((uint8_t *)gp.data, cut, &LIM, &g);
      if (st) {
        assert_null(g);
        assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
      }
      cinfer_status_free(st);
      grpc_infer_free(g);
      g = NULL;
      guard_free(&gp);
    }
  }
}

static void expect_bad(Inference__ModelInferRequest *r, const char *needle) {
  uint8_t buf[4096];
  size_t n = inference__model_infer_request__get_packed_size(r);
  assert_true(n <= sizeof buf);
  inference__model_infer_request__pack(r, buf);
  grpc_infer *g = NULL;
  cinfer_status *st = grpc_infer_decode(buf, n, &LIM, &g);
  assert_non_null(st);
  assert_null(g);
  if (!strstr(cinfer_status_message(st), needle)) fail_msg("'%s' lacks '%s'", cinfer_status_message(st), needle);
  cinfer_status_free(st);
}

static void test_decode_errors(void **state) {
  Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor in = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
  Inference__ModelInferRequest__InferInputTensor *ip[2] = {&in, &in};
  Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
  int64_t shape[9] = {1, 2, 1, 1, 1, 1, 1, 1, 1};
  int32_t vals[2] = {1, 2};
  r.model_name = "m";
  expect_bad(&r, "non-empty 'inputs'");
  r.model_version = "-1";
  in.name = "X";
  in.datatype = "INT8";
  in.n_shape = 2;
  in.shape = shape;
  in.contents = &c;
  c.n_int_contents = 2;
  c.int_contents = vals;
  r.n_inputs = 1;
  r.inputs = ip;
  expect_bad(&r, "invalid model version '-1'");
  r.model_version = "";
  r.n_inputs = 2;
  expect_bad(&r, "appears more than once");
  r.n_inputs = 1;
  in.datatype = "FLOAT";
  expect_bad(&r, "unknown datatype 'FLOAT'");
  in.datatype = "INT8";
  in.n_shape = 9;
  expect_bad(&r, "CINFER_MAX_DIMS = 8");
  in.n_shape = 2;
  shape[1] = 2000;
  expect_bad(&r, "limit of 1000 elements");
  shape[1] = 3;
  expect_bad(&r, "'contents' has 2 elements but the shape needs 3");
  shape[1] = 2;
  vals[1] = -129;
  expect_bad(&r, "value -129 is out of range for INT8");
  in.datatype = "FP16";
  expect_bad(&r, "raw_input_contents");
  in.datatype = "INT8";
  ProtobufCBinaryData rd = {3, (uint8_t *)"abc"};
  r.n_raw_input_contents = 1;
  r.raw_input_contents = &rd;
  expect_bad(&r, "contents field must not be specified");
  in.contents = NULL;
  expect_bad(&r, "'X'"); /* 3 bytes for 2 INT8 elements */
  r.n_raw_input_contents = 0;
  uint8_t junk[] = {0xff, 0xff, 0xff};
  grpc_infer *g = NULL;
  cinfer_status *st = grpc_infer_decode(junk, sizeof junk, &LIM, &g);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_non_null(strstr(cinfer_status_message(st), "not valid protobuf"));
  cinfer_status_free(st);
}


/* Shared-memory parameters: decoded with Triton's type rules, bound only by grpc_infer_bind
 * (NULL registry: refused with the HTTP endpoint's text), raw contents counted for the
 * inputs that are not in a region. */
static void test_shm_params(void **state) {
  Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
  Inference__ModelInferRequest__InferInputTensor a = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
                                                 b = INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
  Inference__ModelInferRequest__InferInputTensor *ins[2] = {&a, &b};
  Inference__InferParameter reg = INFERENCE__INFER_PARAMETER__INIT, size = INFERENCE__INFER_PARAMETER__INIT;
  Inference__ModelInferRequest__InferInputTensor__ParametersEntry e1 =
      INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__PARAMETERS_ENTRY__INIT, e2 = e1;
  Inference__ModelInferRequest__InferInputTensor__ParametersEntry *ep[2] = {&e1, &e2};
  int64_t shape[1] = {2};
  a.name = "A", a.datatype = "FP32", a.n_shape = 1, a.shape = shape;
  b.name = "B", b.datatype = "FP32", b.n_shape = 1, b.shape = shape;
  reg.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
  reg.string_param = "region";
  size.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
  size.int64_param = 8;
  e1.key = "shared_memory_region", e1.value = &reg;
  e2.key = "shared_memory_byte_size", e2.value = &size;
  a.n_parameters = 2, a.parameters = ep;
  float bv[2] = {1, 2};
  ProtobufCBinaryData raw = {sizeof bv, (uint8_t *)bv};
  r.model_name = "m";
  r.n_inputs = 2, r.inputs = ins;
  r.n_raw_input_contents = 1, r.raw_input_contents = &raw; /* only B's */
  uint8_t buf[1024];
  size_t n = inference__model_infer_request__get_packed_size(&r);
  inference__model_infer_request__pack(&r, buf);
  grpc_infer *g = NULL;
  assert_null(grpc_infer_decode(buf, n, &LIM, &g));
  assert_true(g->any_shm);
  assert_string_equal(g->shm_in[0].region, "region");
  assert_int_equal(g->shm_in[0].byte_size, 8);
  assert_null(g->shm_in[1].region);
  assert_memory_equal(g->inputs[1].t.data, bv, sizeof bv);
  cinfer_status *st = grpc_infer_bind(g, NULL, NULL);
  assert_non_null(st);
  assert_string_equal(cinfer_status_message(st), "input 'A': shared memory is not available on this endpoint");
  cinfer_status_free(st);
  grpc_infer_free(g);
  /* two raw contents for one input outside shared memory */
  ProtobufCBinaryData raws[2] = {raw, raw};
  r.n_raw_input_contents = 2, r.raw_input_contents = raws;
  expect_bad(&r, "1 inputs not in shared memory but 2 raw_input_contents");
  r.n_raw_input_contents = 1, r.raw_input_contents = &raw;
  /* Triton's type rules */
  size.int64_param = -1;
  expect_bad(&r, "input 'A': Unable to parse 'shared_memory_byte_size': must be a non-negative integer");
  size.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
  expect_bad(&r, "invalid value type for 'shared_memory_byte_size' parameter for tensor 'A', expected int64_param.");
  reg.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
  expect_bad(&r, "invalid value type for 'shared_memory_region' parameter for tensor 'A', expected string_param.");
  e1.key = "something_else"; /* A is no longer in a region: it needs its raw contents */
  r.n_raw_input_contents = 2, r.raw_input_contents = raws;
  expect_bad(&r, "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'A'");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_framing),
      cmocka_unit_test(test_gunzip),
      cmocka_unit_test(test_status_and_headers),
      cmocka_unit_test(test_decode_valid_and_truncated),
      cmocka_unit_test(test_decode_errors),
      cmocka_unit_test(test_shm_params),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
