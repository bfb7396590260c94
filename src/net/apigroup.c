/* apigroup.c: route table -> API group, and Triton-style header restrictions. */
#include "net/apigroup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const group_names[API_GROUP_COUNT] = {
    "health", "metadata", "inference", "shared-memory", "model-config",
    "model-repository", "statistics", "trace", "logging"};

const char *api_group_name(api_group g) {
  if ((unsigned)g < API_GROUP_COUNT) return group_names[g];
  return g == API_GROUP_NONE ? "unrestricted" : "unknown";
}

bool api_group_parse(const char *name, size_t len, api_group *out) {
  for (int i = 0; i < API_GROUP_COUNT; i++)
    if (strlen(group_names[i]) == len && !strncasecmp(group_names[i], name, len)) {
      *out = (api_group)i;
      return true;
    }
  return false;
}

/* ---- classification ------------------------------------------------------------------ */

api_group api_classify_grpc(const char *path, size_t len) {
  static const struct {
    const char *rpc;
    api_group g;
  } rpcs[] = {
      {"ServerLive", API_HEALTH}, {"ServerReady", API_HEALTH}, {"ModelReady", API_HEALTH},
      {"ServerMetadata", API_METADATA}, {"ModelMetadata", API_METADATA},
      {"ModelInfer", API_INFERENCE}, {"ModelStreamInfer", API_INFERENCE},
      {"ModelConfig", API_MODEL_CONFIG}, {"ModelStatistics", API_STATISTICS},
      {"RepositoryIndex", API_MODEL_REPOSITORY}, {"RepositoryModelLoad", API_MODEL_REPOSITORY},
      {"RepositoryModelUnload", API_MODEL_REPOSITORY},
      {"SystemSharedMemoryStatus", API_SHARED_MEMORY},
      {"SystemSharedMemoryRegister", API_SHARED_MEMORY},
      {"SystemSharedMemoryUnregister", API_SHARED_MEMORY},
      {"CudaSharedMemoryStatus", API_SHARED_MEMORY},
      {"CudaSharedMemoryRegister", API_SHARED_MEMORY},
      {"CudaSharedMemoryUnregister", API_SHARED_MEMORY},
      {"TraceSetting", API_TRACE}, {"LogSettings", API_LOGGING}};
  static const char svc[] = "/inference.GRPCInferenceService/";
  static const char health[] = "/grpc.health.v1.Health/";
  if (len > sizeof health - 1 && !memcmp(path, health, sizeof health - 1)) return API_HEALTH;
  if (len <= sizeof svc - 1 || memcmp(path, svc, sizeof svc - 1)) return API_GROUP_UNKNOWN;
  const char *m = path + sizeof svc - 1;
  size_t ml = len - (sizeof svc - 1);
  for (size_t i = 0; i < sizeof rpcs / sizeof *rpcs; i++)
    if (strlen(rpcs[i].rpc) == ml && !memcmp(rpcs[i].rpc, m, ml)) return rpcs[i].g;
  return API_GROUP_UNKNOWN;
}

/* A route: its segments after the split, "{m}" = the model (captured), "{x}" = any one
 * segment (a version number, a region name). ".v" at the end of a "{m}" segment ("{m}.v")
 * also accepts "{m}/versions/{x}" there. The first matching row wins, so exact routes
 * come before the ones with captures (/v2/models/stats is not a model called "stats"). */
typedef struct route_row {
  const char *pattern;
  api_group group;
  bool listing;
} route_row;

static const route_row routes[] = {
    /* KServe v2 core */
    {"v2", API_METADATA, false},
    {"v2/health/live", API_HEALTH, false},
    {"v2/health/ready", API_HEALTH, false},
    {"v2/models/stats", API_STATISTICS, false},
    {"v2/models/{m}.v", API_METADATA, false},
    {"v2/models/{m}.v/ready", API_HEALTH, false},
    {"v2/models/{m}.v/infer", API_INFERENCE, false},
    {"v2/models/{m}.v/generate", API_INFERENCE, false},
    {"v2/models/{m}.v/generate_stream", API_INFERENCE, false},
    {"v2/models/{m}.v/config", API_MODEL_CONFIG, false},
    {"v2/models/{m}.v/stats", API_STATISTICS, false},
    {"v2/models/{m}.v/trace/setting", API_TRACE, false},
    /* Triton extensions */
    {"v2/trace/setting", API_TRACE, false},
    {"v2/logging", API_LOGGING, false},
    {"v2/repository/index", API_MODEL_REPOSITORY, true},
    {"v2/repository/models/{m}/load", API_MODEL_REPOSITORY, false},
    {"v2/repository/models/{m}/unload", API_MODEL_REPOSITORY, false},
    {"v2/systemsharedmemory/status", API_SHARED_MEMORY, false},
    {"v2/systemsharedmemory/unregister", API_SHARED_MEMORY, false},
    {"v2/systemsharedmemory/region/{x}/status", API_SHARED_MEMORY, false},
    {"v2/systemsharedmemory/region/{x}/register", API_SHARED_MEMORY, false},
    {"v2/systemsharedmemory/region/{x}/unregister", API_SHARED_MEMORY, false},
    {"v2/cudasharedmemory/status", API_SHARED_MEMORY, false},
    {"v2/cudasharedmemory/unregister", API_SHARED_MEMORY, false},
    {"v2/cudasharedmemory/region/{x}/status", API_SHARED_MEMORY, false},
    {"v2/cudasharedmemory/region/{x}/register", API_SHARED_MEMORY, false},
    {"v2/cudasharedmemory/region/{x}/unregister", API_SHARED_MEMORY, false},
    /* OpenAI */
    {"v1/models", API_METADATA, true},
    {"v1/models/{m}", API_METADATA, false},
    {"v1/completions", API_INFERENCE, false},
    {"v1/chat/completions", API_INFERENCE, false},
    {"v1/embeddings", API_INFERENCE, false},
    /* cinfer's own */
    {"tokenize", API_INFERENCE, false},
    {"detokenize", API_INFERENCE, false},
    {"tokenizer_info", API_METADATA, false},
    {"metrics", API_GROUP_NONE, false},
    {"health", API_GROUP_NONE, false},
};

static bool match(const char *pattern, const http_path_segs *p, char *model, size_t mcap) {
  int at = 0;
  const char *s = pattern;
  while (*s) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (at >= p->n) return false;
    if (len >= 3 && s[0] == '{') {
      bool versions = len >= 5 && !strncmp(s + len - 2, ".v", 2);
      if (s[1] == 'm') snprintf(model, mcap, "%s", p->seg[at]);
      at++;
      if (versions && at + 1 < p->n && !strcmp(p->seg[at], "versions")) at += 2;
    } else {
      if (strlen(p->seg[at]) != len || memcmp(p->seg[at], s, len)) return false;
      at++;
    }
    s = e ? e + 1 : s + len;
  }
  return at == p->n;
}

void api_classify(http_method method, const char *path, size_t len, api_route *out) {
  (void)method;
  out->group = API_GROUP_UNKNOWN;
  out->model[0] = 0;
  out->listing = false;
  out->path_err = HTTP_PATH_OK;
  out->path_err_len = 0;
  http_path_segs p;
  if (!http_path_split(path, len, &p)) {
    out->path_err = p.err;
    out->path_err_len = p.err_len;
    return;
  }
  if (p.n == 0) return;
  char model[HTTP_PATH_SEG_CAP];
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    model[0] = 0;
    if (!match(routes[i].pattern, &p, model, sizeof model)) continue;
    out->group = routes[i].group;
    out->listing = routes[i].listing;
    snprintf(out->model, sizeof out->model, "%s", model);
    return;
  }
}

/* ---- restrictions -------------------------------------------------------------------- */

bool api_ct_equal(const void *a, size_t alen, const void *b, size_t blen) {
  const unsigned char *x = a, *y = b;
  unsigned diff = (unsigned)(alen != blen);
  size_t n = alen < blen ? alen : blen;
  /* time depends on the lengths only, never on where the bytes differ */
  for (size_t i = 0; i < n; i++) diff |= (unsigned)(x[i] ^ y[i]);
  return diff == 0;
}

bool api_restrictions_add(api_restrictions *r, const char *spec, char *err, size_t cap) {
  const char *colon = strchr(spec, ':');
  if (!colon) {
    snprintf(err, cap, "'%s': expected GROUP[,GROUP...]:KEY=VALUE", spec);
    return false;
  }
  const char *eq = strchr(colon + 1, '=');
  if (!eq || eq == colon + 1) {
    snprintf(err, cap, "'%s': expected KEY=VALUE after ':' (the header that grants access)", spec);
    return false;
  }
  api_group gs[API_GROUP_COUNT];
  int ng = 0;
  const char *s = spec;
  while (s < colon) {
    const char *e = memchr(s, ',', (size_t)(colon - s));
    size_t len = e ? (size_t)(e - s) : (size_t)(colon - s);
    api_group g;
    if (!api_group_parse(s, len, &g)) {
      snprintf(err, cap,
               "'%.*s' is not an API group (health, metadata, inference, shared-memory, "
               "model-config, model-repository, statistics, trace, logging)",
               (int)len, s);
      return false;
    }
    bool dup = r->key[g] != NULL;
    for (int i = 0; i < ng; i++) dup |= gs[i] == g;
    if (dup) {
      snprintf(err, cap, "API group '%s' is restricted twice", group_names[g]);
      return false;
    }
    gs[ng++] = g;
    s += len + (e ? 1 : 0);
  }
  if (!ng) {
    snprintf(err, cap, "'%s': no API group before ':'", spec);
    return false;
  }
  for (int i = 0; i < ng; i++) {
    char *k = strndup(colon + 1, (size_t)(eq - colon - 1));
    char *v = strdup(eq + 1);
    if (!k || !v) {
      free(k);
      free(v);
      snprintf(err, cap, "out of memory");
      return false;
    }
    r->key[gs[i]] = k;
    r->value[gs[i]] = v;
  }
  return true;
}

void api_restrictions_free(api_restrictions *r) {
  for (int i = 0; i < API_GROUP_COUNT; i++) {
    free(r->key[i]);
    free(r->value[i]);
    r->key[i] = r->value[i] = NULL;
  }
}

bool api_restrictions_any(const api_restrictions *r) {
  for (int i = 0; i < API_GROUP_COUNT; i++)
    if (r->key[i]) return true;
  return false;
}

bool api_restrictions_check(const api_restrictions *r, api_group g, const http_header *h,
                            size_t n, char *msg, size_t cap) {
  if ((unsigned)g >= API_GROUP_COUNT || !r->key[g]) return true;
  size_t vl = 0;
  const char *v = http_find_header(h, n, r->key[g], &vl);
  if (v && api_ct_equal(v, vl, r->value[g], strlen(r->value[g]))) return true;
  /* Triton's text (its L0_http/http_restricted_api_test.py and L0_grpc match "This API is
   * restricted"), and the group. */
  snprintf(msg, cap, "This API is restricted, expecting header '%s' (API group '%s')", r->key[g],
           group_names[g]);
  return false;
}

int api_restrictions_check_request(const api_restrictions *r, const http_request *req,
                                   char *msg, size_t cap) {
  if (!api_restrictions_any(r)) return 0; /* the common case costs no classification */
  api_route rt;
  api_classify(req->method_id, req->path, req->path_len, &rt);
  return api_restrictions_check(r, rt.group, req->headers, req->num_headers, msg, cap) ? 0 : 403;
}
