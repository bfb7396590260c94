/* inspect.c: `cinfer inspect M.onnx` prints what the ONNX engine sees in a model: inputs,
 * outputs, opsets, operator histogram, parameter count, compile statistics and whether
 * the model can be batched along dim 0. Exit status 1 when the model does not load. */
#include <stdio.h>
#include <string.h>

#include "backends/onnx/onnx.h"
#include "cli/cli.h"

int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: cinfer inspect MODEL.onnx\n");
      return 0;
    }
    if (!strcmp(argv[i], "--model") && i + 1 < argc) path = argv[++i];
    else if (argv[i][0] != '-') path = argv[i];
    else {
      fprintf(stderr, "cinfer inspect: unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!path) {
    fprintf(stderr, "usage: cinfer inspect MODEL.onnx\n");
    return 2;
  }
  onnx_model *m;
  cinfer_status *st = onnx_model_load_file(path, &m);
  if (st) {
    fprintf(stderr, "cinfer inspect: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    return 1;
  }
  printf("model: %s\n", path);
  onnx_model_describe(m, stdout);
  onnx_model_destroy(m);
  return 0;
}
