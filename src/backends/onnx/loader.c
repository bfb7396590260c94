/* loader.c: ModelProto bytes -> onnx_model (values, nodes, attributes, constants).
 *
 * Everything from the file is validated here or in onnx_tensor_from_proto: tensor dims and
 * byte counts, names (every input of a node must be produced exactly once), opsets, operator
 * support (unsupported -> error naming the op, opset and node). Graph order, folding and
 * fusion happen afterwards in graph_compile(). The protobuf message is freed before
 * returning; the model owns copies of everything it keeps. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "backends/onnx/onnx_impl.h"
#include "backends/onnx/plan.h"
#include "backends/onnx/tensor_pb.h"

#define MAX_NODES 1000000

/* Subnormal FP32 weights (|w| < FLT_MIN, w != 0) become 0. Trained models carry them
 * (SSR-Net's gender model: 13,331 of 44,487 weights), and on x86 each multiply by one
 * takes a microcode assist: ssrnet_gender ran 13 ms against its age twin's 0.6 ms. A
 * subnormal weight changes a sum of normal products by less than one ulp, so the
 * results are those of the file. */
static void flush_subnormal(ot *t) {
  if (t->dtype != CINFER_TYPE_FP32 || !t->data) return;
  float *f = t->data;
  for (int64_t i = 0, n = ot_numel(t); i < n; i++)
    if (f[i] != 0.0f && fabsf(f[i]) < FLT_MIN) f[i] = 0.0f;
}

/* ---- name -> value id hash ---- */
typedef struct name_map {
  int *slot; /* value id + 1, 0 = empty */
  size_t cap;
  onnx_model *m;
} name_map;

static int map_find(const name_map *nm, const char *name) {
  for (size_t i = hash_str(name) & (nm->cap - 1);; i = (i + 1) & (nm->cap - 1)) {
    if (!nm->slot[i]) return -1;
    if (!strcmp(nm->m->values[nm->slot[i] - 1].name, name)) return nm->slot[i] - 1;
  }
}

static void map_put(name_map *nm, const char *name, int id) {
  size_t i = hash_str(name) & (nm->cap - 1);
  while (nm->slot[i]) i = (i + 1) & (nm->cap - 1);
  nm->slot[i] = id + 1;
}

static int value_add(onnx_model *m, name_map *nm, const char *name, val_kind kind) {
  if (m->n_values == m->cap_values) {
    int nc = m->cap_values ? m->cap_values * 2 : 64;
    onnx_value *nv = realloc(m->values, (size_t)nc * sizeof *nv);
    if (!nv) return -1;
    m->values = nv;
    m->cap_values = nc;
  }
  onnx_value *v = &m->values[m->n_values];
  memset(v, 0, sizeof *v);
  v->name = strdup(name);
  if (!v->name) return -1;
  v->kind = kind;
  v->producer = -1;
  map_put(nm, v->name, m->n_values);
  return m->n_values++;
}

static void fill_info(onnx_io_info *info, const Onnx__ValueInfoProto *vi, const char *name) {
  memset(info, 0, sizeof *info);
  info->name = name;
  info->ndim = -1;
  info->dtype = CINFER_TYPE_INVALID;
  if (!vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) return;
  const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
  if (!tt) return;
  info->dtype = onnx_dtype_from_proto(tt->elem_type);
  if (!tt->shape || tt->shape->n_dim > CINFER_MAX_DIMS) return;
  info->ndim = (int)tt->shape->n_dim;
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    info->shape[i] = -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0)
      info->shape[i] = d->dim_value;
    else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
      info->dim_name[i] = d->dim_param; /* re-pointed to a copy below */
  }
}

static cinfer_status *copy_attr(onnx_attr *a, const Onnx__AttributeProto *p, const char *base,
                                const char *node) {
  free(a->name); /* set already when called again below for an untyped attribute */
  a->name = strdup(p->name ? p->name : "");
  if (!a->name) return cinfer_status_oom(NULL);
  switch (p->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: a->type = ATTR_F; a->f = p->f; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: a->type = ATTR_I; a->i = p->i; break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING:
      a->type = ATTR_S;
      a->s = malloc(p->s.len + 1);
      if (!a->s) return cinfer_status_oom(NULL);
      if (p->s.len) memcpy(a->s, p->s.data, p->s.len);
      a->s[p->s.len] = 0;
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
      a->type = ATTR_T;
      if (!p->t)
        return cinfer_status_new(CINFER_INVALID_ARG, "node '%s': attribute '%s' has no tensor",
                                 node, a->name);
      return onnx_tensor_from_proto(p->t, base, &a->t);
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
      a->type = ATTR_FS;
      if (p->n_floats > INT32_MAX)
        return cinfer_status_new(CINFER_INVALID_ARG, "attribute too long");
      a->n = (int)p->n_floats;
      a->fs = malloc((p->n_floats + 1) * sizeof(float));
      if (!a->fs) return cinfer_status_oom(NULL);
      if (p->n_floats) memcpy(a->fs, p->floats, p->n_floats * sizeof(float));
      break;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
      a->type = ATTR_IS;
      if (p->n_ints > INT32_MAX) return cinfer_status_new(CINFER_INVALID_ARG, "attribute too long");
      a->n = (int)p->n_ints;
      a->is = malloc((p->n_ints + 1) * sizeof(int64_t));
      if (!a->is) return cinfer_status_oom(NULL);
      if (p->n_ints) memcpy(a->is, p->ints, p->n_ints * sizeof(int64_t));
      break;
    default:
      /* Older writers leave `type` unset: infer it from the populated field. */
      if (!p->has_type || p->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) {
        if (p->n_ints) { Onnx__AttributeProto q = *p; q.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS; return copy_attr(a, &q, base, node); }
        if (p->n_floats) { Onnx__AttributeProto q = *p; q.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS; return copy_attr(a, &q, base, node); }
        if (p->t) { Onnx__AttributeProto q = *p; q.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR; return copy_attr(a, &q, base, node); }
        if (p->has_s) { Onnx__AttributeProto q = *p; q.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING; return copy_attr(a, &q, base, node); }
        if (p->has_f) { a->type = ATTR_F; a->f = p->f; break; }
        if (p->has_i) { a->type = ATTR_I; a->i = p->i; break; }
      }
      a->type = ATTR_OTHER;
      break;
  }
  return NULL;
}

static void free_attr(onnx_attr *a) {
  free(a->name);
  free(a->s);
  free(a->fs);
  free(a->is);
  ot_free(a->t);
}

void onnx_model_destroy(onnx_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_values; i++) {
    free(m->values[i].name);
    ot_free(m->values[i].cval);
    for (int d = 0; d < CINFER_MAX_DIMS; d++) free((char *)m->values[i].info.dim_name[d]);
  }
  free(m->values);
  for (int i = 0; i < m->n_nodes; i++) {
    onnx_node *n = &m->nodes[i];
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->in);
    free(n->out);
    for (int a = 0; a < n->n_attr; a++) free_attr(&n->attr[a]);
    free(n->attr);
  }
  free(m->nodes);
  free(m->inputs);
  free(m->key_input);
  free(m->outputs);
  free(m->in_info);
  free(m->out_info);
  for (int i = 0; i < m->n_opsets; i++) free(m->opsets[i].domain);
  free(m->opsets);
  free(m->producer);
  for (int i = 0; i < m->n_hist; i++) free(m->hist_name[i]);
  free(m->hist_name);
  free(m->hist_count);
  free(m);
}

static int64_t domain_opset(const onnx_model *m, const char *domain) {
  bool dflt = !domain || !*domain || !strcmp(domain, "ai.onnx");
  for (int i = 0; i < m->n_opsets; i++) {
    const char *d = m->opsets[i].domain;
    bool odflt = !d || !*d || !strcmp(d, "ai.onnx");
    if (dflt ? odflt : (d && !strcmp(d, domain))) return m->opsets[i].version;
  }
  return -1;
}

static void hist_add(onnx_model *m, const char *op) {
  for (int i = 0; i < m->n_hist; i++)
    if (!strcmp(m->hist_name[i], op)) {
      m->hist_count[i]++;
      return;
    }
  char **nn = realloc(m->hist_name, (size_t)(m->n_hist + 1) * sizeof *nn);
  if (!nn) return;
  m->hist_name = nn;
  int *nc = realloc(m->hist_count, (size_t)(m->n_hist + 1) * sizeof *nc);
  if (!nc) return;
  m->hist_count = nc;
  if (!(m->hist_name[m->n_hist] = strdup(op))) return;
  m->hist_count[m->n_hist++] = 1;
}

#define FAIL(code, ...)                              \
  do {                                               \
    st = cinfer_status_new(code, __VA_ARGS__);       \
    goto fail;                                       \
  } while (0)

static cinfer_status *build(onnx_model *m, const Onnx__ModelProto *mp, const char *base) {
  cinfer_status *st = NULL;
  name_map nm = {0};
  const Onnx__GraphProto *g = mp->graph;
  if (!g) return cinfer_status_new(CINFER_INVALID_ARG, "model has no graph");
  m->ir_version = mp->ir_version;
  m->producer = strdup(mp->producer_name ? mp->producer_name : "");
  m->opsets = calloc(mp->n_opset_import + 1, sizeof *m->opsets);
  if (!m->producer || !m->opsets) FAIL(CINFER_INTERNAL, "out of memory");
  for (size_t i = 0; i < mp->n_opset_import; i++) {
    m->opsets[i].domain = strdup(mp->opset_import[i]->domain ? mp->opset_import[i]->domain : "");
    if (!m->opsets[i].domain) FAIL(CINFER_INTERNAL, "out of memory");
    m->opsets[i].version = mp->opset_import[i]->version;
    m->n_opsets++;
  }
  if (g->n_node > MAX_NODES) FAIL(CINFER_INVALID_ARG, "graph has %zu nodes (limit %d)", g->n_node, MAX_NODES);
  if (g->n_sparse_initializer)
    FAIL(CINFER_UNSUPPORTED, "sparse initializers are not supported");
  size_t expect = g->n_initializer + g->n_input + g->n_output * 0;
  for (size_t i = 0; i < g->n_node; i++) expect += g->node[i]->n_output + g->node[i]->n_input;
  nm.cap = 64;
  while (nm.cap < expect * 2 + 16) nm.cap <<= 1;
  nm.slot = calloc(nm.cap, sizeof *nm.slot);
  nm.m = m;
  if (!nm.slot) FAIL(CINFER_INTERNAL, "out of memory");

  for (size_t i = 0; i < g->n_initializer; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    const char *name = tp->name ? tp->name : "";
    if (!*name) FAIL(CINFER_INVALID_ARG, "initializer %zu has no name", i);
    if (map_find(&nm, name) >= 0) FAIL(CINFER_INVALID_ARG, "initializer '%s' is defined twice", name);
    ot *t;
    if ((st = onnx_tensor_from_proto(tp, base, &t))) goto fail;
    flush_subnormal(t);
    int id = value_add(m, &nm, name, VAL_CONST);
    if (id < 0) { ot_free(t); FAIL(CINFER_INTERNAL, "out of memory"); }
    m->values[id].cval = t;
    m->n_params += ot_numel(t);
  }
  /* The graph's interface counts are limits of the serving API (include/cinfer/types.h);
   * past this check everything is sized from them. Inputs that name an initializer
   * (IR < 4 style) are constants, not inputs, and do not count. */
  if (g->n_output > CINFER_MAX_OUTPUTS)
    FAIL(CINFER_INVALID_ARG, "model has %zu outputs; the limit is CINFER_MAX_OUTPUTS = %d",
         g->n_output, CINFER_MAX_OUTPUTS);
  size_t n_real_inputs = 0;
  for (size_t i = 0; i < g->n_input; i++) {
    const char *name = g->input[i]->name ? g->input[i]->name : "";
    int id = *name ? map_find(&nm, name) : -1;
    if (id < 0 || m->values[id].kind != VAL_CONST) n_real_inputs++;
  }
  if (n_real_inputs > CINFER_MAX_INPUTS)
    FAIL(CINFER_INVALID_ARG, "model has %zu inputs; the limit is CINFER_MAX_INPUTS = %d",
         n_real_inputs, CINFER_MAX_INPUTS);
  m->inputs = calloc(g->n_input + 1, sizeof *m->inputs);
  m->outputs = calloc(g->n_output + 1, sizeof *m->outputs);
  if (!m->inputs || !m->outputs) FAIL(CINFER_INTERNAL, "out of memory");
  for (size_t i = 0; i < g->n_input; i++) {
    const char *name = g->input[i]->name ? g->input[i]->name : "";
    if (!*name) FAIL(CINFER_INVALID_ARG, "graph input %zu has no name", i);
    int id = map_find(&nm, name);
    if (id >= 0 && m->values[id].kind == VAL_CONST) continue; /* IR<4 style: initializer */
    if (id >= 0) FAIL(CINFER_INVALID_ARG, "graph input '%s' is listed twice", name);
    if ((id = value_add(m, &nm, name, VAL_INPUT)) < 0) FAIL(CINFER_INTERNAL, "out of memory");
    fill_info(&m->values[id].info, g->input[i], m->values[id].name);
    m->values[id].has_info = true;
    if (m->values[id].info.dtype == CINFER_TYPE_INVALID)
      FAIL(CINFER_UNSUPPORTED, "graph input '%s' is not a tensor of a supported type", name);
    m->inputs[m->n_inputs++] = id;
  }

  m->nodes = calloc(g->n_node + 1, sizeof *m->nodes);
  if (!m->nodes) FAIL(CINFER_INTERNAL, "out of memory");
  for (size_t k = 0; k < g->n_node; k++) {
    const Onnx__NodeProto *np = g->node[k];
    onnx_node *n = &m->nodes[m->n_nodes++];
    char buf[64];
    snprintf(buf, sizeof buf, "%s_%zu", np->op_type ? np->op_type : "node", k);
    n->name = strdup(np->name && *np->name ? np->name : buf);
    n->op_type = strdup(np->op_type ? np->op_type : "");
    n->domain = strdup(np->domain ? np->domain : "");
    if (np->n_input > 4096 || np->n_output > 4096 || np->n_attribute > 4096)
      FAIL(CINFER_INVALID_ARG, "node %zu has too many inputs/outputs/attributes", k);
    n->in = calloc(np->n_input + 1, sizeof *n->in);
    n->out = calloc(np->n_output + 1, sizeof *n->out);
    n->attr = calloc(np->n_attribute + 1, sizeof *n->attr);
    if (!n->name || !n->op_type || !n->domain || !n->in || !n->out || !n->attr)
      FAIL(CINFER_INTERNAL, "out of memory");
    hist_add(m, n->op_type);
    int64_t opset = domain_opset(m, n->domain);
    if (opset < 0)
      FAIL(CINFER_INVALID_ARG, "node '%s' (%s): domain '%s' is not in the model's opset_import",
           n->name, n->op_type, n->domain);
    n->opset = (int)(opset > 1000 ? 1000 : opset);
    n->op = onnx_op_find(n->op_type, n->domain, n->opset);
    if (!n->op)
      FAIL(CINFER_UNSUPPORTED, "unsupported operator %s%s%s (opset %d) at node '%s'",
           *n->domain ? n->domain : "", *n->domain ? "." : "", n->op_type, n->opset, n->name);
    for (size_t a = 0; a < np->n_attribute; a++) {
      n->n_attr++;
      if ((st = copy_attr(&n->attr[a], np->attribute[a], base, n->name))) goto fail;
    }
    for (size_t i = 0; i < np->n_input; i++) {
      const char *in = np->input[i] ? np->input[i] : "";
      int id = -1;
      if (*in) {
        id = map_find(&nm, in);
        if (id < 0 && (id = value_add(m, &nm, in, VAL_NODE)) < 0)
          FAIL(CINFER_INTERNAL, "out of memory");
      }
      n->in[n->n_in++] = id;
    }
    while (n->n_in > 0 && n->in[n->n_in - 1] < 0) n->n_in--; /* trailing absent optionals */
    for (size_t i = 0; i < np->n_output; i++) {
      const char *out = np->output[i] ? np->output[i] : "";
      int id = -1;
      if (*out) {
        id = map_find(&nm, out);
        if (id >= 0 && (m->values[id].kind != VAL_NODE || m->values[id].producer >= 0))
          FAIL(CINFER_INVALID_ARG, "node '%s' (%s): output '%s' is already defined elsewhere",
               n->name, n->op_type, out);
        if (id < 0 && (id = value_add(m, &nm, out, VAL_NODE)) < 0)
          FAIL(CINFER_INTERNAL, "out of memory");
        m->values[id].producer = m->n_nodes - 1;
      }
      n->out[n->n_out++] = id;
    }
    if (n->n_in < n->op->min_in || n->n_in > n->op->max_in)
      FAIL(CINFER_INVALID_ARG, "node '%s' (%s): %d inputs, operator takes %d to %d", n->name,
           n->op_type, n->n_in, n->op->min_in, n->op->max_in);
    for (int i = 0; i < n->op->min_in; i++)
      if (n->in[i] < 0)
        FAIL(CINFER_INVALID_ARG, "node '%s' (%s): required input %d is empty", n->name,
             n->op_type, i);
    if (n->n_out < 1 || n->out[0] < 0)
      FAIL(CINFER_INVALID_ARG, "node '%s' (%s): has no output", n->name, n->op_type);
  }
  for (int i = 0; i < m->n_values; i++)
    if (m->values[i].kind == VAL_NODE && m->values[i].producer < 0)
      FAIL(CINFER_INVALID_ARG, "tensor '%s' is used but never produced (not an input, "
           "initializer or node output)", m->values[i].name);
  if (!g->n_output) FAIL(CINFER_INVALID_ARG, "graph has no outputs");
  for (size_t i = 0; i < g->n_output; i++) {
    const char *name = g->output[i]->name ? g->output[i]->name : "";
    int id = map_find(&nm, name);
    if (id < 0) FAIL(CINFER_INVALID_ARG, "graph output '%s' is never produced", name);
    m->values[id].is_output = true;
    onnx_io_info info;
    fill_info(&info, g->output[i], m->values[id].name);
    if (!m->values[id].has_info) {
      m->values[id].info = info;
      m->values[id].has_info = true;
    }
    m->outputs[m->n_outputs++] = id;
  }
  /* copy dim symbol strings so the proto can be freed */
  for (int i = 0; i < m->n_values; i++)
    for (int d = 0; d < CINFER_MAX_DIMS; d++)
      if (m->values[i].info.dim_name[d]) {
        m->values[i].info.dim_name[d] = strdup(m->values[i].info.dim_name[d]);
      }
  free(nm.slot);
  return NULL;
fail:
  /* dim_name pointers still borrow from the proto: drop them before it is freed */
  for (int i = 0; i < m->n_values; i++) memset(m->values[i].info.dim_name, 0, sizeof m->values[i].info.dim_name);
  free(nm.slot);
  return st;
}

cinfer_status *onnx_model_load_buffer(const void *buf, size_t len, const char *base_dir,
                                      onnx_model **out) {
  *out = NULL;
  if (len > ONNX_MAX_FILE_BYTES)
    return cinfer_status_new(CINFER_INVALID_ARG, "model is %zu bytes, over the 2 GiB limit", len);
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
  if (!mp)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "not a valid ONNX ModelProto (truncated or corrupt protobuf)");
  onnx_model *m = calloc(1, sizeof *m);
  if (!m) {
    onnx__model_proto__free_unpacked(mp, NULL);
    return cinfer_status_oom(NULL);
  }
  cinfer_status *st = build(m, mp, base_dir);
  onnx__model_proto__free_unpacked(mp, NULL);
  if (!st) st = graph_compile(m);
  if (!st) st = graph_mark_key_inputs(m);
  if (!st) {
    m->in_info = calloc((size_t)m->n_inputs + 1, sizeof *m->in_info);
    m->out_info = calloc((size_t)m->n_outputs + 1, sizeof *m->out_info);
    if (!m->in_info || !m->out_info) st = cinfer_status_oom(NULL);
  }
  if (st) {
    onnx_model_destroy(m);
    return st;
  }
  for (int i = 0; i < m->n_inputs; i++) m->in_info[i] = m->values[m->inputs[i]].info;
  for (int i = 0; i < m->n_outputs; i++) {
    onnx_value *v = &m->values[m->outputs[i]];
    m->out_info[i] = v->info;
    m->out_info[i].name = v->name;
  }
  graph_analyse_batch(m);
  if (m->batchable && m->batch_probe && !plan_probe_batch(m)) {
    m->batchable = false;
    snprintf(m->batch_note, sizeof m->batch_note,
             "planning batch 2 changes a shape other than dim 0 (a Reshape/Slice fixes the batch)");
  }
  *out = m;
  return NULL;
}

cinfer_status *onnx_model_load_file(const char *path, onnx_model **out) {
  *out = NULL;
  void *buf;
  size_t len;
  cinfer_status *st = onnx_read_file(path, ONNX_MAX_FILE_BYTES, &buf, &len);
  if (st) return st;
  char *dir = strdup(path);
  if (!dir) {
    free(buf);
    return cinfer_status_oom(NULL);
  }
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0; else strcpy(dir, ".");
  st = onnx_model_load_buffer(buf, len, dir, out);
  free(buf);
  free(dir);
  return st ? cinfer_status_prefix(st, "%s", path) : NULL;
}

int onnx_model_input_count(const onnx_model *m) { return m->n_inputs; }
int onnx_model_output_count(const onnx_model *m) { return m->n_outputs; }
const onnx_io_info *onnx_model_input(const onnx_model *m, int i) {
  return i >= 0 && i < m->n_inputs ? &m->in_info[i] : NULL;
}
const onnx_io_info *onnx_model_output(const onnx_model *m, int i) {
  return i >= 0 && i < m->n_outputs ? &m->out_info[i] : NULL;
}
bool onnx_model_batchable(const onnx_model *m) { return m->batchable; }

/* ---- attributes ---- */
const onnx_attr *node_attr(const onnx_node *n, const char *name) {
  for (int i = 0; i < n->n_attr; i++)
    if (!strcmp(n->attr[i].name, name)) return &n->attr[i];
  return NULL;
}
int64_t attr_i(const onnx_node *n, const char *name, int64_t def) {
  const onnx_attr *a = node_attr(n, name);
  return a && a->type == ATTR_I ? a->i : a && a->type == ATTR_F ? (int64_t)a->f : def;
}
float attr_f(const onnx_node *n, const char *name, float def) {
  const onnx_attr *a = node_attr(n, name);
  return a && a->type == ATTR_F ? a->f : a && a->type == ATTR_I ? (float)a->i : def;
}
const char *attr_s(const onnx_node *n, const char *name, const char *def) {
  const onnx_attr *a = node_attr(n, name);
  return a && a->type == ATTR_S ? a->s : def;
}
int attr_ints(const onnx_node *n, const char *name, const int64_t **v) {
  const onnx_attr *a = node_attr(n, name);
  if (!a || a->type != ATTR_IS) {
    *v = NULL;
    return 0;
  }
  *v = a->is;
  return a->n;
}
