/* graph.c: load-time graph compilation.
 *   1. topological order (Kahn), rejecting cycles with the name of a node on one;
 *   2. constant folding: a node whose inputs are all constants is evaluated once with its
 *      reference kernel and replaced by the resulting constant(s);
 *   3. Conv+BatchNormalization folding (BN's affine transform merged into W and B), then
 *      Conv+Mul folding (a constant scale per output channel or one scale: W and B scaled,
 *      as ONNX Runtime's ConvMulFusion does; UltraFace's RFB blocks scale a conv before
 *      the residual Add, which then fuses into the conv);
 *   4. dead-node removal (nodes that no graph output depends on);
 *   5. batchability analysis (graph_analyse_batch), which may rewrite a Reshape whose
 *      constant shape hard-codes a batch of 1 into the "copy dim 0" form.
 * Shape-dependent work (Shape->Gather->Concat chains on runtime tensors, activation
 * fusion, memory planning) happens per input shape in plan.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/ops_util.h"

static void free_node(onnx_node *n) {
  free(n->name);
  free(n->op_type);
  free(n->domain);
  free(n->in);
  free(n->out);
  for (int a = 0; a < n->n_attr; a++) {
    free(n->attr[a].name);
    free(n->attr[a].s);
    free(n->attr[a].fs);
    free(n->attr[a].is);
    ot_free(n->attr[a].t);
  }
  free(n->attr);
  memset(n, 0, sizeof *n);
}

/* Removes nodes flagged in `drop`, keeping order, and re-points producers. */
static void compact(onnx_model *m, const bool *drop) {
  int k = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    if (drop[i]) {
      free_node(&m->nodes[i]);
      continue;
    }
    m->nodes[k++] = m->nodes[i];
  }
  m->n_nodes = k;
  for (int i = 0; i < m->n_values; i++)
    if (m->values[i].kind == VAL_NODE) m->values[i].producer = -1;
  for (int i = 0; i < m->n_nodes; i++)
    for (int o = 0; o < m->nodes[i].n_out; o++)
      if (m->nodes[i].out[o] >= 0) m->values[m->nodes[i].out[o]].producer = i;
}

static void count_uses(onnx_model *m) {
  for (int i = 0; i < m->n_values; i++) m->values[i].n_uses = m->values[i].is_output ? 1 : 0;
  for (int i = 0; i < m->n_nodes; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++)
      if (m->nodes[i].in[j] >= 0) m->values[m->nodes[i].in[j]].n_uses++;
}

static cinfer_status *topo_sort(onnx_model *m) {
  int n = m->n_nodes;
  int *indeg = calloc((size_t)n + 1, sizeof *indeg), *order = calloc((size_t)n + 1, sizeof *order);
  /* consumer lists via CSR */
  int *cnt = calloc((size_t)n + 1, sizeof *cnt);
  int total = 0;
  for (int i = 0; i < n; i++) total += m->nodes[i].n_in;
  int *adj = calloc((size_t)total + 1, sizeof *adj), *start = calloc((size_t)n + 2, sizeof *start);
  onnx_node *sorted = calloc((size_t)n + 1, sizeof *sorted);
  cinfer_status *st = NULL;
  if (!indeg || !order || !cnt || !adj || !start || !sorted) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++) {
      int v = m->nodes[i].in[j];
      if (v >= 0 && m->values[v].kind == VAL_NODE) {
        cnt[m->values[v].producer]++;
        indeg[i]++;
      }
    }
  for (int i = 0; i < n; i++) start[i + 1] = start[i] + cnt[i];
  memset(cnt, 0, sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++) {
      int v = m->nodes[i].in[j];
      if (v >= 0 && m->values[v].kind == VAL_NODE) {
        int p = m->values[v].producer;
        adj[start[p] + cnt[p]++] = i;
      }
    }
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (!indeg[i]) order[tail++] = i;
  while (head < tail) {
    int u = order[head++];
    for (int e = start[u]; e < start[u + 1]; e++)
      if (--indeg[adj[e]] == 0) order[tail++] = adj[e];
  }
  if (tail != n) {
    for (int i = 0; i < n; i++)
      if (indeg[i]) {
        st = cinfer_status_new(CINFER_INVALID_ARG,
                               "graph has a cycle: node '%s' (%s) depends on its own output",
                               m->nodes[i].name, m->nodes[i].op_type);
        break;
      }
    goto out;
  }
  for (int i = 0; i < n; i++) sorted[i] = m->nodes[order[i]];
  memcpy(m->nodes, sorted, sizeof *sorted * (size_t)n);
  for (int i = 0; i < n; i++)
    for (int o = 0; o < m->nodes[i].n_out; o++)
      if (m->nodes[i].out[o] >= 0) m->values[m->nodes[i].out[o]].producer = i;
out:
  free(indeg);
  free(order);
  free(cnt);
  free(adj);
  free(start);
  free(sorted);
  return st;
}

/* Evaluates node n whose inputs are all constants; outputs become constants. The operand
 * arrays are sized from the node (a Concat of hundreds of constants folds like one of two). */
static cinfer_status *fold_node(onnx_model *m, onnx_node *n) {
  size_t ni = (size_t)n->n_in + 1, no = (size_t)n->n_out + 1;
  ot **in = calloc(ni, sizeof *in), **out = calloc(no, sizeof *out), **res = calloc(no, sizeof *res);
  ot *shapes = calloc(no, sizeof *shapes);
  ostr_heap *heap = NULL;
  cinfer_status *st = NULL;
  if (!in || !out || !res || !shapes) {
    st = NODE_ERR(n, CINFER_INTERNAL, "out of memory");
    goto done;
  }
  for (int i = 0; i < n->n_in; i++) in[i] = n->in[i] >= 0 ? m->values[n->in[i]].cval : NULL;
  for (int o = 0; o < n->n_out; o++) out[o] = n->out[o] >= 0 ? &shapes[o] : NULL;
  if ((st = n->op->infer(n, in, out))) goto done;
  for (int o = 0; o < n->n_out; o++) {
    if (!out[o]) continue;
    res[o] = ot_new(shapes[o].dtype, shapes[o].ndim, shapes[o].dims);
    if (!res[o]) {
      st = NODE_ERR(n, CINFER_RESOURCE_EXHAUSTED, "constant result too large");
      goto done;
    }
    out[o] = res[o];
  }
  heap = ostr_heap_new();
  if (!heap) {
    st = cinfer_status_oom(NULL);
    goto done;
  }
  onnx_exec x = {.threads = 1, .heap = heap};
  if ((st = n->op->exec(&x, n, in, out))) goto done;
  for (int o = 0; o < n->n_out; o++) {
    if (!res[o]) continue;
    if (res[o]->dtype == CINFER_TYPE_BYTES) { /* own the bytes: heap and inputs go away */
      ot *own = ot_clone(res[o]);
      if (!own) {
        st = NODE_ERR(n, CINFER_RESOURCE_EXHAUSTED, "constant result too large");
        goto done;
      }
      ot_free(res[o]);
      res[o] = own;
    }
    onnx_value *v = &m->values[n->out[o]];
    v->kind = VAL_CONST;
    v->cval = res[o];
    v->producer = -1;
    res[o] = NULL; /* owned by the value now */
  }
done:
  for (int o = 0; res && o < n->n_out; o++) ot_free(res[o]);
  ostr_heap_free(heap);
  free(in);
  free(out);
  free(res);
  free(shapes);
  return st;
}

cinfer_status *graph_fold_constants(onnx_model *m) {
  bool *drop = calloc((size_t)m->n_nodes + 1, sizeof *drop);
  if (!drop) return cinfer_status_oom(NULL);
  for (int i = 0; i < m->n_nodes; i++) {
    onnx_node *n = &m->nodes[i];
    bool all = true;
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] >= 0 && m->values[n->in[j]].kind != VAL_CONST) all = false;
    if (!all) continue;
    /* keep graph outputs produced by a node as they are: folding them is still correct */
    cinfer_status *st = fold_node(m, n);
    if (st) {
      free(drop);
      return cinfer_status_prefix(st, "constant folding");
    }
    drop[i] = true;
    m->n_folded++;
  }
  compact(m, drop);
  free(drop);
  return NULL;
}

static int add_const(onnx_model *m, const char *base, ot *t) {
  if (m->n_values == m->cap_values) {
    int nc = m->cap_values * 2 + 16;
    onnx_value *nv = realloc(m->values, (size_t)nc * sizeof *nv);
    if (!nv) return -1;
    m->values = nv;
    m->cap_values = nc;
  }
  onnx_value *v = &m->values[m->n_values];
  memset(v, 0, sizeof *v);
  if (asprintf(&v->name, "%s#%d", base, m->n_values) < 0) return -1;
  v->kind = VAL_CONST;
  v->cval = t;
  v->producer = -1;
  return m->n_values++;
}

static cinfer_status *fuse_conv_bn(onnx_model *m) {
  count_uses(m);
  bool *drop = calloc((size_t)m->n_nodes + 1, sizeof *drop);
  if (!drop) return cinfer_status_oom(NULL);
  for (int i = 0; i < m->n_nodes; i++) {
    onnx_node *bn = &m->nodes[i];
    if (strcmp(bn->op_type, "BatchNormalization") || attr_i(bn, "training_mode", 0)) continue;
    if (bn->n_out > 1) {
      bool extra = false;
      for (int o = 1; o < bn->n_out; o++) extra |= bn->out[o] >= 0;
      if (extra) continue;
    }
    int xv = bn->in[0];
    if (m->values[xv].kind != VAL_NODE || m->values[xv].n_uses != 1 || m->values[xv].is_output) continue;
    onnx_node *cv = &m->nodes[m->values[xv].producer];
    if (strcmp(cv->op_type, "Conv")) continue;
    const ot *W = m->values[cv->in[1]].cval;
    const ot *B = cv->n_in > 2 && cv->in[2] >= 0 ? m->values[cv->in[2]].cval : NULL;
    if (!W || W->dtype != CINFER_TYPE_FP32 || W->ndim < 3 || (cv->n_in > 2 && cv->in[2] >= 0 && !B)) continue;
    const ot *p[4];
    bool ok = true;
    int64_t M = W->dims[0];
    for (int k = 0; k < 4; k++) {
      p[k] = m->values[bn->in[1 + k]].cval;
      if (!p[k] || p[k]->dtype != CINFER_TYPE_FP32 || ot_numel(p[k]) != M) ok = false;
    }
    if (!ok || (B && (B->dtype != CINFER_TYPE_FP32 || ot_numel(B) != M))) continue;
    float eps = attr_f(bn, "epsilon", 1e-5f);
    ot *W2 = ot_clone(W), *B2 = ot_new(CINFER_TYPE_FP32, 1, &M);
    if (!W2 || !B2) {
      ot_free(W2);
      ot_free(B2);
      free(drop);
      return cinfer_status_oom(NULL);
    }
    int64_t per = ot_numel(W) / M;
    const float *sc = p[0]->data, *be = p[1]->data, *mu = p[2]->data, *var = p[3]->data;
    /* float arithmetic in ONNX Runtime's order (ConvBNFusion), so results match it */
    for (int64_t o = 0; o < M; o++) {
      float a = sc[o] / sqrtf(var[o] + eps);
      for (int64_t j = 0; j < per; j++) ((float *)W2->data)[o * per + j] = ((float *)W->data)[o * per + j] * a;
      float b0 = B ? ((float *)B->data)[o] : 0.0f;
      ((float *)B2->data)[o] = (b0 - mu[o]) * a + be[o];
    }
    int wid = add_const(m, "bnfold_w", W2);
    if (wid < 0) { ot_free(W2); ot_free(B2); free(drop); return cinfer_status_oom(NULL); }
    int bid = add_const(m, "bnfold_b", B2);
    if (bid < 0) { ot_free(B2); free(drop); return cinfer_status_oom(NULL); }
    cv = &m->nodes[m->values[xv].producer]; /* values may have moved, nodes did not */
    if (cv->n_in < 3) {
      int *ni = realloc(cv->in, 3 * sizeof *ni);
      if (!ni) { free(drop); return cinfer_status_oom(NULL); }
      cv->in = ni;
      cv->n_in = 3;
    }
    cv->in[1] = wid;
    cv->in[2] = bid;
    cv->out[0] = bn->out[0];
    m->values[bn->out[0]].producer = m->values[xv].producer;
    drop[i] = true;
    m->n_bn_fused++;
  }
  compact(m, drop);
  free(drop);
  return NULL;
}

/* Conv -> Mul(conv output, constant s) with s one value or one per output channel
 * ([M,1,1], [1,M,1,1], [M] only for 1-D convs is not taken): W[o] *= s[o], B[o] *= s[o]
 * in float, like ONNX Runtime's ConvMulFusion (so numerics follow it). */
static cinfer_status *fuse_conv_mul(onnx_model *m) {
  count_uses(m);
  bool *drop = calloc((size_t)m->n_nodes + 1, sizeof *drop);
  if (!drop) return cinfer_status_oom(NULL);
  for (int i = 0; i < m->n_nodes; i++) {
    onnx_node *mul = &m->nodes[i];
    if (strcmp(mul->op_type, "Mul") || mul->n_in != 2 || mul->in[0] < 0 || mul->in[1] < 0) continue;
    int side = m->values[mul->in[0]].kind == VAL_NODE ? 0 : 1;
    int xv = mul->in[side];
    const ot *S = m->values[mul->in[1 - side]].cval;
    if (m->values[xv].kind != VAL_NODE || m->values[xv].n_uses != 1 || m->values[xv].is_output || !S ||
        S->dtype != CINFER_TYPE_FP32)
      continue;
    onnx_node *cv = &m->nodes[m->values[xv].producer];
    if (strcmp(cv->op_type, "Conv")) continue;
    const ot *W = m->values[cv->in[1]].cval;
    const ot *B = cv->n_in > 2 && cv->in[2] >= 0 ? m->values[cv->in[2]].cval : NULL;
    if (!W || W->dtype != CINFER_TYPE_FP32 || W->ndim != 4 || (cv->n_in > 2 && cv->in[2] >= 0 && !B)) continue;
    int64_t M = W->dims[0], ns = ot_numel(S);
    if (B && (B->dtype != CINFER_TYPE_FP32 || ot_numel(B) != M)) continue;
    /* the scale must broadcast over [N, M, H, W] without changing its shape: one value,
     * or M values on axis 1 ([M,1,1] or [1,M,1,1]) */
    bool ok = S->ndim <= 4 && (ns == 1 || ns == M);
    if (ok && ns == M && M > 1) {
      ok = S->ndim >= 3;
      for (int d = 0; d < S->ndim && ok; d++) {
        int axis = 4 - S->ndim + d;
        ok = S->dims[d] == (axis == 1 ? M : 1);
      }
    }
    if (!ok) continue;
    ot *W2 = ot_clone(W), *B2 = B ? ot_clone(B) : NULL;
    if (!W2 || (B && !B2)) {
      ot_free(W2);
      ot_free(B2);
      free(drop);
      return cinfer_status_oom(NULL);
    }
    int64_t per = ot_numel(W) / M;
    const float *sv = S->data;
    for (int64_t o = 0; o < M; o++) {
      float a = sv[ns == 1 ? 0 : o];
      for (int64_t j = 0; j < per; j++) ((float *)W2->data)[o * per + j] *= a;
      if (B2) ((float *)B2->data)[o] *= a;
    }
    int wid = add_const(m, "mulfold_w", W2);
    if (wid < 0) { ot_free(W2); ot_free(B2); free(drop); return cinfer_status_oom(NULL); }
    int bid = -1;
    if (B2 && (bid = add_const(m, "mulfold_b", B2)) < 0) {
      ot_free(B2);
      free(drop);
      return cinfer_status_oom(NULL);
    }
    cv = &m->nodes[m->values[xv].producer]; /* values may have moved, nodes did not */
    cv->in[1] = wid;
    if (bid >= 0) cv->in[2] = bid;
    cv->out[0] = mul->out[0];
    m->values[mul->out[0]].producer = m->values[xv].producer;
    drop[i] = true;
    m->n_mul_fused++;
  }
  compact(m, drop);
  free(drop);
  return NULL;
}

static cinfer_status *remove_dead(onnx_model *m) {
  bool *live = calloc((size_t)m->n_values + 1, sizeof *live);
  bool *drop = calloc((size_t)m->n_nodes + 1, sizeof *drop);
  if (!live || !drop) {
    free(live);
    free(drop);
    return cinfer_status_oom(NULL);
  }
  for (int i = 0; i < m->n_outputs; i++) live[m->outputs[i]] = true;
  for (int i = m->n_nodes - 1; i >= 0; i--) {
    onnx_node *n = &m->nodes[i];
    bool any = false;
    for (int o = 0; o < n->n_out; o++) any |= n->out[o] >= 0 && live[n->out[o]];
    if (!any) {
      drop[i] = true;
      m->n_dead++;
      continue;
    }
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] >= 0) live[n->in[j]] = true;
  }
  compact(m, drop);
  /* constants nobody uses any more (folded-away weights): free their data */
  for (int i = 0; i < m->n_values; i++)
    if (!live[i] && m->values[i].kind == VAL_CONST && m->values[i].cval) {
      ot_free(m->values[i].cval);
      m->values[i].cval = NULL;
    }
  free(live);
  free(drop);
  return NULL;
}

cinfer_status *graph_compile(onnx_model *m) {
  cinfer_status *st = topo_sort(m);
  if (!st) st = graph_check_strings(m);
  if (!st) st = graph_fold_constants(m);
  if (!st) st = fuse_conv_bn(m);
  if (!st) st = fuse_conv_mul(m);
  if (!st) st = remove_dead(m);
  if (!st) count_uses(m);
  return st;
}

/* ---- batchability ---- */

static bool axis_attr_not0(const onnx_node *n, const char *name, int64_t def, int rank) {
  int64_t a = attr_i(n, name, def);
  if (a < 0) a += rank;
  return a != 0;
}

void graph_analyse_batch(onnx_model *m) {
  /* bat[v]: value v carries the batch on dim 0. rank[v]: known rank or -1. */
  bool *bat = calloc((size_t)m->n_values + 1, sizeof *bat);
  int *rank = calloc((size_t)m->n_values + 1, sizeof *rank);
  m->batchable = false;
  m->batch_probe = false;
  if (!bat || !rank) goto out;
  for (int i = 0; i < m->n_values; i++) rank[i] = m->values[i].cval ? m->values[i].cval->ndim : -1;
  for (int i = 0; i < m->n_inputs; i++) {
    const onnx_io_info *in = &m->in_info[i];
    if (in->ndim < 1 || (in->shape[0] != 1 && in->shape[0] >= 0)) {
      snprintf(m->batch_note, sizeof m->batch_note, "input '%s' has no batch dimension", in->name);
      goto out;
    }
    bat[m->inputs[i]] = true;
    rank[m->inputs[i]] = in->ndim;
  }
  for (int i = 0; i < m->n_nodes; i++) {
    onnx_node *n = &m->nodes[i];
    bool any = false;
    int r = -1;
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] >= 0 && bat[n->in[j]]) { any = true; if (r < 0) r = rank[n->in[j]]; }
    if (!any) continue;
    const char *t = n->op_type;
    bool ok = true;
    int orank = r;
    if (!strcmp(t, "Shape") || !strcmp(t, "Size")) {
      continue; /* plan-time values: recomputed for every batch size */
    } else if (!strcmp(t, "Conv") || !strcmp(t, "ConvTranspose") || strstr(t, "Pool") ||
               !strcmp(t, "BatchNormalization") || !strcmp(t, "InstanceNormalization") ||
               !strcmp(t, "LRN") || !strcmp(t, "Relu") || !strcmp(t, "Sigmoid") ||
               !strcmp(t, "Tanh") || !strcmp(t, "Exp") || !strcmp(t, "Clip") ||
               !strcmp(t, "LeakyRelu") || !strcmp(t, "Cast") || !strcmp(t, "Identity") ||
               !strcmp(t, "Dropout") || !strcmp(t, "Sqrt") || !strcmp(t, "Neg") ||
               !strcmp(t, "Abs") || !strcmp(t, "Log") || !strcmp(t, "Reciprocal") ||
               !strcmp(t, "Erf") || !strcmp(t, "HardSigmoid") || !strcmp(t, "HardSwish") ||
               !strcmp(t, "Elu") || !strcmp(t, "Softplus") || !strcmp(t, "Floor") ||
               !strcmp(t, "Ceil") || !strcmp(t, "Round")) {
      ok = n->in[0] >= 0 && bat[n->in[0]];
    } else if (!strcmp(t, "Add") || !strcmp(t, "Sub") || !strcmp(t, "Mul") || !strcmp(t, "Div") ||
               !strcmp(t, "PRelu") || !strcmp(t, "Pow") || !strcmp(t, "Max") || !strcmp(t, "Min") ||
               !strcmp(t, "Sum") || !strcmp(t, "Where") || !strcmp(t, "Equal") ||
               !strcmp(t, "Less") || !strcmp(t, "Greater")) {
      /* every non-batch operand must broadcast without touching dim 0 */
      for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v < 0 || bat[v]) continue;
        if (r < 0) { /* rank unknown: the probe checks the broadcast */
          m->batch_probe = true;
          continue;
        }
        if (rank[v] < 0 || rank[v] >= r) {
          const ot *c = m->values[v].cval;
          if (!(c && (c->ndim < r || (c->ndim == r && c->dims[0] == 1)))) ok = false;
        }
      }
    } else if (!strcmp(t, "Softmax") || !strcmp(t, "LogSoftmax")) {
      if (r < 0) {
        ok = attr_i(n, "axis", n->opset < 13 ? 1 : -1) != 0;
        m->batch_probe = true;
      } else {
        ok = r > 0 && axis_attr_not0(n, "axis", n->opset < 13 ? 1 : -1, r);
      }
    } else if (!strcmp(t, "Concat") || !strcmp(t, "Split")) {
      if (r < 0) { /* rank unknown after a shape-derived Reshape: the probe decides */
        ok = attr_i(n, "axis", !strcmp(t, "Split") ? 0 : 1) != 0;
        m->batch_probe = true;
      } else {
        ok = r > 0 && axis_attr_not0(n, "axis", !strcmp(t, "Split") ? 0 : 1, r);
      }
      if (!strcmp(t, "Concat"))
        for (int j = 0; j < n->n_in; j++) {
          if (getenv("CINFER_ONNX_DEBUG_BATCH") && !(n->in[j] >= 0 && bat[n->in[j]]))
            fprintf(stderr, "concat input %s not batch\n", m->values[n->in[j]].name);
          ok &= n->in[j] >= 0 && bat[n->in[j]];
        }
    } else if (!strcmp(t, "Transpose")) {
      const int64_t *p;
      ok = attr_ints(n, "perm", &p) > 0 && p[0] == 0;
    } else if (!strcmp(t, "Flatten")) {
      ok = axis_attr_not0(n, "axis", 1, r > 0 ? r : 1);
      orank = 2;
    } else if (!strcmp(t, "Gemm")) {
      ok = bat[n->in[0]] && !bat[n->in[1]] && !attr_i(n, "transA", 0) &&
           (n->n_in < 3 || n->in[2] < 0 || !bat[n->in[2]]);
      if (ok && n->n_in > 2 && n->in[2] >= 0) {
        const ot *c = m->values[n->in[2]].cval;
        ok = !c || c->ndim < 2 || c->dims[0] == 1;
      }
      orank = 2;
    } else if (!strcmp(t, "MatMul")) {
      ok = bat[n->in[0]] && !bat[n->in[1]] && r >= 2 && rank[n->in[1]] >= 0 && rank[n->in[1]] <= 2;
    } else if (!strcmp(t, "Reshape")) {
      ok = false;
      if (n->n_in > 1 && bat[n->in[0]] && m->values[n->in[1]].cval && !attr_i(n, "allowzero", 0)) {
        ot *s = m->values[n->in[1]].cval;
        if (s->dtype == CINFER_TYPE_INT64 && s->ndim == 1 && s->dims[0] >= 1) {
          int64_t d0 = ((int64_t *)s->data)[0];
          if (d0 == 0) ok = true;
          else if (d0 == 1) {
            /* fixed batch of 1 baked in: rewrite to "copy dim 0" */
            ot *c = ot_clone(s);
            int id = c ? add_const(m, "batch_shape", c) : -1;
            if (id >= 0) {
              ((int64_t *)c->data)[0] = 0;
              n->in[1] = id;
              ok = true;
              bat = realloc(bat, (size_t)m->n_values + 1);
              int *nr = realloc(rank, sizeof(int) * ((size_t)m->n_values + 1));
              if (!bat || !nr) { free(nr ? nr : rank); rank = NULL; goto out; }
              rank = nr;
              bat[id] = false;
              rank[id] = 1;
            } else ot_free(c);
          }
          orank = (int)s->dims[0];
        }
      } else if (n->n_in > 1 && bat[n->in[0]] && !bat[n->in[1]] && !m->values[n->in[1]].cval &&
                 !attr_i(n, "allowzero", 0)) {
        /* shape computed at plan time from input shapes (x.view(x.size(0), -1)):
         * accepted, then verified by the shape probe */
        ok = true;
        m->batch_probe = true;
        orank = -1;
      }
    } else if (!strcmp(t, "Unsqueeze") || !strcmp(t, "Squeeze")) {
      const int64_t *ax;
      int k = attr_ints(n, "axes", &ax);
      int64_t tmp[8];
      if (!k && n->n_in > 1 && m->values[n->in[1]].cval && ot_numel(m->values[n->in[1]].cval) <= 8) {
        ot *c = m->values[n->in[1]].cval;
        k = (int)ot_numel(c);
        for (int q = 0; q < k; q++) tmp[q] = ot_get_i(c, q);
        ax = tmp;
      }
      ok = k > 0;
      bool unsq = !strcmp(t, "Unsqueeze");
      orank = unsq ? r + k : r - k;
      for (int q = 0; q < k; q++) {
        int64_t a = ax[q] < 0 ? ax[q] + (unsq ? orank : r) : ax[q];
        ok &= a != 0;
      }
    } else if (!strcmp(t, "Slice")) {
      /* batch-agnostic when axis 0 is never sliced */
      if (n->opset < 10) {
        const int64_t *ax;
        int k = attr_ints(n, "axes", &ax);
        ok = k > 0;
        for (int q = 0; q < k; q++) ok &= ax[q] != 0 && ax[q] + r != 0;
      } else {
        const ot *ax = n->n_in > 3 && n->in[3] >= 0 ? m->values[n->in[3]].cval : NULL;
        ok = ax != NULL;
        for (int q = 0; ok && q < ot_numel(ax); q++) ok &= ot_get_i(ax, q) != 0 && ot_get_i(ax, q) + r != 0;
        if (!ok && bat[n->in[0]]) {
          /* bounds computed at plan time from shapes (crop to another tensor's size):
           * accepted, then verified by the shape probe */
          bool from_shapes = true;
          for (int q = 1; q < n->n_in; q++) from_shapes &= n->in[q] < 0 || !bat[n->in[q]];
          if (from_shapes) { ok = true; m->batch_probe = true; }
        }
      }
    } else if (!strcmp(t, "Resize") || !strcmp(t, "Upsample")) {
      ok = bat[n->in[0]];
      const ot *sc = NULL;
      if (!strcmp(t, "Upsample") && n->opset < 9) {
        const onnx_attr *a = node_attr(n, "scales");
        ok &= a && a->type == ATTR_FS && a->n > 0 && a->fs[0] == 1.0f;
      } else {
        int si = (!strcmp(t, "Upsample") || n->opset < 11) ? 1 : 2;
        sc = n->n_in > si && n->in[si] >= 0 ? m->values[n->in[si]].cval : NULL;
        if (sc && ot_numel(sc) > 0) ok &= ot_get_f(sc, 0) == 1.0;
        else ok = false; /* sizes form: a fixed dim 0 */
      }
    } else if (!strcmp(t, "Pad")) {
      ok = false;
      if (n->opset < 11) {
        const int64_t *p;
        int k = attr_ints(n, "pads", &p);
        ok = k >= 2 && p[0] == 0 && p[k / 2] == 0;
      } else if (n->n_in > 1 && m->values[n->in[1]].cval) {
        ot *p = m->values[n->in[1]].cval;
        int64_t k = ot_numel(p);
        ok = n->n_in < 4 && k >= 2 && ot_get_i(p, 0) == 0 && ot_get_i(p, k / 2) == 0;
      }
    } else if (!strncmp(t, "Reduce", 6) || !strcmp(t, "ArgMax") || !strcmp(t, "ArgMin")) {
      const int64_t *ax;
      int k = attr_ints(n, "axes", &ax);
      if (!strncmp(t, "Arg", 3)) ok = axis_attr_not0(n, "axis", 0, r);
      else {
        ok = k > 0 && attr_i(n, "keepdims", 1);
        for (int q = 0; q < k; q++) ok &= ax[q] != 0 && ax[q] + r != 0;
      }
    } else if (!strcmp(t, "Gather")) {
      ok = bat[n->in[0]] && !bat[n->in[1]] && axis_attr_not0(n, "axis", 0, r);
    } else {
      ok = false;
    }
    if (!ok) {
      snprintf(m->batch_note, sizeof m->batch_note,
               "node '%s' (%s) mixes or fixes the batch dimension", n->name, n->op_type);
      goto out;
    }
    for (int o = 0; o < n->n_out; o++)
      if (n->out[o] >= 0) { bat[n->out[o]] = true; rank[n->out[o]] = orank; }
  }
  for (int i = 0; i < m->n_outputs; i++)
    if (!bat[m->outputs[i]]) {
      snprintf(m->batch_note, sizeof m->batch_note, "output '%s' does not carry the batch",
               m->values[m->outputs[i]].name);
      goto out;
    }
  m->batchable = true;
  snprintf(m->batch_note, sizeof m->batch_note, "every operator on the path is batch-agnostic%s",
           m->batch_probe ? "; shape-derived Reshape/Slice verified by planning batch 1 and 2" : "");
out:
  free(bat);
  free(rank);
}

static bool shape_like_operand(const onnx_node *n, int j) {
  static const char *const from1[] = {"Reshape", "Expand", "Tile", "Unsqueeze", "Squeeze", "Split",
                                      "TopK", "CumSum", "Slice", "Pad", "Resize", "Upsample",
                                      "Dropout", "ReduceSum", "ReduceMean", "ReduceMax",
                                      "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                      "ReduceLogSumExp", "ReduceLogSum", "ReduceSumSquare", "Clip", "Trilu"};
  if (!strcmp(n->op_type, "ConstantOfShape") || !strcmp(n->op_type, "Range")) return true;
  for (size_t i = 0; i < sizeof from1 / sizeof from1[0]; i++)
    if (!strcmp(n->op_type, from1[i])) return j >= 1;
  return false;
}

cinfer_status *graph_mark_key_inputs(onnx_model *m) {
  m->key_input = calloc((size_t)m->n_inputs + 1, sizeof *m->key_input);
  if (!m->key_input) return cinfer_status_oom(NULL);
  for (int i = 0; i < m->n_nodes; i++)
    for (int j = 0; j < m->nodes[i].n_in; j++)
      if (m->nodes[i].in[j] >= 0 && shape_like_operand(&m->nodes[i], j))
        for (int k = 0; k < m->n_inputs; k++)
          if (m->inputs[k] == m->nodes[i].in[j]) m->key_input[k] = true;
  return NULL;
}
