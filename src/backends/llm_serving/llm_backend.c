/* llm_backend.c: see llm_backend.h.
 *
 * Model files: the version folder holds the GGUF file: parameter `gguf_file` names it,
 * else `model.gguf`, else the only *.gguf file there. Engine options come from
 * config.pbtxt parameters: ctx_len, kv_blocks, kv_bytes, kv_cache_memory (bytes with a
 * suffix or a fraction of memory, see llm_parse_kv_memory; default `cinfer serve
 * --kv-cache-memory`), block_size, max_seqs, max_waiting (default --llm-max-waiting, else
 * 4 x max_seqs; 0 = no limit), max_step_tokens, chat_template, threads (default: the
 * model's thread budget). The KV cache's size and where it came from are logged at load.
 *
 * Admission (docs/llm.md#admission): a prompt that can never fit (the context or the whole
 * KV cache) is INVALID_ARG (400); a request that finds max_waiting sequences waiting is
 * UNAVAILABLE at once (503, the frontend adds Retry-After); an admitted one always
 * completes (preemption recomputes).
 *
 * Every protocol reaches the engine through execute() (the request protocol is in
 * llm_backend.h): KServe's text_input -> text_output and the OpenAI endpoints alike, so
 * statistics, in-flight counts, request logs and the drain at shutdown see every request. */
#include "backends/llm_serving/llm_backend.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/llm/grammar.h"
#include "backends/llm/llm.h"
#include "core/hash.h"
#include "core/log.h"

/* cinfer_llm_set_default: serve's flags (written before any model loads, read at load) */
static pthread_mutex_t defaults_mu = PTHREAD_MUTEX_INITIALIZER;
static char *default_kv_memory, *default_max_waiting;

cinfer_status *cinfer_llm_set_default(const char *key, const char *value, const char *flag) {
  char **slot;
  if (!strcmp(key, "kv_cache_memory")) {
    size_t b;
    cinfer_status *st = llm_parse_kv_memory(flag, value, &b);
    if (st) return st;
    slot = &default_kv_memory;
  } else if (!strcmp(key, "max_waiting")) {
    char *end;
    errno = 0;
    long long x = strtoll(value, &end, 10);
    if (errno || end == value || *end || x < 0 || x > 1 << 24)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s' is not an integer in [0, %d] (0 = no limit)", flag, value,
                               1 << 24);
    slot = &default_max_waiting;
  } else {
    return cinfer_status_new(CINFER_INVALID_ARG, "llm: no default named '%s'", key);
  }
  char *v = strdup(value);
  if (!v) return cinfer_status_oom(NULL);
  pthread_mutex_lock(&defaults_mu);
  free(*slot);
  *slot = v;
  pthread_mutex_unlock(&defaults_mu);
  return NULL;
}

#define GRAMMAR_CACHE 32
typedef struct gen gen;
typedef struct llm_model_state {
  llm_engine *engine;
  char *name;
  int ctx_len;
  pthread_mutex_t mu; /* gens, grammars */
  gen *gens;          /* requests with sequences in the engine (for llm_cancel) */
  /* compiled grammars by source (kind + text), most recent first: a schema sent with every
   * request is compiled once */
  struct cached_grammar { uint64_t h; char *src; llm_grammar *g; } grammars[GRAMMAR_CACHE];
  int n_grammars;
  uint64_t grammar_compiles; /* (mu) */
  _Atomic uint64_t refused_too_long; /* prompts longer than the context, refused before the engine */
  uint32_t default_priority; /* the engine priority of a request without one (0): see config_priority */
} llm_model_state;

/* The engine priority of a request that gives none: the model config's
 * dynamic_batching.default_priority_level when it sets priority_levels (the server queue's
 * default level), else 1, the highest level, so explicit levels 2, 3, ... only lower a request. */
static uint32_t config_priority(const char *config_json) {
  uint32_t d = 1;
  cJSON *j = config_json ? cJSON_Parse(config_json) : NULL;
  const cJSON *db = cJSON_GetObjectItemCaseSensitive(j, "dynamic_batching");
  const cJSON *pl = cJSON_GetObjectItemCaseSensitive(db, "priority_levels");
  const cJSON *dl = cJSON_GetObjectItemCaseSensitive(db, "default_priority_level");
  double levels = cJSON_IsNumber(pl) ? pl->valuedouble : cJSON_IsString(pl) ? atof(pl->valuestring) : 0;
  double dflt = cJSON_IsNumber(dl) ? dl->valuedouble : cJSON_IsString(dl) ? atof(dl->valuestring) : 0;
  if (levels > 0 && dflt >= 1 && dflt <= UINT32_MAX) d = (uint32_t)dflt;
  cJSON_Delete(j);
  return d;
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
  return *out ? NULL : cinfer_status_oom(NULL);
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
  long long waiting = -1;
  if ((st = param_long(info, "ctx_len", 16, 1 << 20, &ctx)) ||
      (st = param_long(info, "kv_blocks", 1, 1 << 24, &blocks)) ||
      (st = param_long(info, "kv_bytes", 1 << 20, 1ll << 40, &kvb)) ||
      (st = param_long(info, "block_size", 1, 1024, &bs)) ||
      (st = param_long(info, "max_seqs", 1, 4096, &seqs)) ||
      (st = param_long(info, "max_waiting", 0, 1 << 24, &waiting)) ||
      (st = param_long(info, "max_step_tokens", 1, 1 << 20, &step)) ||
      (st = param_long(info, "threads", 1, 1024, &threads))) {
    free(path);
    return st;
  }
  /* the KV cache's size: kv_blocks, kv_bytes or kv_cache_memory (one), else serve's
   * --kv-cache-memory, else the engine's default */
  const char *kvm = cinfer_config_parameter(info->config, "kv_cache_memory");
  char kv_from[160] = "the default (max_seqs full contexts, at most 1 GiB)";
  pthread_mutex_lock(&defaults_mu);
  char *dflt_kvm = default_kv_memory ? strdup(default_kv_memory) : NULL;
  if (waiting < 0 && default_max_waiting) waiting = strtoll(default_max_waiting, NULL, 10);
  pthread_mutex_unlock(&defaults_mu);
  if (kvm && (blocks || kvb)) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': give one of the parameters kv_cache_memory, "
                           "kv_bytes and kv_blocks (they all size the KV cache)", name);
  } else if (blocks && kvb) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': give one of the parameters kv_bytes and kv_blocks",
                           name);
  } else if (kvm) {
    size_t b;
    char what[200];
    snprintf(what, sizeof what, "llm model '%s': parameter kv_cache_memory", name);
    if (!(st = llm_parse_kv_memory(what, kvm, &b))) {
      kvb = (long long)b;
      snprintf(kv_from, sizeof kv_from, "parameter kv_cache_memory '%s'", kvm);
    }
  } else if (blocks) {
    snprintf(kv_from, sizeof kv_from, "parameter kv_blocks %lld", blocks);
  } else if (kvb) {
    snprintf(kv_from, sizeof kv_from, "parameter kv_bytes %lld", kvb);
  } else if (dflt_kvm) {
    size_t b;
    if (!(st = llm_parse_kv_memory("--kv-cache-memory", dflt_kvm, &b))) {
      kvb = (long long)b;
      snprintf(kv_from, sizeof kv_from, "--kv-cache-memory '%s'", dflt_kvm);
    }
  }
  free(dflt_kvm);
  if (st) {
    free(path);
    return st;
  }
  if (waiting < 0) waiting = 4 * (seqs ? seqs : 64);
  llm_engine_opts o = {.threads = (int)threads, .ctx_len = (int)ctx, .kv_blocks = (int)blocks,
                       .kv_bytes = (size_t)kvb, .block_size = (int)bs, .max_seqs = (int)seqs,
                       .max_step_tokens = (int)step, .max_waiting = (int)waiting,
                       .chat_template = cinfer_config_parameter(info->config, "chat_template")};
  llm_model_state *m = calloc(1, sizeof *m);
  if (!m || !(m->name = strdup(name))) {
    free(m);
    free(path);
    return cinfer_status_oom(NULL);
  }
  st = llm_engine_create(path, &o, &m->engine);
  free(path);
  if (st) {
    free(m->name);
    free(m);
    if (strstr(cinfer_status_message(st), "KV cache"))
      return cinfer_status_prefix(st, "llm model '%s' (KV cache from %s)", name, kv_from);
    return cinfer_status_prefix(st, "llm model '%s'", name);
  }
  llm_model_info mi;
  llm_engine_model_info(m->engine, &mi);
  m->ctx_len = mi.ctx_len;
  LOG_I("llm model '%s': KV cache %d blocks of %d tokens (%.1f MiB, %.1f KiB a block; %lld tokens, %.1f full "
        "contexts of %d) from %s; max_seqs %d, max_waiting %d%s",
        name, mi.kv_blocks, mi.block_size, (double)mi.kv_blocks * (double)mi.kv_block_bytes / 1048576.0,
        (double)mi.kv_block_bytes / 1024.0, (long long)mi.kv_blocks * mi.block_size,
        (double)mi.kv_blocks * mi.block_size / mi.ctx_len, mi.ctx_len, kv_from, mi.max_seqs, mi.max_waiting,
        mi.max_waiting ? "" : " (no limit)");
  m->default_priority = config_priority(info->config_json);
  pthread_mutex_init(&m->mu, NULL);
  *model = m;
  return NULL;
}

static void llm_unload(void *model) {
  llm_model_state *m = model;
  if (!m) return;
  llm_engine_destroy(m->engine); /* no request is left: the core unloads after the last */
  for (int i = 0; i < m->n_grammars; i++) {
    free(m->grammars[i].src);
    llm_grammar_unref(m->grammars[i].g);
  }
  pthread_mutex_destroy(&m->mu);
  free(m->name);
  free(m);
}

static cinfer_status *llm_instance_create(void *model, const cinfer_instance_info *info,
                                          void **instance) {
  *instance = model; /* one engine per model: it batches every sequence itself */
  return NULL;
}

static void llm_instance_destroy(void *instance) {}

/* ---- generation ------------------------------------------------------------------------
 *
 * One gen per request: n sequences (choices) in the engine. `remaining` counts the
 * sequences not yet finished plus one for execute() while it submits; whoever drops it to
 * zero sends the FINAL response and frees the gen, so a sequence that finishes while later
 * ones are still being submitted cannot free the gen under execute(). Engine events arrive
 * on the engine's step thread; gens are listed per model (under mu) so that llm_cancel()
 * can find a request's sequences. */

#define GEN_MAX_N 16
#define GEN_MAX_STOP 8

typedef struct gen_seq {
  gen *g;
  int index;
  uint64_t id;         /* engine sequence id; 0 until submitted (under the model's mu) */
} gen_seq;

struct gen {
  llm_model_state *m;
  cinfer_request *r;
  bool stream;         /* one response per event; else one FINAL with the whole text */
  int n, n_submitted;  /* n_submitted under m->mu */
  int logprobs;
  int32_t first_token; /* prompt_logprobs: the prompt's first id (it has no logprob) */
  _Atomic int remaining;
  _Atomic bool cancel_sent;
  char *text;          /* whole mode */
  size_t len, cap;
  pthread_mutex_t err_mu;
  cinfer_status *error; /* first failure; sent with the FINAL response */
  gen *prev, *next;    /* m->gens */
  gen_seq seqs[GEN_MAX_N];
};

static void gen_fail(gen *g, cinfer_status *st) {
  pthread_mutex_lock(&g->err_mu);
  if (!g->error) g->error = st, st = NULL;
  pthread_mutex_unlock(&g->err_mu);
  cinfer_status_free(st);
}

/* Cancels every submitted sequence of g once (any thread). Call with m->mu held. */
static void gen_cancel_locked(gen *g) {
  if (atomic_exchange(&g->cancel_sent, true)) return;
  for (int i = 0; i < g->n_submitted; i++)
    cinfer_status_free(llm_engine_cancel(g->m->engine, g->seqs[i].id));
}

static void gen_cancel(gen *g) {
  pthread_mutex_lock(&g->m->mu);
  gen_cancel_locked(g);
  pthread_mutex_unlock(&g->m->mu);
}

static void gen_free(gen *g) {
  llm_model_state *m = g->m;
  pthread_mutex_lock(&m->mu);
  if (g->prev) g->prev->next = g->next;
  else m->gens = g->next;
  if (g->next) g->next->prev = g->prev;
  pthread_mutex_unlock(&m->mu);
  cinfer_status_free(g->error);
  pthread_mutex_destroy(&g->err_mu);
  free(g->text);
  free(g);
}

/* The FINAL response of g (no outputs in stream mode: the last event went before). */
static void gen_finish(gen *g) {
  cinfer_request *r = g->r;
  cinfer_status *err = g->error;
  g->error = NULL;
  if (!err && cinfer_request_is_cancelled(r)) err = cinfer_status_new(CINFER_CANCELLED, "request cancelled");
  if (err) {
    cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, err);
  } else if (g->stream) {
    cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, NULL);
  } else {
    unsigned char *buf = malloc(4 + g->len);
    if (!buf) {
      cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL,
                             cinfer_status_oom(NULL));
    } else {
      uint32_t l = (uint32_t)g->len;
      memcpy(buf, &l, 4); /* little-endian hosts only, as the rest of the codec */
      if (g->len) memcpy(buf + 4, g->text, g->len);
      cinfer_tensor t = {.name = "text_output", .dtype = CINFER_TYPE_BYTES, .ndim = 1,
                         .shape = {1}, .data = buf, .byte_size = 4 + g->len};
      cinfer_request_respond(r, &t, 1, CINFER_RESPONSE_FINAL, NULL);
      free(buf);
    }
  }
  gen_free(g);
}

static void gen_put(gen *g) {
  if (atomic_fetch_sub(&g->remaining, 1) == 1) gen_finish(g);
}

static cinfer_tensor t_i32(const char *name, const int32_t *v, int64_t n) {
  return (cinfer_tensor){.name = name, .dtype = CINFER_TYPE_INT32, .ndim = 1, .shape = {n},
                         .data = (void *)v, .byte_size = (size_t)n * 4};
}

/* Stream mode: one non-final response per engine event (see llm_backend.h). */
static void gen_respond_event(gen *g, int index, const llm_event *ev) {
  unsigned char small[4 + 512];
  unsigned char *tb = ev->text_len <= 512 ? small : malloc(4 + ev->text_len);
  if (!tb) {
    gen_fail(g, cinfer_status_new(CINFER_INTERNAL, "out of memory streaming a token"));
    gen_cancel(g);
    return;
  }
  uint32_t l = (uint32_t)ev->text_len;
  memcpy(tb, &l, 4);
  if (ev->text_len) memcpy(tb + 4, ev->text, ev->text_len);
  int32_t idx = index, tok = ev->token;
  int32_t usage[3] = {ev->prompt_tokens, ev->completion_tokens, ev->cached_tokens};
  int32_t top_ids[20];
  float top_lp[20], lp = ev->logprob;
  int k = ev->n_top < 0 ? 0 : ev->n_top > 20 ? 20 : ev->n_top;
  if (k > g->logprobs) k = g->logprobs;
  for (int i = 0; i < k; i++) top_ids[i] = ev->top[i].id, top_lp[i] = ev->top[i].logprob;
  const char *fin = llm_finish_name(ev->finish);
  unsigned char fb[4 + 16];
  uint32_t fl = (uint32_t)strlen(fin);
  memcpy(fb, &fl, 4);
  memcpy(fb + 4, fin, fl);
  cinfer_tensor out[9];
  uint32_t n = 0;
  out[n++] = (cinfer_tensor){.name = "text_output", .dtype = CINFER_TYPE_BYTES, .ndim = 1,
                             .shape = {1}, .data = tb, .byte_size = 4 + ev->text_len};
  out[n++] = t_i32("index", &idx, 1);
  out[n++] = t_i32("token_id", &tok, 1);
  int32_t pos = ev->pos, rank = ev->rank;
  if (ev->prompt) out[n++] = t_i32("prompt_pos", &pos, 1); /* a prompt token's logprob */
  if (ev->prompt) out[n++] = t_i32("rank", &rank, 1);
  if ((g->logprobs > 0 || ev->prompt) && ev->token >= 0) {
    out[n++] = (cinfer_tensor){.name = "logprob", .dtype = CINFER_TYPE_FP32, .ndim = 1,
                               .shape = {1}, .data = &lp, .byte_size = 4};
    out[n++] = t_i32("top_token_ids", top_ids, k);
    out[n++] = (cinfer_tensor){.name = "top_logprobs", .dtype = CINFER_TYPE_FP32, .ndim = 1,
                               .shape = {k}, .data = top_lp, .byte_size = (size_t)k * 4};
  }
  if (ev->finish != LLM_FINISH_NONE) {
    out[n++] = (cinfer_tensor){.name = "finish_reason", .dtype = CINFER_TYPE_BYTES, .ndim = 1,
                               .shape = {1}, .data = fb, .byte_size = 4 + fl};
    out[n++] = t_i32("usage", usage, 3);
  }
  cinfer_status *st = cinfer_request_respond(g->r, out, n, 0, NULL);
  if (tb != small) free(tb);
  if (st) { /* the token was lost: stop; the FINAL response reports it */
    gen_fail(g, st);
    gen_cancel(g);
  }
}

static void gen_event(void *user, const llm_event *ev) {
  gen_seq *sq = user;
  gen *g = sq->g;
  if (!atomic_load(&g->cancel_sent) && cinfer_request_is_cancelled(g->r)) gen_cancel(g);
  bool gone = atomic_load(&g->cancel_sent);
  if (ev->finish == LLM_FINISH_ERROR)
    gen_fail(g, cinfer_status_new(CINFER_INTERNAL, "generation failed: %s",
                                  ev->error ? ev->error : "unknown error"));
  if (g->stream) {
    if (!gone && ev->prompt && ev->pos == 1) { /* position 0 first: its token, no logprob */
      llm_event first = {.seq_id = ev->seq_id, .token = g->first_token, .text = "", .prompt = true};
      cinfer_request_respond(g->r, (cinfer_tensor[]){t_i32("index", &(int32_t){sq->index}, 1),
                                                     t_i32("token_id", &first.token, 1),
                                                     t_i32("prompt_pos", &first.pos, 1)},
                             3, 0, NULL);
    }
    if (!gone && ev->finish != LLM_FINISH_ERROR && ev->finish != LLM_FINISH_CANCELLED)
      gen_respond_event(g, sq->index, ev);
  } else if (ev->text_len && !gone) {
    if (g->len + ev->text_len > g->cap) {
      size_t nc = (g->cap + ev->text_len) * 2;
      char *nt = realloc(g->text, nc);
      if (!nt) { /* never answer a silently shortened text */
        gen_fail(g, cinfer_status_new(CINFER_INTERNAL, "out of memory holding the generated text"));
        gen_cancel(g);
      } else {
        g->text = nt;
        g->cap = nc;
      }
    }
    if (g->len + ev->text_len <= g->cap) {
      memcpy(g->text + g->len, ev->text, ev->text_len);
      g->len += ev->text_len;
    }
  }
  if (ev->finish != LLM_FINISH_NONE) gen_put(g);
}

/* The compiled grammar of src (from the cache, or compiled and cached); a new reference.
 * kind: 'g' GBNF, 's' JSON Schema, 't' JSON Schema or free text, 'o' any JSON object. */
static cinfer_status *grammar_get(llm_model_state *m, char kind, const char *text, llm_grammar **out) {
  size_t tl = strlen(text);
  char *src = malloc(tl + 2);
  if (!src) return cinfer_status_oom("grammar");
  src[0] = kind;
  memcpy(src + 1, text, tl + 1);
  uint64_t h = hash_bytes(src, tl + 1);
  pthread_mutex_lock(&m->mu);
  for (int i = 0; i < m->n_grammars; i++) {
    if (m->grammars[i].h != h || strcmp(m->grammars[i].src, src)) continue;
    struct cached_grammar c = m->grammars[i];
    memmove(&m->grammars[1], &m->grammars[0], (size_t)i * sizeof c);
    m->grammars[0] = c;
    *out = llm_grammar_ref(c.g);
    pthread_mutex_unlock(&m->mu);
    free(src);
    return NULL;
  }
  pthread_mutex_unlock(&m->mu);
  char *gbnf = NULL;
  cinfer_status *st = NULL;
  if (kind == 's') st = llm_json_schema_to_gbnf(text, tl, &gbnf);
  else if (kind == 't') st = llm_json_schema_or_text_gbnf(text, tl, &gbnf);
  llm_grammar *g = NULL;
  if (!st) {
    const char *t = gbnf ? gbnf : kind == 'o' ? llm_grammar_json_object_gbnf() : text;
    st = llm_grammar_compile(t, strlen(t), &g);
  }
  free(gbnf);
  if (st) {
    free(src);
    return st;
  }
  pthread_mutex_lock(&m->mu);
  m->grammar_compiles++;
  if (m->n_grammars == GRAMMAR_CACHE) {
    m->n_grammars--;
    free(m->grammars[m->n_grammars].src);
    llm_grammar_unref(m->grammars[m->n_grammars].g);
  }
  memmove(&m->grammars[1], &m->grammars[0], (size_t)m->n_grammars * sizeof m->grammars[0]);
  m->grammars[0] = (struct cached_grammar){h, src, llm_grammar_ref(g)};
  m->n_grammars++;
  pthread_mutex_unlock(&m->mu);
  *out = g;
  return NULL;
}

/* Parameters grammar (GBNF), json_schema (a JSON Schema as text; with json_schema_or_text
 * true, free text not beginning like JSON is allowed too) and json_object (bool): at most
 * one. */
static cinfer_status *read_grammar(llm_model_state *m, cinfer_request *r, llm_grammar **out) {
  *out = NULL;
  const char *gv = NULL, *sv = NULL;
  bool obj = false;
  bool has_g = cinfer_request_param_string(r, "grammar", &gv);
  bool has_s = cinfer_request_param_string(r, "json_schema", &sv);
  cinfer_request_param_bool(r, "json_object", &obj);
  if (has_g + has_s + obj > 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': give at most one of the parameters 'grammar', "
                             "'json_schema' and 'json_object'", m->name);
  if (!has_g && !has_s && !obj) return NULL;
  bool or_text = false;
  cinfer_request_param_bool(r, "json_schema_or_text", &or_text);
  char kind = has_g ? 'g' : has_s ? (or_text ? 't' : 's') : 'o';
  cinfer_status *st = grammar_get(m, kind, has_g ? gv : has_s ? sv : "", out);
  if (!st) return NULL;
  cinfer_status *w = cinfer_status_new(cinfer_status_code(st), "llm model '%s': parameter '%s': %s", m->name,
                                       has_g ? "grammar" : has_s ? "json_schema" : "json_object",
                                       cinfer_status_message(st));
  cinfer_status_free(st);
  return w;
}

static cinfer_status *read_sampling(llm_model_state *m, cinfer_request *r, llm_sampling *s,
                                    int *n, const char **stops, cJSON **stop_json) {
  int64_t iv;
  double dv;
  struct { const char *key; int *out; int64_t lo, hi; } ints[] = {
      {"max_tokens", &s->max_tokens, 1, INT32_MAX}, {"top_k", &s->top_k, 0, INT32_MAX},
      {"logprobs", &s->logprobs, 0, 20}, {"n", n, 1, GEN_MAX_N}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (!cinfer_request_param_int(r, ints[i].key, &iv)) continue;
    if (iv < ints[i].lo || iv > ints[i].hi)
      return cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': parameter '%s' = %lld is outside [%lld, %lld]",
                               m->name, ints[i].key, (long long)iv, (long long)ints[i].lo, (long long)ints[i].hi);
    *ints[i].out = (int)iv;
  }
  if (cinfer_request_param_int(r, "seed", &iv)) s->seed = iv;
  /* the server validated it (>= 0, fits 32 bits); 0 = the model's default level */
  s->priority = cinfer_request_param_int(r, "priority", &iv) && iv > 0 && iv <= UINT32_MAX ? (uint32_t)iv
                                                                                          : m->default_priority;
  struct { const char *key; float *out; } fl[] = {
      {"temperature", &s->temperature}, {"top_p", &s->top_p}, {"min_p", &s->min_p},
      {"repetition_penalty", &s->repetition_penalty}, {"presence_penalty", &s->presence_penalty},
      {"frequency_penalty", &s->frequency_penalty}};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
    if (cinfer_request_param_double(r, fl[i].key, &dv)) *fl[i].out = (float)dv;
  bool b;
  if (cinfer_request_param_bool(r, "ignore_eos", &b)) s->ignore_eos = b;
  if (cinfer_request_param_bool(r, "prompt_logprobs", &b)) s->prompt_logprobs = b;
  const char *sv;
  if (cinfer_request_param_string(r, "stop", &sv)) {
    stops[s->n_stop++] = sv;
  } else if (cinfer_request_param_string(r, "stop_list", &sv)) {
    cJSON *j = *stop_json = cJSON_Parse(sv);
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) > GEN_MAX_STOP)
      return cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': parameter 'stop_list' must be a JSON array "
                               "of up to %d strings", m->name, GEN_MAX_STOP);
    for (const cJSON *e = j->child; e; e = e->next) {
      if (!cJSON_IsString(e))
        return cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': parameter 'stop_list' must hold strings only",
                                 m->name);
      stops[s->n_stop++] = e->valuestring;
    }
  }
  s->stop = stops;
  cinfer_status *st = read_grammar(m, r, &s->grammar);
  return st ? st : llm_sampling_check(s);
}

/* The parameter prompt_token_ids (a JSON array of ids, as the OpenAI API's token prompts):
 * the prompt exactly as given, no special tokens added; false when the parameter is absent. */
static bool read_prompt_ids(llm_model_state *m, cinfer_request *r, int32_t **toks, size_t *nt,
                            cinfer_status **st) {
  const char *sv;
  if (!cinfer_request_param_string(r, "prompt_token_ids", &sv)) return false;
  llm_model_info mi;
  llm_engine_model_info(m->engine, &mi);
  cJSON *j = cJSON_Parse(sv);
  int n = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : -1;
  if (n <= 0) {
    *st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': parameter 'prompt_token_ids' must be a non-empty "
                            "JSON array of token ids", m->name);
  } else if (!(*toks = malloc(sizeof **toks * (size_t)n))) {
    *st = cinfer_status_oom(NULL);
  } else {
    int k = 0;
    for (const cJSON *e = j->child; e && !*st; e = e->next, k++) {
      if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int32_t)e->valuedouble || e->valuedouble < 0 ||
          e->valuedouble >= mi.n_vocab)
        *st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': prompt token %d is not a token id in [0, %d)",
                                m->name, k, mi.n_vocab);
      else (*toks)[k] = (int32_t)e->valuedouble;
    }
    *nt = (size_t)n;
  }
  cJSON_Delete(j);
  if (*st) {
    free(*toks);
    *toks = NULL;
    *nt = 0;
  }
  return true;
}

/* Takes r over: reads text_input and the parameters, tokenizes the prompt once (on this
 * worker thread, not an I/O thread) and submits n sequences. Any error before the first
 * submit is the request's FINAL error response. */
static void gen_start(llm_model_state *m, cinfer_request *r) {
  const cinfer_tensor *t = cinfer_request_input_by_name(r, "text_input");
  uint32_t l = 0;
  if (t && t->byte_size >= 4) {
    const unsigned char *p = t->data;
    l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  }
  if (!t || t->byte_size < 4 || l > t->byte_size - 4) {
    cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL,
                           cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s' needs a text_input BYTES element",
                                             m->name));
    return;
  }
  const char *prompt = (const char *)t->data + 4;
  llm_sampling s;
  llm_sampling_default(&s);
  int n = 1;
  const char *stops[GEN_MAX_STOP];
  cJSON *stop_json = NULL;
  bool stream = false, add_special = true, parse_special = false;
  cinfer_request_param_bool(r, "stream", &stream);
  cinfer_request_param_bool(r, "add_special", &add_special);
  cinfer_request_param_bool(r, "parse_special", &parse_special);
  int32_t *toks = NULL;
  size_t nt = 0;
  gen *g = NULL;
  /* a full engine refuses before the work (tokenising, a grammar), so refusals stay cheap */
  cinfer_status *st = llm_engine_admission_check(m->engine);
  if (!st) st = read_sampling(m, r, &s, &n, stops, &stop_json);
  if (!st && s.prompt_logprobs && !stream)
    st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': parameter 'prompt_logprobs' needs 'stream' (one "
                           "response per prompt token)", m->name);
  if (!st && n > 1 && !stream)
    st = cinfer_status_new(CINFER_INVALID_ARG, "llm model '%s': parameter 'n' > 1 needs 'stream' (one response per "
                           "token, each naming its choice index)", m->name);
  if (!st && !read_prompt_ids(m, r, &toks, &nt, &st))
    st = llm_engine_tokenize(m->engine, prompt, l, add_special, parse_special, &toks, &nt);
  if (!st && nt >= (size_t)m->ctx_len) {
    atomic_fetch_add(&m->refused_too_long, 1);
    st = cinfer_status_new(CINFER_INVALID_ARG, "This model's maximum context length is %d tokens; the prompt has %zu "
                           "tokens", m->ctx_len, nt);
  }
  if (!st && !(g = calloc(1, sizeof *g))) st = cinfer_status_oom(NULL);
  if (st) {
    free(toks);
    cJSON_Delete(stop_json);
    llm_grammar_unref(s.grammar);
    cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, st);
    return;
  }
  g->m = m;
  g->r = r;
  g->stream = stream;
  g->n = n;
  g->logprobs = s.logprobs;
  g->first_token = nt ? toks[0] : -1;
  pthread_mutex_init(&g->err_mu, NULL);
  atomic_init(&g->remaining, n + 1);
  pthread_mutex_lock(&m->mu);
  g->next = m->gens;
  if (m->gens) m->gens->prev = g;
  m->gens = g;
  pthread_mutex_unlock(&m->mu);
  int64_t seed0 = s.seed;
  int i = 0;
  for (; i < n; i++) {
    llm_request lr = {.tokens = toks, .n_tokens = nt, .sampling = s};
    if (seed0 >= 0) lr.sampling.seed = seed0 + i;
    lr.sampling.prompt_logprobs = s.prompt_logprobs && i == 0; /* the choices share the prompt */
    g->seqs[i].g = g;
    g->seqs[i].index = i;
    uint64_t id;
    st = llm_engine_submit(m->engine, &lr, gen_event, &g->seqs[i], &id);
    if (st) break;
    pthread_mutex_lock(&m->mu);
    g->seqs[i].id = id;
    g->n_submitted = i + 1;
    bool late = atomic_load(&g->cancel_sent); /* cancelled before this id was known */
    pthread_mutex_unlock(&m->mu);
    if (late) cinfer_status_free(llm_engine_cancel(m->engine, id));
  }
  free(toks);
  cJSON_Delete(stop_json);
  llm_grammar_unref(s.grammar); /* each sequence holds its own reference */
  if (st) {
    gen_fail(g, st);
    gen_cancel(g);
    for (int k = i; k < n; k++) atomic_fetch_sub(&g->remaining, 1); /* never submitted */
  }
  if (cinfer_request_is_cancelled(r)) gen_cancel(g);
  gen_put(g);
}

static cinfer_status *llm_execute(void *instance, cinfer_batch *b) {
  for (uint32_t i = 0; i < b->n_requests; i++) gen_start(instance, b->requests[i]);
  return NULL;
}

static void llm_cancel(void *model, cinfer_request *r) {
  llm_model_state *m = model;
  pthread_mutex_lock(&m->mu);
  for (gen *g = m->gens; g; g = g->next)
    if (g->r == r) gen_cancel_locked(g);
  pthread_mutex_unlock(&m->mu);
}

/* ---- optional text methods (backend.h, ABI 1.1) --------------------------------------- */

static cinfer_status *llm_tokenize_m(void *model, const char *text, size_t len, bool add_special,
                                     bool parse_special, int32_t **ids, size_t *n) {
  return llm_engine_tokenize(((llm_model_state *)model)->engine, text, len, add_special,
                             parse_special, ids, n);
}

static cinfer_status *llm_detokenize_m(void *model, const int32_t *ids, size_t n, bool special,
                                       char **text, size_t *len) {
  return llm_engine_detokenize(((llm_model_state *)model)->engine, ids, n, special, text, len);
}

static cinfer_status *llm_render_chat_m(void *model, const char *const *roles,
                                        const char *const *contents, size_t n,
                                        bool add_generation_prompt, char **out) {
  return llm_engine_chat_render(((llm_model_state *)model)->engine, roles, contents, n,
                                add_generation_prompt, out);
}

/* vLLM's /tokenizer_info fields: the special tokens as text, the template, the context. */
static cinfer_status *llm_tokenizer_info_m(void *model, char **json) {
  llm_model_state *ms = model;
  llm_model_info mi;
  llm_engine_model_info(ms->engine, &mi);
  cJSON *o = cJSON_CreateObject();
  cinfer_status *st = NULL;
  const int32_t ids[2] = {mi.bos, mi.eos};
  const char *keys[2] = {"bos_token", "eos_token"};
  for (int i = 0; o && !st && i < 2; i++) {
    char *t = NULL;
    size_t tl = 0;
    if (ids[i] < 0) {
      cJSON_AddNullToObject(o, keys[i]);
      continue;
    }
    st = llm_engine_detokenize(ms->engine, &ids[i], 1, true, &t, &tl);
    if (!st) cJSON_AddStringToObject(o, keys[i], t);
    free(t);
  }
  if (o && !st) {
    if (mi.chat_template) cJSON_AddStringToObject(o, "chat_template", mi.chat_template);
    else cJSON_AddNullToObject(o, "chat_template");
    cJSON_AddNumberToObject(o, "max_model_len", mi.ctx_len);
    cJSON_AddNumberToObject(o, "vocab_size", mi.n_vocab);
    cJSON_AddStringToObject(o, "tokenizer_class", "cinfer");
    *json = cJSON_PrintUnformatted(o);
    if (!*json) st = cinfer_status_oom(NULL);
  } else if (!o) {
    st = cinfer_status_oom(NULL);
  }
  cJSON_Delete(o);
  return st;
}

static uint32_t llm_metrics(void *model, cinfer_backend_metric *out, uint32_t cap) {
  llm_engine_stats es;
  llm_model_state *ms = model;
  llm_engine_get_stats(ms->engine, &es);
  llm_model_info mi;
  llm_engine_model_info(ms->engine, &mi);
  uint64_t too_long = es.refused_too_long_total + atomic_load(&ms->refused_too_long);
  pthread_mutex_lock(&ms->mu);
  uint64_t compiles = ms->grammar_compiles;
  pthread_mutex_unlock(&ms->mu);
  const cinfer_backend_metric all[] = {
      {"cinfer_llm_running_sequences", "Sequences in the running batch", CINFER_BACKEND_METRIC_GAUGE, es.running},
      {"cinfer_llm_waiting_sequences", "Sequences waiting for admission", CINFER_BACKEND_METRIC_GAUGE, es.waiting},
      {"cinfer_llm_kv_cache_usage_ratio", "Used fraction of the KV cache blocks", CINFER_BACKEND_METRIC_GAUGE,
       es.kv_usage},
      {"cinfer_llm_prompt_tokens_total", "Prompt tokens processed", CINFER_BACKEND_METRIC_COUNTER,
       (double)es.prompt_tokens_total},
      {"cinfer_llm_generation_tokens_total", "Tokens generated", CINFER_BACKEND_METRIC_COUNTER,
       (double)es.generation_tokens_total},
      {"cinfer_llm_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache",
       CINFER_BACKEND_METRIC_COUNTER, (double)es.prefix_queries_total},
      {"cinfer_llm_prefix_cache_hits_total", "Prompt tokens found in the prefix cache", CINFER_BACKEND_METRIC_COUNTER,
       (double)es.prefix_hits_total},
      {"cinfer_llm_preemptions_total", "Sequences preempted for lack of KV blocks", CINFER_BACKEND_METRIC_COUNTER,
       (double)es.preemptions_total},
      {"cinfer_llm_kv_cache_blocks", "KV cache blocks (sized by kv_cache_memory, kv_bytes or kv_blocks)",
       CINFER_BACKEND_METRIC_GAUGE, (double)mi.kv_blocks},
      {"cinfer_llm_kv_cache_bytes", "KV cache memory in bytes", CINFER_BACKEND_METRIC_GAUGE,
       (double)mi.kv_blocks * (double)mi.kv_block_bytes},
      {"cinfer_llm_kv_cache_cached_blocks", "KV blocks held only by the prefix cache (reusable, evictable)",
       CINFER_BACKEND_METRIC_GAUGE, (double)es.kv_blocks_cached},
      {"cinfer_llm_prefix_cache_hit_ratio", "Prompt tokens found in the prefix cache / looked up, since load",
       CINFER_BACKEND_METRIC_GAUGE,
       es.prefix_queries_total ? (double)es.prefix_hits_total / (double)es.prefix_queries_total : 0},
      {"cinfer_llm_max_waiting", "Engine admission: waiting sequences beyond which requests are refused (0: none)",
       CINFER_BACKEND_METRIC_GAUGE, (double)mi.max_waiting},
      {"cinfer_llm_refused_waiting_total", "Requests refused at once (503) because max_waiting sequences waited",
       CINFER_BACKEND_METRIC_COUNTER, (double)es.refused_waiting_total},
      {"cinfer_llm_refused_too_long_total", "Requests refused (400): the prompt can never fit the context or KV cache",
       CINFER_BACKEND_METRIC_COUNTER, (double)too_long},
      {"cinfer_llm_grammar_compiles_total", "Grammars and JSON schemas compiled (a repeated one comes from the cache)",
       CINFER_BACKEND_METRIC_COUNTER, (double)compiles},
      {"cinfer_llm_grammar_tokens_total", "Tokens chosen under a grammar (structured output)",
       CINFER_BACKEND_METRIC_COUNTER, (double)es.grammar_tokens_total},
      {"cinfer_llm_grammar_masks_total", "Grammar tokens that needed the full vocabulary mask",
       CINFER_BACKEND_METRIC_COUNTER, (double)es.grammar_masks_total},
      {"cinfer_llm_grammar_mask_seconds_total", "Time spent computing grammar token masks",
       CINFER_BACKEND_METRIC_COUNTER, es.grammar_mask_seconds_total},
  };
  uint32_t n = sizeof all / sizeof all[0];
  for (uint32_t i = 0; i < n && i < cap; i++) out[i] = all[i];
  return n;
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
    .tokenize = llm_tokenize_m,
    .detokenize = llm_detokenize_m,
    .render_chat = llm_render_chat_m,
    .cancel = llm_cancel,
    .metrics = llm_metrics,
    .tokenizer_info = llm_tokenizer_info_m,
};
