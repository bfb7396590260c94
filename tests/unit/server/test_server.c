/* test_server.c: the server core (src/server) through cinfer.h, with the identity and sim
 * backends and a test-controlled "ctl" backend (server_test_util.h): reload (repeated, and
 * under load), the poll-mode reaper, destroy while a request is in flight, preserve_ordering,
 * cancel of a queued request, priority queue policies past the old 16-entry cut, model
 * control refusals, load-with-config, and configuration that must fail the load. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "server_test_util.h"
#include "server/internal.h" /* white-box: the loaded model's parsed config */

static const char *const ID_CFG =
    "name: \"%s\"\nbackend: \"%s\"\nmax_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n%s";

static void model_cfg(const char *repo, const char *name, const char *backend, const char *extra) {
  char text[8192];
  snprintf(text, sizeof text, ID_CFG, name, backend, extra);
  tu_model(repo, name, 1, text);
}

/* Rewrites name's config.pbtxt with a parameter edit = k: an explicit load of an unchanged
 * model is a no-op, and a version whose files and config are unchanged is kept, as in
 * Triton, so a test that reloads changes the config first. */
static void model_cfg_edit(const char *repo, const char *name, const char *backend, const char *extra,
                           int k) {
  char text[8192], p[4096];
  int n = snprintf(text, sizeof text, ID_CFG, name, backend, extra);
  snprintf(text + n, sizeof text - (size_t)n, "parameters { key: \"edit\" value: { string_value: \"%d\" } }\n", k);
  snprintf(p, sizeof p, "%s/%s/config.pbtxt", repo, name);
  tu_write(p, "%s", text);
}

static void infer_ok(cinfer_server *s, const char *name, float x);

static cinfer_model *version_model(cinfer_server *s, const char *name, int64_t v) {
  cinfer_model *m = NULL;
  cinfer_status *st = cinfer_server_model_acquire(s, name, v, &m);
  if (st) fail_msg("%s v%lld: %s", name, (long long)v, cinfer_status_message(st));
  cinfer_model_release(m); /* the table holds it while READY: the address identifies it */
  return m;
}

/* Triton's per-version rule (AsyncLoad): a reload of a changed model loads only the versions
 * whose folder, shared files or configuration changed; the others stay as they are. */
static void test_reload_keeps_unchanged_versions(void **state) {
  (void)state;
  char *repo = tu_repo();
  const char *all = "version_policy: { all { } }\n";
  model_cfg(repo, "v", "ctl", all);
  ctl_reset(-1);
  ctl_open();
  int loads0 = ctl_get(&ctl.loads);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, "v", NULL));
  cinfer_model *v1 = version_model(s, "v", 1);
  char p[4096], text[8192];
  /* a comment in config.pbtxt: the file changed, the configuration did not */
  snprintf(p, sizeof p, "%s/v/config.pbtxt", repo);
  snprintf(text, sizeof text, ID_CFG, "v", "ctl", all);
  tu_write(p, "%s# a comment\n", text);
  assert_null(cinfer_server_load_model(s, "v", NULL));
  assert_ptr_equal(version_model(s, "v", 1), v1);
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 1);
  /* a new version folder: version 2 loads, version 1 stays */
  snprintf(p, sizeof p, "%s/v/2", repo);
  assert_int_equal(mkdir(p, 0755), 0);
  assert_null(cinfer_server_load_model(s, "v", NULL));
  assert_ptr_equal(version_model(s, "v", 1), v1);
  cinfer_model *v2 = version_model(s, "v", 2);
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 2);
  /* a file in version 2's folder: version 2 alone reloads */
  snprintf(p, sizeof p, "%s/v/2/weights.bin", repo);
  tu_write(p, "w");
  assert_null(cinfer_server_load_model(s, "v", NULL));
  assert_ptr_equal(version_model(s, "v", 1), v1);
  assert_ptr_not_equal(version_model(s, "v", 2), v2);
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 3);
  /* a shared file beside the config: both reload */
  snprintf(p, sizeof p, "%s/v/labels.txt", repo);
  tu_write(p, "a\nb\n");
  assert_null(cinfer_server_load_model(s, "v", NULL));
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 5);
  v1 = version_model(s, "v", 1);
  v2 = version_model(s, "v", 2);
  /* a change of the configuration: both reload */
  model_cfg_edit(repo, "v", "ctl", all, 1);
  assert_null(cinfer_server_load_model(s, "v", NULL));
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 7);
  assert_ptr_not_equal(version_model(s, "v", 1), v1);
  infer_ok(s, "v", 2);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

static bool metrics_has(cinfer_server *s, const char *needle) {
  char *t = NULL;
  size_t n = 0;
  cinfer_status *st = cinfer_server_metrics_text(s, &t, &n);
  assert_null(st);
  bool has = strstr(t, needle) != NULL;
  free(t);
  return has;
}

static void infer_ok(cinfer_server *s, const char *name, float x) {
  tu_call c;
  tu_call_init(&c);
  cinfer_status *st;
  cinfer_request *r = tu_submit(s, name, x, 0, &c, &st);
  if (!r) fail_msg("submit: %s", cinfer_status_message(st));
  assert_true(tu_call_wait(&c));
  if (c.code != CINFER_OK) fail_msg("infer: %s", c.msg);
  assert_int_equal(c.n_out, 2);
  assert_true(c.out[0] == x && c.out[1] == x + 1);
  cinfer_request_release(r);
}

/* Issue 15: the second reload crashed (the new version got the old one's metric series,
 * destroying the old version freed them, the next destroy freed them again). The series
 * must survive each destroyed predecessor, and every load is matched by an unload. Each
 * reload follows a change of the config; a load with nothing changed loads nothing. */
static void test_reload_repeatedly(void **state) {
  (void)state;
  char *repo = tu_repo();
  model_cfg(repo, "m", "ctl", "");
  ctl_reset(-1);
  ctl_open();
  int loads0 = ctl_get(&ctl.loads), unloads0 = ctl_get(&ctl.unloads);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, "m", NULL));
  for (int i = 1; i <= 3; i++) {
    infer_ok(s, "m", (float)i);
    assert_null(cinfer_server_load_model(s, "m", NULL)); /* unchanged: nothing happens */
    assert_int_equal(ctl_get(&ctl.loads) - loads0, i);
    model_cfg_edit(repo, "m", "ctl", "", i);
    assert_null(cinfer_server_load_model(s, "m", NULL)); /* reload */
    /* the reaper destroys the version the reload replaced */
    assert_true(ctl_wait(&ctl.unloads, unloads0 + i));
    assert_true(metrics_has(s, "cinfer_request_success_total{model=\"m\",version=\"1\"}"));
    assert_string_equal(tu_state(s, "m", 1, NULL, 0), "READY");
  }
  infer_ok(s, "m", 9);
  cinfer_server_destroy(s);
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 4);
  assert_int_equal(ctl_get(&ctl.unloads) - unloads0, 4);
  tu_rmtree(repo);
  free(repo);
}

/* Reload under load: client threads submit without pause while the main thread reloads;
 * every request succeeds with its own data (identity and sim backends). */
typedef struct load_arg {
  cinfer_server *s;
  const char *model;
  atomic_bool *stop;
  int id, ok, failed;
  char first_error[256];
} load_arg;

static void *load_client(void *p) {
  load_arg *a = p;
  for (int i = 0; !atomic_load(a->stop) || i < 20; i++) {
    tu_call c;
    tu_call_init(&c);
    cinfer_status *st;
    float x = (float)(a->id * 100000 + i);
    cinfer_request *r = tu_submit(a->s, a->model, x, 0, &c, &st);
    bool good = false;
    if (r && tu_call_wait(&c)) {
      good = c.code == CINFER_OK && c.n_out >= 1; /* sim: a -1 dim becomes 1 */
      if (!good && !a->first_error[0]) snprintf(a->first_error, sizeof a->first_error, "%s", c.msg);
      /* identity echoes; sim fills a pattern, so only the count is checked there */
      if (good && !strcmp(a->model, "id")) good = c.n_out == 2 && c.out[0] == x && c.out[1] == x + 1;
    } else if (!r && !a->first_error[0]) {
      snprintf(a->first_error, sizeof a->first_error, "%s", cinfer_status_message(st));
    }
    cinfer_status_free(st);
    if (r) cinfer_request_release(r);
    if (good) a->ok++;
    else a->failed++;
  }
  return NULL;
}

static void reload_under_load(const char *model, const char *backend, const char *extra) {
  char *repo = tu_repo();
  model_cfg(repo, model, backend, extra);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, model, NULL));
  enum { NT = 4 };
  pthread_t th[NT];
  load_arg args[NT];
  atomic_bool stop = false;
  for (int i = 0; i < NT; i++) {
    args[i] = (load_arg){.s = s, .model = model, .stop = &stop, .id = i};
    assert_int_equal(pthread_create(&th[i], NULL, load_client, &args[i]), 0);
  }
  cinfer_model *prev = NULL, *now;
  assert_null(cinfer_server_model_acquire(s, model, -1, &prev));
  for (int k = 0; k < 15; k++) {
    model_cfg_edit(repo, model, backend, extra, k + 1); /* a change, so that it reloads */
    cinfer_status *st = cinfer_server_load_model(s, model, NULL);
    if (st) fail_msg("reload %d: %s", k, cinfer_status_message(st));
    assert_null(cinfer_server_model_acquire(s, model, -1, &now));
    assert_ptr_not_equal(prev, now); /* a new model (prev is held, so its address is taken) */
    cinfer_model_release(prev);
    prev = now;
  }
  cinfer_model_release(prev);
  atomic_store(&stop, true);
  int ok = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    if (args[i].failed) fail_msg("client %d: %d failed (%s)", i, args[i].failed, args[i].first_error);
    ok += args[i].ok;
  }
  assert_true(ok >= NT * 20);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

static void test_reload_under_load_identity(void **state) {
  (void)state;
  reload_under_load("id", "identity", "dynamic_batching { }\n");
}

static void test_reload_under_load_sim(void **state) {
  (void)state;
  reload_under_load("sm", "sim",
                    "dynamic_batching { }\ninstance_group [ { count: 2 kind: KIND_GPU gpus: [ 7 ] } ]\n"
                    "parameters { key: \"base_us\" value: { string_value: \"200\" } }\n"
                    "parameters { key: \"per_item_us\" value: { string_value: \"10\" } }\n"
                    "parameters { key: \"device_concurrency\" value: { string_value: \"2\" } }\n");
}

/* Poll mode: an edited config reloads the model and the reaper destroys the old version
 * while the server runs (not only at destroy). */
static void test_poll_reaper_destroys_old_version(void **state) {
  (void)state;
  char *repo = tu_repo();
  model_cfg(repo, "p", "ctl", "");
  ctl_reset(-1);
  ctl_open();
  int loads0 = ctl_get(&ctl.loads), unloads0 = ctl_get(&ctl.unloads);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_POLL, 1);
  assert_int_equal(ctl_get(&ctl.loads), loads0 + 1);
  infer_ok(s, "p", 1);
  for (int edit = 1; edit <= 2; edit++) {
    char extra[128];
    snprintf(extra, sizeof extra, "parameters { key: \"edit\" value: { string_value: \"%d%s\" } }\n",
             edit, edit == 2 ? " (a longer value, so the size changes too)" : "");
    model_cfg(repo, "p", "ctl", extra);
    assert_true(ctl_wait(&ctl.loads, loads0 + 1 + edit));     /* the poller reloaded it */
    assert_true(ctl_wait(&ctl.unloads, unloads0 + edit));     /* and the old one is gone */
    infer_ok(s, "p", (float)edit);
  }
  cinfer_server_destroy(s);
  assert_int_equal(ctl_get(&ctl.unloads) - unloads0, ctl_get(&ctl.loads) - loads0);
  tu_rmtree(repo);
  free(repo);
}

/* Destroy while a request is still executing (poll mode: the poller's stop flag used to be
 * the reaper's, so the reaper could exit before the in-flight request released its model,
 * which was then never destroyed). destroy must wait and destroy every model. */
typedef struct destroy_arg {
  cinfer_server *s;
} destroy_arg;
static void *destroy_main(void *p) {
  cinfer_server_destroy(((destroy_arg *)p)->s);
  return NULL;
}

static void destroy_with_request_in_flight(cinfer_model_control mode) {
  char *repo = tu_repo();
  model_cfg(repo, "d", "ctl", "");
  ctl_reset(-7);
  int loads0 = ctl_get(&ctl.loads), unloads0 = ctl_get(&ctl.unloads);
  cinfer_server *s = tu_server(repo, mode, 1);
  if (mode == CINFER_MODEL_CONTROL_EXPLICIT) assert_null(cinfer_server_load_model(s, "d", NULL));
  tu_call c;
  tu_call_init(&c);
  cinfer_status *st;
  cinfer_request *r = tu_submit(s, "d", -7, 0, &c, &st);
  assert_non_null(r);
  assert_true(ctl_wait(&ctl.waiting, 1)); /* executing, held by the gate */
  pthread_t t;
  destroy_arg da = {s};
  assert_int_equal(pthread_create(&t, NULL, destroy_main, &da), 0);
  /* The version leaves the table (UNLOADING) but cannot be destroyed yet. */
  for (int i = 0; i < 1000000 && strcmp(tu_state(s, "d", 1, NULL, 0), "UNLOADING"); i++) sched_yield();
  assert_string_equal(tu_state(s, "d", 1, NULL, 0), "UNLOADING");
  assert_int_equal(ctl_get(&ctl.unloads), unloads0);
  ctl_open();
  assert_true(tu_call_wait(&c));
  assert_int_equal(c.code, CINFER_OK);
  cinfer_request_release(r); /* the last reference: the reaper destroys the model */
  pthread_join(t, NULL);
  assert_int_equal(ctl_get(&ctl.loads) - loads0, 1);
  assert_int_equal(ctl_get(&ctl.unloads) - unloads0, 1);
  tu_rmtree(repo);
  free(repo);
}

static void test_destroy_waits_for_in_flight_poll(void **state) {
  (void)state;
  destroy_with_request_in_flight(CINFER_MODEL_CONTROL_POLL);
}
static void test_destroy_waits_for_in_flight_explicit(void **state) {
  (void)state;
  destroy_with_request_in_flight(CINFER_MODEL_CONTROL_EXPLICIT);
}

/* preserve_ordering: with two instances, a later request that finishes first waits for the
 * earlier one's response. */
static void test_preserve_ordering(void **state) {
  (void)state;
  char *repo = tu_repo();
  model_cfg(repo, "o", "ctl",
            "dynamic_batching { preserve_ordering: true }\n"
            "instance_group [ { count: 2 kind: KIND_CPU } ]\n");
  ctl_reset(-5);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, "o", NULL));
  tu_call a, b;
  tu_call_init(&a);
  tu_call_init(&b);
  cinfer_status *st;
  cinfer_request *ra = tu_submit(s, "o", -5, 0, &a, &st); /* held by the gate */
  assert_non_null(ra);
  assert_true(ctl_wait(&ctl.waiting, 1));
  cinfer_request *rb = tu_submit(s, "o", 3, 0, &b, &st); /* the other instance runs it */
  assert_non_null(rb);
  assert_true(ctl_wait(&ctl.executed_done, 1)); /* b has executed ... */
  assert_false(tu_call_done(&b));               /* ... but its response is held */
  ctl_open();
  assert_true(tu_call_wait(&a));
  assert_true(tu_call_wait(&b));
  assert_int_equal(a.code, CINFER_OK);
  assert_int_equal(b.code, CINFER_OK);
  assert_true(a.order < b.order);
  assert_true(b.out[0] == 3);
  cinfer_request_release(ra);
  cinfer_request_release(rb);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* A request cancelled while queued never reaches the backend and completes CANCELLED. */
static void test_cancel_queued_request(void **state) {
  (void)state;
  char *repo = tu_repo();
  model_cfg(repo, "c", "ctl", "instance_group [ { count: 1 kind: KIND_CPU } ]\n");
  ctl_reset(-3);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  assert_null(cinfer_server_load_model(s, "c", NULL));
  tu_call a, b;
  tu_call_init(&a);
  tu_call_init(&b);
  cinfer_status *st;
  cinfer_request *ra = tu_submit(s, "c", -3, 0, &a, &st);
  assert_true(ctl_wait(&ctl.waiting, 1)); /* the only instance is busy */
  cinfer_request *rb = tu_submit(s, "c", 4, 0, &b, &st); /* queued behind it */
  assert_non_null(rb);
  cinfer_request_cancel(rb);
  ctl_open();
  assert_true(tu_call_wait(&a));
  assert_true(tu_call_wait(&b));
  assert_int_equal(a.code, CINFER_OK);
  assert_int_equal(b.code, CINFER_CANCELLED);
  assert_int_equal(ctl_get(&ctl.executions), 1); /* b never executed */
  cinfer_model_stats *ms;
  size_t n;
  assert_null(cinfer_server_model_stats(s, "c", -1, &ms, &n));
  assert_int_equal(n, 1);
  assert_int_equal(ms[0].success.count, 1);
  assert_int_equal(ms[0].fail.count, 1);
  free(ms);
  cinfer_request_release(ra);
  cinfer_request_release(rb);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* Issue 15: priority queue policies past the 16th were silently dropped (cfgview.c). The
 * policy of level 20 (max_queue_size 1) must apply. */
static void test_priority_policy_past_16(void **state) {
  (void)state;
  char extra[8192];
  size_t off = (size_t)snprintf(extra, sizeof extra,
                                "dynamic_batching {\n  priority_levels: 20\n  default_priority_level: 1\n");
  for (int l = 1; l <= 20; l++)
    off += (size_t)snprintf(extra + off, sizeof extra - off,
                            "  priority_queue_policy { key: %d value: { max_queue_size: %d } }\n", l,
                            l == 20 ? 1 : 100);
  snprintf(extra + off, sizeof extra - off, "}\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n");
  char *repo = tu_repo();
  model_cfg(repo, "q", "ctl", extra);
  ctl_reset(-9);
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  cinfer_status *st = cinfer_server_load_model(s, "q", NULL);
  if (st) fail_msg("%s", cinfer_status_message(st));
  tu_call a, b, c;
  tu_call_init(&a);
  tu_call_init(&b);
  tu_call_init(&c);
  cinfer_request *ra = tu_submit(s, "q", -9, 1, &a, &st);
  assert_non_null(ra);
  assert_true(ctl_wait(&ctl.waiting, 1));
  cinfer_request *rb = tu_submit(s, "q", 1, 20, &b, &st); /* fills level 20's queue */
  assert_non_null(rb);
  cinfer_request *rc = tu_submit(s, "q", 2, 20, &c, &st); /* over its max_queue_size */
  assert_null(rc);
  assert_int_equal(cinfer_status_code(st), CINFER_UNAVAILABLE);
  cinfer_status_free(st);
  ctl_open();
  assert_true(tu_call_wait(&a));
  assert_true(tu_call_wait(&b));
  assert_int_equal(b.code, CINFER_OK);
  cinfer_request_release(ra);
  cinfer_request_release(rb);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* Model control: outside explicit mode load/unload are refused as Triton refuses them. */
static void test_control_refused_unless_explicit(void **state) {
  (void)state;
  char *repo = tu_repo();
  model_cfg(repo, "n", "identity", "");
  cinfer_model_control modes[] = {CINFER_MODEL_CONTROL_NONE, CINFER_MODEL_CONTROL_POLL};
  for (int i = 0; i < 2; i++) {
    cinfer_server *s = tu_server(repo, modes[i], 60);
    cinfer_status *st = cinfer_server_load_model(s, "n", NULL);
    assert_int_equal(cinfer_status_code(st), CINFER_UNAVAILABLE);
    assert_int_equal(cinfer_code_http_status(cinfer_status_code(st)), 503);
    assert_non_null(strstr(cinfer_status_message(st),
                           "explicit model load / unload is not allowed if polling is enabled"));
    cinfer_status_free(st);
    st = cinfer_server_unload_model(s, "n");
    assert_int_equal(cinfer_status_code(st), CINFER_UNAVAILABLE);
    cinfer_status_free(st);
    infer_ok(s, "n", 2); /* loaded at start, untouched */
    cinfer_server_destroy(s);
  }
  tu_rmtree(repo);
  free(repo);
}

/* Load-with-config (cinfer.h's config_json): the JSON replaces config.pbtxt for the load. */
static void test_load_with_config_json(void **state) {
  (void)state;
  char *repo = tu_repo();
  model_cfg(repo, "j", "identity", "");
  cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
  const char *json =
      "{\"name\":\"j\",\"backend\":\"identity\",\"max_batch_size\":\"3\","
      "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
      "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_FP32\",\"dims\":[\"-1\"]}],"
      "\"dynamic_batching\":{\"max_queue_delay_microseconds\":\"100\",\"priority_levels\":2,"
      "\"default_priority_level\":1,\"priority_queue_policy\":{\"2\":{\"max_queue_size\":4,"
      "\"timeout_action\":\"DELAY\"}}},"
      "\"instance_group\":[{\"kind\":\"KIND_CPU\",\"count\":2}],"
      "\"parameters\":{\"k\":{\"string_value\":\"v\"}},\"model_warmup\":[],\"optimization\":null}";
  cinfer_status *st = cinfer_server_load_model(s, "j", json);
  if (st) fail_msg("%s", cinfer_status_message(st));
  cinfer_model *m;
  assert_null(cinfer_server_model_acquire(s, "j", -1, &m));
  const cinfer_model_config *c = m->config;
  assert_int_equal(c->max_batch_size, 3);
  assert_int_equal(c->n_instance_groups, 1);
  assert_int_equal(c->instance_groups[0].count, 2);
  assert_int_equal(c->dynamic_batching.n_priority_queue_policy, 1);
  assert_int_equal(c->dynamic_batching.priority_queue_policy[0].level, 2);
  assert_int_equal(c->dynamic_batching.priority_queue_policy[0].policy.timeout_action, MODEL_TIMEOUT_DELAY);
  assert_string_equal(model_config_parameter(c, "k"), "v");
  /* Round trip: the JSON form of the loaded config loads back to the same JSON. */
  char *again = model_config_to_json(c);
  cinfer_model_release(m);
  assert_null(cinfer_server_load_model(s, "j", again));
  assert_null(cinfer_server_model_acquire(s, "j", -1, &m));
  char *third = cinfer_config_json(cinfer_model_config_get(m), NULL);
  assert_string_equal(again, third);
  cinfer_model_release(m);
  free(again);
  free(third);
  infer_ok(s, "j", 5);
  /* Bad JSON configs fail with a message naming the field; the loaded version stays. */
  static const struct { const char *json, *want; } bad[] = {
      {"{\"name\":\"j\",\"backend\":\"identity\",\"max_batch_size\":true}", "max_batch_size"},
      {"{\"name\":\"other\",\"backend\":\"identity\"}", "does not match"},
      {"{\"name\":\"j\",\"backend\":\"identity\",\"bogus\":1}", "unknown field 'bogus'"},
      {"[1,2]", "must be a JSON object"},
      {"{\"name\":", "not valid JSON"},
      {"{\"name\":\"j\",\"backend\":\"identity\",\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_NOPE\"}]}",
       "TYPE_NOPE"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    st = cinfer_server_load_model(s, "j", bad[i].json);
    assert_non_null(st);
    if (!strstr(cinfer_status_message(st), bad[i].want))
      fail_msg("%s: '%s' does not name '%s'", bad[i].json, cinfer_status_message(st), bad[i].want);
    cinfer_status_free(st);
    assert_string_equal(tu_state(s, "j", 1, NULL, 0), "READY");
  }
  infer_ok(s, "j", 6);
  /* Triton's rule (test_config_override): a load without config of an unchanged model
   * keeps it as it is, the override included (max_batch_size 3, not config.pbtxt's 8), and
   * so does one after the failed override loads above. */
  cinfer_model *before, *after;
  assert_null(cinfer_server_model_acquire(s, "j", -1, &before));
  assert_null(cinfer_server_load_model(s, "j", NULL));
  assert_null(cinfer_server_model_acquire(s, "j", -1, &after));
  assert_ptr_equal(before, after);
  assert_int_equal(after->config->max_batch_size, 3);
  cinfer_model_release(after);
  /* a file changed: the load reads config.pbtxt again */
  model_cfg_edit(repo, "j", "identity", "", 1);
  assert_null(cinfer_server_load_model(s, "j", NULL));
  assert_null(cinfer_server_model_acquire(s, "j", -1, &after));
  assert_ptr_not_equal(before, after);
  assert_int_equal(after->config->max_batch_size, 8);
  cinfer_model_release(after);
  cinfer_model_release(before);
  /* a load with config always loads; a version whose files and config are the same stays
   * (Triton updates such a version in place) */
  assert_null(cinfer_server_model_acquire(s, "j", -1, &before));
  assert_null(cinfer_server_load_model(s, "j", json));
  assert_null(cinfer_server_model_acquire(s, "j", -1, &after));
  assert_ptr_not_equal(before, after);
  assert_int_equal(after->config->max_batch_size, 3);
  cinfer_model_release(before);
  before = after;
  assert_null(cinfer_server_load_model(s, "j", json));
  assert_null(cinfer_server_model_acquire(s, "j", -1, &after));
  assert_ptr_equal(before, after);
  cinfer_model_release(before);
  cinfer_model_release(after);
  /* an unload forgets it: the next load reads config.pbtxt */
  assert_null(cinfer_server_unload_model(s, "j"));
  assert_null(cinfer_server_load_model(s, "j", NULL));
  assert_null(cinfer_server_model_acquire(s, "j", -1, &after));
  assert_int_equal(after->config->max_batch_size, 8);
  cinfer_model_release(after);
  infer_ok(s, "j", 7);
  cinfer_server_destroy(s);
  tu_rmtree(repo);
  free(repo);
}

/* Configuration that parses but is not implemented fails the load naming the field
 * (tests/data/configs/unsupported: each file's first line is "# FIELD"). */
static void test_unsupported_configs_fail_the_load(void **state) {
  (void)state;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/unsupported", CINFER_CONFIG_DIR);
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 7 || strcmp(e->d_name + l - 6, ".pbtxt")) continue;
    char path[2048], text[8192], field[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    assert_int_equal(sscanf(text, "# %255[^\n]", field), 1);
    char *repo = tu_repo();
    tu_model(repo, "u", 1, text);
    cinfer_server *s = tu_server(repo, CINFER_MODEL_CONTROL_EXPLICIT, 0);
    cinfer_status *st = cinfer_server_load_model(s, "u", NULL);
    if (!st) fail_msg("%s: loaded, but '%s' is not implemented", e->d_name, field);
    if (!strstr(cinfer_status_message(st), field))
      fail_msg("%s: '%s' does not name '%s'", e->d_name, cinfer_status_message(st), field);
    cinfer_status_free(st);
    char reason[1024];
    assert_string_equal(tu_state(s, "u", 1, reason, sizeof reason), "UNAVAILABLE");
    assert_non_null(strstr(reason, field)); /* the index's reason names it too */
    cinfer_server_destroy(s);
    tu_rmtree(repo);
    free(repo);
    n++;
  }
  closedir(d);
  assert_true(n >= 8);
}

int main(void) {
  assert_null(cinfer_backend_register(&ctl_backend));
  if (getenv("CINFER_TEST_FILTER")) cmocka_set_test_filter(getenv("CINFER_TEST_FILTER")); /* e.g. "*cancel*" */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reload_repeatedly),
      cmocka_unit_test(test_reload_under_load_identity),
      cmocka_unit_test(test_reload_under_load_sim),
      cmocka_unit_test(test_poll_reaper_destroys_old_version),
      cmocka_unit_test(test_destroy_waits_for_in_flight_poll),
      cmocka_unit_test(test_destroy_waits_for_in_flight_explicit),
      cmocka_unit_test(test_preserve_ordering),
      cmocka_unit_test(test_cancel_queued_request),
      cmocka_unit_test(test_priority_policy_past_16),
      cmocka_unit_test(test_control_refused_unless_explicit),
      cmocka_unit_test(test_load_with_config_json),
      cmocka_unit_test(test_reload_keeps_unchanged_versions),
      cmocka_unit_test(test_unsupported_configs_fail_the_load),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
