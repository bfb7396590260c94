/* ops_util.h: helpers shared by the operator files (infer/exec conventions: see onnx_impl.h). */
#ifndef CINFER_ONNX_OPS_UTIL_H
#define CINFER_ONNX_OPS_UTIL_H
#include <math.h>
#include <string.h>

#include "backends/onnx/onnx_impl.h"

/* FP16 and BF16 are computed in float/double by the generic paths (ot_get_f) and rounded
 * once when stored (ot_set_f) */
static inline bool dt_is_float(cinfer_dtype t) {
  return t == CINFER_TYPE_FP32 || t == CINFER_TYPE_FP64 || t == CINFER_TYPE_FP16 ||
         t == CINFER_TYPE_BF16;
}
static inline bool dt_is_unsigned(cinfer_dtype t) {
  return t == CINFER_TYPE_UINT8 || t == CINFER_TYPE_UINT16 || t == CINFER_TYPE_UINT32 ||
         t == CINFER_TYPE_UINT64 || t == CINFER_TYPE_BOOL;
}
static inline bool dt_is_int(cinfer_dtype t) {
  return t == CINFER_TYPE_INT8 || t == CINFER_TYPE_INT16 || t == CINFER_TYPE_INT32 ||
         t == CINFER_TYPE_INT64 || t == CINFER_TYPE_UINT8 || t == CINFER_TYPE_UINT16 ||
         t == CINFER_TYPE_UINT32 || t == CINFER_TYPE_UINT64;
}
static inline bool dt_is_numeric(cinfer_dtype t) { return dt_is_float(t) || dt_is_int(t); }

static inline void set_shape(ot *o, cinfer_dtype dt, int ndim, const int64_t *dims) {
  o->dtype = dt;
  o->ndim = ndim;
  for (int i = 0; i < ndim; i++) o->dims[i] = dims[i];
}
static inline void copy_shape(ot *o, const ot *i) { set_shape(o, i->dtype, i->ndim, i->dims); }

/* Normalises a possibly negative axis against rank r; -1 when out of range. */
static inline int norm_axis(int64_t a, int r) {
  if (a < 0) a += r;
  return a < 0 || a >= r ? -1 : (int)a;
}

#define REQUIRE_STATIC(n, t, what)                                                     \
  do {                                                                                 \
    if (!(t) || !(t)->data)                                                            \
      return NODE_ERR(n, CINFER_UNSUPPORTED,                                           \
                      "%s must be known when the plan is built (data-dependent shapes " \
                      "are not supported)", what);                                     \
  } while (0)

#define REQUIRE_DTYPE(n, t, cond)                                                     \
  do {                                                                                \
    if (!(cond))                                                                      \
      return NODE_ERR(n, CINFER_UNSUPPORTED, "input type %s is not supported",       \
                      cinfer_dtype_name((t)->dtype));                                 \
  } while (0)

static inline int64_t prod(const int64_t *d, int a, int b) {
  int64_t p = 1;
  for (int i = a; i < b; i++) p *= d[i];
  return p;
}


/* Convolution / pooling geometry with 1..3 spatial dims (unused trailing dims are 1). */
typedef struct conv_geom {
  int sp;                       /* spatial rank */
  int64_t N, C, M, G;           /* batch, in channels, out channels, groups */
  int64_t in[3], k[3], out[3], stride[3], dil[3], pb[3], pe[3];
} conv_geom;
/* Fills g from the node's attributes and the input shape; kshape from W (conv) or the
 * kernel_shape attribute (pooling, kshape NULL). Validates everything. */
cinfer_status *conv_geom_make(const onnx_node *n, const ot *x, const int64_t *kshape,
                              bool pool, conv_geom *g);
/* ops_cast.c */
cinfer_status *cast_infer(const onnx_node *n, ot **in, ot **out);
cinfer_status *castlike_infer(const onnx_node *n, ot **in, ot **out);
cinfer_status *cast_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out);
/* in -> out's dtype (same shape) */
cinfer_status *cast_to(onnx_exec *x, const onnx_node *n, const ot *in, ot *out);
void clip_bounds(const onnx_node *n, ot **in, double *lo, double *hi);
#endif
