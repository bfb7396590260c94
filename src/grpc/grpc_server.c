/* grpc_server.c: gRPC over HTTP/2 (nghttp2) on cinfer's event loops. See grpc.h and
 * docs/design/grpc.md.
 *
 * Threads: n loops, each with its own SO_REUSEPORT listener; a connection lives on the
 * loop that accepted it and everything about it (nghttp2 session, streams, ops) is touched
 * only there. Model workers reach a connection only through loop_post to its loop.
 *
 * Lifetimes:
 *   gconn   refs = 1 while the socket is open + 1 per attached op. conn_close deletes the
 *           nghttp2 session and every stream (detaching their ops); the struct is freed at
 *           refs == 0, so an op finishing later still finds its loop and connection.
 *   gstream created on a request's HEADERS, freed by nghttp2's stream-close callback (or
 *           conn_close). Closing detaches its ops (each on_detach cancels its request).
 *   gop     owned by the handler's object; attached ops count in grpc_server.inflight,
 *           which grpc_server_destroy waits to reach zero.
 *
 * Stream states: receiving (DATA buffered in `in`, framed into messages; unary messages
 * wait for END_STREAM) -> finished (trailers queued; input that still arrives is
 * discarded) -> closed by nghttp2. Output: framed messages queue in `out`; the data
 * provider drains it and defers when empty; at `finished` with `out` drained it ends the
 * DATA and submits the trailers. An RPC that fails before sending anything is answered
 * trailers-only (one HEADERS frame with END_STREAM). */
#include "grpc/grpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <limits.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "net/loop.h"
#include "net/tls.h"
#include "grpc/grpc_internal.h"
#include "grpc/grpc_wire.h"
#include "grpc/h2io.h"

#define RBUF_BYTES (256u << 10)
#define WBUF_HIGH (1u << 20)
#define MAX_STREAMS 128
/* A TLS client has this long to finish its handshake (a slow or silent one holds nothing
 * longer; the HTTP side's header timeout has the same default). */
#define TLS_HANDSHAKE_MS 10000

struct gloop {
  grpc_server *srv;
  net_loop *loop;
  int lfd;
  loop_io lio;
  gconn *conns;
  gconn *dirty;          /* connections with output to flush at the batch's end */
  bool draining;
  uint8_t *rbuf;
};

struct gstream {
  gconn *c;
  int32_t id;
  const grpc_method *m;
  char path[160];
  size_t path_len;
  bool bad_ctype, gzip, bad_encoding, has_ctype;
  char encoding[32];
  /* Request metadata named by a --grpc-restricted-protocol key (only those are kept). */
  http_header rh[API_GROUP_COUNT];
  size_t n_rh;
  http_header *fh;       /* metadata --grpc-header-forward-pattern matched (owned) */
  size_t n_fh;
  cbuf in;               /* received bytes not yet framed into messages */
  size_t n_msgs;         /* messages received (unary: must be 1) */
  bool in_closed;        /* the client sent END_STREAM */
  bool headers_sent, finished, deferred, trailers_sent;
  int status;
  char *message;
  cbuf out;
  size_t out_off;
  gop *ops;
  gstream *next, *prev;  /* in c->streams */
};

struct gconn {
  grpc_server *srv;
  gloop *gl;
  int fd;
  loop_io io;
  nghttp2_session *h2;
  cbuf wbuf;
  size_t woff;
  gstream *streams;
  int refs;
  bool dead;
  SSL *ssl;              /* TLS (--grpc-use-ssl), else NULL */
  bool handshaking;      /* TLS handshake not done: no HTTP/2 yet */
  bool rd_wants_write;   /* the last SSL_read needs the socket writable */
  loop_timer hs_timer;   /* TLS_HANDSHAKE_MS while handshaking */
  bool dirty;            /* on gl->dirty (holds a reference) */
  gconn *dirty_next;
  gconn *next, *prev;
};

static void conn_flush(gconn *c);

/* ---- ops and in-flight accounting ----------------------------------------------------- */

static void inflight_add(grpc_server *g, int d) {
  pthread_mutex_lock(&g->mu);
  g->inflight = (size_t)((long)g->inflight + d);
  if (!g->inflight) pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void conn_unref(gconn *c) {
  if (--c->refs == 0) {
    cbuf_free(&c->wbuf);
    free(c);
  }
}

void gop_attach(gstream *gs, gop *op, void (*on_detach)(gop *op)) {
  op->c = gs->c;
  op->gs = gs;
  op->on_detach = on_detach;
  op->prev = NULL;
  op->next = gs->ops;
  if (gs->ops) gs->ops->prev = op;
  gs->ops = op;
  gs->c->refs++;
  inflight_add(gs->c->srv, 1);
}

gstream *gop_stream(gop *op) { return op->gs; }
net_loop *gop_loop(const gop *op) { return op->c->gl->loop; }

static void op_unlink(gop *op) {
  gstream *gs = op->gs;
  if (!gs) return;
  if (op->prev) op->prev->next = op->next;
  else gs->ops = op->next;
  if (op->next) op->next->prev = op->prev;
  op->gs = NULL;
  op->next = op->prev = NULL;
}

/* Output of completed ops is written once per loop batch and connection (batch_end), not
 * once per response: a batch of 16 responses on one connection is one send, and one
 * wake-up of the client. */
static void conn_mark_dirty(gconn *c) {
  if (c->dead || c->dirty) return;
  c->dirty = true;
  c->refs++;
  c->dirty_next = c->gl->dirty;
  c->gl->dirty = c;
}

static void flush_dirty(gloop *gl) {
  while (gl->dirty) {
    gconn *c = gl->dirty;
    gl->dirty = c->dirty_next;
    c->dirty = false;
    if (!c->dead) conn_flush(c);
    conn_unref(c);
  }
}

void gop_done(gop *op) {
  gstream *gs = op->gs;
  gconn *c = op->c;
  op_unlink(op);
  if (gs && gs->m && gs->m->streaming && gs->in_closed && !gs->ops) gstream_finish(gs, GRPC_OK, NULL);
  grpc_server *srv = c->srv;
  conn_mark_dirty(c);
  conn_unref(c);
  inflight_add(srv, -1);
}

void gop_flush(gop *op) { conn_mark_dirty(op->c); }

/* ---- streams -------------------------------------------------------------------------- */

grpc_server *gstream_server(gstream *gs) { return gs->c->srv; }
const http_header *gstream_forwarded(const gstream *gs, size_t *n) {
  *n = gs->n_fh;
  return gs->fh;
}
bool gstream_finished(const gstream *gs) { return gs->finished; }

static void stream_free(gstream *gs) {
  while (gs->ops) {
    gop *op = gs->ops;
    op_unlink(op);
    if (op->on_detach) op->on_detach(op);
  }
  gconn *c = gs->c;
  if (gs->prev) gs->prev->next = gs->next;
  else c->streams = gs->next;
  if (gs->next) gs->next->prev = gs->prev;
  cbuf_free(&gs->in);
  cbuf_free(&gs->out);
  free(gs->message);
  for (size_t i = 0; i < gs->n_fh; i++) {
    free((char *)gs->fh[i].name);
    free((char *)gs->fh[i].value);
  }
  free(gs->fh);
  for (size_t i = 0; i < gs->n_rh; i++) {
    free((char *)gs->rh[i].name);
    free((char *)gs->rh[i].value);
  }
  free(gs);
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
/* An UNAVAILABLE answer (not ready, queue full, cinfer.max_inflight, the LLM engine full,
 * shutting down: nothing was done) carries gRPC's retry pushback, the equivalent of HTTP's
 * Retry-After: 1 on a 503, so a client or a gateway in front tells a refusal from a failure
 * (docs/api.md). */
#define REFUSAL_NV NV("grpc-retry-pushback-ms", "1000")

static ssize_t data_read(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user) {
  gstream *gs = src->ptr;
  size_t avail = gs->out.len - gs->out_off;
  if (!avail) {
    if (!gs->finished) {
      gs->deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    char code[12], msg[1024];
    snprintf(code, sizeof code, "%d", gs->status);
    grpc_percent_encode(gs->message ? gs->message : "", msg, sizeof msg);
    nghttp2_nv tr[3] = {NV("grpc-status", code), NV("grpc-message", msg)};
    size_t n = msg[0] ? 2 : 1;
    if (gs->status == GRPC_UNAVAILABLE) tr[n++] = (nghttp2_nv)REFUSAL_NV;
    nghttp2_submit_trailer(h2, id, tr, n);
    gs->trailers_sent = true;
    return 0;
  }
  size_t n = avail < length ? avail : length;
  memcpy(buf, gs->out.data + gs->out_off, n);
  gs->out_off += n;
  if (gs->out_off == gs->out.len) gs->out.len = gs->out_off = 0;
  return (ssize_t)n;
}

static void send_headers(gstream *gs) {
  if (gs->headers_sent) return;
  gs->headers_sent = true;
  nghttp2_nv h[3] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                     NV("grpc-accept-encoding", "identity,gzip")};
  nghttp2_data_provider dp = {.source.ptr = gs, .read_callback = data_read};
  nghttp2_submit_response(gs->c->h2, gs->id, h, 3, &dp);
}

void gstream_send(gstream *gs, cbuf *b) {
  if (gs->finished || gs->c->dead) {
    cbuf_free(b);
    return;
  }
  send_headers(gs);
  if (gs->out.len == 0 && !gs->out.oom) {
    cbuf t = gs->out;
    gs->out = *b;
    *b = t;
    gs->out_off = 0;
  } else {
    cbuf_put(&gs->out, b->data, b->len);
  }
  cbuf_free(b);
  if (gs->deferred) {
    gs->deferred = false;
    nghttp2_session_resume_data(gs->c->h2, gs->id);
  }
}

void gstream_finish(gstream *gs, int status, const char *msg) {
  if (gs->finished || gs->c->dead) return;
  gs->finished = true;
  gs->status = status;
  if (msg && msg[0]) gs->message = strdup(msg);
  if (!gs->headers_sent) {
    /* Trailers-only: one HEADERS frame that ends the stream. */
    gs->headers_sent = gs->trailers_sent = true;
    char code[12], m[1024];
    snprintf(code, sizeof code, "%d", status);
    grpc_percent_encode(msg ? msg : "", m, sizeof m);
    nghttp2_nv h[6] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                       NV("grpc-accept-encoding", "identity,gzip"), NV("grpc-status", code),
                       NV("grpc-message", m)};
    size_t n = m[0] ? 5 : 4;
    if (status == GRPC_UNAVAILABLE) h[n++] = (nghttp2_nv)REFUSAL_NV;
    nghttp2_submit_response(gs->c->h2, gs->id, h, n, NULL);
  } else if (gs->deferred) {
    gs->deferred = false;
    nghttp2_session_resume_data(gs->c->h2, gs->id);
  }
  /* gs->in stays until the stream closes: a handler may still read its message. */
}

void gstream_finish_status(gstream *gs, cinfer_status *st) {
  gstream_finish(gs, grpc_status_of(cinfer_status_code(st)), cinfer_status_message(st));
  cinfer_status_free(st);
}

/* Frames the buffered input; calls the handler per whole message (streaming methods as
 * they arrive; unary ones only at END_STREAM). */
static void stream_take_messages(gstream *gs) {
  grpc_server *srv = gs->c->srv;
  size_t off = 0;
  while (!gs->finished) {
    grpc_msg m;
    size_t used;
    grpc_frame_result r = grpc_frame_next((const uint8_t *)gs->in.data + off, gs->in.len - off,
                                          srv->max_msg, &m, &used);
    if (r == GRPC_FRAME_INCOMPLETE) break;
    if (r == GRPC_FRAME_TOO_LARGE) {
      const uint8_t *p = (const uint8_t *)gs->in.data + off;
      uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
      char msg[160];
      snprintf(msg, sizeof msg, "Received message larger than max (%u vs. %zu)", n, srv->max_msg);
      gstream_finish(gs, GRPC_RESOURCE_EXHAUSTED, msg);
      return;
    }
    if (r == GRPC_FRAME_BAD_FLAG) {
      gstream_finish(gs, GRPC_INTERNAL, "invalid gRPC message: compressed flag must be 0 or 1");
      return;
    }
    if (!gs->m->streaming && !gs->in_closed) {
      /* Wait for END_STREAM, buffering nothing beyond the one message. */
      if (gs->in.len - off > used) {
        gstream_finish(gs, GRPC_UNIMPLEMENTED, "a unary call carried more than one request message");
        return;
      }
      break;
    }
    off += used;
    gs->n_msgs++;
    if (!gs->m->streaming && gs->n_msgs > 1) {
      gstream_finish(gs, GRPC_UNIMPLEMENTED, "a unary call carried more than one request message");
      return;
    }
    if (m.compressed) {
      if (!gs->gzip) {
        gstream_finish(gs, GRPC_INTERNAL,
                       "compressed gRPC message without a grpc-encoding header");
        return;
      }
      uint8_t *plain;
      size_t plen;
      cinfer_status *st = grpc_gunzip(m.data, m.len, srv->max_msg, &plain, &plen);
      if (st) {
        gstream_finish_status(gs, st);
        return;
      }
      gs->m->fn(gs, plain, plen);
      free(plain);
    } else {
      gs->m->fn(gs, m.data, m.len);
    }
  }
  if (gs->finished) return;
  if (off) {
    memmove(gs->in.data, gs->in.data + off, gs->in.len - off);
    gs->in.len -= off;
  }
  if (gs->in_closed) {
    if (gs->in.len)
      gstream_finish(gs, GRPC_INTERNAL, "the request ended inside a gRPC message");
    else if (!gs->m->streaming && gs->n_msgs == 0)
      gstream_finish(gs, GRPC_UNIMPLEMENTED, "a unary call carried no request message");
    else if (gs->m->streaming && !gs->ops)
      gstream_finish(gs, GRPC_OK, NULL);
  }
}

/* ---- nghttp2 callbacks ------------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  gconn *c = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  gstream *gs = calloc(1, sizeof *gs);
  if (!gs) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM */
  gs->c = c;
  gs->id = f->hd.stream_id;
  gs->next = c->streams;
  if (c->streams) c->streams->prev = gs;
  c->streams = gs;
  nghttp2_session_set_stream_user_data(h2, gs->id, gs);
  return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *user) {
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  gstream *gs = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!gs) return 0;
  if (nlen == 5 && !memcmp(name, ":path", 5)) {
    size_t n = vlen < sizeof gs->path - 1 ? vlen : sizeof gs->path - 1;
    memcpy(gs->path, value, n);
    gs->path[n] = 0;
    gs->path_len = vlen;
  } else if (nlen == 12 && !memcmp(name, "content-type", 12)) {
    gs->has_ctype = true;
    gs->bad_ctype = !(vlen >= 16 && !memcmp(value, "application/grpc", 16) &&
                      (vlen == 16 || value[16] == '+' || value[16] == ';'));
  } else if (gs->c->srv->restricted && gs->n_rh < API_GROUP_COUNT && nlen && name[0] != ':') {
    const api_restrictions *r = &gs->c->srv->restrict_;
    for (int g = 0; g < API_GROUP_COUNT; g++) {
      if (!r->key[g] || strlen(r->key[g]) != nlen || strncasecmp(r->key[g], (const char *)name, nlen))
        continue;
      char *n = strndup((const char *)name, nlen), *v = strndup((const char *)value, vlen);
      if (!n || !v) {
        free(n), free(v);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM */
      }
      gs->rh[gs->n_rh++] = (http_header){n, nlen, v, vlen};
      break;
    }
  }
  if (nlen && name[0] != ':' && kserve_fwd_match(&gs->c->srv->fwd, (const char *)name, nlen)) {
    http_header *nf = realloc(gs->fh, (gs->n_fh + 1) * sizeof *nf);
    char *n = nf ? strndup((const char *)name, nlen) : NULL, *v = n ? strndup((const char *)value, vlen) : NULL;
    if (nf) gs->fh = nf;
    if (!v) {
      free(n);
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* RST_STREAM */
    }
    gs->fh[gs->n_fh++] = (http_header){n, nlen, v, vlen};
  }
  if (nlen == 13 && !memcmp(name, "grpc-encoding", 13)) {
    size_t n = vlen < sizeof gs->encoding - 1 ? vlen : sizeof gs->encoding - 1;
    memcpy(gs->encoding, value, n);
    gs->encoding[n] = 0;
    if (vlen == 4 && !memcmp(value, "gzip", 4)) gs->gzip = true;
    else if (!(vlen == 8 && !memcmp(value, "identity", 8))) gs->bad_encoding = true;
  }
  return 0;
}

static void stream_headers_done(gstream *gs) {
  if (!gs->has_ctype || gs->bad_ctype)
    return gstream_finish(gs, GRPC_INTERNAL, "content-type must be application/grpc");
  if (gs->bad_encoding) {
    char m[96];
    snprintf(m, sizeof m, "grpc-encoding '%s' is not supported; use gzip or identity", gs->encoding);
    return gstream_finish(gs, GRPC_UNIMPLEMENTED, m);
  }
  gs->m = grpc_find_method(gs->path, gs->path_len);
  if (!gs->m) {
    char m[256];
    snprintf(m, sizeof m, "unknown method %.160s", gs->path);
    return gstream_finish(gs, GRPC_UNIMPLEMENTED, m);
  }
  char msg[384];
  if (gs->c->srv->restricted &&
      !api_restrictions_check(&gs->c->srv->restrict_, api_classify_grpc(gs->path, gs->path_len),
                              gs->rh, gs->n_rh, msg, sizeof msg)) {
    gs->m = NULL; /* its messages are discarded */
    gstream_finish(gs, GRPC_PERMISSION_DENIED, msg);
  }
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  gstream *gs = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!gs) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
    stream_headers_done(gs);
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    gs->in_closed = true;
    if (!gs->finished && gs->m) stream_take_messages(gs);
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user) {
  gstream *gs = nghttp2_session_get_stream_user_data(h2, id);
  if (!gs || gs->finished || !gs->m) return 0; /* finished: input is discarded */
  cbuf_put(&gs->in, data, len);
  if (gs->in.oom) {
    gstream_finish(gs, GRPC_RESOURCE_EXHAUSTED, "out of memory buffering the request");
    return 0;
  }
  /* Check the size as soon as the prefix is in, so a huge message is refused before it is
   * buffered; streaming methods take their messages now. */
  stream_take_messages(gs);
  return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t err, void *user) {
  gstream *gs = nghttp2_session_get_stream_user_data(h2, id);
  if (gs) {
    nghttp2_session_set_stream_user_data(h2, id, NULL);
    stream_free(gs);
  }
  return 0;
}

/* ---- connections ------------------------------------------------------------------------- */

static void conn_close(gconn *c) {
  if (c->dead) return;
  c->dead = true;
  loop_io_del(c->gl->loop, &c->io);
  loop_timer_cancel(c->gl->loop, &c->hs_timer);
  if (c->ssl) {
    if (!c->handshaking) SSL_shutdown(c->ssl); /* close_notify, best effort (non-blocking) */
    SSL_free(c->ssl);
    c->ssl = NULL;
  }
  close(c->fd);
  c->fd = -1;
  while (c->streams) stream_free(c->streams);
  nghttp2_session_del(c->h2);
  c->h2 = NULL;
  gloop *gl = c->gl;
  if (c->prev) c->prev->next = c->next;
  else gl->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  conn_unref(c);
}

/* The TLS handshake step; true once it is done (then HTTP/2 starts: the server's SETTINGS
 * go out). A failure closes the connection (a plaintext client on the TLS port). */
static bool conn_handshake(gconn *c) {
  h2io_hs r = h2io_handshake(c->ssl);
  if (r == H2IO_HS_DONE) {
    c->handshaking = false;
    loop_timer_cancel(c->gl->loop, &c->hs_timer);
    return true;
  }
  if (r == H2IO_HS_WANT_READ) {
    loop_io_set(c->gl->loop, &c->io, LOOP_READ);
  } else if (r == H2IO_HS_WANT_WRITE) {
    loop_io_set(c->gl->loop, &c->io, LOOP_READ | LOOP_WRITE);
  } else {
    char eb[256];
    LOG_V(1, "grpc: TLS handshake failed: %s", net_tls_last_error(eb, sizeof eb));
    conn_close(c);
  }
  return false;
}

static void conn_flush(gconn *c) {
  if (c->handshaking) return;
  h2io_rc rc = h2io_flush(c->fd, c->ssl, c->h2, &c->wbuf, &c->woff, WBUF_HIGH);
  if (rc == H2IO_BLOCKED) {
    loop_io_set(c->gl->loop, &c->io, LOOP_READ | LOOP_WRITE);
    return;
  }
  if (rc != H2IO_DRAINED) {
    ERR_clear_error();
    conn_close(c);
    return;
  }
  loop_io_set(c->gl->loop, &c->io, c->rd_wants_write ? LOOP_READ | LOOP_WRITE : LOOP_READ);
}

static void conn_io(loop_io *io, uint32_t ev) {
  gconn *c = (gconn *)((char *)io - offsetof(gconn, io));
  c->refs++; /* a handler may close c */
  if (c->handshaking) {
    if (ev & (LOOP_HUP | LOOP_ERROR) && !(ev & LOOP_READ)) conn_close(c);
    else if (conn_handshake(c)) ev |= LOOP_READ; /* records may have come with the last flight */
  }
  if (!c->dead && !c->handshaking &&
      ((ev & (LOOP_READ | LOOP_HUP | LOOP_ERROR)) || (c->rd_wants_write && (ev & LOOP_WRITE)))) {
    ssize_t n = h2io_recv(c->fd, c->ssl, c->gl->rbuf, RBUF_BYTES, &c->rd_wants_write);
    if (n > 0) {
      ssize_t r = nghttp2_session_mem_recv(c->h2, c->gl->rbuf, (size_t)n);
      if (r < 0) {
        /* A protocol error: nghttp2 queued a GOAWAY; send it and close. */
        LOG_V(1, "grpc: connection error: %s", nghttp2_strerror((int)r));
        conn_flush(c);
        conn_close(c);
      }
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      conn_close(c);
    }
  }
  if (!c->dead && !c->handshaking) conn_flush(c);
  conn_unref(c);
}

static void handshake_expired(loop_timer *t) {
  gconn *c = (gconn *)((char *)t - offsetof(gconn, hs_timer));
  if (c->handshaking && !c->dead) {
    LOG_V(1, "grpc: TLS handshake not done in %d ms: closed", TLS_HANDSHAKE_MS);
    conn_close(c);
  }
}


static void conn_open(gloop *gl, int fd) {
  gconn *c = calloc(1, sizeof *c);
  nghttp2_session_callbacks *cb =
      c ? h2io_callbacks(on_begin_headers, on_header, on_frame_recv, on_data_chunk, on_stream_close) : NULL;
  if (!cb || h2io_session_new(&c->h2, cb, c, true)) goto fail;
  nghttp2_session_callbacks_del(cb);
  cb = NULL;
  if (h2io_settings(c->h2, MAX_STREAMS)) goto fail;
  c->srv = gl->srv;
  c->gl = gl;
  c->fd = fd;
  c->refs = 1;
  c->io.fd = fd;
  c->io.fn = conn_io;
  if (gl->srv->tls) {
    c->ssl = net_tls_new_ssl(gl->srv->tls, NULL, loop_now_ms(gl->loop));
    if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) goto fail;
    SSL_set_accept_state(c->ssl);
    c->handshaking = true;
    c->hs_timer.fn = handshake_expired;
    if (!loop_timer_at(gl->loop, &c->hs_timer, loop_now_ms(gl->loop) + TLS_HANDSHAKE_MS)) goto fail;
  }
  cinfer_status *st = loop_io_add(gl->loop, &c->io, LOOP_READ);
  if (st) {
    cinfer_status_free(st);
    goto fail;
  }
  c->next = gl->conns;
  if (gl->conns) gl->conns->prev = c;
  gl->conns = c;
  if (!c->handshaking) conn_flush(c);
  return;
fail:
  if (cb) nghttp2_session_callbacks_del(cb);
  if (c && c->h2) nghttp2_session_del(c->h2);
  if (c && c->ssl) SSL_free(c->ssl);
  free(c);
  close(fd);
}

static void on_accept(loop_io *io, uint32_t ev) {
  gloop *gl = (gloop *)((char *)io - offsetof(gloop, lio));
  for (int i = 0; i < 64; i++) {
    int fd = accept4(gl->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (gl->draining) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn_open(gl, fd);
  }
}

/* ---- server lifecycle ---------------------------------------------------------------------- */

static void batch_begin(void *arg) { cinfer_server_defer_wakeups_begin(); }
static void batch_end(void *arg) {
  flush_dirty(arg);
  cinfer_server_defer_wakeups_flush();
}

cinfer_status *grpc_server_start(cinfer_server *s, const grpc_opts *o, grpc_server **out) {
  *out = NULL;
  grpc_server *g = calloc(1, sizeof *g);
  if (!g) return cinfer_status_oom("grpc server");
  g->server = s;
  g->shm = o->shm;
  cinfer_status *fst = kserve_fwd_init(&g->fwd, "--grpc-header-forward-pattern", o->header_forward_pattern);
  if (fst) {
    free(g);
    return fst;
  }
  for (size_t i = 0; i < o->n_restricted; i++) {
    char err[256];
    if (!api_restrictions_add(&g->restrict_, o->restricted[i], err, sizeof err)) {
      api_restrictions_free(&g->restrict_);
      kserve_fwd_free(&g->fwd);
      free(g);
      return cinfer_status_new(CINFER_INVALID_ARG, "--grpc-restricted-protocol '%s': %s",
                               o->restricted[i], err);
    }
  }
  g->restricted = api_restrictions_any(&g->restrict_);
  if (o->tls_cert || o->tls_key || o->tls_ca) {
    cinfer_status *tst = NULL;
    if (!o->tls_cert || !o->tls_key)
      tst = cinfer_status_new(CINFER_INVALID_ARG, "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key");
    else
      tst = net_tls_create(&(net_tls_opts){.server = true, .cert_file = o->tls_cert,
                                           .key_file = o->tls_key, .ca_file = o->tls_ca,
                                           .alpn = "h2"}, &g->tls);
    if (tst) {
      api_restrictions_free(&g->restrict_);
      kserve_fwd_free(&g->fwd);
      free(g);
      return tst;
    }
  }
  g->max_msg = o->max_message_bytes ? o->max_message_bytes : (256u << 20);
  if (g->max_msg > UINT32_MAX) g->max_msg = UINT32_MAX;
  g->limits.max_tensor_elements = o->max_tensor_elements > 0 ? o->max_tensor_elements : (1 << 26);
  g->limits.max_json_depth = 32;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->n_loops = o->io_threads > 0 ? o->io_threads : 1;
  g->loops = calloc((size_t)g->n_loops, sizeof *g->loops);
  if (!g->loops) {
    api_restrictions_free(&g->restrict_);
      kserve_fwd_free(&g->fwd);
    net_tls_destroy(g->tls);
    free(g);
    return cinfer_status_oom("grpc server");
  }
  cinfer_status *st = NULL;
  uint16_t port = o->port;
  for (int i = 0; i < g->n_loops && !st; i++) {
    gloop *gl = &g->loops[i];
    gl->srv = g;
    gl->lfd = -1;
    if (!(gl->rbuf = malloc(RBUF_BYTES))) { st = cinfer_status_oom("grpc server"); break; }
    if ((st = loop_create(&gl->loop))) break;
    if ((st = net_listen("grpc", o->host, port, 1024, i == 0, &gl->lfd, &port))) break;
    gl->lio.fd = gl->lfd;
    gl->lio.fn = on_accept;
    if ((st = loop_io_add(gl->loop, &gl->lio, LOOP_READ))) break;
  }
  g->port = port;
  for (int i = 0; i < g->n_loops && !st; i++) {
    /* One worker wake-up per epoll batch of requests, as the HTTP frontend does. */
    loop_set_batch_hooks(g->loops[i].loop, batch_begin, batch_end, &g->loops[i]);
    char name[16];
    snprintf(name, sizeof name, "grpc-io-%d", i);
    if ((st = loop_start_thread(g->loops[i].loop, name))) {
      for (int j = 0; j < i; j++) loop_join(g->loops[j].loop);
    }
  }
  if (st) {
    for (int i = 0; i < g->n_loops; i++) {
      if (g->loops[i].lfd >= 0) close(g->loops[i].lfd);
      loop_destroy(g->loops[i].loop);
      free(g->loops[i].rbuf);
    }
    free(g->loops);
    api_restrictions_free(&g->restrict_);
      kserve_fwd_free(&g->fwd);
    net_tls_destroy(g->tls);
    free(g);
    return st;
  }
  *out = g;
  return NULL;
}

uint16_t grpc_server_port(const grpc_server *g) { return g->port; }

typedef struct loop_job {
  gloop *gl;
  bool close_all;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
} loop_job;

static void drain_task(void *arg) {
  loop_job *j = arg;
  gloop *gl = j->gl;
  if (gl->lfd >= 0) {
    loop_io_del(gl->loop, &gl->lio);
    close(gl->lfd);
    gl->lfd = -1;
  }
  gl->draining = true;
  for (gconn *c = gl->conns, *next; c; c = next) {
    next = c->next;
    if (j->close_all) {
      conn_close(c);
    } else {
      nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(c->h2), NGHTTP2_NO_ERROR,
                            NULL, 0);
      conn_flush(c);
    }
  }
  pthread_mutex_lock(&j->mu);
  j->done = true;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void run_on_loops(grpc_server *g, bool close_all) {
  for (int i = 0; i < g->n_loops; i++) {
    loop_job j = {.gl = &g->loops[i], .close_all = close_all};
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    if (loop_post(g->loops[i].loop, drain_task, &j)) {
      pthread_mutex_lock(&j.mu);
      while (!j.done) pthread_cond_wait(&j.cv, &j.mu);
      pthread_mutex_unlock(&j.mu);
    }
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
  }
}

void grpc_server_shutdown(grpc_server *g, int timeout_ms) {
  if (!g) return;
  run_on_loops(g, false);
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (dl.tv_nsec >= 1000000000L) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&g->mu);
  while (g->inflight && pthread_cond_timedwait(&g->cv, &g->mu, &dl) == 0) {}
  pthread_mutex_unlock(&g->mu);
}

void grpc_server_destroy(grpc_server *g) {
  if (!g) return;
  run_on_loops(g, true); /* closes every connection: ops are detached and cancelled */
  pthread_mutex_lock(&g->mu);
  while (g->inflight) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  for (int i = 0; i < g->n_loops; i++) {
    loop_join(g->loops[i].loop);
    flush_dirty(&g->loops[i]); /* every connection is closed: only drops the references */
    loop_destroy(g->loops[i].loop);
    free(g->loops[i].rbuf);
  }
  free(g->loops);
  api_restrictions_free(&g->restrict_);
      kserve_fwd_free(&g->fwd);
  net_tls_destroy(g->tls);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g);
}
