/* grpc_engine.c: the load generator's gRPC hot path (`cinfer bench --grpc`). The same
 * workers as engine.c (pacer.c: one thread per core, each with its own epoll instance, the
 * loop, the claim, the open loop's arrivals) with connections of its own: each is an nghttp2
 * client session (h2c) that carries up to --streams-per-connection calls at once ("slots").
 *
 * A slot is one user of the closed loop (or one request in flight in the open loop):
 *   unary (ModelInfer):  IDLE --submit a stream--> BUSY --stream closed--> IDLE; the call
 *                        succeeded when :status was 200 and grpc-status 0.
 *   --streaming (ModelStreamInfer): the slot keeps one long stream open and writes its
 *                        requests into it one at a time (the data source is deferred
 *                        between requests); every request asks for the empty final
 *                        response, so a request is done at the response whose
 *                        triton_final_response is true, after 0..N others (a decoupled
 *                        model's). Responses before it are recorded as time to first
 *                        response and gaps between responses (the ttft / itl columns;
 *                        "tokens" counts responses). An error_message answer fails the
 *                        request and the stream is reset, so that a late answer can
 *                        never be taken for the next request's.
 * Connection: CLOSED --connect--> CONNECTING --writable--> READY (slots IDLE); an error or
 * GOAWAY fails the slots in flight (reset) and closes it; the closed loop reconnects at
 * once (after 100 ms when the connect itself failed).
 * Writes: whatever nghttp2 has to send goes into the connection's output buffer at the end
 * of each event and of each dispatch, one send() for all the frames of a batch.
 * Latency is from the intended send time to the completing frame, as in engine.c. Nothing
 * is allocated per request except in nghttp2 and in decoding streamed responses. */
#include "bench/grpc_int.h"
#include "bench/pacer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc_service.pb-c.h"

#define RBUF_SIZE (64 * 1024)
#define MAX_MSG ((size_t)1 << 30)

enum { C_CLOSED = 0, C_CONNECTING, C_READY };
enum { S_DOWN = 0, S_IDLE, S_BUSY };

typedef struct gworker gworker;
typedef struct gconn gconn;

typedef struct gslot {
  gconn *g;
  int state;
  int32_t sid;          /* the stream in use (0: none) */
  bool deferred;        /* streaming: the data source waits for the next request */
  size_t req_idx;
  const bench_req *req;
  size_t sent;          /* bytes of req handed to nghttp2 */
  uint64_t t_intended, t_first, t_last, deadline;
  uint32_t responses;   /* streamed responses of this request */
  uint64_t bytes;
  int http_status, grpc_status;
  char grpc_msg[160];
  /* message reassembly */
  uint8_t hdr[5];
  size_t hdr_have;
  size_t msg_len;
  cbuf msg;
  bool in_msg;
} gslot;

struct gconn {
  int fd;
  int state;
  bool want_out;
  gworker *w;
  nghttp2_session *h2;
  gslot *slots;
  int nslots;
  cbuf out;
  size_t out_off;
  uint64_t retry_at;
};

struct gworker {
  bench_worker b; /* first: the loop, the sample, the open loop's arrivals (pacer.h) */
  bench_grpc_engine *e;
  gconn *conns;
  int nconns;
  gslot **idle;
  int nidle;
  int nslots;
  nghttp2_nv nv[BENCH_GRPC_NV_MAX];
  int nnv;
  char scratch[BENCH_GRPC_HDR_SCRATCH];
  uint8_t *rbuf;
};

struct bench_grpc_engine {
  bench_pacer p;
  char path[80];
};

static gworker *worker_at(bench_grpc_engine *e, int i) {
  return (gworker *)bench_pacer_worker(&e->p, i);
}

static nghttp2_session_callbacks *g_cb; /* made once in start (immutable after) */
static pthread_once_t g_cb_once = PTHREAD_ONCE_INIT;

/* ---- accounting ---- */

static inline void count_finished(bench_grpc_engine *e) { bench_count_finished(&e->p); }

static void note_error(gworker *w, int kind, const char *fmt, const char *detail) {
  bench_note_error(&w->b, kind, fmt, detail);
}

static void slot_idle(gslot *s) {
  gworker *w = s->g->w;
  s->state = S_IDLE;
  s->req = NULL;
  w->idle[w->nidle++] = s;
}

static void slot_unidle(gslot *s) {
  gworker *w = s->g->w;
  for (int i = 0; i < w->nidle; i++)
    if (w->idle[i] == s) {
      w->idle[i] = w->idle[--w->nidle];
      return;
    }
}

/* The request of a BUSY slot ended in an error. */
static void slot_fail(gslot *s, int kind, const char *what) {
  gworker *w = s->g->w;
  note_error(w, kind, "%s", what);
  count_finished(w->e);
}

static void slot_ok(gslot *s) {
  gworker *w = s->g->w;
  bench_sample *sm = w->b.cur;
  count_finished(w->e);
  sm->ok++;
  sm->status[200]++;
  sm->bytes_in += s->bytes;
  bench_hist_record(sm->lat, w->b.now - s->t_intended);
  if (w->e->p.cfg->grpc_stream) {
    sm->tokens_out += s->responses;
    if (s->responses) {
      bench_hist_record(sm->ttft, s->t_first - s->t_intended);
      if (s->responses > 1)
        bench_hist_record(sm->tpot, (s->t_last - s->t_first) / (uint64_t)(s->responses - 1));
    }
  }
}

/* ---- connections ---- */

static void conn_set_events(gconn *g, bool out) {
  bench_epoll_out(g->w->b.ep, g->fd, g, &g->want_out, out);
}

static void conn_open(gconn *g);

static void conn_close(gconn *g, const char *why, uint64_t retry_delay_ns) {
  gworker *w = g->w;
  for (int i = 0; i < g->nslots; i++) {
    gslot *s = &g->slots[i];
    if (s->state == S_BUSY) slot_fail(s, BENCH_ERR_RESET, why);
    if (s->state == S_IDLE) slot_unidle(s);
    s->state = S_DOWN;
    s->sid = 0;
    s->deferred = false;
    s->in_msg = false;
    s->hdr_have = 0;
  }
  g->state = C_CLOSED; /* before the session goes: its callbacks then see a dead connection */
  if (g->h2) nghttp2_session_del(g->h2);
  g->h2 = NULL;
  if (g->fd >= 0) {
    epoll_ctl(w->b.ep, EPOLL_CTL_DEL, g->fd, NULL);
    close(g->fd);
  }
  g->fd = -1;
  g->state = C_CLOSED;
  g->want_out = false;
  g->out.len = 0;
  g->out_off = 0;
  g->retry_at = w->b.now + retry_delay_ns;
  if (!retry_delay_ns && !bench_pacer_stopping(&w->e->p)) conn_open(g);
}

static void conn_open(gconn *g) {
  gworker *w = g->w;
  int fd = bench_connect_start(&w->b, &g->retry_at);
  if (fd < 0) return;
  if (nghttp2_session_client_new(&g->h2, g_cb, g)) {
    note_error(w, BENCH_ERR_CONNECT, "%s", "out of memory for an HTTP/2 session");
    close(fd);
    g->retry_at = w->b.now + 100000000u;
    return;
  }
  /* big windows: the generator reads everything at once, so flow control should never be
   * what limits a request (a 4 MiB tensor answer fits the stream window) */
  nghttp2_settings_entry st[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16u << 20}};
  nghttp2_submit_settings(g->h2, NGHTTP2_FLAG_NONE, st, 2);
  nghttp2_session_set_local_window_size(g->h2, NGHTTP2_FLAG_NONE, 0, 64u << 20);
  g->fd = fd;
  g->want_out = true;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = g};
  epoll_ctl(w->b.ep, EPOLL_CTL_ADD, fd, &ev);
  g->state = C_CONNECTING;
}

/* Moves what nghttp2 wants to send into the output buffer and writes it. */
static void conn_flush(gconn *g) {
  if (g->state != C_READY) return;
  for (;;) {
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(g->h2, &p);
    if (n < 0) {
      conn_close(g, nghttp2_strerror((int)n), 0);
      return;
    }
    if (n == 0) break;
    /* gathered: nghttp2 hands out a frame or two at a time, and one send() per frame
     * would split a batch of requests into many segments */
    cbuf_put(&g->out, p, (size_t)n);
    if (g->out.oom) {
      conn_close(g, "out of memory for the output buffer", 0);
      return;
    }
  }
  while (g->out_off < g->out.len) {
    ssize_t k = send(g->fd, g->out.data + g->out_off, g->out.len - g->out_off, MSG_NOSIGNAL);
    if (k > 0) {
      g->out_off += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      conn_set_events(g, true);
      return;
    }
    char msg[96];
    snprintf(msg, sizeof msg, "send: %s", strerror(errno));
    conn_close(g, msg, 0);
    return;
  }
  g->out.len = g->out_off = 0;
  conn_set_events(g, false);
  if (!nghttp2_session_want_read(g->h2) && !nghttp2_session_want_write(g->h2))
    conn_close(g, "the server ended the HTTP/2 session (GOAWAY)", 0);
}

/* ---- nghttp2 callbacks ---- */

static gslot *slot_of(nghttp2_session *h2, int32_t sid) {
  return nghttp2_session_get_stream_user_data(h2, sid);
}

static ssize_t on_read(nghttp2_session *h2, int32_t sid, uint8_t *buf, size_t len,
                       uint32_t *flags, nghttp2_data_source *src, void *ud) {
  (void)h2;
  (void)sid;
  (void)ud;
  gslot *s = src->ptr;
  if (!s->req || s->sent >= s->req->len) {
    s->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  size_t n = s->req->len - s->sent;
  if (n > len) n = len;
  memcpy(buf, s->req->data + s->sent, n);
  s->sent += n;
  if (s->sent == s->req->len && !s->g->w->e->p.cfg->grpc_stream) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  (void)flags;
  (void)ud;
  gslot *s = slot_of(h2, f->hd.stream_id);
  if (!s) return 0;
  if (nlen == 7 && !memcmp(name, ":status", 7)) s->http_status = atoi((const char *)value);
  else if (nlen == 11 && !memcmp(name, "grpc-status", 11)) s->grpc_status = atoi((const char *)value);
  else if (nlen == 12 && !memcmp(name, "grpc-message", 12))
    snprintf(s->grpc_msg, sizeof s->grpc_msg, "%.*s", (int)vlen, (const char *)value);
  return 0;
}

/* Streaming: one whole ModelStreamInferResponse. */
static void stream_message(gslot *s, const uint8_t *p, size_t n) {
  gworker *w = s->g->w;
  if (s->state != S_BUSY) return; /* answer to a request that already failed */
  Inference__ModelStreamInferResponse *m = inference__model_stream_infer_response__unpack(NULL, n, p);
  if (!m) {
    slot_fail(s, BENCH_ERR_PROTOCOL, "a streamed response does not decode");
    nghttp2_submit_rst_stream(s->g->h2, NGHTTP2_FLAG_NONE, s->sid, NGHTTP2_CANCEL);
    s->state = S_DOWN; /* idle again when the reset stream closes */
    return;
  }
  if (m->error_message && m->error_message[0]) {
    char msg[200];
    snprintf(msg, sizeof msg, "stream error: %.180s", m->error_message);
    slot_fail(s, BENCH_ERR_HTTP, msg);
    inference__model_stream_infer_response__free_unpacked(m, NULL);
    nghttp2_submit_rst_stream(s->g->h2, NGHTTP2_FLAG_NONE, s->sid, NGHTTP2_CANCEL);
    s->state = S_DOWN;
    return;
  }
  bool final = false;
  const Inference__ModelInferResponse *r = m->infer_response;
  for (size_t i = 0; r && i < r->n_parameters; i++) {
    const Inference__ModelInferResponse__ParametersEntry *pe = r->parameters[i];
    if (pe->key && !strcmp(pe->key, "triton_final_response") && pe->value &&
        pe->value->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
      final = pe->value->bool_param;
  }
  if (r && r->n_outputs) {
    if (s->responses == 0) s->t_first = w->b.now;
    else bench_hist_record(w->b.cur->itl, w->b.now - s->t_last);
    s->t_last = w->b.now;
    s->responses++;
  }
  inference__model_stream_infer_response__free_unpacked(m, NULL);
  if (final) {
    slot_ok(s);
    slot_idle(s);
  }
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t sid, const uint8_t *p, size_t n,
                   void *ud) {
  (void)flags;
  (void)ud;
  gslot *s = slot_of(h2, sid);
  if (!s) return 0;
  s->bytes += n;
  bool stream = s->g->w->e->p.cfg->grpc_stream;
  while (n > 0) {
    if (!s->in_msg) {
      size_t k = 5 - s->hdr_have;
      if (k > n) k = n;
      memcpy(s->hdr + s->hdr_have, p, k);
      s->hdr_have += k, p += k, n -= k;
      if (s->hdr_have < 5) return 0;
      s->hdr_have = 0;
      if (s->hdr[0] != 0) { /* we never offer an encoding, so nothing may be compressed */
        if (s->state == S_BUSY) slot_fail(s, BENCH_ERR_PROTOCOL, "compressed response without grpc-accept-encoding");
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, sid, NGHTTP2_PROTOCOL_ERROR);
        if (s->state == S_BUSY) s->state = S_DOWN; /* made idle when the stream closes */
        return 0;
      }
      s->msg_len = (size_t)s->hdr[1] << 24 | (size_t)s->hdr[2] << 16 | (size_t)s->hdr[3] << 8 | s->hdr[4];
      s->in_msg = true;
      s->msg.len = 0;
      if (s->msg_len == 0 && stream) {
        s->in_msg = false;
        stream_message(s, (const uint8_t *)"", 0);
      } else if (s->msg_len == 0) {
        s->in_msg = false;
      }
      continue;
    }
    size_t k = s->msg_len - s->msg.len;
    if (k > n) k = n;
    if (stream) {
      if (s->msg.len == 0 && k == s->msg_len) { /* whole in this chunk: no copy */
        s->in_msg = false;
        stream_message(s, p, k);
        p += k, n -= k;
        continue;
      }
      cbuf_put(&s->msg, p, k);
      if (s->msg.oom) return NGHTTP2_ERR_CALLBACK_FAILURE;
    } else {
      s->msg.len += k; /* unary: the answer is counted, not kept */
    }
    p += k, n -= k;
    if (s->msg.len == s->msg_len) {
      s->in_msg = false;
      if (stream) stream_message(s, (const uint8_t *)s->msg.data, s->msg.len);
      s->msg.len = 0;
    }
  }
  return 0;
}

static int on_close(nghttp2_session *h2, int32_t sid, uint32_t err, void *ud) {
  (void)ud;
  gslot *s = slot_of(h2, sid);
  if (!s || s->sid != sid || s->g->state != C_READY) return 0;
  s->sid = 0;
  s->deferred = false;
  s->in_msg = false;
  s->hdr_have = 0;
  gworker *w = s->g->w;
  if (s->state == S_DOWN) { /* failed already (protocol error): back to work */
    slot_idle(s);
    return 0;
  }
  if (s->state != S_BUSY) return 0;
  if (!w->e->p.cfg->grpc_stream && err == NGHTTP2_NO_ERROR && s->http_status == 200 && s->grpc_status == 0) {
    slot_ok(s);
  } else {
    char msg[200];
    if (s->grpc_status > 0)
      snprintf(msg, sizeof msg, "gRPC %s: %.150s", bench_grpc_status_name(s->grpc_status), s->grpc_msg);
    else if (err != NGHTTP2_NO_ERROR)
      snprintf(msg, sizeof msg, "stream reset by the server (%s)", nghttp2_http2_strerror(err));
    else if (w->e->p.cfg->grpc_stream)
      snprintf(msg, sizeof msg, "the server ended the stream before the final response");
    else
      snprintf(msg, sizeof msg, "HTTP/2 status %d without grpc-status", s->http_status);
    slot_fail(s, s->grpc_status > 0 ? BENCH_ERR_HTTP : BENCH_ERR_RESET, msg);
  }
  slot_idle(s);
  return 0;
}

static void make_callbacks(void) {
  if (nghttp2_session_callbacks_new(&g_cb)) return;
  nghttp2_session_callbacks_set_on_header_callback(g_cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g_cb, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(g_cb, on_close);
}

/* ---- sending ---- */

static void slot_send(gslot *s, uint64_t intended) {
  gworker *w = s->g->w;
  bench_grpc_engine *e = w->e;
  s->req = &e->p.rs->v[s->req_idx];
  s->req_idx = (s->req_idx + 1) % e->p.rs->n;
  s->sent = 0;
  s->t_intended = intended;
  s->deadline = w->b.now + (uint64_t)e->p.cfg->timeout_ms * 1000000u;
  s->t_first = s->t_last = 0;
  s->responses = 0;
  s->bytes = 0;
  s->http_status = 0;
  s->grpc_status = -1;
  s->grpc_msg[0] = 0;
  s->state = S_BUSY;
  if (s->sid) { /* streaming: the long stream is open */
    if (s->deferred) {
      s->deferred = false;
      nghttp2_session_resume_data(s->g->h2, s->sid);
    }
    return;
  }
  nghttp2_data_provider dp = {.source.ptr = s, .read_callback = on_read};
  int32_t sid = nghttp2_submit_request(s->g->h2, NULL, w->nv, (size_t)w->nnv, &dp, s);
  if (sid < 0) {
    slot_fail(s, BENCH_ERR_PROTOCOL, nghttp2_strerror(sid));
    slot_idle(s);
    return;
  }
  s->sid = sid;
}

/* ---- events ---- */

static void conn_event(gconn *g, uint32_t ev) {
  gworker *w = g->w;
  if (g->state == C_CONNECTING) {
    int err = bench_connect_result(g->fd, ev);
    if (err) {
      note_error(w, BENCH_ERR_CONNECT, "connect: %s", strerror(err));
      conn_close(g, "connect failed", 100000000u);
      return;
    }
    g->state = C_READY; /* EPOLLOUT stays armed until conn_flush has drained the preface */
    for (int i = 0; i < g->nslots; i++) slot_idle(&g->slots[i]);
    conn_flush(g);
    return;
  }
  if (g->state != C_READY) return;
  if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
    for (;;) {
      ssize_t n = recv(g->fd, w->rbuf, RBUF_SIZE, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s", n == 0 ? "server closed the connection" : strerror(errno));
        conn_close(g, msg, 0);
        return;
      }
      ssize_t used = nghttp2_session_mem_recv(g->h2, w->rbuf, (size_t)n);
      if (used < 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "HTTP/2: %s", nghttp2_strerror((int)used));
        conn_close(g, msg, 0);
        return;
      }
      if (n < RBUF_SIZE) break;
    }
  }
  conn_flush(g);
}

static void dispatch(bench_worker *bw) {
  gworker *w = (gworker *)bw;
  if (!w->e->p.ls.open) {
    while (w->nidle > 0 && bench_claim(bw)) slot_send(w->idle[--w->nidle], w->b.now);
  } else {
    bench_pace_arrivals(bw);
    uint64_t t;
    while (w->nidle > 0 && bench_ring_pop(bw, &t)) slot_send(w->idle[--w->nidle], t);
  }
  for (int i = 0; i < w->nconns; i++) conn_flush(&w->conns[i]);
}

static void scan_timeouts(bench_worker *bw) {
  gworker *w = (gworker *)bw;
  for (int i = 0; i < w->nconns; i++) {
    gconn *g = &w->conns[i];
    if (g->state == C_CLOSED && g->retry_at <= w->b.now && !bench_pacer_stopping(&w->e->p)) {
      conn_open(g);
      continue;
    }
    for (int k = 0; k < g->nslots; k++) {
      gslot *s = &g->slots[k];
      if (s->state != S_BUSY || w->b.now <= s->deadline) continue;
      char msg[80];
      snprintf(msg, sizeof msg, "no response within %d ms", w->e->p.cfg->timeout_ms);
      slot_fail(s, BENCH_ERR_TIMEOUT, msg);
      nghttp2_submit_rst_stream(g->h2, NGHTTP2_FLAG_NONE, s->sid, NGHTTP2_CANCEL);
      s->state = S_DOWN; /* idle again when the reset stream closes */
    }
  }
}

static int busy_count(bench_worker *bw) {
  gworker *w = (gworker *)bw;
  int n = 0;
  for (int i = 0; i < w->nconns; i++)
    for (int k = 0; k < w->conns[i].nslots; k++) n += w->conns[i].slots[k].state == S_BUSY;
  return n;
}

static void worker_begin(bench_worker *bw) {
  gworker *w = (gworker *)bw;
  for (int i = 0; i < w->nconns; i++) conn_open(&w->conns[i]);
}

static void worker_event(bench_worker *bw, void *ptr, uint32_t ev) {
  (void)bw;
  conn_event(ptr, ev);
}

static void worker_end(bench_worker *bw) {
  gworker *w = (gworker *)bw;
  for (int i = 0; i < w->nconns; i++) {
    gconn *g = &w->conns[i];
    for (int k = 0; k < g->nslots; k++)
      if (g->slots[k].state == S_BUSY) {
        slot_fail(&g->slots[k], BENCH_ERR_TIMEOUT, "still in flight when the level ended");
        g->slots[k].state = S_DOWN;
      }
    if (g->fd >= 0 || g->h2) conn_close(g, "level ended", 1); /* no reconnect: stop is set */
  }
}

static const bench_worker_ops grpc_ops = {worker_begin, worker_event, scan_timeouts,
                                          dispatch,     busy_count,   worker_end};

/* ---- lifecycle ---- */

static void free_engine(bench_grpc_engine *e) {
  if (!e) return;
  for (int i = 0; i < e->p.nw; i++) {
    gworker *w = worker_at(e, i);
    for (int k = 0; w->conns && k < w->nconns; k++) {
      gconn *g = &w->conns[k];
      if (g->h2) nghttp2_session_del(g->h2);
      if (g->fd >= 0) close(g->fd);
      for (int j = 0; g->slots && j < g->nslots; j++) cbuf_free(&g->slots[j].msg);
      free(g->slots);
      cbuf_free(&g->out);
    }
    free(w->conns);
    free(w->idle);
    free(w->rbuf);
  }
  bench_pacer_free(&e->p);
  free(e);
}

cinfer_status *bench_grpc_engine_start(const bench_config *cfg, const bench_addr *a,
                                       const bench_reqset *rs, const bench_loadspec *ls,
                                       bench_grpc_engine **out) {
  *out = NULL;
  pthread_once(&g_cb_once, make_callbacks);
  if (!g_cb) return cinfer_status_oom("for HTTP/2 callbacks");
  bench_grpc_engine *e = calloc(1, sizeof *e);
  if (!e) return cinfer_status_oom(NULL);
  snprintf(e->path, sizeof e->path, "/inference.GRPCInferenceService/%s",
           cfg->grpc_stream ? "ModelStreamInfer" : "ModelInfer");
  /* closed loop: one connection per user (as HTTP) unless asked; open loop: the
   * --max-connections requests in flight share connections, 32 streams each (the server
   * allows 128), instead of opening a thousand connections at the start */
  int per = cfg->streams_per_conn > 0 ? cfg->streams_per_conn : ls->open ? 32 : 1;
  int total_slots = ls->open ? cfg->max_connections : ls->concurrency;
  int total_conns = (total_slots + per - 1) / per;
  int nw = bench_pacer_threads(cfg, total_conns);
  cinfer_status *st = bench_pacer_init(&e->p, cfg, a, rs, ls, nw, sizeof(gworker), &grpc_ops);
  int slots_left = total_slots;
  for (int i = 0; i < e->p.nw && !st; i++) {
    gworker *w = worker_at(e, i);
    w->e = e;
    int nconn = total_conns / nw + (i < total_conns % nw ? 1 : 0);
    w->nconns = nconn;
    w->conns = calloc((size_t)nconn, sizeof *w->conns);
    w->idle = calloc((size_t)nconn * (size_t)per, sizeof *w->idle);
    w->rbuf = malloc(RBUF_SIZE);
    w->nnv = bench_grpc_headers(cfg, e->path, w->nv, BENCH_GRPC_NV_MAX, w->scratch, sizeof w->scratch);
    if (!w->conns || !w->idle || !w->rbuf) {
      st = cinfer_status_new(CINFER_INTERNAL, "out of memory or file descriptors for worker %d", i);
      break;
    }
    for (int k = 0; k < nconn && !st; k++) {
      gconn *g = &w->conns[k];
      g->fd = -1;
      g->w = w;
      /* the last connections of the last worker take what is left */
      int ns = slots_left < per ? slots_left : per;
      if (i == nw - 1 && k == nconn - 1) ns = slots_left;
      slots_left -= ns;
      g->nslots = ns;
      w->nslots += ns;
      g->slots = calloc((size_t)(ns > 0 ? ns : 1), sizeof *g->slots);
      if (!g->slots) {
        st = cinfer_status_oom("for gRPC slots");
        break;
      }
      for (int j = 0; j < ns; j++) {
        g->slots[j].g = g;
        g->slots[j].req_idx = ((size_t)i * 7919u + (size_t)k * 131u + (size_t)j) % rs->n;
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

bench_pacer *bench_grpc_engine_pacer(bench_grpc_engine *e) { return &e->p; }

void bench_grpc_engine_destroy(bench_grpc_engine *e) {
  if (e) bench_pacer_stop(&e->p);
  free_engine(e);
}
