/* vision.h: the image kernels and helpers behind the built-in processing backends
 * (image_decode, image_preprocess, detection_postprocess, face_crop, attribute_decode).
 *
 * Everything here is pure: no server, no threads, no global state. Each hot kernel has a
 * plain scalar reference (`*_ref`) written for clarity, and the backends call the fast
 * version; tests/unit/vision compares the two on random inputs.
 *
 * Pixels are 8-bit RGB, HWC, rows packed (stride = 3 * width). Tensors the kernels write
 * are FP32, NCHW (planes) or NHWC (interleaved). Coordinates are continuous pixel
 * coordinates: pixel (x, y) covers [x, x+1) x [y, y+1), its centre is (x + 0.5, y + 0.5).
 *
 * Resampling is bilinear with half-pixel centres and edge replication inside the source
 * rectangle, the mapping of OpenCV's INTER_LINEAR (without its fixed-point rounding) and of
 * ONNX Resize(mode=linear, coordinate_transformation_mode=half_pixel). */
#ifndef CINFER_VISION_H
#define CINFER_VISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

/* ---- decoding (decode.c) ---------------------------------------------------------------- */

/* Decodes a whole JPEG (libjpeg-turbo) or PNG (libpng) held in memory to RGB. Grey, palette,
 * 16-bit and alpha PNGs are converted (alpha dropped); CMYK JPEGs are refused. Every
 * failure is CINFER_INVALID_ARG with the library's message: an unknown format, a corrupt or
 * truncated stream (libjpeg's warnings, such as "premature end of data", count as errors:
 * a half-grey frame is not a frame), and an image of more than max_pixels pixels (refused
 * from the header, before any pixel memory is taken). *rgb is malloc'd (caller frees). */
cinfer_status *vis_decode(const uint8_t *data, size_t n, uint64_t max_pixels, uint8_t **rgb,
                          int *width, int *height);
/* Reads only the header: the format and size, for the same checks. */
cinfer_status *vis_probe(const uint8_t *data, size_t n, int *width, int *height);

/* ---- normalisation and layout ---------------------------------------------------------- */

typedef struct vis_norm {
  float mul[3], add[3]; /* out[c] = pixel[src_c] * mul[c] + add[c], c = output channel */
  bool bgr;             /* output channel c reads input channel 2 - c */
  bool nchw;            /* planes (N,C,H,W) rather than interleaved (N,H,W,C) */
} vis_norm;

/* mean/std/scale as a user writes them: out = (pixel * scale - mean[c]) / std[c]. */
void vis_norm_make(vis_norm *n, float scale, const float mean[3], const float std_[3], bool bgr,
                   bool nchw);
/* Fills a dw x dh canvas with the normalised value of the pixel (v, v, v). */
void vis_fill(float *dst, int dw, int dh, const vis_norm *n, float v);

/* ---- resize (resize.c) ------------------------------------------------------------------ */

/* A rectangle of whole pixels. */
typedef struct vis_rect {
  int x, y, w, h;
} vis_rect;

/* Resizes the source rectangle `src_r` of a sw x sh RGB image into the rectangle `dst_r`
 * of a dw x dh canvas (leaving the rest of the canvas alone), normalising. src_r must lie
 * inside the image and dst_r inside the canvas; both non-empty. The source is sampled as
 * if src_r were the whole image (edges replicate inside src_r): crop-then-resize. */
void vis_resize(const uint8_t *src, int sw, int sh, vis_rect src_r, float *dst, int dw, int dh,
                vis_rect dst_r, const vis_norm *n);
void vis_resize_ref(const uint8_t *src, int sw, int sh, vis_rect src_r, float *dst, int dw,
                    int dh, vis_rect dst_r, const vis_norm *n);

/* The letterbox (or stretch) placement of a sw x sh image in a dw x dh canvas.
 * scale_x/y: canvas pixels per source pixel; pad_x/y: offset of the image in the canvas.
 * Letterbox keeps the aspect ratio (scale = min of the two), centres the image (integer
 * offsets, the odd pixel at the right/bottom). A canvas point p maps back to the source at
 * (p - pad) / scale. */
typedef struct vis_place {
  vis_rect r;              /* where the image lands in the canvas */
  float scale_x, scale_y;  /* r.w / sw, r.h / sh */
} vis_place;
vis_place vis_placement(int sw, int sh, int dw, int dh, bool letterbox);

/* ---- affine warp (resize.c) ------------------------------------------------------------- */

/* dst(x, y) = bilinear sample of src at M * (x, y, 1) (integer pixel coordinates, as
 * OpenCV's warpAffine); a neighbour outside the image counts as the pixel (border, border,
 * border). m is row-major 2x3 mapping destination to source. */
void vis_warp_affine(const uint8_t *src, int sw, int sh, const double m[6], float *dst, int dw,
                     int dh, const vis_norm *n, float border);

/* The least-squares similarity transform (rotation, uniform scale, translation; no
 * reflection) taking the n points `from` (x, y pairs) onto `to`, as row-major 2x3.
 * False when the points are degenerate (all equal, or not finite). */
bool vis_similarity(const float *from, const float *to, int n, double m[6]);
/* Inverts a similarity (or any invertible affine) transform; false when singular. */
bool vis_affine_invert(const double m[6], double inv[6]);

/* The ArcFace 112x112 five-point template (left eye, right eye, nose, left and right
 * mouth corner), x, y pairs. */
extern const float vis_arcface_template[10];

/* ---- detection (detect.c) --------------------------------------------------------------- */

typedef struct vis_det {
  float box[4];  /* x1, y1, x2, y2 */
  float score;
  float lmk[10]; /* five points, x, y pairs (zero when the detector has none) */
} vis_det;

/* RetinaFace (InsightFace layout) at one stride: cls [2A, H, W] (A background planes,
 * then A face planes), bbox [4A, H, W], lmk [10A, H, W] (NULL: no landmarks); anchors of
 * side sizes[a] centred at (x * stride + (base - 1) / 2, ...) with base 16. Boxes:
 * centre += d * size * var_c, size *= exp(d * var_s), with InsightFace's "+1" widths.
 * Landmarks: centre + d * size * var_l. Appends the cells whose score >= thresh to out
 * (capacity cap; *n grows; returns false when cap would be exceeded). */
bool vis_retina_decode(const float *cls, const float *bbox, const float *lmk, int A, int H,
                       int W, int stride, const float *sizes, float var_c, float var_s,
                       float var_l, float thresh, vis_det *out, size_t cap, size_t *n);

/* Sorts dets by score (descending, ties by position, so the result is deterministic), keeps
 * the first top_k, then greedy NMS: a detection whose IoU with a kept one is above iou is
 * dropped; at most max_keep survive. Returns the number kept (in dets[0..]). */
size_t vis_nms(vis_det *dets, size_t n, size_t top_k, float iou, size_t max_keep);
float vis_iou(const float a[4], const float b[4]);

/* ---- attributes (attr.c) ---------------------------------------------------------------- */

/* SSR-Net's soft stagewise regression (Yang et al., IJCAI 2018), the merge step of the
 * reference implementations: sum over stages k of
 *   sum_i (i + lambda_local * offset_k[i]) * prob_k[i] / prod_{j<=k} (s_j * (1 + lambda_d * delta_j)).
 * The result is in [0, 1] times the range V the caller multiplies by. */
double vis_ssrnet_merge(const float *const prob[], const float *const offset[],
                        const float delta[], const int stage_num[], int stages,
                        float lambda_local, float lambda_d);
/* Softmax in place (max-subtracted), then returns the argmax. */
int vis_softmax_argmax(float *v, int n);
/* out = v / ||v||_2 (zero vector stays zero). */
void vis_l2_normalize(const float *v, float *out, int n);

#endif
