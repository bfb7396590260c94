/* http_client.c: non-blocking HTTP/1.1 client connection on a net_loop (load generator,
 * gateway upstreams, tests).
 *
 * States: no socket (fd -1) -> CONNECTING -> SENDING -> RECEIVING -> idle-connected
 * (keep-alive) or back to no socket. One request in flight per client. The read buffer is
 * reused across requests: a response head must fit in it (grown up to max_header_bytes
 * once), body bytes are handed to on_body and dropped, so nothing is allocated per request.
 * Errors are classified so a caller can decide on retries: nothing received yet
 * (RESET_BEFORE_RESPONSE) vs. a response cut short (RESET).
 *
 * Reentrancy: callbacks may call http_client_send (from on_done) or http_client_destroy;
 * `depth` defers the free until the outermost callback returns.
 */
#include "net/http.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum { CL_NONE, CL_CONNECTING, CL_HANDSHAKE, CL_SENDING, CL_RECEIVING, CL_IDLE };

#define CL_RBUF 16384

struct http_client {
  loop_io io;
  loop_timer timer;
  net_loop *loop;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  http_client_opts o;
  http_limits lim;
  http_client_callbacks cb;
  void *user;
  int fd;
  int state;
  bool busy, head_req, got_byte, have_head, resp_keep_alive;
  int depth;
  bool destroyed;
  const char *req;
  size_t req_len, req_sent;
  char *rbuf;
  size_t rlen, rcap, parse_prev;
  http_header *headers;
  http_response resp;
  uint64_t body_left;
  http_chunked ck;
  uint64_t deadline;
  SSL *ssl;              /* TLS connection (o.tls set), NULL otherwise */
  char errbuf[320];      /* the message of a TLS failure (valid during on_done) */
};

const char *http_client_error_name(http_client_error e) {
  switch (e) {
    case HTTP_CLIENT_OK: return "ok";
    case HTTP_CLIENT_CONNECT_REFUSED: return "connect refused";
    case HTTP_CLIENT_CONNECT_TIMEOUT: return "connect timeout";
    case HTTP_CLIENT_RESET_BEFORE_RESPONSE: return "connection closed before response";
    case HTTP_CLIENT_RESET: return "connection closed during response";
    case HTTP_CLIENT_TIMEOUT: return "response timeout";
    case HTTP_CLIENT_MALFORMED: return "malformed response";
    case HTTP_CLIENT_CANCELLED: return "cancelled";
    case HTTP_CLIENT_TLS: return "TLS handshake failed";
  }
  return "unknown";
}

static void cl_close_fd(http_client *c) {
  if (c->fd < 0) return;
  loop_io_del(c->loop, &c->io);
  SSL_free(c->ssl);
  c->ssl = NULL;
  close(c->fd);
  c->fd = -1;
  c->state = CL_NONE;
}

static void cl_arm(http_client *c, int ms) {
  c->deadline = loop_now_ms(c->loop) + (uint64_t)ms;
  if (!loop_timer_armed(&c->timer) || c->timer.deadline_ms > c->deadline)
    loop_timer_at(c->loop, &c->timer, c->deadline);
}

static void cl_done(http_client *c, http_client_error err, const char *msg) {
  if (!c->busy) return;
  c->busy = false;
  c->deadline = 0;
  loop_timer_cancel(c->loop, &c->timer);
  if (err != HTTP_CLIENT_OK || !c->resp_keep_alive) cl_close_fd(c);
  else {
    c->state = CL_IDLE;
    loop_io_set(c->loop, &c->io, LOOP_READ | LOOP_RDHUP);
  }
  c->rlen = 0;
  c->parse_prev = 0;
  if (c->cb.on_done) c->cb.on_done(c->user, err, msg ? msg : http_client_error_name(err));
}

static void cl_fail_io(http_client *c) {
  cl_done(c, c->got_byte ? HTTP_CLIENT_RESET : HTTP_CLIENT_RESET_BEFORE_RESPONSE, NULL);
}

/* read(2)/send(2) conventions over the plain socket or TLS */
static ssize_t cl_recv(http_client *c, void *buf, size_t n) {
  if (!c->ssl) return read(c->fd, buf, n);
  ERR_clear_error();
  int r = SSL_read(c->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
  if (r > 0) return r;
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return 0;
  errno = ECONNRESET;
  return -1;
}

static ssize_t cl_send(http_client *c, const void *p, size_t n) {
  if (!c->ssl) return send(c->fd, p, n, MSG_NOSIGNAL);
  ERR_clear_error();
  int w = SSL_write(c->ssl, p, n > INT_MAX ? INT_MAX : (int)n);
  if (w > 0) return w;
  int e = SSL_get_error(c->ssl, w);
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

static void cl_write(http_client *c);

/* Drives the client handshake (bounded by connect_timeout_ms); sends the request once it
 * is complete. A failure (wrong CA, expired or mismatched certificate, a plaintext peer)
 * ends the request with HTTP_CLIENT_TLS and the reason. */
static void cl_handshake(http_client *c) {
  ERR_clear_error();
  int r = SSL_do_handshake(c->ssl);
  if (r == 1) {
    c->state = CL_SENDING;
    cl_arm(c, c->o.response_timeout_ms);
    cl_write(c);
    return;
  }
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ) {
    loop_io_set(c->loop, &c->io, LOOP_READ | LOOP_RDHUP);
    return;
  }
  if (e == SSL_ERROR_WANT_WRITE) {
    loop_io_set(c->loop, &c->io, LOOP_WRITE | LOOP_RDHUP);
    return;
  }
  char eb[200];
  long v = SSL_get_verify_result(c->ssl);
  if (v != X509_V_OK)
    snprintf(c->errbuf, sizeof c->errbuf, "TLS handshake with %s:%u failed: certificate: %s",
             c->o.host, c->o.port, X509_verify_cert_error_string(v));
  else
    snprintf(c->errbuf, sizeof c->errbuf, "TLS handshake with %s:%u failed: %s", c->o.host,
             c->o.port, net_tls_last_error(eb, sizeof eb));
  cl_done(c, HTTP_CLIENT_TLS, c->errbuf);
}

/* The TCP connection is up: TLS handshake first, or send at once. */
static void cl_connected(http_client *c) {
  if (c->o.tls) {
    c->ssl = net_tls_new_ssl(c->o.tls, c->o.tls_name ? c->o.tls_name : c->o.host,
                             loop_now_ms(c->loop));
    if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) {
      snprintf(c->errbuf, sizeof c->errbuf, "TLS: out of memory");
      cl_done(c, HTTP_CLIENT_TLS, c->errbuf);
      return;
    }
    SSL_set_connect_state(c->ssl);
    c->state = CL_HANDSHAKE;
    cl_handshake(c);
    return;
  }
  c->state = CL_SENDING;
  cl_arm(c, c->o.response_timeout_ms);
  cl_write(c);
}

static void cl_write(http_client *c) {
  while (c->req_sent < c->req_len) {
    ssize_t w = cl_send(c, c->req + c->req_sent, c->req_len - c->req_sent);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        loop_io_set(c->loop, &c->io, LOOP_READ | LOOP_RDHUP | LOOP_WRITE);
        return;
      }
      cl_fail_io(c);
      return;
    }
    c->req_sent += (size_t)w;
    cl_arm(c, c->o.response_timeout_ms);
  }
  c->state = CL_RECEIVING;
  loop_io_set(c->loop, &c->io, LOOP_READ | LOOP_RDHUP);
}

/* Consumes rbuf[0..rlen): head then body. Returns after cl_done or when it needs more. */
static void cl_consume(http_client *c, bool eof) {
  size_t pos = 0;
  while (!c->have_head) {
    http_parse_error perr;
    http_parse_result r = http_parse_response(c->rbuf + pos, c->rlen - pos, c->parse_prev,
                                              &c->lim, c->head_req, c->headers,
                                              c->lim.max_headers, &c->resp, &perr);
    if (r == HTTP_PARSE_INCOMPLETE) {
      if (pos) {
        memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
        c->rlen -= pos;
      }
      c->parse_prev = c->rlen;
      if (eof) cl_fail_io(c);
      return;
    }
    if (r == HTTP_PARSE_ERROR) {
      cl_done(c, HTTP_CLIENT_MALFORMED, perr.message);
      return;
    }
    c->parse_prev = 0;
    if (c->resp.status >= 100 && c->resp.status < 200) {  /* interim: skip */
      pos += c->resp.head_len;
      continue;
    }
    c->have_head = true;
    c->resp_keep_alive = c->resp.keep_alive;
    c->body_left = c->resp.content_length;
    memset(&c->ck, 0, sizeof c->ck);
    if (c->cb.on_head) c->cb.on_head(c->user, &c->resp);
    if (c->destroyed || !c->busy) return;
    pos += c->resp.head_len;
  }
  char *p = c->rbuf + pos;
  size_t n = c->rlen - pos;
  c->rlen = 0;  /* everything below is consumed (body bytes are not kept) */
  switch (c->resp.body_kind) {
    case HTTP_BODY_NONE:
      if (n) c->resp_keep_alive = false;  /* unexpected bytes: do not reuse */
      cl_done(c, HTTP_CLIENT_OK, NULL);
      return;
    case HTTP_BODY_LENGTH: {
      size_t k = n < c->body_left ? n : (size_t)c->body_left;
      if (k && c->cb.on_body) c->cb.on_body(c->user, p, k);
      if (c->destroyed || !c->busy) return;
      c->body_left -= k;
      if (c->body_left == 0) {
        if (n > k) c->resp_keep_alive = false;
        cl_done(c, HTTP_CLIENT_OK, NULL);
      } else if (eof) {
        cl_fail_io(c);
      }
      return;
    }
    case HTTP_BODY_CHUNKED: {
      size_t out, used;
      http_chunked_result r = http_chunked_decode(&c->ck, p, n, &out, &used);
      if (out && c->cb.on_body) c->cb.on_body(c->user, p, out);
      if (c->destroyed || !c->busy) return;
      if (r == HTTP_CHUNKED_DONE) {
        if (used < n) c->resp_keep_alive = false;
        cl_done(c, HTTP_CLIENT_OK, NULL);
      } else if (r != HTTP_CHUNKED_INCOMPLETE) {
        cl_done(c, HTTP_CLIENT_MALFORMED, "malformed chunked body");
      } else if (eof) {
        cl_fail_io(c);
      }
      return;
    }
    case HTTP_BODY_UNTIL_CLOSE:
      if (n && c->cb.on_body) c->cb.on_body(c->user, p, n);
      if (c->destroyed || !c->busy) return;
      if (eof) cl_done(c, HTTP_CLIENT_OK, NULL);
      return;
  }
}

static void cl_read(http_client *c) {
  if (c->state == CL_IDLE || !c->busy) {
    /* idle keep-alive connection: the server closed it (or sent garbage) */
    char tmp[256];
    ssize_t r = cl_recv(c, tmp, sizeof tmp);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    cl_close_fd(c);
    return;
  }
  if (c->rlen == c->rcap) {
    size_t max = c->lim.max_header_bytes + 1;
    if (c->rcap >= max) {
      cl_done(c, HTTP_CLIENT_MALFORMED, "response head too large");
      return;
    }
    size_t cap = c->rcap * 2 < max ? c->rcap * 2 : max;
    char *nb = realloc(c->rbuf, cap);
    if (!nb) {
      cl_done(c, HTTP_CLIENT_MALFORMED, "out of memory for response head");
      return;
    }
    c->rbuf = nb;
    c->rcap = cap;
  }
  ssize_t r = cl_recv(c, c->rbuf + c->rlen, c->rcap - c->rlen);
  if (r < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    if (c->got_byte) cl_consume(c, true);  /* may complete a close-delimited body */
    else cl_fail_io(c);
    return;
  }
  if (r == 0) {
    if (!c->got_byte) cl_fail_io(c);
    else cl_consume(c, true);
    return;
  }
  c->got_byte = true;
  c->rlen += (size_t)r;
  cl_arm(c, c->o.response_timeout_ms);
  cl_consume(c, false);
}

static void cl_leave(http_client *c) {
  if (--c->depth == 0 && c->destroyed) {
    cl_close_fd(c);
    loop_timer_cancel(c->loop, &c->timer);
    free(c->rbuf);
    free(c->headers);
    free(c);
  }
}

static void cl_io(loop_io *io, uint32_t ev) {
  http_client *c = (http_client *)((char *)io - offsetof(http_client, io));
  c->depth++;
  if (c->state == CL_CONNECTING) {
    if (ev & (LOOP_WRITE | LOOP_ERROR | LOOP_HUP)) {
      int err = 0;
      socklen_t l = sizeof err;
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
      if (err || (ev & (LOOP_ERROR | LOOP_HUP))) {
        cl_done(c, HTTP_CLIENT_CONNECT_REFUSED, err ? strerror(err) : "connect failed");
      } else {
        cl_connected(c);
      }
    }
  } else if (c->state == CL_HANDSHAKE) {
    cl_handshake(c);
  } else {
    if ((ev & LOOP_WRITE) && c->state == CL_SENDING) cl_write(c);
    if (c->fd >= 0 && !c->destroyed && (ev & (LOOP_READ | LOOP_RDHUP | LOOP_HUP | LOOP_ERROR))) {
      cl_read(c);
      /* decrypted bytes left inside SSL: epoll will not report them */
      while (c->ssl && c->fd >= 0 && !c->destroyed && c->busy && SSL_pending(c->ssl) > 0)
        cl_read(c);
    }
  }
  cl_leave(c);
}

static void cl_timer(loop_timer *t) {
  http_client *c = (http_client *)((char *)t - offsetof(http_client, timer));
  if (!c->busy || !c->deadline) return;
  uint64_t now = loop_now_ms(c->loop);
  if (now < c->deadline) {
    loop_timer_at(c->loop, &c->timer, c->deadline);
    return;
  }
  c->depth++;
  cl_done(c, c->state == CL_CONNECTING || c->state == CL_HANDSHAKE ? HTTP_CLIENT_CONNECT_TIMEOUT
                                                                    : HTTP_CLIENT_TIMEOUT,
          c->state == CL_HANDSHAKE ? "TLS handshake timeout" : NULL);
  cl_leave(c);
}

cinfer_status *http_client_create(net_loop *loop, const http_client_opts *opts,
                                  const http_client_callbacks *cb, void *user,
                                  http_client **out) {
  *out = NULL;
  if (!opts->host || !*opts->host) return cinfer_status_new(CINFER_INVALID_ARG, "http client: no host");
  http_client *c = calloc(1, sizeof *c);
  if (!c) return cinfer_status_oom("http client");
  c->o = *opts;
  if (c->o.connect_timeout_ms <= 0) c->o.connect_timeout_ms = 5000;
  if (c->o.response_timeout_ms <= 0) c->o.response_timeout_ms = 60000;
  if (!c->o.max_header_bytes) c->o.max_header_bytes = 64u << 10;
  if (!c->o.max_headers) c->o.max_headers = 100;
  if (c->o.max_headers > 10000) c->o.max_headers = 10000;
  c->lim = (http_limits){c->o.max_header_bytes, c->o.max_headers, UINT64_MAX > SIZE_MAX ? SIZE_MAX : (size_t)UINT64_MAX};
  char port[8];
  snprintf(port, sizeof port, "%u", opts->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int e = getaddrinfo(opts->host, port, &hints, &ai);
  if (e || !ai) {
    free(c);
    return cinfer_status_new(CINFER_INVALID_ARG, "http client: host '%s': %s", opts->host,
                             e ? gai_strerror(e) : "no address");
  }
  memcpy(&c->addr, ai->ai_addr, ai->ai_addrlen);
  c->addrlen = ai->ai_addrlen;
  freeaddrinfo(ai);
  c->rcap = CL_RBUF < c->o.max_header_bytes + 1 ? CL_RBUF : c->o.max_header_bytes + 1;
  c->rbuf = malloc(c->rcap);
  c->headers = malloc(c->o.max_headers * sizeof *c->headers);
  if (!c->rbuf || !c->headers) {
    free(c->rbuf);
    free(c->headers);
    free(c);
    return cinfer_status_oom("http client");
  }
  if (cb) c->cb = *cb;
  c->user = user;
  c->loop = loop;
  c->fd = -1;
  c->io.fn = cl_io;
  c->timer.fn = cl_timer;
  *out = c;
  return NULL;
}

bool http_client_send(http_client *c, const void *req, size_t len, bool head_request) {
  if (c->busy || c->destroyed) return false;
  c->busy = true;
  c->req = req;
  c->req_len = len;
  c->req_sent = 0;
  c->head_req = head_request;
  c->got_byte = c->have_head = false;
  c->resp_keep_alive = false;
  c->rlen = c->parse_prev = 0;
  c->depth++;
  if (c->fd < 0) {
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      cl_done(c, HTTP_CLIENT_CONNECT_REFUSED, "socket() failed");
      cl_leave(c);
      return true;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    c->io.fd = fd;
    int r = connect(fd, (struct sockaddr *)&c->addr, c->addrlen);
    cinfer_status *st = loop_io_add(c->loop, &c->io, LOOP_WRITE | LOOP_READ | LOOP_RDHUP);
    if (st) {
      cinfer_status_free(st);
      close(fd);
      c->fd = -1;
      cl_done(c, HTTP_CLIENT_CONNECT_REFUSED, "epoll registration failed");
      cl_leave(c);
      return true;
    }
    if (r != 0 && errno != EINPROGRESS) {
      int err = errno;
      cl_done(c, HTTP_CLIENT_CONNECT_REFUSED, strerror(err));
      cl_leave(c);
      return true;
    }
    c->state = CL_CONNECTING;
    cl_arm(c, c->o.connect_timeout_ms);
    if (r == 0) cl_connected(c);  /* connected at once (loopback can do this) */
  } else {
    c->state = CL_SENDING;
    cl_arm(c, c->o.response_timeout_ms);
    cl_write(c);
  }
  cl_leave(c);
  return true;
}

bool http_client_busy(const http_client *c) { return c->busy; }
bool http_client_connected(const http_client *c) {
  return c->fd >= 0 && c->state != CL_CONNECTING && c->state != CL_HANDSHAKE;
}

void http_client_destroy(http_client *c) {
  if (!c || c->destroyed) return;
  c->depth++;
  cl_done(c, HTTP_CLIENT_CANCELLED, NULL);
  c->destroyed = true;
  cl_leave(c);
}
