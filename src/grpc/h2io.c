/* h2io.c: see h2io.h. */
#include "grpc/h2io.h"

#include <errno.h>
#include <limits.h>
#include <openssl/ssl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

ssize_t h2io_send(int fd, struct ssl_st *ssl, const void *p, size_t n) {
  if (!ssl) return send(fd, p, n, MSG_NOSIGNAL);
  int w = SSL_write(ssl, p, n > INT_MAX ? INT_MAX : (int)n);
  if (w > 0) return w;
  int e = SSL_get_error(ssl, w);
  errno = e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? EAGAIN : EPIPE;
  return -1;
}

ssize_t h2io_recv(int fd, struct ssl_st *ssl, uint8_t *buf, size_t cap, bool *wants_write) {
  *wants_write = false;
  if (!ssl) return read(fd, buf, cap);
  size_t got = 0;
  while (got < cap) {
    int r = SSL_read(ssl, buf + got, (int)(cap - got > INT_MAX ? INT_MAX : cap - got));
    if (r > 0) {
      got += (size_t)r;
      continue;
    }
    int e = SSL_get_error(ssl, r);
    if (got) return (ssize_t)got;
    if (e == SSL_ERROR_WANT_READ) {
      errno = EAGAIN;
      return -1;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
      *wants_write = true;
      errno = EAGAIN;
      return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    errno = EPROTO;
    return -1;
  }
  return (ssize_t)got;
}

h2io_rc h2io_flush(int fd, struct ssl_st *ssl, nghttp2_session *h2, cbuf *wbuf, size_t *woff,
                   size_t high) {
  for (;;) {
    while (*woff < wbuf->len) {
      ssize_t n = h2io_send(fd, ssl, wbuf->data + *woff, wbuf->len - *woff);
      if (n > 0) {
        *woff += (size_t)n;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return H2IO_BLOCKED;
      return H2IO_FAILED;
    }
    wbuf->len = *woff = 0;
    while (wbuf->len < high) {
      const uint8_t *d;
      ssize_t n = nghttp2_session_mem_send(h2, &d);
      if (n < 0) return H2IO_FAILED;
      if (n == 0) break;
      cbuf_put(wbuf, d, (size_t)n);
    }
    if (wbuf->oom) return H2IO_FAILED;
    if (!wbuf->len) break;
  }
  if (!nghttp2_session_want_read(h2) && !nghttp2_session_want_write(h2)) return H2IO_OVER;
  return H2IO_DRAINED;
}

h2io_hs h2io_handshake(struct ssl_st *ssl) {
  int r = SSL_do_handshake(ssl);
  if (r == 1) return H2IO_HS_DONE;
  int e = SSL_get_error(ssl, r);
  if (e == SSL_ERROR_WANT_READ) return H2IO_HS_WANT_READ;
  if (e == SSL_ERROR_WANT_WRITE) return H2IO_HS_WANT_WRITE;
  return H2IO_HS_FAILED;
}

bool h2io_alpn_h2(struct ssl_st *ssl) {
  const unsigned char *alpn = NULL;
  unsigned alen = 0;
  SSL_get0_alpn_selected(ssl, &alpn, &alen);
  return alen == 2 && !memcmp(alpn, "h2", 2);
}

nghttp2_session_callbacks *h2io_callbacks(nghttp2_on_begin_headers_callback begin_headers,
                                          nghttp2_on_header_callback header,
                                          nghttp2_on_frame_recv_callback frame_recv,
                                          nghttp2_on_data_chunk_recv_callback data_chunk,
                                          nghttp2_on_stream_close_callback stream_close) {
  nghttp2_session_callbacks *cb;
  if (nghttp2_session_callbacks_new(&cb)) return NULL;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, stream_close);
  return cb;
}

int h2io_session_new(nghttp2_session **out, const nghttp2_session_callbacks *cb, void *user, bool server) {
  nghttp2_option *opt;
  int rc = nghttp2_option_new(&opt);
  if (rc) return rc;
  nghttp2_option_set_no_rfc9113_leading_and_trailing_ws_validation(opt, 1);
  rc = server ? nghttp2_session_server_new2(out, cb, user, opt) : nghttp2_session_client_new2(out, cb, user, opt);
  nghttp2_option_del(opt);
  return rc;
}

int h2io_settings(nghttp2_session *h2, uint32_t max_streams) {
  nghttp2_settings_entry s[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams},
                                {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 4u << 20},
                                {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 64u << 10}};
  int rc = nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, s, 3);
  if (!rc) rc = nghttp2_session_set_local_window_size(h2, NGHTTP2_FLAG_NONE, 0, 16u << 20);
  return rc;
}
