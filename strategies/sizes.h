/* What one rank allocates, computed in one place: the element counts of the
 * parameters, gradients and optimizer state (ZeRO shards over the data
 * group, an expert slice over its expert-data group), and where every activation and workspace buffer of a
 * micro-batch lies. The engine allocates and carves exactly these
 * (engine/model.c, engine/optim.c) and the cost model predicts from them
 * (cost.h), so the two cannot disagree. Pure arithmetic on the
 * architecture and the strategy's knobs: the planner uses it without the
 * engine.
 *
 * Tensor parallelism over t ranks (Megatron's split, engine/model.h) gives
 * every rank of the tensor group the same shapes: n_head / t heads, d_ff /
 * t MLP columns and ceil(V / t) vocabulary rows (the tail of the last ranks'
 * slices is padding); LayerNorms, biases of the row-parallel layers and
 * the position table are whole on every rank. Sequence parallelism splits
 * the residual stream's B x T tokens between them. So a rank's sizes
 * depend on t and sp, not on its coordinate; a ZeRO shard is the same size
 * on every data rank (the last rank's padding is allocated too).
 *
 * Pipeline parallelism (a rank's place, strategies/pipeline.h; NULL or pp
 * 1: the whole model) keeps only the units the rank holds: its blocks,
 * wte|wpe on the first stage and on the last (the tied head's copy), lnf
 * on the last. Units it does not hold have no elements. Its activations
 * are kept per micro-batch in flight (aa_act_layout_t). */
#ifndef AA_SIZES_H
#define AA_SIZES_H

#include <stddef.h>

#include "../common/aa.h"
#include "../common/mem.h"
#include "../common/spec.h"
#include "pipeline.h"
#include "strategy.h"

/* --- parameter units ----------------------------------------------------------------- */

/* A tensor rank's dimensions among t (t = 1: the whole model). */
typedef struct aa_tp_dims {
  int tp;      /* ranks in the tensor group */
  int C;       /* d_model, whole on every rank */
  int NH, Cl;  /* the rank's heads and their total width: n_head / t, d_model / t */
  int F;       /* the rank's MLP columns: d_ff / t */
  int V;       /* the whole vocabulary */
  int Vl;      /* rows of each rank's vocabulary slice: ceil(V / t) */
  int llama;   /* the llama family (spec.h): no biases, RMSNorm, SwiGLU, untied head */
  int qkvb;    /* llama with qkv_bias: the rank's q|k|v rows have biases (QKV of them) */
  int HS;      /* head size d_model / n_head */
  int NKV, KVl; /* the rank's key/value heads and their width: n_kv_head / t, that times HS (gpt2: NH, Cl) */
  int QKV;     /* the width of the rank's q|k|v rows: Cl + 2 KVl (gpt2: 3 Cl) */
  int FH;      /* the width of the MLP's first layer: F (gpt2), 2F (llama: gate|up) */
  int Fe;      /* the width of the rank's share of every MoE expert: d_ff_expert / aa_sizes_etp */
} aa_tp_dims_t;
/* a's dimensions on one of tp tensor ranks (tp must divide n_head, d_ff
 * and, for llama, n_kv_head, as aa_strategy_resolve checks). */
void aa_sizes_tp(const aa_arch_t *a, int tp, aa_tp_dims_t *d);
/* The tensor ranks each MoE expert is split over on one of tp tensor
 * ranks: tp when a's moe.etp (the strategy's expert_tensor_parallel_size,
 * spec.h) is above 1 and tp > 1, else 1. Under that split every expert's
 * and shared expert's w13 keeps d_ff_expert / tp rows of each of its w1
 * and w3 halves (column-parallel) and w2 as many columns (row-parallel);
 * the router and the shared experts' gate stay whole. At tp 1 (the whole
 * model of a checkpoint) the experts are whole whatever moe.etp says. */
int aa_sizes_etp(const aa_arch_t *a, int tp);
/* a with s's expert_tensor_parallel_size (s->etp) in its moe.etp: a itself
 * when they agree, else *copy, filled. Every function here that takes a
 * strategy applies it; the others read a->moe.etp. */
const aa_arch_t *aa_sizes_set_etp(aa_arch_t *copy, const aa_arch_t *a, const aa_strategy_t *s);
/* The vocabulary rows [*lo, *lo + *valid) tensor rank r of tp holds, as
 * rows 0..valid-1 of its slice of Vl rows (valid may be 0). */
void aa_sizes_vocab_rows(const aa_arch_t *a, int tp, int r, int *lo, int *valid);

/* The parameters split into units, contiguous slices of the model's
 * layer-major flat buffer (engine/model.h) that data parallelism reduces
 * and ZeRO shards one at a time: unit 0 = wte|wpe ((Vl + T) C elements),
 * unit 1 + l = block l (4 C Cl + 2 F C + 6C + 3Cl + F, with the rank's Cl
 * and F of tp; at tp 1 4C^2 + 2FC + 9C + F), unit n_layer + 1 = lnf (2C). */
int aa_sizes_units(const aa_arch_t *a);
size_t aa_sizes_unit_numel(const aa_arch_t *a, int tp, int u);
/* The same on a rank of an expert group of ep (strategy.h s->ep; 0 or 1:
 * none): an MoE block holds E / ep of its E routed experts (the router and
 * the shared experts whole). The functions without _ep are ep 1. */
size_t aa_sizes_unit_numel_ep(const aa_arch_t *a, int tp, int ep, int u);
/* The parameters one of tp tensor ranks holds: the sum of its units. */
size_t aa_sizes_params(const aa_arch_t *a, int tp);
/* The same on pipeline place pp (NULL: the whole model): unit u's
 * elements if pp holds it, else 0, and their sum. */
size_t aa_sizes_unit_held(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, int u);
size_t aa_sizes_params_held(const aa_arch_t *a, int tp, const aa_pp_place_t *pp);
size_t aa_sizes_params_held_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp);

/* A unit's pieces: the runs of its tensors that one group holds, which
 * ZeRO reduces, shards and gathers each over its own group
 * (engine/optim.h). Under expert parallelism (ep > 1) an MoE block has
 * two or three: its dense head (ln1.w .. router.w), its expert slices (the
 * rank's E / ep experts' w13 and w2, expert = 1: held by the dp·cp / ep
 * ranks of its expert-data group) and, with shared experts, its dense
 * tail. Any other unit, and every unit at ep 1, is one dense piece (empty
 * where pp does not hold the unit). off is from the unit's first element;
 * the pieces are in layout order and cover the unit. Returns how many. */
#define AA_SIZES_PIECES_MAX 3
typedef struct aa_sizes_piece {
  size_t off, n;
  int expert;
} aa_sizes_piece_t;
int aa_sizes_unit_pieces(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, int u,
                         aa_sizes_piece_t out[AA_SIZES_PIECES_MAX]);
/* The ranks ZeRO shards a piece over, for dp·cp replicas: all of them for
 * a dense piece, the expert-data group's dp·cp / ep for an expert slice. */
int aa_sizes_piece_ranks(const aa_sizes_piece_t *p, int replicas, int ep);

/* The ZeRO stage a data group of dp ranks runs for a strategy's stage
 * `zero`: over a group of one there is nothing to shard, so stage 0. */
int aa_sizes_zero_stage(int zero, int dp);

/* ZeRO over dp ranks pads a unit of n elements to dp * c and gives each
 * rank one chunk of c = ceil(n / dp) elements. */
size_t aa_sizes_chunk(size_t n, int dp);

/* The ranks that hold the same slice of the model as a rank of s, over
 * which its gradients are averaged and ZeRO shards: the data group times
 * the context group (Megatron's data-parallel group under context
 * parallelism; engine/mesh.h's replicas), dp x cp. */
int aa_sizes_replicas(const aa_strategy_t *s);

/* The tokens of one micro-batch a rank of s computes on: micro_batch x
 * seq_len / cp (under context parallelism its two chunks of each
 * sequence). */
int64_t aa_sizes_rank_tokens(const aa_arch_t *a, const aa_strategy_t *s);

/* --- state: parameters, gradients, optimizer ---------------------------------------------- */

/* One flat buffer: numel elements of dtype, accounted under kind; numel 0
 * means the buffer is not allocated. */
typedef struct aa_buf_size {
  size_t numel;
  aa_dtype_t dtype;
  aa_mem_kind_t kind;
} aa_buf_size_t;

/* The model's own flat buffers (aa_gpt_create) under amp (AA_F32, AA_BF16
 * or AA_F16) for a trainer at ZeRO stage `zero` (0 over a group of one):
 * the fp32 parameters (under amp the master weights, optimizer state)
 * unless the trainer shards them (from stage 1 under amp, 3 in fp32), the
 * fp32 gradients below stage 2, and under amp the 16-bit copy below
 * stage 3. */
typedef struct aa_model_sizes {
  aa_buf_size_t params, grads, params16;
} aa_model_sizes_t;
void aa_sizes_model(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                    aa_model_sizes_t *out);
void aa_sizes_model_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                       aa_model_sizes_t *out);

/* What ZeRO stage `zero` over a data group of dp ranks adds to one of tp
 * tensor ranks (aa_zero_init; see engine/optim.h for what each buffer is
 * for). shard is S, the sum of the pieces' chunks (aa_sizes_unit_pieces:
 * at ep 1 the units'; an expert slice's chunked over the dp / ep ranks of
 * its expert-data group). A unit's padded extent is where its last
 * piece's padded chunks end (dp * c at ep 1). moment is each of
 * AdamW's two moments: the whole model at stage 0, S from stage 1. Scratch
 * slots (gunit, punit) are indexed 0 = wte|wpe, 1 = a block, 2 = lnf, each
 * sized for its largest padded unit, except that under an untied head
 * (llama) slot 2's gradients use slot 0's buffer (gslot), sized for the
 * larger; punit16, where a 16-bit unit lands before it is widened into its
 * slot, is one buffer of the largest padded extent (it is free again as
 * soon as the unit is widened), or none where it lands in the blocks'
 * gradient slot (punit16_in_grads). padded, where stages 1-2 gather the
 * updated parameters a piece at a time, holds the largest padded piece
 * and is allocated at stage 1 only: at stage 2 it is the first gradient
 * slot that large (padded_slot), which holds nothing between the backward
 * and the next micro-batch. scalars carry host values through the group
 * and exist only when there is a group to reduce over (dp > 1). */
typedef struct aa_zero_sizes {
  size_t shard;
  aa_buf_size_t moment, gshard, master, pshard;
  aa_buf_size_t piece, padded, scalars;
  aa_buf_size_t gunit[3], punit[3], punit16;
  int gslot[3];    /* the gunit buffer slot k's gradients use: k, or for an untied head's slot 2, 0 */
  int padded_slot; /* stage 2: the gunit buffer that serves as padded, -1 otherwise */
  int punit16_in_grads; /* amp, stage 3: the 16-bit units land in gunit[1], idle during every gather
                           (punit16 not allocated) */
} aa_zero_sizes_t;
void aa_sizes_zero(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, aa_dtype_t amp, int zero, int dp,
                   aa_zero_sizes_t *out);
void aa_sizes_zero_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                      int dp, aa_zero_sizes_t *out);

/* LoRA (spec.h aa_lora_t, a->lora.r > 0): what a rank holds instead of
 * aa_sizes_model's and aa_sizes_zero's buffers. The base is frozen: held
 * once, in the storage precision (the amp type, or fp32), with no fp32
 * master, no gradient and no optimizer state, and not sharded by ZeRO; the
 * adapters (A and B of every target of the rank's blocks, its tensor
 * slice: aa_lora_block_numel) are the trainable state, fp32, which ZeRO
 * shards over the `replicas` ranks (engine/lora.h): the moments from
 * stage 1, the gradient from 2, the parameters at 3. The adapters' flat
 * vector of n elements is cut into `replicas` equal slices of
 * floor(n / replicas) and a tail of n mod replicas that every rank holds,
 * so the collectives need no padding: a shard is slice + tail. The
 * forward and backward read and write the whole adapters: from stage 2
 * the backward's gradient, and at 3 the adapters it reads, are whole
 * copies in the workspace kind beside the shards. */
typedef struct aa_lora_sizes {
  size_t adapters;             /* the adapters' elements the rank holds */
  size_t shard;                /* the rank's slice + tail (ZeRO from stage 1), else adapters */
  aa_buf_size_t base;          /* params: the frozen base, every tensor the rank holds */
  aa_buf_size_t params, grads; /* the whole adapters and their gradient (model.h lora, lora_grads):
                                  params and grads, or workspace at stage 3 and from stage 2 */
  aa_buf_size_t moment;        /* optim: each of AdamW's two moments (or their shard) */
  aa_buf_size_t gshard, pshard; /* grads from stage 2, params at 3: the shard's (else empty) */
} aa_lora_sizes_t;
void aa_sizes_lora(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                   int replicas, aa_lora_sizes_t *out);

/* The scratch slot of unit u (0 wte|wpe, 1 the blocks, 2 lnf). */
int aa_sizes_slot(const aa_arch_t *a, int u);

/* --- activations and workspace -------------------------------------------------------- */

/* A block's activation fields on a rank, (tokens, width): ln1 out (C),
 * qkv (3Cl), attention output (Cl), residual after attention (C), ln2 out
 * (C), fc out = GELU input (F), GELU out (F), block output (C), with the
 * rank's Cl and F (aa_tp_dims_t). The four of width C (the residual stream
 * and the LayerNorm outputs) hold the rank's B T / tp tokens under
 * sequence parallelism, all B T tokens otherwise; the others always all. */
typedef enum {
  AA_ACT_LN1,
  AA_ACT_QKV,
  AA_ACT_ATTY,
  AA_ACT_RES2,
  AA_ACT_LN2,
  AA_ACT_FCH,
  AA_ACT_FCHG,
  AA_ACT_RES3,
  AA_ACT_FIELDS
} aa_act_field_t;

/* The offset of a buffer the options do not need. */
#define AA_SIZES_NONE ((size_t)-1)

/* Byte offsets of block l's kept buffers in the activation store: each
 * kept field in the storage dtype (the amp type, or fp32), and the block's
 * fp32 statistics, 4 Ns + NH N floats (N = B T tokens, Ns the rank's share
 * of the residual stream, NH its heads): ln1 mean and rstd, ln2 mean and
 * rstd, each (Ns), then the attention logsumexp (B,NH,T). What
 * the checkpointing mode drops is AA_SIZES_NONE: a fully checkpointed
 * block keeps only its output (and no statistics), a selective one all but
 * the GELU output. */
typedef struct aa_act_block {
  size_t field[AA_ACT_FIELDS];
  size_t stats;
  size_t moe; /* an MoE block's kept buffers (aa_moe_acts_t), AA_SIZES_NONE for a dense block */
} aa_act_block_t;

/* An MoE block (spec.h aa_arch_is_moe_layer) computes no SwiGLU MLP (its
 * fch and fchg fields are AA_SIZES_NONE) but keeps, fp32, at byte offsets
 * from its aa_act_block_t moe, for N = B T tokens, E experts, top-k, expert
 * width Fe (the rank's share, d_ff_expert / tp, when a's moe.etp splits the
 * experts over the tensor ranks; every rank then computes all R rows of
 * its share) and S shared experts, and R = N k permuted rows (dropless: every
 * slot has a row; with a capacity factor fewer are used, never more, so
 * N k is the bound):
 *   logits, probs (N,E)         the router's
 *   xp (R,C)                    the inputs in expert order
 *   h (R,2Fe), act (R,Fe)       the experts' [gate | up] and SwiGLU output
 *   yp (R,C)                    the experts' outputs (unpermute's backward weighs them)
 *   hs (S,N,2Fe), as (S,N,Fe)   the shared experts'
 * Its routing map (kernels/cpu/cpu_moe.h aa_moe_route_t: the chosen
 * experts, weights and rows, 16 N k + 4 (2E + 1) bytes) is host memory,
 * route_bytes a block, counted as activations (aa_act_layout_t host). They
 * are fp32 under amp too, and kept unless the block is recomputed whole
 * (full checkpointing: then in the workspace's ws_moe, one block's).
 * Under expert parallelism (ep > 1; engine/moe_dispatch.h) the experts
 * compute the rows the expert group dispatched to the rank's E / ep
 * experts: ep R rows at worst (every rank of the group routing every slot
 * here), R on average under even routing (each of the ep ranks sends R
 * rows, spread over the ep ranks). The block's buffers hold the expected
 * load with a margin, Rl = min(ep R, ceil(AA_MOE_EP_MARGIN R)) rows: h
 * (Rl,2Fe) and act (Rl,Fe) take Rl rows, and the block keeps two more,
 * after as:
 *   xl (Rl,C)                   the rows received, sorted by local expert
 *   yl (Rl,C)                   the local experts' outputs, before combine
 * A step whose routing sends a rank more than Rl rows is still computed
 * whole (dropless): the dispatcher grows an overflow for that block's local
 * rows and their gradients, 4C + 3Fe floats a row, charged as activations
 * (moe_dispatch.h), so a skewed router costs more than this predicts and
 * the run's accounted peak says by how much. Its dispatcher's arrays
 * (counts and offsets, 4 (3E + E / ep + 3) + 16 E + 32 ep bytes) are host
 * memory, in route_bytes. */
/* The margin over even routing a rank's local-row buffers hold under
 * expert parallelism: 1.25, the capacity factor Switch Transformer trains
 * with (Fedus et al. 2022, section 2.2 and table 1) and Megatron's
 * examples pass as moe_expert_capacity_factor. A rank's load is the sum of
 * its E / ep experts' loads over ep sources, so it spreads less than one
 * expert's, and the load-balancing loss pulls routing toward even. */
#define AA_MOE_EP_MARGIN 1.25
typedef struct aa_moe_acts {
  size_t logits, probs, xp, h, act, yp, hs, as;
  size_t xl, yl;      /* ep > 1 only: AA_SIZES_NONE at ep 1 */
  size_t rows;        /* Rl: the rows the block's buffers hold for the rank's experts (R at ep 1) */
  size_t bytes;       /* the block's kept MoE buffers, from logits */
  size_t route_bytes; /* its routing map (and dispatcher), host memory */
} aa_moe_acts_t;
void aa_sizes_moe_acts(const aa_arch_t *a, size_t N, int ep, aa_moe_acts_t *out);

/* The two allocations of a micro-batch and the byte offset of each buffer
 * in them (AA_SIZES_NONE when the options do not need it). Every buffer
 * starts on a 64-byte boundary and takes a whole number of 64-byte slices.
 * N = B T tokens; Ns = N / tp under sequence parallelism, else N; C, Cl,
 * F, Vl the rank's (aa_tp_dims_t).
 *   store      encoded (Ns,C) storage dtype; the blocks (aa_act_block_t);
 *              lnf (Ns,C), lnf_stats 2 (Ns), logits (N,Vl), losses (N),
 *              fp32.
 *   workspace  fp32: ws_field, where a field is computed when it is not
 *              kept in place (every field but the block output under amp,
 *              else those some block does not keep); under amp ws_res (2
 *              (B,T,C), the residual stream by block parity) and, below
 *              ZeRO stage 3, the widened weights of one block (wblock), of
 *              wte|wpe (wpre) and of lnf (wpost); ws_stats for a recomputed block (full
 *              checkpointing); the activation gradients dres, dln (Ns,C),
 *              datty (N,Cl), dqkv (N,3Cl), dfch, dfch_gelu (N,F), of
 *              which dfch|dfch_gelu and dqkv|datty share one region (a
 *              block's backward is done with the MLP's before it writes
 *              the attention's).
 *              Tensor parallelism (tp > 1) adds xent ((tp + 1) 3N: the
 *              rank's cross-entropy parts and every rank's, gathered) and
 *              scalars (16; also under pipeline parallelism: host values
 *              on their way through the tensor or pipeline group); sequence parallelism full and partial
 * (N,C: a gathered LayerNorm output or residual gradient, and a row-parallel layer's output or a
 * column-parallel layer's input gradient before the reduce-scatter) and lngrad (4C: a block's LayerNorm
 * gradients before they are summed over the tensor group). Context parallelism (cp > 1; T is then the rank's
 * share of a sequence, seq_len / cp: its two chunks) adds ring (2 x 2 (N,2 KVl): two buffers, one sent while
 * the other is received, each a block of keys and values (the k|v columns of the chunk pair's q|k|v rows,
 * packed) and its gradient travelling back), ring_out ((N/2,Cl):
 * one block's attention of a chunk's queries), ring_lse (NH N/2: its logsumexp) and ring_delta (NH N: the
 * rows' dout . out of the backward). Pipeline parallelism (pp > 1) keeps a micro-batch's activations in a
 * slot from its forward to its backward: the rank's pp->slots slots of
 * slot_bytes each lie back to back from offset 0, and a slot holds one
 * micro-batch of any of its chunks: that chunk's blocks' kept buffers
 * (aa_act_block_t offsets are into the slot; the chunks' layouts overlap,
 * and slot_bytes is the largest one's) and on the last virtual stage stash ((Ns,C) fp32: the gradient of the
 * last block's output, which the head's backward computes right after the loss). A chunk's input (the
 * embedding, or what the previous stage sent) is in an input buffer instead (encoded is none). The last block
 * of every chunk keeps its output nowhere but in send ((Ns,C) storage dtype, workspace), from which it goes
 * to the next stage (or into the final LayerNorm) before anything else runs: Megatron's
 * deallocate_pipeline_outputs. lnf, lnf_stats, logits and losses are the last stage's, once. Then the
 * act_bufs input buffers ((Ns,C) storage dtype each, from act_buf) and the grad_bufs receive buffers for
 * output gradients ((Ns,C) fp32, from grad_buf). At pp 1 the offsets are into the store, which is one slot of
 * the whole model and its head. */
typedef struct aa_act_layout {
  size_t acts, workspace; /* bytes of the activation store and of the workspace */
  size_t encoded, lnf, lnf_stats, logits, losses;
  size_t slot_bytes;
  size_t stash, act_buf, grad_buf, send;
  size_t ws_field[AA_ACT_FIELDS], ws_res[2], ws_stats, wblock, wpre, wpost;
  size_t dres, dln, dqkv, datty, dfch, dfch_gelu;
  size_t xent, scalars, full, partial, lngrad;
  size_t ring, ring_out, ring_lse, ring_delta;
  /* MoE blocks (none in a dense model): the backward's gradients of the
   * permuted rows' inputs and outputs (R,C) each, of the routing weights
   * (N,k) and of the router logits (N,E); and the bytes of the blocks'
   * host routing maps (not in either allocation). */
  size_t moe_dxp, moe_dyp, moe_dweight, moe_dlogits;
  size_t moe_dxl, moe_dyl; /* ep > 1: the local rows' gradients (Rl,C) each; AA_SIZES_NONE at ep 1 */
  size_t moe_dx;           /* sequence parallelism: an MoE block's whole input gradient (N,C); else NONE */
  size_t ws_moe; /* one MoE block's buffers (aa_moe_acts_t) where a fully checkpointed one is recomputed */
  size_t lora;   /* LoRA (a->lora.r > 0), fp32: one target's A x and its gradient, 2 (N,r), which the
                    backward recomputes (no activation is kept for the adapters), and (N,out) for the
                    widest target's B A x and its scaled output gradient */
  size_t host;
} aa_act_layout_t;

/* How a micro-batch is laid out on a rank: B sequences of T tokens on one
 * of tp tensor ranks (sp: with sequence parallelism, tp dividing B T),
 * under amp and checkpointing ckpt (ckpt_layers: AA_CKPT_FULL for the
 * first k blocks only, 0 = all). */
typedef struct aa_act_shape {
  int B, T, tp, sp;
  int cp; /* the context group's size (1 or 0: none); T is then the rank's seq_len / cp */
  int ep; /* the expert group's size (1 or 0: none; aa_moe_acts_t) */
  int zero; /* the ZeRO stage the trainer runs (aa_sizes_zero_stage): from 3 the parameters come
               gathered in fp32 (aa_zero_sizes_t punit), so no widened copy of them is kept */
  aa_dtype_t amp;
  aa_ckpt_mode_t ckpt;
  int ckpt_layers;
  const aa_pp_place_t *pipe; /* the rank's pipeline place (borrowed); NULL = the whole model */
} aa_act_shape_t;

/* The layout of a micro-batch of shape *sh into *out, and each block's
 * part into blocks[0..n_layer) when blocks is not NULL. */
void aa_sizes_acts(const aa_arch_t *a, const aa_act_shape_t *sh, aa_act_layout_t *out, aa_act_block_t *blocks);

/* Elements of field f of one block on a rank of shape *sh. */
size_t aa_sizes_field_numel(const aa_arch_t *a, const aa_act_shape_t *sh, aa_act_field_t f);

/* Whether checkpointing recomputes block l whole (keeping only its output). */
int aa_sizes_block_full(aa_ckpt_mode_t ckpt, int ckpt_layers, int l);

/* --- one rank -------------------------------------------------------------------------- */

/* Bytes one rank of resolved strategy s allocates by memory kind, for
 * sequences of a->seq_len tokens: the model's buffers (its tensor slice of
 * s->tp), ZeRO over the data group (s->zero over s->dp ranks; a group of
 * one runs stage 0), and the activations and workspace of one
 * micro-batch (s->sp splitting the residual stream). Not counted: a backend's
 * own scratch (a CUDA context's cuBLAS workspace and attention scratch;
 * none on the CPU) and the token copies. Under pipeline parallelism the
 * figures are those of pipeline rank `stage` with m micro-batches a step
 * (both ignored at pp 1); AA_EINVAL for a strategy the pipeline rules
 * refuse (pipeline.h), the figures then zero. Under context parallelism a
 * rank holds seq_len / cp tokens of each sequence and ZeRO shards over the
 * data x context ranks. */
int aa_sizes_rank(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage, size_t bytes[AA_MEM_NKINDS]);
/* Its two parts, which add up to it: the model's states (parameters,
 * gradients, the optimizer and ZeRO's buffers), which depend on neither
 * the micro-batch, their count nor checkpointing, so that a planner
 * computes them once for every such variant; and the activations and
 * workspace. */
int aa_sizes_rank_states(const aa_arch_t *a, const aa_strategy_t *s, int stage, size_t bytes[AA_MEM_NKINDS]);
int aa_sizes_rank_acts(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage,
                       size_t bytes[AA_MEM_NKINDS]);

#endif
