/* report.c: the results of a run as a table (stdout), JSON, CSV and an SVG plot of latency
 * percentiles against throughput, drawn here (no plotting library). Times are stored in
 * microseconds and shown in milliseconds. */
#include "bench/bench_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static double cost_1k(const bench_report *r, const bench_level *l) {
  return l->throughput > 0 ? r->cfg->cost_per_hour / (l->throughput * 3600.0) * 1000.0 : 0;
}
static double cost_1m_tok(const bench_report *r, const bench_level *l) {
  return l->tokens_out_s > 0 ? r->cfg->cost_per_hour / (l->tokens_out_s * 3600.0) * 1e6 : 0;
}

static const char *target_name(const bench_config *c) {
  switch (c->target) {
    case BENCH_TARGET_HTTP_GET: return "http-get";
    case BENCH_TARGET_HTTP_POST: return "http-post";
    case BENCH_TARGET_KSERVE:
      if (c->grpc) return c->grpc_stream ? "kserve-grpc-stream" : "kserve-grpc";
      return c->binary ? "kserve-binary" : "kserve-json";
    case BENCH_TARGET_OPENAI: return c->openai_chat ? "openai-chat" : "openai-completions";
    default: return "?";
  }
}

void bench_report_table(const bench_report *r, void *file) {
  FILE *f = file;
  const bench_config *c = r->cfg;
  bool llm = c->target == BENCH_TARGET_OPENAI || c->grpc_stream; /* per-response timings */
  fprintf(f, "\ncinfer bench: %s http://%s%s  mode %s%s\n", target_name(c), c->host_header,
          r->n_levels ? "" : "", r->mode, r->interrupted ? "  (INTERRUPTED: partial results)" : "");
  fprintf(f, "%-22s %10s %9s %9s %9s %9s %9s %9s %9s %8s %6s %s\n", "level", "req/s", "p50 ms",
          "p90 ms", "p95 ms", "p99 ms", "p99.9 ms", "mean ms", "std ms", "errors", "cpu%",
          "stable");
  for (int i = 0; i < r->n_levels; i++) {
    const bench_level *l = &r->levels[i];
    fprintf(f, "%-22s %10.1f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %8llu %6.1f %s\n",
            l->label, l->throughput, l->lat.p50 / 1e3, l->lat.p90 / 1e3, l->lat.p95 / 1e3,
            l->lat.p99 / 1e3, l->lat.p999 / 1e3, l->lat.mean / 1e3, l->lat.stddev / 1e3,
            (unsigned long long)l->errors, l->cpu_pct,
            c->requests ? "n/a" : l->stable ? "yes" : "no");
  }
  for (int i = 0; i < r->n_levels; i++) {
    const bench_level *l = &r->levels[i];
    if (!l->errors) continue;
    fprintf(f, "  %s errors:", l->label);
    for (int k = 0; k < BENCH_ERR_N; k++)
      if (l->err[k])
        fprintf(f, " %s=%llu", k == BENCH_ERR_HTTP && c->grpc ? "grpc-status" : bench_err_names[k],
                (unsigned long long)l->err[k]);
    for (int k = 0; k < 600; k++)
      if (l->status_non2xx[k]) fprintf(f, " HTTP_%d=%llu", k, (unsigned long long)l->status_non2xx[k]);
    if (l->first_error[0]) fprintf(f, "  (first: %s)", l->first_error);
    fputc('\n', f);
  }
  if (llm) {
    fprintf(f, "\n%-22s %9s %9s %9s %9s %9s %9s %9s %12s %12s\n", "level", "ttft p50", "ttft p99",
            "tpot p50", "tpot p99", "itl p50", "itl p99", "e2e p50", "out tok/s", "out tok/req");
    for (int i = 0; i < r->n_levels; i++) {
      const bench_level *l = &r->levels[i];
      fprintf(f, "%-22s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %12.1f %12.1f\n", l->label,
              l->ttft.p50 / 1e3, l->ttft.p99 / 1e3, l->tpot.p50 / 1e3, l->tpot.p99 / 1e3,
              l->itl.p50 / 1e3, l->itl.p99 / 1e3, l->lat.p50 / 1e3, l->tokens_out_s,
              l->ok ? (double)l->tokens_out / (double)l->ok : 0.0);
    }
    fprintf(f, "(milliseconds; TPOT = (e2e - TTFT) / (output tokens - 1); ITL = gaps between streamed chunks%s)\n",
            c->grpc_stream ? "; gRPC streaming: a token is one streamed response" : "");
  }
  bool refusals = false;
  for (int i = 0; i < r->n_levels; i++) refusals |= r->levels[i].refused.count > 0;
  if (refusals || c->conversation) {
    fprintf(f, "\n%-22s %10s %10s %12s %14s %14s\n", "level", "admitted/s", "refused", "refused/s",
            "refusal p50 ms", "refusal p99 ms");
    for (int i = 0; i < r->n_levels; i++) {
      const bench_level *l = &r->levels[i];
      fprintf(f, "%-22s %10.2f %10llu %12.2f %14.3f %14.3f\n", l->label, l->throughput,
              (unsigned long long)l->refused.count, l->duration_s > 0 ? l->refused.count / l->duration_s : 0.0,
              l->refused.p50 / 1e3, l->refused.p99 / 1e3);
    }
    fprintf(f, "(refused: 429 and 503 answers, timed from the request to the refusal)\n");
  }
  bool srv = false;
  for (int i = 0; i < r->n_levels; i++) srv |= r->levels[i].has_server;
  if (srv) {
    if (c->grpc) fprintf(f, "\nserver-side, per request (us), from ModelStatistics(%s) deltas:\n", c->model);
    else fprintf(f, "\nserver-side, per request (us), from /v2/models/%s/stats deltas:\n", c->model);
    fprintf(f, "%-22s %10s %12s %12s %12s %12s\n", "level", "requests", "queue", "compute_in",
            "compute_inf", "compute_out");
    for (int i = 0; i < r->n_levels; i++) {
      const bench_level *l = &r->levels[i];
      if (!l->has_server) continue;
      fprintf(f, "%-22s %10llu %12.1f %12.1f %12.1f %12.1f\n", l->label,
              (unsigned long long)l->srv_count, l->srv_queue_us, l->srv_cin_us, l->srv_infer_us,
              l->srv_cout_us);
    }
  }
  if (c->cost_per_hour > 0) {
    fprintf(f, "\ncost at $%.4g/hour:\n%-22s %14s%s\n", c->cost_per_hour, "level", "$/1k infer",
            llm ? "   $/1M out tokens" : "");
    for (int i = 0; i < r->n_levels; i++) {
      const bench_level *l = &r->levels[i];
      fprintf(f, "%-22s %14.6f", l->label, cost_1k(r, l));
      if (llm) fprintf(f, " %18.4f", cost_1m_tok(r, l));
      fputc('\n', f);
    }
  }
  if (r->capacity > 0) fprintf(f, "\ncapacity (closed loop): %.1f req/s\n", r->capacity);
  if (r->slo_level >= 0)
    fprintf(f, "highest throughput with p99 <= %g ms: %.1f req/s (level %s, p99 %.3f ms)\n",
            c->slo_p99_ms, r->slo_rate, r->levels[r->slo_level].label,
            r->levels[r->slo_level].lat.p99 / 1e3);
}

static cJSON *dist_json(const bench_dist *d) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "count", (double)d->count);
  cJSON_AddNumberToObject(o, "mean_us", d->mean);
  cJSON_AddNumberToObject(o, "stddev_us", d->stddev);
  cJSON_AddNumberToObject(o, "min_us", d->min);
  cJSON_AddNumberToObject(o, "max_us", d->max);
  cJSON_AddNumberToObject(o, "p50_us", d->p50);
  cJSON_AddNumberToObject(o, "p90_us", d->p90);
  cJSON_AddNumberToObject(o, "p95_us", d->p95);
  cJSON_AddNumberToObject(o, "p99_us", d->p99);
  cJSON_AddNumberToObject(o, "p99_9_us", d->p999);
  return o;
}

static cinfer_status *write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return cinfer_status_new(CINFER_INVALID_ARG, "cannot write '%s': %s", path, strerror(errno));
  fputs(text, f);
  if (fclose(f) != 0) return cinfer_status_new(CINFER_INTERNAL, "cannot write '%s'", path);
  return NULL;
}

cinfer_status *bench_report_json(const bench_report *r, const char *path) {
  const bench_config *c = r->cfg;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "tool", "cinfer bench");
  cJSON_AddStringToObject(j, "target", target_name(c));
  cJSON_AddStringToObject(j, "server", c->host_header);
  if (c->model) cJSON_AddStringToObject(j, "model", c->model);
  cJSON_AddStringToObject(j, "mode", r->mode ? r->mode : "");
  cJSON_AddBoolToObject(j, "interrupted", r->interrupted);
  cJSON_AddNumberToObject(j, "window_ms", c->window_ms);
  cJSON_AddNumberToObject(j, "warmup_ms", c->warmup_ms);
  cJSON_AddNumberToObject(j, "seed", (double)c->seed);
  if (c->cost_per_hour > 0) cJSON_AddNumberToObject(j, "cost_per_hour", c->cost_per_hour);
  if (r->capacity > 0) cJSON_AddNumberToObject(j, "capacity_rps", r->capacity);
  if (r->slo_level >= 0) {
    cJSON_AddNumberToObject(j, "slo_p99_ms", c->slo_p99_ms);
    cJSON_AddNumberToObject(j, "slo_rps", r->slo_rate);
  }
  cJSON *arr = cJSON_AddArrayToObject(j, "levels");
  for (int i = 0; i < r->n_levels; i++) {
    const bench_level *l = &r->levels[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "label", l->label);
    cJSON_AddStringToObject(o, "loop", l->open ? "open" : "closed");
    if (l->open) cJSON_AddNumberToObject(o, "target_rate", l->target_rate);
    else cJSON_AddNumberToObject(o, "concurrency", l->concurrency);
    cJSON_AddBoolToObject(o, "stable", l->stable);
    cJSON_AddNumberToObject(o, "windows", l->windows);
    cJSON_AddNumberToObject(o, "duration_s", l->duration_s);
    cJSON_AddNumberToObject(o, "requests", (double)l->ok);
    cJSON_AddNumberToObject(o, "throughput_rps", l->throughput);
    cJSON_AddNumberToObject(o, "errors", (double)l->errors);
    cJSON *eo = cJSON_AddObjectToObject(o, "errors_by_kind");
    for (int k = 0; k < BENCH_ERR_N; k++) cJSON_AddNumberToObject(eo, bench_err_names[k], (double)l->err[k]);
    cJSON *so = cJSON_AddObjectToObject(o, "http_status_errors");
    for (int k = 0; k < 600; k++)
      if (l->status_non2xx[k]) {
        char key[8];
        snprintf(key, sizeof key, "%d", k);
        cJSON_AddNumberToObject(so, key, (double)l->status_non2xx[k]);
      }
    if (l->first_error[0]) cJSON_AddStringToObject(o, "first_error", l->first_error);
    cJSON_AddItemToObject(o, "latency", dist_json(&l->lat));
    if (c->grpc_stream) { /* ModelStreamInfer: every streamed response (decoupled: 0..N each) */
      cJSON_AddNumberToObject(o, "responses", (double)l->tokens_out);
      cJSON_AddItemToObject(o, "first_response", dist_json(&l->ttft));
      cJSON_AddItemToObject(o, "inter_response", dist_json(&l->itl));
    }
    if (c->target == BENCH_TARGET_OPENAI) {
      cJSON_AddItemToObject(o, "ttft", dist_json(&l->ttft));
      cJSON_AddItemToObject(o, "tpot", dist_json(&l->tpot));
      cJSON_AddItemToObject(o, "itl", dist_json(&l->itl));
      cJSON_AddItemToObject(o, "refused", dist_json(&l->refused));
      cJSON_AddNumberToObject(o, "output_tokens", (double)l->tokens_out);
      cJSON_AddNumberToObject(o, "prompt_tokens", (double)l->tokens_in);
      cJSON_AddNumberToObject(o, "output_tokens_per_s", l->tokens_out_s);
      if (c->cost_per_hour > 0) cJSON_AddNumberToObject(o, "cost_per_1m_output_tokens", cost_1m_tok(r, l));
    }
    if (c->cost_per_hour > 0) cJSON_AddNumberToObject(o, "cost_per_1k_inferences", cost_1k(r, l));
    cJSON_AddNumberToObject(o, "tool_cpu_pct", l->cpu_pct);
    cJSON_AddNumberToObject(o, "tool_threads", l->threads);
    if (l->has_server) {
      cJSON *s = cJSON_AddObjectToObject(o, "server");
      cJSON_AddNumberToObject(s, "requests", (double)l->srv_count);
      cJSON_AddNumberToObject(s, "queue_us", l->srv_queue_us);
      cJSON_AddNumberToObject(s, "compute_input_us", l->srv_cin_us);
      cJSON_AddNumberToObject(s, "compute_infer_us", l->srv_infer_us);
      cJSON_AddNumberToObject(s, "compute_output_us", l->srv_cout_us);
    }
    cJSON_AddItemToArray(arr, o);
  }
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  if (!text) return cinfer_status_oom("writing JSON");
  cinfer_status *st = write_text(path, text);
  cJSON_free(text);
  return st;
}

cinfer_status *bench_report_csv(const bench_report *r, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return cinfer_status_new(CINFER_INVALID_ARG, "cannot write '%s': %s", path, strerror(errno));
  fprintf(f, "label,loop,concurrency,target_rate,throughput_rps,requests,errors,p50_ms,p90_ms,"
             "p95_ms,p99_ms,p99_9_ms,mean_ms,stddev_ms,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,"
             "itl_p50_ms,itl_p99_ms,output_tokens_per_s,cost_per_1k,cost_per_1m_tokens,"
             "tool_cpu_pct,stable,server_queue_us,server_compute_input_us,server_compute_infer_us,"
             "server_compute_output_us\n");
  for (int i = 0; i < r->n_levels; i++) {
    const bench_level *l = &r->levels[i];
    fprintf(f, "\"%s\",%s,%d,%.3f,%.3f,%llu,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
               "%.4f,%.4f,%.4f,%.3f,%.6f,%.6f,%.1f,%d,%.3f,%.3f,%.3f,%.3f\n",
            l->label, l->open ? "open" : "closed", l->concurrency, l->target_rate, l->throughput,
            (unsigned long long)l->ok, (unsigned long long)l->errors, l->lat.p50 / 1e3,
            l->lat.p90 / 1e3, l->lat.p95 / 1e3, l->lat.p99 / 1e3, l->lat.p999 / 1e3,
            l->lat.mean / 1e3, l->lat.stddev / 1e3, l->ttft.p50 / 1e3, l->ttft.p99 / 1e3,
            l->tpot.p50 / 1e3, l->itl.p50 / 1e3, l->itl.p99 / 1e3, l->tokens_out_s,
            r->cfg->cost_per_hour > 0 ? cost_1k(r, l) : 0,
            r->cfg->cost_per_hour > 0 ? cost_1m_tok(r, l) : 0, l->cpu_pct, l->stable,
            l->srv_queue_us, l->srv_cin_us, l->srv_infer_us, l->srv_cout_us);
  }
  if (fclose(f) != 0) return cinfer_status_new(CINFER_INTERNAL, "cannot write '%s'", path);
  return NULL;
}

/* ---- SVG ---- */

/* A "nice" axis: step 1, 2 or 5 x 10^k giving about 5..10 ticks up to >= max. */
static double nice_step(double max) {
  if (max <= 0) return 1;
  double raw = max / 6, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

static void fmt_num(char *b, size_t n, double v) {
  if (v >= 1e6) snprintf(b, n, "%gM", v / 1e6);
  else if (v >= 1e4) snprintf(b, n, "%gk", v / 1e3);
  else snprintf(b, n, "%g", v);
}

#define SVG_MAX 1024
typedef struct svg_series {
  const char *name, *color;
  bool dashed;
  double v[SVG_MAX]; /* y per level, same order as x */
} svg_series;

typedef struct svg_chart {
  const char *title, *xlabel, *ylabel;
  const double *x;          /* per level */
  const char *const *label; /* per level */
  const int *order;         /* drawing order of the levels */
  int n;
  svg_series *s;
  int ns;
} svg_chart;

enum { SVG_W = 900, SVG_H = 560, SVG_L = 90, SVG_R = 190, SVG_T = 60, SVG_B = 70 };

/* One chart whose top edge is at y0: axes, grid, ticks, labels, curves, legend. Latencies
 * spanning more than 30x get a log axis (ticks 1-2-5 per decade). */
static void svg_draw(FILE *f, int y0, const svg_chart *c) {
  const double pw = SVG_W - SVG_L - SVG_R, ph = SVG_H - SVG_T - SVG_B;
  const double L = SVG_L, T = y0 + SVG_T;
  double xmax = 0, ymax = 0, ymin = INFINITY;
  for (int i = 0; i < c->n; i++) {
    if (c->x[i] > xmax) xmax = c->x[i];
    for (int k = 0; k < c->ns; k++) {
      double v = c->s[k].v[i];
      if (v > ymax) ymax = v;
      if (v > 0 && v < ymin) ymin = v;
    }
  }
  double xs = nice_step(xmax), ys = nice_step(ymax);
  double xtop = xmax > 0 ? ceil(xmax / xs) * xs : 1, ytop = ymax > 0 ? ceil(ymax / ys) * ys : 1;
  bool logy = ymax > 0 && isfinite(ymin) && ymax / ymin > 30;
  double ylo = logy ? pow(10, floor(log10(ymin))) : 0, yhi = logy ? pow(10, ceil(log10(ymax))) : 0;
#define XPIX(v) (L + (v) / xtop * pw)
#define YPIX(v) (logy ? T + ph - (log10((v) > ylo ? (v) : ylo) - log10(ylo)) / (log10(yhi) - log10(ylo)) * ph \
                      : T + ph - (v) / ytop * ph)
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"18\" text-anchor=\"middle\">%s</text>\n",
          L + pw / 2, T - 30, c->title);
  for (double v = 0; v <= xtop + xs / 2; v += xs) {
    char b[32];
    fmt_num(b, sizeof b, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#e0e0e0\"/>\n"
               "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\">%s</text>\n",
            XPIX(v), T, XPIX(v), T + ph, XPIX(v), T + ph + 18, b);
  }
  for (double d = ylo, v = logy ? ylo : 0, k = 0; logy ? v <= yhi * 1.0001 : v <= ytop + ys / 2;) {
    char b[32];
    fmt_num(b, sizeof b, v);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n"
               "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">%s</text>\n",
            L, YPIX(v), L + pw, YPIX(v), L - 8, YPIX(v) + 4, b);
    if (logy) { /* 1, 2, 5 x each decade */
      static const double m[] = {1, 2, 5};
      k++;
      if ((int)k % 3 == 0) d *= 10;
      v = d * m[(int)k % 3];
    } else {
      v += ys;
    }
  }
  fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n",
          L, T, pw, ph);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"14\" text-anchor=\"middle\">%s</text>\n",
          L + pw / 2, T + ph + 45, c->xlabel);
  size_t yl = strlen(c->ylabel); /* "x (ms)" becomes "x (ms, log scale)" */
  bool paren = yl && c->ylabel[yl - 1] == ')';
  fprintf(f, "<text x=\"22\" y=\"%.0f\" font-size=\"14\" text-anchor=\"middle\" "
             "transform=\"rotate(-90 22 %.0f)\">%.*s%s</text>\n",
          T + ph / 2, T + ph / 2, (int)(logy && paren ? yl - 1 : yl), c->ylabel,
          !logy ? "" : paren ? ", log scale)" : " (log scale)");
  for (int k = 0; k < c->ns; k++) {
    const svg_series *s = &c->s[k];
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", s->color,
            s->dashed ? " stroke-dasharray=\"6,4\"" : "");
    for (int i = 0; i < c->n; i++) fprintf(f, "%.1f,%.1f ", XPIX(c->x[c->order[i]]), YPIX(s->v[c->order[i]]));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < c->n; i++) {
      int j = c->order[i];
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s %s: %.3f at %.1f</title></circle>\n",
              XPIX(c->x[j]), YPIX(s->v[j]), s->color, c->label[j], s->name, s->v[j], c->x[j]);
    }
    double ly = T + 20 + 24.0 * k;
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"%s/>"
               "<text x=\"%.0f\" y=\"%.1f\" font-size=\"13\">%s</text>\n",
            L + pw + 20, ly, L + pw + 50, ly, s->color, s->dashed ? " stroke-dasharray=\"6,4\"" : "",
            L + pw + 58, ly + 4, s->name);
  }
  /* label each level above its highest point */
  for (int i = 0; i < c->n; i++) {
    double top = 0;
    for (int k = 0; k < c->ns; k++)
      if (c->s[k].v[i] > top) top = c->s[k].v[i];
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\" text-anchor=\"middle\">%s</text>\n",
            XPIX(c->x[i]), YPIX(top) - 8, c->label[i]);
  }
#undef XPIX
#undef YPIX
}

cinfer_status *bench_report_svg(const bench_report *r, const char *path) {
  int n = r->n_levels < SVG_MAX ? r->n_levels : SVG_MAX;
  /* curves join the levels in sweep order (a saturated server draws the vertical
   * "hockey stick"); a capacity search probes rates out of order, so it is sorted */
  /* static: ~80 KiB of series off the stack; reports are written from one thread */
  static int order[SVG_MAX];
  static double x[SVG_MAX], xt[SVG_MAX];
  static const char *label[SVG_MAX];
  static svg_series lat[5], llm[4];
  for (int i = 0; i < n; i++) {
    const bench_level *l = &r->levels[i];
    order[i] = i;
    x[i] = l->throughput;
    xt[i] = l->tokens_out_s;
    label[i] = l->label;
  }
  bool sort = r->mode && !strcmp(r->mode, "slo");
  for (int i = 1; sort && i < n; i++)
    for (int k = i; k > 0 && x[order[k]] < x[order[k - 1]]; k--) {
      int t = order[k];
      order[k] = order[k - 1];
      order[k - 1] = t;
    }
  static const struct {
    const char *name, *color;
    size_t off;
  } pct[] = {{"p50", "#1f77b4", offsetof(bench_dist, p50)},
             {"p90", "#2ca02c", offsetof(bench_dist, p90)},
             {"p99", "#ff7f0e", offsetof(bench_dist, p99)},
             {"p99.9", "#d62728", offsetof(bench_dist, p999)},
             {"mean", "#7f7f7f", offsetof(bench_dist, mean)}};
  for (int k = 0; k < 5; k++) {
    lat[k] = (svg_series){.name = pct[k].name, .color = pct[k].color, .dashed = k == 4};
    for (int i = 0; i < n; i++) {
      double v;
      memcpy(&v, (const char *)&r->levels[i].lat + pct[k].off, sizeof v);
      lat[k].v[i] = v / 1e3;
    }
  }
  bool openai = r->cfg->target == BENCH_TARGET_OPENAI;
  if (openai) {
    static const char *const nm[4] = {"TTFT p50", "TTFT p99", "ITL p50", "ITL p99"};
    static const char *const col[4] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"};
    for (int k = 0; k < 4; k++) {
      llm[k] = (svg_series){.name = nm[k], .color = col[k], .dashed = k >= 2};
      for (int i = 0; i < n; i++) {
        const bench_dist *d = k < 2 ? &r->levels[i].ttft : &r->levels[i].itl;
        llm[k].v[i] = ((k % 2) ? d->p99 : d->p50) / 1e3;
      }
    }
  }
  char title[400];
  snprintf(title, sizeof title, "Latency percentiles vs throughput (%s, %s%s)", target_name(r->cfg),
           r->cfg->host_header, r->interrupted ? ", partial" : "");
  int charts = openai ? 2 : 1;
  FILE *f = fopen(path, "w");
  if (!f) return cinfer_status_new(CINFER_INVALID_ARG, "cannot write '%s': %s", path, strerror(errno));
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          SVG_W, SVG_H * charts, SVG_W, SVG_H * charts);
  svg_chart c1 = {title, "throughput (successful requests/s)", "latency (ms)", x, label, order, n, lat, 5};
  svg_draw(f, 0, &c1);
  if (openai) {
    svg_chart c2 = {"Time to first token and inter-token latency vs output tokens/s",
                    "output tokens/s", "TTFT, ITL (ms)", xt, label, order, n, llm, 4};
    svg_draw(f, SVG_H, &c2);
  }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0) return cinfer_status_new(CINFER_INTERNAL, "cannot write '%s'", path);
  return NULL;
}
