/* model.c: Llama weights (views into the GGUF mapping) and the batched forward pass
 * (see model.h). Tensor shapes are checked once in llm_model_create; the forward pass then
 * indexes without checks. It never allocates: all buffers live in llm_scratch. */
#include "backends/llm/model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const llm_gguf_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
  /* gemma3 only: per-head RMSNorm of q and k, norms of the attention and FFN outputs */
  const llm_gguf_tensor *q_norm, *k_norm, *post_attn_norm, *post_ffn_norm;
  bool swa; /* gemma3: a local (sliding-window) layer */
} layer_w;

struct llm_model {
  llm_hparams hp;
  const llm_gguf_tensor *tok_embd, *out_norm, *output;
  layer_w *layers;
};

struct llm_scratch {
  int max_tokens, max_ctx, n_threads;
  float *x, *xb, *xb2, *q, *k, *v, *hb, *hb2, *xo, *rope, *rope_swa;
  void *xq;
  float **att;       /* per thread: max_ctx scores */
  uint16_t **att16;  /* per thread: max_ctx probabilities (fp16) + head_dim q */
  float **att_acc;   /* per thread: 32 lanes x head_dim accumulators */
};

const llm_hparams *llm_model_hparams(const llm_model *m) { return &m->hp; }
const char *llm_model_arch_name(const llm_model *m) { return m->hp.arch == LLM_ARCH_GEMMA3 ? "gemma3" : "llama"; }
bool llm_model_layer_swa(const llm_model *m, int l) { return l >= 0 && l < m->hp.n_layers && m->layers[l].swa; }

/* ggml's GELU (tanh approximation) as its CPU backend computes it for f32 rows
 * (GGML_GELU_FP16): x rounded to fp16 indexes a table of fp16 results; |x| >= 10 bypasses
 * the table. The table is filled once (the first gemma3 model). */
static uint16_t gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;
static void gelu_init(void) {
  for (int i = 0; i < (1 << 16); i++) {
    float x = llm_fp16_to_fp32((uint16_t)i);
    float y = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
    gelu_table[i] = llm_fp32_to_fp16(y);
  }
}
/* g = gelu(g) * u (ggml_vec_geglu_f32) */
static void geglu(int n, float *g, const float *u) {
  for (int i = 0; i < n; i++) {
    float x = g[i];
    if (x <= -10.0f) g[i] = 0.0f;
    else if (x >= 10.0f) g[i] = x * u[i];
    else g[i] = llm_fp16_to_fp32(gelu_table[llm_fp32_to_fp16(x)]) * u[i];
  }
}

void llm_model_destroy(llm_model *m) {
  if (!m) return;
  free(m->layers);
  free(m);
}

static cinfer_status *want_tensor(const llm_gguf *g, const char *name, int64_t ne0, int64_t ne1, bool quant_ok,
                                  const llm_gguf_tensor **out) {
  const llm_gguf_tensor *t = llm_gguf_tensor_find(g, name);
  *out = t;
  if (!t) return cinfer_status_new(CINFER_INVALID_ARG, "model: tensor '%s' missing", name);
  if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "model: tensor '%s' has shape [%lld, %lld], want [%lld, %lld]", name,
                             (long long)t->ne[0], (long long)t->ne[1], (long long)ne0, (long long)ne1);
  if (quant_ok ? !llm_type_supported(t->type) : t->type != LLM_F32)
    return cinfer_status_new(CINFER_UNSUPPORTED, "model: tensor '%s' has unsupported type %s", name,
                             llm_type_name(t->type));
  if (quant_ok && ne0 % llm_type_block(llm_type_vec_dot_type(t->type)))
    return cinfer_status_new(CINFER_INVALID_ARG, "model: tensor '%s' row %lld not a multiple of the block", name,
                             (long long)ne0);
  return NULL;
}

static bool get_u(const llm_gguf *g, const char *arch, const char *key, int *out, int lo, int hi) {
  char k[128];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  uint32_t v;
  if (!llm_gguf_get_u32(g, k, &v) || (int64_t)v < lo || (int64_t)v > hi) return false;
  *out = (int)v;
  return true;
}

cinfer_status *llm_model_create(const llm_gguf *g, llm_model **out) {
  *out = NULL;
  llm_gguf_str arch;
  if (!llm_gguf_get_str(g, "general.architecture", &arch))
    return cinfer_status_new(CINFER_INVALID_ARG, "model: general.architecture missing");
  bool gemma3 = arch.n == 6 && !memcmp(arch.p, "gemma3", 6);
  if (!(arch.n == 5 && !memcmp(arch.p, "llama", 5)) && !gemma3)
    return cinfer_status_new(CINFER_UNSUPPORTED, "model: architecture '%.*s' not supported (llama, gemma3)",
                             (int)(arch.n > 40 ? 40 : arch.n), arch.p);
  llm_model *m = calloc(1, sizeof *m);
  if (!m) return cinfer_status_oom("model");
  llm_hparams *hp = &m->hp;
  hp->arch = gemma3 ? LLM_ARCH_GEMMA3 : LLM_ARCH_LLAMA;
  cinfer_status *st = NULL;
  const char *a = gemma3 ? "gemma3" : "llama";
  char key[128];
  if (!get_u(g, a, "embedding_length", &hp->dim, 1, 65536) || !get_u(g, a, "block_count", &hp->n_layers, 1, 1024) ||
      !get_u(g, a, "attention.head_count", &hp->n_heads, 1, 1024) ||
      !get_u(g, a, "feed_forward_length", &hp->ffn_dim, 1, 1 << 20) ||
      !get_u(g, a, "context_length", &hp->ctx_train, 1, 1 << 24)) {
    st = cinfer_status_new(CINFER_INVALID_ARG,
                           "model: %s.{embedding_length,block_count,attention.head_count,feed_forward_length,"
                           "context_length} missing or out of range", a);
    goto fail;
  }
  if (!get_u(g, a, "attention.head_count_kv", &hp->n_kv_heads, 1, hp->n_heads)) hp->n_kv_heads = hp->n_heads;
  if (hp->n_heads % hp->n_kv_heads) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "model: heads %d / kv heads %d inconsistent", hp->n_heads,
                           hp->n_kv_heads);
    goto fail;
  }
  if (gemma3) {
    /* head_dim is its own key (256 for every Gemma 3 size); keys and values share it */
    int kl = 0, vl = 0;
    if (!get_u(g, a, "attention.key_length", &kl, 2, 1024) || !get_u(g, a, "attention.value_length", &vl, 2, 1024) ||
        kl != vl) {
      st = cinfer_status_new(CINFER_INVALID_ARG,
                             "model: gemma3.attention.key_length / value_length missing, out of range or different");
      goto fail;
    }
    hp->head_dim = kl;
  } else {
    if (hp->dim % hp->n_heads) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "model: dim %d / heads %d inconsistent", hp->dim, hp->n_heads);
      goto fail;
    }
    hp->head_dim = hp->dim / hp->n_heads;
  }
  if (hp->head_dim % 2 || hp->head_dim > 1024 || (int64_t)hp->n_heads * hp->head_dim > (1 << 20)) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "model: head_dim %d unsupported", hp->head_dim);
    goto fail;
  }
  hp->q_dim = hp->n_heads * hp->head_dim;
  if (!get_u(g, a, "rope.dimension_count", &hp->rope_dims, 2, hp->head_dim)) hp->rope_dims = hp->head_dim;
  hp->rope_dims &= ~1;
  hp->rope_base = 10000.f;
  snprintf(key, sizeof key, "%s.rope.freq_base", a);
  llm_gguf_get_f32(g, key, &hp->rope_base);
  hp->norm_eps = 1e-5f;
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
  llm_gguf_get_f32(g, key, &hp->norm_eps);
  if (!(hp->rope_base > 0) || !(hp->norm_eps >= 0)) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "model: bad rope.freq_base or rms epsilon");
    goto fail;
  }
  hp->q_scale = 1.0f;
  hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim);
  hp->rope_base_swa = hp->rope_base;
  if (gemma3) {
    /* llama.cpp's gemma3 rules: with attention.sliding_window > 0, five local layers then
     * one global (il % 6 < 5 is local), local RoPE base 10000; q scaled by
     * 1/sqrt(head_dim) before the dot (27B, 62 layers: 1/sqrt(dim / heads)), kq_scale 1 */
    uint32_t w = 0;
    snprintf(key, sizeof key, "%s.attention.sliding_window", a);
    if (llm_gguf_get_u32(g, key, &w) && w > 0) {
      hp->n_swa = w > (1u << 24) ? 1 << 24 : (int)w;
      hp->rope_base_swa = 10000.0f;
    }
    hp->q_scale = hp->n_layers == 62 ? 1.0f / sqrtf((float)(hp->dim / hp->n_heads)) : 1.0f / sqrtf((float)hp->head_dim);
    hp->kq_scale = 1.0f;
    /* keys that change the graph and that this engine does not implement */
    static const char *unsup[] = {"final_logit_softcapping", "attn_logit_softcapping", "rope.scaling.type",
                                  "rope.scaling.factor"};
    for (size_t i = 0; i < sizeof unsup / sizeof *unsup; i++) {
      snprintf(key, sizeof key, "%s.%s", a, unsup[i]);
      if (llm_gguf_find(g, key)) {
        st = cinfer_status_new(CINFER_UNSUPPORTED, "model: %s is not supported", key);
        goto fail;
      }
    }
    pthread_once(&gelu_once, gelu_init);
  }
  const llm_gguf_tensor *te = llm_gguf_tensor_find(g, "token_embd.weight");
  if (!te || te->ne[0] != hp->dim || te->ne[1] < 1 || te->ne[1] > (1 << 24)) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "model: token_embd.weight missing or not [dim, vocab]");
    goto fail;
  }
  hp->n_vocab = (int)te->ne[1];
  int kvd = hp->n_kv_heads * hp->head_dim;
  if ((st = want_tensor(g, "token_embd.weight", hp->dim, hp->n_vocab, true, &m->tok_embd)) ||
      (st = want_tensor(g, "output_norm.weight", hp->dim, 1, false, &m->out_norm)))
    goto fail;
  if (llm_gguf_tensor_find(g, "output.weight")) {
    if ((st = want_tensor(g, "output.weight", hp->dim, hp->n_vocab, true, &m->output))) goto fail;
  } else {
    m->output = m->tok_embd; /* tied embeddings */
  }
  m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
  if (!m->layers) {
    st = cinfer_status_oom("model");
    goto fail;
  }
  for (int l = 0; l < hp->n_layers; l++) {
    layer_w *L = &m->layers[l];
    char n[96];
#define T(field, nm, a0, a1, q)                                   \
  snprintf(n, sizeof n, "blk.%d." nm ".weight", l);               \
  if ((st = want_tensor(g, n, a0, a1, q, &L->field))) goto fail;
    T(attn_norm, "attn_norm", hp->dim, 1, false)
    T(wq, "attn_q", hp->dim, hp->q_dim, true)
    T(wk, "attn_k", hp->dim, kvd, true)
    T(wv, "attn_v", hp->dim, kvd, true)
    T(wo, "attn_output", hp->q_dim, hp->dim, true)
    T(ffn_norm, "ffn_norm", hp->dim, 1, false)
    T(w_gate, "ffn_gate", hp->dim, hp->ffn_dim, true)
    T(w_up, "ffn_up", hp->dim, hp->ffn_dim, true)
    T(w_down, "ffn_down", hp->ffn_dim, hp->dim, true)
    if (gemma3) {
      T(q_norm, "attn_q_norm", hp->head_dim, 1, false)
      T(k_norm, "attn_k_norm", hp->head_dim, 1, false)
      T(post_attn_norm, "post_attention_norm", hp->dim, 1, false)
      T(post_ffn_norm, "post_ffw_norm", hp->dim, 1, false)
      L->swa = hp->n_swa > 0 && l % 6 < 5;
    }
#undef T
  }
  *out = m;
  return NULL;
fail:
  llm_model_destroy(m);
  return st;
}

/* ---- scratch ---- */
void llm_scratch_destroy(llm_scratch *s) {
  if (!s) return;
  free(s->x); free(s->xb); free(s->xb2); free(s->q); free(s->k); free(s->v);
  free(s->hb); free(s->hb2); free(s->xo); free(s->xq); free(s->rope); free(s->rope_swa);
  for (int i = 0; s->att && i < s->n_threads; i++) free(s->att[i]);
  for (int i = 0; s->att16 && i < s->n_threads; i++) free(s->att16[i]);
  for (int i = 0; s->att_acc && i < s->n_threads; i++) free(s->att_acc[i]);
  free(s->att_acc);
  free(s->att);
  free(s->att16);
  free(s);
}

cinfer_status *llm_scratch_create(const llm_model *m, int max_tokens, int max_ctx, int n_threads,
                                  llm_scratch **out) {
  *out = NULL;
  const llm_hparams *hp = &m->hp;
  if (max_tokens < 1 || max_ctx < 1 || n_threads < 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "scratch: bad sizes");
  llm_scratch *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom("scratch");
  s->max_tokens = max_tokens;
  s->max_ctx = max_ctx;
  s->n_threads = n_threads;
  size_t T = (size_t)max_tokens, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
  size_t big = (size_t)(hp->ffn_dim > hp->dim ? hp->ffn_dim : hp->dim);
  size_t wide = (size_t)(hp->q_dim > hp->dim ? hp->q_dim : hp->dim); /* attention output rows */
  if (wide > big) big = wide;
  s->x = malloc(T * hp->dim * 4);
  s->xb = malloc(T * hp->dim * 4);
  s->xb2 = malloc(T * wide * 4);
  s->xo = malloc(T * hp->dim * 4);
  s->q = malloc(T * hp->q_dim * 4);
  s->k = malloc(T * kvd * 4);
  s->v = malloc(T * kvd * 4);
  s->hb = malloc(T * hp->ffn_dim * 4);
  s->hb2 = malloc(T * hp->ffn_dim * 4);
  s->xq = malloc(T * big * 4 + 64); /* >= any activation row format (F32 is the largest) */
  s->rope = malloc(T * (size_t)hp->rope_dims * 4);
  s->rope_swa = malloc(T * (size_t)hp->rope_dims * 4);
  s->att = calloc((size_t)n_threads, sizeof *s->att);
  s->att16 = calloc((size_t)n_threads, sizeof *s->att16);
  s->att_acc = calloc((size_t)n_threads, sizeof *s->att_acc);
  bool ok = s->x && s->xb && s->xb2 && s->xo && s->q && s->k && s->v && s->hb && s->hb2 && s->xq && s->rope && s->rope_swa &&
            s->att && s->att16 && s->att_acc;
  for (int i = 0; ok && i < n_threads; i++) {
    s->att[i] = malloc(((size_t)max_ctx + 8) * 4);
    s->att16[i] = malloc(((size_t)max_ctx + (size_t)hp->head_dim) * 2);
    s->att_acc[i] = malloc((size_t)32 * hp->head_dim * 4);
    ok = s->att[i] && s->att16[i] && s->att_acc[i];
  }
  if (!ok) {
    llm_scratch_destroy(s);
    return cinfer_status_new(CINFER_INTERNAL, "scratch: out of memory for %d tokens", max_tokens); /* an OOM is a 500 */
  }
  *out = s;
  return NULL;
}

/* ---- kernels ---- */
typedef struct {
  const uint8_t *w;
  size_t wrow, xrow;
  llm_vec_dot_fn dot;
  llm_vec_dot4_fn dot4; /* NULL: use dot */
  llm_gemm_fn gemm;     /* NULL: use dot4 / dot */
  int n_out, k, n_tok;
  const uint8_t *xq;
  float *y;
} mm_ctx;

static void mm_task(void *c, int ith, int nth) {
  mm_ctx *m = c;
  /* split rows in chunks of 16 so a thread's rows are contiguous in memory */
  int nchunk = (m->n_out + 15) / 16;
  int c0 = (int)((int64_t)nchunk * ith / nth), c1 = (int)((int64_t)nchunk * (ith + 1) / nth);
  int r1 = c1 * 16 < m->n_out ? c1 * 16 : m->n_out;
  if (m->gemm) {
    if (r1 > c0 * 16)
      m->gemm(m->k, m->w + (size_t)c0 * 16 * m->wrow, m->wrow, r1 - c0 * 16, m->xq, m->xrow, m->n_tok, m->y + c0 * 16,
              (size_t)m->n_out);
    return;
  }
  for (int r = c0 * 16; r < r1; r++) {
    const uint8_t *wr = m->w + (size_t)r * m->wrow;
    int t = 0;
    if (m->dot4)
      for (; t + 1 < m->n_tok; t += 4) {
        float y4[4];
        int nt = m->n_tok - t < 4 ? m->n_tok - t : 4;
        m->dot4(m->k, wr, m->xq + (size_t)t * m->xrow, m->xrow, nt, y4);
        for (int j = 0; j < nt; j++) m->y[(size_t)(t + j) * m->n_out + r] = y4[j];
      }
    for (; t < m->n_tok; t++) m->y[(size_t)t * m->n_out + r] = m->dot(m->k, wr, m->xq + (size_t)t * m->xrow);
  }
}

/* Parts a matrix's rows are split into for the pool: several per thread (claimed
 * dynamically, so a descheduled thread delays a run by one part at most), each at least
 * 16 rows. */
static int mm_parts(llm_pool *pool, int n_out) {
  int want = 4 * llm_pool_size(pool), groups = (n_out + 15) / 16;
  return want < groups ? want : groups;
}
static void mm_chunk(void *c, int chunk, int n, int tid) {
  (void)tid;
  mm_task(c, chunk, n);
}

void llm_matmul(llm_pool *pool, const void *w, llm_type wt, int n_out, int k, const float *x, int n_tok, void *xq,
                float *y, bool reference) {
  llm_type vt = llm_type_vec_dot_type(wt);
  size_t xrow = llm_row_bytes(vt, k);
  for (int t = 0; t < n_tok; t++) llm_quantize_row(vt, x + (size_t)t * k, (uint8_t *)xq + (size_t)t * xrow, k);
  mm_ctx c = {w, llm_row_bytes(wt, k), xrow, reference ? llm_vec_dot_get_ref(wt) : llm_vec_dot_get(wt),
              reference ? NULL : llm_vec_dot4_get(wt), reference ? NULL : llm_gemm_get(wt), n_out, k, n_tok, xq, y};
  if (pool) llm_pool_run_chunks(pool, mm_chunk, &c, mm_parts(pool, n_out));
  else mm_task(&c, 0, 1);
}

static void matmul_t(llm_pool *pool, llm_scratch *s, const llm_gguf_tensor *t, const float *x, int n_tok,
                     float *y) {
  llm_matmul(pool, t->data, t->type, (int)t->ne[1], (int)t->ne[0], x, n_tok, s->xq, y, false);
}

typedef struct { mm_ctx c[3]; int parts[3], n, total; } mm_multi;
/* chunk -> (matrix, part of that matrix) */
static void mm_multi_chunk(void *c, int chunk, int n, int tid) {
  (void)n;
  (void)tid;
  mm_multi *m = c;
  int i = 0;
  while (chunk >= m->parts[i]) chunk -= m->parts[i++];
  mm_task(&m->c[i], chunk, m->parts[i]);
}

/* Several matrices over the same input (Q/K/V, gate/up): one quantisation of x and one
 * pool dispatch. Falls back to separate calls when their activation types differ. */
static void matmul_same_input(llm_pool *pool, llm_scratch *s, const llm_gguf_tensor *const *t, float *const *y,
                              int n, const float *x, int n_tok, llm_type prepared) {
  llm_type vt = llm_type_vec_dot_type(t[0]->type);
  for (int i = 1; i < n; i++)
    if (llm_type_vec_dot_type(t[i]->type) != vt) {
      for (int j = 0; j < n; j++) matmul_t(pool, s, t[j], x, n_tok, y[j]);
      return;
    }
  int k = (int)t[0]->ne[0];
  size_t xrow = llm_row_bytes(vt, k);
  if (prepared != vt)
    for (int j = 0; j < n_tok; j++) llm_quantize_row(vt, x + (size_t)j * k, (uint8_t *)s->xq + (size_t)j * xrow, k);
  mm_multi m = {.n = n};
  for (int i = 0; i < n; i++)
    m.c[i] = (mm_ctx){t[i]->data, llm_row_bytes(t[i]->type, k), xrow, llm_vec_dot_get(t[i]->type),
                      llm_vec_dot4_get(t[i]->type), llm_gemm_get(t[i]->type), (int)t[i]->ne[1], k, n_tok, s->xq,
                      y[i]};
  for (int i = 0; i < n; i++) m.total += (m.parts[i] = mm_parts(pool, m.c[i].n_out));
  llm_pool_run_chunks(pool, mm_multi_chunk, &m, m.total);
}

static void rmsnorm(float *o, const float *x, const float *w, int n, float eps) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
  float scale = 1.0f / sqrtf((float)(sum / n) + eps);
  for (int i = 0; i < n; i++) o[i] = (x[i] * scale) * w[i];
}

/* Per-token row operations between the matrix products, run over the pool by rows (each
 * row independent): x += res; o = rmsnorm(x) * w; o = swiglu(o, u); xq = quantise(o, qt).
 * Each op is optional (NULL / LLM_TYPE_COUNT_); the order is fixed as listed. */
typedef struct {
  float *x;             /* residual stream row base (dim wide), or NULL */
  const float *res;     /* added to x when not NULL */
  const float *norm_w;  /* o = rmsnorm(x) * norm_w when not NULL */
  float *o;             /* output rows (width n) */
  const float *u;       /* o = swiglu(o, u) when not NULL */
  llm_type qt;          /* quantise o into xq when != LLM_TYPE_COUNT_ */
  void *xq;
  int n, n_rows;
  float eps;
  const float *res_norm_w; /* gemma3: x += rmsnorm(res) * res_norm_w instead of x += res */
  bool gelu;               /* with u: o = gelu(o) * u instead of swiglu */
  float in_scale;          /* gemma3's embedding scale: x *= in_scale first when != 0 */
} rows_ctx;

static void rows_chunk(void *c, int chunk, int nchunks, int tid) {
  (void)tid;
  rows_ctx *r = c;
  int i0 = (int)((int64_t)r->n_rows * chunk / nchunks), i1 = (int)((int64_t)r->n_rows * (chunk + 1) / nchunks);
  size_t qrow = r->qt != LLM_TYPE_COUNT_ ? llm_row_bytes(r->qt, r->n) : 0;
  for (int i = i0; i < i1; i++) {
    float *o = r->o + (size_t)i * r->n;
    if (r->x) {
      float *x = r->x + (size_t)i * r->n;
      if (r->in_scale != 0.0f)
        for (int d = 0; d < r->n; d++) x[d] *= r->in_scale;
      if (r->res && r->res_norm_w) {
        /* ggml: add(mul(rms_norm(res), w), x); the f32 add commutes */
        const float *a = r->res + (size_t)i * r->n;
        double sum = 0;
        for (int d = 0; d < r->n; d++) sum += (double)(a[d] * a[d]);
        float scale = 1.0f / sqrtf((float)(sum / r->n) + r->eps);
        for (int d = 0; d < r->n; d++) x[d] += (a[d] * scale) * r->res_norm_w[d];
      } else if (r->res) {
        const float *a = r->res + (size_t)i * r->n;
        for (int d = 0; d < r->n; d++) x[d] += a[d];
      }
      if (r->norm_w) rmsnorm(o, x, r->norm_w, r->n, r->eps);
    }
    if (r->u && r->gelu) geglu(r->n, o, r->u + (size_t)i * r->n);
    else if (r->u) llm_swiglu(r->n, o, r->u + (size_t)i * r->n);
    if (qrow) llm_quantize_row(r->qt, o, (uint8_t *)r->xq + (size_t)i * qrow, r->n);
  }
}

static void rows_run(llm_pool *pool, rows_ctx *r) {
  int parts = 2 * llm_pool_size(pool) < r->n_rows ? 2 * llm_pool_size(pool) : r->n_rows;
  llm_pool_run_chunks(pool, rows_chunk, r, parts);
}

/* vec-dot type a tensor's input is quantised to */
static llm_type in_type(const llm_gguf_tensor *t) { return llm_type_vec_dot_type(t->type); }

typedef struct {
  const llm_model *m;
  llm_kv *kv;
  llm_scratch *s;
  const llm_batch *b;
  int layer;
} att_ctx;

static void att_task(void *c, int ith, int nth, int tid) {
  att_ctx *a = c;
  const llm_hparams *hp = &a->m->hp;
  llm_scratch *s = a->s;
  int hd = hp->head_dim, nh = hp->n_heads, grp = hp->n_heads / hp->n_kv_heads, kvd = hp->n_kv_heads * hd;
  int bs = llm_kv_block_size(a->kv), qd = hp->q_dim;
  float scale = hp->kq_scale;
  /* a local layer's token at p sees p - n_swa + 1 .. p (llama.cpp's LLAMA_SWA_TYPE_STANDARD:
   * masked when p - p0 >= n_swa); masked scores are -inf, as in llama.cpp's mask, so the
   * softmax's groups and the lanes of the V sum stay where ggml has them */
  int swa = a->m->layers[a->layer].swa ? hp->n_swa : 0;
  int total = a->b->n * nh;
  int j0 = (int)((int64_t)total * ith / nth), j1 = (int)((int64_t)total * (ith + 1) / nth);
  float *sc = s->att[tid];
  uint16_t *p16 = s->att16[tid], *q16 = p16 + s->max_ctx;
  for (int j = j0; j < j1; j++) {
    int i = j / nh, h = j % nh, kvh = h / grp;
    int npos = a->b->pos[i] + 1;
    const int32_t *table = a->b->tables[a->b->seq[i]];
    const float *q = s->q + (size_t)i * qd + (size_t)h * hd;
    llm_fp32_to_fp16_row(q16, q, hd);
    float mx = -INFINITY;
    int p_lo = swa && npos > swa ? npos - swa : 0;
    for (int p = 0; p < p_lo; p++) sc[p] = -INFINITY;
    for (int p = p_lo; p < npos; p++) {
      const uint16_t *kr = llm_kv_k(a->kv, a->layer, table[p / bs]) + (size_t)(p % bs) * kvd + (size_t)kvh * hd;
      float v = llm_dot_f16(hd, kr, q16) * scale;
      sc[p] = v;
      if (v > mx) mx = v;
    }
    /* softmax as ggml: vectorised exp over groups of 8 (padding is masked, exp -> 0) */
    int npad = (npos + 7) & ~7;
    for (int p = npos; p < npad; p++) sc[p] = -INFINITY;
    double sum = llm_softmax_exp(npad, sc, mx);
    float inv = (float)(1.0 / sum);
    for (int p = 0; p < npos; p++) p16[p] = llm_fp32_to_fp16(sc[p] * inv);
    for (int p = 0; p < p_lo; p++) p16[p] = 0; /* exp(-inf) is 0 already; keeps the V loop's skip exact */
    /* out[d] = sum_p p[p] * v[p][d] in ggml_vec_dot_f16's order over positions: 32 lanes
     * (lane = p mod 32) accumulated with FMA, then the fixed reduction tree */
    float *acc = s->att_acc[tid];
    memset(acc, 0, (size_t)32 * hd * sizeof *acc);
    for (int p = 0; p < npos; p++) {
      const uint16_t *vr = llm_kv_v(a->kv, a->layer, table[p / bs]) + (size_t)(p % bs) * kvd + (size_t)kvh * hd;
      float pw = llm_fp16_to_fp32(p16[p]);
      if (pw == 0.0f) continue; /* fma(v, 0, acc) == acc */
      llm_axpy_f16(hd, acc + (size_t)(p & 31) * hd, vr, pw);
    }
    llm_reduce_lanes32(hd, acc, s->xb2 + (size_t)i * qd + (size_t)h * hd);
  }
}

static void rope_apply(float *v, int n_heads, int hd, const float *cs, int rope_dims) {
  for (int h = 0; h < n_heads; h++) {
    float *x = v + (size_t)h * hd;
    for (int i = 0; i < rope_dims; i += 2) {
      /* Fused as written (fmaf): GCC 12's vectoriser turns the unfused form into
       * vfmaddsub at -O3 even with -ffp-contract=off, so the rounding depended on the
       * optimisation level. */
      float c = cs[i], sn = cs[i + 1], x0 = x[i], x1 = x[i + 1];
      x[i] = fmaf(x0, c, -(x1 * sn));
      x[i + 1] = fmaf(x0, sn, x1 * c);
    }
  }
}

/* NEOX-style RoPE (gemma3): dimension i pairs with i + rope_dims/2; pair i uses the
 * angle of cache slot 2i, as ggml's rope_f32 with GGML_ROPE_TYPE_NEOX */
static void rope_apply_neox(float *v, int n_heads, int hd, const float *cs, int rope_dims) {
  int half = rope_dims / 2;
  for (int h = 0; h < n_heads; h++) {
    float *x = v + (size_t)h * hd;
    for (int i = 0; i < half; i++) {
      float c = cs[2 * i], sn = cs[2 * i + 1], x0 = x[i], x1 = x[i + half];
      x[i] = fmaf(x0, c, -(x1 * sn)); /* fused as written, as rope_apply */
      x[i + half] = fmaf(x0, sn, x1 * c);
    }
  }
}

/* per-head RMSNorm in place (gemma3's attn_q_norm / attn_k_norm) */
static void head_norm(float *v, int n_heads, int hd, const float *w, float eps) {
  for (int h = 0; h < n_heads; h++) rmsnorm(v + (size_t)h * hd, v + (size_t)h * hd, w, hd, eps);
}

/* RoPE on a token's q and k rows, then its k and v rows into the KV cache (fp16). Rows
 * are independent (each token owns its cache slot), so the pool splits them. */
static void rope_chunk(void *c, int chunk, int nchunks, int tid) {
  (void)tid;
  att_ctx *r = c; /* the same context as attention's */
  const llm_hparams *hp = &r->m->hp;
  llm_scratch *s = r->s;
  int n = r->b->n, dim = hp->dim, kvd = hp->n_kv_heads * hp->head_dim, bs = llm_kv_block_size(r->kv);
  int i0 = (int)((int64_t)n * chunk / nchunks), i1 = (int)((int64_t)n * (chunk + 1) / nchunks);
  const layer_w *L = &r->m->layers[r->layer];
  for (int i = i0; i < i1; i++) {
    if (hp->arch == LLM_ARCH_GEMMA3) {
      float *q = s->q + (size_t)i * hp->q_dim, *k = s->k + (size_t)i * kvd;
      const float *cs = (L->swa ? s->rope_swa : s->rope) + (size_t)i * hp->rope_dims;
      head_norm(q, hp->n_heads, hp->head_dim, L->q_norm->data, hp->norm_eps);
      rope_apply_neox(q, hp->n_heads, hp->head_dim, cs, hp->rope_dims);
      head_norm(k, hp->n_kv_heads, hp->head_dim, L->k_norm->data, hp->norm_eps);
      rope_apply_neox(k, hp->n_kv_heads, hp->head_dim, cs, hp->rope_dims);
      for (int d = 0; d < hp->q_dim; d++) q[d] *= hp->q_scale;
    } else {
      const float *cs = s->rope + (size_t)i * hp->rope_dims;
      rope_apply(s->q + (size_t)i * dim, hp->n_heads, hp->head_dim, cs, hp->rope_dims);
      rope_apply(s->k + (size_t)i * kvd, hp->n_kv_heads, hp->head_dim, cs, hp->rope_dims);
    }
    int p = r->b->pos[i], blk = r->b->tables[r->b->seq[i]][p / bs];
    uint16_t *kr = llm_kv_k(r->kv, r->layer, blk) + (size_t)(p % bs) * kvd;
    uint16_t *vr = llm_kv_v(r->kv, r->layer, blk) + (size_t)(p % bs) * kvd;
    llm_fp32_to_fp16_row(kr, s->k + (size_t)i * kvd, kvd);
    llm_fp32_to_fp16_row(vr, s->v + (size_t)i * kvd, kvd);
  }
}

void llm_model_forward(const llm_model *m, llm_kv *kv, llm_pool *pool, llm_scratch *s, const llm_batch *b,
                       float *logits) {
  const llm_hparams *hp = &m->hp;
  int n = b->n, dim = hp->dim;
  size_t erow = llm_row_bytes(m->tok_embd->type, dim);
  for (int i = 0; i < n; i++)
    llm_dequant_row(m->tok_embd->type, (const uint8_t *)m->tok_embd->data + (size_t)b->token[i] * erow,
                    s->x + (size_t)i * dim, dim);
  /* rope cos/sin per token, computed as ggml does (theta *= theta_scale); gemma3's local
   * layers have their own base */
  bool gemma3 = hp->arch == LLM_ARCH_GEMMA3;
  for (int c = 0; c < (gemma3 && hp->n_swa ? 2 : 1); c++) {
    float theta_scale = powf(c ? hp->rope_base_swa : hp->rope_base, -2.0f / (float)hp->rope_dims);
    for (int i = 0; i < n; i++) {
      float theta = (float)b->pos[i], *cs = (c ? s->rope_swa : s->rope) + (size_t)i * hp->rope_dims;
      for (int d = 0; d < hp->rope_dims; d += 2) {
        cs[d] = cosf(theta);
        cs[d + 1] = sinf(theta);
        theta *= theta_scale;
      }
    }
  }
  const float *no = m->out_norm->data;
  /* x -> xb = rmsnorm(x) -> xq (quantised for Q/K/V); gemma3 scales the embeddings by
   * sqrt(dim) first (ggml_scale by sqrtf(n_embd)) */
  rows_ctx rc = {s->x, NULL, m->layers[0].attn_norm->data, s->xb, NULL, in_type(m->layers[0].wq), s->xq, dim, n,
                 hp->norm_eps};
  if (gemma3) rc.in_scale = sqrtf((float)dim);
  rows_run(pool, &rc);
  for (int l = 0; l < hp->n_layers; l++) {
    const layer_w *L = &m->layers[l];
    const llm_gguf_tensor *qkv[3] = {L->wq, L->wk, L->wv};
    float *qkv_out[3] = {s->q, s->k, s->v};
    matmul_same_input(pool, s, qkv, qkv_out, 3, s->xb, n, rc.qt);
    att_ctx ac = {m, kv, s, b, l};
    llm_pool_run_chunks(pool, rope_chunk, &ac, 2 * llm_pool_size(pool) < n ? 2 * llm_pool_size(pool) : n);
    int att_parts = 4 * llm_pool_size(pool) < n * hp->n_heads ? 4 * llm_pool_size(pool) : n * hp->n_heads;
    llm_pool_run_chunks(pool, att_task, &ac, att_parts);
    /* xb2 (attention output) -> xq for wo */
    rc = (rows_ctx){NULL, NULL, NULL, s->xb2, NULL, in_type(L->wo), s->xq, hp->q_dim, n, hp->norm_eps};
    rows_run(pool, &rc);
    matmul_same_input(pool, s, &L->wo, &s->xb, 1, s->xb2, n, rc.qt);
    /* x += xb (gemma3: x += rmsnorm(xb) * post_attention_norm); xb = rmsnorm(x) -> xq for gate/up */
    rc = (rows_ctx){s->x, s->xb, L->ffn_norm->data, s->xb, NULL, in_type(L->w_gate), s->xq, dim, n, hp->norm_eps};
    if (gemma3) rc.res_norm_w = L->post_attn_norm->data;
    rows_run(pool, &rc);
    const llm_gguf_tensor *gu[2] = {L->w_gate, L->w_up};
    float *gu_out[2] = {s->hb, s->hb2};
    matmul_same_input(pool, s, gu, gu_out, 2, s->xb, n, rc.qt);
    /* hb = swiglu(hb, hb2) (gemma3: gelu(hb) * hb2) -> xq for down */
    rc = (rows_ctx){NULL, NULL, NULL, s->hb, s->hb2, in_type(L->w_down), s->xq, hp->ffn_dim, n, hp->norm_eps};
    rc.gelu = gemma3;
    rows_run(pool, &rc);
    matmul_same_input(pool, s, &L->w_down, &s->xb, 1, s->hb, n, rc.qt);
    /* x += xb; then the next layer's xb = rmsnorm(x) -> xq (the last layer: the add only) */
    bool last = l + 1 == hp->n_layers;
    rc = (rows_ctx){s->x, s->xb, last ? NULL : m->layers[l + 1].attn_norm->data, s->xb, NULL,
                    last ? LLM_TYPE_COUNT_ : in_type(m->layers[l + 1].wq), s->xq, dim, n, hp->norm_eps};
    if (gemma3) rc.res_norm_w = L->post_ffn_norm->data;
    rows_run(pool, &rc);
  }
  int nw = 0;
  for (int i = 0; i < n; i++)
    if (b->want[i]) rmsnorm(s->xo + (size_t)nw++ * dim, s->x + (size_t)i * dim, no, dim, hp->norm_eps);
  if (nw) matmul_t(pool, s, m->output, s->xo, nw, logits);
}
