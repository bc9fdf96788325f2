/* What both binaries' commands share (cli.h): the error line, integer
 * options, and where the engine binary is. */
#include "cli.h"
#include "common/aa.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int aa_cli_engine_path(char *out, size_t n) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return aa_error(AA_EIO, "cannot read /proc/self/exe: %s", strerror(errno));
  self[len] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return aa_error(AA_EIO, "/proc/self/exe is not a path: %s", self);
  *slash = '\0';
  if ((size_t)snprintf(out, n, "%s/%s", self, AA_CLI_ENGINE_NAME) >= n)
    return aa_error(AA_EINVAL, "the engine binary's path is too long: %s/%s", self, AA_CLI_ENGINE_NAME);
  if (access(out, X_OK))
    return aa_error(
        AA_ENOENT,
        "the engine binary %s is missing or not executable (%s): it is built and installed beside "
        "autoaccel (docs/service.md \"Two binaries\")",
        out, strerror(errno));
  return 0;
}
