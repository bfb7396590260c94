/* fuzz_kserve_ext.c: libFuzzer harness for the Triton extensions of the KServe decoding
 * path: Content-Encoding inflation (compress_inflate, bounded), raw binary requests against
 * real model configurations, shared-memory parameters against a registered region (bounds,
 * offsets, unknown regions), classification of the decoded input, and the response-side
 * preparation (output written to the region). Input layout: byte 0 = flags (bit 0: the
 * body is compressed; bits 1-2: the model), bytes 1..4 = Inference-Header-Content-Length
 * (0xffffffff = absent), the rest is the body. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cinfer/cinfer.h"
#include "frontend/classify.h"
#include "frontend/compress.h"
#include "frontend/kserve.h"
#include "frontend/shm.h"

static cinfer_server *server;
static shm_registry *shm;
static const char *models[] = {"identity", "identity_string", "identity_pair", "identity_int8"};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *repo = getenv("CINFER_FUZZ_REPO");
  cinfer_server_options o = {.model_repository = repo ? repo : "examples/model_repository",
                             .threads = 1};
  cinfer_status *st = cinfer_server_create(&o, &server);
  if (st) {
    fprintf(stderr, "fuzz_kserve_ext: %s (set CINFER_FUZZ_REPO)\n", cinfer_status_message(st));
    cinfer_status_free(st);
    server = NULL;
  }
  char key[64];
  snprintf(key, sizeof key, "/cinfer_fuzz_%d", (int)getpid());
  int fd = shm_open(key, O_RDWR | O_CREAT, 0600);
  if (fd >= 0 && ftruncate(fd, 4096) == 0 && !shm_registry_create(&shm))
    cinfer_status_free(shm_register(shm, "r", key, 0, 4096));
  if (fd >= 0) close(fd);
  shm_unlink(key); /* the mapping stays */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  const char *model = models[(data[0] >> 1) % 4];
  uint32_t hl = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 | (uint32_t)data[4] << 24;
  int64_t header_len = hl == 0xffffffffu ? -1 : (int64_t)hl;
  size_t n = size - 5;
  char *body = malloc(n ? n : 1); /* exact size: any over-read hits ASan */
  memcpy(body, data + 5, n);
  cinfer_status *st = NULL;
  if (data[0] & 1) {
    void *z = NULL;
    size_t zl = 0;
    st = compress_inflate(body, n, 1 << 20, &z, &zl);
    free(body);
    if (st) {
      cinfer_status_free(st);
      return 0;
    }
    body = z;
    n = zl;
  }
  cinfer_model *m = NULL;
  if (server) cinfer_status_free(cinfer_server_model_acquire(server, model, 0, &m));
  kserve_limits lim = {.max_tensor_elements = 1 << 16, .max_json_depth = 100,
                       .max_input_bytes = 1 << 20};
  kserve_decode_ctx ctx = {.shm = shm, .config = m ? cinfer_model_config_get(m) : NULL};
  kserve_request *k = NULL;
  st = kserve_decode_with(body, n, header_len, &lim, &ctx, &k);
  cinfer_status_free(st);
  if (k) {
    /* Classify every input as if it were an output (any type, any shape). */
    for (size_t i = 0; i < kserve_request_input_count(k); i++) {
      cbuf b = {0};
      int64_t shape[2];
      int nd;
      cinfer_status_free(classify_output(&kserve_request_input(k, i)->t, 3, i & 1, NULL, &b,
                                         shape, &nd));
      cbuf_free(&b);
    }
    if (m) {
      cinfer_request *r = NULL;
      if (!(st = cinfer_request_create(m, &r))) st = kserve_apply(k, r);
      cinfer_request_release(r);
      cinfer_status_free(st);
    }
  }
  kserve_request_free(k);
  cinfer_model_release(m);
  free(body);
  return 0;
}
