/* kern.c: the table of fast kernel families (kern.h) and the plan's fast_* entry points
 * (plan.h) that walk it, plus the helpers the families share (kern_util.h).
 *
 * Priority order (the first family whose can_take says yes prepares the step):
 *   exp, softmax       the only families of their operators;
 *   pool8c, dnnlpool   our nChw8c pooling when input and output stay nChw8c, else oneDNN's;
 *   blocked            Concat/BatchNormalization/Relu on blocked layouts (declines when
 *                      everything is plain and nothing can be written in place);
 *   smallk             convs with C*KH*KW <= 32 (first layers): rounded as ONNX Runtime;
 *   winograd           3x3 stride-1 convs between nChw8c neighbours;
 *   onednn             every other eligible conv (oneDNN's choice of algorithm).
 * The conv order matters: smallk and winograd take subsets of what onednn takes, and
 * onednn's reads_blocked leaves out the small-K convs because smallk takes them first. */
#include <pthread.h>

#include "backends/onnx/kern_util.h"

const kern_family *const kern_families[] = {
    &kern_exp,    &kern_softmax, &kern_pool8c,   &kern_dnnlpool,
    &kern_blocked, &kern_smallk, &kern_winograd, &kern_onednn_conv,
};
const int kern_n_families = (int)(sizeof kern_families / sizeof kern_families[0]);

bool kern_family_available(const kern_family *f) { return !f->available || f->available(); }

bool fast_can_take_blocked(const onnx_plan *p, const plan_step *s, int j) {
  if (p->no_fast) return false;
  for (int i = 0; i < kern_n_families; i++)
    if (kern_families[i]->reads_blocked && kern_family_available(kern_families[i]) &&
        kern_families[i]->reads_blocked(p, s, j))
      return true;
  return false;
}

bool fast_takes_pre(const onnx_plan *p, const plan_step *s) {
  if (p->no_fast) return false;
  for (int i = 0; i < kern_n_families; i++)
    if (kern_families[i]->takes_pre && kern_family_available(kern_families[i]) && kern_families[i]->takes_pre(p, s))
      return true;
  return false;
}

bool fast_takes_dw(const onnx_plan *p, const plan_step *s, const plan_step *t) {
  if (p->no_fast) return false;
  for (int i = 0; i < kern_n_families; i++)
    if (kern_families[i]->takes_dw && kern_family_available(kern_families[i]) && kern_families[i]->takes_dw(p, s, t))
      return true;
  return false;
}

cinfer_status *fast_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **k) {
  *k = NULL;
  if (!p->no_fast) (void)kern_engine(); /* settles oneDNN's ISA before any primitive */
  for (int i = 0; i < kern_n_families && !p->no_fast; i++) {
    const kern_family *f = kern_families[i];
    if (!kern_family_available(f) || !f->can_take(p, s, keep)) continue;
    cinfer_status *st = f->prepare(p, s, keep, k);
    if (st) return st;
    if (*k) {
      (*k)->family = f;
      return NULL;
    }
  }
  /* a reference kernel must never see a blocked tensor */
  for (int j = 0; j < s->n_in; j++)
    if (s->in_id[j] >= 0 && p->layout[s->in_id[j]])
      return NODE_ERR(s->node, CINFER_INTERNAL, "blocked input reached a reference kernel");
  return NULL;
}

cinfer_status *fast_run(fast_kernel *k, plan_step *s, int threads) { return k->family->run(k, s, threads); }

void fast_destroy(fast_kernel *k) {
  if (k) k->family->destroy(k);
}

const char *fast_kernel_label(const fast_kernel *k) { return k->family->label ? k->family->label(k) : k->family->name; }

void fast_layout_free(void *layout) { free(layout); }

void kern_free(fast_kernel *k) { free(k); }

dnnl_engine_t kern_engine(void) {
  static dnnl_engine_t eng;
  static int once;
  if (!__atomic_load_n(&once, __ATOMIC_ACQUIRE)) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (!once) {
      /* oneDNN may use up to AVX-512 (avx512_core: its f32 convolutions gain nothing
       * past it, and AMX/VNNI serve other data types). With AVX-512 its convolutions
       * want nChw16c, with AVX2 nChw8c: kern_block() tells the families which one the
       * plan's blocked values take. DNNL_MAX_CPU_ISA (e.g. AVX2) overrides; it must be
       * settled before the first primitive (fast_prepare calls this first), or oneDNN
       * refuses and keeps its own choice. */
      if (!getenv("DNNL_MAX_CPU_ISA")) (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core);
      if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) eng = NULL;
      __atomic_store_n(&once, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
  }
  return eng;
}

int kern_block(void) {
  static int blk;
  int b = __atomic_load_n(&blk, __ATOMIC_RELAXED);
  if (!b) {
    (void)kern_engine(); /* the ISA is settled */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), a512 = (unsigned)dnnl_cpu_isa_avx512_core;
    b = (isa & a512) == a512 ? 16 : 8;
    __atomic_store_n(&blk, b, __ATOMIC_RELAXED);
  }
  return b;
}

bool kern_is_blocked(const void *layout, const ot *t, int B) {
  if (!layout || t->ndim != 4) return false;
  dnnl_dims_t d = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
  dnnl_memory_desc_t x;
  return dnnl_memory_desc_init_by_tag(&x, 4, d, dnnl_f32, B == 16 ? dnnl_aBcd16b : dnnl_aBcd8b) == dnnl_success &&
         dnnl_memory_desc_equal(layout, &x);
}

dnnl_status_t kern_make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, dnnl_primitive_t *out) {
  dnnl_primitive_desc_t pd;
  dnnl_status_t r = dnnl_reorder_primitive_desc_create(&pd, from, kern_engine(), to, kern_engine(), NULL);
  if (r != dnnl_success) return r;
  r = dnnl_primitive_create(out, pd);
  dnnl_primitive_desc_destroy(pd);
  return r;
}

bool kern_is_nchw8c(const void *layout, const ot *t) { return kern_is_blocked(layout, t, 8); }

bool kern_out_nchw8c(onnx_plan *p, plan_step *s, int64_t C) { return kern_out_blocked(p, s, C, 8); }

bool kern_out_blocked(onnx_plan *p, plan_step *s, int64_t C, int B) {
  const ot *y = s->out[0];
  dnnl_dims_t yd = {y->dims[0], C, y->dims[2], y->dims[3]};
  dnnl_memory_desc_t *l = malloc(sizeof *l);
  if (!l || dnnl_memory_desc_init_by_tag(l, 4, yd, dnnl_f32, B == 16 ? dnnl_aBcd16b : dnnl_aBcd8b) != dnnl_success) {
    free(l);
    return false;
  }
  p->layout[s->out_id[0]] = l;
  p->bytes[s->out_id[0]] = dnnl_memory_desc_get_size(l);
  return true;
}

bool kern_geom(const onnx_node *n, const ot *x, const int64_t *kshape, bool pool, conv_geom *g) {
  cinfer_status *st = conv_geom_make(n, x, kshape, pool, g);
  cinfer_status_free(st);
  return st == NULL;
}

bool kern_conv_eligible(const onnx_plan *p, const plan_step *s) {
  if (strcmp(s->node->op_type, "Conv")) return false;
  const ot *x = s->in[0], *w = s->in[1];
  if (x->dtype != CINFER_TYPE_FP32 || (x->ndim != 4 && x->ndim != 3)) return false;
  if (!p->is_static[s->in_id[1]] || w->dtype != CINFER_TYPE_FP32) return false;
  if (s->n_in > 2 && s->in[2] && !p->is_static[s->in_id[2]]) return false;
  if (getenv("CINFER_ONNX_FAST_SKIP") && strstr(s->node->name, getenv("CINFER_ONNX_FAST_SKIP"))) return false;
  if (getenv("CINFER_ONNX_FAST_SKIP_DW") && attr_i(s->node, "group", 1) > 1) return false;
  if (getenv("CINFER_ONNX_FAST_SKIP_PW") && attr_i(s->node, "group", 1) == 1) return false;
  return ot_numel(s->out[0]) > 0;
}

bool fast_can_merge(const onnx_plan *p, const plan_step *s) {
  return !p->no_fast && kern_conv_eligible(p, s) && s->in[0]->ndim == 4 && attr_i(s->node, "group", 1) == 1 &&
         !kern_small_k(p, s) && s->sum_id < 0 && !s->pre.n && !s->dw.w &&
         (!s->has_fused || s->fused.act != ACT_PRELU) && s->in[0]->dims[0] == 1;
}

bool fast_is_merge_root(const onnx_plan *p, int v) {
  for (int u = 0; u < p->m->n_values; u++)
    if (u != v && p->root[u] == v && p->alias_off[u] > 0) return true;
  return false;
}

bool kern_small_k(const onnx_plan *p, const plan_step *s) {
  const ot *w = s->in[1];
  return s->in[0]->ndim == 4 && attr_i(s->node, "group", 1) == 1 && !p->layout[s->in_id[0]] &&
         w->dims[1] <= 4 && w->dims[1] * w->dims[2] * w->dims[3] <= 32 && !getenv("CINFER_ONNX_NO_K64");
}
