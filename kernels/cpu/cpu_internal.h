/* Internal interface of the CPU backend: one function per aa_ops_t slot
 * (contracts in kernels/ops.h) plus the tuning constants the files share.
 * The engine reaches the functions only through aa_ops_cpu(); outside this
 * folder only tests/test_ops.c includes the header, to test the math
 * helpers directly. */
#ifndef AA_CPU_INTERNAL_H
#define AA_CPU_INTERNAL_H

#include "../ops.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Below this many elements an elementwise loop runs on the calling thread:
 * forking the team costs more than the loop. Results do not depend on it. */
#define AA__CPU_PAR_MIN 8192
/* Below this many floats a copy or a fill (memset0, matmul_forward's bias
 * rows) stays on the calling thread: 4 MiB. The 512-wide models' buffers
 * (4-64 MiB) are split over the team; at 256 KiB the bundled example's
 * (0.5-1.5 MiB) were split too, and its 2-thread step took 3.5 % longer
 * (3 paired runs against main), the team's wake-ups costing more than
 * the copies. */
#define AA__CPU_COPY_PAR_MIN (1 << 20)

/* The embedding's column reductions are parallelised over blocks of this
 * many columns (the bias and norm gradients go by row chunks, below); each block is owned by one thread
 * that walks the rows in order, so sums are race-free and independent of the thread count. 64 floats = four
 * cache lines per row visit. */
#define AA__CPU_COL_BLOCK 64

static inline int aa__cpu_min(int a, int b) { return a < b ? a : b; }

/* Column sums over the rows (the bias gradients, LayerNorm's and RMSNorm's
 * weight gradients) go by fixed chunks of AA__CPU_SUM_ROWS rows: a chunk's
 * rows are added in order into a partial of its own by whichever thread
 * has the chunk, then every partial is added to the gradient in chunk order
 * (aa__cpu_add_partials). The chunks depend on the row count alone, so the
 * sums do not depend on the thread count, and each thread streams whole
 * rows. With a column range per thread instead (every row visit a piece
 * of the row), at two threads and gpt-6l-512's shapes GELU's backward with
 * fc's bias sums took 1.8x as long, LayerNorm's backward (which also read
 * its inputs a second time for its column pass) 5x, RMSNorm's 2.5x
 * (bench/README.md, issue 37). */
#define AA__CPU_SUM_ROWS 64

static inline int aa__cpu_sum_chunks(int N) { return (N + AA__CPU_SUM_ROWS - 1) / AA__CPU_SUM_ROWS; }

/* acc(n) += each partial of part(nch, n) in chunk order. Called after the
 * parallel region that made the partials, on one thread: the partials are
 * a few hundred KiB, fresh in cache, and a split over the team needs a
 * barrier inside the region; with one, gpt-6l-512's steps were 5-27 %
 * slower on a loaded machine (bench/README.md, issue 37). */
static inline void aa__cpu_add_partials(float *acc, const float *part, int nch, int n) {
  for (int c = 0; c < nch; c++) {
    const float *p = part + (size_t)c * n; // (n)
#pragma omp simd
    for (int j = 0; j < n; j++)
      acc[j] += p[j];
  }
}

/* Per-call scratch of n floats: a malloc that stops the process on failure
 * (the op table has no error path, and wrong results would be worse than
 * stopping). */
static inline float *aa__cpu_scratch(size_t n, const char *what) {
  float *p = (float *)malloc((n ? n : 1) * sizeof(float));
  if (!p) {
    fprintf(stderr, "autoaccel: cannot allocate %s scratch (%zu floats)\n", what, n);
    abort();
  }
  return p;
}

/* exp(x) in float, written with plain arithmetic so that gcc vectorises the
 * loops that call it (glibc's expf is only vectorised under -ffast-math; on
 * this backend's softmax rows that made it a third of attention_forward).
 * Cephes' method: x = k ln2 + r with k rounded by the 1.5 * 2^23 trick,
 * ln2 split in two for an exact reduction, a degree-6 polynomial for e^r,
 * and 2^k built in the exponent bits. Max relative error 8.5e-8 (1.4 ulp)
 * over [-87, 88] (tested); x is clamped to that range, so results below
 * e^-87 ~ 1.6e-38 come out as 1.6e-38 and NaN stays NaN. */
static inline float aa__cpu_expf(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float t = x * 1.44269504088896341f + 12582912.0f; /* x / ln2 rounded: the low bits of t hold k */
  float k = t - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union {
    float f;
    uint32_t u;
  } bits = {t};
  bits.u = (bits.u - 0x4B400000u + 127u) << 23; /* 2^k */
  return p * bits.f;
}

/* tanh(u) = 1 - 2 / (e^2u + 1) on aa__cpu_expf, vectorisable for the same
 * reason. The absolute error is ~1e-7 (relative error grows near 0, where
 * tanh is tiny); GELU only uses 1 + tanh and 1 - tanh^2, where that is
 * harmless. */
static inline float aa__cpu_tanhf(float u) { return 1.0f - 2.0f / (aa__cpu_expf(2.0f * u) + 1.0f); }

void aa__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                             int C);
void aa__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                              int C);
void aa__cpu_encoder_forward_vocab(float *out, const int32_t *inp, const float *wte, const float *wpe, int lo,
                                   int valid, int B, int T, int C);
void aa__cpu_encoder_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int lo,
                                    int valid, int B, int T, int C);

void aa__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int N, int C);
void aa__cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean, const float *rstd,
                                int N, int C);

void aa__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                            int C, int OC);
void aa__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC);
void aa__cpu_matmul_backward_set(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int N, int C, int OC);

void aa__cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void aa__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                int T, int C, int NH);

void aa__cpu_gelu_forward(float *out, const float *inp, size_t n);
void aa__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void aa__cpu_bias_gelu_forward(float *pre, float *out, const float *bias, int N, int OC);
void aa__cpu_gelu_backward_bias(float *dpre, float *dbias, const float *pre, const float *dout, int N,
                                int OC);
void aa__cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void aa__cpu_accumulate(float *y, const float *x, size_t n);
void aa__cpu_rows_copy(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols);
void aa__cpu_rows_accumulate(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols);
void aa__cpu_scale(float *x, float s, size_t n);

void aa__cpu_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                                  int N, int V);
void aa__cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                                   int N, int V);
void aa__cpu_xent_vocab_partial(float *part, const float *logits, const int32_t *targets, int lo, int valid,
                                int N, int V);
void aa__cpu_xent_vocab_forward(float *losses, float *probs, const float *logits, const float *parts, int R,
                                int valid, int N, int V);
void aa__cpu_xent_vocab_backward(float *dlogits, const float *probs, const int32_t *targets, int lo,
                                 int valid, float dloss, int N, int V);

void aa__cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int t);
void aa__cpu_adamw_update_scaled(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                                 float beta1, float beta2, float eps, float weight_decay, int t,
                                 float gscale);
double aa__cpu_sum_squares(const float *x, size_t n);

void aa__cpu_cast_from_f32(void *dst, aa_dtype_t dtype, const float *src, size_t n);
void aa__cpu_cast_to_f32(float *dst, const void *src, aa_dtype_t dtype, size_t n);
void aa__cpu_round_store(void *dst, float *x, aa_dtype_t dtype, size_t n);

/* The llama family, in cpu_llama.c. */
void aa__cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                             float eps);
void aa__cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int N, int C);
void aa__cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void aa__cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
void aa__cpu_swiglu_backward_set(float *dinp, const float *inp, const float *dout, int N, int F);
void aa__cpu_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta);
void aa__cpu_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta);
void aa__cpu_attention_block_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                     int ldkv, size_t bskv, int causal);
void aa__cpu_attention_block_merge(float *out, float *lse, const float *ob, const float *lseb, int B, int Tq,
                                   int NH, int HS);
void aa__cpu_attention_block_delta(float *delta, const float *dout, const float *out, int B, int Tq, int NH,
                                   int HS);
void aa__cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse, const float *delta,
                                      int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                      int ldkv, size_t bskv, int causal);
void aa__cpu_attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                   int HS);
void aa__cpu_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, int HS);
void aa__cpu_attention_decode(float *out, float *kcache, float *vcache, const float *qkv, int B, int Tmax,
                              int pos, int NH, int NKV, int HS);

#endif
