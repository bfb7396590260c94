/* metrics.c: see metrics.h. Values are doubles stored as atomic 64-bit words and updated
 * with compare-and-swap, so concurrent increments never lose updates. */
#include "metrics/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/numfmt.h"

const double metrics_latency_buckets[] = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.004,
    0.005,   0.0075,   0.01,    0.015,  0.025,   0.05,   0.075, 0.1,   0.25,  0.5,
    1,       2.5,      5,       10,     30,      60};
const size_t metrics_latency_buckets_n =
    sizeof metrics_latency_buckets / sizeof metrics_latency_buckets[0];
const double metrics_batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
const size_t metrics_batch_buckets_n =
    sizeof metrics_batch_buckets / sizeof metrics_batch_buckets[0];

struct metric {
  metric_family *family;
  char *labels;            /* rendered: key="value",key="value" */
  _Atomic uint64_t value;  /* double bits: counter/gauge value, histogram sum */
  _Atomic uint64_t count;  /* histogram observations */
  _Atomic uint64_t *buckets; /* histogram: per-bucket (non-cumulative) counts */
  int refs;                /* holders (metrics_series calls not yet removed); under reg->mu */
  metric *next;
};

struct metric_family {
  metrics_registry *reg;
  char *name, *help;
  metric_type type;
  double *bounds;
  size_t n_bounds;
  metric *series;
  metric_family *next;
};

struct metrics_registry {
  pthread_mutex_t mu;
  metric_family *families, *last;
};

static inline double bits_to_d(uint64_t b) { double d; memcpy(&d, &b, 8); return d; }
static inline uint64_t d_to_bits(double d) { uint64_t b; memcpy(&b, &d, 8); return b; }

static void atomic_add_double(_Atomic uint64_t *p, double v) {
  uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(p, &old, d_to_bits(bits_to_d(old) + v),
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

metrics_registry *metrics_registry_create(void) {
  metrics_registry *r = calloc(1, sizeof *r);
  if (r) pthread_mutex_init(&r->mu, NULL);
  return r;
}

static void series_free(metric *m) {
  free(m->labels);
  free(m->buckets);
  free(m);
}

void metrics_registry_destroy(metrics_registry *r) {
  if (!r) return;
  for (metric_family *f = r->families, *fn; f; f = fn) {
    fn = f->next;
    for (metric *m = f->series, *mn; m; m = mn) {
      mn = m->next;
      series_free(m);
    }
    free(f->name);
    free(f->help);
    free(f->bounds);
    free(f);
  }
  pthread_mutex_destroy(&r->mu);
  free(r);
}

metric_family *metrics_family(metrics_registry *r, const char *name, const char *help,
                              metric_type type, const double *buckets, size_t n_buckets) {
  pthread_mutex_lock(&r->mu);
  metric_family *f;
  for (f = r->families; f; f = f->next)
    if (!strcmp(f->name, name)) goto out;
  f = calloc(1, sizeof *f);
  if (!f) goto out;
  f->reg = r;
  f->name = strdup(name);
  f->help = strdup(help ? help : "");
  f->type = type;
  if (type == METRIC_HISTOGRAM && n_buckets) {
    f->bounds = malloc(n_buckets * sizeof *f->bounds);
    if (f->bounds) {
      memcpy(f->bounds, buckets, n_buckets * sizeof *f->bounds);
      f->n_bounds = n_buckets;
    }
  }
  if (!f->name || !f->help || (type == METRIC_HISTOGRAM && n_buckets && !f->bounds)) {
    free(f->name), free(f->help), free(f->bounds), free(f);
    f = NULL;
    goto out;
  }
  if (r->last) r->last->next = f;
  else r->families = f;
  r->last = f;
out:
  pthread_mutex_unlock(&r->mu);
  return f;
}

/* Renders labels as key="escaped value" pairs. */
static char *render_labels(const char *const *labels) {
  size_t cap = 1;
  for (const char *const *p = labels; p && p[0] && p[1]; p += 2)
    cap += strlen(p[0]) + 2 * strlen(p[1]) + 4;
  char *s = malloc(cap), *o = s;
  if (!s) return NULL;
  for (const char *const *p = labels; p && p[0] && p[1]; p += 2) {
    if (o != s) *o++ = ',';
    o += sprintf(o, "%s=\"", p[0]);
    for (const char *v = p[1]; *v; v++) {
      if (*v == '"' || *v == '\\') *o++ = '\\', *o++ = *v;
      else if (*v == '\n') *o++ = '\\', *o++ = 'n';
      else *o++ = *v;
    }
    *o++ = '"';
  }
  *o = 0;
  return s;
}

metric *metrics_series(metric_family *f, const char *const *labels) {
  if (!f) return NULL;
  char *lab = render_labels(labels);
  if (!lab) return NULL;
  pthread_mutex_lock(&f->reg->mu);
  metric *m;
  for (m = f->series; m; m = m->next)
    if (!strcmp(m->labels, lab)) break;
  if (m) {
    m->refs++; /* a reloaded model version asks for the series its predecessor still holds */
    free(lab);
  } else if ((m = calloc(1, sizeof *m))) {
    m->family = f;
    m->labels = lab;
    m->refs = 1;
    if (f->type == METRIC_HISTOGRAM) {
      m->buckets = calloc(f->n_bounds + 1, sizeof *m->buckets);
      if (!m->buckets) {
        free(m), free(lab);
        m = NULL;
        goto out;
      }
    }
    metric **pp = &f->series;
    while (*pp) pp = &(*pp)->next;
    *pp = m;
  } else {
    free(lab);
  }
out:
  pthread_mutex_unlock(&f->reg->mu);
  return m;
}

void metrics_series_remove(metric *m) {
  if (!m) return;
  metric_family *f = m->family;
  pthread_mutex_lock(&f->reg->mu);
  bool last = --m->refs == 0;
  if (last)
    for (metric **pp = &f->series; *pp; pp = &(*pp)->next)
      if (*pp == m) {
        *pp = m->next;
        break;
      }
  pthread_mutex_unlock(&f->reg->mu);
  if (last) series_free(m);
}

void metric_inc(metric *m, double v) {
  if (m) atomic_add_double(&m->value, v);
}

void metric_set(metric *m, double v) {
  if (m) atomic_store_explicit(&m->value, d_to_bits(v), memory_order_relaxed);
}

void metric_observe(metric *m, double v) {
  if (!m || !m->buckets) return;
  const metric_family *f = m->family;
  size_t lo = 0, hi = f->n_bounds; /* first bound >= v */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (f->bounds[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  atomic_fetch_add_explicit(&m->buckets[lo], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&m->count, 1, memory_order_relaxed);
  atomic_add_double(&m->value, v);
}

double metric_value(const metric *m) {
  if (!m) return 0;
  if (m->family->type == METRIC_HISTOGRAM)
    return (double)atomic_load_explicit(&((metric *)m)->count, memory_order_relaxed);
  return bits_to_d(atomic_load_explicit(&((metric *)m)->value, memory_order_relaxed));
}

typedef struct {
  char *buf;
  size_t len, cap;
  int err;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->err) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) { b->err = 1; return; }
    if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
    size_t ncap = b->cap * 2 + (size_t)n + 1;
    char *nb = realloc(b->buf, ncap);
    if (!nb) { b->err = 1; return; }
    b->buf = nb;
    b->cap = ncap;
  }
}

/* Prometheus text: shortest round-trip decimal, NaN / +Inf / -Inf spelled its way. */
static const char *fmt_double(char *tmp, size_t n, double v) {
  if (isnan(v)) snprintf(tmp, n, "NaN");
  else if (isinf(v)) snprintf(tmp, n, v > 0 ? "+Inf" : "-Inf");
  else if (v < 1e15 && v > -1e15 && v == (double)(int64_t)v) snprintf(tmp, n, "%lld", (long long)v);
  else if (n >= NUMFMT_BUF) numfmt_double(tmp, v);
  else snprintf(tmp, n, "%.17g", v);
  return tmp;
}

int metrics_render(metrics_registry *r, char **out, size_t *len) {
  sbuf b = {malloc(4096), 0, 4096, 0};
  if (!b.buf) return -1;
  b.buf[0] = 0;
  static const char *types[] = {"counter", "gauge", "histogram"};
  char t1[64], t2[64];
  pthread_mutex_lock(&r->mu);
  for (metric_family *f = r->families; f; f = f->next) {
    if (!f->series) continue;
    sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, types[f->type]);
    for (metric *m = f->series; m; m = m->next) {
      const char *sep = m->labels[0] ? "," : "";
      double v = bits_to_d(atomic_load_explicit(&m->value, memory_order_relaxed));
      if (f->type != METRIC_HISTOGRAM) {
        sb_printf(&b, "%s%s%s%s %s\n", f->name, m->labels[0] ? "{" : "", m->labels,
                  m->labels[0] ? "}" : "", fmt_double(t1, sizeof t1, v));
        continue;
      }
      uint64_t cum = 0;
      for (size_t i = 0; i <= f->n_bounds; i++) {
        cum += atomic_load_explicit(&m->buckets[i], memory_order_relaxed);
        if (i < f->n_bounds)
          sb_printf(&b, "%s_bucket{%s%sle=\"%s\"} %llu\n", f->name, m->labels, sep,
                    fmt_double(t2, sizeof t2, f->bounds[i]), (unsigned long long)cum);
        else
          sb_printf(&b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", f->name, m->labels, sep,
                    (unsigned long long)cum);
      }
      const char *lb = m->labels[0] ? "{" : "", *rb = m->labels[0] ? "}" : "";
      sb_printf(&b, "%s_sum%s%s%s %s\n%s_count%s%s%s %llu\n", f->name, lb, m->labels, rb,
                fmt_double(t1, sizeof t1, v), f->name, lb, m->labels, rb,
                (unsigned long long)cum);
    }
  }
  pthread_mutex_unlock(&r->mu);
  if (b.err) {
    free(b.buf);
    return -1;
  }
  *out = b.buf;
  *len = b.len;
  return 0;
}

double metrics_process_cpu_seconds(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return 0;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* comm may contain spaces */
  if (!p) return 0;
  unsigned long utime = 0, stime = 0;
  /* fields after comm: state(3) ... utime(14) stime(15) */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
    return 0;
  return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

double metrics_process_resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, rss = 0;
  int ok = fscanf(f, "%lu %lu", &size, &rss);
  fclose(f);
  return ok == 2 ? (double)rss * (double)sysconf(_SC_PAGESIZE) : 0;
}
