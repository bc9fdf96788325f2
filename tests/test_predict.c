/* The step-time model (strategies/predict.h) on a synthetic calibration
 * whose every op takes its work times a constant: a single rank's step
 * worked out by hand, the data group's and the pipeline's additions as
 * cost.h counts them, the stand-ins for missing shapes and group sizes,
 * the contention of executors sharing a host, the wanted list covering
 * the whole search space, and the llama family's ops (RMSNorm, RoPE,
 * grouped-query attention, SwiGLU) and casts by hand. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_test.h"
#include "strategies/calib.h"
#include "strategies/cost.h"
#include "strategies/plan_rank.h"
#include "strategies/predict.h"
#include "strategies/profile.h"
#include "strategies/roofline.h"
#include "strategies/sizes.h"
#include "strategies/space.h"

#define K_OP 1e-9 /* seconds per unit of work, forward; backward twice that */
#define K_ADAMW 3e-9
#define LAT 1e-5
#define BW 1e9

static aa_model_spec_t model(void) {
  aa_model_spec_t sp;
  memset(&sp, 0, sizeof sp);
  sp.arch = (aa_arch_t){.family = "gpt2",
                        .n_layer = 4,
                        .n_head = 4,
                        .d_model = 32,
                        .d_ff = 64,
                        .seq_len = 16,
                        .vocab_size = 64};
  sp.train.global_batch = 8;
  return sp;
}

/* A small llama: head size 8, 2 kv heads (q|k|v 64 wide, G = 2 query
 * heads a kv head), gate|up 128 wide; a vocabulary of 80 so that no two
 * GEMMs share a shape. */
static aa_model_spec_t llama(void) {
  aa_model_spec_t sp = model();
  snprintf(sp.arch.family, sizeof sp.arch.family, "llama");
  sp.arch.n_kv_head = 2;
  sp.arch.vocab_size = 80;
  sp.arch.rope_theta = 10000;
  sp.arch.norm_eps = 1e-5f;
  return sp;
}

static double op_fwd(const aa_op_shape_t *s) {
  return (s->op == AA_OP_ADAMW ? K_ADAMW : K_OP) * aa_op_work(s);
}
static double op_bwd(const aa_op_shape_t *s) { return s->op == AA_OP_ADAMW ? 0 : 2 * K_OP * aa_op_work(s); }

/* Every op the model's strategies on up to 8 devices run, timed as work x
 * K; links of every kind at 2, 4 and 8 ranks when links is set. */
static aa_calib_t *calib(const aa_model_spec_t *sp, int cuda, int links) {
  aa_calib_t *c = calloc(1, sizeof *c);
  c->version = AA_CALIB_VERSION;
  snprintf(c->device, sizeof c->device, "test");
  snprintf(c->backend, sizeof c->backend, cuda ? "nccl" : "shm");
  c->cuda = cuda;
  c->threads = cuda ? 0 : 1;
  c->host_cores = cuda ? 0 : 8;
  c->ranks = 2;
  size_t n = aa_predict_wanted(sp, 8, cuda, c->op, AA_CALIB_OPS_MAX);
  CHECK_MSG(n > 0 && n <= AA_CALIB_OPS_MAX, "%zu ops wanted", n);
  c->n_op = (int)(n < AA_CALIB_OPS_MAX ? n : AA_CALIB_OPS_MAX);
  for (int i = 0; i < c->n_op; i++) {
    /* Each (shape, dtype) once: dryrun/calibrate.c measures the list as it
     * comes, and a calibration that repeats one does not parse. */
    CHECK_MSG(aa_calib_find_op(c, &c->op[i].shape, c->op[i].dtype) == &c->op[i],
              "ops[%d] repeats an earlier one", i);
    c->op[i].fwd_s = op_fwd(&c->op[i].shape);
    c->op[i].bwd_s = op_bwd(&c->op[i].shape);
  }
  for (int k = 0; links && k < AA_COST_RECV; k++)
    for (int t = 2; t <= 8; t *= 2)
      c->link[c->n_link++] = (aa_calib_link_t){k, t, LAT * (k + 1), BW * t};
  return c;
}

static aa_strategy_t strat_cp(const aa_model_spec_t *sp, int dp, int tp, int pp, int cp, int mb) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = dp, s.degree[AA_AXIS_TENSOR] = tp, s.degree[AA_AXIS_PIPELINE] = pp,
  s.degree[AA_AXIS_CONTEXT] = cp, s.micro_batch = mb;
  int rc = aa_strategy_resolve(&s, sp, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return s;
}

static aa_strategy_t strat(const aa_model_spec_t *sp, int dp, int tp, int pp, int mb) {
  return strat_cp(sp, dp, tp, pp, 1, mb);
}

/* Adds to c the op shapes of every pipeline rank of s that it lacks,
 * timed as calib() times them: a strategy the space may not enumerate. */
static void add_ops(aa_calib_t *c, const aa_model_spec_t *sp, const aa_strategy_t *s) {
  for (int r = 0; r < s->degree[AA_AXIS_PIPELINE]; r++) {
    aa_calib_op_t ops[64];
    size_t n = aa_predict_ops(&sp->arch, s, r, c->cuda, ops, 64);
    CHECK(n > 0 && n <= 64);
    for (size_t i = 0; i < n && i < 64 && c->n_op < AA_CALIB_OPS_MAX; i++) {
      if (aa_calib_find_op(c, &ops[i].shape, ops[i].dtype)) continue;
      ops[i].fwd_s = op_fwd(&ops[i].shape);
      ops[i].bwd_s = op_bwd(&ops[i].shape);
      c->op[c->n_op++] = ops[i];
    }
  }
}

/* Predicts s on 8 devices, the expert ranks at load imbalance imb (0: the
 * default), and checks that the parts add up to the step. */
static int predict_imb(const aa_model_spec_t *sp, const aa_strategy_t *s, const aa_calib_t *c, int host_cores,
                       double imb, aa_predict_t *p) {
  aa_predict_pool_t pool = {.devices = 8, .host_cores = host_cores, .moe_imbalance = imb};
  int rc = aa_predict(sp, s, c, &pool, p);
  if (rc == 0) {
    double sum = p->forward_s + p->backward_s + p->tensor_comm_s + p->pipeline_comm_s + p->context_comm_s +
                 p->expert_comm_s + p->bubble_s + p->optimizer_s + p->data_comm_s;
    CHECK_NEAR(sum / p->step_s, 1, 1e-12);
    CHECK_NEAR(p->tokens_per_s * p->step_s, (double)sp->train.global_batch * sp->arch.seq_len, 1e-6);
  }
  return rc;
}

static int predict(const aa_model_spec_t *sp, const aa_strategy_t *s, const aa_calib_t *c, int host_cores,
                   aa_predict_t *p) {
  return predict_imb(sp, s, c, host_cores, 0, p);
}

/* Seconds group g takes with every line at LAT x (kind + 1) and BW x t,
 * latency scaled by lat_scale; send and receive on the send line at 2. */
static double comm(const aa_cost_group_t *g, double lat_scale) {
  double s = 0, t = g->ranks;
  if (g->ranks < 2) return 0;
  for (int k = 0; k < AA_COST_COLLECTIVES; k++) {
    if (!g->kind[k].calls) continue;
    int p2p = k == AA_COST_SEND || k == AA_COST_RECV, kk = p2p ? AA_COST_SEND : k;
    double share = p2p ? 1 : k == AA_COST_ALL_REDUCE ? 2 * (t - 1) / t : (t - 1) / t;
    double bw = BW * (p2p ? 2 : t);
    s += (double)g->kind[k].calls * LAT * (kk + 1) * lat_scale + share * (double)g->kind[k].bytes / bw;
  }
  return s;
}

AA_TEST(a_single_rank_step_is_its_ops_worked_out_by_hand) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 1, 1, 1, 4); /* 2 micro-batches a step */
  aa_predict_t p;
  CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
  const double B = 4, T = 16, N = B * T, C = 32, F = 64, V = 64, L = 4, m = 2;
  const double block = 2 * N * C + 2 * N * C * 3 * C + B * T * T * C + 2 * N * C * C + 2 * N * C +
                       2 * N * C * F + N * F + 2 * N * F * C;
  const double work = L * block + N * C + N * C + 2 * N * C * V + N * V;
  const double params = (V + T) * C + L * (4 * C * C + 2 * F * C + 9 * C + F) + 2 * C;
  CHECK_NEAR(p.forward_s / (m * K_OP * work), 1, 1e-12);
  CHECK_NEAR(p.backward_s / (m * 2 * K_OP * work), 1, 1e-12);
  CHECK_NEAR(p.optimizer_s / (K_ADAMW * params), 1, 1e-12);
  CHECK_NEAR(p.step_s / (3 * m * K_OP * work + K_ADAMW * params), 1, 1e-12);
  CHECK(p.tensor_comm_s == 0 && p.data_comm_s == 0 && p.pipeline_comm_s == 0 && p.bubble_s == 0);
  CHECK(p.ops_estimated == 0 && p.links_estimated == 0 && p.stage == 0);
  aa_cost_mem_t mem;
  aa_cost_memory(&sp.arch, &s, 2, &mem);
  CHECK(mem.total == p.mem.total && mem.total > 0);
  free(c);
}

/* The GEMMs of the inventory are cost.h's lower bound of a rank's FLOPs:
 * with only the GEMMs timed (2 N C OC work forward, twice that backward)
 * the compute is min_flops_per_token x the micro-batches' tokens, whatever
 * the tensor slice, sequence parallelism, stage or recompute. */
AA_TEST(the_gemms_are_the_cost_models_flops) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  for (int i = 0; i < c->n_op; i++)
    if (c->op[i].shape.op != AA_OP_MATMUL) c->op[i].fwd_s = c->op[i].bwd_s = 0;
  const int cfg[][4] = {{1, 1, 0, 1}, {2, 1, 0, 1}, {2, 1, 1, 1}, {4, 1, 1, 1}, {1, 2, 0, 1}, {2, 2, 1, 2}};
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++)
    for (int ck = 0; ck < 3; ck++) {
      aa_strategy_t s = strat(&sp, 1, cfg[k][0], cfg[k][1], 2);
      s.sp = cfg[k][2];
      s.ckpt = (aa_ckpt_mode_t)ck;
      s.ckpt_layers = ck == AA_CKPT_FULL ? cfg[k][3] : 0;
      aa_predict_t p;
      CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
      const int m = aa_strategy_accum_steps(&s, &sp);
      const double tokens = (double)m * s.micro_batch * sp.arch.seq_len;
      double want = aa_cost_min_flops_per_token_stage(&sp.arch, &s, p.stage) * tokens * K_OP;
      CHECK_MSG(fabs((p.forward_s + p.backward_s) / want - 1) < 1e-12,
                "tp %d pp %d sp %d ckpt %d: %.9g vs %.9g", cfg[k][0], cfg[k][1], cfg[k][2], ck,
                p.forward_s + p.backward_s, want);
    }
  /* A context rank's GEMMs run on its tokens, 1 / cp of the replica's,
   * each at the cost of a token at cp 1 (cost.h). */
  for (int cp = 2; cp <= 4; cp *= 2)
    for (int ck = 0; ck < 3; ck++) {
      aa_strategy_t s = strat_cp(&sp, 1, 1, 1, cp, 2);
      s.ckpt = (aa_ckpt_mode_t)ck;
      add_ops(c, &sp, &s);
      for (int i = 0; i < c->n_op; i++)
        if (c->op[i].shape.op != AA_OP_MATMUL) c->op[i].fwd_s = c->op[i].bwd_s = 0;
      aa_predict_t p;
      CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
      const double tokens = (double)aa_strategy_accum_steps(&s, &sp) * s.micro_batch * sp.arch.seq_len / cp;
      double want = aa_cost_min_flops_per_token(&sp.arch, &s) * tokens * K_OP;
      CHECK_MSG(fabs((p.forward_s + p.backward_s) / want - 1) < 1e-12, "cp %d ckpt %d: %.9g vs %.9g", cp, ck,
                p.forward_s + p.backward_s, want);
    }
  free(c);
}

AA_TEST(checkpointing_adds_the_recomputed_forward_to_the_backward) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 1, 1, 1, 8);
  aa_predict_t none, sel, full;
  CHECK(predict(&sp, &s, c, 0, &none) == 0);
  s.ckpt = AA_CKPT_SELECTIVE;
  CHECK(predict(&sp, &s, c, 0, &sel) == 0);
  s.ckpt = AA_CKPT_FULL;
  CHECK(predict(&sp, &s, c, 0, &full) == 0);
  const double B = 8, T = 16, N = B * T, C = 32, F = 64, L = 4;
  const double block = 2 * N * C + 2 * N * C * 3 * C + B * T * T * C + 2 * N * C * C + 2 * N * C +
                       2 * N * C * F + N * F + 2 * N * F * C;
  CHECK(sel.forward_s == none.forward_s && full.forward_s == none.forward_s);
  CHECK_NEAR((sel.backward_s - none.backward_s) / (L * N * F * K_OP), 1, 1e-9);
  CHECK_NEAR((full.backward_s - none.backward_s) / (L * block * K_OP), 1, 1e-9);
  free(c);
}

AA_TEST(data_parallelism_adds_the_data_groups_collectives) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  aa_strategy_t s1 = strat(&sp, 1, 1, 1, 4), s2 = strat(&sp, 2, 1, 1, 4);
  aa_predict_t p1, p2;
  CHECK(predict(&sp, &s1, c, 0, &p1) == 0);
  CHECK_MSG(predict(&sp, &s2, c, 0, &p2) == 0, "%s", aa_last_error());
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &s2, 1, 0, &cc);
  CHECK(cc.data.ranks == 2 && cc.data.kind[AA_COST_ALL_REDUCE].calls > 0);
  CHECK_NEAR(p2.data_comm_s / comm(&cc.data, 1), 1, 1e-12);
  /* Half the micro-batches, the same optimizer (ZeRO 0): only the data group added. */
  CHECK_NEAR(p2.forward_s * 2 / p1.forward_s, 1, 1e-12);
  CHECK_NEAR(p2.step_s, p1.forward_s / 2 + p1.backward_s / 2 + p1.optimizer_s + comm(&cc.data, 1), 1e-15);
  CHECK(p2.links_estimated == 0);
  /* ZeRO 1 updates half the parameters (each unit's chunk of two). */
  s2.zero = 1;
  aa_predict_t z1;
  CHECK(predict(&sp, &s2, c, 0, &z1) == 0);
  CHECK(z1.optimizer_s < p2.optimizer_s * 0.51 && z1.optimizer_s > p2.optimizer_s * 0.49);
  free(c);
}

/* Lines between hosts for calibration c: its links with 10x the latency
 * and a tenth of the bandwidth, over gloo, no ops (allocated). */
static aa_calib_t *slow_inter(const aa_calib_t *c) {
  aa_calib_t *x = calloc(1, sizeof *x);
  if (!x) abort();
  *x = *c;
  snprintf(x->backend, sizeof x->backend, "gloo");
  x->n_op = 0;
  for (int i = 0; i < x->n_link; i++)
    x->link[i].latency_s *= 10, x->link[i].bytes_per_s /= 10;
  return x;
}

/* A gang larger than a host: its data and pipeline groups take the
 * inter-host lines (here 10x the latency, a tenth of the bandwidth), its
 * tensor group the intra-host ones; without inter-host lines the intra
 * ones stand in and are counted; only a host's ranks share its cores. */
AA_TEST(a_gang_across_hosts_takes_the_inter_host_lines_for_data_and_pipeline) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1), *x = slow_inter(c);
  aa_strategy_t s = strat(&sp, 2, 2, 1, 2);
  aa_predict_pool_t one = {.devices = 8}, two = {.devices = 8, .host_devices = 2, .inter = x};
  aa_predict_t p1, p2, p3;
  CHECK_MSG(aa_predict(&sp, &s, c, &one, &p1) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_predict(&sp, &s, c, &two, &p2) == 0, "%s", aa_last_error());
  CHECK(!p1.across_hosts && p2.across_hosts);
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &s, aa_strategy_accum_steps(&s, &sp), 0, &cc);
  CHECK_NEAR(p1.data_comm_s / comm(&cc.data, 1), 1, 1e-12);
  double lat = 0, bw = 0; /* the data group's time on x's lines, worked out as comm() does */
  for (int k = 0; k < AA_COST_COLLECTIVES; k++) {
    if (!cc.data.kind[k].calls || k >= AA_COST_SEND) continue;
    double t = cc.data.ranks, share = k == AA_COST_ALL_REDUCE ? 2 * (t - 1) / t : (t - 1) / t;
    lat += (double)cc.data.kind[k].calls * LAT * (k + 1) * 10;
    bw += share * (double)cc.data.kind[k].bytes / (BW * t / 10);
  }
  CHECK_NEAR(p2.data_comm_s / (lat + bw), 1, 1e-12);
  CHECK_NEAR(p2.tensor_comm_s / p1.tensor_comm_s, 1, 1e-12);
  CHECK(p2.links_estimated == 0);
  /* No inter-host lines: the intra-host ones, counted (one data group). */
  two.inter = NULL;
  CHECK(aa_predict(&sp, &s, c, &two, &p3) == 0);
  CHECK_NEAR(p3.data_comm_s / p1.data_comm_s, 1, 1e-12);
  CHECK(p3.across_hosts && p3.links_estimated == 1);
  /* 4 single-threaded ranks on 2-core hosts, 2 per host: the share of 2
   * ranks, not 4 (the calibration ran 2 ranks on 8 cores: uncontended). */
  aa_predict_pool_t crowd = {.devices = 8, .host_cores = 2},
                    spread = {.devices = 8, .host_cores = 2, .host_devices = 2};
  aa_predict_t pc, ps;
  CHECK(aa_predict(&sp, &s, c, &crowd, &pc) == 0 && aa_predict(&sp, &s, c, &spread, &ps) == 0);
  CHECK_NEAR(pc.forward_s / ps.forward_s, 2, 1e-12);
  free(x);
  free(c);
}

/* A pipeline on a host with more single-threaded ranks than cores: the
 * step is the larger of the critical path (ops at the rate they run alone,
 * stretched by the bubble) and the host's throughput (every rank's ops at
 * the shared rate); a rank waiting in the bubble lends its core. On 8
 * cores the bubble is the critical path's as before. */
AA_TEST(an_oversubscribed_host_hides_a_pipelines_bubble_up_to_its_throughput) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1); /* timed by 2 ranks on 8 cores: uncontended */
  aa_strategy_t s = strat(&sp, 2, 1, 2, 2);
  aa_predict_t roomy, tight;
  CHECK_MSG(predict(&sp, &s, c, 8, &roomy) == 0, "%s", aa_last_error());
  CHECK_MSG(predict(&sp, &s, c, 2, &tight) == 0, "%s", aa_last_error());
  CHECK(roomy.bubble > 0.3 && roomy.bubble_s > 0);
  const double ops = roomy.forward_s + roomy.backward_s, comm = roomy.tensor_comm_s + roomy.pipeline_comm_s;
  const double path = (ops + comm) / (1 - roomy.bubble) + roomy.optimizer_s;
  const double host = 2 * ops + comm + 2 * roomy.optimizer_s; /* 4 ranks on 2 cores: half the rate */
  CHECK_NEAR(roomy.step_s / (path + roomy.data_comm_s), 1, 1e-12);
  CHECK_MSG(host > path, "host %g path %g", host, path);
  CHECK_NEAR(tight.step_s / (host + tight.data_comm_s), 1, 1e-12);
  CHECK(tight.bubble_s == 0);
  CHECK_NEAR(tight.forward_s / roomy.forward_s, 2, 1e-12);
  /* The old rule (everything at the shared rate, then stretched) is slower. */
  CHECK(tight.step_s < (2 * ops + comm) / (1 - roomy.bubble) + 2 * roomy.optimizer_s + tight.data_comm_s);
  free(c);
}

AA_TEST(tensor_parallelism_adds_the_tensor_groups_collectives) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  for (int sq = 0; sq <= 1; sq++) {
    aa_strategy_t s = strat(&sp, 1, 2, 1, 4);
    s.sp = sq;
    aa_predict_t p;
    CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
    aa_cost_comm_t cc;
    aa_cost_comm_stage(&sp.arch, &s, 2, 0, &cc);
    CHECK_NEAR(p.tensor_comm_s / comm(&cc.tensor, 1), 1, 1e-12);
    CHECK(p.ops_estimated == 0 && p.links_estimated == 0);
  }
  free(c);
}

AA_TEST(a_pipeline_stretches_its_busy_time_by_the_bubble) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  aa_strategy_t s = strat(&sp, 1, 1, 2, 2); /* 4 micro-batches a step */
  aa_predict_t p;
  CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
  CHECK_NEAR(p.bubble, aa_cost_bubble(&s, 4), 1e-15);
  CHECK_NEAR(p.bubble, 1.0 / 5, 1e-15);
  double busy = p.forward_s + p.backward_s + p.tensor_comm_s + p.pipeline_comm_s;
  CHECK_NEAR(p.bubble_s / (busy * p.bubble / (1 - p.bubble)), 1, 1e-12);
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &s, 4, p.stage, &cc);
  CHECK(p.pipeline_comm_s > 0);
  CHECK_NEAR(p.pipeline_comm_s / comm(&cc.pipeline, 1), 1, 1e-12);
  CHECK_NEAR(p.data_comm_s / (comm(&cc.data, 1) + comm(&cc.embedding, 1)), 1, 1e-12);
  /* The last stage runs the head: it is the slower one here. */
  CHECK(p.stage == 1);
  free(c);
}

AA_TEST(missing_shapes_and_group_sizes_are_stood_in_for_and_counted) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 0);
  /* All-reduces measured at 2 ranks only. */
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_ALL_REDUCE, 2, LAT, BW * 2};
  aa_strategy_t s = strat(&sp, 4, 1, 1, 2);
  aa_predict_t p;
  CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
  CHECK(p.links_estimated == 1 && p.ops_estimated == 0);
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &s, 1, 0, &cc);
  /* The ring's 3 steps instead of 1; the bandwidth of 2 ranks' (BW x 2, what comm() gives at t = 2). */
  double t = 4, share = 2 * (t - 1) / t;
  double want = (double)cc.data.kind[AA_COST_ALL_REDUCE].calls * LAT * 3 +
                share * (double)cc.data.kind[AA_COST_ALL_REDUCE].bytes / (BW * 2);
  CHECK_NEAR(p.data_comm_s / want, 1, 1e-12);
  /* A kind not measured (ZeRO 1's all-gather) takes the all-reduce's line. */
  s.zero = 1;
  CHECK(predict(&sp, &s, c, 0, &p) == 0);
  CHECK(p.links_estimated == 3); /* all-reduce, reduce-scatter, all-gather at 4 ranks */
  /* An op shape not measured takes a neighbour's time scaled by the work:
   * with times proportional to work, the same prediction. */
  aa_predict_t exact, near;
  s.zero = 0;
  CHECK(predict(&sp, &s, c, 0, &exact) == 0);
  int removed = 0;
  for (int i = 0; i < c->n_op && !removed; i++)
    if (c->op[i].shape.op == AA_OP_MATMUL && c->op[i].shape.d[0] == 2 * 16 && c->op[i].shape.d[2] == 96) {
      c->op[i] = c->op[--c->n_op];
      removed = 1;
    }
  CHECK(removed);
  CHECK(predict(&sp, &s, c, 0, &near) == 0);
  CHECK(near.ops_estimated == 1);
  CHECK_NEAR(near.step_s / exact.step_s, 1, 1e-12);
  free(c);
}

AA_TEST(a_calibration_without_collectives_cannot_predict_a_group) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 2, 1, 1, 4);
  aa_predict_t p;
  p.step_s = -1;
  CHECK(predict(&sp, &s, c, 0, &p) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "calibrate on a pool of at least two devices") != NULL, "%s",
            aa_last_error());
  CHECK(p.step_s == -1);
  /* An op kind never measured is refused, naming it. */
  int n = 0;
  for (int i = 0; i < c->n_op; i++)
    if (c->op[i].shape.op != AA_OP_XENT) c->op[n++] = c->op[i];
  c->n_op = n;
  s = strat(&sp, 1, 1, 1, 4);
  CHECK(predict(&sp, &s, c, 0, &p) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "no xent op in fp32") != NULL, "%s", aa_last_error());
  /* A pool smaller than the gang. */
  aa_predict_pool_t small = {.devices = 1};
  s = strat(&sp, 2, 1, 1, 4);
  CHECK(aa_predict(&sp, &s, c, &small, &p) == AA_EINVAL);
  free(c);
}

AA_TEST(executors_sharing_a_hosts_cores_compute_slower) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  c->host_cores = 2; /* measured: 2 ranks of 1 thread on 2 cores, uncontended */
  aa_strategy_t s = strat(&sp, 4, 1, 1, 2);
  aa_predict_t own, shared;
  CHECK(predict(&sp, &s, c, 0, &own) == 0);
  CHECK(predict(&sp, &s, c, 2, &shared) == 0); /* 4 ranks on 2 cores */
  CHECK_NEAR(shared.forward_s / own.forward_s, 2, 1e-12);
  CHECK_NEAR(shared.optimizer_s / own.optimizer_s, 2, 1e-12);
  CHECK(shared.data_comm_s == own.data_comm_s);
  /* Measured contended (4 ranks on 2 cores), predicted on separate hosts: faster. */
  c->ranks = 4;
  aa_predict_t sep;
  CHECK(predict(&sp, &s, c, 0, &sep) == 0);
  CHECK_NEAR(sep.forward_s / own.forward_s, 0.5, 1e-12);
  free(c);
}

AA_TEST(cpu_16bit_storage_adds_casts_and_gpus_time_ops_in_their_amp) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 1, 1, 1, 4);
  aa_predict_t f32, b16;
  CHECK(predict(&sp, &s, c, 0, &f32) == 0);
  s.amp = AA_BF16;
  CHECK(predict(&sp, &s, c, 0, &b16) == 0);
  CHECK(b16.forward_s > f32.forward_s && b16.backward_s > f32.backward_s &&
        b16.optimizer_s > f32.optimizer_s);
  aa_calib_op_t ops[64];
  size_t n = aa_predict_ops(&sp.arch, &s, 0, 0, ops, 64), casts = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK(ops[i].dtype == AA_F32);
    casts += ops[i].shape.op == AA_OP_CAST;
  }
  CHECK(casts > 0);
  n = aa_predict_ops(&sp.arch, &s, 0, 1, ops, 64);
  for (size_t i = 0; i < n; i++) {
    CHECK(ops[i].shape.op != AA_OP_CAST);
    CHECK(ops[i].dtype == (ops[i].shape.op == AA_OP_ADAMW ? AA_F32 : AA_BF16));
  }
  free(c);
}

/* Every strategy the search space holds for pools of 1..8 devices finds
 * every op measured, on CPUs and on GPUs. */
AA_TEST(the_wanted_shapes_cover_every_strategy_of_the_space) {
  const aa_model_spec_t models[2] = {model(), llama()};
  for (int k = 0; k < 4; k++) {
    const aa_model_spec_t sp = models[k / 2];
    const int cuda = k % 2;
    aa_calib_t *c = calib(&sp, cuda, 1);
    for (int d = 1; d <= 8; d++) {
      aa_space_pool_t pool = {
          .devices = d, .global_batch = sp.train.global_batch, .cuda = cuda, .arch = &sp.arch};
      size_t n = aa_space_enumerate(NULL, NULL, 0, &pool), checked = 0;
      aa_strategy_t *all = malloc(n * sizeof *all);
      aa_space_enumerate(all, NULL, n, &pool);
      for (size_t i = 0; i < n; i++) {
        if (aa_strategy_resolve(&all[i], &sp, 0)) continue;
        aa_predict_t p;
        aa_predict_pool_t pp = {.devices = d};
        int rc = aa_predict(&sp, &all[i], c, &pp, &p);
        char key[AA_STRATEGY_KEY_MAX];
        aa_strategy_key(&all[i], key);
        CHECK_MSG(rc == 0, "%s: %s", key, aa_last_error());
        CHECK_MSG(rc != 0 || p.ops_estimated == 0, "%s: %d ops estimated", key, p.ops_estimated);
        checked++;
      }
      CHECK(checked > 0);
      free(all);
    }
    free(c);
  }
}

/* Rank 0's distinct op shapes of s on a CPU are exactly want[0..n), in
 * order, all fp32. */
static void check_ops(const aa_model_spec_t *sp, const aa_strategy_t *s, const aa_op_shape_t *want,
                      size_t nw) {
  aa_calib_op_t ops[64];
  const size_t n = aa_predict_ops(&sp->arch, s, 0, 0, ops, 64);
  CHECK_MSG(n == nw, "%zu ops", n);
  for (size_t i = 0; i < n && i < nw; i++)
    CHECK_MSG(aa_op_shape_equal(&ops[i].shape, &want[i]) && ops[i].dtype == AA_F32,
              "ops[%zu]: %s [%lld,%lld,%lld,%lld]", i, aa_op_kind_name(ops[i].shape.op),
              (long long)ops[i].shape.d[0], (long long)ops[i].shape.d[1], (long long)ops[i].shape.d[2],
              (long long)ops[i].shape.d[3]);
}

/* One llama rank, micro-batches of B = 4 (N = 64 tokens, 2 a step), its
 * ops by hand from engine/model.c: per block RMSNorm (64, 32) twice, the
 * qkv GEMM (64, 32, 64), RoPE and grouped-query attention on S = B·NKV =
 * 8 groups of T = 16 positions, G = 2 query heads of HS = 8 (RoPE
 * rotating (G + 1)·HS = 24 elements a position, attention S·T²·G·HS), the
 * projection (64, 32, 32), two residual adds of 2,048, gate|up (64, 32,
 * 128), SwiGLU (64, 64) and down (64, 64, 32); the embedding (64, 32), the
 * final RMSNorm, the head (64, 32, 80) and the cross-entropy (64, 80);
 * AdamW over 80·32 + 4 x (2·32 + 64·32 + 32² + 3·64·32) + 81·32 = 42,272
 * parameters. No LayerNorm, GELU or gpt2 attention. */
AA_TEST(a_llama_rank_step_is_its_ops_worked_out_by_hand) {
  aa_model_spec_t sp = llama();
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 1, 1, 1, 4);
  const aa_op_shape_t want[] = {
      {AA_OP_RMSNORM, {64, 32, 0, 0}},  {AA_OP_MATMUL, {64, 32, 64, 0}}, {AA_OP_ROPE, {8, 16, 2, 8}},
      {AA_OP_GQA, {8, 16, 2, 8}},       {AA_OP_MATMUL, {64, 32, 32, 0}}, {AA_OP_RESIDUAL, {2048, 0, 0, 0}},
      {AA_OP_MATMUL, {64, 32, 128, 0}}, {AA_OP_SWIGLU, {64, 64, 0, 0}},  {AA_OP_MATMUL, {64, 64, 32, 0}},
      {AA_OP_ENCODER, {64, 32, 0, 0}},  {AA_OP_MATMUL, {64, 32, 80, 0}}, {AA_OP_XENT, {64, 80, 0, 0}},
      {AA_OP_ADAMW, {42272, 0, 0, 0}}};
  check_ops(&sp, &s, want, sizeof want / sizeof want[0]);
  aa_predict_t p;
  CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
  const double B = 4, T = 16, N = B * T, C = 32, F = 64, V = 80, L = 4, m = 2, QKV = 64, S = 8, G = 2, HS = 8;
  const double block = 2 * N * C + 2 * N * C * QKV + S * T * (G + 1) * HS + S * T * T * G * HS +
                       2 * N * C * C + 2 * N * C + 2 * N * C * 2 * F + N * F + 2 * N * F * C;
  const double work = L * block + N * C + N * C + 2 * N * C * V + N * V;
  const double params = V * C + L * (2 * C + QKV * C + C * C + 3 * F * C) + (V + 1) * C;
  CHECK(params == 42272);
  CHECK_NEAR(p.forward_s / (m * K_OP * work), 1, 1e-12);
  CHECK_NEAR(p.backward_s / (m * 2 * K_OP * work), 1, 1e-12);
  CHECK_NEAR(p.optimizer_s / (K_ADAMW * params), 1, 1e-12);
  CHECK(p.ops_estimated == 0);
  /* Selective checkpointing recomputes SwiGLU (N·F a block), full the
   * whole block. */
  aa_predict_t sel, full;
  s.ckpt = AA_CKPT_SELECTIVE;
  CHECK(predict(&sp, &s, c, 0, &sel) == 0);
  s.ckpt = AA_CKPT_FULL;
  CHECK(predict(&sp, &s, c, 0, &full) == 0);
  CHECK(sel.forward_s == p.forward_s && full.forward_s == p.forward_s);
  CHECK_NEAR((sel.backward_s - p.backward_s) / (m * L * N * F * K_OP), 1, 1e-9);
  CHECK_NEAR((full.backward_s - p.backward_s) / (m * L * block * K_OP), 1, 1e-9);
  free(c);
}

/* The llama above with MoE layers: E experts top-k of width Fe, S
 * shared, every `every` block. */
static aa_model_spec_t moe(int E, int k, int Fe, int S, int every) {
  aa_model_spec_t sp = llama();
  sp.arch.moe = (aa_moe_t){.experts = E, .top_k = k, .d_ff_expert = Fe, .shared_experts = S, .every = every};
  return sp;
}

/* Whether rank 0 of s on a CPU runs an op of shape want. */
static bool has_op(const aa_model_spec_t *sp, const aa_strategy_t *s, aa_op_shape_t want) {
  aa_calib_op_t ops[64];
  const size_t n = aa_predict_ops(&sp->arch, s, 0, 0, ops, 64);
  for (size_t i = 0; i < n && i < 64; i++)
    if (aa_op_shape_equal(&ops[i].shape, &want)) return true;
  return false;
}

/* The llama rank above (N = 64 tokens a micro-batch, 2 a step) with
 * blocks 0 and 2 MoE layers (every 2) of E = 4 experts top-2 of width Fe =
 * 24 and one shared expert, blocks 1 and 3 dense. Its ops by hand: a
 * dense block's as above; an MoE block's attention half the same, then
 * the router GEMM (64, 32, 4), its softmax and top-k as a cross-entropy
 * (64, 4), permute and unpermute as a residual of the N k = 128 routed
 * rows' 128·32 = 4,096 elements (twice forward, once backward), each of
 * the 4 experts at the even load of 64·2 / 4 = 32 rows (32, 32, 48),
 * SwiGLU (32, 24) and (32, 24, 32), and the shared expert at all 64 rows
 * (64, 32, 48), (64, 24) and (64, 24, 32); AdamW over 80·32 + 2 x 9,280 +
 * 2 x (2·32 + 64·32 + 32² + 4·32 + 5·3·24·32 = 14,784) + 81·32 = 53,280
 * parameters. The step's time is those ops' work x K_OP (forward) and
 * 2 K_OP (backward). A capacity factor of 0.5 caps each expert at
 * ceil(0.5·128 / 4) = 16 rows. */
AA_TEST(an_moe_rank_step_is_its_ops_worked_out_by_hand) {
  aa_model_spec_t sp = moe(4, 2, 24, 1, 2);
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 1, 1, 1, 4);
  const aa_op_shape_t want[] = {
      {AA_OP_RMSNORM, {64, 32, 0, 0}},  {AA_OP_MATMUL, {64, 32, 64, 0}}, {AA_OP_ROPE, {8, 16, 2, 8}},
      {AA_OP_GQA, {8, 16, 2, 8}},       {AA_OP_MATMUL, {64, 32, 32, 0}}, {AA_OP_RESIDUAL, {2048, 0, 0, 0}},
      {AA_OP_MATMUL, {64, 32, 128, 0}}, {AA_OP_SWIGLU, {64, 64, 0, 0}},  {AA_OP_MATMUL, {64, 64, 32, 0}},
      {AA_OP_MATMUL, {64, 32, 4, 0}},   {AA_OP_XENT, {64, 4, 0, 0}},     {AA_OP_RESIDUAL, {4096, 0, 0, 0}},
      {AA_OP_MATMUL, {32, 32, 48, 0}},  {AA_OP_SWIGLU, {32, 24, 0, 0}},  {AA_OP_MATMUL, {32, 24, 32, 0}},
      {AA_OP_MATMUL, {64, 32, 48, 0}},  {AA_OP_SWIGLU, {64, 24, 0, 0}},  {AA_OP_MATMUL, {64, 24, 32, 0}},
      {AA_OP_ENCODER, {64, 32, 0, 0}},  {AA_OP_MATMUL, {64, 32, 80, 0}}, {AA_OP_XENT, {64, 80, 0, 0}},
      {AA_OP_ADAMW, {53280, 0, 0, 0}}};
  check_ops(&sp, &s, want, sizeof want / sizeof want[0]);
  aa_predict_t p;
  CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
  const double N = 64, C = 32, F = 64, V = 80, m = 2, QKV = 64, S = 8, G = 2, HS = 8, E = 4, Ne = 32, Fe = 24;
  const double attn =
      2 * N * C + 2 * N * C * QKV + S * 16 * (G + 1) * HS + S * 16 * 16 * G * HS + 2 * N * C * C + 2 * N * C;
  const double dense = attn + 2 * N * C * 2 * F + N * F + 2 * N * F * C;
  const double expert = 2 * Ne * C * 2 * Fe + Ne * Fe + 2 * Ne * Fe * C,
               shared = 2 * N * C * 2 * Fe + N * Fe + 2 * N * Fe * C;
  const double routed = 2 * N * C * E + N * E, permute = E * Ne * C;
  const double ends = N * C + N * C + 2 * N * C * V + N * V;
  const double fwd = 2 * dense + 2 * (attn + routed + 2 * permute + E * expert + shared) + ends;
  const double bwd = 2 * dense + 2 * (attn + routed + permute + E * expert + shared) + ends;
  CHECK_NEAR(p.forward_s / (m * K_OP * fwd), 1, 1e-12);
  CHECK_NEAR(p.backward_s / (m * 2 * K_OP * bwd), 1, 1e-12);
  CHECK_NEAR(p.optimizer_s / (K_ADAMW * 53280), 1, 1e-12);
  CHECK(p.ops_estimated == 0);
  /* Selective checkpointing recomputes the dense blocks' SwiGLU only (an
   * MoE block keeps its buffers). */
  aa_predict_t sel;
  s.ckpt = AA_CKPT_SELECTIVE;
  CHECK(predict(&sp, &s, c, 0, &sel) == 0);
  CHECK_NEAR((sel.backward_s - p.backward_s) / (m * 2 * N * F * K_OP), 1, 1e-9);
  free(c);
  /* The capacity. */
  sp.arch.moe.capacity_factor = 0.5f;
  s = strat(&sp, 1, 1, 1, 4);
  CHECK(has_op(&sp, &s, (aa_op_shape_t){AA_OP_MATMUL, {16, 32, 48, 0}}) &&
        has_op(&sp, &s, (aa_op_shape_t){AA_OP_RESIDUAL, {4 * 16 * 32, 0, 0, 0}}) &&
        !has_op(&sp, &s, (aa_op_shape_t){AA_OP_MATMUL, {32, 32, 48, 0}}));
}

/* Expert parallelism on the MoE llama above at dp 2, micro-batch 4 (N =
 * 64 tokens a rank, one micro-batch a step), ep 2: a rank computes its 2
 * experts at 2·32 = 64 rows each, the (64, 32, 48), (64, 24) and (64, 24,
 * 32) shapes in place of 4 experts' at 32, the same work, so (this
 * calibration's time being the work) the same forward and backward as at
 * ep 1 (the router still over all 4 experts) at even routing (a load
 * imbalance of 1; the next test varies it); the expert group's all-to-alls (cost.h, worked by hand in
 * tests/test_cost.c) timed on its all-to-all line as expert_comm_s, the
 * data group's all-reduces in data_comm_s (the expert-data group is one
 * rank: the 2 ranks hold different experts).
 * ZeRO 1-3 with expert parallelism: AdamW over the rank's shard, by hand
 * the dense pieces' halves (the 2 replicas share them) and the expert
 * slices whole (their expert-data group is the rank alone): wte 2,560 / 2
 * + per MoE block (head 3,264 / 2 + experts 4,608 + shared 2,304 / 2) +
 * per dense block 9,280 / 2 + lnf|head 2,592 / 2 = 1,280 + 2 x 7,392 + 2
 * x 4,640 + 1,296 = 26,640; the data group reduce-scatters the 8 dense
 * pieces (and all-gathers them at stages 1-2), the expert-data group
 * moves nothing. */
AA_TEST(expert_parallelism_computes_the_local_experts_and_times_the_all_to_alls) {
  aa_model_spec_t sp = moe(4, 2, 24, 1, 2);
  aa_calib_t *c = calib(&sp, 0, 1);
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_ALL_TO_ALL, 2, LAT * (AA_COST_ALL_TO_ALL + 1), BW * 2};
  aa_strategy_t s1 = strat(&sp, 2, 1, 1, 4), s2 = s1;
  s2.ep = 2;
  CHECK_MSG(aa_strategy_resolve(&s2, &sp, 0) == 0, "%s", aa_last_error());
  CHECK(has_op(&sp, &s2, (aa_op_shape_t){AA_OP_MATMUL, {64, 32, 48, 0}}) &&
        !has_op(&sp, &s2, (aa_op_shape_t){AA_OP_MATMUL, {32, 32, 48, 0}}) &&
        has_op(&sp, &s1, (aa_op_shape_t){AA_OP_MATMUL, {32, 32, 48, 0}}));
  aa_predict_t p1, p2;
  CHECK_MSG(predict(&sp, &s1, c, 0, &p1) == 0, "%s", aa_last_error());
  CHECK_MSG(predict_imb(&sp, &s2, c, 0, 1, &p2) == 0, "%s", aa_last_error());
  CHECK(p2.moe_imbalance == 1);
  CHECK_NEAR(p2.forward_s / p1.forward_s, 1, 1e-12);
  CHECK_NEAR(p2.backward_s / p1.backward_s, 1, 1e-12);
  /* The calibration measured the expert-parallel shapes too
   * (aa_predict_wanted), AdamW over the rank's 53,280 - 2 x 2 x 2,304 =
   * 44,064 parameters among them; the even rows' are the shared expert's. */
  CHECK(p2.ops_estimated == 0);
  CHECK(p1.expert_comm_s == 0);
  aa_cost_comm_t cc;
  aa_cost_comm(&sp.arch, &s2, aa_strategy_accum_steps(&s2, &sp), &cc);
  CHECK(cc.expert.kind[AA_COST_ALL_TO_ALL].calls > 0);
  CHECK(p2.expert_comm_s > 0);
  CHECK_NEAR(p2.expert_comm_s / comm(&cc.expert, 1), 1, 1e-12);
  CHECK_NEAR(p2.data_comm_s / (comm(&cc.data, 1) + comm(&cc.expert_data, 1)), 1, 1e-12);
  for (int z = 1; z <= 3; z++) {
    aa_strategy_t s3 = s2;
    s3.zero = z;
    CHECK_MSG(aa_strategy_resolve(&s3, &sp, 0) == 0, "%s", aa_last_error());
    CHECK_MSG(has_op(&sp, &s3, (aa_op_shape_t){AA_OP_ADAMW, {26640, 0, 0, 0}}), "zero %d", z);
    aa_predict_t q;
    CHECK_MSG(predict(&sp, &s3, c, 0, &q) == 0, "zero %d: %s", z, aa_last_error());
    CHECK(q.expert_comm_s > 0 && q.data_comm_s > 0);
    aa_cost_comm(&sp.arch, &s3, aa_strategy_accum_steps(&s3, &sp), &cc);
    CHECK_MSG(cc.data.kind[AA_COST_REDUCE_SCATTER].calls == 8 &&
                  (z == 3 || cc.data.kind[AA_COST_ALL_GATHER].calls == 8) && cc.expert_data.bytes == 0,
              "zero %d: %llu reduce-scatters", z,
              (unsigned long long)cc.data.kind[AA_COST_REDUCE_SCATTER].calls);
  }
  free(c);
}

/* Load imbalance (predict.h moe_imbalance) on the expert-parallel rank
 * above (dp 2, ep 2, one micro-batch of N = 64 tokens, 2 MoE blocks of 2
 * local experts, 64 rows each at even routing): at factor f the busiest
 * rank computes each local expert at ceil(64 f) rows, so its forward
 * grows by 2 blocks x 2 experts x (ceil(64 f) - 64) rows x the expert
 * work a row (2·C·2Fe + Fe + 2·Fe·C = 4,632) x K_OP, its backward by
 * twice that, and its all-to-alls carry f times the even bytes. Without
 * a measured factor the default is Switch Transformer's 1.25 (80 rows);
 * a factor past ep is capped at ep; at ep 1 it changes nothing. A run's
 * measured factor is its most tokens an expert got over N·k / E = 32. */
AA_TEST(moe_load_imbalance_slows_the_busiest_expert_rank) {
  aa_model_spec_t sp = moe(4, 2, 24, 1, 2);
  aa_calib_t *c = calib(&sp, 0, 1);
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_ALL_TO_ALL, 2, LAT * (AA_COST_ALL_TO_ALL + 1), BW * 2};
  aa_strategy_t s1 = strat(&sp, 2, 1, 1, 4), s2 = s1;
  s2.ep = 2;
  CHECK_MSG(aa_strategy_resolve(&s2, &sp, 0) == 0, "%s", aa_last_error());
  CHECK(AA_PREDICT_MOE_IMBALANCE == 1.25);
  CHECK(has_op(&sp, &s2, (aa_op_shape_t){AA_OP_MATMUL, {80, 32, 48, 0}})); /* the calibration measures it */
  aa_predict_t even, p, q;
  CHECK_MSG(predict_imb(&sp, &s2, c, 0, 1, &even) == 0, "%s", aa_last_error());
  aa_cost_comm_t cc;
  aa_cost_comm(&sp.arch, &s2, 1, &cc);
  const uint64_t a2a = cc.expert.kind[AA_COST_ALL_TO_ALL].bytes;
  const double fs[] = {0, 1.1, 1.25, 1.5, 2, 3}, rows[] = {80, 71, 80, 96, 128, 128};
  double last = even.step_s;
  for (int i = 0; i < 6; i++) {
    CHECK_MSG(predict_imb(&sp, &s2, c, 0, fs[i], &p) == 0, "%s", aa_last_error());
    const double f = fs[i] == 0 ? 1.25 : fs[i] > 2 ? 2 : fs[i];
    CHECK_MSG(p.moe_imbalance == f, "f %g: timed at %g", fs[i], p.moe_imbalance);
    const double extra = 2 * 2 * (rows[i] - 64) * 4632 * K_OP;
    CHECK_NEAR((p.forward_s - even.forward_s) / extra, 1, 1e-9);
    CHECK_NEAR((p.backward_s - even.backward_s) / (2 * extra), 1, 1e-9);
    cc.expert.kind[AA_COST_ALL_TO_ALL].bytes = (uint64_t)llround((double)a2a * f);
    CHECK_NEAR(p.expert_comm_s / comm(&cc.expert, 1), 1, 1e-12);
    if (fs[i] >= 1.25) {
      CHECK_MSG(p.step_s > last || fs[i] > 2, "f %g: step %g not above %g", fs[i], p.step_s, last);
      CHECK(fs[i] <= 2 || p.step_s == last); /* capped at ep */
      last = p.step_s;
    }
  }
  CHECK_MSG(predict_imb(&sp, &s1, c, 0, 2, &p) == 0 && predict_imb(&sp, &s1, c, 0, 1, &q) == 0, "%s",
            aa_last_error());
  CHECK(p.step_s == q.step_s && p.moe_imbalance == 1);
  /* Measured: the most tokens an expert got from one rank's micro-batch. */
  CHECK(aa_predict_imbalance(&sp.arch, &s2, 56) == 56.0 / 32);
  CHECK(aa_predict_imbalance(&sp.arch, &s1, 56) == 56.0 / 32);
  /* Under cp the count is the context group's, over the whole sequences
   * (engine/model.c sums it): cp 2 measures the same imbalance. */
  aa_strategy_t s3 = s2;
  s3.degree[AA_AXIS_CONTEXT] = 2;
  CHECK(aa_predict_imbalance(&sp.arch, &s3, 56) == 56.0 / 32);
  CHECK(aa_predict_imbalance(&sp.arch, &s2, 20) == 1);
  CHECK(aa_predict_imbalance(&sp.arch, &s2, 0) == 0);
  const aa_model_spec_t dense = llama();
  aa_strategy_t sd = strat(&dense, 2, 1, 1, 4);
  CHECK(aa_predict_imbalance(&dense.arch, &sd, 56) == 0);
  free(c);
}

/* An MoE model of E experts top-k of width Fe against the dense llama of
 * the same active parameters (d_ff = k Fe): the same attention, and, where
 * an op's time is its work (this calibration), expert GEMMs and SwiGLU
 * whose E·(N k / E) rows do the dense MLP's work exactly. So the MoE step
 * is slower by exactly the router (its GEMM 2 N C E and its softmax N E)
 * and permute/unpermute (N k C elements, twice forward, once backward) a
 * layer: for E = 4, k = 2, Fe = 32 against F = 64, and for E = k = 1
 * (Fe = F), whose one expert is the dense MLP's very GEMMs, on any
 * calibration. */
AA_TEST(an_moe_model_costs_its_dense_twin_plus_the_router_and_permutes) {
  const aa_model_spec_t dense = llama();
  const int cases[2][3] = {{4, 2, 32}, {1, 1, 64}};
  for (int i = 0; i < 2; i++) {
    const aa_model_spec_t sp = moe(cases[i][0], cases[i][1], cases[i][2], 0, 1);
    CHECK(aa_arch_active_param_count(&sp.arch) == aa_arch_param_count(&dense.arch) + 4 * 32 * cases[i][0]);
    aa_calib_t *c = calib(&sp, 0, 0), *cd = calib(&dense, 0, 0);
    const aa_strategy_t s = strat(&sp, 1, 1, 1, 4), sd = strat(&dense, 1, 1, 1, 4);
    aa_predict_t p, pd;
    CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0 && predict(&dense, &sd, cd, 0, &pd) == 0, "%s",
              aa_last_error());
    const double N = 64, C = 32, L = 4, m = 2, E = cases[i][0], k = cases[i][1];
    const double router = 2 * N * C * E + N * E, permute = N * k * C;
    CHECK_NEAR((p.forward_s - pd.forward_s) / (m * L * K_OP * (router + 2 * permute)), 1, 1e-9);
    CHECK_NEAR((p.backward_s - pd.backward_s) / (m * L * 2 * K_OP * (router + permute)), 1, 1e-9);
    free(c);
    free(cd);
  }
}

/* bf16 storage on a CPU, the llama rank above: the casts engine/model.c
 * makes, counted by hand (a round costs its elements, a widen twice that:
 * the calibration's backward). Per block forward: 6 rounds of the
 * residual stream (N·C = 2,048), qkv twice (before and after RoPE, N·QKV =
 * 4,096), the attention output (2,048), gate|up (N·2F = 8,192) and SwiGLU
 * (N·F = 4,096), and its 9,280 weights widened; the embedding's and the final norm's outputs rounded. Per
 * block backward: weights and input widened, the 3 kept C-wide fields,
 * qkv, the attention output, gate|up and SwiGLU's output widened; dSwiGLU,
 * dgate|up, the 4 residual gradients, datty and dqkv twice rounded; the
 * head: the logits' gradient and two C-wide ones rounded, lnf's input
 * widened. Per step: the parameters rounded, wte and lnf.w|head.w
 * widened. */
AA_TEST(llama_16bit_storage_on_a_cpu_casts_its_own_widths) {
  aa_model_spec_t sp = llama();
  aa_calib_t *c = calib(&sp, 0, 0);
  aa_strategy_t s = strat(&sp, 1, 1, 1, 4);
  aa_predict_t f32, b16;
  CHECK(predict(&sp, &s, c, 0, &f32) == 0);
  s.amp = AA_BF16;
  CHECK_MSG(predict(&sp, &s, c, 0, &b16) == 0, "%s", aa_last_error());
  const double N = 64, C = 32, F = 64, V = 80, L = 4, m = 2, QKV = 64;
  const double NC = N * C, blk = 2 * C + QKV * C + C * C + 3 * F * C;
  const double fwd = L * (6 * NC + 2 * N * QKV + NC + 2 * N * F + N * F + 2 * blk) + 2 * NC;
  const double bwd = L * (2 * blk + 2 * NC + 2 * (3 * NC + N * QKV + NC + 2 * N * F + N * F)) +
                     L * (N * F + 2 * N * F + 4 * NC + NC + 2 * N * QKV) + N * V + 2 * NC + 2 * NC;
  const double params = V * C + L * blk + (V + 1) * C;
  CHECK_NEAR((b16.forward_s - f32.forward_s) / (m * K_OP * fwd), 1, 1e-12);
  CHECK_NEAR((b16.backward_s - f32.backward_s) / (m * K_OP * bwd), 1, 1e-12);
  CHECK_NEAR((b16.optimizer_s - f32.optimizer_s) / (K_OP * (params + 2 * V * C + 2 * (V + 1) * C)), 1, 1e-12);
  free(c);
}

/* A llama cut in two: no embedding group (an untied head), so the data
 * group's collectives are all that follows the schedule; gpt2 cut the
 * same way adds its tied copies' all-reduce. */
AA_TEST(a_llama_pipeline_has_no_embedding_group) {
  const aa_model_spec_t models[2] = {llama(), model()};
  for (int k = 0; k < 2; k++) {
    aa_calib_t *c = calib(&models[k], 0, 1);
    aa_strategy_t s = strat(&models[k], 2, 1, 2, 2);
    aa_predict_t p;
    CHECK_MSG(predict(&models[k], &s, c, 0, &p) == 0, "%s", aa_last_error());
    aa_cost_comm_t cc;
    aa_cost_comm_stage(&models[k].arch, &s, aa_strategy_accum_steps(&s, &models[k]), p.stage, &cc);
    CHECK(k == 0 ? cc.embedding.ranks == 1 && cc.embedding.bytes == 0
                 : cc.embedding.ranks == 2 && cc.embedding.bytes > 0);
    CHECK_NEAR(p.data_comm_s / (comm(&cc.data, 1) + comm(&cc.embedding, 1)), 1, 1e-12);
    free(c);
  }
}

/* Context parallelism, a gpt2 rank of cp 2 with micro-batches of B = 4 (2
 * a step): N = 4 x 16 / 2 = 32 tokens, chunks of Tc = 4. Its ops by hand
 * from engine/model.c: per block the per-token ops at N = 32 (LayerNorm
 * (32, 32) twice, qkv (32, 32, 96), the projection (32, 32, 32), two
 * residual adds of 1,024, fc (32, 32, 64), GELU of 2,048, fcproj (32, 64,
 * 32)), and in attention's place the ring's blocks at S = B·NKV = 16
 * (sequence, head) pairs, G = 1, HS = 8: 2 diagonal blocks and 2 cp - 1 =
 * 3 full ones, each S·G·Tc²·HS = 2,048 of work; each ring packing the
 * rank's keys and values (2·B·Tc·2 KVl = 2,048 floats: half a residual
 * backward), once in the forward and once in the backward, which also
 * adds the returning key/value gradient (as much again); the embedding
 * twice at 16 tokens; the final LayerNorm, the head (32, 32, 64) and the
 * cross-entropy (32, 64). Each ring step a send and a receive of 2,048
 * floats: 3 a block per micro-batch (1 forward, 2 backward), 24 a step.
 * AdamW over all 36,800 parameters (ZeRO 0). */
/* The one op of kind k among rank 0's ops of s (on a CPU), its shape in
 * *out; false when it has none. */
static bool find_op(const aa_model_spec_t *sp, const aa_strategy_t *s, aa_op_kind_t k, aa_op_shape_t *out) {
  aa_calib_op_t ops[64];
  const size_t n = aa_predict_ops(&sp->arch, s, 0, 0, ops, 64);
  for (size_t i = 0; i < n && i < 64; i++)
    if (ops[i].shape.op == k) {
      *out = ops[i].shape;
      return true;
    }
  return false;
}

/* A 131,072-token llama with Llama 3 405B's widths (two blocks): the
 * terms that grow with seq_len squared, attention's work and FLOPs and the
 * model's FLOPs, are the doubles worked out here (131,072^2 alone wraps a
 * 32-bit int), at tp 8 with cp 1 (grouped-query attention over the whole
 * sequence: S = B NKV = 1, G = 16, HS = 128) and cp 16 (the ring's blocks
 * of Tc = 4,096 tokens), and a rank's tokens are B T exactly. */
AA_TEST(a_128k_token_sequence_has_its_quadratic_terms_without_overflow) {
  aa_model_spec_t sp = llama();
  sp.arch.n_layer = 2, sp.arch.n_head = 128, sp.arch.n_kv_head = 8, sp.arch.d_model = 16384;
  sp.arch.d_ff = 53248, sp.arch.seq_len = 131072, sp.arch.vocab_size = 128256;
  sp.train.global_batch = 16;
  const double T = 131072, Tc = 4096, G = 16, HS = 128;
  aa_strategy_t s = strat_cp(&sp, 1, 8, 1, 1, 2), ring = strat_cp(&sp, 1, 8, 1, 16, 2);
  CHECK(aa_sizes_rank_tokens(&sp.arch, &s) == 2 * 131072LL &&
        aa_sizes_rank_tokens(&sp.arch, &ring) == 2 * 8192LL);
  aa_op_shape_t gqa, blk;
  CHECK(find_op(&sp, &s, AA_OP_GQA, &gqa) && find_op(&sp, &ring, AA_OP_RING_BLOCK, &blk));
  CHECK(gqa.d[0] == 2 && gqa.d[1] == 131072 && gqa.d[2] == 16 && gqa.d[3] == 128);
  CHECK(blk.d[0] == 2 && blk.d[1] == 4096 && blk.d[2] == 16 && blk.d[3] == 128);
  /* Powers of two: the products are exact in a double. */
  CHECK(aa_op_work(&gqa) == 2 * G * T * T * HS && aa_op_work(&blk) == 2 * G * Tc * Tc * HS);
  double fl[2], by[2];
  aa_roofline_op_cost(&gqa, AA_BF16, fl, by);
  CHECK(fl[0] == 2 * 2 * G * T * T * HS && fl[1] == 2.5 * fl[0] && by[0] == 2 * 2 * T * HS * (2 * G + 2));
  aa_roofline_op_cost(&blk, AA_F32, fl, by);
  CHECK(fl[0] == 4 * 2 * G * Tc * Tc * HS);
  /* Per token: each block's GEMMs (q|k|v C (C + 2 KV) with KV = 8 x 128,
   * the projection C^2, gate|up 2 F C, down F C) and 4 T C of attention;
   * the head 2 C V; three passes, over global_batch x T tokens. */
  const double C = 16384, F = 53248, V = 128256, KV = 1024;
  const double block = 2 * (C * (C + 2 * KV) + C * C + 2 * F * C + F * C) + 4 * T * C;
  const double want = 16 * T * (3 * block * 2 + 3 * 2 * C * V), got = aa_plan_model_flops(&sp, false);
  CHECK_MSG(fabs(got - want) <= 1e-12 * want, "model FLOPs %.17g, by hand %.17g", got, want);
}

AA_TEST(a_context_parallel_rank_step_is_its_ops_worked_out_by_hand) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  aa_strategy_t s = strat_cp(&sp, 1, 1, 1, 2, 4), one = strat(&sp, 1, 1, 1, 4);
  add_ops(c, &sp, &s);
  const aa_op_shape_t want[] = {
      {AA_OP_LAYERNORM, {32, 32, 0, 0}}, {AA_OP_MATMUL, {32, 32, 96, 0}},   {AA_OP_RING_DIAG, {16, 4, 1, 8}},
      {AA_OP_RING_BLOCK, {16, 4, 1, 8}}, {AA_OP_RESIDUAL, {2048, 0, 0, 0}}, {AA_OP_MATMUL, {32, 32, 32, 0}},
      {AA_OP_RESIDUAL, {1024, 0, 0, 0}}, {AA_OP_MATMUL, {32, 32, 64, 0}},   {AA_OP_GELU, {2048, 0, 0, 0}},
      {AA_OP_MATMUL, {32, 64, 32, 0}},   {AA_OP_ENCODER, {16, 32, 0, 0}},   {AA_OP_XENT, {32, 64, 0, 0}},
      {AA_OP_ADAMW, {36800, 0, 0, 0}}};
  check_ops(&sp, &s, want, sizeof want / sizeof want[0]);
  aa_predict_t p, p1;
  CHECK_MSG(predict(&sp, &s, c, 0, &p) == 0, "%s", aa_last_error());
  CHECK_MSG(predict(&sp, &one, c, 0, &p1) == 0, "%s", aa_last_error());
  const double N = 32, C = 32, F = 64, V = 64, L = 4, m = 2, ring = 5 * 2048, acc = 2048;
  const double block = 2 * N * C + 2 * N * C * 3 * C + ring + 2 * N * C * C + 2 * N * C + 2 * N * C * F +
                       N * F + 2 * N * F * C;
  const double work = L * block + N * C + N * C + 2 * N * C * V + N * V;
  CHECK_NEAR(p.forward_s / (m * K_OP * work + m * L * K_OP * acc), 1, 1e-12);
  CHECK_NEAR(p.backward_s / (m * 2 * K_OP * work + m * 2 * L * K_OP * acc), 1, 1e-12);
  CHECK(p.ops_estimated == 0 && p.links_estimated == 0);
  /* The ring's steps, on the send line at 2 ranks, inside the step. */
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &s, 2, 0, &cc);
  CHECK(cc.context.kind[AA_COST_SEND].calls == 24 && cc.context.kind[AA_COST_RECV].elems == 24 * 2048);
  CHECK(p.context_comm_s > 0);
  CHECK_NEAR(p.context_comm_s / comm(&cc.context, 1), 1, 1e-12);
  /* The gradients are all-reduced over the 2 context ranks (the data group
   * of dp x cp), the optimizer updates all the parameters (ZeRO 0). */
  CHECK(cc.data.ranks == 2 && p.data_comm_s > 0);
  CHECK_NEAR(p.data_comm_s / comm(&cc.data, 1), 1, 1e-12);
  CHECK_NEAR(p.optimizer_s / p1.optimizer_s, 1, 1e-12);
  /* Against cp 1 on one rank: half the per-token work a rank, plus the
   * ring and the gradients' all-reduce. */
  CHECK(p.forward_s < p1.forward_s && p.backward_s < p1.backward_s);
  CHECK(p1.context_comm_s == 0 && p1.data_comm_s == 0);
  CHECK_NEAR(p.step_s, p.forward_s + p.backward_s + p.context_comm_s + p.optimizer_s + p.data_comm_s, 1e-15);
  free(c);
}

/* Full checkpointing runs each block's forward ring again in the
 * backward: its ring blocks and cp - 1 more steps a block. The llama
 * family's ring folds its grouped-query heads as GQA does (S = B·NKV = 8,
 * G = 2) and RoPE turns each chunk at its place: 2 calls of (8, Tc, 2, 8). */
AA_TEST(a_context_parallel_rank_recomputes_its_ring_and_folds_llama_heads) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1);
  aa_strategy_t s = strat_cp(&sp, 1, 1, 1, 4, 4);
  add_ops(c, &sp, &s);
  aa_predict_t none, full;
  CHECK_MSG(predict(&sp, &s, c, 0, &none) == 0, "%s", aa_last_error());
  s.ckpt = AA_CKPT_FULL;
  add_ops(c, &sp, &s);
  CHECK_MSG(predict(&sp, &s, c, 0, &full) == 0, "%s", aa_last_error());
  /* cp 4, B = 4: N = 16, Tc = 2, S = 16; ring 2 diagonal + 7 blocks of
   * 16 x 4 x 8 = 512, and the recomputed ring's packing of 2·B·Tc·2 KVl =
   * 1,024 floats (half a residual backward: K_OP x 1,024). */
  const double N = 16, C = 32, F = 64, L = 4, m = 2, ring = 9 * 512, pack = 1024;
  const double block = 2 * N * C + 2 * N * C * 3 * C + ring + 2 * N * C * C + 2 * N * C + 2 * N * C * F +
                       N * F + 2 * N * F * C;
  CHECK(full.forward_s == none.forward_s);
  CHECK_NEAR((full.backward_s - none.backward_s) / (m * L * (block + pack) * K_OP), 1, 1e-9);
  aa_cost_comm_t a, b;
  s.ckpt = AA_CKPT_NONE;
  aa_cost_comm_stage(&sp.arch, &s, 2, 0, &a);
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm_stage(&sp.arch, &s, 2, 0, &b);
  CHECK(a.context.kind[AA_COST_SEND].calls == 2 * 4 * 9 && b.context.kind[AA_COST_SEND].calls == 2 * 4 * 12);
  CHECK_NEAR((full.context_comm_s - none.context_comm_s) / (comm(&b.context, 1) - comm(&a.context, 1)), 1,
             1e-12);
  free(c);
  aa_model_spec_t ll = llama();
  c = calib(&ll, 0, 1);
  s = strat_cp(&ll, 1, 1, 1, 2, 4);
  add_ops(c, &ll, &s);
  aa_calib_op_t ops[64];
  const size_t n = aa_predict_ops(&ll.arch, &s, 0, 0, ops, 64);
  const aa_op_shape_t rope = {AA_OP_ROPE, {8, 4, 2, 8}}, diag = {AA_OP_RING_DIAG, {8, 4, 2, 8}},
                      blk = {AA_OP_RING_BLOCK, {8, 4, 2, 8}},
                      acc = {AA_OP_RESIDUAL, {2 * 4 * 4 * 32, 0, 0, 0}};
  int seen = 0;
  for (size_t i = 0; i < n && i < 64; i++) {
    seen += aa_op_shape_equal(&ops[i].shape, &rope) + aa_op_shape_equal(&ops[i].shape, &diag) +
            aa_op_shape_equal(&ops[i].shape, &blk) + aa_op_shape_equal(&ops[i].shape, &acc);
    CHECK(ops[i].shape.op != AA_OP_GQA && ops[i].shape.op != AA_OP_ATTENTION);
  }
  CHECK_MSG(seen == 4, "%d of the llama ring's shapes", seen);
  aa_predict_t p, p1;
  CHECK_MSG(predict(&ll, &s, c, 0, &p) == 0, "%s", aa_last_error());
  aa_strategy_t one = strat(&ll, 1, 1, 1, 4);
  CHECK(predict(&ll, &one, c, 0, &p1) == 0);
  /* RoPE's two calls of Tc rotate what one call of 2 Tc did; the forward
   * ring packs 2·B·Tc·2 KVl = 1,024 floats a block (K_OP x 1,024). */
  const double Nl = 32, Cl = 32, Fl = 64, V = 80, QKV = 64, S = 8, G = 2, HS = 8, Tc = 4;
  const double lblock = 2 * Nl * Cl + 2 * Nl * Cl * QKV + 2 * S * Tc * (G + 1) * HS +
                        5 * S * Tc * Tc * G * HS + 2 * Nl * Cl * Cl + 2 * Nl * Cl + 2 * Nl * Cl * 2 * Fl +
                        Nl * Fl + 2 * Nl * Fl * Cl;
  CHECK_NEAR(p.forward_s /
                 (2 * K_OP * (L * lblock + L * 1024 + Nl * Cl + Nl * Cl + 2 * Nl * Cl * V + Nl * V)),
             1, 1e-12);
  CHECK(p.forward_s < p1.forward_s);
  free(c);
}

/* Across hosts a context group takes the intra-host lines when a host
 * holds whole tensor x context blocks, else the inter-host ones (here
 * 10x the latency, a tenth of the bandwidth): dp 2 x cp 2 on hosts of 2
 * keeps each ring in a host; dp 1 x cp 4 on hosts of 2 cannot. */
AA_TEST(a_context_group_across_hosts_takes_the_lines_of_where_it_sits) {
  aa_model_spec_t sp = model();
  aa_calib_t *c = calib(&sp, 0, 1), *x = slow_inter(c);
  aa_strategy_t in = strat_cp(&sp, 2, 1, 1, 2, 2), out = strat_cp(&sp, 1, 1, 1, 4, 4);
  add_ops(c, &sp, &in);
  add_ops(c, &sp, &out);
  aa_predict_pool_t one = {.devices = 8}, two = {.devices = 8, .host_devices = 2, .inter = x};
  aa_predict_t a1, a2, b1, b2;
  CHECK_MSG(aa_predict(&sp, &in, c, &one, &a1) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_predict(&sp, &in, c, &two, &a2) == 0, "%s", aa_last_error());
  CHECK(a2.across_hosts && a1.context_comm_s > 0);
  CHECK_NEAR(a2.context_comm_s / a1.context_comm_s, 1, 1e-12);
  CHECK(a2.data_comm_s > 5 * a1.data_comm_s);
  CHECK(aa_predict(&sp, &out, c, &one, &b1) == 0 && aa_predict(&sp, &out, c, &two, &b2) == 0);
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &out, aa_strategy_accum_steps(&out, &sp), 0, &cc);
  CHECK_NEAR(b1.context_comm_s / comm(&cc.context, 1), 1, 1e-12);
  double lat = 0, bw = 0; /* the ring's steps on x's send line at 2 ranks */
  for (int k = AA_COST_SEND; k <= AA_COST_RECV; k++) {
    lat += (double)cc.context.kind[k].calls * LAT * (AA_COST_SEND + 1) * 10;
    bw += (double)cc.context.kind[k].bytes / (BW * 2 / 10);
  }
  CHECK_NEAR(b2.context_comm_s / (lat + bw), 1, 1e-12);
  CHECK(a2.links_estimated == 0 && b2.links_estimated == 0);
  /* Without inter-host lines the intra-host ones stand in: the data group
   * and, for cp 4, the context group, counted. */
  two.inter = NULL;
  CHECK(aa_predict(&sp, &in, c, &two, &a2) == 0 && aa_predict(&sp, &out, c, &two, &b2) == 0);
  CHECK(a2.links_estimated == 1 && b2.links_estimated == 2);
  free(x);
  free(c);
  /* At dp 1 the data group of dp x cp ranks is the context group: inside
   * a host with it, while the pipeline crosses (a llama cut in two, cp 2,
   * on hosts of 2: no embedding group to cross). */
  aa_model_spec_t ll = llama();
  c = calib(&ll, 0, 1);
  x = calloc(1, sizeof *x);
  *x = *c;
  x->n_op = 0;
  for (int i = 0; i < x->n_link; i++)
    x->link[i].latency_s *= 10, x->link[i].bytes_per_s /= 10;
  aa_strategy_t pc = strat_cp(&ll, 1, 1, 2, 2, 2);
  add_ops(c, &ll, &pc);
  two.inter = x;
  CHECK_MSG(aa_predict(&ll, &pc, c, &one, &a1) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_predict(&ll, &pc, c, &two, &a2) == 0, "%s", aa_last_error());
  CHECK(a1.data_comm_s > 0 && a1.pipeline_comm_s > 0 && a1.context_comm_s > 0);
  CHECK_NEAR(a2.data_comm_s / a1.data_comm_s, 1, 1e-12);
  CHECK_NEAR(a2.context_comm_s / a1.context_comm_s, 1, 1e-12);
  CHECK(a2.pipeline_comm_s > 5 * a1.pipeline_comm_s);
  free(x);
  free(c);
}

/* The built-in H100 profile (profiles/h100-80gb.json). */
static aa_device_profile_t h100(void) {
  aa_device_profile_t p;
  memset(&p, 0, sizeof p);
  if (aa_profile_find(&p, "h100-80gb")) fprintf(stderr, "the h100-80gb profile: %s\n", aa_last_error());
  return p;
}

/* The bug this guards: a device profile priced the ring's blocks at the
 * fp32 vector peak (67 TFLOP/s on an H100) and the attention they replace
 * at bf16's (989.5), so cp 2 predicted 5 times dp's step on a 32 K-token
 * Mistral-7B-like model (Mixtral-8x7B's dense twin). Here dp 8 (micro-
 * batches of one sequence) against dp 4 x cp 2 (micro-batches of two),
 * bf16, on one node of 8 H100s: the same global batch, the same tokens
 * and GEMM shapes on every rank. With twice the sequences and Tc = T / 4
 * a causal diagonal (2 2S G Tc^2 HS FLOPs forward) is 1/8 of dp's
 * grouped-query attention (2 S G T^2 HS) and a full block 1/4, so the
 * ring's 2 diagonals and 3 blocks are exactly dp's causal square. What
 * differs: the ring's 5 kernels a pass for 1 (6.6 us floors), RoPE in two
 * calls, the keys and values packed and their gradients added (memory-
 * bound): under 1 % here, so the compute within 2 %. The step adds the
 * ring's transfers, not overlapped (engine/model.c ring_pass): 3 passes a
 * block, each sending and receiving the rank's keys and values (2 N KV
 * floats, 268 MB), over NVLink at 0.8 x 450 GB/s: about 9 ms against 0.3 s
 * of compute, so the step within 8 %. Attention is over half the FLOPs
 * here (4 T C a token against 2 x 6.9 G of weights), so pricing the ring
 * apart from the attention it replaces (as fp32 did: 6.8 times dp's
 * compute) fails both bounds. */
AA_TEST(a_profile_prices_context_parallel_attention_as_the_attention_it_splits) {
  aa_model_spec_t sp = llama();
  sp.arch.n_layer = 2, sp.arch.n_head = 32, sp.arch.n_kv_head = 8, sp.arch.d_model = 4096;
  sp.arch.d_ff = 14336, sp.arch.seq_len = 32768, sp.arch.vocab_size = 32000;
  sp.train.global_batch = 8;
  aa_device_profile_t prof = h100();
  aa_roofline_t roof;
  aa_roofline_init(&roof, &prof);
  const aa_predict_pool_t pool = {.devices = 8, .host_devices = 8, .roofline = &roof};
  aa_predict_t p[2];
  for (int cp = 1; cp <= 2; cp++) {
    aa_strategy_t s;
    aa_strategy_default(&s);
    s.degree[AA_AXIS_DATA] = 8 / cp, s.degree[AA_AXIS_CONTEXT] = cp, s.micro_batch = cp;
    s.amp = AA_BF16;
    CHECK_MSG(aa_strategy_resolve(&s, &sp, 0) == 0, "%s", aa_last_error());
    CHECK(aa_strategy_accum_steps(&s, &sp) == 1 && aa_sizes_rank_tokens(&sp.arch, &s) == 32768);
    CHECK_MSG(aa_predict(&sp, &s, NULL, &pool, &p[cp - 1]) == 0, "%s", aa_last_error());
  }
  const double dp_ops = p[0].forward_s + p[0].backward_s, cp_ops = p[1].forward_s + p[1].backward_s;
  CHECK_MSG(fabs(cp_ops / dp_ops - 1) < 0.02, "ops: cp 2 %.4f s, dp %.4f s", cp_ops, dp_ops);
  CHECK_MSG(p[1].step_s > p[0].step_s && p[1].step_s / p[0].step_s < 1.08, "step: cp 2 %.4f s, dp %.4f s",
            p[1].step_s, p[0].step_s);
  /* The ring's transfers are the context group's time: 3 passes a block,
   * 268 MB sent and received each, at least their bytes at 450 GB/s. */
  CHECK(p[0].context_comm_s == 0 && p[1].context_comm_s >= 2 * 2 * 3 * 268435456.0 / 450e9);
}

int main(void) {
  RUN(a_single_rank_step_is_its_ops_worked_out_by_hand);
  RUN(the_gemms_are_the_cost_models_flops);
  RUN(checkpointing_adds_the_recomputed_forward_to_the_backward);
  RUN(data_parallelism_adds_the_data_groups_collectives);
  RUN(a_gang_across_hosts_takes_the_inter_host_lines_for_data_and_pipeline);
  RUN(an_oversubscribed_host_hides_a_pipelines_bubble_up_to_its_throughput);
  RUN(tensor_parallelism_adds_the_tensor_groups_collectives);
  RUN(a_pipeline_stretches_its_busy_time_by_the_bubble);
  RUN(missing_shapes_and_group_sizes_are_stood_in_for_and_counted);
  RUN(a_calibration_without_collectives_cannot_predict_a_group);
  RUN(executors_sharing_a_hosts_cores_compute_slower);
  RUN(cpu_16bit_storage_adds_casts_and_gpus_time_ops_in_their_amp);
  RUN(the_wanted_shapes_cover_every_strategy_of_the_space);
  RUN(a_llama_rank_step_is_its_ops_worked_out_by_hand);
  RUN(llama_16bit_storage_on_a_cpu_casts_its_own_widths);
  RUN(an_moe_rank_step_is_its_ops_worked_out_by_hand);
  RUN(expert_parallelism_computes_the_local_experts_and_times_the_all_to_alls);
  RUN(moe_load_imbalance_slows_the_busiest_expert_rank);
  RUN(an_moe_model_costs_its_dense_twin_plus_the_router_and_permutes);
  RUN(a_llama_pipeline_has_no_embedding_group);
  RUN(a_context_parallel_rank_step_is_its_ops_worked_out_by_hand);
  RUN(a_128k_token_sequence_has_its_quadratic_terms_without_overflow);
  RUN(a_context_parallel_rank_recomputes_its_ring_and_folds_llama_heads);
  RUN(a_context_group_across_hosts_takes_the_lines_of_where_it_sits);
  RUN(a_profile_prices_context_parallel_attention_as_the_attention_it_splits);
  return aa_test_summary();
}
