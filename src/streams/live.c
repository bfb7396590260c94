/* live.c: the live page of `cinfer streams --http-port N`, on cinfer's HTTP server
 * (src/net). GET /streams is a page that shows, for every stream, its latest annotated
 * frame (boxes drawn into the JPEG here, labels over it) and its delivered fps, refreshed
 * twice a second; GET /streams/status.json the same data as JSON; GET /streams/N.jpg the
 * frame of stream N. Publishing is throttled by the caller (at most 5 frames/s/stream). */
#include "streams/streams.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "net/http.h"

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
} live_stream;

struct streams_live {
  http_server *srv;
  pthread_mutex_t mu;
  live_stream *s;
  int n;
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

static void status_json(streams_live *l, cbuf *b) {
  cbuf_puts(b, "{\"streams\":[");
  pthread_mutex_lock(&l->mu);
  for (int i = 0; i < l->n; i++) {
    live_stream *s = &l->s[i];
    if (!s->source && !s->last_error) continue;
    if (b->len > 13) cbuf_puts(b, ",");
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
  pthread_mutex_unlock(&l->mu);
  cbuf_puts(b, "]}");
}

static void handler(http_exchange *ex, const http_request *req, void *user) {
  streams_live *l = user;
  http_path_segs p;
  if (req->method_id != HTTP_GET && req->method_id != HTTP_HEAD) {
    respond_text(ex, 405, "text/plain", "only GET\n", 9);
    return;
  }
  if (!http_path_split(req->path, req->path_len, &p) || p.n < 1 || strcmp(p.seg[0], "streams")) {
    respond_text(ex, 404, "text/plain", "not found: the live page is /streams\n", 37);
    return;
  }
  if (p.n == 1) {
    respond_text(ex, 200, "text/html; charset=utf-8", PAGE, sizeof PAGE - 1);
    return;
  }
  if (p.n == 2 && !strcmp(p.seg[1], "status.json")) {
    cbuf b = {0};
    status_json(l, &b);
    if (b.oom) respond_text(ex, 500, "text/plain", "out of memory\n", 14);
    else respond_text(ex, 200, "application/json", b.data, b.len);
    cbuf_free(&b);
    return;
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
      return;
    }
    http_header h[2] = {{"Content-Type", 12, "image/jpeg", 10}, {"Cache-Control", 13, "no-store", 8}};
    http_respond_owned(ex, 200, h, 2, copy, len, free);
    return;
  }
  respond_text(ex, 404, "text/plain", "not found: /streams, /streams/status.json or /streams/N.jpg\n", 60);
}

cinfer_status *streams_live_start(const char *host, int port, int n_streams, streams_live **out) {
  *out = NULL;
  streams_live *l = calloc(1, sizeof *l);
  if (!l) return cinfer_status_oom(NULL);
  l->n = n_streams;
  l->s = calloc((size_t)n_streams, sizeof *l->s);
  pthread_mutex_init(&l->mu, NULL);
  if (!l->s) {
    free(l);
    return cinfer_status_oom(NULL);
  }
  http_server_opts o = {.host = host, .port = (uint16_t)port, .io_threads = 1};
  cinfer_status *st = http_server_create(&o, handler, l, &l->srv);
  if (st) {
    free(l->s);
    free(l);
    return st;
  }
  *out = l;
  return NULL;
}

int streams_live_port(const streams_live *l) { return http_server_port(l->srv); }

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
  pthread_mutex_unlock(&l->mu);
}

void streams_live_error(streams_live *l, int stream, const char *source, const char *msg) {
  if (!l || stream < 0 || stream >= l->n) return;
  pthread_mutex_lock(&l->mu);
  live_stream *s = &l->s[stream];
  if (!s->source) s->source = strdup(source);
  free(s->last_error);
  s->last_error = strdup(msg);
  pthread_mutex_unlock(&l->mu);
}

void streams_live_stop(streams_live *l) {
  if (!l) return;
  http_server_shutdown(l->srv, 1000);
  http_server_destroy(l->srv);
  for (int i = 0; i < l->n; i++) {
    live_stream *s = &l->s[i];
    free(s->jpeg);
    for (int k = 0; s->labels && k < s->n_boxes; k++) free(s->labels[k]);
    free(s->labels);
    free(s->boxes);
    free(s->source);
    free(s->last_error);
  }
  free(l->s);
  pthread_mutex_destroy(&l->mu);
  free(l);
}
