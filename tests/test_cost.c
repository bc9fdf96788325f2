/* The planner's cost model (strategies/cost.h) against the engine it
 * predicts: the bytes the model allocates for its activations and
 * workspace on a grid of shapes and options, a single process's accounted
 * bytes by kind (tests/test_parallel.c does the same for dp 4 at every
 * ZeRO stage), ZeRO's shards over the data group only (figures worked out
 * by hand), FLOPs per token against figures worked out by hand, the
 * dominance rule, and the collectives each process group calls per step
 * (the engine's schedule, counted by hand). The model and the cost model both size from
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
};
static const aa_dtype_t amps[] = {AA_F32, AA_BF16, AA_F16};
static const struct {
  aa_ckpt_mode_t ckpt;
  int layers;
} ckpts[] = {{AA_CKPT_NONE, 0}, {AA_CKPT_SELECTIVE, 0}, {AA_CKPT_FULL, 0}, {AA_CKPT_FULL, 1}};

static aa_strategy_t strat(int dp, int zero, aa_dtype_t amp, aa_ckpt_mode_t ckpt, int mb) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.dp = dp;
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

/* ZeRO shards over the data group only. archs[1] has units wte|wpe
 * (11 + 7) x 27 = 486, two blocks of 4*27^2 + 2*50*27 + 9*27 + 50 = 5,909
 * and lnf 54: 12,358 parameters. Over dp 2 a rank's shard is
 * S = 243 + 2 * 2,955 + 27 = 6,180 elements; over dp·tp·pp = 4 it would
 * be 122 + 2 * 1,478 + 14 = 3,092 (the old rule). pp does not shard
 * anything in this engine yet, so dp 2 pp 2 and dp 2 hold the same. The
 * strategies are not resolved (the engine refuses pp > 1): these are the
 * sizes alone. (A tensor rank's slice: tests/test_sizes.c, and every rank
 * of the tensor-parallel runs of tests/test_parallel.c to the byte.) */
AA_TEST(zero_shards_over_the_data_group_only) {
  const aa_arch_t *a = &archs[1];
  const size_t n = 12358, S = 6180;
  CHECK(aa_arch_param_count(a) == n);
  aa_zero_sizes_t z;
  aa_sizes_zero(a, 1, NULL, AA_F32, 3, 2, &z);
  CHECK_MSG(z.shard == S, "shard %zu", z.shard);
  size_t acts, ws;
  aa_gpt_opts_t o = {.amp = AA_F32};
  aa_gpt_act_bytes(a, 2, a->seq_len, &o, &acts, &ws);
  const int degrees[][3] = {{2, 1, 2}, {2, 1, 1}};
  for (int i = 0; i < 2; i++) {
    aa_strategy_t s = strat(degrees[i][0], 3, AA_F32, AA_CKPT_NONE, 2);
    s.tp = degrees[i][1];
    s.pp = degrees[i][2];
    aa_cost_mem_t c;
    aa_cost_memory(a, &s, 1, &c);
    /* Stage 3 fp32: parameters, gradients and the two moments of the
     * shard; the workspace adds one chunk (the largest, 2,955), the
     * gradient and parameter scratch of each padded unit (486 + 5,910 +
     * 54, twice) and 16 scalars. */
    const size_t want[AA_MEM_NKINDS] = {4 * S, 4 * S, 8 * S, acts, ws + 4 * (2955 + 2 * (486 + 5910 + 54) + 16)};
    for (int k = 0; k < AA_MEM_NKINDS; k++)
      CHECK_MSG(c.bytes[k] == want[k], "dp %d tp %d pp %d %s: %zu bytes, want %zu", s.dp, s.tp, s.pp,
                aa_mem_kind_name(k), c.bytes[k], want[k]);
  }
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
  tp.tp = sp.tp = 2;
  CHECK(aa_cost_dominated(&sp, &tp, 0, NULL, 0));
  sp.sp = 1;
  CHECK(!aa_cost_dominated(&sp, &tp, 0, NULL, 0) && !aa_cost_dominated(&tp, &sp, 0, NULL, 0));
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
  s.tp = 2;
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 / 2);
  s.sp = 1; /* sequence parallelism moves LayerNorm work, not GEMMs */
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == 741408768.0 / 2);
  s.tp = 4;
  s.ckpt = AA_CKPT_FULL;
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) == (741408768.0 + 169869312.0) / 4);
  CHECK(aa_cost_min_flops_per_token(&gpt2, &s) < aa_cost_flops_per_token(&gpt2, &s));
  /* dp does not change a rank's work per token of its replica. */
  s.dp = 8;
  s.tp = 1;
  s.sp = 0;
  CHECK(aa_cost_flops_per_token(&gpt2, &s) == 860101632.0 + 207857664.0);
}

static aa_cost_calls_t calls(uint64_t n, uint64_t elems, uint64_t bytes) {
  return (aa_cost_calls_t){.calls = n, .elems = elems, .bytes = bytes};
}

static void check_group(int line, const aa_cost_group_t *g, int ranks, aa_cost_calls_t ar, aa_cost_calls_t ag,
                        aa_cost_calls_t rs) {
  const aa_cost_calls_t want[AA_COST_COLLECTIVES] = {ar, ag, rs};
  static const char *const names[] = {"all-reduce", "all-gather", "reduce-scatter"};
  CHECK_MSG(g->ranks == ranks, "line %d: %d ranks", line, g->ranks);
  for (int k = 0; k < AA_COST_COLLECTIVES; k++)
    CHECK_MSG(g->kind[k].calls == want[k].calls && g->kind[k].elems == want[k].elems &&
                  g->kind[k].bytes == want[k].bytes,
              "line %d: %s: %llu calls, %llu elements, %llu bytes; want %llu, %llu, %llu", line, names[k],
              (unsigned long long)g->kind[k].calls, (unsigned long long)g->kind[k].elems,
              (unsigned long long)g->kind[k].bytes, (unsigned long long)want[k].calls,
              (unsigned long long)want[k].elems, (unsigned long long)want[k].bytes);
  CHECK(g->bytes == ar.bytes + ag.bytes + rs.bytes);
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
  s.tp = 2;
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
  t.dp = 2;
  aa_cost_comm_t both;
  aa_cost_comm(a, &t, 1, &both);
  CHECK(both.data.ranks == 2 && both.data.bytes > 0 && both.tensor.bytes == c.tensor.bytes);
}

int main(void) {
  RUN(the_model_allocates_the_activation_layout_on_a_grid);
  RUN(a_single_rank_accounts_exactly_the_predicted_bytes);
  RUN(zero_shards_over_the_data_group_only);
  RUN(flops_per_token_are_6n_plus_12lct_plus_the_recomputed_forward);
  RUN(a_strategy_with_more_work_than_a_measured_one_is_dominated);
  RUN(flops_are_per_rank_and_split_over_the_tensor_group);
  RUN(the_data_group_moves_what_each_zero_stage_schedules);
  RUN(the_tensor_group_moves_what_the_tensor_parallel_schedule_says);
  return aa_test_summary();
}
