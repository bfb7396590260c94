/* apigroup.h: the API groups of Triton's --http-restricted-api, for the server and the
 * gateway. Pure (no I/O, no allocation except api_restrictions_add).
 *
 * Classification (api_classify) is one table of routes: KServe v2, the Triton extensions
 * (model repository, statistics, trace, logging, system and CUDA shared memory), the
 * OpenAI endpoints and cinfer's own. Every path maps to exactly one group; a path that is
 * not a known route is API_GROUP_UNKNOWN (callers treat it as restricted) and the few
 * endpoints Triton never restricts (/metrics, /health) are API_GROUP_NONE.
 *
 * Restrictions (api_restrictions) are Triton's flag semantics: each group may require one
 * header KEY=VALUE; a request of a restricted group without that exact header is refused
 * with 403 and a message naming the group and the header. The value is compared in
 * constant time.
 *
 * Server-side use (cinfer serve --http-restricted-api): parse every flag value with
 * api_restrictions_add, then call api_restrictions_check_request(r, req, msg, cap) first
 * thing in the request handler: 0 = go on, otherwise answer that status with msg.
 */
#ifndef CINFER_NET_APIGROUP_H
#define CINFER_NET_APIGROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "net/http.h"

typedef enum api_group {
  API_HEALTH = 0,
  API_METADATA,
  API_INFERENCE,
  API_SHARED_MEMORY,
  API_MODEL_CONFIG,
  API_MODEL_REPOSITORY,
  API_STATISTICS,
  API_TRACE,
  API_LOGGING,
  API_GROUP_COUNT,          /* number of restrictable groups */
  API_GROUP_NONE = 100,     /* never restricted (/metrics, OpenAI /health) */
  API_GROUP_UNKNOWN = 101   /* not a known route */
} api_group;

typedef struct api_route {
  api_group group;
  /* The model the request is about (its path segment, percent-decoded); "" when the
   * path names none (OpenAI requests name it in the body). */
  char model[HTTP_PATH_SEG_CAP];
  /* The answer lists models (POST /v2/repository/index, GET /v1/models): a gateway
   * filters it per tenant. */
  bool listing;
  /* The path could not be split as the server splits it (http_path_split): a NUL, too
   * many segments, or a segment longer than any model name. The server answers such a
   * path 400 (http_path_err_message); so does a gateway, instead of routing it. */
  http_path_err path_err;
  size_t path_err_len;
} api_route;

/* Classifies a request path (without the query). The path is split as the server splits
 * it (repeated slashes collapse, each segment is percent-decoded), so a request cannot be
 * classified as one route and executed as another. The method does not change the group
 * (Triton classifies by path; a wrong method is the server's 405). */
void api_classify(http_method method, const char *path, size_t len, api_route *out);
/* The group of a gRPC method path ("/inference.GRPCInferenceService/ModelInfer"), with
 * Triton's grouping of the RPCs (--grpc-restricted-protocol) and the HTTP routes' group for
 * the same call (ModelReady is health as /v2/models/M/ready is); grpc.health.v1.Health is
 * health. API_GROUP_UNKNOWN for any other path. */
api_group api_classify_grpc(const char *path, size_t len);
/* "health", "metadata", ..., "unknown", "unrestricted". */
const char *api_group_name(api_group g);
/* Group by its name (as in Triton's flag); false when unknown. */
bool api_group_parse(const char *name, size_t len, api_group *out);

typedef struct api_restrictions {
  char *key[API_GROUP_COUNT];    /* header name, NULL = group not restricted; owned */
  char *value[API_GROUP_COUNT];  /* owned */
} api_restrictions;

/* Parses one flag value "GROUP[,GROUP...]:KEY=VALUE" and adds it. Errors (false, message
 * in err): unknown group, a group restricted twice, missing ':' or '=', empty key. */
bool api_restrictions_add(api_restrictions *r, const char *spec, char *err, size_t cap);
void api_restrictions_free(api_restrictions *r);
bool api_restrictions_any(const api_restrictions *r);
/* Whether headers satisfy the restriction of group g (true for unrestricted groups and
 * for API_GROUP_NONE/UNKNOWN). On false, msg names the group and the expected header. */
bool api_restrictions_check(const api_restrictions *r, api_group g, const http_header *h,
                            size_t n, char *msg, size_t cap);
/* api_classify + api_restrictions_check for a parsed request: 0 when allowed, else 403
 * with msg. The function for the server's request handler. */
int api_restrictions_check_request(const api_restrictions *r, const http_request *req,
                                   char *msg, size_t cap);

/* Constant-time comparison of two byte strings (time depends only on the lengths). */
bool api_ct_equal(const void *a, size_t alen, const void *b, size_t blen);

#endif
