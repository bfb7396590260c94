/* grammar.c: GBNF compiler and the parse-stack matcher behind constrained decoding
 * (grammar.h; design in docs/design/llm.md, "Structured output").
 *
 * Compiled form: one flat array of elements. A rule is its alternatives one after another,
 * each ended by E_ALT except the last, which is ended by E_END:
 *     rule r:  el[start[r]] ... E_ALT ... E_ALT ... E_END
 * An element is a character set (E_SET: sorted, merged code point ranges, maybe negated)
 * or a reference to a rule (E_REF). Groups and repetitions become generated rules, so the
 * matcher knows only sets and references.
 *
 * Matching: a parse stack is a linked list of positions (the next element to match in each
 * open rule, innermost first); stacks share their tails. Expanding a stack replaces a
 * reference on top by the first positions of the rule's alternatives until every stack has
 * a set on top (or is empty: the text so far is a sentence). Accepting a code point keeps
 * the stacks whose top set contains it, moved one element on and expanded again. Nodes are
 * interned per step (same position over the same tail = the same node), so stacks are
 * compared by pointer and a diamond of nullable rules is expanded once.
 *
 * The token mask walks the vocabulary's byte trie depth first from the current stacks,
 * pruning a subtree as soon as no stack survives its prefix: tokens sharing a prefix share
 * its work. Scratch nodes live in an arena released subtree by subtree. */
#include "backends/llm/grammar.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

enum { E_END, E_ALT, E_REF, E_SET };
typedef struct { uint32_t type : 2, arg : 30; } elem;
typedef struct { uint32_t lo, hi; } crange;
typedef struct { uint32_t first, n; bool neg; } cset;

struct llm_grammar {
  atomic_int refs;
  elem *el;
  uint32_t n_el;
  uint32_t *alt;      /* alternative start positions of every rule, rule by rule */
  uint32_t *alt_off;  /* rule r's alternatives: alt[alt_off[r] .. alt_off[r + 1]) */
  uint32_t n_rules, root;
  crange *ranges;
  cset *sets;
};

/* ==== compiler ========================================================================== */

typedef struct { elem *v; uint32_t n, cap; } evec;
typedef struct {
  char *name;     /* NULL for generated rules */
  evec body;
  bool defined;
  uint32_t line, col; /* where first referenced (for "not defined") */
} prule;

typedef struct {
  const char *p, *end, *text;
  prule *rules;
  uint32_t n_rules, cap_rules;
  crange *ranges;
  uint32_t n_ranges, cap_ranges;
  cset *sets;
  uint32_t n_sets, cap_sets;
  size_t total;   /* elements so far, for the size bound */
  cinfer_status *err;
} parser;

static void perr(parser *ps, const char *at, const char *fmt, const char *arg) {
  if (ps->err) return;
  uint32_t line = 1, col = 1;
  for (const char *q = ps->text; q < at && q < ps->end; q++) {
    if (*q == '\n') line++, col = 1;
    else col++;
  }
  ps->err = cinfer_status_new(CINFER_INVALID_ARG, "grammar: line %u, column %u: %s%s%s", line, col,
                              fmt, arg ? arg : "", arg ? "'" : "");
}

static bool grow(void **v, uint32_t *cap, uint32_t need, size_t sz) {
  if (need <= *cap) return true;
  uint32_t nc = *cap ? *cap : 16;
  while (nc < need) {
    if (nc > UINT32_MAX / 2) return false;
    nc *= 2;
  }
  void *nv = realloc(*v, (size_t)nc * sz);
  if (!nv) return false;
  *v = nv;
  *cap = nc;
  return true;
}

static bool push(parser *ps, evec *b, uint32_t type, uint32_t arg) {
  if (ps->err) return false;
  if (++ps->total > LLM_GRAMMAR_MAX_ELEMENTS) {
    perr(ps, ps->p, "the grammar is too large (more than 200000 elements after repetitions "
                    "are expanded)", NULL);
    return false;
  }
  if (!grow((void **)&b->v, &b->cap, b->n + 1, sizeof *b->v)) {
    ps->err = cinfer_status_oom("grammar");
    return false;
  }
  b->v[b->n++] = (elem){type, arg};
  return true;
}

/* A new rule; name may be NULL (generated). Returns its id or UINT32_MAX. */
static uint32_t new_rule(parser *ps, const char *name, size_t nlen) {
  if (ps->err) return UINT32_MAX;
  if (ps->n_rules >= (1u << 29) ||
      !grow((void **)&ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof *ps->rules)) {
    ps->err = cinfer_status_oom("grammar");
    return UINT32_MAX;
  }
  prule *r = &ps->rules[ps->n_rules];
  memset(r, 0, sizeof *r);
  if (name && !(r->name = strndup(name, nlen))) {
    ps->err = cinfer_status_oom("grammar");
    return UINT32_MAX;
  }
  return ps->n_rules++;
}

static uint32_t rule_id(parser *ps, const char *name, size_t nlen) {
  for (uint32_t i = 0; i < ps->n_rules; i++)
    if (ps->rules[i].name && strlen(ps->rules[i].name) == nlen && !memcmp(ps->rules[i].name, name, nlen))
      return i;
  uint32_t id = new_rule(ps, name, nlen);
  if (id != UINT32_MAX) {
    uint32_t line = 1, col = 1;
    for (const char *q = ps->text; q < name; q++) {
      if (*q == '\n') line++, col = 1;
      else col++;
    }
    ps->rules[id].line = line;
    ps->rules[id].col = col;
  }
  return id;
}

/* Sorts and merges r[0..n) in place; returns the new count. */
static int cmp_range(const void *a, const void *b) {
  const crange *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}
static uint32_t merge_ranges(crange *r, uint32_t n) {
  if (!n) return 0;
  qsort(r, n, sizeof *r, cmp_range);
  uint32_t k = 0;
  for (uint32_t i = 1; i < n; i++) {
    if (r[i].lo <= r[k].hi + 1) {
      if (r[i].hi > r[k].hi) r[k].hi = r[i].hi;
    } else {
      r[++k] = r[i];
    }
  }
  return k + 1;
}

/* Ends the set whose ranges start at `first`; returns its id. */
static uint32_t end_set(parser *ps, uint32_t first, bool neg) {
  if (ps->err) return UINT32_MAX;
  uint32_t n = ps->n_ranges > first ? merge_ranges(ps->ranges + first, ps->n_ranges - first) : 0;
  ps->n_ranges = first + n;
  if (ps->n_sets >= (1u << 29) || !grow((void **)&ps->sets, &ps->cap_sets, ps->n_sets + 1, sizeof *ps->sets)) {
    ps->err = cinfer_status_oom("grammar");
    return UINT32_MAX;
  }
  ps->sets[ps->n_sets] = (cset){first, n, neg};
  return ps->n_sets++;
}

static bool add_range(parser *ps, uint32_t lo, uint32_t hi) {
  if (!grow((void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges + 1, sizeof *ps->ranges)) {
    ps->err = cinfer_status_oom("grammar");
    return false;
  }
  ps->ranges[ps->n_ranges++] = (crange){lo, hi};
  return true;
}

static int hexv(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes one UTF-8 code point at *p (< end); 0xFFFFFFFF when invalid. */
static uint32_t utf8_next(const char **pp, const char *end) {
  const unsigned char *p = (const unsigned char *)*pp;
  uint32_t c = p[0];
  int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
  if (n < 0 || (const char *)p + n >= end + (n ? 0 : 1)) return 0xFFFFFFFF;
  if (n) c &= 0x3F >> n;
  for (int i = 1; i <= n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0xFFFFFFFF;
    c = c << 6 | (p[i] & 0x3F);
  }
  if (c > 0x10FFFF || (n == 1 && c < 0x80) || (n == 2 && c < 0x800) || (n == 3 && c < 0x10000))
    return 0xFFFFFFFF;
  *pp = (const char *)p + n + 1;
  return c;
}

/* One character of a literal or class, escapes included. */
static uint32_t parse_char(parser *ps) {
  if (ps->p >= ps->end) {
    perr(ps, ps->p, "unexpected end of the grammar", NULL);
    return 0;
  }
  if (*ps->p == '\\') {
    const char *at = ps->p++;
    if (ps->p >= ps->end) {
      perr(ps, at, "unfinished escape", NULL);
      return 0;
    }
    char e = *ps->p++;
    int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (nhex) {
      uint32_t v = 0;
      for (int i = 0; i < nhex; i++) {
        int h = ps->p < ps->end ? hexv(*ps->p) : -1;
        if (h < 0) {
          perr(ps, at, "a \\x, \\u or \\U escape needs 2, 4 or 8 hex digits", NULL);
          return 0;
        }
        v = v << 4 | (uint32_t)h;
        ps->p++;
      }
      if (v > 0x10FFFF) {
        perr(ps, at, "escape beyond U+10FFFF", NULL);
        return 0;
      }
      return v;
    }
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return (uint32_t)e;
      default: perr(ps, at, "unknown escape", NULL); return 0;
    }
  }
  uint32_t c = utf8_next(&ps->p, ps->end);
  if (c == 0xFFFFFFFF) {
    perr(ps, ps->p, "invalid UTF-8", NULL);
    return 0;
  }
  return c;
}

static bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when nested (inside parentheses or after `|`). */
static void skip_space(parser *ps, bool nested) {
  while (ps->p < ps->end) {
    char c = *ps->p;
    if (c == ' ' || c == '\t') ps->p++;
    else if (c == '#') { while (ps->p < ps->end && *ps->p != '\n') ps->p++; }
    else if (nested && (c == '\n' || c == '\r')) ps->p++;
    else break;
  }
}

static bool parse_alternates(parser *ps, uint32_t rule, bool nested);

/* The last item rules[rule].body.v[from..n) as one element (wrapped into a generated rule
 * when longer). new_rule may move ps->rules, so the body is re-read by index. */
static bool single(parser *ps, uint32_t rule, uint32_t from, elem *out) {
  if (ps->rules[rule].body.n - from == 1) {
    *out = ps->rules[rule].body.v[from];
    return true;
  }
  uint32_t g = new_rule(ps, NULL, 0);
  if (g == UINT32_MAX) return false;
  ps->rules[g].defined = true;
  for (uint32_t i = from; i < ps->rules[rule].body.n; i++) {
    elem e = ps->rules[rule].body.v[i];
    if (!push(ps, &ps->rules[g].body, e.type, e.arg)) return false;
  }
  if (!push(ps, &ps->rules[g].body, E_END, 0)) return false;
  *out = (elem){E_REF, g};
  return true;
}

/* Generated rule  R ::= x R | ε  (x*). */
static uint32_t star_rule(parser *ps, elem x) {
  uint32_t r = new_rule(ps, NULL, 0);
  if (r == UINT32_MAX) return r;
  evec *b = &ps->rules[r].body;
  ps->rules[r].defined = true;
  if (!push(ps, b, x.type, x.arg) || !push(ps, b, E_REF, r) || !push(ps, b, E_ALT, 0) || !push(ps, b, E_END, 0))
    return UINT32_MAX;
  return r;
}

/* Applies a postfix operator to the item b->v[from..n) of rule `rule`. */
static bool postfix(parser *ps, uint32_t rule, uint32_t from) {
  char op = *ps->p;
  const char *at = ps->p;
  unsigned long lo, hi; /* hi == ULONG_MAX: unbounded */
  ps->p++;
  if (op == '*') lo = 0, hi = (unsigned long)-1;
  else if (op == '+') lo = 1, hi = (unsigned long)-1;
  else if (op == '?') lo = 0, hi = 1;
  else { /* {m}, {m,}, {m,n} */
    skip_space(ps, true);
    char *e;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') {
      perr(ps, at, "a repetition {m,n} needs a number", NULL);
      return false;
    }
    lo = strtoul(ps->p, &e, 10);
    ps->p = e;
    skip_space(ps, true);
    hi = lo;
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      skip_space(ps, true);
      if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        hi = strtoul(ps->p, &e, 10);
        ps->p = e;
      } else {
        hi = (unsigned long)-1;
      }
      skip_space(ps, true);
    }
    if (ps->p >= ps->end || *ps->p != '}') {
      perr(ps, at, "a repetition {m,n} must end with '}'", NULL);
      return false;
    }
    ps->p++;
    if (lo > LLM_GRAMMAR_MAX_REPEAT || (hi != (unsigned long)-1 && hi > LLM_GRAMMAR_MAX_REPEAT)) {
      perr(ps, at, "a repetition bound is above 1000", NULL);
      return false;
    }
    if (hi < lo) {
      perr(ps, at, "a repetition {m,n} needs m <= n", NULL);
      return false;
    }
  }
  elem x;
  if (!single(ps, rule, from, &x)) return false;
  ps->rules[rule].body.n = from;
  for (unsigned long i = 0; i < lo; i++)
    if (!push(ps, &ps->rules[rule].body, x.type, x.arg)) return false;
  if (hi == (unsigned long)-1) {
    uint32_t r = star_rule(ps, x);
    return r != UINT32_MAX && push(ps, &ps->rules[rule].body, E_REF, r);
  }
  /* hi - lo optional copies, nested: O_k ::= x O_(k-1) | ε, O_1 ::= x | ε */
  uint32_t prev = UINT32_MAX;
  for (unsigned long k = 0; k < hi - lo; k++) {
    uint32_t o = new_rule(ps, NULL, 0);
    if (o == UINT32_MAX) return false;
    evec *b = &ps->rules[o].body;
    ps->rules[o].defined = true;
    if (!push(ps, b, x.type, x.arg) || (prev != UINT32_MAX && !push(ps, b, E_REF, prev)) ||
        !push(ps, b, E_ALT, 0) || !push(ps, b, E_END, 0))
      return false;
    prev = o;
  }
  return prev == UINT32_MAX || push(ps, &ps->rules[rule].body, E_REF, prev);
}

static bool parse_sequence(parser *ps, uint32_t rule, bool nested) {
  for (;;) {
    if (ps->err) return false;
    if (ps->p >= ps->end) return true;
    char c = *ps->p;
    uint32_t from = ps->rules[rule].body.n;
    if (c == '"') {
      const char *at = ps->p++;
      while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\n') break;
        uint32_t ch = parse_char(ps);
        if (ps->err) return false;
        uint32_t first = ps->n_ranges;
        if (!add_range(ps, ch, ch)) return false;
        uint32_t s = end_set(ps, first, false);
        if (s == UINT32_MAX || !push(ps, &ps->rules[rule].body, E_SET, s)) return false;
      }
      if (ps->p >= ps->end || *ps->p != '"') {
        perr(ps, at, "unterminated string literal", NULL);
        return false;
      }
      ps->p++;
      if (ps->rules[rule].body.n == from) { /* "" is the empty sequence */
        skip_space(ps, nested);
        continue;
      }
    } else if (c == '[') {
      const char *at = ps->p++;
      bool neg = ps->p < ps->end && *ps->p == '^';
      if (neg) ps->p++;
      uint32_t first = ps->n_ranges;
      while (ps->p < ps->end && *ps->p != ']') {
        if (*ps->p == '\n') break;
        uint32_t lo = parse_char(ps), hi = lo;
        if (ps->err) return false;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
          ps->p++;
          hi = parse_char(ps);
          if (ps->err) return false;
          if (hi < lo) {
            perr(ps, at, "a character range has its end before its start", NULL);
            return false;
          }
        }
        if (!add_range(ps, lo, hi)) return false;
      }
      if (ps->p >= ps->end || *ps->p != ']') {
        perr(ps, at, "unterminated character class", NULL);
        return false;
      }
      ps->p++;
      uint32_t s = end_set(ps, first, neg);
      if (s == UINT32_MAX || !push(ps, &ps->rules[rule].body, E_SET, s)) return false;
    } else if (c == '.') {
      ps->p++;
      uint32_t s = end_set(ps, ps->n_ranges, true); /* [^] : any code point */
      if (s == UINT32_MAX || !push(ps, &ps->rules[rule].body, E_SET, s)) return false;
    } else if (is_word(c)) {
      const char *name = ps->p;
      while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
      const char *q = ps->p;
      while (q < ps->end && (*q == ' ' || *q == '\t')) q++;
      if (q + 2 < ps->end && !memcmp(q, "::=", 3)) { /* the next rule's head: this one ended */
        ps->p = name;
        return true;
      }
      uint32_t id = rule_id(ps, name, (size_t)(ps->p - name));
      if (id == UINT32_MAX || !push(ps, &ps->rules[rule].body, E_REF, id)) return false;
    } else if (c == '(') {
      const char *at = ps->p++;
      uint32_t g = new_rule(ps, NULL, 0);
      if (g == UINT32_MAX) return false;
      ps->rules[g].defined = true;
      skip_space(ps, true);
      if (!parse_alternates(ps, g, true)) return false;
      if (ps->p >= ps->end || *ps->p != ')') {
        perr(ps, at, "unbalanced '('", NULL);
        return false;
      }
      ps->p++;
      if (!push(ps, &ps->rules[g].body, E_END, 0) || !push(ps, &ps->rules[rule].body, E_REF, g)) return false;
    } else {
      return true; /* '|', ')', newline, or something the caller judges */
    }
    skip_space(ps, nested);
    while (ps->p < ps->end && (*ps->p == '*' || *ps->p == '+' || *ps->p == '?' || *ps->p == '{')) {
      if (!postfix(ps, rule, from)) return false;
      skip_space(ps, nested);
    }
  }
}

static bool parse_alternates(parser *ps, uint32_t rule, bool nested) {
  if (!parse_sequence(ps, rule, nested)) return false;
  while (ps->p < ps->end && *ps->p == '|') {
    ps->p++;
    if (!push(ps, &ps->rules[rule].body, E_ALT, 0)) return false;
    skip_space(ps, true);
    if (!parse_sequence(ps, rule, nested)) return false;
  }
  return !ps->err;
}

static void parse_grammar(parser *ps) {
  for (;;) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '#')) {
      if (*ps->p == '#') while (ps->p < ps->end && *ps->p != '\n') ps->p++;
      else ps->p++;
    }
    if (ps->p >= ps->end) return;
    const char *name = ps->p;
    while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
    if (ps->p == name) {
      perr(ps, name, "expected a rule name", NULL);
      return;
    }
    size_t nlen = (size_t)(ps->p - name);
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) {
      perr(ps, ps->p, "expected '::=' after the rule name", NULL);
      return;
    }
    ps->p += 3;
    uint32_t id = rule_id(ps, name, nlen);
    if (id == UINT32_MAX) return;
    if (ps->rules[id].defined) {
      char nm[80];
      snprintf(nm, sizeof nm, "%.*s", (int)(nlen > 64 ? 64 : nlen), name);
      perr(ps, name, "rule defined twice: '", nm);
      return;
    }
    ps->rules[id].defined = true;
    skip_space(ps, false);
    if (!parse_alternates(ps, id, false)) return;
    if (!push(ps, &ps->rules[id].body, E_END, 0)) return;
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r' && !is_word(*ps->p)) {
      perr(ps, ps->p, "unexpected character", NULL);
      return;
    }
  }
}

/* Left recursion: a rule reaching itself through references in first position (after
 * nullable elements). Returns the offending rule or UINT32_MAX. */
static uint32_t find_left_recursion(const llm_grammar *g) {
  uint32_t n = g->n_rules;
  bool *nullable = calloc(n, 1);
  uint8_t *color = calloc(n, 1);
  uint32_t *stk = malloc((size_t)n * 2 * sizeof *stk); /* (rule, next alternative/element cursor) */
  uint32_t bad = UINT32_MAX;
  if (!nullable || !color || !stk) {
    bad = UINT32_MAX - 1;
    goto out;
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t r = 0; r < n; r++) {
      if (nullable[r]) continue;
      for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && !nullable[r]; a++) {
        uint32_t p = g->alt[a];
        while (g->el[p].type == E_REF && nullable[g->el[p].arg]) p++;
        if (g->el[p].type == E_END || g->el[p].type == E_ALT) nullable[r] = changed = true;
      }
    }
  }
  /* iterative DFS over "r can begin with s" edges */
  for (uint32_t r0 = 0; r0 < n && bad == UINT32_MAX; r0++) {
    if (color[r0]) continue;
    uint32_t sp = 0;
    stk[sp++] = r0, stk[sp++] = 0;
    color[r0] = 1;
    while (sp && bad == UINT32_MAX) {
      uint32_t r = stk[sp - 2], cur = stk[sp - 1];
      /* cursor: enumerate positions of every alternative's nullable prefix + 1 */
      uint32_t next = UINT32_MAX;
      uint32_t idx = 0;
      for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && next == UINT32_MAX; a++) {
        for (uint32_t p = g->alt[a]; g->el[p].type == E_REF; p++) {
          if (idx++ == cur) {
            next = g->el[p].arg;
            break;
          }
          if (!nullable[g->el[p].arg]) break;
        }
      }
      if (next == UINT32_MAX) {
        color[r] = 2;
        sp -= 2;
        continue;
      }
      stk[sp - 1] = cur + 1;
      if (color[next] == 1) bad = next;
      else if (!color[next]) {
        color[next] = 1;
        stk[sp++] = next, stk[sp++] = 0;
      }
    }
  }
out:
  free(nullable);
  free(color);
  free(stk);
  return bad;
}

static void parser_free(parser *ps) {
  for (uint32_t i = 0; i < ps->n_rules; i++) {
    free(ps->rules[i].name);
    free(ps->rules[i].body.v);
  }
  free(ps->rules);
  free(ps->ranges);
  free(ps->sets);
}

void llm_grammar_unref(llm_grammar *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  free(g->el);
  free(g->alt);
  free(g->alt_off);
  free(g->ranges);
  free(g->sets);
  free(g);
}

llm_grammar *llm_grammar_ref(llm_grammar *g) {
  atomic_fetch_add(&g->refs, 1);
  return g;
}

cinfer_status *llm_grammar_compile(const char *text, size_t len, llm_grammar **out) {
  *out = NULL;
  parser ps = {.p = text, .end = text + len, .text = text};
  parse_grammar(&ps);
  uint32_t root = UINT32_MAX;
  for (uint32_t i = 0; !ps.err && i < ps.n_rules; i++) {
    if (!ps.rules[i].defined) {
      ps.err = cinfer_status_new(CINFER_INVALID_ARG, "grammar: line %u, column %u: rule '%s' is used but not defined",
                                 ps.rules[i].line, ps.rules[i].col, ps.rules[i].name);
    }
    if (ps.rules[i].name && !strcmp(ps.rules[i].name, "root")) root = i;
  }
  if (!ps.err && root == UINT32_MAX)
    ps.err = cinfer_status_new(CINFER_INVALID_ARG, "grammar: no rule named 'root' (the start rule)");
  llm_grammar *g = NULL;
  if (!ps.err) {
    g = calloc(1, sizeof *g);
    size_t n_el = 0, n_alt = 0;
    for (uint32_t i = 0; i < ps.n_rules; i++) {
      n_el += ps.rules[i].body.n;
      for (uint32_t k = 0; k < ps.rules[i].body.n; k++)
        n_alt += ps.rules[i].body.v[k].type == E_ALT || ps.rules[i].body.v[k].type == E_END;
    }
    if (g) {
      atomic_init(&g->refs, 1);
      g->el = malloc((n_el + 1) * sizeof *g->el);
      g->alt = malloc((n_alt + 1) * sizeof *g->alt);
      g->alt_off = malloc(((size_t)ps.n_rules + 1) * sizeof *g->alt_off);
    }
    if (!g || !g->el || !g->alt || !g->alt_off) {
      ps.err = cinfer_status_oom("grammar");
    } else {
      uint32_t pos = 0, na = 0;
      for (uint32_t i = 0; i < ps.n_rules; i++) {
        g->alt_off[i] = na;
        g->alt[na++] = pos;
        for (uint32_t k = 0; k < ps.rules[i].body.n; k++) {
          g->el[pos++] = ps.rules[i].body.v[k];
          if (ps.rules[i].body.v[k].type == E_ALT) g->alt[na++] = pos;
        }
      }
      g->alt_off[ps.n_rules] = na;
      g->n_el = pos;
      g->n_rules = ps.n_rules;
      g->root = root;
      g->ranges = ps.ranges, ps.ranges = NULL;
      g->sets = ps.sets, ps.sets = NULL;
      uint32_t lr = find_left_recursion(g);
      if (lr == UINT32_MAX - 1) {
        ps.err = cinfer_status_oom("grammar");
      } else if (lr != UINT32_MAX) {
        const char *nm = ps.rules[lr].name;
        ps.err = nm ? cinfer_status_new(CINFER_INVALID_ARG,
                                        "grammar: rule '%s' is left-recursive (it can reach itself "
                                        "before matching a character)", nm)
                    : cinfer_status_new(CINFER_INVALID_ARG,
                                        "grammar: a parenthesised group or repetition is left-recursive "
                                        "(it can reach itself before matching a character)");
      }
    }
  }
  parser_free(&ps);
  if (ps.err) {
    llm_grammar_unref(g);
    return ps.err;
  }
  *out = g;
  return NULL;
}

const char *llm_grammar_json_object_gbnf(void) {
  return "root   ::= object\n"
         "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
         "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
         "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
         "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
         "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
         "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
}

/* ==== matcher ============================================================================ */

typedef struct node node;
struct node {
  uint32_t pos;
  node *parent;
};

/* Bump arena with stack-like release (the trie walk frees subtree by subtree). */
typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  char data[];
} chunk;
typedef struct arena { chunk *head; } arena;
typedef struct { chunk *c; size_t used; } amark;

static void *aalloc(arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->used + n > a->head->cap) {
    size_t cap = n > 65536 ? n : 65536;
    chunk *c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}
static amark amark_get(arena *a) { return (amark){a->head, a->head ? a->head->used : 0}; }
/* Back to mark m. The oldest chunk is kept (emptied) when m is the empty mark, so the
 * scratch arena of a state costs no allocation per token once it has grown. */
static void arelease(arena *a, amark m) {
  while (a->head != m.c) {
    chunk *c = a->head;
    if (!m.c && !c->next) {
      c->used = 0;
      return;
    }
    a->head = c->next;
    free(c);
  }
  if (a->head) a->head->used = m.used;
}
static void afree(arena *a) {
  while (a->head) {
    chunk *c = a->head;
    a->head = c->next;
    free(c);
  }
}

/* Epoch-stamped open-addressing tables: interning of (pos, parent) and visited pointers. */
typedef struct { const void *k1; uint32_t k2, epoch; node *v; } slot;
typedef struct { slot *s; uint32_t cap, n, epoch; } table;

static bool table_reset(table *t, uint32_t want) {
  t->epoch++;
  t->n = 0;
  if (t->epoch == 0 || want * 2 > t->cap) {
    uint32_t cap = t->cap ? t->cap : 256;
    while (cap < want * 2) cap *= 2;
    if (cap != t->cap || t->epoch == 0) {
      slot *ns = calloc(cap, sizeof *ns);
      if (!ns) return false;
      free(t->s);
      t->s = ns;
      t->cap = cap;
      t->epoch = 1;
    }
  }
  return true;
}

static uint32_t hash2(const void *p, uint32_t k) {
  uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ (uint64_t)k * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  return (uint32_t)h;
}

/* Finds or inserts; returns the slot. Grows (rehashing the live epoch) at 1/2 load. */
static slot *table_slot(table *t, const void *k1, uint32_t k2, bool *found) {
  if ((t->n + 1) * 2 > t->cap) {
    uint32_t nc = t->cap * 2;
    slot *ns = calloc(nc, sizeof *ns);
    if (!ns) return NULL;
    for (uint32_t i = 0; i < t->cap; i++) {
      if (t->s[i].epoch != t->epoch) continue;
      uint32_t j = hash2(t->s[i].k1, t->s[i].k2) & (nc - 1);
      while (ns[j].epoch == t->epoch) j = (j + 1) & (nc - 1);
      ns[j] = t->s[i];
    }
    free(t->s);
    t->s = ns;
    t->cap = nc;
  }
  uint32_t j = hash2(k1, k2) & (t->cap - 1);
  while (t->s[j].epoch == t->epoch) {
    if (t->s[j].k1 == k1 && t->s[j].k2 == k2) {
      *found = true;
      return &t->s[j];
    }
    j = (j + 1) & (t->cap - 1);
  }
  *found = false;
  t->s[j] = (slot){k1, k2, t->epoch, NULL};
  t->n++;
  return &t->s[j];
}

/* A set of stacks after expansion: tops are E_SET positions; `accept` when one is empty. */
typedef struct { node **v; uint32_t n; bool accept; } sset;

typedef struct matcher {
  const llm_grammar *g;
  arena *a;          /* where new nodes go */
  table intern, seen;
  node **work;
  uint32_t n_work, cap_work;
  node **outv;       /* output accumulation before it is copied into the arena */
  uint32_t n_out, cap_out;
  bool oom, too_many;
} matcher;

static node *mk(matcher *m, uint32_t pos, node *parent) {
  bool found;
  slot *s = table_slot(&m->intern, parent, pos, &found);
  if (!s) {
    m->oom = true;
    return NULL;
  }
  if (found) return s->v;
  node *n = aalloc(m->a, sizeof *n);
  if (!n) {
    m->oom = true;
    return NULL;
  }
  n->pos = pos;
  n->parent = parent;
  s->v = n;
  return n;
}

static void work_push(matcher *m, node *n) {
  bool found;
  slot *s = table_slot(&m->seen, n, UINT32_MAX, &found);
  if (!s) {
    m->oom = true;
    return;
  }
  if (found) return;
  if (!grow((void **)&m->work, &m->cap_work, m->n_work + 1, sizeof *m->work)) {
    m->oom = true;
    return;
  }
  m->work[m->n_work++] = n;
}

/* Expands the worklist into the output (m->outv). */
static void expand(matcher *m, bool *accept) {
  const llm_grammar *g = m->g;
  while (m->n_work && !m->oom) {
    node *n = m->work[--m->n_work];
    if (!n) {
      *accept = true;
      continue;
    }
    elem e = g->el[n->pos];
    if (e.type == E_END || e.type == E_ALT) {
      if (n->parent) work_push(m, n->parent);
      else *accept = true;
    } else if (e.type == E_SET) {
      if (m->n_out >= LLM_GRAMMAR_MAX_STACKS) {
        m->too_many = true;
        return;
      }
      if (!grow((void **)&m->outv, &m->cap_out, m->n_out + 1, sizeof *m->outv)) {
        m->oom = true;
        return;
      }
      m->outv[m->n_out++] = n;
    } else { /* E_REF: the continuation, then each alternative of the rule */
      elem nx = g->el[n->pos + 1];
      node *cont = nx.type == E_END || nx.type == E_ALT ? n->parent : mk(m, n->pos + 1, n->parent);
      if (m->oom) return;
      for (uint32_t a = g->alt_off[e.arg]; a < g->alt_off[e.arg + 1]; a++) {
        uint32_t p = g->alt[a];
        if (g->el[p].type == E_END || g->el[p].type == E_ALT) { /* empty alternative */
          if (cont) work_push(m, cont);
          else *accept = true;
          continue;
        }
        node *c = mk(m, p, cont);
        if (!c) return;
        work_push(m, c);
      }
    }
  }
}

static bool begin(matcher *m, uint32_t hint) {
  if (!table_reset(&m->intern, hint) || !table_reset(&m->seen, hint)) {
    m->oom = true;
    return false;
  }
  m->n_work = m->n_out = 0;
  return true;
}

static bool finish(matcher *m, sset *out) {
  if (m->oom || m->too_many) return false;
  out->n = m->n_out;
  out->v = m->n_out ? aalloc(m->a, m->n_out * sizeof *out->v) : NULL;
  if (m->n_out && !out->v) {
    m->oom = true;
    return false;
  }
  if (m->n_out) memcpy(out->v, m->outv, m->n_out * sizeof *out->v);
  return true;
}

static bool set_has(const llm_grammar *g, uint32_t set, uint32_t c) {
  const cset *s = &g->sets[set];
  const crange *r = s->n ? g->ranges + s->first : NULL; /* '.' has no ranges (and may have no array) */
  uint32_t lo = 0, hi = s->n; /* binary search */
  bool in = false;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (c < r[mid].lo) hi = mid;
    else if (c > r[mid].hi) lo = mid + 1;
    else {
      in = true;
      break;
    }
  }
  return in != s->neg;
}

/* Whether the set holds some code point of [lo, hi]. Ranges are merged, so a negated set
 * misses the whole interval only when one range covers it. */
static bool set_meets(const llm_grammar *g, uint32_t set, uint32_t lo, uint32_t hi) {
  const cset *s = &g->sets[set];
  const crange *r = s->n ? g->ranges + s->first : NULL; /* '.' has no ranges (and may have no array) */
  for (uint32_t i = 0; i < s->n; i++) {
    if (s->neg && r[i].lo <= lo && r[i].hi >= hi) return false;
    if (!s->neg && r[i].lo <= hi && r[i].hi >= lo) return true;
  }
  return s->neg;
}

/* in --c--> out. False on OOM/too many; out->n == 0 && !accept when nothing survives. */
static bool step_char(matcher *m, const sset *in, uint32_t c, sset *out) {
  out->accept = false;
  if (!begin(m, in->n * 4 + 16)) return false;
  for (uint32_t i = 0; i < in->n; i++) {
    node *n = in->v[i];
    if (!set_has(m->g, m->g->el[n->pos].arg, c)) continue;
    node *nx = mk(m, n->pos + 1, n->parent);
    if (!nx) return false;
    work_push(m, nx);
  }
  expand(m, &out->accept);
  return finish(m, out);
}

/* An unfinished UTF-8 character: the bits so far, the bytes still to come, and the smallest
 * code point its length may encode (shorter spellings are overlong, hence invalid: the
 * detokeniser would print U+FFFD for them, so the grammar must not take them either). */
typedef struct { uint32_t val, min; uint8_t need; } partial;

/* Some stack can take a character that starts with the partial bytes. */
static bool partial_ok(const llm_grammar *g, const sset *s, partial p) {
  if (!p.need) return true;
  uint32_t lo = p.val << (6 * p.need), hi = lo | ((1u << (6 * p.need)) - 1);
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  if (lo < p.min) lo = p.min;
  if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return false; /* overlong, or surrogates only */
  for (uint32_t i = 0; i < s->n; i++)
    if (set_meets(g, g->el[s->v[i]->pos].arg, lo, hi)) return true;
  return false;
}

/* One byte. Returns 1 when the stacks survive (*out set; may alias in for a partial byte),
 * 0 when they do not, -1 on OOM / too many stacks. */
static int step_byte(matcher *m, const sset *in, partial *p, uint8_t b, sset *out) {
  if (p->need) {
    if ((b & 0xC0) != 0x80) return 0;
    p->val = p->val << 6 | (b & 0x3F);
    if (--p->need) {
      *out = *in;
      return partial_ok(m->g, in, *p);
    }
    uint32_t c = p->val;
    if (c > 0x10FFFF || c < p->min || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    if (!step_char(m, in, c, out)) return -1;
    return out->n || out->accept;
  }
  if (b < 0x80) {
    if (!step_char(m, in, b, out)) return -1;
    return out->n || out->accept;
  }
  if (b >= 0xC2 && b <= 0xDF) *p = (partial){b & 0x1F, 0x80, 1};
  else if (b >= 0xE0 && b <= 0xEF) *p = (partial){b & 0x0F, 0x800, 2};
  else if (b >= 0xF0 && b <= 0xF4) *p = (partial){b & 0x07, 0x10000, 3};
  else return 0;
  *out = *in;
  return partial_ok(m->g, in, *p);
}

struct llm_grammar_state {
  llm_grammar *g;
  arena a;      /* the current stacks' nodes */
  sset cur;
  partial part;
  matcher m;    /* scratch tables, reused */
  arena scratch;
};

static void matcher_free(matcher *m) {
  free(m->intern.s);
  free(m->seen.s);
  free(m->work);
  free(m->outv);
}

void llm_grammar_state_destroy(llm_grammar_state *s) {
  if (!s) return;
  afree(&s->a);
  afree(&s->scratch);
  matcher_free(&s->m);
  llm_grammar_unref(s->g);
  free(s);
}

cinfer_status *llm_grammar_state_create(llm_grammar *g, llm_grammar_state **out) {
  *out = NULL;
  llm_grammar_state *s = calloc(1, sizeof *s);
  if (!s) return cinfer_status_oom("grammar state");
  s->g = llm_grammar_ref(g);
  s->m.g = g;
  s->m.a = &s->a;
  if (begin(&s->m, 64)) { /* expand the root rule's alternatives */
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) {
      uint32_t p = g->alt[a];
      if (g->el[p].type == E_END || g->el[p].type == E_ALT) {
        s->cur.accept = true;
        continue;
      }
      node *c = mk(&s->m, p, NULL);
      if (c) work_push(&s->m, c);
    }
    expand(&s->m, &s->cur.accept);
    finish(&s->m, &s->cur);
  }
  if (s->m.oom || s->m.too_many) {
    bool many = s->m.too_many;
    llm_grammar_state_destroy(s);
    return many ? cinfer_status_new(CINFER_INVALID_ARG, "grammar: more than %d parse stacks at the start "
                                                        "(the grammar is too ambiguous)", LLM_GRAMMAR_MAX_STACKS)
                : cinfer_status_oom("grammar state");
  }
  *out = s;
  return NULL;
}

bool llm_grammar_can_end(const llm_grammar_state *s) { return s->cur.accept && !s->part.need; }
bool llm_grammar_must_end(const llm_grammar_state *s) { return s->cur.n == 0 && !s->part.need; }

/* Runs bytes from the current state into the scratch arena; 1 fits, 0 not, -1 error. */
static int run_bytes(llm_grammar_state *s, const char *p, size_t n, sset *out, partial *part) {
  sset cur = s->cur;
  *part = s->part;
  s->m.a = &s->scratch;
  for (size_t i = 0; i < n; i++) {
    sset nx;
    int r = step_byte(&s->m, &cur, part, (uint8_t)p[i], &nx);
    if (r <= 0) return r;
    cur = nx;
  }
  *out = cur;
  return 1;
}

/* Copies the stacks of `in` into a fresh arena (sharing tails, interned), replacing cur. */
static bool adopt(llm_grammar_state *s, const sset *in, partial part) {
  arena na = {0};
  s->m.a = &na;
  if (!begin(&s->m, in->n * 8 + 16)) return false;
  sset out = {.n = in->n, .accept = in->accept};
  out.v = in->n ? aalloc(&na, in->n * sizeof *out.v) : NULL;
  bool ok = !in->n || out.v;
  /* copy a stack: walk to the bottom, then rebuild top-down through the intern table */
  node **path = NULL;
  uint32_t cap = 0;
  for (uint32_t i = 0; ok && i < in->n; i++) {
    uint32_t d = 0;
    for (node *q = in->v[i]; q; q = q->parent) {
      if (!grow((void **)&path, &cap, d + 1, sizeof *path)) {
        ok = false;
        break;
      }
      path[d++] = q;
    }
    node *parent = NULL;
    while (ok && d) {
      parent = mk(&s->m, path[--d]->pos, parent);
      ok = parent != NULL;
    }
    if (ok) out.v[i] = parent;
  }
  free(path);
  if (!ok) {
    afree(&na);
    s->m.a = &s->a;
    return false;
  }
  afree(&s->a);
  s->a = na;
  s->m.a = &s->a;
  s->cur = out;
  s->part = part;
  return true;
}

bool llm_grammar_accept_text(llm_grammar_state *s, const char *text, size_t n) {
  sset out;
  partial part;
  amark mk0 = amark_get(&s->scratch);
  int r = run_bytes(s, text, n, &out, &part);
  bool ok = r == 1 && adopt(s, &out, part);
  arelease(&s->scratch, mk0);
  return ok;
}

bool llm_grammar_allows(llm_grammar_state *s, const llm_tokenizer *t, int32_t id) {
  if (llm_tokenizer_is_eog(t, id)) return llm_grammar_can_end(s);
  size_t len;
  const char *p = llm_token_piece(t, id, false, &len);
  if (!len) return false;
  sset out;
  partial part;
  amark mk0 = amark_get(&s->scratch);
  int r = run_bytes(s, p, len, &out, &part);
  arelease(&s->scratch, mk0);
  return r == 1;
}

bool llm_grammar_accept(llm_grammar_state *s, const llm_tokenizer *t, int32_t id) {
  if (llm_tokenizer_is_eog(t, id)) return llm_grammar_can_end(s);
  size_t len;
  const char *p = llm_token_piece(t, id, false, &len);
  return len && llm_grammar_accept_text(s, p, len);
}

/* ==== vocabulary trie and the mask ======================================================= */

typedef struct tnode {
  uint32_t first_child, next_sibling; /* 0 = none (node 0 is the root) */
  uint32_t tok_first, n_tok;          /* ids of the tokens that end here: ids[tok_first..) */
  uint8_t byte;
} tnode;

struct llm_grammar_vocab {
  tnode *n;
  uint32_t n_nodes;
  int32_t *ids;
  int32_t *eog;
  uint32_t n_eog;
  int n_vocab;
};

void llm_grammar_vocab_destroy(llm_grammar_vocab *v) {
  if (!v) return;
  free(v->n);
  free(v->ids);
  free(v->eog);
  free(v);
}

typedef struct { const char *p; size_t len; int32_t id; } piece;
static int cmp_piece(const void *a, const void *b) {
  const piece *x = a, *y = b;
  size_t m = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->p, y->p, m);
  if (c) return c;
  return x->len < y->len ? -1 : x->len > y->len ? 1 : x->id - y->id;
}

cinfer_status *llm_grammar_vocab_create(const llm_tokenizer *t, llm_grammar_vocab **out) {
  *out = NULL;
  int nv = llm_tokenizer_n_vocab(t);
  llm_grammar_vocab *v = calloc(1, sizeof *v);
  piece *ps = calloc((size_t)nv + 1, sizeof *ps);
  size_t total = 1;
  int np = 0, ne = 0;
  if (!v || !ps) goto oom;
  v->n_vocab = nv;
  for (int32_t id = 0; id < nv; id++) {
    if (llm_tokenizer_is_eog(t, id)) {
      ne++;
      continue;
    }
    size_t len;
    const char *p = llm_token_piece(t, id, false, &len);
    if (!len) continue; /* control tokens: never under a grammar */
    ps[np++] = (piece){p, len, id};
    total += len;
  }
  qsort(ps, (size_t)np, sizeof *ps, cmp_piece);
  v->n = calloc(total, sizeof *v->n);
  v->ids = malloc(((size_t)np + 1) * sizeof *v->ids);
  v->eog = malloc(((size_t)ne + 1) * sizeof *v->eog);
  if (!v->n || !v->ids || !v->eog) goto oom;
  for (int32_t id = 0; id < nv; id++)
    if (llm_tokenizer_is_eog(t, id)) v->eog[v->n_eog++] = id;
  /* sorted insertion: the path of the previous piece is the stack of open nodes */
  v->n_nodes = 1;
  uint32_t *path = malloc((total + 1) * sizeof *path);
  uint32_t *last_child = calloc(total, sizeof *last_child);
  if (!path || !last_child) {
    free(path);
    free(last_child);
    goto oom;
  }
  size_t depth = 0; /* path[0..depth] valid, path[0] = root */
  path[0] = 0;
  const char *prev = NULL;
  size_t prev_len = 0;
  for (int i = 0; i < np; i++) {
    size_t common = 0;
    while (prev && common < prev_len && common < ps[i].len && prev[common] == ps[i].p[common]) common++;
    if (common > depth) common = depth;
    depth = common;
    for (size_t k = common; k < ps[i].len; k++) {
      uint32_t parent = path[depth], c = v->n_nodes++;
      v->n[c].byte = (uint8_t)ps[i].p[k];
      if (last_child[parent]) v->n[last_child[parent]].next_sibling = c;
      else v->n[parent].first_child = c;
      last_child[parent] = c;
      path[++depth] = c;
    }
    tnode *e = &v->n[path[depth]];
    if (!e->n_tok) e->tok_first = (uint32_t)i;
    e->n_tok++;
    v->ids[i] = ps[i].id;
    prev = ps[i].p;
    prev_len = ps[i].len;
  }
  free(path);
  free(last_child);
  free(ps);
  *out = v;
  return NULL;
oom:
  free(ps);
  llm_grammar_vocab_destroy(v);
  return cinfer_status_oom("grammar vocabulary");
}

typedef struct { uint32_t node, child; sset set; partial part; amark mark; } frame;

int llm_grammar_mask(llm_grammar_state *s, const llm_grammar_vocab *v, const llm_tokenizer *t,
                     float *logits, int n_vocab) {
  (void)t;
  uint8_t *ok = calloc((size_t)n_vocab, 1);
  frame *st = malloc(4096 * sizeof *st);
  uint32_t cap = 4096, sp = 0;
  int allowed = 0;
  bool failed = !ok || !st;
  if (!failed) {
    s->m.a = &s->scratch;
    st[sp++] = (frame){0, v->n[0].first_child, s->cur, s->part, amark_get(&s->scratch)};
    while (sp && !failed) {
      frame *f = &st[sp - 1];
      if (!f->child) {
        arelease(&s->scratch, f->mark);
        sp--;
        continue;
      }
      uint32_t c = f->child;
      f->child = v->n[c].next_sibling;
      amark mark = amark_get(&s->scratch);
      partial part = f->part;
      sset nx;
      int r = step_byte(&s->m, &f->set, &part, v->n[c].byte, &nx);
      if (r < 0) failed = true;
      if (r <= 0) {
        arelease(&s->scratch, mark);
        continue;
      }
      const tnode *tn = &v->n[c];
      for (uint32_t k = 0; k < tn->n_tok; k++) {
        int32_t id = v->ids[tn->tok_first + k];
        if (id >= 0 && id < n_vocab) ok[id] = 1;
      }
      if (!tn->first_child) {
        arelease(&s->scratch, mark);
        continue;
      }
      if (sp == cap) {
        frame *ns = realloc(st, (size_t)cap * 2 * sizeof *st);
        if (!ns) {
          failed = true;
          break;
        }
        st = ns;
        cap *= 2;
      }
      st[sp++] = (frame){c, tn->first_child, nx, part, mark};
    }
    arelease(&s->scratch, st[0].mark);
  }
  if (!failed) {
    bool end = llm_grammar_can_end(s);
    for (uint32_t i = 0; i < v->n_eog; i++)
      if (v->eog[i] < n_vocab) ok[v->eog[i]] = end;
    for (int i = 0; i < n_vocab; i++) {
      if (ok[i]) allowed++;
      else logits[i] = -INFINITY;
    }
  }
  free(ok);
  free(st);
  return failed ? -1 : allowed;
}
