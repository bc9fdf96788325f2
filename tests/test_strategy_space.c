/* The search space (strategies/space.h): what exists for a pool (gangs of
 * data x tensor x pipeline ranks, sequence parallelism, pipeline shapes,
 * ZeRO, precision, checkpointing, micro-batch), in the order the planner's search tries it (the counts and
 * first keys its enumeration tests pin, tests/test_planner.c), the method names `exclude` and `include`
 * accept, and the distance `--from` orders by. */
#include "common/aa.h"
#include "common/spec.h"
#include "strategies/pipeline.h"
#include "strategies/space.h"
#include "strategies/strategy.h"
#include "tests/aa_test.h"

#include <stdlib.h>
#include <string.h>

/* The candidates of a pool (malloc'd, free with free()) and their count;
 * *setting (malloc'd too) their setting indices. */
static aa_strategy_t *enumerate(int devices, int global_batch, bool cuda, unsigned exclude, size_t *n,
                                int **setting) {
  aa_space_pool_t pool = {.devices = devices, .global_batch = global_batch, .cuda = cuda, .exclude = exclude};
  *n = aa_space_enumerate(NULL, NULL, 0, &pool);
  aa_strategy_t *s = calloc(*n ? *n : 1, sizeof *s);
  *setting = calloc(*n ? *n : 1, sizeof **setting);
  if (!s || !*setting) abort();
  CHECK(aa_space_enumerate(s, *setting, *n, &pool) == *n);
  return s;
}

static const char *key_of(const aa_strategy_t *s) {
  static char k[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(s, k);
  return k;
}

AA_TEST(one_cpu_device_gives_amp_by_checkpoint_by_micro_batch_larger_first) {
  size_t n;
  int *setting;
  aa_strategy_t *s = enumerate(1, 4, false, 0, &n, &setting);
  CHECK(n == 27); /* 3 amp x 3 checkpoint x micro-batches 4, 2, 1 */
  CHECK(!strcmp(key_of(&s[0]), "dp1.tp1.pp1.z0.fp32.ckpt-none.mb4"));
  CHECK(!strcmp(key_of(&s[1]), "dp1.tp1.pp1.z0.fp32.ckpt-none.mb2"));
  CHECK(!strcmp(key_of(&s[2]), "dp1.tp1.pp1.z0.fp32.ckpt-none.mb1"));
  CHECK(!strcmp(key_of(&s[3]), "dp1.tp1.pp1.z0.fp32.ckpt-sel.mb4"));
  CHECK(!strcmp(key_of(&s[6]), "dp1.tp1.pp1.z0.fp32.ckpt-full.mb4"));
  CHECK(!strcmp(key_of(&s[9]), "dp1.tp1.pp1.z0.bf16.ckpt-none.mb4"));
  for (size_t i = 0; i < n; i++)
    CHECK(setting[i] == (int)(i / 3));
  for (size_t i = 0; i < n; i++)
    CHECK(s[i].degree[AA_AXIS_TENSOR] == 1 && s[i].degree[AA_AXIS_PIPELINE] == 1 &&
          aa_axis_order_is(s[i].order, "tdp") && s[i].nranks == 0 && s[i].loss_scale.window == 1000);
  free(s);
  free(setting);

  /* A GPU tries bf16 first; 12 has the divisors 12, 6, 4, 3, 2, 1. */
  s = enumerate(1, 12, true, 0, &n, &setting);
  CHECK(n == 54);
  CHECK(!strcmp(key_of(&s[0]), "dp1.tp1.pp1.z0.bf16.ckpt-none.mb12"));
  CHECK(!strcmp(key_of(&s[3]), "dp1.tp1.pp1.z0.bf16.ckpt-none.mb3"));
  CHECK(!strcmp(key_of(&s[18]), "dp1.tp1.pp1.z0.fp16.ckpt-none.mb12"));
  CHECK(setting[53] == 8);
  free(s);
  free(setting);
}

/* The gangs of a pool: every world up to the pool, larger first; within
 * one every tensor degree that divides it, smaller first, with a data
 * degree that divides the global batch; sequence parallelism off, then on,
 * at tp > 1. ZeRO 0-3 at dp > 1 only. */
AA_TEST(a_pool_gives_larger_gangs_first_and_smaller_tensor_degrees_within_one) {
  /* {{data, tensor, pipeline}, sp} */
  static const aa_space_layout_t want[] = {
      {{4, 1, 1}, 0}, {{2, 2, 1}, 0}, {{2, 2, 1}, 1}, {{1, 4, 1}, 0}, {{1, 4, 1}, 1}, /* world 4 */
      {{1, 3, 1}, 0}, {{1, 3, 1}, 1},                 /* world 3: dp 3 does not divide 4 */
      {{2, 1, 1}, 0}, {{1, 2, 1}, 0}, {{1, 2, 1}, 1}, /* world 2 */
      {{1, 1, 1}, 0},
  };
  const size_t nwant = sizeof want / sizeof want[0];
  aa_space_layout_t l[16];
  aa_space_pool_t pool = {.devices = 4, .global_batch = 4};
  CHECK(aa_space_layouts(l, 16, &pool) == nwant);
  for (size_t i = 0; i < nwant; i++)
    CHECK_MSG(l[i].degree[AA_AXIS_DATA] == want[i].degree[AA_AXIS_DATA] &&
                  l[i].degree[AA_AXIS_TENSOR] == want[i].degree[AA_AXIS_TENSOR] && l[i].sp == want[i].sp &&
                  l[i].degree[AA_AXIS_PIPELINE] == 1,
              "layout %zu: %d %d %d %d", i, l[i].degree[AA_AXIS_DATA], l[i].degree[AA_AXIS_TENSOR], l[i].sp,
              l[i].degree[AA_AXIS_PIPELINE]);
  CHECK(aa_space_layouts(NULL, 0, &pool) == nwant);

  size_t n;
  int *setting;
  aa_strategy_t *s = enumerate(4, 4, false, 0, &n, &setting);
  /* Settings of 9 (amp x checkpoint), 4 ZeRO stages at dp > 1, times the
   * micro-batches of 4 / dp: dp4 36; dp2 tp2 72 twice; dp1 tp4 27 twice;
   * dp1 tp3 27 twice; dp2 72; dp1 tp2 27 twice; dp1 27. */
  CHECK_MSG(n == 36 + 144 + 54 + 54 + 72 + 54 + 27, "%zu", n);
  CHECK(!strcmp(key_of(&s[0]), "dp4.tp1.pp1.z0.fp32.ckpt-none.mb1"));
  CHECK(!strcmp(key_of(&s[9]), "dp4.tp1.pp1.z1.fp32.ckpt-none.mb1"));
  CHECK(!strcmp(key_of(&s[36]), "dp2.tp2.pp1.z0.fp32.ckpt-none.mb2"));
  CHECK(!strcmp(key_of(&s[37]), "dp2.tp2.pp1.z0.fp32.ckpt-none.mb1"));
  CHECK(!strcmp(key_of(&s[108]), "dp2.tp2.pp1.sp.z0.fp32.ckpt-none.mb2"));
  CHECK(!strcmp(key_of(&s[180]), "dp1.tp4.pp1.z0.fp32.ckpt-none.mb4"));
  CHECK(!strcmp(key_of(&s[234]), "dp1.tp3.pp1.z0.fp32.ckpt-none.mb4"));
  CHECK(!strcmp(key_of(&s[288]), "dp2.tp1.pp1.z0.fp32.ckpt-none.mb2"));
  CHECK(!strcmp(key_of(&s[n - 27]), "dp1.tp1.pp1.z0.fp32.ckpt-none.mb4"));
  CHECK(setting[35] == 35 && setting[36] == 36 && setting[37] == 36 && setting[108] == 72);
  CHECK(setting[n - 1] == 36 + 36 + 36 + 9 + 9 + 9 + 9 + 36 + 9 + 9 + 8);
  for (size_t i = 0; i < n; i++) {
    CHECK(s[i].degree[AA_AXIS_PIPELINE] == 1 && (s[i].degree[AA_AXIS_TENSOR] > 1 || !s[i].sp) &&
          s[i].degree[AA_AXIS_DATA] * s[i].degree[AA_AXIS_TENSOR] <= 4 && 4 % s[i].degree[AA_AXIS_DATA] == 0);
    if (s[i].zero > 0) CHECK(s[i].degree[AA_AXIS_DATA] > 1);
  }
  free(s);
  free(setting);
  /* 3 does not divide 4: no dp 3, but tp 3 over dp 1. */
  s = enumerate(3, 4, false, 0, &n, &setting);
  CHECK(n == 54 + 72 + 54 + 27 && s[0].degree[AA_AXIS_DATA] == 1 && s[0].degree[AA_AXIS_TENSOR] == 3);
  free(s);
  free(setting);
  aa_space_pool_t empty = {.devices = 0, .global_batch = 4};
  CHECK(aa_space_enumerate(NULL, NULL, 0, &empty) == 0 && aa_space_layouts(NULL, 0, &empty) == 0);
  empty = (aa_space_pool_t){.devices = 4, .global_batch = 0};
  CHECK(aa_space_enumerate(NULL, NULL, 0, &empty) == 0 && aa_space_layouts(NULL, 0, &empty) == 0);
}

/* tensor_parallel leaves out every tp > 1, sequence_parallel only the
 * layouts with it; tensor parallelism without it stays. */
AA_TEST(tensor_and_sequence_parallel_can_be_excluded) {
  aa_space_layout_t l[8];
  aa_space_pool_t pool = {.devices = 2, .global_batch = 4};
  CHECK(aa_space_layouts(l, 8, &pool) == 4);
  CHECK(l[0].degree[AA_AXIS_DATA] == 2 && l[1].degree[AA_AXIS_TENSOR] == 2 && !l[1].sp &&
        l[2].degree[AA_AXIS_TENSOR] == 2 && l[2].sp && l[3].degree[AA_AXIS_DATA] == 1 &&
        l[3].degree[AA_AXIS_TENSOR] == 1);
  const char *sp[] = {"sequence_parallel"};
  CHECK(aa_space_exclude_mask(sp, 1, &pool.exclude) == 0 && pool.exclude == AA_SPACE_EX_SP);
  CHECK(aa_space_layouts(l, 8, &pool) == 3);
  CHECK(l[0].degree[AA_AXIS_DATA] == 2 && l[1].degree[AA_AXIS_TENSOR] == 2 && !l[1].sp &&
        l[2].degree[AA_AXIS_TENSOR] == 1);
  size_t n;
  int *setting;
  aa_strategy_t *s = enumerate(2, 4, false, pool.exclude, &n, &setting);
  CHECK(n == 72 + 27 + 27);
  for (size_t i = 0; i < n; i++)
    CHECK(!s[i].sp);
  free(s);
  free(setting);
  const char *tp[] = {"tensor_parallel"};
  CHECK(aa_space_exclude_mask(tp, 1, &pool.exclude) == 0 && pool.exclude == AA_SPACE_EX_TP);
  CHECK(aa_space_layouts(l, 8, &pool) == 2 && l[0].degree[AA_AXIS_DATA] == 2 &&
        l[1].degree[AA_AXIS_DATA] == 1 && l[1].degree[AA_AXIS_TENSOR] == 1);
  s = enumerate(2, 4, false, pool.exclude, &n, &setting);
  CHECK(n == 72 + 27);
  for (size_t i = 0; i < n; i++)
    CHECK(s[i].degree[AA_AXIS_TENSOR] == 1 && !s[i].sp);
  free(s);
  free(setting);
  /* A pool of one has no tensor parallelism to leave out. */
  s = enumerate(1, 4, false, 0, &n, &setting);
  CHECK(n == 27);
  free(s);
  free(setting);
}

AA_TEST(what_exists_comes_in_search_order) {
  int v[16];
  /* 8 devices, a batch of 12: world 8 has no dp 8, but dp 4 x tp 2, dp 2 x
   * tp 4 and dp 1 x tp 8; 29 layouts in all. */
  aa_space_layout_t l[4];
  aa_space_pool_t pool = {.devices = 8, .global_batch = 12};
  CHECK(aa_space_layouts(l, 4, &pool) == 29); /* counts past cap */
  CHECK(l[0].degree[AA_AXIS_DATA] == 4 && l[0].degree[AA_AXIS_TENSOR] == 2 && !l[0].sp &&
        l[1].degree[AA_AXIS_DATA] == 4 && l[1].sp && l[2].degree[AA_AXIS_DATA] == 2 &&
        l[2].degree[AA_AXIS_TENSOR] == 4);
  CHECK(aa_space_micro_batches(v, 16, 12) == 6 && v[0] == 12 && v[1] == 6 && v[5] == 1);
  CHECK(aa_space_micro_batches(v, 2, 12) == 6 && v[0] == 12 && v[1] == 6); /* counts past cap */
  CHECK(aa_space_zero_stages(v, 16, 1, 0) == 1 && v[0] == 0);
  CHECK(aa_space_zero_stages(v, 16, 2, AA_SPACE_EX_ZERO2) == 3 && v[0] == 0 && v[1] == 1 && v[2] == 3);
  aa_dtype_t t[3];
  CHECK(aa_space_precisions(t, 3, true, 0) == 3 && t[0] == AA_BF16 && t[1] == AA_F16 && t[2] == AA_F32);
  CHECK(aa_space_precisions(t, 3, false, AA_SPACE_EX_BF16) == 2 && t[0] == AA_F32 && t[1] == AA_F16);
  aa_ckpt_mode_t m[3];
  CHECK(aa_space_ckpt_modes(m, 3, 0) == 3 && m[0] == AA_CKPT_NONE && m[1] == AA_CKPT_SELECTIVE &&
        m[2] == AA_CKPT_FULL);
  CHECK(aa_space_ckpt_modes(m, 3, AA_SPACE_EX_SELECTIVE | AA_SPACE_EX_FULL) == 1 && m[0] == AA_CKPT_NONE);
}

/* The model of examples/tiny: 4 blocks of 128 wide, global_batch 16. */
static aa_arch_t tiny_arch(void) {
  aa_model_spec_t spec;
  if (aa_spec_parse(&spec,
                    "{\"name\": \"tiny\", \"model\": {\"n_layer\": 4, \"n_head\": 4, \"d_model\": 128, "
                    "\"d_ff\": 512, \"seq_len\": 64, \"vocab_size\": 256}, \"train\": {\"global_batch\": 16, "
                    "\"steps\": 10, \"lr\": 0.003}, \"data\": {\"train\": \"train.bin\"}}",
                    NULL, "tiny.json")) {
    fprintf(stderr, "tiny spec: %s\n", aa_last_error());
    abort();
  }
  return spec.arch;
}

/* With the model, a pool has pipelines: after the pp = 1 layouts of a
 * world, pp dividing it up to n_layer; each in the shapes 1f1b,
 * interleaved with 2 virtual stages (where 2 pp <= n_layer) and gpipe;
 * ZeRO 0 and 1; at least pp micro-batches a step, a multiple of pp when
 * interleaved. Every candidate is one the model allows. */
AA_TEST(a_pool_with_a_model_has_pipelines) {
  aa_arch_t arch = tiny_arch();
  /* Context groups have their own test below. */
  aa_space_pool_t pool = {.devices = 4, .global_batch = 16, .exclude = AA_SPACE_EX_CP, .arch = &arch};
  aa_space_layout_t l[32];
  size_t nl = aa_space_layouts(l, 32, &pool);
  /* World 4: tp 1, 2 (sp off, on), 4 (off, on); pp 2 with tp 1, 2 (off,
   * on); pp 4. World 3: tp 3 (off, on); pp 3. World 2: tp 1, 2 (off, on);
   * pp 2. World 1. */
  CHECK_MSG(nl == 9 + 3 + 4 + 1, "%zu layouts", nl);
  CHECK(l[0].degree[AA_AXIS_PIPELINE] == 1 && l[0].degree[AA_AXIS_DATA] == 4 &&
        l[5].degree[AA_AXIS_PIPELINE] == 2 && l[5].degree[AA_AXIS_DATA] == 2 &&
        l[5].degree[AA_AXIS_TENSOR] == 1 && l[6].degree[AA_AXIS_TENSOR] == 2 &&
        l[8].degree[AA_AXIS_PIPELINE] == 4 && l[8].degree[AA_AXIS_DATA] == 1 &&
        l[11].degree[AA_AXIS_PIPELINE] == 3 && l[15].degree[AA_AXIS_PIPELINE] == 2 &&
        l[16].degree[AA_AXIS_DATA] == 1 && l[16].degree[AA_AXIS_PIPELINE] == 1);
  pool.exclude = AA_SPACE_EX_PP | AA_SPACE_EX_CP;
  CHECK(aa_space_layouts(NULL, 0, &pool) == 5 + 2 + 3 + 1);
  pool.exclude = AA_SPACE_EX_CP;

  size_t n = aa_space_enumerate(NULL, NULL, 0, &pool);
  aa_strategy_t *s = calloc(n, sizeof *s);
  int *setting = calloc(n, sizeof *setting);
  if (!s || !setting) abort();
  CHECK(aa_space_enumerate(s, setting, n, &pool) == n);
  /* The bundled example on 4 CPUs: 855 candidates without pipelines, 594
   * with them. */
  CHECK_MSG(n == 855 + 594, "%zu candidates", n);
  size_t pp = 0, interleaved = 0, gpipe = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i].degree[AA_AXIS_PIPELINE] == 1) continue;
    pp++;
    const int m = 16 / s[i].degree[AA_AXIS_DATA] / s[i].micro_batch;
    CHECK_MSG(s[i].zero <= 1 && m >= s[i].degree[AA_AXIS_PIPELINE] && s[i].partition == AA_PARTITION_UNIFORM,
              "%s", key_of(&s[i]));
    if (s[i].schedule == AA_SCHEDULE_INTERLEAVED) {
      interleaved++;
      CHECK_MSG(s[i].vpp == 2 && m % s[i].degree[AA_AXIS_PIPELINE] == 0 &&
                    s[i].degree[AA_AXIS_PIPELINE] * 2 <= 4,
                "%s", key_of(&s[i]));
    }
    gpipe += s[i].schedule == AA_SCHEDULE_GPIPE;
    if (i > 0) CHECK(setting[i] == setting[i - 1] || setting[i] == setting[i - 1] + 1);
  }
  CHECK(pp == 594 && interleaved > 0 && gpipe > 0);
  /* The first pipeline of the largest gang comes after its pp = 1 layouts. */
  size_t first = 0;
  while (first < n && s[first].degree[AA_AXIS_PIPELINE] == 1)
    first++;
  CHECK_MSG(first < n && !strcmp(key_of(&s[first]), "dp2.tp1.pp2.z0.fp32.ckpt-none.mb4.1f1b"), "%s",
            key_of(&s[first]));
  free(s);
  free(setting);

  /* Two devices: 108 pipeline candidates (pp 2: 1f1b, interleaved-v2 and
   * gpipe, 9 settings each, micro-batches 8, 4, 2, 1). */
  pool.devices = 2;
  CHECK_MSG(aa_space_enumerate(NULL, NULL, 0, &pool) == 279 + 108, "%zu",
            aa_space_enumerate(NULL, NULL, 0, &pool));
}

/* With the model, a pool has context groups: cp dividing the ranks a
 * pipeline leaves, 2 cp dividing seq_len (64: cp 2 and 4, never 3), each
 * before the tensor degrees it leaves room for; ZeRO at dp 1 x cp 2 too
 * (it shards over data x context ranks). context_parallel excludes them
 * and --include keeps only them. */
AA_TEST(a_pool_with_a_model_has_context_groups) {
  aa_arch_t arch = tiny_arch();
  aa_space_pool_t pool = {.devices = 4, .global_batch = 16, .arch = &arch};
  aa_space_layout_t l[32];
  size_t nl = aa_space_layouts(l, 32, &pool);
  /* World 4: pp 1 with cp 1 (tp 1; tp 2, 4 each sp off and on), cp 2 (tp
   * 1; tp 2 off, on), cp 4; pp 2 with cp 1 (tp 1; tp 2 off, on), cp 2;
   * pp 4: 14. World 3: tp 3 (off, on), pp 3 (no cp 3: 6 does not divide
   * 64): 3. World 2: tp 1, tp 2 (off, on), cp 2, pp 2: 5. World 1. */
  CHECK_MSG(nl == 14 + 3 + 5 + 1, "%zu layouts", nl);
  const struct {
    int at, dp, tp, pp, cp;
  } want[] = {{5, 2, 1, 1, 2}, {6, 1, 2, 1, 2}, {8, 1, 1, 1, 4}, {12, 1, 1, 2, 2}, {20, 1, 1, 1, 2}};
  for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
    const aa_space_layout_t *x = &l[want[k].at];
    CHECK_MSG(x->degree[AA_AXIS_DATA] == want[k].dp && x->degree[AA_AXIS_TENSOR] == want[k].tp &&
                  x->degree[AA_AXIS_PIPELINE] == want[k].pp && x->degree[AA_AXIS_CONTEXT] == want[k].cp,
              "layout %d: dp %d tp %d pp %d cp %d", want[k].at, x->degree[AA_AXIS_DATA],
              x->degree[AA_AXIS_TENSOR], x->degree[AA_AXIS_PIPELINE], x->degree[AA_AXIS_CONTEXT]);
  }
  for (size_t i = 0; i < nl; i++)
    CHECK(l[i].degree[AA_AXIS_CONTEXT] != 3);
  pool.exclude = AA_SPACE_EX_CP;
  CHECK(aa_space_layouts(NULL, 0, &pool) == 9 + 3 + 4 + 1);
  /* Every candidate with --include context_parallel has cp > 1, and dp 1 x
   * cp 2 tries every ZeRO stage. */
  const char *inc[] = {"context_parallel"};
  pool.exclude = 0;
  CHECK(aa_space_include_set(inc, 1, 0, &pool.include) == 0);
  size_t n = aa_space_enumerate(NULL, NULL, 0, &pool);
  aa_strategy_t *s = calloc(n, sizeof *s);
  if (!s) abort();
  CHECK(n > 0 && aa_space_enumerate(s, NULL, n, &pool) == n);
  int zero3_at_dp1 = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(s[i].degree[AA_AXIS_CONTEXT] > 1, "%s", key_of(&s[i]));
    zero3_at_dp1 += s[i].degree[AA_AXIS_DATA] == 1 && s[i].zero == 3;
  }
  CHECK(zero3_at_dp1 > 0);
  free(s);
  /* Without the model there are none (nor pipelines). */
  pool.arch = NULL;
  pool.include = 0;
  CHECK(aa_space_layouts(NULL, 0, &pool) == 5 + 2 + 3 + 1);
}

/* The parameters cut is a candidate only where it cuts elsewhere than the
 * uniform one: a wide vocabulary makes the first and last stages heavy. */
AA_TEST(the_parameters_cut_is_tried_where_it_differs) {
  aa_arch_t arch = tiny_arch();
  arch.n_layer = 8;
  arch.vocab_size = 8192; /* the embedding is 5 blocks' worth */
  aa_space_pool_t pool = {.devices = 2, .global_batch = 4, .arch = &arch};
  size_t n = aa_space_enumerate(NULL, NULL, 0, &pool);
  aa_strategy_t *s = calloc(n, sizeof *s);
  if (!s) abort();
  aa_space_enumerate(s, NULL, n, &pool);
  size_t params = 0;
  for (size_t i = 0; i < n; i++)
    if (s[i].partition == AA_PARTITION_PARAMETERS) {
      params++;
      int u[AA_STRATEGY_STAGES_MAX + 1], p[AA_STRATEGY_STAGES_MAX + 1];
      aa_strategy_t uni = s[i];
      uni.partition = AA_PARTITION_UNIFORM;
      CHECK(aa_pp_bounds(&arch, &s[i], p) == 0 && aa_pp_bounds(&arch, &uni, u) == 0);
      CHECK(memcmp(u, p, sizeof u[0] * (size_t)(aa_pp_stages(&uni) + 1)) != 0);
    }
  CHECK(params > 0);
  free(s);
}

AA_TEST(exclude_names_leave_out_methods) {
  unsigned mask = 0;
  size_t n;
  int *setting;
  const char *a[] = {"fp16", "checkpoint"};
  CHECK(aa_space_exclude_mask(a, 2, &mask) == 0);
  CHECK(mask == (AA_SPACE_EX_FP16 | AA_SPACE_EX_SELECTIVE | AA_SPACE_EX_FULL));
  aa_strategy_t *s = enumerate(1, 4, false, mask, &n, &setting);
  CHECK(n == 6); /* fp32, bf16 x none x 4, 2, 1 */
  for (size_t i = 0; i < n; i++)
    CHECK(s[i].amp != AA_F16 && s[i].ckpt == AA_CKPT_NONE);
  free(s);
  free(setting);

  const char *b[] = {"amp", "selective"};
  CHECK(aa_space_exclude_mask(b, 2, &mask) == 0);
  s = enumerate(1, 4, false, mask, &n, &setting);
  CHECK(n == 6); /* fp32 x none, full */
  free(s);
  free(setting);

  /* ATorch's names for the same methods. */
  const char *atorch[] = {"amp_native", "zero2", "fsdp", "tensor_parallel", "pipeline_parallel"};
  CHECK(aa_space_exclude_mask(atorch, 5, &mask) == 0);
  CHECK(mask == (AA_SPACE_EX_BF16 | AA_SPACE_EX_FP16 | AA_SPACE_EX_ZERO2 | AA_SPACE_EX_ZERO3 |
                 AA_SPACE_EX_TP | AA_SPACE_EX_PP));
  s = enumerate(1, 4, false, mask, &n, &setting);
  CHECK(n == 9);
  free(s);
  free(setting);
  s = enumerate(2, 4, false, mask, &n, &setting);
  CHECK(n == 2 * 3 * 2 + 9 && s[3].zero == 0 && s[6].zero == 1); /* dp2: ZeRO 0 and 1 only */
  free(s);
  free(setting);

  const char *all[] = {"fp32", "amp"};
  CHECK(aa_space_exclude_mask(all, 2, &mask) == 0);
  aa_space_pool_t pool = {.devices = 1, .global_batch = 4, .exclude = mask};
  CHECK(aa_space_enumerate(NULL, NULL, 0, &pool) == 0);
}

AA_TEST(unknown_exclude_method_is_named_with_the_accepted_ones) {
  const char *a[] = {"bf16", "zero9"};
  unsigned mask = 123;
  CHECK(aa_space_exclude_mask(a, 2, &mask) == AA_EINVAL);
  CHECK(mask == 123);
  CHECK(!strcmp(aa_last_error(),
                "exclude: unknown method \"zero9\" (accepted: amp, amp_native, bf16, fp16, fp32, "
                "checkpoint, selective, full, zero, zero1, zero2, zero3, fsdp, tensor_parallel, "
                "sequence_parallel, pipeline_parallel, context_parallel, expert_parallel)"));
  CHECK(!strcmp(aa_space_exclude_names(),
                "amp, amp_native, bf16, fp16, fp32, checkpoint, selective, full, zero, "
                "zero1, zero2, zero3, fsdp, tensor_parallel, sequence_parallel, pipeline_parallel, "
                "context_parallel, expert_parallel"));
  const char *hostile[] = {"a\nb"};
  CHECK(aa_space_exclude_mask(hostile, 1, &mask) == AA_EINVAL && strstr(aa_last_error(), "\"a\\x0ab\""));
}

/* A stored strategy answers a search only if it uses no excluded method. */
AA_TEST(methods_of_a_strategy_are_named_as_exclude_names_them) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK(aa_space_methods_of(&s) == AA_SPACE_EX_FP32);
  s.amp = AA_BF16;
  s.ckpt = AA_CKPT_FULL;
  s.zero = 2;
  s.degree[AA_AXIS_TENSOR] = 2;
  unsigned m = aa_space_methods_of(&s);
  CHECK(m == (AA_SPACE_EX_BF16 | AA_SPACE_EX_FULL | AA_SPACE_EX_ZERO2 | AA_SPACE_EX_TP));
  char buf[160];
  CHECK(!strcmp(aa_space_method_names(buf, sizeof buf, m), "bf16, full, zero2, tensor_parallel"));
  const char *ex[] = {"amp", "zero"};
  unsigned mask = 0;
  CHECK(aa_space_exclude_mask(ex, 2, &mask) == 0);
  CHECK(!strcmp(aa_space_method_names(buf, sizeof buf, m & mask), "bf16, zero2"));
  s.ckpt = AA_CKPT_SELECTIVE;
  s.degree[AA_AXIS_PIPELINE] = 2;
  s.amp = AA_F16;
  CHECK(!strcmp(aa_space_method_names(buf, sizeof buf, aa_space_methods_of(&s)),
                "fp16, selective, zero2, tensor_parallel, pipeline_parallel"));
  s.sp = 1;
  CHECK(aa_space_methods_of(&s) & AA_SPACE_EX_SP);
  CHECK(!strcmp(aa_space_method_names(buf, sizeof buf, aa_space_methods_of(&s)),
                "fp16, selective, zero2, tensor_parallel, sequence_parallel, pipeline_parallel"));
  const char *sp[] = {"sequence_parallel"};
  CHECK(aa_space_exclude_mask(sp, 1, &mask) == 0 && (aa_space_methods_of(&s) & mask));
  CHECK(!strcmp(aa_space_method_names(buf, 8, aa_space_methods_of(&s)), "fp16, s")); /* cut, terminated */
}

/* The dense llama the MoE and LoRA searches below start from. */
static aa_arch_t small_llama(void) {
  return (aa_arch_t){.family = "llama",
                     .n_layer = 4,
                     .n_head = 4,
                     .n_kv_head = 2,
                     .d_model = 32,
                     .d_ff = 64,
                     .seq_len = 16,
                     .vocab_size = 64};
}

/* A model with mixture-of-experts layers (8 experts) on 8 devices, global
 * batch 8: the layouts of its dense twin (the same model without the moe
 * object), each at the expert degrees 1 and every divisor of its data x
 * context degree that divides 8 (counted here from the twin's
 * candidates), and at a tp > 1 that divides d_ff_expert 24 each twice:
 * experts whole on every tensor rank, then split over them (etp = tp; the
 * space's layouts are not resolved against the model, so tp 5 and 7
 * appear, whole only); with a capacity factor, which context ranks keep
 * as one process does (engine/model.c moe_context_keep), the same ones,
 * context groups included. expert_parallel excludes (and includes) the
 * ep > 1 ones. */
AA_TEST(an_moe_model_searches_every_axis_with_expert_degrees_with_or_without_a_capacity) {
  aa_arch_t a = small_llama();
  aa_arch_t dense = a;
  a.moe = (aa_moe_t){.experts = 8, .top_k = 2, .d_ff_expert = 24, .every = 1};
  aa_space_pool_t pool = {.devices = 8, .global_batch = 8, .arch = &dense};
  const size_t nd = aa_space_enumerate(NULL, NULL, 0, &pool);
  aa_strategy_t *twin = calloc(nd ? nd : 1, sizeof *twin);
  if (!twin) abort();
  CHECK(aa_space_enumerate(twin, NULL, nd, &pool) == nd);
  size_t want = 0, want_ep = 0, want_cp = 0, want_any_cp = 0, twin_cp = 0;
  for (size_t i = 0; i < nd; i++) {
    const int cp = twin[i].degree[AA_AXIS_CONTEXT], replicas = twin[i].degree[AA_AXIS_DATA] * cp;
    const int tp = twin[i].degree[AA_AXIS_TENSOR];
    const size_t ways = tp > 1 && 24 % tp == 0 ? 2 : 1;
    twin_cp += cp > 1;
    for (int e = 1; e <= 8; e++)
      if (replicas % e == 0 && 8 % e == 0) {
        want += ways, want_ep += e > 1 ? ways : 0, want_cp += cp > 1 && e > 1 ? ways : 0;
        want_any_cp += cp > 1 ? ways : 0;
      }
  }
  free(twin);
  CHECK_MSG(twin_cp > 0 && want_cp > 0, "the twin's space has no context-parallel layout (%zu, %zu)", twin_cp,
            want_cp);
  pool.arch = &a;
  const size_t n = aa_space_enumerate(NULL, NULL, 0, &pool);
  CHECK_MSG(n == want, "%zu candidates, want %zu", n, want);
  aa_strategy_t *out = calloc(n ? n : 1, sizeof *out);
  if (!out) abort();
  CHECK(aa_space_enumerate(out, NULL, n, &pool) == n);
  size_t ep = 0, ep_tp = 0, ep_pp = 0, ep_cp = 0, split = 0, whole_tp = 0;
  unsigned zeros = 0; /* the ZeRO stages the ep > 1 candidates take */
  for (size_t i = 0; i < n; i++) {
    const aa_strategy_t *s = &out[i];
    CHECK(s->etp <= 1 || s->etp == s->degree[AA_AXIS_TENSOR]);
    split += s->etp > 1;
    whole_tp += s->etp <= 1 && s->degree[AA_AXIS_TENSOR] > 1 && 24 % s->degree[AA_AXIS_TENSOR] == 0;
    if (s->ep > 1) {
      ep++;
      ep_tp += s->degree[AA_AXIS_TENSOR] > 1;
      ep_pp += s->degree[AA_AXIS_PIPELINE] > 1;
      ep_cp += s->degree[AA_AXIS_CONTEXT] > 1;
      CHECK((s->degree[AA_AXIS_DATA] * s->degree[AA_AXIS_CONTEXT]) % s->ep == 0 && 8 % s->ep == 0);
      zeros |= 1u << s->zero;
      CHECK(aa_space_methods_of(s) & AA_SPACE_EX_EP);
    }
  }
  free(out);
  CHECK_MSG(split > 0 && split == whole_tp, "%zu split, %zu whole at tp > 1", split, whole_tp);
  CHECK_MSG(ep == want_ep && ep_cp == want_cp && ep_tp > 0 && ep_pp > 0 && zeros == 0xf,
            "ep %zu (want %zu), with tp %zu, with pp %zu, with cp %zu (want %zu)", ep, want_ep, ep_tp, ep_pp,
            ep_cp, want_cp);
  /* A capacity factor: the same layouts, context groups included. */
  a.moe.capacity_factor = 1.25f;
  const size_t nc = aa_space_enumerate(NULL, NULL, 0, &pool);
  CHECK_MSG(nc == want, "capacity factor: %zu candidates, want %zu", nc, want);
  aa_strategy_t *dropping = calloc(nc ? nc : 1, sizeof *dropping);
  if (!dropping) abort();
  CHECK(aa_space_enumerate(dropping, NULL, nc, &pool) == nc);
  size_t dropping_cp = 0;
  for (size_t i = 0; i < nc; i++)
    dropping_cp += dropping[i].degree[AA_AXIS_CONTEXT] > 1;
  CHECK_MSG(want_any_cp > 0 && dropping_cp == want_any_cp,
            "capacity factor: %zu with a context group, want %zu", dropping_cp, want_any_cp);
  free(dropping);
  a.moe.capacity_factor = 0;
  const char *names[] = {"expert_parallel"};
  CHECK(aa_space_exclude_mask(names, 1, &pool.exclude) == 0 && pool.exclude == AA_SPACE_EX_EP);
  CHECK(aa_space_enumerate(NULL, NULL, 0, &pool) == want - ep);
  pool.exclude = 0;
  CHECK(aa_space_include_set(names, 1, 0, &pool.include) == 0);
  CHECK(aa_space_enumerate(NULL, NULL, 0, &pool) == ep);
  int eps[8];
  CHECK(aa_space_experts(eps, 8, &a, 8, 0) == 4 && eps[0] == 1 && eps[3] == 8);
  CHECK(aa_space_experts(eps, 8, &a, 8, AA_SPACE_EX_EP) == 1 && eps[0] == 1);
  CHECK(aa_space_experts(eps, 8, &a, 6, 0) == 2 && eps[1] == 2);
  CHECK(aa_space_experts(eps, 8, NULL, 8, 0) == 1);
  aa_strategy_t x, y;
  aa_strategy_default(&x);
  y = x;
  y.ep = 2;
  CHECK(aa_space_distance(&x, &y) == 1);
  y.etp = 2;
  CHECK(aa_space_distance(&x, &y) == 2);
}

/* A LoRA fine-tune (issue 36) searches what the engine trains adapters
 * with: its dense twin's candidates, every parallel layout, every
 * precision (fp16 too), every ZeRO stage with tensor and pipeline
 * parallelism too (engine/lora.c). */
AA_TEST(a_lora_model_searches_every_layout_and_zero_stage_of_its_dense_twin) {
  aa_arch_t a = small_llama();
  aa_arch_t dense = a;
  a.lora.r = 4;
  a.lora.alpha = 8;
  a.lora.targets = 1u << AA_LORA_Q;
  aa_space_pool_t pool = {.devices = 4, .global_batch = 8, .arch = &dense};
  const size_t nd = aa_space_enumerate(NULL, NULL, 0, &pool), want = nd;
  pool.arch = &a;
  const size_t n = aa_space_enumerate(NULL, NULL, 0, &pool);
  CHECK_MSG(n == want && want > 0, "%zu candidates, want the twin's %zu", n, want);
  aa_strategy_t *out = calloc(n ? n : 1, sizeof *out);
  if (!out) abort();
  CHECK(aa_space_enumerate(out, NULL, n, &pool) == n);
  int seen[AA_AXES] = {0}, sp = 0, zero_seen = 0, fp16_seen = 0, zero_tp = 0, zero_pp = 0;
  for (size_t i = 0; i < n; i++) {
    zero_tp |= out[i].zero > 0 && out[i].degree[AA_AXIS_TENSOR] > 1;
    zero_pp |= out[i].zero > 0 && out[i].degree[AA_AXIS_PIPELINE] > 1;
    for (int x = 0; x < AA_AXES; x++)
      if (out[i].degree[x] > seen[x]) seen[x] = out[i].degree[x];
    sp |= out[i].sp;
    zero_seen |= 1 << out[i].zero;
    fp16_seen |= out[i].amp == AA_F16;
  }
  free(out);
  CHECK_MSG(seen[AA_AXIS_DATA] == 4 && seen[AA_AXIS_TENSOR] > 1 && seen[AA_AXIS_PIPELINE] > 1 &&
                seen[AA_AXIS_CONTEXT] > 1 && sp,
            "the largest data, tensor, pipeline and context degrees %d, %d, %d, %d, sequence parallel %d",
            seen[AA_AXIS_DATA], seen[AA_AXIS_TENSOR], seen[AA_AXIS_PIPELINE], seen[AA_AXIS_CONTEXT], sp);
  CHECK_MSG(zero_seen == 0xf && fp16_seen, "ZeRO stages seen %#x, fp16 %d", zero_seen, fp16_seen);
  CHECK_MSG(zero_tp && zero_pp, "ZeRO with tensor parallelism %d, with pipeline parallelism %d", zero_tp,
            zero_pp);
}

/* The candidates of a pool that must use the methods `names`. */
static aa_strategy_t *enumerate_including(int devices, const char *const *names, size_t nnames, size_t *n,
                                          int **setting) {
  aa_space_pool_t pool = {.devices = devices, .global_batch = 4};
  CHECK_MSG(aa_space_include_set(names, nnames, 0, &pool.include) == 0, "%s", aa_last_error());
  *n = aa_space_enumerate(NULL, NULL, 0, &pool);
  aa_strategy_t *s = calloc(*n ? *n : 1, sizeof *s);
  *setting = calloc(*n ? *n : 1, sizeof **setting);
  if (!s || !*setting) abort();
  CHECK(aa_space_enumerate(s, *setting, *n, &pool) == *n);
  return s;
}

/* Every candidate uses each included method; settings stay numbered 0, 1, ... */
AA_TEST(include_names_keep_only_candidates_that_use_them) {
  size_t n;
  int *setting;
  const char *z1[] = {"zero1"};
  aa_strategy_t *s = enumerate_including(2, z1, 1, &n, &setting);
  CHECK_MSG(n == 18, "%zu", n); /* dp 2 only (ZeRO needs dp > 1) x 3 amp x 3 checkpoint x mb 2, 1 */
  CHECK(!strcmp(key_of(&s[0]), "dp2.tp1.pp1.z1.fp32.ckpt-none.mb2"));
  for (size_t i = 0; i < n; i++)
    CHECK(s[i].zero == 1 && setting[i] == (int)(i / 2));
  free(s);
  free(setting);

  const char *amp[] = {"amp"}; /* bf16 or fp16 */
  s = enumerate_including(1, amp, 1, &n, &setting);
  CHECK(n == 18 && !strcmp(key_of(&s[0]), "dp1.tp1.pp1.z0.bf16.ckpt-none.mb4"));
  for (size_t i = 0; i < n; i++)
    CHECK(s[i].amp == AA_BF16 || s[i].amp == AA_F16);
  CHECK(setting[0] == 0 && setting[n - 1] == 5);
  free(s);
  free(setting);

  const char *both[] = {"checkpoint", "tensor_parallel"};
  s = enumerate_including(2, both, 2, &n, &setting);
  CHECK_MSG(n == 36, "%zu", n); /* tp 2 (sp off, on) x 3 amp x selective, full x mb 4, 2, 1 */
  CHECK(!strcmp(key_of(&s[0]), "dp1.tp2.pp1.z0.fp32.ckpt-sel.mb4"));
  for (size_t i = 0; i < n; i++)
    CHECK(s[i].degree[AA_AXIS_TENSOR] == 2 && s[i].ckpt != AA_CKPT_NONE);
  free(s);
  free(setting);

  /* Two ZeRO stages at once: nothing uses both. */
  const char *two[] = {"zero1", "zero2"};
  aa_space_pool_t pool = {.devices = 2, .global_batch = 4};
  CHECK(aa_space_include_set(two, 2, 0, &pool.include) == 0);
  CHECK(aa_space_enumerate(NULL, NULL, 0, &pool) == 0);
}

AA_TEST(a_method_both_included_and_excluded_is_refused) {
  unsigned ex = 0, in = 77;
  const char *zero[] = {"zero"}, *z1[] = {"zero1"}, *amp[] = {"amp"}, *bf16[] = {"bf16"}, *bad[] = {"dp"};
  CHECK(aa_space_exclude_mask(zero, 1, &ex) == 0);
  CHECK(aa_space_include_set(z1, 1, ex, &in) == AA_EINVAL && in == 77);
  CHECK_MSG(!strcmp(aa_last_error(), "include: method \"zero1\" is also excluded (exclude leaves out zero1)"), "%s",
            aa_last_error());
  /* amp is bf16 or fp16: with bf16 excluded fp16 is left. */
  CHECK(aa_space_exclude_mask(bf16, 1, &ex) == 0);
  CHECK(aa_space_include_set(amp, 1, ex, &in) == 0);
  CHECK(aa_space_exclude_mask(amp, 1, &ex) == 0);
  CHECK(aa_space_include_set(amp, 1, ex, &in) == AA_EINVAL && strstr(aa_last_error(), "leaves out bf16, fp16"));
  CHECK(aa_space_include_set(bad, 1, 0, &in) == AA_EINVAL &&
        strstr(aa_last_error(), "include: unknown method \"dp\" (accepted: amp, "));
}

AA_TEST(unmet_included_methods_are_named) {
  const char *names[] = {"amp", "zero1", "checkpoint"};
  unsigned in = 0;
  char buf[160];
  CHECK(aa_space_include_set(names, 3, 0, &in) == 0);
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.ckpt = AA_CKPT_FULL;
  unsigned unmet = aa_space_include_unmet(aa_space_methods_of(&s), in);
  CHECK(!strcmp(aa_space_include_names(buf, sizeof buf, unmet), "amp, zero1"));
  s.amp = AA_F16;
  s.zero = 1;
  CHECK(aa_space_include_unmet(aa_space_methods_of(&s), in) == 0);
  CHECK(!strcmp(aa_space_include_names(buf, sizeof buf, in), "amp, checkpoint, zero1"));
}

/* The knobs --from counts: one each, the pipeline's shape as one. */
AA_TEST(distance_counts_the_knobs_that_differ) {
  aa_strategy_t a, b;
  aa_strategy_default(&a);
  a.micro_batch = 4;
  b = a;
  CHECK(aa_space_distance(&a, &b) == 0);
  b.zero = 1;
  b.micro_batch = 2;
  CHECK(aa_space_distance(&a, &b) == 2);
  b = a;
  b.degree[AA_AXIS_PIPELINE] = 2; /* 1f1b, uniform: the degree alone */
  CHECK(aa_space_distance(&a, &b) == 1);
  b.schedule = AA_SCHEDULE_INTERLEAVED;
  b.vpp = 2;
  CHECK(aa_space_distance(&a, &b) == 2);
  a.degree[AA_AXIS_PIPELINE] = 2;
  CHECK(aa_space_distance(&a, &b) == 1);
  b = a;
  b.degree[AA_AXIS_DATA] = 2, b.degree[AA_AXIS_TENSOR] = 2, b.sp = 1, b.amp = AA_BF16, b.ckpt = AA_CKPT_FULL,
  b.zero = 3, b.micro_batch = 1;
  b.degree[AA_AXIS_PIPELINE] = 4, b.partition = AA_PARTITION_PARAMETERS;
  CHECK(aa_space_distance(&a, &b) == 9);
}

int main(void) {
  RUN(one_cpu_device_gives_amp_by_checkpoint_by_micro_batch_larger_first);
  RUN(a_pool_gives_larger_gangs_first_and_smaller_tensor_degrees_within_one);
  RUN(tensor_and_sequence_parallel_can_be_excluded);
  RUN(what_exists_comes_in_search_order);
  RUN(a_pool_with_a_model_has_pipelines);
  RUN(a_pool_with_a_model_has_context_groups);
  RUN(the_parameters_cut_is_tried_where_it_differs);
  RUN(exclude_names_leave_out_methods);
  RUN(unknown_exclude_method_is_named_with_the_accepted_ones);
  RUN(methods_of_a_strategy_are_named_as_exclude_names_them);
  RUN(an_moe_model_searches_every_axis_with_expert_degrees_with_or_without_a_capacity);
  RUN(a_lora_model_searches_every_layout_and_zero_stage_of_its_dense_twin);
  RUN(include_names_keep_only_candidates_that_use_them);
  RUN(a_method_both_included_and_excluded_is_refused);
  RUN(unmet_included_methods_are_named);
  RUN(distance_counts_the_knobs_that_differ);
  return aa_test_summary();
}
