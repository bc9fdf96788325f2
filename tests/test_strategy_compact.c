/* A strategy is a small value (issue 32: a plan ranks millions of them; a
 * search and the store hold thousands): its variable-length lists, ATorch's
 * rank order and a custom pipeline cut, are held once per process and
 * shared by every copy. Checks the size, the sharing, that a copy by
 * assignment stays whole after the original changes, the setters' range
 * rules, and the bound on what a long-lived process keeps (a planner whose
 * peers keep sending new rank orders refuses the one past 32 MiB, with the
 * reason, and still takes the orders it holds). The bound is reached last:
 * it fills this process's table. */
#include "common/aa.h"
#include "strategies/strategy.h"
#include "tests/aa_test.h"

#include <stdio.h>
#include <string.h>

/* The struct with both lists inline was 9,648 bytes (x86-64); the lists
 * cost 8 bytes each now. 512 leaves room for a field or two. */
AA_TEST(a_strategy_is_a_small_value) {
  CHECK_MSG(sizeof(aa_strategy_t) <= 512, "sizeof(aa_strategy_t) = %zu", sizeof(aa_strategy_t));
}

AA_TEST(equal_lists_share_one_copy_and_copies_stay_whole) {
  const char *json = "{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": {\"data\": 2, "
                     "\"pipeline\": 2, \"rank_order\": [3, 2, 1, 0]}, \"partition\": [0, 1, 4]}";
  aa_strategy_t a, b;
  if (aa_strategy_parse(&a, json, "a.json") || aa_strategy_parse(&b, json, "b.json")) {
    CHECK_MSG(0, "%s", aa_last_error());
    return;
  }
  CHECK(a.rank_order && a.rank_order == b.rank_order && a.bounds && a.bounds == b.bounds);
  CHECK(a.nranks == 4 && a.rank_order[0] == 3 && a.rank_order[3] == 0);
  CHECK(a.n_bounds == 3 && a.bounds[0] == 0 && a.bounds[1] == 1 && a.bounds[2] == 4);

  aa_strategy_t copy = a; /* by assignment, as the search and the plan copy them */
  CHECK(aa_strategy_set_rank_order(&a, (const uint16_t[]){0, 1, 2, 3}, 4) == 0);
  CHECK(aa_strategy_set_bounds(&a, (const int[]){0, 2, 4}, 3) == 0);
  CHECK(a.rank_order != copy.rank_order && a.bounds != copy.bounds);
  CHECK(copy.rank_order[0] == 3 && copy.rank_order[3] == 0 && copy.bounds[1] == 1);
  char ka[AA_STRATEGY_KEY_MAX], kb[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(&copy, ka);
  aa_strategy_key(&b, kb);
  CHECK_MSG(!strcmp(ka, kb), "%s != %s", ka, kb);

  CHECK(aa_strategy_set_rank_order(&a, NULL, 0) == 0 && a.nranks == 0 && !a.rank_order);
  CHECK(aa_strategy_set_bounds(&a, NULL, 0) == 0 && a.n_bounds == 0 && !a.bounds);
  CHECK(aa_strategy_rank_order_is_identity(&a));
}

AA_TEST(setters_hold_the_lengths) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  static uint16_t r[AA_STRATEGY_WORLD_MAX + 1];
  CHECK(aa_strategy_set_rank_order(&s, r, AA_STRATEGY_WORLD_MAX + 1) == AA_EINVAL &&
        strstr(aa_last_error(), "parallel.rank_order: must list 1 to 4096 ranks (got 4097)"));
  CHECK(aa_strategy_set_rank_order(&s, r, -1) == AA_EINVAL);
  int b[AA_STRATEGY_STAGES_MAX + 2] = {0};
  CHECK(aa_strategy_set_bounds(&s, b, AA_STRATEGY_STAGES_MAX + 2) == AA_EINVAL &&
        strstr(aa_last_error(), "partition: must list between 2 and 257 block boundaries (got 258)"));
  CHECK(s.nranks == 0 && !s.rank_order && s.n_bounds == 0 && !s.bounds); /* untouched */
}

/* 32 MiB holds 4,096 distinct orders of 4,096 ranks (8 KiB each); the
 * 4,097th is refused, an order already held is still shared. */
AA_TEST(the_process_keeps_a_bounded_table) {
  static uint16_t r[AA_STRATEGY_WORLD_MAX];
  aa_strategy_t s, first;
  aa_strategy_default(&s);
  int held = 0, rc = 0;
  for (int k = 0; k < 5000 && !rc; k++) {
    for (int i = 0; i < AA_STRATEGY_WORLD_MAX; i++)
      r[i] = (uint16_t)((i + k) % AA_STRATEGY_WORLD_MAX); /* a distinct rotation each time */
    rc = aa_strategy_set_rank_order(&s, r, AA_STRATEGY_WORLD_MAX);
    if (!rc) held++;
    if (k == 0) first = s;
  }
  /* Earlier tests of this process hold a few short lists, so the last
   * full-size order may not fit: 4,095 or 4,096. */
  CHECK_MSG(held >= 4095 && held <= 4096 && rc == AA_EINVAL, "held %d, rc %d", held, rc);
  CHECK_MSG(strstr(aa_last_error(), "parallel.rank_order: this process already holds") &&
                strstr(aa_last_error(), "the most it keeps is 32 MiB"),
            "%s", aa_last_error());
  for (int i = 0; i < AA_STRATEGY_WORLD_MAX; i++)
    r[i] = (uint16_t)i;
  CHECK(aa_strategy_set_rank_order(&s, r, AA_STRATEGY_WORLD_MAX) == 0 && s.rank_order == first.rank_order);
}

int main(void) {
  RUN(a_strategy_is_a_small_value);
  RUN(equal_lists_share_one_copy_and_copies_stay_whole);
  RUN(setters_hold_the_lengths);
  RUN(the_process_keeps_a_bounded_table); /* last: it fills the table */
  return aa_test_summary();
}
