/* The step-time model: how long one optimizer step of a strategy takes on a
 * pool, from a calibration (calib.h), and so its tokens/s. Pure
 * arithmetic; the planner ranks candidates by it, `autoaccel plan` answers
 * with it for pools not connected. Rules and their justification:
 * docs/service.md "Calibration".
 *
 * For pipeline rank r (every rank at pp 1) of strategy s, with m
 * micro-batches a step (aa_strategy_accum_steps):
 *   compute_r   = m x (the forward and backward of the ops it runs on one
 *                 micro-batch at the strategy's shapes, plus the forward a
 *                 checkpointing mode runs again, plus casts of 16-bit
 *                 storage on CPUs), each op's measured time;
 *   tensor_r    = the tensor group's collectives (cost.h), each call
 *                 latency + its ring bytes / bandwidth of that kind and
 *                 group size: on the critical path, inside the schedule;
 *   p2p_r       = the pipeline's sends, likewise;
 *   ring_r      = the context group's ring steps (sends and receives,
 *                 cost.h), likewise: the engine's ring attention waits
 *                 for each block before it computes on it, so they are
 *                 not overlapped with compute either;
 *   busy_r      = compute_r + tensor_r + p2p_r + ring_r, stretched by the bubble:
 *                 busy_r / (1 - bubble) (cost.h's aa_cost_bubble);
 *   after_r     = the optimizer (AdamW over the rank's shard) + the data
 *                 group's (dp x cp ranks, cost.h) and the embedding group's collectives (the
 *                 engine runs them after the schedule: not overlapped);
 *   step        = max over r of busy_r / (1 - bubble) + after_r.
 * tokens/s = global_batch x seq_len / step.
 *
 * An op shape the calibration lacks takes, with a profile (pool->roofline),
 * the profile's roofline time refitted to the calibration's ops of its
 * class; without one, the nearest measured shape of its
 * kind and dtype (in log of each dimension) scaled by the work ratio
 * (calib.h aa_op_work), and a kind it lacks the calibration's rate for
 * the kind's class (pool->roofline fitted without a profile); a group size it lacks takes the nearest
 * measured size of that kind, the latency scaled by (t - 1) / (t0 - 1) as a ring's steps are, the bandwidth
 * kept; a kind it lacks takes the all-reduce's. Each such stand-in is counted in the result so callers can
 * say so. CPU executors that share a host's cores compute at the measured rate times min(1, cores / (ranks x
 * threads)) relative to the measuring gang's, ranks being the gang's ranks on one host. With more rank
 * threads than cores, a pipeline rank waiting in the bubble lends its core to the others: the step is then
 * the larger of the critical path above with ops at the rate one rank gets alone, and the host's throughput
 * (every ops at the shared rate, the collectives, no bubble). Across hosts: a gang larger than one host's
 * devices (pool->host_devices) spans hosts. The planner keeps every tensor group inside a host, so the tensor
 * group's collectives take the calibration's (intra-host) lines; it keeps each context group there too when a
 * host holds whole tensor x context blocks (host_devices a multiple of tp x cp: common/axis.h
 * AA_HOST_PREFER), and then the context group's steps take those lines as
 * well (and so does the data group of dp x cp ranks at dp 1: it is the
 * context group). The data, pipeline and embedding groups, and a context
 * group the hosts cannot hold, take the inter-host lines (pool->inter, measured by a
 * gang spanning hosts on its backend, gloo on CPUs). Without inter-host
 * lines they take the intra-host ones, and each such group counts as a
 * stand-in. */
#ifndef AA_PREDICT_H
#define AA_PREDICT_H

#include "../common/spec.h"
#include "calib.h"
#include "cost.h"
#include "roofline.h"
#include "sizes.h"
#include "strategy.h"

/* The load imbalance the time model assumes under expert parallelism
 * when no run measured one: the busiest expert rank receives 1.25 times
 * the even load, Switch Transformer's training capacity factor (Fedus et
 * al. 2022, section 2.2 and table 1), the margin the dispatcher's buffers
 * hold (sizes.h AA_MOE_EP_MARGIN). docs/training-knobs.md "Load
 * imbalance". */
#define AA_PREDICT_MOE_IMBALANCE AA_MOE_EP_MARGIN

/* The pool predicted for. */
typedef struct aa_predict_pool {
  int devices;             /* >= dp x tp x pp x cp of the strategies asked about */
  int host_cores;          /* CPUs: cores of the one host the executors share; 0 = each device has its own
                              (GPUs, or CPU executors on separate hosts) */
  int threads;             /* CPUs: threads per executor; 0 = the calibration's */
  int host_devices;        /* devices one host holds; 0 = the whole pool is one host */
  const aa_calib_t *inter; /* collectives between hosts; NULL = none measured */
  /* Op and link times for what no calibration measured (roofline.h),
   * borrowed; NULL = none. With a profile, host_devices is the profile's
   * GPUs per node, the calibration may be NULL (a pool nobody measured),
   * and every group's collectives are a ring on the links its ranks span
   * under Megatron's rank order (tensor, context, data, pipeline from the
   * fastest-varying): measured lines only for groups of exactly their
   * size and side of a node. Without a profile (fitted to the calibration
   * alone) it times an op kind the calibration lacks at its class's
   * measured rate. */
  const aa_roofline_t *roofline;
  /* MoE under expert parallelism: the rows the busiest expert rank
   * receives over the mean, >= 1 (a measured run's: aa_predict_imbalance);
   * 0 = AA_PREDICT_MOE_IMBALANCE. The slowest rank sets the pace: its
   * expert GEMMs run at that many times the even rows and its all-to-alls
   * carry that many times the even bytes; everyone else waits for it. At
   * ep 1 a rank computes every expert's rows, so it changes nothing. */
  double moe_imbalance;
} aa_predict_pool_t;

typedef struct aa_predict {
  double step_s;       /* the slowest stage's step */
  double tokens_per_s; /* global_batch x seq_len / step_s */
  int stage;           /* the slowest pipeline rank */
  /* That stage's step by part, seconds; they add up to step_s: */
  double forward_s;       /* forward ops, m micro-batches (recompute not included) */
  double backward_s;      /* backward ops and the recomputed forwards */
  double tensor_comm_s;   /* the tensor group's collectives */
  double pipeline_comm_s; /* sends and receives */
  double context_comm_s;  /* the context group's ring steps */
  double expert_comm_s;   /* the expert group's all-to-alls (expert parallelism's token exchange) */
  double bubble_s;        /* the pipeline's idle share of the stretched schedule */
  double optimizer_s;     /* AdamW over the shard, and casts of the parameters */
  double data_comm_s;     /* the data, embedding and expert-data groups' collectives */
  double bubble;          /* aa_cost_bubble */
  double moe_imbalance;   /* the factor the expert GEMMs and all-to-alls were timed at: min(ep, the
                             pool's or the default); 1 without expert parallelism */
  aa_cost_mem_t mem;      /* the most loaded rank's bytes (cost.h) */
  /* Stand-ins, summed over the pipeline ranks (each rank's distinct op
   * shapes and each group's kinds, looked up once a rank): */
  int ops_estimated;   /* op shapes taken from a neighbour */
  int ops_modelled;    /* op shapes timed by the roofline (a profile's, or the calibration's class rate) */
  int links_modelled;  /* collectives timed on a profile's links */
  int links_estimated; /* collectives taken from another group size or kind, or intra-host
                          lines standing in for inter-host ones */
  bool across_hosts;   /* the gang spans hosts (pool->host_devices) */
} aa_predict_t;

/* Predicts strategy s (resolved for spec) on pool from calibration c.
 * AA_EINVAL for a strategy the pipeline rules refuse, a pool smaller than
 * its gang, or a calibration without what it needs: no op of a kind the
 * strategy runs, or no collective at all for a strategy with a group of
 * two or more (the message says to calibrate on a pool of at least two).
 * *out is written only on success. */
int aa_predict(const aa_model_spec_t *spec, const aa_strategy_t *s, const aa_calib_t *c,
               const aa_predict_pool_t *pool, aa_predict_t *out);

/* The expert load imbalance a run of arch under s measured, from its
 * `moe` statistics: the most tokens any expert got from one rank's
 * micro-batch (max_tokens) over the even N·k / E (N = micro_batch x
 * seq_len / cp tokens), at least 1. It is the router's, whatever the
 * run's ep, so a run at ep 1 informs the prediction at ep 2 or 4, which
 * takes min(ep, it) (the most a rank can receive is every source's
 * rows). A rank's load sums its E / ep experts' over ep sources, so this
 * bounds the rank's from above (exact at one expert a rank with the same
 * skew on every source). Under context parallelism max_tokens is the
 * context group's count, over its micro-batch's whole sequences. 0 when
 * there is nothing measured: no MoE layer or max_tokens < 1 (or NaN). */
double aa_predict_imbalance(const aa_arch_t *arch, const aa_strategy_t *s, double max_tokens);

/* The distinct op shapes one step of s (resolved) runs on pipeline rank
 * `stage` on a device of kind cuda (1: GPU, 0: CPU; it decides the ops'
 * dtype, fp32 on CPUs and s->amp on GPUs but fp32 for AdamW and for the
 * ring attention's blocks and gradient sum (fp32 kernels), and whether
 * 16-bit storage adds casts, CPUs only): every op of its forward,
 * backward and optimizer, at most once per (shape, dtype), into out (cap
 * entries; fwd_s and bwd_s 0), expert GEMMs at the default load imbalance
 * (AA_PREDICT_MOE_IMBALANCE). Returns how many there are (more than cap:
 * only cap written); 0 for a strategy the pipeline rules refuse. */
size_t aa_predict_ops(const aa_arch_t *arch, const aa_strategy_t *s, int stage, int cuda, aa_calib_op_t *out,
                      size_t cap);

/* What a calibration for the model measures so that every strategy of a
 * pool of up to max_devices finds its shapes: the distinct op shapes of
 * every pipeline rank of every strategy space.h enumerates for such a pool
 * (its layouts of data, tensor, sequence, pipeline and context parallelism, each
 * pipeline shape, ZeRO stage (over dp x cp), precision, checkpoint mode and micro-batch:
 * the divisors of the per-rank batch, so the powers of two up to the
 * global batch when it is one) that the model allows
 * (aa_strategy_resolve), at the device kind's dtypes (fp32 on CPUs, the
 * run's amp on GPUs), into out (cap entries), in the space's order (larger
 * gangs first). Returns how many (more than cap: only cap written); 0 when
 * out of memory. */
size_t aa_predict_wanted(const aa_model_spec_t *spec, int max_devices, int cuda, aa_calib_op_t *out,
                         size_t cap);

#endif
