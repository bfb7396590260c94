/* config.h: Triton model configuration (config.pbtxt) as typed C data: the contract of
 * the config layer of src/repo.
 *
 * Life of a config:
 *   model_config_parse / model_config_load_file   text -> pbtxt tree -> typed struct, with
 *       every check that does not depend on auto-complete (syntax, unknown fields, types,
 *       ranges, enums, duplicates, cross-field rules on what is present);
 *   backend autocomplete (optional)             fills inputs/outputs/max_batch_size with
 *       model_config_add_input/_output or by editing fields;
 *   model_config_validate                       re-runs every check on the struct and also
 *       requires completeness (each input/output has data_type and dims). Call it before
 *       the config is used for serving, whether or not auto-complete ran.
 *
 * Errors name the place: "PATH:LINE:COL: message" for anything that came from the file,
 * "model 'NAME': message" for entries added programmatically (line 0).
 *
 * Ownership: a cinfer_model_config owns every string and array it points to, and the
 * pbtxt tree that the kept sub-messages (sequence_batching, optimization, ...) point into.
 * The struct is public for reading; to modify it use the helpers below, or keep to the
 * same allocation rules (malloc'd strings/arrays) so model_config_free can release it.
 */
#ifndef CINFER_REPO_CONFIG_H
#define CINFER_REPO_CONFIG_H

#include "cinfer/types.h"
#include "repo/pbtxt.h"

#define MODEL_CONFIG_MAX_FILE PBTXT_MAX_INPUT
#define MODEL_CONFIG_MAX_ENTRIES 4096 /* per repeated field or map (inputs, steps, ...) */

typedef struct model_config_pos {
  int line, col; /* 1-based position in the source file; 0 when added programmatically */
} model_config_pos;

typedef struct model_config_kv { /* map<string,string> entry; both owned */
  char *key;
  char *value;
} model_config_kv;

typedef enum model_io_format {
  MODEL_FORMAT_NONE = 0,
  MODEL_FORMAT_NHWC = 1,
  MODEL_FORMAT_NCHW = 2,
} model_io_format;

/* One input or output tensor. Fields marked (in)/(out) exist only on that side and stay
 * zero on the other. Dims exclude the batch dimension when max_batch_size > 0. */
typedef struct model_config_io {
  char *name;
  cinfer_dtype data_type;            /* CINFER_TYPE_INVALID when not given */
  model_io_format format;            /* (in) */
  int ndims;                         /* entries in dims, 0..CINFER_MAX_DIMS (0 = not given) */
  int64_t dims[CINFER_MAX_DIMS];     /* each >= 1 or -1 (variable) */
  bool has_reshape;
  int reshape_ndims;                 /* 0 = reshape to a scalar (shape: []) */
  int64_t reshape[CINFER_MAX_DIMS];
  bool is_shape_tensor;
  bool allow_ragged_batch;           /* (in) */
  bool optional;                     /* (in) */
  bool is_non_linear_format_io;      /* TensorRT only; rejected elsewhere */
  char *label_filename;              /* (out) NULL when not given */
  model_config_pos pos;
} model_config_io;

typedef enum model_version_policy_kind {
  MODEL_VERSION_LATEST = 0, /* default: latest { num_versions: 1 } */
  MODEL_VERSION_ALL,
  MODEL_VERSION_SPECIFIC,
} model_version_policy_kind;

typedef struct model_version_policy {
  model_version_policy_kind kind;
  uint32_t num_versions;   /* LATEST; default 1 */
  int64_t *versions;       /* SPECIFIC; owned */
  size_t n_versions;
} model_version_policy;

/* Values follow Triton's enum numbers. */
typedef enum model_instance_kind {
  MODEL_INSTANCE_KIND_AUTO = 0,
  MODEL_INSTANCE_KIND_GPU = 1,
  MODEL_INSTANCE_KIND_CPU = 2,
  MODEL_INSTANCE_KIND_MODEL = 3,
} model_instance_kind;

typedef struct model_instance_group {
  char *name;            /* defaults to "<model>_<index>" after parsing */
  model_instance_kind kind;
  int32_t count;         /* defaults to 1 */
  int32_t *gpus;         /* owned; empty = all GPUs */
  size_t n_gpus;
  char **profiles;       /* owned */
  size_t n_profiles;
  bool passive;
  char *host_policy;     /* NULL when not given */
  const pbtxt_node *tree; /* the group as parsed (rate_limiter and secondary_devices are
                             kept there, unvalidated); NULL when added programmatically */
  model_config_pos pos;
} model_instance_group;

typedef enum model_timeout_action {
  MODEL_TIMEOUT_REJECT = 0,
  MODEL_TIMEOUT_DELAY = 1,
} model_timeout_action;

typedef struct model_queue_policy {
  model_timeout_action timeout_action;
  uint64_t default_timeout_microseconds; /* 0 = no timeout */
  bool allow_timeout_override;
  uint32_t max_queue_size;               /* 0 = unlimited */
} model_queue_policy;

typedef struct model_priority_queue_policy { /* map<uint64, ModelQueuePolicy> entry */
  uint64_t level;
  model_queue_policy policy;
  model_config_pos pos;
} model_priority_queue_policy;

typedef struct model_dynamic_batching {
  int32_t *preferred_batch_size;  /* owned */
  size_t n_preferred_batch_size;
  uint64_t max_queue_delay_microseconds;
  bool preserve_ordering;
  uint64_t priority_levels;       /* 0 = priorities disabled */
  uint64_t default_priority_level;
  bool has_default_queue_policy;
  model_queue_policy default_queue_policy; /* all zero when not given */
  model_priority_queue_policy *priority_queue_policy; /* owned */
  size_t n_priority_queue_policy;
  model_config_pos pos;
  const pbtxt_node *tree;         /* as parsed, for error positions; NULL if programmatic */
} model_dynamic_batching;

typedef struct model_ensemble_step {
  char *model_name;
  int64_t model_version;        /* -1 (default) = latest */
  model_config_kv *input_map;   /* key: the step model's input, value: ensemble tensor */
  size_t n_input_map;
  model_config_kv *output_map;  /* key: the step model's output, value: ensemble tensor */
  size_t n_output_map;
  model_config_pos pos;
} model_ensemble_step;

typedef enum model_warmup_source {
  MODEL_WARMUP_ZERO_DATA = 0,
  MODEL_WARMUP_RANDOM_DATA,
  MODEL_WARMUP_INPUT_DATA_FILE,
} model_warmup_source;

typedef struct model_warmup_input { /* map<string, ModelWarmup.Input> entry */
  char *key;                    /* input name */
  cinfer_dtype data_type;
  int ndims;
  int64_t dims[CINFER_MAX_DIMS];
  model_warmup_source source;
  char *input_data_file;        /* INPUT_DATA_FILE: file name in <model>/warmup/ */
  model_config_pos pos;
} model_warmup_input;

typedef struct model_warmup {
  char *name;
  uint32_t batch_size;
  model_warmup_input *inputs;   /* owned */
  size_t n_inputs;
  uint32_t count;               /* 0 = run once */
  model_config_pos pos;
} model_warmup;

/* A top-level field cinfer keeps as a tree without interpreting it (batch_input,
 * cc_model_filenames, ...). It is reproduced in the JSON form. */
typedef struct model_config_kept {
  const char *name;             /* borrowed from node */
  const pbtxt_node *node;
} model_config_kept;

typedef struct cinfer_model_config {
  char *source_path;            /* path given to parse; used in error messages */
  char *name;                   /* "" when not given (the repository fills it in) */
  char *platform;               /* "" when not given */
  char *backend;                /* "" when not given */
  char *runtime;                /* "" when not given */
  char *default_model_filename; /* "" when not given */
  model_version_policy version_policy;
  int32_t max_batch_size;       /* 0 = the model does not batch */
  model_config_io *inputs;      /* owned, in file order */
  size_t n_inputs;
  model_config_io *outputs;
  size_t n_outputs;
  model_instance_group *instance_groups;
  size_t n_instance_groups;

  /* Scheduling: at most one of the three (a protobuf oneof). */
  bool has_dynamic_batching;
  model_dynamic_batching dynamic_batching;
  const pbtxt_node *sequence_batching;   /* kept tree, or NULL */
  const pbtxt_node *ensemble_scheduling; /* kept tree, or NULL; steps parsed below */
  model_ensemble_step *ensemble_steps;
  size_t n_ensemble_steps;

  model_config_kv *parameters;  /* key -> string_value, file order, keys unique */
  size_t n_parameters;
  model_warmup *warmups;
  size_t n_warmups;

  const pbtxt_node *optimization;             /* kept, or NULL */
  const pbtxt_node *model_transaction_policy; /* kept, or NULL */
  bool decoupled;                             /* model_transaction_policy.decoupled */
  const pbtxt_node *response_cache;           /* kept, or NULL */
  bool response_cache_enable;                 /* response_cache.enable */
  model_config_kept *kept;                    /* other known top-level fields */
  size_t n_kept;

  pbtxt_node *tree_;            /* private: the parsed file (owned) */
} cinfer_model_config;

/* Parses and checks text[0..len) (need not be NUL-terminated). path names the file in
 * errors (borrowed; copied). On success *out is a new config owned by the caller. */
cinfer_status *model_config_parse(const char *path, const char *text, size_t len,
                                  cinfer_model_config **out);
/* The same from Triton's JSON form of a ModelConfig (what GET /v2/models/NAME/config
 * returns, and what a load request carries in parameters.config): objects are messages,
 * arrays repeated fields, the known map fields (parameters, input_map, output_map,
 * priority_queue_policy, warmup inputs, ...) objects keyed by the map key; enums are names
 * in strings, 64-bit integers numbers or decimal strings, null means "not set". Errors are
 * "PATH: message" naming the field (JSON has no positions here). At most
 * MODEL_CONFIG_MAX_FILE bytes. */
cinfer_status *model_config_parse_json(const char *path, const char *json, size_t len,
                                       cinfer_model_config **out);
/* Private to src/repo (config_json.c -> config.c): JSON text to the tree the mapper takes. */
cinfer_status *model_config_json_tree(const char *path, const char *json, size_t len,
                                      pbtxt_node **out);
/* Reads path (at most MODEL_CONFIG_MAX_FILE bytes) and parses it. */
cinfer_status *model_config_load_file(const char *path, cinfer_model_config **out);
/* A config with no fields (for models without config.pbtxt). name may be NULL. */
cinfer_status *model_config_new(const char *name, cinfer_model_config **out);
void model_config_free(cinfer_model_config *c);

/* Every check of parse plus completeness; see the file comment. NULL when valid. */
cinfer_status *model_config_validate(const cinfer_model_config *c);

/* parameters { key: K value { string_value: V } } -> V (borrowed), or NULL when absent. */
const char *model_config_parameter(const cinfer_model_config *c, const char *key);
/* Sets (adds or replaces) a parameter. Both strings are copied. */
cinfer_status *model_config_set_parameter(cinfer_model_config *c, const char *key,
                                          const char *value);

/* Sets the model name (copied) and names unnamed instance groups "<name>_<index>", as
 * Triton does. The repository calls it when config.pbtxt has no name. */
cinfer_status *model_config_set_name(cinfer_model_config *c, const char *name);

/* Lookups by tensor name; borrowed pointers, NULL when absent. */
const model_config_io *model_config_input(const cinfer_model_config *c, const char *name);
const model_config_io *model_config_output(const cinfer_model_config *c, const char *name);

/* Auto-complete helpers: append an input/output (name copied; dims copied, ndims 0..8).
 * Fails with ALREADY_EXISTS when the name is taken. *io (optional) receives the new entry,
 * valid until the next add. dtype/ndims are checked by model_config_validate. */
cinfer_status *model_config_add_input(cinfer_model_config *c, const char *name, cinfer_dtype dtype,
                                      int ndims, const int64_t *dims, model_config_io **io);
cinfer_status *model_config_add_output(cinfer_model_config *c, const char *name, cinfer_dtype dtype,
                                       int ndims, const int64_t *dims, model_config_io **io);

/* The config as Triton's GET /v2/models/NAME/config returns it: protobuf JSON with
 * original field names, every primitive field printed (defaults included), enums by name,
 * and 64-bit integers as JSON numbers (Triton rewrites protobuf's strings; map keys stay
 * strings). Kept sub-messages are printed from their trees. Returns a malloc'd,
 * NUL-terminated string the caller frees, or NULL on allocation failure. */
char *model_config_to_json(const cinfer_model_config *c);

/* Names for enums as they appear in config files and JSON ("KIND_GPU", "FORMAT_NCHW"). */
const char *model_instance_kind_name(model_instance_kind k);
const char *model_io_format_name(model_io_format f);
const char *model_timeout_action_name(model_timeout_action a);

#endif
