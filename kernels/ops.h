/* The backend op table. The engine calls every tensor operation through an
 * aa_ops_t so that model code is backend-agnostic: kernels/cpu provides the
 * reference implementation (OpenBLAS + OpenMP), kernels/cuda the GPU one
 * (cuda_backend.h), behind the same table.
 *
 * Conventions (after llm.c):
 *  - Shapes are given in comments as (B,T,C) etc., row-major, float32.
 *  - B = micro-batch, T = sequence length, C = d_model, NH = heads,
 *    F = d_ff, V = vocab, N = B*T rows.
 *  - Linear weights are stored (OC, C) like torch.nn.Linear: y = x W^T + b.
 *  - Every *_backward ACCUMULATES (+=) into its gradient outputs (dinp,
 *    dweight, dbias). The engine zeroes parameter gradients once per
 *    optimizer step (so micro-batches accumulate) and activation gradients
 *    before each backward pass.
 *  - Pointers never alias unless a comment says they may.
 *  - All kernels are deterministic for a fixed thread count: reductions use
 *    a fixed partition and order, so reruns (and resumed runs) give
 *    bit-identical results. */
#ifndef AA_OPS_H
#define AA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/aa.h"

typedef struct aa_ops {
  const char *name; /* "cpu", "cuda" */

  /* Sets the number of worker threads (OpenMP and BLAS). n >= 1. */
  void (*set_threads)(int n);
  /* A promise about the operands of the matmul ops that follow (inp,
   * weight, dout): AA_BF16 or AA_F16 = every value is exactly representable
   * in that type (the engine's amp path rounds each of them), so a backend
   * may run the GEMMs on 16-bit inputs with fp32 accumulation and an fp32
   * result: the same products, summed in another order. AA_F32 (the
   * default) promises nothing. The CUDA backend narrows the operands and
   * uses bf16/fp16 tensor cores; the CPU backend ignores it. */
  void (*set_gemm_inputs)(aa_dtype_t dtype);

  /* out(B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T) token ids < V. */
  void (*encoder_forward)(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                          int C);
  /* dwte(V,C) += scatter of dout; dwpe(T,C) += sum over b of dout. */
  void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C);

  /* out(N,C) = (inp - mean) * rstd * weight + bias, eps = 1e-5 (as PyTorch).
   * mean(N), rstd(N) are saved for backward. */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int N, int C);
  void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd, int N, int C);

  /* out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be NULL.
   * out is overwritten, not accumulated. */
  void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                         int OC);
  /* dinp(N,C) += dout @ weight; dweight(OC,C) += dout^T @ inp;
   * dbias(OC) += column sums of dout (dbias may be NULL). On either
   * backend dweight may be NULL too, as may layernorm_backward's dweight
   * with its dbias and rmsnorm_backward's dweight: a frozen weight (LoRA's
   * base, engine/model.h), whose gradient is not computed. */
  void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int N, int C, int OC);

  /* Causal multi-head self-attention, flash-attention style: the T x T
   * probabilities are never kept.
   * qkv(B,T,3C): per position [q(C) | k(C) | v(C)], head h uses columns
   * h*hs .. h*hs+hs-1 of each part, hs = C/NH. Scores s(t,u) = q_t . k_u /
   * sqrt(hs) for u <= t (causal), P = softmax over u of each row.
   * out(B,T,C) = P @ v with heads concatenated. lse(B,NH,T) receives each
   * row's logsumexp of its scores, log(sum_u exp(s(t,u))), kept for
   * backward, so that P(t,u) = exp(s(t,u) - lse(b,h,t)). */
  void (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
  /* dqkv(B,T,3C) += gradient w.r.t. qkv, given the forward's lse; the
   * probabilities are recomputed from q, k and lse. The backend may use
   * internal scratch. */
  void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *lse, int B, int T,
                             int C, int NH);

  /* GELU, tanh approximation (GPT-2; torch approximate='tanh'). */
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  /* dinp += gelu'(inp) * dout. */
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

  /* out = a + b (out may alias a or b). */
  void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
  /* y += x. */
  void (*accumulate)(float *y, const float *x, size_t n);

  /* Softmax cross-entropy over logits(N,V) with targets(N) < V.
   * losses(N) = -log softmax(logits)[target]; probs(N,V) receives the
   * softmax (probs may alias logits). Computed with max-subtraction. */
  void (*crossentropy_forward)(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                               int V);
  /* dlogits(N,V) += dloss * (probs - onehot(target)), with one scalar dloss
   * for every row (the engine passes 1/(N*accum) for a mean loss).
   * dlogits may alias probs: then it is overwritten, not accumulated. */
  void (*crossentropy_backward)(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                int V);

  /* Tensor parallelism splits the vocabulary between the tensor ranks
   * (Megatron's vocab-parallel embedding and cross-entropy): a rank holds
   * the rows [lo, lo + valid) of the vocabulary as rows 0..valid-1 of its
   * wte slice, whose rows past valid (up to V) are padding that no token
   * reaches and no loss sees. valid may be 0 (a rank with padding only).
   *
   * out(B,T,C) = (lo <= inp < lo + valid ? wte[inp - lo] : 0)
   *              + (wpe ? wpe[t] : 0). */
  void (*encoder_forward_vocab)(float *out, const int32_t *inp, const float *wte, const float *wpe, int lo,
                                int valid, int B, int T, int C);
  /* dwte += dout scattered to row inp - lo for the tokens in [lo, lo +
   * valid) (the others add nothing; the padding rows are never touched);
   * dwpe(T,C) += sum over b of dout when dwpe is not NULL. Each row gets the
   * additions of encoder_backward in its order, so the ranks' rows are
   * bit-identical to the unsplit gradient's. */
  void (*encoder_backward_vocab)(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int lo,
                                 int valid, int B, int T, int C);
  /* What this rank knows of each row i of its logits(N,V) slice (columns
   * past valid are padding and ignored), into part(N,3): the maximum over
   * the valid columns m (-INFINITY when valid is 0), the sum over them of
   * exp(x - m) (0 when valid is 0), and the logit of targets[i] when lo <=
   * targets[i] < lo + valid, else 0. */
  void (*xent_vocab_partial)(float *part, const float *logits, const int32_t *targets, int lo, int valid, int N,
                             int V);
  /* The cross-entropy from every rank's parts (R,N,3), rank-major (as an
   * all-gather of part leaves them): with M the largest m_r of row i,
   * lse_i = M + log(sum_r s_r exp(m_r - M)) and losses(N) = lse_i - sum_r
   * of the target logits (one of them is the target's, the rest are 0);
   * probs(N,V) = exp(logits - lse_i) on the valid columns and 0 on the
   * padding (probs may alias logits). logits and valid are this rank's; at
   * least one rank has valid > 0. Every rank gets bit-identical losses from
   * the same parts. With R = 1, lo = 0, valid = V this is
   * crossentropy_forward up to rounding (the part carries the sum of exps as
   * a float: the loss may differ in its last ulp, a probability by an ulp or
   * two). */
  void (*xent_vocab_forward)(float *losses, float *probs, const float *logits, const float *parts, int R,
                             int valid, int N, int V);
  /* dlogits(N,V) += dloss * (probs - onehot(targets - lo)), the one-hot only
   * where lo <= target < lo + valid; dlogits may alias probs (then it is
   * overwritten), as crossentropy_backward. On the padding columns that adds
   * dloss * 0 (xent_vocab_forward's probs are 0 there). */
  void (*xent_vocab_backward)(float *dlogits, const float *probs, const int32_t *targets, int lo, int valid,
                              float dloss, int N, int V);

  /* AdamW on a flat slice, as torch.optim.AdamW:
   *   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
   *   p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
   * t >= 1 is the step count; pass wd = 0 for slices without decay. */
  void (*adamw_update)(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int t);

  /* Sum of squares in double (for the global gradient norm). */
  double (*sum_squares)(const float *x, size_t n);
  /* x *= s. */
  void (*scale)(float *x, float s, size_t n);

  /* Mixed-precision storage (dtype AA_BF16 or AA_F16; 16-bit elements are
   * uint16_t bit patterns). Rounding is round-to-nearest-even as IEEE 754
   * binary16 and bfloat16 define it: NaN stays NaN (quiet), fp16 overflows
   * to +-inf and keeps subnormals, bf16 has fp32's range.
   * dst(n) = round(src). */
  void (*cast_from_f32)(void *dst, aa_dtype_t dtype, const float *src, size_t n);
  /* dst(n) = src widened to fp32 (exact). */
  void (*cast_to_f32)(float *dst, const void *src, aa_dtype_t dtype, size_t n);
  /* x(n) = widen(round(x)) in place, i.e. the value a 16-bit tensor would
   * hold; when dst is non-NULL the 16-bit bits are also written there. */
  void (*round_store)(void *dst, float *x, aa_dtype_t dtype, size_t n);

  /* Memory of this backend ("backend memory": host memory on the CPU,
   * device memory on CUDA). Every pointer the ops above take is backend
   * memory; the engine reaches it from the host only through these entries,
   * so model code is one code path. Accounting stays with aa_mem_t: the
   * caller counts the bytes, the backend provides them.
   *
   * alloc stores in *out `bytes` zeroed bytes, 64-byte aligned (owned by the
   * caller, released with free). bytes == 0 gives *out = NULL. Fails with
   * AA_EOOM ("out of memory on cuda:0: ...") or AA_ENOMEM (host) and a
   * message; *out is untouched on failure. Not sticky: a failed alloc does
   * not poison later ops. */
  int (*alloc)(void **out, size_t bytes);
  /* Releases alloc's memory after the ops that use it have finished; NULL
   * is a no-op. */
  void (*free)(void *p);
  /* p(bytes) = 0, ordered with the ops (enqueued on CUDA). */
  void (*memset0)(void *p, size_t bytes);
  /* Host <-> backend copies; they wait for the ops enqueued before them and
   * return 0 or a negative AA_E* code. */
  int (*upload)(void *dst, const void *host_src, size_t bytes);
  int (*download)(void *host_dst, const void *src, size_t bytes);
  /* Waits for every enqueued op; returns 0 or the backend's first failure
   * since it was last cleared (the CUDA backend's sticky error, with its
   * message in aa_last_error()). Always 0 on the CPU. */
  int (*sync)(void);
  /* Bytes of device memory the backend holds for itself now, beyond what
   * alloc handed out: scratch its ops grow on demand, library workspaces.
   * It only grows while the backend lives; the engine counts it as
   * workspace. 0 on the CPU (per-call scratch there is a few KiB per
   * thread, malloc'd and freed inside the op). */
  size_t (*scratch_bytes)(void);

  /* --- the llama family (engine/model.h): RMSNorm, SwiGLU, rotary position
   * embeddings and grouped-query attention. ---------------------------------------------- */

  /* RMSNorm: rstd(N) = 1 / sqrt(mean over the row of inp^2 + eps), saved
   * for backward; out(N,C) = inp * rstd * weight. */
  void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                          float eps);
  /* dinp(N,C) += gradient w.r.t. inp, dweight(C) += gradient w.r.t.
   * weight, from the forward's rstd. */
  void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                           const float *rstd, int N, int C);

  /* SwiGLU: inp(N,2F) rows are [gate(F) | up(F)];
   * out(N,F) = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
  void (*swiglu_forward)(float *out, const float *inp, int N, int F);
  /* dinp(N,2F) += gradient w.r.t. inp, given dout(N,F). */
  void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);

  /* Rotary position embeddings, in place on the q and k heads of
   * qkv(B,T,(NH + 2 NKV) HS) (per position [q (NH HS) | k (NKV HS) | v
   * (NKV HS)]; v is untouched), Hugging Face Llama's "rotate_half" pairing:
   * for each head vector x and i < HS/2, with angle a = (pos0 + t) *
   * theta^(-2i/HS) (computed in double), x[i] <- x[i] cos a - x[i + HS/2]
   * sin a and x[i + HS/2] <- x[i + HS/2] cos a + x[i] sin a. HS even. */
  void (*rope_forward)(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta);
  /* The backward of rope_forward: the transposed rotation (angle -a)
   * applied in place to the q and k parts of dqkv (a gradient, not
   * accumulated: it is rotated where it lies). */
  void (*rope_backward)(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta);

  /* Causal grouped-query attention, as attention_forward (flash style, lse
   * kept) over qkv(B,T,(NH + 2 NKV) HS) laid out as rope_forward says;
   * query head h reads key/value head h / (NH / NKV) (NKV divides NH).
   * out(B,T,NH HS), lse(B,NH,T). With NKV = NH this is attention_forward
   * at C = NH HS. */
  void (*attention_gqa_forward)(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int HS);
  /* dqkv(B,T,(NH + 2 NKV) HS) += the gradient w.r.t. qkv (a key/value
   * head's gradient sums over the query heads that read it). */
  void (*attention_gqa_backward)(float *dqkv, const float *dout, const float *qkv, const float *lse, int B, int T,
                                 int NH, int NKV, int HS);
  /* One decoding step with a key/value cache, for generation: qkv(B,(NH +
   * 2 NKV) HS) is position pos of each sequence (rotated already); its k
   * and v are written into row pos of kcache and vcache (B,Tmax,NKV HS),
   * then out(B,NH HS) = the attention of its q over the cached positions
   * 0..pos (causal, scale 1/sqrt(HS)). pos < Tmax. */
  void (*attention_decode)(float *out, float *kcache, float *vcache, const float *qkv, int B, int Tmax, int pos,
                           int NH, int NKV, int HS);

  /* Context parallelism's ring attention (Megatron's context parallel,
   * engine/model.c): a rank's queries against one block of keys and
   * values at a time, the blocks' results merged through their
   * log-sum-exp. Grouped-query layout as attention_gqa_forward, with the
   * rows given by pointers and strides: query head h of batch b, row i is
   * q[b bsq + i ldq + h HS ..], its key/value head g = h / (NH / NKV) reads
   * k[b bskv + j ldkv + g HS ..] and v the same way (so q, k and v can be
   * the parts of a qkv buffer, or a block received from another rank).
   * causal: the block holds the queries' own positions (Tq == Tk) and key
   * j is seen by query i only when j <= i; else every key is seen (a block
   * of earlier positions). Scores are scaled by 1/sqrt(HS).
   *
   * block_forward: out(B,Tq,NH HS) and lse(B,NH,Tq) of the queries
   * against this block alone (overwritten). */
  void (*attention_block_forward)(float *out, float *lse, const float *q, const float *k, const float *v,
                                  int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                  int ldkv, size_t bskv, int causal);
  /* block_merge: the running result (out, lse) absorbs a block's (ob,
   * lseb): lse' = log(e^lse + e^lseb), out' = e^(lse - lse') out +
   * e^(lseb - lse') ob. Shapes as block_forward's. */
  void (*attention_block_merge)(float *out, float *lse, const float *ob, const float *lseb, int B, int Tq,
                                int NH, int HS);
  /* block_delta: delta(B,NH,Tq) = rowsum over the head's HS columns of
   * dout * out (the final out), which every block's backward needs. */
  void (*attention_block_delta)(float *delta, const float *dout, const float *out, int B, int Tq, int NH,
                                int HS);
  /* block_backward: adds one block's share of the gradient, given the
   * final lse and delta of the queries and dout(B,Tq,NH HS): dq (laid out
   * as q) += dS k, dk and dv (laid out as k and v) += dS^T q and P^T dout,
   * with P = exp(s - lse) and dS = P (dout v^T - delta) / sqrt(HS). A
   * key/value head's gradient sums over the query heads that read it. */
  void (*attention_block_backward)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                   const float *k, const float *v, const float *lse, const float *delta,
                                   int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                   int ldkv, size_t bskv, int causal);

  /* A block of columns of a row-major matrix (context parallelism packs
   * the k|v columns of its q|k|v rows into the ring's buffers, and adds
   * their returning gradient back): rows_copy sets dst[r ldd + j] =
   * src[r lds + j], rows_accumulate adds it, for r < rows, j < cols. dst
   * and src do not overlap. */
  void (*rows_copy)(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols);
  void (*rows_accumulate)(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols);

  /* The mixture-of-experts ops (kernels/moe_ops.h): a table of their own,
   * since routing keeps a map and returns host-side offsets; NULL for a
   * backend that does not compute MoE layers. */
  const struct aa_moe_ops *moe;
  /* --- fused forms of the ops above (optional: NULL where a backend has
   * none, and the engine then calls the plain ops). They save a pass over
   * an activation each: one memory sweep is what an elementwise op costs.
   *
   * matmul_backward with dinp overwritten, not accumulated (the same
   * values as matmul_backward into a zeroed dinp). */
  void (*matmul_backward_set)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                              const float *weight, int N, int C, int OC);
  /* After matmul_forward without a bias: pre(N,OC) += bias (bias may be
   * NULL), out(N,OC) = gelu(pre). */
  void (*bias_gelu_forward)(float *pre, float *out, const float *bias, int N, int OC);
  /* dpre(N,OC) = gelu'(pre) * dout (overwritten, not accumulated) and
   * dbias(OC) += the column sums of dpre (dbias may be NULL): gelu_backward
   * into a zeroed dpre and the dbias part of matmul_backward in one pass. */
  void (*gelu_backward_bias)(float *dpre, float *dbias, const float *pre, const float *dout, int N, int OC);
  /* swiglu_backward with dinp overwritten, not accumulated. */
  void (*swiglu_backward_set)(float *dinp, const float *inp, const float *dout, int N, int F);
  /* adamw_update on the gradient grads * gscale, grads itself unchanged:
   * the optimizer's unscaling and clipping multiply folded into the update,
   * the same values as scale(grads, gscale, n) then adamw_update, one pass
   * over the gradient fewer. */
  void (*adamw_update_scaled)(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                              float beta1, float beta2, float eps, float weight_decay, int t, float gscale);
} aa_ops_t;

/* The CPU backend. Always available. */
const aa_ops_t *aa_ops_cpu(void);

/* The OpenBLAS kernels ("core") the CPU backend runs, e.g. "Haswell" or
 * "SkylakeX": OpenBLAS picks them when it loads, from the CPU or from
 * OPENBLAS_CORETYPE, and on some CPUs that choice is half the GEMM speed
 * (bench/README.md "Which OpenBLAS kernels run"). */
const char *aa_cpu_blas_core(void);

#endif
