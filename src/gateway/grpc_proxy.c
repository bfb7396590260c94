/* grpc_proxy.c: gRPC through the gateway (docs/design/gateway.md, "gRPC").
 *
 * One loop thread of its own ("gw-grpc") carries every gRPC connection, downstream (clients,
 * h2c with prior knowledge) and upstream (one HTTP/2 connection per replica gRPC address,
 * multiplexed), with nghttp2 sessions over non-blocking sockets, as src/grpc does.
 *
 * A call (gp_ds, one downstream stream) is routed when its first message is complete
 * (unary calls: at the client's END_STREAM): the model name is read from the message
 * (gw_grpc_request_model), then authentication, the API-group policy, the rate limit, the
 * concurrency limit and the canary split apply as for HTTP (the same key set, buckets,
 * canary state), and a replica is chosen among those that list the model and have a gRPC
 * port (P2C on outstanding requests). Unary answers are buffered whole, so a replica that
 * fails before answering (connection refused or lost, stream reset, GOAWAY, or a
 * trailers-only UNAVAILABLE) is retried once on another replica with nothing sent to the
 * client; streams (ModelStreamInfer) stay on their replica and are relayed as they come.
 *
 * Output is never written from inside an nghttp2 callback: connections with something to
 * send are queued (kick) and flushed at the end of each event (flush_pending), so closing
 * a connection never happens under a caller that still iterates its streams.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/log.h"
#include "gateway/internal.h"
#include "grpc/h2io.h"
#include "net/tls.h"

#define GP_RBUF (256u << 10)
#define GP_WBUF_HIGH (1u << 20)
#define GP_MAX_META 48

enum { S_OK = 0, S_CANCELLED = 1, S_INVALID_ARGUMENT = 3, S_DEADLINE = 4, S_NOT_FOUND = 5,
       S_PERMISSION_DENIED = 7, S_RESOURCE_EXHAUSTED = 8, S_UNIMPLEMENTED = 12, S_INTERNAL = 13,
       S_UNAVAILABLE = 14, S_UNAUTHENTICATED = 16 };

typedef struct gp_conn gp_conn;
typedef struct gp_ds gp_ds;
typedef struct gp_us gp_us;

typedef struct gp_hdrs {
  nghttp2_nv nv[GP_MAX_META];
  size_t n;
} gp_hdrs;

enum { L_NONE = 0, L_LIVE, L_READY, L_HEALTH };

typedef struct gp_method {
  const char *name;      /* after "/inference.GRPCInferenceService/" */
  api_group group;
  uint32_t model_field;  /* the request's model-name field, 0 = none */
  bool streaming;
  int local;
  bool route_by_model;   /* the model decides the replica (else any replica) */
} gp_method;

static const gp_method methods[] = {
    {"ServerLive", API_HEALTH, 0, false, L_LIVE, false},
    {"ServerReady", API_HEALTH, 0, false, L_READY, false},
    {"ModelReady", API_HEALTH, 1, false, L_NONE, true},
    {"ServerMetadata", API_METADATA, 0, false, L_NONE, false},
    {"ModelMetadata", API_METADATA, 1, false, L_NONE, true},
    {"ModelInfer", API_INFERENCE, 1, false, L_NONE, true},
    {"ModelStreamInfer", API_INFERENCE, 1, true, L_NONE, true},
    {"ModelConfig", API_MODEL_CONFIG, 1, false, L_NONE, true},
    {"ModelStatistics", API_STATISTICS, 1, false, L_NONE, true},
    {"RepositoryIndex", API_MODEL_REPOSITORY, 0, false, L_NONE, false},
    {"RepositoryModelLoad", API_MODEL_REPOSITORY, 2, false, L_NONE, false},
    {"RepositoryModelUnload", API_MODEL_REPOSITORY, 2, false, L_NONE, false},
    {"SystemSharedMemoryStatus", API_SHARED_MEMORY, 0, false, L_NONE, false},
    {"SystemSharedMemoryRegister", API_SHARED_MEMORY, 0, false, L_NONE, false},
    {"SystemSharedMemoryUnregister", API_SHARED_MEMORY, 0, false, L_NONE, false},
    {"CudaSharedMemoryStatus", API_SHARED_MEMORY, 0, false, L_NONE, false},
    {"CudaSharedMemoryRegister", API_SHARED_MEMORY, 0, false, L_NONE, false},
    {"CudaSharedMemoryUnregister", API_SHARED_MEMORY, 0, false, L_NONE, false},
    {"TraceSetting", API_TRACE, 2, false, L_NONE, false},
    {"LogSettings", API_LOGGING, 0, false, L_NONE, false},
};
static const gp_method health_check = {"Check", API_GROUP_NONE, 0, false, L_HEALTH, false};

struct gp_ds {
  gp_conn *c;
  int32_t id;
  char path[200];
  size_t path_len;
  const gp_method *m;
  bool has_ctype, bad_ctype, gzip, bad_enc, headers_done;
  char auth[600];
  size_t auth_len;
  char variant_hdr[64];
  size_t variant_len;
  char rate_hdr[100];
  size_t rate_len;
  gp_hdrs meta;            /* request metadata forwarded upstream */
  cbuf in;                 /* request bytes (framed messages) */
  bool in_closed, routed, too_large;
  /* response */
  bool resp_started, finished, deferred, recorded;
  cbuf out;
  size_t out_off;
  gp_hdrs trailers;        /* sent when out is drained after finish */
  int status;              /* gRPC status answered */
  /* route */
  char *model;             /* the whole name from the message (owned), or no_model */
  char group[64];
  char variant[64];
  long long version;
  int variant_idx;
  gw_pick pick;            /* routing and the replicas tried */
  gw_replica *cur;
  gp_us *us;
  char last_error[240];
  /* security */
  gw_keyset *ks;
  const gw_key *key;
  char who[80];
  bool strip_auth, audit, counted_active;
  uint64_t start_ms, deadline_ms;
  loop_timer deadline;
  gp_ds *next, *prev;
};

struct gp_us {
  gp_conn *c;
  int32_t id;
  gp_ds *d;                /* NULL once the downstream call is gone */
  size_t sent;             /* bytes of d->in handed to nghttp2 */
  bool deferred, got_head, in_trailers, any_data;
  gp_hdrs head, trail;
  cbuf body;
  gp_us *next, *prev;
};

struct gp_conn {
  gw_grpc *gp;
  int fd;
  loop_io io;
  nghttp2_session *h2;
  cbuf wbuf;
  size_t woff;
  bool dead, up, connected, goaway, pending;
  SSL *ssl;                /* TLS (ALPN h2) downstream or upstream, NULL = h2c */
  char fail[200];          /* upstream: why the connection failed (TLS), for the callers */
  bool any_rx;             /* TLS: application bytes were received */
  bool handshaking;
  int refs;
  char peer[64];
  gp_ds *streams;          /* downstream */
  gw_replica *r;           /* upstream */
  gp_us *ustreams;
  loop_timer ctimer;       /* upstream connect timeout */
  gp_conn *next, *prev;    /* all connections */
  gp_conn *pnext;          /* pending flush */
};

struct gw_grpc {
  gateway *g;
  net_loop *loop;
  int lfd;
  loop_io lio;
  uint16_t port;
  bool draining;
  gp_conn *conns;
  gp_conn *pending;
  uint8_t *rbuf;
  gw_scratch *scratch;     /* the candidate arrays of this loop (route.c) */
  uint64_t rng;
  metric_family *f_calls;
  net_tls *tls;            /* the listener's TLS (the gateway's certificate), NULL = h2c */
  net_tls *tls_up;         /* to the replicas' gRPC ports (upstream_tls, ALPN h2), NULL = h2c */
  /* drain: downstream calls alive (changed on the loop), and the drain's waiter */
  atomic_int live;
  pthread_mutex_t drain_mu;
  pthread_cond_t drain_cv;
};

static char no_model[1];    /* a call that names no model */

static void kick(gp_conn *c);
static void flush_pending(gw_grpc *gp);
static void conn_close(gp_conn *c);
static void start_try(gp_ds *d);

/* ---- header lists ------------------------------------------------------------------------ */

static void hdrs_free(gp_hdrs *h) {
  for (size_t i = 0; i < h->n; i++) {
    free(h->nv[i].name);
    free(h->nv[i].value);
  }
  h->n = 0;
}

static bool hdrs_add(gp_hdrs *h, const void *name, size_t nl, const void *value, size_t vl) {
  if (h->n >= GP_MAX_META) return false;
  uint8_t *n = malloc(nl + 1), *v = malloc(vl + 1);
  if (!n || !v) {
    free(n);
    free(v);
    return false;
  }
  memcpy(n, name, nl);
  n[nl] = 0;
  memcpy(v, value, vl);
  v[vl] = 0;
  h->nv[h->n++] = (nghttp2_nv){n, v, nl, vl, NGHTTP2_NV_FLAG_NONE};
  return true;
}

static const nghttp2_nv *hdrs_find(const gp_hdrs *h, const char *name) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < h->n; i++)
    if (h->nv[i].namelen == nl && !memcmp(h->nv[i].name, name, nl)) return &h->nv[i];
  return NULL;
}

static bool is(const uint8_t *a, size_t n, const char *lit) {
  size_t m = strlen(lit);
  return n == m && !memcmp(a, lit, n);
}

#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}

/* ---- downstream responses ------------------------------------------------------------------ */

static void record(gp_ds *d);

static ssize_t ds_read(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
                       uint32_t *flags, nghttp2_data_source *src, void *user) {
  gp_ds *d = src->ptr;
  size_t avail = d->out.len - d->out_off;
  if (!avail) {
    if (!d->finished) {
      d->deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_submit_trailer(h2, id, d->trailers.nv, d->trailers.n);
    return 0;
  }
  size_t n = avail < length ? avail : length;
  memcpy(buf, d->out.data + d->out_off, n);
  d->out_off += n;
  if (d->out_off == d->out.len) d->out.len = d->out_off = 0;
  return (ssize_t)n;
}

/* Response headers: ours plus the replica's metadata (extra, may be NULL). */
static void ds_start(gp_ds *d, const gp_hdrs *extra) {
  if (d->resp_started || d->c->dead) return;
  d->resp_started = true;
  nghttp2_nv h[GP_MAX_META + 2] = {NV(":status", "200"), NV("content-type", "application/grpc")};
  size_t n = 2;
  for (size_t i = 0; extra && i < extra->n; i++) {
    const nghttp2_nv *x = &extra->nv[i];
    if (x->name[0] == ':' || is(x->name, x->namelen, "content-type")) continue;
    h[n++] = *x;
  }
  nghttp2_data_provider dp = {.source.ptr = d, .read_callback = ds_read};
  nghttp2_submit_response(d->c->h2, d->id, h, n, &dp);
  kick(d->c);
}

static void ds_write(gp_ds *d, const void *data, size_t n) {
  if (d->finished || d->c->dead) return;
  ds_start(d, NULL);
  cbuf_put(&d->out, data, n);
  if (d->deferred) {
    d->deferred = false;
    nghttp2_session_resume_data(d->c->h2, d->id);
  }
  kick(d->c);
}

/* Ends the call with the trailers in *tr (moved; must hold grpc-status). Nothing sent yet:
 * trailers-only (one HEADERS frame with END_STREAM), as gRPC answers errors. */
static void ds_finish_hdrs(gp_ds *d, gp_hdrs *tr, const gp_hdrs *head) {
  if (d->finished || d->c->dead) {
    hdrs_free(tr);
    return;
  }
  d->finished = true;
  /* a replica's trailers-only answer carries :status and content-type: ours replace them */
  size_t k = 0;
  for (size_t i = 0; i < tr->n; i++) {
    nghttp2_nv *x = &tr->nv[i];
    if (x->name[0] == ':' || is(x->name, x->namelen, "content-type")) {
      free(x->name);
      free(x->value);
    } else {
      tr->nv[k++] = *x;
    }
  }
  tr->n = k;
  const nghttp2_nv *s = hdrs_find(tr, "grpc-status");
  d->status = s ? atoi((const char *)s->value) : 2;
  record(d);
  if (!d->resp_started) {
    nghttp2_nv h[2 * GP_MAX_META + 2] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    size_t n = 2;
    for (size_t i = 0; head && i < head->n; i++) {
      const nghttp2_nv *x = &head->nv[i];
      if (x->name[0] == ':' || is(x->name, x->namelen, "content-type")) continue;
      h[n++] = *x;
    }
    for (size_t i = 0; i < tr->n; i++) h[n++] = tr->nv[i];
    d->resp_started = true;
    nghttp2_submit_response(d->c->h2, d->id, h, n, NULL);
    hdrs_free(tr);
  } else {
    d->trailers = *tr;
    tr->n = 0;
    if (d->deferred) {
      d->deferred = false;
      nghttp2_session_resume_data(d->c->h2, d->id);
    }
  }
  kick(d->c);
}

static void percent_encode(const char *msg, char *out, size_t cap) {
  static const char hx[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)msg; *p && o + 4 < cap; p++) {
    if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hx[*p >> 4];
      out[o++] = hx[*p & 15];
    }
  }
  out[o] = 0;
}

static void ds_fail(gp_ds *d, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ds_fail(gp_ds *d, int status, const char *fmt, ...) {
  char msg[1200], enc[3600], code[12];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  percent_encode(msg, enc, sizeof enc);
  snprintf(code, sizeof code, "%d", status);
  gp_hdrs tr = {.n = 0};
  hdrs_add(&tr, "grpc-status", 11, code, strlen(code));
  if (enc[0]) hdrs_add(&tr, "grpc-message", 12, enc, strlen(enc));
  LOG_V(1, "gateway: grpc %s from %s (%s) -> %d: %s", d->path, d->c->peer, d->who, status, msg);
  ds_finish_hdrs(d, &tr, NULL);
}

/* A whole response message of ours (local RPCs). */
static void ds_reply_msg(gp_ds *d, const uint8_t *msg, size_t n) {
  uint8_t pre[5] = {0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
  ds_write(d, pre, 5);
  if (msg && n) ds_write(d, msg, n);
  gp_hdrs tr = {.n = 0};
  hdrs_add(&tr, "grpc-status", 11, "0", 1);
  ds_finish_hdrs(d, &tr, NULL);
}

/* ---- metrics and audit --------------------------------------------------------------------- */

static void record(gp_ds *d) {
  if (d->recorded) return;
  d->recorded = true;
  gw_grpc *gp = d->c->gp;
  gateway *g = gp->g;
  char st[12];
  snprintf(st, sizeof st, "%d", d->status);
  const char *method = d->m ? d->m->name : "unknown";
  bool known = false;
  if (d->model[0]) {
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->n_reps && !known; i++)
      if (g->reps[i]->sources && gw_replica_has_model(g->reps[i], d->model, 0)) known = true;
    pthread_mutex_unlock(&g->mu);
  }
  const char *labels[] = {"upstream", d->cur ? d->cur->addr : "none", "method", method,
                          "code", st, NULL};
  metric_inc(gw_series(gp->f_calls, labels), 1);
  if (d->audit) {
    const char *kv[] = {"audit", "control", "who", d->who, "client", d->c->peer,
                        "group", d->m ? api_group_name(d->m->group) : "unknown",
                        "method", "grpc", "path", d->path, "model", known || d->m ? d->model : "",
                        "status", st, NULL};
    log_event(LOG_INFO, kv, "gateway: audit: grpc %s (%s) by %s -> %s (%s)", d->path,
              d->m ? api_group_name(d->m->group) : "unknown", d->who, st,
              d->status == S_OK ? "OK" : "refused or failed");
  }
}

/* ---- routing ------------------------------------------------------------------------------- */

/* d's routing (route.c): replicas with a gRPC port, by model when the method names one. */
static gw_pick *pick_of(gp_ds *d) {
  d->pick.model = d->m->route_by_model ? d->model : NULL;
  d->pick.version = d->version;
  d->pick.group = d->group;
  d->pick.grpc = true;
  return &d->pick;
}

static gw_replica *choose(gp_ds *d, bool *listed) {
  gw_grpc *gp = d->c->gp;
  gateway *g = gp->g;
  gw_replica **cand = gp->scratch->cand;
  uint32_t *out = gp->scratch->out;
  int *w = gp->scratch->w;
  pthread_mutex_lock(&g->mu);
  size_t n = gw_candidates(g, pick_of(d), loop_now_ms(gp->loop), cand, listed);
  for (size_t i = 0; i < n; i++) {
    out[i] = atomic_load_explicit(&cand[i]->outstanding, memory_order_relaxed);
    w[i] = cand[i]->weight;
  }
  int k = gw_balance_pick(g->cfg.balancer, n, out, w, &gp->rng, &g->rr_cursor);
  gw_replica *r = k >= 0 ? cand[k] : NULL;
  if (r) atomic_fetch_add(&r->outstanding, 1);
  pthread_mutex_unlock(&g->mu);
  return r;
}

static bool any_usable(gateway *g, uint64_t now) {
  bool ok = false;
  pthread_mutex_lock(&g->mu);
  for (size_t i = 0; i < g->n_reps && !ok; i++)
    if (g->reps[i]->grpc_port && gw_replica_usable(g->reps[i], now)) ok = true;
  pthread_mutex_unlock(&g->mu);
  return ok;
}

static bool retry_allowed(gp_ds *d) {
  if (d->m->streaming) return false;
  gw_grpc *gp = d->c->gp;
  return gw_retry_allowed(gp->g, pick_of(d), loop_now_ms(gp->loop), d->deadline_ms);
}

/* ---- upstream ------------------------------------------------------------------------------ */

static void us_unlink(gp_us *u) {
  gp_conn *c = u->c;
  if (u->prev) u->prev->next = u->next;
  else if (c->ustreams == u) c->ustreams = u->next;
  if (u->next) u->next->prev = u->prev;
  u->next = u->prev = NULL;
}

static void us_free(gp_us *u) {
  hdrs_free(&u->head);
  hdrs_free(&u->trail);
  cbuf_free(&u->body);
  free(u);
}

/* The upstream stream ended (err: its HTTP/2 error code, or nonzero when its connection
 * failed). Decides retry, relay or failure for its call. */
static void us_done(gp_us *u, uint32_t err) {
  gp_ds *d = u->d;
  us_unlink(u);
  if (!d) {
    us_free(u);
    return;
  }
  gw_grpc *gp = d->c->gp;
  gateway *g = gp->g;
  d->us = NULL;
  gw_replica *r = u->c->r;
  atomic_fetch_sub(&r->outstanding, 1);
  const nghttp2_nv *st = hdrs_find(&u->trail, "grpc-status");
  bool trailers_only = false;
  if (!st) {
    st = hdrs_find(&u->head, "grpc-status");
    trailers_only = st != NULL;
  }
  bool complete = u->got_head && st;
  int code = complete ? atoi((const char *)st->value) : -1;
  bool unavailable = !u->got_head || (complete && code == S_UNAVAILABLE && !u->any_data);
  /* An admission refusal: UNAVAILABLE with gRPC's retry pushback (the replica's queue or
   * engine is full, nothing was done; HTTP's 503 + Retry-After). Retried like any
   * UNAVAILABLE, but not a failure: no passive ejection, the early health check still runs
   * (a draining replica refuses too), counted in cinfer_gateway_upstream_refusals_total. */
  bool refused = complete && code == S_UNAVAILABLE &&
                 hdrs_find(trailers_only ? &u->head : &u->trail, "grpc-retry-pushback-ms");
  uint64_t now = loop_now_ms(gp->loop);
  if (refused) {
    const char *rl[] = {"upstream", r->addr, "model", d->m->route_by_model ? d->model : "", NULL};
    metric_inc(gw_series(g->f_refusals, rl), 1);
  } else {
    gw_passive(g, r, !complete || code == S_UNAVAILABLE, now);
  }
  if (!complete || refused) gw_replica_check_soon(g, r);
  if (!d->m->streaming && unavailable && !d->finished && retry_allowed(d)) {
    snprintf(d->last_error, sizeof d->last_error, "replica %s: %s", r->addr,
             refused ? "UNAVAILABLE (refused: retry pushback)"
             : complete ? "UNAVAILABLE" : u->c->fail[0] ? u->c->fail : "no answer (connection or stream failed)");
    const char *rl[] = {"upstream", r->addr, "model", d->m->route_by_model ? d->model : "", NULL};
    metric_inc(gw_series(g->f_retries, rl), 1);
    LOG_V(1, "gateway: grpc %s: retrying after %s", d->path, d->last_error);
    us_free(u);
    start_try(d);
    return;
  }
  if (complete) {
    if (!d->m->streaming) {
      if (trailers_only && !u->body.len) {
        gp_hdrs tr = u->head;
        u->head.n = 0;
        ds_finish_hdrs(d, &tr, NULL);
      } else {
        ds_start(d, &u->head);
        if (u->body.len) ds_write(d, u->body.data, u->body.len);
        ds_finish_hdrs(d, trailers_only ? &u->head : &u->trail, NULL);
      }
    } else if (trailers_only && !d->resp_started) {
      gp_hdrs tr = u->head;
      u->head.n = 0;
      ds_finish_hdrs(d, &tr, NULL);
    } else {
      ds_finish_hdrs(d, trailers_only ? &u->head : &u->trail, NULL);
    }
  } else if (err == NGHTTP2_CANCEL && d->finished) {
    /* we cancelled it */
  } else {
    ds_fail(d, S_UNAVAILABLE, "gateway: replica %s %s", r->addr,
            u->got_head ? "ended the call without a status"
            : u->c->fail[0] ? u->c->fail : "failed before answering");
  }
  us_free(u);
}

static ssize_t us_read(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t length,
                       uint32_t *flags, nghttp2_data_source *src, void *user) {
  gp_us *u = src->ptr;
  gp_ds *d = u->d;
  if (!d) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  size_t avail = d->in.len - u->sent;
  if (!avail) {
    if (d->in_closed) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    u->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  size_t n = avail < length ? avail : length;
  memcpy(buf, d->in.data + u->sent, n);
  u->sent += n;
  if (d->m->streaming && u->sent == d->in.len) d->in.len = u->sent = 0;  /* no retries */
  return (ssize_t)n;
}

static gp_conn *conn_new(gw_grpc *gp, int fd, bool up);

static gp_conn *up_conn(gw_grpc *gp, gw_replica *r) {
  gp_conn *c = r->gup;
  if (c && !c->dead && !c->goaway) return c;
  char port[8];
  snprintf(port, sizeof port, "%u", r->grpc_port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(r->host, port, &hints, &ai) || !ai) return NULL;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(ai);
    return NULL;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc < 0 && errno != EINPROGRESS) {
    close(fd);
    return NULL;
  }
  c = conn_new(gp, fd, true);
  if (!c) return NULL;
  c->r = r;
  c->connected = rc == 0;
  snprintf(c->peer, sizeof c->peer, "%s:%u", r->host, r->grpc_port);
  r->gup = c;
  if (gp->tls_up) {
    /* the same name rule as the HTTP upstream: upstream_tls.server_name, else the host */
    const char *name = gp->g->cfg.up_server_name ? gp->g->cfg.up_server_name : r->host;
    c->ssl = net_tls_new_ssl(gp->tls_up, name, loop_now_ms(gp->loop));
    if (!c->ssl || !SSL_set_fd(c->ssl, c->fd)) {
      conn_close(c);
      return NULL;
    }
    SSL_set_connect_state(c->ssl);
    c->handshaking = true;
  }
  /* the connect timeout covers the TLS handshake too */
  if (!c->connected || c->ssl)
    loop_timer_at(gp->loop, &c->ctimer, loop_now_ms(gp->loop) + (uint64_t)gp->g->cfg.connect_timeout_ms);
  if (!c->connected) loop_io_set(gp->loop, &c->io, LOOP_WRITE);
  else if (c->ssl) loop_io_set(gp->loop, &c->io, LOOP_READ | LOOP_WRITE);
  return c;
}

static void start_try(gp_ds *d) {
  gw_grpc *gp = d->c->gp;
  bool listed = false;
  gw_replica *r = choose(d, &listed);
  if (!r) {
    if (d->last_error[0])
      return ds_fail(d, S_UNAVAILABLE, "gateway: %s; no other replica to retry on", d->last_error);
    if (!listed && d->m->route_by_model && d->model[0] && d->m->group == API_HEALTH)
      return ds_reply_msg(d, NULL, 0);  /* ModelReady: ready = false */
    if (!listed && d->m->route_by_model && d->model[0])
      return ds_fail(d, S_NOT_FOUND, "gateway: no replica serves model '%s'%s", d->model,
                     d->version ? " at that version" : "");
    return ds_fail(d, S_UNAVAILABLE, "gateway: no healthy replica with a gRPC port%s%s%s",
                   d->model[0] ? " for model '" : "", d->model, d->model[0] ? "'" : "");
  }
  d->cur = r;
  d->pick.tried[d->pick.n_tries++] = r;
  gp_conn *c = up_conn(gp, r);
  gp_us *u = c ? calloc(1, sizeof *u) : NULL;
  if (!u) {
    atomic_fetch_sub(&r->outstanding, 1);
    gw_passive(gp->g, r, true, loop_now_ms(gp->loop));
    gw_replica_check_soon(gp->g, r);
    snprintf(d->last_error, sizeof d->last_error, "replica %s: cannot connect", r->addr);
    if (!d->m->streaming && retry_allowed(d)) return start_try(d);
    return ds_fail(d, S_UNAVAILABLE, "gateway: %s", d->last_error);
  }
  u->c = c;
  u->d = d;
  d->us = u;
  char auth[80];
  snprintf(auth, sizeof auth, "%s:%u", strchr(r->host, ':') ? "ipv6" : r->host, r->grpc_port);
  nghttp2_nv h[GP_MAX_META + 6] = {NV(":method", "POST"), NV(":scheme", "http"),
                                   {(uint8_t *)":path", (uint8_t *)d->path, 5, d->path_len, 0},
                                   NV(":authority", auth), NV("content-type", "application/grpc"),
                                   NV("te", "trailers")};
  size_t n = 6;
  for (size_t i = 0; i < d->meta.n; i++) {
    const nghttp2_nv *x = &d->meta.nv[i];
    if (d->strip_auth && is(x->name, x->namelen, "authorization")) continue;
    h[n++] = *x;
  }
  nghttp2_data_provider dp = {.source.ptr = u, .read_callback = us_read};
  int32_t id = nghttp2_submit_request(c->h2, NULL, h, n, &dp, u);
  if (id < 0) {
    d->us = NULL;
    u->d = NULL;
    free(u);
    atomic_fetch_sub(&r->outstanding, 1);
    c->goaway = true;  /* e.g. stream ids exhausted: use a new connection next time */
    if (r->gup == c) r->gup = NULL;
    snprintf(d->last_error, sizeof d->last_error, "replica %s: %s", r->addr, nghttp2_strerror(id));
    if (retry_allowed(d)) return start_try(d);
    return ds_fail(d, S_UNAVAILABLE, "gateway: %s", d->last_error);
  }
  u->id = id;
  u->next = c->ustreams;
  if (c->ustreams) c->ustreams->prev = u;
  c->ustreams = u;
  kick(c);
}

/* ---- admission (authentication, groups, rate, concurrency, canary) --------------------------- */

static bool authorize(gp_ds *d) {
  gateway *g = d->c->gp->g;
  d->ks = gw_keys_get(g);
  gw_role role = GW_ROLE_ANON;
  bool bad = false;
  snprintf(d->who, sizeof d->who, "anonymous");
  const char *tok = NULL;
  size_t tl = 0;
  if (d->auth_len > 7 && !strncasecmp(d->auth, "Bearer ", 7)) {
    tok = d->auth + 7;
    tl = d->auth_len - 7;
    while (tl && *tok == ' ') tok++, tl--;
  }
  if (tok && g->cfg.admin_token &&
      api_ct_equal(tok, tl, g->cfg.admin_token, strlen(g->cfg.admin_token))) {
    role = GW_ROLE_OPERATOR;
    snprintf(d->who, sizeof d->who, "admin-token");
    d->strip_auth = true;
  } else if (d->ks && (tok || d->auth_len)) {
    d->key = tok ? gw_keys_find(d->ks, tok, tl) : NULL;
    if (d->key) {
      role = d->key->role;
      snprintf(d->who, sizeof d->who, "key:%s", d->key->id);
    } else {
      bad = true;
    }
    d->strip_auth = true;
  }
  api_group grp = d->m->group;
  bool open = (unsigned)grp < API_GROUP_COUNT && g->cfg.public_groups[grp];
  d->audit = !open;
  gw_access_in in = {.group = grp, .listing = false, .role = role,
                     .key_id = d->key ? d->key->id : NULL, .keys = d->ks != NULL,
                     .bad_credential = bad, .public_groups = g->cfg.public_groups,
                     .key = d->key, .model = d->m->route_by_model ? d->model : ""};
  char msg[400];
  int code = gw_access_decide(&in, msg, sizeof msg);
  if (!code && role == GW_ROLE_TENANT && !d->key->all_models && grp == API_INFERENCE && !d->model[0]) {
    code = 403;
    snprintf(msg, sizeof msg, "API key '%s' may only use its models: the request names none", d->key->id);
  }
  if (!code) return true;
  ds_fail(d, code == 401 ? S_UNAUTHENTICATED : code == 403 ? S_PERMISSION_DENIED : S_INVALID_ARGUMENT,
          "%s", msg);
  return false;
}

/* Appends model_version (field 2) to the one uncompressed request message in d->in: the
 * last occurrence of a field wins, so this overrides the client's (canary versions). */
static bool set_version(gp_ds *d) {
  if (d->in.len < 5 || d->in.data[0] != 0) return false;
  char v[24];
  int vl = snprintf(v, sizeof v, "%lld", d->version);
  uint8_t add[2 + 24] = {0x12, (uint8_t)vl};
  memcpy(add + 2, v, (size_t)vl);
  cbuf_put(&d->in, add, 2 + (size_t)vl);
  if (d->in.oom) return false;
  uint8_t *p = (uint8_t *)d->in.data;
  uint32_t n = (uint32_t)(d->in.len - 5);
  p[1] = (uint8_t)(n >> 24), p[2] = (uint8_t)(n >> 16), p[3] = (uint8_t)(n >> 8), p[4] = (uint8_t)n;
  return true;
}

static void route(gp_ds *d) {
  d->routed = true;
  gw_grpc *gp = d->c->gp;
  gateway *g = gp->g;
  uint64_t now = loop_now_ms(gp->loop);
  if (d->m->local == L_HEALTH) {
    /* grpc.health.v1: SERVING while some replica takes gRPC calls */
    static const uint8_t serving[] = {0x08, 0x01}, not_serving[] = {0x08, 0x02};
    bool ok = !atomic_load(&g->draining) && any_usable(g, now);
    return ds_reply_msg(d, ok ? serving : not_serving, 2);
  }
  if (d->m->model_field) {
    char err[200], *name;
    int r = gw_grpc_request_model((const uint8_t *)d->in.data, d->in.len, d->gzip,
                                  d->m->model_field, &name, err, sizeof err);
    if (r < 0) return ds_fail(d, S_INVALID_ARGUMENT, "gateway: %s", err);
    if (r == 1) d->model = name;
  }
  if (!authorize(d)) return;
  if (d->m->local == L_LIVE) {
    static const uint8_t live[] = {0x08, 0x01};
    return ds_reply_msg(d, live, 2);
  }
  if (d->m->local == L_READY) {
    static const uint8_t ready[] = {0x08, 0x01};
    bool ok = !atomic_load(&g->draining) && any_usable(g, now);
    return ds_reply_msg(d, ready, ok ? 2 : 0);
  }
  /* rate limit: the authenticated key, else the rate key header, else the peer */
  double rate = d->key && d->key->rate > 0 ? d->key->rate : g->cfg.rate;
  double burst = d->key && d->key->rate > 0 ? d->key->burst : g->cfg.burst;
  if (rate > 0 && g->rate) {
    char kbuf[120];
    size_t kl;
    if (d->key) kl = (size_t)snprintf(kbuf, sizeof kbuf, "key:%s", d->key->id);
    else if (d->rate_len) kl = (size_t)snprintf(kbuf, sizeof kbuf, "%.*s", (int)d->rate_len, d->rate_hdr);
    else kl = (size_t)snprintf(kbuf, sizeof kbuf, "%s", d->c->peer);
    gw_bucket_result br = gw_rate_take(g, kbuf, kl < sizeof kbuf ? kl : sizeof kbuf - 1, rate, burst, now);
    if (!br.admitted || br.delay_ms) {
      /* gRPC calls are not delayed: an excess call is refused at once */
      const char *labels[] = {"model", "", NULL};
      metric_inc(gw_series(g->f_rate, labels), 1);
      return ds_fail(d, S_RESOURCE_EXHAUSTED, "rate limit exceeded: retry after %llu s",
                     (unsigned long long)(br.retry_after_s ? br.retry_after_s : 1));
    }
  }
  if (g->cfg.max_concurrency > 0) {
    long long prev = atomic_fetch_add(&g->active, 1);
    if (prev >= g->cfg.max_concurrency) {
      atomic_fetch_sub(&g->active, 1);
      const char *labels[] = {"model", "", NULL};
      metric_inc(gw_series(g->f_shed, labels), 1);
      return ds_fail(d, S_UNAVAILABLE, "gateway overloaded: request shed (concurrency limit)");
    }
  } else {
    atomic_fetch_add(&g->active, 1);
  }
  d->counted_active = true;
  metric_inc(g->m_active, 1);
  if (d->model[0] && g->n_canaries && d->m->route_by_model) {
    d->variant_idx = gw_canary_choose(g, d->model, d->variant_len ? d->variant_hdr : NULL,
                                      d->variant_len, d->group, sizeof d->group, &d->version,
                                      d->variant, sizeof d->variant);
    if (d->version > 0 && !d->m->streaming && !set_version(d))
      return ds_fail(d, S_UNIMPLEMENTED,
                     "gateway: the canary of model '%s' sets a version, which a compressed "
                     "message cannot carry through the gateway", d->model);
    if (d->m->streaming) d->version = 0;
  }
  d->deadline_ms = now + (uint64_t)g->cfg.request_timeout_ms;
  if (!d->m->streaming) loop_timer_at(gp->loop, &d->deadline, d->deadline_ms);
  start_try(d);
}

static void on_deadline(loop_timer *t) {
  gp_ds *d = (gp_ds *)((char *)t - offsetof(gp_ds, deadline));
  gw_grpc *gp = d->c->gp;
  if (d->us) {
    gp_us *u = d->us;
    u->d = NULL;
    d->us = NULL;
    atomic_fetch_sub(&u->c->r->outstanding, 1);
    nghttp2_submit_rst_stream(u->c->h2, NGHTTP2_FLAG_NONE, u->id, NGHTTP2_CANCEL);
    kick(u->c);
  }
  ds_fail(d, S_DEADLINE, "gateway: no answer within %d ms", gp->g->cfg.request_timeout_ms);
  flush_pending(gp);
}

/* Messages are complete enough to route: unary at END_STREAM, streams at their first. */
static void ds_progress(gp_ds *d) {
  if (d->finished || !d->m) return;
  if (d->too_large)
    return ds_fail(d, S_RESOURCE_EXHAUSTED, "gateway: request larger than %zu bytes",
                   d->c->gp->g->cfg.max_body_bytes);
  if (!d->routed) {
    if (d->m->streaming) {
      if (d->in.len >= 5) {
        const uint8_t *p = (const uint8_t *)d->in.data;
        size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if (n > d->c->gp->g->cfg.max_body_bytes)
          return ds_fail(d, S_RESOURCE_EXHAUSTED, "gateway: message larger than %zu bytes",
                         d->c->gp->g->cfg.max_body_bytes);
        if (d->in.len - 5 >= n) return route(d);
      }
      if (d->in_closed) {
        if (d->in.len) return ds_fail(d, S_INTERNAL, "the request ended inside a gRPC message");
        gp_hdrs tr = {.n = 0};
        hdrs_add(&tr, "grpc-status", 11, "0", 1);
        return ds_finish_hdrs(d, &tr, NULL);  /* a stream with no request */
      }
      return;
    }
    if (!d->in_closed) return;
    if (d->m->local == L_NONE || d->m->model_field) {
      if (d->in.len < 5) return ds_fail(d, S_UNIMPLEMENTED, "a unary call carried no request message");
    }
    return route(d);
  }
  if (d->us && d->us->deferred) {
    d->us->deferred = false;
    nghttp2_session_resume_data(d->us->c->h2, d->us->id);
    kick(d->us->c);
  }
}

/* ---- nghttp2 callbacks -------------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  gp_conn *c = user;
  if (c->up || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  gp_ds *d = calloc(1, sizeof *d);
  if (!d) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  d->c = c;
  d->id = f->hd.stream_id;
  d->variant_idx = -1;
  d->status = -1;
  d->model = no_model;
  d->start_ms = clock_now_ms();
  d->deadline.fn = on_deadline;
  snprintf(d->who, sizeof d->who, "anonymous");
  atomic_fetch_add(&c->gp->live, 1);
  d->next = c->streams;
  if (c->streams) c->streams->prev = d;
  c->streams = d;
  nghttp2_session_set_stream_user_data(h2, d->id, d);
  return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *user) {
  gp_conn *c = user;
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  if (c->up) {
    gp_us *u = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!u) return 0;
    if (f->headers.cat == NGHTTP2_HCAT_RESPONSE) {
      hdrs_add(&u->head, name, nl, value, vl);
    } else {
      hdrs_add(&u->trail, name, nl, value, vl);
    }
    return 0;
  }
  gp_ds *d = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!d || d->headers_done) return 0;
  if (is(name, nl, ":path")) {
    size_t n = vl < sizeof d->path - 1 ? vl : sizeof d->path - 1;
    memcpy(d->path, value, n);
    d->path[n] = 0;
    d->path_len = n;
    return 0;
  }
  if (is(name, nl, "content-type")) {
    d->has_ctype = true;
    d->bad_ctype = !(vl >= 16 && !memcmp(value, "application/grpc", 16) &&
                     (vl == 16 || value[16] == '+' || value[16] == ';'));
    return 0;
  }
  if (is(name, nl, "grpc-encoding")) {
    if (is(value, vl, "gzip")) d->gzip = true;
    else if (!is(value, vl, "identity")) d->bad_enc = true;
  }
  if (is(name, nl, "authorization") && vl < sizeof d->auth) {
    memcpy(d->auth, value, vl);
    d->auth_len = vl;
  }
  gateway *g = c->gp->g;
  if (vl < sizeof d->variant_hdr && nl == strlen(g->cfg.variant_header) &&
      !strncasecmp((const char *)name, g->cfg.variant_header, nl)) {
    memcpy(d->variant_hdr, value, vl);
    d->variant_len = vl;
  }
  if (vl < sizeof d->rate_hdr && nl == strlen(g->cfg.rate_key_header) &&
      !strncasecmp((const char *)name, g->cfg.rate_key_header, nl)) {
    memcpy(d->rate_hdr, value, vl);
    d->rate_len = vl;
  }
  if (name[0] != ':' && !is(name, nl, "te") && !is(name, nl, "host"))
    hdrs_add(&d->meta, name, nl, value, vl);  /* beyond GP_MAX_META entries: not forwarded */
  return 0;
}

static void ds_headers_done(gp_ds *d) {
  d->headers_done = true;
  if (!d->has_ctype || d->bad_ctype)
    return ds_fail(d, S_INTERNAL, "content-type must be application/grpc");
  if (d->bad_enc) return ds_fail(d, S_UNIMPLEMENTED, "grpc-encoding is not supported; use gzip or identity");
  static const char svc[] = "/inference.GRPCInferenceService/";
  static const char hc[] = "/grpc.health.v1.Health/Check";
  if (d->path_len == sizeof hc - 1 && !memcmp(d->path, hc, sizeof hc - 1)) {
    d->m = &health_check;
  } else if (d->path_len > sizeof svc - 1 && !memcmp(d->path, svc, sizeof svc - 1)) {
    const char *name = d->path + sizeof svc - 1;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
      if (!strcmp(name, methods[i].name)) d->m = &methods[i];
  }
  if (!d->m) return ds_fail(d, S_UNIMPLEMENTED, "unknown method %s", d->path);
  /* a call that crossed the drain's GOAWAY: the client retries it elsewhere */
  if (d->c->gp->draining) return ds_fail(d, S_UNAVAILABLE, "the gateway is shutting down");
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  gp_conn *c = user;
  if (f->hd.type == NGHTTP2_GOAWAY && c->up) {
    c->goaway = true;
    if (c->r && c->r->gup == c) c->r->gup = NULL;
    return 0;
  }
  if (c->up) {
    gp_us *u = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!u || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_RESPONSE) return 0;
    const nghttp2_nv *s = hdrs_find(&u->head, ":status");
    u->got_head = s && is(s->value, s->valuelen, "200");
    /* a stream relays as it goes (a trailers-only answer waits for the stream's close) */
    if (u->got_head && u->d && u->d->m->streaming && !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
      ds_start(u->d, &u->head);
    return 0;
  }
  gp_ds *d = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!d) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) ds_headers_done(d);
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    d->in_closed = true;
    ds_progress(d);
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user) {
  gp_conn *c = user;
  size_t max = c->gp->g->cfg.max_body_bytes;
  if (c->up) {
    gp_us *u = nghttp2_session_get_stream_user_data(h2, id);
    if (!u || !u->d) return 0;
    u->any_data = true;
    if (u->d->m->streaming) {
      ds_write(u->d, data, len);
    } else if (u->body.len + len > max) {
      gp_ds *d = u->d;
      u->d = NULL;
      d->us = NULL;
      atomic_fetch_sub(&c->r->outstanding, 1);
      nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
      ds_fail(d, S_RESOURCE_EXHAUSTED, "gateway: the replica's answer is larger than %zu bytes", max);
    } else {
      cbuf_put(&u->body, data, len);
    }
    return 0;
  }
  gp_ds *d = nghttp2_session_get_stream_user_data(h2, id);
  if (!d || d->finished || !d->m) return 0;
  if (d->in.len + len > max + 5) {
    d->too_large = true;
  } else {
    cbuf_put(&d->in, data, len);
    if (d->in.oom) d->too_large = true;
  }
  if (d->too_large || d->m->streaming) ds_progress(d);
  return 0;
}

static void ds_free(gp_ds *d) {
  gp_conn *c = d->c;
  gateway *g = c->gp->g;
  if (d->us) {
    gp_us *u = d->us;
    u->d = NULL;
    d->us = NULL;
    atomic_fetch_sub(&u->c->r->outstanding, 1);
    if (!u->c->dead) {
      nghttp2_submit_rst_stream(u->c->h2, NGHTTP2_FLAG_NONE, u->id, NGHTTP2_CANCEL);
      kick(u->c);
    }
  }
  if (!d->finished) {
    d->status = S_CANCELLED;
    record(d);
  }
  loop_timer_cancel(c->gp->loop, &d->deadline);
  if (d->counted_active) {
    atomic_fetch_sub(&g->active, 1);
    metric_inc(g->m_active, -1);
  }
  if (d->pick.holds_retry) atomic_fetch_sub(&g->retries_active, 1);
  gw_keyset_unref(d->ks);
  if (d->prev) d->prev->next = d->next;
  else c->streams = d->next;
  if (d->next) d->next->prev = d->prev;
  hdrs_free(&d->meta);
  hdrs_free(&d->trailers);
  cbuf_free(&d->in);
  cbuf_free(&d->out);
  if (d->model != no_model) free(d->model);
  free(d);
  gw_grpc *gp = c->gp;
  if (atomic_fetch_sub(&gp->live, 1) == 1 && gp->draining) { /* the last call of a drain */
    pthread_mutex_lock(&gp->drain_mu);
    pthread_cond_broadcast(&gp->drain_cv);
    pthread_mutex_unlock(&gp->drain_mu);
  }
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t err, void *user) {
  gp_conn *c = user;
  void *p = nghttp2_session_get_stream_user_data(h2, id);
  if (!p) return 0;
  nghttp2_session_set_stream_user_data(h2, id, NULL);
  if (c->up) us_done(p, err ? err : 0);
  else ds_free(p);
  return 0;
}

/* ---- connections --------------------------------------------------------------------------- */

static void conn_unref(gp_conn *c) {
  if (--c->refs == 0) {
    cbuf_free(&c->wbuf);
    free(c);
  }
}

static void conn_close(gp_conn *c) {
  if (c->dead) return;
  c->dead = true;
  gw_grpc *gp = c->gp;
  loop_io_del(gp->loop, &c->io);
  loop_timer_cancel(gp->loop, &c->ctimer);
  if (c->ssl) {
    if (!c->handshaking) SSL_shutdown(c->ssl);
    SSL_free(c->ssl);
    c->ssl = NULL;
  }
  close(c->fd);
  c->fd = -1;
  if (c->up) {
    if (c->r && c->r->gup == c) c->r->gup = NULL;
    while (c->ustreams) us_done(c->ustreams, NGHTTP2_INTERNAL_ERROR);
  } else {
    while (c->streams) ds_free(c->streams);
  }
  nghttp2_session_del(c->h2);
  c->h2 = NULL;
  if (c->prev) c->prev->next = c->next;
  else gp->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  if (c->pending) {
    gp_conn **pp = &gp->pending;
    while (*pp && *pp != c) pp = &(*pp)->pnext;
    if (*pp) *pp = c->pnext;
    c->pending = false;
  }
  conn_unref(c);
}

static void kick(gp_conn *c) {
  if (c->dead || c->pending) return;
  c->pending = true;
  c->pnext = c->gp->pending;
  c->gp->pending = c;
}

/* A TLS read or write failed after the handshake. Upstream, the reason is kept for the
 * callers: with TLS 1.3 a replica that refuses the gateway's client certificate does so
 * only now, with an alert or just a close. */
static void tls_io_failed(gp_conn *c) {
  char why[200];
  net_tls_last_error(why, sizeof why); /* also empties the error queue */
  if (!c->up || c->fail[0] || (!why[0] && c->any_rx)) return;
  if (why[0]) snprintf(c->fail, sizeof c->fail, "TLS: %s", why);
  else snprintf(c->fail, sizeof c->fail, "TLS: the replica closed the connection before its first "
                "byte (mutual TLS: does it accept the gateway's client certificate?)");
  LOG_W("gateway: grpc upstream %s: %s", c->peer, c->fail);
}

static void conn_flush(gp_conn *c) {
  if ((c->up && !c->connected) || c->handshaking) return;
  h2io_rc rc = h2io_flush(c->fd, c->ssl, c->h2, &c->wbuf, &c->woff, GP_WBUF_HIGH);
  if (rc == H2IO_BLOCKED) {
    loop_io_set(c->gp->loop, &c->io, LOOP_READ | LOOP_WRITE);
    return;
  }
  if (rc != H2IO_DRAINED) {
    if (rc == H2IO_FAILED && c->ssl) tls_io_failed(c);
    conn_close(c);
    return;
  }
  /* an upstream connection after GOAWAY closes once its last stream is done */
  if (c->up && c->goaway && !c->ustreams) {
    conn_close(c);
    return;
  }
  loop_io_set(c->gp->loop, &c->io, LOOP_READ);
}

static void flush_pending(gw_grpc *gp) {
  while (gp->pending) {
    gp_conn *c = gp->pending;
    gp->pending = c->pnext;
    c->pending = false;
    c->refs++;
    conn_flush(c);
    conn_unref(c);
  }
}

/* One step of a TLS handshake, either side (the role was set on the SSL). Both must agree
 * on h2 by ALPN. */
static void handshake(gp_conn *c) {
  gw_grpc *gp = c->gp;
  h2io_hs r = h2io_handshake(c->ssl);
  if (r == H2IO_HS_DONE) {
    c->handshaking = false;
    if (!h2io_alpn_h2(c->ssl)) {
      if (c->up) {
        snprintf(c->fail, sizeof c->fail, "TLS: the replica did not negotiate h2 (ALPN)");
        LOG_W("gateway: grpc upstream %s: %s", c->peer, c->fail);
      } else {
        LOG_V(1, "gateway: grpc TLS client %s did not negotiate h2 (ALPN)", c->peer);
      }
      conn_close(c);
      return;
    }
    if (c->up) loop_timer_cancel(gp->loop, &c->ctimer);
    kick(c);
    return;
  }
  if (r == H2IO_HS_WANT_READ) {
    loop_io_set(gp->loop, &c->io, LOOP_READ);
  } else if (r == H2IO_HS_WANT_WRITE) {
    loop_io_set(gp->loop, &c->io, LOOP_READ | LOOP_WRITE);
  } else {
    char why[200];
    net_tls_last_error(why, sizeof why);
    if (c->up) {
      /* an operator's configuration problem (wrong CA, a plaintext replica): said loudly,
       * and passed to the callers in their UNAVAILABLE message */
      snprintf(c->fail, sizeof c->fail, "TLS handshake failed: %s", why[0] ? why : "connection closed");
      LOG_W("gateway: grpc upstream %s: %s", c->peer, c->fail);
    } else {
      LOG_V(1, "gateway: grpc TLS handshake with %s failed: %s", c->peer, why);
    }
    conn_close(c);
  }
}

static void conn_io(loop_io *io, uint32_t ev) {
  gp_conn *c = (gp_conn *)((char *)io - offsetof(gp_conn, io));
  gw_grpc *gp = c->gp;
  c->refs++;
  if (c->up && !c->connected) {
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0) err = errno;
    if (err || (ev & (LOOP_ERROR | LOOP_HUP))) {
      LOG_V(1, "gateway: grpc upstream %s: connect failed: %s", c->peer, strerror(err ? err : ECONNREFUSED));
      conn_close(c);
    } else if (ev & LOOP_WRITE) {
      c->connected = true;
      if (!c->ssl) loop_timer_cancel(gp->loop, &c->ctimer);
      if (c->ssl) handshake(c);
      else kick(c);
    }
  } else if (c->ssl && c->handshaking) {
    handshake(c);
  } else if (ev & (LOOP_READ | LOOP_HUP | LOOP_ERROR | (c->ssl ? LOOP_WRITE : 0))) {
    /* TLS: read until OpenSSL holds nothing more (a buffered record would not wake epoll) */
    for (;;) {
      bool wants_write;
      ssize_t n = h2io_recv(c->fd, c->ssl, gp->rbuf, GP_RBUF, &wants_write);
      if (n > 0) {
        c->any_rx = true;
        ssize_t r = nghttp2_session_mem_recv(c->h2, gp->rbuf, (size_t)n);
        if (r < 0) {
          LOG_V(1, "gateway: grpc connection %s: %s", c->peer, nghttp2_strerror((int)r));
          conn_flush(c);  /* the GOAWAY nghttp2 queued */
          conn_close(c);
          break;
        }
        kick(c);
        if (c->ssl && (size_t)n == GP_RBUF) continue;
        break;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (c->ssl) tls_io_failed(c);
      conn_close(c);
      break;
    }
  }
  if (!c->dead && !c->handshaking && (ev & LOOP_WRITE)) kick(c);
  flush_pending(gp);
  conn_unref(c);
}

static void on_connect_timeout(loop_timer *t) {
  gp_conn *c = (gp_conn *)((char *)t - offsetof(gp_conn, ctimer));
  gw_grpc *gp = c->gp;
  if (!c->fail[0])
    snprintf(c->fail, sizeof c->fail, "%s timed out", c->connected ? "TLS handshake" : "connect");
  LOG_V(1, "gateway: grpc upstream %s: %s", c->peer, c->fail);
  conn_close(c);
  flush_pending(gp);
}

static gp_conn *conn_new(gw_grpc *gp, int fd, bool up) {
  gp_conn *c = calloc(1, sizeof *c);
  nghttp2_session_callbacks *cb =
      c ? h2io_callbacks(on_begin_headers, on_header, on_frame_recv, on_data_chunk, on_stream_close) : NULL;
  if (!cb) goto fail;
  int rc = h2io_session_new(&c->h2, cb, c, !up);
  nghttp2_session_callbacks_del(cb);
  if (rc) goto fail;
  if (h2io_settings(c->h2, 1024)) goto fail;
  c->gp = gp;
  c->fd = fd;
  c->up = up;
  c->refs = 1;
  c->io.fd = fd;
  c->io.fn = conn_io;
  c->ctimer.fn = on_connect_timeout;
  cinfer_status *st = loop_io_add(gp->loop, &c->io, LOOP_READ);
  if (st) {
    cinfer_status_free(st);
    goto fail;
  }
  c->next = gp->conns;
  if (gp->conns) gp->conns->prev = c;
  gp->conns = c;
  kick(c);
  return c;
fail:
  if (c && c->h2) nghttp2_session_del(c->h2);
  free(c);
  close(fd);
  return NULL;
}

/* ALPN: the gRPC listener speaks only h2 (a client offering only http/1.1 is refused). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned inlen, void *arg) {
  (void)ssl;
  (void)arg;
  for (unsigned i = 0; i + 1 <= inlen;) {
    unsigned n = in[i];
    if (i + 1 + n > inlen) break;
    if (n == 2 && !memcmp(in + i + 1, "h2", 2)) {
      *out = in + i + 1;
      *outlen = 2;
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + n;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static void on_accept(loop_io *io, uint32_t ev) {
  gw_grpc *gp = (gw_grpc *)((char *)io - offsetof(gw_grpc, lio));
  for (int i = 0; i < 64; i++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(gp->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (gp->draining) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    gp_conn *c = conn_new(gp, fd, false);
    if (c) {
      char host[64] = "";
      getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, NULL, 0, NI_NUMERICHOST);
      snprintf(c->peer, sizeof c->peer, "%s", host);
      if (gp->tls) {
        c->ssl = net_tls_new_ssl(gp->tls, NULL, loop_now_ms(gp->loop));
        if (!c->ssl || !SSL_set_fd(c->ssl, c->fd)) {
          conn_close(c);
          continue;
        }
        SSL_CTX_set_alpn_select_cb(SSL_get_SSL_CTX(c->ssl), alpn_select, NULL);
        SSL_set_accept_state(c->ssl);
        c->handshaking = true;
      }
    }
  }
  flush_pending(gp);
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

cinfer_status *gw_grpc_start(gateway *g) {
  gw_grpc *gp = calloc(1, sizeof *gp);
  if (!gp || !(gp->rbuf = malloc(GP_RBUF)) || !(gp->scratch = gw_scratch_new())) {
    if (gp) free(gp->rbuf);
    free(gp);
    return cinfer_status_oom("gateway grpc");
  }
  gp->g = g;
  gp->lfd = -1;
  atomic_init(&gp->live, 0);
  pthread_mutex_init(&gp->drain_mu, NULL);
  pthread_cond_init(&gp->drain_cv, NULL);
  gp->rng = (g->cfg.seed ? (uint64_t)g->cfg.seed : clock_now_ms()) * 0x9E3779B97F4A7C15ULL | 1;
  gp->f_calls = metrics_family(g->reg, "cinfer_gateway_grpc_requests_total",
                               "gRPC calls answered by the gateway, by upstream, method and gRPC status",
                               METRIC_COUNTER, NULL, 0);
  cinfer_status *st = NULL;
  if (g->cfg.tls_cert) {
    /* its own context (same files, same reloads): ALPN h2 here must not change what the
     * HTTP listener negotiates */
    net_tls_opts to = {.server = true, .cert_file = g->cfg.tls_cert, .key_file = g->cfg.tls_key,
                       .ca_file = g->cfg.tls_client_ca};
    st = net_tls_create(&to, &gp->tls);
  }
  if (!st && g->cfg.upstream_tls) {
    /* the HTTP upstream's files, its own context: ALPN h2 (the HTTP side offers none) */
    net_tls_opts uo = {.cert_file = g->cfg.up_cert, .key_file = g->cfg.up_key,
                       .ca_file = g->cfg.up_ca, .alpn = "h2"};
    st = net_tls_create(&uo, &gp->tls_up);
  }
  if (!st) st = loop_create(&gp->loop);
  if (!st) st = net_listen("gateway grpc", g->cfg.host, (uint16_t)g->cfg.grpc_port, 1024, true,
                           &gp->lfd, &gp->port);
  if (!st) {
    gp->lio.fd = gp->lfd;
    gp->lio.fn = on_accept;
    st = loop_io_add(gp->loop, &gp->lio, LOOP_READ);
  }
  if (!st) st = loop_start_thread(gp->loop, "gw-grpc");
  if (st) {
    if (gp->lfd >= 0) close(gp->lfd);
    if (gp->loop) loop_destroy(gp->loop);
    net_tls_destroy(gp->tls);
    net_tls_destroy(gp->tls_up);
    gw_scratch_free(gp->scratch);
    free(gp->rbuf);
    free(gp);
    return st;
  }
  g->grpc = gp;
  return NULL;
}

uint16_t gateway_grpc_port(const gateway *g) { return g->grpc ? g->grpc->port : 0; }

typedef struct gp_job {
  gw_grpc *gp;
  bool close_all;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
} gp_job;

static void job_run(void *arg) {
  gp_job *j = arg;
  gw_grpc *gp = j->gp;
  if (gp->lfd >= 0) {
    loop_io_del(gp->loop, &gp->lio);
    close(gp->lfd);
    gp->lfd = -1;
  }
  gp->draining = true;
  for (gp_conn *c = gp->conns, *next; c; c = next) {
    next = c->next;
    if (j->close_all) {
      conn_close(c);
    } else if (!c->up) {
      nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->h2),
                            NGHTTP2_NO_ERROR, NULL, 0);
      kick(c);
    }
  }
  if (j->close_all) {
    while (gp->conns) conn_close(gp->conns);
  }
  flush_pending(gp);
  pthread_mutex_lock(&j->mu);
  j->done = true;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void run_job(gw_grpc *gp, bool close_all) {
  gp_job j = {.gp = gp, .close_all = close_all};
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, NULL);
  if (loop_post(gp->loop, job_run, &j)) {
    pthread_mutex_lock(&j.mu);
    while (!j.done) pthread_cond_wait(&j.cv, &j.mu);
    pthread_mutex_unlock(&j.mu);
  }
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.cv);
}

void gw_grpc_drain(gateway *g) {
  if (g->grpc) run_job(g->grpc, false);
}

int gw_grpc_drain_wait(gateway *g, uint64_t deadline_ms) {
  gw_grpc *gp = g->grpc;
  if (!gp) return 0;
  pthread_mutex_lock(&gp->drain_mu);
  while (atomic_load(&gp->live) > 0) {
    uint64_t now = clock_now_ms();
    if (now >= deadline_ms) break;
    /* bounded steps: the wake-up needs no exact clock match with ds_free's broadcast */
    uint64_t step = deadline_ms - now < 100 ? deadline_ms - now : 100;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(step % 1000) * 1000000L;
    ts.tv_sec += (time_t)(step / 1000) + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&gp->drain_cv, &gp->drain_mu, &ts);
  }
  pthread_mutex_unlock(&gp->drain_mu);
  int left = atomic_load(&gp->live);
  if (left) LOG_W("gateway: drain timeout: %d gRPC calls still running are cut", left);
  return left;
}

void gw_grpc_stop(gateway *g) {
  gw_grpc *gp = g->grpc;
  if (!gp) return;
  run_job(gp, true);
  loop_stop(gp->loop);
  loop_join(gp->loop);
  loop_destroy(gp->loop);
  net_tls_destroy(gp->tls);
  net_tls_destroy(gp->tls_up);
  pthread_mutex_destroy(&gp->drain_mu);
  pthread_cond_destroy(&gp->drain_cv);
  gw_scratch_free(gp->scratch);
  free(gp->rbuf);
  free(gp);
  g->grpc = NULL;
}
