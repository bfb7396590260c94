/* cli_util.c: flag value parsing shared by the subcommands (see cli.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "cli/cli.h"

bool cli_parse_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi,
                   long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !*s || *end || v < lo || v > hi) {
    fprintf(stderr, "cinfer %s: %s: '%s' is not an integer in [%lld, %lld]\n", cmd, flag, s, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

bool cli_parse_bool(const char *cmd, const char *flag, const char *s, bool *out) {
  if (!strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "on")) *out = true;
  else if (!strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "off")) *out = false;
  else {
    fprintf(stderr, "cinfer %s: %s: '%s' is not true or false\n", cmd, flag, s);
    return false;
  }
  return true;
}
