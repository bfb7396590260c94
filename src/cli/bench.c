/* bench.c: `cinfer bench`, the load generator (src/bench, docs/bench.md). */
#include "bench/bench.h"
#include "cli/cli.h"

int cmd_bench(int argc, char **argv) { return bench_main(argc, argv); }
