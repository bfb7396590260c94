/* client.c: the small pieces of an HTTP client that the remote pipeline (pipeline.c) and
 * the live page's pusher (live.c) share: an http://HOST[:PORT] address resolved once, a TCP
 * connection with send/receive timeouts, and a send that finishes or fails. */
#include "streams/streams.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

cinfer_status *streams_addr_parse(const char *flag, const char *url, streams_addr *a) {
  memset(a, 0, sizeof *a);
  if (strncmp(url, "http://", 7))
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': only http://HOST:PORT is supported", flag, url);
  const char *u = url + 7;
  const char *slash = strchr(u, '/');
  if (slash && slash[1])
    return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': give http://HOST:PORT, no path", flag, url);
  size_t n = slash ? (size_t)(slash - u) : strlen(u); /* HOST[:PORT] */
  const char *colon = memrchr(u, ':', n);
  size_t hl = colon ? (size_t)(colon - u) : n;
  if (hl == 0 || hl >= sizeof a->host) return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': no host", flag, url);
  memcpy(a->host, u, hl);
  a->host[hl] = 0;
  if (colon) {
    size_t pl = n - hl - 1;
    if (pl == 0 || pl >= sizeof a->port) return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': bad port", flag, url);
    memcpy(a->port, colon + 1, pl);
    a->port[pl] = 0;
  } else {
    snprintf(a->port, sizeof a->port, "80");
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int rc = getaddrinfo(a->host, a->port, &hints, &ai);
  if (rc || !ai) return cinfer_status_new(CINFER_INVALID_ARG, "%s '%s': %s", flag, url, gai_strerror(rc));
  memcpy(&a->sa, ai->ai_addr, ai->ai_addrlen);
  a->salen = ai->ai_addrlen;
  freeaddrinfo(ai);
  return NULL;
}

int streams_tcp_connect(const streams_addr *a, int timeout_s) {
  int fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval tv = {.tv_sec = timeout_s};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, (const struct sockaddr *)&a->sa, a->salen) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

bool streams_send_all(int fd, const void *d, size_t n) {
  const char *c = d;
  while (n) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= (size_t)k;
  }
  return true;
}
