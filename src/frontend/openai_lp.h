/* openai_lp.h: the OpenAI logprobs JSON, written straight into a buffer. Every logprobs
 * value of every answer goes through here: whole and streamed completions (the parallel
 * arrays, oai_lp_list), chat (openai.c writes its entries with oai_lp_string and
 * oai_lp_logprob) and vLLM's prompt_logprobs.
 *   - a string: invalid UTF-8 bytes as U+FFFD; '"', '\\', \b, \f, \n, \r, \t escaped by
 *     name, other bytes below 0x20 (NUL included: a token's text is kept whole) as \u00xx;
 *   - a number: the float rounded to 6 significant digits ("%.6g"), then written as the
 *     shortest of %1.15g / %1.17g that reads back (so -0 stays "-0");
 *   - a logprob: as a number, except that a value below -9999 (-inf: a token the sampler
 *     could not pick) is -9999, as vLLM and OpenAI clamp it (vLLM's max(logprob, -9999.0)),
 *     and NaN or +inf (no logprob can be either) is null. The output is always valid JSON.
 * test_openai_lp checks the strings and numbers against cJSON's reading of them. */
#ifndef CINFER_FRONTEND_OPENAI_LP_H
#define CINFER_FRONTEND_OPENAI_LP_H

#include <stddef.h>

#include "core/buf.h"

/* The floor of a logprob in an answer (vLLM's -9999.0). */
#define OAI_LP_FLOOR (-9999.0f)

/* Writes s[0..n) as a JSON string (see above); *chars (if not NULL) grows by the string's
 * characters (code points; an invalid byte is one U+FFFD), as text_offset counts them. */
void oai_lp_string(cbuf *b, const char *s, size_t n, int *chars);
void oai_lp_number(cbuf *b, float v);
void oai_lp_logprob(cbuf *b, float v);

/* The completions logprobs of a run of tokens, kept as the bodies of the four parallel
 * arrays: {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{..}],"text_offset":[..]}.
 * Zero-initialise; per token: oai_lp_list_token, then oai_lp_list_top for each
 * alternative (only when the token has a logprob), then oai_lp_list_end. */
typedef struct oai_lp_list {
  cbuf tokens, values, tops;
  int *chars;       /* characters of each token's text, for text_offset */
  size_t n, cap;
  int n_top;        /* alternatives written to the open top_logprobs object; -1: none open */
  bool oom;
} oai_lp_list;

/* A token with its text and its logprob (NULL: none, as for the prompt's first token; its
 * token_logprobs and top_logprobs entries are null). */
void oai_lp_list_token(oai_lp_list *l, const char *text, size_t n, const float *logprob);
void oai_lp_list_top(oai_lp_list *l, const char *text, size_t n, float logprob);
void oai_lp_list_end(oai_lp_list *l);
/* Writes the object for the tokens of a (may be NULL) then b (may be NULL); text_offset
 * counts characters from *off, which ends past the last token (a stream carries it on). */
void oai_lp_list_write(cbuf *out, const oai_lp_list *a, const oai_lp_list *b, int *off);
/* Whether an allocation failed while the list was built. */
bool oai_lp_list_failed(const oai_lp_list *l);
void oai_lp_list_free(oai_lp_list *l);
/* Empties l for the next tokens and keeps its buffers (a stream writes one token at a
 * time without allocating per token). */
void oai_lp_list_clear(oai_lp_list *l);

#endif
