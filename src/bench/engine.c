/* engine.c: the load generator's HTTP hot path. One thread per core, each with its own epoll
 * instance and its own connections (nothing shared between workers but an atomic request
 * counter in fixed-count mode and a stop flag). The workers' loop, the fixed-count claim and
 * the open loop's arrivals are pacer.c's (shared with grpc_engine.c); this file is the
 * HTTP/1.1 side: connections, requests, responses.
 *
 * Per connection:  CLOSED --connect()--> CONNECTING --writable--> IDLE
 *                  IDLE --send request--> BUSY --response complete--> IDLE (keep-alive)
 *                  any error or Connection: close --> CLOSED (closed loop: reconnect at
 *                  retry_at; open loop: reopened on demand)
 * A reused keep-alive connection that the server closes before sending any byte of the
 * answer (llama.cpp's server does this after every streamed response while still saying
 * "Keep-Alive") is stale, not a failed request: the request is handed back (same prompt
 * variant, same intended time in the open loop) and goes out on a fresh connection. A fresh
 * connection that fails the same way is an error, so this cannot loop (in --conversation mode
 * a fresh connection that sat idle over a second while its user thought counts as reused).
 * Closed loop: every IDLE connection immediately sends the next request.
 * Open loop: arrivals (constant spacing or exponential gaps, seeded) go into a fixed ring
 * of intended send times; IDLE connections take from it, new connections are opened up
 * to max_connections/threads; latency is measured from the intended time (no coordinated
 * omission). A full ring drops the arrival and counts an OVERLOAD error.
 *
 * Invariants: requests are pre-serialised (bench_reqset) and sent straight from their
 * buffers; every buffer is allocated at start; the hot path allocates nothing, except in
 * --conversation mode (conv.c), where each user's turn is built from its history when sent
 * and an idle connection waits for its user's think time. The worker
 * holds its sample lock while it handles one batch of epoll events, never while waiting,
 * so bench_engine_collect blocks for at most one batch. */
#include "bench/bench_int.h"
#include "bench/grpc_int.h"
#include "bench/pacer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define RBUF_SIZE (64 * 1024)
#define MAX_HEADER (32 * 1024)
#define SSE_CAP (64 * 1024)
#define BODY_KEEP (64 * 1024)

enum { C_CLOSED = 0, C_CONNECTING, C_IDLE, C_BUSY };

typedef struct worker worker;

typedef struct conn {
  int fd;
  int state;
  bool want_out;       /* EPOLLOUT armed */
  bool saw_done;       /* SSE [DONE] */
  worker *w;
  size_t req_idx;
  const bench_req *req;
  size_t sent;
  uint64_t t_intended, t_first, t_last, deadline, retry_at;
  uint64_t t_idle;     /* when the connection last became IDLE */
  uint32_t chunks;
  uint32_t n_done;     /* responses completed on this connection (> 0: reused keep-alive) */
  int64_t usage_out, usage_in;
  bench_http_resp resp;
  char *rbuf;
  size_t rlen;
  bench_sse sse;
  char *body;          /* non-streamed OpenAI bodies (first BODY_KEEP bytes) */
  size_t body_len;
  bench_conv *cv;      /* --conversation: this user's conversation, else NULL */
} conn;

struct worker {
  bench_worker b; /* first: the loop, the sample, the open loop's arrivals (pacer.h) */
  bench_engine *e;
  conn *conns;
  int nconns;      /* slots */
  int target_open; /* closed loop: connections to keep open */
  int *idle;       /* stack of idle connection indices */
  int nidle;
  int connecting;
  int nclosed;     /* slots in C_CLOSED (lets the open loop skip the slot scan) */
};

struct bench_engine {
  bench_pacer p;
  bench_grpc_engine *grpc; /* --grpc: every call below forwards to grpc_engine.c */
};

static worker *worker_at(bench_engine *e, int i) { return (worker *)bench_pacer_worker(&e->p, i); }

const char *const bench_err_names[BENCH_ERR_N] = {"connect", "reset", "timeout", "protocol",
                                                  "http", "overload"};

/* ---- samples ---- */

bench_sample *bench_sample_create(void) {
  bench_sample *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->lat = bench_hist_create();
  s->ttft = bench_hist_create();
  s->itl = bench_hist_create();
  s->tpot = bench_hist_create();
  s->refused = bench_hist_create();
  if (!s->lat || !s->ttft || !s->itl || !s->tpot || !s->refused) {
    bench_sample_destroy(s);
    return NULL;
  }
  return s;
}

void bench_sample_destroy(bench_sample *s) {
  if (!s) return;
  bench_hist_destroy(s->lat);
  bench_hist_destroy(s->ttft);
  bench_hist_destroy(s->itl);
  bench_hist_destroy(s->tpot);
  bench_hist_destroy(s->refused);
  free(s);
}

void bench_sample_reset(bench_sample *s) {
  bench_hist_reset(s->lat);
  bench_hist_reset(s->ttft);
  bench_hist_reset(s->itl);
  bench_hist_reset(s->tpot);
  bench_hist_reset(s->refused);
  s->ok = s->bytes_in = s->tokens_out = s->tokens_in = 0;
  memset(s->err, 0, sizeof s->err);
  memset(s->status, 0, sizeof s->status);
  s->first_error[0] = 0;
}

void bench_sample_merge(bench_sample *d, const bench_sample *s) {
  bench_hist_merge(d->lat, s->lat);
  bench_hist_merge(d->ttft, s->ttft);
  bench_hist_merge(d->itl, s->itl);
  bench_hist_merge(d->tpot, s->tpot);
  bench_hist_merge(d->refused, s->refused);
  d->ok += s->ok;
  d->bytes_in += s->bytes_in;
  d->tokens_out += s->tokens_out;
  d->tokens_in += s->tokens_in;
  for (int i = 0; i < BENCH_ERR_N; i++) d->err[i] += s->err[i];
  for (int i = 0; i < 600; i++) d->status[i] += s->status[i];
  if (!d->first_error[0] && s->first_error[0])
    memcpy(d->first_error, s->first_error, sizeof d->first_error);
}

uint64_t bench_sample_errors(const bench_sample *s) {
  uint64_t n = 0;
  for (int i = 0; i < BENCH_ERR_N; i++) n += s->err[i];
  return n;
}

/* ---- helpers ---- */

static inline void count_finished(bench_engine *e) { bench_count_finished(&e->p); }

static void note_error(worker *w, int kind, const char *fmt, const char *detail) {
  bench_note_error(&w->b, kind, fmt, detail);
}

static void conn_set_events(conn *c, bool out) {
  bench_epoll_out(c->w->b.ep, c->fd, c, &c->want_out, out);
}

static void conn_open(conn *c);

static void conn_close(conn *c, uint64_t retry_delay_ns) {
  worker *w = c->w;
  if (c->fd >= 0) {
    epoll_ctl(w->b.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
  }
  if (c->state == C_CONNECTING) w->connecting--;
  if (c->state == C_IDLE) { /* remove from the idle stack */
    for (int i = 0; i < w->nidle; i++)
      if (&w->conns[w->idle[i]] == c) {
        w->idle[i] = w->idle[--w->nidle];
        break;
      }
  }
  c->fd = -1;
  if (c->state != C_CLOSED) w->nclosed++;
  c->state = C_CLOSED;
  c->want_out = false;
  c->retry_at = w->b.now + retry_delay_ns;
  /* closed loop: a dropped connection (Connection: close, reset) is replaced at once */
  if (!w->e->p.ls.open && !retry_delay_ns && !bench_pacer_stopping(&w->e->p))
    conn_open(c);
}

static void conn_open(conn *c) {
  worker *w = c->w;
  int fd = bench_connect_start(&w->b, &c->retry_at);
  if (fd < 0) return;
  c->fd = fd;
  c->want_out = true;
  c->rlen = 0;
  c->n_done = 0;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
  epoll_ctl(w->b.ep, EPOLL_CTL_ADD, fd, &ev);
  c->state = C_CONNECTING;
  w->nclosed--;
  w->connecting++;
}

static void conn_idle(conn *c) {
  c->state = C_IDLE;
  c->t_idle = c->w->b.now;
  c->w->idle[c->w->nidle++] = (int)(c - c->w->conns);
}

/* The connection broke (EOF, reset, send error) while c was BUSY. If it was a reused
 * keep-alive connection and nothing of the answer has arrived, the server closed it as idle
 * (see the file comment): hand the request back and reconnect. Returns false when the break
 * is a real error for the caller to count; on true, c is closed (and reopening). */
static bool conn_stale_retry(conn *c) {
  worker *w = c->w;
  bench_engine *e = w->e;
  /* reused, or (a conversation's user thought for a while) idle long enough for the server's
   * idle timeout: a connection used at once after connecting is never retried */
  bool idled = c->n_done > 0 || (c->cv && c->t_intended - c->t_idle > 1000000000u);
  if (c->state != C_BUSY || !idled || c->rlen > 0 || c->resp.header_done) return false;
  c->req_idx = (c->req_idx + e->p.rs->n - 1) % e->p.rs->n; /* resend the same variant */
  if (e->p.ls.open) { /* back to the front of the arrivals, same intended time */
    if (!bench_ring_unpop(&w->b, c->t_intended)) return false;
  } else {
    bench_unclaim(&w->b); /* claimed again by whichever connection is idle next */
  }
  conn_close(c, 0);
  return true;
}

/* Sends (the rest of) the current request. */
static void conn_write(conn *c) {
  const bench_req *r = c->req;
  while (c->sent < r->len) {
    ssize_t n = send(c->fd, r->data + c->sent, r->len - c->sent, MSG_NOSIGNAL);
    if (n > 0) {
      c->sent += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      conn_set_events(c, true);
      return;
    }
    if (conn_stale_retry(c)) return;
    note_error(c->w, BENCH_ERR_RESET, "send: %s", strerror(errno));
    count_finished(c->w->e);
    conn_close(c, 0);
    return;
  }
  conn_set_events(c, false);
}

static void conn_send(conn *c, uint64_t intended) {
  worker *w = c->w;
  const bench_reqset *rs = w->e->p.rs;
  c->req = &rs->v[c->req_idx];
  c->req_idx = (c->req_idx + 1) % rs->n;
  if (c->cv) {
    cinfer_status *st = bench_conv_build(c->cv, w->e->p.cfg, rs->system);
    if (st) { /* out of memory: counted, and the user tries again after thinking */
      note_error(w, BENCH_ERR_PROTOCOL, "%s", cinfer_status_message(st));
      cinfer_status_free(st);
      bench_conv_done(c->cv, w->e->p.cfg, false, w->b.now);
      conn_idle(c);
      return;
    }
    c->req = &c->cv->req;
  }
  c->sent = 0;
  c->t_intended = intended;
  c->deadline = w->b.now + (uint64_t)w->e->p.cfg->timeout_ms * 1000000u;
  c->t_first = c->t_last = 0;
  c->chunks = 0;
  c->usage_out = c->usage_in = -1;
  c->saw_done = false;
  c->body_len = 0;
  bench_http_resp_init(&c->resp, false);
  if (rs->stream) bench_sse_reset(&c->sse);
  c->state = C_BUSY;
  conn_write(c);
}

/* ---- response handling ---- */

static void on_sse_event(void *ud, const char *d, size_t n) {
  conn *c = ud;
  if (n == 6 && memcmp(d, "[DONE]", 6) == 0) {
    c->saw_done = true;
    return;
  }
  if (c->cv) bench_conv_on_event(c->cv, d, n);
  int64_t v;
  if (bench_json_peek_int(d, n, "completion_tokens", &v)) c->usage_out = v;
  if (bench_json_peek_int(d, n, "prompt_tokens", &v)) c->usage_in = v;
  if (bench_json_peek_nonempty_string(d, n, "content") ||
      bench_json_peek_nonempty_string(d, n, "text")) {
    uint64_t now = c->w->b.now;
    if (c->chunks == 0) c->t_first = now;
    else bench_hist_record(c->w->b.cur->itl, now - c->t_last);
    c->t_last = now;
    c->chunks++;
  }
}

static void on_body(void *ud, const char *p, size_t n) {
  conn *c = ud;
  if (c->resp.event_stream) {
    if (!bench_sse_feed(&c->sse, p, n, on_sse_event, c)) c->resp.error = "SSE line too long";
  } else if (c->body) {
    size_t k = n;
    if (k > BODY_KEEP - c->body_len) k = BODY_KEEP - c->body_len;
    memcpy(c->body + c->body_len, p, k);
    c->body_len += k;
  }
}

static void complete(conn *c) {
  worker *w = c->w;
  bench_sample *s = w->b.cur;
  int st = c->resp.status;
  count_finished(w->e);
  s->bytes_in += c->resp.body_bytes;
  if (c->cv) {
    if (st >= 200 && st <= 299 && !c->resp.event_stream && c->body_len) bench_conv_on_body(c->cv, c->body, c->body_len);
    bench_conv_done(c->cv, w->e->p.cfg, st >= 200 && st <= 299, w->b.now);
  }
  if (st < 200 || st > 299) {
    if (st == 429 || st == 503) bench_hist_record(s->refused, w->b.now - c->t_intended);
    if (st >= 0 && st < 600) s->status[st]++;
    s->err[BENCH_ERR_HTTP]++;
    if (!s->first_error[0])
      snprintf(s->first_error, sizeof s->first_error, "HTTP %d from %.150s", st, w->e->p.rs->path);
    return;
  }
  uint64_t e2e = w->b.now - c->t_intended;
  s->ok++;
  s->status[st]++;
  bench_hist_record(s->lat, e2e);
  if (!w->e->p.rs->openai) return;
  if (!c->resp.event_stream && c->body_len) {
    int64_t v;
    if (bench_json_peek_int(c->body, c->body_len, "completion_tokens", &v)) c->usage_out = v;
    if (bench_json_peek_int(c->body, c->body_len, "prompt_tokens", &v)) c->usage_in = v;
  }
  int64_t out = c->usage_out >= 0 ? c->usage_out : (int64_t)c->chunks;
  if (out > 0) s->tokens_out += (uint64_t)out;
  if (c->usage_in > 0) s->tokens_in += (uint64_t)c->usage_in;
  if (c->chunks > 0) {
    bench_hist_record(s->ttft, c->t_first - c->t_intended);
    if (out > 1) bench_hist_record(s->tpot, (c->t_last - c->t_first) / (uint64_t)(out - 1));
  }
}

/* After a response: keep the connection or close it, then it is ready for the next. */
static void finish_response(conn *c, size_t leftover) {
  complete(c);
  c->n_done++;
  if (c->resp.conn_close || leftover) {
    /* leftover bytes would be an unsolicited response; we never pipeline */
    conn_close(c, 0);
    return;
  }
  conn_idle(c);
}

static void conn_fail(conn *c, int kind, const char *what) {
  if (c->state == C_BUSY && c->cv) bench_conv_done(c->cv, c->w->e->p.cfg, false, c->w->b.now);
  if (c->state == C_BUSY) {
    note_error(c->w, kind, "%s", what);
    count_finished(c->w->e);
  }
  conn_close(c, 0);
}

static void conn_read(conn *c) {
  for (;;) {
    ssize_t n = recv(c->fd, c->rbuf + c->rlen, RBUF_SIZE - c->rlen, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (conn_stale_retry(c)) return;
      char msg[120];
      snprintf(msg, sizeof msg, "recv: %s", strerror(errno));
      conn_fail(c, BENCH_ERR_RESET, msg);
      return;
    }
    if (n == 0) {
      if (c->state == C_BUSY && bench_http_eof(&c->resp) == BENCH_HTTP_DONE) {
        complete(c);
        conn_close(c, 0);
        return;
      }
      if (conn_stale_retry(c)) return;
      conn_fail(c, BENCH_ERR_RESET, c->state == C_BUSY ? "server closed the connection before the response ended"
                                                       : "server closed the connection");
      return;
    }
    if (c->state != C_BUSY) { /* bytes nobody asked for */
      conn_fail(c, BENCH_ERR_PROTOCOL, "unsolicited bytes from the server");
      return;
    }
    size_t have = c->rlen + (size_t)n, used;
    bench_http_rc rc = bench_http_feed(&c->resp, c->rbuf, have, &used, on_body, c, MAX_HEADER);
    if (rc == BENCH_HTTP_ERROR || c->resp.error) {
      conn_fail(c, BENCH_ERR_PROTOCOL, c->resp.error ? c->resp.error : "bad response");
      return;
    }
    if (rc == BENCH_HTTP_DONE) {
      c->rlen = 0;
      finish_response(c, have - used);
      return;
    }
    /* MORE: keep unconsumed (header) bytes at the front */
    if (used && used < have) memmove(c->rbuf, c->rbuf + used, have - used);
    c->rlen = have - used;
    if ((size_t)n < RBUF_SIZE - (have - (size_t)n)) return; /* short read: socket drained */
  }
}

static void conn_event(conn *c, uint32_t ev) {
  if (c->state == C_CONNECTING) {
    int err = bench_connect_result(c->fd, ev);
    if (err) {
      note_error(c->w, BENCH_ERR_CONNECT, "connect: %s", strerror(err));
      conn_close(c, 100000000u);
      return;
    }
    c->w->connecting--;
    conn_set_events(c, false);
    conn_idle(c);
    return;
  }
  if (ev & EPOLLOUT && c->state == C_BUSY && c->sent < c->req->len) conn_write(c);
  if (c->fd >= 0 && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))) conn_read(c);
}

/* ---- scheduling (the pacer's callbacks) ---- */

static void dispatch(bench_worker *bw) {
  worker *w = (worker *)bw;
  bench_engine *e = w->e;
  if (!e->p.ls.open) {
    /* backwards, so that the last entry moved into a sent one's place was already seen */
    for (int i = w->nidle - 1; i >= 0; i--) {
      conn *c = &w->conns[w->idle[i]];
      if (c->cv && c->cv->ready_at > w->b.now) continue; /* the user is thinking */
      if (!bench_claim(bw)) return;
      w->idle[i] = w->idle[--w->nidle];
      conn_send(c, w->b.now);
    }
    return;
  }
  bench_pace_arrivals(bw); /* open loop: arrivals due now go into the ring */
  uint64_t t;
  while (w->nidle > 0 && bench_ring_pop(bw, &t)) conn_send(&w->conns[w->idle[--w->nidle]], t);
  /* more waiting than connections on the way: open more */
  for (int i = 0; i < w->nconns && w->nclosed > 0 && (size_t)w->connecting < bw->ring_len; i++) {
    conn *c = &w->conns[i];
    if (c->state == C_CLOSED && c->retry_at <= w->b.now) conn_open(c);
  }
}

static void scan_timeouts(bench_worker *bw) {
  worker *w = (worker *)bw;
  for (int i = 0; i < w->nconns; i++) {
    conn *c = &w->conns[i];
    if (c->state == C_BUSY && w->b.now > c->deadline) {
      char msg[80];
      snprintf(msg, sizeof msg, "no response within %d ms", w->e->p.cfg->timeout_ms);
      conn_fail(c, BENCH_ERR_TIMEOUT, msg);
    } else if (!w->e->p.ls.open && c->state == C_CLOSED && c->retry_at <= w->b.now &&
               !bench_pacer_stopping(&w->e->p)) {
      conn_open(c);
    }
  }
}

static int busy_count(bench_worker *bw) {
  worker *w = (worker *)bw;
  int n = 0;
  for (int i = 0; i < w->nconns; i++) n += w->conns[i].state == C_BUSY;
  return n;
}

static void worker_begin(bench_worker *bw) {
  worker *w = (worker *)bw;
  bench_engine *e = w->e;
  if (!e->p.ls.open)
    for (int i = 0; i < w->target_open; i++) conn_open(&w->conns[i]);
  for (int i = 0; i < w->nconns; i++)
    if (w->conns[i].cv) bench_conv_start(w->conns[i].cv, e->p.cfg, e->p.rs->system, w->b.now);
}

static void worker_event(bench_worker *bw, void *ptr, uint32_t ev) {
  (void)bw;
  conn_event(ptr, ev);
}

static void worker_end(bench_worker *bw) {
  worker *w = (worker *)bw;
  for (int i = 0; i < w->nconns; i++) {
    conn *c = &w->conns[i];
    if (c->state == C_BUSY) conn_fail(c, BENCH_ERR_TIMEOUT, "still in flight when the level ended");
    else if (c->fd >= 0) conn_close(c, 0);
  }
}

static const bench_worker_ops http_ops = {worker_begin, worker_event, scan_timeouts,
                                          dispatch,     busy_count,   worker_end};

/* ---- lifecycle ---- */

static void free_engine(bench_engine *e) {
  if (!e) return;
  for (int i = 0; i < e->p.nw; i++) {
    worker *w = worker_at(e, i);
    if (w->conns)
      for (int k = 0; k < w->nconns; k++) {
        free(w->conns[k].rbuf);
        free(w->conns[k].body);
        bench_sse_free(&w->conns[k].sse);
        if (w->conns[k].cv) bench_conv_free(w->conns[k].cv);
        free(w->conns[k].cv);
      }
    free(w->conns);
    free(w->idle);
  }
  bench_pacer_free(&e->p);
  free(e);
}

cinfer_status *bench_engine_start(const bench_config *cfg, const bench_addr *a,
                                  const bench_reqset *rs, const bench_loadspec *ls,
                                  bench_engine **out) {
  *out = NULL;
  bench_engine *e = calloc(1, sizeof *e);
  if (!e) return cinfer_status_oom(NULL);
  if (cfg->grpc) {
    cinfer_status *gst = bench_grpc_engine_start(cfg, a, rs, ls, &e->grpc);
    if (gst) free(e);
    else *out = e;
    return gst;
  }
  int total_conns = ls->open ? cfg->max_connections : ls->concurrency;
  int nw = bench_pacer_threads(cfg, total_conns);
  cinfer_status *st = bench_pacer_init(&e->p, cfg, a, rs, ls, nw, sizeof(worker), &http_ops);
  for (int i = 0; i < e->p.nw && !st; i++) {
    worker *w = worker_at(e, i);
    w->e = e;
    /* connections: split the total, the first workers take the remainder */
    int share = total_conns / nw + (i < total_conns % nw ? 1 : 0);
    w->nconns = share;
    w->nclosed = share;
    w->target_open = ls->open ? 0 : share;
    w->conns = calloc((size_t)share, sizeof *w->conns);
    w->idle = calloc((size_t)share, sizeof *w->idle);
    if (!w->conns || !w->idle) {
      st = cinfer_status_new(CINFER_INTERNAL, "out of memory or file descriptors for worker %d", i);
      break;
    }
    for (int k = 0; k < share && !st; k++) {
      conn *c = &w->conns[k];
      c->fd = -1;
      c->w = w;
      c->req_idx = ((size_t)i * 7919u + (size_t)k) % rs->n;
      c->rbuf = malloc(RBUF_SIZE);
      if (!c->rbuf) st = cinfer_status_oom("for receive buffers");
      if (!st && rs->stream) st = bench_sse_init(&c->sse, SSE_CAP);
      if (!st && rs->openai && !rs->stream && !(c->body = malloc(BODY_KEEP)))
        st = cinfer_status_oom("for body buffers");
      if (!st && cfg->conversation) {
        if (!(c->cv = malloc(sizeof *c->cv))) st = cinfer_status_oom("for conversations");
        else bench_conv_init(c->cv, cfg->seed * 1000003u + (uint64_t)i * 65537u + (uint64_t)k);
      }
    }
  }
  if (!st) st = bench_pacer_run(&e->p);
  if (st) {
    free_engine(e);
    return st;
  }
  *out = e;
  return NULL;
}

/* The workers' pacer: this engine's, or the gRPC engine's. */
static bench_pacer *pacer_of(bench_engine *e) {
  return e->grpc ? bench_grpc_engine_pacer(e->grpc) : &e->p;
}

void bench_engine_collect(bench_engine *e, bench_sample *into) {
  bench_pacer_collect(pacer_of(e), into);
}

bool bench_engine_done(bench_engine *e) { return bench_pacer_done(pacer_of(e)); }

int bench_engine_threads(const bench_engine *e) {
  return e->grpc ? bench_grpc_engine_pacer(e->grpc)->nw : e->p.nw;
}

void bench_engine_stop(bench_engine *e) {
  if (e) bench_pacer_stop(pacer_of(e));
}

void bench_engine_destroy(bench_engine *e) {
  if (e && e->grpc) {
    bench_grpc_engine_destroy(e->grpc);
    free(e);
    return;
  }
  bench_engine_stop(e);
  free_engine(e);
}
