/* plan.h: execution plans (private). A plan is built for one set of input shapes:
 *   vals[v]     concrete shape of every value; data into the arena, a constant, a
 *               plan-time result (owned[]), or the caller's input buffer (set per run).
 *   layout[v]   NULL: plain row-major; else a oneDNN memory descriptor (blocked layout,
 *               only between consecutive oneDNN kernels; never for graph outputs).
 *   steps[]     nodes to run, in order, with fused activation / sum and fast kernels.
 * Memory plan: each runtime buffer (a root value, or a step's temporary) gets an arena
 * offset; two buffers share bytes only when their step intervals do not overlap. A value
 * aliased at an offset (root[v] != v, alias_off[v]) lies inside its root's bytes; the
 * root's interval covers every member's. */
#ifndef CINFER_ONNX_PLAN_H
#define CINFER_ONNX_PLAN_H
#include "backends/onnx/onnx_impl.h"
#include "backends/onnx/opool.h"

typedef struct fast_kernel fast_kernel;

#define STEP_MAX_TEMPS 3
/* Element-wise ops with a constant operand that a small-K convolution's fast kernel applies
 * while it reads its input, in place of their own steps (fuse_pre in plan.c): RetinaFace's
 * (x - 127.5) * (1/128) in front of its first layer. Applied in order, each result rounded
 * to float as the separate ops round it; padded taps stay exact zeros. */
#define STEP_MAX_PRE 4
typedef struct step_pre {
  int n;
  struct {
    char op;          /* '+', '-', '*', '/' */
    bool c_first;     /* c op x (Sub/Div with the constant as first operand) */
    bool per_channel; /* c[channel], else c[0] */
    const float *c;   /* a static value of the plan */
  } op[STEP_MAX_PRE];
} step_pre;

typedef struct plan_step {
  const onnx_node *node;
  ot **in, **out;        /* into plan->vals; NULL for absent optionals */
  int *in_id, *out_id;   /* value ids (-1 absent) */
  int n_in, n_out;
  bool has_fused;
  onnx_fused fused;
  int sum_id;            /* fused Add operand value id, -1 if none */
  const char *fused_names; /* "Conv+Relu" etc. for the profile */
  char fused_buf[64];
  step_pre pre;           /* fused input ops (fast small-K conv only), n == 0 if none */
  /* A 1x1 conv with the following depthwise 3x3 stride-2 conv fused as oneDNN's dw
   * post-op (fuse_dw in plan.c): its weights [C,1,3,3], bias (or NULL), activation, and
   * the 1x1's own output shape (the step's output is the depthwise conv's). */
  struct { const ot *w, *b; act_kind act; int64_t mid[4]; } dw;
  fast_kernel *fast;
  size_t temp_bytes[STEP_MAX_TEMPS];
  void *temp[STEP_MAX_TEMPS];  /* set after memory planning */
  double ns;
  int64_t calls;
  int group;              /* inside an inter-op section: its group (0, 1); else -1 */
  int n_merged;           /* > 1: this conv computes n_merged sibling convs (merge_siblings):
                             out[0] is the plan's tensor of all their channels, out_id[0..]
                             the siblings' outputs, views at their channel offsets */
} plan_step;

/* What a fused tanh or sigmoid adds to a step's cost, in dense-conv multiply-adds
 * (OPOOL_COST_TANH per output element; 0 for any other activation): the split thresholds
 * (smallk, winograd) and interop.c's section costs count it the same way */
static inline double plan_step_act_cost(const plan_step *s) {
  if (!s->has_fused || (s->fused.act != ACT_TANH && s->fused.act != ACT_SIGMOID) || !s->out[0]) return 0;
  return (double)ot_numel(s->out[0]) * OPOOL_COST_TANH;
}

/* steps [first, last] run as two groups at once (interop.c); list: group 0's steps in
 * order, then group 1's (n0 of group 0), owned */
typedef struct plan_sec {
  int first, last;
  int *list, n0;
  int order; /* 0 the groups at once; 1 / 2 (tests, CINFER_ONNX_INTEROP_ORDER=01 / 10): group
                0 then 1 / 1 then 0, on the calling thread */
} plan_sec;

typedef struct onnx_plan {
  const onnx_model *m;
  int n_keys;
  int64_t *key;          /* per input: ndim then dims */
  ot *vals;
  bool *is_static;
  int *root;             /* storage root of each value (aliases) */
  size_t *alias_off;     /* byte offset of a value inside its root's storage (a Concat
                            input written in place into the Concat's output), else 0 */
  void **layout;         /* dnnl_memory_desc_t* or NULL, owned */
  size_t *bytes;         /* storage bytes when not plain (blocked), else 0 */
  void **owned;          /* plan-time computed data */
  ostr_heap *sheap;      /* strings made at plan time (static nodes), freed with the plan */
  ostr_heap *rheap;      /* strings made by a run (Cast to STRING), reset when a run starts */
  int n_owned, cap_owned;
  plan_step *steps;
  int n_steps;
  void *arena;
  size_t arena_bytes;
  int threads;
  bool no_fast;
  plan_sec *sec;         /* inter-op sections, in step order (interop.h) */
  int n_sec;
  opool_mode mode;       /* pool or alone, measured on this plan's runs (session.c) */
  struct onnx_plan *next;
} onnx_plan;

/* runs step s (plan_run's body; interop_run calls it from the pool's threads) */
cinfer_status *plan_run_step(onnx_plan *p, int s, bool profile);
cinfer_status *plan_build(const onnx_model *m, const cinfer_tensor *inputs, const int *map,
                          int threads, bool no_fast, onnx_plan **out);
void plan_destroy(onnx_plan *p);
bool plan_probe_batch(const onnx_model *m);
bool plan_matches(const onnx_plan *p, const cinfer_tensor *inputs, const int *map);
cinfer_status *plan_run(onnx_plan *p, const cinfer_tensor *inputs, const int *map,
                        bool profile);

/* kern.c: the fast kernels, a table of families (kern.h) asked in priority order.
 * The queries are true when some family says so; all are false for a no_fast plan.
 * prepare returns NULL with *k == NULL when no family takes s (the reference kernel runs;
 * an internal error if s has a blocked input). No allocation in fast_run. */
bool fast_can_take_blocked(const onnx_plan *p, const plan_step *s, int input_index);
bool fast_takes_pre(const onnx_plan *p, const plan_step *s); /* runs with s->pre */
bool fast_takes_dw(const onnx_plan *p, const plan_step *s, const plan_step *t); /* s->dw from t */
/* s may be merged with sibling convs that read the same input (merge_siblings in plan.c):
 * an ungrouped 2-D float conv of one image with static weights, for the oneDNN family
 * (not a small-K first layer, whose summation order depends on M), no fused Add, input
 * ops, depthwise conv or PRelu */
bool fast_can_merge(const onnx_plan *p, const plan_step *s);
/* v holds merged siblings' outputs at channel offsets (a Concat must not place it in its
 * own output) */
bool fast_is_merge_root(const onnx_plan *p, int v);
cinfer_status *fast_prepare(onnx_plan *p, plan_step *s, bool keep_blocked_out,
                            fast_kernel **k);
cinfer_status *fast_run(fast_kernel *k, plan_step *s, int threads);
void fast_destroy(fast_kernel *k); /* NULL: nothing */
/* the profile's kernel column: the name of the family that built k */
const char *fast_kernel_label(const fast_kernel *k);
void fast_layout_free(void *layout);

#endif
