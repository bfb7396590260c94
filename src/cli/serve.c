/* serve.c: `cinfer serve` (being built: see issue 2). */
#include <stdio.h>
#include "cli/cli.h"
int cmd_serve(int argc, char **argv) {
  fprintf(stderr, "cinfer serve: not available in this build yet\n");
  return 1;
}
