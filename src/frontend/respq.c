/* respq.c: see respq.h. */
#include "frontend/respq.h"

#include <stdlib.h>

void respq_init(respq *q, net_loop *loop, loop_task *task) {
  pthread_mutex_init(&q->mu, NULL);
  q->head = NULL;
  q->tail = &q->head;
  q->posted = false;
  q->loop = loop;
  q->task = task;
  atomic_init(&q->dropped, 0);
}

void respq_push(respq *q, cinfer_response *resp, bool final) {
  respq_node *n = malloc(sizeof *n);
  if (!n && !final) { /* a lost partial is reported through `dropped`; FINAL must arrive */
    atomic_fetch_add(&q->dropped, 1);
    cinfer_response_free(resp);
    return;
  }
  pthread_mutex_lock(&q->mu);
  if (!n) n = &q->spare; /* FINAL is the last push: the spare is free */
  n->resp = resp;
  n->final = final;
  n->next = NULL;
  *q->tail = n;
  q->tail = &n->next;
  bool post = !q->posted;
  q->posted = true;
  pthread_mutex_unlock(&q->mu);
  if (post) loop_post_task(q->loop, q->task);
}

respq_node *respq_take(respq *q) {
  pthread_mutex_lock(&q->mu);
  respq_node *h = q->head;
  q->head = NULL;
  q->tail = &q->head;
  q->posted = false;
  pthread_mutex_unlock(&q->mu);
  return h;
}

void respq_node_free(respq *q, respq_node *n) {
  if (n != &q->spare) free(n);
}

void respq_destroy(respq *q) {
  for (respq_node *n = q->head, *nx; n; n = nx) {
    nx = n->next;
    cinfer_response_free(n->resp);
    respq_node_free(q, n);
  }
  q->head = NULL;
  q->tail = &q->head;
  pthread_mutex_destroy(&q->mu);
}
