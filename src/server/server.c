/* server.c: the in-process server object of cinfer.h (server_int.h): create (options,
 * threads, the reaper and poller threads, the initial loads) and destroy (stop the poller,
 * unload everything, wait for the reaper to destroy every model), and the small queries on
 * the object itself (live, draining, in flight).
 *
 * May call: lifecycle.c, table.c, backends.c, override.c, trace.c.
 *
 * The files of src/server form a DAG (docs/design/server.md, "Files"; the test
 * server_file_dag checks every file's "May call" line against its object's symbols):
 *
 *   server ─▶ lifecycle ─▶ ensemble ─▶ model ─▶ sequence ─▶ batch ─▶ request ─▶ stats
 *                                        │                                 └──▶ handle, trace
 *                                        └─▶ sequence_config ─▶ sequence_state
 *   table ─▶ handle        (read by lifecycle, ensemble, server)
 *   leaves: registry (backends.c above it), cfgview (-> backend_config), override, text
 *
 * The one way back up, ensemble.c loading its step models (lifecycle.c), goes through the
 * s->ensure_loaded hook that cinfer_server_create sets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "repo/scan.h"
#include "server/lifecycle.h"
#include "server/override.h"
#include "server/trace_internal.h"

metrics_registry *cinfer_server_metrics_registry(cinfer_server *s) { return s->metrics; }

/* ---- server lifecycle ------------------------------------------------------------------ */

extern void cinfer_register_builtin_backends(void);

cinfer_status *cinfer_server_create(const cinfer_server_options *opts, cinfer_server **out) {
  *out = NULL;
  cinfer_register_builtin_backends();
  if (!opts->model_repository)
    return cinfer_status_new(CINFER_INVALID_ARG, "no model repository given");
  char *repo = realpath(opts->model_repository, NULL);
  struct stat st;
  if (!repo || stat(repo, &st) != 0 || !S_ISDIR(st.st_mode)) {
    free(repo);
    return cinfer_status_new(CINFER_INVALID_ARG, "model repository '%s' is not a readable folder: %s",
                             opts->model_repository, strerror(errno ? errno : ENOTDIR));
  }
  char *bdir = NULL;
  if (opts->backend_directory && opts->backend_directory[0]) {
    bdir = realpath(opts->backend_directory, NULL);
    if (!bdir || stat(bdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
      cinfer_status *e = cinfer_status_new(CINFER_INVALID_ARG,
                                           "backend directory '%s' is not a readable folder: %s",
                                           opts->backend_directory,
                                           strerror(errno ? errno : ENOTDIR));
      free(bdir);
      free(repo);
      return e;
    }
  }
  cinfer_server *s = calloc(1, sizeof *s);
  if (!s) {
    free(bdir);
    free(repo);
    return cinfer_status_oom(NULL);
  }
  s->repo = repo;
  s->backend_dir = bdir;
  s->opts = *opts;
  s->opts.model_repository = s->repo;
  s->opts.backend_directory = s->backend_dir;
  s->opts.startup_models = NULL;
  s->ensure_loaded = server_ensure_loaded;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  s->threads = opts->threads > 0 ? opts->threads : (int)(ncpu > 0 ? ncpu : 1);
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->load_mu, NULL);
  pthread_mutex_init(&s->reap_mu, NULL);
  pthread_cond_init(&s->reap_cv, NULL);
  pthread_cond_init(&s->poll_cv, NULL);
  s->metrics = metrics_registry_create();
  s->trace = trace_mgr_create();
  s->busy_window_start = clock_now_ns();
  if (!s->metrics || !s->trace || pthread_create(&s->reaper, NULL, reaper_main, s)) {
    metrics_registry_destroy(s->metrics);
    trace_mgr_destroy(s->trace);
    free(s->backend_dir);
    free(s->repo);
    free(s);
    return cinfer_status_new(CINFER_INTERNAL, "cannot start the server");
  }
  const char *none[] = {NULL};
  s->m_cpu = metrics_series(metrics_family(s->metrics, "cinfer_process_cpu_seconds_total",
                                           "CPU time used by the process", METRIC_COUNTER, NULL, 0), none);
  s->m_rss = metrics_series(metrics_family(s->metrics, "cinfer_process_resident_memory_bytes",
                                           "Resident memory of the process", METRIC_GAUGE, NULL, 0), none);

  /* Initial loads. */
  char **names = NULL;
  size_t n = 0;
  cinfer_status *lst = repo_list_models(s->repo, &names, &n);
  if (lst) {
    cinfer_server_destroy(s);
    return lst;
  }
  for (size_t i = 0; i < n; i++) {
    bool load = opts->control_mode != CINFER_MODEL_CONTROL_EXPLICIT;
    for (size_t k = 0; !load && k < opts->n_startup_models; k++)
      if (!strcmp(opts->startup_models[k], "*") || !strcmp(opts->startup_models[k], names[i])) load = true;
    if (load && !table_entry_ready(s, names[i])) { /* not loaded already as an ensemble step */
      cinfer_status_free(lifecycle_load(s, names[i], NULL));
    } else { /* listed in the index as UNAVAILABLE */
      pthread_mutex_lock(&s->mu);
      table_get(s, names[i]);
      pthread_mutex_unlock(&s->mu);
    }
  }
  repo_names_free(names, n);
  for (size_t k = 0; k < opts->n_startup_models; k++) {
    if (!strcmp(opts->startup_models[k], "*")) continue;
    pthread_mutex_lock(&s->mu);
    bool known = table_find(s, opts->startup_models[k]) != NULL;
    pthread_mutex_unlock(&s->mu);
    if (!known) LOG_E("--load-model '%s': no such model in the repository", opts->startup_models[k]);
  }
  if (opts->control_mode == CINFER_MODEL_CONTROL_POLL) {
    if (pthread_create(&s->poller, NULL, poller_main, s) == 0) s->poller_started = true;
  }
  *out = s;
  return NULL;
}

void cinfer_server_destroy(cinfer_server *s) {
  if (!s) return;
  atomic_store(&s->shutting_down, true);
  pthread_mutex_lock(&s->reap_mu);
  bool poller = s->poller_started;
  s->poll_stop = true; /* stop the poller first; the reaper keeps running */
  pthread_cond_broadcast(&s->poll_cv);
  pthread_mutex_unlock(&s->reap_mu);
  if (poller) pthread_join(s->poller, NULL);
  /* Unload everything; the reaper destroys each model once drained. */
  pthread_mutex_lock(&s->load_mu);
  pthread_mutex_lock(&s->mu);
  for (model_entry *e = s->models; e; e = e->next) unload_entry_locked(s, e);
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&s->load_mu);
  pthread_mutex_lock(&s->reap_mu);
  s->reaper_stop = true;
  pthread_cond_broadcast(&s->reap_cv);
  pthread_mutex_unlock(&s->reap_mu);
  /* The reaper exits when the list is empty, stop is set and every model has been
   * destroyed (invariant 3): it waits for the requests still in flight to release theirs.
   * A caller that never releases a model it acquired makes this wait forever (a bug). */
  pthread_join(s->reaper, NULL);
  for (model_entry *e = s->models, *en; e; e = en) {
    en = e->next;
    for (version_entry *ve = e->versions, *vn; ve; ve = vn) {
      vn = ve->next;
      free(ve->reason);
      free(ve->cfg_json);
      free(ve);
    }
    free(e->reason);
    free(e->name);
    override_dir_remove(e->override_dir);
    free(e->override_dir);
    free(e);
  }
  metrics_registry_destroy(s->metrics);
  trace_mgr_destroy(s->trace); /* every request is gone: so is every trace */
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->load_mu);
  pthread_mutex_destroy(&s->reap_mu);
  pthread_cond_destroy(&s->reap_cv);
  pthread_cond_destroy(&s->poll_cv);
  free(s->backend_dir);
  free(s->repo);
  free(s);
}

bool cinfer_server_is_live(const cinfer_server *s) { return s != NULL; }

void cinfer_server_begin_shutdown(cinfer_server *s) { atomic_store(&s->draining, true); }
size_t cinfer_server_inflight(const cinfer_server *s) {
  return atomic_load(&((cinfer_server *)s)->inflight);
}
