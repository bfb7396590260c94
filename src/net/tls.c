/* tls.c: OpenSSL contexts with reload on change (see tls.h). */
#include "net/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"

#define TLS_NFILES 3

typedef struct file_id {
  time_t sec;
  long nsec;
  off_t size;
  ino_t ino;
  bool present;
} file_id;

struct net_tls {
  bool server;
  char *files[TLS_NFILES];  /* cert, key, ca (NULL = unused) */
  unsigned char alpn[32];   /* ALPN wire format (length-prefixed), alpn_len 0: none */
  unsigned alpn_len;
  pthread_mutex_t mu;
  SSL_CTX *ctx;             /* current; SSL objects hold their own reference */
  file_id ids[TLS_NFILES];
  uint64_t next_check_ms;
};

const char *net_tls_last_error(char *buf, unsigned cap) {
  unsigned long e = ERR_get_error(), last = e;
  while (e) {
    last = e;
    e = ERR_get_error();
  }
  if (!last) snprintf(buf, cap, "unknown TLS error");
  else ERR_error_string_n(last, buf, cap);
  return buf;
}

static void stat_ids(const net_tls *t, file_id *ids) {
  for (int i = 0; i < TLS_NFILES; i++) {
    memset(&ids[i], 0, sizeof ids[i]);
    struct stat st;
    if (t->files[i] && !stat(t->files[i], &st))
      ids[i] = (file_id){st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_size, st.st_ino, true};
  }
}

/* Server: picks t->alpn among the client's offers, or fails the handshake. */
static int alpn_select(SSL *s, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned inlen, void *arg) {
  const net_tls *t = arg;
  unsigned char *sel;
  if (SSL_select_next_proto(&sel, outlen, t->alpn, t->alpn_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

static cinfer_status *build_ctx(const net_tls *t, SSL_CTX **out) {
  *out = NULL;
  char eb[256];
  SSL_CTX *ctx = SSL_CTX_new(t->server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return cinfer_status_new(CINFER_INTERNAL, "tls: %s", net_tls_last_error(eb, sizeof eb));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  /* TLS 1.2: forward-secret AEAD suites only */
  SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!SHA1");
  const char *cert = t->files[0], *key = t->files[1], *ca = t->files[2];
  cinfer_status *st = NULL;
  if (cert) {
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "tls: certificate %s: %s", cert, net_tls_last_error(eb, sizeof eb));
      goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "tls: key %s: %s", key, net_tls_last_error(eb, sizeof eb));
      goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "tls: key %s does not match certificate %s", key, cert);
      goto fail;
    }
  }
  if (ca) {
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
      st = cinfer_status_new(CINFER_INVALID_ARG, "tls: CA file %s: %s", ca, net_tls_last_error(eb, sizeof eb));
      goto fail;
    }
  } else if (!t->server) {
    SSL_CTX_set_default_verify_paths(ctx);
  }
  if (t->alpn_len) {
    if (t->server) SSL_CTX_set_alpn_select_cb(ctx, alpn_select, (void *)t);
    else SSL_CTX_set_alpn_protos(ctx, t->alpn, t->alpn_len);
  }
  if (!t->server || ca)
    SSL_CTX_set_verify(ctx, t->server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER, NULL);
  *out = ctx;
  return NULL;
fail:
  SSL_CTX_free(ctx);
  return st;
}

cinfer_status *net_tls_create(const net_tls_opts *o, net_tls **out) {
  *out = NULL;
  if (o->server && (!o->cert_file || !o->key_file))
    return cinfer_status_new(CINFER_INVALID_ARG, "tls: a server needs a certificate and a key file");
  if (!o->cert_file != !o->key_file)
    return cinfer_status_new(CINFER_INVALID_ARG, "tls: a certificate needs its key file (and the key its certificate)");
  net_tls *t = calloc(1, sizeof *t);
  if (!t) return cinfer_status_new(CINFER_INTERNAL, "tls: out of memory");
  pthread_mutex_init(&t->mu, NULL);
  t->server = o->server;
  if (o->alpn) {
    size_t n = strlen(o->alpn);
    if (!n || n >= sizeof t->alpn - 1) {
      net_tls_destroy(t);
      return cinfer_status_new(CINFER_INVALID_ARG, "tls: bad ALPN protocol name '%s'", o->alpn);
    }
    t->alpn[0] = (unsigned char)n;
    memcpy(t->alpn + 1, o->alpn, n);
    t->alpn_len = (unsigned)n + 1;
  }
  const char *f[TLS_NFILES] = {o->cert_file, o->key_file, o->ca_file};
  for (int i = 0; i < TLS_NFILES; i++)
    if (f[i] && !(t->files[i] = strdup(f[i]))) {
      net_tls_destroy(t);
      return cinfer_status_new(CINFER_INTERNAL, "tls: out of memory");
    }
  stat_ids(t, t->ids);
  cinfer_status *st = build_ctx(t, &t->ctx);
  if (st) {
    net_tls_destroy(t);
    return st;
  }
  *out = t;
  return NULL;
}

void net_tls_destroy(net_tls *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx);
  for (int i = 0; i < TLS_NFILES; i++) free(t->files[i]);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

/* t->mu held. */
static void maybe_reload(net_tls *t, uint64_t now_ms) {
  if (now_ms < t->next_check_ms) return;
  t->next_check_ms = now_ms + 1000;
  file_id ids[TLS_NFILES];
  stat_ids(t, ids);
  if (!memcmp(ids, t->ids, sizeof ids)) return;
  memcpy(t->ids, ids, sizeof ids);  /* one attempt per change (no error line per second) */
  SSL_CTX *ctx;
  cinfer_status *st = build_ctx(t, &ctx);
  if (st) {
    LOG_E("%s; keeping the previous certificate", cinfer_status_message(st));
    cinfer_status_free(st);
    return;
  }
  SSL_CTX_free(t->ctx);  /* connections still using it hold references */
  t->ctx = ctx;
  LOG_I("tls: reloaded %s%s%s", t->files[0] ? t->files[0] : "", t->files[0] && t->files[2] ? ", " : "",
        t->files[2] ? t->files[2] : "");
}

struct ssl_st *net_tls_new_ssl(net_tls *t, const char *host, uint64_t now_ms) {
  pthread_mutex_lock(&t->mu);
  maybe_reload(t, now_ms);
  SSL *s = SSL_new(t->ctx);
  pthread_mutex_unlock(&t->mu);
  if (!s) return NULL;
  if (!t->server && host && *host) {
    unsigned char tmp[16];
    bool ip = inet_pton(AF_INET, host, tmp) == 1 || inet_pton(AF_INET6, host, tmp) == 1;
    X509_VERIFY_PARAM *p = SSL_get0_param(s);
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(p, host);
    } else {
      SSL_set_tlsext_host_name(s, host);
      X509_VERIFY_PARAM_set_hostflags(p, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      X509_VERIFY_PARAM_set1_host(p, host, 0);
    }
  }
  return s;
}
