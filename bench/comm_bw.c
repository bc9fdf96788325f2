/* Bus bandwidth of the host process groups (comm/comm.h): all_reduce,
 * reduce_scatter, all_gather and all_to_all_v over message sizes, for each
 * backend (shm; gloo over loopback TCP, its ranks meeting in a private
 * temporary directory) and world size, beside the memcpy bandwidth of the same
 * machine in the same run.
 *
 *   bench_comm_bw [--backends shm,gloo] [--worlds 2,4] [--min BYTES] [--max BYTES]
 *                 [--dtype f32|bf16|f16] [--seconds S]
 *
 * Definitions are nccl-tests' (doc/PERFORMANCE.md): `size` is the whole
 * buffer (all_reduce: the buffer; reduce_scatter: the send buffer of world
 * slices; all_gather: the receive buffer of world slices; all_to_all_v:
 * each rank's send buffer, size / world to every rank, as nccl-tests'
 * alltoall); time is the mean per call of each rank, the slowest rank's;
 * algbw = size / time; busbw = algbw * 2(n-1)/n for all_reduce and
 * (n-1)/n for the other three (nccl-tests: the own slice does not cross).
 * busbw is what can be compared with memcpy: a copy moves `size` bytes
 * once. GB/s are 1e9 bytes per second. Sizes go up by 4x. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/aa.h"
#include "common/rendezvous.h"
#include "comm/comm.h"

enum { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, NCOLL };
static const char *NAMES[NCOLL] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all_v"};

typedef struct {
  size_t min, max;
  aa_dtype_t dt;
  double seconds; /* per size and collective, roughly */
} cfg_t;

static int run_one(aa_comm_t *c, int coll, void *send, void *recv, size_t size, aa_dtype_t dt) {
  size_t n = (size_t)aa_comm_world(c), e = aa_dtype_size(dt);
  switch (coll) {
  case ALL_REDUCE: return aa_comm_all_reduce(c, send, recv, size / e, dt, AA_COMM_SUM);
  case REDUCE_SCATTER: return aa_comm_reduce_scatter(c, send, recv, size / e / n, dt, AA_COMM_SUM);
  case ALL_GATHER: return aa_comm_all_gather(c, send, recv, size / e / n, dt);
  default: {
    size_t counts[64], offsets[64]; /* world <= 64 (main) */
    for (size_t j = 0; j < n; j++) {
      counts[j] = size / e / n;
      offsets[j] = j * counts[j];
    }
    return aa_comm_all_to_all_v(c, send, counts, offsets, recv, counts, offsets, dt);
  }
  }
}

/* Mean seconds per call on this rank, the slowest rank's. Rank 0 picks the
 * iteration count from a timed call so that every rank runs the same. */
static int time_coll(aa_comm_t *c, int coll, void *send, void *recv, size_t size, const cfg_t *cfg,
                     double *out) {
  int rc = 0;
  for (int i = 0; i < 2 && !rc; i++)
    rc = run_one(c, coll, send, recv, size, cfg->dt);
  if (rc) return rc;
  double t0 = aa_now();
  if ((rc = run_one(c, coll, send, recv, size, cfg->dt))) return rc;
  double one = aa_now() - t0;
  int iters = one > 0 ? (int)(cfg->seconds / one) : 1000;
  iters = iters < 3 ? 3 : iters > 2000 ? 2000 : iters;
  if ((rc = aa_comm_broadcast(c, &iters, &iters, 1, AA_F32, 0))) return rc;
  if ((rc = aa_comm_barrier(c))) return rc;
  t0 = aa_now();
  for (int i = 0; i < iters && !rc; i++)
    rc = run_one(c, coll, send, recv, size, cfg->dt);
  double t = (aa_now() - t0) / iters, all[64];
  if (!rc) rc = aa_comm_all_gather(c, &t, all, 2, AA_F32);
  if (rc) return rc;
  *out = 0;
  for (int r = 0; r < aa_comm_world(c); r++)
    *out = all[r] > *out ? all[r] : *out;
  return 0;
}

/* Bytes per second of memcpy(size) between two warm buffers. */
static double memcpy_bw(void *dst, const void *src, size_t size, double seconds) {
  memcpy(dst, src, size);
  double t0 = aa_now();
  long iters = 0;
  do {
    memcpy(dst, src, size);
    iters++;
    __asm__ __volatile__("" ::"r"(dst) : "memory");
  } while (aa_now() - t0 < seconds);
  return (double)size * (double)iters / (aa_now() - t0);
}

/* store_dir: gloo's directory store, NULL for shm. */
static int rank_main(const char *rdv, int rank, int world, const cfg_t *cfg, const char *store_dir) {
  aa_comm_t *c;
  aa_comm_opts_t o = {.timeout_ms = 120000};
  aa_comm_store_t st = {0};
  int rc = store_dir ? aa_comm_dir_store(&st, store_dir) : 0;
  o.store = store_dir ? &st : NULL;
  if (rc || aa_comm_init(&c, rdv, rank, world, &o)) {
    fprintf(stderr, "rank %d: %s\n", rank, aa_last_error());
    aa_comm_dir_store_free(&st);
    return 1;
  }
  aa_comm_dir_store_free(&st);
  unsigned char *send = malloc(cfg->max), *recv = malloc(cfg->max);
  if (!send || !recv) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    return 1;
  }
  /* Small finite values, so no reduction meets inf or NaN. */
  memset(send, 0x01, cfg->max);
  memset(recv, 0, cfg->max);
  if (rank == 0) {
    printf("\n# %s backend, world %d, %s; time in us; GB/s = 1e9 B/s; memcpy by rank 0 alone\n",
           aa_comm_backend(c), world, aa_dtype_name(cfg->dt));
    printf("%10s %8s", "size", "memcpy");
    for (int k = 0; k < NCOLL; k++)
      printf(" | %-14s %9s %6s %6s", NAMES[k], "time", "algbw", "busbw");
    printf("\n");
  }
  for (size_t size = cfg->min; size <= cfg->max && !rc; size *= 4) {
    double cp = 0, t[NCOLL];
    /* The others wait (asleep) in the barrier while rank 0 copies. */
    if (rank == 0) cp = memcpy_bw(recv, send, size, cfg->seconds / 2);
    rc = aa_comm_barrier(c);
    for (int k = 0; k < NCOLL && !rc; k++)
      rc = time_coll(c, k, send, recv, size, cfg, &t[k]);
    if (rc || rank) continue;
    double n = world;
    double factor[NCOLL] = {2 * (n - 1) / n, (n - 1) / n, (n - 1) / n, (n - 1) / n};
    if (size >= (1u << 20))
      printf("%7zu MiB %8.2f", size >> 20, cp * 1e-9);
    else
      printf("%7zu KiB %8.2f", size >> 10, cp * 1e-9);
    for (int k = 0; k < NCOLL; k++)
      printf(" | %-14s %9.1f %6.2f %6.2f", "", t[k] * 1e6, size / t[k] * 1e-9,
             size / t[k] * 1e-9 * factor[k]);
    printf("\n");
    fflush(stdout);
  }
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, aa_last_error());
  free(send);
  free(recv);
  aa_comm_destroy(c);
  return rc ? 1 : 0;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return v < 1 ? 0 : (size_t)v;
}

/* Forks world ranks of backend and waits for them; nonzero if one failed. */
static int run_world(const char *backend, int world, const cfg_t *cfg) {
  char rdv[AA_RENDEZVOUS_MAX], dir[64] = "/tmp/aa-bench-comm-XXXXXX";
  int gloo = !strcmp(backend, "gloo");
  if (aa_rendezvous_new(rdv, sizeof rdv, backend, "bench-comm")) {
    fprintf(stderr, "comm_bw: %s\n", aa_last_error());
    return 1;
  }
  if (gloo && !mkdtemp(dir)) {
    perror("comm_bw: mkdtemp");
    return 1;
  }
  fflush(NULL);
  pid_t pids[64];
  int failed = 0;
  for (int r = 0; r < world; r++)
    if ((pids[r] = fork()) == 0) {
      int rc = rank_main(rdv, r, world, cfg, gloo ? dir : NULL);
      fflush(NULL);
      _exit(rc);
    }
  for (int r = 0; r < world; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    failed |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  if (gloo) aa_comm_dir_store_remove(dir);
  return failed;
}

int main(int argc, char **argv) {
  cfg_t cfg = {4096, (size_t)256 << 20, AA_F32, 0.3};
  char worlds[64] = "2,4";
#ifdef AA_HAVE_GLOO
  char backends[64] = "shm,gloo";
#else
  char backends[64] = "shm";
#endif
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--worlds") && v) {
      snprintf(worlds, sizeof worlds, "%s", v);
    } else if (!strcmp(a, "--backends") && v) {
      snprintf(backends, sizeof backends, "%s", v);
    } else if (!strcmp(a, "--min") && v) {
      cfg.min = parse_size(v);
    } else if (!strcmp(a, "--max") && v) {
      cfg.max = parse_size(v);
    } else if (!strcmp(a, "--seconds") && v) {
      cfg.seconds = atof(v);
    } else if (!strcmp(a, "--dtype") && v) {
      cfg.dt = !strcmp(v, "bf16") ? AA_BF16 : !strcmp(v, "f16") ? AA_F16 : AA_F32;
    } else {
      fprintf(stderr,
              "usage: %s [--backends shm,gloo] [--worlds 2,4] [--min BYTES] [--max BYTES] [--dtype "
              "f32|bf16|f16] [--seconds S]\n",
              argv[0]);
      return 2;
    }
    i++;
  }
  if (cfg.min < 256 || cfg.max < cfg.min || cfg.seconds <= 0) {
    fprintf(stderr, "comm_bw: need 256 <= --min <= --max and --seconds > 0\n");
    return 2;
  }
  printf("# bench_comm_bw: %ld CPUs online; sizes %zu..%zu bytes\n", sysconf(_SC_NPROCESSORS_ONLN), cfg.min,
         cfg.max);
  int failed = 0;
  int wlist[16], nw = 0;
  for (char *tok = strtok(worlds, ","); tok && nw < 16; tok = strtok(NULL, ",")) {
    wlist[nw] = atoi(tok);
    if (wlist[nw] < 1 || wlist[nw] > 64) {
      fprintf(stderr, "comm_bw: world %d out of range 1..64\n", wlist[nw]);
      return 2;
    }
    nw++;
  }
  for (char *b = strtok(backends, ","); b; b = strtok(NULL, ",")) {
    if (strcmp(b, "shm") && strcmp(b, "gloo")) {
      fprintf(stderr, "comm_bw: backend '%s': expected shm or gloo\n", b);
      return 2;
    }
    for (int i = 0; i < nw; i++)
      failed |= run_world(b, wlist[i], &cfg);
  }
  return failed;
}
