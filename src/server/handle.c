/* handle.c: the cinfer_model handle of cinfer.h: references and read-only accessors.
 * When the last reference goes the model is handed to the reaper (server_reap).
 *
 * May call: backend_config.c, cfgview.c. */
#include <string.h>

#include "server/backend_config.h"
#include "server/cfgview.h"
#include "server/server_int.h"

void model_ref(cinfer_model *m) { atomic_fetch_add(&m->refs, 1); }

void cinfer_model_release(cinfer_model *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) server_reap(m->server, m);
}

const char *cinfer_model_name(const cinfer_model *m) { return m->name; }
int64_t cinfer_model_version(const cinfer_model *m) { return m->version; }
const cinfer_config *cinfer_model_config_get(const cinfer_model *m) {
  return backend_config_of(m->config);
}
const char *cinfer_model_platform(const cinfer_model *m) {
  const char *p = cfg_platform(m->config);
  return p && p[0] ? p : m->backend->name;
}
const char *cinfer_model_backend_name(const cinfer_model *m) { return m->backend->name; }
const char *cinfer_model_directory(const cinfer_model *m) { return m->model_dir; }

bool cinfer_model_is_decoupled(const cinfer_model *m) {
  return (m->backend->flags & CINFER_BACKEND_DECOUPLED) != 0;
}
bool cinfer_model_answers_once(const cinfer_model *m) {
  if (cfg_decoupled(m->config)) return false;
  return !cinfer_model_is_decoupled(m) || (m->backend->flags & CINFER_BACKEND_DECOUPLED_BY_CONFIG);
}
