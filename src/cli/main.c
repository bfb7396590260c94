/* main.c: `cinfer <subcommand> [options]`. Dispatches to the table below. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "cli/cli.h"

#ifndef CINFER_VERSION
#define CINFER_VERSION "0.0.0"
#endif

static const cli_command commands[] = {
    {"serve", "run the inference server on a model repository", cmd_serve},
    {"gateway", "route requests to many serve replicas (health, retries, canary, limits)", cmd_gateway},
    {"bench", "load generator: throughput and latency of a server (KServe v2, OpenAI, HTTP)", cmd_bench},
    {"generate", "generate text with a GGUF model (LLM engine quick run)", cmd_generate},
    {"run", "run an ONNX model on test data and compare with reference outputs", cmd_run},
    {"inspect", "describe an ONNX model: inputs, outputs, operators, batchability", cmd_inspect},
    {"streams", "video streams through a pipeline: fps, drops, latency; --find-max; live page", cmd_streams},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f, "usage: cinfer <command> [options]\n       cinfer --version\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\nRun 'cinfer <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
  /* oneDNN runs on OpenMP. libgomp's default is to spin ~3 ms (300000 pauses) at every
   * barrier, which on a shared host or in a server whose I/O threads share the cores makes
   * 2 kernel threads ~10x slower than 1 (measured: RetinaFace p50 1015 ms spinning vs 75 ms
   * passive). Sleeping at once costs a futex wake-up per parallel region instead (UltraFace
   * at 2 threads: 3.7 ms passive, 2.8 ms with 300 pauses, ~9 us on Zen 3), so spin briefly:
   * with a busy loop on the other core that short spin costs 6.5 against 5.5 ms passive
   * (1000 pauses: 8 ms). When libgomp's own threads outnumber the cores (several instances)
   * it spins min(100, this) instead. libgomp reads the environment when it loads, before
   * main: set it and re-exec once. OMP_WAIT_POLICY or GOMP_SPINCOUNT from the user wins. */
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && !getenv("CINFER_NO_REEXEC")) {
    setenv("GOMP_SPINCOUNT", "300", 1);
    setenv("CINFER_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default policy */
  }
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
    printf("cinfer %s\n", CINFER_VERSION);
    return 0;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "cinfer: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
