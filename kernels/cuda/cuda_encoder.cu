/* Token + position embedding.
 *
 * The backward scatter into dwte is deterministic without sorting and
 * without atomics: positions holding the same token form a chain (each
 * position links to the next one with that token), and only the first
 * position of each chain, its owner, writes that dwte row, walking the
 * chain in position order. That is also the CPU backend's order of
 * additions (dte += d for each position in turn), so the sums match it
 * bit for bit. Building the links compares every pair of positions, O(N^2)
 * integer reads (N = B*T): ~34M for N = 8192, well under the cost of the
 * GEMMs of a training step.
 *
 * The vocab-parallel pair (ops.h) is the same with a window [lo, lo + valid)
 * of the vocabulary: tokens outside it contribute nothing, and the plain
 * encoder_backward is the window that holds every token. */
#include "cuda_common.cuh"

#include <limits.h>

#define ENC_THREADS 256

// out(B,T,C) = (inp in [lo, lo+valid) ? wte[inp-lo] : 0) + (wpe ? wpe[t] : 0),
// the CPU's formula, so the two agree bit for bit
__global__ void encoder_forward_vocab_kernel(float *out, const int32_t *inp, const float *wte,
                                             const float *wpe, int lo, int valid, int T, int C, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t bt = i / C;
    int c = (int)(i % C);
    int t = (int)(bt % T);
    int row = inp[bt] - lo;
    float te = row >= 0 && row < valid ? wte[(size_t)row * C + c] : 0.0f;
    float pe = wpe ? wpe[(size_t)t * C + c] : 0.0f;
    out[i] = te + pe;
  }
}

// next(N): the next position with the same token, or -1; head(N): 1 when no
// earlier position holds the token.
__global__ void encoder_links_kernel(int *next, int *head, const int32_t *inp, int N) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  int tok = inp[n];
  int nx = -1;
  for (int m = n + 1; m < N; m++) {
    if (inp[m] == tok) {
      nx = m;
      break;
    }
  }
  int h = 1;
  for (int m = 0; m < n; m++) {
    if (inp[m] == tok) {
      h = 0;
      break;
    }
  }
  next[n] = nx;
  head[n] = h;
}

// dwte(valid,C) += chain sums of dout(N,C) into row inp - lo, for the
// chains whose token is in [lo, lo + valid); grid (N, column tiles)
__global__ void encoder_scatter_kernel(float *dwte, const float *dout, const int32_t *inp, const int *next,
                                       const int *head, int lo, int valid, int C) {
  int n = blockIdx.x;
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  int r = inp[n] - lo;
  if (!head[n] || r < 0 || r >= valid || c >= C) return;
  float *row = dwte + (size_t)r * C;
  float acc = row[c];
  for (int m = n; m >= 0; m = next[m])
    acc += dout[(size_t)m * C + c];
  row[c] = acc;
}

// dwpe(T,C) += sum over b of dout(B,T,C), in b order
__global__ void encoder_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)T * C) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; b++)
    acc += dout[(size_t)b * T * C + i];
  dwpe[i] = acc;
}

// out(B,T,C) = wte[inp[b,t]] + wpe[t]: the vocab-parallel forward over the
// whole vocabulary, which adds the same two values
int aa__cuda_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                             int C) {
  return aa__cuda_encoder_forward_vocab(out, inp, wte, wpe, 0, INT_MAX, B, T, C);
}

int aa__cuda_encoder_forward_vocab(float *out, const int32_t *inp, const float *wte, const float *wpe, int lo,
                                   int valid, int B, int T, int C) {
  AA_CUDA_CTX(c);
  size_t n = (size_t)B * T * C;
  if (!n) return 0;
  encoder_forward_vocab_kernel<<<aa__cuda_grid(n, ENC_THREADS), ENC_THREADS, 0, c->stream>>>(
      out, inp, wte, wpe, lo, valid, T, C, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                              int C) {
  return aa__cuda_encoder_backward_vocab(dwte, dwpe, dout, inp, 0, INT_MAX, B, T, C);
}

int aa__cuda_encoder_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int lo,
                                    int valid, int B, int T, int C) {
  AA_CUDA_CTX(c);
  int N = B * T;
  if (N <= 0 || C <= 0) return 0;
  int *links;
  int rc = aa__cuda_scratch(c, 2 * (size_t)N * sizeof(int), (void **)&links);
  if (rc) return rc;
  encoder_links_kernel<<<aa__cuda_blocks(N, ENC_THREADS), ENC_THREADS, 0, c->stream>>>(links, links + N, inp, N);
  AA_CUDA_LAUNCHED();
  int threads = C < 256 ? ((C + 31) / 32) * 32 : 256;
  dim3 grid(N, aa__cuda_blocks(C, threads));
  encoder_scatter_kernel<<<grid, threads, 0, c->stream>>>(dwte, dout, inp, links, links + N, lo, valid, C);
  AA_CUDA_LAUNCHED();
  if (!dwpe) return 0;
  size_t tc = (size_t)T * C;
  encoder_dwpe_kernel<<<aa__cuda_blocks(tc, ENC_THREADS), ENC_THREADS, 0, c->stream>>>(dwpe, dout, B, T, C);
  AA_CUDA_LAUNCHED();
  return 0;
}
