/* gguf.c: GGUF parser over mmap (see gguf.h for the format and the invariants).
 * Every read goes through the cursor `rd`, which checks the remaining length first, so a
 * truncated or hostile file yields an error naming the byte offset, never an over-read. */
#include "backends/llm/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_STR (1ull << 30)

struct llm_gguf {
  const uint8_t *base;
  size_t size;
  bool mapped;
  uint32_t version;
  uint32_t alignment;
  int64_t n_kv, n_tensors;
  llm_gguf_kv *kv;
  llm_gguf_tensor *tensors;
  uint64_t data_off;
};

typedef struct {
  const uint8_t *p;
  size_t size, off;
  const char *what; /* field being read, for errors */
} rd;

static cinfer_status *rd_err(const rd *r, const char *what) {
  return cinfer_status_new(CINFER_INVALID_ARG, "gguf: truncated or invalid at byte %zu (%s)",
                           r->off, what);
}

static bool rd_bytes(rd *r, void *dst, size_t n) {
  if (n > r->size - r->off) return false;
  memcpy(dst, r->p + r->off, n);
  r->off += n;
  return true;
}
static bool rd_u32(rd *r, uint32_t *v) { return rd_bytes(r, v, 4); }
static bool rd_u64(rd *r, uint64_t *v) { return rd_bytes(r, v, 8); }
static bool rd_str(rd *r, llm_gguf_str *s) {
  uint64_t n;
  if (!rd_u64(r, &n)) return false;
  if (n > GGUF_MAX_STR || n > r->size - r->off) return false;
  s->p = (const char *)r->p + r->off;
  s->n = n;
  r->off += n;
  return true;
}

static size_t vtype_size(gguf_vtype t) {
  switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
  }
}

static const char *vtype_name(gguf_vtype t) {
  static const char *n[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                            "string", "array", "u64", "i64", "f64"};
  return (unsigned)t < GGUF_TYPE_COUNT_ ? n[t] : "?";
}

static bool str_eq(llm_gguf_str s, const char *c) {
  size_t n = strlen(c);
  return s.n == n && memcmp(s.p, c, n) == 0;
}

static cinfer_status *parse_kv(rd *r, llm_gguf_kv *kv, int64_t idx) {
  if (!rd_str(r, &kv->key)) return rd_err(r, "metadata key");
  uint32_t t;
  if (!rd_u32(r, &t)) return rd_err(r, "metadata type");
  if (t >= GGUF_TYPE_COUNT_)
    return cinfer_status_new(CINFER_INVALID_ARG, "gguf: metadata '%.*s': unknown type %u",
                             (int)kv->key.n, kv->key.p, t);
  kv->type = (gguf_vtype)t;
  kv->data = r->p + r->off;
  if (t == GGUF_STRING) {
    llm_gguf_str s;
    if (!rd_str(r, &s)) return rd_err(r, "metadata string");
    return NULL;
  }
  if (t == GGUF_ARRAY) {
    uint32_t at;
    uint64_t n;
    if (!rd_u32(r, &at) || !rd_u64(r, &n)) return rd_err(r, "metadata array header");
    if (at >= GGUF_TYPE_COUNT_ || at == GGUF_ARRAY)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "gguf: metadata '%.*s': unsupported array element type %u",
                               (int)kv->key.n, kv->key.p, at);
    kv->arr_type = (gguf_vtype)at;
    kv->arr_n = n;
    kv->data = r->p + r->off;
    if (at == GGUF_STRING) {
      /* each string needs at least 8 bytes: bound n before allocating */
      if (n > (r->size - r->off) / 8) return rd_err(r, "metadata string array count");
      kv->strs = malloc((n ? n : 1) * sizeof *kv->strs);
      if (!kv->strs) return cinfer_status_oom("gguf");
      for (uint64_t i = 0; i < n; i++)
        if (!rd_str(r, &kv->strs[i])) return rd_err(r, "metadata string array element");
      return NULL;
    }
    size_t es = vtype_size(kv->arr_type);
    if (n > (r->size - r->off) / es) return rd_err(r, "metadata array data");
    r->off += n * es;
    return NULL;
  }
  size_t es = vtype_size(kv->type);
  if (es > r->size - r->off) return rd_err(r, "metadata value");
  r->off += es;
  (void)idx;
  return NULL;
}

static cinfer_status *parse(llm_gguf *g) {
  rd r = {g->base, g->size, 0, ""};
  char magic[4];
  if (!rd_bytes(&r, magic, 4) || memcmp(magic, "GGUF", 4))
    return cinfer_status_new(CINFER_INVALID_ARG, "gguf: bad magic (not a GGUF file)");
  if (!rd_u32(&r, &g->version)) return rd_err(&r, "version");
  if (g->version != 2 && g->version != 3)
    return cinfer_status_new(CINFER_UNSUPPORTED, "gguf: version %u not supported (need 2 or 3)",
                             g->version);
  uint64_t nt, nkv;
  if (!rd_u64(&r, &nt) || !rd_u64(&r, &nkv)) return rd_err(&r, "counts");
  /* a kv needs >= 12 bytes, a tensor info >= 24: bound the counts by the file size */
  if (nkv > g->size / 12) return cinfer_status_new(CINFER_INVALID_ARG, "gguf: n_kv %" PRIu64 " exceeds file size", nkv);
  if (nt > g->size / 24) return cinfer_status_new(CINFER_INVALID_ARG, "gguf: n_tensors %" PRIu64 " exceeds file size", nt);
  g->kv = calloc(nkv ? nkv : 1, sizeof *g->kv);
  g->tensors = calloc(nt ? nt : 1, sizeof *g->tensors);
  if (!g->kv || !g->tensors) return cinfer_status_oom("gguf");
  for (uint64_t i = 0; i < nkv; i++) {
    g->n_kv = (int64_t)i + 1;
    cinfer_status *st = parse_kv(&r, &g->kv[i], (int64_t)i);
    if (st) return cinfer_status_prefix(st, "metadata #%" PRIu64, i);
  }
  g->n_kv = (int64_t)nkv;
  g->alignment = 32;
  const llm_gguf_kv *al = llm_gguf_find(g, "general.alignment");
  if (al) {
    uint32_t a;
    if (!llm_gguf_get_u32(g, "general.alignment", &a) || a == 0 || (a & (a - 1)) || a > 65536)
      return cinfer_status_new(CINFER_INVALID_ARG, "gguf: general.alignment must be a power of two <= 65536");
    g->alignment = a;
  }
  for (uint64_t i = 0; i < nt; i++) {
    llm_gguf_tensor *t = &g->tensors[i];
    g->n_tensors = (int64_t)i + 1;
    if (!rd_str(&r, &t->name)) return rd_err(&r, "tensor name");
    uint32_t nd, ty;
    if (!rd_u32(&r, &nd)) return rd_err(&r, "tensor n_dims");
    if (nd < 1 || nd > GGUF_MAX_DIMS)
      return cinfer_status_new(CINFER_INVALID_ARG, "gguf: tensor '%.*s': n_dims %u not in 1..4",
                               (int)t->name.n, t->name.p, nd);
    t->n_dims = (int)nd;
    uint64_t nel = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
      uint64_t v;
      if (!rd_u64(&r, &v)) return rd_err(&r, "tensor dims");
      if (v == 0 || v > (uint64_t)INT64_MAX || nel > (uint64_t)INT64_MAX / v)
        return cinfer_status_new(CINFER_INVALID_ARG, "gguf: tensor '%.*s': bad dim %u = %" PRIu64,
                                 (int)t->name.n, t->name.p, d, v);
      t->ne[d] = (int64_t)v;
      nel *= v;
    }
    if (!rd_u32(&r, &ty) || !rd_u64(&r, &t->offset)) return rd_err(&r, "tensor type/offset");
    if (ty >= LLM_TYPE_COUNT_ || llm_type_block((llm_type)ty) == 0)
      return cinfer_status_new(CINFER_UNSUPPORTED, "gguf: tensor '%.*s': unsupported type %u",
                               (int)t->name.n, t->name.p, ty);
    t->type = (llm_type)ty;
    int bs = llm_type_block(t->type);
    if (t->ne[0] % bs)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "gguf: tensor '%.*s': row of %" PRId64 " not a multiple of %s block %d",
                               (int)t->name.n, t->name.p, t->ne[0], llm_type_name(t->type), bs);
    uint64_t blocks = nel / (uint64_t)bs, bb = llm_type_block_bytes(t->type);
    if (blocks > UINT64_MAX / bb)
      return cinfer_status_new(CINFER_INVALID_ARG, "gguf: tensor '%.*s': size overflows",
                               (int)t->name.n, t->name.p);
    t->size = blocks * bb;
    if (t->offset % g->alignment)
      return cinfer_status_new(CINFER_INVALID_ARG, "gguf: tensor '%.*s': offset %" PRIu64 " not aligned to %u",
                               (int)t->name.n, t->name.p, t->offset, g->alignment);
    for (uint64_t j = 0; j < i; j++)
      if (g->tensors[j].name.n == t->name.n && !memcmp(g->tensors[j].name.p, t->name.p, t->name.n))
        return cinfer_status_new(CINFER_INVALID_ARG, "gguf: duplicate tensor name '%.*s'",
                                 (int)t->name.n, t->name.p);
  }
  g->n_tensors = (int64_t)nt;
  uint64_t data_off = (r.off + g->alignment - 1) / g->alignment * g->alignment;
  if (data_off > g->size && nt > 0)
    return cinfer_status_new(CINFER_INVALID_ARG, "gguf: data section starts past the end of the file");
  g->data_off = data_off;
  for (uint64_t i = 0; i < nt; i++) {
    llm_gguf_tensor *t = &g->tensors[i];
    uint64_t avail = g->size - data_off;
    if (t->offset > avail || t->size > avail - t->offset)
      return cinfer_status_new(CINFER_INVALID_ARG,
                               "gguf: tensor '%.*s': data [%" PRIu64 ", +%" PRIu64 ") past end of file (%" PRIu64 " data bytes)",
                               (int)t->name.n, t->name.p, t->offset, t->size, avail);
    t->data = g->base + data_off + t->offset;
  }
  return NULL;
}

static cinfer_status *open_common(llm_gguf *g, llm_gguf **out) {
  cinfer_status *st = parse(g);
  if (st) {
    llm_gguf_close(g);
    return st;
  }
  *out = g;
  return NULL;
}

cinfer_status *llm_gguf_open_memory(const void *data, size_t size, llm_gguf **out) {
  *out = NULL;
  llm_gguf *g = calloc(1, sizeof *g);
  if (!g) return cinfer_status_oom("gguf");
  g->base = data;
  g->size = size;
  return open_common(g, out);
}

cinfer_status *llm_gguf_open(const char *path, llm_gguf **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cinfer_status_new(CINFER_NOT_FOUND, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
    close(fd);
    return cinfer_status_new(CINFER_INVALID_ARG, "%s: not a regular file of at least 24 bytes", path);
  }
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return cinfer_status_new(CINFER_INTERNAL, "%s: mmap: %s", path, strerror(errno));
  llm_gguf *g = calloc(1, sizeof *g);
  if (!g) {
    munmap(p, (size_t)sb.st_size);
    return cinfer_status_oom("gguf");
  }
  g->base = p;
  g->size = (size_t)sb.st_size;
  g->mapped = true;
  cinfer_status *st = open_common(g, out);
  return st ? cinfer_status_prefix(st, "%s", path) : NULL;
}

void llm_gguf_close(llm_gguf *g) {
  if (!g) return;
  if (g->kv)
    for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].strs);
  free(g->kv);
  free(g->tensors);
  if (g->mapped) munmap((void *)g->base, g->size);
  free(g);
}

uint32_t llm_gguf_version(const llm_gguf *g) { return g->version; }
int64_t llm_gguf_n_kv(const llm_gguf *g) { return g->n_kv; }
const llm_gguf_kv *llm_gguf_kv_at(const llm_gguf *g, int64_t i) {
  return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}
int64_t llm_gguf_n_tensors(const llm_gguf *g) { return g->n_tensors; }
const llm_gguf_tensor *llm_gguf_tensor_at(const llm_gguf *g, int64_t i) {
  return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}
const llm_gguf_kv *llm_gguf_find(const llm_gguf *g, const char *key) {
  for (int64_t i = 0; i < g->n_kv; i++)
    if (str_eq(g->kv[i].key, key)) return &g->kv[i];
  return NULL;
}
const llm_gguf_tensor *llm_gguf_tensor_find(const llm_gguf *g, const char *name) {
  for (int64_t i = 0; i < g->n_tensors; i++)
    if (str_eq(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

static bool scalar_int(gguf_vtype t, const uint8_t *p, int64_t *out, bool *neg_or_big) {
  *neg_or_big = false;
  switch (t) {
    case GGUF_U8: *out = p[0]; return true;
    case GGUF_I8: *out = (int8_t)p[0]; return true;
    case GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case GGUF_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case GGUF_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case GGUF_U64: { uint64_t v; memcpy(&v, p, 8); if (v > INT64_MAX) *neg_or_big = true; *out = (int64_t)v; return true; }
    case GGUF_I64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    default: return false;
  }
}

bool llm_gguf_get_u32(const llm_gguf *g, const char *key, uint32_t *out) {
  const llm_gguf_kv *kv = llm_gguf_find(g, key);
  int64_t v;
  bool big;
  if (!kv || !scalar_int(kv->type, kv->data, &v, &big) || big || v < 0 || v > UINT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}
bool llm_gguf_get_f32(const llm_gguf *g, const char *key, float *out) {
  const llm_gguf_kv *kv = llm_gguf_find(g, key);
  if (!kv) return false;
  if (kv->type == GGUF_F32) { memcpy(out, kv->data, 4); return true; }
  if (kv->type == GGUF_F64) { double d; memcpy(&d, kv->data, 8); *out = (float)d; return true; }
  return false;
}
bool llm_gguf_get_bool(const llm_gguf *g, const char *key, bool *out) {
  const llm_gguf_kv *kv = llm_gguf_find(g, key);
  if (!kv || kv->type != GGUF_BOOL) return false;
  *out = kv->data[0] != 0;
  return true;
}
bool llm_gguf_get_str(const llm_gguf *g, const char *key, llm_gguf_str *out) {
  const llm_gguf_kv *kv = llm_gguf_find(g, key);
  if (!kv || kv->type != GGUF_STRING) return false;
  uint64_t n;
  memcpy(&n, kv->data, 8);
  out->p = (const char *)kv->data + 8;
  out->n = n;
  return true;
}
bool llm_gguf_arr_int(const llm_gguf_kv *kv, uint64_t i, int64_t *out) {
  if (kv->type != GGUF_ARRAY || i >= kv->arr_n) return false;
  size_t es = vtype_size(kv->arr_type);
  bool big;
  if (!es || !scalar_int(kv->arr_type, kv->data + i * es, out, &big)) return false;
  return !big;
}

static void dump_scalar(FILE *f, gguf_vtype t, const uint8_t *p) {
  int64_t v;
  bool big;
  if (scalar_int(t, p, &v, &big)) {
    if (big) { uint64_t u; memcpy(&u, p, 8); fprintf(f, "%" PRIu64, u); }
    else fprintf(f, "%" PRId64, v);
  } else if (t == GGUF_F32) { float x; memcpy(&x, p, 4); fprintf(f, "%g", x); }
  else if (t == GGUF_F64) { double x; memcpy(&x, p, 8); fprintf(f, "%g", x); }
  else if (t == GGUF_BOOL) fprintf(f, "%s", p[0] ? "true" : "false");
}

static void dump_str(FILE *f, const char *p, uint64_t n, uint64_t max) {
  fputc('"', f);
  for (uint64_t i = 0; i < n && i < max; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c == '\n') fputs("\\n", f);
    else if (c < 32) fprintf(f, "\\x%02x", c);
    else fputc(c, f);
  }
  fputc('"', f);
  if (n > max) fprintf(f, "...(%" PRIu64 " bytes)", n);
}

void llm_gguf_dump(const llm_gguf *g, FILE *f) {
  fprintf(f, "GGUF v%u, %" PRId64 " metadata keys, %" PRId64 " tensors, alignment %u\n", g->version,
          g->n_kv, g->n_tensors, g->alignment);
  for (int64_t i = 0; i < g->n_kv; i++) {
    const llm_gguf_kv *kv = &g->kv[i];
    fprintf(f, "  %.*s (%s", (int)kv->key.n, kv->key.p, vtype_name(kv->type));
    if (kv->type == GGUF_ARRAY) fprintf(f, " of %" PRIu64 " %s", kv->arr_n, vtype_name(kv->arr_type));
    fputs(") = ", f);
    if (kv->type == GGUF_STRING) {
      uint64_t n;
      memcpy(&n, kv->data, 8);
      dump_str(f, (const char *)kv->data + 8, n, 120);
    } else if (kv->type == GGUF_ARRAY) {
      fputc('[', f);
      for (uint64_t j = 0; j < kv->arr_n && j < 6; j++) {
        if (j) fputs(", ", f);
        if (kv->arr_type == GGUF_STRING) dump_str(f, kv->strs[j].p, kv->strs[j].n, 40);
        else dump_scalar(f, kv->arr_type, kv->data + j * vtype_size(kv->arr_type));
      }
      fputs(kv->arr_n > 6 ? ", ...]" : "]", f);
    } else {
      dump_scalar(f, kv->type, kv->data);
    }
    fputc('\n', f);
  }
  uint64_t total = 0;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    const llm_gguf_tensor *t = &g->tensors[i];
    fprintf(f, "  tensor %-28.*s %-5s [", (int)t->name.n, t->name.p, llm_type_name(t->type));
    for (int d = 0; d < t->n_dims; d++) fprintf(f, d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
    fprintf(f, "] %" PRIu64 " bytes @%" PRIu64 "\n", t->size, t->offset);
    total += t->size;
  }
  fprintf(f, "total tensor bytes: %" PRIu64 "\n", total);
}
