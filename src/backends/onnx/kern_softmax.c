/* kern_softmax.c: the "softmax" family: Softmax over a short (<= 64) innermost axis of a
 * plain float tensor (detection heads: [N, H, W, 2]); opset 13's last axis, or the
 * opset < 13 coerced 2-D form when its trailing dims are the row.
 * Layout: plain in and out. Numerics: per row m = max, e = e^(x - m), y = e / sum(e) (sum
 * in float, in order); the reference (ops_nn.c softmax_exec) works in double and calls exp
 * twice per element; this is within a few ulp of it, as ONNX Runtime's float softmax is.
 * Rows of 2 go 8 at a time through v8_exp (expf for a group with a difference below -87 or
 * a NaN). Invariants: rows are contiguous (innermost axis), so a row never straddles two
 * threads; the kernel holds only the row count and length. CINFER_ONNX_NO_FAST_SOFTMAX
 * turns it off. */
#include "backends/onnx/kern_util.h"

typedef struct {
  fast_kernel base;
  int64_t outer, d; /* outer rows of d */
} softmax_kernel;

static bool softmax_geom(const plan_step *s, int64_t *outer, int64_t *d) {
  if (strcmp(s->node->op_type, "Softmax") || getenv("CINFER_ONNX_NO_FAST_SOFTMAX")) return false;
  const ot *x = s->in[0];
  int r = x->ndim;
  if (x->dtype != CINFER_TYPE_FP32 || r < 1 || ot_numel(x) <= 0) return false;
  int64_t a = attr_i(s->node, "axis", s->node->opset < 13 ? 1 : -1);
  if (a < 0) a += r;
  if (a < 0 || a >= r) return false;
  int64_t D = s->node->opset < 13 ? prod(x->dims, (int)a, r) : x->dims[a];
  if ((s->node->opset >= 13 && a != r - 1) || D > 64) return false; /* innermost, contiguous */
  *d = D;
  *outer = ot_numel(x) / D;
  return true;
}

static bool softmax_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  (void)keep;
  int64_t outer, d;
  return softmax_geom(s, &outer, &d) && !p->layout[s->in_id[0]];
}

static cinfer_status *softmax_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  (void)p, (void)keep;
  softmax_kernel *k = calloc(1, sizeof *k);
  if (!k) return kern_oom();
  softmax_geom(s, &k->outer, &k->d);
  *out = &k->base;
  return NULL;
}

typedef struct {
  const float *X;
  float *Y;
  int64_t D, R, R8, nch8, ncht;
} smx_ctx;

/* chunks 0..nch8-1: groups of 8 rows of 2; then ncht chunks of the other rows */
static void softmax_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const smx_ctx *k = vc;
  const float *X = k->X;
  float *Y = k->Y;
  int64_t D = k->D, lo, hi;
  if (c < k->nch8) {
    opool_range(k->R8 / 8, k->nch8, c, &lo, &hi);
    for (int64_t o = lo * 8; o < hi * 8; o += 8) {
      v8f p0 = *(const v8fu *)(X + o * 2), p1 = *(const v8fu *)(X + o * 2 + 8);
      v8f a = __builtin_shufflevector(p0, p1, 0, 2, 4, 6, 8, 10, 12, 14);
      v8f b = __builtin_shufflevector(p0, p1, 1, 3, 5, 7, 9, 11, 13, 15);
      v8f m = (v8f)(((v8i)b & (v8i)(b > a)) | ((v8i)a & ~(v8i)(b > a))); /* b > a ? b : a */
      v8f da = a - m, db = b - m, ea, eb;
      if (v8_in_exp_range(da) && v8_in_exp_range(db)) {
        ea = v8_exp(da);
        eb = v8_exp(db);
      } else {
        float fa[8], fb[8];
        __builtin_memcpy(fa, &da, sizeof fa);
        __builtin_memcpy(fb, &db, sizeof fb);
        for (int j = 0; j < 8; j++) { fa[j] = expf(fa[j]); fb[j] = expf(fb[j]); }
        __builtin_memcpy(&ea, fa, sizeof fa);
        __builtin_memcpy(&eb, fb, sizeof fb);
      }
      v8f sum = ea + eb;
      ea = ea / sum;
      eb = eb / sum;
      *(v8fu *)(Y + o * 2) = __builtin_shufflevector(ea, eb, 0, 8, 1, 9, 2, 10, 3, 11);
      *(v8fu *)(Y + o * 2 + 8) = __builtin_shufflevector(ea, eb, 4, 12, 5, 13, 6, 14, 7, 15);
    }
    return;
  }
  opool_range(k->R - k->R8, k->ncht, c - k->nch8, &lo, &hi);
  for (int64_t o = k->R8 + lo; o < k->R8 + hi; o++) {
    const float *x = X + o * D;
    float *y = Y + o * D, m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < D; j++) if (x[j] > m) m = x[j];
    for (int64_t j = 0; j < D; j++) sum += y[j] = expf(x[j] - m);
    for (int64_t j = 0; j < D; j++) y[j] /= sum;
  }
}

static cinfer_status *softmax_run(fast_kernel *fk, plan_step *s, int threads) {
  (void)threads;
  const softmax_kernel *k = (const softmax_kernel *)fk;
  int64_t D = k->d, R = k->outer, R8 = D == 2 ? R / 8 * 8 : 0;
  /* an element costs a few copies' time (exp, divide) */
  smx_ctx c = {s->in[0]->data, s->out[0]->data, D, R, R8, 0, 0};
  c.nch8 = R8 ? opool_chunks(R8 / 8, (double)(R8 * D) * 4, OPOOL_MIN_ELEMS) : 0;
  c.ncht = R > R8 ? opool_chunks(R - R8, (double)((R - R8) * D) * 4, OPOOL_MIN_ELEMS) : 0;
  opool_par(c.nch8 + c.ncht, softmax_chunk, &c);
  return NULL;
}

const kern_family kern_softmax = {
    .name = "softmax", .can_take = softmax_can_take, .prepare = softmax_prepare, .run = softmax_run,
    .destroy = kern_free};
