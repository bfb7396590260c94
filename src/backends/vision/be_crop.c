/* be_crop.c: the face_crop backend. The original image and the detections -> one
 * normalised tensor per face, as a batch [N, 3, height, width] for the next model.
 *
 * Config (max_batch_size 0: N differs per image):
 *   input 0   TYPE_UINT8 image [-1, -1, 3] (or [1, -1, -1, 3])
 *   input 1   TYPE_FP32 boxes [-1, 4] (x1, y1, x2, y2 in the image's pixels)
 *   input 2   TYPE_FP32 landmarks [-1, 10] (mode align only)
 *   output 0  TYPE_FP32 or TYPE_FP16 [-1, 3, height, width] (layout nchw) or
 *             [-1, height, width, 3] (nhwc)
 *   parameters: width, height (required); mode = box | align (default box);
 *     box: margin (fraction of the box added on every side, default 0), square (false:
 *     grow the shorter side to the longer one first); the rectangle is clipped to the image,
 *     then resized (bilinear, as crop-then-resize);
 *     align: the five landmarks are mapped onto the ArcFace 112x112 template (scaled to
 *     width x height) by the least-squares similarity transform, then the image is warped
 *     (bilinear; outside the image: pad_value);
 *     pad_value (0..255, default 0), max_faces (default 64: a request with more faces is
 *     refused, not cut); scale, mean, std, color, layout as image_preprocess. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vision/be.h"

typedef struct crop_model {
  const char *model_name, *in_img, *in_box, *in_lmk, *out;
  bool align, square;
  int width, height;
  float margin, pad;
  int64_t max_faces;
  cinfer_dtype dtype;
  vis_norm norm;
} crop_model;

typedef struct crop_inst {
  const crop_model *m;
  float *scratch;
} crop_inst;

static cinfer_status *crop_load(const cinfer_model_load_info *info, void **model) {
  static const char *const known[] = {"width", "height", "mode", "margin", "square", "pad_value",
                                      "max_faces", VP_NORM_KEYS, NULL};
  static const char *const modes[] = {"box", "align", NULL};
  vp p;
  cinfer_status *st = vp_open(&p, info, "face_crop", known);
  if (st) return st;
  if (cinfer_config_max_batch_size(info->config) > 0)
    return vp_err(&p, "each image has its own number of faces: set max_batch_size: 0");
  if (!vp_str(&p, "width") || !vp_str(&p, "height"))
    return vp_err(&p, "parameters 'width' and 'height' (the crop size) are required");
  crop_model m = {.model_name = info->model_name};
  int64_t w, h;
  int mode;
  if ((st = vp_int(&p, "width", 0, 1, 4096, &w)) || (st = vp_int(&p, "height", 0, 1, 4096, &h)) ||
      (st = vp_enum(&p, "mode", 0, modes, &mode)) ||
      (st = vp_float(&p, "margin", 0, 0, 10, &m.margin)) ||
      (st = vp_bool(&p, "square", false, &m.square)) ||
      (st = vp_float(&p, "pad_value", 0, 0, 255, &m.pad)) ||
      (st = vp_int(&p, "max_faces", 64, 1, 4096, &m.max_faces)) || (st = vp_norm(&p, &m.norm)))
    return st;
  m.width = (int)w, m.height = (int)h, m.align = mode == 1;
  if (m.align && (vp_str(&p, "margin") || vp_str(&p, "square")))
    return vp_err(&p, "parameters 'margin' and 'square' are for mode box");
  uint32_t ni = cinfer_config_input_count(info->config);
  if (ni != (m.align ? 3u : 2u) || cinfer_config_output_count(info->config) != 1)
    return vp_err(&p, "mode %s takes inputs image, boxes%s and one output", modes[mode],
                  m.align ? ", landmarks" : "");
  cinfer_config_io io;
  const int64_t b4[] = {-1, 4}, l10[] = {-1, 10};
  if ((st = vb_check_io(&p, true, 0, CINFER_TYPE_UINT8, CINFER_TYPE_INVALID, -1, NULL, &io))) return st;
  if (!((io.ndim == 3 && io.dims[2] == 3) || (io.ndim == 4 && io.dims[3] == 3)))
    return vp_err(&p, "input '%s' must have dims [-1, -1, 3] (H, W, RGB)", io.name);
  m.in_img = io.name;
  if ((st = vb_check_io(&p, true, 1, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 2, b4, &io))) return st;
  m.in_box = io.name;
  if (m.align) {
    if ((st = vb_check_io(&p, true, 2, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 2, l10, &io))) return st;
    m.in_lmk = io.name;
  }
  if ((st = vb_check_io(&p, false, 0, CINFER_TYPE_FP32, CINFER_TYPE_FP16, -1, NULL, &io))) return st;
  int64_t want[4] = {-1, 3, h, w};
  if (!m.norm.nchw) want[1] = h, want[2] = w, want[3] = 3;
  if ((st = vb_check_io(&p, false, 0, io.dtype, CINFER_TYPE_INVALID, 4, want, &io))) return st;
  m.out = io.name, m.dtype = io.dtype;
  crop_model *pm = malloc(sizeof *pm);
  if (!pm) return cinfer_status_oom(NULL);
  *pm = m;
  *model = pm;
  return NULL;
}

static void crop_unload(void *model) { free(model); }

static cinfer_status *crop_instance(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  const crop_model *m = model;
  crop_inst *in = calloc(1, sizeof *in);
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

static void crop_instance_destroy(void *inst) {
  crop_inst *in = inst;
  if (in) free(in->scratch);
  free(in);
}

/* The whole-pixel rectangle a box crop reads (exposed for the tests through the same
 * arithmetic in the Python reference): centre and size grown by the margin, optionally
 * squared, then floor/ceil and clipped to the image; never empty. */
static vis_rect crop_rect(const crop_model *m, const float *b, int W, int H) {
  float cx = (b[0] + b[2]) * 0.5f, cy = (b[1] + b[3]) * 0.5f;
  float w = (b[2] - b[0]) * (1 + 2 * m->margin), h = (b[3] - b[1]) * (1 + 2 * m->margin);
  if (m->square) w = h = fmaxf(w, h);
  int x0 = (int)floorf(cx - w * 0.5f), x1 = (int)ceilf(cx + w * 0.5f);
  int y0 = (int)floorf(cy - h * 0.5f), y1 = (int)ceilf(cy + h * 0.5f);
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  if (x0 > W - 1) x0 = W - 1;
  if (y0 > H - 1) y0 = H - 1;
  if (x1 > W) x1 = W;
  if (y1 > H) y1 = H;
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  return (vis_rect){x0, y0, x1 - x0, y1 - y0};
}

static const cinfer_tensor *find(const cinfer_batch *b, const char *name) {
  for (uint32_t i = 0; i < b->n_inputs; i++)
    if (!strcmp(b->inputs[i].name, name)) return &b->inputs[i];
  return NULL;
}

static cinfer_status *crop_run(crop_inst *inst, cinfer_batch *b) {
  const crop_model *m = inst->m;
  const cinfer_tensor *ti = find(b, m->in_img), *tb = find(b, m->in_box);
  const cinfer_tensor *tl = m->align ? find(b, m->in_lmk) : NULL;
  if (!ti || !tb || (m->align && !tl)) return cinfer_status_new(CINFER_INVALID_ARG, "an input is missing");
  cinfer_status *st;
  if ((st = cinfer_tensor_check(ti)) || (st = cinfer_tensor_check(tb)) || (tl && (st = cinfer_tensor_check(tl))))
    return st;
  int off = ti->ndim == 4 ? 1 : 0;
  if (ti->dtype != CINFER_TYPE_UINT8 || (ti->ndim != 3 && ti->ndim != 4) || (off && ti->shape[0] != 1) ||
      ti->shape[off + 2] != 3 || ti->shape[off] < 1 || ti->shape[off + 1] < 1 ||
      ti->shape[off] > 1 << 20 || ti->shape[off + 1] > 1 << 20)
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be one UINT8 image [H, W, 3]", ti->name);
  int H = (int)ti->shape[off], W = (int)ti->shape[off + 1];
  if (tb->dtype != CINFER_TYPE_FP32 || tb->ndim != 2 || tb->shape[1] != 4)
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be FP32 [N, 4]", tb->name);
  int64_t n = tb->shape[0];
  if (tl && (tl->dtype != CINFER_TYPE_FP32 || tl->ndim != 2 || tl->shape[1] != 10 || tl->shape[0] != n))
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be FP32 [%lld, 10]", tl->name, (long long)n);
  if (n > m->max_faces)
    return cinfer_status_new(CINFER_INVALID_ARG, "%lld faces in one image; this model crops at most "
                             "%lld (parameter max_faces)", (long long)n, (long long)m->max_faces);
  const float *boxes = tb->data, *lmk = tl ? tl->data : NULL;
  for (int64_t i = 0; i < 4 * n; i++)
    if (!isfinite(boxes[i])) return cinfer_status_new(CINFER_INVALID_ARG, "box %lld is not finite", (long long)i / 4 + 1);
  for (int64_t i = 0; lmk && i < 10 * n; i++)
    if (!isfinite(lmk[i])) return cinfer_status_new(CINFER_INVALID_ARG, "landmarks %lld are not finite", (long long)i / 10 + 1);
  size_t per = 3 * (size_t)m->width * m->height, esz = m->dtype == CINFER_TYPE_FP16 ? 2 : 4;
  int64_t shape[4] = {n, 3, m->height, m->width};
  if (!m->norm.nchw) shape[1] = m->height, shape[2] = m->width, shape[3] = 3;
  void *out;
  if ((st = cinfer_batch_output(b, m->out, m->dtype, 4, shape, per * esz * (size_t)n, &out))) return st;
  const uint8_t *px = ti->data;
  float tmpl[10];
  for (int k = 0; k < 5; k++) {
    tmpl[2 * k] = vis_arcface_template[2 * k] * (float)m->width / 112.0f;
    tmpl[2 * k + 1] = vis_arcface_template[2 * k + 1] * (float)m->height / 112.0f;
  }
  for (int64_t i = 0; i < n; i++) {
    float *dst = m->dtype == CINFER_TYPE_FP16 ? inst->scratch : (float *)out + per * (size_t)i;
    if (m->align) {
      double fwd[6], inv[6];
      if (!vis_similarity(lmk + 10 * i, tmpl, 5, fwd) || !vis_affine_invert(fwd, inv))
        return cinfer_status_new(CINFER_INVALID_ARG, "the landmarks of face %lld are degenerate "
                                 "(no similarity transform)", (long long)i + 1);
      vis_warp_affine(px, W, H, inv, dst, m->width, m->height, &m->norm, m->pad);
    } else {
      vis_rect r = crop_rect(m, boxes + 4 * i, W, H);
      vis_resize(px, W, H, r, dst, m->width, m->height, (vis_rect){0, 0, m->width, m->height}, &m->norm);
    }
    if (m->dtype == CINFER_TYPE_FP16) vb_store((uint16_t *)out + per * (size_t)i, m->dtype, dst, per);
  }
  return NULL;
}

static cinfer_status *crop_execute(void *instance, cinfer_batch *b) {
  crop_inst *inst = instance;
  cinfer_status *st = crop_run(inst, b);
  return st ? cinfer_status_prefix(st, "face_crop model '%s'", inst->m->model_name) : NULL;
}

const cinfer_backend_iface cinfer_face_crop_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "face_crop",
    .model_load = crop_load,
    .model_unload = crop_unload,
    .instance_create = crop_instance,
    .instance_destroy = crop_instance_destroy,
    .execute = crop_execute,
};
