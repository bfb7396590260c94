/* test_http_server.c: a real server and real clients over loopback.
 * Raw blocking sockets (with a receive timeout as a safety bound, never as a wait) drive
 * the protocol corner cases; the http_client on its own loop drives the load and
 * streaming tests. Every wait is on a condition with a bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "net/http.h"

#define BOUND_MS 20000  /* safety bound for every wait: a failure, never a pass */

/* ---- condition waiting -------------------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void notify(void) {
  pthread_mutex_lock(&mu);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

/* Waits until *flag >= want; false when the bound passes first. */
bool wait_for(_Atomic int *flag, int want) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += BOUND_MS / 1000;
  pthread_mutex_lock(&mu);
  int rc = 0;
  while (atomic_load(flag) < want && rc == 0) rc = pthread_cond_timedwait(&cv, &mu, &ts);
  bool ok = atomic_load(flag) >= want;
  pthread_mutex_unlock(&mu);
  return ok;
}

/* ---- server under test ---------------------------------------------------------------------- */

static http_server *srv;
static http_exchange *_Atomic parked;     /* /hang exchange held by the test */
static _Atomic int parked_count, cancel_count;
static pthread_t workers[64];
static _Atomic int nworkers;

static void on_cancel(void *arg) {
  atomic_fetch_add(&cancel_count, 1);
  notify();
}

static void *thread_answer(void *arg) {
  http_exchange *ex = arg;
  static const http_header h[] = {{"Content-Type", 12, "text/plain", 10}};
  http_respond(ex, 200, h, 1, "from thread", 11);
  return NULL;
}

static void *thread_stream(void *arg) {
  http_exchange *ex = arg;
  static const http_header h[] = {{"Content-Type", 12, "text/event-stream", 17}};
  http_stream_begin(ex, 200, h, 1);
  char ev[64];
  for (int i = 0; i < 5; i++) {
    int n = snprintf(ev, sizeof ev, "data: token%d\n\n", i);
    http_stream_write(ex, ev, (size_t)n);
  }
  http_stream_end(ex);
  return NULL;
}

bool wait_for(_Atomic int *flag, int want);

/* Streams up to 32 MiB as fast as it can, then waits until the client is reported gone. */
static void *thread_flood(void *arg) {
  http_exchange *ex = arg;
  char *chunk = malloc(1 << 20);
  memset(chunk, 'f', 1 << 20);
  http_stream_begin(ex, 200, NULL, 0);
  for (int i = 0; i < 32 && http_stream_write(ex, chunk, 1 << 20); i++) {}
  free(chunk);
  wait_for(&cancel_count, 1);
  http_stream_end(ex);
  return NULL;
}

static void spawn(void *(*fn)(void *), void *arg) {
  int i = atomic_fetch_add(&nworkers, 1);
  assert_true(i < 64);
  assert_int_equal(pthread_create(&workers[i], NULL, fn, arg), 0);
}

static void join_workers(void) {
  int n = atomic_exchange(&nworkers, 0);
  for (int i = 0; i < n; i++) pthread_join(workers[i], NULL);
}

static bool path_is(const http_request *r, const char *p) {
  return r->path_len == strlen(p) && memcmp(r->path, p, r->path_len) == 0;
}

static void free_body(void *p) { free(p); }

static void handler(http_exchange *ex, const http_request *req, void *user) {
  if (path_is(req, "/hello")) {
    http_respond(ex, 200, NULL, 0, "hello", 5);
  } else if (path_is(req, "/echo")) {
    size_t n;
    const char *id = http_request_header(req, "X-Id", &n);
    http_header h[1] = {{"X-Id", 4, id ? id : "", id ? n : 0}};
    http_respond(ex, 200, h, 1, req->body, req->body_len);
  } else if (path_is(req, "/owned")) {
    char *b = malloc(100000);
    for (int i = 0; i < 100000; i++) b[i] = (char)('a' + i % 26);
    http_respond_owned(ex, 200, NULL, 0, b, 100000, free_body);
  } else if (path_is(req, "/nocontent")) {
    http_respond(ex, 204, NULL, 0, "ignored", 7);  /* a 204 never carries a body */
  } else if (path_is(req, "/thread")) {
    spawn(thread_answer, ex);
  } else if (path_is(req, "/stream")) {
    spawn(thread_stream, ex);
  } else if (path_is(req, "/flood")) {
    http_exchange_set_cancel(ex, on_cancel, NULL);
    spawn(thread_flood, ex);
  } else if (path_is(req, "/hang")) {
    http_exchange_set_cancel(ex, on_cancel, NULL);
    atomic_store(&parked, ex);
    atomic_fetch_add(&parked_count, 1);
    notify();
  } else {
    http_respond(ex, 404, NULL, 0, "{\"error\":\"not found\"}", 21);
  }
}

static int setup(void **s) {
  http_server_opts o = {.host = "127.0.0.1", .port = 0, .io_threads = 2,
                        .max_body_bytes = 1024, .header_timeout_ms = 5000,
                        .body_timeout_ms = 5000, .idle_keepalive_ms = 5000};
  cinfer_status *st = http_server_create(&o, handler, NULL, &srv);
  if (st) {
    fprintf(stderr, "%s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return -1;
  }
  atomic_store(&parked_count, 0);
  atomic_store(&cancel_count, 0);
  return 0;
}

static int teardown(void **s) {
  http_server_destroy(srv);
  srv = NULL;
  join_workers();
  return 0;
}

/* ---- raw socket helpers --------------------------------------------------------------------- */

static int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct timeval tv = {.tv_sec = BOUND_MS / 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    assert_true(w > 0);
    p += w;
    n -= (size_t)w;
  }
}
#define SEND(fd, lit) send_all((fd), (lit), strlen(lit))

typedef struct raw_resp {
  int status;
  bool keep_alive, chunked;
  char head[2048];
  char body[200000];
  size_t body_len;
} raw_resp;

/* Per-connection read buffer so pipelined responses are split correctly. */
typedef struct rconn {
  int fd;
  char buf[300000];
  size_t len;
} rconn;

/* Reads one response (Content-Length, chunked or close-delimited body). False on EOF
 * before a complete head, or timeout. */
static bool read_response(rconn *c, raw_resp *r, bool head_req) {
  http_limits lim = {16384, 100, SIZE_MAX};
  http_header h[100];
  http_response resp;
  http_parse_error err;
  for (;;) {
    int pr = http_parse_response(c->buf, c->len, 0, &lim, head_req, h, 100, &resp, &err);
    if (pr == HTTP_PARSE_OK) break;
    assert_int_equal(pr, HTTP_PARSE_INCOMPLETE);
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n <= 0) return false;
    c->len += (size_t)n;
  }
  r->status = resp.status;
  r->keep_alive = resp.keep_alive;
  r->chunked = resp.body_kind == HTTP_BODY_CHUNKED;
  size_t hl = resp.head_len < sizeof r->head - 1 ? resp.head_len : sizeof r->head - 1;
  memcpy(r->head, c->buf, hl);
  r->head[hl] = 0;
  size_t pos = resp.head_len;
  r->body_len = 0;
  http_chunked ck = {0};
  for (;;) {
    size_t avail = c->len - pos;
    if (resp.body_kind == HTTP_BODY_NONE) break;
    if (resp.body_kind == HTTP_BODY_LENGTH && avail >= resp.content_length) {
      memcpy(r->body, c->buf + pos, resp.content_length);
      r->body_len = resp.content_length;
      pos += resp.content_length;
      break;
    }
    if (resp.body_kind == HTTP_BODY_CHUNKED) {
      size_t out, used;
      int cr = http_chunked_decode(&ck, c->buf + pos, avail, &out, &used);
      assert_true(cr == HTTP_CHUNKED_DONE || cr == HTTP_CHUNKED_INCOMPLETE);
      memcpy(r->body + r->body_len, c->buf + pos, out);
      r->body_len += out;
      memmove(c->buf + pos, c->buf + pos + used, c->len - pos - used);
      c->len -= used;
      if (cr == HTTP_CHUNKED_DONE) break;
    }
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
    if (n == 0 && resp.body_kind == HTTP_BODY_UNTIL_CLOSE) {
      memcpy(r->body, c->buf + pos, avail);
      r->body_len = avail;
      pos += avail;
      break;
    }
    if (n <= 0) return false;
    c->len += (size_t)n;
  }
  memmove(c->buf, c->buf + pos, c->len - pos);
  c->len -= pos;
  return true;
}

static bool peer_closed(int fd) {
  char b[256];
  for (;;) {
    ssize_t n = recv(fd, b, sizeof b, 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

static rconn *rconn_open(void) {
  rconn *c = calloc(1, sizeof *c);
  c->fd = connect_to(http_server_port(srv));
  assert_true(c->fd >= 0);
  return c;
}

static void rconn_close(rconn *c) {
  close(c->fd);
  free(c);
}

/* ---- tests: protocol over raw sockets ----------------------------------------------------- */

static void test_keepalive_and_pipelining(void **s) {
  rconn *c = rconn_open();
  raw_resp *r = malloc(sizeof *r);
  SEND(c->fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_true(r->keep_alive);
  assert_int_equal(r->body_len, 5);
  assert_memory_equal(r->body, "hello", 5);
  assert_non_null(strstr(r->head, "Date: "));
  /* three pipelined requests in one segment, incl. a body and a request answered from
   * another thread: responses must come back in order */
  SEND(c->fd,
       "POST /echo HTTP/1.1\r\nHost: t\r\nX-Id: 1\r\nContent-Length: 3\r\n\r\nabc"
       "GET /thread HTTP/1.1\r\nHost: t\r\n\r\n"
       "POST /echo HTTP/1.1\r\nHost: t\r\nX-Id: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
       "2\r\nxy\r\n3\r\nzzz\r\n0\r\n\r\n"
       "HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_non_null(strstr(r->head, "X-Id: 1\r\n"));
  assert_int_equal(r->body_len, 3);
  assert_memory_equal(r->body, "abc", 3);
  assert_true(read_response(c, r, false));
  assert_int_equal(r->body_len, 11);
  assert_memory_equal(r->body, "from thread", 11);
  assert_true(read_response(c, r, false));
  assert_non_null(strstr(r->head, "X-Id: 3\r\n"));
  assert_int_equal(r->body_len, 5);
  assert_memory_equal(r->body, "xyzzz", 5);
  assert_true(read_response(c, r, true));
  assert_int_equal(r->status, 200);
  assert_non_null(strstr(r->head, "Content-Length: 5\r\n"));
  assert_int_equal(r->body_len, 0);
  /* the HEAD response carried no body: a following request parses cleanly */
  SEND(c->fd, "GET /owned HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->body_len, 100000);
  for (int i = 0; i < 100000; i++)
    if (r->body[i] != (char)('a' + i % 26)) fail_msg("owned body byte %d", i);
  assert_true(read_response(c, r, false));
  assert_memory_equal(r->body, "hello", 5);
  /* 204: body bytes given by the handler are not sent; the next response parses */
  SEND(c->fd, "GET /nocontent HTTP/1.1\r\nHost: t\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 204);
  assert_null(strstr(r->head, "Content-Length"));
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_memory_equal(r->body, "hello", 5);
  /* Connection: close is honoured */
  SEND(c->fd, "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_false(r->keep_alive);
  assert_true(peer_closed(c->fd));
  rconn_close(c);
  free(r);
}

static void test_byte_by_byte(void **s) {
  /* The server must resume parsing across arbitrarily small reads (head and chunked body). */
  rconn *c = rconn_open();
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char *req = "POST /echo?q=1 HTTP/1.1\r\nHost: t\r\nX-Id: bb\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n4;x=y\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n";
  for (size_t i = 0; req[i]; i++) send_all(c->fd, req + i, 1);
  raw_resp *r = malloc(sizeof *r);
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_non_null(strstr(r->head, "X-Id: bb\r\n"));
  assert_int_equal(r->body_len, 9);
  assert_memory_equal(r->body, "wikipedia", 9);
  rconn_close(c);
  free(r);
}

static void test_http10(void **s) {
  rconn *c = rconn_open();
  raw_resp *r = malloc(sizeof *r);
  SEND(c->fd, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_non_null(strstr(r->head, "Connection: keep-alive\r\n"));
  /* 1.0 streaming: close-delimited, no chunked framing */
  SEND(c->fd, "GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_false(r->chunked);
  r->body[r->body_len] = 0;
  assert_non_null(strstr(r->body, "data: token0\n\ndata: token1"));
  assert_non_null(strstr(r->body, "data: token4\n\n"));
  rconn_close(c);
  /* plain 1.0: closed after the answer */
  c = rconn_open();
  SEND(c->fd, "GET /hello HTTP/1.0\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_false(r->keep_alive);
  assert_true(peer_closed(c->fd));
  rconn_close(c);
  free(r);
}

typedef struct bad_case {
  const char *req;
  int status;
  const char *msg;
} bad_case;

static void test_bad_requests(void **s) {
  static char big[20000];
  memcpy(big, "GET / HTTP/1.1\r\nHost: t\r\nX: ", 28);
  memset(big + 28, 'a', sizeof big - 33);
  memcpy(big + sizeof big - 5, "\r\n\r\n", 5);
  const bad_case C[] = {
      {"GET / HTTP/1.1\r\n\r\n", 400, "missing Host header"},
      {"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400, "folding"},
      {"GET / HTTP/3.0\r\nHost: a\r\n\r\n", 505, "version"},
      {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding"},
      {"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n", 413, "Content-Length"},
      {"POST / HTTP/1.1\r\nHost: a\r\nExpect: x\r\nContent-Length: 1\r\n\r\n", 417, "Expect"},
      {"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "chunked"},
      {big, 431, "too large"},
  };
  raw_resp *r = malloc(sizeof *r);
  for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
    rconn *c = rconn_open();
    send_all(c->fd, C[i].req, strlen(C[i].req));
    assert_true(read_response(c, r, false));
    if (r->status != C[i].status) fail_msg("bad case %zu: status %d", i, r->status);
    assert_false(r->keep_alive);
    r->body[r->body_len] = 0;
    if (!strstr(r->body, C[i].msg)) fail_msg("bad case %zu: body '%s'", i, r->body);
    assert_true(peer_closed(c->fd));
    rconn_close(c);
  }
  http_server_stats st;
  http_server_get_stats(srv, &st);
  assert_int_equal(st.err_400, 3);
  assert_int_equal(st.err_505, 1);
  assert_int_equal(st.err_501, 1);
  assert_int_equal(st.err_413, 1);
  assert_int_equal(st.err_417, 1);
  assert_int_equal(st.err_431, 1);
  free(r);
}

static void test_body_too_large(void **s) {
  raw_resp *r = malloc(sizeof *r);
  /* declared too large, body sent anyway: the 413 still arrives (lingering close) */
  rconn *c = rconn_open();
  char body[4096];
  memset(body, 'x', sizeof body);
  SEND(c->fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4096\r\n\r\n");
  send_all(c->fd, body, sizeof body);
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 413);
  rconn_close(c);
  /* chunked body that grows past the limit while being read */
  c = rconn_open();
  SEND(c->fd, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 3; i++) {
    SEND(c->fd, "200\r\n");
    send_all(c->fd, body, 0x200);
    SEND(c->fd, "\r\n");
  }
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 413);
  rconn_close(c);
  /* exactly the limit is accepted */
  c = rconn_open();
  SEND(c->fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n");
  send_all(c->fd, body, 1024);
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_int_equal(r->body_len, 1024);
  rconn_close(c);
  free(r);
}

static void test_expect_continue(void **s) {
  rconn *c = rconn_open();
  raw_resp *r = malloc(sizeof *r);
  SEND(c->fd, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 100);
  SEND(c->fd, "ping");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_memory_equal(r->body, "ping", 4);
  /* with the limit exceeded there is no 100, only 413 */
  SEND(c->fd, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 413);
  rconn_close(c);
  free(r);
}

static void test_slow_client_timeouts(void **s) {
  /* a server of its own with short timeouts (the shared one is lenient so that a loaded
   * test machine cannot turn the other tests into timeouts) */
  http_server *fast;
  http_server_opts o = {.host = "127.0.0.1", .io_threads = 1, .header_timeout_ms = 200,
                        .body_timeout_ms = 200};
  assert_null(http_server_create(&o, handler, NULL, &fast));
  http_server *saved = srv;
  srv = fast;
  raw_resp *r = malloc(sizeof *r);
  /* head never completes */
  rconn *c = rconn_open();
  SEND(c->fd, "GET /hello HTTP/1.1\r\nHo");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 408);
  assert_true(peer_closed(c->fd));
  rconn_close(c);
  /* body stalls */
  c = rconn_open();
  SEND(c->fd, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 408);
  r->body[r->body_len] = 0;
  assert_non_null(strstr(r->body, "body"));
  assert_true(peer_closed(c->fd));
  rconn_close(c);
  http_server_stats st;
  http_server_get_stats(srv, &st);
  assert_int_equal(st.err_408, 2);
  /* a reader that stops reading a stream: closed after body_timeout_ms without progress,
   * and the producer learns it through the cancel callback and http_stream_write */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  struct timeval tv = {.tv_sec = BOUND_MS / 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(fast))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  SEND(fd, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(wait_for(&cancel_count, 1));
  size_t total = 0;
  char *sink = malloc(1 << 16);
  for (;;) {
    ssize_t n = recv(fd, sink, 1 << 16, 0);
    if (n <= 0) break;
    total += (size_t)n;
  }
  free(sink);
  close(fd);
  assert_true(total > 0 && total < (32u << 20));  /* truncated: the server gave up */
  free(r);
  srv = saved;
  http_server_destroy(fast);
}

static void test_cancel_on_disconnect(void **s) {
  rconn *c = rconn_open();
  SEND(c->fd, "GET /hang HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(wait_for(&parked_count, 1));
  close(c->fd);
  free(c);
  assert_true(wait_for(&cancel_count, 1));
  /* answering the dead exchange from another thread is safe and dropped */
  http_exchange *ex = atomic_exchange(&parked, NULL);
  http_respond(ex, 200, NULL, 0, "late", 4);
  http_server_stats st;
  http_server_get_stats(srv, &st);
  assert_int_equal(st.cancelled, 1);
  /* a streaming exchange cancelled mid-stream: writes report the client gone */
  c = rconn_open();
  SEND(c->fd, "GET /hang HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(wait_for(&parked_count, 2));
  ex = atomic_exchange(&parked, NULL);
  http_stream_begin(ex, 200, NULL, 0);
  assert_true(http_stream_write(ex, "data: a\n\n", 9));
  raw_resp *r = malloc(sizeof *r);
  char b[64];
  ssize_t n = recv(c->fd, b, sizeof b, MSG_PEEK);  /* head arrived */
  assert_true(n > 0);
  close(c->fd);
  free(c);
  assert_true(wait_for(&cancel_count, 2));
  assert_false(http_stream_write(ex, "data: b\n\n", 9));
  http_stream_end(ex);
  /* the server keeps working */
  c = rconn_open();
  SEND(c->fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  rconn_close(c);
  free(r);
}

/* ---- tests: http_client ----------------------------------------------------------------------- */

typedef struct load {
  net_loop *loop;
  http_client *clients[16];
  int remaining[16];
  _Atomic int ok, failed, done_clients;
  const char *req;
  size_t req_len;
  size_t body_bytes;
} load;

typedef struct client_ctx {
  load *l;
  int i;
} client_ctx;

static void load_body(void *u, const char *d, size_t n) {
  client_ctx *cx = u;
  cx->l->body_bytes += n;
  if (n > 5 || memcmp(d, "hello", n) != 0) atomic_fetch_add(&cx->l->failed, 1);
}

static void load_done(void *u, http_client_error err, const char *msg) {
  client_ctx *cx = u;
  load *l = cx->l;
  if (err) {
    atomic_fetch_add(&l->failed, 1);
    fprintf(stderr, "client %d: %s\n", cx->i, msg);
  } else {
    atomic_fetch_add(&l->ok, 1);
  }
  if (--l->remaining[cx->i] > 0 && !err) {
    http_client_send(l->clients[cx->i], l->req, l->req_len, false);
  } else {
    atomic_fetch_add(&l->done_clients, 1);
    notify();
  }
}

static void load_start(void *arg) {
  load *l = arg;
  static client_ctx cx[16];
  static const http_client_callbacks cb = {.on_body = load_body, .on_done = load_done};
  http_client_opts o = {.host = "127.0.0.1", .port = http_server_port(srv)};
  for (int i = 0; i < 16; i++) {
    cx[i] = (client_ctx){l, i};
    cinfer_status *st = http_client_create(l->loop, &o, &cb, &cx[i], &l->clients[i]);
    assert_null(st);
    http_client_send(l->clients[i], l->req, l->req_len, false);
  }
}

static void load_stop(void *arg) {
  load *l = arg;
  for (int i = 0; i < 16; i++) http_client_destroy(l->clients[i]);
  atomic_fetch_add(&l->done_clients, 1);
  notify();
}

static void test_1000_requests_16_connections(void **s) {
  load *l = calloc(1, sizeof *l);
  assert_null(loop_create(&l->loop));
  assert_null(loop_start_thread(l->loop, "test-client"));
  l->req = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
  l->req_len = strlen(l->req);
  for (int i = 0; i < 16; i++) l->remaining[i] = 1000 / 16 + (i < 1000 % 16);
  http_server_stats before;
  http_server_get_stats(srv, &before);
  assert_true(loop_post(l->loop, load_start, l));
  assert_true(wait_for(&l->done_clients, 16));
  assert_int_equal(atomic_load(&l->ok), 1000);
  assert_int_equal(atomic_load(&l->failed), 0);
  assert_int_equal(l->body_bytes, 5000);
  http_server_stats st;
  http_server_get_stats(srv, &st);
  assert_int_equal(st.requests - before.requests, 1000);
  assert_int_equal(st.connections_accepted - before.connections_accepted, 16);  /* keep-alive */
  assert_true(loop_post(l->loop, load_stop, l));
  assert_true(wait_for(&l->done_clients, 17));
  loop_join(l->loop);
  loop_destroy(l->loop);
  free(l);
}

typedef struct one {
  net_loop *loop;
  http_client *c;
  http_client_opts o;
  const char *req;
  bool head_req;
  _Atomic int done;
  http_client_error err;
  int status;
  int body_calls;
  char body[4096];
  size_t body_len;
  bool chunked;
} one;

static void one_head(void *u, const http_response *r) {
  one *x = u;
  x->status = r->status;
  x->chunked = r->body_kind == HTTP_BODY_CHUNKED;
}
static void one_body(void *u, const char *d, size_t n) {
  one *x = u;
  if (x->body_len + n >= sizeof x->body) n = sizeof x->body - 1 - x->body_len;
  memcpy(x->body + x->body_len, d, n);
  x->body_len += n;
  x->body_calls++;
}
static void one_done(void *u, http_client_error err, const char *msg) {
  one *x = u;
  x->err = err;
  atomic_fetch_add(&x->done, 1);
  notify();
}
static void one_send(void *arg) {
  one *x = arg;
  static const http_client_callbacks cb = {one_head, one_body, one_done};
  if (!x->c) assert_null(http_client_create(x->loop, &x->o, &cb, x, &x->c));
  x->body_len = 0;
  x->status = 0;
  assert_true(http_client_send(x->c, x->req, strlen(x->req), x->head_req));
}
static void one_destroy(void *arg) {
  one *x = arg;
  http_client_destroy(x->c);
  x->c = NULL;
  atomic_fetch_add(&x->done, 1);
  notify();
}

/* Runs one request on a fresh loop thread; returns the struct for inspection. */
static one *client_once(uint16_t port, const char *req, int response_timeout_ms) {
  one *x = calloc(1, sizeof *x);
  assert_null(loop_create(&x->loop));
  assert_null(loop_start_thread(x->loop, "test-one"));
  x->o = (http_client_opts){.host = "127.0.0.1", .port = port,
                            .response_timeout_ms = response_timeout_ms,
                            .connect_timeout_ms = 500};
  x->req = req;
  assert_true(loop_post(x->loop, one_send, x));
  assert_true(wait_for(&x->done, 1));
  return x;
}
static void one_free(one *x) {
  int d = atomic_load(&x->done);
  assert_true(loop_post(x->loop, one_destroy, x));
  assert_true(wait_for(&x->done, d + 1));
  loop_join(x->loop);
  loop_destroy(x->loop);
  free(x);
}

static void test_client_streaming(void **s) {
  one *x = client_once(http_server_port(srv), "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n", 5000);
  assert_int_equal(x->err, HTTP_CLIENT_OK);
  assert_int_equal(x->status, 200);
  assert_true(x->chunked);
  x->body[x->body_len] = 0;
  assert_string_equal(x->body, "data: token0\n\ndata: token1\n\ndata: token2\n\n"
                               "data: token3\n\ndata: token4\n\n");
  assert_true(x->body_calls >= 1);
  one_free(x);
}

/* A scripted peer for client error kinds: accepts one connection and then acts. */
typedef struct peer {
  int lfd;
  uint16_t port;
  int mode;  /* 0 close at once, 1 send garbage, 2 stay silent until told, 3 close-delimited */
  pthread_t th;
  _Atomic int release;
} peer;

static void *peer_main(void *arg) {
  peer *p = arg;
  int fd = accept(p->lfd, NULL, NULL);
  if (fd < 0) return NULL;
  char b[1024];
  if (p->mode != 0) (void)!recv(fd, b, sizeof b, 0);
  if (p->mode == 1) (void)!send(fd, "HTTP/1.1 2x0 Nope\r\n\r\n", 21, MSG_NOSIGNAL);
  if (p->mode == 3) (void)!send(fd, "HTTP/1.1 200 OK\r\n\r\nuntil close", 30, MSG_NOSIGNAL);
  if (p->mode == 2) wait_for(&p->release, 1);
  close(fd);
  return NULL;
}

static peer *peer_start(int mode) {
  peer *p = calloc(1, sizeof *p);
  p->mode = mode;
  p->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(p->lfd, 4), 0);
  socklen_t l = sizeof a;
  getsockname(p->lfd, (struct sockaddr *)&a, &l);
  p->port = ntohs(a.sin_port);
  assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
  return p;
}

static void peer_stop(peer *p) {
  atomic_store(&p->release, 1);
  notify();
  pthread_join(p->th, NULL);
  close(p->lfd);
  free(p);
}

static void test_client_errors(void **s) {
  /* refused: a port with no listener (bind then close to get a free one) */
  peer *p = peer_start(0);
  uint16_t dead_port;
  {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    dead_port = ntohs(a.sin_port);
    close(fd);
  }
  one *x = client_once(dead_port, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 2000);
  assert_int_equal(x->err, HTTP_CLIENT_CONNECT_REFUSED);
  one_free(x);
  /* closed before any byte */
  x = client_once(p->port, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 2000);
  assert_int_equal(x->err, HTTP_CLIENT_RESET_BEFORE_RESPONSE);
  one_free(x);
  peer_stop(p);
  /* malformed */
  p = peer_start(1);
  x = client_once(p->port, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 2000);
  assert_int_equal(x->err, HTTP_CLIENT_MALFORMED);
  one_free(x);
  peer_stop(p);
  /* timeout: the peer never answers */
  p = peer_start(2);
  x = client_once(p->port, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 200);
  assert_int_equal(x->err, HTTP_CLIENT_TIMEOUT);
  one_free(x);
  peer_stop(p);
  /* connect timeout: a listener whose accept queue (backlog 0) is already full drops SYNs */
  {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(lfd, 0), 0);
    socklen_t l = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &l);
    int filler = connect_to(ntohs(a.sin_port));
    assert_true(filler >= 0);
    x = client_once(ntohs(a.sin_port), "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 2000);
    /* client_once uses connect_timeout_ms = 500 */
    assert_int_equal(x->err, HTTP_CLIENT_CONNECT_TIMEOUT);
    one_free(x);
    close(filler);
    close(lfd);
  }
  /* close-delimited body completes OK at EOF */
  p = peer_start(3);
  x = client_once(p->port, "GET / HTTP/1.1\r\nHost: t\r\n\r\n", 2000);
  assert_int_equal(x->err, HTTP_CLIENT_OK);
  assert_int_equal(x->body_len, 11);
  assert_memory_equal(x->body, "until close", 11);
  one_free(x);
  peer_stop(p);
}

/* ---- graceful shutdown ------------------------------------------------------------------------ */

static _Atomic int shutdown_done;
static int shutdown_forced = -1;
static void *shutdown_thread(void *arg) {
  shutdown_forced = http_server_shutdown(srv, BOUND_MS);
  atomic_store(&shutdown_done, 1);
  notify();
  return NULL;
}

static void test_graceful_shutdown(void **s) {
  raw_resp *r = malloc(sizeof *r);
  rconn *idle = rconn_open();
  SEND(idle->fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(idle, r, false));
  rconn *busy = rconn_open();
  SEND(busy->fd, "GET /hang HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(wait_for(&parked_count, 1));
  atomic_store(&shutdown_done, 0);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, shutdown_thread, NULL), 0);
  /* the idle keep-alive connection is closed by the drain */
  assert_true(peer_closed(idle->fd));
  /* new connections are refused once accepting stopped (the idle close came after) */
  assert_int_equal(connect_to(http_server_port(srv)), -1);
  /* the in-flight request still gets its answer, with Connection: close */
  http_exchange *ex = atomic_exchange(&parked, NULL);
  http_respond(ex, 200, NULL, 0, "bye", 3);
  assert_true(read_response(busy, r, false));
  assert_int_equal(r->status, 200);
  assert_false(r->keep_alive);
  assert_memory_equal(r->body, "bye", 3);
  assert_true(peer_closed(busy->fd));
  rconn_close(idle);
  rconn_close(busy);
  assert_true(wait_for(&shutdown_done, 1));
  pthread_join(th, NULL);
  assert_int_equal(shutdown_forced, 0);
  assert_int_equal(atomic_load(&cancel_count), 0);
  free(r);
}

/* ---- a reverse proxy in miniature: server + client on the same loop ---------------------- */

typedef struct proxied {
  http_exchange *ex;
  http_client *c;
  char req[256];
} proxied;

static uint16_t upstream_port;

static void px_head(void *u, const http_response *r) {
  proxied *p = u;
  size_t n;
  const char *ct = http_find_header(r->headers, r->num_headers, "content-type", &n);
  http_header h[1] = {{"Content-Type", 12, ct ? ct : "text/plain", ct ? n : 10}};
  http_stream_begin(p->ex, r->status, h, 1);
}
static void px_body(void *u, const char *d, size_t n) {
  proxied *p = u;
  http_stream_write(p->ex, d, n);  /* forwarded as it arrives */
}
static void px_done(void *u, http_client_error err, const char *msg) {
  proxied *p = u;
  if (err == HTTP_CLIENT_OK) http_stream_end(p->ex);
  else http_respond(p->ex, 502, NULL, 0, msg, strlen(msg));
  http_client_destroy(p->c);  /* deferred until this callback returns */
  free(p);
}

static void proxy_handler(http_exchange *ex, const http_request *req, void *user) {
  static const http_client_callbacks cb = {px_head, px_body, px_done};
  proxied *p = calloc(1, sizeof *p);
  p->ex = ex;
  int n = snprintf(p->req, sizeof p->req, "GET %.*s HTTP/1.1\r\nHost: upstream\r\n\r\n",
                   (int)req->path_len, req->path);
  http_client_opts o = {.host = "127.0.0.1", .port = upstream_port};
  /* the handler runs on the exchange's loop: the upstream connection lives there too */
  assert_null(http_client_create(http_exchange_loop(ex), &o, &cb, p, &p->c));
  http_client_send(p->c, p->req, (size_t)n, false);
}

static void test_proxy_streams_through(void **s) {
  upstream_port = http_server_port(srv);
  http_server *proxy;
  http_server_opts o = {.host = "127.0.0.1", .io_threads = 1};
  assert_null(http_server_create(&o, proxy_handler, NULL, &proxy));
  http_server *saved = srv;
  srv = proxy;
  rconn *c = rconn_open();
  raw_resp *r = malloc(sizeof *r);
  SEND(c->fd, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\nGET /echo HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(c, r, false));
  assert_int_equal(r->status, 200);
  assert_true(r->chunked);
  assert_non_null(strstr(r->head, "Content-Type: text/event-stream\r\n"));
  r->body[r->body_len] = 0;
  assert_string_equal(r->body, "data: token0\n\ndata: token1\n\ndata: token2\n\n"
                               "data: token3\n\ndata: token4\n\n");
  assert_true(read_response(c, r, false));  /* pipelined second request, empty echo */
  assert_int_equal(r->status, 200);
  assert_int_equal(r->body_len, 0);
  rconn_close(c);
  free(r);
  srv = saved;
  http_server_destroy(proxy);
}

/* ---- limits on a server with tiny settings -------------------------------------------------- */

static void test_idle_timeout_and_max_connections(void **s) {
  http_server *small;
  /* idle long enough that neither connection can expire before the third one is tried */
  http_server_opts o = {.host = "127.0.0.1", .io_threads = 1, .idle_keepalive_ms = 1000,
                        .max_connections = 2};
  assert_null(http_server_create(&o, handler, NULL, &small));
  http_server *saved = srv;
  srv = small;
  raw_resp *r = malloc(sizeof *r);
  rconn *a = rconn_open(), *b = rconn_open();
  SEND(a->fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(a, r, false));
  SEND(b->fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  assert_true(read_response(b, r, false));
  /* a third connection is over the limit: accepted by the kernel, closed by the server */
  rconn *c = rconn_open();
  assert_true(peer_closed(c->fd));
  rconn_close(c);
  /* both keep-alive connections are idle: closed after idle_keepalive_ms */
  assert_true(peer_closed(a->fd));
  assert_true(peer_closed(b->fd));
  http_server_stats st;
  http_server_get_stats(small, &st);
  assert_int_equal(st.connections_accepted, 2);
  assert_int_equal(st.connections_rejected, 1);
  assert_int_equal(st.requests, 2);
  rconn_close(a);
  rconn_close(b);
  free(r);
  srv = saved;
  http_server_destroy(small);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_keepalive_and_pipelining, setup, teardown),
      cmocka_unit_test_setup_teardown(test_byte_by_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(test_http10, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_body_too_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expect_continue, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slow_client_timeouts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancel_on_disconnect, setup, teardown),
      cmocka_unit_test_setup_teardown(test_1000_requests_16_connections, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_streaming, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_proxy_streams_through, setup, teardown),
      cmocka_unit_test_setup_teardown(test_graceful_shutdown, setup, teardown),
      cmocka_unit_test_setup_teardown(test_idle_timeout_and_max_connections, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
