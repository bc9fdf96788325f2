/* The strategy value: defaults, the canonical key, and the rules that say
 * whether a strategy can train a given model on a given world size.
 * Files (v1 object form): strategy_file.c; ATorch's list form:
 * strategy_atorch.c. Format and key grammar: docs/strategy-format.md. */
#include "strategy.h"

#include "pipeline.h"
#include "strategy_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

void aa_strategy_default(aa_strategy_t *s) {
  memset(s, 0, sizeof *s);
  s->dp = s->tp = s->pp = 1;
  s->amp = AA_F32;
  s->ckpt = AA_CKPT_NONE;
  s->schedule = AA_SCHEDULE_1F1B;
  s->vpp = 1;
  /* DeepSpeed's DynamicLossScaler defaults. */
  s->loss_scale = (aa_loss_scale_cfg_t){
      .loss_scale = 0.0f, .initial_scale_power = 16, .window = 1000, .hysteresis = 2, .min_scale = 1.0f};
}

const char *aa_ckpt_mode_name(aa_ckpt_mode_t m) {
  switch (m) {
  case AA_CKPT_NONE: return "none";
  case AA_CKPT_SELECTIVE: return "selective";
  case AA_CKPT_FULL: return "full";
  }
  return "?";
}

/* FNV-1a 64 of the rank order written in decimal, comma-separated
 * ("1,0,3,2"), so that the key's digits can be recomputed by hand. */
static uint64_t rank_order_hash(const aa_strategy_t *s) {
  uint64_t h = AA_FNV_INIT;
  for (int i = 0; i < s->nranks && i < AA_STRATEGY_WORLD_MAX; i++) {
    char num[16];
    int n = snprintf(num, sizeof num, "%s%d", i ? "," : "", s->rank_order[i]);
    h = aa_fnv1a(h, num, (size_t)n);
  }
  return h;
}

/* The pipeline part of the key: the schedule (".1f1b", ".gpipe",
 * ".interleaved-v2") and the cut when not uniform (".part-params", or a
 * custom cut's boundaries ".part-0-3-6-8", or ".part-<16 hex digits>",
 * the FNV-1a 64 of "0,3,6,8", when they would take more than 24 bytes).
 * Empty at pp = 1, where none of it changes the computation. */
static void pipeline_key(const aa_strategy_t *s, char *out, size_t cap) {
  out[0] = '\0';
  if (s->pp <= 1) return;
  char sched[32], part[40] = "";
  if (s->schedule == AA_SCHEDULE_INTERLEAVED)
    snprintf(sched, sizeof sched, ".interleaved-v%d", s->vpp);
  else
    snprintf(sched, sizeof sched, ".%s", aa_pp_schedule_name(s->schedule));
  if (s->partition == AA_PARTITION_PARAMETERS) {
    snprintf(part, sizeof part, ".part-params");
  } else if (s->partition == AA_PARTITION_CUSTOM) {
    char list[32];
    size_t o = 0;
    uint64_t h = AA_FNV_INIT;
    for (int k = 0; k < s->n_bounds && k <= AA_STRATEGY_STAGES_MAX; k++) {
      char num[16];
      int n = snprintf(num, sizeof num, "%s%d", k ? "," : "", s->bounds[k]);
      h = aa_fnv1a(h, num, (size_t)n);
      if (o < sizeof list)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", k ? "-" : "", s->bounds[k]);
    }
    if (o <= 24)
      snprintf(part, sizeof part, ".part-%s", list);
    else
      snprintf(part, sizeof part, ".part-%016llx", (unsigned long long)h);
  }
  snprintf(out, cap, "%s%s", sched, part);
}

/* The key names exactly what changes the computation or its speed, so
 * that a store can use it as the identity of a measured configuration. */
void aa_strategy_key(const aa_strategy_t *s, char out[AA_STRATEGY_KEY_MAX]) {
  char ckpt[24];
  switch (s->ckpt) {
  case AA_CKPT_NONE: snprintf(ckpt, sizeof ckpt, "none"); break;
  case AA_CKPT_SELECTIVE: snprintf(ckpt, sizeof ckpt, "sel"); break;
  case AA_CKPT_FULL:
    if (s->ckpt_layers > 0)
      snprintf(ckpt, sizeof ckpt, "full%d", s->ckpt_layers);
    else
      snprintf(ckpt, sizeof ckpt, "full");
    break;
  default: snprintf(ckpt, sizeof ckpt, "?"); break;
  }
  /* The mesh's numbering changes which ranks talk to which, so it changes
   * the speed; it shows only where it differs from the default's. */
  char pipe[80], order[16] = "", ranks[32] = "", tail[160];
  pipeline_key(s, pipe, sizeof pipe);
  aa_axis_order_t o = aa__strategy_effective_order(s);
  if (o != AA_ORDER_TDP) snprintf(order, sizeof order, ".order-%s", aa_axis_order_name(o));
  if (!aa_strategy_rank_order_is_identity(s))
    snprintf(ranks, sizeof ranks, ".ranks-%016llx", (unsigned long long)rank_order_hash(s));
  int head = snprintf(out, AA_STRATEGY_KEY_MAX, "dp%d.tp%d.pp%d%s.z%d.%s.ckpt-%s.mb%d", s->dp, s->tp, s->pp,
                      s->sp ? ".sp" : "", s->zero, aa_dtype_name(s->amp), ckpt, s->micro_batch);
  if (head < 0 || head >= AA_STRATEGY_KEY_MAX - 1) return; /* out-of-range fields, which validate refuses */
  int n = snprintf(tail, sizeof tail, "%s%s%s", pipe, order, ranks);
  /* Every part at once (an interleaved custom cut on a reordered mesh)
   * can pass the key's bound; the tail then becomes one hash of itself,
   * ".x-<16 hex digits>", so that a key is never cut (two strategies must
   * not share one). The head of a valid strategy is at most 67
   * bytes (degrees up to 65536, counts up to INT_MAX), so 19 more always fit. */
  if (head + n >= AA_STRATEGY_KEY_MAX)
    snprintf(tail, sizeof tail, ".x-%016llx", (unsigned long long)aa_fnv1a(AA_FNV_INIT, tail, strlen(tail)));
  snprintf(out + head, (size_t)(AA_STRATEGY_KEY_MAX - head), "%s", tail);
}

int aa_strategy_resolve(aa_strategy_t *s, const aa_model_spec_t *spec, int world) {
  int rc = aa__strategy_validate(s);
  if (rc) return rc;
  aa_strategy_t r = *s;
  const aa_arch_t *a = &spec->arch;
  const int gb = spec->train.global_batch;

  long long ranks = (long long)r.dp * r.tp * r.pp;
  if (world > 0 && ranks != world)
    return aa_error(AA_EINVAL, "dp * tp * pp = %d * %d * %d = %lld must equal the world size %d", r.dp, r.tp,
                    r.pp, ranks, world);
  if (a->n_head % r.tp)
    return aa_error(AA_EINVAL,
                    "tensor parallel degree %d must divide n_head %d (each rank holds n_head / tp heads)",
                    r.tp, a->n_head);
  if (a->d_ff % r.tp)
    return aa_error(AA_EINVAL,
                    "tensor parallel degree %d must divide d_ff %d (each rank holds d_ff / tp columns of the MLP)",
                    r.tp, a->d_ff);
  if (aa_arch_kv_heads(a) % r.tp)
    return aa_error(AA_EINVAL,
                    "tensor parallel degree %d must divide n_kv_head %d (each rank holds n_kv_head / tp key/value "
                    "heads; kv heads are not replicated)",
                    r.tp, aa_arch_kv_heads(a));
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
  if ((rc = aa_pp_bounds(a, &r, bounds))) return rc;
  if (gb % r.dp)
    return aa_error(AA_EINVAL,
                    "data parallel degree %d must divide global_batch %d (each rank takes an equal share)",
                    r.dp, gb);
  const int per_rank = gb / r.dp;
  if (r.micro_batch == 0) r.micro_batch = per_rank;
  if (r.micro_batch > per_rank)
    return aa_error(AA_EINVAL, "micro_batch %d must be <= global_batch / dp = %d / %d", r.micro_batch, gb,
                    r.dp);
  if (per_rank % r.micro_batch)
    return aa_error(AA_EINVAL, "micro_batch %d must divide global_batch / dp = %d / %d", r.micro_batch, gb,
                    r.dp);
  if (r.sp && ((long long)r.micro_batch * a->seq_len) % r.tp)
    return aa_error(AA_EINVAL,
                    "sequence_parallel splits a micro-batch's micro_batch x seq_len = %d x %d tokens between the "
                    "%d tensor ranks: tp must divide %lld",
                    r.micro_batch, a->seq_len, r.tp, (long long)r.micro_batch * a->seq_len);
  if (r.ckpt_layers > a->n_layer)
    return aa_error(AA_EINVAL, "checkpoint_layers %d must be <= n_layer %d", r.ckpt_layers, a->n_layer);
  const int accum = per_rank / r.micro_batch;
  if (r.pp > 1 && r.schedule == AA_SCHEDULE_INTERLEAVED && accum % r.pp)
    return aa_error(
        AA_EINVAL,
        "the interleaved schedule runs micro-batches in groups of pp: the accumulation steps "
        "global_batch / (dp * micro_batch) = %d / (%d * %d) = %d must be a multiple of the pipeline "
        "degree %d",
        gb, r.dp, r.micro_batch, accum, r.pp);
  if (r.pp > 1 && r.zero >= 2)
    return aa_error(
        AA_EINVAL,
        "ZeRO stage %d with pipeline parallel degree %d: ZeRO-2/3 reduce-scatter or gather every "
        "micro-batch, and a pipeline runs many micro-batches interleaved across stages; DeepSpeed "
        "refuses the same combination; use ZeRO-1 (zero1) with pipeline parallelism",
        r.zero, r.pp);
  *s = r;
  return 0;
}

int aa_strategy_accum_steps(const aa_strategy_t *s, const aa_model_spec_t *spec) {
  if (s->dp < 1 || s->micro_batch < 0) return 0;
  int per_rank = spec->train.global_batch / s->dp;
  return s->micro_batch == 0 ? 1 : per_rank / s->micro_batch;
}
