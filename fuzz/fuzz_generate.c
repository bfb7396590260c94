/* fuzz_generate.c: libFuzzer harness for Triton's generate mapping (generate.c): a generate
 * body turned into a request of a real loaded model (top-level and "parameters" keys as
 * inputs or parameters, JSON scalars and arrays converted to the input's datatype and
 * shape). Byte 0 selects the model, the rest is the body. The request is built and
 * released, never submitted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cinfer/cinfer.h"
#include "frontend/frontend_internal.h"

static cinfer_server *server;
static const char *models[] = {"identity", "identity_string", "identity_pair", "identity_int8",
                               "identity_bool", "identity_fp16"};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *repo = getenv("CINFER_FUZZ_REPO");
  cinfer_server_options o = {.model_repository = repo ? repo : "examples/model_repository",
                             .threads = 1};
  cinfer_status *st = cinfer_server_create(&o, &server);
  if (st) {
    fprintf(stderr, "fuzz_generate: %s (set CINFER_FUZZ_REPO)\n", cinfer_status_message(st));
    cinfer_status_free(st);
    server = NULL;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!server || size < 1) return 0;
  cinfer_model *m;
  cinfer_status *st = cinfer_server_model_acquire(
      server, models[data[0] % (sizeof models / sizeof models[0])], 0, &m);
  if (st) {
    cinfer_status_free(st);
    return 0;
  }
  cinfer_request *r = NULL;
  char *id = NULL;
  st = generate_build_request(m, (const char *)data + 1, size - 1, 1 << 16, &r, &id);
  cinfer_status_free(st);
  cinfer_request_release(r);
  free(id);
  cinfer_model_release(m);
  return 0;
}
