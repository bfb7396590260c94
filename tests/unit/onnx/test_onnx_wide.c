/* test_onnx_wide.c: models with many inputs and outputs (issue 15). Every count a model
 * brings is either within its limit (CINFER_MAX_INPUTS / CINFER_MAX_OUTPUTS, types.h) and
 * then served in full, or over it and refused at load with an error naming the limit.
 *
 *  - session level: 70 inputs and 70 outputs (past the old fixed arrays of 32 and 64) on
 *    every execution path of onnx_session_run (one run, sub-batches, batch workers), and a
 *    model exactly at CINFER_MAX_OUTPUTS;
 *  - constant folding of a node with 70 constant inputs;
 *  - server level: the ONNX backend behind the real server answers a request for all 70
 *    outputs of a 70-input model with 70 correct outputs (the backend's outs[64] on the
 *    worker's stack overflowed here), and a repository model over the limit is
 *    UNAVAILABLE with the limit's name in its reason. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "backends/onnx/onnx.h"
#include "cinfer/cinfer.h"
#include "wide_model.h"

static onnx_model *load_wide(int n_in, int n_out) {
  size_t len;
  uint8_t *buf = wide_model_pack(n_in, n_out, &len);
  assert_non_null(buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("wide model %d x %d: %s", n_in, n_out, cinfer_status_message(st));
  return m;
}

static void expect_load_error(int n_in, int n_out, const char *needle) {
  size_t len;
  uint8_t *buf = wide_model_pack(n_in, n_out, &len);
  assert_non_null(buf);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (!st) {
    onnx_model_destroy(m);
    fail_msg("a model with %d inputs and %d outputs loaded", n_in, n_out);
  }
  if (!strstr(cinfer_status_message(st), needle))
    fail_msg("error '%s' does not contain '%s'", cinfer_status_message(st), needle);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_null(m);
  cinfer_status_free(st);
}

/* inputs x_i of `rows` rows, given to the session in reverse order (matched by name) */
static cinfer_tensor *make_inputs(int n_in, int64_t rows, float **data) {
  cinfer_tensor *in = calloc((size_t)n_in, sizeof *in);
  char **names = calloc((size_t)n_in, sizeof *names);
  *data = calloc((size_t)n_in * (size_t)rows * 2, sizeof **data);
  assert_non_null(in);
  assert_non_null(*data);
  for (int i = 0; i < n_in; i++) {
    float *x = *data + (size_t)i * (size_t)rows * 2;
    for (int64_t r = 0; r < rows; r++)
      for (int k = 0; k < 2; k++) x[r * 2 + k] = wide_x(i, r, k);
    cinfer_tensor *t = &in[n_in - 1 - i];
    t->name = names[i] = wide_name('x', i);
    t->dtype = CINFER_TYPE_FP32;
    t->ndim = 2;
    t->shape[0] = rows;
    t->shape[1] = 2;
    t->data = x;
    t->byte_size = (size_t)rows * 2 * sizeof(float);
  }
  free(names); /* the strings stay referenced by in[]; free_inputs frees them */
  return in;
}

static void free_inputs(cinfer_tensor *in, int n_in, float *data) {
  for (int i = 0; i < n_in; i++) free((char *)in[i].name);
  free(in);
  free(data);
}

static void check_outputs(const cinfer_tensor *out, int n_out, int n_in, int64_t rows) {
  for (int j = 0; j < n_out; j++) {
    char want[32];
    snprintf(want, sizeof want, "y%d", j);
    if (!out[j].name || strcmp(out[j].name, want)) fail_msg("output %d is '%s', want '%s'", j, out[j].name, want);
    assert_int_equal(out[j].dtype, CINFER_TYPE_FP32);
    assert_int_equal(out[j].ndim, 2);
    assert_int_equal(out[j].shape[0], rows);
    assert_int_equal(out[j].shape[1], 2);
    assert_int_equal(out[j].byte_size, (size_t)rows * 2 * sizeof(float));
    const float *y = out[j].data;
    for (int64_t r = 0; r < rows; r++)
      for (int k = 0; k < 2; k++)
        if (y[r * 2 + k] != wide_y(n_in, j, r, k))
          fail_msg("y%d[%lld][%d] = %g, want %g", j, (long long)r, k, y[r * 2 + k], wide_y(n_in, j, r, k));
  }
}

/* Runs a model on every path of onnx_session_run: one graph run, sub-batches of one row,
 * and batch workers (threads 2), each twice (the second run reuses plans and buffers). */
static void run_all_paths(int n_in, int n_out) {
  onnx_model *m = load_wide(n_in, n_out);
  assert_int_equal(onnx_model_input_count(m), n_in);
  assert_int_equal(onnx_model_output_count(m), n_out);
  assert_true(onnx_model_batchable(m));
  const onnx_options opts[] = {{.threads = 1, .sub_batch = -1}, {.threads = 1, .sub_batch = 1},
                               {.threads = 2}};
  for (size_t o = 0; o < sizeof opts / sizeof *opts; o++) {
    onnx_session *s;
    assert_null(onnx_session_create(m, &opts[o], &s));
    assert_int_equal(onnx_session_output_count(s), n_out);
    for (int64_t rows = 1; rows <= 3; rows += 2)
      for (int rep = 0; rep < 2; rep++) {
        float *data;
        cinfer_tensor *in = make_inputs(n_in, rows, &data);
        cinfer_tensor *out = calloc((size_t)n_out, sizeof *out);
        assert_non_null(out);
        cinfer_status *st = onnx_session_run(s, in, n_in, out);
        if (st) fail_msg("options %zu, %lld rows: %s", o, (long long)rows, cinfer_status_message(st));
        check_outputs(out, n_out, n_in, rows);
        free(out);
        free_inputs(in, n_in, data);
      }
    onnx_session_destroy(s);
  }
  onnx_model_destroy(m);
}

static void test_session_70_outputs(void **state) {
  (void)state;
  run_all_paths(1, 70);
}

static void test_session_70_inputs(void **state) {
  (void)state;
  run_all_paths(70, 70);
}

/* A model exactly at the limit loads and runs; one past it fails with the limit's name. */
static void test_limits(void **state) {
  (void)state;
  onnx_model *m = load_wide(1, CINFER_MAX_OUTPUTS);
  onnx_session *s;
  assert_null(onnx_session_create(m, NULL, &s));
  float *data;
  cinfer_tensor *in = make_inputs(1, 1, &data);
  cinfer_tensor *out = calloc(CINFER_MAX_OUTPUTS, sizeof *out);
  assert_null(onnx_session_run(s, in, 1, out));
  check_outputs(out, CINFER_MAX_OUTPUTS, 1, 1);
  free(out);
  free_inputs(in, 1, data);
  onnx_session_destroy(s);
  onnx_model_destroy(m);

  char want[96];
  snprintf(want, sizeof want, "model has %d outputs; the limit is CINFER_MAX_OUTPUTS = %d",
           CINFER_MAX_OUTPUTS + 1, CINFER_MAX_OUTPUTS);
  expect_load_error(1, CINFER_MAX_OUTPUTS + 1, want);
  snprintf(want, sizeof want, "model has %d inputs; the limit is CINFER_MAX_INPUTS = %d",
           CINFER_MAX_INPUTS + 1, CINFER_MAX_INPUTS);
  expect_load_error(CINFER_MAX_INPUTS + 1, 1, want);
}

/* Concat of 70 constants is folded at load (it used to be dropped unfolded past 64). */
static void test_fold_wide_node(void **state) {
  (void)state;
  enum { N = 70 };
  size_t len;
  uint8_t *buf = concat_model_pack(N, &len);
  onnx_model *m = NULL;
  cinfer_status *st = onnx_model_load_buffer(buf, len, NULL, &m);
  free(buf);
  if (st) fail_msg("%s", cinfer_status_message(st));
  onnx_session *s;
  assert_null(onnx_session_create(m, NULL, &s));
  float x[N];
  for (int i = 0; i < N; i++) x[i] = 1000.0f + (float)i * 3;
  cinfer_tensor in = {.name = "x", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {N}, .data = x,
                      .byte_size = sizeof x},
                out;
  if ((st = onnx_session_run(s, &in, 1, &out))) fail_msg("%s", cinfer_status_message(st));
  assert_int_equal(out.shape[0], N);
  for (int i = 0; i < N; i++) assert_float_equal(((const float *)out.data)[i], x[i] + (float)i, 0);
  onnx_session_destroy(s);
  onnx_model_destroy(m);
}

/* ---- through the server -------------------------------------------------------------- */

static void write_model(const char *repo, const char *name, int n_in, int n_out) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", repo, name);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/%s/config.pbtxt", repo, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fprintf(f, "platform: \"onnxruntime_onnx\"\n"); /* inputs, outputs, batching: auto-complete */
  fclose(f);
  snprintf(p, sizeof p, "%s/%s/1", repo, name);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/%s/1/model.onnx", repo, name);
  size_t len;
  uint8_t *buf = wide_model_pack(n_in, n_out, &len);
  f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, len, f), len);
  fclose(f);
  free(buf);
}

static void remove_model(const char *repo, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s/1/model.onnx", repo, name);
  unlink(p);
  snprintf(p, sizeof p, "%s/%s/1", repo, name);
  rmdir(p);
  snprintf(p, sizeof p, "%s/%s/config.pbtxt", repo, name);
  unlink(p);
  snprintf(p, sizeof p, "%s/%s", repo, name);
  rmdir(p);
}

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cinfer_response *resp;
} waiter;

static void on_response(void *user, cinfer_response *resp, uint32_t flags) {
  waiter *w = user;
  if (!(flags & CINFER_RESPONSE_FINAL)) {
    cinfer_response_free(resp);
    return;
  }
  pthread_mutex_lock(&w->mu);
  w->resp = resp;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static cinfer_server *start_server(char *repo, const char *name, int n_in, int n_out) {
  assert_non_null(mkdtemp(repo));
  write_model(repo, name, n_in, n_out);
  cinfer_server_options o = {.model_repository = repo, .threads = 2};
  cinfer_server *srv;
  cinfer_status *st = cinfer_server_create(&o, &srv);
  if (st) fail_msg("%s", cinfer_status_message(st));
  return srv;
}

static void stop_server(cinfer_server *srv, char *repo, const char *name) {
  cinfer_server_destroy(srv);
  remove_model(repo, name);
  rmdir(repo);
}

/* the model over the limit is UNAVAILABLE, and its reason names the limit */
static void test_server_over_limit(void **state) {
  (void)state;
  char repo[] = "/tmp/cinfer-wide-XXXXXX";
  cinfer_server *srv = start_server(repo, "too_wide", 1, CINFER_MAX_OUTPUTS + 1);
  cinfer_model_index_entry *e;
  size_t n;
  assert_null(cinfer_server_repository_index(srv, false, &e, &n));
  assert_int_equal(n, 1);
  assert_string_equal(e[0].name, "too_wide");
  assert_string_equal(e[0].state, "UNAVAILABLE");
  if (!strstr(e[0].reason, "model has 4097 outputs; the limit is CINFER_MAX_OUTPUTS = 4096"))
    fail_msg("reason '%s' does not name the limit", e[0].reason);
  cinfer_model_index_free(e, n);
  stop_server(srv, repo, "too_wide");
}

/* A request for every output of an NI-input, NO-output model answers all NO of them. */
static void serve_wide(int NI, int NO) {
  char repo[] = "/tmp/cinfer-wide-XXXXXX";
  cinfer_server *srv = start_server(repo, "wide", NI, NO);
  cinfer_status *st;
  cinfer_model *m;
  if ((st = cinfer_server_model_acquire(srv, "wide", 0, &m))) fail_msg("%s", cinfer_status_message(st));
  cinfer_request *r;
  assert_null(cinfer_request_create(m, &r));
  float *data;
  cinfer_tensor *in = make_inputs(NI, 1, &data);
  for (int i = 0; i < NI; i++)
    if ((st = cinfer_request_add_input(r, &in[i]))) fail_msg("%s", cinfer_status_message(st));
  for (int j = NO - 1; j >= 0; j--) { /* every output, asked for by name (in reverse) */
    char nm[32];
    snprintf(nm, sizeof nm, "y%d", j);
    if ((st = cinfer_request_add_output(r, nm))) fail_msg("%s", cinfer_status_message(st));
  }
  waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL};
  cinfer_request_set_callback(r, on_response, &w);
  assert_null(cinfer_server_infer_async(srv, r));
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 120; /* a bound for a hang, not a performance threshold */
  pthread_mutex_lock(&w.mu);
  while (!w.resp && pthread_cond_timedwait(&w.cv, &w.mu, &until) == 0) {}
  pthread_mutex_unlock(&w.mu);
  if (!w.resp) fail_msg("no response");
  const cinfer_status *err = cinfer_response_error(w.resp);
  if (err) fail_msg("%s", cinfer_status_message(err));
  assert_int_equal(cinfer_response_output_count(w.resp), (uint32_t)NO);
  /* response order is the model's; the values tell the outputs apart */
  cinfer_tensor *outs = calloc((size_t)NO, sizeof *outs);
  for (uint32_t i = 0; i < (uint32_t)NO; i++) {
    const cinfer_tensor *t = cinfer_response_output(w.resp, i);
    int j = atoi(t->name + 1);
    assert_true(j >= 0 && j < NO);
    assert_null(outs[j].name); /* each output once */
    outs[j] = *t;
  }
  check_outputs(outs, NO, NI, 1);
  free(outs);
  cinfer_response_free(w.resp);
  cinfer_request_release(r);
  cinfer_model_release(m);
  stop_server(srv, repo, "wide");
  free_inputs(in, NI, data);
}

static void test_server_70_outputs(void **state) {
  (void)state;
  serve_wide(1, 70);
}

static void test_server_70_inputs_70_outputs(void **state) {
  (void)state;
  serve_wide(70, 70);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_session_70_outputs), cmocka_unit_test(test_session_70_inputs),
      cmocka_unit_test(test_limits), cmocka_unit_test(test_fold_wide_node),
      cmocka_unit_test(test_server_over_limit), cmocka_unit_test(test_server_70_outputs),
      cmocka_unit_test(test_server_70_inputs_70_outputs)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
