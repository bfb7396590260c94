/* model_builder.h: builds small ONNX models in memory (protobuf-c) for the unit tests.
 * Everything is allocated from a fixed arena inside mb (no frees needed until mb_reset). */
#ifndef TEST_ONNX_MODEL_BUILDER_H
#define TEST_ONNX_MODEL_BUILDER_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"

typedef struct mb {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__NodeProto nodes[64], *node_ptrs[64];
  Onnx__AttributeProto attrs[128], *attr_ptrs[128];
  int n_attrs;
  Onnx__TensorProto inits[64], *init_ptrs[64];
  Onnx__ValueInfoProto vis[16], *vi_ptrs[16];
  Onnx__TypeProto types[16];
  Onnx__TypeProto__Tensor ttypes[16];
  Onnx__TensorShapeProto shapes[16];
  Onnx__TensorShapeProto__Dimension dims[16][8], *dim_ptrs[16][8];
  int n_vis;
  char *strs[512];
  int n_strs;
  void *blobs[160];
  int n_blobs;
} mb;

static inline void mb_init(mb *b, int opset) {
  memset(b, 0, sizeof *b);
  onnx__model_proto__init(&b->model);
  onnx__graph_proto__init(&b->graph);
  onnx__operator_set_id_proto__init(&b->opset);
  b->opset.domain = (char *)"";
  b->opset.has_version = 1;
  b->opset.version = opset;
  b->opsets[0] = &b->opset;
  b->model.has_ir_version = 1;
  b->model.ir_version = 7;
  b->model.n_opset_import = 1;
  b->model.opset_import = b->opsets;
  b->model.graph = &b->graph;
  b->graph.node = b->node_ptrs;
  b->graph.initializer = b->init_ptrs;
  b->graph.name = (char *)"g";
}

static inline void mb_free(mb *b) {
  for (int i = 0; i < b->n_strs; i++) free(b->strs[i]);
  for (int i = 0; i < b->n_blobs; i++) free(b->blobs[i]);
  for (size_t i = 0; i < b->graph.n_node; i++) {
    free(b->nodes[i].input);
    free(b->nodes[i].output);
    free(b->nodes[i].attribute);
  }
}

static inline char *mb_str(mb *b, const char *s) {
  return b->strs[b->n_strs++] = strdup(s);
}

/* value info: dims < 0 mean a symbolic dim "N" */
static inline Onnx__ValueInfoProto *mb_vi(mb *b, const char *name, int elem, int nd,
                                          const int64_t *d) {
  int k = b->n_vis++;
  Onnx__ValueInfoProto *v = &b->vis[k];
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(&b->types[k]);
  onnx__type_proto__tensor__init(&b->ttypes[k]);
  onnx__tensor_shape_proto__init(&b->shapes[k]);
  v->name = mb_str(b, name);
  v->type = &b->types[k];
  b->types[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  b->types[k].tensor_type = &b->ttypes[k];
  b->ttypes[k].has_elem_type = 1;
  b->ttypes[k].elem_type = elem;
  b->ttypes[k].shape = &b->shapes[k];
  b->shapes[k].n_dim = (size_t)nd;
  b->shapes[k].dim = b->dim_ptrs[k];
  for (int i = 0; i < nd; i++) {
    Onnx__TensorShapeProto__Dimension *dd = &b->dims[k][i];
    onnx__tensor_shape_proto__dimension__init(dd);
    if (d[i] >= 0) {
      dd->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dd->dim_value = d[i];
    } else {
      dd->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dd->dim_param = (char *)"N";
    }
    b->dim_ptrs[k][i] = dd;
  }
  return v;
}

static inline void mb_input(mb *b, const char *name, int nd, const int64_t *d) {
  Onnx__ValueInfoProto **arr = realloc(b->graph.input, (b->graph.n_input + 1) * sizeof *arr);
  b->blobs[b->n_blobs++] = NULL; /* keep counts simple */
  b->n_blobs--;
  b->graph.input = arr;
  arr[b->graph.n_input++] = mb_vi(b, name, 1, nd, d);
}

static inline void mb_output(mb *b, const char *name) {
  Onnx__ValueInfoProto **arr = realloc(b->graph.output, (b->graph.n_output + 1) * sizeof *arr);
  b->graph.output = arr;
  arr[b->graph.n_output++] = mb_vi(b, name, 1, 0, NULL);
  b->graph.output[b->graph.n_output - 1]->type->tensor_type->shape = NULL;
}

/* float initializer (raw_data) */
static inline Onnx__TensorProto *mb_init_f(mb *b, const char *name, int nd, const int64_t *d,
                                           const float *data) {
  Onnx__TensorProto *t = &b->inits[b->graph.n_initializer];
  onnx__tensor_proto__init(t);
  t->name = mb_str(b, name);
  t->has_data_type = 1;
  t->data_type = 1;
  int64_t n = 1;
  int64_t *dd = malloc(sizeof(int64_t) * (size_t)(nd + 1));
  b->blobs[b->n_blobs++] = dd;
  for (int i = 0; i < nd; i++) { dd[i] = d[i]; n *= d[i]; }
  t->n_dims = (size_t)nd;
  t->dims = dd;
  if (data) {
    void *raw = malloc((size_t)n * 4 + 1);
    b->blobs[b->n_blobs++] = raw;
    memcpy(raw, data, (size_t)n * 4);
    t->has_raw_data = 1;
    t->raw_data.len = (size_t)n * 4;
    t->raw_data.data = raw;
  }
  b->init_ptrs[b->graph.n_initializer++] = t;
  return t;
}

static inline Onnx__NodeProto *mb_node(mb *b, const char *op, const char *name, int nin,
                                       const char *const *in, int nout, const char *const *out) {
  Onnx__NodeProto *n = &b->nodes[b->graph.n_node];
  onnx__node_proto__init(n);
  n->op_type = mb_str(b, op);
  n->name = mb_str(b, name);
  n->input = malloc(sizeof(char *) * (size_t)(nin + 1));
  n->output = malloc(sizeof(char *) * (size_t)(nout + 1));
  n->attribute = malloc(sizeof(void *) * 16);
  for (int i = 0; i < nin; i++) n->input[i] = mb_str(b, in[i]);
  for (int i = 0; i < nout; i++) n->output[i] = mb_str(b, out[i]);
  n->n_input = (size_t)nin;
  n->n_output = (size_t)nout;
  b->node_ptrs[b->graph.n_node++] = n;
  return n;
}

static inline void mb_attr_i(mb *b, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = &b->attrs[b->n_attrs++];
  onnx__attribute_proto__init(a);
  a->name = mb_str(b, name);
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
  n->attribute[n->n_attribute++] = a;
}

static inline void mb_attr_ints(mb *b, Onnx__NodeProto *n, const char *name, int k,
                                const int64_t *v) {
  Onnx__AttributeProto *a = &b->attrs[b->n_attrs++];
  onnx__attribute_proto__init(a);
  a->name = mb_str(b, name);
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  int64_t *c = malloc(sizeof(int64_t) * (size_t)(k + 1));
  b->blobs[b->n_blobs++] = c;
  memcpy(c, v, sizeof(int64_t) * (size_t)k);
  a->n_ints = (size_t)k;
  a->ints = c;
  n->attribute[n->n_attribute++] = a;
}

/* BatchNormalization name: in -> out over C channels; p holds scale, B, mean and variance
 * (4 x C floats, copied) as initializers name_p0..name_p3 */
static inline void mb_bn(mb *b, const char *name, int64_t C, const char *in, const char *out, const float *p) {
  char nm[4][64];
  const char *bi[5] = {in, nm[0], nm[1], nm[2], nm[3]};
  for (int i = 0; i < 4; i++) {
    snprintf(nm[i], sizeof nm[i], "%s_p%d", name, i);
    mb_init_f(b, nm[i], 1, &C, p + i * C);
  }
  mb_node(b, "BatchNormalization", name, 5, bi, 1, &out);
}

/* Packs the model; the caller frees *buf. */
static inline size_t mb_pack(mb *b, uint8_t **buf) {
  size_t n = onnx__model_proto__get_packed_size(&b->model);
  *buf = malloc(n + 1);
  onnx__model_proto__pack(&b->model, *buf);
  return n;
}

static inline void mb_done(mb *b) {
  free(b->graph.input);
  free(b->graph.output);
  mb_free(b);
}
#endif
