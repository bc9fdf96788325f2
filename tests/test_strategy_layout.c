/* The mesh arithmetic (strategies/layout.h) without starting a process:
 * ATorch's parallel_mode example on 16 ranks gives exactly the groups its
 * documentation lists, two other axis orders and an explicit rank order
 * permute them as the same rule says, a single process is a 1x1x1 mesh,
 * the split arguments (color, key) form the same groups, and invalid rank
 * orders are refused with the rule. */
#include "common/aa.h"
#include "strategies/layout.h"
#include "strategies/strategy.h"
#include "tests/aa_test.h"

#include <stdio.h>
#include <string.h>

#define WORLD 16

static aa_strategy_t mesh(const char *json) {
  aa_strategy_t s;
  if (aa_strategy_parse(&s, json, "mesh.json")) {
    fprintf(stderr, "%s: %s\n", json, aa_last_error());
    aa_strategy_default(&s);
  }
  return s;
}

/* Checks that the groups of `axis` over every rank are exactly want
 * (ngroups lists of size ranks, in ATorch's listing order = color order):
 * each rank's group (aa_layout_group) is the listed one holding it, in
 * that order; its color is the list's index and its coordinate (the
 * split's key) its index in it. */
static void expect_groups(int line, const aa_strategy_t *s, aa_axis_t axis, int ngroups, int size,
                          const int *want) {
  for (int r = 0; r < WORLD; r++) {
    int g = -1, k = -1;
    for (int i = 0; i < ngroups * size && g < 0; i++)
      if (want[i] == r) g = i / size, k = i % size;
    CHECK_MSG(g >= 0, "line %d: rank %d is in no %s group", line, r, aa_axis_name(axis));
    if (g < 0) continue;
    int members[WORLD];
    int n = aa_layout_group(members, WORLD, s, r, axis);
    CHECK_MSG(n == size, "line %d: rank %d: %s group of %d, want %d (%s)", line, r, aa_axis_name(axis), n,
              size, aa_last_error());
    if (n == size)
      CHECK_MSG(!memcmp(members, want + g * size, sizeof(int) * (size_t)size),
                "line %d: rank %d: %s group [%d, %d, ...]", line, r, aa_axis_name(axis), members[0],
                members[1]);
    aa_layout_t l;
    CHECK(aa_layout_of(&l, s, r) == 0);
    CHECK_MSG(l.color[axis] == g && l.coord[axis] == k && l.size[axis] == size,
              "line %d: rank %d %s: color %d coord %d, want %d %d", line, r, aa_axis_name(axis),
              l.color[axis], l.coord[axis], g, k);
  }
}

/* The document's example: ([("tensor", 4), ("pipeline", 2), ("data", 2)], None). */
AA_TEST(atorch_example_gives_the_documented_groups) {
  aa_strategy_t s =
      mesh("[[\"parallel_mode\", [[[\"tensor\", 4], [\"pipeline\", 2], [\"data\", 2]], null]]]");
  CHECK(aa_axis_order_is(s.order, "tpd"));
  static const int tensor[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int pipeline[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
  static const int data[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  expect_groups(__LINE__, &s, AA_AXIS_TENSOR, 4, 4, tensor);
  expect_groups(__LINE__, &s, AA_AXIS_PIPELINE, 8, 2, pipeline);
  expect_groups(__LINE__, &s, AA_AXIS_DATA, 8, 2, data);
  aa_layout_t l;
  CHECK(aa_layout_of(&l, &s, 13) == 0);
  CHECK(l.world == 16 && l.pos == 13 && l.coord[AA_AXIS_TENSOR] == 1 && l.coord[AA_AXIS_PIPELINE] == 1 &&
        l.coord[AA_AXIS_DATA] == 1);
}

/* Data fastest, then tensor, pipeline slowest. */
AA_TEST(data_tensor_pipeline_order_permutes_the_groups) {
  aa_strategy_t s =
      mesh("[[\"parallel_mode\", [[[\"data\", 2], [\"tensor\", 4], [\"pipeline\", 2]], null]]]");
  static const int data[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int tensor[] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  static const int pipeline[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  expect_groups(__LINE__, &s, AA_AXIS_DATA, 8, 2, data);
  expect_groups(__LINE__, &s, AA_AXIS_TENSOR, 4, 4, tensor);
  expect_groups(__LINE__, &s, AA_AXIS_PIPELINE, 8, 2, pipeline);
}

/* Pipeline fastest, then data, tensor slowest; written as a v1 file. */
AA_TEST(pipeline_data_tensor_order_permutes_the_groups) {
  aa_strategy_t s = mesh("{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 2, "
                         "\"tensor\": 4, \"pipeline\": 2, \"order\": [\"pipeline\", \"data\", \"tensor\"]}}");
  CHECK(aa_axis_order_is(s.order, "pdt"));
  static const int pipeline[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int data[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  static const int tensor[] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
  expect_groups(__LINE__, &s, AA_AXIS_PIPELINE, 8, 2, pipeline);
  expect_groups(__LINE__, &s, AA_AXIS_DATA, 8, 2, data);
  expect_groups(__LINE__, &s, AA_AXIS_TENSOR, 4, 4, tensor);
}

/* The default order (no order given) is Megatron's: tensor, data, pipeline. */
AA_TEST(default_order_is_tensor_data_pipeline) {
  aa_strategy_t s = mesh("{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 2, "
                         "\"tensor\": 4, \"pipeline\": 2}}");
  static const int tensor[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static const int data[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
  static const int pipeline[] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  expect_groups(__LINE__, &s, AA_AXIS_TENSOR, 4, 4, tensor);
  expect_groups(__LINE__, &s, AA_AXIS_DATA, 8, 2, data);
  expect_groups(__LINE__, &s, AA_AXIS_PIPELINE, 8, 2, pipeline);
}

/* ATorch's rank_order: position p of the mesh is rank rank_order[p], so
 * each group of the example lists rank_order of its positions. */
AA_TEST(explicit_rank_order_maps_positions_to_ranks) {
  aa_strategy_t s = mesh("[[\"parallel_mode\", [[[\"tensor\", 4], [\"pipeline\", 2], [\"data\", 2]], "
                         "[15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]]]]");
  CHECK(s.nranks == 16);
  static const int tensor[] = {15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  static const int pipeline[] = {15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0};
  static const int data[] = {15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0};
  expect_groups(__LINE__, &s, AA_AXIS_TENSOR, 4, 4, tensor);
  expect_groups(__LINE__, &s, AA_AXIS_PIPELINE, 8, 2, pipeline);
  expect_groups(__LINE__, &s, AA_AXIS_DATA, 8, 2, data);
  aa_layout_t l;
  CHECK(aa_layout_of(&l, &s, 15) == 0 && l.pos == 0 && l.coord[AA_AXIS_TENSOR] == 0 &&
        l.coord[AA_AXIS_PIPELINE] == 0 && l.coord[AA_AXIS_DATA] == 0);
  /* Another permutation: the two halves of the world swapped. */
  s = mesh("[[\"parallel_mode\", [[[\"tensor\", 4], [\"pipeline\", 2], [\"data\", 2]], "
           "[8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7]]]]");
  static const int tensor2[] = {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7};
  static const int data2[] = {8, 0, 9, 1, 10, 2, 11, 3, 12, 4, 13, 5, 14, 6, 15, 7};
  expect_groups(__LINE__, &s, AA_AXIS_TENSOR, 4, 4, tensor2);
  expect_groups(__LINE__, &s, AA_AXIS_DATA, 8, 2, data2);
}

/* One process: a 1x1x1 mesh whose every group is itself; and today's
 * data-parallel strategies: rank r is data coordinate r of one group. */
AA_TEST(single_process_and_data_parallel_meshes) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  aa_layout_t l;
  CHECK(aa_layout_of(&l, &s, 0) == 0);
  CHECK(l.world == 1 && l.pos == 0);
  for (int a = 0; a < AA_AXES; a++)
    CHECK(l.size[a] == 1 && l.coord[a] == 0 && l.color[a] == 0);
  int m[4];
  for (int a = 0; a < AA_AXES; a++)
    CHECK(aa_layout_group(m, 4, &s, 0, (aa_axis_t)a) == 1 && m[0] == 0);
  s.degree[AA_AXIS_DATA] = 4;
  for (int r = 0; r < 4; r++) {
    CHECK(aa_layout_of(&l, &s, r) == 0);
    CHECK(l.coord[AA_AXIS_DATA] == r && l.color[AA_AXIS_DATA] == 0 && l.color[AA_AXIS_TENSOR] == r);
  }
  CHECK(aa_layout_group(m, 4, &s, 2, AA_AXIS_DATA) == 4 && m[0] == 0 && m[3] == 3);
}

AA_TEST(invalid_meshes_and_rank_orders_are_refused_with_the_rule) {
  aa_strategy_t s;
  aa_layout_t l;
  int m[4];
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 2;
  CHECK(aa_layout_of(&l, &s, 2) == AA_EINVAL && strstr(aa_last_error(), "rank 2 is outside 0..1"));
  CHECK(aa_layout_of(&l, &s, -1) == AA_EINVAL);
  CHECK(aa_layout_group(m, 1, &s, 0, AA_AXIS_DATA) == AA_EINVAL &&
        strstr(aa_last_error(), "a data group has 2 ranks, room for 1"));
  CHECK(aa_layout_group(m, 4, &s, 0, (aa_axis_t)AA_AXES) == AA_EINVAL);
  CHECK(aa_strategy_set_rank_order(&s, (const uint16_t[]){0, 0}, 2) == 0);
  CHECK(aa_layout_of(&l, &s, 0) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "rank_order: rank 0 is given twice (positions 0 and 1)"), "%s",
            aa_last_error());
  CHECK(aa_strategy_set_rank_order(&s, (const uint16_t[]){0, 1, 2}, 3) == 0);
  CHECK(aa_layout_of(&l, &s, 0) == AA_EINVAL &&
        strstr(aa_last_error(), "rank_order: lists 3 ranks, but data * tensor * pipeline = 2 * 1 * 1 = 2"));
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 4096;
  s.degree[AA_AXIS_TENSOR] = 2;
  CHECK(aa_layout_of(&l, &s, 0) == AA_EINVAL && strstr(aa_last_error(), "must be between 1 and 4096 ranks"));
  aa_strategy_default(&s);
  s.order[1] = s.order[0]; /* an axis twice, another never */
  CHECK(aa_layout_of(&l, &s, 0) == AA_EINVAL &&
        strstr(aa_last_error(), "the axis order must list every axis once"));
  /* The readers refuse what is not a permutation of the degrees' world. */
  static const char *const bad[] = {
      "[[\"parallel_mode\", [[[\"tensor\", 2], [\"data\", 2]], [0, 1, 2, 2]]]]",
      "[[\"parallel_mode\", [[[\"tensor\", 2], [\"data\", 2]], [0, 1, 2, 4]]]]",
      "[[\"parallel_mode\", [[[\"tensor\", 2], [\"data\", 2]], [0, 1, 2]]]]",
      "[[\"parallel_mode\", [[[\"tensor\", 2], [\"data\", 2]], [0, 1, 2, -3]]]]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(aa_strategy_parse(&s, bad[i], "mesh.json") == AA_EINVAL);
    CHECK_MSG(strstr(aa_last_error(), "mesh.json: item 1 (parallel_mode): rank_order: "), "%s",
              aa_last_error());
  }
}

/* The axis table's orders: every permutation once, named by the axes'
 * letters, parsed back; the default is Megatron's (tensor, data,
 * pipeline); a partial list is completed in the default's relative order. */
AA_TEST(every_axis_order_is_a_permutation_named_by_letters) {
  aa_axis_t o[AA_AXES], back[AA_AXES];
  char name[AA_AXES + 1], seen[64][AA_AXES + 1];
  int n = 0;
  for (int k = 0; aa_axis_order_nth(o, k); k++, n++) {
    CHECK(aa_axis_order_valid(o));
    aa_axis_order_name(o, name);
    for (int j = 0; j < n && j < 64; j++)
      CHECK_MSG(strcmp(seen[j], name), "order %s twice", name);
    if (n < 64) memcpy(seen[n], name, sizeof name);
    CHECK(aa_axis_order_parse(back, name) && !memcmp(back, o, sizeof o) && aa_axis_order_is(o, name));
  }
  int fact = 1;
  for (int a = 1; a <= AA_AXES; a++)
    fact *= a;
  CHECK_MSG(n == fact, "%d orders of %d axes", n, AA_AXES);
  aa_axis_default_order(o);
  CHECK(aa_axis_order_is(o, "tdp") && aa_axis_order_is(o, "tcdp") && !aa_axis_order_is(o, "dtp"));
  aa_axis_t listed[] = {AA_AXIS_PIPELINE};
  aa_axis_order_from(o, listed, 1);
  CHECK(aa_axis_order_is(o, "ptd"));
  CHECK(!aa_axis_order_parse(o, "ttp") && !aa_axis_order_parse(o, "td") && !aa_axis_order_parse(o, "tdx"));
  CHECK(aa_axis_from_name("tensor") == AA_AXIS_TENSOR && aa_axis_from_name("sequence") == -1);
  CHECK(aa_axis_host_mask() == 1u << AA_AXIS_TENSOR);
}

/* A group of several axes (a mask) holds the ranks that differ only along
 * those axes: its color, for every order and rank, is shared by exactly
 * those ranks, numbers the groups 0.. in the order of their first
 * positions, and for one axis is that axis's split color. */
AA_TEST(a_group_of_axes_from_a_mask_holds_the_ranks_that_differ_only_along_them) {
  aa_axis_t o[AA_AXES];
  char name[AA_AXES + 1];
  for (int k = 0; aa_axis_order_nth(o, k); k++) {
    aa_strategy_t s;
    aa_strategy_default(&s);
    s.degree[AA_AXIS_DATA] = 2, s.degree[AA_AXIS_TENSOR] = 4, s.degree[AA_AXIS_PIPELINE] = 2;
    memcpy(s.order, o, sizeof o);
    aa_axis_order_name(o, name);
    aa_layout_t l[WORLD];
    for (int r = 0; r < WORLD; r++)
      CHECK(aa_layout_of(&l[r], &s, r) == 0);
    for (unsigned mask = 0; mask < 1u << AA_AXES; mask++) {
      int groups = 1;
      for (int a = 0; a < AA_AXES; a++)
        if (!(mask & 1u << a)) groups *= s.degree[a];
      int next = 0; /* colors appear in order of the groups' first positions */
      for (int r = 0; r < WORLD; r++) {
        int c = aa_layout_color(&l[r], mask);
        CHECK_MSG(c >= 0 && c < groups, "order %s mask %u rank %d: color %d of %d", name, mask, r, c, groups);
        if (c == next) next++;
        CHECK_MSG(c < next, "order %s mask %u: color %d before %d", name, mask, c, next);
        for (int q = 0; q < WORLD; q++) {
          bool same_outside = true;
          for (int a = 0; a < AA_AXES; a++)
            if (!(mask & 1u << a)) same_outside = same_outside && l[q].coord[a] == l[r].coord[a];
          CHECK_MSG((aa_layout_color(&l[q], mask) == c) == same_outside, "order %s mask %u ranks %d %d", name,
                    mask, r, q);
        }
        for (int a = 0; a < AA_AXES; a++)
          if (mask == 1u << a) CHECK(c == l[r].color[a]);
      }
    }
  }
}

/* Expert parallelism cuts the data x context replicas (layout.h): Megatron's
 * expert and expert-data groups for tp 2, dp 4, ep 2, written out by hand,
 * and with context parallelism the replicas span both axes. */
static void check_expert(const char *json, int rank, bool data, const int *want, int n) {
  aa_strategy_t s = mesh(json);
  int m[16];
  int got = aa_layout_expert_group(m, 16, &s, rank, data);
  CHECK_MSG(got == n, "%s rank %d %s: %d ranks (%s)", json, rank, data ? "expert-data" : "expert", got,
            got < 0 ? aa_last_error() : "");
  for (int k = 0; k < n && got == n; k++)
    CHECK_MSG(m[k] == want[k], "%s rank %d: member %d is %d, want %d", json, rank, k, m[k], want[k]);
}

AA_TEST(expert_groups_cut_the_data_replicas) {
  const char *t2d4 = "{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 4, "
                     "\"tensor\": 2, \"expert\": 2}}";
  check_expert(t2d4, 0, false, (const int[]){0, 2}, 2);
  check_expert(t2d4, 6, false, (const int[]){4, 6}, 2);
  check_expert(t2d4, 3, false, (const int[]){1, 3}, 2);
  check_expert(t2d4, 5, false, (const int[]){5, 7}, 2);
  check_expert(t2d4, 0, true, (const int[]){0, 4}, 2);
  check_expert(t2d4, 2, true, (const int[]){2, 6}, 2);
  check_expert(t2d4, 7, true, (const int[]){3, 7}, 2);
  /* ep = dp: one expert group of the whole replica group, expert-data groups of one. */
  const char *all = "{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 4, "
                    "\"expert\": 4}}";
  check_expert(all, 2, false, (const int[]){0, 1, 2, 3}, 4);
  check_expert(all, 2, true, (const int[]){2}, 1);
  /* No expert parallelism: groups of one, and the replicas. */
  const char *none = "{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 2, "
                     "\"tensor\": 2}}";
  check_expert(none, 3, false, (const int[]){3}, 1);
  check_expert(none, 3, true, (const int[]){1, 3}, 2);
  /* Context 2 x data 2 (default order t, c, d fastest first): the replicas
   * of rank 0 are 0, 1, 2, 3 (context fastest), so ep 2 pairs the two
   * context ranks of each data rank, as Megatron's tp-cp-ep-dp order. */
  const char *cp = "{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 2, "
                   "\"context\": 2, \"expert\": 2}}";
  check_expert(cp, 1, false, (const int[]){0, 1}, 2);
  check_expert(cp, 2, false, (const int[]){2, 3}, 2);
  check_expert(cp, 1, true, (const int[]){1, 3}, 2);
  /* Every rank is in exactly one group of each kind, of the stated size. */
  aa_strategy_t s = mesh(t2d4);
  int seen[8] = {0};
  for (int r = 0; r < 8; r++) {
    aa_layout_t l;
    aa_layout_expert_t e;
    CHECK(aa_layout_of(&l, &s, r) == 0);
    aa_layout_expert(&l, &s, &e);
    CHECK(e.size == 2 && e.data_size == 2 && e.color >= 0 && e.color < 4 && e.data_color >= 0 &&
          e.data_color < 4);
    seen[e.color * 2 + e.key]++;
  }
  for (int i = 0; i < 8; i++)
    CHECK(seen[i] == 1);
}

int main(void) {
  RUN(atorch_example_gives_the_documented_groups);
  RUN(data_tensor_pipeline_order_permutes_the_groups);
  RUN(pipeline_data_tensor_order_permutes_the_groups);
  RUN(default_order_is_tensor_data_pipeline);
  RUN(explicit_rank_order_maps_positions_to_ranks);
  RUN(single_process_and_data_parallel_meshes);
  RUN(invalid_meshes_and_rank_orders_are_refused_with_the_rule);
  RUN(every_axis_order_is_a_permutation_named_by_letters);
  RUN(a_group_of_axes_from_a_mask_holds_the_ranks_that_differ_only_along_them);
  RUN(expert_groups_cut_the_data_replicas);
  return aa_test_summary();
}
