/* plan.c: builds and runs execution plans (see plan.h for the structure and invariants).
 * Built once per distinct set of input shapes, then every run executes the same steps over
 * the same arena, with no allocation. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <stdio.h>
#include <omp.h>

#include "backends/onnx/ops_util.h"
#include "backends/onnx/plan.h"
#include "backends/onnx/interop.h"
#include "core/clock.h"

static cinfer_status *oom(void) { return cinfer_status_oom(NULL); }

void plan_destroy(onnx_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n_steps; i++) {
    fast_destroy(p->steps[i].fast);
    free(p->steps[i].in);
    free(p->steps[i].out);
    free(p->steps[i].in_id);
    free(p->steps[i].out_id);
  }
  free(p->steps);
  for (int i = 0; i < p->n_owned; i++) free(p->owned[i]);
  free(p->owned);
  if (p->layout)
    for (int i = 0; i < p->m->n_values; i++) fast_layout_free(p->layout[i]);
  free(p->layout);
  free(p->bytes);
  free(p->vals);
  free(p->is_static);
  free(p->root);
  free(p->alias_off);
  free(p->key);
  free(p->arena);
  for (int k = 0; k < p->n_sec; k++) free(p->sec[k].list);
  free(p->sec);
  ostr_heap_free(p->sheap);
  ostr_heap_free(p->rheap);
  free(p);
}

static bool own(onnx_plan *p, void *d) {
  if (p->n_owned == p->cap_owned) {
    int nc = p->cap_owned * 2 + 16;
    void **no = realloc(p->owned, sizeof(void *) * (size_t)nc);
    if (!no) return false;
    p->owned = no;
    p->cap_owned = nc;
  }
  p->owned[p->n_owned++] = d;
  return true;
}

bool plan_matches(const onnx_plan *p, const cinfer_tensor *inputs, const int *map) {
  const int64_t *k = p->key;
  for (int i = 0; i < p->m->n_inputs; i++) {
    const cinfer_tensor *t = &inputs[map[i]];
    if (*k++ != t->ndim) return false;
    for (int d = 0; d < t->ndim; d++)
      if (*k++ != t->shape[d]) return false;
    const ot *v = &p->vals[p->m->inputs[i]];
    if (p->is_static[p->m->inputs[i]] && t->byte_size && memcmp(v->data, t->data, t->byte_size))
      return false;
  }
  return true;
}

/* PRelu(x, slope) as a per-channel activation: slope static float, one value or one per
 * channel of x (axis 1, every other broadcast dim 1). Sets *slope / *n. */
static bool prelu_channelwise(const onnx_plan *p, const plan_step *c, const float **slope, int64_t *n) {
  if (c->n_in != 2 || c->in_id[1] < 0 || !p->is_static[c->in_id[1]]) return false;
  const ot *x = c->in[0], *sl = c->in[1];
  if (sl->dtype != CINFER_TYPE_FP32 || x->dtype != CINFER_TYPE_FP32 || x->ndim < 3 || sl->ndim > x->ndim)
    return false;
  int64_t cnt = ot_numel(sl);
  if (cnt == 1) { *slope = sl->data; *n = 1; return true; }
  if (cnt != x->dims[1]) return false;
  for (int i = 0; i < sl->ndim; i++) {
    int axis = x->ndim - sl->ndim + i;
    if (sl->dims[i] != (axis == 1 ? x->dims[1] : 1)) return false;
  }
  *slope = sl->data;
  *n = cnt;
  return true;
}

static act_kind act_of(const onnx_plan *p, const plan_step *c, float *a, float *b) {
  const char *t = c->node->op_type;
  *a = 0;
  *b = 0;
  if (!strcmp(t, "Relu")) return ACT_RELU;
  if (!strcmp(t, "Sigmoid")) return ACT_SIGMOID;
  if (!strcmp(t, "Tanh")) return ACT_TANH;
  if (!strcmp(t, "LeakyRelu")) { *a = attr_f(c->node, "alpha", 0.01f); return ACT_LEAKY; }
  if (!strcmp(t, "Clip")) {
    for (int i = 1; i < c->n_in; i++)
      if (c->in[i] && !p->is_static[c->in_id[i]]) return ACT_NONE;
    double lo, hi;
    clip_bounds(c->node, c->in, &lo, &hi);
    *a = lo < -3.0e38 ? -3.0e38f : (float)lo;
    *b = hi > 3.0e38 ? 3.0e38f : (float)hi;
    return ACT_CLIP;
  }
  return ACT_NONE;
}

/* A Pad whose pads are all zero, a Slice that keeps every element (RetinaFace's FPN crops
 * an upsampled map to the size it already has), or an Identity, whose output is not a
 * graph output: its consumers read its input instead and the step goes. Besides the step, this lets a
 * blocked layout pass through (DenseNet's transition Conv -> Pad(0) -> AveragePool kept
 * the conv output plain, with a reorder on each side of the pool). */
static void elide_noops(onnx_plan *p, bool *skip) {
  const onnx_model *m = p->m;
  for (int s = 0; s < p->n_steps; s++) {
    plan_step *st = &p->steps[s];
    bool pad = !strcmp(st->node->op_type, "Pad"), slice = !strcmp(st->node->op_type, "Slice");
    if (skip[s] || (!pad && !slice && strcmp(st->node->op_type, "Identity")) || st->n_out < 1 || st->out_id[0] < 0 ||
        st->in_id[0] < 0 || m->values[st->out_id[0]].is_output || (pad && !pad_is_noop(st->node, st->in)) ||
        (slice && !slice_is_noop(st->node, st->in)))
      continue;
    int from = st->out_id[0], to = st->in_id[0];
    for (int t = s + 1; t < p->n_steps; t++) {
      plan_step *u = &p->steps[t];
      for (int j = 0; j < u->n_in; j++)
        if (u->in_id[j] == from) {
          u->in_id[j] = to;
          u->in[j] = &p->vals[to];
        }
      if (u->sum_id == from) u->sum_id = to;
    }
    skip[s] = true;
  }
}

/* Per value: the last step (not skipped) that reads it (consumers) or writes it; -1 if
 * none. NULL when out of memory (the fusion passes then do nothing). */
static int *value_steps(const onnx_plan *p, const bool *skip, bool consumers) {
  int nv = p->m->n_values, *at = malloc(sizeof(int) * ((size_t)nv + 1));
  if (!at) return NULL;
  for (int v = 0; v < nv; v++) at[v] = -1;
  for (int s = 0; s < p->n_steps; s++) {
    const plan_step *st = &p->steps[s];
    int n = consumers ? st->n_in : st->n_out;
    const int *ids = consumers ? st->in_id : st->out_id;
    for (int j = 0; j < n && !skip[s]; j++)
      if (ids[j] >= 0) at[ids[j]] = s;
  }
  return at;
}

/* Conv(+Add)(+activation) and Gemm+activation, decided on concrete shapes. */
static void fuse_steps(onnx_plan *p, bool *skip) {
  const onnx_model *m = p->m;
  int *cons = value_steps(p, skip, true), *def = value_steps(p, skip, false);
  if (!cons || !def) {
    free(cons);
    free(def);
    return;
  }
  for (int s = 0; s < p->n_steps; s++) {
    plan_step *st = &p->steps[s];
    bool conv = !strcmp(st->node->op_type, "Conv"), gemm = !strcmp(st->node->op_type, "Gemm");
    bool bn = !strcmp(st->node->op_type, "BatchNormalization") && st->in[0]->dtype == CINFER_TYPE_FP32;
    if (skip[s] || (!conv && !gemm && !bn)) continue;
    snprintf(st->fused_buf, sizeof st->fused_buf, "%s", st->node->op_type);
    for (int round = 0; round < 2; round++) {
      int v = st->out_id[0];
      const onnx_value *val = &m->values[v];
      if (val->is_output || val->n_uses != 1 || cons[v] < 0) break;
      plan_step *c = &p->steps[cons[v]];
      if (skip[cons[v]]) break;
      if (conv && round == 0 && !st->has_fused && !strcmp(c->node->op_type, "Add") && c->n_in == 2) {
        int other = c->in_id[0] == v ? c->in_id[1] : c->in_id[0];
        /* the addend must already exist when the conv runs */
        if (other == v || other < 0 || p->is_static[other] || def[other] >= s) break;
        const ot *o = &p->vals[other], *x = &p->vals[v];
        if (o->dtype != CINFER_TYPE_FP32 || o->ndim != x->ndim ||
            memcmp(o->dims, x->dims, sizeof(int64_t) * (size_t)x->ndim))
          break;
        st->sum_id = other;
        st->has_fused = true;
        st->out_id[0] = c->out_id[0];
        st->out[0] = c->out[0];
        skip[cons[v]] = true;
        strncat(st->fused_buf, "+Add", sizeof st->fused_buf - strlen(st->fused_buf) - 1);
        continue;
      }
      float a, b;
      act_kind k = act_of(p, c, &a, &b);
      const float *slope = NULL;
      int64_t slope_n = 0;
      if (k == ACT_NONE && !gemm && !strcmp(c->node->op_type, "PRelu") && c->in_id[0] == v &&
          prelu_channelwise(p, c, &slope, &slope_n))
        k = ACT_PRELU;
      if (k == ACT_NONE) break;
      st->has_fused = true;
      st->fused.act = k;
      st->fused.slope = slope;
      st->fused.slope_n = slope_n;
      st->fused.a = a;
      st->fused.b = b;
      st->out_id[0] = c->out_id[0];
      st->out[0] = c->out[0];
      skip[cons[v]] = true;
      strncat(st->fused_buf, "+", sizeof st->fused_buf - strlen(st->fused_buf) - 1);
      strncat(st->fused_buf, c->node->op_type, sizeof st->fused_buf - strlen(st->fused_buf) - 1);
      break;
    }
  }
  free(cons);
  free(def);
}

/* A constant operand of an element-wise op on x [N,C,...] that is one value, or one per
 * channel (dims right-aligned with x's: C on axis 1, 1 elsewhere). */
static bool const_per_channel(const ot *c, const ot *x, bool *per_channel) {
  if (c->dtype != CINFER_TYPE_FP32 || c->ndim > x->ndim) return false;
  int64_t cnt = ot_numel(c);
  if (cnt == 1) { *per_channel = false; return true; }
  if (x->ndim < 2 || cnt != x->dims[1]) return false;
  for (int i = 0; i < c->ndim; i++) {
    int axis = x->ndim - c->ndim + i;
    if (c->dims[i] != (axis == 1 ? x->dims[1] : 1)) return false;
  }
  *per_channel = true;
  return true;
}

/* Add/Sub/Mul/Div chains with a constant operand in front of a convolution whose fast
 * kernel applies them as it reads its input (step_pre): their steps and their full-size
 * intermediate tensors go away. Only values with that single use, not graph outputs, and
 * element-wise ops that do not broadcast x. */
static void fuse_pre(onnx_plan *p, bool *skip) {
  const onnx_model *m = p->m;
  int *def = value_steps(p, skip, false);
  if (!def) return;
  static const struct { const char *name; char op; } ops[] = {{"Add", '+'}, {"Sub", '-'}, {"Mul", '*'}, {"Div", '/'}};
  for (int s = 0; s < p->n_steps; s++) {
    plan_step *st = &p->steps[s];
    if (skip[s] || !fast_takes_pre(p, st)) continue;
    char names[64] = "";
    while (st->pre.n < STEP_MAX_PRE) {
      int v = st->in_id[0];
      if (v < 0 || m->values[v].is_output || m->values[v].n_uses != 1 || def[v] < 0) break;
      plan_step *d = &p->steps[def[v]];
      char op = 0;
      for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(d->node->op_type, ops[i].name)) op = ops[i].op;
      if (!op || d->n_in != 2 || d->in_id[0] < 0 || d->in_id[1] < 0) break;
      int ci = p->is_static[d->in_id[1]] ? 1 : p->is_static[d->in_id[0]] ? 0 : -1;
      if (ci < 0 || p->is_static[d->in_id[1 - ci]]) break;
      const ot *x = d->in[1 - ci], *y = d->out[0];
      bool per_channel;
      if (x->dtype != CINFER_TYPE_FP32 || x->ndim != y->ndim ||
          memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)x->ndim) || !const_per_channel(d->in[ci], x, &per_channel))
        break;
      memmove(&st->pre.op[1], &st->pre.op[0], sizeof st->pre.op[0] * (size_t)st->pre.n);
      st->pre.op[0].op = op;
      st->pre.op[0].c_first = ci == 0;
      st->pre.op[0].per_channel = per_channel;
      st->pre.op[0].c = d->in[ci]->data;
      st->pre.n++;
      st->in_id[0] = d->in_id[1 - ci];
      st->in[0] = d->in[1 - ci];
      skip[def[v]] = true;
      char t[64];
      snprintf(t, sizeof t, "%s+%s", d->node->op_type, names);
      memcpy(names, t, sizeof names);
    }
    if (st->pre.n) {
      const char *rest = st->has_fused ? st->fused_buf : st->node->op_type;
      char t[64];
      snprintf(t, sizeof t, "%s%s", names, rest);
      memcpy(st->fused_buf, t, sizeof t);
    }
  }
  free(def);
}

/* A conv whose only consumer is a depthwise 3x3 conv that a kernel family runs fused
 * (fast_takes_dw), and the conv's output never goes to memory. onednn: a 1x1 conv with an
 * output too large for the L2 cache (>= 2 MiB) and a stride-2 depthwise conv, one
 * primitive (dw post-op) over row bands: RetinaFace's conv_2 -> conv_3_dw (32 x 320 x 320,
 * 13 MB): 3.4 -> 2.5 ms; smaller outputs gained nothing (measured down to 3 MB: +-0.05 ms).
 * smallk: a first layer and a stride-1 depthwise conv (smallk_takes_dw). */
static void fuse_dw(onnx_plan *p, bool *skip) {
  const onnx_model *m = p->m;
  if (getenv("CINFER_ONNX_NO_DW_FUSION")) return;
  int *cons = value_steps(p, skip, true);
  if (!cons) return;
  for (int s = 0; s < p->n_steps; s++) {
    plan_step *st = &p->steps[s];
    int v = st->out_id[0];
    if (skip[s] || v < 0 || m->values[v].is_output || m->values[v].n_uses != 1 || cons[v] < 0) continue;
    plan_step *t = &p->steps[cons[v]];
    if (skip[cons[v]] || t->in_id[0] != v || !fast_takes_dw(p, st, t)) continue;
    st->dw.w = t->in[1];
    st->dw.b = t->n_in > 2 ? t->in[2] : NULL;
    st->dw.act = t->has_fused ? t->fused.act : ACT_NONE;
    memcpy(st->dw.mid, st->out[0]->dims, sizeof st->dw.mid);
    st->out_id[0] = t->out_id[0];
    st->out[0] = t->out[0];
    skip[cons[v]] = true;
    char buf[64]; /* fuse_steps put the conv's name (and fusions) in fused_buf */
    snprintf(buf, sizeof buf, "%s+%s", st->fused_buf, t->has_fused ? t->fused_buf : t->node->op_type);
    memcpy(st->fused_buf, buf, sizeof buf);
  }
  free(cons);
}

/* the keep rule of plan_build: v stays in a blocked layout when every consumer reads it so */
static bool keeps_blocked(const onnx_plan *p, const int *ncons, const int *nfast, int v) {
  return !getenv("CINFER_ONNX_PLAIN") && v >= 0 && !p->m->values[v].is_output && ncons[v] > 0 &&
         ncons[v] == nfast[v] && p->root[v] == v;
}

/* a and b are convs of the same geometry, bias presence and fused activation */
static bool same_conv(const plan_step *a, const plan_step *b) {
  const ot *wa = a->in[1], *wb = b->in[1];
  if (wa->ndim != wb->ndim || memcmp(wa->dims + 1, wb->dims + 1, sizeof(int64_t) * (size_t)(wa->ndim - 1)) ||
      (a->n_in > 2 && a->in[2]) != (b->n_in > 2 && b->in[2]) || a->has_fused != b->has_fused ||
      (a->has_fused && (a->fused.act != b->fused.act || a->fused.a != b->fused.a || a->fused.b != b->fused.b)))
    return false;
  conv_geom ga, gb;
  cinfer_status *sa = conv_geom_make(a->node, a->in[0], wa->dims + 2, false, &ga);
  cinfer_status *sb = conv_geom_make(b->node, b->in[0], wb->dims + 2, false, &gb);
  bool ok = !sa && !sb && ga.sp == gb.sp;
  cinfer_status_free(sa);
  cinfer_status_free(sb);
  for (int i = 0; ok && i < ga.sp; i++)
    ok = ga.k[i] == gb.k[i] && ga.out[i] == gb.out[i] && ga.stride[i] == gb.stride[i] && ga.dil[i] == gb.dil[i] &&
         ga.pb[i] == gb.pb[i] && ga.pe[i] == gb.pe[i];
  return ok;
}

/* Sibling convs (RetinaFace's detection heads: 1x1 convs 64 -> 4, 8 and 20 channels, all
 * reading one SSH output) run as one conv over the concatenation of their weights and
 * biases along M: the input is read once, one primitive call instead of three, and at
 * T > 1 threads the 32 channels split into slices where 4 or 8 could not (less than one
 * 8-channel block). Siblings: fast_can_merge steps with the same input, geometry, bias
 * presence and fused activation, whose outputs are plain (no consumer keeps them blocked:
 * graph outputs, reference kernels) and not read by a Concat (which may take them in
 * place instead). The merged step is the first sibling's; out[0] is a
 * plan tensor of all channels, stored at the first sibling's value; each sibling's output
 * is a view at its channel offset (N = 1: a channel range of NCHW is contiguous), the
 * Concat-in-place mechanism (root / alias_off). Each output channel is the same dot
 * product; whether oneDNN sums it in the same order for the merged M as for each
 * sibling's is its kernel's choice: on RetinaFace and UltraFace it does (bit-identical
 * outputs), in general the merged conv is within the reference tolerances
 * (docs/design/onnx.md, "Sibling convs"). CINFER_ONNX_NO_MERGE=1 turns it off. */
static cinfer_status *merge_siblings(onnx_plan *p, const int *ncons, const int *nfast) {
  if (getenv("CINFER_ONNX_NO_MERGE")) return NULL;
  int ns = p->n_steps;
  bool *gone = calloc((size_t)ns + 1, sizeof *gone);
  int *sib = malloc(sizeof(int) * ((size_t)ns + 1));
  if (!gone || !sib) {
    free(gone);
    free(sib);
    return oom();
  }
  /* a Concat's input may instead be written in place into the Concat's output
   * (kern_blocked.c): such convs are left alone */
  bool *cat = calloc((size_t)p->m->n_values + 1, sizeof *cat);
  if (!cat) {
    free(gone);
    free(sib);
    return oom();
  }
  for (int i = 0; i < ns; i++)
    if (!strcmp(p->steps[i].node->op_type, "Concat"))
      for (int j = 0; j < p->steps[i].n_in; j++)
        if (p->steps[i].in_id[j] >= 0) cat[p->steps[i].in_id[j]] = true;
  cinfer_status *st = NULL;
  for (int a = 0; a < ns && !st; a++) {
    plan_step *sa = &p->steps[a];
    if (gone[a] || !fast_can_merge(p, sa) || keeps_blocked(p, ncons, nfast, sa->out_id[0]) ||
        p->root[sa->out_id[0]] != sa->out_id[0] || cat[sa->out_id[0]])
      continue;
    int k = 0;
    sib[k++] = a;
    for (int b = a + 1; b < ns; b++) {
      plan_step *sb = &p->steps[b];
      if (!gone[b] && sb->in_id[0] == sa->in_id[0] && fast_can_merge(p, sb) && same_conv(sa, sb) &&
          !keeps_blocked(p, ncons, nfast, sb->out_id[0]) && p->root[sb->out_id[0]] == sb->out_id[0] &&
          !cat[sb->out_id[0]])
        sib[k++] = b;
    }
    if (k < 2) continue;
    /* weights [M, ...] and biases [M] of every sibling, in step order */
    const ot *w0 = sa->in[1];
    int64_t per = ot_numel(w0) / w0->dims[0], M = 0;
    for (int i = 0; i < k; i++) M += p->steps[sib[i]].in[1]->dims[0];
    bool bias = sa->n_in > 2 && sa->in[2];
    ot *w = calloc(1, sizeof *w), *bo = bias ? calloc(1, sizeof *bo) : NULL, *y = calloc(1, sizeof *y);
    float *wd = aligned_alloc(64, ((size_t)(M * per) * sizeof(float) + 63) & ~(size_t)63);
    float *bd = bias ? aligned_alloc(64, ((size_t)M * sizeof(float) + 63) & ~(size_t)63) : NULL;
    int *oid = malloc(sizeof(int) * ((size_t)k + 1));
    ot **out = malloc(sizeof(ot *) * ((size_t)k + 1));
    void *mem[5] = {w, wd, y, bo, bd};
    bool ok = w && y && wd && (!bias || (bo && bd)) && oid && out;
    for (int i = 0; i < 5; i++) { /* the plan owns them (own), or they are freed here */
      if (ok && mem[i] && !own(p, mem[i])) ok = false;
      else if (ok) mem[i] = NULL;
    }
    if (!ok) {
      for (int i = 0; i < 5; i++) free(mem[i]);
      free(oid);
      free(out);
      st = oom();
      break;
    }
    *w = *w0;
    w->dims[0] = M;
    w->data = wd;
    y->dtype = CINFER_TYPE_FP32;
    y->ndim = sa->out[0]->ndim;
    memcpy(y->dims, sa->out[0]->dims, sizeof(int64_t) * (size_t)y->ndim);
    y->dims[1] = M;
    if (bias) {
      *bo = *sa->in[2];
      bo->dims[0] = M;
      bo->data = bd;
    }
    int64_t m0 = 0;
    size_t off = 0;
    int root = sa->out_id[0];
    for (int i = 0; i < k; i++) {
      plan_step *t = &p->steps[sib[i]];
      int64_t Mi = t->in[1]->dims[0];
      memcpy(wd + m0 * per, t->in[1]->data, sizeof(float) * (size_t)(Mi * per));
      if (bias) memcpy(bd + m0, t->in[2]->data, sizeof(float) * (size_t)Mi);
      oid[i] = t->out_id[0];
      out[i] = i ? t->out[0] : y;
      if (i) {
        p->root[oid[i]] = root;
        p->alias_off[oid[i]] = off;
        gone[sib[i]] = true;
      }
      off += ot_nbytes(t->out[0]);
      m0 += Mi;
    }
    free(sa->out);
    free(sa->out_id);
    sa->out = out;
    sa->out_id = oid;
    sa->n_out = k;
    sa->n_merged = k;
    sa->in[1] = w;
    if (bias) sa->in[2] = bo;
    const char *base = sa->has_fused ? sa->fused_buf : sa->node->op_type;
    char t[64];
    snprintf(t, sizeof t, "%s[x%d]", base, k); /* no space: the profile's columns */
    memcpy(sa->fused_buf, t, sizeof t);
    sa->fused_names = sa->fused_buf;
  }
  /* the merged-away steps go */
  int w = 0;
  for (int i = 0; i < ns; i++) {
    if (gone[i]) {
      plan_step *q = &p->steps[i];
      free(q->in);
      free(q->out);
      free(q->in_id);
      free(q->out_id);
      continue;
    }
    p->steps[w++] = p->steps[i];
  }
  p->n_steps = w;
  for (int i = 0; i < w; i++) /* fused_names pointed into the moved steps */
    if (p->steps[i].has_fused || p->steps[i].pre.n || p->steps[i].dw.w || p->steps[i].n_merged)
      p->steps[i].fused_names = p->steps[i].fused_buf;
  free(gone);
  free(sib);
  free(cat);
  return st;
}

typedef struct buf { size_t size, off; int first, last; } buf;

static int cmp_size(const void *a, const void *b, void *ctx) {
  const buf *bs = ctx;
  size_t x = bs[*(const int *)a].size, y = bs[*(const int *)b].size;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* buffer used by a step of group g (2: both) during a section: its lane (memory_plan) */
static void lane_mark(signed char *l, int g) {
  if (*l != -1) *l = *l == -2 || *l == g ? (signed char)g : 2; /* -1: not in the arena */
}

/* whether two buffers may be live at once (memory_plan): their step ranges overlap, or
 * they are live during one inter-op section in lanes that can run at once */
static bool bufs_conflict(const buf *x, const buf *y, const signed char *lx, const signed char *ly, int nsec) {
  if (!(y->last < x->first || x->last < y->first)) return true;
  for (int k = 0; k < nsec; k++)
    if (lx[k] >= 0 && ly[k] >= 0 && (lx[k] != ly[k] || lx[k] == 2)) return true;
  return false;
}

static cinfer_status *memory_plan(onnx_plan *p) {
  const onnx_model *m = p->m;
  int nv = m->n_values;
  int nb = nv + p->n_steps * STEP_MAX_TEMPS;
  buf *b = calloc((size_t)nb + 1, sizeof *b);
  int *order = malloc(sizeof(int) * ((size_t)nb + 1));
  if (!b || !order) { free(b); free(order); return oom(); }
  for (int i = 0; i < nb; i++) { b[i].first = -1; b[i].last = -1; }
  for (int s = 0; s < p->n_steps; s++) {
    plan_step *st = &p->steps[s];
    for (int o = 0; o < st->n_out; o++) {
      int v = st->out_id[o];
      if (v < 0) continue;
      int r = p->root[v];
      if (m->values[r].kind == VAL_INPUT || p->is_static[r]) continue;
      size_t sz = p->alias_off[v] + (p->bytes[v] ? p->bytes[v] : ot_nbytes(&p->vals[v]));
      if (sz > b[r].size) b[r].size = sz;
      if (b[r].first < 0) b[r].first = s;
      if (b[r].last < s) b[r].last = s;
    }
    for (int j = 0; j <= st->n_in; j++) {
      int v = j < st->n_in ? st->in_id[j] : st->sum_id;
      if (v < 0) continue;
      int r = p->root[v];
      if (b[r].last < s) b[r].last = s;
    }
    for (int t = 0; t < STEP_MAX_TEMPS; t++)
      if (st->temp_bytes[t]) {
        buf *x = &b[nv + s * STEP_MAX_TEMPS + t];
        x->size = st->temp_bytes[t];
        x->first = x->last = s;
      }
  }
  for (int i = 0; i < m->n_outputs; i++) {
    int r = p->root[m->outputs[i]];
    if (b[r].first >= 0) b[r].last = p->n_steps;
  }
  /* inter-op sections: the two groups' steps run at once, each group's in order. lane[i *
   * n_sec + k]: which steps of section k use buffer i: -1 it is not live during the section,
   * 0 or 1 only that group's, 2 both groups' or none (live through it). Two buffers live
   * during a section in different lanes (or either in lane 2) never share bytes, whatever
   * their step numbers; two of the same group's lane may, where their step ranges do not
   * overlap, since that group's steps run in order and a section run alone runs all steps in
   * order. Until session 21 every buffer used during a section was live during all of it: an
   * SSR-Net plan at 2 threads took a 1.9 MiB arena against 0.8 at 1 thread, and the
   * chooser's alone mode (the other core busy) ran it ~1% slower than the 1-thread plan. */
  int nsec = p->n_sec;
  signed char *lane = nsec ? malloc((size_t)nb * (size_t)nsec) : NULL;
  if (nsec && !lane) { free(b); free(order); return oom(); }
  for (int k = 0; k < nsec; k++) {
    const plan_sec *q = &p->sec[k];
    for (int i = 0; i < nb; i++)
      lane[i * nsec + k] = b[i].first < 0 || b[i].last < q->first || b[i].first > q->last ? -1 : -2;
    for (int s = q->first; s <= q->last; s++) {
      const plan_step *st = &p->steps[s];
      int g = st->group == 0 || st->group == 1 ? st->group : 2;
      for (int o = 0; o < st->n_out; o++)
        if (st->out_id[o] >= 0) lane_mark(&lane[p->root[st->out_id[o]] * nsec + k], g);
      for (int j = 0; j <= st->n_in; j++) {
        int v = j < st->n_in ? st->in_id[j] : st->sum_id;
        if (v >= 0) lane_mark(&lane[p->root[v] * nsec + k], g);
      }
      for (int t = 0; t < STEP_MAX_TEMPS; t++)
        if (st->temp_bytes[t]) lane_mark(&lane[(nv + s * STEP_MAX_TEMPS + t) * nsec + k], g);
    }
    for (int i = 0; i < nb; i++)
      if (lane[i * nsec + k] == -2) lane[i * nsec + k] = 2;
  }
  int n = 0;
  for (int i = 0; i < nb; i++)
    if (b[i].first >= 0 && b[i].size) order[n++] = i;
  qsort_r(order, (size_t)n, sizeof(int), cmp_size, b);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    buf *x = &b[order[i]];
    size_t sz = (x->size + 63) & ~(size_t)63, off = 0;
    /* lowest offset that does not collide with a placed buffer live at the same time */
    bool moved = true;
    while (moved) {
      moved = false;
      for (int j = 0; j < i; j++) {
        buf *y = &b[order[j]];
        if (!bufs_conflict(x, y, lane ? lane + order[i] * nsec : NULL, lane ? lane + order[j] * nsec : NULL, nsec))
          continue;
        size_t ysz = (y->size + 63) & ~(size_t)63;
        if (off < y->off + ysz && y->off < off + sz) {
          off = y->off + ysz;
          moved = true;
        }
      }
    }
    x->off = off;
    if (off + sz > total) total = off + sz;
  }
  free(lane);
  p->arena_bytes = total;
  p->arena = aligned_alloc(64, total ? total : 64);
  if (!p->arena) { free(b); free(order); return oom(); }
  char *base = p->arena;
  for (int v = 0; v < nv; v++) {
    int r = p->root[v];
    if (b[r].first >= 0 && !p->is_static[v]) p->vals[v].data = base + b[r].off + p->alias_off[v];
  }
  for (int s = 0; s < p->n_steps; s++)
    for (int t = 0; t < STEP_MAX_TEMPS; t++)
      if (p->steps[s].temp_bytes[t]) p->steps[s].temp[t] = base + b[nv + s * STEP_MAX_TEMPS + t].off;
  free(b);
  free(order);
  return NULL;
}

cinfer_status *plan_build(const onnx_model *m, const cinfer_tensor *inputs, const int *map,
                          int threads, bool no_fast, onnx_plan **out) {
  *out = NULL;
  cinfer_status *st = NULL;
  onnx_plan *p = calloc(1, sizeof *p);
  if (!p) return oom();
  p->m = m;
  p->threads = threads;
  p->no_fast = no_fast;
  int nv = m->n_values;
  int nk = 0;
  for (int i = 0; i < m->n_inputs; i++) nk += 1 + inputs[map[i]].ndim;
  p->key = calloc((size_t)nk + 1, sizeof *p->key);
  p->vals = calloc((size_t)nv + 1, sizeof *p->vals);
  p->is_static = calloc((size_t)nv + 1, sizeof *p->is_static);
  p->root = calloc((size_t)nv + 1, sizeof *p->root);
  p->alias_off = calloc((size_t)nv + 1, sizeof *p->alias_off);
  p->layout = calloc((size_t)nv + 1, sizeof *p->layout);
  p->bytes = calloc((size_t)nv + 1, sizeof *p->bytes);
  p->steps = calloc((size_t)m->n_nodes + 1, sizeof *p->steps);
  bool *skip = calloc((size_t)m->n_nodes + 1, sizeof *skip);
  p->sheap = ostr_heap_new();
  p->rheap = ostr_heap_new();
  if (!p->sheap || !p->rheap || !p->key || !p->vals || !p->is_static || !p->root || !p->alias_off || !p->layout || !p->bytes || !p->steps || !skip) {
    st = oom();
    goto fail;
  }
  int64_t *k = p->key;
  for (int i = 0; i < m->n_inputs; i++) {
    const cinfer_tensor *t = &inputs[map[i]];
    *k++ = t->ndim;
    for (int d = 0; d < t->ndim; d++) *k++ = t->shape[d];
  }
  for (int v = 0; v < nv; v++) {
    p->root[v] = v;
    const onnx_value *val = &m->values[v];
    if (val->kind == VAL_CONST && val->cval) {
      p->vals[v] = *val->cval;
      p->is_static[v] = true;
    }
  }
  for (int i = 0; i < m->n_inputs; i++) {
    const cinfer_tensor *t = &inputs[map[i]];
    ot *o = &p->vals[m->inputs[i]];
    o->dtype = t->dtype;
    o->ndim = t->ndim;
    memcpy(o->dims, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    if (m->key_input[i] && ot_numel(o) <= ONNX_MAX_KEY_INPUT_ELEMENTS) {
      /* shape-like input: its values are part of the plan key */
      void *d = aligned_alloc(64, (t->byte_size + 64) & ~(size_t)63);
      if (!d || !own(p, d)) { free(d); st = oom(); goto fail; }
      if (t->byte_size) memcpy(d, t->data, t->byte_size);
      o->data = d;
      p->is_static[m->inputs[i]] = true;
    }
  }
  for (int ni = 0; ni < m->n_nodes; ni++) {
    const onnx_node *n = &m->nodes[ni];
    plan_step *s = &p->steps[p->n_steps];
    memset(s, 0, sizeof *s);
    s->node = n;
    s->sum_id = -1;
    s->n_in = n->n_in;
    s->n_out = n->n_out;
    s->in = calloc((size_t)n->n_in + 1, sizeof *s->in);
    s->out = calloc((size_t)n->n_out + 1, sizeof *s->out);
    s->in_id = calloc((size_t)n->n_in + 1, sizeof *s->in_id);
    s->out_id = calloc((size_t)n->n_out + 1, sizeof *s->out_id);
    p->n_steps++; /* owned by the plan from here, freed by plan_destroy */
    if (!s->in || !s->out || !s->in_id || !s->out_id) { st = oom(); goto fail; }
    bool all_static = true;
    for (int j = 0; j < n->n_in; j++) {
      s->in_id[j] = n->in[j];
      s->in[j] = n->in[j] >= 0 ? &p->vals[n->in[j]] : NULL;
      if (n->in[j] >= 0 && !p->is_static[n->in[j]]) all_static = false;
    }
    if (n->op->flags & OP_SHAPE_ONLY) all_static = true;
    for (int o = 0; o < n->n_out; o++) {
      s->out_id[o] = n->out[o];
      s->out[o] = n->out[o] >= 0 ? &p->vals[n->out[o]] : NULL;
    }
    for (int j = 0; j < n->n_in; j++)
      if (s->in[j] && s->in[j]->dtype == CINFER_TYPE_BYTES && !op_takes_string(n->op->str_in, j)) {
        st = NODE_ERR(n, CINFER_UNSUPPORTED, "input %d ('%s') is STRING; %s does not take strings", j,
                      m->values[n->in[j]].name, n->op_type);
        goto fail;
      }
    if ((st = n->op->infer(n, s->in, s->out))) goto fail;
    for (int o = 0; o < n->n_out; o++)
      if (s->out[o] && (ot_numel(s->out[o]) < 0 ||
                        (uint64_t)ot_nbytes(s->out[o]) > (uint64_t)ONNX_MAX_TENSOR_BYTES)) {
        st = NODE_ERR(n, CINFER_INVALID_ARG, "output %d is too large", o);
        goto fail;
      }
    if (all_static) {
      for (int o = 0; o < n->n_out; o++) {
        if (!s->out[o]) continue;
        size_t nb = (ot_nbytes(s->out[o]) + 63) & ~(size_t)63;
        void *d = aligned_alloc(64, nb ? nb : 64);
        if (!d || !own(p, d)) { free(d); st = oom(); goto fail; }
        memset(d, 0, nb ? nb : 64);
        s->out[o]->data = d;
        p->is_static[n->out[o]] = true;
      }
      onnx_exec x = {.threads = 1, .heap = p->sheap};
      if ((st = n->op->exec(&x, n, s->in, s->out))) goto fail;
      free(s->in); free(s->out); free(s->in_id); free(s->out_id);
      p->n_steps--;
      continue;
    }
  }
  if (!getenv("CINFER_ONNX_NOFUSE")) {
    elide_noops(p, skip);
    fuse_steps(p, skip);
    if (!no_fast) fuse_pre(p, skip);
    if (!no_fast) fuse_dw(p, skip);
  }
  /* drop fused-away steps */
  int w = 0;
  for (int s = 0; s < p->n_steps; s++) {
    if (skip[s]) {
      free(p->steps[s].in); free(p->steps[s].out); free(p->steps[s].in_id); free(p->steps[s].out_id);
      continue;
    }
    p->steps[w++] = p->steps[s];
  }
  p->n_steps = w;
  for (int s = 0; s < p->n_steps; s++) {
    plan_step *ps = &p->steps[s];
    if (ps->sum_id >= 0) ps->fused.sum = &p->vals[ps->sum_id];
    if (ps->has_fused || ps->pre.n || ps->dw.w) ps->fused_names = ps->fused_buf; /* steps moved: our copy */
    bool alias = (ps->node->op->flags & OP_ALIAS) ||
                 (!strcmp(ps->node->op_type, "Pad") && !ps->has_fused && pad_is_noop(ps->node, ps->in));
    if (alias && ps->in_id[0] >= 0 && !p->is_static[ps->in_id[0]])
      p->root[ps->out_id[0]] = p->root[ps->in_id[0]];
  }
  if (!no_fast) {
    /* oneDNN fixes a primitive's thread decomposition when it is created; every
     * primitive runs on one thread (the engine's pool splits the work, opool.h), so it is
     * created under one OpenMP thread and no OpenMP team ever starts */
    omp_set_num_threads(1);
    /* consumers of each value: may it stay in a blocked layout? */
    int *ncons = calloc((size_t)nv + 1, sizeof *ncons), *nfast = calloc((size_t)nv + 1, sizeof *nfast);
    if (!ncons || !nfast) { free(ncons); free(nfast); st = oom(); goto fail; }
    for (int s = 0; s < p->n_steps; s++) {
      plan_step *ps = &p->steps[s];
      for (int j = 0; j <= ps->n_in; j++) {
        int v = j < ps->n_in ? ps->in_id[j] : ps->sum_id;
        if (v < 0) continue;
        ncons[v]++;
        if (fast_can_take_blocked(p, ps, j)) nfast[v]++;
      }
    }
    st = merge_siblings(p, ncons, nfast);
    for (int s = 0; s < p->n_steps && !st; s++) {
      plan_step *ps = &p->steps[s];
      bool keep = !ps->n_merged && keeps_blocked(p, ncons, nfast, ps->out_id[0]);
      st = fast_prepare(p, ps, keep, &ps->fast);
    }
    free(ncons);
    free(nfast);
    if (st) goto fail;
    /* Concat inputs written in place (blk_prepare) may chain (DenseNet: each block's
     * Concat output is the first input of the next): resolve every root to the final one */
    for (int v = 0; v < nv; v++) {
      int r = p->root[v];
      size_t off = p->alias_off[v];
      for (int hops = 0; p->root[r] != r && hops < nv; hops++) {
        off += p->alias_off[r];
        r = p->root[r];
      }
      p->root[v] = r;
      p->alias_off[v] = off;
    }
  }
  if ((st = interop_plan(p)) || (st = memory_plan(p))) goto fail;
  for (int s = 0; s < p->n_steps; s++) /* a merged conv writes all its siblings' channels */
    if (p->steps[s].n_merged) p->steps[s].out[0]->data = p->vals[p->steps[s].out_id[0]].data;
  free(skip);
  *out = p;
  return NULL;
fail:
  free(skip);
  plan_destroy(p);
  return st;
}

/* CINFER_ONNX_TRACE=1: print every step's output checksum (debugging aid). */
static bool trace_on(void) {
  static int on = -1; /* sessions may run on several threads (batch workers) */
  int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
  if (v < 0) __atomic_store_n(&on, v = getenv("CINFER_ONNX_TRACE") != NULL, __ATOMIC_RELAXED);
  return v;
}
static void trace_step(const onnx_plan *p, const plan_step *ps) {
  const ot *o = ps->out[0];
  char sh[128];
  ot_shape_str(o, sh, sizeof sh);
  double sum = 0, asum = 0;
  int64_t n = ot_numel(o);
  bool plain = !p->layout[ps->out_id[0]];
  for (int64_t i = 0; plain && i < n; i++) { double v = ot_get_f(o, i); sum += v; asum += fabs(v); }
  fprintf(stderr, "trace %-30s %-18s %-20s sum %.6g abssum %.6g%s\n", ps->node->name,
          ps->fused_names ? ps->fused_names : ps->node->op_type, sh, sum, asum, plain ? "" : " (blocked)");
}

/* CINFER_ONNX_CHECK=1 (with CINFER_ONNX_PLAIN=1): re-run each fast step with its
 * reference kernel and print the largest difference (debugging aid, allocates). */
static void check_step(plan_step *ps, onnx_exec *x) {
  ot *ref = ot_new(ps->out[0]->dtype, ps->out[0]->ndim, ps->out[0]->dims);
  if (!ref) return;
  ot *outs[8] = {ref};
  x->fused = ps->has_fused ? &ps->fused : NULL;
  cinfer_status *st = ps->node->op->exec(x, ps->node, ps->in, outs);
  if (st) { cinfer_status_free(st); ot_free(ref); return; }
  double md = 0, mx = 0;
  for (int64_t i = 0; i < ot_numel(ref); i++) {
    double a = ((float *)ref->data)[i], b = ((float *)ps->out[0]->data)[i];
    if (fabs(a - b) > md) md = fabs(a - b);
    if (fabs(a) > mx) mx = fabs(a);
  }
  fprintf(stderr, "check %-30s %-16s max|ref| %.4g max diff %.3g (rel %.2g)\n", ps->node->name,
          ps->fused_names ? ps->fused_names : ps->node->op_type, mx, md, mx > 0 ? md / mx : 0);
  ot_free(ref);
}

cinfer_status *plan_run(onnx_plan *p, const cinfer_tensor *inputs, const int *map, bool profile) {
  const onnx_model *m = p->m;
  for (int i = 0; i < m->n_inputs; i++)
    if (!p->is_static[m->inputs[i]]) p->vals[m->inputs[i]].data = (void *)inputs[map[i]].data;
  for (int v = 0; v < m->n_values; v++)
    if (p->root[v] != v && m->values[p->root[v]].kind == VAL_INPUT) p->vals[v].data = p->vals[p->root[v]].data;
  omp_set_num_threads(1); /* oneDNN inline on this thread (see plan_build) */
  ostr_heap_reset(p->rheap);
  int k = 0;
  for (int s = 0; s < p->n_steps; s++) {
    cinfer_status *st;
    if (k < p->n_sec && s == p->sec[k].first) {
      st = interop_run(p, &p->sec[k], profile);
      s = p->sec[k++].last;
    } else {
      st = plan_run_step(p, s, profile);
    }
    if (st) return st;
  }
  return NULL;
}

cinfer_status *plan_run_step(onnx_plan *p, int s, bool profile) {
  onnx_exec x = {.threads = p->threads, .heap = p->rheap};
  plan_step *ps = &p->steps[s];
  double t0 = profile ? (double)clock_now_ns() : 0;
  cinfer_status *st;
  if (ps->fast) {
    st = fast_run(ps->fast, ps, p->threads);
  } else {
    x.fused = ps->has_fused ? &ps->fused : NULL;
    st = ps->node->op->exec(&x, ps->node, ps->in, ps->out);
  }
  if (st) return st;
  if (trace_on()) trace_step(p, ps);
  if (ps->fast && getenv("CINFER_ONNX_CHECK") && !p->layout[ps->out_id[0]]) check_step(ps, &x);
  if (profile) {
    ps->ns += (double)clock_now_ns() - t0;
    ps->calls++;
  }
  return NULL;
}

/* Plans the graph for batch 1 and batch 2 (shapes only, reference kernels, no run) and
 * checks that every runtime value either keeps its shape or doubles exactly its dim 0,
 * and that every output doubles dim 0. Used to confirm batchability when the analysis
 * accepted Reshape/Slice operands computed from shapes at plan time. */
bool plan_probe_batch(const onnx_model *m) {
  size_t n = (size_t)m->n_inputs + 1;
  cinfer_tensor *in[2] = {calloc(n, sizeof(cinfer_tensor)), calloc(n, sizeof(cinfer_tensor))};
  int *map = calloc(n, sizeof *map);
  bool ok = in[0] && in[1] && map; /* out of memory: not batchable (the safe answer) */
  for (int b = 0; b < 2 && ok; b++)
    for (int i = 0; i < m->n_inputs && ok; i++) {
      const onnx_io_info *info = &m->in_info[i];
      if (m->key_input[i] || info->ndim < 1) ok = false;
      in[b][i].name = info->name;
      in[b][i].dtype = info->dtype;
      in[b][i].ndim = info->ndim;
      for (int d = 1; d < info->ndim && ok; d++) {
        if (info->shape[d] < 0) ok = false;
        in[b][i].shape[d] = info->shape[d];
      }
      in[b][i].shape[0] = b + 1;
      map[i] = i;
    }
  onnx_plan *p1 = NULL, *p2 = NULL;
  cinfer_status *st = NULL;
  if (ok) st = plan_build(m, in[0], map, 1, true, &p1);
  if (ok && !st) st = plan_build(m, in[1], map, 1, true, &p2);
  ok = ok && !st;
  cinfer_status_free(st);
  free(in[0]);
  free(in[1]);
  free(map);
  for (int v = 0; ok && v < m->n_values; v++) {
    if (p1->is_static[v] || m->values[v].kind == VAL_CONST) continue;
    const ot *a = &p1->vals[v], *b = &p2->vals[v];
    if (a->ndim != b->ndim) { ok = false; break; }
    bool same = !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim);
    bool doubled = a->ndim > 0 && b->dims[0] == 2 * a->dims[0] &&
                   !memcmp(a->dims + 1, b->dims + 1, sizeof(int64_t) * (size_t)(a->ndim - 1));
    if (m->values[v].is_output ? !doubled : !(same || doubled)) ok = false;
  }
  plan_destroy(p1);
  plan_destroy(p2);
  return ok;
}
