/* The mesh arithmetic (see layout.h): positions, coordinates and the
 * split arguments of each axis, from the degrees, the axis order and the
 * rank order of a strategy. */
#include "layout.h"

#include "strategy_internal.h"

#include <stdio.h>
#include <string.h>

/* The checks aa_layout_of promises, plus each axis's stride. */
static int check(const aa_strategy_t *s, int stride[AA_AXES]) {
  long long world = (long long)s->dp * s->tp * s->pp;
  if (s->dp < 1 || s->tp < 1 || s->pp < 1 || world > AA_STRATEGY_WORLD_MAX)
    return aa_error(AA_EINVAL, "layout: dp * tp * pp = %d * %d * %d must be between 1 and %d ranks", s->dp,
                    s->tp, s->pp, AA_STRATEGY_WORLD_MAX);
  if ((unsigned)s->order >= AA_ORDERS)
    return aa_error(AA_EINVAL, "layout: unknown axis order %d", (int)s->order);
  char rule[256];
  if (aa__rank_order_check(s, rule, sizeof rule)) return aa_error(AA_EINVAL, "layout: rank_order: %s", rule);
  aa_axis_t axes[AA_AXES];
  aa_axis_order_axes(s->order, axes);
  int st = 1;
  for (int i = 0; i < AA_AXES; i++) {
    stride[axes[i]] = st;
    st *= aa_strategy_degree(s, axes[i]);
  }
  return 0;
}

/* The layout of rank under s into *l, with each axis's stride. */
static int locate(aa_layout_t *l, int stride[AA_AXES], const aa_strategy_t *s, int rank) {
  int rc = check(s, stride);
  if (rc) return rc;
  *l = (aa_layout_t){.world = s->dp * s->tp * s->pp, .rank = rank, .pos = rank};
  if (rank < 0 || rank >= l->world)
    return aa_error(AA_EINVAL, "layout: rank %d is outside 0..%d (dp * tp * pp = %d)", rank, l->world - 1,
                    l->world);
  if (s->nranks) { /* the inverse permutation; a world is at most 4096 ranks */
    l->pos = 0;
    while (s->rank_order[l->pos] != rank)
      l->pos++;
  }
  for (int a = 0; a < AA_AXES; a++) {
    int size = aa_strategy_degree(s, (aa_axis_t)a);
    l->size[a] = size;
    l->coord[a] = (l->pos / stride[a]) % size;
    /* The group's first position, numbered among the first positions of
     * this axis's groups: those below it with coordinate 0 on the axis. */
    int first = l->pos - l->coord[a] * stride[a];
    l->color[a] = first % stride[a] + first / (stride[a] * size) * stride[a];
  }
  return 0;
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
