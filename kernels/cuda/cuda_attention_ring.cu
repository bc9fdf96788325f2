/* Ring attention's block ops on the GPU (kernels/ops.h attention_block_*,
 * context parallelism; the CPU reference is kernels/cpu/cpu_attention_ring.c):
 * a rank's queries against one block of keys and values, read in place
 * through their row and batch strides, grouped-query (query head h reads
 * key/value head h / (NH / NKV)), the whole block or its causal diagonal.
 *
 * The flash scheme of cuda_attention.cu, with strides, GQA and the
 * non-causal case: a block of RING_WARPS warps owns RING_ROWS rows (query
 * rows forward and for dq, key rows for dk and dv) of one head, stages the
 * other side's rows in shared memory RING_TILE at a time, and a warp works
 * on one row at a time, its lanes taking 32 keys (scores: one dot product
 * each) or 32 head dimensions (outputs: lane d, d + 32, ...), so HS <=
 * RING_MAX_HS. Launch shapes (1-D grids, so no dimension limit binds):
 *
 *   forward   ceil(Tq/16) x B*NH blocks: online softmax over key tiles of
 *             32 (running max m, sum l, output rescaled by exp(m_old -
 *             m_new)); out = acc / l, lse = m + log l.
 *   dq        ceil(Tq/16) x B*NH blocks, per query row: dS = P (dP -
 *             delta) / sqrt(HS), dP = dout . v, P = exp(s - lse) from the
 *             caller's final lse and delta; dq += sum over keys of dS k.
 *   dk, dv    ceil(Tk/16) x B*NKV blocks: a block owns 16 keys of one
 *             key/value head and walks the group's query heads in head
 *             order, each one's query tiles in row order: dv += sum P dout,
 *             dk += sum dS q. So a shared head's gradient is summed by one
 *             thread in a fixed order, as on the CPU: no atomics.
 *   merge     one thread per (b, i, h) row, its HS columns in order.
 *   delta     one thread per (b, i, h) row, rowsum(dout * out) in order.
 *
 * Scratch: none. Nothing Tq x Tk exists anywhere (the probabilities live in
 * registers a tile at a time); per block, shared memory of O(tile x HS)
 * floats (at most 97 KiB, dk/dv's at HS = 256; past 48 KiB the kernels opt
 * in); the only per-row state (lse, delta) is the caller's. scratch_bytes
 * is unchanged by these ops.
 *
 * fp32 math on CUDA cores, every sum in a fixed order: deterministic.
 * Errors go to the backend's sticky error (cuda_common.cuh): a head size
 * past the limit or a causal block with Tq != Tk is AA_EUNSUPPORTED /
 * AA_EINVAL with nothing launched. */
#include "cuda_common.cuh"

#include <math.h>

#define RING_WARPS 4
#define RING_ROWS_PER_WARP 4
#define RING_ROWS (RING_WARPS * RING_ROWS_PER_WARP) /* rows a block owns */
#define RING_TILE 32                                /* rows of the other side per shared-memory tile */
#define RING_SLOTS 8                                /* head dims per lane */
#define RING_MAX_HS (32 * RING_SLOTS)
#define RING_ELEM_THREADS 256

/* Where one head's rows lie: row r of head `head` in batch b is at
 * base + b bs + r ld + head HS. */
typedef struct {
  const float *base;
  size_t bs;
  int ld;
} ring_rows_t;

static __device__ __forceinline__ const float *ring_row(ring_rows_t x, int b, int r, int head, int hs) {
  return x.base + (size_t)b * x.bs + (size_t)r * x.ld + (size_t)head * hs;
}

static __device__ __forceinline__ float ring_warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

static __device__ __forceinline__ float ring_warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/* Rows r0..r0+n-1 of head `head` into dst (n rows of stride ld); rows at or
 * past `rows` are zero. */
static __device__ __forceinline__ void ring_load(float *dst, int ld, ring_rows_t x, int b, int head, int r0,
                                                 int n, int rows, int hs) {
  for (int i = threadIdx.x; i < n * hs; i += blockDim.x) {
    int r = i / hs, d = i % hs, t = r0 + r;
    dst[r * ld + d] = t < rows ? ring_row(x, b, t, head, hs)[d] : 0.0f;
  }
}

static __device__ __forceinline__ float ring_dot(const float *a, const float *b, int hs) {
  float s = 0.0f;
  for (int d = 0; d < hs; d++)
    s += a[d] * b[d];
  return s;
}

/* acc[k] += sum over the tile's rows j of w_j X(j, lane + 32k), w_j being
 * lane j's w: a (1 x 32) @ (32 x hs) product spread over the lanes as the
 * accumulators are; rows in order, so the sum's order is fixed. */
static __device__ __forceinline__ void ring_axpy(float acc[RING_SLOTS], float w, const float *X, int ld,
                                                 int lane, int hs) {
  for (int j = 0; j < RING_TILE; j++) {
    float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
    for (int k = 0; k < RING_SLOTS; k++) {
      int d = lane + 32 * k;
      if (d < hs) acc[k] += wj * X[j * ld + d];
    }
  }
}

/* Whether query t sees key s of the block. */
static __device__ __forceinline__ bool ring_sees(int t, int s, int Tk, int causal) {
  return s < Tk && (!causal || s <= t);
}

// out(B,Tq,NH HS), lse(B,NH,Tq); shared: Qs[RING_ROWS][hs], Ks[RING_TILE][hs+1], Vs[RING_TILE][hs+1]
static __global__ void __launch_bounds__(RING_WARPS * 32)
    ring_forward_kernel(float *out, float *lse, ring_rows_t q, ring_rows_t k, ring_rows_t v, int Tq, int Tk,
                        int NH, int group, int hs, int causal, int tiles, float scale) {
  extern __shared__ float smem[];
  int ld = hs + 1;
  float *Qs = smem, *Ks = Qs + RING_ROWS * hs, *Vs = Ks + RING_TILE * ld;
  int bh = blockIdx.x / tiles, b = bh / NH, h = bh % NH, g = h / group, t0 = blockIdx.x % tiles * RING_ROWS;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  ring_load(Qs, hs, q, b, h, t0, RING_ROWS, Tq, hs);
  float m[RING_ROWS_PER_WARP], l[RING_ROWS_PER_WARP], acc[RING_ROWS_PER_WARP][RING_SLOTS];
  for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int j = 0; j < RING_SLOTS; j++)
      acc[r][j] = 0.0f;
  }
  int s_end = causal ? min(t0 + RING_ROWS, Tq) : Tk; /* keys past s_end are seen by no row here */
  for (int s0 = 0; s0 < s_end; s0 += RING_TILE) {
    /* The previous tile is consumed (and Qs visible) before the overwrite. */
    __syncthreads();
    ring_load(Ks, ld, k, b, g, s0, RING_TILE, Tk, hs);
    ring_load(Vs, ld, v, b, g, s0, RING_TILE, Tk, hs);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
      int i = warp * RING_ROWS_PER_WARP + r, t = t0 + i, s = s0 + lane;
      if (t >= Tq) continue; /* warp-uniform */
      bool seen = ring_sees(t, s, Tk, causal);
      float score = seen ? ring_dot(Qs + i * hs, Ks + lane * ld, hs) * scale : -INFINITY;
      float tile_max = ring_warp_max(score);
      if (tile_max == -INFINITY) continue; /* no key of the tile is seen by row t */
      float m_new = fmaxf(m[r], tile_max);
      float p = seen ? expf(score - m_new) : 0.0f;
      float corr = expf(m[r] - m_new); /* 0 on the first tile: m = -inf */
      l[r] = l[r] * corr + ring_warp_sum(p);
      m[r] = m_new;
#pragma unroll
      for (int j = 0; j < RING_SLOTS; j++)
        acc[r][j] *= corr;
      ring_axpy(acc[r], p, Vs, ld, lane, hs);
    }
  }
#pragma unroll
  for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
    int t = t0 + warp * RING_ROWS_PER_WARP + r;
    if (t >= Tq) continue;
    /* A row that sees no key (only when Tk = 0) gets out 0 and lse -inf:
     * it then weighs nothing in a merge. */
    float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float *o = out + ((size_t)b * Tq + t) * NH * hs + (size_t)h * hs;
#pragma unroll
    for (int j = 0; j < RING_SLOTS; j++) {
      int d = lane + 32 * j;
      if (d < hs) o[d] = acc[r][j] * inv;
    }
    if (lane == 0) lse[(size_t)bh * Tq + t] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
  }
}

// dq (laid out as q) += dS k; shared: Qs, dOs[RING_ROWS][hs], Ks, Vs[RING_TILE][hs+1]
static __global__ void __launch_bounds__(RING_WARPS * 32)
    ring_backward_dq_kernel(float *dq, const float *dout, ring_rows_t q, ring_rows_t k, ring_rows_t v,
                            const float *lse, const float *delta, int Tq, int Tk, int NH, int group, int hs,
                            int causal, int tiles, float scale) {
  extern __shared__ float smem[];
  int ld = hs + 1;
  float *Qs = smem, *dOs = Qs + RING_ROWS * hs, *Ks = dOs + RING_ROWS * hs, *Vs = Ks + RING_TILE * ld;
  int bh = blockIdx.x / tiles, b = bh / NH, h = bh % NH, g = h / group, t0 = blockIdx.x % tiles * RING_ROWS;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  ring_rows_t o = {dout, (size_t)Tq * NH * hs, NH * hs};
  ring_load(Qs, hs, q, b, h, t0, RING_ROWS, Tq, hs);
  ring_load(dOs, hs, o, b, h, t0, RING_ROWS, Tq, hs);
  float L[RING_ROWS_PER_WARP], D[RING_ROWS_PER_WARP], acc[RING_ROWS_PER_WARP][RING_SLOTS];
  for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
    int t = t0 + warp * RING_ROWS_PER_WARP + r;
    L[r] = t < Tq ? lse[(size_t)bh * Tq + t] : 0.0f;
    D[r] = t < Tq ? delta[(size_t)bh * Tq + t] : 0.0f;
    for (int j = 0; j < RING_SLOTS; j++)
      acc[r][j] = 0.0f;
  }
  int s_end = causal ? min(t0 + RING_ROWS, Tq) : Tk;
  for (int s0 = 0; s0 < s_end; s0 += RING_TILE) {
    __syncthreads();
    ring_load(Ks, ld, k, b, g, s0, RING_TILE, Tk, hs);
    ring_load(Vs, ld, v, b, g, s0, RING_TILE, Tk, hs);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
      int i = warp * RING_ROWS_PER_WARP + r, t = t0 + i, s = s0 + lane;
      if (t >= Tq || (causal && s0 > t)) continue; /* warp-uniform */
      float ds = 0.0f;
      if (ring_sees(t, s, Tk, causal)) {
        float p = expf(ring_dot(Qs + i * hs, Ks + lane * ld, hs) * scale - L[r]);
        float dp = ring_dot(dOs + i * hs, Vs + lane * ld, hs);
        ds = p * (dp - D[r]) * scale;
      }
      ring_axpy(acc[r], ds, Ks, ld, lane, hs);
    }
  }
#pragma unroll
  for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
    int t = t0 + warp * RING_ROWS_PER_WARP + r;
    if (t >= Tq) continue;
    float *dst = dq + (size_t)b * q.bs + (size_t)t * q.ld + (size_t)h * hs;
#pragma unroll
    for (int j = 0; j < RING_SLOTS; j++) {
      int d = lane + 32 * j;
      if (d < hs) dst[d] += acc[r][j];
    }
  }
}

// dk, dv (laid out as k, v) += dS^T q, P^T dout over the group's query heads in order;
// shared: Kb, Vb[RING_ROWS][hs], Qs, dOs[RING_TILE][hs+1], Ls, Ds[RING_TILE]
static __global__ void __launch_bounds__(RING_WARPS * 32)
    ring_backward_dkv_kernel(float *dk, float *dv, const float *dout, ring_rows_t q, ring_rows_t k,
                             ring_rows_t v, const float *lse, const float *delta, int Tq, int Tk, int NH,
                             int NKV, int hs, int causal, int tiles, float scale) {
  extern __shared__ float smem[];
  int ld = hs + 1;
  float *Kb = smem, *Vb = Kb + RING_ROWS * hs, *Qs = Vb + RING_ROWS * hs, *dOs = Qs + RING_TILE * ld;
  float *Ls = dOs + RING_TILE * ld, *Ds = Ls + RING_TILE;
  int bg = blockIdx.x / tiles, b = bg / NKV, g = bg % NKV, s0 = blockIdx.x % tiles * RING_ROWS;
  int group = NH / NKV, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  ring_rows_t o = {dout, (size_t)Tq * NH * hs, NH * hs};
  ring_load(Kb, hs, k, b, g, s0, RING_ROWS, Tk, hs);
  ring_load(Vb, hs, v, b, g, s0, RING_ROWS, Tk, hs);
  float gk[RING_ROWS_PER_WARP][RING_SLOTS], gv[RING_ROWS_PER_WARP][RING_SLOTS];
  for (int r = 0; r < RING_ROWS_PER_WARP; r++)
    for (int j = 0; j < RING_SLOTS; j++)
      gk[r][j] = gv[r][j] = 0.0f;
  for (int h = g * group; h < (g + 1) * group; h++) {
    const float *lh = lse + ((size_t)b * NH + h) * Tq, *dh = delta + ((size_t)b * NH + h) * Tq;
    /* On the causal diagonal, queries before s0 see none of these keys. */
    for (int q0 = causal ? s0 : 0; q0 < Tq; q0 += RING_TILE) {
      __syncthreads();
      ring_load(Qs, ld, q, b, h, q0, RING_TILE, Tq, hs);
      ring_load(dOs, ld, o, b, h, q0, RING_TILE, Tq, hs);
      for (int i = threadIdx.x; i < RING_TILE; i += blockDim.x) {
        int t = q0 + i;
        Ls[i] = t < Tq ? lh[t] : 0.0f;
        Ds[i] = t < Tq ? dh[t] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
        int i = warp * RING_ROWS_PER_WARP + r, s = s0 + i, t = q0 + lane;
        if (s >= Tk) continue; /* warp-uniform */
        float p = 0.0f, ds = 0.0f;
        if (t < Tq && (!causal || t >= s)) {
          p = expf(ring_dot(Qs + lane * ld, Kb + i * hs, hs) * scale - Ls[lane]);
          float dp = ring_dot(dOs + lane * ld, Vb + i * hs, hs);
          ds = p * (dp - Ds[lane]) * scale;
        }
        ring_axpy(gv[r], p, dOs, ld, lane, hs);
        ring_axpy(gk[r], ds, Qs, ld, lane, hs);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RING_ROWS_PER_WARP; r++) {
    int s = s0 + warp * RING_ROWS_PER_WARP + r;
    if (s >= Tk) continue;
    /* k and v share their strides (ldkv, bskv), and so do dk and dv. */
    size_t row = (size_t)b * k.bs + (size_t)s * k.ld + (size_t)g * hs;
#pragma unroll
    for (int j = 0; j < RING_SLOTS; j++) {
      int d = lane + 32 * j;
      if (d < hs) {
        dk[row + d] += gk[r][j];
        dv[row + d] += gv[r][j];
      }
    }
  }
}

// out(B,Tq,NH HS), lse(B,NH,Tq) absorb ob, lseb; thread e = row (b, i, h)
static __global__ void ring_merge_kernel(float *out, float *lse, const float *ob, const float *lseb, int Tq,
                                         int NH, int hs, size_t rows) {
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < rows;
       e += (size_t)gridDim.x * blockDim.x) {
    int h = (int)(e % NH), i = (int)(e / NH % Tq);
    size_t b = e / NH / Tq, li = (b * NH + h) * Tq + i;
    float a = lse[li], c = lseb[li], m = fmaxf(a, c);
    float l = m + logf(expf(a - m) + expf(c - m));
    float wa = expf(a - l), wc = expf(c - l);
    float *o = out + e * hs;
    const float *x = ob + e * hs;
    for (int d = 0; d < hs; d++)
      o[d] = wa * o[d] + wc * x[d];
    lse[li] = l;
  }
}

// delta(B,NH,Tq) = rowsum over the head's columns of dout * out; thread e = row (b, i, h)
static __global__ void ring_delta_kernel(float *delta, const float *dout, const float *out, int Tq, int NH,
                                         int hs, size_t rows) {
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < rows;
       e += (size_t)gridDim.x * blockDim.x) {
    int h = (int)(e % NH), i = (int)(e / NH % Tq);
    size_t b = e / NH / Tq;
    const float *o = out + e * hs, *d = dout + e * hs;
    float s = 0.0f;
    for (int x = 0; x < hs; x++)
      s += o[x] * d[x];
    delta[(b * NH + h) * Tq + i] = s;
  }
}

/* Shared bytes of the three attention kernels for head size hs. */
static size_t fwd_smem(int hs) {
  return sizeof(float) * ((size_t)RING_ROWS * hs + 2 * (size_t)RING_TILE * (hs + 1));
}
static size_t dq_smem(int hs) {
  return sizeof(float) * (2 * (size_t)RING_ROWS * hs + 2 * (size_t)RING_TILE * (hs + 1));
}
static size_t dkv_smem(int hs) {
  return sizeof(float) * (2 * (size_t)RING_ROWS * hs + 2 * (size_t)RING_TILE * (hs + 1) + 2 * RING_TILE);
}

/* Checks a block problem's shape and sizes its grid: the `rows` side cut
 * into *tiles of RING_ROWS, times B x heads, as one dimension in *blocks. */
static int ring_check(const char *op, int B, int Tq, int Tk, int NH, int NKV, int HS, int causal, int rows,
                      int heads, int *tiles, unsigned *blocks) {
  if (NKV <= 0 || NH % NKV || HS <= 0 || Tk < 0)
    return aa__cuda_fail(AA_EINVAL, __FILE__, __LINE__, "%s: bad shape NH %d NKV %d HS %d Tk %d", op, NH, NKV,
                         HS, Tk);
  if (causal && Tq != Tk)
    return aa__cuda_fail(AA_EINVAL, __FILE__, __LINE__, "%s: a causal block needs Tq == Tk (%d, %d)", op, Tq,
                         Tk);
  if (HS > RING_MAX_HS)
    return aa__cuda_fail(AA_EUNSUPPORTED, __FILE__, __LINE__,
                         "%s: head size %d is larger than the CUDA kernel's limit of %d", op, HS,
                         RING_MAX_HS);
  size_t t = ((size_t)rows + RING_ROWS - 1) / RING_ROWS, n = t * B * heads;
  if (n > 0x7fffffffu)
    return aa__cuda_fail(AA_EUNSUPPORTED, __FILE__, __LINE__, "%s: %zu thread blocks are past the grid limit",
                         op, n);
  *tiles = (int)t;
  *blocks = (unsigned)n;
  return 0;
}

/* Lets `kernel` use `bytes` of shared memory (past 48 KiB a kernel must opt in). */
static int ring_smem(const void *kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    AA_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  return 0;
}

int aa__cuda_attention_block_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                     int ldkv, size_t bskv, int causal) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || Tq <= 0 || NH <= 0) return 0;
  unsigned blocks = 0; /* set by ring_check; gcc -O3 cannot see it */
  int tiles = 0, rc;
  size_t sm = fwd_smem(HS);
  if ((rc = ring_check("attention_block_forward", B, Tq, Tk, NH, NKV, HS, causal, Tq, NH, &tiles, &blocks)) ||
      (rc = ring_smem((const void *)ring_forward_kernel, sm)))
    return rc;
  ring_rows_t rq = {q, bsq, ldq}, rk = {k, bskv, ldkv}, rv = {v, bskv, ldkv};
  ring_forward_kernel<<<blocks, RING_WARPS * 32, sm, ctx->stream>>>(
      out, lse, rq, rk, rv, Tq, Tk, NH, NH / NKV, HS, causal != 0, tiles, 1.0f / sqrtf((float)HS));
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_attention_block_merge(float *out, float *lse, const float *ob, const float *lseb, int B, int Tq,
                                   int NH, int HS) {
  AA_CUDA_CTX(ctx);
  size_t rows = (size_t)B * Tq * NH;
  if (B <= 0 || Tq <= 0 || NH <= 0 || HS <= 0) return 0;
  ring_merge_kernel<<<aa__cuda_grid(rows, RING_ELEM_THREADS), RING_ELEM_THREADS, 0, ctx->stream>>>(
      out, lse, ob, lseb, Tq, NH, HS, rows);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_attention_block_delta(float *delta, const float *dout, const float *out, int B, int Tq, int NH,
                                   int HS) {
  AA_CUDA_CTX(ctx);
  size_t rows = (size_t)B * Tq * NH;
  if (B <= 0 || Tq <= 0 || NH <= 0) return 0;
  ring_delta_kernel<<<aa__cuda_grid(rows, RING_ELEM_THREADS), RING_ELEM_THREADS, 0, ctx->stream>>>(
      delta, dout, out, Tq, NH, HS, rows);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse, const float *delta,
                                      int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                      int ldkv, size_t bskv, int causal) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0) return 0;
  unsigned blocks_q, blocks_kv;
  int tiles_q, tiles_kv, rc;
  size_t sm_dq = dq_smem(HS), sm_dkv = dkv_smem(HS);
  const char *op = "attention_block_backward";
  if ((rc = ring_check(op, B, Tq, Tk, NH, NKV, HS, causal, Tq, NH, &tiles_q, &blocks_q)) ||
      (rc = ring_check(op, B, Tq, Tk, NH, NKV, HS, causal, Tk, NKV, &tiles_kv, &blocks_kv)) ||
      (rc = ring_smem((const void *)ring_backward_dq_kernel, sm_dq)) ||
      (rc = ring_smem((const void *)ring_backward_dkv_kernel, sm_dkv)))
    return rc;
  ring_rows_t rq = {q, bsq, ldq}, rk = {k, bskv, ldkv}, rv = {v, bskv, ldkv};
  float scale = 1.0f / sqrtf((float)HS);
  int c = causal != 0;
  ring_backward_dq_kernel<<<blocks_q, RING_WARPS * 32, sm_dq, ctx->stream>>>(
      dq, dout, rq, rk, rv, lse, delta, Tq, Tk, NH, NH / NKV, HS, c, tiles_q, scale);
  AA_CUDA_LAUNCHED();
  ring_backward_dkv_kernel<<<blocks_kv, RING_WARPS * 32, sm_dkv, ctx->stream>>>(
      dk, dv, dout, rq, rk, rv, lse, delta, Tq, Tk, NH, NKV, HS, c, tiles_kv, scale);
  AA_CUDA_LAUNCHED();
  return 0;
}
