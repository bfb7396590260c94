/* guard_page.h: test buffers that end flush against a PROT_NONE page (picohttpparser's
 * trick, as tests/unit/net/test_http_parse.c does): a parser given (data, len) that reads
 * data[len] or beyond faults at once instead of reading neighbouring heap bytes. */
#ifndef TEST_GUARD_PAGE_H
#define TEST_GUARD_PAGE_H
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct guard {
  char *map;
  size_t maplen;
  char *data; /* data + len == the first byte of the PROT_NONE page */
} guard;

/* Copies src[0..len) to the end of fresh pages followed by an inaccessible one. */
static inline guard guard_place(const void *src, size_t len) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  size_t pages = (len + pg - 1) / pg + 1;
  guard g;
  g.maplen = (pages + 1) * pg;
  g.map = mmap(NULL, g.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(g.map != MAP_FAILED);
  assert_int_equal(mprotect(g.map + pages * pg, pg, PROT_NONE), 0);
  g.data = g.map + pages * pg - len;
  if (len) memcpy(g.data, src, len);
  return g;
}

static inline void guard_free(guard *g) { munmap(g->map, g->maplen); }
#endif
