/* `autoaccel train MODEL`: single-process training from a model spec. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "common/spec.h"
#include "common/mem.h"
#include "executor/train.h"
#include "strategies/strategy.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel train MODEL.json [--strategy FILE] [options]\n\n"
          "Trains the model described by MODEL.json in this process and saves the final\n"
          "checkpoint (weights + optimizer state) to OUT/final.ckpt.\n\n"
          "options:\n"
          "  --strategy FILE       train with this strategy (amp, activation checkpointing, micro-batch,\n"
          "                        loss scaling); a v1 strategy file or ATorch list form. Default:\n"
          "                        fp32, no checkpointing, the whole batch as one micro-batch\n"
          "  --memory-limit BYTES  fail cleanly (out of memory) if the engine's accounted memory would\n"
          "                        exceed BYTES; suffixes K/M/G (KiB/MiB/GiB) and KB/MB/GB\n"
          "  --threads N           worker threads (default: all cores)\n"
          "  --steps N             override train.steps\n"
          "  --checkpoint-every N  save OUT/step_NNNNNN.ckpt every N steps (default: train.checkpoint_every)\n"
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
          "Exit codes: 0 success, 1 failure (bad spec, data or checkpoint; divergence), 2 usage.\n");
}

int aa_cmd_train(int argc, char **argv) {
  static const struct option longopts[] = {
      {"threads", required_argument, 0, 't'}, {"steps", required_argument, 0, 's'},
      {"checkpoint-every", required_argument, 0, 'c'}, {"out", required_argument, 0, 'o'},
      {"resume", required_argument, 0, 'r'}, {"log-every", required_argument, 0, 'l'},
      {"losses", required_argument, 0, 'L'}, {"summary-json", required_argument, 0, 'j'},
      {"strategy", required_argument, 0, 'S'}, {"memory-limit", required_argument, 0, 'M'},
      {"device", required_argument, 0, 'D'}, {"tf32", no_argument, 0, 'F'},
      {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  const char *strategy_path = NULL;
  aa_train_opts_t o = {.checkpoint_every = -1, .log_every = 10};
  long long v;
  int c;
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
    case 'o': o.out_dir = optarg; break;
    case 'r': o.resume = optarg; break;
    case 'L': o.losses_path = optarg; break;
    case 'j': o.summary_json = optarg; break;
    case 'S': strategy_path = optarg; break;
    case 'D': o.device = optarg; break;
    case 'F': o.tf32 = 1; break;
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
  if (aa_spec_load(&spec, argv[optind])) return aa_cli_fail("train");
  aa_strategy_t strategy;
  if (strategy_path) {
    if (aa_strategy_load(&strategy, strategy_path)) return aa_cli_fail("train");
    o.strategy = &strategy;
  }
  if (aa_train(&spec, &o, NULL)) return aa_cli_fail("train");
  return AA_EXIT_OK;
}
