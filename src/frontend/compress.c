/* compress.c: zlib wrappers for HTTP bodies. See compress.h.
 *
 * Invariants: the output buffer never grows past max_out (+1 byte of probe), checked before
 * each reallocation; zlib's avail_* counters are uInt, so input and output are fed in
 * windows of at most 1 GiB. */
#include "frontend/compress.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

static bool tok_eq(const char *s, size_t n, const char *w) {
  return strlen(w) == n && !strncasecmp(s, w, n);
}

bool compress_request_kind(const char *v, size_t n, compress_kind *out) {
  *out = COMPRESS_IDENTITY;
  if (!v || !n || tok_eq(v, n, "identity")) return true;
  if (tok_eq(v, n, "gzip") || tok_eq(v, n, "x-gzip")) return *out = COMPRESS_GZIP, true;
  if (tok_eq(v, n, "deflate")) return *out = COMPRESS_DEFLATE, true;
  return false;
}

compress_kind compress_pick_response(const char *a, size_t n) {
  compress_kind best = COMPRESS_IDENTITY;
  double best_q = 0;
  size_t i = 0;
  while (a && i < n) {
    size_t e = i;
    while (e < n && a[e] != ',') e++;
    /* entry a[i..e): "  type[;q=x]" */
    size_t s = i;
    while (s < e && (a[s] == ' ' || a[s] == '\t')) s++;
    size_t t = s;
    while (t < e && a[t] != ';' && a[t] != ' ' && a[t] != '\t') t++;
    double q = 1;
    const char *semi = memchr(a + t, ';', e - t);
    bool ok = t > s;
    if (semi) {
      const char *qp = semi + 1;
      while (qp < a + e && *qp == ' ') qp++;
      if (a + e - qp >= 2 && (qp[0] == 'q' || qp[0] == 'Q') && qp[1] == '=') {
        char tmp[16];
        size_t ql = (size_t)(a + e - qp - 2);
        if (ql == 0 || ql >= sizeof tmp) ok = false;
        else {
          memcpy(tmp, qp + 2, ql);
          tmp[ql] = 0;
          char *end;
          q = strtod(tmp, &end);
          while (*end == ' ') end++;
          if (*end || !(q >= 0 && q <= 1)) ok = false;
        }
      }
    }
    if (ok) {
      compress_kind k;
      bool known = true;
      if (tok_eq(a + s, t - s, "gzip")) k = COMPRESS_GZIP;
      else if (tok_eq(a + s, t - s, "deflate")) k = COMPRESS_DEFLATE;
      else if (tok_eq(a + s, t - s, "identity")) k = COMPRESS_IDENTITY;
      else known = false;
      if (known && q > best_q) best = k, best_q = q;
    }
    i = e + 1;
  }
  return best;
}

#define WINDOW ((size_t)1 << 30)

cinfer_status *compress_inflate(const void *in, size_t n, size_t max_out, void **out,
                                size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 15 | 32) != Z_OK)
    return cinfer_status_oom("failed to initialize state for data decompression");
  size_t cap = n < 4096 ? 4096 : n * 2, len = 0;
  if (max_out && cap > max_out + 1) cap = max_out + 1;
  unsigned char *buf = malloc(cap);
  cinfer_status *st = NULL;
  if (!buf) {
    st = cinfer_status_oom("decompressing the request body");
    goto out;
  }
  const unsigned char *src = in;
  size_t left = n;
  int rc = Z_OK;
  for (;;) {
    if (!zs.avail_in && left) {
      size_t w = left < WINDOW ? left : WINDOW;
      zs.next_in = (unsigned char *)(uintptr_t)src;
      zs.avail_in = (uInt)w;
      src += w;
      left -= w;
    }
    if (len == cap) {
      if (max_out && len > max_out) break;
      size_t ncap = cap * 2;
      if (max_out && ncap > max_out + 1) ncap = max_out + 1;
      unsigned char *nb = realloc(buf, ncap);
      if (!nb) {
        st = cinfer_status_oom("decompressing the request body");
        goto out;
      }
      buf = nb;
      cap = ncap;
    }
    size_t room = cap - len < WINDOW ? cap - len : WINDOW;
    zs.next_out = buf + len;
    zs.avail_out = (uInt)room;
    rc = inflate(&zs, Z_NO_FLUSH);
    len += room - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && !zs.avail_in && !left) break; /* truncated */
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
  }
  if (max_out && len > max_out) {
    st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED,
                           "Decompressed data size exceeds the maximum allowed value of %zu bytes. "
                           "Use --http-max-input-size to increase the limit.", max_out);
  } else if (rc == Z_MEM_ERROR) {
    st = cinfer_status_oom("decompressing the request body");
  } else if (rc != Z_STREAM_END) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "failed to decompress the request body: %s",
                           rc == Z_BUF_ERROR ? "the compressed stream is truncated"
                                             : (zs.msg ? zs.msg : "corrupt compressed data"));
  } else if (zs.avail_in || left) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "failed to decompress the request body: data after "
                           "the end of the compressed stream");
  }
out:
  inflateEnd(&zs);
  if (st) {
    free(buf);
    return st;
  }
  *out = buf;
  *out_len = len;
  return NULL;
}

cinfer_status *compress_deflate(compress_kind kind, const void *in, size_t n, void **out,
                                size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  /* level 1: a response is compressed on an I/O thread; speed over the last few percent */
  if (deflateInit2(&zs, 1, Z_DEFLATED, kind == COMPRESS_GZIP ? 15 | 16 : 15, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return cinfer_status_oom("compressing the response");
  size_t cap = deflateBound(&zs, n > WINDOW ? WINDOW : (uLong)n) + (n > WINDOW ? n : 0) + 64;
  unsigned char *buf = malloc(cap);
  if (!buf) {
    deflateEnd(&zs);
    return cinfer_status_oom("compressing the response");
  }
  const unsigned char *src = in;
  size_t left = n, len = 0;
  int rc;
  do {
    if (!zs.avail_in && left) {
      size_t w = left < WINDOW ? left : WINDOW;
      zs.next_in = (unsigned char *)(uintptr_t)src;
      zs.avail_in = (uInt)w;
      src += w;
      left -= w;
    }
    if (len == cap) {
      unsigned char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        deflateEnd(&zs);
        return cinfer_status_oom("compressing the response");
      }
      buf = nb;
      cap *= 2;
    }
    size_t room = cap - len < WINDOW ? cap - len : WINDOW;
    zs.next_out = buf + len;
    zs.avail_out = (uInt)room;
    rc = deflate(&zs, left || zs.avail_in ? Z_NO_FLUSH : Z_FINISH);
    len += room - zs.avail_out;
  } while (rc == Z_OK || rc == Z_BUF_ERROR);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    free(buf);
    return cinfer_status_new(CINFER_INTERNAL, "unable to compress the response");
  }
  *out = buf;
  *out_len = len;
  return NULL;
}
