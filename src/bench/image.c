/* image.c: images as KServe inputs (`--images DIR`): decode PNG (libpng simplified API)
 * or JPEG (libjpeg-turbo) to 8-bit RGB, resize bilinearly (half-pixel centres, as
 * OpenCV's INTER_LINEAR and ONNX Resize "half_pixel" do) to the input's H x W, then write
 * (v - mean[c]) / std[c] in the input's layout (NCHW or NHWC, detected from the shape) and
 * datatype. Setup-time only. Images are limited to 16384 x 16384 and must decode fully;
 * every failure names the file. */
#include "bench/bench_int.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#define MAX_SIDE 16384

/* ---- JPEG ---- */

typedef struct {
  struct jpeg_error_mgr mgr;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} jerr;

static void jpeg_fail(j_common_ptr ci) {
  jerr *e = (jerr *)ci->err;
  (*ci->err->format_message)(ci, e->msg);
  longjmp(e->jb, 1);
}

static cinfer_status *load_jpeg(const char *path, FILE *f, uint8_t **out, int *w, int *h) {
  struct jpeg_decompress_struct ci;
  jerr e;
  uint8_t *volatile px = NULL;
  ci.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jpeg_fail;
  if (setjmp(e.jb)) {
    jpeg_destroy_decompress(&ci);
    free(px);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: bad JPEG: %s", path, e.msg);
  }
  jpeg_create_decompress(&ci);
  jpeg_stdio_src(&ci, f);
  jpeg_read_header(&ci, TRUE);
  ci.out_color_space = JCS_RGB;
  jpeg_start_decompress(&ci);
  if (ci.output_width == 0 || ci.output_height == 0 || ci.output_width > MAX_SIDE ||
      ci.output_height > MAX_SIDE || ci.output_components != 3) {
    jpeg_destroy_decompress(&ci);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: unsupported JPEG (%ux%u, %d components)",
                             path, ci.output_width, ci.output_height, ci.output_components);
  }
  size_t stride = (size_t)ci.output_width * 3;
  px = malloc(stride * ci.output_height);
  if (!px) {
    jpeg_destroy_decompress(&ci);
    return cinfer_status_new(CINFER_INTERNAL, "%s: out of memory", path);
  }
  while (ci.output_scanline < ci.output_height) {
    JSAMPROW row = px + stride * ci.output_scanline;
    jpeg_read_scanlines(&ci, &row, 1);
  }
  jpeg_finish_decompress(&ci);
  *w = (int)ci.output_width;
  *h = (int)ci.output_height;
  jpeg_destroy_decompress(&ci);
  *out = px;
  return NULL;
}

/* ---- PNG ---- */

static cinfer_status *load_png(const char *path, uint8_t **out, int *w, int *h) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, path))
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: bad PNG: %s", path, im.message);
  if (im.width == 0 || im.height == 0 || im.width > MAX_SIDE || im.height > MAX_SIDE) {
    png_image_free(&im);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: PNG %ux%u is out of range", path, im.width, im.height);
  }
  im.format = PNG_FORMAT_RGB;
  uint8_t *px = malloc(PNG_IMAGE_SIZE(im));
  if (!px) {
    png_image_free(&im);
    return cinfer_status_new(CINFER_INTERNAL, "%s: out of memory", path);
  }
  if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
    free(px);
    cinfer_status *st = cinfer_status_new(CINFER_INVALID_ARG, "%s: bad PNG: %s", path, im.message);
    png_image_free(&im);
    return st;
  }
  *w = (int)im.width;
  *h = (int)im.height;
  *out = px;
  return NULL;
}

cinfer_status *bench_image_load(const char *path, uint8_t **rgb, int *w, int *h) {
  *rgb = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return cinfer_status_new(CINFER_NOT_FOUND, "cannot open '%s': %s", path, strerror(errno));
  unsigned char sig[8] = {0};
  size_t n = fread(sig, 1, sizeof sig, f);
  cinfer_status *st;
  if (n >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF) {
    rewind(f);
    st = load_jpeg(path, f, rgb, w, h);
    fclose(f);
  } else if (n == 8 && !png_sig_cmp(sig, 0, 8)) {
    fclose(f);
    st = load_png(path, rgb, w, h);
  } else {
    fclose(f);
    st = cinfer_status_new(CINFER_INVALID_ARG, "%s: not a PNG or JPEG file", path);
  }
  return st;
}

void bench_image_resize(const uint8_t *src, int sw, int sh, float *dst, int dw, int dh) {
  float sx = (float)sw / (float)dw, sy = (float)sh / (float)dh;
  for (int y = 0; y < dh; y++) {
    float fy = ((float)y + 0.5f) * sy - 0.5f;
    if (fy < 0) fy = 0;
    int y0 = (int)fy, y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
    float wy = fy - (float)y0;
    for (int x = 0; x < dw; x++) {
      float fx = ((float)x + 0.5f) * sx - 0.5f;
      if (fx < 0) fx = 0;
      int x0 = (int)fx, x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
      float wx = fx - (float)x0;
      for (int c = 0; c < 3; c++) {
        float a = src[((size_t)y0 * sw + x0) * 3 + c], b = src[((size_t)y0 * sw + x1) * 3 + c];
        float d = src[((size_t)y1 * sw + x0) * 3 + c], e = src[((size_t)y1 * sw + x1) * 3 + c];
        float top = a + (b - a) * wx, bot = d + (e - d) * wx;
        dst[((size_t)y * dw + x) * 3 + c] = top + (bot - top) * wy;
      }
    }
  }
}
