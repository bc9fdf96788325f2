/* The vocab-parallel ops of kernels/ops.h (encoder_forward_vocab,
 * encoder_backward_vocab, xent_vocab_partial/forward/backward) on the CPU
 * backend, against the unsplit ops they partition. A vocabulary of V = 11
 * (not divisible) is split between R = 1..5 ranks as tensor parallelism
 * splits it: Vl = ceil(V/R) rows per rank, rank r holding [lo, lo + valid)
 * with lo = r*Vl and valid = clamp(V - lo, 0, Vl); R = 5 (Vl = 3) leaves the
 * last rank with valid = 0. Padding rows and columns are filled with NaN, so
 * an op that reads one shows it in its results. Every test runs with 1 and
 * with 2 threads.
 *
 * Tolerances, and why:
 *  - exact: the embedding (the sum over ranks adds zeros to each element's
 *    one nonzero term; each dwte row gets the additions of encoder_backward
 *    in its order), the losses across ranks (every rank combines the same
 *    parts in the same order), xent_vocab_backward (the same one multiply
 *    and subtract per element as crossentropy_backward, fed the same probs);
 *  - losses against crossentropy_forward: |d| <= TOL_LOSS_ABS + TOL_LOSS_REL
 *    * |loss|. A part carries its sum of exps as a float (the gather moves
 *    floats), a relative rounding of 2^-24 that log turns into ~6e-8 absolute;
 *    with R > 1 the exps are taken against each rank's own max, x - m_r
 *    instead of x - M, so each term carries a different ~1 ulp error of the
 *    float exp (relative 8.5e-8 each, cpu_internal.h): the log of the sum
 *    moves by up to ~1.5e-7. The loss is then rounded to float, half an ulp
 *    of |loss| (6e-8 relative). Measured maxima are printed;
 *  - probs against crossentropy_forward's: relative TOL_PROB (denominators
 *    floored at FLT_MIN for underflowed values). A probability is the same
 *    float exp(x - M) times 1/S in both; S differs by the ~1.5e-7 above and
 *    1/S and the product are each rounded (6e-8 relative): a few ulp.
 * Measured: losses within 1 ulp (0.3 of the tolerance), probs within 1.8e-7
 * relative, for every R. A wrong column, row or target shifts values by
 * far more than these (whole probabilities, or a NaN from the padding). */
#include "aa_ops_test.h"
#include "aa_test.h"
#include "common/aa.h"
#include "kernels/ops.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define V 11
#define R_MAX 5
#define TOL_LOSS_ABS 3e-7
#define TOL_LOSS_REL 2e-7
#define TOL_PROB 5e-7

static const aa_ops_t *ops;
static int cur_threads = 1;
static aa_rng_t rng;

/* This file's draws come from rng (tests/aa_ops_test.h). */
#define falloc(n) aa_test_falloc(n)
#define frand(n, lo, hi) aa_test_frand(&rng, (n), (lo), (hi))
#define fcopy(x, n) aa_test_fcopy((x), (n))

/* ------------------------------------------------------------------ helpers */




/* One rank's share of the vocabulary. */
typedef struct {
  int lo, valid, Vl;
} shard_t;

static shard_t shard(int R, int r) {
  int Vl = (V + R - 1) / R, lo = r * Vl, valid = V - lo;
  valid = valid < 0 ? 0 : valid > Vl ? Vl : valid;
  return (shard_t){lo, valid, Vl};
}

/* Columns [lo, lo + valid) of full(rows, V) as columns 0..valid-1 of a
 * (rows, Vl) slice whose other columns hold `pad`. */
static float *slice_cols(const float *full, int rows, shard_t s, float pad) {
  float *p = falloc((size_t)rows * s.Vl);
  for (int n = 0; n < rows; n++)
    for (int i = 0; i < s.Vl; i++)
      p[(size_t)n * s.Vl + i] = i < s.valid ? full[(size_t)n * V + s.lo + i] : pad;
  return p;
}

/* How many padding columns (valid..Vl-1) of a (rows, Vl) slice are not +-0. */
static int pad_cols_nonzero(const float *p, int rows, shard_t s) {
  int bad = 0;
  for (int n = 0; n < rows; n++)
    for (int i = s.valid; i < s.Vl; i++)
      bad += p[(size_t)n * s.Vl + i] != 0.0f;
  return bad;
}

/* How many valid columns of a (rows, Vl) slice differ in their bits from the
 * matching columns of full(rows, V). */
static int cols_differ(const float *p, const float *full, int rows, shard_t s) {
  int bad = 0;
  for (int n = 0; n < rows; n++)
    bad += s.valid && memcmp(p + (size_t)n * s.Vl, full + (size_t)n * V + s.lo, s.valid * sizeof(float)) != 0;
  return bad;
}

/* Token ids: every id of the vocabulary at least once (so every rank
 * boundary is crossed), the rest random, with repeats so that rows of dwte
 * collect several positions. */
static int32_t *tokens(int n) {
  int32_t *p = malloc((size_t)n * sizeof(int32_t));
  if (!p) abort();
  for (int i = 0; i < n; i++)
    p[i] = i < V ? (int32_t)((i * 7) % V) : (int32_t)(aa_rng_u64(&rng) % V);
  return p;
}

/* ----------------------------------------------------------------- encoder */

AA_TEST(encoder_vocab_split_sums_to_encoder) {
  const int B = 2, T = 9, C = 70; /* C > 64: two column blocks in the backward */
  const int N = B * T;
  size_t nc = (size_t)N * C;
  float *wte = frand((size_t)V * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1), *ref = falloc(nc);
  int32_t *inp = tokens(N);
  ops->encoder_forward(ref, inp, wte, wpe, B, T, C);
  float *dout = frand(nc, -1, 1), *dwte_ref = frand((size_t)V * C, -1, 1),
        *dwpe_ref = frand((size_t)T * C, -1, 1);
  float *dwte0 = fcopy(dwte_ref, (size_t)V * C), *dwpe0 = fcopy(dwpe_ref, (size_t)T * C);
  ops->encoder_backward(dwte_ref, dwpe_ref, dout, inp, B, T, C);

  for (int R = 1; R <= R_MAX; R++) {
    float *sum = falloc(nc), *out = falloc(nc);
    int stray = 0, rows_differ = 0, pad_nonzero = 0;
    for (int r = 0; r < R; r++) {
      shard_t s = shard(R, r);
      /* wte slice (Vl,C): its rows of wte, then NaN padding. */
      float *wte_r = falloc((size_t)s.Vl * C), *dwte_r = falloc((size_t)s.Vl * C);
      for (size_t i = 0; i < (size_t)s.Vl * C; i++)
        wte_r[i] = NAN;
      if (s.valid) {
        memcpy(wte_r, wte + (size_t)s.lo * C, (size_t)s.valid * C * sizeof(float));
        memcpy(dwte_r, dwte0 + (size_t)s.lo * C, (size_t)s.valid * C * sizeof(float));
      }
      ops->encoder_forward_vocab(out, inp, wte_r, r == 0 ? wpe : NULL, s.lo, s.valid, B, T, C);
      for (int bt = 0; bt < N; bt++) {
        int mine = inp[bt] >= s.lo && inp[bt] < s.lo + s.valid;
        for (int c = 0; c < C; c++) {
          float o = out[(size_t)bt * C + c];
          sum[(size_t)bt * C + c] += o;
          /* Past rank 0 (no wpe) a token of another rank gives a zero row. */
          stray += r > 0 && !mine && o != 0.0f;
        }
      }
      float *dwpe_r = r == 0 ? fcopy(dwpe0, (size_t)T * C) : NULL;
      ops->encoder_backward_vocab(dwte_r, dwpe_r, dout, inp, s.lo, s.valid, B, T, C);
      rows_differ +=
          s.valid && memcmp(dwte_r, dwte_ref + (size_t)s.lo * C, (size_t)s.valid * C * sizeof(float)) != 0;
      for (size_t i = (size_t)s.valid * C; i < (size_t)s.Vl * C; i++)
        pad_nonzero += dwte_r[i] != 0.0f;
      if (r == 0) CHECK_MSG(memcmp(dwpe_r, dwpe_ref, (size_t)T * C * sizeof(float)) == 0, "R=%d: dwpe", R);
      free(wte_r), free(dwte_r), free(dwpe_r);
    }
    int differ = 0;
    for (size_t i = 0; i < nc; i++)
      differ += sum[i] != ref[i];
    CHECK_MSG(differ == 0, "R=%d: %d of %zu elements of the sum over ranks differ from encoder_forward", R,
              differ, nc);
    CHECK_MSG(stray == 0, "R=%d: %d nonzero elements for tokens of other ranks", R, stray);
    CHECK_MSG(rows_differ == 0, "R=%d: %d ranks' dwte rows differ from encoder_backward's", R, rows_differ);
    CHECK_MSG(pad_nonzero == 0, "R=%d: %d padding elements of dwte written", R, pad_nonzero);
    free(sum), free(out);
  }
  free(wte), free(wpe), free(ref), free(inp), free(dout), free(dwte_ref), free(dwpe_ref), free(dwte0),
      free(dwpe0);
}

/* ------------------------------------------------------------ crossentropy */

/* Rows of the cross-entropy test with a purpose beyond their target. */
enum { ROW_HUGE = V, ROW_UNDERFLOW, ROW_FAR, CE_N };

typedef struct {
  float *logits, *losses, *probs; /* (N,V), crossentropy_forward's results */
  int32_t *targets;
} ce_ref_t;

/* Logits in [-4, 4) with: targets 0..V-1 on rows 0..V-1, so every rank
 * boundary has a target on both sides for every R; one row 1000 above the
 * rest (exp overflows without the max subtraction); one row whose target
 * logit is -1000 (its probability underflows, the loss is ~1000); one row
 * whose first half sits near -1000, so that the first ranks' maxima are far
 * below the row's and their exp(m_r - M) underflows to 0. */
static ce_ref_t ce_ref_make(void) {
  ce_ref_t c = {frand((size_t)CE_N * V, -4, 4), falloc(CE_N), falloc((size_t)CE_N * V), tokens(CE_N)};
  for (int n = 0; n < V; n++)
    c.targets[n] = n;
  for (int i = 0; i < V; i++)
    c.logits[ROW_HUGE * V + i] += 1000.0f;
  c.targets[ROW_HUGE] = V - 1;
  c.targets[ROW_UNDERFLOW] = 5;
  c.logits[ROW_UNDERFLOW * V + 5] = -1000.0f;
  for (int i = 0; i < V / 2; i++)
    c.logits[ROW_FAR * V + i] -= 1000.0f;
  c.targets[ROW_FAR] = V - 2;
  ops->crossentropy_forward(c.losses, c.probs, c.logits, c.targets, CE_N, V);
  return c;
}

static void ce_ref_free(ce_ref_t *c) { free(c->logits), free(c->losses), free(c->probs), free(c->targets); }

AA_TEST(xent_vocab_split_matches_crossentropy_forward) {
  const int N = CE_N;
  ce_ref_t ref = ce_ref_make();
  CHECK(isfinite(ref.losses[ROW_HUGE]) && isfinite(ref.losses[ROW_FAR]));
  CHECK(isfinite(ref.losses[ROW_UNDERFLOW]) && ref.losses[ROW_UNDERFLOW] > 900.0f);
  for (int R = 1; R <= R_MAX; R++) {
    float *parts = falloc((size_t)R * N * 3), *losses0 = falloc(N);
    float *logits[R_MAX];
    for (int r = 0; r < R; r++) {
      shard_t s = shard(R, r);
      logits[r] = slice_cols(ref.logits, N, s, NAN);
      ops->xent_vocab_partial(parts + (size_t)r * N * 3, logits[r], ref.targets, s.lo, s.valid, N, s.Vl);
      if (s.valid == 0) {
        int bad = 0;
        for (int n = 0; n < N; n++) {
          const float *p = parts + ((size_t)r * N + n) * 3;
          bad += !(isinf(p[0]) && p[0] < 0 && p[1] == 0.0f && p[2] == 0.0f);
        }
        CHECK_MSG(bad == 0, "R=%d: rank %d without columns: %d parts not (-inf, 0, 0)", R, r, bad);
      }
    }
    double loss_err = 0.0, loss_ulp = 0.0, prob_err = 0.0;
    int losses_disagree = 0, pad_nonzero = 0, inplace_differs = 0;
    for (int r = 0; r < R; r++) {
      shard_t s = shard(R, r);
      float *losses = falloc(N), *probs = falloc((size_t)N * s.Vl);
      ops->xent_vocab_forward(losses, probs, logits[r], parts, R, s.valid, N, s.Vl);
      if (r == 0) memcpy(losses0, losses, (size_t)N * sizeof(float));
      losses_disagree += memcmp(losses, losses0, (size_t)N * sizeof(float)) != 0;
      for (int n = 0; n < N; n++) {
        double ref_loss = ref.losses[n];
        double d = fabs(losses[n] - ref_loss);
        loss_err = fmax(loss_err, d / (TOL_LOSS_ABS + TOL_LOSS_REL * fabs(ref_loss)));
        loss_ulp = fmax(loss_ulp, d / (nextafterf(fabsf(ref.losses[n]), INFINITY) - fabsf(ref.losses[n])));
        for (int i = 0; i < s.valid; i++) {
          double pr = ref.probs[(size_t)n * V + s.lo + i];
          prob_err = fmax(prob_err, fabs(probs[(size_t)n * s.Vl + i] - pr) / fmax(pr, FLT_MIN));
        }
      }
      pad_nonzero += pad_cols_nonzero(probs, N, s);
      /* In place, probs over logits, gives the same bits. */
      float *inplace = fcopy(logits[r], (size_t)N * s.Vl), *losses2 = falloc(N);
      ops->xent_vocab_forward(losses2, inplace, inplace, parts, R, s.valid, N, s.Vl);
      inplace_differs += memcmp(inplace, probs, (size_t)N * s.Vl * sizeof(float)) != 0 ||
                         memcmp(losses2, losses, (size_t)N * sizeof(float)) != 0;
      free(losses), free(probs), free(inplace), free(losses2);
    }
    fprintf(stderr, "  R=%d: losses off by <= %.0f ulp (%.2f x tol), probs by <= %.2e relative (tol %g)\n", R,
            loss_ulp, loss_err, prob_err, TOL_PROB);
    CHECK_MSG(loss_err <= 1.0, "R=%d: losses off crossentropy_forward's by %.2f x tol", R, loss_err);
    CHECK_MSG(prob_err <= TOL_PROB, "R=%d: probs off by %.3g relative", R, prob_err);
    CHECK_MSG(losses_disagree == 0, "R=%d: %d ranks' losses differ from rank 0's", R, losses_disagree);
    CHECK_MSG(pad_nonzero == 0, "R=%d: %d padding probabilities are not 0", R, pad_nonzero);
    CHECK_MSG(inplace_differs == 0, "R=%d: %d ranks give other results in place", R, inplace_differs);
    for (int r = 0; r < R; r++)
      free(logits[r]);
    free(parts), free(losses0);
  }
  ce_ref_free(&ref);
}

/* Fed the columns of crossentropy_forward's probabilities (0 on the
 * padding), each rank's gradient is the matching columns of
 * crossentropy_backward's, bit for bit, accumulated and in place. */
AA_TEST(xent_vocab_backward_matches_crossentropy_backward_columns) {
  const int N = CE_N;
  const float dloss = 1.0f / N;
  size_t nv = (size_t)N * V;
  ce_ref_t ref = ce_ref_make();
  float *dlog0 = frand(nv, -1, 1), *dlog_ref = fcopy(dlog0, nv), *inplace_ref = fcopy(ref.probs, nv);
  ops->crossentropy_backward(dlog_ref, ref.probs, ref.targets, dloss, N, V);
  ops->crossentropy_backward(inplace_ref, inplace_ref, ref.targets, dloss, N, V);
  for (int R = 1; R <= R_MAX; R++) {
    int differ = 0, pad_nonzero = 0, inplace_differ = 0, inplace_pad = 0;
    for (int r = 0; r < R; r++) {
      shard_t s = shard(R, r);
      float *probs = slice_cols(ref.probs, N, s, 0.0f), *dlog = slice_cols(dlog0, N, s, 0.0f);
      ops->xent_vocab_backward(dlog, probs, ref.targets, s.lo, s.valid, dloss, N, s.Vl);
      differ += cols_differ(dlog, dlog_ref, N, s);
      pad_nonzero += pad_cols_nonzero(dlog, N, s);
      ops->xent_vocab_backward(probs, probs, ref.targets, s.lo, s.valid, dloss, N, s.Vl);
      inplace_differ += cols_differ(probs, inplace_ref, N, s);
      inplace_pad += pad_cols_nonzero(probs, N, s);
      free(probs), free(dlog);
    }
    CHECK_MSG(differ == 0, "R=%d: %d rows differ from crossentropy_backward's columns", R, differ);
    CHECK_MSG(pad_nonzero == 0, "R=%d: %d padding gradients are not 0", R, pad_nonzero);
    CHECK_MSG(inplace_differ == 0, "R=%d: in place, %d rows differ", R, inplace_differ);
    CHECK_MSG(inplace_pad == 0, "R=%d: in place, %d padding gradients are not 0", R, inplace_pad);
  }
  free(dlog0), free(dlog_ref), free(inplace_ref);
  ce_ref_free(&ref);
}

/* The whole split pipeline (R = 3) gives the same bits with 1 and with 2
 * threads: the ops' results do not depend on the partition of the work. */
AA_TEST(vocab_ops_do_not_depend_on_the_thread_count) {
  const int R = 3, B = 2, T = 9, C = 70, N = B * T;
  shard_t s = shard(R, 1);
  size_t nc = (size_t)N * C, nv = (size_t)N * s.Vl;
  float *wte = frand((size_t)s.Vl * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1), *dout = frand(nc, -1, 1);
  float *logits = frand(nv, -4, 4), *parts = frand((size_t)R * N * 3, -1, 1);
  int32_t *inp = tokens(N);
  /* The other ranks' parts are random but plausible (s > 0); this rank's
   * goes into slot 1. */
  for (int i = 0; i < R * N; i++)
    parts[(size_t)i * 3 + 1] = 1.0f + fabsf(parts[(size_t)i * 3 + 1]);
  float *res[2];
  size_t nres = nc + (size_t)s.Vl * C + (size_t)T * C + (size_t)N * 3 + N + 2 * nv;
  for (int k = 0; k < 2; k++) {
    ops->set_threads(k + 1);
    float *o = res[k] = falloc(nres);
    float *out = o, *dwte = out + nc, *dwpe = dwte + (size_t)s.Vl * C, *part = dwpe + (size_t)T * C;
    float *losses = part + (size_t)N * 3, *probs = losses + N, *dlog = probs + nv;
    ops->encoder_forward_vocab(out, inp, wte, wpe, s.lo, s.valid, B, T, C);
    ops->encoder_backward_vocab(dwte, dwpe, dout, inp, s.lo, s.valid, B, T, C);
    ops->xent_vocab_partial(part, logits, inp, s.lo, s.valid, N, s.Vl);
    memcpy(parts + (size_t)N * 3, part, (size_t)N * 3 * sizeof(float));
    ops->xent_vocab_forward(losses, probs, logits, parts, R, s.valid, N, s.Vl);
    ops->xent_vocab_backward(dlog, probs, inp, s.lo, s.valid, 0.5f, N, s.Vl);
  }
  ops->set_threads(cur_threads);
  CHECK(memcmp(res[0], res[1], nres * sizeof(float)) == 0);
  free(res[0]), free(res[1]);
  free(wte), free(wpe), free(dout), free(logits), free(parts), free(inp);
}

static void run_all(int threads) {
  cur_threads = threads;
  ops->set_threads(threads);
  aa_rng_seed(&rng, 4321);
  fprintf(stderr, "threads = %d\n", threads);
  RUN(encoder_vocab_split_sums_to_encoder);
  RUN(xent_vocab_split_matches_crossentropy_forward);
  RUN(xent_vocab_backward_matches_crossentropy_backward_columns);
  RUN(vocab_ops_do_not_depend_on_the_thread_count);
}

int main(void) {
  ops = aa_ops_cpu();
  run_all(1);
  run_all(2);
  return aa_test_summary();
}
