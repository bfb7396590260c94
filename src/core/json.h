/* json.h: a small strict JSON (RFC 8259) reader for request bodies on the hot path.
 *
 * json_parse builds a read-only tree in one arena owned by the returned document: a
 * request of a few kilobytes costs one allocation (none beyond the document itself),
 * numbers are converted exactly (Clinger's fast path, strtod otherwise), strings are
 * integer literals also keep their exact 64-bit value (int_flags / ix: INT64 and UINT64
 * tensors and parameters never round through a double); strings are
 * unescaped into the arena (NUL-terminated, with their byte length, so embedded U+0000
 * survives). Besides RFC 8259 it accepts NaN, Infinity and -Infinity as numbers, which is
 * what our KServe encoder writes for non-finite values (as Python's json module does).
 * Nesting deeper than max_depth is an error before any recursion goes that deep.
 *
 * Errors name the byte offset and what was expected there. Every pointer into the tree is
 * valid until json_doc_free. Thread-compatible: one document, one thread at a time. */
#ifndef CINFER_CORE_JSON_H
#define CINFER_CORE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

typedef enum {
  JSON_NULL,
  JSON_FALSE,
  JSON_TRUE,
  JSON_NUMBER,
  JSON_STRING,
  JSON_ARRAY,
  JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
struct json_value {
  json_type type;
  uint32_t len;           /* STRING: bytes; ARRAY/OBJECT: members */
  const char *key;        /* member name inside an object (NUL-terminated), else NULL */
  json_value *next;       /* next element / member */
  union {
    double num;           /* NUMBER */
    const char *str;      /* STRING, NUL-terminated */
    json_value *child;    /* ARRAY / OBJECT: first element / member */
  } u;
  /* NUMBER only: the exact integer when the text is an integer literal (no fraction, no
   * exponent) that fits: JSON_INT_I64 set -> i is exact; JSON_INT_U64 set -> u is exact
   * (both for 0..INT64_MAX). u.num is then the nearest double, which may be rounded. */
  uint32_t int_flags;
  union {
    int64_t i;
    uint64_t u;
  } ix;
};

enum { JSON_INT_I64 = 1u, JSON_INT_U64 = 2u };

typedef struct json_doc json_doc;

/* Parses text[0..n). On success *out owns the tree (json_doc_free). */
cinfer_status *json_parse(const char *text, size_t n, int max_depth, json_doc **out);
const json_value *json_root(const json_doc *d);
void json_doc_free(json_doc *d);

/* The first member named key of an object; NULL when v is not an object or has none. */
const json_value *json_get(const json_value *v, const char *key);

static inline bool json_is(const json_value *v, json_type t) { return v && v->type == t; }
static inline bool json_is_bool(const json_value *v) {
  return v && (v->type == JSON_TRUE || v->type == JSON_FALSE);
}

#endif
