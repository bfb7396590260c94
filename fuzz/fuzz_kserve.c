/* fuzz_kserve.c: libFuzzer harness for the KServe v2 request decoding path: the body
 * decoder (JSON + binary tensor extension) and its application to a request of a real
 * loaded model (input validation against the config: names, datatypes, shapes, byte
 * sizes). Input layout: byte 0 selects the model, bytes 1..4 the
 * Inference-Header-Content-Length (0xffffffff = absent), the rest is the body. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/cinfer.h"
#include "frontend/kserve.h"

static cinfer_server *server;
static const char *models[] = {"identity", "identity_string", "identity_pair", "identity_int8"};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *repo = getenv("CINFER_FUZZ_REPO");
  cinfer_server_options o = {.model_repository = repo ? repo : "examples/model_repository",
                             .threads = 1};
  cinfer_status *st = cinfer_server_create(&o, &server);
  if (st) {
    fprintf(stderr, "fuzz_kserve: %s (set CINFER_FUZZ_REPO)\n", cinfer_status_message(st));
    cinfer_status_free(st);
    server = NULL;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  const char *model = models[data[0] % 4];
  uint32_t hl = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 | (uint32_t)data[4] << 24;
  int64_t header_len = hl == 0xffffffffu ? -1 : (int64_t)hl;
  size_t n = size - 5;
  char *body = malloc(n ? n : 1); /* exact size: any over-read hits ASan */
  memcpy(body, data + 5, n);
  kserve_limits lim = {.max_tensor_elements = 1 << 16, .max_json_depth = 32};
  kserve_request *k = NULL;
  cinfer_status *st = kserve_decode(body, n, header_len, &lim, &k);
  cinfer_status_free(st);
  if (k && server) {
    cinfer_model *m = NULL;
    if (!(st = cinfer_server_model_acquire(server, model, 0, &m))) {
      cinfer_request *r = NULL;
      if (!(st = cinfer_request_create(m, &r))) st = kserve_apply(k, r);
      cinfer_request_release(r);
      cinfer_model_release(m);
    }
    cinfer_status_free(st);
  }
  kserve_request_free(k);
  free(body);
  return 0;
}
