/* The progress line's ETA (cli/eta.h): the search's estimate from the dry
 * runs done, the training run's from its steps, and the text. Expected
 * values are worked out by hand in the comments. */
#include "aa_test.h"
#include "cli/eta.h"

#include <math.h>
#include <string.h>

AA_TEST(search_unknown_before_the_first_run_ends) {
  CHECK(aa_eta_search(0, 0, 10, 5) < 0); /* nothing measured yet */
  CHECK(aa_eta_search(0, 30, 10, 5) < 0);
  CHECK(aa_eta_search(3, 30, 0, 1) < 0); /* no run left to count (count unknown) */
  CHECK(aa_eta_search(3, NAN, 4, 1) < 0);
  CHECK(aa_eta_search(3, 30, 4, INFINITY) < 0);
  CHECK(aa_eta_search(3, -1, 4, 1) < 0);
  CHECK(aa_eta_search(3, 30, 4, -1) < 0);
}

AA_TEST(search_mean_of_the_runs_done) {
  /* 4 runs in 40 s: 10 s each. 6 left counting the current one, which has
   * run 3 s: 7 s for it + 5 x 10 s = 57 s. */
  CHECK_NEAR(aa_eta_search(4, 40, 6, 3), 57, 1e-9);
  /* The current run just began: 6 x 10 s. */
  CHECK_NEAR(aa_eta_search(4, 40, 6, 0), 60, 1e-9);
  /* The last run, half done: 5 s. */
  CHECK_NEAR(aa_eta_search(4, 40, 1, 5), 5, 1e-9);
  /* One run done in 2.5 s, 3 left, the current one 1 s in: 1.5 + 2 x 2.5. */
  CHECK_NEAR(aa_eta_search(1, 2.5, 3, 1), 6.5, 1e-9);
}

AA_TEST(search_a_slow_current_run_owes_nothing_more) {
  /* Mean 10 s, the current run 25 s in: it is owed 0, the 2 after it 20 s. */
  CHECK_NEAR(aa_eta_search(2, 20, 3, 25), 20, 1e-9);
  CHECK_NEAR(aa_eta_search(2, 20, 1, 25), 0, 1e-9);
  /* Never increases as the current run goes on. */
  double prev = INFINITY;
  for (double t = 0; t < 40; t += 0.5) {
    double e = aa_eta_search(5, 50, 4, t);
    CHECK(e <= prev && e >= 30 - 1e-9);
    prev = e;
  }
}

AA_TEST(steps) {
  CHECK(aa_eta_steps(0, 5, 10, 100) < 0);  /* no step timed */
  CHECK(aa_eta_steps(4, 0, 10, 100) < 0);  /* no time passed */
  CHECK(aa_eta_steps(4, 2, 101, 100) < 0); /* past the end */
  /* 4 steps in 2 s: 0.5 s a step, 90 steps left: 45 s. */
  CHECK_NEAR(aa_eta_steps(4, 2, 10, 100), 45, 1e-9);
  CHECK_NEAR(aa_eta_steps(4, 2, 100, 100), 0, 1e-9);
}

static int is(double s, const char *want) {
  char buf[32];
  aa_eta_format(buf, s);
  if (strcmp(buf, want)) fprintf(stderr, "  format(%g) = \"%s\", want \"%s\"\n", s, buf, want);
  return !strcmp(buf, want);
}

AA_TEST(format) {
  CHECK(is(-1, "?"));
  CHECK(is(NAN, "?"));
  CHECK(is(2e7, "?"));
  CHECK(is(0, "0s"));
  CHECK(is(0.4, "0s"));
  CHECK(is(42.4, "42s"));
  CHECK(is(59.4, "59s"));
  CHECK(is(59.6, "1m00s")); /* rounds up into minutes, never "60s" */
  CHECK(is(187, "3m07s"));
  CHECK(is(3599.4, "59m59s"));
  CHECK(is(3599.6, "1h00m")); /* never "60m00s" */
  CHECK(is(7500, "2h05m"));
  CHECK(is(1e7, "2777h47m"));
}

int main(void) {
  RUN(search_unknown_before_the_first_run_ends);
  RUN(search_mean_of_the_runs_done);
  RUN(search_a_slow_current_run_owes_nothing_more);
  RUN(steps);
  RUN(format);
  return aa_test_summary();
}
