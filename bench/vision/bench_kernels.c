/* bench_kernels.c: time of the vision kernels on this machine (docs/design/vision.md).
 * Build: cmake --build build --target bench_vision_kernels
 * Run:   build/src/backends/vision/bench_vision_kernels [image.png]
 * Prints the median of 31 runs per kernel, single thread: the scalar reference resize and
 * the fast one at the pipeline's sizes, and the decode of the image (astronaut.png). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/vision/vision.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define RUNS 31
typedef void (*resize_fn)(const uint8_t *, int, int, vis_rect, float *, int, int, vis_rect,
                          const vis_norm *);

static double time_resize(resize_fn f, const uint8_t *src, int sw, int sh, vis_rect sr, float *dst,
                          int dw, int dh, vis_rect dr, const vis_norm *n) {
  double t[RUNS];
  for (int i = 0; i < RUNS; i++) {
    double t0 = now_ms();
    f(src, sw, sh, sr, dst, dw, dh, dr, n);
    t[i] = now_ms() - t0;
  }
  qsort(t, RUNS, sizeof t[0], cmp);
  return t[RUNS / 2];
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "../shared/models/vision/astronaut.png";
  float mean[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
  vis_norm n;
  vis_norm_make(&n, 1, mean, sd, false, true);
  int sw = 1280, sh = 720;
  uint8_t *src = malloc((size_t)sw * sh * 3);
  for (size_t i = 0; i < (size_t)sw * sh * 3; i++) src[i] = (uint8_t)(i * 2654435761u >> 24);
  float *dst = malloc(sizeof(float) * 3 * 640 * 640);
  struct {
    const char *what;
    int sw, sh;
    vis_rect sr;
    int dw, dh;
    vis_rect dr;
  } cases[] = {
      {"512x512 -> 640x640 (RetinaFace input)", 512, 512, {0, 0, 512, 512}, 640, 640, {0, 0, 640, 640}},
      {"1280x720 -> 640x640 letterbox", 1280, 720, {0, 0, 1280, 720}, 640, 640, {0, 140, 640, 360}},
      {"1280x720 -> 320x240 (UltraFace input)", 1280, 720, {0, 0, 1280, 720}, 320, 240, {0, 0, 320, 240}},
      {"120x160 face -> 224x224 crop", 1280, 720, {500, 200, 120, 160}, 224, 224, {0, 0, 224, 224}},
  };
  printf("| kernel | reference (ms) | fast (ms) | speed-up |\n|---|---|---|---|\n");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    double r = time_resize(vis_resize_ref, src, cases[i].sw, cases[i].sh, cases[i].sr, dst,
                           cases[i].dw, cases[i].dh, cases[i].dr, &n);
    double f = time_resize(vis_resize, src, cases[i].sw, cases[i].sh, cases[i].sr, dst,
                           cases[i].dw, cases[i].dh, cases[i].dr, &n);
    printf("| resize %s | %.3f | %.3f | %.1fx |\n", cases[i].what, r, f, r / f);
  }
  FILE *fp = fopen(path, "rb");
  if (fp) {
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *data = malloc((size_t)len);
    if (fread(data, 1, (size_t)len, fp) == (size_t)len) {
      double t[RUNS];
      int w = 0, h = 0;
      for (int i = 0; i < RUNS; i++) {
        uint8_t *rgb;
        double t0 = now_ms();
        cinfer_status *st = vis_decode(data, (size_t)len, 1u << 26, &rgb, &w, &h);
        t[i] = now_ms() - t0;
        if (st) {
          fprintf(stderr, "%s: %s\n", path, cinfer_status_message(st));
          return 1;
        }
        free(rgb);
      }
      qsort(t, RUNS, sizeof t[0], cmp);
      printf("| decode %s (%dx%d, %ld bytes) | | %.3f | |\n", path, w, h, len, t[RUNS / 2]);
    }
    free(data);
    fclose(fp);
  }
  free(src), free(dst);
  return 0;
}
