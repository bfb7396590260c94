/* kserve.c: KServe v2 JSON + binary tensor codec. See kserve.h.
 *
 * Invariants: the counts of inputs and requested outputs are checked against
 * CINFER_MAX_INPUTS / CINFER_MAX_OUTPUTS before anything is sized from them; every shape is
 * checked (at most CINFER_MAX_DIMS dims, non-negative, element count within limits, no
 * overflow) before a buffer is sized from it; every binary_data_size is checked against
 * what remains of the binary section; JSON nesting is bounded by the parser (core/json). */
#include "frontend/kserve.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/json.h"
#include "core/numfmt.h"

struct kserve_request {
  json_doc *doc;
  const char *id;
  kserve_input *inputs;
  size_t n_inputs;
  kserve_output_req *outputs;
  size_t n_outputs;
  bool binary_default;
  const json_value *params;
};

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)

typedef struct {
  cinfer_dtype dt;
  unsigned char *out;
  size_t pos, cap; /* bytes */
  int64_t count, want;
  const char *name;
} flat_ctx;

static cinfer_status *put_elem(flat_ctx *c, const json_value *v) {
  if (c->count >= c->want)
    return BAD("input '%s': 'data' has more elements than the shape's %lld", c->name,
               (long long)c->want);
  c->count++;
  cinfer_dtype dt = c->dt;
  if (dt == CINFER_TYPE_BYTES) {
    if (!json_is(v, JSON_STRING))
      return BAD("input '%s': BYTES data must be strings", c->name);
    size_t n = v->len;
    if (n > UINT32_MAX) return BAD("input '%s': string element too long", c->name);
    if (c->cap - c->pos < 4 + n) {
      size_t ncap = c->cap * 2 + 4 + n;
      unsigned char *nb = realloc(c->out, ncap);
      if (!nb) return cinfer_status_oom(NULL);
      c->out = nb;
      c->cap = ncap;
    }
    uint32_t l = (uint32_t)n;
    unsigned char *p = c->out + c->pos;
    p[0] = (unsigned char)l, p[1] = (unsigned char)(l >> 8), p[2] = (unsigned char)(l >> 16),
    p[3] = (unsigned char)(l >> 24);
    memcpy(p + 4, v->u.str, n);
    c->pos += 4 + n;
    return NULL;
  }
  unsigned char *p = c->out + c->pos;
  c->pos += cinfer_dtype_size(dt);
  if (dt == CINFER_TYPE_BOOL) {
    if (!json_is_bool(v)) return BAD("input '%s': BOOL data must be true or false", c->name);
    *p = v->type == JSON_TRUE;
    return NULL;
  }
  if (!json_is(v, JSON_NUMBER))
    return BAD("input '%s': %s data must be numbers", c->name, cinfer_dtype_name(dt));
  double d = v->u.num;
  switch (dt) {
    case CINFER_TYPE_FP32: { float f = (float)d; memcpy(p, &f, 4); return NULL; }
    case CINFER_TYPE_FP64: memcpy(p, &d, 8); return NULL;
    case CINFER_TYPE_FP16: { uint16_t h = float_to_half((float)d); memcpy(p, &h, 2); return NULL; }
    case CINFER_TYPE_BF16: { uint16_t h = float_to_bf16((float)d); memcpy(p, &h, 2); return NULL; }
    default: break;
  }
  if (d != floor(d))
    return BAD("input '%s': %s data must be integers, got %g", c->name, cinfer_dtype_name(dt), d);
#define INT_CASE(T, ctype, lo, hi)                                                         \
  case T: {                                                                                \
    if (d < (double)(lo) || d > (double)(hi))                                              \
      return BAD("input '%s': value %.17g is out of range for %s", c->name, d,             \
                 cinfer_dtype_name(dt));                                                   \
    ctype x = (ctype)d;                                                                    \
    memcpy(p, &x, sizeof x);                                                               \
    return NULL;                                                                           \
  }
  switch (dt) {
    INT_CASE(CINFER_TYPE_UINT8, uint8_t, 0, UINT8_MAX)
    INT_CASE(CINFER_TYPE_UINT16, uint16_t, 0, UINT16_MAX)
    INT_CASE(CINFER_TYPE_UINT32, uint32_t, 0, UINT32_MAX)
    INT_CASE(CINFER_TYPE_UINT64, uint64_t, 0, 18446744073709549568.0)
    INT_CASE(CINFER_TYPE_INT8, int8_t, INT8_MIN, INT8_MAX)
    INT_CASE(CINFER_TYPE_INT16, int16_t, INT16_MIN, INT16_MAX)
    INT_CASE(CINFER_TYPE_INT32, int32_t, INT32_MIN, INT32_MAX)
    INT_CASE(CINFER_TYPE_INT64, int64_t, -9223372036854775808.0, 9223372036854774784.0)
    default: break;
  }
#undef INT_CASE
  return BAD("input '%s': unsupported datatype", c->name);
}

static cinfer_status *flatten(flat_ctx *c, const json_value *v) {
  if (!json_is(v, JSON_ARRAY)) return put_elem(c, v);
  for (const json_value *e = v->u.child; e; e = e->next) {
    cinfer_status *st = flatten(c, e);
    if (st) return st;
  }
  return NULL;
}

static cinfer_status *parse_shape(const json_value *shape, const char *name, cinfer_tensor *t,
                                  const kserve_limits *lim) {
  if (!json_is(shape, JSON_ARRAY)) return BAD("input '%s': 'shape' must be an array of integers", name);
  if (shape->len > CINFER_MAX_DIMS) return kserve_input_shape(name, NULL, shape->len, lim, t);
  int64_t dims[CINFER_MAX_DIMS];
  int i = 0;
  for (const json_value *d = shape->u.child; d; d = d->next, i++) {
    if (!json_is(d, JSON_NUMBER) || d->u.num != floor(d->u.num) || d->u.num < 0 ||
        d->u.num > 9.0e15)
      return BAD("input '%s': shape[%d] must be a non-negative integer", name, i);
    dims[i] = (int64_t)d->u.num;
  }
  return kserve_input_shape(name, dims, (size_t)i, lim, t);
}

void kserve_request_free(kserve_request *k) {
  if (!k) return;
  for (size_t i = 0; i < k->n_inputs; i++) free(k->inputs[i].owned);
  free(k->inputs);
  free(k->outputs);
  json_doc_free(k->doc);
  free(k);
}

static bool get_bool_param(const json_value *params, const char *key, bool *out) {
  const json_value *v = json_get(params, key);
  if (!json_is_bool(v)) return false;
  *out = v->type == JSON_TRUE;
  return true;
}

cinfer_status *kserve_decode(const char *body, size_t body_len, int64_t header_len,
                             const kserve_limits *lim, kserve_request **out) {
  *out = NULL;
  size_t jlen = body_len;
  if (header_len >= 0) {
    if ((uint64_t)header_len > body_len)
      return BAD("Inference-Header-Content-Length (%lld) is larger than the body (%zu bytes)",
                 (long long)header_len, body_len);
    jlen = (size_t)header_len;
  }
  if (jlen == 0) return BAD("empty request body: expected a JSON object");
  json_doc *doc;
  cinfer_status *st = json_parse(body, jlen, lim->max_json_depth, &doc);
  if (st) return cinfer_status_prefix(st, "request body");
  const json_value *root = json_root(doc);
  kserve_request *k = calloc(1, sizeof *k);
  if (!k) {
    json_doc_free(doc);
    return cinfer_status_oom(NULL);
  }
  k->doc = doc;
  const char *bin = body + jlen;
  size_t bin_left = body_len - jlen;

  if (!json_is(root, JSON_OBJECT)) { st = BAD("request body must be a JSON object"); goto fail; }
  const json_value *id = json_get(root, "id");
  if (id) {
    if (!json_is(id, JSON_STRING)) { st = BAD("'id' must be a string"); goto fail; }
    k->id = id->u.str;
  }
  k->params = json_get(root, "parameters");
  if (k->params && !json_is(k->params, JSON_OBJECT)) {
    st = BAD("'parameters' must be an object");
    goto fail;
  }
  get_bool_param(k->params, "binary_data_output", &k->binary_default);

  const json_value *inputs = json_get(root, "inputs");
  if (!json_is(inputs, JSON_ARRAY)) {
    st = BAD("request must have a non-empty 'inputs' array");
    goto fail;
  }
  if ((st = kserve_check_input_count(inputs->len))) goto fail;
  k->inputs = calloc(inputs->len, sizeof *k->inputs);
  if (!k->inputs) { st = cinfer_status_oom(NULL); goto fail; }
  for (const json_value *in = inputs->u.child; in; in = in->next) {
    kserve_input *ki = &k->inputs[k->n_inputs];
    cinfer_tensor *t = &ki->t;
    if (!json_is(in, JSON_OBJECT)) { st = BAD("inputs[%zu] must be an object", k->n_inputs); goto fail; }
    const json_value *name = json_get(in, "name");
    if ((st = kserve_input_name(k->inputs, k->n_inputs, json_is(name, JSON_STRING) ? name->u.str : NULL, t)))
      goto fail;
    k->n_inputs++;
    const json_value *dt = json_get(in, "datatype");
    if (!json_is(dt, JSON_STRING)) { st = BAD("input '%s' needs a string 'datatype'", t->name); goto fail; }
    if ((st = kserve_input_datatype(t->name, dt->u.str, dt->len, t))) goto fail;
    if ((st = parse_shape(json_get(in, "shape"), t->name, t, lim)))
      goto fail;
    int64_t elems = cinfer_shape_elements(t->shape, t->ndim);
    const json_value *bds = json_get(json_get(in, "parameters"), "binary_data_size");
    const json_value *data = json_get(in, "data");
    if (bds) {
      if (!json_is(bds, JSON_NUMBER) || !(bds->u.num >= 0) || bds->u.num != floor(bds->u.num)) {
        st = BAD("input '%s': binary_data_size must be a non-negative integer", t->name);
        goto fail;
      }
      if (data) { st = BAD("input '%s' has both 'data' and binary_data_size", t->name); goto fail; }
      if (bds->u.num > (double)bin_left) {
        st = BAD("input '%s': binary_data_size %.0f exceeds the %zu bytes of binary data left",
                 t->name, bds->u.num, bin_left);
        goto fail;
      }
      /* Zero copy unless the JSON header's length left the bytes misaligned. */
      size_t nb = (size_t)bds->u.num;
      if ((st = kserve_input_bytes(ki, bin, nb))) goto fail;
      bin += nb;
      bin_left -= nb;
      continue;
    }
    if (!data) { st = BAD("input '%s' has neither 'data' nor binary_data_size", t->name); goto fail; }
    size_t es = cinfer_dtype_size(t->dtype);
    size_t cap = t->dtype == CINFER_TYPE_BYTES ? 64 + (size_t)elems * 8 : (size_t)elems * es;
    flat_ctx c = {t->dtype, malloc(cap ? cap : 1), 0, cap, 0, elems, t->name};
    if (!c.out) { st = cinfer_status_oom(NULL); goto fail; }
    ki->owned = c.out;
    st = flatten(&c, data);
    ki->owned = c.out; /* may have moved */
    if (st) goto fail;
    if (c.count != elems) {
      st = BAD("input '%s': 'data' has %lld elements but the shape needs %lld", t->name,
               (long long)c.count, (long long)elems);
      goto fail;
    }
    t->data = c.out;
    t->byte_size = c.pos;
  }
  if (bin_left) {
    st = BAD("%zu bytes of binary data follow the last binary input", bin_left);
    goto fail;
  }

  const json_value *outputs = json_get(root, "outputs");
  if (outputs) {
    if (!json_is(outputs, JSON_ARRAY)) { st = BAD("'outputs' must be an array"); goto fail; }
    if ((st = kserve_check_output_count(outputs->len))) goto fail;
    k->outputs = calloc((size_t)outputs->len + 1, sizeof *k->outputs);
    if (!k->outputs) { st = cinfer_status_oom(NULL); goto fail; }
    for (const json_value *o = outputs->u.child; o; o = o->next) {
      const json_value *name = json_get(o, "name");
      if (!json_is(name, JSON_STRING)) {
        st = BAD("outputs[%zu] needs a string 'name'", k->n_outputs);
        goto fail;
      }
      kserve_output_req *ko = &k->outputs[k->n_outputs++];
      ko->name = name->u.str;
      ko->binary = k->binary_default;
      const json_value *op = json_get(o, "parameters");
      if (op && !json_is(op, JSON_OBJECT)) {
        st = BAD("output '%s': 'parameters' must be an object", ko->name);
        goto fail;
      }
      get_bool_param(op, "binary_data", &ko->binary);
      if ((st = kserve_output_params(ko->name, json_get(op, "classification") != NULL))) goto fail;
    }
  }
  *out = k;
  return NULL;
fail:
  kserve_request_free(k);
  return st;
}

const char *kserve_request_id(const kserve_request *k) { return k->id; }
size_t kserve_request_input_count(const kserve_request *k) { return k->n_inputs; }
kserve_input *kserve_request_input(kserve_request *k, size_t i) { return &k->inputs[i]; }
size_t kserve_request_output_count(const kserve_request *k) { return k->n_outputs; }
const kserve_output_req *kserve_request_output(const kserve_request *k, size_t i) {
  return &k->outputs[i];
}
bool kserve_request_binary_default(const kserve_request *k) { return k->binary_default; }

cinfer_status *kserve_apply(kserve_request *k, cinfer_request *r) {
  cinfer_status *st;
  if (k->id) cinfer_request_set_id(r, k->id, strlen(k->id));
  for (size_t i = 0; i < k->n_inputs; i++) {
    kserve_input *ki = &k->inputs[i];
    if (ki->owned) {
      if ((st = cinfer_request_add_input_owned(r, &ki->t, ki->owned))) return st;
      ki->owned = NULL;
    } else if ((st = cinfer_request_add_input(r, &ki->t))) {
      return st;
    }
  }
  for (size_t i = 0; i < k->n_outputs; i++)
    if ((st = cinfer_request_add_output(r, k->outputs[i].name))) return st;
  if (k->params) {
    for (const json_value *p = k->params->u.child; p; p = p->next) {
      const char *key = p->key;
      if (!strcmp(key, "binary_data_output")) continue;
      if (json_is_bool(p)) st = cinfer_request_set_param_bool(r, key, p->type == JSON_TRUE);
      else if (json_is(p, JSON_STRING))
        st = cinfer_request_set_param_string(r, key, p->u.str, p->len);
      else if (json_is(p, JSON_NUMBER) && p->u.num == floor(p->u.num) &&
               fabs(p->u.num) < 9.0e15)
        st = cinfer_request_set_param_int(r, key, (int64_t)p->u.num);
      else if (json_is(p, JSON_NUMBER)) st = cinfer_request_set_param_double(r, key, p->u.num);
      else st = BAD("parameter '%s' must be a string, number or boolean", key);
      if (st) return st;
    }
  }
  return NULL;
}

/* ---- encoding ------------------------------------------------------------------------ */

/* Shortest text that reads back as the same float (fp32: true) or double. JSON has no
 * spelling for non-finite numbers; these are the ones Python's json and core/json accept. */
static void put_real(cbuf *b, double d, bool fp32) {
  if (isnan(d)) cbuf_puts(b, "NaN");
  else if (isinf(d)) cbuf_puts(b, d > 0 ? "Infinity" : "-Infinity");
  else {
    char t[NUMFMT_BUF];
    cbuf_put(b, t, fp32 ? numfmt_float(t, (float)d) : numfmt_double(t, d));
  }
}

static void put_u64(cbuf *b, uint64_t v) {
  char t[20], *o = t + sizeof t;
  do *--o = (char)('0' + v % 10); while (v /= 10);
  cbuf_put(b, o, (size_t)(t + sizeof t - o));
}

static void put_i64(cbuf *b, int64_t v) {
  if (v < 0) cbuf_put(b, "-", 1);
  put_u64(b, v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

static void encode_data(cbuf *b, const cinfer_tensor *t) {
  int64_t n = cinfer_shape_elements(t->shape, t->ndim);
  const unsigned char *p = t->data;
  cbuf_put(b, "[", 1);
  size_t off = 0;
  for (int64_t i = 0; i < n && !b->oom; i++) {
    if (i) cbuf_put(b, ",", 1);
    switch (t->dtype) {
      case CINFER_TYPE_BOOL: cbuf_puts(b, p[i] ? "true" : "false"); break;
      case CINFER_TYPE_UINT8: put_u64(b, p[i]); break;
      case CINFER_TYPE_INT8: put_i64(b, (int8_t)p[i]); break;
#define NUM(T, ctype, put)                               \
  case T: {                                              \
    ctype v;                                             \
    memcpy(&v, p + (size_t)i * sizeof v, sizeof v);      \
    put(b, v);                                           \
    break;                                               \
  }
      NUM(CINFER_TYPE_UINT16, uint16_t, put_u64)
      NUM(CINFER_TYPE_UINT32, uint32_t, put_u64)
      NUM(CINFER_TYPE_UINT64, uint64_t, put_u64)
      NUM(CINFER_TYPE_INT16, int16_t, put_i64)
      NUM(CINFER_TYPE_INT32, int32_t, put_i64)
      NUM(CINFER_TYPE_INT64, int64_t, put_i64)
#undef NUM
      case CINFER_TYPE_FP32: { float v; memcpy(&v, p + (size_t)i * 4, 4); put_real(b, v, true); break; }
      case CINFER_TYPE_FP64: { double v; memcpy(&v, p + (size_t)i * 8, 8); put_real(b, v, false); break; }
      case CINFER_TYPE_FP16: { uint16_t v; memcpy(&v, p + (size_t)i * 2, 2); put_real(b, half_to_float(v), true); break; }
      case CINFER_TYPE_BF16: { uint16_t v; memcpy(&v, p + (size_t)i * 2, 2); put_real(b, bf16_to_float(v), true); break; }
      case CINFER_TYPE_BYTES: {
        if (t->byte_size - off < 4) { i = n; break; }
        uint32_t l = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 | (uint32_t)p[off + 2] << 16 |
                     (uint32_t)p[off + 3] << 24;
        off += 4;
        if (l > t->byte_size - off) l = (uint32_t)(t->byte_size - off);
        cbuf_json_string(b, (const char *)p + off, l);
        off += l;
        break;
      }
      default: cbuf_puts(b, "null"); break;
    }
  }
  cbuf_put(b, "]", 1);
}

bool kserve_output_binary(const kserve_request *req, const char *name) {
  if (!req) return false;
  for (size_t k = 0; k < req->n_outputs; k++)
    if (!strcmp(req->outputs[k].name, name)) return req->outputs[k].binary;
  return req->binary_default;
}

bool kserve_encode_response(cbuf *out, size_t *json_len, const char *model, int64_t version,
                            const kserve_request *req, const cinfer_response *resp) {
  const char *id = req ? req->id : NULL;
  cbuf_puts(out, "{");
  if (id && id[0]) {
    cbuf_puts(out, "\"id\":");
    cbuf_json_string(out, id, strlen(id));
    cbuf_puts(out, ",");
  }
  cbuf_puts(out, "\"model_name\":");
  cbuf_json_string(out, model, strlen(model));
  cbuf_puts(out, ",\"model_version\":\"");
  put_i64(out, version);
  cbuf_puts(out, "\",\"outputs\":[");
  uint32_t n = cinfer_response_output_count(resp);
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    if (i) cbuf_put(out, ",", 1);
    cbuf_puts(out, "{\"name\":");
    cbuf_json_string(out, t->name, strlen(t->name));
    cbuf_puts(out, ",\"datatype\":\"");
    cbuf_puts(out, cinfer_dtype_name(t->dtype));
    cbuf_puts(out, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) cbuf_put(out, ",", 1);
      put_i64(out, t->shape[d]);
    }
    cbuf_puts(out, "]");
    if (kserve_output_binary(req, t->name)) {
      cbuf_puts(out, ",\"parameters\":{\"binary_data_size\":");
      put_u64(out, t->byte_size);
      cbuf_puts(out, "}}");
    } else {
      cbuf_puts(out, ",\"data\":");
      encode_data(out, t);
      cbuf_puts(out, "}");
    }
  }
  cbuf_puts(out, "]}");
  *json_len = out->len;
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    if (kserve_output_binary(req, t->name)) cbuf_put(out, t->data, t->byte_size);
  }
  return !out->oom;
}

void kserve_encode_error(cbuf *out, const char *msg) {
  cbuf_puts(out, "{\"error\":");
  cbuf_json_string(out, msg, strlen(msg));
  cbuf_puts(out, "}");
}
