/* `autoaccel`: entry point and subcommand dispatch. This is the front
 * binary (cli.h "the two binaries"): a command without a function here runs
 * in `autoaccel-engine`, which this process becomes by exec. */
#include "cli.h"
#include "common/aa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} commands[] = {
    {"auto", aa_cmd_auto, "search the fastest strategy on local devices, save it, and train with it"},
    {"train", NULL, "train a model from a model spec (one process, or --devices cpu:N ranks; --strategy)"},
    {"planner", aa_cmd_planner, "run the planner daemon"},
    {"executor", NULL, "run an executor for one device, serving a planner"},
    {"submit", aa_cmd_submit, "submit a model to the planner to search (and train)"},
    {"status", aa_cmd_status, "show the planner, its executors and jobs, or one job"},
    {"cancel", aa_cmd_cancel, "cancel a job"},
    {"query", aa_cmd_query, "query the strategy store: best strategy, runs, jobs"},
    {"plan", aa_cmd_plan, "predict the best strategies of a pool of N devices from a stored calibration"},
    {"calib", aa_cmd_calib, "export a device's stored calibration to a file, or import one into the planner"},
    {"report", aa_cmd_report, "write one job's search as a self-contained HTML report"},
    {"data", NULL, "build token shards from text, make the synthetic corpus, inspect shards"},
    {"strategy", aa_cmd_strategy, "show a strategy file, or check it against a model and a world size"},
    {"import", NULL,
     "read GPT-2, Llama, Mixtral or Qwen2(-MoE) weights (safetensors, sharded or not;\n"
     "             llm.c) into a checkpoint; with a LoRA spec, Hugging Face PEFT adapters"},
    {"export", NULL,
     "write a checkpoint's weights as one safetensors file with its family's names; with\n"
     "             a LoRA spec, the adapters merged into the base (--merge) or as PEFT's (--peft)"},
    {"generate", NULL, "continue a prompt with a checkpoint's model (KV cache; greedy or sampled)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: autoaccel <command> [options]\n\n"
             "autoaccel finds the fastest way to train a transformer on your devices, by\n"
             "measuring, and trains it that way.\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\nRun 'autoaccel <command> --help' for a command's options.\n"
             "Exit codes: 0 success, 1 failure, 2 usage error.\n");
}

/* How long an idle OpenMP worker of the engine processes this one becomes
 * or starts spins before it sleeps, when the environment does not say
 * (kernels/README.md "Idle workers"): libgomp's default, up to 300000
 * iterations at every barrier, takes the core a partner process needs
 * wherever processes share cores (dry runs, several ranks a machine, the
 * suite). libgomp reads it once, when it starts, so it is set here, before
 * any engine process exists; this binary links no OpenMP itself. */
static void omp_spin_default(void) {
  if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) setenv("GOMP_SPINCOUNT", "1000", 0);
}

int main(int argc, char **argv) {
  omp_spin_default();
  if (argc < 2) {
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return AA_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
#ifdef AA_CLI_CUDA_BUILT /* the engine binary's backend (CMakeLists.txt) */
    printf("autoaccel %s (CUDA backend built)\n", AA_VERSION);
#else
    printf("autoaccel %s (no CUDA backend: nvcc was not found at configure time)\n", AA_VERSION);
#endif
    return AA_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].fn ? commands[i].fn(argc - 1, argv + 1) : aa_cli_exec_engine(argc, argv);
  fprintf(stderr, "autoaccel: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return AA_EXIT_USAGE;
}
