/* config_json.c: cinfer_model_config -> the JSON that Triton's GET /v2/models/NAME/config
 * returns.
 *
 * Triton prints the ModelConfig protobuf with preserve_proto_field_names and
 * always_print_primitive_fields, then rewrites the 64-bit integer fields (dims, reshape
 * shape, versions, queue delays/timeouts, priority levels, step model_version, warmup
 * dims) from protobuf's JSON strings into numbers. So: every scalar and repeated field is
 * present (defaults included), unset sub-messages are absent, enums are names, all
 * integers are JSON numbers, map keys are strings. Fields are in .proto declaration order.
 *
 * Integers are emitted as raw number text so 64-bit values keep every digit (cJSON
 * numbers are doubles).
 *
 * Kept sub-messages (sequence_batching, optimization, batch_input, ...) are printed from
 * their trees: repeated fields (known names, or fields that occur more than once or in
 * list syntax) as arrays, map fields as objects; only the fields present in the file are
 * printed, since the tree has no schema for defaults.
 */
#include "repo/config.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *num_i64(int64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%" PRId64, v);
  return cJSON_CreateRaw(b);
}
static cJSON *num_u64(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%" PRIu64, v);
  return cJSON_CreateRaw(b);
}

/* Adds item to obj (or frees it); returns false when item is NULL (allocation failed). */
static bool add(cJSON *obj, const char *key, cJSON *item) {
  if (!item) return false;
  if (!cJSON_AddItemToObject(obj, key, item)) {
    cJSON_Delete(item);
    return false;
  }
  return true;
}
static bool append(cJSON *arr, cJSON *item) {
  if (!item) return false;
  if (!cJSON_AddItemToArray(arr, item)) {
    cJSON_Delete(item);
    return false;
  }
  return true;
}
static bool add_str(cJSON *o, const char *k, const char *s) { return add(o, k, cJSON_CreateString(s ? s : "")); }
static bool add_bool(cJSON *o, const char *k, bool b) { return add(o, k, cJSON_CreateBool(b)); }

static cJSON *dims_array(const int64_t *d, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++)
    if (!append(a, num_i64(d[i]))) {
      cJSON_Delete(a);
      return NULL;
    }
  return a;
}

/* ---- generic tree -> JSON ----------------------------------------------------------- */

static const char *const repeated_names[] = {
    "control_input", "control", "int32_false_true", "fp32_false_true", "bool_false_true", "state",
    "initial_state", "dims", "preferred_batch_size", "step", "gpu_execution_accelerator",
    "cpu_execution_accelerator", "graph_spec", "agents", "metric_control", "buckets",
    "op_library_filename", "resources", "source_input", "target_name", "shape", "secondary_devices",
    "int32_false_true", "batch_input", "batch_output"};
static const char *const map_names[] = {"parameters", "input_map", "output_map", "cc_model_filenames",
                                        "metric_tags", "inputs", "priority_queue_policy", "input"};

static bool in_list(const char *const *l, size_t n, const char *s) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(l[i], s)) return true;
  return false;
}

static cJSON *tree_json(const pbtxt_node *n);

static cJSON *scalar_json(const pbtxt_node *n) {
  switch (n->kind) {
    case PBTXT_MESSAGE: return tree_json(n);
    case PBTXT_STRING: return cJSON_CreateString(n->str);
    case PBTXT_INT: {
      int64_t v;
      if (pbtxt_as_int64(n, &v)) return num_i64(v);
      return num_u64(n->mag);
    }
    case PBTXT_FLOAT:
      if (isnan(n->f)) return cJSON_CreateString("NaN");
      if (isinf(n->f)) return cJSON_CreateString(n->f > 0 ? "Infinity" : "-Infinity");
      return cJSON_CreateNumber(n->f);
    case PBTXT_IDENT: {
      bool b;
      if (pbtxt_as_bool(n, &b)) return cJSON_CreateBool(b);
      double d;
      if (pbtxt_as_double(n, &d)) return cJSON_CreateString(isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
      return cJSON_CreateString(n->str);
    }
  }
  return NULL;
}

static bool is_map_entry(const pbtxt_node *e) {
  if (e->kind != PBTXT_MESSAGE) return false;
  for (size_t i = 0; i < e->n_children; i++)
    if (strcmp(e->children[i]->name, "key") && strcmp(e->children[i]->name, "value")) return false;
  return pbtxt_child(e, "key") != NULL;
}

/* Children of one message grouped by field name: a group is a run of `len` entries of
 * `order` (child indices, ascending) that share a name; groups are emitted in order of
 * their first child. Sorting keeps this O(n log n) for messages with many fields. */
typedef struct child_ref {
  const char *name;
  size_t idx;
} child_ref;
typedef struct child_group {
  size_t first, start, len;
} child_group;

static int child_ref_cmp(const void *a, const void *b) {
  const child_ref *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  return r ? r : (x->idx > y->idx) - (x->idx < y->idx);
}
static int child_group_cmp(const void *a, const void *b) {
  const child_group *x = a, *y = b;
  return (x->first > y->first) - (x->first < y->first);
}

/* JSON value for the group's children (all named the same). */
static cJSON *group_json(const pbtxt_node *n, const child_ref *refs, const child_group *g) {
  const pbtxt_node *c0 = n->children[refs[g->start].idx];
  bool listed = false, all_entries = true;
  for (size_t j = 0; j < g->len; j++) {
    const pbtxt_node *c = n->children[refs[g->start + j].idx];
    listed |= c->in_list;
    all_entries &= is_map_entry(c);
  }
  if (in_list(map_names, sizeof map_names / sizeof *map_names, c0->name) && all_entries) {
    cJSON *v = cJSON_CreateObject();
    for (size_t j = 0; v && j < g->len; j++) {
      const pbtxt_node *e = n->children[refs[g->start + j].idx];
      const pbtxt_node *k = pbtxt_child(e, "key"), *val = pbtxt_child(e, "value");
      const char *key = k->str ? k->str : ""; /* scalars keep their text; a message key is "" */
      if (!add(v, key, val ? scalar_json(val) : cJSON_CreateObject())) {
        cJSON_Delete(v);
        v = NULL;
      }
    }
    return v;
  }
  if (g->len > 1 || listed || in_list(repeated_names, sizeof repeated_names / sizeof *repeated_names, c0->name)) {
    cJSON *v = cJSON_CreateArray();
    for (size_t j = 0; v && j < g->len; j++)
      if (!append(v, scalar_json(n->children[refs[g->start + j].idx]))) {
        cJSON_Delete(v);
        v = NULL;
      }
    return v;
  }
  return scalar_json(c0);
}

/* Recursion is bounded by the tree depth (PBTXT_MAX_DEPTH). */
static cJSON *tree_json(const pbtxt_node *n) {
  size_t k = n->n_children;
  cJSON *o = cJSON_CreateObject();
  child_ref *refs = malloc((k ? k : 1) * sizeof *refs);
  child_group *groups = malloc((k ? k : 1) * sizeof *groups);
  bool ok = o && refs && groups;
  size_t ng = 0;
  if (ok) {
    for (size_t i = 0; i < k; i++) refs[i] = (child_ref){n->children[i]->name, i};
    qsort(refs, k, sizeof *refs, child_ref_cmp);
    for (size_t i = 0; i < k; i++) {
      if (i == 0 || strcmp(refs[i - 1].name, refs[i].name)) groups[ng++] = (child_group){refs[i].idx, i, 0};
      groups[ng - 1].len++;
    }
    qsort(groups, ng, sizeof *groups, child_group_cmp);
  }
  for (size_t i = 0; ok && i < ng; i++)
    ok = add(o, n->children[groups[i].first]->name, group_json(n, refs, &groups[i]));
  free(refs);
  free(groups);
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* ---- typed parts -------------------------------------------------------------------- */

static cJSON *io_json(const model_config_io *io, bool input) {
  cJSON *o = cJSON_CreateObject();
  bool ok = o && add_str(o, "name", io->name) && add_str(o, "data_type", cinfer_dtype_config_name(io->data_type));
  if (ok && input) ok = add_str(o, "format", model_io_format_name(io->format));
  ok = ok && add(o, "dims", dims_array(io->dims, io->ndims));
  if (ok && io->has_reshape) {
    cJSON *r = cJSON_CreateObject();
    ok = r && add(r, "shape", dims_array(io->reshape, io->reshape_ndims));
    ok = add(o, "reshape", r) && ok;
  }
  if (input) {
    ok = ok && add_bool(o, "is_shape_tensor", io->is_shape_tensor) &&
         add_bool(o, "allow_ragged_batch", io->allow_ragged_batch) && add_bool(o, "optional", io->optional);
  } else {
    ok = ok && add_str(o, "label_filename", io->label_filename) && add_bool(o, "is_shape_tensor", io->is_shape_tensor);
  }
  ok = ok && add_bool(o, "is_non_linear_format_io", io->is_non_linear_format_io);
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static cJSON *queue_policy_json(const model_queue_policy *q) {
  cJSON *o = cJSON_CreateObject();
  bool ok = o && add_str(o, "timeout_action", model_timeout_action_name(q->timeout_action)) &&
            add(o, "default_timeout_microseconds", num_u64(q->default_timeout_microseconds)) &&
            add_bool(o, "allow_timeout_override", q->allow_timeout_override) &&
            add(o, "max_queue_size", num_u64(q->max_queue_size));
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static cJSON *dynamic_batching_json(const model_dynamic_batching *db) {
  /* Containers are attached to o as soon as they exist, so deleting o frees everything. */
  cJSON *o = cJSON_CreateObject(), *pref = NULL, *pqp = NULL;
  bool ok = o && (pref = cJSON_CreateArray()) && add(o, "preferred_batch_size", pref);
  for (size_t i = 0; ok && i < db->n_preferred_batch_size; i++) ok = append(pref, num_i64(db->preferred_batch_size[i]));
  ok = ok && add(o, "max_queue_delay_microseconds", num_u64(db->max_queue_delay_microseconds)) &&
       add_bool(o, "preserve_ordering", db->preserve_ordering) &&
       add(o, "priority_levels", num_u64(db->priority_levels)) &&
       add(o, "default_priority_level", num_u64(db->default_priority_level));
  if (ok && db->has_default_queue_policy) ok = add(o, "default_queue_policy", queue_policy_json(&db->default_queue_policy));
  ok = ok && (pqp = cJSON_CreateObject()) && add(o, "priority_queue_policy", pqp);
  for (size_t i = 0; ok && i < db->n_priority_queue_policy; i++) {
    char key[32];
    snprintf(key, sizeof key, "%" PRIu64, db->priority_queue_policy[i].level);
    ok = add(pqp, key, queue_policy_json(&db->priority_queue_policy[i].policy));
  }
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static cJSON *kv_object(const model_config_kv *kv, size_t n) {
  cJSON *o = cJSON_CreateObject();
  for (size_t i = 0; o && i < n; i++)
    if (!add_str(o, kv[i].key, kv[i].value)) {
      cJSON_Delete(o);
      return NULL;
    }
  return o;
}

static cJSON *ensemble_json(const cinfer_model_config *c) {
  cJSON *o = cJSON_CreateObject(), *steps = NULL;
  bool ok = o && (steps = cJSON_CreateArray()) && add(o, "step", steps);
  for (size_t i = 0; ok && i < c->n_ensemble_steps; i++) {
    const model_ensemble_step *s = &c->ensemble_steps[i];
    cJSON *so = cJSON_CreateObject();
    ok = so && add_str(so, "model_name", s->model_name) && add(so, "model_version", num_i64(s->model_version)) &&
         add(so, "input_map", kv_object(s->input_map, s->n_input_map)) &&
         add(so, "output_map", kv_object(s->output_map, s->n_output_map));
    if (!ok) cJSON_Delete(so);
    else ok = append(steps, so);
  }
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static cJSON *instance_group_json(const model_instance_group *g) {
  cJSON *o = cJSON_CreateObject(), *gpus = NULL, *prof = NULL, *sec = NULL;
  bool ok = o && add_str(o, "name", g->name) && add_str(o, "kind", model_instance_kind_name(g->kind)) &&
            add(o, "count", num_i64(g->count));
  const pbtxt_node *rl = g->tree ? pbtxt_child(g->tree, "rate_limiter") : NULL;
  if (ok && rl) ok = add(o, "rate_limiter", tree_json(rl));
  ok = ok && (gpus = cJSON_CreateArray()) && add(o, "gpus", gpus);
  for (size_t i = 0; ok && i < g->n_gpus; i++) ok = append(gpus, num_i64(g->gpus[i]));
  ok = ok && (sec = cJSON_CreateArray()) && add(o, "secondary_devices", sec);
  for (size_t i = 0; ok && g->tree && i < g->tree->n_children; i++)
    if (!strcmp(g->tree->children[i]->name, "secondary_devices")) ok = append(sec, tree_json(g->tree->children[i]));
  ok = ok && (prof = cJSON_CreateArray()) && add(o, "profile", prof);
  for (size_t i = 0; ok && i < g->n_profiles; i++) ok = append(prof, cJSON_CreateString(g->profiles[i]));
  ok = ok && add_bool(o, "passive", g->passive) && add_str(o, "host_policy", g->host_policy);
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

static cJSON *warmup_json(const model_warmup *w) {
  cJSON *o = cJSON_CreateObject(), *ins = NULL;
  bool ok = o && add_str(o, "name", w->name) && add(o, "batch_size", num_u64(w->batch_size)) &&
            (ins = cJSON_CreateObject()) && add(o, "inputs", ins);
  for (size_t i = 0; ok && i < w->n_inputs; i++) {
    const model_warmup_input *in = &w->inputs[i];
    cJSON *io = cJSON_CreateObject();
    ok = io && add_str(io, "data_type", cinfer_dtype_config_name(in->data_type)) &&
         add(io, "dims", dims_array(in->dims, in->ndims));
    if (ok) {
      switch (in->source) {
        case MODEL_WARMUP_ZERO_DATA: ok = add_bool(io, "zero_data", true); break;
        case MODEL_WARMUP_RANDOM_DATA: ok = add_bool(io, "random_data", true); break;
        case MODEL_WARMUP_INPUT_DATA_FILE: ok = add_str(io, "input_data_file", in->input_data_file); break;
      }
    }
    if (ok) ok = add(ins, in->key, io);
    else cJSON_Delete(io);
  }
  ok = ok && add(o, "count", num_u64(w->count));
  if (!ok) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* Kept repeated top-level field `name`: array (or object for maps), from every entry. */
static cJSON *kept_collection(const cinfer_model_config *c, const char *name, bool map) {
  cJSON *v = map ? cJSON_CreateObject() : cJSON_CreateArray();
  for (size_t i = 0; v && i < c->n_kept; i++) {
    const pbtxt_node *n = c->kept[i].node;
    if (strcmp(n->name, name)) continue;
    bool ok;
    if (map) {
      const pbtxt_node *k = pbtxt_child(n, "key"), *val = pbtxt_child(n, "value");
      ok = k && add_str(v, k->str, val ? val->str : "");
    } else {
      ok = append(v, tree_json(n));
    }
    if (!ok) {
      cJSON_Delete(v);
      return NULL;
    }
  }
  return v;
}

static const pbtxt_node *kept_one(const cinfer_model_config *c, const char *name) {
  for (size_t i = 0; i < c->n_kept; i++)
    if (!strcmp(c->kept[i].node->name, name)) return c->kept[i].node;
  return NULL;
}

char *model_config_to_json(const cinfer_model_config *c) {
  if (!c) return NULL;
  cJSON *o = cJSON_CreateObject(), *arr;
  bool ok = o && add_str(o, "name", c->name) && add_str(o, "platform", c->platform) &&
            add_str(o, "backend", c->backend) && add_str(o, "runtime", c->runtime);
  if (ok) {
    const model_version_policy *vp = &c->version_policy;
    cJSON *vo = NULL, *inner = NULL, *vs = NULL;
    const char *kn = vp->kind == MODEL_VERSION_ALL ? "all" : vp->kind == MODEL_VERSION_SPECIFIC ? "specific" : "latest";
    ok = (vo = cJSON_CreateObject()) && add(o, "version_policy", vo) && (inner = cJSON_CreateObject()) &&
         add(vo, kn, inner);
    if (ok && vp->kind == MODEL_VERSION_LATEST) ok = add(inner, "num_versions", num_u64(vp->num_versions));
    if (ok && vp->kind == MODEL_VERSION_SPECIFIC) ok = (vs = cJSON_CreateArray()) && add(inner, "versions", vs);
    for (size_t i = 0; ok && vs && i < vp->n_versions; i++) ok = append(vs, num_i64(vp->versions[i]));
  }
  ok = ok && add(o, "max_batch_size", num_i64(c->max_batch_size));
  ok = ok && (arr = cJSON_CreateArray()) && add(o, "input", arr);
  for (size_t i = 0; ok && i < c->n_inputs; i++) ok = append(arr, io_json(&c->inputs[i], true));
  ok = ok && (arr = cJSON_CreateArray()) && add(o, "output", arr);
  for (size_t i = 0; ok && i < c->n_outputs; i++) ok = append(arr, io_json(&c->outputs[i], false));
  ok = ok && add(o, "batch_input", kept_collection(c, "batch_input", false)) &&
       add(o, "batch_output", kept_collection(c, "batch_output", false));
  if (ok && c->optimization) ok = add(o, "optimization", tree_json(c->optimization));
  if (ok && c->has_dynamic_batching) ok = add(o, "dynamic_batching", dynamic_batching_json(&c->dynamic_batching));
  if (ok && c->sequence_batching) ok = add(o, "sequence_batching", tree_json(c->sequence_batching));
  if (ok && c->ensemble_scheduling) ok = add(o, "ensemble_scheduling", ensemble_json(c));
  ok = ok && (arr = cJSON_CreateArray()) && add(o, "instance_group", arr);
  for (size_t i = 0; ok && i < c->n_instance_groups; i++) ok = append(arr, instance_group_json(&c->instance_groups[i]));
  ok = ok && add_str(o, "default_model_filename", c->default_model_filename) &&
       add(o, "cc_model_filenames", kept_collection(c, "cc_model_filenames", true)) &&
       add(o, "metric_tags", kept_collection(c, "metric_tags", true));
  if (ok) {
    cJSON *p = cJSON_CreateObject();
    for (size_t i = 0; p && ok && i < c->n_parameters; i++) {
      cJSON *v = cJSON_CreateObject();
      ok = v && add_str(v, "string_value", c->parameters[i].value);
      if (ok) ok = add(p, c->parameters[i].key, v);
      else cJSON_Delete(v);
    }
    if (ok) ok = add(o, "parameters", p);
    else cJSON_Delete(p);
  }
  ok = ok && (arr = cJSON_CreateArray()) && add(o, "model_warmup", arr);
  for (size_t i = 0; ok && i < c->n_warmups; i++) ok = append(arr, warmup_json(&c->warmups[i]));
  const pbtxt_node *k;
  if (ok && (k = kept_one(c, "model_operations"))) ok = add(o, "model_operations", tree_json(k));
  if (ok && c->model_transaction_policy) {
    cJSON *t = cJSON_CreateObject();
    ok = t && add_bool(t, "decoupled", c->decoupled);
    if (ok) ok = add(o, "model_transaction_policy", t);
    else cJSON_Delete(t);
  }
  if (ok && (k = kept_one(c, "model_repository_agents"))) ok = add(o, "model_repository_agents", tree_json(k));
  if (ok && c->response_cache) {
    cJSON *t = cJSON_CreateObject();
    ok = t && add_bool(t, "enable", c->response_cache_enable);
    if (ok) ok = add(o, "response_cache", t);
    else cJSON_Delete(t);
  }
  if (ok && (k = kept_one(c, "model_metrics"))) ok = add(o, "model_metrics", tree_json(k));
  char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}

/* ---- JSON -> tree (model_config_parse_json) ------------------------------------------ */

/* Map fields of ModelConfig and its sub-messages: in JSON an object keyed by the map key,
 * in the text format one `NAME { key: K value: V }` entry per key. */
static const char *const json_map_fields[] = {"parameters", "input_map", "output_map",
                                              "cc_model_filenames", "metric_tags",
                                              "priority_queue_policy", "inputs"};

typedef struct jt_ctx {
  const char *path;
  cinfer_status *err;
  size_t n_nodes;
} jt_ctx;

static bool jt_oom(jt_ctx *x) {
  if (!x->err) x->err = cinfer_status_oom(NULL);
  return false;
}

static pbtxt_node *jt_child(jt_ctx *x, pbtxt_node *parent, const char *name) {
  if (++x->n_nodes > PBTXT_MAX_NODES) {
    if (!x->err)
      x->err = cinfer_status_new(CINFER_INVALID_ARG, "%s: too many fields (limit %u)", x->path,
                                 PBTXT_MAX_NODES);
    return NULL;
  }
  if (parent->n_children == parent->cap_children) {
    size_t ncap = parent->cap_children ? parent->cap_children * 2 : 4;
    pbtxt_node **nc = realloc(parent->children, ncap * sizeof *nc);
    if (!nc) return jt_oom(x), NULL;
    parent->children = nc;
    parent->cap_children = ncap;
  }
  pbtxt_node *n = calloc(1, sizeof *n);
  if (!n) return jt_oom(x), NULL;
  if (!(n->name = strdup(name))) {
    free(n);
    return jt_oom(x), NULL;
  }
  n->json = true;
  parent->children[parent->n_children++] = n;
  return n;
}

static bool jt_value(jt_ctx *x, pbtxt_node *n, const cJSON *v, int depth);

/* The members of object o become fields of message n. */
static bool jt_fields(jt_ctx *x, pbtxt_node *n, const cJSON *o, int depth) {
  for (const cJSON *it = o->child; it; it = it->next) {
    if (cJSON_IsNull(it)) continue; /* protobuf JSON: null = not set */
    if (cJSON_IsArray(it)) {
      for (const cJSON *el = it->child; el; el = el->next) {
        if (cJSON_IsArray(el)) {
          if (!x->err)
            x->err = cinfer_status_new(CINFER_INVALID_ARG, "%s: field '%s': nested arrays are not "
                                       "a ModelConfig field", x->path, it->string);
          return false;
        }
        pbtxt_node *c = jt_child(x, n, it->string);
        if (!c) return false;
        c->in_list = true;
        if (!jt_value(x, c, el, depth + 1)) return false;
      }
      continue;
    }
    if (cJSON_IsObject(it) && in_list(json_map_fields, sizeof json_map_fields / sizeof *json_map_fields,
                                      it->string)) {
      for (const cJSON *e = it->child; e; e = e->next) {
        pbtxt_node *c = jt_child(x, n, it->string), *k, *val;
        if (!c || !(k = jt_child(x, c, "key")) || !(val = jt_child(x, c, "value"))) return false;
        c->kind = PBTXT_MESSAGE;
        k->kind = PBTXT_STRING;
        if (!(k->str = strdup(e->string))) return jt_oom(x);
        k->len = strlen(k->str);
        if (!jt_value(x, val, e, depth + 2)) return false;
      }
      continue;
    }
    pbtxt_node *c = jt_child(x, n, it->string);
    if (!c || !jt_value(x, c, it, depth + 1)) return false;
  }
  return true;
}

static bool jt_value(jt_ctx *x, pbtxt_node *n, const cJSON *v, int depth) {
  if (depth > PBTXT_MAX_DEPTH) {
    if (!x->err)
      x->err = cinfer_status_new(CINFER_INVALID_ARG, "%s: nested deeper than %d messages", x->path,
                                 PBTXT_MAX_DEPTH);
    return false;
  }
  char num[64];
  const char *text = NULL;
  if (cJSON_IsObject(v)) {
    n->kind = PBTXT_MESSAGE;
    return jt_fields(x, n, v, depth);
  } else if (cJSON_IsString(v)) {
    n->kind = PBTXT_STRING;
    text = v->valuestring;
  } else if (cJSON_IsBool(v)) {
    n->kind = PBTXT_IDENT;
    text = cJSON_IsTrue(v) ? "true" : "false";
  } else if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9007199254740992.0) { /* exact in a double */
      n->kind = PBTXT_INT;
      n->neg = d < 0;
      n->mag = (uint64_t)fabs(d);
      snprintf(num, sizeof num, "%s%" PRIu64, n->neg ? "-" : "", n->mag);
    } else {
      n->kind = PBTXT_FLOAT;
      snprintf(num, sizeof num, "%.17g", d);
    }
    n->f = d;
    text = num;
  } else { /* null inside an array */
    if (!x->err)
      x->err = cinfer_status_new(CINFER_INVALID_ARG, "%s: field '%s': null is not a value", x->path,
                                 n->name);
    return false;
  }
  if (!(n->str = strdup(text))) return jt_oom(x);
  n->len = strlen(n->str);
  return true;
}

cinfer_status *model_config_json_tree(const char *path, const char *json, size_t len,
                                      pbtxt_node **out) {
  *out = NULL;
  if (len > MODEL_CONFIG_MAX_FILE)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: %zu bytes (limit %u)", path, len,
                             MODEL_CONFIG_MAX_FILE);
  cJSON *j = cJSON_ParseWithLength(json, len);
  if (!j) return cinfer_status_new(CINFER_INVALID_ARG, "%s: not valid JSON", path);
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: must be a JSON object (a ModelConfig)", path);
  }
  jt_ctx x = {.path = path};
  pbtxt_node *root = calloc(1, sizeof *root);
  if (!root || !(root->name = strdup(""))) {
    free(root);
    cJSON_Delete(j);
    return cinfer_status_oom(NULL);
  }
  root->kind = PBTXT_MESSAGE;
  root->json = true;
  bool ok = jt_fields(&x, root, j, 0);
  cJSON_Delete(j);
  if (!ok) {
    pbtxt_free(root);
    return x.err;
  }
  *out = root;
  return NULL;
}
