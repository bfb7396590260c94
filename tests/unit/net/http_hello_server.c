/* http_hello_server.c: benchmark demo for the bare net layer (not a test, not a CLI
 * subcommand). Serves a fixed 60-byte JSON body on every path so that its requests/s can be
 * compared with nginx serving the same bytes (docs/benchmarks-net.md).
 *   usage: http_hello_server [port (default 8089)] [io_threads (default 2)]
 * Runs until SIGINT/SIGTERM, then drains gracefully and prints the server counters. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/http.h"

static const char BODY[] = "{\"model\":\"hello\",\"ready\":true,\"version\":\"1\",\"x\":\"012345678\"}";
_Static_assert(sizeof BODY - 1 == 60, "body must be 60 bytes");

static const http_header HDRS[] = {{"Content-Type", 12, "application/json", 16}};

static void handler(http_exchange *ex, const http_request *req, void *user) {
  http_respond(ex, 200, HDRS, 1, BODY, sizeof BODY - 1);
}

int main(int argc, char **argv) {
  http_server_opts o = {.host = "127.0.0.1",
                        .port = (uint16_t)(argc > 1 ? atoi(argv[1]) : 8089),
                        .io_threads = argc > 2 ? atoi(argv[2]) : 2};
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);  /* I/O threads inherit the mask */
  signal(SIGPIPE, SIG_IGN);
  http_server *srv;
  cinfer_status *st = http_server_create(&o, handler, NULL, &srv);
  if (st) {
    fprintf(stderr, "http_hello_server: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return 1;
  }
  printf("listening on 127.0.0.1:%u with %d I/O threads\n", http_server_port(srv), o.io_threads);
  fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  int forced = http_server_shutdown(srv, 5000);
  http_server_stats s;
  http_server_get_stats(srv, &s);
  printf("connections %llu requests %llu responses %llu bytes_in %llu bytes_out %llu forced %d\n",
         (unsigned long long)s.connections_accepted, (unsigned long long)s.requests,
         (unsigned long long)s.responses, (unsigned long long)s.bytes_in,
         (unsigned long long)s.bytes_out, forced);
  http_server_destroy(srv);
  return 0;
}
