/* Checkpoints of pipeline-parallel runs (engine/checkpoint.h,
 * docs/checkpoint-format.md): a checkpoint saved by a pipeline gang (any
 * tensor degree, data degree, ZeRO stage 0 or 1, uniform, custom or
 * interleaved partition) loads in one process and in any other layout,
 * and a single process's checkpoint loads at any pipeline layout.
 *
 * The model has 4 blocks (pipeline degrees 1, 2 and 4, two chunks a rank
 * at pp 2), 4 heads and d_ff 64 (tensor degrees 1, 2 and 4) and a
 * vocabulary of 250 (padding rows at tp 4). A gang has at most 4 ranks
 * (aa_gang.h). The last pipeline stage holds
 * a copy of wte|wpe for the tied head, which is neither saved nor read
 * from its own files: it is loaded from the first stage's.
 *
 * Ranks are forked processes (aa_gang.h) that meet in a shared-memory
 * group; the mesh (engine/mesh.h) gives each its data, tensor and
 * pipeline groups. No rank trains: every rank's model is built with its
 * pipeline place (strategies/pipeline.h) and filled by a load. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_ckpt_test.h"
#include "aa_gang.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/aa.h"
#include "common/file.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/mesh.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "strategies/pipeline.h"

static char tmpdir[256];

static aa_arch_t tiny_arch(void) {
  return (aa_arch_t){.family = "gpt2",
                     .n_layer = 4,
                     .n_head = 4,
                     .d_model = 32,
                     .d_ff = 64,
                     .seq_len = 16,
                     .vocab_size = 250};
}

/* The original: a single process's model with initialised weights and
 * moments that name each element (aa_ckpt_test_orig), saved in one file
 * with a training state in which every field is set. */
static const aa_train_state_t orig_state = {.step = 5,
                                            .data_pos = 54321,
                                            .rng = {0xfedcba9876543210ull},
                                            .seed = 9,
                                            .loss_scale = 512,
                                            .scaler_iter = 4,
                                            .scaler_last_overflow = 2,
                                            .scaler_hysteresis_left = 1,
                                            .skipped_steps = 2};
#define ORIG_T 5

static char orig_path[600];

/* A single process's model and moments holding the original, made. */
static int make_orig(aa_gpt_t **m, aa_adamw_t *opt) {
  aa_arch_t a = tiny_arch();
  return aa_ckpt_test_orig(m, opt, &a, ORIG_T, NULL);
}

/* One hop: a gang at a layout loads the previous checkpoint, checks what
 * every rank holds against the original, and saves at its layout. */
typedef struct {
  const char *name; /* the checkpoint it saves: tmpdir/NAME.ckpt */
  const char *from; /* the one it loads: tmpdir/FROM.ckpt */
  int dp, tp, pp, vpp, zero;
  int n_bounds, bounds[8]; /* a custom partition, or 0: uniform */
} hop_t;

static void hop_strategy(const hop_t *h, aa_strategy_t *s) {
  aa_strategy_default(s);
  s->degree[AA_AXIS_DATA] = h->dp;
  s->degree[AA_AXIS_TENSOR] = h->tp;
  s->degree[AA_AXIS_PIPELINE] = h->pp;
  s->vpp = h->vpp;
  s->schedule = h->vpp > 1 ? AA_SCHEDULE_INTERLEAVED : AA_SCHEDULE_1F1B;
  if (h->n_bounds) {
    s->partition = AA_PARTITION_CUSTOM;
    CHECK(aa_strategy_set_bounds(s, h->bounds, h->n_bounds) == 0);
  }
}

/* Exit status bits of a hop's rank. */
enum { HOP_SETUP = 1, HOP_LOAD = 2, HOP_VALUES = 4, HOP_STATE = 8, HOP_SAVE = 16, HOP_COPY = 32 };

static int hop_rank(const char *rdv, int rank, const void *data) {
  const hop_t *h = data;
  int bad = 0;
  aa_comm_t *world = NULL;
  aa_gpt_t *m = NULL;
  aa_zero_t z = {0};
  aa_mesh_t mesh = {0};
  aa_pp_place_t place;
  aa_arch_t a = tiny_arch();
  aa_strategy_t strat;
  hop_strategy(h, &strat);
  if (aa_comm_init(&world, rdv, rank, h->dp * h->tp * h->pp, NULL) || aa_mesh_init(&mesh, &strat, world) ||
      aa_pp_place(&a, &strat, 0, aa_comm_rank(mesh.group[AA_AXIS_PIPELINE]), &place)) {
    fprintf(stderr, "  %s rank %d: %s\n", h->name, rank, aa_last_error());
    bad |= HOP_SETUP;
    goto done;
  }
  aa_gpt_opts_t mo = {.zero = h->zero, .tensor = mesh.group[AA_AXIS_TENSOR], .pipe = &place};
  if (aa_gpt_create(&m, &a, aa_ops_cpu(), 1, 16, &mo) ||
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
  /* Every element the rank holds of the three buffers, bit for bit: a
   * last stage's copy of wte|wpe equals the original's (the first
   * stage's) as well. */
  char label[200];
  snprintf(label, sizeof label, "%s rank %d (pipe %d, tensor %d)", h->name, rank, m->pipe.stage, m->tp_rank);
  int held = aa_ckpt_test_check_held(label, m, &z, &a, orig_path);
  if (held < 0) {
    fprintf(stderr, "  %s: the original: %s\n", label, aa_last_error());
    bad |= HOP_SETUP;
  } else {
    if (held & AA_CKPT_HELD_UNIT0) bad |= aa_pp_unit0_is_copy(&place, &m->arch) ? HOP_COPY : HOP_VALUES;
    if (held & AA_CKPT_HELD_LATER) bad |= HOP_VALUES;
  }
  if (!aa_ckpt_test_same_state(&st, &orig_state) || z.opt.t != ORIG_T) bad |= HOP_STATE;
  /* A pipeline rank holds part of the model: it cannot write a
   * whole-model file, nor save without its pipeline group. */
  if (h->pp > 1 &&
      (aa_ckpt_save(out, m, &z.opt, &st) != AA_EINVAL || aa_ckpt_save_zero(out, m, &z, &st) != AA_EINVAL))
    bad |= HOP_SAVE;
  if (aa_ckpt_save_pipe(out, m, &z, mesh.group[AA_AXIS_PIPELINE], &st)) {
    fprintf(stderr, "  %s rank %d: %s\n", h->name, rank, aa_last_error());
    bad |= HOP_SAVE;
  }
  /* A second save of other values under another name (for the test of a
   * file from another save): every rank changes the first parameter of
   * the last unit it holds. */
  snprintf(out, sizeof out, "%s/%s.other.ckpt", tmpdir, h->name);
  for (int u = z.n_units - 1; u >= 0; u--) {
    aa_zero_range_t r;
    aa_zero_range(&z, m, 0, u, &r);
    if (r.n) {
      r.data[0] += 1.0f;
      break;
    }
  }
  if (aa_ckpt_save_pipe(out, m, &z, mesh.group[AA_AXIS_PIPELINE], &st)) bad |= HOP_SAVE;
done:
  if (bad) fprintf(stderr, "  %s rank %d: failed checks %#x\n", h->name, rank, bad);
  aa_zero_free(&z, m);
  aa_gpt_free(m);
  aa_mesh_free(&mesh);
  aa_comm_destroy(world);
  return bad;
}

/* Loads tmpdir/NAME.ckpt in one process and compares everything with the
 * original, bit for bit. */
static void check_whole(const char *name) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s.ckpt", tmpdir, name);
  aa_arch_t a = tiny_arch();
  aa_train_state_t st;
  int t;
  aa_ckpt_test_check_whole(name, path, &a, orig_path, &st, &t);
  CHECK_MSG(t == ORIG_T && aa_ckpt_test_same_state(&st, &orig_state), "%s: the training state differs", name);
}

static const hop_t hops[] = {
    /* One file -> pp 2 (the last stage holds the wte|wpe copy). */
    {"A", "orig", 1, 1, 2, 1, 0, 0, {0}},
    /* pp 2 -> pp 2 x tp 2. */
    {"B", "A", 1, 2, 2, 1, 0, 0, {0}},
    /* -> dp 2 x pp 2 at ZeRO 1 with an uneven custom partition. */
    {"C", "B", 2, 1, 2, 1, 1, 3, {0, 1, 4}},
    /* -> pp 4. */
    {"D", "C", 1, 1, 4, 1, 0, 0, {0}},
    /* -> dp 2 x pp 2 x 2 chunks a rank (interleaved) at ZeRO 1. */
    {"E", "D", 2, 1, 2, 2, 1, 0, {0}},
    /* -> pp 2 x tp 2 with another custom partition. */
    {"F", "E", 1, 2, 2, 1, 0, 3, {0, 3, 4}},
    /* -> tp 4 without pipeline parallelism (a version 2 manifest; vocabulary padding rows). */
    {"G", "F", 1, 4, 1, 1, 0, 0, {0}},
    /* -> tp 2 x pp 2 at ZeRO 1 over a data group of one, from a version 2 manifest. */
    {"H", "G", 1, 2, 2, 1, 1, 3, {0, 1, 4}},
    /* -> the same layout (a resume: each rank reads its own files, the copy from the first stage's). */
    {"I", "H", 1, 2, 2, 1, 1, 3, {0, 1, 4}},
    /* E's pipeline layout over another data degree and stage (its own files, other shards). */
    {"J", "E", 1, 1, 2, 2, 0, 0, {0}},
};

AA_TEST(pipeline_checkpoints_load_exactly_at_pp1_and_at_other_pipeline_tensor_and_data_layouts) {
  aa_gpt_t *m;
  aa_adamw_t opt;
  CHECK(make_orig(&m, &opt) == 0);
  CHECK_MSG(aa_ckpt_save(orig_path, m, &opt, &orig_state) == 0, "%s", aa_last_error());
  aa_adamw_free(&opt);
  aa_gpt_free(m);
  for (size_t i = 0; i < sizeof hops / sizeof hops[0]; i++) {
    const hop_t *h = &hops[i];
    int ok = aa_gang_run("test_pp_ckpt", h->dp * h->tp * h->pp, hop_rank, h, h->name);
    fprintf(stderr, "  %s (dp %d x tp %d x pp %d, vpp %d, zero %d) from %s: %s\n", h->name, h->dp, h->tp,
            h->pp, h->vpp, h->zero, h->from,
            ok ? "every rank holds the original's values, bit for bit" : "FAILED");
    check_whole(h->name);
  }
  /* The files each layout leaves: the copy of wte|wpe is not saved, so the
   * last stage's file of A holds only its blocks and lnf. */
  const char *expect[] = {"A.ckpt.pp0of2.tp0of1.rank0of1", "A.ckpt.pp1of2.tp0of1.rank0of1",
                          "B.ckpt.pp1of2.tp1of2.rank0of1", "C.ckpt.pp1of2.tp0of1.rank1of2",
                          "D.ckpt.pp3of4.tp0of1.rank0of1", "E.ckpt.pp1of2.tp0of1.rank1of2",
                          "G.ckpt.tp3of4.rank0of1",        "H.ckpt.pp1of2.tp1of2.rank0of1"};
  aa_ckpt_test_expect_files(tmpdir, expect, sizeof expect / sizeof expect[0]);
  /* The manifest records the pipeline layout, and the last stage's units
   * list no elements for its copy of wte|wpe. */
  char path[700];
  snprintf(path, sizeof path, "%s/E.ckpt", tmpdir);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  json_t *b = json_object_get(root, "bounds"), *units = json_object_get(root, "units");
  CHECK(root && json_integer_value(json_object_get(root, "version")) == 3 &&
        json_integer_value(json_object_get(root, "pp")) == 2 &&
        json_integer_value(json_object_get(root, "vpp")) == 2 &&
        json_integer_value(json_object_get(root, "dp")) == 2 &&
        json_integer_value(json_object_get(root, "zero")) == 1 && json_array_size(b) == 5 &&
        json_integer_value(json_array_get(b, 2)) == 2 &&
        json_array_size(json_object_get(root, "files")) == 4 && json_array_size(units) == 2);
  json_t *last_unit0 = json_array_get(json_array_get(units, 1), 0);
  CHECK(json_integer_value(json_array_get(last_unit0, 1)) == 0);
  json_decref(root);
  snprintf(path, sizeof path, "%s/C.ckpt", tmpdir);
  root = json_load_file(path, 0, &err);
  b = json_object_get(root, "bounds");
  CHECK(root && json_array_size(b) == 3 && json_integer_value(json_array_get(b, 1)) == 1);
  json_decref(root);
  snprintf(path, sizeof path, "%s/G.ckpt", tmpdir);
  root = json_load_file(path, 0, &err);
  CHECK(root && json_integer_value(json_object_get(root, "version")) == 2 && !json_object_get(root, "pp"));
  json_decref(root);
}

/* Writes the manifest at src, changed by edit, to dst. */
static void edited(const char *src, const char *dst, void (*edit)(json_t *root)) {
  json_error_t err;
  json_t *root = json_load_file(src, 0, &err);
  CHECK(root != NULL);
  edit(root);
  CHECK(json_dump_file(root, dst, JSON_COMPACT) == 0);
  json_decref(root);
}

static void bounds_not_increasing(json_t *root) {
  json_array_set_new(json_object_get(root, "bounds"), 1, json_integer(4));
}
static void bounds_too_few(json_t *root) { json_array_remove(json_object_get(root, "bounds"), 1); }
static void other_bounds(json_t *root) {
  json_array_set_new(json_object_get(root, "bounds"), 1, json_integer(1));
}
/* Entries 1 and 2 swapped (file and checksum): in D (pp 4) pipeline ranks
 * 1 and 2 hold one block each, so each file is intact, of the size the
 * entry expects and named with its own checksum, but its header says it
 * is the other pipeline rank's. */
static void pipes_swapped(json_t *root) { aa_ckpt_test_swap_files(root, 1, 2); }
static void no_pipe_field(json_t *root) {
  json_object_del(json_array_get(json_object_get(root, "files"), 1), "pipe");
}
static void future_version(json_t *root) { json_object_set_new(root, "version", json_integer(4)); }

AA_TEST(
    a_pipeline_checkpoint_with_a_corrupt_or_mismatching_manifest_or_file_is_rejected_and_changes_nothing) {
  /* A copy of A (pp 2) in another directory. */
  char dir[600], src[700], dst[700], ma[700], bad[700];
  snprintf(dir, sizeof dir, "%s/bad", tmpdir);
  CHECK(aa_mkdirs(dir) == 0);
  snprintf(src, sizeof src, "%s/A.ckpt", tmpdir);
  snprintf(ma, sizeof ma, "%s/A.ckpt", dir);
  CHECK(aa_gang_copy_file(src, ma, -1) == 0);
  for (int p = 0; p < 2; p++) {
    snprintf(src, sizeof src, "%s/A.ckpt.pp%dof2.tp0of1.rank0of1", tmpdir, p);
    snprintf(dst, sizeof dst, "%s/A.ckpt.pp%dof2.tp0of1.rank0of1", dir, p);
    CHECK(aa_gang_copy_file(src, dst, -1) == 0);
  }
  aa_gpt_t *m;
  aa_adamw_t opt;
  aa_train_state_t st;
  CHECK(make_orig(&m, &opt) == 0);
  CHECK_MSG(aa_ckpt_load(ma, m, &opt, &st) == 0, "%s", aa_last_error());
  aa_ckpt_test_fill(m, 42.0f);
  /* Edited manifests beside the files they name. */
  const struct {
    const char *from;
    void (*edit)(json_t *root);
    int rc;
    const char *msg;
  } cases[] = {
      {"A", bounds_not_increasing, AA_EFORMAT, "custom partition boundaries must increase"},
      {"A", bounds_too_few, AA_EFORMAT, "pp x vpp + 1 = 3 block boundaries"},
      {"A", other_bounds, AA_EINVAL, "unit 2 of pipeline rank 0 is not ["},
      {"D", pipes_swapped, AA_ECORRUPT,
       "holds pipeline rank 2 of 4 (1 chunks from block 2), but the manifest"},
      {"A", no_pipe_field, AA_EFORMAT, "files[1] must be {\"pipe\": 1"},
      {"A", future_version, AA_EFORMAT, "version 1, 2 or 3 manifest"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(src, sizeof src, "%s/%s.ckpt", tmpdir, cases[i].from);
    snprintf(bad, sizeof bad, "%s/edited%zu.ckpt", tmpdir, i);
    edited(src, bad, cases[i].edit);
    int rc = aa_ckpt_load(bad, m, &opt, &st);
    CHECK_MSG(rc == cases[i].rc && strstr(aa_last_error(), cases[i].msg), "case %zu: %d %s", i, rc,
              aa_last_error());
  }
  /* A flipped payload byte in the last stage's file; the same file of
   * another save; a missing file. */
  snprintf(dst, sizeof dst, "%s/A.ckpt.pp1of2.tp0of1.rank0of1", dir);
  snprintf(src, sizeof src, "%s/A.ckpt.pp1of2.tp0of1.rank0of1", tmpdir);
  CHECK(aa_gang_copy_file(src, dst, 300) == 0);
  int rc = aa_ckpt_load(ma, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "pp1of2.tp0of1.rank0of1: checksum mismatch"),
            "%d %s", rc, aa_last_error());
  snprintf(src, sizeof src, "%s/A.other.ckpt.pp1of2.tp0of1.rank0of1", tmpdir);
  CHECK(aa_gang_copy_file(src, dst, -1) == 0);
  rc = aa_ckpt_load(ma, m, &opt, &st);
  CHECK_MSG(rc == AA_ECORRUPT && strstr(aa_last_error(), "the file is from another save"), "%d %s", rc,
            aa_last_error());
  CHECK(unlink(dst) == 0);
  rc = aa_ckpt_load(ma, m, &opt, &st);
  CHECK_MSG(rc == AA_ENOENT && strstr(aa_last_error(), "pp1of2.tp0of1.rank0of1"), "%d %s", rc,
            aa_last_error());
  CHECK_MSG(aa_ckpt_test_all(m, 42.0f), "a failed load changed the model");
  aa_adamw_free(&opt);
  aa_gpt_free(m);
}

/* Each pipeline rank's model built in one process over groups of one, as
 * a test or a tool may: the later stages save first, then stage 0, whose
 * manifest names every file; the load into each stage's model from it
 * and from the gang's checkpoint D (pp 4) gives the original. */
AA_TEST(pipeline_ranks_saved_one_by_one_over_groups_of_one_make_a_checkpoint_of_the_whole_model) {
  aa_arch_t a = tiny_arch();
  aa_strategy_t s;
  hop_strategy(&(hop_t){.dp = 1, .tp = 1, .pp = 2, .vpp = 1, .n_bounds = 3, .bounds = {0, 3, 4}}, &s);
  aa_comm_t *self;
  CHECK(aa_comm_self(&self) == 0);
  char path[700], from[700];
  snprintf(path, sizeof path, "%s/self.ckpt", tmpdir);
  snprintf(from, sizeof from, "%s/D.ckpt", tmpdir);
  aa_gpt_t *m[2] = {NULL, NULL};
  aa_zero_t z[2] = {{0}};
  aa_pp_place_t place[2];
  for (int p = 1; p >= 0; p--) {
    CHECK(aa_pp_place(&a, &s, 0, p, &place[p]) == 0);
    CHECK(aa_gpt_create(&m[p], &a, aa_ops_cpu(), 1, 16, &(aa_gpt_opts_t){.pipe = &place[p]}) == 0);
    CHECK(aa_zero_init(&z[p], m[p], self, 0, NULL) == 0);
    aa_train_state_t st;
    CHECK_MSG(aa_ckpt_load_zero(from, m[p], &z[p], &st) == 0, "%s", aa_last_error());
    CHECK_MSG(aa_ckpt_save_pipe(path, m[p], &z[p], self, &st) == 0, "%s", aa_last_error());
  }
  check_whole("self");
  for (int p = 0; p < 2; p++) {
    aa_zero_free(&z[p], m[p]);
    aa_gpt_free(m[p]);
  }
  aa_comm_destroy(self);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_pp_ckpt_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(orig_path, sizeof orig_path, "%s/orig.ckpt", tmpdir);
  RUN(pipeline_checkpoints_load_exactly_at_pp1_and_at_other_pipeline_tensor_and_data_layouts);
  RUN(a_pipeline_checkpoint_with_a_corrupt_or_mismatching_manifest_or_file_is_rejected_and_changes_nothing);
  RUN(pipeline_ranks_saved_one_by_one_over_groups_of_one_make_a_checkpoint_of_the_whole_model);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return aa_test_summary();
}
