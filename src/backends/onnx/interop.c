/* interop.c: inter-op parallelism (plan.h, docs/design/onnx.md "Inter-op sections"). At 2
 * threads, a range of steps whose dependency graph falls into independent parts (SSR-Net's
 * two streams, RetinaFace's three heads per level) may run as two groups at once, each
 * group on one pool thread with its kernels inline (no operator is split inside a
 * section), in place of splitting every operator of the range over both threads.
 *
 * Sections (interop_plan, at plan build, before the memory plan):
 *   - a step's cost is an estimate in multiply-add units: convolutions and Gemm/MatMul
 *     count their MACs (grouped convs x COST_GROUPED: a depthwise MAC is memory-bound,
 *     ~3x slower than a dense one on this host; Winograd convs / COST_WINO; first-layer
 *     (smallk) convs x OPOOL_COST_SMALLK; a fused tanh/sigmoid plan_step_act_cost), every
 *     other step COST_ELEM per output element;
 *   - from a start step a, steps a, a+1, ... are added while no step joins two parts that
 *     each hold at least a tenth of the range's cost (union-find over "reads a value
 *     produced in the range"); the parts are then dealt to two groups, largest first, to
 *     the lighter group;
 *   - the range becomes a section when the lighter group has at least MIN_GAIN units and
 *     at least half the heavier one's: inter-op then saves about the lighter group's time,
 *     against what splitting each operator would have saved (the heavy group's large
 *     convolutions lose their slices inside a section); else the search starts again one
 *     step later. Sections do not overlap.
 * The memory plan keeps every buffer live during a section whole (memory_plan in plan.c):
 * steps of the two groups then never share bytes, whatever order they run in.
 * A section runs (interop_run) as opool_par(2 chunks) when the current pool has 2+ threads
 * and is not running alone (contention guard); otherwise its steps run one after the other
 * in their original (topological) order. Within a run the steps of each group are claimed
 * one by one and kept in order (run_group), and a thread done with its group helps with
 * the other, so a descheduled thread delays the section by at most one step. Not for models with STRING values (the run's
 * string heap is one per plan) or for more than 2 threads (the other threads would idle
 * while the groups' convolutions lose their slices).
 *
 * On by default at 2 threads since session 19; CINFER_ONNX_INTEROP=0 turns it off. Measured
 * on the Zen 4 guest (alternating rounds of 1 s windows, median per-round ratio on/off, the
 * pool-or-alone chooser on): idle SSR-Net gender 0.95, age 0.94, RetinaFace 0.95,
 * UltraFace 0.93 (batch 1; batch 8 0.94-1.00); with a busy loop on the other core 0.97-1.01
 * (a section runs its steps in order when the chooser runs alone). In session 10, on a host
 * whose second vCPU was mostly taken by other tenants, no gain could be measured, and
 * handing a group to a descheduled worker cost the caller up to one step: now the chooser
 * runs such a host alone. docs/benchmarks-onnx.md, session 19. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/interop.h"
#include "backends/onnx/kern.h"
#include "backends/onnx/opool.h"

#define COST_ELEM 6.0      /* one output element of a memory-bound step, in dense-conv MACs */
#define COST_GROUPED 3.0   /* a grouped (depthwise) conv's MAC */
#define COST_WINO 2.25    /* Winograd F(2x2,3x3) does 16 multiply-adds where the direct conv does 36 */
#define MIN_GAIN 2.0e6     /* the lighter group's cost: ~30 us of dense conv on this host */
#define SIG_SHARE 0.1      /* a part that holds this share of the range's cost is significant */

static double step_cost(const plan_step *s) {
  const char *op = s->node->op_type;
  const ot *y = s->out[0];
  double out = y ? (double)ot_numel(y) : 0;
  if (!strcmp(op, "Conv") && s->n_in > 1 && s->in[1] && s->in[1]->ndim >= 3) {
    const ot *w = s->in[1];
    double k = 1;
    for (int d = 1; d < w->ndim; d++) k *= (double)w->dims[d];
    bool grouped = w->dims[1] != (s->in[0] ? s->in[0]->dims[1] : w->dims[1]);
    const char *kern = s->fast ? fast_kernel_label(s->fast) : "ref";
    double c = out * k * (grouped ? COST_GROUPED : 1.0);
    if (!strcmp(kern, "winograd")) c /= COST_WINO;
    if (!strcmp(kern, "smallk")) c *= OPOOL_COST_SMALLK;
    c += plan_step_act_cost(s);
    if (s->dw.w) c += (double)ot_numel(s->out[0]) * 9 * COST_GROUPED; /* the fused depthwise conv */
    return c;
  }
  if ((!strcmp(op, "Gemm") || !strcmp(op, "MatMul")) && s->n_in > 1 && s->in[0] && s->in[0]->ndim >= 1) {
    const ot *a = s->in[0];
    int64_t t = !strcmp(op, "Gemm") ? attr_i(s->node, "transA", 0) : 0;
    double k = (double)(t ? a->dims[0] : a->dims[a->ndim - 1]);
    return out * k;
  }
  return out * COST_ELEM;
}

static int uf_find(int *par, int x) {
  while (par[x] != x) x = par[x] = par[par[x]];
  return x;
}

typedef struct {
  int root;
  double cost;
} part;

static int cmp_part(const void *a, const void *b) {
  double x = ((const part *)a)->cost, y = ((const part *)b)->cost;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Deals the parts of range [a, b] to 2 groups (largest first, to the lighter); group[s]
 * set for its steps; returns the lighter group's cost, *heavy the other's. */
static double deal(int *par, int a, int b, const double *cost, int *group, part *parts, double *heavy) {
  int np = 0;
  for (int s = a; s <= b; s++) {
    int r = uf_find(par, s);
    int k;
    for (k = 0; k < np && parts[k].root != r; k++) {
    }
    if (k == np) parts[np++] = (part){r, 0};
    parts[k].cost += cost[s];
  }
  qsort(parts, (size_t)np, sizeof *parts, cmp_part);
  double g[2] = {0, 0};
  int *pg = malloc(sizeof(int) * (size_t)(np ? np : 1));
  if (!pg) { *heavy = 0; return 0; }
  for (int k = 0; k < np; k++) {
    int t = g[1] < g[0];
    pg[k] = t;
    g[t] += parts[k].cost;
  }
  for (int s = a; s <= b; s++) {
    int r = uf_find(par, s);
    for (int k = 0; k < np; k++)
      if (parts[k].root == r) { group[s] = pg[k]; break; }
  }
  free(pg);
  *heavy = g[0] > g[1] ? g[0] : g[1];
  return g[0] < g[1] ? g[0] : g[1];
}

cinfer_status *interop_plan(onnx_plan *p) {
  const onnx_model *m = p->m;
  int n = p->n_steps, nv = m->n_values;
  p->n_sec = 0;
  /* CINFER_ONNX_INTEROP: unset, empty or "1" on, "0" off; anything else ("off", "no") is
   * refused rather than read as on */
  const char *on = getenv("CINFER_ONNX_INTEROP");
  if (on && *on && strcmp(on, "0") && strcmp(on, "1"))
    return cinfer_status_new(CINFER_INVALID_ARG, "CINFER_ONNX_INTEROP: '%s' is not 0 or 1", on);
  /* CINFER_ONNX_INTEROP_ORDER (tests): "01" / "10" runs each section's groups one after the
   * other in that order: a memory plan that let the groups share bytes fails one of them */
  const char *ord = getenv("CINFER_ONNX_INTEROP_ORDER");
  if (ord && *ord && strcmp(ord, "01") && strcmp(ord, "10"))
    return cinfer_status_new(CINFER_INVALID_ARG, "CINFER_ONNX_INTEROP_ORDER: '%s' is not 01 or 10", ord);
  int order = !ord || !*ord ? 0 : !strcmp(ord, "01") ? 1 : 2;
  if (p->threads != 2 || n < 2 || (on && !strcmp(on, "0"))) return NULL;
  for (int v = 0; v < nv; v++)
    if (p->vals[v].dtype == CINFER_TYPE_BYTES) return NULL;
  int *prod = malloc(sizeof(int) * (size_t)(nv + 1)), *par = malloc(sizeof(int) * (size_t)n),
      *group = calloc((size_t)n, sizeof(int));
  double *cost = malloc(sizeof(double) * (size_t)n), *pcost = malloc(sizeof(double) * (size_t)n);
  part *parts = malloc(sizeof(part) * (size_t)n);
  plan_sec *sec = malloc(sizeof(plan_sec) * (size_t)(n / 2 + 1));
  if (!prod || !par || !group || !cost || !pcost || !parts || !sec) {
    free(prod); free(par); free(group); free(cost); free(pcost); free(parts); free(sec);
    return cinfer_status_oom("inter-op sections");
  }
  for (int v = 0; v < nv; v++) prod[v] = -1;
  for (int s = 0; s < n; s++) {
    cost[s] = step_cost(&p->steps[s]);
    for (int o = 0; o < p->steps[s].n_out; o++)
      if (p->steps[s].out_id[o] >= 0) prod[p->steps[s].out_id[o]] = s;
  }
  int ns = 0;
  for (int a = 0; a < n - 1;) {
    double total = 0;
    int b;
    for (b = a; b < n; b++) {
      const plan_step *st = &p->steps[b];
      par[b] = b;
      pcost[b] = cost[b];
      bool stop = false;
      for (int j = 0; j <= st->n_in && !stop; j++) {
        int v = j < st->n_in ? st->in_id[j] : st->sum_id;
        int i = v >= 0 ? prod[v] : -1;
        if (i < a || i >= b) continue;
        int ri = uf_find(par, i), rb = uf_find(par, b);
        if (ri == rb) continue;
        /* b joins a second part (it joined one already, rb != b): when both hold a tenth
         * of the range's cost, the range ends before b */
        double lim = SIG_SHARE * (total + cost[b]);
        if (rb != b && pcost[ri] >= lim && pcost[rb] >= lim) { stop = true; break; }
        par[rb] = ri;
        pcost[ri] += pcost[rb];
      }
      if (stop) break;
      total += cost[b];
    }
    int last = b - 1;
    double heavy = 0, light = last > a ? deal(par, a, last, cost, group, parts, &heavy) : 0;
    if (getenv("CINFER_ONNX_INTEROP_DEBUG"))
      fprintf(stderr, "interop: range %d-%d (%s..%s) light %.3g heavy %.3g\n", a, last, p->steps[a].node->name,
              p->steps[last].node->name, light, heavy);
    if (light >= MIN_GAIN && light >= 0.5 * heavy) {
      sec[ns++] = (plan_sec){a, last, .order = order};
      a = last + 1;
    } else {
      a++;
    }
  }
  for (int s = 0; s < n; s++) p->steps[s].group = -1;
  bool oom = false;
  for (int k = 0; k < ns; k++) {
    plan_sec *q = &sec[k];
    q->list = malloc(sizeof(int) * (size_t)(q->last - q->first + 1));
    if (!q->list) { oom = true; continue; }
    int w = 0;
    for (int g = 0; g < 2; g++) {
      for (int s = q->first; s <= q->last; s++)
        if (group[s] == g) {
          p->steps[s].group = g;
          q->list[w++] = s;
        }
      if (g == 0) q->n0 = w;
    }
  }
  free(prod); free(par); free(group); free(cost); free(pcost); free(parts);
  if (oom || !ns) {
    for (int k = 0; k < ns; k++) free(sec[k].list);
    free(sec);
    for (int s = 0; s < n; s++) p->steps[s].group = -1;
    return oom ? cinfer_status_oom("inter-op sections") : NULL;
  }
  p->sec = sec;
  p->n_sec = ns;
  return NULL;
}

/* One section's run. Each group's steps are claimed one at a time from its counter
 * (next[g]); a claimed step first waits until every earlier step of its group is done
 * (done[g]), so a group's steps still run in order. Chunk g works on group g, then helps
 * with the other one: a thread that is descheduled (or never woke) holds up at most the
 * step it runs, as with a split operator, not the rest of its group. */
typedef struct {
  onnx_plan *p;
  const plan_sec *sec;
  bool profile;
  _Atomic int next[2], done[2];
  _Atomic bool failed;
  cinfer_status *err[2];
} sec_ctx;

static void run_group(sec_ctx *c, int g) {
  const plan_sec *q = c->sec;
  int n = g ? q->last - q->first + 1 - q->n0 : q->n0;
  const int *list = q->list + (g ? q->n0 : 0);
  for (;;) {
    int i = atomic_fetch_add(&c->next[g], 1);
    if (i >= n) return;
    for (int spin = 0; atomic_load_explicit(&c->done[g], memory_order_acquire) != i; spin++) {
      if (spin % 64 == 63) sched_yield(); /* the step before it is still running */
      else __builtin_ia32_pause();
    }
    if (!atomic_load(&c->failed)) {
      cinfer_status *st = plan_run_step(c->p, list[i], c->profile);
      if (st) {
        if (!c->err[g]) c->err[g] = st; /* only the thread holding done[g] == i writes it */
        else cinfer_status_free(st);
        atomic_store(&c->failed, true);
      }
    }
    atomic_store_explicit(&c->done[g], i + 1, memory_order_release);
  }
}

static void sec_chunk(void *vc, int64_t g, int tid) {
  (void)tid;
  sec_ctx *c = vc;
  opool *old = opool_set_current(NULL); /* the section's kernels run inline on this thread */
  run_group(c, (int)g);
  run_group(c, 1 - (int)g);
  opool_set_current(old);
}

cinfer_status *interop_run(onnx_plan *p, const plan_sec *sec, bool profile) {
  if (sec->order) {
    int n = sec->last - sec->first + 1;
    for (int i = 0; i < n; i++) {
      int j = sec->order == 1 ? i : (i + sec->n0) % n; /* group 1's steps first */
      cinfer_status *st = plan_run_step(p, sec->list[j], profile);
      if (st) return st;
    }
    return NULL;
  }
  if (opool_cur_threads() < 2 || opool_cur_solo()) {
    for (int s = sec->first; s <= sec->last; s++) {
      cinfer_status *st = plan_run_step(p, s, profile);
      if (st) return st;
    }
    return NULL;
  }
  sec_ctx c = {.p = p, .sec = sec, .profile = profile};
  opool_par(2, sec_chunk, &c);
  if (c.err[0] && c.err[1]) cinfer_status_free(c.err[1]);
  return c.err[0] ? c.err[0] : c.err[1];
}
