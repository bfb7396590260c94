/* gguf.h: read-only GGUF (v2, v3) files over mmap.
 *
 * Format (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv pairs
 * (string key, u32 type, value), then n_tensors infos (string name, u32 n_dims,
 * u64 dims[n_dims], u32 ggml type, u64 offset), then padding to `general.alignment`
 * (default 32), then the tensor data. A string is u64 length + bytes (no NUL).
 *
 * Invariants after llm_gguf_open succeeds: every key, string and array lies inside the
 * file; every tensor has 1..4 dims, a known type, an element count that is a multiple of
 * its block size, an aligned offset, and data inside the file; names are unique.
 * All pointers returned point into the mapping and live until llm_gguf_close. */
#ifndef CINFER_LLM_GGUF_H
#define CINFER_LLM_GGUF_H

#include <stdint.h>
#include <stdio.h>

#include "backends/llm/quant.h"
#include "cinfer/types.h"

typedef enum {
  GGUF_U8 = 0, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL,
  GGUF_STRING, GGUF_ARRAY, GGUF_U64, GGUF_I64, GGUF_F64, GGUF_TYPE_COUNT_
} gguf_vtype;

typedef struct llm_gguf_str {
  const char *p; /* not NUL-terminated */
  uint64_t n;
} llm_gguf_str;

typedef struct llm_gguf_kv {
  llm_gguf_str key;
  gguf_vtype type;
  gguf_vtype arr_type;      /* element type when type == GGUF_ARRAY */
  uint64_t arr_n;           /* element count when type == GGUF_ARRAY */
  const uint8_t *data;      /* scalar value, or first array element (unaligned) */
  llm_gguf_str *strs;       /* arr_n entries when arr_type == GGUF_STRING, else NULL */
} llm_gguf_kv;

typedef struct llm_gguf_tensor {
  llm_gguf_str name;
  int n_dims;
  int64_t ne[4];            /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
  llm_type type;
  uint64_t offset;          /* relative to the data section */
  uint64_t size;            /* bytes */
  const void *data;
} llm_gguf_tensor;

typedef struct llm_gguf llm_gguf;

/* Maps and validates the file. On error *out is NULL and the status names the file, the
 * byte offset and the field. */
cinfer_status *llm_gguf_open(const char *path, llm_gguf **out);
/* Same over caller memory (borrowed; must outlive the handle). Used by the fuzzer. */
cinfer_status *llm_gguf_open_memory(const void *data, size_t size, llm_gguf **out);
void llm_gguf_close(llm_gguf *g);

uint32_t llm_gguf_version(const llm_gguf *g);
int64_t llm_gguf_n_kv(const llm_gguf *g);
const llm_gguf_kv *llm_gguf_kv_at(const llm_gguf *g, int64_t i);
const llm_gguf_kv *llm_gguf_find(const llm_gguf *g, const char *key);
int64_t llm_gguf_n_tensors(const llm_gguf *g);
const llm_gguf_tensor *llm_gguf_tensor_at(const llm_gguf *g, int64_t i);
const llm_gguf_tensor *llm_gguf_tensor_find(const llm_gguf *g, const char *name);

/* Typed getters: true when the key exists and converts without loss (any integer type
 * in range for the integer getters, F32/F64 for floats). */
bool llm_gguf_get_u32(const llm_gguf *g, const char *key, uint32_t *out);
bool llm_gguf_get_f32(const llm_gguf *g, const char *key, float *out);
bool llm_gguf_get_bool(const llm_gguf *g, const char *key, bool *out);
bool llm_gguf_get_str(const llm_gguf *g, const char *key, llm_gguf_str *out);
/* Integer array element i (any integer array type) as int64; false when out of range. */
bool llm_gguf_arr_int(const llm_gguf_kv *kv, uint64_t i, int64_t *out);

/* Prints the header, metadata (arrays abbreviated) and the tensor table. */
void llm_gguf_dump(const llm_gguf *g, FILE *f);

#endif
