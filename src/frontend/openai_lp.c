/* openai_lp.c: logprobs JSON written directly (see openai_lp.h). */
#include "frontend/openai_lp.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oai_lp_string(cbuf *b, const char *s, size_t n, int *chars) {
  size_t from = b->len;
  cbuf_json_string_utf8(b, s, n);
  if (b->oom) return;
  /* Rewrite cbuf_json_string's escapes in place (the text only shrinks): \u0008 and \u000c
   * become \b and \f, and an escaped NUL ends the string. */
  char *p = b->data + from + 1, *o = p, *end = b->data + b->len - 1; /* inside the quotes */
  int k = 0;
  while (p < end) {
    if (*p != '\\') {
      k += ((unsigned char)*p & 0xC0) != 0x80;
      *o++ = *p++;
      continue;
    }
    k++;
    if (p[1] != 'u') {
      *o++ = *p++;
      *o++ = *p++;
      continue;
    }
    /* cbuf_json_string writes \u00xx only for bytes below 0x20 */
    int v = (int)strtol((char[3]){p[4], p[5], 0}, NULL, 16);
    if (v == 0) {
      k--;
      break;
    }
    if (v == 8 || v == 12) {
      *o++ = '\\';
      *o++ = v == 8 ? 'b' : 'f';
    } else {
      memmove(o, p, 6);
      o += 6;
    }
    p += 6;
  }
  *o++ = '"';
  *o = 0;
  b->len = (size_t)(o - b->data);
  if (chars) *chars += k;
}

void oai_lp_number(cbuf *b, float v) {
  char t[64];
  snprintf(t, sizeof t, "%.6g", v);
  double d = strtod(t, NULL);
  if (!isfinite(d)) {
    cbuf_puts(b, "null");
    return;
  }
  snprintf(t, sizeof t, "%1.15g", d);
  double back = 0;
  bool same = sscanf(t, "%lg", &back) == 1 &&
              fabs(back - d) <= (fabs(back) > fabs(d) ? fabs(back) : fabs(d)) * DBL_EPSILON;
  if (!same) snprintf(t, sizeof t, "%1.17g", d);
  cbuf_puts(b, t);
}
