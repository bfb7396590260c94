/* engine.c: continuous batching over the paged KV cache (see llm.h).
 *
 * Sequence life cycle: submit -> `incoming` (under e->mu) -> WAITING (step thread's FIFO)
 * -> RUNNING (admitted: prompt blocks allocated, prefix-cached blocks shared) -> finished
 * (final event, blocks released, freed). WAITING is ordered by sp.priority (lower first),
 * then arrival; admission takes its head. A preempted sequence returns to WAITING ahead of
 * every waiting sequence of its priority or lower (it was admitted before them) with
 * n_computed = 0, and its tokens (prompt + output so far) are recomputed later. The victim
 * of a preemption is the running sequence of the lowest priority, the most recently
 * admitted among equals.
 *
 * Step invariants: a RUNNING sequence owns blocks covering positions [0, n_tokens) of its
 * work except for the next decode position, which is allocated at the start of the step
 * that computes it; n_computed <= n_tokens; tokens [0, n_computed) have K/V in its blocks;
 * the first n_published blocks are published in the prefix cache under the key chain.
 * Only the step thread touches sequences after they leave `incoming`; other threads only
 * set `cancel` (atomic). */
#include <errno.h>
#include <math.h>
#include <strings.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/llm/llm.h"
#include "backends/llm/model.h"
#include "backends/llm/grammar.h"
#include "backends/llm/jinja.h"
#include "backends/llm/tokenizer.h"
#include "core/clock.h"

#define PENALTY_WINDOW 64
#define MAX_LOGPROBS 20
#define LLM_MAX_KV_BLOCKS 1000000

typedef enum { S_WAITING, S_RUNNING } seq_state;

typedef struct seq {
  uint64_t id;
  llm_stream_fn cb;
  void *user;
  llm_sampling sp;
  char **stop;            /* sp.stop copies */
  int32_t *stop_tokens;
  seq_state state;
  atomic_bool cancel;
  int32_t *tokens;
  int n_tokens, cap_tokens, n_prompt, n_generated, max_total;
  int n_computed;
  int32_t *blocks;
  int n_blocks, cap_blocks;
  int n_published;
  uint64_t pub_key;
  int cached_tokens;
  uint64_t rng;
  llm_detok detok;
  char *held;             /* text not yet streamed (possible stop-string prefix) */
  size_t held_n, held_cap;
  double t_submit, t_sched, t_first;
  int logits_row;         /* first row in the step's logits, -1 when none */
  int n_rows;             /* rows from logits_row: prompt_logprobs rows, then the sampling row */
  int plp_done;           /* prompt_logprobs: next prompt position whose event is due (from 1) */
  llm_grammar_state *gs;  /* constrained decoding (sp.grammar), else NULL */
  struct seq *next;       /* incoming list */
} seq;

struct llm_engine {
  llm_gguf *g;
  llm_model *model;
  llm_tokenizer *tok;
  llm_kv *kv;
  llm_pool *pool;
  llm_scratch *scratch;
  llm_engine_opts o;
  char *chat_template;      /* the override "chatml" (built-in renderer), else NULL */
  llm_jinja *jinja;         /* the chat template otherwise: an override's text or the GGUF's */
  char *bos_text, *eos_text;
  int bs, n_vocab;
  size_t block_bytes;       /* one KV block, all layers, K and V */
  /* step-thread state */
  seq **running;
  int n_running;
  seq **waiting;
  int n_waiting, cap_waiting;
  int32_t *b_token, *b_pos, *b_seq;
  uint8_t *b_want;
  const int32_t **b_tables;
  float *logits;
  float *probs;             /* n_vocab scratch for sampling */
  float *pbuf;              /* n_vocab scratch for sampling */
  seq **sched;              /* max_seqs: sequences in the current batch, by batch index */
  int32_t *idx;             /* n_vocab scratch */
  char *textbuf;
  size_t textbuf_cap;
  /* shared state */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  bool has_thread, stop;
  seq *incoming, *incoming_tail;
  uint64_t next_id;
  uint64_t *live_ids;       /* ids of sequences not yet finished (for cancel lookup) */
  seq **live;
  int n_live, cap_live;
  llm_engine_stats st;
  int plp_left;             /* prompt_logprob_rows not yet given out in the step being built */
  char name[128], arch[32];
  bool trace; /* $CINFER_LLM_TRACE: one line per step on stderr */
  llm_grammar_vocab *gvocab; /* the vocabulary trie, built at the first grammar request (gvocab_mu) */
  pthread_mutex_t gvocab_mu;
};

const char *llm_finish_name(llm_finish f) {
  switch (f) {
    case LLM_FINISH_STOP: return "stop";
    case LLM_FINISH_LENGTH: return "length";
    case LLM_FINISH_CANCELLED: return "cancelled";
    case LLM_FINISH_ERROR: return "error";
    default: return "none";
  }
}

void llm_sampling_default(llm_sampling *s) {
  memset(s, 0, sizeof *s);
  s->temperature = 1.0f;
  s->top_p = 1.0f;
  s->repetition_penalty = 1.0f;
  s->seed = -1;
  s->max_tokens = 16;
}

cinfer_status *llm_sampling_check(const llm_sampling *s) {
#define BAD(cond, ...) \
  if (cond) return cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)
  BAD(!(s->temperature >= 0 && s->temperature <= 100), "temperature must be in [0, 100]");
  BAD(s->top_k < 0, "top_k must be >= 0");
  BAD(!(s->top_p > 0 && s->top_p <= 1), "top_p must be in (0, 1]");
  BAD(!(s->min_p >= 0 && s->min_p <= 1), "min_p must be in [0, 1]");
  BAD(!(s->repetition_penalty > 0 && s->repetition_penalty <= 10), "repetition_penalty must be in (0, 10]");
  BAD(!(s->presence_penalty >= -2 && s->presence_penalty <= 2), "presence_penalty must be in [-2, 2]");
  BAD(!(s->frequency_penalty >= -2 && s->frequency_penalty <= 2), "frequency_penalty must be in [-2, 2]");
  BAD(s->max_tokens <= 0, "max_tokens must be > 0");
  BAD(s->n_stop < 0 || s->n_stop > 16 || (s->n_stop && !s->stop), "at most 16 stop strings");
  for (int i = 0; i < s->n_stop; i++) BAD(!s->stop[i] || !s->stop[i][0] || strlen(s->stop[i]) > 256, "stop strings must be 1..256 bytes");
  BAD(s->n_stop_tokens < 0 || s->n_stop_tokens > 64 || (s->n_stop_tokens && !s->stop_tokens), "at most 64 stop tokens");
  BAD(s->logprobs < 0 || s->logprobs > MAX_LOGPROBS, "logprobs must be in [0, 20]");
  BAD(s->grammar && s->ignore_eos, "ignore_eos cannot be combined with a grammar (it ends the text)");
#undef BAD
  return NULL;
}

/* ---- create / destroy ---- */
static void seq_free(seq *s) {
  if (!s) return;
  for (int i = 0; s->stop && i < s->sp.n_stop; i++) free(s->stop[i]);
  free(s->stop);
  free(s->stop_tokens);
  free(s->tokens);
  free(s->blocks);
  free(s->held);
  llm_grammar_state_destroy(s->gs);
  free(s);
}

static void *step_main(void *arg);

cinfer_status *llm_engine_create(const char *path, const llm_engine_opts *opts, llm_engine **out) {
  *out = NULL;
  llm_engine *e = calloc(1, sizeof *e);
  if (!e) return cinfer_status_oom("engine");
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->gvocab_mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  e->next_id = 1;
  e->trace = getenv("CINFER_LLM_TRACE") != NULL;
  if (opts) e->o = *opts;
  e->o.chat_template = NULL;
  cinfer_status *st = llm_gguf_open(path, &e->g);
  if (!st) st = llm_model_create(e->g, &e->model);
  if (!st) st = llm_tokenizer_create(e->g, &e->tok);
  if (st) goto fail;
  const llm_hparams *hp = llm_model_hparams(e->model);
  e->n_vocab = hp->n_vocab;
  if (llm_tokenizer_n_vocab(e->tok) > hp->n_vocab) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "engine: tokenizer has %d tokens, model %d",
                           llm_tokenizer_n_vocab(e->tok), hp->n_vocab);
    goto fail;
  }
  llm_engine_opts *o = &e->o;
  if (o->threads <= 0) o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (o->threads <= 0) o->threads = 1;
  if (o->ctx_len <= 0) o->ctx_len = hp->ctx_train < 4096 ? hp->ctx_train : 4096;
  if (o->block_size <= 0) o->block_size = 16;
  if (o->max_seqs <= 0) o->max_seqs = 64;
  if (o->max_step_tokens <= 0) o->max_step_tokens = 512;
  /* prompt_logprobs prefill chunks are cut so that their wanted rows fit these */
  if (o->prompt_logprob_rows <= 0) o->prompt_logprob_rows = 32;
  if (o->prompt_logprob_rows > o->max_step_tokens) o->prompt_logprob_rows = o->max_step_tokens;
  if (o->ctx_len > (1 << 20) || o->block_size > 1024 || o->max_seqs > 4096 || o->max_step_tokens > 65536 ||
      o->threads > 256) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "engine: option out of range (ctx_len <= 2^20, block_size <= 1024, "
                                               "max_seqs <= 4096, max_step_tokens <= 65536, threads <= 256)");
    goto fail;
  }
  if (o->max_step_tokens < o->max_seqs) o->max_step_tokens = o->max_seqs;
  e->bs = o->block_size;
  if (o->max_waiting < 0) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "engine: max_waiting %d is negative (0 = no limit)", o->max_waiting);
    goto fail;
  }
  size_t block_bytes = (size_t)hp->n_layers * o->block_size * hp->n_kv_heads * hp->head_dim * 4;
  e->block_bytes = block_bytes;
  if (o->kv_blocks <= 0) {
    size_t bytes = o->kv_bytes;
    bool given = bytes != 0;
    if (!bytes) {
      size_t want = (size_t)o->max_seqs * ((size_t)(o->ctx_len + o->block_size - 1) / o->block_size) * block_bytes;
      bytes = want < (1ull << 30) ? want : (1ull << 30);
    }
    size_t nb = bytes / block_bytes;
    if (given && nb < 2) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "engine: a KV cache of %zu bytes holds %zu blocks of %zu bytes "
                             "(%d tokens x %d layers x K and V); it needs at least 2", bytes, nb, block_bytes,
                             o->block_size, hp->n_layers);
      goto fail;
    }
    if (given && nb > LLM_MAX_KV_BLOCKS) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "engine: a KV cache of %zu bytes would be %zu blocks of %zu bytes, "
                             "more than the %d this engine indexes (raise block_size)", bytes, nb, block_bytes,
                             LLM_MAX_KV_BLOCKS);
      goto fail;
    }
    o->kv_blocks = nb > LLM_MAX_KV_BLOCKS ? LLM_MAX_KV_BLOCKS : (int)nb;
  }
  int per_seq = (o->ctx_len + o->block_size - 1) / o->block_size;
  if (o->kv_blocks < per_seq && o->kv_blocks < 2) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "engine: KV cache of %d blocks is too small", o->kv_blocks);
    goto fail;
  }
  if ((st = llm_kv_create(hp->n_layers, hp->n_kv_heads * hp->head_dim, o->block_size, o->kv_blocks, &e->kv)) ||
      (st = llm_pool_create(o->threads, &e->pool)) ||
      (st = llm_scratch_create(e->model, o->max_step_tokens, o->ctx_len, o->threads, &e->scratch)))
    goto fail;
  int T = o->max_step_tokens;
  e->running = calloc((size_t)o->max_seqs, sizeof *e->running);
  e->b_token = malloc((size_t)T * 4);
  e->b_pos = malloc((size_t)T * 4);
  e->b_seq = malloc((size_t)T * 4);
  e->b_want = malloc((size_t)T);
  e->b_tables = malloc((size_t)o->max_seqs * sizeof *e->b_tables);
  e->logits = malloc((size_t)(o->max_seqs + o->prompt_logprob_rows) * e->n_vocab * 4);
  e->probs = malloc((size_t)e->n_vocab * 4);
  e->idx = malloc((size_t)e->n_vocab * 4);
  e->pbuf = malloc((size_t)e->n_vocab * 4);
  e->sched = malloc((size_t)o->max_seqs * sizeof *e->sched);
  e->textbuf_cap = 4096;
  e->textbuf = malloc(e->textbuf_cap);
  if (!e->running || !e->b_token || !e->b_pos || !e->b_seq || !e->b_want || !e->b_tables || !e->logits ||
      !e->probs || !e->idx || !e->pbuf || !e->sched || !e->textbuf) {
    st = cinfer_status_oom("engine");
    goto fail;
  }
  {
    const char *ovr = opts ? opts->chat_template : NULL;
    const char *tpl = ovr ? ovr : llm_tokenizer_chat_template(e->tok);
    if (ovr && !strcmp(ovr, "chatml")) {
      if (!(e->chat_template = strdup(ovr))) {
        st = cinfer_status_oom("engine");
        goto fail;
      }
    } else if (tpl) {
      if ((st = llm_jinja_compile(tpl, strlen(tpl), &e->jinja))) {
        cinfer_status *w = cinfer_status_new(cinfer_status_code(st),
                                             "%s: %s (set the model parameter chat_template to \"chatml\" or to a "
                                             "template this renderer supports)",
                                             ovr ? "the chat_template parameter" : "the model's tokenizer.chat_template",
                                             cinfer_status_message(st));
        cinfer_status_free(st);
        st = w;
        goto fail;
      }
      size_t bl = 0, el = 0;
      int32_t bos = llm_tokenizer_bos(e->tok), eos = llm_tokenizer_eos(e->tok);
      const char *bp = bos >= 0 ? llm_token_piece(e->tok, bos, true, &bl) : "";
      const char *ep = eos >= 0 ? llm_token_piece(e->tok, eos, true, &el) : "";
      e->bos_text = strndup(bp, bl);
      e->eos_text = strndup(ep, el);
      if (!e->bos_text || !e->eos_text) {
        st = cinfer_status_oom("engine");
        goto fail;
      }
    }
  }
  llm_gguf_str s;
  if (llm_gguf_get_str(e->g, "general.name", &s)) snprintf(e->name, sizeof e->name, "%.*s", (int)(s.n > 127 ? 127 : s.n), s.p);
  snprintf(e->arch, sizeof e->arch, "%s", llm_model_arch_name(e->model));
  e->st.kv_blocks_total = o->kv_blocks;
  if (!o->manual_step) {
    if (pthread_create(&e->th, NULL, step_main, e)) {
      st = cinfer_status_new(CINFER_INTERNAL, "engine: cannot start the step thread");
      goto fail;
    }
    e->has_thread = true;
  }
  *out = e;
  return NULL;
fail:
  llm_engine_destroy(e);
  return cinfer_status_prefix(st, "%s", path);
}

static void finish_seq(llm_engine *e, seq *s, llm_finish f, const char *err);
static int publish_gauges(llm_engine *e);

void llm_engine_destroy(llm_engine *e) {
  if (!e) return;
  pthread_mutex_lock(&e->mu);
  e->stop = true;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  if (e->has_thread) pthread_join(e->th, NULL);
  /* everything left gets its final event */
  while (e->incoming) {
    seq *s = e->incoming;
    e->incoming = s->next;
    finish_seq(e, s, LLM_FINISH_CANCELLED, NULL);
  }
  while (e->n_running) finish_seq(e, e->running[0], LLM_FINISH_CANCELLED, NULL);
  while (e->n_waiting) finish_seq(e, e->waiting[0], LLM_FINISH_CANCELLED, NULL);
  llm_scratch_destroy(e->scratch);
  llm_pool_destroy(e->pool);
  llm_kv_destroy(e->kv);
  llm_grammar_vocab_destroy(e->gvocab);
  pthread_mutex_destroy(&e->gvocab_mu);
  llm_tokenizer_destroy(e->tok);
  llm_model_destroy(e->model);
  llm_gguf_close(e->g);
  free(e->running);
  free(e->waiting);
  free(e->b_token);
  free(e->b_pos);
  free(e->b_seq);
  free(e->b_want);
  free(e->b_tables);
  free(e->logits);
  free(e->probs);
  free(e->idx);
  free(e->pbuf);
  free(e->sched);
  free(e->textbuf);
  free(e->live);
  free(e->chat_template);
  llm_jinja_free(e->jinja);
  free(e->bos_text);
  free(e->eos_text);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

/* ---- submit / cancel ---- */
static bool seq_push_token(seq *s, int32_t t) {
  if (s->n_tokens == s->cap_tokens) {
    int nc = s->cap_tokens ? s->cap_tokens * 2 : 64;
    int32_t *nt = realloc(s->tokens, (size_t)nc * 4);
    if (!nt) return false;
    s->tokens = nt;
    s->cap_tokens = nc;
  }
  s->tokens[s->n_tokens++] = t;
  return true;
}

/* Under e->mu. st.waiting: the last published count plus the submits since (each step
 * republishes it). */
static cinfer_status *admission_check_locked(llm_engine *e) {
  if (e->o.max_waiting <= 0 || e->st.waiting < e->o.max_waiting) return NULL;
  e->st.refused_waiting_total++;
  return cinfer_status_new(CINFER_UNAVAILABLE, "the engine is full: %d sequences waiting (max_waiting %d) and %d "
                           "running; retry later", e->st.waiting, e->o.max_waiting, e->st.running);
}

cinfer_status *llm_engine_admission_check(llm_engine *e) {
  pthread_mutex_lock(&e->mu);
  cinfer_status *st = admission_check_locked(e);
  pthread_mutex_unlock(&e->mu);
  return st;
}

cinfer_status *llm_engine_submit(llm_engine *e, const llm_request *req, llm_stream_fn cb, void *user,
                                 uint64_t *seq_id) {
  if (seq_id) *seq_id = 0;
  if (!cb) return cinfer_status_new(CINFER_INVALID_ARG, "submit: callback required");
  cinfer_status *st = llm_sampling_check(&req->sampling);
  if (st) return st;
  int32_t *toks = NULL;
  size_t nt = 0;
  if (req->prompt) {
    if ((st = llm_tokenize(e->tok, req->prompt, req->prompt_len, req->add_special, req->parse_special, &toks, &nt)))
      return st;
  } else {
    if (!req->tokens || req->n_tokens == 0) return cinfer_status_new(CINFER_INVALID_ARG, "submit: empty prompt");
    for (size_t i = 0; i < req->n_tokens; i++)
      if (req->tokens[i] < 0 || req->tokens[i] >= e->n_vocab)
        return cinfer_status_new(CINFER_INVALID_ARG, "submit: token %zu (%d) out of range [0, %d)", i, req->tokens[i],
                                 e->n_vocab);
    nt = req->n_tokens;
  }
  if (nt == 0) {
    free(toks);
    return cinfer_status_new(CINFER_INVALID_ARG, "submit: the prompt has no tokens");
  }
  int blocks_total = e->o.kv_blocks;
  if (nt >= (size_t)e->o.ctx_len || (nt + 1 + e->bs - 1) / e->bs > (size_t)blocks_total) {
    free(toks);
    pthread_mutex_lock(&e->mu);
    e->st.refused_too_long_total++;
    pthread_mutex_unlock(&e->mu);
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "prompt has %zu tokens; the context holds %d (and the KV cache %d) including at least one "
                             "generated token",
                             nt, e->o.ctx_len, blocks_total * e->bs);
  }
  seq *s = calloc(1, sizeof *s);
  if (!s) {
    free(toks);
    return cinfer_status_oom("submit");
  }
  s->sp = req->sampling;
  s->plp_done = 1; /* the first prompt token has no logprob */
  bool ok = true;
  if (s->sp.n_stop) {
    s->stop = calloc((size_t)s->sp.n_stop, sizeof *s->stop);
    ok = s->stop != NULL;
    for (int i = 0; ok && i < s->sp.n_stop; i++) ok = (s->stop[i] = strdup(req->sampling.stop[i])) != NULL;
  }
  s->sp.stop = NULL;
  if (ok && s->sp.n_stop_tokens) {
    s->stop_tokens = malloc((size_t)s->sp.n_stop_tokens * 4);
    if ((ok = s->stop_tokens != NULL)) memcpy(s->stop_tokens, req->sampling.stop_tokens, (size_t)s->sp.n_stop_tokens * 4);
  }
  s->sp.stop_tokens = NULL;
  s->sp.grammar = NULL;
  if (ok && req->sampling.grammar) {
    pthread_mutex_lock(&e->gvocab_mu);
    st = e->gvocab ? NULL : llm_grammar_vocab_create(e->tok, &e->gvocab);
    pthread_mutex_unlock(&e->gvocab_mu);
    if (!st) st = llm_grammar_state_create(req->sampling.grammar, &s->gs);
    if (st) {
      free(toks);
      seq_free(s);
      return st;
    }
  }
  s->cap_tokens = (int)nt + 64;
  s->tokens = malloc((size_t)s->cap_tokens * 4);
  ok = ok && s->tokens;
  if (!ok) {
    free(toks);
    seq_free(s);
    return cinfer_status_oom("submit");
  }
  memcpy(s->tokens, toks ? toks : req->tokens, nt * 4);
  free(toks);
  s->n_tokens = s->n_prompt = (int)nt;
  int room = e->o.ctx_len - (int)nt;
  s->max_total = (int)nt + (s->sp.max_tokens < room ? s->sp.max_tokens : room);
  s->cb = cb;
  s->user = user;
  s->t_submit = clock_now_s();
  pthread_mutex_lock(&e->mu);
  if (e->stop) {
    pthread_mutex_unlock(&e->mu);
    seq_free(s);
    return cinfer_status_new(CINFER_UNAVAILABLE, "engine is shutting down");
  }
  cinfer_status *full = admission_check_locked(e);
  if (full) {
    pthread_mutex_unlock(&e->mu);
    seq_free(s);
    return full;
  }
  if (e->n_live == e->cap_live) {
    int nc = e->cap_live ? e->cap_live * 2 : 64;
    seq **nl = realloc(e->live, (size_t)nc * sizeof *nl);
    if (!nl) {
      pthread_mutex_unlock(&e->mu);
      seq_free(s);
      return cinfer_status_oom("submit");
    }
    e->live = nl;
    e->cap_live = nc;
  }
  e->live[e->n_live++] = s;
  s->id = e->next_id++;
  uint64_t seed = s->sp.seed >= 0 ? (uint64_t)s->sp.seed : (uint64_t)(s->t_submit * 1e9) ^ (s->id * 0x9E3779B97F4A7C15ull);
  s->rng = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  if (!s->rng) s->rng = 1;
  if (e->incoming_tail) e->incoming_tail->next = s; else e->incoming = s;
  e->incoming_tail = s;
  e->st.waiting++;
  if (seq_id) *seq_id = s->id;
  pthread_cond_signal(&e->cv);
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

cinfer_status *llm_engine_cancel(llm_engine *e, uint64_t id) {
  pthread_mutex_lock(&e->mu);
  for (int i = 0; i < e->n_live; i++)
    if (e->live[i]->id == id) {
      atomic_store(&e->live[i]->cancel, true);
      pthread_cond_signal(&e->cv);
      pthread_mutex_unlock(&e->mu);
      return NULL;
    }
  pthread_mutex_unlock(&e->mu);
  return cinfer_status_new(CINFER_NOT_FOUND, "sequence %llu not found (finished or never submitted)",
                           (unsigned long long)id);
}

/* ---- events ---- */
static void release_blocks(llm_engine *e, seq *s) {
  for (int i = 0; i < s->n_blocks; i++) llm_kv_release(e->kv, s->blocks[i]);
  s->n_blocks = 0;
}

static void emit(llm_engine *e, seq *s, int32_t token, const char *text, size_t n, float lp,
                 const llm_token_logprob *top, int n_top, llm_finish f, const char *err) {
  llm_event ev = {.seq_id = s->id, .token = token, .text = text ? text : "", .text_len = n, .logprob = lp,
                  .top = top, .n_top = n_top, .finish = f, .error = err};
  if (f != LLM_FINISH_NONE) {
    double t = clock_now_s();
    ev.prompt_tokens = s->n_prompt;
    ev.completion_tokens = s->n_generated;
    ev.cached_tokens = s->cached_tokens;
    ev.queue_s = s->t_sched > 0 ? s->t_sched - s->t_submit : t - s->t_submit;
    ev.ttft_s = s->t_first > 0 ? s->t_first - s->t_submit : 0;
    ev.e2e_s = t - s->t_submit;
  }
  s->cb(s->user, &ev);
}

/* Removes s from every list, releases its blocks, sends the final event, frees it. */
static void finish_seq(llm_engine *e, seq *s, llm_finish f, const char *err) {
  for (int i = 0; i < e->n_running; i++)
    if (e->running[i] == s) {
      memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof *e->running);
      e->n_running--;
      break;
    }
  for (int i = 0; i < e->n_waiting; i++)
    if (e->waiting[i] == s) {
      memmove(&e->waiting[i], &e->waiting[i + 1], (size_t)(e->n_waiting - i - 1) * sizeof *e->waiting);
      e->n_waiting--;
      break;
    }
  release_blocks(e, s);
  /* flush held text unless a stop string ended it */
  char tail[64];
  size_t tn = f == LLM_FINISH_LENGTH || f == LLM_FINISH_STOP ? llm_detok_flush(&s->detok, tail, sizeof tail) : 0;
  pthread_mutex_lock(&e->mu);
  for (int i = 0; i < e->n_live; i++)
    if (e->live[i] == s) {
      e->live[i] = e->live[--e->n_live];
      break;
    }
  e->st.requests_finished_total++;
  pthread_mutex_unlock(&e->mu);
  /* the gauges before the final event: a client that has its response never reads its
   * sequence as still running or waiting */
  (void)publish_gauges(e);
  if (tn && s->held_n + tn <= s->held_cap) {
    memcpy(s->held + s->held_n, tail, tn);
    s->held_n += tn;
  }
  emit(e, s, -1, s->held, s->held_n, 0, NULL, 0, f, err);
  seq_free(s);
}

/* ---- sampling ---- */
static uint64_t rng_next(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
  const float *p = ctx;
  float x = p[*(const int32_t *)a], y = p[*(const int32_t *)b];
  return x < y ? 1 : x > y ? -1 : *(const int32_t *)a - *(const int32_t *)b;
}

static void apply_penalties(seq *s, float *logits) {
  const llm_sampling *sp = &s->sp;
  if (sp->repetition_penalty == 1.0f && sp->presence_penalty == 0 && sp->frequency_penalty == 0) return;
  int start = s->n_tokens > PENALTY_WINDOW ? s->n_tokens - PENALTY_WINDOW : 0;
  for (int i = start; i < s->n_tokens; i++) {
    int32_t t = s->tokens[i];
    bool seen = false;
    int count = 0;
    for (int j = start; j < s->n_tokens; j++) {
      if (s->tokens[j] == t) {
        if (j < i) { seen = true; break; }
        count++;
      }
    }
    if (seen) continue; /* handle each distinct token once */
    float *l = &logits[t];
    if (sp->repetition_penalty != 1.0f) *l = *l <= 0 ? *l * sp->repetition_penalty : *l / sp->repetition_penalty;
    *l -= (float)count * sp->frequency_penalty + (count > 0 ? sp->presence_penalty : 0);
  }
}

/* log-sum-exp of a logits row (the log-softmax's normaliser), and its k best entries as
 * logprobs, best first (ties: lower id first). */
static double row_logsoftmax(const float *logits, int n, int k, llm_token_logprob *top, int *n_top) {
  float mx = -INFINITY;
  double lse = 0;
  for (int i = 0; i < n; i++) mx = fmaxf(mx, logits[i]);
  for (int i = 0; i < n; i++) lse += exp((double)(logits[i] - mx));
  lse = log(lse) + mx;
  *n_top = 0;
  for (int i = 0; i < n && k > 0; i++) { /* top k by partial selection */
    float v = logits[i];
    if (*n_top < k || v > top[*n_top - 1].logprob) {
      int j = *n_top < k ? (*n_top)++ : k - 1;
      while (j > 0 && top[j - 1].logprob < v) {
        top[j] = top[j - 1];
        j--;
      }
      top[j] = (llm_token_logprob){i, v};
    }
  }
  for (int i = 0; i < *n_top; i++) top[i].logprob = (float)(top[i].logprob - lse);
  return lse;
}

/* Chooses a token from (penalised, possibly masked) logits: greedy, or temperature with
 * top-k / min-p / top-p. Reads logits only. */
static int32_t pick(llm_engine *e, seq *s, const float *logits) {
  int n = e->n_vocab;
  int32_t chosen = 0;
  if (s->sp.temperature == 0.0f) {
    chosen = llm_argmax(logits, n);
  } else {
    int32_t *idx = e->idx;
    float *pbuf = e->pbuf;
    float t = s->sp.temperature, mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, logits[i]);
    double sum = 0;
    int m = 0;
    if (s->sp.top_k == 0 && s->sp.top_p >= 1.0f && s->sp.min_p == 0) {
      /* plain temperature sampling: no ordering needed, one linear pass */
      for (int i = 0; i < n; i++) {
        idx[i] = i;
        pbuf[i] = expf((logits[i] - mx) / t);
        sum += pbuf[i];
      }
      m = n;
    } else {
      /* candidates whose probability relative to the best is above e^-40 (the rest hold
       * < n * 4e-18 of the mass), sorted by logit; then top-k, softmax, min-p, top-p */
      for (int i = 0; i < n; i++)
        if ((logits[i] - mx) / t > -40.0f) idx[m++] = i;
      qsort_r(idx, (size_t)m, sizeof *idx, cmp_desc, (void *)(uintptr_t)logits); /* read only */
      if (s->sp.top_k > 0 && s->sp.top_k < m) m = s->sp.top_k;
      for (int i = 0; i < m; i++) {
        pbuf[i] = expf((logits[idx[i]] - mx) / t);
        sum += pbuf[i];
      }
    }
    /* min_p: drop candidates below min_p * max prob */
    if (s->sp.min_p > 0) {
      float thr = s->sp.min_p * pbuf[0];
      int mm = 1;
      while (mm < m && pbuf[mm] >= thr) mm++;
      if (mm < m) {
        m = mm;
        sum = 0;
        for (int i = 0; i < m; i++) sum += pbuf[i];
      }
    }
    if (s->sp.top_p < 1.0f) {
      double c = 0;
      int mm = 0;
      while (mm < m) {
        c += pbuf[mm++] / sum;
        if (c >= s->sp.top_p) break;
      }
      if (mm < m) {
        m = mm;
        sum = 0;
        for (int i = 0; i < m; i++) sum += pbuf[i];
      }
    }
    double r = (double)(rng_next(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum, c = 0;
    chosen = idx[m - 1];
    for (int i = 0; i < m; i++) {
      c += pbuf[i];
      if (r < c) {
        chosen = idx[i];
        break;
      }
    }
  }
  return chosen;
}

/* Under a grammar: the sampled token when the grammar allows it (greedy, or plain
 * temperature sampling, where drawing again from the masked distribution after a refusal
 * gives exactly the masked distribution), else the choice from the masked logits. -1 when
 * no token can continue, -2 when the mask could not be computed. */
static int32_t pick_constrained(llm_engine *e, seq *s, float *logits) {
  const llm_sampling *sp = &s->sp;
  e->st.grammar_tokens_total++;
  bool plain = sp->temperature == 0.0f || (sp->top_k == 0 && sp->top_p >= 1.0f && sp->min_p == 0);
  if (plain) {
    int32_t t = pick(e, s, logits);
    if (llm_grammar_allows(s->gs, e->tok, t)) return t;
  }
  double t0 = clock_now_s();
  int allowed = llm_grammar_mask(s->gs, e->gvocab, e->tok, logits, e->n_vocab);
  e->st.grammar_masks_total++;
  e->st.grammar_mask_seconds_total += clock_now_s() - t0;
  if (allowed <= 0) return allowed == 0 ? -1 : -2;
  return pick(e, s, logits);
}

/* Returns the sampled token (or pick_constrained's negative codes); fills logprob/top when
 * requested (from the unmodified model distribution). logits is modified. */
static int32_t sample(llm_engine *e, seq *s, float *logits, float *lp, llm_token_logprob *top, int *n_top) {
  int n = e->n_vocab;
  *n_top = 0;
  double lse = 0;
  if (s->sp.logprobs > 0) lse = row_logsoftmax(logits, n, s->sp.logprobs, top, n_top);
  float *raw = e->probs; /* keep raw logits for the chosen token's logprob */
  if (s->sp.logprobs > 0) memcpy(raw, logits, (size_t)n * 4);
  apply_penalties(s, logits);
  int32_t chosen = s->gs ? pick_constrained(e, s, logits) : pick(e, s, logits);
  if (chosen < 0) return chosen;
  if (s->sp.logprobs > 0) *lp = (float)(raw[chosen] - lse);
  return chosen;
}

/* ---- text / stop strings ---- */
static bool held_append(seq *s, const char *p, size_t n) {
  if (s->held_n + n + 64 > s->held_cap) {
    size_t nc = s->held_cap ? s->held_cap : 256;
    while (nc < s->held_n + n + 64) nc *= 2;
    char *nh = realloc(s->held, nc);
    if (!nh) return false;
    s->held = nh;
    s->held_cap = nc;
  }
  memcpy(s->held + s->held_n, p, n);
  s->held_n += n;
  return true;
}

/* After appending text: returns true if a stop string matched (held is cut before it);
 * otherwise *emit_n is the length of the prefix of held that can be streamed now. */
static bool check_stop(seq *s, size_t *emit_n) {
  size_t keep = 0;
  for (int i = 0; i < s->sp.n_stop; i++) {
    const char *st = s->stop[i];
    size_t L = strlen(st);
    if (s->held_n >= L) {
      const char *m = memmem(s->held, s->held_n, st, L);
      if (m) {
        s->held_n = (size_t)(m - s->held);
        *emit_n = s->held_n;
        return true;
      }
    }
    /* longest suffix of held that is a proper prefix of st */
    for (size_t k = L - 1 < s->held_n ? L - 1 : s->held_n; k > keep; k--)
      if (!memcmp(s->held + s->held_n - k, st, k)) {
        keep = k;
        break;
      }
  }
  *emit_n = s->held_n - keep;
  return false;
}

/* ---- the step ---- */
static bool ensure_blocks(llm_engine *e, seq *s, int n_positions) {
  int need = (n_positions + e->bs - 1) / e->bs;
  if (need > s->cap_blocks) {
    int nc = s->cap_blocks ? s->cap_blocks : 8;
    while (nc < need) nc *= 2;
    int32_t *nb = realloc(s->blocks, (size_t)nc * 4);
    if (!nb) return false;
    s->blocks = nb;
    s->cap_blocks = nc;
  }
  while (s->n_blocks < need) {
    int b = llm_kv_alloc(e->kv);
    if (b < 0) return false;
    s->blocks[s->n_blocks++] = b;
  }
  return true;
}

/* Where a sequence of priority p enters WAITING: after every waiting sequence served before it
 * (lower priority value, or equal when it is newer: after_equal). */
static int waiting_slot(const llm_engine *e, uint32_t p, bool after_equal) {
  int i = e->n_waiting;
  while (i > 0 && (e->waiting[i - 1]->sp.priority > p || (!after_equal && e->waiting[i - 1]->sp.priority == p))) i--;
  return i;
}

static void waiting_insert(llm_engine *e, seq *s, bool after_equal) {
  int at = waiting_slot(e, s->sp.priority, after_equal);
  memmove(&e->waiting[at + 1], &e->waiting[at], (size_t)(e->n_waiting - at) * sizeof *e->waiting);
  e->waiting[at] = s;
  e->n_waiting++;
}

/* The running sequence to preempt: lowest priority, most recently admitted among equals. */
static seq *preempt_victim(const llm_engine *e) {
  seq *v = e->running[e->n_running - 1];
  for (int i = e->n_running - 2; i >= 0; i--)
    if (e->running[i]->sp.priority > v->sp.priority) v = e->running[i];
  return v;
}

static void preempt(llm_engine *e, seq *s) {
  for (int i = 0; i < e->n_running; i++)
    if (e->running[i] == s) {
      memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof *e->running);
      e->n_running--;
      break;
    }
  release_blocks(e, s);
  s->n_computed = 0;
  s->n_published = 0;
  s->pub_key = 0;
  s->state = S_WAITING;
  /* ahead of its priority class: it was admitted before every one of them that waits */
  waiting_insert(e, s, false);
  e->st.preemptions_total++;
}

static bool waiting_reserve(llm_engine *e, int extra) {
  if (e->n_waiting + extra <= e->cap_waiting) return true;
  int nc = e->cap_waiting ? e->cap_waiting : 64;
  while (nc < e->n_waiting + extra) nc *= 2;
  seq **nw = realloc(e->waiting, (size_t)nc * sizeof *nw);
  if (!nw) return false;
  e->waiting = nw;
  e->cap_waiting = nc;
  return true;
}

/* Admits waiting[0] if its prompt fits in free blocks; shares prefix-cached blocks. */
static bool admit_one(llm_engine *e) {
  seq *s = e->waiting[0];
  int n = s->n_tokens;
  /* prefix cache: full blocks, leaving at least one token to compute */
  int hits = 0;
  uint64_t key = 0;
  bool use_cache = !e->o.no_prefix_cache && !(s->sp.prompt_logprobs && s->plp_done < s->n_prompt);
  if (!ensure_blocks(e, s, 0)) return false;
  int need_total = (n + e->bs - 1) / e->bs;
  if (s->cap_blocks < need_total + 1) {
    int32_t *nb = realloc(s->blocks, (size_t)(need_total + 1) * 4);
    if (!nb) return false;
    s->blocks = nb;
    s->cap_blocks = need_total + 1;
  }
  if (use_cache) {
    int maxb = (n - 1) / e->bs;
    while (hits < maxb) {
      uint64_t k2 = llm_kv_hash(key, s->tokens + (size_t)hits * e->bs, e->bs);
      int b = llm_kv_lookup(e->kv, k2, s->tokens + (size_t)hits * e->bs);
      if (b < 0) break;
      s->blocks[s->n_blocks++] = b;
      key = k2;
      hits++;
    }
  }
  /* the rest of the prompt's next block may begin like a cached block after the same
   * prefix (an earlier sequence went on past it): copy those rows instead of computing
   * them, again leaving at least one token to compute */
  int part_src = -1, part_len = 0, rest = n - 1 - hits * e->bs;
  if (use_cache && rest > 0)
    part_src = llm_kv_match_partial(e->kv, key, s->tokens + (size_t)hits * e->bs, rest, &part_len);
  if (part_src >= 0 && llm_kv_available(e->kv) < need_total - hits) {
    llm_kv_release(e->kv, part_src); /* its pin would cost the block this prompt needs */
    part_src = -1;
    part_len = 0;
  }
  if (llm_kv_available(e->kv) < need_total - hits || !ensure_blocks(e, s, n)) {
    if (part_src >= 0) llm_kv_release(e->kv, part_src);
    release_blocks(e, s); /* not admitted: shared blocks go back (still cached) */
    return false;
  }
  if (part_src >= 0) {
    llm_kv_copy_rows(e->kv, part_src, s->blocks[hits], part_len);
    llm_kv_release(e->kv, part_src);
  }
  if (!e->o.no_prefix_cache && s->n_generated == 0) { /* counted once, when admitted */
    e->st.prefix_queries_total += (uint64_t)n;
    e->st.prefix_hits_total += (uint64_t)(hits * e->bs + part_len);
  }
  s->n_computed = hits * e->bs + part_len;
  s->n_published = hits;
  s->pub_key = key;
  if (s->n_generated == 0) s->cached_tokens = hits * e->bs + part_len;
  s->state = S_RUNNING;
  if (s->t_sched == 0) s->t_sched = clock_now_s();
  memmove(&e->waiting[0], &e->waiting[1], (size_t)(e->n_waiting - 1) * sizeof *e->waiting);
  e->n_waiting--;
  e->running[e->n_running++] = s;
  return true;
}

static void publish_blocks(llm_engine *e, seq *s) {
  if (e->o.no_prefix_cache) return;
  while (s->n_published < s->n_computed / e->bs) {
    const int32_t *t = s->tokens + (size_t)s->n_published * e->bs;
    uint64_t parent = s->pub_key;
    s->pub_key = llm_kv_hash(parent, t, e->bs);
    llm_kv_publish(e->kv, s->blocks[s->n_published], parent, s->pub_key, t);
    s->n_published++;
  }
}

/* prompt_logprobs: sends the prompt-token events for the wanted rows of s's chunk (its
 * first rows, in position order). Returns how many rows they used. */
static int emit_prompt_logprobs(llm_engine *e, seq *s, const float *rows) {
  int used = 0;
  /* the wanted plp positions of the chunk are contiguous (their p + 1 runs from plp_done)
   * and come before the sampling row, which is last when the chunk reached the end */
  int n_plp = s->n_rows - (s->n_computed == s->n_tokens ? 1 : 0);
  llm_token_logprob top[MAX_LOGPROBS];
  for (; used < n_plp; used++) {
    int q = s->plp_done++;
    int n_top = 0;
    const float *row = rows + (size_t)used * e->n_vocab;
    double lse = row_logsoftmax(row, e->n_vocab, s->sp.logprobs, top, &n_top);
    int32_t tok = s->tokens[q];
    int rank = 1;
    for (int v = 0; v < e->n_vocab; v++) rank += row[v] > row[tok];
    llm_event ev = {.seq_id = s->id, .token = tok, .text = "", .logprob = (float)(row[tok] - lse),
                    .top = top, .n_top = n_top, .prompt = true, .pos = q, .rank = rank};
    s->cb(s->user, &ev);
  }
  return used;
}

/* Handles the sampled token of s: append, stream, stop checks. Returns true when s finished. */
static bool handle_token(llm_engine *e, seq *s, const float *row) {
  float *logits = (float *)row;
  float lp = 0;
  llm_token_logprob top[MAX_LOGPROBS];
  int n_top = 0;
  int32_t tok = sample(e, s, logits, &lp, top, &n_top);
  if (tok < 0) {
    finish_seq(e, s, LLM_FINISH_ERROR,
               tok == -1 ? "no token of the vocabulary can continue the grammar"
                         : "the grammar's token mask could not be computed (out of memory, or more "
                           "parse stacks than the limit: the grammar is too ambiguous)");
    return true;
  }
  if (s->t_first == 0) s->t_first = clock_now_s();
  s->n_generated++;
  e->st.generation_tokens_total++;
  bool eog = !s->sp.ignore_eos && llm_tokenizer_is_eog(e->tok, tok);
  for (int i = 0; i < s->sp.n_stop_tokens; i++) eog |= s->stop_tokens[i] == tok;
  if (eog) {
    /* the stop token itself is not streamed as text */
    emit(e, s, tok, "", 0, lp, top, n_top, LLM_FINISH_NONE, NULL);
    finish_seq(e, s, LLM_FINISH_STOP, NULL);
    return true;
  }
  if (s->gs && !llm_grammar_accept(s->gs, e->tok, tok)) {
    finish_seq(e, s, LLM_FINISH_ERROR, "the grammar refused its own allowed token (out of memory?)");
    return true;
  }
  if (!seq_push_token(s, tok)) {
    finish_seq(e, s, LLM_FINISH_ERROR, "out of memory");
    return true;
  }
  size_t need = llm_detok_push(e->tok, &s->detok, tok, false, e->textbuf, e->textbuf_cap);
  if (need > e->textbuf_cap) {
    char *nb = realloc(e->textbuf, need);
    if (!nb) {
      finish_seq(e, s, LLM_FINISH_ERROR, "out of memory");
      return true;
    }
    e->textbuf = nb;
    e->textbuf_cap = need;
    need = llm_detok_push(e->tok, &s->detok, tok, false, e->textbuf, e->textbuf_cap);
  }
  if (!held_append(s, e->textbuf, need)) {
    finish_seq(e, s, LLM_FINISH_ERROR, "out of memory");
    return true;
  }
  size_t en;
  bool stopped = check_stop(s, &en);
  if (stopped) {
    /* stream the text before the stop string with this token, then finish (held empty) */
    emit(e, s, tok, s->held, en, lp, top, n_top, LLM_FINISH_NONE, NULL);
    s->held_n = 0;
    s->detok.npend = 0;
    finish_seq(e, s, LLM_FINISH_STOP, NULL);
    return true;
  }
  emit(e, s, tok, s->held, en, lp, top, n_top, LLM_FINISH_NONE, NULL);
  memmove(s->held, s->held + en, s->held_n - en);
  s->held_n -= en;
  if (s->gs && llm_grammar_must_end(s->gs)) { /* the grammar's sentence is complete */
    finish_seq(e, s, LLM_FINISH_STOP, NULL);
    return true;
  }
  if (s->n_tokens >= s->max_total) {
    finish_seq(e, s, LLM_FINISH_LENGTH, NULL);
    return true;
  }
  return false;
}

/* Appends the next chunk of s (up to the budget) to the batch as sequence k. */
/* prompt_logprobs: position p's logits give the logprob of prompt token p + 1. */
static bool plp_wanted(const seq *s, int p) {
  return s->sp.prompt_logprobs && p + 1 >= s->plp_done && p + 1 < s->n_prompt;
}

static int add_chunk(llm_engine *e, seq *s, int k, int n, int *budget) {
  int pend = s->n_tokens - s->n_computed;
  int chunk = pend < *budget ? pend : *budget;
  if (s->sp.prompt_logprobs) { /* cut the chunk where its wanted rows would run out */
    int first = s->plp_done - 1 > s->n_computed ? s->plp_done - 1 : s->n_computed;
    int lim = first - s->n_computed + e->plp_left;
    if (chunk > lim) chunk = lim;
  }
  e->sched[k] = s;
  e->b_tables[k] = s->blocks;
  for (int j = 0; j < chunk; j++) {
    int p = s->n_computed + j;
    e->b_token[n] = s->tokens[p];
    e->b_pos[n] = p;
    e->b_seq[n] = k;
    e->b_want[n] = p == s->n_tokens - 1 || plp_wanted(s, p);
    if (plp_wanted(s, p)) e->plp_left--;
    n++;
  }
  *budget -= chunk;
  return n;
}

/* Publishes the gauges the metrics read (under e->mu); returns the sequences still incoming. */
static int publish_gauges(llm_engine *e) {
  llm_kv_stats ks;
  llm_kv_get_stats(e->kv, &ks);
  pthread_mutex_lock(&e->mu);
  e->st.running = e->n_running;
  int inc = 0;
  for (seq *s = e->incoming; s; s = s->next) inc++;
  e->st.waiting = e->n_waiting + inc;
  e->st.kv_blocks_used = ks.n_used;
  e->st.kv_blocks_cached = ks.n_cached;
  e->st.kv_usage = (double)ks.n_used / ks.n_blocks;
  pthread_mutex_unlock(&e->mu);
  return inc;
}

int llm_engine_step(llm_engine *e) {
  /* intake */
  pthread_mutex_lock(&e->mu);
  int nin = 0;
  for (seq *s = e->incoming; s; s = s->next) nin++;
  if (!waiting_reserve(e, nin + e->n_running + 1)) nin = 0;
  seq *in = nin ? e->incoming : NULL;
  if (nin) e->incoming = e->incoming_tail = NULL;
  pthread_mutex_unlock(&e->mu);
  for (seq *s = in; s;) {
    seq *nx = s->next;
    s->next = NULL;
    s->state = S_WAITING;
    waiting_insert(e, s, true);
    e->st.prompt_tokens_total += (uint64_t)s->n_prompt;
    s = nx;
  }
  /* cancellations */
  for (int i = 0; i < e->n_running; i++)
    if (atomic_load(&e->running[i]->cancel)) finish_seq(e, e->running[i--], LLM_FINISH_CANCELLED, NULL);
  for (int i = 0; i < e->n_waiting; i++)
    if (atomic_load(&e->waiting[i]->cancel)) finish_seq(e, e->waiting[i--], LLM_FINISH_CANCELLED, NULL);
  /* schedule: decodes first (one token each), then prefill chunks, then admissions */
  int budget = e->o.max_step_tokens, n = 0;
  e->plp_left = e->o.prompt_logprob_rows;
  /* out of blocks for a decode: preempt the lowest-priority running sequence (maybe this one)
   * and scan again, since the preemption moved the others; each pass ends or preempts one */
  for (int i = 0; i < e->n_running; i++) {
    seq *s = e->running[i];
    if (s->n_tokens - s->n_computed != 1 || ensure_blocks(e, s, s->n_tokens)) continue;
    preempt(e, preempt_victim(e));
    i = -1;
  }
  int nseq = 0;
  /* pass 0: decodes; pass 1: prefill chunks of running sequences */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < e->n_running && budget > 0; i++) {
      seq *s = e->running[i];
      int pend = s->n_tokens - s->n_computed;
      if ((pass == 0) != (pend == 1) || pend <= 0) continue;
      n = add_chunk(e, s, nseq++, n, &budget);
    }
  while (e->n_waiting && e->n_running < e->o.max_seqs && budget > 0 && admit_one(e))
    n = add_chunk(e, e->running[e->n_running - 1], nseq++, n, &budget);
  /* The gauges are published before the forward pass too: a sequence's first token reaches its
   * client during this step, and a client that then reads the metrics must see it running. */
  publish_gauges(e);
  if (n > 0) {
    llm_batch b = {n, e->b_token, e->b_pos, e->b_seq, e->b_want, e->b_tables};
    double t0 = e->trace ? clock_now_s() : 0;
    llm_model_forward(e->model, e->kv, e->pool, e->scratch, &b, e->logits);
    if (e->trace)
      fprintf(stderr,
              "llm step %llu: %d tokens from %d seqs in %.2f ms; running %d waiting %d; kv available %d; "
              "preemptions %llu; pool ran alone %llu times\n",
              (unsigned long long)e->st.steps_total, n, nseq, (clock_now_s() - t0) * 1e3, e->n_running, e->n_waiting,
              llm_kv_available(e->kv), (unsigned long long)e->st.preemptions_total,
              (unsigned long long)llm_pool_solo_events(e->pool));
    e->st.steps_total++;
    int row = 0, i = 0;
    for (int k = 0; k < nseq; k++) {
      seq *s = e->sched[k];
      int cnt = 0, rows = 0;
      while (i < n && e->b_seq[i] == k) {
        rows += e->b_want[i];
        cnt++;
        i++;
      }
      s->n_computed += cnt;
      s->logits_row = rows ? row : -1;
      s->n_rows = rows;
      row += rows;
    }
    for (int k = 0; k < nseq; k++) {
      seq *s = e->sched[k];
      publish_blocks(e, s);
      if (s->logits_row < 0) continue;
      const float *rows = e->logits + (size_t)s->logits_row * e->n_vocab;
      int n_plp = emit_prompt_logprobs(e, s, rows);
      if (s->n_computed == s->n_tokens) handle_token(e, s, rows + (size_t)n_plp * e->n_vocab);
    }
  }
  return e->n_running + e->n_waiting + publish_gauges(e);
}

static void *step_main(void *arg) {
  llm_engine *e = arg;
  for (;;) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && !e->incoming && e->n_running == 0 && e->n_waiting == 0) {
      /* idle: also wake for cancellations of nothing (no-op) */
      pthread_cond_wait(&e->cv, &e->mu);
    }
    bool stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    if (stop) return NULL;
    llm_engine_step(e);
  }
}

void llm_engine_get_stats(llm_engine *e, llm_engine_stats *st) {
  pthread_mutex_lock(&e->mu);
  *st = e->st;
  pthread_mutex_unlock(&e->mu);
}

void llm_engine_model_info(const llm_engine *e, llm_model_info *info) {
  const llm_hparams *hp = llm_model_hparams(e->model);
  info->n_vocab = hp->n_vocab;
  info->ctx_len = e->o.ctx_len;
  info->ctx_train = hp->ctx_train;
  info->n_layers = hp->n_layers;
  info->dim = hp->dim;
  info->name = e->name;
  info->arch = e->arch;
  info->bos = llm_tokenizer_bos(e->tok);
  info->eos = llm_tokenizer_eos(e->tok);
  info->chat_template = llm_tokenizer_chat_template(e->tok);
  info->kv_blocks = e->o.kv_blocks;
  info->block_size = e->o.block_size;
  info->max_seqs = e->o.max_seqs;
  info->max_waiting = e->o.max_waiting;
  info->kv_block_bytes = e->block_bytes;
}

/* ---- KV cache size ---- */

size_t llm_machine_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  size_t mem = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r"); /* cgroup v2; "max" when unlimited */
  if (f) {
    unsigned long long lim;
    if (fscanf(f, "%llu", &lim) == 1 && lim > 0 && (mem == 0 || lim < mem)) mem = (size_t)lim;
    fclose(f);
  }
  return mem;
}

cinfer_status *llm_parse_kv_memory(const char *what, const char *text, size_t *bytes) {
  *bytes = 0;
  if (!text || !*text)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: empty; give bytes (e.g. 2G, 512MiB) or a fraction of memory "
                             "(e.g. 0.25 or 25%%)", what);
  const char *p = text;
  if (*p == '-' || *p == '+' || !((*p >= '0' && *p <= '9') || *p == '.'))
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s' is not a size: give bytes (e.g. 2G, 512MiB) or a fraction "
                             "of memory (e.g. 0.25 or 25%%)", what, text);
  char *end;
  errno = 0;
  double x = strtod(p, &end);
  if (errno || end == p || !isfinite(x) || x <= 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s' is not a positive size", what, text);
  bool has_dot = memchr(p, '.', (size_t)(end - p)) != NULL || memchr(p, 'e', (size_t)(end - p)) ||
                 memchr(p, 'E', (size_t)(end - p));
  const char *suf = end;
  double mult = 0, frac = -1;
  static const struct { const char *s; double m; } sufs[] = {
      {"", 1}, {"B", 1}, {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3}, {"M", 1048576.0}, {"MiB", 1048576.0},
      {"MB", 1e6}, {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}, {"T", 1099511627776.0},
      {"TiB", 1099511627776.0}, {"TB", 1e12}};
  if (!strcmp(suf, "%")) {
    frac = x / 100.0;
  } else if (!*suf && has_dot) {
    frac = x;
  } else {
    for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++)
      if (!strcasecmp(suf, sufs[i].s)) mult = sufs[i].m;
    if (mult == 0)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': unknown unit '%s' (K, M, G, T, KiB ... TiB, KB ... TB, "
                               "or %% of memory)", what, text, suf);
  }
  size_t mem = llm_machine_memory();
  double b;
  if (frac >= 0) {
    if (frac <= 0 || frac > 1)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': a fraction of memory must be in (0, 1] (or 0%%..100%%)",
                               what, text);
    if (!mem)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': the machine's memory is unknown; give bytes", what,
                               text);
    b = frac * (double)mem;
  } else {
    b = x * mult;
  }
  if (b < 1 || b != b)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s' is less than one byte", what, text);
  if (mem && b > (double)mem)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s' (%.0f bytes) is more than the machine's memory (%zu bytes)",
                             what, text, b, mem);
  if (b > 1.8e19)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s' is too large", what, text);
  *bytes = (size_t)b;
  return NULL;
}

cinfer_status *llm_engine_tokenize(const llm_engine *e, const char *text, size_t n, bool add_special,
                                   bool parse_special, int32_t **out, size_t *n_out) {
  return llm_tokenize(e->tok, text, n, add_special, parse_special, out, n_out);
}

cinfer_status *llm_engine_detokenize(const llm_engine *e, const int32_t *ids, size_t n, bool special, char **out,
                                     size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  size_t total = 1;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= llm_tokenizer_n_vocab(e->tok))
      return cinfer_status_new(CINFER_INVALID_ARG, "detokenize: token %zu (%d) out of range", i, ids[i]);
    size_t l;
    llm_token_piece(e->tok, ids[i], special, &l);
    total += l;
  }
  char *b = malloc(total);
  if (!b) return cinfer_status_oom("detokenize");
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l;
    const char *p = llm_token_piece(e->tok, ids[i], special, &l);
    memcpy(b + o, p, l);
    o += l;
  }
  b[o] = 0;
  /* SentencePiece vocabularies with add_space_prefix: the space the tokenizer added before
   * the text is not part of it (llama_detokenize drops it too). */
  if (o && b[0] == ' ' && llm_tokenizer_add_space_prefix(e->tok)) memmove(b, b + 1, o--);
  *out = b;
  *out_len = o;
  return NULL;
}

cinfer_status *llm_engine_chat_render(const llm_engine *e, const char *const *roles, const char *const *contents,
                                      size_t n, bool add_generation_prompt, char **out) {
  if (e->jinja) {
    llm_jinja_msg *jm = calloc(n ? n : 1, sizeof *jm);
    if (!jm) return cinfer_status_oom("chat");
    for (size_t i = 0; i < n; i++) {
      if (!roles[i] || !contents[i]) {
        free(jm);
        return cinfer_status_new(CINFER_INVALID_ARG, "chat: message %zu has no role or content", i);
      }
      jm[i] = (llm_jinja_msg){roles[i], contents[i]};
    }
    cinfer_status *st = llm_jinja_render(e->jinja, jm, n, add_generation_prompt, e->bos_text, e->eos_text, out);
    free(jm);
    /* As llama.cpp's common_chat apply: a template that starts with {{ bos_token }} (Gemma)
     * would give two BOS tokens when the tokenizer adds one, so the leading one is removed */
    size_t bl = e->bos_text ? strlen(e->bos_text) : 0;
    if (!st && bl && llm_tokenizer_add_bos(e->tok) && !strncmp(*out, e->bos_text, bl))
      memmove(*out, *out + bl, strlen(*out + bl) + 1);
    return st;
  }
  llm_chat_msg *m = calloc(n ? n : 1, sizeof *m);
  if (!m) return cinfer_status_oom("chat");
  for (size_t i = 0; i < n; i++) m[i] = (llm_chat_msg){roles[i], contents[i]};
  cinfer_status *st = llm_chat_render(e->tok, e->chat_template, m, n, add_generation_prompt, out);
  free(m);
  return st;
}

cinfer_status *llm_gguf_dump_file(const char *path, FILE *f) {
  llm_gguf *g;
  cinfer_status *st = llm_gguf_open(path, &g);
  if (st) return st;
  llm_gguf_dump(g, f);
  llm_gguf_close(g);
  return NULL;
}
