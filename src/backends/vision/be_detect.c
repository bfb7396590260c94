/* be_detect.c: the detection_postprocess backend. A face detector's raw outputs ->
 * boxes, scores and five landmarks per face, in the original image's pixels.
 *
 * Config (max_batch_size 0: each image has its own number of faces N):
 *   format retinaface: inputs, for each stride of `strides` in order: the face
 *     probabilities [1, 2A, H, W], the box deltas [1, 4A, H, W], the landmark deltas
 *     [1, 10A, H, W] (the leading 1 may be left out); then the transform [6] of
 *     image_preprocess (the leading 1 may be there).
 *   format ultraface: inputs scores [1, K, 2] (background, face), boxes [1, K, 4] (x1, y1,
 *     x2, y2 as fractions of the network input, priors decoded in the graph), the transform.
 *   outputs: boxes FP32 [-1, 4] (x1, y1, x2, y2), scores FP32 [-1], and for retinaface
 *     optionally landmarks FP32 [-1, 10], best score first.
 *   parameters: format (retinaface | ultraface, default retinaface), score_threshold (0.5),
 *     iou_threshold (0.4), pre_nms_top_k (5000), max_detections (100); retinaface:
 *     strides ("32,16,8"), anchors_per_cell (2), anchor_sizes (A per stride, in stride
 *     order: "512,256,128,64,32,16"), box_variance ("1,1": centre, size), landmark_variance
 *     (0.2); ultraface: input_width (320), input_height (240). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vision/be.h"

#define DET_MAX_STRIDES 8
#define DET_MAX_ANCHORS 8

typedef struct det_model {
  const char *model_name;
  bool ultra;
  int n_strides, A;
  int strides[DET_MAX_STRIDES];
  float sizes[DET_MAX_STRIDES * DET_MAX_ANCHORS];
  float var_c, var_s, var_l, thresh, iou;
  int64_t top_k, max_det;
  float in_w, in_h;
  const char *in_names[3 * DET_MAX_STRIDES + 1];
  int n_in;
  const char *out_boxes, *out_scores, *out_lmk;
} det_model;

static cinfer_status *det_load(const cinfer_model_load_info *info, void **model) {
  static const char *const known[] = {"format", "score_threshold", "iou_threshold", "pre_nms_top_k",
                                      "max_detections", "strides", "anchors_per_cell",
                                      "anchor_sizes", "box_variance", "landmark_variance",
                                      "input_width", "input_height", NULL};
  static const char *const formats[] = {"retinaface", "ultraface", NULL};
  vp p;
  cinfer_status *st = vp_open(&p, info, "detection_postprocess", known);
  if (st) return st;
  if (cinfer_config_max_batch_size(info->config) > 0)
    return vp_err(&p, "each image has its own number of detections: set max_batch_size: 0");
  det_model m = {.model_name = info->model_name};
  int fmt, ns = 3;
  int64_t A;
  float strides[DET_MAX_STRIDES] = {32, 16, 8}, var[2] = {1, 1};
  float sizes[DET_MAX_STRIDES * DET_MAX_ANCHORS] = {512, 256, 128, 64, 32, 16};
  if ((st = vp_enum(&p, "format", 0, formats, &fmt)) ||
      (st = vp_float(&p, "score_threshold", 0.5, 0, 1, &m.thresh)) ||
      (st = vp_float(&p, "iou_threshold", 0.4, 0, 1, &m.iou)) ||
      (st = vp_int(&p, "pre_nms_top_k", 5000, 1, 1 << 20, &m.top_k)) ||
      (st = vp_int(&p, "max_detections", 100, 1, 1 << 16, &m.max_det)))
    return st;
  m.ultra = fmt == 1;
  const char *retina_only[] = {"strides", "anchors_per_cell", "anchor_sizes", "box_variance",
                               "landmark_variance"};
  const char *ultra_only[] = {"input_width", "input_height"};
  for (size_t i = 0; m.ultra && i < sizeof retina_only / sizeof *retina_only; i++)
    if (vp_str(&p, retina_only[i]))
      return vp_err(&p, "parameter '%s' is for format retinaface", retina_only[i]);
  for (size_t i = 0; !m.ultra && i < sizeof ultra_only / sizeof *ultra_only; i++)
    if (vp_str(&p, ultra_only[i]))
      return vp_err(&p, "parameter '%s' is for format ultraface", ultra_only[i]);
  uint32_t ni = cinfer_config_input_count(info->config), no = cinfer_config_output_count(info->config);
  cinfer_config_io io;
  if (!m.ultra) {
    if ((st = vp_floats(&p, "strides", 1, DET_MAX_STRIDES, strides, &ns)) ||
        (st = vp_int(&p, "anchors_per_cell", 2, 1, DET_MAX_ANCHORS, &A)) ||
        (st = vp_floats(&p, "box_variance", 2, 2, var, NULL)) ||
        (st = vp_float(&p, "landmark_variance", 0.2, 0, 100, &m.var_l)))
      return st;
    int nsz = ns * (int)A;
    if (vp_str(&p, "anchor_sizes")) {
      if ((st = vp_floats(&p, "anchor_sizes", nsz, nsz, sizes, NULL))) return st;
    } else if (ns != 3 || A != 2) {
      return vp_err(&p, "parameter 'anchor_sizes' is required when strides or anchors_per_cell "
                        "differ from the defaults");
    }
    m.n_strides = ns, m.A = (int)A;
    for (int i = 0; i < ns; i++) {
      if (strides[i] < 1 || strides[i] > 4096 || strides[i] != floorf(strides[i]))
        return vp_err(&p, "parameter 'strides': %g is not a whole number in [1, 4096]", strides[i]);
      m.strides[i] = (int)strides[i];
    }
    for (int i = 0; i < nsz; i++) {
      if (!(sizes[i] > 0)) return vp_err(&p, "parameter 'anchor_sizes': %g is not positive", sizes[i]);
      m.sizes[i] = sizes[i];
    }
    m.var_c = var[0], m.var_s = var[1];
    m.n_in = 3 * ns + 1;
  } else {
    if ((st = vp_float(&p, "input_width", 320, 1, 16384, &m.in_w)) ||
        (st = vp_float(&p, "input_height", 240, 1, 16384, &m.in_h)))
      return st;
    m.n_in = 3;
  }
  if ((int)ni != m.n_in)
    return vp_err(&p, "format %s with %d strides takes %d inputs (%s, then the transform); the "
                      "config has %u",
                  formats[fmt], m.ultra ? 0 : ns, m.n_in,
                  m.ultra ? "scores, boxes" : "probabilities, boxes, landmarks per stride", ni);
  for (int i = 0; i < m.n_in; i++) {
    if ((st = vb_check_io(&p, true, (uint32_t)i, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, -1, NULL, &io)))
      return st;
    m.in_names[i] = io.name;
  }
  if (no < 2 || no > 3 || (m.ultra && no != 2))
    return vp_err(&p, "outputs are boxes, scores%s", m.ultra ? " (ultraface has no landmarks)"
                                                             : " and optionally landmarks");
  const int64_t b4[] = {-1, 4}, s1[] = {-1}, l10[] = {-1, 10};
  if ((st = vb_check_io(&p, false, 0, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 2, b4, &io))) return st;
  m.out_boxes = io.name;
  if ((st = vb_check_io(&p, false, 1, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 1, s1, &io))) return st;
  m.out_scores = io.name;
  if (no == 3) {
    if ((st = vb_check_io(&p, false, 2, CINFER_TYPE_FP32, CINFER_TYPE_INVALID, 2, l10, &io))) return st;
    m.out_lmk = io.name;
  }
  det_model *pm = malloc(sizeof *pm);
  if (!pm) return cinfer_status_oom(NULL);
  *pm = m;
  *model = pm;
  return NULL;
}

static void det_unload(void *model) { free(model); }

static cinfer_status *det_instance(void *model, const cinfer_instance_info *info, void **inst) {
  (void)info;
  *inst = model;
  return NULL;
}

static void det_instance_destroy(void *inst) { (void)inst; }

static const cinfer_tensor *find(const cinfer_batch *b, const char *name) {
  for (uint32_t i = 0; i < b->n_inputs; i++)
    if (!strcmp(b->inputs[i].name, name)) return &b->inputs[i];
  return NULL;
}

/* A map [1, C, H, W] or [C, H, W] with C = want_c: *H, *W. */
static cinfer_status *map_dims(const cinfer_tensor *t, int64_t want_c, int *H, int *W) {
  int off = t->ndim == 4 ? 1 : 0;
  if ((t->ndim != 3 && t->ndim != 4) || (off && t->shape[0] != 1) || t->shape[off] != want_c ||
      t->shape[off + 1] < 1 || t->shape[off + 2] < 1 || t->shape[off + 1] > 65536 ||
      t->shape[off + 2] > 65536)
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be [1, %lld, H, W]", t->name,
                             (long long)want_c);
  *H = (int)t->shape[off + 1], *W = (int)t->shape[off + 2];
  return NULL;
}

static cinfer_status *decode_all(const det_model *m, const cinfer_batch *b, vis_det **dets,
                                 size_t *n, const float **xf) {
  const cinfer_tensor *t[3 * DET_MAX_STRIDES + 1];
  for (int i = 0; i < m->n_in; i++) {
    if (!(t[i] = find(b, m->in_names[i])))
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is missing", m->in_names[i]);
    cinfer_status *st = cinfer_tensor_check(t[i]);
    if (st) return st;
    if (t[i]->dtype != CINFER_TYPE_FP32)
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be FP32", t[i]->name);
  }
  const cinfer_tensor *tx = t[m->n_in - 1];
  if (cinfer_shape_elements(tx->shape, tx->ndim) != 6)
    return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' (the transform) must have 6 elements",
                             tx->name);
  *xf = tx->data;
  for (int i = 0; i < 6; i++)
    if (!isfinite((*xf)[i]) || (i < 2 && !((*xf)[i] > 0)) || (i >= 4 && !((*xf)[i] >= 1)))
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s': transform value %d (%g) is out of "
                               "range", tx->name, i, (*xf)[i]);
  size_t cap = 0;
  *n = 0;
  if (m->ultra) {
    const cinfer_tensor *ts = t[0], *tb = t[1];
    int64_t k = ts->ndim >= 2 ? ts->shape[ts->ndim - 2] : -1;
    if (ts->ndim < 2 || ts->shape[ts->ndim - 1] != 2 || cinfer_shape_elements(ts->shape, ts->ndim) != 2 * k)
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be [1, K, 2]", ts->name);
    if (cinfer_shape_elements(tb->shape, tb->ndim) != 4 * k || tb->shape[tb->ndim - 1] != 4)
      return cinfer_status_new(CINFER_INVALID_ARG, "input '%s' must be [1, %lld, 4]", tb->name, (long long)k);
    const float *sc = ts->data, *bx = tb->data;
    for (int64_t i = 0; i < k; i++) cap += sc[2 * i + 1] >= m->thresh;
    if (!(*dets = malloc((cap ? cap : 1) * sizeof **dets))) return cinfer_status_oom("detections");
    for (int64_t i = 0; i < k; i++) {
      if (!(sc[2 * i + 1] >= m->thresh)) continue;
      vis_det *d = &(*dets)[(*n)++];
      d->box[0] = bx[4 * i] * m->in_w, d->box[1] = bx[4 * i + 1] * m->in_h;
      d->box[2] = bx[4 * i + 2] * m->in_w, d->box[3] = bx[4 * i + 3] * m->in_h;
      d->score = sc[2 * i + 1];
      memset(d->lmk, 0, sizeof d->lmk);
    }
    return NULL;
  }
  int H[DET_MAX_STRIDES], W[DET_MAX_STRIDES];
  for (int s = 0; s < m->n_strides; s++) {
    int h2 = 0, w2 = 0;
    cinfer_status *st;
    if ((st = map_dims(t[3 * s], 2 * m->A, &H[s], &W[s])) ||
        (st = map_dims(t[3 * s + 1], 4 * m->A, &h2, &w2)) ||
        (!st && (h2 != H[s] || w2 != W[s]) &&
         (st = cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is %dx%d but '%s' is %dx%d",
                                 t[3 * s + 1]->name, w2, h2, t[3 * s]->name, W[s], H[s]))) ||
        (st = map_dims(t[3 * s + 2], 10 * m->A, &h2, &w2)) ||
        (!st && (h2 != H[s] || w2 != W[s]) &&
         (st = cinfer_status_new(CINFER_INVALID_ARG, "input '%s' is %dx%d but '%s' is %dx%d",
                                 t[3 * s + 2]->name, w2, h2, t[3 * s]->name, W[s], H[s]))))
      return st;
    const float *cls = t[3 * s]->data;
    size_t plane = (size_t)H[s] * W[s];
    for (size_t i = plane * m->A; i < plane * 2 * m->A; i++) cap += cls[i] >= m->thresh;
  }
  if (!(*dets = malloc((cap ? cap : 1) * sizeof **dets))) return cinfer_status_oom("detections");
  for (int s = 0; s < m->n_strides; s++)
    vis_retina_decode(t[3 * s]->data, t[3 * s + 1]->data, t[3 * s + 2]->data, m->A, H[s], W[s],
                      m->strides[s], m->sizes + s * m->A, m->var_c, m->var_s, m->var_l, m->thresh,
                      *dets, cap, n);
  return NULL;
}

static cinfer_status *det_execute(void *instance, cinfer_batch *b) {
  const det_model *m = instance;
  vis_det *dets = NULL;
  size_t n = 0;
  const float *xf = NULL;
  cinfer_status *st = decode_all(m, b, &dets, &n, &xf);
  if (st) {
    free(dets);
    return cinfer_status_prefix(st, "detection_postprocess model '%s'", m->model_name);
  }
  n = vis_nms(dets, n, (size_t)m->top_k, m->iou, (size_t)m->max_det);
  /* Back to the original image: (p - pad) / scale, boxes clipped to it. */
  float sx = xf[0], sy = xf[1], px = xf[2], py = xf[3], W = xf[4], H = xf[5];
  for (size_t i = 0; i < n; i++) {
    float *bx = dets[i].box;
    bx[0] = fminf(fmaxf((bx[0] - px) / sx, 0), W), bx[2] = fminf(fmaxf((bx[2] - px) / sx, 0), W);
    bx[1] = fminf(fmaxf((bx[1] - py) / sy, 0), H), bx[3] = fminf(fmaxf((bx[3] - py) / sy, 0), H);
    for (int k = 0; k < 5; k++) {
      dets[i].lmk[2 * k] = (dets[i].lmk[2 * k] - px) / sx;
      dets[i].lmk[2 * k + 1] = (dets[i].lmk[2 * k + 1] - py) / sy;
    }
  }
  float *ob = NULL, *os = NULL, *ol = NULL;
  int64_t sb[2] = {(int64_t)n, 4}, ss[1] = {(int64_t)n}, sl[2] = {(int64_t)n, 10};
  if ((st = cinfer_batch_output(b, m->out_boxes, CINFER_TYPE_FP32, 2, sb, n * 4 * sizeof(float), (void **)&ob)) ||
      (st = cinfer_batch_output(b, m->out_scores, CINFER_TYPE_FP32, 1, ss, n * sizeof(float), (void **)&os)) ||
      (m->out_lmk && cinfer_batch_output_requested(b, m->out_lmk) &&
       (st = cinfer_batch_output(b, m->out_lmk, CINFER_TYPE_FP32, 2, sl, n * 10 * sizeof(float), (void **)&ol)))) {
    free(dets);
    return st;
  }
  for (size_t i = 0; i < n; i++) {
    memcpy(ob + 4 * i, dets[i].box, sizeof dets[i].box);
    os[i] = dets[i].score;
    if (ol) memcpy(ol + 10 * i, dets[i].lmk, sizeof dets[i].lmk);
  }
  free(dets);
  return NULL;
}

const cinfer_backend_iface cinfer_detection_postprocess_backend = {
    .abi_major = CINFER_BACKEND_ABI_MAJOR,
    .abi_minor = CINFER_BACKEND_ABI_MINOR,
    .name = "detection_postprocess",
    .model_load = det_load,
    .model_unload = det_unload,
    .instance_create = det_instance,
    .instance_destroy = det_instance_destroy,
    .execute = det_execute,
};
