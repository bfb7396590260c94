/* llm_backend.h: the `llm` backend: a GGUF model served by the LLM engine
 * (src/backends/llm) behind the backend ABI, so LLM models live in the model repository
 * with states, versions, reload and unload like every other model. Frontends reach it only
 * through the server (cinfer_request, and the optional text methods of backend.h); no
 * frontend includes this header.
 *
 * Request (decoupled): input `text_input` (BYTES, one element: the prompt) and parameters
 *   stream (bool, false)     false: one FINAL response, `text_output` = the whole text
 *                            (KServe); true: one response per engine event, as below
 *   n (int 1..16, 1)         choices, each its own sequence (n > 1 needs stream)
 *   max_tokens, top_k, seed, logprobs (0..20)           int
 *   temperature, top_p, min_p, repetition_penalty,
 *   presence_penalty, frequency_penalty                  double (an int is accepted)
 *   ignore_eos, add_special (true), parse_special (false)  bool
 *   stop (one string) or stop_list (a JSON array of up to 8 strings)
 * The prompt is tokenized once, on the model's worker thread; a prompt as long as the
 * context is INVALID_ARG ("This model's maximum context length is ...").
 *
 * Responses in stream mode, one per event of a sequence (0..N, never FINAL):
 *   text_output BYTES[1]  new text (may be empty)   index INT32[1]  the choice
 *   token_id INT32[1]     the sampled token, -1 when the event has none
 *   with logprobs > 0 and a token: logprob FP32[1], top_token_ids INT32[k], top_logprobs FP32[k]
 *   parameter prompt_logprobs (BOOL, needs stream): first one response per prompt token,
 *     with prompt_pos INT32[1] (0, 1, ...), token_id, and (from position 1) logprob and the
 *     top `logprobs` alternatives and rank INT32[1] (1 + the tokens of the vocabulary with
 *     a higher logit); position 0 carries no logprob
 *   on a sequence's last event: finish_reason BYTES[1] ("stop" | "length") and
 *                          usage INT32[3] (prompt, completion, cached prompt tokens)
 * then one FINAL response without outputs once every sequence has finished, or FINAL with
 * an error: CANCELLED after cinfer_request_cancel (the sequences stop at once through the
 * cancel method and free their KV blocks), INTERNAL "generation failed: ..." otherwise. */
#ifndef CINFER_LLM_BACKEND_H
#define CINFER_LLM_BACKEND_H

#include "cinfer/backend.h"

extern const cinfer_backend_iface cinfer_llm_backend;

/* Process-wide defaults for the llm models that do not set the parameter themselves (the
 * flags of `cinfer serve`): key "kv_cache_memory" (--kv-cache-memory) or "max_waiting"
 * (--llm-max-waiting). The value is checked here (INVALID_ARG naming `flag`), copied, and
 * applies to models loaded afterwards. Call before the server starts loading models. */
cinfer_status *cinfer_llm_set_default(const char *key, const char *value, const char *flag);

#endif
