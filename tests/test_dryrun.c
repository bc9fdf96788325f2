/* Dry runs (dryrun/): figures, warm-up, progress and the memory limit, on a
 * small model over the synthetic corpus in a temporary directory; and a
 * data-parallel dry run by two rank processes in one shm group. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "common/rendezvous.h"
#include "common/spec.h"
#include "dryrun/dryrun.h"
#include "comm/comm.h"
#include "engine/data.h"
#include "engine/train.h"

static char tmpdir[256];
static char train_bin[512], val_bin[512];

/* Global batch 4 of 16 tokens: 64 tokens per optimizer step. */
static int small_spec(aa_model_spec_t *s) {
  char json[2048];
  snprintf(
      json, sizeof json,
      "{\"name\": \"d\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"d_ff\": 64, "
      "\"seq_len\": 16, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, \"steps\": 50, \"lr\": 0.003, "
      "\"warmup_steps\": 3, \"eval_every\": 0, \"eval_batches\": 2, \"checkpoint_every\": 5, \"seed\": 7}, "
      "\"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
      train_bin, val_bin);
  int rc = aa_spec_parse(s, json, NULL, "test");
  if (rc) fprintf(stderr, "spec: %s\n", aa_last_error());
  CHECK(rc == 0);
  return rc;
}

static void strategy_mb(aa_strategy_t *st, int micro_batch) {
  aa_strategy_default(st);
  st->micro_batch = micro_batch;
}

#define MAX_CALLS 64
typedef struct {
  int n;
  aa_train_step_info_t info[MAX_CALLS];
  char phase[MAX_CALLS][16];
} calls_t;

static void record(const aa_train_step_info_t *info, void *data) {
  calls_t *c = data;
  if (c->n < MAX_CALLS) {
    c->info[c->n] = *info;
    snprintf(c->phase[c->n], sizeof c->phase[c->n], "%s", info->phase);
  }
  c->n++;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

AA_TEST(measured_figures_are_sane_and_peaks_match_training) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  aa_strategy_t st;
  strategy_mb(&st, 2);
  aa_dryrun_opts_t o = {.threads = 1, .warmup_steps = 1, .measured_steps = 3};
  aa_dryrun_result_t r;
  int rc = aa_dryrun(&s, &st, &o, &r);
  if (rc) fprintf(stderr, "%s\n", aa_last_error());
  CHECK(rc == 0);
  if (rc) return;
  CHECK(r.steps_done == 4);
  CHECK(r.step_ms_median > 0 && r.step_ms_spread >= 0);
  CHECK_NEAR(r.tokens_per_s, 64.0 / (r.step_ms_median / 1e3), 1e-6 * r.tokens_per_s);
  CHECK(r.has_loss && r.final_loss > 0);
  CHECK(!strcmp(r.key, "dp1.tp1.pp1.z0.fp32.ckpt-none.mb2"));
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    CHECK_MSG(r.mem.peak[k] > 0, "%s", aa_mem_kind_name(k));
  CHECK(r.mem.peak_total > 0);

  /* The same strategy trained for real accounts the same peaks. */
  char dir[512];
  snprintf(dir, sizeof dir, "%s/train", tmpdir);
  FILE *log = fopen("/dev/null", "w");
  aa_train_opts_t to = {.threads = 1,
                        .steps = 2,
                        .checkpoint_every = -1,
                        .log_every = 100,
                        .out_dir = dir,
                        .log = log,
                        .strategy = &st};
  aa_train_result_t tr;
  CHECK(aa_train(&s, &to, &tr) == 0);
  fclose(log);
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    CHECK(r.mem.peak[k] == tr.mem.peak[k]);
  CHECK(r.mem.peak_total == tr.mem.peak_total);
}

/* One rank of a dp 2 dry run at ZeRO `zero`: its figures go to
 * tmpdir/dp.<zero>.<rank> as "tokens_per_s params_peak total_peak loss". */
static int dp_rank(const char *rdv, int rank, int zero) {
  aa_model_spec_t s;
  if (small_spec(&s)) return 1;
  aa_strategy_t st;
  strategy_mb(&st, 1);
  st.degree[AA_AXIS_DATA] = 2;
  st.zero = zero;
  aa_comm_t *comm = NULL;
  aa_dryrun_result_t r;
  int rc = aa_comm_init(&comm, rdv, rank, 2, NULL);
  aa_dryrun_opts_t o = {.threads = 1, .warmup_steps = 1, .measured_steps = 2, .comm = comm};
  if (!rc) rc = aa_dryrun(&s, &st, &o, &r);
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, aa_last_error());
  aa_comm_destroy(comm);
  char path[600];
  snprintf(path, sizeof path, "%s/dp.%d.%d", tmpdir, zero, rank);
  FILE *f = rc ? NULL : fopen(path, "w");
  if (f) {
    fprintf(f, "%.17g %zu %zu %.9g\n", r.tokens_per_s, r.mem.peak[AA_MEM_PARAMS], r.mem.peak_total,
            r.final_loss);
    fclose(f);
  }
  return rc ? 1 : 0;
}

/* Runs before anything else in this process touches the engine: the ranks
 * are forked, and an OpenMP thread pool does not survive a fork. */
AA_TEST(a_data_parallel_dry_run_measures_the_group_on_every_rank) {
  double tokens[4][2], loss[4][2];
  size_t params[4][2], total[4][2];
  for (int zero = 0; zero <= 3; zero += 3) {
    char rdv[AA_RENDEZVOUS_MAX];
    CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_dryrun") == 0);
    pid_t pid[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++)
      if ((pid[r] = fork()) == 0) exit(dp_rank(rdv, r, zero)); /* exit: the sanitizers' leak check runs */
    for (int r = 0; r < 2; r++) {
      int st = 0;
      for (int i = 0; i < 6000 && waitpid(pid[r], &st, WNOHANG) == 0; i++)
        usleep(10000);
      if (waitpid(pid[r], &st, WNOHANG) == 0) {
        kill(pid[r], SIGKILL);
        waitpid(pid[r], &st, 0);
      }
      CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "zero %d rank %d ended with status %d", zero, r, st);
      char path[600];
      snprintf(path, sizeof path, "%s/dp.%d.%d", tmpdir, zero, r);
      FILE *f = fopen(path, "r");
      CHECK(f && fscanf(f, "%lf %zu %zu %lf", &tokens[zero][r], &params[zero][r], &total[zero][r],
                        &loss[zero][r]) == 4);
      if (f) fclose(f);
      if (!f) return;
    }
    for (int r = 0; r < 2; r++)
      CHECK(tokens[zero][r] > 0 && total[zero][r] > 0);
    CHECK(loss[zero][0] == loss[zero][1]); /* the group's mean loss on every rank */
  }
  /* ZeRO 3 keeps half the parameters on each rank (plus shard padding). */
  for (int r = 0; r < 2; r++) {
    CHECK_MSG(params[3][r] < params[0][r] * 6 / 10, "rank %d: %zu vs %zu", r, params[3][r], params[0][r]);
    CHECK(total[3][r] < total[0][r]);
  }
}

AA_TEST(warmup_steps_are_not_timed_and_progress_fires_every_step) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  calls_t c = {0};
  aa_dryrun_opts_t o = {
      .threads = 1, .warmup_steps = 2, .measured_steps = 3, .on_step = record, .step_data = &c};
  aa_dryrun_result_t r;
  CHECK(aa_dryrun(&s, NULL, &o, &r) == 0);
  CHECK(c.n == 5);
  if (c.n != 5) return;
  double measured[3];
  for (int i = 0; i < 5; i++) {
    CHECK(c.info[i].step == i + 1 && c.info[i].total == 5);
    CHECK(!strcmp(c.phase[i], i < 2 ? "warmup" : "measure"));
    CHECK(c.info[i].step_ms > 0 && c.info[i].tokens_per_s > 0);
    if (i >= 2) measured[i - 2] = c.info[i].step_ms;
  }
  CHECK_NEAR(c.info[4].loss, r.final_loss, 0);
  /* The figures come from the measured steps alone. */
  qsort(measured, 3, sizeof(double), cmp_double);
  CHECK_NEAR(r.step_ms_median, measured[1], 1e-9);
  CHECK_NEAR(r.step_ms_spread, measured[2] - measured[0], 1e-9);
}

AA_TEST(zero_warmup_times_every_step) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  calls_t c = {0};
  aa_dryrun_opts_t o = {
      .threads = 1, .warmup_steps = 0, .measured_steps = 1, .on_step = record, .step_data = &c};
  aa_dryrun_result_t r;
  CHECK(aa_dryrun(&s, NULL, &o, &r) == 0);
  CHECK(c.n == 1 && !strcmp(c.phase[0], "measure"));
  CHECK_NEAR(r.step_ms_median, c.info[0].step_ms, 1e-9);
  CHECK(r.step_ms_spread == 0);
}

AA_TEST(memory_limit_below_the_peak_is_oom) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  aa_dryrun_opts_t o = {.threads = 1, .warmup_steps = 0, .measured_steps = 1};
  aa_dryrun_result_t r;
  CHECK(aa_dryrun(&s, NULL, &o, &r) == 0);
  o.memory_limit = r.mem.peak_total;
  CHECK(aa_dryrun(&s, NULL, &o, &r) == 0);
  o.memory_limit = r.mem.peak_total - 1;
  int rc = aa_dryrun(&s, NULL, &o, &r);
  CHECK(rc == AA_EOOM);
  CHECK_MSG(strstr(aa_last_error(), "out of memory") != NULL, "%s", aa_last_error());
}

AA_TEST(refused_strategy_is_einval) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  aa_strategy_t st;
  strategy_mb(&st, 3);
  aa_dryrun_result_t r;
  CHECK(aa_dryrun(&s, &st, NULL, &r) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "micro_batch") != NULL, "%s", aa_last_error());
}

/* A spec made for planning has no data: a dry run of it (what an executor
 * runs for a search) is refused as bad input, which no strategy changes,
 * naming the field, and *res is left alone. */
AA_TEST(a_spec_without_data_is_refused_as_input) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  s.train_data[0] = s.val_data[0] = '\0';
  aa_dryrun_result_t r;
  memset(&r, 0x5a, sizeof r);
  CHECK(aa_dryrun(&s, NULL, NULL, &r) == AA_EINPUT);
  CHECK_MSG(strstr(aa_last_error(), "dry run: d has no training data: data.train is required"), "%s",
            aa_last_error());
  CHECK(((unsigned char *)&r)[0] == 0x5a && ((unsigned char *)&r)[sizeof r - 1] == 0x5a);
}

AA_TEST(a_dry_run_writes_nothing) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  char cwd[1024];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(chdir(tmpdir) == 0);
  /* checkpoint_every 5 in the spec and 6 steps: a training run would
   * write runs/d/step_000005.ckpt and final.ckpt here. */
  aa_dryrun_opts_t o = {.threads = 1, .warmup_steps = 1, .measured_steps = 5};
  CHECK(aa_dryrun(&s, NULL, &o, NULL) == 0);
  CHECK(access("runs", F_OK) != 0);
  CHECK(chdir(cwd) == 0);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_dryrun_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 100000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  RUN(a_data_parallel_dry_run_measures_the_group_on_every_rank);
  RUN(measured_figures_are_sane_and_peaks_match_training);
  RUN(warmup_steps_are_not_timed_and_progress_fires_every_step);
  RUN(zero_warmup_times_every_step);
  RUN(memory_limit_below_the_peak_is_oom);
  RUN(refused_strategy_is_einval);
  RUN(a_spec_without_data_is_refused_as_input);
  RUN(a_dry_run_writes_nothing);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
  return aa_test_summary();
}
