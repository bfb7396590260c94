/* pacer.c: the worker core of both engines (see pacer.h). */
#include "bench/pacer.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int bench_pacer_threads(const bench_config *cfg, int total_conns) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int nw = cfg->threads > 0 ? cfg->threads : (int)(cores > 0 ? cores : 1);
  if (nw > total_conns) nw = total_conns;
  if (nw < 1) nw = 1;
  return nw;
}

cinfer_status *bench_pacer_init(bench_pacer *p, const bench_config *cfg, const bench_addr *a,
                                const bench_reqset *rs, const bench_loadspec *ls, int nw,
                                size_t wsize, const bench_worker_ops *ops) {
  p->cfg = cfg;
  p->addr = a;
  p->rs = rs;
  p->ls = *ls;
  p->ops = ops;
  p->wsize = wsize;
  atomic_init(&p->stop, false);
  atomic_init(&p->issued, 0);
  atomic_init(&p->finished, 0);
  p->workers = calloc((size_t)nw, wsize);
  if (!p->workers) return cinfer_status_oom(NULL);
  p->nw = nw;
  cinfer_status *st = NULL;
  for (int i = 0; i < nw; i++) {
    bench_worker *w = bench_pacer_worker(p, i);
    w->p = p;
    w->id = i;
    pthread_mutex_init(&w->mu, NULL);
    w->rate = ls->open ? ls->rate / nw : 0;
    w->rng = cfg->seed * 0x100000001b3ull + (uint64_t)i + 1;
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    w->cur = bench_sample_create();
    if (ls->open) w->ring = malloc(BENCH_RING_CAP * sizeof *w->ring);
    if (!st && (w->ep < 0 || !w->cur || (ls->open && !w->ring)))
      st = cinfer_status_new(CINFER_INTERNAL, "out of memory or file descriptors for worker %d", i);
  }
  return st;
}

void bench_pacer_free(bench_pacer *p) {
  for (int i = 0; i < p->nw; i++) {
    bench_worker *w = bench_pacer_worker(p, i);
    free(w->ring);
    bench_sample_destroy(w->cur);
    if (w->ep >= 0) close(w->ep);
    pthread_mutex_destroy(&w->mu);
  }
  free(p->workers);
  p->workers = NULL;
  p->nw = 0;
}

/* ---- load ---- */

bool bench_claim(bench_worker *w) {
  bench_pacer *p = w->p;
  if (bench_pacer_stopping(p)) return false;
  if (p->ls.requests <= 0) return true;
  /* Never past the count: a request handed back (bench_unclaim) must be claimable again,
   * which an overshoot by idle connections' failed claims would prevent (the run then
   * waited forever for its last request). */
  int_fast64_t cur = atomic_load(&p->issued);
  while (cur < p->ls.requests)
    if (atomic_compare_exchange_weak(&p->issued, &cur, cur + 1)) return true;
  return false;
}

void bench_note_error(bench_worker *w, int kind, const char *fmt, const char *detail) {
  w->cur->err[kind]++;
  if (!w->cur->first_error[0]) snprintf(w->cur->first_error, sizeof w->cur->first_error, fmt, detail);
}

static uint64_t next_gap_ns(bench_worker *w) {
  double mean = 1e9 / w->rate;
  if (!w->p->ls.poisson) return (uint64_t)mean;
  double u = ((double)(bench_rng_next(&w->rng) >> 11) + 0.5) * 0x1.0p-53;
  return (uint64_t)(-log(u) * mean);
}

void bench_pace_arrivals(bench_worker *w) {
  if (bench_pacer_stopping(w->p)) return;
  while (w->next_ns <= w->now) {
    if (!bench_claim(w)) break;
    if (w->ring_len == BENCH_RING_CAP) {
      w->cur->err[BENCH_ERR_OVERLOAD]++;
      bench_count_finished(w->p);
      if (!w->cur->first_error[0])
        snprintf(w->cur->first_error, sizeof w->cur->first_error,
                 "open loop backlog full (%d requests waiting): server too slow for the rate",
                 BENCH_RING_CAP);
    } else {
      w->ring[(w->ring_head + w->ring_len++) % BENCH_RING_CAP] = w->next_ns;
    }
    w->next_ns += next_gap_ns(w);
  }
}

/* ---- connections ---- */

int bench_connect_start(bench_worker *w, uint64_t *retry_at) {
  const bench_addr *a = w->p->addr;
  int fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    bench_note_error(w, BENCH_ERR_CONNECT, "socket: %s", strerror(errno));
    *retry_at = w->now + 100000000u;
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (const struct sockaddr *)&a->sa, a->len) < 0 && errno != EINPROGRESS) {
    bench_note_error(w, BENCH_ERR_CONNECT, "connect: %s", strerror(errno));
    close(fd);
    *retry_at = w->now + 100000000u;
    return -1;
  }
  return fd;
}

int bench_connect_result(int fd, uint32_t ev) {
  int err = 0;
  socklen_t el = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  if (!err && (ev & (EPOLLERR | EPOLLHUP))) err = ECONNREFUSED;
  return err;
}

void bench_epoll_out(int ep, int fd, void *ptr, bool *armed, bool out) {
  if (*armed == out) return;
  struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = ptr};
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
  *armed = out;
}

/* ---- the loop ---- */

static void *worker_main(void *arg) {
  bench_worker *w = arg;
  bench_pacer *p = w->p;
  const bench_worker_ops *ops = p->ops;
  struct epoll_event evs[256];
  w->now = clock_now_ns();
  pthread_mutex_lock(&w->mu);
  ops->start(w);
  w->next_ns = w->now;
  pthread_mutex_unlock(&w->mu);
  uint64_t stop_deadline = 0;
  for (;;) {
    bool stopping = bench_pacer_stopping(p);
    if (stopping) {
      if (!stop_deadline) stop_deadline = w->now + (uint64_t)p->cfg->timeout_ms * 1000000u;
      if (ops->busy(w) == 0 || w->now > stop_deadline) break;
    }
    /* wait until the next arrival (open loop) or at most 20 ms */
    uint64_t wait = 20000000u;
    if (p->ls.open && !stopping && w->next_ns > w->now && w->next_ns - w->now < wait)
      wait = w->next_ns - w->now;
    if (p->ls.open && !stopping && w->next_ns <= w->now) wait = 0;
    struct timespec ts = {(time_t)(wait / 1000000000u), (long)(wait % 1000000000u)};
    int n = epoll_pwait2(w->ep, evs, 256, &ts, NULL);
    if (n < 0 && errno != EINTR) break;
    pthread_mutex_lock(&w->mu);
    w->now = clock_now_ns();
    for (int i = 0; i < n; i++) ops->event(w, evs[i].data.ptr, evs[i].events);
    if (w->now - w->last_timeout_scan > 50000000u) {
      ops->scan(w);
      w->last_timeout_scan = w->now;
    }
    ops->dispatch(w);
    pthread_mutex_unlock(&w->mu);
  }
  pthread_mutex_lock(&w->mu);
  ops->end(w);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

cinfer_status *bench_pacer_run(bench_pacer *p) {
  for (int i = 0; i < p->nw; i++) {
    bench_worker *w = bench_pacer_worker(p, i);
    if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
      bench_pacer_stop(p);
      return cinfer_status_new(CINFER_INTERNAL, "cannot start worker threads");
    }
    w->started = true;
  }
  return NULL;
}

void bench_pacer_collect(bench_pacer *p, bench_sample *into) {
  for (int i = 0; i < p->nw; i++) {
    bench_worker *w = bench_pacer_worker(p, i);
    pthread_mutex_lock(&w->mu);
    bench_sample_merge(into, w->cur);
    bench_sample_reset(w->cur);
    pthread_mutex_unlock(&w->mu);
  }
}

bool bench_pacer_done(bench_pacer *p) {
  return p->ls.requests > 0 && atomic_load(&p->finished) >= p->ls.requests;
}

void bench_pacer_stop(bench_pacer *p) {
  atomic_store(&p->stop, true);
  for (int i = 0; i < p->nw; i++) {
    bench_worker *w = bench_pacer_worker(p, i);
    if (w->started) pthread_join(w->th, NULL), w->started = false;
  }
}
