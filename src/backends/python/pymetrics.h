/* pymetrics.h: custom metrics of Python models (pb_utils.MetricFamily / Metric) in the
 * server's /metrics registry (docs/design/python-backend.md, "Custom metrics"). */
#ifndef CINFER_PYTHON_PYMETRICS_H
#define CINFER_PYTHON_PYMETRICS_H
#include <pthread.h>
#include <stdint.h>

#include "core/buf.h"

struct metrics_registry;
struct metric;
struct json_value;

/* The Metric objects one stub process holds: id -> series (a reference each). */
typedef struct pym_handle {
  struct metric *series; /* NULL: a free slot */
  int kind;
} pym_handle;

typedef struct pym_table {
  pthread_mutex_t mu;
  pym_handle *h;
  uint32_t n, cap;
} pym_table;

void pym_table_init(pym_table *t);
/* Drops every reference the process held (its metrics leave /metrics unless another
 * process holds the same series). */
void pym_table_clear(pym_table *t);
void pym_table_destroy(pym_table *t);

/* One "metric" message of the stub (ops family, new, inc, set, observe, value, delete).
 * Appends the reply object's members ("id":..., "value":..., or "error":{...}) to reply
 * (sent when the message carries "call"). reg NULL: metrics unavailable. */
void pym_on_message(pym_table *t, struct metrics_registry *reg, const char *model,
                    const struct json_value *root, cbuf *reply);
#endif
