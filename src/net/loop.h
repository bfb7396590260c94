/* loop.h: the event loop every cinfer network component runs on (server, gateway proxy,
 * load generator). One loop per thread: epoll (level-triggered) for sockets, a min-heap of
 * timers, and a cross-thread task queue (lock-free MPSC list + eventfd wake-up) so that any
 * thread can hand work to a loop with loop_post().
 *
 * Threading: every function here except loop_post/loop_post_task/loop_stop/loop_now_ms
 * must be called on the loop's own thread (inside a callback, or before loop_run starts).
 * Memory: watchers (loop_io) and timers (loop_timer) are embedded by the caller in its own
 * objects (recover the object with container_of style arithmetic), so registering them
 * allocates nothing. The caller owns them and must remove them before freeing.
 */
#ifndef CINFER_NET_LOOP_H
#define CINFER_NET_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"
#include "core/clock.h"

typedef struct net_loop net_loop;

/* ---- lifecycle ----------------------------------------------------------------------- */

cinfer_status *loop_create(net_loop **out);
/* Frees the loop. Tasks still queued are run first (so posted resources are released).
 * Registered watchers and timers are simply forgotten. loop_destroy(NULL) is a no-op. */
void loop_destroy(net_loop *loop);
/* Runs callbacks until loop_stop is called. Binds the loop to the calling thread. */
void loop_run(net_loop *loop);
/* Any thread: makes loop_run return after the current iteration. */
void loop_stop(net_loop *loop);
/* Starts a thread running loop_run(loop); loop_join stops it and waits. */
cinfer_status *loop_start_thread(net_loop *loop, const char *name);
void loop_join(net_loop *loop);
/* Before the loop thread starts: begin(arg) runs before each batch of ready events is
 * dispatched and end(arg) after it (posted tasks included), on the loop thread. Lets a
 * caller coalesce per-event work, e.g. wake a worker once per batch instead of once per
 * request. */
void loop_set_batch_hooks(net_loop *loop, void (*begin)(void *), void (*end)(void *), void *arg);
/* True when called on the thread that runs this loop. */
bool loop_in_thread(const net_loop *loop);
/* Monotonic milliseconds, cached once per loop iteration (cheap). Any thread may call it
 * but only the loop thread gets the cached value; others read the clock. */
uint64_t loop_now_ms(const net_loop *loop);
/* The same instant in nanoseconds (the same clock read: no extra cost). */
uint64_t loop_now_ns(const net_loop *loop);

/* ---- cross-thread tasks ---------------------------------------------------------------- */

/* Intrusive task node for zero-allocation posting: embed it, set fn, post it. The node
 * must stay valid until fn runs and must not be posted again before that. */
typedef struct loop_task {
  struct loop_task *_Atomic next;
  void (*fn)(struct loop_task *task);
} loop_task;

/* Any thread: queue task->fn(task) to run on the loop thread (FIFO per producer). The
 * task may run (and the loop may be destroyed by whoever waits for it) before this call
 * returns; loop_destroy waits until no producer is still inside it. */
void loop_post_task(net_loop *loop, loop_task *task);
/* Any thread: queue fn(arg) on the loop thread. Allocates one small node; returns false only
 * when that allocation fails (fn is then not called). */
bool loop_post(net_loop *loop, void (*fn)(void *arg), void *arg);

/* ---- sockets ------------------------------------------------------------------------- */

enum { LOOP_READ = 1u, LOOP_WRITE = 4u, LOOP_RDHUP = 0x2000u, LOOP_ERROR = 8u, LOOP_HUP = 16u };

typedef struct loop_io {
  int fd;
  uint32_t events;  /* current interest set (LOOP_* bits); maintained by the loop */
  void (*fn)(struct loop_io *io, uint32_t revents);
} loop_io;

/* Starts watching io->fd for `events`; io->fn is called with the ready bits. */
cinfer_status *loop_io_add(net_loop *loop, loop_io *io, uint32_t events);
/* Changes the interest set (no syscall when it is unchanged). */
void loop_io_set(net_loop *loop, loop_io *io, uint32_t events);
/* Stops watching (does not close the fd). Safe from any callback on this loop: events
 * already fetched for io in the current batch are discarded, so the owner of io may be
 * freed right after this call. */
void loop_io_del(net_loop *loop, loop_io *io);

/* ---- timers -------------------------------------------------------------------------- */

typedef struct loop_timer {
  uint64_t deadline_ms;  /* absolute, loop clock; maintained by the loop */
  size_t heap_index;     /* 0 = not armed; maintained by the loop */
  void (*fn)(struct loop_timer *t);
} loop_timer;

/* Arms (or re-arms) t to fire once at the absolute time deadline_ms. Returns false only
 * when the heap could not grow (out of memory). */
bool loop_timer_at(net_loop *loop, loop_timer *t, uint64_t deadline_ms);
void loop_timer_cancel(net_loop *loop, loop_timer *t);
static inline bool loop_timer_armed(const loop_timer *t) { return t->heap_index != 0; }

/* A non-blocking TCP listener on host:port with SO_REUSEPORT (one per loop; listen.c).
 * first: the server's first listener; for a fixed port it fails (UNAVAILABLE, "another
 * process listens there") when the port is already taken, whoever holds it. backlog 0: no
 * listen(). *bound_port (may be NULL): the port bound (for port 0). what names the server
 * in errors ("http server", "grpc"). */
cinfer_status *net_listen(const char *what, const char *host, uint16_t port, int backlog, bool first,
                          int *out, uint16_t *bound_port);

#endif
