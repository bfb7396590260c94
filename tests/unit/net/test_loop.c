/* test_loop.c: event loop timers (ordering, re-arm, cancel) and cross-thread posting
 * (every task from several producer threads runs exactly once, on the loop thread). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <cmocka.h>

#include "net/loop.h"

typedef struct tctx {
  loop_timer t;
  net_loop *loop;
  int id;
  int *order;
  int *n;
} tctx;

static void on_timer(loop_timer *t) {
  tctx *c = (tctx *)t;
  c->order[(*c->n)++] = c->id;
  if (c->id == 99) loop_stop(c->loop);
}

static void test_timers_fire_in_deadline_order(void **s) {
  net_loop *loop;
  assert_null(loop_create(&loop));
  int order[64], n = 0;
  tctx t[40];
  uint64_t now = clock_now_ms();
  /* 39 timers with scrambled deadlines (all in the past or near future), one stopper */
  for (int i = 0; i < 39; i++) {
    t[i] = (tctx){.t.fn = on_timer, .loop = loop, .id = i, .order = order, .n = &n};
    assert_true(loop_timer_at(loop, &t[i].t, now + (uint64_t)((i * 7) % 39)));
  }
  /* cancel a few, re-arm one later and one earlier */
  loop_timer_cancel(loop, &t[5].t);
  loop_timer_cancel(loop, &t[20].t);
  assert_false(loop_timer_armed(&t[5].t));
  loop_timer_at(loop, &t[0].t, now + 38);  /* was now+0 */
  loop_timer_at(loop, &t[1].t, now);       /* was now+7 */
  t[39] = (tctx){.t.fn = on_timer, .loop = loop, .id = 99, .order = order, .n = &n};
  loop_timer_at(loop, &t[39].t, now + 45);
  loop_run(loop);
  assert_int_equal(n, 38);
  uint64_t prev = 0;
  for (int i = 0; i < n - 1; i++) {
    int id = order[i];
    assert_true(id != 5 && id != 20);
    uint64_t d = t[id].t.deadline_ms;
    assert_true(d >= prev);
    prev = d;
  }
  assert_int_equal(order[n - 1], 99);
  loop_destroy(loop);
}

#define PRODUCERS 4
#define PER 20000

typedef struct post_ctx {
  net_loop *loop;
  _Atomic long sum;
  _Atomic int count;
  _Atomic int wrong_thread;
  loop_task tasks[PRODUCERS][64];
} post_ctx;

static post_ctx P;

static void add_fn(void *arg) {
  if (!loop_in_thread(P.loop)) atomic_fetch_add(&P.wrong_thread, 1);
  atomic_fetch_add(&P.sum, (long)(intptr_t)arg);
  if (atomic_fetch_add(&P.count, 1) + 1 == PRODUCERS * PER + PRODUCERS * 64) loop_stop(P.loop);
}

static void task_fn(loop_task *t) { add_fn((void *)(intptr_t)1); }

static void *producer(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < PER; i++) loop_post(P.loop, add_fn, (void *)(intptr_t)(i % 3));
  for (int i = 0; i < 64; i++) {
    P.tasks[id][i].fn = task_fn;
    loop_post_task(P.loop, &P.tasks[id][i]);
  }
  return NULL;
}

static void test_post_from_many_threads(void **s) {
  memset(&P, 0, sizeof P);
  assert_null(loop_create(&P.loop));
  assert_false(loop_in_thread(P.loop));
  pthread_t th[PRODUCERS];
  for (int i = 0; i < PRODUCERS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, producer, (void *)(intptr_t)i), 0);
  loop_run(P.loop);  /* returns when the last task ran */
  for (int i = 0; i < PRODUCERS; i++) pthread_join(th[i], NULL);
  long want = 0;
  for (int i = 0; i < PER; i++) want += i % 3;
  want = want * PRODUCERS + PRODUCERS * 64;
  assert_int_equal(atomic_load(&P.count), PRODUCERS * PER + PRODUCERS * 64);
  assert_int_equal(atomic_load(&P.sum), want);
  assert_int_equal(atomic_load(&P.wrong_thread), 0);
  loop_destroy(P.loop);
}

static _Atomic int destroyed_ran;
static void mark(void *arg) { atomic_fetch_add(&destroyed_ran, 1); }

static void test_destroy_runs_pending_tasks(void **s) {
  net_loop *loop;
  assert_null(loop_create(&loop));
  for (int i = 0; i < 10; i++) assert_true(loop_post(loop, mark, NULL));
  loop_destroy(loop);  /* nothing leaks (ASan) and every task ran */
  assert_int_equal(atomic_load(&destroyed_ran), 10);
  loop_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_timers_fire_in_deadline_order),
      cmocka_unit_test(test_post_from_many_threads),
      cmocka_unit_test(test_destroy_runs_pending_tasks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
