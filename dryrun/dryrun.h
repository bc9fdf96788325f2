/* Dry runs: measure how fast one strategy trains one model on this device,
 * by running a few real optimizer steps of the engine's training loop
 * (aa_train in dry-run mode): warm-up steps that are not timed, then timed
 * steps whose median gives the throughput. Nothing is written to disk.
 * Depends on the engine only (engine/train.h). */
#ifndef AA_DRYRUN_H
#define AA_DRYRUN_H

#include <stdbool.h>
#include <stdio.h>

#include "../common/mem.h"
#include "../common/spec.h"
#include "../engine/train.h"
#include "../strategies/strategy.h"

#define AA_DRYRUN_WARMUP_DEFAULT 1
#define AA_DRYRUN_MEASURED_DEFAULT 4

typedef struct aa_dryrun_opts {
  int threads;              /* worker threads; 0 = all online cores */
  const char *device;       /* "cpu" (NULL) or "cuda:N", as aa_train_opts_t.device */
  int warmup_steps;         /* untimed steps first; < 0 = AA_DRYRUN_WARMUP_DEFAULT */
  int measured_steps;       /* timed steps; 0 = AA_DRYRUN_MEASURED_DEFAULT */
  size_t memory_limit;      /* bytes; 0 = none. Past it the dry run fails with AA_EOOM */
  aa_train_step_fn on_step; /* if set, called after every step, phase "warmup" or "measure" */
  void *step_data;          /* passed to on_step */
  FILE *log;                /* the engine's model/strategy/step lines; NULL = none */
  aa_comm_t *comm;          /* data-parallel dry run: this rank's world group (borrowed; see aa_train);
                             * NULL = one process */
} aa_dryrun_opts_t;

typedef struct aa_dryrun_result {
  double tokens_per_s;   /* tokens per optimizer step / median measured step time */
  double step_ms_median; /* of the measured steps */
  double step_ms_spread; /* max - min of the measured steps */
  aa_mem_t mem;          /* accounted peak bytes by kind (mem.peak, mem.peak_total) */
  bool has_loss;
  double final_loss;             /* loss of the last step, when has_loss */
  int steps_done;                /* warm-up + measured */
  char key[AA_STRATEGY_KEY_MAX]; /* the strategy that ran, resolved */
} aa_dryrun_result_t;

/* Dry-runs strategy s (borrowed; NULL = the default strategy) on spec
 * (borrowed) with options o (borrowed; NULL = defaults). The spec's step
 * count is replaced by warm-up + measured steps; its data must be readable.
 * With o->comm every rank of the group calls it with the same arguments;
 * each gets the group's tokens per step over its own step times, the
 * group's loss and its own peak memory, and a failed or vanished peer makes
 * it fail (AA_ECANCELLED, AA_ETIMEOUT) instead of hanging.
 * Returns 0 and fills *res, or a negative code with the last-error message:
 * AA_EINVAL (a strategy the engine refuses for the model, bad options),
 * AA_EOOM (an accounted allocation past memory_limit, message kept from the
 * accountant), AA_EINPUT (no data in the spec, or the data or the initial
 * weights cannot be used; the message says why), or what a failing step
 * returned.
 * *res is written only on success. */
int aa_dryrun(const aa_model_spec_t *spec, const aa_strategy_t *s, const aa_dryrun_opts_t *o,
              aa_dryrun_result_t *res);

/* The two halves of aa_dryrun around its aa_train call, for a caller that
 * starts the rank itself (engine/launch.h, which also joins the group):
 * the training options of a dry run of s with options o (both borrowed by
 * *out, which is written only on success; o->comm is not copied: the
 * launcher sets it), AA_EINVAL for bad options; and the dry-run figures of
 * what that training returned. */
int aa_dryrun_train_opts(const aa_strategy_t *s, const aa_dryrun_opts_t *o, aa_train_opts_t *out);
void aa_dryrun_result_of(const aa_train_result_t *r, aa_dryrun_result_t *out);

#endif
