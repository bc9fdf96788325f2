/* Ranking a pool's strategies by their predicted step (plan_rank.h). */
#include "plan_rank.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sizes.h"

static bool better(const aa_plan_entry_t *a, const aa_plan_entry_t *b) {
  if (a->p.tokens_per_s != b->p.tokens_per_s) return a->p.tokens_per_s > b->p.tokens_per_s;
  if (a->p.mem.total != b->p.mem.total) return a->p.mem.total < b->p.mem.total;
  return a->order < b->order;
}

/* Keeps t if it is among the best `top` so far (insertion into the sorted
 * list: top is at most AA_PLAN_TOP_MAX). */
static void keep(aa_plan_rank_t *r, const aa_plan_entry_t *t) {
  size_t i = r->n < r->top ? r->n++ : r->top;
  if (i == r->top && !better(t, &r->list[r->top - 1])) return;
  if (i == r->top) i--;
  for (; i > 0 && better(t, &r->list[i - 1]); i--)
    r->list[i] = r->list[i - 1];
  r->list[i] = *t;
}

/* What a rank's model states depend on (sizes.h aa_sizes_rank_states):
 * not the micro-batch, not checkpointing. */
static aa_plan_states_key_t states_key(const aa_strategy_t *s) {
  aa_plan_states_key_t k;
  memset(&k, 0, sizeof k); /* no padding of garbage for memcmp */
  memcpy(k.degree, s->degree, sizeof k.degree);
  k.amp = (int)s->amp;
  k.zero = s->zero;
  k.schedule = (int)s->schedule;
  k.vpp = s->vpp > 1 ? s->vpp : 1;
  k.partition = (int)s->partition;
  return k;
}

/* The bytes a rank must hold, the largest over the pipeline ranks (as
 * aa_cost_memory): the model states of each rank are kept for the
 * candidates that differ only in their micro-batch and checkpointing (the
 * space walks those consecutively), their activations computed anew. A
 * custom cut (which the space never gives) is not kept. */
static size_t rank_bytes(aa_plan_rank_t *r, const aa_strategy_t *s, int m) {
  const int pp = s->degree[AA_AXIS_PIPELINE];
  const aa_plan_states_key_t key = states_key(s);
  const bool keep = s->partition != AA_PARTITION_CUSTOM;
  if (!keep || !r->states_valid || memcmp(&r->states_key, &key, sizeof key)) {
    r->states_key = key;
    r->states_valid = keep;
    for (int st = 0; st < pp; st++) {
      size_t b[AA_MEM_NKINDS];
      r->states[st] = 0;
      if (aa_sizes_rank_states(&r->spec->arch, s, st, b)) continue;
      for (int k = 0; k < AA_MEM_NKINDS; k++)
        r->states[st] += b[k];
    }
  }
  size_t most = 0;
  for (int st = 0; st < pp; st++) {
    size_t b[AA_MEM_NKINDS], total = r->states[st];
    if (aa_sizes_rank_acts(&r->spec->arch, s, m, st, b)) continue;
    for (int k = 0; k < AA_MEM_NKINDS; k++)
      total += b[k];
    if (total > most) most = total;
  }
  return most;
}

static int visit(void *ctx, size_t i, int setting, const aa_strategy_t *cand) {
  aa_plan_rank_t *r = ctx;
  (void)setting;
  r->candidates++;
  /* The filter sees the candidate as enumerated (resolve keeps its
   * degrees, methods and micro-batch), so that a --fix of a large pool
   * skips the rest unresolved. */
  if (r->keep && !r->keep(r->keep_ctx, cand)) {
    r->filtered++;
    return 0;
  }
  /* The commonest refusal, without resolve's message: a tensor degree
   * that does not divide the heads or the MLP's width. */
  const int tp = cand->degree[AA_AXIS_TENSOR];
  if (r->spec->arch.n_head % tp || r->spec->arch.d_ff % tp) {
    r->invalid++;
    return 0;
  }
  /* A tensor group stays inside one host. */
  if (r->pool.host_devices && cand->degree[AA_AXIS_TENSOR] > r->pool.host_devices) {
    r->tensor_too_wide++;
    return 0;
  }
  aa_plan_entry_t t = {.s = *cand, .order = i};
  if (aa_strategy_resolve(&t.s, r->spec, (int)aa_strategy_world(&t.s))) {
    r->invalid++;
    return 0;
  }
  /* The bytes a rank must hold are a lower bound of its peak
   * (strategies/cost.h): past the device's memory it is an oom. */
  if (r->memory && rank_bytes(r, &t.s, aa_strategy_accum_steps(&t.s, r->spec)) > r->memory) {
    r->predicted_oom++;
    return 0;
  }
  if (aa_predict(r->spec, &t.s, r->calib, &r->pool, &t.p)) {
    if (!r->unpredicted++) snprintf(r->unpredicted_why, sizeof r->unpredicted_why, "%s", aa_last_error());
    return 0;
  }
  r->predicted++;
  if (r->seen) r->seen(r->seen_ctx, &t);
  keep(r, &t);
  return 0;
}

int aa_plan_rank(aa_plan_rank_t *r) {
  if (r->top < 1 || r->top > AA_PLAN_TOP_MAX)
    return aa_error(AA_EINVAL, "plan: top must be 1..%d, not %zu", AA_PLAN_TOP_MAX, r->top);
  r->list = calloc(r->top, sizeof *r->list);
  if (!r->list) return aa_error(AA_ENOMEM, "plan: no memory");
  r->n = r->candidates = r->invalid = r->filtered = r->predicted = r->predicted_oom = r->unpredicted = 0;
  r->tensor_too_wide = 0;
  r->unpredicted_why[0] = '\0';
  r->states_valid = false;
  aa_space_each(&r->space, visit, r);
  return 0;
}

void aa_plan_rank_free(aa_plan_rank_t *r) {
  free(r->list);
  r->list = NULL;
  r->n = 0;
}

double aa_plan_model_flops(const aa_model_spec_t *spec, bool with_recompute) {
  const aa_arch_t *a = &spec->arch;
  aa_tp_dims_t d;
  aa_sizes_tp(a, 1, &d);
  const double C = d.C, s = a->seq_len, V = a->vocab_size;
  /* Per token, forward: every block's weight matrices (qkv, projection,
   * the MLP's two, or an MoE layer's router and the 3 Fe C of each of the
   * k experts a token is routed to and the S shared ones: its active
   * parameters), its attention, and the logits. */
  const double gemm = 2 * (C * d.QKV + d.Cl * C), attn = 4 * s * C, mlp = 2 * (C * d.FH + d.F * C);
  const double moe = 2 * (double)aa_arch_moe_mlp_params(a, a->moe.top_k);
  const int nmoe = aa_arch_moe_layers(a);
  const double weights = a->n_layer * gemm + (a->n_layer - nmoe) * mlp + nmoe * moe;
  const double head = 2 * C * V;
  const double passes = with_recompute ? 4 : 3;
  /* LoRA: a frozen weight's backward is the input gradient alone (2 x
   * its forward, not 3), the attention's is as before, and the adapters'
   * forward, 2 r (in + out) a target, counts 3 times like any weight's. */
  const double fz = a->lora.r ? 1 : 0;
  const double adapters = 2.0 * a->n_layer * (double)aa_lora_block_numel(a, 1);
  return (double)spec->train.global_batch * s *
         ((passes - fz) * weights + passes * (a->n_layer * attn + adapters) + (3 - fz) * head);
}
