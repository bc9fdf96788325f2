/* AdamW over a LoRA model's adapters (model.h aa_gpt_lora_offset): the
 * base is frozen, so the optimizer's state is the adapters' two moments
 * only (strategies/sizes.h aa_sizes_lora), and the gradient norm,
 * clipping and the schedule are over A and B alone (a data-parallel
 * trainer averages the gradient first: engine/train.c). */
#ifndef AA_LORA_H
#define AA_LORA_H

#include <stdbool.h>

#include "model.h"

typedef struct aa_lora_opt {
  aa_flatbuf_t m, v; /* fp32, the adapters' count each, optim (owned) */
  aa_mem_t *mem;     /* accountant (borrowed; may be NULL) */
  int t;             /* completed steps */
} aa_lora_opt_t;

/* Zeroed moments for m's adapters in m's backend memory, accounted to
 * mem. AA_EINVAL for a model without adapters. */
int aa_lora_opt_init(aa_lora_opt_t *o, const aa_gpt_t *m, aa_mem_t *mem);
void aa_lora_opt_free(aa_lora_opt_t *o);

/* One step on m->lora from m->lora_grads, as aa_adamw_step (optim.h) does
 * on a whole model: the global L2 norm of the gradient (into *grad_norm
 * when not NULL; a non-finite one is AA_EINVAL and nothing changes), the
 * clip to cfg->grad_clip, then AdamW with lr and cfg's betas, eps and
 * weight decay (A and B are 2-D weights: decayed, as PEFT under Hugging
 * Face's Trainer). The base is untouched. */
int aa_lora_step(aa_lora_opt_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, float *grad_norm);

/* Loads the base a LoRA model adapts from a checkpoint of the base's
 * architecture (m->arch without its lora: the base's hash) into
 * m->params, as aa_ckpt_load does for a whole model. */
int aa_gpt_lora_load_base(aa_gpt_t *m, const char *path);

/* An adapter checkpoint (docs/checkpoint-format.md "LoRA adapters"): the
 * adapters alone and the hashes of the base they apply to and of the
 * fine-tune, then, with opt and st (both or neither), the state a resume
 * needs: AdamW's step and moments, the loader's position and the trainer
 * RNG. The whole model's, whatever m's layout: under tensor or pipeline
 * parallelism a collective over m's tensor and pipeline groups (every
 * rank of them calls it) gathers them, and their first rank (tensor rank
 * 0 of stage 0) writes the file, atomically (common/file.h aa_wfile). */
#include "checkpoint.h"
int aa_lora_save(const char *path, aa_gpt_t *m, const aa_lora_opt_t *opt, const aa_train_state_t *st);

/* Resumes from such a checkpoint, written at any layout: m's adapters
 * (the rank's slice; the caller has loaded the base), and when the file has them opt's moments and step and
 * *st
 * (*moments says whether it had; without, opt restarts and only st->step
 * is set). The checks are aa_lora_load's. */
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
