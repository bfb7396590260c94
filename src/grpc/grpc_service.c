/* grpc_service.c: the RPCs of inference.GRPCInferenceService and grpc.health.v1.Health
 * (see grpc_internal.h for the transport contract). Each handler runs on the connection's
 * loop thread with one whole request message; inference and model control complete later
 * through an attached gop.
 *
 * Inference: decode (grpc_codec.c, the shared KServe rules) -> acquire the model ->
 * cinfer_request -> cinfer_server_infer_async. Responses come on a worker thread and are
 * posted to the loop: every non-FINAL one as its own task (counted in `posted`), the FINAL
 * one in the embedded task. The call is freed on the loop once the FINAL has been handled
 * and no posted response is left, whatever order the tasks ran in. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/model_control.h"
#include "core/log.h"
#include "frontend/settings.h"
#include "grpc/grpc_codec.h"
#include "grpc/grpc_internal.h"
#include "grpc/grpc_wire.h"
#include "health.pb-c.h"
#include "model_config.pb-c.h"

#ifndef CINFER_VERSION
#define CINFER_VERSION "0.0.0"
#endif

static void reply(gstream *gs, const ProtobufCMessage *m) {
  cbuf b = {0};
  if (!grpc_pack(&b, m)) {
    cbuf_free(&b);
    return gstream_finish(gs, GRPC_INTERNAL, "out of memory encoding the response");
  }
  gstream_send(gs, &b);
  gstream_finish(gs, GRPC_OK, NULL);
}

#define UNPACK(type, var, msg, len)                                                  \
  type *var = type##_unpack_fn(msg, len);                                            \
  if (!var) return gstream_finish(gs, GRPC_INVALID_ARGUMENT,                         \
                                  "the request message is not valid protobuf");

/* protobuf-c's unpack functions under one spelling for UNPACK. */
#define DEF_UNPACK(T, fn)                                                            \
  static T *T##_unpack_fn(const uint8_t *m, size_t n) { return fn##__unpack(NULL, n, m); } \
  static void T##_free(T *x) { fn##__free_unpacked(x, NULL); }
DEF_UNPACK(Inference__ModelReadyRequest, inference__model_ready_request)
DEF_UNPACK(Inference__ModelMetadataRequest, inference__model_metadata_request)
DEF_UNPACK(Inference__ModelConfigRequest, inference__model_config_request)
DEF_UNPACK(Inference__ModelStatisticsRequest, inference__model_statistics_request)
DEF_UNPACK(Inference__RepositoryIndexRequest, inference__repository_index_request)
DEF_UNPACK(Inference__RepositoryModelLoadRequest, inference__repository_model_load_request)
DEF_UNPACK(Inference__RepositoryModelUnloadRequest, inference__repository_model_unload_request)
DEF_UNPACK(Grpc__Health__V1__HealthCheckRequest, grpc__health__v1__health_check_request)
DEF_UNPACK(Inference__SystemSharedMemoryStatusRequest, inference__system_shared_memory_status_request)
DEF_UNPACK(Inference__SystemSharedMemoryRegisterRequest, inference__system_shared_memory_register_request)
DEF_UNPACK(Inference__SystemSharedMemoryUnregisterRequest, inference__system_shared_memory_unregister_request)
DEF_UNPACK(Inference__CudaSharedMemoryStatusRequest, inference__cuda_shared_memory_status_request)
DEF_UNPACK(Inference__CudaSharedMemoryRegisterRequest, inference__cuda_shared_memory_register_request)
DEF_UNPACK(Inference__CudaSharedMemoryUnregisterRequest, inference__cuda_shared_memory_unregister_request)
DEF_UNPACK(Inference__TraceSettingRequest, inference__trace_setting_request)
DEF_UNPACK(Inference__LogSettingsRequest, inference__log_settings_request)

/* ---- health and metadata ---------------------------------------------------------------- */

static void rpc_server_live(gstream *gs, const uint8_t *msg, size_t len) {
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = cinfer_server_is_live(gstream_server(gs)->server);
  reply(gs, &r.base);
}

static void rpc_server_ready(gstream *gs, const uint8_t *msg, size_t len) {
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  r.ready = cinfer_server_is_ready(gstream_server(gs)->server);
  reply(gs, &r.base);
}

static void rpc_model_ready(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__ModelReadyRequest, q, msg, len);
  int64_t v;
  cinfer_status *st = grpc_parse_version(q->version, &v);
  cinfer_model *m = NULL;
  if (!st) st = cinfer_server_model_acquire(gstream_server(gs)->server, q->name, v, &m);
  if (st && v > 0 && cinfer_status_code(st) == CINFER_NOT_FOUND) {
    /* A version of a known model that is not loaded is not ready, as Triton answers it
     * (L0_lifecycle test_file_override asks versions 1 and 2 of a model serving 3). */
    cinfer_model *any = NULL;
    cinfer_status *known = cinfer_server_model_acquire(gstream_server(gs)->server, q->name, 0, &any);
    if (!known || cinfer_status_code(known) == CINFER_UNAVAILABLE) {
      cinfer_status_free(st);
      st = cinfer_status_new(CINFER_UNAVAILABLE, "not loaded");
    }
    cinfer_status_free(known);
    cinfer_model_release(any);
  }
  Inference__ModelReadyRequest_free(q);
  /* As over HTTP: an unknown model is NOT_FOUND; a known one that is not ready is false. */
  if (st && cinfer_status_code(st) != CINFER_UNAVAILABLE) return gstream_finish_status(gs, st);
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  r.ready = st == NULL;
  cinfer_status_free(st);
  cinfer_model_release(m);
  reply(gs, &r.base);
}

static void rpc_server_metadata(gstream *gs, const uint8_t *msg, size_t len) {
  /* The HTTP endpoint's list (GET /v2) less what this endpoint does not serve: generate
   * (an HTTP-only extension). test_grpc checks the two lists differ by exactly this. */
  static char *ext[] = {"sequence", "sequence(string_id)", "binary_tensor_data", "classification",
                        "model_configuration",
                        "model_repository", "parameters", "schedule_policy", "statistics",
                        "system_shared_memory", "trace", "logging",
                        "model_repository(unload_dependents)"};
  Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  r.name = "cinfer";
  r.version = CINFER_VERSION;
  r.n_extensions = sizeof ext / sizeof *ext;
  r.extensions = ext;
  reply(gs, &r.base);
}

static void fill_tensor_meta(Inference__ModelMetadataResponse__TensorMetadata *t,
                             const cinfer_config_io *io, bool batching, int64_t *shape) {
  Inference__ModelMetadataResponse__TensorMetadata init = INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
  *t = init;
  t->name = (char *)io->name; /* the proto's field is not const; never written */
  t->datatype = (char *)cinfer_dtype_name(io->dtype);
  size_t k = 0;
  if (batching) shape[k++] = -1;
  for (int d = 0; d < io->ndim; d++) shape[k++] = io->dims[d];
  t->n_shape = k;
  t->shape = shape;
}

static void rpc_model_metadata(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__ModelMetadataRequest, q, msg, len);
  grpc_server *g = gstream_server(gs);
  int64_t v;
  cinfer_model *m = NULL;
  cinfer_status *st = grpc_parse_version(q->version, &v);
  if (!st) st = cinfer_server_model_acquire(g->server, q->name, v, &m);
  if (st) {
    Inference__ModelMetadataRequest_free(q);
    return gstream_finish_status(gs, st);
  }
  const cinfer_config *c = cinfer_model_config_get(m);
  bool batching = cinfer_config_max_batch_size(c) > 0;
  size_t nin = cinfer_config_input_count(c), nio = nin + cinfer_config_output_count(c);
  /* Every ready version: the call writes at most cap, so a full array asks again. */
  size_t cap = 64, nv;
  int64_t *vs = malloc(cap * sizeof *vs);
  while (vs && (nv = cinfer_server_model_versions(g->server, q->name, vs, cap)) == cap) {
    free(vs);
    cap *= 2;
    vs = cap < SIZE_MAX / 16 ? malloc(cap * sizeof *vs) : NULL;
  }
  Inference__ModelMetadataResponse__TensorMetadata *tm = calloc(nio + 1, sizeof *tm);
  Inference__ModelMetadataResponse__TensorMetadata **tp = calloc(nio + 1, sizeof *tp);
  int64_t *shapes = calloc((nio + 1) * (CINFER_MAX_DIMS + 1), sizeof *shapes);
  char **vstr = vs ? calloc(nv + 1, sizeof *vstr) : NULL;
  char *vbuf = vs ? malloc((nv + 1) * 24) : NULL;
  if (!vs || !tm || !tp || !shapes || !vstr || !vbuf) {
    gstream_finish(gs, GRPC_INTERNAL, "out of memory");
  } else {
    Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
    r.name = q->name;
    for (size_t i = 0; i < nv; i++) {
      vstr[i] = vbuf + i * 24;
      snprintf(vstr[i], 24, "%lld", (long long)vs[i]);
    }
    r.n_versions = nv;
    r.versions = vstr;
    r.platform = (char *)cinfer_model_platform(m);
    for (size_t i = 0; i < nio; i++) {
      cinfer_config_io io;
      if (i < nin) cinfer_config_input(c, (uint32_t)i, &io);
      else cinfer_config_output(c, (uint32_t)(i - nin), &io);
      fill_tensor_meta(&tm[i], &io, batching, shapes + i * (CINFER_MAX_DIMS + 1));
      tp[i] = &tm[i];
    }
    r.n_inputs = nin;
    r.inputs = tp;
    r.n_outputs = nio - nin;
    r.outputs = tp + nin;
    reply(gs, &r.base);
  }
  free(vs);
  free(tm);
  free(tp);
  free(shapes);
  free(vstr);
  free(vbuf);
  cinfer_model_release(m);
  Inference__ModelMetadataRequest_free(q);
}

/* ---- ModelConfig: Triton's JSON form -> the ModelConfig message -------------------------- */

/* True when a JSON value carries no information (what the proto default would be). */
static bool json_empty(const cJSON *j) {
  if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
    for (const cJSON *c = j->child; c; c = c->next)
      if (!json_empty(c)) return false;
    return true;
  }
  if (cJSON_IsString(j)) return !j->valuestring[0] || !strcmp(j->valuestring, "0");
  if (cJSON_IsNumber(j)) return j->valuedouble == 0;
  return cJSON_IsFalse(j) || cJSON_IsNull(j);
}

static bool json_num(const cJSON *j, double *d) {
  if (cJSON_IsNumber(j)) { *d = j->valuedouble; return true; }
  if (cJSON_IsBool(j)) { *d = cJSON_IsTrue(j); return true; }
  if (cJSON_IsString(j)) {
    char *end;
    *d = strtod(j->valuestring, &end);
    return end != j->valuestring && !*end;
  }
  return false;
}

static bool to_pb(const cJSON *j, ProtobufCMessage *m, char *err, size_t errlen, int depth);

/* Stores one scalar (or message) value of field f at p. */
static bool put_value(const ProtobufCFieldDescriptor *f, void *p, const cJSON *v, char *err,
                      size_t errlen, int depth) {
  double d = 0;
  switch (f->type) {
    case PROTOBUF_C_TYPE_STRING:
      if (!cJSON_IsString(v)) break;
      if (!(*(char **)p = strdup(v->valuestring))) goto oom;
      return true;
    case PROTOBUF_C_TYPE_BOOL:
      if (!cJSON_IsBool(v) && !json_num(v, &d)) break;
      *(protobuf_c_boolean *)p = cJSON_IsBool(v) ? cJSON_IsTrue(v) : d != 0;
      return true;
    case PROTOBUF_C_TYPE_ENUM: {
      if (cJSON_IsString(v)) {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, v->valuestring);
        if (!ev) break;
        *(int *)p = ev->value;
        return true;
      }
      if (!json_num(v, &d)) break;
      *(int *)p = (int)d;
      return true;
    }
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
      if (!json_num(v, &d)) break;
      *(int32_t *)p = (int32_t)d;
      return true;
    case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32:
      if (!json_num(v, &d)) break;
      *(uint32_t *)p = (uint32_t)d;
      return true;
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
      if (cJSON_IsString(v)) { *(int64_t *)p = strtoll(v->valuestring, NULL, 10); return true; }
      if (!json_num(v, &d)) break;
      *(int64_t *)p = (int64_t)d;
      return true;
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64:
      if (cJSON_IsString(v)) { *(uint64_t *)p = strtoull(v->valuestring, NULL, 10); return true; }
      if (!json_num(v, &d)) break;
      *(uint64_t *)p = (uint64_t)d;
      return true;
    case PROTOBUF_C_TYPE_FLOAT:
      if (!json_num(v, &d)) break;
      *(float *)p = (float)d;
      return true;
    case PROTOBUF_C_TYPE_DOUBLE:
      if (!json_num(v, &d)) break;
      *(double *)p = d;
      return true;
    case PROTOBUF_C_TYPE_MESSAGE: {
      const ProtobufCMessageDescriptor *md = f->descriptor;
      ProtobufCMessage *sub = calloc(1, md->sizeof_message);
      if (!sub) goto oom;
      protobuf_c_message_init(md, sub);
      *(ProtobufCMessage **)p = sub;
      return to_pb(v, sub, err, errlen, depth + 1);
    }
    default: break;
  }
  snprintf(err, errlen, "field '%s' has a value of the wrong kind", f->name);
  return false;
oom:
  snprintf(err, errlen, "out of memory");
  return false;
}

static bool is_map_entry(const ProtobufCFieldDescriptor *f) {
  if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label != PROTOBUF_C_LABEL_REPEATED) return false;
  const ProtobufCMessageDescriptor *md = f->descriptor;
  return md->n_fields == 2 && !strcmp(md->fields[0].name, "key") &&
         !strcmp(md->fields[1].name, "value") && strstr(md->name, "Entry");
}

static bool to_pb(const cJSON *j, ProtobufCMessage *m, char *err, size_t errlen, int depth) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  if (depth > 16 || !cJSON_IsObject(j)) {
    snprintf(err, errlen, "%s: expected an object", d->short_name);
    return false;
  }
  for (const cJSON *it = j->child; it; it = it->next) {
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, it->string);
    if (!f) {
      if (json_empty(it)) continue; /* a default value: nothing is lost */
      snprintf(err, errlen, "field '%s.%s' is not in cinfer's ModelConfig message yet",
               d->short_name, it->string);
      return false;
    }
    char *base = (char *)m;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t *n = (size_t *)(base + f->quantifier_offset);
      void **arr = (void **)(base + f->offset);
      bool map = is_map_entry(f) && cJSON_IsObject(it);
      if (!map && !cJSON_IsArray(it)) {
        snprintf(err, errlen, "field '%s' must be a list", f->name);
        return false;
      }
      size_t cnt = (size_t)cJSON_GetArraySize(it);
      if (!cnt) continue;
      size_t es = f->type == PROTOBUF_C_TYPE_MESSAGE ? sizeof(void *)
                  : f->type == PROTOBUF_C_TYPE_STRING ? sizeof(char *)
                  : (f->type == PROTOBUF_C_TYPE_INT64 || f->type == PROTOBUF_C_TYPE_UINT64 ||
                     f->type == PROTOBUF_C_TYPE_DOUBLE || f->type == PROTOBUF_C_TYPE_SINT64 ||
                     f->type == PROTOBUF_C_TYPE_SFIXED64 || f->type == PROTOBUF_C_TYPE_FIXED64)
                      ? 8 : f->type == PROTOBUF_C_TYPE_BOOL ? sizeof(protobuf_c_boolean) : 4;
      if (!(*arr = calloc(cnt, es))) {
        snprintf(err, errlen, "out of memory");
        return false;
      }
      for (const cJSON *e = it->child; e; e = e->next) {
        void *slot = (char *)*arr + *n * es;
        if (map) {
          const ProtobufCMessageDescriptor *md = f->descriptor;
          ProtobufCMessage *ent = calloc(1, md->sizeof_message);
          if (!ent) {
            snprintf(err, errlen, "out of memory");
            return false;
          }
          protobuf_c_message_init(md, ent);
          *(ProtobufCMessage **)slot = ent;
          (*n)++;
          cJSON key = {.type = cJSON_String, .valuestring = e->string};
          if (!put_value(&md->fields[0], (char *)ent + md->fields[0].offset, &key, err, errlen, depth) ||
              !put_value(&md->fields[1], (char *)ent + md->fields[1].offset, e, err, errlen, depth))
            return false;
        } else {
          (*n)++;
          if (!put_value(f, slot, e, err, errlen, depth)) return false;
        }
      }
      continue;
    }
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) *(uint32_t *)(base + f->quantifier_offset) = f->id;
    if (!put_value(f, base + f->offset, it, err, errlen, depth)) return false;
  }
  return true;
}

static void rpc_model_config(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__ModelConfigRequest, q, msg, len);
  int64_t v;
  cinfer_model *m = NULL;
  cinfer_status *st = grpc_parse_version(q->version, &v);
  if (!st) st = cinfer_server_model_acquire(gstream_server(gs)->server, q->name, v, &m);
  Inference__ModelConfigRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  char *json = cinfer_config_json(cinfer_model_config_get(m), NULL);
  cinfer_model_release(m);
  cJSON *j = json ? cJSON_Parse(json) : NULL;
  free(json);
  if (!j) return gstream_finish(gs, GRPC_INTERNAL, "out of memory");
  Inference__ModelConfig *mc = calloc(1, sizeof *mc);
  char err[256] = "";
  if (!mc) {
    snprintf(err, sizeof err, "out of memory");
  } else {
    inference__model_config__init(mc);
    if (!to_pb(j, &mc->base, err, sizeof err, 0) && !err[0]) snprintf(err, sizeof err, "conversion failed");
  }
  cJSON_Delete(j);
  if (err[0]) {
    char full[400];
    snprintf(full, sizeof full, "ModelConfig over gRPC: %s; GET /v2/models/NAME/config over "
             "HTTP has the whole configuration", err);
    gstream_finish(gs, strcmp(err, "out of memory") ? GRPC_UNIMPLEMENTED : GRPC_INTERNAL, full);
  } else {
    Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
    r.config = mc;
    reply(gs, &r.base);
  }
  if (mc) inference__model_config__free_unpacked(mc, NULL);
}

/* ---- statistics and repository ---------------------------------------------------------- */

static void rpc_model_statistics(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__ModelStatisticsRequest, q, msg, len);
  int64_t v;
  cinfer_model_stats *a = NULL;
  size_t n = 0;
  cinfer_status *st = grpc_parse_version(q->version, &v);
  if (!st) st = cinfer_server_model_stats(gstream_server(gs)->server, q->name[0] ? q->name : NULL, v, &a, &n);
  Inference__ModelStatisticsRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  Inference__ModelStatistics *ms = calloc(n + 1, sizeof *ms);
  Inference__ModelStatistics **mp = calloc(n + 1, sizeof *mp);
  Inference__InferStatistics *is = calloc(n + 1, sizeof *is);
  Inference__StatisticDuration *du = calloc((n + 1) * 8, sizeof *du);
  char (*ver)[24] = calloc(n + 1, sizeof *ver);
  if (!ms || !mp || !is || !du || !ver) {
    gstream_finish(gs, GRPC_INTERNAL, "out of memory");
  } else {
    for (size_t i = 0; i < n; i++) {
      const cinfer_model_stats *s = &a[i];
      inference__model_statistics__init(&ms[i]);
      inference__infer_statistics__init(&is[i]);
      Inference__StatisticDuration *d = du + i * 8;
      const cinfer_duration_stat *src[8] = {&s->success, &s->fail, &s->queue, &s->compute_input,
                                            &s->compute_infer, &s->compute_output, NULL, NULL};
      for (int k = 0; k < 8; k++) {
        inference__statistic_duration__init(&d[k]);
        if (src[k]) d[k].count = src[k]->count, d[k].ns = src[k]->ns;
      }
      is[i].success = &d[0], is[i].fail = &d[1], is[i].queue = &d[2];
      is[i].compute_input = &d[3], is[i].compute_infer = &d[4], is[i].compute_output = &d[5];
      is[i].cache_hit = &d[6], is[i].cache_miss = &d[7];
      snprintf(ver[i], sizeof ver[i], "%lld", (long long)s->version);
      ms[i].name = (char *)s->name;
      ms[i].version = ver[i];
      ms[i].last_inference = s->last_inference_ms;
      ms[i].inference_count = s->inference_count;
      ms[i].execution_count = s->execution_count;
      ms[i].inference_stats = &is[i];
      mp[i] = &ms[i];
    }
    Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    r.n_model_stats = n;
    r.model_stats = mp;
    reply(gs, &r.base);
  }
  free(ms);
  free(mp);
  free(is);
  free(du);
  free(ver);
  free(a);
}

static void rpc_repository_index(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__RepositoryIndexRequest, q, msg, len);
  bool ready = q->ready;
  Inference__RepositoryIndexRequest_free(q);
  cinfer_model_index_entry *e = NULL;
  size_t n = 0;
  cinfer_status *st = cinfer_server_repository_index(gstream_server(gs)->server, ready, &e, &n);
  if (st) return gstream_finish_status(gs, st);
  Inference__RepositoryIndexResponse__ModelIndex *mi = calloc(n + 1, sizeof *mi);
  Inference__RepositoryIndexResponse__ModelIndex **mp = calloc(n + 1, sizeof *mp);
  char (*ver)[24] = calloc(n + 1, sizeof *ver);
  if (!mi || !mp || !ver) {
    gstream_finish(gs, GRPC_INTERNAL, "out of memory");
  } else {
    for (size_t i = 0; i < n; i++) {
      inference__repository_index_response__model_index__init(&mi[i]);
      mi[i].name = e[i].name;
      if (e[i].version >= 0) snprintf(ver[i], sizeof ver[i], "%lld", (long long)e[i].version);
      mi[i].version = ver[i];
      mi[i].state = (char *)e[i].state;
      mi[i].reason = e[i].reason;
      mp[i] = &mi[i];
    }
    Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    r.n_models = n;
    r.models = mp;
    reply(gs, &r.base);
  }
  free(mi);
  free(mp);
  free(ver);
  cinfer_model_index_free(e, n);
}

/* Load and unload run on their own thread (a load can take seconds); the result comes back
 * to the loop through the embedded task. */
typedef struct ctl_job {
  gop op;
  grpc_server *g;
  bool load, unload_dependents;
  char *name, *config;
  cinfer_model_file *files; /* "file:<path>" parameters (paths and data owned) */
  size_t n_files;
  cinfer_status *result;
  loop_task task;
} ctl_job;

static void ctl_free(ctl_job *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n_files; i++) {
    free((char *)j->files[i].path);
    free((void *)j->files[i].data);
  }
  free(j->files);
  free(j->name);
  free(j->config);
  free(j);
}

static void ctl_done(loop_task *t) {
  ctl_job *j = (ctl_job *)((char *)t - offsetof(ctl_job, task));
  gstream *gs = gop_stream(&j->op);
  if (gs) {
    if (j->result) {
      gstream_finish_status(gs, j->result);
      j->result = NULL;
    } else if (j->load) {
      Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
      reply(gs, &r.base);
    } else {
      Inference__RepositoryModelUnloadResponse r = INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
      reply(gs, &r.base);
    }
  }
  cinfer_status_free(j->result);
  gop_done(&j->op);
  ctl_free(j);
}

static void *ctl_main(void *arg) {
  ctl_job *j = arg;
  cinfer_server *s = j->g->server;
  j->result = !j->load    ? cinfer_server_unload_model_dependents(s, j->name, j->unload_dependents)
              : j->n_files ? cinfer_server_load_model_files(s, j->name, j->config, j->files, j->n_files)
                           : cinfer_server_load_model(s, j->name, j->config);
  j->task.fn = ctl_done;
  loop_post_task(gop_loop(&j->op), &j->task);
  return NULL;
}

/* The parameters of a load or unload, with the HTTP endpoint's rules and texts (frontend.c
 * handle_control): "config" (a ModelConfig as JSON), "file:<path>" (the file's bytes:
 * bytes_param, where HTTP sends base64), "unload_dependents" (bool, unload only). */
static cinfer_status *ctl_params(ctl_job *j, Inference__RepositoryModelLoadRequest__ParametersEntry **p,
                                 size_t n) {
  const char *what = j->load ? "load" : "unload";
  for (size_t i = 0; i < n; i++) {
    const char *key = p[i]->key;
    const Inference__ModelRepositoryParameter *v = p[i]->value;
    int kind = v ? (int)v->parameter_choice_case : 0;
    if (!strncmp(key, "file:", 5)) {
      if (!j->load) return cinfer_status_new(CINFER_INVALID_ARG, "unload parameter '%.200s' is only valid for a load", key);
      if (kind != INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BYTES_PARAM)
        return cinfer_status_new(CINFER_INVALID_ARG, "load parameter '%.200s' must be bytes holding the file's contents",
                                 key);
      cinfer_model_file *nf = realloc(j->files, (j->n_files + 1) * sizeof *nf);
      if (nf) j->files = nf;
      char *path = nf ? strdup(key + 5) : NULL;
      void *data = path ? malloc(v->bytes_param.len ? v->bytes_param.len : 1) : NULL;
      if (!data) {
        free(path);
        return cinfer_status_oom(NULL);
      }
      if (v->bytes_param.len) memcpy(data, v->bytes_param.data, v->bytes_param.len);
      j->files[j->n_files++] = (cinfer_model_file){.path = path, .data = data, .len = v->bytes_param.len};
    } else if (!strcmp(key, "unload_dependents")) {
      if (j->load) return cinfer_status_new(CINFER_INVALID_ARG, "load parameter 'unload_dependents' is only valid for an unload");
      if (kind != INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
        return cinfer_status_new(CINFER_INVALID_ARG, "unload parameter 'unload_dependents' must be a boolean");
      j->unload_dependents = v->bool_param;
    } else if (!strcmp(key, "config")) {
      if (!j->load)
        return cinfer_status_new(CINFER_INVALID_ARG, "unload parameter 'config' is only valid for a load");
      if (kind != INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
        return cinfer_status_new(CINFER_INVALID_ARG, "load parameter 'config' must be a string "
                                 "holding the model configuration as JSON");
      free(j->config);
      if (!(j->config = strdup(v->string_param))) return cinfer_status_oom(NULL);
    } else {
      return cinfer_status_new(CINFER_INVALID_ARG, "%s parameter '%.200s' is not known (%s)", what, key,
                               j->load ? "config, file:<path>" : "unload_dependents");
    }
  }
  return NULL;
}

static void ctl_start(gstream *gs, ctl_job *j) {
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  gop_attach(gs, &j->op, NULL);
  if (pthread_create(&t, &at, ctl_main, j)) {
    j->result = cinfer_status_new(CINFER_UNAVAILABLE, "cannot start the load thread");
    ctl_done(&j->task);
  }
  pthread_attr_destroy(&at);
}

static void rpc_repository_load(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__RepositoryModelLoadRequest, q, msg, len);
  ctl_job *j = calloc(1, sizeof *j);
  cinfer_status *st = NULL;
  if (!j || !(j->name = strdup(q->model_name))) st = cinfer_status_oom(NULL);
  if (!st) {
    j->g = gstream_server(gs);
    j->load = true;
    st = ctl_params(j, q->parameters, q->n_parameters);
  }
  Inference__RepositoryModelLoadRequest_free(q);
  if (st) {
    ctl_free(j);
    return gstream_finish_status(gs, st);
  }
  ctl_start(gs, j);
}

static void rpc_repository_unload(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__RepositoryModelUnloadRequest, q, msg, len);
  ctl_job *j = calloc(1, sizeof *j);
  cinfer_status *st = NULL;
  if (!j || !(j->name = strdup(q->model_name))) st = cinfer_status_oom(NULL);
  if (!st) {
    j->g = gstream_server(gs);
    /* The two request messages have the same layout of parameters (map<string,
     * ModelRepositoryParameter> = 3). */
    st = ctl_params(j, (Inference__RepositoryModelLoadRequest__ParametersEntry **)q->parameters,
                    q->n_parameters);
  }
  Inference__RepositoryModelUnloadRequest_free(q);
  if (st) {
    ctl_free(j);
    return gstream_finish_status(gs, st);
  }
  ctl_start(gs, j);
}

/* ---- inference ----------------------------------------------------------------------------- */

typedef struct infer_call {
  gop op;
  grpc_infer *gi;
  cinfer_request *req;
  cinfer_model *model;
  bool stream, decoupled;
  _Atomic int posted;          /* non-FINAL responses posted and not yet handled */
  bool final_seen;             /* loop thread */
  cinfer_response *final_resp; /* handed over with `task` */
  loop_task task;
} infer_call;

typedef struct resp_node {
  infer_call *ic;
  cinfer_response *resp;
} resp_node;

static void call_free(infer_call *ic) {
  cinfer_request_release(ic->req);
  grpc_infer_free(ic->gi);
  cinfer_model_release(ic->model);
  free(ic);
}

static void call_cancel(gop *op) {
  infer_call *ic = (infer_call *)op;
  cinfer_request_cancel(ic->req);
}

static const char *call_id(const infer_call *ic) { return ic->gi->msg->id; }

static cinfer_status *classify(infer_call *ic, const cinfer_response *resp) {
  return grpc_infer_classify(ic->gi, resp, cinfer_model_config_get(ic->model),
                             cinfer_model_directory(ic->model));
}

/* On the loop: one response of the call. */
static void deliver(infer_call *ic, cinfer_response *resp, bool final) {
  gstream *gs = gop_stream(&ic->op);
  if (gs && !gstream_finished(gs)) {
    const cinfer_status *err = cinfer_response_error(resp);
    const char *model = cinfer_model_name(ic->model);
    int64_t ver = cinfer_model_version(ic->model);
    cbuf b = {0};
    bool sent = false, ok = true;
    cinfer_status *shm_err = NULL;
    if (!ic->stream) {
      if (final) {
        shm_err = err ? NULL : grpc_infer_outputs_to_shm(ic->gi, resp);
        if (!err && !shm_err) shm_err = classify(ic, resp);
        if (err) {
          gstream_finish(gs, grpc_status_of(cinfer_status_code(err)), cinfer_status_message(err));
        } else if (shm_err) {
          gstream_finish_status(gs, shm_err);
        } else if (!grpc_infer_encode(&b, false, model, ver, call_id(ic), resp, -1, ic->gi)) {
          gstream_finish(gs, GRPC_INTERNAL, "out of memory encoding the response");
        } else {
          gstream_send(gs, &b);
          gstream_finish(gs, GRPC_OK, NULL);
        }
      }
    } else if (err) {
      ok = grpc_stream_error_encode(&b, model, call_id(ic), cinfer_status_message(err));
      sent = true;
    } else if ((shm_err = grpc_infer_outputs_to_shm(ic->gi, resp)) || (shm_err = classify(ic, resp))) {
      ok = grpc_stream_error_encode(&b, model, call_id(ic), cinfer_status_message(shm_err));
      cinfer_status_free(shm_err);
      sent = true;
    } else {
      uint32_t n = cinfer_response_output_count(resp);
      int fp = ic->gi->empty_final ? final : -1;
      /* Triton: a decoupled model's responses as they come, its FINAL-only marker only when
       * the client asked for empty final responses; a plain model's one response. */
      if (n || !ic->decoupled || (final && ic->gi->empty_final)) {
        ok = grpc_infer_encode(&b, true, model, ver, call_id(ic), resp, fp, ic->gi);
        sent = true;
      }
    }
    if (sent) {
      if (ok) gstream_send(gs, &b);
      else {
        cbuf_free(&b);
        gstream_finish(gs, GRPC_INTERNAL, "out of memory encoding a response");
      }
    }
    cbuf_free(&b);
    gop_flush(&ic->op);
  }
  cinfer_response_free(resp);
}

static void maybe_free(infer_call *ic) {
  if (ic->final_seen && atomic_load(&ic->posted) == 0) {
    gop_done(&ic->op);
    call_free(ic);
  }
}

static void deliver_node(void *arg) {
  resp_node *n = arg;
  infer_call *ic = n->ic;
  deliver(ic, n->resp, false);
  free(n);
  atomic_fetch_sub(&ic->posted, 1);
  maybe_free(ic);
}

static void deliver_final(loop_task *t) {
  infer_call *ic = (infer_call *)((char *)t - offsetof(infer_call, task));
  cinfer_response *resp = ic->final_resp;
  ic->final_resp = NULL;
  deliver(ic, resp, true);
  ic->final_seen = true;
  maybe_free(ic);
}

/* Worker thread. */
static void on_response(void *user, cinfer_response *resp, uint32_t flags) {
  infer_call *ic = user;
  if (flags & CINFER_RESPONSE_FINAL) {
    ic->final_resp = resp;
    ic->task.fn = deliver_final;
    loop_post_task(gop_loop(&ic->op), &ic->task);
    return;
  }
  if (!ic->stream) { /* unary: decoupled models are refused, so no partials */
    cinfer_response_free(resp);
    return;
  }
  resp_node *n = malloc(sizeof *n);
  if (!n) {
    LOG_W("grpc: out of memory: a streamed response of request '%s' is dropped", call_id(ic));
    cinfer_response_free(resp);
    return;
  }
  n->ic = ic;
  n->resp = resp;
  atomic_fetch_add(&ic->posted, 1);
  if (!loop_post(gop_loop(&ic->op), deliver_node, n)) {
    atomic_fetch_sub(&ic->posted, 1);
    cinfer_response_free(resp);
    free(n);
  }
}

/* An error of one request: the end of a unary call, one error message on a stream. */
static void infer_error(gstream *gs, bool stream, const char *model, const char *id,
                        cinfer_status *st) {
  if (!stream) return gstream_finish_status(gs, st);
  cbuf b = {0};
  if (grpc_stream_error_encode(&b, model, id, cinfer_status_message(st))) gstream_send(gs, &b);
  else gstream_finish(gs, GRPC_INTERNAL, "out of memory");
  cbuf_free(&b);
  cinfer_status_free(st);
}

/* --grpc-header-forward-pattern: the call's matched metadata as parameters of r. */
static cinfer_status *forward_metadata(gstream *gs, cinfer_request *r) {
  grpc_server *g = gstream_server(gs);
  size_t n;
  const http_header *h = gstream_forwarded(gs, &n);
  for (size_t i = 0; i < n; i++) {
    cinfer_status *st = kserve_fwd_header(&g->fwd, h[i].name, h[i].name_len, h[i].value, h[i].value_len, r);
    if (st) return st;
  }
  return NULL;
}

static void infer(gstream *gs, const uint8_t *msg, size_t len, bool stream) {
  grpc_server *g = gstream_server(gs);
  infer_call *ic = calloc(1, sizeof *ic);
  if (!ic) return infer_error(gs, stream, "", "", cinfer_status_oom(NULL));
  ic->stream = stream;
  cinfer_status *st = grpc_infer_decode(msg, len, &g->limits, &ic->gi);
  if (st) {
    free(ic);
    return infer_error(gs, stream, "", "", st);
  }
  const char *name = ic->gi->msg->model_name;
  if ((st = cinfer_server_model_acquire(g->server, name, ic->gi->version, &ic->model))) goto fail;
  ic->decoupled = !cinfer_model_answers_once(ic->model);
  if (!stream && ic->decoupled) {
    st = cinfer_status_new(CINFER_UNSUPPORTED, "ModelInfer RPC doesn't support models with "
                           "decoupled transaction policy; use ModelStreamInfer");
    goto fail;
  }
  if ((st = grpc_infer_bind(ic->gi, g->shm, cinfer_model_config_get(ic->model))) ||
      (st = cinfer_request_create(ic->model, &ic->req)) || (st = grpc_infer_apply(ic->gi, ic->req)) ||
      (st = forward_metadata(gs, ic->req)))
    goto fail;
  cinfer_request_set_callback(ic->req, on_response, ic);
  gop_attach(gs, &ic->op, call_cancel);
  st = cinfer_server_infer_async(g->server, ic->req); /* woken at the loop's batch end */
  if (st) {
    gop_done(&ic->op);
    goto fail;
  }
  return;
fail:
  infer_error(gs, stream, name, call_id(ic), st);
  call_free(ic);
}

static void rpc_model_infer(gstream *gs, const uint8_t *msg, size_t len) { infer(gs, msg, len, false); }
static void rpc_model_stream_infer(gstream *gs, const uint8_t *msg, size_t len) { infer(gs, msg, len, true); }

/* ---- not implemented yet, and health ------------------------------------------------------ */

/* ---- system shared memory: the registry the HTTP endpoint uses (frontend/shm.h) ---------- */

static shm_registry *shm_of(gstream *gs) {
  shm_registry *r = gstream_server(gs)->shm;
  if (!r) gstream_finish(gs, GRPC_UNAVAILABLE, "system shared memory is not available on this server");
  return r;
}

typedef struct shm_list {
  Inference__SystemSharedMemoryStatusResponse__RegionsEntry **e;
  size_t n, cap;
  bool oom;
} shm_list;

static void shm_list_add(void *user, const char *name, const char *key, uint64_t offset,
                         uint64_t byte_size) {
  shm_list *l = user;
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 8;
    void *p = realloc(l->e, cap * sizeof *l->e);
    if (!p) { l->oom = true; return; }
    l->e = p;
    l->cap = cap;
  }
  Inference__SystemSharedMemoryStatusResponse__RegionsEntry *e = calloc(1, sizeof *e);
  Inference__SystemSharedMemoryStatusResponse__RegionStatus *v = calloc(1, sizeof *v);
  char *n1 = strdup(name), *n2 = strdup(name), *k = strdup(key);
  if (!e || !v || !n1 || !n2 || !k) {
    free(e), free(v), free(n1), free(n2), free(k);
    l->oom = true;
    return;
  }
  inference__system_shared_memory_status_response__regions_entry__init(e);
  inference__system_shared_memory_status_response__region_status__init(v);
  v->name = n1;
  v->key = k;
  v->offset = offset;
  v->byte_size = byte_size;
  e->key = n2;
  e->value = v;
  l->e[l->n++] = e;
}

static void rpc_shm_status(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__SystemSharedMemoryStatusRequest, q, msg, len);
  shm_registry *r = shm_of(gs);
  if (!r) return Inference__SystemSharedMemoryStatusRequest_free(q);
  shm_list l = {0};
  cinfer_status *st = shm_status_each(r, q->name[0] ? q->name : NULL, shm_list_add, &l);
  Inference__SystemSharedMemoryStatusRequest_free(q);
  if (st) gstream_finish_status(gs, st);
  else if (l.oom) gstream_finish(gs, GRPC_INTERNAL, "out of memory");
  else {
    Inference__SystemSharedMemoryStatusResponse resp = INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
    resp.n_regions = l.n;
    resp.regions = l.e;
    reply(gs, &resp.base);
  }
  for (size_t i = 0; i < l.n; i++) {
    free(l.e[i]->value->name);
    free(l.e[i]->value->key);
    free(l.e[i]->value);
    free(l.e[i]->key);
    free(l.e[i]);
  }
  free(l.e);
}

static void rpc_shm_register(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__SystemSharedMemoryRegisterRequest, q, msg, len);
  shm_registry *r = shm_of(gs);
  cinfer_status *st = r ? shm_register(r, q->name, q->key, q->offset, q->byte_size) : NULL;
  Inference__SystemSharedMemoryRegisterRequest_free(q);
  if (!r) return;
  if (st) return gstream_finish_status(gs, st);
  Inference__SystemSharedMemoryRegisterResponse resp = INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
  reply(gs, &resp.base);
}

static void rpc_shm_unregister(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__SystemSharedMemoryUnregisterRequest, q, msg, len);
  shm_registry *r = shm_of(gs);
  cinfer_status *st = r ? shm_unregister(r, q->name[0] ? q->name : NULL) : NULL;
  Inference__SystemSharedMemoryUnregisterRequest_free(q);
  if (!r) return;
  if (st) return gstream_finish_status(gs, st);
  Inference__SystemSharedMemoryUnregisterResponse resp = INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
  reply(gs, &resp.base);
}

/* CUDA shared memory: the HTTP endpoint's answers (shm_cuda_call): this server has no GPU. */
static void rpc_cuda_status(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__CudaSharedMemoryStatusRequest, q, msg, len);
  cinfer_status *st = shm_cuda_call("status", q->name);
  Inference__CudaSharedMemoryStatusRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  Inference__CudaSharedMemoryStatusResponse resp = INFERENCE__CUDA_SHARED_MEMORY_STATUS_RESPONSE__INIT;
  reply(gs, &resp.base);
}

static void rpc_cuda_register(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__CudaSharedMemoryRegisterRequest, q, msg, len);
  cinfer_status *st = shm_cuda_call("register", q->name);
  Inference__CudaSharedMemoryRegisterRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  Inference__CudaSharedMemoryRegisterResponse resp = INFERENCE__CUDA_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
  reply(gs, &resp.base);
}

static void rpc_cuda_unregister(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__CudaSharedMemoryUnregisterRequest, q, msg, len);
  cinfer_status *st = shm_cuda_call("unregister", q->name);
  Inference__CudaSharedMemoryUnregisterRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  Inference__CudaSharedMemoryUnregisterResponse resp = INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
  reply(gs, &resp.base);
}

/* ---- trace and log settings: the HTTP endpoint's rules (frontend/settings.h) --------------- */

/* The update as the HTTP endpoint's JSON object, so the rules and texts are settings.c's. A
 * setting with no value clears it (JSON null); trace_level is a list; every other trace
 * setting takes one value (Triton's text otherwise). */
static cinfer_status *trace_json(const Inference__TraceSettingRequest *q, char **out) {
  *out = NULL;
  if (!q->n_settings) return NULL;
  cJSON *j = cJSON_CreateObject();
  for (size_t i = 0; j && i < q->n_settings; i++) {
    const char *k = q->settings[i]->key;
    const Inference__TraceSettingRequest__SettingValue *v = q->settings[i]->value;
    size_t n = v ? v->n_value : 0;
    cJSON *x;
    if (!n) {
      x = cJSON_CreateNull();
    } else if (!strcmp(k, "trace_level")) {
      x = cJSON_CreateArray();
      for (size_t e = 0; x && e < n; e++) cJSON_AddItemToArray(x, cJSON_CreateString(v->value[e]));
    } else if (n == 1) {
      x = cJSON_CreateString(v->value[0]);
    } else {
      cJSON_Delete(j);
      return cinfer_status_new(CINFER_INVALID_ARG, "expect only 1 value for '%.100s'", k);
    }
    if (!x) break;
    cJSON_AddItemToObject(j, k, x);
  }
  *out = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  return *out ? NULL : cinfer_status_oom(NULL);
}

static void rpc_trace(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__TraceSettingRequest, q, msg, len);
  char *body;
  cinfer_status *st = trace_json(q, &body);
  cinfer_trace_setting v;
  if (!st) st = settings_trace_apply(gstream_server(gs)->server, q->model_name[0] ? q->model_name : NULL,
                                     body, body ? strlen(body) : 0, &v);
  free(body);
  Inference__TraceSettingRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  char *levels[2];
  size_t nl = 0;
  if (!v.level) levels[nl++] = "OFF";
  if (v.level & CINFER_TRACE_TIMESTAMPS) levels[nl++] = "TIMESTAMPS";
  if (v.level & CINFER_TRACE_TENSORS) levels[nl++] = "TENSORS";
  char rate[16], count[16], freq[16];
  snprintf(rate, sizeof rate, "%u", v.rate);
  snprintf(count, sizeof count, "%d", v.count);
  snprintf(freq, sizeof freq, "%u", v.log_frequency);
  char *one[5] = {rate, count, freq, v.file, "triton"};
  static const char *const keys[6] = {"trace_level", "trace_rate", "trace_count", "log_frequency",
                                      "trace_file", "trace_mode"};
  Inference__TraceSettingResponse__SettingValue val[6];
  Inference__TraceSettingResponse__SettingsEntry ent[6], *ep[6];
  for (int i = 0; i < 6; i++) {
    inference__trace_setting_response__setting_value__init(&val[i]);
    inference__trace_setting_response__settings_entry__init(&ent[i]);
    val[i].n_value = i ? 1 : nl;
    val[i].value = i ? &one[i - 1] : levels;
    ent[i].key = (char *)keys[i];
    ent[i].value = &val[i];
    ep[i] = &ent[i];
  }
  Inference__TraceSettingResponse r = INFERENCE__TRACE_SETTING_RESPONSE__INIT;
  r.n_settings = 6;
  r.settings = ep;
  reply(gs, &r.base);
}

static cinfer_status *log_json(const Inference__LogSettingsRequest *q, char **out) {
  *out = NULL;
  if (!q->n_settings) return NULL;
  cJSON *j = cJSON_CreateObject();
  for (size_t i = 0; j && i < q->n_settings; i++) {
    const Inference__LogSettingsRequest__SettingValue *v = q->settings[i]->value;
    cJSON *x;
    switch (v ? v->parameter_choice_case : 0) {
      case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM:
        x = cJSON_CreateBool(v->bool_param);
        break;
      case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM:
        x = cJSON_CreateNumber(v->uint32_param);
        break;
      case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM:
        x = cJSON_CreateString(v->string_param);
        break;
      default: x = cJSON_CreateNull(); break;
    }
    if (!x) break;
    cJSON_AddItemToObject(j, q->settings[i]->key, x);
  }
  *out = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  return *out ? NULL : cinfer_status_oom(NULL);
}

static void rpc_log(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Inference__LogSettingsRequest, q, msg, len);
  char *body;
  cinfer_status *st = log_json(q, &body);
  settings_log_view v;
  if (!st) st = settings_logging_apply(body, body ? strlen(body) : 0, &v);
  free(body);
  Inference__LogSettingsRequest_free(q);
  if (st) return gstream_finish_status(gs, st);
  static const char *const keys[6] = {"log_file", "log_info", "log_warning", "log_error",
                                      "log_verbose_level", "log_format"};
  Inference__LogSettingsResponse__SettingValue val[6];
  Inference__LogSettingsResponse__SettingsEntry ent[6], *ep[6];
  for (int i = 0; i < 6; i++) {
    inference__log_settings_response__setting_value__init(&val[i]);
    inference__log_settings_response__settings_entry__init(&ent[i]);
    ent[i].key = (char *)keys[i];
    ent[i].value = &val[i];
    ep[i] = &ent[i];
  }
  val[0].parameter_choice_case = val[5].parameter_choice_case =
      INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
  val[0].string_param = (char *)v.file;
  val[5].string_param = (char *)v.format;
  bool b[3] = {v.info, v.warning, v.error};
  for (int i = 0; i < 3; i++) {
    val[1 + i].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
    val[1 + i].bool_param = b[i];
  }
  val[4].parameter_choice_case = INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM;
  val[4].uint32_param = (uint32_t)v.verbose;
  Inference__LogSettingsResponse r = INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
  r.n_settings = 6;
  r.settings = ep;
  reply(gs, &r.base);
}

static void rpc_health_check(gstream *gs, const uint8_t *msg, size_t len) {
  UNPACK(Grpc__Health__V1__HealthCheckRequest, q, msg, len);
  bool known = !q->service[0] || !strcmp(q->service, "inference.GRPCInferenceService");
  char svc[160];
  snprintf(svc, sizeof svc, "unknown service '%.128s'", q->service);
  Grpc__Health__V1__HealthCheckRequest_free(q);
  if (!known) return gstream_finish(gs, GRPC_NOT_FOUND, svc);
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = cinfer_server_is_ready(gstream_server(gs)->server)
                 ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
  reply(gs, &r.base);
}

static void rpc_health_watch(gstream *gs, const uint8_t *msg, size_t len) {
  gstream_finish(gs, GRPC_UNIMPLEMENTED, "grpc.health.v1.Health/Watch is not supported; use Check");
}

#define SVC "/inference.GRPCInferenceService/"
static const grpc_method methods[] = {
    {SVC "ServerLive", false, rpc_server_live},
    {SVC "ServerReady", false, rpc_server_ready},
    {SVC "ModelReady", false, rpc_model_ready},
    {SVC "ServerMetadata", false, rpc_server_metadata},
    {SVC "ModelMetadata", false, rpc_model_metadata},
    {SVC "ModelInfer", false, rpc_model_infer},
    {SVC "ModelStreamInfer", true, rpc_model_stream_infer},
    {SVC "ModelConfig", false, rpc_model_config},
    {SVC "ModelStatistics", false, rpc_model_statistics},
    {SVC "RepositoryIndex", false, rpc_repository_index},
    {SVC "RepositoryModelLoad", false, rpc_repository_load},
    {SVC "RepositoryModelUnload", false, rpc_repository_unload},
    {SVC "SystemSharedMemoryStatus", false, rpc_shm_status},
    {SVC "SystemSharedMemoryRegister", false, rpc_shm_register},
    {SVC "SystemSharedMemoryUnregister", false, rpc_shm_unregister},
    {SVC "CudaSharedMemoryStatus", false, rpc_cuda_status},
    {SVC "CudaSharedMemoryRegister", false, rpc_cuda_register},
    {SVC "CudaSharedMemoryUnregister", false, rpc_cuda_unregister},
    {SVC "TraceSetting", false, rpc_trace},
    {SVC "LogSettings", false, rpc_log},
    {"/grpc.health.v1.Health/Check", false, rpc_health_check},
    {"/grpc.health.v1.Health/Watch", true, rpc_health_watch},
};

const grpc_method *grpc_find_method(const char *path, size_t len) {
  for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
    if (strlen(methods[i].path) == len && !memcmp(methods[i].path, path, len)) return &methods[i];
  return NULL;
}
