/* strings.c: STRING (KServe BYTES) tensors inside the engine.
 *
 * Layout. Outside the engine (cinfer_tensor, the server, KServe) a BYTES tensor is the
 * elements one after the other, each a uint32 little-endian length and that many bytes.
 * Inside it an element is an `ostr` {pointer, length} (ot_esize(BYTES) = 16), so every
 * operator that only moves elements (Identity, Reshape, Transpose, Concat, Gather,
 * Slice, Expand, Where, ...) moves strings with the same byte copies it uses for numbers,
 * and a Reshape of strings is still a view. The bytes an ostr points at are never
 * written through it; they live in one of four places, each outliving every reader:
 *   - a graph input: the caller's buffer (valid for the run: onnx_session_run);
 *   - a constant (initializer, Constant node, folded result): the same allocation as the
 *     descriptors, after them (ot_new_strings), freed with the tensor;
 *   - a plan-time result (a static node producing new strings): the plan's static heap;
 *   - a run-time result (Cast to STRING): the plan's run heap, reset when a run starts.
 * On the way out (session.c) the descriptors of a graph output are written back into the
 * length-prefixed layout in a session buffer.
 *
 * Operators: onnx_op.str_in says which inputs may be STRING; every other input that is
 * a STRING is refused with the node, the input and the type named: at load
 * (graph_check_strings, which follows declared and inferred types through the graph) and
 * again when a plan is built, so no kernel ever reads descriptors as numbers. */
#include <stdlib.h>
#include <string.h>

#include "backends/onnx/ops_util.h"

size_t ot_esize(cinfer_dtype dt) {
  return dt == CINFER_TYPE_BYTES ? sizeof(ostr) : cinfer_dtype_size(dt);
}

/* ---- heaps ---- */

typedef struct heap_chunk {
  struct heap_chunk *next;
  size_t cap, used;
  char data[];
} heap_chunk;

struct ostr_heap {
  heap_chunk *head; /* chunk being filled first; the rest were filled before */
  size_t total;
};

ostr_heap *ostr_heap_new(void) { return calloc(1, sizeof(ostr_heap)); }

void ostr_heap_reset(ostr_heap *h) {
  if (!h) return;
  /* keep the largest chunk (a steady stream of runs then never allocates) */
  heap_chunk *keep = NULL;
  for (heap_chunk *c = h->head; c; c = c->next)
    if (!keep || c->cap > keep->cap) keep = c;
  for (heap_chunk *c = h->head, *n; c; c = n) {
    n = c->next;
    if (c != keep) free(c);
  }
  h->head = keep;
  h->total = 0;
  if (keep) {
    keep->next = NULL;
    keep->used = 0;
  }
}

void ostr_heap_free(ostr_heap *h) {
  if (!h) return;
  for (heap_chunk *c = h->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(h);
}

char *ostr_heap_alloc(ostr_heap *h, size_t n) {
  if (!h || n > (size_t)ONNX_MAX_TENSOR_BYTES || h->total > (size_t)ONNX_MAX_TENSOR_BYTES - n)
    return NULL;
  if (!h->head || h->head->cap - h->head->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    heap_chunk *c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->cap = cap;
    c->used = 0;
    c->next = h->head;
    h->head = c;
  }
  char *p = h->head->data + h->head->used;
  h->head->used += n;
  h->total += n;
  return p;
}

/* ---- conversions ---- */

cinfer_status *ostr_parse(const void *data, size_t byte_size, int64_t n, ostr *dst,
                          const char *what) {
  const unsigned char *b = data;
  size_t off = 0;
  for (int64_t i = 0; i < n; i++) {
    if (byte_size - off < 4)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "%s: element %lld: the length prefix is past the end of the %zu bytes",
                               what, (long long)i, byte_size);
    uint32_t len = (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 |
                   (uint32_t)b[off + 3] << 24;
    off += 4;
    if (len > byte_size - off)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "%s: element %lld: length %u is past the end of the %zu bytes", what,
                               (long long)i, len, byte_size);
    dst[i].p = (const char *)b + off;
    dst[i].n = len;
    off += len;
  }
  if (off != byte_size)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "%s: %lld strings end at byte %zu, the tensor has %zu bytes", what,
                             (long long)n, off, byte_size);
  return NULL;
}

cinfer_status *ostr_packed_size(const ostr *s, int64_t n, size_t *bytes, const char *what) {
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    if (s[i].n > UINT32_MAX)
      return cinfer_status_new(CINFER_INVALID_ARG, "%s: element %lld has %llu bytes (more than a 4-byte length)",
                               what, (long long)i, (unsigned long long)s[i].n);
    if (__builtin_add_overflow(total, (size_t)4 + s[i].n, &total) || total > (size_t)ONNX_MAX_TENSOR_BYTES)
      return cinfer_status_new(CINFER_RESOURCE_EXHAUSTED, "%s: the strings are larger than %lld bytes",
                               what, (long long)ONNX_MAX_TENSOR_BYTES);
  }
  *bytes = total;
  return NULL;
}

void ostr_pack(const ostr *s, int64_t n, void *dst) {
  unsigned char *b = dst;
  for (int64_t i = 0; i < n; i++) {
    uint32_t len = (uint32_t)s[i].n;
    b[0] = (unsigned char)len;
    b[1] = (unsigned char)(len >> 8);
    b[2] = (unsigned char)(len >> 16);
    b[3] = (unsigned char)(len >> 24);
    if (len) memcpy(b + 4, s[i].p, len);
    b += 4 + len;
  }
}

ot *ot_new_strings(int ndim, const int64_t *dims, const ostr *src) {
  ot shape = {.dtype = CINFER_TYPE_BYTES, .ndim = ndim};
  for (int i = 0; i < ndim; i++) shape.dims[i] = dims[i];
  int64_t n = ot_numel(&shape);
  if (n < 0 || (uint64_t)n > (uint64_t)ONNX_MAX_TENSOR_BYTES / sizeof(ostr)) return NULL;
  size_t text = 0;
  for (int64_t i = 0; i < n; i++)
    if (__builtin_add_overflow(text, (size_t)src[i].n, &text) || text > (size_t)ONNX_MAX_TENSOR_BYTES) return NULL;
  size_t head = (size_t)n * sizeof(ostr), bytes = (head + text + 63) & ~(size_t)63;
  ot *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  *t = shape;
  t->data = aligned_alloc(64, bytes ? bytes : 64);
  if (!t->data) {
    free(t);
    return NULL;
  }
  ostr *d = t->data;
  char *p = (char *)t->data + head;
  for (int64_t i = 0; i < n; i++) {
    d[i].p = p;
    d[i].n = src[i].n;
    if (src[i].n) memcpy(p, src[i].p, src[i].n);
    p += src[i].n;
  }
  return t;
}

/* ---- the load-time check ---- */

/* Element type of a Constant node's value when it is known from its attributes. */
static bool constant_is_string(const onnx_node *n) {
  const onnx_attr *a = node_attr(n, "value");
  if (a && a->type == ATTR_T && a->t) return a->t->dtype == CINFER_TYPE_BYTES;
  return node_attr(n, "value_string") || node_attr(n, "value_strings");
}

cinfer_status *graph_check_strings(const onnx_model *m) {
  bool *str = calloc((size_t)m->n_values + 1, sizeof *str);
  if (!str) return cinfer_status_oom(NULL);
  for (int v = 0; v < m->n_values; v++) {
    const onnx_value *val = &m->values[v];
    if (val->kind == VAL_CONST && val->cval) str[v] = val->cval->dtype == CINFER_TYPE_BYTES;
    else if (val->has_info) str[v] = val->info.dtype == CINFER_TYPE_BYTES;
  }
  cinfer_status *st = NULL;
  for (int i = 0; i < m->n_nodes && !st; i++) { /* topological order */
    const onnx_node *n = &m->nodes[i];
    bool any = false; /* a string reaches an input that passes strings on */
    for (int j = 0; j < n->n_in && !st; j++) {
      if (n->in[j] < 0 || !str[n->in[j]]) continue;
      if (!op_takes_string(n->op->str_in, j))
        st = NODE_ERR(n, CINFER_UNSUPPORTED, "input %d ('%s') is STRING; %s does not take strings", j,
                      m->values[n->in[j]].name, n->op_type);
      any = true;
    }
    bool out_str;
    if (!strcmp(n->op_type, "Cast"))
      out_str = onnx_dtype_from_proto((int32_t)attr_i(n, "to", 0)) == CINFER_TYPE_BYTES;
    else if (!strcmp(n->op_type, "CastLike"))
      out_str = n->n_in > 1 && n->in[1] >= 0 && str[n->in[1]];
    else if (!strcmp(n->op_type, "Constant"))
      out_str = constant_is_string(n);
    else
      out_str = any && !(n->op->flags & OP_SHAPE_ONLY);
    for (int o = 0; o < n->n_out; o++) {
      int v = n->out[o];
      if (v < 0) continue;
      if (m->values[v].has_info && m->values[v].info.dtype != CINFER_TYPE_INVALID)
        str[v] = m->values[v].info.dtype == CINFER_TYPE_BYTES; /* declared */
      else
        str[v] = out_str && !(o > 0 && !strcmp(n->op_type, "Dropout")); /* Dropout's mask: BOOL */
    }
  }
  free(str);
  return st;
}
