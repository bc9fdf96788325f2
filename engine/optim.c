/* AdamW + global-norm clipping over flat buffers (see optim.h). */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strategies/sizes.h"

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

/* The sum of squares of the gradient g of the flat buffer's elements [lo,
 * lo + n) into *split (tensor-parallel slices: different on every tensor
 * rank) and *whole (tensors every tensor rank holds whole, with the same
 * gradient), so that the norm counts every parameter once: the last
 * pipeline stage's copy of wte|wpe is the first stage's, counted there.
 * Under expert parallelism the expert slices' squares go to *experts
 * (different on every rank of the expert group). At tp 1, pp 1 and ep 1
 * it is all *split, one call. */
static void squares(const aa_gpt_t *m, const float *g, size_t lo, size_t n, double *split, double *whole,
                    double *experts) {
  const aa_ops_t *op = m->ops;
  if (m->tp == 1 && m->pp == 1 && m->ep == 1) {
    *split += op->sum_squares(g, n);
    return;
  }
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    size_t a = d->offset > lo ? d->offset : lo, b = d->offset + d->numel < lo + n ? d->offset + d->numel : lo + n;
    double *to = d->expert ? experts : d->replicated && m->tp > 1 ? whole : split;
    if (a < b && !d->copy) *to += op->sum_squares(g + (a - lo), b - a);
  }
}

/* Adds to *sq the squares of the expert slices, summed over the expert
 * group (each rank holds different experts; ep 1: none). */
static int expert_squares(aa_gpt_t *m, double experts, double *sq) {
  if (m->ep == 1) return 0;
  float x = (float)experts;
  int rc = aa_comm_all_reduce(m->opts.expert, &x, &x, 1, AA_F32, AA_COMM_SUM);
  if (rc) return aa_error_wrap(rc, "the gradient norm over the expert group");
  *sq += x;
  return 0;
}

/* The squared norm over the tensor group of a gradient whose squares are
 * split (summed over the group) and whole (the same on every rank), then
 * over the pipeline group (whose stages hold different parameters). */
static int tensor_squares(aa_gpt_t *m, double split, double whole, double *out) {
  float x = (float)split;
  int rc = aa_gpt_tensor_sum(m, &x, 1);
  if (rc) return aa_error_wrap(rc, "the gradient norm");
  *out = m->tp == 1 ? split : (double)x + whole;
  if (m->pp == 1) return 0;
  x = (float)*out;
  if ((rc = aa_gpt_pipeline_sum(m, &x, 1))) return aa_error_wrap(rc, "the gradient norm");
  *out = x;
  return 0;
}

int aa_adamw_step(aa_adamw_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                  int skip_nonfinite, float *grad_norm) {
  const aa_ops_t *op = m->ops;
  if (o->m.data && o->m.ops != op)
    return aa_error(AA_EINVAL, "optimizer state is on the %s backend but the model is on %s", o->m.ops->name,
                    op->name);
  float *g = m->grads.data;
  double split = 0, whole = 0, experts = 0, sq = 0; /* set by tensor_squares on success */
  squares(m, g, 0, m->n_params, &split, &whole, &experts);
  int rc = tensor_squares(m, split, whole, &sq);
  if (!rc) rc = expert_squares(m, experts, &sq);
  if (rc) return rc;
  double norm = sqrt(sq) / grad_scale;
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    /* A backend failure also reads as NaN; it is an error, not a skip. */
    if ((rc = op->sync())) return rc;
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
  if ((rc = op->sync())) return rc;
  o->t = t;
  return 0;
}

/* --- data parallelism and ZeRO (see optim.h) ------------------------------------------- */

/* Scratch slot of unit u: 0 = wte|wpe, 1 = the blocks (one at a time), 2 = lnf. */
static int slot(const aa_gpt_t *m, int u) { return aa_sizes_slot(&m->arch, u); }

/* dst(n) = src(n) in backend memory (the op table has no copy: zero, then add). */
static void copy(const aa_ops_t *op, float *dst, const float *src, size_t n) {
  op->memset0(dst, n * sizeof(float));
  op->accumulate(dst, src, n);
}

/* Start of the rank's chunk of unit u in the flat buffer. */
static size_t chunk_start(const aa_zero_t *z, int u) { return z->unit_off[u] + (size_t)z->rank * z->chunk[u]; }

/* The rank's chunk (valid[u] elements) of unit u's reduced gradient and of
 * its parameters (stages 1-3), wherever the stage keeps them. */
static float *grad_chunk(const aa_zero_t *z, const aa_gpt_t *m, int u) {
  return z->stage == 1 ? (float *)m->grads.data + chunk_start(z, u) : (float *)z->gshard.data + z->shard_off[u];
}
static float *param_chunk(const aa_zero_t *z, const aa_gpt_t *m, int u) {
  if (z->amp != AA_F32 && z->stage >= 1) return (float *)z->master.data + z->shard_off[u];
  return z->stage < 3 ? (float *)m->params.data + chunk_start(z, u) : (float *)z->pshard.data + z->shard_off[u];
}

/* Whether the rank's parameters (the fp32 master weights under amp) are a
 * shard, not the model's full buffer. */
static int sharded_params(const aa_zero_t *z) { return z->stage == 3 || (z->stage >= 1 && z->amp != AA_F32); }

/* Stage 3, before the model reads unit u: its parameters gathered from
 * every rank's chunk into the unit's slot (under amp in 16 bits, then
 * widened), unless the slot still holds them (the parameters have not
 * changed since): the forward's last block is the backward's first, and
 * wte|wpe and lnf serve both passes. */
static int zero_params(aa_gpt_t *m, int u, float **out, void *data) {
  aa_zero_t *z = data;
  int k = slot(m, u), rc = 0;
  if (z->held[k] != u) {
    size_t c = z->chunk[u], e = aa_dtype_size(z->amp);
    const char *mine = (const char *)z->pshard.data + z->shard_off[u] * e;
    z->held[k] = -1;
    if (!(rc = m->ops->sync()))
      rc = aa_comm_all_gather(z->comm, mine, z->amp == AA_F32 ? z->punit[k].data : z->land16, c, z->amp);
    if (rc) return aa_error_wrap(rc, "gathering the parameters of unit %d", u);
    if (z->amp != AA_F32) m->ops->cast_to_f32(z->punit[k].data, z->land16, z->amp, (size_t)z->world * c);
    z->held[k] = u;
  }
  *out = z->punit[k].data;
  return 0;
}

/* Stages 2-3: the backward accumulates unit u's gradient of this
 * micro-batch into the unit's scratch, zeroed first (with its padded tail,
 * which the reduce-scatter then adds as zeros). */
static int zero_grads(aa_gpt_t *m, int u, float **out, void *data) {
  aa_zero_t *z = data;
  aa_flatbuf_t *b = &z->gunit[z->gslot[slot(m, u)]];
  m->ops->memset0(b->data, (size_t)z->world * z->chunk[u] * sizeof(float));
  *out = b->data;
  return 0;
}

/* Stage 0 under expert parallelism: unit u's gradient g reduced run by
 * run, its dense tensors averaged over the replicas, its expert slices
 * summed over the expert-data group and divided by the replicas (optim.h,
 * expert_data). Tensors are contiguous in the unit, in table order. */
static int reduce_experts(aa_zero_t *z, aa_gpt_t *m, int u) {
  float *g = m->grads.data;
  int rc = 0;
  for (int i = 0; i < m->n_tensors && !rc;) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    if (d->unit != u || !d->numel) {
      i++;
      continue;
    }
    /* The run of tensors of the same kind from i. */
    size_t lo = d->offset, n = 0;
    int j = i;
    for (; j < m->n_tensors && m->tensors[j].unit == u && m->tensors[j].expert == d->expert; j++)
      n += m->tensors[j].numel;
    if (!d->expert) {
      rc = aa_comm_all_reduce(z->comm, g + lo, g + lo, n, AA_F32, AA_COMM_AVG);
    } else if (!(rc = aa_comm_all_reduce(z->expert_data, g + lo, g + lo, n, AA_F32, AA_COMM_SUM))) {
      m->ops->scale(g + lo, 1.0f / (float)z->world, n);
    }
    i = j;
  }
  return rc;
}

/* The backward has finished unit u's gradient: reduce it over the group
 * now, as one bucket (see optim.h for what each stage does). */
static int zero_grads_done(aa_gpt_t *m, int u, void *data) {
  aa_zero_t *z = data;
  const aa_ops_t *op = m->ops;
  size_t c = z->chunk[u], n = z->unit_n[u];
  if (z->stage < 2 && !z->last_micro) return 0;
  int rc = op->sync();
  if (rc) return rc;
  float *piece = z->piece.data;
  if (z->stage == 0 && z->expert_data) {
    rc = reduce_experts(z, m, u);
  } else if (z->stage == 0) {
    float *g = (float *)m->grads.data + z->unit_off[u];
    rc = aa_comm_all_reduce(z->comm, g, g, n, AA_F32, AA_COMM_AVG);
  } else if (z->stage == 1) {
    /* The unit padded with zeros to world * c elements, reduce-scattered;
     * the rank's chunk goes back into the full buffer, where the step
     * reads it. */
    float *p = z->pad;
    copy(op, p, (float *)m->grads.data + z->unit_off[u], n);
    op->memset0(p + n, ((size_t)z->world * c - n) * sizeof(float));
    /* The group reads p on its own stream (NCCL's): the backend's writes
     * must have landed first (comm.h). */
    if (!(rc = op->sync())) rc = aa_comm_reduce_scatter(z->comm, p, piece, c, AA_F32, AA_COMM_AVG);
    if (!rc && z->valid[u]) copy(op, grad_chunk(z, m, u), piece, z->valid[u]);
  } else {
    rc = aa_comm_reduce_scatter(z->comm, z->gunit[z->gslot[slot(m, u)]].data, piece, c, AA_F32, AA_COMM_AVG);
    if (!rc) op->accumulate((float *)z->gshard.data + z->shard_off[u], piece, c);
  }
  if (rc) return aa_error_wrap(rc, "reducing the gradient of unit %d", u);
  return 0;
}

int aa_zero_reduce_grads(aa_zero_t *z, aa_gpt_t *m) {
  if (!z->hooks.grads_done) return 0;
  int last = z->last_micro, rc = 0;
  z->last_micro = 1;
  for (int u = z->n_units - 1; u >= 0 && !rc; u--)
    if (z->unit_n[u]) rc = zero_grads_done(m, u, z);
  z->last_micro = last;
  return rc;
}

void aa_zero_free(aa_zero_t *z, aa_gpt_t *m) {
  if (m && m->hooks == &z->hooks) m->hooks = NULL;
  aa_adamw_free(&z->opt);
  aa_flatbuf_free(&z->gshard, z->mem);
  aa_flatbuf_free(&z->master, z->mem);
  aa_flatbuf_free(&z->pshard, z->mem);
  for (int k = 0; k < 3; k++) {
    aa_flatbuf_free(&z->gunit[k], z->mem);
    aa_flatbuf_free(&z->punit[k], z->mem);
  }
  aa_flatbuf_free(&z->punit16, z->mem);
  aa_flatbuf_free(&z->padded, z->mem);
  aa_flatbuf_free(&z->piece, z->mem);
  aa_flatbuf_free(&z->scalars, z->mem);
  free(z->unit_off);
  memset(z, 0, sizeof *z);
}

int aa_zero_init(aa_zero_t *z, aa_gpt_t *m, aa_comm_t *comm, int stage, aa_mem_t *mem) {
  memset(z, 0, sizeof *z);
  if (stage < 0 || stage > 3) return aa_error(AA_EINVAL, "ZeRO stage %d must be 0..3", stage);
  if (m->opts.zero != stage)
    return aa_error(AA_EINVAL, "the model was built for ZeRO stage %d, not %d", m->opts.zero, stage);
  if (m->ep > 1 && stage)
    return aa_error(AA_EUNSUPPORTED, "ZeRO stage %d with expert parallelism (expert %d): use ZeRO 0", stage,
                    m->ep);
  z->amp = m->opts.amp;
  z->comm = comm;
  z->rank = aa_comm_rank(comm);
  z->world = aa_comm_world(comm);
  z->stage = stage;
  z->ops = m->ops;
  z->mem = mem;
  z->n_units = aa_gpt_n_units(m);
  int U = z->n_units, rc = 0;
  for (int k = 0; k < 3; k++) z->held[k] = -1;
  if (!(z->unit_off = calloc((size_t)U * 5, sizeof(size_t)))) return aa_error(AA_ENOMEM, "out of memory");
  z->unit_n = z->unit_off + U;
  z->chunk = z->unit_off + 2 * U;
  z->valid = z->unit_off + 3 * U;
  z->shard_off = z->unit_off + 4 * U;
  for (int u = 0; u < U; u++) {
    aa_gpt_unit(m, u, &z->unit_off[u], &z->unit_n[u]);
    size_t n = z->unit_n[u], c = aa_sizes_chunk(n, z->world), lo = (size_t)z->rank * c;
    z->chunk[u] = c;
    z->valid[u] = n > lo ? (n - lo < c ? n - lo : c) : 0;
    z->shard_off[u] = z->shard_numel;
    z->shard_numel += c;
  }
  /* Every buffer is the size strategies/sizes.h gives, which the cost model
   * predicts from; its units are the model's by construction. */
  aa_zero_sizes_t sz;
  aa_sizes_zero_ep(&m->arch, m->tp, m->ep, m->pp > 1 ? &m->pipe : NULL, z->amp, stage, z->world, &sz);
  if (sz.shard != z->shard_numel) {
    rc = aa_error(AA_EINTERNAL, "ZeRO shard of %zu elements, sizes.h says %zu", z->shard_numel, sz.shard);
    goto fail;
  }
  aa_flatbuf_t *bufs[] = {&z->scalars, &z->piece,  &z->padded, &z->gshard,
                          &z->master,  &z->pshard, &z->punit16};
  const aa_buf_size_t *sizes[] = {&sz.scalars, &sz.piece,  &sz.padded, &sz.gshard,
                                  &sz.master,  &sz.pshard, &sz.punit16};
  rc = aa_adamw_init_on(&z->opt, m->ops, sz.moment.numel, mem);
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && !rc; i++)
    rc = aa_flatbuf_alloc_as(bufs[i], m->ops, mem, sizes[i]);
  for (int k = 0; k < 3 && !rc; k++)
    if (!(rc = aa_flatbuf_alloc_as(&z->gunit[k], m->ops, mem, &sz.gunit[k])))
      rc = aa_flatbuf_alloc_as(&z->punit[k], m->ops, mem, &sz.punit[k]);
  if (rc) goto fail;
  z->pad = sz.padded_slot >= 0 ? z->gunit[sz.padded_slot].data : z->padded.data;
  memcpy(z->gslot, sz.gslot, sizeof z->gslot);
  /* The blocks' gradient slot is idle whenever a unit is gathered (the
   * backward fetches a block's weights before its gradient, and wte's and
   * lnf's before any): the 16-bit units land there when they fit. */
  z->land16 = sz.punit16_in_grads ? z->gunit[1].data : z->punit16.data;
  /* Over a group of one at stage 0 the reduction is the identity: no hook,
   * so a single process does not wait for the backend once per unit. */
  z->hooks = (aa_gpt_hooks_t){.params = stage == 3 ? zero_params : NULL,
                              .grads = stage >= 2 ? zero_grads : NULL,
                              .grads_done = stage || z->world > 1 ? zero_grads_done : NULL,
                              .data = z};
  m->hooks = &z->hooks;
  return 0;
fail:
  aa_zero_free(z, m);
  return rc;
}

void aa_zero_zero_grad(aa_zero_t *z, aa_gpt_t *m) {
  aa_gpt_zero_grad(m);
  if (z->gshard.data) m->ops->memset0(z->gshard.data, z->shard_numel * sizeof(float));
}

void aa_zero_range(const aa_zero_t *z, const aa_gpt_t *m, int which, int u, aa_zero_range_t *out) {
  int full = which == 0 ? !sharded_params(z) : z->stage == 0;
  if (full) {
    const aa_flatbuf_t *b = which == 0 ? &m->params : which == 1 ? &z->opt.m : &z->opt.v;
    *out = (aa_zero_range_t){z->unit_off[u], z->unit_n[u], (float *)b->data + z->unit_off[u]};
    return;
  }
  const aa_flatbuf_t *mom = which == 1 ? &z->opt.m : &z->opt.v;
  float *p = which == 0 ? param_chunk(z, m, u) : (float *)mom->data + z->shard_off[u];
  *out = (aa_zero_range_t){chunk_start(z, u), z->valid[u], p};
}

typedef struct {
  aa_zero_t *z;
  const aa_gpt_t *m;
} put_ctx_t;

/* Keeps the part of the values of [offset, offset + n) that the rank
 * holds of the parameters. */
static int put_shard(size_t offset, const float *src, size_t n, void *data) {
  put_ctx_t *c = data;
  for (int u = 0; u < c->z->n_units; u++) {
    aa_zero_range_t r;
    aa_zero_range(c->z, c->m, 0, u, &r);
    size_t a = offset > r.offset ? offset : r.offset, b = offset + n < r.offset + r.n ? offset + n : r.offset + r.n;
    if (a >= b) continue;
    int rc = c->z->ops->upload(r.data + (a - r.offset), src + (a - offset), (b - a) * sizeof(float));
    if (rc) return rc;
  }
  return 0;
}

int aa_zero_init_weights(aa_zero_t *z, aa_gpt_t *m, uint64_t seed) {
  if (!sharded_params(z)) return aa_gpt_init_weights(m, seed);
  put_ctx_t c = {z, m};
  int rc = aa_gpt_init_weights_to(m, seed, put_shard, &c);
  return rc ? rc : aa_zero_publish(z, m);
}

int aa_zero_publish(aa_zero_t *z, aa_gpt_t *m) {
  const aa_ops_t *op = m->ops;
  int rc = 0;
  z->held[0] = z->held[1] = z->held[2] = -1;
  if (z->amp != AA_F32 && z->stage == 3) {
    op->cast_from_f32(z->pshard.data, z->amp, z->master.data, z->shard_numel);
  } else if (z->amp != AA_F32 && z->stage >= 1) {
    /* Each unit's master chunks gathered (fp32, padded) and rounded into
     * the model's 16-bit copy. */
    float *pad = z->pad;
    for (int u = 0; u < z->n_units && !rc; u++) {
      if (!(rc = op->sync())) rc = aa_comm_all_gather(z->comm, param_chunk(z, m, u), pad, z->chunk[u], AA_F32);
      if (!rc)
        op->cast_from_f32((char *)m->params16.data + z->unit_off[u] * aa_dtype_size(z->amp), z->amp, pad,
                          z->unit_n[u]);
    }
    if (rc) return aa_error_wrap(rc, "gathering the updated parameters");
  }
  aa_gpt_params_changed(m);
  return op->sync();
}

int aa_zero_step(aa_zero_t *z, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                 int skip_nonfinite, float *grad_norm) {
  if (z->stage == 0) return aa_adamw_step(&z->opt, m, cfg, lr, grad_scale, skip_nonfinite, grad_norm);
  const aa_ops_t *op = m->ops;
  int U = z->n_units, rc;
  double split = 0, whole = 0, experts = 0, sq = 0; /* set by tensor_squares on success */
  for (int u = 0; u < U; u++)
    if (z->valid[u])
      squares(m, grad_chunk(z, m, u), chunk_start(z, u), z->valid[u], &split, &whole, &experts);
  /* No expert slices here: aa_zero_init refuses stages 1-3 with expert parallelism. */
  /* Over the data group, then the tensor group (each data rank's chunks
   * of the tensor slices differ between tensor ranks, its chunks of the
   * whole tensors do not). */
  float sqs[2] = {(float)split, (float)whole};
  if ((rc = aa_zero_all_reduce_host(z, sqs, 2, AA_COMM_SUM)) || (rc = tensor_squares(m, sqs[0], sqs[1], &sq)))
    return aa_error_wrap(rc, "reducing the gradient norm");
  double norm = sqrt(sq) / grad_scale;
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    if ((rc = op->sync())) return rc;
    if (skip_nonfinite) return 1;
    return aa_error(AA_EINVAL, "gradient norm is not finite (%g); update skipped", norm);
  }
  double mult = 1.0 / grad_scale;
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) mult *= cfg->grad_clip / (norm + 1e-6);
  if (mult != 1.0)
    for (int u = 0; u < U; u++)
      if (z->valid[u]) op->scale(grad_chunk(z, m, u), (float)mult, z->valid[u]);
  /* AdamW tensor by tensor (weight decay differs between them) on the part
   * of each tensor inside the rank's chunk of its unit. */
  int t = z->opt.t + 1;
  float *mm = z->opt.m.data, *vv = z->opt.v.data;
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    int u = d->unit;
    size_t lo = chunk_start(z, u), hi = lo + z->valid[u];
    size_t a = d->offset > lo ? d->offset : lo, b = d->offset + d->numel < hi ? d->offset + d->numel : hi;
    if (a >= b) continue;
    size_t k = a - lo;
    op->adamw_update(param_chunk(z, m, u) + k, grad_chunk(z, m, u) + k, mm + z->shard_off[u] + k,
                     vv + z->shard_off[u] + k, b - a, lr, cfg->beta1, cfg->beta2, cfg->eps,
                     d->decay ? cfg->weight_decay : 0.0f, t);
  }
  if (!sharded_params(z)) {
    /* Every rank needs the whole updated model: each unit gathered from
     * the ranks' chunks (padded with zeros to c elements). */
    float *piece = z->piece.data, *pad = z->pad;
    for (int u = 0; u < U && !rc; u++) {
      size_t c = z->chunk[u];
      op->memset0(piece, c * sizeof(float));
      if (z->valid[u]) op->accumulate(piece, param_chunk(z, m, u), z->valid[u]);
      if (!(rc = op->sync())) rc = aa_comm_all_gather(z->comm, piece, pad, c, AA_F32);
      if (!rc) copy(op, (float *)m->params.data + z->unit_off[u], pad, z->unit_n[u]);
    }
    if (rc) return aa_error_wrap(rc, "gathering the updated parameters");
  }
  if ((rc = aa_zero_publish(z, m))) return rc;
  z->opt.t = t;
  return 0;
}

int aa_zero_all_reduce_host(aa_zero_t *z, float *x, size_t n, aa_comm_op_t op) {
  /* Over a group of one sizes.h gives no scalars: nothing is staged. */
  return aa_all_reduce_host(z->comm, z->ops, z->scalars.data, x, n, op);
}
