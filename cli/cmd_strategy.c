/* `autoaccel strategy`: show a strategy file in words or as canonical
 * JSON, and check one against a model and a world size.
 * Format: docs/strategy-format.md. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/aa.h"
#include "common/mem.h"
#include "common/spec.h"
#include "strategies/cost.h"
#include "strategies/pipeline.h"
#include "strategies/predict.h"
#include "strategies/strategy.h"

#define MAX_WORLD 65536

static void usage_strategy(FILE *f) {
  fprintf(f, "usage: autoaccel strategy <subcommand> [options]\n\n"
             "Strategy files say how a model is trained on a pool of devices: parallel\n"
             "degrees, ZeRO stage, mixed precision, activation checkpointing, micro-batch\n"
             "(format: docs/strategy-format.md). Both the autoaccel v1 object and ATorch's\n"
             "load_strategy list are read.\n\n"
             "subcommands:\n"
             "  show    validate a strategy file and print it in words, or as canonical JSON\n"
             "  check   check a strategy against a model spec and a world size\n\n"
             "Run 'autoaccel strategy <subcommand> --help' for its options.\n"
             "Exit codes: 0 success, 1 failure (bad file, rule failed), 2 usage error.\n");
}

static void usage_show(FILE *f) {
  fprintf(f, "usage: autoaccel strategy show FILE [--json]\n\n"
             "Reads FILE with every check a run applies and prints its key, each knob in\n"
             "words and its provenance.\n\n"
             "options:\n"
             "  --json        print the canonical v1 JSON instead (what autoaccel writes;\n"
             "                converts an ATorch list)\n"
             "  -h, --help    this help\n");
}

static void usage_check(FILE *f) {
  fprintf(f, "usage: autoaccel strategy check FILE --model MODEL.json [--world N] [--memory BYTES]\n\n"
             "Checks that the strategy can train the model: degrees against heads, MLP\n"
             "width, layers and batch, micro-batch against the per-rank batch, sequence\n"
             "parallelism against the tokens of a micro-batch, the world size, and what\n"
             "this engine supports. Prints \"ok: KEY is valid for MODEL (accumulation steps A)\"\n"
             "or the rule that failed, then what the search's cost model predicts: the bytes\n"
             "a rank needs at least, by kind, the FLOPs per trained token, and what the\n"
             "collectives of each process group move per optimizer step.\n\n"
             "options:\n"
             "  --model MODEL.json   the model spec (required)\n"
             "  --world N            number of ranks (devices): the data degree is rescaled to the\n"
             "                       ranks the others leave, as train does (ATorch's rule), then\n"
             "                       checked (default: not checked)\n"
             "  --memory BYTES       a device's memory (e.g. 80G): fail when a rank cannot fit\n"
             "  -h, --help           this help\n");
  aa_cli_set_help(f);
}

static int usage_error(const char *cmd, void (*usage)(FILE *), const char *msg, const char *arg) {
  fprintf(stderr, "autoaccel %s: %s%s%s%s\n\n", cmd, msg, arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
  usage(stderr);
  return AA_EXIT_USAGE;
}

static const char *const zero_words[] = {
    "nothing sharded",
    "optimizer states sharded over the",
    "optimizer states and gradients sharded over the",
    "optimizer states, gradients and parameters sharded over the",
};

static void print_bytes(double b) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4)
    b /= 1024, u++;
  printf(u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

static void print_words(const aa_strategy_t *s) {
  char key[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(s, key);
  const aa_loss_scale_cfg_t *ls = &s->loss_scale;
  printf("key:               %s\n", key);
  long long ranks = aa_strategy_world(s);
  printf("parallel:          ");
  for (int a = 0, k = 0; a < AA_AXES; a++)
    if (aa_strategy_axis_shown(s, (aa_axis_t)a))
      printf("%s%s %d", k++ ? " x " : "", aa_axis_name((aa_axis_t)a), s->degree[a]);
  printf(" = %lld rank%s\n", ranks, ranks == 1 ? "" : "s");
  if (s->sp)
    printf("sequence parallel: on: LayerNorm and the residual stream split along the sequence over the "
           "tensor group\n");
  else
    printf("sequence parallel: off\n");
  if (s->ep > 1)
    printf("expert parallel:   %d: each MoE layer's experts split over groups of %d of the %d data%s "
           "replicas, tokens exchanged by all-to-all\n",
           s->ep, s->ep, s->degree[AA_AXIS_DATA] * s->degree[AA_AXIS_CONTEXT],
           s->degree[AA_AXIS_CONTEXT] > 1 ? " x context" : "");
  if (s->etp > 1)
    printf(
        "expert tensor:     %d: every expert's width split over the %d tensor ranks, their partial outputs "
        "summed over the tensor group\n",
        s->etp, s->etp);
  printf("axis order:        ");
  for (int i = 0, k = 0; i < AA_AXES; i++)
    if (aa_strategy_axis_shown(s, s->order[i]))
      printf(k++ ? ", then %s" : "%s fastest", aa_axis_name(s->order[i]));
  printf("\n");
  if (s->nranks) {
    printf("rank order:        mesh position i runs on rank");
    for (int i = 0; i < s->nranks && i < 32; i++) printf(" %d", s->rank_order[i]);
    printf("%s\n", s->nranks > 32 ? " ..." : "");
  }
  /* ZeRO shards over the ranks holding the same model slice: the data
   * group, times the context group (sizes.h). */
  const int cp = s->degree[AA_AXIS_CONTEXT], replicas = s->degree[AA_AXIS_DATA] * cp;
  printf("zero:              stage %d: %s%s%s\n", s->zero, zero_words[s->zero],
         s->zero == 0 ? ""
         : cp > 1     ? " data x context group"
                      : " data-parallel group",
         s->zero > 0 && replicas == 1 ? " (a group of 1: nothing to shard)" : "");
  if (s->amp == AA_F32)
    printf("amp:               off: fp32 compute\n");
  else
    printf("amp:               %s compute, fp32 master weights\n", aa_dtype_name(s->amp));
  if (s->amp != AA_F16)
    printf("loss scaling:      off (fp16 only)\n");
  else if (ls->loss_scale > 0)
    printf("loss scaling:      static, scale %g\n", (double)ls->loss_scale);
  else
    printf("loss scaling:      dynamic: starts at 2^%d, doubles after %d overflow-free steps,\n"
           "                   halves after %d overflows, never below %g\n",
           ls->initial_scale_power, ls->window, ls->hysteresis, (double)ls->min_scale);
  printf("non-finite grads:  %s\n", s->skip_if_nonfinite ? "skip the step and count it" : "fail the run");
  switch (s->ckpt) {
  case AA_CKPT_NONE: printf("checkpointing:     none: keep every activation for backward\n"); break;
  case AA_CKPT_SELECTIVE:
    printf("checkpointing:     selective: recompute GELU outputs in backward (attention probabilities are never kept)\n");
    break;
  case AA_CKPT_FULL:
    if (s->ckpt_layers > 0)
      printf("checkpointing:     full, first %d blocks: keep only their inputs, recompute them in backward\n",
             s->ckpt_layers);
    else
      printf("checkpointing:     full, every block: keep only block inputs, recompute blocks in backward\n");
    break;
  }
  if (s->micro_batch > 0)
    printf("micro batch:       %d sequences per rank per forward/backward\n", s->micro_batch);
  else
    printf("micro batch:       the whole per-rank batch (global_batch / dp)\n");
  if (s->degree[AA_AXIS_PIPELINE] > 1) {
    if (s->schedule == AA_SCHEDULE_INTERLEAVED)
      printf("pipeline schedule: interleaved 1F1B, %d virtual stages per rank\n", s->vpp);
    else
      printf("pipeline schedule: %s\n", aa_pp_schedule_name(s->schedule));
    printf("pipeline cut:      ");
    if (s->partition == AA_PARTITION_CUSTOM) {
      printf("custom, blocks");
      for (int k = 0; k + 1 < s->n_bounds; k++)
        printf(" [%d, %d)", s->bounds[k], s->bounds[k + 1]);
      printf("\n");
    } else {
      printf("%s\n", s->partition == AA_PARTITION_PARAMETERS
                         ? "parameters: the largest stage as small as it can be"
                         : "uniform: equal block counts");
    }
  } else {
    printf("pipeline schedule: none (no pipeline)\n");
  }

  if (!s->model_name[0] && !s->model_hash[0] && !s->hardware[0] && !s->tokens_per_s && !s->peak_bytes &&
      !s->date[0]) {
    printf("provenance:        none\n");
    return;
  }
  printf("provenance:\n");
  if (s->model_name[0] || s->model_hash[0])
    printf("  model:           %s%s%s%s\n", s->model_name, s->model_hash[0] ? " (hash " : "", s->model_hash,
           s->model_hash[0] ? ")" : "");
  if (s->hardware[0]) printf("  hardware:        %s\n", s->hardware);
  if (s->tokens_per_s) printf("  throughput:      %.1f tokens/s\n", s->tokens_per_s);
  if (s->peak_bytes) {
    printf("  peak memory:     ");
    print_bytes(s->peak_bytes);
    printf(" per rank\n");
  }
  if (s->date[0]) printf("  measured:        %s\n", s->date);
}

static int cmd_show(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int c, json = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'j': json = 1; break;
    case 'h': usage_show(stdout); return AA_EXIT_OK;
    default:
      return usage_error("strategy show", usage_show, "unknown option or missing value:", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) return usage_error("strategy show", usage_show, "expected exactly one FILE", NULL);
  aa_strategy_t s;
  if (aa_strategy_load(&s, argv[optind])) return aa_cli_fail("strategy show");
  if (!json) {
    print_words(&s);
    return AA_EXIT_OK;
  }
  char *text;
  if (aa_strategy_to_json(&s, &text)) return aa_cli_fail("strategy show");
  fputs(text, stdout);
  free(text);
  return AA_EXIT_OK;
}

static int cmd_check(int argc, char **argv) {
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"world", required_argument, 0, 'w'},
                                       {"memory", required_argument, 0, 'M'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *model = NULL;
  long long world = 0;
  size_t memory = 0;
  int c;
  aa_cli_sets_t sets = {0};
  if (aa_cli_take_sets(&argc, argv, opts, "strategy check", &sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'w':
      if ((world = aa_cli_parse_int("strategy check", "--world", optarg, 1, MAX_WORLD)) < 0)
        return AA_EXIT_USAGE;
      break;
    case 'M':
      if (aa_mem_parse_bytes(optarg, &memory) || !memory)
        return usage_error("strategy check", usage_check, "--memory: expected a positive byte count such as 80G, got",
                           optarg);
      break;
    case 'h': usage_check(stdout); return AA_EXIT_OK;
    default:
      return usage_error("strategy check", usage_check, "unknown option or missing value:", argv[optind - 1]);
    }
  }
  if (optind != argc - 1)
    return usage_error("strategy check", usage_check, "expected exactly one FILE", NULL);
  if (!model) return usage_error("strategy check", usage_check, "--model MODEL.json is required", NULL);
  const char *path = argv[optind];
  aa_strategy_t s;
  aa_model_spec_t spec;
  if (aa_strategy_load(&s, path) || aa_cli_spec_load(&spec, model, &sets))
    return aa_cli_fail("strategy check");
  /* As `train` replays it on that many ranks (ATorch's rule: the data
   * degree takes the ranks the others leave). */
  char note[160] = "";
  int rc = world ? aa_strategy_rescale(&s, (int)world, note, sizeof note) : 0;
  if (note[0]) printf("note: %s, as train does (ATorch's parallel_mode rule)\n", note);
  if (!rc) rc = aa_strategy_resolve(&s, &spec, (int)world);
  if (rc) {
    aa_error_wrap(rc, "%s is not valid for %s", path, spec.name);
    return aa_cli_fail("strategy check");
  }
  char key[AA_STRATEGY_KEY_MAX], hash[17];
  aa_strategy_key(&s, key);
  aa_arch_hash(&spec.arch, hash);
  printf("ok: %s is valid for %s (accumulation steps %d)\n", key, spec.name,
         aa_strategy_accum_steps(&s, &spec));
  /* Where the cut falls, which a uniform or parameters cut leaves to the model. */
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
  if (s.degree[AA_AXIS_PIPELINE] > 1 && !aa_pp_bounds(&spec.arch, &s, bounds)) {
    printf("stages: %s, virtual stage k on pipeline rank k %% %d:", aa_pp_partition_name(s.partition),
           s.degree[AA_AXIS_PIPELINE]);
    for (int k = 0; k < aa_pp_stages(&s); k++)
      printf(" [%d, %d)", bounds[k], bounds[k + 1]);
    printf("\n");
  }
  /* Valid, but its measurements describe another model. */
  if (s.model_hash[0] && strcmp(s.model_hash, hash) != 0)
    printf("note: measured on another architecture (hash %s; %s has %s)\n", s.model_hash, spec.name, hash);
  /* The cost model the search prunes with (strategies/cost.h). */
  const int accum = aa_strategy_accum_steps(&s, &spec);
  aa_cost_mem_t m;
  aa_cost_memory(&spec.arch, &s, accum, &m);
  char need[256], total[32], have[32];
  aa_cost_mem_describe(&m, need, sizeof need);
  printf("memory: %s needs at least %s",
         s.degree[AA_AXIS_PIPELINE] > 1 ? "the most loaded stage's rank" : "a rank", need);
  if (memory) printf(", %s %s", m.total <= memory ? "fits in" : "more than", aa_mem_fmt(have, memory));
  double flops = aa_cost_flops_per_token(&spec.arch, &s);
  printf("\nwork: %.4g %s per token%s%s (%s + 12LCT%s)\n", flops >= 1e9 ? flops / 1e9 : flops / 1e6,
         flops >= 1e9 ? "GFLOP" : "MFLOP", s.degree[AA_AXIS_TENSOR] > 1 ? " on each tensor rank" : "",
         s.degree[AA_AXIS_PIPELINE] > 1 ? " on the most loaded stage" : "",
         spec.arch.lora.r ? "4N of the frozen base + the LoRA adapters'" : "6N",
         s.ckpt == AA_CKPT_FULL ? " and the recomputed forward" : "");
  /* Each stage's own figures, and the schedule's bubble. */
  for (int st = 0; s.degree[AA_AXIS_PIPELINE] > 1 && st < s.degree[AA_AXIS_PIPELINE]; st++) {
    aa_cost_mem_t sm;
    aa_cost_memory_stage(&spec.arch, &s, accum, st, &sm);
    aa_cost_mem_describe(&sm, need, sizeof need);
    double f = aa_cost_flops_per_token_stage(&spec.arch, &s, st);
    printf("stage %d: %s; %.4g %s per token\n", st, need, f >= 1e9 ? f / 1e9 : f / 1e6, f >= 1e9 ? "GFLOP" : "MFLOP");
  }
  if (s.degree[AA_AXIS_PIPELINE] > 1)
    printf("bubble: %.1f%% of a step predicted (%s, %d micro-batches a step)\n", 100 * aa_cost_bubble(&s, accum),
           aa_pp_schedule_name(s.schedule), accum);
  aa_cost_comm_t cc;
  aa_cost_comm(&spec.arch, &s, accum, &cc);
  const aa_cost_group_t *groups[] = {&cc.data,    &cc.tensor, &cc.pipeline,   &cc.embedding,
                                     &cc.context, &cc.expert, &cc.expert_data};
  static const char *const group_names[] = {"data",    "tensor", "pipeline",   "embedding",
                                            "context", "expert", "expert-data"};
  for (int g = 0; g < 7; g++) {
    /* A group that carries nothing (the expert-data group without expert
     * parallelism) is not shown. */
    if (groups[g]->ranks < 2 || !groups[g]->bytes) continue;
    char calls[256], ring[32];
    aa_cost_group_describe(groups[g], calls, sizeof calls);
    printf("comm: %s group of %d, per step: %s; a ring sends %s per rank\n", group_names[g], groups[g]->ranks,
           calls, aa_mem_fmt(ring, (size_t)aa_cost_comm_ring_bytes(groups[g])));
  }
  if (memory && m.total > memory) {
    aa_error(AA_EOOM, "%s does not fit: a rank needs at least %s, the device has %s", key,
             aa_mem_fmt(total, m.total), have);
    return aa_cli_fail("strategy check");
  }
  return AA_EXIT_OK;
}

int aa_cmd_strategy(int argc, char **argv) {
  if (argc < 2) {
    usage_strategy(stderr);
    return AA_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage_strategy(stdout);
    return AA_EXIT_OK;
  }
  if (!strcmp(argv[1], "show")) return cmd_show(argc - 1, argv + 1);
  if (!strcmp(argv[1], "check")) return cmd_check(argc - 1, argv + 1);
  return usage_error("strategy", usage_strategy, "unknown subcommand", argv[1]);
}
