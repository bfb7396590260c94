/* live.c: the live page at /streams, a "board" of the latest annotated frame of each
 * stream. GET /streams is a page that shows, for every stream, its latest annotated
 * frame (boxes drawn into the JPEG here, labels over it) and its delivered fps, refreshed
 * twice a second; GET /streams/status.json the same data as JSON; GET /streams/N.jpg the
 * frame of stream N. Publishing is throttled by the caller (at most 5 frames/s/stream).
 *
 * One board, three ways to use it (one page, one handler):
 *   - `cinfer streams --http-port N`: the board with its own HTTP server (src/net);
 *   - `cinfer serve --streams-page`: a board mounted on the server's HTTP port
 *     (streams_live_route, called by the frontend), filled by pushes:
 *     POST /streams/N, body = a JSON header of Streams-Header-Length bytes (the stream's
 *     entry of status.json) followed by the JPEG (streams_live_accept; outside input,
 *     every field checked, fuzzed by fuzz/fuzz_streams_publish.c);
 *   - `cinfer streams --publish URL`: a pusher thread that sends each stream's latest
 *     frame to such a server, latest-only (a slow server sees fewer frames, the streams
 *     never wait for it). */
#include "streams/streams.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/json.h"
#include "net/http.h"

/* limits of a pushed entry (streams_live_accept) */
#define PUSH_MAX_JPEG (8u << 20)
#define PUSH_MAX_HEADER (256u << 10)
#define PUSH_MAX_BOXES 1024
#define PUSH_MAX_TEXT 1024
#define PUSH_MAX_SIDE 16384

typedef struct live_stream {
  unsigned char *jpeg;
  size_t jpeg_len;
  char *source;
  int w, h;
  double fps;
  uint64_t delivered, dropped, errors, frame;
  char *last_error;
  float *boxes;
  char **labels;
  int n_boxes;
  bool dirty; /* changed since the pusher last sent it */
} live_stream;

struct streams_live {
  http_server *srv; /* own server (streams_live_start), else NULL */
  bool accept_push; /* POST /streams/N fills the board (cinfer serve) */
  pthread_mutex_t mu;
  live_stream *s;
  int n;
  /* pusher (streams_live_push) */
  pthread_t pusher;
  bool pushing, stop;
  pthread_cond_t cv;
  streams_addr addr;
  int fd;
  uint64_t pushed, push_failed;
  char push_error[256];
};

static const char PAGE[] =
    "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>cinfer streams</title>\n"
    "<style>body{font-family:DejaVu Sans,Arial,sans-serif;background:#111;color:#eee;margin:16px}"
    ".grid{display:flex;flex-wrap:wrap;gap:14px}.card{background:#222;padding:8px;border-radius:6px}"
    ".frame{position:relative;display:inline-block}.frame img{display:block;max-width:480px}"
    ".lbl{position:absolute;background:#0c0;color:#000;font-size:12px;padding:1px 3px;white-space:nowrap}"
    ".meta{font-size:13px;margin-top:6px}.err{color:#f66}</style></head><body>\n"
    "<h2>cinfer streams</h2><div id=\"sum\"></div><div class=\"grid\" id=\"grid\"></div>\n"
    "<script>\n"
    "function esc(s){return String(s).replace(/[&<>\"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','\"':'&quot;'}[c]));}\n"
    "async function tick(){\n"
    " try{const r=await fetch('/streams/status.json',{cache:'no-store'});const d=await r.json();\n"
    "  let tot=0;const g=document.getElementById('grid');\n"
    "  for(const s of d.streams){tot+=s.fps;let c=document.getElementById('s'+s.stream);\n"
    "   if(!c){c=document.createElement('div');c.className='card';c.id='s'+s.stream;g.appendChild(c);}\n"
    "   if(!s.has_frame){c.innerHTML='<div class=meta>stream '+s.stream+': no frame yet'+(s.last_error?'<div class=err>'+esc(s.last_error)+'</div>':'')+'</div>';continue;}\n"
    "   const sc=Math.min(1,480/s.width);let h='<div class=frame><img src=\"/streams/'+s.stream+'.jpg?f='+s.frame+'\" width='+Math.round(s.width*sc)+'>';\n"
    "   for(const b of s.boxes){h+='<div class=lbl style=\"left:'+Math.round(b.box[0]*sc)+'px;top:'+Math.max(0,Math.round(b.box[1]*sc)-16)+'px\">'+esc(b.label)+'</div>';}\n"
    "   h+='</div><div class=meta>stream '+s.stream+' &middot; '+esc(s.source)+'<br><b>'+s.fps.toFixed(1)+' fps</b> &middot; '+s.delivered+' frames &middot; '+s.dropped+' dropped &middot; '+s.errors+' errors';\n"
    "   if(s.last_error)h+='<div class=err>'+esc(s.last_error)+'</div>';c.innerHTML=h+'</div>';}\n"
    "  document.getElementById('sum').textContent=d.streams.length+' streams, '+tot.toFixed(1)+' frames/s in total';\n"
    " }catch(e){document.getElementById('sum').textContent='no data: '+e;}\n"
    " setTimeout(tick,500);}\n"
    "tick();\n"
    "</script></body></html>\n";

static void respond_text(http_exchange *ex, int status, const char *ctype, const void *body, size_t len) {
  http_header h[2] = {{"Content-Type", 12, ctype, strlen(ctype)}, {"Cache-Control", 13, "no-store", 8}};
  http_respond(ex, status, h, 2, body, len);
}

/* stream i's entry of status.json (also the JSON header of a push); with l->mu held */
static void entry_json(const streams_live *l, int i, cbuf *b) {
  const live_stream *s = &l->s[i];
  {
    cbuf_printf(b, "{\"stream\":%d,\"source\":", i);
    const char *src = s->source ? s->source : "";
    cbuf_json_string_utf8(b, src, strlen(src));
    cbuf_printf(b, ",\"has_frame\":%s,\"frame\":%llu,\"width\":%d,\"height\":%d,\"fps\":%.3f,\"delivered\":%llu,"
                   "\"dropped\":%llu,\"errors\":%llu,\"boxes\":[",
                s->jpeg ? "true" : "false", (unsigned long long)s->frame, s->w, s->h, s->fps,
                (unsigned long long)s->delivered, (unsigned long long)s->dropped, (unsigned long long)s->errors);
    for (int k = 0; k < s->n_boxes; k++) {
      const float *bx = s->boxes + 4 * k;
      cbuf_printf(b, "%s{\"box\":[%.1f,%.1f,%.1f,%.1f],\"label\":", k ? "," : "", (double)bx[0], (double)bx[1],
                  (double)bx[2], (double)bx[3]);
      const char *lb = s->labels && s->labels[k] ? s->labels[k] : "";
      cbuf_json_string_utf8(b, lb, strlen(lb));
      cbuf_puts(b, "}");
    }
    cbuf_puts(b, "]");
    if (s->last_error) {
      cbuf_puts(b, ",\"last_error\":");
      cbuf_json_string_utf8(b, s->last_error, strlen(s->last_error));
    }
    cbuf_puts(b, "}");
  }
}

static void status_json(streams_live *l, cbuf *b) {
  cbuf_puts(b, "{\"streams\":[");
  pthread_mutex_lock(&l->mu);
  bool first = true;
  for (int i = 0; i < l->n; i++) {
    live_stream *s = &l->s[i];
    if (!s->source && !s->last_error) continue;
    if (!first) cbuf_puts(b, ",");
    first = false;
    entry_json(l, i, b);
  }
  pthread_mutex_unlock(&l->mu);
  cbuf_puts(b, "]}");
}

static void respond_json_error(http_exchange *ex, int status, const char *msg) {
  cbuf b = {0};
  cbuf_puts(&b, "{\"error\":");
  cbuf_json_string_utf8(&b, msg, strlen(msg));
  cbuf_puts(&b, "}");
  if (b.oom) respond_text(ex, 500, "text/plain", "out of memory\n", 14);
  else respond_text(ex, status, "application/json", b.data, b.len);
  cbuf_free(&b);
}

/* POST /streams/N (cinfer serve --streams-page): a pusher's entry */
static void handle_push(streams_live *l, http_exchange *ex, const http_request *req, const char *seg) {
  char *end = NULL;
  errno = 0;
  long id = strtol(seg, &end, 10);
  if (end == seg || *end || errno || id < 0 || id >= l->n) {
    char msg[128];
    snprintf(msg, sizeof msg, "POST /streams/N: N must be a stream number from 0 to %d", l->n - 1);
    return respond_json_error(ex, 400, msg);
  }
  size_t vl = 0;
  const char *v = http_find_header(req->headers, req->num_headers, "Streams-Header-Length", &vl);
  if (!v) return respond_json_error(ex, 400, "POST /streams/N needs a Streams-Header-Length header");
  char num[24];
  long long hlen = -1;
  if (vl > 0 && vl < sizeof num) {
    memcpy(num, v, vl);
    num[vl] = 0;
    errno = 0;
    hlen = strtoll(num, &end, 10);
    if (end == num || *end || errno) hlen = -1;
  }
  if (hlen < 0) return respond_json_error(ex, 400, "Streams-Header-Length must be a byte count");
  cinfer_status *st = streams_live_accept(l, (int)id, req->body, req->body_len, hlen);
  if (st) {
    respond_json_error(ex, 400, cinfer_status_message(st));
    cinfer_status_free(st);
    return;
  }
  respond_text(ex, 200, "application/json", "{}", 2);
}

bool streams_live_route(void *user, http_exchange *ex, const http_request *req) {
  streams_live *l = user;
  http_path_segs p;
  if (!http_path_split(req->path, req->path_len, &p) || p.n < 1 || strcmp(p.seg[0], "streams")) return false;
  bool get = req->method_id == HTTP_GET || req->method_id == HTTP_HEAD;
  if (l->accept_push && req->method_id == HTTP_POST && p.n == 2) {
    handle_push(l, ex, req, p.seg[1]);
    return true;
  }
  if (!get) {
    if (l->accept_push) respond_json_error(ex, 405, "method not allowed; use GET (or POST /streams/N to publish)");
    else respond_text(ex, 405, "text/plain", "only GET\n", 9);
    return true;
  }
  if (p.n == 1) {
    respond_text(ex, 200, "text/html; charset=utf-8", PAGE, sizeof PAGE - 1);
    return true;
  }
  if (p.n == 2 && !strcmp(p.seg[1], "status.json")) {
    cbuf b = {0};
    status_json(l, &b);
    if (b.oom) respond_text(ex, 500, "text/plain", "out of memory\n", 14);
    else respond_text(ex, 200, "application/json", b.data, b.len);
    cbuf_free(&b);
    return true;
  }
  char *end = NULL;
  long id = p.n == 2 ? strtol(p.seg[1], &end, 10) : -1;
  if (p.n == 2 && end != p.seg[1] && !strcmp(end, ".jpg") && id >= 0 && id < l->n) {
    pthread_mutex_lock(&l->mu);
    live_stream *s = &l->s[id];
    unsigned char *copy = s->jpeg ? malloc(s->jpeg_len) : NULL;
    size_t len = s->jpeg_len;
    if (copy) memcpy(copy, s->jpeg, len);
    pthread_mutex_unlock(&l->mu);
    if (!copy) {
      respond_text(ex, 404, "text/plain", "no frame of this stream yet\n", 28);
      return true;
    }
    http_header h[2] = {{"Content-Type", 12, "image/jpeg", 10}, {"Cache-Control", 13, "no-store", 8}};
    http_respond_owned(ex, 200, h, 2, copy, len, free);
    return true;
  }
  respond_text(ex, 404, "text/plain", "not found: /streams, /streams/status.json or /streams/N.jpg\n", 60);
  return true;
}

static void handler(http_exchange *ex, const http_request *req, void *user) {
  if (!streams_live_route(user, ex, req))
    respond_text(ex, 404, "text/plain", "not found: the live page is /streams\n", 37);
}

static void entry_clear(live_stream *s) {
  free(s->jpeg);
  for (int k = 0; s->labels && k < s->n_boxes; k++) free(s->labels[k]);
  free(s->labels);
  free(s->boxes);
  free(s->source);
  free(s->last_error);
  memset(s, 0, sizeof *s);
}

#define BAD(...) do { st = cinfer_status_new(CINFER_INVALID_ARG, __VA_ARGS__); goto out; } while (0)

static bool count_field(const json_value *o, const char *key, uint64_t max, uint64_t *out) {
  const json_value *v = json_get(o, key);
  if (!v) {
    *out = 0;
    return true;
  }
  if (!json_is(v, JSON_NUMBER) || !(v->int_flags & JSON_INT_U64) || v->ix.u > max) return false;
  *out = v->ix.u;
  return true;
}

static const char *text_field(const json_value *o, const char *key, bool *bad) {
  const json_value *v = json_get(o, key);
  if (!v || v->type == JSON_NULL) return NULL;
  if (!json_is(v, JSON_STRING) || v->len > PUSH_MAX_TEXT || strlen(v->u.str) != v->len) {
    *bad = true;
    return NULL;
  }
  return v->u.str;
}

cinfer_status *streams_live_accept(streams_live *l, int stream, const char *body, size_t len, long long hlen) {
  if (stream < 0 || stream >= l->n)
    return cinfer_status_new(CINFER_INVALID_ARG, "stream %d is not on this board (0 to %d)", stream, l->n - 1);
  if (hlen < 2 || (unsigned long long)hlen > len || (unsigned long long)hlen > PUSH_MAX_HEADER)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "Streams-Header-Length %lld: the JSON header must be 2 to %u bytes within the %zu-byte body",
                             hlen, PUSH_MAX_HEADER, len);
  const unsigned char *jpeg = (const unsigned char *)body + hlen;
  size_t jlen = len - (size_t)hlen;
  if (jlen > PUSH_MAX_JPEG) return cinfer_status_new(CINFER_INVALID_ARG, "JPEG of %zu bytes (at most %u)", jlen, PUSH_MAX_JPEG);
  if (jlen && (jlen < 4 || jpeg[0] != 0xff || jpeg[1] != 0xd8 || jpeg[2] != 0xff))
    return cinfer_status_new(CINFER_INVALID_ARG, "the bytes after the JSON header are not a JPEG (no SOI marker)");
  json_doc *d = NULL;
  cinfer_status *st = json_parse(body, (size_t)hlen, 8, &d);
  if (st) return cinfer_status_prefix(st, "JSON header");
  live_stream e = {0};
  const json_value *o = json_root(d);
  if (!json_is(o, JSON_OBJECT)) BAD("JSON header: an object expected");
  bool bad = false;
  const char *src = text_field(o, "source", &bad), *err = text_field(o, "last_error", &bad);
  if (bad) BAD("JSON header: 'source' and 'last_error' must be strings of at most %d bytes", PUSH_MAX_TEXT);
  if (!src) BAD("JSON header: 'source' (a string) is required");
  uint64_t w, h, frame, delivered, dropped, errors;
  if (!count_field(o, "width", PUSH_MAX_SIDE, &w) || !count_field(o, "height", PUSH_MAX_SIDE, &h))
    BAD("JSON header: 'width' and 'height' must be integers from 0 to %d", PUSH_MAX_SIDE);
  if (jlen && (!w || !h)) BAD("JSON header: a frame needs 'width' and 'height'");
  if (!count_field(o, "frame", INT64_MAX, &frame) || !count_field(o, "delivered", INT64_MAX, &delivered) ||
      !count_field(o, "dropped", INT64_MAX, &dropped) || !count_field(o, "errors", INT64_MAX, &errors))
    BAD("JSON header: 'frame', 'delivered', 'dropped' and 'errors' must be non-negative integers");
  const json_value *fps = json_get(o, "fps");
  if (fps && (!json_is(fps, JSON_NUMBER) || !(fps->u.num >= 0 && fps->u.num <= 1e6)))
    BAD("JSON header: 'fps' must be a number from 0 to 1e6");
  const json_value *bx = json_get(o, "boxes");
  if (bx && (!json_is(bx, JSON_ARRAY) || bx->len > PUSH_MAX_BOXES))
    BAD("JSON header: 'boxes' must be an array of at most %d boxes", PUSH_MAX_BOXES);
  e.source = strdup(src);
  e.last_error = err ? strdup(err) : NULL;
  e.n_boxes = bx ? (int)bx->len : 0;
  if (e.n_boxes) {
    e.boxes = malloc((size_t)e.n_boxes * 4 * sizeof(float));
    e.labels = calloc((size_t)e.n_boxes, sizeof *e.labels);
  }
  if (!e.source || (err && !e.last_error) || (e.n_boxes && (!e.boxes || !e.labels))) {
    st = cinfer_status_oom("a pushed stream entry");
    goto out;
  }
  int k = 0;
  for (const json_value *b = bx ? bx->u.child : NULL; b; b = b->next, k++) {
    const json_value *c = json_get(b, "box");
    if (!json_is(c, JSON_ARRAY) || c->len != 4) BAD("JSON header: boxes[%d].box must be [x1, y1, x2, y2]", k);
    int j = 0;
    for (const json_value *x = c->u.child; x; x = x->next, j++) {
      if (!json_is(x, JSON_NUMBER) || !(x->u.num >= -1e6 && x->u.num <= 1e6))
        BAD("JSON header: boxes[%d].box[%d] must be a number from -1e6 to 1e6", k, j);
      e.boxes[4 * k + j] = (float)x->u.num;
    }
    bool lbad = false;
    const char *lb = text_field(b, "label", &lbad);
    if (lbad) BAD("JSON header: boxes[%d].label must be a string of at most %d bytes", k, PUSH_MAX_TEXT);
    if (!(e.labels[k] = strdup(lb ? lb : ""))) {
      st = cinfer_status_oom("a pushed stream entry");
      goto out;
    }
  }
  if (jlen && !(e.jpeg = malloc(jlen))) {
    st = cinfer_status_oom("a pushed frame");
    goto out;
  }
  if (jlen) memcpy(e.jpeg, jpeg, jlen);
  e.jpeg_len = jlen;
  e.w = (int)w;
  e.h = (int)h;
  e.fps = fps ? fps->u.num : 0;
  e.frame = frame;
  e.delivered = delivered;
  e.dropped = dropped;
  e.errors = errors;
  pthread_mutex_lock(&l->mu);
  live_stream *s = &l->s[stream];
  if (!e.jpeg && s->jpeg) { /* an error-only update keeps the last frame */
    e.jpeg = s->jpeg;
    e.jpeg_len = s->jpeg_len;
    e.w = s->w;
    e.h = s->h;
    s->jpeg = NULL;
  }
  entry_clear(s);
  *s = e;
  pthread_mutex_unlock(&l->mu);
  json_doc_free(d);
  return NULL;
out:
  json_doc_free(d);
  entry_clear(&e);
  return st;
}

cinfer_status *streams_live_create(int n_streams, bool accept_push, streams_live **out) {
  *out = NULL;
  if (n_streams < 1 || n_streams > STREAMS_MAX)
    return cinfer_status_new(CINFER_INVALID_ARG, "a live board holds 1 to %d streams, not %d", STREAMS_MAX, n_streams);
  streams_live *l = calloc(1, sizeof *l);
  if (!l) return cinfer_status_oom(NULL);
  l->n = n_streams;
  l->accept_push = accept_push;
  l->fd = -1;
  l->s = calloc((size_t)n_streams, sizeof *l->s);
  if (!l->s) {
    free(l);
    return cinfer_status_oom(NULL);
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  *out = l;
  return NULL;
}

cinfer_status *streams_live_start(const char *host, int port, int n_streams, streams_live **out) {
  streams_live *l;
  cinfer_status *st = streams_live_create(n_streams, false, &l);
  if (st) return st;
  http_server_opts o = {.host = host, .port = (uint16_t)port, .io_threads = 1};
  if ((st = http_server_create(&o, handler, l, &l->srv))) {
    streams_live_stop(l);
    return st;
  }
  *out = l;
  return NULL;
}

int streams_live_port(const streams_live *l) { return l->srv ? http_server_port(l->srv) : 0; }

void streams_live_publish(streams_live *l, const streams_frame *f, const char *source, double fps,
                          uint64_t delivered, uint64_t dropped, uint64_t errors, const char *last_error) {
  if (!l || f->stream < 0 || f->stream >= l->n) return;
  size_t sz = (size_t)f->w * (size_t)f->h * 3;
  uint8_t *rgb = malloc(sz);
  if (!rgb) return;
  memcpy(rgb, f->rgb, sz);
  static const uint8_t green[3] = {0, 220, 0};
  int t = f->w >= 640 ? 3 : 2;
  for (int k = 0; k < f->n_boxes; k++) streams_draw_box(rgb, f->w, f->h, f->boxes + 4 * k, green, t);
  unsigned char *jpeg = NULL;
  size_t len = 0;
  cinfer_status *st = streams_jpeg_encode(rgb, f->w, f->h, 80, &jpeg, &len);
  free(rgb);
  if (st) {
    cinfer_status_free(st);
    return;
  }
  float *boxes = f->n_boxes ? malloc((size_t)f->n_boxes * 16) : NULL;
  char **labels = f->n_boxes ? calloc((size_t)f->n_boxes, sizeof *labels) : NULL;
  int nb = boxes && labels ? f->n_boxes : 0;
  if (nb) memcpy(boxes, f->boxes, (size_t)nb * 16);
  for (int k = 0; k < nb; k++) labels[k] = strdup(f->labels && f->labels[k] ? f->labels[k] : "");
  if (!nb) {
    free(boxes);
    free(labels);
    boxes = NULL;
    labels = NULL;
  }
  pthread_mutex_lock(&l->mu);
  live_stream *s = &l->s[f->stream];
  free(s->jpeg);
  for (int k = 0; s->labels && k < s->n_boxes; k++) free(s->labels[k]);
  free(s->labels);
  free(s->boxes);
  if (!s->source) s->source = strdup(source);
  free(s->last_error);
  s->last_error = last_error ? strdup(last_error) : NULL;
  s->jpeg = jpeg;
  s->jpeg_len = len;
  s->w = f->w;
  s->h = f->h;
  s->fps = fps;
  s->delivered = delivered;
  s->dropped = dropped;
  s->errors = errors;
  s->frame = (uint64_t)f->seq;
  s->boxes = boxes;
  s->labels = labels;
  s->n_boxes = nb;
  s->dirty = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

void streams_live_error(streams_live *l, int stream, const char *source, const char *msg) {
  if (!l || stream < 0 || stream >= l->n) return;
  pthread_mutex_lock(&l->mu);
  live_stream *s = &l->s[stream];
  if (!s->source) s->source = strdup(source);
  free(s->last_error);
  s->last_error = strdup(msg);
  s->dirty = true;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* ---- pusher (cinfer streams --publish URL) -------------------------------------------- */

/* One POST on l->fd (a fresh connection when needed); the answer's status in *status, its
 * body (an error message) in msg. */
static bool push_once(streams_live *l, const cbuf *req, int *status, char *msg, size_t cap) {
  msg[0] = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (l->fd < 0 && (l->fd = streams_tcp_connect(&l->addr, 5)) < 0) {
      snprintf(msg, cap, "cannot connect to %s:%s: %s", l->addr.host, l->addr.port, strerror(errno));
      return false;
    }
    if (!streams_send_all(l->fd, req->data, req->len)) {
      close(l->fd);
      l->fd = -1;
      continue;
    }
    char head[8192];
    size_t hl = 0;
    http_header hs[32];
    http_response r;
    http_parse_error pe;
    http_limits lim = {.max_header_bytes = sizeof head, .max_headers = 32};
    for (;;) {
      ssize_t k = recv(l->fd, head + hl, sizeof head - hl - 1, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      size_t prev = hl;
      hl += (size_t)k;
      http_parse_result pr = http_parse_response(head, hl, prev, &lim, false, hs, 32, &r, &pe);
      if (pr == HTTP_PARSE_ERROR) break;
      if (pr != HTTP_PARSE_OK) {
        if (hl >= sizeof head - 1) break;
        continue;
      }
      if (r.body_kind != HTTP_BODY_LENGTH && r.body_kind != HTTP_BODY_NONE) break;
      uint64_t want = r.body_kind == HTTP_BODY_LENGTH ? r.content_length : 0;
      while (hl - r.head_len < want && hl < sizeof head - 1) { /* short answers only */
        ssize_t m = recv(l->fd, head + hl, sizeof head - 1 - hl, 0);
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) break;
        hl += (size_t)m;
      }
      if (hl - r.head_len < want) break;
      *status = r.status;
      size_t bl = (size_t)want < cap - 1 ? (size_t)want : cap - 1;
      memcpy(msg, head + r.head_len, bl);
      msg[bl] = 0;
      if (!r.keep_alive) {
        close(l->fd);
        l->fd = -1;
      }
      return true;
    }
    close(l->fd);
    l->fd = -1;
    if (hl) {
      snprintf(msg, cap, "bad HTTP answer from %s:%s", l->addr.host, l->addr.port);
      return false;
    }
  }
  snprintf(msg, cap, "%s:%s closed the connection", l->addr.host, l->addr.port);
  return false;
}

static void *pusher_main(void *arg) {
  streams_live *l = arg;
  cbuf hdr = {0}, req = {0};
  char msg[512];
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    int i = 0;
    while (i < l->n && !l->s[i].dirty) i++;
    if (i == l->n) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    live_stream *s = &l->s[i];
    s->dirty = false;
    hdr.len = 0;
    entry_json(l, i, &hdr);
    size_t jl = s->jpeg_len;
    req.len = 0;
    cbuf_printf(&req, "POST /streams/%d HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/octet-stream\r\n"
                      "Streams-Header-Length: %zu\r\nContent-Length: %zu\r\n\r\n",
                i, l->addr.host, l->addr.port, hdr.len, hdr.len + jl);
    cbuf_put(&req, hdr.data, hdr.len);
    if (jl) cbuf_put(&req, s->jpeg, jl);
    pthread_mutex_unlock(&l->mu);
    int status = 0;
    bool ok = !req.oom && !hdr.oom && push_once(l, &req, &status, msg, sizeof msg);
    pthread_mutex_lock(&l->mu);
    if (ok && status == 200) {
      l->pushed++;
    } else {
      if (!l->push_failed++ || strncmp(l->push_error, msg, sizeof l->push_error - 1)) {
        /* the first failure and every new reason, once each */
        if (ok) fprintf(stderr, "cinfer streams: --publish: HTTP %d: %s\n", status, msg);
        else fprintf(stderr, "cinfer streams: --publish: %s\n", req.oom ? "out of memory" : msg);
      }
      snprintf(l->push_error, sizeof l->push_error, "%s", msg);
    }
    pthread_cond_broadcast(&l->cv); /* streams_live_stop waits for the last sends */
  }
  pthread_mutex_unlock(&l->mu);
  cbuf_free(&hdr);
  cbuf_free(&req);
  return NULL;
}

cinfer_status *streams_live_push(streams_live *l, const char *url) {
  cinfer_status *st = streams_addr_parse("--publish", url, &l->addr);
  if (st) return st;
  if (pthread_create(&l->pusher, NULL, pusher_main, l))
    return cinfer_status_new(CINFER_INTERNAL, "--publish: cannot start the pusher thread");
  l->pushing = true;
  return NULL;
}

uint64_t streams_live_pushed(streams_live *l) {
  pthread_mutex_lock(&l->mu);
  uint64_t n = l->pushed;
  pthread_mutex_unlock(&l->mu);
  return n;
}

void streams_live_stop(streams_live *l) {
  if (!l) return;
  if (l->pushing) {
    /* the latest state of every stream goes out before the pusher ends (bounded by the
     * socket timeouts): the page shows the run's final figures */
    pthread_mutex_lock(&l->mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    for (;;) {
      bool any = false;
      for (int i = 0; i < l->n; i++) any |= l->s[i].dirty;
      if (!any || pthread_cond_timedwait(&l->cv, &l->mu, &dl) == ETIMEDOUT) break;
    }
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->pusher, NULL);
    if (l->fd >= 0) close(l->fd);
  }
  if (l->srv) {
    http_server_shutdown(l->srv, 1000);
    http_server_destroy(l->srv);
  }
  for (int i = 0; i < l->n; i++) entry_clear(&l->s[i]);
  free(l->s);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l);
}
