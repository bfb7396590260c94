/* pbtxt.c: protobuf text format -> generic tree (see pbtxt.h for the accepted syntax).
 *
 * Structure: a lexer (one token of look-ahead, positions tracked per byte) and an
 * iterative parser driven by an explicit stack of frames. A frame is either a message
 * being filled (closed by '}' or '>', or end of input for the root) or a list `[ ... ]`
 * whose elements become repeated fields of the enclosing message.
 *
 * Invariants:
 *  - no byte at or past text+len is ever read (the lexer checks `pos < len` before every
 *    access; the input need not be NUL-terminated and may contain NUL bytes);
 *  - every node is linked into the tree as soon as it is created, so a single
 *    pbtxt_free(root) on any error path releases everything;
 *  - the stack never exceeds PBTXT_MAX_DEPTH message frames (+ as many list frames).
 */
#include "core/hex.h"
#include "repo/pbtxt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lexer -------------------------------------------------------------------------- */

typedef enum tok_kind { T_EOF, T_IDENT, T_INT, T_FLOAT, T_STRING, T_PUNCT, T_ERROR } tok_kind;

typedef struct token {
  tok_kind kind;
  int line, col;
  const char *start; /* source text of the token */
  size_t slen;
  char punct;        /* T_PUNCT */
  char *str;         /* T_STRING: decoded bytes (owned by the token until taken) */
  size_t len;
  bool neg;
  uint64_t mag;
  double f;
} token;

typedef struct lexer {
  const char *path, *text;
  size_t len, pos;
  int line, col;
  token peek;
  bool has_peek;
  cinfer_status *err;
} lexer;

static cinfer_status *err_at(const char *path, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static cinfer_status *err_at(const char *path, int line, int col, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return cinfer_status_new(CINFER_INVALID_ARG, "%s:%d:%d: %s", path, line, col, msg);
}

static void advance(lexer *lx) {
  if (lx->pos >= lx->len) return;
  if (lx->text[lx->pos] == '\n') {
    lx->line++;
    lx->col = 1;
  } else {
    lx->col++;
  }
  lx->pos++;
}

static int cur(const lexer *lx) { return lx->pos < lx->len ? (unsigned char)lx->text[lx->pos] : -1; }
static int at(const lexer *lx, size_t k) {
  return lx->pos + k < lx->len ? (unsigned char)lx->text[lx->pos + k] : -1;
}
static bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c); }
static bool is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void skip_space(lexer *lx) {
  for (;;) {
    int c = cur(lx);
    if (is_space(c)) {
      advance(lx);
    } else if (c == '#') {
      while (cur(lx) != -1 && cur(lx) != '\n') advance(lx);
    } else {
      return;
    }
  }
}

/* Printable description of a character for messages. */
static const char *char_desc(int c, char buf[16]) {
  if (c == -1) return "end of input";
  if (c >= 0x20 && c < 0x7f) snprintf(buf, 16, "'%c'", c);
  else snprintf(buf, 16, "'\\x%02x'", c);
  return buf;
}

/* Decodes one quoted literal starting at the quote; appends bytes to *buf. */
static bool lex_string(lexer *lx, char **buf, size_t *blen, size_t *bcap) {
  int q = cur(lx), sline = lx->line, scol = lx->col;
  advance(lx);
  for (;;) {
    int c = cur(lx);
    if (c == -1 || c == '\n') {
      lx->err = err_at(lx->path, sline, scol, "unterminated string (missing closing %c)", q);
      return false;
    }
    if (c == q) {
      advance(lx);
      return true;
    }
    int byte = c;
    if (c == '\\') {
      int eline = lx->line, ecol = lx->col;
      advance(lx);
      int e = cur(lx);
      switch (e) {
        case 'n': byte = '\n'; advance(lx); break;
        case 't': byte = '\t'; advance(lx); break;
        case 'r': byte = '\r'; advance(lx); break;
        case 'a': byte = '\a'; advance(lx); break;
        case 'b': byte = '\b'; advance(lx); break;
        case 'f': byte = '\f'; advance(lx); break;
        case 'v': byte = '\v'; advance(lx); break;
        case '\\': case '\'': case '"': case '?': byte = e; advance(lx); break;
        case 'x': case 'X': {
          advance(lx);
          int v = 0, n = 0;
          while (n < 2 && hex_digit((unsigned char)(cur(lx))) >= 0) {
            v = v * 16 + hex_digit((unsigned char)(cur(lx)));
            advance(lx);
            n++;
          }
          if (n == 0) {
            lx->err = err_at(lx->path, eline, ecol, "invalid escape '\\x' without hex digits in string");
            return false;
          }
          byte = v;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int v = 0, n = 0;
            while (n < 3 && cur(lx) >= '0' && cur(lx) <= '7') {
              v = v * 8 + (cur(lx) - '0');
              advance(lx);
              n++;
            }
            if (v > 255) {
              lx->err = err_at(lx->path, eline, ecol, "octal escape out of range in string");
              return false;
            }
            byte = v;
          } else {
            char d[16];
            lx->err = err_at(lx->path, eline, ecol, "invalid escape '\\' followed by %s in string",
                             char_desc(e, d));
            return false;
          }
      }
    } else {
      advance(lx);
    }
    if (*blen + 2 > *bcap) {
      size_t ncap = *bcap ? *bcap * 2 : 32;
      char *nb = realloc(*buf, ncap);
      if (!nb) {
        lx->err = cinfer_status_oom(NULL);
        return false;
      }
      *buf = nb;
      *bcap = ncap;
    }
    (*buf)[(*blen)++] = (char)byte;
    (*buf)[*blen] = '\0';
  }
}

static bool classify_number(lexer *lx, token *t, const char *s, size_t n, bool neg) {
  char text[128];
  t->neg = neg;
  if (n == 0 || n >= sizeof text) goto bad;
  memcpy(text, s, n);
  text[n] = '\0';
  if (n > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    uint64_t v = 0;
    for (size_t i = 2; i < n; i++) {
      int h = hex_digit((unsigned char)((unsigned char)text[i]));
      if (h < 0) goto bad;
      if (v > (UINT64_MAX >> 4)) goto range;
      v = v * 16 + (uint64_t)h;
    }
    t->kind = T_INT;
    t->mag = v;
    t->f = neg ? -(double)v : (double)v;
    return true;
  }
  bool is_float = false;
  for (size_t i = 0; i < n; i++)
    if (text[i] == '.' || text[i] == 'e' || text[i] == 'E') is_float = true;
  if (text[n - 1] == 'f' || text[n - 1] == 'F') {
    is_float = true;
    text[--n] = '\0';
    if (n == 0) goto bad;
  }
  if (is_float) {
    for (size_t i = 0; i < n; i++) {
      char c = text[i];
      if (!(is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) goto bad;
    }
    char *end = NULL;
    errno = 0;
    double d = strtod(text, &end);
    if (end != text + n) goto bad;
    t->kind = T_FLOAT;
    t->f = neg ? -d : d;
    return true;
  }
  uint64_t v = 0;
  unsigned base = (text[0] == '0' && n > 1) ? 8 : 10;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)(text[i] - '0');
    if (!is_digit(text[i]) || d >= base) goto bad;
    if (v > (UINT64_MAX - d) / base) goto range;
    v = v * base + d;
  }
  t->kind = T_INT;
  t->mag = v;
  t->f = neg ? -(double)v : (double)v;
  return true;
bad:
  lx->err = err_at(lx->path, t->line, t->col, "invalid number '%s%.*s'", neg ? "-" : "",
                   (int)(n > 64 ? 64 : n), s);
  return false;
range:
  lx->err = err_at(lx->path, t->line, t->col, "integer '%s%.*s' is out of range", neg ? "-" : "",
                   (int)(n > 64 ? 64 : n), s);
  return false;
}

/* Reads the next token into *t. On error t->kind is T_ERROR and lx->err is set. */
static void lex_next(lexer *lx, token *t) {
  memset(t, 0, sizeof *t);
  skip_space(lx);
  t->line = lx->line;
  t->col = lx->col;
  t->start = lx->text + lx->pos;
  int c = cur(lx);
  if (c == -1) {
    t->kind = T_EOF;
    return;
  }
  if (is_ident_start(c)) {
    size_t s = lx->pos;
    while (is_ident_char(cur(lx))) advance(lx);
    t->kind = T_IDENT;
    t->slen = lx->pos - s;
    return;
  }
  bool neg = false;
  if (c == '-') {
    int n1 = at(lx, 1);
    if (!(is_digit(n1) || n1 == '.' || is_ident_start(n1))) {
      char d[16];
      lx->err = err_at(lx->path, t->line, t->col, "expected a number after '-', found %s",
                       char_desc(n1, d));
      t->kind = T_ERROR;
      return;
    }
    neg = true;
    advance(lx);
    c = cur(lx);
    if (is_ident_start(c)) { /* -inf, -infinity, -nan */
      size_t s = lx->pos;
      while (is_ident_char(cur(lx))) advance(lx);
      size_t n = lx->pos - s;
      const char *w = lx->text + s;
      if ((n == 3 && strncasecmp(w, "inf", 3) == 0) || (n == 8 && strncasecmp(w, "infinity", 8) == 0)) {
        t->kind = T_FLOAT;
        t->f = -INFINITY;
      } else if (n == 3 && strncasecmp(w, "nan", 3) == 0) {
        t->kind = T_FLOAT;
        t->f = NAN;
      } else {
        lx->err = err_at(lx->path, t->line, t->col, "invalid number '-%.*s'", (int)(n > 64 ? 64 : n), w);
        t->kind = T_ERROR;
        return;
      }
      t->slen = lx->pos - (size_t)(t->start - lx->text);
      return;
    }
  }
  if (is_digit(c) || (c == '.' && is_digit(at(lx, 1)))) {
    size_t s = lx->pos;
    for (;;) {
      int d = cur(lx);
      if (is_ident_char(d) || d == '.') {
        advance(lx);
      } else if ((d == '+' || d == '-') && lx->pos > s &&
                 (lx->text[lx->pos - 1] == 'e' || lx->text[lx->pos - 1] == 'E') &&
                 !(lx->pos - s > 1 && (lx->text[s + 1] == 'x' || lx->text[s + 1] == 'X'))) {
        advance(lx);
      } else {
        break;
      }
    }
    t->slen = lx->pos - (size_t)(t->start - lx->text);
    if (!classify_number(lx, t, lx->text + s, lx->pos - s, neg)) t->kind = T_ERROR;
    return;
  }
  if (c == '"' || c == '\'') {
    char *buf = NULL;
    size_t blen = 0, bcap = 0;
    if (!lex_string(lx, &buf, &blen, &bcap)) {
      free(buf);
      t->kind = T_ERROR;
      return;
    }
    if (!buf) buf = calloc(1, 1);
    if (!buf) {
      lx->err = cinfer_status_oom(NULL);
      t->kind = T_ERROR;
      return;
    }
    t->kind = T_STRING;
    t->str = buf;
    t->len = blen;
    return;
  }
  if (c != 0 && strchr("{}<>[]:,;", c)) {
    advance(lx);
    t->kind = T_PUNCT;
    t->punct = (char)c;
    t->slen = 1;
    return;
  }
  char d[16];
  lx->err = err_at(lx->path, t->line, t->col, "unexpected character %s", char_desc(c, d));
  t->kind = T_ERROR;
}

static void next(lexer *lx, token *t) {
  if (lx->has_peek) {
    *t = lx->peek;
    lx->has_peek = false;
  } else {
    lex_next(lx, t);
  }
}

static const token *peek(lexer *lx) {
  if (!lx->has_peek) {
    lex_next(lx, &lx->peek);
    lx->has_peek = true;
  }
  return &lx->peek;
}

static const char *tok_desc(const token *t, char *buf, size_t n) {
  switch (t->kind) {
    case T_EOF: return "end of input";
    case T_IDENT: snprintf(buf, n, "'%.*s'", (int)(t->slen > 64 ? 64 : t->slen), t->start); return buf;
    case T_INT: case T_FLOAT: snprintf(buf, n, "number '%.*s'", (int)(t->slen > 64 ? 64 : t->slen), t->start); return buf;
    case T_STRING: return "a string";
    case T_PUNCT: snprintf(buf, n, "'%c'", t->punct); return buf;
    default: return "an invalid token";
  }
}

/* ---- tree --------------------------------------------------------------------------- */

const char *pbtxt_kind_name(pbtxt_kind k) {
  switch (k) {
    case PBTXT_MESSAGE: return "message";
    case PBTXT_IDENT: return "identifier";
    case PBTXT_INT: return "integer";
    case PBTXT_FLOAT: return "float";
    case PBTXT_STRING: return "string";
  }
  return "?";
}

void pbtxt_free(pbtxt_node *n) {
  if (!n) return;
  for (size_t i = 0; i < n->n_children; i++) pbtxt_free(n->children[i]);
  free(n->children);
  free(n->name);
  free(n->str);
  free(n);
}

typedef struct parser {
  lexer lx;
  size_t n_nodes;
} parser;

/* Creates a child of parent named name[0..nlen) and links it in. NULL + p->lx.err on failure. */
static pbtxt_node *add_child(parser *p, pbtxt_node *parent, const char *name, size_t nlen, int line,
                             int col) {
  if (++p->n_nodes > PBTXT_MAX_NODES) {
    p->lx.err = err_at(p->lx.path, line, col, "too many fields (limit %u)", PBTXT_MAX_NODES);
    return NULL;
  }
  if (parent->n_children == parent->cap_children) {
    size_t ncap = parent->cap_children ? parent->cap_children * 2 : 4;
    pbtxt_node **nc = realloc(parent->children, ncap * sizeof *nc);
    if (!nc) goto oom;
    parent->children = nc;
    parent->cap_children = ncap;
  }
  pbtxt_node *n = calloc(1, sizeof *n);
  if (!n) goto oom;
  n->name = strndup(name, nlen);
  if (!n->name) {
    free(n);
    goto oom;
  }
  n->line = line;
  n->col = col;
  parent->children[parent->n_children++] = n;
  return n;
oom:
  p->lx.err = cinfer_status_oom(NULL);
  return NULL;
}

static bool is_scalar_tok(const token *t) {
  return t->kind == T_IDENT || t->kind == T_INT || t->kind == T_FLOAT || t->kind == T_STRING;
}

/* Fills n from scalar token t (taking t->str), concatenating adjacent string literals. */
static bool set_scalar(parser *p, pbtxt_node *n, token *t) {
  n->vline = t->line;
  n->vcol = t->col;
  switch (t->kind) {
    case T_IDENT:
      n->kind = PBTXT_IDENT;
      n->str = strndup(t->start, t->slen);
      n->len = t->slen;
      break;
    case T_INT:
    case T_FLOAT:
      n->kind = t->kind == T_INT ? PBTXT_INT : PBTXT_FLOAT;
      n->neg = t->neg;
      n->mag = t->mag;
      n->f = t->f;
      n->str = strndup(t->start, t->slen);
      n->len = t->slen;
      break;
    case T_STRING:
      n->kind = PBTXT_STRING;
      n->str = t->str;
      n->len = t->len;
      t->str = NULL;
      for (;;) {
        const token *pk = peek(&p->lx);
        if (pk->kind == T_ERROR) return false;
        if (pk->kind != T_STRING) break;
        token s;
        next(&p->lx, &s);
        char *joined = realloc(n->str, n->len + s.len + 1);
        if (!joined) {
          free(s.str);
          goto oom;
        }
        memcpy(joined + n->len, s.str, s.len + 1);
        n->str = joined;
        n->len += s.len;
        free(s.str);
      }
      return true;
    default:
      return false;
  }
  if (!n->str) goto oom;
  return true;
oom:
  p->lx.err = cinfer_status_oom(NULL);
  return false;
}

typedef struct frame {
  pbtxt_node *msg;   /* message receiving fields (for a list: the enclosing message) */
  char close;        /* '}' '>' for messages, ']' for lists, 0 for the root */
  bool list;
  int state;         /* lists: 0 just opened, 1 element required, 2 after an element.
                        messages: 1 when a separator may follow the last field */
  pbtxt_node *list_proto; /* lists: carries name and position for the elements */
} frame;

cinfer_status *pbtxt_parse(const char *path, const char *text, size_t len, pbtxt_node **out) {
  *out = NULL;
  if (!path) path = "<input>";
  if (len > PBTXT_MAX_INPUT)
    return err_at(path, 1, 1, "input is too large (%zu bytes, limit %u)", len, PBTXT_MAX_INPUT);
  if (!text && len) return err_at(path, 1, 1, "no input");
  parser p = {.lx = {.path = path, .text = text ? text : "", .len = len, .line = 1, .col = 1}};
  pbtxt_node *root = calloc(1, sizeof *root);
  if (!root || !(root->name = strdup(""))) {
    free(root);
    return cinfer_status_oom(NULL);
  }
  root->line = root->col = root->vline = root->vcol = 1;

  frame stack[2 * PBTXT_MAX_DEPTH + 2];
  int sp = 0, depth = 0;
  stack[0] = (frame){.msg = root};
  char buf[96];
  token t = {0};

  for (;;) {
    frame *f = &stack[sp];
    free(t.str);
    t.str = NULL;
    next(&p.lx, &t);
    if (t.kind == T_ERROR) goto fail;

    if (f->list) {
      const pbtxt_node *lp = f->list_proto;
      if (t.kind == T_PUNCT && t.punct == ']' && f->state != 1) {
        pbtxt_free(f->list_proto);
        sp--;
        stack[sp].state = 1;
        continue;
      }
      if (f->state == 2) {
        if (t.kind == T_PUNCT && t.punct == ',') {
          f->state = 1;
          continue;
        }
        p.lx.err = err_at(path, t.line, t.col, "expected ',' or ']' in list for field '%s', found %s",
                          lp->name, tok_desc(&t, buf, sizeof buf));
        goto fail;
      }
      if (t.kind == T_PUNCT && (t.punct == '{' || t.punct == '<')) {
        if (depth >= PBTXT_MAX_DEPTH) {
          p.lx.err = err_at(path, t.line, t.col, "messages nested deeper than %d levels", PBTXT_MAX_DEPTH);
          goto fail;
        }
        pbtxt_node *m = add_child(&p, f->msg, lp->name, strlen(lp->name), lp->line, lp->col);
        if (!m) goto fail;
        m->kind = PBTXT_MESSAGE;
        m->in_list = true;
        m->vline = t.line;
        m->vcol = t.col;
        f->state = 2;
        stack[++sp] = (frame){.msg = m, .close = t.punct == '{' ? '}' : '>'};
        depth++;
        continue;
      }
      if (is_scalar_tok(&t)) {
        pbtxt_node *v = add_child(&p, f->msg, lp->name, strlen(lp->name), lp->line, lp->col);
        if (!v || !set_scalar(&p, v, &t)) goto fail;
        v->in_list = true;
        f->state = 2;
        continue;
      }
      p.lx.err = err_at(path, t.line, t.col, "expected a value in list for field '%s', found %s",
                        lp->name, tok_desc(&t, buf, sizeof buf));
      goto fail;
    }

    /* message frame */
    if (t.kind == T_EOF) {
      if (f->close == 0) break;
      p.lx.err = err_at(path, t.line, t.col,
                        "unexpected end of input: expected '%c' to close '%s' opened at %d:%d",
                        f->close, f->msg->name, f->msg->vline, f->msg->vcol);
      goto fail;
    }
    if (t.kind == T_PUNCT && f->close && t.punct == f->close) {
      sp--;
      depth--;
      stack[sp].state = stack[sp].list ? 2 : 1;
      continue;
    }
    if (t.kind == T_PUNCT && (t.punct == ',' || t.punct == ';') && f->state == 1) {
      f->state = 0;
      continue;
    }
    if (t.kind != T_IDENT) {
      if (t.kind == T_PUNCT && (t.punct == '}' || t.punct == '>' || t.punct == ']')) {
        if (f->close)
          p.lx.err = err_at(path, t.line, t.col, "expected '%c' to close '%s' opened at %d:%d, found '%c'",
                            f->close, f->msg->name, f->msg->vline, f->msg->vcol, t.punct);
        else
          p.lx.err = err_at(path, t.line, t.col, "unexpected '%c' outside any message", t.punct);
      } else {
        p.lx.err = err_at(path, t.line, t.col, "expected a field name, found %s",
                          tok_desc(&t, buf, sizeof buf));
      }
      goto fail;
    }
    f->state = 0;
    token name = t;
    token t2;
    next(&p.lx, &t2);
    if (t2.kind == T_ERROR) goto fail;
    bool colon = false;
    if (t2.kind == T_PUNCT && t2.punct == ':') {
      colon = true;
      next(&p.lx, &t2);
      if (t2.kind == T_ERROR) goto fail;
    }
    if (t2.kind == T_PUNCT && (t2.punct == '{' || t2.punct == '<')) {
      if (depth >= PBTXT_MAX_DEPTH) {
        p.lx.err = err_at(path, t2.line, t2.col, "messages nested deeper than %d levels", PBTXT_MAX_DEPTH);
        goto fail;
      }
      pbtxt_node *m = add_child(&p, f->msg, name.start, name.slen, name.line, name.col);
      if (!m) goto fail;
      m->kind = PBTXT_MESSAGE;
      m->vline = t2.line;
      m->vcol = t2.col;
      stack[++sp] = (frame){.msg = m, .close = t2.punct == '{' ? '}' : '>'};
      depth++;
      continue;
    }
    if (t2.kind == T_PUNCT && t2.punct == '[') {
      if (sp + 1 >= (int)(sizeof stack / sizeof stack[0])) {
        p.lx.err = err_at(path, t2.line, t2.col, "messages nested deeper than %d levels", PBTXT_MAX_DEPTH);
        goto fail;
      }
      /* The list's element name/position travel in a scratch node owned by the frame. */
      pbtxt_node *proto = calloc(1, sizeof *proto);
      if (!proto || !(proto->name = strndup(name.start, name.slen))) {
        free(proto);
        p.lx.err = cinfer_status_oom(NULL);
        goto fail;
      }
      proto->line = name.line;
      proto->col = name.col;
      /* The frame owns the scratch node; it is freed when the list closes or on error. */
      stack[++sp] = (frame){.msg = f->msg, .close = ']', .list = true, .list_proto = proto};
      continue;
    }
    if (colon && is_scalar_tok(&t2)) {
      pbtxt_node *v = add_child(&p, f->msg, name.start, name.slen, name.line, name.col);
      if (!v || !set_scalar(&p, v, &t2)) {
        free(t2.str);
        goto fail;
      }
      f->state = 1;
      continue;
    }
    free(t2.str);
    if (colon)
      p.lx.err = err_at(path, t2.line, t2.col, "expected a value after ':' for field '%.*s', found %s",
                        (int)(name.slen > 64 ? 64 : name.slen), name.start, tok_desc(&t2, buf, sizeof buf));
    else
      p.lx.err = err_at(path, t2.line, t2.col, "expected ':' or '{' after field name '%.*s'",
                        (int)(name.slen > 64 ? 64 : name.slen), name.start);
    goto fail;
  }
  free(t.str);
  if (p.lx.has_peek) free(p.lx.peek.str);
  *out = root;
  return NULL;

fail:
  free(t.str);
  if (p.lx.has_peek) free(p.lx.peek.str);
  for (int i = sp; i >= 0; i--)
    if (stack[i].list) pbtxt_free(stack[i].list_proto);
  pbtxt_free(root);
  return p.lx.err ? p.lx.err : cinfer_status_new(CINFER_INTERNAL, "%s: parse failed", path);
}

/* ---- conversions -------------------------------------------------------------------- */

bool pbtxt_as_int64(const pbtxt_node *n, int64_t *out) {
  if (!n || n->kind != PBTXT_INT) return false;
  if (n->neg) {
    if (n->mag > (uint64_t)INT64_MAX + 1) return false;
    *out = n->mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)n->mag;
  } else {
    if (n->mag > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)n->mag;
  }
  return true;
}

bool pbtxt_as_uint64(const pbtxt_node *n, uint64_t *out) {
  if (!n || n->kind != PBTXT_INT) return false;
  if (n->neg && n->mag != 0) return false;
  *out = n->mag;
  return true;
}

bool pbtxt_as_double(const pbtxt_node *n, double *out) {
  if (!n) return false;
  if (n->kind == PBTXT_INT || n->kind == PBTXT_FLOAT) {
    *out = n->f;
    return true;
  }
  if (n->kind == PBTXT_IDENT) {
    if (!strcasecmp(n->str, "inf") || !strcasecmp(n->str, "infinity")) {
      *out = INFINITY;
      return true;
    }
    if (!strcasecmp(n->str, "nan")) {
      *out = NAN;
      return true;
    }
  }
  return false;
}

bool pbtxt_as_bool(const pbtxt_node *n, bool *out) {
  if (!n) return false;
  if (n->kind == PBTXT_IDENT) {
    const char *s = n->str;
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "t")) {
      *out = true;
      return true;
    }
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "f")) {
      *out = false;
      return true;
    }
    return false;
  }
  if (n->kind == PBTXT_INT && !n->neg && n->mag <= 1) {
    *out = n->mag == 1;
    return true;
  }
  return false;
}

const pbtxt_node *pbtxt_child(const pbtxt_node *msg, const char *name) {
  if (!msg) return NULL;
  for (size_t i = 0; i < msg->n_children; i++)
    if (!strcmp(msg->children[i]->name, name)) return msg->children[i];
  return NULL;
}
