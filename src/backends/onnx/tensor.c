/* tensor.c: the engine's tensor (ot) helpers, and TensorProto <-> tensor conversion with
 * full validation (dims, byte counts, typed fields, external data paths). Also the
 * test-data file readers/writers (.pb TensorProto, .npy). Host byte order is assumed
 * little-endian, as ONNX raw_data is. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/onnx/onnx_impl.h"
#include "backends/onnx/tensor_pb.h"
#include "core/elem.h"
#include "core/half.h"

int64_t ot_numel(const ot *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->dims[i] < 0) return -1;
    if (t->dims[i] && n > INT64_MAX / t->dims[i]) return -1;
    n *= t->dims[i];
  }
  return n;
}

size_t ot_nbytes(const ot *t) {
  int64_t n = ot_numel(t);
  return n < 0 ? 0 : (size_t)n * ot_esize(t->dtype);
}

ot *ot_new(cinfer_dtype dt, int ndim, const int64_t *dims) {
  ot *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
  int64_t n = ot_numel(t);
  size_t es = ot_esize(dt);
  if (n < 0 || es == 0 || (uint64_t)n > (uint64_t)ONNX_MAX_TENSOR_BYTES / es) {
    free(t);
    return NULL;
  }
  size_t bytes = ((size_t)n * es + 63) & ~(size_t)63;
  if (bytes == 0) bytes = 64;
  t->data = aligned_alloc(64, bytes);
  if (!t->data) {
    free(t);
    return NULL;
  }
  memset(t->data, 0, bytes);
  return t;
}

void ot_free(ot *t) {
  if (!t) return;
  free(t->data);
  free(t);
}

ot *ot_clone(const ot *t) {
  if (t->dtype == CINFER_TYPE_BYTES) return ot_new_strings(t->ndim, t->dims, t->data);
  ot *c = ot_new(t->dtype, t->ndim, t->dims);
  if (c && ot_nbytes(t)) memcpy(c->data, t->data, ot_nbytes(t));
  return c;
}

static bool is_int_type(cinfer_dtype t) {
  return t == CINFER_TYPE_INT8 || t == CINFER_TYPE_INT16 || t == CINFER_TYPE_INT32 ||
         t == CINFER_TYPE_INT64 || t == CINFER_TYPE_UINT8 || t == CINFER_TYPE_UINT16 ||
         t == CINFER_TYPE_UINT32 || t == CINFER_TYPE_UINT64;
}

double ot_get_f(const ot *t, int64_t i) {
  if (t->dtype == CINFER_TYPE_FP16) return half_to_float(((const uint16_t *)t->data)[i]);
  if (t->dtype == CINFER_TYPE_BF16) return bf16_to_float(((const uint16_t *)t->data)[i]);
  return cinfer_elem_f64(t->dtype, t->data, (size_t)i, 0);
}

uint64_t ot_get_bits(const ot *t, int64_t i) {
  switch (t->dtype) {
    case CINFER_TYPE_INT8: return (uint64_t)(int64_t)((const int8_t *)t->data)[i];
    case CINFER_TYPE_INT16: return (uint64_t)(int64_t)((const int16_t *)t->data)[i];
    case CINFER_TYPE_INT32: return (uint64_t)(int64_t)((const int32_t *)t->data)[i];
    case CINFER_TYPE_INT64: return (uint64_t)((const int64_t *)t->data)[i];
    case CINFER_TYPE_UINT8: case CINFER_TYPE_BOOL: return ((const uint8_t *)t->data)[i];
    case CINFER_TYPE_UINT16: return ((const uint16_t *)t->data)[i];
    case CINFER_TYPE_UINT32: return ((const uint32_t *)t->data)[i];
    case CINFER_TYPE_UINT64: return ((const uint64_t *)t->data)[i];
    default: return (uint64_t)ot_get_i(t, i);
  }
}

void ot_set_i(ot *t, int64_t i, int64_t v) {
  uint64_t u = (uint64_t)v;
  switch (t->dtype) {
    case CINFER_TYPE_INT8: case CINFER_TYPE_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)u; break;
    case CINFER_TYPE_BOOL: ((uint8_t *)t->data)[i] = u != 0; break;
    case CINFER_TYPE_INT16: case CINFER_TYPE_UINT16: ((uint16_t *)t->data)[i] = (uint16_t)u; break;
    case CINFER_TYPE_INT32: case CINFER_TYPE_UINT32: ((uint32_t *)t->data)[i] = (uint32_t)u; break;
    case CINFER_TYPE_INT64: case CINFER_TYPE_UINT64: ((uint64_t *)t->data)[i] = u; break;
    default: ot_set_f(t, i, (double)v); break;
  }
}

int64_t ot_get_i(const ot *t, int64_t i) {
  switch (t->dtype) {
    case CINFER_TYPE_INT64: return ((const int64_t *)t->data)[i];
    case CINFER_TYPE_INT32: return ((const int32_t *)t->data)[i];
    case CINFER_TYPE_UINT64: return (int64_t)((const uint64_t *)t->data)[i];
    case CINFER_TYPE_FP32: case CINFER_TYPE_FP64: case CINFER_TYPE_FP16: case CINFER_TYPE_BF16: {
      double d = ot_get_f(t, i);
      if (!(d > -9.2e18 && d < 9.2e18)) return d > 0 ? INT64_MAX : INT64_MIN;
      return (int64_t)d;
    }
    default: return (int64_t)ot_get_f(t, i);
  }
}

void ot_set_f(ot *t, int64_t i, double v) {
  switch (t->dtype) {
    case CINFER_TYPE_FP32: ((float *)t->data)[i] = (float)v; break;
    case CINFER_TYPE_FP64: ((double *)t->data)[i] = v; break;
    case CINFER_TYPE_FP16: ((uint16_t *)t->data)[i] = float_to_half((float)v); break;
    case CINFER_TYPE_BF16: ((uint16_t *)t->data)[i] = float_to_bf16((float)v); break;
    case CINFER_TYPE_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
    case CINFER_TYPE_UINT64:
      if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) {
        ((uint64_t *)t->data)[i] = (uint64_t)v;
        break;
      }
      /* fall through */
    default:
      if (is_int_type(t->dtype)) /* truncate toward zero, keep the low bits; NaN and out of
                                    int64 range: INT64_MIN's bits (x86's cvttsd2si) */
        ot_set_i(t, i, v > -9223372036854775808.0 && v < 9223372036854775808.0 ? (int64_t)v : INT64_MIN);
      break;
  }
}

void ot_shape_str(const ot *t, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int i = 0; i < t->ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)t->dims[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

cinfer_dtype onnx_dtype_from_proto(int32_t dt) {
  switch (dt) {
    case 1: return CINFER_TYPE_FP32;
    case 2: return CINFER_TYPE_UINT8;
    case 3: return CINFER_TYPE_INT8;
    case 4: return CINFER_TYPE_UINT16;
    case 5: return CINFER_TYPE_INT16;
    case 6: return CINFER_TYPE_INT32;
    case 7: return CINFER_TYPE_INT64;
    case 9: return CINFER_TYPE_BOOL;
    case 10: return CINFER_TYPE_FP16;
    case 11: return CINFER_TYPE_FP64;
    case 12: return CINFER_TYPE_UINT32;
    case 13: return CINFER_TYPE_UINT64;
    case 8: return CINFER_TYPE_BYTES;
    case 16: return CINFER_TYPE_BF16;
    default: return CINFER_TYPE_INVALID;
  }
}

int32_t onnx_dtype_to_proto(cinfer_dtype dt) {
  for (int32_t p = 1; p <= 16; p++)
    if (onnx_dtype_from_proto(p) == dt) return p;
  return 0;
}

/* ---- TensorProto -> ot ---- */

static bool path_is_safe(const char *p) {
  if (!p || !*p || p[0] == '/') return false;
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 2 && s[0] == '.' && s[1] == '.') return false;
    if (!e) break;
    s = e + 1;
  }
  return true;
}

static cinfer_status *read_external(const Onnx__TensorProto *tp, const char *base_dir,
                                    void *dst, size_t nbytes, const char *what) {
  if (!base_dir)
    return cinfer_status_new(CINFER_UNSUPPORTED,
                             "%s: external data needs the model's folder (load from a file)",
                             what);
  const char *loc = NULL;
  int64_t off = 0, len = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (!e->key || !e->value) continue;
    char *end;
    if (!strcmp(e->key, "location")) loc = e->value;
    else if (!strcmp(e->key, "offset") || !strcmp(e->key, "length")) {
      errno = 0;
      long long v = strtoll(e->value, &end, 10);
      if (errno || *end || v < 0)
        return cinfer_status_new(CINFER_INVALID_ARG, "%s: external data %s '%s' is invalid",
                                 what, e->key, e->value);
      if (!strcmp(e->key, "offset")) off = v; else len = v;
    }
  }
  if (!path_is_safe(loc))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "%s: external data location '%s' must be a relative path inside "
                             "the model folder", what, loc ? loc : "(missing)");
  if (len >= 0 && (uint64_t)len != nbytes)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "%s: external data length %lld, tensor needs %zu bytes", what,
                             (long long)len, nbytes);
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s", base_dir, loc) >= (int)sizeof path)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: external data path too long", what);
  FILE *f = fopen(path, "rb");
  if (!f)
    return cinfer_status_new(CINFER_NOT_FOUND, "%s: external data file '%s': %s", what, path,
                             strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || (uint64_t)off > (uint64_t)st.st_size ||
      nbytes > (uint64_t)st.st_size - (uint64_t)off) {
    fclose(f);
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "%s: external data offset %lld + %zu bytes is past the end of '%s'",
                             what, (long long)off, nbytes, path);
  }
  bool ok = fseeko(f, off, SEEK_SET) == 0 && fread(dst, 1, nbytes, f) == nbytes;
  fclose(f);
  return ok ? NULL
            : cinfer_status_new(CINFER_INVALID_ARG, "%s: cannot read external data '%s'", what,
                                path);
}

cinfer_status *onnx_tensor_from_proto(const Onnx__TensorProto *tp, const char *base_dir,
                                      ot **out) {
  *out = NULL;
  const char *nm = tp->name && *tp->name ? tp->name : "(unnamed)";
  char what[300];
  snprintf(what, sizeof what, "tensor '%s'", nm);
  if (tp->segment)
    return cinfer_status_new(CINFER_UNSUPPORTED, "%s: segmented tensors are not supported", what);
  cinfer_dtype dt = onnx_dtype_from_proto(tp->data_type);
  if (dt == CINFER_TYPE_INVALID)
    return cinfer_status_new(CINFER_UNSUPPORTED, "%s: data type %d is not supported", what,
                             (int)tp->data_type);
  if (tp->n_dims > OT_MAX_DIMS)
    return cinfer_status_new(CINFER_UNSUPPORTED, "%s: rank %zu exceeds %d", what, tp->n_dims,
                             OT_MAX_DIMS);
  int64_t dims[OT_MAX_DIMS];
  int64_t numel = 1;
  size_t es = ot_esize(dt);
  for (size_t i = 0; i < tp->n_dims; i++) {
    dims[i] = tp->dims[i];
    if (dims[i] < 0)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s: dim %zu is negative (%lld)", what, i,
                               (long long)dims[i]);
    if (dims[i] && numel > ONNX_MAX_TENSOR_BYTES / (int64_t)es / dims[i])
      return cinfer_status_new(CINFER_INVALID_ARG, "%s: dims too large (over %lld bytes)", what,
                               (long long)ONNX_MAX_TENSOR_BYTES);
    numel *= dims[i];
  }
  size_t nbytes = (size_t)numel * es;
  if (dt == CINFER_TYPE_BYTES) { /* STRING: string_data only (ONNX keeps no raw form) */
    if (tp->has_raw_data || (tp->has_data_location &&
                             tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL))
      return cinfer_status_new(CINFER_INVALID_ARG, "%s: a STRING tensor keeps its values in string_data "
                               "(raw_data and external data are not allowed)", what);
    if (tp->n_string_data != (size_t)numel)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s: string_data has %zu values, shape needs %lld",
                               what, tp->n_string_data, (long long)numel);
    ostr *tmp = malloc(sizeof *tmp * ((size_t)numel + 1));
    if (!tmp) return cinfer_status_oom(what);
    for (int64_t i = 0; i < numel; i++) {
      tmp[i].p = (const char *)tp->string_data[i].data;
      tmp[i].n = tp->string_data[i].len;
    }
    ot *t = ot_new_strings((int)tp->n_dims, dims, tmp);
    free(tmp);
    if (!t) return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "%s: strings too large (over %lld bytes)",
                                     what, (long long)ONNX_MAX_TENSOR_BYTES);
    *out = t;
    return NULL;
  }
  bool external = tp->has_data_location &&
                  tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  size_t n_typed = 0;
  const char *field = NULL;
  switch (dt) {
    case CINFER_TYPE_FP32: n_typed = tp->n_float_data; field = "float_data"; break;
    case CINFER_TYPE_INT64: n_typed = tp->n_int64_data; field = "int64_data"; break;
    case CINFER_TYPE_FP64: n_typed = tp->n_double_data; field = "double_data"; break;
    case CINFER_TYPE_UINT32: case CINFER_TYPE_UINT64:
      n_typed = tp->n_uint64_data; field = "uint64_data"; break;
    default: n_typed = tp->n_int32_data; field = "int32_data"; break;
  }
  if (!external && tp->has_raw_data && n_typed)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: both raw_data and %s are set", what,
                             field);
  if (!external && tp->has_raw_data && tp->raw_data.len != nbytes)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "%s: raw_data has %zu bytes, shape and type need %zu", what,
                             tp->raw_data.len, nbytes);
  if (!external && !tp->has_raw_data && n_typed != (size_t)numel)
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: %s has %zu values, shape needs %lld",
                             what, field, n_typed, (long long)numel);
  ot *t = ot_new(dt, (int)tp->n_dims, dims);
  if (!t) return cinfer_status_oom(what);
  if (external) {
    cinfer_status *st = read_external(tp, base_dir, t->data, nbytes, what);
    if (st) {
      ot_free(t);
      return st;
    }
  } else if (tp->has_raw_data) {
    if (nbytes) memcpy(t->data, tp->raw_data.data, nbytes);
  } else {
    for (int64_t i = 0; i < numel; i++) {
      switch (dt) {
        case CINFER_TYPE_FP32: ((float *)t->data)[i] = tp->float_data[i]; break;
        case CINFER_TYPE_INT64: ((int64_t *)t->data)[i] = tp->int64_data[i]; break;
        case CINFER_TYPE_FP64: ((double *)t->data)[i] = tp->double_data[i]; break;
        case CINFER_TYPE_UINT32: ((uint32_t *)t->data)[i] = (uint32_t)tp->uint64_data[i]; break;
        case CINFER_TYPE_UINT64: ((uint64_t *)t->data)[i] = tp->uint64_data[i]; break;
        case CINFER_TYPE_FP16: case CINFER_TYPE_BF16: case CINFER_TYPE_UINT16:
          ((uint16_t *)t->data)[i] = (uint16_t)tp->int32_data[i]; break;
        case CINFER_TYPE_INT16: ((int16_t *)t->data)[i] = (int16_t)tp->int32_data[i]; break;
        case CINFER_TYPE_INT32: ((int32_t *)t->data)[i] = tp->int32_data[i]; break;
        case CINFER_TYPE_INT8: ((int8_t *)t->data)[i] = (int8_t)tp->int32_data[i]; break;
        case CINFER_TYPE_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)tp->int32_data[i]; break;
        case CINFER_TYPE_BOOL: ((uint8_t *)t->data)[i] = tp->int32_data[i] != 0; break;
        default: break;
      }
    }
  }
  *out = t;
  return NULL;
}

/* ---- files ---- */

cinfer_status *onnx_read_file(const char *path, size_t max, void **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return cinfer_status_new(CINFER_NOT_FOUND, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: not a regular file", path);
  }
  if ((uint64_t)st.st_size > max) {
    fclose(f);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: %lld bytes exceeds the limit of %zu",
                             path, (long long)st.st_size, max);
  }
  size_t n = (size_t)st.st_size;
  void *b = malloc(n ? n : 1);
  if (!b || fread(b, 1, n, f) != n) {
    free(b);
    fclose(f);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: read failed", path);
  }
  fclose(f);
  *buf = b;
  *len = n;
  return NULL;
}

cinfer_status *onnx_tensor_read_pb(const char *path, cinfer_tensor *t, void **owned,
                                   char **name_owned) {
  *owned = NULL;
  if (name_owned) *name_owned = NULL;
  void *buf;
  size_t len;
  cinfer_status *st = onnx_read_file(path, ONNX_MAX_FILE_BYTES, &buf, &len);
  if (st) return st;
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, buf);
  free(buf);
  if (!tp) return cinfer_status_new(CINFER_INVALID_ARG, "%s: not a valid TensorProto", path);
  ot *o = NULL;
  st = onnx_tensor_from_proto(tp, NULL, &o);
  if (!st && name_owned && tp->name && *tp->name) *name_owned = strdup(tp->name);
  onnx__tensor_proto__free_unpacked(tp, NULL);
  if (st) return cinfer_status_prefix(st, "%s", path);
  memset(t, 0, sizeof *t);
  t->name = name_owned ? *name_owned : NULL;
  t->dtype = o->dtype;
  t->ndim = o->ndim;
  memcpy(t->shape, o->dims, sizeof o->dims);
  if (o->dtype == CINFER_TYPE_BYTES) { /* to the length-prefixed layout of cinfer_tensor */
    size_t nb = 0;
    int64_t n = ot_numel(o);
    void *packed = NULL;
    st = ostr_packed_size(o->data, n, &nb, path);
    if (!st && !(packed = malloc(nb ? nb : 1))) st = cinfer_status_oom(path);
    if (!st) ostr_pack(o->data, n, packed);
    ot_free(o);
    if (st) {
      if (name_owned) { free(*name_owned); *name_owned = NULL; }
      return st;
    }
    t->data = packed;
    t->byte_size = nb;
    *owned = packed;
    return NULL;
  }
  t->data = o->data;
  t->byte_size = ot_nbytes(o);
  *owned = o->data;
  free(o);
  return NULL;
}

cinfer_status *onnx_tensor_write_pb(const char *path, const cinfer_tensor *t) {
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[CINFER_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) dims[i] = t->shape[i];
  tp.n_dims = (size_t)t->ndim;
  tp.dims = dims;
  tp.has_data_type = 1;
  tp.data_type = onnx_dtype_to_proto(t->dtype);
  tp.name = (char *)(t->name ? t->name : "");
  ProtobufCBinaryData *strs = NULL;
  if (t->dtype == CINFER_TYPE_BYTES) { /* string_data, one entry per element */
    int64_t n = cinfer_shape_elements(t->shape, t->ndim);
    ostr *d = n >= 0 ? malloc(sizeof *d * ((size_t)n + 1)) : NULL;
    strs = d ? malloc(sizeof *strs * ((size_t)n + 1)) : NULL;
    cinfer_status *st = !strs ? cinfer_status_oom(path) : ostr_parse(t->data, t->byte_size, n, d, path);
    if (st) {
      free(d);
      free(strs);
      return st;
    }
    for (int64_t i = 0; i < n; i++) {
      strs[i].data = (uint8_t *)d[i].p;
      strs[i].len = d[i].n;
    }
    free(d);
    tp.n_string_data = (size_t)n;
    tp.string_data = strs;
  } else {
    tp.has_raw_data = 1;
    tp.raw_data.len = t->byte_size;
    tp.raw_data.data = (uint8_t *)t->data;
  }
  size_t n = onnx__tensor_proto__get_packed_size(&tp);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    free(strs);
    return cinfer_status_oom(NULL);
  }
  onnx__tensor_proto__pack(&tp, buf);
  free(strs);
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(buf, 1, n, f) == n;
  if (f && fclose(f)) ok = false;
  free(buf);
  return ok ? NULL : cinfer_status_new(CINFER_INVALID_ARG, "%s: write failed", path);
}

/* .npy v1/v2/v3: little-endian, C order only. */
cinfer_status *onnx_tensor_read_npy(const char *path, cinfer_tensor *t, void **owned) {
  *owned = NULL;
  void *buf;
  size_t len;
  cinfer_status *st = onnx_read_file(path, ONNX_MAX_FILE_BYTES, &buf, &len);
  if (st) return st;
  const uint8_t *b = buf;
  size_t hl, ho;
  if (len < 10 || memcmp(b, "\x93NUMPY", 6)) goto bad;
  if (b[6] == 1) { hl = b[8] | (size_t)b[9] << 8; ho = 10; }
  else { if (len < 12) goto bad; hl = b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24; ho = 12; }
  if (hl > len - ho) goto bad;
  char hdr[1024];
  if (hl >= sizeof hdr) goto bad;
  memcpy(hdr, b + ho, hl);
  hdr[hl] = 0;
  const char *d = strstr(hdr, "'descr':"), *fo = strstr(hdr, "'fortran_order':"),
             *sh = strstr(hdr, "'shape':");
  if (!d || !fo || !sh) goto bad;
  if (strstr(fo, "True") == fo + 17 || !strncmp(fo + 16, " True", 5)) {
    free(buf);
    return cinfer_status_new(CINFER_UNSUPPORTED, "%s: Fortran-order arrays are not supported", path);
  }
  static const struct { const char *s; cinfer_dtype t; } types[] = {
      {"<f4", CINFER_TYPE_FP32}, {"<f8", CINFER_TYPE_FP64}, {"<i8", CINFER_TYPE_INT64},
      {"<i4", CINFER_TYPE_INT32}, {"|u1", CINFER_TYPE_UINT8}, {"|i1", CINFER_TYPE_INT8},
      {"|b1", CINFER_TYPE_BOOL}, {"<f2", CINFER_TYPE_FP16}};
  cinfer_dtype dt = CINFER_TYPE_INVALID;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    if (strstr(d, types[i].s)) dt = types[i].t;
  if (dt == CINFER_TYPE_INVALID) {
    free(buf);
    return cinfer_status_new(CINFER_UNSUPPORTED, "%s: unsupported npy dtype", path);
  }
  memset(t, 0, sizeof *t);
  t->dtype = dt;
  const char *p = strchr(sh, '(');
  if (!p) goto bad;
  p++;
  while (*p && *p != ')') {
    while (*p == ' ' || *p == ',') p++;
    if (*p == ')') break;
    char *e;
    long long v = strtoll(p, &e, 10);
    if (e == p || v < 0 || t->ndim >= CINFER_MAX_DIMS) goto bad;
    t->shape[t->ndim++] = v;
    p = e;
  }
  int64_t n = cinfer_shape_elements(t->shape, t->ndim);
  size_t off = ho + hl;
  if (n < 0 || (uint64_t)n > (len - off) / cinfer_dtype_size(dt) ||
      (size_t)n * cinfer_dtype_size(dt) != len - off)
    goto bad;
  t->byte_size = (size_t)n * cinfer_dtype_size(dt);
  void *data = aligned_alloc(64, (t->byte_size + 63) & ~(size_t)63 ? (t->byte_size + 63) & ~(size_t)63 : 64);
  if (!data) goto bad;
  memcpy(data, b + off, t->byte_size);
  free(buf);
  t->data = data;
  *owned = data;
  return NULL;
bad:
  free(buf);
  return cinfer_status_new(CINFER_INVALID_ARG, "%s: malformed .npy file", path);
}
