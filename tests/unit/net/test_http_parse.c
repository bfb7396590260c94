/* test_http_parse.c: request/response head parser and chunked decoder, driven by tables.
 * Every input is parsed (1) whole, (2) fed one byte at a time (resumability: INCOMPLETE
 * until the last byte, same outcome at the end) and (3) placed flush against a PROT_NONE
 * guard page so that any read past the given length crashes the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "net/http.h"

/* ---- guard page buffers ----------------------------------------------------------------- */

typedef struct guard {
  char *map;
  size_t maplen;
  char *data;  /* data + len == start of the PROT_NONE page */
} guard;

static guard guard_place(const char *src, size_t len) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  size_t pages = (len + pg - 1) / pg + 1;
  guard g;
  g.maplen = (pages + 1) * pg;
  g.map = mmap(NULL, g.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(g.map != MAP_FAILED);
  assert_int_equal(mprotect(g.map + pages * pg, pg, PROT_NONE), 0);
  g.data = g.map + pages * pg - len;
  memcpy(g.data, src, len);
  return g;
}

static void guard_free(guard *g) { munmap(g->map, g->maplen); }

static const http_limits LIM = {.max_header_bytes = 1024, .max_headers = 8, .max_body_bytes = 100};

/* ---- request table ------------------------------------------------------------------------ */

typedef struct req_case {
  const char *in;
  int result;      /* HTTP_PARSE_OK or HTTP_PARSE_ERROR */
  int status;      /* expected error status */
  const char *path, *query;
  int body_kind;
  uint64_t cl;
  int keep_alive;  /* -1 = do not check */
  int expect;
} req_case;

static const req_case REQS[] = {
    {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 1, 0},
    {"GET /v2/models/m/infer?a=1&b=2 HTTP/1.1\r\nHost: a\r\nX-Y:  v \t\r\n\r\n", HTTP_PARSE_OK, 0,
     "/v2/models/m/infer", "a=1&b=2", HTTP_BODY_NONE, 0, 1, 0},
    {"GET /x? HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_OK, 0, "/x", "", HTTP_BODY_NONE, 0, 1, 0},
    {"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 1, 0},
    {"GET / HTTP/1.0\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 0, 0},
    {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 1, 0},
    {"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 0, 0},
    {"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", HTTP_PARSE_OK, 0, "/p", "", HTTP_BODY_LENGTH, 5, 1, 0},
    {"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", HTTP_PARSE_OK, 0, "/p", "", HTTP_BODY_NONE, 0, 1, 0},
    {"POST /p HTTP/1.1\r\nHost: a\r\ncontent-length: 7\r\nContent-Length: 7\r\n\r\n", HTTP_PARSE_OK, 0, "/p", "", HTTP_BODY_LENGTH, 7, 1, 0},
    {"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", HTTP_PARSE_OK, 0, "/p", "", HTTP_BODY_CHUNKED, 0, 1, 0},
    {"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n", HTTP_PARSE_OK, 0, "/p", "", HTTP_BODY_LENGTH, 3, 1, 1},
    {"GET / HTTP/1.1\r\nHost: a\r\nX-Empty:\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 1, 0},
    {"GET / HTTP/1.1\r\nHost: a\r\nX-Bin: \x80\xff\r\n\r\n", HTTP_PARSE_OK, 0, "/", "", HTTP_BODY_NONE, 0, 1, 0},
    /* errors */
    {"GET / HTTP/1.1\r\n\r\n", HTTP_PARSE_ERROR, 400},                            /* no Host */
    {"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", HTTP_PARSE_ERROR, 400},      /* two Hosts */
    {"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 505},
    {"GET / HTTP/1.2\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 505},
    {"GET / HTTX/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost : a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHo st: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\n: a\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", HTTP_PARSE_ERROR, 400},
    {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", HTTP_PARSE_ERROR, 501},
    {"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", HTTP_PARSE_ERROR, 501},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n", HTTP_PARSE_ERROR, 413},
    {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n", HTTP_PARSE_ERROR, 413},
    {"POST / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", HTTP_PARSE_ERROR, 417},
    {"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\nF: 1\r\nG: 1\r\nH: 1\r\n\r\n", HTTP_PARSE_ERROR, 431},
    {"\x16\x03\x01\x02", HTTP_PARSE_ERROR, 400},  /* TLS hello: rejected before the head ends */
    {"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP_PARSE_ERROR, 400},
};

static int parse_at(const char *buf, size_t len, size_t prev, http_request *req, http_header *h,
                    http_parse_error *err) {
  return http_parse_request(buf, len, prev, &LIM, h, 16, req, err);
}

static void check_ok(const req_case *c, const http_request *req, size_t len) {
  assert_int_equal(req->head_len, len);
  assert_int_equal(req->path_len, strlen(c->path));
  assert_memory_equal(req->path, c->path, req->path_len);
  assert_int_equal(req->query_len, strlen(c->query));
  if (req->query_len) assert_memory_equal(req->query, c->query, req->query_len);
  assert_int_equal(req->body_kind, c->body_kind);
  assert_int_equal(req->content_length, c->cl);
  if (c->keep_alive >= 0) assert_int_equal(req->keep_alive, c->keep_alive);
  assert_int_equal(req->expect_continue, c->expect);
}

static void test_request_table(void **s) {
  for (size_t i = 0; i < sizeof REQS / sizeof REQS[0]; i++) {
    const req_case *c = &REQS[i];
    size_t len = strlen(c->in);
    http_request req;
    http_header h[16];
    http_parse_error err = {0};
    /* whole, against the guard page */
    guard g = guard_place(c->in, len);
    int r = parse_at(g.data, len, 0, &req, h, &err);
    if (r != c->result) fail_msg("case %zu: got %d want %d (%s)", i, r, c->result, err.message);
    if (r == HTTP_PARSE_OK) check_ok(c, &req, len);
    else {
      if (err.status != c->status) fail_msg("case %zu: status %d want %d (%s)", i, err.status, c->status, err.message);
      assert_non_null(err.message);
    }
    guard_free(&g);
    /* byte by byte: every strict prefix is INCOMPLETE (or the same error, early) */
    size_t prev = 0;
    bool early_error = false;
    for (size_t k = 1; k < len; k++) {
      guard p = guard_place(c->in, k);
      http_parse_error e2 = {0};
      int rk = parse_at(p.data, k, prev, &req, h, &e2);
      guard_free(&p);
      if (rk == HTTP_PARSE_ERROR) {
        if (c->result != HTTP_PARSE_ERROR || e2.status != c->status)
          fail_msg("case %zu: prefix %zu errored %d (%s)", i, k, e2.status, e2.message);
        early_error = true;
        break;
      }
      if (rk != HTTP_PARSE_INCOMPLETE) fail_msg("case %zu: prefix %zu returned %d", i, k, rk);
      prev = k;
    }
    if (!early_error) {
      guard p = guard_place(c->in, len);
      int rk = parse_at(p.data, len, prev, &req, h, &err);
      assert_int_equal(rk, c->result);
      if (rk == HTTP_PARSE_OK) check_ok(c, &req, len);
      else assert_int_equal(err.status, c->status);
      guard_free(&p);
    }
  }
}

static void test_request_headers_lookup(void **s) {
  const char *in = "PUT /a HTTP/1.1\r\nHost: h\r\nX-Request-ID: abc\r\ncontent-type: application/json\r\n\r\nBODY";
  http_request req;
  http_header h[16];
  http_parse_error err;
  assert_int_equal(parse_at(in, strlen(in), 0, &req, h, &err), HTTP_PARSE_OK);
  assert_int_equal(req.method_id, HTTP_PUT);
  assert_int_equal(req.head_len, strlen(in) - 4);  /* body bytes are not part of the head */
  size_t n;
  const char *v = http_request_header(&req, "Content-Type", &n);
  assert_non_null(v);
  assert_int_equal(n, 16);
  assert_memory_equal(v, "application/json", 16);
  v = http_request_header(&req, "x-request-id", &n);
  assert_non_null(v);
  assert_memory_equal(v, "abc", 3);
  assert_null(http_request_header(&req, "missing", &n));
  assert_int_equal(req.num_headers, 3);
}

static void test_header_size_limit(void **s) {
  /* A head that never ends: 431 as soon as it exceeds the limit, not before. */
  char big[2048];
  memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
  memset(big + 19, 'a', sizeof big - 19);
  http_request req;
  http_header h[16];
  http_parse_error err;
  assert_int_equal(parse_at(big, LIM.max_header_bytes, 0, &req, h, &err), HTTP_PARSE_INCOMPLETE);
  assert_int_equal(parse_at(big, LIM.max_header_bytes + 1, 0, &req, h, &err), HTTP_PARSE_ERROR);
  assert_int_equal(err.status, 431);
  /* complete but too large */
  memcpy(big + 1500, "\r\nHost: a\r\n\r\n", 13);
  assert_int_equal(parse_at(big, 1513, 0, &req, h, &err), HTTP_PARSE_ERROR);
  assert_int_equal(err.status, 431);
  /* exactly at the limit is fine */
  char ok[1024];
  memcpy(ok, "GET / HTTP/1.1\r\nHost: a\r\nX: ", 28);
  memset(ok + 28, 'b', 1024 - 32);
  memcpy(ok + 1020, "\r\n\r\n", 4);
  assert_int_equal(parse_at(ok, 1024, 0, &req, h, &err), HTTP_PARSE_OK);
  assert_int_equal(req.head_len, 1024);
}

/* ---- responses ------------------------------------------------------------------------------ */

typedef struct resp_case {
  const char *in;
  bool head;
  int result, status, body_kind;
  uint64_t cl;
  int keep_alive;
} resp_case;

static const resp_case RESPS[] = {
    {"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", false, HTTP_PARSE_OK, 200, HTTP_BODY_LENGTH, 12, 1},
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, HTTP_PARSE_OK, 200, HTTP_BODY_CHUNKED, 0, 1},
    {"HTTP/1.1 200 OK\r\n\r\n", false, HTTP_PARSE_OK, 200, HTTP_BODY_UNTIL_CLOSE, 0, 0},
    {"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false, HTTP_PARSE_OK, 200, HTTP_BODY_LENGTH, 1, 0},
    {"HTTP/1.1 204 No Content\r\n\r\n", false, HTTP_PARSE_OK, 204, HTTP_BODY_NONE, 0, 1},
    {"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", true, HTTP_PARSE_OK, 200, HTTP_BODY_NONE, 0, 1},
    {"HTTP/1.1 100 Continue\r\n\r\n", false, HTTP_PARSE_OK, 100, HTTP_BODY_NONE, 0, 1},
    {"HTTP/1.1 503\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", false, HTTP_PARSE_OK, 503, HTTP_BODY_NONE, 0, 0},
    {"HTTP/1.1 20 OK\r\n\r\n", false, HTTP_PARSE_ERROR, 400, 0, 0, 0},
    {"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false, HTTP_PARSE_ERROR, 400, 0, 0, 0},
    {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", false, HTTP_PARSE_ERROR, 400, 0, 0, 0},
    {"SSH-2.0-OpenSSH\r\n\r\n", false, HTTP_PARSE_ERROR, 400, 0, 0, 0},
};

static void test_response_table(void **s) {
  for (size_t i = 0; i < sizeof RESPS / sizeof RESPS[0]; i++) {
    const resp_case *c = &RESPS[i];
    size_t len = strlen(c->in);
    http_response resp;
    http_header h[16];
    http_parse_error err = {0};
    guard g = guard_place(c->in, len);
    int r = http_parse_response(g.data, len, 0, &LIM, c->head, h, 16, &resp, &err);
    if (r != c->result) fail_msg("resp case %zu: got %d (%s)", i, r, err.message);
    if (r == HTTP_PARSE_OK) {
      assert_int_equal(resp.status, c->status);
      assert_int_equal(resp.body_kind, c->body_kind);
      assert_int_equal(resp.content_length, c->cl);
      assert_int_equal(resp.keep_alive, c->keep_alive);
      assert_int_equal(resp.head_len, len);
    } else {
      assert_int_equal(err.status, c->status);
    }
    guard_free(&g);
    size_t prev = 0;
    for (size_t k = 1; k < len; k++) {
      guard p = guard_place(c->in, k);
      int rk = http_parse_response(p.data, k, prev, &LIM, c->head, h, 16, &resp, &err);
      guard_free(&p);
      if (rk == HTTP_PARSE_ERROR) {
        assert_int_equal(c->result, HTTP_PARSE_ERROR);
        break;
      }
      assert_int_equal(rk, HTTP_PARSE_INCOMPLETE);
      prev = k;
    }
  }
}

/* ---- chunked ---------------------------------------------------------------------------------- */

static void test_chunked_whole_and_bytewise(void **s) {
  const char *in = "5\r\nhello\r\n6;ext=1\r\n world\r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  size_t len = strlen(in);
  /* whole, in place */
  guard g = guard_place(in, len);
  http_chunked st = {0};
  size_t out, used;
  assert_int_equal(http_chunked_decode(&st, g.data, len, &out, &used), HTTP_CHUNKED_DONE);
  assert_int_equal(out, 21);
  assert_memory_equal(g.data, "hello world0123456789", 21);
  assert_int_equal(len - used, 4);
  assert_memory_equal(g.data + used, "NEXT", 4);
  guard_free(&g);
  /* one byte at a time */
  memset(&st, 0, sizeof st);
  char acc[64];
  size_t n = 0, k;
  int r = HTTP_CHUNKED_INCOMPLETE;
  for (k = 0; k < len && r == HTTP_CHUNKED_INCOMPLETE; k++) {
    guard p = guard_place(in + k, 1);
    r = http_chunked_decode(&st, p.data, 1, &out, &used);
    assert_int_equal(used, 1);
    if (out) acc[n++] = p.data[0];
    guard_free(&p);
  }
  assert_int_equal(r, HTTP_CHUNKED_DONE);
  assert_int_equal(k, len - 4);
  assert_int_equal(n, 21);
  assert_memory_equal(acc, "hello world0123456789", 21);
}

static void test_chunked_errors(void **s) {
  static const struct { const char *in; int r; } C[] = {
      {"zz\r\n", HTTP_CHUNKED_ERROR},
      {"\r\n", HTTP_CHUNKED_ERROR},
      {"5\r\nhelloX", HTTP_CHUNKED_ERROR},
      {"5\nhello\r\n", HTTP_CHUNKED_ERROR},
      {"ffffffffffffffffff\r\n", HTTP_CHUNKED_ERROR},
      {"5\r\nhello\r\n0\r\n\r", HTTP_CHUNKED_INCOMPLETE},
      {"5\r\nhel", HTTP_CHUNKED_INCOMPLETE},
      {"65\r\n", HTTP_CHUNKED_TOO_LARGE},  /* 101 > max_total 100 */
      {"32\r\n" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n33\r\n", HTTP_CHUNKED_TOO_LARGE},
      {"1\r\na\r\n0\r\nBad\x01: x\r\n\r\n", HTTP_CHUNKED_ERROR},
      /* max_chunks 3: three data chunks pass, the fourth is refused */
      {"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n0\r\n\r\n", HTTP_CHUNKED_DONE},
      {"1\r\na\r\n1\r\nb\r\n1\r\nc\r\n1\r\nd\r\n", HTTP_CHUNKED_TOO_MANY},
  };
  for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
    size_t len = strlen(C[i].in);
    guard g = guard_place(C[i].in, len);
    http_chunked st = {.max_total = 100, .max_chunks = 3};
    size_t out, used;
    int r = http_chunked_decode(&st, g.data, len, &out, &used);
    if (r != C[i].r) fail_msg("chunked case %zu: got %d want %d", i, r, C[i].r);
    guard_free(&g);
  }
}

static void test_status_reason(void **s) {
  assert_string_equal(http_status_reason(413), "Content Too Large");
  assert_string_equal(http_status_reason(431), "Request Header Fields Too Large");
  assert_string_equal(http_status_reason(299), "Unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_request_table),
      cmocka_unit_test(test_request_headers_lookup),
      cmocka_unit_test(test_header_size_limit),
      cmocka_unit_test(test_response_table),
      cmocka_unit_test(test_chunked_whole_and_bytewise),
      cmocka_unit_test(test_chunked_errors),
      cmocka_unit_test(test_status_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
