/* dtype.c: KServe/Triton data types and tensor shape arithmetic. All arithmetic on sizes
 * that come from outside is overflow-checked. */
#include "cinfer/types.h"

#include <string.h>

static const struct {
  const char *name, *config_name;
  size_t size;
} dtypes[CINFER_TYPE_COUNT_] = {
    [CINFER_TYPE_INVALID] = {"INVALID", "TYPE_INVALID", 0},
    [CINFER_TYPE_BOOL] = {"BOOL", "TYPE_BOOL", 1},
    [CINFER_TYPE_UINT8] = {"UINT8", "TYPE_UINT8", 1},
    [CINFER_TYPE_UINT16] = {"UINT16", "TYPE_UINT16", 2},
    [CINFER_TYPE_UINT32] = {"UINT32", "TYPE_UINT32", 4},
    [CINFER_TYPE_UINT64] = {"UINT64", "TYPE_UINT64", 8},
    [CINFER_TYPE_INT8] = {"INT8", "TYPE_INT8", 1},
    [CINFER_TYPE_INT16] = {"INT16", "TYPE_INT16", 2},
    [CINFER_TYPE_INT32] = {"INT32", "TYPE_INT32", 4},
    [CINFER_TYPE_INT64] = {"INT64", "TYPE_INT64", 8},
    [CINFER_TYPE_FP16] = {"FP16", "TYPE_FP16", 2},
    [CINFER_TYPE_FP32] = {"FP32", "TYPE_FP32", 4},
    [CINFER_TYPE_FP64] = {"FP64", "TYPE_FP64", 8},
    [CINFER_TYPE_BYTES] = {"BYTES", "TYPE_STRING", 0},
    [CINFER_TYPE_BF16] = {"BF16", "TYPE_BF16", 2},
};

size_t cinfer_dtype_size(cinfer_dtype t) {
  return (t > 0 && t < CINFER_TYPE_COUNT_) ? dtypes[t].size : 0;
}

const char *cinfer_dtype_name(cinfer_dtype t) {
  return (t > 0 && t < CINFER_TYPE_COUNT_) ? dtypes[t].name : "INVALID";
}

const char *cinfer_dtype_config_name(cinfer_dtype t) {
  return (t > 0 && t < CINFER_TYPE_COUNT_) ? dtypes[t].config_name : "TYPE_INVALID";
}

cinfer_dtype cinfer_dtype_parse(const char *s, size_t n) {
  for (int t = 1; t < CINFER_TYPE_COUNT_; t++) {
    const char *a = dtypes[t].name, *b = dtypes[t].config_name;
    if ((strlen(a) == n && memcmp(a, s, n) == 0) || (strlen(b) == n && memcmp(b, s, n) == 0))
      return (cinfer_dtype)t;
  }
  return CINFER_TYPE_INVALID;
}

int64_t cinfer_shape_elements(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return -1;
    if (__builtin_mul_overflow(n, shape[i], &n)) return -1;
  }
  return n;
}

const char *cinfer_memory_type_name(cinfer_memory_type t) {
  switch (t) {
  case CINFER_MEMORY_CPU: return "CPU";
  case CINFER_MEMORY_CPU_PINNED: return "CPU_PINNED";
  case CINFER_MEMORY_GPU: return "GPU";
  default: return "INVALID";
  }
}

cinfer_status *cinfer_tensor_check(const cinfer_tensor *t) {
  const char *name = t->name ? t->name : "";
  if (t->memory_type != CINFER_MEMORY_CPU && t->memory_type != CINFER_MEMORY_CPU_PINNED)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "tensor '%s' is in %s memory (memory type %d, device %d); this "
                             "server reads and writes CPU memory only",
                             name, cinfer_memory_type_name(t->memory_type), (int)t->memory_type,
                             (int)t->device_id);
  if (t->ndim < 0 || t->ndim > CINFER_MAX_DIMS)
    return cinfer_status_new(CINFER_INVALID_ARG, "tensor '%s' has %d dimensions (at most %d)",
                             name, t->ndim, CINFER_MAX_DIMS);
  int64_t elems = cinfer_shape_elements(t->shape, t->ndim);
  if (elems < 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "tensor '%s' has an invalid shape", name);
  if (t->dtype == CINFER_TYPE_BYTES) {
    const unsigned char *p = t->data;
    size_t off = 0;
    for (int64_t i = 0; i < elems; i++) {
      if (t->byte_size - off < 4)
        return cinfer_status_new(CINFER_INVALID_ARG,
                                 "BYTES tensor '%s': element %lld of %lld is missing its length",
                                 name, (long long)i, (long long)elems);
      uint32_t len = (uint32_t)p[off] | (uint32_t)p[off + 1] << 8 |
                     (uint32_t)p[off + 2] << 16 | (uint32_t)p[off + 3] << 24;
      off += 4;
      if (len > t->byte_size - off)
        return cinfer_status_new(CINFER_INVALID_ARG,
                                 "BYTES tensor '%s': element %lld claims %u bytes, only %zu remain",
                                 name, (long long)i, len, t->byte_size - off);
      off += len;
    }
    if (off != t->byte_size)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "BYTES tensor '%s': %zu bytes left over after %lld elements",
                               name, t->byte_size - off, (long long)elems);
    return NULL;
  }
  size_t es = cinfer_dtype_size(t->dtype);
  if (es == 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "tensor '%s' has an invalid datatype", name);
  size_t want;
  if (__builtin_mul_overflow((size_t)elems, es, &want))
    return cinfer_status_new(CINFER_INVALID_ARG, "tensor '%s' is too large", name);
  if (want != t->byte_size)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "tensor '%s': shape and datatype %s need %zu bytes, got %zu", name,
                             cinfer_dtype_name(t->dtype), want, t->byte_size);
  return NULL;
}
