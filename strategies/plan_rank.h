/* Ranking a pool's strategies by their predicted step: the candidates of
 * space.h one at a time (none held: a pool of thousands of devices has
 * millions), each resolved for the model, pruned by its bytes against the
 * device's memory before anything is predicted, predicted (predict.h),
 * and the best `top` kept. Pure: `autoaccel plan` runs it in the CLI from
 * a device profile, the planner from a stored calibration. */
#ifndef AA_PLAN_RANK_H
#define AA_PLAN_RANK_H

#include <stddef.h>
#include <stdint.h>

#include "predict.h"
#include "space.h"

typedef struct aa_plan_entry {
  aa_strategy_t s; /* resolved */
  aa_predict_t p;
  size_t order; /* in the enumeration: the tie-break */
} aa_plan_entry_t;

/* What a rank's model states depend on (private to plan_rank.c). */
typedef struct aa_plan_states_key {
  int degree[AA_AXES], amp, zero, schedule, vpp, partition;
} aa_plan_states_key_t;

/* Keeps a candidate or not, before anything else is done with it (as
 * space.h enumerates it: not resolved); NULL keeps all. */
typedef bool (*aa_plan_filter_fn)(void *ctx, const aa_strategy_t *s);

typedef struct aa_plan_rank {
  /* In. */
  const aa_model_spec_t *spec;
  const aa_calib_t *calib; /* may be NULL with a profile (pool.roofline) */
  aa_predict_pool_t pool;
  aa_space_pool_t space;
  uint64_t memory;        /* the device's bytes; 0 = no memory pruning */
  size_t top;             /* 1..AA_PLAN_TOP_MAX */
  aa_plan_filter_fn keep; /* --fix and the like */
  void *keep_ctx;
  /* Called with every predicted candidate (borrowed for the call), for a
   * page that draws them all; NULL: none. */
  void (*seen)(void *ctx, const aa_plan_entry_t *e);
  void *seen_ctx;
  /* Out: the best `top`, best first (the higher predicted tokens/s, then
   * fewer bytes, then the enumeration's order), and the counts. */
  aa_plan_entry_t *list; /* aa_plan_rank_free */
  size_t n;
  size_t candidates, filtered, invalid, predicted, predicted_oom, unpredicted; /* filtered: by keep, first */
  size_t tensor_too_wide; /* tensor groups larger than a host (pool.host_devices): not placeable */
  char unpredicted_why[256];
  /* Private: the model states of each pipeline rank of the last setting. */
  aa_plan_states_key_t states_key;
  bool states_valid;
  size_t states[AA_STRATEGY_STAGES_MAX];
} aa_plan_rank_t;

#define AA_PLAN_TOP_MAX 1000

/* Fills r's outputs from its inputs. AA_EINVAL for a bad top, AA_ENOMEM. */
int aa_plan_rank(aa_plan_rank_t *r);
void aa_plan_rank_free(aa_plan_rank_t *r);

/* The model FLOPs of one optimizer step of spec, without recomputation
 * (MFU's numerator, docs/device-profiles.md "MFU"): 3 x the forward's
 * GEMMs (2 x every weight matrix's elements a token; of an MoE layer the
 * router's and the k routed and S shared experts' a token passes: its
 * active parameters, spec.h aa_arch_active_param_count), its attention
 * (4 s C a layer a token, PTD-P's count of the s x s scores and their
 * product with the values) and the logits, over global_batch x seq_len
 * tokens. with_recompute adds the forward again for the blocks full
 * checkpointing recomputes (PTD-P's "96" count, its Table 1's figures).
 * Under LoRA (a->lora.r > 0) the frozen base's GEMMs and the head count 2
 * x the forward (no weight gradient; 3 with recomputation), the adapters'
 * 2 r (in + out) a target 3 x like any weight. */
double aa_plan_model_flops(const aa_model_spec_t *spec, bool with_recompute);

#endif
