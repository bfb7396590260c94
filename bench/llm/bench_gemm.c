/* bench_gemm.c: GFLOP/s of the engine's tiled GEMM (llm_gemm_get) on one thread, for A/B
 * comparisons of kernel changes on a shared machine.
 *
 *   build/bench/llm_bench_gemm [TYPE [TOKENS [ROWS [K]]]]   (defaults: q4_1 16 1536 576)
 *
 * Weights are random blocks with a fixed scale, activations random floats quantised by
 * llm_quantize_row. The time is thread CPU time (time the thread actually ran), best of 5
 * rounds of calls, so other jobs on the machine inflate it less than wall time; still,
 * compare two builds by alternating runs. The checksum must not change between builds
 * whose kernels claim identical results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/llm/quant.h"

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  const char *tn = argc > 1 ? argv[1] : "q4_1";
  int nt = argc > 2 ? atoi(argv[2]) : 16, rows = argc > 3 ? atoi(argv[3]) : 1536, k = argc > 4 ? atoi(argv[4]) : 576;
  llm_type t = LLM_TYPE_COUNT_;
  for (int i = 0; i < LLM_TYPE_COUNT_; i++)
    if (llm_type_block((llm_type)i) && !strcasecmp(llm_type_name((llm_type)i), tn)) t = (llm_type)i;
  llm_gemm_fn gemm = t == LLM_TYPE_COUNT_ ? NULL : llm_gemm_get(t);
  if (!gemm || nt < 1 || rows < 1 || k < 1 || k % llm_type_block(t)) {
    fprintf(stderr, "usage: %s [q4_0|q4_1|q5_0|q8_0|q4_K|q6_K [TOKENS [ROWS [K (a multiple of the block)]]]]\n", argv[0]);
    return 2;
  }
  llm_type vt = llm_type_vec_dot_type(t);
  size_t wrow = llm_row_bytes(t, k), arow = llm_row_bytes(vt, k), bb = llm_type_block_bytes(t);
  int qk = llm_type_block(t);
  uint8_t *w = malloc(wrow * rows), *a = malloc(arow * nt);
  float *x = malloc(sizeof *x * k), *y = malloc(sizeof *y * rows * nt);
  if (!w || !a || !x || !y) return 1;
  srand(1);
  for (size_t i = 0; i < wrow * rows; i++) w[i] = (uint8_t)rand();
  uint16_t h = 0x2c00; /* fp16 0.0625: finite scales (and Q4_1 mins, K-quant d/dmin) */
  for (int r = 0; r < rows; r++)
    for (int b = 0; b < k / qk; b++) {
      uint8_t *blk = w + r * wrow + b * bb;
      if (t == LLM_Q6_K) memcpy(blk + bb - 2, &h, 2);
      else {
        memcpy(blk, &h, 2);
        if (t == LLM_Q4_1 || t == LLM_Q4_K) memcpy(blk + 2, &h, 2);
      }
    }
  for (int j = 0; j < nt; j++) {
    for (int i = 0; i < k; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    llm_quantize_row(vt, x, a + j * arow, k);
  }
  double flop = 2.0 * k * rows * nt, best = 1e30;
  int calls = (int)(2e9 / flop) + 1;
  gemm(k, w, wrow, rows, a, arow, nt, y, rows);
  for (int round = 0; round < 5; round++) {
    double t0 = cpu_now();
    for (int i = 0; i < calls; i++) gemm(k, w, wrow, rows, a, arow, nt, y, rows);
    double dt = (cpu_now() - t0) / calls;
    if (dt < best) best = dt;
  }
  double sum = 0;
  for (int i = 0; i < rows * nt; i++) sum += y[i];
  printf("%s %d rows x %d tokens, k %d: %.1f us/call, %.1f GFLOP/s (checksum %.9g)\n", llm_type_name(t), rows, nt, k,
         best * 1e6, flop / best * 1e-9, sum);
  free(w), free(a), free(x), free(y);
  return 0;
}
