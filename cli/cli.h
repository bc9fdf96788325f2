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

int aa_cmd_train(int argc, char **argv);
int aa_cmd_data(int argc, char **argv);
int aa_cmd_strategy(int argc, char **argv);
int aa_cmd_planner(int argc, char **argv);  /* cli/cmd_planner.c */
int aa_cmd_executor(int argc, char **argv); /* cli/cmd_executor.c */
int aa_cmd_submit(int argc, char **argv);   /* cli/cmd_submit.c */
int aa_cmd_status(int argc, char **argv);   /* cli/cmd_status.c */
int aa_cmd_cancel(int argc, char **argv);   /* cli/cmd_status.c */
int aa_cmd_query(int argc, char **argv);    /* cli/cmd_query.c */
int aa_cmd_auto(int argc, char **argv);     /* cli/cmd_auto.c */

/* Prints "autoaccel <cmd>: <last error>" to stderr and returns AA_EXIT_FAIL. */
int aa_cli_fail(const char *cmd);

/* Parses a non-negative integer option value; prints a usage error naming
 * the option and returns -1 if it is not one. */
long long aa_cli_parse_int(const char *cmd, const char *opt, const char *val, long long min, long long max);

#endif
