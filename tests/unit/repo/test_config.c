/* test_config.c: the Triton config layer against a corpus of real-world style
 * config.pbtxt files (tests/data/configs), asserted field by field; a table of malformed
 * files with their exact "file:line:col: message"; the JSON form; auto-complete helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repo/config.h"

/* Reads tests/data/configs/<rel> into a malloc'd buffer. */
static char *read_data(const char *rel, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", CINFER_CONFIG_DIR, rel);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

/* Parses a corpus file (error paths name it by its relative path) and validates it. */
static cinfer_model_config *load(const char *rel) {
  size_t len;
  char *text = read_data(rel, &len);
  cinfer_model_config *c = NULL;
  cinfer_status *st = model_config_parse(rel, text, len, &c);
  free(text);
  if (st) fail_msg("%s: %s", rel, cinfer_status_message(st));
  st = model_config_validate(c);
  if (st) fail_msg("%s: validate: %s", rel, cinfer_status_message(st));
  return c;
}

static void assert_dims(const int64_t *d, int n, const int64_t *want, int wn) {
  assert_int_equal(n, wn);
  for (int i = 0; i < n; i++) assert_int_equal(d[i], want[i]);
}
#define DIMS(d, n, ...)                                  \
  do {                                                   \
    const int64_t w_[] = {__VA_ARGS__};                  \
    assert_dims(d, n, w_, (int)(sizeof w_ / sizeof *w_)); \
  } while (0)

static void test_densenet(void **state) {
  (void)state;
  cinfer_model_config *c = load("densenet_onnx.pbtxt");
  assert_string_equal(c->name, "densenet_onnx");
  assert_string_equal(c->platform, "onnxruntime_onnx");
  assert_string_equal(c->backend, "");
  assert_int_equal(c->max_batch_size, 0);
  assert_int_equal(c->version_policy.kind, MODEL_VERSION_LATEST);
  assert_int_equal(c->version_policy.num_versions, 1);
  assert_int_equal(c->n_inputs, 1);
  const model_config_io *in = &c->inputs[0];
  assert_string_equal(in->name, "data_0");
  assert_int_equal(in->data_type, CINFER_TYPE_FP32);
  assert_int_equal(in->format, MODEL_FORMAT_NCHW);
  DIMS(in->dims, in->ndims, 3, 224, 224);
  assert_true(in->has_reshape);
  DIMS(in->reshape, in->reshape_ndims, 1, 3, 224, 224);
  assert_int_equal(in->pos.line, 7); /* the element's '{' */
  assert_int_equal(in->pos.col, 3);
  assert_int_equal(c->n_outputs, 1);
  const model_config_io *out = model_config_output(c, "fc6_1");
  assert_ptr_equal(out, &c->outputs[0]);
  DIMS(out->dims, out->ndims, 1000);
  DIMS(out->reshape, out->reshape_ndims, 1, 1000, 1, 1);
  assert_string_equal(out->label_filename, "densenet_labels.txt");
  assert_null(model_config_input(c, "fc6_1"));
  assert_int_equal(c->n_instance_groups, 0);
  assert_false(c->has_dynamic_batching);
  assert_null(c->sequence_batching);
  assert_null(c->ensemble_scheduling);
  model_config_free(c);
}

static void test_resnet_dynamic(void **state) {
  (void)state;
  cinfer_model_config *c = load("resnet50_dynamic.pbtxt");
  assert_string_equal(c->backend, "onnxruntime");
  assert_int_equal(c->max_batch_size, 128);
  DIMS(c->inputs[0].dims, c->inputs[0].ndims, 3, 224, 224); /* repeated one per line */
  assert_int_equal(c->inputs[0].format, MODEL_FORMAT_NONE);
  assert_false(c->inputs[0].has_reshape);
  assert_null(c->outputs[0].label_filename);
  assert_true(c->has_dynamic_batching);
  const model_dynamic_batching *db = &c->dynamic_batching;
  assert_int_equal(db->n_preferred_batch_size, 2);
  assert_int_equal(db->preferred_batch_size[0], 32);
  assert_int_equal(db->preferred_batch_size[1], 64);
  assert_int_equal(db->max_queue_delay_microseconds, 100);
  assert_false(db->preserve_ordering);
  assert_int_equal(db->priority_levels, 0);
  assert_false(db->has_default_queue_policy);
  assert_int_equal(c->n_instance_groups, 1);
  const model_instance_group *g = &c->instance_groups[0];
  assert_string_equal(g->name, "resnet50_0"); /* Triton's default group name */
  assert_int_equal(g->count, 2);
  assert_int_equal(g->kind, MODEL_INSTANCE_KIND_GPU);
  assert_int_equal(g->n_gpus, 2);
  assert_int_equal(g->gpus[0], 0);
  assert_int_equal(g->gpus[1], 1);
  assert_false(g->passive);
  assert_null(g->host_policy);
  model_config_free(c);
}

static void test_priority_queue_policy(void **state) {
  (void)state;
  cinfer_model_config *c = load("face_detect_priority.pbtxt");
  assert_int_equal(c->n_outputs, 2);
  DIMS(c->outputs[0].dims, c->outputs[0].ndims, -1, 4);
  DIMS(c->outputs[1].dims, c->outputs[1].ndims, -1);
  const model_dynamic_batching *db = &c->dynamic_batching;
  assert_int_equal(db->n_preferred_batch_size, 3);
  assert_int_equal(db->preferred_batch_size[2], 16);
  assert_int_equal(db->max_queue_delay_microseconds, 2000);
  assert_true(db->preserve_ordering);
  assert_int_equal(db->priority_levels, 3);
  assert_int_equal(db->default_priority_level, 2);
  assert_true(db->has_default_queue_policy);
  assert_int_equal(db->default_queue_policy.timeout_action, MODEL_TIMEOUT_DELAY);
  assert_int_equal(db->default_queue_policy.default_timeout_microseconds, 100000);
  assert_true(db->default_queue_policy.allow_timeout_override);
  assert_int_equal(db->default_queue_policy.max_queue_size, 256);
  assert_int_equal(db->n_priority_queue_policy, 2);
  assert_int_equal(db->priority_queue_policy[0].level, 1);
  assert_int_equal(db->priority_queue_policy[0].policy.timeout_action, MODEL_TIMEOUT_DELAY);
  assert_int_equal(db->priority_queue_policy[0].policy.max_queue_size, 1024);
  assert_int_equal(db->priority_queue_policy[1].level, 3);
  assert_int_equal(db->priority_queue_policy[1].policy.timeout_action, MODEL_TIMEOUT_REJECT);
  assert_int_equal(db->priority_queue_policy[1].policy.default_timeout_microseconds, 50000);
  assert_false(db->priority_queue_policy[1].policy.allow_timeout_override);
  assert_int_equal(db->priority_queue_policy[1].policy.max_queue_size, 64);
  assert_int_equal(c->instance_groups[0].kind, MODEL_INSTANCE_KIND_CPU);
  assert_int_equal(c->instance_groups[0].count, 1);
  model_config_free(c);
}

static void test_ensemble(void **state) {
  (void)state;
  cinfer_model_config *c = load("ensemble_face_pipeline.pbtxt");
  assert_string_equal(c->platform, "ensemble");
  assert_non_null(c->ensemble_scheduling);
  assert_int_equal(c->n_ensemble_steps, 3);
  const model_ensemble_step *s = c->ensemble_steps;
  assert_string_equal(s[0].model_name, "preprocess");
  assert_int_equal(s[0].model_version, -1);
  assert_int_equal(s[0].n_input_map, 1);
  assert_string_equal(s[0].input_map[0].key, "INPUT_0");
  assert_string_equal(s[0].input_map[0].value, "RAW_IMAGE");
  assert_string_equal(s[0].output_map[0].value, "preprocessed_image");
  assert_string_equal(s[1].model_name, "face_detect");
  assert_int_equal(s[1].model_version, 1);
  assert_int_equal(s[1].n_output_map, 2);
  assert_string_equal(s[1].output_map[1].key, "crops");
  assert_string_equal(s[1].output_map[1].value, "face_crops");
  assert_string_equal(s[2].model_name, "face_attributes");
  assert_int_equal(s[2].model_version, -1); /* default */
  assert_string_equal(s[2].output_map[0].value, "ATTRIBUTES");
  assert_int_equal(c->inputs[0].data_type, CINFER_TYPE_UINT8);
  model_config_free(c);
}

static void test_sequence_batching_kept(void **state) {
  (void)state;
  cinfer_model_config *c = load("sequence_stateful.pbtxt");
  assert_false(c->has_dynamic_batching);
  const pbtxt_node *sb = c->sequence_batching;
  assert_non_null(sb);
  uint64_t u;
  assert_true(pbtxt_as_uint64(pbtxt_child(sb, "max_sequence_idle_microseconds"), &u));
  assert_int_equal(u, 5000000);
  size_t controls = 0;
  for (size_t i = 0; i < sb->n_children; i++) controls += !strcmp(sb->children[i]->name, "control_input");
  assert_int_equal(controls, 4);
  const pbtxt_node *state_n = pbtxt_child(sb, "state");
  assert_string_equal(pbtxt_child(state_n, "input_name")->str, "STATE_IN");
  assert_int_equal(c->outputs[0].data_type, CINFER_TYPE_BYTES);
  model_config_free(c);
}

static void test_parameters_and_strings(void **state) {
  (void)state;
  cinfer_model_config *c = load("bert_tokenizer_python.pbtxt");
  assert_string_equal(c->backend, "python");
  assert_int_equal(c->inputs[0].data_type, CINFER_TYPE_BYTES);
  assert_int_equal(c->n_parameters, 3);
  assert_string_equal(model_config_parameter(c, "EXECUTION_ENV_PATH"),
                      "$$TRITON_MODEL_DIRECTORY/tokenizer_env.tar.gz");
  assert_string_equal(model_config_parameter(c, "max_seq_len"), "128");
  assert_string_equal(model_config_parameter(c, "cinfer.threads_per_instance"), "2");
  assert_null(model_config_parameter(c, "missing"));
  assert_null(model_config_parameter(NULL, "max_seq_len"));
  assert_null(model_config_set_parameter(c, "max_seq_len", "256"));
  assert_null(model_config_set_parameter(c, "new_key", "v"));
  assert_string_equal(model_config_parameter(c, "max_seq_len"), "256");
  assert_string_equal(model_config_parameter(c, "new_key"), "v");
  assert_int_equal(c->n_parameters, 4);
  assert_int_equal(c->instance_groups[0].count, 4);
  assert_int_equal(c->instance_groups[0].kind, MODEL_INSTANCE_KIND_CPU);
  model_config_free(c);
}

static void test_warmup(void **state) {
  (void)state;
  cinfer_model_config *c = load("warmup_classifier.pbtxt");
  assert_int_equal(c->inputs[0].format, MODEL_FORMAT_NHWC);
  assert_true(c->inputs[1].optional);
  assert_string_equal(c->outputs[0].label_filename, "attributes.txt");
  assert_int_equal(c->n_warmups, 2);
  const model_warmup *w = c->warmups;
  assert_string_equal(w[0].name, "zeros_batch8");
  assert_int_equal(w[0].batch_size, 8);
  assert_int_equal(w[0].count, 0);
  assert_int_equal(w[0].n_inputs, 1);
  assert_string_equal(w[0].inputs[0].key, "faces");
  assert_int_equal(w[0].inputs[0].data_type, CINFER_TYPE_FP32);
  DIMS(w[0].inputs[0].dims, w[0].inputs[0].ndims, 112, 112, 3);
  assert_int_equal(w[0].inputs[0].source, MODEL_WARMUP_ZERO_DATA);
  assert_string_equal(w[1].name, "random_batch64");
  assert_int_equal(w[1].batch_size, 64);
  assert_int_equal(w[1].count, 3);
  assert_int_equal(w[1].n_inputs, 2);
  assert_int_equal(w[1].inputs[0].source, MODEL_WARMUP_RANDOM_DATA);
  assert_string_equal(w[1].inputs[1].key, "face_count");
  assert_int_equal(w[1].inputs[1].data_type, CINFER_TYPE_INT32);
  DIMS(w[1].inputs[1].dims, w[1].inputs[1].ndims, 1);
  assert_int_equal(w[1].inputs[1].source, MODEL_WARMUP_INPUT_DATA_FILE);
  assert_string_equal(w[1].inputs[1].input_data_file, "face_count.bin");
  model_config_free(c);
}

static void test_tensorrt_profiles(void **state) {
  (void)state;
  cinfer_model_config *c = load("tensorrt_profiles.pbtxt");
  assert_string_equal(c->default_model_filename, "detector.plan");
  assert_int_equal(c->inputs[0].data_type, CINFER_TYPE_FP16);
  DIMS(c->inputs[0].dims, c->inputs[0].ndims, 3, -1, -1);
  assert_true(c->inputs[1].is_shape_tensor);
  assert_int_equal(c->n_instance_groups, 2);
  const model_instance_group *g = c->instance_groups;
  assert_string_equal(g[0].name, "profile_small");
  assert_int_equal(g[0].n_profiles, 1);
  assert_string_equal(g[0].profiles[0], "0");
  assert_string_equal(g[1].name, "profile_large");
  assert_int_equal(g[1].gpus[0], 1);
  assert_int_equal(g[1].n_profiles, 2);
  assert_string_equal(g[1].profiles[1], "2");
  assert_non_null(c->optimization);
  bool b;
  assert_true(pbtxt_as_bool(pbtxt_child(pbtxt_child(c->optimization, "cuda"), "graphs"), &b) && b);
  assert_true(c->has_dynamic_batching); /* empty block enables it */
  assert_int_equal(c->dynamic_batching.n_preferred_batch_size, 0);
  model_config_free(c);
}

static void test_versions_cache_tags(void **state) {
  (void)state;
  cinfer_model_config *c = load("versioned_cached.pbtxt");
  assert_int_equal(c->version_policy.kind, MODEL_VERSION_SPECIFIC);
  assert_int_equal(c->version_policy.n_versions, 2);
  assert_int_equal(c->version_policy.versions[0], 1);
  assert_int_equal(c->version_policy.versions[1], 3);
  assert_true(c->response_cache_enable);
  assert_non_null(c->response_cache);
  assert_string_equal(c->default_model_filename, "model.onnx");
  size_t cc = 0, tags = 0;
  for (size_t i = 0; i < c->n_kept; i++) {
    cc += !strcmp(c->kept[i].name, "cc_model_filenames");
    tags += !strcmp(c->kept[i].name, "metric_tags");
  }
  assert_int_equal(cc, 2);
  assert_int_equal(tags, 1);
  model_config_free(c);
}

static void test_syntax_variants(void **state) {
  (void)state;
  cinfer_model_config *c = load("syntax_variants.pbtxt");
  assert_string_equal(c->name, "syntax_variants"); /* 'syntax' "_variants" */
  assert_int_equal(c->max_batch_size, 16);       /* 0x10 */
  assert_int_equal(c->version_policy.kind, MODEL_VERSION_LATEST);
  assert_int_equal(c->version_policy.num_versions, 2);
  assert_string_equal(c->inputs[0].name, "inAA\t\"q\"\\");
  DIMS(c->inputs[0].dims, c->inputs[0].ndims, 8); /* octal 010 */
  assert_true(c->inputs[0].allow_ragged_batch);  /* t */
  assert_string_equal(c->inputs[1].name, "in_b");
  assert_int_equal(c->inputs[1].data_type, CINFER_TYPE_INT64); /* enum by number */
  assert_true(c->inputs[1].optional);                          /* 1 */
  assert_int_equal(c->outputs[0].data_type, CINFER_TYPE_BOOL);
  assert_false(c->outputs[0].is_shape_tensor); /* False */
  const model_instance_group *g = &c->instance_groups[0];
  assert_int_equal(g->kind, MODEL_INSTANCE_KIND_AUTO);
  assert_true(g->passive);
  assert_string_equal(g->host_policy, "numa0");
  assert_string_equal(g->name, "syntax_variants_0");
  assert_int_equal(g->count, 1);
  model_config_free(c);
}

static void test_llm_decoupled(void **state) {
  (void)state;
  cinfer_model_config *c = load("llm_decoupled.pbtxt");
  assert_true(c->decoupled);
  assert_non_null(c->model_transaction_policy);
  assert_int_equal(c->instance_groups[0].kind, MODEL_INSTANCE_KIND_MODEL);
  assert_int_equal(c->n_inputs, 4);
  assert_false(c->inputs[0].optional);
  assert_true(c->inputs[1].optional);
  assert_int_equal(c->inputs[1].data_type, CINFER_TYPE_BOOL);
  assert_string_equal(model_config_parameter(c, "cinfer.gguf_file"), "SmolLM2-135M-Instruct-Q8_0.gguf");
  assert_false(c->response_cache_enable);
  model_config_free(c);
}

static void test_ragged_groups(void **state) {
  (void)state;
  cinfer_model_config *c = load("ragged_batch_io.pbtxt");
  assert_true(c->inputs[0].allow_ragged_batch);
  assert_int_equal(c->version_policy.kind, MODEL_VERSION_ALL);
  assert_int_equal(c->n_instance_groups, 2);
  assert_string_equal(c->instance_groups[0].name, "ragged_model_0");
  assert_string_equal(c->instance_groups[1].name, "ragged_model_1");
  assert_int_equal(c->instance_groups[1].count, 1); /* default */
  assert_non_null(pbtxt_child(c->instance_groups[0].tree, "rate_limiter"));
  size_t bi = 0, bo = 0;
  for (size_t i = 0; i < c->n_kept; i++) {
    bi += !strcmp(c->kept[i].name, "batch_input");
    bo += !strcmp(c->kept[i].name, "batch_output");
  }
  assert_int_equal(bi, 1);
  assert_int_equal(bo, 1);
  assert_int_equal(c->dynamic_batching.max_queue_delay_microseconds, 500);
  model_config_free(c);
}

/* ---- malformed files --------------------------------------------------------------- */

static const struct {
  const char *file, *message;
} bad_table[] = {
    {"bad/missing_colon.pbtxt", "bad/missing_colon.pbtxt:6:8: expected ':' or '{' after field name 'dims'"},
    {"bad/unclosed_list.pbtxt", "bad/unclosed_list.pbtxt:5:1: expected ',' or ']' in list for field 'input', found end of input"},
    {"bad/unclosed_message.pbtxt", "bad/unclosed_message.pbtxt:6:1: unexpected end of input: expected '}' to close 'input' opened at 2:7"},
    {"bad/mismatched_bracket.pbtxt", "bad/mismatched_bracket.pbtxt:2:52: expected '>' to close 'input' opened at 2:7, found '}'"},
    {"bad/extra_close.pbtxt", "bad/extra_close.pbtxt:6:1: unexpected '}' outside any message"},
    {"bad/list_trailing_comma.pbtxt", "bad/list_trailing_comma.pbtxt:5:17: expected a value in list for field 'dims', found ']'"},
    {"bad/unterminated_string.pbtxt", "bad/unterminated_string.pbtxt:1:7: unterminated string (missing closing \")"},
    {"bad/bad_escape.pbtxt", "bad/bad_escape.pbtxt:2:50: invalid escape '\\' followed by 'q' in string"},
    {"bad/bad_char.pbtxt", "bad/bad_char.pbtxt:1:11: unexpected character '@'"},
    {"bad/unknown_top_field.pbtxt", "bad/unknown_top_field.pbtxt:4:1: unknown field 'max_batch' in model config"},
    {"bad/unknown_input_field.pbtxt", "bad/unknown_input_field.pbtxt:5:3: unknown field 'dim' in input 'x'"},
    {"bad/duplicate_singular.pbtxt", "bad/duplicate_singular.pbtxt:3:1: field 'max_batch_size' in model config is specified more than once (first at 2:1)"},
    {"bad/wrong_value_kind.pbtxt", "bad/wrong_value_kind.pbtxt:2:17: field 'max_batch_size' expects an integer, found a string"},
    {"bad/int_out_of_range.pbtxt", "bad/int_out_of_range.pbtxt:2:17: field 'max_batch_size' value 99999999999 is out of range [-2147483648, 2147483647]"},
    {"bad/negative_max_batch.pbtxt", "bad/negative_max_batch.pbtxt:2:17: max_batch_size must be >= 0, got -1"},
    {"bad/bad_data_type.pbtxt", "bad/bad_data_type.pbtxt:4:14: invalid data type 'TYPE_FLOAT32' for field 'data_type' (expected TYPE_BOOL, TYPE_UINT8, TYPE_UINT16, TYPE_UINT32, TYPE_UINT64, TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_STRING or TYPE_BF16)"},
    {"bad/bad_enum.pbtxt", "bad/bad_enum.pbtxt:2:24: invalid value 'KIND_TPU' for field 'kind' (expected one of: KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL)"},
    {"bad/negative_dim.pbtxt", "bad/negative_dim.pbtxt:6:14: input 'x': dims must be >= 1, or -1 for a variable-size dimension, got -2"},
    {"bad/duplicate_input.pbtxt", "bad/duplicate_input.pbtxt:4:1: duplicate input name 'x' (first at 3:1)"},
    {"bad/reshape_mismatch.pbtxt", "bad/reshape_mismatch.pbtxt:3:1: input 'x' has different element counts for dims and reshape"},
    {"bad/preferred_too_large.pbtxt", "bad/preferred_too_large.pbtxt:5:30: dynamic_batching preferred_batch_size 16 is larger than max_batch_size 8"},
    {"bad/priority_level_range.pbtxt", "bad/priority_level_range.pbtxt:5:27: dynamic_batching default_priority_level 3 must be in [1, 2] (priority_levels)"},
    {"bad/priority_key_range.pbtxt", "bad/priority_key_range.pbtxt:6:3: dynamic_batching priority_queue_policy key 5 must be in [1, 2] (priority_levels)"},
    {"bad/two_schedulers.pbtxt", "bad/two_schedulers.pbtxt:4:1: 'sequence_batching' cannot be combined with 'dynamic_batching' (at 3:1): a model has one scheduling choice"},
    {"bad/cpu_with_gpus.pbtxt", "bad/cpu_with_gpus.pbtxt:2:36: instance_group has kind KIND_CPU but specifies gpus (only KIND_GPU and KIND_AUTO may)"},
    {"bad/ensemble_output_unwritten.pbtxt", "bad/ensemble_output_unwritten.pbtxt:4:1: ensemble output 'OUT' is not written by any step"},
    {"bad/duplicate_parameter.pbtxt", "bad/duplicate_parameter.pbtxt:3:1: duplicate parameter 'k'"},
    {"bad/warmup_no_source.pbtxt", "bad/warmup_no_source.pbtxt:6:21: model_warmup input must specify one of zero_data, random_data, input_data_file"},
};

static void test_malformed_table(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad_table / sizeof *bad_table; i++) {
    size_t len;
    char *text = read_data(bad_table[i].file, &len);
    cinfer_model_config *c = (cinfer_model_config *)1;
    cinfer_status *st = model_config_parse(bad_table[i].file, text, len, &c);
    free(text);
    if (!st) fail_msg("%s: parsed without error", bad_table[i].file);
    assert_null(c);
    assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
    if (strcmp(cinfer_status_message(st), bad_table[i].message))
      fail_msg("%s:\n  got:  %s\n  want: %s", bad_table[i].file, cinfer_status_message(st), bad_table[i].message);
    cinfer_status_free(st);
  }
}

/* Every prefix of every corpus file either parses or fails cleanly (run under ASan). */
static void test_truncations(void **state) {
  (void)state;
  static const char *files[] = {"densenet_onnx.pbtxt", "face_detect_priority.pbtxt", "ensemble_face_pipeline.pbtxt",
                                "sequence_stateful.pbtxt", "syntax_variants.pbtxt", "warmup_classifier.pbtxt",
                                "ragged_batch_io.pbtxt"};
  for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
    size_t len;
    char *text = read_data(files[f], &len);
    size_t ok = 0;
    for (size_t n = 0; n <= len; n++) {
      char *copy = malloc(n ? n : 1); /* exact-size copy: any over-read trips ASan */
      assert_non_null(copy);
      memcpy(copy, text, n);
      cinfer_model_config *c = NULL;
      cinfer_status *st = model_config_parse(files[f], copy, n, &c);
      if (!st) {
        ok++;
        char *json = model_config_to_json(c);
        assert_non_null(json);
        free(json);
      }
      assert_true((st == NULL) == (c != NULL));
      cinfer_status_free(st);
      model_config_free(c);
      free(copy);
    }
    assert_true(ok >= 1); /* at least the whole file */
    free(text);
  }
}

/* ---- JSON --------------------------------------------------------------------------- */

static cJSON *obj(const cJSON *o, const char *k) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!v) fail_msg("missing JSON member '%s'", k);
  return v;
}

static void test_json_output(void **state) {
  (void)state;
  cinfer_model_config *c = load("face_detect_priority.pbtxt");
  char *s = model_config_to_json(c);
  assert_non_null(s);
  cJSON *j = cJSON_Parse(s);
  assert_non_null(j);
  assert_string_equal(obj(j, "name")->valuestring, "face_detect");
  assert_string_equal(obj(j, "platform")->valuestring, "");
  assert_string_equal(obj(j, "backend")->valuestring, "onnxruntime");
  assert_int_equal(obj(obj(obj(j, "version_policy"), "latest"), "num_versions")->valueint, 1);
  assert_true(cJSON_IsNumber(obj(j, "max_batch_size")));
  assert_int_equal(obj(j, "max_batch_size")->valueint, 16);
  cJSON *in = cJSON_GetArrayItem(obj(j, "input"), 0);
  assert_string_equal(obj(in, "name")->valuestring, "images");
  assert_string_equal(obj(in, "data_type")->valuestring, "TYPE_FP32");
  assert_string_equal(obj(in, "format")->valuestring, "FORMAT_NCHW");
  cJSON *dims = obj(in, "dims");
  assert_int_equal(cJSON_GetArraySize(dims), 3);
  /* Triton rewrites int64 dims into JSON numbers */
  assert_true(cJSON_IsNumber(cJSON_GetArrayItem(dims, 1)));
  assert_int_equal(cJSON_GetArrayItem(dims, 1)->valueint, 640);
  assert_true(cJSON_IsFalse(obj(in, "is_shape_tensor")));
  assert_true(cJSON_IsFalse(obj(in, "optional")));
  assert_null(cJSON_GetObjectItem(in, "reshape")); /* unset message: absent */
  cJSON *out0 = cJSON_GetArrayItem(obj(j, "output"), 0);
  assert_int_equal(cJSON_GetArrayItem(obj(out0, "dims"), 0)->valueint, -1);
  assert_string_equal(obj(out0, "label_filename")->valuestring, "");
  assert_int_equal(cJSON_GetArraySize(obj(j, "batch_input")), 0);
  cJSON *db = obj(j, "dynamic_batching");
  assert_int_equal(cJSON_GetArraySize(obj(db, "preferred_batch_size")), 3);
  assert_int_equal(cJSON_GetArrayItem(obj(db, "preferred_batch_size"), 2)->valueint, 16);
  assert_true(cJSON_IsNumber(obj(db, "max_queue_delay_microseconds")));
  assert_int_equal(obj(db, "max_queue_delay_microseconds")->valueint, 2000);
  assert_true(cJSON_IsTrue(obj(db, "preserve_ordering")));
  assert_int_equal(obj(db, "priority_levels")->valueint, 3);
  assert_int_equal(obj(db, "default_priority_level")->valueint, 2);
  cJSON *dq = obj(db, "default_queue_policy");
  assert_string_equal(obj(dq, "timeout_action")->valuestring, "DELAY");
  assert_int_equal(obj(dq, "default_timeout_microseconds")->valueint, 100000);
  assert_true(cJSON_IsTrue(obj(dq, "allow_timeout_override")));
  assert_int_equal(obj(dq, "max_queue_size")->valueint, 256);
  cJSON *pq = obj(db, "priority_queue_policy");
  assert_int_equal(cJSON_GetArraySize(pq), 2);
  assert_string_equal(obj(obj(pq, "3"), "timeout_action")->valuestring, "REJECT"); /* map key: string */
  assert_int_equal(obj(obj(pq, "3"), "default_timeout_microseconds")->valueint, 50000);
  cJSON *g = cJSON_GetArrayItem(obj(j, "instance_group"), 0);
  assert_string_equal(obj(g, "name")->valuestring, "face_detect_0");
  assert_string_equal(obj(g, "kind")->valuestring, "KIND_CPU");
  assert_int_equal(obj(g, "count")->valueint, 1);
  assert_int_equal(cJSON_GetArraySize(obj(g, "gpus")), 0);
  assert_true(cJSON_IsObject(obj(j, "parameters")));
  assert_int_equal(cJSON_GetArraySize(obj(j, "model_warmup")), 0);
  assert_null(cJSON_GetObjectItem(j, "sequence_batching"));
  cJSON_Delete(j);
  free(s);
  model_config_free(c);
}

static void test_json_other_sections(void **state) {
  (void)state;
  cinfer_model_config *c = load("ensemble_face_pipeline.pbtxt");
  char *s = model_config_to_json(c);
  cJSON *j = cJSON_Parse(s);
  assert_non_null(j);
  cJSON *steps = obj(obj(j, "ensemble_scheduling"), "step");
  assert_int_equal(cJSON_GetArraySize(steps), 3);
  cJSON *s1 = cJSON_GetArrayItem(steps, 1);
  assert_int_equal(obj(s1, "model_version")->valueint, 1);
  assert_string_equal(obj(obj(s1, "output_map"), "crops")->valuestring, "face_crops");
  cJSON_Delete(j);
  free(s);
  model_config_free(c);

  c = load("sequence_stateful.pbtxt");
  s = model_config_to_json(c);
  j = cJSON_Parse(s);
  cJSON *sb = obj(j, "sequence_batching");
  assert_int_equal(obj(sb, "max_sequence_idle_microseconds")->valueint, 5000000);
  cJSON *ci = obj(sb, "control_input");
  assert_int_equal(cJSON_GetArraySize(ci), 4);
  cJSON *ctl = cJSON_GetArrayItem(obj(cJSON_GetArrayItem(ci, 0), "control"), 0);
  assert_string_equal(obj(ctl, "kind")->valuestring, "CONTROL_SEQUENCE_START");
  assert_int_equal(cJSON_GetArraySize(obj(ctl, "fp32_false_true")), 2);
  cJSON_Delete(j);
  free(s);
  model_config_free(c);

  c = load("warmup_classifier.pbtxt");
  s = model_config_to_json(c);
  j = cJSON_Parse(s);
  cJSON *w1 = cJSON_GetArrayItem(obj(j, "model_warmup"), 1);
  assert_int_equal(obj(w1, "count")->valueint, 3);
  cJSON *fc = obj(obj(w1, "inputs"), "face_count");
  assert_string_equal(obj(fc, "input_data_file")->valuestring, "face_count.bin");
  assert_int_equal(cJSON_GetArrayItem(obj(fc, "dims"), 0)->valueint, 1);
  cJSON_Delete(j);
  free(s);
  model_config_free(c);

  c = load("versioned_cached.pbtxt");
  s = model_config_to_json(c);
  j = cJSON_Parse(s);
  cJSON *vs = obj(obj(obj(j, "version_policy"), "specific"), "versions");
  assert_int_equal(cJSON_GetArrayItem(vs, 1)->valueint, 3);
  assert_string_equal(obj(obj(j, "cc_model_filenames"), "8.0")->valuestring, "model_a100.onnx");
  assert_string_equal(obj(obj(j, "metric_tags"), "team")->valuestring, "nlp");
  assert_true(cJSON_IsTrue(obj(obj(j, "response_cache"), "enable")));
  cJSON_Delete(j);
  free(s);
  model_config_free(c);

  /* kept trees: floats, inf as protobuf JSON's "Infinity", repeated fields as arrays */
  c = load("syntax_variants.pbtxt");
  s = model_config_to_json(c);
  j = cJSON_Parse(s);
  cJSON *mc = cJSON_GetArrayItem(obj(obj(j, "model_metrics"), "metric_control"), 0);
  cJSON *buckets = obj(obj(mc, "histogram_options"), "buckets");
  assert_int_equal(cJSON_GetArraySize(buckets), 7);
  assert_true(cJSON_GetArrayItem(buckets, 0)->valuedouble == -5.0);
  assert_true(cJSON_GetArrayItem(buckets, 4)->valuedouble == 500.0);
  assert_string_equal(cJSON_GetArrayItem(buckets, 6)->valuestring, "Infinity");
  assert_string_equal(obj(cJSON_GetArrayItem(obj(j, "input"), 0), "name")->valuestring, "inAA\t\"q\"\\");
  assert_int_equal(obj(obj(obj(j, "version_policy"), "latest"), "num_versions")->valueint, 2);
  cJSON_Delete(j);
  free(s);
  model_config_free(c);

  c = load("ragged_batch_io.pbtxt");
  s = model_config_to_json(c);
  j = cJSON_Parse(s);
  cJSON *bi = cJSON_GetArrayItem(obj(j, "batch_input"), 0);
  assert_string_equal(obj(bi, "kind")->valuestring, "BATCH_ACCUMULATED_ELEMENT_COUNT");
  assert_string_equal(cJSON_GetArrayItem(obj(bi, "target_name"), 0)->valuestring, "INDEX");
  cJSON *g0 = cJSON_GetArrayItem(obj(j, "instance_group"), 0);
  assert_int_equal(obj(obj(g0, "rate_limiter"), "priority")->valueint, 2);
  assert_string_equal(obj(cJSON_GetArrayItem(obj(obj(g0, "rate_limiter"), "resources"), 0), "name")->valuestring, "R1");
  assert_string_equal(obj(cJSON_GetArrayItem(obj(g0, "secondary_devices"), 0), "kind")->valuestring, "KIND_NVDLA");
  assert_true(cJSON_IsObject(obj(obj(j, "version_policy"), "all")));
  cJSON_Delete(j);
  free(s);
  model_config_free(c);
}

static void test_json_large_integers_exact(void **state) {
  (void)state;
  const char *text = "max_batch_size: 1\n"
                     "dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }\n"
                     "input { name: \"x\" data_type: TYPE_INT64 dims: 9007199254740993 }";
  cinfer_model_config *c = NULL;
  cinfer_status *st = model_config_parse("big.pbtxt", text, strlen(text), &c);
  assert_null(st);
  char *s = model_config_to_json(c);
  /* 2^53+1 and 2^64-1 survive digit for digit (a double would round them) */
  assert_non_null(strstr(s, "\"dims\":[9007199254740993]"));
  assert_non_null(strstr(s, "\"max_queue_delay_microseconds\":18446744073709551615"));
  free(s);
  model_config_free(c);
}

/* Large but legal inputs stay cheap (no quadratic paths), and entry caps are enforced. */
static void test_large_inputs(void **state) {
  (void)state;
  size_t cap = PBTXT_MAX_INPUT, n = 0;
  char *t = malloc(cap);
  assert_non_null(t);

  /* 60,000 distinct fields in a kept message: printed as 60,000 JSON members */
  n = (size_t)snprintf(t, cap, "optimization {");
  for (int i = 0; i < 60000; i++) n += (size_t)snprintf(t + n, cap - n, " f%d: %d", i, i);
  n += (size_t)snprintf(t + n, cap - n, " }");
  cinfer_model_config *c = NULL;
  cinfer_status *st = model_config_parse("big.pbtxt", t, n, &c);
  assert_null(st);
  char *json = model_config_to_json(c);
  cJSON *j = cJSON_Parse(json);
  assert_int_equal(cJSON_GetArraySize(obj(j, "optimization")), 60000);
  assert_int_equal(obj(obj(j, "optimization"), "f59999")->valueint, 59999);
  cJSON_Delete(j);
  free(json);
  model_config_free(c);

  /* one parameter too many */
  n = 0;
  for (int i = 0; i <= MODEL_CONFIG_MAX_ENTRIES; i++)
    n += (size_t)snprintf(t + n, cap - n, "parameters{key:\"k%d\" value{string_value:\"v\"}}\n", i);
  st = model_config_parse("many.pbtxt", t, n, &c);
  assert_non_null(st);
  assert_string_equal(cinfer_status_message(st), "many.pbtxt:4097:1: too many 'parameters' entries (limit 4096)");
  cinfer_status_free(st);

  /* a 4,000-step chain ensemble validates (sorted data-flow checks) */
  n = (size_t)snprintf(t, cap,
                       "name: \"chain\" platform: \"ensemble\"\n"
                       "input { name: \"t0\" data_type: TYPE_FP32 dims: 1 }\n"
                       "output { name: \"t4000\" data_type: TYPE_FP32 dims: 1 }\n"
                       "ensemble_scheduling {\n");
  for (int i = 0; i < 4000; i++)
    n += (size_t)snprintf(t + n, cap - n,
                          "step { model_name: \"m\" input_map { key: \"x\" value: \"t%d\" } "
                          "output_map { key: \"y\" value: \"t%d\" } }\n",
                          i, i + 1);
  n += (size_t)snprintf(t + n, cap - n, "}\n");
  st = model_config_parse("chain.pbtxt", t, n, &c);
  if (st) fail_msg("%s", cinfer_status_message(st));
  assert_int_equal(c->n_ensemble_steps, 4000);
  assert_null(model_config_validate(c));
  model_config_free(c);
  /* the same chain with one step reading a tensor nobody writes */
  char *hole = strstr(t, "value: \"t2000\" } output_map");
  assert_non_null(hole);
  memcpy(hole + 8, "x", 1); /* t2000 -> x2000 */
  st = model_config_parse("chain.pbtxt", t, n, &c);
  assert_non_null(st);
  assert_string_equal(cinfer_status_message(st),
                      "chain.pbtxt:2005:1: ensemble step 2000 ('m') reads 'x2000', which is neither an ensemble "
                      "input nor written by a step");
  cinfer_status_free(st);
  free(t);
}

/* ---- auto-complete and validate ------------------------------------------------------ */

static void test_autocomplete(void **state) {
  (void)state;
  size_t len;
  char *text = read_data("identity_minimal.pbtxt", &len);
  cinfer_model_config *c = NULL;
  assert_null(model_config_parse("identity_minimal.pbtxt", text, len, &c));
  free(text);
  assert_string_equal(c->name, "");
  assert_int_equal(c->n_inputs, 0);
  assert_null(model_config_validate(c));

  int64_t dims[] = {-1, 16};
  model_config_io *io = NULL;
  assert_null(model_config_add_input(c, "INPUT0", CINFER_TYPE_FP32, 2, dims, &io));
  assert_string_equal(io->name, "INPUT0");
  DIMS(io->dims, io->ndims, -1, 16);
  cinfer_status *st = model_config_add_input(c, "INPUT0", CINFER_TYPE_FP32, 2, dims, NULL);
  assert_int_equal(cinfer_status_code(st), CINFER_ALREADY_EXISTS);
  cinfer_status_free(st);
  st = model_config_add_input(c, "BIG", CINFER_TYPE_FP32, CINFER_MAX_DIMS + 1, dims, NULL);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  cinfer_status_free(st);

  /* an output without dims is incomplete: validate names it */
  assert_null(model_config_add_output(c, "OUTPUT0", CINFER_TYPE_FP32, 0, NULL, &io));
  assert_null(model_config_set_name(c, "identity"));
  st = model_config_validate(c);
  assert_non_null(st);
  assert_string_equal(cinfer_status_message(st), "model 'identity': output 'OUTPUT0' must specify 'dims'");
  cinfer_status_free(st);
  io->ndims = 2;
  io->dims[0] = -1;
  io->dims[1] = 0; /* invalid dim */
  st = model_config_validate(c);
  assert_string_equal(cinfer_status_message(st),
                      "model 'identity': output 'OUTPUT0': dims must be >= 1, or -1 for a variable-size dimension");
  cinfer_status_free(st);
  io->dims[1] = 16;
  assert_null(model_config_validate(c));
  /* an auto-completed input whose type is still unknown */
  assert_null(model_config_add_input(c, "INPUT1", CINFER_TYPE_INVALID, 1, dims, NULL));
  st = model_config_validate(c);
  assert_string_equal(cinfer_status_message(st), "model 'identity': input 'INPUT1' must specify 'data_type'");
  cinfer_status_free(st);
  model_config_free(c);
}

static void test_partial_config_then_validate(void **state) {
  (void)state;
  /* Triton allows a config to name an input and let auto-complete fill the rest: parse
   * accepts it, validate (after auto-complete) insists. */
  const char *text = "name: \"m\"\nmax_batch_size: 2\ninput { name: \"x\" }\n";
  cinfer_model_config *c = NULL;
  assert_null(model_config_parse("p.pbtxt", text, strlen(text), &c));
  cinfer_status *st = model_config_validate(c);
  assert_string_equal(cinfer_status_message(st), "p.pbtxt:3:1: input 'x' must specify 'data_type'");
  cinfer_status_free(st);
  model_config_free(c);
}

static void test_new_and_load_file(void **state) {
  (void)state;
  cinfer_model_config *c = NULL;
  assert_null(model_config_new("plain", &c));
  assert_string_equal(c->name, "plain");
  assert_string_equal(c->platform, "");
  char *s = model_config_to_json(c);
  assert_non_null(strstr(s, "\"name\":\"plain\""));
  free(s);
  model_config_free(c);
  model_config_free(NULL);

  char path[1024];
  snprintf(path, sizeof path, "%s/resnet50_dynamic.pbtxt", CINFER_CONFIG_DIR);
  assert_null(model_config_load_file(path, &c));
  assert_string_equal(c->name, "resnet50");
  assert_string_equal(c->source_path, path);
  model_config_free(c);

  cinfer_status *st = model_config_load_file("/nonexistent/config.pbtxt", &c);
  assert_int_equal(cinfer_status_code(st), CINFER_NOT_FOUND);
  assert_null(c);
  cinfer_status_free(st);
  st = model_config_load_file(CINFER_CONFIG_DIR, &c);
  assert_non_null(strstr(cinfer_status_message(st), "not a regular file"));
  cinfer_status_free(st);
}

/* model_config_parse_json reads what model_config_to_json writes (Triton's GET config ->
 * load-with-config): every corpus config goes file -> JSON -> config -> JSON unchanged. */
static void test_json_round_trip(void **state) {
  (void)state;
  static const char *files[] = {
      "densenet_onnx.pbtxt", "resnet50_dynamic.pbtxt", "face_detect_priority.pbtxt",
      "ensemble_face_pipeline.pbtxt", "sequence_stateful.pbtxt", "bert_tokenizer_python.pbtxt",
      "warmup_classifier.pbtxt", "tensorrt_profiles.pbtxt", "versioned_cached.pbtxt",
      "syntax_variants.pbtxt", "llm_decoupled.pbtxt", "ragged_batch_io.pbtxt",
      "identity_minimal.pbtxt"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    cinfer_model_config *c = load(files[i]);
    char *j1 = model_config_to_json(c);
    assert_non_null(j1);
    cinfer_model_config *c2 = NULL;
    cinfer_status *st = model_config_parse_json("json", j1, strlen(j1), &c2);
    if (st) fail_msg("%s: %s\n%s", files[i], cinfer_status_message(st), j1);
    char *j2 = model_config_to_json(c2);
    if (strcmp(j1, j2)) fail_msg("%s: round trip differs:\n%s\n%s", files[i], j1, j2);
    free(j1);
    free(j2);
    model_config_free(c);
    model_config_free(c2);
  }
  /* Errors name the field (no line numbers in JSON). */
  static const struct { const char *json, *want; } bad[] = {
      {"{\"max_batch_size\":\"x\"}", "json: field 'max_batch_size' expects an integer, found a string"},
      {"{\"max_batch_size\":-1}", "json: max_batch_size must be >= 0, got -1"},
      {"{\"input\":[{\"name\":\"a\",\"data_type\":\"TYPE_X\"}]}", "invalid data type 'TYPE_X'"},
      {"{\"instance_group\":[{\"kind\":\"KIND_TPU\"}]}", "invalid value 'KIND_TPU' for field 'kind'"},
      {"{\"nope\":{}}", "json: unknown field 'nope' in model config"},
      {"{\"input\":[[1]]}", "nested arrays"},
      {"{\"input\":[null]}", "null is not a value"},
      {"{\"name\":1}", "field 'name' expects a string"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    cinfer_model_config *c = NULL;
    cinfer_status *st = model_config_parse_json("json", bad[i].json, strlen(bad[i].json), &c);
    assert_non_null(st);
    assert_null(c);
    if (!strstr(cinfer_status_message(st), bad[i].want))
      fail_msg("%s: '%s' lacks '%s'", bad[i].json, cinfer_status_message(st), bad[i].want);
    cinfer_status_free(st);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_densenet),
      cmocka_unit_test(test_resnet_dynamic),
      cmocka_unit_test(test_priority_queue_policy),
      cmocka_unit_test(test_ensemble),
      cmocka_unit_test(test_sequence_batching_kept),
      cmocka_unit_test(test_parameters_and_strings),
      cmocka_unit_test(test_warmup),
      cmocka_unit_test(test_tensorrt_profiles),
      cmocka_unit_test(test_versions_cache_tags),
      cmocka_unit_test(test_syntax_variants),
      cmocka_unit_test(test_llm_decoupled),
      cmocka_unit_test(test_ragged_groups),
      cmocka_unit_test(test_malformed_table),
      cmocka_unit_test(test_truncations),
      cmocka_unit_test(test_json_output),
      cmocka_unit_test(test_json_other_sections),
      cmocka_unit_test(test_json_large_integers_exact),
      cmocka_unit_test(test_large_inputs),
      cmocka_unit_test(test_autocomplete),
      cmocka_unit_test(test_partial_config_then_validate),
      cmocka_unit_test(test_new_and_load_file),
      cmocka_unit_test(test_json_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
