/* `autoaccel planner`: the planner daemon in the foreground (planner/planner.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "planner/planner.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel planner [options]\n\n"
          "Runs the planner daemon in the foreground: it accepts executors and clients, runs the\n"
          "submitted jobs one at a time (search by dry runs, then training), and records every run in\n"
          "its store. One log line per event goes to stderr. SIGINT or SIGTERM stops it in order:\n"
          "peers get bye, a running job is recorded interrupted, the socket file is removed.\n\n"
          "options:\n"
          "  --home DIR              state directory (default: $AUTOACCEL_HOME, else ~/.autoaccel)\n"
          "  --socket PATH           unix socket, mode 0600 (default: HOME/planner.sock)\n"
          "  --listen HOST:PORT      listen on TCP as well; a host that is not loopback needs --token-file\n"
          "  --token-file FILE       peers on TCP must present this token (first line; file mode 0600)\n"
          "  --store PATH            SQLite store (default: HOME/store.db)\n"
          "  --heartbeat-ms N        heartbeat period for executors and clients (default 1000)\n"
          "  --dead-after-ms N       a peer silent this long is closed (default 10 heartbeats)\n"
          "  --warmup-steps N        untimed steps per dry run (default 1)\n"
          "  --measured-steps N      timed steps per dry run (default 4)\n"
          "  --dryrun-time-limit S   a dry run still going after S seconds is killed (default 300)\n"
          "  -h, --help              this help\n\n"
          "Exit codes: 0 stopped in order, 1 failure (socket in use, store unreadable), 2 usage.\n");
}

int aa_cmd_planner(int argc, char **argv) {
  static const struct option longopts[] = {
      {"home", required_argument, 0, 'H'},          {"socket", required_argument, 0, 's'},
      {"listen", required_argument, 0, 'l'},        {"token-file", required_argument, 0, 't'},
      {"store", required_argument, 0, 'S'},         {"heartbeat-ms", required_argument, 0, 'b'},
      {"dead-after-ms", required_argument, 0, 'd'}, {"warmup-steps", required_argument, 0, 'w'},
      {"measured-steps", required_argument, 0, 'm'}, {"dryrun-time-limit", required_argument, 0, 'T'},
      {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
  aa_planner_opts_t o = {.warmup_steps = -1};
  long long v;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'H': o.home = optarg; break;
    case 's': o.socket_path = optarg; break;
    case 'l': o.tcp = optarg; break;
    case 't': o.token_file = optarg; break;
    case 'S': o.store_path = optarg; break;
    case 'b':
      if ((v = aa_cli_parse_int("planner", "--heartbeat-ms", optarg, 100, 3600000)) < 0) return AA_EXIT_USAGE;
      o.heartbeat_ms = (int)v;
      break;
    case 'd':
      if ((v = aa_cli_parse_int("planner", "--dead-after-ms", optarg, 100, 360000000)) < 0) return AA_EXIT_USAGE;
      o.dead_after_ms = (int)v;
      break;
    case 'w':
      if ((v = aa_cli_parse_int("planner", "--warmup-steps", optarg, 0, 1000000)) < 0) return AA_EXIT_USAGE;
      o.warmup_steps = (int)v;
      break;
    case 'm':
      if ((v = aa_cli_parse_int("planner", "--measured-steps", optarg, 1, 1000000000)) < 0) return AA_EXIT_USAGE;
      o.measured_steps = (int)v;
      break;
    case 'T':
      if ((v = aa_cli_parse_int("planner", "--dryrun-time-limit", optarg, 1, 31622400)) < 0) return AA_EXIT_USAGE;
      o.dryrun_time_limit_s = (int)v;
      break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default:
      fprintf(stderr, "autoaccel planner: unknown option or missing value: '%s'\n", argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "autoaccel planner: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  if (o.dead_after_ms && o.dead_after_ms < (o.heartbeat_ms ? o.heartbeat_ms : 1000)) {
    fprintf(stderr, "autoaccel planner: --dead-after-ms must be at least the heartbeat period\n");
    return AA_EXIT_USAGE;
  }
  aa_planner_t *p;
  if (aa_planner_create(&p, &o)) return aa_cli_fail("planner");
  aa_planner_handle_signals(p);
  int rc = aa_planner_run(p);
  aa_planner_destroy(p);
  return rc ? aa_cli_fail("planner") : AA_EXIT_OK;
}
