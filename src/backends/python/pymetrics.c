/* pymetrics.c: custom metrics of Python models in the server's registry (pymetrics.h).
 *
 * A family is known by its name for the whole server (as on Triton: two MetricFamily
 * objects of one name, in any model or instance, are the same family; a second kind for
 * the name is refused). A histogram family gets its buckets from its first Metric (the
 * registry keeps one set of buckets per family; another Metric with other buckets is
 * refused, saying so). Names of the server's own families (nv_*, cinfer_*) are refused,
 * so a model cannot write into them. */
#include "pymetrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "metrics/metrics.h"

#define PYM_MAX_LABELS 32
#define PYM_MAX_BUCKETS 256
#define PYM_MAX_HANDLES 65536 /* Metric objects alive in one process */

typedef struct pym_family {
  metrics_registry *reg;
  char *name;
  char *help;
  int kind; /* metric_type */
  metric_family *fam; /* NULL until a histogram's first Metric gives its buckets */
  double *buckets;
  size_t nb;
  struct pym_family *next;
} pym_family;

static pthread_mutex_t fam_mu = PTHREAD_MUTEX_INITIALIZER;
static pym_family *families; /* under fam_mu; live as long as the registry's families */

static const char *kind_name(int k) {
  return k == METRIC_COUNTER ? "COUNTER" : k == METRIC_GAUGE ? "GAUGE" : "HISTOGRAM";
}

static int kind_parse(const char *s) {
  if (!s) return -1;
  if (!strcmp(s, "COUNTER")) return METRIC_COUNTER;
  if (!strcmp(s, "GAUGE")) return METRIC_GAUGE;
  if (!strcmp(s, "HISTOGRAM")) return METRIC_HISTOGRAM;
  return -1;
}

/* Prometheus: [a-zA-Z_:][a-zA-Z0-9_:]* for names, no ':' in label names. */
static bool valid_name(const char *s, bool label) {
  if (!s || !*s) return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':') ||
              (p != s && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return !label || strncmp(s, "__", 2) != 0;
}

static void reply_error(cbuf *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply_error(cbuf *r, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cbuf_puts(r, "\"error\":{\"message\":");
  cbuf_json_string(r, msg, strlen(msg));
  cbuf_puts(r, ",\"code\":\"INVALID_ARG\"}");
}

static pym_family *family_find_locked(metrics_registry *reg, const char *name) {
  for (pym_family *f = families; f; f = f->next)
    if (f->reg == reg && !strcmp(f->name, name)) return f;
  return NULL;
}

void pym_table_init(pym_table *t) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->mu, NULL);
}

void pym_table_clear(pym_table *t) {
  pthread_mutex_lock(&t->mu);
  for (uint32_t i = 0; i < t->n; i++) metrics_series_remove(t->h[i].series);
  free(t->h);
  t->h = NULL;
  t->n = t->cap = 0;
  pthread_mutex_unlock(&t->mu);
}

void pym_table_destroy(pym_table *t) {
  pym_table_clear(t);
  pthread_mutex_destroy(&t->mu);
}

static double jnum_or(const json_value *v, const char *k, bool *ok) {
  const json_value *x = json_get(v, k);
  *ok = json_is(x, JSON_NUMBER);
  return *ok ? x->u.num : 0;
}

static void op_family(metrics_registry *reg, const json_value *root, cbuf *r) {
  const json_value *jn = json_get(root, "name"), *jh = json_get(root, "help"), *jk = json_get(root, "kind");
  const char *name = json_is(jn, JSON_STRING) ? jn->u.str : NULL;
  const char *help = json_is(jh, JSON_STRING) ? jh->u.str : "";
  int kind = kind_parse(json_is(jk, JSON_STRING) ? jk->u.str : NULL);
  if (!valid_name(name, false)) {
    reply_error(r, "MetricFamily name '%s' is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
                name ? name : "");
    return;
  }
  if (kind < 0) {
    reply_error(r, "MetricFamily '%s': kind must be COUNTER, GAUGE or HISTOGRAM", name);
    return;
  }
  pthread_mutex_lock(&fam_mu);
  pym_family *f = family_find_locked(reg, name);
  if (f && f->kind != kind) {
    reply_error(r, "MetricFamily '%s' exists with kind %s; it cannot also be %s", name,
                kind_name(f->kind), kind_name(kind));
  } else if (!f && (!strncmp(name, "nv_", 3) || !strncmp(name, "cinfer_", 7))) {
    reply_error(r, "MetricFamily name '%s': the prefixes nv_ and cinfer_ are the server's own", name);
  } else if (!f) {
    f = calloc(1, sizeof *f);
    if (f && (f->name = strdup(name)) && (f->help = strdup(help))) {
      f->reg = reg;
      f->kind = kind;
      if (kind != METRIC_HISTOGRAM) f->fam = metrics_family(reg, name, help, (metric_type)kind, NULL, 0);
      if (kind == METRIC_HISTOGRAM || f->fam) {
        f->next = families;
        families = f;
        f = NULL;
      }
    }
    if (f) {
      free(f->name), free(f->help), free(f);
      reply_error(r, "MetricFamily '%s': out of memory", name);
    }
  }
  pthread_mutex_unlock(&fam_mu);
}

static void op_new(pym_table *t, metrics_registry *reg, const json_value *root, cbuf *r) {
  const json_value *jn = json_get(root, "name"), *jl = json_get(root, "labels"), *jb = json_get(root, "buckets");
  const char *name = json_is(jn, JSON_STRING) ? jn->u.str : "";
  const char *lab[2 * PYM_MAX_LABELS + 1];
  int nl = 0;
  if (jl && !json_is(jl, JSON_NULL)) {
    if (!json_is(jl, JSON_OBJECT)) {
      reply_error(r, "Metric of '%s': labels must be a dict of strings", name);
      return;
    }
    for (const json_value *l = jl->u.child; l; l = l->next) {
      if (nl == PYM_MAX_LABELS) {
        reply_error(r, "Metric of '%s': more than %d labels", name, PYM_MAX_LABELS);
        return;
      }
      if (!valid_name(l->key, true) || !json_is(l, JSON_STRING)) {
        reply_error(r, "Metric of '%s': label '%s' is not a label name with a string value", name, l->key);
        return;
      }
      lab[2 * nl] = l->key;
      lab[2 * nl + 1] = l->u.str;
      nl++;
    }
  }
  lab[2 * nl] = NULL;
  double b[PYM_MAX_BUCKETS];
  size_t nb = 0;
  bool has_b = jb && !json_is(jb, JSON_NULL);
  if (has_b) {
    if (!json_is(jb, JSON_ARRAY)) {
      reply_error(r, "Metric of '%s': buckets must be a list of numbers", name);
      return;
    }
    for (const json_value *x = jb->u.child; x; x = x->next) {
      if (nb == PYM_MAX_BUCKETS || !json_is(x, JSON_NUMBER) || !isfinite(x->u.num) ||
          (nb && x->u.num <= b[nb - 1])) {
        reply_error(r, "Metric of '%s': buckets must be at most %d finite numbers in increasing "
                    "order", name, PYM_MAX_BUCKETS);
        return;
      }
      b[nb++] = x->u.num;
    }
  }
  pthread_mutex_lock(&fam_mu);
  pym_family *f = family_find_locked(reg, name);
  metric_family *fam = NULL;
  int kind = f ? f->kind : -1;
  if (!f) {
    reply_error(r, "Metric: no MetricFamily '%s'", name);
  } else if (kind != METRIC_HISTOGRAM && has_b) {
    reply_error(r, "Metric of '%s': buckets are only for HISTOGRAM families (this one is %s)", name,
                kind_name(kind));
  } else if (kind == METRIC_HISTOGRAM && (!has_b || nb == 0)) {
    reply_error(r, "Metric of HISTOGRAM family '%s' needs buckets", name);
  } else if (kind == METRIC_HISTOGRAM && f->fam && (nb != f->nb || memcmp(b, f->buckets, nb * sizeof *b))) {
    reply_error(r, "Metric of HISTOGRAM family '%s': buckets differ from those of its first Metric "
                "(cinfer keeps one set of buckets per family)", name);
  } else if (kind == METRIC_HISTOGRAM && !f->fam) {
    f->buckets = malloc(nb * sizeof *b);
    if (f->buckets) {
      memcpy(f->buckets, b, nb * sizeof *b);
      f->nb = nb;
      f->fam = metrics_family(reg, name, f->help, METRIC_HISTOGRAM, b, nb);
    }
    if (!(fam = f->fam)) reply_error(r, "Metric of '%s': out of memory", name);
  } else {
    fam = f->fam;
  }
  pthread_mutex_unlock(&fam_mu);
  if (!fam) return;
  metric *m = metrics_series(fam, lab);
  if (!m) {
    reply_error(r, "Metric of '%s': out of memory", name);
    return;
  }
  pthread_mutex_lock(&t->mu);
  uint32_t id = 0;
  while (id < t->n && t->h[id].series) id++;
  if (id == t->n && t->n == t->cap) {
    uint32_t cap = t->cap ? 2 * t->cap : 16;
    pym_handle *h = cap <= PYM_MAX_HANDLES ? realloc(t->h, cap * sizeof *h) : NULL;
    if (!h) {
      pthread_mutex_unlock(&t->mu);
      metrics_series_remove(m);
      reply_error(r, "Metric of '%s': more than %d Metric objects in one instance", name, PYM_MAX_HANDLES);
      return;
    }
    t->h = h;
    t->cap = cap;
  }
  if (id == t->n) t->n++;
  t->h[id] = (pym_handle){m, kind};
  pthread_mutex_unlock(&t->mu);
  cbuf_printf(r, "\"id\":%u", id);
}

void pym_on_message(pym_table *t, metrics_registry *reg, const char *model, const json_value *root,
                    cbuf *r) {
  const json_value *jo = json_get(root, "op");
  const char *op = json_is(jo, JSON_STRING) ? jo->u.str : "";
  if (!reg) {
    reply_error(r, "custom metrics are not available here");
    return;
  }
  if (!strcmp(op, "family")) {
    op_family(reg, root, r);
    return;
  }
  if (!strcmp(op, "new")) {
    op_new(t, reg, root, r);
    return;
  }
  bool ok;
  double idd = jnum_or(root, "id", &ok);
  pthread_mutex_lock(&t->mu);
  pym_handle *h = ok && idd >= 0 && idd < t->n && t->h[(uint32_t)idd].series ? &t->h[(uint32_t)idd] : NULL;
  if (!h) {
    pthread_mutex_unlock(&t->mu);
    reply_error(r, "Metric %s: the metric was deleted", op);
    return;
  }
  double v = jnum_or(root, "value", &ok);
  const char *bad = NULL;
  if (!strcmp(op, "delete")) {
    metrics_series_remove(h->series);
    h->series = NULL;
  } else if (!strcmp(op, "value")) {
    if (h->kind == METRIC_HISTOGRAM) bad = "value() is not supported for HISTOGRAM metrics";
    else cbuf_printf(r, "\"value\":%.17g", metric_value(h->series));
  } else if (!ok || !isfinite(v)) {
    bad = "the value must be a finite number";
  } else if (!strcmp(op, "inc")) {
    if (h->kind == METRIC_HISTOGRAM) bad = "increment() is not supported for HISTOGRAM metrics";
    else if (h->kind == METRIC_COUNTER && v < 0) bad = "increment() of a COUNTER must not be negative";
    else metric_inc(h->series, v);
  } else if (!strcmp(op, "set")) {
    if (h->kind != METRIC_GAUGE) bad = "set() is only supported for GAUGE metrics";
    else metric_set(h->series, v);
  } else if (!strcmp(op, "observe")) {
    if (h->kind != METRIC_HISTOGRAM) bad = "observe() is only supported for HISTOGRAM metrics";
    else metric_observe(h->series, v);
  } else {
    bad = "unknown metric operation";
  }
  pthread_mutex_unlock(&t->mu);
  if (bad) {
    reply_error(r, "Metric %s: %s", op, bad);
    if (!json_get(root, "call"))
      LOG_W("python model '%s': custom metric: %s", model, bad);
  }
}
