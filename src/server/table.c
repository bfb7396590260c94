/* table.c: the model table (table.h): entries and versions with their states, and the
 * queries of cinfer.h that read it (repository index, acquire, versions, readiness).
 * Loading and unloading, which move the states, are lifecycle.c's.
 *
 * May call: handle.c (model references). Nothing else of src/server.
 *
 * Version states (version_entry.state, under s->mu), with the function behind each move:
 *
 *                 load_model_locked                model_create + warmup ok
 *   UNAVAILABLE ───────────────────────▶ LOADING ─────────────────────────▶ READY ──┐
 *        ▲  ▲        load fails            │  ▲                                │  ▲   │ reload:
 *        │  └──────────────────────────────┘  │ load_model_locked              │  └───┘ the new
 *        │                                    │ (reload while draining)        │       model replaces
 *        │          reaper_main               │                                │       the old one,
 *        └────────────────────────────── UNLOADING ◀───────────────────────────┘       which drains
 *                   (model destroyed)           unload_entry_locked, or a version
 *                                               the policy no longer selects
 *
 * Invariants (asserted by table_set_state and table_check_version):
 *   1. ve->model != NULL exactly when ve->state == V_READY.
 *   2. Only the moves drawn above happen (v_allowed).
 *   3. Every cinfer_model that model_create returned is counted in s->n_live until the
 *      reaper has destroyed it; the reaper exits only when stopped, its list is empty and
 *      n_live is 0, so no released model is left undestroyed at cinfer_server_destroy
 *      (lifecycle.c keeps this one). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "server/table.h"

static const char *const vstate_names[V_COUNT_] = {"UNAVAILABLE", "LOADING", "READY", "UNLOADING"};

/* v_allowed[from][to]: the moves of the diagram in the file comment. */
static const bool v_allowed[V_COUNT_][V_COUNT_] = {
    [V_UNAVAILABLE] = {[V_LOADING] = true},
    [V_LOADING] = {[V_READY] = true, [V_UNAVAILABLE] = true},
    [V_READY] = {[V_READY] = true, [V_UNLOADING] = true},
    [V_UNLOADING] = {[V_UNAVAILABLE] = true, [V_LOADING] = true},
};

model_entry *table_find(cinfer_server *s, const char *name) {
  for (model_entry *e = s->models; e; e = e->next)
    if (!strcmp(e->name, name)) return e;
  return NULL;
}

model_entry *table_get(cinfer_server *s, const char *name) {
  model_entry *e = table_find(s, name);
  if (e) return e;
  e = calloc(1, sizeof *e);
  if (!e || !(e->name = strdup(name))) {
    free(e);
    return NULL;
  }
  model_entry **pp = &s->models; /* keep the table sorted by name */
  while (*pp && strcmp((*pp)->name, name) < 0) pp = &(*pp)->next;
  e->next = *pp;
  *pp = e;
  return e;
}

version_entry *table_find_version(model_entry *e, int64_t v) {
  for (version_entry *ve = e->versions; ve; ve = ve->next)
    if (ve->version == v) return ve;
  return NULL;
}

void table_set_reason(char **slot, const char *msg) {
  free(*slot);
  *slot = msg ? strdup(msg) : NULL;
}

void table_check_version(const version_entry *ve) {
  assert((ve->model != NULL) == (ve->state == V_READY)); /* invariant 1 */
  (void)ve;
}

/* Moves ve to `to` (with s->mu held); the caller has set ve->model to match. */
void table_set_state(version_entry *ve, vstate to) {
  if (!v_allowed[ve->state][to]) { /* invariant 2: a bug; loud in every build */
    LOG_E("version %lld: state %s -> %s is not a move of the state diagram",
          (long long)ve->version, vstate_names[ve->state], vstate_names[to]);
    assert(!"bad version state transition");
  }
  ve->state = to;
  table_check_version(ve);
}

bool table_entry_ready(cinfer_server *s, const char *name) {
  pthread_mutex_lock(&s->mu);
  model_entry *e = table_find(s, name);
  bool ready = false;
  for (version_entry *ve = e ? e->versions : NULL; ve; ve = ve->next)
    if (ve->state == V_READY) ready = true;
  pthread_mutex_unlock(&s->mu);
  return ready;
}

bool cinfer_server_is_ready(const cinfer_server *s) {
  cinfer_server *ms = (cinfer_server *)s;
  if (atomic_load(&ms->shutting_down) || atomic_load(&ms->draining)) return false;
  if (!s->opts.strict_readiness) return true;
  bool ready = true;
  pthread_mutex_lock(&ms->mu);
  for (model_entry *e = ms->models; e; e = e->next) {
    if (!e->wanted) continue;
    if (e->reason) ready = false;
    for (version_entry *ve = e->versions; ve; ve = ve->next)
      if (ve->state != V_READY && ve->state != V_UNLOADING && strcmp(ve->reason ? ve->reason : "", "unloaded"))
        ready = false;
  }
  pthread_mutex_unlock(&ms->mu);
  return ready;
}

/* ---- queries ------------------------------------------------------------------------- */

cinfer_status *cinfer_server_repository_index(cinfer_server *s, bool ready_only,
                                              cinfer_model_index_entry **out, size_t *n) {
  pthread_mutex_lock(&s->mu);
  size_t cap = 0;
  for (model_entry *e = s->models; e; e = e->next) {
    cap++;
    for (version_entry *ve = e->versions; ve; ve = ve->next) cap++;
  }
  cinfer_model_index_entry *a = calloc(cap ? cap : 1, sizeof *a);
  size_t k = 0;
  for (model_entry *e = s->models; a && e; e = e->next) {
    bool any = false;
    for (version_entry *ve = e->versions; ve; ve = ve->next) {
      if (ready_only && ve->state != V_READY) continue;
      a[k].name = strdup(e->name);
      a[k].version = ve->version;
      a[k].state = vstate_names[ve->state];
      a[k].reason = strdup(ve->reason ? ve->reason : "");
      k++;
      any = true;
    }
    if (!any && !ready_only) {
      a[k].name = strdup(e->name);
      a[k].version = -1;
      a[k].state = vstate_names[V_UNAVAILABLE];
      a[k].reason = strdup(e->reason ? e->reason : (e->wanted ? "" : "not loaded"));
      k++;
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (!a) return cinfer_status_oom(NULL);
  *out = a;
  *n = k;
  return NULL;
}

void cinfer_model_index_free(cinfer_model_index_entry *e, size_t n) {
  for (size_t i = 0; e && i < n; i++) {
    free(e[i].name);
    free(e[i].reason);
  }
  free(e);
}

cinfer_status *cinfer_model_name_check(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0) return cinfer_status_new(CINFER_INVALID_ARG, "model name is empty");
  if (n > CINFER_MODEL_NAME_MAX)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "model name of %zu bytes is longer than the limit of %d bytes "
                             "(CINFER_MODEL_NAME_MAX)", n, CINFER_MODEL_NAME_MAX);
  return NULL;
}

cinfer_status *cinfer_server_model_acquire(cinfer_server *s, const char *name, int64_t version,
                                           cinfer_model **out) {
  *out = NULL;
  if (name && strlen(name) > CINFER_MODEL_NAME_MAX) return cinfer_model_name_check(name);
  pthread_mutex_lock(&s->mu);
  model_entry *e = table_find(s, name);
  cinfer_status *st = NULL;
  if (!e) {
    st = cinfer_status_new(CINFER_NOT_FOUND, "Request for unknown model: '%s' is not found", name);
  } else {
    version_entry *best = NULL;
    for (version_entry *ve = e->versions; ve; ve = ve->next) {
      if (!ve->model) continue;
      if (version > 0 ? ve->version == version : (!best || ve->version > best->version)) best = ve;
    }
    if (best) {
      model_ref(best->model);
      *out = best->model;
    } else if (version > 0 && !table_find_version(e, version)) {
      st = cinfer_status_new(CINFER_NOT_FOUND, "unknown version %lld of model '%s'",
                             (long long)version, name);
    } else {
      const char *why = e->reason;
      version_entry *ve = version > 0 ? table_find_version(e, version) : e->versions;
      if (!why && ve && ve->reason) why = ve->reason;
      st = cinfer_status_new(CINFER_UNAVAILABLE, "model '%s'%s is not ready%s%s", name,
                             version > 0 ? " version" : "", why ? ": " : "", why ? why : "");
      if (version > 0) {
        cinfer_status_free(st);
        st = cinfer_status_new(CINFER_UNAVAILABLE, "model '%s' version %lld is not ready%s%s", name,
                               (long long)version, why ? ": " : "", why ? why : "");
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

static int cmp_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

size_t cinfer_server_model_versions(cinfer_server *s, const char *name, int64_t *versions, size_t cap) {
  size_t n = 0;
  pthread_mutex_lock(&s->mu);
  model_entry *e = table_find(s, name);
  for (version_entry *ve = e ? e->versions : NULL; ve && n < cap; ve = ve->next)
    if (ve->model) versions[n++] = ve->version;
  pthread_mutex_unlock(&s->mu);
  qsort(versions, n, sizeof *versions, cmp_desc);
  return n;
}
