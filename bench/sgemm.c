/* OpenBLAS sgemm throughput probe for the training benchmark (bench/run.sh).
 *
 * Measures single-precision GEMM GFLOP/s with a given thread count for
 *  - a large square problem (the "peak" the benchmark compares model FLOP/s
 *    against), and
 *  - for each --gpt ROWS,C,F,V,L or --llama ROWS,C,F,V,L,NH,NKV[,QKV_BIAS]:
 *    the exact GEMMs one fp32 training step of the CPU engine issues for the
 *    model's linear layers through matmul_forward/matmul_backward(_set)
 *    (engine/model.c, kernels/cpu/cpu_matmul.c), with their row-major
 *    layouts and beta, weighted by how often a step issues them. Their sum
 *    is the step's "GEMM floor"; their FLOP-weighted rate ("mix") is the best
 *    a step could do if it were nothing but these GEMMs at OpenBLAS speed.
 *    Attention's own GEMMs (scores, probabilities, their gradients) are not
 *    in it (bench/attention_cpu.c times those).
 *
 * Each problem runs once untimed, then repeats until --min-time seconds have
 * passed (at least 3 times); the median call time is reported, because the
 * benchmark runs on shared, noisy machines. The square problem is timed
 * first and last and the better of the two medians reported.
 *
 * Built by bench/run.sh, not by CMake, against the OpenBLAS build the
 * autoaccel binary loads (pthread or OpenMP), with an RPATH to it:
 *   cc -O3 -march=native bench/sgemm.c -o build-release/bench_sgemm \
 *      $(pkg-config --cflags --libs openblas) -Wl,-rpath,DIR
 * usage: bench_sgemm [--threads N] [--square S] [--min-time SEC] [--json]
 *                    [--gpt ROWS,C,F,V,L]... [--llama ROWS,C,F,V,L,NH,NKV[,QKV_BIAS]]...
 * With --json one JSON object goes to stdout; otherwise a readable table.
 * Bad arguments: a message and exit 2; out of memory: exit 1. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_MODELS 8
#define MAX_SHAPES 15
#define MAX_SAMPLES 1000
#define MAX_DIM (1 << 20)

/* One GEMM as the engine issues it: C(M,N) = alpha op(A) op(B) + beta C, row-major. */
typedef struct gemm_shape {
  char what[16]; /* "qkv.fwd", ... */
  int ta, tb;    /* 1 = transposed operand */
  int m, n, k;
  float beta;
  int count; /* calls per training step */
} gemm_shape_t;

/* A model's linear layers as the probe needs them; rows = tokens per step
 * (B*T). llama only: nh, nkv (grouped-query attention) and qkv_bias. */
typedef struct model_dims {
  int llama;
  int rows, c, f, v, l, nh, nkv, qkv_bias;
} model_dims_t;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static float *alloc_filled(size_t n, unsigned *seed) {
  float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
  if (!p) return NULL;
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  return p;
}

/* Median seconds per call of one GEMM shape; negative on allocation failure. */
static double time_gemm(const gemm_shape_t *g, double min_time) {
  unsigned seed = 12345u;
  size_t na = (size_t)g->m * g->k, nb = (size_t)g->k * g->n, nc = (size_t)g->m * g->n;
  float *a = alloc_filled(na, &seed), *b = alloc_filled(nb, &seed), *c = alloc_filled(nc, &seed);
  double samples[MAX_SAMPLES], result = -1.0;
  if (!a || !b || !c) goto cleanup;
  /* Leading dimensions of the row-major operands as stored. */
  int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n, ldc = g->n;
  enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
  cblas_sgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, g->beta, c, ldc);
  int n = 0;
  double start = now();
  while (n < MAX_SAMPLES && (n < 3 || now() - start < min_time)) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, 1.0f, a, lda, b, ldb, g->beta, c, ldc);
    samples[n++] = now() - t0;
  }
  qsort(samples, n, sizeof samples[0], cmp_double);
  result = samples[n / 2];
cleanup:
  free(a);
  free(b);
  free(c);
  return result;
}

/* A linear layer in -> oc as one training step calls it count times, with
 * the beta of its forward GEMM and of its input-gradient GEMM. */
typedef struct linear {
  const char *name;
  int in, oc, count;
  float fwd_beta, dinp_beta;
} linear_t;

/* The three GEMMs of each linear (kernels/cpu/cpu_matmul.c): forward
 * out(N,OC) = inp(N,C) W(OC,C)^T (beta 1 onto bias rows, 0 without a bias),
 * dinp(N,C) = dout W (beta 0 through matmul_backward_set, 1 onto a zeroed
 * buffer through matmul_backward), dW(OC,C) += dout^T inp (beta 1). Returns
 * the number written: 3 per linear. */
static int linear_shapes(gemm_shape_t *out, const linear_t *lin, int n_lin, int rows) {
  static const char *suffix[3] = {"fwd", "dinp", "dw"};
  int n = 0;
  for (int i = 0; i < n_lin; i++) {
    int N = rows, C = lin[i].in, OC = lin[i].oc;
    out[n] = (gemm_shape_t){"", 0, 1, N, OC, C, lin[i].fwd_beta, lin[i].count};
    out[n + 1] = (gemm_shape_t){"", 0, 0, N, C, OC, lin[i].dinp_beta, lin[i].count};
    out[n + 2] = (gemm_shape_t){"", 1, 0, OC, C, N, 1.0f, lin[i].count};
    for (int j = 0; j < 3; j++)
      snprintf(out[n + j].what, sizeof out[n + j].what, "%s.%s", lin[i].name, suffix[j]);
    n += 3;
  }
  return n;
}

/* The 15 GEMMs of one fp32 step of the CPU engine (engine/model.c
 * block_forward, blocks_backward, the head). gpt2: qkv, proj and fcproj
 * add their biases through beta 1; fc's bias goes into the GELU pass
 * (bias_gelu_forward), so its GEMM has beta 0; the tied head (wte, V x C)
 * has no bias. llama: q|k|v is one GEMM of C + 2 NKV*HS outputs (biased
 * only with qkv_bias), o, gate|up (one GEMM of 2F outputs) and down have no
 * bias, the head is its own V x C tensor. Every block input gradient is
 * written by sgemm (beta 0); the head's is accumulated onto a zeroed buffer
 * (beta 1). */
static int model_shapes(gemm_shape_t *out, const model_dims_t *d) {
  if (d->llama) {
    const int kv = d->nkv * (d->c / d->nh);
    const linear_t lin[] = {
        {"qkv", d->c, d->c + 2 * kv, d->l, d->qkv_bias ? 1.0f : 0.0f, 0.0f},
        {"o", d->c, d->c, d->l, 0.0f, 0.0f},
        {"gateup", d->c, 2 * d->f, d->l, 0.0f, 0.0f},
        {"down", d->f, d->c, d->l, 0.0f, 0.0f},
        {"head", d->c, d->v, 1, 0.0f, 1.0f},
    };
    return linear_shapes(out, lin, 5, d->rows);
  }
  const linear_t lin[] = {
      {"qkv", d->c, 3 * d->c, d->l, 1.0f, 0.0f}, {"proj", d->c, d->c, d->l, 1.0f, 0.0f},
      {"fc", d->c, d->f, d->l, 0.0f, 0.0f},      {"fcproj", d->f, d->c, d->l, 1.0f, 0.0f},
      {"head", d->c, d->v, 1, 0.0f, 1.0f},
  };
  return linear_shapes(out, lin, 5, d->rows);
}

static int parse_int(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > MAX_DIM) return -1;
  *out = (int)v;
  return 0;
}

/* Reads between lo and hi comma-separated integers of 0..MAX_DIM from s
 * into out; returns how many, or -1 on anything else. */
static int parse_list(const char *s, int *out, int lo, int hi) {
  int n = 0;
  for (;;) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || v < 0 || v > MAX_DIM || n == hi) return -1;
    out[n++] = (int)v;
    if (*end == '\0') break;
    if (*end != ',') return -1;
    s = end + 1;
  }
  return n >= lo ? n : -1;
}

/* Checks one --gpt / --llama value; NULL when it is usable, else why not. */
static const char *parse_model(const char *v, int llama, model_dims_t *d) {
  int x[8];
  int n = parse_list(v, x, llama ? 7 : 5, llama ? 8 : 5);
  if (n < 0)
    return llama ? "wants ROWS,C,F,V,L,NH,NKV[,QKV_BIAS]: 7 or 8 integers" : "wants ROWS,C,F,V,L: 5 integers";
  *d = (model_dims_t){llama,           x[0], x[1], x[2], x[3], x[4], llama ? x[5] : 0, llama ? x[6] : 0,
                      n > 7 ? x[7] : 0};
  for (int i = 0; i < (llama ? 7 : 5); i++)
    if (x[i] < 1) return "wants every dimension at least 1";
  if (llama && d->c % d->nh) return "wants NH dividing C";
  if (llama && d->nh % d->nkv) return "wants NKV dividing NH";
  if (llama && d->qkv_bias > 1) return "wants QKV_BIAS 0 or 1";
  return NULL;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_sgemm [--threads N] [--square S] [--min-time SEC] [--json]\n"
          "                   [--gpt ROWS,C,F,V,L]... [--llama ROWS,C,F,V,L,NH,NKV[,QKV_BIAS]]...\n"
          "  (at most %d models; ROWS = batch x seq_len, C d_model, F d_ff, V vocab_size,\n"
          "   L n_layer, NH n_head, NKV n_kv_head, QKV_BIAS 1 for q/k/v biases)\n",
          MAX_MODELS);
}

int main(int argc, char **argv) {
  int threads = 1, square = 2048, json = 0, n_models = 0;
  double min_time = 0.5;
  model_dims_t models[MAX_MODELS];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--threads") || !strcmp(a, "--square") || !strcmp(a, "--min-time") ||
               !strcmp(a, "--gpt") || !strcmp(a, "--llama")) {
      const char *why = NULL;
      if (!v) {
        why = "needs a value";
      } else if (!strcmp(a, "--threads")) {
        if (parse_int(v, &threads)) why = "wants an integer from 1";
      } else if (!strcmp(a, "--square")) {
        if (parse_int(v, &square) || square > 16384) why = "wants an integer from 1 to 16384";
      } else if (!strcmp(a, "--min-time")) {
        char *end;
        min_time = strtod(v, &end);
        if (end == v || *end || !(min_time > 0 && min_time < 60))
          why = "wants seconds, more than 0 and under 60";
      } else if (n_models == MAX_MODELS) {
        why = "was given too many times";
      } else if (!(why = parse_model(v, !strcmp(a, "--llama"), &models[n_models]))) {
        n_models++;
      }
      if (why) {
        fprintf(stderr, "bench_sgemm: %s %s%s%s\n", a, why, v ? ": " : "", v ? v : "");
        goto bad;
      }
      i++;
    } else {
      fprintf(stderr, "bench_sgemm: unknown argument '%s'\n", a);
      goto bad;
    }
  }
  openblas_set_num_threads(threads);

  /* The square problem is timed before and after the models' shapes and the
   * faster median kept, so one disturbed burst does not lower the peak. */
  gemm_shape_t sq = {"square", 0, 0, square, square, square, 0.0f, 1};
  double t_sq = time_gemm(&sq, min_time);
  if (t_sq < 0) goto oom;
  if (json) {
    printf("{\"openblas\": \"%s\", \"core\": \"%s\", \"threads\": %d, \"square\": %d, \"models\": [",
           openblas_get_config(), openblas_get_corename(), threads, square);
  } else {
    printf("OpenBLAS %s (core %s), %d thread(s)\n", openblas_get_config(), openblas_get_corename(), threads);
    printf("%-14s %6s %6s %6s %4s %5s %10s %9s\n", "gemm", "M", "N", "K", "x", "beta", "ms/call", "GFLOP/s");
  }
  for (int mi = 0; mi < n_models; mi++) {
    const model_dims_t *d = &models[mi];
    gemm_shape_t shapes[MAX_SHAPES];
    int ns = model_shapes(shapes, d);
    double flops = 0, secs = 0;
    if (json) {
      printf("%s{\"family\": \"%s\", \"rows\": %d, \"C\": %d, \"F\": %d, \"V\": %d, \"L\": %d",
             mi ? ", " : "", d->llama ? "llama" : "gpt2", d->rows, d->c, d->f, d->v, d->l);
      if (d->llama) printf(", \"NH\": %d, \"NKV\": %d, \"qkv_bias\": %d", d->nh, d->nkv, d->qkv_bias);
      printf(", \"shapes\": [");
    }
    for (int s = 0; s < ns; s++) {
      const gemm_shape_t *g = &shapes[s];
      /* Shorter minimum per shape: a step has 15 of them. */
      double t = time_gemm(g, min_time / 3);
      if (t < 0) goto oom;
      double f = 2.0 * g->m * g->n * g->k;
      flops += f * g->count;
      secs += t * g->count;
      if (json)
        printf("%s{\"gemm\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"beta\": %g, \"count\": %d, "
               "\"ms\": %.4f, \"gflops\": %.3f}",
               s ? ", " : "", g->what, g->m, g->n, g->k, g->beta, g->count, t * 1e3, f / t * 1e-9);
      else
        printf("%-14s %6d %6d %6d %4d %5g %10.3f %9.2f\n", g->what, g->m, g->n, g->k, g->count, g->beta,
               t * 1e3, f / t * 1e-9);
    }
    /* step_flop: the FLOPs of the step's linear layers (2 M N K a call),
     * which report.py checks against its model formula. */
    if (json)
      printf("], \"step_gemm_ms\": %.3f, \"step_flop\": %.0f, \"mix_gflops\": %.3f}", secs * 1e3, flops,
             flops / secs * 1e-9);
    else
      printf("%s rows=%d C=%d F=%d V=%d L=%d: GEMMs of one step %.1f ms, %.3f GFLOP, mix %.2f GFLOP/s\n",
             d->llama ? "llama" : "gpt2", d->rows, d->c, d->f, d->v, d->l, secs * 1e3, flops * 1e-9,
             flops / secs * 1e-9);
  }
  double t_sq2 = time_gemm(&sq, min_time);
  if (t_sq2 > 0 && t_sq2 < t_sq) t_sq = t_sq2;
  double sq_gflops = 2.0 * square * square * square / t_sq * 1e-9;
  if (json)
    printf("], \"square_gflops\": %.3f}\n", sq_gflops);
  else
    printf("%-14s %6d %6d %6d %4d %5g %10.3f %9.2f\n", "square", square, square, square, 1, 0.0, t_sq * 1e3,
           sq_gflops);
  return 0;

oom:
  fflush(stdout);
  fprintf(stderr, "bench_sgemm: out of memory\n");
  return 1;
bad:
  usage(stderr);
  return 2;
}
