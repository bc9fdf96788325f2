/* Causal multi-head self-attention, flash-attention style (the contract in
 * kernels/ops.h): nothing T x T ever reaches global memory. The forward
 * keeps one logsumexp per query row; the backward recomputes the
 * probabilities from q, k and it.
 *
 * q, k and v are read in place from qkv(B,T,3C) (no permuted copies). A
 * block owns one (batch, head) and a tile of rows; K/V (or Q/dO) tiles are
 * staged in shared memory, one warp works on one row at a time and its 32
 * lanes take 32 keys (scores: each lane one dot product) or 32 head
 * dimensions (outputs: lane d, d+32, ...), so hs <= ATT_MAX_HS.
 *
 *   forward   grid (T/16, B*NH): online softmax over key tiles of 32
 *             (running max m, sum l, output accumulator rescaled by
 *             exp(m_old - m_new)); out = acc / l, lse = m + log l.
 *   backward  two kernels, no atomics (deterministic):
 *     dq      grid (T/16, B*NH), per query row t: pass 1 over its keys
 *             gives D_t = sum_u P(t,u) dP(t,u) with dP = dO_t . v_u; pass 2
 *             gives dS = P (dP - D_t) / sqrt(hs) and dq_t += sum_u dS k_u.
 *             D goes to scratch for the second kernel.
 *     dk, dv  grid (T/16, B*NH), per key u, over the query tiles t >= u:
 *             dv_u += sum_t P dO_t, dk_u += sum_t dS q_t.
 *
 * The math is fp32 on CUDA cores: the point here is the memory contract
 * (O(T) per head kept, O(tile) scratch) and exactness against the CPU
 * backend; tensor-core (bf16 mma) tiles are the next step for speed
 * (kernels/README.md). Every sum runs in a fixed order: deterministic.
 *
 * The op table's attention entries choose between these kernels and the
 * cuBLAS path of cuda_attention_gemm.cu (see use_flash below). */
#include "cuda_common.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_WARPS 4
#define ATT_ROWS_PER_WARP 4
#define ATT_ROWS (ATT_WARPS * ATT_ROWS_PER_WARP) /* query (or key) rows per block */
#define ATT_TILE 32                              /* keys (or queries) per shared-memory tile */
#define ATT_MAX_SLOTS 8                          /* head dims per lane */
#define ATT_MAX_HS (32 * ATT_MAX_SLOTS)

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/* Rows r0..r0+n-1 of part `part` (0 q, 1 k, 2 v) of head h, batch b, into
 * dst (n rows of stride ld); rows at or past T are zero. */
__device__ __forceinline__ void load_rows(float *dst, int ld, const float *qkv, int b, int h, int part, int r0,
                                          int n, int T, int C, int hs) {
  for (int i = threadIdx.x; i < n * hs; i += blockDim.x) {
    int r = i / hs, d = i % hs, t = r0 + r;
    dst[r * ld + d] = t < T ? qkv[((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * hs + d] : 0.0f;
  }
}

/* Rows r0..r0+n-1 of head h of a (B,T,C) tensor into dst (stride ld). */
__device__ __forceinline__ void load_head_rows(float *dst, int ld, const float *x, int b, int h, int r0, int n,
                                               int T, int C, int hs) {
  for (int i = threadIdx.x; i < n * hs; i += blockDim.x) {
    int r = i / hs, d = i % hs, t = r0 + r;
    dst[r * ld + d] = t < T ? x[((size_t)b * T + t) * C + (size_t)h * hs + d] : 0.0f;
  }
}

/* Keys and values s0..s0+ATT_TILE-1 of head h into Ks and Vs (stride ld),
 * between two barriers: the previous tile is consumed before it is
 * overwritten (and whatever the block loaded before is visible), and the
 * new one is complete before anyone reads it. */
__device__ __forceinline__ void stage_kv_tile(float *Ks, float *Vs, int ld, const float *qkv, int b, int h, int s0,
                                              int T, int C, int hs) {
  __syncthreads();
  load_rows(Ks, ld, qkv, b, h, 1, s0, ATT_TILE, T, C, hs);
  load_rows(Vs, ld, qkv, b, h, 2, s0, ATT_TILE, T, C, hs);
  __syncthreads();
}

__device__ __forceinline__ float row_dot(const float *a, const float *b, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; d++)
    s += a[d] * b[d];
  return s;
}

/* acc[k] += sum over the tile's rows j of w_j X(j, lane + 32k), w_j being
 * lane j's w: a (1 x 32) @ (32 x hs) product with the result spread over
 * the lanes as the accumulators are. */
__device__ __forceinline__ void tile_axpy(float acc[ATT_MAX_SLOTS], float w, const float *X, int ld, int lane,
                                          int hs) {
  for (int j = 0; j < ATT_TILE; j++) {
    float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
    for (int k = 0; k < ATT_MAX_SLOTS; k++) {
      int d = lane + 32 * k;
      if (d < hs) acc[k] += wj * X[j * ld + d];
    }
  }
}

// shared: Qs[ATT_ROWS][hs], Ks[ATT_TILE][hs+1], Vs[ATT_TILE][hs+1]
__global__ void __launch_bounds__(ATT_WARPS * 32)
    flash_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH, float scale) {
  extern __shared__ float smem[];
  int hs = C / NH, ld = hs + 1;
  float *Qs = smem, *Ks = Qs + ATT_ROWS * hs, *Vs = Ks + ATT_TILE * ld;
  int b = blockIdx.y / NH, h = blockIdx.y % NH, t0 = blockIdx.x * ATT_ROWS;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows(Qs, hs, qkv, b, h, 0, t0, ATT_ROWS, T, C, hs);
  float m[ATT_ROWS_PER_WARP], l[ATT_ROWS_PER_WARP], acc[ATT_ROWS_PER_WARP][ATT_MAX_SLOTS];
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int k = 0; k < ATT_MAX_SLOTS; k++)
      acc[r][k] = 0.0f;
  }
  int t_last = min(t0 + ATT_ROWS, T) - 1;
  for (int s0 = 0; s0 <= t_last; s0 += ATT_TILE) {
    stage_kv_tile(Ks, Vs, ld, qkv, b, h, s0, T, C, hs);
#pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
      int i = warp * ATT_ROWS_PER_WARP + r, t = t0 + i, s = s0 + lane;
      if (t >= T) continue; /* warp-uniform */
      float score = s <= t ? row_dot(Qs + i * hs, Ks + lane * ld, hs) * scale : -INFINITY;
      float tile_max = warp_max(score);
      if (tile_max == -INFINITY) continue; /* every key of the tile is in t's future */
      float m_new = fmaxf(m[r], tile_max);
      float p = s <= t ? expf(score - m_new) : 0.0f;
      float corr = expf(m[r] - m_new); /* 0 on the first tile: m = -inf */
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int k = 0; k < ATT_MAX_SLOTS; k++)
        acc[r][k] *= corr;
      tile_axpy(acc[r], p, Vs, ld, lane, hs);
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    int t = t0 + warp * ATT_ROWS_PER_WARP + r;
    if (t >= T) continue;
    float inv = 1.0f / l[r];
#pragma unroll
    for (int k = 0; k < ATT_MAX_SLOTS; k++) {
      int d = lane + 32 * k;
      if (d < hs) out[((size_t)b * T + t) * C + (size_t)h * hs + d] = acc[r][k] * inv;
    }
    if (lane == 0) lse[(size_t)blockIdx.y * T + t] = m[r] + logf(l[r]);
  }
}

// shared: Qs[ATT_ROWS][hs], dOs[ATT_ROWS][hs], Ks[ATT_TILE][hs+1], Vs[ATT_TILE][hs+1]
__global__ void __launch_bounds__(ATT_WARPS * 32)
    flash_backward_dq_kernel(float *dqkv, float *Dbuf, const float *dout, const float *qkv, const float *lse, int T,
                             int C, int NH, float scale) {
  extern __shared__ float smem[];
  int hs = C / NH, ld = hs + 1;
  float *Qs = smem, *dOs = Qs + ATT_ROWS * hs, *Ks = dOs + ATT_ROWS * hs, *Vs = Ks + ATT_TILE * ld;
  int b = blockIdx.y / NH, h = blockIdx.y % NH, t0 = blockIdx.x * ATT_ROWS;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows(Qs, hs, qkv, b, h, 0, t0, ATT_ROWS, T, C, hs);
  load_head_rows(dOs, hs, dout, b, h, t0, ATT_ROWS, T, C, hs);
  float L[ATT_ROWS_PER_WARP], D[ATT_ROWS_PER_WARP], dq[ATT_ROWS_PER_WARP][ATT_MAX_SLOTS];
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    int t = t0 + warp * ATT_ROWS_PER_WARP + r;
    L[r] = t < T ? lse[(size_t)blockIdx.y * T + t] : 0.0f;
    D[r] = 0.0f;
    for (int k = 0; k < ATT_MAX_SLOTS; k++)
      dq[r][k] = 0.0f;
  }
  int t_last = min(t0 + ATT_ROWS, T) - 1;
  for (int pass = 0; pass < 2; pass++) {
    for (int s0 = 0; s0 <= t_last; s0 += ATT_TILE) {
      stage_kv_tile(Ks, Vs, ld, qkv, b, h, s0, T, C, hs);
#pragma unroll
      for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
        int i = warp * ATT_ROWS_PER_WARP + r, t = t0 + i, s = s0 + lane;
        if (t >= T || s0 > t) continue; /* warp-uniform */
        float p = 0.0f, dp = 0.0f;
        if (s <= t) {
          p = expf(row_dot(Qs + i * hs, Ks + lane * ld, hs) * scale - L[r]);
          dp = row_dot(dOs + i * hs, Vs + lane * ld, hs);
        }
        if (pass == 0) {
          D[r] += warp_sum(p * dp);
          continue;
        }
        float ds = p * (dp - D[r]) * scale;
        tile_axpy(dq[r], ds, Ks, ld, lane, hs);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    int t = t0 + warp * ATT_ROWS_PER_WARP + r;
    if (t >= T) continue;
#pragma unroll
    for (int k = 0; k < ATT_MAX_SLOTS; k++) {
      int d = lane + 32 * k;
      if (d < hs) dqkv[((size_t)b * T + t) * 3 * C + (size_t)h * hs + d] += dq[r][k];
    }
    if (lane == 0) Dbuf[(size_t)blockIdx.y * T + t] = D[r];
  }
}

// shared: Kb[ATT_ROWS][hs], Vb[ATT_ROWS][hs], Qs[ATT_TILE][hs+1], dOs[ATT_TILE][hs+1], Ls[ATT_TILE], Ds[ATT_TILE]
__global__ void __launch_bounds__(ATT_WARPS * 32)
    flash_backward_dkv_kernel(float *dqkv, const float *Dbuf, const float *dout, const float *qkv, const float *lse,
                              int T, int C, int NH, float scale) {
  extern __shared__ float smem[];
  int hs = C / NH, ld = hs + 1;
  float *Kb = smem, *Vb = Kb + ATT_ROWS * hs, *Qs = Vb + ATT_ROWS * hs, *dOs = Qs + ATT_TILE * ld;
  float *Ls = dOs + ATT_TILE * ld, *Ds = Ls + ATT_TILE;
  int b = blockIdx.y / NH, h = blockIdx.y % NH, s0 = blockIdx.x * ATT_ROWS;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_rows(Kb, hs, qkv, b, h, 1, s0, ATT_ROWS, T, C, hs);
  load_rows(Vb, hs, qkv, b, h, 2, s0, ATT_ROWS, T, C, hs);
  float dk[ATT_ROWS_PER_WARP][ATT_MAX_SLOTS], dv[ATT_ROWS_PER_WARP][ATT_MAX_SLOTS];
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++)
    for (int k = 0; k < ATT_MAX_SLOTS; k++)
      dk[r][k] = dv[r][k] = 0.0f;
  /* Queries before s0 see none of these keys. */
  for (int q0 = s0; q0 < T; q0 += ATT_TILE) {
    __syncthreads();
    load_rows(Qs, ld, qkv, b, h, 0, q0, ATT_TILE, T, C, hs);
    load_head_rows(dOs, ld, dout, b, h, q0, ATT_TILE, T, C, hs);
    for (int i = threadIdx.x; i < ATT_TILE; i += blockDim.x) {
      int t = q0 + i;
      Ls[i] = t < T ? lse[(size_t)blockIdx.y * T + t] : 0.0f;
      Ds[i] = t < T ? Dbuf[(size_t)blockIdx.y * T + t] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
      int i = warp * ATT_ROWS_PER_WARP + r, s = s0 + i, t = q0 + lane;
      if (s >= T) continue; /* warp-uniform */
      float p = 0.0f, ds = 0.0f;
      if (t < T && t >= s) {
        p = expf(row_dot(Qs + lane * ld, Kb + i * hs, hs) * scale - Ls[lane]);
        float dp = row_dot(dOs + lane * ld, Vb + i * hs, hs);
        ds = p * (dp - Ds[lane]) * scale;
      }
      tile_axpy(dv[r], p, dOs, ld, lane, hs);
      tile_axpy(dk[r], ds, Qs, ld, lane, hs);
    }
  }
#pragma unroll
  for (int r = 0; r < ATT_ROWS_PER_WARP; r++) {
    int s = s0 + warp * ATT_ROWS_PER_WARP + r;
    if (s >= T) continue;
    float *dst = dqkv + ((size_t)b * T + s) * 3 * C + (size_t)h * hs;
#pragma unroll
    for (int k = 0; k < ATT_MAX_SLOTS; k++) {
      int d = lane + 32 * k;
      if (d < hs) {
        dst[C + d] += dk[r][k];
        dst[2 * C + d] += dv[r][k];
      }
    }
  }
}

/* Shared bytes of the three kernels for head size hs. */
static size_t fwd_smem(int hs) { return sizeof(float) * ((size_t)ATT_ROWS * hs + 2 * (size_t)ATT_TILE * (hs + 1)); }
static size_t dq_smem(int hs) { return sizeof(float) * (2 * (size_t)ATT_ROWS * hs + 2 * (size_t)ATT_TILE * (hs + 1)); }
static size_t dkv_smem(int hs) {
  return sizeof(float) * (2 * (size_t)ATT_ROWS * hs + 2 * (size_t)ATT_TILE * (hs + 1) + 2 * ATT_TILE);
}

/* Checks the shape and lets `kernel` use `bytes` of shared memory (past
 * 48 KiB a kernel must opt in). */
static int att_prepare(const void *kernel, size_t bytes, int hs) {
  if (hs > ATT_MAX_HS)
    return aa__cuda_fail(AA_EUNSUPPORTED, __FILE__, __LINE__,
                         "attention: head size %d is larger than the CUDA kernel's limit of %d", hs, ATT_MAX_HS);
  if (bytes > 48 * 1024)
    AA_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return 0;
}

static int flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  int hs = C / NH, rc;
  size_t sm = fwd_smem(hs);
  if ((rc = att_prepare((const void *)flash_forward_kernel, sm, hs))) return rc;
  dim3 grid((unsigned)((T + ATT_ROWS - 1) / ATT_ROWS), (unsigned)(B * NH));
  flash_forward_kernel<<<grid, ATT_WARPS * 32, sm, ctx->stream>>>(out, lse, qkv, T, C, NH, 1.0f / sqrtf((float)hs));
  AA_CUDA_LAUNCHED();
  return 0;
}

static int flash_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B, int T, int C,
                          int NH) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  int hs = C / NH, rc;
  float *Dbuf;
  if ((rc = aa__cuda_scratch(ctx, (size_t)B * NH * T * sizeof(float), (void **)&Dbuf))) return rc;
  size_t sm_dq = dq_smem(hs), sm_dkv = dkv_smem(hs);
  if ((rc = att_prepare((const void *)flash_backward_dq_kernel, sm_dq, hs)) ||
      (rc = att_prepare((const void *)flash_backward_dkv_kernel, sm_dkv, hs)))
    return rc;
  dim3 grid((unsigned)((T + ATT_ROWS - 1) / ATT_ROWS), (unsigned)(B * NH));
  float scale = 1.0f / sqrtf((float)hs);
  flash_backward_dq_kernel<<<grid, ATT_WARPS * 32, sm_dq, ctx->stream>>>(dqkv, Dbuf, dout, qkv, lse, T, C, NH,
                                                                         scale);
  AA_CUDA_LAUNCHED();
  flash_backward_dkv_kernel<<<grid, ATT_WARPS * 32, sm_dkv, ctx->stream>>>(dqkv, Dbuf, dout, qkv, lse, T, C, NH,
                                                                           scale);
  AA_CUDA_LAUNCHED();
  return 0;
}

/* --- choice of implementation ------------------------------------------------ */

/* The cuBLAS path runs on tensor cores (TF32) but needs B*NH*T*T floats of
 * transient scratch (two such buffers in the backward); past this many bytes
 * for one of them the flash kernels take over. GPT-2 124M at B = 16,
 * T = 1024 needs 768 MiB. */
#define ATT_GEMM_SCRATCH_MAX ((size_t)1 << 30)

static aa_cuda_attention_t g_attention = AA_CUDA_ATT_AUTO;

extern "C" void aa_cuda_set_attention(aa_cuda_attention_t mode) { g_attention = mode; }

/* The mode in force: aa_cuda_set_attention's, else AUTOACCEL_CUDA_ATTENTION
 * (gemm or flash), else auto. */
static aa_cuda_attention_t attention_mode(void) {
  if (g_attention != AA_CUDA_ATT_AUTO) return g_attention;
  const char *e = getenv("AUTOACCEL_CUDA_ATTENTION");
  if (e && !strcmp(e, "gemm")) return AA_CUDA_ATT_GEMM;
  if (e && !strcmp(e, "flash")) return AA_CUDA_ATT_FLASH;
  return AA_CUDA_ATT_AUTO;
}

static int use_flash(int B, int T, int NH) {
  aa_cuda_attention_t m = attention_mode();
  if (m != AA_CUDA_ATT_AUTO) return m == AA_CUDA_ATT_FLASH;
  return (size_t)B * NH * T * T * sizeof(float) > ATT_GEMM_SCRATCH_MAX;
}

int aa__cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  if (use_flash(B, T, NH)) return flash_forward(out, lse, qkv, B, T, C, NH);
  return aa__cuda_attention_forward_gemm(out, lse, qkv, B, T, C, NH);
}

int aa__cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B, int T,
                                int C, int NH) {
  if (use_flash(B, T, NH)) return flash_backward(dqkv, dout, qkv, lse, B, T, C, NH);
  return aa__cuda_attention_backward_gemm(dqkv, dout, qkv, lse, B, T, C, NH);
}
