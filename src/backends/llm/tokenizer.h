/* tokenizer.h: the tokenizer stored in a GGUF file (tokenizer.ggml.*), and chat templates.
 *
 * Supported, matching llama.cpp's tokenisation: byte-level BPE (`tokenizer.ggml.model =
 * gpt2`) with the pre-tokenizers `gpt2`/`default`-less GPT-2 regex and the digit-splitting
 * family (`smollm`, `starcoder`, `refact`, `codeshell`, `exaone`, `minerva`, `command-r`);
 * SentencePiece (`llama`: U+2581 spaces, space prefix, merges by score, <0xXX> byte
 * fallback). Control, unknown and user-defined tokens are recognised in text when asked
 * (user-defined always). Other models fail at load with an error naming the value.
 *
 * Streaming detokenisation (llm_detok) never emits half a UTF-8 character: bytes of an
 * incomplete character are held until the next token completes (or invalidates) it.
 *
 * A tokenizer borrows strings from the GGUF mapping: the llm_gguf must outlive it. */
#ifndef CINFER_LLM_TOKENIZER_H
#define CINFER_LLM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/llm/gguf.h"
#include "cinfer/types.h"

typedef struct llm_tokenizer llm_tokenizer;

cinfer_status *llm_tokenizer_create(const llm_gguf *g, llm_tokenizer **out);
void llm_tokenizer_destroy(llm_tokenizer *t);

int32_t llm_tokenizer_n_vocab(const llm_tokenizer *t);
int32_t llm_tokenizer_bos(const llm_tokenizer *t); /* -1 when none */
int32_t llm_tokenizer_eos(const llm_tokenizer *t);
bool llm_tokenizer_add_bos(const llm_tokenizer *t);
/* SentencePiece: raw text is prefixed with a space (tokenizer.ggml.add_space_prefix,
 * default true); false for byte-level BPE. */
bool llm_tokenizer_add_space_prefix(const llm_tokenizer *t);
/* End of generation: eos, eot (<|im_end|>, <|eot_id|>, <|endoftext|> when present). */
bool llm_tokenizer_is_eog(const llm_tokenizer *t, int32_t id);

/* Tokenises n bytes of UTF-8 text. add_special: prepend BOS / append EOS when the model asks
 * for it (tokenizer.ggml.add_bos_token / add_eos_token; SentencePiece adds BOS by default).
 * parse_special: text spelling a control token (e.g. "<|im_start|>") becomes that token.
 * On success *out (caller frees with free()) holds *n_out ids. Invalid UTF-8 is an
 * INVALID_ARG error naming the byte offset. */
cinfer_status *llm_tokenize(const llm_tokenizer *t, const char *text, size_t n, bool add_special,
                            bool parse_special, int32_t **out, size_t *n_out);

/* The bytes a token stands for (borrowed, valid while t lives). Control tokens give their
 * text when `special`, else an empty piece. Out-of-range ids give an empty piece. */
const char *llm_token_piece(const llm_tokenizer *t, int32_t id, bool special, size_t *len);
/* Looks up the id of an exact token text; -1 when absent. */
int32_t llm_token_lookup(const llm_tokenizer *t, const char *text, size_t n);

/* Streaming detokeniser state; zero-initialise. */
typedef struct llm_detok {
  uint8_t pend[8];
  int npend;
  /* Set lstrip before the first push to drop one leading space of the first token's piece,
   * as llama_detokenize does when the model adds a space prefix (see
   * llm_tokenizer_add_space_prefix); left false, pieces are emitted as they are (what a
   * stream of generated tokens wants, as llama.cpp's server does). */
  bool lstrip;
  bool started; /* internal: a token was pushed */
} llm_detok;
/* Appends the token's bytes to the pending ones and writes to out (cap >= 64 + piece length
 * is always enough; returns the bytes needed if cap is too small, writing nothing) the
 * longest prefix that is complete UTF-8. Invalid sequences are passed through as U+FFFD. */
size_t llm_detok_push(const llm_tokenizer *t, llm_detok *st, int32_t id, bool special, char *out,
                      size_t cap);
/* Flushes held bytes at the end of a sequence (as U+FFFD if incomplete). */
size_t llm_detok_flush(llm_detok *st, char *out, size_t cap);

/* ---- chat templates ---- */
typedef struct llm_chat_msg {
  const char *role;    /* "system", "user", "assistant" */
  const char *content;
} llm_chat_msg;

/* The GGUF's tokenizer.chat_template text (borrowed), or NULL. */
const char *llm_tokenizer_chat_template(const llm_tokenizer *t);
/* Renders messages with the model's template (tokenizer.chat_template) or `override`
 * ("chatml"). Returns UNSUPPORTED naming the template when it is not recognised.
 * *out is NUL-terminated, caller frees. */
cinfer_status *llm_chat_render(const llm_tokenizer *t, const char *override, const llm_chat_msg *msgs,
                               size_t n, bool add_generation_prompt, char **out);

#endif
