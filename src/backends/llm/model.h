/* model.h: a Llama- or Gemma-3-architecture transformer over GGUF weights (mmap, no copies), and its
 * batched forward pass over a paged KV cache.
 *
 * One forward call processes a batch of tokens from several sequences at different
 * positions: each weight matrix is read once per call for all tokens (the step's decode
 * tokens and prefill chunks together). Attention for a token at position p of sequence s
 * reads positions 0..p through s's block table; the batch's own K/V rows are written first,
 * so a prefill chunk attends causally to itself.
 * Numerics follow llama.cpp's CPU path: activations quantised per block to the weight's
 * vec-dot type, K/V stored as fp16, q and attention probabilities rounded to fp16. */
#ifndef CINFER_LLM_MODEL_H
#define CINFER_LLM_MODEL_H

#include <stdint.h>

#include "backends/llm/gguf.h"
#include "backends/llm/kv.h"
#include "backends/llm/pool.h"
#include "cinfer/types.h"

typedef enum { LLM_ARCH_LLAMA, LLM_ARCH_GEMMA3 } llm_arch;

typedef struct llm_hparams {
  int n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, ctx_train, rope_dims;
  float rope_base, norm_eps;
  llm_arch arch;
  int q_dim;            /* n_heads * head_dim (Gemma 3's head_dim is not dim / n_heads) */
  /* gemma3: sliding-window attention on the layers where swa[l] (window n_swa positions,
   * the token's own included) with RoPE base rope_base_swa; the others are global with
   * rope_base. q is multiplied by q_scale before the K.q dot (llama: 1, with kq_scale
   * 1/sqrt(head_dim) applied to the dot instead, as ggml's soft_max_ext does). */
  int n_swa;
  float rope_base_swa, q_scale, kq_scale;
} llm_hparams;

typedef struct llm_model llm_model;

/* Validates architecture, shapes and types of every tensor. Borrows g (must outlive). */
cinfer_status *llm_model_create(const llm_gguf *g, llm_model **out);
void llm_model_destroy(llm_model *m);
const llm_hparams *llm_model_hparams(const llm_model *m);
/* "llama" or "gemma3" (general.architecture of the file) */
const char *llm_model_arch_name(const llm_model *m);
/* whether layer l attends through a sliding window (gemma3's local layers) */
bool llm_model_layer_swa(const llm_model *m, int l);

/* A batch: n tokens; token i belongs to sequence seq[i] (an index into tables), sits at
 * position pos[i]; logits are produced for tokens with want[i] (in order, rows of
 * n_vocab floats). tables[s] lists the KV blocks of sequence s, covering pos[i]. */
typedef struct llm_batch {
  int n;
  const int32_t *token, *pos, *seq;
  const uint8_t *want;
  const int32_t *const *tables;
} llm_batch;

/* Scratch for forward passes of up to max_tokens tokens and contexts up to max_ctx. */
typedef struct llm_scratch llm_scratch;
cinfer_status *llm_scratch_create(const llm_model *m, int max_tokens, int max_ctx, int n_threads,
                                  llm_scratch **out);
void llm_scratch_destroy(llm_scratch *s);

/* Runs the batch; logits receives one row per wanted token. No allocation. The scratch
 * must have been created with n_threads >= llm_pool_size(pool) (per-thread attention
 * buffers are indexed by the pool's thread id). */
void llm_model_forward(const llm_model *m, llm_kv *kv, llm_pool *pool, llm_scratch *s, const llm_batch *b,
                       float *logits);

/* y[t][r] = W[r] . x[t] for t < n_tok, r < n_out over a quantised weight (threads split
 * rows). Exposed for tests and benchmarks. xq: scratch of n_tok * row_bytes(vec_dot_type). */
void llm_matmul(llm_pool *pool, const void *w, llm_type wt, int n_out, int k, const float *x, int n_tok,
                void *xq, float *y, bool reference);

#endif
