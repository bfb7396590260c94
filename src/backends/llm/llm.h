/* llm.h: the LLM engine's contract: load a GGUF model, submit prompts, stream tokens.
 *
 * An engine owns the model (mmap), tokenizer, paged KV cache (with prefix caching) and a
 * step thread that runs continuous batching: each step admits waiting sequences (when
 * enough free KV blocks exist), runs chunked prefill within a per-step token budget
 * alongside one decode token per running sequence, samples, streams, and retires finished
 * sequences. When KV blocks run out, the most recently admitted sequence is preempted and
 * later recomputed (its cached prefix usually survives in the prefix cache).
 *
 * Threading: every function is thread-safe. Stream callbacks run on the step thread with
 * no engine lock held (they may call llm_engine_cancel/submit) and must not block long.
 * Each successful submit gets exactly one final event (finish != LLM_FINISH_NONE); after
 * it the engine never touches `user` again. */
#ifndef CINFER_LLM_H
#define CINFER_LLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cinfer/types.h"

typedef struct llm_engine llm_engine;

typedef struct llm_engine_opts {
  int threads;            /* compute threads; 0 = online CPUs */
  int ctx_len;            /* max tokens per sequence (prompt + output); 0 = min(model, 4096) */
  int kv_blocks;          /* KV cache blocks; 0 = from kv_bytes */
  size_t kv_bytes;        /* KV memory when kv_blocks is 0; 0 = enough for max_seqs full contexts, capped at 1 GiB */
  int block_size;         /* tokens per KV block; 0 = 16 */
  int max_seqs;           /* max running sequences; 0 = 64 */
  int max_step_tokens;    /* token budget per step (decodes + prefill chunks); 0 = 512 */
  bool no_prefix_cache;   /* disable prefix sharing */
  bool manual_step;       /* no step thread: the caller drives llm_engine_step (tests) */
  int prompt_logprob_rows; /* logits rows per step for prompt_logprobs prefills, beyond one per
                              sequence (each costs n_vocab floats); 0 = 32. Scoring long texts
                              (perplexity) wants max_step_tokens. */
  const char *chat_template; /* override ("chatml"); NULL = the model's; copied */
  int max_waiting;        /* admission: sequences waiting (not running) beyond which submit refuses
                             at once with CINFER_UNAVAILABLE (the client retries later); 0 = no
                             limit. An admitted sequence is never dropped: under KV pressure it is
                             preempted and recomputed. */
} llm_engine_opts;

/* Parses a KV cache size as `--kv-cache-memory` and the model parameter kv_cache_memory take
 * it: bytes, with an optional suffix (K, M, G, T or KiB, MiB, GiB, TiB: powers of 1024; KB,
 * MB, GB, TB: powers of 1000; "1.5G" is allowed), or a fraction of the machine's memory
 * (a number with a decimal point in (0, 1], such as "0.25", or a percentage, "25%"),
 * like vLLM's gpu_memory_utilization but for the KV cache alone. The machine's memory is
 * the physical memory, or the cgroup's memory.max when that is lower. INVALID_ARG naming
 * `what` for anything else (empty, negative, zero, an unknown suffix, a fraction above 1,
 * more than the machine's memory). */
cinfer_status *llm_parse_kv_memory(const char *what, const char *text, size_t *bytes);
/* The memory llm_parse_kv_memory takes fractions of (bytes; 0 when unknown). */
size_t llm_machine_memory(void);

typedef struct llm_sampling {
  float temperature;        /* 0 = greedy (argmax); default 1 */
  int top_k;                /* 0 = off */
  float top_p;              /* 1 = off */
  float min_p;              /* 0 = off */
  float repetition_penalty; /* 1 = off; over the last 64 tokens (prompt + output), as llama.cpp */
  float presence_penalty, frequency_penalty; /* 0 = off; same window */
  int64_t seed;             /* -1 = random */
  int max_tokens;           /* > 0; clipped to the context */
  const char *const *stop;  /* stop strings (copied); the match is not streamed */
  int n_stop;
  const int32_t *stop_tokens; /* extra stop token ids (copied) */
  int n_stop_tokens;
  bool ignore_eos;
  int logprobs;             /* 0 = none; n > 0: chosen token's logprob + top n (n <= 20) */
  struct llm_grammar *grammar; /* NULL = free text; else constrained decoding (grammar.h): the
                               engine takes a reference at submit. Tokens the grammar does not
                               allow are never sampled, end-of-generation only where it accepts,
                               and the sequence stops (finish "stop") when nothing can follow.
                               Logprobs stay those of the model's unconstrained distribution. */
  bool prompt_logprobs;     /* also stream the logprob of every prompt token after the first
                               (events with .prompt set; with the top `logprobs` alternatives),
                               computed in the prefill; such a prompt is never taken from the
                               prefix cache (its logits are needed) */
  uint32_t priority;        /* scheduling class: lower is served first (0 = first, the default);
                               waiting sequences are admitted by priority, then arrival, and
                               under KV pressure the lowest-priority running sequence (the most
                               recently admitted among equals) is preempted first */
} llm_sampling;

/* Fills the defaults above (temperature 1, top_p 1, max_tokens 16, seed -1, ...). */
void llm_sampling_default(llm_sampling *s);
/* INVALID_ARG naming the field when a value is out of range. */
cinfer_status *llm_sampling_check(const llm_sampling *s);

typedef enum llm_finish {
  LLM_FINISH_NONE = 0,   /* more events follow */
  LLM_FINISH_STOP,       /* end-of-generation token, stop token or stop string */
  LLM_FINISH_LENGTH,     /* max_tokens or the context length */
  LLM_FINISH_CANCELLED,  /* llm_engine_cancel or engine shutdown */
  LLM_FINISH_ERROR
} llm_finish;
const char *llm_finish_name(llm_finish f); /* "stop", "length", "cancelled", "error" */

typedef struct llm_token_logprob {
  int32_t id;
  float logprob;
} llm_token_logprob;

/* One streamed event; all pointers are borrowed for the duration of the callback. */
typedef struct llm_event {
  uint64_t seq_id;
  int32_t token;              /* sampled token id, -1 when the event carries none */
  const char *text;           /* new complete UTF-8 text (may be empty; held back while it
                                 could still be the start of a stop string) */
  size_t text_len;
  float logprob;              /* of `token` when logprobs > 0 */
  const llm_token_logprob *top; /* n_top best alternatives when logprobs > 0 */
  int n_top;
  llm_finish finish;
  /* on the final event: */
  int prompt_tokens, completion_tokens, cached_tokens;
  double queue_s, ttft_s, e2e_s; /* submit->first scheduled, submit->first token, submit->finish */
  const char *error;          /* LLM_FINISH_ERROR only */
  /* prompt_logprobs: an event with .prompt set carries prompt token `token` at position
   * `pos` (1..prompt_tokens-1, in order, each once even after a preemption), its logprob
   * given the tokens before it, and top/n_top; no text, finish NONE. */
  bool prompt;
  int pos;
  int rank;                   /* prompt events: 1 + the tokens with a higher logit (vLLM's rank) */
} llm_event;

typedef void (*llm_stream_fn)(void *user, const llm_event *ev);

typedef struct llm_request {
  const char *prompt;         /* UTF-8 text, or NULL to use tokens */
  size_t prompt_len;
  const int32_t *tokens;      /* pre-tokenised prompt (copied) */
  size_t n_tokens;
  bool add_special;           /* add BOS if the model wants it (text prompts) */
  bool parse_special;         /* "<|im_start|>" in text becomes the control token */
  llm_sampling sampling;
} llm_request;

typedef struct llm_engine_stats {
  int running, waiting;
  int kv_blocks_total, kv_blocks_used, kv_blocks_cached;
  double kv_usage;            /* used / total */
  uint64_t prompt_tokens_total, generation_tokens_total;
  uint64_t prefix_queries_total, prefix_hits_total; /* in tokens */
  uint64_t preemptions_total, steps_total, requests_finished_total;
  /* constrained decoding: tokens chosen under a grammar, how many of them needed the full
   * vocabulary mask (the sampled token was not allowed, or top-k/top-p/min-p sampling),
   * and the seconds spent masking */
  uint64_t grammar_tokens_total, grammar_masks_total;
  double grammar_mask_seconds_total;
  /* admission: submits refused because max_waiting sequences were waiting (UNAVAILABLE),
   * and prompts refused because they can never fit the context or the whole KV cache */
  uint64_t refused_waiting_total, refused_too_long_total;
} llm_engine_stats;

typedef struct llm_model_info {
  int n_vocab, ctx_len, ctx_train, n_layers, dim;
  const char *name;           /* general.name or "" (borrowed, lives with the engine) */
  const char *arch;
  int32_t bos, eos;           /* -1 when the vocabulary has none */
  const char *chat_template;  /* tokenizer.chat_template or NULL (borrowed) */
  int kv_blocks, block_size, max_seqs, max_waiting; /* the engine's resolved options */
  size_t kv_block_bytes;      /* bytes per KV block (all layers, K and V) */
} llm_model_info;

/* Loads the model and starts the step thread. *out is NULL on error. */
cinfer_status *llm_engine_create(const char *gguf_path, const llm_engine_opts *opts, llm_engine **out);
/* Cancels everything still running (each gets its final CANCELLED event), joins the step
 * thread and frees all. NULL is a no-op. */
void llm_engine_destroy(llm_engine *e);

/* Queues a request. Errors (bad sampling values, prompt too long for the context or the
 * whole KV cache, invalid UTF-8) are returned here and no event is sent. */
cinfer_status *llm_engine_submit(llm_engine *e, const llm_request *req, llm_stream_fn cb, void *user,
                                 uint64_t *seq_id);
/* Admission before the work of a submit (tokenising, compiling a grammar): UNAVAILABLE, counted
 * in refused_waiting_total, when max_waiting sequences wait now; NULL otherwise (the submit
 * checks again, so a request admitted here can still be refused there). */
cinfer_status *llm_engine_admission_check(llm_engine *e);
/* Asks the engine to stop a sequence; its final event (CANCELLED) follows from the step
 * thread and its KV blocks are released. NOT_FOUND when the id is unknown or finished. */
cinfer_status *llm_engine_cancel(llm_engine *e, uint64_t seq_id);
/* manual_step engines only: runs one step; returns the number of sequences still active. */
int llm_engine_step(llm_engine *e);

void llm_engine_get_stats(llm_engine *e, llm_engine_stats *st);
void llm_engine_model_info(const llm_engine *e, llm_model_info *info);

/* Tokenizer access (thread-safe, no engine state). *out is malloc'd; caller frees. */
cinfer_status *llm_engine_tokenize(const llm_engine *e, const char *text, size_t n, bool add_special,
                                   bool parse_special, int32_t **out, size_t *n_out);
cinfer_status *llm_engine_detokenize(const llm_engine *e, const int32_t *ids, size_t n, bool special,
                                     char **out, size_t *out_len);
/* Renders chat messages (role/content pairs) with the model's template or the override.
 * *out is malloc'd; caller frees. */
cinfer_status *llm_engine_chat_render(const llm_engine *e, const char *const *roles,
                                      const char *const *contents, size_t n, bool add_generation_prompt,
                                      char **out);

/* Prints GGUF metadata and the tensor table of a file (for `cinfer inspect`). */
cinfer_status *llm_gguf_dump_file(const char *path, FILE *f);

#endif
