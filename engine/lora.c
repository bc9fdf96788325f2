/* AdamW over a LoRA model's adapters (lora.h). */
#include "lora.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
  double sq;
  int rc = aa_gpt_lora_grad_squares(m, &sq);
  if (rc) return rc;
  const double norm = sqrt(sq);
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    rc = op->sync();
    return rc ? rc : aa_error(AA_EINVAL, "gradient norm is not finite (%g); update skipped", norm);
  }
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) op->scale(g, (float)(cfg->grad_clip / (norm + 1e-6)), n);
  const int t = o->t + 1;
  op->adamw_update(p, g, o->m.data, o->v.data, n, lr, cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, t);
  rc = op->sync();
  if (!rc) o->t = t;
  return rc;
}

int aa_gpt_lora_load_base(aa_gpt_t *m, const char *path) {
  if (!m->arch.lora.r) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  /* The checkpoint is the base's: checked against the base's hash. */
  if (m->params.data) {
    const aa_lora_t keep = m->arch.lora;
    memset(&m->arch.lora, 0, sizeof m->arch.lora);
    int rc = aa_ckpt_load(path, m, NULL, NULL);
    m->arch.lora = keep;
    return rc;
  }
  /* A 16-bit base (amp): read into an fp32 model of the base's
   * architecture with m's tensor slice and pipeline place (host memory,
   * parameters only), rounded into params16. */
  aa_arch_t base = m->arch;
  memset(&base.lora, 0, sizeof base.lora);
  aa_gpt_opts_t o = {
      .zero = 2, .amp = AA_F32, .tensor = m->opts.tensor, .pipe = m->opts.pipe, .pipeline = m->opts.pipeline};
  aa_gpt_t *f = NULL;
  int rc = aa_gpt_create(&f, &base, aa_ops_cpu(), 1, 1, &o);
  if (!rc) rc = aa_ckpt_load(path, f, NULL, NULL);
  if (!rc && f->n_params != m->n_params) rc = aa_error(AA_EINVAL, "lora: the base's layout differs");
  if (!rc) {
    m->ops->cast_from_f32(m->params16.data, m->opts.amp, f->params.data, f->n_params);
    aa_gpt_params_changed(m);
    rc = m->ops->sync();
  }
  aa_gpt_free(f);
  return rc;
}

/* The optional state section after the adapters. */
typedef struct {
  char magic[8]; /* "STATE001" */
  int32_t opt_t, pad;
  uint64_t data_pos, seed;
  int64_t skipped;
  aa_rng_t rng;
} lora_state_t;

int aa_lora_save(const char *path, aa_gpt_t *m, const aa_lora_opt_t *opt, const aa_train_state_t *st) {
  const int step = st ? st->step : 0;
  if (!m->arch.lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  /* The whole model's adapters (and moments) gathered from the tensor
   * and pipeline ranks, written by the first of them: one file, which
   * resumes at any layout. */
  const uint64_t n = aa_gpt_lora_whole_numel(&m->arch);
  const int state = opt && st && opt->m.data;
  float *all = malloc((size_t)n * (state ? 3 : 1) * sizeof *all);
  if (!all) return aa_error(AA_ENOMEM, "out of memory writing %s", path);
  int rc = aa_gpt_lora_get(m, m->lora.data, all);
  if (!rc && state) rc = aa_gpt_lora_get(m, opt->m.data, all + n);
  if (!rc && state) rc = aa_gpt_lora_get(m, opt->v.data, all + 2 * n);
  if (rc || m->tp_rank || (m->pp > 1 && m->pipe.stage)) {
    free(all);
    return rc;
  }
  aa_arch_t base = m->arch;
  memset(&base.lora, 0, sizeof base.lora);
  char hb[17], hl[17];
  aa_arch_hash(&base, hb);
  aa_arch_hash(&m->arch, hl);
  const aa_lora_t *l = &m->arch.lora;
  aa_wfile_t w;
  if ((rc = aa_wfile_open(&w, path, 0644))) {
    free(all);
    return rc;
  }
  const int32_t ints[4] = {l->r, l->targets, l->init, step};
  const float alpha = l->alpha;
  int ok = fwrite("AALORA01", 1, 8, w.f) == 8 && fwrite(hb, 1, 16, w.f) == 16 &&
           fwrite(hl, 1, 16, w.f) == 16 && fwrite(ints, sizeof ints[0], 4, w.f) == 4 &&
           fwrite(&alpha, sizeof alpha, 1, w.f) == 1 && fwrite(&n, sizeof n, 1, w.f) == 1 &&
           fwrite(all, sizeof(float), n, w.f) == n;
  if (ok && state) {
    lora_state_t ls = {.opt_t = opt->t,
                       .data_pos = st->data_pos,
                       .seed = st->seed,
                       .skipped = st->skipped_steps,
                       .rng = st->rng};
    memcpy(ls.magic, "STATE001", 8);
    ok = fwrite(&ls, sizeof ls, 1, w.f) == 1 && fwrite(all + n, sizeof(float), 2 * n, w.f) == 2 * n;
  }
  free(all);
  if (!ok) {
    aa_wfile_abort(&w);
    return aa_error(AA_EIO, "%s: writing the adapters failed", path);
  }
  return aa_wfile_commit(&w);
}

/* Reads path's header and adapters (checked against a) into *out and
 * leaves *fp at what follows them. */
static int lora_read(const char *path, const aa_arch_t *a, float **out, int *step, FILE **fp) {
  *out = NULL;
  *fp = NULL;
  if (!a->lora.r) return aa_error(AA_EINVAL, "%s: the spec has no lora section", path);
  FILE *f = fopen(path, "rb");
  if (!f) return aa_error(AA_ENOENT, "%s: %s", path, strerror(errno));
  char magic[8], hb[17] = {0}, hl[17] = {0}, want_b[17], want_l[17];
  int32_t ints[4];
  float alpha;
  uint64_t n = 0;
  int rc = 0;
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "AALORA01", 8) || fread(hb, 1, 16, f) != 16 ||
      fread(hl, 1, 16, f) != 16 || fread(ints, sizeof ints[0], 4, f) != 4 ||
      fread(&alpha, sizeof alpha, 1, f) != 1 || fread(&n, sizeof n, 1, f) != 1) {
    fclose(f);
    return aa_error(AA_EFORMAT, "%s: not a LoRA adapter checkpoint (magic AALORA01)", path);
  }
  aa_arch_t base = *a;
  memset(&base.lora, 0, sizeof base.lora);
  aa_arch_hash(&base, want_b);
  aa_arch_hash(a, want_l);
  const uint64_t want_n = aa_gpt_lora_whole_numel(a);
  if (strcmp(hb, want_b))
    rc = aa_error(AA_EINVAL, "%s: adapters of base %s, not of this spec's base %s", path, hb, want_b);
  else if (strcmp(hl, want_l))
    rc = aa_error(AA_EINVAL,
                  "%s: adapters of fine-tune %s (r, alpha or targets differ), not of this spec's %s", path,
                  hl, want_l);
  else if (n != want_n)
    rc = aa_error(AA_ECORRUPT, "%s: %llu adapter elements, the spec's have %llu", path, (unsigned long long)n,
                  (unsigned long long)want_n);
  float *p = rc ? NULL : malloc((size_t)n * sizeof *p);
  if (!rc && !p) rc = aa_error(AA_ENOMEM, "out of memory reading %s", path);
  if (!rc && fread(p, sizeof *p, (size_t)n, f) != (size_t)n)
    rc = aa_error(AA_ECORRUPT, "%s: truncated", path);
  if (rc) {
    fclose(f);
    free(p);
    return rc;
  }
  if (step) *step = ints[3];
  *out = p;
  *fp = f;
  return 0;
}

/* The state section at f's position (none: *has 0), its moments into
 * m and v (n each). */
static int state_read(const char *path, FILE *f, size_t n, lora_state_t *ls, float *m, float *v, bool *has) {
  *has = false;
  size_t got = fread(ls, 1, sizeof *ls, f);
  if (got == 0 && feof(f)) return 0;
  if (got != sizeof *ls || memcmp(ls->magic, "STATE001", 8))
    return aa_error(AA_ECORRUPT, "%s: bytes after the adapters are not a state section", path);
  if (fread(m, sizeof *m, n, f) != n || fread(v, sizeof *v, n, f) != n)
    return aa_error(AA_ECORRUPT, "%s: truncated optimizer state", path);
  if (fgetc(f) != EOF) return aa_error(AA_ECORRUPT, "%s: trailing bytes after the optimizer state", path);
  *has = true;
  return 0;
}

int aa_lora_load(const char *path, const aa_arch_t *a, float **out, int *step) {
  FILE *f;
  int rc = lora_read(path, a, out, step, &f);
  if (rc) return rc;
  fclose(f);
  return 0;
}

int aa_lora_resume(const char *path, aa_gpt_t *m, aa_lora_opt_t *opt, aa_train_state_t *st, bool *moments) {
  FILE *f;
  float *ad = NULL;
  int step = 0;
  int rc = lora_read(path, &m->arch, &ad, &step, &f);
  if (rc) return rc;
  /* The file holds the whole model's adapters and moments; the rank takes
   * its slice of each (aa_gpt_lora_put), at any layout. */
  const size_t n = aa_gpt_lora_whole_numel(&m->arch);
  if (opt->m.numel != m->lora.numel)
    rc = aa_error(AA_EINVAL, "lora: resume needs the adapters' optimizer of this model");
  float *mv = rc ? NULL : malloc(2 * n * sizeof *mv);
  if (!rc && !mv) rc = aa_error(AA_ENOMEM, "out of memory reading %s", path);
  lora_state_t ls;
  bool has = false;
  if (!rc) rc = state_read(path, f, n, &ls, mv, mv + n, &has);
  fclose(f);
  if (!rc) rc = aa_gpt_lora_put(m, m->lora.data, ad);
  if (!rc && has) rc = aa_gpt_lora_put(m, opt->m.data, mv);
  if (!rc && has) rc = aa_gpt_lora_put(m, opt->v.data, mv + n);
  free(ad);
  free(mv);
  if (rc) return rc;
  st->step = step;
  if (has) {
    opt->t = ls.opt_t;
    st->data_pos = ls.data_pos;
    st->seed = ls.seed;
    st->skipped_steps = ls.skipped;
    st->rng = ls.rng;
  } else {
    opt->t = 0;
    m->ops->memset0(opt->m.data, opt->m.numel * sizeof(float));
    m->ops->memset0(opt->v.data, opt->v.numel * sizeof(float));
  }
  *moments = has;
  return 0;
}

/* The base tensor target t adapts, and the first of its rows it does (q,
 * k and v are llama's own tensors; gate and up too). */
static const char *const lora_base_tensor[AA_LORA_NTARGETS] = {
    "q.w", "k.w", "v.w", "proj.w", "gate.w", "up.w", "down.w", "qkv.w", "proj.w", "fc.w", "fcproj.w"};

int aa_lora_merge(aa_gpt_t *base, const aa_arch_t *a, const float *adapters) {
  if (base->arch.lora.r || base->tp > 1 || base->pp > 1 || base->ops != aa_ops_cpu() || !base->params.data ||
      base->params.dtype != AA_F32)
    return aa_error(AA_EINVAL, "lora: merging needs the whole fp32 base on the cpu backend");
  const int r = a->lora.r;
  const double s = (double)a->lora.alpha / r;
  float *w = base->params.data;
  for (int l = 0; l < a->n_layer; l++)
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      if (!(a->lora.targets >> t & 1)) continue;
      int in, out, row;
      aa_lora_shape(a, t, 1, &in, &out, &row);
      char name[32];
      snprintf(name, sizeof name, "h%d.%s", l, lora_base_tensor[t]);
      const aa_tensor_desc_t *d = aa_gpt_tensor(base, name);
      if (!d || d->ndim != 2 || d->shape[0] != out || d->shape[1] != in)
        return aa_error(AA_EINVAL, "lora: %s does not have the target's shape (%d, %d)", name, out, in);
      const float *A = adapters + aa_gpt_lora_offset(a, l, t), *Bm = A + (size_t)r * in;
      float *W = w + d->offset;
      for (int o = 0; o < out; o++)
        for (int i = 0; i < in; i++) {
          double acc = 0;
          for (int k = 0; k < r; k++)
            acc += (double)Bm[(size_t)o * r + k] * A[(size_t)k * in + i];
          W[(size_t)o * in + i] = (float)((double)W[(size_t)o * in + i] + s * acc);
        }
    }
  aa_gpt_params_changed(base);
  return 0;
}
