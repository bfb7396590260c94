/* cli.h: the cinfer binary's subcommands. Each is `int cmd_NAME(int argc, char **argv)`
 * with argv[0] = the subcommand name; it returns the process exit code. The table lives in
 * main.c: adding a subcommand is one line there and one file here. */
#ifndef CINFER_CLI_H
#define CINFER_CLI_H

typedef struct cli_command {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv);
} cli_command;

int cmd_serve(int argc, char **argv);
int cmd_gateway(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

#endif
