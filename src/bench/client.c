/* client.c: setup-time networking for the generator: address resolution, a blocking
 * one-shot HTTP/1.1 client (metadata, statistics, reachability; never on the hot path, so
 * it may allocate), the KServe statistics reader, and the string builder. */
#include "bench/bench_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- resolution ---- */

cinfer_status *bench_resolve(const bench_config *c, bench_addr *out) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(c->host, c->port, &hints, &res);
  if (rc != 0 || !res)
    return cinfer_status_new(CINFER_UNAVAILABLE, "cannot resolve '%s': %s", c->host,
                             gai_strerror(rc));
  memcpy(&out->sa, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  out->family = res->ai_family;
  freeaddrinfo(res);
  return NULL;
}

/* ---- blocking client ---- */

typedef struct {
  cbuf body;
} simple_ctx;

static void simple_body(void *ud, const char *p, size_t n) {
  cbuf_put(&((simple_ctx *)ud)->body, p, n);
}

int bench_wait_fd(int fd, short ev, uint64_t deadline) {
  for (;;) {
    uint64_t now = clock_now_ns();
    if (now >= deadline) return 0;
    struct pollfd p = {.fd = fd, .events = ev};
    int ms = (int)((deadline - now) / 1000000u) + 1;
    int rc = poll(&p, 1, ms);
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

cinfer_status *bench_connect_blocking(const bench_config *c, const bench_addr *a, uint64_t deadline,
                                     int *out) {
  *out = -1;
  int fd = socket(a->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return cinfer_status_new(CINFER_INTERNAL, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char *why = NULL;
  int err = 0;
  if (connect(fd, (const struct sockaddr *)&a->sa, a->len) < 0 && errno != EINPROGRESS) {
    err = errno;
  } else if (bench_wait_fd(fd, POLLOUT, deadline) <= 0) {
    why = "timed out";
  } else {
    socklen_t el = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  }
  if (err || why) {
    close(fd);
    return cinfer_status_new(CINFER_UNAVAILABLE, "cannot connect to %s: %s", c->host_header,
                             why ? why : strerror(err));
  }
  *out = fd;
  return NULL;
}

cinfer_status *bench_http_simple(const bench_config *c, const bench_addr *a, const char *method,
                                 const char *path, const char *body, size_t body_len,
                                 int timeout_ms, int *status, char **resp, size_t *resp_len) {
  *status = 0;
  if (resp) *resp = NULL;
  if (resp_len) *resp_len = 0;
  uint64_t deadline = clock_now_ns() + (uint64_t)timeout_ms * 1000000u;
  int fd;
  cinfer_status *st = bench_connect_blocking(c, a, deadline, &fd);
  if (st) return st;
  cbuf req = {0};
  simple_ctx ctx = {0};
  char *buf = NULL;
  if (!method) goto out; /* reachability check only */
  cbuf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: cinfer-bench\r\n"
                        "Connection: close\r\n", method, path, c->host_header);
  if (body) {
    cbuf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", body_len);
    cbuf_put(&req, body, body_len);
  } else {
    cbuf_puts(&req, "\r\n");
  }
  if (req.oom) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  for (size_t off = 0; off < req.len;) {
    ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (bench_wait_fd(fd, POLLOUT, deadline) <= 0) {
        st = cinfer_status_new(CINFER_DEADLINE_EXCEEDED, "%s %s: send timed out", method, path);
        goto out;
      }
      continue;
    }
    st = cinfer_status_new(CINFER_UNAVAILABLE, "%s %s: send: %s", method, path, strerror(errno));
    goto out;
  }
  enum { CAP = 64 * 1024 };
  buf = malloc(CAP);
  if (!buf) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  bench_http_resp r;
  bench_http_resp_init(&r, !strcmp(method, "HEAD"));
  size_t have = 0;
  for (;;) {
    if (bench_wait_fd(fd, POLLIN, deadline) <= 0) {
      st = cinfer_status_new(CINFER_DEADLINE_EXCEEDED, "%s %s: no response within %d ms", method,
                             path, timeout_ms);
      goto out;
    }
    ssize_t n = recv(fd, buf + have, CAP - have, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      st = cinfer_status_new(CINFER_UNAVAILABLE, "%s %s: recv: %s", method, path, strerror(errno));
      goto out;
    }
    bench_http_rc rc;
    size_t used = 0;
    if (n == 0) rc = bench_http_eof(&r);
    else {
      have += (size_t)n;
      rc = bench_http_feed(&r, buf, have, &used, simple_body, &ctx, 32 * 1024);
      memmove(buf, buf + used, have - used);
      have -= used;
    }
    if (rc == BENCH_HTTP_ERROR) {
      st = cinfer_status_new(CINFER_UNAVAILABLE, "%s %s: bad response: %s", method, path,
                             r.error ? r.error : "?");
      goto out;
    }
    if (rc == BENCH_HTTP_DONE) break;
  }
  if (ctx.body.oom) {
    st = cinfer_status_oom(NULL);
    goto out;
  }
  *status = r.status;
  if (resp) {
    *resp = ctx.body.data ? ctx.body.data : strdup("");
    ctx.body.data = NULL;
    if (!*resp) st = cinfer_status_oom(NULL);
  }
  if (resp_len) *resp_len = ctx.body.len;
out:
  free(buf);
  cbuf_free(&req);
  cbuf_free(&ctx.body);
  close(fd);
  return st;
}

/* ---- KServe statistics ---- */

static uint64_t jnum(const cJSON *o, const char *a, const char *b) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
  if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
  return cJSON_IsNumber(x) && x->valuedouble > 0 ? (uint64_t)x->valuedouble : 0;
}

void bench_server_stats_get(const bench_config *c, const bench_addr *a, bench_server_stats *s) {
  if (c->grpc) {
    bench_grpc_stats_get(c, a, s);
    return;
  }
  memset(s, 0, sizeof *s);
  char path[700];
  if (c->model_version)
    snprintf(path, sizeof path, "/v2/models/%s/versions/%s/stats", c->model, c->model_version);
  else
    snprintf(path, sizeof path, "/v2/models/%s/stats", c->model);
  int status;
  char *body = NULL;
  cinfer_status *st = bench_http_simple(c, a, "GET", path, NULL, 0, 2000, &status, &body, NULL);
  if (st || status != 200) {
    cinfer_status_free(st);
    free(body);
    return;
  }
  cJSON *j = cJSON_Parse(body);
  free(body);
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "model_stats");
  const cJSON *m;
  cJSON_ArrayForEach(m, ms) {
    const cJSON *is = cJSON_GetObjectItemCaseSensitive(m, "inference_stats");
    if (!cJSON_IsObject(is)) continue;
    s->ok = true;
    s->success_count += jnum(is, "success", "count");
    s->queue_ns += jnum(is, "queue", "ns");
    s->cin_ns += jnum(is, "compute_input", "ns");
    s->infer_ns += jnum(is, "compute_infer", "ns");
    s->cout_ns += jnum(is, "compute_output", "ns");
    s->exec_count += jnum(m, "execution_count", NULL);
    s->infer_count += jnum(m, "inference_count", NULL);
  }
  cJSON_Delete(j);
}
