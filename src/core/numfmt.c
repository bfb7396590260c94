/* numfmt.c: shortest round-trip "%g" text for floats and doubles. See numfmt.h.
 *
 * Fast path. A finite non-zero value is m·2^e exactly (m integer). For p = 1, 2, ... it
 * computes the p-digit decimal nearest to the value, D·10^-s with s = p-1-X (X the decimal
 * exponent), as printf does (round half to even on the exact value), and accepts it when
 * it lies inside the value's rounding interval (half an ulp each side, a quarter below
 * when the value is a power of two whose lower neighbour is closer; the ends belong to
 * the interval when m is even, as strtod rounds ties to even). All of it is integer
 * arithmetic on A/B = value·10^s with A, B < 2^125, so it is exact; anything that does
 * not fit takes the reference loop. Text layout follows "%.{p}g" (trailing zeros
 * dropped, exponent form when X < -4 or X >= p, at least two exponent digits). */
#include "core/numfmt.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 u128;

static const uint64_t P10[20] = {1ull,
                                 10ull,
                                 100ull,
                                 1000ull,
                                 10000ull,
                                 100000ull,
                                 1000000ull,
                                 10000000ull,
                                 100000000ull,
                                 1000000000ull,
                                 10000000000ull,
                                 100000000000ull,
                                 1000000000000ull,
                                 10000000000000ull,
                                 100000000000000ull,
                                 1000000000000000ull,
                                 10000000000000000ull,
                                 100000000000000000ull,
                                 1000000000000000000ull,
                                 10000000000000000000ull};

/* 10^k for 0 <= k <= 38. */
static u128 pow10_128(int k) { return k <= 19 ? (u128)P10[k] : (u128)P10[19] * P10[k - 19]; }

/* Number of significant bits of x. */
static int bits128(u128 x) {
  uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
  return hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
}

/* Lays out the p digits of d (no trailing-zero trimming needed by the caller) with decimal
 * exponent x the way "%.{p}g" does. Returns the length. */
static size_t layout(char *buf, bool neg, uint64_t d, int p, int x) {
  char dig[24];
  for (int i = p - 1; i >= 0; i--) dig[i] = (char)('0' + d % 10), d /= 10;
  int nd = p;
  while (nd > 1 && dig[nd - 1] == '0') nd--;
  char *o = buf;
  if (neg) *o++ = '-';
  if (x < -4 || x >= p) {
    *o++ = dig[0];
    if (nd > 1) {
      *o++ = '.';
      memcpy(o, dig + 1, (size_t)nd - 1);
      o += nd - 1;
    }
    *o++ = 'e';
    *o++ = x < 0 ? '-' : '+';
    int ax = x < 0 ? -x : x;
    if (ax >= 100) *o++ = (char)('0' + ax / 100);
    *o++ = (char)('0' + ax / 10 % 10);
    *o++ = (char)('0' + ax % 10);
  } else if (x >= 0) {
    memcpy(o, dig, (size_t)x + 1);
    o += x + 1;
    if (nd > x + 1) {
      *o++ = '.';
      memcpy(o, dig + x + 1, (size_t)(nd - x - 1));
      o += nd - x - 1;
    }
  } else {
    *o++ = '0';
    *o++ = '.';
    for (int i = 0; i < -x - 1; i++) *o++ = '0';
    memcpy(o, dig, (size_t)nd);
    o += nd;
  }
  *o = 0;
  return (size_t)(o - buf);
}

/* value·10^s = a/b exactly, with u = ulp·10^s·b (the value's ulp on the same scale);
 * *shift >= 0 when b = 2^*shift. False when a number would not fit in 124 bits. */
static bool scale(uint64_t m, int mbits, int e, int s, u128 *a, u128 *b, u128 *u, int *shift) {
  const int LIM = 124;
  int as = s < 0 ? -s : s;
  if (as > 38) return false;
  u128 t = pow10_128(as);
  int tb = bits128(t);
  *shift = -1;
  if (e >= 0) {
    if (mbits + e + (s >= 0 ? tb : 0) > LIM) return false;
    *a = (u128)m << e;
    if (s >= 0) *a *= t, *b = 1, *u = ((u128)1 << e) * t, *shift = 0;
    else *b = t, *u = (u128)1 << e;
  } else {
    int ne = -e;
    if (ne + (s < 0 ? tb : 0) > LIM || mbits + (s >= 0 ? tb : 0) > LIM) return false;
    if (s >= 0) *a = (u128)m * t, *b = (u128)1 << ne, *u = t, *shift = ne;
    else *a = m, *b = ((u128)1 << ne) * t, *u = 1;
  }
  return true;
}

/* value = m·2^e > 0; lower_close: the next value below is half an ulp away (a power of two
 * above the smallest normal); maxp: digits that always round-trip (9 or 17). Returns the
 * length written, or 0 when the numbers do not fit 128 bits (the caller falls back). */
static size_t fast(char *buf, bool neg, uint64_t m, int e, bool lower_close, int maxp) {
  bool even = (m & 1) == 0;
  int mbits = 64 - __builtin_clzll(m);
  /* The value is below 2^k, so floor(k·log10 2) is X or X+1 (the fixed-point log10 2 is
   * good to 3e-5 over the whole range): one exact comparison with 10^x settles it. */
  int k = e + mbits;
  int x = k >= 0 ? (k * 78913) >> 18 : -((-k * 78913 + (1 << 18) - 1) >> 18);
  int s = -x;
  u128 a, b, u;
  int shift;
  if (!scale(m, mbits, e, s, &a, &b, &u, &shift)) return 0;
  /* One more digit is s+1: a and u gain a factor 10 while s >= 0, b loses one while
   * s < 0 (it holds 10^-s then). */
#define NEXT_DIGIT()                                              \
  do {                                                            \
    if (s >= 0) {                                                 \
      if (bits128(a) > 120 || bits128(u) > 120) return 0;         \
      a *= 10, u *= 10;                                           \
    } else {                                                      \
      b /= 10;                                                    \
      if (s == -1) shift = e >= 0 ? 0 : -e;                       \
    }                                                             \
    s++;                                                          \
  } while (0)
  if (a < b) {
    x--;
    NEXT_DIGIT();
  }
  for (int p = 1; p <= maxp; p++) {
    if (p > 1) NEXT_DIGIT();
    u128 q, r;
    if (shift >= 0) q = a >> shift, r = a & (b - 1);
    else q = a / b, r = a % b;
    if (2 * r > b || (2 * r == b && (q & 1))) q++;
    u128 qb = q * b;
    bool above = qb >= a;
    u128 d = above ? qb - a : a - qb;
    u128 dd = (!above && lower_close) ? 4 * d : 2 * d;
    if (dd < u || (dd == u && even)) {
      /* Rounding up to 10^p (9.9996 to four digits) is 1.000 with the next exponent. */
      if (q == (u128)P10[p]) return layout(buf, neg, P10[p - 1], p, x + 1);
      return layout(buf, neg, (uint64_t)q, p, x);
    }
  }
#undef NEXT_DIGIT
  return 0;
}

/* The same search in 64-bit arithmetic for the common float case: value = m·2^e with
 * m < 2^24 and -40 <= e < 0, i.e. below 2^24 (X <= 7), and X >= -3 so that a = m·10^s
 * stays below 2^24·10^12 < 2^64 for every s the search reaches (s <= 8-X+1). b is 2^-e,
 * times 10^-s while s < 0 (at most 2^40·10^7 < 2^64). Returns 0 outside that range. */
static size_t fast_float64(char *buf, bool neg, uint32_t m, int e, bool lower_close) {
  if (e >= 0 || e < -40) return 0;
  int mbits = 32 - __builtin_clz(m);
  int k = e + mbits;
  int x = k >= 0 ? (k * 78913) >> 18 : -((-k * 78913 + (1 << 18) - 1) >> 18);
  if (x < -3 || x > 8) return 0;
  int ne = -e, s = -x, shift;
  uint64_t a, b, u;
  if (s >= 0) a = (uint64_t)m * P10[s], b = 1ull << ne, u = P10[s], shift = ne;
  else a = m, b = (1ull << ne) * P10[-s], u = 1, shift = -1;
#define NEXT_DIGIT64()                         \
  do {                                         \
    if (s >= 0) a *= 10, u *= 10;              \
    else if ((b /= 10, s == -1)) shift = ne;   \
    s++;                                       \
  } while (0)
  if (a < b) { /* x was one too big */
    x--;
    NEXT_DIGIT64();
  }
  bool even = (m & 1) == 0;
  for (int p = 1; p <= 9; p++) {
    if (p > 1) NEXT_DIGIT64();
    uint64_t q, r;
    if (shift >= 0) q = a >> shift, r = a & (b - 1);
    else q = a / b, r = a % b;
    if (2 * r > b || (2 * r == b && (q & 1))) q++;
    uint64_t qb = q * b;
    bool above = qb >= a;
    uint64_t d = above ? qb - a : a - qb;
    uint64_t dd = (!above && lower_close) ? 4 * d : 2 * d;
    if (dd < u || (dd == u && even)) {
      if (q == P10[p]) return layout(buf, neg, P10[p - 1], p, x + 1);
      return layout(buf, neg, q, p, x);
    }
  }
#undef NEXT_DIGIT64
  return 0;
}

size_t numfmt_float_ref(char *buf, float f) {
  int n = 0;
  for (int p = 1; p <= 9; p++) {
    n = snprintf(buf, NUMFMT_BUF, "%.*g", p, (double)f);
    if (isnan(f) || strtof(buf, NULL) == f) break;
  }
  return (size_t)n;
}

size_t numfmt_double_ref(char *buf, double d) {
  int n = 0;
  for (int p = 1; p <= 17; p++) {
    n = snprintf(buf, NUMFMT_BUF, "%.*g", p, d);
    if (isnan(d) || strtod(buf, NULL) == d) break;
  }
  return (size_t)n;
}

size_t numfmt_float(char *buf, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  bool neg = u >> 31;
  uint32_t ex = (u >> 23) & 0xff, frac = u & 0x7fffff;
  if (ex == 0xff) return numfmt_float_ref(buf, f);
  if (ex == 0 && frac == 0) {
    memcpy(buf, neg ? "-0" : "0", neg ? 3 : 2);
    return neg ? 2 : 1;
  }
  uint32_t m = ex ? (frac | 0x800000u) : frac;
  int e = ex ? (int)ex - 150 : -149;
  size_t n = fast_float64(buf, neg, m, e, frac == 0 && ex > 1);
  if (!n) n = fast(buf, neg, m, e, frac == 0 && ex > 1, 9);
  return n ? n : numfmt_float_ref(buf, f);
}

size_t numfmt_double(char *buf, double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  bool neg = u >> 63;
  uint32_t ex = (uint32_t)(u >> 52) & 0x7ff;
  uint64_t frac = u & 0xfffffffffffffull;
  if (ex == 0x7ff) return numfmt_double_ref(buf, d);
  if (ex == 0 && frac == 0) {
    memcpy(buf, neg ? "-0" : "0", neg ? 3 : 2);
    return neg ? 2 : 1;
  }
  uint64_t m = ex ? (frac | (1ull << 52)) : frac;
  int e = ex ? (int)ex - 1075 : -1074;
  size_t n = fast(buf, neg, m, e, frac == 0 && ex > 1, 17);
  return n ? n : numfmt_double_ref(buf, d);
}
