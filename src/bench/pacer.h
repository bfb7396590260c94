/* pacer.h: the worker core shared by the two engines (engine.c over HTTP/1.1, grpc_engine.c
 * over gRPC), private to src/bench. It owns what does not depend on the protocol:
 *   - the workers: one thread each, its epoll instance, its sample and the lock around it,
 *     and the loop (wait until the next arrival or 20 ms, handle the events, scan for
 *     timeouts every 50 ms, dispatch; on stop, wait bounded by the timeout for the requests
 *     in flight);
 *   - the load: the fixed-count claim (never past the count), the open loop's arrivals
 *     (constant spacing or seeded exponential gaps) and their ring of intended send times;
 *   - the steps of a non-blocking connect.
 * An engine embeds bench_worker as the first member of its worker and gives the loop its
 * protocol through bench_worker_ops; it keeps its connections, its requests and how it
 * reads the answers. */
#ifndef CINFER_BENCH_PACER_H
#define CINFER_BENCH_PACER_H

#include <pthread.h>
#include <stdatomic.h>

#include "bench/bench_int.h"

#define BENCH_RING_CAP 65536

typedef struct bench_pacer bench_pacer;

typedef struct bench_worker {
  pthread_t th;
  bench_pacer *p;
  int id, ep;
  pthread_mutex_t mu; /* held while one batch of events is handled, never while waiting */
  bench_sample *cur;
  /* open loop */
  double rate;
  uint64_t next_ns, rng;
  uint64_t *ring; /* intended send times, BENCH_RING_CAP */
  size_t ring_head, ring_len;
  uint64_t now; /* time of the current batch */
  uint64_t last_timeout_scan;
  bool started;
} bench_worker;

/* The protocol's part of the loop; each is called with the worker's lock held. */
typedef struct bench_worker_ops {
  void (*start)(bench_worker *w);                       /* open the first connections */
  void (*event)(bench_worker *w, void *ptr, uint32_t ev); /* ptr: the epoll data */
  void (*scan)(bench_worker *w);                        /* every 50 ms: timeouts, reconnects */
  void (*dispatch)(bench_worker *w);                    /* after every batch */
  int (*busy)(bench_worker *w);                         /* requests in flight */
  void (*end)(bench_worker *w); /* the loop ended: fail what is in flight, close */
} bench_worker_ops;

struct bench_pacer {
  const bench_config *cfg;
  const bench_addr *addr;
  const bench_reqset *rs;
  bench_loadspec ls;
  const bench_worker_ops *ops;
  char *workers; /* nw workers of wsize bytes, each starting with a bench_worker */
  size_t wsize;
  int nw;
  atomic_bool stop;
  atomic_int_fast64_t issued; /* fixed-count mode */
  atomic_int_fast64_t finished;
};

/* How many workers serve total_conns connections (--threads, else one per core). */
int bench_pacer_threads(const bench_config *cfg, int total_conns);
/* Allocates nw zeroed workers of wsize bytes and their common parts (epoll, sample, ring in
 * the open loop, rate and seed). On error the caller frees with bench_pacer_free. */
cinfer_status *bench_pacer_init(bench_pacer *p, const bench_config *cfg, const bench_addr *a,
                                const bench_reqset *rs, const bench_loadspec *ls, int nw,
                                size_t wsize, const bench_worker_ops *ops);
static inline bench_worker *bench_pacer_worker(bench_pacer *p, int i) {
  return (bench_worker *)(void *)(p->workers + (size_t)i * p->wsize);
}
/* Starts the threads; on error none runs (the caller frees). */
cinfer_status *bench_pacer_run(bench_pacer *p);
void bench_pacer_collect(bench_pacer *p, bench_sample *into);
bool bench_pacer_done(bench_pacer *p);
void bench_pacer_stop(bench_pacer *p); /* sets stop, joins the threads */
/* Frees the common parts (after the engine freed its own); p itself is the caller's. */
void bench_pacer_free(bench_pacer *p);

static inline bool bench_pacer_stopping(const bench_pacer *p) {
  return atomic_load_explicit(&p->stop, memory_order_relaxed);
}
/* Fixed-count mode only: a shared counter would otherwise bounce between cores on every
 * request for nothing. */
static inline void bench_count_finished(bench_pacer *p) {
  if (p->ls.requests > 0) atomic_fetch_add_explicit(&p->finished, 1, memory_order_relaxed);
}
/* May one more request go out? (false once stopping, or the count is reached) */
bool bench_claim(bench_worker *w);
/* A request handed back before it was answered: claimable again. */
static inline void bench_unclaim(bench_worker *w) {
  if (w->p->ls.requests > 0) atomic_fetch_sub(&w->p->issued, 1);
}
void bench_note_error(bench_worker *w, int kind, const char *fmt, const char *detail);

/* Open loop: the arrivals due by w->now go into the ring (a full ring drops the arrival and
 * counts an OVERLOAD error). */
void bench_pace_arrivals(bench_worker *w);
static inline bool bench_ring_pop(bench_worker *w, uint64_t *t) {
  if (!w->ring_len) return false;
  *t = w->ring[w->ring_head];
  w->ring_head = (w->ring_head + 1) % BENCH_RING_CAP;
  w->ring_len--;
  return true;
}
/* Puts an arrival back at the front (same intended time); false when the ring is full. */
static inline bool bench_ring_unpop(bench_worker *w, uint64_t t) {
  if (w->ring_len == BENCH_RING_CAP) return false;
  w->ring_head = (w->ring_head + BENCH_RING_CAP - 1) % BENCH_RING_CAP;
  w->ring[w->ring_head] = t;
  w->ring_len++;
  return true;
}

/* Starts a non-blocking TCP connect (TCP_NODELAY) to the server. Returns the socket, or -1
 * after counting a CONNECT error (then *retry_at is 100 ms from now). */
int bench_connect_start(bench_worker *w, uint64_t *retry_at);
/* The socket became writable or failed while connecting: 0, or the error (errno value). */
int bench_connect_result(int fd, uint32_t ev);
/* Arms or disarms EPOLLOUT (EPOLLIN always) when *armed differs from out. */
void bench_epoll_out(int ep, int fd, void *ptr, bool *armed, bool out);

#endif
