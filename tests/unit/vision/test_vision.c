/* test_vision.c: the image kernels of src/backends/vision against their scalar references
 * and against values worked out by hand: decoding (PNG, JPEG, and every way an image can be
 * bad), resize (fast against reference on random images, rectangles, layouts), letterbox
 * placement, affine warp and similarity, RetinaFace decoding, NMS, SSR-Net merge, softmax,
 * L2 normalisation. Images are encoded in the test with libpng and libjpeg. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>
#include <jpeglib.h>
#include <png.h>

#include "backends/vision/vision.h"

static uint32_t rng = 12345;
static uint32_t rnd(void) {
  rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
  return rng;
}

static uint8_t *random_image(int w, int h) {
  uint8_t *p = malloc((size_t)w * h * 3);
  for (size_t i = 0; i < (size_t)w * h * 3; i++) p[i] = (uint8_t)rnd();
  return p;
}

/* A smooth image (JPEG keeps it almost exactly). */
static uint8_t *smooth_image(int w, int h) {
  uint8_t *p = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      p[(y * w + x) * 3 + 0] = (uint8_t)(x * 255 / (w - 1));
      p[(y * w + x) * 3 + 1] = (uint8_t)(y * 255 / (h - 1));
      p[(y * w + x) * 3 + 2] = 128;
    }
  return p;
}

static uint8_t *png_encode(const uint8_t *px, int w, int h, png_uint_32 format, size_t *n) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w, im.height = (png_uint_32)h, im.format = format;
  png_alloc_size_t size = 0;
  assert_true(png_image_write_to_memory(&im, NULL, &size, 0, px, 0, NULL));
  uint8_t *out = malloc(size);
  assert_true(png_image_write_to_memory(&im, out, &size, 0, px, 0, NULL));
  *n = size;
  return out;
}

static uint8_t *jpeg_encode(const uint8_t *px, int w, int h, int comps, size_t *n) {
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr em;
  ci.err = jpeg_std_error(&em);
  jpeg_create_compress(&ci);
  unsigned char *buf = NULL;
  unsigned long size = 0;
  jpeg_mem_dest(&ci, &buf, &size);
  ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h;
  ci.input_components = comps;
  ci.in_color_space = comps == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, 100, TRUE);
  jpeg_start_compress(&ci, TRUE);
  while (ci.next_scanline < ci.image_height) {
    JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * comps);
    jpeg_write_scanlines(&ci, &row, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  uint8_t *out = malloc(size);
  memcpy(out, buf, size);
  free(buf);
  *n = size;
  return out;
}

static void expect_invalid(cinfer_status *st, const char *needle) {
  assert_non_null(st);
  assert_int_equal(cinfer_status_code(st), CINFER_INVALID_ARG);
  if (needle && !strstr(cinfer_status_message(st), needle)) {
    fprintf(stderr, "message '%s' lacks '%s'\n", cinfer_status_message(st), needle);
    fail();
  }
  cinfer_status_free(st);
}

static void test_decode_png_exact(void **s) {
  (void)s;
  int w = 37, h = 23;
  uint8_t *px = random_image(w, h);
  size_t n;
  uint8_t *png = png_encode(px, w, h, PNG_FORMAT_RGB, &n);
  uint8_t *rgb;
  int ow, oh;
  assert_null(vis_decode(png, n, 1 << 20, &rgb, &ow, &oh));
  assert_int_equal(ow, w);
  assert_int_equal(oh, h);
  assert_memory_equal(rgb, px, (size_t)w * h * 3);
  free(rgb), free(png), free(px);
}

static void test_decode_png_grey_and_alpha(void **s) {
  (void)s;
  uint8_t grey[6] = {0, 50, 100, 150, 200, 255};
  size_t n;
  uint8_t *png = png_encode(grey, 3, 2, PNG_FORMAT_GRAY, &n);
  uint8_t *rgb;
  int w, h;
  assert_null(vis_decode(png, n, 100, &rgb, &w, &h));
  for (int i = 0; i < 6; i++)
    for (int c = 0; c < 3; c++) assert_int_equal(rgb[i * 3 + c], grey[i]);
  free(rgb), free(png);
  /* RGBA, fully opaque: the colour comes through unchanged. */
  uint8_t rgba[8] = {10, 20, 30, 255, 40, 50, 60, 255};
  png = png_encode(rgba, 2, 1, PNG_FORMAT_RGBA, &n);
  assert_null(vis_decode(png, n, 100, &rgb, &w, &h));
  const uint8_t want[6] = {10, 20, 30, 40, 50, 60};
  assert_memory_equal(rgb, want, 6);
  free(rgb), free(png);
}

static void test_decode_jpeg(void **s) {
  (void)s;
  int w = 64, h = 48;
  uint8_t *px = smooth_image(w, h);
  size_t n;
  uint8_t *jpg = jpeg_encode(px, w, h, 3, &n);
  uint8_t *rgb;
  int ow, oh;
  assert_null(vis_decode(jpg, n, 1 << 20, &rgb, &ow, &oh));
  assert_int_equal(ow, w);
  assert_int_equal(oh, h);
  int worst = 0;
  for (size_t i = 0; i < (size_t)w * h * 3; i++) {
    int d = abs((int)rgb[i] - (int)px[i]);
    if (d > worst) worst = d;
  }
  assert_true(worst <= 8); /* quality 100 with 4:2:0 chroma */
  free(rgb), free(jpg);
  /* A greyscale JPEG becomes RGB with equal channels. */
  uint8_t g[16 * 8];
  for (int i = 0; i < 128; i++) g[i] = (uint8_t)(i * 2);
  jpg = jpeg_encode(g, 16, 8, 1, &n);
  assert_null(vis_decode(jpg, n, 1 << 20, &rgb, &ow, &oh));
  for (int i = 0; i < 128; i++) {
    assert_int_equal(rgb[3 * i], rgb[3 * i + 1]);
    assert_int_equal(rgb[3 * i], rgb[3 * i + 2]);
  }
  free(rgb), free(jpg), free(px);
}

static void test_decode_bad(void **s) {
  (void)s;
  int w = 40, h = 30;
  uint8_t *px = smooth_image(w, h), *rgb = (uint8_t *)"untouched";
  int ow, oh;
  size_t n;
  expect_invalid(vis_decode(NULL, 0, 100, &rgb, &ow, &oh), "empty");
  assert_null(rgb); /* cleared on every failure */
  expect_invalid(vis_decode((const uint8_t *)"GIF89a......", 12, 100, &rgb, &ow, &oh), "neither JPEG nor PNG");
  uint8_t *png = png_encode(px, w, h, PNG_FORMAT_RGB, &n);
  /* Every truncation of the PNG that loses pixel data fails cleanly (the last 12 bytes are
   * the IEND chunk, after the last pixel: without it the image is still whole). */
  for (size_t cut = 1; cut < n - 12; cut++) {
    cinfer_status *st = vis_decode(png, cut, 1 << 20, &rgb, &ow, &oh);
    expect_invalid(st, NULL);
    assert_null(rgb);
  }
  /* Over the pixel limit: refused from the header, naming the parameter. */
  expect_invalid(vis_decode(png, n, (uint64_t)w * h - 1, &rgb, &ow, &oh), "max_pixels");
  assert_null(vis_decode(png, n, (uint64_t)w * h, &rgb, &ow, &oh));
  free(rgb);
  /* A flipped byte in the image data: CRC or zlib error. */
  png[n / 2] ^= 0x55;
  expect_invalid(vis_decode(png, n, 1 << 20, &rgb, &ow, &oh), "PNG");
  free(png);
  uint8_t *jpg = jpeg_encode(px, w, h, 3, &n);
  for (size_t cut = 3; cut < n; cut++) {
    expect_invalid(vis_decode(jpg, cut, 1 << 20, &rgb, &ow, &oh), "JPEG");
    assert_null(rgb);
  }
  expect_invalid(vis_decode(jpg, n, 100, &rgb, &ow, &oh), "max_pixels");
  /* Garbage after a valid JPEG header. */
  for (size_t i = n / 3; i < n - 2; i++) jpg[i] = (uint8_t)rnd();
  cinfer_status *st = vis_decode(jpg, n, 1 << 20, &rgb, &ow, &oh);
  if (st) expect_invalid(st, "JPEG");
  else free(rgb); /* random entropy data can decode; it must not crash or leak */
  free(jpg), free(px);
}

static void test_probe(void **s) {
  (void)s;
  uint8_t *px = smooth_image(20, 10);
  size_t n;
  uint8_t *png = png_encode(px, 20, 10, PNG_FORMAT_RGB, &n);
  int w, h;
  assert_null(vis_probe(png, n, &w, &h));
  assert_int_equal(w, 20);
  assert_int_equal(h, 10);
  free(png), free(px);
}

static void compare_resize(int sw, int sh, vis_rect sr, int dw, int dh, vis_rect dr, bool bgr, bool nchw) {
  uint8_t *src = random_image(sw, sh);
  float mean[3] = {10, 20, 30}, sd[3] = {2, 3, 4};
  vis_norm n;
  vis_norm_make(&n, 1.5f, mean, sd, bgr, nchw);
  size_t sz = (size_t)dw * dh * 3;
  float *a = malloc(sz * sizeof *a), *b = malloc(sz * sizeof *b);
  for (size_t i = 0; i < sz; i++) a[i] = b[i] = -777.0f;
  vis_resize_ref(src, sw, sh, sr, a, dw, dh, dr, &n);
  vis_resize(src, sw, sh, sr, b, dw, dh, dr, &n);
  for (size_t i = 0; i < sz; i++) {
    if (a[i] != b[i]) { /* the same float operations in the same order: the same bits */
      fprintf(stderr, "resize %dx%d [%d,%d,%d,%d] -> %dx%d [%d,%d,%d,%d]: index %zu ref %g fast %g\n",
              sw, sh, sr.x, sr.y, sr.w, sr.h, dw, dh, dr.x, dr.y, dr.w, dr.h, i, a[i], b[i]);
      fail();
    }
  }
  free(a), free(b), free(src);
}

static void test_resize_fast_matches_ref(void **s) {
  (void)s;
  for (int it = 0; it < 300; it++) {
    int sw = 1 + (int)(rnd() % 90), sh = 1 + (int)(rnd() % 90);
    int dw = 1 + (int)(rnd() % 90), dh = 1 + (int)(rnd() % 90);
    vis_rect sr;
    sr.x = (int)(rnd() % (unsigned)sw), sr.y = (int)(rnd() % (unsigned)sh);
    sr.w = 1 + (int)(rnd() % (unsigned)(sw - sr.x)), sr.h = 1 + (int)(rnd() % (unsigned)(sh - sr.y));
    vis_rect dr;
    dr.x = (int)(rnd() % (unsigned)dw), dr.y = (int)(rnd() % (unsigned)dh);
    dr.w = 1 + (int)(rnd() % (unsigned)(dw - dr.x)), dr.h = 1 + (int)(rnd() % (unsigned)(dh - dr.y));
    compare_resize(sw, sh, sr, dw, dh, dr, rnd() & 1, rnd() & 1);
  }
  /* The sizes of the pipeline: 512x512 -> 640x640, 512x512 -> 320x240 (UltraFace),
   * 1280x720 letterboxed, a face crop. */
  compare_resize(512, 512, (vis_rect){0, 0, 512, 512}, 640, 640, (vis_rect){0, 0, 640, 640}, false, true);
  compare_resize(512, 512, (vis_rect){0, 0, 512, 512}, 320, 240, (vis_rect){0, 0, 320, 240}, false, true);
  compare_resize(512, 512, (vis_rect){0, 0, 512, 512}, 320, 240, (vis_rect){0, 0, 320, 240}, true, false);
  compare_resize(1280, 720, (vis_rect){0, 0, 1280, 720}, 640, 640, (vis_rect){0, 140, 640, 360}, true, true);
  compare_resize(512, 512, (vis_rect){177, 40, 120, 160}, 64, 64, (vis_rect){0, 0, 64, 64}, false, false);
}

static void test_resize_values(void **s) {
  (void)s;
  /* Same size: the pixels themselves. */
  uint8_t *src = random_image(7, 5);
  float mean[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  vis_norm n;
  vis_norm_make(&n, 1, mean, one, false, false);
  float out[7 * 5 * 3];
  vis_resize(src, 7, 5, (vis_rect){0, 0, 7, 5}, out, 7, 5, (vis_rect){0, 0, 7, 5}, &n);
  for (int i = 0; i < 105; i++) assert_float_equal(out[i], src[i], 0);
  /* 2x1 -> 4x1, half-pixel centres: 0, 64 -> 0, 16, 48, 64 (edges replicate). */
  uint8_t two[6] = {0, 0, 0, 64, 64, 64};
  float o4[12];
  vis_resize(two, 2, 1, (vis_rect){0, 0, 2, 1}, o4, 4, 1, (vis_rect){0, 0, 4, 1}, &n);
  const float want[4] = {0, 16, 48, 64};
  for (int i = 0; i < 4; i++) assert_float_equal(o4[3 * i], want[i], 1e-5);
  /* Normalisation, BGR and planes: (v * scale - mean) / std. */
  uint8_t px[3] = {10, 20, 30};
  float m3[3] = {1, 2, 3}, s3[3] = {2, 4, 8}, o3[3];
  vis_norm_make(&n, 2, m3, s3, true, true);
  vis_resize(px, 1, 1, (vis_rect){0, 0, 1, 1}, o3, 1, 1, (vis_rect){0, 0, 1, 1}, &n);
  assert_float_equal(o3[0], (30 * 2 - 1) / 2.0, 1e-5);
  assert_float_equal(o3[1], (20 * 2 - 2) / 4.0, 1e-5);
  assert_float_equal(o3[2], (10 * 2 - 3) / 8.0, 1e-5);
  free(src);
}

static void test_placement(void **s) {
  (void)s;
  vis_place p = vis_placement(512, 256, 640, 640, true);
  assert_int_equal(p.r.x, 0);
  assert_int_equal(p.r.y, 160);
  assert_int_equal(p.r.w, 640);
  assert_int_equal(p.r.h, 320);
  assert_float_equal(p.scale_x, 1.25, 1e-6);
  assert_float_equal(p.scale_y, 1.25, 1e-6);
  p = vis_placement(512, 512, 320, 240, false);
  assert_int_equal(p.r.w, 320);
  assert_int_equal(p.r.h, 240);
  assert_float_equal(p.scale_x, 0.625, 1e-6);
  assert_float_equal(p.scale_y, 240.0 / 512, 1e-6);
  p = vis_placement(100, 300, 320, 240, true); /* tall image: pillarbox */
  assert_int_equal(p.r.h, 240);
  assert_int_equal(p.r.w, 80);
  assert_int_equal(p.r.x, 120);
}

static void test_similarity_and_warp(void **s) {
  (void)s;
  double m[6], inv[6];
  assert_true(vis_similarity(vis_arcface_template, vis_arcface_template, 5, m));
  const double id[6] = {1, 0, 0, 0, 1, 0};
  for (int i = 0; i < 6; i++) assert_float_equal(m[i], id[i], 1e-9);
  /* Points rotated by 30 degrees, scaled by 2 and moved: the transform comes back. */
  double a = 2 * cos(M_PI / 6), b = 2 * sin(M_PI / 6);
  float from[10], to[10];
  for (int k = 0; k < 5; k++) {
    from[2 * k] = vis_arcface_template[2 * k], from[2 * k + 1] = vis_arcface_template[2 * k + 1];
    to[2 * k] = (float)(a * from[2 * k] - b * from[2 * k + 1] + 7);
    to[2 * k + 1] = (float)(b * from[2 * k] + a * from[2 * k + 1] - 3);
  }
  assert_true(vis_similarity(from, to, 5, m));
  assert_float_equal(m[0], a, 1e-4);
  assert_float_equal(m[1], -b, 1e-4);
  assert_float_equal(m[3], b, 1e-4);
  assert_float_equal(m[2], 7, 1e-3);
  assert_float_equal(m[5], -3, 1e-3);
  assert_true(vis_affine_invert(m, inv));
  double x = 10, y = 20, fx = m[0] * x + m[1] * y + m[2], fy = m[3] * x + m[4] * y + m[5];
  assert_float_equal(inv[0] * fx + inv[1] * fy + inv[2], x, 1e-6);
  assert_float_equal(inv[3] * fx + inv[4] * fy + inv[5], y, 1e-6);
  /* Degenerate: all points equal. */
  float same[10] = {5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
  assert_false(vis_similarity(same, to, 5, m));
  /* Warp by the identity copies; by a shift of one pixel moves, with the border outside. */
  uint8_t *src = random_image(9, 6);
  float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1}, out[9 * 6 * 3];
  vis_norm n;
  vis_norm_make(&n, 1, zero, one, false, false);
  vis_warp_affine(src, 9, 6, id, out, 9, 6, &n, 0);
  for (int i = 0; i < 9 * 6 * 3; i++) assert_float_equal(out[i], src[i], 0);
  const double shift[6] = {1, 0, 1, 0, 1, 0}; /* dst(x) = src(x + 1) */
  vis_warp_affine(src, 9, 6, shift, out, 9, 6, &n, 77);
  for (int yy = 0; yy < 6; yy++)
    for (int xx = 0; xx < 9; xx++)
      for (int c = 0; c < 3; c++)
        assert_float_equal(out[(yy * 9 + xx) * 3 + c], xx < 8 ? src[(yy * 9 + xx + 1) * 3 + c] : 77, 0);
  free(src);
}

static void test_retina_decode(void **s) {
  (void)s;
  enum { A = 2, H = 3, W = 4 };
  float cls[2 * A * H * W] = {0}, bbox[4 * A * H * W] = {0}, lmk[10 * A * H * W] = {0};
  size_t plane = H * W, cell = 1 * W + 2; /* y = 1, x = 2 */
  int a = 1;
  cls[(A + a) * plane + cell] = 0.9f;
  cls[(A + 0) * plane + 0] = 0.2f; /* below the threshold */
  bbox[(4 * a + 0) * plane + cell] = 0.5f;          /* dx */
  bbox[(4 * a + 2) * plane + cell] = logf(2) / 0.5f; /* dw: exp(d * 0.5) = 2 */
  lmk[(10 * a + 3) * plane + cell] = 1.0f;          /* point 1, y */
  float sizes[2] = {32, 16};
  vis_det out[4];
  size_t n = 0;
  assert_true(vis_retina_decode(cls, bbox, lmk, A, H, W, 8, sizes, 1.0f, 0.5f, 0.2f, 0.5f, out, 4, &n));
  assert_int_equal(n, 1);
  float cx = 2 * 8 + 7.5f + 0.5f * 16, cy = 1 * 8 + 7.5f; /* anchor 1 has size 16 */
  assert_float_equal(out[0].score, 0.9, 1e-6);
  assert_float_equal(out[0].box[0], cx - 0.5 * (32 - 1), 1e-4);
  assert_float_equal(out[0].box[2], cx + 0.5 * (32 - 1), 1e-4);
  assert_float_equal(out[0].box[1], cy - 0.5 * (16 - 1), 1e-4);
  assert_float_equal(out[0].lmk[3], 1 * 8 + 7.5 + 1.0 * 16 * 0.2, 1e-4);
  assert_float_equal(out[0].lmk[0], 2 * 8 + 7.5, 1e-4);
  /* Capacity is respected. */
  n = 0;
  cls[(A + 0) * plane + 0] = 0.7f;
  assert_false(vis_retina_decode(cls, bbox, lmk, A, H, W, 8, sizes, 1, 1, 1, 0.5f, out, 1, &n));
  assert_int_equal(n, 1);
}

static void test_nms(void **s) {
  (void)s;
  vis_det d[5];
  memset(d, 0, sizeof d);
  const float boxes[5][4] = {{0, 0, 10, 10}, {1, 1, 11, 11}, {20, 20, 30, 30}, {0, 0, 10, 10}, {50, 50, 60, 60}};
  const float scores[5] = {0.8f, 0.9f, 0.7f, 0.8f, 0.6f};
  for (int i = 0; i < 5; i++) memcpy(d[i].box, boxes[i], sizeof boxes[i]), d[i].score = scores[i];
  size_t k = vis_nms(d, 5, 0, 0.4f, 100);
  assert_int_equal(k, 3);
  assert_float_equal(d[0].score, 0.9, 1e-6); /* best first; 0 and 3 overlap it (IoU 0.68) */
  assert_float_equal(d[1].score, 0.7, 1e-6);
  assert_float_equal(d[2].score, 0.6, 1e-6);
  for (int i = 0; i < 5; i++) memcpy(d[i].box, boxes[i], sizeof boxes[i]), d[i].score = scores[i];
  assert_int_equal(vis_nms(d, 5, 0, 0.4f, 2), 2);
  for (int i = 0; i < 5; i++) memcpy(d[i].box, boxes[i], sizeof boxes[i]), d[i].score = scores[i];
  assert_int_equal(vis_nms(d, 5, 2, 0.4f, 100), 1); /* top_k 2: the two overlapping ones */
  for (int i = 0; i < 5; i++) memcpy(d[i].box, boxes[i], sizeof boxes[i]), d[i].score = scores[i];
  assert_int_equal(vis_nms(d, 5, 0, 1.0f, 100), 5); /* nothing suppressed at IoU 1 */
  float a[4] = {0, 0, 2, 2}, b[4] = {1, 1, 3, 3};
  assert_float_equal(vis_iou(a, b), 1.0 / 7, 1e-6);
  assert_int_equal(vis_nms(d, 0, 0, 0.4f, 10), 0);
}

static void test_attributes(void **s) {
  (void)s;
  float p1[3] = {0, 0, 1}, p2[3] = {0, 0, 1}, p3[3] = {0, 0, 1}, z[3] = {0, 0, 0};
  const float *prob[3] = {p1, p2, p3}, *off[3] = {z, z, z};
  float delta[3] = {0, 0, 0};
  int sn[3] = {3, 3, 3};
  assert_float_equal(vis_ssrnet_merge(prob, off, delta, sn, 3, 1, 1), 2.0 / 3 + 2.0 / 9 + 2.0 / 27, 1e-9);
  float o1[3] = {0.5f, 0, 0};
  const float *off2[3] = {o1, z, z};
  p1[0] = 1, p1[2] = 0; /* stage 1 picks bin 0 with offset 0.5 */
  delta[0] = 1; /* stage 1 denominator 3 * 2 */
  assert_float_equal(vis_ssrnet_merge(prob, off2, delta, sn, 3, 1, 1), 0.5 / 6 + 2.0 / 18 + 2.0 / 54, 1e-6);
  float v[4] = {1, 3, 2, 3};
  assert_int_equal(vis_softmax_argmax(v, 4), 1);
  assert_float_equal(v[0] + v[1] + v[2] + v[3], 1, 1e-6);
  assert_float_equal(v[1], v[3], 1e-7);
  float e[3] = {3, 0, 4}, out[3];
  vis_l2_normalize(e, out, 3);
  assert_float_equal(out[0], 0.6, 1e-6);
  assert_float_equal(out[2], 0.8, 1e-6);
  float zero[2] = {0, 0};
  vis_l2_normalize(zero, out, 2);
  assert_float_equal(out[0], 0, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_png_exact),
      cmocka_unit_test(test_decode_png_grey_and_alpha),
      cmocka_unit_test(test_decode_jpeg),
      cmocka_unit_test(test_decode_bad),
      cmocka_unit_test(test_probe),
      cmocka_unit_test(test_resize_fast_matches_ref),
      cmocka_unit_test(test_resize_values),
      cmocka_unit_test(test_placement),
      cmocka_unit_test(test_similarity_and_warp),
      cmocka_unit_test(test_retina_decode),
      cmocka_unit_test(test_nms),
      cmocka_unit_test(test_attributes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
