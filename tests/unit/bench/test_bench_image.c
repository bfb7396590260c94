/* test_bench_image.c: image decoding (PNG and JPEG written here with libpng/libjpeg) and
 * the bilinear resize against values worked out by hand; bad files give errors naming
 * the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <jpeglib.h>
#include <png.h>

#include "bench/bench_int.h"

static char dir[] = "/tmp/cinfer-bench-img-XXXXXX";

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void test_png_roundtrip(void **st) {
  uint8_t px[2 * 4 * 3];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 11);
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = 4;
  im.height = 2;
  im.format = PNG_FORMAT_RGB;
  char p[256];
  path_of(p, sizeof p, "a.png");
  assert_true(png_image_write_to_file(&im, p, 0, px, 0, NULL));
  uint8_t *rgb;
  int w, h;
  assert_null(bench_image_load(p, &rgb, &w, &h));
  assert_int_equal(w, 4);
  assert_int_equal(h, 2);
  assert_memory_equal(rgb, px, sizeof px);
  free(rgb);
  /* truncated file */
  FILE *f = fopen(p, "r+b");
  assert_non_null(f);
  assert_int_equal(ftruncate(fileno(f), 40), 0);
  fclose(f);
  cinfer_status *s = bench_image_load(p, &rgb, &w, &h);
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "a.png"));
  cinfer_status_free(s);
}

static void test_jpeg(void **st) {
  char p[256];
  path_of(p, sizeof p, "b.jpg");
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr err;
  ci.err = jpeg_std_error(&err);
  jpeg_create_compress(&ci);
  jpeg_stdio_dest(&ci, f);
  ci.image_width = 16;
  ci.image_height = 8;
  ci.input_components = 3;
  ci.in_color_space = JCS_RGB;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, 100, TRUE);
  jpeg_start_compress(&ci, TRUE);
  uint8_t row[16 * 3];
  for (int x = 0; x < 16; x++) row[x * 3] = 200, row[x * 3 + 1] = 100, row[x * 3 + 2] = 20;
  while (ci.next_scanline < ci.image_height) {
    JSAMPROW r = row;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  fclose(f);
  uint8_t *rgb;
  int w, h;
  assert_null(bench_image_load(p, &rgb, &w, &h));
  assert_int_equal(w, 16);
  assert_int_equal(h, 8);
  for (int i = 0; i < 16 * 8; i++) { /* JPEG is lossy: a solid colour comes back within 3 */
    assert_in_range(rgb[i * 3], 197, 203);
    assert_in_range(rgb[i * 3 + 1], 97, 103);
    assert_in_range(rgb[i * 3 + 2], 17, 23);
  }
  free(rgb);
  /* a JPEG cut short is an error, not a crash */
  f = fopen(p, "r+b");
  assert_int_equal(ftruncate(fileno(f), 100), 0);
  fclose(f);
  cinfer_status *s = bench_image_load(p, &rgb, &w, &h);
  if (s) { /* libjpeg may pad a truncated scan with a warning; either way no crash */
    assert_non_null(strstr(cinfer_status_message(s), "b.jpg"));
    cinfer_status_free(s);
  } else {
    free(rgb);
  }
}

static void test_not_image(void **st) {
  char p[256];
  path_of(p, sizeof p, "c.png");
  FILE *f = fopen(p, "wb");
  fputs("hello, not a png", f);
  fclose(f);
  uint8_t *rgb;
  int w, h;
  cinfer_status *s = bench_image_load(p, &rgb, &w, &h);
  assert_non_null(s);
  assert_non_null(strstr(cinfer_status_message(s), "c.png: not a PNG or JPEG"));
  cinfer_status_free(s);
  s = bench_image_load("/nonexistent/x.png", &rgb, &w, &h);
  assert_int_equal(cinfer_status_code(s), CINFER_NOT_FOUND);
  cinfer_status_free(s);
}

static void test_resize(void **st) {
  /* 2x1 -> 4x1, half-pixel centres: 0, 25, 75, 100 */
  uint8_t src[2 * 3] = {0, 0, 0, 100, 100, 100};
  float dst[4 * 3];
  bench_image_resize(src, 2, 1, dst, 4, 1);
  const float want[4] = {0, 25, 75, 100};
  for (int x = 0; x < 4; x++)
    for (int c = 0; c < 3; c++) assert_true(dst[x * 3 + c] == want[x]);
  /* 4x2 -> 2x1: each output is the mean of a 2x2 block */
  uint8_t s2[4 * 2 * 3];
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 4; x++)
      for (int c = 0; c < 3; c++) s2[(y * 4 + x) * 3 + c] = (uint8_t)(10 * x + 100 * y + c);
  float d2[2 * 3];
  bench_image_resize(s2, 4, 2, d2, 2, 1);
  for (int c = 0; c < 3; c++) {
    assert_true(d2[c] == (0 + 10 + 100 + 110) / 4.0f + c);
    assert_true(d2[3 + c] == (20 + 30 + 120 + 130) / 4.0f + c);
  }
  /* same size: identity */
  float d3[4 * 2 * 3];
  bench_image_resize(s2, 4, 2, d3, 4, 2);
  for (int i = 0; i < 24; i++) assert_true(d3[i] == s2[i]);
}

static int setup(void **st) { return mkdtemp(dir) ? 0 : -1; }
static int teardown(void **st) {
  const char *names[] = {"a.png", "b.jpg", "c.png"};
  for (int i = 0; i < 3; i++) {
    char p[256];
    path_of(p, sizeof p, names[i]);
    unlink(p);
  }
  return rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_png_roundtrip), cmocka_unit_test(test_jpeg),
      cmocka_unit_test(test_not_image), cmocka_unit_test(test_resize),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
