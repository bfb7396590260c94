/* wide_model.h: packs ONNX models with many inputs and outputs for the limit tests (the
 * fixed arenas of model_builder.h hold 16 value infos; these models need thousands).
 *
 *   inputs  x0 .. x{n_in-1}:  FP32 [N, 2], N symbolic (so the model is batchable)
 *   consts  c0 .. c{n_out-1}: FP32 [1] = {j + 1}
 *   outputs y0 .. y{n_out-1}: FP32 [N, 2], y_j = Add(x_{j % n_in}, c_j)
 *
 * so with x_i[r][k] = wide_x(i, r, k) every output has a value that no other output has:
 * y_j[r][k] = wide_x(j % n_in, r, k) + j + 1 (exact in float for the sizes used). */
#ifndef TEST_ONNX_WIDE_MODEL_H
#define TEST_ONNX_WIDE_MODEL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"

static inline float wide_x(int i, int64_t r, int k) { return (float)(i * 100 + r * 10 + k); }
static inline float wide_y(int n_in, int j, int64_t r, int k) {
  return wide_x(j % n_in, r, k) + (float)(j + 1);
}

static inline char *wide_name(char p, int i) {
  char b[32];
  snprintf(b, sizeof b, "%c%d", p, i);
  return strdup(b);
}

/* The model and graph headers both builders share: IR 7, opset 13, graph `name`. */
static inline void wide_model_header(Onnx__ModelProto *model, Onnx__GraphProto *g,
                                     Onnx__OperatorSetIdProto **opsets, const char *name) {
  opsets[0]->domain = (char *)"";
  opsets[0]->has_version = 1;
  opsets[0]->version = 13;
  model->has_ir_version = 1;
  model->ir_version = 7;
  model->n_opset_import = 1;
  model->opset_import = opsets;
  model->graph = g;
  g->name = (char *)name;
}

/* t = the FP32 [1] constant `name` (borrowed: the caller frees it after packing) holding
 * *val (viewed, not copied); *one == 1. */
static inline void wide_const_f32(Onnx__TensorProto *t, char *name, float *val, int64_t *one) {
  onnx__tensor_proto__init(t);
  t->name = name;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  t->n_dims = 1;
  t->dims = one;
  t->has_raw_data = 1;
  t->raw_data.len = 4;
  t->raw_data.data = (uint8_t *)val;
}

/* Returns the packed model (malloc'd, *len bytes). */
static inline uint8_t *wide_model_pack(int n_in, int n_out, size_t *len) {
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
  wide_model_header(&model, &g, opsets, "wide");

  /* value infos: inputs and outputs, each FP32 [N, 2] */
  size_t nvi = (size_t)n_in + (size_t)n_out;
  Onnx__ValueInfoProto *vis = calloc(nvi, sizeof *vis), **vip = calloc(nvi, sizeof *vip);
  Onnx__TypeProto *types = calloc(nvi, sizeof *types);
  Onnx__TypeProto__Tensor *tts = calloc(nvi, sizeof *tts);
  Onnx__TensorShapeProto *shapes = calloc(nvi, sizeof *shapes);
  Onnx__TensorShapeProto__Dimension *dims = calloc(nvi * 2, sizeof *dims);
  Onnx__TensorShapeProto__Dimension **dimp = calloc(nvi * 2, sizeof *dimp);
  for (size_t v = 0; v < nvi; v++) {
    bool in = v < (size_t)n_in;
    onnx__value_info_proto__init(&vis[v]);
    onnx__type_proto__init(&types[v]);
    onnx__type_proto__tensor__init(&tts[v]);
    vis[v].name = in ? wide_name('x', (int)v) : wide_name('y', (int)(v - (size_t)n_in));
    vis[v].type = &types[v];
    types[v].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    types[v].tensor_type = &tts[v];
    tts[v].has_elem_type = 1;
    tts[v].elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    {
      Onnx__TensorShapeProto *sh = &shapes[v];
      onnx__tensor_shape_proto__init(sh);
      sh->n_dim = 2;
      sh->dim = &dimp[v * 2];
      for (int d = 0; d < 2; d++) {
        Onnx__TensorShapeProto__Dimension *dd = &dims[v * 2 + (size_t)d];
        onnx__tensor_shape_proto__dimension__init(dd);
        if (d == 0) {
          dd->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
          dd->dim_param = (char *)"N";
        } else {
          dd->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
          dd->dim_value = 2;
        }
        dimp[v * 2 + (size_t)d] = dd;
      }
      tts[v].shape = sh;
    }
    vip[v] = &vis[v];
  }
  g.n_input = (size_t)n_in;
  g.input = vip;
  g.n_output = (size_t)n_out;
  g.output = vip + n_in;

  /* constants and nodes */
  Onnx__TensorProto *inits = calloc((size_t)n_out, sizeof *inits), **initp = calloc((size_t)n_out, sizeof *initp);
  Onnx__NodeProto *nodes = calloc((size_t)n_out, sizeof *nodes), **nodep = calloc((size_t)n_out, sizeof *nodep);
  float *vals = calloc((size_t)n_out, sizeof *vals);
  int64_t one = 1;
  char **node_in = calloc((size_t)n_out * 2, sizeof *node_in);
  for (int j = 0; j < n_out; j++) {
    Onnx__TensorProto *t = &inits[j];
    vals[j] = (float)(j + 1);
    wide_const_f32(t, wide_name('c', j), &vals[j], &one);
    initp[j] = t;
    Onnx__NodeProto *n = &nodes[j];
    onnx__node_proto__init(n);
    n->op_type = (char *)"Add";
    n->name = wide_name('n', j);
    node_in[2 * j] = vis[j % n_in].name;
    node_in[2 * j + 1] = t->name;
    n->n_input = 2;
    n->input = &node_in[2 * j];
    n->n_output = 1;
    n->output = &vis[(size_t)n_in + (size_t)j].name;
    nodep[j] = n;
  }
  g.n_initializer = (size_t)n_out;
  g.initializer = initp;
  g.n_node = (size_t)n_out;
  g.node = nodep;

  *len = onnx__model_proto__get_packed_size(&model);
  uint8_t *buf = malloc(*len + 1);
  if (buf) onnx__model_proto__pack(&model, buf);

  for (size_t v = 0; v < nvi; v++) free(vis[v].name);
  for (int j = 0; j < n_out; j++) free(inits[j].name), free(nodes[j].name);
  free(vis), free(vip), free(types), free(tts), free(shapes), free(dims), free(dimp);
  free(inits), free(initp), free(nodes), free(nodep), free(vals), free(node_in);
  return buf;
}

/* x: FP32 [n]; cat = Concat(k0 .. k{n-1}, axis 0) of FP32 [1] constants k_i = {i}: a node
 * with n constant inputs, folded at load; y = Add(x, cat), so y[i] = x[i] + i. */
static inline uint8_t *concat_model_pack(int n, size_t *len) {
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT, *opsets[1] = {&opset};
  wide_model_header(&model, &g, opsets, "concat");
  Onnx__ValueInfoProto vx = ONNX__VALUE_INFO_PROTO__INIT, vy = ONNX__VALUE_INFO_PROTO__INIT;
  Onnx__TypeProto tx = ONNX__TYPE_PROTO__INIT, ty = ONNX__TYPE_PROTO__INIT;
  Onnx__TypeProto__Tensor ttx = ONNX__TYPE_PROTO__TENSOR__INIT, tty = ONNX__TYPE_PROTO__TENSOR__INIT;
  Onnx__TensorShapeProto sx = ONNX__TENSOR_SHAPE_PROTO__INIT;
  Onnx__TensorShapeProto__Dimension dx = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, *dxp = &dx;
  dx.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  dx.dim_value = n;
  sx.n_dim = 1;
  sx.dim = &dxp;
  vx.name = (char *)"x";
  vx.type = &tx;
  tx.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tx.tensor_type = &ttx;
  ttx.has_elem_type = 1;
  ttx.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  ttx.shape = &sx;
  vy.name = (char *)"y";
  vy.type = &ty;
  ty.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  ty.tensor_type = &tty;
  tty.has_elem_type = 1;
  tty.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  Onnx__ValueInfoProto *inp = &vx, *outp = &vy;
  g.n_input = 1;
  g.input = &inp;
  g.n_output = 1;
  g.output = &outp;
  Onnx__TensorProto *inits = calloc((size_t)n, sizeof *inits), **initp = calloc((size_t)n, sizeof *initp);
  float *vals = calloc((size_t)n, sizeof *vals);
  char **names = calloc((size_t)n, sizeof *names);
  int64_t one = 1;
  for (int i = 0; i < n; i++) {
    vals[i] = (float)i;
    wide_const_f32(&inits[i], names[i] = wide_name('k', i), &vals[i], &one);
    initp[i] = &inits[i];
  }
  g.n_initializer = (size_t)n;
  g.initializer = initp;
  Onnx__NodeProto cat = ONNX__NODE_PROTO__INIT, add = ONNX__NODE_PROTO__INIT, *nodes[2] = {&cat, &add};
  Onnx__AttributeProto axis = ONNX__ATTRIBUTE_PROTO__INIT, *axisp = &axis;
  axis.name = (char *)"axis";
  axis.has_type = 1;
  axis.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  axis.has_i = 1;
  axis.i = 0;
  char *cat_out = (char *)"cat", *add_in[2] = {(char *)"x", (char *)"cat"}, *add_out = (char *)"y";
  cat.op_type = (char *)"Concat";
  cat.name = (char *)"cat";
  cat.n_input = (size_t)n;
  cat.input = names;
  cat.n_output = 1;
  cat.output = &cat_out;
  cat.n_attribute = 1;
  cat.attribute = &axisp;
  add.op_type = (char *)"Add";
  add.name = (char *)"add";
  add.n_input = 2;
  add.input = add_in;
  add.n_output = 1;
  add.output = &add_out;
  g.n_node = 2;
  g.node = nodes;
  *len = onnx__model_proto__get_packed_size(&model);
  uint8_t *buf = malloc(*len + 1);
  if (buf) onnx__model_proto__pack(&model, buf);
  for (int i = 0; i < n; i++) free(names[i]);
  free(inits), free(initp), free(vals), free(names);
  return buf;
}

#endif
