/* test_vision_oom.c: the vision kernels with every one of their allocations failed in turn
 * (tests/unit/core/torture.h): the decoder returns the out-of-memory status (500, never a
 * 400 that would blame the image) or the right pixels, never a leak (the ASan build checks);
 * the fast resize falls back to the reference with the same result; NMS still returns the
 * best detection. libpng's and libjpeg's own allocations are inside shared libraries and
 * are not failed here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <jpeglib.h>
#include <png.h>

#include "../core/torture.h"
#include "backends/vision/vision.h"

static uint8_t *make_png(int w, int h, size_t *n, uint8_t **px) {
  *px = __real_malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h * 3; i++) (*px)[i] = (uint8_t)(i * 7);
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w, im.height = (png_uint_32)h, im.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  assert_true(png_image_write_to_memory(&im, NULL, &size, 0, *px, 0, NULL));
  uint8_t *out = __real_malloc(size);
  assert_true(png_image_write_to_memory(&im, out, &size, 0, *px, 0, NULL));
  *n = size;
  return out;
}

static uint8_t *make_jpeg(int w, int h, size_t *n) {
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr em;
  ci.err = jpeg_std_error(&em);
  jpeg_create_compress(&ci);
  unsigned char *buf = NULL;
  unsigned long size = 0;
  jpeg_mem_dest(&ci, &buf, &size);
  ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h;
  ci.input_components = 3, ci.in_color_space = JCS_RGB;
  jpeg_set_defaults(&ci);
  jpeg_start_compress(&ci, TRUE);
  uint8_t row[3 * 64];
  for (int i = 0; i < 3 * w; i++) row[i] = (uint8_t)i;
  while (ci.next_scanline < ci.image_height) {
    JSAMPROW r = row;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  *n = size;
  return buf; /* malloc'd by libjpeg (not wrapped): free() it */
}

static void torture_decode(const uint8_t *data, size_t n, const uint8_t *want, int w, int h) {
  bool passed = false;
  for (long budget = 0; budget < 64 && !passed; budget++) {
    torture_budget = budget, torture_failures = 0, torture_armed = true;
    uint8_t *rgb = NULL;
    int ow, oh;
    cinfer_status *st = vis_decode(data, n, 1 << 20, &rgb, &ow, &oh);
    torture_armed = false;
    if (torture_failures == 0) {
      assert_null(st);
      assert_int_equal(ow, w);
      assert_int_equal(oh, h);
      if (want) assert_memory_equal(rgb, want, (size_t)w * h * 3);
      free(rgb);
      passed = true;
    } else if (st) {
      assert_int_equal(cinfer_status_code(st), CINFER_INTERNAL);
      assert_non_null(strstr(cinfer_status_message(st), "out of memory"));
      assert_null(rgb);
      cinfer_status_free(st);
    } else {
      free(rgb); /* a failure the code could route around */
    }
  }
  torture_budget = -1;
  assert_true(passed);
}

static void test_decode_oom(void **s) {
  (void)s;
  size_t n;
  uint8_t *px;
  uint8_t *png = make_png(23, 17, &n, &px);
  torture_decode(png, n, px, 23, 17);
  free(png), free(px);
  uint8_t *jpg = make_jpeg(40, 30, &n);
  torture_decode(jpg, n, NULL, 40, 30);
  free(jpg);
}

static void test_resize_oom(void **s) {
  (void)s;
  int sw = 50, sh = 40, dw = 31, dh = 67;
  uint8_t *src = __real_malloc((size_t)sw * sh * 3);
  for (int i = 0; i < sw * sh * 3; i++) src[i] = (uint8_t)(i * 13);
  float mean[3] = {1, 2, 3}, sd[3] = {3, 2, 1};
  vis_norm nm;
  vis_norm_make(&nm, 0.5f, mean, sd, true, true);
  float *a = __real_malloc(sizeof(float) * 3 * dw * dh), *b = __real_malloc(sizeof(float) * 3 * dw * dh);
  vis_rect sr = {3, 4, 40, 30}, dr = {0, 0, dw, dh};
  vis_resize(src, sw, sh, sr, a, dw, dh, dr, &nm);
  torture_budget = 0, torture_failures = 0, torture_armed = true;
  vis_resize(src, sw, sh, sr, b, dw, dh, dr, &nm);
  torture_armed = false, torture_budget = -1;
  assert_int_equal(torture_failures, 1);
  for (int i = 0; i < 3 * dw * dh; i++) assert_float_equal(a[i], b[i], 1e-3);
  free(a), free(b), free(src);
}

static void test_nms_oom(void **s) {
  (void)s;
  vis_det d[3];
  memset(d, 0, sizeof d);
  for (int i = 0; i < 3; i++) {
    d[i].box[0] = d[i].box[1] = (float)(i * 100);
    d[i].box[2] = d[i].box[3] = (float)(i * 100 + 10);
    d[i].score = 0.5f + 0.1f * (float)i;
  }
  torture_budget = 0, torture_failures = 0, torture_armed = true;
  size_t k = vis_nms(d, 3, 0, 0.4f, 10);
  torture_armed = false, torture_budget = -1;
  assert_true(torture_failures >= 1);
  assert_int_equal(k, 1);
  assert_float_equal(d[0].score, 0.7, 1e-6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_oom),
      cmocka_unit_test(test_resize_oom),
      cmocka_unit_test(test_nms_oom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
