/* Time the CPU engine's causal attention alone (bench/README.md, "Step 4").
 *
 * Runs aa__cpu_attention_gqa_forward and aa__cpu_attention_gqa_backward
 * (kernels/cpu/cpu_attention.c) on fixed pseudo-random q, k, v and output
 * gradients, REPS times each, and prints the best forward and backward time
 * in ms with their GFLOP/s. The FLOPs counted are a fixed measure of the
 * work, those of the GEMMs over 32-row causal blocks that the kernel ran
 * until issue 37's step 5, so GFLOP/s figures compare across versions as
 * the times do. These products are not in bench_sgemm's --gpt list, so this
 * is the part of a step the GEMM floor leaves out. The thread count is
 * OMP_NUM_THREADS. NKV (default NH, multi-head attention) is the number of
 * key/value heads: 2 with NH 8 is llama-6l-512's grouped-query shape.
 *
 * Built with the project (CMake target bench_attention_cpu; not a test);
 * run it from a Release build, e.g. build-release/bench_attention_cpu.
 * usage: bench_attention_cpu [B T NH HS [REPS [NKV]]]   (default 8 256 8 64 20 8) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_internal.h"

#define ROW_BLOCK 32 /* the FLOP measure's query blocks (see above) */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int arg(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  int dims[6] = {8, 256, 8, 64, 20, 0};
  static const int hi[6] = {1024, 8192, 256, 1024, 100000, 256};
  if (argc != 1 && (argc < 5 || argc > 7)) {
    fprintf(stderr, "usage: bench_attention_cpu [B T NH HS [REPS [NKV]]]\n");
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    if (arg(argv[i], 1, hi[i - 1], &dims[i - 1]) != 0) {
      fprintf(stderr, "bench_attention_cpu: argument %d '%s' is not an integer in 1..%d\n", i, argv[i],
              hi[i - 1]);
      return 2;
    }
  }
  int B = dims[0], T = dims[1], NH = dims[2], HS = dims[3], reps = dims[4], NKV = argc == 7 ? dims[5] : NH;
  if (NKV > NH || NH % NKV != 0) {
    fprintf(stderr, "bench_attention_cpu: NKV %d must divide NH %d\n", NKV, NH);
    return 2;
  }
  int W = (NH + 2 * NKV) * HS;
  size_t n_qkv = (size_t)B * T * W, n_out = (size_t)B * T * NH * HS;
  if (n_qkv > ((size_t)1 << 28)) {
    fprintf(stderr,
            "bench_attention_cpu: B*T*(NH+2*NKV)*HS = %zu floats is over the 2^28 this bench allocates\n",
            n_qkv);
    return 2;
  }
  float *qkv = malloc(n_qkv * sizeof(float)), *dqkv = malloc(n_qkv * sizeof(float));
  float *out = malloc(n_out * sizeof(float)), *dout = malloc(n_out * sizeof(float));
  float *lse = malloc((size_t)B * NH * T * sizeof(float));
  if (!qkv || !dqkv || !out || !dout || !lse) {
    fprintf(stderr, "bench_attention_cpu: out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < n_qkv; i++)
    qkv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < n_out; i++)
    dout[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;

  /* One head's GEMM FLOPs: per row block r0..r1, m x r1 x HS multiply-adds
   * twice in the forward (scores, P V) and five times in the backward. */
  double block = 0.0;
  for (int r0 = 0; r0 < T; r0 += ROW_BLOCK) {
    int r1 = r0 + ROW_BLOCK < T ? r0 + ROW_BLOCK : T;
    block += 2.0 * (r1 - r0) * r1 * HS;
  }
  double fwd_flop = 2.0 * block * B * NH, bwd_flop = 5.0 * block * B * NH;

  double best_f = 1e30, best_b = 1e30, check = 0.0;
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    aa__cpu_attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS);
    double t1 = now();
    memset(dqkv, 0, n_qkv * sizeof(float));
    double t2 = now();
    aa__cpu_attention_gqa_backward(dqkv, dout, qkv, lse, B, T, NH, NKV, HS);
    double t3 = now();
    best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
    best_b = t3 - t2 < best_b ? t3 - t2 : best_b;
  }
  for (size_t i = 0; i < n_qkv; i += 4099)
    check += dqkv[i];
  printf("B=%d T=%d NH=%d NKV=%d HS=%d, best of %d: forward %.2f ms (%.1f GFLOP/s), backward %.2f ms (%.1f "
         "GFLOP/s); "
         "checksum %.6g\n",
         B, T, NH, NKV, HS, reps, best_f * 1e3, fwd_flop / best_f * 1e-9, best_b * 1e3,
         bwd_flop / best_b * 1e-9, check);
  free(qkv);
  free(dqkv);
  free(out);
  free(dout);
  free(lse);
  return 0;
}
