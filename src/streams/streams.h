/* streams.h: `cinfer streams`, the many-stream video workload of seed 000 (issue 21).
 *
 * N video sources (files played in a loop, or rtsp:// http:// URLs) are decoded with
 * libavformat/libavcodec, each paced at its frame rate; every frame (or every k-th) goes
 * through a pipeline (an ensemble such as face_analytics_frames), either in-process (a
 * cinfer_server on a model repository) or over HTTP to a server (KServe v2, binary
 * tensors). Results go out as JSON lines; the run reports per-stream delivered fps,
 * dropped frames and latency percentiles, and --find-max searches the largest stream
 * count that holds the target fps with p99 under an SLO. Design: docs/design/streams.md.
 *
 * Pieces:
 *   source.c    libav demux + decode + RGB conversion, looping, stall/disconnect bounds
 *   pipeline.c  the two ways to run a frame: in-process and HTTP
 *   run.c       stream threads, pacing, drops, statistics, JSON lines, find-max, reports
 *   live.c      the /streams page: latest annotated frame per stream (JPEG) and its fps
 *   jpeg.c      RGB to JPEG (libjpeg-turbo) and box drawing
 */
#ifndef CINFER_STREAMS_H
#define CINFER_STREAMS_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/types.h"

#define STREAMS_MAX 512
#define STREAMS_MAX_SOURCES 64

/* ---- sources (source.c) ------------------------------------------------------------- */

typedef struct streams_source streams_source;

/* Opens url (a file path or a URL libavformat reads). stall_ms bounds every blocking read
 * (open included): a source that sends nothing for that long fails with a message that
 * says so. loop: at the end of a file, seek back to the start (ignored for live URLs). */
cinfer_status *streams_source_open(const char *url, bool loop, int stall_ms,
                                   streams_source **out);
void streams_source_close(streams_source *s); /* NULL is a no-op */
bool streams_source_is_file(const streams_source *s);
double streams_source_fps(const streams_source *s); /* from the container; 0 if unknown */
int streams_source_width(const streams_source *s);
int streams_source_height(const streams_source *s);
/* Decodes the next frame into rgb (width*height*3 bytes, tightly packed RGB). Returns
 * NULL on success; *eof is set at the end of a non-looping source (no frame). A packet
 * that fails to decode is an error for that frame (*frame_error set, status says why);
 * the caller may go on reading. Any other error ends the source. */
cinfer_status *streams_source_read(streams_source *s, uint8_t *rgb, bool *eof, bool *frame_error);

/* ---- JPEG and drawing (jpeg.c) -------------------------------------------------------- */

/* RGB8 (w*h*3) to a JPEG in *out (malloc'd, *len bytes). quality 1..100. */
cinfer_status *streams_jpeg_encode(const uint8_t *rgb, int w, int h, int quality,
                                   unsigned char **out, size_t *len);
/* Draws the outline of box (x1, y1, x2, y2, clipped to the image) in colour c, thickness t. */
void streams_draw_box(uint8_t *rgb, int w, int h, const float box[4], const uint8_t c[3], int t);

/* ---- configuration (run.c) ---------------------------------------------------------- */

typedef struct streams_config {
  const char *sources[STREAMS_MAX_SOURCES]; /* borrowed from argv */
  int n_sources;
  int streams;             /* streams to run; source i % n_sources feeds stream i */
  const char *model;       /* the pipeline (an ensemble or any model with an image input) */
  const char *repository;  /* in-process: the model repository */
  const char *url;         /* or remote: http://host:port of a cinfer serve */
  int threads;             /* in-process server's thread budget (0 = number of CPUs) */
  int every;               /* send every k-th frame (1) */
  double fps;              /* pace at this rate instead of the container's (0) */
  int max_inflight;        /* frames of one stream in the pipeline at once (1); a frame
                              due while this many are in flight is dropped */
  int stall_ms;            /* a source silent this long fails (5000) */
  double duration_s;       /* run this long (0 = until every source ends or --frames) */
  int64_t frames;          /* stop each stream after this many sent frames (0 = no limit) */
  double warmup_s;         /* statistics start after this (1 s with --find-max, else 0) */
  const char *jsonl_path;  /* per-frame results ("-" = stdout); NULL = none */
  const char *json_path;   /* run summary (or the find-max report) */
  const char *plot_path;   /* --find-max: SVG of latency percentiles vs frames/s */
  double cost_per_hour;    /* for the cost per 1,000 frames */
  /* --find-max */
  bool find_max;
  double target_fps;       /* per stream (the source's fps / every when 0) */
  double slo_p99_ms;       /* 200 */
  int max_streams;         /* upper bound of the search (64) */
  double fps_tolerance;    /* a stream holds the target when fps >= target * (1 - tol) (0.05) */
  /* live page */
  int http_port;           /* -1 = off; 0 = any free port (printed) */
  const char *http_host;   /* 127.0.0.1 */
  const char *publish_url; /* push the live page's frames to this cinfer serve's /streams */
  bool quiet;
} streams_config;

void streams_config_default(streams_config *c);
/* Parses `streams` arguments (argv[0] is the subcommand). Errors name the flag. */
cinfer_status *streams_args_parse(streams_config *c, int argc, char **argv, bool *help);
void streams_usage(void *file /* FILE* */);
int streams_main(int argc, char **argv);

/* ---- HTTP client pieces (client.c), shared by pipeline.c and live.c ------------------ */

typedef struct streams_addr {
  char host[256], port[16];
  struct sockaddr_storage sa;
  socklen_t salen;
} streams_addr;
/* http://HOST[:PORT][/] (port 80 by default), resolved; errors name flag and url. */
cinfer_status *streams_addr_parse(const char *flag, const char *url, streams_addr *a);
/* A TCP connection (TCP_NODELAY, send/receive timeouts of timeout_s); -1 with errno. */
int streams_tcp_connect(const streams_addr *a, int timeout_s);
bool streams_send_all(int fd, const void *d, size_t n); /* false: the connection failed */

/* ---- pipeline (pipeline.c) ---------------------------------------------------------- */

/* One decoded frame travelling through the pipeline. Owned by its stream; the pipeline
 * borrows it from submit until it calls done. */
typedef struct streams_frame {
  int stream;
  int slot;             /* index in the stream's pool */
  int64_t seq;          /* frame number within the stream (counting every decoded frame) */
  uint64_t due_ns;      /* when the frame was due (latency is measured from here) */
  int w, h;
  uint8_t *rgb;         /* w*h*3 */
  unsigned char *jpeg;  /* image-bytes pipelines: the frame encoded (owned) */
  size_t jpeg_len;
  /* result, filled by the pipeline before done() */
  uint64_t done_ns;
  cinfer_status *error; /* owned */
  char *json;           /* the outputs as a JSON object (owned, malloc'd) */
  float *boxes;         /* n_boxes x 4, for the live page (owned) */
  int n_boxes;
  char **labels;        /* n_boxes short labels or NULL (owned) */
  struct streams_frame *next; /* the stream's completion list */
} streams_frame;

typedef struct streams_pipeline streams_pipeline;
typedef void (*streams_done_fn)(void *user, streams_frame *f);

/* In-process (repository) or remote (url). Checks that the model is there and ready and
 * finds its image input: UINT8 [1, H, W, 3] (raw frames) or BYTES (JPEG per frame). */
cinfer_status *streams_pipeline_create(const streams_config *c, streams_done_fn done,
                                       void *user, streams_pipeline **out);
bool streams_pipeline_wants_jpeg(const streams_pipeline *p);
/* Starts the frame; done(user, f) runs exactly once (any thread) unless an error is
 * returned. */
cinfer_status *streams_pipeline_submit(streams_pipeline *p, streams_frame *f);
void streams_pipeline_destroy(streams_pipeline *p); /* waits for frames in flight */
/* Builds f->json, boxes and labels from KServe-like outputs (shared by both pipelines). */
typedef struct streams_output {
  const char *name;
  cinfer_dtype dtype;
  int ndim;
  int64_t shape[CINFER_MAX_DIMS];
  const void *data;
  size_t byte_size;
} streams_output;
cinfer_status *streams_frame_set_outputs(streams_frame *f, const streams_output *o, int n);
/* A KServe v2 infer response body (JSON header of ihcl bytes + binary tensors; ihcl < 0:
 * all JSON) to f's outputs. Outside input: every length and shape is checked (INTERNAL with
 * the reason, never a read past data[len)). Fuzzed by fuzz/fuzz_streams_response.c. */
cinfer_status *streams_kserve_response(streams_frame *f, const char *data, size_t len, long long ihcl);

/* ---- live page (live.c) ------------------------------------------------------------- */

typedef struct streams_live streams_live;
struct http_exchange;
struct http_request;
/* A board of n_streams entries without a server of its own. accept_push: POST
 * /streams/N fills it (cinfer serve --streams-page). */
cinfer_status *streams_live_create(int n_streams, bool accept_push, streams_live **out);
/* A board with its own HTTP server on host:port (cinfer streams --http-port). */
cinfer_status *streams_live_start(const char *host, int port, int n_streams, streams_live **out);
int streams_live_port(const streams_live *l); /* 0 without a server of its own */
/* Answers a request for /streams, /streams/status.json, /streams/N.jpg (and, with
 * accept_push, POST /streams/N); false (nothing sent) for any other path. For a frontend
 * that mounts the board on its own port. user: the board. */
bool streams_live_route(void *user, struct http_exchange *ex, const struct http_request *req);
/* A pushed entry: body[0..hlen) is the stream's status.json entry (source, width, height,
 * fps, frame, delivered, dropped, errors, boxes [{box, label}], last_error), the rest the
 * JPEG (may be empty). Outside input: INVALID_ARG naming the field, the board unchanged. */
cinfer_status *streams_live_accept(streams_live *l, int stream, const char *body, size_t len, long long hlen);
/* Sends every stream's latest frame to the board of the server at url (http://HOST:PORT),
 * from a thread of its own, latest-only; stop sends the last states first. */
cinfer_status *streams_live_push(streams_live *l, const char *url);
uint64_t streams_live_pushed(streams_live *l); /* entries the server took */
/* Copies the frame, draws its boxes, encodes a JPEG and keeps it as stream f->stream's
   latest (the caller throttles). */
void streams_live_publish(streams_live *l, const streams_frame *f, const char *source, double fps,
                          uint64_t delivered, uint64_t dropped, uint64_t errors,
                          const char *last_error);
/* A stream that failed (or a frame error): shown on the page with its message. */
void streams_live_error(streams_live *l, int stream, const char *source, const char *msg);
void streams_live_stop(streams_live *l);

#endif
