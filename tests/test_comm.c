/* Process groups (comm/comm.h), shm and gloo backends (the same tests, run
 * over each): N rank processes forked
 * here (N = 2, 3, 4) meet in a fresh rendezvous and run every collective on
 * odd sizes, against a naive reference computed from the known per-rank
 * inputs: a sum in rank order in fp32, rounded once to the dtype, so the
 * comparison is bit for bit. Then the failures: a rank killed with SIGKILL
 * inside a collective, a rank that never joins, aa_comm_abort (also from a
 * signal handler), a collective whose peer does not come. Each child
 * reports through its exit status; the parent kills the children past a
 * deadline, so a hang is a failure, not a hung ctest. After every shm group
 * no /dev/shm entry of its rendezvous may remain. gloo groups meet over
 * loopback TCP through a directory store (aa_comm_dir_store) in a private
 * temporary directory made per group; its own tests are at the end.
 *
 * The self backend (a group of one, no rendezvous) runs in this process.
 * The nccl backend needs a GPU; its test reports "skipped: no GPU"
 * elsewhere. The forking harness is aa_comm_test.h; all_to_all_v has its
 * own file, test_comm_alltoall.c. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "aa_comm_test.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"
#include "common/half.h"
#include "common/rendezvous.h"

/* --- the reference ---------------------------------------------------------------------------- */

/* out(n) = op over srcs[0..nsrc) in that order of their elements
 * [first, first + n), in fp32, rounded once. */
static void reference(void *out, size_t n, aa_dtype_t dt, aa_comm_op_t op, uint64_t seed, const int *srcs,
                      int nsrc, size_t first) {
  for (size_t i = 0; i < n; i++) {
    float acc = input(dt, seed, srcs[0], first + i);
    for (int k = 1; k < nsrc; k++)
      acc += input(dt, seed, srcs[k], first + i);
    if (op == AA_COMM_AVG) acc /= (float)nsrc;
    put(out, i, dt, acc);
  }
}

/* Every rank holds the same bytes: their hashes all-gathered agree. */
static void check_identical(aa_comm_t *c, const void *buf, size_t bytes, const char *what) {
  uint64_t h = aa_fnv1a(AA_FNV_INIT, buf, bytes), all[MAX_RANKS * 8];
  CHECK(aa_comm_all_gather(c, &h, all, 2, AA_F32) == 0);
  for (int r = 0; r < aa_comm_world(c); r++)
    CHECK_MSG(all[r] == h, "%s: rank %d holds other bytes", what, r);
}

static const aa_dtype_t DTYPES[] = {AA_F32, AA_BF16, AA_F16};

/* --- the collectives --------------------------------------------------------------------------- */

static void check_all_reduce(aa_comm_t *c, int rank, int world) {
  static const size_t sizes[] = {1, 7, 1000, 262145, 1000003};
  int srcs[MAX_RANKS];
  for (int r = 0; r < world; r++)
    srcs[r] = r;
  for (int d = 0; d < 3; d++)
    for (int op = 0; op < 2; op++)
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        aa_dtype_t dt = DTYPES[d];
        size_t n = sizes[s], bytes = n * aa_dtype_size(dt);
        uint64_t seed = 100 + 10 * (uint64_t)d + (uint64_t)op;
        void *in = xmalloc(bytes), *out = xmalloc(bytes), *ref = xmalloc(bytes);
        fill(in, n, dt, seed, rank, 0);
        reference(ref, n, dt, (aa_comm_op_t)op, seed, srcs, world, 0);
        int rc = aa_comm_all_reduce(c, in, out, n, dt, (aa_comm_op_t)op);
        CHECK_MSG(rc == 0, "%s", aa_last_error());
        CHECK_MSG(!memcmp(out, ref, bytes), "all_reduce %s %s of %zu on %d ranks differs from the reference",
                  aa_dtype_name(dt), op ? "avg" : "sum", n, world);
        check_identical(c, out, bytes, "all_reduce");
        if (n == 7 || n == 1000003) { /* in place */
          CHECK(aa_comm_all_reduce(c, in, in, n, dt, (aa_comm_op_t)op) == 0);
          CHECK_MSG(!memcmp(in, ref, bytes), "in-place all_reduce %s of %zu differs", aa_dtype_name(dt), n);
        }
        free(in);
        free(out);
        free(ref);
      }
}

static void check_reduce_scatter(aa_comm_t *c, int rank, int world) {
  static const size_t sizes[] = {1, 7, 300001};
  int srcs[MAX_RANKS];
  for (int r = 0; r < world; r++)
    srcs[r] = r;
  for (int d = 0; d < 3; d++)
    for (int op = 0; op < 2; op++)
      for (size_t s = 0; s < 3; s++) {
        aa_dtype_t dt = DTYPES[d];
        size_t n = sizes[s], e = aa_dtype_size(dt);
        uint64_t seed = 200 + 10 * (uint64_t)d + (uint64_t)op;
        void *in = xmalloc(n * world * e), *out = xmalloc(n * e), *ref = xmalloc(n * e);
        fill(in, n * world, dt, seed, rank, 0);
        reference(ref, n, dt, (aa_comm_op_t)op, seed, srcs, world, (size_t)rank * n);
        int rc = aa_comm_reduce_scatter(c, in, out, n, dt, (aa_comm_op_t)op);
        CHECK_MSG(rc == 0, "%s", aa_last_error());
        CHECK_MSG(!memcmp(out, ref, n * e), "reduce_scatter %s %s of %zu per rank on %d ranks differs",
                  aa_dtype_name(dt), op ? "avg" : "sum", n, world);
        free(in);
        free(out);
        free(ref);
      }
}

static void check_all_gather(aa_comm_t *c, int rank, int world) {
  static const size_t sizes[] = {1, 7, 500001};
  for (int d = 0; d < 2; d++)
    for (size_t s = 0; s < 3; s++) {
      aa_dtype_t dt = DTYPES[d];
      size_t n = sizes[s], e = aa_dtype_size(dt);
      void *in = xmalloc(n * e), *out = xmalloc(n * world * e), *ref = xmalloc(n * world * e);
      fill(in, n, dt, 300, rank, 0);
      for (int r = 0; r < world; r++)
        fill((char *)ref + r * n * e, n, dt, 300, r, 0);
      int rc = aa_comm_all_gather(c, in, out, n, dt);
      CHECK_MSG(rc == 0, "%s", aa_last_error());
      CHECK_MSG(!memcmp(out, ref, n * world * e), "all_gather %s of %zu per rank differs", aa_dtype_name(dt),
                n);
      /* In place: send is recv's own slice. */
      memset(out, 0, n * world * e);
      memcpy((char *)out + rank * n * e, in, n * e);
      CHECK(aa_comm_all_gather(c, (char *)out + rank * n * e, out, n, dt) == 0);
      CHECK_MSG(!memcmp(out, ref, n * world * e), "in-place all_gather %s of %zu differs", aa_dtype_name(dt),
                n);
      free(in);
      free(out);
      free(ref);
    }
}

static void check_broadcast(aa_comm_t *c, int rank, int world) {
  static const size_t sizes[] = {1, 7, 600001};
  int roots[2] = {0, world - 1};
  for (int k = 0; k < 2; k++)
    for (size_t s = 0; s < 3; s++)
      for (int d = 0; d < 3; d += 2) {
        aa_dtype_t dt = DTYPES[d];
        int root = roots[k];
        size_t n = sizes[s], bytes = n * aa_dtype_size(dt);
        void *buf = xmalloc(bytes), *ref = xmalloc(bytes);
        fill(ref, n, dt, 400 + (uint64_t)k, root, 0);
        if (rank == root)
          memcpy(buf, ref, bytes);
        else
          memset(buf, 0xee, bytes);
        /* The root broadcasts in place (send == recv). */
        int rc = aa_comm_broadcast(c, rank == root ? buf : NULL, buf, n, dt, root);
        CHECK_MSG(rc == 0, "%s", aa_last_error());
        CHECK_MSG(!memcmp(buf, ref, bytes), "broadcast %s of %zu from root %d differs", aa_dtype_name(dt), n,
                  root);
        free(buf);
        free(ref);
      }
}

static void check_send_recv(aa_comm_t *c, int rank, int world) {
  /* A ring: even ranks send first, odd ranks receive first. The large
   * message is several point-to-point chunks, so flow control is used. */
  static const size_t sizes[] = {1, 7, 700001};
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  for (size_t s = 0; s < 3; s++) {
    size_t n = sizes[s];
    float *out = xmalloc(n * sizeof(float)), *in = xmalloc(n * sizeof(float)),
          *ref = xmalloc(n * sizeof(float));
    fill(out, n, AA_F32, 500, rank, 0);
    fill(ref, n, AA_F32, 500, prev, 0);
    int rc1, rc2;
    if (rank % 2 == 0) {
      rc1 = aa_comm_send(c, out, n, AA_F32, next);
      rc2 = aa_comm_recv(c, in, n, AA_F32, prev);
    } else {
      rc2 = aa_comm_recv(c, in, n, AA_F32, prev);
      rc1 = aa_comm_send(c, out, n, AA_F32, next);
    }
    CHECK_MSG(rc1 == 0 && rc2 == 0, "%s", aa_last_error());
    CHECK_MSG(!memcmp(in, ref, n * sizeof(float)), "ring message of %zu from rank %d differs", n, prev);
    /* The same ring as one call (context parallelism's ring step), both
     * ways round: at 3 ranks two even ranks sit side by side. */
    memset(in, 0, n * sizeof(float));
    CHECK_MSG(aa_comm_sendrecv(c, out, next, in, prev, n, AA_F32) == 0, "%s", aa_last_error());
    CHECK_MSG(!memcmp(in, ref, n * sizeof(float)), "sendrecv of %zu from rank %d differs", n, prev);
    fill(ref, n, AA_F32, 500, next, 0);
    CHECK_MSG(aa_comm_sendrecv(c, out, prev, in, next, n, AA_F32) == 0, "%s", aa_last_error());
    CHECK_MSG(!memcmp(in, ref, n * sizeof(float)), "sendrecv of %zu from rank %d differs", n, next);
    free(out);
    free(in);
    free(ref);
  }
  /* In order: rank 0 sends three messages of different sizes to rank 1,
   * then (world >= 3) one to rank 2 queued behind them; bf16 both ways. */
  static const size_t seq[] = {300000, 1, 1000};
  for (int m = 0; m < 3; m++) {
    size_t n = seq[m];
    uint16_t *buf = xmalloc(n * 2), *ref = xmalloc(n * 2);
    fill(ref, n, AA_BF16, 600 + (uint64_t)m, 0, 0);
    if (rank == 0) CHECK(aa_comm_send(c, ref, n, AA_BF16, 1) == 0);
    if (rank == 1) {
      CHECK_MSG(aa_comm_recv(c, buf, n, AA_BF16, 0) == 0, "%s", aa_last_error());
      CHECK_MSG(!memcmp(buf, ref, n * 2), "message %d from rank 0 differs", m);
    }
    free(buf);
    free(ref);
  }
  if (world >= 3) {
    float v = 42.5f, got = 0;
    if (rank == 0) CHECK(aa_comm_send(c, &v, 1, AA_F32, 2) == 0);
    if (rank == 2) {
      CHECK(aa_comm_recv(c, &got, 1, AA_F32, 0) == 0);
      CHECK(got == v);
    }
  }
  CHECK(aa_comm_barrier(c) == 0);
}

/* No rank leaves a barrier before the last one arrived: rank r arrives at
 * T + 30 ms * r on the shared monotonic clock, T from rank 0. */
static void check_barrier(aa_comm_t *c, int rank, int world) {
  double t = aa_now() + 0.05;
  CHECK(aa_comm_broadcast(c, &t, &t, 2, AA_F32, 0) == 0);
  for (int round = 0; round < 3; round++) {
    double arrive = t + 0.03 * rank + 0.1 * round, last = t + 0.03 * (world - 1) + 0.1 * round;
    double now = aa_now();
    if (arrive > now) sleep_s(arrive - now);
    CHECK(aa_comm_barrier(c) == 0);
    CHECK_MSG(aa_now() >= last, "rank %d left barrier %d %.1f ms before the last rank arrived", rank, round,
              (last - aa_now()) * 1e3);
  }
}

/* Sub-groups: even and odd ranks, ordered by descending rank (key -rank);
 * a reduction sums in the new rank order. Both groups run at once, beside
 * the world group, then splits are made and destroyed many times over (more
 * than the segment's regions, so regions are reused). */
static void check_split(aa_comm_t *c, int rank, int world) {
  aa_comm_t *sub = NULL;
  int rc = aa_comm_split(c, rank % 2, -rank, &sub);
  CHECK_MSG(rc == 0 && sub, "%s", aa_last_error());
  if (!sub) return;
  int members[MAX_RANKS], m = 0;
  for (int r = world - 1; r >= 0; r--)
    if (r % 2 == rank % 2) members[m++] = r;
  CHECK(aa_comm_world(sub) == m);
  int myrank = -1;
  for (int i = 0; i < m; i++)
    if (members[i] == rank) myrank = i;
  CHECK(aa_comm_rank(sub) == myrank);
  CHECK(!strcmp(aa_comm_backend(sub), aa_comm_backend(c)));
  for (int d = 0; d < 3; d++) {
    aa_dtype_t dt = DTYPES[d];
    size_t n = 400003, bytes = n * aa_dtype_size(dt);
    void *in = xmalloc(bytes), *out = xmalloc(bytes), *ref = xmalloc(bytes);
    fill(in, n, dt, 700, rank, 0);
    reference(ref, n, dt, AA_COMM_SUM, 700, members, m, 0);
    CHECK_MSG(aa_comm_all_reduce(sub, in, out, n, dt, AA_COMM_SUM) == 0, "%s", aa_last_error());
    CHECK_MSG(!memcmp(out, ref, bytes), "sub-group all_reduce %s differs", aa_dtype_name(dt));
    free(in);
    free(out);
    free(ref);
  }
  if (m >= 2) { /* point to point inside the sub-group, in its ranks */
    float v = (float)rank, got = -1;
    if (myrank == 0) CHECK(aa_comm_send(sub, &v, 1, AA_F32, 1) == 0);
    if (myrank == 1) {
      CHECK(aa_comm_recv(sub, &got, 1, AA_F32, 0) == 0);
      CHECK(got == (float)members[0]);
    }
  }
  /* The world group still works between and after. */
  float x = 1.0f, sum = 0;
  CHECK(aa_comm_all_reduce(c, &x, &sum, 1, AA_F32, AA_COMM_SUM) == 0);
  CHECK(sum == (float)world);

  /* A nested split of the sub-group, and one where the last rank is in no
   * group (color < 0 gives NULL). */
  aa_comm_t *nested = NULL;
  CHECK(aa_comm_split(sub, 0, 0, &nested) == 0 && nested);
  if (nested) {
    CHECK(aa_comm_rank(nested) == myrank && aa_comm_world(nested) == m);
    CHECK(aa_comm_barrier(nested) == 0);
  }
  aa_comm_destroy(nested);
  aa_comm_destroy(sub);
  for (int i = 0; i < 25; i++) {
    aa_comm_t *g = (aa_comm_t *)1;
    rc = aa_comm_split(c, rank == world - 1 ? -1 : i % 3, rank, &g);
    CHECK_MSG(rc == 0, "split %d: %s", i, aa_last_error());
    if (rank == world - 1) {
      CHECK(g == NULL);
      continue;
    }
    if (!g) continue;
    CHECK(aa_comm_world(g) == world - 1 && aa_comm_rank(g) == rank);
    float one = 1.0f, s = 0;
    CHECK(aa_comm_all_reduce(g, &one, &s, 1, AA_F32, AA_COMM_SUM) == 0 && s == (float)(world - 1));
    aa_comm_destroy(g);
  }
}

static int collectives_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  CHECK(aa_comm_rank(c) == rank && aa_comm_world(c) == world && !strcmp(aa_comm_backend(c), g_backend));
  CHECK(aa_comm_all_reduce(c, NULL, NULL, 0, AA_F32, AA_COMM_SUM) == 0);
  check_all_reduce(c, rank, world);
  check_reduce_scatter(c, rank, world);
  check_all_gather(c, rank, world);
  check_broadcast(c, rank, world);
  check_send_recv(c, rank, world);
  check_barrier(c, rank, world);
  check_split(c, rank, world);
  aa_comm_destroy(c);
  return 0;
}

static void collectives_on(const char *backend, int world) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(world, collectives_main, NULL, &o);
  expect_all_ok(&o, world);
  fprintf(stderr, "  %s, %d ranks: %.2f s\n", backend, world, o.seconds);
}

AA_TEST(collectives_on_2_ranks_match_the_reference_bit_for_bit) { collectives_on("shm", 2); }
AA_TEST(collectives_on_3_ranks_match_the_reference_bit_for_bit) { collectives_on("shm", 3); }
AA_TEST(collectives_on_4_ranks_match_the_reference_bit_for_bit) { collectives_on("shm", 4); }
AA_TEST(gloo_collectives_on_2_ranks_match_the_reference_bit_for_bit) { collectives_on("gloo", 2); }
AA_TEST(gloo_collectives_on_3_ranks_match_the_reference_bit_for_bit) { collectives_on("gloo", 3); }
AA_TEST(gloo_collectives_on_4_ranks_match_the_reference_bit_for_bit) { collectives_on("gloo", 4); }

/* --- failures ---------------------------------------------------------------------------------- */

/* The last rank dies (SIGKILL) at time T, 300 ms after the others entered
 * a large all_reduce (T from rank 0 on the shared monotonic clock). They must
 * return AA_ECANCELLED naming it within 10 s of T (in practice about the
 * 100 ms probe period), and every later call must fail at once. */
static int killed_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  size_t n = 1000003;
  float *buf = xmalloc(n * sizeof(float));
  fill(buf, n, AA_F32, 1, rank, 0);
  double t = aa_now() + 0.3;
  CHECK(aa_comm_broadcast(c, &t, &t, 2, AA_F32, 0) == 0);
  if (rank == world - 1) {
    sleep_s(t - aa_now());
    raise(SIGKILL);
  }
  int rc = aa_comm_all_reduce(c, buf, buf, n, AA_F32, AA_COMM_SUM);
  double after = aa_now() - t;
  CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  /* gloo cannot tell a death from a closed connection. */
  CHECK_MSG(strstr(aa_last_error(), is_gloo(rdv) ? "connection to rank 3 closed" : "died") != NULL, "%s",
            aa_last_error());
  CHECK_MSG(after < (is_gloo(rdv) ? 2.0 : 10.0), "took %.2f s after the kill", after);
  fprintf(stderr, "  rank %d: cancelled %.0f ms after the kill: %s\n", rank, after * 1e3, aa_last_error());
  double t0 = aa_now();
  CHECK(aa_comm_barrier(c) == AA_ECANCELLED);
  CHECK(aa_comm_all_reduce(c, buf, buf, 1, AA_F32, AA_COMM_SUM) == AA_ECANCELLED);
  CHECK(aa_now() - t0 < 0.2);
  free(buf);
  aa_comm_destroy(c);
  return 0;
}

static void killed_on(const char *backend) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(4, killed_main, NULL, &o);
  for (int r = 0; r < 3; r++)
    CHECK_MSG(exited_ok(o.status[r]), "rank %d: wait status 0x%x", r, o.status[r]);
  CHECK(WIFSIGNALED(o.status[3]) && WTERMSIG(o.status[3]) == SIGKILL);
}

AA_TEST(a_killed_rank_cancels_the_others_quickly) { killed_on("shm"); }
/* Bound: every other rank fails within 2 s of the kill (its sockets close
 * at once; measured tens of ms). */
AA_TEST(gloo_a_killed_rank_cancels_the_others_quickly) { killed_on("gloo"); }

/* rank `absent` never calls aa_comm_init; the others time out naming it. */
static int absent_main(const char *rdv, int rank, int world, const void *arg) {
  int absent = *(const int *)arg;
  if (rank == absent) return 0;
  aa_comm_t *c = NULL;
  double t0 = aa_now();
  int rc = init_with(&c, rdv, rank, world, 300);
  double took = aa_now() - t0;
  CHECK_MSG(rc == AA_ETIMEOUT, "rc %d: %s", rc, aa_last_error());
  CHECK(c == NULL);
  char want[32];
  snprintf(want, sizeof want, "rank %d did not", absent);
  CHECK_MSG(strstr(aa_last_error(), want) != NULL, "%s", aa_last_error());
  CHECK_MSG(took >= 0.29 && took < 3.0, "took %.2f s", took);
  if (rank == (absent + 1) % world) fprintf(stderr, "  rank %d: %s\n", rank, aa_last_error());
  return 0;
}

static void absent_on(const char *backend) {
  SKIP_WITHOUT(backend);
  g_backend = backend;
  for (int absent = 2; absent >= 0; absent -= 2) { /* the last rank, then rank 0 (no segment at all) */
    outcome_t o;
    run_group(3, absent_main, &absent, &o);
    expect_all_ok(&o, 3);
  }
}

AA_TEST(a_rank_that_never_joins_times_out_the_others) { absent_on("shm"); }
AA_TEST(gloo_a_rank_that_never_joins_times_out_the_others) { absent_on("gloo"); }

/* Rank 1 aborts while ranks 0 and 2 wait in a barrier for it. */
static int abort_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  CHECK(aa_comm_barrier(c) == 0);
  double t0 = aa_now();
  if (rank == 1) {
    sleep_s(0.1);
    aa_comm_abort(c);
  }
  int rc = aa_comm_barrier(c);
  double took = aa_now() - t0;
  CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  /* gloo: the others see rank 1's connections close. */
  CHECK_MSG(rank == 1 ||
                strstr(aa_last_error(), is_gloo(rdv) ? "connection to rank 1 closed" : "aborted by rank 1"),
            "%s", aa_last_error());
  CHECK_MSG(took < 1.0, "took %.2f s", took);
  if (rank == 0) fprintf(stderr, "  rank 0: %.0f ms: %s\n", took * 1e3, aa_last_error());
  aa_comm_destroy(c);
  return 0;
}

static void abort_on(const char *backend) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(3, abort_main, NULL, &o);
  expect_all_ok(&o, 3);
}

AA_TEST(abort_cancels_every_rank) { abort_on("shm"); }
AA_TEST(gloo_abort_cancels_every_rank) { abort_on("gloo"); }

/* Rank 0's SIGALRM handler aborts the group while rank 0 waits in a barrier
 * that rank 1 reaches only a second later. */
static aa_comm_t *volatile g_comm;
static void on_alarm(int sig) {
  (void)sig;
  aa_comm_abort(g_comm);
}

static int signal_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  double t0 = aa_now();
  if (rank == 0) {
    g_comm = c;
    signal(SIGALRM, on_alarm);
    struct itimerval it = {{0, 0}, {0, 150000}};
    setitimer(ITIMER_REAL, &it, NULL);
  } else {
    sleep_s(1.0);
  }
  int rc = aa_comm_barrier(c);
  double took = aa_now() - t0;
  CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  if (rank == 0) CHECK_MSG(took < 0.6, "took %.2f s", took);
  aa_comm_destroy(c);
  return 0;
}

static void signal_on(const char *backend) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(2, signal_main, NULL, &o);
  expect_all_ok(&o, 2);
}

AA_TEST(abort_from_a_signal_handler_cancels_every_rank) { signal_on("shm"); }
AA_TEST(gloo_abort_from_a_signal_handler_cancels_every_rank) { signal_on("gloo"); }

/* Another thread of rank 0 aborts the group 150 ms into a barrier that rank
 * 1 reaches only a second later: both ranks are cancelled. */
static void *abort_later(void *arg) {
  sleep_s(0.15);
  aa_comm_abort(arg);
  return NULL;
}

static int thread_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  pthread_t th;
  double t0 = aa_now();
  if (rank == 0)
    CHECK(pthread_create(&th, NULL, abort_later, c) == 0);
  else
    sleep_s(1.0);
  int rc = aa_comm_barrier(c);
  double took = aa_now() - t0;
  CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  if (rank == 0) {
    CHECK_MSG(took < 0.6, "took %.2f s", took);
    pthread_join(th, NULL);
  } else {
    CHECK_MSG(took < 1.5, "took %.2f s", took); /* at once when it arrives */
  }
  aa_comm_destroy(c);
  return 0;
}

static void thread_on(const char *backend) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(2, thread_main, NULL, &o);
  expect_all_ok(&o, 2);
}

AA_TEST(abort_from_another_thread_cancels_every_rank) { thread_on("shm"); }
AA_TEST(gloo_abort_from_another_thread_cancels_every_rank) { thread_on("gloo"); }

/* Rank 2 comes to the all_reduce 800 ms late with a 300 ms timeout: the
 * first to time out names it; the group is then failed for everyone. */
static int late_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 300)) return 1;
  if (rank == 2) sleep_s(0.8);
  float x = 1, y;
  double t0 = aa_now();
  int rc = aa_comm_all_reduce(c, &x, &y, 1, AA_F32, AA_COMM_SUM);
  double took = aa_now() - t0;
  if (rank == 2) {
    CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  } else {
    CHECK_MSG(rc == AA_ETIMEOUT || rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
    if (rc == AA_ETIMEOUT) {
      /* gloo too: a one-element all_reduce is one exchange with every rank. */
      CHECK_MSG(strstr(aa_last_error(), "all_reduce: rank") && strstr(aa_last_error(), "waiting for rank 2"),
                "%s", aa_last_error());
      fprintf(stderr, "  rank %d: %s\n", rank, aa_last_error());
    }
    CHECK_MSG(took < 1.0, "took %.2f s", took);
  }
  aa_comm_destroy(c);
  return 0;
}

static void late_on(const char *backend) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(3, late_main, NULL, &o);
  expect_all_ok(&o, 3);
}

AA_TEST(a_collective_times_out_naming_the_missing_rank) { late_on("shm"); }
AA_TEST(gloo_a_collective_times_out_naming_the_missing_rank) { late_on("gloo"); }

/* --- in one process ------------------------------------------------------------------------------ */

AA_TEST(bad_arguments_are_refused) {
  aa_comm_t *c = NULL;
  char rdv[AA_RENDEZVOUS_MAX];
  CHECK(aa_comm_init(&c, "tcp:/aa-x", 0, 1, NULL) == AA_EINVAL);
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test-comm-args") == 0);
  CHECK(aa_comm_init(&c, rdv, 1, 1, NULL) == AA_EINVAL);
  CHECK(aa_comm_init(&c, rdv, 0, 0, NULL) == AA_EINVAL);
  CHECK(c == NULL);
  int rc = aa_comm_init(&c, rdv, 0, 1, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  float a[3] = {1, 2, 3}, b[3] = {0};
  CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, AA_COMM_AVG) == 0 && b[2] == 3);
  CHECK(aa_comm_all_reduce(c, NULL, b, 3, AA_F32, AA_COMM_SUM) == AA_EINVAL);
  CHECK(aa_comm_all_reduce(c, a, b, 3, (aa_dtype_t)7, AA_COMM_SUM) == AA_EINVAL);
  CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, (aa_comm_op_t)5) == AA_EINVAL);
  CHECK(aa_comm_reduce_scatter(c, a, b, SIZE_MAX / 2, AA_F32, AA_COMM_SUM) == AA_EINVAL);
  CHECK(aa_comm_broadcast(c, a, b, 3, AA_F32, 1) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "root") != NULL);
  CHECK(aa_comm_send(c, a, 3, AA_F32, 0) == AA_EINVAL);
  CHECK(aa_comm_recv(c, a, 3, AA_F32, 1) == AA_EINVAL);
  aa_comm_t *s = NULL;
  CHECK(aa_comm_split(c, -1, 0, &s) == 0 && s == NULL);
  aa_comm_abort(c);
  CHECK(aa_comm_barrier(c) == AA_ECANCELLED);
  CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, AA_COMM_SUM) == AA_ECANCELLED);
  aa_comm_destroy(c);
  aa_comm_destroy(NULL);
  char path[AA_RENDEZVOUS_MAX + 16];
  snprintf(path, sizeof path, "/dev/shm%s", rdv + 4);
  CHECK(access(path, F_OK) != 0);
}

/* A group of one: every collective is the identity (a copy out of place,
 * nothing in place: a buffer nothing may write stays as it was), there is
 * no peer to send to, splits are groups of one of the same family, and an
 * abort of any of them fails them all; a split may outlive its parent. */
AA_TEST(a_group_of_one_copies_and_never_waits) {
  aa_comm_t *c = NULL, *sub = NULL, *none = (aa_comm_t *)1;
  CHECK(aa_comm_self(&c) == 0 && c);
  if (!c) return;
  CHECK(aa_comm_rank(c) == 0 && aa_comm_world(c) == 1 && !strcmp(aa_comm_backend(c), "self"));
  float a[3] = {1, -2, 3.5f}, b[3] = {0};
  CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, AA_COMM_SUM) == 0 && !memcmp(a, b, sizeof a));
  memset(b, 0, sizeof b);
  CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, AA_COMM_AVG) == 0 && !memcmp(a, b, sizeof a));
  memset(b, 0, sizeof b);
  CHECK(aa_comm_reduce_scatter(c, a, b, 3, AA_F32, AA_COMM_AVG) == 0 && !memcmp(a, b, sizeof a));
  memset(b, 0, sizeof b);
  CHECK(aa_comm_all_gather(c, a, b, 3, AA_F32) == 0 && !memcmp(a, b, sizeof a));
  memset(b, 0, sizeof b);
  CHECK(aa_comm_broadcast(c, a, b, 3, AA_F32, 0) == 0 && !memcmp(a, b, sizeof a));
  uint16_t h[2] = {0x3f80, 0x7fc1}, h0[2] = {0x3f80, 0x7fc1}; /* bf16 1.0 and a NaN with a payload */
  CHECK(aa_comm_all_reduce(c, h, h, 2, AA_BF16, AA_COMM_AVG) == 0 && !memcmp(h, h0, sizeof h));
  CHECK(aa_comm_barrier(c) == 0);
  CHECK(aa_comm_broadcast(c, a, b, 3, AA_F32, 1) == AA_EINVAL);
  CHECK(aa_comm_send(c, a, 3, AA_F32, 0) == AA_EINVAL && aa_comm_recv(c, a, 3, AA_F32, 1) == AA_EINVAL);
  CHECK(aa_comm_all_reduce(c, NULL, b, 3, AA_F32, AA_COMM_SUM) == AA_EINVAL);
  CHECK(aa_comm_split(c, -1, 0, &none) == 0 && none == NULL);
  CHECK(aa_comm_split(c, 5, 9, &sub) == 0 && sub && aa_comm_world(sub) == 1 && aa_comm_rank(sub) == 0);
  aa_comm_abort(c);
  CHECK(aa_comm_barrier(sub) == AA_ECANCELLED && strstr(aa_last_error(), "aborted"));
  CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, AA_COMM_SUM) == AA_ECANCELLED);
  aa_comm_destroy(c);
  CHECK(aa_comm_all_gather(sub, a, b, 3, AA_F32) == AA_ECANCELLED); /* the family outlives the parent */
  aa_comm_destroy(sub);
  CHECK(aa_comm_self(NULL) == AA_EINVAL);
}

/* The nccl backend: one rank per GPU, buffers in device memory. Only a
 * GPU machine runs it; a single GPU gives a group of one. */
AA_TEST(nccl_backend_on_the_gpus) {
  char rdv[AA_RENDEZVOUS_MAX];
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "nccl", "test-comm-nccl") == 0);
#ifndef AA_HAVE_NCCL
  aa_comm_t *c = NULL;
  CHECK(aa_comm_init(&c, rdv, 0, 1, NULL) == AA_EUNSUPPORTED);
  CHECK(strstr(aa_last_error(), "without CUDA/NCCL") != NULL);
  SKIP("built without CUDA/NCCL (the refusal was checked)");
#else
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) SKIP("no GPU");
  aa_comm_t *c = NULL;
  CHECK(cudaSetDevice(0) == cudaSuccess);
  int rc = aa_comm_init(&c, rdv, 0, 1, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(!strcmp(aa_comm_backend(c), "nccl"));
  float h[5] = {1, 2, 3, 4, 5}, back[5] = {0};
  float *d = NULL;
  CHECK(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
  CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK_MSG(aa_comm_all_reduce(c, d, d, 5, AA_F32, AA_COMM_AVG) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_comm_broadcast(c, d, d, 5, AA_F32, 0) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_comm_barrier(c) == 0, "%s", aa_last_error());
  CHECK(cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(!memcmp(back, h, sizeof h));
  aa_comm_t *s = NULL;
  CHECK_MSG(aa_comm_split(c, 0, 0, &s) == 0 && s, "%s", aa_last_error());
  if (s) CHECK(aa_comm_barrier(s) == 0);
  aa_comm_destroy(s);
  cudaFree(d);
  aa_comm_destroy(c);
#endif
}

#ifdef AA_HAVE_NCCL
/* A rank of an nccl-hosts group. With a GPU of its own (arg: the GPUs
 * seen) it joins, sums its rank + 1 over the group on the GPU, splits the
 * group in two by rank parity and broadcasts over its half. Without one,
 * its join must fail with the reason (CUDA's or NCCL's words), naming the
 * rank, rather than hang. */
static int nccl_hosts_main(const char *rdv, int rank, int world, const void *arg) {
  const int gpus = *(const int *)arg;
  aa_comm_t *c = NULL;
  if (gpus < world) {
    int rc = init_with(&c, rdv, rank, world, 10000);
    CHECK_MSG(rc != 0, "rank %d joined an NCCL group without a GPU", rank);
    if (!rc) aa_comm_destroy(c);
    const char *e = aa_last_error();
    CHECK_MSG(strstr(e, "rank ") && (strstr(e, "cuda") || strstr(e, "NCCL")), "rank %d: %s", rank, e);
    fprintf(stderr, "  rank %d, no GPU: %s\n", rank, e);
    return 0;
  }
  CHECK(cudaSetDevice(rank) == cudaSuccess);
  if (join(&c, rdv, rank, world, 20000)) return 1;
  CHECK(!strcmp(aa_comm_backend(c), "nccl"));
  float h[3] = {(float)rank + 1, 2.0f * (float)(rank + 1), 0.5f}, back[3];
  float *d = NULL;
  CHECK(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
  CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK_MSG(aa_comm_all_reduce(c, d, d, 3, AA_F32, AA_COMM_SUM) == 0, "%s", aa_last_error());
  CHECK(cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  float n = (float)world * (float)(world + 1) / 2; /* sum of rank + 1: exact in fp32 */
  CHECK_MSG(back[0] == n && back[1] == 2 * n && back[2] == 0.5f * (float)world, "%g %g %g", back[0], back[1],
            back[2]);
  aa_comm_t *half = NULL;
  CHECK_MSG(aa_comm_split(c, rank % 2, rank, &half) == 0 && half, "%s", aa_last_error());
  if (half) {
    CHECK(aa_comm_world(half) == (world - rank % 2 + 1) / 2 && aa_comm_rank(half) == rank / 2);
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK_MSG(aa_comm_broadcast(half, d, d, 3, AA_F32, 0) == 0, "%s", aa_last_error());
    CHECK(cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK_MSG(back[0] == (float)(rank % 2 + 1), "half %d: %g from its rank 0", rank % 2, back[0]);
    CHECK(aa_comm_barrier(half) == 0);
  }
  aa_comm_destroy(half);
  cudaFree(d);
  aa_comm_destroy(c);
  return 0;
}
#endif

/* nccl-hosts: the ranks meet in a gloo group through the store (on an
 * executor, the planner's relay), rank 0's NCCL unique id crosses it, and
 * NCCL runs the collectives. A GPU per rank (2 ranks on 2 GPUs or more, 1
 * on one) checks the data path and a split; with no GPU (the build
 * machine) both ranks must fail their join promptly with the reason: the
 * gloo bootstrap ran, and nothing hung or was left in the store. */
AA_TEST(nccl_hosts_bootstraps_through_the_store) {
  char rdv[AA_RENDEZVOUS_MAX];
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "nccl-hosts", "test-comm-nccl") == 0);
#ifndef AA_HAVE_NCCL
  aa_comm_t *c = NULL;
  CHECK(aa_comm_init(&c, rdv, 0, 1, NULL) == AA_EUNSUPPORTED);
  SKIP("built without CUDA/NCCL (the refusal was checked)");
#else
  SKIP_WITHOUT("gloo");
  aa_comm_t *c = NULL;
  CHECK(aa_comm_init(&c, rdv, 0, 2, NULL) == AA_EINVAL && strstr(aa_last_error(), "needs opts->store"));
  int gpus = gpus_seen(), world = gpus == 1 ? 1 : 2;
  const char *saved = g_backend;
  g_backend = "nccl-hosts";
  outcome_t o;
  run_group(world, nccl_hosts_main, &gpus, &o);
  g_backend = saved;
  expect_all_ok(&o, world);
  if (!gpus) {
    CHECK_MSG(o.seconds < 10.0, "the failed joins took %.1f s", o.seconds);
    SKIP("no GPU: the join through the store and its failure on every rank were checked, not NCCL's data "
         "path");
  }
#endif
}

/* --- gloo only ---------------------------------------------------------------------------------- */

/* The cascade: rank 2 dies while rank 0 waits to receive from it and rank 1
 * waits to receive from rank 0 only. Rank 0 fails and closes its
 * connections, so rank 1 fails too, within a second of the kill. */
static int cascade_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  double t = aa_now() + 0.3;
  CHECK(aa_comm_broadcast(c, &t, &t, 2, AA_F32, 0) == 0);
  float x = 0;
  if (rank == 2) {
    sleep_s(t - aa_now());
    raise(SIGKILL);
  }
  int rc = aa_comm_recv(c, &x, 1, AA_F32, rank == 0 ? 2 : 0);
  double after = aa_now() - t;
  CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  CHECK_MSG(
      strstr(aa_last_error(), rank == 0 ? "connection to rank 2 closed" : "connection to rank 0 closed"),
      "%s", aa_last_error());
  CHECK_MSG(after < 1.0, "rank %d failed %.2f s after the kill", rank, after);
  fprintf(stderr, "  rank %d: %.0f ms after the kill: %s\n", rank, after * 1e3, aa_last_error());
  aa_comm_destroy(c);
  return 0;
}

AA_TEST(gloo_a_failed_rank_fails_the_ranks_waiting_on_it) {
  SKIP_WITHOUT("gloo");
  outcome_t o;
  g_backend = "gloo";
  run_group(3, cascade_main, NULL, &o);
  for (int r = 0; r < 2; r++)
    CHECK_MSG(exited_ok(o.status[r]), "rank %d: wait status 0x%x", r, o.status[r]);
}

/* Rank 0 sends 1000 elements where rank 1 receives 500: gloo would abort
 * rank 1 inside its socket thread; the sizes are in the slots, so both time
 * out instead. */
static int mismatch_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 500)) return 1;
  float buf[1000] = {0};
  int rc = rank == 0 ? aa_comm_send(c, buf, 1000, AA_F32, 1) : aa_comm_recv(c, buf, 500, AA_F32, 0);
  CHECK_MSG(rc == AA_ETIMEOUT || rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  if (rank == 1) fprintf(stderr, "  rank 1: %s\n", aa_last_error());
  aa_comm_destroy(c);
  return 0;
}

AA_TEST(gloo_mismatched_counts_time_out_instead_of_crashing) {
  SKIP_WITHOUT("gloo");
  outcome_t o;
  g_backend = "gloo";
  run_group(2, mismatch_main, NULL, &o);
  expect_all_ok(&o, 2);
}

static int __attribute__((unused)) set_fails(void *ctx, const char *key, const void *value, size_t len) {
  (void)ctx, (void)value, (void)len;
  return aa_error(AA_EIO, "test store: set %s refused", key);
}

/* Bad stores and addresses are refused with a clear error before anything
 * waits; a gloo group of one works in this process. */
AA_TEST(gloo_bad_store_and_address_are_clear_errors) {
  char rdv[AA_RENDEZVOUS_MAX];
  aa_comm_t *c = NULL;
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "gloo", "test-comm-args") == 0);
#ifndef AA_HAVE_GLOO
  CHECK(aa_comm_init(&c, rdv, 0, 1, NULL) == AA_EUNSUPPORTED);
  CHECK(strstr(aa_last_error(), "without gloo") != NULL);
  SKIP("built without gloo (the refusal was checked)");
#else
  CHECK(aa_comm_init(&c, rdv, 0, 1, NULL) == AA_EINVAL && strstr(aa_last_error(), "opts->store"));
  CHECK(store_dir_make() == 0);
  aa_comm_store_t st;
  CHECK(aa_comm_dir_store(&st, g_store_dir) == 0);
  aa_comm_store_t half = {st.ctx, st.set, NULL};
  aa_comm_opts_t o = {.timeout_ms = 2000, .store = &half};
  CHECK(aa_comm_init(&c, rdv, 0, 1, &o) == AA_EINVAL && strstr(aa_last_error(), "opts->store"));
  o.store = &st;
  o.address = "localhost";
  CHECK(aa_comm_init(&c, rdv, 0, 1, &o) == AA_EINVAL && strstr(aa_last_error(), "not a numeric"));
  o.address = "203.0.113.254"; /* TEST-NET-3: documentation only, no interface has it */
  double t0 = aa_now();
  int rc = aa_comm_init(&c, rdv, 0, 2, &o);
  CHECK_MSG(rc == AA_EINVAL && strstr(aa_last_error(), "203.0.113.254") && aa_now() - t0 < 1.0, "rc %d: %s", rc,
            aa_last_error());
  fprintf(stderr, "  %s\n", aa_last_error());
  aa_comm_store_t refusing = {st.ctx, set_fails, st.get};
  o.address = NULL;
  o.store = &refusing;
  rc = aa_comm_init(&c, rdv, 0, 2, &o);
  CHECK_MSG(rc == AA_EIO && strstr(aa_last_error(), "set") && strstr(aa_last_error(), "refused"), "rc %d: %s",
            rc, aa_last_error());
  CHECK(c == NULL);
  o.store = &st;
  rc = aa_comm_init(&c, rdv, 0, 1, &o);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!rc) {
    CHECK(!strcmp(aa_comm_backend(c), "gloo"));
    float a[3] = {1, 2, 3}, b[3] = {0};
    CHECK(aa_comm_all_reduce(c, a, b, 3, AA_F32, AA_COMM_AVG) == 0 && !memcmp(a, b, sizeof a));
    CHECK(aa_comm_barrier(c) == 0);
    aa_comm_t *sub = NULL;
    CHECK(aa_comm_split(c, 3, 0, &sub) == 0 && sub && aa_comm_world(sub) == 1);
    aa_comm_abort(c);
    CHECK(aa_comm_barrier(sub) == AA_ECANCELLED && strstr(aa_last_error(), "aborted by rank 0"));
    aa_comm_destroy(sub);
    aa_comm_destroy(c);
  }
  aa_comm_dir_store_free(&st);
  store_dir_remove();
#endif
}

/* The directory store: only a private directory, keys set once and read
 * whole, a missing key times out, links are not followed. */
AA_TEST(dir_store_is_private_sets_once_and_times_out) {
  aa_comm_store_t st = {0};
  CHECK(aa_comm_dir_store(&st, "/tmp") == AA_EPERM && strstr(aa_last_error(), "private"));
  CHECK(aa_comm_dir_store(&st, "/nonexistent/aa-store") == AA_ENOENT);
  CHECK(store_dir_make() == 0);
  CHECK(chmod(g_store_dir, 0770) == 0);
  CHECK(aa_comm_dir_store(&st, g_store_dir) == AA_EPERM);
  CHECK(chmod(g_store_dir, 0700) == 0);
  int rc = aa_comm_dir_store(&st, g_store_dir);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  void *v = NULL;
  size_t len = 0;
  CHECK(st.set(st.ctx, "/aa-x/rank_0", "host", 4) == 0);
  CHECK(st.get(st.ctx, "/aa-x/rank_0", 100, &v, &len) == 0 && len == 4 && !memcmp(v, "host", 4));
  free(v);
  CHECK(st.set(st.ctx, "/aa-x/rank_0", "again", 5) == AA_EINVAL && strstr(aa_last_error(), "already set"));
  CHECK(st.set(st.ctx, "bad key", "x", 1) == AA_EINVAL);
  CHECK(st.set(st.ctx, "", "x", 1) == AA_EINVAL);
  double t0 = aa_now();
  CHECK(st.get(st.ctx, "/aa-x/missing", 50, &v, &len) == AA_ETIMEOUT && strstr(aa_last_error(), "missing"));
  CHECK(aa_now() - t0 >= 0.049 && aa_now() - t0 < 1.0);
  char link[128];
  snprintf(link, sizeof link, "%s/k.planted", g_store_dir);
  CHECK(symlink("/etc/passwd", link) == 0);
  CHECK(st.get(st.ctx, "planted", 100, &v, &len) == AA_EIO);
  aa_comm_dir_store_free(&st);
  aa_comm_dir_store_free(&st);
  store_dir_remove();
}

int main(void) {
  RUN(bad_arguments_are_refused);
  RUN(a_group_of_one_copies_and_never_waits);
  RUN(collectives_on_2_ranks_match_the_reference_bit_for_bit);
  RUN(collectives_on_3_ranks_match_the_reference_bit_for_bit);
  RUN(collectives_on_4_ranks_match_the_reference_bit_for_bit);
  RUN(a_killed_rank_cancels_the_others_quickly);
  RUN(a_rank_that_never_joins_times_out_the_others);
  RUN(abort_cancels_every_rank);
  RUN(abort_from_a_signal_handler_cancels_every_rank);
  RUN(abort_from_another_thread_cancels_every_rank);
  RUN(a_collective_times_out_naming_the_missing_rank);
  RUN(nccl_backend_on_the_gpus);
  RUN(nccl_hosts_bootstraps_through_the_store);
  RUN(gloo_collectives_on_2_ranks_match_the_reference_bit_for_bit);
  RUN(gloo_collectives_on_3_ranks_match_the_reference_bit_for_bit);
  RUN(gloo_collectives_on_4_ranks_match_the_reference_bit_for_bit);
  RUN(gloo_a_killed_rank_cancels_the_others_quickly);
  RUN(gloo_a_rank_that_never_joins_times_out_the_others);
  RUN(gloo_abort_cancels_every_rank);
  RUN(gloo_abort_from_a_signal_handler_cancels_every_rank);
  RUN(gloo_abort_from_another_thread_cancels_every_rank);
  RUN(gloo_a_collective_times_out_naming_the_missing_rank);
  RUN(gloo_a_failed_rank_fails_the_ranks_waiting_on_it);
  RUN(gloo_mismatched_counts_time_out_instead_of_crashing);
  RUN(gloo_bad_store_and_address_are_clear_errors);
  RUN(dir_store_is_private_sets_once_and_times_out);
  return aa_test_summary();
}
