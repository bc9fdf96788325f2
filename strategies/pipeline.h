/* Pipeline parallelism, the arithmetic: how a strategy cuts the blocks
 * into stages, what each pipeline rank holds, and the order in which each
 * rank runs its forwards, backwards, sends and receives for a schedule.
 * Pure (no engine, no sockets): the engine follows the plan, the cost
 * model sizes the same buffers from it, and the planner may link both.
 *
 * Stages. The pp ranks of a pipeline group hold S = pp * vpp virtual
 * stages, each a contiguous range of blocks; virtual stage k sits on
 * pipeline rank k % pp as its chunk k / pp (Megatron's interleaving; vpp
 * = 1: one chunk, stage k on rank k). Virtual stage 0 also holds the
 * embedding (wte|wpe), the last one the final LayerNorm and the head. The
 * head is tied to wte, so the rank holding the head keeps its own copy of
 * wte|wpe; the two copies get the same (summed) gradient each step
 * (Megatron's embedding group) and so never drift.
 *
 * Plan. Each rank's list of operations is built by simulating the
 * schedule (a forward costs 1, a backward 2; a transfer is instant): the
 * computations run in the schedule's order as soon as their inputs exist,
 * each output is sent the moment it is computed and received the moment
 * it is sent, into a receive buffer. Every rank's sends and receives then
 * follow one global order, so blocking point-to-point calls (NCCL's, the
 * shm group's) can never wait on each other in a cycle, whatever the real
 * timings: the earliest unfinished transfer always has both its ranks
 * ready for it. */
#ifndef AA_PIPELINE_H
#define AA_PIPELINE_H

#include "../common/spec.h"
#include "strategy.h"

/* The most virtual stages one rank holds (vpp). */
#define AA_PP_CHUNKS_MAX 16

/* Virtual stages of s: pp * vpp (vpp 0 read as 1). */
int aa_pp_stages(const aa_strategy_t *s);

/* The block boundaries of s's virtual stages into bounds[0..S] (S =
 * aa_pp_stages(s)): virtual stage k holds blocks [bounds[k], bounds[k+1]).
 * Checks the pipeline rules and says which failed (AA_EINVAL): S at most
 * n_layer (every stage at least one block), vpp at most AA_PP_CHUNKS_MAX,
 * vpp > 1 only with the interleaved schedule (and the interleaved schedule
 * only with vpp > 1), custom boundaries (s->n_bounds = S + 1) from 0 to
 * n_layer, strictly increasing. pp = 1 gives the one stage [0, n_layer). */
int aa_pp_bounds(const aa_arch_t *a, const aa_strategy_t *s, int bounds[AA_STRATEGY_STAGES_MAX + 1]);

/* What pipeline rank `stage` of s holds, and the buffers its plan needs
 * for m micro-batches a step. */
typedef struct aa_pp_place {
  int pp, vpp, stage;
  int lo[AA_PP_CHUNKS_MAX], hi[AA_PP_CHUNKS_MAX]; /* chunk c's blocks [lo, hi): virtual stage c pp + stage */
  int first, last;   /* holds virtual stage 0 (the embedding) / S - 1 (final LayerNorm, head, wte copy) */
  int slots;     /* micro-batches the rank keeps activations for at once (forward to backward), whatever
                    their chunk: one pool of slots, each as large as the largest chunk needs */
  int act_bufs;  /* chunk inputs held at once (from their receive, or the embedding, to their backward) */
  int grad_bufs; /* output gradients held at once (from their receive to their backward) */
} aa_pp_place_t;

/* Fills *out for rank `stage` of s's pipeline group (s resolved, pp >= 1)
 * over architecture a with m micro-batches a step. pp = 1: the whole
 * model, one slot, no receive buffers. m <= 0: the blocks only (what the
 * rank holds, as a checkpoint needs it), one slot each, no plan. Errors as
 * aa_pp_bounds, and AA_EINVAL for a schedule m does not suit. */
int aa_pp_place(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage, aa_pp_place_t *out);

/* The chunk of p holding block l, or -1. */
int aa_pp_chunk_of(const aa_pp_place_t *p, int l);

/* Whether p holds parameter unit u (sizes.h: 0 wte|wpe, 1 + l block l,
 * n_layer + 1 the final LayerNorm, and llama's head). NULL p holds
 * everything. llama's unit 0 is the first stage's only (its head is
 * untied). */
int aa_pp_holds_unit(const aa_pp_place_t *p, const aa_arch_t *a, int u);

/* Whether p's unit 0 is the head's copy of wte|wpe (held by the last
 * stage only for gpt2's tied head, pp > 1): counted once, on the first
 * stage, wherever the model is counted whole (the gradient norm, a
 * checkpoint). */
int aa_pp_unit0_is_copy(const aa_pp_place_t *p, const aa_arch_t *a);

typedef enum {
  AA_PP_RECV_ACT,  /* receive micro-batch mb's input of chunk into input buffer in */
  AA_PP_FORWARD,   /* forward of mb through chunk from input buffer in (the first virtual stage embeds
                      the tokens into it), its activations kept in slot */
  AA_PP_SEND_ACT,  /* send the forward's output to peer */
  AA_PP_RECV_GRAD, /* receive the gradient of chunk's output for mb into gradient buffer gin */
  AA_PP_BACKWARD,  /* backward of mb through chunk (input in, slot); output gradient from gin (-1 on
                      the last virtual stage: the slot's own, from the loss) */
  AA_PP_SEND_GRAD  /* send the backward's input gradient to peer */
} aa_pp_op_kind_t;

typedef struct aa_pp_op {
  int kind, chunk, mb;
  int slot, in, gin; /* -1 where the operation has none */
  int peer;          /* sends and receives: the pipeline rank at the other end */
} aa_pp_op_t;

/* The plan of a schedule over pp >= 2 ranks with vpp chunks each and m
 * micro-batches. ops[r][0..n_ops[r]) is rank r's list. The figures are the
 * simulation's, in its units (a forward 1, a backward 2, per chunk). */
typedef struct aa_pp_plan {
  int pp, vpp, m;
  int *n_ops;
  aa_pp_op_t **ops;
  int *slots;                     /* [rank] */
  int *act_bufs, *grad_bufs;      /* [rank] */
  double span;                    /* the step's simulated length */
  double *busy;                   /* [rank] computing time within it */
} aa_pp_plan_t;

/* Builds the plan (owned by *out; aa_pp_plan_free). AA_EINVAL when the
 * schedule does not suit (the interleaved one needs m a multiple of pp and
 * vpp >= 2; the others vpp 1), AA_ENOMEM. */
int aa_pp_plan(aa_pp_schedule_t sched, int pp, int vpp, int m, aa_pp_plan_t *out);
void aa_pp_plan_free(aa_pp_plan_t *p);

/* The predicted bubble, the share of a step a pipeline rank waits:
 * (pp - 1) / (m + pp - 1). The interleaved schedule divides the bubble's
 * time by vpp (Narayanan et al. 2021, each chunk's forward and backward
 * take 1/vpp of a stage's), so its share is (pp - 1) / (vpp m + pp - 1).
 * 0 at pp = 1. */
double aa_pp_bubble(aa_pp_schedule_t sched, int pp, int vpp, int m);

/* "1f1b", "gpipe", "interleaved"; "?" for another value. */
const char *aa_pp_schedule_name(aa_pp_schedule_t s);
/* "uniform", "parameters", "custom"; "?" for another value. */
const char *aa_pp_partition_name(aa_pp_partition_t p);

#endif
