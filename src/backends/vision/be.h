/* be.h: what the five vision backends share: parameters from config.pbtxt (every key
 * checked against the backend's list, so a misspelt parameter fails the load instead of
 * being ignored), config input/output checks, and request-input helpers. */
#ifndef CINFER_VISION_BE_H
#define CINFER_VISION_BE_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/vision/vision.h"
#include "cinfer/backend.h"

typedef struct vp {
  const cinfer_model_load_info *info;
  const char *backend;
} vp;

/* Checks that every key of the config's `parameters` is in `known` (NULL-terminated);
 * the error names the model, the parameter and the known ones. */
cinfer_status *vp_open(vp *p, const cinfer_model_load_info *info, const char *backend,
                       const char *const *known);
/* Each reads parameter `key` (its string_value), leaving *out = def when absent; a value
 * that does not parse or is out of range fails with a reason naming the parameter. */
cinfer_status *vp_int(const vp *p, const char *key, int64_t def, int64_t lo, int64_t hi,
                      int64_t *out);
cinfer_status *vp_float(const vp *p, const char *key, double def, double lo, double hi,
                        float *out);
cinfer_status *vp_bool(const vp *p, const char *key, bool def, bool *out);
/* Comma-separated numbers: exactly n of them when n_min == n_max, else n_min..n_max
 * (*n receives the count). */
cinfer_status *vp_floats(const vp *p, const char *key, int n_min, int n_max, float *out, int *n);
/* One of `choices` (NULL-terminated); *out = index. */
cinfer_status *vp_enum(const vp *p, const char *key, int def, const char *const *choices, int *out);
const char *vp_str(const vp *p, const char *key);
cinfer_status *vp_err(const vp *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The normalisation parameters shared by image_preprocess and face_crop:
 * scale, mean, std, color (rgb|bgr), layout (nchw|nhwc). */
#define VP_NORM_KEYS "scale", "mean", "std", "color", "layout"
cinfer_status *vp_norm(const vp *p, vis_norm *n);

/* Config output/input i must exist with dtype (one of two when alt != INVALID) and, when
 * ndim >= 0, that many dims; dims[] entries >= 0 must match exactly (-1 in `want` = any). */
cinfer_status *vb_check_io(const vp *p, bool input, uint32_t i, cinfer_dtype dtype,
                           cinfer_dtype alt, int ndim, const int64_t *want, cinfer_config_io *io);

/* The request's tensor for config input `name`, checked to be dtype with `elements`
 * elements (elements < 0: any), in host memory, with a consistent byte size. */
cinfer_status *vb_input(const cinfer_request *r, const char *name, cinfer_dtype dtype,
                        int64_t elements, const cinfer_tensor **t);

/* Writes src (n floats) as FP32 or FP16 to dst. */
void vb_store(void *dst, cinfer_dtype dtype, const float *src, size_t n);

/* Appends a BYTES element (4-byte little-endian length, then the bytes). */
size_t vb_put_bytes(uint8_t *dst, const char *s, size_t len);

/* Splits a comma-separated label list (or, for a file, one per line) into a malloc'd
 * array of malloc'd strings. */
cinfer_status *vb_labels(const vp *p, const char *list_key, const char *file_key, char ***labels,
                         int *n);
void vb_labels_free(char **labels, int n);

#endif
