/* grpc_codec.c: see grpc_codec.h.
 *
 * Invariants: counts of inputs and requested outputs, names, datatypes and shapes go
 * through the shared KServe rules before anything is sized from them; the typed contents
 * of an input must hold exactly the shape's element count in the field its datatype
 * selects, each value in range; raw contents are either given for every input or for none. */
#include "grpc/grpc_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc_wire.h"

#define BAD(...) cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__)

cinfer_status *grpc_parse_version(const char *s, int64_t *v) {
  *v = 0;
  if (!s || !*s) return NULL;
  int64_t x = 0;
  size_t n = 0;
  for (const char *p = s; *p; p++, n++) {
    if (*p < '0' || *p > '9' || n >= 18) return BAD("invalid model version '%.64s'", s);
    x = x * 10 + (*p - '0');
  }
  if (x <= 0) return BAD("invalid model version '%.64s'", s);
  *v = x;
  return NULL;
}

void grpc_infer_free(grpc_infer *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_inputs; i++) free(g->inputs[i].owned);
  free(g->inputs);
  if (g->msg) inference__model_infer_request__free_unpacked(g->msg, NULL);
  free(g);
}

static bool has_param(Inference__ModelInferRequest__InferInputTensor__ParametersEntry **p,
                      size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (p[i]->key && !strcmp(p[i]->key, key)) return true;
  return false;
}

/* Typed contents -> the tensor's bytes in a new buffer (ki->owned). */
static cinfer_status *typed_contents(kserve_input *ki, const Inference__InferTensorContents *c) {
  cinfer_tensor *t = &ki->t;
  int64_t want = cinfer_shape_elements(t->shape, t->ndim);
  const char *dn = cinfer_dtype_name(t->dtype);
  size_t have;
  switch (t->dtype) {
    case CINFER_TYPE_BOOL: have = c->n_bool_contents; break;
    case CINFER_TYPE_UINT8: case CINFER_TYPE_UINT16: case CINFER_TYPE_UINT32: have = c->n_uint_contents; break;
    case CINFER_TYPE_UINT64: have = c->n_uint64_contents; break;
    case CINFER_TYPE_INT8: case CINFER_TYPE_INT16: case CINFER_TYPE_INT32: have = c->n_int_contents; break;
    case CINFER_TYPE_INT64: have = c->n_int64_contents; break;
    case CINFER_TYPE_FP32: have = c->n_fp32_contents; break;
    case CINFER_TYPE_FP64: have = c->n_fp64_contents; break;
    case CINFER_TYPE_BYTES: have = c->n_bytes_contents; break;
    default:
      return BAD("input '%s': %s data has no typed 'contents' field; send it in "
                 "raw_input_contents", t->name, dn);
  }
  if ((int64_t)have != want)
    return BAD("input '%s': 'contents' has %zu elements but the shape needs %lld", t->name, have,
               (long long)want);
  size_t es = cinfer_dtype_size(t->dtype), bytes;
  if (t->dtype == CINFER_TYPE_BYTES) {
    bytes = 0;
    for (size_t i = 0; i < have; i++) {
      if (c->bytes_contents[i].len > UINT32_MAX)
        return BAD("input '%s': string element too long", t->name);
      bytes += 4 + c->bytes_contents[i].len;
    }
  } else {
    bytes = have * es;
  }
  unsigned char *b = NULL;
  if (posix_memalign((void **)&b, 64, bytes ? bytes : 64)) return cinfer_status_oom(NULL);
  free(ki->owned);
  ki->owned = b;
#define RANGE(ctype, lo, hi)                                                                 \
  for (size_t i = 0; i < have; i++) {                                                        \
    if ((int64_t)src[i] < (int64_t)(lo) || (int64_t)src[i] > (int64_t)(hi))                  \
      return BAD("input '%s': value %lld is out of range for %s", t->name, (long long)src[i], dn); \
    ctype x = (ctype)src[i];                                                                 \
    memcpy(b + i * sizeof x, &x, sizeof x);                                                  \
  }
  switch (t->dtype) {
    case CINFER_TYPE_BOOL:
      for (size_t i = 0; i < have; i++) b[i] = c->bool_contents[i] != 0;
      break;
    case CINFER_TYPE_UINT8: { const uint32_t *src = c->uint_contents; RANGE(uint8_t, 0u, UINT8_MAX) break; }
    case CINFER_TYPE_UINT16: { const uint32_t *src = c->uint_contents; RANGE(uint16_t, 0u, UINT16_MAX) break; }
    case CINFER_TYPE_UINT32: memcpy(b, c->uint_contents, bytes); break;
    case CINFER_TYPE_UINT64: memcpy(b, c->uint64_contents, bytes); break;
    case CINFER_TYPE_INT8: { const int32_t *src = c->int_contents; RANGE(int8_t, INT8_MIN, INT8_MAX) break; }
    case CINFER_TYPE_INT16: { const int32_t *src = c->int_contents; RANGE(int16_t, INT16_MIN, INT16_MAX) break; }
    case CINFER_TYPE_INT32: memcpy(b, c->int_contents, bytes); break;
    case CINFER_TYPE_INT64: memcpy(b, c->int64_contents, bytes); break;
    case CINFER_TYPE_FP32: memcpy(b, c->fp32_contents, bytes); break;
    case CINFER_TYPE_FP64: memcpy(b, c->fp64_contents, bytes); break;
    case CINFER_TYPE_BYTES: {
      size_t o = 0;
      for (size_t i = 0; i < have; i++) {
        uint32_t l = (uint32_t)c->bytes_contents[i].len;
        b[o] = (unsigned char)l, b[o + 1] = (unsigned char)(l >> 8), b[o + 2] = (unsigned char)(l >> 16),
        b[o + 3] = (unsigned char)(l >> 24);
        if (l) memcpy(b + o + 4, c->bytes_contents[i].data, l);
        o += 4 + l;
      }
      break;
    }
    default: break;
  }
#undef RANGE
  t->data = b;
  t->byte_size = bytes;
  return cinfer_tensor_check(t);
}

cinfer_status *grpc_infer_decode(const uint8_t *buf, size_t len, const kserve_limits *lim,
                                 grpc_infer **out) {
  *out = NULL;
  grpc_infer *g = calloc(1, sizeof *g);
  if (!g) return cinfer_status_oom(NULL);
  cinfer_status *st = NULL;
  g->msg = inference__model_infer_request__unpack(NULL, len, buf);
  if (!g->msg) {
    st = BAD("ModelInferRequest: the message is not valid protobuf (%zu bytes)", len);
    goto fail;
  }
  Inference__ModelInferRequest *m = g->msg;
  if ((st = grpc_parse_version(m->model_version, &g->version))) goto fail;
  if ((st = kserve_check_input_count(m->n_inputs))) goto fail;
  if ((st = kserve_check_output_count(m->n_outputs))) goto fail;
  if (m->n_raw_input_contents && m->n_raw_input_contents != m->n_inputs) {
    st = BAD("request has %zu inputs but %zu raw_input_contents; give one per input, in order",
             m->n_inputs, m->n_raw_input_contents);
    goto fail;
  }
  g->inputs = calloc(m->n_inputs, sizeof *g->inputs);
  if (!g->inputs) { st = cinfer_status_oom(NULL); goto fail; }
  for (size_t i = 0; i < m->n_inputs; i++) {
    const Inference__ModelInferRequest__InferInputTensor *in = m->inputs[i];
    kserve_input *ki = &g->inputs[i];
    cinfer_tensor *t = &ki->t;
    if ((st = kserve_input_name(g->inputs, i, in->name, t))) goto fail;
    g->n_inputs = i + 1;
    if ((st = kserve_input_datatype(t->name, in->datatype, strlen(in->datatype), t))) goto fail;
    if ((st = kserve_input_shape(t->name, in->shape, in->n_shape, lim, t))) goto fail;
    if (has_param(in->parameters, in->n_parameters, "shared_memory_region")) {
      st = cinfer_status_new(CINFER_UNSUPPORTED,
                             "input '%s': shared memory is not supported over gRPC yet; send "
                             "the tensor in the request", t->name);
      goto fail;
    }
    if (m->n_raw_input_contents) {
      if (in->contents) {
        st = BAD("input '%s': contents field must not be specified when using "
                 "raw_input_contents", t->name);
        goto fail;
      }
      const ProtobufCBinaryData *raw = &m->raw_input_contents[i];
      if ((st = kserve_input_bytes(ki, raw->data ? raw->data : (const uint8_t *)"", raw->len))) goto fail;
    } else {
      static const Inference__InferTensorContents none = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
      if ((st = typed_contents(ki, in->contents ? in->contents : &none))) goto fail;
    }
  }
  for (size_t i = 0; i < m->n_outputs; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = m->outputs[i];
    bool cls = false, shm = false;
    for (size_t k = 0; k < o->n_parameters; k++) {
      if (!strcmp(o->parameters[k]->key, "classification")) cls = true;
      if (!strcmp(o->parameters[k]->key, "shared_memory_region")) shm = true;
    }
    if ((st = kserve_output_params(o->name, cls))) goto fail;
    if (shm) {
      st = cinfer_status_new(CINFER_UNSUPPORTED,
                             "output '%s': shared memory is not supported over gRPC yet", o->name);
      goto fail;
    }
  }
  for (size_t i = 0; i < m->n_parameters; i++) {
    const Inference__ModelInferRequest__ParametersEntry *p = m->parameters[i];
    if (!strcmp(p->key, "triton_enable_empty_final_response")) {
      if (!p->value || p->value->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM) {
        st = BAD("parameter 'triton_enable_empty_final_response' must be a bool");
        goto fail;
      }
      g->empty_final = p->value->bool_param;
    }
  }
  *out = g;
  return NULL;
fail:
  grpc_infer_free(g);
  return st;
}

cinfer_status *grpc_infer_apply(grpc_infer *g, cinfer_request *r) {
  Inference__ModelInferRequest *m = g->msg;
  cinfer_status *st;
  if (m->id[0]) cinfer_request_set_id(r, m->id, strlen(m->id));
  for (size_t i = 0; i < g->n_inputs; i++) {
    kserve_input *ki = &g->inputs[i];
    if (ki->owned) {
      if ((st = cinfer_request_add_input_owned(r, &ki->t, ki->owned))) return st;
      ki->owned = NULL;
    } else if ((st = cinfer_request_add_input(r, &ki->t))) {
      return st;
    }
  }
  for (size_t i = 0; i < m->n_outputs; i++)
    if ((st = cinfer_request_add_output(r, m->outputs[i]->name))) return st;
  for (size_t i = 0; i < m->n_parameters; i++) {
    const Inference__ModelInferRequest__ParametersEntry *p = m->parameters[i];
    const char *key = p->key;
    if (!strcmp(key, "triton_enable_empty_final_response")) continue; /* the frontend's own */
    const Inference__InferParameter *v = p->value;
    switch (v ? v->parameter_choice_case : INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE__NOT_SET) {
      case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
        st = cinfer_request_set_param_bool(r, key, v->bool_param);
        break;
      case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
        st = cinfer_request_set_param_int(r, key, v->int64_param);
        break;
      case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
        st = cinfer_request_set_param_string(r, key, v->string_param, strlen(v->string_param));
        break;
      case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
        st = cinfer_request_set_param_double(r, key, v->double_param);
        break;
      case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        st = v->uint64_param > INT64_MAX
                 ? BAD("parameter '%s': %llu is out of range", key, (unsigned long long)v->uint64_param)
                 : cinfer_request_set_param_int(r, key, (int64_t)v->uint64_param);
        break;
      default: st = BAD("parameter '%s' has no value", key); break;
    }
    if (st) return st;
  }
  return NULL;
}

bool grpc_pack(cbuf *out, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  if (n > UINT32_MAX || !cbuf_reserve(out, 5 + n)) return false;
  grpc_frame_prefix(out, n);
  protobuf_c_message_pack(m, (uint8_t *)out->data + out->len);
  out->len += n;
  out->data[out->len] = 0;
  return !out->oom;
}

bool grpc_infer_encode(cbuf *out, bool stream, const char *model, int64_t version,
                       const char *id, const cinfer_response *resp, int final_param) {
  uint32_t n = cinfer_response_output_count(resp);
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  char ver[24];
  snprintf(ver, sizeof ver, "%lld", (long long)version);
  r.model_name = (char *)model;
  r.model_version = ver;
  r.id = (char *)(id ? id : "");
  Inference__ModelInferResponse__InferOutputTensor *ot = n ? calloc(n, sizeof *ot) : NULL;
  Inference__ModelInferResponse__InferOutputTensor **op = n ? calloc(n, sizeof *op) : NULL;
  ProtobufCBinaryData *raw = n ? calloc(n, sizeof *raw) : NULL;
  bool ok = !n || (ot && op && raw);
  for (uint32_t i = 0; ok && i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    Inference__ModelInferResponse__InferOutputTensor init = INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    ot[i] = init;
    ot[i].name = (char *)t->name;
    ot[i].datatype = (char *)cinfer_dtype_name(t->dtype);
    ot[i].n_shape = (size_t)t->ndim;
    ot[i].shape = (int64_t *)t->shape;
    op[i] = &ot[i];
    raw[i].len = t->byte_size;
    raw[i].data = (uint8_t *)t->data;
  }
  r.n_outputs = r.n_raw_output_contents = n;
  r.outputs = op;
  r.raw_output_contents = raw;
  Inference__InferParameter fp = INFERENCE__INFER_PARAMETER__INIT;
  Inference__ModelInferResponse__ParametersEntry fe = INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
  Inference__ModelInferResponse__ParametersEntry *fep = &fe;
  if (final_param >= 0) {
    fp.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    fp.bool_param = final_param != 0;
    fe.key = "triton_final_response";
    fe.value = &fp;
    r.n_parameters = 1;
    r.parameters = &fep;
  }
  if (ok) {
    if (stream) {
      Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
      s.infer_response = &r;
      ok = grpc_pack(out, &s.base);
    } else {
      ok = grpc_pack(out, &r.base);
    }
  }
  free(ot);
  free(op);
  free(raw);
  return ok;
}

bool grpc_stream_error_encode(cbuf *out, const char *model, const char *id, const char *msg) {
  Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  r.model_name = (char *)(model ? model : "");
  r.id = (char *)(id ? id : "");
  s.error_message = (char *)msg;
  s.infer_response = &r;
  return grpc_pack(out, &s.base);
}
