/* elem.h: read element i of a typed buffer as a double (comparisons, reference kernels).
 * `other` is returned for types without a numeric reading (BYTES, and the 16-bit floats,
 * which callers convert themselves). */
#ifndef CINFER_CORE_ELEM_H
#define CINFER_CORE_ELEM_H

#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

static inline double cinfer_elem_f64(cinfer_dtype dt, const void *data, size_t i, double other) {
  switch (dt) {
    case CINFER_TYPE_FP32: return ((const float *)data)[i];
    case CINFER_TYPE_FP64: return ((const double *)data)[i];
    case CINFER_TYPE_INT64: return (double)((const int64_t *)data)[i];
    case CINFER_TYPE_INT32: return ((const int32_t *)data)[i];
    case CINFER_TYPE_INT16: return ((const int16_t *)data)[i];
    case CINFER_TYPE_INT8: return ((const int8_t *)data)[i];
    case CINFER_TYPE_UINT8: case CINFER_TYPE_BOOL: return ((const uint8_t *)data)[i];
    case CINFER_TYPE_UINT16: return ((const uint16_t *)data)[i];
    case CINFER_TYPE_UINT32: return ((const uint32_t *)data)[i];
    case CINFER_TYPE_UINT64: return (double)((const uint64_t *)data)[i];
    default: return other;
  }
}

#endif
