/* buf.h: the growable byte buffer every subsystem builds text and bodies in (responses,
 * status pages, chat prompts, bench requests).
 *
 * Error model: an allocation failure sets `oom` and every later append is a no-op, so a
 * builder appends freely and checks `oom` once at the end. While !oom and data != NULL,
 * data[len] == 0 (the contents are always a C string as well as len bytes).
 * A zeroed cbuf is empty and valid; cbuf_free returns it to that state. */
#ifndef CINFER_CORE_BUF_H
#define CINFER_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cbuf {
  char *data;
  size_t len, cap;
  bool oom;
} cbuf;

/* Makes room for n more bytes (plus the terminator); false (and oom) when it cannot. */
bool cbuf_reserve(cbuf *b, size_t n);
void cbuf_put(cbuf *b, const void *p, size_t n);
void cbuf_puts(cbuf *b, const char *s);
void cbuf_printf(cbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) as a quoted, escaped JSON string. */
void cbuf_json_string(cbuf *b, const char *s, size_t n);
/* The same, and bytes that are not valid UTF-8 become U+FFFD (for text that may hold a
 * partial character, e.g. a single token's bytes). */
void cbuf_json_string_utf8(cbuf *b, const char *s, size_t n);
/* A parameter's value as JSON: true/false, an integer, a number (null when not finite: JSON
 * has no NaN or infinity) or a string. */
struct cinfer_param;
void cbuf_json_param_value(cbuf *b, const struct cinfer_param *p);
/* Hands the contents to the caller (malloc'd, NUL-terminated, "" when empty) and empties
 * b; NULL when an allocation failed (b is then freed). */
char *cbuf_take(cbuf *b);
void cbuf_free(cbuf *b);

struct cinfer_status;
/* Appends the whole file at path to b. INVALID_ARG naming the file when it cannot be
 * opened or read or is larger than max_bytes; INTERNAL (out of memory) when b cannot grow. */
struct cinfer_status *cbuf_read_file(cbuf *b, const char *path, size_t max_bytes);

#endif
