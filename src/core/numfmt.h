/* numfmt.h: shortest round-trip decimal text for floats and doubles (JSON output).
 *
 * numfmt_float / numfmt_double write the shortest "%.{p}g" text (p = 1, 2, ...) that
 * reads back (strtof / strtod, round-to-nearest-even) as exactly the same value, and
 * return its length. The text is byte-for-byte what that printf loop would print: the
 * reference implementations below do exactly that loop, and the unit tests compare the
 * fast paths with them. Non-finite values are the caller's business (JSON has no
 * spelling for them); they are written as printf would ("nan", "inf").
 *
 * The fast path does exact 128-bit integer arithmetic on the binary value; magnitudes
 * whose scaled form does not fit (roughly below 1e-20 or above 1e20) take the reference
 * path. No allocation; buf needs NUMFMT_BUF bytes. */
#ifndef CINFER_CORE_NUMFMT_H
#define CINFER_CORE_NUMFMT_H

#include <stddef.h>

#define NUMFMT_BUF 32

size_t numfmt_float(char *buf, float f);
size_t numfmt_double(char *buf, double d);

/* References: printf/strto* loops (slow, obviously right). */
size_t numfmt_float_ref(char *buf, float f);
size_t numfmt_double_ref(char *buf, double d);

#endif
