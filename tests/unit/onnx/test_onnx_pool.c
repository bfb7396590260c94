/* test_onnx_pool.c: the ONNX engine's thread pool (src/backends/onnx/opool.h) and the
 * convolutions it splits (kern_onednn_conv.c's output-channel slices).
 *
 *   - every chunk of every run runs exactly once, on a tid below the pool's size, for
 *     chunk counts 1..1000 and pools of 1..4 threads, many runs back to back;
 *   - inside a chunk the thread-local current pool is none (a kernel called from a chunk
 *     runs inline, never re-enters the pool);
 *   - after an inference ends (hold off) every worker goes to sleep (the statistics count
 *     it; waited for with a bound, no sleep-based wait);
 *   - the contention guard: a caller that waits for workers' chunks (or whose workers run
 *     too few of them) switches to running alone (solo_events), and then runs every
 *     chunk itself (the workers' chunks are made
 *     slow by busy-waiting in the chunk: what a descheduled worker looks like);
 *   - a chain of convolutions (3x3, 1x1 + Add, depthwise, PRelu, a 1x1 into a plain graph
 *     output) run by 2- and 3-thread sessions, whose profile shows the sliced oneDNN
 *     kernel ("onednn/<slices>"), equals the 1-thread session bit for bit, batches too;
 *   - a pool set alone (opool_set_alone) runs every chunk on the caller in order and says
 *     it is solo; unset, its workers take chunks again;
 *   - pool or alone (opool_mode): with injected times the chooser learns both modes, runs
 *     the faster, probes the other once in 16 runs (64 when they differ by > 25%), switches
 *     when conditions change; a 2-thread session forced alone (CINFER_ONNX_THREAD_MODE)
 *     hands nothing to its workers and its outputs equal pool mode's and one thread's bit
 *     for bit, batch 1 (operators) and 3 (row groups). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "backends/onnx/kern.h"
#include "backends/onnx/onnx.h"
#include "backends/onnx/opool.h"
#include "model_builder.h"

typedef struct {
  atomic_int *hits;
  int threads;
  atomic_int bad_tid, nested;
} count_ctx;

static void count_chunk(void *vc, int64_t c, int tid) {
  count_ctx *x = vc;
  atomic_fetch_add(&x->hits[c], 1);
  if (tid < 0 || tid >= x->threads) atomic_store(&x->bad_tid, 1);
  if (opool_current() != NULL && tid != 0) atomic_store(&x->nested, 1);
}

static void test_every_chunk_once(void **state) {
  (void)state;
  const int64_t counts[] = {1, 2, 3, 7, 64, 1000};
  for (int T = 1; T <= 4; T++) {
    opool *p;
    assert_null(opool_create(T, &p));
    assert_int_equal(opool_threads(p), T);
    opool_hold(p, true);
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
      int64_t n = counts[ci];
      atomic_int *hits = calloc((size_t)n, sizeof *hits);
      count_ctx x = {hits, T, 0, 0};
      for (int r = 0; r < 200; r++) opool_for(p, n, count_chunk, &x);
      for (int64_t c = 0; c < n; c++) assert_int_equal(atomic_load(&hits[c]), 200);
      assert_int_equal(atomic_load(&x.bad_tid), 0);
      assert_int_equal(atomic_load(&x.nested), 0);
      free(hits);
    }
    opool_hold(p, false);
    opool_destroy(p);
  }
}

/* opool_par without a current pool, and inside a chunk (workers have none): inline */
static void par_inside(void *vc, int64_t c, int tid) {
  (void)tid;
  atomic_int *hits = vc;
  if (opool_current() == NULL) atomic_fetch_add(&hits[c], 1);
}

static void test_current_pool(void **state) {
  (void)state;
  atomic_int hits[5] = {0};
  assert_null(opool_current());
  assert_int_equal(opool_cur_threads(), 1);
  opool_par(5, par_inside, hits); /* no pool: inline on this thread */
  for (int i = 0; i < 5; i++) assert_int_equal(atomic_load(&hits[i]), 1);
  opool *p;
  assert_null(opool_create(2, &p));
  assert_null(opool_set_current(p));
  assert_ptr_equal(opool_current(), p);
  assert_int_equal(opool_cur_threads(), 2);
  /* below the threshold: one chunk; above: up to 4 per thread, never more than items */
  assert_int_equal(opool_chunks(1000, 1000, OPOOL_MIN_ELEMS), 1);
  assert_int_equal(opool_chunks(1 << 20, 1 << 20, OPOOL_MIN_ELEMS), 8);
  assert_int_equal(opool_chunks(3, 1 << 20, OPOOL_MIN_ELEMS), 3);
  assert_int_equal(opool_chunks(1 << 20, 3 * OPOOL_MIN_ELEMS, OPOOL_MIN_ELEMS), 3);
  assert_ptr_equal(opool_set_current(NULL), p);
  assert_int_equal(opool_chunks(1 << 20, 1 << 20, OPOOL_MIN_ELEMS), 1);
  opool_destroy(p);
}

static void noop_chunk(void *vc, int64_t c, int tid) {
  (void)vc;
  (void)c;
  (void)tid;
}

/* After hold off every worker sleeps: waited for with a bound on the condition. */
static void test_sleep_between_inferences(void **state) {
  (void)state;
  opool *p;
  assert_null(opool_create(3, &p));
  for (int inf = 0; inf < 5; inf++) {
    opool_stats a, b;
    opool_hold(p, true);
    for (int r = 0; r < 50; r++) opool_for(p, 6, noop_chunk, NULL);
    opool_get_stats(p, &a);
    opool_hold(p, false);
    /* two workers must each go to sleep once more; bounded wait (~10 s) */
    bool slept = false;
    for (int i = 0; i < 100000 && !slept; i++) {
      opool_get_stats(p, &b);
      slept = b.sleeps >= a.sleeps + 2;
      if (!slept) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
      }
    }
    assert_true(slept);
    assert_true(b.parallel_runs >= 50u * (unsigned)(inf + 1) || b.solo_events > 0);
  }
  opool_destroy(p);
}

/* workers' chunks take a while (busy wait on the clock); the caller's are instant */
static void busy_ns(long ns) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

/* the caller's chunks take 20 us (so a worker has time to claim one), a worker's 2 ms */
static void slow_worker_chunk(void *vc, int64_t c, int tid) {
  (void)c;
  atomic_int *on_worker = vc;
  if (tid == 0) {
    busy_ns(20000L);
    return;
  }
  atomic_fetch_add(on_worker, 1);
  busy_ns(2000000L);
}

static void test_contention_guard(void **state) {
  (void)state;
  opool *p;
  assert_null(opool_create(2, &p));
  opool_set_guard(p, 1000000 /* 1 ms window */, 10, 60LL * 1000000000LL /* a minute alone */);
  opool_hold(p, true);
  atomic_int on_worker = 0;
  opool_stats st;
  opool_get_stats(p, &st);
  for (int r = 0; r < 50000 && st.solo_events == 0; r++) {
    opool_for(p, 4, slow_worker_chunk, &on_worker);
    opool_get_stats(p, &st);
  }
  /* either rule of the guard may fire first: the caller waited for the workers' slow
   * chunks, or (a window without any worker chunk) the workers ran too few of them */
  assert_true(st.solo_events > 0);
  int before = atomic_load(&on_worker);
  for (int r = 0; r < 100; r++) opool_for(p, 4, slow_worker_chunk, &on_worker);
  assert_int_equal(atomic_load(&on_worker), before); /* alone: every chunk on the caller */
  opool_hold(p, false);
  opool_destroy(p);
}

/* Set alone, a pool runs every chunk on the caller, in order, hands nothing to its workers
 * and reports itself solo; off again, its workers take chunks again. */
typedef struct {
  atomic_int on_worker, next, out_of_order;
} order_ctx;

static void order_chunk(void *vc, int64_t c, int tid) {
  order_ctx *x = vc;
  if (tid) atomic_fetch_add(&x->on_worker, 1);
  if (atomic_fetch_add(&x->next, 1) != (int)c % 8) atomic_store(&x->out_of_order, 1);
  if ((int)c == 7) atomic_store(&x->next, 0);
}

static void test_set_alone(void **state) {
  (void)state;
  opool *p;
  assert_null(opool_create(3, &p));
  assert_false(opool_solo(p));
  opool_set_alone(p, true);
  assert_true(opool_solo(p));
  opool_hold(p, true);
  order_ctx x = {0, 0, 0};
  opool_stats a, b;
  opool_get_stats(p, &a);
  for (int r = 0; r < 200; r++) opool_for(p, 8, order_chunk, &x);
  opool_get_stats(p, &b);
  opool_hold(p, false);
  assert_int_equal(atomic_load(&x.on_worker), 0);
  assert_int_equal(atomic_load(&x.out_of_order), 0);
  assert_int_equal(b.parallel_runs, a.parallel_runs);
  opool_set_alone(p, false);
  assert_false(opool_solo(p));
  /* the workers are back: some chunk lands on one (bounded: runs of 64 slowish chunks) */
  opool_hold(p, true);
  atomic_int hits[64];
  count_ctx y = {hits, 3, 0, 0};
  for (int r = 0; r < 20000 && b.worker_chunks == a.worker_chunks; r++) {
    memset(hits, 0, sizeof hits);
    opool_for(p, 64, count_chunk, &y);
    opool_get_stats(p, &b);
  }
  opool_hold(p, false);
  assert_true(b.worker_chunks > a.worker_chunks);
  opool_destroy(p);
}

/* ---- pool or alone (opool_mode) with injected times ---- */

/* runs n inferences whose times are pool_ns / alone_ns; counts each mode's runs */
static void mode_steps(opool_mode *c, int n, int64_t pool_ns, int64_t alone_ns, int *n_pool, int *n_alone) {
  *n_pool = *n_alone = 0;
  for (int i = 0; i < n; i++) {
    int m = opool_mode_pick(c);
    assert_true(m == OPOOL_POOL || m == OPOOL_ALONE);
    opool_mode_record(c, m, m == OPOOL_POOL ? pool_ns : alone_ns);
    ++*(m == OPOOL_POOL ? n_pool : n_alone);
  }
}

/* runs n inferences as mode_steps does and returns the number of runs in the mode in use
 * before each probe, in *gaps (up to max_gaps of them); returns how many probes there were */
static int probe_gaps(opool_mode *c, int n, int64_t pool_ns, int64_t alone_ns, int *gaps, int max_gaps) {
  int k = 0, run = 0;
  for (int i = 0; i < n; i++) {
    int cur = c->cur, m = opool_mode_pick(c);
    opool_mode_record(c, m, m == OPOOL_POOL ? pool_ns : alone_ns);
    if (m != cur) {
      if (k < max_gaps) gaps[k] = run;
      k++;
      run = 0;
    } else {
      run++;
    }
  }
  return k;
}

static void test_mode_chooser(void **state) {
  (void)state;
  opool_mode c = {0};
  /* learning: pool, alone, pool, alone */
  const int want[4] = {OPOOL_POOL, OPOOL_ALONE, OPOOL_POOL, OPOOL_ALONE};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(opool_mode_pick(&c), want[i]);
    opool_mode_record(&c, want[i], want[i] == OPOOL_POOL ? 1000000 : 1100000);
  }
  /* the pool is faster, alone within 25%: probes after 1, 3, 7 and 15 runs with the pool
   * (each losing probe doubles the gap), then 1 probe in 16 */
  int np, na, gaps[16];
  assert_int_equal(probe_gaps(&c, 30, 1000000, 1100000, gaps, 16), 4);
  assert_int_equal(gaps[0], 1);
  assert_int_equal(gaps[1], 3);
  assert_int_equal(gaps[2], 7);
  assert_int_equal(gaps[3], 15);
  mode_steps(&c, 160, 1000000, 1100000, &np, &na);
  assert_int_equal(na, 10);
  assert_int_equal(np, 150);
  assert_int_equal(opool_mode_estimate(&c, OPOOL_POOL), 1000000);
  /* conditions change: the pool becomes 2x slower (another process on the other core).
   * Two slow runs do not move the median of its last five; after the third, alone (last
   * seen at 1.1 ms, perhaps long ago) is probed at once, wins twice and is in use. It then
   * probes the pool once in 64 runs (the medians differ by more than a quarter; the gap,
   * doubled to 64 by the losing probes so far, stays across the switch). */
  mode_steps(&c, 2, 2000000, 1100000, &np, &na);
  assert_int_equal(np, 2);
  assert_int_equal(opool_mode_estimate(&c, OPOOL_POOL), 1000000);
  assert_int_equal(opool_mode_pick(&c), OPOOL_POOL);
  mode_steps(&c, 1, 2000000, 1100000, &np, &na);
  assert_int_equal(opool_mode_pick(&c), OPOOL_ALONE);
  mode_steps(&c, 2, 2000000, 1100000, &np, &na);
  assert_int_equal(na, 2);
  assert_int_equal(c.cur, OPOOL_ALONE);
  mode_steps(&c, 640, 2000000, 1100000, &np, &na);
  assert_int_equal(np, 10);
  /* the pool gets fast again: two probes later it is back in use */
  int back = -1;
  for (int i = 0; i < 3 * 64 && back < 0; i++) {
    int m = opool_mode_pick(&c);
    opool_mode_record(&c, m, m == OPOOL_POOL ? 1000000 : 1100000);
    if (opool_mode_pick(&c) == OPOOL_POOL && m == OPOOL_POOL) back = i;
  }
  assert_true(back >= 0);
  /* a partial loss: the pool 5% slower than alone. Alone is used, the pool only as a probe
   * (after 1, 3, 7, then every 15 runs alone): the 2-thread session is slower than alone by
   * at most the probes' share */
  opool_mode d = {0};
  mode_steps(&d, 4 + 1600, 1050000, 1000000, &np, &na);
  assert_int_equal(d.probes, 3 + (1600 - 29 + 15) / 16);
  assert_int_equal(np, 2 + (int)d.probes);
  /* one outlier among five does not move the median */
  opool_mode e = {0};
  mode_steps(&e, 40, 1000000, 1500000, &np, &na);
  opool_mode_record(&e, OPOOL_POOL, 50000000);
  assert_int_equal(opool_mode_estimate(&e, OPOOL_POOL), 1000000);
  assert_int_equal(opool_mode_pick(&e), OPOOL_POOL);
  /* a choice made while warming up is undone within three runs: learning saw the pool at
   * 4.6 ms and alone at 3.7 (the pool's first runs pay more of a cold start), then the pool
   * takes 2.0 and alone 3.0. Alone is chosen, its first probe of the pool wins, the next
   * run probes again, and the pool is in use from then on. */
  opool_mode w = {0};
  mode_steps(&w, 4, 4600000, 3700000, &np, &na);
  assert_int_equal(opool_mode_pick(&w), OPOOL_ALONE);
  mode_steps(&w, 3, 2000000, 3000000, &np, &na);
  assert_int_equal(np, 2);
  assert_int_equal(w.cur, OPOOL_POOL);
  mode_steps(&w, 20, 2000000, 3000000, &np, &na);
  assert_int_equal(na, 3); /* the probes after 1, 3 and 7 runs with the pool */
  /* a burst of two slow runs with the pool (the host took the other core for a few ms)
   * neither switches nor brings a probe: with a median of three it switched to alone,
   * whose times were then 64 runs old, and stayed there for 16-64 runs */
  opool_mode h = {0};
  mode_steps(&h, 4 + 30, 1600000, 2500000, &np, &na); /* UltraFace at 2 threads, idle */
  while (opool_mode_pick(&h) == OPOOL_ALONE) opool_mode_record(&h, OPOOL_ALONE, 2500000);
  uint64_t probes = h.probes;
  opool_mode_record(&h, OPOOL_POOL, 4200000);
  assert_int_equal(opool_mode_pick(&h), OPOOL_POOL);
  opool_mode_record(&h, OPOOL_POOL, 3400000);
  assert_int_equal(opool_mode_estimate(&h, OPOOL_POOL), 1600000);
  assert_int_equal(opool_mode_pick(&h), OPOOL_POOL);
  mode_steps(&h, 5, 1600000, 2500000, &np, &na);
  assert_int_equal(np, 5);
  assert_int_equal(h.probes, probes);
  /* alone's kept times are old and lucky (1.2 ms); the pool, in use, is now 1.6: alone is
   * probed at once, loses (2.5 ms) until its median is fresh, and the pool stays */
  opool_mode k = {0};
  mode_steps(&k, 4, 1600000, 1200000, &np, &na); /* learning picks alone */
  assert_int_equal(k.cur, OPOOL_ALONE);
  mode_steps(&k, 3, 1000000, 2500000, &np, &na); /* two winning pool probes: the pool */
  assert_int_equal(k.cur, OPOOL_POOL);
  mode_steps(&k, 40, 1600000, 2500000, &np, &na);
  assert_int_equal(k.cur, OPOOL_POOL);
  assert_true(na <= 5);
  assert_true(opool_mode_estimate(&k, OPOOL_ALONE) == 2500000);
  /* a lucky probe (one outlier) is tried once more and does not switch */
  opool_mode f = {0};
  mode_steps(&f, 4 + 30, 1000000, 1500000, &np, &na); /* the pool in use, gap now 16 */
  while (opool_mode_pick(&f) == OPOOL_POOL) opool_mode_record(&f, OPOOL_POOL, 1000000);
  opool_mode_record(&f, OPOOL_ALONE, 500000); /* the outlier */
  assert_true(f.again);
  assert_int_equal(opool_mode_pick(&f), OPOOL_ALONE);
  opool_mode_record(&f, OPOOL_ALONE, 1500000);
  assert_false(f.again);
  assert_int_equal(f.cur, OPOOL_POOL);
  assert_int_equal(opool_mode_pick(&f), OPOOL_POOL);
  /* two modes within noise of each other (another process on the other core): switches
   * come and go, but probes stay near 1 in 16 instead of restarting the short gaps */
  opool_mode g = {0};
  unsigned seed = 1;
  for (int i = 0; i < 4 + 2000; i++) {
    int m = opool_mode_pick(&g);
    seed = seed * 1103515245u + 12345u;
    opool_mode_record(&g, m, 2400000 + (int64_t)((seed >> 8) % 400000)); /* both 2.4-2.8 ms */
  }
  assert_true(g.probes < 2000 / 8);
}

/* ---- sliced convolutions through a session ---- */

static float *rnd(int64_t n, unsigned *seed) {
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    v[i] = (float)((*seed >> 9) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

/* x [N,16,H,W] -> conv3x3 (16->48, pad 1) -> Relu -> c1
 *   c1 -> conv1x1 (48->48) -> + c1 -> c2 (Conv+Add)
 *   c2 -> depthwise 3x3 (group 48, pad 1) -> PRelu (per channel) -> c3
 *   c3 -> conv1x1 (48->20) -> out (a plain graph output, not a multiple of 8) */
static onnx_model *conv_chain(void) {
  mb b;
  mb_init(&b, 13);
  unsigned seed = 7;
  int64_t xd[4] = {-1, 16, 23, 29};
  mb_input(&b, "x", 4, xd);
  int64_t w1d[4] = {48, 16, 3, 3}, b1d[1] = {48}, w2d[4] = {48, 48, 1, 1}, w3d[4] = {48, 1, 3, 3},
          sd[3] = {48, 1, 1}, w4d[4] = {20, 48, 1, 1};
  float *w1 = rnd(48 * 16 * 9, &seed), *b1 = rnd(48, &seed), *w2 = rnd(48 * 48, &seed), *w3 = rnd(48 * 9, &seed),
        *sl = rnd(48, &seed), *w4 = rnd(20 * 48, &seed);
  mb_init_f(&b, "w1", 4, w1d, w1);
  mb_init_f(&b, "b1", 1, b1d, b1);
  mb_init_f(&b, "w2", 4, w2d, w2);
  mb_init_f(&b, "w3", 4, w3d, w3);
  mb_init_f(&b, "slope", 3, sd, sl);
  mb_init_f(&b, "w4", 4, w4d, w4);
  const char *i1[3] = {"x", "w1", "b1"}, *o1 = "a1";
  Onnx__NodeProto *n1 = mb_node(&b, "Conv", "conv1", 3, i1, 1, &o1);
  mb_attr_ints(&b, n1, "pads", 4, (int64_t[]){1, 1, 1, 1});
  const char *or1 = "c1";
  mb_node(&b, "Relu", "relu1", 1, &o1, 1, &or1);
  const char *i2[2] = {"c1", "w2"}, *o2 = "a2";
  mb_node(&b, "Conv", "conv2", 2, i2, 1, &o2);
  const char *ia[2] = {"a2", "c1"}, *oa = "c2";
  mb_node(&b, "Add", "add", 2, ia, 1, &oa);
  const char *i3[2] = {"c2", "w3"}, *o3 = "a3";
  Onnx__NodeProto *n3 = mb_node(&b, "Conv", "conv3", 2, i3, 1, &o3);
  mb_attr_i(&b, n3, "group", 48);
  mb_attr_ints(&b, n3, "pads", 4, (int64_t[]){1, 1, 1, 1});
  const char *ip[2] = {"a3", "slope"}, *op = "c3";
  mb_node(&b, "PRelu", "prelu", 2, ip, 1, &op);
  const char *i4[2] = {"c3", "w4"}, *o4 = "out";
  mb_node(&b, "Conv", "conv4", 2, i4, 1, &o4);
  mb_output(&b, "out");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  mb_done(&b);
  free(w1);
  free(b1);
  free(w2);
  free(w3);
  free(sl);
  free(w4);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  return m;
}

static float *run_chain(onnx_model *m, int threads, const float *x, int64_t N, size_t *n_out, char **prof) {
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = threads, .profile = true, .sub_batch = -1}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {N, 16, 23, 29}, .data = x,
                      .byte_size = (size_t)(N * 16 * 23 * 29) * 4},
                o;
  for (int rep = 0; rep < 3; rep++) {
    cinfer_status *st = onnx_session_run(s, &in, 1, &o);
    if (st) fail_msg("run (%d threads): %s", threads, cinfer_status_message(st));
  }
  *n_out = o.byte_size / 4;
  float *out = malloc(o.byte_size);
  memcpy(out, o.data, o.byte_size);
  if (prof) {
    size_t plen = 0;
    FILE *f = open_memstream(prof, &plen);
    onnx_session_profile_print(s, f);
    fclose(f);
  }
  onnx_session_destroy(s);
  return out;
}

static void test_sliced_convs_equal_one_thread(void **state) {
  (void)state;
  onnx_model *m = conv_chain();
  unsigned seed = 99;
  for (int64_t N = 1; N <= 2; N++) {
    float *x = rnd(N * 16 * 23 * 29, &seed);
    size_t n1, nt;
    float *one = run_chain(m, 1, x, N, &n1, NULL);
    assert_int_equal(n1, (size_t)(N * 20 * 23 * 29));
    for (int T = 2; T <= 3; T++) {
      char *prof = NULL;
      float *many = run_chain(m, T, x, N, &nt, &prof);
      assert_int_equal(n1, nt);
      /* one image: the convs run as slices (N = 2 with the whole batch in one run: the
       * whole primitive, on one thread) */
      if (N == 1 && !strstr(prof, "onednn/")) fail_msg("%d threads: no sliced conv in the profile:\n%s", T, prof);
      for (size_t i = 0; i < n1; i++)
        if (memcmp(&one[i], &many[i], sizeof(float)))
          fail_msg("N=%lld threads %d: element %zu: %.9g vs %.9g (1 thread)", (long long)N, T, i, many[i], one[i]);
      free(prof);
      free(many);
    }
    free(one);
    free(x);
  }
  onnx_model_destroy(m);
}

/* Convs of one channel block (16 channels on nChw16c) split by output rows
 * (conv_row_slices): x [1,8,121,121] -> 1x1 8->16 -> depthwise 3x3 (group 16, pad 1) +
 * Relu -> 3x3 stride 2 16->16 (pad 1) -> 1x1 16->8 -> out. At 2 and 3 threads the output
 * must equal one thread's bit for bit; on an nChw16c host (kern_block() 16) the profile
 * must show row slices ("onednn/<n>r"), on nChw8c ones the same convs split by channels. */
static onnx_model *row_chain(void) {
  mb b;
  mb_init(&b, 13);
  unsigned seed = 11;
  int64_t xd[4] = {1, 8, 121, 121};
  mb_input(&b, "x", 4, xd);
  int64_t w1d[4] = {16, 8, 1, 1}, w2d[4] = {16, 1, 3, 3}, w3d[4] = {16, 16, 3, 3}, w4d[4] = {8, 16, 1, 1}, bd[1] = {16};
  float *w1 = rnd(16 * 8, &seed), *w2 = rnd(16 * 9, &seed), *w3 = rnd(16 * 16 * 9, &seed), *w4 = rnd(8 * 16, &seed),
        *b2 = rnd(16, &seed);
  mb_init_f(&b, "w1", 4, w1d, w1);
  mb_init_f(&b, "w2", 4, w2d, w2);
  mb_init_f(&b, "b2", 1, bd, b2);
  mb_init_f(&b, "w3", 4, w3d, w3);
  mb_init_f(&b, "w4", 4, w4d, w4);
  const char *i1[2] = {"x", "w1"}, *o1 = "c1";
  mb_node(&b, "Conv", "conv1", 2, i1, 1, &o1);
  const char *i2[3] = {"c1", "w2", "b2"}, *o2 = "a2", *or2 = "c2";
  Onnx__NodeProto *n2 = mb_node(&b, "Conv", "dw", 3, i2, 1, &o2);
  mb_attr_i(&b, n2, "group", 16);
  mb_attr_ints(&b, n2, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_node(&b, "Relu", "relu", 1, &o2, 1, &or2);
  const char *i3[2] = {"c2", "w3"}, *o3 = "c3";
  Onnx__NodeProto *n3 = mb_node(&b, "Conv", "conv3", 2, i3, 1, &o3);
  mb_attr_ints(&b, n3, "pads", 4, (int64_t[]){1, 1, 1, 1});
  mb_attr_ints(&b, n3, "strides", 2, (int64_t[]){2, 2});
  const char *i4[2] = {"c3", "w4"}, *o4 = "out";
  mb_node(&b, "Conv", "conv4", 2, i4, 1, &o4);
  mb_output(&b, "out");
  uint8_t *buf;
  size_t len = mb_pack(&b, &buf);
  mb_done(&b);
  free(w1);
  free(w2);
  free(w3);
  free(w4);
  free(b2);
  onnx_model *m;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("load: %s", cinfer_status_message(st));
  return m;
}

static float *run_rows(onnx_model *m, int threads, const float *x, size_t *n_out, char **prof) {
  onnx_session *s;
  assert_null(onnx_session_create(m, &(onnx_options){.threads = threads, .profile = true}, &s));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {1, 8, 121, 121}, .data = x,
                      .byte_size = (size_t)(8 * 121 * 121) * 4},
                o;
  for (int rep = 0; rep < 3; rep++) {
    cinfer_status *st = onnx_session_run(s, &in, 1, &o);
    if (st) fail_msg("run (%d threads): %s", threads, cinfer_status_message(st));
  }
  *n_out = o.byte_size / 4;
  float *out = malloc(o.byte_size);
  memcpy(out, o.data, o.byte_size);
  size_t plen = 0;
  FILE *f = open_memstream(prof, &plen);
  onnx_session_profile_print(s, f);
  fclose(f);
  onnx_session_destroy(s);
  return out;
}

/* whether the profile names a row-sliced conv ("onednn/<digits>r") */
static bool has_row_slices(const char *prof) {
  for (const char *p = strstr(prof, "onednn/"); p; p = strstr(p + 1, "onednn/")) {
    const char *q = p + 7;
    while (*q >= '0' && *q <= '9') q++;
    if (q > p + 7 && *q == 'r') return true;
  }
  return false;
}

static void test_row_sliced_convs_equal_one_thread(void **state) {
  (void)state;
  onnx_model *m = row_chain();
  unsigned seed = 5;
  float *x = rnd(8 * 121 * 121, &seed);
  size_t n1, nt;
  char *p1 = NULL;
  float *one = run_rows(m, 1, x, &n1, &p1);
  assert_int_equal(n1, (size_t)(8 * 61 * 61));
  for (int T = 2; T <= 3; T++) {
    char *prof = NULL;
    float *many = run_rows(m, T, x, &nt, &prof);
    assert_int_equal(n1, nt);
    if (kern_block() == 16 && !has_row_slices(prof)) fail_msg("%d threads: no row-sliced conv:\n%s", T, prof);
    if (!strstr(prof, "onednn/")) fail_msg("%d threads: no sliced conv:\n%s", T, prof);
    for (size_t i = 0; i < n1; i++)
      if (memcmp(&one[i], &many[i], sizeof(float)))
        fail_msg("threads %d: element %zu: %.9g vs %.9g (1 thread)", T, i, many[i], one[i]);
    free(prof);
    free(many);
  }
  free(p1);
  free(one);
  free(x);
  onnx_model_destroy(m);
}

/* conv_chain at 2 threads forced to `mode` (CINFER_ONNX_THREAD_MODE, read at session
 * creation), sub-batching automatic (N > 1: row groups on the workers), 5 runs */
static float *run_mode(onnx_model *m, int threads, const char *mode, const float *x, int64_t N, char **prof) {
  if (mode) setenv("CINFER_ONNX_THREAD_MODE", mode, 1);
  onnx_session *s;
  cinfer_status *cst = onnx_session_create(m, &(onnx_options){.threads = threads, .profile = true}, &s);
  unsetenv("CINFER_ONNX_THREAD_MODE");
  if (cst) fail_msg("create: %s", cinfer_status_message(cst));
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 4, .shape = {N, 16, 23, 29}, .data = x,
                      .byte_size = (size_t)(N * 16 * 23 * 29) * 4},
                o;
  for (int rep = 0; rep < 5; rep++) {
    cinfer_status *st = onnx_session_run(s, &in, 1, &o);
    if (st) fail_msg("run (%d threads, %s): %s", threads, mode ? mode : "auto", cinfer_status_message(st));
  }
  assert_int_equal(o.byte_size, (size_t)(N * 20 * 23 * 29) * 4);
  float *out = malloc(o.byte_size);
  memcpy(out, o.data, o.byte_size);
  size_t plen = 0;
  FILE *f = open_memstream(prof, &plen);
  onnx_session_profile_print(s, f);
  fclose(f);
  onnx_session_destroy(s);
  return out;
}

static void test_alone_equals_pool(void **state) {
  (void)state;
  onnx_model *m = conv_chain();
  unsigned seed = 5;
  for (int64_t N = 1; N <= 3; N += 2) {
    float *x = rnd(N * 16 * 23 * 29, &seed);
    char *p1 = NULL, *pp = NULL, *pa = NULL, *pq = NULL;
    float *one = run_mode(m, 1, NULL, x, N, &p1), *pool = run_mode(m, 2, "pool", x, N, &pp),
          *alone = run_mode(m, 2, "alone", x, N, &pa), *aut = run_mode(m, 2, NULL, x, N, &pq);
    size_t n = (size_t)(N * 20 * 23 * 29);
    assert_memory_equal(one, pool, n * sizeof(float));
    assert_memory_equal(one, alone, n * sizeof(float));
    assert_memory_equal(one, aut, n * sizeof(float));
    /* alone: no split operator, no row group handed to the worker */
    if (!strstr(pa, "thread pool: 2 threads; 0 of ")) fail_msg("N=%lld alone: work handed to workers:\n%s", (long long)N, pa);
    if (strstr(pp, "thread pool: 2 threads; 0 of ")) fail_msg("N=%lld pool: nothing handed to workers:\n%s", (long long)N, pp);
    if (N == 1 && !strstr(pp, "onednn/")) fail_msg("pool: no sliced conv:\n%s", pp);
    /* measured: both modes were run (learning), the run that built the plan not timed (at
     * N = 3 the worker's plan is built in the first run the worker takes a row of) */
    const char *ml = strstr(pq, "pool or alone (measured on ");
    unsigned long long rp = 0, ra = 0;
    if (!ml || !(ml = strstr(ml, "): ")) || sscanf(ml, "): %llu runs with the pool", &rp) != 1 ||
        !(ml = strstr(ml, "), ")) || sscanf(ml, "), %llu alone", &ra) != 1 || rp < 1 || ra < 1 || rp + ra > 4)
      fail_msg("N=%lld auto: not both modes timed, at most 4 runs:\n%s", (long long)N, pq);
    free(one);
    free(pool);
    free(alone);
    free(aut);
    free(p1);
    free(pp);
    free(pa);
    free(pq);
    free(x);
  }
  /* a bad setting fails the session with the variable named */
  setenv("CINFER_ONNX_THREAD_MODE", "fast", 1);
  onnx_session *s = NULL;
  cinfer_status *st = onnx_session_create(m, &(onnx_options){.threads = 2}, &s);
  unsetenv("CINFER_ONNX_THREAD_MODE");
  assert_non_null(st);
  assert_non_null(strstr(cinfer_status_message(st), "CINFER_ONNX_THREAD_MODE"));
  cinfer_status_free(st);
  assert_null(s);
  onnx_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_chunk_once),
      cmocka_unit_test(test_current_pool),
      cmocka_unit_test(test_sleep_between_inferences),
      cmocka_unit_test(test_contention_guard),
      cmocka_unit_test(test_set_alone),
      cmocka_unit_test(test_mode_chooser),
      cmocka_unit_test(test_alone_equals_pool),
      cmocka_unit_test(test_sliced_convs_equal_one_thread),
      cmocka_unit_test(test_row_sliced_convs_equal_one_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
