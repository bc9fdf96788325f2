/* What the PyTorch-fixture tests share (test_reference, test_llama_reference):
 * reading a fixture's fields in order, and comparing the engine's values with
 * the reference's under a stated tolerance while recording how close the
 * worst came to failing. */
#ifndef AA_FIXTURE_TEST_H
#define AA_FIXTURE_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Reads n bytes at *pos of buf (size len) into out; 0 if they are not all
 * there. */
static inline int take(void *out, const unsigned char *buf, size_t len, size_t *pos, size_t n) {
  if (n > len - *pos) return 0;
  memcpy(out, buf + *pos, n);
  *pos += n;
  return 1;
}

/* Largest errors of one comparison, and how close the worst came to failing. */
typedef struct {
  double max_abs, max_rel, worst; /* worst = max |got-want| / tol */
  size_t n_bad, worst_i;
} cmp_t;

/* Adds element i, allowed |got - want| <= atol + rtol*|want|. The relative
 * error is recorded only where |want| > atol: below that it measures how
 * close want is to zero, not the engine. */
static inline void cmp_add(cmp_t *c, size_t i, double got, double want, double atol, double rtol) {
  double err = fabs(got - want), tol = atol + rtol * fabs(want);
  double ratio = err / tol;
  if (err > c->max_abs) c->max_abs = err;
  if (fabs(want) > atol && err / fabs(want) > c->max_rel) c->max_rel = err / fabs(want);
  if (!(err <= tol)) c->n_bad++; /* also counts NaN */
  if (!(ratio <= c->worst)) {
    c->worst = ratio;
    c->worst_i = i;
  }
}

static inline void cmp_report(const char *what, const char *name, const cmp_t *c) {
  fprintf(stderr, "  %-8s %-12s max abs %.3e  max rel %.3e  err/tol %.3f%s\n", what, name, c->max_abs,
          c->max_rel, c->worst, c->n_bad ? "  <-- FAIL" : "");
}

#endif
