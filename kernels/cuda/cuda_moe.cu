/* The mixture-of-experts layer's ops on the GPU (contracts in
 * kernels/cpu/cpu_moe.h, the CUDA specifics in cuda_moe.h). Straightforward
 * kernels, written to be checked against the CPU ops (tests/test_cuda_ops.c)
 * before they are made fast:
 *  - router softmax and top-k: one thread per token (E is small);
 *  - the counting sort: one thread per expert scans the slots in token
 *    order, so each expert's rows come out in token order and the capacity
 *    drops the same slots as on the CPU; the E+1 offsets go back to the host;
 *  - permute/unpermute: elementwise over (row, column), a token's slots
 *    added in slot order as on the CPU; unpermute's weight gradient one warp
 *    per slot through a fixed shuffle tree;
 *  - the expert GEMMs: the backend's matmul and swiglu launchers once per
 *    expert over its contiguous rows (cuBLAS, so the amp path's 16-bit
 *    inputs apply to them too), scratch from cudaMallocAsync on the stream
 *    (the context's scratch is the matmul's own);
 *  - the losses: one block, fixed per-thread slices summed in double in
 *    thread order.
 * No atomics: every result is deterministic on one GPU and toolkit. */
#include "../moe_ops.h"
#include "../moe_topk.h"
#include "cuda_common.cuh"
#include "cuda_moe.h"

#include <math.h>
#include <string.h>

#define MOE_THREADS 256

/* ------------------------------------------------------------- routing map */

extern "C" int aa_cuda_moe_route_alloc(aa_moe_route_t *out, int N, int E, int k) {
  if (N < 1 || E < 1 || E > AA_MOE_MAX_EXPERTS || k < 1 || k > E || (long long)N * k > AA_MOE_MAX_SLOTS)
    return aa_error(AA_EINVAL, "moe routing: N %d, E %d, k %d out of bounds (1 <= k <= E <= %d, N k <= %d)",
                    N, E, k, AA_MOE_MAX_EXPERTS, AA_MOE_MAX_SLOTS);
  size_t slots = (size_t)N * k;
  aa_moe_route_t r;
  memset(&r, 0, sizeof r);
  r.N = N, r.E = E, r.k = k;
  int rc = aa_cuda_alloc((void **)&r.expert, slots * sizeof(int32_t));
  if (!rc) rc = aa_cuda_alloc((void **)&r.weight, slots * sizeof(float));
  if (!rc) rc = aa_cuda_alloc((void **)&r.row, slots * sizeof(int32_t));
  if (!rc) rc = aa_cuda_alloc((void **)&r.slot, slots * sizeof(int32_t));
  if (!rc) rc = aa_cuda_alloc((void **)&r.counts, (size_t)E * sizeof(int32_t));
  if (!rc) rc = aa_cuda_alloc((void **)&r.offsets, (size_t)(E + 1) * sizeof(int32_t));
  if (rc) {
    aa_cuda_moe_route_free(&r);
    return rc;
  }
  *out = r;
  return 0;
}

extern "C" void aa_cuda_moe_route_free(aa_moe_route_t *r) {
  aa_cuda_free(r->expert), aa_cuda_free(r->weight), aa_cuda_free(r->row), aa_cuda_free(r->slot);
  aa_cuda_free(r->counts), aa_cuda_free(r->offsets);
  memset(r, 0, sizeof(*r));
}

/* ------------------------------------------------------------------ router */

// probs(N,E) = softmax of each row of logits(N,E), one thread per row
__global__ void moe_softmax_kernel(float *probs, const float *logits, int N, int E) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *l = logits + (size_t)n * E;
  float *p = probs + (size_t)n * E;
  float m = l[0], sum = 0.0f;
  for (int e = 1; e < E; e++)
    m = fmaxf(m, l[e]);
  for (int e = 0; e < E; e++) {
    p[e] = expf(l[e] - m);
    sum += p[e];
  }
  float inv = 1.0f / sum;
  for (int e = 0; e < E; e++)
    p[e] *= inv;
}

extern "C" int aa_cuda_moe_router_forward(float *logits, float *probs, const float *x, const float *wr, int N,
                                          int C, int E) {
  AA_CUDA_CTX(ctx);
  int rc = aa__cuda_matmul_forward(logits, x, wr, NULL, N, C, E);
  if (rc) return rc;
  moe_softmax_kernel<<<aa__cuda_blocks((size_t)N, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(probs, logits,
                                                                                               N, E);
  AA_CUDA_LAUNCHED();
  return 0;
}

// expert(N,k), weight(N,k): k argmax passes over the logits (strict >: the
// lower index wins a tie), then the probabilities renormalised, or kept as
// they are when raw (norm_topk_prob false); one thread a token
__global__ void moe_topk_kernel(int32_t *expert, float *weight, const float *logits, const float *probs,
                                int N, int E, int k, int raw) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *l = logits + (size_t)n * E, *p = probs + (size_t)n * E;
  int32_t *ex = expert + (size_t)n * k;
  float *w = weight + (size_t)n * k;
  aa_moe_topk(ex, w, l, p, E, k);
  if (raw)
    for (int j = 0; j < k; j++)
      w[j] = p[ex[j]];
}

// counts(E): slots routed to each expert, one thread an expert
__global__ void moe_count_kernel(int32_t *counts, const int32_t *expert, size_t slots, int E) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  int c = 0;
  for (size_t s = 0; s < slots; s++)
    c += expert[s] == e;
  counts[e] = c;
}

// offsets(E+1): prefix sums of min(count, capacity), one thread
__global__ void moe_offsets_kernel(int32_t *offsets, const int32_t *counts, int E, int capacity) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  offsets[0] = 0;
  for (int e = 0; e < E; e++)
    offsets[e + 1] = offsets[e] + min(counts[e], capacity);
}

// row(N k), slot(rows): expert e's slots in token order take its rows until
// the capacity, the rest get -1; one thread an expert
__global__ void moe_assign_kernel(int32_t *row, int32_t *slot, const int32_t *expert, const int32_t *offsets,
                                  size_t slots, int E, int capacity) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  int seen = 0;
  for (size_t s = 0; s < slots; s++) {
    if (expert[s] != e) continue;
    if (seen < capacity) {
      int r = offsets[e] + seen++;
      row[s] = r;
      slot[r] = (int32_t)s;
    } else {
      row[s] = -1;
    }
  }
}

extern "C" int aa_cuda_moe_route(aa_moe_route_t *r, int32_t *host_offsets, aa_moe_stats_t *stats,
                                 const float *logits, const float *probs, float capacity_factor) {
  if (isnan(capacity_factor)) return aa_error(AA_EINVAL, "moe routing: capacity factor is NaN");
  AA_CUDA_CTX(ctx);
  int N = r->N, E = r->E, k = r->k;
  size_t slots = (size_t)N * k;
  int capacity = (int)slots;
  if (capacity_factor > 0.0f) {
    double c = ceil((double)capacity_factor * (double)slots / E);
    capacity = c < (double)slots ? (int)c : (int)slots;
  }
  unsigned eb = aa__cuda_blocks((size_t)E, MOE_THREADS);
  moe_topk_kernel<<<aa__cuda_blocks((size_t)N, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(
      r->expert, r->weight, logits, probs, N, E, k, r->raw);
  AA_CUDA_LAUNCHED();
  moe_count_kernel<<<eb, MOE_THREADS, 0, ctx->stream>>>(r->counts, r->expert, slots, E);
  AA_CUDA_LAUNCHED();
  moe_offsets_kernel<<<1, 1, 0, ctx->stream>>>(r->offsets, r->counts, E, capacity);
  AA_CUDA_LAUNCHED();
  moe_assign_kernel<<<eb, MOE_THREADS, 0, ctx->stream>>>(r->row, r->slot, r->expert, r->offsets, slots, E,
                                                         capacity);
  AA_CUDA_LAUNCHED();
  AA_CUDA_TRY(cudaMemcpyAsync(host_offsets, r->offsets, (size_t)(E + 1) * sizeof(int32_t),
                              cudaMemcpyDeviceToHost, ctx->stream));
  AA_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
  r->capacity = capacity;
  r->rows = host_offsets[E];
  if (stats) {
    stats->min_tokens = stats->max_tokens = host_offsets[1];
    for (int e = 1; e < E; e++) {
      int rows = host_offsets[e + 1] - host_offsets[e];
      stats->min_tokens = rows < stats->min_tokens ? rows : stats->min_tokens;
      stats->max_tokens = rows > stats->max_tokens ? rows : stats->max_tokens;
    }
    stats->dropped = (int)slots - r->rows;
  }
  return 0;
}

/* ------------------------------------------------------ permute/unpermute */

// xp(rows,C)[r] = x[token of r]
__global__ void moe_permute_kernel(float *xp, const float *x, const int32_t *slot, int k, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / C, c = i % C;
    xp[i] = x[(size_t)(slot[r] / k) * C + c];
  }
}

// dx(N,C) += each token's kept rows of dxp, in slot order
__global__ void moe_permute_backward_kernel(float *dx, const float *dxp, const int32_t *row, int k, int C,
                                            size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t t = i / C, c = i % C;
    float acc = dx[i];
    for (int j = 0; j < k; j++) {
      int r = row[t * k + j];
      if (r >= 0) acc += dxp[(size_t)r * C + c];
    }
    dx[i] = acc;
  }
}

// out(N,C) = sum over kept slots, in order, of weight * yp[row]
__global__ void moe_unpermute_kernel(float *out, const float *yp, const int32_t *row, const float *weight,
                                     int k, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t t = i / C, c = i % C;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
      int r = row[t * k + j];
      if (r >= 0) acc += weight[t * k + j] * yp[(size_t)r * C + c];
    }
    out[i] = acc;
  }
}

// dyp(rows,C)[row[s]] += weight[s] dout[token of s], over (slot, column)
__global__ void moe_unpermute_dyp_kernel(float *dyp, const float *dout, const int32_t *row,
                                         const float *weight, int k, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t s = i / C, c = i % C;
    int r = row[s];
    if (r >= 0) dyp[(size_t)r * C + c] += weight[s] * dout[(s / k) * C + c];
  }
}

// dweight(N k)[s] += dout[token] . yp[row[s]], one warp a slot: lane sums
// over columns lane, lane + 32, ..., then a fixed shuffle tree
__global__ void moe_unpermute_dw_kernel(float *dweight, const float *dout, const float *yp,
                                        const int32_t *row, int k, int C, size_t slots) {
  size_t s = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (s >= slots) return; /* whole warps leave together: blockDim is a multiple of 32 */
  int r = row[s];
  if (r < 0) return;
  const float *d = dout + (s / k) * C, *y = yp + (size_t)r * C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32)
    v += d[c] * y[c];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) dweight[s] += v;
}

extern "C" int aa_cuda_moe_permute(float *xp, const float *x, const aa_moe_route_t *r, int C) {
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)r->rows * C;
  if (n == 0) return 0;
  moe_permute_kernel<<<aa__cuda_grid(n, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(xp, x, r->slot, r->k, C,
                                                                                     n);
  AA_CUDA_LAUNCHED();
  return 0;
}

extern "C" int aa_cuda_moe_permute_backward(float *dx, const float *dxp, const aa_moe_route_t *r, int C) {
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)r->N * C;
  moe_permute_backward_kernel<<<aa__cuda_grid(n, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(dx, dxp, r->row,
                                                                                              r->k, C, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

extern "C" int aa_cuda_moe_unpermute(float *out, const float *yp, const aa_moe_route_t *r, int C) {
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)r->N * C;
  moe_unpermute_kernel<<<aa__cuda_grid(n, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(out, yp, r->row,
                                                                                       r->weight, r->k, C, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

extern "C" int aa_cuda_moe_unpermute_backward(float *dyp, float *dweight, const float *dout, const float *yp,
                                              const aa_moe_route_t *r, int C) {
  AA_CUDA_CTX(ctx);
  size_t slots = (size_t)r->N * r->k, n = slots * C;
  moe_unpermute_dyp_kernel<<<aa__cuda_grid(n, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(
      dyp, dout, r->row, r->weight, r->k, C, n);
  AA_CUDA_LAUNCHED();
  moe_unpermute_dw_kernel<<<aa__cuda_blocks(slots * 32, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(
      dweight, dout, yp, r->row, r->k, C, slots);
  AA_CUDA_LAUNCHED();
  return 0;
}

/* ------------------------------------------------------- expert SwiGLU GEMMs */

/* One SwiGLU expert on M rows: h = x w13^T, a = swiglu(h), y = a w2^T. */
static int expert_forward(float *y, float *h, float *a, const float *x, const float *w13, const float *w2,
                          int M, int C, int F) {
  int rc = aa__cuda_matmul_forward(h, x, w13, NULL, M, C, 2 * F);
  if (!rc) rc = aa__cuda_swiglu_forward(a, h, M, F);
  if (!rc) rc = aa__cuda_matmul_forward(y, a, w2, NULL, M, F, C);
  return rc;
}

/* Its backward with scratch da(M,F) and dh(M,2F), zeroed here. */
static int expert_backward(cudaStream_t stream, float *dx, float *dw13, float *dw2, const float *dy,
                           const float *x, const float *h, const float *a, const float *w13, const float *w2,
                           float *da, float *dh, int M, int C, int F) {
  AA_CUDA_TRY(cudaMemsetAsync(da, 0, (size_t)M * 3 * F * sizeof(float), stream)); /* da, dh are adjacent */
  int rc = aa__cuda_matmul_backward(da, dw2, NULL, dy, a, w2, M, F, C);
  if (!rc) rc = aa__cuda_swiglu_backward(dh, h, da, M, F);
  if (!rc) rc = aa__cuda_matmul_backward(dx, dw13, NULL, dh, x, w13, M, C, 2 * F);
  return rc;
}

extern "C" int aa_cuda_moe_experts_forward(float *yp, float *h, float *a, const float *xp, const float *w13,
                                           const float *w2, const int32_t *offsets, int E, int C, int F) {
  for (int e = 0; e < E; e++) {
    size_t r0 = (size_t)offsets[e];
    int M = offsets[e + 1] - offsets[e];
    if (M == 0) continue;
    int rc = expert_forward(yp + r0 * C, h + r0 * 2 * F, a + r0 * F, xp + r0 * C, w13 + (size_t)e * 2 * F * C,
                            w2 + (size_t)e * C * F, M, C, F);
    if (rc) return rc;
  }
  return 0;
}

extern "C" int aa_cuda_moe_experts_backward(float *dxp, float *dw13, float *dw2, const float *dyp,
                                            const float *xp, const float *h, const float *a, const float *w13,
                                            const float *w2, const int32_t *offsets, int E, int C, int F) {
  AA_CUDA_CTX(ctx);
  int max_rows = 0;
  for (int e = 0; e < E; e++)
    max_rows = offsets[e + 1] - offsets[e] > max_rows ? offsets[e + 1] - offsets[e] : max_rows;
  if (max_rows == 0) return 0;
  float *scratch = NULL; /* da then dh of the largest expert, reused expert after expert */
  AA_CUDA_TRY(cudaMallocAsync((void **)&scratch, (size_t)max_rows * 3 * F * sizeof(float), ctx->stream));
  int rc = 0;
  for (int e = 0; e < E && !rc; e++) {
    size_t r0 = (size_t)offsets[e];
    int M = offsets[e + 1] - offsets[e];
    if (M == 0) continue;
    rc = expert_backward(ctx->stream, dxp + r0 * C, dw13 + (size_t)e * 2 * F * C, dw2 + (size_t)e * C * F,
                         dyp + r0 * C, xp + r0 * C, h + r0 * 2 * F, a + r0 * F, w13 + (size_t)e * 2 * F * C,
                         w2 + (size_t)e * C * F, scratch, scratch + (size_t)M * F, M, C, F);
  }
  AA_CUDA_TRY(cudaFreeAsync(scratch, ctx->stream));
  return rc;
}

/* ---------------------------------------------------------- shared experts */

extern "C" int aa_cuda_moe_shared_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                                          const float *ws2, int S, int N, int C, int F) {
  if (S == 0) return 0;
  AA_CUDA_CTX(ctx);
  float *y = NULL;
  AA_CUDA_TRY(cudaMallocAsync((void **)&y, (size_t)N * C * sizeof(float), ctx->stream));
  int rc = 0;
  for (int s = 0; s < S && !rc; s++) {
    rc = expert_forward(y, hs + (size_t)s * N * 2 * F, as + (size_t)s * N * F, x,
                        ws13 + (size_t)s * 2 * F * C, ws2 + (size_t)s * C * F, N, C, F);
    if (!rc) rc = aa__cuda_accumulate(out, y, (size_t)N * C);
  }
  AA_CUDA_TRY(cudaFreeAsync(y, ctx->stream));
  return rc;
}

extern "C" int aa_cuda_moe_shared_backward(float *dx, float *dws13, float *dws2, const float *dout,
                                           const float *x, const float *hs, const float *as,
                                           const float *ws13, const float *ws2, int S, int N, int C, int F) {
  if (S == 0) return 0;
  AA_CUDA_CTX(ctx);
  float *scratch = NULL;
  AA_CUDA_TRY(cudaMallocAsync((void **)&scratch, (size_t)N * 3 * F * sizeof(float), ctx->stream));
  int rc = 0;
  for (int s = 0; s < S && !rc; s++)
    rc = expert_backward(ctx->stream, dx, dws13 + (size_t)s * 2 * F * C, dws2 + (size_t)s * C * F, dout, x,
                         hs + (size_t)s * N * 2 * F, as + (size_t)s * N * F, ws13 + (size_t)s * 2 * F * C,
                         ws2 + (size_t)s * C * F, scratch, scratch + (size_t)N * F, N, C, F);
  AA_CUDA_TRY(cudaFreeAsync(scratch, ctx->stream));
  return rc;
}

/* --------------------------------------------- Qwen-MoE's shared-expert gate */

/* A CUDA call's or the last launch's failure recorded as the sticky error
 * (AA_CUDA_TRY's), as a code, so that the caller still frees its scratch. */
#define MOE_CHECK(call) ((e_ = (call)) == cudaSuccess ? 0 : aa__cuda_fail_cuda(e_, #call, __FILE__, __LINE__))

// g(N) = sigmoid(x[n] . wg), the dot product in double in column order (as
// the CPU's shared_gate); one thread a token
__global__ void moe_gate_kernel(float *g, const float *x, const float *wg, int N, int C) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *xn = x + (size_t)n * C;
  double z = 0.0;
  for (int c = 0; c < C; c++)
    z += (double)xn[c] * wg[c];
  g[n] = (float)(1.0 / (1.0 + exp(-z)));
}

// out(N,C) += g[n] * y(N,C)
__global__ void moe_gate_apply_kernel(float *out, const float *y, const float *g, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] += g[i / C] * y[i];
}

// One thread a token, as the CPU's loop: dot = dout[n] . y[n] in double,
// dy[n] = g dout[n], dz = g (1 - g) dot, dx[n] += dz wg; g[n] becomes dz
__global__ void moe_gate_backward_kernel(float *dx, float *dy, float *g, const float *dout, const float *y,
                                         const float *wg, int N, int C) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *d = dout + (size_t)n * C, *yn = y + (size_t)n * C;
  float *dyn = dy + (size_t)n * C, *dxn = dx + (size_t)n * C;
  const float gn = g[n];
  double dot = 0.0;
  for (int c = 0; c < C; c++) {
    dot += (double)d[c] * yn[c];
    dyn[c] = gn * d[c];
  }
  float dz = (float)(gn * (1.0 - gn) * dot);
  for (int c = 0; c < C; c++)
    dxn[c] += dz * wg[c];
  g[n] = dz;
}

// dwg(C) += sum over tokens, in token order, of dz[n] x[n]; one thread a column
__global__ void moe_gate_dwg_kernel(float *dwg, const float *dz, const float *x, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = dwg[c];
  for (int n = 0; n < N; n++)
    acc += dz[n] * x[(size_t)n * C + c];
  dwg[c] = acc;
}

extern "C" int aa_cuda_moe_shared_gate_forward(float *out, float *hs, float *as, const float *x,
                                               const float *ws13, const float *ws2, const float *wg, int S,
                                               int N, int C, int F) {
  if (S == 0) return 0;
  AA_CUDA_CTX(ctx);
  const size_t NC = (size_t)N * C;
  float *y = NULL; /* the shared experts' sum (N,C), then the gate (N) */
  AA_CUDA_TRY(cudaMallocAsync((void **)&y, (NC + (size_t)N) * sizeof(float), ctx->stream));
  float *g = y + NC;
  cudaError_t e_;
  int rc = MOE_CHECK(cudaMemsetAsync(y, 0, NC * sizeof(float), ctx->stream));
  if (!rc) rc = aa_cuda_moe_shared_forward(y, hs, as, x, ws13, ws2, S, N, C, F);
  if (!rc) {
    moe_gate_kernel<<<aa__cuda_blocks((size_t)N, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(g, x, wg, N, C);
    rc = MOE_CHECK(cudaGetLastError());
  }
  if (!rc) {
    moe_gate_apply_kernel<<<aa__cuda_grid(NC, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(out, y, g, C, NC);
    rc = MOE_CHECK(cudaGetLastError());
  }
  AA_CUDA_TRY(cudaFreeAsync(y, ctx->stream));
  return rc;
}

extern "C" int aa_cuda_moe_shared_gate_backward(float *dx, float *dws13, float *dws2, float *dwg,
                                                const float *dout, const float *x, const float *hs,
                                                const float *as, const float *ws13, const float *ws2,
                                                const float *wg, int S, int N, int C, int F) {
  if (S == 0) return 0;
  AA_CUDA_CTX(ctx);
  const size_t NC = (size_t)N * C;
  float *y = NULL; /* y (N,C): the shared experts' sum, recomputed from as; dy (N,C); g, then dz (N) */
  AA_CUDA_TRY(cudaMallocAsync((void **)&y, (2 * NC + (size_t)N) * sizeof(float), ctx->stream));
  float *dy = y + NC, *g = dy + NC;
  cudaError_t e_;
  int rc = MOE_CHECK(cudaMemsetAsync(y, 0, NC * sizeof(float), ctx->stream));
  for (int s = 0; s < S && !rc; s++) {
    rc = aa__cuda_matmul_forward(dy, as + (size_t)s * N * F, ws2 + (size_t)s * C * F, NULL, N, F, C);
    if (!rc) rc = aa__cuda_accumulate(y, dy, NC);
  }
  if (!rc) {
    moe_gate_kernel<<<aa__cuda_blocks((size_t)N, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(g, x, wg, N, C);
    rc = MOE_CHECK(cudaGetLastError());
  }
  if (!rc) {
    moe_gate_backward_kernel<<<aa__cuda_blocks((size_t)N, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(
        dx, dy, g, dout, y, wg, N, C);
    rc = MOE_CHECK(cudaGetLastError());
  }
  if (!rc) {
    moe_gate_dwg_kernel<<<aa__cuda_blocks((size_t)C, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(dwg, g, x,
                                                                                                  N, C);
    rc = MOE_CHECK(cudaGetLastError());
  }
  if (!rc) rc = aa_cuda_moe_shared_backward(dx, dws13, dws2, dy, x, hs, as, ws13, ws2, S, N, C, F);
  AA_CUDA_TRY(cudaFreeAsync(y, ctx->stream));
  return rc;
}

/* ------------------------------------------------------------------ losses */

__device__ double moe_row_lse(const float *l, int E) {
  double m = l[0], s = 0.0;
  for (int e = 1; e < E; e++)
    m = fmax(m, (double)l[e]);
  for (int e = 0; e < E; e++)
    s += exp(l[e] - m);
  return m + log(s);
}

// out[0] = aux, out[1] = z: one block; thread t takes tokens t, t + T, ...
// for z and experts t, t + T, ... for the balance term; thread 0 adds the
// partials in thread order
__global__ void moe_losses_kernel(float *out, const float *logits, const float *probs, const int32_t *counts,
                                  int N, int E, float aux_coef, float z_coef) {
  __shared__ double bal[MOE_THREADS], zs[MOE_THREADS];
  int t = threadIdx.x;
  double b = 0.0, z = 0.0;
  for (int e = t; e < E; e += MOE_THREADS) {
    double P = 0.0;
    for (int n = 0; n < N; n++)
      P += probs[(size_t)n * E + e];
    b += (double)counts[e] / N * (P / N);
  }
  for (int n = t; n < N; n += MOE_THREADS) {
    double lse = moe_row_lse(logits + (size_t)n * E, E);
    z += lse * lse;
  }
  bal[t] = b, zs[t] = z;
  __syncthreads();
  if (t != 0) return;
  double bt = 0.0, zt = 0.0;
  for (int i = 0; i < MOE_THREADS; i++)
    bt += bal[i], zt += zs[i];
  out[0] = (float)((double)aux_coef * E * bt);
  out[1] = (float)((double)z_coef * zt / N);
}

extern "C" int aa_cuda_moe_losses(float *aux, float *z, const float *logits, const float *probs,
                                  const aa_moe_route_t *r, float aux_coef, float z_coef) {
  AA_CUDA_CTX(ctx);
  void *d = NULL;
  int rc = aa__cuda_scratch(ctx, 2 * sizeof(float), &d);
  if (rc) return rc;
  moe_losses_kernel<<<1, MOE_THREADS, 0, ctx->stream>>>((float *)d, logits, probs, r->counts, r->N, r->E,
                                                        aux_coef, z_coef);
  AA_CUDA_LAUNCHED();
  float host[2];
  AA_CUDA_TRY(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, ctx->stream));
  AA_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
  *aux = host[0], *z = host[1];
  return 0;
}

// dlogits(N,E), overwritten: the gradient through the renormalisation (none
// when raw: the weight is the probability itself), the
// softmax, the aux loss and the z-loss (formulas in cpu_moe.c); one thread a
// token, dp_e formed on the fly (E may be too large for a per-thread array)
__global__ void moe_dlogits_kernel(float *dlogits, const float *dweight, const float *logits,
                                   const float *probs, const int32_t *expert, const float *weight,
                                   const int32_t *counts, int N, int E, int k, int raw, float aux_scale,
                                   float z_scale) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float *p = probs + (size_t)n * E;
  const int32_t *ex = expert + (size_t)n * k;
  const float *w = weight + (size_t)n * k, *dw = dweight + (size_t)n * k;
  float *dl = dlogits + (size_t)n * E;
  float s = 0.0f, wdw = 0.0f;
  for (int j = 0; j < k; j++) {
    s += p[ex[j]];
    wdw += w[j] * dw[j];
  }
  float pdp = 0.0f;
  for (int e = 0; e < E; e++) {
    float dp = aux_scale * (float)counts[e];
    for (int j = 0; j < k; j++)
      if (ex[j] == e) dp += raw ? dw[j] : (dw[j] - wdw) / s;
    dl[e] = dp;
    pdp += p[e] * dp;
  }
  float zl = z_scale * (float)moe_row_lse(logits + (size_t)n * E, E);
  for (int e = 0; e < E; e++)
    dl[e] = p[e] * (dl[e] - pdp) + zl * p[e];
}

extern "C" int aa_cuda_moe_router_backward(float *dx, float *dwr, float *dlogits, const float *dweight,
                                           const float *x, const float *wr, const float *logits,
                                           const float *probs, const aa_moe_route_t *r, int C, float aux_coef,
                                           float z_coef, float dloss) {
  AA_CUDA_CTX(ctx);
  int N = r->N, E = r->E;
  float aux_scale = (float)((double)dloss * aux_coef * E / ((double)N * N));
  float z_scale = (float)(2.0 * dloss * z_coef / N);
  moe_dlogits_kernel<<<aa__cuda_blocks((size_t)N, MOE_THREADS), MOE_THREADS, 0, ctx->stream>>>(
      dlogits, dweight, logits, probs, r->expert, r->weight, r->counts, N, E, r->k, r->raw, aux_scale,
      z_scale);
  AA_CUDA_LAUNCHED();
  return aa__cuda_matmul_backward(dx, dwr, NULL, dlogits, x, wr, N, C, E);
}

/* ------------------------------------------------------------ the op table */

/* kernels/moe_ops.h's, for cuda_ops.cu's aa_ops_t. Positional (nvcc's C++17
 * has no designated initializers), in the order of aa_moe_ops_t's fields.
 */
extern "C" const aa_moe_ops_t aa__cuda_moe_ops = {
    aa_cuda_moe_route_alloc,
    aa_cuda_moe_route_free,
    aa_cuda_moe_router_forward,
    aa_cuda_moe_route,
    aa_cuda_moe_permute,
    aa_cuda_moe_permute_backward,
    aa_cuda_moe_unpermute,
    aa_cuda_moe_unpermute_backward,
    aa_cuda_moe_experts_forward,
    aa_cuda_moe_experts_backward,
    aa_cuda_moe_shared_forward,
    aa_cuda_moe_shared_backward,
    aa_cuda_moe_shared_gate_forward,
    aa_cuda_moe_shared_gate_backward,
    aa_cuda_moe_losses,
    aa_cuda_moe_router_backward,
};
