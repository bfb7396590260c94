/* lifecycle.c: model control. Loads (startup, explicit, polling, load-with-config and
 * `file:` overrides), warmup, unloads (with dependents and ensembles that use a step),
 * the repository poller, and the reaper that destroys a version once its last request
 * has completed. The states these moves follow are drawn at the top of table.c.
 *
 * May call: table.c, model.c (create, enqueue for warmup, destroy), request.c, handle.c,
 * ensemble.c (ensemble_depends_on), override.c, cfgview.c, src/repo.
 *
 * Reload (explicit load of a loaded model that changed, or a change seen by polling): the
 * new versions are loaded and made READY first, then the old ones leave the table
 * (UNLOADING) and are destroyed by the reaper once their last request has completed, so no
 * admitted request ever fails because of a reload.
 *
 * What an explicit load of a model already loaded does is Triton's rule (model repository
 * manager, InitializeModelInfo): with a `config` parameter or `file:` contents it always
 * loads; without them it loads only when the model's files changed since its last load that
 * succeeded (load_is_noop), so an earlier `config` override stays in force until a file
 * changes, and a load from `file:` contents is always followed by a load from the
 * repository. A load that fails leaves that record as it was (Triton reverts its timestamp),
 * so the next load tries again; an unload forgets it.
 *
 * Model control: in modes none and poll the load/unload API is refused as Triton refuses
 * it (UNAVAILABLE, HTTP 503, Triton's wording); the server's own loads (startup, polling)
 * go through lifecycle_load(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/log.h"
#include "repo/config.h"
#include "repo/scan.h"
#include "server/ensemble.h"
#include "server/lifecycle.h"
#include "server/override.h"

/* Counts a model that model_create returned (invariant 3). */
static void live_add(cinfer_server *s) {
  pthread_mutex_lock(&s->reap_mu);
  s->n_live++;
  pthread_mutex_unlock(&s->reap_mu);
}

/* ---- reaper --------------------------------------------------------------------------- */

void *reaper_main(void *arg) {
  cinfer_server *s = arg;
  pthread_mutex_lock(&s->reap_mu);
  for (;;) {
    while (!s->reap_list && !(s->reaper_stop && s->n_live == 0))
      pthread_cond_wait(&s->reap_cv, &s->reap_mu);
    if (!s->reap_list) break; /* stopped, and every model is destroyed */
    cinfer_model *m = s->reap_list;
    s->reap_list = m->reap_next;
    pthread_mutex_unlock(&s->reap_mu);
    char name[CINFER_MODEL_NAME_MAX + 1]; /* every loaded name fits (load_model_locked) */
    snprintf(name, sizeof name, "%s", m->name);
    int64_t version = m->version;
    model_destroy_now(m);
    /* The table entry (if still UNLOADING) now becomes UNAVAILABLE. */
    pthread_mutex_lock(&s->mu);
    model_entry *e = table_find(s, name);
    version_entry *ve = e ? table_find_version(e, version) : NULL;
    if (ve && ve->state == V_UNLOADING) {
      table_set_state(ve, V_UNAVAILABLE);
      table_set_reason(&ve->reason, "unloaded");
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&s->reap_mu);
    s->n_live--;
  }
  pthread_mutex_unlock(&s->reap_mu);
  return NULL;
}

/* ---- warmup --------------------------------------------------------------------------- */

typedef struct warm_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  cinfer_status *err;
} warm_wait;

static void warm_cb(void *user, cinfer_response *resp, uint32_t flags) {
  warm_wait *w = user;
  const cinfer_status *e = cinfer_response_error(resp);
  pthread_mutex_lock(&w->mu);
  if (e && !w->err) w->err = cinfer_status_new(cinfer_status_code(e), "%s", cinfer_status_message(e));
  if (flags & CINFER_RESPONSE_FINAL) {
    w->done = true;
    pthread_cond_signal(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  cinfer_response_free(resp);
}

/* Runs the model_warmup samples through the model (before it is READY). */
static cinfer_status *run_warmup(cinfer_server *s, cinfer_model *m) {
  int nw = cfg_warmup_count(m->config);
  for (int i = 0; i < nw; i++) {
    const char *wname;
    uint32_t bs, count;
    int nin;
    cfg_warmup(m->config, i, &wname, &bs, &count, &nin);
    for (uint32_t rep = 0; rep < count; rep++) {
      cinfer_request *r;
      cinfer_status *st = cinfer_request_create(m, &r);
      if (st) return st;
      for (int j = 0; j < nin && !st; j++) {
        cfg_warmup_input wi;
        cfg_warmup_input_at(m->config, i, j, &wi);
        cinfer_tensor t = {.name = wi.name, .dtype = wi.dtype};
        int bd = m->batching ? 1 : 0;
        if (bd) t.shape[0] = bs ? bs : 1;
        t.ndim = wi.ndim + bd;
        memcpy(t.shape + bd, wi.dims, sizeof(int64_t) * (size_t)wi.ndim);
        int64_t el = cinfer_shape_elements(t.shape, t.ndim);
        size_t es = wi.dtype == CINFER_TYPE_BYTES ? 4 : cinfer_dtype_size(wi.dtype);
        if (el < 0 || el > (1 << 26)) {
          st = cinfer_status_new(CINFER_INVALID_ARG, "warmup '%s': input '%s' is too large", wname, wi.name);
          break;
        }
        size_t bytes = (size_t)el * es;
        unsigned char *buf = calloc(1, bytes ? bytes : 1);
        if (!buf) {
          st = cinfer_status_oom(NULL);
          break;
        }
        if (wi.source == 1) /* random data; BYTES stay empty strings */
          for (size_t k = 0; k < bytes && wi.dtype != CINFER_TYPE_BYTES; k++)
            buf[k] = (unsigned char)(rand() & 0x3f);
        else if (wi.source == 2) {
          char path[4096];
          snprintf(path, sizeof path, "%s/warmup/%s", m->model_dir, wi.file ? wi.file : "");
          FILE *f = fopen(path, "rb");
          size_t got = f ? fread(buf, 1, bytes, f) : 0;
          if (f) fclose(f);
          if (got != bytes) {
            free(buf);
            st = cinfer_status_new(CINFER_INVALID_ARG, "warmup '%s': cannot read %zu bytes from %s",
                                   wname, bytes, path);
            break;
          }
        }
        t.data = buf;
        t.byte_size = bytes;
        if ((st = cinfer_request_add_input_owned(r, &t, buf))) free(buf);
      }
      warm_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, NULL};
      if (!st) {
        cinfer_request_set_callback(r, warm_cb, &w);
        atomic_fetch_add(&s->inflight, 1);
        cinfer_request_ref(r);
        if ((st = model_enqueue(m, r))) {
          cinfer_request_release(r);
          atomic_fetch_sub(&s->inflight, 1);
        }
      }
      if (!st) {
        pthread_mutex_lock(&w.mu);
        while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        st = w.err;
      }
      cinfer_request_release(r);
      if (st) return cinfer_status_prefix(st, "warmup '%s'", wname);
    }
  }
  return NULL;
}

/* ---- load / unload -------------------------------------------------------------------- */

static cinfer_status *load_versions_locked(cinfer_server *s, model_entry *e, const char *name,
                                           const char *dir, const char *config_json);

static void log_kv_model(const char *what, const char *name, int64_t v, const char *reason) {
  char ver[32];
  snprintf(ver, sizeof ver, "%lld", (long long)v);
  const char *kv[] = {"model", name, "version", ver, reason ? "reason" : NULL, reason, NULL};
  log_event(reason ? LOG_ERROR : LOG_INFO, kv, "%s", what);
}

/* With s->mu held: whether a load of e from the repository without `config` (files with
 * fingerprint fp) leaves it as it is: its last load succeeded, nothing unloaded it since, a
 * version is still READY, and no file below its folder changed (name, size or mtime; Triton
 * compares the newest mtime). */
static bool load_is_noop(const model_entry *e, uint64_t fp) {
  if (!e || !e->loaded_ok || e->loaded_fp != fp) return false;
  for (const version_entry *ve = e->versions; ve; ve = ve->next)
    if (ve->state == V_READY) return true;
  return false;
}

/* Loads the versions the policy selects, from config_json (Triton's load-with-config:
 * it replaces config.pbtxt for this load) or config.pbtxt when NULL; from the folder
 * `override` (a load with `file:` contents) or the repository's when NULL. A load from the
 * repository without config of an unchanged model does nothing (load_is_noop). Called with
 * load_mu held, not mu. */
static cinfer_status *load_model_locked(cinfer_server *s, const char *name,
                                        const char *config_json, const char *override) {
  cinfer_status *bad = cinfer_model_name_check(name);
  if (bad) return cinfer_status_prefix(bad, "failed to load");
  char dir[4096];
  if (strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
    return cinfer_status_new(CINFER_INVALID_ARG, "invalid model name '%s'", name);
  if (override) snprintf(dir, sizeof dir, "%s", override);
  else snprintf(dir, sizeof dir, "%s/%s", s->repo, name);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return cinfer_status_new(CINFER_NOT_FOUND, "failed to load '%s': no such model in the repository", name);
  uint64_t fp = repo_dir_fingerprint(dir, REPO_FINGERPRINT_DEPTH);

  pthread_mutex_lock(&s->mu);
  model_entry *e = table_find(s, name);
  if (!config_json && !override && load_is_noop(e, fp)) {
    pthread_mutex_unlock(&s->mu);
    LOG_I("model '%s' is unchanged since its last load (same files, no config): left as it is", name);
    return NULL;
  }
  if (!e) e = table_get(s, name);
  if (e) {
    e->wanted = true;
    e->fingerprint = fp;
  }
  pthread_mutex_unlock(&s->mu);
  if (!e) return cinfer_status_oom(NULL);
  cinfer_status *st = load_versions_locked(s, e, name, dir, config_json);
  if (!st) { /* Triton's model info: the files as loaded; a `file:` load is not from them */
    pthread_mutex_lock(&s->mu);
    e->loaded_ok = !override;
    e->loaded_fp = fp;
    pthread_mutex_unlock(&s->mu);
  }
  return st;
}

/* load_model_locked's work once e is in the table: the versions of dir. */
static cinfer_status *load_versions_locked(cinfer_server *s, model_entry *e, const char *name,
                                           const char *dir, const char *config_json) {
  cinfer_model_config *probe = NULL;
  cinfer_status *st = config_json ? cfg_load_json(dir, name, config_json, &probe)
                                  : cfg_load(dir, name, &probe);
  if (st) {
    pthread_mutex_lock(&s->mu);
    table_set_reason(&e->reason, cinfer_status_message(st));
    pthread_mutex_unlock(&s->mu);
    log_kv_model("model config rejected", name, -1, cinfer_status_message(st));
    return cinfer_status_prefix(st, "failed to load '%s'", name);
  }
  int64_t *avail = NULL, *sel = NULL;
  size_t na = 0, ns = 0;
  if ((st = repo_list_versions(dir, &avail, &na)) || (na && !(sel = malloc(na * sizeof *sel)))) {
    if (!st) st = cinfer_status_oom(name);
    free(avail);
    cfg_free(probe);
    return cinfer_status_prefix(st, "failed to load '%s'", name);
  }
  int num_latest, n_specific;
  const int64_t *specific;
  cfg_version_kind vk = cfg_version_policy(probe, &num_latest, &specific, &n_specific);
  for (size_t i = 0; i < na; i++) {
    bool take = vk == CFG_VERSIONS_ALL || (vk == CFG_VERSIONS_LATEST && (int)i < num_latest);
    for (int k = 0; vk == CFG_VERSIONS_SPECIFIC && k < n_specific; k++)
      if (specific[k] == avail[i]) take = true;
    if (take) sel[ns++] = avail[i];
  }
  free(avail);
  cfg_free(probe);
  if (ns == 0) {
    free(sel);
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "failed to load '%s': no version folder matches the version policy", name);
    pthread_mutex_lock(&s->mu);
    table_set_reason(&e->reason, cinfer_status_message(st));
    pthread_mutex_unlock(&s->mu);
    return st;
  }
  pthread_mutex_lock(&s->mu);
  table_set_reason(&e->reason, NULL);
  pthread_mutex_unlock(&s->mu);

  /* Load each selected version into a fresh model; the old one (if any) keeps serving. A
   * READY version whose folder, shared files and configuration are those it was loaded
   * from stays as it is (Triton's AsyncLoad: not IsModelVersionModified, and a config
   * change that does not require a reload; Triton updates instance_group and
   * version_policy in place, cinfer keeps a version only when the whole config is the
   * same). */
  cinfer_status *first_err = NULL;
  uint64_t ofp = repo_model_files_fingerprint(dir, REPO_FINGERPRINT_DEPTH);
  pthread_mutex_lock(&s->mu);
  bool same_shared = e->other_fp == ofp;
  pthread_mutex_unlock(&s->mu);
  for (size_t i = 0; i < ns; i++) {
    int64_t v = sel[i];
    char vdir[4096];
    snprintf(vdir, sizeof vdir, "%s/%lld", dir, (long long)v);
    uint64_t vfp = repo_dir_fingerprint(vdir, REPO_FINGERPRINT_DEPTH - 1);
    pthread_mutex_lock(&s->mu);
    version_entry *ve = table_find_version(e, v);
    if (!ve && (ve = calloc(1, sizeof *ve))) { /* V_UNAVAILABLE */
      ve->version = v;
      ve->next = e->versions;
      e->versions = ve;
    }
    if (ve && ve->state != V_READY) table_set_state(ve, V_LOADING);
    pthread_mutex_unlock(&s->mu);
    if (!ve) return cinfer_status_oom(NULL);

    cinfer_model_config *cfg = NULL;
    cinfer_model *m = NULL;
    char *js = NULL;
    uint64_t t0 = clock_now_ns();
    st = config_json ? cfg_load_json(dir, name, config_json, &cfg) : cfg_load(dir, name, &cfg);
    if (!st) {
      js = model_config_to_json(cfg); /* before the backend completes it; NULL: reload */
      pthread_mutex_lock(&s->mu);
      bool keep = same_shared && ve->state == V_READY && ve->model && !ensemble_config_is(cfg) &&
                  !strcmp(ve->model->model_dir, dir) && ve->files_fp == vfp && js && ve->cfg_json &&
                  !strcmp(js, ve->cfg_json);
      pthread_mutex_unlock(&s->mu);
      if (keep) {
        cfg_free(cfg);
        free(js);
        log_kv_model("version unchanged (same files and config): kept as it is", name, v, NULL);
        continue;
      }
    }
    if (!st) st = model_create(s, name, v, dir, cfg, ensemble_config_is(cfg) ? ensemble_kind() : NULL,
                              &m); /* takes cfg */
    if (!st) live_add(s);
    if (!st && (st = run_warmup(s, m))) {
      cinfer_model_release(m);
      m = NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (st) {
      if (ve->state == V_LOADING) table_set_state(ve, V_UNAVAILABLE); /* a READY one keeps serving */
      table_set_reason(&ve->reason, cinfer_status_message(st));
      pthread_mutex_unlock(&s->mu);
      log_kv_model("failed to load model", name, v, cinfer_status_message(st));
      /* Triton's words (LoadUnloadModels), which its L0_lifecycle tests look for */
      if (!first_err)
        first_err = cinfer_status_prefix(st, "load failed for model '%s': version %lld is at UNAVAILABLE state",
                                         name, (long long)v);
      else cinfer_status_free(st);
      free(js);
      continue;
    }
    cinfer_model *old = ve->model;
    ve->model = m;
    ve->files_fp = vfp;
    free(ve->cfg_json);
    ve->cfg_json = js;
    table_set_state(ve, V_READY);
    table_set_reason(&ve->reason, NULL);
    pthread_mutex_unlock(&s->mu);
    cinfer_model_release(old); /* drains, then the reaper unloads it */
    char msg[128];
    snprintf(msg, sizeof msg, "loaded model in %.1f ms", (double)(clock_now_ns() - t0) / 1e6);
    log_kv_model(msg, name, v, NULL);
  }
  /* Versions no longer selected go away. */
  /* Versions the policy no longer selects leave the table, one at a time: each model is
   * released with s->mu dropped (a release may hand it to the reaper). No allocation, so
   * nothing here can fail half-way. */
  for (;;) {
    cinfer_model *drop = NULL;
    pthread_mutex_lock(&s->mu);
    for (version_entry *ve = e->versions; ve && !drop; ve = ve->next) {
      bool keep = false;
      for (size_t i = 0; i < ns; i++)
        if (sel[i] == ve->version) keep = true;
      if (!keep && ve->model) {
        drop = ve->model;
        ve->model = NULL;
        table_set_state(ve, V_UNLOADING);
      }
    }
    pthread_mutex_unlock(&s->mu);
    if (!drop) break;
    cinfer_model_release(drop);
  }
  free(sel);
  if (!first_err) {
    pthread_mutex_lock(&s->mu);
    e->other_fp = ofp;
    pthread_mutex_unlock(&s->mu);
  }
  return first_err;
}

/* Every version leaves the table, one at a time, each released with s->mu dropped (no
 * array: a model may have any number of versions, and every one must be released or the
 * reaper waits for it forever). */
void unload_entry_locked(cinfer_server *s, model_entry *e) {
  e->wanted = false;
  e->loaded_ok = false;
  for (;;) {
    cinfer_model *drop = NULL;
    for (version_entry *ve = e->versions; ve && !drop; ve = ve->next)
      if (ve->model) {
        drop = ve->model;
        ve->model = NULL;
        table_set_state(ve, V_UNLOADING);
      }
    if (!drop) break;
    pthread_mutex_unlock(&s->mu);
    cinfer_model_release(drop);
    pthread_mutex_lock(&s->mu);
  }
}

/* After a load from dir (NULL: the repository) with load_mu held: the override directory
 * the entry no longer loads from, to be removed by the caller (NULL when none). A directory
 * that a READY version still uses (the new load failed) stays. */
static char *override_release_locked(cinfer_server *s, const char *name, char *dir) {
  pthread_mutex_lock(&s->mu);
  model_entry *e = table_find(s, name);
  bool dir_used = false, old_used = false;
  for (version_entry *ve = e ? e->versions : NULL; ve; ve = ve->next)
    if (ve->model) {
      if (dir && !strcmp(ve->model->model_dir, dir)) dir_used = true;
      if (e->override_dir && !strcmp(ve->model->model_dir, e->override_dir)) old_used = true;
    }
  char *drop = NULL;
  if (e && dir && dir_used) { /* now loaded from dir: the old one goes */
    drop = e->override_dir;
    e->override_dir = dir;
  } else if (dir) { /* nothing loaded from dir */
    drop = dir;
  } else if (e && e->override_dir && !old_used) {
    drop = e->override_dir;
    e->override_dir = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  return drop;
}
/* ensemble.h: with load_mu held. A model with a READY version is left as it is. */
cinfer_status *server_ensure_loaded(cinfer_server *s, const char *name) {
  return table_entry_ready(s, name) ? NULL : load_model_locked(s, name, NULL, NULL);
}

/* With s->mu held: `name` left the table, so every loaded ensemble with a step on it
 * unloads too, with the reason, and so on up (Triton: an ensemble whose composing model
 * is unloaded becomes unavailable). The table is walked again after each unload, as
 * unload_entry_locked drops s->mu. */
static void unload_dependents_locked(cinfer_server *s, const char *name) {
  for (bool again = true; again;) {
    again = false;
    for (model_entry *e = s->models; e && !again; e = e->next) {
      bool dep = false;
      for (version_entry *ve = e->versions; ve; ve = ve->next)
        if (ve->model && ensemble_depends_on(ve->model, name)) dep = true;
      if (!dep) continue;
      char msg[512];
      snprintf(msg, sizeof msg, "ensemble '%s' depends on '%s' which has no loaded version "
               "(it was unloaded)", e->name, name);
      table_set_reason(&e->reason, msg);
      LOG_I("unloading ensemble '%s': its step model '%s' was unloaded", e->name, name);
      char *ename = strdup(e->name);
      unload_entry_locked(s, e);
      if (ename) unload_dependents_locked(s, ename);
      free(ename);
      again = true;
    }
  }
}

/* The server's own loads (startup, polling), whatever the control mode. */
cinfer_status *lifecycle_load(cinfer_server *s, const char *name, const char *config_json) {
  if (atomic_load(&s->shutting_down))
    return cinfer_status_new(CINFER_UNAVAILABLE, "server is shutting down");
  pthread_mutex_lock(&s->load_mu);
  cinfer_status *st = load_model_locked(s, name, config_json, NULL);
  char *drop = override_release_locked(s, name, NULL);
  pthread_mutex_unlock(&s->load_mu);
  override_dir_remove(drop);
  free(drop);
  return st;
}

/* Triton refuses the model control API unless the mode is explicit, with this wording
 * (model_repository_manager.cc, LoadUnloadModels) and code UNAVAILABLE (HTTP 503). */
static cinfer_status *control_refused(const cinfer_server *s) {
  if (s->opts.control_mode == CINFER_MODEL_CONTROL_EXPLICIT) return NULL;
  return cinfer_status_new(CINFER_UNAVAILABLE,
                           "explicit model load / unload is not allowed if polling is enabled "
                           "(model control mode is %s; start the server with "
                           "--model-control-mode explicit)",
                           s->opts.control_mode == CINFER_MODEL_CONTROL_POLL ? "poll" : "none");
}

cinfer_status *cinfer_server_load_model(cinfer_server *s, const char *name, const char *config_json) {
  cinfer_status *st = control_refused(s);
  return st ? st : lifecycle_load(s, name, config_json);
}

cinfer_status *cinfer_server_unload_model(cinfer_server *s, const char *name) {
  return cinfer_server_unload_model_dependents(s, name, false);
}

/* With load_mu and mu held: adds the step models of name's loaded ensemble versions to
 * list (no duplicates, at most cap). */
static void add_steps_locked(cinfer_server *s, const char *name, char **list, size_t *n, size_t cap) {
  model_entry *e = table_find(s, name);
  for (version_entry *ve = e ? e->versions : NULL; ve; ve = ve->next) {
    const cinfer_model_config *c = ve->model ? ve->model->config : NULL;
    size_t ns = c ? cfg_ensemble_step_count(c) : 0;
    for (size_t k = 0; k < ns; k++) {
      const char *step = cfg_ensemble_step_model(c, k);
      bool have = false;
      for (size_t i = 0; i < *n; i++)
        if (!strcmp(list[i], step)) have = true;
      if (!have && *n < cap && (list[*n] = strdup(step))) (*n)++;
    }
  }
}

cinfer_status *cinfer_server_unload_model_dependents(cinfer_server *s, const char *name,
                                                     bool unload_dependents) {
  cinfer_status *refused = control_refused(s);
  if (refused) return refused;
  if (name && strlen(name) > CINFER_MODEL_NAME_MAX)
    return cinfer_status_prefix(cinfer_model_name_check(name), "failed to unload");
  enum { MAX_DEPS = 256 };
  char *list[MAX_DEPS];
  size_t n = 0;
  pthread_mutex_lock(&s->load_mu);
  pthread_mutex_lock(&s->mu);
  model_entry *e = table_find(s, name);
  cinfer_status *st = NULL;
  char *drop[MAX_DEPS + 1];
  size_t n_drop = 0;
  if (!e) {
    st = cinfer_status_new(CINFER_NOT_FOUND, "failed to unload '%s': no such model", name);
  } else {
    list[n++] = strdup(name);
    if (!list[0]) n = 0, st = cinfer_status_oom(NULL);
    /* Triton's unload_dependents: the models the ensemble was composed of go too (steps of
     * steps as well: the list grows while it is walked). */
    for (size_t i = 0; unload_dependents && i < n; i++) add_steps_locked(s, list[i], list, &n, MAX_DEPS);
    for (size_t i = 0; i < n; i++) {
      model_entry *d = table_find(s, list[i]);
      if (!d) continue;
      unload_entry_locked(s, d); /* drops and retakes mu */
      unload_dependents_locked(s, list[i]); /* ensembles with a step on it go too */
      if ((d = table_find(s, list[i])) && d->override_dir) {
        drop[n_drop++] = d->override_dir;
        d->override_dir = NULL;
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&s->load_mu);
  for (size_t i = 0; i < n; i++) {
    if (!st) LOG_I("unloading model '%s'%s", list[i], i ? " (unload_dependents)" : "");
    free(list[i]);
  }
  for (size_t i = 0; i < n_drop; i++) {
    override_dir_remove(drop[i]);
    free(drop[i]);
  }
  return st;
}

cinfer_status *cinfer_server_load_model_files(cinfer_server *s, const char *name,
                                              const char *config_json,
                                              const cinfer_model_file *files, size_t n) {
  cinfer_status *st = control_refused(s);
  if (st) return st;
  if (!config_json)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "failed to load '%s', failed to poll from model repository: 'file:' "
                             "parameters need a 'config' parameter (the model's folder in the "
                             "repository is not used)", name);
  if (atomic_load(&s->shutting_down)) return cinfer_status_new(CINFER_UNAVAILABLE, "server is shutting down");
  char *dir = NULL;
  if ((st = override_dir_create(files, n, &dir))) return cinfer_status_prefix(st, "failed to load '%s'", name);
  pthread_mutex_lock(&s->load_mu);
  st = load_model_locked(s, name, config_json, dir);
  char *drop = override_release_locked(s, name, dir);
  pthread_mutex_unlock(&s->load_mu);
  override_dir_remove(drop);
  free(drop);
  return st;
}

static void poll_once(cinfer_server *s) {
  char **names;
  size_t n;
  cinfer_status *st = repo_list_models(s->repo, &names, &n);
  if (st) { /* the repository went away or memory ran out: keep what is loaded */
    LOG_E("repository poll: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    return;
  }
  /* New or changed folders load; removed ones unload. */
  for (size_t i = 0; i < n; i++) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", s->repo, names[i]);
    uint64_t fp = repo_dir_fingerprint(dir, REPO_FINGERPRINT_DEPTH);
    pthread_mutex_lock(&s->mu);
    model_entry *e = table_find(s, names[i]);
    bool changed = !e || e->fingerprint != fp;
    pthread_mutex_unlock(&s->mu);
    if (changed) {
      LOG_I("repository change: (re)loading '%s'", names[i]);
      cinfer_status_free(lifecycle_load(s, names[i], NULL));
    }
  }
  pthread_mutex_lock(&s->load_mu);
  pthread_mutex_lock(&s->mu);
  for (model_entry *e = s->models; e; e = e->next) {
    bool present = false;
    for (size_t i = 0; i < n; i++)
      if (names[i] && !strcmp(names[i], e->name)) present = true;
    if (!present && e->wanted) {
      LOG_I("repository change: '%s' removed, unloading", e->name);
      unload_entry_locked(s, e);
      unload_dependents_locked(s, e->name);
    }
  }
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&s->load_mu);
  repo_names_free(names, n);
}

void *poller_main(void *arg) {
  cinfer_server *s = arg;
  pthread_mutex_lock(&s->reap_mu);
  while (!s->poll_stop) {
    struct timespec ts = clock_abs_after_ms(1000ull * (s->opts.repository_poll_secs > 0 ? s->opts.repository_poll_secs : 15));
    pthread_cond_timedwait(&s->poll_cv, &s->reap_mu, &ts);
    if (s->poll_stop) break;
    pthread_mutex_unlock(&s->reap_mu);
    poll_once(s);
    pthread_mutex_lock(&s->reap_mu);
  }
  pthread_mutex_unlock(&s->reap_mu);
  return NULL;
}
