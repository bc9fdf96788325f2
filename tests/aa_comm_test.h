/* Rank processes for the tests of comm/ (test_comm.c, test_comm_alltoall.c):
 * fork a group of N ranks on a fresh rendezvous of the backend under test
 * (shm, gloo over loopback through a directory store, nccl-hosts), reap
 * them with a deadline so a hang is a failure, check that nothing was left
 * in /dev/shm; and the per-rank inputs the references are computed from.
 *
 * Header-only, like aa_test.h, which it needs; one test executable
 * includes it. */
#ifndef AA_COMM_TEST_H
#define AA_COMM_TEST_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"
#include "common/half.h"
#include "common/rendezvous.h"

#ifdef AA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define MAX_RANKS 4
#define DEADLINE_S 60.0

/* --- forking a group ----------------------------------------------------------------------- */

typedef int (*rank_fn)(const char *rdv, int rank, int world, const void *arg);

typedef struct {
  int status[MAX_RANKS]; /* wait statuses */
  int hung;
  double seconds;
} outcome_t;

static inline void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

/* The backend the forked tests run over ("shm" or "gloo"), and the
 * directory the ranks of a gloo group meet in (made by run_group). */
static const char *g_backend = "shm";
static char g_store_dir[64];

/* Makes a private directory for a gloo group's store. */
static inline int store_dir_make(void) {
  snprintf(g_store_dir, sizeof g_store_dir, "/tmp/aa-test-comm-XXXXXX");
  return mkdtemp(g_store_dir) ? 0 : -1;
}

/* Removes the store directory and the keys in it. */
static inline void store_dir_remove(void) { aa_comm_dir_store_remove(g_store_dir); }

static inline int is_gloo(const char *rdv) { return !strncmp(rdv, "gloo:", 5); }
/* Whether the ranks meet through a store: gloo, and nccl-hosts's gloo carrier. */
static inline int meets_in_store(const char *rdv) { return is_gloo(rdv) || !strncmp(rdv, "nccl-hosts:", 11); }

/* A gloo test in a build without libgloo is skipped (the refusal itself is
 * checked by gloo_bad_store_and_address_are_clear_errors). */
#ifdef AA_HAVE_GLOO
#define SKIP_WITHOUT(backend) ((void)(backend))
#else
#define SKIP_WITHOUT(backend)                                                                                \
  do {                                                                                                       \
    if (!strcmp(backend, "gloo")) SKIP("built without gloo");                                                \
  } while (0)
#endif

/* Forks world ranks running fn on a fresh rendezvous of g_backend and reaps
 * them in rank order (so a rank that died stays an unreaped zombie while
 * the others notice it). Past DEADLINE_S the rest are killed and the run is
 * "hung". Checks that the rendezvous left nothing in /dev/shm (shm), and
 * removes the store directory (gloo). */
static inline void run_group(int world, rank_fn fn, const void *arg, outcome_t *o) {
  char rdv[AA_RENDEZVOUS_MAX];
  memset(o, 0, sizeof *o);
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, g_backend, "test-comm") == 0);
  if (meets_in_store(rdv)) CHECK(store_dir_make() == 0);
  fflush(NULL);
  double t0 = aa_now();
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      int before = aa_test_failed_checks;
      int rc = fn(rdv, r, world, arg);
      fflush(NULL);
      exit(rc || aa_test_failed_checks != before ? 1 : 0);
    }
  }
  for (int r = 0; r < world; r++) {
    while (waitpid(pids[r], &o->status[r], WNOHANG) != pids[r]) {
      if (aa_now() - t0 > DEADLINE_S) {
        o->hung = 1;
        for (int k = r; k < world; k++)
          kill(pids[k], SIGKILL);
        for (int k = r; k < world; k++)
          waitpid(pids[k], &o->status[k], 0);
        r = world;
        break;
      }
      sleep_s(0.002);
    }
  }
  o->seconds = aa_now() - t0;
  CHECK_MSG(!o->hung, "the ranks were still running after %.0f s", DEADLINE_S);
  if (meets_in_store(rdv)) {
    store_dir_remove();
    return;
  }
  char path[AA_RENDEZVOUS_MAX + 16];
  snprintf(path, sizeof path, "/dev/shm%s", strchr(rdv, ':') + 1);
  CHECK_MSG(access(path, F_OK) != 0, "%s was left behind", path);
}

static inline int exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

static inline void expect_all_ok(const outcome_t *o, int world) {
  for (int r = 0; r < world; r++)
    CHECK_MSG(exited_ok(o->status[r]), "rank %d: wait status 0x%x", r, o->status[r]);
}

/* aa_comm_init with the timeout and, for gloo, a store on g_store_dir (the
 * store is only borrowed while joining). */
static inline int init_with(aa_comm_t **c, const char *rdv, int rank, int world, int timeout_ms) {
  aa_comm_opts_t o = {.timeout_ms = timeout_ms};
  aa_comm_store_t st = {0};
  if (meets_in_store(rdv)) {
    int rc = aa_comm_dir_store(&st, g_store_dir);
    if (rc) return rc;
    o.store = &st;
  }
  int rc = aa_comm_init(c, rdv, rank, world, &o);
  aa_comm_dir_store_free(&st);
  return rc;
}

static inline int join(aa_comm_t **c, const char *rdv, int rank, int world, int timeout_ms) {
  int rc = init_with(c, rdv, rank, world, timeout_ms);
  if (rc) fprintf(stderr, "  rank %d: %s\n", rank, aa_last_error());
  return rc;
}

/* --- inputs and the reference ---------------------------------------------------------------- */

/* The element i of source `src`'s input: a pseudo-random value in
 * [-16, 16) with a full mantissa, rounded to dt (returned widened). */
static inline float input(aa_dtype_t dt, uint64_t seed, int src, size_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + ((uint64_t)src << 44) + i;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  float v = ((float)(x >> 40) * 0x1p-24f * 2.0f - 1.0f) * (float)(1u << (x & 3)) * 4.0f;
  if (dt == AA_BF16) return aa_bf16_to_f32(aa_f32_to_bf16(v));
  if (dt == AA_F16) return aa_f16_to_f32(aa_f32_to_f16(v));
  return v;
}

static inline void put(void *buf, size_t i, aa_dtype_t dt, float v) {
  if (dt == AA_F32)
    ((float *)buf)[i] = v;
  else
    ((uint16_t *)buf)[i] = dt == AA_BF16 ? aa_f32_to_bf16(v) : aa_f32_to_f16(v);
}

/* buf(n) = source src's input elements [first, first + n). */
static inline void fill(void *buf, size_t n, aa_dtype_t dt, uint64_t seed, int src, size_t first) {
  for (size_t i = 0; i < n; i++)
    put(buf, i, dt, input(dt, seed, src, first + i));
}

static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) abort();
  return p;
}

/* The GPUs a process here would see, counted in a child: a parent that
 * initialised CUDA could not hand the GPUs to the ranks it forks. */
static inline int gpus_seen(void) {
#ifdef AA_HAVE_CUDA
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 0;
  return WEXITSTATUS(st);
#else
  return 0;
#endif
}

#endif
