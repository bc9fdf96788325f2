/* OpenBLAS sgemm throughput probe for the training benchmark (bench/run.sh).
 *
 * Measures single-precision GEMM GFLOP/s with a given thread count for
 *  - a large square problem (the "peak" the benchmark compares model FLOP/s
 *    against), and
 *  - for each --gpt ROWS,C,F,V,L: the exact GEMMs one training step of a
 *    GPT-2 block stack issues through matmul_forward/matmul_backward
 *    (kernels/ops.h), with their row-major layouts and beta, weighted by how
 *    often a step issues them. Their FLOP-weighted rate ("mix") is the best a
 *    step could do if it were nothing but these GEMMs at OpenBLAS speed.
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
 *                    [--gpt ROWS,C,F,V,L]...
 * With --json one JSON object goes to stdout; otherwise a readable table. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPT 8
#define MAX_SAMPLES 1000

/* One GEMM as the engine issues it: C(M,N) = alpha op(A) op(B) + beta C, row-major. */
typedef struct gemm_shape {
  char what[16]; /* "qkv.fwd", ... */
  int ta, tb;    /* 1 = transposed operand */
  int m, n, k;
  float beta;
  int count; /* calls per training step */
} gemm_shape_t;

typedef struct gpt_dims {
  int rows, c, f, v, l; /* rows = tokens per step (B*T) */
} gpt_dims_t;

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

/* The 15 GEMMs of one step: for each linear (C->OC) of a block and the
 * tied head, forward out(N,OC) = inp(N,C) W(OC,C)^T + out (the engine presets out to
 * the bias, so beta = 1), dinp(N,C) += dout W,
 * dW(OC,C) += dout^T inp. Returns the number written (15). */
static int gpt_shapes(gemm_shape_t *out, const gpt_dims_t *d) {
  const struct {
    const char *name;
    int in, oc, count;
  } lin[] = {
      {"qkv", d->c, 3 * d->c, d->l}, {"proj", d->c, d->c, d->l}, {"fc", d->c, d->f, d->l},
      {"fcproj", d->f, d->c, d->l},  {"head", d->c, d->v, 1},
  };
  static const char *suffix[3] = {"fwd", "dinp", "dw"};
  int n = 0;
  for (int i = 0; i < 5; i++) {
    int N = d->rows, C = lin[i].in, OC = lin[i].oc;
    out[n] = (gemm_shape_t){"", 0, 1, N, OC, C, 1.0f, lin[i].count};
    out[n + 1] = (gemm_shape_t){"", 0, 0, N, C, OC, 1.0f, lin[i].count};
    out[n + 2] = (gemm_shape_t){"", 1, 0, OC, C, N, 1.0f, lin[i].count};
    for (int j = 0; j < 3; j++)
      snprintf(out[n + j].what, sizeof out[n + j].what, "%s.%s", lin[i].name, suffix[j]);
    n += 3;
  }
  return n;
}

static int parse_int(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > 1 << 20) return -1;
  *out = (int)v;
  return 0;
}

static void usage(FILE *f) {
  fprintf(
      f, "usage: bench_sgemm [--threads N] [--square S] [--min-time SEC] [--json] [--gpt ROWS,C,F,V,L]...\n");
}

int main(int argc, char **argv) {
  int threads = 1, square = 2048, json = 0, n_gpt = 0;
  double min_time = 0.5;
  gpt_dims_t gpt[MAX_GPT];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (v && !strcmp(a, "--threads")) {
      if (parse_int(v, &threads)) goto bad;
      i++;
    } else if (v && !strcmp(a, "--square")) {
      if (parse_int(v, &square)) goto bad;
      i++;
    } else if (v && !strcmp(a, "--min-time")) {
      min_time = atof(v);
      if (!(min_time > 0 && min_time < 60)) goto bad;
      i++;
    } else if (v && !strcmp(a, "--gpt") && n_gpt < MAX_GPT) {
      gpt_dims_t *d = &gpt[n_gpt];
      if (sscanf(v, "%d,%d,%d,%d,%d", &d->rows, &d->c, &d->f, &d->v, &d->l) != 5 || d->rows < 1 || d->c < 1 ||
          d->f < 1 || d->v < 1 || d->l < 1)
        goto bad;
      n_gpt++;
      i++;
    } else {
      goto bad;
    }
  }
  openblas_set_num_threads(threads);

  /* The square problem is timed before and after the GPT shapes and the
   * faster median kept, so one disturbed burst does not lower the peak. */
  gemm_shape_t sq = {"square", 0, 0, square, square, square, 0.0f, 1};
  double t_sq = time_gemm(&sq, min_time);
  if (t_sq < 0) {
    fprintf(stderr, "bench_sgemm: out of memory\n");
    return 1;
  }
  if (json) {
    printf("{\"openblas\": \"%s\", \"core\": \"%s\", \"threads\": %d, \"square\": %d, \"gpt\": [",
           openblas_get_config(), openblas_get_corename(), threads, square);
  } else {
    printf("OpenBLAS %s (core %s), %d thread(s)\n", openblas_get_config(), openblas_get_corename(), threads);
    printf("%-14s %6s %6s %6s %4s %10s %9s\n", "gemm", "M", "N", "K", "x", "ms/call", "GFLOP/s");
  }
  for (int gi = 0; gi < n_gpt; gi++) {
    gemm_shape_t shapes[15];
    int ns = gpt_shapes(shapes, &gpt[gi]);
    double flops = 0, secs = 0;
    if (json)
      printf("%s{\"rows\": %d, \"C\": %d, \"F\": %d, \"V\": %d, \"L\": %d, \"shapes\": [", gi ? ", " : "",
             gpt[gi].rows, gpt[gi].c, gpt[gi].f, gpt[gi].v, gpt[gi].l);
    for (int s = 0; s < ns; s++) {
      const gemm_shape_t *g = &shapes[s];
      /* Shorter minimum per shape: a GPT step has 15 of them. */
      double t = time_gemm(g, min_time / 3);
      if (t < 0) {
        fprintf(stderr, "bench_sgemm: out of memory\n");
        return 1;
      }
      double f = 2.0 * g->m * g->n * g->k;
      flops += f * g->count;
      secs += t * g->count;
      if (json)
        printf("%s{\"gemm\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"count\": %d, \"ms\": %.4f, "
               "\"gflops\": %.3f}",
               s ? ", " : "", g->what, g->m, g->n, g->k, g->count, t * 1e3, f / t * 1e-9);
      else
        printf("%-14s %6d %6d %6d %4d %10.3f %9.2f\n", g->what, g->m, g->n, g->k, g->count, t * 1e3,
               f / t * 1e-9);
    }
    if (json)
      printf("], \"step_gemm_ms\": %.3f, \"mix_gflops\": %.3f}", secs * 1e3, flops / secs * 1e-9);
    else
      printf("gpt rows=%d C=%d F=%d V=%d L=%d: GEMMs of one step %.1f ms, mix %.2f GFLOP/s\n", gpt[gi].rows,
             gpt[gi].c, gpt[gi].f, gpt[gi].v, gpt[gi].l, secs * 1e3, flops / secs * 1e-9);
  }
  double t_sq2 = time_gemm(&sq, min_time);
  if (t_sq2 > 0 && t_sq2 < t_sq) t_sq = t_sq2;
  double sq_gflops = 2.0 * square * square * square / t_sq * 1e-9;
  if (json)
    printf("], \"square_gflops\": %.3f}\n", sq_gflops);
  else
    printf("%-14s %6d %6d %6d %4d %10.3f %9.2f\n", "square", square, square, square, 1, t_sq * 1e3,
           sq_gflops);
  return 0;

bad:
  usage(stderr);
  return 2;
}
