/* Calibrations (dryrun/calibrate.h) of the bundled tiny example: alone,
 * every wanted op shape timed and the JSON form read back; a gang of two
 * rank processes in one shm group, the four collective kinds fitted for
 * pairs and the same lines on both ranks; and a rank that dies in the
 * middle, which makes its peer fail at once instead of hanging. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_gang.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"
#include "common/spec.h"
#include "dryrun/calibrate.h"
#include "strategies/calib.h"
#include "strategies/predict.h"

static char tmpdir[256];

static int tiny_spec(aa_model_spec_t *s) {
  const char *src = getenv("AA_SOURCE_DIR");
  char path[AA_PATH_MAX];
  snprintf(path, sizeof path, "%s/examples/tiny/model.json", src && *src ? src : ".");
  int rc = aa_spec_load(s, path);
  if (rc) fprintf(stderr, "%s\n", aa_last_error());
  CHECK(rc == 0);
  return rc;
}

/* A smaller model than the example, with few strategies (so few shapes),
 * for the tests that need a calibration to run, not its figures. */
static int small_spec(aa_model_spec_t *s) {
  static const char json[] =
      "{\"name\": \"small\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"d_ff\": 64, "
      "\"seq_len\": 16, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, \"steps\": 10, \"lr\": "
      "0.003}, "
      "\"data\": {\"train\": \"train.bin\"}}";
  int rc = aa_spec_parse(s, json, NULL, "small");
  if (rc) fprintf(stderr, "%s\n", aa_last_error());
  CHECK(rc == 0);
  return rc;
}

/* The whole file at path, NUL-terminated (malloc'd), or NULL. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
  if (n >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)n + 1))) {
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    } else {
      buf[n] = 0;
    }
  }
  fclose(f);
  return buf;
}

typedef struct {
  int small;    /* small_spec rather than the example */
  int die_rank; /* this rank kills itself at progress item die_at; -1 = none */
  int die_at;   /* > 0: that item; <= 0: that many items before the last */
  double budget_s;
} gang_cfg_t;

static void maybe_die(int done, int total, void *data) {
  int at = *(const int *)data;
  if (done == (at > 0 ? at : total + at)) kill(getpid(), SIGKILL);
}

/* One rank of a gang calibration: writes its calibration's JSON to
 * tmpdir/gang.<rank>.json; exits 0, or 2 for AA_ECANCELLED, 1 otherwise. */
static int gang_rank(const char *rdv, int rank, const void *data) {
  const gang_cfg_t *cfg = data;
  aa_model_spec_t s;
  if (cfg->small ? small_spec(&s) : tiny_spec(&s)) return 1;
  aa_comm_t *comm = NULL;
  aa_calib_t *cal = malloc(sizeof *cal);
  int rc = cal ? aa_comm_init(&comm, rdv, rank, 2, NULL) : AA_ENOMEM;
  aa_calibrate_opts_t o = {
      .threads = 1, .comm = comm, .fingerprint = "cpu:test:1MiB", .budget_s = cfg->budget_s};
  if (rank == cfg->die_rank) {
    o.on_progress = maybe_die;
    o.progress_data = (void *)&cfg->die_at;
  }
  if (!rc) rc = aa_calibrate(&s, &o, cal);
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, aa_last_error());
  aa_comm_destroy(comm);
  char *text = rc ? NULL : aa_calib_to_json(cal);
  char path[600];
  snprintf(path, sizeof path, "%s/gang.%d.json", tmpdir, rank);
  FILE *f = text ? fopen(path, "w") : NULL;
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  free(text);
  free(cal);
  return rc == AA_ECANCELLED ? 2 : rc || !f ? 1 : 0;
}

/* Runs before anything else in this process touches the kernels: the
 * ranks are forked, and an OpenMP thread pool does not survive a fork. */
AA_TEST(a_gang_of_two_fits_every_collective_kind_for_pairs) {
  gang_cfg_t cfg = {.die_rank = -1};
  double t0 = aa_now();
  int ok = aa_gang_run("test_dryrun_calibrate", 2, gang_rank, &cfg, "calibration of 2 ranks");
  double took = aa_now() - t0;
  fprintf(stderr, "  a calibration of 2 ranks took %.2f s\n", took);
  if (!ok) return;
  aa_calib_t *c[2] = {calloc(1, sizeof(aa_calib_t)), calloc(1, sizeof(aa_calib_t))};
  for (int r = 0; r < 2; r++) {
    char path[600];
    snprintf(path, sizeof path, "%s/gang.%d.json", tmpdir, r);
    char *text = slurp(path);
    CHECK_MSG(text && aa_calib_parse(c[r], text, path) == 0, "%s: %s", path,
              text ? aa_last_error() : "missing");
    free(text);
  }
  /* Both ranks time the ops at once where the host has a core for each
   * thread, else only as many as it has (one thread each here). */
  const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), timers = cores >= 2 ? 2 : 1;
  CHECK_MSG(c[0]->ranks == timers, "%d ranks timed, want %d", c[0]->ranks, timers);
  CHECK(!strcmp(c[0]->backend, "shm") && !strcmp(c[0]->device, "cpu:test:1MiB"));
  CHECK(c[0]->threads == 1 && c[0]->cuda == 0 && c[0]->host_cores >= 1 && c[0]->measured_s > 0);
  static const aa_cost_collective_t kinds[] = {AA_COST_ALL_REDUCE, AA_COST_ALL_GATHER, AA_COST_REDUCE_SCATTER,
                                               AA_COST_SEND, AA_COST_ALL_TO_ALL};
  CHECK(c[0]->n_link == 5);
  for (int k = 0; k < 5; k++) {
    const aa_calib_link_t *l = aa_calib_find_link(c[0], kinds[k], 2);
    CHECK_MSG(l && l->latency_s >= 0 && l->bytes_per_s > 0, "kind %d", (int)kinds[k]);
    if (l)
      fprintf(stderr, "  kind %d on 2 ranks: %.1f us + bytes / %.2f GB/s\n", (int)kinds[k],
              l->latency_s * 1e6, l->bytes_per_s / 1e9);
  }
  /* Every rank returns rank 0's lines and the ranks' mean op times. */
  CHECK(c[1]->n_link == c[0]->n_link && c[1]->n_op == c[0]->n_op);
  for (int i = 0; i < c[0]->n_link && i < c[1]->n_link; i++)
    CHECK(!memcmp(&c[0]->link[i], &c[1]->link[i], sizeof c[0]->link[i]));
  for (int i = 0; i < c[0]->n_op && i < c[1]->n_op; i++)
    CHECK(c[0]->op[i].fwd_s == c[1]->op[i].fwd_s && c[0]->op[i].bwd_s == c[1]->op[i].bwd_s);
  /* The tiny model's whole calibration is a matter of seconds, even under
   * the sanitizers on two shared cores. */
  CHECK_MSG(took < 30, "%.1f s", took);
  free(c[0]);
  free(c[1]);
}

AA_TEST(a_rank_that_dies_makes_its_peer_fail_at_once) {
  /* Rank 1 dies in the op pass (after 5 shapes), then, in a second gang,
   * in the collectives (8 measurements before the last). A small model and
   * a budget of 10 ms (each op timed once, the collectives at two sizes)
   * keep it quick. */
  int at[2] = {5, -8};
  for (int i = 0; i < 2; i++) {
    gang_cfg_t cfg = {.small = 1, .die_rank = 1, .die_at = at[i], .budget_s = 0.01};
    char rdv[AA_RENDEZVOUS_MAX];
    CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_dryrun_calibrate") == 0);
    int status[2];
    double exit_time[2] = {0, 0};
    aa_gang_fork("a dying rank", 2, aa_gang_call, &(aa_gang_call_t){gang_rank, rdv, &cfg}, status, exit_time);
    CHECK_MSG(status[1] != -1 && WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL, "rank 1: %#x",
              status[1]);
    CHECK_MSG(status[0] != -1 && WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 2, "rank 0: %#x",
              status[0]);
    double lag = exit_time[0] - exit_time[1];
    fprintf(stderr, "  rank 0 failed %.3f s after rank 1 died (at item %d)\n", lag, at[i]);
    CHECK_MSG(lag < 1.5, "%.3f s", lag);
  }
}

AA_TEST(alone_every_wanted_op_is_timed_and_the_json_reads_back) {
  aa_model_spec_t s;
  if (tiny_spec(&s)) return;
  aa_calib_t *c = calloc(1, sizeof *c), *back = calloc(1, sizeof *back);
  static aa_calib_op_t wanted[AA_CALIB_OPS_MAX];
  size_t n = aa_predict_wanted(&s, AA_CALIBRATE_DEVICES_MIN, 0, wanted, AA_CALIB_OPS_MAX);
  CHECK(n > 0 && n <= AA_CALIB_OPS_MAX);
  aa_calibrate_opts_t o = {.threads = 1};
  double t0 = aa_now();
  int rc = aa_calibrate(&s, &o, c);
  double took = aa_now() - t0;
  if (rc) fprintf(stderr, "%s\n", aa_last_error());
  CHECK(rc == 0);
  fprintf(stderr, "  a calibration alone took %.2f s (%zu op shapes)\n", took, n);
  if (!rc) {
    CHECK(c->n_op >= 1 && c->n_op <= (int)n && c->n_link == 0 && c->ranks == 1 && c->threads == 1 &&
          c->cuda == 0);
    CHECK(!strcmp(c->backend, "self") && !strcmp(c->device, "cpu"));
    CHECK(c->measured_s > 0 && c->measured_s <= took);
    for (size_t i = 0; i < n && i < AA_CALIB_OPS_MAX; i++) {
      const aa_calib_op_t *m = aa_calib_find_op(c, &wanted[i].shape, wanted[i].dtype);
      int adamw = wanted[i].shape.op == AA_OP_ADAMW;
      CHECK_MSG(m && m->fwd_s > 0 && (adamw ? m->bwd_s == 0 : m->bwd_s > 0), "op %zu (%s)", i,
                aa_op_kind_name(wanted[i].shape.op));
    }
    char *text = aa_calib_to_json(c);
    CHECK(text && aa_calib_parse(back, text, "calibration") == 0);
    free(text);
    CHECK(back->n_op == c->n_op && back->ranks == 1 && !strcmp(back->backend, "self"));
    for (int i = 0; i < c->n_op && i < back->n_op; i++)
      CHECK_NEAR(back->op[i].fwd_s, c->op[i].fwd_s, 1e-6 * c->op[i].fwd_s);
  }
  free(c);
  free(back);
}

/* A llama model: its own kinds (RMSNorm, SwiGLU, RoPE, grouped-query
 * attention) are among the wanted shapes and each is timed forward and
 * backward by the engine's kernels; no LayerNorm, GELU or gpt2 attention. */
AA_TEST(a_llama_model_times_its_own_op_kinds) {
  static const char json[] =
      "{\"name\": \"small-llama\", \"model\": {\"family\": \"llama\", \"n_layer\": 2, \"n_head\": 4, "
      "\"n_kv_head\": 2, \"d_model\": 32, \"d_ff\": 48, \"seq_len\": 16, \"vocab_size\": 256}, "
      "\"train\": {\"global_batch\": 4, \"steps\": 10, \"lr\": 0.003}, \"data\": {\"train\": \"train.bin\"}}";
  aa_model_spec_t s;
  int rc = aa_spec_parse(&s, json, NULL, "small-llama");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  static aa_calib_op_t wanted[AA_CALIB_OPS_MAX];
  size_t n = aa_predict_wanted(&s, AA_CALIBRATE_DEVICES_MIN, 0, wanted, AA_CALIB_OPS_MAX);
  int kinds[AA_OP_KINDS] = {0};
  for (size_t i = 0; i < n && i < AA_CALIB_OPS_MAX; i++) kinds[wanted[i].shape.op]++;
  CHECK(kinds[AA_OP_RMSNORM] && kinds[AA_OP_SWIGLU] && kinds[AA_OP_ROPE] && kinds[AA_OP_GQA]);
  CHECK(!kinds[AA_OP_LAYERNORM] && !kinds[AA_OP_GELU] && !kinds[AA_OP_ATTENTION]);
  aa_calib_t *c = calloc(1, sizeof *c);
  aa_calibrate_opts_t o = {.threads = 1, .budget_s = 20};
  rc = aa_calibrate(&s, &o, c);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  for (size_t i = 0; !rc && i < n && i < AA_CALIB_OPS_MAX; i++) {
    const aa_calib_op_t *m = aa_calib_find_op(c, &wanted[i].shape, wanted[i].dtype);
    int adamw = wanted[i].shape.op == AA_OP_ADAMW;
    CHECK_MSG(m && m->fwd_s > 0 && (adamw ? m->bwd_s == 0 : m->bwd_s > 0), "op %zu (%s)", i,
              aa_op_kind_name(wanted[i].shape.op));
  }
  free(c);
}

/* A context-parallel candidate's shapes, given as the ops to time: the
 * ring's diagonal and full blocks of a cp 2 rank (gpt2 and llama, whose
 * grouped-query heads fold as calib.h says) are timed forward and backward
 * by the engine's block kernels, with the rest of its step's shapes, and
 * nothing else is. */
AA_TEST(a_context_parallel_candidates_ring_blocks_are_timed) {
  static const char json[] =
      "{\"name\": \"small-llama\", \"model\": {\"family\": \"llama\", \"n_layer\": 2, \"n_head\": 4, "
      "\"n_kv_head\": 2, \"d_model\": 32, \"d_ff\": 48, \"seq_len\": 16, \"vocab_size\": 256}, "
      "\"train\": {\"global_batch\": 4, \"steps\": 10, \"lr\": 0.003}, \"data\": {\"train\": \"train.bin\"}}";
  aa_model_spec_t specs[2];
  if (small_spec(&specs[0])) return;
  int rc = aa_spec_parse(&specs[1], json, NULL, "small-llama");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  for (int k = 0; !rc && k < 2; k++) {
    aa_strategy_t s;
    aa_strategy_default(&s);
    s.degree[AA_AXIS_CONTEXT] = 2;
    s.ckpt = AA_CKPT_FULL;
    CHECK_MSG(aa_strategy_resolve(&s, &specs[k], 2) == 0, "%s", aa_last_error());
    aa_calib_op_t ops[64];
    size_t n = aa_predict_ops(&specs[k].arch, &s, 0, 0, ops, 64);
    int ring = 0;
    for (size_t i = 0; i < n && i < 64; i++)
      ring += ops[i].shape.op == AA_OP_RING_DIAG || ops[i].shape.op == AA_OP_RING_BLOCK;
    CHECK_MSG(n > 0 && n <= 64 && ring == 2, "%zu ops, %d of the ring", n, ring);
    aa_calib_t *c = calloc(1, sizeof *c);
    aa_calibrate_opts_t o = {.threads = 1, .budget_s = 5, .ops = ops, .n_ops = (int)n};
    rc = aa_calibrate(&specs[k], &o, c);
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    CHECK(rc || c->n_op == (int)n);
    for (size_t i = 0; !rc && i < n; i++) {
      const aa_calib_op_t *m = aa_calib_find_op(c, &ops[i].shape, ops[i].dtype);
      int adamw = ops[i].shape.op == AA_OP_ADAMW;
      CHECK_MSG(m && m->fwd_s > 0 && (adamw ? m->bwd_s == 0 : m->bwd_s > 0), "op %zu (%s)", i,
                aa_op_kind_name(ops[i].shape.op));
      if (m && ops[i].shape.op >= AA_OP_RING_DIAG)
        fprintf(stderr, "  %s %s [%lld,%lld,%lld,%lld]: %.2f us forward, %.2f us backward\n", specs[k].name,
                aa_op_kind_name(m->shape.op), (long long)m->shape.d[0], (long long)m->shape.d[1],
                (long long)m->shape.d[2], (long long)m->shape.d[3], m->fwd_s * 1e6, m->bwd_s * 1e6);
    }
    free(c);
  }
  /* An op list out of bounds is refused before anything runs. */
  aa_calib_t *c = calloc(1, sizeof *c);
  aa_calib_op_t bad = {.shape = {AA_OP_KINDS, {1, 1, 1, 1}}};
  CHECK(aa_calibrate(&specs[0], &(aa_calibrate_opts_t){.ops = &bad, .n_ops = 1}, c) == AA_EINVAL);
  CHECK(aa_calibrate(&specs[0], &(aa_calibrate_opts_t){.ops = &bad, .n_ops = 0}, c) == AA_EINVAL);
  free(c);
}

AA_TEST(shapes_past_the_memory_limit_are_left_out) {
  aa_model_spec_t s;
  if (small_spec(&s)) return;
  aa_calib_t *c = calloc(1, sizeof *c);
  static aa_calib_op_t wanted[AA_CALIB_OPS_MAX];
  int n = (int)aa_predict_wanted(&s, AA_CALIBRATE_DEVICES_MIN, 0, wanted, AA_CALIB_OPS_MAX);
  /* 64 KiB: the cross-entropy of 16 tokens fits (its logits, probabilities
   * and their gradient, 16 KiB each), the one of 64 tokens does not (a
   * budget of 10 ms: each op timed once, enough here). */
  const size_t limit = 64 << 10;
  aa_calibrate_opts_t o = {.threads = 1, .memory_limit = limit, .budget_s = 0.01};
  CHECK(aa_calibrate(&s, &o, c) == 0);
  int fit = 0, left_out = 0;
  for (int i = 0; i < n; i++) {
    if (wanted[i].shape.op != AA_OP_XENT) continue;
    int fits = 3 * 4 * wanted[i].shape.d[0] * wanted[i].shape.d[1] < (int64_t)limit / 2;
    int big = 3 * 4 * wanted[i].shape.d[0] * wanted[i].shape.d[1] > (int64_t)limit;
    const aa_calib_op_t *m = aa_calib_find_op(c, &wanted[i].shape, wanted[i].dtype);
    fit += fits && m && m->fwd_s > 0;
    left_out += big && !m;
    CHECK(!(big && m));
  }
  CHECK_MSG(fit > 0 && left_out > 0, "%d fit, %d left out", fit, left_out);
  o.memory_limit = 16;
  c->n_op = -7;
  CHECK(aa_calibrate(&s, &o, c) == AA_EOOM);
  CHECK(c->n_op == -7);
  free(c);
}

AA_TEST(bad_options_are_einval_and_a_long_fingerprint_is_cut_to_fit) {
  aa_model_spec_t s;
  if (tiny_spec(&s)) return;
  aa_calib_t *c = calloc(1, sizeof *c);
  c->n_op = -7;
  CHECK(aa_calibrate(&s, &(aa_calibrate_opts_t){.threads = -1}, c) == AA_EINVAL);
  CHECK(aa_calibrate(&s, &(aa_calibrate_opts_t){.device = "tpu:0"}, c) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "tpu:0") != NULL);
  CHECK(c->n_op == -7); /* untouched on failure */
  /* A fingerprint too long is cut at a character boundary, control
   * characters replaced, so that the JSON form is valid and reads back. */
  char fp[300] = "cpu:\x01";
  while (strlen(fp) < 250)
    strcat(fp, "\xc3\xa9"); /* é */
  aa_model_spec_t small;
  if (small_spec(&small)) return;
  CHECK(aa_calibrate(&small, &(aa_calibrate_opts_t){.threads = 1, .budget_s = 0.01, .fingerprint = fp}, c) ==
        0);
  CHECK(strlen(c->device) <= 127 && !strncmp(c->device, "cpu:?\xc3\xa9", 7));
  char *text = aa_calib_to_json(c);
  aa_calib_t *back = calloc(1, sizeof *back);
  CHECK(text && aa_calib_parse(back, text, "calibration") == 0 && !strcmp(back->device, c->device));
  free(text);
  free(back);
  free(c);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_calibrate_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  RUN(a_gang_of_two_fits_every_collective_kind_for_pairs);
  RUN(a_rank_that_dies_makes_its_peer_fail_at_once);
  RUN(alone_every_wanted_op_is_timed_and_the_json_reads_back);
  RUN(a_llama_model_times_its_own_op_kinds);
  RUN(a_context_parallel_candidates_ring_blocks_are_timed);
  RUN(shapes_past_the_memory_limit_are_left_out);
  RUN(bad_options_are_einval_and_a_long_fingerprint_is_cut_to_fit);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
  return aa_test_summary();
}
