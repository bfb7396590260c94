/* target.c: turns the target flags into pre-serialised HTTP requests (bench_reqset), once,
 * before any load starts. The engine then only copies bytes to sockets.
 *   raw GET/POST:  one request; the body read from --body.
 *   KServe v2:     GET /v2/models/NAME[/versions/V] for inputs (name, datatype, shape),
 *                  --shape overrides (required for dynamic dims), tensors as raw
 *                  little-endian bytes (random with --seed, or from --input-data), then
 *                  JSON ({"inputs":[{"name","shape","datatype","data"}]}) or the binary
 *                  tensor extension (Inference-Header-Content-Length).
 *   OpenAI:        /v1/chat/completions or /v1/completions with a prompt of prompt_len
 *                  words (seeded), max_tokens, ignore_eos, stream + include_usage.
 * Every size from the metadata or the data file is checked (dims > 0, products without
 * overflow, total request size bounded) before allocation. */
#include "bench/grpc_int.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQUEST_BYTES ((size_t)1 << 30) /* 1 GiB per request at most */
#define VARIANT_BUDGET ((size_t)64 << 20)   /* random variants: 64 MiB in all */

void bench_reqset_free(bench_reqset *rs) {
  if (!rs) return;
  for (size_t i = 0; i < rs->n; i++) free(rs->v[i].data);
  free(rs->v);
  rs->v = NULL;
  bench_shm_destroy(rs->shm);
  rs->shm = NULL;
  for (int i = 0; i < rs->n_gouts; i++) free(rs->gouts[i].name);
  free(rs->gouts);
  rs->gouts = NULL;
  rs->n_gouts = 0;
  free(rs->system);
  rs->system = NULL;
  rs->n = 0;
}

static cinfer_status *reqset_add(bench_reqset *rs, cbuf *req) {
  if (req->oom) return cinfer_status_oom("building requests");
  bench_req *v = realloc(rs->v, (rs->n + 1) * sizeof *v);
  if (!v) return cinfer_status_oom("building requests");
  rs->v = v;
  rs->v[rs->n].data = req->data;
  rs->v[rs->n].len = req->len;
  rs->n++;
  memset(req, 0, sizeof *req);
  return NULL;
}

static cinfer_status *read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return cinfer_status_new(CINFER_NOT_FOUND, "cannot open '%s': %s", path, strerror(errno));
  cbuf b = {0};
  char tmp[65536];
  size_t n;
  while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) {
    cbuf_put(&b, tmp, n);
    if (b.len > MAX_REQUEST_BYTES) break;
  }
  bool err = ferror(f);
  fclose(f);
  if (err || b.oom || b.len > MAX_REQUEST_BYTES) {
    cbuf_free(&b);
    return cinfer_status_new(CINFER_INVALID_ARG, "cannot read '%s': %s", path,
                             err ? "read error" : "too large (1 GiB at most) or out of memory");
  }
  if (!b.data) cbuf_put(&b, "", 0);
  *out = b.data;
  *len = b.len;
  return NULL;
}

static void head(cbuf *b, const bench_config *c, const char *method, const char *path) {
  cbuf_printf(b, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cinfer-bench\r\n", method, path,
                  c->host_header);
  for (int i = 0; i < c->n_headers; i++) cbuf_printf(b, "%s\r\n", c->headers[i]);
}

static double rng_unit(uint64_t *s) { return (double)(bench_rng_next(s) >> 11) * 0x1.0p-53; }

/* ---- raw ---- */

static cinfer_status *build_raw(const bench_config *c, bench_reqset *rs) {
  cbuf b = {0};
  snprintf(rs->path, sizeof rs->path, "%s", c->path);
  if (c->target == BENCH_TARGET_HTTP_GET) {
    head(&b, c, "GET", c->path);
    cbuf_puts(&b, "Accept: */*\r\n\r\n");
    return reqset_add(rs, &b);
  }
  char *body;
  size_t len;
  cinfer_status *st = read_file(c->body_file, &body, &len);
  if (st) return cinfer_status_prefix(st, "--body");
  head(&b, c, "POST", c->path);
  cbuf_printf(&b, "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                  c->content_type ? c->content_type : "application/octet-stream", len);
  cbuf_put(&b, body, len);
  free(body);
  return reqset_add(rs, &b);
}

/* ---- OpenAI ---- */

static const char *const words[] = {
    "the", "model", "serves", "requests", "quickly", "while", "a", "cluster", "of", "nodes",
    "balances", "load", "across", "replicas", "and", "every", "token", "streams", "back",
    "to", "users", "who", "ask", "questions", "about", "history", "science", "music", "art",
    "travel", "food", "weather"};

cinfer_status *bench_openai_request(const bench_config *c, const char *path, cJSON *j, cbuf *b) {
  cJSON_AddNumberToObject(j, "max_tokens", c->max_tokens);
  cJSON_AddBoolToObject(j, "ignore_eos", 1);
  cJSON_AddNumberToObject(j, "temperature", 0);
  if (c->stream) {
    cJSON_AddBoolToObject(j, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(j, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
  }
  char *body = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!body) return cinfer_status_oom("an OpenAI request");
  head(b, c, "POST", path);
  cbuf_printf(b, "Content-Type: application/json\r\nAccept: %s\r\nContent-Length: %zu\r\n\r\n",
                 c->stream ? "text/event-stream" : "application/json", strlen(body));
  cbuf_puts(b, body);
  free(body);
  return b->oom ? cinfer_status_oom("an OpenAI request") : NULL;
}

static cinfer_status *build_openai(const bench_config *c, bench_reqset *rs) {
  const char *path = c->openai_chat ? "/v1/chat/completions" : "/v1/completions";
  snprintf(rs->path, sizeof rs->path, "%s", path);
  rs->openai = true;
  rs->stream = c->stream;
  uint64_t seed = c->seed;
  for (int v = 0; v < 8; v++) {
    cbuf prompt = {0};
    cbuf_puts(&prompt, "Please write a long story.");
    for (int i = 0; i < c->prompt_len; i++) {
      cbuf_puts(&prompt, " ");
      cbuf_puts(&prompt, words[bench_rng_next(&seed) % (sizeof words / sizeof words[0])]);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", c->model);
    if (c->openai_chat) {
      cJSON *msgs = cJSON_AddArrayToObject(j, "messages");
      cJSON *m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "role", "user");
      cJSON_AddStringToObject(m, "content", prompt.data ? prompt.data : "");
      cJSON_AddItemToArray(msgs, m);
    } else {
      cJSON_AddStringToObject(j, "prompt", prompt.data ? prompt.data : "");
    }
    cbuf_free(&prompt);
    cbuf b = {0};
    cinfer_status *st = bench_openai_request(c, path, j, &b);
    if (!st) st = reqset_add(rs, &b);
    else cbuf_free(&b);
    if (st) return st;
  }
  return NULL;
}

/* ---- KServe v2 ---- */

typedef struct kinput {
  char name[128];
  cinfer_dtype dtype;
  int ndim;
  int64_t shape[CINFER_MAX_DIMS];
  int64_t elems;
} kinput;

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, mant = x & 0x7fffff;
  int exp = (int)((x >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return (uint16_t)sign; /* flush tiny values to zero */
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  return (uint16_t)(sign | (uint32_t)exp << 10 | (mant + 0x1000) >> 13);
}
static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t x;
  if (exp == 0) x = sign; /* zero (subnormals flushed) */
  else if (exp == 31) x = sign | 0x7f800000 | mant << 13;
  else x = sign | (exp - 15 + 127) << 23 | mant << 13;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Stores number v as element i of dtype t in raw (little-endian host assumed: x86/arm64). */
static void store_num(cinfer_dtype t, void *raw, int64_t i, double v) {
  switch (t) {
    case CINFER_TYPE_BOOL: ((uint8_t *)raw)[i] = v != 0; break;
    case CINFER_TYPE_UINT8: ((uint8_t *)raw)[i] = (uint8_t)v; break;
    case CINFER_TYPE_UINT16: ((uint16_t *)raw)[i] = (uint16_t)v; break;
    case CINFER_TYPE_UINT32: ((uint32_t *)raw)[i] = (uint32_t)v; break;
    case CINFER_TYPE_UINT64: ((uint64_t *)raw)[i] = (uint64_t)v; break;
    case CINFER_TYPE_INT8: ((int8_t *)raw)[i] = (int8_t)v; break;
    case CINFER_TYPE_INT16: ((int16_t *)raw)[i] = (int16_t)v; break;
    case CINFER_TYPE_INT32: ((int32_t *)raw)[i] = (int32_t)v; break;
    case CINFER_TYPE_INT64: ((int64_t *)raw)[i] = (int64_t)v; break;
    case CINFER_TYPE_FP16: ((uint16_t *)raw)[i] = f32_to_f16((float)v); break;
    case CINFER_TYPE_BF16: {
      float f = (float)v;
      uint32_t x;
      memcpy(&x, &f, 4);
      ((uint16_t *)raw)[i] = (uint16_t)(x >> 16);
      break;
    }
    case CINFER_TYPE_FP32: ((float *)raw)[i] = (float)v; break;
    case CINFER_TYPE_FP64: ((double *)raw)[i] = v; break;
    default: break;
  }
}

static void json_num(cbuf *b, cinfer_dtype t, const void *raw, int64_t i) {
  switch (t) {
    case CINFER_TYPE_BOOL: cbuf_puts(b, ((const uint8_t *)raw)[i] ? "true" : "false"); break;
    case CINFER_TYPE_UINT8: cbuf_printf(b, "%u", ((const uint8_t *)raw)[i]); break;
    case CINFER_TYPE_UINT16: cbuf_printf(b, "%u", ((const uint16_t *)raw)[i]); break;
    case CINFER_TYPE_UINT32: cbuf_printf(b, "%u", ((const uint32_t *)raw)[i]); break;
    case CINFER_TYPE_UINT64: cbuf_printf(b, "%llu", (unsigned long long)((const uint64_t *)raw)[i]); break;
    case CINFER_TYPE_INT8: cbuf_printf(b, "%d", ((const int8_t *)raw)[i]); break;
    case CINFER_TYPE_INT16: cbuf_printf(b, "%d", ((const int16_t *)raw)[i]); break;
    case CINFER_TYPE_INT32: cbuf_printf(b, "%d", ((const int32_t *)raw)[i]); break;
    case CINFER_TYPE_INT64: cbuf_printf(b, "%lld", (long long)((const int64_t *)raw)[i]); break;
    case CINFER_TYPE_FP16: cbuf_printf(b, "%.5g", (double)f16_to_f32(((const uint16_t *)raw)[i])); break;
    case CINFER_TYPE_BF16: {
      uint32_t x = (uint32_t)((const uint16_t *)raw)[i] << 16;
      float f;
      memcpy(&f, &x, 4);
      cbuf_printf(b, "%.4g", (double)f);
      break;
    }
    case CINFER_TYPE_FP32: cbuf_printf(b, "%.7g", (double)((const float *)raw)[i]); break;
    case CINFER_TYPE_FP64: cbuf_printf(b, "%.17g", ((const double *)raw)[i]); break;
    default: break;
  }
}

/* A tensor's bytes: fixed-size types are elems*size; BYTES are length-prefixed strings. */
typedef struct tensor_data {
  cbuf raw;
} tensor_data;

static void json_bytes_elems(cbuf *b, const cbuf *raw) {
  size_t off = 0;
  bool first = true;
  while (off + 4 <= raw->len) {
    uint32_t n;
    memcpy(&n, raw->data + off, 4);
    off += 4;
    if (!first) cbuf_puts(b, ",");
    first = false;
    cJSON *s = cJSON_CreateString("");
    /* strings we generate or read are printable; escape through cJSON to be safe */
    char *tmp = malloc((size_t)n + 1);
    if (tmp && s) {
      memcpy(tmp, raw->data + off, n);
      tmp[n] = 0;
      cJSON_SetValuestring(s, tmp);
      char *out = cJSON_PrintUnformatted(s);
      if (out) cbuf_puts(b, out), free(out);
      else b->oom = true;
    } else {
      b->oom = true;
    }
    free(tmp);
    cJSON_Delete(s);
    off += n;
  }
}

static cinfer_status *kserve_request(const bench_config *c, const char *path, const kinput *in,
                                     int nin, tensor_data *td, bench_reqset *rs,
                                     const char *outputs_json) {
  cbuf json = {0}, b = {0};
  const char *regions[CINFER_MAX_INPUTS];
  for (int k = 0; c->shm_system && k < nin && k < CINFER_MAX_INPUTS; k++) {
    cinfer_status *st = bench_shm_add(rs->shm, td[k].raw.data, td[k].raw.len, &regions[k]);
    if (st) return st;
  }
  if (c->grpc) { /* one framed ModelInferRequest: raw tensors, or the regions */
    bench_grpc_input gi[CINFER_MAX_INPUTS];
    for (int k = 0; k < nin; k++)
      gi[k] = (bench_grpc_input){in[k].name, in[k].dtype, in[k].ndim, in[k].shape,
                                 td[k].raw.data, td[k].raw.len, c->shm_system ? regions[k] : NULL};
    for (int k = 0; k < nin; k++)
      if (td[k].raw.len > MAX_REQUEST_BYTES)
        return cinfer_status_new(CINFER_INVALID_ARG, "request too large (over 1 GiB)");
    cinfer_status *st = bench_grpc_request(c, gi, nin, rs->gouts, rs->n_gouts, &b);
    if (st) {
      cbuf_free(&b);
      return st;
    }
    return reqset_add(rs, &b);
  }
  cbuf_puts(&json, "{\"inputs\":[");
  for (int k = 0; k < nin; k++) {
    cbuf_printf(&json, "%s{\"name\":\"%s\",\"shape\":[", k ? "," : "", in[k].name);
    for (int d = 0; d < in[k].ndim; d++)
      cbuf_printf(&json, "%s%lld", d ? "," : "", (long long)in[k].shape[d]);
    cbuf_printf(&json, "],\"datatype\":\"%s\"", cinfer_dtype_name(in[k].dtype));
    if (c->shm_system) {
      cbuf_printf(&json, ",\"parameters\":{\"shared_memory_region\":\"%s\",\"shared_memory_byte_size\":%zu}}",
                  regions[k], td[k].raw.len);
    } else if (c->binary) {
      cbuf_printf(&json, ",\"parameters\":{\"binary_data_size\":%zu}}", td[k].raw.len);
    } else {
      cbuf_puts(&json, ",\"data\":[");
      if (in[k].dtype == CINFER_TYPE_BYTES) {
        json_bytes_elems(&json, &td[k].raw);
      } else {
        for (int64_t i = 0; i < in[k].elems; i++) {
          if (i) cbuf_puts(&json, ",");
          json_num(&json, in[k].dtype, td[k].raw.data, i);
        }
      }
      cbuf_puts(&json, "]}");
    }
    if (json.len > MAX_REQUEST_BYTES) break;
  }
  cbuf_puts(&json, "]");
  if (outputs_json) cbuf_puts(&json, outputs_json);
  if (c->binary) cbuf_puts(&json, ",\"parameters\":{\"binary_data_output\":true}");
  cbuf_puts(&json, "}");
  size_t total = json.len;
  if (c->binary)
    for (int k = 0; k < nin; k++) total += td[k].raw.len;
  if (json.oom || total > MAX_REQUEST_BYTES) {
    cbuf_free(&json);
    return cinfer_status_new(CINFER_INVALID_ARG, "request too large (over 1 GiB) or out of memory");
  }
  head(&b, c, "POST", path);
  if (c->binary)
    cbuf_printf(&b, "Content-Type: application/octet-stream\r\nInference-Header-Content-Length: %zu\r\n",
                    json.len);
  else
    cbuf_puts(&b, "Content-Type: application/json\r\n");
  cbuf_printf(&b, "Content-Length: %zu\r\n\r\n", total);
  cbuf_put(&b, json.data, json.len);
  if (c->binary)
    for (int k = 0; k < nin; k++) cbuf_put(&b, td[k].raw.data, td[k].raw.len);
  cbuf_free(&json);
  return reqset_add(rs, &b);
}

static cinfer_status *random_tensor(const kinput *in, uint64_t *seed, tensor_data *td) {
  if (in->dtype == CINFER_TYPE_BYTES) {
    for (int64_t i = 0; i < in->elems; i++) {
      uint32_t n = 8;
      cbuf_put(&td->raw, &n, 4);
      char s[8];
      for (int k = 0; k < 8; k++) s[k] = (char)('a' + bench_rng_next(seed) % 26);
      cbuf_put(&td->raw, s, 8);
    }
  } else {
    size_t bytes = (size_t)in->elems * cinfer_dtype_size(in->dtype);
    char *p = malloc(bytes ? bytes : 1);
    if (!p) return cinfer_status_new(CINFER_INTERNAL, "out of memory for input '%s'", in->name);
    bool flt = in->dtype == CINFER_TYPE_FP16 || in->dtype == CINFER_TYPE_FP32 ||
               in->dtype == CINFER_TYPE_FP64 || in->dtype == CINFER_TYPE_BF16;
    for (int64_t i = 0; i < in->elems; i++)
      store_num(in->dtype, p, i,
                in->dtype == CINFER_TYPE_BOOL ? (double)(bench_rng_next(seed) & 1)
                : flt                         ? rng_unit(seed)
                                              : (double)(bench_rng_next(seed) % 100));
    cbuf_put(&td->raw, p, bytes);
    free(p);
  }
  if (td->raw.oom) return cinfer_status_new(CINFER_INTERNAL, "out of memory for input '%s'", in->name);
  return NULL;
}

/* One input's values from --input-data: an array (nested arrays flattened) or
 * {"content":[...], "shape":[...]}. */
static void flatten(const cJSON *a, const cJSON **out, int64_t *n, int64_t cap) {
  const cJSON *x;
  cJSON_ArrayForEach(x, a) {
    if (cJSON_IsArray(x)) flatten(x, out, n, cap);
    else {
      if (*n < cap) out[*n] = x;
      (*n)++;
    }
  }
}

static cinfer_status *file_tensor(const bench_config *c, kinput *in, const cJSON *v, int entry,
                                  tensor_data *td) {
  const cJSON *arr = v;
  if (cJSON_IsObject(v)) {
    if (cJSON_GetObjectItemCaseSensitive(v, "b64"))
      return cinfer_status_new(CINFER_UNSUPPORTED, "%s: data[%d].%s: \"b64\" inputs are not supported; give \"content\"",
                               c->input_data, entry, in->name);
    arr = cJSON_GetObjectItemCaseSensitive(v, "content");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
    if (cJSON_IsArray(sh)) {
      int nd = cJSON_GetArraySize(sh);
      if (nd > CINFER_MAX_DIMS)
        return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s.shape: more than 8 dims", c->input_data, entry, in->name);
      in->ndim = 0;
      const cJSON *d;
      cJSON_ArrayForEach(d, sh) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e12 || d->valuedouble != floor(d->valuedouble))
          return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s.shape: dims must be integers >= 0",
                                   c->input_data, entry, in->name);
        in->shape[in->ndim++] = (int64_t)d->valuedouble;
      }
      in->elems = cinfer_shape_elements(in->shape, in->ndim);
      if (in->elems < 0)
        return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s.shape overflows", c->input_data, entry, in->name);
    }
  }
  if (!cJSON_IsArray(arr))
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s: expected an array or {\"content\":[...]}",
                             c->input_data, entry, in->name);
  if (in->elems < 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s: shape unknown (dynamic dims): give \"shape\" or --shape",
                             c->input_data, entry, in->name);
  if ((uint64_t)in->elems > MAX_REQUEST_BYTES)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s: too many elements", c->input_data, entry, in->name);
  /* count the values before allocating anything sized by the (untrusted) shape */
  int64_t n = 0;
  flatten(arr, NULL, &n, 0);
  if (n != in->elems)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s: %lld values for shape with %lld elements",
                             c->input_data, entry, in->name, (long long)n, (long long)in->elems);
  const cJSON **vals = malloc(((size_t)n + 1) * sizeof *vals);
  if (!vals) return cinfer_status_oom(NULL);
  int64_t got = 0;
  flatten(arr, vals, &got, n);
  cinfer_status *st = NULL;
  if (in->dtype == CINFER_TYPE_BYTES) {
    for (int64_t i = 0; i < n; i++) {
      if (!cJSON_IsString(vals[i])) {
        st = cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s[%lld]: expected a string (BYTES)",
                               c->input_data, entry, in->name, (long long)i);
        goto out;
      }
      uint32_t l = (uint32_t)strlen(vals[i]->valuestring);
      cbuf_put(&td->raw, &l, 4);
      cbuf_put(&td->raw, vals[i]->valuestring, l);
    }
  } else {
    size_t bytes = (size_t)in->elems * cinfer_dtype_size(in->dtype);
    char *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
      st = cinfer_status_oom(NULL);
      goto out;
    }
    for (int64_t i = 0; i < n; i++) {
      double x;
      if (cJSON_IsNumber(vals[i])) x = vals[i]->valuedouble;
      else if (cJSON_IsBool(vals[i])) x = cJSON_IsTrue(vals[i]);
      else {
        free(p);
        st = cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d].%s[%lld]: expected a number (%s)",
                               c->input_data, entry, in->name, (long long)i, cinfer_dtype_name(in->dtype));
        goto out;
      }
      store_num(in->dtype, p, i, x);
    }
    cbuf_put(&td->raw, p, bytes);
    free(p);
  }
  if (td->raw.oom) st = cinfer_status_oom(NULL);
out:
  free(vals);
  return st;
}

/* Input names are copied into request JSON unescaped: printable, no quote or backslash. */
static bool plain_name(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\' || *s == 127) return false;
  return true;
}

static cinfer_status *kserve_inputs(const bench_config *c, const bench_addr *a, kinput **out,
                                    int *nout) {
  char path[700];
  if (c->model_version) snprintf(path, sizeof path, "/v2/models/%s/versions/%s", c->model, c->model_version);
  else snprintf(path, sizeof path, "/v2/models/%s", c->model);
  int status = 200;
  char *body = NULL;
  cinfer_status *st = c->grpc ? bench_grpc_metadata_json(c, a, &body)
                              : bench_http_simple(c, a, "GET", path, NULL, 0, 10000, &status, &body, NULL);
  if (st) return cinfer_status_prefix(st, "model metadata");
  if (c->grpc) snprintf(path, sizeof path, "ModelMetadata(%s)", c->model); /* for the messages */
  if (status != 200) {
    st = cinfer_status_new(status == 404 ? CINFER_NOT_FOUND : CINFER_UNAVAILABLE,
                           "GET %s: HTTP %d: %.200s", path, status, body ? body : "");
    free(body);
    return st;
  }
  cJSON *j = cJSON_Parse(body);
  free(body);
  const cJSON *ins = cJSON_GetObjectItemCaseSensitive(j, "inputs");
  if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) == 0) {
    cJSON_Delete(j);
    return cinfer_status_new(CINFER_INVALID_ARG, "GET %s: metadata has no \"inputs\" array", path);
  }
  int n = cJSON_GetArraySize(ins);
  kinput *v = calloc((size_t)n, sizeof *v);
  if (!v) {
    cJSON_Delete(j);
    return cinfer_status_oom(NULL);
  }
  int k = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, ins) {
    kinput *in = &v[k];
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(x, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(x, "datatype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(x, "shape");
    if (!cJSON_IsString(nm) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) ||
        strlen(nm->valuestring) >= sizeof in->name || !plain_name(nm->valuestring) ||
        cJSON_GetArraySize(sh) > CINFER_MAX_DIMS) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "GET %s: inputs[%d]: need a printable name without quotes, a datatype and a shape (<= 8 dims)", path, k);
      break;
    }
    snprintf(in->name, sizeof in->name, "%s", nm->valuestring);
    in->dtype = cinfer_dtype_parse(dt->valuestring, strlen(dt->valuestring));
    if (in->dtype == CINFER_TYPE_INVALID) {
      st = cinfer_status_new(CINFER_UNSUPPORTED, "input '%s': unknown datatype '%s'", in->name, dt->valuestring);
      break;
    }
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) in->shape[in->ndim++] = cJSON_IsNumber(d) ? (int64_t)d->valuedouble : -1;
    for (int s = 0; s < c->n_shapes; s++)
      if (!strcmp(c->shapes[s].name, in->name)) {
        in->ndim = c->shapes[s].ndim;
        memcpy(in->shape, c->shapes[s].dims, sizeof in->shape);
      }
    in->elems = cinfer_shape_elements(in->shape, in->ndim); /* -1 when a dim is dynamic */
    k++;
  }
  cJSON_Delete(j);
  for (int s = 0; !st && s < c->n_shapes; s++) {
    bool found = false;
    for (int i = 0; i < n; i++) found |= !strcmp(c->shapes[s].name, v[i].name);
    if (!found) st = cinfer_status_new(CINFER_INVALID_ARG, "--shape %s: model '%s' has no such input", c->shapes[s].name, c->model);
  }
  if (st) {
    free(v);
    return st;
  }
  *out = v;
  *nout = n;
  return NULL;
}

/* ---- images (--images DIR) ---- */

typedef struct image_set {
  char **paths; /* sorted by name */
  size_t n;
  int input;    /* index of the image input */
  bool nchw;
  int batch, h, w;
} image_set;

static void images_close(image_set *im) {
  for (size_t i = 0; i < im->n; i++) free(im->paths[i]);
  free(im->paths);
  memset(im, 0, sizeof *im);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool image_ext(const char *n) {
  const char *d = strrchr(n, '.');
  return d && (!strcasecmp(d, ".png") || !strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg"));
}

/* Finds the image input (first with an [N,]3,H,W or [N,]H,W,3 shape) and lists DIR. */
static cinfer_status *images_open(const bench_config *c, const kinput *in, int nin, image_set *im) {
  memset(im, 0, sizeof *im);
  im->input = -1;
  for (int k = 0; k < nin && im->input < 0; k++) {
    const int64_t *s = in[k].shape;
    int nd = in[k].ndim, off = nd == 4 ? 1 : 0;
    if ((nd != 3 && nd != 4) || in[k].elems <= 0 || in[k].dtype == CINFER_TYPE_BYTES) continue;
    if (s[off] == 3) im->nchw = true, im->h = (int)s[off + 1], im->w = (int)s[off + 2];
    else if (s[off + 2] == 3) im->nchw = false, im->h = (int)s[off], im->w = (int)s[off + 1];
    else continue;
    im->batch = nd == 4 ? (int)s[0] : 1;
    im->input = k;
  }
  if (im->input < 0)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "--images: model '%s' has no image input ([N,]3,H,W or [N,]H,W,3 with fixed "
                             "dims; fix dynamic dims with --shape)", c->model);
  if (im->h > 16384 || im->w > 16384 || im->batch > 4096)
    return cinfer_status_new(CINFER_INVALID_ARG, "--images: input '%s' is too large for images",
                             in[im->input].name);
  DIR *d = opendir(c->images_dir);
  if (!d) return cinfer_status_new(CINFER_NOT_FOUND, "--images: cannot open '%s': %s", c->images_dir, strerror(errno));
  struct dirent *e;
  size_t cap = 0;
  cinfer_status *st = NULL;
  while ((e = readdir(d)) && !st) {
    if (e->d_name[0] == '.' || !image_ext(e->d_name)) continue;
    if (im->n == cap) {
      cap = cap ? cap * 2 : 16;
      char **p = realloc(im->paths, cap * sizeof *p);
      if (!p) { st = cinfer_status_oom(NULL); break; }
      im->paths = p;
    }
    if (asprintf(&im->paths[im->n], "%s/%s", c->images_dir, e->d_name) < 0)
      st = cinfer_status_oom(NULL);
    else
      im->n++;
  }
  closedir(d);
  if (!st && im->n == 0)
    st = cinfer_status_new(CINFER_INVALID_ARG, "--images: no .png, .jpg or .jpeg files in '%s'", c->images_dir);
  if (st) {
    images_close(im);
    return st;
  }
  qsort(im->paths, im->n, sizeof *im->paths, cmp_str);
  return NULL;
}

/* Request v's image tensor: batch items take images v*batch, v*batch+1, ... (cycling). */
static cinfer_status *image_tensor(const bench_config *c, const kinput *in, const image_set *im,
                                   size_t v, tensor_data *td) {
  size_t hw = (size_t)im->h * (size_t)im->w, bytes = (size_t)in->elems * cinfer_dtype_size(in->dtype);
  float *tmp = malloc(hw * 3 * sizeof *tmp);
  char *raw = calloc(1, bytes ? bytes : 1);
  cinfer_status *st = NULL;
  if (!tmp || !raw) st = cinfer_status_oom("for image input");
  bool u8 = in->dtype == CINFER_TYPE_UINT8, i8 = in->dtype == CINFER_TYPE_INT8;
  bool integer = !(in->dtype == CINFER_TYPE_FP16 || in->dtype == CINFER_TYPE_FP32 ||
                   in->dtype == CINFER_TYPE_FP64 || in->dtype == CINFER_TYPE_BF16);
  for (int b = 0; b < im->batch && !st; b++) {
    const char *path = im->paths[(v * (size_t)im->batch + (size_t)b) % im->n];
    uint8_t *rgb;
    int w, h;
    if ((st = bench_image_load(path, &rgb, &w, &h))) break;
    bench_image_resize(rgb, w, h, tmp, im->w, im->h);
    free(rgb);
    for (size_t p = 0; p < hw; p++)
      for (int ch = 0; ch < 3; ch++) {
        int sc = c->image_bgr ? 2 - ch : ch; /* source channel for tensor channel ch */
        double x = (tmp[p * 3 + sc] - c->image_mean[ch]) / c->image_std[ch];
        if (integer) x = nearbyint(x);
        if (u8) x = x < 0 ? 0 : x > 255 ? 255 : x;
        if (i8) x = x < -128 ? -128 : x > 127 ? 127 : x;
        size_t idx = im->nchw ? ((size_t)b * 3 + (size_t)ch) * hw + p
                              : ((size_t)b * hw + p) * 3 + (size_t)ch;
        store_num(in->dtype, raw, (int64_t)idx, x);
      }
  }
  if (!st) {
    cbuf_put(&td->raw, raw, bytes);
    if (td->raw.oom) st = cinfer_status_oom("for image input");
  }
  free(tmp);
  free(raw);
  return st;
}

/* --shared-memory system: one registered region of --output-shared-memory-size bytes per
 * output of the model (from its metadata), and the "outputs" JSON that names them. */
static cinfer_status *shm_outputs(const bench_config *c, const bench_addr *a, bench_reqset *rs,
                                  char **out) {
  *out = NULL;
  cinfer_status *st = bench_shm_create(c, a, &rs->shm);
  if (st) return st;
  char path[700];
  if (c->model_version) snprintf(path, sizeof path, "/v2/models/%s/versions/%s", c->model, c->model_version);
  else snprintf(path, sizeof path, "/v2/models/%s", c->model);
  int status = 200;
  char *body = NULL;
  if ((st = c->grpc ? bench_grpc_metadata_json(c, a, &body)
                    : bench_http_simple(c, a, "GET", path, NULL, 0, 10000, &status, &body, NULL)))
    return cinfer_status_prefix(st, "model metadata");
  cJSON *j = status == 200 ? cJSON_Parse(body) : NULL;
  free(body);
  const cJSON *outs = cJSON_GetObjectItemCaseSensitive(j, "outputs");
  if (c->grpc && cJSON_IsArray(outs) && cJSON_GetArraySize(outs) > 0 &&
      !(rs->gouts = calloc((size_t)cJSON_GetArraySize(outs), sizeof *rs->gouts))) {
    cJSON_Delete(j);
    return cinfer_status_oom(NULL);
  }
  if (!cJSON_IsArray(outs) || !cJSON_GetArraySize(outs)) {
    cJSON_Delete(j);
    return cinfer_status_new(CINFER_INVALID_ARG, "GET %s: metadata has no \"outputs\" array", path);
  }
  cbuf b = {0};
  cbuf_puts(&b, ",\"outputs\":[");
  const cJSON *o;
  int k = 0;
  cJSON_ArrayForEach(o, outs) {
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(nm) || !plain_name(nm->valuestring) || strlen(nm->valuestring) > 200) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "GET %s: outputs[%d] needs a printable name", path, k);
      break;
    }
    const char *region;
    if ((st = bench_shm_add(rs->shm, NULL, (size_t)c->output_shm_size, &region))) break;
    cbuf_printf(&b, "%s{\"name\":\"%s\",\"parameters\":{\"shared_memory_region\":\"%s\","
                "\"shared_memory_byte_size\":%lld}}", k++ ? "," : "", nm->valuestring, region,
                (long long)c->output_shm_size);
    if (rs->gouts) {
      bench_grpc_output *go = &rs->gouts[rs->n_gouts];
      if (!(go->name = strdup(nm->valuestring))) {
        st = cinfer_status_oom(NULL);
        break;
      }
      go->region = region;
      go->size = (size_t)c->output_shm_size;
      rs->n_gouts++;
    }
  }
  cJSON_Delete(j);
  cbuf_puts(&b, "]");
  if (!st && b.oom) st = cinfer_status_oom(NULL);
  if (st) {
    cbuf_free(&b);
    return st;
  }
  *out = cbuf_take(&b);
  return NULL;
}

static cinfer_status *build_kserve(const bench_config *c, const bench_addr *a, bench_reqset *rs) {
  kinput *in = NULL;
  int nin = 0;
  cinfer_status *st = kserve_inputs(c, a, &in, &nin);
  if (st) return st;
  char path[700];
  if (c->model_version) snprintf(path, sizeof path, "/v2/models/%s/versions/%s/infer", c->model, c->model_version);
  else snprintf(path, sizeof path, "/v2/models/%s/infer", c->model);
  if (c->grpc)
    snprintf(path, sizeof path, "/inference.GRPCInferenceService/%s", c->grpc_stream ? "ModelStreamInfer" : "ModelInfer");
  snprintf(rs->path, sizeof rs->path, "%s", path);
  if (nin > CINFER_MAX_INPUTS) {
    free(in);
    return cinfer_status_new(CINFER_INVALID_ARG, "model '%s' has %d inputs (at most %d)", c->model,
                             nin, CINFER_MAX_INPUTS);
  }
  char *outs = NULL;
  if (c->shm_system && (st = shm_outputs(c, a, rs, &outs))) {
    free(in);
    return st;
  }
  tensor_data *td = calloc((size_t)nin, sizeof *td);
  if (!td) {
    free(in);
    free(outs);
    return cinfer_status_oom(NULL);
  }
  if (c->input_data) {
    char *text;
    size_t len;
    cJSON *j = NULL;
    if (!(st = read_file(c->input_data, &text, &len))) {
      const char *endp = NULL;
      j = cJSON_ParseWithLengthOpts(text, len, &endp, 0);
      if (!j) {
        /* report line:col of the parse error */
        size_t off = endp ? (size_t)(endp - text) : 0, line = 1, col = 1;
        for (size_t i = 0; i < off && i < len; i++) text[i] == '\n' ? (line++, col = 1) : col++;
        st = cinfer_status_new(CINFER_INVALID_ARG, "%s:%zu:%zu: invalid JSON", c->input_data, line, col);
      }
      free(text);
    }
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    if (!st && (!cJSON_IsArray(data) || cJSON_GetArraySize(data) == 0))
      st = cinfer_status_new(CINFER_INVALID_ARG, "%s: expected {\"data\": [ {\"INPUT\": [...]}, ... ]}", c->input_data);
    int entry = 0;
    const cJSON *e;
    if (!st) cJSON_ArrayForEach(e, data) {
      for (int k = 0; k < nin && !st; k++) {
        kinput ik = in[k];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, in[k].name);
        if (!v) st = cinfer_status_new(CINFER_INVALID_ARG, "%s: data[%d]: no value for input '%s'", c->input_data, entry, in[k].name);
        else st = file_tensor(c, &ik, v, entry, &td[k]);
        if (!st) {
          /* the entry may give its own shape */
          in[k].ndim = ik.ndim;
          memcpy(in[k].shape, ik.shape, sizeof ik.shape);
          in[k].elems = ik.elems;
        }
      }
      if (!st) st = kserve_request(c, path, in, nin, td, rs, outs);
      for (int k = 0; k < nin; k++) cbuf_free(&td[k].raw);
      if (st) break;
      entry++;
    }
    cJSON_Delete(j);
  } else {
    size_t per = 0;
    for (int k = 0; k < nin && !st; k++) {
      if (in[k].elems < 0)
        st = cinfer_status_new(CINFER_INVALID_ARG, "input '%s' has a dynamic shape; fix it with --shape %s:D1,D2,...",
                               in[k].name, in[k].name);
      else if ((uint64_t)in[k].elems > MAX_REQUEST_BYTES / 16)
        st = cinfer_status_new(CINFER_INVALID_ARG, "input '%s': %lld elements is too many", in[k].name, (long long)in[k].elems);
      else
        per += (size_t)in[k].elems * (in[k].dtype == CINFER_TYPE_BYTES ? 12 : cinfer_dtype_size(in[k].dtype));
    }
    image_set im = {0};
    if (!st && c->images_dir) st = images_open(c, in, nin, &im);
    size_t variants = per ? VARIANT_BUDGET / per : 8;
    size_t want = im.n ? (im.n + (size_t)im.batch - 1) / (size_t)im.batch : 8;
    if (want > 64) want = 64;
    if (variants > want) variants = want;
    if (variants < 1) variants = 1;
    uint64_t seed = c->seed;
    for (size_t v = 0; v < variants && !st; v++) {
      for (int k = 0; k < nin && !st; k++)
        st = im.n && k == im.input ? image_tensor(c, &in[k], &im, v, &td[k])
                                   : random_tensor(&in[k], &seed, &td[k]);
      if (!st) st = kserve_request(c, path, in, nin, td, rs, outs);
      for (int k = 0; k < nin; k++) cbuf_free(&td[k].raw);
    }
    images_close(&im);
  }
  free(td);
  free(in);
  free(outs);
  return st;
}

cinfer_status *bench_reqset_build(const bench_config *c, const bench_addr *a, bench_reqset *rs) {
  memset(rs, 0, sizeof *rs);
  cinfer_status *st;
  switch (c->target) {
    case BENCH_TARGET_HTTP_GET:
    case BENCH_TARGET_HTTP_POST: st = build_raw(c, rs); break;
    case BENCH_TARGET_OPENAI:
      st = build_openai(c, rs);
      if (!st && c->conversation) st = bench_conv_system(c, &rs->system);
      break;
    case BENCH_TARGET_KSERVE: st = build_kserve(c, a, rs); break;
    default: st = cinfer_status_new(CINFER_INVALID_ARG, "no target");
  }
  if (st) bench_reqset_free(rs);
  return st;
}
