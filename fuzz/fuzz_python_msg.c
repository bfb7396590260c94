/* fuzz_python_msg.c: the Python backend's decoding of a stub message (pyproc.c,
 * py_tensors_decode): a JSON header and the shared memory it describes, both written by a
 * process that runs user code. Input: 4 bytes little-endian header length, the header,
 * then the shared memory bytes. Every decoded tensor must lie inside the memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/python/pyproc.h"
#include "core/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  uint32_t hl = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                (uint32_t)data[3] << 24;
  if (hl > size - 4) return 0;
  const char *hdr = (const char *)data + 4;
  const uint8_t *shm = data + 4 + hl;
  size_t shm_size = size - 4 - hl;
  /* a private copy, so that reads past the end are caught */
  uint8_t *mem = malloc(shm_size ? shm_size : 1);
  if (!mem) return 0;
  memcpy(mem, shm, shm_size);
  json_doc *doc = NULL;
  cinfer_status *st = json_parse(hdr, hl, 64, &doc);
  if (!st) {
    cinfer_tensor *t = NULL;
    uint32_t n = 0;
    st = py_tensors_decode(json_get(json_root(doc), "tensors"), mem, shm_size, &t, &n);
    for (uint32_t i = 0; !st && i < n; i++) {
      if (t[i].byte_size && ((const uint8_t *)t[i].data < mem ||
                             (const uint8_t *)t[i].data + t[i].byte_size > mem + shm_size))
        abort();
    }
    free(t);
    json_doc_free(doc);
  }
  cinfer_status_free(st);
  free(mem);
  return 0;
}
