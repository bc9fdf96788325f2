/* Subcommands of the `autoaccel` command. Each takes the arguments after
 * its own name (argv[0] is the subcommand name) and returns a process exit
 * code (docs/cli.md):
 *   0  success
 *   1  the command ran and failed (bad input file, i/o error, ...)
 *   2  usage error (unknown option, missing argument)
 * Errors are printed as "autoaccel <cmd>: <message>" on stderr. */
#ifndef AA_CLI_H
#define AA_CLI_H

#define AA_EXIT_OK 0
#define AA_EXIT_FAIL 1
#define AA_EXIT_USAGE 2

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

int aa_cmd_train(int argc, char **argv);
int aa_cmd_data(int argc, char **argv);
int aa_cmd_strategy(int argc, char **argv);
int aa_cmd_planner(int argc, char **argv);  /* cli/cmd_planner.c */
int aa_cmd_executor(int argc, char **argv); /* cli/cmd_executor.c */
int aa_cmd_submit(int argc, char **argv);   /* cli/cmd_submit.c */
int aa_cmd_status(int argc, char **argv);   /* cli/cmd_status.c */
int aa_cmd_cancel(int argc, char **argv);   /* cli/cmd_status.c */
int aa_cmd_query(int argc, char **argv);    /* cli/cmd_query.c */
int aa_cmd_plan(int argc, char **argv);     /* cli/cmd_plan.c */
int aa_cmd_calib(int argc, char **argv);    /* cli/cmd_calib.c */
int aa_cmd_auto(int argc, char **argv);     /* cli/cmd_auto.c */
int aa_cmd_report(int argc, char **argv);   /* cli/cmd_report.c */
int aa_cmd_import(int argc, char **argv);   /* cli/cmd_import.c */
int aa_cmd_export(int argc, char **argv);   /* cli/cmd_import.c */
int aa_cmd_generate(int argc, char **argv); /* cli/cmd_generate.c */

/* `plan --list-devices` and `plan --show-device NAME|FILE` (cli/profiles.c):
 * the device profiles for people; each returns an exit code. */
int aa_cli_list_devices(void);
int aa_cli_show_device(const char *name_or_path);

/* `plan MODEL --pool PROFILE:N` (cli/plan_local.c): a pool named by a
 * device profile, planned here without a planner. Returns an exit code. */
struct aa_model_spec;
typedef struct aa_cli_plan_local {
  const struct aa_model_spec *spec; /* loaded */
  const char *profile;              /* a built-in name or a profile file */
  int devices, per_node;            /* per_node 0: the profile's GPUs per node */
  size_t top;
  bool json, subsets;
  const char *fix;   /* a partial strategy file, or NULL */
  const char *calib; /* a calibration file (`calib export`) of the pool's GPU, or NULL */
  const char *html;  /* the page to write (plan_html.h), or NULL */
  int attention;     /* an aa_roof_attention_t (strategies/roofline.h); 0: fused */
} aa_cli_plan_local_t;
int aa_cli_plan_local(const aa_cli_plan_local_t *o);

/* --- the two binaries (docs/service.md "Two binaries") -------------------------
 * `autoaccel` (main.c) runs the commands that never touch a device (the
 * planner, the client commands, plan, strategy, report, auto's planner) and
 * links none of the engine's libraries (OpenBLAS, OpenMP, CUDA, NCCL, gloo);
 * for train, executor, data, import, export and generate it execs
 * `autoaccel-engine` (engine_main.c), found beside its own executable,
 * with the same arguments: the user types `autoaccel train ...` either way. */
#define AA_CLI_ENGINE_NAME "autoaccel-engine"

/* The engine binary's path: AA_CLI_ENGINE_NAME in the directory of
 * /proc/self/exe. 0, or AA_ENOENT naming the path when it is not an
 * executable file there. (util.c) */
int aa_cli_engine_path(char *out, size_t n);

/* Replaces this process with the engine binary, given main's argv as it is
 * (argv[0] the program as run, argv[1] the command, NULL-terminated), so
 * the process still reads `autoaccel executor ...` in ps. Returns only on
 * failure, with AA_EXIT_FAIL after printing why. (engine_exec.c, front
 * only.) */
int aa_cli_exec_engine(int argc, char **argv);

/* How many CUDA devices are visible. 0 with *count >= 1, or the reason
 * (AA_EUNSUPPORTED for no CUDA backend or no device). The engine asks the
 * driver in a probe child (executor/worker.h); the front runs
 * `autoaccel-engine --cuda-devices`, so it never loads CUDA itself. */
int aa_cli_cuda_devices(int *count);

/* Prints "autoaccel <cmd>: <last error>" to stderr and returns AA_EXIT_FAIL. */
int aa_cli_fail(const char *cmd);

/* Parses a non-negative integer option value; prints a usage error naming
 * the option and returns -1 if it is not one. */
long long aa_cli_parse_int(const char *cmd, const char *opt, const char *val, long long min, long long max);

/* --devices of `auto` and `train` (cli/devices.c): n devices, CPU
 * (cuda[i] = -1) or the CUDA ordinals cuda[i]; all_cuda = "cuda", every
 * visible GPU, counted by aa_cli_resolve_devices. */
#define AA_CLI_DEVICES_MAX 64
typedef struct aa_cli_devices {
  int n;
  int cuda[AA_CLI_DEVICES_MAX];
  bool all_cuda;
} aa_cli_devices_t;

/* "cpu", "cpu:N", "cuda" or "cuda:I,J,..." (each ordinal once). 0, or
 * AA_EINVAL with the message (a usage error). */
int aa_cli_parse_devices(const char *arg, aa_cli_devices_t *d);
/* For CUDA devices: counts the visible GPUs in a probe child, expands
 * "cuda" and checks every ordinal exists. 0 (nothing to do on the CPU), or
 * the reason, prefixed with "--devices ARG" (a failure, exit 1). */
int aa_cli_resolve_devices(aa_cli_devices_t *d, const char *arg);

/* --set KEY.PATH=VALUE, the overrides every command that reads a model
 * spec takes (cli/spec_arg.c; docs/cli.md "Overriding a model spec"): a
 * command takes them out of its arguments with aa_cli_take_sets before
 * its getopt_long loop, ends its --help with aa_cli_set_help, and loads
 * its spec with aa_cli_spec_load. */
#define AA_CLI_SETS_MAX 64
typedef struct aa_cli_sets {
  const char *v[AA_CLI_SETS_MAX]; /* borrowed from argv */
  int n;
} aa_cli_sets_t;
struct option;
/* Moves every "--set V" and "--set=V" of argv[1..*argc) into s, in order,
 * and closes the gap (*argc shrinks, argv[*argc] = NULL), so getopt_long
 * never sees them. The value of an option of longopts that takes one is
 * skipped ("--out --set" is --out's), and "--" ends the options. 0, or
 * prints "autoaccel <cmd>: --set ..." (a missing value, a malformed one:
 * aa_spec_set_check, or more than AA_CLI_SETS_MAX) to stderr and returns
 * -1 (a usage error). */
int aa_cli_take_sets(int *argc, char **argv, const struct option *longopts, const char *cmd,
                     aa_cli_sets_t *s);
/* The --set paragraph of a command's --help, printed after the rest. */
void aa_cli_set_help(FILE *f);
/* aa_spec_load_set of path with s's overrides (s may be NULL). */
int aa_cli_spec_load(struct aa_model_spec *out, const char *path, const aa_cli_sets_t *s);

#endif
