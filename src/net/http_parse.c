/* http_parse.c: zero-copy HTTP/1.1 message-head parser and resumable chunked decoder.
 *
 * Head parsing works in two steps: (1) find the blank line that ends the head (resumable:
 * the search restarts at prev_len-3, so feeding byte by byte costs O(n) overall), then
 * (2) parse and validate the complete head, which lies entirely in buf[0..head_len).
 * Step (2) never looks past head_len, so no byte beyond len is ever read (the guard-page
 * tests check this). Lines must end in CRLF; obs-fold, whitespace before ':' and control
 * characters are rejected (request smuggling hardening, RFC 9112 sections 5 and 6.3).
 */
#include "core/hex.h"
#include "net/http.h"

#include <stdio.h>
#include <string.h>

/* RFC 9110 tchar: "!#$%&'*+-.^_`|~" DIGIT ALPHA */
static const unsigned char tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
    ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
    ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
    ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
    ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
    ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
    ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
    ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
    ['y'] = 1, ['z'] = 1,
};

static inline unsigned char lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static bool ieq(const char *a, size_t alen, const char *lit) {
  size_t n = strlen(lit);
  if (alen != n) return false;
  for (size_t i = 0; i < n; i++)
    if (lower((unsigned char)a[i]) != lower((unsigned char)lit[i])) return false;
  return true;
}

const char *http_find_header(const http_header *h, size_t n, const char *name,
                             size_t *value_len) {
  for (size_t i = 0; i < n; i++) {
    if (ieq(h[i].name, h[i].name_len, name)) {
      if (value_len) *value_len = h[i].value_len;
      return h[i].value;
    }
  }
  return NULL;
}

const char *http_request_header(const http_request *req, const char *name, size_t *len) {
  return http_find_header(req->headers, req->num_headers, name, len);
}

static http_parse_result fail(http_parse_error *err, int status, const char *msg) {
  if (err) {
    err->status = status;
    err->message = msg;
  }
  return HTTP_PARSE_ERROR;
}

/* Finds the end of the head (index just past "\r\n\r\n"); 0 if absent. Skips the search
 * over bytes already examined in an earlier call. */
static size_t find_head_end(const char *buf, size_t len, size_t start, size_t prev_len) {
  size_t from = prev_len > start + 3 ? prev_len - 3 : start;
  /* A head that is only a blank line right at `start` is handled by the caller. */
  const char *p = buf + from, *end = buf + len;
  while (end - p >= 4) {
    const char *cr = memchr(p, '\r', (size_t)(end - p) - 3);
    if (!cr) break;
    if (cr[1] == '\n' && cr[2] == '\r' && cr[3] == '\n') return (size_t)(cr + 4 - buf);
    p = cr + 1;
  }
  return 0;
}

/* Parses header lines in [p, end) where end points just past the final CRLF CRLF.
 * p starts at the first header line (or at the terminating CRLF). */
static http_parse_result parse_headers(const char *p, const char *end, http_header *headers,
                                       size_t max, size_t *num, http_parse_error *err) {
  size_t n = 0;
  for (;;) {
    if (p[0] == '\r') {  /* blank line: end of head (guaranteed CRLF by find_head_end) */
      *num = n;
      return HTTP_PARSE_OK;
    }
    if (p[0] == ' ' || p[0] == '\t') return fail(err, 400, "obsolete header line folding");
    const char *name = p;
    while (tchar[(unsigned char)*p]) p++;
    if (p == name) return fail(err, 400, "invalid character in header name");
    if (*p != ':') {
      if (*p == ' ' || *p == '\t') return fail(err, 400, "whitespace before ':' in header");
      return fail(err, 400, "invalid character in header name");
    }
    size_t name_len = (size_t)(p - name);
    p++;
    while (*p == ' ' || *p == '\t') p++;
    const char *value = p;
    for (;; p++) {
      unsigned char c = (unsigned char)*p;
      if (c == '\r') break;
      if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(err, 400, "invalid character in header value");
    }
    if (p[1] != '\n') return fail(err, 400, "bare CR in header");
    const char *vend = p;
    while (vend > value && (vend[-1] == ' ' || vend[-1] == '\t')) vend--;
    if (n >= max) return fail(err, 431, "too many header fields");
    headers[n].name = name;
    headers[n].name_len = name_len;
    headers[n].value = value;
    headers[n].value_len = (size_t)(vend - value);
    n++;
    p += 2;
    if (p >= end) return fail(err, 400, "malformed header block");  /* unreachable */
  }
}

/* Parses a decimal Content-Length value; false if not 1*DIGIT or it overflows. */
static bool parse_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 19) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return true;
}

/* Iterates comma-separated tokens of a header value and reports close/keep-alive. */
static void connection_tokens(const char *v, size_t n, bool *close, bool *keep) {
  size_t i = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t s = i;
    while (i < n && v[i] != ',') i++;
    size_t e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (ieq(v + s, e - s, "close")) *close = true;
    else if (ieq(v + s, e - s, "keep-alive")) *keep = true;
  }
}

typedef struct framing {
  bool have_cl, chunked, conn_close, conn_keep, expect_continue, expect_other;
  int host_count;
  uint64_t cl;
} framing;

/* Reads the framing-relevant headers. Errors are those shared by requests and responses. */
static http_parse_result scan_framing(const http_header *h, size_t n, framing *f,
                                      bool request, http_parse_error *err) {
  memset(f, 0, sizeof *f);
  for (size_t i = 0; i < n; i++) {
    const char *nm = h[i].name;
    size_t nl = h[i].name_len;
    switch (nl) {
      case 4:
        if (ieq(nm, nl, "host")) f->host_count++;
        break;
      case 6:
        if (request && ieq(nm, nl, "expect")) {
          if (ieq(h[i].value, h[i].value_len, "100-continue")) f->expect_continue = true;
          else f->expect_other = true;
        }
        break;
      case 10:
        if (ieq(nm, nl, "connection"))
          connection_tokens(h[i].value, h[i].value_len, &f->conn_close, &f->conn_keep);
        break;
      case 14:
        if (ieq(nm, nl, "content-length")) {
          uint64_t v;
          if (!parse_u64(h[i].value, h[i].value_len, &v)) {
            /* 19+ digits is out of range for any limit we accept */
            bool digits = h[i].value_len > 0;
            for (size_t k = 0; k < h[i].value_len; k++)
              if (h[i].value[k] < '0' || h[i].value[k] > '9') digits = false;
            if (digits && request) return fail(err, 413, "Content-Length exceeds the body limit");
            return fail(err, 400, "invalid Content-Length");
          }
          if (f->have_cl && v != f->cl) return fail(err, 400, "conflicting Content-Length headers");
          f->have_cl = true;
          f->cl = v;
        }
        break;
      case 17:
        if (ieq(nm, nl, "transfer-encoding")) {
          if (!ieq(h[i].value, h[i].value_len, "chunked"))
            return fail(err, 501, "unsupported Transfer-Encoding (only chunked)");
          if (f->chunked) return fail(err, 400, "chunked applied twice");
          f->chunked = true;
        }
        break;
      default:
        break;
    }
  }
  if (f->chunked && f->have_cl)
    return fail(err, 400, "both Content-Length and Transfer-Encoding");
  return HTTP_PARSE_OK;
}

static http_method method_id(const char *m, size_t n) {
  switch (n) {
    case 3:
      if (!memcmp(m, "GET", 3)) return HTTP_GET;
      if (!memcmp(m, "PUT", 3)) return HTTP_PUT;
      break;
    case 4:
      if (!memcmp(m, "POST", 4)) return HTTP_POST;
      if (!memcmp(m, "HEAD", 4)) return HTTP_HEAD;
      break;
    case 5:
      if (!memcmp(m, "PATCH", 5)) return HTTP_PATCH;
      break;
    case 6:
      if (!memcmp(m, "DELETE", 6)) return HTTP_DELETE;
      break;
    case 7:
      if (!memcmp(m, "OPTIONS", 7)) return HTTP_OPTIONS;
      break;
  }
  return HTTP_OTHER;
}

/* Parses "HTTP/1.x" at p (8 bytes available before the line end is checked by caller). */
static http_parse_result parse_version(const char *p, const char *lim, int *minor,
                                       http_parse_error *err) {
  if (lim - p < 8 || memcmp(p, "HTTP/", 5) != 0) return fail(err, 400, "malformed HTTP version");
  if (p[5] < '0' || p[5] > '9' || p[6] != '.' || p[7] < '0' || p[7] > '9')
    return fail(err, 400, "malformed HTTP version");
  if (p[5] != '1' || p[7] > '1') return fail(err, 505, "HTTP version not supported");
  *minor = p[7] - '0';
  return HTTP_PARSE_OK;
}

http_parse_result http_parse_request(const char *buf, size_t len, size_t prev_len,
                                     const http_limits *limits, http_header *headers,
                                     size_t max, http_request *req, http_parse_error *err) {
  /* Ignore empty lines before the request line (RFC 9112 2.2). */
  size_t start = 0;
  while (start + 1 < len && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
  if (start < len && buf[start] == '\n') return fail(err, 400, "bare LF");
  size_t head_len = find_head_end(buf, len, start, prev_len);
  if (!head_len) {
    if (len > limits->max_header_bytes) return fail(err, 431, "request header section too large");
    /* Reject an obviously bad first byte early so garbage does not wait for a timeout. */
    if (start < len && buf[start] != '\r' && !tchar[(unsigned char)buf[start]])
      return fail(err, 400, "invalid request line");
    return HTTP_PARSE_INCOMPLETE;
  }
  if (head_len > limits->max_header_bytes) return fail(err, 431, "request header section too large");

  const char *p = buf + start, *end = buf + head_len;
  /* method */
  const char *m = p;
  while (tchar[(unsigned char)*p]) p++;
  if (p == m || *p != ' ') return fail(err, 400, "invalid request method");
  req->method = m;
  req->method_len = (size_t)(p - m);
  req->method_id = method_id(m, req->method_len);
  p++;
  /* request target: visible ASCII (and obs-text) up to SP */
  const char *t = p, *q = NULL;
  for (;; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == ' ') break;
    if (c <= 0x20 || c == 0x7f) return fail(err, 400, "invalid character in request target");
    if (c == '?' && !q) q = p;
  }
  if (p == t) return fail(err, 400, "empty request target");
  req->path = t;
  if (q) {
    req->path_len = (size_t)(q - t);
    req->query = q + 1;
    req->query_len = (size_t)(p - q - 1);
  } else {
    req->path_len = (size_t)(p - t);
    req->query = p;
    req->query_len = 0;
  }
  p++;
  http_parse_result r = parse_version(p, end, &req->version_minor, err);
  if (r) return r;
  p += 8;
  if (p[0] != '\r' || p[1] != '\n') return fail(err, 400, "malformed request line");
  p += 2;

  size_t maxh = limits->max_headers < max ? limits->max_headers : max;
  size_t nh = 0;
  r = parse_headers(p, end, headers, maxh, &nh, err);
  if (r) return r;
  req->headers = headers;
  req->num_headers = nh;

  framing f;
  r = scan_framing(headers, nh, &f, true, err);
  if (r) return r;
  if (req->version_minor == 1 && f.host_count != 1)
    return fail(err, 400, f.host_count ? "duplicate Host header" : "missing Host header");
  if (f.expect_other) return fail(err, 417, "unsupported Expect value");
  req->keep_alive = req->version_minor == 1 ? !f.conn_close : (f.conn_keep && !f.conn_close);
  req->expect_continue = f.expect_continue && req->version_minor == 1;
  req->content_length = 0;
  if (f.chunked) {
    req->body_kind = HTTP_BODY_CHUNKED;
  } else if (f.have_cl) {
    if (f.cl > limits->max_body_bytes) return fail(err, 413, "Content-Length exceeds the body limit");
    req->content_length = f.cl;
    req->body_kind = f.cl ? HTTP_BODY_LENGTH : HTTP_BODY_NONE;
  } else {
    req->body_kind = HTTP_BODY_NONE;
  }
  req->head_len = head_len;
  req->body = NULL;
  req->body_len = 0;
  return HTTP_PARSE_OK;
}

http_parse_result http_parse_response(const char *buf, size_t len, size_t prev_len,
                                      const http_limits *limits, bool head_request,
                                      http_header *headers, size_t max,
                                      http_response *resp, http_parse_error *err) {
  size_t head_len = find_head_end(buf, len, 0, prev_len);
  if (!head_len) {
    if (len > limits->max_header_bytes) return fail(err, 431, "response header section too large");
    if (len >= 5 && memcmp(buf, "HTTP/", 5) != 0) return fail(err, 400, "not an HTTP response");
    return HTTP_PARSE_INCOMPLETE;
  }
  if (head_len > limits->max_header_bytes) return fail(err, 431, "response header section too large");
  const char *p = buf, *end = buf + head_len;
  http_parse_result r = parse_version(p, end, &resp->version_minor, err);
  if (r) return r;
  p += 8;
  if (p[0] != ' ' || p[1] < '1' || p[1] > '9' || p[2] < '0' || p[2] > '9' || p[3] < '0' ||
      p[3] > '9')
    return fail(err, 400, "malformed status line");
  resp->status = (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
  p += 4;
  const char *reason = p;
  if (*p == ' ') {
    reason = ++p;
    for (;; p++) {
      unsigned char c = (unsigned char)*p;
      if (c == '\r') break;
      if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(err, 400, "invalid character in reason phrase");
    }
  }
  if (p[0] != '\r' || p[1] != '\n') return fail(err, 400, "malformed status line");
  resp->reason = reason;
  resp->reason_len = (size_t)(p - reason);
  p += 2;
  size_t maxh = limits->max_headers < max ? limits->max_headers : max;
  size_t nh = 0;
  r = parse_headers(p, end, headers, maxh, &nh, err);
  if (r) return r;
  resp->headers = headers;
  resp->num_headers = nh;
  framing f;
  r = scan_framing(headers, nh, &f, false, err);
  if (r) return r;
  resp->content_length = 0;
  resp->keep_alive = resp->version_minor == 1 ? !f.conn_close : (f.conn_keep && !f.conn_close);
  if (head_request || resp->status < 200 || resp->status == 204 || resp->status == 304) {
    resp->body_kind = HTTP_BODY_NONE;
  } else if (f.chunked) {
    resp->body_kind = HTTP_BODY_CHUNKED;
  } else if (f.have_cl) {
    resp->content_length = f.cl;
    resp->body_kind = f.cl ? HTTP_BODY_LENGTH : HTTP_BODY_NONE;
  } else {
    resp->body_kind = HTTP_BODY_UNTIL_CLOSE;
    resp->keep_alive = false;
  }
  resp->head_len = head_len;
  return HTTP_PARSE_OK;
}

/* ---- chunked -------------------------------------------------------------------------- */

enum {
  CK_SIZE = 0, CK_SIZE_MORE, CK_EXT, CK_SIZE_LF, CK_DATA, CK_DATA_CR, CK_DATA_LF,
  CK_TRAILER_START, CK_TRAILER, CK_TRAILER_LF, CK_FINAL_LF
};

#define CK_MAX_TRAILER 8192

/* The byte of the path at *i (a "%XX" escape decoded), advancing *i past it. */
static char path_byte(const char *p, size_t n, size_t *i) {
  char c = p[(*i)++];
  if (c == '%' && *i + 1 < n && hex_digit((unsigned char)p[*i]) >= 0 && hex_digit((unsigned char)p[*i + 1]) >= 0) {
    c = (char)(hex_digit((unsigned char)p[*i]) * 16 + hex_digit((unsigned char)p[*i + 1]));
    *i += 2;
  }
  return c;
}

bool http_path_split(const char *p, size_t n, http_path_segs *out) {
  out->n = 0;
  out->err = HTTP_PATH_OK;
  out->err_len = 0;
  size_t i = 0;
  while (i < n) {
    while (i < n && p[i] == '/') i++;
    if (i == n) break;
    if (out->n == HTTP_PATH_MAX_SEGS) {
      out->err = HTTP_PATH_TOO_MANY;
      return false;
    }
    char *o = out->seg[out->n];
    size_t k = 0;
    while (i < n && p[i] != '/') {
      char c = path_byte(p, n, &i);
      if (c == 0) {
        out->err = HTTP_PATH_NUL;
        return false;
      }
      if (k == HTTP_PATH_SEG_CAP - 1) { /* too long: measure it for the message */
        while (i < n && p[i] != '/') path_byte(p, n, &i), k++;
        out->err = HTTP_PATH_SEG_TOO_LONG;
        out->err_len = k + 1;
        return false;
      }
      o[k++] = c;
    }
    o[k] = 0;
    out->n++;
  }
  return true;
}

void http_path_error(const http_path_segs *p, char *buf, size_t cap) {
  http_path_err_message(p->err, p->err_len, buf, cap);
}

void http_path_err_message(http_path_err err, size_t err_len, char *buf, size_t cap) {
  switch (err) {
    case HTTP_PATH_NUL: snprintf(buf, cap, "malformed request path: it has a NUL byte (%%00)"); break;
    case HTTP_PATH_TOO_MANY:
      snprintf(buf, cap, "malformed request path: more than %d segments", HTTP_PATH_MAX_SEGS);
      break;
    case HTTP_PATH_SEG_TOO_LONG:
      snprintf(buf, cap, "request path segment of %zu bytes is longer than the limit of %d bytes "
               "(CINFER_MODEL_NAME_MAX, the longest model name)", err_len, CINFER_MODEL_NAME_MAX);
      break;
    default: snprintf(buf, cap, "malformed request path"); break;
  }
}

http_chunked_result http_chunked_decode(http_chunked *st, char *buf, size_t len,
                                        size_t *out_len, size_t *consumed) {
  size_t in = 0, out = 0;
  http_chunked_result res = HTTP_CHUNKED_INCOMPLETE;
  while (in < len) {
    unsigned char c = (unsigned char)buf[in];
    switch (st->state) {
      case CK_SIZE:
      case CK_SIZE_MORE: {
        int h = hex_digit((unsigned char)(c));
        if (h >= 0) {
          if (st->digits >= 15) { res = HTTP_CHUNKED_ERROR; goto out; }
          st->remaining = st->remaining * 16 + (uint64_t)h;
          st->digits++;
          st->state = CK_SIZE_MORE;
          in++;
          break;
        }
        if (st->state == CK_SIZE) { res = HTTP_CHUNKED_ERROR; goto out; }
        if (c == '\r') st->state = CK_SIZE_LF;
        else if (c == ';' || c == ' ' || c == '\t') st->state = CK_EXT;
        else { res = HTTP_CHUNKED_ERROR; goto out; }
        in++;
        break;
      }
      case CK_EXT:
        if (c == '\r') st->state = CK_SIZE_LF;
        else if ((c < 0x20 && c != '\t') || c == 0x7f) { res = HTTP_CHUNKED_ERROR; goto out; }
        if (++st->trailer_bytes > CK_MAX_TRAILER) { res = HTTP_CHUNKED_ERROR; goto out; }
        in++;
        break;
      case CK_SIZE_LF:
        if (c != '\n') { res = HTTP_CHUNKED_ERROR; goto out; }
        in++;
        st->digits = 0;
        st->trailer_bytes = 0;
        if (st->remaining == 0) {
          st->state = CK_TRAILER_START;
        } else {
          if (st->max_total && (st->remaining > st->max_total ||
                                st->total > st->max_total - st->remaining)) {
            res = HTTP_CHUNKED_TOO_LARGE;
            goto out;
          }
          if (st->max_chunks && st->chunks >= st->max_chunks) {
            res = HTTP_CHUNKED_TOO_MANY;
            goto out;
          }
          st->chunks++;
          st->total += st->remaining;
          st->state = CK_DATA;
        }
        break;
      case CK_DATA: {
        size_t n = len - in;
        if (n > st->remaining) n = (size_t)st->remaining;
        if (out != in) memmove(buf + out, buf + in, n);
        out += n;
        in += n;
        st->remaining -= n;
        if (!st->remaining) st->state = CK_DATA_CR;
        break;
      }
      case CK_DATA_CR:
        if (c != '\r') { res = HTTP_CHUNKED_ERROR; goto out; }
        st->state = CK_DATA_LF;
        in++;
        break;
      case CK_DATA_LF:
        if (c != '\n') { res = HTTP_CHUNKED_ERROR; goto out; }
        st->state = CK_SIZE;
        in++;
        break;
      case CK_TRAILER_START:
        in++;
        if (c == '\r') st->state = CK_FINAL_LF;
        else if (tchar[c]) { st->state = CK_TRAILER; st->trailer_bytes++; }
        else { res = HTTP_CHUNKED_ERROR; goto out; }
        break;
      case CK_TRAILER:
        in++;
        if (++st->trailer_bytes > CK_MAX_TRAILER) { res = HTTP_CHUNKED_ERROR; goto out; }
        if (c == '\r') st->state = CK_TRAILER_LF;
        else if ((c < 0x20 && c != '\t') || c == 0x7f) { res = HTTP_CHUNKED_ERROR; goto out; }
        break;
      case CK_TRAILER_LF:
        if (c != '\n') { res = HTTP_CHUNKED_ERROR; goto out; }
        in++;
        st->state = CK_TRAILER_START;
        break;
      case CK_FINAL_LF:
        if (c != '\n') { res = HTTP_CHUNKED_ERROR; goto out; }
        in++;
        res = HTTP_CHUNKED_DONE;
        goto out;
      default:
        res = HTTP_CHUNKED_ERROR;
        goto out;
    }
  }
out:
  *out_len = out;
  *consumed = in;
  return res;
}

const char *http_status_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
  }
  return "Unknown";
}
