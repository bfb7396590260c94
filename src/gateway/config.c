/* config.c: gateway configuration: defaults, the JSON file format (docs/gateway.md) and the
 * final validation. Every error names the key path ("health.interval_ms") and the origin
 * (file name); unknown keys are errors so a typo never silently falls back to a default.
 * Ownership: every string in gw_config is heap-owned; gw_config_free releases all of it.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "gateway/gateway.h"
#include "net/tls.h"

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }

void gw_config_defaults(gw_config *c) {
  memset(c, 0, sizeof *c);
  c->host = dupstr("0.0.0.0");
  c->port = 8080;
  c->grpc_port = -1;
  c->io_threads = 2;
  c->drain_timeout_ms = 30000;
  c->dns_interval_ms = 5000;
  c->file_interval_ms = 1000;
  c->models_interval_ms = 5000;
  c->balancer = GW_BAL_P2C;
  c->health_path = dupstr("/v2/health/ready");
  c->health_interval_ms = 2000;
  c->health_timeout_ms = 1000;
  c->unhealthy_threshold = 2;
  c->healthy_threshold = 2;
  c->eject_consecutive = 5;
  c->eject_base_ms = 10000;
  c->eject_max_ms = 300000;
  c->eject_max_percent = 50;
  c->retries = 1;
  c->retry_budget_ratio = 0.2;
  c->retry_budget_min = 10;
  c->connect_timeout_ms = 1000;
  c->try_timeout_ms = 30000;
  c->request_timeout_ms = 60000;
  c->max_idle_per_pool = 64;
  c->max_body_bytes = 64u << 20;
  c->rate_key_header = dupstr("X-API-Key");
  c->rate_max_keys = 10000;
  c->priority_header = dupstr("X-Priority");
  c->variant_header = dupstr("X-Cinfer-Variant");
  c->session_header = dupstr("X-Session-Id");
  c->affinity_load_factor = 1.25;
  c->kv_weight = 4.0;
  c->prefix_bonus = 2.0;
  c->keys_interval_ms = 1000;
  c->public_groups[API_HEALTH] = c->public_groups[API_METADATA] = c->public_groups[API_INFERENCE] = true;
}

static void free_canary(gw_canary *k) {
  free(k->model);
  for (size_t j = 0; j < k->n_variants; j++) {
    free(k->variants[j].name);
    free(k->variants[j].group);
  }
  free(k->variants);
}

void gw_config_free(gw_config *c) {
  if (!c) return;
  free(c->host);
  for (size_t i = 0; i < c->n_statics; i++) {
    free(c->statics[i].address);
    free(c->statics[i].group);
  }
  free(c->statics);
  for (size_t i = 0; i < c->n_dns; i++) {
    free(c->dns[i].name);
    free(c->dns[i].group);
  }
  free(c->dns);
  free(c->upstreams_file);
  free(c->health_path);
  free(c->rate_key_header);
  free(c->priority_header);
  for (size_t i = 0; i < c->n_classes; i++) free(c->classes[i].name);
  free(c->classes);
  for (size_t i = 0; i < c->n_canaries; i++) free_canary(&c->canaries[i]);
  free(c->canaries);
  free(c->variant_header);
  free(c->session_header);
  free(c->admin_token);
  free(c->keys_file);
  free(c->tls_cert);
  free(c->tls_key);
  free(c->tls_client_ca);
  free(c->up_ca);
  free(c->up_cert);
  free(c->up_key);
  free(c->up_server_name);
  free(c->trusted_proxies);
  memset(c, 0, sizeof *c);
}

bool gw_parse_hostport(const char *s, char *host, size_t cap, uint16_t *port) {
  const char *colon;
  size_t hl;
  if (s[0] == '[') {
    const char *rb = strchr(s, ']');
    if (!rb || rb[1] != ':') return false;
    hl = (size_t)(rb - s - 1);
    if (hl == 0 || hl >= cap) return false;
    memcpy(host, s + 1, hl);
    colon = rb + 1;
  } else {
    colon = strrchr(s, ':');
    if (!colon || colon == s) return false;
    hl = (size_t)(colon - s);
    if (hl >= cap || memchr(s, ':', hl)) return false;
    memcpy(host, s, hl);
  }
  host[hl] = 0;
  for (size_t i = 0; i < hl; i++)
    if ((unsigned char)host[i] <= ' ') return false;
  char *end;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || !colon[1] || *end || p < 1 || p > 65535) return false;
  *port = (uint16_t)p;
  return true;
}

/* ---- JSON walking -------------------------------------------------------------------- */

typedef struct jctx {
  const char *origin;
  char path[256];
} jctx;

static cinfer_status *jfail(const jctx *ctx, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cinfer_status *jfail(const jctx *ctx, const char *key, const char *fmt, ...) {
  char msg[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return cinfer_status_new(CINFER_INVALID_ARG, "%s: %s%s%s: %s", ctx->origin, ctx->path,
                           ctx->path[0] && key[0] ? "." : "", key, msg);
}
#define FAIL(ctx, key, ...) jfail((ctx), (key), __VA_ARGS__)

static cinfer_status *check_keys(jctx *ctx, const cJSON *obj, const char *const *allowed) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    bool ok = false;
    for (size_t i = 0; allowed[i]; i++)
      if (it->string && !strcmp(it->string, allowed[i])) ok = true;
    if (!ok) return FAIL(ctx, it->string ? it->string : "?", "unknown key");
  }
  return NULL;
}

static cinfer_status *get_int(jctx *ctx, const cJSON *obj, const char *key, long long lo,
                              long long hi, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return NULL;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
      v->valuedouble > (double)hi)
    return FAIL(ctx, key, "must be an integer in [%lld, %lld]", lo, hi);
  *out = (int)v->valuedouble;
  return NULL;
}

static cinfer_status *get_double(jctx *ctx, const cJSON *obj, const char *key, double lo,
                                 double hi, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return NULL;
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
    return FAIL(ctx, key, "must be a number in [%g, %g]", lo, hi);
  *out = v->valuedouble;
  return NULL;
}

static cinfer_status *get_bool(jctx *ctx, const cJSON *obj, const char *key, bool *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return NULL;
  if (!cJSON_IsBool(v)) return FAIL(ctx, key, "must be true or false");
  *out = cJSON_IsTrue(v);
  return NULL;
}

static cinfer_status *get_str(jctx *ctx, const cJSON *obj, const char *key, char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return NULL;
  if (!cJSON_IsString(v) || !v->valuestring[0]) return FAIL(ctx, key, "must be a non-empty string");
  char *s = strdup(v->valuestring);
  if (!s) return FAIL(ctx, key, "out of memory");
  free(*out);
  *out = s;
  return NULL;
}

static const cJSON *get_obj(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static void push_path(jctx *ctx, const char *key, size_t *saved) {
  *saved = strlen(ctx->path);
  snprintf(ctx->path + *saved, sizeof ctx->path - *saved, "%s%s", *saved ? "." : "", key);
}
static void push_index(jctx *ctx, size_t i, size_t *saved) {
  *saved = strlen(ctx->path);
  snprintf(ctx->path + *saved, sizeof ctx->path - *saved, "[%zu]", i);
}
static void pop_path(jctx *ctx, size_t saved) { ctx->path[saved] = 0; }

#define TRY(x) do { cinfer_status *st_ = (x); if (st_) return st_; } while (0)

static cinfer_status *parse_listen(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"host", "port", "grpc_port", "io_threads",
                                     "drain_timeout_ms", "max_body_mb", NULL};
  TRY(check_keys(ctx, o, keys));
  int mb = 0;
  TRY(get_int(ctx, o, "max_body_mb", 1, 65536, &mb));
  if (mb) c->max_body_bytes = (size_t)mb << 20;
  TRY(get_str(ctx, o, "host", &c->host));
  TRY(get_int(ctx, o, "port", 0, 65535, &c->port));
  TRY(get_int(ctx, o, "grpc_port", -1, 65535, &c->grpc_port));
  TRY(get_int(ctx, o, "io_threads", 1, 64, &c->io_threads));
  TRY(get_int(ctx, o, "drain_timeout_ms", 0, 3600000, &c->drain_timeout_ms));
  return NULL;
}

static cinfer_status *parse_upstreams(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"static", "dns", "dns_interval_ms", "file",
                                     "file_interval_ms", "models_interval_ms", "grpc_port", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_int(ctx, o, "dns_interval_ms", 100, 86400000, &c->dns_interval_ms));
  TRY(get_int(ctx, o, "file_interval_ms", 100, 86400000, &c->file_interval_ms));
  TRY(get_int(ctx, o, "models_interval_ms", 100, 86400000, &c->models_interval_ms));
  TRY(get_str(ctx, o, "file", &c->upstreams_file));
  TRY(get_int(ctx, o, "grpc_port", 0, 65535, &c->upstream_grpc_port));
  const cJSON *st = get_obj(o, "static");
  if (st) {
    if (!cJSON_IsArray(st)) return FAIL(ctx, "static", "must be an array");
    size_t n = (size_t)cJSON_GetArraySize(st);
    if (n > 4096) return FAIL(ctx, "static", "more than 4096 upstreams");
    gw_static_upstream *a = calloc(n ? n : 1, sizeof *a);
    if (!a) return FAIL(ctx, "static", "out of memory");
    size_t i = 0;
    cinfer_status *err = NULL;
    size_t saved, saved2;
    push_path(ctx, "static", &saved);
    for (const cJSON *e = st->child; e && !err; e = e->next, i++) {
      a[i].weight = 1;
      push_index(ctx, i, &saved2);
      char host[256];
      uint16_t port;
      if (cJSON_IsString(e)) {
        if (!gw_parse_hostport(e->valuestring, host, sizeof host, &port))
          err = FAIL(ctx, "address", "'%s' is not host:port", e->valuestring);
        else a[i].address = strdup(e->valuestring);
      } else if (cJSON_IsObject(e)) {
        static const char *const ukeys[] = {"address", "group", "weight", "grpc_port", NULL};
        err = check_keys(ctx, e, ukeys);
        if (!err) err = get_str(ctx, e, "address", &a[i].address);
        if (!err) err = get_str(ctx, e, "group", &a[i].group);
        if (!err) err = get_int(ctx, e, "weight", 1, 1000000, &a[i].weight);
        if (!err) err = get_int(ctx, e, "grpc_port", 1, 65535, &a[i].grpc_port);
        if (!err && !a[i].address) err = FAIL(ctx, "address", "missing");
        if (!err && !gw_parse_hostport(a[i].address, host, sizeof host, &port))
          err = FAIL(ctx, "address", "'%s' is not host:port", a[i].address);
      } else {
        err = FAIL(ctx, "", "must be \"host:port\" or an object");
      }
      pop_path(ctx, saved2);
    }
    pop_path(ctx, saved);
    for (size_t k = 0; k < c->n_statics; k++) {
      free(c->statics[k].address);
      free(c->statics[k].group);
    }
    free(c->statics);
    c->statics = a;
    c->n_statics = n;
    if (err) return err;
  }
  const cJSON *dns = get_obj(o, "dns");
  if (dns) {
    if (!cJSON_IsArray(dns)) return FAIL(ctx, "dns", "must be an array");
    size_t n = (size_t)cJSON_GetArraySize(dns);
    if (n > 256) return FAIL(ctx, "dns", "more than 256 names");
    gw_dns_upstream *a = calloc(n ? n : 1, sizeof *a);
    if (!a) return FAIL(ctx, "dns", "out of memory");
    size_t i = 0, saved, saved2;
    cinfer_status *err = NULL;
    push_path(ctx, "dns", &saved);
    for (const cJSON *e = dns->child; e && !err; e = e->next, i++) {
      a[i].weight = 1;
      push_index(ctx, i, &saved2);
      if (cJSON_IsString(e)) {
        char host[256];
        uint16_t port;
        if (!gw_parse_hostport(e->valuestring, host, sizeof host, &port))
          err = FAIL(ctx, "name", "'%s' is not name:port", e->valuestring);
        else {
          a[i].name = strdup(host);
          a[i].port = port;
        }
      } else if (cJSON_IsObject(e)) {
        static const char *const dkeys[] = {"name", "port", "group", "weight", NULL};
        int port = 0;
        err = check_keys(ctx, e, dkeys);
        if (!err) err = get_str(ctx, e, "name", &a[i].name);
        if (!err) err = get_int(ctx, e, "port", 1, 65535, &port);
        if (!err) err = get_str(ctx, e, "group", &a[i].group);
        if (!err) err = get_int(ctx, e, "weight", 1, 1000000, &a[i].weight);
        if (!err && !a[i].name) err = FAIL(ctx, "name", "missing");
        if (!err && !port) err = FAIL(ctx, "port", "missing");
        a[i].port = (uint16_t)port;
      } else {
        err = FAIL(ctx, "", "must be \"name:port\" or an object");
      }
      pop_path(ctx, saved2);
    }
    pop_path(ctx, saved);
    for (size_t k = 0; k < c->n_dns; k++) {
      free(c->dns[k].name);
      free(c->dns[k].group);
    }
    free(c->dns);
    c->dns = a;
    c->n_dns = n;
    if (err) return err;
  }
  return NULL;
}

static cinfer_status *parse_balancer(jctx *ctx, gw_config *c, const cJSON *v) {
  if (!cJSON_IsString(v)) return FAIL(ctx, "balancer", "must be a string");
  if (!strcmp(v->valuestring, "p2c") || !strcmp(v->valuestring, "least_outstanding"))
    c->balancer = GW_BAL_P2C;
  else if (!strcmp(v->valuestring, "round_robin")) c->balancer = GW_BAL_ROUND_ROBIN;
  else if (!strcmp(v->valuestring, "weighted")) c->balancer = GW_BAL_WEIGHTED;
  else if (!strcmp(v->valuestring, "kv_aware")) c->balancer = GW_BAL_KV_AWARE;
  else return FAIL(ctx, "balancer", "'%s' is not p2c, round_robin, weighted or kv_aware", v->valuestring);
  return NULL;
}

static cinfer_status *parse_health(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"path", "interval_ms", "timeout_ms", "unhealthy_threshold",
                                     "healthy_threshold", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_str(ctx, o, "path", &c->health_path));
  if (c->health_path[0] != '/') return FAIL(ctx, "path", "must start with '/'");
  for (const char *p = c->health_path; *p; p++)
    if ((unsigned char)*p <= ' ' || *p == 0x7f) return FAIL(ctx, "path", "contains a space or control character");
  TRY(get_int(ctx, o, "interval_ms", 10, 3600000, &c->health_interval_ms));
  TRY(get_int(ctx, o, "timeout_ms", 10, 3600000, &c->health_timeout_ms));
  TRY(get_int(ctx, o, "unhealthy_threshold", 1, 1000, &c->unhealthy_threshold));
  TRY(get_int(ctx, o, "healthy_threshold", 1, 1000, &c->healthy_threshold));
  return NULL;
}

static cinfer_status *parse_outlier(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"consecutive_failures", "base_ejection_ms",
                                     "max_ejection_ms", "max_ejected_percent", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_int(ctx, o, "consecutive_failures", 0, 100000, &c->eject_consecutive));
  TRY(get_int(ctx, o, "base_ejection_ms", 1, 86400000, &c->eject_base_ms));
  TRY(get_int(ctx, o, "max_ejection_ms", 1, 86400000, &c->eject_max_ms));
  TRY(get_int(ctx, o, "max_ejected_percent", 0, 100, &c->eject_max_percent));
  return NULL;
}

static cinfer_status *parse_retry(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"retries", "budget_ratio", "budget_min", "connect_timeout_ms",
                                     "try_timeout_ms", "request_timeout_ms", "max_idle_per_pool",
                                     NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_int(ctx, o, "retries", 0, 1, &c->retries));
  TRY(get_double(ctx, o, "budget_ratio", 0, 1, &c->retry_budget_ratio));
  TRY(get_int(ctx, o, "budget_min", 0, 1000000, &c->retry_budget_min));
  TRY(get_int(ctx, o, "connect_timeout_ms", 1, 600000, &c->connect_timeout_ms));
  TRY(get_int(ctx, o, "try_timeout_ms", 1, 86400000, &c->try_timeout_ms));
  TRY(get_int(ctx, o, "request_timeout_ms", 1, 86400000, &c->request_timeout_ms));
  TRY(get_int(ctx, o, "max_idle_per_pool", 0, 100000, &c->max_idle_per_pool));
  return NULL;
}

static cinfer_status *parse_rate(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"rate", "burst", "nodelay", "key_header", "max_keys", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_double(ctx, o, "rate", 0.001, 1e9, &c->rate));
  TRY(get_double(ctx, o, "burst", 0, 1e9, &c->burst));
  TRY(get_bool(ctx, o, "nodelay", &c->nodelay));
  TRY(get_str(ctx, o, "key_header", &c->rate_key_header));
  TRY(get_int(ctx, o, "max_keys", 1, 10000000, &c->rate_max_keys));
  if (!cJSON_GetObjectItemCaseSensitive(o, "rate")) return FAIL(ctx, "rate", "missing");
  return NULL;
}

bool gw_config_add_trusted_proxy(gw_config *c, const char *cidr) {
  gw_cidr x;
  if (!gw_cidr_parse(cidr, &x)) return false;
  gw_cidr *n = realloc(c->trusted_proxies, (c->n_trusted_proxies + 1) * sizeof *n);
  if (!n) return false;
  c->trusted_proxies = n;
  n[c->n_trusted_proxies++] = x;
  return true;
}

static cinfer_status *parse_auth(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"keys_file", "reload_interval_ms", "trusted_proxies",
                                     "public_groups", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_str(ctx, o, "keys_file", &c->keys_file));
  TRY(get_int(ctx, o, "reload_interval_ms", 10, 3600000, &c->keys_interval_ms));
  const cJSON *tp = cJSON_GetObjectItemCaseSensitive(o, "trusted_proxies");
  if (tp) {
    if (!cJSON_IsArray(tp)) return FAIL(ctx, "trusted_proxies", "must be an array of CIDR strings");
    c->n_trusted_proxies = 0;
    size_t i = 0;
    for (const cJSON *it = tp->child; it; it = it->next, i++) {
      if (!cJSON_IsString(it) || !gw_config_add_trusted_proxy(c, it->valuestring)) {
        char k[48];
        snprintf(k, sizeof k, "trusted_proxies[%zu]", i);
        return FAIL(ctx, k, "must be an address or CIDR, e.g. \"10.0.0.0/8\" or \"::1\"");
      }
    }
  }
  const cJSON *pg = cJSON_GetObjectItemCaseSensitive(o, "public_groups");
  if (pg) {
    if (!cJSON_IsArray(pg)) return FAIL(ctx, "public_groups", "must be an array of API group names");
    bool set[API_GROUP_COUNT] = {0};
    size_t i = 0;
    for (const cJSON *it = pg->child; it; it = it->next, i++) {
      api_group g;
      if (!cJSON_IsString(it) || !api_group_parse(it->valuestring, strlen(it->valuestring), &g)) {
        char k[48];
        snprintf(k, sizeof k, "public_groups[%zu]", i);
        return FAIL(ctx, k, "not an API group (health, metadata, inference, shared-memory, "
                            "model-config, model-repository, statistics, trace, logging)");
      }
      set[g] = true;
    }
    memcpy(c->public_groups, set, sizeof set);
  }
  return NULL;
}

static cinfer_status *parse_tls(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"cert_file", "key_file", "client_ca_file", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_str(ctx, o, "cert_file", &c->tls_cert));
  TRY(get_str(ctx, o, "key_file", &c->tls_key));
  TRY(get_str(ctx, o, "client_ca_file", &c->tls_client_ca));
  return NULL;
}

static cinfer_status *parse_upstream_tls(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"enabled", "ca_file", "cert_file", "key_file",
                                     "server_name", NULL};
  TRY(check_keys(ctx, o, keys));
  c->upstream_tls = true;
  TRY(get_bool(ctx, o, "enabled", &c->upstream_tls));
  TRY(get_str(ctx, o, "ca_file", &c->up_ca));
  TRY(get_str(ctx, o, "cert_file", &c->up_cert));
  TRY(get_str(ctx, o, "key_file", &c->up_key));
  TRY(get_str(ctx, o, "server_name", &c->up_server_name));
  return NULL;
}

static cinfer_status *parse_concurrency(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"max", "priority_header", "classes", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_int(ctx, o, "max", 0, 100000000, &c->max_concurrency));
  TRY(get_str(ctx, o, "priority_header", &c->priority_header));
  const cJSON *cl = get_obj(o, "classes");
  if (!cl) return NULL;
  if (!cJSON_IsArray(cl)) return FAIL(ctx, "classes", "must be an array");
  size_t n = (size_t)cJSON_GetArraySize(cl);
  if (n > 64) return FAIL(ctx, "classes", "more than 64 classes");
  gw_priority_class *a = calloc(n ? n : 1, sizeof *a);
  if (!a) return FAIL(ctx, "classes", "out of memory");
  for (size_t k = 0; k < c->n_classes; k++) free(c->classes[k].name);
  free(c->classes);
  c->classes = a;
  c->n_classes = n;
  size_t i = 0, saved, saved2;
  push_path(ctx, "classes", &saved);
  cinfer_status *err = NULL;
  for (const cJSON *e = cl->child; e && !err; e = e->next, i++) {
    push_index(ctx, i, &saved2);
    static const char *const ckeys[] = {"name", "share", NULL};
    if (!cJSON_IsObject(e)) err = FAIL(ctx, "", "must be an object");
    if (!err) err = check_keys(ctx, e, ckeys);
    a[i].share = 1.0;
    if (!err) err = get_str(ctx, e, "name", &a[i].name);
    if (!err) err = get_double(ctx, e, "share", 0.001, 1.0, &a[i].share);
    if (!err && !a[i].name) err = FAIL(ctx, "name", "missing");
    pop_path(ctx, saved2);
  }
  pop_path(ctx, saved);
  return err;
}

static cinfer_status *parse_affinity(jctx *ctx, gw_config *c, const cJSON *o) {
  static const char *const keys[] = {"session_header", "prefix_bytes", "load_factor",
                                     "kv_weight", "prefix_bonus", NULL};
  TRY(check_keys(ctx, o, keys));
  TRY(get_str(ctx, o, "session_header", &c->session_header));
  TRY(get_int(ctx, o, "prefix_bytes", 0, 1 << 20, &c->prefix_bytes));
  TRY(get_double(ctx, o, "load_factor", 1.0, 100.0, &c->affinity_load_factor));
  TRY(get_double(ctx, o, "kv_weight", 0.0, 1e6, &c->kv_weight));
  TRY(get_double(ctx, o, "prefix_bonus", 0.0, 1e6, &c->prefix_bonus));
  return NULL;
}

static cinfer_status *parse_canary(jctx *ctx, gw_config *c, const cJSON *o) {
  size_t n = (size_t)cJSON_GetArraySize(o);
  if (n > 1024) return FAIL(ctx, "", "more than 1024 models");
  gw_canary *a = calloc(n ? n : 1, sizeof *a);
  if (!a) return FAIL(ctx, "", "out of memory");
  for (size_t k = 0; k < c->n_canaries; k++) free_canary(&c->canaries[k]);
  free(c->canaries);
  c->canaries = a;
  c->n_canaries = n;
  size_t i = 0;
  for (const cJSON *m = o->child; m; m = m->next, i++) {
    size_t saved;
    push_path(ctx, m->string, &saved);
    a[i].model = strdup(m->string);
    const cJSON *vs = cJSON_IsObject(m) ? get_obj(m, "variants") : NULL;
    if (cJSON_IsObject(m)) {
      static const char *const mkeys[] = {"variants", "rollback", NULL};
      TRY(check_keys(ctx, m, mkeys));
      const cJSON *rb = get_obj(m, "rollback");
      if (rb) {
        size_t s_rb;
        push_path(ctx, "rollback", &s_rb);
        static const char *const rkeys[] = {"max_error_rate", "min_requests", NULL};
        if (!cJSON_IsObject(rb)) return FAIL(ctx, "", "must be an object");
        TRY(check_keys(ctx, rb, rkeys));
        a[i].min_requests = 100;
        TRY(get_double(ctx, rb, "max_error_rate", 0.0, 1.0, &a[i].max_error_rate));
        TRY(get_int(ctx, rb, "min_requests", 1, 100000000, &a[i].min_requests));
        pop_path(ctx, s_rb);
      }
    }
    if (!vs || !cJSON_IsArray(vs) || cJSON_GetArraySize(vs) < 1 || cJSON_GetArraySize(vs) > 16)
      return FAIL(ctx, "variants", "must be an array of 1 to 16 variants");
    size_t nv = (size_t)cJSON_GetArraySize(vs);
    a[i].variants = calloc(nv, sizeof *a[i].variants);
    if (!a[i].model || !a[i].variants) return FAIL(ctx, "variants", "out of memory");
    a[i].n_variants = nv;
    size_t j = 0, s2, s3;
    push_path(ctx, "variants", &s2);
    long long total = 0;
    for (const cJSON *v = vs->child; v; v = v->next, j++) {
      push_index(ctx, j, &s3);
      static const char *const vkeys[] = {"name", "group", "version", "weight", NULL};
      if (!cJSON_IsObject(v)) return FAIL(ctx, "", "must be an object");
      TRY(check_keys(ctx, v, vkeys));
      gw_variant *var = &a[i].variants[j];
      TRY(get_str(ctx, v, "name", &var->name));
      TRY(get_str(ctx, v, "group", &var->group));
      int ver = 0;
      TRY(get_int(ctx, v, "version", 1, 2147483647, &ver));
      var->version = ver;
      var->weight = -1;
      TRY(get_int(ctx, v, "weight", 0, 1000000, &var->weight));
      if (!var->name) return FAIL(ctx, "name", "missing");
      if (var->weight < 0) return FAIL(ctx, "weight", "missing");
      for (size_t q = 0; q < j; q++)
        if (!strcmp(a[i].variants[q].name, var->name)) return FAIL(ctx, "name", "duplicate variant '%s'", var->name);
      total += var->weight;
      pop_path(ctx, s3);
    }
    if (total <= 0) return FAIL(ctx, "", "the weights sum to 0");
    pop_path(ctx, s2);
    pop_path(ctx, saved);
  }
  return NULL;
}

cinfer_status *gw_config_apply_json(gw_config *c, const char *text, size_t len,
                                    const char *origin) {
  jctx ctx = {.origin = origin ? origin : "config"};
  const char *endp = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &endp, false);
  if (!root) {
    size_t off = endp && endp >= text ? (size_t)(endp - text) : 0;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < len; i++) {
      if (text[i] == '\n') { line++; col = 1; } else col++;
    }
    return cinfer_status_new(CINFER_INVALID_ARG, "%s:%zu:%zu: invalid JSON", ctx.origin, line, col);
  }
  cinfer_status *err = NULL;
  if (!cJSON_IsObject(root)) {
    err = cinfer_status_new(CINFER_INVALID_ARG, "%s: the top level must be a JSON object", ctx.origin);
    goto out;
  }
  static const char *const keys[] = {"listen", "upstreams", "balancer", "seed", "health",
                                     "outlier", "retry", "rate_limit", "concurrency", "canary",
                                     "variant_header", "admin_token", "affinity", "auth", "tls",
                                     "upstream_tls", NULL};
  if ((err = check_keys(&ctx, root, keys))) goto out;
  struct { const char *key; cinfer_status *(*fn)(jctx *, gw_config *, const cJSON *); } sect[] = {
      {"listen", parse_listen}, {"upstreams", parse_upstreams}, {"health", parse_health},
      {"outlier", parse_outlier}, {"retry", parse_retry}, {"rate_limit", parse_rate},
      {"concurrency", parse_concurrency}, {"canary", parse_canary}, {"affinity", parse_affinity},
      {"auth", parse_auth}, {"tls", parse_tls}, {"upstream_tls", parse_upstream_tls}};
  for (size_t i = 0; i < sizeof sect / sizeof sect[0] && !err; i++) {
    const cJSON *o = get_obj(root, sect[i].key);
    if (!o) continue;
    if (!cJSON_IsObject(o)) {
      err = FAIL(&ctx, sect[i].key, "must be an object");
      break;
    }
    size_t saved;
    push_path(&ctx, sect[i].key, &saved);
    err = sect[i].fn(&ctx, c, o);
    pop_path(&ctx, saved);
  }
  if (err) goto out;
  const cJSON *b = get_obj(root, "balancer");
  if (b && (err = parse_balancer(&ctx, c, b))) goto out;
  int seed = 0;
  if ((err = get_int(&ctx, root, "seed", 0, 2147483647, &seed))) goto out;
  if (seed) c->seed = (unsigned)seed;
  if ((err = get_str(&ctx, root, "variant_header", &c->variant_header))) goto out;
  if ((err = get_str(&ctx, root, "admin_token", &c->admin_token))) goto out;
out:
  cJSON_Delete(root);
  return err;
}

cinfer_status *gw_config_load_file(gw_config *c, const char *path) {
  cbuf b = {0};
  cinfer_status *st = cbuf_read_file(&b, path, 16u << 20);
  if (!st) st = gw_config_apply_json(c, b.data ? b.data : "", b.len, path);
  cbuf_free(&b);
  return st;
}

cinfer_status *gw_config_validate(const gw_config *c) {
  if (!c->n_statics && !c->n_dns && !c->upstreams_file)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "upstreams: none configured (upstreams.static, upstreams.dns or "
                             "upstreams.file; flags --upstream, --dns, --upstreams-file)");
  if (c->health_timeout_ms > c->health_interval_ms)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "health.timeout_ms (%d) must not exceed health.interval_ms (%d)",
                             c->health_timeout_ms, c->health_interval_ms);
  if (c->eject_base_ms > c->eject_max_ms)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "outlier.base_ejection_ms (%d) must not exceed outlier.max_ejection_ms (%d)",
                             c->eject_base_ms, c->eject_max_ms);
  if (c->try_timeout_ms > c->request_timeout_ms)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "retry.try_timeout_ms (%d) must not exceed retry.request_timeout_ms (%d)",
                             c->try_timeout_ms, c->request_timeout_ms);
  if (!c->tls_cert != !c->tls_key)
    return cinfer_status_new(CINFER_INVALID_ARG, "tls: cert_file and key_file go together (--tls-cert, --tls-key)");
  if (c->tls_client_ca && !c->tls_cert)
    return cinfer_status_new(CINFER_INVALID_ARG, "tls.client_ca_file: needs tls.cert_file and tls.key_file");
  if (!c->up_cert != !c->up_key)
    return cinfer_status_new(CINFER_INVALID_ARG, "upstream_tls: cert_file and key_file go together");
  if (c->tls_cert || c->upstream_tls) {  /* --check-config reports unreadable TLS files too */
    net_tls *t = NULL;
    net_tls_opts so = {.server = true, .cert_file = c->tls_cert, .key_file = c->tls_key,
                       .ca_file = c->tls_client_ca};
    net_tls_opts uo = {.cert_file = c->up_cert, .key_file = c->up_key, .ca_file = c->up_ca};
    cinfer_status *st = c->tls_cert ? net_tls_create(&so, &t) : NULL;
    net_tls_destroy(t);
    t = NULL;
    if (!st && c->upstream_tls) st = net_tls_create(&uo, &t);
    net_tls_destroy(t);
    if (st) return st;
  }
  if (c->keys_file) {
    gw_keyset *ks = NULL;
    cinfer_status *st = gw_keys_load(c->keys_file, &ks);
    gw_keyset_unref(ks);
    if (st) return st;
  }
  if (c->n_classes && !c->max_concurrency)
    return cinfer_status_new(CINFER_INVALID_ARG, "concurrency.classes: needs concurrency.max");
  return NULL;
}
