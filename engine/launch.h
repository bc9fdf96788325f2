/* Launching one rank: its device, its process group from the rendezvous,
 * its training or dry run on the engine (aa_train, which builds the mesh),
 * and on failure the abort that stops its peers. What `autoaccel train
 * --devices` runs in each rank process and what an executor's runner child
 * runs for a job, so the two cannot start a rank differently. */
#ifndef AA_LAUNCH_H
#define AA_LAUNCH_H

#include "../common/spec.h"
#include "train.h"

typedef struct aa_launch {
  const aa_model_spec_t *spec; /* borrowed */
  int rank, world;             /* this rank of a gang of world ranks; world 1 = one process, no gang */
  const char *rendezvous;      /* world > 1: the gang's rendezvous text (comm/comm.h); unused otherwise */
  /* How the rank joins the gang (timeout; gloo: the store and its address),
   * borrowed; zero = the defaults of comm.h. */
  aa_comm_opts_t comm;
  int cuda;                    /* the rank's CUDA device index, or -1: opts.device as the caller set it */
  /* The run (borrowed fields): strategy, threads, memory limit, outputs and
   * the rest as aa_train takes them; a dry run is opts.dryrun with its
   * untimed steps (dryrun.h aa_dryrun_train_opts makes them). comm is the
   * launcher's, and device too when cuda >= 0. */
  aa_train_opts_t opts;
} aa_launch_t;

/* Runs rank l->rank of l->world and returns aa_train's result (res may be
 * NULL). In order:
 *   1. cuda >= 0: the rank trains on "cuda:<cuda>"; in a gang it makes the
 *      device current first, since an NCCL group joins on the current
 *      device ("device cuda:N: ..." on failure);
 *   2. world > 1: joins the gang's group from the rendezvous as rank of
 *      world ("joining the group of N ranks: ..." on failure, e.g. a peer
 *      that never came); a single process trains over a group of one
 *      (aa_train makes it);
 *   3. aa_train with that group; its errors are returned as it words them;
 *   4. on any failure after joining, aborts the group, so every peer stops
 *      now rather than at its collective's timeout; then leaves it.
 * Returns 0 or the negative code with the last-error message set. */
int aa_launch_rank(const aa_launch_t *l, aa_train_result_t *res);

/* Steps 1 and 2 of aa_launch_rank alone, for a rank that runs something
 * else than aa_train over its group (a calibration, dryrun/calibrate.h):
 * with cuda >= 0 in a gang, makes the device current; with world > 1,
 * joins the gang's group into *out (transferred: aa_comm_destroy; the
 * caller aborts it first when its own work fails). *out = NULL for world
 * 1. Errors and messages as aa_launch_rank's; *out is set only on
 * success. */
int aa_launch_join(const aa_launch_t *l, aa_comm_t **out);

#endif
