/* jinja.h: the subset of Jinja2 that chat templates (tokenizer.chat_template in GGUF files,
 * from Hugging Face tokenizer_config.json) are written in, rendered as transformers does it
 * (trim_blocks and lstrip_blocks on).
 *
 * Supported: text, {{ expr }}, {% if / elif / else / endif %}, {% for x in xs [if cond] %}
 * (also `for a, b in ...`, {% else %} of a for) with loop.index/index0/first/last/length/
 * revindex/revindex0, {% set x = expr %} and {% set ns.attr = expr %}, {# comments #},
 * whitespace control (-), literals (strings, integers, floats, true/false/none, lists,
 * dicts), attribute and item access, slices, + - * / // % ~, comparisons, and/or/not,
 * in/not in, `a if c else b`; tests (defined, undefined, none, string, number, integer,
 * float, boolean, true, false, mapping, iterable, sequence, even, odd, equalto, eq, ne,
 * in); filters (trim, length/count, tojson, upper, lower, title, capitalize, string, int,
 * float, first, last, join, default/d, items, list, replace, reverse, round, abs, select/
 * reject with a test name, map(attribute=...), selectattr/rejectattr, unique, sort,
 * indent, safe, e/escape); functions raise_exception, range, namespace, strftime_now;
 * string methods strip/lstrip/rstrip/startswith/endswith/split/upper/lower/title/replace/
 * format-free; dict methods get/items/keys/values.
 *
 * Anything else (macro, call, include, extends, block, raw, with, filter blocks, an unknown
 * filter, test or function) fails compilation with an error naming the construct and its
 * line. */
#ifndef CINFER_LLM_JINJA_H
#define CINFER_LLM_JINJA_H
#include <stdbool.h>
#include <stddef.h>

#include "cinfer/types.h"

typedef struct llm_jinja llm_jinja;

cinfer_status *llm_jinja_compile(const char *src, size_t len, llm_jinja **out);
void llm_jinja_free(llm_jinja *t);

typedef struct llm_jinja_msg {
  const char *role, *content;
} llm_jinja_msg;

/* Renders with the variables messages (list of {role, content}), add_generation_prompt,
 * bos_token and eos_token. *out is NUL-terminated, caller frees. INVALID_ARG when the
 * template raises (raise_exception) or fails (e.g. '+' on a string and a number), with the
 * message and line. */
cinfer_status *llm_jinja_render(const llm_jinja *t, const llm_jinja_msg *msgs, size_t n, bool add_generation_prompt,
                                const char *bos_token, const char *eos_token, char **out);

#endif
