/* Data parallelism and ZeRO on CPU: rank processes forked here meet in a
 * shared-memory process group (comm/comm.h) and train the same tiny
 * model as a single process does on the same global batches.
 *
 * The model (d_model 30) is chosen so that the transformer blocks (7,774
 * parameters) do not divide by 4: ZeRO's per-unit padding is real and the
 * memory test accounts for it exactly.
 *
 * Loss tolerance, relative 1e-5 per step (fp32): a dp run does the single
 * process's arithmetic except for the order of fp32 sums. The gradient of
 * the global batch is summed per rank and then across ranks (the group sums
 * in fp32 in rank order and divides by dp) instead of in one pass over all
 * sequences, and with ZeRO >= 1 the gradient norm's sum of squares is
 * taken per shard and then summed. Each reordering moves a gradient by a few
 * fp32 ulps (relative ~1e-7); AdamW normalises the update by sqrt(v), so
 * over 6 steps at lr 3e-3 the parameters, and hence the losses, move by a
 * similar relative amount. Measured: at most 9.5e-8 (printed by each test);
 * 1e-5 leaves two orders of magnitude while still catching any real error
 * (a wrong slice of the batch, a stale shard), which changes the loss in
 * the third digit or earlier. The gradient norm of every step is compared
 * too (to the 3 decimals the log prints), since a wrong gradient scale
 * would hide from AdamW's losses.
 *
 * Under bf16/fp16, 1e-4: the same reorderings move the fp32 master weights
 * by ~1e-7, which changes a 16-bit copy only where a weight sits that close
 * to a rounding boundary, and then by one 16-bit ulp (2^-8 relative in
 * bf16): a few weights per step, each a tiny part of the loss. Measured:
 * at most 6.5e-7 (fp16, ASan build; 2.8e-7 without sanitizers). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aa_gang.h"
#include "aa_test.h"
#include "common/aa.h"
#include "common/rendezvous.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "comm/comm.h"
#include "engine/data.h"
#include "engine/launch.h"
#include "engine/mesh.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/train.h"
#include "strategies/cost.h"
#include "strategies/layout.h"
#include "strategies/pipeline.h"

#define STEPS 6       /* steps of a run unless it says otherwise */
#define MAX_STEPS 10
#define REL_TOL 1e-5
#define REL_TOL_AMP 1e-4
#define MAX_RANKS AA_GANG_MAX
/* The model of the tensor-parallel tests: 4 heads and 64 MLP columns for
 * up to 4 tensor ranks, and a vocabulary of 251 that neither 2 nor 4
 * divides, so the last rank's slice ends in a padding row. */
#define TP_MODEL 1
/* The pipeline tests' model: TP_MODEL with 4 blocks, for up to 4 stages
 * (or 2 ranks of 2 chunks each) and tp 2 beside them. */
#define PP_MODEL 2
#define PP_MB 2 /* its micro-batch: 8 / 2 = 4 micro-batches a step */
/* The llama tests' model: PP_MODEL's shape in the llama family, 4 query
 * heads sharing 2 key/value heads (so tp 2 splits the kv heads), a SwiGLU
 * MLP of 48 columns, untied head. */
#define LLAMA_MODEL 3
/* LLAMA_MODEL with Qwen2's q/k/v biases (qkv_bias), which tp 2 splits with
 * their heads. */
#define QWEN_MODEL 4

static char tmpdir[256], train_bin[512], val_bin[512];

/* The tiny model (model 0), or the tensor-parallel tests' (TP_MODEL),
 * trained for `steps` steps (0: STEPS). */
static void model_spec(aa_model_spec_t *s, int model, int steps) {
  char json[2048];
  const char *llama = model == QWEN_MODEL    ? "\"family\": \"llama\", \"n_kv_head\": 2, \"qkv_bias\": true, "
                      : model == LLAMA_MODEL ? "\"family\": \"llama\", \"n_kv_head\": 2, "
                                             : "";
  snprintf(
      json, sizeof json,
      "{\"name\": \"dp\", \"model\": {%s\"n_layer\": %d, \"n_head\": %d, \"d_model\": %d, \"d_ff\": %d, "
      "\"seq_len\": 16, \"vocab_size\": %d}, \"train\": {\"global_batch\": 8, \"steps\": %d, \"lr\": 0.003, "
      "\"warmup_steps\": 2, \"eval_every\": 0, \"eval_batches\": 2, \"checkpoint_every\": 0, \"seed\": 7, "
      "\"grad_clip\": 1.0}, \"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
      llama, model >= PP_MODEL ? 4 : 2, model ? 4 : 2, model ? 32 : 30, model >= LLAMA_MODEL ? 48 : 64,
      model ? 251 : 256, steps ? steps : STEPS, train_bin, val_bin);
  int rc = aa_spec_parse(s, json, NULL, "test");
  if (rc) fprintf(stderr, "spec: %s\n", aa_last_error());
  CHECK(rc == 0);
}

static void tiny_spec(aa_model_spec_t *s) { model_spec(s, 0, 0); }

/* One training run: dp x tp ranks (dp 0 = a single process without a
 * group; tp 0 = 1). */
typedef struct {
  int dp, zero, micro_batch;
  int tp, sp;             /* tensor parallel degree and sequence parallelism */
  int cp;                 /* context parallel degree (0 = 1) */
  aa_ckpt_mode_t ckpt;    /* activation checkpointing */
  int model, steps;       /* model_spec's */
  aa_dtype_t amp;
  int checkpoint_every;
  const char *resume;
  const char *out;  /* subdirectory of tmpdir */
  int kill_rank;    /* rank that kills itself after step 2, -1 none */
  int oom_rank;     /* rank that trains under a 64 KiB memory limit (fails to build its model), 0 none */
  int pp, vpp;      /* pipeline degree (0 = 1) and virtual stages per rank (0 = 1) */
  aa_pp_schedule_t schedule;
  aa_pp_partition_t partition;
  int bounds[6];    /* custom partition: pp * vpp + 1 boundaries */
} cfg_t;

/* What a run leaves: rank 0's losses, and each rank's exit status, peak
 * bytes by kind and validation loss. */
typedef struct {
  int steps;
  double loss[MAX_STEPS + 1]; /* by step, 1-based; NaN if missing */
  double norm[MAX_STEPS + 1]; /* gradient norm by step, from rank 0's log (3 decimals) */
  double val_loss[MAX_RANKS];
  size_t peak[MAX_RANKS][AA_MEM_NKINDS];
  int status[MAX_RANKS];
  double exit_time[MAX_RANKS]; /* aa_now() when the parent reaped the rank */
  int micro_batch;             /* resolved */
} run_t;

/* What a forked rank is given: the run's configuration (NULL where there
 * is none), the group's rendezvous and the directory it writes in. */
typedef struct {
  const cfg_t *c;
  const char *rdv, *dir;
} gang_t;

static void die_after_step_2(const aa_train_step_info_t *info, void *data) {
  (void)data;
  if (info->step == 2) raise(SIGKILL);
}

/* One rank (or the single process): trains and leaves its figures in
 * DIR/res.RANK. Returns the exit status: 0, or TRAIN_FAILED when aa_train
 * returned an error. The leak check at exit turns any status into 1 when
 * something was not freed, so TRAIN_FAILED also says that a failing rank
 * freed everything. */
#define TRAIN_FAILED 3

/* The strategy a run of c trains with, at this micro-batch (0: the whole
 * per-rank batch). */
static void strategy_of(const cfg_t *c, int micro_batch, aa_strategy_t *st) {
  aa_strategy_default(st);
  st->degree[AA_AXIS_DATA] = c->dp ? c->dp : 1;
  st->degree[AA_AXIS_TENSOR] = c->tp ? c->tp : 1;
  st->degree[AA_AXIS_CONTEXT] = c->cp ? c->cp : 1;
  st->sp = c->sp;
  st->ckpt = c->ckpt;
  st->zero = c->zero;
  st->micro_batch = micro_batch;
  st->amp = c->amp;
  st->degree[AA_AXIS_PIPELINE] = c->pp ? c->pp : 1;
  st->vpp = c->vpp ? c->vpp : 1;
  st->schedule = c->schedule;
  st->partition = c->partition;
  if (c->partition == AA_PARTITION_CUSTOM) {
    CHECK(aa_strategy_set_bounds(st, c->bounds, st->degree[AA_AXIS_PIPELINE] * st->vpp + 1) == 0);
  }
}

/* Ranks of a run of c: dp x tp x pp x cp (dp 0: one process, no group). */
static int world_of(const cfg_t *c) {
  return c->dp ? c->dp * (c->tp ? c->tp : 1) * (c->pp ? c->pp : 1) * (c->cp ? c->cp : 1) : 1;
}

static int rank_main(const void *data, int rank) {
  const gang_t *g = data;
  const cfg_t *c = g->c;
  const char *dir = g->dir;
  aa_comm_t *comm = NULL;
  int rc;
  int world = world_of(c);
  if (c->dp && (rc = aa_comm_init(&comm, g->rdv, rank, world, NULL))) {
    fprintf(stderr, "rank %d: %s\n", rank, aa_last_error());
    return 2;
  }
  aa_model_spec_t s;
  model_spec(&s, c->model, c->steps);
  aa_strategy_t st;
  strategy_of(c, c->micro_batch, &st);
  char losses[600];
  snprintf(losses, sizeof losses, "%s/losses", dir);
  char logpath[600];
  snprintf(logpath, sizeof logpath, "%s/log.%d", dir, rank);
  FILE *log = fopen(logpath, "w");
  aa_train_opts_t o = {.threads = 1, .checkpoint_every = c->checkpoint_every, .log_every = 1, .out_dir = dir,
                       .losses_path = losses, .log = log, .strategy = &st, .comm = comm, .resume = c->resume,
                       .on_step = rank == c->kill_rank ? die_after_step_2 : NULL,
                       .memory_limit = c->oom_rank && rank == c->oom_rank ? 64 << 10 : 0};
  aa_train_result_t res;
  rc = aa_train(&s, &o, &res);
  if (rc) fprintf(stderr, "  rank %d: %s\n", rank, aa_last_error());
  if (log) fclose(log);
  aa_comm_destroy(comm);
  char path[700];
  snprintf(path, sizeof path, "%s/res.%d", dir, rank);
  FILE *f = fopen(path, "w");
  if (f && !rc) {
    for (int k = 0; k < AA_MEM_NKINDS; k++) fprintf(f, "%zu\n", res.mem.peak[k]);
    fprintf(f, "%.9g\n", res.val_loss);
  }
  if (f) fclose(f);
  return rc ? TRAIN_FAILED : 0;
}

/* Runs c's processes (aa_gang_fork) and reads what they left. */
static void run(const cfg_t *c, run_t *r) {
  char dir[512], rdv[AA_RENDEZVOUS_MAX];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, c->out);
  CHECK(aa_mkdirs(dir) == 0);
  memset(r, 0, sizeof *r);
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_parallel") == 0);
  int n = world_of(c);
  r->steps = c->steps ? c->steps : STEPS;
  r->micro_batch = c->micro_batch ? c->micro_batch : 8 / (c->dp ? c->dp : 1); /* the specs' global batch is 8 */
  aa_gang_fork(c->out, n, rank_main, &(gang_t){.c = c, .rdv = rdv, .dir = dir}, r->status, r->exit_time);
  char path[700];
  for (int i = 0; i <= MAX_STEPS; i++) r->loss[i] = r->norm[i] = NAN;
  snprintf(path, sizeof path, "%s/log.0", dir);
  FILE *f = fopen(path, "r");
  char line[512];
  int step;
  double l;
  while (f && fgets(line, sizeof line, f)) {
    int total;
    double lr, norm;
    if (sscanf(line, "step %d/%d | loss %lf | lr %lf | norm %lf", &step, &total, &l, &lr, &norm) == 5 && step >= 1 &&
        step <= r->steps)
      r->norm[step] = norm;
  }
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s/losses", dir);
  f = fopen(path, "r");
  while (f && fscanf(f, "%d %lf", &step, &l) == 2)
    if (step >= 1 && step <= r->steps) r->loss[step] = l;
  if (f) fclose(f);
  for (int i = 0; i < n; i++) {
    r->val_loss[i] = NAN;
    snprintf(path, sizeof path, "%s/res.%d", dir, i);
    if (!(f = fopen(path, "r"))) continue;
    for (int k = 0; k < AA_MEM_NKINDS; k++)
      if (fscanf(f, "%zu", &r->peak[i][k]) != 1) r->peak[i][k] = 0;
    if (fscanf(f, "%lf", &r->val_loss[i]) != 1) r->val_loss[i] = NAN;
    fclose(f);
  }
}

static int all_ok(const run_t *r, int n) {
  for (int i = 0; i < n; i++)
    if (!aa_gang_exited_ok(r->status[i])) return 0;
  return 1;
}

/* Largest relative difference of steps [from, STEPS] of r's losses from
 * ref's, each checked against tol, and the gradient norms (within 1.5e-3,
 * or equal when tol is 0). */
static double compare(const char *what, const run_t *r, const run_t *ref, int from, double tol) {
  double worst = 0;
  CHECK_MSG(r->steps == ref->steps, "%s: %d steps, the reference %d", what, r->steps, ref->steps);
  for (int s = from; s <= ref->steps; s++) {
    double d = fabs(r->loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
    CHECK_MSG(d <= tol, "%s: step %d loss %.9g vs %.9g (relative %.3g)", what, s, r->loss[s], ref->loss[s], d);
    /* AdamW is invariant to the gradient's scale, so a wrong factor (a sum
     * over ranks instead of the mean) would hide from the losses; the norm
     * shows it. The log prints it to 3 decimals. */
    CHECK_MSG(fabs(r->norm[s] - ref->norm[s]) <= (tol ? 1.5e-3 : 0), "%s: step %d gradient norm %.3f vs %.3f", what,
              s, r->norm[s], ref->norm[s]);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

static run_t single[3]; /* the single-process references, by amp */
static run_t dp4[3][4];  /* dp 4 at each ZeRO stage, by amp, for the memory test */

static const run_t *run_single(aa_dtype_t amp) {
  run_t *r = &single[amp];
  if (isnan(r->loss[1])) {
    char out[32];
    snprintf(out, sizeof out, "single.%s", aa_dtype_name(amp));
    cfg_t c = {.dp = 0, .amp = amp, .out = out, .kill_rank = -1};
    run(&c, r);
    CHECK(all_ok(r, 1) && !isnan(r->loss[STEPS]) && !isnan(r->val_loss[0]));
  }
  return r;
}

/* dp ranks at each ZeRO stage against the single process: the loss of
 * every step and every rank's validation loss (the mean over ranks). */
static void equivalence(int dp, int micro_batch, aa_dtype_t amp, double tol) {
  const run_t *ref = run_single(amp);
  for (int zero = 0; zero <= 3; zero++) {
    char out[32];
    snprintf(out, sizeof out, "eq%d.z%d.%s", dp, zero, aa_dtype_name(amp));
    cfg_t c = {.dp = dp, .zero = zero, .micro_batch = micro_batch, .amp = amp, .out = out, .kill_rank = -1};
    run_t r;
    run(&c, &r);
    CHECK_MSG(all_ok(&r, dp), "%s: a rank failed", out);
    double worst = compare(out, &r, ref, 1, tol), worst_val = 0;
    for (int i = 0; i < dp; i++) {
      double dv = fabs(r.val_loss[i] - ref->val_loss[0]) / ref->val_loss[0];
      CHECK_MSG(dv <= tol, "%s rank %d: val loss %.9g vs %.9g", out, i, r.val_loss[i], ref->val_loss[0]);
      if (!(dv <= worst_val)) worst_val = dv;
    }
    fprintf(stderr, "  %s dp %d zero %d (%d micro-batch%s per rank): max relative loss difference %.2e, val %.2e\n",
            aa_dtype_name(amp), dp, zero, 8 / dp / micro_batch, 8 / dp / micro_batch == 1 ? "" : "es", worst,
            worst_val);
    if (dp == 4) dp4[amp][zero] = r;
  }
}

AA_TEST(dp2_matches_single_process_losses_at_every_zero_stage) { equivalence(2, 1, AA_F32, REL_TOL); }
AA_TEST(dp4_matches_single_process_losses_at_every_zero_stage) { equivalence(4, 2, AA_F32, REL_TOL); }
AA_TEST(dp4_bf16_and_dp2_fp16_match_single_process_losses_at_every_zero_stage) {
  equivalence(4, 1, AA_BF16, REL_TOL_AMP);
  equivalence(2, 2, AA_F16, REL_TOL_AMP);
}

AA_TEST(per_rank_state_bytes_fall_by_the_zero_ratios) {
  /* Psi parameters. Each unit u (wte|wpe, a block, lnf) of n_u elements is
   * padded to dp * c_u, c_u = ceil(n_u / dp), and a rank keeps c_u of it,
   * so a rank's shard is S = sum of c_u elements. Per rank (this engine
   * keeps fp32 gradients, 4 bytes, also under amp, where the paper's are 2;
   * under amp the fp32 master weights count as optimizer state):
   *            fp32                  bf16
   *   stage    params grads optim    params grads optim
   *   0        4Psi   4Psi  8Psi     2Psi   4Psi  12Psi
   *   1        4Psi   4Psi  8S       2Psi   4Psi  12S
   *   2        4Psi   4S    8S       2Psi   4S    12S
   *   3        4S     4S    8S       2S     4S    12S
   * Each figure is checked to the byte. */
  aa_model_spec_t s;
  tiny_spec(&s);
  aa_gpt_t *m;
  CHECK(aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 16, NULL) == 0);
  const int dp = 4;
  size_t psi = m->n_params, S = 0;
  for (int u = 0; u < aa_gpt_n_units(m); u++) {
    size_t off, n;
    aa_gpt_unit(m, u, &off, &n);
    S += (n + dp - 1) / dp;
  }
  aa_gpt_free(m);
  CHECK(S * dp > psi); /* the padding is real */
  fprintf(stderr, "  Psi = %zu parameters, S = %zu = Psi/4 + %.2f padding elements per rank\n", psi, S,
          (double)S - psi / 4.0);
  const int kind[3] = {AA_MEM_PARAMS, AA_MEM_GRADS, AA_MEM_OPTIM};
  for (aa_dtype_t amp = AA_F32; amp <= AA_BF16; amp++) {
    size_t P = amp == AA_F32 ? 4 : 2, O = amp == AA_F32 ? 8 : 12; /* bytes per parameter */
    size_t want[4][3] = {{P * psi, 4 * psi, O * psi}, {P * psi, 4 * psi, O * S}, {P * psi, 4 * S, O * S},
                         {P * S, 4 * S, O * S}};
    for (int zero = 0; zero <= 3; zero++) {
      const run_t *r = &dp4[amp][zero];
      if (!all_ok(r, dp)) {
        CHECK_MSG(0, "the %s dp 4 zero %d run failed", aa_dtype_name(amp), zero);
        continue;
      }
      for (int i = 0; i < dp; i++)
        for (int k = 0; k < 3; k++)
          CHECK_MSG(r->peak[i][kind[k]] == want[zero][k], "%s zero %d rank %d %s: %zu bytes, want %zu",
                    aa_dtype_name(amp), zero, i, aa_mem_kind_name(kind[k]), r->peak[i][kind[k]], want[zero][k]);
      const size_t *p = r->peak[0], *p0 = dp4[amp][0].peak[0];
      fprintf(stderr,
              "  %s zero %d: params %6zu grads %6zu optim %6zu bytes per rank; vs zero 0: params %.6f grads %.6f "
              "optim %.6f, all three %.6f\n",
              aa_dtype_name(amp), zero, p[AA_MEM_PARAMS], p[AA_MEM_GRADS], p[AA_MEM_OPTIM],
              (double)p[AA_MEM_PARAMS] / p0[AA_MEM_PARAMS], (double)p[AA_MEM_GRADS] / p0[AA_MEM_GRADS],
              (double)p[AA_MEM_OPTIM] / p0[AA_MEM_OPTIM],
              (double)(p[AA_MEM_PARAMS] + p[AA_MEM_GRADS] + p[AA_MEM_OPTIM]) /
                  (p0[AA_MEM_PARAMS] + p0[AA_MEM_GRADS] + p0[AA_MEM_OPTIM]));
    }
  }
}

/* Every one of the n ranks of run r (of c) accounted, kind by kind, the
 * bytes the planner's cost model (strategies/cost.h) predicts for its
 * strategy, to the byte; the prediction into *out. */
static void check_predicted_bytes(const char *what, const cfg_t *c, const run_t *r, int n, aa_cost_mem_t *out) {
  aa_model_spec_t s;
  model_spec(&s, c->model, c->steps);
  aa_strategy_t st;
  strategy_of(c, r->micro_batch, &st);
  const int m = aa_strategy_accum_steps(&st, &s);
  aa_cost_memory(&s.arch, &st, m, out);
  for (int i = 0; i < n; i++) {
    /* Under pipeline parallelism each stage holds its own. */
    aa_layout_t l;
    aa_cost_mem_t mine;
    CHECK(aa_layout_of(&l, &st, i) == 0);
    aa_cost_memory_stage(&s.arch, &st, m, l.coord[AA_AXIS_PIPELINE], &mine);
    for (int k = 0; k < AA_MEM_NKINDS; k++)
      CHECK_MSG(mine.bytes[k] == r->peak[i][k], "%s rank %d %s: predicted %zu, accounted %zu", what, i,
                aa_mem_kind_name(k), mine.bytes[k], r->peak[i][k]);
  }
}

/* The planner's cost model (strategies/cost.h) on the same dp 4 runs:
 * every kind to the byte, ZeRO's shards and scratch included (the CPU
 * backend has no scratch of its own, the one thing the model leaves out). */
AA_TEST(the_cost_model_predicts_every_ranks_bytes_at_every_zero_stage) {
  for (aa_dtype_t amp = AA_F32; amp <= AA_BF16; amp++)
    for (int zero = 0; zero <= 3; zero++) {
      const run_t *r = &dp4[amp][zero];
      if (!all_ok(r, 4)) {
        CHECK_MSG(0, "the %s dp 4 zero %d run failed", aa_dtype_name(amp), zero);
        continue;
      }
      char what[32];
      snprintf(what, sizeof what, "%s zero %d", aa_dtype_name(amp), zero);
      aa_cost_mem_t c;
      check_predicted_bytes(what, &(cfg_t){.dp = 4, .zero = zero, .amp = amp}, r, 4, &c);
    }
}

/* --- tensor parallelism ------------------------------------------------------------- */

#define TP_STEPS 10
static run_t tp_single[3]; /* the single-process references on the tensor-parallel tests' model, by amp */

static const run_t *run_tp_single(aa_dtype_t amp) {
  run_t *r = &tp_single[amp];
  if (isnan(r->loss[1])) {
    char out[32];
    snprintf(out, sizeof out, "tp-single.%s", aa_dtype_name(amp));
    cfg_t c = {.dp = 0, .model = TP_MODEL, .steps = TP_STEPS, .amp = amp, .out = out, .kill_rank = -1};
    run(&c, r);
    CHECK(all_ok(r, 1) && !isnan(r->loss[TP_STEPS]) && !isnan(r->val_loss[0]));
  }
  return r;
}

/* A dp x tp run of the tensor-parallel model against the single process:
 * the loss and gradient norm of each of 10 steps, every rank's validation
 * loss, and every rank's accounted bytes against the cost model's
 * prediction for the strategy (to the byte: the tensor slice and the
 * sequence split change what a rank holds, and sizes.h must say so). */
/* Run c (named out) against the single-process reference ref: every rank
 * finished, the losses and gradient norms of every step (compare), every
 * rank's validation loss, and every rank's accounted bytes against the
 * cost model (its stage's under a pipeline); the worst relative loss and
 * validation differences into *worst and *worst_val, the prediction into
 * *cost, the run into *r. */
static void equivalent_run(cfg_t *c, const char *out, const run_t *ref, double tol, run_t *r, double *worst,
                           double *worst_val, aa_cost_mem_t *cost) {
  c->out = out;
  c->kill_rank = -1;
  run(c, r);
  int n = world_of(c);
  CHECK_MSG(all_ok(r, n), "%s: a rank failed", out);
  *worst = compare(out, r, ref, 1, tol);
  *worst_val = 0;
  for (int i = 0; i < n; i++) {
    double dv = fabs(r->val_loss[i] - ref->val_loss[0]) / ref->val_loss[0];
    CHECK_MSG(dv <= tol, "%s rank %d: val loss %.9g vs %.9g", out, i, r->val_loss[i], ref->val_loss[0]);
    if (!(dv <= *worst_val)) *worst_val = dv;
  }
  check_predicted_bytes(out, c, r, n, cost);
}

static void tp_equivalence(cfg_t c, double tol) {
  const run_t *ref = run_tp_single(c.amp);
  char out[64];
  snprintf(out, sizeof out, "tp.dp%d.tp%d%s.cp%d.z%d.%s.ckpt-%s", c.dp, c.tp ? c.tp : 1, c.sp ? ".sp" : "",
           c.cp ? c.cp : 1, c.zero, aa_dtype_name(c.amp), aa_ckpt_mode_name(c.ckpt));
  c.model = TP_MODEL;
  c.steps = TP_STEPS;
  run_t r;
  double worst, worst_val;
  aa_cost_mem_t cost;
  equivalent_run(&c, out, ref, tol, &r, &worst, &worst_val, &cost);
  size_t one = 0;
  for (int k = 0; k < AA_MEM_NKINDS; k++) one += ref->peak[0][k];
  fprintf(stderr, "  %s: max relative loss difference %.2e, val %.2e; %zu bytes a rank, %.2f of one process's\n",
          out, worst, worst_val, cost.total, (double)cost.total / (double)one);
}

AA_TEST(tp2_and_tp4_match_the_single_process_with_and_without_sequence_parallelism) {
  for (int tp = 2; tp <= 4; tp += 2)
    for (int sp = 0; sp <= 1; sp++) tp_equivalence((cfg_t){.dp = 1, .tp = tp, .sp = sp}, REL_TOL);
}

AA_TEST(dp2_tp2_matches_the_single_process_with_zero_1_and_zero_3) {
  tp_equivalence((cfg_t){.dp = 2, .tp = 2, .zero = 1, .micro_batch = 2}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 2, .tp = 2, .sp = 1, .zero = 3, .micro_batch = 4}, REL_TOL);
}

AA_TEST(tp2_in_bf16_and_fp16_and_with_full_checkpointing_matches_the_single_process) {
  tp_equivalence((cfg_t){.dp = 1, .tp = 2, .amp = AA_BF16}, REL_TOL_AMP);
  tp_equivalence((cfg_t){.dp = 1, .tp = 2, .sp = 1, .amp = AA_F16}, REL_TOL_AMP);
  tp_equivalence((cfg_t){.dp = 1, .tp = 2, .ckpt = AA_CKPT_FULL}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 1, .tp = 2, .sp = 1, .ckpt = AA_CKPT_SELECTIVE, .micro_batch = 4}, REL_TOL);
}

/* One forward, backward and AdamW step of the tensor-parallel model on a
 * fixed batch, as rank `rank` of tp (tp 1: one process): writes the loss
 * and the gradient norm, then the rank's flat gradient and its parameters
 * after the step, to DIR/step.RANK. */
static int tp_step_rank(const void *data, int rank) {
  const gang_t *gang = data;
  const int tp = gang->c->tp, sp = gang->c->sp;
  const char *dir = gang->dir;
  aa_comm_t *group = NULL, *self = NULL;
  int rc = tp > 1 ? aa_comm_init(&group, gang->rdv, rank, tp, NULL) : 0;
  if (!rc) rc = aa_comm_self(&self);
  aa_model_spec_t s;
  model_spec(&s, TP_MODEL, 2);
  aa_gpt_opts_t o = {.amp = AA_F32, .tensor = group, .sp = sp};
  aa_gpt_t *m = NULL;
  aa_zero_t z = {0};
  enum { B = 2, T = 16 };
  int32_t in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) {
    in[i] = (i * 37 + 11) % 251; /* every rank's vocabulary slice, its last row included */
    tg[i] = (i * 53 + 250) % 251;
  }
  float loss = 0, norm = 0, *g = NULL, *p = NULL;
  if (!rc) rc = aa_gpt_create(&m, &s.arch, aa_ops_cpu(), B, T, &o);
  if (!rc) rc = aa_zero_init(&z, m, self, 0, NULL);
  if (!rc) rc = aa_gpt_init_weights(m, 1234);
  if (!rc) rc = aa_gpt_forward(m, in, tg, &loss);
  if (!rc) rc = aa_gpt_backward(m, 1.0f);
  if (!rc && (g = malloc(m->n_params * sizeof *g))) memcpy(g, m->grads.data, m->n_params * sizeof *g);
  if (!rc) rc = aa_zero_step(&z, m, &s.train, 1e-2f, 1.0, 0, &norm);
  char path[600];
  snprintf(path, sizeof path, "%s/step.%d", dir, rank);
  FILE *f = fopen(path, "wb");
  if (!rc && f && g) {
    p = m->params.data;
    size_t n = m->n_params;
    rc = fwrite(&loss, sizeof loss, 1, f) != 1 || fwrite(&norm, sizeof norm, 1, f) != 1 ||
         fwrite(&n, sizeof n, 1, f) != 1 || fwrite(g, sizeof *g, n, f) != n || fwrite(p, sizeof *p, n, f) != n;
  }
  if (rc) fprintf(stderr, "  tp rank %d: %s\n", rank, aa_last_error());
  if (f) fclose(f);
  free(g);
  aa_zero_free(&z, m);
  aa_gpt_free(m);
  aa_comm_destroy(self);
  aa_comm_destroy(group);
  return rc ? TRAIN_FAILED : 0;
}

/* What a one-step run left, put back into the whole model's layout: loss,
 * norm, gradient and parameters (the whole model's count each); 0 when something is
 * missing. Replicated tensors must be equal on every rank. */
typedef struct {
  float loss, norm;
  float *grad, *param;
} tp_step_t;

static int tp_step(int tp, int sp, tp_step_t *out) {
  char dir[512], rdv[AA_RENDEZVOUS_MAX];
  snprintf(dir, sizeof dir, "%s/tpstep.%d.%d", tmpdir, tp, sp);
  CHECK(aa_mkdirs(dir) == 0);
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_parallel") == 0);
  int status[MAX_RANKS], ok = 1;
  double exit_time[MAX_RANKS];
  const cfg_t c = {.tp = tp, .sp = sp};
  aa_gang_fork(dir, tp, tp_step_rank, &(gang_t){.c = &c, .rdv = rdv, .dir = dir}, status, exit_time);
  for (int r = 0; r < tp; r++) ok &= aa_gang_exited_ok(status[r]);
  CHECK_MSG(ok, "tp %d sp %d: a rank failed", tp, sp);
  if (!ok) return 0;
  aa_model_spec_t s;
  model_spec(&s, TP_MODEL, 2);
  int nt = aa_gpt_n_tensors(&s.arch);
  aa_tensor_desc_t *tab = calloc((size_t)nt, sizeof *tab);
  size_t whole = (size_t)aa_arch_param_count(&s.arch);
  out->grad = calloc(whole, sizeof(float));
  out->param = calloc(whole, sizeof(float));
  for (int r = 0; r < tp && ok; r++) {
    char path[600];
    snprintf(path, sizeof path, "%s/step.%d", dir, r);
    FILE *f = fopen(path, "rb");
    size_t n = 0;
    float loss, norm;
    ok = f && fread(&loss, sizeof loss, 1, f) == 1 && fread(&norm, sizeof norm, 1, f) == 1 &&
         fread(&n, sizeof n, 1, f) == 1;
    float *buf = ok ? malloc(2 * n * sizeof(float)) : NULL;
    ok = ok && buf && fread(buf, sizeof(float), 2 * n, f) == 2 * n;
    if (f) fclose(f);
    if (ok && r == 0) *out = (tp_step_t){loss, norm, out->grad, out->param};
    CHECK_MSG(!ok || (loss == out->loss && norm == out->norm), "tp %d sp %d rank %d: loss %.9g norm %.9g, rank 0 %.9g %.9g",
              tp, sp, r, loss, norm, out->loss, out->norm);
    aa_gpt_tensor_table(&s.arch, tp, r, tab);
    for (int i = 0; ok && i < nt; i++) {
      const aa_tensor_desc_t *t = &tab[i];
      for (int k = 0; k < t->runs; k++) {
        const float *lg = buf + t->offset + (size_t)k * t->run_lstride, *lp = lg + n;
        float *gg = out->grad + t->run_global + (size_t)k * t->run_gstride;
        float *gp = out->param + t->run_global + (size_t)k * t->run_gstride;
        if (t->replicated && r > 0) {
          CHECK_MSG(!memcmp(gg, lg, t->run_n * sizeof(float)) && !memcmp(gp, lp, t->run_n * sizeof(float)),
                    "tp %d sp %d: %s differs between rank 0 and rank %d", tp, sp, t->name, r);
          continue;
        }
        memcpy(gg, lg, t->run_n * sizeof(float));
        memcpy(gp, lp, t->run_n * sizeof(float));
      }
      /* Padding rows of a vocabulary slice stay zero, gradient and all. */
      size_t real = t->runs ? (size_t)t->runs * t->run_n : 0;
      for (size_t j = real; t->runs <= 1 && j < t->numel; j++)
        CHECK_MSG(buf[t->offset + j] == 0 && buf[n + t->offset + j] == 0, "tp %d: %s padding element %zu not 0",
                  tp, t->name, j);
    }
    free(buf);
  }
  CHECK_MSG(ok, "tp %d sp %d: cannot read a rank's results", tp, sp);
  free(tab);
  return ok;
}

/* After one step at tp 2 and 4, with and without sequence parallelism,
 * every gradient and every parameter, gathered into the whole model's
 * layout, is the single process's. Gradients within 1e-5 of the largest
 * gradient of their tensor: each is the single process's sum of products
 * taken in another order (a row-parallel GEMM's partial sums over a
 * rank's columns, then summed over ranks; under sequence parallelism the
 * LayerNorm gradients over each rank's tokens, then summed), which moves
 * it by a few fp32 ulps of the largest terms (~1e-7 relative), while a
 * wrong slice, a missing reduction or a double-counted bias is off by
 * O(1). Parameters after the step within 1e-6, where the gradient is not
 * near 0: AdamW's first step moves a parameter by lr g / (|g| + eps) (plus
 * the decay, the same on both sides), which is +-lr for any gradient well
 * above eps and changes only by rounding. Where the gradient is within
 * 1e-3 of its tensor's largest, a relative change of 1e-7 in it is a
 * larger one of g / (|g| + eps) (measured: up to 5.6e-5 at lr 1e-2), so
 * there the bound is the step itself, 2 lr, and the test counts them. */
/* got (a one-step run, in the whole model's layout) against ref, tensor
 * by tensor, with the bounds above; the worst figures into worst_g,
 * worst_p and the count of parameters left to the step bound into small.
 * what names the run in messages. */
static void check_step(const char *what, const tp_step_t *got, const tp_step_t *ref, double *worst_g,
                       double *worst_p, size_t *small) {
  aa_model_spec_t s;
  model_spec(&s, TP_MODEL, 2);
  int nt = aa_gpt_n_tensors(&s.arch);
  aa_tensor_desc_t *tab = calloc((size_t)nt, sizeof *tab);
  aa_gpt_tensor_table(&s.arch, 1, 0, tab);
  CHECK_MSG(fabsf(got->loss - ref->loss) <= 1e-6f * ref->loss, "%s: loss %.9g vs %.9g", what, got->loss,
            ref->loss);
  CHECK_MSG(fabsf(got->norm - ref->norm) <= 1e-5f * ref->norm, "%s: norm %.9g vs %.9g", what, got->norm,
            ref->norm);
  *worst_g = *worst_p = 0;
  *small = 0;
  for (int i = 0; i < nt; i++) {
    const aa_tensor_desc_t *t = &tab[i];
    double big = 0, dg = 0, dp = 0;
    for (size_t j = 0; j < t->numel; j++)
      big = fmax(big, fabs(ref->grad[t->offset + j]));
    for (size_t j = 0; j < t->numel; j++) {
      size_t e = t->offset + j;
      dg = fmax(dg, fabs((double)got->grad[e] - ref->grad[e]));
      double d = fabs((double)got->param[e] - ref->param[e]);
      if (fabs(ref->grad[e]) < 1e-3 * big) {
        (*small)++;
        CHECK_MSG(d <= 2 * 1e-2, "%s: %s[%zu] moved %.3g, more than the step", what, t->name, j, d);
      } else {
        dp = fmax(dp, d);
      }
    }
    double rg = big > 0 ? dg / big : dg;
    CHECK_MSG(rg <= 1e-5, "%s: %s gradient off by %.3g of its largest (%.3g)", what, t->name, rg, big);
    CHECK_MSG(dp <= 1e-6, "%s: %s parameter off by %.3g", what, t->name, dp);
    *worst_g = fmax(*worst_g, rg);
    *worst_p = fmax(*worst_p, dp);
  }
  free(tab);
}

AA_TEST(after_one_step_every_gathered_gradient_and_parameter_matches_the_single_process) {
  tp_step_t ref = {0};
  if (!tp_step(1, 0, &ref)) return;
  aa_model_spec_t s;
  model_spec(&s, TP_MODEL, 2);
  for (int tp = 2; tp <= 4; tp += 2)
    for (int sp = 0; sp <= 1; sp++) {
      tp_step_t got = {0};
      if (!tp_step(tp, sp, &got)) continue;
      char what[32];
      snprintf(what, sizeof what, "tp %d%s", tp, sp ? " sp" : "");
      double worst_g, worst_p;
      size_t small;
      check_step(what, &got, &ref, &worst_g, &worst_p, &small);
      fprintf(stderr,
              "  %s: loss %.9g (one process %.9g), gradients within %.2e of their largest, "
              "parameters within %.2e (%zu of %zu with a gradient near 0 left to the step bound)\n",
              what, got.loss, ref.loss, worst_g, worst_p, small, (size_t)aa_arch_param_count(&s.arch));
      free(got.grad);
      free(got.param);
    }
  free(ref.grad);
  free(ref.param);
}

/* One step as rank `rank` of a context group of c ranks (the gang's
 * cfg cp): the model built for 16 / c tokens a sequence, fed the rank's
 * two chunks of tp_step_rank's batch (chunk-major, as the trainer does),
 * gradients averaged over the group by ZeRO 0's hooks (the trainer's
 * reduction over data x context ranks) before they are kept; the loss
 * written is the group's mean. Writes DIR/step.RANK as tp_step_rank. */
static int cp_step_rank(const void *data, int rank) {
  const gang_t *gang = data;
  const int c = gang->c->cp;
  const char *dir = gang->dir;
  aa_comm_t *group = NULL;
  int rc = aa_comm_init(&group, gang->rdv, rank, c, NULL);
  aa_model_spec_t s;
  model_spec(&s, TP_MODEL, 2);
  aa_gpt_opts_t o = {.amp = AA_F32, .context = group};
  aa_gpt_t *m = NULL;
  aa_zero_t z = {0};
  enum { B = 2, T = 16 };
  const int Tc = T / (2 * c);
  int32_t full_in[B * T], full_tg[B * T], in[B * T], tg[B * T];
  for (int i = 0; i < B * T; i++) {
    full_in[i] = (i * 37 + 11) % 251;
    full_tg[i] = (i * 53 + 250) % 251;
  }
  int pos0[2];
  aa_gpt_cp_positions(T, c, rank, pos0);
  for (int k = 0; k < 2; k++)
    for (int b = 0; b < B; b++)
      for (int j = 0; j < Tc; j++) {
        in[(k * B + b) * Tc + j] = full_in[b * T + pos0[k] + j];
        tg[(k * B + b) * Tc + j] = full_tg[b * T + pos0[k] + j];
      }
  float loss = 0, norm = 0, *g = NULL;
  if (!rc) rc = aa_gpt_create(&m, &s.arch, aa_ops_cpu(), B, T / c, &o);
  if (!rc) rc = aa_zero_init(&z, m, group, 0, NULL);
  z.last_micro = 1;
  if (!rc) rc = aa_gpt_init_weights(m, 1234);
  if (!rc) rc = aa_gpt_forward(m, in, tg, &loss);
  if (!rc) rc = aa_gpt_backward(m, 1.0f);
  if (!rc) rc = aa_zero_all_reduce_host(&z, &loss, 1, AA_COMM_AVG);
  if (!rc && (g = malloc(m->n_params * sizeof *g))) memcpy(g, m->grads.data, m->n_params * sizeof *g);
  if (!rc) rc = aa_zero_step(&z, m, &s.train, 1e-2f, 1.0, 0, &norm);
  char path[600];
  snprintf(path, sizeof path, "%s/step.%d", dir, rank);
  FILE *f = fopen(path, "wb");
  if (!rc && f && g) {
    const float *p = m->params.data;
    size_t n = m->n_params;
    rc = fwrite(&loss, sizeof loss, 1, f) != 1 || fwrite(&norm, sizeof norm, 1, f) != 1 ||
         fwrite(&n, sizeof n, 1, f) != 1 || fwrite(g, sizeof *g, n, f) != n ||
         fwrite(p, sizeof *p, n, f) != n;
  }
  if (rc) fprintf(stderr, "  cp rank %d: %s\n", rank, aa_last_error());
  if (f) fclose(f);
  free(g);
  aa_zero_free(&z, m);
  aa_gpt_free(m);
  aa_comm_destroy(group);
  return rc ? TRAIN_FAILED : 0;
}

/* After one step at cp 2 and cp 4 (chunks of 4 and of 2 tokens), every
 * rank's averaged gradient and its parameters after the step are the
 * single process's, within the bounds above: the ring's log-sum-exp merge
 * sums a row's attention in blocks instead of at once, and the loss's and
 * gradients' means are taken over ranks' tokens and then over ranks, which
 * moves a figure by fp32 rounding (measured ~1e-7 of the largest
 * gradient), while a chunk at the wrong position, a block merged without
 * its rescaling or a dK that does not return to its owner is off by far
 * more than 1e-5. */
AA_TEST(after_one_step_every_context_ranks_gradient_and_parameters_match_the_single_process) {
  tp_step_t ref = {0};
  if (!tp_step(1, 0, &ref)) return;
  aa_model_spec_t s;
  model_spec(&s, TP_MODEL, 2);
  const size_t n = (size_t)aa_arch_param_count(&s.arch);
  for (int c = 2; c <= 4; c += 2) {
    char dir[512], rdv[AA_RENDEZVOUS_MAX];
    snprintf(dir, sizeof dir, "%s/cpstep.%d", tmpdir, c);
    CHECK(aa_mkdirs(dir) == 0);
    CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_parallel") == 0);
    int status[MAX_RANKS];
    double exit_time[MAX_RANKS];
    const cfg_t cfg = {.cp = c};
    aa_gang_fork(dir, c, cp_step_rank, &(gang_t){.c = &cfg, .rdv = rdv, .dir = dir}, status, exit_time);
    for (int r = 0; r < c; r++) {
      CHECK_MSG(aa_gang_exited_ok(status[r]), "cp %d rank %d failed", c, r);
      char path[600], what[32];
      snprintf(path, sizeof path, "%s/step.%d", dir, r);
      snprintf(what, sizeof what, "cp %d rank %d", c, r);
      FILE *f = fopen(path, "rb");
      size_t got_n = 0;
      tp_step_t got = {0};
      float *buf = malloc(2 * n * sizeof(float));
      int ok = f && buf && fread(&got.loss, sizeof got.loss, 1, f) == 1 &&
               fread(&got.norm, sizeof got.norm, 1, f) == 1 && fread(&got_n, sizeof got_n, 1, f) == 1 &&
               got_n == n && fread(buf, sizeof(float), 2 * n, f) == 2 * n;
      if (f) fclose(f);
      CHECK_MSG(ok, "%s: cannot read its results", what);
      if (ok) {
        got.grad = buf;
        got.param = buf + n;
        double worst_g, worst_p;
        size_t small;
        check_step(what, &got, &ref, &worst_g, &worst_p, &small);
        if (r == 0)
          fprintf(stderr,
                  "  cp %d: loss %.9g (one process %.9g), gradients within %.2e of their largest, "
                  "parameters within %.2e (%zu of %zu left to the step bound)\n",
                  c, got.loss, ref.loss, worst_g, worst_p, small, n);
      }
      free(buf);
    }
  }
  free(ref.grad);
  free(ref.param);
}

/* Checkpoints of tensor-parallel runs (the format and the exact
 * re-sharding: test_tp_ckpt.c): trains `saved` (the tensor-parallel
 * tests' model) for STEPS steps, saving at step 3, then resumes each of
 * `resumes` (n of them) from that checkpoint and compares its steps 4-6
 * with the uninterrupted run's. Tolerances: a resume at the saved layout
 * does the uninterrupted run's arithmetic in the same order from the same
 * bits, so its losses and norms are equal exactly. A resume at another
 * layout starts from the same values too (the re-sharding is a copy:
 * test_tp_ckpt shows it is exact), and then differs only in the order of
 * its fp32 sums (another data degree sums the batch's gradient in other
 * groups; another tensor degree adds the row-parallel layers' partial sums,
 * the vocabulary slices' soft-max parts and the gradient norm's squares in
 * other groups), which the equivalence tests above bound for this model
 * and these steps: relative 1e-5 per step in fp32, 1e-4 under bf16, where a master weight
 * moved by an ulp can flip the rounding of its 16-bit copy. Measured here:
 * at most 9.7e-8 (a few fp32 ulps of the loss), while a moment or weight
 * read from the wrong place moves the loss by percents. */
static void resume_from(cfg_t saved, const cfg_t *resumes, size_t n, const char *saved_name) {
  run_t ra, rb;
  if (!saved.model) saved.model = TP_MODEL;
  saved.kill_rank = -1;
  run(&saved, &ra);
  int ok = all_ok(&ra, world_of(&saved));
  CHECK_MSG(ok, "%s failed", saved.out);
  if (!ok) return;
  char path[700];
  snprintf(path, sizeof path, "%s/%s/step_000003.ckpt", tmpdir, saved.out);
  CHECK(access(path, R_OK) == 0);
  for (size_t i = 0; i < n; i++) {
    cfg_t b = resumes[i];
    b.resume = path;
    b.amp = saved.amp;
    b.model = saved.model;
    b.kill_rank = -1;
    run(&b, &rb);
    CHECK_MSG(all_ok(&rb, world_of(&b)), "%s failed", b.out);
    CHECK_MSG(isnan(rb.loss[3]) && !isnan(rb.loss[4]), "%s: did not resume at step 4", b.out);
    int same = b.dp == saved.dp && b.tp == saved.tp && b.zero == saved.zero && b.sp == saved.sp &&
               b.micro_batch == saved.micro_batch && b.pp == saved.pp && b.vpp == saved.vpp &&
               b.schedule == saved.schedule && b.partition == saved.partition && b.cp == saved.cp;
    double tol = same ? 0 : saved.amp == AA_F32 ? REL_TOL : REL_TOL_AMP;
    double worst = compare(b.out, &rb, &ra, 4, tol);
    if (!b.dp)
      fprintf(stderr, "  %s -> one process: steps 4-6 within %.2e of the uninterrupted run%s\n", saved_name, worst,
              same ? " (equal)" : "");
    else
      fprintf(stderr,
              "  %s -> dp %d x tp %d%s x pp %d x cp %d zero %d: steps 4-6 within %.2e of the uninterrupted "
              "run%s\n",
              saved_name, b.dp, b.tp, b.sp ? " sp" : "", b.pp ? b.pp : 1, b.cp ? b.cp : 1, b.zero, worst,
              same ? " (equal)" : "");
  }
}

AA_TEST(a_tp2_checkpoint_resumes_at_tp1_tp4_and_dp2_x_tp2_and_bit_identically_at_tp2) {
  const cfg_t saved = {.dp = 1, .tp = 2, .checkpoint_every = 3, .out = "tp2"};
  const cfg_t resumes[] = {
      {.dp = 0, .out = "tp2-one"},
      {.dp = 1, .tp = 4, .out = "tp2-tp4"},
      {.dp = 2, .tp = 2, .zero = 1, .out = "tp2-dp2tp2z1"},
      {.dp = 1, .tp = 2, .out = "tp2-tp2"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "tp 2");
}

/* A pipeline checkpoint: each stage writes the units it holds (the last
 * stage's copy of wte|wpe is the first stage's), and any layout reads
 * them back through the tables of both. */
AA_TEST(a_pp2_checkpoint_resumes_in_one_process_at_pp4_tp2_x_pp2_another_cut_and_bit_identically_at_pp2) {
  const cfg_t saved = {.dp = 1, .pp = 2, .model = PP_MODEL, .micro_batch = PP_MB, .checkpoint_every = 3, .out = "pp2"};
  const cfg_t resumes[] = {
      {.dp = 0, .micro_batch = PP_MB, .out = "pp2-one"},
      {.dp = 1, .pp = 4, .micro_batch = PP_MB, .out = "pp2-pp4"},
      {.dp = 1, .tp = 2, .pp = 2, .micro_batch = PP_MB, .out = "pp2-tp2pp2"},
      {.dp = 2, .pp = 2, .zero = 1, .micro_batch = PP_MB / 2, .out = "pp2-dp2pp2z1"},
      {.dp = 1, .pp = 2, .micro_batch = PP_MB, .partition = AA_PARTITION_CUSTOM, .bounds = {0, 1, 4}, .out = "pp2-cut"},
      {.dp = 1, .pp = 2, .micro_batch = PP_MB, .out = "pp2-pp2"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "pp 2");
}

/* And the other way: one process's checkpoint read by pipeline stages. */
AA_TEST(a_single_process_checkpoint_resumes_at_pp2_interleaved_and_at_dp2_x_pp2_zero1) {
  const cfg_t saved = {.dp = 0, .model = PP_MODEL, .micro_batch = PP_MB, .checkpoint_every = 3, .out = "pp-one"};
  const cfg_t resumes[] = {
      {.dp = 1, .pp = 2, .vpp = 2, .schedule = AA_SCHEDULE_INTERLEAVED, .micro_batch = PP_MB, .out = "one-il"},
      {.dp = 2, .pp = 2, .zero = 1, .micro_batch = PP_MB / 2, .out = "one-dp2pp2z1"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "one process");
}

AA_TEST(a_dp2_x_tp2_zero3_checkpoint_resumes_at_tp1_and_tp2_and_bit_identically_at_its_layout) {
  const cfg_t saved = {.dp = 2, .tp = 2, .zero = 3, .checkpoint_every = 3, .out = "z3"};
  const cfg_t resumes[] = {
      {.dp = 0, .out = "z3-one"},
      {.dp = 1, .tp = 2, .out = "z3-tp2"},
      {.dp = 2, .tp = 2, .zero = 3, .out = "z3-z3"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "dp 2 x tp 2 zero 3");
}

AA_TEST(a_tp1_checkpoint_resumes_at_tp2_and_at_tp4_with_sequence_parallelism) {
  const cfg_t saved = {.dp = 0, .checkpoint_every = 3, .out = "one"};
  const cfg_t resumes[] = {
      {.dp = 1, .tp = 2, .out = "one-tp2"},
      {.dp = 1, .tp = 4, .sp = 1, .out = "one-tp4sp"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "one process");
}

AA_TEST(a_bf16_dp2_x_tp2_checkpoint_resumes_in_one_process_and_bit_identically_at_its_layout) {
  const cfg_t saved = {.dp = 2, .tp = 2, .zero = 1, .amp = AA_BF16, .checkpoint_every = 3, .out = "bf16"};
  const cfg_t resumes[] = {
      {.dp = 0, .out = "bf16-one"},
      {.dp = 2, .tp = 2, .zero = 1, .out = "bf16-same"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "bf16 dp 2 x tp 2 zero 1");
}

/* An uninterrupted dp 4 run saves at step 3 (sharded at zero 2); runs that
 * resume from it at dp 2 (zero 1 and 3), over a group of one, and in a
 * single process continue with the uninterrupted run's losses. */
AA_TEST(sharded_checkpoint_at_dp4_resumes_at_dp2_and_dp1) {
  cfg_t a = {.dp = 4, .zero = 2, .micro_batch = 1, .checkpoint_every = 3, .out = "ck4", .kill_rank = -1};
  run_t ra, rb;
  run(&a, &ra);
  CHECK(all_ok(&ra, 4));
  char manifest[600];
  snprintf(manifest, sizeof manifest, "%s/ck4/step_000003.ckpt", tmpdir);
  CHECK(access(manifest, R_OK) == 0);
  const cfg_t resumes[] = {
      {.dp = 2, .zero = 1, .micro_batch = 2, .resume = manifest, .out = "ck4-dp2z1", .kill_rank = -1},
      {.dp = 2, .zero = 3, .micro_batch = 1, .resume = manifest, .out = "ck4-dp2z3", .kill_rank = -1},
      {.dp = 1, .zero = 0, .micro_batch = 8, .resume = manifest, .out = "ck4-dp1", .kill_rank = -1},
      {.dp = 0, .resume = manifest, .out = "ck4-single", .kill_rank = -1},
  };
  for (size_t i = 0; i < sizeof resumes / sizeof resumes[0]; i++) {
    const cfg_t *b = &resumes[i];
    run(b, &rb);
    CHECK_MSG(all_ok(&rb, b->dp ? b->dp : 1), "%s failed", b->out);
    CHECK(isnan(rb.loss[3]) && !isnan(rb.loss[4]));
    double worst = compare(b->out, &rb, &ra, 4, REL_TOL);
    fprintf(stderr, "  dp 4 zero 2 -> %s: steps 4-6 within %.2e of the uninterrupted run\n", b->out, worst);
  }
}

/* Under bf16 the shards hold the fp32 master weights: a dp 4 zero 3 save
 * resumes at dp 2 zero 1 and in a single process, both bf16. */
AA_TEST(sharded_bf16_checkpoint_at_dp4_zero3_resumes_at_dp2_and_in_one_process) {
  cfg_t a = {.dp = 4, .zero = 3, .micro_batch = 1, .amp = AA_BF16, .checkpoint_every = 3, .out = "ck4bf",
             .kill_rank = -1};
  run_t ra, rb;
  run(&a, &ra);
  CHECK(all_ok(&ra, 4));
  char manifest[600];
  snprintf(manifest, sizeof manifest, "%s/ck4bf/step_000003.ckpt", tmpdir);
  const cfg_t resumes[] = {
      {.dp = 2, .zero = 1, .micro_batch = 2, .amp = AA_BF16, .resume = manifest, .out = "ck4bf-dp2z1",
       .kill_rank = -1},
      {.dp = 0, .amp = AA_BF16, .resume = manifest, .out = "ck4bf-single", .kill_rank = -1},
  };
  for (size_t i = 0; i < sizeof resumes / sizeof resumes[0]; i++) {
    run(&resumes[i], &rb);
    CHECK_MSG(all_ok(&rb, resumes[i].dp ? resumes[i].dp : 1), "%s failed", resumes[i].out);
    double worst = compare(resumes[i].out, &rb, &ra, 4, REL_TOL_AMP);
    fprintf(stderr, "  bf16 dp 4 zero 3 -> %s: steps 4-6 within %.2e of the uninterrupted run\n", resumes[i].out,
            worst);
  }
}

/* A zero 0 run saves one file (rank 0's); ranks at zero 3 load their
 * shards from it. */
AA_TEST(single_file_checkpoint_at_dp2_zero0_resumes_at_dp4_zero3) {
  cfg_t a = {.dp = 2, .zero = 0, .micro_batch = 2, .checkpoint_every = 3, .out = "ck2", .kill_rank = -1};
  run_t ra, rb;
  run(&a, &ra);
  CHECK(all_ok(&ra, 2));
  char file[600];
  snprintf(file, sizeof file, "%s/ck2/step_000003.ckpt", tmpdir);
  cfg_t b = {.dp = 4, .zero = 3, .micro_batch = 1, .resume = file, .out = "ck2-dp4z3", .kill_rank = -1};
  run(&b, &rb);
  CHECK(all_ok(&rb, 4));
  double worst = compare(b.out, &rb, &ra, 4, REL_TOL);
  fprintf(stderr, "  dp 2 zero 0 -> dp 4 zero 3: steps 4-6 within %.2e of the uninterrupted run\n", worst);
}

AA_TEST(a_sharded_checkpoint_with_a_bad_or_foreign_rank_file_is_rejected) {
  /* Files of the ck4 run: step 3 and the final save, 4 rank files each. */
  char m3[600], bad[600], f3[700], fin[700];
  snprintf(m3, sizeof m3, "%s/ck4/step_000003.ckpt", tmpdir);
  snprintf(bad, sizeof bad, "%s/bad", tmpdir);
  CHECK(aa_mkdirs(bad) == 0);
  aa_model_spec_t s;
  tiny_spec(&s);
  aa_gpt_t *m;
  CHECK(aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 16, NULL) == 0);
  aa_adamw_t opt;
  CHECK(aa_adamw_init(&opt, m->n_params, NULL) == 0);
  aa_train_state_t st;
  CHECK_MSG(aa_ckpt_load(m3, m, &opt, &st) == 0, "%s", aa_last_error());
  CHECK(st.step == 3 && opt.t == 3);
  /* A copy of the save in another directory: the manifest names its files
   * relative to itself. */
  char mb[700];
  snprintf(mb, sizeof mb, "%s/step_000003.ckpt", bad);
  CHECK(aa_gang_copy_file(m3, mb, -1) == 0);
  for (int r = 0; r < 4; r++) {
    snprintf(f3, sizeof f3, "%s.rank%dof4", m3, r);
    snprintf(fin, sizeof fin, "%s/step_000003.ckpt.rank%dof4", bad, r);
    CHECK(aa_gang_copy_file(f3, fin, -1) == 0);
  }
  CHECK_MSG(aa_ckpt_load(mb, m, &opt, &st) == 0, "%s", aa_last_error());
  /* A flipped payload byte in rank 2's file. */
  snprintf(f3, sizeof f3, "%s.rank2of4", m3);
  snprintf(fin, sizeof fin, "%s/step_000003.ckpt.rank2of4", bad);
  CHECK(aa_gang_copy_file(f3, fin, 300) == 0);
  int rc = aa_ckpt_load(mb, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "rank2of4: checksum mismatch"), "%d %s", rc,
            aa_last_error());
  /* Rank 2's file of another save (the final one) in its place: intact
   * by itself, but not the file the manifest names. */
  snprintf(f3, sizeof f3, "%s/ck4/final.ckpt.rank2of4", tmpdir);
  CHECK(aa_gang_copy_file(f3, fin, -1) == 0);
  rc = aa_ckpt_load(mb, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "the file is from another save"), "%d %s", rc,
            aa_last_error());
  /* A missing rank file, a manifest cut short, one rank file alone. */
  CHECK(unlink(fin) == 0);
  CHECK(aa_ckpt_load(mb, m, &opt, &st) == AA_ENOENT && strstr(aa_last_error(), "rank2of4"));
  snprintf(f3, sizeof f3, "%s/cut.ckpt", bad);
  FILE *f = fopen(f3, "w");
  fputs("{\"format\": \"autoaccel-sharded-checkpoint\", \"world\": ", f);
  fclose(f);
  CHECK(aa_ckpt_load(f3, m, &opt, &st) == AA_EPARSE);
  snprintf(f3, sizeof f3, "%s.rank1of4", m3);
  rc = aa_ckpt_load(f3, m, &opt, &st);
  CHECK_MSG(rc == AA_EINVAL && strstr(aa_last_error(), "load its manifest"), "%s", aa_last_error());
  aa_adamw_free(&opt);
  aa_gpt_free(m);
}

/* --- pipeline parallelism --------------------------------------------------------------
 *
 * The pipeline model's 4 blocks over 2, 3 or 4 stages (or 2 ranks of 2
 * chunks), 4 micro-batches of 2 sequences a step, against one process
 * training the same micro-batches. A stage runs the single process's
 * kernels on the same inputs in the same order; only where a gradient is
 * summed can the order differ: the tied wte's two halves (the head's on
 * the last stage, the embedding's on the first) meet in the embedding
 * group's all-reduce instead of accumulating in one buffer, and the
 * gradient norm's squares are summed per stage and then over stages.
 * Both are fp32 reorderings of a few ulps, so the tolerance is the data
 * tests' (REL_TOL, 1e-5, with their reasoning); measured: 0 in fp32 (the
 * sums come out the same). A wrong hand-off (a stale slot, a gradient
 * sent for another micro-batch, a missing embedding sum) changes the loss
 * in the second digit. */

#define PP_STEPS 10
static run_t pp_single[3];   /* the single-process references, by amp */
static run_t pp_runs[2][2];  /* [gpipe, 1f1b] x [pp 2, pp 4], fp32: for the activation test */

static const run_t *run_pp_single(aa_dtype_t amp) {
  run_t *r = &pp_single[amp];
  if (isnan(r->loss[1])) {
    char out[32];
    snprintf(out, sizeof out, "pp-single.%s", aa_dtype_name(amp));
    cfg_t c = {.dp = 0, .model = PP_MODEL, .steps = PP_STEPS, .micro_batch = PP_MB, .amp = amp, .out = out,
               .kill_rank = -1};
    run(&c, r);
    CHECK(all_ok(r, 1) && !isnan(r->loss[PP_STEPS]) && !isnan(r->val_loss[0]));
  }
  return r;
}

/* Whether file path holds the line text. */
static int file_has(const char *path, const char *text) {
  FILE *f = fopen(path, "r");
  char line[512];
  int found = 0;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
  if (f) fclose(f);
  return found;
}

/* A dp x tp x pp run of the pipeline model against the single process:
 * losses and gradient norms of 10 steps, every rank's validation loss,
 * every rank's bytes (its stage's) against the cost model, and the tied
 * embedding's copies identical at the end (rank 0's log says so). */
static void pp_equivalence(cfg_t c, double tol, run_t *keep) {
  const run_t *ref = run_pp_single(c.amp);
  char out[96];
  const int pp = c.pp, v = c.vpp ? c.vpp : 1;
  int o = snprintf(out, sizeof out, "pp.dp%d.tp%d%s.pp%d.%s", c.dp, c.tp ? c.tp : 1, c.sp ? ".sp" : "", pp,
                   aa_pp_schedule_name(c.schedule));
  if (c.cp > 1) o += snprintf(out + o, sizeof out - o, ".cp%d", c.cp);
  if (v > 1) o += snprintf(out + o, sizeof out - o, "-v%d", v);
  if (c.partition == AA_PARTITION_CUSTOM)
    for (int k = 0; k <= pp * v; k++) o += snprintf(out + o, sizeof out - o, "%s%d", k ? "-" : ".part-", c.bounds[k]);
  else if (c.partition == AA_PARTITION_PARAMETERS)
    o += snprintf(out + o, sizeof out - o, ".part-params");
  snprintf(out + o, sizeof out - o, ".z%d.%s.ckpt-%s", c.zero, aa_dtype_name(c.amp), aa_ckpt_mode_name(c.ckpt));
  c.model = PP_MODEL;
  c.steps = PP_STEPS;
  c.micro_batch = PP_MB;
  run_t r;
  double worst, worst_val;
  aa_cost_mem_t cost;
  equivalent_run(&c, out, ref, tol, &r, &worst, &worst_val, &cost);
  const int n = world_of(&c);
  char log0[700];
  snprintf(log0, sizeof log0, "%s/%s/log.0", tmpdir, out);
  CHECK_MSG(file_has(log0, "the first and last stage's copies are identical"), "%s: no tied-copy check in %s", out,
            log0);
  /* Activations a stage keeps, first and last (ranks 0 and n - 1 in the
   * default order, pipeline slowest). */
  fprintf(stderr, "  %s: max relative loss difference %.2e, val %.2e; acts %zu bytes on the first stage, %zu on the last\n",
          out, worst, worst_val, r.peak[0][AA_MEM_ACTS], r.peak[n - 1][AA_MEM_ACTS]);
  if (keep) *keep = r;
}

AA_TEST(pp2_and_pp4_match_the_single_process_with_gpipe_1f1b_and_interleaved_schedules) {
  for (int sched = 0; sched < 2; sched++)
    for (int k = 0; k < 2; k++)
      pp_equivalence((cfg_t){.dp = 1, .pp = 2 + 2 * k, .schedule = sched ? AA_SCHEDULE_1F1B : AA_SCHEDULE_GPIPE},
                     REL_TOL, &pp_runs[sched][k]);
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .vpp = 2, .schedule = AA_SCHEDULE_INTERLEAVED}, REL_TOL, NULL);
}

AA_TEST(uneven_and_parameter_balanced_partitions_match_the_single_process) {
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .partition = AA_PARTITION_CUSTOM, .bounds = {0, 1, 4}}, REL_TOL, NULL);
  pp_equivalence((cfg_t){.dp = 1, .pp = 3, .partition = AA_PARTITION_CUSTOM, .bounds = {0, 2, 3, 4}}, REL_TOL, NULL);
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .partition = AA_PARTITION_PARAMETERS}, REL_TOL, NULL);
}

AA_TEST(pp2_with_amp_checkpointing_zero1_and_tensor_parallelism_matches_the_single_process) {
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .amp = AA_BF16}, REL_TOL_AMP, NULL);
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .amp = AA_F16, .schedule = AA_SCHEDULE_GPIPE}, REL_TOL_AMP, NULL);
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .ckpt = AA_CKPT_FULL}, REL_TOL, NULL);
  pp_equivalence((cfg_t){.dp = 1, .pp = 2, .vpp = 2, .schedule = AA_SCHEDULE_INTERLEAVED, .ckpt = AA_CKPT_SELECTIVE},
                 REL_TOL, NULL);
  pp_equivalence((cfg_t){.dp = 2, .pp = 2, .zero = 1}, REL_TOL, NULL);
  pp_equivalence((cfg_t){.dp = 1, .tp = 2, .sp = 1, .pp = 2}, REL_TOL, NULL);
}

/* The llama family against its own single process, at each parallel
 * axis and the knobs that touch what llama changes: tensor parallelism
 * splits the key/value heads (2 over tp 2) and [gate | up] as two row
 * blocks, sequence parallelism sums the RMSNorm weight gradients over the
 * group, a pipeline's last stage holds the untied head and no copy of wte
 * (no embedding group), selective checkpointing recomputes SwiGLU, and
 * amp rounds the rotated q and k. Tolerances as the gpt2 tests' (the file's
 * head): the same reorderings of fp32 sums, nothing else. Every rank's
 * bytes are held to the cost model's to the byte (equivalent_run). */
static run_t llama_single[3], qwen_single[3];

/* c.model QWEN_MODEL: the same against the biased model's single process. */
static void llama_equivalence(cfg_t c, double tol) {
  const int qwen = c.model == QWEN_MODEL;
  run_t *ref = qwen ? &qwen_single[c.amp] : &llama_single[c.amp];
  const int mb = c.micro_batch ? c.micro_batch : PP_MB;
  if (isnan(ref->loss[1])) {
    char out[32];
    snprintf(out, sizeof out, "%s-single.%s", qwen ? "qwen" : "llama", aa_dtype_name(c.amp));
    cfg_t s = {.dp = 0,
               .model = qwen ? QWEN_MODEL : LLAMA_MODEL,
               .steps = PP_STEPS,
               .micro_batch = PP_MB,
               .amp = c.amp,
               .out = out,
               .kill_rank = -1};
    run(&s, ref);
    CHECK(all_ok(ref, 1) && !isnan(ref->loss[PP_STEPS]) && !isnan(ref->val_loss[0]));
  }
  char out[96];
  snprintf(out, sizeof out, "%s.dp%d.tp%d%s.pp%d.%s%s.cp%d.z%d.%s.ckpt-%s.mb%d", qwen ? "qwen" : "llama",
           c.dp, c.tp ? c.tp : 1, c.sp ? ".sp" : "", c.pp ? c.pp : 1, aa_pp_schedule_name(c.schedule),
           c.vpp > 1 ? "-v2" : "", c.cp ? c.cp : 1, c.zero, aa_dtype_name(c.amp), aa_ckpt_mode_name(c.ckpt),
           mb);
  c.model = qwen ? QWEN_MODEL : LLAMA_MODEL;
  c.steps = PP_STEPS;
  c.micro_batch = mb;
  run_t r;
  double worst, worst_val;
  aa_cost_mem_t cost;
  equivalent_run(&c, out, ref, tol, &r, &worst, &worst_val, &cost);
  fprintf(stderr, "  %s: max relative loss difference %.2e, val %.2e; %zu bytes on rank 0\n", out, worst, worst_val,
          cost.total);
}

AA_TEST(llama_matches_its_single_process_at_tp_pp_dp_with_amp_checkpointing_and_zero) {
  llama_equivalence((cfg_t){.dp = 1, .tp = 2}, REL_TOL);
  llama_equivalence((cfg_t){.dp = 1, .tp = 2, .sp = 1, .ckpt = AA_CKPT_SELECTIVE}, REL_TOL);
  llama_equivalence((cfg_t){.dp = 1, .pp = 2, .schedule = AA_SCHEDULE_1F1B}, REL_TOL);
  llama_equivalence((cfg_t){.dp = 1, .pp = 2, .vpp = 2, .schedule = AA_SCHEDULE_INTERLEAVED, .ckpt = AA_CKPT_FULL},
                    REL_TOL);
  llama_equivalence((cfg_t){.dp = 2, .zero = 3, .micro_batch = 4}, REL_TOL);
  llama_equivalence((cfg_t){.dp = 2, .tp = 2, .zero = 1}, REL_TOL);
  llama_equivalence((cfg_t){.dp = 1, .tp = 2, .pp = 2, .amp = AA_BF16}, REL_TOL_AMP);
}

/* Qwen2's q/k/v biases: column-parallel with their rows at tp 2 (with
 * sequence parallelism, and beside data parallelism with ZeRO 3, which
 * shards them with the rest of their block), one stage's biases under a
 * pipeline, in bf16. The bytes held to the cost model's as the others. */
AA_TEST(qkv_biases_match_their_single_process_at_tp2_sp_pp2_and_dp2_tp2_zero3) {
  llama_equivalence((cfg_t){.model = QWEN_MODEL, .dp = 1, .tp = 2}, REL_TOL);
  llama_equivalence((cfg_t){.model = QWEN_MODEL, .dp = 1, .tp = 2, .sp = 1, .ckpt = AA_CKPT_SELECTIVE},
                    REL_TOL);
  llama_equivalence((cfg_t){.model = QWEN_MODEL, .dp = 2, .tp = 2, .zero = 3}, REL_TOL);
  llama_equivalence((cfg_t){.model = QWEN_MODEL, .dp = 1, .pp = 2, .amp = AA_BF16}, REL_TOL_AMP);
}

/* A checkpoint of the biased model at tp 2 (each rank's q/k/v bias rows
 * written as the slice of the whole tensors they are) resumes in one
 * process and, bit for bit, at tp 2. */
AA_TEST(a_tp2_checkpoint_with_qkv_biases_resumes_in_one_process_and_bit_identically_at_tp2) {
  const cfg_t saved = {.model = QWEN_MODEL, .dp = 1, .tp = 2, .checkpoint_every = 3, .out = "qwen-tp2"};
  const cfg_t resumes[] = {{.dp = 0, .out = "qwen-tp2-one"}, {.dp = 1, .tp = 2, .out = "qwen-tp2-tp2"}};
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "qwen tp 2");
}

/* --- context parallelism ------------------------------------------------------------ */

/* Context parallelism against the single process on the tensor-parallel
 * tests' model (16 tokens a sequence: chunks of 4 at cp 2, of 2 at cp 4),
 * with the same checks and tolerances as the other axes: every step's loss
 * and gradient norm, every rank's validation loss, every rank's accounted
 * bytes against the cost model to the byte. What moves the figures is the
 * order of fp32 sums only: the ring merges a row's attention block by
 * block through the log-sum-exp, and a rank's loss is the mean of its
 * tokens before the mean over ranks. */
AA_TEST(cp2_and_cp4_match_the_single_process_alone_and_with_tensor_data_zero_amp_and_checkpointing) {
  tp_equivalence((cfg_t){.dp = 1, .cp = 2}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 1, .cp = 4}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 1, .cp = 2, .tp = 2, .sp = 1}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 2, .cp = 2, .zero = 1, .micro_batch = 2}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 2, .cp = 2, .zero = 3}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 1, .cp = 2, .amp = AA_BF16}, REL_TOL_AMP);
  tp_equivalence((cfg_t){.dp = 1, .cp = 2, .amp = AA_F16}, REL_TOL_AMP);
  tp_equivalence((cfg_t){.dp = 1, .cp = 2, .ckpt = AA_CKPT_FULL}, REL_TOL);
  tp_equivalence((cfg_t){.dp = 1, .cp = 2, .ckpt = AA_CKPT_SELECTIVE, .micro_batch = 4}, REL_TOL);
}

/* With a pipeline (each stage's blocks run the ring over the stage's
 * context group) and in the llama family (RoPE at each token's global
 * position; grouped key/value heads travel the ring). */
AA_TEST(cp2_with_a_pipeline_and_llama_at_cp2_match_their_single_process) {
  pp_equivalence((cfg_t){.dp = 1, .cp = 2, .pp = 2, .schedule = AA_SCHEDULE_1F1B}, REL_TOL, NULL);
  llama_equivalence((cfg_t){.dp = 1, .cp = 2}, REL_TOL);
  llama_equivalence((cfg_t){.dp = 1, .cp = 2, .tp = 2, .sp = 1}, REL_TOL);
}

/* A checkpoint does not depend on the context degree: one written at cp 2
 * resumes in one process, at cp 4 and at dp 2 x cp 2 ZeRO 3, and bit-
 * identically at cp 2 (tolerances: resume_from's). */
AA_TEST(a_cp2_checkpoint_resumes_in_one_process_at_cp4_and_dp2_x_cp2_zero3_and_bit_identically_at_cp2) {
  const cfg_t saved = {.dp = 1, .cp = 2, .checkpoint_every = 3, .out = "cp2"};
  const cfg_t resumes[] = {
      {.dp = 0, .out = "cp2-one"},
      {.dp = 1, .cp = 4, .out = "cp2-cp4"},
      {.dp = 2, .cp = 2, .zero = 3, .out = "cp2-dp2cp2z3"},
      {.dp = 1, .cp = 2, .out = "cp2-cp2"},
  };
  resume_from(saved, resumes, sizeof resumes / sizeof resumes[0], "cp 2");
}

/* 3D: 8 ranks on this machine's 2 cores, the slowest run of the suite's
 * pipeline tests. */
AA_TEST(dp2_x_tp2_x_pp2_on_8_ranks_matches_the_single_process) {
  pp_equivalence((cfg_t){.dp = 2, .tp = 2, .pp = 2, .zero = 1}, REL_TOL, NULL);
}

/* What each schedule keeps in flight, measured (every stage's accounted
 * activations, already held to the cost model's prediction to the byte by
 * pp_equivalence): GPipe keeps all 4 micro-batches on every stage, 1F1B at
 * most pp - stage, so for m > pp its first stage keeps fewer (at pp 4 the
 * same: m = pp). */
AA_TEST(one_f_one_b_keeps_fewer_activations_than_gpipe) {
  for (int k = 0; k < 2; k++) {
    const run_t *g = &pp_runs[0][k], *f = &pp_runs[1][k];
    const int pp = 2 + 2 * k;
    if (!all_ok(g, pp) || !all_ok(f, pp)) {
      CHECK_MSG(0, "the pp %d runs failed", pp);
      continue;
    }
    for (int st = 0; st < pp; st++) {
      CHECK_MSG(f->peak[st][AA_MEM_ACTS] <= g->peak[st][AA_MEM_ACTS], "pp %d stage %d: 1f1b %zu > gpipe %zu", pp, st,
                f->peak[st][AA_MEM_ACTS], g->peak[st][AA_MEM_ACTS]);
      fprintf(stderr, "  pp %d stage %d: activations gpipe %zu, 1f1b %zu bytes (%.2f)\n", pp, st,
              g->peak[st][AA_MEM_ACTS], f->peak[st][AA_MEM_ACTS],
              (double)f->peak[st][AA_MEM_ACTS] / (double)g->peak[st][AA_MEM_ACTS]);
    }
    /* m = 4 micro-batches: 1F1B's first stage keeps min(pp, m) of them. */
    if (4 > pp) CHECK(f->peak[0][AA_MEM_ACTS] < g->peak[0][AA_MEM_ACTS]);
    else CHECK(f->peak[0][AA_MEM_ACTS] == g->peak[0][AA_MEM_ACTS]);
  }
}

/* A stage dies (SIGKILL) after step 2; its neighbours wait for it in a
 * send or a receive of step 3. Every other rank must fail and exit within
 * 10 s, well inside the group's 30 s timeout. */
AA_TEST(a_killed_stage_makes_every_other_rank_fail_within_10_s) {
  const struct {
    int pp, victim;
  } cases[] = {{2, 1}, {4, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char out[32];
    snprintf(out, sizeof out, "ppkill%d", cases[k].pp);
    cfg_t c = {.dp = 1, .pp = cases[k].pp, .model = PP_MODEL, .micro_batch = PP_MB, .out = out,
               .kill_rank = cases[k].victim};
    run_t r;
    run(&c, &r);
    int victim = cases[k].victim;
    CHECK(WIFSIGNALED(r.status[victim]) && WTERMSIG(r.status[victim]) == SIGKILL);
    double slowest = 0;
    for (int i = 0; i < cases[k].pp; i++) {
      if (i == victim) continue;
      CHECK_MSG(WIFEXITED(r.status[i]) && WEXITSTATUS(r.status[i]) == TRAIN_FAILED, "%s rank %d: status %#x", out, i,
                r.status[i]);
      double dt = r.exit_time[i] - r.exit_time[victim];
      if (dt > slowest) slowest = dt;
    }
    fprintf(stderr, "  pp %d: the last surviving stage exited %.2f s after stage %d died\n", cases[k].pp, slowest,
            victim);
    CHECK(slowest < 10);
  }
}

/* A rank dies (SIGKILL) after step 2 while the others wait for it in a
 * collective of step 3: at zero 0 in the first gradient all-reduce of the
 * backward, at zero 3 in the first parameter gather of the forward. Every
 * other rank must return an error, free everything (the leak check runs at
 * its exit) and exit within 10 s, well inside the group's 30 s collective
 * timeout, so it is the comm layer noticing the death, not a timeout. */
static void kill_one(int dp, int zero, int victim) {
  char out[32];
  snprintf(out, sizeof out, "kill%d.z%d", dp, zero);
  cfg_t c = {.dp = dp, .zero = zero, .micro_batch = 1, .out = out, .kill_rank = victim};
  run_t r;
  run(&c, &r);
  CHECK(WIFSIGNALED(r.status[victim]) && WTERMSIG(r.status[victim]) == SIGKILL);
  double slowest = 0;
  for (int i = 0; i < dp; i++) {
    if (i == victim) continue;
    CHECK_MSG(WIFEXITED(r.status[i]) && WEXITSTATUS(r.status[i]) == TRAIN_FAILED, "%s rank %d: status %#x", out, i,
              r.status[i]);
    double dt = r.exit_time[i] - r.exit_time[victim];
    if (dt > slowest) slowest = dt;
  }
  fprintf(stderr, "  dp %d zero %d: the last surviving rank exited %.2f s after rank %d died\n", dp, zero, slowest,
          victim);
  CHECK(slowest < 10);
}

AA_TEST(a_killed_rank_makes_every_other_rank_fail_within_10_s) {
  kill_one(2, 0, 1);
  kill_one(4, 3, 2);
}

/* A rank whose training fails (here out of memory before the first step)
 * returns its error and leaves the group; the others, waiting for it in
 * the first collective, fail too instead of waiting out the timeout. */
AA_TEST(a_rank_that_fails_makes_every_other_rank_fail) {
  cfg_t c = {.dp = 4, .zero = 1, .micro_batch = 1, .out = "oom", .kill_rank = -1, .oom_rank = 3};
  run_t r;
  run(&c, &r);
  double first = INFINITY, last = 0;
  for (int i = 0; i < 4; i++) {
    CHECK_MSG(WIFEXITED(r.status[i]) && WEXITSTATUS(r.status[i]) == TRAIN_FAILED, "rank %d: status %#x", i,
              r.status[i]);
    if (r.exit_time[i] < first) first = r.exit_time[i];
    if (r.exit_time[i] > last) last = r.exit_time[i];
  }
  fprintf(stderr, "  all 4 ranks exited within %.2f s of the first\n", last - first);
  CHECK(last - first < 10);
}

/* One rank's mesh over a world group of 4 (engine/mesh.h): at dp 4 the
 * data group is the world itself and the other axes are groups of one; at
 * dp 2 tp 2 (the default axis order, tensor fastest) the tensor groups are
 * {0,1}, {2,3} and the data groups {0,2}, {1,3}, which an all-reduce of
 * the world ranks over each group shows. Exit status 0 when all holds. */
static int mesh_rank(const void *data, int rank) {
  const gang_t *g = data;
  aa_comm_t *world = NULL;
  if (aa_comm_init(&world, g->rdv, rank, 4, NULL)) return 2;
  int bad = 0;
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 4;
  aa_mesh_t m;
  if (aa_mesh_init(&m, &s, world)) bad |= 4;
  else {
    bad |= (m.group[AA_AXIS_DATA] != world || m.at.coord[AA_AXIS_DATA] != rank) << 3;
    for (int a = AA_AXIS_TENSOR; a <= AA_AXIS_PIPELINE; a++)
      bad |= (aa_comm_world(m.group[a]) != 1 || strcmp(aa_comm_backend(m.group[a]), "self")) << 4;
    aa_mesh_free(&m);
  }
  s.degree[AA_AXIS_DATA] = 2;
  s.degree[AA_AXIS_TENSOR] = 2;
  if (aa_mesh_init(&m, &s, world)) bad |= 32;
  else {
    float sums[2] = {(float)rank, (float)rank};
    int rc = aa_comm_all_reduce(m.group[AA_AXIS_DATA], &sums[0], &sums[0], 1, AA_F32, AA_COMM_SUM) ||
             aa_comm_all_reduce(m.group[AA_AXIS_TENSOR], &sums[1], &sums[1], 1, AA_F32, AA_COMM_SUM);
    /* data {r % 2, r % 2 + 2}: 2 (r % 2) + 2; tensor {r - r % 2, +1}: 2 (r - r % 2) + 1 */
    bad |= (rc || sums[0] != 2 * (rank % 2) + 2 || sums[1] != 2 * (rank - rank % 2) + 1) << 6;
    bad |= (m.at.coord[AA_AXIS_DATA] != rank / 2 || m.at.coord[AA_AXIS_TENSOR] != rank % 2 ||
            aa_comm_world(m.group[AA_AXIS_PIPELINE]) != 1)
           << 7;
    aa_mesh_free(&m);
  }
  s.degree[AA_AXIS_DATA] = 3;
  s.degree[AA_AXIS_TENSOR] = 1;
  bad |= (aa_mesh_init(&m, &s, world) != AA_EINVAL) << 8; /* 3 ranks' mesh on a world of 4 */
  aa_comm_destroy(world);
  if (bad) fprintf(stderr, "  rank %d: mesh checks failed: %#x (%s)\n", rank, bad, aa_last_error());
  return bad ? 1 : 0;
}

AA_TEST(the_mesh_of_a_dp4_strategy_has_the_world_as_its_data_group) {
  char rdv[AA_RENDEZVOUS_MAX];
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_mesh") == 0);
  int st[4];
  double exit_time[4];
  aa_gang_fork("mesh", 4, mesh_rank, &(gang_t){.rdv = rdv}, st, exit_time);
  for (int i = 0; i < 4; i++)
    CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == 0, "rank %d: status %#x", i, st[i]);
  /* A single process: a 1x1x1 mesh whose every group is its group of one. */
  aa_comm_t *self = NULL;
  aa_strategy_t s;
  aa_strategy_default(&s);
  aa_mesh_t m;
  CHECK(aa_comm_self(&self) == 0 && aa_mesh_init(&m, &s, self) == 0);
  for (int a = 0; a < AA_AXES; a++) CHECK(m.group[a] == self && m.at.coord[a] == 0 && m.at.size[a] == 1);
  aa_mesh_free(&m);
  aa_comm_destroy(self);
}

/* A rank started by aa_launch_rank (what `train --devices` and the
 * executor's runner both call): rank 1 of 2 trains under a 64 KiB memory
 * limit and fails before its first collective; the launcher aborts the
 * group, so rank 0 fails at once with the abort's cause, not at a
 * timeout. Each rank's message goes to DIR/launch.RANK. */
static int launch_main(const void *data, int rank) {
  const gang_t *g = data;
  aa_model_spec_t s;
  tiny_spec(&s);
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.degree[AA_AXIS_DATA] = 2;
  FILE *log = fopen("/dev/null", "w");
  aa_launch_t l = {.spec = &s,
                   .rank = rank,
                   .world = 2,
                   .rendezvous = g->rdv,
                   .cuda = -1,
                   .opts = {.threads = 1, .log = log, .out_dir = g->dir, .strategy = &st, .checkpoint_every = -1,
                            .log_every = 1, .memory_limit = rank == 1 ? 64 << 10 : 0}};
  int rc = aa_launch_rank(&l, NULL);
  char path[600];
  snprintf(path, sizeof path, "%s/launch.%d", g->dir, rank);
  FILE *f = fopen(path, "w");
  if (f) fprintf(f, "%s\n", rc ? aa_last_error() : "ok");
  if (f) fclose(f);
  if (log) fclose(log);
  return rc ? TRAIN_FAILED : 0;
}

AA_TEST(a_launched_rank_that_fails_aborts_its_gang) {
  /* No gang without a rendezvous; a join that fails says so. */
  aa_model_spec_t s;
  tiny_spec(&s);
  aa_launch_t l = {.spec = &s, .rank = 0, .world = 2, .cuda = -1};
  CHECK(aa_launch_rank(&l, NULL) == AA_EINVAL);
  l.rendezvous = "tcp:/aa-nowhere";
  CHECK(aa_launch_rank(&l, NULL) == AA_EINVAL && strstr(aa_last_error(), "joining the group of 2 ranks: "));
  char dir[512], rdv[AA_RENDEZVOUS_MAX];
  snprintf(dir, sizeof dir, "%s/launch", tmpdir);
  CHECK(aa_mkdirs(dir) == 0);
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_launch") == 0);
  int st[2];
  double exit_time[2];
  double t0 = aa_now();
  aa_gang_fork("launch", 2, launch_main, &(gang_t){.rdv = rdv, .dir = dir}, st, exit_time);
  for (int i = 0; i < 2; i++)
    CHECK_MSG(WIFEXITED(st[i]) && WEXITSTATUS(st[i]) == TRAIN_FAILED, "rank %d: status %#x", i, st[i]);
  double dt = aa_now() - t0;
  char path[600], msg[2][512] = {"", ""};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/launch.%d", dir, i);
    FILE *f = fopen(path, "r");
    if (f && !fgets(msg[i], sizeof msg[i], f)) msg[i][0] = 0;
    if (f) fclose(f);
    fprintf(stderr, "  rank %d: %s", i, msg[i]);
  }
  CHECK(strstr(msg[1], "out of memory") != NULL);
  CHECK(strstr(msg[0], "aborted by rank 1 (aa_comm_abort)") != NULL);
  fprintf(stderr, "  both ranks out %.2f s after the start\n", dt);
  CHECK(dt < 10);
}

/* Skipping sequences lands where reading them would, across the wrap at
 * the end of the shard, so every rank's slice is the single process's. */
AA_TEST(loader_skip_lands_where_reading_would_across_the_wrap) {
  aa_shard_t sh = {0};
  int32_t tok[103];
  for (int i = 0; i < 103; i++) tok[i] = i;
  sh.tokens = tok;
  sh.n_tokens = 103;
  aa_loader_t a, b;
  int32_t in[3 * 10], tg[3 * 10];
  CHECK(aa_loader_init(&a, &sh, 3, 10) == 0 && aa_loader_init(&b, &sh, 1, 10) == 0);
  for (int k = 0; k < 25; k++) {
    aa_loader_next(&a, in, tg); /* 3 sequences */
    aa_loader_skip(&b, 3);
    CHECK_MSG(a.pos == b.pos, "after %d batches: %llu vs %llu", k + 1, (unsigned long long)a.pos,
              (unsigned long long)b.pos);
  }
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_parallel_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 200000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  for (int a = 0; a < 3; a++)
    for (int i = 0; i <= MAX_STEPS; i++)
      single[a].loss[i] = tp_single[a].loss[i] = pp_single[a].loss[i] = llama_single[a].loss[i] =
          qwen_single[a].loss[i] = NAN;
  RUN(loader_skip_lands_where_reading_would_across_the_wrap);
  RUN(the_mesh_of_a_dp4_strategy_has_the_world_as_its_data_group);
  RUN(dp2_matches_single_process_losses_at_every_zero_stage);
  RUN(dp4_matches_single_process_losses_at_every_zero_stage);
  RUN(dp4_bf16_and_dp2_fp16_match_single_process_losses_at_every_zero_stage);
  RUN(per_rank_state_bytes_fall_by_the_zero_ratios);
  RUN(the_cost_model_predicts_every_ranks_bytes_at_every_zero_stage);
  RUN(after_one_step_every_gathered_gradient_and_parameter_matches_the_single_process);
  RUN(after_one_step_every_context_ranks_gradient_and_parameters_match_the_single_process);
  RUN(tp2_and_tp4_match_the_single_process_with_and_without_sequence_parallelism);
  RUN(dp2_tp2_matches_the_single_process_with_zero_1_and_zero_3);
  RUN(tp2_in_bf16_and_fp16_and_with_full_checkpointing_matches_the_single_process);
  RUN(sharded_checkpoint_at_dp4_resumes_at_dp2_and_dp1);
  RUN(sharded_bf16_checkpoint_at_dp4_zero3_resumes_at_dp2_and_in_one_process);
  RUN(single_file_checkpoint_at_dp2_zero0_resumes_at_dp4_zero3);
  RUN(a_tp2_checkpoint_resumes_at_tp1_tp4_and_dp2_x_tp2_and_bit_identically_at_tp2);
  RUN(a_pp2_checkpoint_resumes_in_one_process_at_pp4_tp2_x_pp2_another_cut_and_bit_identically_at_pp2);
  RUN(a_single_process_checkpoint_resumes_at_pp2_interleaved_and_at_dp2_x_pp2_zero1);
  RUN(a_dp2_x_tp2_zero3_checkpoint_resumes_at_tp1_and_tp2_and_bit_identically_at_its_layout);
  RUN(a_tp1_checkpoint_resumes_at_tp2_and_at_tp4_with_sequence_parallelism);
  RUN(a_bf16_dp2_x_tp2_checkpoint_resumes_in_one_process_and_bit_identically_at_its_layout);
  RUN(a_sharded_checkpoint_with_a_bad_or_foreign_rank_file_is_rejected);
  RUN(pp2_and_pp4_match_the_single_process_with_gpipe_1f1b_and_interleaved_schedules);
  RUN(one_f_one_b_keeps_fewer_activations_than_gpipe);
  RUN(uneven_and_parameter_balanced_partitions_match_the_single_process);
  RUN(pp2_with_amp_checkpointing_zero1_and_tensor_parallelism_matches_the_single_process);
  RUN(dp2_x_tp2_x_pp2_on_8_ranks_matches_the_single_process);
  RUN(cp2_and_cp4_match_the_single_process_alone_and_with_tensor_data_zero_amp_and_checkpointing);
  RUN(cp2_with_a_pipeline_and_llama_at_cp2_match_their_single_process);
  RUN(a_cp2_checkpoint_resumes_in_one_process_at_cp4_and_dp2_x_cp2_zero3_and_bit_identically_at_cp2);
  RUN(llama_matches_its_single_process_at_tp_pp_dp_with_amp_checkpointing_and_zero);
  RUN(qkv_biases_match_their_single_process_at_tp2_sp_pp2_and_dp2_tp2_zero3);
  RUN(a_tp2_checkpoint_with_qkv_biases_resumes_in_one_process_and_bit_identically_at_tp2);
  RUN(a_killed_stage_makes_every_other_rank_fail_within_10_s);
  RUN(a_killed_rank_makes_every_other_rank_fail_within_10_s);
  RUN(a_rank_that_fails_makes_every_other_rank_fail);
  RUN(a_launched_rank_that_fails_aborts_its_gang);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return aa_test_summary();
}
