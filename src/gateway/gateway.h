/* gateway.h: the contract of `cinfer gateway`, the inference-aware front door in front of
 * `cinfer serve` replicas. Three layers, each usable alone (the pure ones are unit-tested):
 *
 *   1. configuration: gw_config (defaults, JSON file, flags), errors name the key;
 *   2. policies with no I/O and an injected clock/RNG: token bucket (nginx limit_req
 *      semantics), balancer choice (power-of-two least-outstanding, round robin, weighted),
 *      smooth weighted round robin for canary splits, the replica health state machine;
 *   3. the runtime: gateway_create/gateway_drain/gateway_destroy on src/net loops.
 *
 * Times are milliseconds of a monotonic clock passed in by the caller (loop_now_ms in the
 * runtime, a fake clock in tests), so every policy is deterministic under test.
 */
#ifndef CINFER_GATEWAY_H
#define CINFER_GATEWAY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"
#include "net/apigroup.h"

/* ===================================================================================== */
/* Configuration                                                                          */
/* ===================================================================================== */

/* KV_AWARE: OpenAI routes are scored by the replicas' LLM load and prefix affinity
 * (gw_kv_pick, from their /metrics); every other route is P2C. */
typedef enum gw_balancer { GW_BAL_P2C = 0, GW_BAL_ROUND_ROBIN, GW_BAL_WEIGHTED, GW_BAL_KV_AWARE } gw_balancer;

typedef struct gw_static_upstream {
  char *address;  /* "host:port" (IPv6 as "[::1]:port"); owned */
  char *group;    /* replica group for canary variants; owned, may be NULL */
  int weight;     /* >= 1, used by the weighted balancer */
  int grpc_port;  /* the replica's gRPC port; 0 = upstreams.grpc_port */
} gw_static_upstream;

typedef struct gw_dns_upstream {
  char *name;     /* resolved every dns_interval_ms; every A/AAAA record is a replica */
  uint16_t port;
  char *group;
  int weight;
} gw_dns_upstream;

typedef struct gw_variant {
  char *name;     /* label in metrics and the value of the force header */
  char *group;    /* replicas of this group serve the variant (NULL: any replica) */
  long long version; /* > 0: the request is sent to /v2/models/NAME/versions/V/(rest) */
  int weight;     /* >= 0; the split is weight / sum(weights) */
} gw_variant;

typedef struct gw_canary {
  char *model;
  gw_variant *variants;
  size_t n_variants;
  /* automatic rollback: a variant whose share of 5xx answers exceeds max_error_rate after
   * at least min_requests requests gets weight 0 (if another variant keeps weight > 0).
   * max_error_rate 0 = off. */
  double max_error_rate;
  int min_requests;
} gw_canary;

typedef struct gw_priority_class {
  char *name;     /* value of the priority header */
  double share;   /* admitted while active < share * max_concurrency; (0, 1] */
} gw_priority_class;

/* A trusted proxy network for X-Forwarded-For ("10.0.0.0/8", "::1/128", "192.0.2.7"). */
typedef struct gw_cidr {
  int family;             /* AF_INET or AF_INET6 */
  unsigned char addr[16];
  int prefix;             /* bits */
} gw_cidr;

typedef struct gw_config {
  /* listen */
  char *host;               /* default "0.0.0.0" */
  int port;                 /* default 8080; 0 = ephemeral */
  int grpc_port;            /* gRPC listener (h2c, or h2 by ALPN with TLS); -1 = off
                               (default); 0 = ephemeral */
  int io_threads;           /* default 2 */
  int drain_timeout_ms;     /* SIGTERM grace period, default 30000 */
  /* upstreams */
  gw_static_upstream *statics; size_t n_statics;
  gw_dns_upstream *dns; size_t n_dns;
  int dns_interval_ms;      /* default 5000 */
  char *upstreams_file;     /* one host:port [group] [weight] per line; '#' comments */
  int file_interval_ms;     /* default 1000 (mtime polled) */
  int models_interval_ms;   /* model discovery per replica, default 5000 */
  int upstream_grpc_port;   /* replicas' gRPC port when an entry names none; 0 = none */
  gw_balancer balancer;     /* default p2c */
  unsigned seed;            /* RNG seed; 0 = from the clock */
  /* active health checks */
  char *health_path;        /* default "/v2/health/ready" */
  int health_interval_ms;   /* default 2000 */
  int health_timeout_ms;    /* default 1000 */
  int unhealthy_threshold;  /* default 2 consecutive failed checks */
  int healthy_threshold;    /* default 2 consecutive passed checks */
  /* passive outlier ejection */
  int eject_consecutive;    /* default 5 consecutive connect failures or 5xx; 0 = off */
  int eject_base_ms;        /* default 10000; n-th ejection lasts n * base */
  int eject_max_ms;         /* default 300000 */
  int eject_max_percent;    /* default 50: never more than this share ejected */
  /* retries and deadlines */
  int retries;              /* default 1 (another replica); 0 = off */
  double retry_budget_ratio;/* default 0.2 of active requests may be retries */
  int retry_budget_min;     /* default 10 concurrent retries always allowed */
  int connect_timeout_ms;   /* default 1000 */
  int try_timeout_ms;       /* default 30000: per-try inactivity bound */
  int request_timeout_ms;   /* default 60000: overall deadline */
  int max_idle_per_pool;    /* default 64 idle keep-alive connections per replica per loop */
  size_t max_body_bytes;    /* default 64 MiB (requests and buffered responses) */
  /* admission */
  double rate;              /* requests per second per key; 0 = no rate limit */
  double burst;             /* default 0 */
  bool nodelay;             /* default false (nginx: excess requests are delayed) */
  char *rate_key_header;    /* default "X-API-Key"; else X-Forwarded-For, else "-" */
  int rate_max_keys;        /* default 10000 buckets (least recently used evicted) */
  int max_concurrency;      /* 0 = unlimited */
  char *priority_header;    /* default "X-Priority" */
  gw_priority_class *classes; size_t n_classes; /* default: none (one class, share 1) */
  /* canary */
  gw_canary *canaries; size_t n_canaries;
  char *variant_header;     /* default "X-Cinfer-Variant" */
  /* affinity: session stickiness and LLM prompt-prefix affinity */
  char *session_header;     /* default "X-Session-Id": same value -> same replica */
  int prefix_bytes;         /* default 0 (off): OpenAI prompts route on their first N bytes */
  double affinity_load_factor; /* default 1.25: bounded load, see gw_affinity_pick */
  double kv_weight;         /* kv_aware: cost of a full KV cache, in sequences (default 4) */
  double prefix_bonus;      /* kv_aware: cost taken off the prefix's replica (default 2) */
  /* admin */
  char *admin_token;        /* bearer token for the /admin endpoints and the restricted API
                               groups (an operator credential); NULL = admin disabled */
  /* security (docs/security.md) */
  char *keys_file;          /* API keys (gw_keys_parse format); NULL = no authentication */
  int keys_interval_ms;     /* default 1000: mtime polled, a changed file is reloaded */
  gw_cidr *trusted_proxies; size_t n_trusted_proxies; /* X-Forwarded-For honoured from these */
  bool public_groups[API_GROUP_COUNT]; /* forwarded without an operator credential;
                                          default health, metadata, inference */
  /* TLS (docs/security.md): the listener (cert + key; client_ca = require client
   * certificates) and the connections to replicas (upstream_tls: CA to verify them, an
   * optional client certificate for mutual TLS, the name their certificate must carry) */
  char *tls_cert, *tls_key, *tls_client_ca;
  bool upstream_tls;
  char *up_ca, *up_cert, *up_key, *up_server_name;
} gw_config;

/* Fills defaults (no upstreams). Caller frees with gw_config_free. */
void gw_config_defaults(gw_config *c);
/* Applies a JSON document (text[0..len)) on top of c. Unknown keys, wrong types and values
 * out of range are errors whose message names the key path, e.g.
 * "config.json: health.interval_ms: must be an integer in [10, 3600000]". */
cinfer_status *gw_config_apply_json(gw_config *c, const char *text, size_t len,
                                    const char *origin);
cinfer_status *gw_config_load_file(gw_config *c, const char *path);
/* Final checks after flags (e.g. at least one upstream source). */
cinfer_status *gw_config_validate(const gw_config *c);
void gw_config_free(gw_config *c);
/* Appends a --trusted-proxy / auth.trusted_proxies entry; false when not an address/CIDR. */
bool gw_config_add_trusted_proxy(gw_config *c, const char *cidr);
/* Parses "host:port" / "[v6]:port"; host written to host[0..cap). */
bool gw_parse_hostport(const char *s, char *host, size_t cap, uint16_t *port);

/* ===================================================================================== */
/* Policies (pure)                                                                        */
/* ===================================================================================== */

/* xorshift64* RNG; state must not be 0. */
uint64_t gw_rand(uint64_t *state);

/* nginx limit_req: `excess` counts requests above the rate (in requests); each request
 * first leaks rate * elapsed, then adds one. excess > burst -> reject; otherwise admit,
 * after a delay of (excess / rate) unless nodelay. Zero-initialise, then use. */
typedef struct gw_bucket {
  double excess;
  uint64_t last_ms;
  bool used;
} gw_bucket;

typedef struct gw_bucket_result {
  bool admitted;
  uint64_t delay_ms;       /* admitted without nodelay: wait this long before forwarding */
  uint64_t retry_after_s;  /* rejected: seconds until one more request would be admitted */
} gw_bucket_result;

gw_bucket_result gw_bucket_take(gw_bucket *b, double rate, double burst, bool nodelay,
                                uint64_t now_ms);

/* A per-key token budget (tokens per minute), paid after the fact: the level refills at
 * tpm/60 per second up to tpm, a request is admitted while the level is above zero, and
 * the tokens its answer used are then taken (the level may go below zero: the debt is
 * waited out). */
typedef struct gw_tokens {
  double level;
  uint64_t last_ms;
  bool used;
} gw_tokens;
/* 0 when admitted, else the seconds until the level is above zero again. */
uint64_t gw_tokens_admit(gw_tokens *t, double tpm, uint64_t now_ms);
void gw_tokens_charge(gw_tokens *t, double tpm, double tokens, uint64_t now_ms);

/* Counts the tokens of an OpenAI answer as it streams by: the last "total_tokens" seen
 * (a whole answer's usage, or a stream's final usage chunk with include_usage), else one
 * token per streamed chunk that carries a choice. Fed in pieces of any size. */
typedef struct gw_tok_usage {
  long long total;        /* -1 until "total_tokens" is seen */
  long long chunks;
  char tail[40];          /* the last bytes of the previous piece (a pattern may straddle) */
  size_t tail_len;
} gw_tok_usage;
void gw_tok_usage_init(gw_tok_usage *u);
void gw_tok_usage_feed(gw_tok_usage *u, const char *data, size_t len);
long long gw_tok_usage_tokens(const gw_tok_usage *u);

/* Balancer over candidates (indexes into outstanding/weights). Returns the chosen position
 * in [0, n) or -1 when n == 0.
 *  P2C: two distinct random candidates, the one with fewer outstanding requests (ties:
 *       the first drawn); weights are ignored;
 *  ROUND_ROBIN: *rr_cursor advanced modulo n;
 *  WEIGHTED: random with probability weight / sum(weights). */
int gw_balance_pick(gw_balancer kind, size_t n, const uint32_t *outstanding,
                    const int *weights, uint64_t *rng, uint64_t *rr_cursor);

/* Smooth weighted round robin (nginx): deterministic, the split over any window of
 * sum(weights) picks is exact. current[] is caller state (zero-initialised). Returns -1
 * when every weight is 0. */
int gw_swrr_pick(size_t n, const int *weights, long long *current);

/* Affinity with bounded load (rendezvous hashing): the candidate with the highest
 * mix(key, ids[i]) wins unless its outstanding count exceeds
 * load_factor * (mean outstanding + 1), in which case the next-highest candidate under the
 * bound wins; -1 when none is (the caller falls back to the balancer). Removing one
 * candidate moves only the keys that were on it. */
int gw_affinity_pick(size_t n, const uint64_t *ids, uint64_t key, const uint32_t *outstanding,
                     double load_factor);
uint64_t gw_hash64(const void *data, size_t len);

/* KV-aware routing (kv_aware balancer). A replica's LLM load for one model, from its
 * /metrics (cinfer_llm_running_sequences, cinfer_llm_waiting_sequences,
 * cinfer_llm_kv_cache_usage_ratio, cinfer_pending_requests; series by model label). */
typedef struct gw_kv_stat {
  char *model;            /* the whole name (owned: gw_kv_free) */
  double running, waiting, kv_usage, pending;
  double prefix_queries, prefix_hits;   /* cinfer_llm_prefix_cache_*_total (for status) */
} gw_kv_stat;
/* Parses Prometheus text; fills up to cap models (one entry per model label, its name
 * allocated). Returns the number of entries. Lines it does not know are skipped; a
 * malformed value skips its line. */
size_t gw_kv_parse_metrics(const char *text, size_t len, gw_kv_stat *out, size_t cap);
/* Frees the names of out[0..n) (not the array); NULL-safe. */
void gw_kv_free(gw_kv_stat *s, size_t n);

typedef struct gw_kv_load {
  uint32_t outstanding;     /* this gateway's requests in flight to the replica (exact) */
  bool known;               /* the replica's metrics for the model were read */
  double running, waiting, pending, kv_usage;
} gw_kv_load;
/* The candidate of lowest cost:
 *   load = max(outstanding, running + 2 * waiting + pending)   (known) or outstanding
 *   cost = load + kv_weight * kv_usage - (prefix_bonus if it is the key's replica)
 * where the key's replica is the rendezvous-hash choice of the prompt prefix among the
 * candidates (has_key). Ties go to the higher rendezvous rank, so equal replicas split
 * prompts by prefix. -1 when n == 0. */
int gw_kv_pick(size_t n, const gw_kv_load *l, const uint64_t *ids, bool has_key, uint64_t key,
               double kv_weight, double prefix_bonus);

/* Replica health as seen by active checks and passive outlier detection. */
typedef enum gw_health_state { GW_H_UNKNOWN = 0, GW_H_HEALTHY, GW_H_UNHEALTHY } gw_health_state;

typedef struct gw_health {
  gw_health_state state;
  int check_ok_run, check_fail_run;   /* consecutive active results */
  int passive_fail_run;               /* consecutive connect failures / 5xx */
  int ejections;                      /* times ejected so far (grows the ejection time) */
  uint64_t ejected_until_ms;          /* 0 = not ejected */
} gw_health;

typedef struct gw_health_params {
  int healthy_threshold, unhealthy_threshold;
  int eject_consecutive, eject_base_ms, eject_max_ms;
} gw_health_params;

/* Active check result. The first check decides at once (a replica is not used before its
 * first passed check); afterwards thresholds apply. Returns true when the state changed. */
bool gw_health_check_result(gw_health *h, const gw_health_params *p, bool ok);
/* Passive result of a proxied try (failure = connect failure or 5xx). may_eject: the cap on
 * the ejected share allows one more ejection. Returns true when this call ejected. */
bool gw_health_passive(gw_health *h, const gw_health_params *p, bool failure, bool may_eject,
                       uint64_t now_ms);
/* Usable for new requests: healthy by active checks and not ejected at now_ms. */
bool gw_health_usable(const gw_health *h, uint64_t now_ms);

/* ===================================================================================== */
/* Security (pure): API keys, access decisions, client identity, listing filters          */
/* ===================================================================================== */

typedef enum gw_role { GW_ROLE_ANON = 0, GW_ROLE_TENANT, GW_ROLE_OPERATOR } gw_role;

typedef struct gw_key {
  char id[65];               /* [A-Za-z0-9._-]{1,64}: logs, rate-limit key; never the key */
  unsigned char sha256[32];  /* of the secret key */
  gw_role role;
  bool all_models;           /* "*" */
  char **models; size_t n_models;
  double rate, burst;        /* requests/s for this key (0 = the gateway's --rate) */
  double tpm;                /* LLM tokens per minute for this key (0 = no token budget) */
} gw_key;

typedef struct gw_keyset {
  gw_key *keys;
  size_t n;
  _Atomic int refs;          /* the runtime's reference plus one per request using it */
} gw_keyset;

/* Parses a key file: one key a line, '#' comments and blank lines ignored:
 *   ID SHA256-HEX tenant|operator MODELS [rate=R] [burst=B] [tpm=T]
 * MODELS is "*" or a comma list of model names. Errors name origin and line, e.g.
 * "keys.txt:3: role: 'admin' is not tenant or operator". refs starts at 1. */
cinfer_status *gw_keys_parse(const char *text, size_t len, const char *origin, gw_keyset **out);
cinfer_status *gw_keys_load(const char *path, gw_keyset **out);
/* The key whose SHA-256 matches token (every key is compared, in constant time). */
const gw_key *gw_keys_find(const gw_keyset *ks, const char *token, size_t len);
void gw_keyset_ref(gw_keyset *ks);
void gw_keyset_unref(gw_keyset *ks);   /* frees at 0; NULL is a no-op */
bool gw_key_allows_model(const gw_key *k, const char *model);
/* SHA-256 of data as 64 lowercase hex digits + NUL. */
void gw_sha256_hex(const void *data, size_t len, char out[65]);

/* The access decision for a proxied request (no I/O). keys: a key file is configured.
 * Returns 0 (forward), 401 or 403; msg says why (names the group or the model). */
typedef struct gw_access_in {
  api_group group;
  bool listing;              /* repository index / model list: tenants get it, filtered */
  gw_role role;
  const char *key_id;        /* NULL for anonymous */
  bool keys;                 /* authentication configured */
  bool bad_credential;       /* a bearer was sent but matches no key */
  const bool *public_groups; /* API_GROUP_COUNT flags */
  const gw_key *key;         /* tenants: for the model allow-list */
  const char *model;         /* "" when the request names none */
} gw_access_in;
int gw_access_decide(const gw_access_in *in, char *msg, size_t cap);

bool gw_cidr_parse(const char *s, gw_cidr *out);
bool gw_cidr_match(const gw_cidr *c, const char *addr);
/* The client's identity: the peer address, unless the peer is a trusted proxy; then
 * X-Forwarded-For is walked from the right and the first address that is not a trusted
 * proxy wins (a client cannot forge the entries its proxies appended). */
void gw_client_addr(const char *peer, const char *xff, size_t xff_len, const gw_cidr *trusted,
                    size_t n_trusted, char *out, size_t cap);

/* Keeps only the models k may use in a listing answer: the JSON array of
 * POST /v2/repository/index (objects with "name") or the "data" array of GET /v1/models
 * (objects with "id"). Returns a new body (malloc) and its length, or NULL when body is
 * not such a document (the caller then refuses to pass it on). */
char *gw_filter_listing(const char *body, size_t len, bool openai, const gw_key *k,
                        size_t *out_len);

/* ===================================================================================== */
/* gRPC (pure, grpc_msg.c): the gateway reads only the model name of a request message    */
/* ===================================================================================== */

/* Finds length-delimited field `field` of a protobuf message: 1 (val/val_len point into
 * msg; the last occurrence wins), 0 when absent, -1 when the message is malformed (a bad
 * varint, a length past the end, a wire type these messages never use, or the field with
 * a non-string wire type). */
int gw_pb_string_field(const uint8_t *msg, size_t len, uint32_t field, const uint8_t **val,
                       size_t *val_len);
/* The model name (string field `field`) of the gRPC message at the start of body[0..len)
 * (5-byte prefix: compressed flag, big-endian length; gzip = the call's grpc-encoding is
 * gzip). 1: *out is the whole name (malloc'd, the caller frees); 0: the message names none;
 * -1: err says why (*out is NULL unless 1). A compressed message is inflated only up to
 * 64 KiB: the name must be among its first fields. */
int gw_grpc_request_model(const uint8_t *body, size_t len, bool gzip, uint32_t field,
                          char **out, char *err, size_t ecap);

/* ===================================================================================== */
/* Runtime                                                                                */
/* ===================================================================================== */

typedef struct gateway gateway;

/* Starts listening and the control thread (discovery, health checks). Takes ownership of
 * *cfg (moved: *cfg is zeroed, also on failure). Static upstream names are resolved here;
 * failing that is an error naming the entry. */
cinfer_status *gateway_create(gw_config *cfg, gateway **out);
uint16_t gateway_port(const gateway *g);
/* The gRPC listener's port (0 when gRPC is off). */
uint16_t gateway_grpc_port(const gateway *g);
/* Not ready (/readyz 503), stop accepting, let in-flight requests finish (up to
 * drain_timeout_ms). Returns the number of connections that had to be forced. */
int gateway_drain(gateway *g);
/* Frees everything. NULL is a no-op. */
void gateway_destroy(gateway *g);

#endif
