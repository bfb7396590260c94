/* run.c: the streams of one run. Each stream has a thread that decodes its source, paces
 * it (frame k is due at start + k / fps), sends every k-th frame through the pipeline
 * when fewer than --max-inflight of its frames are in the pipeline (else the frame is
 * dropped, as a live video system must) and handles its own completions: latency from
 * the frame's due time (so a slow pipeline cannot hide queueing), a JSON line, the live
 * page. A failing frame or stream is reported and the others go on. --find-max repeats
 * runs at growing stream counts on the same pipeline (the models stay loaded). */
#include "streams/streams.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/report.h"
#include "core/buf.h"
#include "core/clock.h"

typedef struct stream stream;
typedef struct run run;

struct stream {
  run *r;
  int id;
  const char *url;
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  streams_frame *done_head; /* completions not handled yet */
  streams_frame *frames;    /* pool: max_inflight + 1 */
  int n_frames;
  int inflight;
  bool *busy; /* per pool frame: in the pipeline or its completion not handled yet */
  double fps; /* the pace */
  /* statistics (stream thread only, read after join) */
  uint64_t decoded, sent, delivered, dropped, errors, frame_errors;
  bench_hist *lat;
  uint64_t stats_from_ns, end_ns, last_publish_ns;
  bool failed;
  char error[512];
};

struct run {
  const streams_config *c;
  streams_pipeline *pipe;
  streams_live *live;
  FILE *jsonl;
  pthread_mutex_t out_mu;
  stream *s;
  int n;
  atomic_bool stop;
  double warmup_s;
};

static atomic_bool g_interrupted;
static void on_sigint(int sig) {
  (void)sig;
  atomic_store(&g_interrupted, true);
}

/* ---- configuration -------------------------------------------------------------------- */

void streams_config_default(streams_config *c) {
  memset(c, 0, sizeof *c);
  c->streams = 0;
  c->every = 1;
  c->max_inflight = 1;
  c->stall_ms = 5000;
  c->slo_p99_ms = 200;
  c->max_streams = 64;
  c->fps_tolerance = 0.05;
  c->http_port = -1;
  c->http_host = "127.0.0.1";
  c->warmup_s = -1;
}

void streams_usage(void *file) {
  fprintf(file,
          "usage: cinfer streams --source FILE|URL [--source ...] --model NAME\n"
          "                      (--model-repository DIR | --url http://HOST:PORT) [options]\n\n"
          "Decodes video sources (files, played in a loop, or rtsp:// http:// URLs), paces each\n"
          "at its frame rate and sends every frame (or every k-th) through a pipeline, in-process\n"
          "or to a cinfer serve over HTTP. Per-frame results as JSON lines; per-stream delivered\n"
          "fps, dropped frames and latency p50/p99.\n\n"
          "options:\n"
          "  --source S            a video file or URL; repeatable (stream i reads source i mod n)\n"
          "  --streams N           streams to run (default: one per source)\n"
          "  --model NAME          the pipeline: an ensemble such as face_analytics_frames (input\n"
          "                        UINT8 [1, H, W, 3]) or face_analytics (BYTES: frames sent as JPEG)\n"
          "  --model-repository D  run the pipeline in-process on this repository\n"
          "  --url http://H:P      or send frames to this server (KServe v2 HTTP, binary tensors)\n"
          "  --threads N           in-process: the server's thread budget (default: CPUs)\n"
          "  --every K             send every K-th frame (default 1)\n"
          "  --fps F|max           pace at F frames/s instead of the source's rate; max: no pacing,\n"
          "                        each frame is sent as soon as the stream has room (throughput)\n"
          "  --max-inflight N      frames of one stream in the pipeline at once (default 1); a frame\n"
          "                        due while N are in flight is dropped\n"
          "  --stall-timeout-ms N  a source silent this long fails (default 5000)\n"
          "  --duration S          run S seconds (default: until the sources end, or --frames)\n"
          "  --frames N            stop each stream after N frames sent\n"
          "  --warmup S            statistics start after S seconds (default 0; 1 with --find-max)\n"
          "  --jsonl FILE          per-frame results as JSON lines ('-': stdout)\n"
          "  --json FILE           the run's summary (or the --find-max report) as JSON\n"
          "  --plot FILE           --find-max: SVG of latency percentiles against frames/s\n"
          "  --cost-per-hour USD   report the cost per 1,000 frames at this price\n"
          "  --find-max            search the largest stream count whose every stream holds the\n"
          "                        target fps with p99 latency under --slo-p99 (each level runs\n"
          "                        --duration seconds, default 10)\n"
          "  --target-fps F        per stream (default: the source's fps / --every)\n"
          "  --slo-p99 MS          (default 200)\n"
          "  --max-streams N       upper bound of the search (default 64)\n"
          "  --fps-tolerance X     a stream holds the target at fps >= target * (1 - X) (0.05)\n"
          "  --http-port N         serve the live page at http://HOST:N/streams (0: a free port)\n"
          "  --http-host ADDR      address of the live page (default 127.0.0.1)\n"
          "  --publish http://H:P  push the live page's frames to this cinfer serve, which\n"
          "                        shows them at /streams (serve --streams-page)\n"
          "  --quiet               no per-stream table\n"
          "  -h, --help            this help\n");
}

static cinfer_status *num(const char *flag, const char *v, double lo, double hi, double *out) {
  char *e = NULL;
  errno = 0;
  double d = strtod(v, &e);
  if (!*v || *e || errno || !isfinite(d) || d < lo || d > hi)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: '%s' is not a number in [%g, %g]", flag, v, lo, hi);
  *out = d;
  return NULL;
}

cinfer_status *streams_args_parse(streams_config *c, int argc, char **argv, bool *help) {
  enum {
    O_SRC = 256, O_STREAMS, O_MODEL, O_REPO, O_URL, O_THREADS, O_EVERY, O_FPS, O_INFL, O_STALL, O_DUR,
    O_FRAMES, O_WARM, O_JSONL, O_JSON, O_PLOT, O_COST, O_FIND, O_TFPS, O_SLO, O_MAXS, O_TOL, O_HPORT,
    O_HHOST, O_QUIET, O_PUBLISH
  };
  static const struct option opts[] = {
      {"source", required_argument, 0, O_SRC},       {"streams", required_argument, 0, O_STREAMS},
      {"model", required_argument, 0, O_MODEL},      {"model-repository", required_argument, 0, O_REPO},
      {"url", required_argument, 0, O_URL},          {"threads", required_argument, 0, O_THREADS},
      {"every", required_argument, 0, O_EVERY},      {"fps", required_argument, 0, O_FPS},
      {"max-inflight", required_argument, 0, O_INFL}, {"stall-timeout-ms", required_argument, 0, O_STALL},
      {"duration", required_argument, 0, O_DUR},     {"frames", required_argument, 0, O_FRAMES},
      {"warmup", required_argument, 0, O_WARM},      {"jsonl", required_argument, 0, O_JSONL},
      {"json", required_argument, 0, O_JSON},        {"plot", required_argument, 0, O_PLOT},
      {"cost-per-hour", required_argument, 0, O_COST}, {"find-max", no_argument, 0, O_FIND},
      {"target-fps", required_argument, 0, O_TFPS},  {"slo-p99", required_argument, 0, O_SLO},
      {"max-streams", required_argument, 0, O_MAXS}, {"fps-tolerance", required_argument, 0, O_TOL},
      {"http-port", required_argument, 0, O_HPORT},  {"http-host", required_argument, 0, O_HHOST},
      {"publish", required_argument, 0, O_PUBLISH},
      {"quiet", no_argument, 0, O_QUIET},            {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  *help = false;
  optind = 1;
  opterr = 0;
  int o;
  double d;
  cinfer_status *st = NULL;
  while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    const char *flag = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    switch (o) {
      case 'h': *help = true; return NULL;
      case O_SRC:
        if (c->n_sources == STREAMS_MAX_SOURCES)
          return cinfer_status_new(CINFER_INVALID_ARG, "--source: at most %d sources", STREAMS_MAX_SOURCES);
        c->sources[c->n_sources++] = optarg;
        break;
      case O_STREAMS: if ((st = num("--streams", optarg, 1, STREAMS_MAX, &d))) return st; c->streams = (int)d; break;
      case O_MODEL: c->model = optarg; break;
      case O_REPO: c->repository = optarg; break;
      case O_URL: c->url = optarg; break;
      case O_THREADS: if ((st = num("--threads", optarg, 0, 1024, &d))) return st; c->threads = (int)d; break;
      case O_EVERY: if ((st = num("--every", optarg, 1, 1000, &d))) return st; c->every = (int)d; break;
      case O_FPS:
        if (!strcmp(optarg, "max")) {
          c->fps = -1; /* unpaced */
          break;
        }
        if ((st = num("--fps", optarg, 0.01, 1000, &d))) return st;
        c->fps = d;
        break;
      case O_INFL: if ((st = num("--max-inflight", optarg, 1, 64, &d))) return st; c->max_inflight = (int)d; break;
      case O_STALL: if ((st = num("--stall-timeout-ms", optarg, 1, 3600000, &d))) return st; c->stall_ms = (int)d; break;
      case O_DUR: if ((st = num("--duration", optarg, 0.1, 86400, &d))) return st; c->duration_s = d; break;
      case O_FRAMES: if ((st = num("--frames", optarg, 1, 1e12, &d))) return st; c->frames = (int64_t)d; break;
      case O_WARM: if ((st = num("--warmup", optarg, 0, 3600, &d))) return st; c->warmup_s = d; break;
      case O_JSONL: c->jsonl_path = optarg; break;
      case O_JSON: c->json_path = optarg; break;
      case O_PLOT: c->plot_path = optarg; break;
      case O_COST: if ((st = num("--cost-per-hour", optarg, 0, 1e9, &d))) return st; c->cost_per_hour = d; break;
      case O_FIND: c->find_max = true; break;
      case O_TFPS: if ((st = num("--target-fps", optarg, 0.01, 1000, &d))) return st; c->target_fps = d; break;
      case O_SLO: if ((st = num("--slo-p99", optarg, 0.001, 1e7, &d))) return st; c->slo_p99_ms = d; break;
      case O_MAXS: if ((st = num("--max-streams", optarg, 1, STREAMS_MAX, &d))) return st; c->max_streams = (int)d; break;
      case O_TOL: if ((st = num("--fps-tolerance", optarg, 0, 0.99, &d))) return st; c->fps_tolerance = d; break;
      case O_HPORT: if ((st = num("--http-port", optarg, 0, 65535, &d))) return st; c->http_port = (int)d; break;
      case O_HHOST: c->http_host = optarg; break;
      case O_PUBLISH: c->publish_url = optarg; break;
      case O_QUIET: c->quiet = true; break;
      case ':': return cinfer_status_new(CINFER_INVALID_ARG, "%s needs a value", flag);
      default: return cinfer_status_new(CINFER_INVALID_ARG, "unknown option '%s'", flag);
    }
  }
  if (optind < argc) return cinfer_status_new(CINFER_INVALID_ARG, "unexpected argument '%s'", argv[optind]);
  if (!c->n_sources) return cinfer_status_new(CINFER_INVALID_ARG, "--source is required");
  if (!c->model) return cinfer_status_new(CINFER_INVALID_ARG, "--model is required");
  if (!c->repository == !c->url)
    return cinfer_status_new(CINFER_INVALID_ARG, "give one of --model-repository (in-process) and --url");
  if (c->plot_path && !c->find_max) return cinfer_status_new(CINFER_INVALID_ARG, "--plot needs --find-max");
  if (!c->streams) c->streams = c->n_sources;
  if (c->find_max && c->duration_s == 0) c->duration_s = 10;
  if (c->find_max && c->fps < 0) return cinfer_status_new(CINFER_INVALID_ARG, "--find-max needs paced streams, not --fps max");
  if (c->find_max && c->frames) return cinfer_status_new(CINFER_INVALID_ARG, "--find-max runs by --duration, not --frames");
  if (c->warmup_s < 0) c->warmup_s = c->find_max ? 1 : 0;
  return NULL;
}

/* ---- output --------------------------------------------------------------------------- */

static void jsonl_write(run *r, const char *line) {
  if (!r->jsonl) return;
  pthread_mutex_lock(&r->out_mu);
  fputs(line, r->jsonl);
  fputc('\n', r->jsonl);
  pthread_mutex_unlock(&r->out_mu);
}

static void jsonl_error(run *r, const stream *s, int64_t frame, const char *msg, bool fatal) {
  cbuf b = {0};
  cbuf_printf(&b, "{\"stream\":%d,\"source\":", s->id);
  cbuf_json_string(&b, s->url, strlen(s->url));
  if (frame >= 0) cbuf_printf(&b, ",\"frame\":%lld", (long long)frame);
  cbuf_puts(&b, ",\"error\":");
  cbuf_json_string_utf8(&b, msg, strlen(msg));
  if (fatal) cbuf_puts(&b, ",\"stream_failed\":true");
  cbuf_puts(&b, "}");
  if (!b.oom) jsonl_write(r, b.data);
  cbuf_free(&b);
}

static void frame_clear(streams_frame *f) {
  cinfer_status_free(f->error);
  f->error = NULL;
  free(f->json);
  f->json = NULL;
  free(f->boxes);
  f->boxes = NULL;
  for (int i = 0; f->labels && i < f->n_boxes; i++) free(f->labels[i]);
  free(f->labels);
  f->labels = NULL;
  f->n_boxes = 0;
  free(f->jpeg);
  f->jpeg = NULL;
  f->jpeg_len = 0;
}

/* ---- the stream thread ---------------------------------------------------------------- */

static void on_done(void *user, streams_frame *f) {
  (void)user;
  stream *s = &((run *)user)->s[f->stream];
  pthread_mutex_lock(&s->mu);
  f->next = s->done_head;
  s->done_head = f;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void handle_done(stream *s, streams_frame *f) {
  run *r = s->r;
  bool counted = f->due_ns >= s->stats_from_ns;
  uint64_t lat = f->done_ns > f->due_ns ? f->done_ns - f->due_ns : 0;
  if (f->error) {
    if (counted) s->errors++;
    snprintf(s->error, sizeof s->error, "%s", cinfer_status_message(f->error));
    jsonl_error(r, s, f->seq, cinfer_status_message(f->error), false);
  } else {
    if (counted) {
      s->delivered++;
      bench_hist_record(s->lat, lat);
    }
    if (r->jsonl) {
      cbuf b = {0};
      cbuf_printf(&b, "{\"stream\":%d,\"source\":", s->id);
      cbuf_json_string(&b, s->url, strlen(s->url));
      cbuf_printf(&b, ",\"frame\":%lld,\"width\":%d,\"height\":%d,\"latency_ms\":%.3f,\"outputs\":%s}",
                  (long long)f->seq, f->w, f->h, (double)lat / 1e6, f->json ? f->json : "{}");
      if (!b.oom) jsonl_write(r, b.data);
      cbuf_free(&b);
    }
    uint64_t now = clock_now_ns();
    if (r->live && now - s->last_publish_ns > 200000000ull) {
      s->last_publish_ns = now;
      double el = (double)(now - s->stats_from_ns) / 1e9;
      streams_live_publish(r->live, f, s->url, el > 0 ? (double)s->delivered / el : 0, s->delivered,
                           s->dropped, s->errors + s->frame_errors, s->error[0] ? s->error : NULL);
    }
  }
  frame_clear(f);
  s->busy[f->slot] = false;
  s->inflight--;
}

/* Handles completions until `until_ns` (0: only those already there). With `first`, it
 * returns as soon as it has handled some (an unpaced stream waits for a free place in the
 * pipeline, not for the deadline: waiting out the deadline after a completion capped each
 * stream at one frame per 50 ms). Returns at once when the run stops. */
static void pump_until(stream *s, uint64_t until_ns, bool first) {
  for (;;) {
    pthread_mutex_lock(&s->mu);
    while (!s->done_head && clock_now_ns() < until_ns && !atomic_load(&s->r->stop) &&
           !atomic_load(&g_interrupted)) {
      uint64_t left = until_ns - clock_now_ns();
      struct timespec ts = clock_abs_after_ms(left / 1000000ull + 1);
      if (left < 2000000ull) { /* < 2 ms: a short precise wait */
        pthread_mutex_unlock(&s->mu);
        struct timespec d = {0, (long)left};
        nanosleep(&d, NULL);
        pthread_mutex_lock(&s->mu);
        break;
      }
      pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    streams_frame *l = s->done_head;
    s->done_head = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!l) return;
    while (l) {
      streams_frame *n = l->next;
      l->next = NULL;
      handle_done(s, l);
      l = n;
    }
    if (first || clock_now_ns() >= until_ns) return;
  }
}

static void pump(stream *s, uint64_t until_ns) { pump_until(s, until_ns, false); }

static bool stopping(const stream *s) { return atomic_load(&s->r->stop) || atomic_load(&g_interrupted); }

static void stream_fail(stream *s, const char *msg) {
  s->failed = true;
  snprintf(s->error, sizeof s->error, "%s", msg);
  jsonl_error(s->r, s, -1, msg, true);
  streams_live_error(s->r->live, s->id, s->url, msg);
  if (!s->r->c->quiet) fprintf(stderr, "cinfer streams: stream %d: %s\n", s->id, msg);
}

static void *stream_main(void *arg) {
  stream *s = arg;
  run *r = s->r;
  const streams_config *c = r->c;
  streams_source *src = NULL;
  cinfer_status *st = streams_source_open(s->url, true, c->stall_ms, &src);
  uint64_t t0 = clock_now_ns();
  s->stats_from_ns = t0 + (uint64_t)(r->warmup_s * 1e9);
  if (st) {
    stream_fail(s, cinfer_status_message(st));
    cinfer_status_free(st);
    s->end_ns = clock_now_ns();
    return NULL;
  }
  s->fps = c->fps > 0 ? c->fps : streams_source_fps(src) > 0 ? streams_source_fps(src) : 25;
  int w = streams_source_width(src), h = streams_source_height(src);
  s->n_frames = c->max_inflight + 1;
  s->frames = calloc((size_t)s->n_frames, sizeof *s->frames);
  bool *busy = s->busy = calloc((size_t)s->n_frames, sizeof *busy);
  for (int i = 0; s->frames && i < s->n_frames; i++) {
    s->frames[i].rgb = malloc((size_t)w * (size_t)h * 3);
    if (!s->frames[i].rgb) {
      free(busy);
      busy = s->busy = NULL;
    }
  }
  if (!s->frames || !busy) {
    stream_fail(s, "out of memory for frame buffers");
    goto out;
  }
  bool unpaced = c->fps < 0;
  if (unpaced) s->fps = 0;
  uint64_t interval = unpaced ? 0 : (uint64_t)(1e9 / s->fps);
  uint64_t start = clock_now_ns();
  int64_t seq = 0;
  bool jpeg = streams_pipeline_wants_jpeg(r->pipe);
  int consecutive_bad = 0;
  while (!stopping(s)) {
    if (c->frames && (int64_t)s->sent >= c->frames) break;
    /* unpaced (--fps max): the next frame waits for a free place in the pipeline, so none
     * is dropped and the stream runs as fast as the pipeline answers */
    while (unpaced && s->inflight >= c->max_inflight && !stopping(s)) pump_until(s, clock_now_ns() + 50000000ull, true);
    /* a free buffer: one not in the pipeline (in flight < n_frames always leaves one) */
    int fi = -1;
    for (int i = 0; i < s->n_frames && fi < 0; i++)
      if (!busy[i]) fi = i;
    if (fi < 0) { /* cannot happen: wait for a completion */
      pump_until(s, clock_now_ns() + 1000000ull, true);
      continue;
    }
    streams_frame *f = &s->frames[fi];
    bool eof = false, ferr = false;
    st = streams_source_read(src, f->rgb, &eof, &ferr);
    if (eof) {
      if (!streams_source_is_file(src) && !c->quiet) /* a network source that ended cleanly */
        fprintf(stderr, "cinfer streams: stream %d: video source '%s' ended after %llu frames\n", s->id,
                s->url, (unsigned long long)s->decoded);
      break;
    }
    int64_t this_seq = seq++;
    uint64_t due = unpaced ? clock_now_ns() : start + (uint64_t)this_seq * interval;
    if (st) {
      if (!ferr || ++consecutive_bad > 50) {
        stream_fail(s, cinfer_status_message(st));
        cinfer_status_free(st);
        break;
      }
      if (due >= s->stats_from_ns) s->frame_errors++;
      snprintf(s->error, sizeof s->error, "%s", cinfer_status_message(st));
      jsonl_error(r, s, this_seq, cinfer_status_message(st), false);
      cinfer_status_free(st);
      continue;
    }
    consecutive_bad = 0;
    s->decoded++;
    pump(s, due);
    if (stopping(s)) break;
    if (this_seq % c->every) continue;
    bool counted = due >= s->stats_from_ns;
    if (s->inflight >= c->max_inflight) {
      if (counted) s->dropped++;
      continue;
    }
    f->stream = s->id;
    f->seq = this_seq;
    f->due_ns = due;
    f->w = w;
    f->h = h;
    f->next = NULL;
    if (jpeg && (st = streams_jpeg_encode(f->rgb, w, h, 90, &f->jpeg, &f->jpeg_len))) {
      jsonl_error(r, s, this_seq, cinfer_status_message(st), false);
      if (counted) s->errors++;
      cinfer_status_free(st);
      continue;
    }
    if (jpeg) { /* one BYTES element: a 4-byte little-endian length, then the JPEG */
      unsigned char *b = realloc(f->jpeg, f->jpeg_len + 4);
      if (!b) {
        jsonl_error(r, s, this_seq, "out of memory", false);
        if (counted) s->errors++;
        frame_clear(f);
        continue;
      }
      memmove(b + 4, b, f->jpeg_len);
      uint32_t l32 = (uint32_t)f->jpeg_len;
      memcpy(b, &l32, 4);
      f->jpeg = b;
      f->jpeg_len += 4;
    }
    busy[fi] = true; /* until handle_done */
    f->slot = fi;
    s->inflight++;
    s->sent++;
    if ((st = streams_pipeline_submit(r->pipe, f))) {
      busy[fi] = false;
      s->inflight--;
      if (counted) s->errors++;
      snprintf(s->error, sizeof s->error, "%s", cinfer_status_message(st));
      jsonl_error(r, s, this_seq, cinfer_status_message(st), false);
      cinfer_status_free(st);
      frame_clear(f);
    }
  }
  /* the frames still in the pipeline: each completes (the pipeline promises it) */
  while (s->inflight > 0) {
    pthread_mutex_lock(&s->mu);
    while (!s->done_head) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pump(s, 0);
  }
out:
  s->end_ns = clock_now_ns();
  free(busy);
  s->busy = NULL;
  streams_source_close(src);
  return NULL;
}

/* ---- one run of n streams ------------------------------------------------------------- */

typedef struct level_result {
  int n;
  double fps_total, fps_min, target;
  uint64_t delivered, dropped, errors, failed;
  bench_hist *lat;
  bool pass;
  char why[300];
} level_result;

static double stream_fps(const stream *s) {
  double el = s->end_ns > s->stats_from_ns ? (double)(s->end_ns - s->stats_from_ns) / 1e9 : 0;
  return el > 0 ? (double)s->delivered / el : 0;
}

static int run_level(run *r, int n, level_result *res, bool print) {
  const streams_config *c = r->c;
  r->n = n;
  r->s = calloc((size_t)n, sizeof *r->s);
  if (!r->s) return -1;
  atomic_store(&r->stop, false);
  for (int i = 0; i < n; i++) {
    stream *s = &r->s[i];
    s->r = r;
    s->id = i;
    s->url = c->sources[i % c->n_sources];
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->lat = bench_hist_create();
    if (s->lat && !pthread_create(&s->th, NULL, stream_main, s)) s->started = true;
    else {
      snprintf(s->error, sizeof s->error, "cannot start the stream (out of memory or threads)");
      s->failed = true;
    }
  }
  if (c->duration_s > 0) {
    uint64_t end = clock_now_ns() + (uint64_t)(c->duration_s * 1e9 + r->warmup_s * 1e9);
    while (clock_now_ns() < end && !atomic_load(&g_interrupted)) {
      bool any = false; /* every stream over already (failed sources): stop early */
      for (int i = 0; i < n; i++) any |= r->s[i].started && r->s[i].end_ns == 0;
      if (!any) break;
      usleep(20000);
    }
    atomic_store(&r->stop, true);
  }
  for (int i = 0; i < n; i++)
    if (r->s[i].started) pthread_join(r->s[i].th, NULL);
  memset(res, 0, sizeof *res);
  res->n = n;
  res->lat = bench_hist_create();
  res->fps_min = INFINITY;
  if (print && !c->quiet)
    printf("%-6s %-34s %8s %9s %9s %8s %8s %7s %9s %9s\n", "stream", "source", "pace", "fps", "sent",
           "delivered", "dropped", "errors", "p50 ms", "p99 ms");
  for (int i = 0; i < n; i++) {
    stream *s = &r->s[i];
    double fps = stream_fps(s);
    res->fps_total += fps;
    if (fps < res->fps_min) res->fps_min = fps;
    res->delivered += s->delivered;
    res->dropped += s->dropped;
    res->errors += s->errors + s->frame_errors;
    res->failed += s->failed;
    if (res->lat && s->lat) bench_hist_merge(res->lat, s->lat);
    double tgt = c->target_fps > 0 ? c->target_fps : s->fps / c->every;
    if (i == 0 || tgt > res->target) res->target = tgt;
    if (print && !c->quiet) {
      const char *u = s->url;
      size_t ul = strlen(u);
      printf("%-6d %-34s %8.2f %9.2f %9llu %8llu %8llu %7llu %9.1f %9.1f%s%s\n", i, ul > 34 ? u + ul - 34 : u,
             s->fps / c->every, fps, (unsigned long long)s->sent, (unsigned long long)s->delivered,
             (unsigned long long)s->dropped, (unsigned long long)(s->errors + s->frame_errors),
             s->lat ? (double)bench_hist_percentile(s->lat, 50) / 1e6 : 0,
             s->lat ? (double)bench_hist_percentile(s->lat, 99) / 1e6 : 0, s->error[0] ? "  last error: " : "", s->error);
    }
  }
  if (!n) res->fps_min = 0;
  double p99 = (double)bench_hist_percentile(res->lat, 99) / 1e6;
  res->pass = true;
  if (res->failed) {
    res->pass = false;
    snprintf(res->why, sizeof res->why, "%llu stream(s) failed", (unsigned long long)res->failed);
  } else if (res->errors) {
    res->pass = false;
    snprintf(res->why, sizeof res->why, "%llu frame error(s)", (unsigned long long)res->errors);
  } else if (res->fps_min < res->target * (1 - c->fps_tolerance)) {
    res->pass = false;
    snprintf(res->why, sizeof res->why, "slowest stream %.2f fps < target %.2f", res->fps_min, res->target);
  } else if (p99 > c->slo_p99_ms) {
    res->pass = false;
    snprintf(res->why, sizeof res->why, "p99 %.1f ms > SLO %.1f ms", p99, c->slo_p99_ms);
  }
  return 0;
}

static void streams_json(run *r, cJSON *o) {
  cJSON *a = cJSON_AddArrayToObject(o, "streams");
  for (int i = 0; i < r->n; i++) {
    stream *s = &r->s[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "stream", i);
    cJSON_AddStringToObject(x, "source", s->url);
    cJSON_AddNumberToObject(x, "pace_fps", s->fps / r->c->every);
    cJSON_AddNumberToObject(x, "delivered_fps", stream_fps(s));
    cJSON_AddNumberToObject(x, "decoded", (double)s->decoded);
    cJSON_AddNumberToObject(x, "sent", (double)s->sent);
    cJSON_AddNumberToObject(x, "delivered", (double)s->delivered);
    cJSON_AddNumberToObject(x, "dropped", (double)s->dropped);
    cJSON_AddNumberToObject(x, "errors", (double)s->errors);
    cJSON_AddNumberToObject(x, "frame_errors", (double)s->frame_errors);
    cJSON_AddNumberToObject(x, "latency_p50_ms", s->lat ? (double)bench_hist_percentile(s->lat, 50) / 1e6 : 0);
    cJSON_AddNumberToObject(x, "latency_p99_ms", s->lat ? (double)bench_hist_percentile(s->lat, 99) / 1e6 : 0);
    cJSON_AddBoolToObject(x, "failed", s->failed);
    if (s->error[0]) cJSON_AddStringToObject(x, "last_error", s->error);
    cJSON_AddItemToArray(a, x);
  }
}

static void level_json(const streams_config *c, const level_result *l, cJSON *x) {
  cJSON_AddNumberToObject(x, "streams", l->n);
  cJSON_AddNumberToObject(x, "target_fps", l->target);
  cJSON_AddNumberToObject(x, "fps_total", l->fps_total);
  cJSON_AddNumberToObject(x, "fps_min", l->fps_min);
  cJSON_AddNumberToObject(x, "delivered", (double)l->delivered);
  cJSON_AddNumberToObject(x, "dropped", (double)l->dropped);
  cJSON_AddNumberToObject(x, "errors", (double)l->errors);
  cJSON_AddNumberToObject(x, "failed_streams", (double)l->failed);
  cJSON_AddNumberToObject(x, "latency_mean_ms", bench_hist_mean(l->lat) / 1e6);
  cJSON_AddNumberToObject(x, "latency_p50_ms", (double)bench_hist_percentile(l->lat, 50) / 1e6);
  cJSON_AddNumberToObject(x, "latency_p99_ms", (double)bench_hist_percentile(l->lat, 99) / 1e6);
  cJSON_AddNumberToObject(x, "latency_max_ms", (double)bench_hist_max(l->lat) / 1e6);
  if (c->cost_per_hour > 0 && l->fps_total > 0)
    cJSON_AddNumberToObject(x, "cost_per_1k_frames", c->cost_per_hour / (l->fps_total * 3600) * 1000);
  cJSON_AddBoolToObject(x, "pass", l->pass);
  if (!l->pass) cJSON_AddStringToObject(x, "why", l->why);
}

static void free_streams(run *r) {
  for (int i = 0; r->s && i < r->n; i++) {
    stream *s = &r->s[i];
    for (int k = 0; s->frames && k < s->n_frames; k++) {
      frame_clear(&s->frames[k]);
      free(s->frames[k].rgb);
    }
    free(s->frames);
    bench_hist_destroy(s->lat);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
  }
  free(r->s);
  r->s = NULL;
  r->n = 0;
}

static int write_json(const char *path, cJSON *j) {
  char *t = cJSON_Print(j);
  FILE *f = t ? fopen(path, "w") : NULL;
  int rc = 0;
  if (!f || fputs(t, f) < 0 || fputc('\n', f) < 0) rc = -1;
  if (f && fclose(f)) rc = -1;
  if (rc) fprintf(stderr, "cinfer streams: cannot write '%s': %s\n", path, strerror(errno));
  free(t);
  return rc;
}

/* --find-max: 1, 2, 4, ... while the level passes, then bisection between the last
 * passing and the first failing count. Each level is a fresh set of streams on the same
 * loaded pipeline. */
static int find_max(run *r) {
  const streams_config *c = r->c;
  level_result lv[64];
  int nl = 0, lo = 0, hi = c->max_streams + 1;
  for (int n = 1; nl < 64 && !atomic_load(&g_interrupted);) {
    level_result *l = &lv[nl];
    if (run_level(r, n, l, false)) break;
    free_streams(r);
    nl++;
    printf("find-max: %3d streams: %8.2f fps total, slowest %.2f (target %.2f), p99 %8.1f ms, dropped %llu  %s%s\n",
           n, l->fps_total, l->fps_min, l->target, (double)bench_hist_percentile(l->lat, 99) / 1e6,
           (unsigned long long)l->dropped, l->pass ? "PASS" : "FAIL: ", l->pass ? "" : l->why);
    fflush(stdout);
    if (l->pass) lo = n;
    else hi = n;
    int next = hi > c->max_streams ? (n * 2 > c->max_streams ? c->max_streams : n * 2) : (lo + hi) / 2;
    if (l->pass && n == c->max_streams) break;
    if (next <= lo || next >= hi) break;
    n = next;
  }
  printf("find-max: largest stream count holding the target: %d%s\n", lo,
         lo == c->max_streams ? " (the --max-streams bound)" : "");
  int best = -1;
  for (int i = 0; i < nl; i++)
    if (lv[i].pass && lv[i].n == lo) best = i;
  if (best >= 0 && c->cost_per_hour > 0 && lv[best].fps_total > 0)
    printf("find-max: cost per 1,000 frames at $%g/hour: $%.6f\n", c->cost_per_hour,
           c->cost_per_hour / (lv[best].fps_total * 3600) * 1000);
  int rc = 0;
  if (c->json_path) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "tool", "cinfer streams --find-max");
    cJSON_AddStringToObject(j, "model", c->model);
    cJSON_AddStringToObject(j, "pipeline", c->url ? c->url : "in-process");
    cJSON_AddNumberToObject(j, "slo_p99_ms", c->slo_p99_ms);
    cJSON_AddNumberToObject(j, "fps_tolerance", c->fps_tolerance);
    cJSON_AddNumberToObject(j, "duration_s", c->duration_s);
    cJSON_AddNumberToObject(j, "every", c->every);
    if (c->cost_per_hour > 0) cJSON_AddNumberToObject(j, "cost_per_hour", c->cost_per_hour);
    cJSON_AddNumberToObject(j, "max_streams_passing", lo);
    cJSON *a = cJSON_AddArrayToObject(j, "levels");
    for (int i = 0; i < nl; i++) {
      cJSON *x = cJSON_CreateObject();
      level_json(c, &lv[i], x);
      cJSON_AddItemToArray(a, x);
    }
    if (best >= 0) {
      cJSON *x = cJSON_AddObjectToObject(j, "best");
      level_json(c, &lv[best], x);
    }
    rc |= write_json(c->json_path, j);
    cJSON_Delete(j);
  }
  if (c->plot_path && nl) { /* the latency-vs-throughput plot of cinfer bench */
    bench_config bc;
    bench_config_default(&bc);
    bc.target = BENCH_TARGET_KSERVE;
    bc.binary = true;
    bc.model = c->model;
    bc.cost_per_hour = c->cost_per_hour;
    snprintf(bc.host_header, sizeof bc.host_header, "cinfer streams, %s, %s", c->model,
             c->url ? c->url : "in-process");
    bench_level *bl = calloc((size_t)nl, sizeof *bl);
    if (bl) {
      for (int i = 0; i < nl; i++) {
        snprintf(bl[i].label, sizeof bl[i].label, "%d streams%s", lv[i].n, lv[i].pass ? "" : " (fail)");
        bl[i].concurrency = lv[i].n;
        bl[i].throughput = lv[i].fps_total;
        bl[i].ok = lv[i].delivered;
        bench_dist_from(&bl[i].lat, lv[i].lat);
      }
      bench_report rep = {.cfg = &bc, .levels = bl, .n_levels = nl, .mode = "slo"};
      cinfer_status *st = bench_report_svg(&rep, c->plot_path);
      if (st) {
        fprintf(stderr, "cinfer streams: %s\n", cinfer_status_message(st));
        cinfer_status_free(st);
        rc = -1;
      }
      free(bl);
    }
  }
  for (int i = 0; i < nl; i++) bench_hist_destroy(lv[i].lat);
  return rc ? 1 : 0;
}

int streams_main(int argc, char **argv) {
  streams_config c;
  streams_config_default(&c);
  bool help = false;
  cinfer_status *st = streams_args_parse(&c, argc, argv, &help);
  if (help) {
    streams_usage(stdout);
    return 0;
  }
  if (st) {
    fprintf(stderr, "cinfer streams: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return 2;
  }
  if (c.http_port >= 0 && c.publish_url) { /* one board: served here or pushed there */
    fprintf(stderr, "cinfer streams: --http-port and --publish: give one of them\n");
    return 2;
  }
  run r = {.c = &c, .warmup_s = c.warmup_s};
  pthread_mutex_init(&r.out_mu, NULL);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_sigint};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int rc = 0;
  if (c.jsonl_path) {
    r.jsonl = strcmp(c.jsonl_path, "-") ? fopen(c.jsonl_path, "w") : stdout;
    if (!r.jsonl) {
      fprintf(stderr, "cinfer streams: --jsonl: cannot write '%s': %s\n", c.jsonl_path, strerror(errno));
      return 2;
    }
  }
  if (c.publish_url) {
    int n = c.find_max ? c.max_streams : c.streams;
    if ((st = streams_live_create(n, false, &r.live))) {
      fprintf(stderr, "cinfer streams: --publish: %s\n", cinfer_status_message(st));
      cinfer_status_free(st);
      if (r.jsonl && r.jsonl != stdout) fclose(r.jsonl);
      return 1;
    }
    if ((st = streams_live_push(r.live, c.publish_url))) {
      fprintf(stderr, "cinfer streams: %s\n", cinfer_status_message(st));
      cinfer_status_free(st);
      streams_live_stop(r.live);
      if (r.jsonl && r.jsonl != stdout) fclose(r.jsonl);
      return 1;
    }
    printf("publishing to %s/streams\n", c.publish_url);
    fflush(stdout);
  }
  if ((st = streams_pipeline_create(&c, on_done, &r, &r.pipe))) {
    fprintf(stderr, "cinfer streams: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    streams_live_stop(r.live);
    if (r.jsonl && r.jsonl != stdout) fclose(r.jsonl);
    return 1;
  }
  if (c.http_port >= 0) {
    int n = c.find_max ? c.max_streams : c.streams;
    if ((st = streams_live_start(c.http_host, c.http_port, n, &r.live))) {
      fprintf(stderr, "cinfer streams: --http-port: %s\n", cinfer_status_message(st));
      cinfer_status_free(st);
      streams_pipeline_destroy(r.pipe);
      return 1;
    }
    printf("live page: http://%s:%d/streams\n", c.http_host, streams_live_port(r.live));
    fflush(stdout);
  }

  if (c.find_max) {
    rc = find_max(&r);
  } else {
    level_result l;
    if (run_level(&r, c.streams, &l, true)) {
      rc = 1;
    } else {
      double p50 = (double)bench_hist_percentile(l.lat, 50) / 1e6, p99 = (double)bench_hist_percentile(l.lat, 99) / 1e6;
      if (!c.quiet) {
        printf("total: %d streams, %.2f frames/s delivered, %llu dropped, %llu errors, %llu failed streams, "
               "latency p50 %.1f ms p99 %.1f ms\n",
               l.n, l.fps_total, (unsigned long long)l.dropped, (unsigned long long)l.errors,
               (unsigned long long)l.failed, p50, p99);
        if (c.cost_per_hour > 0 && l.fps_total > 0)
          printf("cost per 1,000 frames at $%g/hour: $%.6f\n", c.cost_per_hour,
                 c.cost_per_hour / (l.fps_total * 3600) * 1000);
      }
      if (c.json_path) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "tool", "cinfer streams");
        cJSON_AddStringToObject(j, "model", c.model);
        cJSON_AddStringToObject(j, "pipeline", c.url ? c.url : "in-process");
        cJSON_AddNumberToObject(j, "every", c.every);
        cJSON_AddNumberToObject(j, "max_inflight", c.max_inflight);
        if (c.cost_per_hour > 0) cJSON_AddNumberToObject(j, "cost_per_hour", c.cost_per_hour);
        cJSON *t = cJSON_AddObjectToObject(j, "total");
        level_json(&c, &l, t);
        streams_json(&r, j);
        if (write_json(c.json_path, j)) rc = 1;
        cJSON_Delete(j);
      }
      /* exit 1 when any stream failed or any frame errored: the table says which */
      if (l.failed || l.errors) rc = 1;
      bench_hist_destroy(l.lat);
    }
    free_streams(&r);
  }
  streams_live_stop(r.live);
  streams_pipeline_destroy(r.pipe);
  if (r.jsonl && r.jsonl != stdout && fclose(r.jsonl)) {
    fprintf(stderr, "cinfer streams: --jsonl: cannot write '%s'\n", c.jsonl_path);
    rc = 1;
  } else if (r.jsonl == stdout) {
    fflush(stdout);
  }
  return rc;
}
