/* fuzz_streams_response.c: the KServe v2 infer response parser of `cinfer streams`
 * (src/streams/pipeline.c, streams_kserve_response), which reads a remote server's answer:
 * a JSON header of Inference-Header-Content-Length bytes, then binary tensors. The first
 * 2 bytes choose that length (0xffff: all JSON); the rest is the body. Every input either
 * fails with INTERNAL (a message, no outputs) or yields a JSON text of the outputs; never a
 * crash, a leak or a read past the body. Seeds: fuzz/corpus/streams_response. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "streams/streams.h"

#define CHECK(c) do { if (!(c)) abort(); } while (0) /* NDEBUG-proof */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  long long ihcl = data[0] | (data[1] << 8);
  if (ihcl == 0xffff) ihcl = -1;
  size_t len = size - 2;
  char *body = malloc(len ? len : 1); /* exactly len bytes: ASan sees any over-read */
  if (!body) return 0;
  memcpy(body, data + 2, len);
  streams_frame f = {0};
  cinfer_status *st = streams_kserve_response(&f, body, len, ihcl);
  if (st) {
    CHECK(cinfer_status_code(st) == CINFER_INTERNAL);
    cinfer_status_free(st);
  } else {
    CHECK(f.json && f.json[0] == '{');
  }
  free(f.json);
  free(f.boxes);
  for (int i = 0; f.labels && i < f.n_boxes; i++) free(f.labels[i]);
  free(f.labels);
  free(body);
  return 0;
}
