/* AdamW over a LoRA model's adapters (model.h aa_gpt_lora_offset): the
 * base is frozen, so the optimizer's state is the adapters' two moments
 * only (strategies/sizes.h aa_sizes_lora), and the gradient norm,
 * clipping and the schedule are over A and B alone.
 *
 * Data parallelism with ZeRO over the adapters (the trainable state; the
 * frozen base stays whole on every rank, in its storage precision). The
 * adapters are one flat vector of n elements: rank r of `world` owns the
 * slice [r s, (r + 1) s), s = floor(n / world), and every rank owns the
 * tail [world s, n) of fewer than world elements, so every collective
 * has the same count on every rank with no padding. A rank's shard is its
 * slice then the tail (sizes.h aa_lora_sizes_t.shard).
 *   stage 0  everything whole; the gradient all-reduced (AVG) once a step.
 *   stage 1  the moments are the shard's. After the last micro-batch the
 *            gradient is reduce-scattered (AVG) in place, the tail
 *            all-reduced; the rank updates its slice and the tail, and
 *            the slices are all-gathered in place.
 *   stage 2  the gradient too: after every micro-batch the backward's
 *            whole gradient (workspace) is reduced so and the rank's part
 *            accumulated into the shard (grads), then zeroed.
 *   stage 3  the parameters too: the shard (params) is the adapters'
 *            master copy; after each update the slices are gathered into
 *            the whole copy the forward and backward read (workspace).
 * The passes read and write the whole adapters, which are small (0.5% of
 * Llama-3 8B's parameters at r 16 on all seven targets), so stages 2 and 3
 * hold a whole copy as workspace beside the shard and save nothing over
 * stage 1: the cost model counts those bytes, and the search prefers
 * stage 1. Every buffer's size is aa_sizes_lora's. The group's buffers
 * are the backend's, and the norm's one float and the checkpoint's
 * gathers are host memory: the cpu backend, the only one LoRA trains on. */
#ifndef AA_LORA_H
#define AA_LORA_H

#include <stdbool.h>

#include "../comm/comm.h"
#include "model.h"

typedef struct aa_lora_opt {
  aa_flatbuf_t m, v;   /* fp32 moments, the shard's (stage 0: all the adapters'), optim (owned) */
  aa_flatbuf_t gshard; /* stages 2-3: the gradient's shard, accumulated over micro-batches (grads) */
  aa_flatbuf_t pshard; /* stage 3: the adapters' shard (params) */
  aa_comm_t *comm;     /* the data group (borrowed; NULL: one process, stage 0) */
  int rank, world, stage;
  size_t n, slice, tail; /* the adapters, a rank's slice (n at stage 0), the tail (0 at stage 0) */
  aa_mem_t *mem;         /* accountant (borrowed; may be NULL) */
  int t;                 /* completed steps */
} aa_lora_opt_t;

/* Zeroed moments for m's adapters in m's backend memory, accounted to
 * mem, for one process (stage 0, no group). AA_EINVAL for a model
 * without adapters. */
int aa_lora_opt_init(aa_lora_opt_t *o, const aa_gpt_t *m, aa_mem_t *mem);
/* The same over the data group comm (borrowed; must outlive o) at ZeRO
 * `stage` (0..3; m built with opts.zero = stage): the moments' and the
 * shards' buffers, aa_sizes_lora's for aa_comm_world(comm) replicas. comm
 * may be NULL at stage 0 only. */
int aa_lora_opt_init_zero(aa_lora_opt_t *o, const aa_gpt_t *m, aa_comm_t *comm, int stage, aa_mem_t *mem);
void aa_lora_opt_free(aa_lora_opt_t *o);

/* After m->lora was written whole (the same on every rank: PEFT's init
 * from one seed, or a checkpoint): at stage 3 the rank's shard taken from
 * it. Nothing to do below. Not a collective. */
int aa_lora_opt_take(aa_lora_opt_t *o, const aa_gpt_t *m);

/* Zeroes the gradient for a new step: the backward's and the shard's. */
void aa_lora_zero_grad(aa_lora_opt_t *o, aa_gpt_t *m);

/* After a micro-batch's backward: the gradient reduced over the group as
 * the stage says (above), during the last micro-batch of a step only at
 * stages 0 and 1. A collective. */
int aa_lora_reduce(aa_lora_opt_t *o, aa_gpt_t *m, int last_micro);

/* One step on m->lora from the reduced gradient, which holds the gradient
 * multiplied by grad_scale (the loss scale; 1 without), as aa_adamw_step
 * (optim.h) does on a whole model: the global L2 norm of the unscaled
 * gradient (into *grad_norm when not NULL); a non-finite one changes
 * nothing and returns 1 when skip_nonfinite is set (an fp16 overflow: the
 * caller counts a skipped step), else AA_EINVAL; then unscaling and the
 * clip to cfg->grad_clip, folded into the update where the backend has
 * adamw_update_scaled (else one pass), AdamW with lr and cfg's betas, eps
 * and weight decay (A and B are 2-D weights: decayed, as PEFT under
 * Hugging Face's Trainer), and from stage 1 the updated slices gathered.
 * The base is untouched. A collective from stage 1 (the norm and the
 * gather). */
int aa_lora_step(aa_lora_opt_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                 int skip_nonfinite, float *grad_norm);

/* Loads the base a LoRA model adapts from a checkpoint of the base's
 * architecture (m->arch without its lora: the base's hash) into
 * m->params, as aa_ckpt_load does for a whole model. */
int aa_gpt_lora_load_base(aa_gpt_t *m, const char *path);

/* An adapter checkpoint (docs/checkpoint-format.md "LoRA adapters"): the
 * adapters alone and the hashes of the base they apply to and of the
 * fine-tune, then, with st, the state a resume needs: the loader's
 * position, the trainer RNG and the fp16 loss scaler's state, and with opt
 * too AdamW's step and whole moments (without opt: a weights-only file,
 * whose resume restarts the optimizer at st's step): the whole model's,
 * whatever the layout. Under tensor or pipeline parallelism the ranks
 * gather the adapters and moments over those groups (aa_gpt_lora_get),
 * and the first rank (tensor rank 0 of stage 0) of the replica with
 * `write` set writes; at ZeRO stage 0 only that replica's ranks take part;
 * from ZeRO stage 1 the moments' shards are first gathered over opt's
 * group into the rank's layout, so every rank takes part. Ranks without
 * `write` return at once when nothing is sharded. The file is written atomically
 * (common/file.h aa_wfile). */
#include "checkpoint.h"
int aa_lora_save(const char *path, aa_gpt_t *m, aa_lora_opt_t *opt, const aa_train_state_t *st, int write);

/* Resumes from such a checkpoint, written at any layout: m's adapters
 * (the rank's slice; the caller has loaded the base), and when the file
 * has them opt's moments (the rank's slice, or its ZeRO shard) and step,
 * and *st (*moments says whether it had moments; without, opt restarts: a
 * weights-only file sets *st but the optimizer's step, a file without a
 * state section st->step alone). The checks are aa_lora_load's. Not a
 * collective. */
int aa_lora_resume(const char *path, aa_gpt_t *m, aa_lora_opt_t *opt, aa_train_state_t *st, bool *moments);

/* Reads the adapter checkpoint at path for the fine-tune of architecture
 * a (its lora set): checks the magic, both hashes (a's, and its base's)
 * and the count, and returns the adapters in *out (malloc'd, n_layer x
 * aa_lora_block_numel(a, 1) floats; the caller frees) and its step in
 * *step (may be NULL). AA_EFORMAT for another file, AA_EINVAL naming the
 * hash that differs. */
int aa_lora_load(const char *path, const aa_arch_t *a, float **out, int *step);

/* Folds adapters (aa_lora_load's layout, for the fine-tune a) into base, a
 * whole fp32 model of a's base architecture on the CPU backend, one
 * process: every target's rows of its base weight W += (alpha / r) B A,
 * computed in double and rounded once. */
int aa_lora_merge(aa_gpt_t *base, const aa_arch_t *a, const float *adapters);

#endif
