/* http.h: cinfer's HTTP/1.1 layer: a zero-copy resumable parser, a multi-threaded server
 * and a non-blocking client, all on the epoll loops of loop.h.
 *
 * Parser: every string is a (pointer, length) slice into the caller's buffer; nothing is
 * copied or NUL-terminated. "Need more bytes" (HTTP_PARSE_INCOMPLETE) is distinct from
 * "malformed" (HTTP_PARSE_ERROR, with the HTTP status to answer and a message).
 *
 * Server: the handler runs on an I/O thread with a borrowed request view. It answers
 * through the opaque http_exchange with http_respond* or http_stream_*; those calls are
 * legal from ANY thread. The request view (including the body) stays valid until the
 * exchange is answered (final respond or stream_end); the exchange itself stays valid until
 * then even if the client disconnects, in which case the answer is dropped.
 *
 * Client: one http_client per connection, driven on a loop thread; it sends bytes that the
 * caller prepared and reports the response incrementally.
 */
#ifndef CINFER_NET_HTTP_H
#define CINFER_NET_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinfer/cinfer.h" /* CINFER_MODEL_NAME_MAX */
#include "cinfer/types.h"
#include "net/loop.h"
#include "net/tls.h"

/* ===================================================================================== */
/* Parser                                                                                 */
/* ===================================================================================== */

typedef struct http_header {
  const char *name;   /* borrowed slice, not NUL-terminated */
  size_t name_len;
  const char *value;  /* leading/trailing whitespace removed */
  size_t value_len;
} http_header;

typedef enum http_method {
  HTTP_OTHER = 0, HTTP_GET, HTTP_HEAD, HTTP_POST, HTTP_PUT, HTTP_DELETE, HTTP_OPTIONS,
  HTTP_PATCH
} http_method;

typedef enum http_parse_result {
  HTTP_PARSE_OK = 0,          /* message head complete */
  HTTP_PARSE_INCOMPLETE = -2, /* feed more bytes (not an error) */
  HTTP_PARSE_ERROR = -1       /* see http_parse_error */
} http_parse_result;

typedef struct http_parse_error {
  int status;            /* HTTP status to answer: 400, 413, 417, 431, 501, 505 */
  const char *message;   /* static string, e.g. "invalid character in header name" */
} http_parse_error;

typedef struct http_limits {
  size_t max_header_bytes;  /* request/status line + headers + blank line; > -> 431 */
  size_t max_headers;       /* number of header fields; > -> 431 */
  size_t max_body_bytes;    /* > -> 413 (Content-Length checked up front, chunked as read) */
} http_limits;

/* Framing of the body that follows a message head. */
typedef enum http_body_kind {
  HTTP_BODY_NONE = 0,     /* no body (request without CL/TE, HEAD/204/304 responses) */
  HTTP_BODY_LENGTH,       /* Content-Length bytes */
  HTTP_BODY_CHUNKED,      /* Transfer-Encoding: chunked */
  HTTP_BODY_UNTIL_CLOSE   /* responses only: body ends when the connection closes */
} http_body_kind;

typedef struct http_request {
  http_method method_id;
  const char *method; size_t method_len;
  const char *path; size_t path_len;    /* request target up to '?' */
  const char *query; size_t query_len;  /* after '?', without it; len 0 if none */
  int version_minor;                    /* HTTP/1.<minor>: 0 or 1 */
  const http_header *headers; size_t num_headers;
  http_body_kind body_kind;
  uint64_t content_length;              /* valid for HTTP_BODY_LENGTH */
  bool keep_alive;                      /* after version default and Connection header */
  bool expect_continue;                 /* "Expect: 100-continue" */
  size_t head_len;                      /* bytes of the message head (incl. blank line) */
  /* Set by the server before calling the handler: the complete body (contiguous, chunked
   * bodies are decoded in place). Borrowed until the exchange is answered. */
  const char *body; size_t body_len;
  /* Set by the server: when the request's first bytes were read (CLOCK_MONOTONIC ns, the
   * loop's cached time of that iteration; for a pipelined request, when the one before it
   * was answered). For tracing (HTTP_RECV_START). */
  uint64_t recv_start_ns;
} http_request;

/* Parses a request head in buf[0..len). headers[0..max) is caller storage that
 * req->headers will point to (limits->max_headers is min'd with max). prev_len, if the
 * caller already parsed an INCOMPLETE prefix of the same buffer, lets the parser skip the
 * search for the end of the head (pass 0 otherwise). Reads exactly buf[0..len): never past. */
http_parse_result http_parse_request(const char *buf, size_t len, size_t prev_len,
                                     const http_limits *limits, http_header *headers,
                                     size_t max, http_request *req, http_parse_error *err);

typedef struct http_response {
  int status;
  const char *reason; size_t reason_len;
  int version_minor;
  const http_header *headers; size_t num_headers;
  http_body_kind body_kind;
  uint64_t content_length;
  bool keep_alive;
  size_t head_len;
} http_response;

/* Parses a response head. head_request: the request was HEAD (no body follows). */
http_parse_result http_parse_response(const char *buf, size_t len, size_t prev_len,
                                      const http_limits *limits, bool head_request,
                                      http_header *headers, size_t max,
                                      http_response *resp, http_parse_error *err);

/* Case-insensitive header lookup; returns the value slice or NULL. */
const char *http_find_header(const http_header *h, size_t n, const char *name,
                             size_t *value_len);
const char *http_request_header(const http_request *req, const char *name, size_t *len);

/* Resumable chunked-transfer decoder. Zero-initialise, then feed successive input. */
typedef struct http_chunked {
  uint64_t remaining;  /* bytes left in the current chunk */
  uint64_t total;      /* decoded bytes so far (for the body limit) */
  uint64_t max_total;  /* 0 = unlimited */
  uint64_t chunks;     /* data chunks so far */
  uint64_t max_chunks; /* 0 = unlimited; more -> HTTP_CHUNKED_TOO_MANY */
  uint32_t trailer_bytes;
  int state;
  int digits;
} http_chunked;

typedef enum http_chunked_result {
  HTTP_CHUNKED_DONE = 0,        /* last chunk and trailers consumed */
  HTTP_CHUNKED_INCOMPLETE = -2, /* all input consumed; feed more */
  HTTP_CHUNKED_ERROR = -1,      /* malformed framing */
  HTTP_CHUNKED_TOO_LARGE = -3,  /* decoded size would exceed max_total */
  HTTP_CHUNKED_TOO_MANY = -4    /* more than max_chunks data chunks */
} http_chunked_result;

/* Decodes buf[0..len) in place: decoded data is written to buf[0..*out_len) (it never
 * overtakes the input). *consumed = input bytes used; on DONE any rest (buf[*consumed..len))
 * belongs to the next message; otherwise *consumed == len. */
http_chunked_result http_chunked_decode(http_chunked *st, char *buf, size_t len,
                                        size_t *out_len, size_t *consumed);

/* "OK", "Not Found", ...; "Unknown" for codes without a phrase. */
const char *http_status_reason(int status);

/* ===================================================================================== */
/* Server                                                                                 */
/* ===================================================================================== */

typedef struct http_server http_server;
typedef struct http_exchange http_exchange;

typedef struct http_server_opts {
  const char *host;            /* NULL or "" = 0.0.0.0; numeric IPv4/IPv6 or a name */
  uint16_t port;               /* 0 = ephemeral; see http_server_port() */
  int io_threads;              /* loops, each with its own SO_REUSEPORT listener; 0 = 1 */
  size_t max_body_bytes;       /* 0 = 64 MiB; larger -> 413 */
  size_t max_header_bytes;     /* 0 = 16 KiB; larger -> 431 */
  size_t max_headers;          /* 0 = 100 (at most 10000) */
  int header_timeout_ms;       /* 0 = 10000; head not complete in time -> 408 + close */
  int body_timeout_ms;         /* 0 = 30000; no body progress for this long -> 408 + close;
                                  also bounds a stalled reader of our response */
  int idle_keepalive_ms;       /* 0 = 60000; idle keep-alive connection closed */
  size_t max_body_chunks;      /* 0 = 65536; a chunked body of more chunks -> 400 + close
                                  (bounds the work a body of tiny chunks costs) */
  int max_connections;         /* 0 = 10000; further connections are closed at accept */
  int backlog;                 /* 0 = 1024 */
  /* TLS on every connection (borrowed; must outlive the server). The handshake is bounded
   * by header_timeout_ms; a failed handshake (a plaintext request, a wrong certificate)
   * closes the connection. NULL = plain HTTP. */
  net_tls *tls;
  /* Optional, run on each I/O thread around every batch of ready events: see
   * loop_set_batch_hooks. */
  void (*batch_begin)(void *arg);
  void (*batch_end)(void *arg);
  void *batch_arg;
} http_server_opts;

/* Called on an I/O thread for each complete request. req (and everything it points to,
 * including the body) is borrowed until the exchange is answered. The handler must
 * eventually answer ex exactly once (respond or stream_begin..stream_end), from any
 * thread, even after a cancel notification. */
typedef void (*http_handler)(http_exchange *ex, const http_request *req, void *user);

/* Binds, listens and starts io_threads threads. user is passed to every handler call. */
cinfer_status *http_server_create(const http_server_opts *opts, http_handler handler,
                                  void *user, http_server **out);
uint16_t http_server_port(const http_server *srv);   /* the bound port */
int http_server_num_loops(const http_server *srv);
/* The loop of I/O thread i (so clients, e.g. a proxy's upstreams, can share it). */
net_loop *http_server_loop(http_server *srv, int i);

/* Stops accepting new connections (listeners closed); existing ones continue. */
void http_server_stop_accepting(http_server *srv);
/* Graceful drain: stop accepting, close idle keep-alive connections, answer in-flight
 * requests with "Connection: close", and wait up to timeout_ms for every connection to
 * finish. Connections still open at the deadline are closed (their exchanges get the
 * cancel notification and their answers are dropped). Returns how many had to be forced. */
int http_server_shutdown(http_server *srv, int timeout_ms);
/* Stops the loops and frees everything. Waits for every exchange to be answered (the
 * handler contract above) so no thread can touch freed memory. NULL is a no-op. */
void http_server_destroy(http_server *srv);

typedef struct http_server_stats {
  uint64_t connections_accepted, connections_rejected, connections_active;
  uint64_t requests, responses;       /* dispatched to the handler / answered */
  uint64_t bytes_in, bytes_out;
  uint64_t err_400, err_408, err_413, err_417, err_431, err_501, err_505;
  uint64_t cancelled;                 /* exchanges whose client went away */
  uint64_t tls_handshake_failures;    /* TLS connections closed by a failed handshake */
} http_server_stats;
void http_server_get_stats(const http_server *srv, http_server_stats *out);

/* ---- answering (any thread) ----------------------------------------------------------- */

/* Full response. headers: caller's fields (copied; do not pass Content-Length,
 * Transfer-Encoding or Connection: the server writes those, and Date). body is copied.
 * HEAD requests and 1xx/204/304 answers get no body bytes; a status outside 100..999
 * becomes 500. */
void http_respond(http_exchange *ex, int status, const http_header *headers, size_t n,
                  const void *body, size_t len);
/* Same, zero-copy: the server takes ownership of body and calls free_fn(body) (on an I/O
 * thread) once written or dropped. free_fn may be NULL for static data. */
void http_respond_owned(http_exchange *ex, int status, const http_header *headers,
                        size_t n, void *body, size_t len, void (*free_fn)(void *));
/* Streaming with chunked transfer encoding (HTTP/1.0 clients get a close-delimited body).
 * stream_write copies data; returns false once the client is gone (stop producing, but
 * still call stream_end). len 0 writes nothing. */
void http_stream_begin(http_exchange *ex, int status, const http_header *headers, size_t n);
bool http_stream_write(http_exchange *ex, const void *data, size_t len);
void http_stream_end(http_exchange *ex);

/* Registers cb(arg), called once on the I/O thread if the client goes away (disconnect,
 * write timeout, forced shutdown) before the answer is complete. I/O thread only (call it
 * from the handler, or from a task posted to http_exchange_loop); if the client is already
 * gone, cb runs immediately. After cb the exchange must still be answered (the answer is
 * dropped). */
void http_exchange_set_cancel(http_exchange *ex, void (*cb)(void *arg), void *arg);
/* The I/O loop that owns this exchange (for loop_post). */
net_loop *http_exchange_loop(const http_exchange *ex);
/* Numeric address of the client's TCP peer ("127.0.0.1", "::1"; IPv4-mapped IPv6 as IPv4;
 * "" if unknown). Valid until the exchange is answered. I/O thread only. */
const char *http_exchange_peer(const http_exchange *ex);

/* ===================================================================================== */
/* Client                                                                                 */
/* ===================================================================================== */

typedef struct http_client http_client;

typedef enum http_client_error {
  HTTP_CLIENT_OK = 0,
  HTTP_CLIENT_CONNECT_REFUSED,   /* connect() failed (refused, unreachable) */
  HTTP_CLIENT_CONNECT_TIMEOUT,
  HTTP_CLIENT_RESET_BEFORE_RESPONSE, /* closed/reset before any response byte: safe retry
                                        for idempotent requests (e.g. stale keep-alive) */
  HTTP_CLIENT_RESET,             /* closed/reset in the middle of the response */
  HTTP_CLIENT_TIMEOUT,           /* no response progress within response_timeout_ms */
  HTTP_CLIENT_MALFORMED,         /* response violated HTTP/1.1 or our limits */
  HTTP_CLIENT_CANCELLED,         /* http_client_close() while a request was in flight */
  HTTP_CLIENT_TLS                /* TLS handshake failed (msg says why: CA, expiry, ...) */
} http_client_error;
const char *http_client_error_name(http_client_error e);

typedef struct http_client_callbacks {
  /* Response head parsed (1xx interim responses are skipped). May be NULL. */
  void (*on_head)(void *user, const http_response *resp);
  /* Body bytes as they arrive (chunked framing removed). Borrowed for the call. May be
   * NULL. */
  void (*on_body)(void *user, const char *data, size_t len);
  /* Exactly once per http_client_send: err == HTTP_CLIENT_OK after the full body. msg is a
   * static description. The connection may be reused from inside this callback. */
  void (*on_done)(void *user, http_client_error err, const char *msg);
} http_client_callbacks;

typedef struct http_client_opts {
  const char *host;             /* numeric IPv4/IPv6 or a name (resolved at create) */
  uint16_t port;
  int connect_timeout_ms;       /* 0 = 5000 */
  int response_timeout_ms;      /* 0 = 60000; inactivity bound while a request is live */
  size_t max_header_bytes;      /* 0 = 64 KiB */
  size_t max_headers;           /* 0 = 100 (at most 10000) */
  /* TLS (borrowed, outlives the client; NULL = plain). The handshake is bounded by
   * connect_timeout_ms; the server certificate must match tls_name (NULL: host). */
  net_tls *tls;
  const char *tls_name;
} http_client_opts;

/* Creates a client bound to loop (it connects lazily on the first send). cb is copied;
 * user is passed to callbacks. Loop thread only from here on. */
cinfer_status *http_client_create(net_loop *loop, const http_client_opts *opts,
                                  const http_client_callbacks *cb, void *user,
                                  http_client **out);
/* Sends req[0..len) (a complete request the caller prepared; it is borrowed until on_done)
 * and reports the response through the callbacks. One request at a time per client;
 * returns false if one is already in flight. head_request: the request is HEAD. Reuses
 * the open connection when the previous response allowed keep-alive. */
bool http_client_send(http_client *c, const void *req, size_t len, bool head_request);
bool http_client_busy(const http_client *c);
bool http_client_connected(const http_client *c);
/* Closes the connection (an in-flight request completes with HTTP_CLIENT_CANCELLED) and
 * frees the client. Loop thread only. NULL is a no-op. */
void http_client_destroy(http_client *c);

/* ---- request paths --------------------------------------------------------------------- */

/* A path split the one way the server routes it and the API-group classifier classifies it
 * (so a path cannot be checked as one route and run as another): repeated '/' collapse,
 * "%XX" decodes (an invalid escape stays literal); a NUL byte, more than
 * HTTP_PATH_MAX_SEGS segments or a segment longer than CINFER_MODEL_NAME_MAX bytes (once
 * decoded) fail, and `err` says which (http_path_error writes it for a 400). A segment
 * holds any model name: the limit is the model name's, in one place (cinfer.h). */
#define HTTP_PATH_MAX_SEGS 10
#define HTTP_PATH_SEG_CAP (CINFER_MODEL_NAME_MAX + 1)
typedef enum http_path_err {
  HTTP_PATH_OK = 0,
  HTTP_PATH_NUL,          /* a NUL byte (%00) */
  HTTP_PATH_TOO_MANY,     /* more than HTTP_PATH_MAX_SEGS segments */
  HTTP_PATH_SEG_TOO_LONG  /* a segment longer than CINFER_MODEL_NAME_MAX bytes */
} http_path_err;
typedef struct http_path_segs {
  int n;
  http_path_err err;
  size_t err_len;         /* HTTP_PATH_SEG_TOO_LONG: the segment's decoded length */
  char seg[HTTP_PATH_MAX_SEGS][HTTP_PATH_SEG_CAP];
} http_path_segs;
bool http_path_split(const char *path, size_t len, http_path_segs *out);
/* Why http_path_split failed, as a sentence for the client ("request path segment of N
 * bytes is longer than the limit of 255 bytes (CINFER_MODEL_NAME_MAX, the longest model
 * name)", ...). */
void http_path_error(const http_path_segs *p, char *buf, size_t cap);
/* The same sentence from the error alone (api_route keeps only err and err_len). */
void http_path_err_message(http_path_err err, size_t err_len, char *buf, size_t cap);

#endif
