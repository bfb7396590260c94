/* test_backend_abi.c: the backend ABI 2.0 (include/cinfer/backend.h) as the core enforces
 * it: the version check on registration and on dlopen, the backend-directory lookup and
 * its failure reasons, the config accessors and auto-complete setters, and the refusal of
 * GPU memory. The shared objects are the identity backend built by CMake twice: as
 * backend "identity_so" (this ABI) and as "identity_badabi" (claiming the previous major). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cinfer/backend.h"
#include "cinfer/cinfer.h"
#include "repo/config.h"
#include "server/backend_config.h"
#include "server/internal.h"

#define assert_contains(hay, needle)                                              \
  do {                                                                            \
    const char *h_ = (hay), *n_ = (needle);                                       \
    if (!strstr(h_, n_)) fail_msg("'%s' does not contain '%s'", h_, n_);          \
  } while (0)

/* ---- a fake backend for registration ------------------------------------------------- */

static cinfer_status *f_load(const cinfer_model_load_info *i, void **m) { *m = NULL; return NULL; }
static void f_unload(void *m) {}
static cinfer_status *f_icreate(void *m, const cinfer_instance_info *i, void **o) { *o = NULL; return NULL; }
static void f_idestroy(void *i) {}
static cinfer_status *f_exec(void *i, cinfer_batch *b) { return NULL; }

#define FAKE(nm, maj, min)                                                              \
  {.abi_major = (maj), .abi_minor = (min), .name = (nm), .model_load = f_load,          \
   .model_unload = f_unload, .instance_create = f_icreate, .instance_destroy = f_idestroy, \
   .execute = f_exec}

static void test_register_version_check(void **state) {
  static const cinfer_backend_iface old_major = FAKE("fake_old", CINFER_BACKEND_ABI_MAJOR - 1, 0);
  cinfer_status *st = cinfer_backend_register(&old_major);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  char want[128];
  snprintf(want, sizeof want, "built for backend ABI %d.0; this server has %d.%d",
           CINFER_BACKEND_ABI_MAJOR - 1, CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR);
  assert_contains(cinfer_status_message(st), want);
  assert_contains(cinfer_status_message(st), "'fake_old'");
  cinfer_status_free(st);
  assert_null(backend_find("fake_old"));

  static const cinfer_backend_iface new_major = FAKE("fake_new", CINFER_BACKEND_ABI_MAJOR + 1, 0);
  st = cinfer_backend_register(&new_major);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  cinfer_status_free(st);

  /* a newer minor: the backend may use members this core does not have */
  static const cinfer_backend_iface new_minor =
      FAKE("fake_minor", CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR + 1);
  st = cinfer_backend_register(&new_minor);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  cinfer_status_free(st);

  static const cinfer_backend_iface ok = FAKE("fake_ok", CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR);
  assert_null(cinfer_backend_register(&ok));
  assert_null(cinfer_backend_register(&ok)); /* the same iface again: a no-op */
  assert_ptr_equal(backend_find("fake_ok"), &ok);
  static const cinfer_backend_iface other = FAKE("fake_ok", CINFER_BACKEND_ABI_MAJOR, 0);
  st = cinfer_backend_register(&other);
  assert_int_equal(cinfer_status_code(st), CINFER_ALREADY_EXISTS);
  cinfer_status_free(st);
  assert_ptr_equal(backend_find("fake_ok"), &ok);
}

static void test_register_required_members(void **state) {
  static cinfer_backend_iface no_exec = FAKE("fake_noexec", CINFER_BACKEND_ABI_MAJOR, 0);
  no_exec.execute = NULL;
  cinfer_status *st = cinfer_backend_register(&no_exec);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "has no execute");
  cinfer_status_free(st);
  static const cinfer_backend_iface no_name = FAKE(NULL, CINFER_BACKEND_ABI_MAJOR, 0);
  st = cinfer_backend_register(&no_name);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  cinfer_status_free(st);
  st = cinfer_backend_register(NULL);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  cinfer_status_free(st);
}

/* ---- loading shared objects ----------------------------------------------------------- */

static void test_load_shared_object(void **state) {
  const cinfer_backend_iface *be = NULL;
  cinfer_status *st = backend_lookup("identity_so", CINFER_BACKEND_DIR, &be);
  assert_null(st);
  assert_non_null(be);
  assert_string_equal(be->name, "identity_so");
  assert_int_equal(be->abi_major, CINFER_BACKEND_ABI_MAJOR);
  /* registered: found again without the directory, same iface */
  const cinfer_backend_iface *again = NULL;
  assert_null(backend_lookup("identity_so", NULL, &again));
  assert_ptr_equal(again, be);
  assert_ptr_equal(backend_find("identity_so"), be);
}

static void test_load_wrong_major(void **state) {
  const cinfer_backend_iface *be = (const cinfer_backend_iface *)1;
  cinfer_status *st = backend_lookup("identity_badabi", CINFER_BAD_BACKEND_DIR, &be);
  assert_null(be);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  const char *msg = cinfer_status_message(st);
  assert_contains(msg, CINFER_BAD_BACKEND_DIR "/identity_badabi/libcinfer_identity_badabi.so");
  char want[128];
  snprintf(want, sizeof want, "built for backend ABI %d.%d; this server has %d.%d",
           CINFER_BACKEND_ABI_MAJOR - 1, CINFER_BACKEND_ABI_MINOR, CINFER_BACKEND_ABI_MAJOR,
           CINFER_BACKEND_ABI_MINOR);
  assert_contains(msg, want);
  cinfer_status_free(st);
  assert_null(backend_find("identity_badabi")); /* not registered: refused every time */
  st = backend_lookup("identity_badabi", CINFER_BAD_BACKEND_DIR, &be);
  assert_int_equal(cinfer_status_code(st), CINFER_UNSUPPORTED);
  cinfer_status_free(st);
}

static void test_load_missing(void **state) {
  const cinfer_backend_iface *be;
  cinfer_status *st = backend_lookup("nosuch", CINFER_BACKEND_DIR, &be);
  assert_null(be);
  assert_int_equal(cinfer_status_code(st), CINFER_NOT_FOUND);
  assert_contains(cinfer_status_message(st), CINFER_BACKEND_DIR "/nosuch/libcinfer_nosuch.so");
  assert_contains(cinfer_status_message(st), "not built in");
  cinfer_status_free(st);

  st = backend_lookup("nosuch", NULL, &be); /* no directory: says how to give one */
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "--backend-directory");
  cinfer_status_free(st);

  /* a name from config.pbtxt never walks out of the directory */
  const char *bad[] = {"../identity_so", "a/b", ".hidden", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    st = backend_lookup(bad[i], CINFER_BACKEND_DIR, &be);
    assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
    assert_null(be);
    cinfer_status_free(st);
  }
}

/* A library must call itself by the name it is loaded by. */
static void test_load_name_mismatch(void **state) {
  char dir[] = "/tmp/cinfer-abi-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char sub[512], lib[600];
  snprintf(sub, sizeof sub, "%s/other", dir);
  assert_int_equal(mkdir(sub, 0755), 0);
  snprintf(lib, sizeof lib, "%s/libcinfer_other.so", sub);
  assert_int_equal(symlink(CINFER_BACKEND_DIR "/identity_so/libcinfer_identity_so.so", lib), 0);
  const cinfer_backend_iface *be;
  cinfer_status *st = backend_lookup("other", dir, &be);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "calls itself 'identity_so'");
  cinfer_status_free(st);
  assert_null(backend_find("other"));
  unlink(lib);
  rmdir(sub);
  rmdir(dir);
}

/* ---- config accessors and auto-complete setters ------------------------------------------ */

static const char *CFG =
    "name: \"m\"\nbackend: \"identity\"\nmax_batch_size: 4\n"
    "parameters [ { key: \"k\" value { string_value: \"v\" } } ]\n"
    "input [ { name: \"A\" data_type: TYPE_FP32 dims: [ 2, -1 ] },\n"
    "        { name: \"B\" data_type: TYPE_INT8 dims: [ 6 ] reshape { shape: [ 2, 3 ] } optional: true } ]\n"
    "output [ { name: \"Y\" data_type: TYPE_FP32 dims: [ 2, -1 ] } ]\n";

static void test_config_accessors(void **state) {
  cinfer_model_config *mc;
  assert_null(model_config_parse("config.pbtxt", CFG, strlen(CFG), &mc));
  const cinfer_config *c = backend_config_of(mc);
  assert_string_equal(cinfer_config_name(c), "m");
  assert_int_equal(cinfer_config_max_batch_size(c), 4);
  assert_string_equal(cinfer_config_parameter(c, "k"), "v");
  assert_null(cinfer_config_parameter(c, "nope"));
  assert_int_equal(cinfer_config_input_count(c), 2);
  assert_int_equal(cinfer_config_output_count(c), 1);
  cinfer_config_io io;
  assert_true(cinfer_config_input(c, 0, &io));
  assert_string_equal(io.name, "A");
  assert_int_equal(io.dtype, CINFER_TYPE_FP32);
  assert_int_equal(io.ndim, 2);
  assert_int_equal(io.dims[0], 2);
  assert_int_equal(io.dims[1], -1);
  assert_int_equal(io.reshape_ndim, -1);
  assert_false(io.optional);
  assert_true(cinfer_config_input_by_name(c, "B", &io));
  assert_int_equal(io.dtype, CINFER_TYPE_INT8);
  assert_int_equal(io.reshape_ndim, 2);
  assert_int_equal(io.reshape[1], 3);
  assert_true(io.optional);
  assert_false(cinfer_config_input(c, 2, &io));
  assert_false(cinfer_config_output(c, 1, &io));
  assert_false(cinfer_config_output_by_name(c, "A", &io));
  assert_true(cinfer_config_output_by_name(c, "Y", &io));
  uint32_t ver = 0;
  char *json = cinfer_config_json(c, &ver);
  assert_non_null(json);
  assert_int_equal(ver, CINFER_CONFIG_JSON_VERSION);
  assert_contains(json, "\"max_batch_size\":4");
  assert_contains(json, "\"name\":\"B\"");
  free(json);
  model_config_free(mc);
}

static void test_autocomplete_setters(void **state) {
  cinfer_model_config *mc;
  const char *text = "name: \"ac\"\nbackend: \"identity\"\n";
  assert_null(model_config_parse("config.pbtxt", text, strlen(text), &mc));
  cinfer_autocomplete *ac = backend_autocomplete_of(mc);
  const cinfer_config *c = cinfer_autocomplete_config(ac);
  int64_t d2[] = {3, -1}, bad0[] = {0}, badneg[] = {-2};
  assert_null(cinfer_autocomplete_set_max_batch_size(ac, 16));
  assert_null(cinfer_autocomplete_add_input(ac, "IN", CINFER_TYPE_FP16, 2, d2));
  assert_null(cinfer_autocomplete_add_output(ac, "OUT", CINFER_TYPE_FP16, 2, d2));
  assert_null(cinfer_autocomplete_set_parameter(ac, "p", "1"));
  assert_null(cinfer_autocomplete_set_parameter(ac, "p", "2")); /* replaces */
  assert_int_equal(cinfer_config_max_batch_size(c), 16);
  assert_string_equal(cinfer_config_parameter(c, "p"), "2");
  cinfer_config_io io;
  assert_true(cinfer_config_input_by_name(c, "IN", &io));
  assert_int_equal(io.dtype, CINFER_TYPE_FP16);
  assert_int_equal(io.ndim, 2);
  assert_int_equal(io.dims[0], 3);

  struct { cinfer_status *st; cinfer_code code; const char *says; } bad[] = {
      {cinfer_autocomplete_set_max_batch_size(ac, -1), CINFER_INVALID_ARG, "max_batch_size -1"},
      {cinfer_autocomplete_set_max_batch_size(ac, (int64_t)1 << 40), CINFER_INVALID_ARG, "max_batch_size"},
      {cinfer_autocomplete_add_input(ac, "IN", CINFER_TYPE_FP16, 2, d2), CINFER_ALREADY_EXISTS, "'IN' already exists"},
      {cinfer_autocomplete_add_input(ac, "", CINFER_TYPE_FP16, 2, d2), CINFER_INVALID_ARG, "empty name"},
      {cinfer_autocomplete_add_input(ac, NULL, CINFER_TYPE_FP16, 2, d2), CINFER_INVALID_ARG, "empty name"},
      {cinfer_autocomplete_add_input(ac, "X", CINFER_TYPE_INVALID, 2, d2), CINFER_INVALID_ARG, "data_type 0"},
      {cinfer_autocomplete_add_input(ac, "X", (cinfer_dtype)99, 2, d2), CINFER_INVALID_ARG, "data_type 99"},
      {cinfer_autocomplete_add_input(ac, "X", CINFER_TYPE_FP32, CINFER_MAX_DIMS + 1, d2), CINFER_INVALID_ARG, "9 dims (limit 8)"},
      {cinfer_autocomplete_add_input(ac, "X", CINFER_TYPE_FP32, -1, d2), CINFER_INVALID_ARG, "dims"},
      {cinfer_autocomplete_add_input(ac, "X", CINFER_TYPE_FP32, 2, NULL), CINFER_INVALID_ARG, "dims"},
      {cinfer_autocomplete_add_output(ac, "X", CINFER_TYPE_FP32, 1, bad0), CINFER_INVALID_ARG, "dims[0] = 0"},
      {cinfer_autocomplete_add_output(ac, "X", CINFER_TYPE_FP32, 1, badneg), CINFER_INVALID_ARG, "dims[0] = -2"},
      {cinfer_autocomplete_set_parameter(ac, "", "v"), CINFER_INVALID_ARG, "empty key"},
      {cinfer_autocomplete_set_parameter(ac, "q", NULL), CINFER_INVALID_ARG, "no value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(cinfer_status_code(bad[i].st), bad[i].code);
    assert_contains(cinfer_status_message(bad[i].st), "model 'ac'");
    assert_contains(cinfer_status_message(bad[i].st), bad[i].says);
    cinfer_status_free(bad[i].st);
  }
  /* nothing of the refused calls stuck */
  assert_int_equal(cinfer_config_max_batch_size(c), 16);
  assert_int_equal(cinfer_config_input_count(c), 1);
  assert_int_equal(cinfer_config_output_count(c), 1);
  assert_null(cinfer_config_parameter(c, "q"));
  assert_null(model_config_validate(mc));
  model_config_free(mc);
}

/* ---- memory types ---------------------------------------------------------------------- */

static void test_tensor_memory_type(void **state) {
  float x[2] = {1, 2};
  cinfer_tensor t = {.name = "T", .dtype = CINFER_TYPE_FP32, .ndim = 1, .shape = {2},
                     .data = x, .byte_size = sizeof x};
  assert_int_equal(t.memory_type, CINFER_MEMORY_CPU); /* a designated initializer: CPU */
  assert_null(cinfer_tensor_check(&t));
  t.memory_type = CINFER_MEMORY_CPU_PINNED;
  assert_null(cinfer_tensor_check(&t));
  t.memory_type = CINFER_MEMORY_GPU;
  t.device_id = 3;
  cinfer_status *st = cinfer_tensor_check(&t);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "tensor 'T' is in GPU memory");
  assert_contains(cinfer_status_message(st), "device 3");
  cinfer_status_free(st);
  t.memory_type = (cinfer_memory_type)77;
  st = cinfer_tensor_check(&t);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "INVALID memory (memory type 77");
  cinfer_status_free(st);
  assert_string_equal(cinfer_memory_type_name(CINFER_MEMORY_GPU), "GPU");
}

/* ---- through the server: a model on the shared-object backend ---------------------------- */

static char repo[64];

static void write_model(const char *name, const char *backend, const char *dtype) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", repo, name);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/%s/1", repo, name);
  assert_int_equal(mkdir(p, 0755), 0);
  snprintf(p, sizeof p, "%s/%s/config.pbtxt", repo, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fprintf(f,
          "name: \"%s\"\nbackend: \"%s\"\nmax_batch_size: 8\n"
          "input [ { name: \"INPUT0\" data_type: %s dims: [ -1 ] } ]\n"
          "output [ { name: \"OUTPUT0\" data_type: %s dims: [ -1 ] } ]\n",
          name, backend, dtype, dtype);
  fclose(f);
}

/* The FINAL callback runs before the worker drops the server's reference to the request
 * (request_deliver_now); destroying the server in between would race with that release
 * (a core issue outside the ABI, reported), so wait for the in-flight count to drain. */
static void drain(cinfer_server *s) {
  for (int i = 0; i < 60000 && cinfer_server_inflight(s) > 0; i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  assert_int_equal(cinfer_server_inflight(s), 0);
}

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cinfer_response *resp;
  bool done;
} waiter;

static void on_response(void *user, cinfer_response *resp, uint32_t flags) {
  waiter *w = user;
  pthread_mutex_lock(&w->mu);
  w->resp = resp;
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void test_server_shared_backend(void **state) {
  snprintf(repo, sizeof repo, "/tmp/cinfer-abi-repo-XXXXXX");
  assert_non_null(mkdtemp(repo));
  write_model("so", "identity_so", "TYPE_INT32");
  write_model("bad", "identity_badabi", "TYPE_INT32");
  write_model("missing", "nosuch", "TYPE_INT32");
  write_model("builtin", "identity", "TYPE_INT32");
  /* The backend directory holds the good and the wrong-major library. */
  char bdir[] = "/tmp/cinfer-abi-bdir-XXXXXX";
  assert_non_null(mkdtemp(bdir));
  char l1[128], l2[128];
  snprintf(l1, sizeof l1, "%s/identity_so", bdir);
  snprintf(l2, sizeof l2, "%s/identity_badabi", bdir);
  assert_int_equal(symlink(CINFER_BACKEND_DIR "/identity_so", l1), 0);
  assert_int_equal(symlink(CINFER_BAD_BACKEND_DIR "/identity_badabi", l2), 0);

  cinfer_server_options o = {.model_repository = repo, .control_mode = CINFER_MODEL_CONTROL_NONE,
                             .threads = 2, .backend_directory = bdir};
  cinfer_server *s;
  assert_null(cinfer_server_create(&o, &s));
  cinfer_model_index_entry *idx;
  size_t n;
  assert_null(cinfer_server_repository_index(s, false, &idx, &n));
  int seen = 0;
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(idx[i].name, "so") || !strcmp(idx[i].name, "builtin")) {
      assert_string_equal(idx[i].state, "READY");
      seen++;
    } else if (!strcmp(idx[i].name, "bad")) {
      assert_string_equal(idx[i].state, "UNAVAILABLE");
      assert_contains(idx[i].reason, "libcinfer_identity_badabi.so");
      char want[96]; /* the bad backend claims major - 1 with this minor */
      snprintf(want, sizeof want, "built for backend ABI %d.%d; this server has %d.%d", CINFER_BACKEND_ABI_MAJOR - 1,
               CINFER_BACKEND_ABI_MINOR, CINFER_BACKEND_ABI_MAJOR, CINFER_BACKEND_ABI_MINOR);
      assert_contains(idx[i].reason, want);
      seen++;
    } else if (!strcmp(idx[i].name, "missing")) {
      assert_string_equal(idx[i].state, "UNAVAILABLE");
      assert_contains(idx[i].reason, "/nosuch/libcinfer_nosuch.so");
      seen++;
    }
  }
  assert_int_equal(seen, 4);
  cinfer_model_index_free(idx, n);

  cinfer_model *m;
  assert_null(cinfer_server_model_acquire(s, "so", 0, &m));
  assert_string_equal(cinfer_model_backend_name(m), "identity_so");
  assert_string_equal(cinfer_config_name(cinfer_model_config_get(m)), "so");
  assert_int_equal(cinfer_config_max_batch_size(cinfer_model_config_get(m)), 8);
  int32_t data[3] = {7, -8, 9};
  cinfer_request *r;
  assert_null(cinfer_request_create(m, &r));
  /* GPU memory is refused where the core would read it */
  cinfer_tensor gpu = {.name = "INPUT0", .dtype = CINFER_TYPE_INT32, .ndim = 2, .shape = {1, 3},
                       .data = data, .byte_size = sizeof data, .memory_type = CINFER_MEMORY_GPU};
  cinfer_status *st = cinfer_request_add_input(r, &gpu);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "GPU memory");
  cinfer_status_free(st);
  cinfer_tensor in = gpu;
  in.memory_type = CINFER_MEMORY_CPU;
  assert_null(cinfer_request_add_input(r, &in));
  waiter w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  cinfer_request_set_callback(r, on_response, &w);
  assert_null(cinfer_server_infer_async(s, r));
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 60;
  pthread_mutex_lock(&w.mu);
  while (!w.done && pthread_cond_timedwait(&w.cv, &w.mu, &dl) == 0) {
  }
  pthread_mutex_unlock(&w.mu);
  assert_true(w.done);
  assert_null(cinfer_response_error(w.resp));
  assert_int_equal(cinfer_response_output_count(w.resp), 1);
  const cinfer_tensor *out = cinfer_response_output(w.resp, 0);
  assert_string_equal(out->name, "OUTPUT0");
  assert_int_equal(out->dtype, CINFER_TYPE_INT32);
  assert_int_equal(out->ndim, 2);
  assert_int_equal(out->shape[1], 3);
  assert_int_equal(out->memory_type, CINFER_MEMORY_CPU);
  assert_memory_equal(out->data, data, sizeof data);
  cinfer_response_free(w.resp);
  cinfer_request_release(r);
  cinfer_model_release(m);
  drain(s);
  cinfer_server_destroy(s);

  /* a backend directory that is not a folder fails server creation, naming it */
  o.backend_directory = "/nonexistent/backends";
  st = cinfer_server_create(&o, &s);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(st), "backend directory '/nonexistent/backends'");
  cinfer_status_free(st);

  unlink(l1);
  unlink(l2);
  rmdir(bdir);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
  assert_int_equal(system(cmd), 0);
}

/* ---- a decoupled backend that answers from "GPU memory" ------------------------------- */

/* What cinfer_request_respond returned to the backend; it may return after the callback
 * ran, so the test waits for it under rc_mu. */
static pthread_mutex_t rc_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rc_cv = PTHREAD_COND_INITIALIZER;
static cinfer_status *respond_rc;
static bool respond_returned;

static cinfer_status *gpu_exec(void *inst, cinfer_batch *b) {
  static const float fake[2];
  for (uint32_t k = 0; k < b->n_requests; k++) {
    cinfer_tensor out = {.name = "OUTPUT0", .dtype = CINFER_TYPE_FP32, .ndim = 2,
                         .shape = {1, 2}, .data = fake, .byte_size = sizeof fake,
                         .memory_type = CINFER_MEMORY_GPU, .device_id = 1};
    cinfer_status *rc = cinfer_request_respond(b->requests[k], &out, 1, CINFER_RESPONSE_FINAL, NULL);
    pthread_mutex_lock(&rc_mu);
    respond_rc = rc;
    respond_returned = true;
    pthread_cond_signal(&rc_cv);
    pthread_mutex_unlock(&rc_mu);
  }
  return NULL;
}

static const cinfer_backend_iface gpu_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR, .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "fake_gpu_decoupled", .flags = CINFER_BACKEND_DECOUPLED, .model_load = f_load,
    .model_unload = f_unload, .instance_create = f_icreate, .instance_destroy = f_idestroy,
    .execute = gpu_exec};

static void test_decoupled_gpu_output_refused(void **state) {
  assert_null(cinfer_backend_register(&gpu_backend));
  snprintf(repo, sizeof repo, "/tmp/cinfer-abi-repo-XXXXXX");
  assert_non_null(mkdtemp(repo));
  write_model("gpu", "fake_gpu_decoupled", "TYPE_FP32");
  cinfer_server_options o = {.model_repository = repo, .threads = 2};
  cinfer_server *s;
  assert_null(cinfer_server_create(&o, &s));
  cinfer_model *m;
  assert_null(cinfer_server_model_acquire(s, "gpu", 0, &m));
  assert_true(cinfer_model_is_decoupled(m));
  float x[2] = {1, 2};
  cinfer_tensor in = {.name = "INPUT0", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {1, 2},
                      .data = x, .byte_size = sizeof x};
  cinfer_request *r;
  assert_null(cinfer_request_create(m, &r));
  assert_null(cinfer_request_add_input(r, &in));
  waiter w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  cinfer_request_set_callback(r, on_response, &w);
  assert_null(cinfer_server_infer_async(s, r));
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 60;
  pthread_mutex_lock(&w.mu);
  while (!w.done && pthread_cond_timedwait(&w.cv, &w.mu, &dl) == 0) {
  }
  pthread_mutex_unlock(&w.mu);
  assert_true(w.done);
  /* the client gets the error, the backend gets it back too */
  const cinfer_status *e = cinfer_response_error(w.resp);
  assert_int_equal(cinfer_status_code(e), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(e), "tensor 'OUTPUT0' is in GPU memory");
  assert_contains(cinfer_status_message(e), "device 1");
  pthread_mutex_lock(&rc_mu);
  while (!respond_returned && pthread_cond_timedwait(&rc_cv, &rc_mu, &dl) == 0) {
  }
  pthread_mutex_unlock(&rc_mu);
  assert_true(respond_returned);
  assert_int_equal(cinfer_status_code(respond_rc), CINFER_INVALID_ARG);
  assert_contains(cinfer_status_message(respond_rc), "GPU memory");
  cinfer_status_free(respond_rc);
  assert_int_equal(cinfer_response_output_count(w.resp), 0);
  cinfer_response_free(w.resp);
  cinfer_request_release(r);
  cinfer_model_release(m);
  drain(s);
  cinfer_server_destroy(s);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", repo);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_version_check),
      cmocka_unit_test(test_register_required_members),
      cmocka_unit_test(test_load_shared_object),
      cmocka_unit_test(test_load_wrong_major),
      cmocka_unit_test(test_load_missing),
      cmocka_unit_test(test_load_name_mismatch),
      cmocka_unit_test(test_config_accessors),
      cmocka_unit_test(test_autocomplete_setters),
      cmocka_unit_test(test_tensor_memory_type),
      cmocka_unit_test(test_server_shared_backend),
      cmocka_unit_test(test_decoupled_gpu_output_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
