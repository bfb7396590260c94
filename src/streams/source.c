/* source.c: one video source: libavformat demuxes (a file or a network URL), libavcodec
 * decodes the best video stream, libswscale converts every frame to tightly packed RGB.
 * Every blocking call is bounded by an interrupt callback with a deadline, so a source
 * that stalls or disconnects ends with an error naming it instead of hanging its stream. */
#include "streams/streams.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

struct streams_source {
  char url[1024];
  AVFormatContext *fmt;
  AVCodecContext *dec;
  struct SwsContext *sws;
  AVFrame *frame;
  AVPacket *pkt;
  int vidx;
  int w, h;
  double fps;
  bool loop, is_file, draining, flushed;
  int stall_ms;
  uint64_t deadline_ns; /* the interrupt callback aborts a blocking call after this */
  bool stalled;
};

static int interrupt_cb(void *arg) {
  streams_source *s = arg;
  if (s->deadline_ns && clock_now_ns() > s->deadline_ns) {
    s->stalled = true;
    return 1;
  }
  return 0;
}

/* s->stalled is sticky: a demuxer may hand out packets it buffered before the interrupted
 * read and report the error (AVERROR_EXIT) only on a later call. */
static void arm(streams_source *s) {
  s->deadline_ns = clock_now_ns() + (uint64_t)s->stall_ms * 1000000ull;
}

static cinfer_status *av_err(const streams_source *s, const char *what, int rc) {
  char e[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(rc, e, sizeof e);
  if (s->stalled || rc == AVERROR_EXIT)
    return cinfer_status_new(CINFER_UNAVAILABLE, "video source '%s': %s: no data for %d ms (stalled)",
                             s->url, what, s->stall_ms);
  return cinfer_status_new(CINFER_INVALID_ARG, "video source '%s': %s: %s", s->url, what, e);
}

cinfer_status *streams_source_open(const char *url, bool loop, int stall_ms, streams_source **out) {
  *out = NULL;
  static bool quiet;
  if (!quiet) { /* libav's own log lines would interleave with ours; errors come back as codes */
    av_log_set_level(AV_LOG_FATAL);
    quiet = true;
  }
  streams_source *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom(NULL);
  snprintf(s->url, sizeof s->url, "%s", url);
  s->stall_ms = stall_ms > 0 ? stall_ms : 5000;
  s->is_file = !strstr(url, "://") || !strncmp(url, "file:", 5);
  s->loop = loop && s->is_file;
  cinfer_status *st = NULL;
  s->fmt = avformat_alloc_context();
  if (!s->fmt) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  s->fmt->interrupt_callback.callback = interrupt_cb;
  s->fmt->interrupt_callback.opaque = s;
  AVDictionary *opt = NULL;
  char us[32]; /* libav's own timeouts at twice the stall bound: the interrupt callback,
                 which names the stall, fires first */
  snprintf(us, sizeof us, "%lld", (long long)s->stall_ms * 2000);
  if (!s->is_file) {
    av_dict_set(&opt, "rw_timeout", us, 0); /* http, tcp */
    av_dict_set(&opt, "timeout", us, 0);    /* rtsp: socket timeout */
  }
  arm(s);
  int rc = avformat_open_input(&s->fmt, url, NULL, &opt);
  av_dict_free(&opt);
  if (rc < 0) { /* avformat_open_input frees the context on failure */
    st = av_err(s, "cannot open", rc);
    goto fail;
  }
  arm(s);
  if ((rc = avformat_find_stream_info(s->fmt, NULL)) < 0) {
    st = av_err(s, "cannot read stream information", rc);
    goto fail;
  }
  const AVCodec *codec = NULL;
  s->vidx = av_find_best_stream(s->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (s->vidx < 0 || !codec) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "video source '%s': no decodable video stream", url);
    goto fail;
  }
  AVStream *vs = s->fmt->streams[s->vidx];
  s->dec = avcodec_alloc_context3(codec);
  if (!s->dec) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  if ((rc = avcodec_parameters_to_context(s->dec, vs->codecpar)) < 0 ||
      (rc = avcodec_open2(s->dec, codec, NULL)) < 0) {
    st = av_err(s, "cannot open the decoder", rc);
    goto fail;
  }
  s->w = s->dec->width;
  s->h = s->dec->height;
  if (s->w <= 0 || s->h <= 0 || (int64_t)s->w * s->h > 8192 * 8192) {
    st = cinfer_status_new(CINFER_INVALID_ARG, "video source '%s': unsupported frame size %dx%d", url,
                           s->w, s->h);
    goto fail;
  }
  AVRational r = vs->avg_frame_rate.num > 0 ? vs->avg_frame_rate : vs->r_frame_rate;
  s->fps = r.num > 0 && r.den > 0 ? av_q2d(r) : 0;
  s->frame = av_frame_alloc();
  s->pkt = av_packet_alloc();
  if (!s->frame || !s->pkt) {
    st = cinfer_status_oom(NULL);
    goto fail;
  }
  *out = s;
  return NULL;
fail:
  streams_source_close(s);
  return st;
}

void streams_source_close(streams_source *s) {
  if (!s) return;
  sws_freeContext(s->sws);
  av_frame_free(&s->frame);
  av_packet_free(&s->pkt);
  avcodec_free_context(&s->dec);
  if (s->fmt) avformat_close_input(&s->fmt);
  free(s);
}

bool streams_source_is_file(const streams_source *s) { return s->is_file; }
double streams_source_fps(const streams_source *s) { return s->fps; }
int streams_source_width(const streams_source *s) { return s->w; }
int streams_source_height(const streams_source *s) { return s->h; }

static cinfer_status *convert(streams_source *s, uint8_t *rgb) {
  AVFrame *f = s->frame;
  if (f->width != s->w || f->height != s->h)
    return cinfer_status_new(CINFER_INVALID_ARG,
                             "video source '%s': frame size changed from %dx%d to %dx%d", s->url,
                             s->w, s->h, f->width, f->height);
  s->sws = sws_getCachedContext(s->sws, f->width, f->height, f->format, s->w, s->h, AV_PIX_FMT_RGB24,
                                SWS_BILINEAR, NULL, NULL, NULL);
  if (!s->sws)
    return cinfer_status_new(CINFER_INVALID_ARG, "video source '%s': cannot convert pixel format %d",
                             s->url, f->format);
  uint8_t *dst[4] = {rgb, NULL, NULL, NULL};
  int ls[4] = {s->w * 3, 0, 0, 0};
  sws_scale(s->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, ls);
  return NULL;
}

cinfer_status *streams_source_read(streams_source *s, uint8_t *rgb, bool *eof, bool *frame_error) {
  *eof = false;
  *frame_error = false;
  for (int spins = 0;; spins++) {
    int rc = avcodec_receive_frame(s->dec, s->frame);
    if (rc == 0) {
      cinfer_status *st = convert(s, rgb);
      av_frame_unref(s->frame);
      return st;
    }
    if (rc == AVERROR_EOF) {
      /* the decoder is drained: the end of the file */
      if (!s->loop) {
        *eof = true;
        return NULL;
      }
      if (spins > 4) /* a looping file that yields no frame at all */
        return cinfer_status_new(CINFER_INVALID_ARG, "video source '%s': no frame decodes", s->url);
      arm(s);
      if ((rc = av_seek_frame(s->fmt, s->vidx, 0, AVSEEK_FLAG_BACKWARD)) < 0)
        return av_err(s, "cannot seek back to the start to loop", rc);
      avcodec_flush_buffers(s->dec);
      s->draining = false;
      continue;
    }
    if (rc != AVERROR(EAGAIN)) {
      /* a frame that fails to decode; the decoder can go on */
      *frame_error = true;
      return av_err(s, "frame does not decode", rc);
    }
    if (s->draining) return cinfer_status_new(CINFER_INTERNAL, "video source '%s': decoder stuck", s->url);
    /* the decoder wants a packet */
    for (;;) {
      arm(s);
      rc = av_read_frame(s->fmt, s->pkt);
      if (rc == AVERROR_EOF) {
        avcodec_send_packet(s->dec, NULL); /* drain what the decoder holds */
        s->draining = true;
        break;
      }
      if (rc < 0) {
        if (!s->is_file && !s->stalled && rc != AVERROR_EXIT)
          return cinfer_status_new(CINFER_UNAVAILABLE, "video source '%s': disconnected (%s)", s->url,
                                   av_err2str(rc));
        return av_err(s, "read failed", rc);
      }
      if (s->pkt->stream_index != s->vidx) {
        av_packet_unref(s->pkt);
        continue;
      }
      rc = avcodec_send_packet(s->dec, s->pkt);
      av_packet_unref(s->pkt);
      if (rc < 0 && rc != AVERROR(EAGAIN)) {
        *frame_error = true;
        return av_err(s, "packet does not decode", rc);
      }
      break;
    }
  }
}
