/* Expert parallelism's groups and token dispatcher (engine/mesh.h's expert
 * and expert-data groups, engine/moe_dispatch.h), on forked shm ranks.
 *
 * Each rank routes its own tokens over all E experts, dispatches the rows
 * to the ranks of its expert group that hold their experts, runs its E/ep
 * local experts over what it received and combines the outputs back; then
 * the backward: dispatch of the rows' output gradients, the local experts'
 * backward, combine of the input gradients. The reference is the same rank
 * running all E experts over its own rows (what one process or a data
 * parallel rank computes): the outputs and input gradients must agree row
 * for row, and a local expert's weight gradient must equal the sum over the
 * expert group of the reference's gradient of that expert; summed over the
 * expert-data group it must equal the sum over every rank (the whole
 * gradient, which the engine scales by 1 / (dp cp)). With a capacity
 * factor the drops are each rank's own routing's, so they are one
 * process's. A rank killed inside the all-to-all is comm's test
 * (test_comm_alltoall.c, killed_on), not repeated here. The dispatcher's
 * path for a backend's memory (aa_moe_dispatch_backend: CUDA's over NCCL)
 * runs here with a copy of the CPU table standing for the device (its
 * memory is host memory, so the same shm groups move it): the counts
 * through the backend's buffer, rows_copy for the local sort, a sync
 * before each all-to-all, the overflow from its alloc. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_gang.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"
#include "common/rendezvous.h"
#include "engine/mesh.h"
#include "engine/moe_dispatch.h"
#include "kernels/cpu/cpu_moe.h"
#include "strategies/layout.h"

/* The block's shape: N tokens a rank, width C, E experts of width F. */
enum { N = 24, C = 16, E = 8, F = 12 };

typedef struct {
  char rdv[AA_RENDEZVOUS_MAX];
  int dp, ep, k;
  float cap; /* capacity factor, 0 dropless */
  int room;  /* the rows the rank's buffers hold, 0: the worst case ep N k */
  int backend; /* 1: the dispatcher's path for a backend's memory (a copy of the CPU table) */
} cfg_t;

/* The backend standing for a device: the CPU's table under another name. */
static aa_ops_t device;

static float *randn(aa_rng_t *r, size_t n, float scale) {
  float *x = malloc(n * sizeof(float));
  for (size_t i = 0; x && i < n; i++)
    x[i] = scale * aa_rng_normal(r);
  return x;
}

/* The largest |a - b| over n values, relative to the largest |b| (or 1). */
static double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    m = fmax(m, fabs((double)b[i]));
  }
  return d / (m > 1 ? m : 1);
}

/* Whether group g holds exactly the world ranks layout.h lists for this
 * rank (an all-reduce of each member's world rank and of its square). */
static int group_is(aa_comm_t *g, const aa_strategy_t *s, int rank, bool data) {
  int members[AA_GANG_MAX], n = aa_layout_expert_group(members, AA_GANG_MAX, s, rank, data);
  float got[2] = {(float)rank, (float)(rank * rank)}, want[2] = {0, 0};
  for (int i = 0; i < n; i++) {
    want[0] += (float)members[i];
    want[1] += (float)(members[i] * members[i]);
  }
  if (n < 1 || aa_comm_world(g) != n || aa_comm_all_reduce(g, got, got, 2, AA_F32, AA_COMM_SUM)) return 0;
  return got[0] == want[0] && got[1] == want[1];
}

/* One rank: the groups, then the block through the dispatcher against the
 * reference. Exit status 0 when all holds; else a bit per failed check. */
static int rank_main(const void *data, int rank) {
  const cfg_t *c = data;
  aa_comm_t *world = NULL;
  if (aa_comm_init(&world, c->rdv, rank, c->dp, NULL)) return 2;
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = c->dp;
  s.ep = c->ep;
  aa_mesh_t m;
  aa_moe_dispatch_t d = {0};
  aa_moe_route_t r = {0};
  aa_mem_t mem;
  aa_mem_init(&mem, 0);
  int bad = 0;
  if (aa_mesh_init(&m, &s, world)) {
    fprintf(stderr, "  rank %d: mesh: %s\n", rank, aa_last_error());
    aa_comm_destroy(world);
    return 4;
  }
  bad |= !group_is(m.expert, &s, rank, false) << 3;
  bad |= !group_is(m.expert_data, &s, rank, true) << 4;
  const int El = E / c->ep, e0 = aa_comm_rank(m.expert) * El, R = N * c->k;
  aa_rng_t wrng, xrng;
  aa_rng_seed(&wrng, 7);
  aa_rng_seed(&xrng, 100 + (uint64_t)rank);
  float *wr = randn(&wrng, (size_t)E * C, 0.5f), *w13 = randn(&wrng, (size_t)E * 2 * F * C, 0.3f);
  float *w2 = randn(&wrng, (size_t)E * C * F, 0.3f), *x = randn(&xrng, (size_t)N * C, 1.0f);
  float *dout = randn(&xrng, (size_t)N * C, 1.0f);
  float *logits = calloc((size_t)N * E, sizeof(float)), *probs = calloc((size_t)N * E, sizeof(float));
  /* Reference buffers (R rows at most) and the rank's (ep R rows at most). */
  const size_t most = (size_t)c->ep * R;
  float *xp = calloc((size_t)R * C, 4), *yp = calloc((size_t)R * C, 4), *h = calloc((size_t)R * 2 * F, 4);
  float *act = calloc((size_t)R * F, 4), *dxp = calloc((size_t)R * C, 4), *dyp = calloc((size_t)R * C, 4);
  float *dw13 = calloc((size_t)E * 2 * F * C, 4), *dw2 = calloc((size_t)E * C * F, 4);
  float *xl = calloc(most * C, 4), *yl = calloc(most * C, 4), *hl = calloc(most * 2 * F, 4);
  float *al = calloc(most * F, 4), *dxl = calloc(most * C, 4), *dyl = calloc(most * C, 4);
  float *yp2 = calloc((size_t)R * C, 4), *dxp2 = calloc((size_t)R * C, 4);
  float *dw13l = calloc((size_t)El * 2 * F * C, 4), *dw2l = calloc((size_t)El * C * F, 4);
  float *dweight = calloc((size_t)N * c->k, 4);
  if (!wr || !w13 || !w2 || !x || !dout || !logits || !probs || !xp || !yp || !h || !act || !dxp || !dyp ||
      !dw13 || !dw2 || !xl || !yl || !hl || !al || !dxl || !dyl || !yp2 || !dxp2 || !dw13l || !dw2l ||
      !dweight || aa_cpu_moe_route_alloc(&r, N, E, c->k) ||
      aa_moe_dispatch_init(&d, m.expert, E, (int)most, c->room ? c->room : (int)most, 4 * C + 3 * F, &mem)) {
    bad |= 1;
    goto done;
  }
  device = *aa_ops_cpu();
  device.name = "device";
  if (c->backend && (aa_moe_dispatch_backend(&d, &device) || d.ops != &device || !d.dcounts)) {
    bad |= 1 << 11;
    goto done;
  }
  /* Routing, then the reference: every expert over the rank's own rows. */
  aa_cpu_moe_router_forward(logits, probs, x, wr, N, C, E);
  aa_moe_stats_t st;
  if (aa_cpu_moe_route(&r, &st, logits, probs, c->cap)) bad |= 1;
  if (c->cap > 0 && st.dropped == 0) bad |= 1 << 5; /* the capacity case must drop something */
  aa_cpu_moe_permute(xp, x, &r, C);
  aa_cpu_moe_experts_forward(yp, h, act, xp, w13, w2, r.offsets, E, C, F);
  aa_cpu_moe_unpermute_backward(dyp, dweight, dout, yp, &r, C);
  aa_cpu_moe_experts_backward(dxp, dw13, dw2, dyp, xp, h, act, w13, w2, r.offsets, E, C, F);
  /* The same through the dispatcher and the rank's slice of the experts. */
  int rc = aa_moe_dispatch_plan(&d, r.offsets);
  /* Past the room the rows live in the dispatcher's overflow, carved as
   * engine/model.c's moe_local does; planning the same routing again
   * reuses it. */
  float *Lxl = xl, *Lyl = yl, *Lhl = hl, *Lal = al, *Ldxl = dxl, *Ldyl = dyl;
  float *o = rc ? NULL : aa_moe_dispatch_overflow(&d);
  if (!rc && (d.rows > d.room) != (o != NULL)) bad |= 1 << 9;
  if (!rc && c->room && !o) bad |= 1 << 9; /* the test's room is below every rank's load */
  if (o) {
    const size_t RC = (size_t)d.rows * C, RF = (size_t)d.rows * F;
    Lxl = o, Lyl = o + RC, Lhl = o + 2 * RC, Lal = o + 2 * RC + 2 * RF, Ldxl = Lal + RF, Ldyl = Ldxl + RC;
    if (mem.cur[AA_MEM_ACTS] != (size_t)d.over_rows * (4 * C + 3 * F) * sizeof(float) || d.grown != 1)
      bad |= 1 << 10;
    if (!(rc = aa_moe_dispatch_plan(&d, r.offsets)) && (d.grown != 1 || aa_moe_dispatch_overflow(&d) != o))
      bad |= 1 << 10;
  } else if (mem.cur[AA_MEM_ACTS] != 0) {
    bad |= 1 << 10;
  }
  if (!rc) rc = aa_moe_dispatch(&d, Lxl, xp, C, Ldxl);
  if (!rc) {
    aa_cpu_moe_experts_forward(Lyl, Lhl, Lal, Lxl, w13 + (size_t)e0 * 2 * F * C, w2 + (size_t)e0 * C * F,
                               d.offsets, El, C, F);
    rc = aa_moe_combine(&d, yp2, Lyl, C, Ldxl);
  }
  if (!rc) rc = aa_moe_dispatch(&d, Ldyl, dyp, C, Ldxl);
  if (!rc) {
    memset(Ldxl, 0, (size_t)d.rows * C * sizeof(float));
    aa_cpu_moe_experts_backward(Ldxl, dw13l, dw2l, Ldyl, Lxl, Lhl, Lal, w13 + (size_t)e0 * 2 * F * C,
                                w2 + (size_t)e0 * C * F, d.offsets, El, C, F);
    rc = aa_moe_combine(&d, dxp2, Ldxl, C, Ldyl);
  }
  if (rc) {
    fprintf(stderr, "  rank %d: dispatch: %s\n", rank, aa_last_error());
    bad |= 2;
    goto done;
  }
  const double tol = 1e-5;
  double dy = rel_diff(yp2, yp, (size_t)r.rows * C), dx = rel_diff(dxp2, dxp, (size_t)r.rows * C);
  bad |= (d.sent != r.rows || dy > tol || dx > tol) << 6;
  /* The reference's weight gradients summed over the expert group: the
   * rank's slice must be its local gradient. */
  const size_t n13 = (size_t)El * 2 * F * C, n2 = (size_t)El * C * F;
  if (aa_comm_all_reduce(m.expert, dw13, dw13, (size_t)E * 2 * F * C, AA_F32, AA_COMM_SUM) ||
      aa_comm_all_reduce(m.expert, dw2, dw2, (size_t)E * C * F, AA_F32, AA_COMM_SUM)) {
    bad |= 2;
    goto done;
  }
  double dg13 = rel_diff(dw13l, dw13 + (size_t)e0 * 2 * F * C, n13),
         dg2 = rel_diff(dw2l, dw2 + (size_t)e0 * C * F, n2);
  bad |= (dg13 > tol || dg2 > tol) << 7;
  /* Summed over the expert-data group: the sum over every rank. */
  if (aa_comm_all_reduce(m.expert_data, dw13l, dw13l, n13, AA_F32, AA_COMM_SUM) ||
      aa_comm_all_reduce(m.expert_data, dw13, dw13, (size_t)E * 2 * F * C, AA_F32, AA_COMM_SUM)) {
    bad |= 2;
    goto done;
  }
  double dall = rel_diff(dw13l, dw13 + (size_t)e0 * 2 * F * C, n13);
  bad |= (dall > tol) << 8;
  if (rank == 0)
    fprintf(stderr,
            "  dp %d ep %d top-%d capacity %.2g: rank 0 sent %d rows, computed %d (dropped %d); "
            "max rel diff: out %.2g, dx %.2g, dw13 %.2g, dw2 %.2g, over the expert-data group %.2g\n",
            c->dp, c->ep, c->k, c->cap, d.sent, d.rows, st.dropped, dy, dx, dg13, dg2, dall);
done:
  aa_moe_dispatch_free(&d);
  aa_cpu_moe_route_free(&r);
  float *bufs[] = {wr,   w13, w2, x,  dout, logits, probs, xp,  yp,  h,    act,   dxp,  dyp,
                   dw13, dw2, xl, yl, hl,   al,     dxl,   dyl, yp2, dxp2, dw13l, dw2l, dweight};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    free(bufs[i]);
  aa_mesh_free(&m);
  aa_comm_destroy(world);
  if (bad) fprintf(stderr, "  rank %d: checks failed: %#x (%s)\n", rank, bad, aa_last_error());
  return bad ? 1 : 0;
}

static void run_backend(int dp, int ep, int k, float cap, int room, int backend) {
  cfg_t c = {.dp = dp, .ep = ep, .k = k, .cap = cap, .room = room, .backend = backend};
  CHECK(aa_rendezvous_new(c.rdv, sizeof c.rdv, "shm", "test_moe_dispatch") == 0);
  int st[AA_GANG_MAX];
  double exit_time[AA_GANG_MAX];
  aa_gang_fork("moe dispatch", dp, rank_main, &c, st, exit_time);
  for (int i = 0; i < dp; i++)
    CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "dp %d ep %d k %d: rank %d: status %#x", dp, ep, k,
              i, st[i]);
}

static void run_room(int dp, int ep, int k, float cap, int room) { run_backend(dp, ep, k, cap, room, 0); }
static void run(int dp, int ep, int k, float cap) { run_room(dp, ep, k, cap, 0); }

AA_TEST(ep2_over_dp2_matches_each_rank_running_every_expert) { run(2, 2, 2, 0); }
AA_TEST(ep2_over_dp4_makes_two_expert_groups_and_matches) { run(4, 2, 2, 0); }
AA_TEST(ep4_over_dp4_matches_top1) { run(4, 4, 1, 0); }
AA_TEST(a_capacity_factor_drops_what_each_rank_routes_as_one_process_would) { run(2, 2, 2, 0.5f); }
/* Buffers with room for fewer rows than arrive (a quarter of the even load
 * N k, so some rank of the group always exceeds it): the overflow grows,
 * is charged, and the results are the same. */
AA_TEST(rows_past_the_room_go_to_a_grown_overflow_and_match) { run_room(2, 2, 2, 0, N * 2 / 4); }
AA_TEST(ep4_rows_past_the_room_match) { run_room(4, 4, 2, 0, N * 2 / 4); }
/* The same through a backend's memory (the CUDA path's code), with and
 * without the overflow. */
AA_TEST(through_a_backends_memory_ep2_matches) { run_backend(2, 2, 2, 0, 0, 1); }
AA_TEST(through_a_backends_memory_ep4_past_the_room_matches) { run_backend(4, 4, 2, 0, N * 2 / 4, 1); }

/* Arguments refused before anything moves. */
AA_TEST(bad_shapes_and_counts_past_the_room_are_refused) {
  aa_comm_t *self = NULL;
  CHECK(aa_comm_self(&self) == 0);
  aa_moe_dispatch_t d;
  CHECK_ERR(aa_moe_dispatch_init(&d, self, 0, 8, 8, 1, NULL), AA_EINVAL, "0 experts");
  CHECK_ERR(aa_moe_dispatch_init(&d, self, 1, 8, 9, 1, NULL), AA_EINVAL, "room for 9 rows of at most 8");
  CHECK(d.counts == NULL);
  /* A group whose counts overflow the caller's room is refused before a
   * row moves: one expert, 3 routed rows, room for 2. */
  CHECK(aa_moe_dispatch_init(&d, self, 1, 2, 2, 1, NULL) == 0);
  const int32_t offsets[2] = {0, 3};
  CHECK_ERR(aa_moe_dispatch_plan(&d, offsets), AA_EINVAL, "sends 3 rows, room for 2");
  aa_moe_dispatch_free(&d);
  /* An overflow past the accountant's limit is refused as out of memory. */
  aa_mem_t mem;
  aa_mem_init(&mem, 8);
  CHECK(aa_moe_dispatch_init(&d, self, 1, 4, 1, 4, &mem) == 0);
  const int32_t two[2] = {0, 2};
  CHECK_ERR(aa_moe_dispatch_plan(&d, two), AA_EOOM, "2 rows arrive, room for 1");
  CHECK(mem.cur[AA_MEM_ACTS] == 0);
  aa_moe_dispatch_free(&d);
  aa_comm_destroy(self);
}

int main(void) {
  RUN(ep2_over_dp2_matches_each_rank_running_every_expert);
  RUN(ep2_over_dp4_makes_two_expert_groups_and_matches);
  RUN(ep4_over_dp4_matches_top1);
  RUN(a_capacity_factor_drops_what_each_rank_routes_as_one_process_would);
  RUN(rows_past_the_room_go_to_a_grown_overflow_and_match);
  RUN(ep4_rows_past_the_room_match);
  RUN(through_a_backends_memory_ep2_matches);
  RUN(through_a_backends_memory_ep4_past_the_room_matches);
  RUN(bad_shapes_and_counts_past_the_room_are_refused);
  return aa_test_summary();
}
