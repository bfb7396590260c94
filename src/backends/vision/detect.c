/* detect.c: RetinaFace anchor decoding and greedy NMS.
 *
 * RetinaFace (InsightFace's mxnet layout, as mnet.25 exports it): per stride s a feature
 * map of H x W cells, A anchors per cell, square anchors of side sizes[a] centred at
 * (x * s + 7.5, y * s + 7.5) (InsightFace's base anchor [0, 0, 15, 15]). Channel layout:
 * cls [2A, H, W] (A background planes then A face planes, already softmaxed), bbox
 * [4A, H, W] (anchor a at channels 4a..4a+3: dx, dy, dw, dh), landmarks [10A, H, W]
 * (anchor a at 10a..10a+9). The candidate order is (y, x, a), InsightFace's. */
#include "backends/vision/vision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool vis_retina_decode(const float *cls, const float *bbox, const float *lmk, int A, int H,
                       int W, int stride, const float *sizes, float var_c, float var_s,
                       float var_l, float thresh, vis_det *out, size_t cap, size_t *n) {
  size_t plane = (size_t)H * W;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int a = 0; a < A; a++) {
        size_t cell = (size_t)y * W + x;
        float score = cls[(size_t)(A + a) * plane + cell];
        if (!(score >= thresh)) continue; /* also drops NaN */
        if (*n >= cap) return false;
        float size = sizes[a];
        float cx = (float)x * stride + 7.5f, cy = (float)y * stride + 7.5f;
        const float *d = bbox + (size_t)4 * a * plane + cell;
        float pcx = d[0] * size * var_c + cx, pcy = d[plane] * size * var_c + cy;
        float pw = expf(d[2 * plane] * var_s) * size, ph = expf(d[3 * plane] * var_s) * size;
        vis_det *o = &out[(*n)++];
        o->box[0] = pcx - 0.5f * (pw - 1.0f);
        o->box[1] = pcy - 0.5f * (ph - 1.0f);
        o->box[2] = pcx + 0.5f * (pw - 1.0f);
        o->box[3] = pcy + 0.5f * (ph - 1.0f);
        o->score = score;
        if (lmk) {
          const float *l = lmk + (size_t)10 * a * plane + cell;
          for (int k = 0; k < 5; k++) {
            o->lmk[2 * k] = cx + l[(size_t)(2 * k) * plane] * size * var_l;
            o->lmk[2 * k + 1] = cy + l[(size_t)(2 * k + 1) * plane] * size * var_l;
          }
        } else {
          memset(o->lmk, 0, sizeof o->lmk);
        }
      }
  return true;
}

float vis_iou(const float a[4], const float b[4]) {
  float iw = fminf(a[2], b[2]) - fmaxf(a[0], b[0]);
  float ih = fminf(a[3], b[3]) - fmaxf(a[1], b[1]);
  if (!(iw > 0) || !(ih > 0)) return 0;
  float inter = iw * ih;
  float ua = fmaxf(a[2] - a[0], 0) * fmaxf(a[3] - a[1], 0) +
             fmaxf(b[2] - b[0], 0) * fmaxf(b[3] - b[1], 0) - inter;
  return ua > 0 ? inter / ua : 0;
}

typedef struct ranked {
  float score;
  size_t index;
} ranked;

static int by_score(const void *pa, const void *pb) {
  const ranked *a = pa, *b = pb;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

size_t vis_nms(vis_det *dets, size_t n, size_t top_k, float iou, size_t max_keep) {
  if (n == 0) return 0;
  ranked *r = malloc(n * sizeof *r);
  vis_det *sorted = malloc(n * sizeof *sorted);
  if (!r || !sorted) { /* no memory for the sort: keep the single best, which is always right */
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
      if (dets[i].score > dets[best].score) best = i;
    dets[0] = dets[best];
    free(r), free(sorted);
    return max_keep ? 1 : 0;
  }
  for (size_t i = 0; i < n; i++) r[i] = (ranked){dets[i].score, i};
  qsort(r, n, sizeof *r, by_score);
  if (top_k && n > top_k) n = top_k;
  for (size_t i = 0; i < n; i++) sorted[i] = dets[r[i].index];
  size_t kept = 0;
  for (size_t i = 0; i < n && kept < max_keep; i++) {
    bool keep = true;
    for (size_t k = 0; k < kept && keep; k++)
      if (vis_iou(sorted[i].box, dets[k].box) > iou) keep = false;
    if (keep) dets[kept++] = sorted[i];
  }
  free(r), free(sorted);
  return kept;
}
