/* Elementwise kernels: GELU, residual add, accumulate, scale. Every element
 * is independent (grid-stride loops), so results are deterministic. Plain
 * IEEE arithmetic: nvcc may fuse a*b+c into an FMA where the CPU rounds
 * twice, hence the CPU comparison's relative tolerance. */
#include "cuda_common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f
#define EW_THREADS 256

// out(n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

// dinp(n) += gelu'(inp) * dout
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float th = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] += grad * dout[i];
  }
}

// out(n) = a + b; out may alias a or b (same index read then written)
__global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}

// y(n) += x
__global__ void accumulate_kernel(float *y, const float *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] += x[i];
}

// dst[r ldd + j] += src[r lds + j], r < rows, j < cols
__global__ void rows_accumulate_kernel(float *dst, size_t ldd, const float *src, size_t lds, size_t rows,
                                       size_t cols) {
  const size_t n = rows * cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / cols, j = i % cols;
    dst[r * ldd + j] += src[r * lds + j];
  }
}

// x(n) *= s
__global__ void scale_kernel(float *x, float s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

int aa__cuda_gelu_forward(float *out, const float *inp, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  gelu_forward_kernel<<<aa__cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(out, inp, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  gelu_backward_kernel<<<aa__cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(dinp, inp, dout, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_residual_forward(float *out, const float *a, const float *b, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  residual_forward_kernel<<<aa__cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(out, a, b, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_accumulate(float *y, const float *x, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  accumulate_kernel<<<aa__cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(y, x, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_rows_copy(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols) {
  AA_CUDA_CTX(c);
  if (!rows || !cols) return 0;
  AA_CUDA_TRY(cudaMemcpy2DAsync(dst, ldd * sizeof(float), src, lds * sizeof(float), cols * sizeof(float),
                                rows, cudaMemcpyDeviceToDevice, c->stream));
  return 0;
}

int aa__cuda_rows_accumulate(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols) {
  AA_CUDA_CTX(c);
  if (!rows || !cols) return 0;
  rows_accumulate_kernel<<<aa__cuda_grid(rows * cols, EW_THREADS), EW_THREADS, 0, c->stream>>>(
      dst, ldd, src, lds, rows, cols);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_scale(float *x, float s, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  scale_kernel<<<aa__cuda_grid(n, EW_THREADS), EW_THREADS, 0, c->stream>>>(x, s, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

/* Column sums in two fixed-order passes (see cuda_common.cuh). Pass 1:
 * block (column tile, row chunk), one thread per column walking the chunk's
 * rows in order; pass 2: one thread per column adding the chunk sums in
 * chunk order onto out. */
#define COLSUM_ROWS 128
#define COLSUM_THREADS 128

// part(nchunks, M) = per-chunk column sums of in(R, M)
__global__ void colsum_partial_kernel(float *part, const float *in, int R, int M) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int r0 = blockIdx.y * COLSUM_ROWS;
  if (col >= M) return;
  int r1 = min(r0 + COLSUM_ROWS, R);
  float acc = 0.0f;
  for (int r = r0; r < r1; r++)
    acc += in[(size_t)r * M + col];
  part[(size_t)blockIdx.y * M + col] = acc;
}

// out(M) += sum over chunks of part(nchunks, M), in chunk order
__global__ void colsum_final_kernel(float *out, const float *part, int nchunks, int M) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= M) return;
  float acc = 0.0f;
  for (int k = 0; k < nchunks; k++)
    acc += part[(size_t)k * M + col];
  out[col] += acc;
}

int aa__cuda_colsum_accumulate(aa__cuda_ctx_t *ctx, float *out, const float *in, int R, int M) {
  if (R <= 0 || M <= 0) return 0;
  int nchunks = (R + COLSUM_ROWS - 1) / COLSUM_ROWS;
  float *part;
  int rc = aa__cuda_scratch(ctx, (size_t)nchunks * M * sizeof(float), (void **)&part);
  if (rc) return rc;
  dim3 grid(aa__cuda_blocks(M, COLSUM_THREADS), nchunks);
  colsum_partial_kernel<<<grid, COLSUM_THREADS, 0, ctx->stream>>>(part, in, R, M);
  AA_CUDA_LAUNCHED();
  colsum_final_kernel<<<aa__cuda_blocks(M, COLSUM_THREADS), COLSUM_THREADS, 0, ctx->stream>>>(out, part, nchunks,
                                                                                              M);
  AA_CUDA_LAUNCHED();
  return 0;
}
