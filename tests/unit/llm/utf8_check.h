/* utf8_check.h: the tests' own UTF-8 oracle (independent of the engine's code): true when
 * s[0..n) is whole, well-formed-length UTF-8 sequences (lead byte, then its continuation
 * bytes; no truncated sequence at the end). */
#ifndef CINFER_TEST_UTF8_CHECK_H
#define CINFER_TEST_UTF8_CHECK_H

#include <stdbool.h>
#include <stddef.h>

static inline bool valid_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    int l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!l || i + (size_t)l > n) return false;
    for (int k = 1; k < l; k++)
      if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
    i += (size_t)l;
  }
  return true;
}

#endif
