/* decode.c: JPEG (libjpeg-turbo) and PNG (libpng's simplified API) from memory to RGB.
 *
 * libjpeg reports errors through error_exit, which must not return: ours longjmps back
 * to vis_decode, which destroys the decompressor and frees the pixels. Its warnings
 * (emit_message with level -1: corrupt data, premature end of file) fail the decode too,
 * since libjpeg would otherwise hand back a frame padded with grey. libpng's simplified
 * API catches its own errors (png_safe_execute) and returns 0 with a message. The pixel
 * limit is checked from the header, before the pixel buffer exists. */
#include "backends/vision/vision.h"

#include <limits.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "cinfer/types.h"

typedef struct jerr {
  struct jpeg_error_mgr mgr;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} jerr;

static void jpeg_fail(j_common_ptr ci) {
  jerr *e = (jerr *)ci->err;
  (*ci->err->format_message)(ci, e->msg);
  longjmp(e->jb, 1);
}

static void jpeg_message(j_common_ptr ci, int level) {
  if (level < 0) jpeg_fail(ci); /* a warning: corrupt or truncated data */
}

static bool is_jpeg(const uint8_t *d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
static bool is_png(const uint8_t *d, size_t n) { return n >= 8 && !png_sig_cmp(d, 0, 8); }

static cinfer_status *too_big(uint64_t w, uint64_t h, uint64_t max) {
  return cinfer_status_new(CINFER_INVALID_ARG,
                           "image of %llux%llu = %llu pixels is over the limit of %llu pixels "
                           "(parameter max_pixels)",
                           (unsigned long long)w, (unsigned long long)h,
                           (unsigned long long)(w * h), (unsigned long long)max);
}

static cinfer_status *decode_jpeg(const uint8_t *data, size_t n, uint64_t max_pixels,
                                  bool header_only, uint8_t **rgb, int *width, int *height) {
  struct jpeg_decompress_struct ci;
  jerr e;
  uint8_t *volatile px = NULL;
  memset(&ci, 0, sizeof ci);
  ci.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jpeg_fail;
  e.mgr.emit_message = jpeg_message;
  if (setjmp(e.jb)) {
    jpeg_destroy_decompress(&ci);
    free(px);
    return cinfer_status_new(CINFER_INVALID_ARG, "bad JPEG image: %s", e.msg);
  }
  jpeg_create_decompress(&ci);
  if (n > ULONG_MAX) n = ULONG_MAX; /* cannot happen on LP64 */
  jpeg_mem_src(&ci, data, (unsigned long)n);
  jpeg_read_header(&ci, TRUE);
  uint64_t w = ci.image_width, h = ci.image_height;
  if (w == 0 || h == 0 || w > INT_MAX / 4 || h > INT_MAX / 4) {
    jpeg_destroy_decompress(&ci);
    return cinfer_status_new(CINFER_INVALID_ARG, "bad JPEG image: size %llux%llu",
                             (unsigned long long)w, (unsigned long long)h);
  }
  if (w * h > max_pixels) {
    jpeg_destroy_decompress(&ci);
    return too_big(w, h, max_pixels);
  }
  if (header_only) {
    jpeg_destroy_decompress(&ci);
    *width = (int)w, *height = (int)h;
    return NULL;
  }
  ci.out_color_space = JCS_RGB; /* grey and YCbCr convert; CMYK fails in start_decompress */
  jpeg_start_decompress(&ci);
  if (ci.output_components != 3 || ci.output_width != w || ci.output_height != h) {
    jpeg_destroy_decompress(&ci);
    return cinfer_status_new(CINFER_INVALID_ARG, "bad JPEG image: %d components after conversion",
                             ci.output_components);
  }
  size_t stride = (size_t)w * 3;
  px = malloc(stride * (size_t)h);
  if (!px) {
    jpeg_destroy_decompress(&ci);
    return cinfer_status_oom("decoding a JPEG image");
  }
  while (ci.output_scanline < ci.output_height) {
    JSAMPROW row = px + stride * ci.output_scanline;
    if (jpeg_read_scanlines(&ci, &row, 1) != 1) { /* suspended: the data ran out */
      jpeg_destroy_decompress(&ci);
      free(px);
      return cinfer_status_new(CINFER_INVALID_ARG, "bad JPEG image: truncated");
    }
  }
  jpeg_finish_decompress(&ci);
  jpeg_destroy_decompress(&ci);
  *rgb = px;
  *width = (int)w, *height = (int)h;
  return NULL;
}

static cinfer_status *decode_png(const uint8_t *data, size_t n, uint64_t max_pixels,
                                 bool header_only, uint8_t **rgb, int *width, int *height) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, data, n)) {
    cinfer_status *st = cinfer_status_new(CINFER_INVALID_ARG, "bad PNG image: %s", im.message);
    png_image_free(&im);
    return st;
  }
  uint64_t w = im.width, h = im.height;
  if (w == 0 || h == 0 || w > INT_MAX / 4 || h > INT_MAX / 4) {
    png_image_free(&im);
    return cinfer_status_new(CINFER_INVALID_ARG, "bad PNG image: size %llux%llu",
                             (unsigned long long)w, (unsigned long long)h);
  }
  if (w * h > max_pixels) {
    png_image_free(&im);
    return too_big(w, h, max_pixels);
  }
  if (header_only) {
    png_image_free(&im);
    *width = (int)w, *height = (int)h;
    return NULL;
  }
  im.format = PNG_FORMAT_RGB;
  size_t size = (size_t)w * (size_t)h * 3;
  uint8_t *px = malloc(size);
  if (!px) {
    png_image_free(&im);
    return cinfer_status_oom("decoding a PNG image");
  }
  /* Alpha is composited onto black (background NULL); the row stride is w * 3. */
  if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
    cinfer_status *st = cinfer_status_new(CINFER_INVALID_ARG, "bad PNG image: %s", im.message);
    free(px);
    png_image_free(&im);
    return st;
  }
  png_image_free(&im);
  *rgb = px;
  *width = (int)w, *height = (int)h;
  return NULL;
}

static cinfer_status *run(const uint8_t *data, size_t n, uint64_t max_pixels, bool header_only,
                          uint8_t **rgb, int *width, int *height) {
  if (rgb) *rgb = NULL;
  if (!data || n == 0) return cinfer_status_new(CINFER_INVALID_ARG, "empty image");
  if (is_jpeg(data, n)) return decode_jpeg(data, n, max_pixels, header_only, rgb, width, height);
  if (is_png(data, n)) return decode_png(data, n, max_pixels, header_only, rgb, width, height);
  return cinfer_status_new(CINFER_INVALID_ARG,
                           "image is neither JPEG nor PNG (first bytes %02x %02x %02x %02x)",
                           data[0], n > 1 ? data[1] : 0, n > 2 ? data[2] : 0, n > 3 ? data[3] : 0);
}

cinfer_status *vis_decode(const uint8_t *data, size_t n, uint64_t max_pixels, uint8_t **rgb,
                          int *width, int *height) {
  return run(data, n, max_pixels, false, rgb, width, height);
}

cinfer_status *vis_probe(const uint8_t *data, size_t n, int *width, int *height) {
  return run(data, n, UINT64_MAX, true, NULL, width, height);
}
