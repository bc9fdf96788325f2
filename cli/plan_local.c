/* `autoaccel plan MODEL --pool h100-80gb:1024`: a pool named by a device
 * profile (strategies/profile.h), planned here, without a planner: every
 * candidate of the whole pool ranked by the step the profile's roofline
 * predicts (strategies/roofline.h, plan_rank.h), or only the completions
 * of a partial strategy (--fix). docs/device-profiles.md "Planning from a
 * profile". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "common/file.h"
#include "common/mem.h"
#include "plan_html.h"
#include "strategies/calib_file.h"
#include "strategies/plan_rank.h"
#include "strategies/predict.h"
#include "strategies/profile.h"
#include "strategies/roofline.h"
#include "strategies/sizes.h"

/* --fix: the fields a partial strategy file gives, and their values. */
typedef struct {
  aa_strategy_t s;
  bool degree[AA_AXES], sp, ep, etp, zero, amp, ckpt, micro_batch, schedule, vpp, partition;
} fix_t;

/* The keys of the file's v1 object that fix a searched knob (the strategy
 * reader's aliases too: Megatron's axis names, virtual_pipeline_model_
 * parallel_size, Merak's partition_method). A key the profile plan cannot
 * honour is refused, with why: a rank order (the plan places ranks in
 * Megatron's order), checkpoint_layers and a custom cut (the search does
 * not vary them), and the knobs that do not change a plan. */
static int fix_load(fix_t *f, const char *path) {
  memset(f, 0, sizeof *f);
  if (aa_strategy_load(&f->s, path)) return -1;
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err), *named = NULL;
  if (!json_is_object(root)) {
    json_decref(root);
    return aa_error(AA_EINVAL,
                    "%s: --fix takes a strategy file's v1 object (the fields to hold), not ATorch's list",
                    path);
  }
  /* The fields given, under the reader's names (Megatron's, Merak's read as
   * the v1 keys), so that none is held or dropped by its spelling. */
  int nrc = aa_strategy_canonical_names(root, path, &named);
  json_decref(root);
  if (nrc) return nrc;
  root = named;
  static const struct {
    const char *key, *why;
  } refused[] = {
      {"checkpoint_layers", "the search checkpoints all blocks or none"},
      {"custom_partition", "the search cuts uniformly or by parameters"},
      {"loss_scaling", "it does not change a plan"},
      {"skip_if_nonfinite", "it does not change a plan"},
  };
  int rc = 0;
  json_t *par = json_object_get(root, "parallel");
  for (size_t i = 0; i < sizeof refused / sizeof refused[0] && !rc; i++)
    if (json_object_get(root, refused[i].key))
      rc = aa_error(AA_EINVAL, "%s: --fix cannot hold %s: %s (leave it out)", path, refused[i].key,
                    refused[i].why);
  if (!rc && (json_object_get(par, "order") || json_object_get(par, "rank_order")))
    rc = aa_error(
        AA_EINVAL,
        "%s: --fix cannot hold parallel.order or parallel.rank_order: a plan from a profile places "
        "ranks in Megatron's order (tensor, context, data, pipeline from the fastest) (leave it out)",
        path);
  if (!rc && f->s.partition == AA_PARTITION_CUSTOM)
    rc = aa_error(AA_EINVAL,
                  "%s: --fix cannot hold a custom partition: the search cuts uniformly or by "
                  "parameters (leave it out)",
                  path);
  if (rc) {
    json_decref(root);
    return rc;
  }
  for (int a = 0; a < AA_AXES; a++) {
    const char *alias = aa_axis_info((aa_axis_t)a)->megatron;
    f->degree[a] = json_object_get(par, aa_axis_name((aa_axis_t)a)) != NULL ||
                   (alias && json_object_get(par, alias) != NULL);
  }
  f->sp = json_object_get(par, "sequence_parallel") != NULL;
  f->ep =
      json_object_get(par, "expert") != NULL || json_object_get(par, "expert_model_parallel_size") != NULL;
  f->etp = json_object_get(par, "expert_tensor") != NULL ||
           json_object_get(par, "expert_tensor_parallel_size") != NULL;
  f->zero = json_object_get(root, "zero") != NULL;
  f->amp = json_object_get(root, "amp") != NULL;
  f->ckpt = json_object_get(root, "checkpoint") != NULL;
  f->micro_batch = json_object_get(root, "micro_batch") != NULL && f->s.micro_batch > 0;
  f->schedule = json_object_get(root, "schedule") != NULL;
  f->vpp = json_object_get(root, "virtual_stages") != NULL ||
           json_object_get(root, "virtual_pipeline_model_parallel_size") != NULL;
  f->partition =
      json_object_get(root, "partition") != NULL || json_object_get(root, "partition_method") != NULL;
  json_decref(root);
  return 0;
}

static bool fix_keeps(void *ctx, const aa_strategy_t *s) {
  const fix_t *f = ctx;
  for (int a = 0; a < AA_AXES; a++)
    if (f->degree[a] && s->degree[a] != f->s.degree[a]) return false;
  if (f->sp && s->sp != f->s.sp) return false;
  if (f->ep && (s->ep > 1 ? s->ep : 1) != (f->s.ep > 1 ? f->s.ep : 1)) return false;
  if (f->etp && (s->etp > 1 ? s->etp : 1) != (f->s.etp > 1 ? f->s.etp : 1)) return false;
  if (f->zero && s->zero != f->s.zero) return false;
  if (f->amp && s->amp != f->s.amp) return false;
  if (f->ckpt && s->ckpt != f->s.ckpt) return false;
  if (f->micro_batch && s->micro_batch != f->s.micro_batch) return false;
  if (f->schedule && s->degree[AA_AXIS_PIPELINE] > 1 && s->schedule != f->s.schedule) return false;
  if (f->vpp && s->degree[AA_AXIS_PIPELINE] > 1 && (s->vpp > 1 ? s->vpp : 1) != (f->s.vpp > 1 ? f->s.vpp : 1))
    return false;
  if (f->partition && s->degree[AA_AXIS_PIPELINE] > 1 && s->partition != f->s.partition) return false;
  return true;
}

/* The figures of one ranked strategy, as the table and --json show them. */
typedef struct {
  double tflops_gpu; /* model FLOP/s per GPU, recomputation counted as PTD-P does, TFLOP/s */
  double mfu;        /* model FLOP/s (no recomputation) over the devices' peak */
  double comm;       /* share of the step in collectives the schedule waits for */
} figures_t;

/* MFU's denominator: the device's dense 16-bit tensor-core peak (bf16,
 * else fp16), whatever a strategy's precision, as PaLM, Megatron and
 * Llama 3 report it, so that MFU orders strategies as tokens/s does. */
static double peak_of(const aa_device_profile_t *p) {
  double v = p->dense_flop_per_s[AA_PROFILE_BF16];
  if (!(v > 0)) v = p->dense_flop_per_s[AA_PROFILE_FP16];
  return v > 0 ? v : p->dense_flop_per_s[AA_PROFILE_FP32];
}

static figures_t figures(const aa_model_spec_t *spec, const aa_device_profile_t *prof, int devices,
                         const aa_plan_entry_t *e) {
  figures_t f;
  const double step = e->p.step_s;
  const bool recompute = e->s.ckpt == AA_CKPT_FULL;
  f.tflops_gpu = aa_plan_model_flops(spec, recompute) / step / devices / 1e12;
  f.mfu = aa_plan_model_flops(spec, false) / step / devices / peak_of(prof);
  f.comm = (e->p.tensor_comm_s + e->p.pipeline_comm_s + e->p.context_comm_s + e->p.expert_comm_s +
            e->p.data_comm_s) /
           step;
  return f;
}

static json_t *entry_json(const aa_model_spec_t *spec, const aa_device_profile_t *prof, int devices,
                          const aa_plan_entry_t *e) {
  char key[AA_STRATEGY_KEY_MAX], *text = NULL;
  aa_strategy_key(&e->s, key);
  figures_t f = figures(spec, prof, devices, e);
  json_t *strategy = NULL;
  if (!aa_strategy_to_json(&e->s, &text)) strategy = json_loads(text, 0, NULL);
  free(text);
  return json_pack(
      "{s:s, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:o*, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}}",
      "key", key, "tokens_per_s", e->p.tokens_per_s, "step_ms", e->p.step_s * 1e3, "tflops_per_gpu",
      f.tflops_gpu, "mfu", f.mfu, "peak_bytes", (json_int_t)e->p.mem.total, "bubble", e->p.bubble,
      "comm_share", f.comm, "strategy", strategy, "step_s", "forward", e->p.forward_s, "backward",
      e->p.backward_s, "tensor_comm", e->p.tensor_comm_s, "pipeline_comm", e->p.pipeline_comm_s,
      "context_comm", e->p.context_comm_s, "expert_comm", e->p.expert_comm_s, "bubble", e->p.bubble_s,
      "optimizer", e->p.optimizer_s, "data_comm", e->p.data_comm_s);
}

/* --calib FILE: a calibration file (`calib export`) of the pool's kind of
 * GPU: its one-host calibration times what it measured, its links between
 * hosts (nccl-hosts) the collectives across nodes of the sizes it
 * measured; the profile the rest. */
typedef struct {
  aa_calib_file_t f;
  const aa_calib_entry_t *one, *across;
} calib_in_t;

static int calib_load(calib_in_t *ci, const char *path) {
  memset(ci, 0, sizeof *ci);
  char *text = NULL;
  size_t len = 0;
  int rc = aa_read_file(path, AA_CALIB_FILE_MAX, "a calibration file", &text, &len);
  if (!rc) rc = aa_calib_file_parse(&ci->f, text, len, path);
  free(text);
  if (rc) return rc;
  for (int i = 0; i < ci->f.n; i++) {
    const aa_calib_entry_t *e = &ci->f.e[i];
    if (!e->calib->cuda) continue;
    if (!strcmp(e->backend, AA_CALIB_ACROSS_HOSTS_CUDA)) {
      if (!ci->across) ci->across = e;
    } else if (!ci->one || e->calib->n_op > ci->one->calib->n_op) {
      ci->one = e;
    }
  }
  if (!ci->one) {
    aa_calib_file_clear(&ci->f);
    return aa_error(AA_EINVAL,
                    "%s: no calibration of a CUDA device measured on one host: a pool named by a "
                    "GPU profile takes a GPU's calibration (autoaccel calib export cuda)",
                    path);
  }
  return 0;
}

static const char *date_of(int64_t t, char buf[32]) {
  time_t at = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&at, &tm) || !strftime(buf, 32, "%Y-%m-%d %H:%M UTC", &tm)) snprintf(buf, 32, "?");
  return buf;
}

/* --html: every predicted strategy onto the page. */
typedef struct {
  aa_plan_page_t *page;
  const aa_model_spec_t *spec;
  const aa_device_profile_t *prof;
  int devices;
} seen_t;

static void seen(void *ctx, const aa_plan_entry_t *e) {
  const seen_t *sn = ctx;
  char key[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(&e->s, key);
  aa_plan_page_add(sn->page, key, (double)e->p.mem.total, figures(sn->spec, sn->prof, sn->devices, e).mfu);
}

/* --html FILE: the page (plan_html.h); an exit code. */
static int write_page(const aa_cli_plan_local_t *o, const aa_device_profile_t *prof,
                      const aa_plan_page_t *page, const aa_plan_rank_t *r, int nodes, int per_node,
                      const char *calib_device, double secs, const json_t *list, const json_t *assume) {
  char title[512], pool[128], source[256];
  snprintf(title, sizeof title, "autoaccel plan: %s on %d x %s", o->spec->name, o->devices, prof->name);
  snprintf(pool, sizeof pool, "%d x %s, %d node%s of %d", o->devices, prof->name, nodes,
           nodes == 1 ? "" : "s", per_node);
  snprintf(source, sizeof source, "the device profile %s%s%s", prof->name,
           calib_device ? " and the measured calibration of " : ", no measured calibration",
           calib_device ? calib_device : "");
  json_t *summary =
      json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "model", o->spec->name, "pool", pool,
                "op times from", source, "candidates", (json_int_t)(r->candidates - r->filtered),
                "the model allows", (json_int_t)(r->candidates - r->filtered - r->invalid), "predicted",
                (json_int_t)r->predicted, "out of memory", (json_int_t)r->predicted_oom, "seconds", secs);
  FILE *f = NULL;
  int rc = summary ? aa_file_open_write(o->html, false, 0644, &f) : aa_error(AA_ENOMEM, "plan: no memory");
  if (!rc) {
    rc = aa_plan_page_write(page, f, title, summary, list, assume);
    if (fclose(f) && !rc) rc = aa_error(AA_EIO, "plan: cannot write %s", o->html);
  }
  json_decref(summary);
  return rc ? aa_cli_fail("plan") : AA_EXIT_OK;
}

int aa_cli_plan_local(const aa_cli_plan_local_t *o) {
  aa_device_profile_t prof;
  if (aa_profile_find(&prof, o->profile)) return aa_cli_fail("plan");
  const int per_node = o->per_node > 0 ? o->per_node : prof.gpus_per_node;
  if (o->devices > per_node && o->devices % per_node)
  {
    aa_error(AA_EINVAL, "the pool's %d devices are not whole nodes of %d GPUs (--per-node)", o->devices, per_node);
    return aa_cli_fail("plan");
  }
  fix_t fix;
  if (o->fix && fix_load(&fix, o->fix)) return aa_cli_fail("plan");
  calib_in_t ci = {0};
  if (o->calib && calib_load(&ci, o->calib)) return aa_cli_fail("plan");
  const aa_calib_t *measured = ci.one ? ci.one->calib : NULL;
  aa_roofline_t roof;
  aa_roofline_init(&roof, &prof);
  aa_roofline_fit(&roof, measured);
  roof.attention = (aa_roof_attention_t)o->attention;
  aa_plan_rank_t r = {.spec = o->spec,
                      .calib = measured,
                      .pool = {.devices = o->devices,
                               .host_devices = per_node,
                               .roofline = &roof,
                               .inter = ci.across ? ci.across->calib : NULL},
                      .space = {.devices = o->devices,
                                .global_batch = o->spec->train.global_batch,
                                .cuda = true,
                                .arch = &o->spec->arch,
                                .whole = !o->subsets,
                                .vpp_max = AA_SPACE_VPP_MAX},
                      .memory = (uint64_t)prof.memory_bytes,
                      .top = o->top,
                      .keep = o->fix ? fix_keeps : NULL,
                      .keep_ctx = &fix};
  seen_t sn = {.spec = o->spec, .prof = &prof, .devices = o->devices};
  if (o->html) {
    if (!(sn.page = aa_plan_page_new((double)prof.memory_bytes))) {
      aa_calib_file_clear(&ci.f);
      return aa_cli_fail("plan");
    }
    r.seen = seen;
    r.seen_ctx = &sn;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (aa_plan_rank(&r)) {
    aa_plan_page_free(sn.page);
    aa_calib_file_clear(&ci.f);
    return aa_cli_fail("plan");
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  const int nodes = o->devices > per_node ? o->devices / per_node : 1;
  char mem[32];
  aa_mem_fmt(mem, (size_t)prof.memory_bytes);
  json_t *assume = json_array();
  if (measured) {
    char when[32];
    int ops = 0, modelled = 0;
    for (size_t i = 0; i < r.n; i++) {
      if (r.list[i].p.ops_modelled > modelled) modelled = r.list[i].p.ops_modelled;
      ops = 1;
    }
    json_array_append_new(
        assume,
        json_sprintf("no dry run: op times from the measured calibration of %s (%s, measured %s, "
                     "--calib %s) where it has the op's shape; the others (up to %d a strategy shown) "
                     "from the %s profile's roofline with each op class's level refitted to the "
                     "measured ops (GEMMs x%.2f, attention x%.2f, memory-bound x%.2f of the profile's "
                     "times)",
                     ci.one->device, ci.one->backend, date_of(ci.one->measured_at, when), o->calib,
                     ops ? modelled : 0, prof.name, roof.scale[AA_ROOF_GEMM][AA_BF16],
                     roof.scale[AA_ROOF_ATTENTION][AA_BF16], roof.scale[AA_ROOF_MEMORY][AA_BF16]));
    json_array_append_new(assume,
                          json_sprintf("collectives of exactly the kind and group size the calibration "
                                       "measured take its lines (%s inside a node%s); the others the "
                                       "profile's links",
                                       ci.one->calib->backend, ci.across ? ", nccl-hosts across nodes" : ""));
  } else {
    json_array_append_new(
        assume,
        json_sprintf("no dry run and no measured calibration: op times from the %s profile's datasheet "
                     "figures through a roofline (GEMMs at %.2f of the dense peak, attention at %.2f, "
                     "memory-bound ops at %.3f of the HBM's bytes/s, %.1f us a kernel at least; "
                     "docs/device-profiles.md, each constant's source there)",
                     prof.name, roof.eff[AA_ROOF_GEMM], roof.eff[AA_ROOF_ATTENTION], roof.eff[AA_ROOF_MEMORY],
                     roof.fixed_s * 1e6));
  }
  if (roof.attention == AA_ROOF_ATTENTION_MATERIALISED)
    json_array_append_new(
        assume,
        json_sprintf("attention materialised (--attention), as Megatron-LM ran it in 2021: QK^T and PV as "
                     "batched GEMMs over the whole s x s square at %.2f of the peak, the scores written "
                     "and passed through a causal softmax and a dropout (1-byte mask) at %.3f of the "
                     "HBM's bytes/s, forward and backward (docs/device-profiles.md); context "
                     "parallelism's ring blocks stay fused",
                     roof.eff[AA_ROOF_GEMM], roof.eff[AA_ROOF_MEMORY]));
  else
    json_array_append_new(assume,
                          json_sprintf("attention fused: this engine's kernel (log-sum-exp, no s x s scores "
                                       "in memory, no dropout); --attention materialised times one that "
                                       "writes the scores, as Megatron-LM did in 2021"));
  json_array_append_new(
      assume, json_sprintf("%d node%s of %d: Megatron's rank order (tensor, context, data, pipeline from the "
                           "fastest), tensor groups inside a node (%zu strategies with a wider one left out); "
                           "collectives are rings on NVLink inside a node (%.0f GB/s a direction at %.2f) and "
                           "across nodes on each GPU's own adapter (%.0f GB/s at %.2f)",
                           nodes, nodes == 1 ? "" : "s", per_node, r.tensor_too_wide,
                           prof.intra_node.bytes_per_s / 1e9, roof.intra_eff, prof.inter_node.bytes_per_s / 1e9,
                           roof.inter_eff));
  json_array_append_new(assume, json_sprintf("memory: a rank's bytes (strategies/cost.h) against the device's "
                                             "%s; %zu strategies out of memory left out before prediction",
                                             mem, r.predicted_oom));
  if (o->spec->arch.moe.experts)
    json_array_append_new(
        assume, json_sprintf(
                    "mixture of experts: under expert parallelism the busiest expert rank's GEMMs and "
                    "all-to-alls timed at %.2f x the even load (Switch Transformer's training capacity "
                    "factor; a planner's plan takes what the model's runs measured), and a rank's "
                    "routed-row buffers hold the even load x %.2f (a step routed past it grows them, and the "
                    "engine reports by how much)",
                    AA_PREDICT_MOE_IMBALANCE, AA_MOE_EP_MARGIN));
  json_array_append_new(
      assume, json_sprintf("MFU: the model's FLOPs without recomputation (3 x the forward's "
                           "GEMMs, attention and logits) over the devices' dense bf16 peak "
                           "(whatever the strategy's precision); TFLOP/S/GPU counts full checkpointing's "
                           "recomputed forward as PTD-P does"));
  if (!o->subsets)
    json_array_append_new(assume, json_sprintf("every strategy uses all %d devices (--subsets for smaller gangs)",
                                               o->devices));
  if (r.unpredicted)
    json_array_append_new(assume, json_sprintf("%zu strategies could not be predicted: %s", r.unpredicted,
                                               r.unpredicted_why));
  int code = AA_EXIT_OK;
  json_t *list = json_array();
  for (size_t i = 0; i < r.n; i++)
    json_array_append_new(list, entry_json(o->spec, &prof, o->devices, &r.list[i]));
  if (o->html)
    code = write_page(o, &prof, sn.page, &r, nodes, per_node, measured ? ci.one->device : NULL, secs, list,
                      assume);
  if (code != AA_EXIT_OK) {
    /* the page's error is printed */
  } else if (o->json) {
    json_incref(list);
    json_incref(assume);
    json_t *out = json_pack(
        "{s:s, s:s?, s:s, s:{s:s, s:i, s:i, s:I}, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:o}", "source",
        measured ? "calibration" : "profile", "calibration_device", measured ? ci.one->device : NULL,
        "attention", aa_roof_attention_name(roof.attention), "pool", "profile", prof.name, "devices",
        o->devices, "per_node", per_node, "memory_bytes", (json_int_t)prof.memory_bytes, "candidates",
        (json_int_t)r.candidates, "completions", (json_int_t)(r.candidates - r.filtered), "valid",
        (json_int_t)(r.candidates - r.filtered - r.invalid), "predicted_oom", (json_int_t)r.predicted_oom,
        "predicted", (json_int_t)r.predicted, "seconds", secs, "strategies", list, "assumptions", assume);
    char *text = out ? json_dumps(out, JSON_INDENT(2)) : NULL;
    if (text) printf("%s\n", text);
    free(text);
    json_decref(out);
  } else {
    printf("plan for %d x %s (%d node%s of %d) from the device profile %s%s%s:\n"
           "%zu candidates, %zu of them the model allows, %zu predicted, %zu out of memory, in %.1f s\n\n",
           o->devices, prof.name, nodes, nodes == 1 ? "" : "s", per_node, prof.name,
           measured ? " and the measured calibration of " : ", no measured calibration",
           measured ? ci.one->device : "", r.candidates - r.filtered, r.candidates - r.filtered - r.invalid,
           r.predicted, r.predicted_oom, secs);
    if (o->fix)
      printf("only the completions of --fix %s: %zu of the pool's %zu\n\n", o->fix, r.candidates - r.filtered,
             r.candidates);
    size_t keyw = 8;
    char key[AA_STRATEGY_KEY_MAX];
    for (size_t i = 0; i < r.n; i++) {
      aa_strategy_key(&r.list[i].s, key);
      if (strlen(key) > keyw) keyw = strlen(key);
    }
    if (!r.n)
      printf("no strategy fits the pool\n");
    else
      printf("%4s  %-*s %11s %9s %6s %10s %12s %7s %6s\n", "RANK", (int)keyw, "STRATEGY", "TOK/S", "TFLOP/S/GPU",
             "MFU", "STEP S", "MEM/GPU", "BUBBLE", "COMM");
    for (size_t i = 0; i < r.n; i++) {
      const aa_plan_entry_t *e = &r.list[i];
      figures_t f = figures(o->spec, &prof, o->devices, e);
      char rate[32], peak[32];
      aa_strategy_key(&e->s, key);
      aa_client_fmt_rate(rate, e->p.tokens_per_s, true);
      aa_mem_fmt(peak, (size_t)e->p.mem.total);
      printf("%4zu  %-*s %11s %11.1f %5.1f%% %10.3f %12s %6.1f%% %5.1f%%\n", i + 1, (int)keyw, key, rate,
             f.tflops_gpu, 100 * f.mfu, e->p.step_s, peak, 100 * e->p.bubble, 100 * f.comm);
    }
    printf("\nassumptions:\n");
    size_t i;
    json_t *line;
    json_array_foreach(assume, i, line) printf("  - %s\n", json_string_value(line));
    if (!r.n) code = AA_EXIT_FAIL;
    if (o->html) printf("\nthe page: %s\n", o->html);
  }
  json_decref(list);
  json_decref(assume);
  aa_plan_page_free(sn.page);
  aa_plan_rank_free(&r);
  aa_calib_file_clear(&ci.f);
  return code;
}
