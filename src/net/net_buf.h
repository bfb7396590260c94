/* net_buf.h (private to src/net): growable byte buffer and fast appenders used to build
 * response/request heads without printf. A buffer only ever grows (it is reused across
 * requests, so steady state allocates nothing); net_buf_shrink gives memory back after an
 * unusually large message. */
#ifndef CINFER_NET_BUF_H
#define CINFER_NET_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct net_buf {
  char *data;
  size_t len, cap;
} net_buf;

/* Ensures room for `extra` more bytes; false on overflow or out of memory. */
static inline bool net_buf_reserve(net_buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return true;
  if (extra > SIZE_MAX / 2 - b->len) return false;
  size_t want = b->len + extra, cap = b->cap ? b->cap : 256;
  while (cap < want) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) return false;
  b->data = p;
  b->cap = cap;
  return true;
}

static inline bool net_buf_append(net_buf *b, const void *p, size_t n) {
  if (!net_buf_reserve(b, n)) return false;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return true;
}

#define NET_BUF_LIT(b, s) net_buf_append((b), (s), sizeof(s) - 1)

static inline bool net_buf_str(net_buf *b, const char *s) {
  return net_buf_append(b, s, strlen(s));
}

/* Decimal (base 10) or hex (base 16, lowercase) rendering of v. */
static inline bool net_buf_uint(net_buf *b, uint64_t v, unsigned base) {
  char tmp[24];
  int i = (int)sizeof tmp;
  do {
    unsigned d = (unsigned)(v % base);
    tmp[--i] = (char)(d < 10 ? '0' + d : 'a' + d - 10);
    v /= base;
  } while (v);
  return net_buf_append(b, tmp + i, sizeof tmp - (size_t)i);
}

static inline void net_buf_shrink(net_buf *b, size_t keep_cap) {
  if (b->cap > keep_cap && b->len <= keep_cap) {
    char *p = realloc(b->data, keep_cap);
    if (p) {
      b->data = p;
      b->cap = keep_cap;
    }
  }
}

static inline void net_buf_free(net_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

#endif
