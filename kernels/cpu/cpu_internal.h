/* Internal interface of the CPU backend: one function per aa_ops_t slot
 * (contracts in kernels/ops.h) plus the tuning constants the files share.
 * Nothing outside kernels/cpu includes this header; the engine reaches the
 * functions only through aa_ops_cpu(). */
#ifndef AA_CPU_INTERNAL_H
#define AA_CPU_INTERNAL_H

#include "../ops.h"

/* Below this many elements an elementwise loop runs on the calling thread:
 * forking the team costs more than the loop. Results do not depend on it. */
#define AA__CPU_PAR_MIN 8192

/* Column reductions (bias gradients, embedding scatter) are parallelised over
 * blocks of this many columns; each block is owned by one thread that walks
 * the rows in order, so sums are race-free and independent of the thread
 * count. 64 floats = four cache lines per row visit. */
#define AA__CPU_COL_BLOCK 64

static inline int aa__cpu_min(int a, int b) { return a < b ? a : b; }

void aa__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                             int C);
void aa__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                              int C);

void aa__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int N, int C);
void aa__cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean, const float *rstd,
                                int N, int C);

void aa__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                            int C, int OC);
void aa__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC);

void aa__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
void aa__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                int T, int C, int NH);

void aa__cpu_gelu_forward(float *out, const float *inp, size_t n);
void aa__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void aa__cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void aa__cpu_accumulate(float *y, const float *x, size_t n);
void aa__cpu_scale(float *x, float s, size_t n);

void aa__cpu_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                                  int N, int V);
void aa__cpu_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                                   int N, int V);

void aa__cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int t);
double aa__cpu_sum_squares(const float *x, size_t n);

#endif
