/* grpc_wire.c: see grpc_wire.h. */
#include "grpc/grpc_wire.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

grpc_frame_result grpc_frame_next(const uint8_t *buf, size_t len, size_t max, grpc_msg *msg,
                                  size_t *consumed) {
  if (len < 5) return GRPC_FRAME_INCOMPLETE;
  if (buf[0] > 1) return GRPC_FRAME_BAD_FLAG;
  uint32_t n = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | buf[4];
  if (n > max) return GRPC_FRAME_TOO_LARGE;
  if (len - 5 < n) return GRPC_FRAME_INCOMPLETE;
  msg->data = buf + 5;
  msg->len = n;
  msg->compressed = buf[0] == 1;
  *consumed = 5 + (size_t)n;
  return GRPC_FRAME_OK;
}

void grpc_frame_prefix(cbuf *out, size_t len) {
  uint8_t p[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
  cbuf_put(out, p, 5);
}

cinfer_status *grpc_gunzip(const uint8_t *in, size_t len, size_t max, uint8_t **out,
                           size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 16) != Z_OK) return cinfer_status_oom("gzip");
  size_t cap = len * 4 + 64;
  if (cap > max + 1) cap = max + 1;
  uint8_t *b = malloc(cap ? cap : 1);
  if (!b) {
    inflateEnd(&z);
    return cinfer_status_oom("gzip");
  }
  cinfer_status *st = NULL;
  size_t done = 0;
  z.next_in = (Bytef *)in;
  int r = Z_OK;
  while (r != Z_STREAM_END) {
    /* zlib counts in uInt: feed at most 1 GiB per call. */
    if (z.avail_in == 0) {
      size_t used = (size_t)(z.next_in - (const Bytef *)in);
      size_t left = len - used;
      z.avail_in = (uInt)(left > (1u << 30) ? (1u << 30) : left);
    }
    if (done == cap) {
      if (cap > max) {
        st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED,
                               "decompressed message larger than max (%zu bytes)", max);
        break;
      }
      size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
      uint8_t *nb = realloc(b, ncap);
      if (!nb) { st = cinfer_status_oom("gzip"); break; }
      b = nb;
      cap = ncap;
    }
    size_t room = cap - done;
    z.next_out = b + done;
    z.avail_out = (uInt)(room > (1u << 30) ? (1u << 30) : room);
    uInt before = z.avail_out;
    r = inflate(&z, Z_NO_FLUSH);
    done += before - z.avail_out;
    if (r == Z_STREAM_END) break;
    if (r != Z_OK && r != Z_BUF_ERROR) {
      st = cinfer_status_new(CINFER_INTERNAL, "gzip message is not valid: %s",
                             z.msg ? z.msg : "inflate failed");
      break;
    }
    if (r == Z_BUF_ERROR && z.avail_in == 0 &&
        (size_t)(z.next_in - (const Bytef *)in) == len) {
      st = cinfer_status_new(CINFER_INTERNAL, "gzip message is truncated");
      break;
    }
  }
  if (!st && done > max)
    st = cinfer_status_new(CINFER_RESOURCE_EXHAUSTED,
                           "decompressed message larger than max (%zu bytes)", max);
  if (!st && (size_t)(z.next_in - (const Bytef *)in) != len)
    st = cinfer_status_new(CINFER_INTERNAL, "gzip message has %zu bytes after its end",
                           len - (size_t)(z.next_in - (const Bytef *)in));
  inflateEnd(&z);
  if (st) {
    free(b);
    return st;
  }
  *out = b;
  *out_len = done;
  return NULL;
}

int grpc_status_of(cinfer_code code) {
  switch (code) {
    case CINFER_OK: return GRPC_OK;
    case CINFER_UNKNOWN: return GRPC_UNKNOWN;
    case CINFER_INTERNAL: return GRPC_INTERNAL;
    case CINFER_NOT_FOUND: return GRPC_NOT_FOUND;
    case CINFER_INVALID_ARG: return GRPC_INVALID_ARGUMENT;
    case CINFER_UNAVAILABLE: return GRPC_UNAVAILABLE;
    case CINFER_UNSUPPORTED: return GRPC_UNIMPLEMENTED;
    case CINFER_ALREADY_EXISTS: return GRPC_ALREADY_EXISTS;
    case CINFER_CANCELLED: return GRPC_CANCELLED;
    case CINFER_RESOURCE_EXHAUSTED: return GRPC_RESOURCE_EXHAUSTED;
    case CINFER_DEADLINE_EXCEEDED: return GRPC_DEADLINE_EXCEEDED;
  }
  return GRPC_UNKNOWN;
}

const char *grpc_status_name(int s) {
  static const char *const n[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                  "UNAUTHENTICATED"};
  return s >= 0 && s <= 16 ? n[s] : "UNKNOWN";
}

void grpc_percent_encode(const char *msg, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  if (!cap) return;
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
    bool plain = *p >= 0x20 && *p <= 0x7e && *p != '%';
    size_t need = plain ? 1 : 3;
    if (o + need >= cap) break;
    if (plain) out[o++] = (char)*p;
    else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = 0;
}

bool grpc_parse_timeout(const char *v, size_t len, uint64_t *ms) {
  if (len < 2 || len > 9) return false;
  uint64_t x = 0;
  for (size_t i = 0; i + 1 < len; i++) {
    if (v[i] < '0' || v[i] > '9') return false;
    x = x * 10 + (uint64_t)(v[i] - '0');
  }
  switch (v[len - 1]) {
    case 'H': *ms = x * 3600000; return true;
    case 'M': *ms = x * 60000; return true;
    case 'S': *ms = x * 1000; return true;
    case 'm': *ms = x; return true;
    case 'u': *ms = (x + 999) / 1000; return true;
    case 'n': *ms = (x + 999999) / 1000000; return true;
    default: return false;
  }
}
