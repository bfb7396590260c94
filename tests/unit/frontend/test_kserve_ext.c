/* test_kserve_ext.c: the Triton extensions of the KServe codec without sockets: exact
 * 64-bit integers through JSON, binary_data_output precedence, the shared-memory registry
 * (bounds, duplicate names, unregister while a request holds the region), classification
 * and the zlib body wrappers (corrupt streams, a zip bomb against the limit). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>
#include <cmocka.h>

#include "core/json.h"
#include "frontend/classify.h"
#include "frontend/compress.h"
#include "frontend/kserve.h"
#include "frontend/shm.h"

static const kserve_limits LIM = {.max_tensor_elements = 1 << 20, .max_json_depth = 100};

static void expect_msg(cinfer_status *st, cinfer_code code, const char *needle) {
  assert_non_null(st);
  assert_int_equal(cinfer_status_code(st), code);
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("message '%s' lacks '%s'", cinfer_status_message(st), needle);
  cinfer_status_free(st);
}

static kserve_request *decode_ok(const char *body, const kserve_decode_ctx *ctx) {
  kserve_request *k = NULL;
  cinfer_status *st = kserve_decode_with(body, strlen(body), -1, &LIM, ctx, &k);
  if (st) fail_msg("%s: %s", body, cinfer_status_message(st));
  return k;
}

static void test_exact_int64(void **state) {
  (void)state;
  kserve_request *k = decode_ok(
      "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"INT64\",\"shape\":[4],\"data\":"
      "[9223372036854775807,-9223372036854775808,9007199254740993,-9007199254740993]},"
      "{\"name\":\"B\",\"datatype\":\"UINT64\",\"shape\":[2],\"data\":[18446744073709551615,"
      "18446744073709551557]}]}", NULL);
  const int64_t *a = kserve_request_input(k, 0)->t.data;
  assert_true(a[0] == INT64_MAX);
  assert_true(a[1] == INT64_MIN);
  assert_true(a[2] == 9007199254740993LL);
  assert_true(a[3] == -9007199254740993LL);
  const uint64_t *b = kserve_request_input(k, 1)->t.data;
  assert_true(b[0] == UINT64_MAX);
  assert_true(b[1] == 18446744073709551557ULL);
  kserve_request_free(k);

  json_doc *d;
  const char *nums = "[1.0, 1e2, -0, 12345678901234567890123, 5]";
  assert_null(json_parse(nums, strlen(nums), 4, &d));
  const json_value *v = json_root(d)->u.child;
  assert_int_equal(v->int_flags, 0);                  /* 1.0: not an integer literal */
  assert_int_equal(v->next->int_flags, 0);            /* 1e2 */
  assert_int_equal(v->next->next->int_flags, JSON_INT_I64 | JSON_INT_U64);
  assert_int_equal(v->next->next->next->int_flags, 0); /* past 2^64: the double only */
  assert_true(v->next->next->next->next->ix.i == 5);
  json_doc_free(d);
}

static void test_depth_100(void **state) {
  (void)state;
  char ok[256], deep[256];
  memset(ok, '[', 100);
  memset(ok + 100, ']', 100);
  memset(deep, '[', 101);
  memset(deep + 101, ']', 101);
  json_doc *d;
  assert_null(json_parse(ok, 200, 100, &d));
  json_doc_free(d);
  expect_msg(json_parse(deep, 202, 100, &d), CINFER_INVALID_ARG, "JSON nesting depth exceeds maximum allowed limit (100)");
}

static void test_binary_precedence(void **state) {
  (void)state;
  /* Triton: a listed output is JSON unless its binary_data says true; binary_data_output
   * only covers the outputs the request does not list. */
  kserve_request *k = decode_ok(
      "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"name\":\"A\",\"datatype\":"
      "\"FP32\",\"shape\":[1],\"data\":[1]}],\"outputs\":[{\"name\":\"L\"},{\"name\":\"M\","
      "\"parameters\":{\"binary_data\":true}}]}", NULL);
  assert_false(kserve_output_binary(k, "L"));
  assert_true(kserve_output_binary(k, "M"));
  assert_true(kserve_output_binary(k, "UNLISTED"));
  kserve_request_free(k);
  k = decode_ok("{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}],"
                "\"outputs\":[{\"name\":\"M\",\"parameters\":{\"binary_data\":true}}]}", NULL);
  assert_true(kserve_output_binary(k, "M"));
  assert_false(kserve_output_binary(k, "UNLISTED"));
  kserve_request_free(k);
}

/* A POSIX shared-memory object of n bytes holding floats 0..n/4-1. */
static void make_object(const char *key, size_t n) {
  shm_unlink(key);
  int fd = shm_open(key, O_RDWR | O_CREAT, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)n), 0);
  float *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  assert_true(p != MAP_FAILED);
  for (size_t i = 0; i < n / 4; i++) p[i] = (float)i;
  munmap(p, n);
  close(fd);
}

static void test_shm_registry(void **state) {
  (void)state;
  char key[64];
  snprintf(key, sizeof key, "/cinfer_test_shm_%d", (int)getpid());
  make_object(key, 8192);
  shm_registry *r;
  assert_null(shm_registry_create(&r));
  expect_msg(shm_register(r, "a", "/cinfer_no_such_object", 0, 16), CINFER_INVALID_ARG,
             "Unable to open shared memory region: '/cinfer_no_such_object'");
  expect_msg(shm_register(r, "a", "///", 0, 16), CINFER_INVALID_ARG, "invalid shm key '///'");
  expect_msg(shm_register(r, "a", "/triton_python_backend_shm_region_x", 0, 16), CINFER_INVALID_ARG,
             "reserved prefix");
  expect_msg(shm_register(r, "a", key, 8000, 400), CINFER_INVALID_ARG,
             "failed to register shared memory region 'a': invalid args");
  expect_msg(shm_register(r, "a", key, UINT64_MAX, 2), CINFER_INVALID_ARG, "invalid args");
  /* a window at an offset that is not page aligned */
  assert_null(shm_register(r, "a", key, 4100, 4000));
  expect_msg(shm_register(r, "a", key, 0, 16), CINFER_INVALID_ARG,
             "shared memory region 'a' already in manager");
  shm_region *g;
  void *addr;
  expect_msg(shm_acquire(r, "b", 0, 4, &g, &addr), CINFER_NOT_FOUND,
             "Unable to find shared memory region: 'b'");
  expect_msg(shm_acquire(r, "a", 4000, 4, &g, &addr), CINFER_INVALID_ARG,
             "Invalid offset for shared memory region: 'a'");
  expect_msg(shm_acquire(r, "a", 8, 3996, &g, &addr), CINFER_INVALID_ARG,
             "Invalid offset + byte size for shared memory region: 'a'");
  expect_msg(shm_acquire(r, "a", 8, UINT64_MAX, &g, &addr), CINFER_INVALID_ARG,
             "Integer overflow detected");
  assert_null(shm_acquire(r, "a", 8, 16, &g, &addr));
  /* object offset 4100 + 8 = float index 1027 */
  assert_true(((float *)addr)[0] == 1027.0f);
  cbuf b = {0};
  assert_null(shm_status_json(r, NULL, &b));
  assert_non_null(strstr(b.data, "\"name\":\"a\""));
  assert_non_null(strstr(b.data, "\"offset\":4100,\"byte_size\":4000"));
  cbuf_free(&b);
  /* unregister while the "request" holds the region: success, and as Triton the name stays
   * listed (and taken) until the request releases it; no new request may use it */
  assert_null(shm_unregister(r, "a"));
  assert_int_equal(shm_region_count(r), 1);
  assert_null(shm_status_json(r, "a", &b));
  assert_non_null(strstr(b.data, "\"name\":\"a\""));
  cbuf_free(&b);
  shm_region *g2 = NULL; /* a new request may still use it (Triton) and keeps it listed */
  void *addr2 = NULL;
  assert_null(shm_acquire(r, "a", 8, 16, &g2, &addr2));
  shm_region_release(g);
  assert_int_equal(shm_region_count(r), 1);
  g = g2;
  expect_msg(shm_register(r, "a", key, 0, 64), CINFER_INVALID_ARG,
             "shared memory region 'a' already in manager"); /* still taken */
  assert_true(((float *)addr)[3] == 1030.0f); /* still mapped: ASan would flag a bad read */
  ((float *)addr)[3] = -1;
  shm_region_release(g); /* the last holder: the region leaves */
  assert_int_equal(shm_region_count(r), 0);
  expect_msg(shm_status_json(r, "a", &b), CINFER_NOT_FOUND,
             "Unable to find system shared memory region: 'a'");
  cbuf_free(&b);
  assert_null(shm_register(r, "a", key, 0, 64)); /* the name is free again */
  assert_null(shm_unregister(r, "never-registered")); /* as Triton: not an error */
  assert_null(shm_unregister(r, NULL));
  assert_int_equal(shm_region_count(r), 0);
  shm_registry_destroy(r);
  shm_unlink(key);
}

static void test_shm_decode(void **state) {
  (void)state;
  char key[64];
  snprintf(key, sizeof key, "/cinfer_test_shmd_%d", (int)getpid());
  make_object(key, 4096);
  shm_registry *r;
  assert_null(shm_registry_create(&r));
  assert_null(shm_register(r, "in", key, 0, 4096));
  kserve_decode_ctx ctx = {.shm = r};
  kserve_request *k = decode_ok(
      "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{"
      "\"shared_memory_region\":\"in\",\"shared_memory_offset\":16,\"shared_memory_byte_size\":16}}],"
      "\"outputs\":[{\"name\":\"O\",\"parameters\":{\"shared_memory_region\":\"in\","
      "\"shared_memory_offset\":1024,\"shared_memory_byte_size\":8}}]}", &ctx);
  const float *a = kserve_request_input(k, 0)->t.data;
  assert_true(a[0] == 4.0f && a[3] == 7.0f);
  assert_null(shm_unregister(r, NULL)); /* the request still reads and writes it */
  /* a response whose output is larger than the region window: Triton's text */
  const kserve_output_req *o = kserve_request_output(k, 0);
  assert_non_null(o->shm);
  assert_int_equal(o->shm_size, 8);
  assert_true(a[1] == 5.0f);
  kserve_request_free(k);
  kserve_request *k2 = NULL;
  const char *body = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{"
                     "\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":16}}]}";
  expect_msg(kserve_decode_with(body, strlen(body), -1, &LIM, &ctx, &k2), CINFER_NOT_FOUND,
             "Unable to find shared memory region: 'in'");
  assert_null(shm_register(r, "in", key, 0, 4096));
  body = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[4],\"parameters\":{"
         "\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":12}}]}";
  expect_msg(kserve_decode_with(body, strlen(body), -1, &LIM, &ctx, &k2), CINFER_INVALID_ARG,
             "need 16 bytes, got 12");
  shm_registry_destroy(r);
  shm_unlink(key);
}

static void test_classify(void **state) {
  (void)state;
  float v[8] = {1.1f, 3.3f, 0.5f, 2.4f, 7, 7, -1, 0};
  cinfer_tensor t = {.name = "O", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {2, 4},
                     .data = v, .byte_size = sizeof v};
  classify_labels lab = {0};
  char path[] = "/tmp/cinfer_labels_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "zero\r\none\ntwo\nthree\n", 20), 20);
  close(fd);
  assert_null(classify_labels_load(path, &lab));
  unlink(path);
  assert_int_equal(lab.n, 4);
  cbuf b = {0};
  int64_t shape[2];
  int nd;
  assert_null(classify_output(&t, 2, true, &lab, &b, shape, &nd));
  assert_int_equal(nd, 2);
  assert_int_equal(shape[0], 2);
  assert_int_equal(shape[1], 2);
  /* rows: [3.3:1:one, 2.4:3:three], [7:0:zero, 7:1:one] (a tie: the lower index first) */
  const char *want[] = {"3.300000:1:one", "2.400000:3:three", "7.000000:0:zero", "7.000000:1:one"};
  size_t off = 0;
  for (int i = 0; i < 4; i++) {
    uint32_t l;
    memcpy(&l, b.data + off, 4);
    off += 4;
    assert_int_equal(l, strlen(want[i]));
    assert_memory_equal(b.data + off, want[i], l);
    off += l;
  }
  assert_int_equal(off, b.len);
  cbuf_free(&b);
  /* unbatched: one row of 8; K larger than the row is clipped */
  assert_null(classify_output(&t, 50, false, NULL, &b, shape, &nd));
  assert_int_equal(nd, 1);
  assert_int_equal(shape[0], 8);
  cbuf_free(&b);
  int64_t big[3] = {INT64_MAX, -5, INT64_MIN};
  cinfer_tensor ti = {.name = "I", .dtype = CINFER_TYPE_INT64, .ndim = 1, .shape = {3},
                      .data = big, .byte_size = sizeof big};
  assert_null(classify_output(&ti, 1, false, NULL, &b, shape, &nd));
  assert_memory_equal(b.data + 4, "9223372036854775807:0", 21);
  cbuf_free(&b);
  cinfer_tensor ts = {.name = "S", .dtype = CINFER_TYPE_BYTES, .ndim = 1, .shape = {0}};
  expect_msg(classify_output(&ts, 1, false, NULL, &b, shape, &nd), CINFER_INVALID_ARG,
             "class result not available for output due to unsupported type 'BYTES'");
  cbuf_free(&b);
  classify_labels_free(&lab);
}

static void test_compress(void **state) {
  (void)state;
  const char text[] = "{\"inputs\":[{\"name\":\"A\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}";
  for (int kind = COMPRESS_GZIP; kind <= COMPRESS_DEFLATE; kind++) {
    void *z, *back;
    size_t zl, bl;
    assert_null(compress_deflate((compress_kind)kind, text, sizeof text, &z, &zl));
    assert_null(compress_inflate(z, zl, 1 << 20, &back, &bl));
    assert_int_equal(bl, sizeof text);
    assert_memory_equal(back, text, bl);
    free(back);
    expect_msg(compress_inflate(z, zl - 3, 1 << 20, &back, &bl), CINFER_INVALID_ARG,
               "failed to decompress the request body");
    ((unsigned char *)z)[zl / 2] ^= 0x55;
    cinfer_status *st = compress_inflate(z, zl, 1 << 20, &back, &bl);
    if (!st) fail_msg("a corrupted stream inflated");
    cinfer_status_free(st);
    free(z);
  }
  void *junk;
  size_t junk_len;
  expect_msg(compress_inflate("not gzip at all", 15, 1 << 20, &junk, &junk_len),
             CINFER_INVALID_ARG, "failed to decompress");
  /* a zip bomb: 64 MiB of zeros in ~64 KiB, against a 1 MiB limit */
  size_t n = (size_t)64 << 20;
  unsigned char *zeros = calloc(1, n);
  uLongf zl = compressBound((uLong)n);
  unsigned char *z = malloc(zl);
  assert_int_equal(compress2(z, &zl, zeros, (uLong)n, 9), Z_OK);
  free(zeros);
  void *out;
  size_t ol;
  expect_msg(compress_inflate(z, zl, 1 << 20, &out, &ol), CINFER_RESOURCE_EXHAUSTED,
             "Decompressed data size exceeds the maximum allowed value of 1048576 bytes");
  free(z);
  compress_kind k;
  assert_true(compress_request_kind("gzip", 4, &k) && k == COMPRESS_GZIP);
  assert_false(compress_request_kind("br", 2, &k));
  assert_int_equal(compress_pick_response("gzip;q=0.5, deflate", 19), COMPRESS_DEFLATE);
  assert_int_equal(compress_pick_response("br, gzip", 8), COMPRESS_GZIP);
  assert_int_equal(compress_pick_response("identity, gzip;q=0.9", 20), COMPRESS_IDENTITY);
  assert_int_equal(compress_pick_response("gzip;q=x", 8), COMPRESS_IDENTITY);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_int64),      cmocka_unit_test(test_depth_100),
      cmocka_unit_test(test_binary_precedence), cmocka_unit_test(test_shm_registry),
      cmocka_unit_test(test_shm_decode),       cmocka_unit_test(test_classify),
      cmocka_unit_test(test_compress),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
