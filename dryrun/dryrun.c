/* Dry runs on top of the training loop (see dryrun.h). */
#include "dryrun.h"

#include <string.h>

int aa_dryrun_train_opts(const aa_strategy_t *s, const aa_dryrun_opts_t *o, aa_train_opts_t *out) {
  aa_dryrun_opts_t d = {.warmup_steps = -1};
  if (o) d = *o;
  int warmup = d.warmup_steps < 0 ? AA_DRYRUN_WARMUP_DEFAULT : d.warmup_steps;
  int measured = d.measured_steps ? d.measured_steps : AA_DRYRUN_MEASURED_DEFAULT;
  if (measured < 0 || d.threads < 0) return aa_error(AA_EINVAL, "dry run: negative step or thread count");
  if (warmup > (1 << 30) - measured)
    return aa_error(AA_EINVAL, "dry run: %d + %d steps is too many", warmup, measured);
  /* A dry run given no log is quiet: aa_train logs nowhere then. */
  *out = (aa_train_opts_t){.threads = d.threads,
                           .device = d.device,
                           .steps = warmup + measured,
                           .checkpoint_every = 0,
                           .log_every = warmup + measured,
                           .log = d.log,
                           .strategy = s,
                           .memory_limit = d.memory_limit,
                           .on_step = d.on_step,
                           .step_data = d.step_data,
                           .dryrun = 1,
                           .untimed_steps = warmup};
  return 0;
}

void aa_dryrun_result_of(const aa_train_result_t *r, aa_dryrun_result_t *out) {
  *out = (aa_dryrun_result_t){.tokens_per_s = r->tokens_per_s,
                              .step_ms_median = r->step_ms_median,
                              .step_ms_spread = r->step_ms_spread,
                              .mem = r->mem,
                              .has_loss = r->steps_done > 0,
                              .final_loss = r->final_loss,
                              .steps_done = r->steps_done};
  memcpy(out->key, r->key, sizeof out->key);
}

int aa_dryrun(const aa_model_spec_t *spec, const aa_strategy_t *s, const aa_dryrun_opts_t *o,
              aa_dryrun_result_t *res) {
  aa_train_opts_t t;
  aa_train_result_t r;
  int rc = aa_dryrun_train_opts(s, o, &t);
  if (rc) return rc;
  t.comm = o ? o->comm : NULL;
  if ((rc = aa_train(spec, &t, &r))) return rc;
  if (res) aa_dryrun_result_of(&r, res);
  return 0;
}
