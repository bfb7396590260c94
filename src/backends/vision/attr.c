/* attr.c: the arithmetic of attribute_decode. */
#include "backends/vision/vision.h"

#include <math.h>

double vis_ssrnet_merge(const float *const prob[], const float *const offset[],
                        const float delta[], const int stage_num[], int stages,
                        float lambda_local, float lambda_d) {
  double total = 0, den = 1;
  for (int k = 0; k < stages; k++) {
    double s = 0;
    for (int i = 0; i < stage_num[k]; i++)
      s += ((double)i + lambda_local * (double)offset[k][i]) * (double)prob[k][i];
    den *= stage_num[k] * (1.0 + lambda_d * (double)delta[k]);
    total += s / den;
  }
  return total;
}

int vis_softmax_argmax(float *v, int n) {
  int best = 0;
  float mx = v[0];
  for (int i = 1; i < n; i++)
    if (v[i] > mx) mx = v[i], best = i;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += (v[i] = expf(v[i] - mx));
  for (int i = 0; i < n; i++) v[i] = (float)(v[i] / sum);
  return best;
}

void vis_l2_normalize(const float *v, float *out, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
  double inv = s > 0 ? 1.0 / sqrt(s) : 0;
  for (int i = 0; i < n; i++) out[i] = (float)(v[i] * inv);
}
