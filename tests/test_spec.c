/* Model-spec parsing, validation, canonical hash, parameter count and the
 * learning-rate schedule (common/spec.c), and the table-driven field reader
 * it shares with the strategy file (common/json.h). Fixtures live in tests/specs/ and
 * are found through AA_SOURCE_DIR (set by ctest; "." when unset). */
#include "common/aa.h"
#include "common/json.h"
#include "common/rendezvous.h"
#include "common/spec.h"
#include "tests/aa_test.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *src_dir(void) {
  const char *d = getenv("AA_SOURCE_DIR");
  return d && *d ? d : ".";
}

/* Path of a fixture; valid until the next call. */
static const char *fixture(const char *name) {
  static char buf[AA_PATH_MAX];
  snprintf(buf, sizeof buf, "%s/tests/specs/%s", src_dir(), name);
  return buf;
}

#define MODEL_OK "\"n_layer\": 2, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 256"
#define TRAIN_OK "\"global_batch\": 16, \"steps\": 300, \"lr\": 0.003"
#define DATA_OK "\"train\": \"train.bin\""

/* Builds a spec from the contents of its sections (NULL = a valid default)
 * plus extra top-level members, and parses it as "model.json" in /specs. */
static int parse_parts(aa_model_spec_t *out, const char *model, const char *train, const char *data,
                       const char *extra) {
  model = model ? model : MODEL_OK;
  train = train ? train : TRAIN_OK;
  data = data ? data : DATA_OK;
  extra = extra ? extra : "";
  size_t cap = strlen(model) + strlen(train) + strlen(data) + strlen(extra) + 128;
  char *json = malloc(cap);
  snprintf(json, cap, "{\"model\": {%s},\n \"train\": {%s},\n \"data\": {%s}%s%s}", model, train, data,
           *extra ? ", " : "", extra);
  int rc = aa_spec_parse(out, json, "/specs", "model.json");
  free(json);
  return rc;
}

/* Checks that rc is `code`, that *out was left untouched, and that the
 * last-error message contains every needle (a NULL-terminated list). */
static void check_error(int line, int rc, int code, const aa_model_spec_t *s, const char *const *needles) {
  static unsigned char poison[sizeof(aa_model_spec_t)];
  memset(poison, 0xAB, sizeof poison);
  CHECK_MSG(rc == code, "line %d: rc %d, want %d (%s)", line, rc, code, aa_last_error());
  if (s) CHECK_MSG(memcmp(s, poison, sizeof poison) == 0, "line %d: *out written on failure", line);
  for (; *needles; needles++)
    CHECK_MSG(strstr(aa_last_error(), *needles), "line %d: message \"%s\" lacks \"%s\"", line,
              aa_last_error(), *needles);
}

static aa_model_spec_t *poisoned(void) {
  static aa_model_spec_t s;
  memset(&s, 0xAB, sizeof s);
  return &s;
}

/* EXPECT_PARTS_ERROR(model, train, data, extra, code, needle...) */
#define EXPECT_PARTS_ERROR(m, t, d, x, code, ...)                                                            \
  do {                                                                                                       \
    aa_model_spec_t *s_ = poisoned();                                                                        \
    int rc_ = parse_parts(s_, m, t, d, x);                                                                   \
    check_error(__LINE__, rc_, code, s_, (const char *const[]){__VA_ARGS__, NULL});                          \
  } while (0)

#define EXPECT_LOAD_ERROR(path, code, ...)                                                                   \
  do {                                                                                                       \
    aa_model_spec_t *s_ = poisoned();                                                                        \
    int rc_ = aa_spec_load(s_, path);                                                                        \
    check_error(__LINE__, rc_, code, s_, (const char *const[]){__VA_ARGS__, NULL});                          \
  } while (0)

/* --- parsing valid specs ------------------------------------------------- */

AA_TEST(full_spec_parses_every_field_as_written) {
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, fixture("full.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(strcmp(s.name, "tiny-synth") == 0);
  CHECK(strcmp(s.arch.family, "gpt2") == 0);
  CHECK(s.arch.n_layer == 2 && s.arch.n_head == 4 && s.arch.d_model == 128);
  CHECK(s.arch.d_ff == 384 && s.arch.seq_len == 64 && s.arch.vocab_size == 256);
  CHECK(s.train.global_batch == 16 && s.train.steps == 300);
  CHECK(s.train.lr == 3e-3f && s.train.min_lr == 1e-4f);
  CHECK(s.train.warmup_steps == 20);
  CHECK(s.train.schedule == AA_SCHED_CONSTANT);
  CHECK(s.train.weight_decay == 0.05f && s.train.beta1 == 0.8f && s.train.beta2 == 0.99f);
  CHECK(s.train.eps == 1e-6f && s.train.grad_clip == 0.5f);
  CHECK(s.train.seed == UINT64_C(9223372036854775807));
  CHECK(s.train.eval_every == 50 && s.train.eval_batches == 4 && s.train.checkpoint_every == 100);
}

AA_TEST(minimal_spec_gets_every_default) {
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, fixture("minimal.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(strcmp(s.name, "minimal") == 0); /* the file stem */
  CHECK(strcmp(s.arch.family, "gpt2") == 0);
  CHECK(s.arch.d_ff == 4 * 128);
  CHECK(s.train.min_lr == 3e-3f / 10.0f);
  CHECK(s.train.warmup_steps == 0);
  CHECK(s.train.schedule == AA_SCHED_COSINE);
  CHECK(s.train.weight_decay == 0.1f && s.train.beta1 == 0.9f && s.train.beta2 == 0.95f);
  CHECK(s.train.eps == 1e-8f && s.train.grad_clip == 1.0f);
  CHECK(s.train.seed == 1234);
  CHECK(s.train.eval_every == 100 && s.train.eval_batches == 8 && s.train.checkpoint_every == 0);
  CHECK(s.val_data[0] == '\0' && s.init_weights[0] == '\0');
}

AA_TEST(integer_json_values_are_accepted_for_float_fields) {
  aa_model_spec_t s;
  int rc = parse_parts(&s, NULL, "\"global_batch\": 1, \"steps\": 10, \"lr\": 1, \"min_lr\": 0, \"beta1\": 0",
                       NULL, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(s.train.lr == 1.0f && s.train.min_lr == 0.0f && s.train.beta1 == 0.0f);
}

AA_TEST(relative_paths_resolve_against_the_spec_directory) {
  aa_model_spec_t s;
  char want[AA_PATH_MAX * 2];
  int rc = aa_spec_load(&s, fixture("full.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  snprintf(want, sizeof want, "%s/tests/specs/data/train.bin", src_dir());
  CHECK_MSG(strcmp(s.train_data, want) == 0, "%s != %s", s.train_data, want);
  snprintf(want, sizeof want, "%s/tests/specs/data/val.bin", src_dir());
  CHECK_MSG(strcmp(s.val_data, want) == 0, "%s != %s", s.val_data, want);
  snprintf(want, sizeof want, "%s/tests/specs/ckpt/start.ckpt", src_dir());
  CHECK_MSG(strcmp(s.init_weights, want) == 0, "%s != %s", s.init_weights, want);

  /* A base_dir with a trailing slash does not double it. */
  rc = aa_spec_parse(
      &s, "{\"model\": {" MODEL_OK "}, \"train\": {" TRAIN_OK "}, \"data\": {\"train\": \"t.bin\"}}", "/",
      "x.json");
  CHECK(rc == 0 && strcmp(s.train_data, "/t.bin") == 0);
}

AA_TEST(absolute_paths_are_kept) {
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, fixture("absolute_paths.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(strcmp(s.train_data, "/srv/data/train.bin") == 0);
  CHECK(strcmp(s.val_data, "/srv/data/val.bin") == 0);
  CHECK(strcmp(s.init_weights, "/srv/ckpt/start.ckpt") == 0);
}

AA_TEST(parse_without_base_dir_keeps_paths_relative_and_names_model) {
  aa_model_spec_t s;
  int rc = aa_spec_parse(
      &s, "{\"model\": {" MODEL_OK "}, \"train\": {" TRAIN_OK "}, \"data\": {" DATA_OK "}}", NULL, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(strcmp(s.train_data, "train.bin") == 0);
  CHECK(strcmp(s.name, "model") == 0);
}

AA_TEST(name_defaults_to_origin_stem_and_is_bounded) {
  aa_model_spec_t s;
  int rc = parse_parts(&s, NULL, NULL, NULL, NULL);
  CHECK(rc == 0 && strcmp(s.name, "model") == 0); /* stem of "model.json" */

  char name[200], extra[256];
  memset(name, 'n', 127);
  name[127] = '\0';
  snprintf(extra, sizeof extra, "\"name\": \"%s\"", name);
  rc = parse_parts(&s, NULL, NULL, NULL, extra);
  CHECK_MSG(rc == 0 && strlen(s.name) == 127, "%s", aa_last_error());

  memset(name, 'n', 128);
  name[128] = '\0';
  snprintf(extra, sizeof extra, "\"name\": \"%s\"", name);
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, extra, AA_EINVAL, "model.json: name: must be at most 127 bytes long");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"name\": \"\"", AA_EINVAL, "name: must not be empty");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"name\": \"a\\tb\"", AA_EINVAL, "name: must not contain control");
}

/* --- syntax and file errors ---------------------------------------------- */

AA_TEST(to_json_round_trips_every_field_and_makes_paths_absolute) {
  const char *names[] = {"full.json", "minimal.json", "no_data.json"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    aa_model_spec_t a, b;
    char *text = NULL;
    int rc = aa_spec_load(&a, fixture(names[i]));
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    if (rc) return;
    rc = aa_spec_to_json(&a, &text);
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    if (rc) return;
    /* Parsed from another directory with no base: the same spec, the same
     * bytes (floats and the 2^63-1 seed read back exactly), absolute paths. */
    rc = aa_spec_parse(&b, text, "/nonexistent", "round trip");
    CHECK_MSG(rc == 0, "%s: %s", aa_last_error(), text);
    if (rc == 0) {
      /* No data in, no data out (the text has no data section to parse). */
      CHECK_MSG(a.train_data[0] ? b.train_data[0] == '/' : !b.train_data[0] && !strstr(text, "\"data\""),
                "%s", b.train_data);
      char cwd[AA_PATH_MAX], want[AA_PATH_MAX * 2 + 2];
      CHECK(getcwd(cwd, sizeof cwd) != NULL);
      if (a.train_data[0] && a.train_data[0] != '/') {
        snprintf(want, sizeof want, "%s/%s", cwd, a.train_data);
        CHECK_MSG(strcmp(b.train_data, want) == 0, "%s != %s", b.train_data, want);
        strcpy(a.train_data, b.train_data);
        if (a.val_data[0]) strcpy(a.val_data, b.val_data);
        if (a.init_weights[0]) strcpy(a.init_weights, b.init_weights);
      }
      CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "%s differs after the round trip", names[i]);
    }
    free(text);
  }
}

AA_TEST(syntax_error_reports_file_line_and_column) {
  aa_model_spec_t *s = poisoned();
  char want[AA_PATH_MAX + 32];
  int rc = aa_spec_load(s, fixture("bad_syntax.json"));
  /* The '@' is line 3, column 24 of the fixture. */
  snprintf(want, sizeof want, "%s:3:24: ", fixture("bad_syntax.json"));
  check_error(__LINE__, rc, AA_EPARSE, s, (const char *const[]){"invalid token", NULL});
  CHECK_MSG(strncmp(aa_last_error(), want, strlen(want)) == 0, "\"%s\" does not start with \"%s\"",
            aa_last_error(), want);
}

AA_TEST(duplicate_key_is_a_syntax_error_naming_the_key) {
  char want[AA_PATH_MAX + 32];
  snprintf(want, sizeof want, "%s:2:", fixture("bad_duplicate_key.json"));
  EXPECT_LOAD_ERROR(fixture("bad_duplicate_key.json"), AA_EPARSE, want, "duplicate object key", "n_head");
}

AA_TEST(empty_file_is_rejected_clearly) {
  EXPECT_LOAD_ERROR(fixture("bad_empty.json"), AA_EPARSE, "bad_empty.json: empty (expected a JSON object)");
  aa_model_spec_t *s = poisoned();
  int rc = aa_spec_parse(s, " \n\t ", NULL, "blank.json");
  check_error(__LINE__, rc, AA_EPARSE, s, (const char *const[]){"blank.json: empty", NULL});
}

AA_TEST(non_object_top_level_is_rejected) {
  EXPECT_LOAD_ERROR(fixture("bad_top_level_array.json"), AA_EINVAL,
                    "top level must be a JSON object (got array)");
  aa_model_spec_t *s = poisoned();
  int rc = aa_spec_parse(s, "42", NULL, "n.json");
  check_error(__LINE__, rc, AA_EINVAL, s,
              (const char *const[]){"n.json: top level must be a JSON object (got integer)", NULL});
}

AA_TEST(missing_file_is_enoent_naming_the_path) {
  EXPECT_LOAD_ERROR(fixture("does_not_exist.json"), AA_ENOENT, "does_not_exist.json: No such file");
}

AA_TEST(directory_is_an_io_error) {
  char dir[AA_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/tests/specs", src_dir());
  EXPECT_LOAD_ERROR(dir, AA_EIO, "tests/specs: Is a directory");
}

AA_TEST(file_over_one_mib_is_rejected_before_parsing) {
  char tmpl[] = "/tmp/aa_spec_XXXXXX";
  int fd = mkstemp(tmpl);
  CHECK(fd >= 0);
  if (fd < 0) return;
  /* Valid JSON padded with whitespace: only the size can reject it. */
  static char pad[(1 << 20) + 2];
  memset(pad, ' ', sizeof pad);
  const char *body = "{\"model\": {" MODEL_OK "}, \"train\": {" TRAIN_OK "}, \"data\": {" DATA_OK "}}";
  memcpy(pad, body, strlen(body));
  CHECK(write(fd, pad, sizeof pad) == (ssize_t)sizeof pad);
  close(fd);
  EXPECT_LOAD_ERROR(tmpl, AA_EINVAL, "too large", "at most 1048576 bytes");

  /* Exactly 1 MiB is still accepted. */
  CHECK(truncate(tmpl, 1 << 20) == 0);
  aa_model_spec_t s;
  int rc = aa_spec_load(&s, tmpl);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  unlink(tmpl);
}

AA_TEST(nul_byte_in_file_is_rejected) {
  char tmpl[] = "/tmp/aa_spec_XXXXXX";
  int fd = mkstemp(tmpl);
  CHECK(fd >= 0);
  if (fd < 0) return;
  const char body[] = "{\"model\": {}}\0{}";
  CHECK(write(fd, body, sizeof body - 1) == (ssize_t)(sizeof body - 1));
  close(fd);
  EXPECT_LOAD_ERROR(tmpl, AA_EPARSE, "NUL byte at offset 13");
  unlink(tmpl);
}

/* --- validation errors --------------------------------------------------- */

AA_TEST(missing_required_field_is_named) {
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 16, \"steps\": 300", NULL, NULL, AA_EINVAL,
                     "model.json: train.lr: required field is missing");
  EXPECT_PARTS_ERROR("\"n_layer\": 2, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64", NULL, NULL, NULL,
                     AA_EINVAL, "model.json: model.vocab_size: required field is missing");
  EXPECT_PARTS_ERROR(NULL, NULL, "\"val\": \"v.bin\"", NULL, AA_EINVAL,
                     "model.json: data.train: required field is missing");
  aa_model_spec_t *s = poisoned();
  int rc = aa_spec_parse(s, "{\"model\": {" MODEL_OK "}, \"data\": {" DATA_OK "}}", NULL, "model.json");
  check_error(__LINE__, rc, AA_EINVAL, s,
              (const char *const[]){"model.json: train: required field is missing", NULL});
}

AA_TEST(wrong_type_names_the_expected_type) {
  EXPECT_PARTS_ERROR(
      "\"n_layer\": 2.5, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 256", NULL, NULL,
      NULL, AA_EINVAL, "model.json: model.n_layer: must be an integer (got real number 2.5)");
  EXPECT_PARTS_ERROR(
      "\"n_layer\": 2.0, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 256", NULL, NULL,
      NULL, AA_EINVAL, "model.n_layer: must be an integer (got real number 2.0)");
  EXPECT_PARTS_ERROR(
      "\"n_layer\": \"2\", \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 256", NULL, NULL,
      NULL, AA_EINVAL, "model.n_layer: must be an integer (got string)");
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 16, \"steps\": 300, \"lr\": \"0.1\"", NULL, NULL, AA_EINVAL,
                     "train.lr: must be a number (got string)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"seed\": 1.5", NULL, NULL, AA_EINVAL,
                     "train.seed: must be an integer (got real number 1.5)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"schedule\": true", NULL, NULL, AA_EINVAL,
                     "train.schedule: must be a string (got boolean)");
  EXPECT_PARTS_ERROR(NULL, NULL, "\"train\": null", NULL, AA_EINVAL,
                     "data.train: must be a string (got null)");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"init_weights\": 3", AA_EINVAL,
                     "init_weights: must be a string (got integer)");
  aa_model_spec_t *s = poisoned();
  int rc = aa_spec_parse(s, "{\"model\": [], \"train\": {}, \"data\": {}}", NULL, "model.json");
  check_error(__LINE__, rc, AA_EINVAL, s,
              (const char *const[]){"model.json: model: must be an object (got array)", NULL});
}

AA_TEST(out_of_range_values_are_rejected_with_the_range) {
  EXPECT_PARTS_ERROR("\"n_layer\": 0, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 256",
                     NULL, NULL, NULL, AA_EINVAL,
                     "model.json: model.n_layer: must be between 1 and 256 (got 0)");
  EXPECT_PARTS_ERROR("\"n_layer\": 2, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 1",
                     NULL, NULL, NULL, AA_EINVAL, "model.vocab_size: must be between 2 and 1048576 (got 1)");
  EXPECT_PARTS_ERROR(MODEL_OK ", \"d_ff\": 262145", NULL, NULL, NULL, AA_EINVAL,
                     "model.d_ff: must be between 1 and 262144 (got 262145)");
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 0, \"steps\": 300, \"lr\": 0.1", NULL, NULL, AA_EINVAL,
                     "train.global_batch: must be >= 1 (got 0)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"eval_batches\": 0", NULL, NULL, AA_EINVAL,
                     "train.eval_batches: must be >= 1 (got 0)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"eval_every\": -1", NULL, NULL, AA_EINVAL,
                     "train.eval_every: must be >= 0 (got -1)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"checkpoint_every\": -5", NULL, NULL, AA_EINVAL,
                     "train.checkpoint_every: must be >= 0 (got -5)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"seed\": -1", NULL, NULL, AA_EINVAL,
                     "train.seed: must be >= 0 (got -1)");
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 16, \"steps\": 300, \"lr\": 0", NULL, NULL, AA_EINVAL,
                     "train.lr: must be > 0 (got 0)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"min_lr\": -0.001", NULL, NULL, AA_EINVAL,
                     "train.min_lr: must be >= 0");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"beta1\": 1.0", NULL, NULL, AA_EINVAL,
                     "train.beta1: must be in [0, 1) (got 1)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"beta2\": -0.5", NULL, NULL, AA_EINVAL,
                     "train.beta2: must be in [0, 1)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"eps\": 0", NULL, NULL, AA_EINVAL, "train.eps: must be > 0 (got 0)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"weight_decay\": -0.1", NULL, NULL, AA_EINVAL,
                     "train.weight_decay: must be >= 0");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"grad_clip\": -1", NULL, NULL, AA_EINVAL,
                     "train.grad_clip: must be >= 0");
}

AA_TEST(values_beyond_c_int_or_float_are_rejected_not_wrapped) {
  /* 2^32 + 2 would become 2 if it were cast to int before the check. */
  EXPECT_PARTS_ERROR(
      "\"n_layer\": 4294967298, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 64, \"vocab_size\": 256", NULL,
      NULL, NULL, AA_EINVAL, "model.n_layer: must be between 1 and 256 (got 4294967298)");
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 16, \"steps\": 2147483648, \"lr\": 0.1", NULL, NULL, AA_EINVAL,
                     "train.steps: must be <= 2147483647 (got 2147483648)");
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 16, \"steps\": 300, \"lr\": 1e39", NULL, NULL, AA_EINVAL,
                     "train.lr: out of range of a 32-bit float (got 1e+39)");
  /* Rounding to float would make these break their rule. */
  EXPECT_PARTS_ERROR(
      NULL, TRAIN_OK ", \"beta2\": 0.9999999999", NULL, NULL, AA_EINVAL,
      "train.beta2: must be in [0, 1) (got 0.9999999999, which rounds to 1 as a 32-bit float)");
  EXPECT_PARTS_ERROR(NULL, "\"global_batch\": 16, \"steps\": 300, \"lr\": 1e-50", NULL, NULL, AA_EINVAL,
                     "train.lr: must be > 0 (got 1e-50, which rounds to 0 as a 32-bit float)");
  /* Past 2^63-1 the JSON reader itself refuses the integer. */
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"seed\": 9223372036854775808", NULL, NULL, AA_EPARSE,
                     "model.json:2:", "too big integer");
}

AA_TEST(n_head_must_divide_d_model) {
  EXPECT_PARTS_ERROR("\"n_layer\": 2, \"n_head\": 5, \"d_model\": 768, \"seq_len\": 64, \"vocab_size\": 256",
                     NULL, NULL, NULL, AA_EINVAL,
                     "model.json: model.n_head: must divide model.d_model (768 % 5 != 0)");
}

AA_TEST(min_lr_above_lr_is_rejected) {
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"min_lr\": 0.01", NULL, NULL, AA_EINVAL,
                     "model.json: train.min_lr: must be <= train.lr (0.01 > 0.003)");
}

AA_TEST(warmup_longer_than_steps_is_rejected) {
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"warmup_steps\": 301", NULL, NULL, AA_EINVAL,
                     "model.json: train.warmup_steps: must be <= train.steps (301 > 300)");
  aa_model_spec_t s;
  CHECK(parse_parts(&s, NULL, TRAIN_OK ", \"warmup_steps\": 300", NULL, NULL) == 0);
}

AA_TEST(unknown_key_is_named_with_the_allowed_keys) {
  EXPECT_PARTS_ERROR(
      MODEL_OK ", \"n_heads\": 4", NULL, NULL, NULL, AA_EINVAL,
      "model.json: model.n_heads: unknown key (allowed: family, n_layer, n_head, d_model, d_ff, "
      "seq_len, vocab_size, n_kv_head, rope_theta, norm_eps, qkv_bias, moe)");
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"learning_rate\": 0.1", NULL, NULL, AA_EINVAL,
                     "train.learning_rate: unknown key (allowed: global_batch, steps, lr,");
  EXPECT_PARTS_ERROR(NULL, NULL, DATA_OK ", \"test\": \"t.bin\"", NULL, AA_EINVAL,
                     "data.test: unknown key (allowed: train, val)");
  EXPECT_PARTS_ERROR(
      NULL, NULL, NULL, "\"init_weight\": \"w.ckpt\"", AA_EINVAL,
      "model.json: init_weight: unknown key (allowed: name, model, train, data, init_weights, lora)");
  /* A hostile key is escaped, not copied raw into the message. */
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"a\\u0001\\nb\": 1", AA_EINVAL, "a\\x01\\x0ab: unknown key");
}

AA_TEST(bad_enum_value_lists_the_choices) {
  EXPECT_PARTS_ERROR(NULL, TRAIN_OK ", \"schedule\": \"linear\"", NULL, NULL, AA_EINVAL,
                     "model.json: train.schedule: must be one of: cosine, constant (got \"linear\")");
  EXPECT_PARTS_ERROR(MODEL_OK ", \"family\": \"mistral\"", NULL, NULL, NULL, AA_EINVAL,
                     "model.family: must be one of: gpt2, llama (got \"mistral\")");
}

AA_TEST(overlong_path_is_rejected) {
  size_t n = AA_PATH_MAX + 10;
  char *data = malloc(n + 32);
  snprintf(data, n + 32, "\"train\": \"/%0*d\"", (int)n - 1, 0);
  EXPECT_PARTS_ERROR(NULL, NULL, data, NULL, AA_EINVAL,
                     "model.json: data.train: path too long (4106 bytes; max 4095)");

  /* The limit applies to the resolved path: "/specs/" + 4089 bytes is over. */
  snprintf(data, n + 32, "\"train\": \"%0*d\"", AA_PATH_MAX - 7, 0);
  EXPECT_PARTS_ERROR(
      NULL, NULL, data, NULL, AA_EINVAL,
      "data.train: path too long (4096 bytes after resolving against the spec's directory; max 4095)");

  /* The longest path that fits is accepted, whole. */
  snprintf(data, n + 32, "\"train\": \"/%0*d\"", AA_PATH_MAX - 2, 0);
  aa_model_spec_t s;
  int rc = parse_parts(&s, NULL, NULL, data, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(strlen(s.train_data) == AA_PATH_MAX - 1);
  free(data);

  EXPECT_PARTS_ERROR(NULL, NULL, "\"train\": \"\"", NULL, AA_EINVAL, "data.train: must not be empty");
}

/* --- architecture -------------------------------------------------------- */

static aa_arch_t gpt2_124m(void) {
  aa_arch_t a = {.family = "gpt2",
                 .n_layer = 12,
                 .n_head = 12,
                 .d_model = 768,
                 .d_ff = 3072,
                 .seq_len = 1024,
                 .vocab_size = 50257};
  return a;
}

AA_TEST(arch_validate_checks_family_ranges_and_divisibility) {
  aa_arch_t a = gpt2_124m();
  CHECK(aa_arch_validate(&a) == 0);
  a.n_head = 7;
  CHECK(aa_arch_validate(&a) == AA_EINVAL);
  CHECK(strcmp(aa_last_error(), "model.n_head: must divide model.d_model (768 % 7 != 0)") == 0);
  a = gpt2_124m();
  a.seq_len = 0;
  CHECK(aa_arch_validate(&a) == AA_EINVAL &&
        strstr(aa_last_error(), "model.seq_len: must be between 1 and 1048576"));
  a = gpt2_124m();
  snprintf(a.family, sizeof a.family, "mistral");
  CHECK(aa_arch_validate(&a) == AA_EINVAL && strstr(aa_last_error(), "model.family"));
}

/* The llama family's fields: defaults, the grouped-query rule, the even
 * head size RoPE needs, gpt2 refusing GQA, the parameter count (counted
 * here tensor by tensor) and a hash that sees the llama-only fields while
 * gpt2's canonical text is unchanged. */
AA_TEST(llama_family_fields_rules_count_and_hash) {
  aa_model_spec_t s;
  CHECK(parse_parts(&s, MODEL_OK ", \"family\": \"llama\"", NULL, NULL, NULL) == 0);
  CHECK(aa_arch_is_llama(&s.arch));
  CHECK(s.arch.n_kv_head == s.arch.n_head && aa_arch_kv_heads(&s.arch) == s.arch.n_head);
  CHECK(s.arch.rope_theta == 10000.0f && s.arch.norm_eps == 1e-5f);
  aa_arch_t a = s.arch;
  a.n_kv_head = 5;
  a.n_head = 12;
  a.d_model = 768;
  CHECK(aa_arch_validate(&a) == AA_EINVAL && strstr(aa_last_error(), "model.n_kv_head: must divide model.n_head"));
  a.n_kv_head = 4;
  CHECK(aa_arch_validate(&a) == 0);
  a.d_model = 12 * 5; /* head size 5: odd */
  CHECK(aa_arch_validate(&a) == AA_EINVAL && strstr(aa_last_error(), "head size d_model / n_head must be even"));
  aa_arch_t g = gpt2_124m();
  g.n_kv_head = 4;
  CHECK(aa_arch_validate(&g) == AA_EINVAL && strstr(aa_last_error(), "needs family \"llama\""));
  /* 2 layers, C 8, 4 heads of 2, 2 kv heads, F 12, V 10. */
  aa_arch_t l = {.family = "llama", .n_layer = 2, .n_head = 4, .d_model = 8, .d_ff = 12, .seq_len = 16,
                 .vocab_size = 10, .n_kv_head = 2, .rope_theta = 10000, .norm_eps = 1e-5f};
  CHECK(aa_arch_validate(&l) == 0);
  const uint64_t per = 8 + 8 * 8 + 2 * (4 * 8) + 8 * 8 + 8 + 3 * 12 * 8;
  CHECK(aa_arch_param_count(&l) == 2 * 10 * 8 + 2 * per + 8);
  char h1[17], h2[17];
  aa_arch_hash(&l, h1);
  l.rope_theta = 500000;
  aa_arch_hash(&l, h2);
  CHECK(strcmp(h1, h2) != 0);
  l.rope_theta = 10000;
  l.n_kv_head = 4;
  aa_arch_hash(&l, h2);
  CHECK(strcmp(h1, h2) != 0);
  /* gpt2 ignores the llama fields: its hash does not move. */
  g = gpt2_124m();
  aa_arch_hash(&g, h1);
  g.rope_theta = 123;
  g.norm_eps = 0.5f;
  aa_arch_hash(&g, h2);
  CHECK(strcmp(h1, h2) == 0);
}

#define MOE_MODEL MODEL_OK ", \"family\": \"llama\", \"moe\": "

/* Qwen2's q/k/v biases (model.qkv_bias) and Qwen-MoE's shared-expert gate
 * (model.moe.shared_expert_gate): false by default, their rules, the
 * published parameter counts of Qwen2-7B (7,615,616,512 with the biases:
 * the model card of Qwen2.5-7B, the same shape, gives 7.61 B and 6.53 B
 * without the embeddings) and Qwen1.5-MoE-A2.7B (14.3 B, 2.7 B active: its
 * 4 x 1408-wide shared expert as 4 shared experts of 1408), the hashes
 * (unchanged without the options, moved by each) and the round trip. */
AA_TEST(qwen_options_rules_counts_hash_and_round_trip) {
  aa_model_spec_t s;
  CHECK(parse_parts(&s, MODEL_OK ", \"family\": \"llama\"", NULL, NULL, NULL) == 0);
  CHECK(s.arch.qkv_bias == 0 && s.arch.moe.shared_expert_gate == 0);
  aa_arch_t plain = s.arch;
  CHECK(parse_parts(&s, MODEL_OK ", \"family\": \"llama\", \"qkv_bias\": true", NULL, NULL, NULL) == 0);
  CHECK(s.arch.qkv_bias == 1);
  const uint64_t KV = (uint64_t)s.arch.d_model; /* n_kv_head = n_head */
  CHECK(aa_arch_param_count(&s.arch) ==
        aa_arch_param_count(&plain) + (uint64_t)s.arch.n_layer * (s.arch.d_model + 2 * KV));
  char h0[17], h1[17];
  aa_arch_hash(&plain, h0);
  aa_arch_hash(&s.arch, h1);
  CHECK(strcmp(h0, h1) != 0);
  char *text = NULL;
  aa_model_spec_t back;
  CHECK(aa_spec_to_json(&s, &text) == 0 && text && strstr(text, "\"qkv_bias\":true"));
  CHECK_MSG(text && aa_spec_parse(&back, text, "/specs", "model.json") == 0, "%s", aa_last_error());
  CHECK(back.arch.qkv_bias == 1);
  free(text);
  EXPECT_PARTS_ERROR(MODEL_OK ", \"qkv_bias\": true", NULL, NULL, NULL, AA_EINVAL,
                     "model.qkv_bias: is a llama option");
  EXPECT_PARTS_ERROR(MODEL_OK ", \"family\": \"llama\", \"qkv_bias\": 1", NULL, NULL, NULL, AA_EINVAL,
                     "model.qkv_bias: must be true or false");

  aa_arch_t q = {.family = "llama",
                 .n_layer = 28,
                 .n_head = 28,
                 .d_model = 3584,
                 .d_ff = 18944,
                 .seq_len = 32768,
                 .vocab_size = 152064,
                 .n_kv_head = 4,
                 .rope_theta = 1e6f,
                 .norm_eps = 1e-6f,
                 .qkv_bias = 1};
  CHECK_MSG(aa_arch_validate(&q) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_arch_param_count(&q) == 7615616512ull, "%llu", (unsigned long long)aa_arch_param_count(&q));

  EXPECT_PARTS_ERROR(
      MOE_MODEL "{\"experts\": 4, \"top_k\": 1, \"d_ff_expert\": 8, \"shared_expert_gate\": "
                "true}",
      NULL, NULL, NULL, AA_EINVAL,
      "model.moe.shared_expert_gate: gates the shared experts: it needs model.moe.shared_experts >= 1");
  CHECK(parse_parts(&s,
                    MOE_MODEL "{\"experts\": 4, \"top_k\": 1, \"d_ff_expert\": 8, \"shared_experts\": 2, "
                              "\"shared_expert_gate\": true}",
                    NULL, NULL, NULL) == 0);
  CHECK(s.arch.moe.shared_expert_gate == 1);
  aa_arch_t ungated = s.arch;
  ungated.moe.shared_expert_gate = 0;
  CHECK(aa_arch_param_count(&s.arch) == aa_arch_param_count(&ungated) + 2ull * (uint64_t)s.arch.d_model);
  aa_arch_hash(&ungated, h0);
  aa_arch_hash(&s.arch, h1);
  CHECK(strcmp(h0, h1) != 0);
  CHECK(aa_spec_to_json(&s, &text) == 0 && text && strstr(text, "\"shared_expert_gate\":true") &&
        strstr(text, "\"norm_topk_prob\":true"));
  CHECK_MSG(text && aa_spec_parse(&back, text, "/specs", "model.json") == 0, "%s", aa_last_error());
  CHECK(!memcmp(&back.arch.moe, &s.arch.moe, sizeof s.arch.moe));
  free(text);
  /* norm_topk_prob: true (Mixtral's renormalisation) unless set false;
   * false is stored as moe.topk_raw and moves the hash. */
  CHECK(s.arch.moe.topk_raw == 0);
  CHECK(parse_parts(&s,
                    MOE_MODEL "{\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 8, \"norm_topk_prob\": false}",
                    NULL, NULL, NULL) == 0);
  CHECK(s.arch.moe.topk_raw == 1);
  aa_arch_t normed = s.arch;
  normed.moe.topk_raw = 0;
  aa_arch_hash(&normed, h0);
  aa_arch_hash(&s.arch, h1);
  CHECK(strcmp(h0, h1) != 0 && aa_arch_param_count(&normed) == aa_arch_param_count(&s.arch));
  CHECK(aa_spec_to_json(&s, &text) == 0 && text && strstr(text, "\"norm_topk_prob\":false"));
  CHECK_MSG(text && aa_spec_parse(&back, text, "/specs", "model.json") == 0, "%s", aa_last_error());
  CHECK(back.arch.moe.topk_raw == 1);
  free(text);
  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 8, \"norm_topk_prob\": 0}",
                     NULL, NULL, NULL, AA_EINVAL, "model.moe.norm_topk_prob: must be true or false");

  aa_arch_t x = {.family = "llama",
                 .n_layer = 24,
                 .n_head = 16,
                 .d_model = 2048,
                 .d_ff = 5632,
                 .seq_len = 8192,
                 .vocab_size = 151936,
                 .n_kv_head = 16,
                 .rope_theta = 1e6f,
                 .norm_eps = 1e-6f,
                 .qkv_bias = 1,
                 .moe = {.experts = 60,
                         .top_k = 4,
                         .d_ff_expert = 1408,
                         .shared_experts = 4,
                         .every = 1,
                         .aux_loss_coef = 0.001f,
                         .shared_expert_gate = 1}};
  CHECK_MSG(aa_arch_validate(&x) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_arch_param_count(&x) == 14315784192ull, "%llu", (unsigned long long)aa_arch_param_count(&x));
  CHECK_MSG(aa_arch_active_param_count(&x) == 2689173504ull, "%llu",
            (unsigned long long)aa_arch_active_param_count(&x));
}

/* The MoE object (docs/model-spec.md "moe"): the three required fields,
 * the defaults, the rules between fields, Mixtral 8x7B's published counts
 * (46.7 B parameters, 12.9 B active: Mistral AI, arXiv 2401.04088), the
 * hash (dense hashes do not move; every MoE field moves it) and the round
 * trip through aa_spec_to_json. */
AA_TEST(moe_fields_defaults_rules_counts_and_hash) {
  aa_model_spec_t s;
  CHECK(parse_parts(&s, MOE_MODEL "{\"experts\": 8, \"top_k\": 2, \"d_ff_expert\": 96}", NULL, NULL, NULL) ==
        0);
  const aa_moe_t *m = &s.arch.moe;
  CHECK(m->experts == 8 && m->top_k == 2 && m->d_ff_expert == 96 && m->shared_experts == 0 && m->every == 1 &&
        m->aux_loss_coef == 0.01f && m->z_loss_coef == 0.0f && m->capacity_factor == 0.0f);
  CHECK(aa_arch_moe_layers(&s.arch) == 2 && aa_arch_is_moe_layer(&s.arch, 0) &&
        aa_arch_is_moe_layer(&s.arch, 1));

  /* Dense: no moe object, every MoE field 0. */
  CHECK(parse_parts(&s, MODEL_OK ", \"family\": \"llama\"", NULL, NULL, NULL) == 0);
  CHECK(s.arch.moe.experts == 0 && s.arch.moe.every == 0 && aa_arch_moe_layers(&s.arch) == 0);

  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 8, \"top_k\": 2}", NULL, NULL, NULL, AA_EINVAL,
                     "model.moe.d_ff_expert: required field is missing");
  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 4, \"top_k\": 5, \"d_ff_expert\": 8}", NULL, NULL, NULL,
                     AA_EINVAL, "model.moe.top_k: must be at most model.moe.experts (5 > 4)");
  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 4, \"top_k\": 1, \"d_ff_expert\": 8, \"every\": 3}", NULL, NULL,
                     NULL, AA_EINVAL, "model.moe.every: must be at most model.n_layer (3 > 2)");
  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 0, \"top_k\": 1, \"d_ff_expert\": 8}", NULL, NULL, NULL,
                     AA_EINVAL, "model.moe.experts: must be between 1 and 1024 (got 0)");
  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 4, \"top_k\": 1, \"d_ff_expert\": 8, \"router\": 1}", NULL,
                     NULL, NULL, AA_EINVAL, "model.moe.router: unknown key");
  EXPECT_PARTS_ERROR(MODEL_OK ", \"moe\": {\"experts\": 4, \"top_k\": 1, \"d_ff_expert\": 8}", NULL, NULL,
                     NULL, AA_EINVAL, "model.moe: mixture-of-experts layers need family \"llama\"");

  /* Mixtral 8x7B: 32 layers, C 4096, 32 heads, 8 kv heads, 8 experts of
   * 14336, top 2, vocabulary 32000. */
  aa_arch_t x = {.family = "llama",
                 .n_layer = 32,
                 .n_head = 32,
                 .d_model = 4096,
                 .d_ff = 14336,
                 .seq_len = 4096,
                 .vocab_size = 32000,
                 .n_kv_head = 8,
                 .rope_theta = 1e6f,
                 .norm_eps = 1e-5f,
                 .moe = {.experts = 8, .top_k = 2, .d_ff_expert = 14336, .every = 1, .aux_loss_coef = 0.02f}};
  CHECK_MSG(aa_arch_validate(&x) == 0, "%s", aa_last_error());
  const uint64_t attn = (4096 + 2 * 1024) * 4096ull + 4096ull * 4096, norms = 2 * 4096;
  const uint64_t expert = 3ull * 14336 * 4096, router = 8 * 4096;
  const uint64_t outer = 2ull * 32000 * 4096 + 4096;
  CHECK(aa_arch_param_count(&x) == outer + 32 * (attn + norms + router + 8 * expert));
  CHECK(aa_arch_active_param_count(&x) == outer + 32 * (attn + norms + router + 2 * expert));
  CHECK_MSG(aa_arch_param_count(&x) / 100000000 == 467, "%llu", (unsigned long long)aa_arch_param_count(&x));
  CHECK_MSG(aa_arch_active_param_count(&x) / 100000000 == 128, "%llu",
            (unsigned long long)aa_arch_active_param_count(&x));
  /* every 2 with one shared expert: layers 0, 2, ..., 30 are MoE layers,
   * the others dense of width d_ff. */
  x.moe.every = 2;
  x.moe.shared_experts = 1;
  x.d_ff = 1000;
  CHECK(aa_arch_moe_layers(&x) == 16 && aa_arch_is_moe_layer(&x, 30) && !aa_arch_is_moe_layer(&x, 31));
  CHECK(aa_arch_param_count(&x) ==
        outer + 32 * (attn + norms) + 16 * (router + 9 * expert) + 16 * 3ull * 1000 * 4096);
  CHECK(aa_arch_active_param_count(&x) ==
        outer + 32 * (attn + norms) + 16 * (router + 3 * expert) + 16 * 3ull * 1000 * 4096);

  /* The hash: a dense llama's is unchanged by the MoE fields' existence;
   * each MoE field moves an MoE model's. */
  char h0[17], h1[17], h2[17];
  aa_arch_t d = x;
  memset(&d.moe, 0, sizeof d.moe);
  aa_arch_hash(&d, h0);
  d.moe.aux_loss_coef = 0.5f; /* experts 0: ignored */
  aa_arch_hash(&d, h1);
  CHECK(strcmp(h0, h1) == 0);
  aa_arch_hash(&x, h1);
  CHECK(strcmp(h0, h1) != 0);
  float *knobs[] = {&x.moe.aux_loss_coef, &x.moe.z_loss_coef, &x.moe.capacity_factor};
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
    *knobs[i] += 0.25f;
    aa_arch_hash(&x, h2);
    CHECK_MSG(strcmp(h1, h2) != 0, "knob %zu", i);
    *knobs[i] -= 0.25f;
  }
  x.moe.top_k = 1;
  aa_arch_hash(&x, h2);
  CHECK(strcmp(h1, h2) != 0);

  /* Round trip: every MoE field written and read back. */
  CHECK(parse_parts(&s,
                    MOE_MODEL "{\"experts\": 6, \"top_k\": 3, \"d_ff_expert\": 40, \"shared_experts\": 2, "
                              "\"every\": 2, \"aux_loss_coef\": 0.001, \"z_loss_coef\": 0.0001, "
                              "\"capacity_factor\": 1.25}",
                    NULL, NULL, NULL) == 0);
  char *text = NULL;
  aa_model_spec_t back;
  CHECK(aa_spec_to_json(&s, &text) == 0 && text && strstr(text, "\"moe\":{\"experts\":6,"));
  CHECK_MSG(text && aa_spec_parse(&back, text, "/specs", "model.json") == 0, "%s", aa_last_error());
  CHECK(!memcmp(&back.arch.moe, &s.arch.moe, sizeof s.arch.moe));
  free(text);
  CHECK(parse_parts(&s, MODEL_OK ", \"family\": \"llama\"", NULL, NULL, NULL) == 0);
  CHECK(aa_spec_to_json(&s, &text) == 0 && text && !strstr(text, "moe"));
  free(text);
}

/* FNV-1a 64, written out here so the test does not trust aa_fnv1a. */
static uint64_t local_fnv1a(const char *s) {
  uint64_t h = 14695981039346656037ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

AA_TEST(hash_is_fnv1a_of_the_canonical_text) {
  aa_arch_t a = gpt2_124m();
  char got[17], want[17];
  aa_arch_hash(&a, got);
  snprintf(want, sizeof want, "%016llx",
           (unsigned long long)local_fnv1a(
               "family=gpt2;n_layer=12;n_head=12;d_model=768;d_ff=3072;seq_len=1024;vocab_size=50257"));
  CHECK_MSG(strcmp(got, want) == 0, "%s != %s", got, want);
  /* Pinned: stored results are keyed by this value, so it must never drift. */
  CHECK_MSG(strcmp(got, "ed69e0f1c48afce8") == 0, "got %s", got);
  CHECK(strlen(got) == 16);
  for (int i = 0; i < 16; i++)
    CHECK((got[i] >= '0' && got[i] <= '9') || (got[i] >= 'a' && got[i] <= 'f'));
}

AA_TEST(hash_ignores_key_order_spacing_and_training_settings) {
  aa_model_spec_t x, y;
  int rc1 = aa_spec_load(&x, fixture("full.json"));
  int rc2 = aa_spec_load(&y, fixture("reordered.json"));
  CHECK_MSG(rc1 == 0 && rc2 == 0, "%s", aa_last_error());
  if (rc1 || rc2) return;
  CHECK(x.train.lr != y.train.lr && x.train.steps != y.train.steps); /* the settings do differ */
  char hx[17], hy[17];
  aa_arch_hash(&x.arch, hx);
  aa_arch_hash(&y.arch, hy);
  CHECK_MSG(strcmp(hx, hy) == 0, "%s != %s", hx, hy);
}

AA_TEST(hash_changes_with_every_architecture_field) {
  aa_arch_t base = gpt2_124m();
  char h0[17], h[17];
  aa_arch_hash(&base, h0);
  int *fields[] = {&base.n_layer, &base.n_head, &base.d_model, &base.d_ff, &base.seq_len, &base.vocab_size};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    *fields[i] += 1;
    aa_arch_hash(&base, h);
    CHECK_MSG(strcmp(h, h0) != 0, "field %zu", i);
    *fields[i] -= 1;
  }
  snprintf(base.family, sizeof base.family, "gpt3");
  aa_arch_hash(&base, h);
  CHECK(strcmp(h, h0) != 0);
}

/* Planning needs no data: a spec without a data section parses, and only
 * what reads tokens refuses it, through aa_spec_require_data, naming
 * data.train. The data never enters the hash, so leaving it out moves
 * no stored result. */
AA_TEST(a_spec_without_data_parses_and_only_training_refuses_it) {
  aa_model_spec_t s, with;
  int rc = aa_spec_load(&s, fixture("no_data.json"));
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(!s.train_data[0] && !s.val_data[0] && !s.init_weights[0]);
  CHECK(strcmp(s.name, "plan-only") == 0 && aa_arch_is_llama(&s.arch) && s.arch.n_kv_head == 2);
  CHECK(aa_spec_require_data(&s, "examples/x.json") == AA_EINVAL);
  CHECK_MSG(
      strstr(aa_last_error(), "examples/x.json: plan-only has no training data: data.train is required"),
      "%s", aa_last_error());
  rc = parse_parts(&with, NULL, NULL, NULL, NULL);
  CHECK_MSG(rc == 0 && aa_spec_require_data(&with, "model.json") == 0, "%s", aa_last_error());
  /* A data section, when there is one, still needs its training shard;
   * null is no section. */
  EXPECT_PARTS_ERROR(NULL, NULL, "", NULL, AA_EINVAL, "model.json: data.train: required field is missing");
  aa_model_spec_t *p = poisoned();
  rc = aa_spec_parse(p, "{\"model\": {" MODEL_OK "}, \"train\": {" TRAIN_OK "}, \"data\": null}", NULL,
                     "m.json");
  check_error(__LINE__, rc, AA_EINVAL, p,
              (const char *const[]){"m.json: data: must be an object (got null)", NULL});
}

/* Long contexts: a spec takes seq_len up to 2^20 (plan and strategy check
 * only do arithmetic on it) and names the field past that; everything that
 * would run the engine, which trains at most 65,536 tokens a sequence,
 * refuses the longer ones with both limits in the message, and the arch's
 * validation alone (what the planner reads back) does not. */
AA_TEST(long_sequences_parse_for_planning_and_only_the_engine_refuses_them) {
  static const int lens[] = {65536, 131072, 1048576};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    char model[256];
    snprintf(model, sizeof model,
             "\"n_layer\": 2, \"n_head\": 4, \"d_model\": 128, \"seq_len\": %d, \"vocab_size\": 256",
             lens[i]);
    aa_model_spec_t s;
    int rc = parse_parts(&s, model, NULL, NULL, NULL);
    CHECK_MSG(rc == 0 && s.arch.seq_len == lens[i], "seq_len %d: %s", lens[i], aa_last_error());
    if (rc) continue;
    CHECK(aa_arch_validate(&s.arch) == 0);
    rc = aa_spec_require_data(&s, "model.json");
    if (lens[i] <= AA_SEQ_LEN_ENGINE_MAX) {
      CHECK_MSG(rc == 0, "%s", aa_last_error());
      continue;
    }
    char want[256];
    snprintf(want, sizeof want,
             "model.json: seq_len %d: the engine trains at most 65,536 tokens per sequence; plan and "
             "strategy check accept up to 1,048,576",
             lens[i]);
    CHECK_MSG(rc == AA_EINVAL && strcmp(aa_last_error(), want) == 0, "%s", aa_last_error());
    CHECK(aa_arch_require_engine(&s.arch, "model.json") == AA_EINVAL && strcmp(aa_last_error(), want) == 0);
  }
  EXPECT_PARTS_ERROR(
      "\"n_layer\": 2, \"n_head\": 4, \"d_model\": 128, \"seq_len\": 1048577, \"vocab_size\": 256", NULL,
      NULL, NULL, AA_EINVAL, "model.json: model.seq_len: must be between 1 and 1048576 (got 1048577)");
}

AA_TEST(leaving_the_data_out_keeps_every_stored_hash) {
  /* tests/compat/model.json is the model of the store main wrote at
   * f189526 (tests/compat/store-v6.sql: INSERT INTO models VALUES
   * ('558a67ad089b4379', 'compat', ...)): with its data, without it and
   * with only another data path it is the same model. */
  char path[AA_PATH_MAX];
  snprintf(path, sizeof path, "%s/tests/compat/model.json", src_dir());
  aa_model_spec_t a, b, c;
  int rc = aa_spec_load(&a, path);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  rc = aa_spec_parse(&b,
                     "{\"name\": \"compat\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 16, "
                     "\"d_ff\": 32, \"seq_len\": 16, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, "
                     "\"steps\": 3, \"lr\": 0.003}}",
                     NULL, "compat-no-data.json");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  rc = aa_spec_parse(&c,
                     "{\"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 16, \"d_ff\": 32, "
                     "\"seq_len\": 16, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, \"steps\": 3, "
                     "\"lr\": 0.003}, \"data\": {\"train\": \"/elsewhere.bin\"}}",
                     NULL, "compat-other-data.json");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  char ha[17], hb[17], hc[17];
  aa_arch_hash(&a.arch, ha);
  aa_arch_hash(&b.arch, hb);
  aa_arch_hash(&c.arch, hc);
  CHECK_MSG(!strcmp(ha, "558a67ad089b4379") && !strcmp(hb, ha) && !strcmp(hc, ha), "%s %s %s", ha, hb, hc);
  /* And the documented example's (docs/model-spec.md) with and without. */
  aa_model_spec_t d, e;
  CHECK(parse_parts(&d, MODEL_OK ", \"d_ff\": 512", NULL, NULL, NULL) == 0);
  CHECK(aa_spec_parse(&e, "{\"model\": {" MODEL_OK ", \"d_ff\": 512}, \"train\": {" TRAIN_OK "}}", NULL,
                      "e") == 0);
  aa_arch_hash(&d.arch, hb);
  aa_arch_hash(&e.arch, hc);
  CHECK_MSG(!strcmp(hb, "700c9407e8a02a53") && !strcmp(hc, hb), "%s %s", hb, hc);
}

AA_TEST(param_count_matches_gpt2_124m) {
  aa_arch_t a = gpt2_124m();
  CHECK(aa_arch_param_count(&a) == UINT64_C(124439808));
  /* Tiny shape by hand: L=1, C=4, F=8, T=3, V=5. Per layer 8 + 60 + 20 + 8 + 40 + 36 = 172;
   * wte 20 + wpe 12 + lnf 8. */
  aa_arch_t t = {
      .family = "gpt2", .n_layer = 1, .n_head = 1, .d_model = 4, .d_ff = 8, .seq_len = 3, .vocab_size = 5};
  CHECK(aa_arch_param_count(&t) == 172 + 20 + 12 + 8);
}

/* --- learning-rate schedule ---------------------------------------------- */

static aa_train_cfg_t sched(aa_lr_schedule_t kind) {
  aa_train_cfg_t t = {
      .global_batch = 1, .steps = 100, .lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .schedule = kind};
  return t;
}

AA_TEST(lr_warms_up_linearly_to_the_peak) {
  aa_train_cfg_t t = sched(AA_SCHED_COSINE);
  CHECK_NEAR(aa_lr_at(&t, 0), 1e-4, 1e-9);
  CHECK_NEAR(aa_lr_at(&t, 4), 5e-4, 1e-9);
  CHECK_NEAR(aa_lr_at(&t, 9), 1e-3, 1e-9); /* end of warm-up: the peak */
  CHECK_NEAR(aa_lr_at(&t, 10), 1e-3, 1e-9);
  t.warmup_steps = 0;
  CHECK_NEAR(aa_lr_at(&t, 0), 1e-3, 1e-9);
}

AA_TEST(cosine_decays_monotonically_to_min_lr) {
  aa_train_cfg_t t = sched(AA_SCHED_COSINE);
  for (int s = 10; s < 100; s++)
    CHECK_MSG(aa_lr_at(&t, s + 1) <= aa_lr_at(&t, s), "step %d", s);
  CHECK_NEAR(aa_lr_at(&t, 55), (1e-3 + 1e-4) / 2, 1e-9); /* halfway through the decay */
  CHECK_NEAR(aa_lr_at(&t, 100), 1e-4, 1e-9);
  CHECK_NEAR(aa_lr_at(&t, 99), 1e-4, 1e-6);
  CHECK(aa_lr_at(&t, 99) >= t.min_lr);
  CHECK_NEAR(aa_lr_at(&t, 1000), 1e-4, 1e-9); /* past the end it stays at the floor */
}

AA_TEST(constant_schedule_holds_lr_after_warmup) {
  aa_train_cfg_t t = sched(AA_SCHED_CONSTANT);
  CHECK_NEAR(aa_lr_at(&t, 4), 5e-4, 1e-9);
  for (int s = 10; s <= 100; s += 10)
    CHECK(aa_lr_at(&t, s) == 1e-3f);
}

/* A rendezvous names a shm segment: readable tag, unique nonce, and the
 * parser gives back what the maker wrote and refuses anything else. */
AA_TEST(rendezvous_is_unique_clean_and_parses_back) {
  char a[AA_RENDEZVOUS_MAX], b[AA_RENDEZVOUS_MAX];
  CHECK(aa_rendezvous_new(a, sizeof a, "shm", "job3 run/7") == 0);
  CHECK(aa_rendezvous_new(b, sizeof b, "shm", "job3 run/7") == 0);
  CHECK(strcmp(a, b) != 0);
  CHECK(strncmp(a, "shm:/aa-job3_run_7-", 19) == 0);
  const char *backend = NULL, *name = NULL;
  CHECK(aa_rendezvous_parse(a, &backend, &name) == 0);
  CHECK(backend && strcmp(backend, "shm") == 0);
  CHECK(name == a + 4);
  CHECK(aa_rendezvous_new(b, sizeof b, "nccl", "x") == 0);
  CHECK(aa_rendezvous_parse(b, &backend, &name) == 0 && strcmp(backend, "nccl") == 0);
  CHECK(aa_rendezvous_new(b, sizeof b, "tcp", "x") == AA_EINVAL);
  CHECK(aa_rendezvous_new(b, 12, "shm", "x") == AA_EINVAL);
  CHECK(aa_rendezvous_parse("shm:/a/b", &backend, &name) == AA_EINVAL);
  CHECK(aa_rendezvous_parse("shm:noslash", &backend, &name) == AA_EINVAL);
  CHECK(aa_rendezvous_new(b, sizeof b, "gloo", "x") == 0);
  CHECK(aa_rendezvous_parse(b, &backend, &name) == 0 && strcmp(backend, "gloo") == 0 && name == b + 5);
  CHECK(aa_rendezvous_parse("gloo:x", &backend, &name) == AA_EINVAL);
  CHECK(aa_rendezvous_parse("mpi:/x", &backend, &name) == AA_EINVAL);
  CHECK(aa_rendezvous_new(b, sizeof b, "nccl-hosts", "x") == 0);
  CHECK(aa_rendezvous_parse(b, &backend, &name) == 0 && strcmp(backend, "nccl-hosts") == 0 && name == b + 11);
  CHECK(aa_rendezvous_parse("nccl-hosts/x", &backend, &name) == AA_EINVAL);
  CHECK(aa_rendezvous_parse("nccl-:/x", &backend, &name) == AA_EINVAL);
  CHECK(aa_rendezvous_parse("nccl-hostsx:/x", &backend, &name) == AA_EINVAL);
}

/* --- the shared field reader (common/json.h), which the strategy file uses too --- */

typedef struct {
  int n;
  int64_t big;
  double d;
  float f;
  int flag, pick;
  char text[8];
  struct {
    int depth;
  } inner;
  int custom;
} reader_demo_t;

static const char *no_x(const char *s, size_t len) { return memchr(s, 'x', len) ? "must not contain x" : NULL; }

static int read_twice(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_integer(v)) return aa_json_fail_type(c, path, "an integer", v);
  *(int *)dst = 2 * (int)json_integer_value(v);
  return 0;
}

#define DEMO(m) .off = offsetof(reader_demo_t, m), .size = sizeof(((reader_demo_t *)0)->m)
static const char *const demo_names[] = {"a", "b", NULL};
static const aa_json_field_t demo_inner[] = {
    {.key = "depth", .kind = AA_JSON_INT, .imin = 0, .imax = 9, DEMO(inner.depth)},
};
static const aa_json_field_t demo_fields[] = {
    {.key = "n", .kind = AA_JSON_INT, .required = true, .imin = 1, .imax = INT_MAX, .idef = 5, DEMO(n)},
    {.key = "big", .kind = AA_JSON_INT, .imin = 0, .imax = LLONG_MAX, .idef = 7, DEMO(big)},
    {.key = "d", .kind = AA_JSON_NUMBER, .fmin = 0, .fmax = INFINITY, .fdef = 0.5, DEMO(d)},
    {.key = "f", .kind = AA_JSON_NUMBER, .fmin = 0, .fmax = 1, .fmax_open = true, DEMO(f)},
    {.key = "flag", .kind = AA_JSON_BOOL, DEMO(flag)},
    {.key = "pick", .kind = AA_JSON_ENUM, .names = demo_names, DEMO(pick)},
    {.key = "text", .kind = AA_JSON_STRING, .check = no_x, DEMO(text)},
    {.key = "inner", .kind = AA_JSON_OBJECT, .sub = demo_inner, .nsub = 1},
    {.key = "custom", .kind = AA_JSON_CUSTOM, .parse = read_twice, DEMO(custom)},
    {.key = "skip", .kind = AA_JSON_KEY},
};
#define NDEMO (sizeof demo_fields / sizeof demo_fields[0])

/* Reads json with the demo table; the message on failure. */
static int read_demo(const char *json, reader_demo_t *out) {
  json_error_t e;
  json_t *root = json_loads(json, 0, &e);
  if (!root) return AA_EPARSE;
  aa_json_ctx_t c = {.origin = "demo.json"};
  int rc = aa_json_read_fields(&c, root, "", demo_fields, NDEMO, out);
  json_decref(root);
  return rc;
}

AA_TEST(shared_field_reader_reads_every_kind) {
  reader_demo_t d;
  memset(&d, 0, sizeof d);
  aa_json_fields_default(demo_fields, NDEMO, &d);
  CHECK(d.n == 5 && d.big == 7 && d.d == 0.5 && d.f == 0.0f && d.pick == 0);
  CHECK_MSG(read_demo("{\"n\": 3, \"big\": 9007199254740993, \"f\": 0.25, \"flag\": true, \"pick\": \"b\", "
                      "\"text\": \"abc\", \"inner\": {\"depth\": 4}, \"custom\": 21, \"skip\": [1]}",
                      &d) == 0,
            "%s", aa_last_error());
  CHECK(d.n == 3 && d.big == 9007199254740993LL && d.d == 0.5 && d.f == 0.25f && d.flag == 1 && d.pick == 1);
  CHECK(!strcmp(d.text, "abc") && d.inner.depth == 4 && d.custom == 42);
  static const struct {
    const char *json, *message;
  } bad[] = {
      {"{\"n\": 1, \"zz\": 1}", "demo.json: zz: unknown key (allowed: n, big, d, f, flag, pick, text, inner, "
                                "custom, skip)"},
      {"{}", "demo.json: n: required field is missing"},
      {"{\"n\": 2.0}", "demo.json: n: must be an integer (got real number 2.0)"},
      {"{\"n\": 0}", "demo.json: n: must be >= 1 (got 0)"},
      {"{\"n\": 2147483648}", "demo.json: n: must be <= 2147483647 (got 2147483648)"},
      {"{\"n\": 1, \"f\": 0.99999999999}",
       "demo.json: f: must be in [0, 1) (got 0.99999999999, which rounds to 1 as a 32-bit float)"},
      {"{\"n\": 1, \"d\": -0.1}", "demo.json: d: must be >= 0 (got -0.1)"},
      {"{\"n\": 1, \"flag\": 1}", "demo.json: flag: must be true or false (got integer)"},
      {"{\"n\": 1, \"pick\": \"c\"}", "demo.json: pick: must be one of: a, b (got \"c\")"},
      {"{\"n\": 1, \"text\": \"axb\"}", "demo.json: text: must not contain x"},
      {"{\"n\": 1, \"text\": \"abcdefgh\"}", "demo.json: text: must be at most 7 bytes long"},
      {"{\"n\": 1, \"inner\": {\"depth\": 10}}", "demo.json: inner.depth: must be between 0 and 9 (got 10)"},
      {"{\"n\": 1, \"inner\": {\"deep\": 1}}", "demo.json: inner.deep: unknown key (allowed: depth)"},
      {"{\"n\": 1, \"inner\": 3}", "demo.json: inner: must be an object (got integer)"},
      {"{\"n\": 1, \"custom\": \"x\"}", "demo.json: custom: must be an integer (got string)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_MSG(read_demo(bad[i].json, &d) == AA_EINVAL, "%s", bad[i].json);
    CHECK_MSG(!strcmp(aa_last_error(), bad[i].message), "%s: \"%s\", want \"%s\"", bad[i].json, aa_last_error(),
              bad[i].message);
  }
  /* Without an origin, messages start at the path. */
  aa_json_ctx_t bare = {.origin = NULL};
  CHECK(aa_json_check_int(&bare, "model.n_layer", &demo_fields[0], 0) == AA_EINVAL);
  CHECK(!strcmp(aa_last_error(), "model.n_layer: must be >= 1 (got 0)"));
}

/* An MoE spec with data is one to train (aa_spec_require_data passes it),
 * to plan from a profile and to measure on CPUs and GPUs, Qwen-MoE's gated
 * shared experts included (the cuda backend computes them); a dense spec
 * passes both. */
AA_TEST(an_moe_spec_is_measured_on_cpus_and_gpus) {
  aa_model_spec_t s;
  int rc = parse_parts(&s, MOE_MODEL "{\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 32}", NULL, NULL, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK_MSG(aa_spec_require_data(&s, "moe.json") == 0, "%s", aa_last_error());
  CHECK_MSG(aa_spec_require_planned(&s, false, "moe.json") == 0, "%s", aa_last_error());
  CHECK_MSG(aa_spec_require_planned(&s, true, "moe.json") == 0, "%s", aa_last_error());
  rc = parse_parts(&s,
                   MOE_MODEL "{\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 32, \"shared_experts\": 1, "
                             "\"shared_expert_gate\": true, \"norm_topk_prob\": false}",
                   NULL, NULL, NULL);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK_MSG(aa_spec_require_planned(&s, false, "moe.json") == 0, "%s", aa_last_error());
  CHECK_MSG(aa_spec_require_planned(&s, true, "moe.json") == 0, "%s", aa_last_error());
  CHECK(parse_parts(&s, MODEL_OK ", \"family\": \"llama\"", NULL, NULL, NULL) == 0);
  CHECK(aa_spec_require_planned(&s, true, "x") == 0);
  /* A LoRA fine-tune: CPUs and profiles, not the cuda backend. */
  s.arch.lora.r = 4;
  CHECK(aa_spec_require_planned(&s, false, "x") == 0);
  CHECK(aa_spec_require_planned(&s, true, "x") == AA_EUNSUPPORTED);
  CHECK_MSG(strstr(aa_last_error(), "fine-tunes LoRA adapters (lora)") != NULL, "%s", aa_last_error());
}

/* The top-level "lora" object (issue 36): r required, alpha defaulting to
 * r, targets of the model's family only, init "default"; the hash moves
 * with it (a fine-tune is its own model to plan) and stays put without
 * it; to_json round-trips it; training needs init_weights, planning not;
 * the adapters' element counts follow the targets' shapes. */
AA_TEST(lora_fields_rules_hash_round_trip_and_counts) {
  aa_model_spec_t s, back, base;
  char h0[17], h1[17];
  char *text = NULL;
  CHECK(parse_parts(&base, MODEL_OK ", \"family\": \"llama\", \"n_kv_head\": 2", NULL, NULL, NULL) == 0);
  CHECK(base.arch.lora.r == 0);
  CHECK_MSG(parse_parts(&s, MODEL_OK ", \"family\": \"llama\", \"n_kv_head\": 2", NULL, NULL,
                        "\"lora\": {\"r\": 4, \"targets\": [\"q\", \"v\", \"down\"]}, "
                        "\"init_weights\": \"base.ckpt\"") == 0,
            "%s", aa_last_error());
  CHECK(s.arch.lora.r == 4 && s.arch.lora.alpha == 4.0f && s.arch.lora.init == 0);
  CHECK(s.arch.lora.targets == ((1 << AA_LORA_Q) | (1 << AA_LORA_V) | (1 << AA_LORA_DOWN)));
  CHECK(aa_lora_n_targets(&s.arch) == 3);
  /* C 128, F 512, KV 2 x 32 = 64: q r(C + C), v r(C + KV), down r(F + C). */
  CHECK(aa_lora_block_numel(&s.arch, 1) == 4ull * (256 + 192 + 640));
  /* tp 2: q and v (column-parallel) split their B rows, down (row-parallel) its A columns. */
  CHECK(aa_lora_block_numel(&s.arch, 2) == 4ull * (128 + 64 + 128 + 32 + 256 + 128));
  aa_arch_hash(&base.arch, h0);
  aa_arch_hash(&s.arch, h1);
  CHECK(strcmp(h0, h1) != 0);
  aa_arch_t lifted = s.arch;
  memset(&lifted.lora, 0, sizeof lifted.lora);
  aa_arch_hash(&lifted, h1);
  CHECK(strcmp(h0, h1) == 0);
  CHECK(aa_arch_validate(&s.arch) == 0);
  CHECK(aa_spec_require_data(&s, "train") == 0);
  CHECK(aa_spec_to_json(&s, &text) == 0 && text &&
        strstr(text, "\"lora\":{\"targets\":[\"q\",\"v\",\"down\"]"));
  CHECK_MSG(text && aa_spec_parse(&back, text, "/specs", "model.json") == 0, "%s", aa_last_error());
  CHECK(!memcmp(&back.arch.lora, &s.arch.lora, sizeof s.arch.lora));
  free(text);
  /* Without the base, only training refuses it. */
  CHECK(parse_parts(&s, NULL, NULL, NULL,
                    "\"lora\": {\"r\": 8, \"alpha\": 16, \"targets\": [\"qkv\", \"fc\"]}") == 0);
  CHECK(s.arch.lora.alpha == 16.0f);
  CHECK(aa_spec_require_data(&s, "train") == AA_EINVAL &&
        strstr(aa_last_error(), "init_weights is required"));
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 8, \"targets\": [\"q\"]}", AA_EINVAL,
                     "lora.targets: \"q\" is not a gpt2 layer (gpt2: qkv, proj, fc, fcproj)");
  EXPECT_PARTS_ERROR(MODEL_OK ", \"family\": \"llama\"", NULL, NULL,
                     "\"lora\": {\"r\": 8, \"targets\": [\"fc\"]}", AA_EINVAL,
                     "lora.targets: \"fc\" is not a llama layer");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 0, \"targets\": [\"qkv\"]}", AA_EINVAL, "lora.r");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"targets\": [\"qkv\"]}", AA_EINVAL, "lora.r");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2}", AA_EINVAL, "lora.targets");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2, \"targets\": []}", AA_EINVAL, "lora.targets");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2, \"targets\": [\"fc\", \"fc\"]}", AA_EINVAL,
                     "lora.targets[1]: names \"fc\" twice");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2, \"targets\": [\"mlp\"]}", AA_EINVAL,
                     "lora.targets[0]");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2, \"alpha\": 0, \"targets\": [\"fc\"]}", AA_EINVAL,
                     "lora.alpha");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2, \"init\": \"pissa\", \"targets\": [\"fc\"]}",
                     AA_EINVAL, "lora.init");
  EXPECT_PARTS_ERROR(NULL, NULL, NULL, "\"lora\": {\"r\": 2, \"dropout\": 0.1, \"targets\": [\"fc\"]}",
                     AA_EINVAL, "dropout");
  EXPECT_PARTS_ERROR(MOE_MODEL "{\"experts\": 4, \"top_k\": 1, \"d_ff_expert\": 8}", NULL, NULL,
                     "\"lora\": {\"r\": 2, \"targets\": [\"q\"]}", AA_EINVAL,
                     "lora: adapters on mixture-of-experts models are not supported yet");
}

int main(void) {
  RUN(full_spec_parses_every_field_as_written);
  RUN(minimal_spec_gets_every_default);
  RUN(integer_json_values_are_accepted_for_float_fields);
  RUN(relative_paths_resolve_against_the_spec_directory);
  RUN(absolute_paths_are_kept);
  RUN(parse_without_base_dir_keeps_paths_relative_and_names_model);
  RUN(name_defaults_to_origin_stem_and_is_bounded);
  RUN(to_json_round_trips_every_field_and_makes_paths_absolute);
  RUN(syntax_error_reports_file_line_and_column);
  RUN(duplicate_key_is_a_syntax_error_naming_the_key);
  RUN(empty_file_is_rejected_clearly);
  RUN(non_object_top_level_is_rejected);
  RUN(missing_file_is_enoent_naming_the_path);
  RUN(directory_is_an_io_error);
  RUN(file_over_one_mib_is_rejected_before_parsing);
  RUN(nul_byte_in_file_is_rejected);
  RUN(missing_required_field_is_named);
  RUN(wrong_type_names_the_expected_type);
  RUN(out_of_range_values_are_rejected_with_the_range);
  RUN(values_beyond_c_int_or_float_are_rejected_not_wrapped);
  RUN(n_head_must_divide_d_model);
  RUN(min_lr_above_lr_is_rejected);
  RUN(warmup_longer_than_steps_is_rejected);
  RUN(unknown_key_is_named_with_the_allowed_keys);
  RUN(bad_enum_value_lists_the_choices);
  RUN(overlong_path_is_rejected);
  RUN(arch_validate_checks_family_ranges_and_divisibility);
  RUN(hash_is_fnv1a_of_the_canonical_text);
  RUN(hash_ignores_key_order_spacing_and_training_settings);
  RUN(hash_changes_with_every_architecture_field);
  RUN(a_spec_without_data_parses_and_only_training_refuses_it);
  RUN(long_sequences_parse_for_planning_and_only_the_engine_refuses_them);
  RUN(leaving_the_data_out_keeps_every_stored_hash);
  RUN(param_count_matches_gpt2_124m);
  RUN(llama_family_fields_rules_count_and_hash);
  RUN(lr_warms_up_linearly_to_the_peak);
  RUN(cosine_decays_monotonically_to_min_lr);
  RUN(constant_schedule_holds_lr_after_warmup);
  RUN(rendezvous_is_unique_clean_and_parses_back);
  RUN(shared_field_reader_reads_every_kind);
  RUN(moe_fields_defaults_rules_counts_and_hash);
  RUN(qwen_options_rules_counts_hash_and_round_trip);
  RUN(an_moe_spec_is_measured_on_cpus_and_gpus);
  RUN(lora_fields_rules_hash_round_trip_and_counts);
  return aa_test_summary();
}
