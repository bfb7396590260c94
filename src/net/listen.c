/* listen.c: the listening sockets of the HTTP and gRPC servers (net_listen in loop.h).
 *
 * Each I/O loop has its own SO_REUSEPORT listener, so the kernel spreads connections over
 * the loops. SO_REUSEPORT alone would also let a second process (same user) bind the same
 * port and silently take part of its connections; Triton fails with "address in use". So
 * the first listener of a fixed port is preceded by a probe bound without SO_REUSEPORT: it
 * fails when anyone already listens there. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/loop.h"

static int bind_one(const struct addrinfo *ai, bool reuseport, int backlog, int *err) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || (backlog > 0 && listen(fd, backlog) != 0)) {
    *err = errno;
    close(fd);
    return -1;
  }
  return fd;
}

cinfer_status *net_listen(const char *what, const char *host, uint16_t port, int backlog, bool first,
                          int *out, uint16_t *bound_port) {
  *out = -1;
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
  if (!host || !*host) host = "0.0.0.0";
  int e = getaddrinfo(host, ps, &hints, &ai);
  if (e) return cinfer_status_new(CINFER_INVALID_ARG, "%s: host '%s': %s", what, host, gai_strerror(e));
  int err = 0;
  if (first && port) { /* is the port someone else's? */
    int probe = bind_one(ai, false, 0, &err);
    if (probe < 0) {
      freeaddrinfo(ai);
      return cinfer_status_new(CINFER_UNAVAILABLE, "%s: bind %s:%u: %s%s", what, host, port, strerror(err),
                               err == EADDRINUSE ? " (another process listens there)" : "");
    }
    close(probe);
  }
  int fd = bind_one(ai, true, backlog, &err);
  freeaddrinfo(ai);
  if (fd < 0)
    return cinfer_status_new(CINFER_UNAVAILABLE, "%s: bind/listen %s:%u: %s", what, host, port, strerror(err));
  if (bound_port) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
  }
  *out = fd;
  return NULL;
}
