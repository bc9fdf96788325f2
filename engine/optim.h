/* AdamW with global-norm gradient clipping over the model's flat buffers.
 * The moments live in flat fp32 buffers parallel to the parameters, so a
 * ZeRO shard is a slice of each. */
#ifndef AA_OPTIM_H
#define AA_OPTIM_H

#include "../comm/comm.h"
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
 *     (torch.nn.utils.clip_grad_norm_), as one multiply;
 *  4. AdamW with lr, cfg->beta1/beta2/eps, and cfg->weight_decay applied
 *     only to tensors whose descriptor has decay = 1.
 * Where the backend has ops.h adamw_update_scaled, 3 is folded into 4 and
 * m->grads is left as the backward made it; else it is scaled in place.
 * The update is the same either way.
 * Returns 0 after an update, or the backend's error (the moments' backend
 * must be m's, else AA_EINVAL). */
int aa_adamw_step(aa_adamw_t *o, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                  int skip_nonfinite, float *grad_norm);

/* Steps 3 and 4 on a piece of a gradient, for every optimizer here (whole
 * model, ZeRO shards, LoRA adapters). aa_adamw_grad_mult: the unscaling and
 * clipping multiply `mult` of g(n): with the backend's adamw_update_scaled
 * it is left to the update (returns mult, g unchanged), else g is scaled
 * now (returns 1; nothing at mult 1, so fp32 results match an unscaled run
 * exactly). aa_adamw_update: AdamW on n elements whose gradient is g *
 * gscale, gscale what aa_adamw_grad_mult returned. */
float aa_adamw_grad_mult(const aa_ops_t *op, float *g, size_t n, double mult);
void aa_adamw_update(const aa_ops_t *op, float *p, const float *g, float *mm, float *vv, size_t n, float lr,
                     const aa_train_cfg_t *cfg, float wd, int t, float gscale);

/* Data parallelism with ZeRO over the data group of the rank's mesh
 * (engine/mesh.h), `world` ranks (comm/comm.h), one aa_zero_t per rank. A
 * single process runs it too, over a group of one at stage 0: that is
 * plain AdamW (aa_adamw_step) with no gradient hook in the model, its
 * other collectives in-place no-ops.
 *
 * Units. The model's parameters split into units (aa_gpt_unit: wte|wpe,
 * each block, lnf), contiguous slices of the flat buffer that are the
 * granularity of everything here: a gradient bucket, a shard, a gather.
 * Unit u of n_u elements is padded to world * c_u (c_u = ceil(n_u / world))
 * and rank r owns the chunk [r c_u, (r + 1) c_u) of it, of which
 * valid_u(r) = min(c_u, max(0, n_u - r c_u)) elements are real. Every
 * collective on a unit then has the same count on every rank (what NCCL
 * needs), and a rank's shard is its chunks back to back: S = sum of c_u
 * elements (Psi / world plus at most world - 1 padding elements per unit).
 *
 * Pieces. Under expert parallelism (the model's ep > 1) a weight is held
 * by one of two groups: the dense weights by the data group (comm), an
 * MoE block's expert slices by the expert-data group (expert_data, the
 * world / ep replicas holding the same experts). So every unit is cut
 * into pieces, the runs of its tensors one group holds
 * (strategies/sizes.h aa_sizes_unit_pieces: an MoE block's dense head,
 * its expert slices, its shared experts' tail), and all of the above
 * applies to each piece over its own group: chunk c_p = ceil(n_p / w_p),
 * one collective per piece. At ep 1 each unit is one piece. A unit's
 * gathered or reduced pieces lie at their own offsets in its padded
 * scratch, each piece's padded chunks running on into the next piece's
 * place (the gathers go in layout order, the reductions last first, so
 * nothing is read that a later piece wrote); the unit's padded extent is
 * where its last piece's chunks end. An expert slice's gradient (its
 * expert group's tokens' contributions) is summed over its group and
 * divided by world, which is the mean a dense weight's average gives.
 *
 *   stage 0  full state on every rank. After the last micro-batch of a
 *            step, each unit's gradient is all-reduced (AVG) as soon as the
 *            backward finishes it (backward order: lnf, blocks L-1..0,
 *            wte|wpe), one collective per unit; every rank runs the full
 *            AdamW.
 *   stage 1  AdamW moments for the shard only. After the last
 *            micro-batch, each finished unit is reduce-scattered (AVG) and
 *            the rank's chunk lands in the full gradient buffer; the step
 *            updates the rank's chunks and all-gathers each unit's
 *            parameters.
 *   stage 2  the gradient too: the backward writes a unit's gradient into
 *            a unit-sized scratch that is reduce-scattered into the shard
 *            accumulator as soon as it is finished, every micro-batch.
 *   stage 3  the parameters too: each unit is all-gathered into a
 *            unit-sized buffer before the forward reads it and again before
 *            the backward does, unless still held (the blocks share one
 *            buffer; wte|wpe and lnf have their own, since the forward's
 *            head reads wte after the blocks).
 * The gradient norm is the square root of the sum over ranks (all-reduce)
 * of each rank's sum of squares over its chunks, so clipping and the
 * non-finite skip are the same decision on every rank.
 *
 *
 * Mixed precision (amp bf16/fp16): the fp32 master weights are optimizer
 * state, so from stage 1 they are sharded with the moments. The step
 * updates the rank's master chunks and the model's full 16-bit copy is
 * rebuilt from them: stages 1-2 all-gather each unit's master chunks (fp32)
 * and round them into it; at stage 3 each rank rounds its chunk into its
 * 16-bit parameter shard, which the forward and backward gather (16-bit)
 * and widen unit by unit.
 *
 * Per-rank accounted bytes for Psi parameters:
 *            fp32                          amp
 *   params   4Psi (stage 3: 4S)            2Psi (stage 3: 2S)
 *   grads    4Psi (stages 2-3: 4S)         4Psi (stages 2-3: 4S)
 *   optim    8Psi (stages 1-3: 8S)         12Psi (stages 1-3: 12S)
 * Unit scratch and the collectives' staging are workspace. Every buffer's
 * size is strategies/sizes.h's (aa_sizes_zero), which the cost model
 * predicts from. */
typedef struct aa_zero {
  aa_comm_t *comm; /* borrowed: the data-parallel group */
  int rank, world, stage;
  aa_dtype_t amp;      /* the model's: AA_F32, AA_BF16 or AA_F16 */
  const aa_ops_t *ops; /* the model's backend (borrowed) */
  aa_mem_t *mem;       /* accountant (borrowed; may be NULL) */
  int n_units;
  size_t *unit_off, *unit_n; /* the model's units (one allocation with the per-piece sizes) */
  size_t *unit_extent;       /* the unit's padded extent from unit_off (stages 2-3: its scratch) */
  int *unit_piece;           /* unit u's pieces are [unit_piece[u], unit_piece[u + 1]) (one allocation
                                with piece_unit and piece_expert) */
  int n_pieces;
  size_t *piece_off, *piece_n;    /* each piece's first element in the flat buffer and its count */
  int *piece_unit, *piece_expert; /* its unit; 1 for an expert slice (held by expert_data) */
  size_t *chunk;                  /* c_p */
  size_t *valid;                  /* valid_p(rank in the piece's group) */
  size_t *shard_off;              /* where piece p's chunk starts in the shard buffers */
  size_t shard_numel;        /* S */
  aa_adamw_t opt;            /* moments: n_params elements (stage 0) or S */
  aa_flatbuf_t gshard;       /* stages 2-3: gradient shard accumulator (grads), S */
  aa_flatbuf_t master;       /* amp, stages 1-3: fp32 master weights of the shard (optim), S */
  aa_flatbuf_t pshard;       /* stage 3: parameter shard (params), S, in the model's compute type */
  aa_flatbuf_t gunit[3];     /* stages 2-3: padded unit gradient scratch (workspace): wte|wpe, a block, lnf
                                (under an untied head, lnf's is wte's: gslot) */
  int gslot[3];              /* the gunit each slot's gradients use (aa_zero_sizes_t.gslot) */
  aa_flatbuf_t punit[3];     /* stage 3: gathered padded units (workspace), the same three */
  aa_flatbuf_t punit16;      /* amp, stage 3: a gathered 16-bit unit before widening (workspace), unless
                                it lands in gunit[1] (aa_zero_sizes_t.punit16_in_grads) */
  void *land16;              /* amp, stage 3: where the 16-bit units land, punit16 or gunit[1] */
  int held[3];               /* stage 3: the unit each punit holds while the parameters stay unchanged, or -1 */
  aa_flatbuf_t padded;       /* stage 1: one padded unit (workspace) */
  float *pad;                /* stages 1-2: where the step gathers a unit: padded, or at stage 2 the
                                largest gunit, idle outside the backward */
  aa_flatbuf_t piece;        /* stages 1-3: one chunk (workspace) */
  aa_flatbuf_t scalars;      /* 16 floats (workspace): host values pass through it to the group */
  /* Set by the trainer around each micro-batch: stages 0 and 1 reduce the
   * accumulated gradient only during the last one of a step. */
  int last_micro;
  /* Expert parallelism (the model's ep > 1): the expert-data group
   * (engine/mesh.h, borrowed), which reduces, shards and gathers the
   * expert slices (see Pieces), and the rank's place in it. NULL (rank 0
   * of 1) at ep 1. */
  aa_comm_t *expert_data;
  int expert_rank, expert_world;
  aa_gpt_hooks_t hooks;
} aa_zero_t;

/* Sets up ZeRO `stage` for model m (created with opts.zero = stage) over
 * comm (borrowed; must outlive z): allocates the moments, shards and
 * scratch from m's backend, accounted in mem, and installs its hooks in m.
 * On failure everything is freed and m is as it was. */
int aa_zero_init(aa_zero_t *z, aa_gpt_t *m, aa_comm_t *comm, int stage, aa_mem_t *mem);
/* The same for a model with expert parallelism (m->ep > 1): expert_data
 * (borrowed; must outlive z) is the rank's expert-data group, of
 * aa_comm_world(comm) / ep ranks (else AA_EINVAL). Ignored at ep 1. */
int aa_zero_init_ep(aa_zero_t *z, aa_gpt_t *m, aa_comm_t *comm, aa_comm_t *expert_data, int stage,
                    aa_mem_t *mem);
/* Frees what aa_zero_init allocated and removes the hooks from m (may be
 * NULL). A zeroed or already freed z is a no-op. */
void aa_zero_free(aa_zero_t *z, aa_gpt_t *m);

/* Zeroes the gradients for a new step (the model's, or the shard). */
void aa_zero_zero_grad(aa_zero_t *z, aa_gpt_t *m);

/* Pipeline parallelism (stages 0 and 1 only): the trainer runs its
 * schedule with last_micro = 0, so that no gradient is reduced while
 * micro-batches of different stages interleave, then calls this: every
 * unit the rank holds reduced over the group, in backward order, as the
 * hooks do during the last micro-batch's backward. A collective. */
int aa_zero_reduce_grads(aa_zero_t *z, aa_gpt_t *m);

/* aa_gpt_init_weights, each rank keeping what its stage holds (the values
 * are the same as in a single process). A collective. */
int aa_zero_init_weights(aa_zero_t *z, aa_gpt_t *m, uint64_t seed);

/* After the rank's parameters were written from outside (a checkpoint
 * load): brings what the forward reads up to date, the 16-bit copy under
 * amp included. A collective. */
int aa_zero_publish(aa_zero_t *z, aa_gpt_t *m);

/* aa_adamw_step over the group, after a backward whose gradients the hooks
 * have reduced: same contract, with the norm of the averaged gradient, and
 * the same parameters on every rank afterwards (stages 1-2 all-gather
 * them; stage 3 gathers them when the next forward needs them). A
 * collective: every rank calls it. */
int aa_zero_step(aa_zero_t *z, aa_gpt_t *m, const aa_train_cfg_t *cfg, float lr, double grad_scale,
                 int skip_nonfinite, float *grad_norm);

/* Host floats x (n <= 16) replaced by op over the group's ranks
 * (aa_comm_all_reduce through backend memory, as NCCL needs device
 * buffers). A collective. Over a group of one x is the result as it is:
 * nothing is staged or moved. */
int aa_zero_all_reduce_host(aa_zero_t *z, float *x, size_t n, aa_comm_op_t op);

/* What the rank holds of buffer `which` (0 parameters, the fp32 master
 * weights under amp; 1 first moment; 2 second moment) for piece p (0 ..
 * n_pieces - 1; at ep 1 the pieces are the units): (flat offset of the
 * first element, count, fp32 pointer in backend memory). The whole piece
 * when the stage keeps the buffer full, else the rank's chunk (count =
 * valid_p; it starts at piece_off[p] + rank * chunk[p], rank its place in
 * the piece's group). */
typedef struct aa_zero_range {
  size_t offset, n;
  float *data;
} aa_zero_range_t;
void aa_zero_range(const aa_zero_t *z, const aa_gpt_t *m, int which, int p, aa_zero_range_t *out);

/* The whole of buffer `which` (as aa_zero_range) that the rank's model
 * lays out (m->n_params floats: at ep > 1 its own expert slices) into
 * host memory out, each sharded piece gathered over its group through
 * host scratch of aa_zero_gather_scratch(z) floats. A collective; its
 * buffers are host memory, so for the CPU backend's groups (the only ones
 * an expert-parallel model runs on, which is what it serves:
 * checkpoints). */
int aa_zero_gather(aa_zero_t *z, const aa_gpt_t *m, int which, float *out, float *scratch);
size_t aa_zero_gather_scratch(const aa_zero_t *z);

#endif
