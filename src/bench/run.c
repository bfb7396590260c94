/* run.c: `cinfer bench` from flags to report. Load modes, per level: warm-up, fixed
 * measurement windows until the stability rule holds (or max windows), errors by kind,
 * server-side breakdown (KServe statistics deltas), the tool's own CPU use.
 *
 * Level lifecycle: start engine -> warm-up (collected and discarded) -> windows: every
 * window_ms collect each worker's sample into window i -> stable (last 3 within tol) or
 * max windows or Ctrl-C -> stop engine (in-flight requests drain; not counted) -> result
 * from the last 3 windows when stable, else from all windows.
 * A window with no success and some errors ends the run: the server is failing.
 * Ctrl-C (SIGINT) ends the current level with what it measured and skips the rest; the
 * report is still printed and saved. */
#include "bench/bench_int.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define STABLE_WINDOWS 3

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
  (void)sig;
  g_interrupted = 1;
}

typedef struct run_ctx {
  bench_config *cfg;
  bench_addr addr;
  bench_reqset rs;
  bench_level *levels;
  int n_levels, cap_levels;
  bool tty;
  bool fatal;
  char fatal_msg[400];
} run_ctx;

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

void bench_dist_from(bench_dist *d, const bench_hist *h) {
  d->count = bench_hist_count(h);
  d->mean = bench_hist_mean(h) / 1e3;
  d->stddev = bench_hist_stddev(h) / 1e3;
  d->min = (double)bench_hist_min(h) / 1e3;
  d->max = (double)bench_hist_max(h) / 1e3;
  d->p50 = (double)bench_hist_percentile(h, 50) / 1e3;
  d->p90 = (double)bench_hist_percentile(h, 90) / 1e3;
  d->p95 = (double)bench_hist_percentile(h, 95) / 1e3;
  d->p99 = (double)bench_hist_percentile(h, 99) / 1e3;
  d->p999 = (double)bench_hist_percentile(h, 99.9) / 1e3;
}

/* Sleeps until `until` (monotonic ns) in short slices; returns early on Ctrl-C or when a
 * fixed-count level is done. */
static void wait_until(uint64_t until, bench_engine *e) {
  for (;;) {
    uint64_t now = clock_now_ns();
    if (now >= until || g_interrupted || (e && bench_engine_done(e))) return;
    uint64_t d = until - now;
    if (d > 10000000u) d = 10000000u;
    struct timespec ts = {0, (long)d};
    nanosleep(&ts, NULL);
  }
}

static void progress(run_ctx *x, const char *label, int win, double tput, const bench_sample *s) {
  if (!x->tty || x->cfg->quiet) return;
  char w[24];
  if (win) snprintf(w, sizeof w, "window %d", win);
  else snprintf(w, sizeof w, "warm-up");
  fprintf(stderr, "\r\033[K[%s] %s: %.1f req/s  p50 %.3f ms  p99 %.3f ms  errors %llu",
          label, w, tput, (double)bench_hist_percentile(s->lat, 50) / 1e6,
          (double)bench_hist_percentile(s->lat, 99) / 1e6,
          (unsigned long long)bench_sample_errors(s));
  fflush(stderr);
}

static void set_fatal(run_ctx *x, const bench_sample *s, const char *label) {
  if (x->fatal) return;
  x->fatal = true;
  char kinds[200] = "";
  size_t o = 0;
  for (int k = 0; k < BENCH_ERR_N; k++)
    if (s->err[k] && o < sizeof kinds)
      o += (size_t)snprintf(kinds + o, sizeof kinds - o, "%s%s %llu", o ? ", " : "",
                            bench_err_names[k], (unsigned long long)s->err[k]);
  snprintf(x->fatal_msg, sizeof x->fatal_msg,
           "[%s] server failing: no successful response in a whole window (%s); first error: %s",
           label, kinds, s->first_error[0] ? s->first_error : "?");
}

static bench_level *new_level(run_ctx *x) {
  if (x->n_levels == x->cap_levels) {
    int cap = x->cap_levels ? x->cap_levels * 2 : 16;
    bench_level *v = realloc(x->levels, (size_t)cap * sizeof *v);
    if (!v) return NULL;
    x->levels = v;
    x->cap_levels = cap;
  }
  bench_level *l = &x->levels[x->n_levels++];
  memset(l, 0, sizeof *l);
  return l;
}

/* Runs one load level; the result is appended to x->levels. NULL when it could not run. */
static bench_level *run_level(run_ctx *x, const bench_loadspec *ls, const char *label) {
  const bench_config *c = x->cfg;
  int nwin = ls->requests > 0 ? 1 : c->max_windows;
  bench_sample **win = calloc((size_t)nwin, sizeof *win);
  double *tput = calloc((size_t)nwin, sizeof *tput), *lat = calloc((size_t)nwin, sizeof *lat),
         *secs = calloc((size_t)nwin, sizeof *secs);
  bench_sample *scratch = bench_sample_create(), *total = bench_sample_create();
  bench_level *lv = NULL;
  bench_engine *e = NULL;
  bool ok = win && tput && lat && secs && scratch && total;
  for (int i = 0; ok && i < nwin; i++) ok = (win[i] = bench_sample_create()) != NULL;
  if (!ok) {
    fprintf(stderr, "cinfer bench: out of memory\n");
    x->fatal = true;
    goto out;
  }
  bench_server_stats s0 = {0}, s1 = {0};
  bool kserve = c->target == BENCH_TARGET_KSERVE;
  if (kserve && ls->requests > 0) bench_server_stats_get(c, &x->addr, &s0);
  cinfer_status *st = bench_engine_start(c, &x->addr, &x->rs, ls, &e);
  if (st) {
    snprintf(x->fatal_msg, sizeof x->fatal_msg, "%s", cinfer_status_message(st));
    cinfer_status_free(st);
    x->fatal = true;
    goto out;
  }
  /* warm-up */
  if (c->warmup_ms > 0 && ls->requests <= 0) {
    wait_until(clock_now_ns() + (uint64_t)c->warmup_ms * 1000000u, e);
    bench_engine_collect(e, scratch);
    progress(x, label, 0, scratch->ok / (c->warmup_ms / 1e3), scratch);
    if (scratch->ok == 0 && bench_sample_errors(scratch) > 0 && !g_interrupted) {
      set_fatal(x, scratch, label);
      goto stop;
    }
    bench_sample_reset(scratch);
  }
  if (kserve && ls->requests <= 0) bench_server_stats_get(c, &x->addr, &s0);
  double cpu0 = cpu_seconds();
  uint64_t t0 = clock_now_ns(), tw = t0;
  int used = 0;
  bool stable = false;
  if (ls->requests > 0) {
    /* fixed count: one long "window", progress every window_ms */
    while (!bench_engine_done(e) && !g_interrupted) {
      wait_until(clock_now_ns() + (uint64_t)c->window_ms * 1000000u, e);
      bench_engine_collect(e, scratch);
      uint64_t now = clock_now_ns();
      progress(x, label, 1, scratch->ok / ((now - tw) / 1e9), scratch);
      if (scratch->ok == 0 && bench_sample_errors(scratch) > 0) {
        set_fatal(x, scratch, label);
        bench_sample_merge(win[0], scratch);
        break;
      }
      bench_sample_merge(win[0], scratch);
      bench_sample_reset(scratch);
      tw = now;
    }
    bench_engine_stop(e);
    bench_engine_collect(e, win[0]); /* everything, in-flight ones included */
    secs[0] = (clock_now_ns() - t0) / 1e9;
    used = 1;
  } else {
    for (int i = 0; i < nwin && !g_interrupted; i++) {
      wait_until(tw + (uint64_t)c->window_ms * 1000000u, NULL);
      uint64_t now = clock_now_ns();
      bench_engine_collect(e, win[i]);
      secs[i] = (now - tw) / 1e9;
      tw = now;
      used = i + 1;
      tput[i] = win[i]->ok / secs[i];
      lat[i] = bench_hist_mean(win[i]->lat);
      progress(x, label, i + 1, tput[i], win[i]);
      if (win[i]->ok == 0 && bench_sample_errors(win[i]) > 0) {
        set_fatal(x, win[i], label);
        break;
      }
      if (bench_stable(tput, lat, (size_t)used, STABLE_WINDOWS, c->stability)) {
        stable = true;
        break;
      }
    }
    bench_engine_stop(e);
  }
  double cpu1 = cpu_seconds();
  if (kserve) bench_server_stats_get(c, &x->addr, &s1);
  if (x->tty && !c->quiet) fprintf(stderr, "\r\033[K");

  /* result: the stable windows, or all of them */
  int from = stable ? used - STABLE_WINDOWS : 0;
  double dur = 0;
  for (int i = from; i < used; i++) {
    bench_sample_merge(total, win[i]);
    dur += secs[i];
  }
  if (!(lv = new_level(x))) {
    x->fatal = true;
    goto stop;
  }
  snprintf(lv->label, sizeof lv->label, "%s", label);
  lv->open = ls->open;
  lv->concurrency = ls->concurrency;
  lv->target_rate = ls->rate;
  lv->stable = stable;
  lv->windows = used;
  lv->duration_s = dur;
  lv->ok = total->ok;
  lv->errors = bench_sample_errors(total);
  memcpy(lv->err, total->err, sizeof lv->err);
  for (int k = 0; k < 600; k++)
    lv->status_non2xx[k] = (k >= 200 && k <= 299) ? 0 : total->status[k];
  lv->throughput = dur > 0 ? total->ok / dur : 0;
  lv->tokens_out = total->tokens_out;
  lv->tokens_in = total->tokens_in;
  lv->tokens_out_s = dur > 0 ? total->tokens_out / dur : 0;
  lv->bytes_in_s = dur > 0 ? total->bytes_in / dur : 0;
  bench_dist_from(&lv->lat, total->lat);
  bench_dist_from(&lv->ttft, total->ttft);
  bench_dist_from(&lv->itl, total->itl);
  bench_dist_from(&lv->tpot, total->tpot);
  bench_dist_from(&lv->refused, total->refused);
  double wall = (clock_now_ns() - t0) / 1e9;
  lv->cpu_pct = wall > 0 ? 100.0 * (cpu1 - cpu0) / wall : 0;
  lv->threads = bench_engine_threads(e);
  memcpy(lv->first_error, total->first_error, sizeof lv->first_error);
  if (s0.ok && s1.ok && s1.success_count > s0.success_count) {
    double n = (double)(s1.success_count - s0.success_count);
    lv->has_server = true;
    lv->srv_count = s1.success_count - s0.success_count;
    lv->srv_queue_us = (s1.queue_ns - s0.queue_ns) / n / 1e3;
    lv->srv_cin_us = (s1.cin_ns - s0.cin_ns) / n / 1e3;
    lv->srv_infer_us = (s1.infer_ns - s0.infer_ns) / n / 1e3;
    lv->srv_cout_us = (s1.cout_ns - s0.cout_ns) / n / 1e3;
  }
  if (!c->quiet)
    fprintf(stderr, "[%s] %.1f req/s, p50 %.3f ms, p99 %.3f ms, %llu errors, %d windows%s\n",
            label, lv->throughput, lv->lat.p50 / 1e3, lv->lat.p99 / 1e3,
            (unsigned long long)lv->errors, used,
            ls->requests > 0 ? "" : stable ? " (stable)" : " (NOT stable)");
  if (lv->cpu_pct > 85.0 * lv->threads)
    fprintf(stderr, "[%s] warning: the generator used %.0f%% CPU with %d threads; it may be the "
                    "bottleneck (more --threads, or another machine)\n",
            label, lv->cpu_pct, lv->threads);
stop:
  bench_engine_destroy(e);
out:
  for (int i = 0; win && i < nwin; i++) bench_sample_destroy(win[i]);
  free(win);
  free(tput);
  free(lat);
  free(secs);
  bench_sample_destroy(scratch);
  bench_sample_destroy(total);
  return lv;
}

static bench_level *closed(run_ctx *x, int conc) {
  bench_loadspec ls = {.open = false, .concurrency = conc, .requests = x->cfg->requests};
  char label[48];
  snprintf(label, sizeof label, "c=%d", conc);
  return run_level(x, &ls, label);
}

static bench_level *open_loop(run_ctx *x, double rate, const char *prefix) {
  bench_loadspec ls = {.open = true, .rate = rate, .poisson = x->cfg->poisson,
                       .requests = x->cfg->requests};
  char label[48];
  snprintf(label, sizeof label, "%srate=%.1f", prefix, rate);
  return run_level(x, &ls, label);
}

static bool stop_now(run_ctx *x) { return g_interrupted || x->fatal; }

int bench_main(int argc, char **argv) {
  bench_config cfg;
  bench_config_default(&cfg);
  bool help;
  cinfer_status *st = bench_args_parse(&cfg, argc, argv, &help);
  if (help) {
    bench_usage(stdout);
    return 0;
  }
  if (st) {
    fprintf(stderr, "cinfer bench: %s\n(run 'cinfer bench --help' for the flags)\n",
            cinfer_status_message(st));
    cinfer_status_free(st);
    return 2;
  }
  run_ctx x = {.cfg = &cfg, .tty = isatty(2)};
  int rc = 0;
  if ((st = bench_resolve(&cfg, &x.addr)) ||
      (st = bench_http_simple(&cfg, &x.addr, NULL, NULL, NULL, 0, 5000, &(int){0}, NULL, NULL)) ||
      (st = bench_reqset_build(&cfg, &x.addr, &x.rs))) {
    fprintf(stderr, "cinfer bench: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return 1;
  }
  struct sigaction sa = {.sa_handler = on_sigint};
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int, old_term;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_interrupted = 0;

  bench_report rep = {.cfg = &cfg, .slo_level = -1};
  bool slo_unmet = false;
  char slo_msg[300] = "";
  switch (cfg.load) {
    case BENCH_LOAD_CLOSED:
      rep.mode = "concurrency";
      for (int i = 0; i < cfg.n_concurrency && !stop_now(&x); i++) closed(&x, cfg.concurrency[i]);
      break;
    case BENCH_LOAD_RATE:
      rep.mode = "rate";
      for (int i = 0; i < cfg.n_rates && !stop_now(&x); i++) open_loop(&x, cfg.rates[i], "");
      break;
    case BENCH_LOAD_STRESS: {
      rep.mode = "stress";
      bench_level *cap = closed(&x, cfg.concurrency[cfg.n_concurrency - 1]);
      if (!cap || stop_now(&x)) break;
      rep.capacity = cap->throughput;
      snprintf(cap->label, sizeof cap->label, "capacity c=%d", cap->concurrency);
      for (int k = 1; k <= cfg.stress_steps && !stop_now(&x); k++) {
        double pct = cfg.stress_pct * k / cfg.stress_steps;
        char prefix[24];
        snprintf(prefix, sizeof prefix, "%.0f%% ", pct);
        open_loop(&x, rep.capacity * pct / 100.0, prefix);
      }
      break;
    }
    case BENCH_LOAD_SLO: {
      rep.mode = "slo";
      double slo_us = cfg.slo_p99_ms * 1e3;
      bench_level *one = closed(&x, 1);
      if (!one || stop_now(&x)) break;
      if (one->lat.p99 > slo_us || one->ok == 0) {
        slo_unmet = true;
        snprintf(slo_msg, sizeof slo_msg,
                 "SLO p99 <= %g ms cannot be met: even one request at a time has p99 %.3f ms",
                 cfg.slo_p99_ms, one->lat.p99 / 1e3);
        break;
      }
      bench_level *cap = closed(&x, cfg.concurrency[cfg.n_concurrency - 1]);
      if (!cap || stop_now(&x)) break;
      rep.capacity = cap->throughput;
      /* bisection on the rate: 0 passes trivially, 1.05 x capacity is the ceiling */
      double hi = cap->throughput * 1.05, lo = 0, low_tried = 0, low_p99 = 0;
      bench_level *l;
      for (int it = 0; it < cfg.slo_iterations && !stop_now(&x); it++) {
        double mid = (lo + hi) / 2;
        l = open_loop(&x, mid, "slo ");
        if (!l) break;
        if (l->lat.p99 <= slo_us && l->errors == 0) {
          lo = mid;
          if (l->throughput > rep.slo_rate) {
            rep.slo_rate = l->throughput;
            rep.slo_level = x.n_levels - 1;
          }
        } else {
          hi = mid;
          if (!low_tried || mid < low_tried) low_tried = mid, low_p99 = l->lat.p99;
        }
      }
      if (rep.slo_level < 0 && !stop_now(&x)) {
        slo_unmet = true;
        snprintf(slo_msg, sizeof slo_msg,
                 "SLO p99 <= %g ms not met at any rate tried: the lowest, %.1f req/s, had p99 "
                 "%.3f ms (one request at a time: p99 %.3f ms); try more --slo-iterations",
                 cfg.slo_p99_ms, low_tried, low_p99 / 1e3, x.levels[0].lat.p99 / 1e3);
      }
      break;
    }
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);

  rep.levels = x.levels;
  rep.n_levels = x.n_levels;
  rep.interrupted = g_interrupted != 0;
  if (rep.n_levels > 0) {
    bench_report_table(&rep, stdout);
    fflush(stdout);
  }
  const struct {
    const char *path;
    cinfer_status *(*fn)(const bench_report *, const char *);
  } outs[] = {{cfg.json_path, bench_report_json}, {cfg.csv_path, bench_report_csv},
              {cfg.plot_path, bench_report_svg}};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
    if (!outs[i].path) continue;
    if ((st = outs[i].fn(&rep, outs[i].path))) {
      fprintf(stderr, "cinfer bench: %s\n", cinfer_status_message(st));
      cinfer_status_free(st);
      rc = 1;
    }
  }
  uint64_t errors = 0;
  for (int i = 0; i < x.n_levels; i++) {
    errors += x.levels[i].errors;
    /* --conversation: a refusal (429/503, asked again after thinking) is the server's
     * admission at work, reported in its own table, not a failed request */
    if (cfg.conversation) errors -= x.levels[i].refused.count;
  }
  if (x.fatal) {
    fprintf(stderr, "cinfer bench: %s\n", x.fatal_msg[0] ? x.fatal_msg : "run failed");
    rc = 1;
  } else if (slo_unmet) {
    fprintf(stderr, "cinfer bench: %s\n", slo_msg);
    rc = 1;
  } else if (errors) {
    fprintf(stderr, "cinfer bench: %llu requests failed (see the errors column)\n",
            (unsigned long long)errors);
    rc = 1;
  }
  if (rep.interrupted) {
    fprintf(stderr, "cinfer bench: interrupted; reported what was measured so far\n");
    if (!rc) rc = 130;
  }
  bench_reqset_free(&x.rs);
  free(x.levels);
  return rc;
}
