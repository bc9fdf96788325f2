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

/* The expert slices' squares x also summed over the tensor group when
 * each tensor rank holds its own share of them (model.h opts.etp). */
static int split_expert_squares(aa_gpt_t *m, float *x) {
  int rc = aa_sizes_etp(&m->arch, m->tp) > 1 ? aa_gpt_tensor_sum(m, x, 1) : 0;
  return rc ? aa_error_wrap(rc, "the gradient norm over the tensor group") : 0;
}

/* Adds to *sq the squares of the expert slices, summed over the expert
 * group (each rank holds different experts; ep 1: none). */
static int expert_squares(aa_gpt_t *m, double experts, double *sq) {
  if (m->ep == 1) return 0;
  float x = (float)experts;
  int rc = aa_comm_all_reduce(m->opts.expert, &x, &x, 1, AA_F32, AA_COMM_SUM);
  if (rc) return aa_error_wrap(rc, "the gradient norm over the expert group");
  if ((rc = split_expert_squares(m, &x))) return rc;
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

float aa_adamw_grad_mult(const aa_ops_t *op, float *g, size_t n, double mult) {
  if (op->adamw_update_scaled) return (float)mult;
  if (mult != 1.0) op->scale(g, (float)mult, n);
  return 1.0f;
}

void aa_adamw_update(const aa_ops_t *op, float *p, const float *g, float *mm, float *vv, size_t n, float lr,
                     const aa_train_cfg_t *cfg, float wd, int t, float gscale) {
  if (op->adamw_update_scaled)
    op->adamw_update_scaled(p, g, mm, vv, n, lr, cfg->beta1, cfg->beta2, cfg->eps, wd, t, gscale);
  else
    op->adamw_update(p, g, mm, vv, n, lr, cfg->beta1, cfg->beta2, cfg->eps, wd, t);
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
  /* Unscaling and clipping are one multiply. */
  double mult = 1.0 / grad_scale;
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) mult *= cfg->grad_clip / (norm + 1e-6);
  const float gscale = aa_adamw_grad_mult(op, g, m->n_params, mult);
  /* One call per tensor so weight decay can differ; tensors are contiguous
   * in the layout, so a whole-buffer update would differ only in decay. */
  float *p = m->params.data, *mm = o->m.data, *vv = o->v.data;
  int t = o->t + 1;
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    aa_adamw_update(op, p + d->offset, g + d->offset, mm + d->offset, vv + d->offset, d->numel, lr, cfg,
                    d->decay ? cfg->weight_decay : 0.0f, t, gscale);
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

/* The group piece p is reduced, sharded and gathered over, and the rank's
 * place and the ranks in it: the data group for a dense piece, the
 * expert-data group for an expert slice. */
static aa_comm_t *group(const aa_zero_t *z, int p) { return z->piece_expert[p] ? z->expert_data : z->comm; }
static int group_rank(const aa_zero_t *z, int p) { return z->piece_expert[p] ? z->expert_rank : z->rank; }
static int group_world(const aa_zero_t *z, int p) { return z->piece_expert[p] ? z->expert_world : z->world; }

/* Start of the rank's chunk of piece p in the flat buffer. */
static size_t chunk_start(const aa_zero_t *z, int p) {
  return z->piece_off[p] + (size_t)group_rank(z, p) * z->chunk[p];
}

/* The rank's chunk (valid[p] elements) of piece p's reduced gradient and
 * of its parameters (stages 1-3), wherever the stage keeps them. */
static float *grad_chunk(const aa_zero_t *z, const aa_gpt_t *m, int p) {
  return z->stage == 1 ? (float *)m->grads.data + chunk_start(z, p)
                       : (float *)z->gshard.data + z->shard_off[p];
}
static float *param_chunk(const aa_zero_t *z, const aa_gpt_t *m, int p) {
  if (z->amp != AA_F32 && z->stage >= 1) return (float *)z->master.data + z->shard_off[p];
  return z->stage < 3 ? (float *)m->params.data + chunk_start(z, p)
                      : (float *)z->pshard.data + z->shard_off[p];
}

/* The piece tensor d lies in (pieces are runs of whole tensors), or -1
 * for a tensor without elements. */
static int piece_of(const aa_zero_t *z, const aa_tensor_desc_t *d) {
  for (int p = z->unit_piece[d->unit]; d->numel && p < z->unit_piece[d->unit + 1]; p++)
    if (d->offset >= z->piece_off[p] && d->offset < z->piece_off[p] + z->piece_n[p]) return p;
  return -1;
}

/* Whether the rank's parameters (the fp32 master weights under amp) are a
 * shard, not the model's full buffer. */
static int sharded_params(const aa_zero_t *z) { return z->stage == 3 || (z->stage >= 1 && z->amp != AA_F32); }

/* Stage 3, before the model reads unit u: its parameters gathered from
 * every rank's chunk of each piece into the unit's slot (under amp in 16
 * bits, then widened), unless the slot still holds them (the parameters
 * have not changed since): the forward's last block is the backward's
 * first, and wte|wpe and lnf serve both passes. The pieces are gathered
 * in layout order: a piece's padded chunks run on into the next piece's
 * place, which the next gather then writes. */
static int zero_params(aa_gpt_t *m, int u, float **out, void *data) {
  aa_zero_t *z = data;
  int k = slot(m, u), rc = 0;
  if (z->held[k] != u) {
    const size_t e = aa_dtype_size(z->amp);
    char *land = z->amp == AA_F32 ? z->punit[k].data : z->land16;
    z->held[k] = -1;
    rc = m->ops->sync();
    for (int p = z->unit_piece[u]; p < z->unit_piece[u + 1] && !rc; p++) {
      const char *mine = (const char *)z->pshard.data + z->shard_off[p] * e;
      rc = aa_comm_all_gather(group(z, p), mine, land + (z->piece_off[p] - z->unit_off[u]) * e, z->chunk[p],
                              z->amp);
    }
    if (rc) return aa_error_wrap(rc, "gathering the parameters of unit %d", u);
    if (z->amp != AA_F32) m->ops->cast_to_f32(z->punit[k].data, z->land16, z->amp, z->unit_extent[u]);
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
  m->ops->memset0(b->data, z->unit_extent[u] * sizeof(float));
  *out = b->data;
  return 0;
}

/* Piece p's finished gradient reduced over its group (see optim.h for
 * what each stage does). A dense piece is averaged over the replicas. An
 * expert slice's gradient holds its expert group's tokens' contributions:
 * it is summed over the expert-data group and divided by the replicas,
 * which is the same mean. */
static int reduce_piece(aa_zero_t *z, aa_gpt_t *m, int p) {
  const aa_ops_t *op = m->ops;
  const int ex = z->piece_expert[p], u = z->piece_unit[p];
  const aa_comm_op_t how = ex ? AA_COMM_SUM : AA_COMM_AVG;
  const float mean = 1.0f / (float)z->world;
  const size_t c = z->chunk[p], n = z->piece_n[p], padded = (size_t)group_world(z, p) * c;
  float *piece = z->piece.data;
  int rc;
  if (z->stage == 0) {
    float *g = (float *)m->grads.data + z->piece_off[p];
    rc = aa_comm_all_reduce(group(z, p), g, g, n, AA_F32, how);
    if (!rc && ex) op->scale(g, mean, n);
    return rc;
  }
  if (z->stage == 1) {
    /* The piece padded with zeros, reduce-scattered; the rank's chunk goes
     * back into the full buffer, where the step reads it. */
    float *pad = z->pad;
    copy(op, pad, (float *)m->grads.data + z->piece_off[p], n);
    op->memset0(pad + n, (padded - n) * sizeof(float));
    /* The group reads pad on its own stream (NCCL's): the backend's
     * writes must have landed first (comm.h). */
    if (!(rc = op->sync())) rc = aa_comm_reduce_scatter(group(z, p), pad, piece, c, AA_F32, how);
    if (rc) return rc;
    if (ex) op->scale(piece, mean, c);
    if (z->valid[p]) copy(op, grad_chunk(z, m, p), piece, z->valid[p]);
    return 0;
  }
  /* Stages 2-3: straight from the unit's scratch. A piece's padded chunks
   * run on into the next piece's place (the unit's last ends in the
   * zeroed tail): its gradient is reduced already (the pieces go last
   * first), so the padding is zeroed there now. */
  float *src = (float *)z->gunit[z->gslot[slot(m, u)]].data + (z->piece_off[p] - z->unit_off[u]);
  if (padded > n && p + 1 < z->unit_piece[u + 1]) {
    op->memset0(src + n, (padded - n) * sizeof(float));
    if ((rc = op->sync())) return rc;
  }
  if ((rc = aa_comm_reduce_scatter(group(z, p), src, piece, c, AA_F32, how))) return rc;
  if (ex) op->scale(piece, mean, c);
  op->accumulate((float *)z->gshard.data + z->shard_off[p], piece, c);
  return 0;
}

/* The backward has finished unit u's gradient: reduce it over the group
 * now, a bucket a piece. */
static int zero_grads_done(aa_gpt_t *m, int u, void *data) {
  aa_zero_t *z = data;
  if (z->stage < 2 && !z->last_micro) return 0;
  int rc = m->ops->sync();
  for (int p = z->unit_piece[u + 1] - 1; p >= z->unit_piece[u] && !rc; p--)
    rc = reduce_piece(z, m, p);
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
  free(z->unit_piece);
  memset(z, 0, sizeof *z);
}

/* Unit u's pieces from the model's tensor table (the runs of tensors of
 * one kind, dense or expert slice) appended to z's, checked against
 * strategies/sizes.h's, which the cost model predicts from. */
static int unit_pieces(aa_zero_t *z, const aa_gpt_t *m, int u) {
  const int first = z->n_pieces;
  z->unit_piece[u] = first;
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    if (d->unit != u || !d->numel) continue;
    int p = z->n_pieces - 1;
    if (p < first || z->piece_expert[p] != d->expert) {
      if (z->n_pieces - first == AA_SIZES_PIECES_MAX)
        return aa_error(AA_EINTERNAL, "ZeRO: unit %d has more than %d pieces", u, AA_SIZES_PIECES_MAX);
      p = z->n_pieces++;
      z->piece_off[p] = d->offset;
      z->piece_n[p] = 0;
      z->piece_expert[p] = d->expert != 0;
    }
    z->piece_n[p] += d->numel;
  }
  if (z->n_pieces == first) { /* a unit the rank does not hold: one empty piece */
    z->piece_off[first] = z->unit_off[u];
    z->piece_n[first] = 0;
    z->piece_expert[first] = 0;
    z->n_pieces++;
  }
  aa_sizes_piece_t want[AA_SIZES_PIECES_MAX];
  const int nw = aa_sizes_unit_pieces(&m->arch, m->tp, m->ep, m->pp > 1 ? &m->pipe : NULL, u, want);
  int same = nw == z->n_pieces - first;
  for (int k = 0; same && k < nw; k++) {
    const int p = first + k;
    same = want[k].n == z->piece_n[p] && want[k].expert == z->piece_expert[p] &&
           (!want[k].n || want[k].off == z->piece_off[p] - z->unit_off[u]);
  }
  if (!same) return aa_error(AA_EINTERNAL, "ZeRO: unit %d's pieces differ from sizes.h's", u);
  return 0;
}

int aa_zero_init(aa_zero_t *z, aa_gpt_t *m, aa_comm_t *comm, int stage, aa_mem_t *mem) {
  return aa_zero_init_ep(z, m, comm, NULL, stage, mem);
}

int aa_zero_init_ep(aa_zero_t *z, aa_gpt_t *m, aa_comm_t *comm, aa_comm_t *expert_data, int stage,
                    aa_mem_t *mem) {
  memset(z, 0, sizeof *z);
  if (stage < 0 || stage > 3) return aa_error(AA_EINVAL, "ZeRO stage %d must be 0..3", stage);
  if (m->opts.zero != stage)
    return aa_error(AA_EINVAL, "the model was built for ZeRO stage %d, not %d", m->opts.zero, stage);
  if (m->ep > 1 && (!expert_data || aa_comm_world(comm) != m->ep * aa_comm_world(expert_data)))
    return aa_error(AA_EINVAL,
                    "expert parallelism (expert %d) over %d replicas needs their expert-data group of %d",
                    m->ep, aa_comm_world(comm), aa_comm_world(comm) / m->ep);
  z->amp = m->opts.amp;
  z->comm = comm;
  z->rank = aa_comm_rank(comm);
  z->world = aa_comm_world(comm);
  z->expert_data = m->ep > 1 ? expert_data : NULL;
  z->expert_rank = z->expert_data ? aa_comm_rank(expert_data) : 0;
  z->expert_world = z->expert_data ? aa_comm_world(expert_data) : 1;
  z->stage = stage;
  z->ops = m->ops;
  z->mem = mem;
  z->n_units = aa_gpt_n_units(m);
  const int U = z->n_units, P = U * AA_SIZES_PIECES_MAX;
  int rc = 0;
  for (int k = 0; k < 3; k++) z->held[k] = -1;
  z->unit_off = calloc((size_t)3 * U + (size_t)5 * P, sizeof(size_t));
  z->unit_piece = calloc((size_t)(U + 1) + (size_t)2 * P, sizeof(int));
  if (!z->unit_off || !z->unit_piece) {
    rc = aa_error(AA_ENOMEM, "out of memory");
    goto fail;
  }
  z->unit_n = z->unit_off + U;
  z->unit_extent = z->unit_off + 2 * U;
  z->piece_off = z->unit_off + 3 * U;
  z->piece_n = z->piece_off + P;
  z->chunk = z->piece_off + 2 * P;
  z->valid = z->piece_off + 3 * P;
  z->shard_off = z->piece_off + 4 * P;
  z->piece_unit = z->unit_piece + U + 1;
  z->piece_expert = z->piece_unit + P;
  for (int u = 0; u < U && !rc; u++) {
    aa_gpt_unit(m, u, &z->unit_off[u], &z->unit_n[u]);
    if ((rc = unit_pieces(z, m, u))) break;
    for (int p = z->unit_piece[u]; p < z->n_pieces; p++) {
      const size_t n = z->piece_n[p], w = (size_t)group_world(z, p), c = aa_sizes_chunk(n, (int)w),
                   lo = (size_t)group_rank(z, p) * c, end = z->piece_off[p] - z->unit_off[u] + w * c;
      z->piece_unit[p] = u;
      z->chunk[p] = c;
      z->valid[p] = n > lo ? (n - lo < c ? n - lo : c) : 0;
      z->shard_off[p] = z->shard_numel;
      z->shard_numel += c;
      if (end > z->unit_extent[u]) z->unit_extent[u] = end;
    }
  }
  if (rc) goto fail;
  z->unit_piece[U] = z->n_pieces;
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

void aa_zero_range(const aa_zero_t *z, const aa_gpt_t *m, int which, int p, aa_zero_range_t *out) {
  int full = which == 0 ? !sharded_params(z) : z->stage == 0;
  if (full) {
    const aa_flatbuf_t *b = which == 0 ? &m->params : which == 1 ? &z->opt.m : &z->opt.v;
    *out = (aa_zero_range_t){z->piece_off[p], z->piece_n[p], (float *)b->data + z->piece_off[p]};
    return;
  }
  const aa_flatbuf_t *mom = which == 1 ? &z->opt.m : &z->opt.v;
  float *x = which == 0 ? param_chunk(z, m, p) : (float *)mom->data + z->shard_off[p];
  *out = (aa_zero_range_t){chunk_start(z, p), z->valid[p], x};
}

int aa_zero_gather(aa_zero_t *z, const aa_gpt_t *m, int which, float *out, float *scratch) {
  int rc = 0;
  for (int p = 0; p < z->n_pieces && !rc; p++) {
    aa_zero_range_t r;
    aa_zero_range(z, m, which, p, &r);
    const size_t n = z->piece_n[p], c = z->chunk[p];
    /* Decided by the stage and the group, the same on all its ranks. */
    if (!(which == 0 ? sharded_params(z) : z->stage > 0) || group_world(z, p) == 1) {
      rc = m->ops->download(out + z->piece_off[p], r.data, n * sizeof(float));
      continue;
    }
    /* The rank's chunk padded with zeros, every rank's gathered after it. */
    float *mine = scratch, *all = scratch + c;
    memset(mine, 0, c * sizeof(float));
    if (!(rc = m->ops->download(mine, r.data, r.n * sizeof(float))) &&
        !(rc = aa_comm_all_gather(group(z, p), mine, all, c, AA_F32)))
      memcpy(out + z->piece_off[p], all, n * sizeof(float));
  }
  return rc;
}

size_t aa_zero_gather_scratch(const aa_zero_t *z) {
  size_t most = 0;
  for (int p = 0; p < z->n_pieces; p++) {
    size_t k = (1 + (size_t)group_world(z, p)) * z->chunk[p];
    if (k > most) most = k;
  }
  return most;
}

typedef struct {
  aa_zero_t *z;
  const aa_gpt_t *m;
} put_ctx_t;

/* Keeps the part of the values of [offset, offset + n) that the rank
 * holds of the parameters. */
static int put_shard(size_t offset, const float *src, size_t n, void *data) {
  put_ctx_t *c = data;
  for (int p = 0; p < c->z->n_pieces; p++) {
    aa_zero_range_t r;
    aa_zero_range(c->z, c->m, 0, p, &r);
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
    /* Each piece's master chunks gathered (fp32, padded) and rounded into
     * the model's 16-bit copy. */
    float *pad = z->pad;
    for (int p = 0; p < z->n_pieces && !rc; p++) {
      if (!(rc = op->sync()))
        rc = aa_comm_all_gather(group(z, p), param_chunk(z, m, p), pad, z->chunk[p], AA_F32);
      if (!rc)
        op->cast_from_f32((char *)m->params16.data + z->piece_off[p] * aa_dtype_size(z->amp), z->amp, pad,
                          z->piece_n[p]);
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
  const int P = z->n_pieces;
  int rc;
  double split = 0, whole = 0, experts = 0, sq = 0; /* set by tensor_squares on success */
  for (int p = 0; p < P; p++)
    if (z->valid[p])
      squares(m, grad_chunk(z, m, p), chunk_start(z, p), z->valid[p], &split, &whole, &experts);
  /* Over the data group, then the tensor group (each data rank's chunks
   * of the tensor slices differ between tensor ranks, its chunks of the
   * whole tensors do not). Every element of every expert slice lies in
   * one data rank's chunk (its expert-data group's ranks share it out,
   * and those groups partition the data group), so the data group's sum
   * of the expert squares is the whole norm's share. */
  float sqs[3] = {(float)split, (float)whole, (float)experts};
  if ((rc = aa_zero_all_reduce_host(z, sqs, 3, AA_COMM_SUM)) ||
      (rc = tensor_squares(m, sqs[0], sqs[1], &sq)) || (m->ep > 1 && (rc = split_expert_squares(m, &sqs[2]))))
    return aa_error_wrap(rc, "reducing the gradient norm");
  sq += sqs[2];
  double norm = sqrt(sq) / grad_scale;
  if (grad_norm) *grad_norm = (float)norm;
  if (!isfinite(norm)) {
    if ((rc = op->sync())) return rc;
    if (skip_nonfinite) return 1;
    return aa_error(AA_EINVAL, "gradient norm is not finite (%g); update skipped", norm);
  }
  double mult = 1.0 / grad_scale;
  if (cfg->grad_clip > 0 && norm > cfg->grad_clip) mult *= cfg->grad_clip / (norm + 1e-6);
  float gscale = 1.0f; /* the same factor from every chunk */
  for (int p = 0; p < P; p++)
    if (z->valid[p]) gscale = aa_adamw_grad_mult(op, grad_chunk(z, m, p), z->valid[p], mult);
  /* AdamW tensor by tensor (weight decay differs between them) on the part
   * of each tensor inside the rank's chunk of its piece. */
  int t = z->opt.t + 1;
  float *mm = z->opt.m.data, *vv = z->opt.v.data;
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    const int p = piece_of(z, d);
    if (p < 0) continue;
    size_t lo = chunk_start(z, p), hi = lo + z->valid[p];
    size_t a = d->offset > lo ? d->offset : lo, b = d->offset + d->numel < hi ? d->offset + d->numel : hi;
    if (a >= b) continue;
    size_t k = a - lo;
    aa_adamw_update(op, param_chunk(z, m, p) + k, grad_chunk(z, m, p) + k, mm + z->shard_off[p] + k,
                    vv + z->shard_off[p] + k, b - a, lr, cfg, d->decay ? cfg->weight_decay : 0.0f, t, gscale);
  }
  if (!sharded_params(z)) {
    /* Every rank needs the whole updated model: each piece gathered from
     * its group's chunks (padded with zeros to c elements). */
    float *piece = z->piece.data, *pad = z->pad;
    for (int p = 0; p < P && !rc; p++) {
      size_t c = z->chunk[p];
      op->memset0(piece, c * sizeof(float));
      if (z->valid[p]) op->accumulate(piece, param_chunk(z, m, p), z->valid[p]);
      if (!(rc = op->sync())) rc = aa_comm_all_gather(group(z, p), piece, pad, c, AA_F32);
      if (!rc) copy(op, (float *)m->params.data + z->piece_off[p], pad, z->piece_n[p]);
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
