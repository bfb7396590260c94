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
#include "frontend/classify.h"

struct kserve_request {
  json_doc *doc;
  const char *id;
  kserve_input *inputs;
  size_t n_inputs;
  kserve_output_req *outputs;
  size_t n_outputs;
  bool binary_default;
  const json_value *params;
  char *raw_name; /* a raw binary request's input name (the config's) */
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
  /* Integer literals carry their exact value (core/json): INT64 / UINT64 never round
   * through a double. Other spellings of an integer (1.0, 1e3) go through the double. */
  if (v->int_flags) {
#define EXACT_S(T, ctype, lo, hi)                                                          \
  case T: {                                                                                \
    if (!(v->int_flags & JSON_INT_I64) || v->ix.i < (lo) || v->ix.i > (hi))                \
      return BAD("input '%s': value %s%llu is out of range for %s", c->name,               \
                 (v->int_flags & JSON_INT_I64) && v->ix.i < 0 ? "-" : "",                  \
                 (unsigned long long)((v->int_flags & JSON_INT_I64) && v->ix.i < 0         \
                                          ? 0 - (uint64_t)v->ix.i : v->ix.u),              \
                 cinfer_dtype_name(dt));                                                   \
    ctype x = (ctype)v->ix.i;                                                              \
    memcpy(p, &x, sizeof x);                                                               \
    return NULL;                                                                           \
  }
#define EXACT_U(T, ctype, hi)                                                              \
  case T: {                                                                                \
    if (!(v->int_flags & JSON_INT_U64) || v->ix.u > (hi))                                  \
      return BAD("input '%s': value %s%llu is out of range for %s", c->name,               \
                 (v->int_flags & JSON_INT_U64) ? "" : "-",                                 \
                 (unsigned long long)((v->int_flags & JSON_INT_U64) ? v->ix.u              \
                                                                    : 0 - (uint64_t)v->ix.i), \
                 cinfer_dtype_name(dt));                                                   \
    ctype x = (ctype)v->ix.u;                                                              \
    memcpy(p, &x, sizeof x);                                                               \
    return NULL;                                                                           \
  }
    switch (dt) {
      EXACT_U(CINFER_TYPE_UINT8, uint8_t, UINT8_MAX)
      EXACT_U(CINFER_TYPE_UINT16, uint16_t, UINT16_MAX)
      EXACT_U(CINFER_TYPE_UINT32, uint32_t, UINT32_MAX)
      EXACT_U(CINFER_TYPE_UINT64, uint64_t, UINT64_MAX)
      EXACT_S(CINFER_TYPE_INT8, int8_t, INT8_MIN, INT8_MAX)
      EXACT_S(CINFER_TYPE_INT16, int16_t, INT16_MIN, INT16_MAX)
      EXACT_S(CINFER_TYPE_INT32, int32_t, INT32_MIN, INT32_MAX)
      EXACT_S(CINFER_TYPE_INT64, int64_t, INT64_MIN, INT64_MAX)
      default: break;
    }
#undef EXACT_S
#undef EXACT_U
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

static void shape_text(char *o, size_t cap, const int64_t *d, int nd) {
  size_t n = (size_t)snprintf(o, cap, "[");
  for (int i = 0; i < nd && n < cap; i++)
    n += (size_t)snprintf(o + n, cap - n, "%s%lld", i ? "," : "", (long long)d[i]);
  if (n < cap) snprintf(o + n, cap - n, "]");
}

static cinfer_status *parse_shape(const json_value *shape, const char *name, cinfer_tensor *t,
                                  const kserve_limits *lim) {
  if (!json_is(shape, JSON_ARRAY)) return BAD("input '%s': 'shape' must be an array of integers", name);
  int nd = shape->len > CINFER_MAX_DIMS ? CINFER_MAX_DIMS + 1 : (int)shape->len;
  if (nd > CINFER_MAX_DIMS)
    return BAD("input '%s': shape has %u dimensions; the limit is CINFER_MAX_DIMS = %d", name,
               shape->len, CINFER_MAX_DIMS);
  int i = 0;
  for (const json_value *d = shape->u.child; d; d = d->next, i++) {
    if (!json_is(d, JSON_NUMBER) || !(d->int_flags & JSON_INT_I64) || d->ix.i < 0)
      return BAD("input '%s': shape[%d] must be a non-negative integer", name, i);
    t->shape[i] = d->ix.i;
  }
  t->ndim = nd;
  /* Triton's texts for a product past int64 and for a byte size past int64. */
  int64_t el = 1;
  bool zero = false;
  for (int k = 0; k < nd; k++) zero |= t->shape[k] == 0;
  for (int k = 0; k < nd && !zero; k++) {
    if (el > INT64_MAX / t->shape[k]) {
      char txt[256];
      shape_text(txt, sizeof txt, t->shape, nd);
      return BAD("invalid shape for input '%s': shape %s causes total element count to exceed "
                 "maximum size of %lld", name, txt, (long long)INT64_MAX);
    }
    el *= t->shape[k];
  }
  if (zero) el = 0;
  size_t es = cinfer_dtype_size(t->dtype);
  if (es > 1 && el > INT64_MAX / (int64_t)es)
    return BAD("byte size overflow for input '%s': element count (%lld) * data type size (%zu) "
               "exceeds maximum allowed size (%lld)", name, (long long)el, es, (long long)INT64_MAX);
  if (el > lim->max_tensor_elements)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "input '%s': shape has more than the limit of %lld elements", name,
                             (long long)lim->max_tensor_elements);
  return NULL;
}

void kserve_request_free(kserve_request *k) {
  if (!k) return;
  for (size_t i = 0; i < k->n_inputs; i++) {
    free(k->inputs[i].owned);
    shm_region_release(k->inputs[i].shm);
  }
  free(k->inputs);
  for (size_t i = 0; k->outputs && i < k->n_outputs; i++) {
    shm_region_release(k->outputs[i].shm);
    cbuf_free(&k->outputs[i].cls);
  }
  free(k->outputs);
  json_doc_free(k->doc);
  free(k->raw_name);
  free(k);
}

static bool get_bool_param(const json_value *params, const char *key, bool *out) {
  const json_value *v = json_get(params, key);
  if (!json_is_bool(v)) return false;
  *out = v->type == JSON_TRUE;
  return true;
}

/* A parameter that must be a non-negative integer (Triton's AsUInt): *out = 0 when absent. */
static cinfer_status *get_uint_param(const json_value *params, const char *key, uint64_t *out) {
  *out = 0;
  const json_value *v = json_get(params, key);
  if (!v) return NULL;
  if (!json_is(v, JSON_NUMBER) || !(v->int_flags & JSON_INT_U64))
    return BAD("Unable to parse '%s': must be a non-negative integer", key);
  *out = v->ix.u;
  return NULL;
}

/* Copies t->data to 64-byte-aligned memory owned by ki (kernels read typed elements; a
 * BYTES tensor read from shared memory must not change under its length checks). */
static cinfer_status *own_copy(kserve_input *ki) {
  cinfer_tensor *t = &ki->t;
  void *copy = NULL;
  if (posix_memalign(&copy, 64, t->byte_size ? t->byte_size : 64)) return cinfer_status_oom(NULL);
  if (t->byte_size) memcpy(copy, t->data, t->byte_size);
  t->data = copy;
  ki->owned = copy;
  return NULL;
}

/* Triton's raw binary request: the body is the tensor of the model's only input. */
static cinfer_status *decode_raw(const char *body, size_t body_len, const kserve_limits *lim,
                                 const cinfer_config *cfg, kserve_request *k) {
  cinfer_config_io in0;
  if (cinfer_config_input_count(cfg) != 1 || !cinfer_config_input(cfg, 0, &in0))
    return BAD("Raw request must only have 1 input (found 1) to be deduced but got %u inputs in "
               "'%s' model configuration", cinfer_config_input_count(cfg), cinfer_config_name(cfg));
  if (lim->max_input_bytes && body_len > lim->max_input_bytes)
    return BAD("Raw input has a byte_size (%zu bytes) that exceeds the maximum allowed value of "
               "%zu bytes. Use --http-max-input-size to increase the limit.", body_len,
               lim->max_input_bytes);
  const cinfer_config_io *io = &in0;
  k->inputs = calloc(1, sizeof *k->inputs);
  if (!k->inputs || !(k->raw_name = strdup(io->name))) return cinfer_status_oom(NULL);
  k->n_inputs = 1;
  kserve_input *ki = &k->inputs[0];
  cinfer_tensor *t = &ki->t;
  t->name = k->raw_name;
  t->dtype = io->dtype;
  int nd = 0, dyn = -1;
  if (cinfer_config_max_batch_size(cfg) > 0) t->shape[nd++] = 1;
  uint64_t el = 1;
  for (int d = 0; d < io->ndim; d++) {
    if (nd >= CINFER_MAX_DIMS)
      return BAD("raw input '%s': the configured shape has more than CINFER_MAX_DIMS = %d dims",
                 io->name, CINFER_MAX_DIMS);
    if (io->dims[d] < 0) {
      if (dyn >= 0)
        return BAD("The shape of the raw input '%s' can not be deduced because there are more "
                   "than one variable-sized dimension", io->name);
      dyn = nd;
    } else {
      el *= (uint64_t)io->dims[d]; /* config dims are validated small at load */
    }
    t->shape[nd++] = io->dims[d];
  }
  t->ndim = nd;
  size_t es = cinfer_dtype_size(t->dtype);
  if (t->dtype == CINFER_TYPE_BYTES) {
    if (dyn >= 0 || el != 1)
      return BAD("For BYTE datatype raw input '%s', the model must have input shape [1]",
                 io->name);
    if (body_len > UINT32_MAX) return BAD("raw input '%s': string element too long", io->name);
    /* Triton's convention: the 4-byte length goes in front of the one element. */
    unsigned char *b = malloc(body_len + 4);
    if (!b) return cinfer_status_oom(NULL);
    uint32_t l = (uint32_t)body_len;
    b[0] = (unsigned char)l, b[1] = (unsigned char)(l >> 8), b[2] = (unsigned char)(l >> 16),
    b[3] = (unsigned char)(l >> 24);
    if (body_len) memcpy(b + 4, body, body_len);
    ki->owned = b;
    t->data = b;
    t->byte_size = body_len + 4;
    return NULL;
  }
  if (es == 0) return BAD("raw input '%s': unsupported datatype", io->name);
  if (dyn >= 0) {
    uint64_t row = el * es;
    t->shape[dyn] = row ? (int64_t)(body_len / row) : 0;
    if (row && body_len % row)
      return BAD("unexpected total byte size %zu for raw input '%s': not a whole number of "
                 "%llu-byte rows", body_len, io->name, (unsigned long long)row);
  }
  int64_t elems = cinfer_shape_elements(t->shape, t->ndim);
  if (elems < 0 || elems > lim->max_tensor_elements)
    return BAD("raw input '%s': shape has more than the limit of %lld elements", io->name,
               (long long)lim->max_tensor_elements);
  t->data = body;
  t->byte_size = body_len;
  if ((uint64_t)elems * es != body_len)
    return BAD("input byte size mismatch for input '%s' for model '%s'. Expected %llu, got %zu",
               io->name, cinfer_config_name(cfg), (unsigned long long)elems * es, body_len);
  cinfer_status *st = cinfer_tensor_check(t);
  if (st) return st;
  if (es > 1 && ((uintptr_t)t->data % es) != 0) return own_copy(ki);
  return NULL;
}

static cinfer_status *bad_input_fields(const char *name, bool d, bool b, bool m) {
  int n = d + b + m;
  return BAD("input '%s': Input must set only one of the following fields: 'data', "
             "'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But%s%s%s%s",
             name, n == 0 ? " no field is set" : " set", d ? " 'data'" : "",
             b ? " 'binary_data_size'" : "", m ? " 'shared_memory_region'" : "");
}

cinfer_status *kserve_decode(const char *body, size_t body_len, int64_t header_len,
                             const kserve_limits *lim, kserve_request **out) {
  return kserve_decode_with(body, body_len, header_len, lim, NULL, out);
}

cinfer_status *kserve_decode_with(const char *body, size_t body_len, int64_t header_len,
                                  const kserve_limits *lim, const kserve_decode_ctx *ctx,
                                  kserve_request **out) {
  *out = NULL;
  static const kserve_decode_ctx none;
  if (!ctx) ctx = &none;
  size_t jlen = body_len;
  if (header_len >= 0) {
    if ((uint64_t)header_len > body_len)
      return BAD("Inference-Header-Content-Length (%lld) is larger than the body (%zu bytes)",
                 (long long)header_len, body_len);
    jlen = (size_t)header_len;
  }
  cinfer_status *st;
  if (header_len == 0 && ctx->config) {
    kserve_request *k = calloc(1, sizeof *k);
    if (!k) return cinfer_status_oom(NULL);
    k->binary_default = true; /* every output binary, as Triton answers a raw request */
    if ((st = decode_raw(body, body_len, lim, ctx->config, k))) {
      kserve_request_free(k);
      return st;
    }
    *out = k;
    return NULL;
  }
  if (jlen == 0) return BAD("empty request body: expected a JSON object");
  if (lim->max_input_bytes && jlen > lim->max_input_bytes)
    return BAD("request JSON size of %zu bytes exceeds the maximum allowed input size of %zu "
               "bytes. Use --http-max-input-size to increase the limit.", jlen,
               lim->max_input_bytes);
  json_doc *doc;
  st = json_parse(body, jlen, lim->max_json_depth, &doc);
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
  const json_value *bdo = json_get(k->params, "binary_data_output");
  if (bdo && !json_is_bool(bdo)) { st = BAD("Unable to parse 'binary_data_output': must be a boolean"); goto fail; }
  get_bool_param(k->params, "binary_data_output", &k->binary_default);

  const json_value *inputs = json_get(root, "inputs");
  if (!json_is(inputs, JSON_ARRAY) || !inputs->len) {
    st = BAD("request must have a non-empty 'inputs' array");
    goto fail;
  }
  if (inputs->len > CINFER_MAX_INPUTS) {
    st = BAD("request has %u inputs; the limit is CINFER_MAX_INPUTS = %d", inputs->len,
             CINFER_MAX_INPUTS);
    goto fail;
  }
  k->inputs = calloc(inputs->len, sizeof *k->inputs);
  if (!k->inputs) { st = cinfer_status_oom(NULL); goto fail; }
  for (const json_value *in = inputs->u.child; in; in = in->next) {
    kserve_input *ki = &k->inputs[k->n_inputs];
    cinfer_tensor *t = &ki->t;
    if (!json_is(in, JSON_OBJECT)) { st = BAD("inputs[%zu] must be an object", k->n_inputs); goto fail; }
    const json_value *name = json_get(in, "name");
    if (!json_is(name, JSON_STRING) || !name->u.str[0]) {
      st = BAD("inputs[%zu] needs a non-empty string 'name'", k->n_inputs);
      goto fail;
    }
    t->name = name->u.str;
    for (size_t j = 0; j < k->n_inputs; j++)
      if (!strcmp(k->inputs[j].t.name, t->name)) {
        st = BAD("input '%s' appears more than once", t->name);
        goto fail;
      }
    k->n_inputs++;
    const json_value *dt = json_get(in, "datatype");
    if (!json_is(dt, JSON_STRING)) { st = BAD("input '%s' needs a string 'datatype'", t->name); goto fail; }
    t->dtype = cinfer_dtype_parse(dt->u.str, dt->len);
    if (t->dtype == CINFER_TYPE_INVALID || strncmp(dt->u.str, "TYPE_", 5) == 0) {
      st = BAD("input '%s': unknown datatype '%s'", t->name, dt->u.str);
      goto fail;
    }
    if ((st = parse_shape(json_get(in, "shape"), t->name, t, lim)))
      goto fail;
    int64_t elems = cinfer_shape_elements(t->shape, t->ndim);
    const json_value *ip = json_get(in, "parameters");
    if (ip && !json_is(ip, JSON_OBJECT)) {
      st = BAD("input '%s': 'parameters' must be an object", t->name);
      goto fail;
    }
    const json_value *bds = json_get(ip, "binary_data_size");
    const json_value *shmr = json_get(ip, "shared_memory_region");
    const json_value *data = json_get(in, "data");
    if (!!data + !!bds + !!shmr != 1) {
      st = bad_input_fields(t->name, data, bds, shmr);
      goto fail;
    }
    size_t es = cinfer_dtype_size(t->dtype);
    if (shmr) {
      if (!json_is(shmr, JSON_STRING)) {
        st = BAD("input '%s': Unable to parse 'shared_memory_region': must be a string", t->name);
        goto fail;
      }
      uint64_t off = 0, bsz = 0;
      if (ctx->shm && ((st = get_uint_param(ip, "shared_memory_offset", &off)) ||
                       (st = get_uint_param(ip, "shared_memory_byte_size", &bsz)))) {
        st = cinfer_status_prefix(st, "input '%s'", t->name);
        goto fail;
      }
      /* Zero copy: the request borrows the mapping (ki->shm keeps it alive). */
      if ((st = kserve_input_shm(ki, ctx->shm, shmr->u.str, off, bsz, ctx->config))) goto fail;
      continue;
    }
    if (bds) {
      if (!json_is(bds, JSON_NUMBER) || !(bds->int_flags & JSON_INT_U64)) {
        st = BAD("input '%s': binary_data_size must be a non-negative integer", t->name);
        goto fail;
      }
      if (bds->ix.u > (uint64_t)bin_left) {
        st = BAD("input '%s': binary_data_size %llu exceeds the %zu bytes of binary data left",
                 t->name, (unsigned long long)bds->ix.u, bin_left);
        goto fail;
      }
      t->byte_size = (size_t)bds->ix.u;
      t->data = bin;
      bin += t->byte_size;
      bin_left -= t->byte_size;
      if ((st = kserve_check_byte_size(t, ctx->config)) || (st = cinfer_tensor_check(t))) goto fail;
      /* Zero copy when the bytes sit at an address aligned for their element type; the
       * JSON header's length decides that, so otherwise copy them to aligned memory
       * (kernels read typed elements). */
      if (es > 1 && ((uintptr_t)t->data % es) != 0 && (st = own_copy(ki))) goto fail;
      continue;
    }
    if (lim->max_input_bytes && t->dtype != CINFER_TYPE_BYTES &&
        (uint64_t)elems * es > lim->max_input_bytes) {
      st = BAD("JSON input '%s' has a byte_size (%llu bytes) that exceeds the maximum allowed "
               "value of %zu bytes. Use --http-max-input-size to increase the limit.", t->name,
               (unsigned long long)elems * es, lim->max_input_bytes);
      goto fail;
    }
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
    if (outputs->len > CINFER_MAX_OUTPUTS) {
      st = BAD("request asks for %u outputs; the limit is CINFER_MAX_OUTPUTS = %d", outputs->len,
               CINFER_MAX_OUTPUTS);
      goto fail;
    }
    k->outputs = calloc((size_t)outputs->len + 1, sizeof *k->outputs);
    if (!k->outputs) { st = cinfer_status_oom(NULL); goto fail; }
    for (const json_value *o = outputs->u.child; o; o = o->next) {
      const json_value *name = json_get(o, "name");
      if (!json_is(name, JSON_STRING)) {
        st = BAD("outputs[%zu] needs a string 'name'", k->n_outputs);
        goto fail;
      }
      for (size_t j = 0; j < k->n_outputs; j++)
        if (!strcmp(k->outputs[j].name, name->u.str)) {
          st = BAD("output '%s' already exists in request", name->u.str);
          goto fail;
        }
      kserve_output_req *ko = &k->outputs[k->n_outputs++];
      ko->name = name->u.str;
      /* Triton: a listed output is JSON unless its own binary_data says otherwise; the
       * request-level binary_data_output only sets the outputs the request does not list. */
      ko->binary = false;
      const json_value *op = json_get(o, "parameters");
      if (op && !json_is(op, JSON_OBJECT)) {
        st = BAD("output '%s': 'parameters' must be an object", ko->name);
        goto fail;
      }
      const json_value *bd = json_get(op, "binary_data");
      if (bd && !json_is_bool(bd)) {
        st = BAD("output '%s': Unable to parse 'binary_data': must be a boolean", ko->name);
        goto fail;
      }
      get_bool_param(op, "binary_data", &ko->binary);
      const json_value *cls = json_get(op, "classification");
      const json_value *oshm = json_get(op, "shared_memory_region");
      if (oshm && cls) {
        st = BAD("output '%s': Output can't set both 'shared_memory_region' and 'classification'",
                 ko->name);
        goto fail;
      }
      if (oshm && ko->binary) {
        st = BAD("output '%s': Output can't set both 'shared_memory_region' and 'binary_data'",
                 ko->name);
        goto fail;
      }
      if (cls) {
        uint64_t kc;
        if ((st = get_uint_param(op, "classification", &kc))) {
          st = cinfer_status_prefix(st, "output '%s'", ko->name);
          goto fail;
        }
        ko->class_count = kc > CLASSIFY_MAX_ELEMENTS ? CLASSIFY_MAX_ELEMENTS : (uint32_t)kc;
      }
      if (oshm) {
        if (!json_is(oshm, JSON_STRING)) {
          st = BAD("output '%s': Unable to parse 'shared_memory_region': must be a string", ko->name);
          goto fail;
        }
        uint64_t off = 0, bsz = 0;
        if (ctx->shm && ((st = get_uint_param(op, "shared_memory_offset", &off)) ||
                         (st = get_uint_param(op, "shared_memory_byte_size", &bsz)))) {
          st = cinfer_status_prefix(st, "output '%s'", ko->name);
          goto fail;
        }
        if ((st = kserve_output_shm(ko, ctx->shm, oshm->u.str, off, bsz))) goto fail;
      }
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
      if ((st = kserve_param_key_check(key))) return st;
      if (json_is_bool(p)) st = cinfer_request_set_param_bool(r, key, p->type == JSON_TRUE);
      else if (json_is(p, JSON_STRING))
        st = cinfer_request_set_param_string(r, key, p->u.str, p->len);
      else if (json_is(p, JSON_NUMBER) && (p->int_flags & JSON_INT_I64))
        st = cinfer_request_set_param_int(r, key, p->ix.i);
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

static kserve_output_req *find_output(const kserve_request *req, const char *name) {
  if (!req) return NULL;
  for (size_t k = 0; k < req->n_outputs; k++)
    if (!strcmp(req->outputs[k].name, name)) return &req->outputs[k];
  return NULL;
}

bool kserve_output_binary(const kserve_request *req, const char *name) {
  if (!req) return false;
  const kserve_output_req *ko = find_output(req, name);
  return ko ? ko->binary : req->binary_default;
}

cinfer_status *kserve_prepare_response(kserve_request *k, const cinfer_response *resp,
                                       const cinfer_config *cfg, const char *model_dir) {
  uint32_t n = cinfer_response_output_count(resp);
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    kserve_output_req *ko = find_output(k, t->name);
    if (!ko) continue;
    if (ko->shm) {
      cinfer_status *st = kserve_output_to_shm(ko, t);
      if (st) return st;
      continue;
    }
    if (!ko->class_count || ko->cls_done) continue;
    classify_labels labels = {0}, *lp = NULL;
    const char *lf = cfg ? cinfer_config_output_label_filename(cfg, t->name) : NULL;
    if (lf && lf[0] && model_dir) {
      size_t pl = strlen(model_dir) + strlen(lf) + 2;
      char *path = malloc(pl);
      if (!path) return cinfer_status_oom(NULL);
      snprintf(path, pl, "%s/%s", model_dir, lf);
      cinfer_status *st = classify_labels_load(path, &labels);
      free(path);
      if (st) return cinfer_status_prefix(st, "output '%s': label_filename", t->name);
      lp = &labels;
    }
    cinfer_status *st = classify_output(t, ko->class_count, cfg && cinfer_config_max_batch_size(cfg) > 0, lp,
                                        &ko->cls, ko->cls_shape, &ko->cls_ndim);
    classify_labels_free(&labels);
    if (st) return st;
    ko->cls_done = true;
  }
  return NULL;
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
  cbuf_puts(out, "\"");
  uint32_t np = cinfer_response_param_count(resp);
  for (uint32_t i = 0; i < np; i++) { /* the response's parameters, as Triton writes them */
    const cinfer_param *p = cinfer_response_param(resp, i);
    cbuf_puts(out, i ? "," : ",\"parameters\":{");
    cbuf_json_string(out, p->key, strlen(p->key));
    cbuf_put(out, ":", 1);
    cbuf_json_param_value(out, p);
    if (i + 1 == np) cbuf_put(out, "}", 1);
  }
  cbuf_puts(out, ",\"outputs\":[");
  uint32_t n = cinfer_response_output_count(resp);
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    const kserve_output_req *ko = find_output(req, t->name);
    /* A classification output is a BYTES tensor of "value:index[:label]" strings. */
    cinfer_tensor cls;
    if (ko && ko->cls_done) {
      cls = *t;
      cls.dtype = CINFER_TYPE_BYTES;
      cls.ndim = ko->cls_ndim;
      memcpy(cls.shape, ko->cls_shape, sizeof ko->cls_shape);
      cls.data = ko->cls.data;
      cls.byte_size = ko->cls.len;
      t = &cls;
    }
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
    if (ko && ko->shm) {
      cbuf_puts(out, "}"); /* the data is in the region (Triton sends no data for it) */
    } else if (kserve_output_binary(req, t->name)) {
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
    const kserve_output_req *ko = find_output(req, t->name);
    if (ko && ko->shm) continue;
    if (!kserve_output_binary(req, t->name)) continue;
    if (ko && ko->cls_done) cbuf_put(out, ko->cls.data, ko->cls.len);
    else cbuf_put(out, t->data, t->byte_size);
  }
  return !out->oom;
}

void kserve_encode_error(cbuf *out, const char *msg) {
  cbuf_puts(out, "{\"error\":");
  cbuf_json_string(out, msg, strlen(msg));
  cbuf_puts(out, "}");
}

void kserve_encode_data(cbuf *out, const cinfer_tensor *t) { encode_data(out, t); }
