/* proxy.c: the request path of the gateway, on the I/O loop that received the request.
 *
 *   admit (rate limit -> concurrency/priority) -> canary variant -> build upstream bytes
 *   -> [nginx delay] -> try: choose replica, pooled connection, send
 *   -> head: 503 with a retry possible? discard : buffer (Content-Length) or stream
 *   -> done: passive health; retry on another replica if allowed; else answer.
 *
 * A try is retried (once, on a different replica, inside the retry budget and the overall
 * deadline) only when nothing of the response can have reached the client: connect
 * failure, connection reset before any response byte, or a 503 head (its body is dropped).
 * A 503 with Retry-After is an admission refusal (the replica's queue or engine is full, no
 * work was done): it is retried once like any 503, but it is not a failure (no passive
 * ejection; the early health check still runs) and is counted in
 * cinfer_gateway_upstream_refusals_total;
 * when no retry is possible it reaches the client with its Retry-After.
 * Responses with Content-Length are buffered (one allocation) and answered whole; chunked
 * and close-delimited responses (SSE, streaming inference) are streamed as they arrive.
 *
 * Lifetime: gw_req is created by gw_proxy and freed by req_finish, which answers the
 * exchange; every path that ends a request goes through req_finish exactly once, after the
 * upstream connection was released (invariant 4 in internal.h).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hex.h"
#include "core/hash.h"
#include "core/log.h"
#include "gateway/internal.h"

#define GW_MAX_RESP_HEADERS 64

struct gw_req {
  gateway *g;
  http_exchange *ex;
  const http_request *hreq;  /* borrowed until the exchange is answered */
  int loop;
  char id[72];
  char *model;               /* the whole name (owned), or no_model when none */
  bool oom;                  /* reading the request ran out of memory: answered 500 */
  long long version;         /* from the path, 0 = none */
  bool model_known;          /* listed by some replica or a canary: used as metrics label */
  int variant;               /* canary variant index, -1 = none */
  char variant_name[64];
  char group[64];            /* replica group required by the variant ("" = any) */
  long long variant_version;
  char *up;                  /* upstream request bytes (owned) */
  size_t up_len;
  gw_pick pick;              /* routing and the replicas tried */
  gw_conn *conn;             /* current try's connection */
  gw_replica *cur;
  bool streaming, buffered, discard, head_seen;
  bool counted_active, aborting, done;
  bool refused;              /* this try's answer: 503 with Retry-After (admission refusal) */
  bool count_tokens;          /* the key has a token budget: usage is counted and charged */
  gw_tok_usage usage;
  int status;
  char *harena;              /* response header bytes */
  http_header hdrs[GW_MAX_RESP_HEADERS + 4];
  size_t n_hdrs;
  char *body;
  size_t body_len, body_cap;
  loop_timer deadline, delay;
  uint64_t start_ms, deadline_ms;
  char last_error[200];
  int last_error_status;
  bool has_affinity;         /* session header or prompt prefix */
  uint64_t affinity_key;
  bool model_ambiguous;      /* OpenAI body names "model" more than once */
  /* security (docs/security.md) */
  api_route route;           /* API group and the model the path names */
  gw_keyset *ks;             /* reference held until req_free; NULL = no key file */
  const gw_key *key;         /* the authenticated key (in ks), NULL = none */
  char who[80];              /* "key:ID", "admin-token" or "anonymous": audit and logs */
  char client[64];           /* peer, or X-Forwarded-For behind trusted proxies */
  bool audit;                /* a call outside the public groups: one audit line */
  bool filter;               /* a tenant's listing: keep only its models */
  bool strip_auth;           /* the bearer was the gateway's credential: not forwarded */
  bool unfilterable;         /* filter set but the listing was not buffered: 502 */
};

static char no_model[1];      /* a request that names no model */

/* ---- helpers ----------------------------------------------------------------------- */

static bool ieq(const char *a, size_t n, const char *lit) {
  size_t m = strlen(lit);
  return n == m && !strncasecmp(a, lit, n);
}

static bool hop_by_hop(const char *name, size_t n) {
  return ieq(name, n, "connection") || ieq(name, n, "keep-alive") ||
         ieq(name, n, "proxy-connection") || ieq(name, n, "transfer-encoding") ||
         ieq(name, n, "te") || ieq(name, n, "trailer") || ieq(name, n, "upgrade") ||
         ieq(name, n, "content-length") || ieq(name, n, "x-request-id") ||
         ieq(name, n, "expect");
}

static void gen_id(gateway *g, int loop, char *out) {
  uint64_t a = gw_rand(&g->loops[loop].rng), b = gw_rand(&g->loops[loop].rng);
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

static bool valid_id(const char *v, size_t n) {
  if (n == 0 || n > 64) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)v[i]) && !strchr("-_.:", v[i])) return false;
  return true;
}

/* Decodes a percent-encoded path segment into out[cap]; false when invalid or too long. */
static bool decode_seg(const char *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)s[i];
    if (c == '%') {
      if (i + 2 >= n) return false;
      int h = hex_digit((unsigned char)(s[i + 1])), l = hex_digit((unsigned char)(s[i + 2]));
      if (h < 0 || l < 0) return false;
      c = h * 16 + l;
      i += 2;
    }
    if (c == 0 || o + 1 >= cap) return false;
    out[o++] = (char)c;
  }
  out[o] = 0;
  return o > 0;
}

/* /v2/models/NAME[/versions/V]/...: fills model/version; *name_end = offset after NAME. */
static void parse_model_path(gw_req *q, size_t *name_end) {
  const http_request *r = q->hreq;
  static const char pre[] = "/v2/models/";
  *name_end = 0;
  if (r->path_len <= sizeof pre - 1 || memcmp(r->path, pre, sizeof pre - 1)) return;
  const char *s = r->path + sizeof pre - 1;
  size_t rest = r->path_len - (sizeof pre - 1);
  const char *slash = memchr(s, '/', rest);
  size_t n = slash ? (size_t)(slash - s) : rest;
  if (!strncmp(s, "stats", n) && n == 5) return;  /* /v2/models/stats: not a model */
  char *name = malloc(n + 1);  /* decoding never lengthens it */
  if (!name) {
    q->oom = true;
    return;
  }
  if (!decode_seg(s, n, name, n + 1)) {
    free(name);
    return;
  }
  q->model = name;
  *name_end = (size_t)(s - r->path) + n;
  static const char ver[] = "/versions/";
  if (slash && rest - n > sizeof ver - 1 && !memcmp(slash, ver, sizeof ver - 1)) {
    const char *v = slash + sizeof ver - 1;
    long long x = 0;
    size_t left = rest - n - (sizeof ver - 1);
    for (size_t i = 0; i < left && v[i] != '/' && i < 12; i++) {
      if (v[i] < '0' || v[i] > '9') { x = 0; break; }
      x = x * 10 + (v[i] - '0');
    }
    q->version = x;
  }
}

/* OpenAI: "model" of the JSON body. */
static void parse_openai_model(gw_req *q) {
  const http_request *r = q->hreq;
  if (r->path_len < 4 || memcmp(r->path, "/v1/", 4) || !r->body_len || r->body_len > (8u << 20))
    return;
  cJSON *j = cJSON_ParseWithLength(r->body, r->body_len);
  const cJSON *m = j ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
  int n_model = 0;
  for (const cJSON *it = cJSON_IsObject(j) ? j->child : NULL; it; it = it->next)
    if (it->string && !strcmp(it->string, "model")) n_model++;
  q->model_ambiguous = n_model > 1;
  if (cJSON_IsString(m) && m->valuestring[0]) {
    char *name = strdup(m->valuestring);
    if (name) q->model = name;
    else q->oom = true;
  }
  size_t want = (size_t)q->g->cfg.prefix_bytes;
  if (j && want && !q->has_affinity) {
    /* prompt-prefix affinity: hash the first `want` bytes of the prompt (completions) or
     * of the messages' contents in order (chat), so shared prefixes meet a warm KV cache */
    uint64_t h = 1469598103934665603ULL;
    size_t got = 0;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *one = cJSON_IsString(p) ? p : NULL;
    const cJSON *it = cJSON_IsArray(msgs) ? msgs->child : NULL;
    for (;;) {
      const char *text = NULL;
      if (one) {
        text = one->valuestring;
        one = NULL;
      } else if (it) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        text = cJSON_IsString(c) ? c->valuestring : "";
        it = it->next;
      } else {
        break;
      }
      for (; *text && got < want; text++, got++) h = (h ^ (unsigned char)*text) * 1099511628211ULL;
      if (got >= want) break;
    }
    if (got) {
      q->has_affinity = true;
      q->affinity_key = gw_hash64(&h, sizeof h);
    }
  }
  cJSON_Delete(j);
}

/* ---- upstream request bytes ---------------------------------------------------------- */

static bool build_upstream(gw_req *q, size_t name_end) {
  const http_request *r = q->hreq;
  char vbuf[48] = "";
  if (q->variant_version > 0 && name_end && q->version == 0)
    snprintf(vbuf, sizeof vbuf, "/versions/%lld", q->variant_version);
  size_t need = r->method_len + r->path_len + r->query_len + strlen(vbuf) + 64 + strlen(q->id) + 64;
  for (size_t i = 0; i < r->num_headers; i++) need += r->headers[i].name_len + r->headers[i].value_len + 4;
  if (need > SIZE_MAX - r->body_len) return false;
  need += r->body_len;
  char *b = malloc(need), *o = b;
  if (!b) return false;
#define PUT(p, n) do { memcpy(o, (p), (n)); o += (n); } while (0)
#define PUTS(s) PUT((s), strlen(s))
  PUT(r->method, r->method_len);
  PUTS(" ");
  if (vbuf[0]) {
    PUT(r->path, name_end);
    PUTS(vbuf);
    PUT(r->path + name_end, r->path_len - name_end);
  } else {
    PUT(r->path, r->path_len);
  }
  if (r->query_len) {
    PUTS("?");
    PUT(r->query, r->query_len);
  }
  PUTS(" HTTP/1.1\r\n");
  bool host = false;
  for (size_t i = 0; i < r->num_headers; i++) {
    const http_header *h = &r->headers[i];
    if (hop_by_hop(h->name, h->name_len)) continue;
    if (q->strip_auth && ieq(h->name, h->name_len, "authorization")) continue;
    if (ieq(h->name, h->name_len, "host")) host = true;
    PUT(h->name, h->name_len);
    PUTS(": ");
    PUT(h->value, h->value_len);
    PUTS("\r\n");
  }
  if (!host) PUTS("Host: cinfer-upstream\r\n");
  PUTS("X-Request-Id: ");
  PUTS(q->id);
  PUTS("\r\n");
  o += sprintf(o, "Content-Length: %zu\r\n\r\n", r->body_len);
  if (r->body_len) PUT(r->body, r->body_len);
#undef PUT
#undef PUTS
  q->up = b;
  q->up_len = (size_t)(o - b);
  return true;
}

/* ---- metrics and the end of a request -------------------------------------------------- */

/* The series of family f for (replica, model, variant, code), from the loop's cache. */
static metric *cached_series(gateway *g, int loop, metric_family *f, const gw_replica *r,
                             const char *model, const char *variant, int code,
                             const char *const *labels) {
  gw_mcache_entry *tab = g->loops[loop].mcache;
  if (!tab) return gw_series(f, labels);
  size_t ml = strlen(model), vl = strlen(variant);
  if (ml >= sizeof tab[0].model || vl >= sizeof tab[0].variant) return gw_series(f, labels);
  uint64_t h = hash_fnv1a(HASH_FNV_SEED, &f, sizeof f);
  h = hash_fnv1a(h, &r, sizeof r);
  h = hash_fnv1a(h, &code, sizeof code);
  h = hash_fnv1a(h, model, ml + 1);
  h = hash_fnv1a(h, variant, vl + 1);
  for (size_t k = 0; k < 8; k++) {
    gw_mcache_entry *e = &tab[(h + k) & (GW_MCACHE_SLOTS - 1)];
    if (!e->m) {
      metric *m = gw_series(f, labels);
      if (!m) return NULL;
      e->hash = h;
      e->f = f;
      e->r = r;
      e->code = code;
      memcpy(e->model, model, ml + 1);
      memcpy(e->variant, variant, vl + 1);
      e->m = m;
      return m;
    }
    if (e->hash == h && e->f == f && e->r == r && e->code == code && !strcmp(e->model, model) &&
        !strcmp(e->variant, variant))
      return e->m;
  }
  return gw_series(f, labels);  /* cache neighbourhood full: the slow path still works */
}

/* Counts an answer of a canary variant; rolls the variant back when its error rate crosses
 * the model's threshold. */
static void canary_record(gateway *g, gw_req *q, int code) {
  bool rolled = false;
  pthread_mutex_lock(&g->mu);
  for (size_t i = 0; i < g->n_canaries; i++) {
    gw_canary_state *k = &g->canaries[i];
    if (strcmp(k->cfg->model, q->model) || (size_t)q->variant >= k->cfg->n_variants) continue;
    int v = q->variant;
    k->requests[v]++;
    if (code >= 500) k->errors[v]++;
    if (k->cfg->max_error_rate > 0 && k->cfg->variants[v].weight > 0 &&
        k->requests[v] >= k->cfg->min_requests &&
        (double)k->errors[v] > k->cfg->max_error_rate * (double)k->requests[v]) {
      long long others = 0;
      for (size_t j = 0; j < k->cfg->n_variants; j++)
        if ((int)j != v) others += k->cfg->variants[j].weight;
      if (others > 0) {
        k->cfg->variants[v].weight = 0;
        memset(k->current, 0, sizeof k->current);
        rolled = true;
      }
    }
    break;
  }
  pthread_mutex_unlock(&g->mu);
  if (rolled)
    LOG_W("gateway: canary rollback: model '%s' variant '%s' error rate above threshold: weight set to 0",
          q->model, q->variant_name);
}

/* One structured line per control action (a call outside the public API groups), allowed
 * or refused: who (key id, never the key), from where, what (method, path, model) and the
 * answer's status. */
static void audit_line(gw_req *q, int code) {
  const http_request *r = q->hreq;
  char st[12], method[16], path[208];
  snprintf(st, sizeof st, "%d", code);
  snprintf(method, sizeof method, "%.*s", (int)(r->method_len < 15 ? r->method_len : 15), r->method);
  snprintf(path, sizeof path, "%.*s", (int)(r->path_len < 200 ? r->path_len : 200), r->path);
  const char *model = q->route.model[0] ? q->route.model : q->model;
  const char *kv[] = {"audit", "control", "who", q->who, "client", q->client,
                      "group", api_group_name(q->route.group), "method", method, "path", path,
                      "model", model, "status", st, "request_id", q->id, NULL};
  log_event(LOG_INFO, kv, "gateway: audit: %s %s (%s) by %s -> %s", method, path,
            api_group_name(q->route.group), q->who, st);
}

/* The key's token bucket (created full at its first use); call with tok_mu held. */
static gw_tokens *tok_entry(gateway *g, const char *id) {
  for (size_t i = 0; i < g->n_tok; i++)
    if (!strcmp(g->tok[i].id, id)) return &g->tok[i].t;
  if (g->n_tok == g->cap_tok) {
    size_t nc = g->cap_tok ? g->cap_tok * 2 : 16;
    struct gw_tok_entry *nt = realloc(g->tok, nc * sizeof *nt);
    if (!nt) return NULL;
    g->tok = nt;
    g->cap_tok = nc;
  }
  struct gw_tok_entry *e = &g->tok[g->n_tok++];
  memset(e, 0, sizeof *e);
  snprintf(e->id, sizeof e->id, "%s", id);
  return &e->t;
}

/* A successful LLM answer: its tokens are taken from the key's budget. */
static void charge_tokens(gw_req *q) {
  gateway *g = q->g;
  long long n = gw_tok_usage_tokens(&q->usage);
  q->count_tokens = false;
  if (n <= 0) return;
  pthread_mutex_lock(&g->tok_mu);
  gw_tokens *t = tok_entry(g, q->key->id);
  if (t) gw_tokens_charge(t, q->key->tpm, (double)n, clock_now_ms());
  pthread_mutex_unlock(&g->tok_mu);
  const char *labels[] = {"key", q->key->id, NULL};
  metric_inc(gw_series(g->f_tokens, labels), (double)n);
}

static void req_metrics(gw_req *q, int code) {
  gateway *g = q->g;
  if (q->count_tokens && code == 200) charge_tokens(q);
  if (q->audit) audit_line(q, code);
  if (q->variant >= 0 && code != 499) canary_record(g, q, code);
  char cbuf[8];
  snprintf(cbuf, sizeof cbuf, "%d", code);
  const char *up = q->cur ? q->cur->addr : "none";
  const char *model = q->model_known ? q->model : "";
  const char *labels[] = {"upstream", up, "model", model, "variant", q->variant_name, "code", cbuf, NULL};
  metric_inc(cached_series(g, q->loop, g->f_requests, q->cur, model, q->variant_name, code, labels), 1);
  const char *dl[] = {"upstream", up, "model", model, NULL};
  double secs = (double)(clock_now_ms() - q->start_ms) / 1000.0;
  metric_observe(cached_series(g, q->loop, g->f_duration, q->cur, model, "", 0, dl), secs);
}

static void req_free(gw_req *q) {
  gateway *g = q->g;
  net_loop *loop = g->loops[q->loop].loop;
  loop_timer_cancel(loop, &q->deadline);
  loop_timer_cancel(loop, &q->delay);
  if (q->pick.holds_retry) atomic_fetch_sub(&g->retries_active, 1);
  if (q->counted_active) {
    atomic_fetch_sub(&g->active, 1);
    metric_inc(g->m_active, -1);
  }
  gw_keyset_unref(q->ks);
  if (q->model != no_model) free(q->model);
  free(q->up);
  free(q->harena);
  free(q->body);
  free(q);
}

static void json_escape(char *out, size_t cap, const char *s) {
  size_t o = 0;
  for (; *s && o + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
    else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    else out[o++] = (char)c;
  }
  out[o] = 0;
}

void gw_respond_error(http_exchange *ex, int status, const char *request_id, const char *fmt, ...) {
  char msg[1200], esc[2600], body[2700];  /* room for a long model name */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_escape(esc, sizeof esc, msg);
  int n = snprintf(body, sizeof body, "{\"error\":\"%s\"}", esc);
  http_header h[2] = {{"Content-Type", 12, "application/json", 16}};
  size_t nh = 1;
  if (request_id) h[nh++] = (http_header){"X-Request-Id", 12, request_id, strlen(request_id)};
  http_respond(ex, status, h, nh, body, (size_t)n);
}

/* Ends the request with a local error (nothing was sent to the client yet). */
static void req_fail(gw_req *q, int status, const char *msg) {
  q->done = true;
  req_metrics(q, status);
  LOG_V(1, "gateway: request %s -> %d: %s", q->id, status, msg);
  gw_respond_error(q->ex, status, q->id, "%s", msg);
  req_free(q);
}

/* ---- connections --------------------------------------------------------------------- */

static void up_head(void *user, const http_response *resp);
static void up_body(void *user, const char *data, size_t len);
static void up_done(void *user, http_client_error err, const char *msg);

static gw_conn *conn_acquire(gateway *g, gw_replica *r, int loop) {
  gw_conn *c = r->idle[loop];
  if (c) {
    r->idle[loop] = c->next;
    r->n_idle[loop]--;
    c->next = NULL;
    return c;
  }
  c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->r = r;
  c->loop = loop;
  http_client_opts o = {.host = r->host, .port = r->port,
                        .connect_timeout_ms = g->cfg.connect_timeout_ms,
                        .response_timeout_ms = g->cfg.try_timeout_ms,
                        .tls = g->tls_up, .tls_name = g->cfg.up_server_name};
  http_client_callbacks cb = {up_head, up_body, up_done};
  cinfer_status *st = http_client_create(g->loops[loop].loop, &o, &cb, c, &c->c);
  if (st) {
    LOG_W("gateway: upstream %s: %s", r->addr, cinfer_status_message(st));
    cinfer_status_free(st);
    free(c);
    return NULL;
  }
  return c;
}

static void conn_release(gateway *g, gw_conn *c) {
  gw_replica *r = c->r;
  if (r->n_idle[c->loop] >= g->cfg.max_idle_per_pool || atomic_load(&g->draining)) {
    http_client_destroy(c->c);
    free(c);
    return;
  }
  c->next = r->idle[c->loop];
  r->idle[c->loop] = c;
  r->n_idle[c->loop]++;
}

void gw_pools_free_on_loop(gateway *g, int loop) {
  pthread_mutex_lock(&g->mu);
  size_t n = g->n_reps;
  pthread_mutex_unlock(&g->mu);
  for (size_t i = 0; i < n; i++) {
    gw_replica *r = g->reps[i];
    while (r->idle[loop]) {
      gw_conn *c = r->idle[loop];
      r->idle[loop] = c->next;
      http_client_destroy(c->c);
      free(c);
    }
    r->n_idle[loop] = 0;
  }
}

/* Detaches and closes the current try's connection (deadline, client gone). */
static void abort_try(gw_req *q) {
  gw_conn *c = q->conn;
  if (!c) return;
  q->conn = NULL;
  c->req = NULL;
  atomic_fetch_sub(&c->r->outstanding, 1);
  http_client_destroy(c->c);  /* its on_done sees c->req == NULL */
  free(c);
}

/* ---- choosing a replica ------------------------------------------------------------- */

/* q's routing (route.c), with its current model, version and variant group. */
static gw_pick *pick_of(gw_req *q) {
  q->pick.model = q->model;
  q->pick.version = q->version ? q->version : q->variant_version;
  q->pick.group = q->group;
  return &q->pick;
}

static gw_replica *choose(gateway *g, gw_req *q, bool *listed) {
  gw_scratch *sc = g->loops[q->loop].scratch;
  gw_replica **cand = sc->cand;
  uint32_t *out = sc->out;
  int *w = sc->w;
  uint64_t now = loop_now_ms(g->loops[q->loop].loop);
  pthread_mutex_lock(&g->mu);
  size_t n = gw_candidates(g, pick_of(q), now, cand, listed);
  for (size_t i = 0; i < n; i++) {
    out[i] = atomic_load_explicit(&cand[i]->outstanding, memory_order_relaxed);
    w[i] = cand[i]->weight;
  }
  int k = -1;
  bool openai = q->hreq->path_len > 4 && !memcmp(q->hreq->path, "/v1/", 4);
  if (g->cfg.balancer == GW_BAL_KV_AWARE && openai && n) {
    /* LLM load from each replica's /metrics (for this model) with prefix affinity */
    gw_kv_load *loads = sc->loads;
    uint64_t *ids = sc->ids;
    for (size_t i = 0; i < n; i++) {
      gw_kv_load *l = &loads[i];
      memset(l, 0, sizeof *l);
      l->outstanding = out[i];
      ids[i] = cand[i]->id_hash;
      for (size_t m = 0; m < cand[i]->n_kv; m++) {
        const gw_kv_stat *x = &cand[i]->kv[m];
        if (strcmp(x->model, q->model)) continue;
        l->known = true;
        l->running = x->running;
        l->waiting = x->waiting;
        l->pending = x->pending;
        l->kv_usage = x->kv_usage;
      }
    }
    k = gw_kv_pick(n, loads, ids, q->has_affinity, q->affinity_key, g->cfg.kv_weight,
                   g->cfg.prefix_bonus);
  } else if (q->has_affinity) {
    uint64_t *ids = sc->ids;
    for (size_t i = 0; i < n; i++) ids[i] = cand[i]->id_hash;
    k = gw_affinity_pick(n, ids, q->affinity_key, out, g->cfg.affinity_load_factor);
  }
  if (k < 0) k = gw_balance_pick(g->cfg.balancer, n, out, w, &g->loops[q->loop].rng, &g->rr_cursor);
  gw_replica *r = k >= 0 ? cand[k] : NULL;
  if (r) atomic_fetch_add(&r->outstanding, 1);
  pthread_mutex_unlock(&g->mu);
  return r;
}

/* May this request retry now? Takes a retry-budget token when it answers true. */
static bool retry_allowed(gw_req *q) {
  if (q->streaming) return false;
  gateway *g = q->g;
  return gw_retry_allowed(g, pick_of(q), loop_now_ms(g->loops[q->loop].loop), q->deadline_ms);
}

static void start_try(gw_req *q);

void gw_passive(gateway *g, gw_replica *r, bool failure, uint64_t now) {
  pthread_mutex_lock(&g->mu);
  size_t present = 0, ejected = 0;
  if (failure && g->cfg.eject_consecutive > 0 &&
      r->h.passive_fail_run + 1 >= g->cfg.eject_consecutive) {
    for (size_t i = 0; i < g->n_reps; i++) {
      if (!g->reps[i]->sources) continue;
      present++;
      if (g->reps[i]->h.ejected_until_ms > now) ejected++;
    }
  }
  bool may = (ejected + 1) * 100 <= (size_t)g->cfg.eject_max_percent * present;
  gw_health_params p = {g->cfg.healthy_threshold, g->cfg.unhealthy_threshold,
                        g->cfg.eject_consecutive, g->cfg.eject_base_ms, g->cfg.eject_max_ms};
  bool was_usable = gw_replica_usable(r, now);
  bool ej = gw_health_passive(&r->h, &p, failure, may, now);
  if (ej) {
    r->ejected_ms = clock_now_ms();
    if (was_usable) r->out_ms = r->ejected_ms;
  }
  pthread_mutex_unlock(&g->mu);
  if (ej) {
    metric_inc(r->m_ejections, 1);
    LOG_W("gateway: upstream %s ejected (%d consecutive failures, ejection #%d)", r->addr,
          g->cfg.eject_consecutive, r->h.ejections);
  }
}

/* ---- upstream callbacks --------------------------------------------------------------- */

static void up_head(void *user, const http_response *resp) {
  gw_conn *c = user;
  gw_req *q = c->req;
  if (!q) return;
  q->head_seen = true;
  q->status = resp->status;
  q->refused = false;
  if (resp->status == 503)
    for (size_t i = 0; i < resp->num_headers; i++)
      if (ieq(resp->headers[i].name, resp->headers[i].name_len, "retry-after")) q->refused = true;
  if (resp->status == 503 && retry_allowed(q)) {
    q->discard = true;
    return;
  }
  size_t need = 0;
  for (size_t i = 0; i < resp->num_headers; i++)
    need += resp->headers[i].name_len + resp->headers[i].value_len;
  need += 256;
  free(q->harena);
  q->harena = malloc(need);
  q->n_hdrs = 0;
  if (q->harena) {
    char *o = q->harena;
    for (size_t i = 0; i < resp->num_headers && q->n_hdrs < GW_MAX_RESP_HEADERS; i++) {
      const http_header *h = &resp->headers[i];
      if (hop_by_hop(h->name, h->name_len) || ieq(h->name, h->name_len, "date")) continue;
      memcpy(o, h->name, h->name_len);
      memcpy(o + h->name_len, h->value, h->value_len);
      q->hdrs[q->n_hdrs++] = (http_header){o, h->name_len, o + h->name_len, h->value_len};
      o += h->name_len + h->value_len;
    }
  }
  q->hdrs[q->n_hdrs++] = (http_header){"X-Request-Id", 12, q->id, strlen(q->id)};
  q->hdrs[q->n_hdrs++] = (http_header){"X-Cinfer-Upstream", 17, c->r->addr, strlen(c->r->addr)};
  if (q->variant >= 0)
    q->hdrs[q->n_hdrs++] = (http_header){"X-Cinfer-Variant", 16, q->variant_name, strlen(q->variant_name)};
  if (resp->body_kind == HTTP_BODY_NONE ||
      (resp->body_kind == HTTP_BODY_LENGTH && resp->content_length <= q->g->cfg.max_body_bytes)) {
    q->buffered = true;
    q->body_cap = resp->body_kind == HTTP_BODY_LENGTH ? (size_t)resp->content_length : 0;
    q->body_len = 0;
    free(q->body);
    q->body = q->body_cap ? malloc(q->body_cap) : NULL;
    if (q->body_cap && !q->body) q->body_cap = 0;  /* answered as 502 at done */
  } else if (q->filter && resp->status == 200) {
    /* a listing we must filter but cannot buffer: never passed on unfiltered */
    q->buffered = q->unfilterable = true;
    q->body_cap = q->body_len = 0;
  } else {
    q->streaming = true;
    http_stream_begin(q->ex, resp->status, q->hdrs, q->n_hdrs);
  }
}

static void up_body(void *user, const char *data, size_t len) {
  gw_conn *c = user;
  gw_req *q = c->req;
  if (!q || q->discard) return;
  if (q->count_tokens && q->status == 200) gw_tok_usage_feed(&q->usage, data, len);
  if (q->buffered) {
    size_t k = q->body_cap - q->body_len < len ? q->body_cap - q->body_len : len;
    if (k) memcpy(q->body + q->body_len, data, k);
    q->body_len += k;
  } else if (q->streaming) {
    http_stream_write(q->ex, data, len);
  }
}

static int error_status(http_client_error err) {
  switch (err) {
    case HTTP_CLIENT_TIMEOUT:
    case HTTP_CLIENT_CONNECT_TIMEOUT: return 504;
    default: return 502;
  }
}

static void up_done(void *user, http_client_error err, const char *msg) {
  gw_conn *c = user;
  gw_req *q = c->req;
  if (!q) return;  /* aborted: abort_try owns the cleanup */
  gateway *g = q->g;
  gw_replica *r = c->r;
  c->req = NULL;
  q->conn = NULL;
  atomic_fetch_sub(&r->outstanding, 1);
  conn_release(g, c);
  uint64_t now = loop_now_ms(g->loops[q->loop].loop);

  bool connect_fail = err == HTTP_CLIENT_CONNECT_REFUSED || err == HTTP_CLIENT_CONNECT_TIMEOUT;
  bool refused = err == HTTP_CLIENT_OK && q->head_seen && q->refused;
  bool failure = err != HTTP_CLIENT_OK || (q->head_seen && q->status >= 500 && !refused);
  if (refused) {
    const char *labels[] = {"upstream", r->addr, "model", q->model_known ? q->model : "", NULL};
    metric_inc(gw_series(g->f_refusals, labels), 1);
  }
  atomic_fetch_add(&r->n_requests, 1);
  if (failure) atomic_fetch_add(&r->n_failures, 1);
  else if (!atomic_load_explicit(&r->first_ok_ms, memory_order_relaxed)) {
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&r->first_ok_ms, &zero, clock_now_ms());
  }
  if (!refused) gw_passive(g, r, failure, now); /* a refusal neither extends nor resets a failure run */
  /* a refusal too: a draining cinfer replica's 503s carry Retry-After, its check says so */
  if (connect_fail || (err == HTTP_CLIENT_OK && q->status == 503)) gw_replica_check_soon(g, r);

  bool safe = connect_fail || err == HTTP_CLIENT_RESET_BEFORE_RESPONSE;
  if ((q->discard || (safe && !q->streaming)) && (q->discard || retry_allowed(q))) {
    const char *labels[] = {"upstream", r->addr, "model", q->model_known ? q->model : "", NULL};
    metric_inc(gw_series(g->f_retries, labels), 1);
    LOG_V(1, "gateway: request %s: retrying after %s from %s", q->id,
          q->discard ? "503" : http_client_error_name(err), r->addr);
    q->discard = q->buffered = q->head_seen = q->refused = false;
    q->status = 0;
    snprintf(q->last_error, sizeof q->last_error, "upstream %s: %s", r->addr,
             err == HTTP_CLIENT_OK ? (refused ? "503 Service Unavailable (refused: Retry-After)"
                                              : "503 Service Unavailable")
                                   : msg);
    q->last_error_status = err == HTTP_CLIENT_OK ? 503 : error_status(err);
    start_try(q);
    return;
  }
  q->done = true;
  if (q->streaming) {
    /* A cut-short stream cannot be reported in-band; it ends here (see docs/gateway.md). */
    if (err != HTTP_CLIENT_OK)
      LOG_W("gateway: request %s: upstream %s: %s after the stream started", q->id, r->addr, msg);
    req_metrics(q, err == HTTP_CLIENT_OK ? q->status : 502);
    http_stream_end(q->ex);
    req_free(q);
    return;
  }
  if (err == HTTP_CLIENT_OK && q->buffered && q->body_len == q->body_cap && q->filter &&
      q->status == 200) {
    size_t fl = 0;
    char *fb = q->unfilterable ? NULL : gw_filter_listing(q->body ? q->body : "", q->body_len, q->hreq->path[1] == 'v' &&
                                 q->hreq->path[2] == '1', q->key, &fl);
    if (!fb) {
      char m[200];
      snprintf(m, sizeof m, "upstream %s: model listing is not the expected JSON (not passed on)", r->addr);
      req_fail(q, 502, m);
      return;
    }
    req_metrics(q, q->status);
    http_respond_owned(q->ex, q->status, q->hdrs, q->n_hdrs, fb, fl, free);
    req_free(q);
    return;
  }
  if (err == HTTP_CLIENT_OK && q->buffered && q->body_len == q->body_cap) {
    req_metrics(q, q->status);
    void *body = q->body;
    q->body = NULL;
    http_respond_owned(q->ex, q->status, q->hdrs, q->n_hdrs, body, q->body_len, free);
    req_free(q);
    return;
  }
  char m[300];
  if (err == HTTP_CLIENT_OK)
    snprintf(m, sizeof m, "upstream %s: response body could not be buffered", r->addr);
  else
    snprintf(m, sizeof m, "upstream %s: %s", r->addr, msg);
  req_fail(q, error_status(err), m);
}

/* ---- tries ------------------------------------------------------------------------- */

static void start_try(gw_req *q) {
  gateway *g = q->g;
  bool listed = false;
  gw_replica *r = choose(g, q, &listed);
  if (!r) {
    char m[1200];
    if (q->pick.n_tries && q->last_error[0]) {
      req_fail(q, q->last_error_status ? q->last_error_status : 502, q->last_error);
      return;
    }
    if (q->model[0] && !listed) {
      snprintf(m, sizeof m, "model '%s'%s is not served by any replica", q->model,
               q->group[0] ? " (variant group)" : "");
      req_fail(q, 404, m);
      return;
    }
    if (q->model[0]) snprintf(m, sizeof m, "no ready replica for model '%s'", q->model);
    else snprintf(m, sizeof m, "no ready replica");
    req_fail(q, 503, m);
    return;
  }
  q->pick.tried[q->pick.n_tries++] = r;
  q->cur = r;
  if (listed) q->model_known = true;
  gw_conn *c = conn_acquire(g, r, q->loop);
  if (!c) {
    atomic_fetch_sub(&r->outstanding, 1);
    req_fail(q, 502, "gateway: cannot create an upstream connection");
    return;
  }
  c->req = q;
  q->conn = c;
  /* up_done may run inside this call (connect failed at once) and free q. */
  if (!http_client_send(c->c, q->up, q->up_len, q->hreq->method_id == HTTP_HEAD)) {
    c->req = NULL;
    q->conn = NULL;
    atomic_fetch_sub(&r->outstanding, 1);
    http_client_destroy(c->c);
    free(c);
    req_fail(q, 502, "gateway: upstream connection busy");
  }
}

static void on_deadline(loop_timer *t) {
  gw_req *q = (gw_req *)((char *)t - offsetof(gw_req, deadline));
  abort_try(q);
  if (q->streaming) {
    q->done = true;
    req_metrics(q, 504);
    http_stream_end(q->ex);
    req_free(q);
    return;
  }
  char m[300];
  snprintf(m, sizeof m, "request deadline of %d ms exceeded%s%s", q->g->cfg.request_timeout_ms,
           q->cur ? " waiting for " : "", q->cur ? q->cur->addr : "");
  req_fail(q, 504, m);
}

static void on_delay(loop_timer *t) {
  gw_req *q = (gw_req *)((char *)t - offsetof(gw_req, delay));
  start_try(q);
}

static void on_cancel(void *arg) {
  gw_req *q = arg;
  if (q->done) return;
  abort_try(q);
  q->done = true;
  req_metrics(q, 499);
  if (q->streaming) http_stream_end(q->ex);
  else http_respond(q->ex, 499, NULL, 0, NULL, 0);  /* dropped: the client is gone */
  req_free(q);
}

/* ---- admission ----------------------------------------------------------------------- */

gw_bucket_result gw_rate_take(gateway *g, const char *key, size_t n, double rate,
                                  double burst, uint64_t now) {
  if (n >= sizeof g->rate[0].key) n = sizeof g->rate[0].key - 1;
  uint64_t h = hash_bytes(key, n);
  pthread_mutex_lock(&g->rate_mu);
  size_t mask = g->rate_slots - 1, i = (size_t)h & mask;
  gw_rate_entry *e = NULL;
  for (size_t probe = 0; probe < g->rate_slots; probe++, i = (i + 1) & mask) {
    gw_rate_entry *x = &g->rate[i];
    if (!x->used) break;
    if (x->hash == h && !strncmp(x->key, key, n) && x->key[n] == 0) {
      e = x;
      break;
    }
  }
  if (!e) {
    if (g->rate_used >= (size_t)g->cfg.rate_max_keys) {
      /* full: forget every bucket that has leaked empty (they hold no state) */
      size_t kept = 0;
      for (size_t k = 0; k < g->rate_slots; k++) {
        gw_rate_entry *x = &g->rate[k];
        if (!x->used) continue;
        double left = x->b.excess - x->rate * (double)(now - x->b.last_ms) / 1000.0;
        if (left <= 0) x->used = false;
        else kept++;
      }
      /* re-insert survivors (open addressing needs no holes in probe chains) */
      gw_rate_entry *old = g->rate;
      gw_rate_entry *nw = calloc(g->rate_slots, sizeof *nw);
      if (nw) {
        for (size_t k = 0; k < g->rate_slots; k++) {
          if (!old[k].used) continue;
          size_t j = (size_t)old[k].hash & mask;
          while (nw[j].used) j = (j + 1) & mask;
          nw[j] = old[k];
        }
        free(old);
        g->rate = nw;
      }
      g->rate_used = kept;
    }
    if (g->rate_used >= (size_t)g->cfg.rate_max_keys) {
      pthread_mutex_unlock(&g->rate_mu);
      /* every key still has state: a new key shares the rejection of an overloaded table */
      return (gw_bucket_result){false, 0, 1};
    }
    i = (size_t)h & mask;
    while (g->rate[i].used) i = (i + 1) & mask;
    e = &g->rate[i];
    memset(e, 0, sizeof *e);
    e->used = true;
    e->hash = h;
    memcpy(e->key, key, n);
    e->key[n] = 0;
    g->rate_used++;
  }
  e->rate = rate;
  gw_bucket_result res = gw_bucket_take(&e->b, rate, burst, g->cfg.nodelay, now);
  pthread_mutex_unlock(&g->rate_mu);
  return res;
}

int gw_canary_choose(gateway *g, const char *model, const char *force, size_t flen,
                     char *group, size_t gcap, long long *version, char *name, size_t ncap) {
  int v = -1;
  pthread_mutex_lock(&g->mu);
  for (size_t i = 0; i < g->n_canaries; i++) {
    gw_canary_state *k = &g->canaries[i];
    if (strcmp(k->cfg->model, model)) continue;
    if (force) {
      for (size_t j = 0; j < k->cfg->n_variants; j++)
        if (strlen(k->cfg->variants[j].name) == flen && !memcmp(k->cfg->variants[j].name, force, flen))
          v = (int)j;
    }
    if (v < 0) {
      int w[16];
      for (size_t j = 0; j < k->cfg->n_variants; j++) w[j] = k->cfg->variants[j].weight;
      v = gw_swrr_pick(k->cfg->n_variants, w, k->current);
    }
    if (v >= 0) {
      gw_variant *var = &k->cfg->variants[v];
      snprintf(name, ncap, "%s", var->name);
      snprintf(group, gcap, "%s", var->group ? var->group : "");
      *version = var->version;
    }
    break;
  }
  pthread_mutex_unlock(&g->mu);
  return v;
}

static void canary_pick(gateway *g, gw_req *q) {
  q->variant = -1;
  snprintf(q->variant_name, sizeof q->variant_name, "%s", "");
  if (!q->model[0] || !g->n_canaries) return;
  size_t flen = 0;
  const char *force = http_request_header(q->hreq, g->cfg.variant_header, &flen);
  q->variant = gw_canary_choose(g, q->model, force, flen, q->group, sizeof q->group,
                                &q->variant_version, q->variant_name, sizeof q->variant_name);
  if (q->variant >= 0) q->model_known = true;
}

/* Admission answers (429, shed) come before routing. Their model label follows the rule of
 * every gateway metric: set when some replica lists the model or it has a canary
 * configuration, so made-up names cannot create series. Rejected requests only (g->mu). */
static const char *admission_model(gateway *g, gw_req *q) {
  if (q->model[0] && !q->model_known) {
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->n_canaries && !q->model_known; i++)
      if (!strcmp(g->canaries[i].cfg->model, q->model)) q->model_known = true;
    for (size_t i = 0; i < g->n_reps && !q->model_known; i++)
      if (g->reps[i]->sources && gw_replica_has_model(g->reps[i], q->model, 0)) q->model_known = true;
    pthread_mutex_unlock(&g->mu);
  }
  return q->model_known ? q->model : "";
}

/* Authentication and the API-group policy. false: q was answered (401/403) and freed. */
static bool authorize(gateway *g, gw_req *q) {
  const http_request *req = q->hreq;
  api_classify(req->method_id, req->path, req->path_len, &q->route);
  size_t xl = 0;
  const char *xff = http_request_header(req, "x-forwarded-for", &xl);
  gw_client_addr(http_exchange_peer(q->ex), xff, xl, g->cfg.trusted_proxies,
                 g->cfg.n_trusted_proxies, q->client, sizeof q->client);
  if (q->route.path_err != HTTP_PATH_OK) { /* what the replica would answer, before any routing */
    char msg[200];
    http_path_err_message(q->route.path_err, q->route.path_err_len, msg, sizeof msg);
    q->done = true;
    req_metrics(q, 400);
    LOG_V(1, "gateway: request %s from %s -> 400: %s", q->id, q->client, msg);
    gw_respond_error(q->ex, 400, q->id, "%s", msg);
    req_free(q);
    return false;
  }
  q->ks = gw_keys_get(g);
  gw_role role = GW_ROLE_ANON;
  bool bad = false;
  snprintf(q->who, sizeof q->who, "anonymous");
  size_t al = 0;
  const char *a = http_request_header(req, "authorization", &al);
  const char *tok = NULL;
  size_t tl = 0;
  if (a && al > 7 && !strncasecmp(a, "Bearer ", 7)) {
    tok = a + 7;
    tl = al - 7;
    while (tl && *tok == ' ') tok++, tl--;
  }
  if (tok && g->cfg.admin_token &&
      api_ct_equal(tok, tl, g->cfg.admin_token, strlen(g->cfg.admin_token))) {
    role = GW_ROLE_OPERATOR;
    snprintf(q->who, sizeof q->who, "admin-token");
    q->strip_auth = true;
  } else if (q->ks && (tok || a)) {
    q->key = tok ? gw_keys_find(q->ks, tok, tl) : NULL;
    if (q->key) {
      role = q->key->role;
      snprintf(q->who, sizeof q->who, "key:%s", q->key->id);
    } else {
      bad = true;
    }
    q->strip_auth = true;
  }
  const char *model = q->route.model[0] ? q->route.model : q->model;
  bool open = q->route.group == API_GROUP_NONE ||
              ((unsigned)q->route.group < API_GROUP_COUNT && g->cfg.public_groups[q->route.group]);
  q->audit = !open;
  gw_access_in in = {.group = q->route.group, .listing = q->route.listing, .role = role,
                     .key_id = q->key ? q->key->id : NULL, .keys = q->ks != NULL,
                     .bad_credential = bad, .public_groups = g->cfg.public_groups,
                     .key = q->key, .model = model};
  char msg[400];
  int code = gw_access_decide(&in, msg, sizeof msg);
  if (!code && role == GW_ROLE_TENANT && !q->key->all_models && !q->route.listing) {
    if (q->model_ambiguous) {
      code = 400;
      snprintf(msg, sizeof msg, "the request body names \"model\" more than once");
    } else if (!model[0] && q->route.group == API_INFERENCE) {
      code = 403;
      snprintf(msg, sizeof msg, "API key '%s' may only use its models: the request names none",
               q->key->id);
    }
  }
  if (!code) {
    q->filter = role == GW_ROLE_TENANT && q->route.listing && !q->key->all_models;
    return true;
  }
  q->done = true;
  req_metrics(q, code);
  LOG_V(1, "gateway: request %s from %s (%s) -> %d: %s", q->id, q->client, q->who, code, msg);
  if (code == 401) {
    char esc[900], body[1000];
    json_escape(esc, sizeof esc, msg);
    int n = snprintf(body, sizeof body, "{\"error\":\"%s\"}", esc);
    http_header h[3] = {{"Content-Type", 12, "application/json", 16},
                        {"WWW-Authenticate", 16, bad ? "Bearer error=\"invalid_token\"" : "Bearer",
                         bad ? 28 : 6},
                        {"X-Request-Id", 12, q->id, strlen(q->id)}};
    http_respond(q->ex, 401, h, 3, body, (size_t)n);
  } else {
    gw_respond_error(q->ex, code, q->id, "%s", msg);
  }
  req_free(q);
  return false;
}

void gw_proxy(gateway *g, http_exchange *ex, const http_request *req, int loop) {
  gw_req *q = calloc(1, sizeof *q);
  if (!q) {
    gw_respond_error(ex, 500, NULL, "gateway: out of memory");
    return;
  }
  q->g = g;
  q->ex = ex;
  q->hreq = req;
  q->loop = loop;
  q->variant = -1;
  q->model = no_model;
  q->start_ms = clock_now_ms();
  q->deadline.fn = on_deadline;
  q->delay.fn = on_delay;
  size_t idlen = 0;
  const char *id = http_request_header(req, "x-request-id", &idlen);
  if (id && valid_id(id, idlen)) {
    memcpy(q->id, id, idlen);
    q->id[idlen] = 0;
  } else {
    gen_id(g, loop, q->id);
  }
  size_t sl = 0;
  const char *sess = http_request_header(req, g->cfg.session_header, &sl);
  if (sess && sl) {
    q->has_affinity = true;
    q->affinity_key = gw_hash64(sess, sl);
  }
  size_t name_end = 0;
  parse_model_path(q, &name_end);
  if (!q->model[0]) parse_openai_model(q);
  net_loop *nl = g->loops[loop].loop;
  uint64_t now = loop_now_ms(nl);

  /* 0. who is calling, and may they make this call? */
  if (!authorize(g, q)) return;
  if (q->oom) return req_fail(q, 500, "gateway: out of memory reading the request's model name");

  /* 1. rate limit per key: the authenticated key id, else the rate key header, else the
   * client address (X-Forwarded-For counts only behind a trusted proxy) */
  uint64_t delay_ms = 0;
  double rate = q->key && q->key->rate > 0 ? q->key->rate : g->cfg.rate;
  double burst = q->key && q->key->rate > 0 ? q->key->burst : g->cfg.burst;
  if (rate > 0 && g->rate) {
    size_t kl = 0;
    char kbuf[80];
    const char *key = NULL;
    if (q->key) {
      kl = (size_t)snprintf(kbuf, sizeof kbuf, "key:%s", q->key->id);
      key = kbuf;
    } else {
      key = http_request_header(req, g->cfg.rate_key_header, &kl);
    }
    if (!key || !kl) {
      key = q->client;
      kl = strlen(q->client);
    }
    if (!kl) {
      key = "-";
      kl = 1;
    }
    gw_bucket_result br = gw_rate_take(g, key, kl, rate, burst, now);
    if (!br.admitted) {
      const char *labels[] = {"model", admission_model(g, q), NULL};
      metric_inc(gw_series(g->f_rate, labels), 1);
      q->done = true;
      req_metrics(q, 429);
      char ra[24], body[200];
      snprintf(ra, sizeof ra, "%llu", (unsigned long long)br.retry_after_s);
      int n = snprintf(body, sizeof body, "{\"error\":\"rate limit exceeded: retry after %s s\"}", ra);
      http_header h[3] = {{"Content-Type", 12, "application/json", 16},
                          {"Retry-After", 11, ra, strlen(ra)},
                          {"X-Request-Id", 12, q->id, strlen(q->id)}};
      http_respond(ex, 429, h, 3, body, (size_t)n);
      req_free(q);
      return;
    }
    delay_ms = br.delay_ms;
  }

  /* 1b. the key's LLM token budget (tokens per minute, paid from the answers' usage) */
  if (q->key && q->key->tpm > 0 && q->hreq->path_len > 4 && !memcmp(q->hreq->path, "/v1/", 4)) {
    pthread_mutex_lock(&g->tok_mu);
    gw_tokens *t = tok_entry(g, q->key->id);
    uint64_t wait_s = t ? gw_tokens_admit(t, q->key->tpm, clock_now_ms()) : 0;
    pthread_mutex_unlock(&g->tok_mu);
    if (wait_s) {
      const char *labels[] = {"model", admission_model(g, q), NULL};
      metric_inc(gw_series(g->f_token_limited, labels), 1);
      q->done = true;
      req_metrics(q, 429);
      char ra[24], body[240];
      snprintf(ra, sizeof ra, "%llu", (unsigned long long)wait_s);
      int n = snprintf(body, sizeof body,
                       "{\"error\":{\"message\":\"token budget of key '%s' spent (%.0f tokens per minute): retry "
                       "after %s s\",\"type\":\"rate_limit_error\"}}", q->key->id, q->key->tpm, ra);
      http_header h[3] = {{"Content-Type", 12, "application/json", 16},
                          {"Retry-After", 11, ra, strlen(ra)},
                          {"X-Request-Id", 12, q->id, strlen(q->id)}};
      http_respond(ex, 429, h, 3, body, (size_t)n);
      req_free(q);
      return;
    }
    q->count_tokens = true;
    gw_tok_usage_init(&q->usage);
  }

  /* 2. global concurrency with priority classes */
  if (g->cfg.max_concurrency > 0) {
    double share = 1.0;
    if (g->cfg.n_classes) {
      size_t pl = 0;
      const char *pv = http_request_header(req, g->cfg.priority_header, &pl);
      size_t cls = g->cfg.n_classes - 1;  /* missing or unknown: the lowest class */
      for (size_t i = 0; pv && i < g->cfg.n_classes; i++)
        if (strlen(g->cfg.classes[i].name) == pl && !strncasecmp(g->cfg.classes[i].name, pv, pl))
          cls = i;
      share = g->cfg.classes[cls].share;
    }
    long long limit = (long long)(share * g->cfg.max_concurrency + 1e-9);
    if (limit < 1) limit = 1;
    long long prev = atomic_fetch_add(&g->active, 1);
    if (prev >= limit) {
      atomic_fetch_sub(&g->active, 1);
      const char *labels[] = {"model", admission_model(g, q), NULL};
      metric_inc(gw_series(g->f_shed, labels), 1);
      req_fail(q, 503, "gateway overloaded: request shed (concurrency limit for its priority class)");
      return;
    }
  } else {
    atomic_fetch_add(&g->active, 1);
  }
  q->counted_active = true;
  metric_inc(g->m_active, 1);

  canary_pick(g, q);
  if (!build_upstream(q, name_end)) {
    req_fail(q, 500, "gateway: out of memory building the upstream request");
    return;
  }
  http_exchange_set_cancel(ex, on_cancel, q);
  q->deadline_ms = now + (uint64_t)g->cfg.request_timeout_ms;
  loop_timer_at(nl, &q->deadline, q->deadline_ms);
  if (delay_ms) {
    loop_timer_at(nl, &q->delay, now + delay_ms);
    return;
  }
  start_try(q);
}
