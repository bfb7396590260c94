/* test_sequence.c: the sequence batcher (sched/sequence.h) with a fake clock: config checks,
 * keys and START/END rules, direct slots and backlog, minimum_slot_utilization and the queue
 * delay, oldest with preferred sizes, shapes, idle release, and a randomized run against the
 * invariants and per-sequence order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/sequence.h"

#define US 1000ull

static int n_freed;
static void count_free(void *p) {
  n_freed++;
  free(p);
}

static seqsched *mk(seq_strategy st, int inst, int64_t mb, uint64_t idle_us, uint64_t delay_us) {
  seqsched_config c = {.strategy = st, .n_instances = inst, .max_batch_size = mb,
                       .max_sequence_idle_us = idle_us, .max_queue_delay_us = delay_us,
                       .max_candidate_sequences = 4, .free_state = count_free};
  seqsched *s = NULL;
  cinfer_status *e = seqsched_create(&c, &s);
  assert_null(e);
  return s;
}

static seq_req rq(uint64_t id, bool start, bool end, void *user) {
  seq_req r = {.key = {.id = id}, .start = start, .end = end, .user = user};
  return r;
}

static void check(const seqsched *s) {
  cinfer_status *e = seqsched_check(s);
  if (e) fail_msg("%s", cinfer_status_message(e));
}

static void test_config_errors(void **st) {
  (void)st;
  seqsched_config c = {.strategy = SEQ_DIRECT, .n_instances = 1, .max_batch_size = 4,
                       .minimum_slot_utilization = 1.5};
  cinfer_status *e = seqsched_config_check(&c);
  assert_non_null(e);
  assert_non_null(strstr(cinfer_status_message(e), "minimum_slot_utilization"));
  cinfer_status_free(e);
  int64_t pref[] = {8};
  c = (seqsched_config){.strategy = SEQ_OLDEST, .n_instances = 1, .max_batch_size = 4,
                        .preferred = pref, .n_preferred = 1};
  e = seqsched_config_check(&c);
  assert_non_null(e);
  assert_non_null(strstr(cinfer_status_message(e), "preferred_batch_size 8"));
  cinfer_status_free(e);
  c.n_instances = 0;
  assert_non_null((e = seqsched_config_check(&c)));
  cinfer_status_free(e);
}

static void test_start_end_rules(void **st) {
  (void)st;
  seqsched *s = mk(SEQ_DIRECT, 1, 4, 0, 0);
  seq_req r = rq(0, true, false, NULL);
  assert_int_equal(seqsched_enqueue(s, &r, 0), SEQSCHED_BAD_KEY);
  r = (seq_req){.key = {.is_string = true, .str = "", .len = 0}, .start = true};
  assert_int_equal(seqsched_enqueue(s, &r, 0), SEQSCHED_BAD_KEY);
  r = rq(7, false, false, NULL);
  assert_int_equal(seqsched_enqueue(s, &r, 0), SEQSCHED_NOT_STARTED);
  int a, b, c;
  r = rq(7, true, false, &a);
  assert_int_equal(seqsched_enqueue(s, &r, 0), SEQSCHED_OK);
  r = rq(7, false, true, &b);
  assert_int_equal(seqsched_enqueue(s, &r, 1), SEQSCHED_OK);
  /* the END closed the key at once, though its request has not run */
  r = rq(7, false, false, &c);
  assert_int_equal(seqsched_enqueue(s, &r, 2), SEQSCHED_NOT_STARTED);
  /* a string key equal in text to no integer is its own sequence */
  seq_req rs = {.key = {.is_string = true, .str = "7", .len = 1}, .start = false};
  assert_int_equal(seqsched_enqueue(s, &rs, 2), SEQSCHED_NOT_STARTED);
  check(s);
  seq_req out[4];
  size_t n;
  uint64_t wake;
  seqsched_next(s, 0, 3, out, 4, &n, &wake);
  assert_int_equal(n, 1); /* one request per sequence at a time */
  assert_ptr_equal(out[0].user, &a);
  assert_true(out[0].start);
  *out[0].state = malloc(4); /* the caller's state survives to the next request */
  seqsched_next(s, 0, 3, out + 1, 3, &n, &wake);
  assert_int_equal(n, 0);
  assert_int_equal(wake, UINT64_MAX);
  seqsched_done(s, out, 1, 4);
  seqsched_next(s, 0, 5, out, 4, &n, &wake);
  assert_int_equal(n, 1);
  assert_ptr_equal(out[0].user, &b);
  assert_true(out[0].end);
  assert_non_null(*out[0].state);
  n_freed = 0;
  seqsched_done(s, out, 1, 6);
  assert_int_equal(n_freed, 1); /* END ran: the sequence and its state are gone */
  seqsched_stats ss;
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.open, 0);
  assert_int_equal(ss.slots_used, 0);
  check(s);
  seqsched_destroy(s);
}

static void test_restart_continues_sequence(void **st) {
  (void)st;
  seqsched *s = mk(SEQ_DIRECT, 1, 2, 0, 0);
  int u[3];
  seq_req r = rq(3, true, false, &u[0]);
  seqsched_enqueue(s, &r, 0);
  r = rq(3, true, false, &u[1]); /* START again: queued behind, same slot */
  assert_int_equal(seqsched_enqueue(s, &r, 1), SEQSCHED_OK);
  seqsched_stats ss;
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.open, 1);
  seq_req out[2];
  size_t n;
  uint64_t wake;
  seqsched_next(s, 0, 2, out, 2, &n, &wake);
  assert_int_equal(n, 1);
  assert_ptr_equal(out[0].user, &u[0]);
  seqsched_done(s, out, 1, 2);
  seqsched_next(s, 0, 2, out, 2, &n, &wake);
  assert_int_equal(n, 1);
  assert_ptr_equal(out[0].user, &u[1]);
  assert_true(out[0].start);
  seqsched_done(s, out, 1, 3);
  check(s);
  seqsched_destroy(s);
}

static void test_direct_slots_and_backlog(void **st) {
  (void)st;
  /* 2 instances x 2 slots; 5 sequences: spread over instances, the fifth waits */
  seqsched *s = mk(SEQ_DIRECT, 2, 2, 0, 0);
  int u[6];
  for (int i = 0; i < 5; i++) {
    seq_req r = rq((uint64_t)(i + 1), true, i == 0, &u[i]);
    assert_int_equal(seqsched_enqueue(s, &r, (uint64_t)i), SEQSCHED_OK);
  }
  seqsched_stats ss;
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.backlog, 1);
  assert_int_equal(ss.slots_used, 4);
  check(s);
  seq_req a[2], b[2];
  size_t na, nb;
  uint64_t wake;
  seqsched_next(s, 0, 10, a, 2, &na, &wake);
  seqsched_next(s, 1, 10, b, 2, &nb, &wake);
  assert_int_equal(na, 2);
  assert_int_equal(nb, 2);
  /* round robin: seqs 1, 3 on instance 0 and 2, 4 on instance 1, oldest first */
  assert_ptr_equal(a[0].user, &u[0]);
  assert_ptr_equal(a[1].user, &u[2]);
  assert_ptr_equal(b[0].user, &u[1]);
  assert_ptr_equal(b[1].user, &u[3]);
  /* seq 1 (START+END) finishes: seq 5 takes its slot on instance 0 */
  seqsched_done(s, a, 2, 11);
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.backlog, 0);
  seq_req c[2];
  size_t nc;
  seqsched_next(s, 1, 12, c, 2, &nc, &wake);
  assert_int_equal(nc, 0); /* not instance 1's */
  seqsched_next(s, 0, 12, c, 2, &nc, &wake);
  assert_int_equal(nc, 1);
  assert_ptr_equal(c[0].user, &u[4]);
  seqsched_done(s, c, 1, 13);
  seqsched_done(s, b, 2, 13);
  check(s);
  seqsched_destroy(s);
}

static void test_direct_min_slot_utilization(void **st) {
  (void)st;
  seqsched_config cfg = {.strategy = SEQ_DIRECT, .n_instances = 1, .max_batch_size = 4,
                         .max_queue_delay_us = 1000, .minimum_slot_utilization = 0.5};
  seqsched *s;
  assert_null(seqsched_create(&cfg, &s));
  int u[3];
  seq_req r = rq(1, true, false, &u[0]);
  seqsched_enqueue(s, &r, 100 * US);
  seq_req out[4];
  size_t n;
  uint64_t wake;
  seqsched_next(s, 0, 100 * US, out, 4, &n, &wake);
  assert_int_equal(n, 0); /* 1 of 4 slots < 0.5: wait for the delay */
  assert_int_equal(wake, 1100 * US);
  seqsched_next(s, 0, 1100 * US - 1, out, 4, &n, &wake);
  assert_int_equal(n, 0);
  r = rq(2, true, false, &u[1]);
  seqsched_enqueue(s, &r, 500 * US);
  seqsched_next(s, 0, 500 * US, out, 4, &n, &wake);
  assert_int_equal(n, 2); /* 2 of 4 reach the utilization */
  seqsched_done(s, out, 2, 600 * US);
  r = rq(1, false, false, &u[2]);
  seqsched_enqueue(s, &r, 700 * US);
  seqsched_next(s, 0, 1699 * US, out, 4, &n, &wake);
  assert_int_equal(n, 0);
  seqsched_next(s, 0, 1700 * US, out, 4, &n, &wake);
  assert_int_equal(n, 1); /* the delay is over */
  seqsched_done(s, out, 1, 1800 * US);
  check(s);
  seqsched_destroy(s);
}

static void test_oldest_preferred_and_delay(void **st) {
  (void)st;
  int64_t pref[] = {2, 3};
  seqsched_config cfg = {.strategy = SEQ_OLDEST, .n_instances = 2, .max_batch_size = 4,
                         .max_queue_delay_us = 1000, .max_candidate_sequences = 5,
                         .preferred = pref, .n_preferred = 2};
  seqsched *s;
  assert_null(seqsched_create(&cfg, &s));
  int u[8];
  seq_req r = rq(1, true, false, &u[0]);
  seqsched_enqueue(s, &r, 0);
  seq_req out[4];
  size_t n;
  uint64_t wake;
  seqsched_next(s, 1, 0, out, 4, &n, &wake);
  assert_int_equal(n, 0);
  assert_int_equal(wake, 1000 * US);
  r = rq(2, true, false, &u[1]);
  seqsched_enqueue(s, &r, 10);
  seqsched_next(s, 1, 10, out, 4, &n, &wake);
  assert_int_equal(n, 2); /* a preferred size: at once, on any instance */
  assert_ptr_equal(out[0].user, &u[0]);
  seqsched_done(s, out, 2, 20);
  /* sequences 1 and 2 keep their slots; of 4 more, 3 take the free slots and the fourth
   * waits in the backlog */
  for (int i = 0; i < 4; i++) {
    r = rq((uint64_t)(3 + i), true, false, &u[2 + i]);
    seqsched_enqueue(s, &r, (uint64_t)(30 + i));
  }
  seqsched_stats ss;
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.backlog, 1);
  seqsched_next(s, 0, 50, out, 4, &n, &wake);
  assert_int_equal(n, 3); /* the largest preferred size: at once */
  assert_ptr_equal(out[0].user, &u[2]);
  assert_ptr_equal(out[2].user, &u[4]);
  seq_req more[4];
  size_t m;
  seqsched_next(s, 1, 50, more, 4, &m, &wake);
  assert_int_equal(m, 0); /* sequence 6 has no slot yet */
  assert_int_equal(wake, UINT64_MAX);
  r = rq(1, false, true, &u[6]); /* sequence 1 ends */
  seqsched_enqueue(s, &r, 60);
  seqsched_next(s, 1, 70, more, 4, &m, &wake);
  assert_int_equal(m, 0); /* 1 waiting is no preferred size: the delay from its arrival */
  assert_int_equal(wake, 60 + 1000 * US);
  seqsched_next(s, 1, 60 + 1000 * US, more, 4, &m, &wake);
  assert_int_equal(m, 1);
  assert_ptr_equal(more[0].user, &u[6]);
  seqsched_done(s, more, 1, 2000 * US);
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.backlog, 0); /* sequence 6 took sequence 1's slot */
  seqsched_done(s, out, 3, 2000 * US);
  check(s);
  seqsched_destroy(s);
}

static void test_shapes_never_mix(void **st) {
  (void)st;
  seqsched *s = mk(SEQ_DIRECT, 1, 4, 0, 0);
  int u[3];
  for (int i = 0; i < 3; i++) {
    seq_req r = rq((uint64_t)(i + 1), true, false, &u[i]);
    r.shape_key = i == 1 ? 99 : 5;
    seqsched_enqueue(s, &r, (uint64_t)i);
  }
  seq_req out[4];
  size_t n;
  uint64_t wake;
  seqsched_next(s, 0, 5, out, 4, &n, &wake);
  assert_int_equal(n, 2);
  assert_ptr_equal(out[0].user, &u[0]);
  assert_ptr_equal(out[1].user, &u[2]);
  seq_req o2[4];
  size_t n2;
  seqsched_next(s, 0, 5, o2, 4, &n2, &wake);
  assert_int_equal(n2, 1);
  assert_ptr_equal(o2[0].user, &u[1]);
  seqsched_done(s, out, 2, 6);
  seqsched_done(s, o2, 1, 6);
  seqsched_destroy(s);
}

static void test_idle_release(void **st) {
  (void)st;
  seqsched *s = mk(SEQ_DIRECT, 1, 1, 100, 0); /* one slot, idle 100 us */
  int u[3];
  seq_req r = rq(1, true, false, &u[0]);
  seqsched_enqueue(s, &r, 0);
  r = rq(2, true, false, &u[1]); /* backlog: no slot */
  seqsched_enqueue(s, &r, 1);
  seq_req out[1];
  size_t n;
  uint64_t wake;
  seqsched_next(s, 0, 2, out, 1, &n, &wake);
  assert_int_equal(n, 1);
  *out[0].state = malloc(8);
  assert_int_equal(seqsched_expire_at(s), UINT64_MAX); /* running: not idle */
  seqsched_done(s, out, 1, 10 * US);
  assert_int_equal(seqsched_expire_at(s), 110 * US + 1);
  n_freed = 0;
  assert_int_equal(seqsched_expire(s, 110 * US), 0); /* "longer than" the idle time */
  assert_int_equal(seqsched_expire(s, 110 * US + 1), 1);
  assert_int_equal(n_freed, 1);
  r = rq(1, false, false, &u[2]);
  assert_int_equal(seqsched_enqueue(s, &r, 111 * US), SEQSCHED_NOT_STARTED);
  seqsched_next(s, 0, 111 * US, out, 1, &n, &wake); /* seq 2 got the slot */
  assert_int_equal(n, 1);
  assert_ptr_equal(out[0].user, &u[1]);
  seqsched_done(s, out, 1, 112 * US);
  check(s);
  seqsched_destroy(s);
}

static void test_drain_and_string_keys(void **st) {
  (void)st;
  seqsched *s = mk(SEQ_OLDEST, 1, 2, 0, 0);
  char k1[] = "alpha", k2[] = "beta";
  int u[3];
  seq_req r = {.key = {.is_string = true, .str = k1, .len = 5}, .start = true, .user = &u[0]};
  seqsched_enqueue(s, &r, 0);
  r.user = &u[1];
  r.start = false;
  assert_int_equal(seqsched_enqueue(s, &r, 1), SEQSCHED_OK);
  seq_req r2 = {.key = {.is_string = true, .str = k2, .len = 4}, .start = true, .user = &u[2]};
  seqsched_enqueue(s, &r2, 2);
  seq_req out[4];
  assert_int_equal(seqsched_drain(s, out, 4), 3);
  seqsched_stats ss;
  seqsched_get_stats(s, &ss);
  assert_int_equal(ss.queued, 0);
  check(s);
  seqsched_destroy(s);
}

/* Random enqueue/next/done/expire steps; checks per-sequence order, one request running per
 * sequence, every accepted request run or drained once, and the invariants. */
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

typedef struct treq {
  uint64_t id;
  struct treq *prev; /* the previous request of its sequence, NULL at its start */
  int state;         /* 0 queued, 1 running, 2 done */
} treq;

static void test_random_property(void **st) {
  (void)st;
  for (int round = 0; round < 40; round++) {
    int inst = 1 + (int)(rnd() % 3);
    int64_t mb = (int64_t)(rnd() % 5);
    seqsched_config c = {.strategy = rnd() % 2 ? SEQ_OLDEST : SEQ_DIRECT, .n_instances = inst,
                         .max_batch_size = mb, .max_sequence_idle_us = rnd() % 3 ? 50 : 0,
                         .max_queue_delay_us = rnd() % 20, .minimum_slot_utilization = 0.5,
                         .max_candidate_sequences = 1 + (uint32_t)(rnd() % 6), .free_state = free};
    seqsched *s;
    assert_null(seqsched_create(&c, &s));
    enum { N = 3000 };
    treq *reqs = calloc(N, sizeof *reqs);
    treq *last[16] = {NULL}; /* per id: the last request of its open sequence */
    bool open[16] = {false};
    size_t nreq = 0, cap = mb > 0 ? (size_t)mb : 1;
    seq_req running[8][8];
    size_t nrun[8] = {0};
    uint64_t now = 0, accepted = 0, finished = 0;
    for (int step = 0; step < 4000; step++) {
      now += rnd() % 20 * US;
      int op = (int)(rnd() % 4);
      if (op == 0 && nreq < N) {
        uint64_t id = 1 + rnd() % 15;
        bool start = !open[id] || rnd() % 10 == 0, end = rnd() % 5 == 0;
        treq *t = &reqs[nreq];
        t->id = id;
        t->prev = last[id];
        seq_req r = rq(id, start, end, t);
        seqsched_result res = seqsched_enqueue(s, &r, now);
        if (res == SEQSCHED_OK) {
          nreq++;
          accepted++;
          open[id] = !end;
          last[id] = end ? NULL : t;
        } else {
          assert_int_equal(res, SEQSCHED_NOT_STARTED); /* the idle release closed it */
          assert_false(start);
          open[id] = false;
          last[id] = NULL;
        }
      } else if (op == 1) {
        int i = (int)(rnd() % (uint64_t)inst);
        if (nrun[i]) continue;
        uint64_t wake;
        seqsched_next(s, i, now, running[i], cap, &nrun[i], &wake);
        for (size_t k = 0; k < nrun[i]; k++) {
          treq *t = running[i][k].user;
          assert_int_equal(t->state, 0);
          t->state = 1;
          /* in order, and only once the previous one of its sequence is done */
          assert_true(t->prev == NULL || t->prev->state == 2);
          for (size_t j = 0; j < k; j++) assert_ptr_not_equal(running[i][j].seq, running[i][k].seq);
        }
        if (nrun[i] == 0 && wake != UINT64_MAX) assert_true(wake > now);
      } else if (op == 2) {
        int i = (int)(rnd() % (uint64_t)inst);
        for (size_t k = 0; k < nrun[i]; k++) {
          ((treq *)running[i][k].user)->state = 2;
          if (rnd() % 2 && !*running[i][k].state) *running[i][k].state = malloc(4);
        }
        finished += nrun[i];
        seqsched_done(s, running[i], nrun[i], now);
        nrun[i] = 0;
      } else {
        seqsched_expire(s, now);
      }
      if (step % 50 == 0) check(s);
    }
    for (int i = 0; i < inst; i++) {
      seqsched_done(s, running[i], nrun[i], now);
      finished += nrun[i];
    }
    seq_req *rest = calloc(N, sizeof *rest);
    size_t nd = seqsched_drain(s, rest, N);
    for (size_t k = 0; k < nd; k++) assert_int_equal(((treq *)rest[k].user)->state, 0);
    assert_int_equal(finished + nd, accepted);
    check(s);
    free(rest);
    free(reqs);
    seqsched_destroy(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_start_end_rules),
      cmocka_unit_test(test_restart_continues_sequence),
      cmocka_unit_test(test_direct_slots_and_backlog),
      cmocka_unit_test(test_direct_min_slot_utilization),
      cmocka_unit_test(test_oldest_preferred_and_delay),
      cmocka_unit_test(test_shapes_never_mix),
      cmocka_unit_test(test_idle_release),
      cmocka_unit_test(test_drain_and_string_keys),
      cmocka_unit_test(test_random_property),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
