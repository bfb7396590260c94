/* be_preprocess.c: the image_preprocess backend. UINT8 HWC RGB -> a normalised FP32 or
 * FP16 tensor of a fixed size, and the transform that maps the tensor's pixels back.
 *
 * Config:
 *   input 0   TYPE_UINT8, dims [-1, -1, 3] (H, W, RGB)
 *   output 0  TYPE_FP32 or TYPE_FP16, dims [3, height, width] (layout nchw) or
 *             [height, width, 3] (nhwc)
 *   output 1  optional, TYPE_FP32, dims [6]: scale_x, scale_y, pad_x, pad_y, width, height
 *             of the original image; a point p of the tensor is (p - pad) / scale in it.
 *   parameters: width, height (required); resize = stretch | letterbox (default stretch);
 *     pad_value (0..255, default 0: the pixel value around a letterboxed image);
 *     scale, mean, std: value = (pixel * scale - mean[c]) / std[c] (defaults 1, 0, 1; mean
 *     and std as "a,b,c" in the output's channel order); color = rgb | bgr; layout =
 *     nchw | nhwc.
 * A non-batching model takes one image ([H, W, 3]) or several of one size ([n, H, W, 3]);
 * a batching model takes rows of one image each. */
#include <stdlib.h>
#include <string.h>

#include "backends/vision/be.h"

typedef struct pre_model {
  const char *model_name, *in, *out, *xform;
  bool batching, letterbox, out_batched; /* out_batched: output dims carry the image count */
  int width, height;
  float pad;
  cinfer_dtype dtype;
  vis_norm norm;
} pre_model;

typedef struct pre_inst {
  const pre_model *m;
  float *scratch; /* one image, FP32, for FP16 output */
} pre_inst;

static cinfer_status *pre_load(const cinfer_model_load_info *info, void **model) {
  static const char *const known[] = {"width", "height", "resize", "pad_value", VP_NORM_KEYS, NULL};
  static const char *const modes[] = {"stretch", "letterbox", NULL};
  vp p;
  cinfer_status *st = vp_open(&p, info, "image_preprocess", known);
  if (st) return st;
  if (!vp_str(&p, "width") || !vp_str(&p, "height"))
    return vp_err(&p, "parameters 'width' and 'height' (the output size) are required");
  pre_model m = {.model_name = info->model_name};
  int64_t w, h;
  int mode;
  if ((st = vp_int(&p, "width", 0, 1, 16384, &w)) || (st = vp_int(&p, "height", 0, 1, 16384, &h)) ||
      (st = vp_enum(&p, "resize", 0, modes, &mode)) ||
      (st = vp_float(&p, "pad_value", 0, 0, 255, &m.pad)) || (st = vp_norm(&p, &m.norm)))
    return st;
  m.width = (int)w, m.height = (int)h, m.letterbox = mode == 1;
  m.batching = cinfer_config_max_batch_size(info->config) > 0;
  uint32_t no = cinfer_config_output_count(info->config);
  if (cinfer_config_input_count(info->config) != 1 || no < 1 || no > 2)
    return vp_err(&p, "takes one input (the image) and one or two outputs (the tensor, the transform)");
  cinfer_config_io in, out, xf;
  if ((st = vb_check_io(&p, true, 0, CINFER_TYPE_UINT8, CINFER_TYPE_INVALID, -1, NULL, &in)))
    return st;
  bool in_ok = (in.ndim == 3 && in.dims[2] == 3) || (!m.batching && in.ndim == 4 && in.dims[3] == 3);
  if (!in_ok) return vp_err(&p, "input '%s' must have dims [-1, -1, 3] (H, W, RGB)", in.name);
  if ((st = vb_check_io(&p, false, 0, CINFER_TYPE_FP32, CINFER_TYPE_FP16, -1, NULL, &out))) return st;
  int64_t want[4];
  int off = (!m.batching && out.ndim == 4) ? 1 : 0;
  m.out_batched = m.batching || off;
  want[0] = -1;
  if (m.norm.nchw) want[off] = 3, want[off + 1] = h, want[off + 2] = w;
  else want[off] = h, want[off + 1] = w, want[off + 2] = 3;
  if ((st = vb_check_io(&p, false, 0, out.dtype, CINFER_TYPE_INVALID, 3 + off, want, &out)))
    return st;
  m.dtype = out.dtype;
  if (no == 2) {
    int64_t w6[2] = {-1, 6};
    if ((st = vb_check_io(&p, false, 1, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 1 + off, w6 + 1 - off, &xf)))
      return st;
    m.xform = xf.name;
  }
  m.in = in.name, m.out = out.name;
  pre_model *pm = malloc(sizeof *pm);
  if (!pm) return cinfer_status_oom(NULL);
  *pm = m;
  *model = pm;
  return NULL;
}

static void pre_unload(void *model) { free(model); }

static cinfer_status *pre_instance(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  const pre_model *m = model;
  pre_inst *in = calloc(1, sizeof *in);
  if (!in) return cinfer_status_oom(NULL);
  in->m = m;
  if (m->dtype == CINFER_TYPE_FP16 &&
      !(in->scratch = malloc(sizeof(float) * 3 * (size_t)m->width * m->height))) {
    free(in);
    return cinfer_status_oom(NULL);
  }
  *inst = in;
  return NULL;
}

static void pre_instance_destroy(void *inst) {
  pre_inst *in = inst;
  if (in) free(in->scratch);
  free(in);
}

/* Preprocesses one HWC image into dst (FP32). */
static void one(const pre_model *m, const uint8_t *px, int iw, int ih, float *dst, float *xf) {
  vis_place pl = vis_placement(iw, ih, m->width, m->height, m->letterbox);
  if (m->letterbox && (pl.r.w != m->width || pl.r.h != m->height))
    vis_fill(dst, m->width, m->height, &m->norm, m->pad);
  vis_resize(px, iw, ih, (vis_rect){0, 0, iw, ih}, dst, m->width, m->height, pl.r, &m->norm);
  if (xf) {
    xf[0] = pl.scale_x, xf[1] = pl.scale_y, xf[2] = (float)pl.r.x, xf[3] = (float)pl.r.y;
    xf[4] = (float)iw, xf[5] = (float)ih;
  }
}

static cinfer_status *pre_execute(void *instance, cinfer_batch *b) {
  pre_inst *inst = instance;
  const pre_model *m = inst->m;
  const cinfer_tensor *t = NULL;
  for (uint32_t i = 0; i < b->n_inputs; i++)
    if (!strcmp(b->inputs[i].name, m->in)) t = &b->inputs[i];
  if (!t) return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is missing", m->in);
  cinfer_status *st = cinfer_tensor_check(t);
  if (st) return st;
  int64_t n = t->ndim == 4 ? t->shape[0] : 1;
  int64_t ih = t->shape[t->ndim - 3], iw = t->shape[t->ndim - 2];
  if (t->dtype != CINFER_TYPE_UINT8 || t->ndim < 3 || t->shape[t->ndim - 1] != 3)
    return cinfer_status_new(CINFER_INVALID_ARG, "image_preprocess model '%s': input '%s' must be "
                             "UINT8 [H, W, 3]", m->model_name, m->in);
  if (ih < 1 || iw < 1 || ih > 1 << 20 || iw > 1 << 20)
    return cinfer_status_new(CINFER_INVALID_ARG, "image_preprocess model '%s': image of %lldx%lld "
                             "pixels", m->model_name, (long long)iw, (long long)ih);
  if (!m->out_batched && n != 1)
    return cinfer_status_new(CINFER_INVALID_ARG, "image_preprocess model '%s': %lld images in one "
                             "request; the output holds one", m->model_name, (long long)n);
  size_t per = 3 * (size_t)m->width * m->height;
  size_t esz = m->dtype == CINFER_TYPE_FP16 ? 2 : 4;
  int64_t shape[4];
  int nd = 0;
  if (m->out_batched) shape[nd++] = n;
  if (m->norm.nchw) shape[nd++] = 3, shape[nd++] = m->height, shape[nd++] = m->width;
  else shape[nd++] = m->height, shape[nd++] = m->width, shape[nd++] = 3;
  void *out = NULL;
  float *xf = NULL;
  if ((st = cinfer_batch_output(b, m->out, m->dtype, nd, shape, per * esz * (size_t)n, &out)))
    return st;
  if (m->xform && cinfer_batch_output_requested(b, m->xform)) {
    int64_t xs[2] = {n, 6};
    if ((st = cinfer_batch_output(b, m->xform, CINFER_TYPE_FP32, m->out_batched ? 2 : 1,
                                  m->out_batched ? xs : xs + 1, sizeof(float) * 6 * (size_t)n,
                                  (void **)&xf)))
      return st;
  }
  size_t img = (size_t)iw * (size_t)ih * 3;
  for (int64_t i = 0; i < n; i++) {
    const uint8_t *px = (const uint8_t *)t->data + img * (size_t)i;
    float *dst = m->dtype == CINFER_TYPE_FP16 ? inst->scratch : (float *)out + per * (size_t)i;
    one(m, px, (int)iw, (int)ih, dst, xf ? xf + 6 * i : NULL);
    if (m->dtype == CINFER_TYPE_FP16) vb_store((uint16_t *)out + per * (size_t)i, m->dtype, dst, per);
  }
  return NULL;
}

const cinfer_backend_iface cinfer_image_preprocess_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "image_preprocess",
    .model_load = pre_load,
    .model_unload = pre_unload,
    .instance_create = pre_instance,
    .instance_destroy = pre_instance_destroy,
    .execute = pre_execute,
};
