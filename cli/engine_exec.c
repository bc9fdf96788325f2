/* The front binary's way to the engine binary (cli.h "the two binaries"):
 * exec'ing it for the engine's commands, and asking it how many CUDA
 * devices are visible (aa_cli_engine_path, in util.c, finds it). */
#define _GNU_SOURCE
#include "cli.h"
#include "common/aa.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int aa_cli_exec_engine(int argc, char **argv) {
  char path[4200];
  if (aa_cli_engine_path(path, sizeof path)) return aa_cli_fail(argv[1]);
  /* argv[0] stays what the user ran, so ps and pgrep show `autoaccel
   * executor ...` as before. argv ends with NULL (main's). */
  (void)argc;
  execv(path, argv);
  aa_error(AA_EIO, "cannot run %s: %s", path, strerror(errno));
  return aa_cli_fail(argv[1]);
}

int aa_cli_cuda_devices(int *count) {
  *count = 0;
  char path[4200];
  int rc = aa_cli_engine_path(path, sizeof path);
  if (rc) return rc;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC)) return aa_error(AA_EIO, "pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return aa_error(AA_EIO, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    char *argv[] = {AA_CLI_ENGINE_NAME, "--cuda-devices", NULL};
    execv(path, argv);
    _exit(127);
  }
  close(fds[1]);
  char buf[1024];
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fds[0], buf + got, sizeof buf - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
    if (got == sizeof buf - 1) break;
  }
  buf[got] = '\0';
  close(fds[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  /* The engine's answer: "N\n", or "-CODE MESSAGE\n" (engine_main.c). */
  char *end;
  long v = strtol(buf, &end, 10);
  if (end == buf) return aa_error(AA_EIO, "%s --cuda-devices gave no answer (wait status %d)", path, st);
  if (v < 0) {
    char *msg = end + strspn(end, " ");
    msg[strcspn(msg, "\n")] = '\0';
    return aa_error(v >= -1000 ? (int)v : AA_EINTERNAL, "%s", *msg ? msg : "no CUDA device is visible");
  }
  if (v < 1 || v > 1 << 20) return aa_error(AA_EIO, "%s --cuda-devices answered '%s'", path, buf);
  *count = (int)v;
  return 0;
}
