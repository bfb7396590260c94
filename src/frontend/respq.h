/* respq.h: the hand-off of a request's responses from the thread that produces them (a
 * model worker, or a decoupled backend's own thread) to the exchange's I/O loop, shared by
 * every streaming frontend (OpenAI SSE, Triton's generate_stream).
 *
 * The response callback pushes; the first push after the loop has taken the queue posts
 * the owner's one loop_task (no allocation per post), so however fast tokens come, the
 * loop runs at most one task per batch of them and encodes them in one write. The FINAL
 * response is never lost: when its node cannot be allocated it takes the queue's spare.
 * A partial response that cannot be queued (out of memory) is dropped and counted in
 * `dropped`, so the owner can end the stream with an error rather than a silent gap.
 *
 * Threading: push from any thread; take and the node functions on the loop only; destroy
 * on the loop once the FINAL response has been taken (nothing can be pushed after it). */
#ifndef CINFER_FRONTEND_RESPQ_H
#define CINFER_FRONTEND_RESPQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "cinfer/cinfer.h"
#include "net/loop.h"

typedef struct respq_node {
  cinfer_response *resp;
  bool final;
  struct respq_node *next;
} respq_node;

typedef struct respq {
  pthread_mutex_t mu;
  respq_node *head, **tail;
  bool posted;            /* task queued and not yet started */
  respq_node spare;       /* for the FINAL response when malloc fails */
  net_loop *loop;
  loop_task *task;        /* the owner's task, posted on the loop */
  _Atomic unsigned dropped;
} respq;

void respq_init(respq *q, net_loop *loop, loop_task *task);
/* Queues resp (the queue owns it) and posts the task unless it is already pending. */
void respq_push(respq *q, cinfer_response *resp, bool final);
/* Loop: everything queued so far, oldest first; the task may be posted again after this. */
respq_node *respq_take(respq *q);
/* Loop: frees a node taken (not its response). */
void respq_node_free(respq *q, respq_node *n);
/* Frees whatever is still queued, responses included. */
void respq_destroy(respq *q);

#endif
