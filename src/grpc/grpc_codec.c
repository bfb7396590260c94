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

#include "frontend/classify.h"
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
  for (size_t i = 0; i < g->n_inputs; i++) {
    free(g->inputs[i].owned);
    shm_region_release(g->inputs[i].shm);
  }
  free(g->inputs);
  free(g->shm_in);
  for (size_t i = 0; g->outs && g->msg && i < g->msg->n_outputs; i++) {
    shm_region_release(g->outs[i].shm);
    cbuf_free(&g->outs[i].cls);
  }
  free(g->outs);
  if (g->msg) inference__model_infer_request__free_unpacked(g->msg, NULL);
  free(g);
}

/* Triton's ParseSharedMemoryParams (grpc_utils.h): shared_memory_region a string_param,
 * shared_memory_offset and _byte_size int64_params, and neither without the region. A
 * negative value gets the HTTP endpoint's text. The input and output parameter map entries
 * have the same layout (key, InferParameter value). */
static cinfer_status *shm_params(const char *kind, const char *tensor,
                                 Inference__ModelInferRequest__InferInputTensor__ParametersEntry **p,
                                 size_t n, grpc_shm_param *out) {
  memset(out, 0, sizeof *out);
  const Inference__InferParameter *off = NULL, *bsz = NULL;
  for (size_t i = 0; i < n; i++) {
    const char *k = p[i]->key ? p[i]->key : "";
    const Inference__InferParameter *v = p[i]->value;
    int c = v ? (int)v->parameter_choice_case : 0;
    if (!strcmp(k, "shared_memory_region")) {
      if (c != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
        return BAD("invalid value type for 'shared_memory_region' parameter for tensor '%s', "
                   "expected string_param.", tensor);
      out->region = v->string_param;
    } else if (!strcmp(k, "shared_memory_offset")) {
      off = v ? v : &(const Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    } else if (!strcmp(k, "shared_memory_byte_size")) {
      bsz = v ? v : &(const Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    }
  }
  const char *names[2] = {"shared_memory_offset", "shared_memory_byte_size"};
  const Inference__InferParameter *vals[2] = {off, bsz};
  uint64_t *dst[2] = {&out->offset, &out->byte_size};
  for (int i = 0; i < 2; i++) {
    if (!vals[i]) continue;
    if (!out->region)
      return BAD("'%s' can not be specified without 'shared_memory_region' parameter for tensor "
                 "'%s'", names[i], tensor);
    if (vals[i]->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
      return BAD("invalid value type for '%s' parameter for tensor '%s', expected int64_param.",
                 names[i], tensor);
    if (vals[i]->int64_param < 0)
      return BAD("%s '%s': Unable to parse '%s': must be a non-negative integer", kind, tensor,
                 names[i]);
    *dst[i] = (uint64_t)vals[i]->int64_param;
  }
  return NULL;
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
  g->inputs = calloc(m->n_inputs, sizeof *g->inputs);
  g->shm_in = calloc(m->n_inputs, sizeof *g->shm_in);
  g->outs = calloc(m->n_outputs + 1, sizeof *g->outs);
  if (!g->inputs || !g->shm_in || !g->outs) { st = cinfer_status_oom(NULL); goto fail; }
  /* raw_input_contents: one per input that is not in shared memory, in order (what
   * tritonclient sends). */
  size_t n_in_msg = m->n_inputs, raw_i = 0;
  for (size_t i = 0; i < m->n_inputs; i++)
    for (size_t k = 0; k < m->inputs[i]->n_parameters; k++)
      if (m->inputs[i]->parameters[k]->key &&
          !strcmp(m->inputs[i]->parameters[k]->key, "shared_memory_region")) {
        n_in_msg--;
        break;
      }
  if (m->n_raw_input_contents && m->n_raw_input_contents != n_in_msg) {
    st = BAD("request has %zu inputs not in shared memory but %zu raw_input_contents; give one "
             "per such input, in order", n_in_msg, m->n_raw_input_contents);
    goto fail;
  }
  for (size_t i = 0; i < m->n_inputs; i++) {
    const Inference__ModelInferRequest__InferInputTensor *in = m->inputs[i];
    kserve_input *ki = &g->inputs[i];
    cinfer_tensor *t = &ki->t;
    if ((st = kserve_input_name(g->inputs, i, in->name, t))) goto fail;
    g->n_inputs = i + 1;
    if ((st = kserve_input_datatype(t->name, in->datatype, strlen(in->datatype), t))) goto fail;
    if ((st = kserve_input_shape(t->name, in->shape, in->n_shape, lim, t))) goto fail;
    if ((st = shm_params("input", t->name, in->parameters, in->n_parameters, &g->shm_in[i])))
      goto fail;
    if (g->shm_in[i].region) {
      /* The bytes are bound to the region by grpc_infer_bind, once the model is known. */
      g->any_shm = true;
      if (in->contents) {
        st = BAD("unexpected 'content' provided when using shared memory for input tensor '%s' "
                 "for model '%s'", t->name, m->model_name);
        goto fail;
      }
      continue;
    }
    if (m->n_raw_input_contents) {
      if (in->contents) {
        st = BAD("input '%s': contents field must not be specified when using "
                 "raw_input_contents", t->name);
        goto fail;
      }
      const ProtobufCBinaryData *raw = &m->raw_input_contents[raw_i++];
      if ((st = kserve_input_bytes(ki, raw->data ? raw->data : (const uint8_t *)"", raw->len))) goto fail;
    } else {
      static const Inference__InferTensorContents none = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
      if ((st = typed_contents(ki, in->contents ? in->contents : &none))) goto fail;
    }
  }
  for (size_t i = 0; i < m->n_outputs; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = m->outputs[i];
    g->outs[i].name = o->name;
    for (size_t k = 0; k < o->n_parameters; k++) {
      /* Triton's classification extension: int64_param K > 0 (tritonclient's class_count) */
      const Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry *pe = o->parameters[k];
      if (strcmp(pe->key, "classification")) continue;
      if (!pe->value || pe->value->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM ||
          pe->value->int64_param <= 0 || pe->value->int64_param > UINT32_MAX) {
        st = BAD("output '%s': parameter 'classification' must be a positive int64_param", o->name);
        goto fail;
      }
      g->outs[i].class_count = (uint32_t)pe->value->int64_param;
      g->any_cls = true;
    }
    grpc_shm_param sp;
    if ((st = shm_params("output", o->name,
                         (Inference__ModelInferRequest__InferInputTensor__ParametersEntry **)o->parameters,
                         o->n_parameters, &sp)))
      goto fail;
    if (sp.region) g->any_shm = true;
    if (sp.region && g->outs[i].class_count) {
      st = BAD("output '%s': Output can't set both 'shared_memory_region' and 'classification'", o->name);
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

cinfer_status *grpc_infer_bind(grpc_infer *g, shm_registry *shm, const cinfer_config *cfg) {
  if (!g->any_shm) return NULL;
  cinfer_status *st;
  for (size_t i = 0; i < g->n_inputs; i++) {
    const grpc_shm_param *sp = &g->shm_in[i];
    if (sp->region &&
        (st = kserve_input_shm(&g->inputs[i], shm, sp->region, sp->offset, sp->byte_size, cfg)))
      return st;
  }
  Inference__ModelInferRequest *m = g->msg;
  for (size_t i = 0; i < m->n_outputs; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = m->outputs[i];
    grpc_shm_param sp;
    if ((st = shm_params("output", o->name,
                         (Inference__ModelInferRequest__InferInputTensor__ParametersEntry **)o->parameters,
                         o->n_parameters, &sp)))
      return st;
    if (sp.region && (st = kserve_output_shm(&g->outs[i], shm, sp.region, sp.offset, sp.byte_size)))
      return st;
  }
  return NULL;
}

static const kserve_output_req *shm_output(const grpc_infer *g, const char *name) {
  if (!g || !g->any_shm) return NULL;
  for (size_t i = 0; i < g->msg->n_outputs; i++)
    if (g->outs[i].shm && !strcmp(g->outs[i].name, name)) return &g->outs[i];
  return NULL;
}

static const kserve_output_req *cls_output(const grpc_infer *g, const char *name) {
  if (!g || !g->any_cls) return NULL;
  for (size_t i = 0; i < g->msg->n_outputs; i++)
    if (g->outs[i].cls_done && !strcmp(g->outs[i].name, name)) return &g->outs[i];
  return NULL;
}

cinfer_status *grpc_infer_classify(grpc_infer *g, const cinfer_response *resp,
                                   const cinfer_config *cfg, const char *model_dir) {
  if (!g || !g->any_cls) return NULL;
  uint32_t n = cinfer_response_output_count(resp);
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    kserve_output_req *ko = NULL;
    for (size_t k = 0; k < g->msg->n_outputs; k++)
      if (g->outs[k].class_count && !strcmp(g->outs[k].name, t->name)) ko = &g->outs[k];
    if (!ko || ko->shm) continue; /* a region gets the tensor itself, as over HTTP */
    classify_labels labels = {0}, *lp = NULL;
    const char *lf = cfg ? cinfer_config_output_label_filename(cfg, t->name) : NULL;
    if (lf && lf[0] && model_dir) {
      cbuf path = {0};
      cbuf_printf(&path, "%s/%s", model_dir, lf);
      if (path.oom) return cinfer_status_oom(NULL);
      cinfer_status *st = classify_labels_load(path.data, &labels);
      cbuf_free(&path);
      if (st) return cinfer_status_prefix(st, "output '%s': label_filename", t->name);
      lp = &labels;
    }
    ko->cls.len = 0; /* a stream's next response classifies afresh */
    cinfer_status *st = classify_output(t, ko->class_count, cfg && cinfer_config_max_batch_size(cfg) > 0,
                                        lp, &ko->cls, ko->cls_shape, &ko->cls_ndim);
    classify_labels_free(&labels);
    if (st) return st;
    ko->cls_done = true;
  }
  return NULL;
}

cinfer_status *grpc_infer_outputs_to_shm(const grpc_infer *g, const cinfer_response *resp) {
  if (!g || !g->any_shm) return NULL;
  uint32_t n = cinfer_response_output_count(resp);
  for (uint32_t i = 0; i < n; i++) {
    const cinfer_tensor *t = cinfer_response_output(resp, i);
    const kserve_output_req *ko = shm_output(g, t->name);
    cinfer_status *st = ko ? kserve_output_to_shm(ko, t) : NULL;
    if (st) return st;
  }
  return NULL;
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
    if ((st = kserve_param_key_check(key))) return st;
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
                       const char *id, const cinfer_response *resp, int final_param,
                       const grpc_infer *g) {
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
    const kserve_output_req *cls = cls_output(g, t->name);
    if (cls) { /* the classification strings instead of the tensor */
      ot[i].datatype = "BYTES";
      ot[i].n_shape = (size_t)cls->cls_ndim;
      ot[i].shape = (int64_t *)cls->cls_shape;
      raw[i].len = cls->cls.len;
      raw[i].data = (uint8_t *)(cls->cls.data ? cls->cls.data : "");
    } else if (!shm_output(g, t->name)) { /* else empty: the data is in the region */
      raw[i].len = t->byte_size;
      raw[i].data = (uint8_t *)t->data;
    }
  }
  r.n_outputs = r.n_raw_output_contents = n;
  r.outputs = op;
  r.raw_output_contents = raw;
  /* The response's parameters, then triton_final_response on a stream. */
  /* On the stack for the usual few (every streamed response has the marker, an
   * ensemble's three sequence parameters): no allocation per token. */
  enum { NP_STACK = 4 };
  Inference__InferParameter pv_s[NP_STACK];
  Inference__ModelInferResponse__ParametersEntry pe_s[NP_STACK], *pp_s[NP_STACK];
  uint32_t np = cinfer_response_param_count(resp) + (final_param >= 0);
  bool heap = np > NP_STACK;
  Inference__InferParameter *pv = heap ? calloc(np, sizeof *pv) : pv_s;
  Inference__ModelInferResponse__ParametersEntry *pe = heap ? calloc(np, sizeof *pe) : pe_s;
  Inference__ModelInferResponse__ParametersEntry **pp = heap ? calloc(np, sizeof *pp) : pp_s;
  ok = ok && pv && pe && pp;
  for (uint32_t i = 0; ok && i < np; i++) {
    Inference__InferParameter vi = INFERENCE__INFER_PARAMETER__INIT;
    Inference__ModelInferResponse__ParametersEntry ei = INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    pv[i] = vi;
    pe[i] = ei;
    pe[i].value = &pv[i];
    pp[i] = &pe[i];
    const cinfer_param *p = cinfer_response_param(resp, i);
    if (!p) { /* the last one: the stream's marker */
      pe[i].key = "triton_final_response";
      pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
      pv[i].bool_param = final_param != 0;
      continue;
    }
    pe[i].key = (char *)p->key;
    switch (p->type) {
    case CINFER_PARAM_BOOL:
      pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
      pv[i].bool_param = p->b;
      break;
    case CINFER_PARAM_INT:
      pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
      pv[i].int64_param = p->i;
      break;
    case CINFER_PARAM_DOUBLE:
      pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
      pv[i].double_param = p->d;
      break;
    case CINFER_PARAM_STRING:
      pv[i].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
      pv[i].string_param = (char *)p->s;
      break;
    }
  }
  r.n_parameters = np;
  r.parameters = pp;
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
  if (heap) {
    free(pv);
    free(pe);
    free(pp);
  }
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
