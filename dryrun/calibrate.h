/* Calibrations, the measuring side: time the engine's ops at the shapes a
 * model's strategies produce and the gang's collectives at several message
 * sizes, into an aa_calib_t (strategies/calib.h) that the step-time model
 * (strategies/predict.h) predicts from. What an executor's runner child
 * runs for a "calibrate" job. Depends on the kernels (kernels/ops.h), the
 * process groups (comm/comm.h) and the strategies' pure data only. */
#ifndef AA_CALIBRATE_H
#define AA_CALIBRATE_H

#include "../comm/comm.h"
#include "../common/spec.h"
#include "../strategies/calib.h"

#define AA_CALIBRATE_BUDGET_DEFAULT 60.0 /* seconds */
#define AA_CALIBRATE_DEVICES_MIN 8       /* the pool covered at least: strategies of up to 8 devices */

/* What a calibration has done so far: `done` of `total` items (op shapes,
 * then collective measurements), phase "calibrate". */
typedef void (*aa_calibrate_progress_fn)(int done, int total, void *data);

typedef struct aa_calibrate_opts {
  int threads;        /* CPU worker threads; 0 = all online cores */
  const char *device; /* "cpu" (NULL) or "cuda:N" */
  /* The gang's world group (borrowed), every rank calling aa_calibrate with
   * the same spec and options; NULL = this process alone. */
  aa_comm_t *comm;
  /* The op shapes cover the strategies of pools of up to this many devices
   * (aa_predict_wanted); the larger of it, the group's size and
   * AA_CALIBRATE_DEVICES_MIN is used. */
  int max_devices;
  /* The op shapes to time (borrowed; n_ops of them, at most
   * AA_CALIB_OPS_MAX, repeats timed once) in place of aa_predict_wanted's,
   * for a caller that knows what it lacks (a strategy the space does not
   * enumerate, the gaps of a stored calibration); NULL = those. */
  const aa_calib_op_t *ops;
  int n_ops;
  /* Seconds the calibration should take at most; 0 = AA_CALIBRATE_BUDGET_DEFAULT.
   * Past three quarters of it the remaining ops are timed with one call each,
   * past all of it the remaining collective sizes are skipped (the smallest
   * and the largest are always measured, the fit needs them). A guide, not
   * a deadline: the caller's time limit is that. */
  double budget_s;
  /* The device fingerprint without the pool's count ("cpu:<name>:<MiB>MiB",
   * as the planner's hardware fingerprint without its trailing "x<N>";
   * 1..127 bytes, cut to fit). NULL = the device text ("cpu", "cuda:0"). */
  const char *fingerprint;
  /* Bytes one op shape's buffers may take; a shape past it, or one the
   * device has no memory for, is left out of the calibration. 0 = on the
   * CPU half the host's memory over the group's ranks, on a GPU what it
   * gives. */
  size_t memory_limit;
  aa_calibrate_progress_fn on_progress; /* optional, called from the calling thread */
  void *progress_data;
} aa_calibrate_opts_t;

/* Calibrates on spec (borrowed; only its architecture and batch are read, no
 * data) with options o (borrowed; NULL = defaults) into *out (caller's
 * memory, written only on success).
 *
 * Ops: every shape of aa_predict_wanted(spec, max devices, cuda) (at most
 * AA_CALIB_OPS_MAX of them), or of o->ops, runs on buffers of its size filled with small
 * random values: one untimed call, then three samples of as many calls as
 * take about 0.4 ms (so at least a millisecond in all), each sample's time
 * per call, the median kept; forward and backward alike (a backward's inputs
 * are its forward's outputs). The kernels are the engine's for each kind: a
 * GEMM with its bias and the 16-bit input promise of its dtype; the
 * residual's backward two accumulates; a cross-entropy over the model's
 * whole (padded) vocabulary crossentropy_forward, over a narrower slice (a
 * tensor rank's) xent_vocab_partial + xent_vocab_forward with ceil(vocab /
 * slice) parts (their all-gather is the collectives'), xent_vocab_backward
 * either way; the embedding encoder_*_vocab over sequences of the model's
 * length; a cast forward cast_from_f32 and backward cast_to_f32, to bf16
 * when the shape's dtype is fp32 (a CPU's 16-bit storage); AdamW forward
 * only. The llama family's: rmsnorm_*, swiglu_*, rope_forward and
 * rope_backward, attention_gqa_* at the folded shape calib.h describes
 * (B = S groups, NH = G query heads, NKV = 1), RoPE at the model's
 * rope_theta, and the embedding without a position table. Context
 * parallelism's ring blocks (calib.h RING_DIAG, RING_BLOCK) at the folded
 * shape too, on one chunk's q|k|v rows read with the engine's strides:
 * the diagonal's forward attention_block_forward (causal) and backward
 * attention_block_delta + attention_block_backward (causal), a full
 * block's forward attention_block_forward + attention_block_merge and
 * backward attention_block_backward.
 * With a group, the ranks time the same ops at the same time, one
 * shape after another (a barrier between shapes, so a dead peer is noticed
 * within the group's abort latency), and the figures kept are the timing
 * ranks' mean (an all-reduce); out->ranks is how many timed: the group's
 * size, except on a CPU host whose cores the gang's threads outnumber,
 * where only cores / threads ranks (at least 1) time and the rest wait, so
 * that no op is timed while the scheduler slices it with another rank's. A shape whose
 * buffers do not fit (memory_limit, or the device's memory on any rank) is
 * left out: the step-time model takes it from its measured neighbours;
 * AA_EOOM only when none fits. Kernels that ignore the storage dtype (all
 * but the GEMMs and the casts) are timed once per shape, their figures kept
 * for each dtype wanted.
 *
 * Collectives (a group of 2 or more ranks): for group sizes t = 2, 4, 8, ...
 * up to the world, the world is split into blocks of t consecutive ranks
 * (the ranks past the last whole block sit out), every block measuring at
 * once; each kind (all-reduce, all-gather, reduce-scatter, and sends as
 * ping-pongs of the ranks 2i <-> 2i+1 of a block, half a round trip each) is
 * timed at up to four message sizes (4 KiB .. 4 MiB as cost.h counts a
 * message; larger ones, a big model's gradients or a context ring's
 * q|k|v, are predicted on the line beyond them, where its bandwidth term
 * dominates), each the median of three samples, and a latency + bandwidth line
 * fitted on rank 0's block to the bytes each rank's link carries (cost.h's
 * ring convention: an all-reduce 2(t-1)/t of its message, gathers and
 * scatters (t-1)/t, a send all of it); where noise defeats the fit (times
 * that do not grow with the size), the smallest message's time is the
 * latency and the largest's rate the bandwidth. Every rank returns rank 0's
 * lines.
 *
 * Returns 0, or a negative code with the last-error message: AA_EINVAL (bad
 * options, a device the build cannot use, a spec or an op list whose shapes
 * do not fit the kernels' int dimensions), AA_EOOM (no op shape fits), AA_ENOMEM (host
 * memory, the collectives' buffers), AA_ECANCELLED / AA_ETIMEOUT (a peer
 * failed, died or never came: the group's errors), AA_EUNSUPPORTED (a CUDA
 * device in a build without CUDA), or the device's own failure. On any
 * failure of a rank in a group of 2 or more, that rank aborts the group's
 * family, so every peer fails at once (AA_ECANCELLED) instead of at its
 * timeout. */
int aa_calibrate(const aa_model_spec_t *spec, const aa_calibrate_opts_t *o, aa_calib_t *out);

#endif
