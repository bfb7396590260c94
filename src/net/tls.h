/* tls.h: TLS for cinfer's HTTP server and client (OpenSSL), on the same non-blocking
 * loops: a net_tls is one role's configuration (server: certificate and key; client: CA
 * file and an optional client certificate for mutual TLS). TLS 1.2 or newer only,
 * renegotiation refused, no compression.
 *
 * Reload: net_tls_new_ssl re-reads the certificate, key and CA files when one of them
 * changed (mtime/size/inode, checked at most once per second), so a rotated certificate
 * is used by the next handshake while connections already up keep theirs. Files that do
 * not load keep the previous configuration and log an error naming the file.
 */
#ifndef CINFER_NET_TLS_H
#define CINFER_NET_TLS_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/types.h"

struct ssl_st;
typedef struct net_tls net_tls;

typedef struct net_tls_opts {
  bool server;
  const char *cert_file;   /* server: required; client: optional (mutual TLS) */
  const char *key_file;    /* with cert_file */
  const char *ca_file;     /* client: verifies the server (NULL: the system store);
                              server: when set, clients must present a certificate it signed */
  /* ALPN protocol ("h2" for gRPC), or NULL: none. Server: a client that offers protocols
   * but not this one fails the handshake (no_application_protocol); client: offered. */
  const char *alpn;
} net_tls_opts;

/* Loads the files now: an error names the file and OpenSSL's reason. */
cinfer_status *net_tls_create(const net_tls_opts *o, net_tls **out);
void net_tls_destroy(net_tls *t);   /* NULL is a no-op; live SSL objects stay valid */
/* A new SSL object for one connection (after a reload check at now_ms). Client side: host
 * is the name (or IP address) the server's certificate must match and the SNI name.
 * NULL on out of memory. Any thread. */
struct ssl_st *net_tls_new_ssl(net_tls *t, const char *host, uint64_t now_ms);
/* The reason of the last TLS failure on this thread (OpenSSL's error queue, emptied). */
const char *net_tls_last_error(char *buf, unsigned cap);

#endif
