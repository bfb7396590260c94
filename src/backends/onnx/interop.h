/* interop.h: inter-op parallelism at 2 threads (interop.c): sections of a plan whose
 * steps fall into two independent groups, run at once on the pool (private). */
#ifndef CINFER_ONNX_INTEROP_H
#define CINFER_ONNX_INTEROP_H
#include "backends/onnx/plan.h"

/* p->sec / p->n_sec and each step's group (-1 outside a section); before memory_plan */
cinfer_status *interop_plan(onnx_plan *p);
/* runs the steps of one section: both groups at once on the current pool, or one after
 * the other when it runs alone */
cinfer_status *interop_run(onnx_plan *p, const plan_sec *sec, bool profile);

#endif
