/* The mesh's numbering in a strategy: the axis order (which axis varies
 * fastest, ATorch's parallel_mode list order) and the explicit rank order
 * (ATorch's rank_order), their names, and the rules both file forms hold
 * them to. The arithmetic that turns them into groups: layout.c. */
#include "strategy.h"

#include "strategy_internal.h"

#include "../common/json.h"

#include <stdio.h>
#include <string.h>

int aa_strategy_degree(const aa_strategy_t *s, aa_axis_t a) {
  return (unsigned)a < AA_AXES ? s->degree[a] : 0;
}

bool aa_strategy_axis_shown(const aa_strategy_t *s, aa_axis_t a) {
  return (unsigned)a < AA_AXES && (aa_axis_info(a)->always || s->degree[a] != 1);
}

const char *aa_strategy_order_letters(const aa_strategy_t *s, const aa_axis_t order[AA_AXES],
                                      char out[AA_AXES + 1]) {
  int n = 0;
  for (int i = 0; i < AA_AXES; i++)
    if (aa_strategy_axis_shown(s, order[i])) out[n++] = aa_axis_info(order[i])->letter;
  out[n] = '\0';
  return out;
}

long long aa_strategy_world(const aa_strategy_t *s) {
  long long w = 1;
  for (int a = 0; a < AA_AXES; a++)
    w *= s->degree[a];
  return w;
}

int aa_strategy_host_unit(const aa_strategy_t *s) {
  int unit = 1;
  for (int a = 0; a < AA_AXES; a++)
    if (aa_axis_host_mask() & 1u << a) unit *= s->degree[a];
  return unit;
}

bool aa_strategy_rank_order_is_identity(const aa_strategy_t *s) {
  if (!s->rank_order) return true; /* none (nranks > 0 without a list fails aa_strategy_check) */
  for (int i = 0; i < s->nranks && i < AA_STRATEGY_WORLD_MAX; i++)
    if (s->rank_order[i] != i) return false;
  return true;
}

/* The axes of `order` with a degree > 1 in s, fastest first; their count. */
static int parallel_axes(const aa_strategy_t *s, const aa_axis_t order[AA_AXES], aa_axis_t out[AA_AXES]) {
  int n = 0;
  for (int i = 0; i < AA_AXES; i++)
    if (s->degree[order[i]] > 1) out[n++] = order[i];
  return n;
}

void aa_strategy_effective_order(const aa_strategy_t *s, aa_axis_t out[AA_AXES]) {
  aa_axis_t mine[AA_AXES], dflt[AA_AXES], dflt_par[AA_AXES];
  aa_axis_default_order(dflt);
  int n = parallel_axes(s, s->order, mine);
  if (parallel_axes(s, dflt, dflt_par) == n && memcmp(mine, dflt_par, (size_t)n * sizeof mine[0]) == 0) {
    memcpy(out, dflt, sizeof dflt);
    return;
  }
  aa_axis_order_from(out, mine, n);
}

/* "data * tensor * pipeline = 2 * 1 * 2 = 4": the world as the product of
 * the degrees, for messages. */
void aa__strategy_world_words(const aa_strategy_t *s, char *out, size_t cap) {
  size_t o = 0;
  for (int a = 0, k = 0; a < AA_AXES && o < cap; a++)
    if (aa_strategy_axis_shown(s, (aa_axis_t)a))
      o += (size_t)snprintf(out + o, cap - o, "%s%s", k++ ? " * " : "", aa_axis_name((aa_axis_t)a));
  for (int a = 0, k = 0; a < AA_AXES && o < cap; a++)
    if (aa_strategy_axis_shown(s, (aa_axis_t)a))
      o += (size_t)snprintf(out + o, cap - o, "%s%d", k++ ? " * " : " = ", s->degree[a]);
  if (o < cap) snprintf(out + o, cap - o, " = %lld", aa_strategy_world(s));
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
  if (aa_strategy_set_rank_order(s, r, (int)n)) {
    snprintf(rule, cap, "%s", aa_last_error());
    return AA_EINVAL;
  }
  return 0;
}

int aa__rank_order_check(const aa_strategy_t *s, char *rule, size_t cap) {
  if (s->nranks == 0) return 0;
  if (s->nranks < 0 || s->nranks > AA_STRATEGY_WORLD_MAX) {
    snprintf(rule, cap, "must list 1 to %d ranks (got %d)", AA_STRATEGY_WORLD_MAX, s->nranks);
    return AA_EINVAL;
  }
  if (aa_strategy_world(s) != s->nranks) {
    char world[160];
    aa__strategy_world_words(s, world, sizeof world);
    snprintf(rule, cap, "lists %d rank%s, but %s", s->nranks, s->nranks == 1 ? "" : "s", world);
    return AA_EINVAL;
  }
  if (!s->rank_order) { /* nranks set by hand, not by aa_strategy_set_rank_order */
    snprintf(rule, cap, "lists %d ranks, but holds none", s->nranks);
    return AA_EINVAL;
  }
  return check_permutation(s->rank_order, s->nranks, rule, cap);
}
