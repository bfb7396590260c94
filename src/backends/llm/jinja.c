/* jinja.c: see jinja.h. A template is split into text and tags, parsed into a tree of
 * statements and expressions (names, filters and tests are checked at compile time), and
 * rendered by walking the tree with dynamically typed values. Every allocation of a compile
 * or a render is kept in a list and freed at its end, so no value needs an owner. */
#include "backends/llm/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"

/* ---- allocation lists ---- */
typedef struct { void **p; size_t n, cap; bool oom; } allocs;
static void *amalloc(allocs *a, size_t n) {
  if (a->oom) return NULL;
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 64;
    void **np = realloc(a->p, nc * sizeof *np);
    if (!np) {
      a->oom = true;
      return NULL;
    }
    a->p = np;
    a->cap = nc;
  }
  void *m = calloc(1, n ? n : 1);
  if (!m) {
    a->oom = true;
    return NULL;
  }
  return a->p[a->n++] = m;
}
static void afree_all(allocs *a) {
  for (size_t i = 0; i < a->n; i++) free(a->p[i]);
  free(a->p);
  memset(a, 0, sizeof *a);
}

/* ---- values ---- */
typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLT, V_STR, V_LIST, V_DICT, V_FUNC } vtype;
typedef struct val val;
typedef struct vlist vlist;
typedef struct vdict vdict;
struct val {
  vtype t;
  union {
    bool b;
    long long i;
    double f;
    struct { const char *p; size_t n; } s;
    vlist *l;
    vdict *d;
    struct { const char *name; val *self; } fn; /* a builtin function or a bound method */
  } u;
};
struct vlist { val *v; size_t n, cap; };
struct vdict { const char **k; size_t *kn; val *v; size_t n, cap; };

/* ---- syntax tree ---- */
enum { X_LIT, X_NAME, X_ATTR, X_INDEX, X_SLICE, X_CALL, X_FILTER, X_TEST, X_NOT, X_NEG, X_BIN, X_COND, X_LIST, X_DICT };
enum { OP_OR, OP_AND, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN, OP_ADD, OP_SUB, OP_CAT, OP_MUL,
       OP_DIV, OP_FDIV, OP_MOD };
typedef struct expr expr;
struct expr {
  int kind, op, line;
  val lit;
  const char *name; /* X_NAME, X_ATTR, X_FILTER, X_TEST */
  expr *a, *b, *c;
  expr **args;       /* X_CALL / X_FILTER / X_TEST args (X_FILTER: after the subject), X_LIST, X_DICT (k, v pairs) */
  const char **kw;   /* keyword names (NULL for positional) */
  int nargs;
  bool neg;          /* X_TEST: is not */
};

enum { N_TEXT, N_OUT, N_IF, N_FOR, N_SET };
typedef struct node node;
struct node {
  int kind, line;
  node *next;
  const char *text; size_t len;
  expr *e, *cond;
  node *body, *else_body;
  const char *var, *var2, *attr;
};

struct llm_jinja {
  allocs mem;
  node *root;
};

/* ---- compiler ---- */
typedef struct {
  const char *src, *end;
  allocs *mem;
  cinfer_status *err;
  /* parts */
  int kind;            /* 0 text, 1 expr, 2 stmt, 3 end */
  const char *p, *q;   /* the part's content */
  int line;
  const char *cur;     /* scan position */
  bool strip_next;     /* '-' at the end of the previous tag */
  bool trim_nl;        /* trim_blocks: drop one newline after the previous block tag */
  /* expression lexer over [p, q) */
  const char *ep;
  int tok;             /* token kinds below */
  const char *tp; size_t tn;
  double tnum; bool tint;
  char *tstr; size_t tstrn;
} cparse;

enum { T_END, T_NAME, T_STR, T_NUM, T_OP };

static int line_of(const cparse *c, const char *at) {
  int l = 1;
  for (const char *s = c->src; s < at && s < c->end; s++) l += *s == '\n';
  return l;
}

static void cerr(cparse *c, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cerr(cparse *c, const char *at, const char *fmt, ...) {
  if (c->err) return;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->err = cinfer_status_new(CINFER_INVALID_ARG, "chat template: line %d: %s", line_of(c, at), msg);
}

static char *cstrdup(cparse *c, const char *p, size_t n) {
  char *s = amalloc(c->mem, n + 1);
  if (s) memcpy(s, p, n);
  return s;
}

/* The next part of the template: text (with whitespace control applied), or a tag's inside. */
static void next_part(cparse *c) {
  if (c->cur >= c->end) {
    c->kind = 3;
    return;
  }
  const char *t = c->cur;
  /* find the next tag start */
  const char *tag = NULL;
  for (const char *s = t; s + 1 < c->end; s++)
    if (s[0] == '{' && (s[1] == '{' || s[1] == '%' || s[1] == '#')) {
      tag = s;
      break;
    }
  if (tag != t) { /* text up to the tag */
    const char *te = tag ? tag : c->end;
    const char *tb = t;
    if (c->strip_next) while (tb < te && strchr(" \t\r\n", *tb)) tb++;
    else if (c->trim_nl) {
      if (tb < te && *tb == '\n') tb++;
      else if (tb + 1 < te && tb[0] == '\r' && tb[1] == '\n') tb += 2;
    }
    if (tag) {
      bool minus = tag + 2 < c->end && tag[2] == '-', plus = tag + 2 < c->end && tag[2] == '+';
      if (minus) {
        while (te > tb && strchr(" \t\r\n", te[-1])) te--;
      } else if (tag[1] != '{' && !plus) { /* lstrip_blocks: blanks from the line start */
        const char *ls = te;
        while (ls > tb && (ls[-1] == ' ' || ls[-1] == '\t')) ls--;
        if (ls == c->src || ls[-1] == '\n') te = ls;
      }
    }
    c->strip_next = c->trim_nl = false;
    c->cur = tag ? tag : c->end;
    c->kind = 0;
    c->p = tb;
    c->q = te;
    c->line = line_of(c, t);
    return;
  }
  /* a tag */
  char open = tag[1];
  char close = open == '{' ? '}' : open == '%' ? '%' : '#';
  const char *in = tag + 2;
  if (in < c->end && (*in == '-' || *in == '+')) in++;
  const char *e = NULL;
  for (const char *s = in; s + 1 < c->end; s++) {
    if (open != '#' && (*s == '"' || *s == '\'')) { /* skip string literals */
      char qch = *s++;
      while (s < c->end && *s != qch) s += *s == '\\' ? 2 : 1;
      if (s >= c->end) break;
      continue;
    }
    if (s[0] == close && s[1] == '}') {
      e = s;
      break;
    }
  }
  if (!e) {
    cerr(c, tag, "unterminated '{%c'", open);
    c->kind = 3;
    return;
  }
  const char *ie = e;
  bool strip_after = ie > in && ie[-1] == '-';
  if (strip_after || (ie > in && ie[-1] == '+')) ie--;
  c->cur = e + 2;
  c->strip_next = strip_after;
  c->trim_nl = !strip_after && open != '{';
  c->line = line_of(c, tag);
  if (open == '#') {
    c->kind = 0; /* a comment is empty text */
    c->p = c->q = e;
    return;
  }
  c->kind = open == '{' ? 1 : 2;
  c->p = in;
  c->q = ie;
}

/* ---- expression lexer ---- */
static void lex(cparse *c) {
  const char *s = c->ep;
  while (s < c->q && strchr(" \t\r\n", *s)) s++;
  c->tp = s;
  if (s >= c->q) {
    c->tok = T_END;
    c->ep = s;
    return;
  }
  char ch = *s;
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
    while (s < c->q && ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) s++;
    c->tok = T_NAME;
  } else if (ch >= '0' && ch <= '9') {
    char *e;
    c->tnum = strtod(s, &e);
    c->tint = true;
    for (const char *k = s; k < e; k++)
      if (*k == '.' || *k == 'e' || *k == 'E') c->tint = false;
    s = e > c->q ? c->q : e;
    c->tok = T_NUM;
  } else if (ch == '"' || ch == '\'') {
    const char *b = ++s;
    cbuf o = {0};
    while (s < c->q && *s != ch) {
      if (*s == '\\' && s + 1 < c->q) {
        s++;
        char x = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s == 'r' ? '\r' : *s;
        cbuf_put(&o, &x, 1);
        s++;
      } else {
        cbuf_put(&o, s++, 1);
      }
    }
    if (s >= c->q) {
      cerr(c, b - 1, "unterminated string");
      cbuf_free(&o);
      c->tok = T_END;
      return;
    }
    s++;
    c->tstr = cstrdup(c, o.data ? o.data : "", o.len);
    c->tstrn = o.len;
    if (o.oom) c->mem->oom = true;
    cbuf_free(&o);
    c->tok = T_STR;
  } else {
    static const char *const two[] = {"==", "!=", "<=", ">=", "//", NULL};
    c->tok = T_OP;
    s++;
    for (int i = 0; two[i]; i++)
      if (s < c->q && s[-1] == two[i][0] && *s == two[i][1]) {
        s++;
        break;
      }
  }
  c->tn = (size_t)(s - c->tp);
  c->ep = s;
}

static bool is_op(const cparse *c, const char *op) {
  return c->tok == T_OP && c->tn == strlen(op) && !memcmp(c->tp, op, c->tn);
}
static bool is_kw(const cparse *c, const char *kw) {
  return c->tok == T_NAME && c->tn == strlen(kw) && !memcmp(c->tp, kw, c->tn);
}
static bool expect_op(cparse *c, const char *op) {
  if (!is_op(c, op)) {
    cerr(c, c->tp, "expected '%s'", op);
    return false;
  }
  lex(c);
  return true;
}

static expr *mk(cparse *c, int kind) {
  expr *e = amalloc(c->mem, sizeof *e);
  if (e) {
    e->kind = kind;
    e->line = c->line;
  }
  return e;
}

static const char *const filters[] = {"trim", "length", "count", "tojson", "upper", "lower", "title", "capitalize",
                                      "string", "int", "float", "first", "last", "join", "default", "d", "items",
                                      "list", "replace", "reverse", "round", "abs", "select", "reject", "map",
                                      "selectattr", "rejectattr", "unique", "sort", "indent", "safe", "e", "escape",
                                      NULL};
static const char *const tests[] = {"defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
                                    "true", "false", "mapping", "iterable", "sequence", "even", "odd", "equalto",
                                    "eq", "ne", "in", NULL};
static const char *const functions[] = {"raise_exception", "range", "namespace", "strftime_now", NULL};

static bool listed(const char *n, size_t len, const char *const *l) {
  for (; *l; l++)
    if (strlen(*l) == len && !memcmp(*l, n, len)) return true;
  return false;
}

static expr *parse_expr(cparse *c);

/* The items of an argument list or a list/dict literal, as many as the template has: grown
 * in the compile's allocations (the template frees them all). */
typedef struct { expr **v; const char **kw; int n, cap; } xlist;

static bool xpush(cparse *c, xlist *l, expr *e, const char *kw) {
  if (l->n == l->cap) {
    int nc = l->cap ? l->cap * 2 : 8;
    expr **nv = amalloc(c->mem, (size_t)nc * sizeof *nv);
    const char **nk = amalloc(c->mem, (size_t)nc * sizeof *nk);
    if (!nv || !nk) return false;
    if (l->n) {
      memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
      memcpy(nk, l->kw, (size_t)l->n * sizeof *nk);
    }
    l->v = nv, l->kw = nk, l->cap = nc;
  }
  l->v[l->n] = e;
  l->kw[l->n++] = kw;
  return true;
}

/* Moves the items into e (args, kw, nargs); args is never NULL. */
static bool xtake(cparse *c, xlist *l, expr *e) {
  if (!l->cap && (!(l->v = amalloc(c->mem, sizeof *l->v)) || !(l->kw = amalloc(c->mem, sizeof *l->kw))))
    return false;
  e->args = l->v;
  e->kw = l->kw;
  e->nargs = l->n;
  return true;
}

/* (args) after '(' was seen: positional and name=value. */
static bool parse_args(cparse *c, expr *e, int first_slot) {
  xlist l = {0};
  if (first_slot && !xpush(c, &l, e->a, NULL)) return false;
  lex(c); /* past '(' */
  while (!c->err && !is_op(c, ")")) {
    const char *kw = NULL;
    if (c->tok == T_NAME) { /* name=value? */
      const char *save = c->ep, *tp = c->tp;
      size_t tn = c->tn;
      lex(c);
      if (is_op(c, "=")) {
        kw = cstrdup(c, tp, tn);
        lex(c);
      } else {
        c->ep = save;
        c->tp = tp;
        c->tn = tn;
        c->tok = T_NAME;
      }
    }
    if (!xpush(c, &l, parse_expr(c), kw)) return false;
    if (is_op(c, ",")) lex(c);
    else if (!is_op(c, ")")) {
      cerr(c, c->tp, "expected ',' or ')' in an argument list");
      return false;
    }
  }
  if (c->err) return false;
  lex(c); /* past ')' */
  return xtake(c, &l, e);
}

static expr *parse_primary(cparse *c) {
  expr *e = NULL;
  if (c->err) return NULL;
  if (c->tok == T_NUM) {
    e = mk(c, X_LIT);
    if (e) {
      if (c->tint && c->tnum < 9.2e18) e->lit = (val){.t = V_INT, .u.i = (long long)c->tnum};
      else e->lit = (val){.t = V_FLT, .u.f = c->tnum};
    }
    lex(c);
  } else if (c->tok == T_STR) {
    e = mk(c, X_LIT);
    if (e) e->lit = (val){.t = V_STR, .u.s = {c->tstr, c->tstrn}};
    lex(c);
    while (e && c->tok == T_STR) { /* adjacent literals concatenate */
      char *j = amalloc(c->mem, e->lit.u.s.n + c->tstrn + 1);
      if (!j) return NULL;
      memcpy(j, e->lit.u.s.p, e->lit.u.s.n);
      memcpy(j + e->lit.u.s.n, c->tstr, c->tstrn);
      e->lit.u.s.p = j;
      e->lit.u.s.n += c->tstrn;
      lex(c);
    }
  } else if (c->tok == T_NAME) {
    if (is_kw(c, "true") || is_kw(c, "True") || is_kw(c, "false") || is_kw(c, "False")) {
      e = mk(c, X_LIT);
      if (e) e->lit = (val){.t = V_BOOL, .u.b = c->tp[0] == 't' || c->tp[0] == 'T'};
    } else if (is_kw(c, "none") || is_kw(c, "None")) {
      e = mk(c, X_LIT);
      if (e) e->lit = (val){.t = V_NONE};
    } else {
      e = mk(c, X_NAME);
      if (e) e->name = cstrdup(c, c->tp, c->tn);
    }
    lex(c);
  } else if (is_op(c, "(")) {
    lex(c);
    e = parse_expr(c);
    if (is_op(c, ",")) { /* a tuple: a list here */
      expr *t = mk(c, X_LIST);
      xlist items = {0};
      bool ok = t && xpush(c, &items, e, NULL);
      while (ok && !c->err && is_op(c, ",")) {
        lex(c);
        if (is_op(c, ")")) break;
        ok = xpush(c, &items, parse_expr(c), NULL);
      }
      if (!ok || !xtake(c, &items, t)) return NULL;
      e = t;
    }
    expect_op(c, ")");
  } else if (is_op(c, "[")) {
    e = mk(c, X_LIST);
    lex(c);
    xlist items = {0};
    while (e && !c->err && !is_op(c, "]")) {
      if (!xpush(c, &items, parse_expr(c), NULL)) return NULL;
      if (is_op(c, ",")) lex(c);
      else if (!is_op(c, "]")) cerr(c, c->tp, "expected ',' or ']'");
    }
    lex(c);
    if (!e || !xtake(c, &items, e)) return NULL;
  } else if (is_op(c, "{")) {
    e = mk(c, X_DICT);
    lex(c);
    xlist items = {0};
    while (e && !c->err && !is_op(c, "}")) {
      if (!xpush(c, &items, parse_expr(c), NULL)) return NULL;
      if (!expect_op(c, ":")) return NULL;
      if (!xpush(c, &items, parse_expr(c), NULL)) return NULL;
      if (is_op(c, ",")) lex(c);
      else if (!is_op(c, "}")) cerr(c, c->tp, "expected ',' or '}'");
    }
    lex(c);
    if (!e || !xtake(c, &items, e)) return NULL;
  } else {
    cerr(c, c->tp, c->tok == T_END ? "expected an expression" : "unexpected '%.*s'", (int)c->tn, c->tp);
    return NULL;
  }
  /* postfix: .attr, [index], [a:b], (call), |filter */
  for (;;) {
    if (!e || c->err) return e;
    if (is_op(c, ".")) {
      lex(c);
      if (c->tok != T_NAME) {
        cerr(c, c->tp, "expected a name after '.'");
        return NULL;
      }
      expr *a = mk(c, X_ATTR);
      if (!a) return NULL;
      a->a = e;
      a->name = cstrdup(c, c->tp, c->tn);
      lex(c);
      e = a;
    } else if (is_op(c, "[")) {
      lex(c);
      expr *lo = NULL, *hi = NULL;
      bool slice = false;
      if (!is_op(c, ":")) lo = parse_expr(c);
      if (is_op(c, ":")) {
        slice = true;
        lex(c);
        if (!is_op(c, "]") && !is_op(c, ":")) hi = parse_expr(c);
        if (is_op(c, ":")) {
          cerr(c, c->tp, "slice steps are not supported");
          return NULL;
        }
      }
      if (!expect_op(c, "]")) return NULL;
      expr *x = mk(c, slice ? X_SLICE : X_INDEX);
      if (!x) return NULL;
      x->a = e;
      x->b = lo;
      x->c = hi;
      e = x;
    } else if (is_op(c, "(")) {
      if (e->kind == X_NAME && !listed(e->name, strlen(e->name), functions)) {
        cerr(c, c->tp, "unsupported function '%s' (a macro or a global this renderer does not have)", e->name);
        return NULL;
      }
      expr *x = mk(c, X_CALL);
      if (!x) return NULL;
      x->a = e;
      if (!parse_args(c, x, 0)) return NULL;
      e = x;
    } else if (is_op(c, "|")) {
      lex(c);
      if (c->tok != T_NAME) {
        cerr(c, c->tp, "expected a filter name after '|'");
        return NULL;
      }
      if (!listed(c->tp, c->tn, filters)) {
        cerr(c, c->tp, "unsupported filter '%.*s'", (int)c->tn, c->tp);
        return NULL;
      }
      expr *x = mk(c, X_FILTER);
      if (!x) return NULL;
      x->name = cstrdup(c, c->tp, c->tn);
      x->a = e;
      lex(c);
      if (is_op(c, "(")) {
        if (!parse_args(c, x, 1)) return NULL;
      } else {
        x->args = amalloc(c->mem, sizeof *x->args);
        x->kw = amalloc(c->mem, sizeof *x->kw);
        if (!x->args || !x->kw) return NULL;
        x->args[0] = e;
        x->nargs = 1;
      }
      e = x;
    } else {
      return e;
    }
  }
}

static expr *parse_unary(cparse *c) {
  if (is_op(c, "-")) {
    lex(c);
    expr *e = mk(c, X_NEG);
    if (e) e->a = parse_unary(c);
    return e;
  }
  if (is_op(c, "+")) lex(c);
  return parse_primary(c);
}

static expr *bin(cparse *c, int op, expr *a, expr *b) {
  expr *e = mk(c, X_BIN);
  if (e) {
    e->op = op;
    e->a = a;
    e->b = b;
  }
  return e;
}

static expr *parse_mul(cparse *c) {
  expr *e = parse_unary(c);
  for (;;) {
    int op = is_op(c, "*") ? OP_MUL : is_op(c, "//") ? OP_FDIV : is_op(c, "/") ? OP_DIV : is_op(c, "%") ? OP_MOD : -1;
    if (op < 0 || c->err) return e;
    lex(c);
    e = bin(c, op, e, parse_unary(c));
  }
}
static expr *parse_add(cparse *c) {
  expr *e = parse_mul(c);
  for (;;) {
    int op = is_op(c, "+") ? OP_ADD : is_op(c, "-") ? OP_SUB : is_op(c, "~") ? OP_CAT : -1;
    if (op < 0 || c->err) return e;
    lex(c);
    e = bin(c, op, e, parse_mul(c));
  }
}
static expr *parse_cmp(cparse *c) {
  expr *e = parse_add(c);
  for (;;) {
    if (c->err) return e;
    int op = is_op(c, "==") ? OP_EQ : is_op(c, "!=") ? OP_NE : is_op(c, "<=") ? OP_LE : is_op(c, ">=") ? OP_GE
             : is_op(c, "<") ? OP_LT : is_op(c, ">") ? OP_GT : is_kw(c, "in") ? OP_IN : -1;
    if (op < 0 && is_kw(c, "not")) { /* not in */
      lex(c);
      if (!is_kw(c, "in")) {
        cerr(c, c->tp, "expected 'in' after 'not'");
        return NULL;
      }
      op = OP_NOTIN;
    }
    if (is_kw(c, "is")) {
      lex(c);
      expr *t = mk(c, X_TEST);
      if (!t) return NULL;
      if (is_kw(c, "not")) {
        t->neg = true;
        lex(c);
      }
      if (c->tok != T_NAME) {
        cerr(c, c->tp, "expected a test name after 'is'");
        return NULL;
      }
      if (!listed(c->tp, c->tn, tests)) {
        cerr(c, c->tp, "unsupported test '%.*s'", (int)c->tn, c->tp);
        return NULL;
      }
      t->name = cstrdup(c, c->tp, c->tn);
      t->a = e;
      lex(c);
      if (is_op(c, "(")) {
        if (!parse_args(c, t, 0)) return NULL;
      } else if (c->tok == T_STR || c->tok == T_NUM || (c->tok == T_NAME && !is_kw(c, "and") && !is_kw(c, "or") &&
                                                         !is_kw(c, "else") && !is_kw(c, "if"))) {
        /* `is equalto 3`, `is in xs` */
        t->args = amalloc(c->mem, sizeof *t->args);
        t->kw = amalloc(c->mem, sizeof *t->kw);
        if (!t->args || !t->kw) return NULL;
        t->args[0] = parse_add(c);
        t->nargs = 1;
      }
      e = t;
      continue;
    }
    if (op < 0) return e;
    lex(c);
    e = bin(c, op, e, parse_add(c));
  }
}
static expr *parse_not(cparse *c) {
  if (is_kw(c, "not")) {
    lex(c);
    expr *e = mk(c, X_NOT);
    if (e) e->a = parse_not(c);
    return e;
  }
  return parse_cmp(c);
}
static expr *parse_and(cparse *c) {
  expr *e = parse_not(c);
  while (!c->err && is_kw(c, "and")) {
    lex(c);
    e = bin(c, OP_AND, e, parse_not(c));
  }
  return e;
}
static expr *parse_or(cparse *c) {
  expr *e = parse_and(c);
  while (!c->err && is_kw(c, "or")) {
    lex(c);
    e = bin(c, OP_OR, e, parse_and(c));
  }
  return e;
}
static expr *parse_expr(cparse *c) {
  expr *e = parse_or(c);
  if (!c->err && is_kw(c, "if")) { /* a if cond else b */
    lex(c);
    expr *x = mk(c, X_COND);
    if (!x) return NULL;
    x->a = e;
    x->b = parse_or(c);
    if (is_kw(c, "else")) {
      lex(c);
      x->c = parse_expr(c);
    }
    e = x;
  }
  return e;
}

/* Whole-tag expression. */
static expr *tag_expr(cparse *c, const char *from) {
  c->ep = from;
  lex(c);
  expr *e = parse_expr(c);
  if (!c->err && c->tok != T_END) cerr(c, c->tp, "unexpected '%.*s'", (int)c->tn, c->tp);
  return e;
}

/* The statement keyword of the current stmt part, and where its arguments start. */
static size_t stmt_word(cparse *c, const char **args) {
  const char *s = c->p;
  while (s < c->q && strchr(" \t\r\n", *s)) s++;
  const char *w = s;
  while (s < c->q && ((*s >= 'a' && *s <= 'z') || *s == '_')) s++;
  *args = s;
  c->tp = w;
  return (size_t)(s - w);
}

static node *parse_block(cparse *c, const char *const *ends, int *which);

static node *mknode(cparse *c, int kind) {
  node *n = amalloc(c->mem, sizeof *n);
  if (n) {
    n->kind = kind;
    n->line = c->line;
  }
  return n;
}

/* Parses statements until one of `ends` (a stmt whose word is listed); *which = its index,
 * -1 at the end of the template. */
static node *parse_block(cparse *c, const char *const *ends, int *which) {
  node *head = NULL, **tail = &head;
  *which = -1;
  for (;;) {
    next_part(c);
    if (c->err || c->kind == 3) {
      if (!c->err && ends) cerr(c, c->end, "the template ends inside a block (expected '{%% %s %%}')", ends[0]);
      return head;
    }
    node *n = NULL;
    if (c->kind == 0) {
      if (c->q == c->p) continue;
      n = mknode(c, N_TEXT);
      if (n) n->text = c->p, n->len = (size_t)(c->q - c->p);
    } else if (c->kind == 1) {
      n = mknode(c, N_OUT);
      if (n) n->e = tag_expr(c, c->p);
    } else {
      const char *args;
      size_t wl = stmt_word(c, &args);
      const char *w = c->tp;
      for (int i = 0; ends && ends[i]; i++)
        if (strlen(ends[i]) == wl && !memcmp(ends[i], w, wl)) {
          *which = i;
          c->ep = args; /* the caller may parse the rest (elif's condition) */
          return head;
        }
      static const char *const stray[] = {"endif", "endfor", "elif", "else", "endset", NULL};
      if (listed(w, wl, stray)) {
        cerr(c, w, "unexpected '{%% %.*s %%}'", (int)wl, w);
        return head;
      }
      if (wl == 2 && !memcmp(w, "if", 2)) {
        n = mknode(c, N_IF);
        if (!n) return head;
        n->cond = tag_expr(c, args);
        static const char *const if_ends[] = {"endif", "elif", "else", NULL};
        int k;
        n->body = parse_block(c, if_ends, &k);
        node *cur = n;
        while (!c->err && k == 1) { /* elif: a nested if in the else branch */
          node *x = mknode(c, N_IF);
          if (!x) return head;
          x->cond = tag_expr(c, c->ep);
          x->body = parse_block(c, if_ends, &k);
          cur->else_body = x;
          cur = x;
        }
        if (!c->err && k == 2) {
          static const char *const else_ends[] = {"endif", NULL};
          cur->else_body = parse_block(c, else_ends, &k);
        }
      } else if (wl == 3 && !memcmp(w, "for", 3)) {
        n = mknode(c, N_FOR);
        if (!n) return head;
        c->ep = args;
        lex(c);
        if (c->tok != T_NAME) {
          cerr(c, c->tp, "expected a loop variable");
          return head;
        }
        n->var = cstrdup(c, c->tp, c->tn);
        lex(c);
        if (is_op(c, ",")) {
          lex(c);
          if (c->tok != T_NAME) {
            cerr(c, c->tp, "expected a second loop variable");
            return head;
          }
          n->var2 = cstrdup(c, c->tp, c->tn);
          lex(c);
        }
        if (!is_kw(c, "in")) {
          cerr(c, c->tp, "expected 'in' in a for loop");
          return head;
        }
        lex(c);
        n->e = parse_or(c);
        if (!c->err && is_kw(c, "if")) {
          lex(c);
          n->cond = parse_or(c);
        }
        if (!c->err && is_kw(c, "recursive")) {
          cerr(c, c->tp, "unsupported: recursive for loops");
          return head;
        }
        if (!c->err && c->tok != T_END) cerr(c, c->tp, "unexpected '%.*s'", (int)c->tn, c->tp);
        static const char *const for_ends[] = {"endfor", "else", NULL};
        int k;
        n->body = parse_block(c, for_ends, &k);
        if (!c->err && k == 1) {
          static const char *const e2[] = {"endfor", NULL};
          n->else_body = parse_block(c, e2, &k);
        }
      } else if (wl == 3 && !memcmp(w, "set", 3)) {
        n = mknode(c, N_SET);
        if (!n) return head;
        c->ep = args;
        lex(c);
        if (c->tok != T_NAME) {
          cerr(c, c->tp, "expected a name after 'set'");
          return head;
        }
        n->var = cstrdup(c, c->tp, c->tn);
        lex(c);
        if (is_op(c, ".")) {
          lex(c);
          if (c->tok != T_NAME) {
            cerr(c, c->tp, "expected an attribute name");
            return head;
          }
          n->attr = cstrdup(c, c->tp, c->tn);
          lex(c);
        }
        if (!is_op(c, "=")) {
          cerr(c, c->tp, "unsupported: a 'set' block (only set name = expression)");
          return head;
        }
        lex(c);
        n->e = parse_expr(c);
        if (!c->err && c->tok != T_END) cerr(c, c->tp, "unexpected '%.*s'", (int)c->tn, c->tp);
      } else {
        cerr(c, w, "unsupported Jinja statement '%.*s'", (int)(wl ? wl : (size_t)(c->q - w > 16 ? 16 : c->q - w)), w);
        return head;
      }
    }
    if (c->err) return head;
    if (!n) return head;
    *tail = n;
    tail = &n->next;
  }
}

void llm_jinja_free(llm_jinja *t) {
  if (!t) return;
  afree_all(&t->mem);
  free(t);
}

cinfer_status *llm_jinja_compile(const char *src, size_t len, llm_jinja **out) {
  *out = NULL;
  llm_jinja *t = calloc(1, sizeof *t);
  if (!t) return cinfer_status_oom("chat template");
  /* text nodes point into the template: parse a copy the template keeps */
  char *copy = amalloc(&t->mem, len + 1);
  if (!copy) {
    llm_jinja_free(t);
    return cinfer_status_oom("chat template");
  }
  memcpy(copy, src, len);
  cparse c = {.src = copy, .end = copy + len, .cur = copy, .mem = &t->mem};
  int which;
  t->root = parse_block(&c, NULL, &which);
  if (!c.err && t->mem.oom) c.err = cinfer_status_oom("chat template");
  if (c.err) {
    llm_jinja_free(t);
    return c.err;
  }
  *out = t;
  return NULL;
}

/* ---- renderer ---- */
typedef struct scope {
  vdict *vars;
  struct scope *up;
} scope;

typedef struct {
  allocs mem;
  cbuf out;
  cinfer_status *err;
  scope *sc;
  int depth;
} render;

static void rerr(render *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rerr(render *r, int line, const char *fmt, ...) {
  if (r->err) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->err = cinfer_status_new(CINFER_INVALID_ARG, "chat template: line %d: %s", line, msg);
}

static val vstr(const char *p, size_t n) { return (val){.t = V_STR, .u.s = {p, n}}; }
static val vint(long long i) { return (val){.t = V_INT, .u.i = i}; }
static val vbool(bool b) { return (val){.t = V_BOOL, .u.b = b}; }

static vlist *newlist(render *r) { return amalloc(&r->mem, sizeof(vlist)); }
static vdict *newdict(render *r) { return amalloc(&r->mem, sizeof(vdict)); }

static bool list_push(render *r, vlist *l, val v) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 8;
    val *nv = amalloc(&r->mem, nc * sizeof *nv);
    if (!nv) return false;
    if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
    l->v = nv;
    l->cap = nc;
  }
  l->v[l->n++] = v;
  return true;
}

static val *dict_find(const vdict *d, const char *k, size_t kn) {
  for (size_t i = 0; d && i < d->n; i++)
    if (d->kn[i] == kn && !memcmp(d->k[i], k, kn)) return &d->v[i];
  return NULL;
}

static bool dict_set(render *r, vdict *d, const char *k, size_t kn, val v) {
  val *have = dict_find(d, k, kn);
  if (have) {
    *have = v;
    return true;
  }
  if (d->n == d->cap) {
    size_t nc = d->cap ? d->cap * 2 : 8;
    const char **nk = amalloc(&r->mem, nc * sizeof *nk);
    size_t *nkn = amalloc(&r->mem, nc * sizeof *nkn);
    val *nv = amalloc(&r->mem, nc * sizeof *nv);
    if (!nk || !nkn || !nv) return false;
    if (d->n) {
      memcpy(nk, d->k, d->n * sizeof *nk);
      memcpy(nkn, d->kn, d->n * sizeof *nkn);
      memcpy(nv, d->v, d->n * sizeof *nv);
    }
    d->k = nk, d->kn = nkn, d->v = nv, d->cap = nc;
  }
  d->k[d->n] = k;
  d->kn[d->n] = kn;
  d->v[d->n++] = v;
  return true;
}

static bool truthy(val v) {
  switch (v.t) {
    case V_BOOL: return v.u.b;
    case V_INT: return v.u.i != 0;
    case V_FLT: return v.u.f != 0;
    case V_STR: return v.u.s.n > 0;
    case V_LIST: return v.u.l->n > 0;
    case V_DICT: return v.u.d->n > 0;
    case V_FUNC: return true;
    default: return false;
  }
}

static const char *tname(val v) {
  static const char *const n[] = {"undefined", "none", "bool", "int", "float", "string", "list", "dict", "function"};
  return n[v.t];
}

static void to_text(cbuf *b, val v, bool repr);
static void put_json(cbuf *b, val v, int indent, int level);

static void to_text(cbuf *b, val v, bool repr) {
  switch (v.t) {
    case V_UNDEF: break;
    case V_NONE: cbuf_puts(b, "None"); break;
    case V_BOOL: cbuf_puts(b, v.u.b ? "True" : "False"); break;
    case V_INT: cbuf_printf(b, "%lld", v.u.i); break;
    case V_FLT:
      if (v.u.f == floor(v.u.f) && fabs(v.u.f) < 1e16) cbuf_printf(b, "%.1f", v.u.f);
      else cbuf_printf(b, "%.17g", v.u.f);
      break;
    case V_STR:
      if (repr) {
        cbuf_puts(b, "'");
        for (size_t i = 0; i < v.u.s.n; i++) {
          char ch = v.u.s.p[i];
          if (ch == '\'' || ch == '\\') cbuf_printf(b, "\\%c", ch);
          else if (ch == '\n') cbuf_puts(b, "\\n");
          else cbuf_put(b, &ch, 1);
        }
        cbuf_puts(b, "'");
      } else {
        cbuf_put(b, v.u.s.p, v.u.s.n);
      }
      break;
    case V_LIST:
      cbuf_puts(b, "[");
      for (size_t i = 0; i < v.u.l->n; i++) {
        if (i) cbuf_puts(b, ", ");
        to_text(b, v.u.l->v[i], true);
      }
      cbuf_puts(b, "]");
      break;
    case V_DICT:
      cbuf_puts(b, "{");
      for (size_t i = 0; i < v.u.d->n; i++) {
        if (i) cbuf_puts(b, ", ");
        to_text(b, vstr(v.u.d->k[i], v.u.d->kn[i]), true);
        cbuf_puts(b, ": ");
        to_text(b, v.u.d->v[i], true);
      }
      cbuf_puts(b, "}");
      break;
    case V_FUNC: cbuf_printf(b, "<function %s>", v.u.fn.name); break;
  }
}

/* Python's json.dumps (transformers' tojson: ensure_ascii=False, separators ", " ": "). */
static void put_json(cbuf *b, val v, int indent, int level) {
  switch (v.t) {
    case V_UNDEF: case V_NONE: case V_FUNC: cbuf_puts(b, "null"); break;
    case V_BOOL: cbuf_puts(b, v.u.b ? "true" : "false"); break;
    case V_INT: case V_FLT: to_text(b, v, false); break;
    case V_STR: cbuf_json_string(b, v.u.s.p, v.u.s.n); break;
    case V_LIST: case V_DICT: {
      bool d = v.t == V_DICT;
      size_t n = d ? v.u.d->n : v.u.l->n;
      cbuf_puts(b, d ? "{" : "[");
      for (size_t i = 0; i < n; i++) {
        if (i) cbuf_puts(b, indent ? "," : ", ");
        if (indent) cbuf_printf(b, "\n%*s", indent * (level + 1), "");
        if (d) {
          cbuf_json_string(b, v.u.d->k[i], v.u.d->kn[i]);
          cbuf_puts(b, ": ");
        }
        put_json(b, d ? v.u.d->v[i] : v.u.l->v[i], indent, level + 1);
      }
      if (indent && n) cbuf_printf(b, "\n%*s", indent * level, "");
      cbuf_puts(b, d ? "}" : "]");
      break;
    }
  }
}

static val text_val(render *r, val v) {
  if (v.t == V_STR) return v;
  cbuf b = {0};
  to_text(&b, v, false);
  char *s = amalloc(&r->mem, b.len + 1);
  if (s && b.data) memcpy(s, b.data, b.len);
  val out = vstr(s ? s : "", s ? b.len : 0);
  cbuf_free(&b);
  return out;
}

static val take_buf(render *r, cbuf *b) {
  char *s = amalloc(&r->mem, b->len + 1);
  if (s && b->data) memcpy(s, b->data, b->len);
  val out = vstr(s ? s : "", s ? b->len : 0);
  cbuf_free(b);
  return out;
}

static bool equal(val a, val b) {
  bool an = a.t == V_INT || a.t == V_FLT || a.t == V_BOOL, bn = b.t == V_INT || b.t == V_FLT || b.t == V_BOOL;
  if (an && bn) {
    double x = a.t == V_INT ? (double)a.u.i : a.t == V_FLT ? a.u.f : a.u.b;
    double y = b.t == V_INT ? (double)b.u.i : b.t == V_FLT ? b.u.f : b.u.b;
    return x == y;
  }
  if (a.t != b.t) return false;
  switch (a.t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case V_LIST:
      if (a.u.l->n != b.u.l->n) return false;
      for (size_t i = 0; i < a.u.l->n; i++)
        if (!equal(a.u.l->v[i], b.u.l->v[i])) return false;
      return true;
    case V_DICT: return a.u.d == b.u.d;
    default: return false;
  }
}

static bool contains(val hay, val needle) {
  if (hay.t == V_STR && needle.t == V_STR) {
    if (!needle.u.s.n) return true;
    for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
      if (!memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n)) return true;
    return false;
  }
  if (hay.t == V_LIST) {
    for (size_t i = 0; i < hay.u.l->n; i++)
      if (equal(hay.u.l->v[i], needle)) return true;
    return false;
  }
  if (hay.t == V_DICT && needle.t == V_STR) return dict_find(hay.u.d, needle.u.s.p, needle.u.s.n) != NULL;
  return false;
}

static int cmp_vals(val a, val b, bool *ok) {
  *ok = true;
  bool an = a.t == V_INT || a.t == V_FLT || a.t == V_BOOL, bn = b.t == V_INT || b.t == V_FLT || b.t == V_BOOL;
  if (an && bn) {
    double x = a.t == V_INT ? (double)a.u.i : a.t == V_FLT ? a.u.f : a.u.b;
    double y = b.t == V_INT ? (double)b.u.i : b.t == V_FLT ? b.u.f : b.u.b;
    return x < y ? -1 : x > y;
  }
  if (a.t == V_STR && b.t == V_STR) {
    size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
    int c = memcmp(a.u.s.p, b.u.s.p, m);
    return c ? (c < 0 ? -1 : 1) : a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
  }
  *ok = false;
  return 0;
}

static val eval(render *r, const expr *e);

static val lookup(render *r, const char *name) {
  for (scope *s = r->sc; s; s = s->up) {
    val *v = dict_find(s->vars, name, strlen(name));
    if (v) return *v;
  }
  if (listed(name, strlen(name), functions)) return (val){.t = V_FUNC, .u.fn = {name, NULL}};
  return (val){.t = V_UNDEF};
}

static val get_item(render *r, val o, val k, int line) {
  if (o.t == V_DICT && k.t == V_STR) {
    val *v = dict_find(o.u.d, k.u.s.p, k.u.s.n);
    return v ? *v : (val){.t = V_UNDEF};
  }
  if ((o.t == V_LIST || o.t == V_STR) && (k.t == V_INT || k.t == V_BOOL)) {
    long long n = o.t == V_LIST ? (long long)o.u.l->n : (long long)o.u.s.n, i = k.t == V_INT ? k.u.i : k.u.b;
    if (i < 0) i += n;
    if (i < 0 || i >= n) return (val){.t = V_UNDEF};
    return o.t == V_LIST ? o.u.l->v[i] : vstr(o.u.s.p + i, 1);
  }
  if (o.t == V_UNDEF || o.t == V_NONE) return (val){.t = V_UNDEF};
  rerr(r, line, "cannot index a %s with a %s", tname(o), tname(k));
  return (val){.t = V_UNDEF};
}

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "upper",
                                          "lower", "title", "replace", "capitalize", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", NULL};

static val get_attr(render *r, val o, const char *name, int line) {
  size_t nl = strlen(name);
  if (o.t == V_DICT) {
    val *v = dict_find(o.u.d, name, nl);
    if (v) return *v;
    if (listed(name, nl, dict_methods)) goto method;
    return (val){.t = V_UNDEF};
  }
  if (o.t == V_STR && listed(name, nl, str_methods)) goto method;
  if (o.t == V_LIST && !strcmp(name, "append")) goto method;
  if (o.t == V_UNDEF || o.t == V_NONE) return (val){.t = V_UNDEF};
  rerr(r, line, "a %s has no attribute '%s'", tname(o), name);
  return (val){.t = V_UNDEF};
method:;
  val *self = amalloc(&r->mem, sizeof *self);
  if (!self) return (val){.t = V_UNDEF};
  *self = o;
  return (val){.t = V_FUNC, .u.fn = {name, self}};
}

static val strip(val s, const char *chars, size_t cn, bool left, bool right) {
  const char *p = s.u.s.p, *e = p + s.u.s.n;
  const char *set = chars ? chars : " \t\r\n\f\v";
  size_t sn = chars ? cn : 6;
  while (left && p < e && memchr(set, *p, sn)) p++;
  while (right && e > p && memchr(set, e[-1], sn)) e--;
  return vstr(p, (size_t)(e - p));
}

static val case_map(render *r, val s, int mode) { /* 0 upper, 1 lower, 2 title, 3 capitalize */
  char *o = amalloc(&r->mem, s.u.s.n + 1);
  if (!o) return vstr("", 0);
  bool start = true;
  for (size_t i = 0; i < s.u.s.n; i++) {
    char ch = s.u.s.p[i];
    bool up = mode == 0 || ((mode == 2 || mode == 3) && start);
    bool lo = mode == 1 || ((mode == 2 || mode == 3) && !start);
    if (up && ch >= 'a' && ch <= 'z') ch -= 32;
    else if (lo && ch >= 'A' && ch <= 'Z') ch += 32;
    o[i] = ch;
    if (mode == 2) start = !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'));
    else if (mode == 3) start = false;
  }
  return vstr(o, s.u.s.n);
}

static val replace_str(render *r, val s, val a, val b) {
  if (!a.u.s.n) return s;
  cbuf o = {0};
  size_t i = 0;
  while (i < s.u.s.n) {
    if (i + a.u.s.n <= s.u.s.n && !memcmp(s.u.s.p + i, a.u.s.p, a.u.s.n)) {
      cbuf_put(&o, b.u.s.p, b.u.s.n);
      i += a.u.s.n;
    } else {
      cbuf_put(&o, s.u.s.p + i++, 1);
    }
  }
  return take_buf(r, &o);
}

/* positional argument i, or keyword `kw`, or undefined */
static val arg(render *r, const expr *call, int i, const char *kw, int skip) {
  for (int k = skip; k < call->nargs; k++)
    if (call->kw[k] && kw && !strcmp(call->kw[k], kw)) return eval(r, call->args[k]);
  int pos = 0;
  for (int k = skip; k < call->nargs; k++) {
    if (call->kw[k]) continue;
    if (pos++ == i) return eval(r, call->args[k]);
  }
  return (val){.t = V_UNDEF};
}

static bool run_test(render *r, const char *name, val v, const expr *t, int skip);

static val call_fn(render *r, val f, const expr *call) {
  const char *n = f.u.fn.name;
  int line = call->line;
  if (!f.u.fn.self) { /* builtins */
    if (!strcmp(n, "raise_exception")) {
      val m = text_val(r, arg(r, call, 0, NULL, 0));
      rerr(r, line, "the template raised: %.*s", (int)m.u.s.n, m.u.s.p);
      return (val){.t = V_UNDEF};
    }
    if (!strcmp(n, "range")) {
      val a = arg(r, call, 0, NULL, 0), b = arg(r, call, 1, NULL, 0);
      long long lo = 0, hi = a.t == V_INT ? a.u.i : 0;
      if (b.t == V_INT) lo = hi, hi = b.u.i;
      if (hi - lo > 100000) {
        rerr(r, line, "range() too long");
        return (val){.t = V_UNDEF};
      }
      vlist *l = newlist(r);
      for (long long i = lo; l && i < hi; i++) list_push(r, l, vint(i));
      return l ? (val){.t = V_LIST, .u.l = l} : (val){.t = V_UNDEF};
    }
    if (!strcmp(n, "namespace")) {
      vdict *d = newdict(r);
      for (int k = 0; d && k < call->nargs; k++)
        if (call->kw[k]) dict_set(r, d, call->kw[k], strlen(call->kw[k]), eval(r, call->args[k]));
      return d ? (val){.t = V_DICT, .u.d = d} : (val){.t = V_UNDEF};
    }
    if (!strcmp(n, "strftime_now")) {
      val fmt = text_val(r, arg(r, call, 0, NULL, 0));
      char fz[128], buf[256];
      snprintf(fz, sizeof fz, "%.*s", (int)fmt.u.s.n, fmt.u.s.p);
      time_t now = time(NULL);
      struct tm tm;
      localtime_r(&now, &tm);
      size_t k = strftime(buf, sizeof buf, fz, &tm);
      char *s = amalloc(&r->mem, k + 1);
      if (s) memcpy(s, buf, k);
      return vstr(s ? s : "", s ? k : 0);
    }
  }
  val self = f.u.fn.self ? *f.u.fn.self : (val){.t = V_UNDEF};
  if (self.t == V_STR) {
    val a = arg(r, call, 0, NULL, 0);
    if (!strcmp(n, "strip") || !strcmp(n, "lstrip") || !strcmp(n, "rstrip"))
      return strip(self, a.t == V_STR ? a.u.s.p : NULL, a.t == V_STR ? a.u.s.n : 0, n[0] != 'r', n[0] != 'l');
    if (!strcmp(n, "startswith") || !strcmp(n, "endswith")) {
      if (a.t != V_STR) {
        rerr(r, line, "%s() needs a string", n);
        return vbool(false);
      }
      if (a.u.s.n > self.u.s.n) return vbool(false);
      const char *at = n[0] == 's' ? self.u.s.p : self.u.s.p + self.u.s.n - a.u.s.n;
      return vbool(!memcmp(at, a.u.s.p, a.u.s.n));
    }
    if (!strcmp(n, "upper")) return case_map(r, self, 0);
    if (!strcmp(n, "lower")) return case_map(r, self, 1);
    if (!strcmp(n, "title")) return case_map(r, self, 2);
    if (!strcmp(n, "capitalize")) return case_map(r, self, 3);
    if (!strcmp(n, "replace")) {
      val b = arg(r, call, 1, NULL, 0);
      if (a.t != V_STR || b.t != V_STR) {
        rerr(r, line, "replace() needs two strings");
        return self;
      }
      return replace_str(r, self, a, b);
    }
    if (!strcmp(n, "split")) {
      vlist *l = newlist(r);
      if (!l) return (val){.t = V_UNDEF};
      const char *p = self.u.s.p, *e = p + self.u.s.n;
      if (a.t == V_STR && a.u.s.n) {
        const char *s = p;
        for (const char *q = p; q + a.u.s.n <= e;) {
          if (!memcmp(q, a.u.s.p, a.u.s.n)) {
            list_push(r, l, vstr(s, (size_t)(q - s)));
            q += a.u.s.n;
            s = q;
          } else {
            q++;
          }
        }
        list_push(r, l, vstr(s, (size_t)(e - s)));
      } else { /* on runs of blanks */
        while (p < e) {
          while (p < e && strchr(" \t\r\n", *p)) p++;
          const char *s = p;
          while (p < e && !strchr(" \t\r\n", *p)) p++;
          if (p > s) list_push(r, l, vstr(s, (size_t)(p - s)));
        }
      }
      return (val){.t = V_LIST, .u.l = l};
    }
  }
  if (self.t == V_DICT) {
    if (!strcmp(n, "get")) {
      val k = arg(r, call, 0, NULL, 0), d = arg(r, call, 1, NULL, 0);
      val v = k.t == V_STR ? get_item(r, self, k, line) : (val){.t = V_UNDEF};
      return v.t == V_UNDEF ? (d.t == V_UNDEF ? (val){.t = V_NONE} : d) : v;
    }
    vlist *l = newlist(r);
    if (!l) return (val){.t = V_UNDEF};
    for (size_t i = 0; i < self.u.d->n; i++) {
      val k = vstr(self.u.d->k[i], self.u.d->kn[i]);
      if (!strcmp(n, "keys")) list_push(r, l, k);
      else if (!strcmp(n, "values")) list_push(r, l, self.u.d->v[i]);
      else {
        vlist *pair = newlist(r);
        if (!pair) return (val){.t = V_UNDEF};
        list_push(r, pair, k);
        list_push(r, pair, self.u.d->v[i]);
        list_push(r, l, (val){.t = V_LIST, .u.l = pair});
      }
    }
    return (val){.t = V_LIST, .u.l = l};
  }
  if (self.t == V_LIST && !strcmp(n, "append")) {
    list_push(r, self.u.l, arg(r, call, 0, NULL, 0));
    return (val){.t = V_NONE};
  }
  rerr(r, line, "cannot call '%s' here", n);
  return (val){.t = V_UNDEF};
}

static val seq_of(render *r, val v, int line) {
  if (v.t == V_LIST) return v;
  if (v.t == V_UNDEF || v.t == V_NONE) {
    vlist *l = newlist(r);
    return l ? (val){.t = V_LIST, .u.l = l} : v;
  }
  if (v.t == V_DICT) { /* iterating a dict gives its keys */
    vlist *l = newlist(r);
    for (size_t i = 0; l && i < v.u.d->n; i++) list_push(r, l, vstr(v.u.d->k[i], v.u.d->kn[i]));
    return l ? (val){.t = V_LIST, .u.l = l} : v;
  }
  if (v.t == V_STR) {
    vlist *l = newlist(r);
    for (size_t i = 0; l && i < v.u.s.n; i++) list_push(r, l, vstr(v.u.s.p + i, 1));
    return l ? (val){.t = V_LIST, .u.l = l} : v;
  }
  rerr(r, line, "a %s is not iterable", tname(v));
  vlist *l = newlist(r);
  return l ? (val){.t = V_LIST, .u.l = l} : v;
}

static int sort_cmp(const void *a, const void *b) {
  bool ok;
  return cmp_vals(*(const val *)a, *(const val *)b, &ok);
}

static val filter(render *r, const expr *e) {
  const char *n = e->name;
  int line = e->line;
  val v = eval(r, e->args[0]);
  if (!strcmp(n, "safe") || !strcmp(n, "e") || !strcmp(n, "escape")) return v; /* no autoescape in chat templates */
  if (!strcmp(n, "trim")) return v.t == V_STR ? strip(v, NULL, 0, true, true) : text_val(r, v);
  if (!strcmp(n, "length") || !strcmp(n, "count"))
    return vint(v.t == V_STR ? (long long)v.u.s.n : v.t == V_LIST ? (long long)v.u.l->n
                : v.t == V_DICT ? (long long)v.u.d->n : 0);
  if (!strcmp(n, "tojson")) {
    val ind = arg(r, e, 0, "indent", 1);
    cbuf b = {0};
    put_json(&b, v, ind.t == V_INT && ind.u.i > 0 && ind.u.i < 16 ? (int)ind.u.i : 0, 0);
    return take_buf(r, &b);
  }
  if (!strcmp(n, "upper") || !strcmp(n, "lower") || !strcmp(n, "title") || !strcmp(n, "capitalize"))
    return case_map(r, text_val(r, v), n[0] == 'u' ? 0 : n[0] == 'l' ? 1 : n[0] == 't' ? 2 : 3);
  if (!strcmp(n, "string")) return text_val(r, v);
  if (!strcmp(n, "int")) {
    if (v.t == V_FLT) return vint((long long)v.u.f);
    if (v.t == V_STR) {
      char tmp[64];
      snprintf(tmp, sizeof tmp, "%.*s", (int)(v.u.s.n < 63 ? v.u.s.n : 63), v.u.s.p);
      return vint(strtoll(tmp, NULL, 10));
    }
    return v.t == V_INT ? v : v.t == V_BOOL ? vint(v.u.b) : vint(0);
  }
  if (!strcmp(n, "float")) {
    double f = v.t == V_INT ? (double)v.u.i : v.t == V_FLT ? v.u.f : 0;
    if (v.t == V_STR) {
      char tmp[64];
      snprintf(tmp, sizeof tmp, "%.*s", (int)(v.u.s.n < 63 ? v.u.s.n : 63), v.u.s.p);
      f = strtod(tmp, NULL);
    }
    return (val){.t = V_FLT, .u.f = f};
  }
  if (!strcmp(n, "abs")) return v.t == V_INT ? vint(v.u.i < 0 ? -v.u.i : v.u.i) : v.t == V_FLT ? (val){.t = V_FLT, .u.f = fabs(v.u.f)} : v;
  if (!strcmp(n, "round")) {
    val p = arg(r, e, 0, "precision", 1);
    double f = v.t == V_INT ? (double)v.u.i : v.t == V_FLT ? v.u.f : 0, m = pow(10, p.t == V_INT ? (double)p.u.i : 0);
    return (val){.t = V_FLT, .u.f = round(f * m) / m};
  }
  if (!strcmp(n, "default") || !strcmp(n, "d")) {
    val d = arg(r, e, 0, "default_value", 1), b = arg(r, e, 1, "boolean", 1);
    return v.t == V_UNDEF || (truthy(b) && !truthy(v)) ? d : v;
  }
  if (!strcmp(n, "replace")) {
    val a = arg(r, e, 0, NULL, 1), b = arg(r, e, 1, NULL, 1);
    v = text_val(r, v);
    if (a.t != V_STR || b.t != V_STR) {
      rerr(r, line, "replace needs two strings");
      return v;
    }
    return replace_str(r, v, a, b);
  }
  if (!strcmp(n, "indent")) {
    val w = arg(r, e, 0, "width", 1), first = arg(r, e, 1, "first", 1);
    int width = w.t == V_INT && w.u.i >= 0 && w.u.i < 64 ? (int)w.u.i : 4;
    v = text_val(r, v);
    cbuf b = {0};
    if (truthy(first)) cbuf_printf(&b, "%*s", width, "");
    for (size_t i = 0; i < v.u.s.n; i++) {
      cbuf_put(&b, v.u.s.p + i, 1);
      if (v.u.s.p[i] == '\n' && i + 1 < v.u.s.n) cbuf_printf(&b, "%*s", width, "");
    }
    return take_buf(r, &b);
  }
  if (v.t == V_DICT && !strcmp(n, "items")) {
    vlist *l = newlist(r);
    for (size_t i = 0; l && i < v.u.d->n; i++) {
      vlist *pair = newlist(r);
      if (!pair) break;
      list_push(r, pair, vstr(v.u.d->k[i], v.u.d->kn[i]));
      list_push(r, pair, v.u.d->v[i]);
      list_push(r, l, (val){.t = V_LIST, .u.l = pair});
    }
    return l ? (val){.t = V_LIST, .u.l = l} : v;
  }
  /* sequence filters */
  val s = seq_of(r, v, line);
  if (r->err || s.t != V_LIST) return (val){.t = V_UNDEF};
  vlist *in = s.u.l;
  if (!strcmp(n, "first")) return in->n ? in->v[0] : (val){.t = V_UNDEF};
  if (!strcmp(n, "last")) return in->n ? in->v[in->n - 1] : (val){.t = V_UNDEF};
  if (!strcmp(n, "join")) {
    val sep = arg(r, e, 0, "d", 1);
    val a = arg(r, e, 1, "attribute", 1);
    cbuf b = {0};
    for (size_t i = 0; i < in->n; i++) {
      if (i && sep.t == V_STR) cbuf_put(&b, sep.u.s.p, sep.u.s.n);
      val x = a.t == V_STR ? get_item(r, in->v[i], a, line) : in->v[i];
      to_text(&b, x, false);
    }
    return take_buf(r, &b);
  }
  vlist *out = newlist(r);
  if (!out) return (val){.t = V_UNDEF};
  if (!strcmp(n, "list") || !strcmp(n, "items")) {
    for (size_t i = 0; i < in->n; i++) list_push(r, out, in->v[i]);
  } else if (!strcmp(n, "reverse")) {
    for (size_t i = in->n; i > 0; i--) list_push(r, out, in->v[i - 1]);
  } else if (!strcmp(n, "unique")) {
    for (size_t i = 0; i < in->n; i++) {
      bool seen = false;
      for (size_t k = 0; k < out->n && !seen; k++) seen = equal(out->v[k], in->v[i]);
      if (!seen) list_push(r, out, in->v[i]);
    }
  } else if (!strcmp(n, "sort")) {
    for (size_t i = 0; i < in->n; i++) list_push(r, out, in->v[i]);
    if (out->n) qsort(out->v, out->n, sizeof *out->v, sort_cmp);
  } else if (!strcmp(n, "map")) {
    val a = arg(r, e, 0, "attribute", 1);
    if (a.t != V_STR || !e->kw[1]) {
      rerr(r, line, "map is supported as map(attribute='name') only");
      return (val){.t = V_UNDEF};
    }
    for (size_t i = 0; i < in->n; i++) list_push(r, out, get_item(r, in->v[i], a, line));
  } else { /* select, reject, selectattr, rejectattr */
    bool attr = strstr(n, "attr") != NULL, keep = n[0] == 's';
    val a = attr ? arg(r, e, 0, NULL, 1) : (val){.t = V_UNDEF};
    val tn = arg(r, e, attr ? 1 : 0, NULL, 1);
    if (attr && a.t != V_STR) {
      rerr(r, line, "%s needs an attribute name", n);
      return (val){.t = V_UNDEF};
    }
    if (tn.t != V_UNDEF && (tn.t != V_STR || !listed(tn.u.s.p, tn.u.s.n, tests))) {
      rerr(r, line, "%s: unsupported test", n);
      return (val){.t = V_UNDEF};
    }
    char tname_buf[32] = "";
    if (tn.t == V_STR) snprintf(tname_buf, sizeof tname_buf, "%.*s", (int)tn.u.s.n, tn.u.s.p);
    for (size_t i = 0; i < in->n; i++) {
      val x = attr ? get_item(r, in->v[i], a, line) : in->v[i];
      bool t = tname_buf[0] ? run_test(r, tname_buf, x, e, attr ? 3 : 2) : truthy(x);
      if (t == keep) list_push(r, out, in->v[i]);
    }
  }
  return (val){.t = V_LIST, .u.l = out};
}

static bool run_test(render *r, const char *n, val v, const expr *t, int skip) {
  if (!strcmp(n, "defined")) return v.t != V_UNDEF;
  if (!strcmp(n, "undefined")) return v.t == V_UNDEF;
  if (!strcmp(n, "none")) return v.t == V_NONE;
  if (!strcmp(n, "string")) return v.t == V_STR;
  if (!strcmp(n, "number")) return v.t == V_INT || v.t == V_FLT;
  if (!strcmp(n, "integer")) return v.t == V_INT;
  if (!strcmp(n, "float")) return v.t == V_FLT;
  if (!strcmp(n, "boolean")) return v.t == V_BOOL;
  if (!strcmp(n, "true")) return v.t == V_BOOL && v.u.b;
  if (!strcmp(n, "false")) return v.t == V_BOOL && !v.u.b;
  if (!strcmp(n, "mapping")) return v.t == V_DICT;
  if (!strcmp(n, "iterable")) return v.t == V_LIST || v.t == V_DICT || v.t == V_STR;
  if (!strcmp(n, "sequence")) return v.t == V_LIST || v.t == V_STR;
  if (!strcmp(n, "even") || !strcmp(n, "odd")) return v.t == V_INT && (v.u.i % 2 == 0) == (n[0] == 'e');
  val a = t ? arg(r, t, 0, NULL, skip) : (val){.t = V_UNDEF};
  if (!strcmp(n, "equalto") || !strcmp(n, "eq")) return equal(v, a);
  if (!strcmp(n, "ne")) return !equal(v, a);
  if (!strcmp(n, "in")) return contains(a, v);
  return false;
}

static val eval(render *r, const expr *e) {
  if (r->err || !e) return (val){.t = V_UNDEF};
  if (++r->depth > 200) {
    rerr(r, e->line, "expression nesting too deep");
    r->depth--;
    return (val){.t = V_UNDEF};
  }
  val out = {.t = V_UNDEF};
  switch (e->kind) {
    case X_LIT: out = e->lit; break;
    case X_NAME: out = lookup(r, e->name); break;
    case X_ATTR: out = get_attr(r, eval(r, e->a), e->name, e->line); break;
    case X_INDEX: out = get_item(r, eval(r, e->a), eval(r, e->b), e->line); break;
    case X_SLICE: {
      val o = eval(r, e->a), lo = e->b ? eval(r, e->b) : vint(0), hi = e->c ? eval(r, e->c) : (val){.t = V_UNDEF};
      long long n = o.t == V_LIST ? (long long)o.u.l->n : o.t == V_STR ? (long long)o.u.s.n : -1;
      if (n < 0 || lo.t != V_INT || (hi.t != V_INT && hi.t != V_UNDEF)) {
        rerr(r, e->line, "cannot slice a %s", tname(o));
        break;
      }
      long long a = lo.u.i, b = hi.t == V_INT ? hi.u.i : n;
      if (a < 0) a += n;
      if (b < 0) b += n;
      a = a < 0 ? 0 : a > n ? n : a;
      b = b < a ? a : b > n ? n : b;
      if (o.t == V_STR) {
        out = vstr(o.u.s.p + a, (size_t)(b - a));
      } else {
        vlist *l = newlist(r);
        for (long long i = a; l && i < b; i++) list_push(r, l, o.u.l->v[i]);
        if (l) out = (val){.t = V_LIST, .u.l = l};
      }
      break;
    }
    case X_CALL: {
      val f = eval(r, e->a);
      if (f.t != V_FUNC) rerr(r, e->line, "a %s is not callable", tname(f));
      else out = call_fn(r, f, e);
      break;
    }
    case X_FILTER: out = filter(r, e); break;
    case X_TEST: out = vbool(run_test(r, e->name, eval(r, e->a), e, 0) != e->neg); break;
    case X_NOT: out = vbool(!truthy(eval(r, e->a))); break;
    case X_NEG: {
      val v = eval(r, e->a);
      if (v.t == V_INT) out = vint(-v.u.i);
      else if (v.t == V_FLT) out = (val){.t = V_FLT, .u.f = -v.u.f};
      else rerr(r, e->line, "cannot negate a %s", tname(v));
      break;
    }
    case X_COND: out = truthy(eval(r, e->b)) ? eval(r, e->a) : e->c ? eval(r, e->c) : (val){.t = V_UNDEF}; break;
    case X_LIST: {
      vlist *l = newlist(r);
      for (int i = 0; l && i < e->nargs; i++) list_push(r, l, eval(r, e->args[i]));
      if (l) out = (val){.t = V_LIST, .u.l = l};
      break;
    }
    case X_DICT: {
      vdict *d = newdict(r);
      for (int i = 0; d && i + 1 < e->nargs; i += 2) {
        val k = text_val(r, eval(r, e->args[i]));
        dict_set(r, d, k.u.s.p, k.u.s.n, eval(r, e->args[i + 1]));
      }
      if (d) out = (val){.t = V_DICT, .u.d = d};
      break;
    }
    case X_BIN: {
      if (e->op == OP_AND || e->op == OP_OR) {
        val a = eval(r, e->a);
        out = (truthy(a) == (e->op == OP_OR)) ? a : eval(r, e->b);
        break;
      }
      val a = eval(r, e->a), b = eval(r, e->b);
      bool ok = true;
      switch (e->op) {
        case OP_EQ: out = vbool(equal(a, b)); break;
        case OP_NE: out = vbool(!equal(a, b)); break;
        case OP_LT: case OP_GT: case OP_LE: case OP_GE: {
          int c = cmp_vals(a, b, &ok);
          if (!ok) rerr(r, e->line, "cannot compare a %s and a %s", tname(a), tname(b));
          out = vbool(e->op == OP_LT ? c < 0 : e->op == OP_GT ? c > 0 : e->op == OP_LE ? c <= 0 : c >= 0);
          break;
        }
        case OP_IN: out = vbool(contains(b, a)); break;
        case OP_NOTIN: out = vbool(!contains(b, a)); break;
        case OP_CAT: {
          cbuf t = {0};
          to_text(&t, a, false);
          to_text(&t, b, false);
          out = take_buf(r, &t);
          break;
        }
        default: {
          if (e->op == OP_ADD && a.t == V_STR && b.t == V_STR) {
            cbuf t = {0};
            cbuf_put(&t, a.u.s.p, a.u.s.n);
            cbuf_put(&t, b.u.s.p, b.u.s.n);
            out = take_buf(r, &t);
            break;
          }
          if (e->op == OP_ADD && a.t == V_LIST && b.t == V_LIST) {
            vlist *l = newlist(r);
            for (size_t i = 0; l && i < a.u.l->n; i++) list_push(r, l, a.u.l->v[i]);
            for (size_t i = 0; l && i < b.u.l->n; i++) list_push(r, l, b.u.l->v[i]);
            if (l) out = (val){.t = V_LIST, .u.l = l};
            break;
          }
          bool an = a.t == V_INT || a.t == V_FLT || a.t == V_BOOL, bn = b.t == V_INT || b.t == V_FLT || b.t == V_BOOL;
          if (!an || !bn) {
            static const char *const ops[] = {"", "", "", "", "", "", "", "", "", "", "+", "-", "~", "*", "/", "//", "%"};
            rerr(r, e->line, "unsupported operand types for %s: %s and %s", ops[e->op], tname(a), tname(b));
            break;
          }
          bool ints = a.t != V_FLT && b.t != V_FLT && e->op != OP_DIV;
          long long x = a.t == V_INT ? a.u.i : a.t == V_BOOL ? a.u.b : 0, y = b.t == V_INT ? b.u.i : b.t == V_BOOL ? b.u.b : 0;
          double fx = a.t == V_FLT ? a.u.f : (double)x, fy = b.t == V_FLT ? b.u.f : (double)y;
          if ((e->op == OP_DIV || e->op == OP_FDIV || e->op == OP_MOD) && fy == 0) {
            rerr(r, e->line, "division by zero");
            break;
          }
          if (ints) {
            long long z = e->op == OP_ADD ? x + y : e->op == OP_SUB ? x - y : e->op == OP_MUL ? x * y
                          : e->op == OP_FDIV ? (x / y - ((x % y != 0) && ((x < 0) != (y < 0))))
                          : ((x % y) + y) % y;
            out = vint(z);
          } else {
            double z = e->op == OP_ADD ? fx + fy : e->op == OP_SUB ? fx - fy : e->op == OP_MUL ? fx * fy
                       : e->op == OP_DIV ? fx / fy : e->op == OP_FDIV ? floor(fx / fy) : fmod(fx, fy);
            out = (val){.t = V_FLT, .u.f = z};
          }
        }
      }
      break;
    }
  }
  r->depth--;
  return out;
}

static void exec_nodes(render *r, const node *n);

static bool set_var(render *r, const char *name, val v) {
  return dict_set(r, r->sc->vars, name, strlen(name), v);
}

static void exec_nodes(render *r, const node *n) {
  for (; n && !r->err; n = n->next) {
    switch (n->kind) {
      case N_TEXT: cbuf_put(&r->out, n->text, n->len); break;
      case N_OUT: to_text(&r->out, eval(r, n->e), false); break;
      case N_IF: exec_nodes(r, truthy(eval(r, n->cond)) ? n->body : n->else_body); break;
      case N_SET: {
        val v = eval(r, n->e);
        if (n->attr) {
          val ns = lookup(r, n->var);
          if (ns.t != V_DICT) rerr(r, n->line, "'%s' is not a namespace", n->var);
          else dict_set(r, ns.u.d, n->attr, strlen(n->attr), v);
        } else if (!set_var(r, n->var, v)) {
          r->mem.oom = true;
        }
        break;
      }
      case N_FOR: {
        val s = seq_of(r, eval(r, n->e), n->line);
        if (r->err || s.t != V_LIST) break;
        vlist *items = s.u.l;
        /* filter first (loop.* counts the kept items, as Jinja) */
        vlist *kept = items;
        scope sc = {newdict(r), r->sc};
        if (!sc.vars) break;
        r->sc = &sc;
        if (n->cond) {
          kept = newlist(r);
          for (size_t i = 0; kept && i < items->n && !r->err; i++) {
            set_var(r, n->var, items->v[i]);
            if (truthy(eval(r, n->cond))) list_push(r, kept, items->v[i]);
          }
        }
        for (size_t i = 0; kept && i < kept->n && !r->err; i++) {
          val it = kept->v[i];
          if (n->var2) {
            if (it.t != V_LIST || it.u.l->n != 2) {
              rerr(r, n->line, "cannot unpack a %s into two loop variables", tname(it));
              break;
            }
            set_var(r, n->var, it.u.l->v[0]);
            set_var(r, n->var2, it.u.l->v[1]);
          } else {
            set_var(r, n->var, it);
          }
          vdict *loop = newdict(r);
          if (!loop) break;
          long long len = (long long)kept->n, k = (long long)i;
          dict_set(r, loop, "index", 5, vint(k + 1));
          dict_set(r, loop, "index0", 6, vint(k));
          dict_set(r, loop, "first", 5, vbool(k == 0));
          dict_set(r, loop, "last", 4, vbool(k == len - 1));
          dict_set(r, loop, "length", 6, vint(len));
          dict_set(r, loop, "revindex", 8, vint(len - k));
          dict_set(r, loop, "revindex0", 9, vint(len - k - 1));
          set_var(r, "loop", (val){.t = V_DICT, .u.d = loop});
          exec_nodes(r, n->body);
        }
        r->sc = sc.up;
        if (kept && !kept->n && n->else_body) exec_nodes(r, n->else_body);
        break;
      }
    }
    if (r->out.len > (64u << 20)) rerr(r, n->line, "the rendered prompt is larger than 64 MiB");
  }
}

cinfer_status *llm_jinja_render(const llm_jinja *t, const llm_jinja_msg *msgs, size_t n, bool add_generation_prompt,
                                const char *bos_token, const char *eos_token, char **out) {
  *out = NULL;
  render r = {0};
  scope top = {newdict(&r), NULL};
  vlist *ml = newlist(&r);
  bool ok = top.vars && ml;
  for (size_t i = 0; ok && i < n; i++) {
    vdict *m = newdict(&r);
    ok = m && dict_set(&r, m, "role", 4, vstr(msgs[i].role, strlen(msgs[i].role))) &&
         dict_set(&r, m, "content", 7, vstr(msgs[i].content, strlen(msgs[i].content))) &&
         list_push(&r, ml, (val){.t = V_DICT, .u.d = m});
  }
  ok = ok && dict_set(&r, top.vars, "messages", 8, (val){.t = V_LIST, .u.l = ml}) &&
       dict_set(&r, top.vars, "add_generation_prompt", 21, vbool(add_generation_prompt)) &&
       dict_set(&r, top.vars, "bos_token", 9, vstr(bos_token ? bos_token : "", bos_token ? strlen(bos_token) : 0)) &&
       dict_set(&r, top.vars, "eos_token", 9, vstr(eos_token ? eos_token : "", eos_token ? strlen(eos_token) : 0));
  if (ok) {
    r.sc = &top;
    exec_nodes(&r, t->root);
  }
  cinfer_status *st = r.err;
  if (!st && (!ok || r.mem.oom || r.out.oom)) st = cinfer_status_oom("chat template");
  if (!st && !(*out = cbuf_take(&r.out))) st = cinfer_status_oom("chat template");
  if (st) cbuf_free(&r.out);
  afree_all(&r.mem);
  return st;
}
