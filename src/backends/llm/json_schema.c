/* json_schema.c: JSON Schema to GBNF (grammar.h, llm_json_schema_to_gbnf).
 *
 * Every subschema becomes one rule "sN"; the JSON primitives are fixed rules "j-..." at the
 * end. A value's rule consumes the whitespace after it, so separators need no care.
 * The translation is exact or refused: a keyword whose constraint the grammar would not
 * enforce is an error naming it, so a constrained answer always validates against its
 * schema. Two choices keep that promise simple and are documented in docs/llm.md:
 * - an object with declared properties admits no other keys (additionalProperties true is
 *   treated as false: a valid subset), since "any key but these" is not worth a grammar;
 * - oneOf is generated as anyOf, so its branches must not overlap (a value matching two
 *   branches would be invalid for oneOf); this is the case for discriminated unions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/llm/grammar.h"
#include "core/buf.h"
#include "core/json.h"

typedef struct {
  char *ref;
  char name[16];
} refname;

typedef struct {
  cbuf out;
  const json_value *root;
  int n_rules;
  refname *refs;
  int n_refs, cap_refs;
  cinfer_status *err;
} conv;

static void fail(conv *c, const char *ptr, const char *fmt, const char *arg) {
  if (c->err) return;
  c->err = cinfer_status_new(CINFER_INVALID_ARG, "JSON schema at '%s': %s%s%s", ptr[0] ? ptr : "/", fmt,
                             arg ? arg : "", arg ? "'" : "");
}

/* Whether s[0..n) is valid UTF-8 (a literal the model could write: its text is UTF-8). */
static bool utf8_ok(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *e = p + n;
  while (p < e) {
    unsigned c = *p++;
    int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (k < 0 || e - p < k) return false;
    uint32_t v = c & (0x3F >> k);
    for (int i = 0; i < k; i++, p++) {
      if ((*p & 0xC0) != 0x80) return false;
      v = v << 6 | (*p & 0x3F);
    }
    if ((k == 2 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (k == 3 && (v < 0x10000 || v > 0x10FFFF)))
      return false;
  }
  return true;
}

/* GBNF literal of bytes s[0..n) (quotes included). */
static void lit(cbuf *b, const char *s, size_t n) {
  cbuf_put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') cbuf_printf(b, "\\%c", ch);
    else if (ch < 0x20 || ch == 0x7F) cbuf_printf(b, "\\x%02X", ch);
    else cbuf_put(b, &s[i], 1);
  }
  cbuf_put(b, "\"", 1);
}

/* Compact JSON text of v (the one spelling an enum or const value is generated as). */
static void json_text(cbuf *b, const json_value *v) {
  switch (v->type) {
    case JSON_NULL: cbuf_puts(b, "null"); break;
    case JSON_TRUE: cbuf_puts(b, "true"); break;
    case JSON_FALSE: cbuf_puts(b, "false"); break;
    case JSON_NUMBER:
      if (v->u.num == floor(v->u.num) && fabs(v->u.num) < 9007199254740992.0) cbuf_printf(b, "%.0f", v->u.num);
      else cbuf_printf(b, "%.17g", v->u.num);
      break;
    case JSON_STRING: cbuf_json_string(b, v->u.str, v->len); break;
    case JSON_ARRAY:
      cbuf_puts(b, "[");
      for (const json_value *e = v->u.child; e; e = e->next) {
        json_text(b, e);
        if (e->next) cbuf_puts(b, ",");
      }
      cbuf_puts(b, "]");
      break;
    case JSON_OBJECT:
      cbuf_puts(b, "{");
      for (const json_value *e = v->u.child; e; e = e->next) {
        cbuf_json_string(b, e->key, strlen(e->key));
        cbuf_puts(b, ":");
        json_text(b, e);
        if (e->next) cbuf_puts(b, ",");
      }
      cbuf_puts(b, "}");
      break;
  }
}

static const char *const annotations[] = {"title", "description", "default", "examples", "$schema",
                                          "$id", "$comment", "$defs", "definitions", "deprecated",
                                          "readOnly", "writeOnly", NULL};
static const char *const known[] = {"type", "properties", "required", "additionalProperties", "items",
                                    "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
                                    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", NULL};

static bool in_list(const char *k, const char *const *l) {
  for (; *l; l++)
    if (!strcmp(k, *l)) return true;
  return false;
}

static bool gen(conv *c, const json_value *s, const char *ptr, char name[16]);

/* A non-negative integer keyword no larger than LLM_GRAMMAR_MAX_REPEAT; -1 when absent. */
static long count_kw(conv *c, const json_value *s, const char *kw, const char *ptr) {
  const json_value *v = json_get(s, kw);
  if (!v) return -1;
  if (!json_is(v, JSON_NUMBER) || v->u.num < 0 || v->u.num != floor(v->u.num)) {
    fail(c, ptr, "must be a non-negative integer: '", kw);
    return -2;
  }
  if (v->u.num > LLM_GRAMMAR_MAX_REPEAT) {
    char m[64];
    snprintf(m, sizeof m, "is above %d (not supported): '", LLM_GRAMMAR_MAX_REPEAT);
    fail(c, ptr, m, kw);
    return -2;
  }
  return (long)v->u.num;
}

/* item{lo,hi} as GBNF; hi < 0: unbounded. */
static void repeat(cbuf *b, const char *item, long lo, long hi) {
  if (hi < 0) {
    for (long i = 0; i < lo; i++) cbuf_printf(b, " %s", item);
    cbuf_printf(b, " (%s)*", item);
  } else {
    cbuf_printf(b, " (%s){%ld,%ld}", item, lo, hi);
  }
}

static char *child_ptr(const char *ptr, const char *a, const char *b) {
  size_t n = strlen(ptr) + strlen(a) + (b ? strlen(b) : 0) + 3;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s%s%s", ptr, a, b ? "/" : "", b ? b : "");
  return p;
}

static bool gen_child(conv *c, const json_value *s, const char *ptr, const char *a, const char *b, char name[16]) {
  char *p = child_ptr(ptr, a, b);
  if (!p) {
    if (!c->err) c->err = cinfer_status_oom("JSON schema");
    return false;
  }
  bool ok = gen(c, s, p, name);
  free(p);
  return ok;
}

static bool gen_object(conv *c, const json_value *s, const char *ptr, cbuf *rhs) {
  const json_value *props = json_get(s, "properties"), *req = json_get(s, "required"),
                   *addl = json_get(s, "additionalProperties");
  if (props && !json_is(props, JSON_OBJECT)) {
    fail(c, ptr, "'properties' must be an object", NULL);
    return false;
  }
  if (req && !json_is(req, JSON_ARRAY)) {
    fail(c, ptr, "'required' must be an array of names", NULL);
    return false;
  }
  for (const json_value *r = req ? req->u.child : NULL; r; r = r->next) {
    if (!json_is(r, JSON_STRING) || !json_get(props, r->u.str)) {
      fail(c, ptr, "'required' names a property that 'properties' does not declare", NULL);
      return false;
    }
  }
  if (!props || !props->len) {
    if (addl && addl->type == JSON_FALSE) {
      cbuf_puts(rhs, "\"{\" j-ws \"}\" j-ws");
    } else if (!addl || addl->type == JSON_TRUE) {
      cbuf_puts(rhs, "j-object");
    } else { /* a map: string keys, values by the schema */
      char v[16];
      if (!gen_child(c, addl, ptr, "additionalProperties", NULL, v)) return false;
      cbuf_printf(rhs, "\"{\" j-ws ( j-string \":\" j-ws %s (\",\" j-ws j-string \":\" j-ws %s)* )? \"}\" j-ws", v, v);
    }
    return true;
  }
  if (addl && addl->type != JSON_FALSE && addl->type != JSON_TRUE) {
    fail(c, ptr, "'additionalProperties' with a schema next to 'properties' is not supported", NULL);
    return false;
  }
  /* Declared order; optional properties may be left out. Rules first_i / after_i: the
   * properties from i on, before anything was written / after something was. */
  int n = (int)props->len, base = c->n_rules;
  c->n_rules += 2 * (n + 1);
  char (*vals)[16] = calloc((size_t)n, sizeof *vals);
  bool *required = calloc((size_t)n, 1);
  if (!vals || !required) {
    free(vals);
    free(required);
    if (!c->err) c->err = cinfer_status_oom("JSON schema");
    return false;
  }
  int i = 0;
  for (const json_value *p = props->u.child; p; p = p->next, i++) {
    for (const json_value *r = req ? req->u.child : NULL; r; r = r->next)
      if (!strcmp(r->u.str, p->key)) required[i] = true;
    if (!gen_child(c, p, ptr, "properties", p->key, vals[i])) break;
  }
  if (!c->err) {
    i = 0;
    for (const json_value *p = props->u.child; p; p = p->next, i++) {
      cbuf kv = {0};
      cbuf key = {0};
      cbuf_json_string(&key, p->key, strlen(p->key));
      if (!key.oom && !utf8_ok(key.data, key.len)) {
        fail(c, ptr, "a property name is not valid UTF-8", NULL);
        cbuf_free(&key);
        cbuf_free(&kv);
        break;
      }
      lit(&kv, key.data, key.len);
      cbuf_printf(&kv, " j-ws \":\" j-ws %s", vals[i]);
      /* first_i ::= kv after_(i+1) [| first_(i+1)] ;  after_i ::= "," j-ws kv after_(i+1) [| after_(i+1)] */
      cbuf_printf(&c->out, "s%d ::= %s s%d%s", base + 2 * i, kv.data ? kv.data : "", base + 2 * (i + 1) + 1,
                  required[i] ? "" : " | ");
      if (!required[i]) cbuf_printf(&c->out, "s%d", base + 2 * (i + 1));
      cbuf_printf(&c->out, "\ns%d ::= \",\" j-ws %s s%d%s", base + 2 * i + 1, kv.data ? kv.data : "",
                  base + 2 * (i + 1) + 1, required[i] ? "" : " | ");
      if (!required[i]) cbuf_printf(&c->out, "s%d", base + 2 * (i + 1) + 1);
      cbuf_puts(&c->out, "\n");
      if (kv.oom || key.oom) c->out.oom = true;
      cbuf_free(&kv);
      cbuf_free(&key);
    }
    cbuf_printf(&c->out, "s%d ::= \ns%d ::= \n", base + 2 * n, base + 2 * n + 1);
    cbuf_printf(rhs, "\"{\" j-ws s%d \"}\" j-ws", base);
  }
  free(vals);
  free(required);
  return !c->err;
}

static bool gen_array(conv *c, const json_value *s, const char *ptr, cbuf *rhs) {
  const json_value *items = json_get(s, "items"), *prefix = json_get(s, "prefixItems");
  long lo = count_kw(c, s, "minItems", ptr), hi = count_kw(c, s, "maxItems", ptr);
  if (lo == -2 || hi == -2) return false;
  if (lo < 0) lo = 0;
  if (hi >= 0 && hi < lo) {
    fail(c, ptr, "'maxItems' is below 'minItems'", NULL);
    return false;
  }
  if (prefix) {
    if (!json_is(prefix, JSON_ARRAY) || !prefix->len) {
      fail(c, ptr, "'prefixItems' must be a non-empty array of schemas", NULL);
      return false;
    }
    if ((items && items->type != JSON_FALSE) || lo > (long)prefix->len || (hi >= 0 && hi != (long)prefix->len)) {
      fail(c, ptr, "'prefixItems' is supported as a fixed tuple only (no 'items', no other item counts)", NULL);
      return false;
    }
    cbuf_puts(rhs, "\"[\" j-ws");
    int k = 0;
    for (const json_value *e = prefix->u.child; e; e = e->next, k++) {
      char nm[16], idx[16];
      snprintf(idx, sizeof idx, "%d", k);
      if (!gen_child(c, e, ptr, "prefixItems", idx, nm)) return false;
      cbuf_printf(rhs, "%s %s", k ? " \",\" j-ws" : "", nm);
    }
    cbuf_puts(rhs, " \"]\" j-ws");
    return true;
  }
  char item[16] = "j-value";
  if (items && items->type != JSON_TRUE) {
    if (items->type == JSON_FALSE) {
      if (lo > 0) {
        fail(c, ptr, "'items' is false but 'minItems' asks for items", NULL);
        return false;
      }
      cbuf_puts(rhs, "\"[\" j-ws \"]\" j-ws");
      return true;
    }
    if (!gen_child(c, items, ptr, "items", NULL, item)) return false;
  }
  char more[40];
  snprintf(more, sizeof more, "\",\" j-ws %s", item);
  cbuf_puts(rhs, "\"[\" j-ws");
  if (lo == 0) {
    if (hi == 0) {
      cbuf_puts(rhs, " \"]\" j-ws");
      return true;
    }
    cbuf_printf(rhs, " ( %s", item);
    repeat(rhs, more, 0, hi < 0 ? -1 : hi - 1);
    cbuf_puts(rhs, " )?");
  } else {
    cbuf_printf(rhs, " %s", item);
    repeat(rhs, more, lo - 1, hi < 0 ? -1 : hi - 1);
  }
  cbuf_puts(rhs, " \"]\" j-ws");
  return true;
}

static bool gen_type(conv *c, const json_value *s, const char *type, const char *ptr, cbuf *rhs) {
  if (!strcmp(type, "string")) {
    long lo = count_kw(c, s, "minLength", ptr), hi = count_kw(c, s, "maxLength", ptr);
    if (lo == -2 || hi == -2) return false;
    if (lo < 0 && hi < 0) {
      cbuf_puts(rhs, "j-string");
      return true;
    }
    if (lo < 0) lo = 0;
    if (hi >= 0 && hi < lo) {
      fail(c, ptr, "'maxLength' is below 'minLength'", NULL);
      return false;
    }
    cbuf_puts(rhs, "\"\\\"\"");
    repeat(rhs, "j-char", lo, hi);
    cbuf_puts(rhs, " \"\\\"\" j-ws");
    return true;
  }
  if (!strcmp(type, "integer") || !strcmp(type, "number") || !strcmp(type, "boolean") || !strcmp(type, "null")) {
    cbuf_printf(rhs, "j-%s", type);
    return true;
  }
  if (!strcmp(type, "object")) return gen_object(c, s, ptr, rhs);
  if (!strcmp(type, "array")) return gen_array(c, s, ptr, rhs);
  fail(c, ptr, "unknown type '", type);
  return false;
}

static bool resolve_ref(conv *c, const char *ref, const char *ptr, char name[16]) {
  for (int i = 0; i < c->n_refs; i++)
    if (!strcmp(c->refs[i].ref, ref)) {
      memcpy(name, c->refs[i].name, 16);
      return true;
    }
  const json_value *target = NULL;
  if (!strcmp(ref, "#")) {
    target = c->root;
  } else if (!strncmp(ref, "#/$defs/", 8) && !strchr(ref + 8, '/')) {
    target = json_get(json_get(c->root, "$defs"), ref + 8);
  } else if (!strncmp(ref, "#/definitions/", 14) && !strchr(ref + 14, '/')) {
    target = json_get(json_get(c->root, "definitions"), ref + 14);
  } else {
    fail(c, ptr, "only local references '#', '#/$defs/NAME' and '#/definitions/NAME' are supported: '", ref);
    return false;
  }
  if (!target) {
    fail(c, ptr, "'$ref' names a definition that does not exist: '", ref);
    return false;
  }
  if (c->n_refs == c->cap_refs) {
    int nc = c->cap_refs ? c->cap_refs * 2 : 8;
    refname *nr = realloc(c->refs, (size_t)nc * sizeof *nr);
    if (!nr) {
      if (!c->err) c->err = cinfer_status_oom("JSON schema");
      return false;
    }
    c->refs = nr;
    c->cap_refs = nc;
  }
  refname *r = &c->refs[c->n_refs];
  if (!(r->ref = strdup(ref))) {
    if (!c->err) c->err = cinfer_status_oom("JSON schema");
    return false;
  }
  snprintf(r->name, sizeof r->name, "s%d", c->n_rules++);
  c->n_refs++;
  memcpy(name, r->name, 16);
  /* the named rule is an alias of the target's rule (defined after, so recursion works) */
  char inner[16];
  if (!gen(c, target, ref + 1, inner)) return false;
  cbuf_printf(&c->out, "%s ::= %s\n", name, inner);
  return true;
}

static bool gen(conv *c, const json_value *s, const char *ptr, char name[16]) {
  if (c->err) return false;
  if (s->type == JSON_TRUE || (s->type == JSON_OBJECT && !s->len)) {
    strcpy(name, "j-value");
    return true;
  }
  if (s->type != JSON_OBJECT) {
    fail(c, ptr, s->type == JSON_FALSE ? "the schema 'false' admits no value" : "a schema must be an object or a boolean", NULL);
    return false;
  }
  for (const json_value *k = s->u.child; k; k = k->next) {
    if (in_list(k->key, annotations) || in_list(k->key, known)) continue;
    fail(c, ptr, "unsupported keyword (its constraint would not be enforced): '", k->key);
    return false;
  }
  const json_value *ref = json_get(s, "$ref");
  if (ref) {
    for (const json_value *k = s->u.child; k; k = k->next)
      if (strcmp(k->key, "$ref") && in_list(k->key, known)) {
        fail(c, ptr, "'$ref' next to another constraining keyword is not supported: '", k->key);
        return false;
      }
    if (!json_is(ref, JSON_STRING)) {
      fail(c, ptr, "'$ref' must be a string", NULL);
      return false;
    }
    return resolve_ref(c, ref->u.str, ptr, name);
  }
  int id = c->n_rules++;
  snprintf(name, 16, "s%d", id);
  cbuf rhs = {0};
  const json_value *en = json_get(s, "enum"), *cn = json_get(s, "const"), *type = json_get(s, "type");
  const json_value *any = json_get(s, "anyOf") ? json_get(s, "anyOf") : json_get(s, "oneOf");
  const json_value *all = json_get(s, "allOf");
  int n_comb = !!en + !!cn + !!json_get(s, "anyOf") + !!json_get(s, "oneOf") + !!all;
  if (n_comb > 1 || (n_comb && type)) {
    fail(c, ptr, "combine at most one of 'enum', 'const', 'anyOf', 'oneOf', 'allOf', and not with 'type'", NULL);
  } else if (en || cn) {
    if (en && (!json_is(en, JSON_ARRAY) || !en->len)) {
      fail(c, ptr, "'enum' must be a non-empty array", NULL);
    } else {
      const json_value *v = en ? en->u.child : cn;
      for (; v; v = en ? v->next : NULL) {
        cbuf t = {0};
        json_text(&t, v);
        if (!t.oom && !utf8_ok(t.data ? t.data : "", t.len)) {
          fail(c, ptr, "an 'enum' or 'const' value is not valid UTF-8", NULL);
          cbuf_free(&t);
          break;
        }
        if (rhs.len) cbuf_puts(&rhs, " | ");
        lit(&rhs, t.data ? t.data : "", t.len);
        cbuf_puts(&rhs, " j-ws");
        if (t.oom) rhs.oom = true;
        cbuf_free(&t);
      }
    }
  } else if (any || all) {
    const json_value *arr = any ? any : all;
    const char *kw = any ? (json_get(s, "anyOf") ? "anyOf" : "oneOf") : "allOf";
    if (!json_is(arr, JSON_ARRAY) || !arr->len) {
      fail(c, ptr, "must be a non-empty array of schemas: '", kw);
    } else if (all && arr->len != 1) {
      fail(c, ptr, "'allOf' is supported with one member only", NULL);
    } else {
      int k = 0;
      for (const json_value *e = arr->u.child; e && !c->err; e = e->next, k++) {
        char nm[16], idx[16];
        snprintf(idx, sizeof idx, "%d", k);
        if (gen_child(c, e, ptr, kw, idx, nm)) cbuf_printf(&rhs, "%s%s", k ? " | " : "", nm);
      }
    }
  } else if (type) {
    if (json_is(type, JSON_STRING)) {
      gen_type(c, s, type->u.str, ptr, &rhs);
    } else if (json_is(type, JSON_ARRAY) && type->len) {
      for (const json_value *t = type->u.child; t && !c->err; t = t->next) {
        if (!json_is(t, JSON_STRING)) {
          fail(c, ptr, "'type' must be a string or an array of strings", NULL);
          break;
        }
        if (rhs.len) cbuf_puts(&rhs, " | ");
        cbuf_puts(&rhs, "(");
        gen_type(c, s, t->u.str, ptr, &rhs);
        cbuf_puts(&rhs, ")");
      }
    } else {
      fail(c, ptr, "'type' must be a string or an array of strings", NULL);
    }
  } else if (json_get(s, "properties") || json_get(s, "additionalProperties") || json_get(s, "required")) {
    gen_object(c, s, ptr, &rhs);
  } else if (json_get(s, "items") || json_get(s, "prefixItems")) {
    gen_array(c, s, ptr, &rhs);
  } else {
    cbuf_puts(&rhs, "j-value"); /* annotations only */
  }
  if (!c->err) cbuf_printf(&c->out, "s%d ::= %s\n", id, rhs.data ? rhs.data : "");
  if (rhs.oom && !c->err) c->err = cinfer_status_oom("JSON schema");
  cbuf_free(&rhs);
  return !c->err;
}

static const char primitives[] =
    "j-ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "j-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "j-string ::= \"\\\"\" j-char* \"\\\"\" j-ws\n"
    "j-int ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15})\n"
    "j-integer ::= j-int j-ws\n"
    "j-number ::= j-int (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? j-ws\n"
    "j-boolean ::= (\"true\" | \"false\") j-ws\n"
    "j-null ::= \"null\" j-ws\n"
    "j-value ::= j-object | j-array | j-string | j-number | j-boolean | j-null\n"
    "j-object ::= \"{\" j-ws ( j-string \":\" j-ws j-value (\",\" j-ws j-string \":\" j-ws j-value)* )? \"}\" j-ws\n"
    "j-array ::= \"[\" j-ws ( j-value (\",\" j-ws j-value)* )? \"]\" j-ws\n";

static cinfer_status *translate(const char *schema, size_t len, bool or_text, char **gbnf) {
  *gbnf = NULL;
  json_doc *d;
  cinfer_status *st = json_parse(schema, len, 64, &d);
  if (st) return st;
  conv c = {.root = json_root(d)};
  char top[16];
  if (gen(&c, c.root, "", top)) {
    if (or_text) /* free text may not begin like JSON (nor with blanks before it) */
      cbuf_printf(&c.out, "root ::= j-ws %s | [^[{ \\t\\n\\r] j-any*\nj-any ::= [^\\x00]\n%s", top, primitives);
    else
      cbuf_printf(&c.out, "root ::= j-ws %s\n%s", top, primitives);
    if (c.out.oom) c.err = cinfer_status_oom("JSON schema");
  }
  for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
  free(c.refs);
  json_doc_free(d);
  if (c.err) {
    cbuf_free(&c.out);
    return c.err;
  }
  *gbnf = cbuf_take(&c.out);
  return *gbnf ? NULL : cinfer_status_oom("JSON schema");
}

cinfer_status *llm_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf) {
  return translate(schema, len, false, gbnf);
}

cinfer_status *llm_json_schema_or_text_gbnf(const char *schema, size_t len, char **gbnf) {
  return translate(schema, len, true, gbnf);
}
