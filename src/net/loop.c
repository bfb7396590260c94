/* loop.c: epoll event loop with a timer min-heap and a lock-free MPSC task queue.
 *
 * Invariants:
 *  - Only the loop thread touches epoll registrations, the timer heap and io->events.
 *  - Timer heap is 1-based: heap[1] is the earliest; t->heap_index == 0 means "not armed".
 *  - Task queue: Vyukov intrusive MPSC list. Producers swap `tail` and link the previous
 *    node; the single consumer (loop thread) walks from `head`. A stub node keeps the list
 *    non-empty. `wake_pending` is set by the producer that must write the eventfd and
 *    cleared by the consumer before draining, so at most one eventfd write happens per
 *    drain round.
 */
#include "net/loop.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define LOOP_MAX_EVENTS 256

struct net_loop {
  int epfd;
  int evfd;
  loop_io wake_io;
  _Atomic int stop;
  _Atomic int wake_pending;
  _Atomic int posting;       /* producers inside loop_post_task */
  uint64_t now_ms, now_ns;   /* one clock read per iteration */
  /* task queue */
  loop_task stub;
  loop_task *_Atomic tail;
  loop_task *head;
  /* timers */
  loop_timer **heap;  /* 1-based */
  size_t heap_len, heap_cap;
  pthread_t thread;
  bool has_thread;
  _Atomic int running;
  pthread_t run_thread;
  /* the batch of events being dispatched: loop_io_del clears later entries for the
   * watcher it removes, so a callback may free any watcher's owner (libuv does the same) */
  struct epoll_event *batch;
  int batch_pos, batch_len;
  void (*batch_begin)(void *), (*batch_end)(void *);
  void *batch_arg;
};

static __thread const net_loop *tls_loop;

uint64_t loop_now_ms(const net_loop *loop) {
  return tls_loop == loop ? loop->now_ms : clock_now_ms();
}
uint64_t loop_now_ns(const net_loop *loop) {
  return tls_loop == loop ? loop->now_ns : clock_now_ns();
}
static void loop_tick(net_loop *loop) {
  loop->now_ns = clock_now_ns();
  loop->now_ms = loop->now_ns / 1000000ull;
}

void loop_set_batch_hooks(net_loop *loop, void (*begin)(void *), void (*end)(void *), void *arg) {
  loop->batch_begin = begin;
  loop->batch_end = end;
  loop->batch_arg = arg;
}

bool loop_in_thread(const net_loop *loop) { return tls_loop == loop; }

/* ---- task queue ----------------------------------------------------------------------- */

static void wake(net_loop *loop) {
  if (atomic_exchange_explicit(&loop->wake_pending, 1, memory_order_acq_rel) == 0) {
    uint64_t one = 1;
    ssize_t r;
    do r = write(loop->evfd, &one, sizeof one); while (r < 0 && errno == EINTR);
  }
}

void loop_post_task(net_loop *loop, loop_task *task) {
  /* Once the task is linked the loop may run it, and whatever it completes may lead its
   * owner to destroy the loop while we are still about to wake it: `posting` makes
   * loop_destroy wait until this call no longer touches the loop. */
  atomic_fetch_add_explicit(&loop->posting, 1, memory_order_acq_rel);
  atomic_store_explicit(&task->next, NULL, memory_order_relaxed);
  loop_task *prev = atomic_exchange_explicit(&loop->tail, task, memory_order_acq_rel);
  atomic_store_explicit(&prev->next, task, memory_order_release);
  wake(loop);
  atomic_fetch_sub_explicit(&loop->posting, 1, memory_order_release);
}

/* Pops one task or returns NULL when the queue is (momentarily) empty. */
static loop_task *task_pop(net_loop *loop) {
  loop_task *head = loop->head;
  loop_task *next = atomic_load_explicit(&head->next, memory_order_acquire);
  if (head == &loop->stub) {
    if (!next) return NULL;
    loop->head = next;
    head = next;
    next = atomic_load_explicit(&next->next, memory_order_acquire);
  }
  if (next) {
    loop->head = next;
    return head;
  }
  loop_task *tail = atomic_load_explicit(&loop->tail, memory_order_acquire);
  if (tail != head) return NULL;  /* a producer is mid-push; it will wake us again */
  /* head is the last node: re-insert the stub behind it so head can be detached. */
  atomic_store_explicit(&loop->stub.next, NULL, memory_order_relaxed);
  loop_task *prev = atomic_exchange_explicit(&loop->tail, &loop->stub, memory_order_acq_rel);
  atomic_store_explicit(&prev->next, &loop->stub, memory_order_release);
  next = atomic_load_explicit(&head->next, memory_order_acquire);
  if (next) {
    loop->head = next;
    return head;
  }
  return NULL;
}

static void run_tasks(net_loop *loop) {
  atomic_store_explicit(&loop->wake_pending, 0, memory_order_seq_cst);
  /* Bound the work per round so a flood of posts cannot starve socket I/O. */
  for (int i = 0; i < 4096; i++) {
    loop_task *t = task_pop(loop);
    if (!t) return;
    t->fn(t);
  }
  wake(loop);  /* more left: come back after servicing sockets */
}

typedef struct closure_task {
  loop_task task;
  void (*fn)(void *);
  void *arg;
} closure_task;

static void closure_run(loop_task *t) {
  closure_task *c = (closure_task *)t;
  c->fn(c->arg);
  free(c);
}

bool loop_post(net_loop *loop, void (*fn)(void *arg), void *arg) {
  closure_task *c = malloc(sizeof *c);
  if (!c) return false;
  c->task.fn = closure_run;
  c->fn = fn;
  c->arg = arg;
  loop_post_task(loop, &c->task);
  return true;
}

static void wake_cb(loop_io *io, uint32_t ev) {
  net_loop *loop = (net_loop *)((char *)io - offsetof(net_loop, wake_io));
  uint64_t v;
  ssize_t r = read(loop->evfd, &v, sizeof v);
  (void)r;
  run_tasks(loop);
}

/* ---- lifecycle ------------------------------------------------------------------------ */

cinfer_status *loop_create(net_loop **out) {
  *out = NULL;
  net_loop *loop = calloc(1, sizeof *loop);
  if (!loop) return cinfer_status_oom("loop");
  loop->epfd = epoll_create1(EPOLL_CLOEXEC);
  loop->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop->epfd < 0 || loop->evfd < 0) {
    int e = errno;
    if (loop->epfd >= 0) close(loop->epfd);
    if (loop->evfd >= 0) close(loop->evfd);
    free(loop);
    return cinfer_status_new(CINFER_INTERNAL, "loop: epoll/eventfd: %s", strerror(e));
  }
  atomic_store(&loop->stub.next, NULL);
  loop->head = &loop->stub;
  atomic_store(&loop->tail, &loop->stub);
  loop->heap_cap = 64;
  loop->heap = malloc(loop->heap_cap * sizeof *loop->heap);
  if (!loop->heap) {
    close(loop->epfd);
    close(loop->evfd);
    free(loop);
    return cinfer_status_oom("loop");
  }
  loop_tick(loop);
  loop->wake_io.fd = loop->evfd;
  loop->wake_io.fn = wake_cb;
  cinfer_status *st = loop_io_add(loop, &loop->wake_io, LOOP_READ);
  if (st) {
    loop_destroy(loop);
    return st;
  }
  *out = loop;
  return NULL;
}

void loop_destroy(net_loop *loop) {
  if (!loop) return;
  while (atomic_load_explicit(&loop->posting, memory_order_acquire)) sched_yield();
  const net_loop *saved = tls_loop;
  tls_loop = loop;  /* tasks run as if on the loop thread */
  loop_task *t;
  while ((t = task_pop(loop))) t->fn(t);
  tls_loop = saved;
  close(loop->epfd);
  close(loop->evfd);
  free(loop->heap);
  free(loop);
}

void loop_stop(net_loop *loop) {
  atomic_store(&loop->stop, 1);
  atomic_store(&loop->wake_pending, 0);
  wake(loop);
}

/* ---- timers --------------------------------------------------------------------------- */

static inline bool heap_less(loop_timer *a, loop_timer *b) {
  return a->deadline_ms < b->deadline_ms;
}

static void heap_set(net_loop *loop, size_t i, loop_timer *t) {
  loop->heap[i] = t;
  t->heap_index = i;
}

static void sift_up(net_loop *loop, size_t i) {
  loop_timer *t = loop->heap[i];
  while (i > 1 && heap_less(t, loop->heap[i / 2])) {
    heap_set(loop, i, loop->heap[i / 2]);
    i /= 2;
  }
  heap_set(loop, i, t);
}

static void sift_down(net_loop *loop, size_t i) {
  loop_timer *t = loop->heap[i];
  for (;;) {
    size_t c = 2 * i;
    if (c > loop->heap_len) break;
    if (c + 1 <= loop->heap_len && heap_less(loop->heap[c + 1], loop->heap[c])) c++;
    if (!heap_less(loop->heap[c], t)) break;
    heap_set(loop, i, loop->heap[c]);
    i = c;
  }
  heap_set(loop, i, t);
}

bool loop_timer_at(net_loop *loop, loop_timer *t, uint64_t deadline_ms) {
  if (t->heap_index) {
    uint64_t old = t->deadline_ms;
    t->deadline_ms = deadline_ms;
    if (deadline_ms < old) sift_up(loop, t->heap_index);
    else sift_down(loop, t->heap_index);
    return true;
  }
  if (loop->heap_len + 1 >= loop->heap_cap) {
    size_t cap = loop->heap_cap * 2;
    loop_timer **h = realloc(loop->heap, cap * sizeof *h);
    if (!h) return false;
    loop->heap = h;
    loop->heap_cap = cap;
  }
  t->deadline_ms = deadline_ms;
  loop->heap_len++;
  heap_set(loop, loop->heap_len, t);
  sift_up(loop, loop->heap_len);
  return true;
}

void loop_timer_cancel(net_loop *loop, loop_timer *t) {
  size_t i = t->heap_index;
  if (!i) return;
  t->heap_index = 0;
  loop_timer *last = loop->heap[loop->heap_len--];
  if (i <= loop->heap_len) {
    heap_set(loop, i, last);
    if (i > 1 && heap_less(last, loop->heap[i / 2])) sift_up(loop, i);
    else sift_down(loop, i);
  }
}

static void run_timers(net_loop *loop) {
  /* Fire everything due now; a callback may re-arm itself for later (never "now" twice
   * because deadlines strictly in the future are left for the next round). */
  for (int n = 0; n < 100000 && loop->heap_len; n++) {
    loop_timer *t = loop->heap[1];
    if (t->deadline_ms > loop->now_ms) break;
    loop_timer_cancel(loop, t);
    t->fn(t);
  }
}

/* ---- sockets -------------------------------------------------------------------------- */

cinfer_status *loop_io_add(net_loop *loop, loop_io *io, uint32_t events) {
  struct epoll_event ev = {.events = events, .data.ptr = io};
  if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, io->fd, &ev) != 0)
    return cinfer_status_new(CINFER_INTERNAL, "epoll_ctl add fd %d: %s", io->fd,
                             strerror(errno));
  io->events = events;
  return NULL;
}

void loop_io_set(net_loop *loop, loop_io *io, uint32_t events) {
  if (io->events == events) return;
  struct epoll_event ev = {.events = events, .data.ptr = io};
  epoll_ctl(loop->epfd, EPOLL_CTL_MOD, io->fd, &ev);
  io->events = events;
}

void loop_io_del(net_loop *loop, loop_io *io) {
  epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, NULL);
  io->events = 0;
  for (int i = loop->batch_pos + 1; i < loop->batch_len; i++)
    if (loop->batch[i].data.ptr == io) loop->batch[i].data.ptr = NULL;
}

/* ---- run ------------------------------------------------------------------------------ */

void loop_run(net_loop *loop) {
  tls_loop = loop;
  loop->run_thread = pthread_self();
  struct epoll_event evs[LOOP_MAX_EVENTS];
  loop_tick(loop);
  while (!atomic_load_explicit(&loop->stop, memory_order_acquire)) {
    int timeout = -1;
    if (loop->heap_len) {
      uint64_t d = loop->heap[1]->deadline_ms;
      timeout = d <= loop->now_ms ? 0 : (int)((d - loop->now_ms) > 60000 ? 60000 : d - loop->now_ms);
    }
    int n = epoll_wait(loop->epfd, evs, LOOP_MAX_EVENTS, timeout);
    loop_tick(loop);
    loop->batch = evs;
    loop->batch_len = n > 0 ? n : 0;
    if (n > 0 && loop->batch_begin) loop->batch_begin(loop->batch_arg);
    for (loop->batch_pos = 0; loop->batch_pos < loop->batch_len; loop->batch_pos++) {
      loop_io *io = evs[loop->batch_pos].data.ptr;
      if (io) io->fn(io, evs[loop->batch_pos].events);  /* NULL: removed earlier in the batch */
    }
    if (n > 0 && loop->batch_end) loop->batch_end(loop->batch_arg);
    loop->batch_len = 0;
    run_timers(loop);
  }
  atomic_store(&loop->stop, 0);
  /* Drain tasks posted before stop so nothing posted is lost while the loop is alive. */
  run_tasks(loop);
  tls_loop = NULL;
}

static void *loop_thread_main(void *arg) {
  loop_run(arg);
  return NULL;
}

cinfer_status *loop_start_thread(net_loop *loop, const char *name) {
  int e = pthread_create(&loop->thread, NULL, loop_thread_main, loop);
  if (e) return cinfer_status_new(CINFER_INTERNAL, "loop thread: %s", strerror(e));
  if (name) {
    char n[16];
    snprintf(n, sizeof n, "%s", name);
    pthread_setname_np(loop->thread, n);
  }
  loop->has_thread = true;
  return NULL;
}

void loop_join(net_loop *loop) {
  if (!loop->has_thread) return;
  loop_stop(loop);
  pthread_join(loop->thread, NULL);
  loop->has_thread = false;
}
