/* server_int.h: the server object (struct cinfer_server), shared by the files of
 * src/server. server.c creates and destroys it; the other files read the fields through
 * the inline accessors below (so that calling them is no edge in the file graph: see
 * docs/design/server.md, "Files"), and table.c, lifecycle.c and stats.c use the table's
 * fields under the locks named here.
 *
 * Locking: s->mu guards the model table (entries, versions, states). s->load_mu serialises
 * load/unload operations so two loads of one model never interleave; it is taken before
 * s->mu, never after. A version's cinfer_model is reachable from the table only while its
 * state is READY; acquiring takes a reference under s->mu. s->reap_mu guards the reaper's
 * list, the live-model count and the two stop flags (the poller's and the reaper's). */
#ifndef CINFER_SERVER_SERVER_INT_H
#define CINFER_SERVER_SERVER_INT_H

#include "server/internal.h"

struct model_entry;
struct trace_mgr;

struct cinfer_server {
  char *repo;
  char *backend_dir;           /* realpath of opts.backend_directory, or NULL */
  cinfer_server_options opts;
  int threads;
  pthread_mutex_t mu, load_mu;
  struct model_entry *models;  /* the model table (table.h), sorted by name */
  metrics_registry *metrics;
  _Atomic size_t inflight;
  _Atomic bool shutting_down;  /* destroy has begun: new requests are refused */
  _Atomic bool draining;       /* begin_shutdown: not ready, still serving */

  pthread_t reaper, poller;
  pthread_mutex_t reap_mu;
  pthread_cond_t reap_cv;
  cinfer_model *reap_list;
  size_t n_live;               /* models created and not yet destroyed by the reaper */
  bool reaper_stop;            /* destroy: exit once the list is empty and n_live is 0 */
  bool poll_stop;              /* destroy: the poller exits */
  bool poller_started;
  pthread_cond_t poll_cv;
  uint64_t busy_window_start;
  metric *m_cpu, *m_rss;
  struct trace_mgr *trace;     /* trace.c: settings, sampling, trace files */
  /* lifecycle.c's server_ensure_loaded, set by cinfer_server_create: how ensemble.c (below
   * lifecycle.c in the file graph) loads an ensemble's step models. */
  cinfer_status *(*ensure_loaded)(cinfer_server *s, const char *name);
};

static inline struct trace_mgr *server_trace_mgr(cinfer_server *s) { return s->trace; }
/* NULL when none. */
static inline const char *server_backend_directory(const cinfer_server *s) { return s->backend_dir; }
static inline metrics_registry *server_metrics(cinfer_server *s) { return s->metrics; }
/* Kernel threads for model instances: the budget less the I/O threads, at least 1. */
static inline int server_thread_budget(const cinfer_server *s) {
  int t = s->threads - s->opts.io_threads;
  return t > 0 ? t : 1;
}
/* A request's FINAL response has been delivered (the drain at shutdown counts these). */
static inline void server_request_done(cinfer_server *s) { atomic_fetch_sub(&s->inflight, 1); }
/* m's last reference is gone: the reaper (lifecycle.c) destroys it on its own thread. */
static inline void server_reap(cinfer_server *s, cinfer_model *m) {
  pthread_mutex_lock(&s->reap_mu);
  m->reap_next = s->reap_list;
  s->reap_list = m;
  pthread_cond_signal(&s->reap_cv);
  pthread_mutex_unlock(&s->reap_mu);
}

#endif
