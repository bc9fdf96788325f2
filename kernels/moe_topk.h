/* One token's top-k experts (issue 33), shared by the CPU routing
 * (kernels/cpu/cpu_moe.c) and the CUDA kernel (kernels/cuda/cuda_moe.cu)
 * so that both pick the same experts bit for bit: k argmax passes over the
 * token's E logits (strict >: the lower index wins a tie), each pick's
 * softmax probability kept, then those k renormalised to sum to 1
 * (Mixtral). ex and w have room for k. */
#ifndef AA_MOE_TOPK_H
#define AA_MOE_TOPK_H

#include <stdint.h>

#ifdef __CUDACC__
#define AA_MOE_HD __host__ __device__
#else
#define AA_MOE_HD
#endif

static inline AA_MOE_HD void aa_moe_topk(int32_t *ex, float *w, const float *logits, const float *probs, int E,
                                         int k) {
  float sum = 0.0f;
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < E; e++) {
      int taken = 0;
      for (int i = 0; i < j; i++)
        taken |= ex[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ex[j] = best;
    w[j] = probs[best];
    sum += probs[best];
  }
  float inv = 1.0f / sum;
  for (int j = 0; j < k; j++)
    w[j] *= inv;
}

#endif
