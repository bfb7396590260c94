/* args.c: `cinfer bench` command line -> bench_config. Every error names the flag and the
 * value; nothing is opened or resolved here (that happens when the run starts). Strings in
 * the config are borrowed from argv. */
#include "bench/bench.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_config_default(bench_config *c) {
  memset(c, 0, sizeof *c);
  c->max_tokens = 128;
  c->prompt_len = 128;
  c->turns = 4;
  c->system_len = 64;
  c->stress_steps = 6;
  c->slo_iterations = 6;
  c->max_connections = 1024;
  c->seed = 1;
  c->warmup_ms = 1000;
  c->window_ms = 2000;
  c->max_windows = 10;
  c->stability = 0.10;
  c->timeout_ms = 30000;
  c->output_shm_size = 102400;
  for (int i = 0; i < 3; i++) c->image_std[i] = 1.0;
}

void bench_usage(void *file) {
  FILE *f = file;
  fputs(
      "usage: cinfer bench --url http://HOST:PORT TARGET [LOAD] [MEASURE] [OUTPUT]\n"
      "\n"
      "targets (one):\n"
      "  --model NAME [--model-version V]   KServe v2 HTTP infer; inputs from the model's\n"
      "                                     metadata, random with --seed\n"
      "      --shape NAME:D1,D2,...         fix an input's shape (dynamic dims); repeatable\n"
      "      --binary                       binary tensor extension instead of JSON\n"
      "      --shared-memory none|system    system: inputs and outputs in POSIX shared-memory\n"
      "                                     regions registered with the server (perf_analyzer's)\n"
      "      --output-shared-memory-size N  bytes of each output's region (default 102400)\n"
      "      --input-data FILE.json         perf_analyzer-style inputs {\"data\":[{...}]}\n"
      "      --images DIR                   PNG/JPEG files for the image input, resized to its\n"
      "                                     H x W; value = (pixel - mean) / std per channel\n"
      "      --image-mean M[,M,M] --image-std S[,S,S] --image-bgr\n"
      "      --grpc                         KServe v2 over gRPC (ModelInfer, raw tensors) to\n"
      "                                     --url http://HOST:GRPC_PORT; metadata and statistics\n"
      "                                     over gRPC too\n"
      "      --streaming                    with --grpc: ModelStreamInfer, one stream per user,\n"
      "                                     a request done at its final response (decoupled\n"
      "                                     models: 0..N responses; ttft/itl per response)\n"
      "      --streams-per-connection N     with --grpc: N users share one HTTP/2 connection (1)\n"
      "  --openai chat|completions --model NAME [--max-tokens N] [--prompt-len N] [--stream]\n"
      "                                     OpenAI API: TTFT, TPOT, ITL, e2e, tokens/s\n"
      "      --conversation [--turns N] [--think-ms MS] [--system-prompt-len N]\n"
      "                                     chat: each user (--concurrency N users) holds one\n"
      "                                     multi-turn conversation: a shared system prompt of N\n"
      "                                     words (64), --prompt-len words per question, the\n"
      "                                     answers kept in the history, --turns answers (4) and\n"
      "                                     a new conversation (users start at a random turn,\n"
      "                                     with a made-up earlier history); the user thinks MS (0;\n"
      "                                     uniform\n"
      "                                     0.5-1.5x) between an answer and the next question, and\n"
      "                                     asks again after a refusal (429/503: counted, with\n"
      "                                     the time it took to be refused)\n"
      "  --http-get PATH                    raw HTTP GET\n"
      "  --http-post PATH --body FILE [--content-type T]   raw HTTP POST\n"
      "  --header 'Name: value'             extra request header (repeatable), e.g. auth\n"
      "\n"
      "load (default: --concurrency 1):\n"
      "  --concurrency N[,N...]   closed loop, a sweep over the list\n"
      "  --rate R[,R...] [--poisson]   open loop at R requests/s (constant or Poisson)\n"
      "  --stress PCT [--stress-steps N]   measure capacity (closed loop at the last\n"
      "                           --concurrency, default 16), then ramp the rate to PCT%\n"
      "  --slo-p99 MS [--slo-iterations N]  highest rate whose p99 stays under MS\n"
      "  --threads N              worker threads (default: one per core)\n"
      "  --max-connections N      open loop: connections at most (default 1024)\n"
      "  --seed N                 random inputs and Poisson arrivals (default 1)\n"
      "\n"
      "measurement:\n"
      "  --warmup-ms MS (1000)  --window-ms MS (2000)  --max-windows N (10)\n"
      "  --stability PCT (10)   last 3 windows within PCT% (throughput and latency)\n"
      "  --requests N           fixed number of requests per level instead of windows\n"
      "  --timeout-ms MS (30000) per request\n"
      "\n"
      "output:\n"
      "  --json FILE  --csv FILE  --plot FILE.svg  --cost-per-hour USD  --quiet\n",
      f);
}

static cinfer_status *bad(const char *flag, const char *val, const char *why) {
  return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': %s", flag, val ? val : "", why);
}

static cinfer_status *parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi,
                                int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno) return bad(flag, s, "not an integer");
  if (v < lo || v > hi) {
    char why[96];
    snprintf(why, sizeof why, "must be between %lld and %lld", (long long)lo, (long long)hi);
    return bad(flag, s, why);
  }
  *out = v;
  return NULL;
}

static cinfer_status *parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
  int64_t v;
  cinfer_status *st = parse_i64(flag, s, lo, hi, &v);
  if (!st) *out = (int)v;
  return st;
}

static cinfer_status *parse_dbl(const char *flag, const char *s, double lo, double hi,
                                double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v)) return bad(flag, s, "not a number");
  if (v < lo || v > hi) {
    char why[96];
    snprintf(why, sizeof why, "must be between %g and %g", lo, hi);
    return bad(flag, s, why);
  }
  *out = v;
  return NULL;
}

/* "a,b,c" of numbers > 0. */
static cinfer_status *parse_list(const char *flag, const char *s, bool integer, double *out,
                                 int *n) {
  *n = 0;
  const char *p = s;
  char tok[64];
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == 0 || len >= sizeof tok) return bad(flag, s, "expected a comma-separated list of numbers");
    if (*n >= BENCH_MAX_LEVELS) return bad(flag, s, "too many values (at most 64)");
    memcpy(tok, p, len);
    tok[len] = 0;
    double v;
    if (integer) {
      int iv;
      cinfer_status *st = parse_int(flag, tok, 1, 1000000, &iv);
      if (st) return st;
      v = iv;
    } else {
      cinfer_status *st = parse_dbl(flag, tok, 1e-6, 1e9, &v);
      if (st) return st;
    }
    out[(*n)++] = v;
    if (!comma) break;
    p = comma + 1;
  }
  return NULL;
}

/* NAME:D1,D2,... */
static cinfer_status *parse_shape(const char *s, bench_shape_opt *o) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s) return bad("--shape", s, "expected NAME:D1,D2,...");
  size_t nl = (size_t)(colon - s);
  if (nl >= sizeof o->name) return bad("--shape", s, "input name too long");
  memcpy(o->name, s, nl);
  o->name[nl] = 0;
  double d[BENCH_MAX_LEVELS];
  int n;
  if (!colon[1]) return bad("--shape", s, "no dimensions after ':'");
  cinfer_status *st = parse_list("--shape", colon + 1, true, d, &n);
  if (st) return st;
  if (n > CINFER_MAX_DIMS) return bad("--shape", s, "more than 8 dimensions");
  o->ndim = n;
  for (int i = 0; i < n; i++) o->dims[i] = (int64_t)d[i];
  return NULL;
}

/* http://HOST[:PORT][/] */
static cinfer_status *parse_url(bench_config *c, const char *u) {
  if (strncmp(u, "https://", 8) == 0) return bad("--url", u, "https is not supported; use http://");
  if (strncmp(u, "http://", 7) != 0) return bad("--url", u, "expected http://HOST:PORT");
  const char *h = u + 7, *he, *port = NULL;
  const char *slash = strchr(h, '/');
  const char *end = slash ? slash : h + strlen(h);
  if (slash && slash[1]) return bad("--url", u, "give only http://HOST:PORT; the path comes from the target flags");
  if (*h == '[') {
    he = memchr(h, ']', (size_t)(end - h));
    if (!he) return bad("--url", u, "unterminated IPv6 address");
    h++;
    if (he + 1 < end) {
      if (he[1] != ':') return bad("--url", u, "expected ':' after ']'");
      port = he + 2;
    }
  } else {
    he = memchr(h, ':', (size_t)(end - h));
    if (he) port = he + 1;
    else he = end;
  }
  size_t hl = (size_t)(he - h);
  if (hl == 0 || hl >= sizeof c->host) return bad("--url", u, "missing or too long host");
  memcpy(c->host, h, hl);
  c->host[hl] = 0;
  if (port) {
    size_t pl = (size_t)(end - port);
    char pb[8];
    if (pl == 0 || pl >= sizeof pb) return bad("--url", u, "bad port");
    memcpy(pb, port, pl);
    pb[pl] = 0;
    int pv;
    cinfer_status *st = parse_int("--url", pb, 1, 65535, &pv);
    if (st) {
      cinfer_status_free(st);
      return bad("--url", u, "port must be 1..65535");
    }
    snprintf(c->port, sizeof c->port, "%d", pv);
  } else {
    strcpy(c->port, "80");
  }
  bool v6 = strchr(c->host, ':') != NULL;
  snprintf(c->host_header, sizeof c->host_header, "%s%s%s:%s", v6 ? "[" : "", c->host,
           v6 ? "]" : "", c->port);
  return NULL;
}

cinfer_status *bench_args_parse(bench_config *c, int argc, char **argv, bool *help) {
  *help = false;
  const char *url = NULL, *http_get = NULL, *http_post = NULL, *openai = NULL;
  bool have_conc = false;
  cinfer_status *st = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      *help = true;
      return NULL;
    }
  }
  for (int i = 1; i < argc && !st; i++) {
    char *a = argv[i];
    if (strncmp(a, "--", 2) != 0)
      return cinfer_status_new(CINFER_INVALID_ARG, "unexpected argument '%s' (flags start with --)", a);
    /* --flag=value or --flag value */
    char flag[64];
    const char *val = NULL;
    char *eq = strchr(a, '=');
    size_t fl = eq ? (size_t)(eq - a) : strlen(a);
    if (fl >= sizeof flag) return cinfer_status_new(CINFER_INVALID_ARG, "unknown flag '%s'", a);
    memcpy(flag, a, fl);
    flag[fl] = 0;
    if (eq) val = eq + 1;
    static const char *const boolean[] = {"--binary", "--poisson", "--stream", "--quiet", "--image-bgr",
                                          "--conversation", "--grpc", "--streaming", NULL};
    static const char *const valued[] = {
        "--url", "--http-get", "--http-post", "--body", "--content-type", "--model",
        "--model-version", "--shape", "--input-data", "--openai", "--max-tokens", "--prompt-len",
        "--concurrency", "--rate", "--stress", "--stress-steps", "--slo-p99", "--slo-iterations",
        "--threads", "--max-connections", "--seed", "--requests", "--warmup-ms", "--window-ms",
        "--max-windows", "--stability", "--timeout-ms", "--json", "--csv", "--plot",
        "--cost-per-hour", "--header", "--images", "--image-mean", "--image-std", "--shared-memory",
        "--output-shared-memory-size", "--turns", "--think-ms", "--system-prompt-len",
        "--streams-per-connection", NULL};
    bool is_bool = false, known = false;
    for (int k = 0; boolean[k]; k++) is_bool |= !strcmp(flag, boolean[k]);
    for (int k = 0; valued[k]; k++) known |= !strcmp(flag, valued[k]);
    if (!is_bool && !known)
      return cinfer_status_new(CINFER_INVALID_ARG, "unknown flag '%s' (see --help)", flag);
    if (is_bool) {
      if (val) return bad(flag, val, "takes no value");
    } else if (!val) {
      if (i + 1 >= argc) return cinfer_status_new(CINFER_INVALID_ARG, "%s needs a value", flag);
      val = argv[++i];
    }
    double list[BENCH_MAX_LEVELS];
    int n;
    if (!strcmp(flag, "--url")) url = val;
    else if (!strcmp(flag, "--http-get")) http_get = val;
    else if (!strcmp(flag, "--http-post")) http_post = val;
    else if (!strcmp(flag, "--body")) c->body_file = val;
    else if (!strcmp(flag, "--content-type")) c->content_type = val;
    else if (!strcmp(flag, "--header")) {
      if (c->n_headers >= BENCH_MAX_HEADERS) return bad(flag, val, "at most 16 --header flags");
      const char *colon = strchr(val, ':');
      if (!colon || colon == val || strpbrk(val, "\r\n"))
        return bad(flag, val, "expected 'Name: value' on one line");
      for (const char *q = val; q < colon; q++)
        if (*q <= ' ' || *q >= 127) return bad(flag, val, "bad character in the header name");
      c->headers[c->n_headers++] = val;
    } else if (!strcmp(flag, "--model")) c->model = val;
    else if (!strcmp(flag, "--model-version")) c->model_version = val;
    else if (!strcmp(flag, "--shape")) {
      if (c->n_shapes >= BENCH_MAX_SHAPES) return bad(flag, val, "at most 16 --shape flags");
      st = parse_shape(val, &c->shapes[c->n_shapes++]);
    } else if (!strcmp(flag, "--binary")) c->binary = true;
    else if (!strcmp(flag, "--shared-memory")) {
      if (!strcmp(val, "system")) c->shm_system = true;
      else if (!strcmp(val, "none")) c->shm_system = false;
      else if (!strcmp(val, "cuda")) return bad(flag, val, "CUDA shared memory needs a GPU; use system or none");
      else return bad(flag, val, "expected none or system");
    } else if (!strcmp(flag, "--output-shared-memory-size")) {
      int v;
      st = parse_int(flag, val, 1, 1 << 30, &v);
      c->output_shm_size = v;
    }
    else if (!strcmp(flag, "--input-data")) c->input_data = val;
    else if (!strcmp(flag, "--images")) c->images_dir = val;
    else if (!strcmp(flag, "--image-bgr")) c->image_bgr = true;
    else if (!strcmp(flag, "--image-mean") || !strcmp(flag, "--image-std")) {
      bool mean = !strcmp(flag, "--image-mean");
      double *dst = mean ? c->image_mean : c->image_std;
      int k = 0;
      char tmp[128];
      snprintf(tmp, sizeof tmp, "%s", val);
      for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t && !st; t = strtok_r(NULL, ",", &save)) {
        if (k == 3) { st = bad(flag, val, "one value or three (R,G,B)"); break; }
        st = parse_dbl(flag, t, mean ? -1e6 : 1e-9, 1e6, &dst[k++]);
      }
      if (!st && k != 1 && k != 3) st = bad(flag, val, "one value or three (R,G,B)");
      if (!st && k == 1) dst[1] = dst[2] = dst[0];
    }
    else if (!strcmp(flag, "--openai")) openai = val;
    else if (!strcmp(flag, "--max-tokens")) st = parse_int(flag, val, 1, 1000000, &c->max_tokens);
    else if (!strcmp(flag, "--prompt-len")) st = parse_int(flag, val, 1, 10000000, &c->prompt_len);
    else if (!strcmp(flag, "--stream")) c->stream = true;
    else if (!strcmp(flag, "--grpc")) c->grpc = true;
    else if (!strcmp(flag, "--streaming")) c->grpc_stream = true;
    else if (!strcmp(flag, "--streams-per-connection")) st = parse_int(flag, val, 1, 1000, &c->streams_per_conn);
    else if (!strcmp(flag, "--conversation")) c->conversation = true;
    else if (!strcmp(flag, "--turns")) st = parse_int(flag, val, 1, 1000, &c->turns);
    else if (!strcmp(flag, "--think-ms")) st = parse_int(flag, val, 0, 3600000, &c->think_ms);
    else if (!strcmp(flag, "--system-prompt-len")) st = parse_int(flag, val, 0, 100000, &c->system_len);
    else if (!strcmp(flag, "--concurrency")) {
      st = parse_list(flag, val, true, list, &n);
      for (int k = 0; !st && k < n; k++) c->concurrency[k] = (int)list[k];
      if (!st) c->n_concurrency = n, have_conc = true;
    } else if (!strcmp(flag, "--rate")) {
      st = parse_list(flag, val, false, c->rates, &c->n_rates);
    } else if (!strcmp(flag, "--poisson")) c->poisson = true;
    else if (!strcmp(flag, "--stress")) st = parse_dbl(flag, val, 1, 1000, &c->stress_pct);
    else if (!strcmp(flag, "--stress-steps")) st = parse_int(flag, val, 1, 64, &c->stress_steps);
    else if (!strcmp(flag, "--slo-p99")) st = parse_dbl(flag, val, 0.001, 3600000, &c->slo_p99_ms);
    else if (!strcmp(flag, "--slo-iterations")) st = parse_int(flag, val, 1, 30, &c->slo_iterations);
    else if (!strcmp(flag, "--threads")) st = parse_int(flag, val, 1, 1024, &c->threads);
    else if (!strcmp(flag, "--max-connections")) st = parse_int(flag, val, 1, 100000, &c->max_connections);
    else if (!strcmp(flag, "--seed")) {
      int64_t v = 0;
      st = parse_i64(flag, val, 0, INT64_MAX, &v);
      if (!st) c->seed = (uint64_t)v;
    } else if (!strcmp(flag, "--requests")) st = parse_i64(flag, val, 1, INT64_MAX / 2, &c->requests);
    else if (!strcmp(flag, "--warmup-ms")) st = parse_int(flag, val, 0, 3600000, &c->warmup_ms);
    else if (!strcmp(flag, "--window-ms")) st = parse_int(flag, val, 10, 3600000, &c->window_ms);
    else if (!strcmp(flag, "--max-windows")) st = parse_int(flag, val, 3, 1000, &c->max_windows);
    else if (!strcmp(flag, "--stability")) {
      double p = 0;
      st = parse_dbl(flag, val, 0.1, 100, &p);
      if (!st) c->stability = p / 100.0;
    } else if (!strcmp(flag, "--timeout-ms")) st = parse_int(flag, val, 1, 3600000, &c->timeout_ms);
    else if (!strcmp(flag, "--json")) c->json_path = val;
    else if (!strcmp(flag, "--csv")) c->csv_path = val;
    else if (!strcmp(flag, "--plot")) c->plot_path = val;
    else if (!strcmp(flag, "--cost-per-hour")) st = parse_dbl(flag, val, 0, 1e9, &c->cost_per_hour);
    else if (!strcmp(flag, "--quiet")) c->quiet = true;
    else return cinfer_status_new(CINFER_INVALID_ARG, "unknown flag '%s' (see --help)", flag);
  }
  if (st) return st;

  if (!url) return cinfer_status_new(CINFER_INVALID_ARG, "--url http://HOST:PORT is required");
  if ((st = parse_url(c, url))) return st;

  int targets = (http_get != NULL) + (http_post != NULL) + (openai != NULL);
  if (targets > 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "choose one target: --http-get, --http-post or --openai");
  if (http_get) {
    if (c->model) return cinfer_status_new(CINFER_INVALID_ARG, "--model does not apply to --http-get");
    if (c->body_file) return cinfer_status_new(CINFER_INVALID_ARG, "--body needs --http-post, not --http-get");
    c->target = BENCH_TARGET_HTTP_GET;
    c->path = http_get;
  } else if (http_post) {
    if (c->model) return cinfer_status_new(CINFER_INVALID_ARG, "--model does not apply to --http-post");
    if (!c->body_file) return cinfer_status_new(CINFER_INVALID_ARG, "--http-post needs --body FILE");
    c->target = BENCH_TARGET_HTTP_POST;
    c->path = http_post;
  } else if (openai) {
    if (!strcmp(openai, "chat")) c->openai_chat = true;
    else if (strcmp(openai, "completions")) return bad("--openai", openai, "expected chat or completions");
    if (!c->model) return cinfer_status_new(CINFER_INVALID_ARG, "--openai needs --model NAME");
    c->target = BENCH_TARGET_OPENAI;
  } else if (c->model) {
    c->target = BENCH_TARGET_KSERVE;
  } else {
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "no target: give --model NAME, --openai, --http-get or --http-post");
  }
  if (c->target != BENCH_TARGET_KSERVE && (c->binary || c->input_data || c->n_shapes || c->model_version || c->images_dir))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "--binary, --input-data, --images, --shape and --model-version apply to KServe targets (--model without --openai)");
  if (c->target != BENCH_TARGET_KSERVE && c->shm_system)
    return cinfer_status_new(CINFER_INVALID_ARG, "--shared-memory applies to KServe targets (--model without --openai)");
  if (c->grpc_stream && !c->grpc)
    return cinfer_status_new(CINFER_INVALID_ARG, "--streaming applies to --grpc (ModelStreamInfer); for OpenAI streams use --stream");
  if (c->streams_per_conn && !c->grpc)
    return cinfer_status_new(CINFER_INVALID_ARG, "--streams-per-connection applies to --grpc");
  if (c->grpc && c->target != BENCH_TARGET_KSERVE)
    return cinfer_status_new(CINFER_INVALID_ARG, "--grpc applies to KServe targets (--model without --openai, --http-get or --http-post)");
  if (c->grpc && c->binary)
    return cinfer_status_new(CINFER_INVALID_ARG, "--binary applies to HTTP: gRPC always sends raw tensors (raw_input_contents)");
  if (c->shm_system && c->binary)
    return cinfer_status_new(CINFER_INVALID_ARG, "--shared-memory system and --binary are exclusive (the tensors travel in the regions)");
  if (c->input_data && c->images_dir)
    return cinfer_status_new(CINFER_INVALID_ARG, "--input-data and --images are exclusive");
  const char *pflag = c->target == BENCH_TARGET_HTTP_GET ? "--http-get" : "--http-post";
  if (c->path && c->path[0] != '/') return bad(pflag, c->path, "path must start with '/'");
  for (const char *q = c->path; q && *q; q++)
    if ((unsigned char)*q <= ' ' || *q == 127) return bad(pflag, c->path, "no spaces or control characters (percent-encode them)");
  if (c->content_type && strpbrk(c->content_type, "\r\n"))
    return bad("--content-type", c->content_type, "must be one line");
  /* model names and versions go into URL paths as they are */
  const char *names[2][2] = {{"--model", c->model}, {"--model-version", c->model_version}};
  for (int i = 0; i < 2; i++)
    for (const char *q = names[i][1]; q && *q; q++)
      if (!(isalnum((unsigned char)*q) || strchr("._-~", *q)))
        return bad(names[i][0], names[i][1], "use letters, digits and . _ - ~ only");
  if (c->target != BENCH_TARGET_OPENAI && c->stream)
    return cinfer_status_new(CINFER_INVALID_ARG, "--stream applies to --openai");

  if (c->conversation && !(c->target == BENCH_TARGET_OPENAI && c->openai_chat))
    return cinfer_status_new(CINFER_INVALID_ARG, "--conversation applies to --openai chat");
  if (c->conversation && (c->n_rates || c->stress_pct || c->slo_p99_ms))
    return cinfer_status_new(CINFER_INVALID_ARG, "--conversation is a closed loop of users (--concurrency N): "
                             "not with --rate, --stress or --slo-p99 (the think time sets the offered load)");
  int modes = (c->n_rates > 0) + (c->stress_pct > 0) + (c->slo_p99_ms > 0);
  if (modes > 1) return cinfer_status_new(CINFER_INVALID_ARG, "choose one of --rate, --stress and --slo-p99");
  if (c->poisson && !c->n_rates && !c->stress_pct && !c->slo_p99_ms)
    return cinfer_status_new(CINFER_INVALID_ARG, "--poisson applies to open-loop modes (--rate, --stress, --slo-p99)");
  if (c->n_rates) {
    if (have_conc) return cinfer_status_new(CINFER_INVALID_ARG, "--rate and --concurrency are exclusive (open vs closed loop)");
    c->load = BENCH_LOAD_RATE;
  } else if (c->stress_pct) {
    c->load = BENCH_LOAD_STRESS;
  } else if (c->slo_p99_ms) {
    c->load = BENCH_LOAD_SLO;
  } else {
    c->load = BENCH_LOAD_CLOSED;
  }
  if (!have_conc) {
    c->n_concurrency = 1;
    c->concurrency[0] = c->load == BENCH_LOAD_CLOSED ? 1 : 16;
  }
  if (c->requests && c->load != BENCH_LOAD_CLOSED && c->load != BENCH_LOAD_RATE)
    return cinfer_status_new(CINFER_INVALID_ARG, "--requests applies to --concurrency and --rate runs");
  return NULL;
}
