/* The search space: which strategies exist for a pool of devices, and the
 * method names a user may leave out of it (`--exclude`) or require of it
 * (`--include`), the same names as ATorch's list where they mean the same. Declared once, here; the
 * planner's search (planner/search.c) only orders, prunes and stops.
 *
 * Pure: no I/O, no allocation, nothing of the planner. */
#ifndef AA_SPACE_H
#define AA_SPACE_H

#include <stdbool.h>
#include <stddef.h>

#include "strategy.h"

/* The methods a search may leave out, as a bit set. The values are the
 * planner's former AA_EX_* bits. */
enum {
  AA_SPACE_EX_BF16 = 1u << 0,
  AA_SPACE_EX_FP16 = 1u << 1,
  AA_SPACE_EX_SELECTIVE = 1u << 2,
  AA_SPACE_EX_FULL = 1u << 3,
  AA_SPACE_EX_FP32 = 1u << 4,
  AA_SPACE_EX_ZERO1 = 1u << 5,
  AA_SPACE_EX_ZERO2 = 1u << 6,
  AA_SPACE_EX_ZERO3 = 1u << 7,
  AA_SPACE_EX_TP = 1u << 8,  /* tensor parallelism (tp > 1), with or without sequence parallelism */
  AA_SPACE_EX_PP = 1u << 9,  /* pipeline parallelism (pp > 1) */
  AA_SPACE_EX_SP = 1u << 10, /* sequence parallelism (tp > 1 with sp): tensor parallelism without it stays */
  AA_SPACE_EX_CP = 1u << 11, /* context parallelism (cp > 1) */
  AA_SPACE_EX_EP = 1u << 12, /* expert parallelism (ep > 1; strategy.h s->ep, no mesh axis) */
};

/* The accepted method names, comma-separated, in table order:
 * "amp, amp_native, bf16, fp16, fp32, checkpoint, selective, full, zero,
 * zero1, zero2, zero3, fsdp, tensor_parallel, sequence_parallel,
 * pipeline_parallel, context_parallel, expert_parallel".
 * Static storage; never NULL. */
const char *aa_space_exclude_names(void);

/* Maps n method names to their bits, OR-ed into *out (which is written
 * only on success). Names are borrowed. AA_EINVAL naming the first unknown
 * one and the accepted ones:
 *   exclude: unknown method "zero9" (accepted: amp, amp_native, ...). */
int aa_space_exclude_mask(const char *const *names, size_t n, unsigned *out);

/* The methods a search must use (`--include`, the same names), as a set
 * of the table's entries: bit k for the k-th name of
 * aa_space_exclude_names(), so that "amp" (bf16 or fp16) stays one
 * method. Maps n names (borrowed) into *out (written only on success).
 * AA_EINVAL naming the first unknown one, as aa_space_exclude_mask does
 * ("include: unknown method ..."), or the first one that `exclude` (AA_SPACE_EX_*
 * bits) leaves no way to use:
 *   include: method "zero1" is also excluded (exclude leaves out zero1). */
int aa_space_include_set(const char *const *names, size_t n, unsigned exclude, unsigned *out);

/* The entries of include (a set as aa_space_include_set makes) that a
 * strategy using methods_used (aa_space_methods_of) does not use: 0 when
 * it uses them all. */
unsigned aa_space_include_unmet(unsigned methods_used, unsigned include);

/* The names of an include set, comma-separated, into buf (cap bytes, always
 * NUL-terminated; cut when short). Returns buf. */
const char *aa_space_include_names(char *buf, size_t cap, unsigned include);

/* The methods strategy s uses, as AA_SPACE_EX_* bits: its precision's, its
 * checkpoint mode's (none has no bit), its ZeRO stage's (0 has none),
 * AA_SPACE_EX_TP when tp > 1, AA_SPACE_EX_SP with sequence parallelism,
 * AA_SPACE_EX_PP when pp > 1, AA_SPACE_EX_CP when cp > 1 and
 * AA_SPACE_EX_EP when ep > 1. A stored strategy answers a search only if
 * (bits & exclude) == 0. */
unsigned aa_space_methods_of(const aa_strategy_t *s);

/* The single-method names of bits ("bf16", "fp16", "fp32", "selective",
 * "full", "zero1", "zero2", "zero3", "tensor_parallel",
 * "sequence_parallel", "pipeline_parallel", "context_parallel", "expert_parallel"), comma-separated, into buf
 * (cap bytes, always NUL-terminated; cut when short). Returns buf. */
const char *aa_space_method_names(char *buf, size_t cap, unsigned bits);

/* A pool to search. */
typedef struct aa_space_pool {
  int devices;      /* >= 1 */
  int global_batch; /* >= 1, the model spec's train.global_batch */
  bool cuda;        /* GPUs (bf16 first) or CPUs (fp32 first) */
  unsigned exclude; /* AA_SPACE_EX_* bits */
  unsigned include; /* an aa_space_include_set: methods every candidate uses, 0 = none */
  /* The model (borrowed), which the pipelines' cuts and the context
   * chunks need: with it the space has pipelines (pp > 1, pp * vpp <=
   * n_layer) and context groups (cp > 1, 2 cp dividing seq_len); NULL:
   * pp = cp = 1 only. */
  const aa_arch_t *arch;
  /* Only gangs of all the devices (a training job's, `plan`'s default):
   * the layouts of world = devices alone. */
  bool whole;
  /* The interleaved schedule's virtual stages: 2 (0 reads as 2: the
   * search's), or every power of two up to vpp_max (at most
   * AA_SPACE_VPP_MAX) where pp x vpp <= n_layer. Megatron's
   * virtual_pipeline_model_parallel_size; the bubble falls with it. */
  int vpp_max;
} aa_space_pool_t;

#define AA_SPACE_VPP_MAX 16
#define AA_SPACE_VPP_STEPS 4 /* 2, 4, 8, 16 */

/* What exists. Each function writes at most cap values (fewer when the
 * space has fewer) into out, in the order the search should try them, and
 * returns how many exist, so that (NULL, 0) counts. */

/* How a gang of dp * tp * pp * cp ranks splits the work: a degree for
 * each axis (common/axis.h) and sequence parallelism over the tensor group
 * (only at tp > 1). */
typedef struct aa_space_layout {
  int degree[AA_AXES]; /* by aa_axis_t */
  int sp;
} aa_space_layout_t;

/* The layouts of a pool: for each world W (ranks of a gang) from devices
 * down to 1, every pipeline degree pp that divides W, smaller first (pp >
 * 1 only with the pool's model, up to its n_layer), then every context
 * degree cp that divides W / pp, smaller first (cp > 1 only with the
 * model, where 2 cp divides seq_len), then every tensor degree tp that
 * divides W / (pp cp), smaller first, with dp = W / (tp pp cp), which must
 * divide global_batch (another dp would give the data ranks unequal
 * shares); at tp > 1 sequence parallelism off, then on (the loops are the
 * axis table's search column). Larger gangs first (more devices), and
 * within one the least pipeline, context and tensor communication first.
 * AA_SPACE_EX_TP leaves out every tp > 1, AA_SPACE_EX_SP the
 * sequence-parallel ones, AA_SPACE_EX_PP every pp > 1, AA_SPACE_EX_CP every
 * cp > 1. A model with mixture-of-experts layers has tp = pp = cp = 1
 * only: the engine refuses the others with them (data and expert
 * parallelism are what it runs).
 * Whether a model allows a tp (it must divide n_head and d_ff) is
 * aa_strategy_resolve's to say. */
size_t aa_space_layouts(aa_space_layout_t *out, size_t cap, const aa_space_pool_t *pool);
/* The ZeRO stages at data-parallel degree dp, least communication first:
 * 0..3 when dp > 1, only 0 at dp 1 (nothing to shard), less the excluded. */
size_t aa_space_zero_stages(int *out, size_t cap, int dp, unsigned exclude);
/* The precisions, fastest first: on GPUs bf16, fp16 (which adds loss
 * scaling), fp32; on CPUs fp32 (16-bit storage only adds conversions),
 * bf16, fp16. Less the excluded. */
size_t aa_space_precisions(aa_dtype_t *out, size_t cap, bool cuda, unsigned exclude);
/* The checkpoint modes, least recompute first: none, selective, full;
 * less the excluded. */
size_t aa_space_ckpt_modes(aa_ckpt_mode_t *out, size_t cap, unsigned exclude);
/* The micro-batches of a per-rank batch: its divisors, larger first. */
size_t aa_space_micro_batches(int *out, size_t cap, int per_rank);
/* The expert-parallel degrees (strategy.h s->ep) of a layout of
 * `replicas` data x context ranks on arch (NULL: a dense model), least
 * communication first: 1, then for a model with mixture-of-experts layers
 * each divisor > 1 of replicas that divides its experts, smaller first,
 * unless AA_SPACE_EX_EP is excluded. Every ZeRO stage takes them (the
 * engine shards an expert slice over its expert-data group). */
size_t aa_space_experts(int *out, size_t cap, const aa_arch_t *arch, int replicas, unsigned exclude);

/* The candidate strategies of a pool, in the order the search tries them:
 * for each layout, pipeline shape, ZeRO stage (over the layout's dp x cp),
 * expert-parallel degree, experts whole or split over the tensor ranks
 * (s->etp 1, then the tensor degree: only for a model with
 * mixture-of-experts layers at tp > 1 when tp divides d_ff_expert),
 * precision and checkpoint mode (each as above, nested in that order) a
 * "setting", and within a setting every micro-batch (divisors of
 * global_batch / dp, larger first). The pipeline shapes at pp > 1: the
 * schedules 1f1b, interleaved with 2 virtual stages (or each of pool->vpp_max; where pp * vpp <=
 * n_layer) and gpipe, each with the uniform cut and then the parameters
 * cut where that cut differs (a custom cut is the user's to give). A
 * pipeline takes ZeRO 0 and 1 only (aa_strategy_resolve refuses 2 and 3
 * with pipelines), micro-batches that give at least pp of them a step
 * (fewer leave a stage idle for most of the step) and, interleaved, a
 * multiple of pp. Each is aa_strategy_default with the layout, shape,
 * zero, amp, ckpt and micro_batch set, not resolved against a model: the
 * planner drops what the model does not allow, with the rule. Writes at
 * most cap strategies into out and, when setting is not NULL, each one's
 * setting index (0, 1, ...; consecutive candidates of one setting share
 * it) into setting; returns how many exist, so that (NULL, NULL, 0, pool)
 * counts. A setting that misses a method of the pool's include set is left
 * out whole (settings are numbered without it), as an excluded method's
 * are. 0 when every strategy is excluded or the pool is empty (devices or
 * global_batch < 1). */
size_t aa_space_enumerate(aa_strategy_t *out, int *setting, size_t cap, const aa_space_pool_t *pool);

/* The same candidates in the same order, one at a time, without holding
 * them: visit(ctx, i, setting, s) for each (s borrowed for the call);
 * a non-zero return stops the walk. Returns how many were visited (all of
 * them when none stopped it); visit may be NULL (a count). */
typedef int (*aa_space_visit_fn)(void *ctx, size_t i, int setting, const aa_strategy_t *s);
size_t aa_space_each(const aa_space_pool_t *pool, aa_space_visit_fn visit, void *ctx);

/* How far apart two strategies are for `--from`: the number of knobs in
 * which they differ, out of dp, tp, sp, pp, zero, amp, ckpt, micro_batch
 * and the pipeline's shape (schedule, virtual stages and cut, one knob;
 * equal between two pp = 1 strategies), the expert-parallel degree and
 * the expert tensor degree. 0..11. */
int aa_space_distance(const aa_strategy_t *a, const aa_strategy_t *b);

#endif
