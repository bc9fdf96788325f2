/* The mesh's numbering in a strategy: the axis order (which axis varies
 * fastest, ATorch's parallel_mode list order) and the explicit rank order
 * (ATorch's rank_order), their names, and the rules both file forms hold
 * them to. The arithmetic that turns them into groups: layout.c. */
#include "strategy.h"

#include "strategy_internal.h"

#include "../common/json.h"

#include <stdio.h>
#include <string.h>

/* Each order's axes, fastest first, in aa_axis_order_t order. */
static const aa_axis_t order_axes[AA_ORDERS][AA_AXES] = {
    [AA_ORDER_TDP] = {AA_AXIS_TENSOR, AA_AXIS_DATA, AA_AXIS_PIPELINE},
    [AA_ORDER_TPD] = {AA_AXIS_TENSOR, AA_AXIS_PIPELINE, AA_AXIS_DATA},
    [AA_ORDER_DTP] = {AA_AXIS_DATA, AA_AXIS_TENSOR, AA_AXIS_PIPELINE},
    [AA_ORDER_DPT] = {AA_AXIS_DATA, AA_AXIS_PIPELINE, AA_AXIS_TENSOR},
    [AA_ORDER_PTD] = {AA_AXIS_PIPELINE, AA_AXIS_TENSOR, AA_AXIS_DATA},
    [AA_ORDER_PDT] = {AA_AXIS_PIPELINE, AA_AXIS_DATA, AA_AXIS_TENSOR},
};

static const char *const order_names[AA_ORDERS] = {"tdp", "tpd", "dtp", "dpt", "ptd", "pdt"};

const char *aa_axis_name(aa_axis_t a) {
  switch (a) {
  case AA_AXIS_DATA: return "data";
  case AA_AXIS_TENSOR: return "tensor";
  case AA_AXIS_PIPELINE: return "pipeline";
  }
  return "?";
}

int aa_strategy_degree(const aa_strategy_t *s, aa_axis_t a) {
  switch (a) {
  case AA_AXIS_DATA: return s->dp;
  case AA_AXIS_TENSOR: return s->tp;
  case AA_AXIS_PIPELINE: return s->pp;
  }
  return 0;
}

int aa__axis_from_name(const char *name) {
  for (int a = 0; a < AA_AXES; a++)
    if (strcmp(name, aa_axis_name((aa_axis_t)a)) == 0) return a;
  return -1;
}

bool aa_strategy_rank_order_is_identity(const aa_strategy_t *s) {
  for (int i = 0; i < s->nranks && i < AA_STRATEGY_WORLD_MAX; i++)
    if (s->rank_order[i] != i) return false;
  return true;
}

static bool valid_order(aa_axis_order_t o) { return (unsigned)o < AA_ORDERS; }

void aa_axis_order_axes(aa_axis_order_t o, aa_axis_t out[AA_AXES]) {
  memcpy(out, order_axes[valid_order(o) ? o : AA_ORDER_TDP], sizeof order_axes[0]);
}

const char *aa_axis_order_name(aa_axis_order_t o) { return valid_order(o) ? order_names[o] : "?"; }

aa_axis_order_t aa__axis_order_from(const aa_axis_t *listed, int n) {
  aa_axis_t want[AA_AXES];
  int k = 0;
  for (int i = 0; i < n && k < AA_AXES; i++)
    want[k++] = listed[i];
  for (int i = 0; i < AA_AXES && k < AA_AXES; i++) {
    aa_axis_t a = order_axes[AA_ORDER_TDP][i];
    bool seen = false;
    for (int j = 0; j < n; j++)
      seen = seen || listed[j] == a;
    if (!seen) want[k++] = a;
  }
  for (int o = 0; o < AA_ORDERS; o++)
    if (memcmp(order_axes[o], want, sizeof want) == 0) return (aa_axis_order_t)o;
  return AA_ORDER_TDP; /* listed was not distinct */
}

/* The axes of order o with a degree > 1 in s, fastest first; their count. */
static int parallel_axes(const aa_strategy_t *s, aa_axis_order_t o, aa_axis_t out[AA_AXES]) {
  int n = 0;
  for (int i = 0; i < AA_AXES; i++)
    if (aa_strategy_degree(s, order_axes[o][i]) > 1) out[n++] = order_axes[o][i];
  return n;
}

aa_axis_order_t aa__strategy_effective_order(const aa_strategy_t *s) {
  if (!valid_order(s->order)) return s->order;
  aa_axis_t mine[AA_AXES], dflt[AA_AXES];
  int n = parallel_axes(s, s->order, mine);
  if (parallel_axes(s, AA_ORDER_TDP, dflt) == n && memcmp(mine, dflt, (size_t)n * sizeof mine[0]) == 0)
    return AA_ORDER_TDP;
  return aa__axis_order_from(mine, n);
}

/* A permutation of 0..n-1, or the rule it breaks. */
static int check_permutation(const uint16_t *r, int n, char *rule, size_t cap) {
  int16_t at[AA_STRATEGY_WORLD_MAX];
  memset(at, 0xff, sizeof at[0] * (size_t)n); /* -1: not seen yet */
  for (int i = 0; i < n; i++) {
    if (r[i] >= n) {
      snprintf(rule, cap, "rank %d at position %d is outside 0..%d (a rank order is a permutation of 0..%d)",
               r[i], i, n - 1, n - 1);
      return AA_EINVAL;
    }
    if (at[r[i]] >= 0) {
      snprintf(rule, cap,
               "rank %d is given twice (positions %d and %d); a rank order is a permutation of 0..%d", r[i],
               at[r[i]], i, n - 1);
      return AA_EINVAL;
    }
    at[r[i]] = (int16_t)i;
  }
  return 0;
}

int aa__rank_order_read(aa_strategy_t *s, const json_t *v, char *rule, size_t cap) {
  if (!json_is_array(v)) {
    snprintf(rule, cap, "must be a list of ranks (got %s)", aa_json_type_name(v));
    return AA_EINVAL;
  }
  size_t n = json_array_size(v);
  if (n < 1 || n > AA_STRATEGY_WORLD_MAX) {
    snprintf(rule, cap, "must list 1 to %d ranks (got %zu)", AA_STRATEGY_WORLD_MAX, n);
    return AA_EINVAL;
  }
  uint16_t r[AA_STRATEGY_WORLD_MAX];
  size_t i;
  const json_t *x;
  json_array_foreach(v, i, x) {
    if (!json_is_integer(x)) {
      snprintf(rule, cap, "position %zu: must be an integer rank (got %s)", i, aa_json_type_name(x));
      return AA_EINVAL;
    }
    long long k = json_integer_value(x);
    if (k < 0 || k >= (long long)n) {
      snprintf(rule, cap,
               "rank %lld at position %zu is outside 0..%zu (a rank order is a permutation of 0..%zu)", k, i,
               n - 1, n - 1);
      return AA_EINVAL;
    }
    r[i] = (uint16_t)k;
  }
  int rc = check_permutation(r, (int)n, rule, cap);
  if (rc) return rc;
  memcpy(s->rank_order, r, n * sizeof r[0]);
  s->nranks = (int)n;
  return 0;
}

int aa__rank_order_check(const aa_strategy_t *s, char *rule, size_t cap) {
  if (s->nranks == 0) return 0;
  if (s->nranks < 0 || s->nranks > AA_STRATEGY_WORLD_MAX) {
    snprintf(rule, cap, "must list 1 to %d ranks (got %d)", AA_STRATEGY_WORLD_MAX, s->nranks);
    return AA_EINVAL;
  }
  long long world = (long long)s->dp * s->tp * s->pp;
  if (world != s->nranks) {
    snprintf(rule, cap, "lists %d rank%s, but data * tensor * pipeline = %d * %d * %d = %lld", s->nranks,
             s->nranks == 1 ? "" : "s", s->dp, s->tp, s->pp, world);
    return AA_EINVAL;
  }
  return check_permutation(s->rank_order, s->nranks, rule, cap);
}
