/* lpscript.c: a scripted generative test backend (backend name "lpscript") for the OpenAI
 * logprobs writer (test_openai_logprobs_values.py). A real model never gives a logprob of
 * -inf or a token that is a NUL byte on demand; this one does. Its tokenizer is bytes (token
 * id = byte value, 0..255, id 0 being the NUL byte), its chat template joins the messages'
 * contents, and every request gets the same three generated tokens in the llm backend's
 * response protocol (src/backends/llm_serving/llm_backend.h):
 *   NUL   logprob -1.25   top: NUL -1.25, 'b' -inf
 *   'c'   logprob -inf    top: 'c' -inf, NUL -1e30
 *   'd'   logprob -0.5    top: 'd' -0.5          finish "length"
 * With the request parameter prompt_logprobs (echo + logprobs), each prompt byte first, the
 * first without a logprob, the second -inf, the others -2. Top lists are cut to the
 * request's `logprobs`; without it no logprob tensors are sent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/backend.h"

static cinfer_status *ls_load(const cinfer_model_load_info *info, void **model) {
  (void)info;
  *model = NULL;
  return NULL;
}
static void ls_unload(void *model) { (void)model; }
static cinfer_status *ls_instance_create(void *model, const cinfer_instance_info *info, void **instance) {
  (void)model, (void)info;
  *instance = NULL;
  return NULL;
}
static void ls_instance_destroy(void *instance) { (void)instance; }

static cinfer_status *ls_tokenize(void *model, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t **ids, size_t *n) {
  (void)model, (void)add_special, (void)parse_special;
  *ids = malloc((len ? len : 1) * sizeof **ids);
  if (!*ids) return cinfer_status_new(CINFER_INTERNAL, "lpscript: out of memory");
  for (size_t i = 0; i < len; i++) (*ids)[i] = (unsigned char)text[i];
  *n = len;
  return NULL;
}

static cinfer_status *ls_detokenize(void *model, const int32_t *ids, size_t n, bool special,
                                    char **text, size_t *len) {
  (void)model, (void)special;
  *text = malloc(n + 1);
  if (!*text) return cinfer_status_new(CINFER_INTERNAL, "lpscript: out of memory");
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] > 255) {
      free(*text);
      *text = NULL;
      return cinfer_status_new(CINFER_INVALID_ARG, "lpscript: token %d is not a byte", ids[i]);
    }
    (*text)[i] = (char)ids[i];
  }
  (*text)[n] = 0;
  *len = n;
  return NULL;
}

static cinfer_status *ls_render_chat(void *model, const char *const *roles, const char *const *contents,
                                     size_t n, bool add_generation_prompt, char **out) {
  (void)model, (void)roles, (void)add_generation_prompt;
  size_t len = 0;
  for (size_t i = 0; i < n; i++) len += strlen(contents[i]);
  if (!(*out = malloc(len + 1))) return cinfer_status_new(CINFER_INTERNAL, "lpscript: out of memory");
  (*out)[0] = 0;
  for (size_t i = 0; i < n; i++) strcat(*out, contents[i]);
  return NULL;
}

typedef struct step {
  int32_t token;
  float logprob;
  int n_top;
  int32_t top_ids[2];
  float top_lp[2];
} step;

/* One response: the token's text, index 0, its id and (when has_lp) logprob and the first
 * k alternatives; prompt_pos >= 0 marks a prompt token; finish adds finish_reason and
 * usage. Returns false when the core refused it (the request is over). */
static bool respond(cinfer_request *r, const step *s, bool has_lp, int64_t k, int32_t prompt_pos,
                    const char *finish, const int32_t usage[3]) {
  unsigned char tb[5] = {1, 0, 0, 0, (unsigned char)s->token}, fb[4 + 16];
  int32_t idx = 0, tok = s->token, rank = 1;
  float lp = s->logprob;
  int32_t n_top = (int32_t)(k < s->n_top ? k : s->n_top);
  cinfer_tensor out[10];
  uint32_t n = 0;
  out[n++] = (cinfer_tensor){.name = "text_output", .dtype = CINFER_TYPE_BYTES, .ndim = 1, .shape = {1},
                             .data = tb, .byte_size = 5};
  out[n++] = (cinfer_tensor){.name = "index", .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {1},
                             .data = &idx, .byte_size = 4};
  out[n++] = (cinfer_tensor){.name = "token_id", .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {1},
                             .data = &tok, .byte_size = 4};
  if (prompt_pos >= 0) {
    out[n++] = (cinfer_tensor){.name = "prompt_pos", .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {1},
                               .data = &prompt_pos, .byte_size = 4};
    out[n++] = (cinfer_tensor){.name = "rank", .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {1},
                               .data = &rank, .byte_size = 4};
  }
  if (has_lp) {
    out[n++] = (cinfer_tensor){.name = "logprob", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {1},
                               .data = &lp, .byte_size = 4};
    out[n++] = (cinfer_tensor){.name = "top_token_ids", .dtype = CINFER_TYPE_INT32, .ndim = 1,
                               .shape = {n_top}, .data = (void *)s->top_ids, .byte_size = (size_t)n_top * 4};
    out[n++] = (cinfer_tensor){.name = "top_logprobs", .dtype = CINFER_TYPE_FP32, .ndim = 1,
                               .shape = {n_top}, .data = (void *)s->top_lp, .byte_size = (size_t)n_top * 4};
  }
  if (finish) {
    uint32_t fl = (uint32_t)strlen(finish);
    memcpy(fb, &fl, 4);
    memcpy(fb + 4, finish, fl);
    out[n++] = (cinfer_tensor){.name = "finish_reason", .dtype = CINFER_TYPE_BYTES, .ndim = 1,
                               .shape = {1}, .data = fb, .byte_size = 4 + fl};
    out[n++] = (cinfer_tensor){.name = "usage", .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {3},
                               .data = (void *)usage, .byte_size = 12};
  }
  cinfer_status *st = cinfer_request_respond(r, out, n, 0, NULL);
  cinfer_status_free(st);
  return st == NULL;
}

static void run(cinfer_request *r) {
  int64_t k = 0;
  bool has_lp = cinfer_request_param_int(r, "logprobs", &k) && k > 0, plp = false;
  cinfer_request_param_bool(r, "prompt_logprobs", &plp);
  const cinfer_tensor *in = cinfer_request_input_by_name(r, "text_input");
  uint32_t plen = 0;
  if (in && in->byte_size >= 4) memcpy(&plen, in->data, 4);
  if (!in || plen > in->byte_size - 4) plen = 0;
  const unsigned char *prompt = in ? (const unsigned char *)in->data + 4 : NULL;
  for (uint32_t i = 0; plp && i < plen; i++) {
    step p = {prompt[i], i == 1 ? -INFINITY : -2.0f, 1, {prompt[i], 0}, {i == 1 ? -INFINITY : -2.0f, 0}};
    if (!respond(r, &p, i > 0, k, (int32_t)i, NULL, NULL)) return;
  }
  static const step script[3] = {
      {0, -1.25f, 2, {0, 'b'}, {-1.25f, -INFINITY}},
      {'c', -INFINITY, 2, {'c', 0}, {-INFINITY, -1e30f}},
      {'d', -0.5f, 1, {'d', 0}, {-0.5f, 0}},
  };
  int32_t usage[3] = {(int32_t)plen, 3, 0};
  for (int i = 0; i < 3; i++)
    if (!respond(r, &script[i], has_lp, k, -1, i == 2 ? "length" : NULL, usage)) return;
  cinfer_status_free(cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, NULL));
}

static cinfer_status *ls_execute(void *instance, cinfer_batch *b) {
  (void)instance;
  for (uint32_t i = 0; i < b->n_requests; i++) run(b->requests[i]);
  return NULL;
}

static const cinfer_backend_iface lpscript_iface = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "lpscript",
    .flags = CINFER_BACKEND_DECOUPLED,
    .model_load = ls_load,
    .model_unload = ls_unload,
    .instance_create = ls_instance_create,
    .instance_destroy = ls_instance_destroy,
    .execute = ls_execute,
    .tokenize = ls_tokenize,
    .detokenize = ls_detokenize,
    .render_chat = ls_render_chat,
};

CINFER_BACKEND_EXPORT const cinfer_backend_iface *cinfer_backend_entry(uint32_t core_abi_major,
                                                                       uint32_t core_abi_minor) {
  (void)core_abi_major, (void)core_abi_minor;
  return &lpscript_iface;
}
