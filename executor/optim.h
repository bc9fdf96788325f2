/* AdamW with global-norm gradient clipping over the model's flat buffers.
 * The moments live in flat fp32 buffers parallel to the parameters, so a
 * ZeRO shard is a slice of each. */
#ifndef AA_OPTIM_H
#define AA_OPTIM_H

#include "model.h"

typedef struct aa_adamw {
  aa_flatbuf_t m, v; /* fp32, n_params each, owned */
  int t;             /* completed steps (bias correction uses t+1) */
} aa_adamw_t;

/* Allocates zeroed moments for n parameters. */
int aa_adamw_init(aa_adamw_t *o, size_t n);
void aa_adamw_free(aa_adamw_t *o);

/* One optimizer step on m->params from m->grads:
 *  1. global L2 norm of all gradients (returned in *grad_norm if non-NULL);
 *  2. if cfg->grad_clip > 0 and norm > grad_clip, gradients are scaled by
 *     grad_clip / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_);
 *  3. AdamW with lr, cfg->beta1/beta2/eps, and cfg->weight_decay applied
 *     only to tensors whose descriptor has decay = 1.
 * A non-finite norm skips the update and returns AA_EINVAL. */
int aa_adamw_step(aa_adamw_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, float *grad_norm);

#endif
