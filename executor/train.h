/* Single-process training driver: data, model, AdamW, schedule,
 * validation, checkpoints and progress output. */
#ifndef AA_TRAIN_H
#define AA_TRAIN_H

#include <stdio.h>

#include "../common/spec.h"

typedef struct aa_train_opts {
  int threads;              /* worker threads; 0 = all online cores */
  int steps;                /* 0 = the spec's train.steps */
  int checkpoint_every;     /* -1 = the spec's train.checkpoint_every */
  int log_every;            /* print a step line every N steps (first and last always); >= 1 */
  const char *out_dir;      /* checkpoints go here; NULL = "runs/<name>" */
  const char *resume;       /* training checkpoint to resume from, or NULL */
  const char *losses_path;  /* if set, every step's loss is written here ("step loss", %.9g) */
  const char *summary_json; /* if set, the final summary is written here as JSON */
  FILE *log;                /* progress lines; NULL = stdout */
} aa_train_opts_t;

typedef struct aa_train_result {
  int steps_done;        /* optimizer steps completed in this run */
  float final_loss;      /* training loss of the last step */
  float val_loss;        /* last validation loss, NaN if no validation data */
  double tokens_per_s;   /* tokens per step / median step time (first step excluded) */
  double step_ms_median;
  double train_entropy;  /* unigram entropy of the training data, nats */
} aa_train_result_t;

/* Trains spec as configured. Returns 0 or a negative code with the
 * last-error message set (bad data, unreadable checkpoint, divergence).
 * res may be NULL. */
int aa_train(const aa_model_spec_t *spec, const aa_train_opts_t *opts, aa_train_result_t *res);

#endif
