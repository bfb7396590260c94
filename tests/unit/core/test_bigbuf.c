/* test_bigbuf.c: the large-buffer cache: alignment and size, reuse of a given-back buffer
 * for a request of the same order of size (not for one more than twice smaller, nor larger),
 * small buffers never cached, and the slot and byte bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/bigbuf.h"

static void test_reuse_and_bounds(void **state) {
  (void)state;
  size_t cap;
  char *a = bigbuf_get(4u << 20, &cap);
  assert_non_null(a);
  assert_true(cap >= (4u << 20));
  assert_int_equal((uintptr_t)a % 64, 0);
  memset(a, 1, cap);
  bigbuf_put(a, cap);
  size_t cap2;
  char *b = bigbuf_get((3u << 20) + 5, &cap2); /* fits, and not more than twice smaller */
  assert_ptr_equal(a, b);
  assert_int_equal(cap2, cap);
  bigbuf_put(b, cap2);
  size_t cap3;
  char *c = bigbuf_get(1u << 20, &cap3); /* 4 MiB is more than twice 1 MiB: a new one */
  assert_ptr_not_equal(c, a);
  size_t cap4;
  char *d = bigbuf_get(8u << 20, &cap4); /* larger than the cached one: a new one */
  assert_ptr_not_equal(d, a);
  bigbuf_put(c, cap3);
  bigbuf_put(d, cap4);
  size_t cs;
  char *s = bigbuf_get(100, &cs); /* small: plain, rounded to 64 */
  assert_int_equal(cs, 128);
  bigbuf_put(s, cs);
  /* at most BIGBUF_SLOTS buffers are kept: the extra ones are freed (ASan checks both) */
  void *many[BIGBUF_SLOTS + 4];
  size_t caps[BIGBUF_SLOTS + 4];
  for (int i = 0; i < BIGBUF_SLOTS + 4; i++) assert_non_null(many[i] = bigbuf_get(2u << 20, &caps[i]));
  for (int i = 0; i < BIGBUF_SLOTS + 4; i++) bigbuf_put(many[i], caps[i]);
  bigbuf_put(NULL, 0);
  assert_null(bigbuf_get(SIZE_MAX - 10, &cs)); /* overflow of the rounding */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_reuse_and_bounds)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
