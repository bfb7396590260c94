/* kern_blocked.c: the "blocked" family: Concat (axis 1), BatchNormalization(+Relu) and
 * Relu on oneDNN's blocked activation layouts (nChw8c, nChw16c), so that conv -> Concat
 * -> BN+Relu -> conv (DenseNet's dense blocks) or conv -> Concat -> Relu -> conv
 * (RetinaFace's SSH modules) run without reordering to plain NCHW and back around every
 * reference operator. can_take: every input the op reads qualifies (blk_reads_blocked);
 * prepare declines when everything is plain and no Concat input can be written in place.
 *
 * Invariants:
 *   - an op is taken only for 4-D float tensors whose channel counts are all multiples of
 *     8, so a blocked output has no padded channels and the same byte size as plain NCHW:
 *     nChw<kern_block()>c when every channel count is a multiple of that block (16 on an
 *     AVX-512 host), else nChw8c;
 *   - each input is read in whatever layout its producer left (plain, nChw8c, nChw16c,
 *     padded or not; any other layout is an internal error naming the node); the output
 *     is blocked when every consumer takes it (plan.c's keep), else plain;
 *   - Concat of one image (dim 0 == 1) whose input has the output's layout and is a
 *     plain intermediate value (produced by one step, not a graph input/output, not
 *     aliased itself) is written in place: blk_prepare roots the input inside the
 *     output's storage at its channel offset (plan->root / alias_off), so its producer
 *     writes straight into the concatenation and the Concat copies nothing for it
 *     (DenseNet: every dense block becomes one buffer that each layer appends to);
 *   - the arithmetic per element is the reference kernel's (ops.c concat_exec: a copy;
 *     ops_nn.c bn_exec: x * a + b with a = scale / sqrtf(var + eps), b = B - mean * a,
 *     then v > 0 ? v : 0), in the same float operations, so results are identical;
 *   - no allocation in blk_run. tests/unit/onnx/test_onnx_kernels.c compares whole
 *     graphs (blocked chains, mixed plain/blocked inputs, batch > 1) with the reference,
 *     test_onnx_families.c walks the family with the others.
 * CINFER_ONNX_NO_BLOCKED_OPS turns the family off, CINFER_ONNX_NO_CONCAT_IN_PLACE the
 * in-place Concat, CINFER_ONNX_PLAIN the blocked outputs. */
#include "backends/onnx/kern_util.h"

enum { BLK_CONCAT, BLK_AFFINE };

typedef struct blk_kernel {
  fast_kernel base;
  int op;
  int n_in;
  int *in_b;            /* per input: 0 plain, 8 nChw8c, 16 nChw16c */
  bool *in_place;       /* per input (Concat): already inside the output, nothing to copy */
  int out_b;            /* 0 plain, 8 nChw8c */
  float *scale, *shift; /* BLK_AFFINE: per channel; NULL for a bare Relu */
  bool relu;
} blk_kernel;

static bool f32_4d_c8(const ot *t) {
  return t && t->dtype == CINFER_TYPE_FP32 && t->ndim == 4 && t->dims[1] % 8 == 0 && ot_numel(t) > 0;
}

static int blk_concat_axis(const plan_step *s) {
  return norm_axis(attr_i(s->node, "axis", s->node->opset < 4 ? 1 : 0), s->in[0] ? s->in[0]->ndim : 0);
}

/* input j of s may be read blocked */
static bool blk_reads_blocked(const onnx_plan *p, const plan_step *s, int j) {
  if (getenv("CINFER_ONNX_NO_BLOCKED_OPS") || j >= s->n_in || !f32_4d_c8(s->out[0]))
    return false;
  const char *t = s->node->op_type;
  if (!strcmp(t, "Concat")) {
    if (blk_concat_axis(s) != 1) return false;
    for (int i = 0; i < s->n_in; i++)
      if (!f32_4d_c8(s->in[i])) return false;
    return true;
  }
  if (j != 0 || !f32_4d_c8(s->in[0]) || s->sum_id >= 0) return false;
  if (!strcmp(t, "Relu")) return !s->has_fused;
  if (!strcmp(t, "BatchNormalization")) {
    if (s->has_fused && s->fused.act != ACT_RELU && s->fused.act != ACT_NONE) return false;
    for (int i = 1; i < 5; i++)
      if (i >= s->n_in || s->in_id[i] < 0 || !p->is_static[s->in_id[i]] || s->in[i]->dtype != CINFER_TYPE_FP32)
        return false;
    return true;
  }
  return false;
}

/* every input the kernel reads (Concat: all; BN and Relu: the data input) qualifies */
static bool blk_can_take(const onnx_plan *p, const plan_step *s, bool keep) {
  (void)keep;
  int n_in = !strcmp(s->node->op_type, "Concat") ? s->n_in : 1;
  for (int j = 0; j < n_in; j++)
    if (!blk_reads_blocked(p, s, j)) return false;
  return true;
}

static void blk_destroy(fast_kernel *fk) {
  blk_kernel *k = (blk_kernel *)fk;
  free(k->in_b);
  free(k->in_place);
  free(k->scale);
  free(k->shift);
  free(k);
}

/* block size of a (4-D) value's layout: 0 plain, 8, 16; -1 unknown */
static int layout_block(const onnx_plan *p, int v) {
  const dnnl_memory_desc_t *l = p->layout[v];
  if (!l) return 0;
  const ot *t = &p->vals[v];
  dnnl_dims_t d = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
  dnnl_memory_desc_t b8, b16;
  if (dnnl_memory_desc_init_by_tag(&b8, 4, d, dnnl_f32, dnnl_aBcd8b) == dnnl_success && dnnl_memory_desc_equal(l, &b8))
    return 8;
  if (dnnl_memory_desc_init_by_tag(&b16, 4, d, dnnl_f32, dnnl_aBcd16b) == dnnl_success && dnnl_memory_desc_equal(l, &b16))
    return 16;
  return -1;
}

/* the storage root of v and v's byte offset in it, following in-place Concat chains
 * (plan.c resolves them for good once every step is prepared) */
static int resolve_root(const onnx_plan *p, int v, size_t *off) {
  size_t o = 0;
  for (int hops = 0; p->root[v] != v && hops < p->m->n_values; hops++) {
    o += p->alias_off[v];
    v = p->root[v];
  }
  *off = o;
  return v;
}

static cinfer_status *blk_prepare(onnx_plan *p, plan_step *s, bool keep, fast_kernel **out) {
  *out = NULL;
  bool concat = !strcmp(s->node->op_type, "Concat");
  int n_in = concat ? s->n_in : 1;
  bool any_blocked = false;
  for (int j = 0; j < n_in; j++) any_blocked |= p->layout[s->in_id[j]] != NULL;
  bool one_image = concat && s->out[0]->dims[0] == 1 && !getenv("CINFER_ONNX_NO_CONCAT_IN_PLACE");
  if (!any_blocked && !keep && !one_image) return NULL; /* plain in, plain out: the reference kernel */
  blk_kernel *k = calloc(1, sizeof *k);
  if (!k || !(k->in_b = calloc((size_t)n_in, sizeof *k->in_b)) || !(k->in_place = calloc((size_t)n_in, sizeof *k->in_place))) {
    if (k) free(k->in_b);
    free(k);
    return kern_oom();
  }
  k->op = concat ? BLK_CONCAT : BLK_AFFINE;
  k->n_in = n_in;
  for (int j = 0; j < n_in; j++)
    if ((k->in_b[j] = layout_block(p, s->in_id[j])) < 0) {
      blk_destroy(&k->base);
      return NODE_ERR(s->node, CINFER_INTERNAL, "input %d has a blocked layout this kernel does not read", j);
    }
  const ot *y = s->out[0];
  int64_t C = y->dims[1];
  if (!concat) {
    k->relu = !strcmp(s->node->op_type, "Relu") || (s->has_fused && s->fused.act == ACT_RELU);
    if (!strcmp(s->node->op_type, "BatchNormalization")) {
      k->scale = malloc(sizeof(float) * (size_t)C);
      k->shift = malloc(sizeof(float) * (size_t)C);
      if (!k->scale || !k->shift) {
        blk_destroy(&k->base);
        return kern_oom();
      }
      float eps = attr_f(s->node, "epsilon", 1e-5f);
      const float *sc = s->in[1]->data, *b = s->in[2]->data, *mu = s->in[3]->data, *var = s->in[4]->data;
      for (int64_t c = 0; c < C; c++) { /* as bn_exec */
        float a = sc[c] / sqrtf(var[c] + eps);
        k->scale[c] = a;
        k->shift[c] = b[c] - mu[c] * a;
      }
    }
  }
  if (keep && !getenv("CINFER_ONNX_PLAIN")) {
    /* the plan's block (kern_block) when every channel count is a multiple of it (no
     * padding, the plain size; Concat's inputs then start on block boundaries), else 8 */
    int B = kern_block();
    for (int j = 0; j < n_in; j++)
      if (s->in[j]->dims[1] % B) B = 8;
    if (C % B) B = 8;
    if (!kern_out_blocked(p, s, C, B)) { /* C % B == 0 */
      blk_destroy(&k->base);
      return kern_oom();
    }
    k->out_b = B;
  }
  bool any_in_place = false;
  if (one_image) {
    const onnx_model *m = p->m;
    int y_id = s->out_id[0];
    /* an earlier Concat whose inputs are a prefix of ours (torchvision's DenseNet: layer
     * k concatenates x0, n1..nk; layer k+1 x0, n1..nk+1) becomes a view of our first
     * bytes: the longest such, with our layout, not aliased itself */
    const plan_step *pre = NULL;
    for (const plan_step *q = p->steps; q < s; q++) {
      if (strcmp(q->node->op_type, "Concat") || q->n_in >= n_in || (pre && q->n_in <= pre->n_in)) continue;
      int u = q->out_id[0];
      bool prefix = p->root[u] == u && !m->values[u].is_output && q->out[0]->dims[0] == 1 &&
                    q->out[0]->ndim == 4 && blk_concat_axis(q) == 1 &&
                    (p->layout[u] != NULL) == (k->out_b != 0) && (!p->layout[u] || layout_block(p, u) == k->out_b);
      for (int i = 0; prefix && i < q->n_in; i++) prefix = q->in_id[i] == s->in_id[i];
      if (prefix) pre = q;
    }
    if (pre) {
      p->root[pre->out_id[0]] = y_id;
      p->alias_off[pre->out_id[0]] = 0;
    }
    size_t off = 0;
    for (int j = 0; j < n_in; j++) {
      int v = s->in_id[j];
      size_t voff;
      bool dup = false;
      for (int i = 0; i < j; i++) dup |= s->in_id[i] == v;
      if (!dup && k->in_b[j] == k->out_b && resolve_root(p, v, &voff) == y_id && voff == off) {
        k->in_place[j] = true; /* already there (an input of the prefix Concat) */
        any_in_place = true;
      } else if (!dup && k->in_b[j] == k->out_b && p->root[v] == v && m->values[v].kind == VAL_NODE &&
                 !fast_is_merge_root(p, v) &&
                 !m->values[v].is_output && !p->is_static[v] && v != y_id) {
        p->root[v] = y_id;
        p->alias_off[v] = off;
        k->in_place[j] = true;
        any_in_place = true;
      }
      off += ot_nbytes(s->in[j]); /* C % 8 == 0: blocked bytes == plain bytes */
    }
  }
  if (!any_blocked && !k->out_b && !any_in_place) { /* nothing blocked or in place after all */
    blk_destroy(&k->base);
    return NULL;
  }
  *out = &k->base;
  return NULL;
}

/* element (n, c, hw) of a [N, C, HW] tensor in layout B (0 plain, else nCx<B>c) */
static inline size_t blk_off(int B, int64_t C, int64_t HW, int64_t n, int64_t c, int64_t hw) {
  if (!B) return (size_t)((n * C + c) * HW + hw);
  int64_t CB = (C + B - 1) / B;
  return (size_t)(((n * CB + c / B) * HW + hw) * B + c % B);
}

/* N runs of len floats (X: len apart, Y: ystride apart), each cut in `pieces` */
typedef struct {
  float *Y;
  const float *X;
  int64_t ystride, len, N, pieces;
} cpy_ctx;

static void cpy_chunk(void *vc, int64_t c, int tid) {
  (void)tid;
  const cpy_ctx *k = vc;
  int64_t n = c / k->pieces, lo, hi;
  opool_range(k->len, k->pieces, c % k->pieces, &lo, &hi);
  memcpy(k->Y + n * k->ystride + lo, k->X + n * k->len + lo, sizeof(float) * (size_t)(hi - lo));
}

typedef struct {
  const float *X, *A, *B;
  float *Y;
  int64_t HW, CB, blk; /* blk: 8 or 16 channels per plane */
  bool relu;
} aff_ctx;

/* one plane (image n, channel block cb; ncb = n * CB + cb) of a blocked layout: blk / 8
 * vectors per pixel, vector q of a pixel holding channels cb * blk + 8q .. + 7 */
static void affine_chunk(void *vc, int64_t ncb, int tid) {
  (void)tid;
  const aff_ctx *k = vc;
  const float *A = k->A, *B = k->B;
  int64_t HW = k->HW, cb = ncb % k->CB, blk = k->blk, nq = blk / 8;
  size_t base = (size_t)(ncb * HW * blk);
  const float *xs = k->X + base;
  float *yd = k->Y + base;
  v8f a[2], b[2];
  for (int64_t q = 0; q < nq; q++) {
    a[q] = A ? *(const v8fu *)(A + cb * blk + 8 * q) : (v8f){0};
    b[q] = B ? *(const v8fu *)(B + cb * blk + 8 * q) : (v8f){0};
  }
  for (int64_t i = 0; i < HW * nq; i++) {
    int64_t q = nq == 2 ? (i & 1) : 0;
    v8f v = *(const v8fu *)(xs + i * 8);
    if (A) v = v * a[q] + b[q];
    if (k->relu) v = v8_relu(v);
    *(v8fu *)(yd + i * 8) = v;
  }
}

static void concat_run(const blk_kernel *k, plan_step *s, int threads) {
  (void)threads;
  const ot *y = s->out[0];
  int64_t N = y->dims[0], Co = y->dims[1], HW = y->dims[2] * y->dims[3];
  float *Y = y->data;
  int ob = k->out_b;
  int64_t off = 0;
  for (int j = 0; j < k->n_in; j++) {
    const ot *x = s->in[j];
    const float *X = x->data;
    int64_t Cj = x->dims[1];
    int ib = k->in_b[j];
    if (k->in_place[j]) {
      off += Cj; /* its producer wrote it into Y */
      continue;
    }
    if (ib == ob && (!ob || (Cj % ob == 0 && off % ob == 0))) {
      /* same layout, channel offsets multiples of the block: one contiguous run per image */
      int64_t len = Cj * HW;
      cpy_ctx cc = {Y + off * HW, X, Co * HW, len, N, opool_chunks(len, (double)len, OPOOL_MIN_ELEMS)};
      opool_par(N * cc.pieces, cpy_chunk, &cc);
    } else {
      for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < Cj; c++)
          for (int64_t i = 0; i < HW; i++) Y[blk_off(ob, Co, HW, n, off + c, i)] = X[blk_off(ib, Cj, HW, n, c, i)];
    }
    off += Cj;
  }
}

static void affine_run(const blk_kernel *k, plan_step *s, int threads) {
  (void)threads;
  const ot *y = s->out[0];
  int64_t N = y->dims[0], C = y->dims[1], HW = y->dims[2] * y->dims[3];
  const float *X = s->in[0]->data, *A = k->scale, *B = k->shift;
  float *Y = y->data;
  int ib = k->in_b[0], ob = k->out_b;
  bool relu = k->relu;
  if ((ib == 8 || ib == 16) && ib == ob && C % ib == 0) {
    /* one chunk per channel-block plane when the op is large enough to split */
    int64_t planes = N * C / ib;
    aff_ctx ac = {X, A, B, Y, HW, C / ib, ib, relu};
    if (opool_chunks(planes, (double)(N * C * HW), OPOOL_MIN_ELEMS) > 1) opool_par(planes, affine_chunk, &ac);
    else for (int64_t i = 0; i < planes; i++) affine_chunk(&ac, i, 0);
    return;
  }
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      float a = A ? A[c] : 1.0f, b = B ? B[c] : 0.0f;
      for (int64_t i = 0; i < HW; i++) {
        float v = X[blk_off(ib, C, HW, n, c, i)];
        if (A) v = v * a + b;
        if (relu) v = v > 0 ? v : 0;
        Y[blk_off(ob, C, HW, n, c, i)] = v;
      }
    }
}

static cinfer_status *blk_run(fast_kernel *fk, plan_step *s, int threads) {
  const blk_kernel *k = (const blk_kernel *)fk;
  if (k->op == BLK_CONCAT) concat_run(k, s, threads);
  else affine_run(k, s, threads);
  return NULL;
}

const kern_family kern_blocked = {
    .name = "blocked", .can_take = blk_can_take, .prepare = blk_prepare, .run = blk_run, .destroy = blk_destroy,
    .reads_blocked = blk_reads_blocked};
