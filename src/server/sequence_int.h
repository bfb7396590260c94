/* sequence_int.h: what the two files of the server's sequence batcher share:
 * sequence_config.c (parses sequence_batching into a seqmodel) and sequence.c (requests,
 * control and state tensors, workers). Private to src/server. */
#ifndef CINFER_SERVER_SEQUENCE_INT_H
#define CINFER_SERVER_SEQUENCE_INT_H

#include "sched/sequence.h"
#include "server/internal.h"

enum { CTL_START, CTL_END, CTL_READY, CTL_CORRID, CTL_N };

typedef struct seq_ctl {
  bool on;
  char *name;
  cinfer_dtype dtype;
  unsigned char val[2][4]; /* false, true (INT32 / FP32 / BOOL) */
} seq_ctl;

typedef struct seq_state_def {
  char *in, *out;
  cinfer_dtype dtype;
  int ndim;
  int64_t dims[CINFER_MAX_DIMS];
  void *init;        /* initial value (zeros when zero_data or no initial_state) */
  size_t init_bytes;
} seq_state_def;

struct seqmodel {
  seqsched *sched;
  seq_ctl ctl[CTL_N];
  seq_state_def *states;
  int n_states;
  int n_extra;       /* control + state inputs added to each request */
  metric *m_open;    /* cinfer_sequence_active: sequences open or closing */
};

/* A sequence's state values: the caller state of sched/sequence.h. */
typedef struct seq_val {
  void *data;
  size_t bytes;
  int ndim;
  int64_t shape[CINFER_MAX_DIMS];
} seq_val;
typedef struct seq_vals {
  int n;
  seq_val v[];
} seq_vals;

/* Frees a seq_vals (the sequence batcher's free_state). */
void seq_vals_free(void *p);

#endif
