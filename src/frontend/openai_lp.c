/* openai_lp.c: logprobs JSON written directly (see openai_lp.h). */
#include "frontend/openai_lp.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void oai_lp_string(cbuf *b, const char *s, size_t n, int *chars) {
  size_t from = b->len;
  cbuf_json_string_utf8(b, s, n);
  if (b->oom) return;
  /* Rewrite cbuf_json_string's escapes in place (the text only shrinks): \u0008 and \u000c
   * become \b and \f; count the characters. */
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

void oai_lp_logprob(cbuf *b, float v) {
  if (isnan(v) || v == INFINITY) cbuf_puts(b, "null");
  else oai_lp_number(b, v < OAI_LP_FLOOR ? OAI_LP_FLOOR : v);
}

/* ---- completions arrays -------------------------------------------------------------- */

void oai_lp_list_token(oai_lp_list *l, const char *text, size_t n, const float *logprob) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    int *nv = realloc(l->chars, nc * sizeof *nv);
    if (!nv) {
      l->oom = true;
      l->n_top = -1;
      return;
    }
    l->chars = nv;
    l->cap = nc;
  }
  const char *sep = l->n ? "," : "";
  int chars = 0;
  cbuf_puts(&l->tokens, sep);
  oai_lp_string(&l->tokens, text, n, &chars);
  l->chars[l->n++] = chars;
  cbuf_puts(&l->values, sep);
  cbuf_puts(&l->tops, sep);
  if (logprob) {
    oai_lp_logprob(&l->values, *logprob);
    cbuf_puts(&l->tops, "{");
    l->n_top = 0;
  } else {
    cbuf_puts(&l->values, "null");
    cbuf_puts(&l->tops, "null");
    l->n_top = -1;
  }
}

void oai_lp_list_top(oai_lp_list *l, const char *text, size_t n, float logprob) {
  if (l->n_top < 0) return;
  if (l->n_top++) cbuf_puts(&l->tops, ",");
  oai_lp_string(&l->tops, text, n, NULL);
  cbuf_puts(&l->tops, ":");
  oai_lp_logprob(&l->tops, logprob);
}

void oai_lp_list_end(oai_lp_list *l) {
  if (l->n_top >= 0) cbuf_puts(&l->tops, "}");
  l->n_top = -1;
}

static void put_part(cbuf *out, const oai_lp_list *const ls[2], size_t field) {
  bool any = false;
  for (int k = 0; k < 2; k++) {
    const cbuf *c = ls[k] ? (const cbuf *)((const char *)ls[k] + field) : NULL;
    if (!c || !ls[k]->n || !c->data) continue;
    if (any) cbuf_puts(out, ",");
    cbuf_put(out, c->data, c->len);
    any = true;
  }
}

void oai_lp_list_write(cbuf *out, const oai_lp_list *a, const oai_lp_list *b, int *off) {
  const oai_lp_list *const ls[2] = {a, b};
  cbuf_puts(out, "{\"tokens\":[");
  put_part(out, ls, offsetof(oai_lp_list, tokens));
  cbuf_puts(out, "],\"token_logprobs\":[");
  put_part(out, ls, offsetof(oai_lp_list, values));
  cbuf_puts(out, "],\"top_logprobs\":[");
  put_part(out, ls, offsetof(oai_lp_list, tops));
  cbuf_puts(out, "],\"text_offset\":[");
  bool any = false;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; ls[k] && i < ls[k]->n; i++) {
      cbuf_printf(out, any ? ",%d" : "%d", *off);
      any = true;
      *off += ls[k]->chars[i];
    }
  cbuf_puts(out, "]}");
}

bool oai_lp_list_failed(const oai_lp_list *l) {
  return l->oom || l->tokens.oom || l->values.oom || l->tops.oom;
}

void oai_lp_list_clear(oai_lp_list *l) {
  l->tokens.len = l->values.len = l->tops.len = 0;
  l->tokens.oom = l->values.oom = l->tops.oom = false;
  l->n = 0;
  l->n_top = -1;
  l->oom = false;
}

void oai_lp_list_free(oai_lp_list *l) {
  cbuf_free(&l->tokens);
  cbuf_free(&l->values);
  cbuf_free(&l->tops);
  free(l->chars);
  memset(l, 0, sizeof *l);
  l->n_top = -1;
}
