/* test_gateway_grpc_msg.c: what the gateway reads of a gRPC request: a protobuf string
 * field (found, absent, last occurrence wins, every malformed shape refused) and the model
 * name of a framed message, plain and gzip-compressed (zlib), with the errors named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <cmocka.h>

#include "gateway/gateway.h"

static void test_pb_string_field(void **st) {
  (void)st;
  const uint8_t *v;
  size_t n;
  /* field 1 "abc", field 2 "7", varint field 3, fixed64 field 4, fixed32 field 5 */
  static const uint8_t m[] = {0x0a, 3, 'a', 'b', 'c', 0x12, 1, '7', 0x18, 0x96, 0x01,
                              0x21, 1, 2, 3, 4, 5, 6, 7, 8, 0x2d, 1, 2, 3, 4};
  assert_int_equal(gw_pb_string_field(m, sizeof m, 1, &v, &n), 1);
  assert_int_equal(n, 3);
  assert_memory_equal(v, "abc", 3);
  assert_int_equal(gw_pb_string_field(m, sizeof m, 2, &v, &n), 1);
  assert_memory_equal(v, "7", 1);
  assert_int_equal(gw_pb_string_field(m, sizeof m, 9, &v, &n), 0);
  assert_int_equal(gw_pb_string_field(m, 0, 1, &v, &n), 0);
  /* the last occurrence wins */
  static const uint8_t twice[] = {0x0a, 1, 'x', 0x0a, 2, 'y', 'z'};
  assert_int_equal(gw_pb_string_field(twice, sizeof twice, 1, &v, &n), 1);
  assert_int_equal(n, 2);
  assert_memory_equal(v, "yz", 2);
  /* malformed: length past the end, truncated varint, 11-byte varint, field 0, group wire
   * type, the field as a varint, truncated fixed64 */
  static const struct { uint8_t b[16]; size_t n; } bad[] = {
      {{0x0a, 5, 'a'}, 3}, {{0x18, 0x80}, 2},
      {{0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 12},
      {{0x02, 0}, 2}, {{0x0b}, 1}, {{0x08, 1}, 2}, {{0x21, 1, 2}, 3}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(gw_pb_string_field(bad[i].b, bad[i].n, 1, &v, &n), -1);
}

static size_t framed(uint8_t *out, const uint8_t *msg, size_t n, int flag) {
  out[0] = (uint8_t)flag;
  out[1] = (uint8_t)(n >> 24), out[2] = (uint8_t)(n >> 16), out[3] = (uint8_t)(n >> 8), out[4] = (uint8_t)n;
  memcpy(out + 5, msg, n);
  return n + 5;
}

static void test_request_model(void **st) {
  (void)st;
  uint8_t buf[1024];
  char *model = NULL, err[200];
  static const uint8_t m[] = {0x0a, 8, 'i', 'd', 'e', 'n', 't', 'i', 't', 'y', 0x12, 1, '1'};
  size_t n = framed(buf, m, sizeof m, 0);
  assert_int_equal(gw_grpc_request_model(buf, n, false, 1, &model, err, sizeof err), 1);
  assert_string_equal(model, "identity");
  free(model);
  assert_int_equal(gw_grpc_request_model(buf, n, false, 2, &model, err, sizeof err), 1);
  assert_string_equal(model, "1");
  free(model);
  assert_int_equal(gw_grpc_request_model(buf, n, false, 3, &model, err, sizeof err), 0);
  assert_null(model);
  /* a long name is read whole (KServe names have no length limit) */
  uint8_t longm[3 + 300];
  longm[0] = 0x0a, longm[1] = 0xac, longm[2] = 0x02; /* field 1, length 300 (varint) */
  memset(longm + 3, 'x', 300);
  n = framed(buf, longm, sizeof longm, 0);
  assert_int_equal(gw_grpc_request_model(buf, n, false, 1, &model, err, sizeof err), 1);
  assert_int_equal(strlen(model), 300);
  free(model);
  /* a NUL inside the name */
  static const uint8_t nul[] = {0x0a, 3, 'a', 0, 'b'};
  n = framed(buf, nul, sizeof nul, 0);
  assert_int_equal(gw_grpc_request_model(buf, n, false, 1, &model, err, sizeof err), -1);
  assert_null(model);
  assert_non_null(strstr(err, "NUL"));
  n = framed(buf, m, sizeof m, 0);
  /* truncated message, short prefix, bad flag, compressed without grpc-encoding */
  assert_int_equal(gw_grpc_request_model(buf, n - 1, false, 1, &model, err, sizeof err), -1);
  assert_non_null(strstr(err, "ended inside a gRPC message"));
  assert_int_equal(gw_grpc_request_model(buf, 3, false, 1, &model, err, sizeof err), -1);
  buf[0] = 2;
  assert_int_equal(gw_grpc_request_model(buf, n, false, 1, &model, err, sizeof err), -1);
  assert_non_null(strstr(err, "compressed flag"));
  buf[0] = 1;
  assert_int_equal(gw_grpc_request_model(buf, n, false, 1, &model, err, sizeof err), -1);
  assert_non_null(strstr(err, "grpc-encoding"));
  /* gzip: inflated (only the start is needed) */
  uint8_t z[128];
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = (Bytef *)m;
  zs.avail_in = sizeof m;
  zs.next_out = z;
  zs.avail_out = sizeof z;
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  size_t zn = sizeof z - zs.avail_out;
  deflateEnd(&zs);
  n = framed(buf, z, zn, 1);
  assert_int_equal(gw_grpc_request_model(buf, n, true, 1, &model, err, sizeof err), 1);
  assert_string_equal(model, "identity");
  free(model);
  /* not gzip at all */
  n = framed(buf, m, sizeof m, 1);
  assert_int_equal(gw_grpc_request_model(buf, n, true, 1, &model, err, sizeof err), -1);
  assert_non_null(strstr(err, "gzip"));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_pb_string_field),
                                     cmocka_unit_test(test_request_model)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
