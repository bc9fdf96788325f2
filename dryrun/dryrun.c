/* Dry runs on top of the training loop (see dryrun.h). */
#include "dryrun.h"

#include <string.h>

int aa_dryrun(const aa_model_spec_t *spec, const aa_strategy_t *s, const aa_dryrun_opts_t *o,
              aa_dryrun_result_t *res) {
  aa_dryrun_opts_t d = {.warmup_steps = -1};
  if (o) d = *o;
  int warmup = d.warmup_steps < 0 ? AA_DRYRUN_WARMUP_DEFAULT : d.warmup_steps;
  int measured = d.measured_steps ? d.measured_steps : AA_DRYRUN_MEASURED_DEFAULT;
  if (measured < 0 || d.threads < 0) return aa_error(AA_EINVAL, "dry run: negative step or thread count");
  if (warmup > (1 << 30) - measured)
    return aa_error(AA_EINVAL, "dry run: %d + %d steps is too many", warmup, measured);
  /* aa_train logs to stdout when given no stream; a dry run is quiet unless
   * asked, and /dev/null keeps the training loop free of a special case. */
  FILE *devnull = NULL;
  if (!d.log && !(devnull = fopen("/dev/null", "w")))
    return aa_error(AA_EIO, "dry run: cannot open /dev/null");
  aa_train_opts_t t = {.threads = d.threads,
                       .device = d.device,
                       .steps = warmup + measured,
                       .checkpoint_every = 0,
                       .log_every = warmup + measured,
                       .log = d.log ? d.log : devnull,
                       .strategy = s,
                       .memory_limit = d.memory_limit,
                       .on_step = d.on_step,
                       .step_data = d.step_data,
                       .dryrun = 1,
                       .untimed_steps = warmup,
                       .comm = d.comm};
  aa_train_result_t r;
  int rc = aa_train(spec, &t, &r);
  if (devnull) fclose(devnull);
  if (rc) return rc;
  aa_dryrun_result_t out = {.tokens_per_s = r.tokens_per_s,
                            .step_ms_median = r.step_ms_median,
                            .step_ms_spread = r.step_ms_spread,
                            .mem = r.mem,
                            .has_loss = r.steps_done > 0,
                            .final_loss = r.final_loss,
                            .steps_done = r.steps_done};
  memcpy(out.key, r.key, sizeof out.key);
  if (res) *res = out;
  return 0;
}
