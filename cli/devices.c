/* --devices for `auto` and `train`: which local devices to run on (cli.h).
 * In both binaries; aa_cli_cuda_devices is each one's own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "proto/msg.h"

int aa_cli_parse_devices(const char *arg, aa_cli_devices_t *d) {
  memset(d, 0, sizeof *d);
  if (!strcmp(arg, "cpu")) {
    d->n = 1;
    d->cuda[0] = -1;
    return 0;
  }
  if (!strncmp(arg, "cpu:", 4)) {
    char *end;
    errno = 0;
    long n = strtol(arg + 4, &end, 10);
    if (arg[4] < '0' || arg[4] > '9' || *end || errno || n < 1 || n > AA_CLI_DEVICES_MAX)
      return aa_error(AA_EINVAL, "--devices cpu:N: N must be a count from 1 to %d, got '%s'", AA_CLI_DEVICES_MAX,
                      arg + 4);
    d->n = (int)n;
    for (int i = 0; i < d->n; i++) d->cuda[i] = -1;
    return 0;
  }
  if (!strcmp(arg, "cuda")) {
    d->all_cuda = true;
    return 0;
  }
  if (strncmp(arg, "cuda:", 5) || !arg[5])
    return aa_error(AA_EINVAL, "--devices: expected cpu, cpu:N, cuda or cuda:I,J,..., got '%s'", arg);
  const char *p = arg + 5;
  for (;;) {
    size_t len = strcspn(p, ",");
    char one[32];
    if (!len || len > 16) return aa_error(AA_EINVAL, "--devices %s: expected CUDA ordinals such as cuda:0,1", arg);
    snprintf(one, sizeof one, "cuda:%.*s", (int)len, p);
    int k = -1;
    if (aa_proto_parse_device(one, &k)) return -1;
    for (int i = 0; i < d->n; i++)
      if (d->cuda[i] == k) return aa_error(AA_EINVAL, "--devices %s: cuda:%d is named twice", arg, k);
    if (d->n == AA_CLI_DEVICES_MAX) return aa_error(AA_EINVAL, "--devices: at most %d devices", AA_CLI_DEVICES_MAX);
    d->cuda[d->n++] = k;
    if (!p[len]) return 0;
    p += len + 1;
  }
}

int aa_cli_resolve_devices(aa_cli_devices_t *d, const char *arg) {
  if (!d->all_cuda && d->cuda[0] < 0) return 0;
  /* Counted up front, in a probe child (this process forks and must stay
   * CUDA-free): a missing GPU is one clear line here rather than ranks or
   * executors that fail one by one. */
  int count, rc;
  if ((rc = aa_cli_cuda_devices(&count))) return aa_error_wrap(rc, "--devices %s", arg);
  if (d->all_cuda) {
    d->n = count < AA_CLI_DEVICES_MAX ? count : AA_CLI_DEVICES_MAX;
    for (int i = 0; i < d->n; i++) d->cuda[i] = i;
  }
  for (int i = 0; i < d->n; i++)
    if (d->cuda[i] >= count)
      return aa_error(AA_EINVAL, "--devices: cuda:%d does not exist: %d CUDA device%s visible (cuda:0..cuda:%d)",
                      d->cuda[i], count, count > 1 ? "s are" : " is", count - 1);
  return 0;
}
