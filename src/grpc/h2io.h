/* h2io.h: the HTTP/2 byte pump shared by the gRPC server (grpc_server.c) and the gateway's
 * gRPC proxy (src/gateway/grpc_proxy.c): one nghttp2 session on a non-blocking socket,
 * plain or TLS (OpenSSL), with a write buffer. No loop and no stream logic: each caller
 * keeps its own connection struct, callbacks and event registration and acts on the
 * result codes below. */
#ifndef CINFER_GRPC_H2IO_H
#define CINFER_GRPC_H2IO_H

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"

struct ssl_st;

/* send(), or SSL_write when ssl is set (-1 with errno EAGAIN when it would block, EPIPE on
 * a TLS failure: its reason stays in OpenSSL's error queue). */
ssize_t h2io_send(int fd, struct ssl_st *ssl, const void *p, size_t n);
/* read(), or SSL_read records until buf is full or nothing is left (a record read into
 * OpenSSL would not wake epoll again). 0: the peer closed; -1 with errno (EAGAIN: nothing
 * yet; *wants_write then says whether TLS waits for the socket to be writable). */
ssize_t h2io_recv(int fd, struct ssl_st *ssl, uint8_t *buf, size_t cap, bool *wants_write);

typedef enum {
  H2IO_DRAINED = 0, /* everything is written; the session goes on (wait for readable) */
  H2IO_BLOCKED,     /* the socket is full: wait for writable, then flush again */
  H2IO_OVER,        /* the session wants neither to read nor to write: close it */
  H2IO_FAILED       /* a write or nghttp2 failed: close (a TLS reason is in the queue) */
} h2io_rc;

/* Writes wbuf from *woff, then what nghttp2 has to send, gathered up to `high` bytes a
 * round, until nghttp2 has nothing more or the socket is full. */
h2io_rc h2io_flush(int fd, struct ssl_st *ssl, nghttp2_session *h2, cbuf *wbuf, size_t *woff,
                   size_t high);

typedef enum { H2IO_HS_DONE = 0, H2IO_HS_WANT_READ, H2IO_HS_WANT_WRITE, H2IO_HS_FAILED } h2io_hs;
/* One step of a TLS handshake in the role set on ssl. */
h2io_hs h2io_handshake(struct ssl_st *ssl);
/* After the handshake: the peer agreed on h2 by ALPN. */
bool h2io_alpn_h2(struct ssl_st *ssl);

/* The callbacks both sides use (NULL on out of memory; free with
 * nghttp2_session_callbacks_del). */
nghttp2_session_callbacks *h2io_callbacks(nghttp2_on_begin_headers_callback begin_headers,
                                          nghttp2_on_header_callback header,
                                          nghttp2_on_frame_recv_callback frame_recv,
                                          nghttp2_on_data_chunk_recv_callback data_chunk,
                                          nghttp2_on_stream_close_callback stream_close);
/* The SETTINGS both sides announce (max_streams concurrent streams, 4 MiB stream windows,
 * 64 KiB header lists) and a 16 MiB connection window. Nonzero on failure. */
int h2io_settings(nghttp2_session *h2, uint32_t max_streams);
/* A server (or client) session for gRPC: nghttp2's defaults, except that field values with
 * leading or trailing whitespace are taken as they are (RFC 9113 refuses them; gRPC's own
 * core and Triton pass such metadata values through, and Triton's QA sends one). Returns
 * nghttp2's error code, 0 on success. */
int h2io_session_new(nghttp2_session **out, const nghttp2_session_callbacks *cb, void *user, bool server);

#endif
