/* `autoaccel-engine`: the commands that load the engine (cli.h "the two
 * binaries"). `autoaccel` execs it with the same arguments, so a command's
 * usage, messages and exit codes are the ones `autoaccel CMD` always had.
 * `--cuda-devices` answers the front's aa_cli_cuda_devices. */
#include "cli.h"
#include "common/aa.h"
#include "executor/worker.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  int (*fn)(int, char **);
} commands[] = {
    {"train", aa_cmd_train},   {"executor", aa_cmd_executor}, {"data", aa_cmd_data},
    {"import", aa_cmd_import}, {"export", aa_cmd_export},     {"generate", aa_cmd_generate},
};

int aa_cli_cuda_devices(int *count) { return aa_worker_cuda_devices(count); }

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--cuda-devices")) {
    /* The front reads one line: "N", or "-CODE MESSAGE" (engine_exec.c). */
    int n, rc = aa_cli_cuda_devices(&n);
    if (rc)
      printf("%d %s\n", rc, aa_last_error());
    else
      printf("%d\n", n);
    return rc ? AA_EXIT_FAIL : AA_EXIT_OK;
  }
  if (argc >= 2)
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr,
          "usage: autoaccel <command> [options]\n\n"
          "%s runs the engine's commands (train, executor, data, import, export, generate) for\n"
          "`autoaccel`, which starts it with the same arguments: run 'autoaccel --help'.\n",
          AA_CLI_ENGINE_NAME);
  return AA_EXIT_USAGE;
}
