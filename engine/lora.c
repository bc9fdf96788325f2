/* AdamW over a LoRA model's adapters (lora.h). */
#include "lora.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/file.h"
#include "checkpoint.h"
#include "optim.h"
#include "strategies/sizes.h"

int aa_lora_opt_init(aa_lora_opt_t *o, const aa_gpt_t *m, aa_mem_t *mem) {
  return aa_lora_opt_init_zero(o, m, NULL, 0, mem);
}

int aa_lora_opt_init_zero(aa_lora_opt_t *o, const aa_gpt_t *m, aa_comm_t *comm, int stage, aa_mem_t *mem) {
  *o = (aa_lora_opt_t){.mem = mem, .comm = comm, .world = 1, .stage = stage};
  if (!m->arch.lora.r || !m->lora.numel) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  if (stage < 0 || stage > 3 || (stage && !comm))
    return aa_error(AA_EINVAL, "lora: ZeRO stage %d needs 0..3 and, above 0, the data group", stage);
  if (m->opts.zero != stage)
    return aa_error(AA_EINVAL, "lora: the model was built for ZeRO stage %d, not %d", m->opts.zero, stage);
  if (comm) {
    o->rank = aa_comm_rank(comm);
    o->world = aa_comm_world(comm);
  }
  aa_lora_sizes_t ls;
  aa_sizes_lora(&m->arch, m->tp, m->pp > 1 ? &m->pipe : NULL, m->opts.amp, stage, o->world, &ls);
  if (ls.adapters != m->lora.numel)
    return aa_error(AA_EINTERNAL, "lora: %zu adapter elements, sizes.h says %zu", m->lora.numel, ls.adapters);
  o->n = ls.adapters;
  o->slice = stage ? o->n / (size_t)o->world : o->n;
  o->tail = o->n - (stage ? (size_t)o->world * o->slice : o->n);
  int rc = aa_flatbuf_alloc_as(&o->m, m->ops, mem, &ls.moment);
  if (!rc) rc = aa_flatbuf_alloc_as(&o->v, m->ops, mem, &ls.moment);
  if (!rc) rc = aa_flatbuf_alloc_as(&o->gshard, m->ops, mem, &ls.gshard);
  if (!rc) rc = aa_flatbuf_alloc_as(&o->pshard, m->ops, mem, &ls.pshard);
  if (!rc && o->slice + o->tail != ls.shard)
    rc = aa_error(AA_EINTERNAL, "lora: a shard of %zu elements, sizes.h says %zu", o->slice + o->tail,
                  ls.shard);
  if (rc) aa_lora_opt_free(o);
  return rc;
}

void aa_lora_opt_free(aa_lora_opt_t *o) {
  aa_flatbuf_free(&o->m, o->mem);
  aa_flatbuf_free(&o->v, o->mem);
  aa_flatbuf_free(&o->gshard, o->mem);
  aa_flatbuf_free(&o->pshard, o->mem);
}

/* Where the rank's slice and the tail start in the adapters' flat vector. */
static size_t slice_at(const aa_lora_opt_t *o) { return o->stage ? (size_t)o->rank * o->slice : 0; }
static size_t tail_at(const aa_lora_opt_t *o) { return o->stage ? (size_t)o->world * o->slice : o->n; }

/* dst[0, slice) and dst[slice, slice + tail) = the rank's slice and the
 * tail of the whole vector src (backend memory both). */
static void shard_of(const aa_lora_opt_t *o, const aa_ops_t *op, float *dst, const float *src) {
  op->memset0(dst, (o->slice + o->tail) * sizeof(float));
  op->accumulate(dst, src + slice_at(o), o->slice);
  op->accumulate(dst + o->slice, src + tail_at(o), o->tail);
}

int aa_lora_opt_take(aa_lora_opt_t *o, const aa_gpt_t *m) {
  if (o->stage == 3) shard_of(o, m->ops, o->pshard.data, m->lora.data);
  return m->ops->sync();
}

void aa_lora_zero_grad(aa_lora_opt_t *o, aa_gpt_t *m) {
  aa_gpt_lora_zero_grad(m);
  if (o->gshard.data) m->ops->memset0(o->gshard.data, o->gshard.numel * sizeof(float));
}

int aa_lora_reduce(aa_lora_opt_t *o, aa_gpt_t *m, int last_micro) {
  if (o->stage < 2 && !last_micro) return 0;
  const aa_ops_t *op = m->ops;
  float *g = m->lora_grads.data;
  /* First the replicated halves' terms summed over the tensor group
   * (model.h), then the average over the data group. */
  int rc = aa_gpt_lora_reduce_grads(m);
  if (!rc) rc = op->sync();
  if (!rc && o->world > 1) {
    if (o->stage == 0)
      rc = aa_comm_all_reduce(o->comm, g, g, o->n, AA_F32, AA_COMM_AVG);
    else if (!(rc = aa_comm_reduce_scatter(o->comm, g, g + slice_at(o), o->slice, AA_F32, AA_COMM_AVG)))
      rc = aa_comm_all_reduce(o->comm, g + tail_at(o), g + tail_at(o), o->tail, AA_F32, AA_COMM_AVG);
  }
  if (rc) return aa_error_wrap(rc, "averaging the adapters' gradient over %d ranks", o->world);
  if (o->stage >= 2) { /* into the shard; the whole gradient is the next micro-batch's */
    float *gs = o->gshard.data;
    op->accumulate(gs, g + slice_at(o), o->slice);
    op->accumulate(gs + o->slice, g + tail_at(o), o->tail);
    aa_gpt_lora_zero_grad(m);
  }
  return op->sync();
}

int aa_lora_step(aa_lora_opt_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                 int skip_nonfinite, float *grad_norm) {
  const aa_ops_t *op = m->ops;
  if (!o->m.data || o->n != m->lora.numel || o->m.ops != op)
    return aa_error(AA_EINVAL, "lora: the optimizer's moments are not this model's adapters'");
  /* The rank's slice and the tail: of the shards where the stage keeps
   * them, else in place in the whole buffers. */
  float *gs = o->stage >= 2 ? o->gshard.data : (float *)m->lora_grads.data + slice_at(o),
        *gt = o->stage >= 2 ? gs + o->slice : (float *)m->lora_grads.data + tail_at(o);
  float *ps = o->stage == 3 ? o->pshard.data : (float *)m->lora.data + slice_at(o),
        *pt = o->stage == 3 ? ps + o->slice : (float *)m->lora.data + tail_at(o);
  double sq = 0;
  int rc = 0;
  if (!o->stage) {
    /* The whole gradient on every replica: the model's sum of squares
     * (under tensor and pipeline parallelism over their groups, each
     * replicated half counted once; model.h). */
    if ((rc = aa_gpt_lora_grad_squares(m, &sq))) return rc;
  } else {
    /* ZeRO: the shard's squares, the tail (the same on every data rank)
     * counted by data rank 0 alone and a replicated half's elements by
     * tensor rank 0 alone (model.h aa_gpt_lora_shard_squares), summed over
     * the data, tensor and pipeline groups: stage 0's value. */
    double tail = 0;
    rc = aa_gpt_lora_shard_squares(m, gs, slice_at(o), o->slice, &sq);
    if (!rc && o->rank == 0) rc = aa_gpt_lora_shard_squares(m, gt, tail_at(o), o->tail, &tail);
    float x = (float)(sq + tail);
    if (!rc && o->world > 1) rc = aa_comm_all_reduce(o->comm, &x, &x, 1, AA_F32, AA_COMM_SUM);
    if (!rc) rc = aa_gpt_tensor_sum(m, &x, 1);
    if (!rc) rc = aa_gpt_pipeline_sum(m, &x, 1);
    if (rc) return aa_error_wrap(rc, "reducing the adapters' gradient norm");
    sq = x;
  }
  const double norm = sqrt(sq) / grad_scale;
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    if ((rc = op->sync())) return rc;
    if (skip_nonfinite) return 1;
    return aa_error(AA_EINVAL, "gradient norm is not finite (%g); update skipped", norm);
  }
  double mult = 1.0 / grad_scale;
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) mult *= cfg->grad_clip / (norm + 1e-6);
  const float gscale = aa_adamw_grad_mult(op, gs, o->slice, mult); /* the same factor for both */
  aa_adamw_grad_mult(op, gt, o->tail, mult);
  const int t = o->t + 1;
  float *mm = o->m.data, *vv = o->v.data;
  aa_adamw_update(op, ps, gs, mm, vv, o->slice, lr, cfg, cfg->weight_decay, t, gscale);
  if (o->tail)
    aa_adamw_update(op, pt, gt, mm + o->slice, vv + o->slice, o->tail, lr, cfg, cfg->weight_decay, t, gscale);
  rc = op->sync();
  if (!rc && o->stage) {
    /* The whole adapters the passes read: every rank's slice (in place
     * below stage 3), and at 3 the tail from the shard. */
    float *all = m->lora.data;
    rc = aa_comm_all_gather(o->comm, ps, all, o->slice, AA_F32);
    if (!rc && o->stage == 3) {
      op->memset0(all + tail_at(o), o->tail * sizeof(float));
      op->accumulate(all + tail_at(o), pt, o->tail);
      rc = op->sync();
    }
    if (rc) return aa_error_wrap(rc, "gathering the updated adapters");
  }
  if (!rc) o->t = t;
  return rc;
}

/* The fp32 base (host memory, n elements) rounded into m's params16. On
 * another backend than the cpu's, through a device buffer of at most 4M
 * elements at a time (cast_from_f32 reads backend memory). */
static int cast_base(aa_gpt_t *m, const float *host, size_t n) {
  const aa_ops_t *op = m->ops;
  uint16_t *dst = m->params16.data;
  int rc = 0;
  if (op == aa_ops_cpu()) {
    op->cast_from_f32(dst, m->opts.amp, host, n);
  } else {
    const size_t chunk = n < ((size_t)1 << 22) ? n : (size_t)1 << 22;
    float *buf = NULL;
    rc = op->alloc((void **)&buf, chunk * sizeof *buf);
    for (size_t at = 0; !rc && at < n; at += chunk) {
      const size_t k = n - at < chunk ? n - at : chunk;
      if (!(rc = op->upload(buf, host + at, k * sizeof *buf)))
        op->cast_from_f32(dst + at, m->opts.amp, buf, k);
    }
    if (!rc) rc = op->sync();
    op->free(buf);
  }
  aa_gpt_params_changed(m);
  return rc ? rc : op->sync();
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
  if (!rc) rc = cast_base(m, f->params.data, f->n_params);
  aa_gpt_free(f);
  return rc;
}

/* The optional state section after the adapters: STATE001's fields, then
 * from STATE002 the fp16 loss scaler's (scale 0: none was running), then
 * the moments; STATE003 is STATE002 without the moments (weights only). */
typedef struct {
  char magic[8]; /* "STATE002" or "STATE003" (read: "STATE001" too) */
  int32_t opt_t, pad;
  uint64_t data_pos, seed;
  int64_t skipped;
  aa_rng_t rng;
} lora_state_t;
typedef struct {
  double loss_scale;
  int64_t iter, last_overflow;
  int32_t hysteresis_left, pad;
} lora_scaler_t;

/* The moments of the rank's adapters (host memory, o->n each: m->lora's
 * layout, at tp 1 and pp 1 the whole model's) of o: the shard's, and from
 * stage 1 every rank's slice gathered (a collective; the cpu backend's
 * groups, whose buffers are host memory) and the tail. */
static int whole_moments(aa_lora_opt_t *o, const aa_gpt_t *m, float *mm, float *vv) {
  const aa_flatbuf_t *b[2] = {&o->m, &o->v};
  float *out[2] = {mm, vv};
  int rc = m->ops->sync();
  for (int k = 0; k < 2 && !rc; k++) {
    const float *x = b[k]->data;
    if (!o->stage) {
      rc = m->ops->download(out[k], x, o->n * sizeof(float));
      continue;
    }
    if (!(rc = aa_comm_all_gather(o->comm, x, out[k], o->slice, AA_F32)))
      rc = m->ops->download(out[k] + tail_at(o), x + o->slice, o->tail * sizeof(float));
  }
  return rc ? aa_error_wrap(rc, "gathering the adapters' optimizer state") : 0;
}

int aa_lora_save(const char *path, aa_gpt_t *m, aa_lora_opt_t *opt, const aa_train_state_t *st, int write) {
  const int step = st ? st->step : 0;
  if (!m->arch.lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  /* The whole model's adapters (and moments), gathered over the tensor
   * and pipeline groups (aa_gpt_lora_get); from ZeRO stage 1 the moments'
   * shards first over opt's group into the rank's layout, every rank
   * taking part. At stage 0 only the writing replica's ranks gather. Their
   * first rank (tensor rank 0 of stage 0) writes: one file, which resumes
   * at any layout. With st the training state; with opt too, the moments
   * (STATE002), else none (STATE003: a weights-only checkpoint keeps its
   * step and data). */
  const uint64_t n = aa_gpt_lora_whole_numel(&m->arch);
  const int state = opt && st && opt->m.data, sharded = state && opt->stage > 0;
  if (!write && !sharded) return 0;
  const size_t nl = m->lora.numel;
  float *all = malloc((size_t)n * (state ? 3 : 1) * sizeof *all), *mm = all ? all + n : NULL,
        *loc = sharded ? malloc(2 * nl * sizeof *loc) : NULL;
  if (!all || (sharded && !loc)) {
    free(all);
    free(loc);
    return aa_error(AA_ENOMEM, "out of memory writing %s", path);
  }
  int rc = aa_gpt_lora_get(m, m->lora.data, all);
  if (!rc && sharded && !(rc = whole_moments(opt, m, loc, loc + nl)) &&
      !(rc = aa_gpt_lora_get_host(m, loc, mm)))
    rc = aa_gpt_lora_get_host(m, loc + nl, all + 2 * n);
  free(loc);
  if (!rc && state && !sharded && !(rc = aa_gpt_lora_get(m, opt->m.data, mm)))
    rc = aa_gpt_lora_get(m, opt->v.data, all + 2 * n);
  if (rc || !write || m->tp_rank || (m->pp > 1 && m->pipe.stage)) {
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
  if (ok && st) {
    lora_state_t ls = {.opt_t = state ? opt->t : 0,
                       .data_pos = st->data_pos,
                       .seed = st->seed,
                       .skipped = st->skipped_steps,
                       .rng = st->rng};
    lora_scaler_t sc = {.loss_scale = st->loss_scale,
                        .iter = st->scaler_iter,
                        .last_overflow = st->scaler_last_overflow,
                        .hysteresis_left = st->scaler_hysteresis_left};
    memcpy(ls.magic, state ? "STATE002" : "STATE003", 8);
    ok = fwrite(&ls, sizeof ls, 1, w.f) == 1 && fwrite(&sc, sizeof sc, 1, w.f) == 1 &&
         (!state || fwrite(mm, sizeof(float), 2 * n, w.f) == 2 * n);
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

/* The state section at f's position (none: *has 0; STATE001's: no
 * scaler, *sc zero), its moments into m and v (n each). */
static int state_read(const char *path, FILE *f, size_t n, lora_state_t *ls, lora_scaler_t *sc, float *m,
                      float *v, bool *has, bool *moments) {
  *has = *moments = false;
  memset(sc, 0, sizeof *sc);
  size_t got = fread(ls, 1, sizeof *ls, f);
  if (got == 0 && feof(f)) return 0;
  const int v3 = got == sizeof *ls && !memcmp(ls->magic, "STATE003", 8); /* no moments */
  const int v2 = v3 || (got == sizeof *ls && !memcmp(ls->magic, "STATE002", 8));
  if (got != sizeof *ls || (!v2 && memcmp(ls->magic, "STATE001", 8)))
    return aa_error(AA_ECORRUPT, "%s: bytes after the adapters are not a state section", path);
  if (v2 && fread(sc, sizeof *sc, 1, f) != 1)
    return aa_error(AA_ECORRUPT, "%s: truncated state section", path);
  if (!v3 && (fread(m, sizeof *m, n, f) != n || fread(v, sizeof *v, n, f) != n))
    return aa_error(AA_ECORRUPT, "%s: truncated optimizer state", path);
  if (fgetc(f) != EOF) return aa_error(AA_ECORRUPT, "%s: trailing bytes after the state section", path);
  *has = true;
  *moments = !v3;
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
  float *ad = NULL, *mv = NULL;
  int step = 0;
  int rc = lora_read(path, &m->arch, &ad, &step, &f);
  if (rc) return rc;
  /* The file holds the whole model's adapters and moments; the rank takes
   * its slice of the adapters (aa_gpt_lora_put), at any layout, and of
   * the moments its slice (stage 0) or its ZeRO shard. */
  const size_t n = aa_gpt_lora_whole_numel(&m->arch);
  if (opt->n != m->lora.numel)
    rc = aa_error(AA_EINVAL, "lora: resume needs the adapters' optimizer of this model");
  lora_state_t ls;
  lora_scaler_t sc;
  bool has = false, has_m = false;
  if (!rc && !(mv = malloc(2 * n * sizeof *mv))) rc = aa_error(AA_ENOMEM, "out of memory reading %s", path);
  if (!rc) rc = state_read(path, f, n, &ls, &sc, mv, mv + n, &has, &has_m);
  fclose(f);
  /* Under ZeRO the moments go into the backend through the gradient's
   * buffer (idle until the next backward), in the rank's layout
   * (aa_gpt_lora_put), and the rank keeps its shard. */
  const aa_ops_t *op = m->ops;
  float *g = m->lora_grads.data;
  if (!rc) rc = aa_gpt_lora_put(m, m->lora.data, ad);
  if (!rc) rc = aa_lora_opt_take(opt, m);
  for (int k = 0; k < 2 && has_m && !rc; k++) {
    float *dst = k ? opt->v.data : opt->m.data;
    if (!opt->stage)
      rc = aa_gpt_lora_put(m, dst, mv + k * n);
    else if (!(rc = aa_gpt_lora_put(m, g, mv + k * n))) {
      shard_of(opt, op, dst, g);
      rc = op->sync();
    }
  }
  free(ad);
  free(mv);
  if (rc) return rc;
  aa_lora_zero_grad(opt, m);
  st->step = step;
  if (has) { /* STATE003's opt_t is 0: AdamW restarts below */
    opt->t = ls.opt_t;
    st->data_pos = ls.data_pos;
    st->seed = ls.seed;
    st->skipped_steps = ls.skipped;
    st->rng = ls.rng;
    st->loss_scale = sc.loss_scale;
    st->scaler_iter = sc.iter;
    st->scaler_last_overflow = sc.last_overflow;
    st->scaler_hysteresis_left = sc.hysteresis_left;
  }
  if (!has_m) {
    opt->t = 0;
    op->memset0(opt->m.data, opt->m.numel * sizeof(float));
    op->memset0(opt->v.data, opt->v.numel * sizeof(float));
  }
  *moments = has_m;
  return op->sync();
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
