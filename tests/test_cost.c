/* The planner's cost model (strategies/cost.h) against the engine it
 * predicts: the bytes the model allocates for its activations and
 * workspace on a grid of shapes and options, a single process's accounted
 * bytes by kind (tests/test_parallel.c does the same for dp 4 at every
 * ZeRO stage), ZeRO's shards over the data group only (figures worked out
 * by hand), FLOPs per token against figures worked out by hand, the
 * dominance rule, and the collectives each process group calls per step
 * (the engine's schedule, counted by hand), for the gpt2 and the llama
 * families. The model and the cost model both size from
 * strategies/sizes.h; these tests hold the engine to allocating exactly
 * that, and the figures to what they should be. */
#include <stdio.h>
#include <string.h>

#include "aa_test.h"
#include "common/mem.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "strategies/cost.h"
#include "strategies/sizes.h"

static const aa_arch_t archs[] = {
    {.family = "gpt2", .n_layer = 3, .n_head = 4, .d_model = 32, .d_ff = 64, .seq_len = 16, .vocab_size = 64},
    /* odd sizes: no slice is a multiple of 64 bytes by accident */
    {.family = "gpt2", .n_layer = 2, .n_head = 3, .d_model = 27, .d_ff = 50, .seq_len = 7, .vocab_size = 11},
    /* the llama family: grouped-query attention (2 and 1 kv heads), and odd sizes again (RoPE needs an
     * even head size: 10) */
    {.family = "llama", .n_layer = 3, .n_head = 4, .n_kv_head = 2, .d_model = 32, .d_ff = 48, .seq_len = 16,
     .vocab_size = 64, .rope_theta = 10000, .norm_eps = 1e-5f},
    {.family = "llama", .n_layer = 2, .n_head = 3, .n_kv_head = 1, .d_model = 30, .d_ff = 50, .seq_len = 7,
     .vocab_size = 11, .rope_theta = 10000, .norm_eps = 1e-5f},
};
static const aa_dtype_t amps[] = {AA_F32, AA_BF16, AA_F16};
static const struct {
  aa_ckpt_mode_t ckpt;
  int layers;
} ckpts[] = {{AA_CKPT_NONE, 0}, {AA_CKPT_SELECTIVE, 0}, {AA_CKPT_FULL, 0}, {AA_CKPT_FULL, 1}};

static aa_strategy_t strat(int dp, int zero, aa_dtype_t amp, aa_ckpt_mode_t ckpt, int mb) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = dp;
  s.zero = zero;
  s.amp = amp;
  s.ckpt = ckpt;
  s.micro_batch = mb;
  return s;
}

/* What the model allocates for a micro-batch is the layout's bytes, no
 * more: the accountant's activations and workspace after aa_gpt_create. */
AA_TEST(the_model_allocates_the_activation_layout_on_a_grid) {
  int n = 0;
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
    for (int B = 1; B <= 3; B += 2)
      for (int T = 1; T <= archs[a].seq_len; T += archs[a].seq_len - 1)
        for (int p = 0; p < 3; p++)
          for (int k = 0; k < 4; k++) {
            aa_mem_t mem;
            aa_mem_init(&mem, 0);
            aa_gpt_opts_t o = {.amp = amps[p], .ckpt = ckpts[k].ckpt, .ckpt_layers = ckpts[k].layers, .mem = &mem};
            aa_gpt_t *m = NULL;
            int rc = aa_gpt_create(&m, &archs[a], aa_ops_cpu(), B, T, &o);
            CHECK_MSG(rc == 0, "%s", aa_last_error());
            size_t ea, ew;
            aa_gpt_act_bytes(&archs[a], B, T, &o, &ea, &ew);
            aa_act_layout_t l;
            const aa_act_shape_t sh = {.B = B, .T = T, .tp = 1, .amp = o.amp, .ckpt = o.ckpt, .ckpt_layers = o.ckpt_layers};
            aa_sizes_acts(&archs[a], &sh, &l, NULL);
            CHECK_MSG(mem.peak[AA_MEM_ACTS] == l.acts && mem.peak[AA_MEM_WORKSPACE] == l.workspace && ea == l.acts &&
                          ew == l.workspace,
                      "arch %zu B %d T %d %s %s/%d: layout %zu/%zu, allocated %zu/%zu", a, B, T,
                      aa_dtype_name(o.amp), aa_ckpt_mode_name(o.ckpt), o.ckpt_layers, l.acts, l.workspace,
                      mem.peak[AA_MEM_ACTS], mem.peak[AA_MEM_WORKSPACE]);
            aa_gpt_free(m);
            n++;
          }
  fprintf(stderr, "  %d layouts allocated exactly\n", n);
}

/* What one process allocates for a strategy: the model and ZeRO stage 0
 * over a group of one (plain AdamW), as aa_train builds them for a single
 * process. */
AA_TEST(a_single_rank_accounts_exactly_the_predicted_bytes) {
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
    for (int p = 0; p < 3; p++)
      for (int k = 0; k < 4; k++) {
        aa_strategy_t s;
        aa_strategy_default(&s);
        s.amp = amps[p];
        s.ckpt = ckpts[k].ckpt;
        s.ckpt_layers = ckpts[k].layers;
        s.micro_batch = 2;
        aa_mem_t mem;
        aa_mem_init(&mem, 0);
        aa_gpt_opts_t o = {.amp = s.amp, .ckpt = s.ckpt, .ckpt_layers = s.ckpt_layers, .mem = &mem};
        aa_gpt_t *m = NULL;
        aa_comm_t *self = NULL;
        aa_zero_t z = {0};
        int rc = aa_gpt_create(&m, &archs[a], aa_ops_cpu(), s.micro_batch, archs[a].seq_len, &o);
        if (!rc) rc = aa_comm_self(&self);
        if (!rc) rc = aa_zero_init(&z, m, self, 0, &mem);
        CHECK_MSG(rc == 0, "%s", aa_last_error());
        aa_cost_mem_t c;
        aa_cost_memory(&archs[a], &s, 1, &c);
        for (int kind = 0; kind < AA_MEM_NKINDS; kind++)
          CHECK_MSG(c.bytes[kind] == mem.peak[kind], "arch %zu %s %s/%d %s: predicted %zu, accounted %zu", a,
                    aa_dtype_name(s.amp), aa_ckpt_mode_name(s.ckpt), s.ckpt_layers, aa_mem_kind_name(kind),
                    c.bytes[kind], mem.peak[kind]);
        CHECK(c.total == mem.peak_total);
        aa_zero_free(&z, m);
        aa_gpt_free(m);
        aa_comm_destroy(self);
      }
}

/* ZeRO shards over the data group only, and under pipeline parallelism
 * only the units the rank holds. archs[1] has units wte|wpe (11 + 7) x 27
 * = 486, two blocks of 4*27^2 + 2*50*27 + 9*27 + 50 = 5,909 and lnf 54:
 * 12,358 parameters. Over dp 2 a rank's shard is S = 243 + 2 * 2,955 + 27
 * = 6,180 elements; over dp·tp·pp = 4 it would be 122 + 2 * 1,478 + 14 =
 * 3,092 (the old rule). At pp 2 (uniform: one block a stage) stage 0 holds
 * wte|wpe and block 0, S = 243 + 2,955 = 3,198; stage 1 block 1, lnf and
 * the tied head's copy of wte|wpe, S = 243 + 2,955 + 27 = 3,225. The
 * strategies are not resolved (the engine may refuse pp > 1): these are
 * the sizes alone. (A tensor rank's slice: tests/test_sizes.c, and every
 * rank of the tensor-parallel runs of tests/test_parallel.c to the byte.) */
AA_TEST(zero_shards_over_the_data_group_only) {
  const aa_arch_t *a = &archs[1];
  const size_t n = 12358;
  CHECK(aa_arch_param_count(a) == n);
  aa_zero_sizes_t z;
  aa_sizes_zero(a, 1, NULL, AA_F32, 3, 2, &z);
  CHECK_MSG(z.shard == 6180, "shard %zu", z.shard);
  /* {dp, tp, pp, stage}, the units the stage holds, its shard S and the
   * padded unit of each scratch slot (wte|wpe, a block, lnf). */
  const struct {
    int dp, tp, pp, stage;
    size_t held[4], S, padded[3];
  } cases[] = {
      {2, 1, 1, 0, {486, 5909, 5909, 54}, 6180, {486, 5910, 54}},
      {2, 1, 2, 0, {486, 5909, 0, 0}, 3198, {486, 5910, 0}},
      {2, 1, 2, 1, {486, 0, 5909, 54}, 3225, {486, 5910, 54}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aa_strategy_t s = strat(cases[i].dp, 3, AA_F32, AA_CKPT_NONE, 2);
    s.degree[AA_AXIS_TENSOR] = cases[i].tp;
    s.degree[AA_AXIS_PIPELINE] = cases[i].pp;
    aa_pp_place_t place;
    CHECK_MSG(aa_pp_place(a, &s, 1, cases[i].stage, &place) == 0, "%s", aa_last_error());
    const aa_pp_place_t *pl = s.degree[AA_AXIS_PIPELINE] > 1 ? &place : NULL;
    for (int u = 0; u < 4; u++)
      CHECK_MSG(aa_sizes_unit_held(a, 1, pl, u) == cases[i].held[u], "pp %d stage %d unit %d: %zu elements",
                s.degree[AA_AXIS_PIPELINE], cases[i].stage, u, aa_sizes_unit_held(a, 1, pl, u));
    const size_t S = cases[i].S;
    aa_sizes_zero(a, 1, pl, AA_F32, 3, 2, &z);
    CHECK_MSG(z.shard == S, "pp %d stage %d: shard %zu, want %zu", s.degree[AA_AXIS_PIPELINE], cases[i].stage,
              z.shard, S);
    aa_act_layout_t l;
    const aa_act_shape_t sh = {.B = 2, .T = a->seq_len, .tp = 1, .amp = AA_F32, .ckpt = AA_CKPT_NONE, .pipe = pl};
    aa_sizes_acts(a, &sh, &l, NULL);
    aa_cost_mem_t c;
    aa_cost_memory_stage(a, &s, 1, cases[i].stage, &c);
    /* Stage 3 fp32: parameters, gradients and the two moments of the
     * shard; the workspace adds one chunk (the largest, 2,955), the
     * gradient and parameter scratch of each padded unit (twice) and 16
     * scalars. */
    const size_t *p = cases[i].padded;
    const size_t want[AA_MEM_NKINDS] = {4 * S, 4 * S, 8 * S, l.acts,
                                        l.workspace + 4 * (2955 + 2 * (p[0] + p[1] + p[2]) + 16)};
    for (int k = 0; k < AA_MEM_NKINDS; k++)
      CHECK_MSG(c.bytes[k] == want[k], "dp %d tp %d pp %d stage %d %s: %zu bytes, want %zu",
                s.degree[AA_AXIS_DATA], s.degree[AA_AXIS_TENSOR], s.degree[AA_AXIS_PIPELINE], cases[i].stage,
                aa_mem_kind_name(k), c.bytes[k], want[k]);
  }
  /* At pp 1 the activations are the model's own layout. */
  size_t acts, ws;
  aa_gpt_opts_t o = {.amp = AA_F32};
  aa_gpt_act_bytes(a, 2, a->seq_len, &o, &acts, &ws);
  aa_strategy_t s = strat(2, 3, AA_F32, AA_CKPT_NONE, 2);
  aa_cost_mem_t c;
  aa_cost_memory(a, &s, 1, &c);
  CHECK(c.bytes[AA_MEM_ACTS] == acts && c.bytes[AA_MEM_WORKSPACE] == ws + 4 * (2955 + 2 * (486 + 5910 + 54) + 16));
}

/* GPT-2 124M with the padded vocabulary: N = 124,475,904 parameters
 * (wte 50304x768, wpe 1024x768, 12 blocks of 7,087,872, lnf 1,536).
 * 6N = 746,855,424 and 12·L·C·T = 12·12·768·1024 = 113,246,208. A fully
 * checkpointed block runs its forward again: 2·7,087,872 + 4·768·1024 =
 * 17,321,472 per block, 207,857,664 for 12, or 6 of them for the first 6. */
AA_TEST(flops_per_token_are_6n_plus_12lct_plus_the_recomputed_forward) {
  const aa_arch_t gpt2 = {
      .family = "gpt2", .n_layer = 12, .n_head = 12, .d_model = 768, .d_ff = 3072, .seq_len = 1024, .vocab_size = 50304};
  CHECK(aa_arch_param_count(&gpt2) == 124475904u);
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0);
  s.ckpt = AA_CKPT_SELECTIVE;
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0);
  s.ckpt = AA_CKPT_FULL;
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0 + 207857664.0);
  s.ckpt_layers = 6;
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0 + 6 * 17321472.0);
  /* The lower bound: GEMM weights only, 12 blocks of 4·768² + 2·3072·768 =
   * 7,077,888 and the 50304x768 output layer: 6 x 123,568,128; full
   * checkpointing adds 2 x 7,077,888 per block. */
  aa_strategy_default(&s);
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0);
  s.ckpt = AA_CKPT_FULL;
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 + 169869312.0);
  /* Below the model FLOPs for every shape and mode here. */
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
    for (int k = 0; k < 4; k++) {
      s.ckpt = ckpts[k].ckpt;
      s.ckpt_layers = ckpts[k].layers;
      CHECK(aa_cost_min_flops_per_token(&archs[a], &s) < aa_cost_flops_per_token(&archs[a], &s));
    }
}

/* The tiny MoE llama of the MoE tests below: 2 layers, C 32, 4 heads (2
 * kv), d_ff 64, T 16, V 64; block 0 an MoE block (every 2) of 4 experts
 * of width 24, top-2, one shared expert; block 1 dense. */
static aa_arch_t tiny_moe(void) {
  aa_arch_t a = {.family = "llama",
                 .n_layer = 2,
                 .n_head = 4,
                 .n_kv_head = 2,
                 .d_model = 32,
                 .d_ff = 64,
                 .seq_len = 16,
                 .vocab_size = 64};
  a.moe = (aa_moe_t){.experts = 4, .top_k = 2, .d_ff_expert = 24, .shared_experts = 1, .every = 2};
  return a;
}

/* An MoE model's FLOPs count the parameters a token passes (spec.h
 * aa_arch_active_param_count), not the experts it is not routed to. A
 * llama of 2 blocks (C 32, 4 heads of 8, 2 kv heads: q|k|v 64 wide, F 64,
 * T 16, V 64), block 0 an MoE layer (every 2) of E 4 experts top-2 of
 * width 24 and one shared expert, block 1 dense. By hand: block 0 holds
 * 2·32 + 64·32 + 32² + 4·32 (router) + 5·3·24·32 = 14,784 parameters, of
 * which a token passes all but 2 experts' 4,608: 10,176; block 1 2·32 +
 * 64·32 + 32² + 3·64·32 = 9,280; lnf and the head 32 + 64·32 = 2,080. So
 * 6 (10,176 + 9,280 + 2,080) + 12·2·32·16 = 141,504 a token; full
 * checkpointing adds 2 (10,176 + 9,280) + 4·2·32·16 = 43,008. The lower
 * bound's matrices: block 0 64·32 + 32² + 4·32 + 3·3·24·32 = 10,112, block
 * 1 64·32 + 32² + 3·64·32 = 9,216, the head 2,048: 6 x 21,376. */
AA_TEST(flops_per_token_of_an_moe_model_count_its_active_parameters) {
  aa_arch_t a = tiny_moe();
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK(aa_cost_flops_per_token(&a, &s) == 141504.0);
  CHECK(aa_cost_flops_per_token(&a, &s) ==
        6.0 * ((double)aa_arch_active_param_count(&a) - 64 * 32) + 12 * 2 * 32 * 16);
  CHECK(aa_cost_min_flops_per_token(&a, &s) == 6.0 * 21376);
  s.ckpt = AA_CKPT_FULL;
  CHECK(aa_cost_flops_per_token(&a, &s) == 141504.0 + 43008.0);
  CHECK(aa_cost_min_flops_per_token(&a, &s) == 6.0 * 21376 + 2.0 * (10112 + 9216));
  /* Cut in two: each stage its own block. */
  aa_strategy_default(&s);
  s.degree[AA_AXIS_PIPELINE] = 2;
  CHECK(aa_cost_flops_per_token_stage(&a, &s, 0) == 6.0 * 10176 + 12 * 32 * 16);
  CHECK(aa_cost_flops_per_token_stage(&a, &s, 1) == 6.0 * (9280 + 2080) + 12 * 32 * 16);
  /* At tp 2 the MoE block, its experts whole on each tensor rank, has no
   * MLP all-reduce forward or backward: per micro-batch 1 (embedding) + 2
   * (the MoE block's attention) + 4 (the dense block) + 1 (the
   * cross-entropy's) = 8 all-reduces and the norm's once a step, against
   * the dense twin's 10 + 1; full checkpointing repeats 2 forward ones of
   * the dense block and 1 of the MoE block. */
  aa_strategy_default(&s);
  s.degree[AA_AXIS_TENSOR] = 2, s.micro_batch = 2;
  aa_cost_comm_t c;
  aa_cost_comm(&a, &s, 1, &c);
  CHECK_MSG(c.tensor.kind[AA_COST_ALL_REDUCE].calls == 8 + 1, "%llu",
            (unsigned long long)c.tensor.kind[AA_COST_ALL_REDUCE].calls);
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm(&a, &s, 1, &c);
  CHECK(c.tensor.kind[AA_COST_ALL_REDUCE].calls == 8 + 3 + 1);
  aa_arch_t dense = a;
  dense.moe = (aa_moe_t){0};
  s.ckpt = AA_CKPT_NONE;
  aa_cost_comm(&dense, &s, 1, &c);
  CHECK(c.tensor.kind[AA_COST_ALL_REDUCE].calls == 10 + 1);

  /* The experts split over the 2 tensor ranks (expert_tensor_parallel_size
   * 2): a token passes half of each of its 2 routed and 1 shared experts'
   * 3·24·32 weights on a rank, 3 x 3·12·32 = 3,456 fewer, 6 FLOPs each;
   * the MoE block's MLP reductions come back as a dense block's (its
   * output forward, its input gradient backward: the twin's 10 all-reduces
   * of N·C = 32·32) plus one of the routing weights' gradients (N·k = 64
   * floats). Under sequence parallelism the output and the input gradient
   * are reduce-scatters of N·C (the rank keeps its rows of each). */
  aa_strategy_default(&s);
  s.degree[AA_AXIS_TENSOR] = 2, s.micro_batch = 2;
  const double whole = aa_cost_flops_per_token(&a, &s), least = aa_cost_min_flops_per_token(&a, &s);
  s.etp = 2;
  CHECK_MSG(aa_cost_flops_per_token(&a, &s) == whole - 6.0 * 3 * 3 * 12 * 32, "%g vs %g",
            aa_cost_flops_per_token(&a, &s), whole);
  /* The lower bound (the model's useful work over tp) was already split. */
  CHECK(aa_cost_min_flops_per_token(&a, &s) == least);
  aa_cost_comm(&a, &s, 1, &c);
  CHECK_MSG(c.tensor.kind[AA_COST_ALL_REDUCE].calls == 10 + 1 + 1 &&
                c.tensor.kind[AA_COST_ALL_REDUCE].elems == 10 * 1024 + 64 + 1,
            "%llu calls, %llu elements", (unsigned long long)c.tensor.kind[AA_COST_ALL_REDUCE].calls,
            (unsigned long long)c.tensor.kind[AA_COST_ALL_REDUCE].elems);
  aa_cost_comm_t w;
  s.sp = 1;
  aa_cost_comm(&a, &s, 1, &c);
  s.etp = 0;
  aa_cost_comm(&a, &s, 1, &w);
  CHECK(c.tensor.kind[AA_COST_REDUCE_SCATTER].calls == w.tensor.kind[AA_COST_REDUCE_SCATTER].calls + 2 &&
        c.tensor.kind[AA_COST_REDUCE_SCATTER].elems ==
            w.tensor.kind[AA_COST_REDUCE_SCATTER].elems + 2 * 1024 &&
        c.tensor.kind[AA_COST_ALL_REDUCE].calls == w.tensor.kind[AA_COST_ALL_REDUCE].calls + 1 &&
        c.tensor.kind[AA_COST_ALL_REDUCE].elems == w.tensor.kind[AA_COST_ALL_REDUCE].elems + 64);
  /* Its bytes per rank are sizes.h's with the experts halved. */
  aa_cost_mem_t m1, m2;
  aa_cost_memory(&a, &s, 1, &m1);
  s.etp = 2;
  aa_cost_memory(&a, &s, 1, &m2);
  CHECK(m1.bytes[AA_MEM_PARAMS] - m2.bytes[AA_MEM_PARAMS] == 4 * 5 * 3 * 12 * 32);
}

AA_TEST(a_strategy_with_more_work_than_a_measured_one_is_dominated) {
  char why[256];
  aa_strategy_t base = strat(2, 2, AA_F32, AA_CKPT_NONE, 4);
  struct {
    aa_strategy_t s;
    int cpu, cuda;      /* dominated by base on a CPU pool, on a GPU pool */
    const char *why;    /* on a CPU pool */
  } cases[] = {
      {strat(2, 2, AA_F32, AA_CKPT_SELECTIVE, 4), 1, 1, "selective checkpointing instead of none"},
      {strat(2, 2, AA_F32, AA_CKPT_FULL, 4), 1, 1, "full checkpointing instead of none"},
      {strat(2, 3, AA_F32, AA_CKPT_NONE, 4), 1, 1, "ZeRO 3 instead of 2"},
      {strat(2, 2, AA_BF16, AA_CKPT_NONE, 4), 1, 0, "bf16 storage on a CPU instead of fp32"},
      {strat(2, 3, AA_F16, AA_CKPT_FULL, 4), 1, 0,
       "full checkpointing instead of none, ZeRO 3 instead of 2, fp16 storage on a CPU instead of fp32"},
      {strat(2, 3, AA_BF16, AA_CKPT_FULL, 4), 1, 0, NULL}, /* on a GPU: the amp is not comparable */
      {base, 0, 0, NULL},                                  /* the same strategy does not beat itself */
      {strat(2, 1, AA_F32, AA_CKPT_FULL, 4), 0, 0, NULL},  /* ZeRO 1 vs 2: not ordered */
      {strat(2, 2, AA_F32, AA_CKPT_FULL, 2), 0, 0, NULL},  /* another micro-batch */
      {strat(1, 0, AA_F32, AA_CKPT_FULL, 4), 0, 0, NULL},  /* another dp */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char key[AA_STRATEGY_KEY_MAX];
    aa_strategy_key(&cases[i].s, key);
    CHECK_MSG(aa_cost_dominated(&cases[i].s, &base, 0, why, sizeof why) == cases[i].cpu, "%s on a CPU", key);
    CHECK_MSG(aa_cost_dominated(&cases[i].s, &base, 1, NULL, 0) == cases[i].cuda, "%s on a GPU", key);
    if (cases[i].cpu && cases[i].why) CHECK_MSG(!strcmp(why, cases[i].why), "%s: \"%s\"", key, why);
    /* Nothing cheaper is ever dominated by something costlier. */
    if (cases[i].cpu) CHECK(!aa_cost_dominated(&base, &cases[i].s, 0, NULL, 0));
  }
  /* Sequence parallelism trades memory for other collectives: not ordered
   * against tensor parallelism without it, whatever the other knobs. */
  aa_strategy_t tp = strat(2, 2, AA_F32, AA_CKPT_NONE, 4), sp = strat(2, 2, AA_F32, AA_CKPT_FULL, 4);
  tp.degree[AA_AXIS_TENSOR] = sp.degree[AA_AXIS_TENSOR] = 2;
  CHECK(aa_cost_dominated(&sp, &tp, 0, NULL, 0));
  sp.sp = 1;
  CHECK(!aa_cost_dominated(&sp, &tp, 0, NULL, 0) && !aa_cost_dominated(&tp, &sp, 0, NULL, 0));
  /* Another context degree trades per-token work for ring steps: never
   * compared, whichever costs more otherwise; within one degree the knobs
   * order as before. */
  aa_strategy_t c1 = strat(2, 2, AA_F32, AA_CKPT_NONE, 4), c2 = strat(2, 2, AA_F32, AA_CKPT_FULL, 4);
  c2.degree[AA_AXIS_CONTEXT] = 2;
  CHECK(!aa_cost_dominated(&c2, &c1, 0, NULL, 0) && !aa_cost_dominated(&c1, &c2, 0, NULL, 0));
  c1.degree[AA_AXIS_CONTEXT] = 2;
  CHECK(aa_cost_dominated(&c2, &c1, 0, NULL, 0) && !aa_cost_dominated(&c1, &c2, 0, NULL, 0));
  /* Full checkpointing of different block counts is not ordered here. */
  aa_strategy_t f1 = strat(1, 0, AA_F32, AA_CKPT_FULL, 4), f2 = f1;
  f1.ckpt_layers = 1;
  CHECK(!aa_cost_dominated(&f2, &f1, 0, NULL, 0) && !aa_cost_dominated(&f1, &f2, 0, NULL, 0));
  /* A truncated reason stays a terminated string. */
  char small[12];
  CHECK(aa_cost_dominated(&cases[4].s, &base, 0, small, sizeof small) && strlen(small) == sizeof small - 1);
}

/* Per-rank FLOPs: a tensor rank does 1/tp of the weight GEMMs (the lower
 * bound splits evenly: 741,408,768 / 2 for GPT-2 124M at tp 2) and of
 * attention. The exact per-rank figure at tp > 1 follows the rank's own
 * parameter count (strategies/sizes.h), so it is held here only to the
 * bound and to tp 1. */
AA_TEST(flops_are_per_rank_and_split_over_the_tensor_group) {
  const aa_arch_t gpt2 = {.family = "gpt2",
                          .n_layer = 12,
                          .n_head = 12,
                          .d_model = 768,
                          .d_ff = 3072,
                          .seq_len = 1024,
                          .vocab_size = 50304};
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_TENSOR] = 2;
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 / 2);
  s.sp = 1; /* sequence parallelism moves LayerNorm work, not GEMMs */
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 / 2);
  s.degree[AA_AXIS_TENSOR] = 4;
  s.ckpt = AA_CKPT_FULL;
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == (741408768.0 + 169869312.0) / 4);
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) < aa_cost_flops_per_token(&gpt2, &s));
  /* dp does not change a rank's work per token of its replica. */
  s.degree[AA_AXIS_DATA] = 8;
  s.degree[AA_AXIS_TENSOR] = 1;
  s.sp = 0;
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0 + 207857664.0);
  /* Nor does cp a rank's work per token it holds: each query attends over
   * its whole prefix, the chunks balance the causal work (a context rank
   * holds 1 / cp of the replica's tokens: cost.h). */
  s.degree[AA_AXIS_CONTEXT] = 4;
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0 + 207857664.0);
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 + 169869312.0);
  s.degree[AA_AXIS_CONTEXT] = 2;
  s.degree[AA_AXIS_TENSOR] = 2;
  s.ckpt = AA_CKPT_NONE;
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 / 2);
}

static aa_cost_calls_t calls(uint64_t n, uint64_t elems, uint64_t bytes) {
  return (aa_cost_calls_t){.calls = n, .elems = elems, .bytes = bytes};
}

/* Group g's figures against the collectives wanted and no sends or
 * receives (check_p2p for those). */
static void check_p2p(int line, const aa_cost_group_t *g, int ranks, aa_cost_calls_t ar, aa_cost_calls_t ag,
                      aa_cost_calls_t rs, aa_cost_calls_t send, aa_cost_calls_t recv) {
  const aa_cost_calls_t want[AA_COST_COLLECTIVES] = {ar, ag, rs, send, recv};
  static const char *const names[] = {"all-reduce", "all-gather", "reduce-scatter", "send", "receive"};
  CHECK_MSG(g->ranks == ranks, "line %d: %d ranks", line, g->ranks);
  for (int k = 0; k < AA_COST_COLLECTIVES; k++)
    CHECK_MSG(g->kind[k].calls == want[k].calls && g->kind[k].elems == want[k].elems &&
                  g->kind[k].bytes == want[k].bytes,
              "line %d: %s: %llu calls, %llu elements, %llu bytes; want %llu, %llu, %llu", line, names[k],
              (unsigned long long)g->kind[k].calls, (unsigned long long)g->kind[k].elems,
              (unsigned long long)g->kind[k].bytes, (unsigned long long)want[k].calls,
              (unsigned long long)want[k].elems, (unsigned long long)want[k].bytes);
  CHECK(g->bytes == ar.bytes + ag.bytes + rs.bytes + send.bytes + recv.bytes);
}

static void check_group(int line, const aa_cost_group_t *g, int ranks, aa_cost_calls_t ar, aa_cost_calls_t ag,
                        aa_cost_calls_t rs) {
  check_p2p(line, g, ranks, ar, ag, rs, calls(0, 0, 0), calls(0, 0, 0));
}

/* Expert parallelism on the MoE llama of the FLOPs test above at dp 4,
 * ep 2, micro-batch 2 (N = 32 tokens a rank), two micro-batches a step. The MoE block's 4
 * experts top-2 take ceil(32·2 / 4) = 16 rows each from a rank; a rank
 * holds El = 2 of them. The expert group (2 ranks) per micro-batch: one
 * counts exchange (the 2 local experts' counts to each of 2 peers, two
 * floats each: 8 floats, 32 bytes) and 4 row all-to-alls, each of every
 * local expert's rows at once: 2 experts x 2·16 rows x 32 = 2,048 floats;
 * so a step 2 + 8 calls, 16 + 16,384 elements, 64 + 65,536 bytes, and the
 * norm's all-reduce (1 float). The
 * expert-data group (4 / 2 = 2 ranks): the 2 local experts' 2·3·24·32 =
 * 4,608 gradients. The data group (4 ranks): the loss, wte 2,048, the MoE
 * block's dense runs before the experts (2·32 + 64·32 + 32² + 4·32 =
 * 3,264) and after (the shared expert's 2,304), the dense block's 9,280
 * and lnf|head's 2,080: 6 all-reduces of 18,977 floats. Full
 * checkpointing recomputes the MoE block's forward: 1 counts and 2 row
 * all-to-alls more a micro-batch. */
AA_TEST(the_expert_groups_move_what_the_dispatcher_and_zero_0_and_2_call) {
  aa_arch_t a = tiny_moe();
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 4, s.micro_batch = 2, s.ep = 2;
  aa_cost_comm_t c;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.expert.ranks == 2 && c.expert_data.ranks == 2);
  const aa_cost_calls_t *x = &c.expert.kind[AA_COST_ALL_TO_ALL];
  CHECK_MSG(x->calls == 10 && x->elems == 16400 && x->bytes == 65600, "%llu %llu %llu",
            (unsigned long long)x->calls, (unsigned long long)x->elems, (unsigned long long)x->bytes);
  CHECK(c.expert.kind[AA_COST_ALL_REDUCE].calls == 1 && c.expert.kind[AA_COST_ALL_REDUCE].bytes == 4);
  CHECK(c.expert.bytes == 65604);
  /* An all-to-all keeps 1/2 of its buffer at home. */
  CHECK(aa_cost_comm_ring_bytes(&c.expert) == 0.5 * (2 * 4 + 65600));
  check_group(__LINE__, &c.expert_data, 2, calls(1, 4608, 18432), calls(0, 0, 0), calls(0, 0, 0));
  check_group(__LINE__, &c.data, 4, calls(6, 18977, 75908), calls(0, 0, 0), calls(0, 0, 0));
  /* ZeRO 2: each piece reduce-scattered over its group every micro-batch
   * (its padded chunks) and all-gathered once a step: the data group's 5
   * dense pieces (18,976 elements, each a multiple of 4) besides the
   * loss's and the norm's all-reduces, the expert-data group's expert
   * slices (4,608 over 2 ranks). */
  s.zero = 2;
  aa_cost_comm(&a, &s, 2, &c);
  check_group(__LINE__, &c.expert_data, 2, calls(0, 0, 0), calls(1, 4608, 18432), calls(2, 9216, 36864));
  check_group(__LINE__, &c.data, 4, calls(2, 2, 8), calls(5, 18976, 75904), calls(10, 37952, 151808));
  s.zero = 0;
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.expert.kind[AA_COST_ALL_TO_ALL].calls == 10 + 2 * (1 + 2));
  /* At dp 2 the expert-data group is a group of one: nothing; the data
   * group's runs the same. */
  s.ckpt = AA_CKPT_NONE, s.degree[AA_AXIS_DATA] = 2;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.expert_data.ranks == 1 && c.expert_data.bytes == 0);
  CHECK(c.data.kind[AA_COST_ALL_REDUCE].elems == 18977);
  /* ep 1: groups of one, the data group as before. */
  s.ep = 1, s.degree[AA_AXIS_DATA] = 4;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.expert.ranks == 1 && c.expert.bytes == 0 && c.expert_data.bytes == 0);
  check_group(__LINE__, &c.data, 4, calls(5, 1 + 2048 + 14784 + 9280 + 2080, 4 * 28193), calls(0, 0, 0),
              calls(0, 0, 0));
}

/* Context parallelism on the MoE llama above (2 layers, the second MoE,
 * 4 experts) at cp 2, micro-batch 2, two micro-batches a step: besides
 * its ring steps (2 blocks x (3 cp - 3) = 6 a micro-batch), the context
 * group all-reduces the MoE block's load-balancing sums, 3 E = 12 floats,
 * once a micro-batch (engine/model.c moe_context_reduce): 2 calls of 12;
 * full checkpointing recomputes the block's forward, which makes it
 * again: 4 calls. With a capacity factor the block also gathers every
 * rank's slot counts per chunk and expert (moe_context_keep): cp 2B E =
 * 2 x 4 x 4 = 32 int32 a call, as often (2 calls, 4 with the recompute);
 * dropless, no gather. The dense
 * twin's context group has no all-reduce. */
AA_TEST(the_context_group_all_reduces_the_moe_load_balancing_sums) {
  aa_arch_t a = tiny_moe();
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_CONTEXT] = 2, s.micro_batch = 2;
  aa_cost_comm_t c;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.context.ranks == 2);
  const aa_cost_calls_t *r = &c.context.kind[AA_COST_ALL_REDUCE];
  CHECK_MSG(r->calls == 2 && r->elems == 24 && r->bytes == 96, "%llu %llu %llu", (unsigned long long)r->calls,
            (unsigned long long)r->elems, (unsigned long long)r->bytes);
  CHECK(c.context.kind[AA_COST_SEND].calls == 2 * 2 * 3);
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.context.kind[AA_COST_ALL_REDUCE].calls == 4 && c.context.kind[AA_COST_ALL_REDUCE].elems == 48);
  CHECK(c.context.kind[AA_COST_ALL_GATHER].calls == 0);
  a.moe.capacity_factor = 1.25f;
  aa_cost_comm(&a, &s, 2, &c);
  const aa_cost_calls_t *ga = &c.context.kind[AA_COST_ALL_GATHER];
  CHECK_MSG(ga->calls == 4 && ga->elems == 4 * 32 && ga->bytes == 4 * 32 * 4, "%llu %llu %llu",
            (unsigned long long)ga->calls, (unsigned long long)ga->elems, (unsigned long long)ga->bytes);
  CHECK(c.context.kind[AA_COST_ALL_REDUCE].calls == 4);
  s.ckpt = AA_CKPT_NONE;
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.context.kind[AA_COST_ALL_GATHER].calls == 2 && c.context.kind[AA_COST_ALL_GATHER].elems == 2 * 32);
  a.moe = (aa_moe_t){0};
  aa_cost_comm(&a, &s, 2, &c);
  CHECK(c.context.kind[AA_COST_ALL_REDUCE].calls == 0 && c.context.kind[AA_COST_SEND].calls == 12);
}

/* The data group, on archs[0] (L 3, C 32, F 64, T 16, V 64): units wte|wpe
 * (64 + 16) x 32 = 2,560, three blocks of 4·32² + 2·64·32 + 9·32 + 64 =
 * 8,544 and lnf 64; 28,256 in all. Over dp 3 the chunks are 854, 2,848 and
 * 22: padded units of 2,562, 8,544 and 66, 28,260 in all. Two micro-batches
 * a step. */
AA_TEST(the_data_group_moves_what_each_zero_stage_schedules) {
  const aa_arch_t *a = &archs[0];
  aa_cost_comm_t c;
  aa_strategy_t s = strat(3, 0, AA_F32, AA_CKPT_NONE, 2);
  /* Stage 0: the loss (1 float) and each unit's gradient, once a step. */
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 3, calls(6, 28257, 113028), calls(0, 0, 0), calls(0, 0, 0));
  check_group(__LINE__, &c.tensor, 1, calls(0, 0, 0), calls(0, 0, 0), calls(0, 0, 0));
  /* A ring sends 2 x 2/3 of an all-reduce's bytes. */
  CHECK(aa_cost_comm_ring_bytes(&c.data) == 150704.0 && aa_cost_comm_ring_bytes(&c.tensor) == 0);
  /* Stage 1: the loss and the norm; each padded unit reduce-scattered and
   * its parameters gathered, once a step. */
  s.zero = 1;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(5, 28260, 113040), calls(5, 28260, 113040));
  /* Stage 2: the reduce-scatter every micro-batch. */
  s.zero = 2;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(5, 28260, 113040), calls(10, 56520, 226080));
  /* Stage 3: no gather after the step, but the parameters before the
   * passes: all 5 units in the first forward, blocks 1 and 0 in its
   * backward, blocks 1, 2 forward and 1, 0 backward in the second
   * micro-batch: 11 gathers, 28,260 + 6 x 8,544 = 79,524 elements. */
  s.zero = 3;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(11, 79524, 318096), calls(10, 56520, 226080));
  /* ... which under amp are 16-bit. */
  s.amp = AA_BF16;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(11, 79524, 159048), calls(10, 56520, 226080));
  /* One micro-batch a step: every unit once, and the blocks but the last
   * in the backward. */
  aa_cost_comm(a, &s, 1, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(7, 28260 + 2 * 8544, 2 * (28260 + 2 * 8544)),
              calls(5, 28260, 113040));
  /* A group of one moves nothing, whatever the stage. */
  s = strat(1, 3, AA_F32, AA_CKPT_NONE, 2);
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 1, calls(0, 0, 0), calls(0, 0, 0), calls(0, 0, 0));
  CHECK(aa_cost_comm_ring_bytes(&c.data) == 0);
  char d[160];
  aa_cost_group_describe(&c.data, d, sizeof d);
  CHECK(!strcmp(d, "nothing"));
}

/* The tensor group, on archs[0] at tp 2 with micro-batches of 2 sequences:
 * N = 32 tokens, N·C = 1,024 floats; two micro-batches a step. These
 * figures need no tensor-parallel engine: they are the schedule alone. */
AA_TEST(the_tensor_group_moves_what_the_tensor_parallel_schedule_says) {
  const aa_arch_t *a = &archs[0];
  aa_cost_comm_t c;
  aa_strategy_t s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_TENSOR] = 2;
  /* Without sequence parallelism, per micro-batch: 1 + 2·3 + 2·3 + 1 = 14
   * all-reduces of 1,024 and the cross-entropy's all-gather of 3 x 32
   * floats a rank (size 192); the norm once a step. */
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.tensor, 2, calls(29, 28 * 1024 + 1, 4 * (28 * 1024 + 1)), calls(2, 384, 1536),
              calls(0, 0, 0));
  check_group(__LINE__, &c.data, 1, calls(0, 0, 0), calls(0, 0, 0), calls(0, 0, 0));
  /* A ring over two ranks sends half of each gather and a whole all-reduce. */
  CHECK(aa_cost_comm_ring_bytes(&c.tensor) == 115460.0);
  char d[160];
  aa_cost_group_describe(&c.tensor, d, sizeof d);
  CHECK_MSG(!strcmp(d, "29 all-reduces (112.0 KiB), 2 all-gathers (1.5 KiB)"), "%s", d);
  /* Full checkpointing runs each block's 2 forward all-reduces again. */
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.tensor, 2, calls(41, 40 * 1024 + 1, 4 * (40 * 1024 + 1)), calls(2, 384, 1536),
              calls(0, 0, 0));
  s.ckpt_layers = 1;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.tensor, 2, calls(33, 32 * 1024 + 1, 4 * (32 * 1024 + 1)), calls(2, 384, 1536),
              calls(0, 0, 0));
  /* With sequence parallelism, per micro-batch: 1 + 6 + 6 + 1 = 14
   * reduce-scatters of size 1,024; 6 + 12 + 2 + 1 = 21 all-gathers of size
   * 1,024 and the cross-entropy's; all-reduces of 3 blocks' LayerNorm grads
   * (128 floats) and lnf's (64); the norm once a step. */
  s.ckpt = AA_CKPT_NONE;
  s.ckpt_layers = 0;
  s.sp = 1;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.tensor, 2, calls(9, 6 * 128 + 2 * 64 + 1, 4 * 897),
              calls(44, 42 * 1024 + 384, 4 * (42 * 1024 + 384)), calls(28, 28 * 1024, 4 * 28 * 1024));
  CHECK(aa_cost_comm_ring_bytes(&c.tensor) == 147716.0);
  /* Full checkpointing repeats each block's 2 gathers and 2 scatters. */
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm(a, &s, 1, &c);
  check_group(__LINE__, &c.tensor, 2, calls(5, 3 * 128 + 64 + 1, 4 * 449),
              calls(28, 27 * 1024 + 192, 4 * (27 * 1024 + 192)), calls(20, 20 * 1024, 4 * 20 * 1024));
  /* dp 2 x tp 2: each group its own; the tensor group's figures are a
   * micro-batch's, whatever dp. */
  aa_strategy_t t = s;
  t.degree[AA_AXIS_DATA] = 2;
  aa_cost_comm_t both;
  aa_cost_comm(a, &t, 1, &both);
  CHECK(both.data.ranks == 2 && both.data.bytes > 0 && both.tensor.bytes == c.tensor.bytes);
}

/* The context group (engine/model.c ring_forward, ring_backward), on
 * archs[0] (gpt2, L 3, C 32, T 16: keys and values 2 KVl = 64 wide) with
 * micro-batches of 2 sequences, 2 a step. A ring step sends the rank's
 * keys and values (the k|v columns of its q|k|v rows, packed) to the next
 * rank and receives the previous one's: N·2 KVl floats with N = 2·16 / cp
 * the rank's tokens. Per micro-batch and block, cp - 1 steps forward and
 * 2 cp - 2 backward (cp - 1 for the blocks, cp - 2 for the travelling
 * key/value gradients, 1 home), cp - 1 more for a recomputed block:
 *   cp 2: N = 16, 1,024 floats a step; 2 x 3 x (1 + 2) = 18 steps, 18,432
 *     floats each way; full checkpointing 2 x (3 x 3 + 3 x 1) = 24;
 *   cp 4: N = 8, 512 floats; 2 x 3 x (3 + 6) = 54 steps, 27,648 floats;
 *   cp 2 x tp 2: 2 KVl = 32, 512 floats; 18 steps, 9,216 floats;
 *   llama (archs[2], 2 n_kv_head = 2 x 2 heads of 8 = 32) at cp 2: 512
 *     floats.
 * Each a send and a receive in fp32 whatever the amp. */
AA_TEST(the_context_group_passes_each_blocks_keys_and_values_around_the_ring) {
  const aa_arch_t *a = &archs[0];
  const aa_cost_calls_t none = calls(0, 0, 0);
  aa_cost_comm_t c;
  aa_strategy_t s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_CONTEXT] = 2;
  aa_cost_comm(a, &s, 2, &c);
  check_p2p(__LINE__, &c.context, 2, none, none, none, calls(18, 18432, 73728), calls(18, 18432, 73728));
  CHECK(aa_cost_comm_ring_bytes(&c.context) == 73728.0);
  char d[160];
  aa_cost_group_describe(&c.context, d, sizeof d);
  CHECK_MSG(!strcmp(d, "18 sends (72.0 KiB), 18 receives (72.0 KiB)"), "%s", d);
  s.amp = AA_BF16;
  aa_cost_comm(a, &s, 2, &c);
  check_p2p(__LINE__, &c.context, 2, none, none, none, calls(18, 18432, 73728), calls(18, 18432, 73728));
  s.ckpt = AA_CKPT_FULL;
  aa_cost_comm(a, &s, 2, &c);
  check_p2p(__LINE__, &c.context, 2, none, none, none, calls(24, 24576, 98304), calls(24, 24576, 98304));
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_CONTEXT] = 4;
  aa_cost_comm(a, &s, 2, &c);
  check_p2p(__LINE__, &c.context, 4, none, none, none, calls(54, 27648, 110592), calls(54, 27648, 110592));
  s.degree[AA_AXIS_CONTEXT] = 2;
  s.degree[AA_AXIS_TENSOR] = 2;
  aa_cost_comm(a, &s, 2, &c);
  check_p2p(__LINE__, &c.context, 2, none, none, none, calls(18, 9216, 36864), calls(18, 9216, 36864));
  /* The tensor group's activations are the rank's N = 16 tokens (N·C =
   * 512): per micro-batch 1 + 6 + 6 + 1 = 14 all-reduces of 512 and the
   * cross-entropy's gather of 3 x 16 x 2; the norm once a step. */
  check_group(__LINE__, &c.tensor, 2, calls(29, 28 * 512 + 1, 4 * (28 * 512 + 1)), calls(2, 192, 768), none);
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_CONTEXT] = 2;
  aa_cost_comm(&archs[2], &s, 2, &c);
  check_p2p(__LINE__, &c.context, 2, none, none, none, calls(18, 18 * 512, 18 * 2048),
            calls(18, 18 * 512, 18 * 2048));
  /* A pipeline stage's activations are its rank's tokens too: half of
   * cp 1's at cp 2 (archs[0] cut in three, the middle stage). */
  aa_cost_comm_t one, two;
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_PIPELINE] = 3;
  aa_cost_comm_stage(a, &s, 4, 1, &one);
  s.degree[AA_AXIS_CONTEXT] = 2;
  aa_cost_comm_stage(a, &s, 4, 1, &two);
  CHECK(one.pipeline.bytes == 65536 && two.pipeline.bytes == 32768 &&
        two.pipeline.kind[AA_COST_SEND].calls == one.pipeline.kind[AA_COST_SEND].calls);
  CHECK(two.context.kind[AA_COST_SEND].calls == 4 * 1 * 3 && one.context.ranks == 1 &&
        one.context.bytes == 0);
  /* At cp 1 the group is one rank and moves nothing. */
  s = strat(2, 0, AA_F32, AA_CKPT_NONE, 2);
  aa_cost_comm(a, &s, 2, &c);
  check_p2p(__LINE__, &c.context, 1, none, none, none, none, none);
}

/* The data group under context parallelism is the dp x cp replicas (the
 * engine's ZeRO group): at dp 1 x cp 2 the loss and each unit's gradient
 * are all-reduced over 2 ranks as over dp 2 (archs[0]: 28,256 + 1 floats),
 * and ZeRO 1 shards over them: chunks of 1,280, 4,272 and 32, padded
 * units adding up to 28,256. */
AA_TEST(the_data_group_spans_the_data_and_context_ranks) {
  const aa_arch_t *a = &archs[0];
  const aa_cost_calls_t none = calls(0, 0, 0);
  aa_cost_comm_t c;
  aa_strategy_t s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_CONTEXT] = 2;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 2, calls(6, 28257, 113028), none, none);
  s.zero = 1;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 2, calls(2, 2, 8), calls(5, 28256, 113024), calls(5, 28256, 113024));
  /* dp 3 x cp 2: 6 ranks, chunks of 427, 1,424 and 11 (the padded units of
   * 2,562, 8,544 and 66). */
  s.degree[AA_AXIS_DATA] = 3;
  aa_cost_comm(a, &s, 2, &c);
  check_group(__LINE__, &c.data, 6, calls(2, 2, 8), calls(5, 28260, 113040), calls(5, 28260, 113040));
}

/* Per pipeline stage, GPT-2 124M cut in two (6 blocks a stage): the first
 * runs 6 blocks (6 x 7,087,872 x 6 + 12·6·768·1024 = 311,786,496), the
 * last the same plus the tied head and lnf, 6 x ((50,304 + 1,024)·768 +
 * 1,536) = 236,528,640: 548,315,136, the figure of the strategy (its most
 * loaded stage). The stages add up to the whole model's 860,101,632. The
 * lower bound: 6 x 6 x 7,077,888 = 254,803,968 a stage, and the last
 * 6·50,304·768 = 231,800,832 more. */
AA_TEST(flops_per_token_are_per_pipeline_stage_and_add_up_to_the_model) {
  const aa_arch_t gpt2 = {
      .family = "gpt2", .n_layer = 12, .n_head = 12, .d_model = 768, .d_ff = 3072, .seq_len = 1024, .vocab_size = 50304};
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_PIPELINE] = 2;
  CHECK(aa_cost_flops_per_token_stage(&gpt2, &s, 0) == 311786496.0);
  CHECK(aa_cost_flops_per_token_stage(&gpt2, &s, 1) == 548315136.0);
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 548315136.0);
  CHECK(aa_cost_min_flops_per_token_stage(&gpt2, &s, 0) == 254803968.0);
  CHECK(aa_cost_min_flops_per_token_stage(&gpt2, &s, 1) == 254803968.0 + 231800832.0);
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 254803968.0 + 231800832.0);
  /* Outside the pipeline, or a strategy its rules refuse: nothing. */
  CHECK(aa_cost_flops_per_token_stage(&gpt2, &s, 2) == 0 && aa_cost_flops_per_token_stage(&gpt2, &s, -1) == 0);
  s.vpp = 2; /* without the interleaved schedule */
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 0 && aa_cost_min_flops_per_token(&gpt2, &s) == 0);
  /* Every cut, schedule and checkpointing mode: the stages sum to pp 1's. */
  const aa_arch_t deep = {.family = "gpt2", .n_layer = 6, .n_head = 4, .d_model = 32, .d_ff = 64, .seq_len = 16,
                          .vocab_size = 64};
  const int shapes[][3] = {{2, 1, 0}, {3, 1, 0}, {2, 1, 1}, {4, 1, 1}, {2, 2, 0}, {3, 2, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int k = 0; k < 4; k++)
      for (int tp = 1; tp <= 2; tp++) {
        aa_strategy_default(&s);
        s.degree[AA_AXIS_TENSOR] = tp;
        s.ckpt = ckpts[k].ckpt;
        s.ckpt_layers = ckpts[k].layers;
        const double whole = aa_cost_flops_per_token(&deep, &s), whole_min = aa_cost_min_flops_per_token(&deep, &s);
        s.degree[AA_AXIS_PIPELINE] = shapes[i][0];
        s.vpp = shapes[i][1];
        s.schedule = s.vpp > 1 ? AA_SCHEDULE_INTERLEAVED : AA_SCHEDULE_1F1B;
        s.partition = shapes[i][2] ? AA_PARTITION_PARAMETERS : AA_PARTITION_UNIFORM;
        double sum = 0, sum_min = 0, most = 0;
        for (int st = 0; st < s.degree[AA_AXIS_PIPELINE]; st++) {
          const double f = aa_cost_flops_per_token_stage(&deep, &s, st);
          CHECK(f > 0 && aa_cost_min_flops_per_token_stage(&deep, &s, st) < f);
          sum += f;
          sum_min += aa_cost_min_flops_per_token_stage(&deep, &s, st);
          if (f > most) most = f;
        }
        CHECK_MSG(sum == whole && sum_min == whole_min,
                  "pp %d vpp %d %s/%d tp %d: stages %.0f (%.0f), model %.0f "
                  "(%.0f)",
                  s.degree[AA_AXIS_PIPELINE], s.vpp, aa_ckpt_mode_name(s.ckpt), s.ckpt_layers, tp, sum,
                  sum_min, whole, whole_min);
        CHECK(aa_cost_flops_per_token(&deep, &s) == most);
      }
}

AA_TEST(the_bubble_is_megatrons) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK(aa_cost_bubble(&s, 8) == 0);
  s.degree[AA_AXIS_PIPELINE] = 4;
  CHECK_NEAR(aa_cost_bubble(&s, 8), 3.0 / 11, 1e-15);
  s.schedule = AA_SCHEDULE_GPIPE;
  CHECK_NEAR(aa_cost_bubble(&s, 8), 3.0 / 11, 1e-15);
  s.schedule = AA_SCHEDULE_INTERLEAVED;
  s.vpp = 2;
  /* The bubble's time divided by vpp: (pp - 1) / (vpp m + pp - 1). */
  CHECK_NEAR(aa_cost_bubble(&s, 8), 3.0 / 19, 1e-15);
}

/* The pipeline group on archs[0] (L 3, C 32, T 16, V 64) cut in three, one
 * block a stage, micro-batches of 2 sequences (N·C = 1,024 elements), 4
 * a step: the first stage sends each micro-batch's activations forward
 * and receives their gradient; the middle one also receives and sends
 * back; the last only the latter. The embedding group: the first and last
 * stage all-reduce wte|wpe's gradient, (64 + 16) x 32 = 2,560 floats. */
AA_TEST(the_pipeline_group_moves_activations_and_their_gradients) {
  const aa_arch_t *a = &archs[0];
  aa_strategy_t s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_PIPELINE] = 3;
  aa_cost_comm_t c[3];
  for (int st = 0; st < 3; st++) aa_cost_comm_stage(a, &s, 4, st, &c[st]);
  const aa_cost_calls_t none = calls(0, 0, 0), four = calls(4, 4096, 16384), eight = calls(8, 8192, 32768);
  check_p2p(__LINE__, &c[0].pipeline, 3, none, none, none, four, four);
  check_p2p(__LINE__, &c[1].pipeline, 3, none, none, none, eight, eight);
  check_p2p(__LINE__, &c[2].pipeline, 3, none, none, none, four, four);
  check_group(__LINE__, &c[0].embedding, 2, calls(1, 2560, 10240), none, none);
  check_group(__LINE__, &c[1].embedding, 1, none, none, none);
  check_group(__LINE__, &c[2].embedding, 2, calls(1, 2560, 10240), none, none);
  /* A send goes out whole; over the embedding group's 2 ranks an
   * all-reduce's ring sends its size once. */
  CHECK(aa_cost_comm_ring_bytes(&c[1].pipeline) == 32768.0 && aa_cost_comm_ring_bytes(&c[0].embedding) == 10240.0);
  char d[160];
  aa_cost_group_describe(&c[1].pipeline, d, sizeof d);
  CHECK_MSG(!strcmp(d, "8 sends (32.0 KiB), 8 receives (32.0 KiB)"), "%s", d);
  /* An all-to-all keeps 1/t of its buffer at home: over 4 ranks 3/4 of
   * 64 KiB leave a rank. */
  aa_cost_group_t x = {.ranks = 4};
  x.kind[AA_COST_ALL_TO_ALL] = (aa_cost_calls_t){.calls = 2, .elems = 16384, .bytes = 65536};
  CHECK(aa_cost_comm_ring_bytes(&x) == 49152.0);
  aa_cost_group_describe(&x, d, sizeof d);
  CHECK_MSG(!strcmp(d, "2 all-to-alls (64.0 KiB)"), "%s", d);
  /* The strategy's figures are the rank that moves the most: the middle one. */
  aa_cost_comm_t most;
  aa_cost_comm(a, &s, 4, &most);
  CHECK(most.pipeline.bytes == 65536 && most.embedding.bytes == 0);
  /* Under bf16 the activations go in 16 bits, their gradients in fp32;
   * sequence parallelism over tp 2 halves both. */
  s.amp = AA_BF16;
  aa_cost_comm_stage(a, &s, 4, 1, &c[1]);
  check_p2p(__LINE__, &c[1].pipeline, 3, none, none, none, calls(8, 8192, 4 * 2048 + 4 * 4096),
            calls(8, 8192, 4 * 2048 + 4 * 4096));
  s.degree[AA_AXIS_TENSOR] = 2;
  s.sp = 1;
  aa_cost_comm_stage(a, &s, 4, 1, &c[1]);
  check_p2p(__LINE__, &c[1].pipeline, 3, none, none, none, calls(8, 4096, 4 * 1024 + 4 * 2048),
            calls(8, 4096, 4 * 1024 + 4 * 2048));
  /* Interleaved, 2 chunks on each of 2 ranks (virtual stages 0-3), on
   * a 4-block model: rank 0 (stages 0 and 2) sends activations twice and
   * a gradient once per micro-batch and receives the others. */
  const aa_arch_t four_blocks = {.family = "gpt2", .n_layer = 4, .n_head = 4, .d_model = 32, .d_ff = 64,
                                 .seq_len = 16, .vocab_size = 64};
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_PIPELINE] = 2;
  s.vpp = 2;
  s.schedule = AA_SCHEDULE_INTERLEAVED;
  for (int st = 0; st < 2; st++) {
    aa_cost_comm_stage(&four_blocks, &s, 4, st, &c[st]);
    check_p2p(__LINE__, &c[st].pipeline, 2, none, none, none, calls(12, 12288, 49152), calls(12, 12288, 49152));
    check_group(__LINE__, &c[st].embedding, 2, calls(1, 2560, 10240), none, none);
  }
  /* A step the schedule does not suit (3 micro-batches over 2 ranks) or
   * a stage outside the pipeline: nothing. */
  aa_cost_comm_stage(&four_blocks, &s, 3, 0, &c[0]);
  CHECK(c[0].pipeline.ranks == 2 && c[0].pipeline.bytes == 0 && c[0].embedding.bytes == 0);
  aa_cost_comm_stage(&four_blocks, &s, 4, 2, &c[0]);
  CHECK(c[0].pipeline.bytes == 0 && c[0].data.bytes == 0);
  /* At pp 1 the group is one rank and moves nothing. */
  s = strat(2, 0, AA_F32, AA_CKPT_NONE, 2);
  aa_cost_comm(a, &s, 4, &c[0]);
  CHECK(c[0].pipeline.ranks == 1 && c[0].pipeline.bytes == 0 && c[0].embedding.ranks == 1 &&
        c[0].embedding.bytes == 0);
}

/* Under pipeline parallelism each rank's data group reduces only the
 * units it holds and its tensor group runs only its blocks' collectives.
 * archs[0] over dp 3 at ZeRO 0 cut in three: the first stage reduces
 * wte|wpe (2,560) and block 0 (8,544), the middle block 1, the last block
 * 2, the head's copy of wte|wpe and lnf (64), plus the loss (1 float). */
AA_TEST(the_data_and_tensor_groups_move_only_what_the_stage_holds) {
  const aa_arch_t *a = &archs[0];
  aa_strategy_t s = strat(3, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_PIPELINE] = 3;
  aa_cost_comm_t c;
  const aa_cost_calls_t none = calls(0, 0, 0);
  aa_cost_comm_stage(a, &s, 2, 0, &c);
  check_group(__LINE__, &c.data, 3, calls(3, 11105, 4 * 11105), none, none);
  aa_cost_comm_stage(a, &s, 2, 1, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 8545, 4 * 8545), none, none);
  aa_cost_comm_stage(a, &s, 2, 2, &c);
  check_group(__LINE__, &c.data, 3, calls(4, 11169, 4 * 11169), none, none);
  /* ZeRO 3 gathers a stage's one block once a step (its slot keeps it),
   * and wte|wpe where held: padded units of 2,562 and 8,544. */
  s.zero = 3;
  aa_cost_comm_stage(a, &s, 2, 0, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(2, 2562 + 8544, 4 * (2562 + 8544)),
              calls(4, 2 * (2562 + 8544), 8 * (2562 + 8544)));
  aa_cost_comm_stage(a, &s, 2, 1, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(1, 8544, 4 * 8544), calls(2, 2 * 8544, 8 * 8544));
  /* Two blocks a stage (4 blocks over pp 2, 2 micro-batches): the one
   * slot follows the plan. GPipe's first stage runs F0 F1 B0 B1: blocks
   * 0 1, 0 1, (1) 0, 1 0: 7 gathers. 1F1B's last runs F0 B0 F1 B1: 0 1,
   * (1) 0, (0) 1, (1) 0: 5, as the pp 1 rule 2L + 1 + 2(A - 1)(L - 1)
   * gives for L 2 and A 2 without the two ends' units. */
  const aa_arch_t four_blocks = {.family = "gpt2", .n_layer = 4, .n_head = 4, .d_model = 32, .d_ff = 64,
                                 .seq_len = 16, .vocab_size = 64};
  s.degree[AA_AXIS_PIPELINE] = 2;
  s.schedule = AA_SCHEDULE_GPIPE;
  aa_cost_comm_stage(&four_blocks, &s, 2, 0, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(8, 2562 + 7 * 8544, 4 * (2562 + 7 * 8544)),
              calls(6, 2 * (2562 + 2 * 8544), 8 * (2562 + 2 * 8544)));
  s.schedule = AA_SCHEDULE_1F1B;
  aa_cost_comm_stage(&four_blocks, &s, 2, 1, &c);
  check_group(__LINE__, &c.data, 3, calls(2, 2, 8), calls(7, 2562 + 66 + 5 * 8544, 4 * (2562 + 66 + 5 * 8544)),
              calls(8, 2 * (2562 + 2 * 8544 + 66), 8 * (2562 + 2 * 8544 + 66)));
  /* The tensor group over tp 2 (N·C = 1,024), per micro-batch: the first
   * stage the embedding's all-reduce and its block's 4, the middle its
   * block's, the last its block's, lnf's and the cross-entropy's gather
   * (size 192); the gradient norm once a step on each. */
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_TENSOR] = 2;
  s.degree[AA_AXIS_PIPELINE] = 3;
  aa_cost_comm_stage(a, &s, 2, 0, &c);
  check_group(__LINE__, &c.tensor, 2, calls(11, 10 * 1024 + 1, 4 * (10 * 1024 + 1)), none, none);
  aa_cost_comm_stage(a, &s, 2, 1, &c);
  check_group(__LINE__, &c.tensor, 2, calls(9, 8 * 1024 + 1, 4 * (8 * 1024 + 1)), none, none);
  aa_cost_comm_stage(a, &s, 2, 2, &c);
  check_group(__LINE__, &c.tensor, 2, calls(11, 10 * 1024 + 1, 4 * (10 * 1024 + 1)), calls(2, 384, 1536), none);
}

/* A small llama (L 2, NH 4, NKV 2, C 32, F 48, T 16, V 64; head size 8,
 * kv width 16): units wte 64 x 32 = 2,048, two blocks of ln1 32 + q|k|v
 * (32 + 2 x 16) x 32 + proj 32² + ln2 32 + gate|up|down 3 x 48 x 32 =
 * 7,744, and lnf.w|head.w 65 x 32 = 2,080: 19,616 in all. FLOPs per token:
 * 6 x (2 x 7,744 + 2,080) + 12·2·32·16 = 117,696, wte a lookup (the head
 * is head.w, in the last unit); per stage of two, 6 x 7,744 + 6,144 =
 * 52,608 and that plus 6 x 2,080 = 65,088. Full checkpointing adds 2 x
 * 7,744 + 4·32·16 = 17,536 a block. The lower bound: blocks of 32·64 +
 * 32² + 3·48·32 = 7,680 GEMM weights and the 64 x 32 head, 6 x 17,408 =
 * 104,448. */
static const aa_arch_t small_llama = {.family = "llama", .n_layer = 2, .n_head = 4, .n_kv_head = 2, .d_model = 32,
                                      .d_ff = 48, .seq_len = 16, .vocab_size = 64, .rope_theta = 10000,
                                      .norm_eps = 1e-5f};

AA_TEST(llama_flops_count_the_untied_head_not_the_embedding) {
  const aa_arch_t *a = &small_llama;
  CHECK(aa_arch_param_count(a) == 19616u);
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK(aa_cost_flops_per_token(a, &s) == 117696.0);
  CHECK(aa_cost_min_flops_per_token(a, &s) == 104448.0);
  s.ckpt = AA_CKPT_FULL;
  CHECK(aa_cost_flops_per_token(a, &s) == 117696.0 + 2 * 17536.0);
  CHECK(aa_cost_min_flops_per_token(a, &s) == 104448.0 + 2 * 2 * 7680.0);
  aa_strategy_default(&s);
  s.degree[AA_AXIS_PIPELINE] = 2;
  CHECK(aa_cost_flops_per_token_stage(a, &s, 0) == 52608.0);
  CHECK(aa_cost_flops_per_token_stage(a, &s, 1) == 65088.0);
  CHECK(aa_cost_flops_per_token(a, &s) == 65088.0);
  s.degree[AA_AXIS_TENSOR] = 2; /* the GEMMs split evenly; the head's 64 rows too */
  s.degree[AA_AXIS_PIPELINE] = 1;
  CHECK(aa_cost_min_flops_per_token(a, &s) == 104448.0 / 2);
}

/* The llama family's collectives: no embedding group at pp > 1 (its head
 * is untied and its last stage holds no wte), the data group reducing the
 * units each stage holds (the first wte 2,048 and block 0, 7,744; the last
 * block 1 and lnf.w|head.w 2,080), and the tensor group moving what gpt2's
 * does at the same C: per micro-batch 1 + 4 x 2 + 1 = 10 all-reduces of
 * N·C = 1,024 and the cross-entropy's all-gather (size 3 x 32 x 2). */
AA_TEST(llama_has_no_embedding_group_and_its_groups_move_its_units) {
  const aa_arch_t *a = &small_llama;
  const aa_cost_calls_t none = calls(0, 0, 0);
  aa_strategy_t s = strat(2, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_PIPELINE] = 2;
  aa_cost_comm_t c[2];
  for (int st = 0; st < 2; st++) {
    aa_cost_comm_stage(a, &s, 2, st, &c[st]);
    check_group(__LINE__, &c[st].embedding, 1, none, none, none);
    CHECK(c[st].pipeline.bytes > 0);
  }
  check_group(__LINE__, &c[0].data, 2, calls(3, 1 + 2048 + 7744, 4 * (1 + 2048 + 7744)), none, none);
  check_group(__LINE__, &c[1].data, 2, calls(3, 1 + 7744 + 2080, 4 * (1 + 7744 + 2080)), none, none);
  /* gpt2 cut the same way does all-reduce its tied copies. */
  const aa_arch_t gpt2 = {.family = "gpt2", .n_layer = 2, .n_head = 4, .d_model = 32, .d_ff = 48, .seq_len = 16,
                          .vocab_size = 64};
  aa_cost_comm_stage(&gpt2, &s, 2, 1, &c[1]);
  check_group(__LINE__, &c[1].embedding, 2, calls(1, 2560, 10240), none, none);
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_TENSOR] = 2;
  aa_cost_comm(a, &s, 2, &c[0]);
  check_group(__LINE__, &c[0].tensor, 2, calls(21, 20 * 1024 + 1, 4 * (20 * 1024 + 1)), calls(2, 384, 1536), none);
  aa_cost_comm(&gpt2, &s, 2, &c[1]);
  CHECK(c[0].tensor.bytes == c[1].tensor.bytes);
  s.sp = 1; /* the RMSNorm gradients travel in gpt2's 2C slots */
  aa_cost_comm(a, &s, 2, &c[0]);
  aa_cost_comm(&gpt2, &s, 2, &c[1]);
  CHECK(c[0].tensor.bytes == c[1].tensor.bytes && c[0].tensor.kind[AA_COST_ALL_REDUCE].calls == 2 * 3 + 1);
}

/* LoRA (issue 36) on small_llama with r 2 on q, v and down: adapters of
 * 2 (32 + 32) + 2 (32 + 16) + 2 (48 + 32) = 384 a block, 768 in all. The
 * base is frozen: held once in the storage precision, nothing else; the
 * adapters fp32 with a gradient and two moments (ZeRO shards those); the
 * workspace holds one target's A x and its gradient (2 N r floats) and
 * the widest target's output (N x 32 here). FLOPs:
 * 4 a base weight (forward and input gradient; 17,568 weights including
 * the head), r (8 in + 6 out) a target and token, the attention's 12 L C T
 * as before; the data group reduces the 768 adapters only. */
AA_TEST(lora_freezes_the_base_in_memory_flops_and_communication) {
  aa_arch_t a = small_llama;
  a.lora =
      (aa_lora_t){.r = 2, .alpha = 4, .targets = (1 << AA_LORA_Q) | (1 << AA_LORA_V) | (1 << AA_LORA_DOWN)};
  const size_t base = 19616, ad = 768;
  aa_strategy_t s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  size_t b[AA_MEM_NKINDS], full[AA_MEM_NKINDS];
  CHECK(aa_sizes_rank_states(&a, &s, 0, b) == 0);
  CHECK(b[AA_MEM_PARAMS] == 4 * (base + ad) && b[AA_MEM_GRADS] == 4 * ad && b[AA_MEM_OPTIM] == 8 * ad);
  CHECK(b[AA_MEM_ACTS] == 0 && b[AA_MEM_WORKSPACE] == 0);
  s.amp = AA_BF16; /* the base in 16 bits, no master copy */
  CHECK(aa_sizes_rank_states(&a, &s, 0, b) == 0);
  CHECK(b[AA_MEM_PARAMS] == 2 * base + 4 * ad && b[AA_MEM_GRADS] == 4 * ad && b[AA_MEM_OPTIM] == 8 * ad);
  s = strat(4, 1, AA_F32, AA_CKPT_NONE, 2);
  CHECK(aa_sizes_rank_states(&a, &s, 0, b) == 0 && b[AA_MEM_OPTIM] == 8 * 192 && b[AA_MEM_GRADS] == 4 * ad);
  s.zero = 3;
  CHECK(aa_sizes_rank_states(&a, &s, 0, b) == 0);
  CHECK(b[AA_MEM_PARAMS] == 4 * (base + 192) && b[AA_MEM_GRADS] == 4 * 192 && b[AA_MEM_OPTIM] == 8 * 192);
  CHECK(b[AA_MEM_WORKSPACE] == 2 * 4 * ad); /* the whole adapters and gradient the passes use (lora.h) */
  s = strat(1, 0, AA_F32, AA_CKPT_NONE, 2);
  CHECK(aa_sizes_rank_acts(&a, &s, 1, 0, b) == 0 && aa_sizes_rank_acts(&small_llama, &s, 1, 0, full) == 0);
  CHECK(b[AA_MEM_ACTS] == full[AA_MEM_ACTS] &&
        b[AA_MEM_WORKSPACE] == full[AA_MEM_WORKSPACE] + (2 * 2 + 32) * 32 * 4);
  const double lora = 2.0 * ((8 * 32 + 6 * 32) + (8 * 32 + 6 * 16) + (8 * 48 + 6 * 32));
  CHECK(aa_cost_flops_per_token(&a, &s) == 4 * 17568.0 + 2 * lora + 12.0 * 2 * 32 * 16);
  CHECK(aa_cost_flops_per_token(&a, &s) < aa_cost_flops_per_token(&small_llama, &s));
  s = strat(2, 0, AA_F32, AA_CKPT_NONE, 2);
  aa_cost_comm_t c;
  aa_cost_comm(&a, &s, 1, &c);
  CHECK(c.data.kind[AA_COST_ALL_REDUCE].calls == 2 && c.data.kind[AA_COST_ALL_REDUCE].bytes == 4 * (1 + ad));
  /* At tp 2 the tensor group sums the replicated halves (q's and v's A,
   * down's B: 3 x 2 x 32 = 192 a block, 384 in all) where the data group
   * reduces: once a step at ZeRO 1, after each of 3 micro-batches at ZeRO
   * 3 (engine/lora.c aa_lora_reduce). */
  aa_cost_comm_t z1, z3;
  s = strat(2, 1, AA_F32, AA_CKPT_NONE, 2);
  s.degree[AA_AXIS_TENSOR] = 2;
  aa_cost_comm(&a, &s, 3, &z1);
  s.zero = 3;
  aa_cost_comm(&a, &s, 3, &z3);
  const aa_cost_calls_t *r1 = &z1.tensor.kind[AA_COST_ALL_REDUCE], *r3 = &z3.tensor.kind[AA_COST_ALL_REDUCE];
  CHECK_MSG(r3->calls == r1->calls + 2 && r3->bytes == r1->bytes + 2 * 4 * 384,
            "calls %llu -> %llu, bytes %llu -> %llu", (unsigned long long)r1->calls,
            (unsigned long long)r3->calls, (unsigned long long)r1->bytes, (unsigned long long)r3->bytes);
  /* Its own model: another hash than the base's. */
  char h0[17], h1[17];
  aa_arch_hash(&small_llama, h0);
  aa_arch_hash(&a, h1);
  CHECK(strcmp(h0, h1) != 0);
}

int main(void) {
  RUN(lora_freezes_the_base_in_memory_flops_and_communication);
  RUN(flops_per_token_of_an_moe_model_count_its_active_parameters);
  RUN(the_expert_groups_move_what_the_dispatcher_and_zero_0_and_2_call);
  RUN(the_context_group_all_reduces_the_moe_load_balancing_sums);
  RUN(the_model_allocates_the_activation_layout_on_a_grid);
  RUN(a_single_rank_accounts_exactly_the_predicted_bytes);
  RUN(zero_shards_over_the_data_group_only);
  RUN(flops_per_token_are_6n_plus_12lct_plus_the_recomputed_forward);
  RUN(a_strategy_with_more_work_than_a_measured_one_is_dominated);
  RUN(flops_are_per_rank_and_split_over_the_tensor_group);
  RUN(the_data_group_moves_what_each_zero_stage_schedules);
  RUN(the_tensor_group_moves_what_the_tensor_parallel_schedule_says);
  RUN(the_context_group_passes_each_blocks_keys_and_values_around_the_ring);
  RUN(the_data_group_spans_the_data_and_context_ranks);
  RUN(flops_per_token_are_per_pipeline_stage_and_add_up_to_the_model);
  RUN(the_bubble_is_megatrons);
  RUN(the_pipeline_group_moves_activations_and_their_gradients);
  RUN(the_data_and_tensor_groups_move_only_what_the_stage_holds);
  RUN(llama_flops_count_the_untied_head_not_the_embedding);
  RUN(llama_has_no_embedding_group_and_its_groups_move_its_units);
  return aa_test_summary();
}
