/* Strategies (strategies/): defaults, the v1 file (parse, validate, save,
 * round trip), the canonical key, the mesh's axis order and rank order,
 * ATorch's list form (every option honoured or refused by name), and the
 * rules of aa_strategy_resolve against a model spec. Example files live in
 * examples/strategies/ and are found through AA_SOURCE_DIR. */
#include "common/aa.h"
#include "common/spec.h"
#include "strategies/strategy.h"
#include "tests/aa_test.h"

#include <fcntl.h>
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

/* Path of an example strategy; valid until the next call. */
static const char *example(const char *name) {
  static char buf[AA_PATH_MAX];
  snprintf(buf, sizeof buf, "%s/examples/strategies/%s", src_dir(), name);
  return buf;
}

#define V1 "\"format\": \"autoaccel-strategy\", \"version\": 1"

static int same(const aa_strategy_t *a, const aa_strategy_t *b) {
  if (a->nranks != b->nranks || (a->nranks > 0 && a->nranks <= AA_STRATEGY_WORLD_MAX &&
                                 memcmp(a->rank_order, b->rank_order, sizeof a->rank_order[0] * a->nranks)))
    return 0;
  return !memcmp(a->degree, b->degree, sizeof a->degree) && a->sp == b->sp && a->ep == b->ep &&
         a->etp == b->etp && !memcmp(a->order, b->order, sizeof a->order) && a->zero == b->zero &&
         a->amp == b->amp && a->ckpt == b->ckpt && a->ckpt_layers == b->ckpt_layers &&
         a->micro_batch == b->micro_batch && a->schedule == b->schedule && a->vpp == b->vpp &&
         a->partition == b->partition && a->n_bounds == b->n_bounds &&
         (!a->n_bounds || !memcmp(a->bounds, b->bounds, sizeof a->bounds[0] * (size_t)a->n_bounds)) &&
         a->loss_scale.loss_scale == b->loss_scale.loss_scale &&
         a->loss_scale.initial_scale_power == b->loss_scale.initial_scale_power &&
         a->loss_scale.window == b->loss_scale.window &&
         a->loss_scale.hysteresis == b->loss_scale.hysteresis &&
         a->loss_scale.min_scale == b->loss_scale.min_scale && a->skip_if_nonfinite == b->skip_if_nonfinite &&
         !strcmp(a->model_hash, b->model_hash) && !strcmp(a->model_name, b->model_name) &&
         !strcmp(a->hardware, b->hardware) && a->tokens_per_s == b->tokens_per_s &&
         a->peak_bytes == b->peak_bytes && !strcmp(a->date, b->date);
}

static const char *key_of(const aa_strategy_t *s) {
  static char k[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(s, k);
  return k;
}

/* Checks that rc is `code`, that *out was left untouched, and that the
 * last-error message holds every needle (a NULL-terminated list). */
static void check_error(int line, int rc, int code, const aa_strategy_t *s, const char *const *needles) {
  static unsigned char poison[sizeof(aa_strategy_t)];
  memset(poison, 0xAB, sizeof poison);
  CHECK_MSG(rc == code, "line %d: rc %d, want %d (%s)", line, rc, code, aa_last_error());
  if (s) CHECK_MSG(memcmp(s, poison, sizeof poison) == 0, "line %d: *out written on failure", line);
  for (; *needles; needles++)
    CHECK_MSG(strstr(aa_last_error(), *needles), "line %d: message \"%s\" lacks \"%s\"", line,
              aa_last_error(), *needles);
}

static aa_strategy_t *poisoned(void) {
  static aa_strategy_t s;
  memset(&s, 0xAB, sizeof s);
  return &s;
}

/* EXPECT_PARSE_ERROR(json, code, needle...): parses json as "s.json". */
#define EXPECT_PARSE_ERROR(json, code, ...)                                                                  \
  do {                                                                                                       \
    aa_strategy_t *s_ = poisoned();                                                                          \
    int rc_ = aa_strategy_parse(s_, json, "s.json");                                                         \
    check_error(__LINE__, rc_, code, s_, (const char *const[]){__VA_ARGS__, NULL});                          \
  } while (0)

static int parse_ok(aa_strategy_t *s, const char *json) {
  int rc = aa_strategy_parse(s, json, "s.json");
  CHECK_MSG(rc == 0, "%s: %s", json, aa_last_error());
  return rc;
}

/* Checks that json parses and that its strategy's key is want. */
static void expect_key(const char *json, const char *want) {
  aa_strategy_t s;
  if (parse_ok(&s, json)) return;
  CHECK_MSG(!strcmp(key_of(&s), want), "%s: key %s, want %s", json, key_of(&s), want);
}

/* The model of examples/tiny: 4 layers, 4 heads, global_batch 16. */
static aa_model_spec_t tiny_spec(void) {
  aa_model_spec_t spec;
  int rc =
      aa_spec_parse(&spec,
                    "{\"name\": \"tiny\", \"model\": {\"n_layer\": 4, \"n_head\": 4, \"d_model\": 128, "
                    "\"seq_len\": 64, \"vocab_size\": 256}, \"train\": {\"global_batch\": 16, \"steps\": 10, "
                    "\"lr\": 0.003}, \"data\": {\"train\": \"train.bin\"}}",
                    NULL, "tiny.json");
  if (rc) {
    fprintf(stderr, "tiny spec: %s\n", aa_last_error());
    abort();
  }
  return spec;
}

/* --- defaults, parsing, key ---------------------------------------------- */

AA_TEST(default_is_fp32_single_rank_whole_batch) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK(s.degree[AA_AXIS_DATA] == 1 && s.degree[AA_AXIS_TENSOR] == 1 && s.degree[AA_AXIS_PIPELINE] == 1 &&
        s.zero == 0);
  CHECK(s.amp == AA_F32 && s.ckpt == AA_CKPT_NONE && s.ckpt_layers == 0);
  CHECK(s.micro_batch == 0 && s.schedule == AA_SCHEDULE_1F1B && !s.skip_if_nonfinite);
  CHECK(s.loss_scale.loss_scale == 0.0f && s.loss_scale.initial_scale_power == 16);
  CHECK(s.loss_scale.window == 1000 && s.loss_scale.hysteresis == 2 && s.loss_scale.min_scale == 1.0f);
  CHECK(!s.model_hash[0] && !s.model_name[0] && !s.hardware[0] && !s.date[0]);
  CHECK(s.tokens_per_s == 0 && s.peak_bytes == 0);
  CHECK(!strcmp(key_of(&s), "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"));
  CHECK(!strcmp(aa_ckpt_mode_name(AA_CKPT_SELECTIVE), "selective"));
}

AA_TEST(format_and_version_alone_give_the_defaults) {
  aa_strategy_t s, d;
  aa_strategy_default(&d);
  if (parse_ok(&s, "{" V1 "}")) return;
  CHECK(same(&s, &d));
}

AA_TEST(every_field_parses_as_written) {
  aa_strategy_t s;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"tensor\": 4, \"pipeline\": 2}, \"zero\": 2,"
                   " \"amp\": \"fp16\", \"loss_scaling\": {\"loss_scale\": 0, \"initial_scale_power\": 12,"
                   " \"loss_scale_window\": 500, \"hysteresis\": 3, \"min_loss_scale\": 0.25},"
                   " \"skip_if_nonfinite\": true, \"checkpoint\": \"full\", \"checkpoint_layers\": 2,"
                   " \"micro_batch\": 4, \"schedule\": \"gpipe\","
                   " \"key\": \"dp2.tp4.pp2.z2.fp16.ckpt-full2.mb4.gpipe\","
                   " \"provenance\": {\"model\": \"tiny\", \"model_hash\": \"0123456789abcdef\","
                   " \"hardware\": \"cpu:2x test\", \"tokens_per_s\": 1234.5, \"peak_bytes\": 123456,"
                   " \"date\": \"2026-11-22T10:00:00Z\"}}"))
    return;
  CHECK(s.degree[AA_AXIS_DATA] == 2 && s.degree[AA_AXIS_TENSOR] == 4 && s.degree[AA_AXIS_PIPELINE] == 2 &&
        s.zero == 2 && s.amp == AA_F16);
  CHECK(s.loss_scale.loss_scale == 0 && s.loss_scale.initial_scale_power == 12 && s.loss_scale.window == 500);
  CHECK(s.loss_scale.hysteresis == 3 && s.loss_scale.min_scale == 0.25f && s.skip_if_nonfinite == 1);
  CHECK(s.ckpt == AA_CKPT_FULL && s.ckpt_layers == 2 && s.micro_batch == 4 &&
        s.schedule == AA_SCHEDULE_GPIPE);
  CHECK(!strcmp(s.model_name, "tiny") && !strcmp(s.model_hash, "0123456789abcdef"));
  CHECK(!strcmp(s.hardware, "cpu:2x test") && !strcmp(s.date, "2026-11-22T10:00:00Z"));
  CHECK(s.tokens_per_s == 1234.5 && s.peak_bytes == 123456);
}

AA_TEST(key_follows_the_grammar) {
  static const struct {
    const char *json, *key;
  } cases[] = {
      {"\"amp\": \"bf16\", \"checkpoint\": \"full\", \"micro_batch\": 4",
       "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4"},
      {"\"checkpoint\": \"selective\", \"micro_batch\": 16", "dp1.tp1.pp1.z0.fp32.ckpt-sel.mb16"},
      {"\"checkpoint\": \"full\", \"checkpoint_layers\": 2", "dp1.tp1.pp1.z0.fp32.ckpt-full2.mb0"},
      {"\"parallel\": {\"data\": 8}, \"zero\": 3, \"amp\": \"fp16\"", "dp8.tp1.pp1.z3.fp16.ckpt-none.mb0"},
      {"\"parallel\": {\"pipeline\": 2}, \"micro_batch\": 1", "dp1.tp1.pp2.z0.fp32.ckpt-none.mb1.1f1b"},
      {"\"parallel\": {\"tensor\": 2, \"pipeline\": 4}, \"schedule\": \"gpipe\"",
       "dp1.tp2.pp4.z0.fp32.ckpt-none.mb0.gpipe"},
      /* Sequence parallelism shows after the degrees. */
      {"\"parallel\": {\"data\": 2, \"tensor\": 2, \"sequence_parallel\": true}, \"zero\": 1, "
       "\"micro_batch\": 4",
       "dp2.tp2.pp1.sp.z1.fp32.ckpt-none.mb4"},
      {"\"parallel\": {\"tensor\": 4, \"sequence_parallel\": false}", "dp1.tp4.pp1.z0.fp32.ckpt-none.mb0"},
      /* A pipeline shows its schedule, the virtual stages of an interleaved
       * one, and a cut that is not uniform. */
      {"\"parallel\": {\"pipeline\": 2}, \"schedule\": \"interleaved\", \"virtual_stages\": 2",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.interleaved-v2"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": \"parameters\"",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b.part-params"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": \"uniform\"",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
      {"\"parallel\": {\"pipeline\": 3}, \"schedule\": \"gpipe\", \"partition\": [0, 3, 6, 8]",
       "dp1.tp1.pp3.z0.fp32.ckpt-none.mb0.gpipe.part-0-3-6-8"},
      /* The schedule means nothing without a pipeline, so it is not in the key. */
      {"\"schedule\": \"gpipe\"", "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      /* Loss-scaling settings and provenance are not part of the key. */
      {"\"loss_scaling\": {\"loss_scale\": 1024}, \"provenance\": {\"model\": \"x\"}",
       "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char json[512];
    snprintf(json, sizeof json, "{" V1 ", %s}", cases[i].json);
    expect_key(json, cases[i].key);
  }
}

/* A custom cut too long to spell out shows as the FNV-1a 64 of its
 * boundaries written "0,1,...", which can be recomputed by hand. */
AA_TEST(key_hashes_a_long_custom_cut) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_PIPELINE] = 12;
  s.partition = AA_PARTITION_CUSTOM;
  char text[64];
  size_t o = 0;
  int b[13];
  for (int k = 0; k <= 12; k++) {
    b[k] = k;
    o += (size_t)snprintf(text + o, sizeof text - o, "%s%d", k ? "," : "", k);
  }
  CHECK(aa_strategy_set_bounds(&s, b, 13) == 0);
  char want[AA_STRATEGY_KEY_MAX];
  snprintf(want, sizeof want, "dp1.tp1.pp12.z0.fp32.ckpt-none.mb0.1f1b.part-%016llx",
           (unsigned long long)aa_fnv1a(AA_FNV_INIT, text, o));
  CHECK_MSG(!strcmp(key_of(&s), want), "%s, want %s", key_of(&s), want);
  /* Eight stages still fit: "0-1-2-3-4-5-6-7-8". */
  s.degree[AA_AXIS_PIPELINE] = 8;
  CHECK(aa_strategy_set_bounds(&s, b, 9) == 0);
  CHECK(!strcmp(key_of(&s), "dp1.tp1.pp8.z0.fp32.ckpt-none.mb0.1f1b.part-0-1-2-3-4-5-6-7-8"));
}

/* Every part of the key at its longest passes AA_STRATEGY_KEY_MAX; the
 * parts after the micro-batch then become one hash, so the key is never
 * cut, and the head still reads as the degrees and knobs. A realistic
 * interleaved pipeline on a reordered mesh fits whole. */
AA_TEST(longest_key_fits) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = s.degree[AA_AXIS_TENSOR] = s.degree[AA_AXIS_PIPELINE] = 65536;
  s.sp = 1;
  s.zero = 3;
  s.ckpt = AA_CKPT_FULL;
  s.ckpt_layers = s.micro_batch = 2147483647;
  s.schedule = AA_SCHEDULE_INTERLEAVED;
  s.vpp = 16;
  s.partition = AA_PARTITION_CUSTOM;
  int b[AA_STRATEGY_STAGES_MAX + 1];
  for (int k = 0; k <= AA_STRATEGY_STAGES_MAX; k++)
    b[k] = k;
  CHECK(aa_strategy_set_bounds(&s, b, AA_STRATEGY_STAGES_MAX + 1) == 0);
  aa_axis_order_parse(s.order, "ptd");
  CHECK(aa_strategy_set_rank_order(&s, (const uint16_t[]){1, 0}, 2) == 0);
  char a[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(&s, a);
  const char *head = "dp65536.tp65536.pp65536.sp.z3.fp32.ckpt-full2147483647.mb2147483647.x-";
  CHECK_MSG(strlen(a) == strlen(head) + 16 && !strncmp(a, head, strlen(head)), "%s", a);
  s.vpp = 15;
  CHECK(strcmp(key_of(&s), a) != 0); /* another tail, another hash */

  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 64;
  s.degree[AA_AXIS_TENSOR] = 8;
  s.degree[AA_AXIS_PIPELINE] = 8;
  s.sp = 1;
  s.zero = 1;
  s.amp = AA_BF16;
  s.ckpt = AA_CKPT_FULL;
  s.ckpt_layers = 48;
  s.micro_batch = 1024;
  s.schedule = AA_SCHEDULE_INTERLEAVED;
  s.vpp = 12;
  s.partition = AA_PARTITION_PARAMETERS;
  aa_axis_order_parse(s.order, "tpd");
  CHECK_MSG(
      !strcmp(key_of(&s), "dp64.tp8.pp8.sp.z1.bf16.ckpt-full48.mb1024.interleaved-v12.part-params.order-tpd"),
      "%s", key_of(&s));
}

AA_TEST(key_field_must_match_the_fields) {
  aa_strategy_t s;
  CHECK(parse_ok(&s, "{" V1 ", \"micro_batch\": 4, \"key\": \"dp1.tp1.pp1.z0.fp32.ckpt-none.mb4\"}") == 0);
  EXPECT_PARSE_ERROR("{" V1 ", \"micro_batch\": 4, \"key\": \"dp1.tp1.pp1.z0.bf16.ckpt-none.mb4\"}",
                     AA_EINVAL,
                     "s.json: key: \"dp1.tp1.pp1.z0.bf16.ckpt-none.mb4\" does not match the fields",
                     "which give \"dp1.tp1.pp1.z0.fp32.ckpt-none.mb4\"");
  EXPECT_PARSE_ERROR("{" V1 ", \"key\": 7}", AA_EINVAL, "key: must be a string (got integer)");
}

/* --- validation ----------------------------------------------------------- */

AA_TEST(every_field_rule_fires) {
  static const struct {
    const char *members, *needle;
  } cases[] = {
      {"\"parallel\": {\"data\": 0}", "parallel.data: must be between 1 and 65536 (got 0)"},
      {"\"parallel\": {\"tensor\": 65537}", "parallel.tensor: must be between 1 and 65536 (got 65537)"},
      {"\"parallel\": {\"pipeline\": 2.0}", "parallel.pipeline: must be an integer (got real number 2.0)"},
      {"\"parallel\": 2", "parallel: must be an object (got integer)"},
      {"\"zero\": 4", "zero: must be between 0 and 3 (got 4)"},
      {"\"zero\": -1", "zero: must be between 0 and 3 (got -1)"},
      {"\"amp\": \"fp8\"", "amp: must be one of: fp32, bf16, fp16 (got \"fp8\")"},
      {"\"amp\": null", "amp: must be a string (got null)"},
      {"\"checkpoint\": \"some\"", "checkpoint: must be one of: none, selective, full (got \"some\")"},
      {"\"checkpoint_layers\": -1", "checkpoint_layers: must be >= 0 (got -1)"},
      {"\"checkpoint\": \"selective\", \"checkpoint_layers\": 2",
       "checkpoint_layers: only applies to checkpoint \"full\" (got 2 with checkpoint \"selective\""},
      {"\"checkpoint_layers\": 1", "only applies to checkpoint \"full\" (got 1 with checkpoint \"none\""},
      {"\"micro_batch\": -4", "micro_batch: must be >= 0 (got -4)"},
      {"\"micro_batch\": 4294967296", "micro_batch: must be <= 2147483647 (got 4294967296)"},
      {"\"schedule\": \"fast\"", "schedule: must be one of: 1f1b, gpipe, interleaved (got \"fast\")"},
      {"\"schedule\": 1", "schedule: must be a string (got integer)"},
      {"\"virtual_stages\": 0", "virtual_stages: must be between 1 and 16 (got 0)"},
      {"\"virtual_stages\": 17", "virtual_stages: must be between 1 and 16 (got 17)"},
      {"\"virtual_stages\": 2, \"schedule\": \"interleaved\"",
       "virtual_stages: 2 needs pipeline parallelism (got pipeline 1)"},
      {"\"parallel\": {\"pipeline\": 2}, \"virtual_stages\": 2",
       "virtual_stages: 2 needs the interleaved schedule (schedule is \"1f1b\")"},
      {"\"parallel\": {\"pipeline\": 2}, \"schedule\": \"interleaved\"",
       "schedule: \"interleaved\" needs \"virtual_stages\" >= 2"},
      {"\"partition\": \"even\"", "partition: must be \"uniform\" (Merak's \"uniform_floor\"), "
                                  "\"parameters\" or a list of block boundaries"},
      {"\"partition\": 3",
       "partition: must be \"uniform\", \"parameters\" or a list of block boundaries (got integer)"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": [0, 4]",
       "partition: lists 2 boundaries; pipeline 2 x virtual_stages 1 = 2 stages need 3 (0, ..., n_layer)"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": [1, 2, 4]",
       "partition: must start at block 0 (got 1)"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": [0, 2, 2]",
       "partition: boundaries must increase (stage 1 would hold blocks [2, 2)"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": [0, -1, 4]",
       "partition: boundary 1 must be a block index between 0 and 2147483647 (got -1)"},
      {"\"parallel\": {\"pipeline\": 2}, \"partition\": [0, 1.5, 4]",
       "partition: boundary 1 must be an integer (got real"},
      {"\"partition\": [0]", "partition: must list between 2 and 257 block boundaries (got 1)"},
      {"\"partition_method\": \"uniform\", \"partition\": \"uniform\"",
       "partition_method: gives partition again (as \"partition\"); give one of them"},
      {"\"partition_method\": \"uniform\", \"custom_partition\": [0, 4]",
       "custom_partition: gives partition again (as \"partition_method\"); give one of them"},
      {"\"virtual_stages\": 2, \"virtual_pipeline_model_parallel_size\": 2",
       "virtual_pipeline_model_parallel_size: gives virtual_stages again (as \"virtual_stages\")"},
      {"\"skip_if_nonfinite\": 1", "skip_if_nonfinite: must be true or false (got integer)"},
      {"\"loss_scaling\": {\"loss_scale\": -1}", "loss_scaling.loss_scale: must be >= 0 (got -1)"},
      {"\"loss_scaling\": {\"loss_scale\": 1e39}", "loss_scaling.loss_scale: out of range of a 32-bit float"},
      {"\"loss_scaling\": {\"initial_scale_power\": 65}",
       "initial_scale_power: must be between 0 and 64 (got 65)"},
      {"\"loss_scaling\": {\"loss_scale_window\": 0}",
       "loss_scaling.loss_scale_window: must be >= 1 (got 0)"},
      {"\"loss_scaling\": {\"hysteresis\": 0}", "loss_scaling.hysteresis: must be >= 1 (got 0)"},
      {"\"loss_scaling\": {\"min_loss_scale\": 0}", "loss_scaling.min_loss_scale: must be > 0 (got 0)"},
      {"\"loss_scaling\": {\"min_loss_scale\": 1e-50}", "which rounds to 0 as a 32-bit float"},
      {"\"loss_scaling\": {\"min_loss_scale\": \"1\"}", "min_loss_scale: must be a number (got string)"},
      {"\"provenance\": {\"model_hash\": \"0123456789ABCDEF\"}",
       "provenance.model_hash: must be 16 lowercase hex"},
      {"\"provenance\": {\"model_hash\": \"0123\"}", "provenance.model_hash: must be 16 lowercase hex"},
      {"\"provenance\": {\"model_hash\": \"0123456789abcdef0\"}",
       "provenance.model_hash: must be 16 lowercase hex"},
      {"\"provenance\": {\"model\": \"\"}",
       "provenance.model: must not be empty (leave the field out when unknown)"},
      {"\"provenance\": {\"hardware\": \"a\\u0001b\"}",
       "provenance.hardware: must not contain control characters"},
      {"\"provenance\": {\"tokens_per_s\": -1}", "provenance.tokens_per_s: must be >= 0"},
      {"\"provenance\": {\"date\": \"yesterday\"}",
       "provenance.date: must be a UTC time written YYYY-MM-DDTHH:MM:SSZ"},
      {"\"provenance\": {\"date\": \"2026-11-22 10:00:00\"}", "provenance.date: must be a UTC time"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char json[512];
    snprintf(json, sizeof json, "{" V1 ", %s}", cases[i].members);
    aa_strategy_t *s = poisoned();
    int rc = aa_strategy_parse(s, json, "s.json");
    CHECK_MSG(rc == AA_EINVAL, "%s: rc %d (%s)", cases[i].members, rc, aa_last_error());
    CHECK_MSG(strstr(aa_last_error(), "s.json: ") == aa_last_error(), "no origin: %s", aa_last_error());
    CHECK_MSG(strstr(aa_last_error(), cases[i].needle), "%s: message \"%s\" lacks \"%s\"", cases[i].members,
              aa_last_error(), cases[i].needle);
  }
}

AA_TEST(long_provenance_text_is_refused) {
  char json[1024], name[200];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  snprintf(json, sizeof json, "{" V1 ", \"provenance\": {\"hardware\": \"%s\"}}", name);
  EXPECT_PARSE_ERROR(json, AA_EINVAL, "provenance.hardware: must be at most 127 bytes long");
}

AA_TEST(unknown_keys_are_named_with_the_allowed_ones) {
  EXPECT_PARSE_ERROR(
      "{" V1 ", \"zero_level\": 1}", AA_EINVAL,
      "s.json: zero_level: unknown key (allowed: format, "
      "version, parallel, zero, amp, loss_scaling, skip_if_nonfinite, checkpoint, checkpoint_layers, "
      "micro_batch, schedule, virtual_stages, partition, key, provenance)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"dp_size\": 2}}", AA_EINVAL,
                     "s.json: parallel.dp_size: unknown key (allowed: data, tensor, pipeline, context, "
                     "sequence_parallel, expert, expert_tensor, order, "
                     "rank_order)");
  EXPECT_PARSE_ERROR("{" V1 ", \"loss_scaling\": {\"window\": 2}}", AA_EINVAL,
                     "loss_scaling.window: unknown key", "loss_scale_window");
  EXPECT_PARSE_ERROR("{" V1 ", \"provenance\": {\"host\": \"a\"}}", AA_EINVAL,
                     "provenance.host: unknown key (allowed: model, model_hash, hardware, tokens_per_s, "
                     "peak_bytes, date)");
  /* A hostile key is cut and escaped in the message. */
  EXPECT_PARSE_ERROR("{" V1 ", \"a\\nb\": 1}", AA_EINVAL, "a\\x0ab: unknown key");
}

AA_TEST(format_and_version_are_checked_first) {
  EXPECT_PARSE_ERROR("{\"version\": 1}", AA_EINVAL, "s.json: format: required field is missing");
  EXPECT_PARSE_ERROR("{\"format\": \"autoaccel-model\", \"version\": 1}", AA_EINVAL,
                     "format: must be \"autoaccel-strategy\" (got \"autoaccel-model\")");
  EXPECT_PARSE_ERROR("{\"format\": \"autoaccel-strategy\"}", AA_EINVAL, "version: required field is missing");
  EXPECT_PARSE_ERROR("{\"format\": \"autoaccel-strategy\", \"version\": \"1\"}", AA_EINVAL,
                     "version: must be an integer (got string)");
  EXPECT_PARSE_ERROR("{\"format\": \"autoaccel-strategy\", \"version\": 0}", AA_EINVAL,
                     "version: must be >= 1");
  /* A newer file is reported as newer, not as its unknown keys. */
  EXPECT_PARSE_ERROR("{\"format\": \"autoaccel-strategy\", \"version\": 2, \"overlap\": true}",
                     AA_EUNSUPPORTED, "strategy format version 2 is newer than this autoaccel (1)");
}

AA_TEST(syntax_errors_name_line_and_column) {
  EXPECT_PARSE_ERROR("{\n  \"format\": \"autoaccel-strategy\",\n  \"version\": @\n}", AA_EPARSE,
                     "s.json:3:14: invalid token near '@'");
  EXPECT_PARSE_ERROR("{" V1 ", \"zero\": 1, \"zero\": 2}", AA_EPARSE, "s.json:1:", "duplicate object key");
  EXPECT_PARSE_ERROR("", AA_EPARSE, "s.json: empty");
  EXPECT_PARSE_ERROR("  \n", AA_EPARSE, "s.json: empty");
  EXPECT_PARSE_ERROR("\"dp1\"", AA_EINVAL,
                     "top level must be a JSON object (v1 strategy) or array (ATorch list)");
}

/* --- files and round trip ---------------------------------------------------- */

static aa_strategy_t odd_strategy(void) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 2;
  s.zero = 1;
  s.amp = AA_F16;
  s.ckpt = AA_CKPT_FULL;
  s.ckpt_layers = 3;
  s.micro_batch = 2;
  s.skip_if_nonfinite = 1;
  s.loss_scale.loss_scale = 0.1f; /* not exact in binary: must still come back bit for bit */
  s.loss_scale.min_scale = 1e-3f;
  s.loss_scale.initial_scale_power = 0;
  snprintf(s.model_name, sizeof s.model_name, "tiny \"quoted\" name");
  snprintf(s.model_hash, sizeof s.model_hash, "0123456789abcdef");
  snprintf(s.hardware, sizeof s.hardware, "cpu:2x Intel(R) Xeon(R) \xc3\xa9");
  s.tokens_per_s = 12345.678901234567;
  s.peak_bytes = 123456789.0;
  snprintf(s.date, sizeof s.date, "2026-11-22T10:00:00Z");
  return s;
}

AA_TEST(to_json_round_trips_every_field_in_fixed_order) {
  aa_strategy_t s = odd_strategy(), back;
  char *text = NULL;
  CHECK_MSG(aa_strategy_to_json(&s, &text) == 0, "%s", aa_last_error());
  if (!text) return;
  if (parse_ok(&back, text) == 0) CHECK(same(&s, &back));
  static const char *const order[] = {"\"format\"",
                                      "\"version\"",
                                      "\"parallel\"",
                                      "\"zero\"",
                                      "\"amp\"",
                                      "\"loss_scaling\"",
                                      "\"skip_if_nonfinite\"",
                                      "\"checkpoint\"",
                                      "\"checkpoint_layers\"",
                                      "\"micro_batch\"",
                                      "\"schedule\"",
                                      "\"key\"",
                                      "\"provenance\""};
  const char *at = text;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const char *p = strstr(at, order[i]);
    CHECK_MSG(p != NULL, "%s missing or out of order in\n%s", order[i], text);
    if (p) at = p;
  }
  CHECK(strstr(text, "\"key\": \"dp2.tp1.pp1.z1.fp16.ckpt-full3.mb2\""));
  CHECK(strstr(text, "\"loss_scale_window\": 1000,")); /* integral values are written as integers */
  CHECK(text[strlen(text) - 1] == '\n');
  free(text);

  /* Unknown provenance is left out, and so is an empty section. */
  aa_strategy_default(&s);
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  if (text) CHECK(!strstr(text, "provenance"));
  free(text);
}

AA_TEST(save_then_load_gives_the_same_strategy) {
  char dir[] = "/tmp/aa_strategy_XXXXXX", path[128];
  if (!mkdtemp(dir)) SKIP("mkdtemp failed");
  snprintf(path, sizeof path, "%s/s.json", dir);
  aa_strategy_t s = odd_strategy(), back;
  CHECK_MSG(aa_strategy_save(&s, path) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_strategy_load(&back, path) == 0, "%s", aa_last_error());
  CHECK(same(&s, &back));
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  CHECK(access(tmp, F_OK) != 0);
  /* Overwriting replaces the file whole. */
  aa_strategy_default(&s);
  CHECK(aa_strategy_save(&s, path) == 0);
  CHECK(aa_strategy_load(&back, path) == 0 && same(&s, &back));
  /* The same through a directory descriptor, with the caller's mode. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  s = odd_strategy();
  CHECK_MSG(aa_strategy_save_at(&s, dfd, "s.json", 0600) == 0, "%s", aa_last_error());
  CHECK(aa_strategy_load(&back, path) == 0 && same(&s, &back));
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0077) == 0);
  if (dfd >= 0) close(dfd);
  unlink(path);
  rmdir(dir);
}

/* A user who can write the directory plants symlinks to a file only the
 * saver may write, at the final name and at the old fixed temporary name:
 * the save replaces the first and never writes through either. */
AA_TEST(save_never_writes_through_a_planted_symlink) {
  char dir[] = "/tmp/aa_strategy_XXXXXX", victim[64], path[64], tmp[80], *got = NULL;
  size_t got_len = 0;
  if (!mkdtemp(dir)) SKIP("mkdtemp failed");
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(path, sizeof path, "%s/s.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(victim, "w");
  if (f) {
    fputs("secret\n", f);
    fclose(f);
  }
  CHECK(symlink(victim, path) == 0 && symlink(victim, tmp) == 0);
  aa_strategy_t s = odd_strategy(), back;
  CHECK_MSG(aa_strategy_save(&s, path) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_read_file(victim, 1 << 10, "the victim", &got, &got_len) == 0, "%s", aa_last_error());
  CHECK(got_len == 7 && got && !strcmp(got, "secret\n"));
  free(got);
  struct stat st;
  CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode));
  CHECK(lstat(tmp, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK_MSG(aa_strategy_load(&back, path) == 0 && same(&s, &back), "%s", aa_last_error());
  unlink(tmp);
  unlink(path);
  unlink(victim);
  rmdir(dir);
}

AA_TEST(save_refuses_what_load_would_refuse) {
  aa_strategy_t s;
  char *text = NULL;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 0;
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL && !text);
  CHECK(strstr(aa_last_error(), "parallel.data: must be between 1 and 65536 (got 0)"));
  aa_strategy_default(&s);
  s.amp = (aa_dtype_t)7;
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "amp: must be one of: fp32, bf16, fp16 (got 7)"));
  aa_strategy_default(&s);
  s.loss_scale.min_scale = NAN;
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "loss_scaling.min_loss_scale: must be a finite number (got nan)"));
  aa_strategy_default(&s);
  snprintf(s.model_name, sizeof s.model_name, "caf\xe9"); /* Latin-1, not UTF-8 */
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "provenance.model: must be UTF-8 text"));
  aa_strategy_default(&s);
  s.ckpt_layers = 2; /* with checkpoint none */
  CHECK(aa_strategy_save(&s, "/nonexistent-dir/s.json") == AA_EINVAL);
  aa_strategy_default(&s);
  CHECK(aa_strategy_save(&s, "/nonexistent-dir/s.json") == AA_ENOENT);
}

AA_TEST(load_reports_missing_and_oversized_files) {
  aa_strategy_t *s = poisoned();
  check_error(__LINE__, aa_strategy_load(s, "/nonexistent/s.json"), AA_ENOENT, s,
              (const char *const[]){"/nonexistent/s.json", NULL});
  char path[] = "/tmp/aa_strategy_big_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) SKIP("mkstemp failed");
  CHECK(ftruncate(fd, (2 << 20)) == 0);
  close(fd);
  check_error(
      __LINE__, aa_strategy_load(s, path), AA_EINVAL, s,
      (const char *const[]){"too large (2097152 bytes; a strategy may be at most 1048576 bytes)", NULL});
  unlink(path);
}

AA_TEST(example_files_load) {
  aa_strategy_t s;
  CHECK_MSG(aa_strategy_load(&s, example("bf16-full.json")) == 0, "%s", aa_last_error());
  CHECK(!strcmp(key_of(&s), "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4"));
  CHECK_MSG(aa_strategy_load(&s, example("minimal.json")) == 0, "%s", aa_last_error());
  CHECK(!strcmp(key_of(&s), "dp1.tp1.pp1.z0.bf16.ckpt-none.mb4"));
  CHECK_MSG(aa_strategy_load(&s, example("atorch-list.json")) == 0, "%s", aa_last_error());
  CHECK(!strcmp(key_of(&s), "dp1.tp1.pp1.z1.bf16.ckpt-full.mb0"));
}

/* --- ATorch list form ------------------------------------------------------ */

AA_TEST(atorch_issue_example_maps_to_dp1_zero1_bf16_full) {
  aa_strategy_t s, d;
  if (parse_ok(&s, "[\"parallel_mode\", [\"amp_native\", {\"dtype\": \"bf16\"}], \"checkpoint\", \"zero1\"]"))
    return;
  aa_strategy_default(&d);
  CHECK(s.degree[AA_AXIS_DATA] == 1 && s.degree[AA_AXIS_TENSOR] == 1 && s.degree[AA_AXIS_PIPELINE] == 1 &&
        s.zero == 1 && s.amp == AA_BF16);
  CHECK(s.ckpt == AA_CKPT_FULL && s.ckpt_layers == 0 && s.micro_batch == 0);
  CHECK(s.loss_scale.window == d.loss_scale.window && !s.model_name[0]);
}

AA_TEST(atorch_methods_map_onto_the_knobs) {
  static const struct {
    const char *json, *key;
  } cases[] = {
      {"[]", "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      {"[\"amp_native\"]", "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0"},
      {"[[\"amp_native\", null]]", "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0"},
      {"[[\"amp_native\", {\"dtype\": \"torch.bfloat16\"}, false]]", "dp1.tp1.pp1.z0.bf16.ckpt-none.mb0"},
      {"[[\"amp_native\", {\"dtype\": \"float16\"}]]", "dp1.tp1.pp1.z0.fp16.ckpt-none.mb0"},
      {"[[\"parallel_mode\", {\"data\": 2, \"tensor\": 1, \"pipeline\": 1}]]",
       "dp2.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      /* Pairs give the axis order too: data varies fastest here. */
      {"[[\"parallel_mode\", [[\"data\", 2], [\"tensor\", 2]]], \"zero2\"]",
       "dp2.tp2.pp1.z2.fp32.ckpt-none.mb0.order-dtp"},
      {"[[\"parallel_mode\", [[\"tensor\", 2], [\"data\", 2]]], \"zero2\"]",
       "dp2.tp2.pp1.z2.fp32.ckpt-none.mb0"},
      /* ATorch's own tuple: ([(group, size), ...], rank_order). */
      {"[[\"parallel_mode\", [[[\"data\", 4]], null], true]]", "dp4.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      {"[[\"fsdp\", {\"atorch_wrap_cls\": [\"Block\"]}]]", "dp1.tp1.pp1.z3.fp32.ckpt-none.mb0"},
      {"[[\"checkpoint\", [\"GPT2Block\"]]]", "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
      {"[[\"tensor_parallel\", 2]]", "dp1.tp2.pp1.z0.fp32.ckpt-none.mb0"},
      {"[[\"tensor_parallel\", {\"degree\": 4}]]", "dp1.tp4.pp1.z0.fp32.ckpt-none.mb0"},
      /* Megatron's sequence_parallel switch, which ATorch's tensor_parallel lacks. */
      {"[[\"tensor_parallel\", {\"degree\": 2, \"sequence_parallel\": true}]]",
       "dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb0"},
      {"[[\"tensor_parallel\", {\"sequence_parallel\": true}], [\"parallel_mode\", [[\"tensor\", 4], "
       "[\"data\", 2]]]]",
       "dp2.tp4.pp1.sp.z0.fp32.ckpt-none.mb0"},
      {"[[\"parallel_mode\", {\"tensor\": 2}], [\"tensor_parallel\", {\"sequence_parallel\": false}]]",
       "dp1.tp2.pp1.z0.fp32.ckpt-none.mb0"},
      {"[[\"parallel_mode\", {\"tensor\": 2}], [\"tensor_parallel\", 2]]",
       "dp1.tp2.pp1.z0.fp32.ckpt-none.mb0"},
      {"[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"chunks\": 1, \"sche\": "
       "\"GPipe\"}]]",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.gpipe"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    expect_key(cases[i].json, cases[i].key);
  }
  aa_strategy_t s;
  if (parse_ok(&s, "[[\"amp_native\", {\"dtype\": \"bf16\", \"skip_if_nonfinite\": true}]]") == 0)
    CHECK(s.skip_if_nonfinite == 1);
}

AA_TEST(atorch_unsupported_methods_are_named_with_position) {
  static const char *const names[] = {
      "fp8",         "amp_apex_o1", "amp_apex_o2", "half", "sequence_parallel", "ds_3d_parallel",
      "cpu_offload", "lora"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char json[256], needle[128];
    snprintf(json, sizeof json, "[\"zero1\", [\"%s\", {}]]", names[i]);
    snprintf(needle, sizeof needle, "s.json: item 2: method \"%s\" is not supported", names[i]);
    EXPECT_PARSE_ERROR(
        json, AA_EUNSUPPORTED, needle,
        "(supported: parallel_mode, amp_native, checkpoint, zero1, zero2, fsdp, tensor_parallel, "
        "pipeline_parallel, mixed_parallel, module_replace)");
  }
}

AA_TEST(atorch_bad_items_and_conflicts_are_refused) {
  EXPECT_PARSE_ERROR("[\"zero1\", \"fsdp\"]", AA_EINVAL, "item 2 (fsdp): conflicts with item 1 (zero1)");
  EXPECT_PARSE_ERROR("[\"checkpoint\", \"zero2\", [\"checkpoint\", null]]", AA_EINVAL,
                     "item 3 (checkpoint): method is given twice (items 1 and 3)");
  EXPECT_PARSE_ERROR("[[\"amp_native\", {\"dtype\": \"bf16\"}], \"amp_native\"]", AA_EINVAL, "given twice");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", {\"tensor\": 2}], [\"tensor_parallel\", 4]]", AA_EINVAL,
                     "item 2 (tensor_parallel): tensor parallel degree 4 conflicts with 2 given by item 1");
  EXPECT_PARSE_ERROR(
      "[[\"parallel_mode\", {\"sequence\": 2}]]", AA_EINVAL,
      "item 1 (parallel_mode): unknown parallel group \"sequence\" (allowed: data, tensor, pipeline)");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", [[\"data\", 2], [\"data\", 2]]]]", AA_EINVAL,
                     "\"data\" is given twice");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", {\"data\": 0}]]", AA_EINVAL,
                     "data: must be between 1 and 65536 (got 0)");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", 4]]", AA_EINVAL, "config must be an object of group sizes");
  EXPECT_PARSE_ERROR("[[\"amp_native\", {\"dtype\": \"int8\"}]]", AA_EINVAL,
                     "item 1 (amp_native): dtype: must be one of", "(got \"int8\")");
  EXPECT_PARSE_ERROR("[[\"amp_native\", {\"opt_level\": \"O1\"}]]", AA_EUNSUPPORTED,
                     "item 1 (amp_native): option \"opt_level\" is not supported by autoaccel; supported options: "
                     "dtype, skip_if_nonfinite, enabled");
  EXPECT_PARSE_ERROR("[[\"checkpoint\", [1, 2]]]", AA_EINVAL, "list of module names");
  EXPECT_PARSE_ERROR("[[\"tensor_parallel\", {\"size\": 2}]]", AA_EUNSUPPORTED,
                     "option \"size\" is not supported by autoaccel; supported options: degree");
  EXPECT_PARSE_ERROR("[[\"tensor_parallel\", \"2\"]]", AA_EINVAL, "config must be an object of options (got string)");
  EXPECT_PARSE_ERROR("[[\"tensor_parallel\", {\"degree\": 2, \"sequence_parallel\": 1}]]", AA_EINVAL,
                     "item 1 (tensor_parallel): sequence_parallel: must be true or false (got integer)");
  /* Sequence parallelism needs the tensor degree, from this item or parallel_mode. */
  EXPECT_PARSE_ERROR(
      "[\"zero1\", [\"tensor_parallel\", {\"sequence_parallel\": true}]]", AA_EINVAL,
      "s.json: item 2 (tensor_parallel): sequence_parallel: needs tensor parallelism (the tensor "
      "degree is 1)");
  EXPECT_PARSE_ERROR(
      "[[\"tensor_parallel\", {\"degree\": 1, \"sequence_parallel\": true}], [\"parallel_mode\", "
      "{\"data\": 2}]]",
      AA_EINVAL, "item 1 (tensor_parallel): sequence_parallel: needs tensor parallelism");
  /* ATorch's own sequence_parallel method is another scheme: refused with the way to Megatron's. */
  EXPECT_PARSE_ERROR("[[\"sequence_parallel\", {\"sp_size\": 2}]]", AA_EUNSUPPORTED,
                     "item 1: method \"sequence_parallel\" is not supported (ATorch's sequence_parallel is "
                     "DeepSpeed-Ulysses style",
                     "[\"tensor_parallel\", {\"sequence_parallel\": true}]) (supported: parallel_mode");
  EXPECT_PARSE_ERROR("[[\"pipeline_parallel\", {\"sche\": \"fast\"}]]", AA_EINVAL,
                     "sche: must be \"1F1B\", \"GPipe\" or \"Interleaved1F1B\"");
  EXPECT_PARSE_ERROR("[[\"pipeline_parallel\", {\"schedule\": \"1f1b\", \"sche\": \"gpipe\"}]]", AA_EINVAL,
                     "both schedule and sche");
  EXPECT_PARSE_ERROR("[3]", AA_EINVAL,
                     "item 1: must be a method name, [name, config] or [name, config, tunable]");
  EXPECT_PARSE_ERROR("[[]]", AA_EINVAL, "item 1: must be a method name");
  EXPECT_PARSE_ERROR("[[\"zero1\", null, true, 4]]", AA_EINVAL, "item 1: must be a method name");
  EXPECT_PARSE_ERROR("[[\"zero1\", null, \"yes\"]]", AA_EINVAL,
                     "tunable (third element) must be true or false");
}

/* --- the pipeline: schedule, virtual stages, partition ---------------------- */

/* A pipeline's file states its schedule, virtual stages and cut, after
 * the schedule and before the key, and reads back the same. */
AA_TEST(pipeline_fields_parse_write_and_read_back) {
  aa_strategy_t s, back;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"pipeline\": 2}, \"zero\": 1, \"micro_batch\": 2, "
                   "\"schedule\": \"interleaved\", \"virtual_stages\": 2, \"partition\": [0, 1, 2, 3, 4]}"))
    return;
  CHECK(s.degree[AA_AXIS_PIPELINE] == 2 && s.schedule == AA_SCHEDULE_INTERLEAVED && s.vpp == 2 &&
        s.partition == AA_PARTITION_CUSTOM && s.n_bounds == 5 && s.bounds[4] == 4);
  char *text = NULL;
  CHECK_MSG(aa_strategy_to_json(&s, &text) == 0, "%s", aa_last_error());
  if (!text) return;
  const char *sched = strstr(text, "\"schedule\": \"interleaved\""),
             *v = strstr(text, "\"virtual_stages\": 2,"),
             *part = strstr(text, "\"partition\": [\n    0,\n    1,"),
             *key =
                 strstr(text, "\"key\": \"dp2.tp1.pp2.z1.fp32.ckpt-none.mb2.interleaved-v2.part-0-1-2-3-4\"");
  CHECK_MSG(sched && v && part && key && sched < v && v < part && part < key, "%s", text);
  if (parse_ok(&back, text) == 0) CHECK(same(&s, &back));
  free(text);

  /* A uniform pipeline writes its defaults too; no pipeline writes neither. */
  aa_strategy_default(&s);
  s.degree[AA_AXIS_PIPELINE] = 2;
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  CHECK(text && strstr(text, "\"virtual_stages\": 1,") && strstr(text, "\"partition\": \"uniform\""));
  free(text);
  s.degree[AA_AXIS_PIPELINE] = 1;
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  CHECK(text && !strstr(text, "virtual_stages") && !strstr(text, "partition"));
  free(text);
  s.partition = AA_PARTITION_PARAMETERS; /* meaningless at pp 1, but kept */
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  if (text && parse_ok(&back, text) == 0) CHECK(same(&s, &back));
  free(text);
}

/* Megatron's and Merak's names for the same settings, and PyTorch's
 * spellings of the schedules. */
AA_TEST(pipeline_aliases_mean_the_same) {
  static const struct {
    const char *json, *key;
  } cases[] = {
      {"\"schedule\": \"1F1B\"", "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
      {"\"schedule\": \"GPipe\"", "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.gpipe"},
      {"\"schedule\": \"Interleaved1F1B\", \"virtual_stages\": 2",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.interleaved-v2"},
      {"\"schedule\": \"interleaved\", \"virtual_pipeline_model_parallel_size\": 2",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.interleaved-v2"},
      {"\"partition_method\": \"parameters\"", "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b.part-params"},
      {"\"partition_method\": \"uniform\"", "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
      {"\"custom_partition\": [0, 3, 8]", "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b.part-0-3-8"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char json[512];
    snprintf(json, sizeof json, "{" V1 ", \"parallel\": {\"pipeline\": 2}, %s}", cases[i].json);
    expect_key(json, cases[i].key);
  }
  /* Merak's schedules that autoaccel does not run, and DeepSpeed's
   * layer-class cut, are refused with what they are. */
  EXPECT_PARSE_ERROR(
      "{" V1 ", \"schedule\": \"pre_recompute_1f1b\"}", AA_EUNSUPPORTED,
      "s.json: schedule: \"pre_recompute_1f1b\" is not supported by autoaccel (Merak's 1F1B that "
      "recomputes ahead of the backward");
  EXPECT_PARSE_ERROR("{" V1 ", \"schedule\": \"ds_default\"}", AA_EUNSUPPORTED,
                     "DeepSpeed's own TrainSchedule");
  EXPECT_PARSE_ERROR("{" V1 ", \"schedule\": \"shifted_critical_path\"}", AA_EUNSUPPORTED,
                     "Merak's shifted critical-path schedule");
  EXPECT_PARSE_ERROR(
      "{" V1 ", \"partition_method\": \"type:Block\"}", AA_EUNSUPPORTED,
      "s.json: partition: \"type:Block\" is not supported by autoaccel (it balances the layers of a "
      "class");
}

/* --- the mesh's numbering: axis order and rank order ------------------------ */

/* A file without them is the default order and no rank order, and a saved
 * default strategy says nothing of either: today's files round-trip byte
 * for byte. */
AA_TEST(files_without_an_order_round_trip_byte_for_byte) {
  char *buf = NULL, *text = NULL;
  size_t len = 0;
  aa_strategy_t s;
  CHECK_MSG(aa_read_file(example("bf16-full.json"), 1 << 20, "a strategy", &buf, &len) == 0, "%s", aa_last_error());
  if (!buf) return;
  if (parse_ok(&s, buf) == 0) {
    CHECK(aa_axis_order_is(s.order, "tdp") && s.nranks == 0);
    CHECK(aa_strategy_to_json(&s, &text) == 0);
    if (text) CHECK_MSG(!strcmp(text, buf), "wrote\n%s\nread\n%s", text, buf);
  }
  free(text);
  free(buf);
}

AA_TEST(order_and_rank_order_parse_write_and_read_back) {
  aa_strategy_t s, back;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"tensor\": 4, \"pipeline\": 2, \"order\": [\"tensor\", "
                   "\"pipeline\", \"data\"], \"rank_order\": [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, "
                   "0]}}"))
    return;
  CHECK(aa_axis_order_is(s.order, "tpd") && s.nranks == 16 && s.rank_order[0] == 15 && s.rank_order[15] == 0);
  char *text = NULL;
  CHECK_MSG(aa_strategy_to_json(&s, &text) == 0, "%s", aa_last_error());
  if (!text) return;
  CHECK(strstr(text, "\"order\": [\n      \"tensor\",\n      \"pipeline\",\n      \"data\"\n    ]"));
  CHECK(strstr(text, "\"rank_order\": [\n      15,"));
  if (parse_ok(&back, text) == 0) CHECK(same(&s, &back));
  free(text);
  /* An order given in full that is the default's is not written back. */
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"order\": [\"tensor\", \"data\", \"pipeline\"]}}")) return;
  CHECK(aa_axis_order_is(s.order, "tdp"));
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  if (text) CHECK(!strstr(text, "order"));
  free(text);
}

AA_TEST(key_shows_an_order_only_where_it_changes_the_groups) {
  static const struct {
    const char *parallel, *key;
  } cases[] = {
      /* One parallel axis: every order groups alike. */
      {"\"data\": 4, \"order\": [\"data\", \"pipeline\", \"tensor\"]", "dp4.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      /* Data before pipeline in both: the default's grouping. */
      {"\"data\": 2, \"pipeline\": 2, \"order\": [\"data\", \"tensor\", \"pipeline\"]",
       "dp2.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b"},
      {"\"data\": 2, \"pipeline\": 2, \"order\": [\"pipeline\", \"data\", \"tensor\"]",
       "dp2.tp1.pp2.z0.fp32.ckpt-none.mb0.1f1b.order-pdt"},
      {"\"data\": 2, \"tensor\": 4, \"pipeline\": 2, \"order\": [\"tensor\", \"pipeline\", \"data\"]",
       "dp2.tp4.pp2.z0.fp32.ckpt-none.mb0.1f1b.order-tpd"},
      /* The identity is no rank order; FNV-1a 64 of "1,0" names another. */
      {"\"data\": 2, \"rank_order\": [0, 1]", "dp2.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      {"\"data\": 2, \"rank_order\": [1, 0]", "dp2.tp1.pp1.z0.fp32.ckpt-none.mb0.ranks-45762f181827e9c0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char json[512];
    snprintf(json, sizeof json, "{" V1 ", \"parallel\": {%s}}", cases[i].parallel);
    expect_key(json, cases[i].key);
  }
}

AA_TEST(bad_orders_and_rank_orders_are_refused_with_the_rule) {
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"order\": [\"tensor\", \"data\"]}}", AA_EINVAL,
                     "s.json: parallel.order: must list the three axes \"data\", \"tensor\", \"pipeline\" once each");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"order\": [\"tensor\", \"data\", \"seq\"]}}", AA_EINVAL,
                     "parallel.order: unknown axis \"seq\" (allowed: data, tensor, pipeline, context)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"order\": [\"tensor\", \"data\", \"data\"]}}", AA_EINVAL,
                     "parallel.order: axis \"data\" is given twice");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"rank_order\": {}}}", AA_EINVAL,
                     "parallel.rank_order: must be a list of ranks (got object)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"rank_order\": []}}", AA_EINVAL,
                     "parallel.rank_order: must list 1 to 4096 ranks (got 0)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"data\": 3, \"rank_order\": [0, 2, 0]}}", AA_EINVAL,
                     "parallel.rank_order: rank 0 is given twice (positions 0 and 2); a rank order is a "
                     "permutation of 0..2");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"data\": 2, \"rank_order\": [0, 2]}}", AA_EINVAL,
                     "parallel.rank_order: rank 2 at position 1 is outside 0..1");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"data\": 2, \"rank_order\": [0, \"1\"]}}", AA_EINVAL,
                     "parallel.rank_order: position 1: must be an integer rank (got string)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"data\": 2, \"pipeline\": 2, \"rank_order\": [2, 0, 1]}}",
                     AA_EINVAL, "parallel.rank_order: lists 3 ranks, but data * tensor * pipeline = 2 * 1 * 2 = 4");
  /* What the reader refuses, the writer refuses too. */
  aa_strategy_t s;
  char *text = NULL;
  aa_strategy_default(&s);
  s.order[2] = s.order[0];
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL && !text);
  CHECK(strstr(aa_last_error(), "parallel.order: must list every axis once"));
  aa_strategy_default(&s);
  s.degree[AA_AXIS_DATA] = 2;
  CHECK(aa_strategy_set_rank_order(&s, (const uint16_t[]){1, 1}, 2) == 0);
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL && !text);
  CHECK(strstr(aa_last_error(), "parallel.rank_order: rank 1 is given twice"));
}

/* --- sequence parallelism ----------------------------------------------------- */

/* parallel.sequence_parallel: a boolean, read strictly, written only when
 * true (so every file without it round-trips byte for byte), and only with
 * a tensor degree to split the sequence over. */
AA_TEST(sequence_parallel_parses_writes_and_reads_back) {
  aa_strategy_t s, back;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"tensor\": 2, \"sequence_parallel\": true}, "
                   "\"key\": \"dp2.tp2.pp1.sp.z0.fp32.ckpt-none.mb0\"}"))
    return;
  CHECK(s.sp == 1 && s.degree[AA_AXIS_TENSOR] == 2 && s.degree[AA_AXIS_DATA] == 2);
  char *text = NULL;
  CHECK_MSG(aa_strategy_to_json(&s, &text) == 0, "%s", aa_last_error());
  if (!text) return;
  /* In the parallel object, after the degrees, as in the key. */
  CHECK_MSG(strstr(text, "\"parallel\": {\n    \"data\": 2,\n    \"tensor\": 2,\n    \"pipeline\": 1,\n"
                         "    \"sequence_parallel\": true\n  },"),
            "%s", text);
  CHECK(strstr(text, "\"key\": \"dp2.tp2.pp1.sp.z0.fp32.ckpt-none.mb0\""));
  if (parse_ok(&back, text) == 0) CHECK(same(&s, &back));
  free(text);
  text = NULL;
  /* Written before an order, which follows it in the table. */
  aa_axis_order_parse(s.order, "dtp");
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  if (text) CHECK(strstr(text, "\"sequence_parallel\": true,\n    \"order\": ["));
  free(text);
  text = NULL;
  /* false is the default and is not written. */
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"tensor\": 2, \"sequence_parallel\": false}}")) return;
  CHECK(s.sp == 0);
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  if (text) CHECK(!strstr(text, "sequence_parallel"));
  free(text);
  text = NULL;
  /* Saved and loaded through a file. */
  char dir[] = "/tmp/aa_strategy_XXXXXX", path[128];
  if (!mkdtemp(dir)) SKIP("mkdtemp failed");
  snprintf(path, sizeof path, "%s/sp.json", dir);
  aa_strategy_default(&s);
  s.degree[AA_AXIS_TENSOR] = 4;
  s.sp = 1;
  s.micro_batch = 2;
  CHECK_MSG(aa_strategy_save(&s, path) == 0, "%s", aa_last_error());
  CHECK_MSG(aa_strategy_load(&back, path) == 0, "%s", aa_last_error());
  CHECK(same(&s, &back) && !strcmp(key_of(&back), "dp1.tp4.pp1.sp.z0.fp32.ckpt-none.mb2"));
  unlink(path);
  rmdir(dir);
}

AA_TEST(sequence_parallel_rules_are_refused_with_the_rule) {
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"tensor\": 2, \"sequence_parallel\": 1}}", AA_EINVAL,
                     "s.json: parallel.sequence_parallel: must be true or false (got integer)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"tensor\": 2, \"sequence_parallel\": \"true\"}}", AA_EINVAL,
                     "parallel.sequence_parallel: must be true or false (got string)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"tensor\": 2, \"sequence_parallel\": null}}", AA_EINVAL,
                     "parallel.sequence_parallel: must be true or false (got null)");
  EXPECT_PARSE_ERROR(
      "{" V1 ", \"parallel\": {\"sequence_parallel\": true}}", AA_EINVAL,
      "s.json: parallel.sequence_parallel: needs tensor parallelism (got tensor 1): it splits the "
      "sequence between the tensor ranks");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"data\": 4, \"tensor\": 1, \"sequence_parallel\": true}}",
                     AA_EINVAL, "parallel.sequence_parallel: needs tensor parallelism (got tensor 1)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"tensor\": 2, \"sequence_parallel\": true}, "
                     "\"key\": \"dp1.tp2.pp1.z0.fp32.ckpt-none.mb0\"}",
                     AA_EINVAL, "key: \"dp1.tp2.pp1.z0.fp32.ckpt-none.mb0\" does not match the fields",
                     "which give \"dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb0\"");
  /* What the reader refuses, the writer and resolve refuse too. */
  aa_strategy_t s;
  char *text = NULL;
  aa_strategy_default(&s);
  s.sp = 1;
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL && !text);
  CHECK(strstr(aa_last_error(), "parallel.sequence_parallel: needs tensor parallelism (got tensor 1)"));
  aa_model_spec_t spec = tiny_spec();
  CHECK(aa_strategy_resolve(&s, &spec, 0) == AA_EINVAL);
  CHECK(strstr(aa_last_error(),
               "strategy: parallel.sequence_parallel: needs tensor parallelism (got tensor 1)"));
  s.degree[AA_AXIS_TENSOR] = 2;
  s.sp = 2;
  CHECK(aa_strategy_to_json(&s, &text) == AA_EINVAL && !text);
  CHECK(strstr(aa_last_error(), "parallel.sequence_parallel: must be true or false (got 2)"));
}

/* A rank order lists the world's ranks, so a strategy rescaled to another
 * world (autoaccel train's rule) no longer resolves. */
AA_TEST(resolve_holds_a_rank_order_to_the_world) {
  aa_model_spec_t spec = tiny_spec();
  aa_strategy_t s;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"rank_order\": [1, 0]}}")) return;
  CHECK_MSG(aa_strategy_resolve(&s, &spec, 2) == 0, "%s", aa_last_error());
  s.degree[AA_AXIS_DATA] = 4;
  CHECK(aa_strategy_resolve(&s, &spec, 4) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "parallel.rank_order: lists 2 ranks, but data * tensor * pipeline = 4 * 1 * 1 = 4"),
            "%s", aa_last_error());
}

/* The context axis, added after the first three (common/axis.h): at
 * degree 1 it is in no key, file or order name, so every earlier file
 * reads and writes as before; above 1 the key, the file and an order that
 * places it show it. Megatron's context_parallel_size reads as it; ATorch
 * has no such group, which its list form says. */
AA_TEST(the_context_axis_shows_only_above_one) {
  expect_key("{" V1 ", \"parallel\": {\"context\": 1}}", "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0");
  expect_key("{" V1 ", \"parallel\": {\"data\": 2, \"context\": 2}}",
             "dp2.tp1.pp1.cp2.z0.fp32.ckpt-none.mb0");
  expect_key("{" V1 ", \"parallel\": {\"context_parallel_size\": 4}}",
             "dp1.tp1.pp1.cp4.z0.fp32.ckpt-none.mb0");
  expect_key("{" V1
             ", \"parallel\": {\"tensor_model_parallel_size\": 2, \"pipeline_model_parallel_size\": 2}}",
             "dp1.tp2.pp2.z0.fp32.ckpt-none.mb0.1f1b");
  /* An order: the three axes alone as before; with context placed, and
   * named in the key, when it is parallel. */
  expect_key("{" V1
             ", \"parallel\": {\"data\": 2, \"tensor\": 2, \"order\": [\"data\", \"tensor\", \"pipeline\"]}}",
             "dp2.tp2.pp1.z0.fp32.ckpt-none.mb0.order-dtp");
  expect_key("{" V1
             ", \"parallel\": {\"data\": 2, \"context\": 2, \"order\": [\"data\", \"context\", \"tensor\", "
             "\"pipeline\"]}}",
             "dp2.tp1.pp1.cp2.z0.fp32.ckpt-none.mb0.order-dctp");
  expect_key("{" V1 ", \"parallel\": {\"data\": 2, \"context\": 2}}",
             "dp2.tp1.pp1.cp2.z0.fp32.ckpt-none.mb0");
  aa_strategy_t s;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"context\": 2}}")) return;
  CHECK(s.degree[AA_AXIS_CONTEXT] == 2 && aa_strategy_world(&s) == 4);
  char *text = NULL;
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  CHECK_MSG(text && strstr(text, "\"pipeline\": 1,\n    \"context\": 2\n"), "%s", text);
  aa_strategy_t back;
  CHECK(text && parse_ok(&back, text) == 0 && !memcmp(back.degree, s.degree, sizeof s.degree));
  free(text);
  aa_strategy_default(&s);
  CHECK(aa_strategy_to_json(&s, &text) == 0);
  CHECK_MSG(text && !strstr(text, "context"), "%s", text);
  free(text);
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"context\": 0}}", AA_EINVAL,
                     "s.json: parallel.context: must be between 1 and 65536 (got 0)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"context\": 2, \"context_parallel_size\": 2}}", AA_EINVAL,
                     "parallel.context_parallel_size: gives parallel.context again");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"order\": [\"tensor\", \"context\"]}}", AA_EINVAL,
                     "parallel.order: must list the three axes \"data\", \"tensor\", \"pipeline\" once each");
  EXPECT_PARSE_ERROR(
      "[[\"parallel_mode\", [[\"context\", 2]]]]", AA_EUNSUPPORTED,
      "parallel group \"context\": ATorch's parallel_mode has no such group; write the v1 form's "
      "\"parallel\": {\"context\": N}");
  /* A model's rules: 2c chunks of every sequence, then what this engine runs. */
  aa_model_spec_t spec = tiny_spec(); /* seq_len 64 */
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"context\": 64}}")) return;
  CHECK_ERR(aa_strategy_resolve(&s, &spec, 0), AA_EINVAL, "2 x 64 = 128 chunks");
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"context\": 2}}")) return;
  CHECK(aa_strategy_resolve(&s, &spec, 2) == 0);
  CHECK_ERR(aa_strategy_resolve(&s, &spec, 4), AA_EINVAL,
            "data * tensor * pipeline * context = 1 * 1 * 1 * 2 = 2 must equal the world size 4");
  /* Sequence parallelism splits a context rank's tokens: 12 tokens a
   * sequence are 6 on each of 2 context ranks, which tp 4 does not divide
   * (though it divides 12). */
  spec.arch.seq_len = 12;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"tensor\": 4, \"context\": 2, \"sequence_parallel\": true}, "
                   "\"micro_batch\": 1}"))
    return;
  CHECK_ERR(
      aa_strategy_resolve(&s, &spec, 8), AA_EINVAL,
      "sequence_parallel splits a context rank's micro_batch x seq_len / context = 1 x 12 / 2 tokens between "
      "the 4 tensor ranks: tp must divide 6");
  if (parse_ok(&s,
               "{" V1 ", \"parallel\": {\"tensor\": 4, \"sequence_parallel\": true}, \"micro_batch\": 1}"))
    return;
  CHECK(aa_strategy_resolve(&s, &spec, 4) == 0);
}

/* --- ATorch options: each honoured or refused by name -------------------- */

AA_TEST(atorch_options_that_map_exactly_are_honoured) {
  static const struct {
    const char *json, *key;
  } cases[] = {
      {"[[\"amp_native\", {\"dtype\": \"bf16\", \"enabled\": true}]]", "dp1.tp1.pp1.z0.bf16.ckpt-none.mb0"},
      {"[[\"checkpoint\", \"GPT2Block\"]]", "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
      {"[[\"checkpoint\", [\"Block\", \"GPT2Block\"]]]", "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
      {"[[\"checkpoint\", {\"wrap_class\": [\"GPT2Block\"]}]]", "dp1.tp1.pp1.z0.fp32.ckpt-full.mb0"},
      {"[[\"zero1\", {\"use_ds_zero\": true}]]", "dp1.tp1.pp1.z1.fp32.ckpt-none.mb0"},
      {"[[\"zero2\", {\"not_use_fsdp\": true, \"use_ds_zero\": false}]]",
       "dp1.tp1.pp1.z2.fp32.ckpt-none.mb0"},
      {"[[\"zero2\", {\"sharding_strategy\": \"SHARD_GRAD_OP\", \"cpu_offload\": false}]]",
       "dp1.tp1.pp1.z2.fp32.ckpt-none.mb0"},
      {"[[\"fsdp\", {\"sharding_strategy\": \"ShardingStrategy.SHARD_GRAD_OP\"}]]",
       "dp1.tp1.pp1.z2.fp32.ckpt-none.mb0"},
      {"[[\"fsdp\", {\"sharding_strategy\": \"NO_SHARD\"}]]", "dp1.tp1.pp1.z0.fp32.ckpt-none.mb0"},
      {"[[\"fsdp\", {\"sharding_strategy\": \"FULL_SHARD\", \"cpu_offload\": false, \"atorch_wrap_cls\": "
       "\"GPT2Block\", \"sync_module_states\": true, \"use_orig_params\": true, \"limit_all_gathers\": true, "
       "\"forward_prefetch\": false, \"backward_prefetch\": null}]]",
       "dp1.tp1.pp1.z3.fp32.ckpt-none.mb0"},
      {"[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"pipe_schedule\": \"GPipe\"}]]",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.gpipe"},
      /* nstages counts the stages over every pipeline rank: 4 over pp 2 is
       * 2 virtual stages each, which ATorch's default schedule runs
       * interleaved; parallel_mode may come after. */
      {"[[\"pipeline_parallel\", {\"nstages\": 4}], [\"parallel_mode\", {\"pipeline\": 2}]]",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.interleaved-v2"},
      {"[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"nstages\": 8, \"sche\": "
       "\"Interleaved1F1B\"}]]",
       "dp1.tp1.pp2.z0.fp32.ckpt-none.mb0.interleaved-v4"},
      /* One stage per rank is plain 1F1B, whatever nstages says it equals. */
      {"[[\"parallel_mode\", {\"pipeline\": 4}], [\"pipeline_parallel\", {\"nstages\": 4, \"schedule\": "
       "\"1F1B\"}]]",
       "dp1.tp1.pp4.z0.fp32.ckpt-none.mb0.1f1b"},
      /* ATorch's document example, its tuples as JSON lists. */
      {"[[\"parallel_mode\", [[[\"tensor\", 8], [\"pipeline\", 2], [\"data\", 2]], null]], \"amp_native\"]",
       "dp2.tp8.pp2.z0.fp16.ckpt-none.mb0.1f1b.order-tpd"},
      {"[[\"parallel_mode\", [[\"tensor\", 8], [\"pipeline\", 2], [\"data\", 2]]], [\"pipeline_parallel\", "
       "{\"chunks\": 1}]]",
       "dp2.tp8.pp2.z0.fp32.ckpt-none.mb0.1f1b.order-tpd"},
      {"[[\"parallel_mode\", [[[\"data\", 2]], null, false]]]", "dp2.tp1.pp1.z0.fp32.ckpt-none.mb0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    expect_key(cases[i].json, cases[i].key);
  }
}

AA_TEST(atorch_options_autoaccel_cannot_honour_are_refused_by_name) {
  static const struct {
    const char *json, *needle;
  } cases[] = {
      {"[[\"fsdp\", {\"cpu_offload\": true}]]",
       "s.json: item 1 (fsdp): option \"cpu_offload\": true is not supported by autoaccel (it would train "
       "without "
       "offload: autoaccel keeps every state on the device); honoured: false"},
      {"[\"zero1\", [\"checkpoint\", {\"wrap_class\": [\"GPT2Attention\"]}]]",
       "s.json: item 2 (checkpoint): option \"wrap_class\": module class \"GPT2Attention\" is not supported "
       "by "
       "autoaccel (autoaccel cannot checkpoint or shard attention alone"},
      {"[[\"checkpoint\", [\"GPT2Block\", \"GPT2MLP\"]]]",
       "item 1 (checkpoint): config: module class \"GPT2MLP\" is not supported by autoaccel (checkpointing "
       "the MLP "
       "recomputes fc, GELU and proj"},
      {"[[\"checkpoint\", \"Linear\"]]",
       "config: module class \"Linear\" is not supported by autoaccel (not the transformer block; autoaccel "
       "checkpoints whole blocks); honoured: GPT2Block, Block, LlamaDecoderLayer, MistralDecoderLayer, "
       "Qwen2DecoderLayer, MixtralDecoderLayer (the transformer block)"},
      {"[[\"checkpoint\", {\"use_reentrant\": false}]]",
       "item 1 (checkpoint): option \"use_reentrant\" is not supported by autoaccel; supported options: "
       "wrap_class"},
      {"[[\"amp_native\", {\"enabled\": false}]]",
       "item 1 (amp_native): option \"enabled\": false is not supported by autoaccel (amp_native that is not "
       "enabled trains in fp32; leave amp_native out instead); honoured: true"},
      {"[[\"zero1\", {\"overlap_comm\": true}]]", "item 1 (zero1): option \"overlap_comm\" is not supported "
                                                  "by autoaccel; supported options: use_ds_zero"},
      {"[[\"zero2\", {\"sharding_strategy\": \"FULL_SHARD\"}]]",
       "item 1 (zero2): option \"sharding_strategy\": \"FULL_SHARD\" is not supported by autoaccel (zero2 "
       "shards "
       "gradients and optimizer states; give fsdp for another stage); honoured: SHARD_GRAD_OP"},
      {"[[\"fsdp\", {\"sharding_strategy\": \"HYBRID_SHARD\"}]]",
       "option \"sharding_strategy\": \"HYBRID_SHARD\" is not supported by autoaccel (it shards within a "
       "host"},
      {"[[\"fsdp\", {\"atorch_wrap_cls\": [\"GPT2Block\", \"Embedding\"]}]]",
       "item 1 (fsdp): option \"atorch_wrap_cls\": module class \"Embedding\" is not supported by autoaccel "
       "(autoaccel's ZeRO units are the transformer blocks, the embeddings and the final norm)"},
      {"[[\"fsdp\", {\"mixed_precision\": {}}]]",
       "item 1 (fsdp): option \"mixed_precision\" is not supported by autoaccel (FSDP's own mixed precision; "
       "give "
       "amp_native for mixed precision); supported options: sharding_strategy, cpu_offload, atorch_wrap_cls, "
       "sync_module_states, use_orig_params, limit_all_gathers, forward_prefetch, backward_prefetch"},
      {"[[\"fsdp\", {\"atorch_size_based_min_num_params\": 100000}]]",
       "option \"atorch_size_based_min_num_params\" is not supported by autoaccel (it wraps modules by size"},
      {"[[\"zero2\", {\"wrap_trainable_outmost\": true}]]",
       "item 1 (zero2): option \"wrap_trainable_outmost\" is not supported by autoaccel (it wraps only the "
       "trainable parameters"},
      {"[[\"tensor_parallel\", {\"shard_planner\": \"mip\"}]]",
       "item 1 (tensor_parallel): option \"shard_planner\" is not supported by autoaccel (autoaccel splits "
       "attention "
       "and the MLP as Megatron does and takes no sharding plan); supported options: degree"},
      {"[[\"pipeline_parallel\", {\"chunks\": 8}]]", "item 1 (pipeline_parallel): option \"chunks\": 8 is "
                                                     "not supported by autoaccel (the micro-batch count "
                                                     "follows from micro_batch"},
      {"[[\"pipeline_parallel\", {\"insert_before_modules\": [\"h.2\"]}]]",
       "option \"insert_before_modules\" is not supported by autoaccel (autoaccel cuts between transformer "
       "blocks"},
      {"[[\"parallel_mode\", [[[\"data\", 2]], null, true]]]",
       "item 1 (parallel_mode): support_multi_parallel_instance: true is not supported by autoaccel"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aa_strategy_t *s = poisoned();
    int rc = aa_strategy_parse(s, cases[i].json, "s.json");
    check_error(__LINE__, rc, AA_EUNSUPPORTED, s, (const char *const[]){cases[i].needle, NULL});
  }
  /* A value of the wrong type is invalid input, not an unsupported option. */
  EXPECT_PARSE_ERROR("[[\"fsdp\", {\"cpu_offload\": \"no\"}]]", AA_EINVAL,
                     "item 1 (fsdp): cpu_offload: must be true or false (got string)");
  EXPECT_PARSE_ERROR("[[\"fsdp\", {\"sharding_strategy\": \"HALF\"}]]", AA_EINVAL,
                     "sharding_strategy: must be one of: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD (got \"HALF\")");
  EXPECT_PARSE_ERROR("[[\"zero1\", [\"x\"]]]", AA_EINVAL, "item 1 (zero1): config must be an object of options");
  EXPECT_PARSE_ERROR("[[\"pipeline_parallel\", {\"sche\": \"1f1b\", \"pipe_schedule\": \"1F1B\"}]]", AA_EINVAL,
                     "config gives both sche and pipe_schedule; give one");
  /* nstages against the pipeline degree, and the schedule that runs it. */
  EXPECT_PARSE_ERROR(
      "[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"nstages\": 3}]]", AA_EINVAL,
      "item 2 (pipeline_parallel): nstages 3 must be a multiple of the pipeline degree 2 (each "
      "pipeline rank holds nstages / pp stages)");
  EXPECT_PARSE_ERROR("[[\"pipeline_parallel\", {\"nstages\": 2}]]", AA_EINVAL,
                     "item 1 (pipeline_parallel): nstages 2 needs pipeline parallelism");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"nstages\": 4, "
                     "\"schedule\": \"GPipe\"}]]",
                     AA_EINVAL,
                     "nstages 4 gives each of the 2 pipeline ranks 2 stages, which only Interleaved1F1B runs "
                     "(schedule is GPipe)");
  EXPECT_PARSE_ERROR(
      "[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"pipe_schedule\": "
      "\"Interleaved1F1B\"}]]",
      AA_EINVAL,
      "Interleaved1F1B needs several stages per pipeline rank: give nstages = k x the pipeline "
      "degree 2 with k >= 2 (nstages is 2), or the schedule 1F1B");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", {\"pipeline\": 2}], [\"pipeline_parallel\", {\"nstages\": 34}]]",
                     AA_EINVAL, "nstages 34 over pipeline degree 2 gives each rank 17 stages; at most 16");
}

/* ATorch's ([("tensor", 4), ("pipeline", 2), ("data", 2)], rank_order):
 * the pairs give the axis order, fastest first, and the rank order is
 * taken when it is a permutation of the degrees' world. */
AA_TEST(atorch_parallel_mode_takes_the_order_and_rank_order) {
  aa_strategy_t s;
  if (parse_ok(&s, "[[\"parallel_mode\", [[[\"tensor\", 4], [\"pipeline\", 2], [\"data\", 2]], null]]]")) return;
  CHECK(s.degree[AA_AXIS_TENSOR] == 4 && s.degree[AA_AXIS_PIPELINE] == 2 && s.degree[AA_AXIS_DATA] == 2 &&
        aa_axis_order_is(s.order, "tpd") && s.nranks == 0);
  if (parse_ok(&s, "[[\"parallel_mode\", [[[\"pipeline\", 2], [\"data\", 2]], [3, 2, 1, 0]]]]")) return;
  CHECK(aa_axis_order_is(s.order, "pdt") && s.nranks == 4 && s.rank_order[0] == 3 && s.rank_order[3] == 0);
  /* The object form has no order. */
  if (parse_ok(&s, "[[\"parallel_mode\", {\"pipeline\": 2, \"data\": 2}]]")) return;
  CHECK(aa_axis_order_is(s.order, "tdp"));
  /* A degree given by a later item counts in the world. */
  if (parse_ok(&s, "[[\"parallel_mode\", [[[\"data\", 2], [\"tensor\", 2]], [0, 2, 1, 3]]], "
                   "[\"tensor_parallel\", 2]]"))
    return;
  CHECK(s.nranks == 4 && aa_axis_order_is(s.order, "dtp"));
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", [[[\"data\", 2]], [1, 1]]]]", AA_EINVAL,
                     "s.json: item 1 (parallel_mode): rank_order: rank 1 is given twice (positions 0 and 1); a "
                     "rank order is a permutation of 0..1");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", [[[\"data\", 2]], [0, 5]]]]", AA_EINVAL,
                     "item 1 (parallel_mode): rank_order: rank 5 at position 1 is outside 0..1");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", [[[\"data\", 2]], \"0,1\"]]]", AA_EINVAL,
                     "rank_order: must be a list of ranks (got string)");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", [[[\"data\", 2]], [0, 1, 2]]]]", AA_EINVAL,
                     "item 1 (parallel_mode): rank_order: lists 3 ranks, but data * tensor * pipeline = 2 * 1 * 1 = 2");
  EXPECT_PARSE_ERROR("[[\"parallel_mode\", [[[\"data\", 2]], [0, 1]]], [\"tensor_parallel\", 2]]", AA_EINVAL,
                     "item 1 (parallel_mode): rank_order: lists 2 ranks, but data * tensor * pipeline = 2 * 2 * 1 = 4");
}

/* --- resolve ------------------------------------------------------------------ */

/* Parses members into a v1 strategy, resolves it against spec and world,
 * and checks the failure message. */
static void expect_resolve_error_on(int line, const aa_model_spec_t *spec, const char *members, int world,
                                    const char *needle) {
  char json[512];
  aa_strategy_t s, before;
  snprintf(json, sizeof json, "{" V1 "%s%s}", *members ? ", " : "", members);
  if (parse_ok(&s, json)) return;
  before = s;
  int rc = aa_strategy_resolve(&s, spec, world);
  CHECK_MSG(rc == AA_EINVAL, "line %d: %s: rc %d (%s)", line, members, rc, aa_last_error());
  CHECK_MSG(strstr(aa_last_error(), needle), "line %d: message \"%s\" lacks \"%s\"", line, aa_last_error(),
            needle);
  CHECK_MSG(same(&s, &before), "line %d: strategy changed on failure", line);
}

/* The strategy with these members resolves against spec on world ranks. */
static void expect_resolve_ok_on(int line, const aa_model_spec_t *spec, const char *members, int world) {
  char json[512];
  aa_strategy_t s;
  snprintf(json, sizeof json, "{" V1 "%s%s}", *members ? ", " : "", members);
  if (parse_ok(&s, json)) return;
  int rc = aa_strategy_resolve(&s, spec, world);
  CHECK_MSG(rc == 0, "line %d: %s: %s", line, members, aa_last_error());
}

/* The same against the tiny model. */
static void expect_resolve_error(int line, const char *members, int world, const char *needle) {
  aa_model_spec_t spec = tiny_spec();
  expect_resolve_error_on(line, &spec, members, world, needle);
}

AA_TEST(resolve_fills_micro_batch_and_counts_accumulation) {
  aa_model_spec_t spec = tiny_spec();
  aa_strategy_t s;
  aa_strategy_default(&s);
  CHECK_MSG(aa_strategy_resolve(&s, &spec, 1) == 0, "%s", aa_last_error());
  CHECK(s.micro_batch == 16 && aa_strategy_accum_steps(&s, &spec) == 1);
  s.micro_batch = 4;
  CHECK(aa_strategy_resolve(&s, &spec, 0) == 0 && s.micro_batch == 4);
  CHECK(aa_strategy_accum_steps(&s, &spec) == 4);
  s.micro_batch = 1;
  CHECK(aa_strategy_resolve(&s, &spec, 0) == 0 && aa_strategy_accum_steps(&s, &spec) == 16);
  /* ZeRO over a data-parallel group of one shards nothing, and is valid. */
  s.zero = 3;
  s.ckpt = AA_CKPT_FULL;
  s.ckpt_layers = 4;
  CHECK_MSG(aa_strategy_resolve(&s, &spec, 1) == 0, "%s", aa_last_error());
  /* Data parallelism at every ZeRO stage, with and without amp. */
  for (int zero = 0; zero <= 3; zero++) {
    for (int amp = AA_F32; amp <= AA_F16; amp++) {
      aa_strategy_default(&s);
      s.degree[AA_AXIS_DATA] = 4;
      s.zero = zero;
      s.amp = (aa_dtype_t)amp;
      CHECK_MSG(aa_strategy_resolve(&s, &spec, 4) == 0, "zero %d amp %d: %s", zero, amp, aa_last_error());
      CHECK(s.micro_batch == 4 && aa_strategy_accum_steps(&s, &spec) == 1);
    }
  }
}

AA_TEST(every_resolve_rule_fires) {
  expect_resolve_error(__LINE__, "\"parallel\": {\"data\": 2}", 4,
                       "data * tensor * pipeline = 2 * 1 * 1 = 2 must equal the world size 4");
  expect_resolve_error(__LINE__, "", 2,
                       "data * tensor * pipeline = 1 * 1 * 1 = 1 must equal the world size 2");
  expect_resolve_error(__LINE__, "\"parallel\": {\"tensor\": 3}", 0,
                       "tensor parallel degree 3 must divide n_head 4");
  expect_resolve_error(__LINE__, "\"parallel\": {\"pipeline\": 8}", 0,
                       "pipeline parallel degree 8 x virtual_stages 1 = 8 stages: more than n_layer 4 (every "
                       "stage holds at least one block)");
  expect_resolve_error(
      __LINE__, "\"parallel\": {\"pipeline\": 4}, \"schedule\": \"interleaved\", \"virtual_stages\": 2", 0,
      "pipeline parallel degree 4 x virtual_stages 2 = 8 stages: more than n_layer 4");
  expect_resolve_error(__LINE__, "\"parallel\": {\"pipeline\": 2}, \"partition\": [0, 1, 5]", 0,
                       "custom partition must start at 0 and end at n_layer 4 (it runs from 0 to 5)");
  expect_resolve_error(__LINE__, "\"parallel\": {\"data\": 3}", 0,
                       "data parallel degree 3 must divide global_batch 16");
  expect_resolve_error(__LINE__, "\"micro_batch\": 3", 0,
                       "micro_batch 3 must divide global_batch / dp = 16 / 1");
  expect_resolve_error(__LINE__, "\"micro_batch\": 32", 0,
                       "micro_batch 32 must be <= global_batch / dp = 16 / 1");
  expect_resolve_error(__LINE__, "\"parallel\": {\"data\": 2}, \"micro_batch\": 16", 0,
                       "micro_batch 16 must be <= global_batch / dp = 16 / 2");
  expect_resolve_error(__LINE__, "\"checkpoint\": \"full\", \"checkpoint_layers\": 5", 0,
                       "checkpoint_layers 5 must be <= n_layer 4");
  /* Tensor parallelism splits the MLP's columns, and sequence parallelism
   * a micro-batch's tokens: a model with d_ff 510 and sequences of 63. */
  aa_model_spec_t odd = tiny_spec();
  odd.arch.d_ff = 510;
  odd.arch.seq_len = 63;
  expect_resolve_error_on(
      __LINE__, &odd, "\"parallel\": {\"tensor\": 4}", 0,
      "tensor parallel degree 4 must divide d_ff 510 (each rank holds d_ff / tp columns of the MLP)");
  expect_resolve_error_on(
      __LINE__, &odd, "\"parallel\": {\"tensor\": 2, \"sequence_parallel\": true}, \"micro_batch\": 1", 0,
      "sequence_parallel splits a micro-batch's micro_batch x seq_len = 1 x 63 tokens between the "
      "2 tensor ranks: tp must divide 63");
  /* The whole per-rank batch (micro_batch 0 resolves to 16) has 16 x 63 tokens: valid. */
  expect_resolve_ok_on(__LINE__, &odd, "\"parallel\": {\"tensor\": 2, \"sequence_parallel\": true}", 2);
  /* Tensor parallelism is in the engine: tp 2, also with sequence parallelism, is valid. */
  aa_model_spec_t tiny = tiny_spec();
  expect_resolve_ok_on(__LINE__, &tiny, "\"parallel\": {\"tensor\": 2}", 2);
  expect_resolve_ok_on(__LINE__, &tiny, "\"parallel\": {\"tensor\": 2, \"sequence_parallel\": true}, \"micro_batch\": 1",
                       2);
  /* Pipelines: a stage holds whole blocks, not an equal count of them
   * (pp 3 over 4 blocks is 1, 1, 2), ZeRO 0 and 1 only, and the
   * interleaved schedule's micro-batches come in groups of pp. */
  expect_resolve_ok_on(__LINE__, &tiny, "\"parallel\": {\"pipeline\": 2}", 2);
  expect_resolve_ok_on(__LINE__, &tiny, "\"parallel\": {\"pipeline\": 3}, \"micro_batch\": 1", 3);
  expect_resolve_ok_on(__LINE__, &tiny, "\"parallel\": {\"data\": 2, \"pipeline\": 2}, \"zero\": 1", 4);
  expect_resolve_ok_on(
      __LINE__, &tiny,
      "\"parallel\": {\"pipeline\": 2}, \"schedule\": \"interleaved\", \"virtual_stages\": 2, "
      "\"partition\": [0, 1, 2, 3, 4], \"micro_batch\": 8",
      2);
  expect_resolve_error(
      __LINE__, "\"parallel\": {\"pipeline\": 2}, \"schedule\": \"interleaved\", \"virtual_stages\": 2", 2,
      "the interleaved schedule runs micro-batches in groups of pp: the accumulation steps "
      "global_batch / (dp * micro_batch) = 16 / (1 * 16) = 1 must be a multiple of the pipeline "
      "degree 2");
  expect_resolve_error(
      __LINE__, "\"parallel\": {\"data\": 2, \"pipeline\": 2}, \"zero\": 2", 4,
      "ZeRO stage 2 with pipeline parallel degree 2: ZeRO-2/3 reduce-scatter or gather every "
      "micro-batch, and a pipeline runs many micro-batches interleaved across stages; DeepSpeed "
      "refuses the same combination; use ZeRO-1 (zero1) with pipeline parallelism");
  expect_resolve_error(__LINE__, "\"parallel\": {\"pipeline\": 2}, \"zero\": 3", 2,
                       "ZeRO stage 3 with pipeline");
}

AA_TEST(resolve_refuses_an_out_of_range_struct) {
  aa_model_spec_t spec = tiny_spec();
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_TENSOR] = 0; /* would divide by zero if it were not checked */
  CHECK(aa_strategy_resolve(&s, &spec, 0) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "parallel.tensor: must be between 1 and 65536 (got 0)"));
  aa_strategy_default(&s);
  s.micro_batch = -1;
  CHECK(aa_strategy_resolve(&s, &spec, 0) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "micro_batch: must be >= 0 (got -1)"));
}

/* Expert parallelism (parallel.expert, Megatron's expert_model_parallel_size):
 * read, written only above 1, shown in the key after the micro-batch,
 * held to the data x context replicas without a model, and to the
 * model's experts with one. */
AA_TEST(expert_degree_parses_writes_keys_and_is_held_to_its_rules) {
  aa_strategy_t s;
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 4, \"expert\": 2}, \"amp\": \"bf16\"}")) return;
  CHECK(s.ep == 2 && aa_strategy_world(&s) == 4); /* no mesh axis: the world is still dp */
  CHECK_MSG(!strcmp(key_of(&s), "dp4.tp1.pp1.z0.bf16.ckpt-none.mb0.ep2"), "%s", key_of(&s));
  char *text = NULL;
  CHECK(aa_strategy_to_json(&s, &text) == 0 && text && strstr(text, "\"expert\": 2"));
  aa_strategy_t back;
  if (text && !parse_ok(&back, text)) CHECK(same(&s, &back) && back.ep == 2);
  free(text);
  expect_key("{" V1 ", \"parallel\": {\"data\": 4, \"expert\": 1}}", "dp4.tp1.pp1.z0.fp32.ckpt-none.mb0");
  aa_strategy_default(&s);
  CHECK(aa_strategy_to_json(&s, &text) == 0 && text && !strstr(text, "expert"));
  free(text);
  expect_key("{" V1 ", \"parallel\": {\"data\": 2, \"context\": 2, \"expert_model_parallel_size\": 4}}",
             "dp2.tp1.pp1.cp2.z0.fp32.ckpt-none.mb0.ep4");

  EXPECT_PARSE_ERROR(
      "{" V1 ", \"parallel\": {\"data\": 4, \"expert\": 3}}", AA_EINVAL,
      "parallel.expert: must divide data x context = 4 x 1 = 4 (expert ranks are drawn from the "
      "data-parallel replicas, as Megatron does; got 3)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"expert\": 0}}", AA_EINVAL,
                     "parallel.expert: must be between 1 and 1024 (got 0)");
  EXPECT_PARSE_ERROR("{" V1
                     ", \"parallel\": {\"data\": 2, \"expert\": 2, \"expert_model_parallel_size\": 2}}",
                     AA_EINVAL, "parallel.expert_model_parallel_size: gives parallel.expert again");

  /* Against a model: a dense one has no experts to split; an MoE one's
   * experts must divide. */
  aa_model_spec_t spec = tiny_spec();
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 2, \"expert\": 2}}")) return;
  CHECK(aa_strategy_resolve(&s, &spec, 2) == AA_EINVAL &&
        strstr(aa_last_error(),
               "expert parallel degree 2 needs mixture-of-experts layers (model.moe); tiny has none"));
  spec.arch.family[0] = '\0';
  strcpy(spec.arch.family, "llama");
  spec.arch.n_kv_head = spec.arch.n_head;
  spec.arch.rope_theta = 10000;
  spec.arch.norm_eps = 1e-5f;
  spec.arch.moe = (aa_moe_t){.experts = 6, .top_k = 2, .d_ff_expert = 64, .every = 1};
  CHECK_MSG(aa_strategy_resolve(&s, &spec, 2) == 0, "%s", aa_last_error());
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"data\": 4, \"expert\": 4}}")) return;
  CHECK(aa_strategy_resolve(&s, &spec, 4) == AA_EINVAL &&
        strstr(aa_last_error(), "expert parallel degree 4 must divide experts 6"));
}

/* Experts split over the tensor ranks (parallel.expert_tensor, Megatron's
 * expert_tensor_parallel_size): 1 or the tensor degree, written and shown
 * in the key (after the expert degree) only above 1; against a model it
 * needs experts whose width the tensor degree divides. */
AA_TEST(expert_tensor_degree_is_one_or_the_tensor_degree) {
  aa_strategy_t s;
  if (parse_ok(&s,
               "{" V1 ", \"parallel\": {\"data\": 2, \"tensor\": 2, \"expert\": 2, \"expert_tensor\": 2}}"))
    return;
  CHECK(s.etp == 2 && aa_strategy_world(&s) == 4);
  CHECK_MSG(!strcmp(key_of(&s), "dp2.tp2.pp1.z0.fp32.ckpt-none.mb0.ep2.etp2"), "%s", key_of(&s));
  char *text = NULL;
  CHECK(aa_strategy_to_json(&s, &text) == 0 && text && strstr(text, "\"expert_tensor\": 2"));
  aa_strategy_t back;
  if (text && !parse_ok(&back, text)) CHECK(same(&s, &back) && back.etp == 2);
  free(text);
  /* 1 is the default: not written, not in the key. */
  expect_key("{" V1 ", \"parallel\": {\"tensor\": 2, \"expert_tensor\": 1}}",
             "dp1.tp2.pp1.z0.fp32.ckpt-none.mb0");
  if (!parse_ok(&s, "{" V1 ", \"parallel\": {\"tensor\": 2, \"expert_tensor\": 1}}")) {
    CHECK(aa_strategy_to_json(&s, &text) == 0 && text && !strstr(text, "expert_tensor"));
    free(text);
  }
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"tensor\": 4, \"expert_tensor\": 2}}", AA_EUNSUPPORTED,
                     "parallel.expert_tensor: must be 1 or the tensor degree 4 (got 2)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"expert_tensor\": 2}}", AA_EUNSUPPORTED,
                     "parallel.expert_tensor: must be 1 or the tensor degree 1 (got 2)");
  EXPECT_PARSE_ERROR("{" V1 ", \"parallel\": {\"expert_tensor\": 0}}", AA_EINVAL,
                     "parallel.expert_tensor: must be between 1 and 65536 (got 0)");

  aa_model_spec_t spec = tiny_spec();
  if (parse_ok(&s, "{" V1 ", \"parallel\": {\"tensor\": 2, \"expert_tensor\": 2}}")) return;
  CHECK(aa_strategy_resolve(&s, &spec, 2) == AA_EINVAL &&
        strstr(aa_last_error(), "expert tensor parallel degree 2 needs mixture-of-experts layers"));
  strcpy(spec.arch.family, "llama");
  spec.arch.n_kv_head = spec.arch.n_head;
  spec.arch.rope_theta = 10000;
  spec.arch.norm_eps = 1e-5f;
  spec.arch.moe = (aa_moe_t){.experts = 4, .top_k = 2, .d_ff_expert = 63, .every = 1};
  CHECK(aa_strategy_resolve(&s, &spec, 2) == AA_EINVAL &&
        strstr(aa_last_error(), "expert tensor parallel degree 2 must divide d_ff_expert 63"));
  spec.arch.moe.d_ff_expert = 64;
  CHECK_MSG(aa_strategy_resolve(&s, &spec, 2) == 0, "%s", aa_last_error());
}

int main(void) {
  RUN(default_is_fp32_single_rank_whole_batch);
  RUN(format_and_version_alone_give_the_defaults);
  RUN(every_field_parses_as_written);
  RUN(key_follows_the_grammar);
  RUN(key_hashes_a_long_custom_cut);
  RUN(longest_key_fits);
  RUN(key_field_must_match_the_fields);
  RUN(every_field_rule_fires);
  RUN(long_provenance_text_is_refused);
  RUN(unknown_keys_are_named_with_the_allowed_ones);
  RUN(format_and_version_are_checked_first);
  RUN(syntax_errors_name_line_and_column);
  RUN(to_json_round_trips_every_field_in_fixed_order);
  RUN(save_then_load_gives_the_same_strategy);
  RUN(save_never_writes_through_a_planted_symlink);
  RUN(save_refuses_what_load_would_refuse);
  RUN(load_reports_missing_and_oversized_files);
  RUN(example_files_load);
  RUN(atorch_issue_example_maps_to_dp1_zero1_bf16_full);
  RUN(atorch_methods_map_onto_the_knobs);
  RUN(atorch_unsupported_methods_are_named_with_position);
  RUN(atorch_bad_items_and_conflicts_are_refused);
  RUN(pipeline_fields_parse_write_and_read_back);
  RUN(pipeline_aliases_mean_the_same);
  RUN(files_without_an_order_round_trip_byte_for_byte);
  RUN(order_and_rank_order_parse_write_and_read_back);
  RUN(key_shows_an_order_only_where_it_changes_the_groups);
  RUN(bad_orders_and_rank_orders_are_refused_with_the_rule);
  RUN(sequence_parallel_parses_writes_and_reads_back);
  RUN(sequence_parallel_rules_are_refused_with_the_rule);
  RUN(resolve_holds_a_rank_order_to_the_world);
  RUN(the_context_axis_shows_only_above_one);
  RUN(atorch_options_that_map_exactly_are_honoured);
  RUN(atorch_options_autoaccel_cannot_honour_are_refused_by_name);
  RUN(atorch_parallel_mode_takes_the_order_and_rank_order);
  RUN(expert_degree_parses_writes_keys_and_is_held_to_its_rules);
  RUN(expert_tensor_degree_is_one_or_the_tensor_degree);
  RUN(resolve_fills_micro_batch_and_counts_accumulation);
  RUN(every_resolve_rule_fires);
  RUN(resolve_refuses_an_out_of_range_struct);
  return aa_test_summary();
}
