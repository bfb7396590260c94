/* cfgview.c: the server's accessors over src/repo/config.h (see cfgview.h).
 *
 * May call: backend_config.c. */
#include "server/cfgview.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cinfer/backend.h"
#include "repo/config.h"
#include "server/backend_config.h"

const char *cfg_name(const cinfer_model_config *c) { return c->name; }
const char *cfg_platform(const cinfer_model_config *c) { return c->platform; }
size_t cfg_ensemble_step_count(const cinfer_model_config *c) { return c->n_ensemble_steps; }
const char *cfg_ensemble_step_model(const cinfer_model_config *c, size_t i) {
  return i < c->n_ensemble_steps ? c->ensemble_steps[i].model_name : "";
}

const char *cfg_backend(const cinfer_model_config *c) {
  if (c->backend && c->backend[0]) {
    if (!strcmp(c->backend, "onnx")) return "onnxruntime";
    return c->backend;
  }
  const char *p = c->platform ? c->platform : "";
  if (!strcmp(p, "onnxruntime_onnx")) return "onnxruntime";
  return p;
}

int64_t cfg_max_batch_size(const cinfer_model_config *c) { return c->max_batch_size; }
int cfg_input_count(const cinfer_model_config *c) { return (int)c->n_inputs; }
int cfg_output_count(const cinfer_model_config *c) { return (int)c->n_outputs; }

/* The backends' view of an input/output (backend_config.c) is the server's too. */
void cfg_input(const cinfer_model_config *c, int i, cfg_io *out) {
  cinfer_config_input(backend_config_of(c), (uint32_t)i, out);
}
void cfg_output(const cinfer_model_config *c, int i, cfg_io *out) {
  cinfer_config_output(backend_config_of(c), (uint32_t)i, out);
}

int cfg_instance_group_count(const cinfer_model_config *c) { return (int)c->n_instance_groups; }

void cfg_get_instance_group(const cinfer_model_config *c, int i, cfg_instance_group *out) {
  const model_instance_group *g = &c->instance_groups[i];
  memset(out, 0, sizeof *out);
  out->count = g->count > 0 ? g->count : 1;
  out->kind = g->kind == MODEL_INSTANCE_KIND_GPU ? CINFER_INSTANCE_KIND_GPU : CINFER_INSTANCE_KIND_CPU;
  out->n_gpus = (int)g->n_gpus; /* <= MODEL_CONFIG_MAX_ENTRIES (config.c) */
  out->gpus = g->gpus;
}

static void policy_view(const model_queue_policy *p, cfg_queue_policy *o) {
  o->reject_on_timeout = p->timeout_action == MODEL_TIMEOUT_REJECT;
  o->default_timeout_us = p->default_timeout_microseconds;
  o->allow_timeout_override = p->allow_timeout_override;
  o->max_queue_size = p->max_queue_size;
}

void cfg_get_dynamic_batching(const cinfer_model_config *c, cfg_dynamic_batching *out) {
  memset(out, 0, sizeof *out);
  if (!c->has_dynamic_batching) return;
  const model_dynamic_batching *d = &c->dynamic_batching;
  out->enabled = true;
  out->n_preferred = (int)d->n_preferred_batch_size; /* <= MODEL_CONFIG_MAX_ENTRIES */
  out->preferred = d->preferred_batch_size;
  out->max_queue_delay_us = d->max_queue_delay_microseconds;
  out->preserve_ordering = d->preserve_ordering;
  out->priority_levels = (uint32_t)d->priority_levels;
  out->default_priority_level = (uint32_t)d->default_priority_level;
  policy_view(&d->default_queue_policy, &out->default_policy);
  out->n_level_policies = (int)d->n_priority_queue_policy; /* <= MODEL_CONFIG_MAX_ENTRIES */
}

void cfg_level_policy(const cinfer_model_config *c, int i, uint32_t *level, cfg_queue_policy *out) {
  const model_priority_queue_policy *p = &c->dynamic_batching.priority_queue_policy[i];
  *level = (uint32_t)p->level;
  policy_view(&p->policy, out);
}

cfg_version_kind cfg_version_policy(const cinfer_model_config *c, int *num_latest,
                                    const int64_t **specific, int *n_specific) {
  const model_version_policy *v = &c->version_policy;
  *num_latest = v->num_versions ? (int)v->num_versions : 1;
  *specific = v->versions;
  *n_specific = (int)v->n_versions;
  return v->kind == MODEL_VERSION_ALL        ? CFG_VERSIONS_ALL
         : v->kind == MODEL_VERSION_SPECIFIC ? CFG_VERSIONS_SPECIFIC
                                             : CFG_VERSIONS_LATEST;
}

const char *cfg_parameter(const cinfer_model_config *c, const char *key) {
  return model_config_parameter(c, key);
}

bool cfg_decoupled(const cinfer_model_config *c) { return c->decoupled; }

/* Backends that model devices and so take KIND_GPU instances: the sim backend simulates
 * an accelerator (device_id picks the simulated device). Every other backend runs on the
 * CPU, so a KIND_GPU group for it would silently run on the CPU. (Backend ABI 2.0 is to
 * carry this as a backend flag.) */
static const char *const gpu_backends[] = {"sim"};

static cinfer_status *unsupported(const cinfer_model_config *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cinfer_status *unsupported(const cinfer_model_config *c, int line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *src = c->source_path && c->source_path[0] ? c->source_path : "config";
  if (line > 0) return cinfer_status_new(CINFER_UNSUPPORTED, "%s:%d: %s", src, line, msg);
  return cinfer_status_new(CINFER_UNSUPPORTED, "%s: %s", src, msg);
}

#define NOT_YET "is not implemented by cinfer; the model cannot load with it (remove it)"

cinfer_status *cfg_check_supported(const cinfer_model_config *c, const char *backend,
                                   bool backend_decoupled) {
  /* sequence_batching: its fields are checked where it is parsed (server/sequence.c) */
  if (c->ensemble_scheduling && strcmp(backend, "ensemble")) /* server/ensemble.c runs them */
    return unsupported(c, c->ensemble_scheduling->line, "ensemble_scheduling " NOT_YET);
  if (c->response_cache && c->response_cache_enable)
    return unsupported(c, c->response_cache->line, "response_cache { enable: true } " NOT_YET);
  if (c->optimization) return unsupported(c, c->optimization->line, "optimization " NOT_YET);
  if (c->decoupled && !backend_decoupled)
    return unsupported(c, c->model_transaction_policy ? c->model_transaction_policy->line : 0,
                       "model_transaction_policy { decoupled: true }: backend '%s' answers each "
                       "request once (it is not a decoupled backend)", backend);
  if (c->runtime && c->runtime[0]) return unsupported(c, 0, "runtime '%s' " NOT_YET, c->runtime);
  if (c->default_model_filename && c->default_model_filename[0] &&
      strcmp(c->default_model_filename, "model.onnx") && strcmp(c->default_model_filename, "model.gguf") &&
      strcmp(c->default_model_filename, "model.py"))
    return unsupported(c, 0, "default_model_filename '%s' is not implemented by cinfer; the model "
                       "cannot load with it (name the file model.onnx, model.gguf or model.py)",
                       c->default_model_filename);
  for (size_t i = 0; i < c->n_kept; i++) /* batch_input, model_operations, metric_tags, ... */
    if (strcmp(c->kept[i].name, "cc_model_filenames")) /* per-GPU file names: moot on the CPU */
      return unsupported(c, c->kept[i].node->line, "%s " NOT_YET, c->kept[i].name);
  for (size_t i = 0; i < c->n_inputs; i++)
    if (c->inputs[i].allow_ragged_batch)
      return unsupported(c, c->inputs[i].pos.line, "input '%s': allow_ragged_batch " NOT_YET,
                         c->inputs[i].name);
  bool gpu_ok = false;
  for (size_t i = 0; i < sizeof gpu_backends / sizeof *gpu_backends; i++)
    if (!strcmp(gpu_backends[i], backend)) gpu_ok = true;
  for (size_t i = 0; i < c->n_instance_groups; i++) {
    const model_instance_group *g = &c->instance_groups[i];
    const char *gn = g->name ? g->name : "";
    int line = g->pos.line;
    if ((g->kind == MODEL_INSTANCE_KIND_GPU || (g->kind == MODEL_INSTANCE_KIND_AUTO && g->n_gpus)) && !gpu_ok)
      return unsupported(c, line, "instance_group '%s': kind KIND_GPU, but backend '%s' runs on the CPU "
                         "and this server has no GPU support (Triton without a GPU refuses it "
                         "too); use KIND_CPU", gn, backend);
    if (g->tree && pbtxt_child(g->tree, "rate_limiter"))
      return unsupported(c, line, "instance_group '%s': rate_limiter " NOT_YET, gn);
    if (g->tree && pbtxt_child(g->tree, "secondary_devices"))
      return unsupported(c, line, "instance_group '%s': secondary_devices " NOT_YET, gn);
    if (g->host_policy && g->host_policy[0]) return unsupported(c, line, "instance_group '%s': host_policy " NOT_YET, gn);
    if (g->passive) return unsupported(c, line, "instance_group '%s': passive " NOT_YET, gn);
    if (g->n_profiles) return unsupported(c, line, "instance_group '%s': profile (TensorRT) " NOT_YET, gn);
  }
  return NULL;
}
/* label_filename (the classification extension's labels) names a readable file inside the
 * model directory; a name that leaves it ('/' or "..") or a file that cannot be read fails
 * the load naming the field. */
cinfer_status *cfg_check_label_files(const cinfer_model_config *c, const char *model_dir) {
  for (size_t i = 0; i < c->n_outputs; i++) {
    const char *lf = c->outputs[i].label_filename;
    if (!lf || !lf[0]) continue;
    if (strchr(lf, '/') || !strcmp(lf, "..") || !strcmp(lf, "."))
      return cinfer_status_new(CINFER_INVALID_ARG, "%s:%d: output '%s': label_filename '%s' must "
                               "name a file in the model directory", c->source_path,
                               c->outputs[i].pos.line, c->outputs[i].name, lf);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", model_dir, lf);
    FILE *f = fopen(path, "r");
    if (!f)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s:%d: output '%s': label_filename '%s': "
                               "cannot read %s", c->source_path, c->outputs[i].pos.line,
                               c->outputs[i].name, lf, path);
    fclose(f);
  }
  return NULL;
}

void cfg_free(cinfer_model_config *c) { model_config_free(c); }
cinfer_status *cfg_validate(const cinfer_model_config *c) { return model_config_validate(c); }

/* Looks for a file named `file` in any numeric version folder of model_dir. */
static bool has_version_file(const char *model_dir, const char *file) {
  DIR *d = opendir(model_dir);
  if (!d) return false;
  bool found = false;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%s", model_dir, e->d_name, file);
    if (stat(path, &st) == 0) found = true;
  }
  closedir(d);
  return found;
}

static cinfer_status *cfg_finish(const char *path, const char *name, cinfer_model_config **out);

/* The backend a model folder's files imply (auto-complete), or NULL. */
static const char *backend_from_files(const char *model_dir) {
  return has_version_file(model_dir, "model.onnx")   ? "onnxruntime"
         : has_version_file(model_dir, "model.gguf") ? "llm"
         : has_version_file(model_dir, "model.py")   ? "python"
                                                     : NULL;
}

cinfer_status *cfg_load_json(const char *model_dir, const char *name, const char *json,
                             cinfer_model_config **out) {
  char path[512];
  snprintf(path, sizeof path, "load of '%s': parameters.config", name);
  cinfer_status *err = model_config_parse_json(path, json, strlen(json), out);
  if (err) return err;
  /* Triton auto-completes an override config as it does config.pbtxt: one without backend
   * or platform (simple_http_model_control.py loads with {"max_batch_size": 16}) takes the
   * backend of the model's files. */
  const char *backend = model_dir && !cfg_backend(*out)[0] ? backend_from_files(model_dir) : NULL;
  if (backend) {
    free((*out)->backend);
    (*out)->backend = strdup(backend);
    if (!(*out)->backend) {
      model_config_free(*out);
      *out = NULL;
      return cinfer_status_oom(NULL);
    }
  }
  return cfg_finish(path, name, out);
}

cinfer_status *cfg_load(const char *model_dir, const char *name, cinfer_model_config **out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.pbtxt", model_dir);
  struct stat st;
  cinfer_status *err;
  if (stat(path, &st) == 0) {
    if ((err = model_config_load_file(path, out))) return err;
  } else {
    const char *backend = backend_from_files(model_dir);
    if (!backend)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "%s: missing, and no model.onnx, model.gguf or model.py in a "
                               "version folder to auto-complete from", path);
    if ((err = model_config_new(name, out))) return err;
    free((*out)->backend);
    (*out)->backend = strdup(backend);
    if (!(*out)->backend) {
      model_config_free(*out);
      *out = NULL;
      return cinfer_status_oom(NULL);
    }
  }
  return cfg_finish(path, name, out);
}

/* Name and backend checks shared by both sources of a config; frees *out on failure. */
static cinfer_status *cfg_finish(const char *path, const char *name, cinfer_model_config **out) {
  cinfer_status *err;
  cinfer_model_config *c = *out;
  if (!c->name || !c->name[0]) {
    if ((err = model_config_set_name(c, name))) goto fail;
  } else if (strcmp(c->name, name) != 0) {
    err = cinfer_status_new(CINFER_INVALID_ARG,
                            "%s: model name '%s' does not match its folder name '%s'", path,
                            c->name, name);
    goto fail;
  }
  if (!cfg_backend(c)[0]) {
    err = cinfer_status_new(CINFER_INVALID_ARG, "%s: neither 'backend' nor 'platform' is set", path);
    goto fail;
  }
  return NULL;
fail:
  model_config_free(c);
  *out = NULL;
  return err;
}

int cfg_warmup_count(const cinfer_model_config *c) { return (int)c->n_warmups; }

void cfg_warmup(const cinfer_model_config *c, int i, const char **name, uint32_t *batch_size,
                uint32_t *count, int *n_inputs) {
  const model_warmup *w = &c->warmups[i];
  *name = w->name ? w->name : "";
  *batch_size = w->batch_size;
  *count = w->count ? w->count : 1;
  *n_inputs = (int)w->n_inputs;
}

void cfg_warmup_input_at(const cinfer_model_config *c, int i, int j, cfg_warmup_input *out) {
  const model_warmup_input *in = &c->warmups[i].inputs[j];
  memset(out, 0, sizeof *out);
  out->name = in->key;
  out->dtype = in->data_type;
  out->ndim = in->ndims;
  memcpy(out->dims, in->dims, sizeof out->dims);
  out->source = in->source == MODEL_WARMUP_ZERO_DATA ? 0 : in->source == MODEL_WARMUP_RANDOM_DATA ? 1 : 2;
  out->file = in->input_data_file;
}
