/* grpc_msg.c: the little of gRPC and protobuf the gateway reads (pure; fuzz/fuzz_gateway_grpc).
 * See gateway.h (gw_pb_string_field, gw_grpc_request_model). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "gateway/gateway.h"

static bool varint(const uint8_t *p, size_t n, size_t *off, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*off >= n) return false;
    uint8_t b = p[(*off)++];
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return true;
    }
  }
  return false;  /* more than 10 bytes */
}

/* The length of the longest prefix of m[0..n) made of whole fields. */
static size_t whole_fields(const uint8_t *m, size_t n) {
  size_t off = 0, ok = 0;
  while (off < n) {
    uint64_t key, v;
    if (!varint(m, n, &off, &key)) break;
    unsigned wt = (unsigned)(key & 7);
    if (wt == 0) {
      if (!varint(m, n, &off, &v)) break;
    } else if (wt == 2) {
      if (!varint(m, n, &off, &v) || v > n - off) break;
      off += (size_t)v;
    } else if (wt == 1 || wt == 5) {
      size_t w = wt == 1 ? 8 : 4;
      if (n - off < w) break;
      off += w;
    } else {
      break;
    }
    ok = off;
  }
  return ok;
}

int gw_pb_string_field(const uint8_t *msg, size_t len, uint32_t field, const uint8_t **val,
                       size_t *val_len) {
  size_t off = 0;
  int found = 0;
  while (off < len) {
    uint64_t key, v;
    if (!varint(msg, len, &off, &key)) return -1;
    uint32_t f = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
    if (f == 0) return -1;
    switch (wt) {
      case 0:
        if (!varint(msg, len, &off, &v)) return -1;
        if (f == field) return -1;  /* the field is not a string */
        break;
      case 1:
        if (len - off < 8) return -1;
        off += 8;
        break;
      case 5:
        if (len - off < 4) return -1;
        off += 4;
        break;
      case 2:
        if (!varint(msg, len, &off, &v) || v > len - off) return -1;
        if (f == field) {  /* the last occurrence wins, as protobuf parsers do */
          *val = msg + off;
          *val_len = (size_t)v;
          found = 1;
        }
        off += (size_t)v;
        break;
      default:
        return -1;  /* groups (3, 4) and 6, 7 are not in these messages */
    }
  }
  return found;
}

int gw_grpc_request_model(const uint8_t *body, size_t len, bool gzip, uint32_t field,
                          char **out, char *err, size_t ecap) {
  *out = NULL;
  if (len < 5) {
    snprintf(err, ecap, "the request ended inside a gRPC message prefix");
    return -1;
  }
  uint32_t mlen = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 | body[4];
  if (body[0] > 1) {
    snprintf(err, ecap, "invalid gRPC message: compressed flag must be 0 or 1");
    return -1;
  }
  if ((size_t)mlen > len - 5) {
    snprintf(err, ecap, "the request ended inside a gRPC message (%u bytes announced, %zu sent)",
             mlen, len - 5);
    return -1;
  }
  const uint8_t *m = body + 5;
  size_t n = mlen;
  static _Thread_local uint8_t plain[65536];
  if (body[0] == 1) {
    if (!gzip) {
      snprintf(err, ecap, "compressed gRPC message without a grpc-encoding header");
      return -1;
    }
    /* Only the start is inflated: field 1 comes first in every client's encoding; a name
     * not found there is reported (never a wrong guess). */
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
      snprintf(err, ecap, "gzip: out of memory");
      return -1;
    }
    zs.next_in = (Bytef *)m;
    zs.avail_in = (uInt)n;
    zs.next_out = plain;
    zs.avail_out = sizeof plain;
    int zr = inflate(&zs, Z_SYNC_FLUSH);
    size_t got = sizeof plain - zs.avail_out;
    inflateEnd(&zs);
    if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
      snprintf(err, ecap, "invalid gzip gRPC message");
      return -1;
    }
    m = plain;
    /* cut at the last whole field: a truncated tail is not an error here */
    n = got;
    if (zr != Z_STREAM_END) n = whole_fields(m, n);
  }
  const uint8_t *v = NULL;
  size_t vl = 0;
  int r = gw_pb_string_field(m, n, field, &v, &vl);
  if (r < 0) {
    snprintf(err, ecap, "malformed request message (protobuf)");
    return -1;
  }
  if (r == 0) return 0;
  if (memchr(v, 0, vl)) {
    snprintf(err, ecap, "the model name holds a NUL byte");
    return -1;
  }
  char *name = malloc(vl + 1);
  if (!name) {
    snprintf(err, ecap, "out of memory for the model name (%zu bytes)", vl);
    return -1;
  }
  memcpy(name, v, vl);
  name[vl] = 0;
  *out = name;
  return 1;
}
