/* jpeg.c: RGB to JPEG with libjpeg-turbo (memory destination), and box outlines drawn on
 * an RGB frame for the live page. */
#include "streams/streams.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

typedef struct jerr {
  struct jpeg_error_mgr mgr;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} jerr;

static void jerr_exit(j_common_ptr c) {
  jerr *e = (jerr *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jb, 1);
}

cinfer_status *streams_jpeg_encode(const uint8_t *rgb, int w, int h, int quality,
                                   unsigned char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  struct jpeg_compress_struct c;
  jerr e;
  /* The destination buffer's pointer lives in a heap cell set before setjmp and never
   * changed after it, so the error path can free what libjpeg allocated so far. */
  struct memdst {
    unsigned char *buf;
    unsigned long n;
  } *md = calloc(1, sizeof *md);
  if (!md) return cinfer_status_oom(NULL);
  c.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jerr_exit;
  if (setjmp(e.jb)) {
    jpeg_destroy_compress(&c);
    free(md->buf);
    free(md);
    return cinfer_status_new(CINFER_INTERNAL, "JPEG encoding failed: %s", e.msg);
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &md->buf, &md->n);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * (size_t)w * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  *out = md->buf;
  *len = md->n;
  free(md);
  return NULL;
}

static void fill(uint8_t *rgb, int w, int h, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
  if (x0 < 0) x0 = 0;
  if (y0 < 0) y0 = 0;
  if (x1 > w) x1 = w;
  if (y1 > h) y1 = h;
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) {
      uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
      p[0] = c[0];
      p[1] = c[1];
      p[2] = c[2];
    }
}

void streams_draw_box(uint8_t *rgb, int w, int h, const float box[4], const uint8_t c[3], int t) {
  float v[4];
  for (int i = 0; i < 4; i++) {
    float lim = (float)((i % 2) ? h : w);
    v[i] = box[i] != box[i] ? 0 : box[i] < 0 ? 0 : box[i] > lim ? lim : box[i];
  }
  int x0 = (int)v[0], y0 = (int)v[1], x1 = (int)v[2], y1 = (int)v[3];
  if (x1 <= x0 || y1 <= y0) return;
  fill(rgb, w, h, x0, y0, x1, y0 + t, c);
  fill(rgb, w, h, x0, y1 - t, x1, y1, c);
  fill(rgb, w, h, x0, y0, x0 + t, y1, c);
  fill(rgb, w, h, x1 - t, y0, x1, y1, c);
}
