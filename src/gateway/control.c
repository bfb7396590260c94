/* control.c: the gateway's control loop (one thread): discovery (static list, DNS names
 * re-resolved every dns_interval_ms with every A/AAAA record a replica, a watched file),
 * active health checks of every present replica, and model discovery (POST
 * /v2/repository/index {"ready":true} and GET /v1/models).
 *
 * Only this thread adds replicas or changes g->reps, so it reads the table without the
 * lock and writes it under g->mu (internal.h invariant 1). Replica fields hc, mc, mbuf,
 * pending, next_* belong to this thread alone.
 *
 * A replica whose readiness check answers anything but 200, or refuses the connection, is
 * marked draining at once (no new requests; in-flight ones finish); thresholds decide the
 * health state itself, and alone act on checks that time out.
 * DNS resolution uses getaddrinfo on this thread: a slow resolver delays health checks by
 * that long but never blocks request processing. A failed resolution keeps the previous
 * set (a DNS blip does not empty the cluster).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/log.h"
#include "gateway/internal.h"

#define CTL_TICK_MS 25

typedef struct gw_found {
  char host[64];
  uint16_t port;
  const char *group;
  int weight;
  uint16_t grpc_port;    /* 0: cfg.upstream_grpc_port */
} gw_found;

static void format_addr(char *out, size_t cap, const char *host, uint16_t port) {
  if (strchr(host, ':')) snprintf(out, cap, "[%s]:%u", host, port);
  else snprintf(out, cap, "%s:%u", host, port);
}

gw_replica *gw_replica_get(gateway *g, const char *host, uint16_t port) {
  char addr[80];
  format_addr(addr, sizeof addr, host, port);
  for (size_t i = 0; i < g->n_reps; i++)
    if (!strcmp(g->reps[i]->addr, addr)) return g->reps[i];
  if (g->n_reps >= GW_MAX_REPLICAS) return NULL;
  gw_replica *r = calloc(1, sizeof *r);
  gw_replica **nr = realloc(g->reps, (g->n_reps + 1) * sizeof *nr);
  if (!r || !nr) {
    free(r);
    if (nr) g->reps = nr;
    return NULL;
  }
  g->reps = nr;
  r->idle = calloc((size_t)g->n_loops, sizeof *r->idle);
  r->n_idle = calloc((size_t)g->n_loops, sizeof *r->n_idle);
  if (!r->idle || !r->n_idle) {
    free(r->idle);
    free(r->n_idle);
    free(r);
    return NULL;
  }
  snprintf(r->addr, sizeof r->addr, "%s", addr);
  r->id_hash = gw_hash64(r->addr, strlen(r->addr));
  snprintf(r->host, sizeof r->host, "%s", host);
  r->port = port;
  r->weight = 1;
  r->gw = g;
  const char *l[] = {"upstream", r->addr, NULL};
  r->m_healthy = gw_series(g->f_healthy, l);
  r->m_ejections = gw_series(g->f_ejections, l);
  metric_inc(r->m_ejections, 0);
  const char *rl[] = {"upstream", r->addr, "model", "", NULL};
  metric_inc(gw_series(g->f_retries, rl), 0);
  metric_inc(gw_series(g->f_refusals, rl), 0);
  g->reps[g->n_reps++] = r;
  return r;
}

bool gw_replica_has_model(const gw_replica *r, const char *model, long long version) {
  if (!r->models_known) return false;
  size_t ml = strlen(model);
  for (size_t i = 0; i < r->n_models; i++) {
    const char *m = r->models[i];
    if (version <= 0) {
      if (!strcmp(m, model)) return true;
      continue;
    }
    /* "NAME@V" entries, compared in place (the whole name, no copy under g->mu) */
    if (strncmp(m, model, ml) || m[ml] != '@' || !m[ml + 1]) continue;
    char *end;
    long long v = strtoll(m + ml + 1, &end, 10);
    if (!*end && v == version) return true;
  }
  return false;
}

bool gw_replica_usable(const gw_replica *r, uint64_t now_ms) {
  return r->sources && !r->draining && gw_health_usable(&r->h, now_ms);
}

void gw_replica_check_soon(gateway *g, gw_replica *r) {
  (void)g;
  __atomic_store_n(&r->check_now, true, __ATOMIC_RELAXED);
}

/* Makes `bit` list exactly found[0..n) (control thread). */
static void apply_source(gateway *g, unsigned bit, const gw_found *found, size_t n) {
  pthread_mutex_lock(&g->mu);
  for (size_t i = 0; i < g->n_reps; i++) g->reps[i]->mark = false;
  for (size_t k = 0; k < n; k++) {
    gw_replica *r = gw_replica_get(g, found[k].host, found[k].port);
    if (!r) {
      LOG_W("gateway: replica table full (%d), ignoring %s", GW_MAX_REPLICAS, found[k].host);
      continue;
    }
    if (!r->sources) {
      /* (re)joining: not used before its first passed check */
      memset(&r->h, 0, sizeof r->h);
      r->draining = false;
      r->next_check_ms = 0;
      r->next_models_ms = 0;
      r->added_ms = clock_now_ms();
      r->healthy_ms = r->models_ms = r->out_ms = r->unhealthy_ms = r->ejected_ms = 0;
      atomic_store(&r->first_ok_ms, 0);
      LOG_I("gateway: upstream %s added", r->addr);
    }
    r->sources |= bit;
    r->mark = true;
    snprintf(r->group, sizeof r->group, "%s", found[k].group ? found[k].group : "");
    r->weight = found[k].weight > 0 ? found[k].weight : 1;
    r->grpc_port = found[k].grpc_port ? found[k].grpc_port : (uint16_t)g->cfg.upstream_grpc_port;
  }
  for (size_t i = 0; i < g->n_reps; i++) {
    gw_replica *r = g->reps[i];
    if ((r->sources & bit) && !r->mark) {
      r->sources &= ~bit;
      if (!r->sources) LOG_I("gateway: upstream %s removed", r->addr);
    }
  }
  pthread_mutex_unlock(&g->mu);
}

/* Resolves name (all records unless first_only); returns count written to out. */
static size_t resolve(const char *name, uint16_t port, const char *group, int weight,
                      gw_found *out, size_t cap, bool first_only, int *gai_err) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  *gai_err = getaddrinfo(name, NULL, &hints, &ai);
  if (*gai_err) return 0;
  size_t n = 0;
  for (struct addrinfo *p = ai; p && n < cap; p = p->ai_next) {
    char host[64];
    if (p->ai_family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)p->ai_addr)->sin_addr, host, sizeof host);
    else if (p->ai_family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)p->ai_addr)->sin6_addr, host, sizeof host);
    else continue;
    bool dup = false;
    for (size_t k = 0; k < n; k++)
      if (!strcmp(out[k].host, host)) dup = true;
    if (dup) continue;
    snprintf(out[n].host, sizeof out[n].host, "%s", host);
    out[n].port = port;
    out[n].group = group;
    out[n].weight = weight;
    n++;
    if (first_only) break;
  }
  freeaddrinfo(ai);
  return n;
}

static void dns_refresh(gateway *g) {
  for (size_t i = 0; i < g->cfg.n_dns && i < 28; i++) {
    gw_dns_upstream *d = &g->cfg.dns[i];
    gw_found found[256];
    int err;
    size_t n = resolve(d->name, d->port, d->group, d->weight, found, 256, false, &err);
    if (err) {
      LOG_W("gateway: dns %s: %s (keeping the previous set)", d->name, gai_strerror(err));
      continue;
    }
    apply_source(g, GW_SRC_DNS0 << i, found, n);
  }
}

/* Upstreams file: one replica per line, "host:port [group=NAME] [weight=N]", '#' comments. */
static void file_refresh(gateway *g, bool force) {
  struct stat st;
  const char *path = g->cfg.upstreams_file;
  if (stat(path, &st) != 0) {
    if (force) LOG_W("gateway: upstreams file %s: cannot stat", path);
    return;
  }
  if (!force && st.st_mtim.tv_sec == g->file_mtime && st.st_mtim.tv_nsec == g->file_mtime_ns &&
      st.st_size == g->file_size)
    return;
  g->file_mtime = st.st_mtim.tv_sec;
  g->file_mtime_ns = st.st_mtim.tv_nsec;
  g->file_size = st.st_size;
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t cap = 64, n = 0;
  gw_found *found = malloc(cap * sizeof *found);
  char (*groups)[64] = malloc(cap * sizeof *groups);
  char line[512];
  int lineno = 0;
  bool ok = found && groups;
  while (ok && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save);
    if (!tok) continue;
    char host[256];
    uint16_t port;
    if (!gw_parse_hostport(tok, host, sizeof host, &port)) {
      LOG_W("gateway: %s:%d: '%s' is not host:port (line ignored)", path, lineno, tok);
      continue;
    }
    char group[64] = "";
    int weight = 1, gport = 0;
    bool bad = false;
    while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
      if (!strncmp(tok, "group=", 6)) snprintf(group, sizeof group, "%s", tok + 6);
      else if (!strncmp(tok, "weight=", 7)) {
        char *e;
        long w = strtol(tok + 7, &e, 10);
        if (*e || w < 1 || w > 1000000) bad = true;
        else weight = (int)w;
      } else if (!strncmp(tok, "grpc=", 5)) {
        char *e;
        long w = strtol(tok + 5, &e, 10);
        if (*e || w < 1 || w > 65535) bad = true;
        else gport = (int)w;
      } else bad = true;
    }
    if (bad) {
      LOG_W("gateway: %s:%d: expected 'host:port [group=NAME] [weight=N] [grpc=PORT]' (line ignored)", path, lineno);
      continue;
    }
    if (n + 16 > cap) {
      cap *= 2;
      gw_found *nf = realloc(found, cap * sizeof *found);
      if (nf) found = nf;
      char (*ng)[64] = realloc(groups, cap * sizeof *groups);
      if (ng) groups = ng;
      if (!nf || !ng) { ok = false; break; }
    }
    int err;
    snprintf(groups[n], sizeof groups[n], "%s", group);
    size_t k = resolve(host, port, NULL, weight, found + n, 1, true, &err);
    if (!k) {
      LOG_W("gateway: %s:%d: %s: %s", path, lineno, host, gai_strerror(err));
      continue;
    }
    found[n].grpc_port = (uint16_t)gport;
    n++;
  }
  fclose(f);
  if (ok) {
    for (size_t i = 0; i < n; i++) found[i].group = groups[i][0] ? groups[i] : NULL;
    apply_source(g, GW_SRC_FILE, found, n);
  }
  free(found);
  free(groups);
}

cinfer_status *gw_static_resolve(gateway *g) {
  gw_found *found = calloc(g->cfg.n_statics ? g->cfg.n_statics : 1, sizeof *found);
  if (!found) return cinfer_status_oom(NULL);
  size_t n = 0;
  for (size_t i = 0; i < g->cfg.n_statics; i++) {
    char host[256];
    uint16_t port;
    gw_static_upstream *s = &g->cfg.statics[i];
    if (!gw_parse_hostport(s->address, host, sizeof host, &port)) {
      free(found);
      return cinfer_status_new(CINFER_INVALID_ARG, "upstreams.static[%zu]: '%s' is not host:port", i, s->address);
    }
    int err;
    if (!resolve(host, port, s->group, s->weight, &found[n], 1, true, &err)) {
      free(found);
      return cinfer_status_new(CINFER_INVALID_ARG, "upstreams.static[%zu]: '%s': %s", i, host,
                               err ? gai_strerror(err) : "no address");
    }
    found[n].grpc_port = (uint16_t)s->grpc_port;
    n++;
  }
  apply_source(g, GW_SRC_STATIC, found, n);
  free(found);
  return NULL;
}

/* ---- health checks ------------------------------------------------------------------- */

static void hc_head(void *user, const http_response *resp) {
  gw_replica *r = user;
  r->hc_status = resp->status;
}

static gateway *g_of(gw_replica *r) { return r->gw; }

static void hc_done(void *user, http_client_error err, const char *msg) {
  gw_replica *r = user;
  gateway *g = g_of(r);
  if (err == HTTP_CLIENT_CANCELLED) return;
  bool ok = err == HTTP_CLIENT_OK && r->hc_status == 200;
  gw_health_params p = {g->cfg.healthy_threshold, g->cfg.unhealthy_threshold,
                        g->cfg.eject_consecutive, g->cfg.eject_base_ms, g->cfg.eject_max_ms};
  uint64_t now = clock_now_ms();
  pthread_mutex_lock(&g->mu);
  bool was_draining = r->draining, was_usable = gw_replica_usable(r, now);
  /* Out at once: an answer other than 200 (a draining server's 503) or a refused connection
   * (nothing listens). A timeout or reset is ambiguous (a slow or stalled replica): only the
   * thresholds act on it, so one slow check does not take a replica out. */
  if (ok) r->draining = false;
  else if (err == HTTP_CLIENT_OK || err == HTTP_CLIENT_CONNECT_REFUSED || err == HTTP_CLIENT_TLS)
    r->draining = true;  /* a TLS failure (wrong CA, expired certificate) will not heal by itself */
  bool changed = gw_health_check_result(&r->h, &p, ok);
  gw_health_state s = r->h.state;
  if (changed && s == GW_H_HEALTHY) r->healthy_ms = now;
  if (changed && s == GW_H_UNHEALTHY) r->unhealthy_ms = now;
  if (was_usable && !gw_replica_usable(r, now)) r->out_ms = now;
  pthread_mutex_unlock(&g->mu);
  if (changed) {
    if (s == GW_H_HEALTHY) {
      LOG_I("gateway: upstream %s healthy", r->addr);
      r->next_models_ms = 0;  /* learn its models now */
    } else {
      LOG_W("gateway: upstream %s unhealthy: %s", r->addr,
            err == HTTP_CLIENT_OK ? "readiness check not 200" : msg);
    }
  } else if (!was_draining && r->draining && s == GW_H_HEALTHY) {
    LOG_I("gateway: upstream %s %s: no new requests", r->addr,
          err == HTTP_CLIENT_OK ? "not ready (draining)" : "refused the connection");
  }
}

/* ---- model discovery ----------------------------------------------------------------- */

static void mc_head(void *user, const http_response *resp) {
  gw_replica *r = user;
  r->mc_status = resp->status;
  r->mlen = 0;
}

static void mc_body(void *user, const char *data, size_t len) {
  gw_replica *r = user;
  if (r->mlen + len > (8u << 20)) return;  /* bounded: a huge index is truncated (invalid JSON) */
  if (r->mlen + len > r->mcap) {
    size_t cap = r->mcap ? r->mcap : 4096;
    while (cap < r->mlen + len) cap *= 2;
    char *nb = realloc(r->mbuf, cap);
    if (!nb) return;
    r->mbuf = nb;
    r->mcap = cap;
  }
  memcpy(r->mbuf + r->mlen, data, len);
  r->mlen += len;
}

static void pending_add(gw_replica *r, const char *s) {
  for (size_t i = 0; i < r->n_pending; i++)
    if (!strcmp(r->pending[i], s)) return;
  if (r->n_pending >= 65536) return;
  char **np = realloc(r->pending, (r->n_pending + 1) * sizeof *np);
  if (!np) return;
  r->pending = np;
  char *d = strdup(s);
  if (d) r->pending[r->n_pending++] = d;
}

static void pending_clear(gw_replica *r) {
  for (size_t i = 0; i < r->n_pending; i++) free(r->pending[i]);
  free(r->pending);
  r->pending = NULL;
  r->n_pending = 0;
}

static void mc_send(gateway *g, gw_replica *r);

static void mc_done(void *user, http_client_error err, const char *msg) {
  gw_replica *r = user;
  gateway *g = g_of(r);
  if (err == HTTP_CLIENT_CANCELLED) return;
  if (r->mc_stage == 1) {
    if (err != HTTP_CLIENT_OK || r->mc_status != 200) {
      r->mc_stage = 0;
      pending_clear(r);
      return;  /* try again at the next interval */
    }
    cJSON *j = cJSON_ParseWithLength(r->mbuf ? r->mbuf : "", r->mlen);
    if (cJSON_IsArray(j)) {
      for (const cJSON *e = j->child; e; e = e->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(e, "version");
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(e, "state");
        if (!cJSON_IsString(name) || !name->valuestring[0]) continue;
        if (cJSON_IsString(state) && strcmp(state->valuestring, "READY")) continue;
        pending_add(r, name->valuestring);
        if (cJSON_IsString(ver) && strlen(ver->valuestring) < 20) {
          size_t kl = strlen(name->valuestring) + strlen(ver->valuestring) + 2;
          char *k = malloc(kl);
          if (k) {
            snprintf(k, kl, "%s@%s", name->valuestring, ver->valuestring);
            pending_add(r, k);
            free(k);
          }
        }
      }
    }
    cJSON_Delete(j);
    r->mc_stage = 2;
    mc_send(g, r);
    return;
  }
  /* stage 2: /v1/models (optional: servers without the OpenAI API answer 404) */
  if (err == HTTP_CLIENT_OK && r->mc_status == 200) {
    cJSON *j = cJSON_ParseWithLength(r->mbuf ? r->mbuf : "", r->mlen);
    const cJSON *data = j ? cJSON_GetObjectItemCaseSensitive(j, "data") : NULL;
    if (cJSON_IsArray(data))
      for (const cJSON *e = data->child; e; e = e->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsString(id) && id->valuestring[0]) pending_add(r, id->valuestring);
      }
    cJSON_Delete(j);
  }
  (void)msg;
  pthread_mutex_lock(&g->mu);
  char **old = r->models;
  size_t n_old = r->n_models;
  r->models = r->pending;
  r->n_models = r->n_pending;
  r->models_known = true;
  if (!r->models_ms) r->models_ms = clock_now_ms();
  pthread_mutex_unlock(&g->mu);
  r->pending = NULL;
  r->n_pending = 0;
  for (size_t i = 0; i < n_old; i++) free(old[i]);
  free(old);
  r->mc_stage = 0;
}

/* ---- LLM load (kv_aware): the replica's /metrics on the health interval -------------- */

static void xc_head(void *user, const http_response *resp) {
  gw_replica *r = user;
  r->xc_status = resp->status;
  r->xlen = 0;
}

static void xc_body(void *user, const char *data, size_t len) {
  gw_replica *r = user;
  if (r->xlen + len > (4u << 20)) return;  /* bounded; the series we read come early */
  if (r->xlen + len > r->xcap) {
    size_t cap = r->xcap ? r->xcap : 16384;
    while (cap < r->xlen + len) cap *= 2;
    char *nb = realloc(r->xbuf, cap);
    if (!nb) return;
    r->xbuf = nb;
    r->xcap = cap;
  }
  memcpy(r->xbuf + r->xlen, data, len);
  r->xlen += len;
}

static void xc_done(void *user, http_client_error err, const char *msg) {
  gw_replica *r = user;
  gateway *g = g_of(r);
  (void)msg;
  if (err != HTTP_CLIENT_OK || r->xc_status != 200) return;  /* the last reading stays */
  /* as many entries as the replica has models: a full buffer is read again, twice as big */
  size_t cap = 16, n = 0;
  gw_kv_stat *nk = NULL;
  for (;;) {
    gw_kv_stat *t = realloc(nk, cap * sizeof *nk);
    if (!t) {
      free(nk);
      return;
    }
    nk = t;
    n = gw_kv_parse_metrics(r->xbuf ? r->xbuf : "", r->xlen, nk, cap);
    if (n < cap) break;
    gw_kv_free(nk, n);
    cap *= 2;
  }
  if (!n) {
    free(nk);
    nk = NULL;
  }
  pthread_mutex_lock(&g->mu);
  gw_kv_stat *old = r->kv;
  size_t n_old = r->n_kv;
  r->kv = nk;
  r->n_kv = n;
  r->kv_ms = clock_now_ms();
  pthread_mutex_unlock(&g->mu);
  gw_kv_free(old, n_old);
  free(old);
}

static const char METRICS_REQ[] =
    "GET /metrics HTTP/1.1\r\nHost: cinfer-upstream\r\nUser-Agent: cinfer-gateway\r\n\r\n";

static const char INDEX_REQ[] =
    "POST /v2/repository/index HTTP/1.1\r\nHost: cinfer-upstream\r\nUser-Agent: cinfer-gateway\r\n"
    "Content-Type: application/json\r\nContent-Length: 14\r\n\r\n{\"ready\":true}";
static const char MODELS_REQ[] =
    "GET /v1/models HTTP/1.1\r\nHost: cinfer-upstream\r\nUser-Agent: cinfer-gateway\r\n\r\n";

static http_client *ctl_client_cb(gateway *g, gw_replica *r, bool health, bool metrics);
static http_client *ctl_client(gateway *g, gw_replica *r, bool health) {
  return ctl_client_cb(g, r, health, false);
}

static http_client *ctl_client_cb(gateway *g, gw_replica *r, bool health, bool metrics) {
  http_client_opts o = {.host = r->host, .port = r->port,
                        .connect_timeout_ms = g->cfg.health_timeout_ms,
                        .response_timeout_ms = health ? g->cfg.health_timeout_ms
                                                      : g->cfg.health_timeout_ms * 5,
                        .tls = g->tls_up, .tls_name = g->cfg.up_server_name};
  http_client_callbacks cbh = {hc_head, NULL, hc_done};
  http_client_callbacks cbx = {xc_head, xc_body, xc_done};
  http_client_callbacks cbm = {mc_head, mc_body, mc_done};
  http_client *c = NULL;
  cinfer_status *st = http_client_create(g->ctl, &o, metrics ? &cbx : health ? &cbh : &cbm, r, &c);
  if (st) {
    LOG_W("gateway: upstream %s: %s", r->addr, cinfer_status_message(st));
    cinfer_status_free(st);
  }
  return c;
}

static void mc_send(gateway *g, gw_replica *r) {
  if (!r->mc && !(r->mc = ctl_client(g, r, false))) {
    r->mc_stage = 0;
    return;
  }
  r->mc_status = 0;
  r->mlen = 0;
  if (r->mc_stage == 1) http_client_send(r->mc, INDEX_REQ, sizeof INDEX_REQ - 1, false);
  else http_client_send(r->mc, MODELS_REQ, sizeof MODELS_REQ - 1, false);
}

/* ---- API keys ---------------------------------------------------------------------- */

gw_keyset *gw_keys_get(gateway *g) {
  pthread_mutex_lock(&g->keys_mu);
  gw_keyset *ks = g->keys;
  gw_keyset_ref(ks);
  pthread_mutex_unlock(&g->keys_mu);
  return ks;
}

cinfer_status *gw_keys_refresh(gateway *g, bool force) {
  const char *path = g->cfg.keys_file;
  struct stat st;
  if (stat(path, &st)) {
    cinfer_status *e = cinfer_status_new(CINFER_INVALID_ARG, "auth.keys_file: %s: %s", path, strerror(errno));
    if (!force) {
      /* throttle: the same error is not worth a line per poll */
      if (g->keys_size != -1) LOG_E("gateway: %s; keeping the previous keys", cinfer_status_message(e));
      g->keys_size = -1;
      cinfer_status_free(e);
      return NULL;
    }
    return e;
  }
  if (!force && st.st_mtim.tv_sec == g->keys_mtime && st.st_mtim.tv_nsec == g->keys_mtime_ns &&
      st.st_size == g->keys_size && st.st_ino == g->keys_ino)
    return NULL;
  g->keys_mtime = st.st_mtim.tv_sec;
  g->keys_mtime_ns = st.st_mtim.tv_nsec;
  g->keys_size = st.st_size;
  g->keys_ino = st.st_ino;
  gw_keyset *ks = NULL;
  cinfer_status *e = gw_keys_load(path, &ks);
  if (e) {
    if (force) return e;
    LOG_E("gateway: auth.keys_file: %s; keeping the previous keys", cinfer_status_message(e));
    cinfer_status_free(e);
    return NULL;
  }
  pthread_mutex_lock(&g->keys_mu);
  gw_keyset *old = g->keys;
  g->keys = ks;
  pthread_mutex_unlock(&g->keys_mu);
  gw_keyset_unref(old);
  LOG_I("gateway: %s: %zu API key%s loaded", path, ks->n, ks->n == 1 ? "" : "s");
  return NULL;
}

/* ---- the tick ------------------------------------------------------------------------ */

static void ctl_tick(loop_timer *t) {
  gateway *g = (gateway *)((char *)t - offsetof(gateway, ctl_tick));
  uint64_t now = loop_now_ms(g->ctl);
  if (g->cfg.n_dns && now >= g->next_dns_ms) {
    dns_refresh(g);
    g->next_dns_ms = clock_now_ms() + (uint64_t)g->cfg.dns_interval_ms;
  }
  if (g->cfg.upstreams_file && now >= g->next_file_ms) {
    file_refresh(g, false);
    g->next_file_ms = clock_now_ms() + (uint64_t)g->cfg.file_interval_ms;
  }
  if (g->cfg.keys_file && now >= g->next_keys_ms) {
    gw_keys_refresh(g, false);
    g->next_keys_ms = clock_now_ms() + (uint64_t)g->cfg.keys_interval_ms;
  }
  now = clock_now_ms();
  for (size_t i = 0; i < g->n_reps; i++) {
    gw_replica *r = g->reps[i];
    if (!r->sources) continue;
    bool soon = __atomic_exchange_n(&r->check_now, false, __ATOMIC_RELAXED);
    if ((soon || now >= r->next_check_ms) && (!r->hc || !http_client_busy(r->hc))) {
      if (!r->hc) r->hc = ctl_client(g, r, true);
      if (r->hc) {
        r->hc_status = 0;
        r->next_check_ms = now + (uint64_t)g->cfg.health_interval_ms;
        http_client_send(r->hc, g->health_req, g->health_req_len, false);
      }
      if (g->cfg.balancer == GW_BAL_KV_AWARE && (!r->xc || !http_client_busy(r->xc))) {
        if (!r->xc) r->xc = ctl_client_cb(g, r, false, true);
        if (r->xc) {
          r->xc_status = 0;
          http_client_send(r->xc, METRICS_REQ, sizeof METRICS_REQ - 1, false);
        }
      }
    }
    pthread_mutex_lock(&g->mu);  /* passive ejection writes r->h from I/O threads */
    bool healthy = r->h.state == GW_H_HEALTHY;
    bool usable = gw_health_usable(&r->h, now) && !r->draining;
    pthread_mutex_unlock(&g->mu);
    if (r->mc_stage == 0 && now >= r->next_models_ms && healthy) {
      r->next_models_ms = now + (uint64_t)g->cfg.models_interval_ms;
      pending_clear(r);
      r->mc_stage = 1;
      mc_send(g, r);
    }
    metric_set(r->m_healthy, usable ? 1 : 0);
  }
  for (size_t i = 0; i < g->n_reps; i++)
    if (!g->reps[i]->sources) metric_set(g->reps[i]->m_healthy, 0);
  loop_timer_at(g->ctl, &g->ctl_tick, loop_now_ms(g->ctl) + CTL_TICK_MS);
}

static void ctl_first(void *arg) {
  gateway *g = arg;
  if (g->ctl_stopping) return;  /* loop_destroy runs it when the thread never started */
  if (g->cfg.upstreams_file) file_refresh(g, true);
  ctl_tick(&g->ctl_tick);
}

cinfer_status *gw_control_start(gateway *g) {
  size_t cap = strlen(g->cfg.health_path) + 128;
  g->health_req = malloc(cap);
  if (!g->health_req) return cinfer_status_oom(NULL);
  g->health_req_len = (size_t)snprintf(g->health_req, cap,
                                      "GET %s HTTP/1.1\r\nHost: cinfer-upstream\r\n"
                                      "User-Agent: cinfer-gateway\r\n\r\n", g->cfg.health_path);
  cinfer_status *st = loop_create(&g->ctl);
  if (st) return st;
  g->ctl_tick.fn = ctl_tick;
  if (!loop_post(g->ctl, ctl_first, g)) return cinfer_status_oom(NULL);
  st = loop_start_thread(g->ctl, "gw-control");
  g->ctl_running = st == NULL;
  return st;
}

void gw_control_stop(gateway *g) {
  if (!g->ctl) return;
  g->ctl_stopping = true;
  if (g->ctl_running) loop_join(g->ctl);
  g->ctl_running = false;
  /* The control thread is gone: this thread is the loop's only user now. */
  for (size_t i = 0; i < g->n_reps; i++) {
    gw_replica *r = g->reps[i];
    http_client_destroy(r->hc);
    http_client_destroy(r->mc);
    http_client_destroy(r->xc);
    r->hc = r->mc = r->xc = NULL;
    pending_clear(r);
    free(r->mbuf);
    r->mbuf = NULL;
    free(r->xbuf);
    r->xbuf = NULL;
  }
  loop_timer_cancel(g->ctl, &g->ctl_tick);
  loop_destroy(g->ctl);
  g->ctl = NULL;
  free(g->health_req);
  g->health_req = NULL;
}
