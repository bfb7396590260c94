/* runtime.c: gateway lifecycle and the gateway's own endpoints.
 *
 *   /healthz          200 while the process runs
 *   /readyz           200 when not draining and at least one replica is usable
 *   /metrics          Prometheus text (cinfer_gateway_* families)
 *   /status           HTML status page (auto-refresh every 2 s); /status.json the same data
 *   /admin/canary     GET: canary weights; PUT/POST /admin/canary/MODEL {"weights":{..}}
 *                     changes them (Authorization: Bearer <admin_token>)
 *   /v1/..., /v2/...  proxied (proxy.c)
 *
 * Shutdown order (gateway_drain then gateway_destroy): not ready -> server drains
 * (in-flight requests finish) -> every I/O loop frees its idle upstream connections ->
 * server destroyed -> control loop joined -> replicas freed.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/log.h"
#include "gateway/internal.h"

metric *gw_series(metric_family *f, const char *const *labels) { return metrics_series(f, labels); }

/* HTML/JSON-safe text: replica addresses, model and group names come from config and
 * upstreams, so they are escaped. */
/* ,"key":ms since the gateway started, or null for 0 (the event has not happened). */
static void tb_time(cbuf *b, const char *key, uint64_t t, uint64_t start_ms) {
  if (t) cbuf_printf(b, ",\"%s\":%llu", key, (unsigned long long)(t >= start_ms ? t - start_ms : 0));
  else cbuf_printf(b, ",\"%s\":null", key);
}

static void tb_esc(cbuf *b, const char *s, bool json) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (json && (c == '"' || c == '\\')) cbuf_printf(b, "\\%c", c);
    else if (json && c < 0x20) cbuf_printf(b, "\\u%04x", c);
    else if (!json && c == '<') cbuf_printf(b, "&lt;");
    else if (!json && c == '>') cbuf_printf(b, "&gt;");
    else if (!json && c == '&') cbuf_printf(b, "&amp;");
    else if (!json && c == '"') cbuf_printf(b, "&quot;");
    else cbuf_printf(b, "%c", c);
  }
}

static const char *state_name(const gw_replica *r, uint64_t now) {
  if (!r->sources) return "removed";
  if (r->h.ejected_until_ms > now) return "ejected";
  if (r->h.state == GW_H_HEALTHY && r->draining) return "draining";
  switch (r->h.state) {
    case GW_H_HEALTHY: return "healthy";
    case GW_H_UNHEALTHY: return "unhealthy";
    default: return "unknown";
  }
}

static bool any_usable(gateway *g) {
  uint64_t now = clock_now_ms();
  bool ok = false;
  pthread_mutex_lock(&g->mu);
  for (size_t i = 0; i < g->n_reps && !ok; i++) {
    gw_replica *r = g->reps[i];
    ok = r->sources && !r->draining && gw_health_usable(&r->h, now);
  }
  pthread_mutex_unlock(&g->mu);
  return ok;
}

static void status_render(gateway *g, cbuf *b, bool json) {
  uint64_t now = clock_now_ms();
  pthread_mutex_lock(&g->mu);
  if (json) {
    cbuf_printf(b, "{\"uptime_ms\":%llu,\"active\":%lld,\"draining\":%s,\"replicas\":[",
              (unsigned long long)(now - g->start_ms), (long long)atomic_load(&g->active),
              atomic_load(&g->draining) ? "true" : "false");
  } else {
    cbuf_printf(b,
              "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">"
              "<title>cinfer gateway</title><style>body{font-family:sans-serif;margin:1.5em}"
              "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
              ".healthy{background:#dfd}.draining{background:#ffd}.ejected,.unhealthy{background:#fdd}"
              ".removed,.unknown{color:#888}</style></head><body><h1>cinfer gateway</h1>"
              "<p>active requests: %lld &middot; uptime %.0f s%s</p><h2>Replicas</h2><table><tr>"
              "<th>upstream</th><th>state</th><th>group</th><th>weight</th><th>outstanding</th>"
              "<th>requests</th><th>failures</th><th>ejections</th><th>models</th></tr>",
              (long long)atomic_load(&g->active), (double)(now - g->start_ms) / 1000.0,
              atomic_load(&g->draining) ? " &middot; <b>draining</b>" : "");
  }
  for (size_t i = 0; i < g->n_reps; i++) {
    gw_replica *r = g->reps[i];
    const char *st = state_name(r, now);
    if (json) {
      cbuf_printf(b, "%s{\"upstream\":\"", i ? "," : "");
      tb_esc(b, r->addr, true);
      cbuf_printf(b, "\",\"state\":\"%s\",\"group\":\"", st);
      tb_esc(b, r->group, true);
      cbuf_printf(b, "\",\"weight\":%d,\"outstanding\":%u,\"requests\":%llu,\"failures\":%llu,"
                   "\"ejections\":%d,\"grpc_port\":%u",
                r->weight, atomic_load(&r->outstanding),
                (unsigned long long)atomic_load(&r->n_requests),
                (unsigned long long)atomic_load(&r->n_failures), r->h.ejections, r->grpc_port);
      tb_time(b, "added_ms", r->added_ms, g->start_ms);
      tb_time(b, "healthy_ms", r->healthy_ms, g->start_ms);
      tb_time(b, "models_ms", r->models_ms, g->start_ms);
      tb_time(b, "first_ok_ms", atomic_load(&r->first_ok_ms), g->start_ms);
      tb_time(b, "out_ms", r->out_ms, g->start_ms);
      tb_time(b, "unhealthy_ms", r->unhealthy_ms, g->start_ms);
      tb_time(b, "ejected_ms", r->ejected_ms, g->start_ms);
      if (r->kv_ms) {
        cbuf_printf(b, ",\"llm\":{");
        for (size_t k = 0; k < r->n_kv; k++) {
          const gw_kv_stat *x = &r->kv[k];
          cbuf_printf(b, "%s\"", k ? "," : "");
          tb_esc(b, x->model, true);
          cbuf_printf(b, "\":{\"running\":%g,\"waiting\":%g,\"pending\":%g,\"kv_usage\":%g,"
                         "\"prefix_cache_queries\":%g,\"prefix_cache_hits\":%g}",
                      x->running, x->waiting, x->pending, x->kv_usage, x->prefix_queries, x->prefix_hits);
        }
        cbuf_printf(b, "}");
        tb_time(b, "llm_ms", r->kv_ms, g->start_ms);
      }
      cbuf_printf(b, ",\"models\":[");
      for (size_t k = 0; k < r->n_models; k++) {
        cbuf_printf(b, "%s\"", k ? "," : "");
        tb_esc(b, r->models[k], true);
        cbuf_printf(b, "\"");
      }
      cbuf_printf(b, "]}");
    } else {
      cbuf_printf(b, "<tr class=\"%s\"><td>", st);
      tb_esc(b, r->addr, false);
      cbuf_printf(b, "</td><td>%s</td><td>", st);
      tb_esc(b, r->group, false);
      cbuf_printf(b, "</td><td>%d</td><td>%u</td><td>%llu</td><td>%llu</td><td>%d</td><td>",
                r->weight, atomic_load(&r->outstanding),
                (unsigned long long)atomic_load(&r->n_requests),
                (unsigned long long)atomic_load(&r->n_failures), r->h.ejections);
      for (size_t k = 0; k < r->n_models; k++) {
        if (strchr(r->models[k], '@')) continue;
        if (k) cbuf_printf(b, " ");
        tb_esc(b, r->models[k], false);
      }
      cbuf_printf(b, "</td></tr>");
    }
  }
  cbuf_printf(b, json ? "],\"canary\":{" : "</table><h2>Canary weights</h2><table><tr><th>model</th><th>variant</th><th>group</th><th>version</th><th>weight</th></tr>");
  for (size_t i = 0; i < g->n_canaries; i++) {
    gw_canary *k = g->canaries[i].cfg;
    if (json) {
      cbuf_printf(b, "%s\"", i ? "," : "");
      tb_esc(b, k->model, true);
      cbuf_printf(b, "\":{");
    }
    for (size_t j = 0; j < k->n_variants; j++) {
      gw_variant *v = &k->variants[j];
      if (json) {
        cbuf_printf(b, "%s\"", j ? "," : "");
        tb_esc(b, v->name, true);
        cbuf_printf(b, "\":%d", v->weight);
      } else {
        cbuf_printf(b, "<tr><td>");
        tb_esc(b, k->model, false);
        cbuf_printf(b, "</td><td>");
        tb_esc(b, v->name, false);
        cbuf_printf(b, "</td><td>");
        tb_esc(b, v->group ? v->group : "", false);
        cbuf_printf(b, "</td><td>%lld</td><td>%d</td></tr>", v->version, v->weight);
      }
    }
    if (json) cbuf_printf(b, "}");
  }
  pthread_mutex_unlock(&g->mu);
  cbuf_printf(b, json ? "}}" : "</table></body></html>");
}

/* ---- admin -------------------------------------------------------------------------- */

/* Who may use /admin: the admin token, or a key of the key file with the operator role.
 * 0 with who filled, or 401 (no or unknown credential) / 403 (a tenant key). */
static int admin_identity(gateway *g, const http_request *req, char *who, size_t cap) {
  snprintf(who, cap, "anonymous");
  size_t n = 0;
  const char *a = http_request_header(req, "authorization", &n);
  if (!a || n < 7 || strncasecmp(a, "Bearer ", 7)) return 401;
  const char *t = a + 7;
  size_t tl = n - 7;
  while (tl && *t == ' ') t++, tl--;
  if (g->cfg.admin_token && api_ct_equal(t, tl, g->cfg.admin_token, strlen(g->cfg.admin_token))) {
    snprintf(who, cap, "admin-token");
    return 0;
  }
  gw_keyset *ks = gw_keys_get(g);
  const gw_key *k = ks ? gw_keys_find(ks, t, tl) : NULL;
  int code = 401;
  if (k) {
    snprintf(who, cap, "key:%s", k->id);
    code = k->role == GW_ROLE_OPERATOR ? 0 : 403;
  } else {
    snprintf(who, cap, "unknown-credential");
  }
  gw_keyset_unref(ks);
  return code;
}

static int admin_do(gateway *g, http_exchange *ex, const http_request *req, const char *who) {
  static const char pre[] = "/admin/canary";
  if (req->path_len < sizeof pre - 1 || memcmp(req->path, pre, sizeof pre - 1)) {
    gw_respond_error(ex, 404, NULL, "admin: unknown path");
    return 404;
  }
  if (req->method_id == HTTP_GET) {
    cbuf b = {0};
    status_render(g, &b, true);
    http_header h = {"Content-Type", 12, "application/json", 16};
    if (b.oom) gw_respond_error(ex, 500, NULL, "out of memory");
    else http_respond_owned(ex, 200, &h, 1, b.data, b.len, free), b.data = NULL;
    free(b.data);
    return (b.oom ? 500 : 200);
  }
  if ((req->method_id != HTTP_PUT && req->method_id != HTTP_POST) || req->path_len <= sizeof pre) {
    gw_respond_error(ex, 405, NULL, "admin: use PUT /admin/canary/MODEL with {\"weights\":{\"variant\":N,...}}");
    return 405;
  }
  size_t ml = req->path_len - sizeof pre;
  char *model = strndup(req->path + sizeof pre, ml);
  if (!model) {
    gw_respond_error(ex, 500, NULL, "admin: out of memory");
    return 500;
  }
  cJSON *j = cJSON_ParseWithLength(req->body ? req->body : "", req->body_len);
  const cJSON *w = j ? cJSON_GetObjectItemCaseSensitive(j, "weights") : NULL;
  if (!cJSON_IsObject(w)) {
    cJSON_Delete(j);
    free(model);
    gw_respond_error(ex, 400, NULL, "admin: body must be {\"weights\":{\"variant\":N,...}}");
    return 400;
  }
  char err[1200] = "";
  int code = 200;
  pthread_mutex_lock(&g->mu);
  gw_canary_state *k = NULL;
  for (size_t i = 0; i < g->n_canaries; i++)
    if (!strcmp(g->canaries[i].cfg->model, model)) k = &g->canaries[i];
  int nw[16];
  if (!k) {
    code = 404;
    snprintf(err, sizeof err, "admin: model '%s' has no canary configuration", model);
  } else {
    long long total = 0;
    for (size_t v = 0; v < k->cfg->n_variants; v++) nw[v] = k->cfg->variants[v].weight;
    for (const cJSON *e = w->child; e && !err[0]; e = e->next) {
      int idx = -1;
      for (size_t v = 0; v < k->cfg->n_variants; v++)
        if (!strcmp(k->cfg->variants[v].name, e->string)) idx = (int)v;
      if (idx < 0) snprintf(err, sizeof err, "admin: weights.%s: no such variant", e->string);
      else if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1000000 ||
               e->valuedouble != (double)(int)e->valuedouble)
        snprintf(err, sizeof err, "admin: weights.%s: must be an integer in [0, 1000000]", e->string);
      else nw[idx] = (int)e->valuedouble;
    }
    for (size_t v = 0; v < k->cfg->n_variants; v++) total += nw[v];
    if (!err[0] && total <= 0) snprintf(err, sizeof err, "admin: the weights sum to 0");
    if (err[0]) code = 400;
    else {
      for (size_t v = 0; v < k->cfg->n_variants; v++) {
        k->cfg->variants[v].weight = nw[v];
        k->current[v] = 0;
        k->requests[v] = k->errors[v] = 0;
      }
    }
  }
  pthread_mutex_unlock(&g->mu);
  cJSON_Delete(j);
  if (code != 200) {
    free(model);
    gw_respond_error(ex, code, NULL, "%s", err);
    return code;
  }
  LOG_I("gateway: admin: canary weights of '%s' changed by %s", model, who);
  free(model);
  static const char ok[] = "{\"ok\":true}";
  http_header h = {"Content-Type", 12, "application/json", 16};
  http_respond(ex, 200, &h, 1, ok, sizeof ok - 1);
  return 200;
}


/* /admin: answered, then one audit line (who, what, result) per call, refused ones too. */
static void admin(gateway *g, http_exchange *ex, const http_request *req) {
  if (!g->cfg.admin_token && !g->cfg.keys_file) {
    gw_respond_error(ex, 404, NULL, "admin endpoint disabled (set admin_token, or a key file with operator keys)");
    return;
  }
  char who[80];
  int code = admin_identity(g, req, who, sizeof who);
  if (code == 401) {
    http_header h[2] = {{"Content-Type", 12, "application/json", 16},
                        {"WWW-Authenticate", 16, "Bearer", 6}};
    static const char body[] =
        "{\"error\":\"admin: missing or wrong bearer token (the admin token or an operator key)\"}";
    http_respond(ex, 401, h, 2, body, sizeof body - 1);
  } else if (code == 403) {
    gw_respond_error(ex, 403, NULL, "admin: %s is not an operator key", who);
  } else {
    code = admin_do(g, ex, req, who);
  }
  char st[12], method[16], path[208];
  snprintf(st, sizeof st, "%d", code);
  snprintf(method, sizeof method, "%.*s", (int)(req->method_len < 15 ? req->method_len : 15), req->method);
  snprintf(path, sizeof path, "%.*s", (int)(req->path_len < 200 ? req->path_len : 200), req->path);
  const char *kv[] = {"audit", "admin", "who", who, "client", http_exchange_peer(ex),
                      "method", method, "path", path, "status", st, NULL};
  log_event(LOG_INFO, kv, "gateway: audit: %s %s by %s -> %s", method, path, who, st);
}

/* ---- dispatch ------------------------------------------------------------------------ */

static bool path_is(const http_request *r, const char *p) {
  size_t n = strlen(p);
  return r->path_len == n && !memcmp(r->path, p, n);
}

static void handler(http_exchange *ex, const http_request *req, void *user) {
  gateway *g = user;
  if (!atomic_load_explicit(&g->started, memory_order_acquire)) {
    gw_respond_error(ex, 503, NULL, "gateway starting");
    return;
  }
  if ((req->path_len >= 4 && (!memcmp(req->path, "/v2/", 4) || !memcmp(req->path, "/v1/", 4))) ||
      path_is(req, "/v2")) {
    net_loop *l = http_exchange_loop(ex);
    int loop = 0;
    for (int i = 0; i < g->n_loops; i++)
      if (g->loops[i].loop == l) loop = i;
    gw_proxy(g, ex, req, loop);
    return;
  }
  http_header text = {"Content-Type", 12, "text/plain", 10};
  if (path_is(req, "/healthz")) {
    http_respond(ex, 200, &text, 1, "ok\n", 3);
  } else if (path_is(req, "/readyz")) {
    bool ok = !atomic_load(&g->draining) && any_usable(g);
    if (ok) http_respond(ex, 200, &text, 1, "ready\n", 6);
    else http_respond(ex, 503, &text, 1, "not ready\n", 10);
  } else if (path_is(req, "/metrics")) {
    char *out = NULL;
    size_t len = 0;
    if (metrics_render(g->reg, &out, &len)) {
      gw_respond_error(ex, 500, NULL, "out of memory");
      return;
    }
    http_header h = {"Content-Type", 12, "text/plain; version=0.0.4", 25};
    http_respond_owned(ex, 200, &h, 1, out, len, free);
  } else if (path_is(req, "/status") || path_is(req, "/") || path_is(req, "/status.json")) {
    bool json = path_is(req, "/status.json");
    cbuf b = {0};
    status_render(g, &b, json);
    if (b.oom) {
      free(b.data);
      gw_respond_error(ex, 500, NULL, "out of memory");
      return;
    }
    http_header h = json ? (http_header){"Content-Type", 12, "application/json", 16}
                         : (http_header){"Content-Type", 12, "text/html; charset=utf-8", 24};
    http_respond_owned(ex, 200, &h, 1, b.data, b.len, free);
  } else if (req->path_len >= 6 && !memcmp(req->path, "/admin", 6)) {
    admin(g, ex, req);
  } else {
    gw_respond_error(ex, 404, NULL, "not found: the gateway proxies /v1/* and /v2/*");
  }
}

/* ---- lifecycle ----------------------------------------------------------------------- */

static void free_replicas(gateway *g) {
  for (size_t i = 0; i < g->n_reps; i++) {
    gw_replica *r = g->reps[i];
    for (size_t k = 0; k < r->n_models; k++) free(r->models[k]);
    free(r->models);
    gw_kv_free(r->kv, r->n_kv);
    free(r->kv);
    free(r->idle);
    free(r->n_idle);
    free(r);
  }
  free(g->reps);
  g->reps = NULL;
  g->n_reps = 0;
}

cinfer_status *gateway_create(gw_config *cfg, gateway **out) {
  *out = NULL;
  gateway *g = calloc(1, sizeof *g);
  if (!g) return cinfer_status_oom("gateway");
  g->cfg = *cfg;
  memset(cfg, 0, sizeof *cfg);
  /* kv_aware scores prompt prefixes: on by default with it (affinity.prefix_bytes) */
  if (g->cfg.balancer == GW_BAL_KV_AWARE && !g->cfg.prefix_bytes) g->cfg.prefix_bytes = 256;
  pthread_mutex_init(&g->mu, NULL);
  pthread_mutex_init(&g->rate_mu, NULL);
  pthread_mutex_init(&g->tok_mu, NULL);
  pthread_mutex_init(&g->keys_mu, NULL);
  g->start_ms = clock_now_ms();
  g->n_loops = g->cfg.io_threads < 1 ? 1 : g->cfg.io_threads > GW_MAX_LOOPS ? GW_MAX_LOOPS : g->cfg.io_threads;
  cinfer_status *st = NULL;
  g->reg = metrics_registry_create();
  if (!g->reg) {
    st = cinfer_status_oom("gateway");
    goto fail;
  }
  const double *lb = metrics_latency_buckets;
  size_t nlb = metrics_latency_buckets_n;
  g->f_requests = metrics_family(g->reg, "cinfer_gateway_requests_total",
                                 "Requests answered by the gateway, by upstream, model, canary variant and HTTP code",
                                 METRIC_COUNTER, NULL, 0);
  g->f_duration = metrics_family(g->reg, "cinfer_gateway_request_duration_seconds",
                                 "Time from request to answer at the gateway", METRIC_HISTOGRAM, lb, nlb);
  g->f_healthy = metrics_family(g->reg, "cinfer_gateway_upstream_healthy",
                                "1 when the upstream receives new requests (healthy, ready, not ejected)",
                                METRIC_GAUGE, NULL, 0);
  g->f_ejections = metrics_family(g->reg, "cinfer_gateway_ejections_total",
                                  "Passive outlier ejections of the upstream", METRIC_COUNTER, NULL, 0);
  g->f_retries = metrics_family(g->reg, "cinfer_gateway_retries_total",
                                "Requests retried on another replica after this upstream failed",
                                METRIC_COUNTER, NULL, 0);
  g->f_refusals = metrics_family(g->reg, "cinfer_gateway_upstream_refusals_total",
                                 "503 answers with Retry-After, and gRPC UNAVAILABLE with grpc-retry-pushback-ms, from "
                                 "the upstream (admission refusals: no work done, not counted as failures)",
                                 METRIC_COUNTER, NULL, 0);
  g->f_rate = metrics_family(g->reg, "cinfer_gateway_rate_limited_total",
                             "Requests answered 429 by the rate limit", METRIC_COUNTER, NULL, 0);
  g->f_tokens = metrics_family(g->reg, "cinfer_gateway_tokens_total",
                               "LLM tokens (prompt + completion, from the answers' usage) charged to a key's budget",
                               METRIC_COUNTER, NULL, 0);
  g->f_token_limited = metrics_family(g->reg, "cinfer_gateway_token_limited_total",
                                      "Requests answered 429 because the key's token budget (tpm) is spent",
                                      METRIC_COUNTER, NULL, 0);
  g->f_shed = metrics_family(g->reg, "cinfer_gateway_shed_total",
                             "Requests answered 503 by the concurrency limit", METRIC_COUNTER, NULL, 0);
  g->f_active = metrics_family(g->reg, "cinfer_gateway_active_requests",
                               "Admitted requests in flight", METRIC_GAUGE, NULL, 0);
  g->m_active = gw_series(g->f_active, NULL);
  const char *none[] = {"model", "", NULL};
  metric_inc(gw_series(g->f_rate, none), 0);
  metric_inc(gw_series(g->f_shed, none), 0);

  if (g->cfg.keys_file && (st = gw_keys_refresh(g, true))) goto fail;
  if (g->cfg.rate > 0 || g->cfg.keys_file) {  /* keys may carry their own rate */
    size_t slots = 16;
    while (slots < (size_t)g->cfg.rate_max_keys * 2) slots *= 2;
    g->rate = calloc(slots, sizeof *g->rate);
    if (!g->rate) {
      st = cinfer_status_new(CINFER_INTERNAL, "gateway: out of memory for %zu rate-limit buckets", slots);
      goto fail;
    }
    g->rate_slots = slots;
  }
  if (g->cfg.n_canaries) {
    g->canaries = calloc(g->cfg.n_canaries, sizeof *g->canaries);
    if (!g->canaries) {
      st = cinfer_status_oom("gateway");
      goto fail;
    }
    g->n_canaries = g->cfg.n_canaries;
    for (size_t i = 0; i < g->n_canaries; i++) g->canaries[i].cfg = &g->cfg.canaries[i];
  }
  if (g->cfg.tls_cert) {
    net_tls_opts to = {.server = true, .cert_file = g->cfg.tls_cert, .key_file = g->cfg.tls_key,
                       .ca_file = g->cfg.tls_client_ca};
    if ((st = net_tls_create(&to, &g->tls_srv))) goto fail;
  }
  if (g->cfg.upstream_tls) {
    net_tls_opts to = {.cert_file = g->cfg.up_cert, .key_file = g->cfg.up_key, .ca_file = g->cfg.up_ca};
    if ((st = net_tls_create(&to, &g->tls_up))) goto fail;
  }
  /* replicas need n_loops for their pools */
  if ((st = gw_static_resolve(g))) goto fail;

  http_server_opts so = {.host = g->cfg.host, .port = (uint16_t)g->cfg.port,
                         .io_threads = g->n_loops, .max_body_bytes = g->cfg.max_body_bytes,
                         .tls = g->tls_srv};
  if ((st = http_server_create(&so, handler, g, &g->srv))) goto fail;
  for (int i = 0; i < g->n_loops; i++) {
    g->loops[i].loop = http_server_loop(g->srv, i);
    uint64_t seed = g->cfg.seed ? (uint64_t)g->cfg.seed : clock_now_ms() ^ (uint64_t)(uintptr_t)g;
    g->loops[i].rng = (seed * 0x9E3779B97F4A7C15ULL + (uint64_t)i * 0xBF58476D1CE4E5B9ULL) | 1;
    g->loops[i].mcache = calloc(GW_MCACHE_SLOTS, sizeof *g->loops[i].mcache);  /* NULL: uncached */
    if (!(g->loops[i].scratch = gw_scratch_new())) {
      st = cinfer_status_oom("gateway: candidate arrays");
      goto fail;
    }
  }
  atomic_store_explicit(&g->started, true, memory_order_release);
  if ((st = gw_control_start(g))) goto fail;
  if (g->cfg.grpc_port >= 0 && (st = gw_grpc_start(g))) goto fail;
  *out = g;
  return NULL;
fail:
  gateway_destroy(g);
  return st;
}

uint16_t gateway_port(const gateway *g) { return http_server_port(g->srv); }

typedef struct pool_job {
  gateway *g;
  int loop;
  pthread_mutex_t *mu;
  pthread_cond_t *cv;
  int *left;
} pool_job;

static void pool_job_run(void *arg) {
  pool_job *j = arg;
  gw_pools_free_on_loop(j->g, j->loop);
  pthread_mutex_lock(j->mu);
  (*j->left)--;
  pthread_cond_signal(j->cv);
  pthread_mutex_unlock(j->mu);
}

int gateway_drain(gateway *g) {
  atomic_store(&g->draining, true);
  LOG_I("gateway: draining (up to %d ms)", g->cfg.drain_timeout_ms);
  uint64_t deadline = clock_now_ms() + (uint64_t)g->cfg.drain_timeout_ms;
  gw_grpc_drain(g); /* GOAWAY; calls in flight go on */
  int forced = http_server_shutdown(g->srv, g->cfg.drain_timeout_ms);
  return forced + gw_grpc_drain_wait(g, deadline); /* the same timeout for both */
}

void gateway_destroy(gateway *g) {
  if (!g) return;
  atomic_store(&g->draining, true);
  if (g->srv) {
    http_server_shutdown(g->srv, 0);
    /* idle upstream connections live on the I/O loops: free them there */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    pool_job jobs[GW_MAX_LOOPS];
    int left = 0;
    for (int i = 0; i < g->n_loops; i++) {
      jobs[i] = (pool_job){g, i, &mu, &cv, &left};
      pthread_mutex_lock(&mu);
      left++;
      pthread_mutex_unlock(&mu);
      if (!loop_post(g->loops[i].loop, pool_job_run, &jobs[i])) {
        pthread_mutex_lock(&mu);
        left--;
        pthread_mutex_unlock(&mu);
      }
    }
    pthread_mutex_lock(&mu);
    while (left > 0) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    http_server_destroy(g->srv);
    g->srv = NULL;
  }
  gw_grpc_stop(g);
  gw_control_stop(g);
  free_replicas(g);
  for (int i = 0; i < GW_MAX_LOOPS; i++) {
    free(g->loops[i].mcache);
    gw_scratch_free(g->loops[i].scratch);
  }
  free(g->canaries);
  free(g->rate);
  metrics_registry_destroy(g->reg);
  gw_config_free(&g->cfg);
  pthread_mutex_destroy(&g->mu);
  pthread_mutex_destroy(&g->rate_mu);
  pthread_mutex_destroy(&g->tok_mu);
  free(g->tok);
  gw_keyset_unref(g->keys);
  net_tls_destroy(g->tls_srv);
  net_tls_destroy(g->tls_up);
  pthread_mutex_destroy(&g->keys_mu);
  free(g);
}
