/* http_server.c: HTTP/1.1 server on N epoll loops (one thread and one SO_REUSEPORT
 * listener each).
 *
 * Connection state machine (conn.state):
 *   C_HEAD    reading a request head (rbuf may hold 0..n bytes of it, or pipelined data)
 *   C_BODY    head parsed, reading the body (Content-Length or chunked, decoded in place)
 *   C_WAIT    request dispatched; its exchange is unanswered. The request view points into
 *             rbuf, so rbuf is never reallocated or compacted in this state; more bytes are
 *             read only into spare tail room (to notice a client that goes away)
 *   C_CLOSING an error or final response is queued; close (via C_LINGER) once flushed
 *   C_LINGER  write side shut down; discard input until EOF or a short deadline, so that
 *             unread request bytes do not turn our close into a RST that eats the answer
 * After the fd is closed, conn.fd == -1; the struct lives on while its exchange is
 * unanswered (a "zombie"), because another thread may still call http_respond on it.
 *
 * Exchange hand-off: answering calls (any thread) serialise bytes into ex.pending under
 * ex.mu; off the loop thread they post ex.task (at most one queued at a time) and the loop
 * moves the bytes to the connection's output (a buffer swap when the output is empty).
 * Responses are therefore written in request order: a pipelined request is not parsed
 * until the previous exchange is answered (its bytes wait in rbuf or the kernel).
 *
 * Hot path per request (synchronous handler): one read(), parse, handler, one writev();
 * no allocation once buffers have grown to their working size.
 */
#include "net/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "net/net_buf.h"

#define RBUF_INIT 16384
#define RBUF_KEEP (1u << 20)
#define OUT_KEEP (1u << 20)
#define OUT_HIGH_WATER (256u << 10)
#define LINGER_MS 2000

enum { C_HEAD, C_BODY, C_WAIT, C_CLOSING, C_LINGER };
enum { ANS_NONE = 0, ANS_STREAMING, ANS_FINAL };

typedef struct io_thread io_thread;
typedef struct conn conn;

struct http_exchange {
  conn *c;
  pthread_mutex_t mu;
  loop_task task;
  /* under mu */
  bool task_queued;
  bool gone;             /* client went away: drop further output */
  int answered;          /* ANS_* as seen by producers */
  bool final_queued;     /* final piece is in pending, not yet taken by the loop */
  bool broken;           /* out of memory while formatting: the stream is corrupt */
  net_buf pending;
  void *owned;
  size_t owned_len;
  void (*owned_free)(void *);
  /* loop thread only */
  bool active;           /* dispatched and not yet completed on the loop */
  bool cancel_fired;
  void (*cancel_cb)(void *);
  void *cancel_arg;
  /* snapshot of the request for formatting the response (set at dispatch) */
  bool head_only, http10, close_after, chunked;
};

struct conn {
  loop_io io;
  loop_timer timer;
  io_thread *t;
  conn *prev, *next;
  int fd;
  int state;
  int busy;              /* nesting depth of callbacks using this conn */
  bool peer_eof;         /* C_CLOSING: the client finished sending */
  /* input */
  char *rbuf;
  size_t rlen, rcap;
  size_t parse_prev;
  size_t req_end;        /* end of the current request (head + decoded body) in rbuf */
  size_t body_have;      /* decoded body bytes at rbuf[head_len..] */
  http_chunked ck;
  http_request req;
  http_header *headers;
  uint64_t head_start_ms, last_read_ms, last_write_ms;
  uint64_t head_start_ns;  /* the same instant as head_start_ms, in ns (tracing) */
  /* output */
  net_buf out;
  size_t out_sent;
  size_t owned_at;       /* out bytes before the owned body */
  void *owned;
  size_t owned_len, owned_sent;
  void (*owned_free)(void *);
  http_exchange ex;
  char peer[48];         /* numeric address of the client ("" if unknown) */
  /* TLS (NULL = plain) */
  SSL *ssl;
  bool hs_done;          /* handshake complete */
  bool rd_wants_write;   /* the last SSL_read needs the socket writable */
  uint32_t hs_want;      /* interest while handshaking */
  loop_timer kick;       /* decrypted bytes wait inside SSL: epoll will not report them */
};

typedef struct stats {
  _Atomic uint64_t connections_accepted, connections_rejected, requests, responses,
      bytes_in, bytes_out, err_400, err_408, err_413, err_417, err_431, err_501, err_505,
      cancelled, tls_handshake_failures;
  _Atomic uint64_t unanswered;  /* exchanges dispatched, not completed (wraps as signed) */
} stats;

struct io_thread {
  http_server *srv;
  net_loop *loop;
  int lfd;
  loop_io lio;
  loop_timer accept_pause;
  conn *conns;
  bool draining;
  stats st;
};

struct http_server {
  http_server_opts o;
  http_limits lim;
  http_handler handler;
  void *user;
  int n;
  io_thread *threads;
  uint16_t port;
  _Atomic int conns_open;      /* fds open */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  _Atomic bool draining;
  _Atomic bool stopped_accepting;
  int started;                 /* loop threads running */
  _Atomic int forced;
};

/* Single-writer counters: a relaxed load+store is a plain add on x86 (no lock prefix). */
#define STAT_ADD(t, f, v) \
  atomic_store_explicit(&(t)->st.f, atomic_load_explicit(&(t)->st.f, memory_order_relaxed) + (v), memory_order_relaxed)

static void conn_process(conn *c);
static void conn_flush(conn *c);
static void conn_close(conn *c);
static void conn_leave(conn *c);
static void conn_update_deadline(conn *c);
static void conn_settle(conn *c);
static void conn_pump(conn *c);
static void conn_readable(conn *c);
static bool output_blocked(const conn *c);

static void srv_signal(http_server *s) {
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Sum of the per-thread counts of unanswered exchanges (any thread). */
static int64_t srv_unanswered(http_server *s) {
  uint64_t n = 0;
  for (int i = 0; i < s->n; i++)
    n += atomic_load_explicit(&s->threads[i].st.unanswered, memory_order_relaxed);
  return (int64_t)n;
}

/* ---- Date header cache (per thread: answers may be formatted on any thread) ------------ */

static __thread char tls_date[64];
static __thread time_t tls_date_t;

static void append_date(net_buf *b) {
  time_t now = time(NULL);
  if (now != tls_date_t) {
    /* IMF-fixdate, formatted by hand: strftime's names follow the process locale */
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    gmtime_r(&now, &tm);
    snprintf(tls_date, sizeof tls_date, "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
             days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
             tm.tm_hour, tm.tm_min, tm.tm_sec);
    tls_date_t = now;
  }
  net_buf_str(b, tls_date);
}

/* ---- response formatting --------------------------------------------------------------- */

/* Appends a response head. body_len is used unless ex->chunked. Returns false on OOM. */
static bool format_head(net_buf *b, http_exchange *ex, int status, const http_header *h,
                        size_t n, uint64_t body_len, bool stream) {
  bool ok = NET_BUF_LIT(b, "HTTP/1.1 ");
  ok &= net_buf_uint(b, (uint64_t)status, 10);
  ok &= NET_BUF_LIT(b, " ");
  ok &= net_buf_str(b, http_status_reason(status));
  ok &= NET_BUF_LIT(b, "\r\n");
  for (size_t i = 0; i < n; i++) {
    ok &= net_buf_append(b, h[i].name, h[i].name_len);
    ok &= NET_BUF_LIT(b, ": ");
    ok &= net_buf_append(b, h[i].value, h[i].value_len);
    ok &= NET_BUF_LIT(b, "\r\n");
  }
  if (stream) {
    if (ex->chunked) ok &= NET_BUF_LIT(b, "Transfer-Encoding: chunked\r\n");
  } else if (status >= 200 && status != 204 && status != 304) {
    ok &= NET_BUF_LIT(b, "Content-Length: ");
    ok &= net_buf_uint(b, body_len, 10);
    ok &= NET_BUF_LIT(b, "\r\n");
  }
  /* A drain that began after dispatch still closes this connection (ex->mu is held). */
  if (atomic_load_explicit(&ex->c->t->srv->draining, memory_order_relaxed)) ex->close_after = true;
  if (ex->close_after) ok &= NET_BUF_LIT(b, "Connection: close\r\n");
  else if (ex->http10) ok &= NET_BUF_LIT(b, "Connection: keep-alive\r\n");
  return ok;
}

/* ---- exchange: producer side (any thread) --------------------------------------------- */

static void ex_task_run(loop_task *task);

/* What an answering call does after releasing ex->mu. Decided while still holding the
 * lock: once it is released the loop may complete the exchange and free the connection,
 * so nothing may read ex->c afterwards except through a task that is still queued. */
typedef struct after {
  net_loop *post_to;  /* post ex->task here */
  bool deliver_here;  /* on the loop thread: move the bytes to the output now */
} after;

static after ex_decide(http_exchange *ex) {
  net_loop *loop = ex->c->t->loop;
  if (loop_in_thread(loop)) return (after){NULL, true};
  if (ex->task_queued) return (after){NULL, false};
  ex->task_queued = true;
  return (after){loop, false};
}

static void ex_deliver_here(http_exchange *ex);

static void ex_after(http_exchange *ex, after a) {
  if (a.post_to) loop_post_task(a.post_to, &ex->task);
  else if (a.deliver_here) ex_deliver_here(ex);
}

static void respond_common(http_exchange *ex, int status, const http_header *headers,
                           size_t n, const void *body, size_t len, bool owned,
                           void (*free_fn)(void *)) {
  pthread_mutex_lock(&ex->mu);
  if (ex->answered != ANS_NONE) {
    pthread_mutex_unlock(&ex->mu);
    LOG_E("http: exchange answered twice (status %d); ignored", status);
    if (owned && free_fn) free_fn((void *)body);
    return;
  }
  ex->answered = ANS_FINAL;
  ex->final_queued = true;
  if (status < 100 || status > 999) status = 500;
  bool no_body = ex->head_only || status < 200 || status == 204 || status == 304;
  if (!ex->gone) {
    bool ok = format_head(&ex->pending, ex, status, headers, n, len, false);
    append_date(&ex->pending);
    ok &= NET_BUF_LIT(&ex->pending, "\r\n");
    if (no_body) {
      if (owned && free_fn) {
        ex->owned = (void *)body;  /* freed by the loop, not sent */
        ex->owned_len = 0;
        ex->owned_free = free_fn;
      }
    } else if (owned) {
      ex->owned = (void *)body;
      ex->owned_len = len;
      ex->owned_free = free_fn;
    } else {
      ok &= net_buf_append(&ex->pending, body, len);
    }
    if (!ok) ex->broken = true;
  } else if (owned) {
    ex->owned = (void *)body;
    ex->owned_len = 0;
    ex->owned_free = free_fn;
  }
  after post = ex_decide(ex);
  pthread_mutex_unlock(&ex->mu);
  ex_after(ex, post);
}

void http_respond(http_exchange *ex, int status, const http_header *headers, size_t n,
                  const void *body, size_t len) {
  respond_common(ex, status, headers, n, body, len, false, NULL);
}

void http_respond_owned(http_exchange *ex, int status, const http_header *headers,
                        size_t n, void *body, size_t len, void (*free_fn)(void *)) {
  respond_common(ex, status, headers, n, body, len, true, free_fn);
}

void http_stream_begin(http_exchange *ex, int status, const http_header *headers, size_t n) {
  pthread_mutex_lock(&ex->mu);
  if (ex->answered != ANS_NONE) {
    pthread_mutex_unlock(&ex->mu);
    LOG_E("http: stream_begin on an answered exchange; ignored");
    return;
  }
  ex->answered = ANS_STREAMING;
  if (!ex->gone) {
    if (ex->http10) ex->close_after = true;  /* close-delimited body */
    if (status < 200 || status > 999) status = 500;
    bool ok = format_head(&ex->pending, ex, status, headers, n, 0, true);
    append_date(&ex->pending);
    if (!(ok & NET_BUF_LIT(&ex->pending, "\r\n"))) ex->broken = true;
  }
  after post = ex_decide(ex);
  pthread_mutex_unlock(&ex->mu);
  ex_after(ex, post);
}

bool http_stream_write(http_exchange *ex, const void *data, size_t len) {
  pthread_mutex_lock(&ex->mu);
  if (ex->answered != ANS_STREAMING) {
    pthread_mutex_unlock(&ex->mu);
    LOG_E("http: stream_write outside a stream; ignored");
    return false;
  }
  if (ex->gone) {
    pthread_mutex_unlock(&ex->mu);
    return false;
  }
  if (len == 0 || ex->head_only) {
    pthread_mutex_unlock(&ex->mu);
    return true;
  }
  bool ok = true;
  if (ex->chunked) {
    ok &= net_buf_uint(&ex->pending, len, 16);
    ok &= NET_BUF_LIT(&ex->pending, "\r\n");
    ok &= net_buf_append(&ex->pending, data, len);
    ok &= NET_BUF_LIT(&ex->pending, "\r\n");
  } else {
    ok &= net_buf_append(&ex->pending, data, len);
  }
  if (!ok) ex->broken = true;
  after post = ex_decide(ex);
  pthread_mutex_unlock(&ex->mu);
  ex_after(ex, post);
  return true;
}

void http_stream_end(http_exchange *ex) {
  pthread_mutex_lock(&ex->mu);
  if (ex->answered != ANS_STREAMING) {
    pthread_mutex_unlock(&ex->mu);
    LOG_E("http: stream_end outside a stream; ignored");
    return;
  }
  ex->answered = ANS_FINAL;
  ex->final_queued = true;
  if (!ex->gone && ex->chunked && !ex->head_only && !NET_BUF_LIT(&ex->pending, "0\r\n\r\n"))
    ex->broken = true;
  after post = ex_decide(ex);
  pthread_mutex_unlock(&ex->mu);
  ex_after(ex, post);
}

void http_exchange_set_cancel(http_exchange *ex, void (*cb)(void *arg), void *arg) {
  /* Loop thread only: cancel_cb and active are loop-owned fields. */
  ex->cancel_cb = cb;
  ex->cancel_arg = arg;
  if (ex->c->fd < 0 && ex->active && !ex->cancel_fired && cb) {
    ex->cancel_fired = true;  /* already gone: report now */
    cb(arg);
  }
}

net_loop *http_exchange_loop(const http_exchange *ex) { return ex->c->t->loop; }
const char *http_exchange_peer(const http_exchange *ex) { return ex->c->peer; }

/* ---- exchange: loop side --------------------------------------------------------------- */

static void free_owned(conn *c) {
  if (c->owned_free) c->owned_free(c->owned);
  c->owned = NULL;
  c->owned_free = NULL;
  c->owned_len = c->owned_sent = 0;
}

/* The exchange's final bytes are in the output: release the request and move on. */
static void ex_complete(conn *c) {
  http_exchange *ex = &c->ex;
  ex->active = false;
  ex->cancel_cb = NULL;
  /* ex_take reset answered/gone under ex->mu when it took the final piece */
  http_server *s = c->t->srv;
  STAT_ADD(c->t, responses, 1);
  STAT_ADD(c->t, unanswered, (uint64_t)-1);
  if (atomic_load_explicit(&s->draining, memory_order_relaxed) && srv_unanswered(s) == 0)
    srv_signal(s);
  if (c->fd < 0) return;  /* zombie: conn_leave frees it */
  /* Drop the request's bytes; keep pipelined input. */
  size_t rest = c->rlen - c->req_end;
  if (rest) memmove(c->rbuf, c->rbuf + c->req_end, rest);
  c->rlen = rest;
  c->req_end = 0;
  c->parse_prev = 0;
  c->head_start_ms = loop_now_ms(c->t->loop);
  c->head_start_ns = loop_now_ns(c->t->loop);
  c->state = ex->close_after ? C_CLOSING : C_HEAD;
  if (c->rcap > RBUF_KEEP && c->rlen < RBUF_INIT) {
    char *p = realloc(c->rbuf, RBUF_INIT);
    if (p) {
      c->rbuf = p;
      c->rcap = RBUF_INIT;
    }
  }
  if (c->state == C_HEAD)
    loop_io_set(c->t->loop, &c->io, LOOP_READ | LOOP_RDHUP | (c->io.events & LOOP_WRITE));
}

/* Moves what producers queued into the connection output. Loop thread. */
static void ex_take(conn *c) {
  http_exchange *ex = &c->ex;
  pthread_mutex_lock(&ex->mu);
  ex->task_queued = false;
  bool final = ex->final_queued;
  void *owned = ex->owned;
  size_t owned_len = ex->owned_len;
  void (*owned_free)(void *) = ex->owned_free;
  bool broken = ex->broken;
  ex->broken = false;
  if (broken) ex->pending.len = 0;  /* half-formatted bytes must not reach the client */
  ex->owned = NULL;
  ex->owned_free = NULL;
  ex->owned_len = 0;
  if (c->fd >= 0 && ex->pending.len) {
    if (c->out.len == c->out_sent) {
      /* output idle: swap buffers instead of copying */
      net_buf tmp = c->out;
      c->out = ex->pending;
      tmp.len = 0;
      ex->pending = tmp;
      c->out_sent = 0;
    } else {
      net_buf_append(&c->out, ex->pending.data, ex->pending.len);
      ex->pending.len = 0;
    }
  }
  ex->pending.len = 0;
  if (final) {
    ex->final_queued = false;
    ex->answered = ANS_NONE;
    ex->gone = false;
  }
  pthread_mutex_unlock(&ex->mu);
  if (owned) {
    if (c->fd >= 0 && owned_len) {
      c->owned_at = c->out.len;
      c->owned = owned;
      c->owned_len = owned_len;
      c->owned_sent = 0;
      c->owned_free = owned_free;
    } else if (owned_free) {
      owned_free(owned);
    }
  }
  if (final && ex->active) ex_complete(c);
  if (broken && c->fd >= 0) {
    LOG_E("http: out of memory formatting a response; closing the connection");
    conn_close(c);
  }
}

static void ex_deliver_here(http_exchange *ex) {
  conn *c = ex->c;
  c->busy++;
  ex_take(c);
  if (c->fd >= 0 && c->busy == 1) {
    conn_pump(c);  /* pipelined requests may be waiting behind this answer */
    if (c->fd >= 0) conn_settle(c);
  }
  conn_leave(c);
}

static void ex_task_run(loop_task *task) {
  http_exchange *ex = (http_exchange *)((char *)task - offsetof(http_exchange, task));
  ex_deliver_here(ex);
}

/* ---- connection ------------------------------------------------------------------------ */

static void conn_free(conn *c) {
  io_thread *t = c->t;
  if (c->prev) c->prev->next = c->next;
  else if (t->conns == c) t->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  free_owned(c);
  net_buf_free(&c->out);
  net_buf_free(&c->ex.pending);
  pthread_mutex_destroy(&c->ex.mu);
  free(c->rbuf);
  free(c->headers);
  free(c);
}

static void conn_leave(conn *c) {
  if (--c->busy > 0) return;
  if (c->fd < 0 && !c->ex.active) conn_free(c);
}

static void fire_cancel(conn *c) {
  http_exchange *ex = &c->ex;
  if (!ex->active) return;
  pthread_mutex_lock(&ex->mu);
  bool was_final = ex->answered == ANS_FINAL;
  ex->gone = true;
  ex->pending.len = 0;
  pthread_mutex_unlock(&ex->mu);
  if (was_final) return;  /* the answer is complete; nothing to cancel */
  STAT_ADD(c->t, cancelled, 1);
  if (ex->cancel_cb && !ex->cancel_fired) {
    ex->cancel_fired = true;
    ex->cancel_cb(ex->cancel_arg);
  }
}

/* Closes the socket. The struct is freed by conn_leave once nothing uses it. */
static void conn_close(conn *c) {
  if (c->fd < 0) return;
  io_thread *t = c->t;
  loop_io_del(t->loop, &c->io);
  loop_timer_cancel(t->loop, &c->timer);
  loop_timer_cancel(t->loop, &c->kick);
  SSL_free(c->ssl);
  c->ssl = NULL;
  close(c->fd);
  c->fd = -1;
  free_owned(c);
  c->out.len = c->out_sent = 0;
  http_server *s = t->srv;
  if (atomic_fetch_sub(&s->conns_open, 1) == 1 && atomic_load(&s->draining)) srv_signal(s);
  c->busy++;
  fire_cancel(c);
  conn_leave(c);
}

static void conn_error(conn *c, int status, const char *msg) {
  io_thread *t = c->t;
  switch (status) {
    case 400: STAT_ADD(t, err_400, 1); break;
    case 408: STAT_ADD(t, err_408, 1); break;
    case 413: STAT_ADD(t, err_413, 1); break;
    case 417: STAT_ADD(t, err_417, 1); break;
    case 431: STAT_ADD(t, err_431, 1); break;
    case 501: STAT_ADD(t, err_501, 1); break;
    case 505: STAT_ADD(t, err_505, 1); break;
    default: break;
  }
  net_buf *b = &c->out;
  if (c->out.len == c->out_sent) c->out.len = c->out_sent = 0;
  char body[256];
  int bl = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
  NET_BUF_LIT(b, "HTTP/1.1 ");
  net_buf_uint(b, (uint64_t)status, 10);
  NET_BUF_LIT(b, " ");
  net_buf_str(b, http_status_reason(status));
  NET_BUF_LIT(b, "\r\nContent-Type: application/json\r\nConnection: close\r\n");
  append_date(b);
  NET_BUF_LIT(b, "Content-Length: ");
  net_buf_uint(b, (uint64_t)bl, 10);
  NET_BUF_LIT(b, "\r\n\r\n");
  net_buf_append(b, body, (size_t)bl);
  c->state = C_CLOSING;
  LOG_V(1, "http: %d %s (fd %d)", status, msg, c->fd);
}

/* Starts the linger phase after the final bytes went out. */
static void conn_linger(conn *c) {
  if (c->ssl) {
    ERR_clear_error();
    SSL_shutdown(c->ssl);  /* close_notify, best effort (non-blocking) */
  }
  shutdown(c->fd, SHUT_WR);
  c->state = C_LINGER;
  c->last_read_ms = loop_now_ms(c->t->loop);
  loop_io_set(c->t->loop, &c->io, LOOP_READ | LOOP_RDHUP);
}

/* ---- transport: plain socket or TLS, with read(2)/sendmsg(2) conventions -------------- */

static __thread char tls_scratch[16384];

static ssize_t conn_recv(conn *c, void *buf, size_t n) {
  if (!c->ssl) return read(c->fd, buf, n);
  ERR_clear_error();
  int r = SSL_read(c->ssl, buf, n > INT_MAX ? INT_MAX : (int)n);
  c->rd_wants_write = false;
  if (r > 0) return r;
  switch (SSL_get_error(c->ssl, r)) {
    case SSL_ERROR_WANT_READ: errno = EAGAIN; return -1;
    case SSL_ERROR_WANT_WRITE: c->rd_wants_write = true; errno = EAGAIN; return -1;
    case SSL_ERROR_ZERO_RETURN: return 0;
    default: errno = ECONNRESET; return -1;
  }
}

static ssize_t conn_send(conn *c, struct iovec *iov, int n) {
  if (!c->ssl) {
    /* sendmsg == writev plus MSG_NOSIGNAL: a peer reset must not raise SIGPIPE */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    return sendmsg(c->fd, &mh, MSG_NOSIGNAL);
  }
  const void *p = iov[0].iov_base;
  size_t len = iov[0].iov_len, total = 0;
  for (int i = 0; i < n; i++) total += iov[i].iov_len;
  if (n > 1 && total <= sizeof tls_scratch) {
    /* one record for a head and a small body (the retry after WANT_WRITE rebuilds the same
     * bytes: SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER allows the new address) */
    size_t o = 0;
    for (int i = 0; i < n; i++) {
      memcpy(tls_scratch + o, iov[i].iov_base, iov[i].iov_len);
      o += iov[i].iov_len;
    }
    p = tls_scratch;
    len = total;
  }
  ERR_clear_error();
  int w = SSL_write(c->ssl, p, len > INT_MAX ? INT_MAX : (int)len);
  if (w > 0) return w;
  int e = SSL_get_error(c->ssl, w);
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

/* Drives the server handshake; true when it is complete. On failure the connection is
 * closed (a plaintext request on the TLS port ends here). */
static bool conn_handshake(conn *c) {
  ERR_clear_error();
  int r = SSL_do_handshake(c->ssl);
  if (r == 1) {
    c->hs_done = true;
    return true;
  }
  int e = SSL_get_error(c->ssl, r);
  if (e == SSL_ERROR_WANT_READ) {
    c->hs_want = LOOP_READ | LOOP_RDHUP;
  } else if (e == SSL_ERROR_WANT_WRITE) {
    c->hs_want = LOOP_WRITE;
  } else {
    char eb[200];
    LOG_V(1, "http: TLS handshake with %s failed: %s", c->peer, net_tls_last_error(eb, sizeof eb));
    STAT_ADD(c->t, tls_handshake_failures, 1);
    conn_close(c);
  }
  return false;
}

static void conn_flush(conn *c) {
  io_thread *t = c->t;
  for (;;) {
    /* out[sent..owned_at], then the owned body, then out bytes queued after it */
    struct iovec iov[3];
    int n = 0;
    size_t a_end = c->owned ? c->owned_at : c->out.len;
    if (c->out_sent < a_end) {
      iov[n].iov_base = c->out.data + c->out_sent;
      iov[n].iov_len = a_end - c->out_sent;
      n++;
    }
    if (c->owned) {
      if (c->owned_sent < c->owned_len) {
        iov[n].iov_base = (char *)c->owned + c->owned_sent;
        iov[n].iov_len = c->owned_len - c->owned_sent;
        n++;
      }
      size_t from = c->out_sent > a_end ? c->out_sent : a_end;
      if (c->out.len > from) {
        iov[n].iov_base = c->out.data + from;
        iov[n].iov_len = c->out.len - from;
        n++;
      }
    }
    if (n == 0) break;
    ssize_t w = conn_send(c, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        loop_io_set(t->loop, &c->io, c->io.events | LOOP_WRITE);
        return;
      }
      conn_close(c);  /* EPIPE, ECONNRESET: the client is gone */
      return;
    }
    STAT_ADD(t, bytes_out, (uint64_t)w);
    c->last_write_ms = loop_now_ms(t->loop);
    size_t k = (size_t)w;
    size_t da = c->out_sent < a_end ? a_end - c->out_sent : 0;
    if (da > k) da = k;
    c->out_sent += da;
    k -= da;
    if (c->owned) {
      size_t dob = c->owned_len - c->owned_sent;
      if (dob > k) dob = k;
      c->owned_sent += dob;
      k -= dob;
    }
    c->out_sent += k;  /* bytes after the owned body */
  }
  /* all written */
  c->out.len = c->out_sent = 0;
  if (c->owned) free_owned(c);
  if (c->out.cap > OUT_KEEP) net_buf_shrink(&c->out, 16384);
  if (c->io.events & LOOP_WRITE) loop_io_set(t->loop, &c->io, c->io.events & ~LOOP_WRITE);
  if (c->state == C_CLOSING) conn_linger(c);
}

static bool output_blocked(const conn *c) {
  return c->owned || (c->out.len - c->out_sent) > OUT_HIGH_WATER;
}

/* Grows rbuf to hold at least `want` bytes. Never called while C_WAIT. */
/* Grows rbuf to hold at least `want` bytes. Never called while C_WAIT. In C_BODY the
 * parsed head's slices point into rbuf: they are carried over as offsets. */
static bool rbuf_reserve(conn *c, size_t want) {
  if (want <= c->rcap) return true;
  size_t cap = c->rcap;
  while (cap < want) cap = cap > SIZE_MAX / 2 ? want : cap * 2;
  bool rebase = c->state == C_BODY;
  http_request *q = &c->req;
  uintptr_t base = (uintptr_t)c->rbuf;
  size_t om = 0, op = 0, oq = 0;
  if (rebase) {
    om = (uintptr_t)q->method - base;
    op = (uintptr_t)q->path - base;
    oq = (uintptr_t)q->query - base;
    for (size_t i = 0; i < q->num_headers; i++) {
      c->headers[i].name = (const char *)((uintptr_t)c->headers[i].name - base);
      c->headers[i].value = (const char *)((uintptr_t)c->headers[i].value - base);
    }
  }
  char *p = realloc(c->rbuf, cap);
  if (p) {
    c->rbuf = p;
    c->rcap = cap;
  }
  if (rebase) {  /* also on failure: turn the offsets back into pointers */
    const char *b = c->rbuf;
    q->method = b + om;
    q->path = b + op;
    q->query = b + oq;
    for (size_t i = 0; i < q->num_headers; i++) {
      c->headers[i].name = b + (uintptr_t)c->headers[i].name;
      c->headers[i].value = b + (uintptr_t)c->headers[i].value;
    }
  }
  return p != NULL;
}

static void dispatch(conn *c) {
  io_thread *t = c->t;
  http_server *s = t->srv;
  http_exchange *ex = &c->ex;
  c->req.body = c->rbuf + c->req.head_len;
  c->req.body_len = c->body_have;
  c->req.recv_start_ns = c->head_start_ns;
  c->req_end = c->req.head_len + c->body_have;
  c->state = C_WAIT;
  ex->active = true;
  ex->cancel_fired = false;
  ex->cancel_cb = NULL;
  ex->head_only = c->req.method_id == HTTP_HEAD;
  ex->http10 = c->req.version_minor == 0;
  ex->chunked = !ex->http10;
  ex->close_after = !c->req.keep_alive || t->draining;
  STAT_ADD(t, unanswered, 1);
  STAT_ADD(t, requests, 1);
  /* Keep watching for a peer close, but only read while rbuf has tail room. */
  s->handler(ex, &c->req, s->user);
}

/* Runs the request state machine over buffered input until it needs more bytes or an
 * exchange is pending. Caller holds busy. */
static void conn_process(conn *c) {
  io_thread *t = c->t;
  http_server *s = t->srv;
  while (c->fd >= 0) {
    if (c->state == C_HEAD) {
      if (c->rlen == 0 || output_blocked(c)) return;
      http_parse_error err;
      http_parse_result r = http_parse_request(c->rbuf, c->rlen, c->parse_prev, &s->lim,
                                               c->headers, s->lim.max_headers, &c->req, &err);
      if (r == HTTP_PARSE_INCOMPLETE) {
        c->parse_prev = c->rlen;
        return;
      }
      if (r == HTTP_PARSE_ERROR) {
        conn_error(c, err.status, err.message);
        return;
      }
      c->body_have = 0;
      if (c->req.body_kind == HTTP_BODY_NONE) {
        dispatch(c);
        continue;
      }
      c->state = C_BODY;  /* from here rbuf growth carries the head's slices over */
      if (c->req.body_kind == HTTP_BODY_LENGTH) {
        if (c->req.content_length > SIZE_MAX - c->req.head_len ||
            !rbuf_reserve(c, c->req.head_len + (size_t)c->req.content_length)) {
          conn_error(c, 413, "body does not fit in memory");
          return;
        }
      } else {
        memset(&c->ck, 0, sizeof c->ck);
        c->ck.max_total = s->lim.max_body_bytes;
        c->ck.max_chunks = s->o.max_body_chunks;
      }
      c->state = C_BODY;
      c->last_read_ms = loop_now_ms(t->loop);
      bool have_all = c->req.body_kind == HTTP_BODY_LENGTH &&
                      c->rlen - c->req.head_len >= c->req.content_length;
      if (c->req.expect_continue && !have_all) {
        NET_BUF_LIT(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
      }
      continue;
    }
    if (c->state == C_BODY) {
      size_t hl = c->req.head_len;
      if (c->req.body_kind == HTTP_BODY_LENGTH) {
        if (c->rlen - hl < c->req.content_length) return;
        c->body_have = (size_t)c->req.content_length;
        dispatch(c);
        continue;
      }
      /* chunked: undecoded input starts right after the decoded bytes */
      size_t at = hl + c->body_have;
      size_t out_len, used;
      http_chunked_result r = http_chunked_decode(&c->ck, c->rbuf + at, c->rlen - at,
                                                  &out_len, &used);
      if (r == HTTP_CHUNKED_ERROR) {
        conn_error(c, 400, "malformed chunked body");
        return;
      }
      if (r == HTTP_CHUNKED_TOO_MANY) {
        conn_error(c, 400, "chunked body has more chunks than the limit (--http-max-chunks)");
        return;
      }
      if (r == HTTP_CHUNKED_TOO_LARGE) {
        conn_error(c, 413, "body exceeds the limit");
        return;
      }
      size_t rest = c->rlen - at - used;
      c->body_have += out_len;
      if (rest) memmove(c->rbuf + hl + c->body_have, c->rbuf + at + used, rest);
      c->rlen = hl + c->body_have + rest;
      if (r == HTTP_CHUNKED_INCOMPLETE) return;
      dispatch(c);
      continue;
    }
    return;  /* C_WAIT, C_CLOSING, C_LINGER */
  }
}

/* Alternates writing and parsing until no buffered request can make progress: answered
 * requests unblock the output, a flushed output unblocks the next buffered request. Each
 * round consumes a request (or stops), so this ends within one buffer's worth of input. */
static void conn_pump(conn *c) {
  for (;;) {
    if (c->fd < 0) return;
    conn_flush(c);
    if (c->fd < 0 || c->state != C_HEAD || c->rlen == 0 || output_blocked(c) ||
        c->parse_prev == c->rlen)
      return;
    conn_process(c);
  }
}

/* End of every event on a live connection: close it if a drain made it idle, else make
 * sure its timer covers the current state's deadline. */
/* The epoll interest a connection needs in its current state (level-triggered, so asking
 * for READ while unable to read would spin). */
static uint32_t conn_want(const conn *c) {
  uint32_t w = (c->out.len > c->out_sent || c->owned) ? LOOP_WRITE : 0;
  switch (c->state) {
    case C_LINGER: return w | LOOP_READ | LOOP_RDHUP;
    case C_CLOSING: return w | (c->peer_eof ? 0 : LOOP_READ | LOOP_RDHUP);
    case C_WAIT:  /* the request view pins rbuf: read only into tail room */
      return w | LOOP_RDHUP | (c->rlen < c->rcap ? LOOP_READ : 0);
    default:
      if (output_blocked(c)) return w | (c->rlen < c->rcap ? LOOP_READ | LOOP_RDHUP : 0);
      return w | LOOP_READ | LOOP_RDHUP;
  }
}

static void conn_settle(conn *c) {
  if (c->ssl && !c->hs_done) {
    loop_io_set(c->t->loop, &c->io, c->hs_want);
    conn_update_deadline(c);
    return;
  }
  if (c->t->draining && c->state == C_HEAD && c->rlen == 0 && c->out.len == c->out_sent &&
      !c->owned) {
    conn_close(c);
    return;
  }
  uint32_t want = conn_want(c);
  if (c->ssl) {
    if (c->rd_wants_write) want |= LOOP_WRITE;
    if ((want & LOOP_READ) && SSL_pending(c->ssl) > 0 && !loop_timer_armed(&c->kick))
      loop_timer_at(c->t->loop, &c->kick, loop_now_ms(c->t->loop));
  }
  loop_io_set(c->t->loop, &c->io, want);
  conn_update_deadline(c);
}

static void conn_update_deadline(conn *c) {
  io_thread *t = c->t;
  const http_server_opts *o = &t->srv->o;
  uint64_t d = 0;
  if (c->ssl && !c->hs_done) {
    d = c->head_start_ms + (uint64_t)o->header_timeout_ms;  /* slow handshakes too */
  } else if (c->out.len > c->out_sent || c->owned) {
    d = c->last_write_ms + (uint64_t)o->body_timeout_ms;
  } else {
    switch (c->state) {
      case C_HEAD:
        d = c->rlen ? c->head_start_ms + (uint64_t)o->header_timeout_ms
                    : c->head_start_ms + (uint64_t)o->idle_keepalive_ms;
        break;
      case C_BODY: d = c->last_read_ms + (uint64_t)o->body_timeout_ms; break;
      case C_LINGER: d = c->last_read_ms + LINGER_MS; break;
      default: d = 0; break;
    }
  }
  if (d && (!loop_timer_armed(&c->timer) || c->timer.deadline_ms > d))
    loop_timer_at(t->loop, &c->timer, d);
}

/* Decrypted input left inside SSL after the last read (epoll cannot see it). */
static void conn_kick(loop_timer *tm) {
  conn *c = (conn *)((char *)tm - offsetof(conn, kick));
  if (c->fd < 0) return;
  c->busy++;
  conn_readable(c);
  conn_pump(c);
  if (c->fd >= 0) conn_settle(c);
  conn_leave(c);
}

static void conn_timer(loop_timer *tm) {
  conn *c = (conn *)((char *)tm - offsetof(conn, timer));
  if (c->fd < 0) return;
  c->busy++;
  uint64_t now = loop_now_ms(c->t->loop);
  /* recompute: the deadline may have moved since the timer was armed */
  conn_update_deadline(c);
  if (loop_timer_armed(&c->timer) && c->timer.deadline_ms > now) {
    conn_leave(c);
    return;
  }
  if (c->out.len > c->out_sent || c->owned) {
    conn_close(c);  /* stalled reader */
  } else if (c->state == C_HEAD && c->rlen == 0) {
    conn_close(c);  /* idle keep-alive */
  } else if (c->state == C_HEAD || c->state == C_BODY) {
    conn_error(c, 408, c->state == C_HEAD ? "timed out reading the request head"
                                          : "timed out reading the request body");
    conn_flush(c);
    if (c->fd >= 0) conn_settle(c);
  } else if (c->state == C_LINGER) {
    conn_close(c);
  }
  conn_leave(c);
}

static void conn_readable(conn *c) {
  io_thread *t = c->t;
  http_server *s = t->srv;
  if (c->state == C_LINGER || c->state == C_CLOSING) {
    char sink[4096];
    ssize_t r = conn_recv(c, sink, sizeof sink);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      if (c->state == C_LINGER) conn_close(c);
      else c->peer_eof = true;  /* stop reading; conn_settle drops the interest */
    }
    return;
  }
  if (c->state == C_WAIT || output_blocked(c)) {
    /* Request view must stay put: read only into tail room. */
    if (c->rlen == c->rcap) return;  /* conn_settle narrows the interest */
  } else {
    size_t want;
    if (c->state == C_HEAD) {
      want = c->rlen + 4096;
      size_t cap_max = s->lim.max_header_bytes + 1;
      if (want > cap_max && c->rlen < cap_max) want = cap_max;
      if (c->rlen >= cap_max) want = c->rlen + 1;  /* parser will report 431 */
    } else if (c->req.body_kind == HTTP_BODY_LENGTH) {
      want = c->req.head_len + (size_t)c->req.content_length;
      if (want <= c->rlen) want = c->rlen + 1;
    } else {
      want = c->rlen + 16384;
    }
    if (c->rlen == c->rcap && !rbuf_reserve(c, want)) {
      conn_error(c, 413, "request does not fit in memory");
      conn_flush(c);
      return;
    }
  }
  ssize_t r = conn_recv(c, c->rbuf + c->rlen, c->rcap - c->rlen);
  if (r <= 0) {
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
    conn_close(c);  /* EOF or reset: client gone (cancels a pending exchange) */
    return;
  }
  if (c->rlen == 0 && c->state == C_HEAD) {
    c->head_start_ms = loop_now_ms(t->loop);
    c->head_start_ns = loop_now_ns(t->loop);
  }
  c->rlen += (size_t)r;
  c->last_read_ms = loop_now_ms(t->loop);
  STAT_ADD(t, bytes_in, (uint64_t)r);
  conn_process(c);
}

static void conn_io(loop_io *io, uint32_t ev) {
  conn *c = (conn *)((char *)io - offsetof(conn, io));
  c->busy++;
  if (c->ssl && !c->hs_done) {
    if ((ev & (LOOP_ERROR | LOOP_HUP)) && !(ev & LOOP_READ)) conn_close(c);
    else if (!conn_handshake(c)) {
      if (c->fd >= 0) conn_settle(c);
      conn_leave(c);
      return;
    }
    if (c->fd < 0) {
      conn_leave(c);
      return;
    }
    ev |= LOOP_READ;  /* the client's first request may already be waiting */
  }
  if (ev & LOOP_WRITE) {
    conn_flush(c);
    if (c->fd >= 0 && c->rd_wants_write) ev |= LOOP_READ;
  }
  if (c->fd >= 0 && (ev & (LOOP_READ | LOOP_RDHUP | LOOP_HUP | LOOP_ERROR))) {
    if ((ev & (LOOP_ERROR | LOOP_HUP)) && !(ev & LOOP_READ)) conn_close(c);
    else if ((ev & LOOP_RDHUP) && !(ev & LOOP_READ) && c->state == C_WAIT) conn_close(c);
    else conn_readable(c);
  }
  conn_pump(c);
  if (c->fd >= 0) conn_settle(c);
  conn_leave(c);
}

/* ---- accept ------------------------------------------------------------------------------ */

/* Numeric address of an accepted peer; an IPv4-mapped IPv6 address is written as IPv4. */
static void peer_name(const struct sockaddr_storage *ss, char *out, size_t cap) {
  out[0] = 0;
  if (ss->ss_family == AF_INET) {
    inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, out, (socklen_t)cap);
  } else if (ss->ss_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a)) inet_ntop(AF_INET, a->s6_addr + 12, out, (socklen_t)cap);
    else inet_ntop(AF_INET6, a, out, (socklen_t)cap);
  }
}

static void accept_io(loop_io *io, uint32_t ev) {
  io_thread *t = (io_thread *)((char *)io - offsetof(io_thread, lio));
  http_server *s = t->srv;
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage pa;
    socklen_t pal = sizeof pa;
    int fd = accept4(t->lfd, (struct sockaddr *)&pa, &pal, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* Out of descriptors: a level-triggered listener would spin. Pause accepting for
         * a moment; pending connections wait in the backlog. */
        loop_io_set(t->loop, &t->lio, 0);
        loop_timer_at(t->loop, &t->accept_pause, loop_now_ms(t->loop) + 100);
        LOG_W("http: accept: %s; pausing accepts for 100 ms", strerror(errno));
      }
      return;
    }
    if (atomic_load(&s->conns_open) >= s->o.max_connections || t->draining) {
      close(fd);
      STAT_ADD(t, connections_rejected, 1);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = calloc(1, sizeof *c);
    char *rb = malloc(RBUF_INIT);
    http_header *hd = malloc(s->lim.max_headers * sizeof *hd);
    if (!c || !rb || !hd) {
      free(c);
      free(rb);
      free(hd);
      close(fd);
      STAT_ADD(t, connections_rejected, 1);
      continue;
    }
    c->t = t;
    c->fd = fd;
    peer_name(&pa, c->peer, sizeof c->peer);
    c->rbuf = rb;
    c->rcap = RBUF_INIT;
    c->headers = hd;
    c->state = C_HEAD;
    c->io.fd = fd;
    c->io.fn = conn_io;
    c->timer.fn = conn_timer;
    c->kick.fn = conn_kick;
    c->ex.c = c;
    c->ex.task.fn = ex_task_run;
    pthread_mutex_init(&c->ex.mu, NULL);
    c->head_start_ms = c->last_read_ms = c->last_write_ms = loop_now_ms(t->loop);
    c->head_start_ns = loop_now_ns(t->loop);
    if (s->o.tls) {
      c->ssl = net_tls_new_ssl(s->o.tls, NULL, loop_now_ms(t->loop));
      if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
        SSL_free(c->ssl);
        close(fd);
        pthread_mutex_destroy(&c->ex.mu);
        free(c);
        free(rb);
        free(hd);
        STAT_ADD(t, connections_rejected, 1);
        continue;
      }
      SSL_set_accept_state(c->ssl);
      c->hs_want = LOOP_READ | LOOP_RDHUP;
    }
    cinfer_status *st = loop_io_add(t->loop, &c->io, LOOP_READ | LOOP_RDHUP);
    if (st) {
      cinfer_status_free(st);
      SSL_free(c->ssl);
      close(fd);
      pthread_mutex_destroy(&c->ex.mu);
      free(c);
      free(rb);
      free(hd);
      continue;
    }
    c->next = t->conns;
    if (t->conns) t->conns->prev = c;
    t->conns = c;
    atomic_fetch_add(&s->conns_open, 1);
    STAT_ADD(t, connections_accepted, 1);
    conn_update_deadline(c);
  }
}

static void accept_resume(loop_timer *tm) {
  io_thread *t = (io_thread *)((char *)tm - offsetof(io_thread, accept_pause));
  if (t->lfd >= 0) loop_io_set(t->loop, &t->lio, LOOP_READ);
}

/* ---- server lifecycle --------------------------------------------------------------------- */

cinfer_status *http_server_create(const http_server_opts *opts, http_handler handler,
                                  void *user, http_server **out) {
  *out = NULL;
  if (!handler) return cinfer_status_new(CINFER_INVALID_ARG, "http server: handler is NULL");
  http_server *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom("http server");
  s->o = *opts;
  http_server_opts *o = &s->o;
  if (o->io_threads <= 0) o->io_threads = 1;
  if (o->io_threads > 256) o->io_threads = 256;
  if (!o->max_body_bytes) o->max_body_bytes = 64u << 20;
  if (!o->max_body_chunks) o->max_body_chunks = 65536;
  if (!o->max_header_bytes) o->max_header_bytes = 16u << 10;
  if (!o->max_headers) o->max_headers = 100;
  if (o->max_headers > 10000) o->max_headers = 10000;  /* per-connection array */
  if (o->header_timeout_ms <= 0) o->header_timeout_ms = 10000;
  if (o->body_timeout_ms <= 0) o->body_timeout_ms = 30000;
  if (o->idle_keepalive_ms <= 0) o->idle_keepalive_ms = 60000;
  if (o->max_connections <= 0) o->max_connections = 10000;
  if (o->backlog <= 0) o->backlog = 1024;
  s->lim = (http_limits){o->max_header_bytes, o->max_headers, o->max_body_bytes};
  s->handler = handler;
  s->user = user;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->threads = calloc((size_t)o->io_threads, sizeof *s->threads);
  if (!s->threads) {
    free(s);
    return cinfer_status_oom("http server");
  }
  cinfer_status *st = NULL;
  uint16_t port = o->port;
  for (int i = 0; i < o->io_threads; i++) {
    io_thread *t = &s->threads[i];
    t->srv = s;
    t->lfd = -1;
    st = loop_create(&t->loop);
    if (st) break;
    s->n = i + 1;
    loop_set_batch_hooks(t->loop, o->batch_begin, o->batch_end, o->batch_arg);
    st = net_listen("http server", o->host, port, o->backlog, i == 0, &t->lfd, &port);
    if (st) break;
    if (i == 0) s->port = port;
    t->lio.fd = t->lfd;
    t->lio.fn = accept_io;
    t->accept_pause.fn = accept_resume;
    st = loop_io_add(t->loop, &t->lio, LOOP_READ);
    if (st) break;
  }
  if (!st) {
    for (int i = 0; i < s->n; i++) {
      char name[16];
      snprintf(name, sizeof name, "http-io-%d", i & 0xffff);
      st = loop_start_thread(s->threads[i].loop, name);
      if (st) break;
      s->started++;
    }
  }
  if (st) {
    http_server_destroy(s);
    return st;
  }
  *out = s;
  return NULL;
}

uint16_t http_server_port(const http_server *srv) { return srv->port; }
int http_server_num_loops(const http_server *srv) { return srv->n; }
net_loop *http_server_loop(http_server *srv, int i) {
  return (i >= 0 && i < srv->n) ? srv->threads[i].loop : NULL;
}

/* Runs fn(thread) on every loop thread and waits for all of them. */
typedef struct on_all {
  loop_task task;
  io_thread *t;
  void (*fn)(io_thread *);
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  int *left;
} on_all;

static void on_all_run(loop_task *task) {
  on_all *a = (on_all *)task;
  a->fn(a->t);
  pthread_mutex_lock(a->mu);
  if (--*a->left == 0) pthread_cond_broadcast(a->cv);
  pthread_mutex_unlock(a->mu);
}

static void run_on_all(http_server *s, void (*fn)(io_thread *)) {
  on_all *tasks = calloc((size_t)s->n, sizeof *tasks);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  int left = s->n;
  for (int i = 0; i < s->n; i++) {
    if (!tasks) {  /* out of memory: still correct, just slower */
      on_all one = {.t = &s->threads[i], .fn = fn, .mu = &mu, .cv = &cv, .left = &left};
      one.task.fn = on_all_run;
      loop_post_task(s->threads[i].loop, &one.task);
      pthread_mutex_lock(&mu);
      while (left > s->n - i - 1) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
      continue;
    }
    tasks[i] = (on_all){.t = &s->threads[i], .fn = fn, .mu = &mu, .cv = &cv, .left = &left};
    tasks[i].task.fn = on_all_run;
    loop_post_task(s->threads[i].loop, &tasks[i].task);
  }
  pthread_mutex_lock(&mu);
  while (left > 0) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  free(tasks);
}

static void t_stop_accepting(io_thread *t) {
  loop_timer_cancel(t->loop, &t->accept_pause);
  if (t->lfd >= 0) {
    loop_io_del(t->loop, &t->lio);
    close(t->lfd);
    t->lfd = -1;
  }
}

void http_server_stop_accepting(http_server *srv) {
  if (atomic_exchange(&srv->stopped_accepting, true)) return;
  run_on_all(srv, t_stop_accepting);
}

static void t_drain(io_thread *t) {
  t->draining = true;
  for (conn *c = t->conns, *next; c; c = next) {
    next = c->next;
    if (c->fd < 0) continue;
    if (c->state == C_HEAD && c->rlen == 0 && c->out.len == c->out_sent && !c->owned) {
      c->busy++;
      conn_close(c);
      conn_leave(c);
    } else if (c->state == C_WAIT) {
      pthread_mutex_lock(&c->ex.mu);
      c->ex.close_after = true;  /* its response carries Connection: close */
      pthread_mutex_unlock(&c->ex.mu);
    }
  }
}

static void t_force_close(io_thread *t) {
  for (conn *c = t->conns, *next; c; c = next) {
    next = c->next;
    if (c->fd < 0) continue;
    atomic_fetch_add(&t->srv->forced, 1);
    c->busy++;
    conn_close(c);
    conn_leave(c);
  }
}

/* Waits on srv->cv until *counter is 0 or the deadline (0 = no deadline) passes. */
static void wait_zero(http_server *srv, _Atomic int *counter, uint64_t deadline) {
  pthread_mutex_lock(&srv->mu);
  while (atomic_load(counter) > 0) {
    uint64_t now = clock_now_ms();
    if (deadline && now >= deadline) break;
    uint64_t wait = deadline ? deadline - now : 100;
    if (wait > 100) wait = 100;  /* re-check periodically as well */
    struct timespec ts = clock_abs_after_ms(wait);
    pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
  }
  pthread_mutex_unlock(&srv->mu);
}

int http_server_shutdown(http_server *srv, int timeout_ms) {
  if (srv->started < srv->n || srv->n == 0) return 0;
  http_server_stop_accepting(srv);
  atomic_store(&srv->draining, true);
  run_on_all(srv, t_drain);
  wait_zero(srv, &srv->conns_open, clock_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) + 1);
  atomic_store(&srv->forced, 0);
  run_on_all(srv, t_force_close);
  return atomic_load(&srv->forced);
}

static void wait_unanswered(http_server *srv) {
  pthread_mutex_lock(&srv->mu);
  while (srv_unanswered(srv) > 0) {
    struct timespec ts = clock_abs_after_ms(100);
    pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
  }
  pthread_mutex_unlock(&srv->mu);
}

void http_server_destroy(http_server *srv) {
  if (!srv) return;
  if (srv->started == srv->n && srv->n > 0) {
    http_server_shutdown(srv, 0);
    /* Handlers still owe answers for cancelled exchanges; their structs must outlive
     * those calls (see http.h). */
    wait_unanswered(srv);
  }
  for (int i = 0; i < srv->n; i++) {
    io_thread *t = &srv->threads[i];
    if (!t->loop) continue;
    loop_join(t->loop);
    while (t->conns) {
      conn *c = t->conns;
      if (c->fd >= 0) {
        SSL_free(c->ssl);
        c->ssl = NULL;
        close(c->fd);
        c->fd = -1;
      }
      conn_free(c);
    }
    if (t->lfd >= 0) close(t->lfd);
    loop_destroy(t->loop);
  }
  free(srv->threads);
  pthread_mutex_destroy(&srv->mu);
  pthread_cond_destroy(&srv->cv);
  free(srv);
}

void http_server_get_stats(const http_server *srv, http_server_stats *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < srv->n; i++) {
    const stats *st = &srv->threads[i].st;
#define S(f) out->f += atomic_load_explicit(&st->f, memory_order_relaxed)
    S(connections_accepted); S(connections_rejected); S(requests); S(responses);
    S(bytes_in); S(bytes_out); S(err_400); S(err_408); S(err_413); S(err_417);
    S(err_431); S(err_501); S(err_505); S(cancelled); S(tls_handshake_failures);
#undef S
  }
  out->connections_active = (uint64_t)atomic_load(&((http_server *)srv)->conns_open);
}
