/* main.c: `cinfer <subcommand> [options]`. Dispatches to the table below. */
#include <stdio.h>
#include <stdlib.h>
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
