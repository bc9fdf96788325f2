/* The loss scaler (engine/loss_scale.h) against DeepSpeed's
 * DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py,
 * scale_factor 2, delayed_shift = hysteresis, consecutive_hysteresis
 * False): a hand-derived table for a scripted overflow pattern, a literal
 * transcription of the Python method run on random patterns, the min_scale
 * floor, the exact window timing, hysteresis restore, static scales and the
 * skip count. */
#include "aa_test.h"
#include "common/aa.h"
#include "engine/loss_scale.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static aa_loss_scale_cfg_t dyn_cfg(int power, int window, int hysteresis, float min_scale) {
  return (aa_loss_scale_cfg_t){.loss_scale = 0.0f,
                               .initial_scale_power = power,
                               .window = window,
                               .hysteresis = hysteresis,
                               .min_scale = min_scale};
}

/* DeepSpeed's state and update_scale, transcribed line by line (Python's %
 * equals C's here because cur_iter - last_overflow_iter is never
 * negative). */
typedef struct {
  double cur_scale, min_scale;
  int64_t cur_iter, last_overflow_iter;
  int scale_window, delayed_shift, cur_hysteresis;
} ds_scaler_t;

static void ds_init(ds_scaler_t *d, double init_scale, int window, int delayed_shift, double min_scale) {
  *d = (ds_scaler_t){.cur_scale = init_scale,
                     .min_scale = min_scale,
                     .cur_iter = 0,
                     .last_overflow_iter = -1,
                     .scale_window = window,
                     .delayed_shift = delayed_shift,
                     .cur_hysteresis = delayed_shift};
}

static void ds_update_scale(ds_scaler_t *d, int overflow) {
  if (overflow) {
    if (d->delayed_shift == 1 || d->cur_hysteresis == 1) {
      double next_scale = d->cur_scale / 2.0;
      d->cur_scale = next_scale > d->min_scale ? next_scale : d->min_scale;
    } else {
      d->cur_hysteresis -= 1;
    }
    d->last_overflow_iter = d->cur_iter;
  } else {
    if ((d->cur_iter - d->last_overflow_iter) % d->scale_window == 0) {
      d->cur_hysteresis = d->delayed_shift;
      d->cur_scale *= 2.0;
    }
  }
  d->cur_iter += 1;
}

AA_TEST(init_sets_dynamic_and_static_starting_state) {
  aa_loss_scaler_t s;
  aa_loss_scale_cfg_t c = dyn_cfg(16, 1000, 2, 1.0f);
  aa_loss_scaler_init(&s, &c);
  CHECK(s.dynamic == 1 && s.scale == 65536.0);
  CHECK(s.iter == 0 && s.last_overflow == -1 && s.hysteresis_left == 2 && s.skipped == 0);
  c.initial_scale_power = 0;
  aa_loss_scaler_init(&s, &c);
  CHECK(s.scale == 1.0);
  c.initial_scale_power = 64;
  aa_loss_scaler_init(&s, &c);
  CHECK(s.scale == 18446744073709551616.0);
  c.loss_scale = 128.0f;
  aa_loss_scaler_init(&s, &c);
  CHECK(s.dynamic == 0 && s.scale == 128.0);
}

/* Two overflows, then 2500 clean steps; window 1000, hysteresis 2, min 1,
 * initial scale 2^16. Derived by hand from update_scale:
 *   iter 0  overflow: hysteresis 2 -> 1, last_overflow 0, scale 65536
 *   iter 1  overflow: hysteresis is 1 -> scale 32768, last_overflow 1
 *   iter 2..1000: (iter - 1) % 1000 != 0, nothing changes
 *   iter 1001: (1001 - 1) % 1000 == 0 -> scale 65536, hysteresis 2
 *   iter 2001: -> scale 131072
 *   iter 2501: the last step, still 131072 */
AA_TEST(scripted_overflows_then_clean_steps_follow_the_table) {
  static const struct {
    int64_t first, last; /* iterations (inclusive) after whose update the state holds */
    double scale;
    int hysteresis_left;
  } table[] = {
      {0, 0, 65536.0, 1},
      {1, 1000, 32768.0, 1},
      {1001, 2000, 65536.0, 2},
      {2001, 2501, 131072.0, 2},
  };
  aa_loss_scaler_t s;
  aa_loss_scale_cfg_t c = dyn_cfg(16, 1000, 2, 1.0f);
  aa_loss_scaler_init(&s, &c);
  int bad = 0, changes = 0;
  for (int64_t it = 0; it <= 2501; it++) {
    changes += aa_loss_scaler_update(&s, it < 2);
    size_t k = 0;
    while (it > table[k].last)
      k++;
    if ((s.scale != table[k].scale || s.hysteresis_left != table[k].hysteresis_left) && bad++ < 5)
      fprintf(stderr, "  after iter %lld: scale %g hysteresis %d, want %g %d\n", (long long)it, s.scale,
              s.hysteresis_left, table[k].scale, table[k].hysteresis_left);
  }
  CHECK(bad == 0);
  CHECK(changes == 3); /* 1: halve, 1001 and 2001: double */
  CHECK(s.iter == 2502 && s.last_overflow == 1 && s.skipped == 2);
}

AA_TEST(matches_a_transcription_of_deepspeed_on_random_patterns) {
  static const struct {
    int window, hysteresis;
    float min_scale;
    unsigned overflow_per_mille;
  } cases[] = {
      {1000, 2, 1.0f, 2}, {1, 1, 1.0f, 300}, {3, 2, 1.0f, 200}, {7, 3, 4.0f, 150},
      {50, 1, 0.5f, 30},  {5, 4, 1.0f, 600}, {2, 2, 1.0f, 500},
  };
  aa_rng_t rng;
  aa_rng_seed(&rng, 7);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    aa_loss_scale_cfg_t c = dyn_cfg(12, cases[k].window, cases[k].hysteresis, cases[k].min_scale);
    aa_loss_scaler_t s;
    ds_scaler_t d;
    aa_loss_scaler_init(&s, &c);
    ds_init(&d, ldexp(1.0, 12), cases[k].window, cases[k].hysteresis, cases[k].min_scale);
    int bad = 0;
    int64_t overflows = 0;
    for (int it = 0; it < 20000; it++) {
      int overflow = aa_rng_u64(&rng) % 1000 < cases[k].overflow_per_mille;
      overflows += overflow;
      double before = d.cur_scale;
      int changed = aa_loss_scaler_update(&s, overflow);
      ds_update_scale(&d, overflow);
      if ((s.scale != d.cur_scale || s.hysteresis_left != d.cur_hysteresis || s.iter != d.cur_iter ||
           s.last_overflow != d.last_overflow_iter || changed != (d.cur_scale != before)) &&
          bad++ < 3)
        fprintf(stderr, "  case %zu iter %d: scale %g/%g hysteresis %d/%d\n", k, it, s.scale, d.cur_scale,
                s.hysteresis_left, d.cur_hysteresis);
    }
    CHECK_MSG(bad == 0, "case %zu", k);
    CHECK(s.skipped == overflows);
  }
}

AA_TEST(scale_never_drops_below_min_scale) {
  aa_loss_scaler_t s;
  aa_loss_scale_cfg_t c = dyn_cfg(3, 1000, 1, 3.0f);
  aa_loss_scaler_init(&s, &c);
  CHECK(aa_loss_scaler_update(&s, 1) == 1 && s.scale == 4.0);
  CHECK(aa_loss_scaler_update(&s, 1) == 1 && s.scale == 3.0); /* max(2, 3) */
  CHECK(aa_loss_scaler_update(&s, 1) == 0 && s.scale == 3.0);
  CHECK(aa_loss_scaler_update(&s, 1) == 0 && s.scale == 3.0);
  CHECK(s.skipped == 4 && s.iter == 4 && s.last_overflow == 3);
}

/* From the start (last_overflow = -1) the scale doubles on the window-th
 * clean update; after an overflow at iteration k, on update k + window,
 * the window-th clean one after it. */
AA_TEST(scale_doubles_exactly_after_window_clean_steps) {
  aa_loss_scaler_t s;
  aa_loss_scale_cfg_t c = dyn_cfg(4, 4, 1, 1.0f);
  aa_loss_scaler_init(&s, &c);
  static const double want[] = {16, 16, 16, 32, 32, 32, 32, 64};
  for (int it = 0; it < 8; it++) {
    int changed = aa_loss_scaler_update(&s, 0);
    CHECK_MSG(s.scale == want[it] && changed == (it == 3 || it == 7), "iter %d: %g", it, s.scale);
  }
  CHECK(aa_loss_scaler_update(&s, 1) == 1 && s.scale == 32.0); /* iter 8 overflows */
  for (int it = 9; it <= 12; it++) {
    aa_loss_scaler_update(&s, 0);
    CHECK_MSG(s.scale == (it < 12 ? 32.0 : 64.0), "iter %d: %g", it, s.scale);
  }
  CHECK(s.skipped == 1);
}

/* Overflows need not be consecutive to use up the hysteresis
 * (consecutive_hysteresis = False): clean steps in between do not restore
 * it; only a window growth does. */
AA_TEST(hysteresis_delays_halving_and_is_restored_by_growth) {
  aa_loss_scaler_t s;
  aa_loss_scale_cfg_t c = dyn_cfg(10, 5, 3, 1.0f);
  aa_loss_scaler_init(&s, &c);
  CHECK(aa_loss_scaler_update(&s, 1) == 0 && s.hysteresis_left == 2 && s.scale == 1024.0); /* iter 0 */
  CHECK(aa_loss_scaler_update(&s, 0) == 0);                                                /* iter 1 */
  CHECK(aa_loss_scaler_update(&s, 1) == 0 && s.hysteresis_left == 1 && s.scale == 1024.0); /* iter 2 */
  CHECK(aa_loss_scaler_update(&s, 1) == 1 && s.hysteresis_left == 1 && s.scale == 512.0);  /* iter 3 */
  CHECK(aa_loss_scaler_update(&s, 1) == 1 && s.hysteresis_left == 1 && s.scale == 256.0);  /* iter 4 */
  for (int it = 5; it < 9; it++)
    CHECK(aa_loss_scaler_update(&s, 0) == 0 && s.hysteresis_left == 1);
  CHECK(aa_loss_scaler_update(&s, 0) == 1 && s.hysteresis_left == 3 && s.scale == 512.0); /* iter 9 */
  CHECK(aa_loss_scaler_update(&s, 1) == 0 && s.hysteresis_left == 2 && s.scale == 512.0);
  CHECK(s.skipped == 5);
}

AA_TEST(static_scale_never_changes_but_counts_skipped_steps) {
  aa_loss_scaler_t s;
  aa_loss_scale_cfg_t c = dyn_cfg(16, 2, 1, 1.0f);
  c.loss_scale = 1024.0f;
  aa_loss_scaler_init(&s, &c);
  int changes = 0;
  for (int it = 0; it < 100; it++)
    changes += aa_loss_scaler_update(&s, it % 3 == 0);
  CHECK(changes == 0);
  CHECK(s.scale == 1024.0);
  CHECK(s.skipped == 34);
  CHECK(s.iter == 100);
}

int main(void) {
  RUN(init_sets_dynamic_and_static_starting_state);
  RUN(scripted_overflows_then_clean_steps_follow_the_table);
  RUN(matches_a_transcription_of_deepspeed_on_random_patterns);
  RUN(scale_never_drops_below_min_scale);
  RUN(scale_doubles_exactly_after_window_clean_steps);
  RUN(hysteresis_delays_halving_and_is_restored_by_growth);
  RUN(static_scale_never_changes_but_counts_skipped_steps);
  return aa_test_summary();
}
