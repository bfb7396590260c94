/* stats.c: statistics and metrics. Per model version: the counters and durations of
 * cinfer_model_stats and the model's metric series (created with the model, removed with
 * it), recorded by request.c and model.c as requests finish; for the server: the
 * statistics query and the Prometheus text, which walk the model table.
 *
 * May call: table.c (cinfer_model_name_check, the one name limit); nothing else of
 * src/server (the walk reads table.h's entries under s->mu; the metrics are src/metrics'). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/table.h"

/* ---- statistics ----------------------------------------------------------------------- */

void stats_add(cinfer_duration_stat *s, uint64_t n, uint64_t ns) {
  s->count += n;
  s->ns += ns;
}

void stats_record_failure(cinfer_model *m, cinfer_request *r, cinfer_code code, metric *reason) {
  uint64_t t = clock_now_ns() - r->t_arrival;
  pthread_mutex_lock(&m->stats_mu);
  stats_add(&m->stats.fail, 1, t);
  pthread_mutex_unlock(&m->stats_mu);
  metric *which = reason                             ? reason
                  : code == CINFER_CANCELLED          ? m->m.fail_cancelled
                  : code == CINFER_DEADLINE_EXCEEDED ? m->m.fail_timeout
                  : code == CINFER_UNAVAILABLE       ? m->m.fail_rejected
                                                     : m->m.fail_backend;
  metric_inc(which, 1);
  metric_observe(m->m.request_dur, (double)t * 1e-9);
}

void model_record_final(cinfer_model *m, cinfer_request *r, const cinfer_status *err) {
  if (err) {
    stats_record_failure(m, r, cinfer_status_code(err), NULL);
    return;
  }
  uint64_t t = clock_now_ns() - r->t_arrival;
  pthread_mutex_lock(&m->stats_mu);
  stats_add(&m->stats.success, 1, t);
  pthread_mutex_unlock(&m->stats_mu);
  metric_inc(m->m.success, 1);
  metric_observe(m->m.request_dur, (double)t * 1e-9);
}

/* With stats_mu held: r's queue and compute phases, added together so that a statistics
 * snapshot never sees the compute counts differ (perf_analyzer refuses a window where they
 * do). t0..t2: the batch's input assembly and execution; t_out: end of its output phase. */
void stats_phases_locked(cinfer_model *m, const cinfer_request *r, uint64_t t0, uint64_t t1,
                               uint64_t t2, uint64_t t_out) {
  stats_add(&m->stats.queue, 1, r->t_exec_start - r->t_arrival);
  stats_add(&m->stats.compute_input, 1, t1 - t0);
  stats_add(&m->stats.compute_infer, 1, t2 - t1);
  stats_add(&m->stats.compute_output, 1, t_out - t2);
}

/* Creates the model's series; false when one could not be allocated (the caller removes
 * the others with model_metrics_fini and fails the load: a model never serves half-observed). */
bool model_metrics_init(cinfer_model *m) {
  metrics_registry *reg = server_metrics(m->server);
  char ver[32];
  snprintf(ver, sizeof ver, "%lld", (long long)m->version);
  const char *lab[] = {"model", m->name, "version", ver, NULL};
  const char *lab_fail[][7] = {
      {"model", m->name, "version", ver, "reason", "backend", NULL},
      {"model", m->name, "version", ver, "reason", "rejected", NULL},
      {"model", m->name, "version", ver, "reason", "timeout", NULL},
      {"model", m->name, "version", ver, "reason", "cancelled", NULL},
  };
#define FAM(n, h, t) metrics_family(reg, n, h, t, NULL, 0)
#define HIST(n, h, b, nb) metrics_family(reg, n, h, METRIC_HISTOGRAM, b, nb)
  metric_family *fail = FAM("cinfer_request_failure_total", "Failed inference requests", METRIC_COUNTER);
  m->m.success = metrics_series(FAM("cinfer_request_success_total", "Successful inference requests", METRIC_COUNTER), lab);
  m->m.fail_backend = metrics_series(fail, lab_fail[0]);
  m->m.fail_rejected = metrics_series(fail, lab_fail[1]);
  m->m.fail_timeout = metrics_series(fail, lab_fail[2]);
  m->m.fail_cancelled = metrics_series(fail, lab_fail[3]);
  m->m.inference_count = metrics_series(FAM("cinfer_inference_count_total", "Inferences performed (batch rows)", METRIC_COUNTER), lab);
  m->m.execution_count = metrics_series(FAM("cinfer_execution_count_total", "Backend executions (batches)", METRIC_COUNTER), lab);
  m->m.pending = metrics_series(FAM("cinfer_pending_requests", "Requests waiting in the model's queue", METRIC_GAUGE), lab);
  m->m.request_dur = metrics_series(HIST("cinfer_request_duration_seconds", "End-to-end request time in the server", metrics_latency_buckets, metrics_latency_buckets_n), lab);
  m->m.queue_dur = metrics_series(HIST("cinfer_queue_duration_seconds", "Time requests wait in the queue", metrics_latency_buckets, metrics_latency_buckets_n), lab);
  m->m.compute_dur = metrics_series(HIST("cinfer_compute_duration_seconds", "Batch compute time (input, infer)", metrics_latency_buckets, metrics_latency_buckets_n), lab);
  m->m.batch_size = metrics_series(HIST("cinfer_batch_size", "Rows per backend execution", metrics_batch_buckets, metrics_batch_buckets_n), lab);
  metric_family *rej = FAM("cinfer_rejected_total", "Requests rejected by the scheduler", METRIC_COUNTER);
  const char *lr1[] = {"model", m->name, "version", ver, "reason", "queue_full", NULL};
  const char *lr2[] = {"model", m->name, "version", ver, "reason", "timeout", NULL};
  m->m_rejected_full = metrics_series(rej, lr1);
  m->m_rejected_timeout = metrics_series(rej, lr2);
  const char *lr3[] = {"model", m->name, "version", ver, "reason", "max_inflight", NULL};
  m->m_rejected_inflight = metrics_series(rej, lr3);
  metric_family *busy = FAM("cinfer_instance_busy_ratio", "Fraction of time each instance executes", METRIC_GAUGE);
  for (int i = 0; i < m->n_instances; i++) {
    char idx[16];
    snprintf(idx, sizeof idx, "%d", i);
    const char *li[] = {"model", m->name, "version", ver, "instance", idx, NULL};
    m->instances[i].m_busy = metrics_series(busy, li);
    if (!m->instances[i].m_busy) return false;
  }
#undef FAM
#undef HIST
  metric *all[] = {m->m.success, m->m.fail_backend, m->m.fail_rejected, m->m.fail_timeout,
                   m->m.fail_cancelled, m->m.inference_count, m->m.execution_count,
                   m->m.pending, m->m.request_dur, m->m.queue_dur, m->m.compute_dur,
                   m->m.batch_size, m->m_rejected_full, m->m_rejected_timeout, m->m_rejected_inflight};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!all[i]) return false;
  return true;
}

void model_metrics_fini(cinfer_model *m) {
  metric *all[] = {m->m.success, m->m.fail_backend, m->m.fail_rejected, m->m.fail_timeout,
                   m->m.fail_cancelled, m->m.inference_count, m->m.execution_count,
                   m->m.pending, m->m.request_dur, m->m.queue_dur, m->m.compute_dur,
                   m->m.batch_size, m->m_rejected_full, m->m_rejected_timeout, m->m_rejected_inflight};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) metrics_series_remove(all[i]);
  for (int i = 0; i < m->n_instances; i++) metrics_series_remove(m->instances[i].m_busy);
}

void model_busy_update(cinfer_model *m, uint64_t window_ns) {
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->n_instances; i++) {
    metric_set(m->instances[i].m_busy, window_ns ? (double)m->instances[i].busy_ns / (double)window_ns : 0);
    m->instances[i].busy_ns = 0;
  }
  pthread_mutex_unlock(&m->mu);
}

/* ---- queries ------------------------------------------------------------------------- */

cinfer_status *cinfer_server_model_stats(cinfer_server *s, const char *name, int64_t version,
                                         cinfer_model_stats **out, size_t *n) {
  if (name && strlen(name) > CINFER_MODEL_NAME_MAX) return cinfer_model_name_check(name);
  pthread_mutex_lock(&s->mu);
  size_t cap = 0;
  for (model_entry *e = s->models; e; e = e->next)
    for (version_entry *ve = e->versions; ve; ve = ve->next) cap++;
  cinfer_model_stats *a = calloc(cap ? cap : 1, sizeof *a);
  size_t k = 0;
  bool found_model = name == NULL;
  for (model_entry *e = s->models; a && e; e = e->next) {
    if (name && strcmp(e->name, name)) continue;
    found_model = true;
    for (version_entry *ve = e->versions; ve; ve = ve->next) {
      if (!ve->model || (version > 0 && ve->version != version)) continue;
      pthread_mutex_lock(&ve->model->stats_mu);
      a[k++] = ve->model->stats;
      pthread_mutex_unlock(&ve->model->stats_mu);
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (!a) return cinfer_status_oom(NULL);
  if (!found_model) {
    free(a);
    return cinfer_status_new(CINFER_NOT_FOUND, "requested model '%s' does not exist", name);
  }
  if (name && k == 0) {
    free(a);
    return cinfer_status_new(version > 0 ? CINFER_NOT_FOUND : CINFER_UNAVAILABLE,
                             version > 0 ? "requested model '%s' version %lld is not loaded"
                                         : "requested model '%s' is not loaded%.0lld",
                             name, (long long)version);
  }
  *out = a;
  *n = k;
  return NULL;
}

cinfer_status *cinfer_server_metrics_text(cinfer_server *s, char **text, size_t *len) {
  metric_set(s->m_rss, metrics_process_resident_bytes());
  metric_set(s->m_cpu, metrics_process_cpu_seconds());
  uint64_t now = clock_now_ns();
  pthread_mutex_lock(&s->mu);
  uint64_t window = now - s->busy_window_start;
  if (window > 1000000000ull) { /* busy ratio over the last scrape interval (>= 1 s) */
    for (model_entry *e = s->models; e; e = e->next)
      for (version_entry *ve = e->versions; ve; ve = ve->next)
        if (ve->model) model_busy_update(ve->model, window);
    s->busy_window_start = now;
  }
  pthread_mutex_unlock(&s->mu);
  if (metrics_render(s->metrics, text, len))
    return cinfer_status_oom("rendering metrics");
  return NULL;
}
