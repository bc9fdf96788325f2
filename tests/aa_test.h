/* Minimal test harness: each test executable holds several named checks
 * run in order; a failed CHECK prints file:line and the expression, marks
 * the current test failed, and the executable exits non-zero at the end.
 *
 *   AA_TEST(name) { CHECK(x == 1); CHECK_NEAR(a, b, tol); }
 *   int main(void) { RUN(name); return aa_test_summary(); }
 */
#ifndef AA_TEST_H
#define AA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int aa_test_failed_checks, aa_test_failed, aa_test_passed, aa_test_skipped;
static int aa_test_skip_flag;

#define AA_TEST(name) static void test_##name(void)

#define CHECK(cond)                                                                                 \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                             \
      aa_test_failed_checks++;                                                                      \
    }                                                                                               \
  } while (0)

#define CHECK_MSG(cond, ...)                                                                        \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                             \
      fprintf(stderr, __VA_ARGS__);                                                                 \
      fputc('\n', stderr);                                                                          \
      aa_test_failed_checks++;                                                                      \
    }                                                                                               \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                       \
  do {                                                                                              \
    double a_ = (a), b_ = (b);                                                                      \
    if (!(fabs(a_ - b_) <= (tol))) {                                                                \
      fprintf(stderr, "  FAIL %s:%d: |%s - %s| = |%.9g - %.9g| > %g\n", __FILE__, __LINE__, #a, #b, \
              a_, b_, (double)(tol));                                                               \
      aa_test_failed_checks++;                                                                      \
    }                                                                                               \
  } while (0)

/* A call that must fail with `code` and a message holding `needle` (the
 * file using it includes common/aa.h and string.h). */
#define CHECK_ERR(rc, code, needle)                                                                          \
  do {                                                                                                       \
    int rc_ = (rc);                                                                                          \
    CHECK_MSG(rc_ == (code), "rc %d, want %d (%s)", rc_, (code), aa_last_error());                           \
    CHECK_MSG(strstr(aa_last_error(), (needle)), "message \"%s\" lacks \"%s\"", aa_last_error(), (needle));  \
  } while (0)

/* Ends the current test as skipped, with the reason printed. */
#define SKIP(...)                                                                                   \
  do {                                                                                              \
    fprintf(stderr, "  skipped: ");                                                                 \
    fprintf(stderr, __VA_ARGS__);                                                                   \
    fputc('\n', stderr);                                                                            \
    aa_test_skip_flag = 1;                                                                          \
    return;                                                                                         \
  } while (0)

/* AA_TEST_ONLY=text in the environment runs only the tests whose name
 * holds text (for working on one; the suite sets nothing). */
#define RUN(name)                                                                                   \
  do {                                                                                              \
    const char *only_ = getenv("AA_TEST_ONLY");                                                     \
    if (only_ && !strstr(#name, only_)) break;                                                      \
    int before_ = aa_test_failed_checks;                                                            \
    aa_test_skip_flag = 0;                                                                          \
    fprintf(stderr, "- %s\n", #name);                                                               \
    test_##name();                                                                                  \
    if (aa_test_failed_checks != before_) {                                                         \
      aa_test_failed++;                                                                             \
      fprintf(stderr, "  -> FAILED\n");                                                             \
    } else if (aa_test_skip_flag) {                                                                 \
      aa_test_skipped++;                                                                            \
    } else {                                                                                        \
      aa_test_passed++;                                                                             \
    }                                                                                               \
  } while (0)

static inline int aa_test_summary(void) {
  fprintf(stderr, "%d passed, %d failed, %d skipped\n", aa_test_passed, aa_test_failed, aa_test_skipped);
  return aa_test_failed ? 1 : 0;
}

#endif
