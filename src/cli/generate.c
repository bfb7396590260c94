/* generate.c: `cinfer generate -m MODEL.gguf -p PROMPT`: a quick local run of the LLM
 * engine: prompt in, streamed text out, timing on stderr. `--inspect` prints the GGUF
 * metadata and tensor table instead; `--ids` prints generated token ids (one line) for
 * comparisons with other implementations; `--tokenize` prints the prompt's ids. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/llm/llm.h"
#include "cli/cli.h"

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int pending; /* sequences not finished (--parallel) */
  bool done, ids, quiet;
  int n_tokens;
  llm_event final;
  int32_t *out_ids;
  int n_out, cap_out;
} gen_state;

static void on_event(void *user, const llm_event *ev) {
  gen_state *g = user;
  if (!g->quiet && ev->text_len) {
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
  }
  if (ev->token >= 0 && g->n_out < g->cap_out) g->out_ids[g->n_out++] = ev->token;
  if (ev->finish != LLM_FINISH_NONE) {
    pthread_mutex_lock(&g->mu);
    g->final = *ev;
    g->final.text = NULL;
    g->final.top = NULL;
    g->n_tokens += ev->completion_tokens;
    g->done = --g->pending == 0;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
  }
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: cinfer generate -m MODEL.gguf [-p PROMPT | --chat MESSAGE] [options]\n"
          "       cinfer generate --inspect MODEL.gguf\n"
          "  -n, --max-tokens N     tokens to generate (default 64)\n"
          "  -t, --threads N        compute threads (default: all CPUs)\n"
          "  --temp T               temperature (default 0 = greedy)\n"
          "  --top-k K --top-p P --min-p P --seed S --repeat-penalty R\n"
          "  --chat MESSAGE         wrap MESSAGE as a user turn with the model's chat template\n"
          "  --chat-template NAME   override the template (chatml)\n"
          "  --ctx N                context length (default min(model, 4096))\n"
          "  --ids                  print generated token ids instead of text\n"
          "  --tokenize             print the prompt's token ids and exit\n"
          "  --parallel N           run N copies of the request at once (continuous batching);\n"
          "                         prints aggregate output tokens/s\n");
}

int cmd_generate(int argc, char **argv) {
  const char *model = NULL, *prompt = NULL, *chat = NULL, *inspect = NULL, *tmpl = NULL;
  llm_sampling sp;
  llm_sampling_default(&sp);
  sp.temperature = 0;
  sp.max_tokens = 64;
  int threads = 0, ctx = 0, parallel = 1;
  bool ids = false, tokenize_only = false;
  enum { O_TEMP = 256, O_TOPK, O_TOPP, O_MINP, O_SEED, O_REP, O_CHAT, O_TMPL, O_CTX, O_IDS, O_TOK, O_INSPECT, O_PAR };
  static const struct option lo[] = {
      {"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
      {"max-tokens", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
      {"temp", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
      {"top-p", required_argument, 0, O_TOPP}, {"min-p", required_argument, 0, O_MINP},
      {"seed", required_argument, 0, O_SEED}, {"repeat-penalty", required_argument, 0, O_REP},
      {"chat", required_argument, 0, O_CHAT}, {"chat-template", required_argument, 0, O_TMPL},
      {"ctx", required_argument, 0, O_CTX},   {"ids", no_argument, 0, O_IDS},
      {"tokenize", no_argument, 0, O_TOK},    {"inspect", required_argument, 0, O_INSPECT},
      {"parallel", required_argument, 0, O_PAR}, {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "m:p:n:t:h", lo, NULL)) != -1) {
    switch (c) {
      case 'm': model = optarg; break;
      case 'p': prompt = optarg; break;
      case 'n': sp.max_tokens = atoi(optarg); break;
      case 't': threads = atoi(optarg); break;
      case O_TEMP: sp.temperature = strtof(optarg, NULL); break;
      case O_TOPK: sp.top_k = atoi(optarg); break;
      case O_TOPP: sp.top_p = strtof(optarg, NULL); break;
      case O_MINP: sp.min_p = strtof(optarg, NULL); break;
      case O_SEED: sp.seed = strtoll(optarg, NULL, 10); break;
      case O_REP: sp.repetition_penalty = strtof(optarg, NULL); break;
      case O_CHAT: chat = optarg; break;
      case O_TMPL: tmpl = optarg; break;
      case O_CTX: ctx = atoi(optarg); break;
      case O_IDS: ids = true; break;
      case O_TOK: tokenize_only = true; break;
      case O_INSPECT: inspect = optarg; break;
      case O_PAR: parallel = atoi(optarg); break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (inspect) {
    cinfer_status *st = llm_gguf_dump_file(inspect, stdout);
    if (st) {
      fprintf(stderr, "cinfer generate: %s\n", cinfer_status_message(st));
      cinfer_status_free(st);
      return 1;
    }
    return 0;
  }
  if (!model || (!prompt && !chat)) {
    usage(stderr);
    return 2;
  }
  if (parallel < 1 || parallel > 1024) {
    fprintf(stderr, "cinfer generate: --parallel must be 1..1024\n");
    return 2;
  }
  llm_engine_opts o = {.threads = threads, .ctx_len = ctx, .max_seqs = parallel < 4 ? 4 : parallel,
                       .chat_template = tmpl};
  llm_engine *e;
  cinfer_status *st = llm_engine_create(model, &o, &e);
  if (st) {
    fprintf(stderr, "cinfer generate: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return 1;
  }
  char *rendered = NULL;
  if (chat) {
    const char *role = "user";
    st = llm_engine_chat_render(e, &role, &chat, 1, true, &rendered);
    if (st) goto fail;
    prompt = rendered;
  }
  if (tokenize_only) {
    int32_t *t;
    size_t n;
    st = llm_engine_tokenize(e, prompt, strlen(prompt), true, chat != NULL, &t, &n);
    if (st) goto fail;
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", t[i]);
    printf("\n");
    free(t);
    free(rendered);
    llm_engine_destroy(e);
    return 0;
  }
  gen_state g = {.ids = ids, .quiet = ids || parallel > 1, .pending = parallel};
  pthread_mutex_init(&g.mu, NULL);
  pthread_cond_init(&g.cv, NULL);
  g.cap_out = sp.max_tokens + 1;
  g.out_ids = malloc((size_t)g.cap_out * sizeof *g.out_ids);
  llm_request req = {.prompt = prompt, .prompt_len = strlen(prompt), .add_special = true,
                     .parse_special = chat != NULL, .sampling = sp};
  uint64_t id;
  if (!g.out_ids) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < parallel; i++) {
    if (parallel > 1 && sp.seed >= 0) req.sampling.seed = sp.seed + i;
    st = llm_engine_submit(e, &req, on_event, &g, &id);
    if (st) {
      /* earlier copies are cancelled by llm_engine_destroy, which waits for their events */
      pthread_mutex_lock(&g.mu);
      g.pending -= parallel - i;
      pthread_mutex_unlock(&g.mu);
      llm_engine_destroy(e);
      e = NULL;
      free(g.out_ids);
      goto fail;
    }
  }
  pthread_mutex_lock(&g.mu);
  while (!g.done) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (ids) {
    for (int i = 0; i < g.n_out; i++) printf(i ? " %d" : "%d", g.out_ids[i]);
  }
  printf("\n");
  if (parallel > 1) {
    double wall = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr, "[parallel %d] %d output tokens in %.2f s: %.1f tok/s aggregate\n", parallel, g.n_tokens, wall,
            g.n_tokens / wall);
  }
  double dec = g.final.e2e_s - g.final.ttft_s;
  fprintf(stderr, "[%s] prompt %d tokens, generated %d; TTFT %.3f s; decode %.1f tok/s\n",
          llm_finish_name(g.final.finish), g.final.prompt_tokens, g.final.completion_tokens, g.final.ttft_s,
          g.final.completion_tokens > 1 && dec > 0 ? (g.final.completion_tokens - 1) / dec : 0.0);
  free(g.out_ids);
  free(rendered);
  llm_engine_destroy(e);
  return g.final.finish == LLM_FINISH_ERROR ? 1 : 0;
fail:
  fprintf(stderr, "cinfer generate: %s\n", cinfer_status_message(st));
  cinfer_status_free(st);
  free(rendered);
  llm_engine_destroy(e);
  return 1;
}
