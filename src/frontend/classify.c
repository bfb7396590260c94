/* classify.c: top-K classification of an output tensor. See classify.h.
 *
 * Invariants: every read of the tensor is inside byte_size (the row size is computed from
 * the shape and checked against it); the index array is sized from a row's element count,
 * which is bounded by CLASSIFY_MAX_ELEMENTS before anything is allocated. */
#include "frontend/classify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cinfer_status *classify_labels_load(const char *path, classify_labels *out) {
  memset(out, 0, sizeof *out);
  cbuf b = {0};
  cinfer_status *st = cbuf_read_file(&b, path, (size_t)64 << 20);
  if (st) return st;
  size_t n = 0;
  for (size_t i = 0; i < b.len; i++) n += b.data[i] == '\n';
  if (b.len && b.data[b.len - 1] != '\n') n++;
  out->line = calloc(n ? n : 1, sizeof *out->line);
  if (!out->line) {
    cbuf_free(&b);
    return cinfer_status_oom("reading labels");
  }
  out->text = b.len ? b.data : NULL;
  if (!b.len) cbuf_free(&b);
  char *p = out->text;
  for (size_t i = 0; i < n; i++) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    size_t l = strlen(p);
    if (l && p[l - 1] == '\r') p[l - 1] = 0;
    out->line[i] = p;
    p = nl ? nl + 1 : p + l;
  }
  out->n = n;
  return NULL;
}

void classify_labels_free(classify_labels *l) {
  free(l->text);
  free(l->line);
  memset(l, 0, sizeof *l);
}

/* The value at element i as a sortable pair: integer types compare exactly (i64 / u64),
 * floats as doubles. */
typedef struct {
  const unsigned char *base;
  cinfer_dtype dt;
} row_view;

static int cmp_desc(const row_view *r, size_t a, size_t b) {
  const unsigned char *p = r->base;
#define CMP(ctype)                                                 \
  {                                                                \
    ctype x, y;                                                    \
    memcpy(&x, p + a * sizeof x, sizeof x);                        \
    memcpy(&y, p + b * sizeof y, sizeof y);                        \
    if (x > y) return -1;                                          \
    if (x < y) return 1;                                           \
    break;                                                         \
  }
  switch (r->dt) {
    case CINFER_TYPE_UINT8: CMP(uint8_t)
    case CINFER_TYPE_UINT16: CMP(uint16_t)
    case CINFER_TYPE_UINT32: CMP(uint32_t)
    case CINFER_TYPE_UINT64: CMP(uint64_t)
    case CINFER_TYPE_INT8: CMP(int8_t)
    case CINFER_TYPE_INT16: CMP(int16_t)
    case CINFER_TYPE_INT32: CMP(int32_t)
    case CINFER_TYPE_INT64: CMP(int64_t)
    case CINFER_TYPE_FP32: CMP(float)
    case CINFER_TYPE_FP64: CMP(double)
    default: break;
  }
#undef CMP
  return a < b ? -1 : a > b; /* ties (and NaN): the lower index first */
}

static void format_value(const row_view *r, size_t i, char *o, size_t cap) {
  const unsigned char *p = r->base;
#define V(ctype, fmt, cast)                         \
  {                                                 \
    ctype x;                                        \
    memcpy(&x, p + i * sizeof x, sizeof x);         \
    snprintf(o, cap, fmt, (cast)x);                 \
    return;                                         \
  }
  switch (r->dt) {
    case CINFER_TYPE_UINT8: V(uint8_t, "%u", unsigned)
    case CINFER_TYPE_UINT16: V(uint16_t, "%u", unsigned)
    case CINFER_TYPE_UINT32: V(uint32_t, "%u", unsigned)
    case CINFER_TYPE_UINT64: V(uint64_t, "%llu", unsigned long long)
    case CINFER_TYPE_INT8: V(int8_t, "%d", int)
    case CINFER_TYPE_INT16: V(int16_t, "%d", int)
    case CINFER_TYPE_INT32: V(int32_t, "%d", int)
    case CINFER_TYPE_INT64: V(int64_t, "%lld", long long)
    case CINFER_TYPE_FP32: V(float, "%f", double)
    case CINFER_TYPE_FP64: V(double, "%f", double)
    default: break;
  }
#undef V
  snprintf(o, cap, "?");
}

static bool orderable(cinfer_dtype dt) {
  switch (dt) {
    case CINFER_TYPE_UINT8: case CINFER_TYPE_UINT16: case CINFER_TYPE_UINT32:
    case CINFER_TYPE_UINT64: case CINFER_TYPE_INT8: case CINFER_TYPE_INT16:
    case CINFER_TYPE_INT32: case CINFER_TYPE_INT64: case CINFER_TYPE_FP32:
    case CINFER_TYPE_FP64: return true;
    default: return false;
  }
}

/* Merge sort of idx[0..n) by cmp_desc (stable, O(n log n), no global state for qsort). */
static void sort_idx(const row_view *r, size_t *idx, size_t *tmp, size_t n) {
  for (size_t w = 1; w < n; w *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * w) {
      size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      size_t a = lo, b = mid, o = lo;
      while (a < mid && b < hi) tmp[o++] = cmp_desc(r, idx[b], idx[a]) < 0 ? idx[b++] : idx[a++];
      while (a < mid) tmp[o++] = idx[a++];
      while (b < hi) tmp[o++] = idx[b++];
    }
    memcpy(idx, tmp, n * sizeof *idx);
  }
}

cinfer_status *classify_output(const cinfer_tensor *t, uint32_t k, bool batched,
                               const classify_labels *labels, cbuf *out, int64_t shape[2],
                               int *ndim) {
  if (!orderable(t->dtype))
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "class result not available for output due to unsupported type '%s'",
                             cinfer_dtype_name(t->dtype));
  size_t es = cinfer_dtype_size(t->dtype);
  int64_t rows = 1, row_el = 1;
  int d0 = 0;
  if (batched && t->ndim > 0) {
    rows = t->shape[0];
    d0 = 1;
  }
  for (int d = d0; d < t->ndim; d++) {
    if (t->shape[d] < 0 || (t->shape[d] && row_el > INT64_MAX / t->shape[d]))
      return cinfer_status_new(CINFER_INVALID_ARG, "classification: output '%s' has a bad shape",
                               t->name);
    row_el *= t->shape[d];
  }
  if (row_el > CLASSIFY_MAX_ELEMENTS)
    return cinfer_status_new(CINFER_INVALID_ARG, "classification output tensor too large");
  if (rows < 0 || (row_el && (uint64_t)rows > t->byte_size / es / (uint64_t)row_el))
    return cinfer_status_new(CINFER_INTERNAL, "classification: output '%s' holds fewer bytes "
                             "than its shape", t->name);
  size_t n = (size_t)row_el, kk = k < n ? k : n;
  size_t *idx = malloc((n ? n : 1) * sizeof *idx), *tmp = malloc((n ? n : 1) * sizeof *tmp);
  if (!idx || !tmp) {
    free(idx);
    free(tmp);
    return cinfer_status_oom("classification");
  }
  char num[400];
  for (int64_t r = 0; r < rows; r++) {
    row_view rv = {(const unsigned char *)t->data + (size_t)r * n * es, t->dtype};
    for (size_t i = 0; i < n; i++) idx[i] = i;
    sort_idx(&rv, idx, tmp, n);
    for (size_t j = 0; j < kk; j++) {
      format_value(&rv, idx[j], num, sizeof num);
      const char *lab = labels && idx[j] < labels->n ? labels->line[idx[j]] : NULL;
      size_t ln = strlen(num), il;
      char ix[32];
      il = (size_t)snprintf(ix, sizeof ix, ":%zu", idx[j]);
      size_t lablen = lab ? strlen(lab) + 1 : 0;
      uint32_t len = (uint32_t)(ln + il + lablen);
      unsigned char hdr[4] = {(unsigned char)len, (unsigned char)(len >> 8),
                              (unsigned char)(len >> 16), (unsigned char)(len >> 24)};
      cbuf_put(out, hdr, 4);
      cbuf_put(out, num, ln);
      cbuf_put(out, ix, il);
      if (lab) {
        cbuf_put(out, ":", 1);
        cbuf_put(out, lab, lablen - 1);
      }
    }
  }
  free(idx);
  free(tmp);
  if (out->oom) return cinfer_status_oom("classification");
  if (batched && t->ndim > 0) {
    shape[0] = rows;
    shape[1] = (int64_t)kk;
    *ndim = 2;
  } else {
    shape[0] = (int64_t)kk;
    *ndim = 1;
  }
  return NULL;
}
