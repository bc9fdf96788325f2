/* What both binaries' commands share (cli.h): the error line and integer
 * options. */
#include "cli.h"
#include "common/aa.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int aa_cli_fail(const char *cmd) {
  fprintf(stderr, "autoaccel %s: %s\n", cmd, aa_last_error());
  return AA_EXIT_FAIL;
}

long long aa_cli_parse_int(const char *cmd, const char *opt, const char *val, long long min, long long max) {
  char *end;
  errno = 0;
  long long v = val ? strtoll(val, &end, 10) : 0;
  if (!val || errno || end == val || *end || v < min || v > max) {
    fprintf(stderr, "autoaccel %s: %s needs an integer in [%lld, %lld], got '%s'\n", cmd, opt, min, max,
            val ? val : "");
    return -1;
  }
  return v;
}
