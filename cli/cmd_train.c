/* `autoaccel train MODEL`: training from a model spec, in this process or
 * as N data-parallel rank processes on this host (--devices cpu:N, or one
 * rank per GPU with --devices cuda:I,J). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common/aa.h"
#include "common/spec.h"
#include "common/mem.h"
#include "common/rendezvous.h"
#include "comm/comm.h"
#include "engine/launch.h"
#include "strategies/strategy.h"

static void usage(FILE *f) {
  fprintf(
      f, "usage: autoaccel train MODEL.json [--strategy FILE] [options]\n\n"
         "Trains the model described by MODEL.json in this process and saves the final\n"
         "checkpoint (weights + optimizer state) to OUT/final.ckpt.\n\n"
         "options:\n"
         "  --strategy FILE       train with this strategy (amp, activation checkpointing, micro-batch,\n"
         "                        loss scaling); a v1 strategy file or ATorch list form. Default:\n"
         "                        fp32, no checkpointing, the whole batch as one micro-batch\n"
         "  --memory-limit BYTES  fail cleanly (out of memory) if the engine's accounted memory would\n"
         "                        exceed BYTES; suffixes K/M/G (KiB/MiB/GiB) and KB/MB/GB\n"
         "  --threads N           worker threads (default: all cores; with cpu:N, split among the ranks)\n"
         "  --devices cpu:N       train as N data-parallel rank processes on this host (a shared-memory\n"
         "                        process group); the strategy's data degree is rescaled to N / (tp pp cp)\n"
         "                        as ATorch's load_strategy does. Default: the strategy's own world size\n"
         "                        (dp tp pp cp) on the CPU, so a saved dp2 strategy trains on 2 ranks;\n"
         "                        without --strategy, or with --device cuda:K, one process\n"
         "  --backend shm|gloo    with cpu:N, the process group: shm (default, shared memory) or gloo\n"
         "                        (TCP over loopback; the ranks meet in a private temporary directory,\n"
         "                        removed afterwards)\n"
         "  --devices cuda:I,J    one rank per listed GPU (an NCCL process group), rescaled likewise;\n"
         "                        --devices cuda: every visible GPU (CUDA_VISIBLE_DEVICES applies)\n"
         "  --steps N             override train.steps\n"
         "  --checkpoint-every N  save OUT/step_NNNNNN.ckpt every N steps (default: train.checkpoint_every)\n"
         "  --keep-last N         keep only the N newest step checkpoints in OUT, deleting older ones once\n"
         "                        the new one is written (Merak's save_total_limit; 0: keep all; default:\n"
         "                        train.keep_last); final.ckpt is always kept\n"
         "  --weights-only-checkpoints\n"
         "                        save checkpoints without the optimizer state (Merak's no_save_optim;\n"
         "                        default: train.weights_only_checkpoints): a third of the size; resuming\n"
         "                        from one restarts the optimizer, and says so\n"
         "  --out DIR             output directory (default: runs/<model name>)\n"
         "  --resume CKPT         continue from a training checkpoint; losses match an uninterrupted run\n"
         "  --log-every N         print a step line every N steps (default 10; first and last always)\n"
         "  --losses FILE         write every step's loss to FILE\n"
         "  --summary-json FILE   write the final summary as JSON\n"
         "  --device DEV          cpu (default) or cuda:N: train on CUDA device N (needs a build with\n"
         "                        the CUDA backend and that GPU; otherwise exits 1 saying which)\n"
         "  --tf32                with cuda:N, TF32 tensor-core math for the fp32 GEMMs (faster; products\n"
         "                        carry ~1e-3 relative error)\n"
         "  -h, --help            this help\n\n"
         "Step lines: step, training loss, learning rate, gradient norm (before clipping),\n"
         "tokens/s and step time. Validation runs every train.eval_every steps and at the end.\n"
         "A memory line after the first step gives the accounted peak by kind (params, grads,\n"
         "optim, acts, workspace). fp16 steps with inf/nan gradients are skipped and logged.\n"
         "With cpu:N, rank 0 prints and writes the outputs; a rank that fails or dies makes every\n"
         "other rank stop within seconds, and the command exits 1 naming it.\n"
         "Exit codes: 0 success, 1 failure (bad spec, data or checkpoint; divergence), 2 usage.\n");
  aa_cli_set_help(f);
}

/* A saved strategy replayed on `world` ranks: ATorch's load_strategy rule
 * (aa_strategy_rescale, which `strategy check --world` applies too). Says
 * what changed. */
static int rescale(aa_strategy_t *s, int world) {
  char note[160];
  int rc = aa_strategy_rescale(s, world, note, sizeof note);
  if (!rc && note[0]) fprintf(stderr, "autoaccel train: strategy %s\n", note);
  return rc;
}

/* One rank of a local data-parallel run, started as an executor's runner
 * starts one (engine/launch.h); the child's exit status. store_dir: a gloo
 * rank's directory store, NULL for shm and nccl. */
static int run_rank(const aa_model_spec_t *spec, const aa_train_opts_t *o, const char *rendezvous, int rank,
                    int world, int cuda, const char *store_dir) {
  aa_launch_t l = {.spec = spec, .rank = rank, .world = world, .rendezvous = rendezvous, .cuda = cuda, .opts = *o};
  aa_comm_store_t st = {0};
  int rc = store_dir ? aa_comm_dir_store(&st, store_dir) : 0;
  if (!rc) {
    if (store_dir) l.comm.store = &st;
    rc = aa_launch_rank(&l, NULL);
  }
  aa_comm_dir_store_free(&st);
  if (!rc) return AA_EXIT_OK;
  fprintf(stderr, "autoaccel train: rank %d: %s\n", rank, aa_last_error());
  return AA_EXIT_FAIL;
}

/* Forks `world` ranks and waits for all of them. When one fails, the others
 * learn it from the group (a dead peer or a timeout) and stop by
 * themselves; any still running 30 s later are killed. */
static int train_ranks(const aa_model_spec_t *spec, const aa_train_opts_t *o, const aa_cli_devices_t *devs,
                       int gloo) {
  int world = devs->n, on_cuda = devs->cuda[0] >= 0;
  char rdv[AA_RENDEZVOUS_MAX];
  char tag[32];
  snprintf(tag, sizeof tag, "train%d", (int)getpid());
  if (aa_rendezvous_new(rdv, sizeof rdv, on_cuda ? "nccl" : gloo ? "gloo" : "shm", tag)) return aa_cli_fail("train");
  /* gloo: the ranks meet in a private directory (mkdtemp: mode 0700). */
  char dir[256] = "";
  if (gloo) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/aa-train-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
      fprintf(stderr, "autoaccel train: making the gloo store directory %s: %s\n", dir, strerror(errno));
      return AA_EXIT_FAIL;
    }
  }
  pid_t *pids = calloc((size_t)world, sizeof *pids);
  if (!pids) {
    if (gloo) aa_comm_dir_store_remove(dir);
    return aa_cli_fail("train");
  }
  fflush(NULL);
  int started = 0, failed = 0;
  for (; started < world; started++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "autoaccel train: fork of rank %d: %s\n", started, strerror(errno));
      failed = 1;
      break;
    }
    if (pid == 0) _exit(run_rank(spec, o, rdv, started, world, devs->cuda[started], gloo ? dir : NULL));
    pids[started] = pid;
  }
  time_t first_failure = failed ? time(NULL) : 0;
  for (int left = started; left > 0;) {
    int st;
    pid_t pid = waitpid(-1, &st, first_failure ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {
      if (time(NULL) - first_failure > 30)
        for (int r = 0; r < started; r++)
          if (pids[r] > 0) kill(pids[r], SIGKILL);
      struct timespec ts = {0, 100 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    int r = 0;
    while (r < started && pids[r] != pid) r++;
    if (r == started) continue;
    pids[r] = -1;
    left--;
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
      if (WIFSIGNALED(st)) fprintf(stderr, "autoaccel train: rank %d died of signal %d\n", r, WTERMSIG(st));
      failed = 1;
      if (!first_failure) first_failure = time(NULL);
    }
  }
  free(pids);
  if (gloo) aa_comm_dir_store_remove(dir);
  return failed ? AA_EXIT_FAIL : AA_EXIT_OK;
}

int aa_cmd_train(int argc, char **argv) {
  static const struct option longopts[] = {{"threads", required_argument, 0, 't'},
                                           {"steps", required_argument, 0, 's'},
                                           {"checkpoint-every", required_argument, 0, 'c'},
                                           {"out", required_argument, 0, 'o'},
                                           {"resume", required_argument, 0, 'r'},
                                           {"log-every", required_argument, 0, 'l'},
                                           {"losses", required_argument, 0, 'L'},
                                           {"summary-json", required_argument, 0, 'j'},
                                           {"strategy", required_argument, 0, 'S'},
                                           {"memory-limit", required_argument, 0, 'M'},
                                           {"device", required_argument, 0, 'D'},
                                           {"tf32", no_argument, 0, 'F'},
                                           {"devices", required_argument, 0, 'N'},
                                           {"backend", required_argument, 0, 'B'},
                                           {"keep-last", required_argument, 0, 'K'},
                                           {"weights-only-checkpoints", no_argument, 0, 'W'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *strategy_path = NULL;
  aa_train_opts_t o = {.checkpoint_every = -1, .log_every = 10};
  long long v;
  int c, world = 0;
  aa_cli_devices_t devs = {0};
  char one_device[32];
  const char *devices_arg = NULL, *backend = NULL;
  aa_cli_sets_t sets = {0};
  if (aa_cli_take_sets(&argc, argv, longopts, "train", &sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 't':
      if ((v = aa_cli_parse_int("train", "--threads", optarg, 1, 1024)) < 0) return AA_EXIT_USAGE;
      o.threads = (int)v;
      break;
    case 's':
      if ((v = aa_cli_parse_int("train", "--steps", optarg, 1, 1000000000)) < 0) return AA_EXIT_USAGE;
      o.steps = (int)v;
      break;
    case 'c':
      if ((v = aa_cli_parse_int("train", "--checkpoint-every", optarg, 0, 1000000000)) < 0) return AA_EXIT_USAGE;
      o.checkpoint_every = (int)v;
      break;
    case 'l':
      if ((v = aa_cli_parse_int("train", "--log-every", optarg, 1, 1000000000)) < 0) return AA_EXIT_USAGE;
      o.log_every = (int)v;
      break;
    case 'K':
      if ((v = aa_cli_parse_int("train", "--keep-last", optarg, 0, 1000000000)) < 0) return AA_EXIT_USAGE;
      o.keep_last = v ? (int)v : -1;
      break;
    case 'W': o.weights_only = 1; break;
    case 'o': o.out_dir = optarg; break;
    case 'r': o.resume = optarg; break;
    case 'L': o.losses_path = optarg; break;
    case 'j': o.summary_json = optarg; break;
    case 'S': strategy_path = optarg; break;
    case 'D': o.device = optarg; break;
    case 'F': o.tf32 = 1; break;
    case 'B':
      if (strcmp(optarg, "shm") && strcmp(optarg, "gloo")) {
        fprintf(stderr, "autoaccel train: --backend: expected shm or gloo, got '%s'\n", optarg);
        return AA_EXIT_USAGE;
      }
      backend = optarg;
      break;
    case 'N':
      if (aa_cli_parse_devices(optarg, &devs)) {
        fprintf(stderr, "autoaccel train: %s\n", aa_last_error());
        return AA_EXIT_USAGE;
      }
      devices_arg = optarg;
      break;
    case 'M':
      if (aa_mem_parse_bytes(optarg, &o.memory_limit) || o.memory_limit == 0) {
        fprintf(stderr, "autoaccel train: --memory-limit: expected a positive byte count such as 512M, got '%s'\n",
                optarg);
        return AA_EXIT_USAGE;
      }
      break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default:
      fprintf(stderr, "autoaccel train: unknown option or missing value: '%s'\n", argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "autoaccel train: expected exactly one MODEL.json\n");
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  aa_model_spec_t spec;
  if (aa_cli_spec_load(&spec, argv[optind], &sets) || aa_spec_require_data(&spec, argv[optind]))
    return aa_cli_fail("train");
  int on_cpu = !o.device || !strcmp(o.device, "cpu");
  if (devices_arg && !on_cpu) {
    fprintf(stderr, "autoaccel train: --devices and --device %s do not combine: --devices names every device "
                    "(e.g. cuda:0,1)\n", o.device);
    return AA_EXIT_USAGE;
  }
  if (backend && (!on_cpu || (devices_arg && strncmp(devices_arg, "cpu", 3)))) {
    fprintf(stderr, "autoaccel train: --backend %s is for CPU ranks (--devices cpu:N); GPUs use nccl\n", backend);
    return AA_EXIT_USAGE;
  }
  if (devices_arg) {
    if (aa_cli_resolve_devices(&devs, devices_arg)) return aa_cli_fail("train");
    world = devs.n;
    if (devs.cuda[0] >= 0 && world == 1) {
      /* One GPU: this process trains on it, as --device cuda:K does. */
      snprintf(one_device, sizeof one_device, "cuda:%d", devs.cuda[0]);
      o.device = one_device;
      on_cpu = 0;
    }
  }
  aa_strategy_t strategy;
  aa_strategy_default(&strategy);
  if (strategy_path && aa_strategy_load(&strategy, strategy_path)) return aa_cli_fail("train");
  if (!world) world = on_cpu ? (int)aa_strategy_world(&strategy) : 1;
  if (rescale(&strategy, world)) return aa_cli_fail("train");
  /* Checked here, once, before any rank starts: a rule that fails is said
   * once instead of by every rank. */
  if (aa_strategy_resolve(&strategy, &spec, world)) return aa_cli_fail("train");
  o.strategy = &strategy;
  if (world > 1) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = o.threads > 0 ? o.threads : cores > 0 ? (int)cores : 1;
    o.threads = threads / world > 0 ? threads / world : 1;
    if (!devices_arg) { /* a saved strategy's own world size, on the CPU */
      devs.n = world;
      for (int r = 0; r < world; r++) devs.cuda[r] = -1;
    }
    return train_ranks(&spec, &o, &devs, backend && !strcmp(backend, "gloo"));
  }
  /* This process is the only rank: the device is the one --device names. */
  aa_launch_t l = {.spec = &spec, .rank = 0, .world = 1, .cuda = -1, .opts = o};
  if (aa_launch_rank(&l, NULL)) return aa_cli_fail("train");
  return AA_EXIT_OK;
}
