/* AdamW with global-norm gradient clipping over the model's flat buffers.
 * The moments live in flat fp32 buffers parallel to the parameters, so a
 * ZeRO shard is a slice of each. */
#ifndef AA_OPTIM_H
#define AA_OPTIM_H

#include "model.h"

typedef struct aa_adamw {
  aa_flatbuf_t m, v; /* fp32, n_params each, owned */
  aa_mem_t *mem;     /* accountant the moments were allocated from (borrowed; may be NULL) */
  int t;             /* completed steps (bias correction uses t+1) */
} aa_adamw_t;

/* Allocates zeroed moments for n parameters in host (CPU backend) memory,
 * accounted as AA_MEM_OPTIM in mem (may be NULL). */
int aa_adamw_init(aa_adamw_t *o, size_t n, aa_mem_t *mem);
/* The same in ops' memory: the moments must live with the model's
 * parameters, so pass the model's m->ops. */
int aa_adamw_init_on(aa_adamw_t *o, const aa_ops_t *ops, size_t n, aa_mem_t *mem);
void aa_adamw_free(aa_adamw_t *o);

/* One optimizer step on m->params from m->grads, which hold the gradient
 * multiplied by grad_scale (the loss scale; 1 without loss scaling):
 *  1. global L2 norm of the unscaled gradients (returned in *grad_norm if
 *     non-NULL);
 *  2. if it is not finite, nothing is updated: returns 1 when skip_nonfinite
 *     is set (the caller counts a skipped step), else AA_EINVAL;
 *  3. gradients are unscaled and, if cfg->grad_clip > 0 and the norm
 *     exceeds it, scaled by grad_clip / (norm + 1e-6)
 *     (torch.nn.utils.clip_grad_norm_), in one pass;
 *  4. AdamW with lr, cfg->beta1/beta2/eps, and cfg->weight_decay applied
 *     only to tensors whose descriptor has decay = 1.
 * Returns 0 after an update, or the backend's error (the moments' backend
 * must be m's, else AA_EINVAL). */
int aa_adamw_step(aa_adamw_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                  int skip_nonfinite, float *grad_norm);

#endif
