/* Engine-level priorities (llm_sampling.priority, lower first) on the real SmolLM2 GGUF:
 *  - a full engine admits its waiting sequences by priority, then arrival: a high-priority
 *    request submitted after low-priority ones starts before them;
 *  - under KV pressure the lowest-priority running sequence is preempted, even when it was
 *    admitted before the higher-priority one (the previous rule, most recently admitted
 *    first, would have preempted the latter); the high-priority sequence decodes one token
 *    every step from its first to its last, the low-priority one pauses and is recomputed;
 *  - a preempted sequence waits ahead of its own class but behind a higher one.
 * The engine runs with manual_step: each llm_engine_step is one scheduling step and the
 * events of a step arrive during the call, so the order is exact and nothing is timed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backends/llm/llm.h"

#ifndef LLM_BINARY_DIR
#define LLM_BINARY_DIR "build"
#endif
#ifndef LLM_SOURCE_DIR
#define LLM_SOURCE_DIR "."
#endif

static char g_model[4096];

static const char *model_path(void) {
  if (g_model[0]) return g_model;
  const char *env = getenv("CINFER_SMOLLM2_GGUF");
  if (env) {
    snprintf(g_model, sizeof g_model, "%s", env);
    return g_model;
  }
  FILE *p = popen(LLM_SOURCE_DIR "/scripts/find_smollm2.sh \"" LLM_BINARY_DIR "\"", "r");
  if (p && fgets(g_model, sizeof g_model, p)) g_model[strcspn(g_model, "\n")] = 0;
  if (p) pclose(p);
  if (!g_model[0]) fail_msg("SmolLM2 GGUF not found: run scripts/setup.sh or set CINFER_SMOLLM2_GGUF");
  return g_model;
}

static int g_step;   /* the step being run (events arrive inside llm_engine_step) */
static int g_order;  /* first tokens seen so far */

typedef struct {
  int steps[256];    /* the step of each token event */
  int n_tokens;
  int first_rank;    /* 1 + the first tokens of other sequences seen before this one's, 0 = none yet */
  int n_final;
  llm_finish finish;
} track;

static void on_ev(void *user, const llm_event *ev) {
  track *t = user;
  assert_int_equal(t->n_final, 0);
  if (ev->token >= 0) {
    if (!t->first_rank) t->first_rank = ++g_order;
    if (t->n_tokens < 256) t->steps[t->n_tokens++] = g_step;
  }
  if (ev->finish != LLM_FINISH_NONE) {
    t->n_final++;
    t->finish = ev->finish;
  }
}

static llm_engine *make_engine(int kv_blocks, int max_seqs) {
  llm_engine_opts o = {.threads = 1, .ctx_len = 256, .kv_blocks = kv_blocks, .block_size = 16,
                       .max_seqs = max_seqs, .manual_step = true, .no_prefix_cache = true};
  llm_engine *e;
  cinfer_status *st = llm_engine_create(model_path(), &o, &e);
  if (st) fail_msg("engine: %s", cinfer_status_message(st));
  return e;
}

static void submit(llm_engine *e, int first_id, int n_prompt, int max_tokens, uint32_t priority, track *t) {
  int32_t ids[64];
  for (int i = 0; i < n_prompt; i++) ids[i] = first_id + i;
  memset(t, 0, sizeof *t);
  llm_sampling sp;
  llm_sampling_default(&sp);
  sp.temperature = 0;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  sp.priority = priority;
  llm_request r = {.tokens = ids, .n_tokens = (size_t)n_prompt, .sampling = sp};
  uint64_t id;
  cinfer_status *st = llm_engine_submit(e, &r, on_ev, t, &id);
  if (st) fail_msg("submit: %s", cinfer_status_message(st));
}

static int step(llm_engine *e) {
  g_step++;
  return llm_engine_step(e);
}

static void run_all(llm_engine *e) {
  for (int i = 0; i < 20000 && step(e) > 0; i++) {
  }
  llm_engine_stats st;
  llm_engine_get_stats(e, &st);
  assert_int_equal(st.running, 0);
  assert_int_equal(st.waiting, 0);
  assert_int_equal(st.kv_blocks_used, 0);
}

static void test_full_engine_admits_by_priority_then_arrival(void **s) {
  (void)s;
  llm_engine *e = make_engine(64, 1);
  g_order = 0;
  track a, b, c, d, f;
  submit(e, 100, 8, 6, 2, &a);
  step(e); /* a runs: the engine (max_seqs 1) is full */
  assert_int_equal(a.first_rank, 1);
  submit(e, 200, 8, 3, 3, &b); /* low priority, first to arrive */
  submit(e, 300, 8, 3, 3, &c);
  submit(e, 400, 8, 3, 1, &d); /* high priority, after them */
  submit(e, 500, 8, 3, 2, &f); /* a's level, last */
  llm_engine_stats st;
  llm_engine_get_stats(e, &st);
  assert_int_equal(st.running, 1);
  assert_int_equal(st.waiting, 4);
  run_all(e);
  /* served: a (already running), then d (1), f (2), b and c (3, by arrival) */
  assert_int_equal(d.first_rank, 2);
  assert_int_equal(f.first_rank, 3);
  assert_int_equal(b.first_rank, 4);
  assert_int_equal(c.first_rank, 5);
  track *all[] = {&a, &b, &c, &d, &f};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(all[i]->n_final, 1);
    assert_int_equal(all[i]->finish, LLM_FINISH_LENGTH);
  }
  /* one at a time: d started only after a ended */
  assert_true(d.steps[0] > a.steps[a.n_tokens - 1]);
  assert_true(b.steps[0] > f.steps[f.n_tokens - 1]);
  llm_engine_destroy(e);
}

static bool has_gap(const track *t) {
  for (int i = 1; i < t->n_tokens; i++)
    if (t->steps[i] != t->steps[i - 1] + 1) return true;
  return false;
}

static void test_kv_pressure_preempts_the_lowest_priority_first(void **s) {
  (void)s;
  /* 6 blocks of 16 = 96 tokens; each sequence grows to 20 + 60 = 80 tokens (5 blocks): both
   * cannot run to the end together, one alone can */
  llm_engine *e = make_engine(6, 4);
  g_order = 0;
  track lo, hi;
  submit(e, 100, 20, 60, 5, &lo); /* admitted first, low priority */
  step(e);
  assert_int_equal(lo.n_tokens, 1);
  submit(e, 300, 20, 60, 1, &hi); /* admitted second, high priority */
  run_all(e);
  llm_engine_stats st;
  llm_engine_get_stats(e, &st);
  assert_true(st.preemptions_total > 0);
  assert_int_equal(hi.n_tokens, 60);
  assert_int_equal(lo.n_tokens, 60);
  assert_int_equal(hi.finish, LLM_FINISH_LENGTH);
  assert_int_equal(lo.finish, LLM_FINISH_LENGTH);
  /* the high-priority sequence was never preempted: one token every step */
  assert_false(has_gap(&hi));
  assert_int_equal(hi.steps[59] - hi.steps[0], 59);
  /* the low-priority one was: it paused while hi ran */
  assert_true(has_gap(&lo));
  llm_engine_destroy(e);
}

static void test_preempted_sequence_waits_behind_a_higher_priority(void **s) {
  (void)s;
  /* lo runs and is preempted by mid's growth; hi arrives while lo waits, and a same-level
   * newcomer lo2: after the preemption the order is hi (higher level), lo (admitted before
   * lo2), lo2 */
  llm_engine *e = make_engine(6, 2);
  g_order = 0;
  track lo, mid, hi, lo2;
  submit(e, 100, 20, 60, 5, &lo);
  step(e);
  submit(e, 300, 20, 60, 3, &mid);
  /* run until lo is preempted (a step without a token for lo while mid runs) */
  int guard = 0;
  llm_engine_stats st;
  do {
    step(e);
    llm_engine_get_stats(e, &st);
  } while (st.preemptions_total == 0 && ++guard < 1000);
  assert_true(st.preemptions_total > 0);
  assert_int_equal(st.running, 1); /* mid */
  assert_true(lo.n_tokens < 60);
  submit(e, 500, 20, 4, 5, &lo2);
  submit(e, 700, 20, 4, 1, &hi);
  run_all(e);
  /* hi (level 1) got its first token before lo resumed and before lo2 started */
  int lo_resume = 0;
  for (int i = 1; i < lo.n_tokens; i++)
    if (lo.steps[i] != lo.steps[i - 1] + 1) lo_resume = lo.steps[i];
  assert_true(lo_resume > 0);
  assert_true(hi.steps[0] < lo_resume); /* behind lo it would have waited for mid's end */
  assert_true(lo2.steps[0] >= lo_resume);
  assert_false(has_gap(&mid));
  assert_int_equal(lo.n_tokens, 60);
  assert_int_equal(lo2.n_tokens, 4);
  assert_int_equal(hi.n_tokens, 4);
  llm_engine_destroy(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_engine_admits_by_priority_then_arrival),
      cmocka_unit_test(test_kv_pressure_preempts_the_lowest_priority_first),
      cmocka_unit_test(test_preempted_sequence_waits_behind_a_higher_priority),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
