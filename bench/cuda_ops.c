/* GPU timings of the CUDA op table's heavy ops at GPT-2 124M shapes:
 * matmul_forward/backward for every linear layer (N = B*T = 8*1024, C = 768)
 * in fp32 (pedantic) and TF32, and attention forward/backward at T = 1024.
 *
 *   bench_cuda_ops [iters]     (default 20; prints a table to stdout)
 *
 * Times are medians over `iters` runs after 3 warm-ups, taken with CUDA
 * events around each call. FLOPs counted: matmul forward 2*N*C*OC, backward
 * 4*N*C*OC (dbias excluded); attention counts the causal minimum of its
 * products as FlashAttention's papers do: forward 2*B*NH*T*T*hs (q k^T and
 * P v, half of each), backward 2.5x that (five products; recomputing the
 * scores is not counted). Both attention implementations are timed
 * (att-gemm: cuBLAS, TF32 when set; att-flash: fp32 kernels whatever the
 * TF32 setting). Inputs are uniform random, never zeros; the backward runs on the
 * logsumexp the forward just wrote. */
#include "common/aa.h"
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP 3
#define MAX_ITERS 200

static aa_rng_t rng;

static float *dev_random(size_t n) {
  float *h = malloc(n * sizeof(float));
  void *d = NULL;
  if (!h) abort();
  for (size_t i = 0; i < n; i++)
    h[i] = (aa_rng_uniform(&rng) - 0.5f) * 0.2f;
  if (aa_cuda_alloc(&d, n * sizeof(float)) || aa_cuda_upload(d, h, n * sizeof(float))) {
    fprintf(stderr, "bench_cuda_ops: %s\n", aa_last_error());
    exit(1);
  }
  free(h);
  return d;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

typedef struct {
  const aa_ops_t *ops;
  int kind; /* 0 matmul fwd, 1 matmul bwd, 2 attention fwd, 3 attention bwd */
  float *a, *b, *c, *d, *e, *f;
  int N, C, OC, B, T, NH;
} job_t;

static void job_run(const job_t *j) {
  switch (j->kind) {
  case 0:
    j->ops->matmul_forward(j->c, j->a, j->b, j->d, j->N, j->C, j->OC);
    break;
  case 1:
    j->ops->matmul_backward(j->e, j->f, NULL, j->c, j->a, j->b, j->N, j->C, j->OC);
    break;
  case 2:
    j->ops->attention_forward(j->c, j->d, j->a, j->B, j->T, j->C, j->NH);
    break;
  case 3:
    j->ops->attention_backward(j->e, j->c, j->a, j->d, j->B, j->T, j->C, j->NH);
    break;
  }
}

/* Median milliseconds of one call. */
static float time_job(const job_t *j, int iters) {
  cudaEvent_t t0, t1;
  float ms[MAX_ITERS];
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  for (int i = 0; i < WARMUP; i++)
    job_run(j);
  for (int i = 0; i < iters; i++) {
    /* The backend's stream is blocking, so events on the legacy default
     * stream bracket its work. */
    cudaEventRecord(t0, 0);
    job_run(j);
    cudaEventRecord(t1, 0);
    cudaEventSynchronize(t1);
    cudaEventElapsedTime(&ms[i], t0, t1);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  qsort(ms, (size_t)iters, sizeof ms[0], cmp_float);
  return ms[iters / 2];
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20;
  if (iters < 1 || iters > MAX_ITERS) iters = 20;
  aa_cuda_device_info_t info;
  if (aa_cuda_device_info(0, &info) || aa_cuda_init(0)) {
    fprintf(stderr, "bench_cuda_ops: %s\n", aa_last_error());
    return 1;
  }
  printf("device: %s, %d SMs, cc %d.%d, %.1f GiB, clock %d MHz, est. peak dense bf16 %.0f TFLOP/s\n", info.name,
         info.sm_count, info.cc_major, info.cc_minor, info.total_mem / 1073741824.0, info.clock_khz / 1000,
         info.peak_bf16_flops / 1e12);
  aa_rng_seed(&rng, 1234);
  const aa_ops_t *ops = aa_ops_cuda();
  const int B = 8, T = 1024, C = 768, NH = 12, N = B * T;
  static const struct {
    const char *name;
    int C, OC;
  } shapes[] = {{"qkv", 768, 2304}, {"attn.proj", 768, 768}, {"mlp.fc", 768, 3072},
                {"mlp.proj", 3072, 768}, {"lm_head", 768, 50304}};
  printf("%-10s %-5s %6s %6s %6s | %9s %8s | %9s %8s\n", "op", "math", "N", "C", "OC", "fwd ms", "TFLOP/s",
         "bwd ms", "TFLOP/s");
  for (int tf32 = 0; tf32 <= 1; tf32++) {
    aa_cuda_set_tf32(tf32);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int c = shapes[s].C, oc = shapes[s].OC;
      job_t j = {ops, 0, dev_random((size_t)N * c), dev_random((size_t)oc * c), dev_random((size_t)N * oc),
                 dev_random((size_t)oc), dev_random((size_t)N * c), dev_random((size_t)oc * c), N, c, oc, 0, 0, 0};
      float fwd = time_job(&j, iters);
      j.kind = 1;
      float bwd = time_job(&j, iters);
      double fl = 2.0 * N * c * oc;
      printf("%-10s %-5s %6d %6d %6d | %9.3f %8.1f | %9.3f %8.1f\n", shapes[s].name, tf32 ? "tf32" : "fp32", N, c,
             oc, fwd, fl / fwd / 1e9, bwd, 2 * fl / bwd / 1e9);
      float *bufs[] = {j.a, j.b, j.c, j.d, j.e, j.f};
      for (int k = 0; k < 6; k++)
        aa_cuda_free(bufs[k]);
    }
    for (int flash = 0; flash <= 1; flash++) {
      aa_cuda_set_attention(flash ? AA_CUDA_ATT_FLASH : AA_CUDA_ATT_GEMM);
      size_t btc = (size_t)B * T * C, lse = (size_t)B * NH * T;
      job_t j = {ops, 2, dev_random(3 * btc), NULL, dev_random(btc), dev_random(lse), dev_random(3 * btc), NULL,
                 0, C, 0, B, T, NH};
      float fwd = time_job(&j, iters);
      j.kind = 3;
      float bwd = time_job(&j, iters);
      double fl = 2.0 * B * NH * (double)T * T * (C / NH);
      printf("%-10s %-5s %6d %6d %6d | %9.3f %8.1f | %9.3f %8.1f   (B=%d NH=%d T=%d)\n",
             flash ? "att-flash" : "att-gemm", tf32 ? "tf32" : "fp32", N, C, T, fwd, fl / fwd / 1e9, bwd,
             2.5 * fl / bwd / 1e9, B, NH, T);
      aa_cuda_free(j.a);
      aa_cuda_free(j.c);
      aa_cuda_free(j.d);
      aa_cuda_free(j.e);
    }
    aa_cuda_set_attention(AA_CUDA_ATT_AUTO);
  }
  int rc = aa_cuda_sync();
  if (rc) {
    fprintf(stderr, "bench_cuda_ops: %s\n", aa_cuda_last_error_message());
    return 1;
  }
  aa_cuda_shutdown();
  return 0;
}
