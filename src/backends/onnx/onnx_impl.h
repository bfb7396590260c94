/* onnx_impl.h: private structures shared by the engine's files.
 *
 * Model (built once by loader.c, compiled by graph.c, then read-only):
 *   values[]  every named tensor: graph inputs, constants (initializers and folded
 *             results, `cval` owned), node outputs. Value ids index this array.
 *   nodes[]   in topological order after graph_compile(); a node refers to values by id,
 *             -1 for an absent optional input.
 * Plan (plan.c, one per distinct set of input shapes, owned by a session):
 *   vals[]    one ot per value id with the concrete shape; data points into the arena,
 *             into a constant, or into the caller's input buffer.
 *   steps[]   nodes to execute (statically computable nodes were evaluated at plan time).
 */
#ifndef CINFER_ONNX_IMPL_H
#define CINFER_ONNX_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/onnx/onnx.h"
#include "cinfer/types.h"

#define OT_MAX_DIMS CINFER_MAX_DIMS

/* A tensor inside the engine. `data` ownership is stated by whoever holds the ot. */
typedef struct ot {
  cinfer_dtype dtype;
  int ndim;
  int64_t dims[OT_MAX_DIMS];
  void *data;
} ot;

int64_t ot_numel(const ot *t);
/* Bytes of one element inside the engine: cinfer_dtype_size, and sizeof(ostr) for BYTES
 * (STRING), whose elements are descriptors (strings.c). */
size_t ot_esize(cinfer_dtype dt);
size_t ot_nbytes(const ot *t);
/* Allocates a tensor with malloc'd, 64-byte aligned, zeroed data (free with ot_free). */
ot *ot_new(cinfer_dtype dt, int ndim, const int64_t *dims);
void ot_free(ot *t);
ot *ot_clone(const ot *t);
/* Reads element i as double / int64 (any numeric dtype). */
double ot_get_f(const ot *t, int64_t i);
int64_t ot_get_i(const ot *t, int64_t i);
/* Stores v: floats round to nearest (FP16/BF16 through float, as ONNX Runtime does), an
 * integer type keeps v's low bits (two's complement wrap-around), BOOL is v != 0. */
void ot_set_f(ot *t, int64_t i, double v);
void ot_set_i(ot *t, int64_t i, int64_t v);
/* Reads element i of an integer or BOOL tensor as the low 64 bits (UINT64 unchanged). */
uint64_t ot_get_bits(const ot *t, int64_t i);

/* ---- strings (strings.c: the layout and who owns the bytes) ---- */
typedef struct ostr {
  const char *p; /* never written through; NULL when n == 0 may be */
  uint64_t n;
} ostr;
typedef struct ostr_heap ostr_heap;
ostr_heap *ostr_heap_new(void); /* NULL when out of memory */
/* n bytes valid until reset/free; NULL when out of memory or past ONNX_MAX_TENSOR_BYTES
 * in all since the last reset */
char *ostr_heap_alloc(ostr_heap *h, size_t n);
void ostr_heap_reset(ostr_heap *h);
void ostr_heap_free(ostr_heap *h);
/* The length-prefixed layout (cinfer_tensor BYTES) -> n descriptors into `data`; every
 * prefix and length checked against byte_size, which the n strings must fill exactly. */
cinfer_status *ostr_parse(const void *data, size_t byte_size, int64_t n, ostr *dst,
                          const char *what);
/* Bytes the length-prefixed layout of s[0..n) takes (each length must fit 32 bits). */
cinfer_status *ostr_packed_size(const ostr *s, int64_t n, size_t *bytes, const char *what);
void ostr_pack(const ostr *s, int64_t n, void *dst);
/* A self-contained BYTES tensor: descriptors and a copy of the bytes in one allocation
 * (ot_free frees both). NULL when out of memory or too large. */
ot *ot_new_strings(int ndim, const int64_t *dims, const ostr *src);
cinfer_dtype onnx_dtype_from_proto(int32_t dt); /* INVALID when unsupported */
int32_t onnx_dtype_to_proto(cinfer_dtype dt);
void ot_shape_str(const ot *t, char *buf, size_t n);

typedef enum { ATTR_F, ATTR_I, ATTR_S, ATTR_T, ATTR_FS, ATTR_IS, ATTR_OTHER } attr_type;
typedef struct onnx_attr {
  char *name;
  attr_type type;
  float f;
  int64_t i;
  char *s;         /* NUL-terminated copy */
  int n;           /* count of fs / is */
  float *fs;
  int64_t *is;
  ot *t;
} onnx_attr;

struct onnx_op;
typedef struct onnx_node {
  char *name;
  char *op_type;
  char *domain;
  int opset;
  const struct onnx_op *op;
  int n_in, n_out;
  int *in, *out;
  int n_attr;
  onnx_attr *attr;
} onnx_node;

typedef enum { VAL_INPUT, VAL_CONST, VAL_NODE } val_kind;
typedef struct onnx_value {
  char *name;
  val_kind kind;
  ot *cval;          /* VAL_CONST: owned */
  int producer;      /* VAL_NODE: node index */
  int n_uses;        /* consumers (+1 when a graph output) */
  bool is_output;
  onnx_io_info info; /* declared type/shape (from graph input/output/value_info) */
  bool has_info;
} onnx_value;

typedef struct onnx_opset { char *domain; int64_t version; } onnx_opset;

struct onnx_model {
  onnx_value *values;
  int n_values, cap_values;
  onnx_node *nodes;
  int n_nodes;
  int *inputs, n_inputs;   /* value ids of the real inputs (initializers excluded) */
  int *outputs, n_outputs;
  onnx_io_info *in_info, *out_info;
  onnx_opset *opsets;
  int n_opsets;
  int64_t ir_version;
  char *producer;
  int64_t n_params;
  int n_folded, n_dead, n_bn_fused, n_mul_fused; /* compile statistics */
  bool *key_input;         /* per model input: its values shape the plan (see plan.c) */
  bool batchable;
  bool batch_probe;        /* analysis relied on plan-time shapes: verify with plan_probe */
  char batch_note[256];
  /* histogram of op types before compilation, for inspect */
  char **hist_name;
  int *hist_count, n_hist;
};

/* ---- attributes ---- */
const onnx_attr *node_attr(const onnx_node *n, const char *name);
int64_t attr_i(const onnx_node *n, const char *name, int64_t def);
float attr_f(const onnx_node *n, const char *name, float def);
const char *attr_s(const onnx_node *n, const char *name, const char *def);
/* Returns the count (0 when absent); *v borrowed. */
int attr_ints(const onnx_node *n, const char *name, const int64_t **v);

/* ---- operators ---- */
typedef struct onnx_exec onnx_exec;
typedef cinfer_status *(*op_infer_fn)(const onnx_node *n, ot **in, ot **out);
typedef cinfer_status *(*op_exec_fn)(onnx_exec *x, const onnx_node *n, ot **in, ot **out);
enum {
  OP_SHAPE_ONLY = 1,   /* output depends on input shapes only (Shape, Size) */
  OP_ALIAS = 2,        /* output 0 may share input 0's bytes (Reshape, Flatten...) */
  OP_NO_BATCH = 4,     /* mixes along dim 0: never batch-agnostic */
};
/* onnx_op.str_in: bit j set = input j may be a STRING tensor (the op moves its elements
 * without reading them, or is Cast); STR_ALL: every input */
#define STR_IN(j) (1u << (j))
#define STR_ALL 0x80000000u
static inline bool op_takes_string(unsigned str_in, int j) {
  return (str_in & STR_ALL) || (j < 31 && (str_in & STR_IN(j)));
}
typedef struct onnx_op {
  const char *name;
  int since;               /* first supported opset (ONNX domain) */
  int min_in, max_in;
  op_infer_fn infer;       /* sets out dtype/ndim/dims; in[i]==NULL for absent optional;
                              in[i]->data is non-NULL when the value is known at plan time */
  op_exec_fn exec;         /* reference kernel */
  unsigned flags;
  unsigned str_in;         /* inputs that may be STRING (STR_IN, STR_ALL); 0: none */
} onnx_op;
const onnx_op *onnx_op_find(const char *op_type, const char *domain, int opset);
/* Lists supported operator names (for docs). */
int onnx_op_count(void);
const onnx_op *onnx_op_at(int i);

/* Activation fused into Conv/Gemm at plan time. */
typedef enum { ACT_NONE, ACT_RELU, ACT_CLIP, ACT_LEAKY, ACT_SIGMOID, ACT_TANH, ACT_PRELU } act_kind;
typedef struct onnx_fused {
  act_kind act;
  float a, b;        /* clip min/max, leaky alpha */
  const float *slope; /* PRelu (Conv and BatchNormalization only): slope_n == 1 or channels, */
  int64_t slope_n;    /* borrowed from a static value of the plan */
  ot *sum;           /* Conv+Add: tensor added to the conv output before act */
} onnx_fused;

struct onnx_exec {
  int threads;
  const onnx_fused *fused; /* for the node being executed, or NULL */
  ostr_heap *heap;         /* where new strings go (Cast to STRING); outlives the result's
                              readers (strings.c) */
};

static inline float act_apply(const onnx_fused *f, float v) {
  switch (f->act) {
    case ACT_RELU: return v > 0 ? v : 0;
    case ACT_CLIP: return v < f->a ? f->a : v > f->b ? f->b : v;
    case ACT_LEAKY: return v >= 0 ? v : v * f->a;
    case ACT_SIGMOID: return 1.0f / (1.0f + __builtin_expf(-v));
    case ACT_TANH: return __builtin_tanhf(v);
    case ACT_PRELU: return v < 0 ? v * f->slope[0] : v; /* slope_n == 1 */
    default: return v;
  }
}
/* act_apply for output channel ch (PRelu's slope may be per channel) */
static inline float act_apply_c(const onnx_fused *f, float v, int64_t ch) {
  if (f->act == ACT_PRELU) return v < 0 ? v * f->slope[f->slope_n == 1 ? 0 : ch] : v;
  return act_apply(f, v);
}

/* kernels shared between the reference ops and tests */
cinfer_status *ref_conv(const onnx_node *n, const ot *x, const ot *w, const ot *b, ot *y,
                        const onnx_fused *f);
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
              int64_t ldc);
cinfer_status *conv_infer(const onnx_node *n, ot **in, ot **out);
/* Pad whose pads (attribute or static input, concrete shapes in `in`) are all zero: an
 * identity, which the plan lets share its input's bytes (ssrnet has five) */
bool pad_is_noop(const onnx_node *n, ot **in);
bool slice_is_noop(const onnx_node *n, ot **in);

/* ---- broadcasting helpers (ops.c) ---- */
cinfer_status *bcast_shape(const ot *a, const ot *b, ot *out, const onnx_node *n);

/* ---- graph (graph.c) ---- */
cinfer_status *graph_compile(onnx_model *m);
cinfer_status *graph_fold_constants(onnx_model *m);
void graph_analyse_batch(onnx_model *m);
/* Marks graph inputs that feed shape-like operands (Reshape's shape, Slice's starts, ...):
 * their values become part of the plan key. */
cinfer_status *graph_mark_key_inputs(onnx_model *m);
/* Follows element types from the inputs and constants through the graph and refuses a
 * STRING input of an operator that does not take strings (strings.c), naming the node. */
cinfer_status *graph_check_strings(const onnx_model *m);
#define ONNX_MAX_KEY_INPUT_ELEMENTS 4096

/* ---- errors ---- */
#define NODE_ERR(n, code, fmt, ...)                                                  \
  cinfer_status_new(code, "node '%s' (%s): " fmt, (n)->name, (n)->op_type, ##__VA_ARGS__)

#endif
