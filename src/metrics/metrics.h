/* metrics.h: a Prometheus metrics registry: counters, gauges and histograms, each a family
 * of labelled series. Updates are lock-free (atomics) so they can sit on hot paths; adding
 * or removing a series and rendering take the registry lock.
 *
 * Ownership: the registry owns families and series. Series are reference-counted: every
 * metrics_series() call that returns a series (new or existing, same labels) takes one
 * reference, every metrics_series_remove() drops one, and the series leaves the exposition
 * and is freed when the last is dropped (or at metrics_registry_destroy()). So two holders
 * of the same labels (a model version and the version that replaces it on reload) each
 * remove their own reference, and neither frees the series under the other. */
#ifndef CINFER_METRICS_H
#define CINFER_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct metrics_registry metrics_registry;
typedef struct metric_family metric_family;
typedef struct metric metric;

typedef enum { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM } metric_type;

metrics_registry *metrics_registry_create(void);
void metrics_registry_destroy(metrics_registry *r);

/* Returns the family `name`, creating it on first use (later calls return the same family
 * and ignore help/buckets). buckets: ascending upper bounds for histograms (+Inf implied);
 * copied. NULL on allocation failure. */
metric_family *metrics_family(metrics_registry *r, const char *name, const char *help,
                              metric_type type, const double *buckets, size_t n_buckets);
/* Returns the series with these labels, creating it. labels: NULL-terminated key, value
 * pairs (values are escaped). NULL on allocation failure (updates on NULL are no-ops). */
metric *metrics_series(metric_family *f, const char *const *labels);
/* Drops the reference one metrics_series() call took; NULL does nothing. */
void metrics_series_remove(metric *m);

void metric_inc(metric *m, double v);      /* counter or gauge += v */
void metric_set(metric *m, double v);      /* gauge = v */
void metric_observe(metric *m, double v);  /* histogram */
double metric_value(const metric *m);      /* counter/gauge value; histogram: count */

/* Renders every family in Prometheus text format 0.0.4. Caller frees *out. Returns 0, or -1
 * on allocation failure. */
int metrics_render(metrics_registry *r, char **out, size_t *len);

/* Standard buckets. */
extern const double metrics_latency_buckets[];  /* seconds, 10 us .. 60 s */
extern const size_t metrics_latency_buckets_n;
extern const double metrics_batch_buckets[];    /* 1, 2, 4, ... 1024 */
extern const size_t metrics_batch_buckets_n;

/* Process CPU seconds and resident bytes from /proc/self (0 when unavailable). */
double metrics_process_cpu_seconds(void);
double metrics_process_resident_bytes(void);

#endif
