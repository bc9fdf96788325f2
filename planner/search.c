/* The search: which strategies a job dry-runs and in what order, and when
 * it stops early (docs/service.md "Jobs", steps 3 and 4). Pure: no store,
 * no sockets; jobs.c records what it decides. */
#include "planner_internal.h"

#include "../strategies/cost.h"
#include "../strategies/space.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void aa__search_free(aa_search_t *s) {
  free(s->c);
  free(s->setting_best);
  free(s->setting_spread);
  free(s->setting_mb);
  free(s->setting_stop);
  memset(s, 0, sizeof *s);
}

/* Prunes a valid candidate that cannot fit: the bytes a rank must hold
 * (strategies/cost.h) are a lower bound of its peak, so a total past the
 * device's memory is an oom before any step. */
static void prune_if_too_big(aa_search_t *s, aa_cand_t *c, const aa_model_spec_t *spec, uint64_t memory) {
  aa_cost_mem_t m;
  aa_cost_memory(&spec->arch, &c->s, aa_strategy_accum_steps(&c->s, spec), &m);
  c->bytes = m.total;
  if (!memory || m.total <= memory) return;
  char need[256], have[32];
  aa_cost_mem_describe(&m, need, sizeof need);
  snprintf(c->reason, sizeof c->reason, "predicted out of memory: a rank needs at least %s, the device has %s", need,
           aa_mem_fmt(have, memory));
  c->state = AA_CAND_PRUNED;
  s->predicted_oom++;
}

/* Keeps, of the n strategies in strat (with their settings), those at most
 * AA_SEARCH_FROM_RADIUS knobs from `from`, nearest first (the enumeration's
 * order among equals), and puts `from` itself first: in place of the
 * candidate at distance 0, which has its knobs, else ahead of all with a
 * setting of its own (ns, then *nsettings grows). strat and setting have
 * room for n + 1. Returns how many are kept. */
static size_t order_from(aa_strategy_t *strat, int *setting, size_t n, const aa_strategy_t *from, size_t *nsettings) {
  aa_strategy_t *ks = malloc((n + 1) * sizeof *ks);
  int *kset = malloc((n + 1) * sizeof *kset), *dist = malloc((n + 1) * sizeof *dist);
  size_t k = 0;
  if (!ks || !kset || !dist) {
    free(ks);
    free(kset);
    free(dist);
    return 0;
  }
  for (size_t i = 0; i < n; i++)
    dist[i] = aa_space_distance(&strat[i], from);
  if (n == 0 || dist[0] != 0) {
    bool have = false;
    for (size_t i = 0; i < n && !have; i++)
      have = dist[i] == 0;
    if (!have) {
      ks[k] = *from;
      kset[k++] = (int)(*nsettings)++;
    }
  }
  for (int d = 0; d <= AA_SEARCH_FROM_RADIUS; d++)
    for (size_t i = 0; i < n; i++)
      if (dist[i] == d) {
        ks[k] = d == 0 ? *from : strat[i];
        kset[k++] = setting[i];
      }
  memcpy(strat, ks, k * sizeof *ks);
  memcpy(setting, kset, k * sizeof *kset);
  free(ks);
  free(kset);
  free(dist);
  return k;
}

int aa__search_enumerate(aa_search_t *s, const aa_model_spec_t *spec, int devices, aa_proto_dev_kind_t dev_kind,
                         uint64_t memory, unsigned exclude, unsigned include, const aa_strategy_t *from) {
  memset(s, 0, sizeof *s);
  s->cuda = dev_kind == AA_PROTO_DEV_CUDA;
  s->memory = memory;
  s->arch = spec->arch;
  s->global_batch = spec->train.global_batch;
  s->correction = 1;
  if (devices < 1 || devices > AA_PROTO_WORLD_MAX)
    return aa_error(AA_EINVAL, "search: %d devices is outside 1..%d", devices, AA_PROTO_WORLD_MAX);
  if (from && (int)aa_strategy_world(from) > devices)
    return aa_error(AA_EINVAL,
                    "search: the strategy to start from (%d ranks) needs more than the pool's %d devices",
                    (int)aa_strategy_world(from), devices);
  /* What exists, in the order to try it: strategies/space.h. The cuda
   * engine's expert parallelism (the dispatcher's device-memory moves over
   * NCCL's all-to-all) is built but has never run on GPUs: a GPU pool does
   * not spend its dry runs on it yet; nor on MoE with context parallelism,
   * which the cuda engine refuses (its load-balancing sums read a host
   * routing map: engine/model.c moe_supported). */
  const aa_space_pool_t pool = {
      .devices = devices,
      .global_batch = spec->train.global_batch,
      .cuda = s->cuda,
      .exclude = exclude | (s->cuda && spec->arch.moe.experts ? AA_SPACE_EX_EP | AA_SPACE_EX_CP : 0u),
      .include = include,
      .arch = &spec->arch};
  size_t n = aa_space_enumerate(NULL, NULL, 0, &pool);
  if (n == 0 && !from) return aa_error(AA_EINVAL, "search: every strategy is excluded or misses an included method");
  /* One more for the strategy to start from, which may be outside the space. */
  aa_strategy_t *strat = calloc(n + 1, sizeof *strat);
  int *setting = calloc(n + 1, sizeof *setting);
  size_t ns = 0;
  if (strat && setting) {
    aa_space_enumerate(strat, setting, n, &pool);
    ns = n ? (size_t)setting[n - 1] + 1 : 0;
    if (from) n = order_from(strat, setting, n, from, &ns);
  }
  if (ns == 0) ns = 1;
  s->c = n ? calloc(n, sizeof *s->c) : NULL;
  s->setting_best = calloc(ns, sizeof *s->setting_best);
  s->setting_spread = calloc(ns, sizeof *s->setting_spread);
  s->setting_mb = calloc(ns, sizeof *s->setting_mb);
  s->setting_stop = calloc(ns, sizeof *s->setting_stop);
  if (!strat || !setting || n == 0 || !s->c || !s->setting_best || !s->setting_spread || !s->setting_mb ||
      !s->setting_stop) {
    free(strat);
    free(setting);
    aa__search_free(s);
    return aa_error(AA_ENOMEM, "search: no memory for %zu candidates", n);
  }
  s->nsettings = (int)ns;
  for (size_t i = 0; i < n; i++) {
    aa_cand_t *c = &s->c[s->n++];
    c->s = strat[i];
    c->setting = setting[i];
    if (aa_strategy_resolve(&c->s, spec, (int)aa_strategy_world(&c->s))) {
      c->state = AA_CAND_PRUNED;
      snprintf(c->reason, sizeof c->reason, "%s", aa_last_error());
    } else {
      s->valid++;
      prune_if_too_big(s, c, spec, memory);
    }
    aa_strategy_key(&c->s, c->key);
    if (from) c->tier = aa_space_distance(&c->s, from);
  }
  free(strat);
  free(setting);
  return 0;
}

/* Whether a and b cut the model into the same pipeline stages and run
 * them in the same schedule: aa_cost_dominated compares the degrees and
 * the knobs of one rank's work, not the bubble a schedule leaves, so two
 * shapes are never compared. */
static bool same_pipeline(const aa_strategy_t *a, const aa_strategy_t *b) {
  if (a->degree[AA_AXIS_PIPELINE] != b->degree[AA_AXIS_PIPELINE]) return false;
  if (a->degree[AA_AXIS_PIPELINE] == 1) return true;
  return a->schedule == b->schedule && a->vpp == b->vpp && a->partition == b->partition &&
         a->bounds == b->bounds; /* one stored copy per distinct cut (aa_strategy_set_bounds) */
}

/* A candidate that does at least the work of one measured ok (or skipped
 * by its setting's micro-batch stop) cannot win: the enumeration puts the
 * cheaper knob first (no checkpointing, ZeRO 2 before 3, on CPUs fp32),
 * so that one has had its turn. Writes the reason into c. */
static bool dominated(const aa_search_t *s, aa_cand_t *c) {
  char why[160];
  for (size_t k = 0; k < s->n; k++) {
    const aa_cand_t *m = &s->c[k];
    bool ok = m->state == AA_CAND_DONE && m->status == AA_STORE_RUN_OK;
    if ((!ok && !m->skipped) || !same_pipeline(&c->s, &m->s) ||
        !aa_cost_dominated(&c->s, &m->s, s->cuda, why, sizeof why))
      continue;
    if (ok)
      snprintf(c->reason, sizeof c->reason, "not measured: %s does at least the work of %s (%.0f tokens/s): %s",
               c->key, m->key, m->tokens_per_s, why);
    else
      snprintf(c->reason, sizeof c->reason, "skipped: it does at least the work of %s, which was skipped: %s", m->key,
               why);
    return true;
  }
  return false;
}

/* A candidate that could not beat the best measured run even at the
 * devices' peak: dp * cp * peak / (the FLOPs its most loaded rank must
 * execute per token of its replica: strategies/cost.h, per pipeline stage,
 * every stage seeing every token of its context rank's share, the cp
 * ranks of a context group each a 1/cp share of every sequence) is a
 * bound no implementation passes. */
static bool beyond_peak(const aa_search_t *s, aa_cand_t *c) {
  if (!(s->peak_flops > 0) || !(s->best > 0)) return false;
  double bound = (double)c->s.degree[AA_AXIS_DATA] * c->s.degree[AA_AXIS_CONTEXT] * s->peak_flops /
                 aa_cost_min_flops_per_token(&s->arch, &c->s);
  if (bound >= s->best) return false;
  snprintf(c->reason, sizeof c->reason,
           "not measured: at the devices' peak of %.0f TFLOP/s each it would reach at most %.0f tokens/s, and %.0f "
           "were measured",
           s->peak_flops / 1e12, bound, s->best);
  return true;
}

/* Candidate c's prediction refitted to the measurements so far (its
 * layout's correction, aa_cand_t.corr), 0 without one. */
static double corrected(const aa_search_t *s, const aa_cand_t *c) {
  return c->predicted > 0 ? c->predicted * (s->fitted ? c->corr : 1) : 0;
}

/* Whether pending candidate i goes before pending candidate k: the --from
 * tiers first, then the higher refitted prediction (0 when there is none: after
 * every predicted one), then the enumeration's order. */
static bool before(const aa_search_t *s, int i, int k) {
  const aa_cand_t *a = &s->c[i], *b = &s->c[k];
  if (a->tier != b->tier) return a->tier < b->tier;
  const double pa = corrected(s, a), pb = corrected(s, b);
  if (pa != pb) return pa > pb;
  return i < k;
}

/* The stop rule: candidate c's optimistic bound, its prediction refitted
 * and widened by the error so far, does not reach the best measured run.
 * Writes the reason with the figures into c. */
static bool below_bound(aa_search_t *s, aa_cand_t *c) {
  if (!s->calibrated || !s->fitted || !(c->predicted > 0) || !(s->best > 0)) return false;
  double bound = c->predicted * c->corr * (1 + c->err);
  if (bound >= s->best) return false;
  snprintf(c->reason, sizeof c->reason,
           "not measured: predicted at most %.0f tokens/s (%.0f predicted × %.2f correction, +%.0f %% "
           "error so far), below the best measured %.0f",
           bound, c->predicted, c->corr, 100 * c->err, s->best);
  return true;
}

/* The pending candidate to dry-run next after the rules of aa__search_next
 * have pruned what they drop; -1 = none. Without predictions the first in
 * the enumeration's order (the rest keep their turn), with them the first
 * by before(), which looks at every pending one. */
static int pick(aa_search_t *s, double now) {
  int best = -1;
  for (size_t i = 0; i < s->n; i++) {
    aa_cand_t *c = &s->c[i];
    if (c->state != AA_CAND_PENDING) continue;
    if (s->max_dryruns > 0 && s->dispatched >= s->max_dryruns) {
      snprintf(c->reason, sizeof c->reason, "not measured: max_dryruns %d reached", s->max_dryruns);
      c->state = AA_CAND_PRUNED;
    } else if (s->deadline > 0 && now >= s->deadline) {
      snprintf(c->reason, sizeof c->reason, "not measured: the search time limit of %d s was reached",
               s->time_limit_s);
      c->state = AA_CAND_PRUNED;
    } else if (!s->exhaustive && s->setting_stop[c->setting][0]) {
      snprintf(c->reason, sizeof c->reason, "%s", s->setting_stop[c->setting]);
      c->state = AA_CAND_PRUNED;
      c->skipped = true;
    } else if (!s->exhaustive && (dominated(s, c) || beyond_peak(s, c))) {
      c->state = AA_CAND_PRUNED;
    } else {
      if (best < 0 || before(s, (int)i, best)) best = (int)i;
      if (!s->calibrated) break;
    }
  }
  return best;
}

int aa__search_next(aa_search_t *s, double now) {
  int i = pick(s, now);
  if (i < 0 || s->exhaustive || !below_bound(s, &s->c[i])) return i;
  /* The most promising candidate cannot beat the best: the search is over
   * for every predicted one that cannot either (in prediction order that is
   * all of them; --from tiers may leave some), each with its own figures. */
  for (size_t k = 0; k < s->n; k++) {
    aa_cand_t *c = &s->c[k];
    if (c->state == AA_CAND_PENDING && below_bound(s, c)) {
      c->state = AA_CAND_PRUNED;
      s->bound_pruned++;
    }
  }
  return pick(s, now);
}

/* The micro-batches a step of strategy st (resolved) runs on each rank. */
static int micro_batches(const aa_search_t *s, const aa_strategy_t *st) {
  int per = st->degree[AA_AXIS_DATA] * st->micro_batch;
  return per > 0 && s->global_batch > 0 ? s->global_batch / per : 1;
}

double aa__search_predict(const aa_search_t *s, int i) {
  const aa_cand_t *c = &s->c[i], *near = NULL;
  if (c->predicted > 0) return corrected(s, c);
  double best = INFINITY;
  for (size_t k = 0; k < s->n; k++) {
    const aa_cand_t *m = &s->c[k];
    if (m->state != AA_CAND_DONE || m->status != AA_STORE_RUN_OK || !(m->tokens_per_s > 0)) continue;
    double d = 4.0 * (m->s.amp != c->s.amp) + !same_pipeline(&m->s, &c->s) + (m->s.sp != c->s.sp) +
               (m->s.zero != c->s.zero) + (m->s.ckpt != c->s.ckpt) +
               fabs(log2((double)m->s.micro_batch / c->s.micro_batch));
    for (int a = 0; a < AA_AXES; a++)
      d += 2.0 * (m->s.degree[a] != c->s.degree[a]) + fabs(log2((double)m->s.degree[a] / c->s.degree[a]));
    if (d <= best) {
      best = d;
      near = m;
    }
  }
  if (!near) return 0;
  /* The most loaded rank of a strategy training r tokens/s computes r /
   * (dp x cp) x (its FLOPs per token: strategies/cost.h, its stage's)
   * FLOP/s for the part of the step outside the pipeline's bubble: a
   * context rank holds 1 / cp of its replica's tokens. */
  const double near_ranks = (double)near->s.degree[AA_AXIS_DATA] * near->s.degree[AA_AXIS_CONTEXT],
               ranks = (double)c->s.degree[AA_AXIS_DATA] * c->s.degree[AA_AXIS_CONTEXT];
  double rate = near->tokens_per_s * aa_cost_flops_per_token(&s->arch, &near->s) / near_ranks /
                (1 - aa_cost_bubble(&near->s, micro_batches(s, &near->s)));
  return ranks * rate * (1 - aa_cost_bubble(&c->s, micro_batches(s, &c->s))) /
         aa_cost_flops_per_token(&s->arch, &c->s);
}

void aa__search_stop(aa_search_t *s, const char *reason) {
  for (size_t i = 0; i < s->n; i++)
    if (s->c[i].state == AA_CAND_PENDING) {
      snprintf(s->c[i].reason, sizeof s->c[i].reason, "%s", reason);
      s->c[i].state = AA_CAND_PRUNED;
    }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of the n values of r (sorted in place). */
static double median(double *r, int n) {
  qsort(r, (size_t)n, sizeof *r, cmp_double);
  return n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
}

/* Whether a and b run the same parallel layout (degrees and sequence
 * parallelism): the step-time model misses each layout by its own factor
 * (on CPUs the tensor-parallel ones by far the most: its groups meet
 * several times a block and wait for each other, which the collectives'
 * calibration, timed alone, does not see), so each is refitted to its own
 * measurements once it has some. */
static bool same_layout(const aa_strategy_t *a, const aa_strategy_t *b) {
  return !memcmp(a->degree, b->degree, sizeof a->degree) && a->sp == b->sp;
}

/* Whether a and b are of one class: the same layout at the same
 * micro-batch. The calibration times ops at each micro-batch's shapes, and
 * misses them by different factors too (measured at cpu:4 on 2 cores: it
 * overrated micro-batch 1 by 36 % and micro-batch 4 not at all), so a
 * correction measured at one micro-batch does not carry to another. */
static bool same_class(const aa_strategy_t *a, const aa_strategy_t *b) {
  return same_layout(a, b) && a->micro_batch == b->micro_batch;
}

/* The measured groups of one kind (classes or layouts), each with its
 * correction: the median of measured / predicted over its runs. */
typedef struct {
  const aa_strategy_t *s;
  double corr;
} group_t;

static int group_of(const group_t *g, int n, bool (*same)(const aa_strategy_t *, const aa_strategy_t *),
                    const aa_strategy_t *x) {
  int l = 0;
  while (l < n && !same(g[l].s, x))
    l++;
  return l < n ? l : -1;
}

static int groups(const aa_search_t *s, bool (*same)(const aa_strategy_t *, const aa_strategy_t *), group_t *g,
                  double *q) {
  int n = 0;
  for (size_t i = 0; i < s->n; i++) {
    const aa_cand_t *c = &s->c[i];
    if (c->oks > 0 && c->predicted > 0 && group_of(g, n, same, &c->s) < 0) g[n++].s = &c->s;
  }
  for (int l = 0; l < n; l++) {
    int m = 0;
    for (size_t j = 0; j < s->n; j++) {
      const aa_cand_t *o = &s->c[j];
      if (o->oks > 0 && o->predicted > 0 && same(g[l].s, &o->s)) q[m++] = o->tokens_per_s / o->predicted;
    }
    g[l].corr = median(q, m);
  }
  return n;
}

/* Refits the calibrated model to the ok runs with a prediction. Over all
 * of them: the correction is the median of measured / predicted (robust to
 * one odd run). Per candidate: the median over the measured runs of its
 * class (layout and micro-batch), else of its layout, else the overall
 * one. The error is the largest miss left after each run's own class
 * correction, at least the floors of planner_internal.h. A candidate whose
 * class has no measurement also allows for the largest gap between a
 * measured class's correction and the overall one, and for the raw model
 * itself (its layout's, or the overall, correction need not carry over to
 * it): its bound reaches at least its raw prediction, so the best
 * predicted of every class that could win is measured before the search
 * stops. The groups are worked out once per refit and candidates look
 * theirs up (O(n x groups), not O(n^2)). A failed allocation keeps the
 * previous fit. */
static void refit(aa_search_t *s) {
  double *r = malloc(s->n * sizeof *r), *q = malloc(s->n * sizeof *q);
  group_t *cls = malloc(s->n * sizeof *cls), *lay = malloc(s->n * sizeof *lay);
  int k = 0;
  if (!r || !q || !cls || !lay) goto out;
  for (size_t i = 0; i < s->n; i++) {
    const aa_cand_t *c = &s->c[i];
    if (c->oks > 0 && c->predicted > 0) r[k++] = c->tokens_per_s / c->predicted;
  }
  if (k == 0) goto out;
  const int ncls = groups(s, same_class, cls, q), nlay = groups(s, same_layout, lay, q);
  const double med = median(r, k);
  double err = 0, apart = 0;
  for (int l = 0; l < ncls; l++) apart = fmax(apart, fabs(cls[l].corr / med - 1));
  for (size_t i = 0; i < s->n; i++) {
    aa_cand_t *c = &s->c[i];
    const int gc = group_of(cls, ncls, same_class, &c->s);
    const int gl = gc >= 0 ? -1 : group_of(lay, nlay, same_layout, &c->s);
    c->corr = gc >= 0 ? cls[gc].corr : gl >= 0 ? lay[gl].corr : med;
    c->err = gc >= 0 ? 0 : -1; /* -1: set below, its class has no measurement */
    if (gc >= 0 && c->oks > 0 && c->predicted > 0)
      err = fmax(err, fabs(c->tokens_per_s / c->predicted / c->corr - 1));
  }
  const double floor = k == 1 ? AA_SEARCH_ERROR_FLOOR_ONE : AA_SEARCH_ERROR_FLOOR;
  s->fitted = k;
  s->correction = med;
  s->error = fmax(err, floor);
  for (size_t i = 0; i < s->n; i++) {
    aa_cand_t *c = &s->c[i];
    const double raw = c->corr < 1 ? 1 / c->corr - 1 : 0;
    c->err = c->err < 0 ? fmax(fmax(s->error, apart), raw) : s->error;
  }
out:
  free(r);
  free(q);
  free(cls);
  free(lay);
}

void aa__search_set_prediction(aa_search_t *s, int i, double tokens_per_s) {
  if (!(tokens_per_s > 0)) return;
  s->c[i].predicted = tokens_per_s;
  s->calibrated = true;
  if (s->c[i].oks > 0) refit(s); /* measured before the calibration came (a resumed search) */
}

void aa__search_done(aa_search_t *s, int i, aa_store_run_status_t status, double tokens_per_s, double spread) {
  aa_cand_t *c = &s->c[i];
  bool again = c->measures++ > 0; /* a re-measure: it adds to the mean, the setting's rules have had it */
  c->state = AA_CAND_DONE;
  if (status != AA_STORE_RUN_OK) {
    if (!c->oks) {
      c->status = status;
      c->tokens_per_s = tokens_per_s;
    }
    return; /* an oom at a larger micro-batch says nothing of smaller ones */
  }
  if (!c->oks || tokens_per_s > c->hi) c->best_run_id = c->run_id;
  c->lo = c->oks && c->lo < tokens_per_s ? c->lo : tokens_per_s;
  c->hi = c->oks && c->hi > tokens_per_s ? c->hi : tokens_per_s;
  c->sum += tokens_per_s;
  c->oks++;
  c->spread = fmax(c->spread, spread);
  c->status = status;
  c->tokens_per_s = c->sum / c->oks;
  if (c->tokens_per_s > s->best) s->best = c->tokens_per_s;
  if (c->predicted > 0) refit(s);
  if (again) return;
  int k = c->setting;
  double best = s->setting_best[k];
  if (best > 0 && tokens_per_s < best) {
    /* Slower only beyond what the two runs' own step times spread by: a
     * 0.06 % difference between runs that each vary by 5 % decides nothing. */
    double lower = 1 - tokens_per_s / best, allow = spread > s->setting_spread[k] ? spread : s->setting_spread[k];
    if (lower > allow)
      snprintf(s->setting_stop[k], sizeof s->setting_stop[k],
               "skipped: micro_batch %d measured slower than micro_batch %d (%.0f < %.0f tokens/s: %.1f %% lower, beyond "
               "the runs' step-time spread of %.1f %%)",
               c->s.micro_batch, s->setting_mb[k], tokens_per_s, best, 100 * lower, 100 * allow);
    return;
  }
  s->setting_best[k] = tokens_per_s;
  s->setting_spread[k] = spread;
  s->setting_mb[k] = c->s.micro_batch;
}

/* --- the noise-aware choice ----------------------------------------------------------- */

double aa__search_noise(const aa_cand_t *c) {
  double range = c->oks > 1 && c->tokens_per_s > 0 ? (c->hi - c->lo) / c->tokens_per_s : 0;
  return fmax(c->spread, range);
}

/* The ok candidate of highest mean, -1 = none. */
static int winner(const aa_search_t *s) {
  int w = -1;
  for (size_t i = 0; i < s->n; i++)
    if (s->c[i].oks > 0 && (w < 0 || s->c[i].tokens_per_s > s->c[w].tokens_per_s)) w = (int)i;
  return w;
}

/* Whether the winner's mean is not above o's by more than their noise. */
static bool within_noise(const aa_search_t *s, int w, int o) {
  const aa_cand_t *a = &s->c[w], *b = &s->c[o];
  double lower = 1 - b->tokens_per_s / a->tokens_per_s;
  return lower <= fmax(aa__search_noise(a), aa__search_noise(b));
}

/* The leaders other than the winner w: within its noise, highest mean
 * first, AA_SEARCH_LEADERS_MAX - 1 at most, into out. Returns how many. */
static int leaders(const aa_search_t *s, int w, int *out) {
  int n = 0;
  while (n < AA_SEARCH_LEADERS_MAX - 1) {
    int next = -1;
    for (size_t i = 0; i < s->n; i++) {
      bool taken = (int)i == w;
      for (int k = 0; k < n && !taken; k++)
        taken = out[k] == (int)i;
      if (taken || s->c[i].oks == 0 || !within_noise(s, w, (int)i)) continue;
      if (next < 0 || s->c[i].tokens_per_s > s->c[next].tokens_per_s) next = (int)i;
    }
    if (next < 0) break;
    out[n++] = next;
  }
  return n;
}

int aa__search_remeasure_next(aa_search_t *s, double now) {
  int w = winner(s), lead[AA_SEARCH_LEADERS_MAX];
  if (w < 0 || s->exhaustive) return -1; /* exhaustive: every candidate once, as measured */
  if ((s->max_dryruns > 0 && s->dispatched >= s->max_dryruns) || (s->deadline > 0 && now >= s->deadline))
    return -1;
  int n = leaders(s, w, lead + 1);
  if (n == 0) return -1; /* decided */
  lead[0] = w;
  int pick = -1;
  for (int k = 0; k <= n; k++) {
    const aa_cand_t *c = &s->c[lead[k]];
    if (c->measures > AA_SEARCH_REMEASURE) continue;
    if (pick < 0 || c->measures < s->c[pick].measures) pick = lead[k];
  }
  return pick;
}

int aa__search_verdict(const aa_search_t *s, char *out, size_t n) {
  int w = winner(s), r = -1;
  if (w < 0) {
    snprintf(out, n, "no strategy measured ok");
    return -1;
  }
  for (size_t i = 0; i < s->n; i++)
    if ((int)i != w && s->c[i].oks > 0 && (r < 0 || s->c[i].tokens_per_s > s->c[r].tokens_per_s)) r = (int)i;
  const aa_cand_t *a = &s->c[w];
  if (r < 0) {
    snprintf(out, n, "best %s (%.0f tokens/s, %d run%s), the only strategy measured ok", a->key,
             a->tokens_per_s, a->oks, a->oks == 1 ? "" : "s");
    return w;
  }
  const aa_cand_t *b = &s->c[r];
  double ratio = a->tokens_per_s / b->tokens_per_s, spread = fmax(aa__search_noise(a), aa__search_noise(b));
  if (within_noise(s, w, r))
    snprintf(out, n,
             "best %s, within the noise of %s (%.2f×, spread %.0f %%, %d and %d runs): kept the faster mean",
             a->key, b->key, ratio, 100 * spread, a->oks, b->oks);
  else
    snprintf(out, n, "best %s: %.2f× the runner-up %s, spread %.0f %% (%d and %d runs)", a->key, ratio,
             b->key, 100 * spread, a->oks, b->oks);
  return w;
}
