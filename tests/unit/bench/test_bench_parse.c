/* test_bench_parse.c: the generator's HTTP response parser, SSE parser and JSON peeks, as
 * tables. Every response is fed whole, split at every offset, and byte by byte; every
 * input sits against a guard page so an over-read crashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "bench/bench.h"

/* ---- guard page: bytes placed so that the byte after them is unmapped ---- */
static char *guard_base;
static size_t guard_len;

static const char *guarded(const char *src, size_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  size_t need = ((n + (size_t)pg - 1) / (size_t)pg + 1) * (size_t)pg;
  if (guard_base) munmap(guard_base, guard_len);
  guard_base = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(guard_base != MAP_FAILED);
  guard_len = need;
  mprotect(guard_base + need - (size_t)pg, (size_t)pg, PROT_NONE);
  char *p = guard_base + need - (size_t)pg - n;
  memcpy(p, src, n);
  return p;
}

typedef struct {
  char body[4096];
  size_t len;
} sink;

static void on_body(void *ud, const char *p, size_t n) {
  sink *s = ud;
  assert_true(s->len + n <= sizeof s->body);
  memcpy(s->body + s->len, p, n);
  s->len += n;
}

typedef struct {
  const char *name;
  const char *in;
  int want_rc;           /* final: DONE or ERROR */
  int status;
  const char *body;
  bool chunked, close;
  size_t leftover;       /* bytes after the response (next response) */
  bool needs_eof;        /* body delimited by close */
  const char *err;       /* substring of the error */
} resp_case;

static const resp_case cases[] = {
    {"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 1, 200, "hello"},
    {"zero length", "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 1, 200, ""},
    {"404 with body", "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnop", 1, 404, "nop"},
    {"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n",
     1, 200, "hello, world", true},
    {"chunked uppercase hex + trailer",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n", 1, 200,
     "0123456789", true},
    {"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 1, 200,
     "ok", false, true},
    {"http/1.0 default close", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 1, 200, "ok", false, true},
    {"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok", 1,
     200, "ok"},
    {"pipelined leftover", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1", 1, 200, "ok", false,
     false, 8},
    {"204 no body", "HTTP/1.1 204 No Content\r\n\r\n", 1, 204, ""},
    {"100 continue skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
     1, 200, "x"},
    {"bare LF lines", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", 1, 200, "ok"},
    {"until close", "HTTP/1.1 200 OK\r\n\r\nstream of bytes", 1, 200, "stream of bytes", false, false, 0,
     true},
    {"bad status line", "HTTP/2 200 OK\r\n\r\n", -1, 0, NULL, false, false, 0, false, "status line"},
    {"bad status code", "HTTP/1.1 2x0 OK\r\n\r\n", -1, 0, NULL, false, false, 0, false, "status line"},
    {"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n", -1, 0, NULL, false, false, 0,
     false, "Content-Length"},
    {"conflicting content-length", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", -1,
     0, NULL, false, false, 0, false, "conflicting"},
    {"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", -1, 0, NULL, false,
     false, 0, false, "chunk size"},
    {"huge chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", -1, 0,
     NULL, false, false, 0, false, "too large"},
    {"missing crlf after chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", -1, 0,
     NULL, false, false, 0, false, "CRLF"},
    {"unsupported transfer-encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", -1, 0, NULL,
     false, false, 0, false, "Transfer-Encoding"},
    {"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", -1, 0, NULL, false, false, 0,
     false, "closed"},
    {"truncated header", "HTTP/1.1 200 OK\r\nContent-Le", -1, 0, NULL, false, false, 0, false, "closed"},
    {"header line without colon", "HTTP/1.1 200 OK\r\nNoColonHere\r\n\r\n", -1, 0, NULL, false, false, 0,
     false, "header"},
};

/* Feeds `in` in pieces cut at the offsets in cuts[] (ascending, < n), the way the engine
 * does: unconsumed bytes stay at the front of the buffer. */
static int feed_pieces(const resp_case *c, const char *in, size_t n, const size_t *cuts, size_t ncuts,
                       bench_http_resp *r, sink *s, size_t *leftover) {
  char *buf = malloc(n + 1);
  size_t have = 0, pos = 0;
  int rc = BENCH_HTTP_MORE;
  bench_http_resp_init(r, false);
  memset(s, 0, sizeof *s);
  *leftover = 0;
  for (size_t k = 0; k <= ncuts && rc == BENCH_HTTP_MORE; k++) {
    size_t end = k < ncuts ? cuts[k] : n;
    memcpy(buf + have, in + pos, end - pos);
    have += end - pos;
    pos = end;
    const char *g = guarded(buf, have);
    size_t used;
    rc = bench_http_feed(r, g, have, &used, on_body, s, 1024);
    assert_true(used <= have);
    if (rc == BENCH_HTTP_DONE) *leftover = have - used + (n - pos);
    memmove(buf, buf + used, have - used);
    have -= used;
  }
  if (rc == BENCH_HTTP_MORE) rc = bench_http_eof(r);
  free(buf);
  (void)c;
  return rc;
}

static void check_case(const resp_case *c, int rc, const bench_http_resp *r, const sink *s,
                       size_t leftover, const char *how) {
  if (rc != c->want_rc) fail_msg("%s (%s): rc %d, want %d (%s)", c->name, how, rc, c->want_rc, r->error ? r->error : "");
  if (rc == BENCH_HTTP_ERROR) {
    assert_non_null(r->error);
    if (!strstr(r->error, c->err)) fail_msg("%s: error '%s' lacks '%s'", c->name, r->error, c->err);
    return;
  }
  assert_int_equal(r->status, c->status);
  assert_int_equal(s->len, strlen(c->body));
  assert_memory_equal(s->body, c->body, s->len);
  assert_int_equal(r->chunked, c->chunked);
  assert_int_equal(r->conn_close, c->close);
  assert_int_equal(leftover, c->leftover);
}

static void test_responses(void **st) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const resp_case *c = &cases[i];
    size_t n = strlen(c->in), left;
    bench_http_resp r;
    sink s;
    int rc = feed_pieces(c, c->in, n, NULL, 0, &r, &s, &left);
    check_case(c, rc, &r, &s, left, "whole");
    for (size_t cut = 1; cut < n; cut++) {
      rc = feed_pieces(c, c->in, n, &cut, 1, &r, &s, &left);
      check_case(c, rc, &r, &s, left, "split");
    }
    size_t *cuts = malloc(n * sizeof *cuts);
    for (size_t k = 0; k + 1 < n; k++) cuts[k] = k + 1;
    rc = feed_pieces(c, c->in, n, cuts, n ? n - 1 : 0, &r, &s, &left);
    check_case(c, rc, &r, &s, left, "bytewise");
    free(cuts);
  }
}

static void test_header_too_large(void **st) {
  char big[3000];
  int n = snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nX-Pad: ");
  memset(big + n, 'a', sizeof big - (size_t)n - 1);
  big[sizeof big - 1] = 0;
  bench_http_resp r;
  bench_http_resp_init(&r, false);
  size_t used;
  assert_int_equal(bench_http_feed(&r, big, strlen(big), &used, NULL, NULL, 1024), BENCH_HTTP_ERROR);
  assert_non_null(strstr(r.error, "too large"));
  /* HEAD: no body whatever Content-Length says */
  const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
  bench_http_resp_init(&r, true);
  assert_int_equal(bench_http_feed(&r, h, strlen(h), &used, NULL, NULL, 1024), BENCH_HTTP_DONE);
  assert_int_equal(used, strlen(h));
}

/* ---- SSE ---- */
typedef struct {
  char ev[8][256];
  int n;
} events;

static void on_event(void *ud, const char *d, size_t n) {
  events *e = ud;
  assert_true(e->n < 8 && n < 256);
  memcpy(e->ev[e->n], d, n);
  e->ev[e->n][n] = 0;
  e->n++;
}

static const struct {
  const char *in;
  int n;
  const char *ev[4];
} sse_cases[] = {
    {"data: {\"a\":1}\n\ndata: [DONE]\n\n", 2, {"{\"a\":1}", "[DONE]"}},
    {"data:x\r\n\r\ndata:y\r\n\r\n", 2, {"x", "y"}},
    {": keep-alive comment\nevent: message\nid: 3\ndata: one\ndata: two\n\n", 1, {"one\ntwo"}},
    {"data: a\r\rdata: b\r\r", 2, {"a", "b"}},
    {"data: unterminated", 0, {NULL}},
    {"\n\n\ndata: z\n\n", 1, {"z"}},
};

static void test_sse(void **st) {
  for (size_t i = 0; i < sizeof sse_cases / sizeof sse_cases[0]; i++) {
    size_t n = strlen(sse_cases[i].in);
    for (size_t step = 1; step <= n; step++) { /* every chunk size */
      bench_sse s;
      assert_null(bench_sse_init(&s, 128));
      events e = {0};
      for (size_t off = 0; off < n; off += step) {
        size_t k = off + step > n ? n - off : step;
        assert_true(bench_sse_feed(&s, guarded(sse_cases[i].in + off, k), k, on_event, &e));
      }
      assert_int_equal(e.n, sse_cases[i].n);
      for (int k = 0; k < e.n; k++) assert_string_equal(e.ev[k], sse_cases[i].ev[k]);
      bench_sse_free(&s);
    }
  }
  /* a line longer than the capacity fails instead of overflowing */
  bench_sse s;
  assert_null(bench_sse_init(&s, 16));
  events e = {0};
  assert_false(bench_sse_feed(&s, "data: 0123456789abcdefghij\n\n", 28, on_event, &e));
  assert_false(bench_sse_feed(&s, "data: x\n\n", 9, on_event, &e));
  bench_sse_reset(&s);
  assert_true(bench_sse_feed(&s, "data: x\n\n", 9, on_event, &e));
  assert_int_equal(e.n, 1);
  bench_sse_free(&s);
}

static void test_json_peek(void **st) {
  const char *u = "{\"choices\":[],\"usage\":{\"prompt_tokens\": 12,\"completion_tokens\":128}}";
  int64_t v = 0;
  assert_true(bench_json_peek_int(u, strlen(u), "completion_tokens", &v));
  assert_int_equal(v, 128);
  assert_true(bench_json_peek_int(u, strlen(u), "prompt_tokens", &v));
  assert_int_equal(v, 12);
  assert_false(bench_json_peek_int(u, strlen(u), "total_tokens", &v));
  const char *n = "{\"usage\":null,\"x\":\"completion_tokens\"}";
  assert_false(bench_json_peek_int(n, strlen(n), "completion_tokens", &v));
  const char *c1 = "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}";
  const char *c2 = "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}";
  const char *c3 = "{\"choices\":[{\"text\" : \" world\"}]}";
  assert_true(bench_json_peek_nonempty_string(c1, strlen(c1), "content"));
  assert_false(bench_json_peek_nonempty_string(c2, strlen(c2), "content"));
  assert_true(bench_json_peek_nonempty_string(c3, strlen(c3), "text"));
  /* truncated input never reads past n */
  const char *t = "{\"content\":";
  assert_false(bench_json_peek_nonempty_string(guarded(t, strlen(t)), strlen(t), "content"));
  const char *t2 = "{\"completion_tokens\":12";
  assert_true(bench_json_peek_int(guarded(t2, strlen(t2)), strlen(t2), "completion_tokens", &v));
  assert_int_equal(v, 12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_responses), cmocka_unit_test(test_header_too_large),
      cmocka_unit_test(test_sse), cmocka_unit_test(test_json_peek),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (guard_base) munmap(guard_base, guard_len);
  return rc;
}
