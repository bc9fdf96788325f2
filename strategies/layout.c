/* The mesh arithmetic (see layout.h): positions, coordinates and the
 * split arguments of each axis, from the degrees, the axis order and the
 * rank order of a strategy. */
#include "layout.h"

#include "strategy_internal.h"

#include <stdio.h>
#include <string.h>

/* The checks aa_layout_of promises, plus each axis's stride. */
static int check(const aa_strategy_t *s, int stride[AA_AXES]) {
  bool degrees_ok = true;
  for (int a = 0; a < AA_AXES; a++)
    degrees_ok = degrees_ok && s->degree[a] >= 1 && s->degree[a] <= AA_STRATEGY_WORLD_MAX;
  if (!degrees_ok || aa_strategy_world(s) > AA_STRATEGY_WORLD_MAX) {
    char words[160];
    aa__strategy_world_words(s, words, sizeof words);
    return aa_error(AA_EINVAL, "layout: %s must be between 1 and %d ranks", words, AA_STRATEGY_WORLD_MAX);
  }
  if (!aa_axis_order_valid(s->order))
    return aa_error(AA_EINVAL, "layout: the axis order must list every axis once");
  char rule[256];
  if (aa__rank_order_check(s, rule, sizeof rule)) return aa_error(AA_EINVAL, "layout: rank_order: %s", rule);
  int st = 1;
  for (int i = 0; i < AA_AXES; i++) {
    stride[s->order[i]] = st;
    st *= s->degree[s->order[i]];
  }
  return 0;
}

/* The layout of rank under s into *l, with each axis's stride. */
static int locate(aa_layout_t *l, int stride[AA_AXES], const aa_strategy_t *s, int rank) {
  int rc = check(s, stride);
  if (rc) return rc;
  *l = (aa_layout_t){.world = (int)aa_strategy_world(s), .rank = rank, .pos = rank};
  memcpy(l->order, s->order, sizeof l->order);
  if (rank < 0 || rank >= l->world)
    return aa_error(AA_EINVAL, "layout: rank %d is outside 0..%d (a world of %d ranks)", rank, l->world - 1,
                    l->world);
  if (s->nranks) { /* the inverse permutation; a world is at most 4096 ranks */
    l->pos = 0;
    while (s->rank_order[l->pos] != rank)
      l->pos++;
  }
  for (int a = 0; a < AA_AXES; a++) {
    int size = s->degree[a];
    l->size[a] = size;
    l->coord[a] = (l->pos / stride[a]) % size;
    /* The group's first position, numbered among the first positions of
     * this axis's groups: those below it with coordinate 0 on the axis. */
    int first = l->pos - l->coord[a] * stride[a];
    l->color[a] = first % stride[a] + first / (stride[a] * size) * stride[a];
  }
  return 0;
}

int aa_layout_color(const aa_layout_t *l, unsigned mask) {
  int color = 0, radix = 1;
  for (int i = 0; i < AA_AXES; i++) {
    aa_axis_t a = l->order[i];
    if (mask & 1u << a) continue;
    color += l->coord[a] * radix;
    radix *= l->size[a];
  }
  return color;
}

int aa_layout_key(const aa_layout_t *l, unsigned mask) {
  int key = 0, radix = 1;
  for (int i = 0; i < AA_AXES; i++) {
    aa_axis_t a = l->order[i];
    if (!(mask & 1u << a)) continue;
    key += l->coord[a] * radix;
    radix *= l->size[a];
  }
  return key;
}

int aa_layout_of(aa_layout_t *out, const aa_strategy_t *s, int rank) {
  aa_layout_t l;
  int stride[AA_AXES];
  int rc = locate(&l, stride, s, rank);
  if (!rc) *out = l;
  return rc;
}

int aa_layout_group(int *members, size_t cap, const aa_strategy_t *s, int rank, aa_axis_t axis) {
  if ((unsigned)axis >= AA_AXES) return aa_error(AA_EINVAL, "layout: unknown axis %d", (int)axis);
  aa_layout_t l;
  int stride[AA_AXES];
  int rc = locate(&l, stride, s, rank);
  if (rc) return rc;
  int size = l.size[axis];
  if (cap < (size_t)size)
    return aa_error(AA_EINVAL, "layout: a %s group has %d ranks, room for %zu", aa_axis_name(axis), size,
                    cap);
  int first = l.pos - l.coord[axis] * stride[axis];
  for (int k = 0; k < size; k++) {
    int p = first + k * stride[axis];
    members[k] = s->nranks ? s->rank_order[p] : p;
  }
  return size;
}

void aa_layout_expert(const aa_layout_t *l, const aa_strategy_t *s, aa_layout_expert_t *out) {
  const unsigned dc = 1u << AA_AXIS_DATA | 1u << AA_AXIS_CONTEXT;
  const int replicas = l->size[AA_AXIS_DATA] * l->size[AA_AXIS_CONTEXT];
  const int ep = s->ep > 1 ? s->ep : 1, color = aa_layout_color(l, dc), r = aa_layout_key(l, dc);
  out->size = ep;
  out->key = r % ep;
  out->color = color * (replicas / ep) + r / ep;
  out->data_size = replicas / ep;
  out->data_key = r / ep;
  out->data_color = color * ep + r % ep;
}

int aa_layout_expert_group(int *members, size_t cap, const aa_strategy_t *s, int rank, bool data) {
  aa_layout_t me;
  int rc = aa_layout_of(&me, s, rank);
  if (rc) return rc;
  aa_layout_expert_t e;
  aa_layout_expert(&me, s, &e);
  const int size = data ? e.data_size : e.size, color = data ? e.data_color : e.color;
  if (cap < (size_t)size)
    return aa_error(AA_EINVAL, "layout: an expert%s group has %d ranks, room for %zu", data ? "-data" : "",
                    size, cap);
  for (int q = 0; q < me.world; q++) { /* a world is at most 4096 ranks: a scan is fine for tests and logs */
    aa_layout_t l;
    aa_layout_expert_t x;
    if ((rc = aa_layout_of(&l, s, q))) return rc;
    aa_layout_expert(&l, s, &x);
    if ((data ? x.data_color : x.color) == color) members[data ? x.data_key : x.key] = q;
  }
  return size;
}
