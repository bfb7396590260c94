/* test_kserve_decode.c: KServe v2 request decoding (frontend/kserve.c) against a PROT_NONE
 * guard page. Every body ends flush against the guard, so reading one byte past it faults:
 *  - each valid case (kserve_cases.h) decodes to the expected request;
 *  - every truncation of it (the body cut at each byte, with the header length kept and
 *    with it cut too) fails with INVALID_ARG, never a fault or another code;
 *  - a table of malformed bodies fails with the message that names the problem;
 *  - the counts a request brings are checked against CINFER_MAX_INPUTS, CINFER_MAX_OUTPUTS
 *    and CINFER_MAX_DIMS, and the error names the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../core/guard_page.h"
#include "kserve_cases.h"

static const kserve_limits LIM = {.max_tensor_elements = 1000, .max_json_depth = 32};

/* Decodes body[0..len) placed against the guard page. The decoded request borrows the body
 * (binary inputs are views), so the page lives as long as the request: *g. */
static cinfer_status *decode_guarded(const char *body, size_t len, int64_t hl, guard *g,
                                     kserve_request **k) {
  *g = guard_place(body, len);
  return kserve_decode(g->data, len, hl, &LIM, k);
}

static void test_valid_cases(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof KSERVE_CASES / sizeof *KSERVE_CASES; c++) {
    const kserve_case *kc = &KSERVE_CASES[c];
    size_t len;
    int64_t hl;
    char *body = kserve_case_body(kc, &len, &hl);
    guard g;
    kserve_request *k;
    cinfer_status *st = decode_guarded(body, len, hl, &g, &k);
    if (st) fail_msg("%s: %s", kc->name, cinfer_status_message(st));
    char got[1024];
    kserve_describe(k, got, sizeof got);
    if (strcmp(got, kc->describe)) fail_msg("%s:\n got  '%s'\n want '%s'", kc->name, got, kc->describe);
    kserve_request_free(k);
    guard_free(&g);
    free(body);
  }
}

static void expect_invalid(const char *what, size_t cut, cinfer_status *st, kserve_request *k) {
  if (!st) {
    kserve_request_free(k);
    fail_msg("%s cut at %zu: decoded", what, cut);
  }
  assert_null(k);
  if (cinfer_status_code(st) != CINFER_INVALID_ARG)
    fail_msg("%s cut at %zu: %s: %s", what, cut, cinfer_code_name(cinfer_status_code(st)),
             cinfer_status_message(st));
  cinfer_status_free(st);
}

static void test_truncations(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof KSERVE_CASES / sizeof *KSERVE_CASES; c++) {
    const kserve_case *kc = &KSERVE_CASES[c];
    size_t len;
    int64_t hl;
    char *body = kserve_case_body(kc, &len, &hl);
    for (size_t cut = 0; cut < len; cut++) {
      guard g;
      kserve_request *k = NULL;
      /* the body cut short, the header length as sent */
      cinfer_status *st = decode_guarded(body, cut, hl, &g, &k);
      expect_invalid(kc->name, cut, st, k);
      guard_free(&g);
      /* the JSON itself cut short (the header length says so) */
      if (hl >= 0 && cut < (size_t)hl) {
        k = NULL;
        st = decode_guarded(body, cut, (int64_t)cut, &g, &k);
        expect_invalid(kc->name, cut, st, k);
        guard_free(&g);
      }
    }
    free(body);
  }
}

typedef struct bad_case {
  const char *header;
  const char *payload; /* NULL: JSON only */
  size_t payload_len;
  cinfer_code code;
  const char *msg;
} bad_case;

#define IN(fields) "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\"," fields "}]}"
static const bad_case BAD_CASES[] = {
    {"", NULL, 0, CINFER_INVALID_ARG, "empty request body"},
    {"{\"inputs\":[", NULL, 0, CINFER_INVALID_ARG, "malformed JSON near byte 11"},
    {"[1]", NULL, 0, CINFER_INVALID_ARG, "request body must be a JSON object"},
    {"{\"id\":1,\"inputs\":[]}", NULL, 0, CINFER_INVALID_ARG, "'id' must be a string"},
    {"{\"parameters\":[],\"inputs\":[]}", NULL, 0, CINFER_INVALID_ARG, "'parameters' must be an object"},
    {"{\"inputs\":[]}", NULL, 0, CINFER_INVALID_ARG, "non-empty 'inputs' array"},
    {"{\"inputs\":{}}", NULL, 0, CINFER_INVALID_ARG, "non-empty 'inputs' array"},
    {"{\"inputs\":[7]}", NULL, 0, CINFER_INVALID_ARG, "inputs[0] must be an object"},
    {"{\"inputs\":[{\"name\":\"\"}]}", NULL, 0, CINFER_INVALID_ARG, "inputs[0] needs a non-empty string 'name'"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]},{\"name\":\"A\"}]}", NULL, 0,
     CINFER_INVALID_ARG, "input 'A' appears more than once"},
    {"{\"inputs\":[{\"name\":\"A\"}]}", NULL, 0, CINFER_INVALID_ARG, "input 'A' needs a string 'datatype'"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"TYPE_FP32\"}]}", NULL, 0, CINFER_INVALID_ARG, "unknown datatype 'TYPE_FP32'"},
    {IN("\"shape\":3"), NULL, 0, CINFER_INVALID_ARG, "'shape' must be an array of integers"},
    {IN("\"shape\":[1,-1]"), NULL, 0, CINFER_INVALID_ARG, "shape[1] must be a non-negative integer"},
    {IN("\"shape\":[1.5]"), NULL, 0, CINFER_INVALID_ARG, "shape[0] must be a non-negative integer"},
    {IN("\"shape\":[1,1,1,1,1,1,1,1,1],\"data\":[1]"), NULL, 0, CINFER_INVALID_ARG,
     "shape has 9 dimensions; the limit is CINFER_MAX_DIMS = 8"},
    {IN("\"shape\":[10,101]"), NULL, 0, CINFER_INVALID_ARG, "more than the limit of 1000 elements"},
    {IN("\"shape\":[4294967296,4294967296]"), NULL, 0, CINFER_INVALID_ARG, "shape [4294967296,4294967296] causes total element count to exceed maximum size of 9223372036854775807"},
    {IN("\"shape\":[4,1152921504606846978]"), NULL, 0, CINFER_INVALID_ARG, "byte size overflow for input 'INPUT0': element count (4611686018427387912) * data type size (4)"},
    {IN("\"shape\":[2]"), NULL, 0, CINFER_INVALID_ARG, "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set"},
    {IN("\"shape\":[2],\"data\":[1]"), NULL, 0, CINFER_INVALID_ARG, "'data' has 1 elements but the shape needs 2"},
    {IN("\"shape\":[1],\"data\":[1,2]"), NULL, 0, CINFER_INVALID_ARG, "more elements than the shape's 1"},
    {IN("\"shape\":[1],\"data\":[\"x\"]"), NULL, 0, CINFER_INVALID_ARG, "FP32 data must be numbers"},
    {"{\"inputs\":[{\"name\":\"I\",\"datatype\":\"INT8\",\"shape\":[1],\"data\":[128]}]}", NULL, 0,
     CINFER_INVALID_ARG, "value 128 is out of range for INT8"},
    {"{\"inputs\":[{\"name\":\"I\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[0.5]}]}", NULL, 0,
     CINFER_INVALID_ARG, "INT32 data must be integers"},
    {"{\"inputs\":[{\"name\":\"B\",\"datatype\":\"BOOL\",\"shape\":[1],\"data\":[1]}]}", NULL, 0,
     CINFER_INVALID_ARG, "BOOL data must be true or false"},
    {"{\"inputs\":[{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[1]}]}", NULL, 0,
     CINFER_INVALID_ARG, "BYTES data must be strings"},
    {IN("\"shape\":[1],\"data\":[1],\"parameters\":{\"binary_data_size\":4}"), "abcd", 4, CINFER_INVALID_ARG,
     "But set 'data' 'binary_data_size'"},
    {IN("\"shape\":[1],\"parameters\":{\"shared_memory_region\":\"r\"}"), NULL, 0, CINFER_INVALID_ARG,
     "input 'INPUT0': shared memory is not available on this endpoint"},
    {IN("\"shape\":[1],\"parameters\":{\"binary_data_size\":-4}"), "abcd", 4, CINFER_INVALID_ARG,
     "binary_data_size must be a non-negative integer"},
    {IN("\"shape\":[1],\"parameters\":{\"binary_data_size\":5}"), "abcd", 4, CINFER_INVALID_ARG,
     "binary_data_size 5 exceeds the 4 bytes of binary data left"},
    {IN("\"shape\":[1],\"parameters\":{\"binary_data_size\":4}"), "abcdef", 6, CINFER_INVALID_ARG,
     "2 bytes of binary data follow the last binary input"},
    {IN("\"shape\":[2],\"parameters\":{\"binary_data_size\":4}"), "abcd", 4, CINFER_INVALID_ARG,
     "need 8 bytes, got 4"},
    {"{\"inputs\":[{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[2],\"parameters\":{\"binary_data_size\":5}}]}",
     "\x01\x00\x00\x00z", 5, CINFER_INVALID_ARG, "element 1 of 2 is missing its length"},
    {"{\"inputs\":[{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[1],\"parameters\":{\"binary_data_size\":6}}]}",
     "\x09\x00\x00\x00zz", 6, CINFER_INVALID_ARG, "claims 9 bytes, only 2 remain"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":{}}", NULL, 0,
     CINFER_INVALID_ARG, "'outputs' must be an array"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":[{}]}", NULL, 0,
     CINFER_INVALID_ARG, "outputs[0] needs a string 'name'"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":[{\"name\":\"O\","
     "\"parameters\":1}]}", NULL, 0, CINFER_INVALID_ARG, "output 'O': 'parameters' must be an object"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":[{\"name\":\"O\","
     "\"parameters\":{\"classification\":-3}}]}", NULL, 0, CINFER_INVALID_ARG,
     "output 'O': Unable to parse 'classification': must be a non-negative integer"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":[{\"name\":\"O\","
     "\"parameters\":{\"classification\":3,\"shared_memory_region\":\"r\"}}]}", NULL, 0, CINFER_INVALID_ARG,
     "Output can't set both 'shared_memory_region' and 'classification'"},
    {"{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":[{\"name\":\"O\"},"
     "{\"name\":\"O\"}]}", NULL, 0, CINFER_INVALID_ARG, "output 'O' already exists in request"},
    {"{\"inputs\":[{\"name\":\"I\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[9223372036854775808]}]}", NULL, 0,
     CINFER_INVALID_ARG, "value 9223372036854775808 is out of range for INT64"},
    {"{\"inputs\":[{\"name\":\"I\",\"datatype\":\"UINT64\",\"shape\":[1],\"data\":[18446744073709551616]}]}", NULL, 0,
     CINFER_INVALID_ARG, "out of range for UINT64"},
    {"{\"inputs\":[{\"name\":\"I\",\"datatype\":\"UINT8\",\"shape\":[1],\"data\":[-1]}]}", NULL, 0,
     CINFER_INVALID_ARG, "value -1 is out of range for UINT8"},
};

static void test_malformed(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof BAD_CASES / sizeof *BAD_CASES; i++) {
    const bad_case *b = &BAD_CASES[i];
    size_t h = strlen(b->header), len = h + b->payload_len;
    char *body = malloc(len + 1);
    memcpy(body, b->header, h);
    if (b->payload_len) memcpy(body + h, b->payload, b->payload_len);
    guard g;
    kserve_request *k = NULL;
    cinfer_status *st = decode_guarded(body, len, b->payload ? (int64_t)h : -1, &g, &k);
    if (!st) fail_msg("case %zu (%s) decoded", i, b->header);
    assert_null(k);
    if (cinfer_status_code(st) != b->code || !strstr(cinfer_status_message(st), b->msg))
      fail_msg("case %zu: got %s '%s', want %s '%s'", i, cinfer_code_name(cinfer_status_code(st)),
               cinfer_status_message(st), cinfer_code_name(b->code), b->msg);
    cinfer_status_free(st);
    guard_free(&g);
    free(body);
  }
  /* the header length itself */
  guard g;
  kserve_request *k = NULL;
  cinfer_status *st = decode_guarded("{}", 2, 3, &g, &k);
  assert_non_null(strstr(cinfer_status_message(st), "Inference-Header-Content-Length (3) is larger than the body (2 bytes)"));
  cinfer_status_free(st);
  guard_free(&g);
}

/* n inputs (or outputs) named I0.., each valid */
static char *many(size_t n, bool outputs, size_t *len) {
  size_t cap = 64 + n * 80, o = 0;
  char *b = malloc(cap);
  o += (size_t)snprintf(b + o, cap - o, "{\"inputs\":[");
  for (size_t i = 0; i < (outputs ? 1 : n); i++)
    o += (size_t)snprintf(b + o, cap - o, "%s{\"name\":\"I%zu\",\"datatype\":\"INT8\",\"shape\":[1],\"data\":[1]}",
                          i ? "," : "", i);
  o += (size_t)snprintf(b + o, cap - o, "]");
  if (outputs) {
    o += (size_t)snprintf(b + o, cap - o, ",\"outputs\":[");
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(b + o, cap - o, "%s{\"name\":\"O%zu\"}", i ? "," : "", i);
    o += (size_t)snprintf(b + o, cap - o, "]");
  }
  o += (size_t)snprintf(b + o, cap - o, "}");
  assert_true(o < cap);
  *len = o;
  return b;
}

static void test_count_limits(void **state) {
  (void)state;
  for (int outputs = 0; outputs < 2; outputs++) {
    size_t limit = outputs ? CINFER_MAX_OUTPUTS : CINFER_MAX_INPUTS;
    /* exactly at the limit: decoded, every one kept */
    size_t len;
    char *body = many(limit, outputs, &len);
    guard g;
    kserve_request *k = NULL;
    cinfer_status *st = decode_guarded(body, len, -1, &g, &k);
    if (st) fail_msg("%s", cinfer_status_message(st));
    assert_int_equal(outputs ? kserve_request_output_count(k) : kserve_request_input_count(k), limit);
    kserve_request_free(k);
    guard_free(&g);
    free(body);
    /* one past it: refused, naming the limit */
    body = many(limit + 1, outputs, &len);
    k = NULL;
    st = decode_guarded(body, len, -1, &g, &k);
    assert_non_null(st);
    assert_null(k);
    char want[128];
    if (outputs)
      snprintf(want, sizeof want, "request asks for %d outputs; the limit is CINFER_MAX_OUTPUTS = %d",
               CINFER_MAX_OUTPUTS + 1, CINFER_MAX_OUTPUTS);
    else
      snprintf(want, sizeof want, "request has %d inputs; the limit is CINFER_MAX_INPUTS = %d",
               CINFER_MAX_INPUTS + 1, CINFER_MAX_INPUTS);
    if (!strstr(cinfer_status_message(st), want)) fail_msg("'%s' lacks '%s'", cinfer_status_message(st), want);
    assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
    cinfer_status_free(st);
    guard_free(&g);
    free(body);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_cases), cmocka_unit_test(test_truncations),
      cmocka_unit_test(test_malformed), cmocka_unit_test(test_count_limits)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
