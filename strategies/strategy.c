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
  for (int a = 0; a < AA_AXES; a++)
    s->degree[a] = 1;
  aa_axis_default_order(s->order);
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
  if (s->degree[AA_AXIS_PIPELINE] <= 1) return;
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
  char pipe[80], order[16 + AA_AXES] = "", ranks[32] = "", tail[160], degrees[16 * AA_AXES];
  pipeline_key(s, pipe, sizeof pipe);
  if (aa_axis_order_valid(s->order)) {
    aa_axis_t o[AA_AXES], dflt[AA_AXES];
    char name[AA_AXES + 1];
    aa_strategy_effective_order(s, o);
    aa_axis_default_order(dflt);
    if (memcmp(o, dflt, sizeof o))
      snprintf(order, sizeof order, ".order-%s", aa_strategy_order_letters(s, o, name));
  } else {
    snprintf(order, sizeof order, ".order-?");
  }
  if (!aa_strategy_rank_order_is_identity(s))
    snprintf(ranks, sizeof ranks, ".ranks-%016llx", (unsigned long long)rank_order_hash(s));
  size_t d = 0;
  for (int a = 0; a < AA_AXES; a++)
    if (aa_strategy_axis_shown(s, (aa_axis_t)a))
      d += (size_t)snprintf(degrees + d, sizeof degrees - d, "%s%s%d", d ? "." : "",
                            aa_axis_info((aa_axis_t)a)->key, s->degree[a]);
  int head = snprintf(out, AA_STRATEGY_KEY_MAX, "%s%s.z%d.%s.ckpt-%s.mb%d", degrees, s->sp ? ".sp" : "",
                      s->zero, aa_dtype_name(s->amp), ckpt, s->micro_batch);
  if (head < 0 || head >= AA_STRATEGY_KEY_MAX - 1) return; /* out-of-range fields, which validate refuses */
  char ep[16] = "", etp[16] = "";
  if (s->ep > 1) snprintf(ep, sizeof ep, ".ep%d", s->ep);
  if (s->etp > 1) snprintf(etp, sizeof etp, ".etp%d", s->etp);
  int n = snprintf(tail, sizeof tail, "%s%s%s%s%s", ep, etp, pipe, order, ranks);
  /* Every part at once (an interleaved custom cut on a reordered mesh)
   * can pass the key's bound; the tail then becomes one hash of itself,
   * ".x-<16 hex digits>", so that a key is never cut (two strategies must
   * not share one). The head of a valid strategy is at most 67
   * bytes (degrees up to 65536, counts up to INT_MAX), so 19 more always fit. */
  if (head + n >= AA_STRATEGY_KEY_MAX)
    snprintf(tail, sizeof tail, ".x-%016llx", (unsigned long long)aa_fnv1a(AA_FNV_INIT, tail, strlen(tail)));
  size_t len = strlen(tail); /* fits now: head + len < AA_STRATEGY_KEY_MAX */
  if ((size_t)head + len >= AA_STRATEGY_KEY_MAX) len = (size_t)(AA_STRATEGY_KEY_MAX - 1 - head);
  memcpy(out + head, tail, len); /* not snprintf: GCC's -Wformat-truncation sees tail[160] > the key */
  out[head + len] = '\0';
}

int aa__strategy_check(const aa_json_ctx_t *c, const aa_strategy_t *s) {
  for (int a = 0; a < AA_AXES; a++) /* the first fields of the file, custom ones */
    if (s->degree[a] < 1 || s->degree[a] > AA__STRATEGY_DEGREE_MAX) {
      char path[64];
      snprintf(path, sizeof path, "parallel.%s", aa_axis_name((aa_axis_t)a));
      return aa_json_fail(c, AA_EINVAL, path, "must be between 1 and %d (got %d)", AA__STRATEGY_DEGREE_MAX,
                          s->degree[a]);
    }
  int rc = aa_json_check_fields(c, "", aa__strategy_fields, aa__strategy_nfields, s);
  if (rc) return rc;
  if (s->sp != 0 && s->sp != 1)
    return aa_json_fail(c, AA_EINVAL, "parallel.sequence_parallel", "must be true or false (got %d)", s->sp);
  if (!aa_axis_order_valid(s->order))
    return aa_json_fail(c, AA_EINVAL, "parallel.order", "must list every axis once");
  if ((rc = aa__strategy_check_pipeline(c, s))) return rc;
  if (s->ckpt_layers > 0 && s->ckpt != AA_CKPT_FULL)
    return aa_json_fail(
        c, AA_EINVAL, "checkpoint_layers",
        "only applies to checkpoint \"full\" (got %d with checkpoint \"%s\"; leave it out or set it to 0)",
        s->ckpt_layers, aa_ckpt_mode_name(s->ckpt));
  if (s->ep < 0 || s->ep > AA_STRATEGY_EP_MAX)
    return aa_json_fail(c, AA_EINVAL, "parallel.expert", "must be between 1 and %d (got %d)",
                        AA_STRATEGY_EP_MAX, s->ep);
  const long long replicas = (long long)s->degree[AA_AXIS_DATA] * s->degree[AA_AXIS_CONTEXT];
  if (s->ep > 1 && replicas % s->ep)
    return aa_json_fail(c, AA_EINVAL, "parallel.expert",
                        "must divide data x context = %d x %d = %lld (expert ranks are drawn from the "
                        "data-parallel replicas, as Megatron does; got %d)",
                        s->degree[AA_AXIS_DATA], s->degree[AA_AXIS_CONTEXT], replicas, s->ep);
  if (s->etp > 1 && s->etp != s->degree[AA_AXIS_TENSOR])
    return aa_json_fail(c, AA_EUNSUPPORTED, "parallel.expert_tensor",
                        "must be 1 or the tensor degree %d (got %d): autoaccel splits every expert over all "
                        "of the tensor ranks (Megatron's expert_tensor_parallel_size = tensor_model_parallel_"
                        "size) or over none, not over a subgroup",
                        s->degree[AA_AXIS_TENSOR], s->etp);
  if (s->sp && s->degree[AA_AXIS_TENSOR] < 2)
    return aa_json_fail(c, AA_EINVAL, "parallel.sequence_parallel",
                        "needs tensor parallelism (got tensor %d): it splits the sequence between the tensor "
                        "ranks; set tensor > 1, or leave it out or set it to false",
                        s->degree[AA_AXIS_TENSOR]);
  char rule[256];
  if ((rc = aa__rank_order_check(s, rule, sizeof rule)))
    return aa_json_fail(c, rc, "parallel.rank_order", "%s", rule);
  return 0;
}

int aa_strategy_check(const aa_strategy_t *s) {
  const aa_json_ctx_t c = {.origin = "strategy"};
  return aa__strategy_check(&c, s);
}

int aa_strategy_resolve(aa_strategy_t *s, const aa_model_spec_t *spec, int world) {
  int rc = aa_strategy_check(s);
  if (rc) return rc;
  aa_strategy_t r = *s;
  const aa_arch_t *a = &spec->arch;
  const int gb = spec->train.global_batch;
  const int dp = r.degree[AA_AXIS_DATA], tp = r.degree[AA_AXIS_TENSOR], pp = r.degree[AA_AXIS_PIPELINE];

  if (world > 0 && aa_strategy_world(&r) != world) {
    char words[160];
    aa__strategy_world_words(&r, words, sizeof words);
    return aa_error(AA_EINVAL, "%s must equal the world size %d", words, world);
  }
  if (a->n_head % tp)
    return aa_error(AA_EINVAL,
                    "tensor parallel degree %d must divide n_head %d (each rank holds n_head / tp heads)", tp,
                    a->n_head);
  if (a->d_ff % tp)
    return aa_error(
        AA_EINVAL,
        "tensor parallel degree %d must divide d_ff %d (each rank holds d_ff / tp columns of the MLP)", tp,
        a->d_ff);
  if (aa_arch_kv_heads(a) % tp)
    return aa_error(
        AA_EINVAL,
        "tensor parallel degree %d must divide n_kv_head %d (each rank holds n_kv_head / tp key/value "
        "heads; kv heads are not replicated)",
        tp, aa_arch_kv_heads(a));
  if (r.ep > 1 && !a->moe.experts)
    return aa_error(AA_EINVAL,
                    "expert parallel degree %d needs mixture-of-experts layers (model.moe); %s has none: "
                    "leave parallel.expert out or set it to 1",
                    r.ep, spec->name);
  if (r.etp > 1 && !a->moe.experts)
    return aa_error(AA_EINVAL,
                    "expert tensor parallel degree %d needs mixture-of-experts layers (model.moe); %s has "
                    "none: leave parallel.expert_tensor out or set it to 1",
                    r.etp, spec->name);
  if (r.etp > 1 && a->moe.d_ff_expert % r.etp)
    return aa_error(AA_EINVAL,
                    "expert tensor parallel degree %d must divide d_ff_expert %d (each tensor rank holds "
                    "d_ff_expert / tp columns of every expert)",
                    r.etp, a->moe.d_ff_expert);
  if (r.ep > 1 && a->moe.experts % r.ep)
    return aa_error(AA_EINVAL,
                    "expert parallel degree %d must divide experts %d (each rank holds experts / ep of every "
                    "MoE layer)",
                    r.ep, a->moe.experts);
  const int cp = r.degree[AA_AXIS_CONTEXT];
  if (cp > 1 && a->seq_len % (2 * cp))
    return aa_error(
        AA_EINVAL,
        "context parallel degree %d cuts every sequence into 2 x %d = %d chunks (two per rank, one "
        "from each end, so that causal attention costs every rank the same): %d must divide "
        "seq_len %d",
        cp, cp, 2 * cp, 2 * cp, a->seq_len);
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
  if ((rc = aa_pp_bounds(a, &r, bounds))) return rc;
  if (gb % dp)
    return aa_error(AA_EINVAL,
                    "data parallel degree %d must divide global_batch %d (each rank takes an equal share)",
                    dp, gb);
  const int per_rank = gb / dp;
  if (r.micro_batch == 0) r.micro_batch = per_rank;
  if (r.micro_batch > per_rank)
    return aa_error(AA_EINVAL, "micro_batch %d must be <= global_batch / dp = %d / %d", r.micro_batch, gb,
                    dp);
  if (per_rank % r.micro_batch)
    return aa_error(AA_EINVAL, "micro_batch %d must divide global_batch / dp = %d / %d", r.micro_batch, gb,
                    dp);
  if (r.sp && cp == 1 && ((long long)r.micro_batch * a->seq_len) % tp)
    return aa_error(
        AA_EINVAL,
        "sequence_parallel splits a micro-batch's micro_batch x seq_len = %d x %d tokens between the "
        "%d tensor ranks: tp must divide %lld",
        r.micro_batch, a->seq_len, tp, (long long)r.micro_batch * a->seq_len);
  if (r.sp && cp > 1 && ((long long)r.micro_batch * (a->seq_len / cp)) % tp)
    return aa_error(
        AA_EINVAL,
        "sequence_parallel splits a context rank's micro_batch x seq_len / context = %d x %d / %d "
        "tokens between the %d tensor ranks: tp must divide %lld",
        r.micro_batch, a->seq_len, cp, tp, (long long)r.micro_batch * (a->seq_len / cp));
  if (r.ckpt_layers > a->n_layer)
    return aa_error(AA_EINVAL, "checkpoint_layers %d must be <= n_layer %d", r.ckpt_layers, a->n_layer);
  const int accum = per_rank / r.micro_batch;
  if (pp > 1 && r.schedule == AA_SCHEDULE_INTERLEAVED && accum % pp)
    return aa_error(
        AA_EINVAL,
        "the interleaved schedule runs micro-batches in groups of pp: the accumulation steps "
        "global_batch / (dp * micro_batch) = %d / (%d * %d) = %d must be a multiple of the pipeline "
        "degree %d",
        gb, dp, r.micro_batch, accum, pp);
  if (pp > 1 && r.zero >= 2)
    return aa_error(
        AA_EINVAL,
        "ZeRO stage %d with pipeline parallel degree %d: ZeRO-2/3 reduce-scatter or gather every "
        "micro-batch, and a pipeline runs many micro-batches interleaved across stages; DeepSpeed "
        "refuses the same combination; use ZeRO-1 (zero1) with pipeline parallelism",
        r.zero, pp);
  *s = r;
  return 0;
}

int aa_strategy_accum_steps(const aa_strategy_t *s, const aa_model_spec_t *spec) {
  if (s->degree[AA_AXIS_DATA] < 1 || s->micro_batch < 0) return 0;
  int per_rank = spec->train.global_batch / s->degree[AA_AXIS_DATA];
  return s->micro_batch == 0 ? 1 : per_rank / s->micro_batch;
}

int aa_strategy_rescale(aa_strategy_t *s, int world, char *note, size_t cap) {
  if (cap) note[0] = '\0';
  if (s->degree[AA_AXIS_DATA] < 1 || world < 1)
    return aa_error(AA_EINVAL, "strategy: cannot rescale data degree %d to %d ranks", s->degree[AA_AXIS_DATA],
                    world);
  long long mp = aa_strategy_world(s) / s->degree[AA_AXIS_DATA];
  if (s->degree[AA_AXIS_DATA] * mp == world) return 0;
  if (world % mp) {
    char names[64];
    size_t o = 0;
    for (int a = 0; a < AA_AXES; a++)
      if (a != AA_AXIS_DATA)
        o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", o ? " * " : "",
                              aa_axis_info((aa_axis_t)a)->key);
    return aa_error(
        AA_EINVAL,
        "strategy: %s = %lld does not divide the %d rank%s (the world size %d; the data degree takes "
        "the ranks the other degrees leave, as ATorch's parallel_mode does)",
        names, mp, world, world == 1 ? "" : "s", world);
  }
  int dp = (int)(world / mp), alone = dp * s->degree[AA_AXIS_CONTEXT] == 1;
  if (cap)
    snprintf(note, cap, "dp%d rescaled to dp%d for %d rank%s%s", s->degree[AA_AXIS_DATA], dp, world,
             world == 1 ? "" : "s", alone && s->zero ? " (ZeRO dropped: nothing to shard over)" : "");
  s->degree[AA_AXIS_DATA] = dp;
  if (alone) s->zero = 0;
  return 0;
}
