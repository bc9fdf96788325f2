/* AdamW + global-norm clipping over flat buffers (see optim.h). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int aa_adamw_init(aa_adamw_t *o, size_t n, aa_mem_t *mem) { return aa_adamw_init_on(o, aa_ops_cpu(), n, mem); }

int aa_adamw_init_on(aa_adamw_t *o, const aa_ops_t *ops, size_t n, aa_mem_t *mem) {
  memset(o, 0, sizeof *o);
  o->mem = mem;
  int rc = aa_flatbuf_alloc(&o->m, ops, mem, AA_MEM_OPTIM, AA_F32, n);
  if (!rc) rc = aa_flatbuf_alloc(&o->v, ops, mem, AA_MEM_OPTIM, AA_F32, n);
  if (rc) aa_adamw_free(o);
  return rc;
}

void aa_adamw_free(aa_adamw_t *o) {
  aa_flatbuf_free(&o->m, o->mem);
  aa_flatbuf_free(&o->v, o->mem);
  memset(o, 0, sizeof *o);
}

int aa_adamw_step(aa_adamw_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                  int skip_nonfinite, float *grad_norm) {
  const aa_ops_t *op = m->ops;
  if (o->m.data && o->m.ops != op)
    return aa_error(AA_EINVAL, "optimizer state is on the %s backend but the model is on %s", o->m.ops->name,
                    op->name);
  float *g = m->grads.data;
  double norm = sqrt(op->sum_squares(g, m->n_params)) / grad_scale;
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    /* A backend failure also reads as NaN; it is an error, not a skip. */
    int rc = op->sync();
    if (rc) return rc;
    if (skip_nonfinite) return 1;
    return aa_error(AA_EINVAL, "gradient norm is not finite (%g); update skipped", norm);
  }
  /* Unscaling and clipping are one multiply. With grad_scale 1 and no clip
   * the pass is skipped, so fp32 results match an unscaled run exactly. */
  double mult = 1.0 / grad_scale;
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) mult *= cfg->grad_clip / (norm + 1e-6);
  if (mult != 1.0) op->scale(g, (float)mult, m->n_params);
  /* One call per tensor so weight decay can differ; tensors are contiguous
   * in the layout, so a whole-buffer update would differ only in decay. */
  float *p = m->params.data, *mm = o->m.data, *vv = o->v.data;
  int t = o->t + 1;
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    op->adamw_update(p + d->offset, g + d->offset, mm + d->offset, vv + d->offset, d->numel, lr, cfg->beta1,
                     cfg->beta2, cfg->eps, d->decay ? cfg->weight_decay : 0.0f, t);
  }
  aa_gpt_params_changed(m);
  int rc = op->sync();
  if (rc) return rc;
  o->t = t;
  return 0;
}
