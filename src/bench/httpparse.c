/* httpparse.c: the generator's HTTP/1.1 response parser, SSE line parser and two JSON
 * peeks for streamed chunks. Nothing here allocates per response.
 *
 * Response state machine (st):
 *   HEAD --blank line--> (no body: 204/304/HEAD/Content-Length 0) DONE
 *                     \-> BODY_CL (remaining = Content-Length) --0 left--> DONE
 *                     \-> CHUNK_SIZE -> CHUNK_EXT -> CHUNK_DATA -> CHUNK_CR/LF -> CHUNK_SIZE
 *                           size 0 -> TRAILER_START <-> TRAILER_LINE ... empty line -> DONE
 *                     \-> BODY_EOF (until the peer closes; bench_http_eof -> DONE)
 *   1xx interim responses (not 101) are skipped: parsing restarts in HEAD after them.
 * The header is parsed in place in the caller's buffer; body bytes are handed to a
 * callback and never kept. Chunk sizes are limited to 15 hex digits (no overflow). */
#include "core/hex.h"
#include "bench/bench.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum {
  ST_HEAD = 0,
  ST_BODY_CL,
  ST_BODY_EOF,
  ST_CHUNK_SIZE,
  ST_CHUNK_EXT,
  ST_CHUNK_SIZE_LF,
  ST_CHUNK_DATA,
  ST_CHUNK_CR,
  ST_CHUNK_LF,
  ST_TRAILER_START,
  ST_TRAILER_LINE,
  ST_TRAILER_LF,
  ST_DONE
};

void bench_http_resp_init(bench_http_resp *r, bool is_head) {
  memset(r, 0, sizeof *r);
  r->content_length = -1;
  r->is_head = is_head;
  r->st = ST_HEAD;
}

static bool ieq(const char *a, size_t n, const char *lit) {
  size_t m = strlen(lit);
  if (n != m) return false;
  for (size_t i = 0; i < n; i++)
    if (tolower((unsigned char)a[i]) != lit[i]) return false;
  return true;
}

/* Does the comma-separated value v contain token tok (case-insensitive)? */
static bool has_token(const char *v, size_t n, const char *tok) {
  size_t m = strlen(tok);
  for (size_t i = 0; i + m <= n; i++) {
    if (i > 0 && v[i - 1] != ',' && v[i - 1] != ' ' && v[i - 1] != '\t') continue;
    if (strncasecmp(v + i, tok, m) == 0) {
      size_t e = i + m;
      if (e == n || v[e] == ',' || v[e] == ' ' || v[e] == '\t' || v[e] == ';') return true;
    }
  }
  return false;
}

/* Parses the header block h[0..n) (which ends with the blank line). */
static bench_http_rc parse_header(bench_http_resp *r, const char *h, size_t n) {
  const char *end = h + n, *p = h;
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  if (!eol) return r->error = "malformed status line", BENCH_HTTP_ERROR;
  size_t ll = (size_t)(eol - p);
  if (ll && p[ll - 1] == '\r') ll--;
  if (ll < 12 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
      p[8] != ' ' || !isdigit((unsigned char)p[9]) || !isdigit((unsigned char)p[10]) ||
      !isdigit((unsigned char)p[11]) || (ll > 12 && p[12] != ' '))
    return r->error = "malformed status line", BENCH_HTTP_ERROR;
  bool http10 = p[7] == '0';
  r->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
  if (r->status < 100) return r->error = "malformed status line", BENCH_HTTP_ERROR;
  bool keep_alive = !http10, te = false;
  p = eol + 1;
  while (p < end) {
    eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) break;
    size_t len = (size_t)(eol - p);
    if (len && p[len - 1] == '\r') len--;
    if (len == 0) break; /* blank line */
    const char *colon = memchr(p, ':', len);
    if (!colon || colon == p) return r->error = "malformed header line", BENCH_HTTP_ERROR;
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1, *ve = p + len;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    size_t vl = (size_t)(ve - v);
    if (ieq(p, nl, "content-length")) {
      if (vl == 0 || vl > 18) return r->error = "bad Content-Length", BENCH_HTTP_ERROR;
      int64_t cl = 0;
      for (size_t i = 0; i < vl; i++) {
        if (!isdigit((unsigned char)v[i])) return r->error = "bad Content-Length", BENCH_HTTP_ERROR;
        cl = cl * 10 + (v[i] - '0');
      }
      if (r->content_length >= 0 && r->content_length != cl)
        return r->error = "conflicting Content-Length headers", BENCH_HTTP_ERROR;
      r->content_length = cl;
    } else if (ieq(p, nl, "transfer-encoding")) {
      te = true;
      r->chunked = has_token(v, vl, "chunked");
    } else if (ieq(p, nl, "connection")) {
      if (has_token(v, vl, "close")) keep_alive = false;
      if (has_token(v, vl, "keep-alive")) keep_alive = true;
    } else if (ieq(p, nl, "content-type")) {
      r->event_stream = vl >= 17 && strncasecmp(v, "text/event-stream", 17) == 0;
    }
    p = eol + 1;
  }
  if (te && !r->chunked) return r->error = "unsupported Transfer-Encoding", BENCH_HTTP_ERROR;
  r->conn_close = !keep_alive;
  return BENCH_HTTP_MORE;
}

/* Finds the end of the header (index just past the blank line) or 0. */
static size_t header_end(const char *d, size_t len, size_t from) {
  for (size_t i = from; i < len; i++) {
    if (d[i] != '\n') continue;
    if (i >= 1 && d[i - 1] == '\n') return i + 1;
    if (i >= 3 && d[i - 1] == '\r' && d[i - 2] == '\n' && d[i - 3] == '\r') return i + 1;
  }
  return 0;
}

bench_http_rc bench_http_feed(bench_http_resp *r, const char *data, size_t len,
                              size_t *consumed, bench_body_fn on_body, void *ud,
                              size_t max_header) {
  size_t i = 0;
  *consumed = 0;
  for (;;) {
    if (r->st == ST_HEAD) {
      size_t from = r->scanned > 3 ? r->scanned - 3 : 0;
      size_t he = header_end(data + i, len - i, from);
      if (!he) {
        r->scanned = len - i;
        if (len - i > max_header) return r->error = "response header too large", BENCH_HTTP_ERROR;
        *consumed = i;
        return BENCH_HTTP_MORE;
      }
      if (he > max_header) return r->error = "response header too large", BENCH_HTTP_ERROR;
      bench_http_rc rc = parse_header(r, data + i, he);
      if (rc == BENCH_HTTP_ERROR) return rc;
      i += he;
      r->scanned = 0;
      if (r->status >= 100 && r->status < 200 && r->status != 101) {
        /* interim response: parse the next header */
        bool head = r->is_head;
        bench_http_resp_init(r, head);
        continue;
      }
      r->header_done = true;
      if (r->is_head || r->status == 204 || r->status == 304 || r->status == 101) {
        r->st = ST_DONE;
      } else if (r->chunked) {
        r->st = ST_CHUNK_SIZE;
        r->remaining = 0;
        r->chunk_digits = 0;
      } else if (r->content_length >= 0) {
        r->remaining = (uint64_t)r->content_length;
        r->st = r->remaining ? ST_BODY_CL : ST_DONE;
      } else {
        r->st = ST_BODY_EOF;
      }
      continue;
    }
    if (r->st == ST_DONE) {
      *consumed = i;
      return BENCH_HTTP_DONE;
    }
    if (i >= len) {
      *consumed = i;
      return BENCH_HTTP_MORE;
    }
    switch (r->st) {
      case ST_BODY_CL:
      case ST_CHUNK_DATA: {
        size_t n = len - i;
        if ((uint64_t)n > r->remaining) n = (size_t)r->remaining;
        if (on_body && n) on_body(ud, data + i, n);
        r->body_bytes += n;
        r->remaining -= n;
        i += n;
        if (!r->remaining) r->st = r->st == ST_BODY_CL ? ST_DONE : ST_CHUNK_CR;
        break;
      }
      case ST_BODY_EOF: {
        size_t n = len - i;
        if (on_body) on_body(ud, data + i, n);
        r->body_bytes += n;
        i += n;
        break;
      }
      case ST_CHUNK_SIZE: {
        char c = data[i++];
        int h = hex_digit((unsigned char)(c));
        if (h >= 0) {
          if (++r->chunk_digits > 15) return r->error = "chunk size too large", BENCH_HTTP_ERROR;
          r->remaining = r->remaining * 16 + (uint64_t)h;
        } else if (r->chunk_digits == 0) {
          return r->error = "malformed chunk size", BENCH_HTTP_ERROR;
        } else if (c == ';' || c == ' ' || c == '\t') {
          r->st = ST_CHUNK_EXT;
        } else if (c == '\r') {
          r->st = ST_CHUNK_SIZE_LF;
        } else if (c == '\n') {
          goto size_done;
        } else {
          return r->error = "malformed chunk size", BENCH_HTTP_ERROR;
        }
        break;
      }
      case ST_CHUNK_EXT: {
        const char *nl = memchr(data + i, '\n', len - i);
        if (!nl) {
          i = len;
          break;
        }
        i = (size_t)(nl - data) + 1;
        goto size_done;
      }
      case ST_CHUNK_SIZE_LF:
        if (data[i++] != '\n') return r->error = "malformed chunk size line", BENCH_HTTP_ERROR;
      size_done:
        r->chunk_digits = 0;
        r->st = r->remaining ? ST_CHUNK_DATA : ST_TRAILER_START;
        break;
      case ST_CHUNK_CR: {
        char c = data[i++];
        if (c == '\r') r->st = ST_CHUNK_LF;
        else if (c == '\n') r->st = ST_CHUNK_SIZE;
        else return r->error = "missing CRLF after chunk data", BENCH_HTTP_ERROR;
        break;
      }
      case ST_CHUNK_LF:
        if (data[i++] != '\n') return r->error = "missing CRLF after chunk data", BENCH_HTTP_ERROR;
        r->st = ST_CHUNK_SIZE;
        r->remaining = 0;
        break;
      case ST_TRAILER_START: {
        char c = data[i++];
        if (c == '\r') r->st = ST_TRAILER_LF;
        else if (c == '\n') r->st = ST_DONE;
        else r->st = ST_TRAILER_LINE;
        break;
      }
      case ST_TRAILER_LINE: {
        const char *nl = memchr(data + i, '\n', len - i);
        if (!nl) {
          i = len;
          break;
        }
        i = (size_t)(nl - data) + 1;
        r->st = ST_TRAILER_START;
        break;
      }
      case ST_TRAILER_LF:
        if (data[i++] != '\n') return r->error = "malformed chunked trailer", BENCH_HTTP_ERROR;
        r->st = ST_DONE;
        break;
      default:
        return r->error = "parser state corrupt", BENCH_HTTP_ERROR;
    }
  }
}

bench_http_rc bench_http_eof(bench_http_resp *r) {
  if (r->st == ST_BODY_EOF) {
    r->st = ST_DONE;
    return BENCH_HTTP_DONE;
  }
  if (r->st == ST_DONE) return BENCH_HTTP_DONE;
  r->error = r->st == ST_HEAD ? "connection closed before a response"
                              : "connection closed in the middle of a response body";
  return BENCH_HTTP_ERROR;
}

/* ---- SSE ----------------------------------------------------------------------------- */

cinfer_status *bench_sse_init(bench_sse *s, size_t cap) {
  memset(s, 0, sizeof *s);
  s->line = malloc(cap);
  s->data = malloc(cap);
  if (!s->line || !s->data) {
    bench_sse_free(s);
    return cinfer_status_oom("for SSE buffers");
  }
  s->cap = cap;
  return NULL;
}

void bench_sse_reset(bench_sse *s) {
  s->line_len = s->data_len = 0;
  s->has_data = s->last_cr = s->overflow = false;
}

void bench_sse_free(bench_sse *s) {
  free(s->line);
  free(s->data);
  memset(s, 0, sizeof *s);
}

/* One complete line (without its terminator). */
static bool sse_line(bench_sse *s, bench_sse_fn fn, void *ud) {
  const char *l = s->line;
  size_t n = s->line_len;
  if (n == 0) {
    if (s->has_data) fn(ud, s->data, s->data_len);
    s->data_len = 0;
    s->has_data = false;
    return true;
  }
  if (n >= 5 && memcmp(l, "data:", 5) == 0) {
    l += 5;
    n -= 5;
    if (n && *l == ' ') l++, n--;
    size_t need = n + (s->has_data ? 1 : 0);
    if (s->data_len + need > s->cap) return false;
    if (s->has_data) s->data[s->data_len++] = '\n';
    memcpy(s->data + s->data_len, l, n);
    s->data_len += n;
    s->has_data = true;
  }
  /* comments (":..."), event:, id:, retry: are ignored */
  return true;
}

bool bench_sse_feed(bench_sse *s, const char *p, size_t n, bench_sse_fn fn, void *ud) {
  if (s->overflow) return false;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c == '\n' && s->last_cr) {
      s->last_cr = false;
      continue;
    }
    s->last_cr = c == '\r';
    if (c == '\n' || c == '\r') {
      if (!sse_line(s, fn, ud)) return !(s->overflow = true);
      s->line_len = 0;
      continue;
    }
    if (s->line_len >= s->cap) return !(s->overflow = true);
    s->line[s->line_len++] = c;
  }
  return true;
}

/* ---- JSON peeks ------------------------------------------------------------------------- */

/* Position just after `"key"` followed by optional spaces and ':' and spaces, or NULL. */
static const char *peek_key(const char *p, size_t n, const char *key) {
  size_t kl = strlen(key);
  const char *end = p + n;
  for (const char *q = p; q + kl + 2 <= end; q++) {
    q = memchr(q, '"', (size_t)(end - q));
    if (!q || q + kl + 2 > end) return NULL;
    if (memcmp(q + 1, key, kl) == 0 && q[kl + 1] == '"') {
      const char *v = q + kl + 2;
      while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r')) v++;
      if (v >= end || *v != ':') continue;
      v++;
      while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r')) v++;
      return v < end ? v : NULL;
    }
  }
  return NULL;
}

bool bench_json_peek_int(const char *p, size_t n, const char *key, int64_t *out) {
  const char *v = peek_key(p, n, key), *end = p + n;
  if (!v) return false;
  bool neg = false;
  if (*v == '-') neg = true, v++;
  if (v >= end || !isdigit((unsigned char)*v)) return false;
  int64_t x = 0;
  int digits = 0;
  while (v < end && isdigit((unsigned char)*v)) {
    if (++digits > 18) return false;
    x = x * 10 + (*v++ - '0');
  }
  *out = neg ? -x : x;
  return true;
}

bool bench_json_peek_nonempty_string(const char *p, size_t n, const char *key) {
  const char *v = peek_key(p, n, key), *end = p + n;
  return v && *v == '"' && v + 1 < end && v[1] != '"';
}
