/* Checkpoints of tensor-parallel runs (engine/checkpoint.h,
 * docs/checkpoint-format.md): a checkpoint saved at one layout (data
 * degree, tensor degree, ZeRO stage) loads at another, re-sharded through
 * both layouts' tensor tables (engine/model.h).
 *
 * The model has 4 heads and d_ff 64, so tensor degrees 1, 2 and 4 are all
 * valid, and a vocabulary of 250, which 4 does not divide: at tp 4 every
 * rank holds 63 rows of wte and the last one 61 of them real, so the
 * padding rows are real too (they are neither saved nor loaded, and stay
 * zero).
 *
 * Ranks are forked processes (aa_gang.h) that meet in a shared-memory
 * group; the mesh (engine/mesh.h) gives each its data and tensor groups.
 * Training runs that save at one layout and resume at another are in
 * test_parallel.c, with its training harness. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aa_ckpt_test.h"
#include "aa_gang.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/data.h"
#include "engine/mesh.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/train.h"


static char tmpdir[256], train_bin[512], val_bin[512];

static void tiny_spec(aa_model_spec_t *s, int steps) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"name\": \"tp\", \"model\": {\"n_layer\": 2, \"n_head\": 4, \"d_model\": 32, \"d_ff\": 64, "
           "\"seq_len\": 16, \"vocab_size\": 250}, \"train\": {\"global_batch\": 8, \"steps\": %d, \"lr\": 0.003, "
           "\"warmup_steps\": 2, \"eval_every\": 0, \"eval_batches\": 2, \"checkpoint_every\": 0, \"seed\": 7, "
           "\"grad_clip\": 1.0}, \"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
           steps, train_bin, val_bin);
  int rc = aa_spec_parse(s, json, NULL, "test");
  if (rc) fprintf(stderr, "spec: %s\n", aa_last_error());
  CHECK(rc == 0);
}

/* --- re-sharding, without training -------------------------------------------------- */

/* The original: a tp 1 model with initialised weights and moments that
 * name each element (aa_ckpt_test_orig), saved in one file with a
 * training state in which every field is set. */
static const aa_train_state_t orig_state = {.step = 3,
                                            .data_pos = 12345,
                                            .rng = {0x0123456789abcdefull},
                                            .seed = 7,
                                            .loss_scale = 1024,
                                            .scaler_iter = 3,
                                            .scaler_last_overflow = 1,
                                            .scaler_hysteresis_left = 2,
                                            .skipped_steps = 1};
#define ORIG_T 3

static char orig_path[600];

/* A tp 1 model and moments holding the original, made. Host memory: the
 * CPU backend. */
static int make_orig(aa_gpt_t **m, aa_adamw_t *opt) {
  aa_model_spec_t s;
  tiny_spec(&s, 6);
  return aa_ckpt_test_orig(m, opt, &s.arch, ORIG_T, NULL);
}

/* One hop: a gang at a layout loads the previous checkpoint, checks what
 * every rank holds against the original, and saves at its layout. */
typedef struct {
  const char *name; /* the checkpoint it saves: tmpdir/NAME.ckpt */
  const char *from; /* the one it loads: tmpdir/FROM.ckpt */
  int dp, tp, zero;
  aa_dtype_t amp;
} hop_t;

/* Exit status bits of a hop's rank. */
enum { HOP_SETUP = 1, HOP_LOAD = 2, HOP_VALUES = 4, HOP_STATE = 8, HOP_SAVE = 16, HOP_PADDING = 32 };

static int hop_rank(const char *rdv, int rank, const void *data) {
  const hop_t *h = data;
  int bad = 0;
  aa_comm_t *world = NULL;
  aa_gpt_t *m = NULL;
  aa_zero_t z = {0};
  aa_mesh_t mesh = {0};
  aa_model_spec_t s;
  tiny_spec(&s, 6);
  aa_strategy_t strat;
  aa_strategy_default(&strat);
  strat.degree[AA_AXIS_DATA] = h->dp;
  strat.degree[AA_AXIS_TENSOR] = h->tp;
  aa_gpt_opts_t mo = {.zero = h->zero, .amp = h->amp};
  if (aa_comm_init(&world, rdv, rank, h->dp * h->tp, NULL) || aa_mesh_init(&mesh, &strat, world)) {
    fprintf(stderr, "  %s rank %d: %s\n", h->name, rank, aa_last_error());
    bad |= HOP_SETUP;
    goto done;
  }
  mo.tensor = mesh.group[AA_AXIS_TENSOR];
  if (aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 16, &mo) ||
      aa_zero_init(&z, m, mesh.group[AA_AXIS_DATA], h->zero, NULL)) {
    fprintf(stderr, "  %s rank %d: %s\n", h->name, rank, aa_last_error());
    bad |= HOP_SETUP;
    goto done;
  }
  char in[700], out[700];
  snprintf(in, sizeof in, "%s/%s.ckpt", tmpdir, h->from);
  snprintf(out, sizeof out, "%s/%s.ckpt", tmpdir, h->name);
  aa_train_state_t st;
  memset(&st, 0, sizeof st);
  if (aa_ckpt_load_zero(in, m, &z, &st)) {
    fprintf(stderr, "  %s rank %d: %s\n", h->name, rank, aa_last_error());
    bad |= HOP_LOAD;
    goto done;
  }
  /* Every element the rank holds of the three buffers, bit for bit. */
  char label[200];
  snprintf(label, sizeof label, "%s rank %d (tensor %d)", h->name, rank, m->tp_rank);
  int held = aa_ckpt_test_check_held(label, m, &z, &s.arch, orig_path);
  if (held < 0) fprintf(stderr, "  %s: the original: %s\n", label, aa_last_error());
  if (held) bad |= held < 0 ? HOP_SETUP : HOP_VALUES;
  /* The padding rows of the last vocabulary slice are zero in the model's
   * full buffer (stages 0-2 in fp32). */
  if (m->params.data && m->vocab_valid < m->d.Vl) {
    const float *p = m->params.data;
    for (size_t i = (size_t)m->vocab_valid * m->d.C; i < (size_t)m->d.Vl * m->d.C; i++)
      if (p[i] != 0) bad |= HOP_PADDING;
  }
  if (!aa_ckpt_test_same_state(&st, &orig_state) || z.opt.t != ORIG_T) bad |= HOP_STATE;
  if (aa_ckpt_save_zero(out, m, &z, &st)) {
    fprintf(stderr, "  %s rank %d: %s\n", h->name, rank, aa_last_error());
    bad |= HOP_SAVE;
  }
  /* A tensor rank holds a slice: it cannot write a whole-model file. */
  if (m->tp > 1 && aa_ckpt_save(out, m, &z.opt, &st) != AA_EINVAL) bad |= HOP_SAVE;
  /* A second save of other values under another name (for the test of a
   * file from another save): every rank changes the first parameter it
   * holds. */
  snprintf(out, sizeof out, "%s/%s.other.ckpt", tmpdir, h->name);
  aa_zero_range_t r;
  aa_zero_range(&z, m, 0, 0, &r);
  if (r.n) r.data[0] += 1.0f;
  if (aa_ckpt_save_zero(out, m, &z, &st)) bad |= HOP_SAVE;
done:
  if (bad) fprintf(stderr, "  %s rank %d: failed checks %#x\n", h->name, rank, bad);
  aa_zero_free(&z, m);
  aa_gpt_free(m);
  aa_mesh_free(&mesh);
  aa_comm_destroy(world);
  return bad;
}

/* Loads tmpdir/NAME.ckpt in one process (tp 1) and compares everything
 * with the original, bit for bit. */
static void check_whole(const char *name) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s.ckpt", tmpdir, name);
  aa_model_spec_t s;
  tiny_spec(&s, 6);
  aa_train_state_t st;
  int t;
  aa_ckpt_test_check_whole(name, path, &s.arch, orig_path, &st, &t);
  CHECK(t == ORIG_T && st.step == orig_state.step && st.data_pos == orig_state.data_pos &&
        st.rng.s == orig_state.rng.s && st.loss_scale == orig_state.loss_scale);
}

static const hop_t hops[] = {
    {"A", "orig", 1, 2, 0, AA_F32}, /* one file at tp 1 -> tp 2 (stage 0: one file per tensor rank) */
    {"B", "A", 2, 2, 3, AA_F32},    /* tp 2 -> dp 2 x tp 2 at stage 3 (new data shards, same slices) */
    {"C", "B", 1, 4, 0, AA_F32},    /* tp 2 over 2 data shards -> tp 4 */
    {"D", "C", 2, 1, 2, AA_F32},    /* tp 4 -> dp 2 at stage 2, no tensor parallelism (a version 1 manifest) */
    {"E", "D", 2, 2, 1, AA_BF16},   /* -> dp 2 x tp 2 at stage 1 under bf16 (the shards hold the master weights) */
    {"F", "E", 1, 4, 0, AA_BF16},   /* -> tp 4 under bf16 (full masters) */
    {"G", "F", 2, 2, 0, AA_F32},    /* -> dp 2 x tp 2 at stage 0 (data rank 0 of each tensor rank writes) */
};

AA_TEST(checkpoints_reshard_exactly_between_tensor_degrees_data_degrees_and_stages) {
  aa_gpt_t *m;
  aa_adamw_t opt;
  CHECK(make_orig(&m, &opt) == 0);
  CHECK_MSG(aa_ckpt_save(orig_path, m, &opt, &orig_state) == 0, "%s", aa_last_error());
  aa_adamw_free(&opt);
  aa_gpt_free(m);
  for (size_t i = 0; i < sizeof hops / sizeof hops[0]; i++) {
    const hop_t *h = &hops[i];
    int ok = aa_gang_run("test_tp_ckpt", h->dp * h->tp, hop_rank, h, h->name);
    fprintf(stderr, "  %s (dp %d x tp %d, zero %d, %s) from %s: %s\n", h->name, h->dp, h->tp, h->zero,
            aa_dtype_name(h->amp), h->from, ok ? "every rank holds the original's values, bit for bit" : "FAILED");
    check_whole(h->name);
  }
  /* The files each layout leaves. */
  const char *expect[] = {"A.ckpt.tp0of2.rank0of1", "A.ckpt.tp1of2.rank0of1", "B.ckpt.tp1of2.rank1of2",
                          "C.ckpt.tp3of4.rank0of1", "D.ckpt.rank1of2",        "E.ckpt.tp1of2.rank1of2",
                          "G.ckpt.tp1of2.rank0of1"};
  aa_ckpt_test_expect_files(tmpdir, expect, sizeof expect / sizeof expect[0]);
  /* The manifest records the layout. */
  char path[700];
  snprintf(path, sizeof path, "%s/B.ckpt", tmpdir);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  CHECK(root && json_integer_value(json_object_get(root, "version")) == 2 &&
        json_integer_value(json_object_get(root, "dp")) == 2 && json_integer_value(json_object_get(root, "tp")) == 2 &&
        json_integer_value(json_object_get(root, "zero")) == 3 &&
        json_array_size(json_object_get(root, "files")) == 4);
  json_decref(root);
  snprintf(path, sizeof path, "%s/D.ckpt", tmpdir);
  root = json_load_file(path, 0, &err);
  CHECK(root && json_integer_value(json_object_get(root, "version")) == 1 &&
        json_integer_value(json_object_get(root, "world")) == 2 && !json_object_get(root, "tp"));
  json_decref(root);
}

/* A rank of a dp 2 x tp 2 gang at stage 1 that saves to tmpdir/fail.ckpt,
 * where the file of data rank 1 of tensor rank 1 cannot be written (a
 * directory has its name). Exit status 0 when the save failed on this
 * rank too, naming the failure. */
static int failing_save_rank(const char *rdv, int rank, const void *data) {
  (void)data;
  int bad = 0;
  aa_comm_t *world = NULL;
  aa_gpt_t *m = NULL;
  aa_zero_t z = {0};
  aa_mesh_t mesh = {0};
  aa_model_spec_t s;
  tiny_spec(&s, 6);
  aa_strategy_t strat;
  aa_strategy_default(&strat);
  strat.degree[AA_AXIS_DATA] = 2;
  strat.degree[AA_AXIS_TENSOR] = 2;
  int rc = aa_comm_init(&world, rdv, rank, 4, NULL);
  if (!rc) rc = aa_mesh_init(&mesh, &strat, world);
  aa_gpt_opts_t mo = {.zero = 1, .tensor = mesh.group[AA_AXIS_TENSOR]};
  if (!rc) rc = aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 16, &mo);
  if (!rc) rc = aa_zero_init(&z, m, mesh.group[AA_AXIS_DATA], 1, NULL);
  if (rc) {
    fprintf(stderr, "  rank %d: %s\n", rank, aa_last_error());
    bad = 1;
  } else {
    char path[700];
    snprintf(path, sizeof path, "%s/fail.ckpt", tmpdir);
    int failing = z.rank == 1 && m->tp_rank == 1;
    rc = aa_ckpt_save_zero(path, m, &z, &orig_state);
    const char *want = failing ? "fail.ckpt.tp1of2.rank1of2" : "1 of 4 ranks could not write their part";
    if (!rc || !strstr(aa_last_error(), want)) {
      fprintf(stderr, "  rank %d: save returned %d (%s), expected an error naming '%s'\n", rank, rc,
              rc ? aa_last_error() : "success", want);
      bad = 1;
    }
  }
  aa_zero_free(&z, m);
  aa_gpt_free(m);
  aa_mesh_free(&mesh);
  aa_comm_destroy(world);
  return bad;
}

AA_TEST(a_save_that_fails_on_one_rank_fails_on_every_rank_of_the_gang_and_writes_no_manifest) {
  char path[700];
  snprintf(path, sizeof path, "%s/fail.ckpt.tp1of2.rank1of2", tmpdir);
  CHECK(mkdir(path, 0700) == 0);
  CHECK(aa_gang_run("test_tp_ckpt", 4, failing_save_rank, NULL, "failing save"));
  snprintf(path, sizeof path, "%s/fail.ckpt", tmpdir);
  CHECK(access(path, F_OK) != 0 && errno == ENOENT);
}

/* Writes the JSON root to path. */
static int dump(json_t *root, const char *path) { return json_dump_file(root, path, JSON_COMPACT); }

AA_TEST(a_tensor_parallel_checkpoint_with_a_bad_foreign_misplaced_or_missing_file_is_rejected) {
  /* A copy of B (dp 2 x tp 2, stage 3) in another directory. */
  char dir[600], src[700], dst[700], mb[700];
  snprintf(dir, sizeof dir, "%s/bad", tmpdir);
  CHECK(aa_mkdirs(dir) == 0);
  snprintf(src, sizeof src, "%s/B.ckpt", tmpdir);
  snprintf(mb, sizeof mb, "%s/B.ckpt", dir);
  CHECK(aa_gang_copy_file(src, mb, -1) == 0);
  for (int t = 0; t < 2; t++)
    for (int r = 0; r < 2; r++) {
      snprintf(src, sizeof src, "%s/B.ckpt.tp%dof2.rank%dof2", tmpdir, t, r);
      snprintf(dst, sizeof dst, "%s/B.ckpt.tp%dof2.rank%dof2", dir, t, r);
      CHECK(aa_gang_copy_file(src, dst, -1) == 0);
    }
  aa_gpt_t *m;
  aa_adamw_t opt;
  aa_train_state_t st;
  CHECK(make_orig(&m, &opt) == 0);
  CHECK_MSG(aa_ckpt_load(mb, m, &opt, &st) == 0, "%s", aa_last_error());
  /* From here on every load fails, and none changes the model. */
  aa_ckpt_test_fill(m, 42.0f);
  /* A flipped payload byte in tensor rank 1's second shard. */
  snprintf(src, sizeof src, "%s/B.ckpt.tp1of2.rank1of2", tmpdir);
  snprintf(dst, sizeof dst, "%s/B.ckpt.tp1of2.rank1of2", dir);
  CHECK(aa_gang_copy_file(src, dst, 300) == 0);
  int rc = aa_ckpt_load(mb, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "tp1of2.rank1of2: checksum mismatch"), "%d %s", rc,
            aa_last_error());
  /* The same file of another save: intact, but not the one named. */
  snprintf(src, sizeof src, "%s/B.other.ckpt.tp1of2.rank1of2", tmpdir);
  CHECK(aa_gang_copy_file(src, dst, -1) == 0);
  rc = aa_ckpt_load(mb, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "the file is from another save"), "%d %s", rc,
            aa_last_error());
  snprintf(src, sizeof src, "%s/B.ckpt.tp1of2.rank1of2", tmpdir);
  CHECK(aa_gang_copy_file(src, dst, -1) == 0);
  CHECK_MSG(aa_ckpt_load(mb, m, &opt, &st) == 0, "%s", aa_last_error());
  aa_ckpt_test_fill(m, 42.0f);
  /* Two entries swapped (file and checksum): each file is intact and
   * named with its own checksum, but its header says it is another tensor
   * rank's. */
  json_error_t err;
  json_t *root = json_load_file(mb, 0, &err);
  aa_ckpt_test_swap_files(root, 0, 2);
  char swapped[700];
  snprintf(swapped, sizeof swapped, "%s/swapped.ckpt", dir);
  CHECK(dump(root, swapped) == 0);
  json_decref(root);
  rc = aa_ckpt_load(swapped, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "holds shard 0 of 2 of tensor rank 1 of 2, but the manifest"),
            "%d %s", rc, aa_last_error());
  /* A tensor degree that does not divide the model's heads. */
  char odd[700];
  snprintf(odd, sizeof odd, "%s/odd.ckpt", dir);
  FILE *f = fopen(odd, "w");
  fputs("{\"format\": \"autoaccel-sharded-checkpoint\", \"version\": 2, \"dp\": 1, \"tp\": 3, \"zero\": 0, "
        "\"files\": [{}, {}, {}]}",
        f);
  fclose(f);
  rc = aa_ckpt_load(odd, m, &opt, &st);
  CHECK_MSG(rc == AA_EFORMAT && strstr(aa_last_error(), "tensor degree 3"), "%d %s", rc, aa_last_error());
  /* A missing file; one rank file alone. */
  CHECK(unlink(dst) == 0);
  rc = aa_ckpt_load(mb, m, &opt, &st);
  CHECK_MSG(rc == AA_ENOENT && strstr(aa_last_error(), "tp1of2.rank1of2"), "%d %s", rc, aa_last_error());
  snprintf(src, sizeof src, "%s/B.ckpt.tp0of2.rank0of2", tmpdir);
  rc = aa_ckpt_load(src, m, &opt, &st);
  CHECK_MSG(rc == AA_EINVAL && strstr(aa_last_error(), "load its manifest"), "%s", aa_last_error());
  CHECK_MSG(aa_ckpt_test_all(m, 42.0f), "a failed load changed the model");
  aa_adamw_free(&opt);
  aa_gpt_free(m);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_tp_ckpt_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  snprintf(orig_path, sizeof orig_path, "%s/orig.ckpt", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 200000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  RUN(checkpoints_reshard_exactly_between_tensor_degrees_data_degrees_and_stages);
  RUN(a_tensor_parallel_checkpoint_with_a_bad_foreign_misplaced_or_missing_file_is_rejected);
  RUN(a_save_that_fails_on_one_rank_fails_on_every_rank_of_the_gang_and_writes_no_manifest);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return aa_test_summary();
}
