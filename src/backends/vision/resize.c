/* resize.c: bilinear resize into a normalised tensor (reference and fast), letterbox
 * placement, affine warp, and the similarity transform for face alignment.
 *
 * The fast resize computes, once per call, each output column's two source columns and
 * weight (a table), and per output row interpolates the two source rows horizontally into
 * planar float row buffers (one plane per channel), reusing them while consecutive output
 * rows read the same source rows (upscaling reads each source row pair many times). Each
 * source row is widened to float first, so the horizontal pass gathers floats, and the
 * vertical blend and normalisation run plane by plane over contiguous floats: both loops
 * vectorise. It performs the same float operations in the same order as the reference
 * (the build has -ffp-contract=off: no fused multiply-add in one and not the other), so
 * the two give the same bits; test_vision checks it. */
#include "backends/vision/vision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const float vis_arcface_template[10] = {38.2946f, 51.6963f, 73.5318f, 51.5014f, 56.0252f,
                                        71.7366f, 41.5493f, 92.3655f, 70.7299f, 92.2041f};

void vis_norm_make(vis_norm *n, float scale, const float mean[3], const float std_[3], bool bgr,
                   bool nchw) {
  for (int c = 0; c < 3; c++) {
    n->mul[c] = scale / std_[c];
    n->add[c] = -mean[c] / std_[c];
  }
  n->bgr = bgr;
  n->nchw = nchw;
}

static inline void put(float *dst, int dw, int dh, int x, int y, const vis_norm *n,
                       const float v[3]) {
  for (int c = 0; c < 3; c++) {
    float o = v[n->bgr ? 2 - c : c] * n->mul[c] + n->add[c];
    if (n->nchw) dst[((size_t)c * dh + y) * dw + x] = o;
    else dst[((size_t)y * dw + x) * 3 + c] = o;
  }
}

void vis_fill(float *dst, int dw, int dh, const vis_norm *n, float v) {
  size_t plane = (size_t)dw * dh;
  for (int c = 0; c < 3; c++) {
    float o = v * n->mul[c] + n->add[c];
    if (n->nchw)
      for (size_t i = 0; i < plane; i++) dst[c * plane + i] = o;
    else
      for (size_t i = 0; i < plane; i++) dst[i * 3 + c] = o;
  }
}

vis_place vis_placement(int sw, int sh, int dw, int dh, bool letterbox) {
  vis_place p;
  if (!letterbox) {
    p.r = (vis_rect){0, 0, dw, dh};
  } else {
    double s = fmin((double)dw / sw, (double)dh / sh);
    int w = (int)lround(sw * s), h = (int)lround(sh * s);
    if (w < 1) w = 1;
    if (h < 1) h = 1;
    if (w > dw) w = dw;
    if (h > dh) h = dh;
    p.r = (vis_rect){(dw - w) / 2, (dh - h) / 2, w, h};
  }
  p.scale_x = (float)p.r.w / (float)sw;
  p.scale_y = (float)p.r.h / (float)sh;
  return p;
}

/* Source coordinate of output index i: half-pixel centres, clamped to [0, n - 1]. */
static inline void src_coord(int i, float ratio, int n, int *i0, int *i1, float *w) {
  float f = ((float)i + 0.5f) * ratio - 0.5f;
  if (f < 0) f = 0;
  int a = (int)f;
  if (a > n - 1) a = n - 1;
  *i0 = a;
  *i1 = a + 1 < n ? a + 1 : n - 1;
  *w = f - (float)a;
  if (*w > 1) *w = 1;
}

void vis_resize_ref(const uint8_t *src, int sw, int sh, vis_rect sr, float *dst, int dw, int dh,
                    vis_rect dr, const vis_norm *n) {
  (void)sh;
  float rx = (float)sr.w / (float)dr.w, ry = (float)sr.h / (float)dr.h;
  for (int y = 0; y < dr.h; y++) {
    int y0, y1;
    float wy;
    src_coord(y, ry, sr.h, &y0, &y1, &wy);
    for (int x = 0; x < dr.w; x++) {
      int x0, x1;
      float wx;
      src_coord(x, rx, sr.w, &x0, &x1, &wx);
      float v[3];
      for (int c = 0; c < 3; c++) {
        const uint8_t *r0 = src + ((size_t)(sr.y + y0) * sw + sr.x) * 3;
        const uint8_t *r1 = src + ((size_t)(sr.y + y1) * sw + sr.x) * 3;
        float a = r0[x0 * 3 + c], b = r0[x1 * 3 + c], d = r1[x0 * 3 + c], e = r1[x1 * 3 + c];
        float top = a + (b - a) * wx, bot = d + (e - d) * wx;
        v[c] = top + (bot - top) * wy;
      }
      put(dst, dw, dh, dr.x + x, dr.y + y, n, v);
    }
  }
}

/* One source row interpolated horizontally at every output column, into three planes
 * (out, out + w, out + 2w). The row is first widened to float (exact for 0..255), so the
 * interpolation is a gather of floats the compiler can vectorise; the arithmetic is the
 * reference's, a + (b - a) * wx on the same float values. */
static void hrow(const uint8_t *row, int row_len, const int *xo, const float *xw, int w, float *wide,
                 float *out) {
  for (int i = 0; i < row_len; i++) wide[i] = (float)row[i];
  float *o0 = out, *o1 = out + w, *o2 = out + 2 * (size_t)w;
  const int *x0 = xo, *x1 = xo + w;
  for (int x = 0; x < w; x++) {
    int i0 = x0[x], i1 = x1[x];
    float wx = xw[x];
    float a0 = wide[i0], a1 = wide[i0 + 1], a2 = wide[i0 + 2];
    float b0 = wide[i1], b1 = wide[i1 + 1], b2 = wide[i1 + 2];
    o0[x] = a0 + (b0 - a0) * wx;
    o1[x] = a1 + (b1 - a1) * wx;
    o2[x] = a2 + (b2 - a2) * wx;
  }
}

/* The vertical blend of two planar rows, normalised, into one output plane row. */
static void vrow(const float *restrict t, const float *restrict b, float wy, float m, float a, int w,
                 float *restrict o) {
  for (int x = 0; x < w; x++) o[x] = (t[x] + (b[x] - t[x]) * wy) * m + a;
}

void vis_resize(const uint8_t *src, int sw, int sh, vis_rect sr, float *dst, int dw, int dh,
                vis_rect dr, const vis_norm *n) {
  int w = dr.w;
  /* One allocation: column table (2 ints + 1 float per column), two planar row buffers
   * (3 floats per column each), the widened source row (3 floats per source column), and
   * for NHWC one planar row of the result. */
  size_t row_len = (size_t)sr.w * 3;
  size_t bytes = (size_t)w * (2 * sizeof(int) + sizeof(float) + 9 * sizeof(float)) + row_len * sizeof(float);
  char *mem = malloc(bytes);
  if (!mem) { /* the reference needs no memory: same result, slower */
    vis_resize_ref(src, sw, sh, sr, dst, dw, dh, dr, n);
    return;
  }
  int *xo = (int *)mem;
  float *xw = (float *)(xo + 2 * (size_t)w);
  float *rowa = xw + w, *rowb = rowa + 3 * (size_t)w, *res = rowb + 3 * (size_t)w;
  float *wide = res + 3 * (size_t)w;
  float rx = (float)sr.w / (float)dr.w, ry = (float)sr.h / (float)dr.h;
  for (int x = 0; x < w; x++) {
    int x0, x1;
    src_coord(x, rx, sr.w, &x0, &x1, &xw[x]);
    xo[x] = x0 * 3; /* offsets in the widened row, which starts at column sr.x */
    xo[w + x] = x1 * 3;
  }
  int ha = -1, hb = -1; /* source rows held in rowa, rowb */
  /* output channel c reads source channel ch[c] */
  int ch[3] = {n->bgr ? 2 : 0, 1, n->bgr ? 0 : 2};
  size_t plane = (size_t)dw * dh;
  for (int y = 0; y < dr.h; y++) {
    int y0, y1;
    float wy;
    src_coord(y, ry, sr.h, &y0, &y1, &wy);
    y0 += sr.y, y1 += sr.y;
    if (ha != y0) {
      if (hb == y0) { /* the previous lower row is this upper row */
        float *t = rowa;
        rowa = rowb, rowb = t;
        ha = y0, hb = -1;
      } else {
        hrow(src + ((size_t)y0 * sw + sr.x) * 3, (int)row_len, xo, xw, w, wide, rowa);
        ha = y0;
      }
    }
    if (hb != y1) {
      if (y1 == ha) memcpy(rowb, rowa, sizeof(float) * 3 * (size_t)w);
      else hrow(src + ((size_t)y1 * sw + sr.x) * 3, (int)row_len, xo, xw, w, wide, rowb);
      hb = y1;
    }
    int oy = dr.y + y;
    if (n->nchw) {
      for (int c = 0; c < 3; c++)
        vrow(rowa + (size_t)ch[c] * w, rowb + (size_t)ch[c] * w, wy, n->mul[c], n->add[c], w,
             dst + c * plane + (size_t)oy * dw + dr.x);
    } else {
      for (int c = 0; c < 3; c++)
        vrow(rowa + (size_t)ch[c] * w, rowb + (size_t)ch[c] * w, wy, n->mul[c], n->add[c], w,
             res + (size_t)c * w);
      float *p = dst + ((size_t)oy * dw + dr.x) * 3;
      for (int x = 0; x < w; x++) {
        p[3 * x + 0] = res[x];
        p[3 * x + 1] = res[w + x];
        p[3 * x + 2] = res[2 * (size_t)w + x];
      }
    }
  }
  free(mem);
}

void vis_warp_affine(const uint8_t *src, int sw, int sh, const double m[6], float *dst, int dw,
                     int dh, const vis_norm *n, float border) {
  for (int y = 0; y < dh; y++) {
    for (int x = 0; x < dw; x++) {
      double fx = m[0] * x + m[1] * y + m[2], fy = m[3] * x + m[4] * y + m[5];
      float v[3] = {border, border, border};
      if (fx > -1 && fy > -1 && fx < sw && fy < sh) {
        int x0 = (int)floor(fx), y0 = (int)floor(fy);
        float wx = (float)(fx - x0), wy = (float)(fy - y0);
        for (int c = 0; c < 3; c++) {
          float p[4];
          for (int k = 0; k < 4; k++) {
            int xx = x0 + (k & 1), yy = y0 + (k >> 1);
            p[k] = (xx >= 0 && yy >= 0 && xx < sw && yy < sh) ? src[((size_t)yy * sw + xx) * 3 + c]
                                                              : border;
          }
          float top = p[0] + (p[1] - p[0]) * wx, bot = p[2] + (p[3] - p[2]) * wx;
          v[c] = top + (bot - top) * wy;
        }
      }
      put(dst, dw, dh, x, y, n, v);
    }
  }
}

bool vis_similarity(const float *from, const float *to, int n, double m[6]) {
  double fx = 0, fy = 0, tx = 0, ty = 0;
  for (int i = 0; i < n; i++) {
    fx += from[2 * i], fy += from[2 * i + 1];
    tx += to[2 * i], ty += to[2 * i + 1];
  }
  fx /= n, fy /= n, tx /= n, ty /= n;
  double num_a = 0, num_b = 0, den = 0;
  for (int i = 0; i < n; i++) {
    double px = from[2 * i] - fx, py = from[2 * i + 1] - fy;
    double qx = to[2 * i] - tx, qy = to[2 * i + 1] - ty;
    num_a += px * qx + py * qy;
    num_b += px * qy - py * qx;
    den += px * px + py * py;
  }
  if (!(den > 1e-12) || !isfinite(den) || !isfinite(num_a) || !isfinite(num_b)) return false;
  double a = num_a / den, b = num_b / den;
  m[0] = a, m[1] = -b, m[2] = tx - (a * fx - b * fy);
  m[3] = b, m[4] = a, m[5] = ty - (b * fx + a * fy);
  return true;
}

bool vis_affine_invert(const double m[6], double inv[6]) {
  double det = m[0] * m[4] - m[1] * m[3];
  if (!(fabs(det) > 1e-12) || !isfinite(det)) return false;
  inv[0] = m[4] / det, inv[1] = -m[1] / det;
  inv[3] = -m[3] / det, inv[4] = m[0] / det;
  inv[2] = -(inv[0] * m[2] + inv[1] * m[5]);
  inv[5] = -(inv[3] * m[2] + inv[4] * m[5]);
  return true;
}
