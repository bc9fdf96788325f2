/* `autoaccel planner`: the planner daemon in the foreground (planner/planner.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "common/mem.h"
#include "planner/planner.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: autoaccel planner [options]\n\n"
      "Runs the planner daemon in the foreground: it accepts executors and clients, runs the\n"
      "submitted jobs one at a time (search by dry runs, then training), and records every run in\n"
      "its store. One log line per event goes to stderr. SIGINT, SIGTERM or SIGHUP (its terminal\n"
      "closed) stops it in order: peers get bye, a running job is recorded interrupted (it resumes\n"
      "at the next start), the socket file is removed. Started with SIGHUP ignored (nohup), it\n"
      "keeps ignoring it.\n\n"
      "options:\n"
      "  --home DIR              state directory, mode 0700 (default: $AUTOACCEL_HOME, else ~/.autoaccel)\n"
      "  --socket PATH           unix socket, mode 0600 (default: HOME/planner.sock)\n"
      "  --listen HOST:PORT      listen on TCP as well; every TCP peer must present the token\n"
      "  --token-file FILE       the token TCP peers present (first line; mode 0600); default\n"
      "                          HOME/token, made on first use\n"
      "  --store PATH            SQLite store, mode 0600 (default: HOME/store.db)\n"
      "  --heartbeat-ms N        heartbeat period for executors and clients (default 1000)\n"
      "  --dead-after-ms N       a peer silent this long is closed (default 10 heartbeats)\n"
      "  --warmup-steps N        untimed steps per dry run (default 1)\n"
      "  --measured-steps N      timed steps per dry run (default 4)\n"
      "  --dryrun-time-limit S   a dry run still going after S seconds is killed (default 300)\n"
      "  --placement-timeout S   a job whose executors are not connected fails after S seconds\n"
      "                          of waiting for them (default 3600)\n"
      "  --max-resumes N         times a job interrupted by a stop resumes at the next start\n"
      "                          (default 3; 0 = never)\n"
      "  --cpu-backend B         process groups of CPU gangs: auto (shm on one host, gloo when a\n"
      "                          gang spans hosts; the default), gloo (always, one host too) or\n"
      "                          shm (every gang on one host)\n"
      "  --max-connections N     connections at most, 16 of them kept for the unix socket\n"
      "                          (default 1024, less if the descriptor limit is lower)\n"
      "  --max-unauthenticated N TCP connections that have not yet said hello (default 64); when\n"
      "                          they are all taken a newcomer displaces the oldest silent one, and\n"
      "                          one source (address) holding N/8 displaces its own oldest\n"
      "  --hello-timeout-ms N    a connection that has not said hello by then is closed (default 10000)\n"
      "  --frame-timeout-ms N    a frame not complete this long after its first byte closes its\n"
      "                          connection (default 30000)\n"
      "  --write-queue-max BYTES a peer that leaves more unread is closed (default 32M)\n"
      "  --input-buffer-max BYTES input held for all peers together (partly sent frames); past it\n"
      "                          the peer holding the most is closed (default 64M, at least 17M)\n"
      "  -h, --help              this help\n\n"
      "Exit codes: 0 stopped in order, 1 failure (socket in use, store unreadable), 2 usage.\n");
}

int aa_cmd_planner(int argc, char **argv) {
  static const struct option longopts[] = {{"home", required_argument, 0, 'H'},
                                           {"socket", required_argument, 0, 's'},
                                           {"listen", required_argument, 0, 'l'},
                                           {"token-file", required_argument, 0, 't'},
                                           {"store", required_argument, 0, 'S'},
                                           {"heartbeat-ms", required_argument, 0, 'b'},
                                           {"dead-after-ms", required_argument, 0, 'd'},
                                           {"warmup-steps", required_argument, 0, 'w'},
                                           {"measured-steps", required_argument, 0, 'm'},
                                           {"dryrun-time-limit", required_argument, 0, 'T'},
                                           {"placement-timeout", required_argument, 0, 'P'},
                                           {"max-resumes", required_argument, 0, 'R'},
                                           {"max-connections", required_argument, 0, 'C'},
                                           {"max-unauthenticated", required_argument, 0, 'U'},
                                           {"hello-timeout-ms", required_argument, 0, 'E'},
                                           {"frame-timeout-ms", required_argument, 0, 'F'},
                                           {"write-queue-max", required_argument, 0, 'Q'},
                                           {"cpu-backend", required_argument, 0, 'B'},
                                           {"input-buffer-max", required_argument, 0, 'I'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
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
    case 'P':
      if ((v = aa_cli_parse_int("planner", "--placement-timeout", optarg, 1, 31622400)) < 0) return AA_EXIT_USAGE;
      o.placement_timeout_s = (int)v;
      break;
    case 'R':
      if ((v = aa_cli_parse_int("planner", "--max-resumes", optarg, 0, 1000)) < 0) return AA_EXIT_USAGE;
      o.max_resumes = v ? (int)v : -1;
      break;
    case 'C':
      if ((v = aa_cli_parse_int("planner", "--max-connections", optarg, 17, 1000000)) < 0) return AA_EXIT_USAGE;
      o.max_connections = (int)v;
      break;
    case 'U':
      if ((v = aa_cli_parse_int("planner", "--max-unauthenticated", optarg, 1, 1000000)) < 0) return AA_EXIT_USAGE;
      o.max_unauthenticated = (int)v;
      break;
    case 'E':
      if ((v = aa_cli_parse_int("planner", "--hello-timeout-ms", optarg, 100, 3600000)) < 0) return AA_EXIT_USAGE;
      o.hello_timeout_ms = (int)v;
      break;
    case 'F':
      if ((v = aa_cli_parse_int("planner", "--frame-timeout-ms", optarg, 100, 3600000)) < 0) return AA_EXIT_USAGE;
      o.frame_timeout_ms = (int)v;
      break;
    case 'Q': {
      size_t bytes;
      if (aa_mem_parse_bytes(optarg, &bytes) || bytes < 4096 || bytes > (1ull << 40)) {
        fprintf(stderr, "autoaccel planner: --write-queue-max: expected a byte count in 4K..1T such as 32M, got '%s'\n",
                optarg);
        return AA_EXIT_USAGE;
      }
      o.write_queue_max = (long long)bytes;
      break;
    }
    case 'I': {
      size_t bytes;
      if (aa_mem_parse_bytes(optarg, &bytes) || bytes < (17u << 20) || bytes > (1ull << 40)) {
        fprintf(
            stderr,
            "autoaccel planner: --input-buffer-max: expected a byte count in 17M..1T such as 64M, got '%s'\n",
            optarg);
        return AA_EXIT_USAGE;
      }
      o.input_buffer_max = (long long)bytes;
      break;
    }
    case 'B':
      if (strcmp(optarg, "auto") && strcmp(optarg, "shm") && strcmp(optarg, "gloo")) {
        fprintf(stderr, "autoaccel planner: --cpu-backend: expected auto, shm or gloo, got '%s'\n", optarg);
        return AA_EXIT_USAGE;
      }
      o.cpu_backend = optarg;
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
