/* auth.c: the gateway's security policies, pure (no I/O except gw_keys_load reading the
 * file): API key files, the access decision per request, client identity behind trusted
 * proxies and the per-tenant filtering of model listings. See docs/security.md. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/buf.h"
#include "gateway/gateway.h"

/* ---- keys ---------------------------------------------------------------------------- */

void gw_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char d[32];
  unsigned int dl = 0;
  if (!EVP_Digest(data, len, d, &dl, EVP_sha256(), NULL) || dl != 32) memset(d, 0, sizeof d);
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void key_free(gw_key *k) {
  for (size_t i = 0; i < k->n_models; i++) free(k->models[i]);
  free(k->models);
}

static void keyset_free(gw_keyset *ks) {
  if (!ks) return;
  for (size_t i = 0; i < ks->n; i++) key_free(&ks->keys[i]);
  free(ks->keys);
  free(ks);
}

void gw_keyset_ref(gw_keyset *ks) {
  if (ks) atomic_fetch_add(&ks->refs, 1);
}

void gw_keyset_unref(gw_keyset *ks) {
  if (ks && atomic_fetch_sub(&ks->refs, 1) == 1) keyset_free(ks);
}

static int hexv(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = tolower(c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool valid_key_id(const char *s, size_t n) {
  if (n == 0 || n > 64) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return false;
  return true;
}

/* Splits the model list "a,b,c" (no empty names). */
static bool parse_models(gw_key *k, const char *s, size_t n) {
  if (n == 1 && s[0] == '*') {
    k->all_models = true;
    return true;
  }
  size_t i = 0;
  while (i <= n) {
    size_t j = i;
    while (j < n && s[j] != ',') j++;
    if (j == i) return false;
    char **nm = realloc(k->models, (k->n_models + 1) * sizeof *nm);
    if (!nm) return false;
    k->models = nm;
    if (!(k->models[k->n_models] = strndup(s + i, j - i))) return false;
    k->n_models++;
    i = j + 1;
  }
  return true;
}

static bool parse_num(const char *s, size_t n, double lo, double hi, double *out) {
  char tmp[40];
  if (n == 0 || n >= sizeof tmp) return false;
  memcpy(tmp, s, n);
  tmp[n] = 0;
  char *end;
  errno = 0;
  double v = strtod(tmp, &end);
  if (errno || *end || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

#define KFAIL(...)                                                            \
  do {                                                                        \
    char m_[300];                                                             \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                     \
    st = cinfer_status_new(CINFER_INVALID_ARG, "%s:%d: %s", origin, line, m_); \
    goto fail;                                                                \
  } while (0)

cinfer_status *gw_keys_parse(const char *text, size_t len, const char *origin, gw_keyset **out) {
  *out = NULL;
  cinfer_status *st = NULL;
  gw_keyset *ks = calloc(1, sizeof *ks);
  if (!ks) return cinfer_status_new(CINFER_INTERNAL, "%s: out of memory", origin);
  atomic_init(&ks->refs, 1);
  int line = 0;
  size_t pos = 0;
  while (pos < len) {
    line++;
    size_t e = pos;
    while (e < len && text[e] != '\n') e++;
    const char *l = text + pos;
    size_t ll = e - pos;
    pos = e + 1;
    for (size_t i = 0; i < ll; i++)
      if (l[i] == '#') ll = i;
    /* fields */
    const char *f[8];
    size_t fl[8];
    int nf = 0;
    for (size_t i = 0; i < ll;) {
      while (i < ll && isspace((unsigned char)l[i])) i++;
      if (i == ll) break;
      size_t j = i;
      while (j < ll && !isspace((unsigned char)l[j])) j++;
      if (nf == 8) KFAIL("too many fields (want ID SHA256 ROLE MODELS [rate=R] [burst=B] [tpm=T])");
      f[nf] = l + i;
      fl[nf++] = j - i;
      i = j;
    }
    if (nf == 0) continue;
    if (nf < 4) KFAIL("want ID SHA256 ROLE MODELS [rate=R] [burst=B] [tpm=T], got %d field%s", nf, nf == 1 ? "" : "s");
    gw_key k = {0};
    if (!valid_key_id(f[0], fl[0]))
      KFAIL("id: '%.*s' must be 1 to 64 of A-Z a-z 0-9 . _ -", (int)(fl[0] > 64 ? 64 : fl[0]), f[0]);
    memcpy(k.id, f[0], fl[0]);
    for (size_t i = 0; i < ks->n; i++)
      if (!strcmp(ks->keys[i].id, k.id)) KFAIL("id: '%s' appears twice", k.id);
    bool hex_ok = fl[1] == 64;
    for (size_t i = 0; hex_ok && i < 64; i++) hex_ok = hexv((unsigned char)f[1][i]) >= 0;
    if (!hex_ok) KFAIL("sha256: want 64 hex digits (sha256sum of the key), got '%.*s'", (int)(fl[1] > 70 ? 70 : fl[1]), f[1]);
    for (int i = 0; i < 32; i++)
      k.sha256[i] = (unsigned char)(hexv((unsigned char)f[1][2 * i]) * 16 + hexv((unsigned char)f[1][2 * i + 1]));
    if (fl[2] == 6 && !memcmp(f[2], "tenant", 6)) k.role = GW_ROLE_TENANT;
    else if (fl[2] == 8 && !memcmp(f[2], "operator", 8)) k.role = GW_ROLE_OPERATOR;
    else KFAIL("role: '%.*s' is not tenant or operator", (int)(fl[2] > 40 ? 40 : fl[2]), f[2]);
    if (!parse_models(&k, f[3], fl[3])) {
      key_free(&k);
      KFAIL("models: '%.*s' must be * or a comma list of model names", (int)(fl[3] > 100 ? 100 : fl[3]), f[3]);
    }
    for (int i = 4; i < nf; i++) {
      bool ok;
      if (fl[i] > 5 && !memcmp(f[i], "rate=", 5)) ok = parse_num(f[i] + 5, fl[i] - 5, 0.001, 1e9, &k.rate);
      else if (fl[i] > 6 && !memcmp(f[i], "burst=", 6)) ok = parse_num(f[i] + 6, fl[i] - 6, 0, 1e9, &k.burst);
      else if (fl[i] > 4 && !memcmp(f[i], "tpm=", 4)) ok = parse_num(f[i] + 4, fl[i] - 4, 1, 1e12, &k.tpm);
      else {
        key_free(&k);
        KFAIL("'%.*s': options are rate=R (requests/s, > 0), burst=B and tpm=T (LLM tokens per minute)",
              (int)(fl[i] > 40 ? 40 : fl[i]), f[i]);
      }
      if (!ok) {
        key_free(&k);
        KFAIL("'%.*s': not a number in range (rate in [0.001, 1e9], burst in [0, 1e9], tpm in [1, 1e12])",
              (int)(fl[i] > 40 ? 40 : fl[i]), f[i]);
      }
    }
    gw_key *nk = realloc(ks->keys, (ks->n + 1) * sizeof *nk);
    if (!nk) {
      key_free(&k);
      KFAIL("out of memory");
    }
    ks->keys = nk;
    ks->keys[ks->n++] = k;
  }
  *out = ks;
  return NULL;
fail:
  keyset_free(ks);
  return st;
}

cinfer_status *gw_keys_load(const char *path, gw_keyset **out) {
  *out = NULL;
  cbuf b = {0};
  cinfer_status *st = cbuf_read_file(&b, path, 64u << 20);
  if (!st) st = gw_keys_parse(b.data, b.len, path, out);
  if (b.data) OPENSSL_cleanse(b.data, b.cap); /* the file holds secrets' hashes */
  cbuf_free(&b);
  return st;
}

const gw_key *gw_keys_find(const gw_keyset *ks, const char *token, size_t len) {
  if (!ks || !len) return NULL;
  unsigned char d[32];
  unsigned int dl = 0;
  if (!EVP_Digest(token, len, d, &dl, EVP_sha256(), NULL) || dl != 32) return NULL;
  const gw_key *hit = NULL;
  for (size_t i = 0; i < ks->n; i++) {
    /* every key is compared: the time does not tell which one (or whether one) matched */
    bool eq = CRYPTO_memcmp(d, ks->keys[i].sha256, 32) == 0;
    if (eq && !hit) hit = &ks->keys[i];
  }
  OPENSSL_cleanse(d, sizeof d);
  return hit;
}

bool gw_key_allows_model(const gw_key *k, const char *model) {
  if (k->all_models) return true;
  for (size_t i = 0; i < k->n_models; i++)
    if (!strcmp(k->models[i], model)) return true;
  return false;
}

/* ---- access ---------------------------------------------------------------------------- */

int gw_access_decide(const gw_access_in *in, char *msg, size_t cap) {
  msg[0] = 0;
  if (in->keys && in->role == GW_ROLE_ANON) {
    snprintf(msg, cap, "%s", in->bad_credential
                                 ? "unknown API key (Authorization: Bearer <key>)"
                                 : "missing API key: send Authorization: Bearer <key>");
    return 401;
  }
  if (in->role == GW_ROLE_OPERATOR) return 0;
  bool open = in->group == API_GROUP_NONE ||
              ((unsigned)in->group < API_GROUP_COUNT && in->public_groups[in->group]);
  if (!open && !(in->listing && in->role == GW_ROLE_TENANT)) {
    if (in->group == API_GROUP_UNKNOWN)
      snprintf(msg, cap, "not a known API route (group 'unknown'): it needs an operator credential");
    else
      snprintf(msg, cap, "API group '%s' is restricted at the gateway: it needs an operator credential",
               api_group_name(in->group));
    return 403;
  }
  if (in->role == GW_ROLE_TENANT && in->key && in->model && in->model[0] &&
      !gw_key_allows_model(in->key, in->model)) {
    snprintf(msg, cap, "API key '%s' may not use model '%s'", in->key_id ? in->key_id : "",
             in->model);
    return 403;
  }
  return 0;
}

/* ---- client identity ----------------------------------------------------------------- */

bool gw_cidr_parse(const char *s, gw_cidr *out) {
  char buf[64];
  const char *slash = strchr(s, '/');
  size_t n = slash ? (size_t)(slash - s) : strlen(s);
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = 0;
  memset(out, 0, sizeof *out);
  int max;
  if (inet_pton(AF_INET, buf, out->addr) == 1) {
    out->family = AF_INET;
    max = 32;
  } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
    out->family = AF_INET6;
    max = 128;
  } else {
    return false;
  }
  out->prefix = max;
  if (slash) {
    const char *p = slash + 1;
    if (!*p || strlen(p) > 3) return false;
    int v = 0;
    for (; *p; p++) {
      if (*p < '0' || *p > '9') return false;
      v = v * 10 + (*p - '0');
    }
    if (v > max) return false;
    out->prefix = v;
  }
  return true;
}

static bool addr_parse(const char *s, size_t n, int *family, unsigned char a[16]) {
  char buf[64];
  while (n && (*s == ' ' || *s == '\t')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = 0;
  if (inet_pton(AF_INET, buf, a) == 1) {
    *family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, buf, a) == 1) {
    *family = AF_INET6;
    if (!memcmp(a, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12)) {  /* v4-mapped */
      memmove(a, a + 12, 4);
      *family = AF_INET;
    }
    return true;
  }
  return false;
}

static bool cidr_match_bin(const gw_cidr *c, int family, const unsigned char *a) {
  if (c->family != family) return false;
  int full = c->prefix / 8, rest = c->prefix % 8;
  if (memcmp(c->addr, a, (size_t)full)) return false;
  if (!rest) return true;
  unsigned char m = (unsigned char)(0xff << (8 - rest));
  return (c->addr[full] & m) == (a[full] & m);
}

bool gw_cidr_match(const gw_cidr *c, const char *addr) {
  int fam;
  unsigned char a[16];
  return addr_parse(addr, strlen(addr), &fam, a) && cidr_match_bin(c, fam, a);
}

static bool trusted_bin(const gw_cidr *t, size_t n, int fam, const unsigned char *a) {
  for (size_t i = 0; i < n; i++)
    if (cidr_match_bin(&t[i], fam, a)) return true;
  return false;
}

void gw_client_addr(const char *peer, const char *xff, size_t xff_len, const gw_cidr *trusted,
                    size_t n_trusted, char *out, size_t cap) {
  snprintf(out, cap, "%s", peer ? peer : "");
  int fam;
  unsigned char a[16];
  if (!xff || !xff_len || !n_trusted || !peer || !addr_parse(peer, strlen(peer), &fam, a) ||
      !trusted_bin(trusted, n_trusted, fam, a))
    return;
  /* right to left: each entry was appended by the hop before; stop at the first one that
   * is not one of our proxies */
  size_t end = xff_len;
  for (;;) {
    size_t start = end;
    while (start > 0 && xff[start - 1] != ',') start--;
    const char *e = xff + start;
    size_t el = end - start;
    if (!addr_parse(e, el, &fam, a)) return;  /* garbage: the peer is all we know */
    char txt[64];
    inet_ntop(fam, a, txt, sizeof txt);
    snprintf(out, cap, "%s", txt);
    if (!trusted_bin(trusted, n_trusted, fam, a) || start == 0) return;
    end = start - 1;
  }
}

/* ---- listing filter ------------------------------------------------------------------ */

char *gw_filter_listing(const char *body, size_t len, bool openai, const gw_key *k,
                        size_t *out_len) {
  cJSON *j = cJSON_ParseWithLength(body, len);
  if (!j) return NULL;
  cJSON *arr = openai ? cJSON_GetObjectItemCaseSensitive(j, "data") : j;
  if (!cJSON_IsArray(arr)) {
    cJSON_Delete(j);
    return NULL;
  }
  const char *field = openai ? "id" : "name";
  cJSON *it = arr->child;
  while (it) {
    cJSON *next = it->next;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, field);
    if (!cJSON_IsString(n) || !gw_key_allows_model(k, n->valuestring))
      cJSON_Delete(cJSON_DetachItemViaPointer(arr, it));
    it = next;
  }
  char *s = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (s) *out_len = strlen(s);
  return s;
}
