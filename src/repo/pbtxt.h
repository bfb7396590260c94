/* pbtxt.h: a parser for protobuf text format (the syntax of Triton's config.pbtxt) into a
 * generic, schema-less tree. The config layer (config.h) maps the tree onto typed fields.
 *
 * Accepted syntax (a superset of what real config.pbtxt files use):
 *   - `#` comments to end of line; whitespace anywhere between tokens.
 *   - fields `name: scalar`, messages `name { ... }` / `name < ... >`, with an optional `:`
 *     before a message; fields may be separated by `,` or `;`.
 *   - repeated fields written one per occurrence (`dims: 1 dims: 2`) or as a list
 *     (`dims: [1, 2]`, `step [ { ... }, { ... } ]`); a list expands to one node per element
 *     with the same name, so both spellings yield the same tree.
 *   - scalars: identifiers (enums, true/false, inf, nan), signed integers (decimal, 0x hex,
 *     leading-0 octal), floats (`1.5`, `.5`, `1e-3`, `2.5f`), strings in '...' or "..."
 *     with C escapes (\n \t \r \a \b \f \v \\ \' \" \? \xHH \ooo) and adjacent literals
 *     concatenated.
 *
 * Limits: input at most PBTXT_MAX_INPUT bytes, nesting at most PBTXT_MAX_DEPTH messages,
 * at most PBTXT_MAX_NODES nodes. The parser is iterative (an explicit stack), so no input
 * can make it recurse; pbtxt_free recurses at most PBTXT_MAX_DEPTH deep.
 *
 * Errors: "FILE:LINE:COL: message" where LINE/COL are 1-based and COL counts bytes, e.g.
 *   config.pbtxt:12:7: expected ':' or '{' after field name 'dims'
 */
#ifndef CINFER_REPO_PBTXT_H
#define CINFER_REPO_PBTXT_H

#include "cinfer/types.h"

#define PBTXT_MAX_INPUT (1u << 20) /* 1 MiB: real configs are a few KiB */
#define PBTXT_MAX_DEPTH 64
#define PBTXT_MAX_NODES (1u << 18)

typedef enum pbtxt_kind {
  PBTXT_MESSAGE = 0, /* children[] holds the fields */
  PBTXT_IDENT,       /* bare identifier: enum value, true/false, inf, nan; text in str */
  PBTXT_INT,         /* integer literal: value in neg/mag, source text in str */
  PBTXT_FLOAT,       /* floating literal: value in f, source text in str */
  PBTXT_STRING,      /* quoted string(s): decoded bytes in str/len (may hold NUL bytes) */
} pbtxt_kind;

typedef struct pbtxt_node pbtxt_node;
struct pbtxt_node {
  char *name;       /* field name; "" for the root */
  pbtxt_kind kind;
  int line, col;    /* position of the field name (1-based) */
  int vline, vcol;  /* position of the value (the '{' for messages) */
  bool in_list;     /* came from `name: [ ... ]` list syntax */
  bool json;        /* built from JSON (model_config_parse_json): a string may stand for an
                       integer (protobuf JSON writes 64-bit ints as strings) or an enum name */
  /* scalars: str is NUL-terminated; for PBTXT_STRING len excludes the terminator */
  char *str;
  size_t len;
  bool neg;         /* PBTXT_INT: a leading '-' */
  uint64_t mag;     /* PBTXT_INT: absolute value */
  double f;         /* PBTXT_FLOAT (also set for PBTXT_INT, for convenience) */
  /* messages */
  pbtxt_node **children;
  size_t n_children, cap_children;
};

/* Parses text[0..len) (need not be NUL-terminated). `path` names the source in error
 * messages (borrowed; "<input>" when NULL). On success *out is a new tree owned by the
 * caller (free with pbtxt_free); on failure *out is NULL and the status says where. */
cinfer_status *pbtxt_parse(const char *path, const char *text, size_t len, pbtxt_node **out);
void pbtxt_free(pbtxt_node *root);

/* Kind name for messages: "message", "identifier", "integer", "float", "string". */
const char *pbtxt_kind_name(pbtxt_kind k);

/* Value conversions. Each returns false when the node is of the wrong kind or the value is
 * out of range; none allocates. */
bool pbtxt_as_int64(const pbtxt_node *n, int64_t *out);
bool pbtxt_as_uint64(const pbtxt_node *n, uint64_t *out);
bool pbtxt_as_double(const pbtxt_node *n, double *out); /* ints, floats, inf/nan idents */
/* true/false/True/False/t/f (identifiers) and 1/0 (integers), as protobuf accepts. */
bool pbtxt_as_bool(const pbtxt_node *n, bool *out);

/* First child named `name`, or NULL. Borrowed. */
const pbtxt_node *pbtxt_child(const pbtxt_node *msg, const char *name);

#endif
