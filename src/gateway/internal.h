/* internal.h: shared state of the gateway runtime (runtime.c, proxy.c, control.c). Private.
 *
 * Threads: N I/O loops (the http_server's, requests and upstream pools live there) and one
 * control loop (discovery, active health checks, model discovery).
 *
 * Invariants:
 *  1. g->mu guards the replica table (g->reps, g->n_reps), every replica's health, models,
 *     group/weight/sources, the canary table and the round-robin cursor. It is held only
 *     for short, allocation-free sections (choice, state updates), never across I/O.
 *  2. Replica records are never freed before gateway_destroy: a replica that leaves
 *     discovery keeps its record with sources == 0 (not routable), so pointers held by
 *     in-flight tries and pooled connections stay valid. The table grows only with
 *     distinct addresses ever seen (bounded by GW_MAX_REPLICAS).
 *  3. r->idle[i] (pooled keep-alive connections) is touched only on I/O loop i.
 *  4. Every exchange is answered exactly once, after its upstream connection was released
 *     or destroyed, so draining the server implies no connection is in use.
 */
#ifndef CINFER_GATEWAY_INTERNAL_H
#define CINFER_GATEWAY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "gateway/gateway.h"
#include "metrics/metrics.h"
#include "net/http.h"
#include "net/loop.h"

#define GW_MAX_REPLICAS 4096
#define GW_MAX_LOOPS 64
#define GW_SRC_STATIC 1u
#define GW_SRC_FILE 2u
#define GW_SRC_DNS0 4u /* DNS name k uses bit (2 + k), k < 30 */

typedef struct gw_req gw_req;
typedef struct gateway gateway;

typedef struct gw_conn {
  http_client *c;
  struct gw_replica *r;
  int loop;
  gw_req *req;           /* the try using this connection, NULL when idle */
  struct gw_conn *next;  /* idle list */
} gw_conn;

typedef struct gw_replica {
  char addr[80];         /* "ip:port" / "[v6]:port": identity and metrics label */
  char host[64];
  uint16_t port;
  uint16_t grpc_port;    /* its gRPC port, 0 = none (not a gRPC candidate); under g->mu */
  char group[64];        /* "" = no group */
  uint64_t id_hash;      /* gw_hash64(addr): identity for affinity hashing */
  int weight;
  gateway *gw;
  unsigned sources;      /* GW_SRC_* bits that list it; 0 = removed */
  bool mark;             /* scratch for apply_source */
  gw_health h;
  bool draining;         /* last check answered not ready */
  _Atomic uint32_t outstanding;
  _Atomic uint64_t n_requests, n_failures;
  /* models ready on it: "name" and "name@version" strings, owned; replaced under g->mu */
  char **models;
  size_t n_models;
  bool models_known;
  /* Event times on clock_now_ms(), for /status.json (0 = not since it last joined).
   * Under g->mu, except first_ok_ms (atomic, set once by the I/O loop that sees it). */
  uint64_t added_ms;      /* last (re)joined discovery */
  uint64_t healthy_ms;    /* last turned healthy by checks */
  uint64_t models_ms;     /* first model list learnt since joining */
  uint64_t out_ms;        /* last stopped taking new requests (failed check, ejection) */
  uint64_t unhealthy_ms;  /* last turned unhealthy by checks */
  uint64_t ejected_ms;    /* last ejected */
  _Atomic uint64_t first_ok_ms;  /* first successful proxied answer since joining */
  /* control loop only */
  http_client *hc, *mc;
  int mc_stage;          /* 0 idle, 1 repository index, 2 /v1/models */
  char *mbuf; size_t mlen, mcap;
  char **pending; size_t n_pending;  /* models being collected */
  int hc_status, mc_status;
  uint64_t next_check_ms, next_models_ms;
  bool check_now;         /* set by any thread (atomic builtins) */
  /* kv_aware: LLM load per model from the replica's /metrics, replaced under g->mu */
  gw_kv_stat *kv;
  size_t n_kv;
  uint64_t kv_ms;        /* when read (clock_now_ms), 0 = never */
  http_client *xc;       /* control loop: the /metrics scrape */
  char *xbuf; size_t xlen, xcap;
  int xc_status;
  struct gp_conn *gup;   /* gRPC: the current HTTP/2 connection (gRPC loop only) */
  /* per loop pools (invariant 3) */
  gw_conn **idle;
  int *n_idle;
  /* metrics */
  metric *m_healthy, *m_ejections;
} gw_replica;

typedef struct gw_canary_state {
  gw_canary *cfg;         /* points into gateway.cfg.canaries */
  long long current[16];  /* swrr state per variant */
  long long requests[16], errors[16];  /* answers per variant since the last weight change */
} gw_canary_state;

typedef struct gw_rate_entry {
  char key[96];
  uint64_t hash;
  gw_bucket b;
  double rate;            /* the rate this bucket leaks at (the key's own or --rate) */
  uint64_t last_use_ms;
  bool used;
} gw_rate_entry;

/* Per-loop cache of metric series for the request path, so that answering a request
 * neither allocates nor takes the registry lock once its series exists. */
#define GW_MCACHE_SLOTS 1024
typedef struct gw_mcache_entry {
  uint64_t hash;
  const metric_family *f;
  const struct gw_replica *r;
  int code;
  char model[128];
  char variant[64];
  metric *m;
} gw_mcache_entry;

/* Candidate arrays of one loop, GW_MAX_REPLICAS entries each (route.c): used under g->mu
 * by that loop only, so a choice sees every replica without allocating. */
typedef struct gw_scratch {
  struct gw_replica **cand;
  uint32_t *out;
  int *w;
  uint64_t *ids;
  gw_kv_load *loads;
} gw_scratch;

/* What a request may be routed to, and the replicas it tried (route.c). */
typedef struct gw_pick {
  const char *model;      /* NULL or "" = any replica */
  long long version;      /* 0 = any */
  const char *group;      /* replica group, NULL or "" = any */
  bool grpc;              /* only replicas with a gRPC port */
  struct gw_replica *tried[4];
  int n_tries;
  bool holds_retry;       /* took a retry-budget token (g->retries_active) */
} gw_pick;

typedef struct gw_loop_ctx {
  net_loop *loop;
  uint64_t rng;
  gw_scratch *scratch;      /* NULL only before the loop started */
  gw_mcache_entry *mcache;  /* GW_MCACHE_SLOTS entries, loop thread only; NULL = off */
} gw_loop_ctx;

struct gateway {
  gw_config cfg;          /* owned deep copy (strings shared with nothing) */
  http_server *srv;
  int n_loops;
  gw_loop_ctx loops[GW_MAX_LOOPS];
  _Atomic bool started;   /* loops[] filled in */
  _Atomic bool draining;
  net_loop *ctl;
  bool ctl_running;       /* its thread was started */
  bool ctl_stopping;
  loop_timer ctl_tick;
  uint64_t next_dns_ms, next_file_ms;
  char *health_req;
  size_t health_req_len;
  time_t file_mtime;
  long file_mtime_ns;
  off_t file_size;

  pthread_mutex_t mu;     /* invariant 1 */
  gw_replica **reps;
  size_t n_reps;
  uint64_t rr_cursor;
  gw_canary_state *canaries;
  size_t n_canaries;

  /* API keys (auth.keys_file): replaced by the control loop when the file changes;
   * requests hold a reference (gw_keyset_ref) for their lifetime */
  pthread_mutex_t keys_mu;
  gw_keyset *keys;        /* NULL = authentication off */
  time_t keys_mtime;
  long keys_mtime_ns;
  off_t keys_size;
  ino_t keys_ino;
  uint64_t next_keys_ms;

  pthread_mutex_t tok_mu;  /* per-key token budgets (key tpm=) */
  struct gw_tok_entry { char id[65]; gw_tokens t; } *tok;
  size_t n_tok, cap_tok;

  pthread_mutex_t rate_mu;
  gw_rate_entry *rate;    /* open addressing, cfg.rate_max_keys * 2 slots */
  size_t rate_slots, rate_used;

  _Atomic long long active;          /* admitted requests in flight */
  _Atomic long long retries_active;  /* of which on a retry try */

  struct gw_grpc *grpc;   /* the gRPC listener and its loop (grpc_proxy.c), NULL = off */
  net_tls *tls_srv;       /* listener TLS, NULL = plain */
  net_tls *tls_up;        /* upstream TLS, NULL = plain */

  metrics_registry *reg;
  metric_family *f_requests, *f_duration, *f_healthy, *f_ejections, *f_retries, *f_rate,
      *f_shed, *f_active, *f_up_outstanding, *f_tokens, *f_token_limited, *f_refusals;
  metric *m_active;
  uint64_t start_ms;
};

/* control.c */
cinfer_status *gw_control_start(gateway *g);
cinfer_status *gw_static_resolve(gateway *g);
void gw_control_stop(gateway *g);
/* Schedules an immediate active check of r (any thread). */
void gw_replica_check_soon(gateway *g, gw_replica *r);
/* Finds or adds the replica; g->mu held. NULL when the table is full. */
gw_replica *gw_replica_get(gateway *g, const char *host, uint16_t port);
bool gw_replica_has_model(const gw_replica *r, const char *model, long long version);
/* Takes new requests at now_ms: listed, not draining, healthy and not ejected; g->mu held. */
bool gw_replica_usable(const gw_replica *r, uint64_t now_ms);

/* Reloads the key file when its mtime/size/inode changed (force: always). A file that
 * cannot be read or parsed keeps the current keys and logs the error naming file:line.
 * Returns the error (caller frees) for the first load at startup. */
cinfer_status *gw_keys_refresh(gateway *g, bool force);
/* The current key set with a reference taken (release with gw_keyset_unref); NULL when
 * authentication is off. Any thread. */
gw_keyset *gw_keys_get(gateway *g);

/* proxy.c */
void gw_proxy(gateway *g, http_exchange *ex, const http_request *req, int loop);
void gw_pools_free_on_loop(gateway *g, int loop);
/* Passive health result of a proxied try (ejection with the ejected-share cap). */
void gw_passive(gateway *g, gw_replica *r, bool failure, uint64_t now);
/* Takes one request from the rate bucket of key[0..n) (created at first use). */
gw_bucket_result gw_rate_take(gateway *g, const char *key, size_t n, double rate, double burst,
                              uint64_t now);
/* The canary variant of a request for model (force: the variant header's value or NULL):
 * its index (-1 = none: no canary for model) and, when >= 0, its name, replica group and
 * version override (0 = none). */
int gw_canary_choose(gateway *g, const char *model, const char *force, size_t flen,
                     char *group, size_t gcap, long long *version, char *name, size_t ncap);

/* grpc_proxy.c: the gRPC listener on its own loop (cfg.grpc_port >= 0) */
typedef struct gw_grpc gw_grpc;
cinfer_status *gw_grpc_start(gateway *g);
void gw_grpc_drain(gateway *g);   /* stop accepting, GOAWAY to clients */
/* Waits until every downstream gRPC call (unary or stream) has ended, or until deadline_ms
 * (clock_now_ms); returns how many were still running then (they are cut by gw_grpc_stop). */
int gw_grpc_drain_wait(gateway *g, uint64_t deadline_ms);
void gw_grpc_stop(gateway *g);    /* closes everything, joins the loop; NULL-safe */

/* route.c */
gw_scratch *gw_scratch_new(void);
void gw_scratch_free(gw_scratch *s);  /* NULL-safe */
bool gw_pick_tried(const gw_pick *p, const gw_replica *r);
/* g->mu held. Fills cand with the usable replicas p may go to that it has not tried, in
 * table order, and returns how many (cand: GW_MAX_REPLICAS entries; NULL = only whether
 * there is one, 0 or 1). *listed: some present replica lists p's model (even if not
 * usable; with no model, some present replica). */
size_t gw_candidates(gateway *g, const gw_pick *p, uint64_t now, gw_replica **cand, bool *listed);
/* May this request try again on another replica now (retries, tries, deadline, the retry
 * budget, another candidate)? Takes a retry-budget token when it first answers true (the
 * request returns it when it ends, if p->holds_retry). Takes g->mu. */
bool gw_retry_allowed(gateway *g, gw_pick *p, uint64_t now, uint64_t deadline_ms);

/* runtime.c */
void gw_respond_error(http_exchange *ex, int status, const char *request_id, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
metric *gw_series(metric_family *f, const char *const *labels);

#endif
