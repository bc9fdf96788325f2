/* `autoaccel executor`: serve one device to a planner (executor/worker.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "common/mem.h"
#include "executor/worker.h"
#include "proto/msg.h"

static void usage(FILE *f) {
  fprintf(f, "usage: autoaccel executor [--planner ADDR] [options]\n\n"
             "Serves one device to a planner: connects, registers the device, and runs each dry run\n"
             "or training job the planner sends in a runner child process of its own, so a job that\n"
             "crashes or runs out of memory cannot take the executor down. Reconnects when the planner\n"
             "goes away (backoff 0.1 s doubling to 5 s, forever). Stops in order on SIGINT, SIGTERM or\n"
             "SIGHUP (its terminal closed), unless it was started with SIGHUP ignored (nohup).\n\n"
             "options:\n"
             "  --planner ADDR        unix:PATH, PATH, tcp:HOST:PORT or HOST:PORT\n"
             "                        (default: unix:<state dir>/planner.sock; the state dir is\n"
             "                        $AUTOACCEL_HOME, else ~/.autoaccel)\n"
             "  --device DEV          cpu (default) or cuda:N, the CUDA runtime's device N (counted after\n"
             "                        CUDA_VISIBLE_DEVICES); hello reports its name,\n"
             "                        memory, SM count, compute capability and peak bf16 FLOP/s\n"
             "  --threads N           threads per run (default: all cores)\n"
             "  --memory-limit BYTES  report BYTES as the device memory and fail runs that would exceed it\n"
             "                        (out of memory); suffixes K/M/G (KiB/MiB/GiB) and KB/MB/GB.\n"
             "                        Default: the physical memory (a GPU's memory with cuda:N), no limit\n"
             "  --token-file FILE     present the token in FILE (first line, mode 0600) to the planner;\n"
             "                        on TCP the default is <state dir>/token if it exists\n"
             "  --name NAME           device name to report (default: the GPU's name, or the CPU model and\n"
             "                        thread count)\n"
             "  --host NAME           host name to report (default: this machine's, gethostname); the\n"
             "                        planner places a gang's ranks by it\n"
             "  --address IP          numeric IPv4 or IPv6 address the ranks of its gangs listen on, which\n"
             "                        the other ranks dial (default: the local address of its TCP\n"
             "                        connection to the planner; 127.0.0.1 over a unix socket)\n"
             "  -h, --help            this help\n\n"
             "Exit codes: 0 stopped by a signal, 1 failure (the planner refused the token, bad token\n"
             "file, unsupported device), 2 usage.\n");
}

int aa_cmd_executor(int argc, char **argv) {
  static const struct option longopts[] = {{"planner", required_argument, 0, 'p'},
                                           {"device", required_argument, 0, 'd'},
                                           {"threads", required_argument, 0, 't'},
                                           {"memory-limit", required_argument, 0, 'M'},
                                           {"token-file", required_argument, 0, 'k'},
                                           {"name", required_argument, 0, 'n'},
                                           {"host", required_argument, 0, 'H'},
                                           {"address", required_argument, 0, 'a'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  aa_worker_opts_t o = {0};
  long long v;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': o.planner = optarg; break;
    case 'd': {
      int cuda;
      if (aa_proto_parse_device(optarg, &cuda)) {
        fprintf(stderr, "autoaccel executor: %s\n", aa_last_error());
        return AA_EXIT_USAGE;
      }
      o.device = optarg;
      break;
    }
    case 't':
      if ((v = aa_cli_parse_int("executor", "--threads", optarg, 1, 1024)) < 0) return AA_EXIT_USAGE;
      o.threads = (int)v;
      break;
    case 'M':
      if (aa_mem_parse_bytes(optarg, &o.memory_limit) || o.memory_limit == 0) {
        fprintf(stderr,
                "autoaccel executor: --memory-limit: expected a positive byte count such as 512M, got '%s'\n",
                optarg);
        return AA_EXIT_USAGE;
      }
      break;
    case 'k': o.token_file = optarg; break;
    case 'n': o.name = optarg; break;
    case 'H':
      if (!optarg[0] || strlen(optarg) > 255) {
        fprintf(stderr, "autoaccel executor: --host: expected a name of 1..255 bytes, got '%.64s'\n", optarg);
        return AA_EXIT_USAGE;
      }
      o.host = optarg;
      break;
    case 'a':
      if (aa_worker_parse_address(optarg)) {
        fprintf(stderr, "autoaccel executor: %s\n", aa_last_error());
        return AA_EXIT_USAGE;
      }
      o.address = optarg;
      break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default:
      fprintf(stderr, "autoaccel executor: unknown option or missing value: '%s'\n", argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "autoaccel executor: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  aa_worker_t *w;
  if (aa_worker_create(&w, &o)) return aa_cli_fail("executor");
  aa_worker_handle_signals(w);
  int rc = aa_worker_run(w);
  if (rc) aa_cli_fail("executor");
  aa_worker_destroy(w);
  return rc ? AA_EXIT_FAIL : AA_EXIT_OK;
}
