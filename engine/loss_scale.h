/* Loss scaling for fp16 training, with DeepSpeed's DynamicLossScaler
 * semantics (deepspeed/runtime/fp16/loss_scaler.py):
 *  - the loss is multiplied by `scale` before backward and the gradients
 *    divided by it before the optimizer;
 *  - a step whose gradients hold inf/nan is skipped. On overflow, if the
 *    hysteresis budget is down to 1 the scale halves (never below
 *    min_scale); otherwise the budget drops by one;
 *  - after `window` consecutive iterations since the last overflow the
 *    scale doubles and the hysteresis budget is restored.
 * A static scale (cfg.loss_scale > 0) never changes, but overflowing steps
 * are still skipped. The whole state is saved in checkpoints. */
#ifndef AA_LOSS_SCALE_H
#define AA_LOSS_SCALE_H

#include <stdint.h>

#include "../strategies/strategy.h"

typedef struct aa_loss_scaler {
  aa_loss_scale_cfg_t cfg;
  int dynamic;
  double scale;            /* current scale */
  int64_t iter;            /* update calls so far */
  int64_t last_overflow;   /* iteration of the last overflow, -1 = none */
  int hysteresis_left;     /* overflows still tolerated before halving */
  int64_t skipped;         /* steps skipped because of overflow */
} aa_loss_scaler_t;

/* Initial state for cfg (dynamic: 2^initial_scale_power; static: loss_scale). */
void aa_loss_scaler_init(aa_loss_scaler_t *s, const aa_loss_scale_cfg_t *cfg);

/* Records one step: overflow != 0 when the scaled gradients were not
 * finite. Updates scale, hysteresis and the skip count. Returns 1 if the
 * scale changed. */
int aa_loss_scaler_update(aa_loss_scaler_t *s, int overflow);

#endif
