/* text.c: the text services of generative models (cinfer.h): thin wrappers over the
 * backend's optional methods (backend.h, ABI 1.1) that turn a missing method into
 * CINFER_UNSUPPORTED naming the model, so a frontend never needs a backend's header.
 *
 * May call: nothing of src/server. */
#include "server/internal.h"

#define UNSUPPORTED(m, what) \
  cinfer_status_new(CINFER_UNSUPPORTED, "model '%s' does not support %s", (m)->name, what)

bool cinfer_model_is_generative(const cinfer_model *m) {
  return m->backend->tokenize && (m->backend->flags & CINFER_BACKEND_DECOUPLED);
}

bool cinfer_model_supports_chat(const cinfer_model *m) { return m->backend->render_chat != NULL; }

cinfer_status *cinfer_model_tokenize(const cinfer_model *m, const char *text, size_t len,
                                     bool add_special, bool parse_special, int32_t **ids,
                                     size_t *n) {
  *ids = NULL;
  *n = 0;
  if (!m->backend->tokenize) return UNSUPPORTED(m, "tokenization");
  return m->backend->tokenize(m->backend_model, text, len, add_special, parse_special, ids, n);
}

cinfer_status *cinfer_model_detokenize(const cinfer_model *m, const int32_t *ids, size_t n,
                                       bool special, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  if (!m->backend->detokenize) return UNSUPPORTED(m, "detokenization");
  return m->backend->detokenize(m->backend_model, ids, n, special, text, len);
}

cinfer_status *cinfer_model_render_chat(const cinfer_model *m, const char *const *roles,
                                        const char *const *contents, size_t n,
                                        bool add_generation_prompt, char **out) {
  *out = NULL;
  if (!m->backend->render_chat) return UNSUPPORTED(m, "chat (it has no chat template)");
  return m->backend->render_chat(m->backend_model, roles, contents, n, add_generation_prompt,
                                 out);
}

cinfer_status *cinfer_model_tokenizer_info(const cinfer_model *m, char **json) {
  *json = NULL;
  if (!CINFER_BACKEND_HAS(m->backend, tokenizer_info, 2)) return UNSUPPORTED(m, "tokenizer_info");
  return m->backend->tokenizer_info(m->backend_model, json);
}

uint32_t cinfer_model_backend_metrics(const cinfer_model *m, cinfer_backend_metric *out,
                                      uint32_t cap) {
  return m->backend->metrics ? m->backend->metrics(m->backend_model, out, cap) : 0;
}
