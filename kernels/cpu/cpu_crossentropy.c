/* Softmax cross-entropy over the vocabulary. */
#include "cpu_internal.h"

#include <math.h>
#include <stddef.h>

/* losses(N) = -log softmax(logits(N,V))[target]; probs(N,V) = softmax.
 * probs may alias logits: each row reads logits[target] before the row is
 * overwritten, and the exp pass reads and writes the same index. The row max
 * is subtracted so exp never overflows; the normaliser is summed in double
 * (a simd reduction: fixed order, deterministic), and the loss is
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
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; i++) {
      float e = aa__cpu_expf(x[i] - maxv);
      p[i] = e;
      sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < V; i++)
      p[i] *= inv;
    losses[n] = (float)(log(sum) - ((double)target_logit - maxv));
  }
}

/* dlogits(N,V) += dloss * (probs - onehot(target)). When dlogits is probs
 * (the in-place form the engine uses to save a (N,V) buffer) the rows are
 * overwritten instead, since the old contents are the probabilities. */
void aa__cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                                   int N, int V) {
  int overwrite = dlogits == probs;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * V; // (V)
    float *d = dlogits + (size_t)n * V;     // (V)
    int target = targets[n];
    if (overwrite) {
      for (int i = 0; i < V; i++)
        d[i] = dloss * (p[i] - (i == target ? 1.0f : 0.0f));
    } else {
      for (int i = 0; i < V; i++)
        d[i] += dloss * (p[i] - (i == target ? 1.0f : 0.0f));
    }
  }
}
