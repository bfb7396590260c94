/* openai_lp.h: pieces of the OpenAI logprobs JSON written straight into a buffer.
 *
 * The completions logprobs arrays were built by a cJSON parse and print of entries written
 * with cbuf_json_string_utf8 and "%.6g"; whole answers still are (openai.c,
 * put_completion_logprobs_of), and a stream's chunks must read the same, byte for byte. These
 * write what that round trip printed, without it:
 *   - a string: invalid UTF-8 bytes as U+FFFD; '"', '\\', \b, \f, \n, \r, \t escaped by
 *     name, other bytes below 0x20 as \u00xx; the text ends at a NUL byte (a cJSON string
 *     is a C string);
 *   - a number: the float rounded to 6 significant digits ("%.6g"), then printed as cJSON
 *     (1.7.15, Debian 12) prints a double: %1.15g, %1.17g when that does not read back (so
 *     -0 stays "-0"); a non-finite value as null. test_openai_lp checks all of it against
 *     the cJSON the project links. */
#ifndef CINFER_FRONTEND_OPENAI_LP_H
#define CINFER_FRONTEND_OPENAI_LP_H

#include <stddef.h>

#include "core/buf.h"

/* Writes s[0..n) as a JSON string (see above); *chars (if not NULL) grows by the string's
 * characters (code points), as text_offset counts them. */
void oai_lp_string(cbuf *b, const char *s, size_t n, int *chars);
void oai_lp_number(cbuf *b, float v);

#endif
