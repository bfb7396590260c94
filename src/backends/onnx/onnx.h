/* onnx.h: the ONNX engine's contract (library cinfer_onnx).
 *
 * An onnx_model is a loaded, validated and compiled graph (read-only after load, shareable
 * between threads). An onnx_session runs it: it owns the per-input-shape execution plans
 * (memory arena, prepared oneDNN primitives) and is used by one thread at a time.
 *
 *   onnx_model *m; onnx_model_load_file("m.onnx", &m);
 *   onnx_session *s; onnx_session_create(m, &(onnx_options){.threads = 2}, &s);
 *   cinfer_tensor out[n_out]; onnx_session_run(s, in, n_in, out);  // out: views, see below
 *   onnx_session_destroy(s); onnx_model_destroy(m);
 *
 * Every error is a cinfer_status naming the node / tensor / field at fault.
 */
#ifndef CINFER_ONNX_H
#define CINFER_ONNX_H

#include <stdbool.h>
#include <stdio.h>

#include "cinfer/types.h"

typedef struct onnx_model onnx_model;
typedef struct onnx_session onnx_session;

/* Limits applied to every model file (hostile input). */
#define ONNX_MAX_FILE_BYTES ((size_t)2 << 30) /* protobuf's own 2 GiB limit */
#define ONNX_MAX_TENSOR_BYTES ((int64_t)1 << 32)

typedef struct onnx_options {
  int threads;        /* kernel threads; <= 0 means 1. With threads > 1 a batch of a batchable
                         model runs as min(threads, rows) row ranges on one-thread workers
                         (see session.c); batch 1 splits each operator over the threads.
                         The session owns a pool of threads - 1 worker threads (opool.h):
                         they spin only during onnx_session_run and sleep between calls */
  bool no_fast;       /* true: reference kernels only (the oracle) */
  bool profile;       /* accumulate per-node times (onnx_session_profile_print) */
  /* Batchable models: rows of a batch per graph run. 0: automatic (as many rows as keep
   * one run's activations within ~1 MiB per thread, at least one row per thread: a batch
   * whose activations spill out of the caches runs slower per row than single rows); < 0:
   * the whole batch in one run, on all threads (no workers either). The environment
   * variable CINFER_ONNX_SUB_BATCH, when set, overrides 0. */
  int sub_batch;
} onnx_options;

/* One graph input or output as declared by the model. shape[i] < 0: symbolic/unknown
 * (dim_name[i] holds the symbol when there is one); ndim < 0: rank unknown. */
typedef struct onnx_io_info {
  const char *name;
  cinfer_dtype dtype;
  int ndim;
  int64_t shape[CINFER_MAX_DIMS];
  const char *dim_name[CINFER_MAX_DIMS];
} onnx_io_info;

/* Loads and compiles a model. External data (TensorProto data_location = EXTERNAL) is read
 * from files next to the model: relative paths only, no "..", checked offset/length.
 * load_buffer: base_dir may be NULL, then external data is rejected. *out is owned by the
 * caller (onnx_model_destroy). */
cinfer_status *onnx_model_load_file(const char *path, onnx_model **out);
cinfer_status *onnx_model_load_buffer(const void *buf, size_t len, const char *base_dir,
                                      onnx_model **out);
void onnx_model_destroy(onnx_model *m);

int onnx_model_input_count(const onnx_model *m);
int onnx_model_output_count(const onnx_model *m);
const onnx_io_info *onnx_model_input(const onnx_model *m, int i);   /* borrowed */
const onnx_io_info *onnx_model_output(const onnx_model *m, int i);  /* borrowed */
/* True when dim 0 of every input and output is a batch dimension that the graph never
 * mixes (possibly after rewriting a fixed batch of 1); max_batch reports the limit
 * (0 = none known). */
bool onnx_model_batchable(const onnx_model *m);
/* `cinfer inspect` text: inputs, outputs, opsets, op histogram, parameters, batchability. */
void onnx_model_describe(const onnx_model *m, FILE *f);

cinfer_status *onnx_session_create(const onnx_model *m, const onnx_options *opt,
                                   onnx_session **out);
void onnx_session_destroy(onnx_session *s);
/* Runs the graph. inputs: one per graph input, matched by name (borrowed for the call).
 * outputs: an array of onnx_model_output_count() entries, filled with views into the
 * session's memory, valid until the next run or destroy. A batch of a batchable model may
 * run as several graph runs over consecutive rows (onnx_options.sub_batch); the outputs
 * are then gathered in session buffers that grow to the largest batch seen. */
cinfer_status *onnx_session_run(onnx_session *s, const cinfer_tensor *inputs, int n_inputs,
                                cinfer_tensor *outputs);
int onnx_session_output_count(const onnx_session *s);
void onnx_session_profile_print(const onnx_session *s, FILE *f);
void onnx_session_profile_reset(onnx_session *s);

/* TensorProto files (the ONNX test-data layout). read: *t->data and *name are owned by the
 * caller through *owned (free()). */
cinfer_status *onnx_tensor_read_pb(const char *path, cinfer_tensor *t, void **owned,
                                   char **name_owned);
cinfer_status *onnx_tensor_read_npy(const char *path, cinfer_tensor *t, void **owned);
cinfer_status *onnx_tensor_write_pb(const char *path, const cinfer_tensor *t);

/* The serving backend (backend.c): register with cinfer_backend_register(). */
struct cinfer_backend_iface;
extern const struct cinfer_backend_iface onnx_backend_iface;

#endif
