/* all_to_all_v and its counts exchange (comm/comm.h), on every backend that
 * runs here: self in this process, shm on 2, 3 and 4 forked ranks, gloo on
 * 2 and 3 over loopback (the harness is aa_comm_test.h); nccl on up to 4
 * GPUs where there are GPUs ("skipped: no GPU" elsewhere).
 *
 * Every rank computes the whole matrix of per-pair counts from the trial's
 * seed (a third of the pairs empty, the own rank's too), so each knows what
 * every peer sends it without asking: the counts exchange is checked
 * against that matrix, and the received bytes, gaps included, against a
 * reference built from the sources' known inputs. Layouts are not packed
 * in rank order (send in reverse order, recv rotated, gaps between), so an
 * offset mixed up with a rank shows. Then the failures: a rank killed
 * inside the call, a rank that comes late, counts the peers disagree on,
 * and the arguments refused before anything moves. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_comm_test.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"

/* --- the reference ----------------------------------------------------------------------------- */

typedef struct {
  uint64_t seed;
  size_t most; /* the largest count of a pair */
  aa_dtype_t dt;
} trial_t;

/* Elements rank i sends rank j in trial t: t->most from rank 0 to rank 1
 * (so the largest size is always moved), else 0 for a third of the pairs
 * and up to t->most for the others. */
static size_t pair_count(const trial_t *t, int i, int j) {
  if (i == 0 && j == 1) return t->most;
  uint64_t x = t->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull + (uint64_t)j * 131;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  if (x % 3 == 0 || !t->most) return 0;
  return (size_t)(x >> 8) % t->most + 1;
}

/* Element k of the message from rank i to rank j. */
static size_t element(int j, size_t k) { return ((size_t)j << 26) + k; }

/* Rank me's layouts: its messages in reverse rank order, 3 elements apart;
 * what it receives starting from rank me + 1, 5 elements apart. Sets the
 * buffer lengths (elements) in *slen and *rlen. */
static void layout(const trial_t *t, int me, int n, size_t *sc, size_t *so, size_t *rc, size_t *ro,
                   size_t *slen, size_t *rlen) {
  size_t at = 0;
  for (int j = n - 1; j >= 0; j--) {
    sc[j] = pair_count(t, me, j);
    so[j] = at;
    at += sc[j] + 3;
  }
  *slen = at;
  at = 0;
  for (int k = 1; k <= n; k++) {
    int i = (me + k) % n;
    rc[i] = pair_count(t, i, me);
    ro[i] = at;
    at += rc[i] + 5;
  }
  *rlen = at;
}

/* One all_to_all_v of trial t over c: the counts exchange against the
 * matrix, then the bytes received (gaps untouched) against the reference.
 * An nccl group moves device copies of the host buffers. */
static void check_trial(aa_comm_t *c, const trial_t *t) {
  int me = aa_comm_rank(c), n = aa_comm_world(c);
  size_t *sc = xmalloc(4 * (size_t)n * sizeof *sc), *so = sc + n, *rc = so + n, *ro = rc + n;
  size_t *got = xmalloc((size_t)n * sizeof *got), slen, rlen, e = aa_dtype_size(t->dt);
  layout(t, me, n, sc, so, rc, ro, &slen, &rlen);
  int err = aa_comm_all_to_all_counts(c, sc, got);
  CHECK_MSG(err == 0, "%s", aa_last_error());
  for (int i = 0; i < n && !err; i++)
    CHECK_MSG(got[i] == rc[i], "rank %d of %d: the counts exchange says rank %d sends %zu, not %zu", me, n, i,
              got[i], rc[i]);
  unsigned char *send = xmalloc(slen * e), *recv = xmalloc(rlen * e), *ref = xmalloc(rlen * e);
  memset(send, 0x5a, slen * e);
  for (int j = 0; j < n; j++)
    fill(send + so[j] * e, sc[j], t->dt, t->seed, me, element(j, 0));
  memset(recv, 0xee, rlen * e);
  memset(ref, 0xee, rlen * e);
  for (int i = 0; i < n; i++)
    fill(ref + ro[i] * e, rc[i], t->dt, t->seed, i, element(me, 0));
  void *dsend = send, *drecv = recv;
#ifdef AA_HAVE_CUDA
  int dev = !strcmp(aa_comm_backend(c), "nccl");
  if (dev) {
    CHECK(cudaMalloc(&dsend, slen * e) == cudaSuccess && cudaMalloc(&drecv, rlen * e) == cudaSuccess);
    CHECK(cudaMemcpy(dsend, send, slen * e, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(drecv, recv, rlen * e, cudaMemcpyHostToDevice) == cudaSuccess);
  }
#endif
  err = aa_comm_all_to_all_v(c, dsend, sc, so, drecv, rc, ro, t->dt);
  CHECK_MSG(err == 0, "%s", aa_last_error());
#ifdef AA_HAVE_CUDA
  if (dev) {
    CHECK(cudaMemcpy(recv, drecv, rlen * e, cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaFree(dsend);
    cudaFree(drecv);
  }
#endif
  CHECK_MSG(!memcmp(recv, ref, rlen * e),
            "all_to_all_v %s, seed %llu, up to %zu a pair, rank %d of %d differs", aa_dtype_name(t->dt),
            (unsigned long long)t->seed, t->most, me, n);
  free(send);
  free(recv);
  free(ref);
  free(got);
  free(sc);
}

/* Every count 0; small, medium and large random sizes in f32, bf16 and
 * f16 (large: several shm steps; 1200000 f32 from rank 0 to rank 1 are
 * more than gloo's 4 MiB round). */
static const trial_t TRIALS[] = {
    {1, 0, AA_F32},    {2, 7, AA_F32},       {3, 7, AA_BF16},      {4, 3000, AA_BF16},
    {5, 3000, AA_F16}, {6, 300000, AA_BF16}, {7, 1200000, AA_F32},
};

static int matches_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  for (size_t k = 0; k < sizeof TRIALS / sizeof *TRIALS; k++)
    check_trial(c, &TRIALS[k]);
  /* Over the even and the odd ranks at once, in the sub-groups' ranks. */
  aa_comm_t *sub = NULL;
  CHECK_MSG(aa_comm_split(c, rank % 2, rank, &sub) == 0 && sub, "%s", aa_last_error());
  if (sub) check_trial(sub, &(trial_t){8 + (uint64_t)(rank % 2), 5000, AA_F32});
  aa_comm_destroy(sub);
  check_trial(c, &TRIALS[1]); /* the world group again after */
  aa_comm_destroy(c);
  return 0;
}

static void matches_on(const char *backend, int world) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(world, matches_main, NULL, &o);
  expect_all_ok(&o, world);
  fprintf(stderr, "  %s, %d ranks: %.2f s\n", backend, world, o.seconds);
}

AA_TEST(all_to_all_v_on_2_ranks_matches_the_reference) { matches_on("shm", 2); }
AA_TEST(all_to_all_v_on_3_ranks_matches_the_reference) { matches_on("shm", 3); }
AA_TEST(all_to_all_v_on_4_ranks_matches_the_reference) { matches_on("shm", 4); }
AA_TEST(gloo_all_to_all_v_on_2_ranks_matches_the_reference) { matches_on("gloo", 2); }
AA_TEST(gloo_all_to_all_v_on_3_ranks_matches_the_reference) { matches_on("gloo", 3); }

#ifdef AA_HAVE_NCCL
/* A rank of an nccl group on GPU `rank`: the same trials on device memory. */
static int nccl_main(const char *rdv, int rank, int world, const void *arg) {
  if (cudaSetDevice(rank) != cudaSuccess) {
    fprintf(stderr, "  rank %d: cudaSetDevice failed\n", rank);
    return 1;
  }
  return matches_main(rdv, rank, world, arg);
}
#endif

/* The nccl backend, one rank per GPU (up to 4; a group of one on a single
 * GPU, whose own part still goes through ncclSend/ncclRecv): the same
 * trials and sub-group, buffers in device memory, counts over the shm
 * carrier. Unverified until a GPU machine runs it. */
AA_TEST(nccl_all_to_all_v_on_the_gpus_matches_the_reference) {
#ifndef AA_HAVE_NCCL
  SKIP("built without CUDA/NCCL");
#else
  int gpus = gpus_seen(), world = gpus < MAX_RANKS ? gpus : MAX_RANKS;
  if (!gpus) SKIP("no GPU");
  const char *saved = g_backend;
  g_backend = "nccl";
  outcome_t o;
  run_group(world, nccl_main, NULL, &o);
  g_backend = saved;
  expect_all_ok(&o, world);
  fprintf(stderr, "  nccl, %d ranks: %.2f s\n", world, o.seconds);
#endif
}

/* --- failures ---------------------------------------------------------------------------------- */

/* The last of 4 ranks dies (SIGKILL) at T, 300 ms after the others entered
 * an all_to_all_v of 200000 elements a pair (several shm steps; gloo: the
 * other ranks' transfers among themselves complete, then they wait on
 * it). They must return AA_ECANCELLED naming it within the bounds of
 * test_comm's killed all_reduce, and every later call must fail at once. */
static int killed_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  size_t per = 200000, counts[4], offsets[4];
  for (int j = 0; j < world; j++) {
    counts[j] = per;
    offsets[j] = (size_t)j * per;
  }
  float *send = xmalloc(per * (size_t)world * sizeof(float)),
        *recv = xmalloc(per * (size_t)world * sizeof(float));
  fill(send, per * (size_t)world, AA_F32, 9, rank, 0);
  double t = aa_now() + 0.3;
  CHECK(aa_comm_broadcast(c, &t, &t, 2, AA_F32, 0) == 0);
  if (rank == world - 1) {
    sleep_s(t - aa_now());
    raise(SIGKILL);
  }
  int rc = aa_comm_all_to_all_v(c, send, counts, offsets, recv, counts, offsets, AA_F32);
  double after = aa_now() - t;
  CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  CHECK_MSG(strstr(aa_last_error(), is_gloo(rdv) ? "connection to rank 3 closed" : "died") != NULL, "%s",
            aa_last_error());
  CHECK_MSG(after < (is_gloo(rdv) ? 2.0 : 10.0), "took %.2f s after the kill", after);
  fprintf(stderr, "  rank %d: cancelled %.0f ms after the kill: %s\n", rank, after * 1e3, aa_last_error());
  double t0 = aa_now();
  CHECK(aa_comm_all_to_all_v(c, send, counts, offsets, recv, counts, offsets, AA_F32) == AA_ECANCELLED);
  CHECK(aa_comm_all_to_all_counts(c, counts, offsets) == AA_ECANCELLED);
  CHECK(aa_now() - t0 < 0.2);
  free(send);
  free(recv);
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

AA_TEST(a_rank_killed_in_all_to_all_v_cancels_the_others_quickly) { killed_on("shm"); }
AA_TEST(gloo_a_rank_killed_in_all_to_all_v_cancels_the_others_quickly) { killed_on("gloo"); }

/* Rank 2 of 3 comes 800 ms late with a 300 ms timeout: the first to time
 * out names it; the group is then failed for everyone. */
static int late_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 300)) return 1;
  if (rank == 2) sleep_s(0.8);
  float send[3] = {1, 2, 3}, recv[3];
  size_t counts[3] = {1, 1, 1}, offsets[3] = {0, 1, 2};
  double t0 = aa_now();
  int rc = aa_comm_all_to_all_v(c, send, counts, offsets, recv, counts, offsets, AA_F32);
  double took = aa_now() - t0;
  if (rank == 2) {
    CHECK_MSG(rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
  } else {
    CHECK_MSG(rc == AA_ETIMEOUT || rc == AA_ECANCELLED, "rc %d: %s", rc, aa_last_error());
    if (rc == AA_ETIMEOUT) {
      CHECK_MSG(strstr(aa_last_error(), "all_to_all_v: rank") &&
                    strstr(aa_last_error(), "waiting for rank 2"),
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

AA_TEST(all_to_all_v_times_out_naming_the_missing_rank) { late_on("shm"); }
AA_TEST(gloo_all_to_all_v_times_out_naming_the_missing_rank) { late_on("gloo"); }

/* Rank 1 expects 500 elements from rank 0, which sends 1000. shm sees it in
 * the counts the ranks publish: rank 1 fails with AA_EINVAL naming rank 0,
 * and the family fails. gloo cannot see it: both time out (the sizes are in
 * the slots) instead of gloo aborting rank 1 on a message larger than its
 * buffer. */
static int mismatch_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, is_gloo(rdv) ? 500 : 20000)) return 1;
  float *send = xmalloc(2000 * sizeof(float)), *recv = xmalloc(2000 * sizeof(float));
  memset(send, 0, 2000 * sizeof(float));
  size_t sc[2] = {1000, 1000}, so[2] = {0, 1000}, rc[2] = {1000, 1000};
  if (rank == 1) rc[0] = 500;
  int err = aa_comm_all_to_all_v(c, send, sc, so, recv, rc, so, AA_F32);
  if (is_gloo(rdv)) {
    CHECK_MSG(err == AA_ETIMEOUT || err == AA_ECANCELLED, "rc %d: %s", err, aa_last_error());
  } else if (rank == 1) {
    CHECK_ERR(err, AA_EINVAL, "rank 0 sends 4000 bytes to this rank, but recv_counts[0] = 500");
  } else {
    CHECK_MSG(err == 0 || err == AA_ECANCELLED, "rc %d: %s", err, aa_last_error());
  }
  if (rank == 1) fprintf(stderr, "  rank 1: %s\n", aa_last_error());
  CHECK(aa_comm_barrier(c) == AA_ECANCELLED);
  free(send);
  free(recv);
  aa_comm_destroy(c);
  return 0;
}

static void mismatch_on(const char *backend) {
  SKIP_WITHOUT(backend);
  outcome_t o;
  g_backend = backend;
  run_group(2, mismatch_main, NULL, &o);
  expect_all_ok(&o, 2);
}

AA_TEST(all_to_all_v_names_counts_a_peer_disagrees_with) { mismatch_on("shm"); }
AA_TEST(gloo_all_to_all_v_mismatched_counts_time_out_instead_of_crashing) { mismatch_on("gloo"); }

/* --- the arguments ------------------------------------------------------------------------------- */

/* Each refusal is local (nothing moves, the group stays usable): the
 * ranks make the same bad calls, then a good one. */
static int bad_main(const char *rdv, int rank, int world, const void *arg) {
  (void)arg;
  aa_comm_t *c;
  if (join(&c, rdv, rank, world, 20000)) return 1;
  float send[8] = {0, 1, 2, 3, 4, 5, 6, 7}, recv[8] = {0};
  size_t sc[2] = {2, 2}, so[2] = {0, 2}, rc[2] = {2, 2}, ro[2] = {0, 2};
  const char *wrap = "all_to_all_v: rank";
  CHECK_ERR(aa_comm_all_to_all_v(NULL, send, sc, so, recv, rc, ro, AA_F32), AA_EINVAL, "the group is NULL");
  CHECK_ERR(aa_comm_all_to_all_v(c, send, NULL, so, recv, rc, ro, AA_F32), AA_EINVAL, "array is NULL");
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, recv, rc, NULL, AA_F32), AA_EINVAL, "array is NULL");
  CHECK(strstr(aa_last_error(), wrap) != NULL);
  CHECK_ERR(aa_comm_all_to_all_v(c, NULL, sc, so, recv, rc, ro, AA_F32), AA_EINVAL, "send is NULL");
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, NULL, rc, ro, AA_F32), AA_EINVAL, "recv is NULL");
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, recv, rc, ro, (aa_dtype_t)9), AA_EINVAL, "unknown dtype");
  size_t huge[2] = {SIZE_MAX / 4, 2};
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, huge, recv, rc, ro, AA_F32), AA_EINVAL,
            "send_offsets[0] + send_counts[0] overflows");
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, recv, rc, huge, AA_F32), AA_EINVAL,
            "recv_offsets[0] + recv_counts[0] overflows");
  size_t self[2] = {2, 2};
  self[rank] = 3;
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, recv, self, ro, AA_F32), AA_EINVAL, "to itself");
  size_t lap[2] = {0, 1}; /* rank 1's range starts inside rank 0's */
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, recv, rc, lap, AA_F32), AA_EINVAL,
            "recv ranges of rank 0 and rank 1 overlap");
  CHECK_ERR(aa_comm_all_to_all_v(c, send, sc, so, send + 3, rc, ro, AA_F32), AA_EINVAL, "no in-place form");
  CHECK_ERR(aa_comm_all_to_all_counts(c, NULL, rc), AA_EINVAL, "counts array is NULL");
  CHECK_ERR(aa_comm_all_to_all_counts(c, sc, sc + 1), AA_EINVAL, "overlap");
  /* Ranges that only touch, and empty ranges anywhere, are fine. */
  size_t zc[2] = {0, 0};
  CHECK_MSG(aa_comm_all_to_all_v(c, NULL, zc, so, NULL, zc, so, AA_F32) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_comm_all_to_all_v(c, send, sc, so, recv, rc, ro, AA_F32) == 0, "%s", aa_last_error());
  int peer = 1 - rank;
  CHECK(recv[2 * peer] == send[2 * rank] && recv[2 * peer + 1] == send[2 * rank + 1]);
  CHECK(recv[2 * rank] == send[2 * rank] && recv[2 * rank + 1] == send[2 * rank + 1]);
  aa_comm_destroy(c);
  return 0;
}

AA_TEST(bad_all_to_all_arguments_are_refused) {
  outcome_t o;
  g_backend = "shm";
  run_group(2, bad_main, NULL, &o);
  expect_all_ok(&o, 2);
}

/* A group of one: the own part is copied (offsets honoured), the counts
 * exchange copies the one count, and an abort of the family cancels both. */
AA_TEST(a_group_of_one_all_to_all_copies_its_own_part) {
  aa_comm_t *c = NULL;
  CHECK(aa_comm_self(&c) == 0 && c);
  if (!c) return;
  uint16_t send[5] = {1, 2, 3, 4, 5}, recv[6] = {0};
  size_t sc = 3, so = 1, rc = 3, ro = 2, got = 0;
  CHECK_MSG(aa_comm_all_to_all_v(c, send, &sc, &so, recv, &rc, &ro, AA_BF16) == 0, "%s", aa_last_error());
  CHECK(recv[1] == 0 && recv[2] == 2 && recv[3] == 3 && recv[4] == 4 && recv[5] == 0);
  CHECK(aa_comm_all_to_all_counts(c, &sc, &got) == 0 && got == 3);
  rc = 2;
  CHECK_ERR(aa_comm_all_to_all_v(c, send, &sc, &so, recv, &rc, &ro, AA_BF16), AA_EINVAL, "to itself");
  aa_comm_abort(c);
  CHECK(aa_comm_all_to_all_v(c, send, &sc, &so, recv, &sc, &ro, AA_BF16) == AA_ECANCELLED);
  CHECK(aa_comm_all_to_all_counts(c, &sc, &got) == AA_ECANCELLED);
  aa_comm_destroy(c);
}

int main(void) {
  RUN(a_group_of_one_all_to_all_copies_its_own_part);
  RUN(bad_all_to_all_arguments_are_refused);
  RUN(all_to_all_v_on_2_ranks_matches_the_reference);
  RUN(all_to_all_v_on_3_ranks_matches_the_reference);
  RUN(all_to_all_v_on_4_ranks_matches_the_reference);
  RUN(a_rank_killed_in_all_to_all_v_cancels_the_others_quickly);
  RUN(all_to_all_v_times_out_naming_the_missing_rank);
  RUN(all_to_all_v_names_counts_a_peer_disagrees_with);
  RUN(gloo_all_to_all_v_on_2_ranks_matches_the_reference);
  RUN(gloo_all_to_all_v_on_3_ranks_matches_the_reference);
  RUN(gloo_a_rank_killed_in_all_to_all_v_cancels_the_others_quickly);
  RUN(gloo_all_to_all_v_times_out_naming_the_missing_rank);
  RUN(gloo_all_to_all_v_mismatched_counts_time_out_instead_of_crashing);
  RUN(nccl_all_to_all_v_on_the_gpus_matches_the_reference);
  return aa_test_summary();
}
