/* hex.h: the value of one hexadecimal digit, for every parser that decodes %XX, \uXXXX,
 * chunk sizes or <0xNN> byte tokens. */
#ifndef CINFER_CORE_HEX_H
#define CINFER_CORE_HEX_H

/* 0..15, or -1 when c is not a hex digit. Pass bytes as unsigned char values. */
static inline int hex_digit(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

#endif
