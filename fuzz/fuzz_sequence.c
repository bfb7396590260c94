/* fuzz_sequence.c: libFuzzer harness for the sequence batcher's configuration
 * (server/sequence.c: sequence_batching's strategies, control_input, state, initial_state)
 * and its requests. Each input is a config.pbtxt body appended to a fixed identity-backend
 * model header; the model is loaded (explicit mode), and when it loads, a few requests with
 * sequence parameters taken from the input's first bytes go through it before the unload.
 *
 *   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCINFER_FUZZ=ON
 *   cmake --build build-fuzz -j2 --target fuzz_sequence
 *   mkdir -p build-fuzz/corpus-seq
 *   build-fuzz/fuzz/fuzz_sequence -max_total_time=60 -max_len=2048 -dict=fuzz/fuzz_config.dict \
 *       build-fuzz/corpus-seq fuzz/corpus/sequence
 * Invariants: no crash, no sanitizer report, no leak; a load either succeeds or says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cinfer/cinfer.h"

static cinfer_server *server;
static char repo[64], cfg_path[128];
static float x = 1.0f; /* borrowed by every request until its FINAL response */

static const char HEAD[] =
    "name: \"t\"\nbackend: \"identity\"\nmax_batch_size: 4\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* the temporary repository goes when the fuzzer exits (libFuzzer ends with exit()) */
static void remove_repo(void) {
  char p[128];
  unlink(cfg_path);
  snprintf(p, sizeof p, "%s/t/1", repo);
  rmdir(p);
  snprintf(p, sizeof p, "%s/t", repo);
  rmdir(p);
  rmdir(repo);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  snprintf(repo, sizeof repo, "/tmp/cinfer-fuzz-seq-XXXXXX");
  if (!mkdtemp(repo)) abort();
  atexit(remove_repo);
  char p[128];
  snprintf(p, sizeof p, "%s/t", repo);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/t/1", repo);
  mkdir(p, 0755);
  snprintf(cfg_path, sizeof cfg_path, "%s/t/config.pbtxt", repo);
  FILE *f = fopen(cfg_path, "w");
  if (!f) abort();
  fputs(HEAD, f);
  fclose(f);
  cinfer_server_options o = {.model_repository = repo, .control_mode = CINFER_MODEL_CONTROL_EXPLICIT,
                             .threads = 2};
  cinfer_status *st = cinfer_server_create(&o, &server);
  if (st) abort();
  return 0;
}

static void done_cb(void *user, cinfer_response *resp, uint32_t flags) {
  (void)flags, (void)user;
  cinfer_response_free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  FILE *f = fopen(cfg_path, "w");
  if (!f) abort();
  fputs(HEAD, f);
  fwrite(data + 4, 1, size - 4, f);
  fclose(f);
  cinfer_status *st = cinfer_server_load_model(server, "t", NULL);
  if (st) {
    if (!cinfer_status_message(st)[0]) abort();
    cinfer_status_free(st);
    return 0;
  }
  cinfer_model *m = NULL;
  if (!cinfer_server_model_acquire(server, "t", 0, &m)) {
    for (int i = 0; i < 4; i++) {
      cinfer_request *r = NULL;
      if (cinfer_request_create(m, &r)) break;
      cinfer_tensor t = {.name = "INPUT0", .dtype = CINFER_TYPE_FP32, .ndim = 2, .shape = {1, 1},
                         .data = &x, .byte_size = 4};
      cinfer_status_free(cinfer_request_add_input(r, &t));
      uint8_t b = data[i];
      if (b & 1) cinfer_status_free(cinfer_request_set_param_int(r, "sequence_id", b >> 4));
      else { /* a string id from the input's own bytes (never past its end) */
        size_t len = (size_t)(b >> 5) < size ? (size_t)(b >> 5) : size;
        cinfer_status_free(cinfer_request_set_param_string(r, "sequence_id", (const char *)data, len));
      }
      cinfer_status_free(cinfer_request_set_param_bool(r, "sequence_start", b & 2));
      cinfer_status_free(cinfer_request_set_param_bool(r, "sequence_end", b & 4));
      cinfer_request_set_callback(r, done_cb, NULL);
      cinfer_status_free(cinfer_server_infer_async(server, r));
      cinfer_request_release(r);
    }
    cinfer_model_release(m);
  }
  cinfer_status_free(cinfer_server_unload_model(server, "t"));
  return 0;
}
