/* Strategies: the knobs that say how a model is trained on a pool of
 * devices (parallel degrees, ZeRO stage, mixed precision, activation
 * checkpointing, micro-batch, pipeline schedule), the strategy file that
 * users save and replay, and the validity rules against a model.
 *
 * Lives in strategies/ because both the planner (search, store) and the
 * engine (applying a strategy) need it; it depends on common/ only.
 * File format: docs/strategy-format.md. */
#ifndef AA_STRATEGY_H
#define AA_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/aa.h"
#include "../common/axis.h"
#include "../common/spec.h"

#define AA_STRATEGY_VERSION 1
#define AA_STRATEGY_KEY_MAX 96
/* The largest expert-parallel degree (a model has at most 1,024 experts). */
#define AA_STRATEGY_EP_MAX 1024
/* The most ranks an explicit rank order lists (the protocol's world bound). */
#define AA_STRATEGY_WORLD_MAX 4096

typedef enum {
  AA_CKPT_NONE = 0,      /* keep every activation for backward */
  AA_CKPT_SELECTIVE = 1, /* drop the GELU output; recompute it in backward (no mode keeps attention probabilities) */
  AA_CKPT_FULL = 2,      /* keep only each block's input; recompute the block in backward */
} aa_ckpt_mode_t;

/* Pipeline schedules (strategies/pipeline.h): 1F1B (PipeDream-flush,
 * Megatron's default), GPipe (all forwards, then all backwards), and
 * Megatron's interleaved 1F1B over vpp virtual stages per rank. */
typedef enum { AA_SCHEDULE_1F1B = 0, AA_SCHEDULE_GPIPE = 1, AA_SCHEDULE_INTERLEAVED = 2 } aa_pp_schedule_t;

/* How the blocks are cut into pipeline stages (Merak's partition_method):
 * uniform (equal block counts, the remainder one each to the stages after
 * the first), parameters (the cut that minimises the largest stage's
 * parameter count, the embedding counted on the first stage and the tied
 * head on the last), or custom boundaries (Merak's custom_partition). */
typedef enum { AA_PARTITION_UNIFORM = 0, AA_PARTITION_PARAMETERS = 1, AA_PARTITION_CUSTOM = 2 } aa_pp_partition_t;

/* The most virtual stages (pp * vpp) a strategy may cut a model into. */
#define AA_STRATEGY_STAGES_MAX 256

/* fp16 dynamic loss scaling (DeepSpeed's DynamicLossScaler semantics). */
typedef struct aa_loss_scale_cfg {
  float loss_scale;        /* 0 = dynamic; > 0 = static scale */
  int initial_scale_power; /* dynamic: first scale is 2^power; default 16, range 0..64 */
  int window;              /* loss_scale_window: overflow-free steps before the scale doubles; default 1000 */
  int hysteresis;          /* overflows tolerated before the scale halves; default 2 */
  float min_scale;         /* min_loss_scale: the scale never drops below; default 1 */
} aa_loss_scale_cfg_t;

typedef struct aa_strategy {
  int degree[AA_AXES]; /* by aa_axis_t (axis.h): each axis's parallel degree, >= 1 */
  int sp;              /* sequence parallelism over the tensor group (Megatron's sequence_parallel):
                          0 or 1, 1 only with a tensor degree > 1 */
  int ep;              /* expert parallelism (Megatron's expert_model_parallel_size): every MoE layer's
                          experts split over ep ranks drawn from the data x context replicas (not a
                          mesh axis: the world stays the degrees' product; layout.h
                          aa_layout_expert); 0 or 1: none; else it divides data x context, and a
                          model's experts (aa_strategy_resolve) */
  int etp;             /* Megatron's expert_tensor_parallel_size: 0 or 1, every expert whole on each
                          tensor rank (which repeats its work); the tensor degree (> 1), every expert's
                          width split over the tensor ranks as tensor parallelism splits a dense MLP
                          (strategies/sizes.h aa_sizes_etp). No other value */
  /* How the mesh numbers its positions: the axes from the fastest-varying
   * to the slowest (ATorch's parallel_mode lists them in this order), so
   * that positions 0, 1, 2, ... step along order[0]. Every permutation of
   * the axes is an order; the default (aa_axis_default_order) is
   * Megatron's: tensor fastest, then data, pipeline slowest (tensor groups
   * take neighbouring ranks, which share a host). */
  aa_axis_t order[AA_AXES];
  /* ATorch's rank_order: position i of the mesh (numbered by `order`) is
   * global rank rank_order[i]. nranks = 0: none (rank_order NULL), position
   * i is rank i; else nranks = the world size (aa_strategy_world) and
   * rank_order is a permutation of 0..nranks-1. The list is held once per
   * process and never changes (set it with aa_strategy_set_rank_order), so
   * a strategy stays a small value that copies by assignment. Layout
   * arithmetic: strategies/layout.h. */
  int nranks;
  const uint16_t *rank_order;
  int zero;                /* ZeRO stage 0..3 */
  aa_dtype_t amp;          /* AA_F32 (no amp), AA_BF16, AA_F16 */
  aa_ckpt_mode_t ckpt;     /* activation checkpointing mode */
  int ckpt_layers;         /* AA_CKPT_FULL only: checkpoint the first k blocks; 0 = all blocks */
  int micro_batch;         /* sequences per rank per forward/backward, >= 1 */
  aa_pp_schedule_t schedule; /* pipeline schedule; meaningful when pp > 1 */
  int vpp;                 /* virtual stages per pipeline rank (Megatron's virtual_pipeline_model_parallel_size):
                              1, or >= 2 with the interleaved schedule; 0 is read as 1 */
  aa_pp_partition_t partition; /* how the blocks are cut into the pp * vpp virtual stages */
  int n_bounds;                /* AA_PARTITION_CUSTOM: pp * vpp + 1 block boundaries in bounds, 0 first,
                                  n_layer last, strictly increasing (virtual stage k holds blocks
                                  [bounds[k], bounds[k+1])); 0 otherwise (bounds NULL). Held once per
                                  process, as rank_order: set with aa_strategy_set_bounds */
  const int *bounds;
  aa_loss_scale_cfg_t loss_scale; /* used when amp == AA_F16 */
  int skip_if_nonfinite;   /* bf16/fp32: skip (and count) a step with inf/nan gradients instead of failing */

  /* Provenance; empty / 0 when unknown. */
  char model_hash[17];     /* aa_arch_hash of the model it was measured on */
  char model_name[128];
  char hardware[128];      /* hardware fingerprint, e.g. "cpu:2x<model name>" */
  double tokens_per_s;     /* measured throughput, 0 = not measured */
  double peak_bytes;       /* measured peak memory per rank, 0 = not measured */
  char date[32];           /* ISO 8601 UTC, e.g. "2026-11-22T10:00:00Z" */
} aa_strategy_t;

/* The default strategy: every degree 1, zero 0, fp32, no checkpointing,
 * micro_batch 0 (= "the whole per-rank batch", resolved by
 * aa_strategy_resolve), schedule 1f1b, loss-scale defaults as above, the
 * default axis order and no rank order. */
void aa_strategy_default(aa_strategy_t *s);

/* Sets s's rank order to the n ranks at `ranks` (n = 0: none), copied
 * into the process's shared table (every strategy listing the same ranks
 * shares one copy; nothing to free). The permutation is not checked here:
 * aa_strategy_check holds it to the degrees. Returns 0, or AA_EINVAL (n
 * outside 0..AA_STRATEGY_WORLD_MAX, or the table's bound reached: a
 * process keeps 32 MiB of distinct lists) or AA_ENOMEM with a message. */
int aa_strategy_set_rank_order(aa_strategy_t *s, const uint16_t *ranks, int n);
/* The same for a custom pipeline cut's n block boundaries (n = 0: none;
 * else 2..AA_STRATEGY_STAGES_MAX + 1, checked as the rank order is). Sets
 * n_bounds and bounds, not the partition mode. */
int aa_strategy_set_bounds(aa_strategy_t *s, const int *bounds, int n);

/* The world size: the product of the degrees (as a long long, which an
 * unchecked strategy's degrees cannot overflow). */
long long aa_strategy_world(const aa_strategy_t *s);

/* The strategy's degree over the axes placement keeps inside a host
 * (common/axis.h aa_axis_host_mask): the size of the groups that must not
 * span hosts. */
int aa_strategy_host_unit(const aa_strategy_t *s);

/* Checks every field of s against the rules a v1 file is held to (ranges,
 * choices, provenance text, the rank order against the degrees, the
 * pipeline's cut and schedule, what needs what), without a model, so that
 * what resolve accepts and what save writes can always be loaded back.
 * The strategy file reader calls it on what it read. Message:
 * "strategy: <field>: <rule>", e.g. "strategy: parallel.data: must be
 * between 1 and 65536 (got 0)". */
int aa_strategy_check(const aa_strategy_t *s);

/* Parses a strategy file: either the v1 object form or ATorch's list form
 * (see docs/strategy-format.md). Errors name the file and the line/column
 * (syntax) or the field and the rule, or the unsupported ATorch method.
 * *out is written only on success. */
int aa_strategy_load(aa_strategy_t *out, const char *path);
/* Same from a NUL-terminated JSON string; origin names it in errors. */
int aa_strategy_parse(aa_strategy_t *out, const char *json, const char *origin);

/* A v1 object (a jansson json_t) with every other project's name read as
 * the v1 key it stands for (Megatron's, Merak's, megatron-wrap's: the
 * file format's "Seed names"), as the reader sees it: *out a new reference
 * (json_decref), root unchanged. For a caller that asks which fields a
 * file gives (plan --fix). Errors as aa_strategy_load's, naming origin. */
struct json_t;
int aa_strategy_canonical_names(const struct json_t *root, const char *origin, struct json_t **out);

/* Writes s as a v1 strategy file (pretty JSON, keys in a fixed order),
 * atomically: a fresh temporary renamed over path (common/file.h), so a
 * symlink at path is replaced, never written through. */
int aa_strategy_save(const aa_strategy_t *s, const char *path);
/* Same as `name` (one path component) in the directory open as dirfd
 * (borrowed), created with `mode` less the umask: for a directory checked
 * on that descriptor, so no path is resolved again. Messages name `name`. */
int aa_strategy_save_at(const aa_strategy_t *s, int dirfd, const char *name, int mode);
/* Same into a malloc'd NUL-terminated string (*out transferred to the
 * caller, free with free()). */
int aa_strategy_to_json(const aa_strategy_t *s, char **out);

/* Canonical one-line key, e.g. "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4";
 * see docs/strategy-format.md for the grammar. Two strategies with the same
 * key run the same computation at the same speed (loss-scaling settings and
 * provenance are not part of it). An axis order shows (".order-tpd") only
 * when it groups ranks differently from the default for these degrees, a
 * rank order (".ranks-<16 hex digits>") only when it is not the identity. */
void aa_strategy_key(const aa_strategy_t *s, char out[AA_STRATEGY_KEY_MAX]);

/* Checks s against a model and a world size (world = 0: do not check the
 * world size; a rank order must still list aa_strategy_world ranks). Fills
 * micro_batch when it is 0. Returns AA_EINVAL with a message naming the
 * rule that failed, e.g.
 *   "micro_batch 3 must divide global_batch / dp = 16 / 1"
 *   "tensor parallel degree 4 must divide d_ff 6". */
int aa_strategy_resolve(aa_strategy_t *s, const aa_model_spec_t *spec, int world);

/* ATorch's load_strategy rule for a strategy replayed on `world` ranks
 * (its parallel_mode: "the size of data will be automatically adjusted so
 * that the product of all sizes equals world_size"): the other degrees
 * (tensor, pipeline, context) are kept and the data degree takes the ranks
 * left; ZeRO, which shards over data x context ranks, is dropped when
 * there is one. `train` and `strategy check --world` both apply it. When
 * something changed, *note (cap bytes) says what ("dp1 rescaled to dp2 for
 * 2 ranks"), else it is "". AA_EINVAL when the other degrees do not
 * divide world; s is unchanged then. */
int aa_strategy_rescale(aa_strategy_t *s, int world, char *note, size_t cap);

/* Gradient-accumulation steps of a resolved strategy:
 * global_batch / (data degree * micro_batch). */
int aa_strategy_accum_steps(const aa_strategy_t *s, const aa_model_spec_t *spec);

const char *aa_ckpt_mode_name(aa_ckpt_mode_t m); /* "none", "selective", "full" */

/* Whether the key, a written file, `strategy show` and an order's name
 * show axis a of s: an axis of the first three always, a later one
 * (common/axis.h `always`) only above degree 1, so that it leaves every
 * existing key and file as it was. */
bool aa_strategy_axis_shown(const aa_strategy_t *s, aa_axis_t a);

/* The letters, fastest first, of the axes of `order` that s shows
 * (aa_strategy_axis_shown): "tdp" for the default order of a strategy
 * without context parallelism. Into out (AA_AXES + 1 bytes). */
const char *aa_strategy_order_letters(const aa_strategy_t *s, const aa_axis_t order[AA_AXES],
                                      char out[AA_AXES + 1]);

/* The degree of axis a in s; 0 for a value that is not an axis. */
int aa_strategy_degree(const aa_strategy_t *s, aa_axis_t a);
/* Whether s has no rank order or one that maps every position to itself
 * (then position i of the mesh is global rank i). */
bool aa_strategy_rank_order_is_identity(const aa_strategy_t *s);
/* The order that groups the ranks of s's degrees as s->order does, picked
 * canonically: only axes of degree > 1 have an order that matters, so it
 * is the default when those come in the default's order (always when at
 * most one axis is parallel), else those axes in s->order's order followed
 * by the others. The key shows this order, not s->order. s->order must be
 * valid (aa_axis_order_valid). */
void aa_strategy_effective_order(const aa_strategy_t *s, aa_axis_t out[AA_AXES]);

#endif
