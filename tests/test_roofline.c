/* Op and link times from a device profile (strategies/roofline.h) worked
 * by hand from a profile written out here (an H100 SXM5's datasheet
 * figures), the refit to a calibration, a kind a calibration lacks timed
 * at its class's measured rate, and predictions (strategies/predict.h) of
 * a pool nobody measured: the collectives on the links their groups span. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_test.h"
#include "common/aa.h"
#include "strategies/calib.h"
#include "strategies/cost.h"
#include "strategies/predict.h"
#include "strategies/roofline.h"

/* The figures of profiles/h100-80gb.json. */
static aa_device_profile_t h100(void) {
  aa_device_profile_t p;
  memset(&p, 0, sizeof p);
  p.version = AA_PROFILE_VERSION;
  snprintf(p.name, sizeof p.name, "h100-80gb");
  p.memory_bytes = 80LL << 30;
  p.hbm_bytes_per_s = 3.35e12;
  p.dense_flop_per_s[AA_PROFILE_FP32] = 67e12;
  p.dense_flop_per_s[AA_PROFILE_TF32] = 494.5e12;
  p.dense_flop_per_s[AA_PROFILE_BF16] = 989.5e12;
  p.dense_flop_per_s[AA_PROFILE_FP16] = 989.5e12;
  p.dense_flop_per_s[AA_PROFILE_FP8] = 1979e12;
  p.gpus_per_node = 8;
  p.intra_node = (aa_profile_link_t){.bytes_per_s = 450e9, .latency_s = 3.4e-6};
  p.inter_node = (aa_profile_link_t){.bytes_per_s = 50e9, .latency_s = 14e-6};
  return p;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-12 * fabs(b) + 1e-18; }

AA_TEST(op_times_are_the_roofline_worked_by_hand) {
  aa_device_profile_t p = h100();
  aa_roofline_t r;
  aa_roofline_init(&r, &p);
  /* A bf16 GEMM of 8192 x 4096 x 4096: 2.749e11 FLOPs at 0.73 of 989.5
   * TFLOP/s, plus the 6.6 us floor; its bytes (2 (NC + C OC + N OC) =
   * 1.34e8) would take 46 us at 0.867 of 3.35 TB/s: compute-bound.
   * Backward: twice the FLOPs. */
  aa_op_shape_t gemm = {AA_OP_MATMUL, {8192, 4096, 4096, 0}};
  double f, b;
  aa_roofline_op(&r, &gemm, AA_BF16, &f, &b);
  const double flops = 2.0 * 8192 * 4096 * 4096;
  CHECK_MSG(near(f, 6.6e-6 + flops / (989.5e12 * 0.73)), "gemm fwd %.9g", f);
  CHECK_MSG(near(b, 6.6e-6 + 2 * flops / (989.5e12 * 0.73)), "gemm bwd %.9g", b);
  /* The same GEMM in fp32 runs on the vector units' 67 TFLOP/s. */
  aa_roofline_op(&r, &gemm, AA_F32, &f, &b);
  CHECK_MSG(near(f, 6.6e-6 + flops / (67e12 * 0.73)), "fp32 gemm fwd %.9g", f);
  /* GELU over 1e8 bf16 elements: memory-bound, 2 bytes read and written
   * each forward, 3 backward (x and dy read, dx written). */
  aa_op_shape_t gelu = {AA_OP_GELU, {100000000, 0, 0, 0}};
  aa_roofline_op(&r, &gelu, AA_BF16, &f, &b);
  CHECK_MSG(near(f, 6.6e-6 + 4e8 / (3.35e12 * 0.867)), "gelu fwd %.9g", f);
  CHECK_MSG(near(b, 6.6e-6 + 6e8 / (3.35e12 * 0.867)), "gelu bwd %.9g", b);
  /* Causal grouped-query attention (S 64, T 2048, G 4, HS 128): 2 S G T^2
   * HS FLOPs at attention's 0.5, backward 2.5 times that. */
  aa_op_shape_t gqa = {AA_OP_GQA, {64, 2048, 4, 128}};
  aa_roofline_op(&r, &gqa, AA_BF16, &f, &b);
  const double af = 2.0 * 64 * 4 * 2048.0 * 2048 * 128;
  CHECK_MSG(near(f, 6.6e-6 + af / (989.5e12 * 0.5)), "gqa fwd %.9g", f);
  CHECK_MSG(near(b, 6.6e-6 + 2.5 * af / (989.5e12 * 0.5)), "gqa bwd %.9g", b);
  /* AdamW has no backward, and a tiny op costs the floor. */
  aa_op_shape_t adam = {AA_OP_ADAMW, {10, 0, 0, 0}};
  aa_roofline_op(&r, &adam, AA_F32, &f, &b);
  CHECK(b == 0 && f > 6.6e-6 && f < 6.61e-6);
}

/* One kernel of the H100 profile's roofline: the floor plus the larger of
 * its FLOPs at 0.73 of the 16-bit peak and its bytes at 0.867 of the HBM. */
static double h100_kernel(double flops, double bytes) {
  const double c = flops / (989.5e12 * 0.73), m = bytes / (3.35e12 * 0.867);
  return 6.6e-6 + (c > m ? c : m);
}

AA_TEST(materialised_attention_is_megatron_2021s_kernels_worked_by_hand) {
  aa_device_profile_t p = h100();
  aa_roofline_t r;
  aa_roofline_init(&r, &p);
  CHECK(r.attention == AA_ROOF_ATTENTION_FUSED);
  /* Fused (the default) is the engine's roofline, as before: (B 2, T
   * 1024, C 1536, NH 16) does 2 B T^2 C causal FLOPs at attention's 0.5. */
  aa_op_shape_t att = {AA_OP_ATTENTION, {2, 1024, 1536, 16}};
  double f, b;
  aa_roofline_op(&r, &att, AA_BF16, &f, &b);
  const double causal = 2.0 * 2 * 1024 * 1024 * 1536;
  CHECK_MSG(near(f, 6.6e-6 + causal / (989.5e12 * 0.5)), "fused fwd %.9g", f);
  CHECK_MSG(near(b, 6.6e-6 + 2.5 * causal / (989.5e12 * 0.5)), "fused bwd %.9g", b);
  /* Materialised: BH = 2 x 16 = 32 score matrices of T^2, E = 33,554,432
   * score elements, X = 32 x 1024 x 96 = 3,145,728 elements in each of q,
   * k, v and the context; one product over the full square is g = 2 BH T^2
   * hn = 6.442e9 FLOPs; bf16, 2 bytes an element, 1 a mask element.
   *   forward: QK^T g, 2 (2X + E) = 79,691,776 bytes; the causal softmax
   *     2 (E/2 + E) = 100,663,296; the dropout 2 (2E) + E = 167,772,160;
   *     PV g, 2 (E + 2X) = 79,691,776.
   *   backward: dP and dv g, 79,691,776 each; the dropout's 167,772,160;
   *     the softmax's 2 (E/2 + E/2 + E) = 134,217,728; dq and dk g,
   *     79,691,776 each.
   * The products are memory-bound here (about hn = 96 FLOPs a score byte, under
   * the H100's 0.73 x 989.5 / (0.867 x 3.35) = 249). */
  r.attention = AA_ROOF_ATTENTION_MATERIALISED;
  aa_roofline_op(&r, &att, AA_BF16, &f, &b);
  const double g = 2.0 * 32 * 1024 * 1024 * 96;
  const double fwd = 2 * h100_kernel(g, 79691776) + h100_kernel(0, 100663296) + h100_kernel(0, 167772160);
  const double bwd = 4 * h100_kernel(g, 79691776) + h100_kernel(0, 167772160) + h100_kernel(0, 134217728);
  CHECK_MSG(near(f, fwd), "materialised fwd %.9g by hand %.9g", f, fwd);
  CHECK_MSG(near(b, bwd), "materialised bwd %.9g by hand %.9g", b, bwd);
  CHECK_MSG(f > 6.6e-6 + causal / (989.5e12 * 0.5), "materialised fwd %.9g not slower than fused", f);
  /* Grouped-query attention of the same query heads (S = 2 x 4 kv heads,
   * G 4, HS 96) materialises the same 32 squares. */
  aa_op_shape_t gqa = {AA_OP_GQA, {8, 1024, 4, 96}};
  double gf, gb;
  aa_roofline_op(&r, &gqa, AA_BF16, &gf, &gb);
  CHECK_MSG(near(gf, fwd) && near(gb, bwd), "gqa %.9g %.9g", gf, gb);
  /* Other ops do not change; without a profile attention stays fused. */
  aa_op_shape_t gemm = {AA_OP_MATMUL, {8192, 4096, 4096, 0}};
  aa_roofline_op(&r, &gemm, AA_BF16, &f, &b);
  CHECK(near(f, 6.6e-6 + 2.0 * 8192 * 4096 * 4096 / (989.5e12 * 0.73)));
  aa_roofline_t u;
  aa_roofline_init(&u, NULL);
  u.attention = AA_ROOF_ATTENTION_MATERIALISED;
  aa_roofline_op(&u, &att, AA_BF16, &f, &b);
  CHECK_MSG(near(f, causal), "unit roofline %.9g", f);
  /* The names, and a name that is neither. */
  aa_roof_attention_t a = AA_ROOF_ATTENTION_FUSED;
  CHECK(aa_roof_attention_parse(&a, "materialised") == 0 && a == AA_ROOF_ATTENTION_MATERIALISED);
  CHECK_ERR(aa_roof_attention_parse(&a, "flash"), AA_EINVAL, "fused or materialised, not 'flash'");
  CHECK(a == AA_ROOF_ATTENTION_MATERIALISED);
  CHECK(!strcmp(aa_roof_attention_name(AA_ROOF_ATTENTION_FUSED), "fused"));
}

AA_TEST(links_are_rings_on_the_links_a_group_spans) {
  aa_device_profile_t p = h100();
  aa_roofline_t r;
  aa_roofline_init(&r, &p);
  double lat, bw;
  /* Eight ranks in one node: 2 x 7 NVLink steps, 0.8 of 450 GB/s. */
  aa_roofline_link(&r, AA_COST_ALL_REDUCE, 8, 8, &lat, &bw);
  CHECK_MSG(near(lat, 2 * 7 * 3.4e-6) && near(bw, 360e9), "%g %g", lat, bw);
  /* An all-gather is one pass. */
  aa_roofline_link(&r, AA_COST_ALL_GATHER, 8, 8, &lat, &bw);
  CHECK(near(lat, 7 * 3.4e-6) && near(bw, 360e9));
  /* 64 ranks one to a node (the data group under tp 8): 63 network steps a
   * pass, each rank's own adapter at 0.83 of 50 GB/s. */
  aa_roofline_link(&r, AA_COST_ALL_REDUCE, 64, 1, &lat, &bw);
  CHECK_MSG(near(lat, 2 * 63 * 14e-6) && near(bw, 41.5e9), "%g %g", lat, bw);
  /* 16 ranks eight to a node: 14 NVLink steps and 1 network step a pass;
   * the node's eight adapters carry the ring: min(360, 8 x 41.5) GB/s. */
  aa_roofline_link(&r, AA_COST_ALL_REDUCE, 16, 8, &lat, &bw);
  CHECK_MSG(near(lat, 2 * (14 * 3.4e-6 + 14e-6)) && near(bw, 332e9), "%g %g", lat, bw);
  /* Four to a node: four adapters, 166 GB/s. */
  aa_roofline_link(&r, AA_COST_REDUCE_SCATTER, 16, 4, &lat, &bw);
  CHECK_MSG(near(lat, 12 * 3.4e-6 + 3 * 14e-6) && near(bw, 166e9), "%g %g", lat, bw);
  /* A send inside a node and one across. */
  aa_roofline_link(&r, AA_COST_SEND, 2, 2, &lat, &bw);
  CHECK(near(lat, 3.4e-6) && near(bw, 360e9));
  aa_roofline_link(&r, AA_COST_SEND, 2, 1, &lat, &bw);
  CHECK(near(lat, 14e-6) && near(bw, 41.5e9));
}

/* A calibration of n ops of kind k in dtype dt, each measured at `times`
 * its roofline time on profile p (or on the unit roofline: seconds =
 * times x work measure). */
static aa_calib_t *calib_at(const aa_roofline_t *r, const aa_op_shape_t *shapes, int n, aa_dtype_t dt,
                            double times) {
  aa_calib_t *c = calloc(1, sizeof *c);
  c->version = AA_CALIB_VERSION;
  snprintf(c->device, sizeof c->device, "cuda:test:81559MiB");
  snprintf(c->backend, sizeof c->backend, "nccl");
  c->cuda = 1;
  c->ranks = 1;
  for (int i = 0; i < n; i++) {
    double f, b;
    aa_roofline_op(r, &shapes[i], dt, &f, &b);
    c->op[c->n_op++] = (aa_calib_op_t){shapes[i], dt, f * times, b * times};
  }
  return c;
}

AA_TEST(a_calibration_refits_the_level_and_keeps_the_shape_curve) {
  aa_device_profile_t p = h100();
  aa_roofline_t r0, r;
  aa_roofline_init(&r0, &p);
  aa_op_shape_t measured[3] = {{AA_OP_MATMUL, {1024, 1024, 1024, 0}},
                               {AA_OP_MATMUL, {4096, 1024, 3072, 0}},
                               {AA_OP_MATMUL, {8192, 4096, 4096, 0}}};
  aa_calib_t *c = calib_at(&r0, measured, 3, AA_BF16, 1.5);
  aa_roofline_init(&r, &p);
  aa_roofline_fit(&r, c);
  CHECK_MSG(near(r.scale[AA_ROOF_GEMM][AA_BF16], 1.5), "%g", r.scale[AA_ROOF_GEMM][AA_BF16]);
  CHECK(r.fitted[AA_ROOF_GEMM][AA_BF16] == 6 && r.fitted[AA_ROOF_MEMORY][AA_BF16] == 0);
  /* fp16, not measured, takes bf16's level; memory-bound ops keep the
   * profile's. */
  CHECK(near(r.scale[AA_ROOF_GEMM][AA_F16], 1.5) && r.scale[AA_ROOF_MEMORY][AA_BF16] == 1);
  aa_op_shape_t other = {AA_OP_MATMUL, {2048, 8192, 512, 0}};
  double f0, b0, f, b;
  aa_roofline_op(&r0, &other, AA_BF16, &f0, &b0);
  aa_roofline_op(&r, &other, AA_BF16, &f, &b);
  CHECK(near(f, 1.5 * f0) && near(b, 1.5 * b0));
  free(c);
}

AA_TEST(a_kind_the_calibration_lacks_is_timed_at_its_class_rate) {
  /* A gpt2's calibration (LayerNorm, no RMSNorm) plans a llama: RMSNorm is
   * memory-bound, timed at the bytes/s the calibration's LayerNorms
   * reached. */
  aa_roofline_t unit, r;
  aa_roofline_init(&unit, NULL);
  aa_op_shape_t ln[2] = {{AA_OP_LAYERNORM, {512, 768, 0, 0}}, {AA_OP_LAYERNORM, {2048, 768, 0, 0}}};
  /* 2 ns a byte: LayerNorm forward moves 2 x 4 bytes an element in fp32. */
  aa_calib_t *c = calib_at(&unit, ln, 2, AA_F32, 2e-9);
  CHECK(near(c->op[0].fwd_s, 2e-9 * 8 * 512 * 768));
  aa_roofline_init(&r, NULL);
  aa_roofline_fit(&r, c);
  CHECK(aa_roofline_knows(&r, AA_ROOF_MEMORY) && !aa_roofline_knows(&r, AA_ROOF_GEMM));
  aa_op_shape_t rms = {AA_OP_RMSNORM, {1024, 512, 0, 0}};
  double f, b;
  aa_roofline_op(&r, &rms, AA_F32, &f, &b);
  CHECK_MSG(near(f, 2e-9 * 8 * 1024 * 512) && near(b, 2e-9 * 12 * 1024 * 512), "%g %g", f, b);
  free(c);
}

static aa_model_spec_t gpt(int layers, int heads, int hidden, int batch) {
  aa_model_spec_t sp;
  memset(&sp, 0, sizeof sp);
  sp.arch = (aa_arch_t){.family = "gpt2",
                        .n_layer = layers,
                        .n_head = heads,
                        .d_model = hidden,
                        .d_ff = 4 * hidden,
                        .seq_len = 2048,
                        .vocab_size = 51200};
  sp.train.global_batch = batch;
  return sp;
}

static aa_strategy_t strat(const aa_model_spec_t *sp, int dp, int tp, int pp) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = dp;
  s.degree[AA_AXIS_TENSOR] = tp;
  s.degree[AA_AXIS_PIPELINE] = pp;
  s.amp = AA_F16;
  s.ckpt = AA_CKPT_FULL;
  s.micro_batch = 1;
  if (aa_strategy_resolve(&s, sp, dp * tp * pp)) fprintf(stderr, "resolve: %s\n", aa_last_error());
  return s;
}

AA_TEST(a_pool_nobody_measured_is_predicted_from_its_profile) {
  aa_device_profile_t p = h100();
  aa_roofline_t r;
  aa_roofline_init(&r, &p);
  aa_model_spec_t sp = gpt(24, 24, 2304, 512); /* PTD-P's 1.7 B row's shape */
  aa_predict_pool_t pool = {.devices = 32, .host_devices = 8, .roofline = &r};
  aa_strategy_t s = strat(&sp, 32, 1, 1);
  aa_predict_t pr;
  CHECK_MSG(aa_predict(&sp, &s, NULL, &pool, &pr) == 0, "%s", aa_last_error());
  CHECK(pr.ops_modelled > 0 && pr.links_modelled > 0 && pr.ops_estimated == 0 && pr.across_hosts);
  CHECK(near(pr.step_s, pr.forward_s + pr.backward_s + pr.tensor_comm_s + pr.pipeline_comm_s +
                            pr.context_comm_s + pr.bubble_s + pr.optimizer_s + pr.data_comm_s));
  /* The data group: 32 ranks, 8 to a node, ZeRO 0: one all-reduce of the
   * fp32 gradients... whatever cost.h counts, on a ring of 28 NVLink and 3
   * network steps a pass at min(360, 8 x 41.5) GB/s. */
  aa_cost_comm_t cc;
  aa_cost_comm_stage(&sp.arch, &s, aa_strategy_accum_steps(&s, &sp), 0, &cc);
  const aa_cost_calls_t *ar = &cc.data.kind[AA_COST_ALL_REDUCE];
  CHECK(ar->calls > 0);
  double want = 0;
  for (int k = 0; k < AA_COST_COLLECTIVES; k++) {
    const aa_cost_calls_t *x = &cc.data.kind[k];
    if (!x->calls) continue;
    double passes = k == AA_COST_ALL_REDUCE ? 2 : 1, share = passes * 31.0 / 32;
    want += x->calls * passes * (28 * 3.4e-6 + 3 * 14e-6) + share * x->bytes / 332e9;
  }
  CHECK_MSG(near(pr.data_comm_s, want), "data %.9g want %.9g", pr.data_comm_s, want);
  /* The tensor group inside a node is faster than one spanning two. */
  aa_model_spec_t big = gpt(8, 64, 8192, 64);
  aa_strategy_t t8 = strat(&big, 1, 8, 1);
  aa_predict_pool_t eight = {.devices = 8, .host_devices = 8, .roofline = &r},
                    four = {.devices = 8, .host_devices = 4, .roofline = &r};
  aa_predict_t in, across;
  CHECK(aa_predict(&big, &t8, NULL, &eight, &in) == 0 && aa_predict(&big, &t8, NULL, &four, &across) == 0);
  CHECK_MSG(across.tensor_comm_s > 2 * in.tensor_comm_s, "%g vs %g", across.tensor_comm_s, in.tensor_comm_s);
  CHECK(in.forward_s == across.forward_s);
  /* Without a profile or a calibration there is nothing to predict from. */
  aa_predict_pool_t bare = {.devices = 32, .host_devices = 8};
  CHECK(aa_predict(&sp, &s, NULL, &bare, &pr) == AA_EINVAL);
}

AA_TEST(a_measured_line_wins_over_the_profile) {
  aa_device_profile_t p = h100();
  aa_roofline_t r;
  aa_roofline_init(&r, &p);
  aa_model_spec_t big = gpt(8, 64, 8192, 64);
  aa_strategy_t t8 = strat(&big, 1, 8, 1);
  aa_calib_t *c = calloc(1, sizeof *c);
  c->version = AA_CALIB_VERSION;
  c->cuda = 1;
  c->ranks = 8;
  snprintf(c->backend, sizeof c->backend, "nccl");
  /* A slow measured all-reduce of 8: 1 ms + 1 GB/s. */
  c->link[c->n_link++] = (aa_calib_link_t){AA_COST_ALL_REDUCE, 8, 1e-3, 1e9};
  aa_predict_pool_t pool = {.devices = 8, .host_devices = 8, .roofline = &r};
  aa_predict_t with, without;
  CHECK(aa_predict(&big, &t8, c, &pool, &with) == 0 && aa_predict(&big, &t8, NULL, &pool, &without) == 0);
  CHECK_MSG(with.tensor_comm_s > 10 * without.tensor_comm_s, "%g vs %g", with.tensor_comm_s,
            without.tensor_comm_s);
  free(c);
}

/* Seconds group g's collectives take as a ring of its ranks, `nodes` of
 * them across nodes, on the H100 profile's links (the rule of
 * roofline.h, written out again here). */
static double ring_by_hand(const aa_cost_group_t *g, int nodes) {
  const double t = g->ranks, per = t / nodes;
  double sum = 0;
  for (int k = 0; k < AA_COST_COLLECTIVES; k++) {
    const aa_cost_calls_t *x = &g->kind[k];
    if (!x->calls || g->ranks < 2) continue;
    if (k == AA_COST_SEND || k == AA_COST_RECV) {
      sum += x->calls * (nodes > 1 ? 14e-6 : 3.4e-6) + x->bytes / (nodes > 1 ? 41.5e9 : 360e9);
      continue;
    }
    const double passes = k == AA_COST_ALL_REDUCE ? 2 : 1;
    const double lat = passes * ((t - nodes) * 3.4e-6 + (nodes - 1) * 14e-6);
    const double bw = nodes > 1 ? fmin(360e9, per * 41.5e9) : 360e9;
    sum += x->calls * lat + passes * (t - 1) / t * x->bytes / bw;
  }
  return sum;
}

/* Placement of real clusters: nodes of 8, 2 of them and 128. Under
 * Megatron's order a tensor group of 8 fills a node, a data group then
 * has one rank a node, a tensor group of 2 leaves a data group 4 ranks a
 * node, and pipeline neighbours 256 ranks apart sit on different nodes:
 * every group's collectives are timed on those links. */
AA_TEST(groups_are_timed_on_the_links_of_2x8_and_128x8_nodes) {
  aa_device_profile_t p = h100();
  aa_roofline_t r;
  aa_roofline_init(&r, &p);
  aa_model_spec_t sp = gpt(32, 32, 4096, 512);
  const struct {
    int devices, dp, tp, pp;
    int nodes_t, nodes_d, nodes_p; /* nodes each group spans */
  } cases[] = {
      {16, 2, 8, 1, 1, 2, 1},
      {16, 8, 2, 1, 1, 2, 1},
      {1024, 32, 8, 4, 1, 32, 2},
      {1024, 128, 2, 4, 1, 32, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aa_strategy_t s = strat(&sp, cases[i].dp, cases[i].tp, cases[i].pp);
    aa_predict_pool_t pool = {.devices = cases[i].devices, .host_devices = 8, .roofline = &r};
    aa_predict_t pr;
    CHECK_MSG(aa_predict(&sp, &s, NULL, &pool, &pr) == 0, "%s", aa_last_error());
    aa_cost_comm_t cc;
    aa_cost_comm_stage(&sp.arch, &s, aa_strategy_accum_steps(&s, &sp), pr.stage, &cc);
    const double t = ring_by_hand(&cc.tensor, cases[i].nodes_t), d = ring_by_hand(&cc.data, cases[i].nodes_d),
                 pl = ring_by_hand(&cc.pipeline, cases[i].nodes_p), e = ring_by_hand(&cc.embedding, 2);
    CHECK_MSG(near(pr.tensor_comm_s, t), "case %zu tensor %.9g by hand %.9g", i, pr.tensor_comm_s, t);
    CHECK_MSG(near(pr.data_comm_s, d + e), "case %zu data %.9g by hand %.9g", i, pr.data_comm_s, d + e);
    CHECK_MSG(near(pr.pipeline_comm_s, pl), "case %zu pipeline %.9g by hand %.9g", i, pr.pipeline_comm_s, pl);
  }
}

int main(void) {
  RUN(op_times_are_the_roofline_worked_by_hand);
  RUN(materialised_attention_is_megatron_2021s_kernels_worked_by_hand);
  RUN(links_are_rings_on_the_links_a_group_spans);
  RUN(a_calibration_refits_the_level_and_keeps_the_shape_curve);
  RUN(a_kind_the_calibration_lacks_is_timed_at_its_class_rate);
  RUN(a_pool_nobody_measured_is_predicted_from_its_profile);
  RUN(a_measured_line_wins_over_the_profile);
  RUN(groups_are_timed_on_the_links_of_2x8_and_128x8_nodes);
  return aa_test_summary();
}
