/* Softmax cross-entropy over the vocabulary. */
#include "cpu_internal.h"

#include <math.h>
#include <stddef.h>

/* The sum over i < n of e_i = exp(x[i] - maxv) in double, with e_i stored
 * in dst[i] when dst is not NULL (dst may be x: each element is read before
 * it is written, by the same iteration). The exps run as float vectors into
 * dst (or a chunk on the stack) and the double sum is a second simd loop
 * over them, in chunks of XENT_CHUNK: a fixed order. With both in one loop
 * GCC vectorised neither (the double reduction left aa__cpu_expf's clamps
 * as branches), and a row cost ~11 cycles an element. */
#define XENT_CHUNK 1024
static double exp_sum(float *dst, const float *x, int n, float maxv) {
  float buf[XENT_CHUNK];
  double sum = 0.0;
  for (int i0 = 0; i0 < n; i0 += XENT_CHUNK) {
    const int m = aa__cpu_min(XENT_CHUNK, n - i0);
    float *e = dst ? dst + i0 : buf;
#pragma omp simd
    for (int i = 0; i < m; i++)
      e[i] = aa__cpu_expf(x[i0 + i] - maxv);
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < m; i++)
      sum += e[i];
  }
  return sum;
}

/* losses(N) = -log softmax(logits(N,V))[target]; probs(N,V) = softmax.
 * probs may alias logits: each row reads logits[target] before the row is
 * overwritten, and the exp pass reads and writes the same index. The row max
 * is subtracted so exp never overflows; the normaliser is summed in double
 * (exp_sum: fixed order, deterministic), and the loss is
 * log(sum) - (logit[target] - max), which stays finite even when the
 * target's probability underflows. Rows are independent. */
void aa__cpu_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                                  int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V; // (V)
    float *p = probs + (size_t)n * V;        // (V)
    float maxv = x[0];
#pragma omp simd reduction(max : maxv)
    for (int i = 1; i < V; i++)
      maxv = x[i] > maxv ? x[i] : maxv;
    float target_logit = x[targets[n]];
    double sum = exp_sum(p, x, V, maxv);
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < V; i++)
      p[i] *= inv;
    losses[n] = (float)(log(sum) - ((double)target_logit - maxv));
  }
}

/* dlogits(N,V) += dloss * (probs - onehot(target)), overwritten when
 * dlogits is probs (the in-place form the engine uses to save a (N,V)
 * buffer): the vocab-parallel backward over the whole vocabulary. */
void aa__cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                                   int N, int V) {
  aa__cpu_xent_vocab_backward(dlogits, probs, targets, 0, V, dloss, N, V);
}

/* The vocab-parallel cross-entropy (ops.h): each rank reduces its own
 * columns to (max, sum of exp, target logit) per row, the parts of every
 * rank are gathered, and each rank finishes the softmax of its columns from
 * them. The arithmetic follows crossentropy_forward so that one rank holding
 * the whole vocabulary reproduces it: the same float exps of x - max summed
 * in double, and the same loss association log(sum) - (target - max). The
 * one difference is that a part carries its sum as a float, so the loss can
 * move by ~6e-8 (the float rounding of the sum, through log) and a
 * probability by an ulp (1/sum rounded from the float sum). */

/* part(N,3) = (m, s, target logit) over the valid columns of logits(N,V):
 * m = -INFINITY and s = 0 when valid is 0 (the loops are empty). Rows are
 * independent. */
void aa__cpu_xent_vocab_partial(float *part, const float *logits, const int32_t *targets, int lo, int valid,
                                int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = logits + (size_t)n * V; // (V)
    float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < valid; i++)
      maxv = x[i] > maxv ? x[i] : maxv;
    double sum = exp_sum(NULL, x, valid, maxv);
    int t = targets[n] - lo;
    float *pt = part + (size_t)n * 3; // (3)
    pt[0] = maxv;
    pt[1] = (float)sum;
    pt[2] = t >= 0 && t < valid ? x[t] : 0.0f;
  }
}

/* losses(N) and probs(N,V) from parts(R,N,3). With M the largest m_r, the
 * normaliser is S = sum_r s_r exp(m_r - M) in double, in rank order (a rank
 * without columns adds 0 * exp(-inf) = 0); lse = M + log S, and probs =
 * exp(x - M) / S, which is exp(x - lse). The loss is log S - (target - M),
 * lse - target reassociated as crossentropy_forward has it. probs may alias
 * logits: each element is read before it is written, by the same iteration.
 * Rows are independent. */
void aa__cpu_xent_vocab_forward(float *losses, float *probs, const float *logits, const float *parts, int R,
                                int valid, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float maxv = -INFINITY;
    for (int r = 0; r < R; r++) {
      float m = parts[((size_t)r * N + n) * 3];
      maxv = m > maxv ? m : maxv;
    }
    double sum = 0.0, target_logit = 0.0;
    for (int r = 0; r < R; r++) {
      const float *pt = parts + ((size_t)r * N + n) * 3; // (3)
      sum += pt[1] * exp((double)pt[0] - maxv);
      target_logit += pt[2];
    }
    const float *x = logits + (size_t)n * V; // (V)
    float *p = probs + (size_t)n * V;        // (V)
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < valid; i++)
      p[i] = aa__cpu_expf(x[i] - maxv) * inv;
    for (int i = valid; i < V; i++)
      p[i] = 0.0f;
    losses[n] = (float)(log(sum) - (target_logit - maxv));
  }
}

/* dlogits(N,V) += dloss * (probs - onehot), the one-hot at column target - lo
 * when the target is one of this rank's valid columns; overwritten when
 * dlogits is probs, as crossentropy_backward. The padding columns, whose
 * probabilities are 0, receive 0. */
void aa__cpu_xent_vocab_backward(float *dlogits, const float *probs, const int32_t *targets, int lo,
                                 int valid, float dloss, int N, int V) {
  int overwrite = dlogits == probs;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * V; // (V)
    float *d = dlogits + (size_t)n * V;     // (V)
    int target = targets[n] - lo;
    if (target >= valid) target = -1;
    if (overwrite) {
      for (int i = 0; i < V; i++)
        d[i] = dloss * (p[i] - (i == target ? 1.0f : 0.0f));
    } else {
      for (int i = 0; i < V; i++)
        d[i] += dloss * (p[i] - (i == target ? 1.0f : 0.0f));
    }
  }
}
