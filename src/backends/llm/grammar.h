/* grammar.h: constrained decoding. A context-free grammar in GBNF (the notation llama.cpp
 * accepts) is compiled once into flat rules; each sequence that decodes under it keeps a set
 * of parse stacks, and before every sampling step the tokens whose bytes cannot continue any
 * stack are masked out. Output is valid by construction: a token is chosen only if the grammar
 * can still accept what it spells, and end-of-generation only when the grammar accepts.
 *
 * GBNF as llama.cpp documents it (grammars/README.md there):
 *   root  ::= "{" ws pair ("," ws pair)* "}"      # rule ::= alternatives, one rule a line
 *   pair  ::= [a-z]+ ":" ws ( "true" | "false" )  # literals, [classes], [^negated], .
 *   ws    ::= [ \t\n]{0,20}                        # * + ? {m} {m,} {m,n}, ( groups ), # comment
 * Escapes in literals and classes: \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH.
 * A rule's alternatives continue on the next line only after a `|` or inside parentheses.
 * Left recursion (a rule that can reach itself before consuming a character) is refused at
 * compile time, naming the rule; so is a reference to an undefined rule, and a repetition
 * bound above LLM_GRAMMAR_MAX_REPEAT.
 *
 * Matching is on Unicode code points; a token may end inside a UTF-8 sequence (byte-level
 * vocabularies split characters), and that partial character is carried to the next token.
 *
 * Thread-safety: a compiled grammar is immutable and reference-counted (share it between
 * sequences); a state belongs to one sequence. */
#ifndef CINFER_LLM_GRAMMAR_H
#define CINFER_LLM_GRAMMAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/llm/tokenizer.h"
#include "cinfer/types.h"

#define LLM_GRAMMAR_MAX_REPEAT 1000     /* largest m/n of {m,n} */
#define LLM_GRAMMAR_MAX_ELEMENTS 200000 /* compiled size bound (after repetition expansion) */
#define LLM_GRAMMAR_MAX_STACKS 4096     /* live parse stacks: more = too ambiguous a grammar */

typedef struct llm_grammar llm_grammar;

/* Compiles GBNF text; the start rule is `root`. INVALID_ARG with "line L, column C: ..." when
 * the text is not valid GBNF or the grammar cannot be used. *out has one reference. */
cinfer_status *llm_grammar_compile(const char *text, size_t len, llm_grammar **out);
llm_grammar *llm_grammar_ref(llm_grammar *g);
void llm_grammar_unref(llm_grammar *g); /* NULL is fine */

/* GBNF of any JSON value whose top level is an object (response_format json_object). */
const char *llm_grammar_json_object_gbnf(void);
/* Translates a JSON Schema (text) into GBNF. Supported: type (string, number, integer,
 * boolean, null, object, array, or a list of these), properties/required (properties in the
 * schema's order, optional ones may be left out), additionalProperties (false or absent: no
 * other keys; true or a schema: more keys after the declared ones), items, prefixItems,
 * minItems/maxItems, minLength/maxLength, enum, const, anyOf/oneOf, allOf with one member,
 * $ref to "#/$defs/..." or "#/definitions/..." (recursion allowed), and the annotations
 * (title, description, default, examples, $schema, $id, $comment) which are ignored. Any
 * other keyword constrains values in a way this translation would not enforce, so it is an
 * INVALID_ARG naming the keyword and its JSON pointer: output is valid by construction or the
 * request is refused. *gbnf is NUL-terminated, caller frees. */
cinfer_status *llm_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf);
/* The same, or free text that does not begin with '[', '{' or a blank (tool_choice "auto":
 * the model answers in prose or makes calls that always parse). */
cinfer_status *llm_json_schema_or_text_gbnf(const char *schema, size_t len, char **gbnf);

/* The vocabulary as a byte trie, built once per tokenizer (control tokens are left out: they
 * are never allowed under a grammar, except end-of-generation when the grammar accepts). */
typedef struct llm_grammar_vocab llm_grammar_vocab;
cinfer_status *llm_grammar_vocab_create(const llm_tokenizer *t, llm_grammar_vocab **out);
void llm_grammar_vocab_destroy(llm_grammar_vocab *v);

/* Per-sequence parse state. */
typedef struct llm_grammar_state llm_grammar_state;
cinfer_status *llm_grammar_state_create(llm_grammar *g, llm_grammar_state **out); /* refs g */
void llm_grammar_state_destroy(llm_grammar_state *s);

/* Sets logits[id] = -INFINITY for every token that the grammar does not allow next (end-of-
 * generation tokens are allowed exactly when the grammar accepts the text so far). Returns
 * the number of tokens allowed: 0 when no token of the vocabulary can continue (the caller
 * ends the sequence with an error), -1 when memory ran out or the grammar needed more than
 * LLM_GRAMMAR_MAX_STACKS parse stacks (logits are then unchanged). */
int llm_grammar_mask(llm_grammar_state *s, const llm_grammar_vocab *v, const llm_tokenizer *t,
                     float *logits, int n_vocab);
/* Whether one token is allowed next (cheap; for trying the sampled token before masking). */
bool llm_grammar_allows(llm_grammar_state *s, const llm_tokenizer *t, int32_t id);
/* Advances the state over a token's bytes; false (state unchanged) when it does not fit. */
bool llm_grammar_accept(llm_grammar_state *s, const llm_tokenizer *t, int32_t id);
/* The text so far is a complete sentence of the grammar / nothing more can follow it. */
bool llm_grammar_can_end(const llm_grammar_state *s);
bool llm_grammar_must_end(const llm_grammar_state *s);
/* Accepts raw text (tests and the CLI's --grammar-check): false when it does not fit. */
bool llm_grammar_accept_text(llm_grammar_state *s, const char *text, size_t n);

#endif
