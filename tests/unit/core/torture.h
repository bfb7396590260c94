/* torture.h: curl's "torture" allocation failure for one test file (include it once, in
 * the .c file; link the test with -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc
 * -Wl,--wrap=strdup -Wl,--wrap=strndup, and -Wl,--wrap=posix_memalign when the file defines
 * TORTURE_WRAP_POSIX_MEMALIGN before including this).
 *
 * On threads where torture_armed is set, torture_budget allocations succeed and every one
 * after them fails (each counted in torture_failures); torture_budget -1 never fails.
 * Other threads (workers, the reaper, cmocka itself) allocate normally. A test sets the
 * budget to 0, 1, 2, ... in turn, runs the code under test each time, and stops when a run
 * needed fewer allocations than its budget (torture_failures == 0). */
#ifndef CINFER_TEST_TORTURE_H
#define CINFER_TEST_TORTURE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static _Thread_local bool torture_armed;
static long torture_budget = -1;
static long torture_failures;

static bool torture_should_fail(void) {
  if (!torture_armed || torture_budget < 0) return false;
  if (torture_budget == 0) {
    torture_failures++;
    return true;
  }
  torture_budget--;
  return false;
}

void *__wrap_malloc(size_t n) { return torture_should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { return torture_should_fail() ? NULL : __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { return torture_should_fail() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return torture_should_fail() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return torture_should_fail() ? NULL : __real_strndup(s, n); }
#ifdef TORTURE_WRAP_POSIX_MEMALIGN
int __real_posix_memalign(void **p, size_t align, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  return torture_should_fail() ? ENOMEM : __real_posix_memalign(p, align, n);
}
#endif

/* cJSON_Hooks that go through the wrappers (cJSON is a shared library: its malloc calls
 * are not wrapped by the linker). */
static inline void *torture_hook_malloc(size_t n) { return __wrap_malloc(n); }
static inline void torture_hook_free(void *p) { free(p); }

#endif
