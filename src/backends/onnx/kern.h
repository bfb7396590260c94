/* kern.h: the ONNX engine's fast kernel families (private to src/backends/onnx), in
 * ggml's style: each family is a table entry of functions, the plan asks the table in a
 * fixed priority order, and a fast_kernel knows the entry that built it.
 *
 * Usage (plan.c, through the fast_* functions of plan.h, which walk kern_families[]):
 *   1. fusion queries while the plan is built: fast_takes_pre, fast_takes_dw,
 *      fast_can_take_blocked: true when some family's optional member says so;
 *   2. fast_prepare(p, s, keep, &k): the first family (in kern_families[] order) whose
 *      can_take(p, s, keep) is true runs prepare; a prepare that declines (NULL status,
 *      *k == NULL) passes the step to the next family; none left: the reference kernel;
 *   3. fast_run(k, s, threads) -> k->family->run; fast_destroy(k) -> k->family->destroy.
 *
 * Invariants:
 *   1. every fast path has a reference kernel (ops.c, ops_nn.c) and is compared with it by
 *      tests/unit/onnx/test_onnx_families.c, which walks this table: a family without test
 *      cases, or whose cases it does not take, fails that test;
 *   2. no family is asked anything when the plan has no_fast (the dispatcher checks);
 *   3. a step with a blocked input (p->layout[] set) that no family takes is an internal
 *      error, never a reference kernel run on blocked data;
 *   4. run never allocates; everything it needs is in the kernel or in s->temp[];
 *   5. names are unique: the profile's kernel column shows them ("ref" for no family). */
#ifndef CINFER_ONNX_KERN_H
#define CINFER_ONNX_KERN_H
#include "backends/onnx/plan.h"

typedef struct kern_family {
  const char *name; /* the profile's kernel column */
  /* Whether the family takes step s (keep: every consumer of s's output reads blocked
   * layouts). Required; reads p and s only. */
  bool (*can_take)(const onnx_plan *p, const plan_step *s, bool keep);
  /* Builds s's kernel into *k (k->family set by the dispatcher); may declare s's output
   * layout (p->layout, p->bytes) and s->temp_bytes. NULL status with *k == NULL: declined,
   * the next family is asked. Required. */
  cinfer_status *(*prepare)(onnx_plan *p, plan_step *s, bool keep, fast_kernel **k);
  /* Runs k on s's buffers. Required. */
  cinfer_status *(*run)(fast_kernel *k, plan_step *s, int threads);
  /* Frees k (never NULL) and what it owns. Required. */
  void (*destroy)(fast_kernel *k);
  /* optional: the profile's kernel column for k (default: name) */
  const char *(*label)(const fast_kernel *k);
  /* Optional, NULL meaning false: the family reads input j of s in a blocked layout
   * (plan.c keeps a producer's output blocked only when every consumer does). */
  bool (*reads_blocked)(const onnx_plan *p, const plan_step *s, int j);
  /* Optional, NULL meaning false: the family applies s->pre (fused input ops). */
  bool (*takes_pre)(const onnx_plan *p, const plan_step *s);
  /* Optional, NULL meaning false: the family runs s with t (a depthwise conv) fused as s->dw. */
  bool (*takes_dw)(const onnx_plan *p, const plan_step *s, const plan_step *t);
  /* Optional, NULL meaning true: the family can run in this process (for a family that
   * handles only one of the block sizes kern_block() may answer; none at present: winograd
   * and pool8c take nChw8c and nChw16c). The dispatcher never asks an unavailable family
   * anything; test_onnx_families checks that it never runs. */
  bool (*available)(void);
} kern_family;

/* The first member of every family's kernel struct. */
struct fast_kernel {
  const kern_family *family;
};

/* The block of the plan's blocked values: 16 (nChw16c) when oneDNN runs AVX-512 code
 * (its convolutions' layout there), else 8 (nChw8c, AVX2). Fixed once the engine exists
 * (kern.c); DNNL_MAX_CPU_ISA=AVX2 gives 8 on an AVX-512 host. */
int kern_block(void);

/* whether family f runs in this process (its available member) */
bool kern_family_available(const kern_family *f);

/* In priority order (kern.c); kern_n_families entries. */
extern const kern_family *const kern_families[];
extern const int kern_n_families;

/* the entries, one file each (kern_<file>.c) */
extern const kern_family kern_exp;         /* kern_exp.c */
extern const kern_family kern_softmax;     /* kern_softmax.c */
extern const kern_family kern_pool8c;      /* kern_pool.c */
extern const kern_family kern_dnnlpool;    /* kern_pool.c */
extern const kern_family kern_blocked;     /* kern_blocked.c */
extern const kern_family kern_smallk;      /* kern_smallk.c */
extern const kern_family kern_winograd;    /* kern_winograd.c */
extern const kern_family kern_onednn_conv; /* kern_onednn_conv.c */
#endif
