/* llm_backend.c: see llm_backend.h.
 *
 * Model files: the version folder holds the GGUF file: parameter `gguf_file` names it,
 * else `model.gguf`, else the only *.gguf file there. Engine options come from
 * config.pbtxt parameters: ctx_len, kv_blocks, kv_bytes, block_size, max_seqs,
 * max_step_tokens, chat_template, threads (default: the model's thread budget).
 *
 * KServe inference (decoupled): input `text_input` (BYTES, one element), optional
 * parameters max_tokens, temperature, top_p, top_k, seed; one FINAL response with
 * `text_output` (BYTES) holding the whole completion. Streaming is offered by the OpenAI
 * endpoints (/v1/completions, /v1/chat/completions). */
#include "backends/llm_serving/llm_backend.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


typedef struct llm_model_state {
  llm_engine *engine;
  char *name;
} llm_model_state;

llm_engine *llm_backend_engine(void *model_state) {
  return model_state ? ((llm_model_state *)model_state)->engine : NULL;
}

static cinfer_status *param_long(const cinfer_model_load_info *info, const char *key,
                                 long long lo, long long hi, long long *out) {
  const char *v = cinfer_config_parameter(info->config, key);
  if (!v) return NULL;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "llm model '%s': parameter '%s' = '%s' is not an integer in [%lld, %lld]",
                             info->model_name, key, v, lo, hi);
  *out = x;
  return NULL;
}

static cinfer_status *find_gguf(const cinfer_model_load_info *info, const char *dir, char **out) {
  const char *named = cinfer_config_parameter(info->config, "gguf_file");
  const char *name = info->model_name;
  char path[4096];
  struct stat st;
  if (named) {
    if (strchr(named, '/') || !strcmp(named, "..") || !named[0])
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "llm model '%s': parameter gguf_file '%s' must be a file name in the "
                               "version folder", name, named);
    snprintf(path, sizeof path, "%s/%s", dir, named);
  } else {
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    if (stat(path, &st) != 0) {
      DIR *d = opendir(dir);
      int found = 0;
      struct dirent *e;
      while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n > 5 && !strcmp(e->d_name + n - 5, ".gguf")) {
          snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
          found++;
        }
      }
      if (d) closedir(d);
      if (found != 1)
        return cinfer_status_new(CINFER_INVALID_ARG,
                                 "llm model '%s': %s holds %s .gguf file; name it model.gguf or set "
                                 "parameter gguf_file", name, dir, found ? "more than one" : "no");
    }
  }
  if (stat(path, &st) != 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': cannot open %s: %s", name,
                             path, strerror(errno));
  *out = strdup(path);
  return *out ? NULL : cinfer_status_new(CINFER_INTERNAL, "out of memory");
}

static cinfer_status *llm_autocomplete(cinfer_autocomplete *ac, const char *version_dir) {
  const cinfer_config *c = cinfer_autocomplete_config(ac);
  cinfer_status *st;
  int64_t one = 1;
  if (cinfer_config_input_count(c) == 0 &&
      (st = cinfer_autocomplete_add_input(ac, "text_input", CINFER_TYPE_BYTES, 1, &one)))
    return st;
  if (cinfer_config_output_count(c) == 0 &&
      (st = cinfer_autocomplete_add_output(ac, "text_output", CINFER_TYPE_BYTES, 1, &one)))
    return st;
  return NULL;
}

static cinfer_status *llm_load(const cinfer_model_load_info *info, void **model) {
  const char *name = info->model_name;
  if (cinfer_config_max_batch_size(info->config) != 0)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "llm model '%s': max_batch_size must be 0 (the engine batches "
                             "continuously)", name);
  char *path = NULL;
  cinfer_status *st = find_gguf(info, info->version_dir, &path);
  if (st) return st;
  long long ctx = 0, blocks = 0, kvb = 0, bs = 0, seqs = 0, step = 0, threads = info->threads_per_instance;
  if ((st = param_long(info, "ctx_len", 16, 1 << 20, &ctx)) ||
      (st = param_long(info, "kv_blocks", 1, 1 << 24, &blocks)) ||
      (st = param_long(info, "kv_bytes", 1 << 20, 1ll << 40, &kvb)) ||
      (st = param_long(info, "block_size", 1, 1024, &bs)) ||
      (st = param_long(info, "max_seqs", 1, 4096, &seqs)) ||
      (st = param_long(info, "max_step_tokens", 1, 1 << 20, &step)) ||
      (st = param_long(info, "threads", 1, 1024, &threads))) {
    free(path);
    return st;
  }
  llm_engine_opts o = {.threads = (int)threads, .ctx_len = (int)ctx, .kv_blocks = (int)blocks,
                       .kv_bytes = (size_t)kvb, .block_size = (int)bs, .max_seqs = (int)seqs,
                       .max_step_tokens = (int)step,
                       .chat_template = cinfer_config_parameter(info->config, "chat_template")};
  llm_model_state *m = calloc(1, sizeof *m);
  if (!m || !(m->name = strdup(name))) {
    free(m);
    free(path);
    return cinfer_status_new(CINFER_INTERNAL, "out of memory");
  }
  st = llm_engine_create(path, &o, &m->engine);
  free(path);
  if (st) {
    free(m->name);
    free(m);
    return cinfer_status_prefix(st, "llm model '%s'", name);
  }
  *model = m;
  return NULL;
}

static void llm_unload(void *model) {
  llm_model_state *m = model;
  if (!m) return;
  llm_engine_destroy(m->engine);
  free(m->name);
  free(m);
}

static cinfer_status *llm_instance_create(void *model, const cinfer_instance_info *info,
                                          void **instance) {
  *instance = model; /* one engine per model: it batches every sequence itself */
  return NULL;
}

static void llm_instance_destroy(void *instance) {}

typedef struct kserve_gen {
  cinfer_request *r;
  char *text;
  size_t len, cap;
} kserve_gen;

static void kserve_gen_event(void *user, const llm_event *ev) {
  kserve_gen *g = user;
  if (ev->text_len) {
    if (g->len + ev->text_len > g->cap) {
      size_t nc = (g->cap + ev->text_len) * 2;
      char *nt = realloc(g->text, nc);
      if (nt) {
        g->text = nt;
        g->cap = nc;
      }
    }
    if (g->len + ev->text_len <= g->cap) {
      memcpy(g->text + g->len, ev->text, ev->text_len);
      g->len += ev->text_len;
    }
  }
  if (ev->finish == LLM_FINISH_NONE) return;
  if (ev->finish == LLM_FINISH_ERROR) {
    cinfer_request_respond(g->r, NULL, 0, CINFER_RESPONSE_FINAL,
                           cinfer_status_new(CINFER_INTERNAL, "generation failed: %s",
                                             ev->error ? ev->error : "unknown error"));
  } else {
    unsigned char *buf = malloc(4 + g->len);
    if (!buf) {
      cinfer_request_respond(g->r, NULL, 0, CINFER_RESPONSE_FINAL,
                             cinfer_status_new(CINFER_INTERNAL, "out of memory"));
    } else {
      uint32_t l = (uint32_t)g->len;
      memcpy(buf, &l, 4); /* little-endian hosts only, as the rest of the codec */
      if (g->len) memcpy(buf + 4, g->text, g->len);
      cinfer_tensor t = {.name = "text_output", .dtype = CINFER_TYPE_BYTES, .ndim = 1,
                         .shape = {1}, .data = buf, .byte_size = 4 + g->len};
      cinfer_request_respond(g->r, &t, 1, CINFER_RESPONSE_FINAL, NULL);
      free(buf);
    }
  }
  free(g->text);
  free(g);
}

static cinfer_status *llm_execute(void *instance, cinfer_batch *b) {
  llm_model_state *m = instance;
  for (uint32_t i = 0; i < b->n_requests; i++) {
    cinfer_request *r = b->requests[i];
    const cinfer_tensor *t = cinfer_request_input_by_name(r, "text_input");
    cinfer_status *st = NULL;
    if (!t || t->byte_size < 4) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s' needs a text_input BYTES element", m->name);
    }
    llm_request lr = {.add_special = true};
    llm_sampling_default(&lr.sampling);
    if (!st) {
      const unsigned char *p = t->data;
      uint32_t l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
      lr.prompt = (const char *)p + 4;
      lr.prompt_len = l;
      int64_t iv;
      double dv;
      if (cinfer_request_param_int(r, "max_tokens", &iv)) lr.sampling.max_tokens = (int)iv;
      if (cinfer_request_param_int(r, "top_k", &iv)) lr.sampling.top_k = (int)iv;
      if (cinfer_request_param_int(r, "seed", &iv)) lr.sampling.seed = iv;
      if (cinfer_request_param_double(r, "temperature", &dv)) lr.sampling.temperature = (float)dv;
      if (cinfer_request_param_double(r, "top_p", &dv)) lr.sampling.top_p = (float)dv;
    }
    kserve_gen *g = st ? NULL : calloc(1, sizeof *g);
    if (!st && !g) st = cinfer_status_new(CINFER_INTERNAL, "out of memory");
    if (!st) {
      g->r = r;
      uint64_t id;
      st = llm_engine_submit(m->engine, &lr, kserve_gen_event, g, &id);
      if (st) free(g);
    }
    if (st) cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, st);
  }
  return NULL;
}

const cinfer_backend_iface cinfer_llm_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "llm",
    .flags = CINFER_BACKEND_DECOUPLED,
    .autocomplete = llm_autocomplete,
    .model_load = llm_load,
    .model_unload = llm_unload,
    .instance_create = llm_instance_create,
    .instance_destroy = llm_instance_destroy,
    .execute = llm_execute,
};
