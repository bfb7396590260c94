/* fuzz_http.c: libFuzzer harness for the HTTP/1.1 request/response head parsers and the
 * chunked decoder. Each input is parsed whole and again in two pieces (resumability: the
 * split parse must reach the same verdict), and every returned slice is checked to lie
 * inside the input. ASan catches any read past the input (libFuzzer's copy is exact). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/http.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0)

static int inside(const char *p, size_t n, const uint8_t *d, size_t len) {
  return n == 0 || ((const uint8_t *)p >= d && (const uint8_t *)p + n <= d + len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const http_limits lim = {.max_header_bytes = 4096, .max_headers = 32,
                                  .max_body_bytes = 1 << 20};
  http_header h[32];
  http_request req;
  http_parse_error err;
  const char *buf = (const char *)data;
  int r = http_parse_request(buf, size, 0, &lim, h, 32, &req, &err);
  if (r == HTTP_PARSE_OK) {
    CHECK(req.head_len <= size);
    CHECK(inside(req.method, req.method_len, data, size));
    CHECK(inside(req.path, req.path_len, data, size));
    CHECK(inside(req.query, req.query_len, data, size));
    for (size_t i = 0; i < req.num_headers; i++) {
      CHECK(inside(h[i].name, h[i].name_len, data, size));
      CHECK(inside(h[i].value, h[i].value_len, data, size));
    }
    http_request_header(&req, "content-type", NULL);
  } else if (r == HTTP_PARSE_ERROR) {
    CHECK(err.status >= 400 && err.status <= 505 && err.message);
  }
  /* resumability: a prefix first, then the whole input with prev_len */
  if (size > 1) {
    size_t cut = data[0] % size;
    http_request r2;
    int a = http_parse_request(buf, cut, 0, &lim, h, 32, &r2, &err);
    if (a == HTTP_PARSE_INCOMPLETE) {
      int b = http_parse_request(buf, size, cut, &lim, h, 32, &r2, &err);
      CHECK(b == r);
      if (b == HTTP_PARSE_OK) CHECK(r2.head_len == req.head_len);
    }
  }
  http_response resp;
  http_parse_response(buf, size, 0, &lim, size & 1, h, 32, &resp, &err);
  /* chunked decoding in place on a private copy */
  char *copy = malloc(size ? size : 1);
  if (copy) {
    memcpy(copy, data, size);
    http_chunked ck = {.max_total = 1 << 16};
    size_t out, used;
    http_chunked_decode(&ck, copy, size, &out, &used);
    CHECK(out <= used && used <= size);
    free(copy);
  }
  return 0;
}
