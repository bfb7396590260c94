/* cli.h: the cinfer binary's subcommands. Each is `int cmd_NAME(int argc, char **argv)`
 * with argv[0] = the subcommand name; it returns the process exit code. The table lives in
 * main.c: adding a subcommand is one line there and one file here. */
#ifndef CINFER_CLI_H
#define CINFER_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "cinfer/trace.h"

typedef struct cli_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv);
} cli_command;

/* Parses flag value s as an integer in [lo, hi]; on error prints
 * "cinfer CMD: FLAG: 'S' is not an integer in [LO, HI]" and returns false. */
bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
                   long long *out);

/* Parses flag value s as a boolean as Triton's flags take it (true, 1, on / false, 0, off);
 * on error prints "cinfer CMD: FLAG: 'S' is not true or false" and returns false. */
bool cli_parse_bool(const char *cmd, const char *flag, const char *s, bool *out);

/* One `--trace-config [triton,]SETTING=VALUE` applied to v (trace_config.c); false with a
 * message naming the flag's text. */
bool cli_trace_config(const char *arg, cinfer_trace_setting *v, char *err, size_t cap);

int cmd_serve(int argc, char **argv);
int cmd_gateway(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_streams(int argc, char **argv);

#endif
