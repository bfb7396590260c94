/* fuzz_grpc.c: libFuzzer harness for the gRPC message path of `cinfer serve --grpc-port`:
 * the length-prefixed framing of a request stream (grpc_frame_next), gzip message
 * decompression (grpc_gunzip), ModelInferRequest decoding with the shared KServe rules
 * (grpc_infer_decode) and its application to a request of a real loaded model
 * (grpc_infer_apply: names, datatypes, shapes, byte sizes against the config), plus the
 * unpacking of the other request messages the service reads. Input layout: byte 0 selects
 * the model, the rest is the DATA of one stream (any number of framed messages). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/cinfer.h"
#include "grpc/grpc_codec.h"
#include "grpc/grpc_wire.h"
#include "health.pb-c.h"

static cinfer_server *server;
static const char *models[] = {"identity", "identity_string", "identity_pair", "identity_int8"};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *repo = getenv("CINFER_FUZZ_REPO");
  cinfer_server_options o = {.model_repository = repo ? repo : "examples/model_repository",
                             .threads = 1};
  cinfer_status *st = cinfer_server_create(&o, &server);
  if (st) {
    fprintf(stderr, "fuzz_grpc: %s (set CINFER_FUZZ_REPO)\n", cinfer_status_message(st));
    cinfer_status_free(st);
    server = NULL;
  }
  return 0;
}

static void one_message(const char *model, const uint8_t *p, size_t n) {
  kserve_limits lim = {.max_tensor_elements = 1 << 16, .max_json_depth = 32};
  grpc_infer *g = NULL;
  cinfer_status *st = grpc_infer_decode(p, n, &lim, &g);
  cinfer_status_free(st);
  if (g && server) {
    cinfer_model *m = NULL;
    if (!(st = cinfer_server_model_acquire(server, model, 0, &m))) {
      cinfer_request *r = NULL;
      if (!(st = grpc_infer_bind(g, NULL, cinfer_model_config_get(m))) &&
          !(st = cinfer_request_create(m, &r)))
        st = grpc_infer_apply(g, r);
      cinfer_request_release(r);
      cinfer_model_release(m);
    }
    cinfer_status_free(st);
  }
  grpc_infer_free(g);
  Inference__RepositoryModelLoadRequest *l = inference__repository_model_load_request__unpack(NULL, n, p);
  if (l) inference__repository_model_load_request__free_unpacked(l, NULL);
  Grpc__Health__V1__HealthCheckRequest *h = grpc__health__v1__health_check_request__unpack(NULL, n, p);
  if (h) grpc__health__v1__health_check_request__free_unpacked(h, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *model = models[data[0] % 4];
  size_t n = size - 1;
  uint8_t *buf = malloc(n ? n : 1); /* exact size: any over-read hits ASan */
  memcpy(buf, data + 1, n);
  size_t off = 0;
  for (;;) {
    grpc_msg m;
    size_t used;
    if (grpc_frame_next(buf + off, n - off, 1u << 20, &m, &used) != GRPC_FRAME_OK) break;
    off += used;
    if (m.compressed) {
      uint8_t *plain = NULL;
      size_t plen;
      cinfer_status *st = grpc_gunzip(m.data, m.len, 1u << 20, &plain, &plen);
      cinfer_status_free(st);
      if (plain) one_message(model, plain, plen);
      free(plain);
    } else {
      one_message(model, m.data, m.len);
    }
  }
  free(buf);
  return 0;
}
