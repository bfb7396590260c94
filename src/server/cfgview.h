/* cfgview.h: the server core's read-only view of a parsed model configuration
 * (src/repo/config.h). Keeping every field access in cfgview.c means the scheduler and
 * request validation do not depend on the config struct's layout. */
#ifndef CINFER_SERVER_CFGVIEW_H
#define CINFER_SERVER_CFGVIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/backend.h"
#include "cinfer/types.h"

struct cinfer_model_config;
typedef struct cinfer_model_config cinfer_model_config;

/* An input or output: the backends' cinfer_config_io (dims without the batch dim,
 * reshape_ndim -1 when no reshape), filled by backend_config.c for both. */
typedef cinfer_config_io cfg_io;

/* Lists in these views are borrowed from the config (valid while it lives), never copied
 * into fixed arrays: their length is bounded once, by MODEL_CONFIG_MAX_ENTRIES where the
 * config is parsed and validated (src/repo/config.c, "too many 'FIELD' entries"). */
typedef struct cfg_instance_group {
  int count;
  int kind;                       /* CINFER_INSTANCE_KIND_* */
  int n_gpus;
  const int32_t *gpus;            /* borrowed; n_gpus entries */
} cfg_instance_group;

typedef struct cfg_queue_policy {
  bool reject_on_timeout;         /* timeout_action REJECT (else DELAY) */
  uint64_t default_timeout_us;
  bool allow_timeout_override;
  uint32_t max_queue_size;
} cfg_queue_policy;

typedef struct cfg_dynamic_batching {
  bool enabled;
  int n_preferred;
  const int32_t *preferred;       /* borrowed; n_preferred entries */
  uint64_t max_queue_delay_us;
  bool preserve_ordering;
  uint32_t priority_levels;
  uint32_t default_priority_level;
  cfg_queue_policy default_policy;
  int n_level_policies;           /* priority_queue_policy entries: cfg_level_policy() */
} cfg_dynamic_batching;

typedef enum { CFG_VERSIONS_LATEST, CFG_VERSIONS_ALL, CFG_VERSIONS_SPECIFIC } cfg_version_kind;

const char *cfg_name(const cinfer_model_config *c);
const char *cfg_platform(const cinfer_model_config *c);
/* ensemble_scheduling steps: how many, and the model each runs (unload_dependents). */
size_t cfg_ensemble_step_count(const cinfer_model_config *c);
const char *cfg_ensemble_step_model(const cinfer_model_config *c, size_t i);
const char *cfg_backend(const cinfer_model_config *c);
int64_t cfg_max_batch_size(const cinfer_model_config *c);
int cfg_input_count(const cinfer_model_config *c);
void cfg_input(const cinfer_model_config *c, int i, cfg_io *out);
int cfg_output_count(const cinfer_model_config *c);
void cfg_output(const cinfer_model_config *c, int i, cfg_io *out);
int cfg_instance_group_count(const cinfer_model_config *c);
void cfg_get_instance_group(const cinfer_model_config *c, int i, cfg_instance_group *out);
void cfg_get_dynamic_batching(const cinfer_model_config *c, cfg_dynamic_batching *out);
/* Entry i (< n_level_policies) of dynamic_batching.priority_queue_policy. */
void cfg_level_policy(const cinfer_model_config *c, int i, uint32_t *level, cfg_queue_policy *out);
cfg_version_kind cfg_version_policy(const cinfer_model_config *c, int *num_latest,
                                    const int64_t **specific, int *n_specific);
const char *cfg_parameter(const cinfer_model_config *c, const char *key);
bool cfg_decoupled(const cinfer_model_config *c);
void cfg_free(cinfer_model_config *c);
/* Configuration that parses but that cinfer does not implement (response_cache, KIND_GPU on a CPU backend, rate_limiter, ...): the model must fail to load
 * with a reason naming the field rather than run without it. NULL when every field given
 * is honoured. docs/config-reference.md lists them. */
cinfer_status *cfg_check_supported(const cinfer_model_config *c, const char *backend,
                                   bool backend_decoupled);

/* Loads <model_dir>/config.pbtxt. When the file is missing, makes a minimal config from
 * the files in the version folders (model.onnx -> onnxruntime, model.gguf -> llm) for the
 * backend to auto-complete. The name must match the folder (or is filled in). */
/* Each output's label_filename is a readable file in model_dir (else INVALID_ARG naming it). */
cinfer_status *cfg_check_label_files(const cinfer_model_config *c, const char *model_dir);
cinfer_status *cfg_load(const char *model_dir, const char *name, cinfer_model_config **out);
/* The same from Triton's load-with-config JSON (it replaces config.pbtxt for the load;
 * the name must match too). */
cinfer_status *cfg_load_json(const char *model_dir, const char *name, const char *json,
                             cinfer_model_config **out);
/* Final validation after backend auto-complete. */
cinfer_status *cfg_validate(const cinfer_model_config *c);

typedef struct cfg_warmup_input {
  const char *name;
  cinfer_dtype dtype;
  int ndim;
  int64_t dims[CINFER_MAX_DIMS];
  int source;                     /* 0 zero, 1 random, 2 file */
  const char *file;
} cfg_warmup_input;
int cfg_warmup_count(const cinfer_model_config *c);
/* Fills name/batch_size/count; inputs via cfg_warmup_input_at. */
void cfg_warmup(const cinfer_model_config *c, int i, const char **name, uint32_t *batch_size,
                uint32_t *count, int *n_inputs);
void cfg_warmup_input_at(const cinfer_model_config *c, int i, int j, cfg_warmup_input *out);

#endif
