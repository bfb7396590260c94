/* test_metrics.c: the metrics registry. Series are reference-counted (metrics.h): a model
 * version and the version that replaces it on reload ask for the same labels, and each
 * removes its own reference; the series must survive the first removal and go with the
 * last (issue 15: the second reload freed the series twice). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

static char *render(metrics_registry *r) {
  char *t = NULL;
  size_t n = 0;
  assert_int_equal(metrics_render(r, &t, &n), 0);
  assert_int_equal(strlen(t), n);
  return t;
}

static void test_shared_series_survive_first_remove(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_create();
  assert_non_null(r);
  metric_family *f = metrics_family(r, "x_total", "help", METRIC_COUNTER, NULL, 0);
  const char *lab[] = {"model", "m", "version", "1", NULL};
  metric *a = metrics_series(f, lab); /* the old version */
  metric *b = metrics_series(f, lab); /* the reloaded one: same labels, same series */
  assert_ptr_equal(a, b);
  metric_inc(a, 2);
  metrics_series_remove(a); /* the old version is destroyed */
  metric_inc(b, 3);         /* the new one keeps counting (use after free before the fix) */
  char *t = render(r);
  assert_non_null(strstr(t, "x_total{model=\"m\",version=\"1\"} 5\n"));
  free(t);
  /* A third holder (the second reload), then every holder goes. */
  metric *c = metrics_series(f, lab);
  assert_ptr_equal(c, b);
  metrics_series_remove(b);
  metrics_series_remove(c);
  t = render(r);
  assert_null(strstr(t, "x_total"));
  free(t);
  metrics_series_remove(NULL);
  metrics_registry_destroy(r);
}

static void test_histogram_series_shared(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_create();
  const double bounds[] = {1, 2};
  metric_family *f = metrics_family(r, "h", "help", METRIC_HISTOGRAM, bounds, 2);
  const char *lab[] = {"k", "v", NULL};
  metric *a = metrics_series(f, lab), *b = metrics_series(f, lab);
  metric_observe(a, 1.5);
  metrics_series_remove(a);
  metric_observe(b, 0.5);
  assert_true(metric_value(b) == 2);
  char *t = render(r);
  assert_non_null(strstr(t, "h_bucket{k=\"v\",le=\"1\"} 1\n"));
  assert_non_null(strstr(t, "h_count{k=\"v\"} 2\n"));
  free(t);
  metrics_series_remove(b);
  metrics_registry_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shared_series_survive_first_remove),
      cmocka_unit_test(test_histogram_series_shared),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
