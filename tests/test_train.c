/* Training driver, checkpoints and resume: real training runs on the
 * synthetic corpus in a temporary directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/data.h"
#include "engine/train.h"

static char tmpdir[256];
static char train_bin[512], val_bin[512];

/* A small spec over the temporary corpus. */
static void small_spec(aa_model_spec_t *s, int steps, int ckpt_every) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"name\": \"t\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"d_ff\": 64, "
           "\"seq_len\": 16, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, \"steps\": %d, \"lr\": 0.003, "
           "\"warmup_steps\": %d, \"eval_every\": 0, \"eval_batches\": 2, \"checkpoint_every\": %d, \"seed\": 7}, "
           "\"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
           steps, steps < 3 ? steps : 3, ckpt_every, train_bin, val_bin);
  int rc = aa_spec_parse(s, json, NULL, "test");
  if (rc) fprintf(stderr, "spec: %s\n", aa_last_error());
  CHECK(rc == 0);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = calloc(1, n + 1);
  if (fread(buf, 1, n, f) != (size_t)n) n = 0;
  fclose(f);
  return buf;
}

/* Writes text to path, replacing what was there. */
static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static FILE *quiet(void) { return fopen("/dev/null", "w"); }

AA_TEST(resume_from_checkpoint_gives_bit_identical_losses) {
  aa_model_spec_t s;
  small_spec(&s, 20, 10);
  char dir_a[512], dir_b[512], loss_a[512], loss_b[512], ckpt[600];
  snprintf(dir_a, sizeof dir_a, "%s/a", tmpdir);
  snprintf(dir_b, sizeof dir_b, "%s/b", tmpdir);
  snprintf(loss_a, sizeof loss_a, "%s/a.losses", tmpdir);
  snprintf(loss_b, sizeof loss_b, "%s/b.losses", tmpdir);
  FILE *log = quiet();
  aa_train_opts_t oa = {.threads = 2, .checkpoint_every = -1, .log_every = 100, .out_dir = dir_a,
                        .losses_path = loss_a, .log = log};
  CHECK(aa_train(&s, &oa, NULL) == 0);
  snprintf(ckpt, sizeof ckpt, "%s/step_000010.ckpt", dir_a);
  aa_train_opts_t ob = {.threads = 2, .checkpoint_every = -1, .log_every = 100, .out_dir = dir_b,
                        .resume = ckpt, .losses_path = loss_b, .log = log};
  int rc = aa_train(&s, &ob, NULL);
  if (rc) fprintf(stderr, "resume: %s\n", aa_last_error());
  CHECK(rc == 0);
  fclose(log);
  char *a = slurp(loss_a), *b = slurp(loss_b);
  CHECK(a && b);
  if (a && b) {
    /* The resumed run logs steps 11..20; they must equal the uninterrupted
     * run's lines for those steps character for character (%.9g prints a
     * float exactly enough to round-trip). */
    char *tail = strstr(a, "\n11 ");
    CHECK(tail != NULL);
    if (tail) CHECK_MSG(!strcmp(tail + 1, b), "uninterrupted:\n%s\nresumed:\n%s", tail + 1, b);
    CHECK(strlen(b) > 0 && !strncmp(b, "11 ", 3));
  }
  free(a);
  free(b);
}

AA_TEST(bundled_example_learns_below_unigram_entropy) {
  char path[512];
  const char *src = getenv("AA_SOURCE_DIR");
  snprintf(path, sizeof path, "%s/examples/tiny/model.json", src ? src : ".");
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, path);
  if (rc) fprintf(stderr, "%s\n", aa_last_error());
  CHECK(rc == 0);
  if (rc) return;
  /* Same settings as the example, on a corpus generated here. */
  snprintf(s.train_data, sizeof s.train_data, "%s", train_bin);
  snprintf(s.val_data, sizeof s.val_data, "%s", val_bin);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/example", tmpdir);
  aa_train_opts_t o = {.threads = 2, .checkpoint_every = -1, .log_every = 50, .out_dir = dir, .log = stderr};
  aa_train_result_t r;
  rc = aa_train(&s, &o, &r);
  if (rc) fprintf(stderr, "%s\n", aa_last_error());
  CHECK(rc == 0);
  fprintf(stderr, "  after %d steps: val loss %.4f nats vs unigram entropy %.4f nats\n", r.steps_done, r.val_loss,
          r.train_entropy);
  /* "Well below": a model that only learned byte frequencies would sit at
   * the unigram entropy; half of it means it predicts from context. */
  CHECK(r.val_loss < 0.5 * r.train_entropy);
}

AA_TEST(corrupt_and_mismatched_checkpoints_are_rejected) {
  aa_model_spec_t s;
  small_spec(&s, 2, 0);
  char dir[512], ckpt[600], bad[600];
  snprintf(dir, sizeof dir, "%s/c", tmpdir);
  FILE *log = quiet();
  aa_train_opts_t o = {.threads = 1, .checkpoint_every = -1, .log_every = 100, .out_dir = dir, .log = log};
  CHECK(aa_train(&s, &o, NULL) == 0);
  fclose(log);
  snprintf(ckpt, sizeof ckpt, "%s/final.ckpt", dir);
  snprintf(bad, sizeof bad, "%s/bad.ckpt", tmpdir);
  char *good = NULL;
  FILE *f = fopen(ckpt, "rb");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  good = malloc(n);
  CHECK(fread(good, 1, n, f) == (size_t)n);
  fclose(f);

  aa_gpt_t *m;
  CHECK(aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 4, NULL) == 0);
  aa_adamw_t opt;
  CHECK(aa_adamw_init(&opt, m->n_params, NULL) == 0);
  aa_train_state_t st;
  CHECK(aa_ckpt_load(ckpt, m, &opt, &st) == 0);
  CHECK(st.step == 2 && opt.t == 2 && st.seed == 7);

  struct {
    const char *what;
    long offset; /* byte to flip, or -1 */
    long length; /* bytes to write */
    int code;
    const char *msg;
  } cases[] = {
      {"flipped payload byte", n - 5, n, AA_ECORRUPT, "checksum mismatch"},
      {"truncated payload", -1, n - 100, AA_EFORMAT, "truncated"},
      {"trailing bytes", -1, n + 3, AA_EFORMAT, "trailing bytes"},
      {"bad magic", 0, n, AA_EFORMAT, "bad magic"},
      {"bad version", 8, n, AA_EFORMAT, "unsupported checkpoint version"},
      {"changed architecture", 16, n, AA_EINVAL, "checkpoint n_layer is"},
      {"header only", -1, 100, AA_EFORMAT, "too short"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FILE *w = fopen(bad, "wb");
    long len = cases[i].length;
    char *buf = calloc(1, len > n ? len : n);
    memcpy(buf, good, n);
    if (cases[i].offset >= 0) buf[cases[i].offset] ^= 0x5a;
    fwrite(buf, 1, len, w);
    fclose(w);
    free(buf);
    int rc = aa_ckpt_load(bad, m, &opt, &st);
    CHECK_MSG(rc == cases[i].code && strstr(aa_last_error(), cases[i].msg), "%s: rc %d, '%s'", cases[i].what, rc,
              aa_last_error());
  }
  CHECK(aa_ckpt_load("/nonexistent/x.ckpt", m, &opt, &st) == AA_ENOENT);

  /* A weights-only checkpoint loads as weights but cannot resume training. */
  CHECK(aa_ckpt_save(bad, m, NULL, NULL) == 0);
  CHECK(aa_ckpt_load(bad, m, NULL, NULL) == 0);
  CHECK(aa_ckpt_load(bad, m, &opt, &st) == AA_EINVAL && strstr(aa_last_error(), "weights only"));
  aa_adamw_free(&opt);
  aa_gpt_free(m);
  free(good);
}

AA_TEST(bad_training_data_fails_cleanly) {
  aa_model_spec_t s;
  small_spec(&s, 2, 0);
  snprintf(s.train_data, sizeof s.train_data, "%s/missing.bin", tmpdir);
  FILE *log = quiet();
  aa_train_opts_t o = {.threads = 1, .checkpoint_every = -1, .log_every = 100, .out_dir = tmpdir, .log = log};
  /* AA_EINPUT: no strategy would change it (the planner ends a search on it). */
  int rc = aa_train(&s, &o, NULL);
  CHECK(rc == AA_EINPUT);
  CHECK_MSG(strstr(aa_last_error(), "training data: ") && strstr(aa_last_error(), "missing.bin: no such file"), "%s",
            aa_last_error());
  small_spec(&s, 2, 0);
  snprintf(s.init_weights, sizeof s.init_weights, "%s/no-weights.ckpt", tmpdir);
  CHECK(aa_train(&s, &o, NULL) == AA_EINPUT);
  CHECK_MSG(strstr(aa_last_error(), "init_weights: ") && strstr(aa_last_error(), "no-weights.ckpt"), "%s",
            aa_last_error());
  small_spec(&s, 2, 0);
  snprintf(s.val_data, sizeof s.val_data, "%s/bad-val.bin", tmpdir);
  write_text(s.val_data, "not a token file");
  CHECK(aa_train(&s, &o, NULL) == AA_EINPUT);
  CHECK_MSG(strstr(aa_last_error(), "validation data: ") && strstr(aa_last_error(), "bad-val.bin"), "%s",
            aa_last_error());
  /* A spec without data (one made for planning) is refused the same way,
   * naming the field (test_dryrun: a dry run too). */
  small_spec(&s, 2, 0);
  s.train_data[0] = s.val_data[0] = '\0';
  CHECK(aa_train(&s, &o, NULL) == AA_EINPUT);
  CHECK_MSG(strstr(aa_last_error(), "training: t has no training data: data.train is required"), "%s",
            aa_last_error());
  /* So is a sequence longer than the engine trains (a spec made for
   * planning a long context), before anything is read or allocated; and
   * the model's constructor refuses it too. */
  small_spec(&s, 2, 0);
  s.arch.seq_len = 131072;
  CHECK(aa_train(&s, &o, NULL) == AA_EINPUT);
  CHECK_MSG(!strcmp(aa_last_error(), "training: seq_len 131072: the engine trains at most 65,536 tokens per "
                                     "sequence; plan and strategy check accept up to 1,048,576"),
            "%s", aa_last_error());
  aa_gpt_t *m = NULL;
  CHECK(aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 16, NULL) == AA_EINVAL && !m);
  CHECK_MSG(strstr(aa_last_error(), "model: seq_len 131072: the engine trains at most 65,536"), "%s",
            aa_last_error());
  fclose(log);
}

/* The losses file, the summary and the checkpoints go into an output
 * directory others may write: a symlink planted there to a file only the
 * trainer may write is refused (losses, streamed) or replaced (summary and
 * checkpoint, renamed into place), and its target is never touched. */
AA_TEST(outputs_never_write_through_planted_symlinks) {
  aa_model_spec_t s;
  small_spec(&s, 1, 0);
  char dir[512], victim[600], losses[600], summary[600], ckpt[600];
  snprintf(dir, sizeof dir, "%s/linked", tmpdir);
  snprintf(victim, sizeof victim, "%s/victim", tmpdir);
  snprintf(losses, sizeof losses, "%s/losses.txt", dir);
  snprintf(summary, sizeof summary, "%s/summary.json", dir);
  snprintf(ckpt, sizeof ckpt, "%s/final.ckpt", dir);
  CHECK(aa_mkdirs(dir) == 0);
  write_text(victim, "secret\n");
  CHECK(symlink(victim, losses) == 0);
  FILE *log = quiet();
  aa_train_opts_t o = {.threads = 1, .checkpoint_every = -1, .log_every = 100, .out_dir = dir,
                       .losses_path = losses, .summary_json = summary, .log = log};
  CHECK(aa_train(&s, &o, NULL) == AA_EIO);
  CHECK_MSG(strstr(aa_last_error(), "losses.txt is a symbolic link; refusing to write through it"), "%s",
            aa_last_error());
  /* With the losses file out of the way, the summary and the final
   * checkpoint are renamed over their symlinks. */
  unlink(losses);
  CHECK(symlink(victim, summary) == 0 && symlink(victim, ckpt) == 0);
  CHECK_MSG(aa_train(&s, &o, NULL) == 0, "%s", aa_last_error());
  fclose(log);
  char *v = slurp(victim), *sum = slurp(summary);
  CHECK(v && !strcmp(v, "secret\n"));
  CHECK(sum && strstr(sum, "\"model\": \"t\""));
  struct stat st;
  CHECK(lstat(summary, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(lstat(ckpt, &st) == 0 && S_ISREG(st.st_mode));
  free(v);
  free(sum);
}

/* eval_batches is bounded by the validation shard: a pass of N global
 * batches of B x T tokens reads N*B*T + 1 tokens (one of shift). A spec
 * asking for more fails before training, with the arithmetic in the
 * message, instead of running (INT_MAX batches ran until killed). */
AA_TEST(eval_batches_past_the_validation_shard_fail_at_once) {
  char val[600], want[1200];
  snprintf(val, sizeof val, "%s/small-val.bin", tmpdir);
  int32_t tok[129];
  for (int i = 0; i < 129; i++) tok[i] = i % 256;
  /* Two batches of 4 x 16 tokens fit exactly in 2*64 + 1 tokens. */
  CHECK(aa_shard_write(val, tok, 129, 256) == 0);
  aa_model_spec_t s;
  small_spec(&s, 1, 0);
  snprintf(s.val_data, sizeof s.val_data, "%s", val);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/eval", tmpdir);
  FILE *log = quiet();
  aa_train_opts_t o = {.threads = 1, .checkpoint_every = -1, .log_every = 100, .out_dir = dir, .log = log};
  aa_train_result_t r;
  CHECK_MSG(aa_train(&s, &o, &r) == 0 && !isnan(r.val_loss), "%s", aa_last_error());
  s.train.eval_batches = 3;
  CHECK(aa_train(&s, &o, NULL) == AA_EINVAL);
  snprintf(want, sizeof want,
           "train.eval_batches 3 needs 193 tokens of validation data; %s has 129 tokens (room for at most 2 batches)",
           val);
  CHECK_MSG(!strcmp(aa_last_error(), want), "%s", aa_last_error());
  CHECK(aa_shard_write(val, tok, 128, 256) == 0);
  s.train.eval_batches = 2;
  CHECK(aa_train(&s, &o, NULL) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "needs 129 tokens") && strstr(aa_last_error(), "(room for at most 1 batch)"), "%s",
            aa_last_error());
  /* The largest count the spec allows fails as fast, its token count in 64 bits. */
  snprintf(s.val_data, sizeof s.val_data, "%s", val_bin);
  s.train.eval_batches = 2147483647;
  aa_shard_t v;
  CHECK(aa_shard_read(&v, val_bin, 256) == 0);
  double t0 = aa_now();
  CHECK(aa_train(&s, &o, NULL) == AA_EINVAL);
  CHECK(aa_now() - t0 < 10);
  snprintf(want, sizeof want,
           "train.eval_batches 2147483647 needs 137438953409 tokens of validation data; %s has %zu tokens (room for "
           "at most %zu batches)",
           val_bin, v.n_tokens, (v.n_tokens - 1) / 64);
  CHECK_MSG(!strcmp(aa_last_error(), want), "%s", aa_last_error());
  aa_shard_free(&v);
  fclose(log);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_train_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 600000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  RUN(resume_from_checkpoint_gives_bit_identical_losses);
  RUN(corrupt_and_mismatched_checkpoints_are_rejected);
  RUN(bad_training_data_fails_cleanly);
  RUN(outputs_never_write_through_planted_symlinks);
  RUN(eval_batches_past_the_validation_shard_fail_at_once);
  RUN(bundled_example_learns_below_unigram_entropy);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
  return aa_test_summary();
}
