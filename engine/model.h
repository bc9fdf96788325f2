/* GPT-2-style decoder on the backend op table, and the llama family.
 *
 * Parameters, gradients and optimizer state each live in one flat buffer;
 * a table of tensor descriptors gives each tensor's offset. The layout is
 * layer-major so that a transformer block's parameters are one contiguous
 * slice (ZeRO-3 gathers a block at a time; pipeline stages own a range):
 *
 *   wte (V,C) | wpe (T,C) |
 *   for each layer l:
 *     ln1.w (C) | ln1.b (C) | qkv.w (3C,C) | qkv.b (3C) | proj.w (C,C) | proj.b (C) |
 *     ln2.w (C) | ln2.b (C) | fc.w (F,C) | fc.b (F) | fcproj.w (C,F) | fcproj.b (C)
 *   lnf.w (C) | lnf.b (C)
 *
 * The output projection is tied to wte. Loss is the mean token
 * cross-entropy.
 *
 * The llama family (spec.h aa_arch_is_llama) is the same machinery with
 * other tensors and ops: RMSNorm (weight only, arch.norm_eps) for both
 * norms and the final one, q|k|v with n_kv_head key/value heads
 * (grouped-query attention) and rotary position embeddings applied to q
 * and k after the projection (HF's rotate_half, arch.rope_theta), a SwiGLU
 * MLP ([gate | up] from one GEMM, down back), no biases (but q/k/v's under qkv_bias), no position
 * table and an untied head:
 *
 *   wte (V,C) |
 *   for each layer l:
 *     ln1.w (C) | q.w (NH hs,C) | k.w (NKV hs,C) | v.w (NKV hs,C) |
 *     [q.b (NH hs) | k.b (NKV hs) | v.b (NKV hs)] | proj.w (C,C) |
 *     ln2.w (C) | gate.w (F,C) | up.w (F,C) | down.w (C,F)
 *   lnf.w (C) | head.w (V,C)
 *
 * with the bracketed q/k/v biases only under arch.qkv_bias (Qwen2; split
 * between tensor ranks with their rows, as the weights are).
 *
 * Its last unit is lnf.w|head.w, so a last pipeline stage holds no copy
 * of wte and there is no embedding group. Tensor parallelism splits the
 * key/value heads as it splits the query heads: t must divide n_kv_head
 * (kv heads are not replicated across tensor ranks); head.w is
 * vocabulary-parallel like wte. Checkpointing "selective" drops the SwiGLU
 * output (recomputed from [gate | up]).
 *
 * Mixture of experts (a llama with a spec "moe" object; issue 33): in
 * every MoE block (spec.h aa_arch_is_moe_layer) Mixtral's sparse MoE block
 * (kernels/cpu/cpu_moe.h) replaces the SwiGLU MLP on the second RMSNorm's
 * output, and the block's tensors after ln2.w are
 *     router.w (E,C) | experts.w13 (E 2Fe,C) | experts.w2 (E C,Fe) |
 *     shared.w13 (S 2Fe,C) | shared.w2 (S C,Fe) |    (the shared ones if S > 0)
 *     shared.gate (1,C)                               (moe.shared_expert_gate)
 * in the block's unit, so checkpoints, ZeRO and the data-parallel
 * all-reduce take them as they take dense weights (experts replicated on
 * every rank). Each MoE block's aux and z losses (spec coefficients) are
 * added to the loss and backpropagated; its routing map of the forward
 * is kept for the backward (aa_gpt moe_*, routes). An MoE block
 * computes and keeps its buffers in fp32 (under amp from its rounded
 * input and the 16-bit weights, its output and input gradient rounded
 * like every block's); selective checkpointing keeps them all, full
 * recomputes them in the workspace with the same routing. Computed
 * through the backend's MoE table (kernels/moe_ops.h): on one process,
 * data, expert, pipeline or tensor parallel, the dispatcher's rows in the
 * backend's memory (aa_moe_dispatch_backend); on CUDA not Qwen-MoE's gated
 * shared experts (no CUDA op). aa_gpt_create refuses those, and context
 * parallelism, for an MoE model by name. A pipeline stage routes each micro-batch in
 * flight into its slot's routing map (route_sets). Under tensor parallelism the router and experts are whole
 * on every tensor rank (Megatron's expert_tensor_parallel_size 1), which routes the same tokens (gathered
 * first under sequence parallelism, its own rows of the output kept) and
 * computes the same outputs: no collective of its own. With opts.etp = tp
 * (Megatron's expert_tensor_parallel_size = tp) each expert and shared
 * expert is cut as a dense SwiGLU MLP is under tensor parallelism: w13 keeps
 * Fe / tp rows of each of its w1 and w3 halves, w2 as many columns
 * (strategies/sizes.h aa_sizes_etp), so each tensor rank computes a partial
 * output of the rows it routes (all of them: the router stays whole and
 * routes the same tokens on every tensor rank), which the group sums (an
 * all-reduce, under sequence parallelism the reduce-scatter that hands
 * each rank its rows). Backward: the input gradient of the experts and
 * shared experts is summed over the group (under sequence parallelism a
 * reduce-scatter of each rank's rows) before the router's (the same on
 * every rank) is added, and so are the routing weights' gradient and
 * the shared experts' gate's (each rank's comes from its partial
 * outputs): the router and the gate, whole, stay identical on every
 * tensor rank with no reduction of their weight gradients. Expert parallelism (opts.expert, a group of ep
 * ranks): each rank holds experts [ep_rank E / ep, (ep_rank + 1) E / ep) of every MoE block (experts.w13 and
 * experts.w2 are row slices of the whole tensors); it routes its own tokens over all E experts, the
 * dispatcher (moe_dispatch.h) sends each kept row to the rank holding its expert and the outputs back, and
 * the backward moves the rows' gradients the same way in reverse.
 *
 * Mixed precision (opts.amp = bf16/fp16): the forward computes each op in
 * fp32 and rounds its output to the 16-bit type before anything consumes it,
 * so the numbers are those of 16-bit tensors; kept activations are stored in
 * 16 bits. Activation gradients are rounded the same way (so fp16 overflow
 * and underflow really happen and loss scaling matters); parameter
 * gradients accumulate in fp32. LayerNorm statistics, the final LayerNorm
 * output and the logits stay fp32 (the loss needs them).
 *
 * Backends: every buffer (parameters, gradients, optimizer state, the
 * 16-bit copy, activations, workspace, the token copies) is backend memory,
 * allocated through the op table's alloc: host memory on the CPU, device
 * memory on CUDA. The host reaches it only through the table's memset0,
 * upload, download and sync, so this file is one code path for both; on the
 * CPU those are memset/memcpy and results are what they always were. The
 * functions below take and return host values (token ids, the loss) and
 * report a backend failure (a CUDA fault, an allocation that failed) as an
 * error code.
 *
 * Tensor parallelism (opts.tensor, a group of t ranks; Megatron's layers):
 * each rank holds n_head / t heads of qkv and d_ff / t columns of fc
 * (column-parallel: their rows and biases split), the matching columns of
 * proj and fcproj (row-parallel: each rank's output is a partial sum, the
 * bias enters once, through rank 0's), and ceil(V / t) rows of wte
 * (vocabulary-parallel embedding and tied head; the last ranks' slices end
 * in padding rows that stay zero and that no token or loss reaches).
 * LayerNorms, the position table and the row-parallel biases are whole on
 * every rank. The collectives are the conjugate pairs: the input of a
 * column-parallel layer is the same on every rank (identity forward) and
 * its input gradient is all-reduced (backward); a row-parallel layer's
 * output is all-reduced (forward) and its output gradient is the same on
 * every rank (identity backward); the embedding is all-reduced as well.
 * The cross-entropy never gathers the (B,T,V) logits: each rank sends,
 * per token, the max and sum-exp of its slice and its target logit (an
 * all-gather of 3 floats a token), and every rank derives the same loss.
 * With sequence parallelism (opts.sp) the residual stream and the
 * LayerNorms hold only the rank's B T / t tokens: the all-reduces become
 * an all-gather before each column-parallel layer (and the head) and a
 * reduce-scatter after each row-parallel one (and the embedding), the
 * backward their conjugates, and the LayerNorms' gradients, computed from
 * the rank's tokens only, are summed over the group. Every collective is
 * fp32, so a tensor-parallel run differs from one process only in the
 * order of its sums. The tensor table describes the rank's slice; each
 * tensor also says where its slice lies in the whole model's layout (the
 * one process's, which checkpoints and initialisation use).
 *
 * Pipeline parallelism (opts.pipe, a rank's place of strategies/pipeline.h)
 * keeps only the rank's units (its blocks; wte|wpe on the first and the
 * last stage, which holds a copy for the tied head; lnf on the last); the
 * trainer runs a chunk's passes through aa_gpt_stage_forward/backward,
 * one micro-batch in a slot at a time, and moves activations and
 * gradients between stages itself (engine/train.c).
 *
 * Context parallelism (opts.context, a group of c ranks; Megatron's
 * context parallel with its load balancing): every sequence of seq_len
 * tokens is cut into 2c chunks and the rank at place r of the group holds
 * chunks r and 2c-1-r, so each rank's causal attention costs the same. The
 * model is built for T = seq_len / c tokens a sequence, and its B T
 * tokens come chunk-major: the first chunk of every sequence, then the
 * second (aa_gpt_cp_positions); every per-token op is indifferent to the
 * order. Positions follow each token's place in the whole sequence (gpt2's
 * position table, llama's rotation). Attention runs as a ring (kernels/
 * ops.h attention_block_*): the rank's queries against its own chunks,
 * then c-1 times the next block of keys and values from the previous rank
 * (sent on to the next one), merged through the log-sum-exp; the backward
 * sends the same blocks around again with the gradient of their keys and
 * values, which ends at its owner. Each rank's loss is the mean over its
 * own tokens (all ranks hold as many), so the trainer's mean over data x
 * context ranks is the whole batch's.
 *
 * Activation checkpointing (opts.ckpt) decides what a block keeps:
 *   none       every intermediate;
 *   selective  all but the attention probabilities (B,NH,T,T) and the GELU
 *              output, which backward recomputes from qkv and the GELU input;
 *   full       only the block output (the next block's input); backward
 *              recomputes the block. ckpt_layers = k limits this to blocks < k.
 * Kernels are deterministic, so recomputation reproduces the forward values
 * bit for bit and gradients do not depend on the mode. */
#ifndef AA_MODEL_H
#define AA_MODEL_H

#include "../comm/comm.h"
#include "../common/aa.h"
#include "../common/mem.h"
#include "../common/spec.h"
#include "../kernels/cpu/cpu_moe.h"
#include "../kernels/ops.h"
#include "../strategies/pipeline.h"
#include "../strategies/sizes.h"
#include "../strategies/strategy.h"
#include "moe_dispatch.h"

#define AA_TENSORS_PER_LAYER 12      /* gpt2 */
#define AA_LLAMA_TENSORS_PER_LAYER 9 /* llama */

typedef struct aa_tensor_desc {
  char name[32]; /* "wte", "h3.qkv.w", "lnf.b", ... */
  size_t offset; /* in elements, into the flat buffer */
  size_t numel;
  int ndim;      /* 1 or 2 */
  int shape[2];  /* the rank's slice */
  int layer;     /* block index, -1 for wte/wpe/lnf */
  int unit;      /* the parameter unit it lies in (aa_gpt_unit): 0 wte|wpe, 1 + layer, n_layer + 1 lnf */
  int decay;     /* 1 if AdamW weight decay applies (2-D weights) */
  /* Where the slice lies in the whole model's flat buffer (tp 1): runs
   * runs of run_n elements; run k is local elements [offset + k *
   * run_lstride, + run_n) and whole-model elements [run_global + k *
   * run_gstride, + run_n). The whole tensor (gnumel elements) starts at
   * goffset there. One run for a whole or row-split tensor (none for a
   * vocabulary slice of padding only), three for qkv (its q, k and v
   * heads), one per row for a column split. */
  size_t goffset, gnumel;
  int runs;
  size_t run_n, run_lstride, run_global, run_gstride;
  int replicated; /* the same on every tensor rank (whole): its gradient too */
  int copy;       /* the last pipeline stage's copy of wte|wpe for the tied head: the first stage's
                     tensor, counted there (the gradient norm, a checkpoint) */
  int expert;     /* ep > 1: a slice of an MoE block's routed experts (the rank's E / ep), which
                     differs between the ranks of an expert group: its gradient is reduced over the
                     expert-data group, and its squares summed over the expert group (optim.c) */
} aa_tensor_desc_t;

/* The tensor table of tensor rank r of tp (tp 1: the whole model) for
 * architecture a into out (aa_gpt_n_tensors(a) entries), in the
 * documented order: each tensor's slice, its offset in the rank's flat
 * buffer, and where the slice lies in the whole model's (the runs). Pure
 * arithmetic: a checkpoint saved at one tensor degree is read at another
 * through the tables of both. */
int aa_gpt_n_tensors(const aa_arch_t *a);
void aa_gpt_tensor_table(const aa_arch_t *a, int tp, int r, aa_tensor_desc_t *out);
/* The same on pipeline place pp (strategies/pipeline.h; NULL: the whole
 * model): every tensor keeps its entry, and one the rank does not hold
 * has no elements (numel 0, no runs), so the rank's flat buffer holds only
 * its units, in layout order. The last stage's wte and wpe are copies. */
void aa_gpt_tensor_table_pp(const aa_arch_t *a, int tp, int r, const aa_pp_place_t *pp, aa_tensor_desc_t *out);
/* The same for rank er of an expert group of ep (ep 1: the above): each
 * MoE block's experts.w13 and experts.w2 are row slices, experts [er E /
 * ep, (er + 1) E / ep), marked expert. */
void aa_gpt_tensor_table_ep(const aa_arch_t *a, int tp, int r, int ep, int er, const aa_pp_place_t *pp,
                            aa_tensor_desc_t *out);

/* Flat buffer of one element type in one backend's memory, accounted in a
 * memory accountant under one kind. */
typedef struct aa_flatbuf {
  aa_dtype_t dtype;
  aa_mem_kind_t kind;
  size_t numel;
  void *data;              /* backend memory */
  const aa_ops_t *ops;     /* the backend that allocated data (borrowed) */
} aa_flatbuf_t;

/* Allocates a zeroed, 64-byte-aligned buffer of n elements of dtype from
 * ops' memory into *b, accounted to kind in mem (may be NULL). Owned by b;
 * release with aa_flatbuf_free and the same mem. Fails with AA_EOOM past
 * mem's limit or when the backend is out of memory ("out of memory on
 * cuda:0: ..."); *b is untouched on failure. */
int aa_flatbuf_alloc(aa_flatbuf_t *b, const aa_ops_t *ops, aa_mem_t *mem, aa_mem_kind_t kind, aa_dtype_t dtype,
                     size_t n);
/* aa_flatbuf_alloc of the buffer strategies/sizes.h sizes in *s: nothing
 * is allocated (and 0 returned) when its count is 0. */
int aa_flatbuf_alloc_as(aa_flatbuf_t *b, const aa_ops_t *ops, aa_mem_t *mem, const aa_buf_size_t *s);
void aa_flatbuf_free(aa_flatbuf_t *b, aa_mem_t *mem);

/* Host floats x (n <= 16) replaced by op over the ranks of group c,
 * through staging (16 floats of ops' memory: NCCL reduces device
 * buffers). Over a group of one x is the result as it is and nothing is
 * staged. A collective over c. */
int aa_all_reduce_host(aa_comm_t *c, const aa_ops_t *ops, float *staging, float *x, size_t n, aa_comm_op_t op);

/* How the model is built: the single-device knobs of a strategy. */
typedef struct aa_gpt_opts {
  int zero;             /* ZeRO stage the trainer runs over a process group (engine/optim.h): the
                           model allocates no full fp32 parameters from stage 1 under amp (the 16-bit
                           copy stays) and from 3 in fp32, no gradients from 2, no 16-bit copy at 3;
                           what it lacks, the trainer provides (hooks, or writing params16) */
  aa_dtype_t amp;       /* AA_F32, or AA_BF16/AA_F16: parameters and kept activations are stored in
                           16 bits; fp32 master weights (in the optimizer's kind) and fp32 math */
  aa_ckpt_mode_t ckpt;  /* activation checkpointing */
  int ckpt_layers;      /* AA_CKPT_FULL: first k blocks only; 0 = all */
  aa_mem_t *mem;        /* accountant for every model buffer (borrowed; may be NULL) */
  aa_comm_t *tensor;    /* the tensor-parallel group (borrowed; outlives the model); NULL = tp 1 */
  int sp;               /* sequence parallelism over it (tp > 1, tp dividing B T) */
  const aa_pp_place_t *pipe; /* the rank's pipeline place (copied); NULL or pp 1 = the whole model */
  aa_comm_t *pipeline;  /* the pipeline group (borrowed; outlives the model); NULL = pp 1 */
  aa_comm_t *context;   /* the context-parallel group (borrowed; outlives the model); NULL = cp 1 */
  aa_comm_t *expert;    /* the expert group (engine/mesh.h; borrowed; outlives the model); NULL = ep 1 */
  int etp;              /* the strategy's expert_tensor_parallel_size: 0 or 1 (experts whole on every
                           tensor rank), or the tensor degree (each expert's width split over the
                           tensor ranks; the model's arch.moe.etp then says so, spec.h) */
} aa_gpt_opts_t;

/* Named views into the activation buffers. */
typedef struct aa_acts aa_acts_t;

typedef struct aa_gpt aa_gpt_t;

/* Parameter units: the contiguous slices of the flat buffer that data
 * parallelism reduces and ZeRO shards one at a time, in layout order:
 * unit 0 = wte|wpe, unit 1+l = block l, unit n_layer+1 = lnf. */
#define AA_GPT_UNIT_BLOCK(l) (1 + (l))
int aa_gpt_n_units(const aa_gpt_t *m);
/* First element (into the flat buffer) and element count of unit u. */
void aa_gpt_unit(const aa_gpt_t *m, int u, size_t *offset, size_t *numel);

/* How a data-parallel trainer takes part in the forward and backward (all
 * optional; NULL hooks = the model's own full buffers). Each returns 0 or a
 * negative code, which the forward or backward returns at once.
 *   params      before the forward or the backward reads unit u's fp32
 *               parameters: *out = where they are, laid out as in the flat
 *               buffer from the unit's first element; valid until the next
 *               params call for another unit of the same kind (the blocks
 *               share one place; wte|wpe and lnf have their own). Under
 *               amp these are the 16-bit values widened, and the model
 *               then reads neither params nor params16.
 *   grads       before the backward first adds into unit u's gradient:
 *               *out = where to accumulate (unit-relative, as above).
 *   grads_done  after the backward's last write into unit u's gradient for
 *               this micro-batch. Units finish in backward order: n_layer+1
 *               (lnf), blocks n_layer-1 .. 0, then 0 (wte|wpe, which the
 *               tied head starts first and the embedding finishes last). */
typedef struct aa_gpt_hooks {
  int (*params)(aa_gpt_t *m, int unit, float **out, void *data);
  int (*grads)(aa_gpt_t *m, int unit, float **out, void *data);
  int (*grads_done)(aa_gpt_t *m, int unit, void *data);
  void *data;
} aa_gpt_hooks_t;

struct aa_gpt {
  aa_arch_t arch;      /* the whole model's */
  const aa_ops_t *ops; /* borrowed */
  aa_gpt_opts_t opts;
  int B, T;            /* micro-batch and sequence length the activations fit */
  int tp, tp_rank;     /* the tensor group's size and this rank's place in it (1, 0 without) */
  int ep, ep_rank;     /* the expert group's size and this rank's place in it (1, 0 without) */
  int sp;              /* sequence parallelism (tp > 1 only) */
  aa_tp_dims_t d;      /* this rank's dimensions */
  int vocab_lo, vocab_valid; /* the vocabulary rows this rank holds (sizes.h aa_sizes_vocab_rows) */
  aa_pp_place_t pipe;        /* the pipeline place (pp 1: the whole model) */
  int pp;                    /* pipe.pp */
  int cp, cp_rank;           /* the context group's size and this rank's place in it (1, 0 without) */

  int n_tensors;
  aa_tensor_desc_t *tensors; /* owned, n_tensors entries */
  size_t n_params;           /* this rank's (the whole model's: aa_arch_param_count) */

  /* fp32 parameters (the master weights under amp) and fp32 gradients;
   * either may be unallocated under ZeRO (opts.zero). */
  aa_flatbuf_t params, grads; /* owned */
  /* amp only: the 16-bit copy the forward and backward compute with,
   * refreshed from params by the first forward after aa_gpt_params_changed. */
  aa_flatbuf_t params16;
  int params16_stale;
  aa_acts_t *acts;            /* owned */

  /* Last forward pass. */
  int32_t *targets; /* copy of the targets (B,T), backend memory */
  float loss;       /* mean loss of the last forward with targets */

  const aa_gpt_hooks_t *hooks; /* borrowed; NULL = none */
  size_t scratch_charged;      /* the backend's scratch counted as workspace so far (ops.h) */

  /* Mixture-of-experts blocks (none in a dense model). routes: each MoE
   * block's routing map of the last forward (owned; n_layer entries,
   * zeroed for a dense block; its arrays in backend memory, ops->moe's
   * route_alloc), which its backward reads; route_offsets: each map's E+1
   * offsets copied to host memory by the routing (n_layer (E+1) a set),
   * which size the expert GEMMs and the dispatcher's plan.
   * moe_loss: the aux and z losses of the last forward summed over the
   * MoE blocks (already in loss). moe_stats: over the MoE blocks of the
   * last forward, the fewest and the most rows any expert computed and the
   * slots dropped (the training log's). Under context parallelism both are
   * the context group's micro-batch's (the aux loss and the counts summed
   * over the group; the z-loss the rank's own, a mean the replicas average),
   * and so is a routing map's counts. moe_dloss: the derivative of the
   * training loss with respect to moe_loss in the backward under way (its
   * grad_scale). A pipeline stage keeps one routing map per activation
   * slot (its micro-batches in flight, pipe.slots; route_sets of them,
   * n_layer entries each, only its own MoE blocks allocated) and reads
   * slot moe_slot's, which the stage pass selects. */
  aa_moe_route_t *routes;
  int32_t *route_offsets;
  /* Under expert parallelism (ep > 1), each MoE block's token dispatcher
   * over opts.expert (moe_dispatch.h), whose plan the backward reuses; one
   * per routing map. */
  aa_moe_dispatch_t *dispatch;
  int route_sets, moe_slot;
  float moe_loss;
  aa_moe_stats_t moe_stats;
  float moe_dloss;

  /* LoRA (arch.lora.r > 0; see aa_gpt_lora_offset): params is the frozen
   * base (no gradient is allocated or computed for it), lora the adapters
   * (fp32, accounted as parameters) and lora_grads their gradient (fp32),
   * which the backward accumulates into; lora_scale is alpha / r. */
  aa_flatbuf_t lora, lora_grads;
  float lora_scale;
};

/* Builds the tensor table for arch and allocates parameters, gradients and
 * activations for micro-batch B and sequence length T (T <= seq_len) as
 * opts says (NULL = fp32, no checkpointing, no accounting). Parameters are
 * zero until aa_gpt_init_weights or a load. *out owns all memory; free with
 * aa_gpt_free. Fails with AA_EOOM when the accountant's limit is reached,
 * and with AA_EINVAL for a seq_len past AA_SEQ_LEN_ENGINE_MAX (a model to
 * plan, not to build: its activations are indexed with int). */
int aa_gpt_create(aa_gpt_t **out, const aa_arch_t *arch, const aa_ops_t *ops, int B, int T,
                  const aa_gpt_opts_t *opts);
void aa_gpt_free(aa_gpt_t *m);

/* GPT-2 initialisation from seed: weights N(0, 0.02), the two residual
 * projections (proj.w, fcproj.w) N(0, 0.02/sqrt(2*n_layer)), biases 0,
 * LayerNorm weights 1. The values are drawn on the host and uploaded, so
 * every backend starts from the same bits. Returns 0 or a negative code
 * (host memory, the upload). */
int aa_gpt_init_weights(aa_gpt_t *m, uint64_t seed);

/* The initialisation of aa_gpt_init_weights handed to put tensor by tensor
 * (host values of n elements for the flat-buffer offset), for a trainer
 * that keeps only a shard of the parameters. */
typedef int (*aa_gpt_put_fn)(size_t offset, const float *src, size_t n, void *data);
int aa_gpt_init_weights_to(const aa_gpt_t *m, uint64_t seed, aa_gpt_put_fn put, void *data);

/* Host floats x (n <= 16) summed over the tensor group (in place; nothing
 * to do at tp 1). A collective over that group. */
int aa_gpt_tensor_sum(aa_gpt_t *m, float *x, int n);

/* Host floats x (n <= 16) summed over the pipeline group (in place;
 * nothing to do at pp 1). A collective over that group. */
int aa_gpt_pipeline_sum(aa_gpt_t *m, float *x, int n);

/* Forward pass on inputs(B,T) (host memory, borrowed for the call). With
 * targets (B,T, host) computes the mean loss into m->loss and returns it via
 * *loss (if non-NULL); with targets NULL only logits are computed. Waits for
 * the backend and returns its error, if any. */
int aa_gpt_forward(aa_gpt_t *m, const int32_t *inputs, const int32_t *targets, float *loss);

/* Backward pass of the last forward (which must have had targets).
 * Accumulates into m->grads scaled by grad_scale (1/accumulation steps for
 * micro-batching, 1 otherwise). Waits for the backend and returns its
 * error, if any. */
int aa_gpt_backward(aa_gpt_t *m, float grad_scale);

/* Pipeline stages (opts.pipe with pp > 1): the passes of one chunk for
 * one micro-batch, as the plan's operations say (strategies/pipeline.h;
 * engine/train.c runs the plan and moves the tensors between stages).
 * The stage's input, its output and the gradients live in the model's
 * buffers: stage_input(in) is input buffer `in` ((Ns,C) elements of the
 * storage dtype: the amp type or fp32), where a receive puts what the
 * previous stage sent; send_buf the chunk's output after its forward (the
 * same dtype); grad_buf(gin) gradient receive buffer gin ((Ns,C) fp32);
 * stage_dinput the gradient of the chunk's input after its backward
 * ((Ns,C) fp32), valid until the next pass. Ns C = aa_gpt_stream_numel.
 *
 * stage_forward runs chunk c's forward for a micro-batch from input
 * buffer `in` (the first virtual stage embeds inputs (B,T, host) into it),
 * keeping its activations in `slot`. The last virtual stage computes the
 * loss of targets (host) into *loss and, when train is set, the head's
 * backward at once (with grad_scale as aa_gpt_backward), keeping the
 * gradient of the last block's output in the slot: the logits never wait
 * in memory for the backward. stage_backward runs chunk c's backward for
 * the micro-batch in (slot, in), from gradient buffer gin (-1 on the last
 * virtual stage: the slot's own); the first virtual stage ends with the
 * embedding's gradient. Both wait for the backend (so the group may read
 * what they wrote) and return its error, if any. */
int aa_gpt_stage_forward(aa_gpt_t *m, int c, int slot, int in, const int32_t *inputs, const int32_t *targets,
                         int train, float grad_scale, float *loss);
int aa_gpt_stage_backward(aa_gpt_t *m, int c, int slot, int in, int gin);
size_t aa_gpt_stream_numel(const aa_gpt_t *m);
void *aa_gpt_stage_input(aa_gpt_t *m, int in);
void *aa_gpt_send_buf(aa_gpt_t *m);
float *aa_gpt_grad_buf(aa_gpt_t *m, int gin);
const float *aa_gpt_stage_dinput(const aa_gpt_t *m);

/* Zeroes m->grads (enqueued on the backend; a failure surfaces at the next
 * forward, backward or sync). */
void aa_gpt_zero_grad(aa_gpt_t *m);

/* Must be called after anything writes m->params (init, load, optimizer)
 * so that the 16-bit compute copy is refreshed, or, in a model without
 * fp32 parameters (ZeRO >= 1 under amp), after the trainer wrote
 * m->params16, so that the next forward widens the weights it keeps. */
void aa_gpt_params_changed(aa_gpt_t *m);

/* Bytes the activations of one micro-batch keep for backward and the
 * workspace the model needs, for these options (the tensor group's size
 * and sp from opts->tensor and opts->sp) (what aa_gpt_create
 * allocates under AA_MEM_ACTS and AA_MEM_WORKSPACE: the layout of
 * strategies/sizes.h, which it carves). */
void aa_gpt_act_bytes(const aa_arch_t *arch, int B, int T, const aa_gpt_opts_t *opts, size_t *acts,
                      size_t *workspace);

/* Logits (B,T,V) of the last forward without targets (tensor parallel:
 * this rank's vocabulary slice, (B,T,Vl)), in backend memory
 * (read them with ops->download on a non-CPU backend); borrowed, valid until
 * the next forward. (After a forward with targets the buffer holds
 * probabilities instead.) */
const float *aa_gpt_logits(const aa_gpt_t *m);

/* Context parallelism: the global positions of the rank's two chunks of
 * every sequence, for a rank at place r of c and sequences of seq_len
 * tokens: chunk k (0 or 1) of the rank starts at position pos0[k] of its
 * sequence; each chunk is seq_len / (2c) tokens. */
void aa_gpt_cp_positions(int seq_len, int c, int r, int pos0[2]);

/* LoRA (arch.lora.r > 0; docs/model-spec.md "lora"). A model built from
 * such an architecture computes every targeted layer as W x + (alpha / r)
 * B (A x) with W frozen: its parameters (params, the tensor table) are the
 * base as always, but no gradient buffer exists and the backward computes
 * none of the base's weight gradients (the embedding's backward is
 * skipped); the adapters' gradients accumulate into lora_grads. The
 * adapters lie in m->lora block-major, each block's targets in
 * aa_lora_target_t order, each target A (r, in) then B (out, r):
 * aa_gpt_lora_offset is A's first element, B follows r in elements on.
 * Under bf16 the base is held in params16 alone (no fp32 copy), widened a
 * block at a time; the adapters stay fp32. This slice builds it on the CPU
 * backend, fp32 or bf16, at ZeRO 0 (a data- or context-parallel trainer
 * averages lora_grads over the replicas itself), with a tensor, a pipeline
 * and a context group; aa_gpt_create refuses the rest (fp16, ZeRO, cuda)
 * by name.
 *
 * A rank holds the adapters of its pipeline place's blocks, each target
 * cut as its base layer (Megatron's): a column-parallel target (q, k, v,
 * qkv, gate, up, fc) A whole and B's rows of the rank's output slice, a
 * row-parallel one (o/proj, down, fcproj) A's columns of the rank's input
 * slice and B whole (aa_lora_shape at tp). m->lora is those, block-major
 * in the same order (at tp 1 and pp 1 exactly aa_gpt_lora_offset's
 * layout); aa_gpt_lora_put and _get convert from and to the whole model's
 * layout (checkpoints, initialisation). The forward needs no collective
 * of its own; the halves every tensor rank holds whole get one gradient
 * term per rank, summed over the tensor group once a step by
 * aa_gpt_lora_reduce_grads (model.c lora_backward says why that is the
 * cheapest), after which they are the same bits on every rank. */
size_t aa_gpt_lora_offset(const aa_arch_t *a, int l, int t);
/* PEFT's initialisation from seed: A Kaiming-uniform (a = sqrt(5): U(-1 /
 * sqrt(in), 1 / sqrt(in))), B zeros; drawn on the host, uploaded. */
int aa_gpt_lora_init(aa_gpt_t *m, uint64_t seed);
/* Zeroes m->lora_grads. */
void aa_gpt_lora_zero_grad(aa_gpt_t *m);
/* The whole model's adapter count (every block, tp 1): a checkpoint's. */
size_t aa_gpt_lora_whole_numel(const aa_arch_t *a);
/* The rank's slice of whole (host, the whole model's layout; borrowed)
 * into dst (backend memory of m->lora's layout and count: m->lora, its
 * gradient, or a buffer of the optimizer's). Local, no collective. */
int aa_gpt_lora_put(aa_gpt_t *m, float *dst, const float *whole);
/* The whole model's adapters into whole (host, aa_gpt_lora_whole_numel
 * floats, every rank) from every rank's src (m->lora's layout): a
 * collective over the tensor and then the pipeline group (sums in which
 * one rank contributes each element: exact). */
int aa_gpt_lora_get(aa_gpt_t *m, const float *src, float *whole);
/* aa_gpt_lora_get from host memory: local (host, m->lora's layout and
 * count; borrowed) into whole. The same collectives. */
int aa_gpt_lora_get_host(aa_gpt_t *m, const float *local, float *whole);
/* Sums the replicated halves of lora_grads (column targets' A, row
 * targets' B) over the tensor group, packed into one collective; nothing
 * at tp 1. Once a step, after the backward passes and before the norm. */
int aa_gpt_lora_reduce_grads(aa_gpt_t *m);
/* The squared L2 norm of the whole model's adapter gradient into *out:
 * the rank's split halves summed over the tensor group, the replicated
 * ones counted once, then summed over the pipeline group (collectives over
 * both groups; at tp 1 and pp 1 the rank's buffer, in double). */
int aa_gpt_lora_grad_squares(aa_gpt_t *m, double *out);
/* The rank's share of that squared norm from g (backend, len elements):
 * the gradient's elements at [at, at + len) of m->lora's layout (a ZeRO
 * shard's piece), a replicated half's counted on tensor rank 0 only (at
 * tp 1 all of them). Local; summed over the data, tensor and pipeline
 * groups it is aa_gpt_lora_grad_squares' value (engine/lora.c). */
int aa_gpt_lora_shard_squares(aa_gpt_t *m, const float *g, size_t at, size_t len, double *out);

/* Finds a tensor by name; NULL if none. */
const aa_tensor_desc_t *aa_gpt_tensor(const aa_gpt_t *m, const char *name);

#endif
