/* backend.c: the ONNX engine behind the serving ABI (include/cinfer/backend.h), name
 * "onnxruntime" (config.pbtxt `platform: "onnxruntime_onnx"` or `backend: "onnxruntime"`).
 *
 * model_load reads <version_dir>/model.onnx once; every instance owns an onnx_session
 * (plans and arenas are per instance, so instances run concurrently). execute runs the
 * batch as one call when the model is batchable, copies each output into the batch's
 * output memory, and fails the batch with the engine's message otherwise.
 * autocomplete (autocomplete.c) fills inputs/outputs/max_batch_size from model.onnx. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/onnx.h"
#include "cinfer/backend.h"

cinfer_status *onnx_autocomplete(cinfer_autocomplete *ac, const char *version_dir);

typedef struct onnx_backend_model {
  onnx_model *m;
  int threads;
} onnx_backend_model;

static cinfer_status *be_model_load(const cinfer_model_load_info *info, void **out) {
  *out = NULL;
  char path[4096];
  if (snprintf(path, sizeof path, "%s/model.onnx", info->version_dir) >= (int)sizeof path)
    return cinfer_status_new(CINFER_INVALID_ARG, "model path too long");
  onnx_backend_model *bm = calloc(1, sizeof *bm);
  if (!bm) return cinfer_status_oom(NULL);
  cinfer_status *st = onnx_model_load_file(path, &bm->m);
  if (st) {
    free(bm);
    return st;
  }
  bm->threads = info->threads_per_instance > 0 ? info->threads_per_instance : 1;
  *out = bm;
  return NULL;
}

static void be_model_unload(void *model) {
  onnx_backend_model *bm = model;
  if (!bm) return;
  onnx_model_destroy(bm->m);
  free(bm);
}

/* One instance: its session and the output views of one run, sized from the model once
 * (a model may have up to CINFER_MAX_OUTPUTS outputs; execute allocates nothing). */
typedef struct onnx_instance {
  onnx_session *s;
  cinfer_tensor *outs; /* [onnx_session_output_count(s)] */
} onnx_instance;

static cinfer_status *be_instance_create(void *model, const cinfer_instance_info *info,
                                         void **out) {
  onnx_backend_model *bm = model;
  if (info->kind != CINFER_INSTANCE_KIND_CPU)
    return cinfer_status_new(CINFER_UNSUPPORTED, "the ONNX engine runs on CPU instances only");
  onnx_options opt = {.threads = info->threads > 0 ? info->threads : bm->threads};
  onnx_instance *in = calloc(1, sizeof *in);
  if (!in) return cinfer_status_oom(NULL);
  cinfer_status *st = onnx_session_create(bm->m, &opt, &in->s);
  if (st) {
    free(in);
    return st;
  }
  in->outs = calloc((size_t)onnx_model_output_count(bm->m) + 1, sizeof *in->outs);
  if (!in->outs) {
    onnx_session_destroy(in->s);
    free(in);
    return cinfer_status_oom(NULL);
  }
  *out = in;
  return NULL;
}

static void be_instance_destroy(void *inst) {
  onnx_instance *in = inst;
  if (!in) return;
  onnx_session_destroy(in->s);
  free(in->outs);
  free(in);
}

static cinfer_status *be_execute(void *inst, cinfer_batch *b) {
  onnx_instance *in = inst;
  cinfer_tensor *outs = in->outs;
  cinfer_status *st = onnx_session_run(in->s, b->inputs, (int)b->n_inputs, outs);
  if (st) return st;
  int n = onnx_session_output_count(in->s);
  for (int i = 0; i < n; i++) {
    if (!cinfer_batch_output_requested(b, outs[i].name)) continue;
    void *data;
    if ((st = cinfer_batch_output(b, outs[i].name, outs[i].dtype, outs[i].ndim, outs[i].shape,
                                  outs[i].byte_size, &data)))
      return st;
    if (outs[i].byte_size) memcpy(data, outs[i].data, outs[i].byte_size);
  }
  return NULL;
}

const cinfer_backend_iface onnx_backend_iface = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "onnxruntime",
    .flags = 0,
    .autocomplete = onnx_autocomplete,
    .model_load = be_model_load,
    .model_unload = be_model_unload,
    .instance_create = be_instance_create,
    .instance_destroy = be_instance_destroy,
    .execute = be_execute,
};
