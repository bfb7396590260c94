/* test_ensemble.c: ensembles in the server core (src/server/ensemble.c) through cinfer.h:
 * a chain and a fan-out/fan-in of identity steps, requested outputs (only the steps they
 * need run), a step output of N
 * rows feeding a batching model as a batch of N (and a batch of 0 skipping it), the load
 * checks (unknown step, cycle, dtype and shape mismatch, unmapped input, ensembles that
 * contain each other), explicit mode loading the steps and unloading the ensemble with a
 * step, a failing step named in the error, cancellation reaching a queued child, the
 * ensemble's own statistics, a preserve_ordering step used twice (no deadlock), and a
 * decoupled last step streaming through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "server_test_util.h"

/* An identity model: FP32 INPUT0 -> OUTPUT0 (and INPUT1 -> OUTPUT1 with two). */
static void id_model(const char *repo, const char *name, const char *backend, int max_batch,
                     const char *dims, int n, const char *extra) {
  char text[4096];
  size_t o = (size_t)snprintf(text, sizeof text, "name: \"%s\"\nbackend: \"%s\"\nmax_batch_size: %d\ninput [",
                              name, backend, max_batch);
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(text + o, sizeof text - o, "%s{ name: \"INPUT%d\" data_type: TYPE_FP32 dims: %s }",
                          i ? "," : "", i, dims);
  o += (size_t)snprintf(text + o, sizeof text - o, "]\noutput [");
  for (int i = 0; i < n; i++)
    o += (size_t)snprintf(text + o, sizeof text - o, "%s{ name: \"OUTPUT%d\" data_type: TYPE_FP32 dims: %s }",
                          i ? "," : "", i, dims);
  snprintf(text + o, sizeof text - o, "]\n%s", extra ? extra : "");
  tu_model(repo, name, 1, text);
}

static void ens_model(const char *repo, const char *name, const char *text) {
  char full[8192];
  snprintf(full, sizeof full, "name: \"%s\"\nplatform: \"ensemble\"\n%s", name, text);
  tu_model(repo, name, 1, full);
}

/* A two-step chain a -> b, FP32 [-1] with batching 8. */
static const char *const CHAIN =
    "max_batch_size: 8\n"
    "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "ensemble_scheduling { step [\n"
    "  { model_name: \"a\" model_version: -1 input_map { key: \"INPUT0\" value: \"IN\" }\n"
    "    output_map { key: \"OUTPUT0\" value: \"mid\" } },\n"
    "  { model_name: \"b\" model_version: -1 input_map { key: \"INPUT0\" value: \"mid\" }\n"
    "    output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n";

/* a -> ds (decoupled) */
static const char *const CHAIN_DS =
    "max_batch_size: 8\n"
    "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "ensemble_scheduling { step [\n"
    "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"mid\" } },\n"
    "  { model_name: \"ds\" input_map { key: \"INPUT0\" value: \"mid\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n";

typedef struct outs {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  cinfer_code code;
  char msg[1024];
  uint32_t n;
  char names[4][32];
  int ndim[4];
  int64_t shape[4][4];
  float v[4][16];
} outs;

static void outs_cb(void *user, cinfer_response *resp, uint32_t flags) {
  outs *o = user;
  const cinfer_status *e = cinfer_response_error(resp);
  pthread_mutex_lock(&o->mu);
  o->code = cinfer_status_code(e);
  snprintf(o->msg, sizeof o->msg, "%s", cinfer_status_message(e));
  for (uint32_t i = 0; !e && i < cinfer_response_output_count(resp) && i < 4; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    snprintf(o->names[i], sizeof o->names[i], "%s", t->name);
    o->ndim[i] = t->ndim;
    for (int d = 0; d < t->ndim && d < 4; d++) o->shape[i][d] = t->shape[d];
    size_t nf = t->byte_size / 4 < 16 ? t->byte_size / 4 : 16;
    memcpy(o->v[i], t->data, nf * 4);
    o->n = i + 1;
  }
  if (flags & CINFER_RESPONSE_FINAL) {
    o->done = true;
    pthread_cond_broadcast(&o->cv);
  }
  pthread_mutex_unlock(&o->mu);
  cinfer_response_free(resp);
}

static bool outs_wait(outs *o) {
  struct timespec dl = tu_deadline();
  pthread_mutex_lock(&o->mu);
  int rc = 0;
  while (!o->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&o->cv, &o->mu, &dl);
  bool ok = o->done;
  pthread_mutex_unlock(&o->mu);
  return ok;
}

/* Submits inputs IN0.. (FP32, shape shp, values from data) to `name` requesting `want`
 * (NULL-terminated, NULL = all). Returns the request (caller's reference) or NULL with
 * *st set. */
static cinfer_request *submit(cinfer_server *s, const char *name, const char *const *in_names, int n_in,
                              const float *data, int ndim, const int64_t *shp,
                              const char *const *want, outs *o, cinfer_status **st) {
  memset(o, 0, sizeof *o);
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->cv, NULL);
  cinfer_model *m = NULL;
  if ((*st = cinfer_server_model_acquire(s, name, -1, &m))) return NULL;
  cinfer_request *r = NULL;
  *st = cinfer_request_create(m, &r);
  cinfer_model_release(m);
  if (*st) return NULL;
  int64_t el = cinfer_shape_elements(shp, ndim);
  for (int i = 0; i < n_in && !*st; i++) {
    cinfer_tensor t = {.name = in_names[i], .dtype = CINFER_TYPE_FP32, .ndim = ndim,
                       .data = data, .byte_size = (size_t)el * 4};
    memcpy(t.shape, shp, sizeof(int64_t) * (size_t)ndim);
    *st = cinfer_request_add_input(r, &t);
  }
  for (int i = 0; want && want[i] && !*st; i++) *st = cinfer_request_add_output(r, want[i]);
  if (!*st) {
    cinfer_request_set_callback(r, outs_cb, o);
    *st = cinfer_server_infer_async(s, r);
  }
  if (*st) {
    cinfer_request_release(r);
    return NULL;
  }
  return r;
}

/* Synchronous form: fails the test when submission fails. */
static void infer(cinfer_server *s, const char *name, const char *const *in_names, int n_in,
                  const float *data, int ndim, const int64_t *shp, const char *const *want, outs *o) {
  cinfer_status *st;
  cinfer_request *r = submit(s, name, in_names, n_in, data, ndim, shp, want, o, &st);
  if (!r) fail_msg("submit to '%s': %s", name, cinfer_status_message(st));
  assert_true(outs_wait(o));
  cinfer_request_release(r);
}

static const char *const IN1[] = {"IN"};

static bool metrics_has_model(cinfer_server *s, const char *name) {
  char *t = NULL, needle[256];
  size_t n = 0;
  assert_null(cinfer_server_metrics_text(s, &t, &n));
  snprintf(needle, sizeof needle, "cinfer_request_success_total{model=\"%s\"", name);
  bool has = strstr(t, needle) != NULL;
  free(t);
  return has;
}

static void stats_of(cinfer_server *s, const char *name, cinfer_model_stats *out) {
  cinfer_model_stats *ms;
  size_t n;
  cinfer_status *st = cinfer_server_model_stats(s, name, -1, &ms, &n);
  if (st) fail_msg("stats of '%s': %s", name, cinfer_status_message(st));
  assert_int_equal(n, 1);
  *out = ms[0];
  free(ms);
}

static void test_chain(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "a", "identity", 8, "[ -1 ]", 1, NULL);
  id_model(repo, "b", "identity", 8, "[ -1 ]", 1, NULL);
  ens_model(repo, "e", CHAIN);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  assert_string_equal(tu_state(s, "e", 1, NULL, 0), "READY");
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t shp[2] = {2, 3};
  outs o;
  infer(s, "e", IN1, 1, x, 2, shp, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.n, 1);
  assert_string_equal(o.names[0], "OUT");
  assert_int_equal(o.ndim[0], 2);
  assert_int_equal(o.shape[0][0], 2);
  assert_int_equal(o.shape[0][1], 3);
  for (int i = 0; i < 6; i++) assert_true(o.v[0][i] == x[i]);
  /* Statistics: the ensemble's own, and each step's from its child request. */
  cinfer_model_stats es, as, bs;
  stats_of(s, "e", &es);
  stats_of(s, "a", &as);
  stats_of(s, "b", &bs);
  assert_int_equal(es.success.count, 1);
  assert_int_equal(es.inference_count, 2);
  assert_int_equal(as.success.count, 1);
  assert_int_equal(as.inference_count, 2);
  assert_int_equal(bs.success.count, 1);
  /* A bad request to the ensemble is refused at add_input, against the ensemble's config. */
  cinfer_status *st;
  int64_t bad[1] = {3};
  assert_null(submit(s, "e", IN1, 1, x, 1, bad, NULL, &o, &st));
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_non_null(strstr(cinfer_status_message(st), "model 'e'"));
  cinfer_status_free(st);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* fan-out: a's output feeds b and c; fan-in: d reads both; the ensemble returns d's two
 * outputs and c's, and a request may ask for a subset. */
static void test_fan_out_fan_in(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "a", "identity", 0, "[ 4 ]", 1, NULL);
  id_model(repo, "b", "identity", 0, "[ 4 ]", 1, NULL);
  id_model(repo, "c", "identity", 0, "[ 4 ]", 1, NULL);
  id_model(repo, "d", "identity", 0, "[ 4 ]", 2, NULL);
  ens_model(repo, "e",
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
            "output [ { name: \"X\" data_type: TYPE_FP32 dims: [ 4 ] },\n"
            "         { name: \"Y\" data_type: TYPE_FP32 dims: [ 4 ] },\n"
            "         { name: \"Z\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"d\" input_map [ { key: \"INPUT0\" value: \"tb\" }, { key: \"INPUT1\" value: \"Z\" } ]\n"
            "    output_map [ { key: \"OUTPUT0\" value: \"X\" }, { key: \"OUTPUT1\" value: \"Y\" } ] },\n"
            "  { model_name: \"b\" input_map { key: \"INPUT0\" value: \"ta\" } output_map { key: \"OUTPUT0\" value: \"tb\" } },\n"
            "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"ta\" } },\n"
            "  { model_name: \"c\" input_map { key: \"INPUT0\" value: \"ta\" } output_map { key: \"OUTPUT0\" value: \"Z\" } } ] }\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  char reason[512] = "";
  if (strcmp(tu_state(s, "e", 1, reason, sizeof reason), "READY")) fail_msg("e: %s", reason);
  float x[4] = {7, 8, 9, 10};
  int64_t shp[1] = {4};
  outs o;
  infer(s, "e", IN1, 1, x, 1, shp, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.n, 3);
  assert_string_equal(o.names[0], "X");
  assert_string_equal(o.names[1], "Y");
  assert_string_equal(o.names[2], "Z");
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 4; i++) assert_true(o.v[k][i] == x[i]);
  const char *const want[] = {"Y", NULL};
  infer(s, "e", IN1, 1, x, 1, shp, want, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.n, 1);
  assert_string_equal(o.names[0], "Y");
  /* Only the steps needed for the requested outputs run (Triton): Z needs a and c. */
  const char *const want_z[] = {"Z", NULL};
  infer(s, "e", IN1, 1, x, 1, shp, want_z, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.n, 1);
  assert_string_equal(o.names[0], "Z");
  for (int i = 0; i < 4; i++) assert_true(o.v[0][i] == x[i]);
  cinfer_model_stats as, bs, cs, ds;
  stats_of(s, "a", &as);
  stats_of(s, "b", &bs);
  stats_of(s, "c", &cs);
  stats_of(s, "d", &ds);
  assert_int_equal(as.success.count, 3);
  assert_int_equal(cs.success.count, 3);
  assert_int_equal(bs.success.count, 2);
  assert_int_equal(ds.success.count, 2);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* A non-batching step's output [N, 2] feeds a batching model as a batch of N (one
 * execution of N rows); N = 0 skips the batching step, its output is [0, 2]. */
static void test_rows_feed_a_batch(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "crop", "identity", 0, "[ -1, 2 ]", 1, NULL);
  id_model(repo, "attr", "identity", 16, "[ 2 ]", 1, "dynamic_batching { }\n");
  ens_model(repo, "e",
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"crop\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"faces\" } },\n"
            "  { model_name: \"attr\" input_map { key: \"INPUT0\" value: \"faces\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  char reason[512] = "";
  if (strcmp(tu_state(s, "e", 1, reason, sizeof reason), "READY")) fail_msg("e: %s", reason);
  float x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  int64_t shp[2] = {5, 2};
  outs o;
  infer(s, "e", IN1, 1, x, 2, shp, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.shape[0][0], 5);
  for (int i = 0; i < 10; i++) assert_true(o.v[0][i] == x[i]);
  cinfer_model_stats st;
  stats_of(s, "attr", &st);
  assert_int_equal(st.inference_count, 5);
  assert_int_equal(st.execution_count, 1);
  int64_t zero[2] = {0, 2};
  infer(s, "e", IN1, 1, x, 2, zero, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.n, 1);
  assert_int_equal(o.ndim[0], 2);
  assert_int_equal(o.shape[0][0], 0);
  assert_int_equal(o.shape[0][1], 2);
  stats_of(s, "attr", &st);
  assert_int_equal(st.execution_count, 1); /* not run for no rows */
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* Triton's batch / non-batch conversion: a non-batching ensemble's [3] feeds a batching
 * step as [1, 3] and comes back as [3]; a batching ensemble's [1, 3] feeds a
 * non-batching step whose dims are [3] as [3] and comes back as [1, 3]. */
static void test_batch_conversion(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "nop", "identity", 1024, "[ -1 ]", 1, NULL);
  id_model(repo, "flat", "identity", 0, "[ 3 ]", 1, NULL);
  ens_model(repo, "e_nb",
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "ensemble_scheduling { step [ { model_name: \"nop\" input_map { key: \"INPUT0\" value: \"IN\" }"
            " output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  ens_model(repo, "e_b",
            "max_batch_size: 1\n"
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 3 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 3 ] } ]\n"
            "ensemble_scheduling { step [ { model_name: \"flat\" input_map { key: \"INPUT0\" value: \"IN\" }"
            " output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  char reason[512] = "";
  if (strcmp(tu_state(s, "e_nb", 1, reason, sizeof reason), "READY")) fail_msg("e_nb: %s", reason);
  if (strcmp(tu_state(s, "e_b", 1, reason, sizeof reason), "READY")) fail_msg("e_b: %s", reason);
  float x[3] = {1, 2, 3};
  int64_t s1[1] = {3}, s2[2] = {1, 3};
  outs o;
  infer(s, "e_nb", IN1, 1, x, 1, s1, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.ndim[0], 1);
  assert_int_equal(o.shape[0][0], 3);
  assert_true(o.v[0][2] == 3);
  cinfer_model_stats st;
  stats_of(s, "nop", &st);
  assert_int_equal(st.inference_count, 1); /* one row of [3] */
  infer(s, "e_b", IN1, 1, x, 2, s2, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_int_equal(o.ndim[0], 2);
  assert_int_equal(o.shape[0][0], 1);
  assert_int_equal(o.shape[0][1], 3);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* Each broken ensemble fails its load with a reason naming what is wrong; a good one
 * beside them loads. */
static void test_load_checks(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "a", "identity", 8, "[ -1 ]", 1, NULL);
  id_model(repo, "b", "identity", 8, "[ -1 ]", 1, NULL);
  id_model(repo, "i4", "identity", 8, "[ 4 ]", 1, NULL);
  id_model(repo, "nb", "identity", 2, "[ -1 ]", 1, NULL);
  tu_model(repo, "i32", 1,
           "name: \"i32\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
           "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
           "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n");
  const char *io = "max_batch_size: 8\n"
                   "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
                   "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n";
  char t[4096];
#define STEP(m, i, o) "{ model_name: \"" m "\" input_map { key: \"INPUT0\" value: \"" i "\" } output_map { key: \"OUTPUT0\" value: \"" o "\" } }"
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("nosuch", "IN", "OUT") " ] }\n", io);
  ens_model(repo, "e_unknown", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("a", "IN", "OUT") ", " STEP("a", "y", "x") ", "
           STEP("b", "x", "y") " ] }\n", io);
  ens_model(repo, "e_cycle", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("a", "IN", "m") ", " STEP("i32", "m", "OUT") " ] }\n", io);
  ens_model(repo, "e_dtype", t);
  snprintf(t, sizeof t, "max_batch_size: 8\ninput [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 3 ] } ]\n"
           "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
           "ensemble_scheduling { step [ " STEP("i4", "IN", "OUT") " ] }\n");
  ens_model(repo, "e_shape", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ { model_name: \"a\" input_map { key: \"NOPE\" value: \"IN\" } "
           "output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n", io);
  ens_model(repo, "e_badin", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("nb", "IN", "OUT") " ] }\n", io);
  ens_model(repo, "e_batch", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ { model_name: \"a\" model_namespace: \"ns1\" "
           "input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n", io);
  ens_model(repo, "e_ns", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("e_loop2", "IN", "OUT") " ] }\n", io);
  ens_model(repo, "e_loop1", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("e_loop1", "IN", "OUT") " ] }\n", io);
  ens_model(repo, "e_loop2", t);
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ " STEP("a", "IN", "OUT") " ] }\n", io);
  ens_model(repo, "e_good", t);
  /* an ensemble of an ensemble */
  snprintf(t, sizeof t, "%sensemble_scheduling { step [ { model_name: \"e_good\" input_map { key: \"IN\" value: \"IN\" } "
           "output_map { key: \"OUT\" value: \"m\" } }, " STEP("b", "m", "OUT") " ] }\n", io);
  ens_model(repo, "e_nested", t);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  struct { const char *name, *want; } cases[] = {
      {"e_unknown", "ensemble 'e_unknown' depends on 'nosuch' (step 0)"},
      {"e_cycle", "has a cycle"},
      {"e_dtype", "inconsistent data type: FP32 is inferred from model 'a' while INT32"},
      {"e_shape", "inconsistent shape: [-1,3] is inferred from model 'e_shape' while [-1,4]"},
      {"e_badin", "'NOPE', which is not an input of model 'a'"},
      {"e_batch", "allows maximum batch size 8, but it contains model 'nb'"},
      {"e_ns", "model_namespace 'ns1' is not implemented"},
      {"e_loop1", "circular dependency between ensembles"},
      {"e_loop2", "circular dependency between ensembles"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char reason[1024] = "";
    const char *stt = tu_state(s, cases[i].name, 1, reason, sizeof reason);
    if (strcmp(stt, "UNAVAILABLE") || !strstr(reason, cases[i].want))
      fail_msg("%s: state %s, reason '%s' (want '%s')", cases[i].name, stt, reason, cases[i].want);
  }
  char reason[1024] = "";
  if (strcmp(tu_state(s, "e_unknown", 1, reason, sizeof reason), "UNAVAILABLE") ||
      !strstr(reason, "no such model in the repository"))
    fail_msg("e_unknown: %s", reason);
  if (strcmp(tu_state(s, "e_cycle", 1, reason, sizeof reason), "UNAVAILABLE") ||
      !strstr(reason, "step 1 ('a') reads 'y' from step 2 ('b'), which reads 'x' from step 1 ('a')"))
    fail_msg("e_cycle: %s", reason);
  assert_string_equal(tu_state(s, "e_good", 1, NULL, 0), "READY");
  if (strcmp(tu_state(s, "e_nested", 1, reason, sizeof reason), "READY")) fail_msg("e_nested: %s", reason);
  float x[2] = {3, 4};
  int64_t shp[2] = {1, 2};
  outs o;
  infer(s, "e_nested", IN1, 1, x, 2, shp, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_true(o.v[0][0] == 3 && o.v[0][1] == 4);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
#undef STEP
}

/* Explicit mode: loading the ensemble loads its steps (Triton); unloading a step makes the
 * ensemble unavailable with the reason; loading it again brings both back. */
static void test_explicit_dependencies(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "a", "identity", 8, "[ -1 ]", 1, NULL);
  id_model(repo, "b", "identity", 8, "[ -1 ]", 1, NULL);
  ens_model(repo, "e", CHAIN);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_string_equal(tu_state(s, "a", -1, NULL, 0), "UNAVAILABLE");
  assert_null(cinfer_server_load_model(s, "e", NULL));
  assert_string_equal(tu_state(s, "a", 1, NULL, 0), "READY");
  assert_string_equal(tu_state(s, "b", 1, NULL, 0), "READY");
  assert_string_equal(tu_state(s, "e", 1, NULL, 0), "READY");
  assert_null(cinfer_server_unload_model(s, "b"));
  cinfer_model *m = NULL;
  cinfer_status *st = cinfer_server_model_acquire(s, "e", -1, &m);
  assert_non_null(st);
  assert_int_equal(cinfer_status_code(st), CINFER_UNAVAILABLE);
  if (!strstr(cinfer_status_message(st), "depends on 'b'")) fail_msg("%s", cinfer_status_message(st));
  cinfer_status_free(st);
  assert_string_equal(tu_state(s, "a", 1, NULL, 0), "READY"); /* the other step stays */
  assert_null(cinfer_server_load_model(s, "e", NULL));
  float x[2] = {5, 6};
  int64_t shp[2] = {1, 2};
  outs o;
  infer(s, "e", IN1, 1, x, 2, shp, NULL, &o);
  if (o.code) fail_msg("%s", o.msg);
  assert_true(o.v[0][0] == 5 && o.v[0][1] == 6);
  /* Unloading the ensemble leaves its steps loaded. */
  assert_null(cinfer_server_unload_model(s, "e"));
  assert_null(cinfer_server_model_acquire(s, "a", -1, &m));
  cinfer_model_release(m);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* A step that refuses its input fails the ensemble request with the step named; the next
 * request is unharmed. */
static void test_step_failure(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "a", "identity", 0, "[ -1 ]", 1, NULL);
  id_model(repo, "b", "identity", 0, "[ 2 ]", 1, NULL);
  ens_model(repo, "e",
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 2 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"m\" } },\n"
            "  { model_name: \"b\" input_map { key: \"INPUT0\" value: \"m\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  char reason[512] = "";
  if (strcmp(tu_state(s, "e", 1, reason, sizeof reason), "READY")) fail_msg("e: %s", reason);
  float x[3] = {1, 2, 3};
  int64_t three[1] = {3}, two[1] = {2};
  outs o;
  infer(s, "e", IN1, 1, x, 1, three, NULL, &o);
  assert_int_equal(o.code, CINFER_INVALID_ARG);
  if (!strstr(o.msg, "in ensemble 'e', step 1 (model 'b'): unexpected shape for input 'INPUT0'"))
    fail_msg("%s", o.msg);
  infer(s, "e", IN1, 1, x, 1, two, NULL, &o);
  assert_int_equal(o.code, CINFER_OK);
  cinfer_model_stats es;
  stats_of(s, "e", &es);
  assert_int_equal(es.success.count, 1);
  assert_int_equal(es.fail.count, 1);
  assert_true(metrics_has_model(s, "e"));
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* Cancelling an ensemble request cancels its queued child: it never executes. */
static void test_cancel(void **state) {
  (void)state;
  char *repo = tu_repo();
  tu_model(repo, "c", 1,
           "name: \"c\"\nbackend: \"ctl\"\nmax_batch_size: 8\n"
           "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
           "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
           "instance_group [ { count: 1 kind: KIND_CPU } ]\n");
  ens_model(repo, "e",
            "max_batch_size: 8\n"
            "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "ensemble_scheduling { step [ { model_name: \"c\" input_map { key: \"INPUT0\" value: \"INPUT0\" }"
            " output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  ctl_reset(-7);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, "e", NULL));
  tu_call a, b;
  tu_call_init(&a);
  tu_call_init(&b);
  cinfer_status *st;
  cinfer_request *ra = tu_submit(s, "e", -7, 0, &a, &st); /* its step holds the instance */
  assert_non_null(ra);
  assert_true(ctl_wait(&ctl.waiting, 1));
  cinfer_request *rb = tu_submit(s, "e", 4, 0, &b, &st); /* its step queues behind */
  assert_non_null(rb);
  cinfer_request_cancel(rb);
  ctl_open();
  assert_true(tu_call_wait(&a));
  assert_true(tu_call_wait(&b));
  assert_int_equal(a.code, CINFER_OK);
  assert_true(a.out[0] == -7);
  assert_int_equal(b.code, CINFER_CANCELLED);
  assert_int_equal(ctl_get(&ctl.executions), 1);
  cinfer_request_release(ra);
  cinfer_request_release(rb);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* A preserve_ordering model delivers under its order lock; as two consecutive steps of one
 * ensemble, the second submission must not deadlock on it. */
static void test_ordered_step_twice(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "o", "identity", 8, "[ -1 ]", 1,
           "dynamic_batching { preserve_ordering: true }\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n");
  ens_model(repo, "e",
            "max_batch_size: 8\n"
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"o\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"m\" } },\n"
            "  { model_name: \"o\" input_map { key: \"INPUT0\" value: \"m\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  enum { N = 16 };
  outs o[N];
  cinfer_request *r[N];
  float x[N];
  int64_t shp[2] = {1, 1};
  for (int i = 0; i < N; i++) {
    cinfer_status *st;
    x[i] = (float)i;
    r[i] = submit(s, "e", IN1, 1, &x[i], 2, shp, NULL, &o[i], &st);
    if (!r[i]) fail_msg("%s", cinfer_status_message(st));
  }
  for (int i = 0; i < N; i++) {
    assert_true(outs_wait(&o[i]));
    if (o[i].code) fail_msg("%s", o[i].msg);
    assert_true(o[i].v[0][0] == (float)i);
    cinfer_request_release(r[i]);
  }
  cinfer_model_stats os;
  stats_of(s, "o", &os);
  assert_int_equal(os.success.count, 2 * N);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* A decoupled test backend: for input x it sends x*1, x*2, x*3 as OUTPUT0 (partial
 * responses), then an empty FINAL response. */
static cinfer_status *ds_load(const cinfer_model_load_info *info, void **model) {
  *model = (void *)info->config;
  return NULL;
}
static void ds_unload(void *model) { (void)model; }
static cinfer_status *ds_execute(void *inst, cinfer_batch *b) {
  (void)inst;
  for (uint32_t k = 0; k < b->n_requests; k++) {
    cinfer_request *r = b->requests[k];
    const cinfer_tensor *in = cinfer_request_input_by_name(r, "INPUT0");
    float v[16];
    size_t n = in->byte_size / 4 < 16 ? in->byte_size / 4 : 16;
    for (int rep = 1; rep <= 3; rep++) {
      for (size_t i = 0; i < n; i++) v[i] = ((const float *)in->data)[i] * (float)rep;
      cinfer_tensor o = *in;
      o.name = "OUTPUT0";
      o.data = v;
      o.byte_size = n * 4;
      cinfer_status_free(cinfer_request_respond(r, &o, 1, 0, NULL));
    }
    cinfer_status_free(cinfer_request_respond(r, NULL, 0, CINFER_RESPONSE_FINAL, NULL));
  }
  return NULL;
}
static const cinfer_backend_iface dstream_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR, .abi_minor = CINFER_BACKEND_ABI_MINOR, .name = "dstream",
    .flags = CINFER_BACKEND_DECOUPLED, .model_load = ds_load, .model_unload = ds_unload,
    .instance_create = ctl_inst, .instance_destroy = ctl_inst_destroy, .execute = ds_execute};

typedef struct stream_outs {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  cinfer_code code;
  int partials, final_outputs;
  float first[3];
  char name[32];
} stream_outs;

static void stream_cb(void *user, cinfer_response *resp, uint32_t flags) {
  stream_outs *o = user;
  pthread_mutex_lock(&o->mu);
  o->code = cinfer_status_code(cinfer_response_error(resp));
  if (flags & CINFER_RESPONSE_FINAL) {
    o->final_outputs = (int)cinfer_response_output_count(resp);
    o->done = true;
    pthread_cond_broadcast(&o->cv);
  } else if (cinfer_response_output_count(resp) == 1 && o->partials < 3) {
    const cinfer_tensor *t = cinfer_response_output(resp, 0);
    snprintf(o->name, sizeof o->name, "%s", t->name);
    o->first[o->partials++] = ((const float *)t->data)[0];
  }
  pthread_mutex_unlock(&o->mu);
  cinfer_response_free(resp);
}

/* Submits x (1 x n FP32) to model `name` and collects its responses (bounded wait). */
static void stream_run(cinfer_server *s, const char *name, const float *x, int n, stream_outs *o) {
  cinfer_model *m = NULL;
  assert_null(cinfer_server_model_acquire(s, name, -1, &m));
  assert_true(cinfer_model_is_decoupled(m));
  cinfer_request *r = NULL;
  assert_null(cinfer_request_create(m, &r));
  cinfer_model_release(m);
  cinfer_tensor t = {.name = "IN", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {1, n},
                     .data = x, .byte_size = (size_t)n * 4};
  assert_null(cinfer_request_add_input(r, &t));
  memset(o, 0, sizeof *o);
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->cv, NULL);
  cinfer_request_set_callback(r, stream_cb, o);
  assert_null(cinfer_server_infer_async(s, r));
  struct timespec dl = tu_deadline();
  pthread_mutex_lock(&o->mu);
  while (!o->done && pthread_cond_timedwait(&o->cv, &o->mu, &dl) != ETIMEDOUT) {}
  pthread_mutex_unlock(&o->mu);
  assert_true(o->done);
  cinfer_request_release(r);
}

/* A decoupled last step streams through the ensemble: every partial response of the step
 * is a partial response of the ensemble, renamed to the ensemble's output. A decoupled
 * step whose output feeds another step is the fan step: each of its responses runs the
 * steps after it, and each run is one partial response of the ensemble, in order. */
static void test_decoupled_last_step_streams(void **state) {
  (void)state;
  char *repo = tu_repo();
  id_model(repo, "a", "identity", 8, "[ -1 ]", 1, NULL);
  id_model(repo, "ds", "dstream", 8, "[ -1 ]", 1, "model_transaction_policy { decoupled: true }\n");
  id_model(repo, "two", "identity", 8, "[ -1 ]", 2, NULL);
  ens_model(repo, "e", CHAIN_DS);
  ens_model(repo, "e_mid",
            "max_batch_size: 8\n"
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"p\" } },\n"
            "  { model_name: \"ds\" input_map { key: \"INPUT0\" value: \"p\" } output_map { key: \"OUTPUT0\" value: \"m\" } },\n"
            "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"m\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  /* Refused, naming what cinfer does not pair: a step after the fan step reading a tensor
   * of a step beside it, and two decoupled steps. */
  ens_model(repo, "e_beside",
            "max_batch_size: 8\n"
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"ds\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"m\" } },\n"
            "  { model_name: \"a\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"b\" } },\n"
            "  { model_name: \"two\" input_map { key: \"INPUT0\" value: \"m\" } input_map { key: \"INPUT1\" value: \"b\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  ens_model(repo, "e_two",
            "max_batch_size: 8\n"
            "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
            "ensemble_scheduling { step [\n"
            "  { model_name: \"ds\" input_map { key: \"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"m\" } },\n"
            "  { model_name: \"ds\" input_map { key: \"INPUT0\" value: \"m\" } output_map { key: \"OUTPUT0\" value: \"OUT\" } } ] }\n");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_NONE, 0);
  char reason[1024] = "";
  if (strcmp(tu_state(s, "e", 1, reason, sizeof reason), "READY")) fail_msg("e: %s", reason);
  if (strcmp(tu_state(s, "e_mid", 1, reason, sizeof reason), "READY")) fail_msg("e_mid: %s", reason);
  assert_string_equal(tu_state(s, "e_two", 1, reason, sizeof reason), "UNAVAILABLE");
  if (!strstr(reason, "steps 0 ('ds') and 1 ('ds') are both decoupled")) fail_msg("e_two: %s", reason);
  tu_state(s, "e_beside", 1, reason, sizeof reason);
  if (!strstr(reason, "reads 'b' from step 1 ('a'), which runs beside that step")) fail_msg("e_beside: %s", reason);
  float x[2] = {2, 5};
  stream_outs o;
  stream_run(s, "e", x, 2, &o);
  assert_int_equal(o.code, CINFER_OK);
  assert_int_equal(o.partials, 3);
  assert_string_equal(o.name, "OUT");
  assert_true(o.first[0] == 2 && o.first[1] == 4 && o.first[2] == 6);
  assert_int_equal(o.final_outputs, 0);
  for (int round = 0; round < 20; round++) { /* in order every time */
    stream_run(s, "e_mid", x, 2, &o);
    assert_int_equal(o.code, CINFER_OK);
    assert_int_equal(o.partials, 3);
    assert_string_equal(o.name, "OUT");
    assert_true(o.first[0] == 2 && o.first[1] == 4 && o.first[2] == 6);
    assert_int_equal(o.final_outputs, 0);
  }
  cinfer_model_stats es, as;
  stats_of(s, "e", &es);
  assert_int_equal(es.success.count, 1);
  stats_of(s, "e_mid", &es);
  assert_int_equal(es.success.count, 20);
  stats_of(s, "a", &as); /* e: once; e_mid: once before the fan step, three times after it */
  assert_int_equal(as.success.count, 1 + 20 * 4);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

int main(void) {
  assert_null(cinfer_backend_register(&ctl_backend));
  assert_null(cinfer_backend_register(&dstream_backend));
  if (getenv("CINFER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINFER_TEST_FILTER"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain),
      cmocka_unit_test(test_fan_out_fan_in),
      cmocka_unit_test(test_rows_feed_a_batch),
      cmocka_unit_test(test_batch_conversion),
      cmocka_unit_test(test_load_checks),
      cmocka_unit_test(test_explicit_dependencies),
      cmocka_unit_test(test_step_failure),
      cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_ordered_step_twice),
      cmocka_unit_test(test_decoupled_last_step_streams),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
