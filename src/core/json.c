/* json.c: strict JSON reader into an arena. See json.h.
 *
 * Invariants: the cursor never passes `end`; every arena allocation is sized from bytes
 * already scanned (a string's unescaped form is never longer than its escaped form), so
 * the arena grows at most in proportion to the text; recursion depth is bounded by
 * max_depth, checked before descending. */
#include "core/hex.h"
#include "core/json.h"

#include <math.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct block {
  struct block *next;
  alignas(16) unsigned char data[];
} block;

#define FIRST_BLOCK 4096

struct json_doc {
  json_value *root;
  unsigned char *base; /* the region allocations come from: base[used..cap) is free */
  size_t cap, used, next_cap;
  block *chain;        /* malloc'd regions after the inline one */
  alignas(16) unsigned char inline_mem[FIRST_BLOCK];
};

static void *arena_alloc(json_doc *d, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (d->cap - d->used < n) {
    size_t cap = d->next_cap;
    while (cap < n) cap *= 2;
    block *nb = malloc(sizeof *nb + cap);
    if (!nb) return NULL;
    nb->next = d->chain;
    d->chain = nb;
    d->base = nb->data;
    d->cap = cap;
    d->used = 0;
    if (d->next_cap < ((size_t)1 << 24)) d->next_cap *= 2;
  }
  void *p = d->base + d->used;
  d->used += n;
  return p;
}

typedef struct {
  const char *s, *end, *start;
  json_doc *d;
  int depth, max_depth;
  cinfer_status *err;
} parser;

static json_value *fail(parser *p, const char *at, const char *what) {
  if (!p->err)
    p->err = cinfer_status_new(CINFER_INVALID_ARG, "malformed JSON near byte %zu: %s",
                               (size_t)(at - p->start), what);
  return NULL;
}

static json_value *oom(parser *p) {
  if (!p->err) p->err = cinfer_status_oom("parsing JSON");
  return NULL;
}

static void skip_ws(parser *p) {
  const char *s = p->s;
  while (s < p->end && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
  p->s = s;
}

static bool lit(parser *p, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0) return false;
  p->s += n;
  return true;
}

static json_value *node(parser *p, json_type t) {
  json_value *v = arena_alloc(p->d, sizeof *v);
  if (!v) return oom(p);
  memset(v, 0, sizeof *v);
  v->type = t;
  return v;
}

static int hex4(const char *s) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hex_digit((unsigned char)(s[i]));
    if (h < 0) return -1;
    v = v << 4 | h;
  }
  return v;
}

/* p->s is at the opening quote. */
static bool parse_string(parser *p, const char **out, uint32_t *out_len) {
  const char *q = p->s + 1, *body = q;
  /* Find the closing quote; the unescaped text is at most this long. */
  while (q < p->end && *q != '"') {
    if ((unsigned char)*q < 0x20) {
      fail(p, q, "control character in a string (escape it)");
      return false;
    }
    if (*q == '\\' && ++q == p->end) break;
    q++;
  }
  if (q >= p->end) {
    fail(p, p->s, "unterminated string");
    return false;
  }
  size_t raw = (size_t)(q - body);
  if (raw >= UINT32_MAX) {
    fail(p, p->s, "string too long");
    return false;
  }
  char *o = arena_alloc(p->d, raw + 1), *o0 = o;
  if (!o) {
    oom(p);
    return false;
  }
  for (const char *s = body; s < q;) {
    if (*s != '\\') {
      const char *run = s;
      while (s < q && *s != '\\') s++;
      memcpy(o, run, (size_t)(s - run));
      o += s - run;
      continue;
    }
    const char *esc = s;
    char c = s[1];
    s += 2;
    switch (c) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        int cp = q - s >= 4 ? hex4(s) : -1;
        if (cp < 0) {
          fail(p, esc, "\\u needs four hex digits");
          return false;
        }
        s += 4;
        if (cp >= 0xdc00 && cp <= 0xdfff) {
          fail(p, esc, "\\u escape is a lone low surrogate");
          return false;
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
          int lo = q - s >= 6 && s[0] == '\\' && s[1] == 'u' ? hex4(s + 2) : -1;
          if (lo < 0xdc00 || lo > 0xdfff) {
            fail(p, esc, "\\u escape is a high surrogate without its low half");
            return false;
          }
          s += 6;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp < 0x80) {
          *o++ = (char)cp;
        } else if (cp < 0x800) {
          *o++ = (char)(0xc0 | cp >> 6);
          *o++ = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
          *o++ = (char)(0xe0 | cp >> 12);
          *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
          *o++ = (char)(0x80 | (cp & 0x3f));
        } else {
          *o++ = (char)(0xf0 | cp >> 18);
          *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
          *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
          *o++ = (char)(0x80 | (cp & 0x3f));
        }
        break;
      }
      default:
        fail(p, esc, "invalid escape in a string");
        return false;
    }
  }
  *o = 0;
  *out = o0;
  *out_len = (uint32_t)(o - o0);
  p->s = q + 1;
  return true;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static bool isdig(char c) { return c >= '0' && c <= '9'; }

/* RFC 8259 number (plus NaN / Infinity / -Infinity). Exact: Clinger's fast path when the
 * digits fit 2^53 and the power of ten is exact, strtod on the same text otherwise. */
static bool parse_number(parser *p, double *out, json_value *iv) {
  const char *s = p->s, *b = s, *end = p->end;
  bool neg = false;
  if (lit(p, "NaN")) { *out = NAN; return true; }
  if (s < end && *s == '-') neg = true, s++;
  p->s = s;
  if (lit(p, "Infinity")) { *out = neg ? -INFINITY : INFINITY; return true; }
  if (s >= end || !isdig(*s)) { fail(p, b, "invalid number"); return false; }
  uint64_t m = 0;
  int nd = 0;
  int64_t e10 = 0;
  bool truncated = false;
  /* The exact integer value of the digits before any '.' or exponent (ov: it overflowed
   * 2^64 - 1). */
  uint64_t exact = 0;
  bool ov = false;
  if (*s == '0') {
    s++;
  } else {
    for (; s < end && isdig(*s); s++) {
      unsigned dg = (unsigned)(*s - '0');
      if (exact > (UINT64_MAX - dg) / 10) ov = true;
      else exact = exact * 10 + dg;
      if (nd < 19) m = m * 10 + dg, nd++;
      else e10++, truncated = true;
    }
  }
  if (!ov && (s >= end || (*s != '.' && *s != 'e' && *s != 'E'))) {
    if (neg) {
      if (exact <= (uint64_t)INT64_MAX + 1) {
        iv->int_flags = JSON_INT_I64;
        iv->ix.i = exact == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)exact;
        if (exact == 0) iv->int_flags |= JSON_INT_U64; /* -0 */
      }
    } else {
      iv->int_flags = JSON_INT_U64 | (exact <= (uint64_t)INT64_MAX ? JSON_INT_I64 : 0);
      iv->ix.u = exact;
    }
  }
  if (s < end && *s == '.') {
    s++;
    if (s >= end || !isdig(*s)) { fail(p, s, "invalid number: digits must follow '.'"); return false; }
    for (; s < end && isdig(*s); s++) {
      if (nd < 19) {
        m = m * 10 + (uint64_t)(*s - '0'), e10--;
        if (m) nd++;
      } else {
        truncated = true;
      }
    }
  }
  if (s < end && (*s == 'e' || *s == 'E')) {
    s++;
    bool eneg = false;
    if (s < end && (*s == '+' || *s == '-')) eneg = *s == '-', s++;
    if (s >= end || !isdig(*s)) { fail(p, s, "invalid number: digits must follow the exponent"); return false; }
    int ev = 0;
    for (; s < end && isdig(*s); s++)
      if (ev < 100000) ev = ev * 10 + (*s - '0');
    e10 += eneg ? -ev : ev;
  }
  p->s = s;
  if (!truncated && m <= (1ull << 53) && e10 >= -22 && e10 <= 22) {
    double d = (double)m;
    d = e10 >= 0 ? d * POW10[e10] : d / POW10[-e10];
    *out = neg ? -d : d;
    return true;
  }
  char tmp[128];
  size_t n = (size_t)(s - b);
  char *t = n < sizeof tmp ? tmp : malloc(n + 1);
  if (!t) { oom(p); return false; }
  memcpy(t, b, n);
  t[n] = 0;
  *out = strtod(t, NULL);
  if (t != tmp) free(t);
  return true;
}

static json_value *parse_value(parser *p);

static json_value *parse_container(parser *p, bool object) {
  if (++p->depth > p->max_depth) {
    if (!p->err)
      p->err = cinfer_status_new(CINFER_INVALID_ARG, "JSON nesting depth exceeds maximum allowed limit (%d)",
                                 p->max_depth);
    return NULL;
  }
  json_value *v = node(p, object ? JSON_OBJECT : JSON_ARRAY);
  if (!v) return NULL;
  char close = object ? '}' : ']';
  p->s++;
  skip_ws(p);
  if (p->s < p->end && *p->s == close) {
    p->s++;
    p->depth--;
    return v;
  }
  json_value **tail = &v->u.child;
  for (;;) {
    const char *key = NULL;
    if (object) {
      uint32_t klen;
      if (p->s >= p->end || *p->s != '"') return fail(p, p->s, "expected a string member name");
      if (!parse_string(p, &key, &klen)) return NULL;
      skip_ws(p);
      if (p->s >= p->end || *p->s != ':') return fail(p, p->s, "expected ':' after the member name");
      p->s++;
      skip_ws(p);
    }
    json_value *e = parse_value(p);
    if (!e) return NULL;
    e->key = key;
    *tail = e;
    tail = &e->next;
    if (v->len == UINT32_MAX) return fail(p, p->s, "too many elements");
    v->len++;
    skip_ws(p);
    if (p->s < p->end && *p->s == ',') {
      p->s++;
      skip_ws(p);
      continue;
    }
    if (p->s < p->end && *p->s == close) {
      p->s++;
      p->depth--;
      return v;
    }
    return fail(p, p->s, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

/* p->s is at the first character of the value (whitespace skipped). */
static json_value *parse_value(parser *p) {
  if (p->s >= p->end) return fail(p, p->s, "expected a value");
  json_value *v;
  switch (*p->s) {
    case '{': return parse_container(p, true);
    case '[': return parse_container(p, false);
    case '"':
      if (!(v = node(p, JSON_STRING))) return NULL;
      return parse_string(p, &v->u.str, &v->len) ? v : NULL;
    case 't': if (lit(p, "true")) return node(p, JSON_TRUE); break;
    case 'f': if (lit(p, "false")) return node(p, JSON_FALSE); break;
    case 'n': if (lit(p, "null")) return node(p, JSON_NULL); break;
    default:
      if (isdig(*p->s) || *p->s == '-' || *p->s == 'N' || *p->s == 'I') {
        json_value tmp = {.type = JSON_NUMBER};
        if (!parse_number(p, &tmp.u.num, &tmp)) return NULL;
        if (!(v = node(p, JSON_NUMBER))) return NULL;
        *v = tmp;
        return v;
      }
  }
  return fail(p, p->s, "expected a value");
}

cinfer_status *json_parse(const char *text, size_t n, int max_depth, json_doc **out) {
  *out = NULL;
  json_doc *d = malloc(sizeof *d);
  if (!d) return cinfer_status_oom("parsing JSON");
  d->root = NULL;
  d->base = d->inline_mem;
  d->cap = FIRST_BLOCK;
  d->used = 0;
  d->next_cap = 4 * FIRST_BLOCK;
  d->chain = NULL;
  parser p = {.s = text, .end = text + n, .start = text, .d = d, .max_depth = max_depth};
  skip_ws(&p);
  d->root = parse_value(&p);
  if (d->root) {
    skip_ws(&p);
    if (p.s != p.end) fail(&p, p.s, "unexpected data after the JSON value");
  }
  if (p.err) {
    json_doc_free(d);
    return p.err;
  }
  *out = d;
  return NULL;
}

const json_value *json_root(const json_doc *d) { return d->root; }

void json_doc_free(json_doc *d) {
  if (!d) return;
  for (block *b = d->chain, *nx; b; b = nx) {
    nx = b->next;
    free(b);
  }
  free(d);
}

const json_value *json_get(const json_value *v, const char *key) {
  if (!v || v->type != JSON_OBJECT) return NULL;
  for (const json_value *m = v->u.child; m; m = m->next)
    if (!strcmp(m->key, key)) return m;
  return NULL;
}
