/* kv.c: reading a replica's LLM load from its Prometheus /metrics text (pure; see
 * gw_kv_parse_metrics in gateway.h). Only the series the kv_aware balancer uses. */
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"

static const struct {
  const char *name;
  size_t off;
} wanted[] = {
    {"cinfer_llm_running_sequences", offsetof(gw_kv_stat, running)},
    {"cinfer_llm_waiting_sequences", offsetof(gw_kv_stat, waiting)},
    {"cinfer_llm_kv_cache_usage_ratio", offsetof(gw_kv_stat, kv_usage)},
    {"cinfer_pending_requests", offsetof(gw_kv_stat, pending)},
    {"cinfer_llm_prefix_cache_queries_total", offsetof(gw_kv_stat, prefix_queries)},
    {"cinfer_llm_prefix_cache_hits_total", offsetof(gw_kv_stat, prefix_hits)},
};

/* The value of label `model` in {...}[0..n): *v, *vl point into s (false when absent or
 * escaped). */
static bool model_label(const char *s, size_t n, const char **v, size_t *vl) {
  static const char key[] = "model=\"";
  for (size_t i = 0; i + sizeof key - 1 <= n; i++) {
    if ((i == 0 || s[i - 1] == '{' || s[i - 1] == ',') && !memcmp(s + i, key, sizeof key - 1)) {
      size_t j = i + sizeof key - 1, start = j;
      for (; j < n && s[j] != '"'; j++)
        if (s[j] == '\\') return false;  /* escaped names are not model names we route */
      if (j >= n || j == start) return false;
      *v = s + start;
      *vl = j - start;
      return true;
    }
  }
  return false;
}

void gw_kv_free(gw_kv_stat *s, size_t n) {
  for (size_t i = 0; s && i < n; i++) free(s[i].model);
}

size_t gw_kv_parse_metrics(const char *text, size_t len, gw_kv_stat *out, size_t cap) {
  size_t n = 0;
  const char *p = text, *end = text + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    size_t ll = (size_t)(le - p);
    if (ll && p[0] != '#') {
      for (size_t w = 0; w < sizeof wanted / sizeof wanted[0]; w++) {
        size_t k = strlen(wanted[w].name);
        if (ll <= k || memcmp(p, wanted[w].name, k) || p[k] != '{') continue;
        const char *close = memchr(p + k, '}', ll - k);
        if (!close) break;
        const char *model;
        size_t ml;
        if (!model_label(p + k + 1, (size_t)(close - p - k - 1), &model, &ml)) break;
        char num[64];
        size_t vl = (size_t)(le - close - 1);
        while (vl && close[1] == ' ') close++, vl--;
        if (!vl || vl >= sizeof num) break;
        memcpy(num, close + 1, vl);
        num[vl] = 0;
        char *e;
        double v = strtod(num, &e);
        if (e == num || (*e && *e != ' ' && *e != '\r') || v != v || v < 0) break;
        size_t i = 0;
        while (i < n && (strlen(out[i].model) != ml || memcmp(out[i].model, model, ml))) i++;
        if (i == n) {
          if (n >= cap) break;
          memset(&out[n], 0, sizeof out[n]);
          if (!(out[n].model = malloc(ml + 1))) break;  /* out of memory: the line is skipped */
          memcpy(out[n].model, model, ml);
          out[n].model[ml] = 0;
          n++;
        }
        /* several versions of one model: their values add up */
        *(double *)((char *)&out[i] + wanted[w].off) += v;
        break;
      }
    }
    p = nl ? nl + 1 : end;
  }
  return n;
}
