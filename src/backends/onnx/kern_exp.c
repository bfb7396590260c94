/* kern_exp.c: the "exp" family: Exp on plain float tensors of any shape.
 * Layout: plain in and out (a blocked input stays with the reference's error path).
 * Numerics: v8_exp where all 8 lanes of a vector lie within +-87 (within 2 ulp of expf),
 * expf itself elsewhere (specials, overflow, subnormal results, the tail), so the result
 * is the reference's (expf) or within 2 ulp of it. CINFER_ONNX_NO_FAST_EXP turns it off.
 * Invariants: no state (the kernel is its family pointer); threads split the elements in
 * runs of a multiple of 8, so every vector sees the same 8 elements at any thread count. */
#include "backends/onnx/kern_util.h"

static bool exp_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  (void)keep;
  return !strcmp(s->node->op_type, "Exp") && s->in[0]->dtype == CINFER_TYPE_FP32 && !p->layout[s->in_id[0]] &&
         !getenv("CINFER_ONNX_NO_FAST_EXP");
}

static cinfer_status *exp_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **k) {
  (void)p, (void)s, (void)keep;
  return (*k = calloc(1, sizeof **k)) ? NULL : kern_oom();
}

/* y = e^x elementwise: v8_exp where all 8 lanes are within its range, expf elsewhere */
static void exp_f32(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f v = *(const v8fu *)(x + i);
    if (v8_in_exp_range(v)) *(v8fu *)(y + i) = v8_exp(v);
    else for (int j = 0; j < 8; j++) y[i + j] = expf(x[i + j]);
  }
  for (; i < n; i++) y[i] = expf(x[i]);
}

typedef struct {
  const float *X;
  float *Y;
  int64_t n, per;
} exp_ctx;

static void exp_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const exp_ctx *e = vc;
  int64_t i0 = c * e->per;
  exp_f32(e->X + i0, e->Y + i0, e->n - i0 < e->per ? e->n - i0 : e->per);
}

static cinfer_status *exp_run(fast_kernel *k, plan_step *s, int threads) {
  (void)k;
  (void)threads;
  int64_t n = ot_numel(s->in[0]);
  int64_t nch = opool_chunks(n / 8, (double)n * 4, OPOOL_MIN_ELEMS); /* ~4 element copies' time each */
  exp_ctx e = {s->in[0]->data, s->out[0]->data, n, ((n + nch - 1) / nch + 7) / 8 * 8};
  if (n > 0) opool_par((n + e.per - 1) / e.per, exp_chunk, &e);
  return NULL;
}

const kern_family kern_exp = {
    .name = "exp", .can_take = exp_can_take, .prepare = exp_prepare, .run = exp_run, .destroy = kern_free};
