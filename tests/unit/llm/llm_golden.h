/* llm_golden.h: shared by the LLM engine tests (test_engine.c, test_gemma3.c): fixture
 * reading, event collection and the greedy-ids check against llama.cpp. */
#ifndef CINFER_TEST_LLM_GOLDEN_H
#define CINFER_TEST_LLM_GOLDEN_H
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/llm/llm.h"

#ifndef LLM_TEST_DATA
#define LLM_TEST_DATA "tests/data/llm"
#endif
#ifndef LLM_BINARY_DIR
#define LLM_BINARY_DIR "build"
#endif
#ifndef LLM_SOURCE_DIR
#define LLM_SOURCE_DIR "."
#endif

/* ---- event collection ---- */
typedef struct {
  int32_t ids[512];
  int n_ids;
  float lp[512];
  int32_t top_id[512][5];
  float top_lp[512][5];
  int n_top[512];
  char text[8192];
  size_t text_n;
  int n_final;
  llm_event final;
  bool utf8_ok;
} collect;

typedef struct {
  int32_t *prompt, *want;
  int n_prompt, n_want;
  const char *name;
  const cJSON *top; /* per position: [[id, logprob] x 5] from llama.cpp */
} gcase;

/* $ENV, else the first line printed by scripts/SCRIPT (run with the build dir); fails the
 * test naming WHAT when neither gives a path. BUF caches the answer. */
const char *golden_model_path(char *buf, size_t cap, const char *env, const char *script, const char *what);
/* LLM_TEST_DATA/NAME ($CINFER_LLM_TEST_DATA overrides the folder) parsed; fails the test if absent */
cJSON *load_json(const char *name);
int32_t *json_ids(const cJSON *arr, int *n);
/* the engine's event callback; USER is a collect */
void on_ev(void *user, const llm_event *ev);
/* steps a manual_step engine until idle and checks that nothing is left running or held */
void run_all(llm_engine *e);
llm_sampling greedy(int n);
uint64_t submit_ids(llm_engine *e, const int32_t *ids, int n, llm_sampling sp, collect *c);
int load_golden_file(const char *file, gcase *gc, cJSON **keep);
void free_golden(gcase *gc, int n, cJSON *j);
double ref_logprob(const cJSON *row, int32_t id, bool *found);
/* greedy ids equal to llama.cpp's up to a near tie (see llm_golden.c); counts positions */
void check_case(const gcase *g, const collect *c);
extern int g_total_positions, g_exact_positions;
#endif
