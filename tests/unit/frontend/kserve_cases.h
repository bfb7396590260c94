/* kserve_cases.h: valid KServe v2 infer request bodies (JSON and the binary tensor
 * extension) shared by the guard-page test and the allocation-failure torture, and
 * kserve_describe, which prints a decoded request so two decodes can be compared.
 *
 * The inputs are those of the model in kserve_model_config (identity backend), so a
 * decoded case can also be applied to a real cinfer_request. */
#ifndef TEST_KSERVE_CASES_H
#define TEST_KSERVE_CASES_H
#include <stdio.h>
#include <string.h>

#include "frontend/kserve.h"

static const char kserve_model_config[] =
    "name: \"m\"\n"
    "backend: \"identity\"\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1, -1 ] },\n"
    "        { name: \"S\" data_type: TYPE_STRING dims: [ -1 ] },\n"
    "        { name: \"I8\" data_type: TYPE_INT8 dims: [ -1 ] },\n"
    "        { name: \"B\" data_type: TYPE_BOOL dims: [ -1 ] },\n"
    "        { name: \"U64\" data_type: TYPE_UINT64 dims: [ -1 ] },\n"
    "        { name: \"H\" data_type: TYPE_FP16 dims: [ -1 ] },\n"
    "        { name: \"BF\" data_type: TYPE_BF16 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1, -1 ] } ]\n";

typedef struct kserve_case {
  const char *name;
  const char *header;    /* the JSON */
  const char *payload;   /* binary section (NULL: none, the body is only JSON) */
  size_t payload_len;
  const char *describe;  /* kserve_describe of the decoded request */
} kserve_case;

static const kserve_case KSERVE_CASES[] = {
    {"json fp32 nested",
     "{\"id\":\"r1\",\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[2,2],"
     "\"data\":[[1,2.5],[-3e2,0.25]]}],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":"
     "{\"binary_data\":true}}],\"parameters\":{\"priority\":1,\"tag\":\"x\",\"flag\":false,\"t\":0.5}}",
     NULL, 0,
     "id=r1 in INPUT0 FP32 [2,2] 16B 0000803f00002040000096c30000803e out OUTPUT0 bin"},
    {"json every type",
     "{\"inputs\":[{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[2],\"data\":[\"ab\",\"\\u00e9\"]},"
     "{\"name\":\"I8\",\"datatype\":\"INT8\",\"shape\":[3],\"data\":[-128,0,127]},"
     "{\"name\":\"B\",\"datatype\":\"BOOL\",\"shape\":[2],\"data\":[true,false]},"
     "{\"name\":\"U64\",\"datatype\":\"UINT64\",\"shape\":[1],\"data\":[18446744073709549568]},"
     "{\"name\":\"H\",\"datatype\":\"FP16\",\"shape\":[2],\"data\":[1,-2]},"
     "{\"name\":\"BF\",\"datatype\":\"BF16\",\"shape\":[1],\"data\":[NaN]}],"
     "\"parameters\":{\"binary_data_output\":true}}",
     NULL, 0,
     "in S BYTES [2] 12B 02000000616202000000c3a9 in I8 INT8 [3] 3B 80007f in B BOOL [2] 2B 0100 "
     "in U64 UINT64 [1] 8B 00f8ffffffffffff in H FP16 [2] 4B 003c00c0 in BF BF16 [1] 2B c07f "
     "bin-default"},
    {"binary fp32 aligned",
     "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,2],"
     "\"parameters\":{\"binary_data_size\":8}}]}   ",
     "\x00\x00\x80\x3f\x00\x00\x00\x40", 8,
     "in INPUT0 FP32 [1,2] 8B 0000803f00000040"},
    {"binary unaligned and bytes",
     "{\"inputs\":[{\"name\":\"S\",\"datatype\":\"BYTES\",\"shape\":[2],\"parameters\":{\"binary_data_size\":9}},"
     "{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[1,1],\"parameters\":{\"binary_data_size\":4}}],"
     "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":false}}]}",
     "\x01\x00\x00\x00z\x00\x00\x00\x00\x00\x00\x80\xbf", 13,
     "in S BYTES [2] 9B 010000007a00000000 in INPUT0 FP32 [1,1] 4B 000080bf out OUTPUT0 json"},
    {"binary and json mixed",
     "{\"inputs\":[{\"name\":\"I8\",\"datatype\":\"INT8\",\"shape\":[2],\"parameters\":{\"binary_data_size\":2}},"
     "{\"name\":\"B\",\"datatype\":\"BOOL\",\"shape\":[1],\"data\":[true]}]}",
     "\x05\xfb", 2,
     "in I8 INT8 [2] 2B 05fb in B BOOL [1] 1B 01"},
    {"empty tensor",
     "{\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"FP32\",\"shape\":[0,3],\"data\":[]}]}",
     NULL, 0,
     "in INPUT0 FP32 [0,3] 0B "},
};

/* Prints the decoded request: id, each input (name, datatype, shape, bytes, the first 16
 * bytes in hex), each requested output (bin / json) and the binary default. */
static inline void kserve_describe(kserve_request *k, char *out, size_t cap) {
  size_t o = 0;
#define PUT(...) o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, __VA_ARGS__)
  out[0] = 0;
  if (kserve_request_id(k)) PUT("id=%s ", kserve_request_id(k));
  for (size_t i = 0; i < kserve_request_input_count(k); i++) {
    const cinfer_tensor *t = &kserve_request_input(k, i)->t;
    PUT("in %s %s [", t->name, cinfer_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) PUT("%s%lld", d ? "," : "", (long long)t->shape[d]);
    PUT("] %zuB ", t->byte_size);
    for (size_t b = 0; b < t->byte_size && b < 16; b++) PUT("%02x", ((const unsigned char *)t->data)[b]);
    PUT(" ");
  }
  for (size_t i = 0; i < kserve_request_output_count(k); i++) {
    const kserve_output_req *r = kserve_request_output(k, i);
    PUT("out %s %s ", r->name, r->binary ? "bin" : "json");
  }
  if (kserve_request_binary_default(k)) PUT("bin-default ");
#undef PUT
  if (o && o <= cap && out[o - 1] == ' ') out[o - 1] = 0; /* no trailing blank */
}

/* header + payload, and the Inference-Header-Content-Length (-1 when there is no payload) */
static inline char *kserve_case_body(const kserve_case *c, size_t *len, int64_t *header_len) {
  size_t h = strlen(c->header);
  *len = h + c->payload_len;
  char *b = malloc(*len + 1);
  memcpy(b, c->header, h);
  if (c->payload_len) memcpy(b + h, c->payload, c->payload_len);
  *header_len = c->payload ? (int64_t)h : -1;
  return b;
}
#endif
