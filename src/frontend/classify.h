/* classify.h: Triton's classification extension: an output requested with
 * "parameters": {"classification": K} comes back as BYTES strings "value:index[:label]",
 * the K highest values (compared in the output's own type) in descending order, ties by
 * the lower index; labels are the lines of the output's label_filename.
 *
 * Batch handling as Triton's: when the model batches (max_batch_size > 0) and the output
 * has dims, each of the shape[0] batch rows is classified on its own and the result has
 * shape [batch, min(K, row elements)]; otherwise the whole tensor is one row and the shape
 * is [min(K, elements)]. Values print as C++'s std::to_string does ("%f" for floats, the
 * integer for integer types), which is what Triton's clients parse. */
#ifndef CINFER_FRONTEND_CLASSIFY_H
#define CINFER_FRONTEND_CLASSIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "cinfer/cinfer.h"
#include "core/buf.h"

/* Triton's bound on the elements of one classified row. */
#define CLASSIFY_MAX_ELEMENTS 1000000

/* A label file read into memory: line i is the label of class index i. */
typedef struct classify_labels {
  char *text;          /* the file, '\n' replaced by NUL */
  const char **line;   /* n pointers into text */
  size_t n;
} classify_labels;

/* Reads path (at most 64 MiB); the error names the file. */
cinfer_status *classify_labels_load(const char *path, classify_labels *out);
void classify_labels_free(classify_labels *l);

/* Appends the serialized BYTES tensor (4-byte little-endian length + string, per element)
 * to out and sets shape/ndim. labels may be NULL. INVALID_ARG for a type without a value
 * order (BYTES, BOOL, FP16, BF16, as in Triton) or a row over CLASSIFY_MAX_ELEMENTS. */
cinfer_status *classify_output(const cinfer_tensor *t, uint32_t k, bool batched,
                               const classify_labels *labels, cbuf *out, int64_t shape[2],
                               int *ndim);

#endif
