/* The per-rank layout of a strategy's device mesh: which position of the
 * mesh a global rank holds, its coordinates along each axis (axis.h), and
 * for each axis the (color, key) that a split call
 * (ncclCommSplit, MPI_Comm_split: ranks passing the same color form a
 * group, ordered by key) needs to build that axis's groups from the world.
 *
 * Semantics are ATorch's parallel_mode: the axes are numbered in the
 * strategy's order, fastest first (position p has coordinate
 * (p / stride_a) % degree_a on axis a, stride_a being the product of the
 * degrees of the axes before a), and position p is global rank
 * rank_order[p] (p itself without a rank order). A group of axis a holds the
 * positions that differ only in their a coordinate, in that coordinate's
 * order. So ([("tensor", 4), ("pipeline", 2), ("data", 2)], None) on 16
 * ranks has tensor groups [0..3], [4..7], ..., pipeline groups [0, 4],
 * [1, 5], ..., data groups [0, 8], [1, 9], ...
 *
 * Pure arithmetic on the strategy: no process group, no I/O. The engine's
 * mesh (engine/) splits the world with these numbers. */
#ifndef AA_LAYOUT_H
#define AA_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "strategy.h"

typedef struct aa_layout {
  int world;          /* the product of the degrees (aa_strategy_world) */
  int rank;           /* the global rank described */
  int pos;            /* its position in the mesh: rank_order[pos] == rank (pos == rank without one) */
  int size[AA_AXES];  /* by aa_axis_t: each axis's degree, the size of its groups */
  int coord[AA_AXES]; /* by aa_axis_t: the rank's index along each axis, 0..size-1 */
  /* By aa_axis_t: the color to pass to the split call that builds the
   * axis's groups, numbering them 0..world/size-1 in the order ATorch
   * lists them (by their first position). The split's key is coord, so the
   * rank's index in its group is coord. */
  int color[AA_AXES];
  aa_axis_t order[AA_AXES]; /* the strategy's axis order, fastest first */
} aa_layout_t;

/* The layout of global rank `rank` under s into *out (written only on
 * success). s needs valid degrees (their product at most
 * AA_STRATEGY_WORLD_MAX), a valid order, and a rank order that is none or
 * a permutation of 0..world-1 (as aa_strategy_resolve leaves it); else
 * AA_EINVAL naming the rule, as for a rank outside 0..world-1. */
int aa_layout_of(aa_layout_t *out, const aa_strategy_t *s, int rank);

/* The color of the group that spans the axes in `mask` (bit a for axis
 * a; Megatron's RankGenerator builds its groups from such masks) and holds
 * l's rank: the ranks whose place differs only along those axes share it.
 * Colors number the groups 0..world/size-1 in the order of their first
 * positions; for a single axis it is l->color[axis]. */
int aa_layout_color(const aa_layout_t *l, unsigned mask);

/* l's rank's index in that group: its coordinates on the mask's axes
 * numbered fastest axis first (the split's key), 0..size-1. */
int aa_layout_key(const aa_layout_t *l, unsigned mask);

/* Expert parallelism (s->ep > 1; strategy.h) is no mesh axis: it cuts the
 * group of a rank's data x context replicas (aa_layout_color/key over the
 * data and context axes: the ranks that hold the same dense weights,
 * numbered by key r = 0..dp*cp-1) into expert groups of ep consecutive
 * keys, which split every MoE layer's experts and exchange tokens by
 * all-to-all, and expert-data groups of the keys equal modulo ep, which
 * hold the same experts and reduce their gradients (Megatron's expert and
 * expert-data-parallel groups, in its tp-cp-ep-dp order). For tp 2, dp 4,
 * ep 2 on 8 ranks: expert groups [0, 2], [4, 6], [1, 3], [5, 7];
 * expert-data groups [0, 4], [2, 6], [1, 5], [3, 7]. The colors number
 * each kind of group 0..world/size-1; the keys are the rank's index in it.
 * s->ep 0 or 1: groups of one (expert) and the replicas (expert-data). */
typedef struct aa_layout_expert {
  int size, color, key;                /* the expert group: ep ranks */
  int data_size, data_color, data_key; /* the expert-data group: dp * cp / ep ranks */
} aa_layout_expert_t;
void aa_layout_expert(const aa_layout_t *l, const aa_strategy_t *s, aa_layout_expert_t *out);
/* The global ranks of the expert group (data = false) or expert-data group
 * (data = true) that holds `rank`, in key order, into members (room for
 * cap): its size, or AA_EINVAL as aa_layout_group. For tests and logs. */
int aa_layout_expert_group(int *members, size_t cap, const aa_strategy_t *s, int rank, bool data);

/* The global ranks of the group of axis `axis` that holds `rank`, in
 * group order (by coordinate), into members (room for cap). Returns the
 * group's size (the axis's degree) or AA_EINVAL (as aa_layout_of, or cap
 * smaller than the group, or an unknown axis). For tests and logs. */
int aa_layout_group(int *members, size_t cap, const aa_strategy_t *s, int rank, aa_axis_t axis);

#endif
