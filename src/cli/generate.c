/* generate.c: `cinfer generate -m MODEL.gguf -p PROMPT`: a quick local run of the LLM
 * engine: prompt in, streamed text out, timing on stderr. `--inspect` prints the GGUF
 * metadata and tensor table instead; `--ids` prints generated token ids (one line) for
 * comparisons with other implementations; `--tokenize` prints the prompt's ids.
 * `--perplexity FILE` scores a text as llama.cpp's llama-perplexity does: the tokens are cut
 * into chunks of --ctx (default 512); each chunk is one prompt (its first token replaced by
 * BOS when the model adds one) whose prompt logprobs the engine computes in the prefill;
 * the second half of each chunk is scored; running and final perplexity are printed. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/llm/llm.h"
#include "cli/cli.h"
#include "core/buf.h"
#include "core/clock.h"

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

/* ---- --perplexity ---- */

typedef struct ppl_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int pending, failed;
  int n_ctx;
  float *lp;      /* [chunk][pos]: logprob of token pos given the tokens before it */
  int32_t *best;  /* [chunk][pos]: the most likely token there */
  uint8_t *seen;  /* [chunk][pos] */
  char err[256];
} ppl_state;

typedef struct ppl_chunk {
  ppl_state *ps;
  int index;
} ppl_chunk;

static void ppl_event(void *user, const llm_event *ev) {
  ppl_chunk *c = user;
  ppl_state *ps = c->ps;
  if (ev->prompt && ev->pos > 0 && ev->pos < ps->n_ctx) {
    size_t at = (size_t)c->index * (size_t)ps->n_ctx + (size_t)ev->pos;
    ps->lp[at] = ev->logprob;
    ps->best[at] = ev->n_top > 0 ? ev->top[0].id : -1;
    ps->seen[at] = 1;
  }
  if (ev->finish != LLM_FINISH_NONE) {
    pthread_mutex_lock(&ps->mu);
    if (ev->finish == LLM_FINISH_ERROR || ev->finish == LLM_FINISH_CANCELLED) {
      ps->failed++;
      snprintf(ps->err, sizeof ps->err, "chunk %d: %s", c->index, ev->error ? ev->error : "cancelled");
    }
    if (--ps->pending == 0) pthread_cond_signal(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
  }
}

/* Scores the text of `path` in chunks of n_ctx tokens; prints [chunk]running-ppl lines and
 * the final estimate; with out_path, writes every prompt position's logprob as TSV. */
static int run_perplexity(llm_engine *e, const char *path, int n_ctx, const char *out_path) {
  cinfer_status *st = NULL;
  cbuf text = {0};
  int32_t *toks = NULL, *bos = NULL;
  size_t nt = 0, nb = 0;
  st = cbuf_read_file(&text, path, (size_t)1 << 30);
  if (!st) st = llm_engine_tokenize(e, text.data ? text.data : "", text.len, true, false, &toks, &nt);
  cbuf_free(&text);
  if (!st) st = llm_engine_tokenize(e, "", 0, true, false, &bos, &nb); /* [BOS] when the model adds one */
  if (st) {
    fprintf(stderr, "cinfer generate: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    free(toks);
    free(bos);
    return 1;
  }
  int n_chunks = (int)(nt / (size_t)n_ctx);
  if (n_chunks < 1) {
    fprintf(stderr, "cinfer generate: --perplexity %s: %zu tokens, fewer than one chunk of --ctx %d\n", path, nt,
            n_ctx);
    free(toks);
    free(bos);
    return 1;
  }
  ppl_state ps = {.pending = n_chunks, .n_ctx = n_ctx};
  pthread_mutex_init(&ps.mu, NULL);
  pthread_cond_init(&ps.cv, NULL);
  size_t cells = (size_t)n_chunks * (size_t)n_ctx;
  ps.lp = calloc(cells, sizeof *ps.lp);
  ps.best = calloc(cells, sizeof *ps.best);
  ps.seen = calloc(cells, 1);
  ppl_chunk *chunks = calloc((size_t)n_chunks, sizeof *chunks);
  int32_t *chunk_toks = malloc(cells * sizeof *chunk_toks);
  int rc = 1;
  if (!ps.lp || !ps.best || !ps.seen || !chunks || !chunk_toks) {
    fprintf(stderr, "cinfer generate: out of memory for %d chunks\n", n_chunks);
    goto out;
  }
  fprintf(stderr, "perplexity: %zu tokens, %d chunks of %d, scoring the second half of each\n", nt, n_chunks, n_ctx);
  int submitted = 0;
  for (int c = 0; c < n_chunks; c++) {
    int32_t *ct = chunk_toks + (size_t)c * n_ctx;
    memcpy(ct, toks + (size_t)c * n_ctx, (size_t)n_ctx * sizeof *ct);
    if (nb == 1) ct[0] = bos[0];
    chunks[c] = (ppl_chunk){&ps, c};
    llm_request req = {.tokens = ct, .n_tokens = (size_t)n_ctx};
    llm_sampling_default(&req.sampling);
    req.sampling.temperature = 0;
    req.sampling.max_tokens = 1;
    req.sampling.logprobs = 1;
    req.sampling.prompt_logprobs = true;
    uint64_t id;
    st = llm_engine_submit(e, &req, ppl_event, &chunks[c], &id);
    if (st) break;
    submitted++;
  }
  pthread_mutex_lock(&ps.mu);
  ps.pending -= n_chunks - submitted;
  while (ps.pending > 0) pthread_cond_wait(&ps.cv, &ps.mu);
  pthread_mutex_unlock(&ps.mu);
  if (st || ps.failed) {
    fprintf(stderr, "cinfer generate: --perplexity: %s\n", st ? cinfer_status_message(st) : ps.err);
    cinfer_status_free(st);
    goto out;
  }
  FILE *out = out_path ? fopen(out_path, "w") : NULL;
  if (out_path && !out) {
    fprintf(stderr, "cinfer generate: --logprobs-out %s: %s\n", out_path, strerror(errno));
    goto out;
  }
  if (out) fprintf(out, "chunk\tpos\ttoken\tlogprob\targmax\n");
  double nll = 0, nll2 = 0;
  long count = 0, argmax_hits = 0;
  int first = n_ctx / 2;
  for (int c = 0; c < n_chunks; c++) {
    const int32_t *ct = chunk_toks + (size_t)c * n_ctx;
    for (int p = 1; p < n_ctx; p++) {
      size_t at = (size_t)c * n_ctx + (size_t)p;
      if (!ps.seen[at]) {
        fprintf(stderr, "cinfer generate: --perplexity: no logprob for chunk %d position %d\n", c, p);
        if (out) fclose(out);
        goto out;
      }
      if (out) fprintf(out, "%d\t%d\t%d\t%.6f\t%d\n", c, p, ct[p], ps.lp[at], ps.best[at]);
      if (p <= first) continue;
      nll -= ps.lp[at];
      nll2 += (double)ps.lp[at] * ps.lp[at];
      argmax_hits += ps.best[at] == ct[p];
      count++;
    }
    printf("[%d]%.4f%s", c + 1, exp(nll / (double)count), c + 1 < n_chunks ? "," : "\n");
  }
  if (out) fclose(out);
  double m = nll / (double)count, v = nll2 / (double)count - m * m, ppl = exp(m);
  printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, v > 0 && count > 1 ? sqrt(v / (double)(count - 1)) * ppl : 0);
  fprintf(stderr, "perplexity: %ld scored tokens, argmax equals the next token for %.1f%%\n", count,
          100.0 * (double)argmax_hits / (double)count);
  rc = 0;
out:
  pthread_mutex_destroy(&ps.mu);
  pthread_cond_destroy(&ps.cv);
  free(ps.lp);
  free(ps.best);
  free(ps.seen);
  free(chunks);
  free(chunk_toks);
  free(toks);
  free(bos);
  return rc;
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
          "                         prints aggregate output tokens/s\n"
          "  --perplexity FILE      score FILE as llama-perplexity does, in chunks of --ctx\n"
          "                         (default 512); no prompt needed\n"
          "  --logprobs-out FILE    with --perplexity: each position's logprob and argmax as TSV\n");
}

int cmd_generate(int argc, char **argv) {
  const char *model = NULL, *prompt = NULL, *chat = NULL, *inspect = NULL, *tmpl = NULL;
  const char *ppl_file = NULL, *lp_out = NULL;
  llm_sampling sp;
  llm_sampling_default(&sp);
  sp.temperature = 0;
  sp.max_tokens = 64;
  int threads = 0, ctx = 0, parallel = 1;
  bool ids = false, tokenize_only = false;
  enum { O_TEMP = 256, O_TOPK, O_TOPP, O_MINP, O_SEED, O_REP, O_CHAT, O_TMPL, O_CTX, O_IDS, O_TOK, O_INSPECT, O_PAR, O_PPL, O_LPOUT };
  static const struct option lo[] = {
      {"model", required_argument, 0, 'm'},  {"prompt", required_argument, 0, 'p'},
      {"max-tokens", required_argument, 0, 'n'}, {"threads", required_argument, 0, 't'},
      {"temp", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
      {"top-p", required_argument, 0, O_TOPP}, {"min-p", required_argument, 0, O_MINP},
      {"seed", required_argument, 0, O_SEED}, {"repeat-penalty", required_argument, 0, O_REP},
      {"chat", required_argument, 0, O_CHAT}, {"chat-template", required_argument, 0, O_TMPL},
      {"ctx", required_argument, 0, O_CTX},   {"ids", no_argument, 0, O_IDS},
      {"tokenize", no_argument, 0, O_TOK},    {"inspect", required_argument, 0, O_INSPECT},
      {"parallel", required_argument, 0, O_PAR}, {"perplexity", required_argument, 0, O_PPL},
      {"logprobs-out", required_argument, 0, O_LPOUT}, {"help", no_argument, 0, 'h'},   {0, 0, 0, 0}};
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
      case O_PPL: ppl_file = optarg; break;
      case O_LPOUT: lp_out = optarg; break;
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
  if (ppl_file) {
    if (!model) {
      usage(stderr);
      return 2;
    }
    int n_ctx = ctx > 0 ? ctx : 512;
    if (n_ctx < 4 || n_ctx > (1 << 20)) {
      fprintf(stderr, "cinfer generate: --ctx must be 4..1048576 with --perplexity\n");
      return 2;
    }
    /* the chunk plus the one token the engine generates; every row of a step may be a
     * prompt logprob (the default step budget is 512) */
    llm_engine_opts po = {.threads = threads, .ctx_len = n_ctx + 1, .max_seqs = 4, .prompt_logprob_rows = 512};
    llm_engine *pe;
    cinfer_status *pst = llm_engine_create(model, &po, &pe);
    if (pst) {
      fprintf(stderr, "cinfer generate: %s\n", cinfer_status_message(pst));
      cinfer_status_free(pst);
      return 1;
    }
    int rc = run_perplexity(pe, ppl_file, n_ctx, lp_out);
    llm_engine_destroy(pe);
    return rc;
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
  uint64_t t0 = clock_now_ns();
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
  uint64_t t1 = clock_now_ns();
  if (ids) {
    for (int i = 0; i < g.n_out; i++) printf(i ? " %d" : "%d", g.out_ids[i]);
  }
  printf("\n");
  if (parallel > 1) {
    double wall = (double)(t1 - t0) * 1e-9;
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
