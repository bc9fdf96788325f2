/* Training driver: data, model, AdamW, schedule, validation, checkpoints
 * and progress output, as one rank of a device mesh (engine/mesh.h) built
 * from the world group opts.comm; a single process is a 1x1x1 mesh over a
 * group of one, and runs the same code. */
#ifndef AA_TRAIN_H
#define AA_TRAIN_H

#include <stdio.h>

#include "../common/mem.h"
#include "../common/spec.h"
#include "../strategies/strategy.h"
#include "../comm/comm.h"

/* Where one rank's step time goes (Merak's wall_clock_breakdown), in
 * milliseconds: its forward and backward passes (their tensor-group
 * collectives included), the optimizer step (the data group's gradient
 * reduction and the step's own collectives included), what the pipeline
 * moved (point-to-point sends and receives, the embedding group's sum)
 * and the pipeline's wait, the step's time spent in none of these
 * (mostly waiting in a receive for a stage that is still computing:
 * the bubble), and the expert group's all-to-alls (expert parallelism's
 * token dispatch and combine, engine/moe_dispatch.h: counted here, not in
 * the forward or backward they run in). forward + backward + optimizer +
 * pipeline_comm + bubble + all_to_all is the step's time. The protocol
 * (proto/msg.h) names the same kinds in the same order; all_to_all is
 * last, where it was added. */
typedef enum {
  AA_TIME_FORWARD,
  AA_TIME_BACKWARD,
  AA_TIME_OPTIMIZER,
  AA_TIME_PIPELINE_COMM,
  AA_TIME_BUBBLE,
  AA_TIME_ALL_TO_ALL,
  AA_TIME_KINDS
} aa_time_kind_t;
/* "forward", "backward", "optimizer", "pipeline_comm", "bubble", "all_to_all" */
const char *aa_time_kind_name(aa_time_kind_t k);

/* What the step callback is told after every optimizer step. */
typedef struct aa_train_step_info {
  int step, total;     /* 1-based step just done, of the run's total */
  float loss;          /* mean loss of the step */
  double tokens_per_s; /* of this step alone */
  double step_ms;
  const char *phase; /* "train"; dry runs: "warmup" (untimed) or "measure" */
  double time_ms[AA_TIME_KINDS]; /* this rank's breakdown of the step */
} aa_train_step_info_t;

typedef void (*aa_train_step_fn)(const aa_train_step_info_t *info, void *data);

typedef struct aa_train_opts {
  int threads;              /* worker threads; 0 = all online cores */
  int steps;                /* 0 = the spec's train.steps */
  int checkpoint_every;     /* -1 = the spec's train.checkpoint_every */
  int keep_last;            /* step checkpoints kept: 0 = the spec's train.keep_last, -1 = all, N > 0 = N */
  int weights_only;         /* 1: checkpoints without optimizer state; 0 = the spec's train.weights_only */
  int log_every;            /* print a step line every N steps (first and last always); >= 1 */
  const char *out_dir;      /* checkpoints go here; NULL = "runs/<name>" */
  const char *resume;       /* training checkpoint to resume from, or NULL */
  const char *losses_path;  /* if set, every step's loss is written here ("step loss", %.9g) */
  const char *summary_json; /* if set, the final summary is written here as JSON */
  FILE *log;                /* progress lines; NULL = stdout (a dry run: nowhere) */
  const aa_strategy_t *strategy; /* how to train (borrowed); NULL = the default strategy */
  size_t memory_limit;      /* bytes; 0 = none. Allocation past it fails with AA_EOOM */
  aa_train_step_fn on_step; /* if set, called after every step (progress of jobs and dry runs) */
  void *step_data;          /* passed to on_step */
  /* Dry-run mode (dryrun/): a measurement, not a run to keep. No validation
   * data is read, no directory is made, no checkpoint is written; the first
   * untimed_steps steps are warm-up (not timed) and every later one is timed.
   * Outside it only the first step is untimed, unless it is the only one. */
  int dryrun;
  int untimed_steps;
  /* Where the model trains: NULL or "cpu" (the default), or "cuda:N" for
   * CUDA device N. A CUDA device in a build without the CUDA backend, or on
   * a machine without that device, fails with AA_EUNSUPPORTED and a message
   * that says which. */
  const char *device;
  int tf32; /* CUDA: TF32 tensor-core math for the fp32 GEMMs (faster, ~1e-3 relative error per product) */
  /* The world group this process is one rank of (borrowed; NULL = a
   * single process, which trains over a group of one, comm.h
   * aa_comm_self). See aa_train. */
  aa_comm_t *comm;
} aa_train_opts_t;

typedef struct aa_train_result {
  int steps_done;        /* optimizer steps completed in this run */
  float final_loss;      /* training loss of the last step */
  float val_loss;        /* last validation loss, NaN if no validation data */
  double tokens_per_s;   /* tokens per step / median step time (first step excluded) */
  double step_ms_median;
  double step_ms_spread; /* max - min of the timed step times */
  double train_entropy;  /* unigram entropy of the training data, nats */
  int64_t skipped_steps; /* optimizer steps skipped for non-finite gradients (whole run, resumes included) */
  double loss_scale;     /* final fp16 loss scale, 0 without loss scaling */
  double peak_flops;     /* CUDA: the device's dense bf16 FLOP/s estimate (aa_cuda_device_info); 0 on CPU */
  aa_mem_t mem;          /* memory accounting: peak bytes by kind */
  char key[AA_STRATEGY_KEY_MAX]; /* the strategy that ran */
  /* This rank (its own figures, not the group's): its place in the mesh
   * and the mean breakdown of its timed steps. */
  int rank, coord[AA_AXES]; /* coord by aa_axis_t (common/axis.h) */
  double time_ms[AA_TIME_KINDS];
  double all_to_all_forward_ms; /* the part of time_ms[AA_TIME_ALL_TO_ALL] spent in forward passes */
  /* Expert parallelism: the bytes this rank's dispatchers grew past the
   * room sizes.h predicts (engine/moe_dispatch.h; in mem's activations),
   * and the local rows they hold; 0 when routing stayed within it. */
  size_t moe_overflow_bytes;
  int moe_overflow_rows;
  /* MoE: the most tokens any expert got from one rank's micro-batch, over
   * every rank (the `moe` line's max), averaged over the steps that line
   * was logged for; what strategies/predict.h aa_predict_imbalance turns
   * into the router's load imbalance. 0 without MoE layers. */
  double moe_max_tokens;
} aa_train_result_t;

/* Trains spec as configured, with the strategy's knobs (amp, activation
 * checkpointing, micro-batch with gradient accumulation, loss scaling).
 * Returns 0 or a negative code with the last-error message set (invalid
 * strategy, bad data, unreadable checkpoint, divergence, AA_EOOM past the
 * memory limit). res may be NULL.
 *
 * Data-parallel runs (what a runner calls for a dp > 1 strategy, through
 * engine/launch.h): every rank of the group calls aa_train with the same
 * spec, strategy and options and opts.comm = its handle on the world group
 * (aa_comm_init from the job's rendezvous, rank r of world = dp; tp = pp =
 * 1). The strategy's dp * tp * pp must equal the group's size; aa_train
 * builds the rank's mesh from it (engine/mesh.h) and runs ZeRO over the
 * mesh's data group only, at the strategy's stage (0-3, engine/optim.h;
 * over a data group of one the stage is 0: plain AdamW). Rank r trains on
 * sequences [r G/dp, (r+1) G/dp) of each global batch of G (the
 * single-process run's batches, so losses match it to rounding), as
 * G/(dp mb) micro-batches. Every rank gets the same losses in res (the
 * global mean loss and validation loss) and tokens/s of the whole group as
 * it timed them; res->mem is that rank's own memory. Only rank 0 writes the
 * log (opts.log is not used on other ranks), the losses file and the
 * summary; a checkpoint is one file by rank 0 at zero 0, else one file per
 * rank plus a manifest (docs/checkpoint-format.md), and opts.resume reads
 * either at any dp, and in a single process. A failed or vanished peer makes
 * every rank return an error (AA_ECANCELLED or AA_ETIMEOUT from the group,
 * with the step and the collective in the message) instead of hanging,
 * after freeing everything; the caller then destroys the group. A spec
 * without data (aa_spec_require_data), data that cannot be read and initial
 * weights that cannot be loaded give AA_EINPUT (the message names the field
 * or the file and the cause): no strategy changes them. */
int aa_train(const aa_model_spec_t *spec, const aa_train_opts_t *opts, aa_train_result_t *res);

#endif
