/* test_apigroup.c: every HTTP route Triton (and cinfer, and the OpenAI API) has, classified
 * into its --http-restricted-api group, as one table; path splitting the way the server
 * splits (so a request cannot be classified as one route and executed as another); the
 * restriction flag parser and the header check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "net/apigroup.h"

typedef struct row {
  http_method method;
  const char *path;
  api_group group;
  const char *model;
  bool listing;
} row;

static const row rows[] = {
    /* health */
    {HTTP_GET, "/v2/health/live", API_HEALTH, "", false},
    {HTTP_GET, "/v2/health/ready", API_HEALTH, "", false},
    {HTTP_GET, "/v2/models/ident/ready", API_HEALTH, "ident", false},
    {HTTP_GET, "/v2/models/ident/versions/3/ready", API_HEALTH, "ident", false},
    /* metadata */
    {HTTP_GET, "/v2", API_METADATA, "", false},
    {HTTP_GET, "/v2/models/ident", API_METADATA, "ident", false},
    {HTTP_GET, "/v2/models/ident/versions/2", API_METADATA, "ident", false},
    {HTTP_GET, "/v1/models", API_METADATA, "", true},
    {HTTP_GET, "/v1/models/smollm2", API_METADATA, "smollm2", false},
    /* inference */
    {HTTP_POST, "/v2/models/ident/infer", API_INFERENCE, "ident", false},
    {HTTP_POST, "/v2/models/ident/versions/1/infer", API_INFERENCE, "ident", false},
    {HTTP_POST, "/v2/models/llm/generate", API_INFERENCE, "llm", false},
    {HTTP_POST, "/v2/models/llm/generate_stream", API_INFERENCE, "llm", false},
    {HTTP_POST, "/v2/models/llm/versions/1/generate_stream", API_INFERENCE, "llm", false},
    {HTTP_POST, "/v1/completions", API_INFERENCE, "", false},
    {HTTP_POST, "/v1/chat/completions", API_INFERENCE, "", false},
    {HTTP_POST, "/v1/embeddings", API_INFERENCE, "", false},
    {HTTP_POST, "/tokenize", API_INFERENCE, "", false},
    {HTTP_POST, "/detokenize", API_INFERENCE, "", false},
    /* model-config */
    {HTTP_GET, "/v2/models/ident/config", API_MODEL_CONFIG, "ident", false},
    {HTTP_GET, "/v2/models/ident/versions/1/config", API_MODEL_CONFIG, "ident", false},
    /* model-repository */
    {HTTP_POST, "/v2/repository/index", API_MODEL_REPOSITORY, "", true},
    {HTTP_POST, "/v2/repository/models/ident/load", API_MODEL_REPOSITORY, "ident", false},
    {HTTP_POST, "/v2/repository/models/ident/unload", API_MODEL_REPOSITORY, "ident", false},
    /* statistics */
    {HTTP_GET, "/v2/models/stats", API_STATISTICS, "", false},
    {HTTP_GET, "/v2/models/ident/stats", API_STATISTICS, "ident", false},
    {HTTP_GET, "/v2/models/ident/versions/1/stats", API_STATISTICS, "ident", false},
    /* trace */
    {HTTP_GET, "/v2/trace/setting", API_TRACE, "", false},
    {HTTP_POST, "/v2/trace/setting", API_TRACE, "", false},
    {HTTP_POST, "/v2/models/ident/trace/setting", API_TRACE, "ident", false},
    {HTTP_GET, "/v2/models/ident/versions/1/trace/setting", API_TRACE, "ident", false},
    /* logging */
    {HTTP_GET, "/v2/logging", API_LOGGING, "", false},
    {HTTP_POST, "/v2/logging", API_LOGGING, "", false},
    /* shared memory */
    {HTTP_GET, "/v2/systemsharedmemory/status", API_SHARED_MEMORY, "", false},
    {HTTP_GET, "/v2/systemsharedmemory/region/r0/status", API_SHARED_MEMORY, "", false},
    {HTTP_POST, "/v2/systemsharedmemory/region/r0/register", API_SHARED_MEMORY, "", false},
    {HTTP_POST, "/v2/systemsharedmemory/region/r0/unregister", API_SHARED_MEMORY, "", false},
    {HTTP_POST, "/v2/systemsharedmemory/unregister", API_SHARED_MEMORY, "", false},
    {HTTP_GET, "/v2/cudasharedmemory/status", API_SHARED_MEMORY, "", false},
    {HTTP_GET, "/v2/cudasharedmemory/region/g0/status", API_SHARED_MEMORY, "", false},
    {HTTP_POST, "/v2/cudasharedmemory/region/g0/register", API_SHARED_MEMORY, "", false},
    {HTTP_POST, "/v2/cudasharedmemory/region/g0/unregister", API_SHARED_MEMORY, "", false},
    {HTTP_POST, "/v2/cudasharedmemory/unregister", API_SHARED_MEMORY, "", false},
    /* never restricted */
    {HTTP_GET, "/metrics", API_GROUP_NONE, "", false},
    {HTTP_GET, "/health", API_GROUP_NONE, "", false},
    /* split as the server splits: repeated slashes, trailing slash, percent-encoding */
    {HTTP_POST, "//v2/repository//models/ident/unload/", API_MODEL_REPOSITORY, "ident", false},
    {HTTP_POST, "/v2/repository/models/ident/%75nload", API_MODEL_REPOSITORY, "ident", false},
    {HTTP_POST, "/v2/models/my%20model/infer", API_INFERENCE, "my model", false},
    {HTTP_GET, "/v2/%6dodels/stats", API_STATISTICS, "", false},
    /* a model may be called like an action: the position decides */
    {HTTP_GET, "/v2/models/config/config", API_MODEL_CONFIG, "config", false},
    {HTTP_POST, "/v2/models/versions/infer", API_INFERENCE, "versions", false},
    /* not routes */
    {HTTP_GET, "/", API_GROUP_UNKNOWN, "", false},
    {HTTP_GET, "/v2/health", API_GROUP_UNKNOWN, "", false},
    {HTTP_GET, "/v2/health/live/x", API_GROUP_UNKNOWN, "", false},
    {HTTP_GET, "/v2/models", API_GROUP_UNKNOWN, "", false},
    {HTTP_POST, "/v2/models/ident/versions/1/unload", API_GROUP_UNKNOWN, "", false},
    {HTTP_POST, "/v2/repository/models/ident", API_GROUP_UNKNOWN, "", false},
    {HTTP_POST, "/v2/repository/models/ident/load/x", API_GROUP_UNKNOWN, "", false},
    {HTTP_GET, "/v3/models/ident", API_GROUP_UNKNOWN, "", false},
    {HTTP_POST, "/v2/models/a%00b/infer", API_GROUP_UNKNOWN, "", false},
    {HTTP_GET, "/admin/canary", API_GROUP_UNKNOWN, "", false},
};

static void test_every_route(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const row *r = &rows[i];
    api_route got;
    api_classify(r->method, r->path, strlen(r->path), &got);
    if (got.group != r->group || strcmp(got.model, r->model) || got.listing != r->listing)
      fail_msg("%s: got group %s model '%s' listing %d, want %s '%s' %d", r->path,
               api_group_name(got.group), got.model, got.listing, api_group_name(r->group),
               r->model, r->listing);
  }
}

static void test_too_many_or_long_segments_are_unknown(void **st) {
  (void)st;
  char p[2048] = "/v2/models/";
  memset(p + 11, 'a', 300);
  strcpy(p + 311, "/infer");
  api_route got;
  api_classify(HTTP_POST, p, strlen(p), &got);
  assert_int_equal(got.group, API_GROUP_UNKNOWN);
  const char *deep = "/v2/a/b/c/d/e/f/g/h/i/j/k";
  api_classify(HTTP_GET, deep, strlen(deep), &got);
  assert_int_equal(got.group, API_GROUP_UNKNOWN);
}

/* The longest model name (CINFER_MODEL_NAME_MAX bytes) is one segment, plain or
 * percent-encoded, and classifies whole; one byte more fails the split, which says why. */
static void test_model_name_limit(void **st) {
  (void)st;
  static char p[4096], name[CINFER_MODEL_NAME_MAX + 2];
  memset(name, 'n', CINFER_MODEL_NAME_MAX);
  name[CINFER_MODEL_NAME_MAX] = 0;
  snprintf(p, sizeof p, "/v2/models/%s/infer", name);
  api_route got;
  api_classify(HTTP_POST, p, strlen(p), &got);
  assert_int_equal(got.group, API_INFERENCE);
  assert_string_equal(got.model, name);
  /* every byte escaped: 3 * 255 characters in the request, 255 once decoded */
  size_t k = (size_t)snprintf(p, sizeof p, "/v2/models/");
  for (int i = 0; i < CINFER_MODEL_NAME_MAX; i++) k += (size_t)snprintf(p + k, sizeof p - k, "%%6E");
  snprintf(p + k, sizeof p - k, "/ready");
  api_classify(HTTP_GET, p, strlen(p), &got);
  assert_int_equal(got.group, API_HEALTH);
  assert_string_equal(got.model, name);
  http_path_segs segs;
  assert_true(http_path_split(p, strlen(p), &segs));
  assert_int_equal(segs.err, HTTP_PATH_OK);
  assert_int_equal(segs.n, 4);
  /* one byte longer: refused, never cut to the 255-byte name above */
  strcat(name, "n");
  snprintf(p, sizeof p, "/v2/models/%s/infer", name);
  assert_false(http_path_split(p, strlen(p), &segs));
  assert_int_equal(segs.err, HTTP_PATH_SEG_TOO_LONG);
  assert_int_equal(segs.err_len, CINFER_MODEL_NAME_MAX + 1);
  char why[160];
  http_path_error(&segs, why, sizeof why);
  assert_string_equal(why, "request path segment of 256 bytes is longer than the limit of 255 bytes "
                           "(CINFER_MODEL_NAME_MAX, the longest model name)");
  api_classify(HTTP_POST, p, strlen(p), &got);
  assert_int_equal(got.group, API_GROUP_UNKNOWN);
  assert_string_equal(got.model, "");
  /* 1000 bytes, partly escaped: the decoded length is reported */
  k = (size_t)snprintf(p, sizeof p, "/v2/models/");
  for (int i = 0; i < 500; i++) k += (size_t)snprintf(p + k, sizeof p - k, "a%%62");
  assert_false(http_path_split(p, strlen(p), &segs));
  assert_int_equal(segs.err_len, 1000);
  const char *nul = "/v2/models/a%00b/ready";
  assert_false(http_path_split(nul, strlen(nul), &segs));
  assert_int_equal(segs.err, HTTP_PATH_NUL);
  const char *deep = "/v2/a/b/c/d/e/f/g/h/i/j/k";
  assert_false(http_path_split(deep, strlen(deep), &segs));
  assert_int_equal(segs.err, HTTP_PATH_TOO_MANY);
}

static void test_group_names_round_trip(void **st) {
  (void)st;
  for (int g = 0; g < API_GROUP_COUNT; g++) {
    api_group back;
    const char *n = api_group_name((api_group)g);
    assert_true(api_group_parse(n, strlen(n), &back));
    assert_int_equal(back, g);
  }
  api_group x;
  assert_false(api_group_parse("admin", 5, &x));
  assert_string_equal(api_group_name(API_GROUP_UNKNOWN), "unknown");
}

static void test_restriction_flags(void **st) {
  (void)st;
  api_restrictions r = {0};
  char err[256];
  assert_false(api_restrictions_any(&r));
  assert_true(api_restrictions_add(&r, "model-repository,logging:admin-key=s3cret", err, sizeof err));
  assert_true(api_restrictions_add(&r, "trace:x=y=z", err, sizeof err));
  assert_true(api_restrictions_any(&r));
  assert_string_equal(r.value[API_TRACE], "y=z");
  assert_false(api_restrictions_add(&r, "logging:k=v", err, sizeof err));
  assert_non_null(strstr(err, "'logging' is restricted twice"));
  assert_false(api_restrictions_add(&r, "health,health:k=v", err, sizeof err));
  assert_false(api_restrictions_add(&r, "admin:k=v", err, sizeof err));
  assert_non_null(strstr(err, "'admin' is not an API group"));
  assert_false(api_restrictions_add(&r, "health", err, sizeof err));
  assert_false(api_restrictions_add(&r, "health:novalue", err, sizeof err));
  assert_false(api_restrictions_add(&r, "health:=v", err, sizeof err));
  assert_false(api_restrictions_add(&r, ":k=v", err, sizeof err));
  assert_null(r.key[API_HEALTH]);  /* failed specs leave nothing behind */

  char msg[256];
  http_header good = {"Admin-Key", 9, "s3cret", 6}, bad = {"admin-key", 9, "s3cre", 5},
              other = {"X", 1, "s3cret", 6};
  assert_true(api_restrictions_check(&r, API_INFERENCE, NULL, 0, msg, sizeof msg));
  assert_true(api_restrictions_check(&r, API_GROUP_UNKNOWN, NULL, 0, msg, sizeof msg));
  assert_true(api_restrictions_check(&r, API_MODEL_REPOSITORY, &good, 1, msg, sizeof msg));
  assert_false(api_restrictions_check(&r, API_MODEL_REPOSITORY, &bad, 1, msg, sizeof msg));
  assert_string_equal(msg, "This API is restricted, expecting header 'admin-key' (API group 'model-repository')");
  assert_false(api_restrictions_check(&r, API_LOGGING, &other, 1, msg, sizeof msg));

  http_request req = {.method_id = HTTP_POST, .path = "/v2/repository/models/m/unload",
                      .path_len = strlen("/v2/repository/models/m/unload"),
                      .headers = &good, .num_headers = 1};
  assert_int_equal(api_restrictions_check_request(&r, &req, msg, sizeof msg), 0);
  req.num_headers = 0;
  assert_int_equal(api_restrictions_check_request(&r, &req, msg, sizeof msg), 403);
  req.path = "/v2/models/m/infer";
  req.path_len = strlen(req.path);
  assert_int_equal(api_restrictions_check_request(&r, &req, msg, sizeof msg), 0);
  api_restrictions_free(&r);
  assert_false(api_restrictions_any(&r));
}

/* Every RPC of inference.GRPCInferenceService in the group of its HTTP route. */
static void test_grpc_methods(void **st) {
  (void)st;
  static const struct { const char *rpc; api_group g; } t[] = {
      {"ServerLive", API_HEALTH}, {"ServerReady", API_HEALTH}, {"ModelReady", API_HEALTH},
      {"ServerMetadata", API_METADATA}, {"ModelMetadata", API_METADATA},
      {"ModelInfer", API_INFERENCE}, {"ModelStreamInfer", API_INFERENCE},
      {"ModelConfig", API_MODEL_CONFIG}, {"ModelStatistics", API_STATISTICS},
      {"RepositoryIndex", API_MODEL_REPOSITORY}, {"RepositoryModelLoad", API_MODEL_REPOSITORY},
      {"RepositoryModelUnload", API_MODEL_REPOSITORY},
      {"SystemSharedMemoryStatus", API_SHARED_MEMORY}, {"SystemSharedMemoryRegister", API_SHARED_MEMORY},
      {"SystemSharedMemoryUnregister", API_SHARED_MEMORY}, {"CudaSharedMemoryStatus", API_SHARED_MEMORY},
      {"CudaSharedMemoryRegister", API_SHARED_MEMORY}, {"CudaSharedMemoryUnregister", API_SHARED_MEMORY},
      {"TraceSetting", API_TRACE}, {"LogSettings", API_LOGGING}};
  char path[128];
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
    snprintf(path, sizeof path, "/inference.GRPCInferenceService/%s", t[i].rpc);
    assert_int_equal(api_classify_grpc(path, strlen(path)), t[i].g);
    /* a prefix or an extension of a method is not that method */
    assert_int_equal(api_classify_grpc(path, strlen(path) - 1), API_GROUP_UNKNOWN);
  }
  const char *h = "/grpc.health.v1.Health/Check";
  assert_int_equal(api_classify_grpc(h, strlen(h)), API_HEALTH);
  const char *odd[] = {"", "/", "/inference.GRPCInferenceService/", "/inference.GRPCInferenceService/Nope",
                       "/other.Service/ModelInfer", "/inference.GRPCInferenceServiceX/ModelInfer"};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
    assert_int_equal(api_classify_grpc(odd[i], strlen(odd[i])), API_GROUP_UNKNOWN);
}

static void test_ct_equal(void **st) {
  (void)st;
  assert_true(api_ct_equal("abc", 3, "abc", 3));
  assert_false(api_ct_equal("abc", 3, "abd", 3));
  assert_false(api_ct_equal("abc", 3, "abcd", 4));
  assert_true(api_ct_equal("", 0, "", 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_route),
      cmocka_unit_test(test_too_many_or_long_segments_are_unknown),
      cmocka_unit_test(test_model_name_limit),
      cmocka_unit_test(test_group_names_round_trip),
      cmocka_unit_test(test_restriction_flags),
      cmocka_unit_test(test_ct_equal),
      cmocka_unit_test(test_grpc_methods),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
