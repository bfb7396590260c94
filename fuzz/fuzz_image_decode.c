/* fuzz_image_decode.c: the JPEG/PNG decoder of the image_decode backend
 * (backends/vision/decode.c) on arbitrary bytes. Every input either fails with
 * INVALID_ARG (never another code, never a crash or a leak) or decodes to an image within
 * the pixel limit whose every byte is readable; probe and decode agree on the size. The
 * limit is small (1 Mpx) so that huge declared sizes are refused from the header and the
 * fuzzer stays fast. Seeds: fuzz/corpus/image_decode (small PNG and JPEG files). */
#include <stdint.h>
#include <stdlib.h>

#include "backends/vision/vision.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0) /* NDEBUG-proof */
#define LIMIT (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *rgb = NULL;
  int w = 0, h = 0, pw = 0, ph = 0;
  cinfer_status *st = vis_decode(data, size, LIMIT, &rgb, &w, &h);
  if (st) {
    CHECK(cinfer_status_code(st) == CINFER_INVALID_ARG);
    CHECK(rgb == NULL);
    cinfer_status_free(st);
    return 0;
  }
  CHECK(w > 0 && h > 0 && (uint64_t)w * (uint64_t)h <= LIMIT);
  unsigned sum = 0;
  for (size_t i = 0; i < (size_t)w * h * 3; i++) sum += rgb[i]; /* ASan: all of it exists */
  (void)sum;
  free(rgb);
  st = vis_probe(data, size, &pw, &ph);
  CHECK(st == NULL && pw == w && ph == h);
  return 0;
}
