/* The strategy value: defaults, the canonical key, and the rules that say
 * whether a strategy can train a given model on a given world size.
 * Files (v1 object form): strategy_file.c; ATorch's list form:
 * strategy_atorch.c. Format and key grammar: docs/strategy-format.md. */
#include "strategy.h"

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
  const char *sched = "";
  if (s->pp > 1)
    sched = s->schedule == AA_SCHEDULE_GPIPE ? ".gpipe" : s->schedule == AA_SCHEDULE_1F1B ? ".1f1b" : ".?";
  /* The mesh's numbering changes which ranks talk to which, so it changes
   * the speed; it shows only where it differs from the default's. */
  char order[16] = "", ranks[32] = "";
  aa_axis_order_t o = aa__strategy_effective_order(s);
  if (o != AA_ORDER_TDP) snprintf(order, sizeof order, ".order-%s", aa_axis_order_name(o));
  if (!aa_strategy_rank_order_is_identity(s))
    snprintf(ranks, sizeof ranks, ".ranks-%016llx", (unsigned long long)rank_order_hash(s));
  snprintf(out, AA_STRATEGY_KEY_MAX, "dp%d.tp%d.pp%d%s.z%d.%s.ckpt-%s.mb%d%s%s%s", s->dp, s->tp, s->pp,
           s->sp ? ".sp" : "", s->zero, aa_dtype_name(s->amp), ckpt, s->micro_batch, sched, order, ranks);
}

/* ---- What this engine can run today ------------------------------------
 * Every other rule in this file holds for any engine. These hold only until
 * the engine learns the feature (data and tensor parallelism with ZeRO 0-3 it has);
 * keep them here, together, and delete each one with the change that lifts
 * it. */
static int engine_supports(const aa_strategy_t *s) {
  if (s->pp != 1)
    return aa_error(AA_EINVAL, "pipeline parallel degree %d is not supported by this engine yet", s->pp);
  return 0;
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
  if (a->n_layer % r.pp)
    return aa_error(
        AA_EINVAL,
        "pipeline parallel degree %d must divide n_layer %d (each stage holds n_layer / pp blocks)", r.pp,
        a->n_layer);
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
  if ((rc = engine_supports(&r))) return rc;
  *s = r;
  return 0;
}

int aa_strategy_accum_steps(const aa_strategy_t *s, const aa_model_spec_t *spec) {
  if (s->dp < 1 || s->micro_batch < 0) return 0;
  int per_rank = spec->train.global_batch / s->dp;
  return s->micro_batch == 0 ? 1 : per_rank / s->micro_batch;
}
