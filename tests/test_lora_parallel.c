/* LoRA under tensor, pipeline and context parallelism (issue 36; model.h
 * "A rank holds the adapters of its pipeline place's blocks"), in forked
 * ranks over shm, gpt2 and llama:
 *   - every rank's allocations equal the cost model's for its stage
 *     (strategies/sizes.h aa_sizes_lora), kind by kind, to the byte;
 *   - the adapters PEFT's initialisation draws are the same whole model at
 *     every layout (gathered from the ranks: bit for bit a single
 *     process's);
 *   - at tp 2 (and with sequence parallelism) the loss, the adapters'
 *     gradient (the replicated halves summed over the tensor group) and
 *     its squared norm match a single process's on the same base, inputs
 *     and non-zero adapters; after an AdamW step every tensor rank's
 *     replicated halves are the same bits;
 *   - with ZeRO over the adapters (dp3 x tp2 at stage 1, dp2 x tp2 at 3), the
 *     step's norm over the data ranks' shards is one process's squared
 *     norm, and the stepped adapters follow one process's;
 *   - an adapter checkpoint written at any of these layouts (ZeRO ones
 *     too) is one whole file that resumes in one process: the adapters
 *     and both moments are the gathered ones, bit for bit; resumed at the
 *     layout itself, every rank gets back its adapters and moments' shard.
 * Tolerances: float32 sums in another order (the row-parallel partial
 * sums, the tensor group's sums of the replicated halves), so the loss
 * within 1e-6 relative, the gradient within 1e-5 of its largest element
 * and its squared norm within 1e-5 relative (measured below 1e-6). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_gang.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/mem.h"
#include "engine/lora.h"
#include "engine/mesh.h"
#include "engine/model.h"
#include "strategies/cost.h"
#include "strategies/pipeline.h"

enum { B = 2, T = 8, V = 64, M = 2 /* micro-batches a pipeline place is sized for */ };

typedef struct {
  const char *name;
  int llama, dp, tp, pp, sp, cp, zero; /* zero: ZeRO over the adapters, over the data group */
  int r;                               /* the adapters' rank; 0: 3 */
} layout_t;

static char tmpdir[256];

static aa_arch_t tiny(int llama, int r) {
  aa_arch_t a = {.n_layer = 4, .n_head = 4, .d_model = 16, .d_ff = 32, .seq_len = T, .vocab_size = V};
  if (llama) {
    snprintf(a.family, sizeof a.family, "llama");
    a.n_kv_head = 2;
    a.norm_eps = 1e-5f;
    a.rope_theta = 10000;
    a.lora =
        (aa_lora_t){.r = r ? r : 3,
                    .alpha = 6,
                    .targets = (1 << AA_LORA_Q) | (1 << AA_LORA_K) | (1 << AA_LORA_V) | (1 << AA_LORA_O) |
                               (1 << AA_LORA_GATE) | (1 << AA_LORA_UP) | (1 << AA_LORA_DOWN)};
  } else {
    snprintf(a.family, sizeof a.family, "gpt2");
    a.lora = (aa_lora_t){.r = r ? r : 3,
                         .alpha = 6,
                         .targets = (1 << AA_LORA_QKV) | (1 << AA_LORA_PROJ) | (1 << AA_LORA_FC) |
                                    (1 << AA_LORA_FCPROJ)};
  }
  return a;
}

static void strategy(const layout_t *l, aa_strategy_t *s) {
  aa_strategy_default(s);
  s->degree[AA_AXIS_DATA] = l->dp;
  s->degree[AA_AXIS_TENSOR] = l->tp;
  s->degree[AA_AXIS_PIPELINE] = l->pp;
  s->degree[AA_AXIS_CONTEXT] = l->cp;
  s->sp = l->sp;
  s->zero = l->zero;
  s->micro_batch = B;
}

/* Whole adapters with B non-zero (so that A has a gradient), the same on
 * every rank. */
static float *whole_adapters(const aa_arch_t *a) {
  const size_t n = aa_gpt_lora_whole_numel(a);
  float *w = malloc(n * sizeof *w);
  for (size_t i = 0; w && i < n; i++)
    w[i] = 0.2f * sinf(0.37f * (float)i + 0.1f);
  return w;
}

#define RCHECK(c, ...)                                                                                       \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "  %s rank %d: %s:%d: %s: ", l->name, rank, __FILE__, __LINE__, #c);                   \
      fprintf(stderr, __VA_ARGS__);                                                                          \
      fprintf(stderr, " (%s)\n", aa_last_error());                                                           \
      bad = 1;                                                                                               \
    }                                                                                                        \
  } while (0)

/* A single process's model of a (tp 1, pp 1) with base seed 7 and its
 * optimizer. */
static aa_gpt_t *single(const aa_arch_t *a, aa_lora_opt_t *o) {
  aa_gpt_t *m = NULL;
  if (aa_gpt_create(&m, a, aa_ops_cpu(), B, T, NULL) || aa_gpt_init_weights(m, 7) ||
      aa_lora_opt_init(o, m, NULL)) {
    aa_gpt_free(m);
    return NULL;
  }
  return m;
}

static int lora_rank(const char *rdv, int rank, const void *data) {
  const layout_t *l = data;
  const aa_arch_t a = tiny(l->llama, l->r);
  const size_t n = aa_gpt_lora_whole_numel(&a);
  int bad = 0;
  aa_comm_t *world = NULL;
  aa_mesh_t mesh = {0};
  aa_pp_place_t place;
  aa_strategy_t s;
  aa_gpt_t *m = NULL, *ref = NULL;
  aa_lora_opt_t o = {0}, ro = {0};
  aa_mem_t mem;
  aa_mem_init(&mem, 0);
  float *w = whole_adapters(&a), *got = malloc(3 * n * sizeof *got), *ad = NULL, *lm = NULL;
  strategy(l, &s);
  const int world_n = l->dp * l->tp * l->pp * l->cp;
  if (aa_comm_init(&world, rdv, rank, world_n, NULL) || aa_mesh_init(&mesh, &s, world)) {
    fprintf(stderr, "  %s rank %d: %s\n", l->name, rank, aa_last_error());
    bad = 1;
    goto done;
  }
  const int stage = aa_comm_rank(mesh.group[AA_AXIS_PIPELINE]);
  if (l->pp > 1 && aa_pp_place(&a, &s, M, stage, &place)) {
    bad = 1;
    goto done;
  }
  aa_gpt_opts_t mo = {.mem = &mem,
                      .zero = l->zero,
                      .tensor = mesh.group[AA_AXIS_TENSOR],
                      .sp = l->sp,
                      .pipe = l->pp > 1 ? &place : NULL,
                      .pipeline = l->pp > 1 ? mesh.group[AA_AXIS_PIPELINE] : NULL,
                      .context = l->cp > 1 ? mesh.group[AA_AXIS_CONTEXT] : NULL};
  /* A context rank's model computes its two chunks of every sequence. */
  RCHECK(aa_gpt_create(&m, &a, aa_ops_cpu(), B, T / l->cp, &mo) == 0 &&
             aa_lora_opt_init_zero(&o, m, l->zero ? mesh.replicas : NULL, l->zero, &mem) == 0,
         "create");
  RCHECK((ref = single(&a, &ro)) != NULL, "the single process's model");
  if (bad || !w || !got) goto done;

  /* The rank's bytes: the cost model's for its stage, kind by kind. */
  aa_arch_t ca = a;
  aa_cost_mem_t c;
  aa_cost_memory_stage(&ca, &s, M, stage, &c);
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    RCHECK(c.bytes[k] == mem.peak[k], "%s: predicted %zu, allocated %zu", aa_mem_kind_name(k), c.bytes[k],
           mem.peak[k]);

  /* PEFT's draw, gathered: the single process's adapters bit for bit. */
  RCHECK(aa_gpt_lora_init(m, 9) == 0 && aa_gpt_lora_init(ref, 9) == 0, "init");
  RCHECK(aa_gpt_lora_get(m, m->lora.data, got) == 0, "gather");
  RCHECK(!memcmp(got, ref->lora.data, n * sizeof *got), "the gathered initial adapters differ");

  /* One forward, backward and step at tp > 1 (no pipeline schedule or
   * context chunks here: the CLI test trains pp2 and cp2 against one
   * process). */
  if (l->pp == 1 && l->cp == 1) {
    int32_t in[B * T], tg[B * T];
    for (int i = 0; i < B * T; i++)
      in[i] = (i * 7 + 3) % V, tg[i] = (i * 5 + 1) % V;
    float loss = 0, rloss = 0;
    RCHECK(aa_gpt_init_weights(m, 7) == 0, "base");
    RCHECK(aa_gpt_lora_put(m, m->lora.data, w) == 0 && aa_gpt_lora_put(ref, ref->lora.data, w) == 0, "put");
    RCHECK(aa_lora_opt_take(&o, m) == 0, "take");
    aa_lora_zero_grad(&o, m);
    aa_gpt_zero_grad(ref);
    RCHECK(aa_gpt_forward(m, in, tg, &loss) == 0 && aa_gpt_backward(m, 1.0f) == 0, "pass");
    RCHECK(aa_gpt_forward(ref, in, tg, &rloss) == 0 && aa_gpt_backward(ref, 1.0f) == 0, "reference pass");
    RCHECK(fabsf(loss - rloss) <= 1e-6f * fabsf(rloss), "loss %.9g, one process %.9g", loss, rloss);
    aa_train_cfg_t cfg = {
        .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1e-3f};
    float norm = 0;
    double sq = 0, rsq = 0;
    if (l->zero) {
      RCHECK(l->dp != 3 || o.tail == 1, "a tail of %zu adapters, want 1", o.tail);
      /* ZeRO: the data ranks' gradients (the same inputs) averaged into
       * their shards, and the step's norm over the shards by the tensor
       * rule: one process's within the squared norm's bound. */
      RCHECK(aa_gpt_lora_grad_squares(ref, &rsq) == 0, "squares");
      RCHECK(aa_lora_reduce(&o, m, 1) == 0 && aa_lora_step(&o, m, &cfg, 1e-2f, 1.0, 0, &norm) == 0 &&
                 aa_lora_step(&ro, ref, &cfg, 1e-2f, 1.0, 0, NULL) == 0,
             "step");
      RCHECK(fabs((double)norm * norm - rsq) <= 1e-5 * rsq, "ZeRO %d norm^2 %.9g, one process %.9g", l->zero,
             (double)norm * norm, rsq);
      if (rank == 0)
        printf("  %s: norm^2 %.9g (one process %.9g), loss %.9g (%.9g)\n", l->name, (double)norm * norm, rsq,
               loss, rloss);
      RCHECK(aa_gpt_lora_get(m, m->lora.data, got) == 0, "gather");
      float most = 0, worst = 0;
      for (size_t i = 0; i < n; i++) {
        most = fmaxf(most, fabsf(((float *)ref->lora.data)[i]));
        worst = fmaxf(worst, fabsf(got[i] - ((float *)ref->lora.data)[i]));
      }
      /* One clipped AdamW step: within test_lora_zero's dp bound, 1e-4 of
       * the largest adapter (the normalised update magnifies float32 sums
       * in another order for the smallest gradients; measured 5e-5 at
       * most, 2e-4 of one step's lr). */
      RCHECK(worst <= 1e-4f * most, "stepped adapters off by %g of a largest %g", worst, most);
      if (rank == 0) printf("  %s: stepped adapters off by %.3g of %.3g\n", l->name, worst, most);
    } else {
      RCHECK(aa_gpt_lora_reduce_grads(m) == 0 && aa_gpt_lora_get(m, m->lora_grads.data, got) == 0, "reduce");
      const float *rg = ref->lora_grads.data;
      float most = 0, worst = 0;
      for (size_t i = 0; i < n; i++) {
        most = fmaxf(most, fabsf(rg[i]));
        worst = fmaxf(worst, fabsf(got[i] - rg[i]));
      }
      RCHECK(most > 0 && worst <= 1e-5f * most, "gradient off by %g of a largest %g", worst, most);
      if (rank == 0)
        printf("  %s: loss %.9g (one process %.9g), gradient off by %.3g of %.3g\n", l->name, loss, rloss,
               worst, most);
      RCHECK(aa_gpt_lora_grad_squares(m, &sq) == 0 && aa_gpt_lora_grad_squares(ref, &rsq) == 0, "squares");
      RCHECK(fabs(sq - rsq) <= 1e-5 * rsq, "squared norm %.9g, one process %.9g", sq, rsq);
      RCHECK(aa_lora_step(&o, m, &cfg, 1e-2f, 1.0, 0, &norm) == 0 &&
                 aa_lora_step(&ro, ref, &cfg, 1e-2f, 1.0, 0, NULL) == 0,
             "step");
    }
    /* The gathered adapters carry tensor rank 0's replicated halves; this
     * rank's slice of them is its own adapters only if its replicated
     * halves are the same bits. */
    float *mine = malloc(m->lora.numel * sizeof *mine);
    RCHECK(mine && aa_gpt_lora_get(m, m->lora.data, got) == 0 && aa_gpt_lora_put(m, mine, got) == 0,
           "regather");
    RCHECK(mine && !memcmp(mine, m->lora.data, m->lora.numel * sizeof *mine),
           "the replicated halves differ from tensor rank 0's");
    free(mine);
  }

  /* A checkpoint at this layout (data and context rank 0 write, as the
   * trainer does; under ZeRO every rank takes part): one whole file that
   * one process resumes, bit for bit, and this layout too. The moments
   * of the rank's adapters are functions of their place in its layout
   * (the same on every data rank), of which it holds its ZeRO shard: its
   * slice, then the tail (engine/lora.h). */
  char path[400];
  snprintf(path, sizeof path, "%s/%s.lora", tmpdir, l->name);
  aa_train_state_t st = {.step = 3, .data_pos = 17};
  o.t = 3;
  const size_t nl = m->lora.numel, s0 = o.stage ? (size_t)o.rank * o.slice : 0,
               t0 = o.stage ? (size_t)o.world * o.slice : nl;
  lm = malloc(3 * nl * sizeof *lm);
  float *lv = lm ? lm + nl : NULL, *lp = lm ? lm + 2 * nl : NULL;
  RCHECK(lm != NULL, "out of memory");
  if (bad) goto done;
  memcpy(lp, m->lora.data, nl * sizeof *lp);
  for (size_t j = 0; j < nl; j++)
    lm[j] = 0.5f * lp[j], lv[j] = 0.25f + (float)j;
  for (size_t i = 0; i < o.m.numel; i++) {
    const size_t j = i < o.slice ? s0 + i : t0 + (i - o.slice);
    ((float *)o.m.data)[i] = lm[j], ((float *)o.v.data)[i] = lv[j];
  }
  RCHECK(aa_lora_save(path, m, &o, &st, aa_comm_rank(mesh.replicas) == 0) == 0, "save");
  RCHECK(aa_gpt_lora_get(m, m->lora.data, got) == 0 && aa_gpt_lora_get_host(m, lm, got + n) == 0 &&
             aa_gpt_lora_get_host(m, lv, got + 2 * n) == 0,
         "gather");
  RCHECK(aa_comm_barrier(world) == 0, "barrier");
  aa_train_state_t rs = {0};
  bool moments = false;
  RCHECK(aa_lora_resume(path, ref, &ro, &rs, &moments) == 0 && moments && rs.step == 3 && rs.data_pos == 17 &&
             ro.t == 3,
         "resume in one process");
  RCHECK(!memcmp(ref->lora.data, got, n * sizeof *got) && !memcmp(ro.m.data, got + n, n * sizeof *got) &&
             !memcmp(ro.v.data, got + 2 * n, n * sizeof *got),
         "the resumed adapters or moments differ from the gathered ones");
  int step = 0;
  RCHECK(aa_lora_load(path, &a, &ad, &step) == 0 && step == 3 && !memcmp(ad, got, n * sizeof *ad), "load");
  /* At this layout: the rank's adapters and its shard of the moments. */
  memset(m->lora.data, 0, nl * sizeof(float));
  memset(o.m.data, 0, o.m.numel * sizeof(float));
  memset(o.v.data, 0, o.v.numel * sizeof(float));
  o.t = 0;
  RCHECK(aa_lora_resume(path, m, &o, &rs, &moments) == 0 && moments && o.t == 3, "resume at this layout");
  int same = !memcmp(m->lora.data, lp, nl * sizeof *lp);
  for (size_t i = 0; i < o.m.numel; i++) {
    const size_t j = i < o.slice ? s0 + i : t0 + (i - o.slice);
    same &= ((float *)o.m.data)[i] == lm[j] && ((float *)o.v.data)[i] == lv[j];
  }
  RCHECK(same, "the adapters or the moments' shard resumed at this layout differ from the saved ones");
done:
  free(lm);
  free(ad);
  free(w);
  free(got);
  aa_lora_opt_free(&o);
  aa_lora_opt_free(&ro);
  aa_gpt_free(m);
  aa_gpt_free(ref);
  aa_mesh_free(&mesh);
  aa_comm_destroy(world);
  return bad;
}

static void run(const layout_t *l) {
  aa_gang_run("test_lora_parallel", l->dp * l->tp * l->pp * l->cp, lora_rank, l, l->name);
}

AA_TEST(gpt2_at_tp2_allocates_the_cost_models_bytes_matches_one_process_and_keeps_replicas_identical) {
  run(&(layout_t){"gpt2.tp2", 0, 1, 2, 1, 0, 1, 0, 0});
}
AA_TEST(llama_at_tp2_with_sequence_parallelism_matches_one_process) {
  run(&(layout_t){"llama.tp2.sp", 1, 1, 2, 1, 1, 1, 0, 0});
}
AA_TEST(gpt2_at_pp2_allocates_its_stages_bytes_and_checkpoints_the_whole_model) {
  run(&(layout_t){"gpt2.pp2", 0, 1, 1, 2, 0, 1, 0, 0});
}
AA_TEST(llama_at_tp2_pp2_allocates_every_ranks_bytes_and_checkpoints_the_whole_model) {
  run(&(layout_t){"llama.tp2.pp2", 1, 1, 2, 2, 0, 1, 0, 0});
}
AA_TEST(llama_at_cp2_tp2_allocates_every_ranks_bytes_and_checkpoints_the_whole_model) {
  run(&(layout_t){"llama.cp2.tp2", 1, 1, 2, 1, 0, 2, 0, 0});
}
/* ZeRO over the adapters with tensor and pipeline groups: the shards'
 * norm is one process's, the checkpoint the whole model's. */
/* dp3 of llama's 2,944 adapters a tensor rank holds at r 4 (4 blocks x (q
 * 64 + 32, k and v 64 + 16, o 32 + 64, gate and up 64 + 64, down 64 + 64))
 * leaves a tail of one, counted by data rank 0 alone. */
AA_TEST(llama_at_dp3_tp2_zero1_with_a_tail_matches_one_process_and_checkpoints_the_whole_model) {
  run(&(layout_t){"llama.dp3.tp2.z1", 1, 3, 2, 1, 0, 1, 1, 4});
}
AA_TEST(gpt2_at_dp2_tp2_zero3_matches_one_process_and_checkpoints_the_whole_model) {
  run(&(layout_t){"gpt2.dp2.tp2.z3", 0, 2, 2, 1, 0, 1, 3, 0});
}
AA_TEST(llama_at_dp2_pp2_zero1_allocates_every_ranks_bytes_and_checkpoints_the_whole_model) {
  run(&(layout_t){"llama.dp2.pp2.z1", 1, 2, 1, 2, 0, 1, 1, 0});
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_lora_parallel_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  RUN(gpt2_at_tp2_allocates_the_cost_models_bytes_matches_one_process_and_keeps_replicas_identical);
  RUN(llama_at_tp2_with_sequence_parallelism_matches_one_process);
  RUN(gpt2_at_pp2_allocates_its_stages_bytes_and_checkpoints_the_whole_model);
  RUN(llama_at_tp2_pp2_allocates_every_ranks_bytes_and_checkpoints_the_whole_model);
  RUN(llama_at_cp2_tp2_allocates_every_ranks_bytes_and_checkpoints_the_whole_model);
  RUN(llama_at_dp3_tp2_zero1_with_a_tail_matches_one_process_and_checkpoints_the_whole_model);
  RUN(gpt2_at_dp2_tp2_zero3_matches_one_process_and_checkpoints_the_whole_model);
  RUN(llama_at_dp2_pp2_zero1_allocates_every_ranks_bytes_and_checkpoints_the_whole_model);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return aa_test_summary();
}
