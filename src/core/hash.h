/* hash.h: the process's one general-purpose hash: 64-bit FNV-1a, streamable (feed the
 * previous result back as h), plus a finaliser for callers that take low bits of the hash
 * as a table index or compare hashes of similar keys (FNV's low bits mix poorly).
 *   uint64_t h = hash_fnv1a(HASH_FNV_SEED, a, na);  h = hash_fnv1a(h, b, nb);
 * Not for untrusted keys where collisions could be forced (nothing here is keyed). */
#ifndef CINFER_CORE_HASH_H
#define CINFER_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HASH_FNV_SEED 1469598103934665603ull

static inline uint64_t hash_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

static inline uint64_t hash_bytes(const void *p, size_t n) { return hash_fnv1a(HASH_FNV_SEED, p, n); }
static inline uint64_t hash_str(const char *s) { return hash_bytes(s, strlen(s)); }

/* splitmix64's finaliser: every input bit affects every output bit. */
static inline uint64_t hash_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

#endif
