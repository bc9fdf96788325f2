/* Loss scaling (contract in loss_scale.h). The dynamic update is
 * DeepSpeed's DynamicLossScaler.update_scale with scale_factor 2,
 * delayed_shift = hysteresis and consecutive_hysteresis = False:
 *
 *   if overflow:
 *     if delayed_shift == 1 or cur_hysteresis == 1:
 *       cur_scale = max(cur_scale / 2, min_scale)
 *     else:
 *       cur_hysteresis -= 1
 *     last_overflow_iter = cur_iter
 *   elif (cur_iter - last_overflow_iter) % scale_window == 0:
 *     cur_hysteresis = delayed_shift
 *     cur_scale *= 2
 *   cur_iter += 1
 *
 * One difference: DeepSpeed raises (raise_error_at_min_scale) on an
 * overflow at min_scale; here the scale stays at min_scale and the step is
 * skipped, and the caller decides whether repeated skips are fatal. */
#include "loss_scale.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void aa_loss_scaler_init(aa_loss_scaler_t *s, const aa_loss_scale_cfg_t *cfg) {
  memset(s, 0, sizeof *s);
  s->cfg = *cfg;
  s->dynamic = cfg->loss_scale <= 0.0f;
  s->scale = s->dynamic ? ldexp(1.0, cfg->initial_scale_power) : (double)cfg->loss_scale;
  s->iter = 0;
  s->last_overflow = -1;
  s->hysteresis_left = cfg->hysteresis;
  s->skipped = 0;
}

/* The configuration was validated by the strategy rules (window >= 1,
 * hysteresis >= 1), so a zero window is a caller bug, not an input. */
int aa_loss_scaler_update(aa_loss_scaler_t *s, int overflow) {
  double before = s->scale;
  if (overflow) s->skipped++;
  if (s->dynamic) {
    assert(s->cfg.window >= 1 && s->cfg.hysteresis >= 1);
    if (overflow) {
      if (s->cfg.hysteresis == 1 || s->hysteresis_left == 1)
        s->scale = fmax(s->scale / 2.0, (double)s->cfg.min_scale);
      else
        s->hysteresis_left--;
      s->last_overflow = s->iter;
    } else if ((s->iter - s->last_overflow) % s->cfg.window == 0) {
      s->hysteresis_left = s->cfg.hysteresis;
      s->scale *= 2.0;
    }
  }
  s->iter++;
  return s->scale != before;
}
