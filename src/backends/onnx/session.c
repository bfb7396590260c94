/* session.c: onnx_session (plan cache keyed by input shapes, input validation, outputs,
 * sub-batching, per-operator profile) and onnx_model_describe (`cinfer inspect`). A
 * session is used by one thread at a time; the model it borrows must outlive it.
 *
 * Sub-batching: a batch of a batchable model (rows independent, every input and output
 * carries the batch in dim 0: graph_analyse_batch) may run as consecutive runs over
 * `rows` rows each; each run's outputs are copied to out_buf[i] at the run's first row.
 * out_buf grows (realloc) to the largest batch seen and is reused afterwards, so a
 * steady stream of batches does not allocate.
 *
 * Batch parallelism: with threads T > 1, a batch of N > 1 rows of such a model is split
 * into groups of rows (one row for the vision models; at least two groups per thread),
 * which the pool's threads claim from one counter; each thread runs its groups on its own
 * one-thread worker session (its own plans and arenas) and copies the outputs into
 * out_buf at the group's rows. A thread that is descheduled or slow delays the batch by
 * at most the group it holds (with fixed halves, by half the batch). With one row per
 * group and N not a multiple of T, the workers take the first N - N % T rows and the last
 * N % T run after them on this session's own plan, operators split over the pool
 * (run_rest): a batch of 3 on 2 threads no longer leaves a core idle for its last row.
 * Rows are independent, so this needs no barrier inside the graph: every kernel, the
 * reference ones included, runs at full speed on its own core, where splitting each
 * operator over T threads leaves the serial operators and the per-operator barriers.
 * (RetinaFace at batch 8 on 2 threads: 1.2x faster than one thread with operator
 * splitting, ~2x with workers.) */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/opool.h"
#include "core/clock.h"
#include "core/fpenv.h"

#include "backends/onnx/ops_util.h"
#include "backends/onnx/plan.h"

#define MAX_PLANS 8

struct onnx_session {
  const onnx_model *m;
  onnx_options opt;
  onnx_plan *plans; /* most recently used first */
  int n_plans;
  int *map;         /* model input i -> index in the caller's array */
  onnx_plan *last;
  size_t row_arena; /* arena bytes of a one-row plan (0: not known yet) */
  void **out_buf;   /* per output: gathered sub-batch results (owned) */
  size_t *out_cap;
  onnx_session **workers; /* threads > 1: one-thread sessions for batch parallelism */
  int n_workers;
  cinfer_tensor *wout;    /* [threads][n_outputs]: the workers' outputs of one call */
  cinfer_tensor *wpart;   /* [threads][n_inputs]: the workers' row ranges of one call */
  cinfer_status **werr;   /* [threads] */
  cinfer_tensor *wtmpl;   /* [n_outputs]: row group 0's outputs (name, type, shape) */
  size_t *wrb;            /* [n_outputs]: bytes per row of each output */
  cinfer_tensor *part;    /* [n_inputs]: one run's rows (sub-batching, the one-row plan) */
  /* STRING inputs (strings.c): the caller's tensors with each BYTES one's data replaced
   * by descriptors (sdesc[i], capacity scap[i] elements) into its bytes */
  cinfer_tensor *conv;
  ostr **sdesc;
  size_t *scap;
  bool has_strings;       /* an input or output is STRING: no sub-batches or workers */
  opool *pool;            /* threads > 1: the operators' and the batch workers' threads */
  int force_mode;         /* CINFER_ONNX_THREAD_MODE: -1 measured (opool_mode), else the mode */
  uint64_t builds;        /* plans built by this session (a run that built one is not timed) */
  opool_mode bmode;       /* pool or alone for batches on the workers (times per row) */
};

/* CINFER_ONNX_THREAD_MODE: auto (default: measured), pool, alone */
static cinfer_status *thread_mode_env(int *mode) {
  const char *v = getenv("CINFER_ONNX_THREAD_MODE");
  *mode = -1;
  if (!v || !*v || !strcmp(v, "auto")) return NULL;
  if (!strcmp(v, "pool")) *mode = OPOOL_POOL;
  else if (!strcmp(v, "alone")) *mode = OPOOL_ALONE;
  else
    return cinfer_status_new(CINFER_INVALID_ARG, "CINFER_ONNX_THREAD_MODE: '%s' is not auto, pool or alone", v);
  return NULL;
}

cinfer_status *onnx_session_create(const onnx_model *m, const onnx_options *opt,
                                   onnx_session **out) {
  *out = NULL;
  onnx_session *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom(NULL);
  s->m = m;
  if (opt) s->opt = *opt;
  if (s->opt.threads <= 0) s->opt.threads = 1;
  const char *env_sb = s->opt.sub_batch == 0 ? getenv("CINFER_ONNX_SUB_BATCH") : NULL;
  if (env_sb) {
    char *end;
    errno = 0;
    long v = strtol(env_sb, &end, 10);
    if (end == env_sb || *end || errno || v < INT_MIN || v > INT_MAX) {
      free(s);
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "CINFER_ONNX_SUB_BATCH: '%s' is not an integer (rows per run; -1: whole batch)", env_sb);
    }
    s->opt.sub_batch = (int)v;
  }
  s->map = calloc((size_t)m->n_inputs + 1, sizeof *s->map);
  s->out_buf = calloc((size_t)m->n_outputs + 1, sizeof *s->out_buf);
  s->out_cap = calloc((size_t)m->n_outputs + 1, sizeof *s->out_cap);
  s->part = calloc((size_t)m->n_inputs + 1, sizeof *s->part);
  s->conv = calloc((size_t)m->n_inputs + 1, sizeof *s->conv);
  s->sdesc = calloc((size_t)m->n_inputs + 1, sizeof *s->sdesc);
  s->scap = calloc((size_t)m->n_inputs + 1, sizeof *s->scap);
  if (!s->map || !s->out_buf || !s->out_cap || !s->part || !s->conv || !s->sdesc || !s->scap) {
    free(s->map);
    free(s->out_buf);
    free(s->out_cap);
    free(s->part);
    free(s->conv);
    free(s->sdesc);
    free(s->scap);
    free(s);
    return cinfer_status_oom(NULL);
  }
  if (s->opt.threads > 1) {
    cinfer_status *st = thread_mode_env(&s->force_mode);
    if (!st) st = opool_create(s->opt.threads, &s->pool);
    if (st) {
      onnx_session_destroy(s);
      return st;
    }
  }
  for (int i = 0; i < m->n_inputs; i++) s->has_strings |= m->in_info[i].dtype == CINFER_TYPE_BYTES;
  for (int i = 0; i < m->n_outputs; i++) /* an undeclared output type may turn out STRING */
    s->has_strings |= m->out_info[i].dtype == CINFER_TYPE_BYTES || m->out_info[i].dtype == CINFER_TYPE_INVALID;
  *out = s;
  return NULL;
}

void onnx_session_destroy(onnx_session *s) {
  if (!s) return;
  opool_destroy(s->pool);
  for (int w = 0; w < s->n_workers; w++) onnx_session_destroy(s->workers[w]);
  free(s->workers);
  free(s->wout);
  free(s->wpart);
  free(s->werr);
  free(s->wtmpl);
  free(s->wrb);
  while (s->plans) {
    onnx_plan *n = s->plans->next;
    plan_destroy(s->plans);
    s->plans = n;
  }
  for (int i = 0; i < s->m->n_outputs; i++) free(s->out_buf[i]);
  free(s->out_buf);
  free(s->out_cap);
  free(s->map);
  free(s->part);
  for (int i = 0; i < s->m->n_inputs; i++) free(s->sdesc[i]);
  free(s->sdesc);
  free(s->scap);
  free(s->conv);
  free(s);
}

static cinfer_status *check_inputs(onnx_session *s, const cinfer_tensor *in, int n) {
  const onnx_model *m = s->m;
  if (n != m->n_inputs)
    return cinfer_status_new(CINFER_INVALID_ARG, "model takes %d inputs, got %d", m->n_inputs, n);
  for (int i = 0; i < m->n_inputs; i++) {
    const onnx_io_info *info = &m->in_info[i];
    int k = -1;
    for (int j = 0; j < n; j++)
      if (in[j].name && !strcmp(in[j].name, info->name)) k = j;
    if (k < 0) {
      bool named = false;
      for (int j = 0; j < n; j++) named |= in[j].name && *in[j].name;
      if (named) return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is missing", info->name);
      k = i; /* unnamed: by position */
    }
    const cinfer_tensor *t = &in[k];
    if (t->dtype != info->dtype)
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': type %s, model expects %s",
                               info->name, cinfer_dtype_name(t->dtype), cinfer_dtype_name(info->dtype));
    if (t->ndim < 0 || t->ndim > CINFER_MAX_DIMS || (info->ndim >= 0 && t->ndim != info->ndim))
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': rank %d, model expects %d",
                               info->name, t->ndim, info->ndim);
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] < 0)
        return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': negative dim", info->name);
      bool batch_ok = d == 0 && m->batchable;
      if (info->ndim >= 0 && info->shape[d] >= 0 && info->shape[d] != t->shape[d] && !batch_ok)
        return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': dim %d is %lld, model expects %lld",
                                 info->name, d, (long long)t->shape[d], (long long)info->shape[d]);
    }
    int64_t el = cinfer_shape_elements(t->shape, t->ndim);
    if (t->dtype == CINFER_TYPE_BYTES) {
      if (el < 0 || el > ONNX_MAX_TENSOR_BYTES / (int64_t)sizeof(ostr) || (t->byte_size && !t->data))
        return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': shape too large", info->name);
      if ((size_t)el > s->scap[i]) {
        ostr *d = realloc(s->sdesc[i], sizeof *d * (size_t)el);
        if (!d) return cinfer_status_oom(info->name);
        s->sdesc[i] = d;
        s->scap[i] = (size_t)el;
      }
      char what[300];
      snprintf(what, sizeof what, "input '%s'", info->name);
      cinfer_status *st = ostr_parse(t->data, t->byte_size, el, s->sdesc[i], what);
      if (st) return st;
    } else if (el < 0 || el > ONNX_MAX_TENSOR_BYTES || (size_t)el * cinfer_dtype_size(t->dtype) != t->byte_size || (el && !t->data))
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': %zu bytes do not match its shape",
                               info->name, t->byte_size);
    s->map[i] = k;
  }
  return NULL;
}

/* the plan for these input shapes: cached (moved to the front) or built */
static cinfer_status *get_plan(onnx_session *s, const cinfer_tensor *inputs, onnx_plan **out) {
  onnx_plan *p = NULL, *prev = NULL;
  cinfer_status *st;
  for (onnx_plan *q = s->plans; q; prev = q, q = q->next)
    if (plan_matches(q, inputs, s->map)) {
      p = q;
      if (prev) { prev->next = q->next; q->next = s->plans; s->plans = q; }
      break;
    }
  if (!p) {
    if ((st = plan_build(s->m, inputs, s->map, s->opt.threads, s->opt.no_fast, &p))) return st;
    s->builds++;
    p->next = s->plans;
    s->plans = p;
    if (++s->n_plans > MAX_PLANS) {
      onnx_plan *q = s->plans;
      while (q->next && q->next->next) q = q->next;
      plan_destroy(q->next);
      q->next = NULL;
      s->n_plans--;
    }
  }
  *out = p;
  return NULL;
}

static void set_output(onnx_session *s, int i, const ot *o, void *data, int64_t rows, size_t bytes,
                       cinfer_tensor *t) {
  memset(t, 0, sizeof *t);
  t->name = s->m->values[s->m->outputs[i]].name;
  t->dtype = o->dtype;
  t->ndim = o->ndim;
  memcpy(t->shape, o->dims, sizeof(int64_t) * (size_t)o->ndim);
  if (rows >= 0) t->shape[0] = rows;
  t->data = data;
  t->byte_size = bytes;
}

/* The batch N > 1 of this call when its rows may run separately (the model is batchable,
 * sub-batching is not turned off, every input has dim 0 = N); else 0. */
static int64_t split_rows(const onnx_session *s, const cinfer_tensor *inputs) {
  const onnx_model *m = s->m;
  if (!m->batchable || s->opt.sub_batch < 0 || m->n_inputs < 1 || m->n_outputs < 1) return 0;
  int64_t N = -1;
  for (int i = 0; i < m->n_inputs; i++) {
    const cinfer_tensor *t = &inputs[s->map[i]];
    if (m->key_input[i] || t->ndim < 1 || (N >= 0 && t->shape[0] != N)) return 0;
    N = t->shape[0];
  }
  return N > 1 ? N : 0;
}

/* part[] = rows [r0, r0 + b) of the N-row inputs */
static void slice_inputs(const onnx_session *s, const cinfer_tensor *inputs, int64_t N, int64_t r0, int64_t b,
                         cinfer_tensor *part) {
  for (int i = 0; i < s->m->n_inputs; i++) {
    const cinfer_tensor *t = &inputs[s->map[i]];
    size_t rb = t->byte_size / (size_t)N;
    part[s->map[i]] = *t;
    part[s->map[i]].shape[0] = b;
    part[s->map[i]].byte_size = rb * (size_t)b;
    part[s->map[i]].data = (const char *)t->data + rb * (size_t)r0;
  }
}

/* out_buf[i] holds at least `total` bytes */
static cinfer_status *out_reserve(onnx_session *s, int i, size_t total) {
  if (total <= s->out_cap[i]) return NULL;
  void *nbuf = realloc(s->out_buf[i], total);
  if (!nbuf) return cinfer_status_oom(NULL);
  s->out_buf[i] = nbuf;
  s->out_cap[i] = total;
  return NULL;
}

static cinfer_status *undeclared_string(const onnx_session *s, int i) {
  return cinfer_status_new(CINFER_INVALID_ARG, "output '%s' is STRING, but the model declares it %s",
                           s->m->values[s->m->outputs[i]].name, cinfer_dtype_name(s->m->out_info[i].dtype));
}

/* plans built by s and its batch workers */
static uint64_t builds_of(const onnx_session *s) {
  uint64_t b = s->builds;
  for (int w = 0; w < s->n_workers; w++) b += s->workers[w]->builds;
  return b;
}

/* One timed inference on the pool (see opool_mode in opool.h): the mode chosen by mc (or
 * CINFER_ONNX_THREAD_MODE), the pool set alone or held (its workers spin between this
 * inference's operators, and sleep after it), the start time and plans built so far. */
typedef struct {
  opool_mode *mc;
  int mode;
  int64_t t0;
  uint64_t builds;
} mode_run;

static void mode_begin(onnx_session *s, opool_mode *mc, uint64_t builds, mode_run *r) {
  r->mc = mc;
  r->mode = s->force_mode >= 0 ? s->force_mode : opool_mode_pick(mc);
  opool_set_alone(s->pool, r->mode == OPOOL_ALONE);
  opool_hold(s->pool, true);
  r->builds = builds;
  r->t0 = (int64_t)clock_now_ns();
}

/* the run's time (divided by rows: batches of any size share one record) unless it failed
 * or a plan was built since `builds` was taken (before the plan lookup: the first run of a
 * plan touches its arena for the first time) */
static void mode_end(onnx_session *s, mode_run *r, bool ok, int64_t rows) {
  int64_t ns = (int64_t)clock_now_ns() - r->t0;
  opool_hold(s->pool, false);
  opool_set_alone(s->pool, false);
  if (ok && s->pool && s->force_mode < 0 && builds_of(s) == r->builds)
    opool_mode_record(r->mc, r->mode, ns / (rows > 0 ? rows : 1));
}

typedef struct {
  onnx_session *s;
  const cinfer_tensor *inputs;
  int64_t N, n_rows, n_chunks; /* the batch's rows; the first n_rows go to the workers */
} wrun_ctx;

/* Row group c of the batch, on whichever pool thread claims it (tid): that thread's
 * one-thread worker session runs it (its kernels inline: it has no pool) and copies its
 * outputs straight into out_buf at the group's first row. Groups are claimed from the
 * pool's counter, so a thread that is descheduled holds up at most the group it runs. */
static void wrun_chunk(void *vc, int64_t c, int tid) {
  const wrun_ctx *x = vc;
  onnx_session *s = x->s;
  const onnx_model *m = s->m;
  int no = m->n_outputs, ni = m->n_inputs;
  int64_t r0, r1;
  opool_range(x->n_rows, x->n_chunks, c, &r0, &r1);
  int64_t b = r1 - r0;
  cinfer_tensor *part = s->wpart + (size_t)tid * (size_t)ni, *out = s->wout + (size_t)tid * (size_t)no;
  slice_inputs(s, x->inputs, x->N, r0, b, part);
  cinfer_status *st = onnx_session_run(s->workers[tid], part, ni, out);
  for (int i = 0; i < no && !st; i++) {
    const cinfer_tensor *o = &out[i];
    if (o->ndim < 1 || o->shape[0] != b || o->byte_size != s->wrb[i] * (size_t)b)
      st = cinfer_status_new(CINFER_INTERNAL, "output '%s' does not carry the batch in dim 0", m->values[m->outputs[i]].name);
    else if (o->byte_size)
      memcpy((char *)s->out_buf[i] + s->wrb[i] * (size_t)r0, o->data, o->byte_size);
    if (!st && c == 0) s->wtmpl[i] = *o;
  }
  if (st && !s->werr[tid]) s->werr[tid] = st;
  else if (st) cinfer_status_free(st);
}

/* Output row bytes (rb[i]) and the rows a one-thread run takes at once (*r1: as many as
 * keep its arena within 1 MiB, the sub-batching rule), from worker w's one-row plan. */
static cinfer_status *worker_rows(onnx_session *s, onnx_session *w, const cinfer_tensor *inputs, int64_t N,
                                  size_t *rb, int64_t *r1) {
  const onnx_model *m = s->m;
  cinfer_tensor *one = s->part;
  slice_inputs(s, inputs, N, 0, 1, one);
  cinfer_status *st = check_inputs(w, one, m->n_inputs);
  onnx_plan *p;
  if (st || (st = get_plan(w, one, &p))) return st;
  for (int i = 0; i < m->n_outputs; i++) {
    const ot *o = &p->vals[m->outputs[i]];
    if (o->dtype == CINFER_TYPE_BYTES) return undeclared_string(s, i);
    if (o->ndim < 1 || o->dims[0] != 1)
      return cinfer_status_new(CINFER_INTERNAL, "output '%s' does not carry the batch in dim 0", m->values[m->outputs[i]].name);
    rb[i] = ot_nbytes(o);
  }
  size_t arena = p->arena_bytes ? p->arena_bytes : 1;
  *r1 = (int64_t)(((size_t)1 << 20) / arena);
  if (*r1 < 1) *r1 = 1;
  return NULL;
}

/* Rows r0..N-1 of a batch as one run of this session's own plan (operators split over its
 * pool, or alone, as that plan's measured mode says), copied into out_buf after the
 * workers' rows. */
static cinfer_status *run_rest(onnx_session *s, const cinfer_tensor *inputs, int64_t N, int64_t r0) {
  const onnx_model *m = s->m;
  int64_t b = N - r0;
  cinfer_tensor *part = s->part;
  slice_inputs(s, inputs, N, r0, b, part);
  uint64_t b0 = builds_of(s);
  onnx_plan *p;
  cinfer_status *st = get_plan(s, part, &p);
  if (st) return st;
  mode_run mr;
  mode_begin(s, &p->mode, b0, &mr);
  st = plan_run(p, part, s->map, s->opt.profile);
  mode_end(s, &mr, !st, 1);
  for (int i = 0; i < m->n_outputs && !st; i++) {
    const ot *o = &p->vals[m->outputs[i]];
    size_t nb = ot_nbytes(o);
    if (o->dtype == CINFER_TYPE_BYTES) return undeclared_string(s, i);
    if (o->ndim < 1 || o->dims[0] != b || nb != s->wrb[i] * (size_t)b)
      return cinfer_status_new(CINFER_INTERNAL, "output '%s' does not carry the batch in dim 0",
                               m->values[m->outputs[i]].name);
    if (nb) memcpy((char *)s->out_buf[i] + s->wrb[i] * (size_t)r0, o->data, nb);
  }
  return st;
}

/* Batch parallelism (see the top of this file): rows in groups claimed by the pool's
 * threads, each running the group on its own one-thread worker session. */
static cinfer_status *run_workers(onnx_session *s, const cinfer_tensor *inputs, int64_t N, cinfer_tensor *outputs) {
  const onnx_model *m = s->m;
  int T = s->opt.threads;
  int no = m->n_outputs, ni = m->n_inputs;
  if (!s->workers) { /* once per session, one worker per pool thread: batches do not allocate */
    s->workers = calloc((size_t)T, sizeof *s->workers);
    s->wout = calloc((size_t)T * (size_t)no, sizeof *s->wout);
    s->wpart = calloc((size_t)T * (size_t)ni, sizeof *s->wpart);
    s->werr = calloc((size_t)T, sizeof *s->werr);
    s->wtmpl = calloc((size_t)no, sizeof *s->wtmpl);
    s->wrb = calloc((size_t)no, sizeof *s->wrb);
    if (!s->workers || !s->wout || !s->wpart || !s->werr || !s->wtmpl || !s->wrb) {
      free(s->workers);
      free(s->wout);
      free(s->wpart);
      free(s->werr);
      free(s->wtmpl);
      free(s->wrb);
      s->workers = NULL;
      s->wout = s->wpart = s->wtmpl = NULL;
      s->werr = NULL;
      s->wrb = NULL;
      return cinfer_status_oom(NULL);
    }
  }
  onnx_options one = s->opt;
  one.threads = 1;
  for (; s->n_workers < T; s->n_workers++) {
    cinfer_status *st = onnx_session_create(m, &one, &s->workers[s->n_workers]);
    if (st) return st;
  }
  int64_t r1 = 1;
  uint64_t b0 = builds_of(s);
  cinfer_status *st = worker_rows(s, s->workers[0], inputs, N, s->wrb, &r1);
  if (st) return st;
  for (int i = 0; i < no; i++) {
    size_t total;
    if (__builtin_mul_overflow(s->wrb[i], (size_t)N, &total))
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "output '%s' is too large", m->values[m->outputs[i]].name);
    if ((st = out_reserve(s, i, total ? total : 1))) return st;
  }
  /* groups of g rows, g <= what one run takes at once, and at least two groups per
   * thread so that the threads' shares even out (vision models: one row per group) */
  int64_t g = N / (2 * (int64_t)T);
  if (g > r1) g = r1;
  if (g < 1) g = 1;
  /* One row per group and N not a multiple of T: the last N % T rows would run on some
   * threads while the others idle (a batch of 3 on 2 threads: a whole row on one core).
   * The workers take the first N - N % T rows; the rest run after them as one batch on
   * this session, its operators split over the pool. */
  int64_t rem = g == 1 && N > T ? N % T : 0, Nw = N - rem;
  int64_t n_chunks = (Nw + g - 1) / g;
  memset(s->werr, 0, sizeof *s->werr * (size_t)T);
  s->last = NULL; /* the profile is the workers' */
  wrun_ctx wc = {s, inputs, N, Nw, n_chunks};
  mode_run mr;
  mode_begin(s, &s->bmode, b0, &mr);
  opool_for(s->pool, n_chunks, wrun_chunk, &wc);
  bool failed = false;
  for (int w = 0; w < T; w++) failed |= s->werr[w] != NULL;
  mode_end(s, &mr, !failed, Nw);
  for (int w = 0; w < T; w++) {
    if (s->werr[w] && !st) st = s->werr[w];
    else if (s->werr[w]) cinfer_status_free(s->werr[w]);
  }
  if (st) return st;
  if (rem && (st = run_rest(s, inputs, N, Nw))) return st;
  for (int i = 0; i < no; i++) {
    outputs[i] = s->wtmpl[i];
    outputs[i].shape[0] = N;
    outputs[i].data = s->out_buf[i];
    outputs[i].byte_size = s->wrb[i] * (size_t)N;
  }
  return NULL;
}

/* Rows per graph run for this call: n (everything at once) unless the model is
 * batchable, every input has the same dim 0 = n > 1, and the automatic or configured
 * sub-batch is smaller. May build the one-row plan to learn its arena size. */
static cinfer_status *rows_per_run(onnx_session *s, const cinfer_tensor *inputs, int64_t *n, int64_t *rows) {
  const onnx_model *m = s->m;
  *n = *rows = 0;
  int64_t N = split_rows(s, inputs);
  if (!N) return NULL;
  int64_t r = s->opt.sub_batch;
  if (r == 0) {
    if (!s->row_arena) {
      cinfer_tensor *one = s->part;
      for (int i = 0; i < m->n_inputs; i++) {
        one[s->map[i]] = inputs[s->map[i]];
        one[s->map[i]].shape[0] = 1;
        one[s->map[i]].byte_size = inputs[s->map[i]].byte_size / (size_t)N;
      }
      onnx_plan *p;
      cinfer_status *st = get_plan(s, one, &p);
      if (st) return st;
      s->row_arena = p->arena_bytes ? p->arena_bytes : 1;
    }
    size_t budget = (size_t)s->opt.threads << 20;
    r = (int64_t)(budget / s->row_arena);
    if (r < s->opt.threads) r = s->opt.threads; /* a row per thread: convs split the batch */
  }
  if (r >= N) return NULL;
  *n = N;
  *rows = r;
  return NULL;
}

/* A STRING output: its descriptors written in the length-prefixed layout to out_buf[i]. */
static cinfer_status *pack_output(onnx_session *s, int i, const ot *o, cinfer_tensor *t) {
  size_t nb;
  char what[300];
  snprintf(what, sizeof what, "output '%s'", s->m->values[s->m->outputs[i]].name);
  cinfer_status *st = ostr_packed_size(o->data, ot_numel(o), &nb, what);
  if (!st) st = out_reserve(s, i, nb ? nb : 1);
  if (st) return st;
  ostr_pack(o->data, ot_numel(o), s->out_buf[i]);
  set_output(s, i, o, s->out_buf[i], -1, nb, t);
  return NULL;
}

static cinfer_status *session_run(onnx_session *s, const cinfer_tensor *inputs, int n_inputs,
                                  cinfer_tensor *outputs) {
  cinfer_status *st = check_inputs(s, inputs, n_inputs);
  if (st) return st;
  const onnx_model *m = s->m;
  onnx_plan *p;
  int64_t N, rows;
  uint64_t b0 = builds_of(s);
  mode_run mr;
  if (s->has_strings) { /* the plan reads descriptors; one run for the whole batch */
    memcpy(s->conv, inputs, sizeof *inputs * (size_t)n_inputs);
    for (int i = 0; i < m->n_inputs; i++)
      if (m->in_info[i].dtype == CINFER_TYPE_BYTES) {
        cinfer_tensor *t = &s->conv[s->map[i]];
        t->data = s->sdesc[i];
        t->byte_size = (size_t)cinfer_shape_elements(t->shape, t->ndim) * sizeof(ostr);
      }
    if ((st = get_plan(s, s->conv, &p))) return st;
    s->last = p;
    mode_begin(s, &p->mode, b0, &mr);
    st = plan_run(p, s->conv, s->map, s->opt.profile);
    mode_end(s, &mr, !st, 1);
    if (st) return st;
    for (int i = 0; i < m->n_outputs; i++) {
      const ot *o = &p->vals[m->outputs[i]];
      if (o->dtype == CINFER_TYPE_BYTES) {
        cinfer_dtype decl = m->out_info[i].dtype;
        if (decl != CINFER_TYPE_BYTES && decl != CINFER_TYPE_INVALID) return undeclared_string(s, i);
        if ((st = pack_output(s, i, o, &outputs[i]))) return st;
      } else {
        set_output(s, i, o, o->data, -1, ot_nbytes(o), &outputs[i]);
      }
    }
    return NULL;
  }
  if (s->opt.threads > 1 && (N = split_rows(s, inputs))) return run_workers(s, inputs, N, outputs);
  if ((st = rows_per_run(s, inputs, &N, &rows))) return st;
  if (!rows) {
    if ((st = get_plan(s, inputs, &p))) return st;
    s->last = p;
    mode_begin(s, &p->mode, b0, &mr);
    st = plan_run(p, inputs, s->map, s->opt.profile);
    mode_end(s, &mr, !st, 1);
    if (st) return st;
    for (int i = 0; i < m->n_outputs; i++) {
      const ot *o = &p->vals[m->outputs[i]];
      if (o->dtype == CINFER_TYPE_BYTES) return undeclared_string(s, i);
      set_output(s, i, o, o->data, -1, ot_nbytes(o), &outputs[i]);
    }
    return NULL;
  }
  cinfer_tensor *part = s->part; /* one thread (with more, batches run on the workers) */
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    int64_t b = N - r0 < rows ? N - r0 : rows;
    slice_inputs(s, inputs, N, r0, b, part);
    if ((st = get_plan(s, part, &p))) return st;
    s->last = p;
    if ((st = plan_run(p, part, s->map, s->opt.profile))) return st;
    for (int i = 0; i < m->n_outputs; i++) {
      const ot *o = &p->vals[m->outputs[i]];
      size_t nb = ot_nbytes(o), total;
      if (o->dtype == CINFER_TYPE_BYTES) return undeclared_string(s, i);
      if (o->ndim < 1 || o->dims[0] != b)
        return cinfer_status_new(CINFER_INTERNAL, "output '%s' does not carry the batch in dim 0",
                                 m->values[m->outputs[i]].name);
      size_t rb = nb / (size_t)b;
      if (__builtin_mul_overflow(rb, (size_t)N, &total))
        return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "output '%s' is too large", m->values[m->outputs[i]].name);
      if ((st = out_reserve(s, i, total))) return st;
      if (nb) memcpy((char *)s->out_buf[i] + rb * (size_t)r0, o->data, nb);
      if (r0 + b == N) set_output(s, i, o, s->out_buf[i], N, total, &outputs[i]);
    }
  }
  return NULL;
}

int onnx_session_output_count(const onnx_session *s) { return s->m->n_outputs; }

void onnx_session_profile_reset(onnx_session *s) {
  for (int w = 0; w < s->n_workers; w++) onnx_session_profile_reset(s->workers[w]);
  for (onnx_plan *p = s->plans; p; p = p->next)
    for (int i = 0; i < p->n_steps; i++) { p->steps[i].ns = 0; p->steps[i].calls = 0; }
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

void onnx_session_profile_print(const onnx_session *s, FILE *f) {
  const onnx_plan *p = s->last;
  if (s->pool) {
    opool_stats ps;
    opool_get_stats(s->pool, &ps);
    fprintf(f, "thread pool: %d threads; %llu of %llu split operators handed to workers, %llu of their %llu chunks "
               "run by workers, %llu worker sleeps, %llu switches to running alone (contention guard)\n",
            opool_threads(s->pool), (unsigned long long)ps.parallel_runs, (unsigned long long)ps.runs,
            (unsigned long long)ps.worker_chunks, (unsigned long long)ps.chunks, (unsigned long long)ps.sleeps,
            (unsigned long long)ps.solo_events);
    const opool_mode *mc = p ? &p->mode : &s->bmode; /* the last plan's, or the batches' */
    fprintf(f, "pool or alone (%s): %llu runs with the pool (median %.3f ms%s), %llu alone (median %.3f ms), %llu probes\n",
            s->force_mode >= 0 ? "CINFER_ONNX_THREAD_MODE" : p ? "measured on this plan" : "measured on batches",
            (unsigned long long)mc->runs[OPOOL_POOL], (double)opool_mode_estimate(mc, OPOOL_POOL) / 1e6,
            p ? "" : " per row", (unsigned long long)mc->runs[OPOOL_ALONE],
            (double)opool_mode_estimate(mc, OPOOL_ALONE) / 1e6, (unsigned long long)mc->probes);
  }
  if (!p && s->n_workers) { /* batches ran on the workers: the first one's rows */
    fprintf(f, "profile of worker 1 of %d (batch rows split over one-thread workers):\n", s->n_workers);
    onnx_session_profile_print(s->workers[0], f);
    return;
  }
  if (!p) return;
  typedef struct { double ns; int64_t calls; int count; char name[64]; const char *kern; } agg;
  agg *a = calloc((size_t)p->n_steps + 1, sizeof *a);
  if (!a) return;
  int na = 0;
  double total = 0;
  int64_t runs = 0;
  for (int i = 0; i < p->n_steps; i++) {
    const plan_step *ps = &p->steps[i];
    const char *nm = ps->fused_names ? ps->fused_names : ps->node->op_type;
    const char *kern = ps->fast ? fast_kernel_label(ps->fast) : "ref";
    int k;
    for (k = 0; k < na; k++) if (!strcmp(a[k].name, nm) && !strcmp(a[k].kern, kern)) break;
    if (k == na) { snprintf(a[na].name, sizeof a[na].name, "%s", nm); a[na].kern = kern; na++; }
    a[k].ns += ps->ns;
    a[k].count++;
    total += ps->ns;
    if (ps->calls > runs) runs = ps->calls;
  }
  if (!runs) runs = 1;
  /* sort by time */
  for (int i = 0; i < na; i++)
    for (int j = i + 1; j < na; j++)
      if (a[j].ns > a[i].ns) { agg t = a[i]; a[i] = a[j]; a[j] = t; }
  fprintf(f, "profile: %d steps, %lld runs, %.3f ms per run (arena %.1f MiB)\n", p->n_steps,
          (long long)runs, total / 1e6 / (double)runs, (double)p->arena_bytes / 1048576.0);
  for (int k = 0; k < p->n_sec; k++) { /* inter-op sections (interop.c) */
    const plan_sec *q = &p->sec[k];
    double g[2] = {0, 0};
    int c[2] = {0, 0};
    for (int i = q->first; i <= q->last; i++) {
      int gr = p->steps[i].group == 1;
      g[gr] += p->steps[i].ns;
      c[gr]++;
    }
    fprintf(f, "  inter-op section %d: steps %d-%d (%s .. %s), groups of %d and %d steps, %.3f / %.3f ms/run\n", k + 1,
            q->first, q->last, p->steps[q->first].node->name, p->steps[q->last].node->name, c[0], c[1],
            g[0] / 1e6 / (double)runs, g[1] / 1e6 / (double)runs);
  }
  fprintf(f, "  %-28s %6s %8s %10s %6s\n", "operator", "nodes", "kernel", "ms/run", "share");
  for (int i = 0; i < na; i++)
    fprintf(f, "  %-28s %6d %8s %10.3f %5.1f%%\n", a[i].name, a[i].count, a[i].kern,
            a[i].ns / 1e6 / (double)runs, total > 0 ? 100.0 * a[i].ns / total : 0);
  double *top = malloc(sizeof(double) * (size_t)(p->n_steps + 1));
  if (top) {
    for (int i = 0; i < p->n_steps; i++) top[i] = p->steps[i].ns;
    qsort(top, (size_t)p->n_steps, sizeof(double), cmp_desc);
    bool all = getenv("CINFER_ONNX_PROFILE_ALL") != NULL; /* every node, in graph order */
    double thr = all ? 0 : p->n_steps > 5 ? top[4] : 0;
    int maxshow = all ? p->n_steps : 5;
    fprintf(f, all ? "  nodes:\n" : "  slowest nodes:\n");
    int shown = 0;
    for (int i = 0; i < p->n_steps && shown < maxshow; i++)
      if (p->steps[i].ns >= thr && p->steps[i].ns > 0) {
        char sh[128];
        ot_shape_str(p->steps[i].out[0], sh, sizeof sh);
        fprintf(f, "    %-40s %-22s %-10s out %-20s %8.3f ms\n", p->steps[i].node->name,
                p->steps[i].fused_names ? p->steps[i].fused_names : p->steps[i].node->op_type,
                p->steps[i].fast ? fast_kernel_label(p->steps[i].fast) : "ref", sh,
                p->steps[i].ns / 1e6 / (double)runs);
        shown++;
      }
    free(top);
  }
  free(a);
}

static void print_info(FILE *f, const onnx_io_info *i) {
  fprintf(f, "  %-40s %-6s [", i->name, cinfer_dtype_name(i->dtype));
  for (int d = 0; d < i->ndim; d++) {
    if (d) fprintf(f, ",");
    if (i->shape[d] >= 0) fprintf(f, "%lld", (long long)i->shape[d]);
    else fprintf(f, "%s", i->dim_name[d] ? i->dim_name[d] : "?");
  }
  fprintf(f, "%s\n", i->ndim < 0 ? "?]" : "]");
}

void onnx_model_describe(const onnx_model *m, FILE *f) {
  fprintf(f, "ir_version: %lld   producer: %s\n", (long long)m->ir_version, m->producer);
  fprintf(f, "opsets:");
  for (int i = 0; i < m->n_opsets; i++)
    fprintf(f, " %s:%lld", *m->opsets[i].domain ? m->opsets[i].domain : "ai.onnx", (long long)m->opsets[i].version);
  fprintf(f, "\ninputs (%d):\n", m->n_inputs);
  for (int i = 0; i < m->n_inputs; i++) print_info(f, &m->in_info[i]);
  fprintf(f, "outputs (%d):\n", m->n_outputs);
  for (int i = 0; i < m->n_outputs; i++) print_info(f, &m->out_info[i]);
  int total = 0;
  for (int i = 0; i < m->n_hist; i++) total += m->hist_count[i];
  fprintf(f, "operators (%d nodes in the file):\n", total);
  for (int i = 0; i < m->n_hist; i++) fprintf(f, "  %-24s %d\n", m->hist_name[i], m->hist_count[i]);
  fprintf(f, "parameters: %lld\n", (long long)m->n_params);
  fprintf(f, "compiled: %d nodes after folding %d constant nodes, fusing %d BatchNorm and %d Mul into Conv, "
          "removing %d dead\n", m->n_nodes, m->n_folded, m->n_bn_fused, m->n_mul_fused, m->n_dead);
  fprintf(f, "batchable: %s (%s)\n", m->batchable ? "yes" : "no", m->batch_note);
}

/* The kernels of this call run on the session's pool (none with one thread: inline, also
 * for a batch worker running on its parent's pool thread); around each plan run or batch
 * (mode_begin / mode_end) the pool is either held, its workers spinning between the
 * operators of this call and sleeping after it (opool.h), or set alone, as opool_mode
 * chooses from the measured times. Subnormal floats are flushed to zero on this thread while
 * the kernels run, and the caller's mode is restored after (core/fpenv.h). */
cinfer_status *onnx_session_run(onnx_session *s, const cinfer_tensor *inputs, int n_inputs,
                                cinfer_tensor *outputs) {
  opool *old = opool_set_current(s->pool);
  fpenv_state fp = fpenv_flush_begin(); /* subnormals flushed while the kernels run (fpenv.h) */
  cinfer_status *st = session_run(s, inputs, n_inputs, outputs);
  fpenv_restore(fp);
  opool_set_current(old);
  return st;
}
