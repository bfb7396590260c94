/* ops_cast.c: Cast and CastLike between every element type the engine holds (BOOL,
 * INT8..INT64, UINT8..UINT64, FP16, BF16, FP32, FP64, STRING), with ONNX Runtime's
 * results on x86-64, measured against onnxruntime 1.32 (tests/integration/test_onnx_types.py
 * compares every pair):
 *   - integer -> integer: static_cast (the low bits, two's complement);
 *   - to BOOL: v != 0 (NaN is true);
 *   - FP16 / BF16 are read as float; to FP16 / BF16 goes through float (so a double is
 *     rounded twice, as ORT does: FP64 -> float -> half, round to nearest even each time);
 *   - float -> integer truncates toward zero; out of range (ONNX leaves it undefined) gives
 *     what x86's cvttss2si/cvttsd2si give ORT: for INT8/16/32 and UINT8/16 the 32-bit
 *     conversion (INT32_MIN's bits when out of range) and its low bits; INT64 the 64-bit one
 *     (INT64_MIN); UINT32 / UINT64 the unsigned sequence (x below 2^31 / 2^63: the signed
 *     conversion, else the conversion of x - 2^31 / 2^63 with the top bit flipped), except
 *     FP16 -> UINT32, the low bits of the 64-bit conversion;
 *   - number -> STRING: integers in decimal, BOOL "1"/"0", floats printf("%.8g") with
 *     "NaN", "INF", "-INF";
 *   - STRING -> number: std::stod / stoll / stoull as ORT calls them: leading white space,
 *     a sign and the longest numeric prefix ("12abc" is 12, "0x10" is 16 as a float and 0
 *     as an integer); no number at all, or one out of the range of double / long long /
 *     unsigned long long, is an error naming the node, the element and the string. The
 *     parsed value is then cast as above (BOOL parses as unsigned).
 * No conversion here has undefined behaviour in C (every float -> integer is range-checked
 * first). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/ops_util.h"
#include "core/half.h"

static bool is_float_t(cinfer_dtype t) {
  return t == CINFER_TYPE_FP32 || t == CINFER_TYPE_FP64 || t == CINFER_TYPE_FP16 || t == CINFER_TYPE_BF16;
}
static bool is_unsigned_t(cinfer_dtype t) {
  return t == CINFER_TYPE_UINT8 || t == CINFER_TYPE_UINT16 || t == CINFER_TYPE_UINT32 ||
         t == CINFER_TYPE_UINT64 || t == CINFER_TYPE_BOOL;
}

/* x86 cvtt*2si: truncation, the "integer indefinite" value when out of range or NaN */
static int32_t cvt32(double x) { return x > -2147483649.0 && x < 2147483648.0 ? (int32_t)x : INT32_MIN; }
static int64_t cvt64(double x) {
  return x >= -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : INT64_MIN;
}

/* the bits ORT stores for float x (of type `from`) cast to integer type t */
static uint64_t float_to_int_bits(double x, cinfer_dtype from, cinfer_dtype t) {
  if (t == CINFER_TYPE_UINT32 && from == CINFER_TYPE_FP16)
    return (uint32_t)cvt64(x); /* ORT's scalar path for FP16: the 64-bit conversion */
  switch (t) {
    case CINFER_TYPE_INT64: return (uint64_t)cvt64(x);
    case CINFER_TYPE_UINT32:
      return x >= 2147483648.0 ? (uint32_t)cvt32(x - 2147483648.0) ^ 0x80000000u : (uint32_t)cvt32(x);
    case CINFER_TYPE_UINT64:
      return x >= 9223372036854775808.0 ? (uint64_t)cvt64(x - 9223372036854775808.0) ^ 0x8000000000000000ull
                                        : (uint64_t)cvt64(x);
    default: return (uint64_t)(int64_t)cvt32(x); /* INT8/16/32, UINT8/16: low bits */
  }
}

/* element i of `in` as a double (floats) */
static double get_float(const ot *in, int64_t i) {
  if (in->dtype == CINFER_TYPE_FP32) return ((const float *)in->data)[i];
  return ot_get_f(in, i);
}

static void store_float(ot *o, int64_t i, double v) {
  switch (o->dtype) {
    case CINFER_TYPE_FP32: ((float *)o->data)[i] = (float)v; break;
    case CINFER_TYPE_FP64: ((double *)o->data)[i] = v; break;
    case CINFER_TYPE_FP16: ((uint16_t *)o->data)[i] = float_to_half((float)v); break;
    case CINFER_TYPE_BF16: ((uint16_t *)o->data)[i] = float_to_bf16((float)v); break;
    default: break;
  }
}

/* integer bits (sign-extended for signed sources) -> a float type */
static double int_to_double_for(uint64_t bits, bool src_unsigned, cinfer_dtype dst) {
  /* to FP32/FP16/BF16 ORT converts the integer to float first (one rounding), to FP64 to
   * double; converting through double first could round twice for 64-bit values */
  if (dst == CINFER_TYPE_FP64) return src_unsigned ? (double)bits : (double)(int64_t)bits;
  return src_unsigned ? (double)(float)bits : (double)(float)(int64_t)bits;
}

static cinfer_status *to_string(onnx_exec *x, const onnx_node *n, const ot *in, ot *out) {
  int64_t c = ot_numel(in);
  ostr *d = out->data;
  if (!x->heap) return NODE_ERR(n, CINFER_INTERNAL, "no string heap for Cast to STRING");
  for (int64_t i = 0; i < c; i++) {
    char buf[64];
    int len;
    if (in->dtype == CINFER_TYPE_BOOL) len = snprintf(buf, sizeof buf, "%d", ((const uint8_t *)in->data)[i] != 0);
    else if (is_float_t(in->dtype)) {
      double v = get_float(in, i);
      if (v != v) len = snprintf(buf, sizeof buf, "NaN");
      else if (v == __builtin_inf()) len = snprintf(buf, sizeof buf, "INF");
      else if (v == -__builtin_inf()) len = snprintf(buf, sizeof buf, "-INF");
      else len = snprintf(buf, sizeof buf, "%.8g", v);
    } else if (is_unsigned_t(in->dtype)) len = snprintf(buf, sizeof buf, "%llu", (unsigned long long)ot_get_bits(in, i));
    else len = snprintf(buf, sizeof buf, "%lld", (long long)(int64_t)ot_get_bits(in, i));
    char *p = ostr_heap_alloc(x->heap, (size_t)len);
    if (!p) return NODE_ERR(n, CINFER_RESOURCE_EXHAUSTED, "the strings of output 0 are too large");
    memcpy(p, buf, (size_t)len);
    d[i].p = p;
    d[i].n = (uint64_t)len;
  }
  return NULL;
}

static cinfer_status *parse_err(const onnx_node *n, int64_t i, const ostr *s, cinfer_dtype to, const char *why) {
  size_t shown = s->n > 40 ? 40 : (size_t)s->n;
  return NODE_ERR(n, CINFER_INVALID_ARG, "element %lld: '%.*s%s' %s (%s)", (long long)i, (int)shown,
                  s->p ? s->p : "", s->n > 40 ? "..." : "", why, cinfer_dtype_name(to));
}

static cinfer_status *from_string(const onnx_node *n, const ot *in, ot *out) {
  int64_t c = ot_numel(in);
  const ostr *s = in->data;
  cinfer_dtype to = out->dtype;
  char small[128], *big = NULL;
  cinfer_status *st = NULL;
  for (int64_t i = 0; i < c && !st; i++) {
    char *z = small; /* a NUL-terminated copy for strto* */
    if (s[i].n >= sizeof small) {
      free(big);
      if (s[i].n >= (uint64_t)ONNX_MAX_TENSOR_BYTES || !(big = malloc((size_t)s[i].n + 1)))
        return NODE_ERR(n, CINFER_RESOURCE_EXHAUSTED, "element %lld: string of %llu bytes is too long",
                        (long long)i, (unsigned long long)s[i].n);
      z = big;
    }
    if (s[i].n) memcpy(z, s[i].p, (size_t)s[i].n);
    z[s[i].n] = 0;
    char *end;
    errno = 0;
    if (to == CINFER_TYPE_BYTES) {
      /* not reached: STRING -> STRING copies the descriptors */
    } else if (is_float_t(to)) {
      double v = strtod(z, &end);
      if (end == z) st = parse_err(n, i, &s[i], to, "is not a number");
      else if (errno == ERANGE) st = parse_err(n, i, &s[i], to, "is out of the range of a double");
      else store_float(out, i, v);
    } else if (is_unsigned_t(to)) {
      unsigned long long v = strtoull(z, &end, 10);
      if (end == z) st = parse_err(n, i, &s[i], to, "is not an integer");
      else if (errno == ERANGE) st = parse_err(n, i, &s[i], to, "is out of the range of unsigned long long");
      else ot_set_i(out, i, (int64_t)v);
    } else {
      long long v = strtoll(z, &end, 10);
      if (end == z) st = parse_err(n, i, &s[i], to, "is not an integer");
      else if (errno == ERANGE) st = parse_err(n, i, &s[i], to, "is out of the range of long long");
      else ot_set_i(out, i, (int64_t)v);
    }
  }
  free(big);
  return st;
}

cinfer_status *cast_to(onnx_exec *x, const onnx_node *n, const ot *in, ot *out) {
  cinfer_dtype from = in->dtype, to = out->dtype;
  int64_t c = ot_numel(in);
  if (from == to) { /* also STRING -> STRING: the descriptors */
    if (out->data != in->data && ot_nbytes(in)) memmove(out->data, in->data, ot_nbytes(in));
    return NULL;
  }
  if (to == CINFER_TYPE_BYTES) return to_string(x, n, in, out);
  if (from == CINFER_TYPE_BYTES) return from_string(n, in, out);
  if (is_float_t(from)) {
    for (int64_t i = 0; i < c; i++) {
      double v = get_float(in, i);
      if (is_float_t(to)) store_float(out, i, v);
      else if (to == CINFER_TYPE_BOOL) ((uint8_t *)out->data)[i] = v != 0 || v != v;
      else ot_set_i(out, i, (int64_t)float_to_int_bits(v, from, to));
    }
    return NULL;
  }
  bool uns = is_unsigned_t(from); /* integer or BOOL source */
  for (int64_t i = 0; i < c; i++) {
    uint64_t b = ot_get_bits(in, i);
    if (is_float_t(to)) store_float(out, i, int_to_double_for(b, uns, to));
    else ot_set_i(out, i, (int64_t)b); /* BOOL: != 0 */
  }
  return NULL;
}

static bool castable(cinfer_dtype t) {
  return t != CINFER_TYPE_INVALID && (ot_esize(t) > 0);
}

cinfer_status *cast_infer(const onnx_node *n, ot **in, ot **out) {
  int64_t to_p = attr_i(n, "to", 0);
  cinfer_dtype to = to_p >= INT32_MIN && to_p <= INT32_MAX ? onnx_dtype_from_proto((int32_t)to_p) : CINFER_TYPE_INVALID;
  if (!castable(to))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "cast to ONNX type %lld is not supported", (long long)to_p);
  if (!castable(in[0]->dtype))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "cast from %s is not supported", cinfer_dtype_name(in[0]->dtype));
  copy_shape(out[0], in[0]);
  out[0]->dtype = to;
  return NULL;
}

cinfer_status *castlike_infer(const onnx_node *n, ot **in, ot **out) {
  if (!castable(in[0]->dtype) || !castable(in[1]->dtype))
    return NODE_ERR(n, CINFER_UNSUPPORTED, "cast from %s to %s is not supported",
                    cinfer_dtype_name(in[0]->dtype), cinfer_dtype_name(in[1]->dtype));
  copy_shape(out[0], in[0]);
  out[0]->dtype = in[1]->dtype;
  return NULL;
}

cinfer_status *cast_exec(onnx_exec *x, const onnx_node *n, ot **in, ot **out) {
  return cast_to(x, n, in[0], out[0]);
}
