/* server_test_util.h: helpers shared by the C tests of src/server: a temporary model
 * repository, a "ctl" test backend the test controls (gates that hold an execution until
 * the test opens them, counters of loads, unloads and executions), and synchronous
 * inference over cinfer.h. Every wait is on a condition with a bound (WAIT_S), never a
 * sleep: a bound that passes fails the test, it never makes it pass. */
#ifndef SERVER_TEST_UTIL_H
#define SERVER_TEST_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cinfer/backend.h"
#include "cinfer/cinfer.h"
#include "repo/config.h"

/* Each test file uses some of these helpers. */
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-const-variable"

#define WAIT_S 30 /* upper bound of every wait; reaching it is a failure */

/* ---- temporary repository ------------------------------------------------------------- */

static void tu_write(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tu_write(const char *path, const char *fmt, ...) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    abort();
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fclose(f);
}

/* Writes <repo>/<name>/config.pbtxt (text) and creates version folder <version>. */
static void tu_model(const char *repo, const char *name, int version, const char *text) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", repo, name);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%d", repo, name, version);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/config.pbtxt", repo, name);
  tu_write(p, "%s", text);
}

static void tu_rmtree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) tu_rmtree(p);
      else unlink(p);
    }
    closedir(d);
  }
  rmdir(path);
}

static char *tu_repo(void) {
  char tmpl[] = "/tmp/cinfer-server-test-XXXXXX";
  char *d = mkdtemp(tmpl);
  if (!d) abort();
  return strdup(d);
}

/* ---- the ctl backend ------------------------------------------------------------------ */

/* Identity over FP32 (output i = input i), with controls: a request whose first element
 * equals ctl.gate_value waits in execute until ctl_open() is called. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int loads, unloads, executions, waiting, executed_done;
  bool open;
  float gate_value;
} ctl = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, true, -12345.f};

static void ctl_reset(float gate_value) {
  pthread_mutex_lock(&ctl.mu);
  ctl.open = false;
  ctl.gate_value = gate_value;
  ctl.executions = ctl.waiting = ctl.executed_done = 0;
  pthread_mutex_unlock(&ctl.mu);
}

static void ctl_open(void) {
  pthread_mutex_lock(&ctl.mu);
  ctl.open = true;
  pthread_cond_broadcast(&ctl.cv);
  pthread_mutex_unlock(&ctl.mu);
}

static struct timespec tu_deadline(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += WAIT_S;
  return ts;
}

/* Waits (bounded) until *field >= n, under ctl.mu. Returns false at the bound. */
static bool ctl_wait(int *field, int n) {
  struct timespec dl = tu_deadline();
  pthread_mutex_lock(&ctl.mu);
  int rc = 0;
  while (*field < n && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&ctl.cv, &ctl.mu, &dl);
  bool ok = *field >= n;
  pthread_mutex_unlock(&ctl.mu);
  return ok;
}

static int ctl_get(int *field) {
  pthread_mutex_lock(&ctl.mu);
  int v = *field;
  pthread_mutex_unlock(&ctl.mu);
  return v;
}

static cinfer_status *ctl_load(const cinfer_model_load_info *info, void **model) {
  *model = (void *)info->config;
  pthread_mutex_lock(&ctl.mu);
  ctl.loads++;
  pthread_cond_broadcast(&ctl.cv);
  pthread_mutex_unlock(&ctl.mu);
  return NULL;
}
static void ctl_unload(void *model) {
  (void)model;
  pthread_mutex_lock(&ctl.mu);
  ctl.unloads++;
  pthread_cond_broadcast(&ctl.cv);
  pthread_mutex_unlock(&ctl.mu);
}
static cinfer_status *ctl_inst(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  *inst = model;
  return NULL;
}
static void ctl_inst_destroy(void *inst) { (void)inst; }

static cinfer_status *ctl_execute(void *inst, cinfer_batch *b) {
  (void)inst;
  const cinfer_tensor *in = &b->inputs[0];
  pthread_mutex_lock(&ctl.mu);
  ctl.executions++;
  pthread_cond_broadcast(&ctl.cv);
  if (in->byte_size >= 4 && ((const float *)in->data)[0] == ctl.gate_value) {
    ctl.waiting++;
    pthread_cond_broadcast(&ctl.cv);
    while (!ctl.open) pthread_cond_wait(&ctl.cv, &ctl.mu);
  }
  pthread_mutex_unlock(&ctl.mu);
  void *out;
  cinfer_status *st = cinfer_batch_output(b, "OUTPUT0", in->dtype, in->ndim, in->shape, in->byte_size, &out);
  if (!st) memcpy(out, in->data, in->byte_size);
  pthread_mutex_lock(&ctl.mu);
  ctl.executed_done++;
  pthread_cond_broadcast(&ctl.cv);
  pthread_mutex_unlock(&ctl.mu);
  return st;
}

static const cinfer_backend_iface ctl_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR, .abi_minor = CINFER_BACKEND_ABI_MINOR, .name = "ctl",
    .model_load = ctl_load, .model_unload = ctl_unload, .instance_create = ctl_inst,
    .instance_destroy = ctl_inst_destroy, .execute = ctl_execute};

/* ---- requests ------------------------------------------------------------------------- */

typedef struct tu_call {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  cinfer_code code;
  char msg[512];
  float out[8];
  uint32_t n_out;
  int order;            /* completion order (from tu_order) */
} tu_call;

static _Atomic int tu_order;

static void tu_cb(void *user, cinfer_response *resp, uint32_t flags) {
  tu_call *c = user;
  const cinfer_status *e = cinfer_response_error(resp);
  pthread_mutex_lock(&c->mu);
  c->code = cinfer_status_code(e);
  snprintf(c->msg, sizeof c->msg, "%s", cinfer_status_message(e));
  if (!e && cinfer_response_output_count(resp) > 0) {
    const cinfer_tensor *t = cinfer_response_output(resp, 0);
    c->n_out = (uint32_t)(t->byte_size / 4 < 8 ? t->byte_size / 4 : 8);
    memcpy(c->out, t->data, c->n_out * 4);
  }
  if (flags & CINFER_RESPONSE_FINAL) {
    c->done = true;
    c->order = atomic_fetch_add(&tu_order, 1);
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  cinfer_response_free(resp);
}

static void tu_call_init(tu_call *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
}

static bool tu_call_wait(tu_call *c) {
  struct timespec dl = tu_deadline();
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  while (!c->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&c->cv, &c->mu, &dl);
  bool ok = c->done;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

static bool tu_call_done(tu_call *c) {
  pthread_mutex_lock(&c->mu);
  bool d = c->done;
  pthread_mutex_unlock(&c->mu);
  return d;
}

/* Submits [1, 2] FP32 {x, x+1} to model `name` (latest version); the request is returned
 * (the caller's reference) or NULL when acquire/submit failed (*st set). */
static cinfer_request *tu_submit(cinfer_server *s, const char *name, float x, uint32_t priority,
                                 tu_call *c, cinfer_status **st) {
  cinfer_model *m = NULL;
  *st = cinfer_server_model_acquire(s, name, -1, &m);
  if (*st) return NULL;
  cinfer_request *r = NULL;
  *st = cinfer_request_create(m, &r);
  cinfer_model_release(m); /* the request holds its own reference */
  if (*st) return NULL;
  float *data = malloc(2 * sizeof *data);
  data[0] = x;
  data[1] = x + 1;
  cinfer_tensor t = {.name = "INPUT0", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {1, 2},
                     .data = data, .byte_size = 8};
  if ((*st = cinfer_request_add_input_owned(r, &t, data))) {
    free(data);
    cinfer_request_release(r);
    return NULL;
  }
  if (priority) {
    *st = cinfer_request_set_param_int(r, "priority", priority);
    if (*st) {
      cinfer_request_release(r);
      return NULL;
    }
  }
  cinfer_request_set_callback(r, tu_cb, c);
  if ((*st = cinfer_server_infer_async(s, r))) {
    cinfer_request_release(r);
    return NULL;
  }
  return r;
}

static cinfer_server *tu_server(const char *repo, cinfer_model_control mode, int poll_secs) {
  cinfer_server_options o = {.model_repository = repo, .control_mode = mode,
                             .repository_poll_secs = poll_secs, .threads = 4};
  cinfer_server *s = NULL;
  cinfer_status *st = cinfer_server_create(&o, &s);
  if (st) {
    fprintf(stderr, "server: %s\n", cinfer_status_message(st));
    abort();
  }
  return s;
}

/* The state of version v of `name` in the repository index ("" when absent). */
static const char *tu_state(cinfer_server *s, const char *name, int64_t v, char *reason, size_t rn) {
  cinfer_model_index_entry *e;
  size_t n;
  const char *state = "";
  if (cinfer_server_repository_index(s, false, &e, &n)) return state;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(e[i].name, name) && e[i].version == v) {
      state = e[i].state; /* static */
      if (reason) snprintf(reason, rn, "%s", e[i].reason);
    }
  cinfer_model_index_free(e, n);
  return state;
}

/* ---- allocation-failure tests (test_server_oom.c, test_ensemble_oom.c) ----------------- */

/* The metric lines of model `name` (values excluded), as one string (malloc'd). */
static char *tu_model_series(cinfer_server *s, const char *name) {
  char *t = NULL, label[256];
  size_t n = 0;
  snprintf(label, sizeof label, "model=\"%s\"", name);
  assert_null(cinfer_server_metrics_text(s, &t, &n));
  char *out = calloc(1, n + 1), *o = out;
  for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strstr(line, label)) continue;
    char *sp = strrchr(line, ' ');
    size_t l = sp ? (size_t)(sp - line) : strlen(line);
    memcpy(o, line, l);
    o += l;
    *o++ = '\n';
  }
  free(t);
  return out;
}

/* Unloads `name` and waits (bounded) until the reaper has destroyed its version 1. */
static void tu_unload_wait(cinfer_server *s, const char *name) {
  assert_null(cinfer_server_unload_model(s, name));
  for (long i = 0; i < 10000000 && !strcmp(tu_state(s, name, 1, NULL, 0), "UNLOADING"); i++) sched_yield();
  assert_string_equal(tu_state(s, name, 1, NULL, 0), "UNAVAILABLE");
}

#endif
