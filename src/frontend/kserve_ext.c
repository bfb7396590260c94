/* kserve_ext.c: the HTTP side of Triton's shared-memory extension and of body compression
 * (see frontend_internal.h). The region registry is shm.c; the zlib wrappers compress.c.
 *
 * Routes (Triton's, http_server.cc):
 *   GET  /v2/systemsharedmemory[/region/NAME]/status
 *   POST /v2/systemsharedmemory/region/NAME/register   {"key","offset","byte_size"}
 *   POST /v2/systemsharedmemory[/region/NAME]/unregister
 *   /v2/cudasharedmemory/...: status lists nothing; register and unregister of a region
 *   answer 400 "... GPUs not supported" (Triton built without GPU support says the same). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "frontend/frontend_internal.h"

static const http_header json_hdr[] = {{"Content-Type", 12, "application/json", 16}};

static void reply_error(http_exchange *ex, int status, const char *msg) {
  cbuf b = {0};
  kserve_encode_error(&b, msg);
  if (b.oom) {
    cbuf_free(&b);
    static const char oom[] = "{\"error\":\"out of memory\"}";
    return http_respond(ex, 500, json_hdr, 1, oom, sizeof oom - 1);
  }
  http_respond_owned(ex, status, json_hdr, 1, b.data, b.len, free);
}

static void reply_status(http_exchange *ex, cinfer_status *st) {
  reply_error(ex, cinfer_code_http_status(cinfer_status_code(st)), cinfer_status_message(st));
  cinfer_status_free(st);
}

/* A non-negative integer member, exact to 2^64 - 1 (core/json keeps integer literals). */
static cinfer_status *member_uint(const json_value *o, const char *key, bool required,
                                  uint64_t *out) {
  *out = 0;
  const json_value *v = json_get(o, key);
  if (!v) {
    if (required)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "Shared memory register request has no '%s' field", key);
    return NULL;
  }
  if (!json_is(v, JSON_NUMBER) || !(v->int_flags & JSON_INT_U64))
    return cinfer_status_new(CINFER_INVALID_ARG, "Unable to parse '%s': must be a non-negative "
                             "integer", key);
  *out = v->ix.u;
  return NULL;
}

static void sys_register(frontend *fe, http_exchange *ex, const http_request *req,
                         const char *name) {
  json_doc *doc = NULL;
  cinfer_status *st = req->body_len ? json_parse(req->body, req->body_len, 16, &doc) : NULL;
  const json_value *j = doc ? json_root(doc) : NULL;
  if (st || !json_is(j, JSON_OBJECT)) {
    cinfer_status_free(st);
    json_doc_free(doc);
    return reply_error(ex, 400, "Shared memory register request: the body must be a JSON "
                       "object with 'key', 'offset' and 'byte_size'");
  }
  const json_value *key = json_get(j, "key");
  uint64_t off = 0, size = 0;
  if (!key)
    st = cinfer_status_new(CINFER_INVALID_ARG, "Shared memory register request has no 'key' field");
  else if (!json_is(key, JSON_STRING) || strlen(key->u.str) != key->len)
    st = cinfer_status_new(CINFER_INVALID_ARG, "Unable to parse 'key': must be a string");
  if (!st) st = member_uint(j, "offset", false, &off);
  if (!st) st = member_uint(j, "byte_size", true, &size);
  if (!st) st = shm_register(fe->shm, name, key->u.str, off, size);
  json_doc_free(doc);
  if (st) return reply_status(ex, st);
  http_respond(ex, 200, json_hdr, 1, NULL, 0);
}

static void sys_status(frontend *fe, http_exchange *ex, const char *name) {
  cbuf b = {0};
  cinfer_status *st = shm_status_json(fe->shm, name, &b);
  if (st) {
    cbuf_free(&b);
    return reply_status(ex, st);
  }
  if (b.oom) {
    cbuf_free(&b);
    return reply_error(ex, 500, "out of memory");
  }
  http_respond_owned(ex, 200, json_hdr, 1, b.data, b.len, free);
}

bool kserve_ext_route(frontend *fe, http_exchange *ex, const http_request *req,
                      const http_path_segs *p) {
  bool sys = p->n >= 2 && !strcmp(p->seg[1], "systemsharedmemory");
  bool cuda = p->n >= 2 && !strcmp(p->seg[1], "cudasharedmemory");
  if (!sys && !cuda) return false;
  /* [v2, X, action] or [v2, X, region, NAME, action] */
  const char *name = NULL, *action = NULL;
  if (p->n == 3) action = p->seg[2];
  else if (p->n == 5 && !strcmp(p->seg[2], "region")) name = p->seg[3], action = p->seg[4];
  if (!action || (strcmp(action, "status") && strcmp(action, "register") &&
                  strcmp(action, "unregister"))) {
    reply_error(ex, 404, "not found");
    return true;
  }
  bool status = !strcmp(action, "status");
  bool get = req->method_id == HTTP_GET || req->method_id == HTTP_HEAD;
  if (status ? !get : req->method_id != HTTP_POST) {
    reply_error(ex, 405, "Method Not Allowed");
    return true;
  }
  if (cuda) {
    cinfer_status *st = shm_cuda_call(action, name);
    if (st) reply_status(ex, st);
    else if (status) http_respond(ex, 200, json_hdr, 1, "[]", 2);
    else http_respond(ex, 200, json_hdr, 1, NULL, 0);
    return true;
  }
  if (status) sys_status(fe, ex, name);
  else if (!strcmp(action, "register")) {
    if (!name)
      reply_error(ex, 400, "'region name' is necessary to register system shared memory region");
    else
      sys_register(fe, ex, req, name);
  } else {
    cinfer_status *st = shm_unregister(fe->shm, name);
    if (st) reply_status(ex, st);
    else http_respond(ex, 200, json_hdr, 1, NULL, 0);
  }
  return true;
}

cinfer_status *kserve_ext_inflate(frontend *fe, const http_request *req, void **body,
                                  size_t *len, int *http_status) {
  *body = NULL;
  size_t vl;
  const char *v = http_request_header(req, "Content-Encoding", &vl);
  compress_kind k;
  if (!compress_request_kind(v, v ? vl : 0, &k)) {
    *http_status = 400;
    return cinfer_status_new(CINFER_INVALID_ARG, "Unsupported compression type '%.*s' (use gzip "
                             "or deflate)", (int)(vl > 64 ? 64 : vl), v);
  }
  if (k == COMPRESS_IDENTITY) return NULL;
  cinfer_status *st = compress_inflate(req->body, req->body_len, fe->limits.max_input_bytes,
                                       body, len);
  if (st) {
    cinfer_code c = cinfer_status_code(st);
    /* Past the limit is 400, as Triton answers it (L0_http/http_input_size_limit_test.py
     * test_default_limit_compressed), not 413: the body itself was within the limits. */
    *http_status = c == CINFER_RESOURCE_EXHAUSTED || c == CINFER_INVALID_ARG ? 400 : 500;
  }
  return st;
}

void kserve_ext_respond_infer(http_exchange *ex, compress_kind kind, const http_header *h,
                              size_t nh, char *body, size_t len) {
  if (kind != COMPRESS_IDENTITY && nh < 4) {
    void *z;
    size_t zl;
    cinfer_status *st = compress_deflate(kind, body, len, &z, &zl);
    if (!st) { /* as Triton: a response that cannot be compressed goes out as it is */
      free(body);
      http_header hh[5];
      memcpy(hh, h, nh * sizeof *h);
      hh[nh] = (http_header){"Content-Encoding", 16, kind == COMPRESS_GZIP ? "gzip" : "deflate",
                             kind == COMPRESS_GZIP ? 4u : 7u};
      return http_respond_owned(ex, 200, hh, nh + 1, z, zl, free);
    }
    cinfer_status_free(st);
  }
  http_respond_owned(ex, 200, h, nh, body, len, free);
}
