/* AdamW over a LoRA model's adapters (lora.h). */
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/file.h"
#include "checkpoint.h"

int aa_lora_opt_init(aa_lora_opt_t *o, const aa_gpt_t *m, aa_mem_t *mem) {
  *o = (aa_lora_opt_t){.mem = mem};
  if (!m->arch.lora.r || !m->lora.numel) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  int rc = aa_flatbuf_alloc(&o->m, m->ops, mem, AA_MEM_OPTIM, AA_F32, m->lora.numel);
  if (!rc) rc = aa_flatbuf_alloc(&o->v, m->ops, mem, AA_MEM_OPTIM, AA_F32, m->lora.numel);
  if (rc) aa_lora_opt_free(o);
  return rc;
}

void aa_lora_opt_free(aa_lora_opt_t *o) {
  aa_flatbuf_free(&o->m, o->mem);
  aa_flatbuf_free(&o->v, o->mem);
}

int aa_lora_step(aa_lora_opt_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, float *grad_norm) {
  const aa_ops_t *op = m->ops;
  if (!o->m.data || o->m.numel != m->lora.numel || o->m.ops != op)
    return aa_error(AA_EINVAL, "lora: the optimizer's moments are not this model's adapters'");
  float *g = m->lora_grads.data, *p = m->lora.data;
  const size_t n = m->lora.numel;
  const double norm = sqrt(op->sum_squares(g, n));
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    int rc = op->sync();
    return rc ? rc : aa_error(AA_EINVAL, "gradient norm is not finite (%g); update skipped", norm);
  }
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) op->scale(g, (float)(cfg->grad_clip / (norm + 1e-6)), n);
  const int t = o->t + 1;
  op->adamw_update(p, g, o->m.data, o->v.data, n, lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t);
  int rc = op->sync();
  if (!rc) o->t = t;
  return rc;
}

int aa_gpt_lora_load_base(aa_gpt_t *m, const char *path) {
  if (!m->arch.lora.r) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  /* The checkpoint is the base's: checked against the base's hash. */
  const aa_lora_t keep = m->arch.lora;
  memset(&m->arch.lora, 0, sizeof m->arch.lora);
  int rc = aa_ckpt_load(path, m, NULL, NULL);
  m->arch.lora = keep;
  return rc;
}

int aa_lora_save(const char *path, const aa_gpt_t *m, int step) {
  if (!m->arch.lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  aa_arch_t base = m->arch;
  memset(&base.lora, 0, sizeof base.lora);
  char hb[17], hl[17];
  aa_arch_hash(&base, hb);
  aa_arch_hash(&m->arch, hl);
  const aa_lora_t *l = &m->arch.lora;
  const uint64_t n = m->lora.numel;
  aa_wfile_t w;
  int rc = aa_wfile_open(&w, path, 0644);
  if (rc) return rc;
  const int32_t ints[4] = {l->r, l->targets, l->init, step};
  const float alpha = l->alpha;
  int ok = fwrite("AALORA01", 1, 8, w.f) == 8 && fwrite(hb, 1, 16, w.f) == 16 &&
           fwrite(hl, 1, 16, w.f) == 16 && fwrite(ints, sizeof ints[0], 4, w.f) == 4 &&
           fwrite(&alpha, sizeof alpha, 1, w.f) == 1 && fwrite(&n, sizeof n, 1, w.f) == 1 &&
           fwrite(m->lora.data, sizeof(float), n, w.f) == n;
  if (!ok) {
    aa_wfile_abort(&w);
    return aa_error(AA_EIO, "%s: writing the adapters failed", path);
  }
  return aa_wfile_commit(&w);
}
