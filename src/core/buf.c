/* buf.c: see buf.h. */
#include "core/buf.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinfer/types.h"

bool cbuf_reserve(cbuf *b, size_t n) {
  if (b->oom) return false;
  if (b->cap - b->len > n) return true;
  if (n >= SIZE_MAX / 4 - b->len) {
    b->oom = true;
    return false;
  }
  size_t ncap = b->cap ? b->cap : 256;
  while (ncap - b->len <= n) ncap *= 2;
  char *nd = realloc(b->data, ncap);
  if (!nd) {
    b->oom = true;
    return false;
  }
  b->data = nd;
  b->cap = ncap;
  return true;
}

void cbuf_put(cbuf *b, const void *p, size_t n) {
  if (!cbuf_reserve(b, n)) return;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
}

void cbuf_puts(cbuf *b, const char *s) { cbuf_put(b, s, strlen(s)); }

void cbuf_printf(cbuf *b, const char *fmt, ...) {
  for (int tries = 0; tries < 2 && cbuf_reserve(b, 64); tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    if (!cbuf_reserve(b, (size_t)n)) return;
  }
}

void cbuf_json_param_value(cbuf *b, const cinfer_param *p) {
  switch (p->type) {
  case CINFER_PARAM_BOOL: cbuf_puts(b, p->b ? "true" : "false"); break;
  case CINFER_PARAM_INT: cbuf_printf(b, "%lld", (long long)p->i); break;
  case CINFER_PARAM_DOUBLE:
    if (isfinite(p->d)) cbuf_printf(b, "%.17g", p->d);
    else cbuf_puts(b, "null");
    break;
  case CINFER_PARAM_STRING: cbuf_json_string(b, p->s, strlen(p->s)); break;
  }
}

void cbuf_json_string(cbuf *b, const char *s, size_t n) {
  if (n > SIZE_MAX / 8 || !cbuf_reserve(b, n * 6 + 2)) {
    b->oom = true;
    return;
  }
  static const char hex[] = "0123456789abcdef";
  char *o = b->data + b->len;
  *o++ = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') { *o++ = '\\'; *o++ = (char)c; }
    else if (c == '\n') { *o++ = '\\'; *o++ = 'n'; }
    else if (c == '\r') { *o++ = '\\'; *o++ = 'r'; }
    else if (c == '\t') { *o++ = '\\'; *o++ = 't'; }
    else if (c < 0x20) {
      memcpy(o, "\\u00", 4);
      o[4] = hex[c >> 4];
      o[5] = hex[c & 15];
      o += 6;
    } else *o++ = (char)c;
  }
  *o++ = '"';
  *o = 0;
  b->len = (size_t)(o - b->data);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one. */
static size_t utf8_valid_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (!l || l > n || (l == 2 && c < 0xc2) || (l == 4 && c > 0xf4)) return 0;
  for (size_t i = 1; i < l; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (l == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f))) return 0;
  if (l == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))) return 0;
  return l;
}

void cbuf_json_string_utf8(cbuf *b, const char *s, size_t n) {
  cbuf t = {0};
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t l = utf8_valid_len(p + i, n - i);
    if (l) {
      cbuf_put(&t, p + i, l);
      i += l;
    } else {
      cbuf_put(&t, "\xef\xbf\xbd", 3); /* U+FFFD */
      i++;
    }
  }
  if (t.oom) b->oom = true;
  else cbuf_json_string(b, t.data ? t.data : "", t.len);
  cbuf_free(&t);
}

char *cbuf_take(cbuf *b) {
  char *p = b->oom ? NULL : b->data ? b->data : strdup("");
  if (!p || b->oom) free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->oom = false;
  return p;
}

cinfer_status *cbuf_read_file(cbuf *b, const char *path, size_t max_bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return cinfer_status_new(CINFER_INVALID_ARG, "%s: %s", path, strerror(errno));
  size_t start = b->len;
  cinfer_status *st = NULL;
  for (;;) {
    if (!cbuf_reserve(b, 4096)) {
      st = cinfer_status_oom(path);
      break;
    }
    size_t got = fread(b->data + b->len, 1, b->cap - b->len - 1, f);
    b->len += got;
    b->data[b->len] = 0;
    if (b->len - start > max_bytes) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "%s: larger than %zu bytes", path, max_bytes);
      break;
    }
    if (got == 0) {
      if (ferror(f)) st = cinfer_status_new(CINFER_INVALID_ARG, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  return st;
}

void cbuf_free(cbuf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}
