/* Device profiles (strategies/profile.h): the catalogue built into the
 * binary parses and holds the datasheets' figures, a profile written as
 * JSON reads back as the same bytes, every broken field is refused with
 * its dotted path in the message, and a user's file is found by its path
 * as a built-in is by its name. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "strategies/profile.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define FLOP(p) (AA_PROFILE_FLOP_FP32 + (p))

static int builtin_named(aa_device_profile_t *out, const char *name) {
  for (size_t i = 0; i < aa_profile_builtin_count(); i++)
    if (!strcmp(aa_profile_builtin_name(i), name)) return aa_profile_builtin(out, i);
  return AA_ENOENT;
}

AA_TEST(every_builtin_profile_parses_with_sane_figures_and_sources) {
  size_t n = aa_profile_builtin_count();
  CHECK(n >= 4);
  CHECK(aa_profile_builtin_name(n) == NULL);
  aa_device_profile_t p;
  CHECK(aa_profile_builtin(&p, n) == AA_EINVAL);
  for (size_t i = 0; i < n; i++) {
    const char *name = aa_profile_builtin_name(i);
    if (i) CHECK_MSG(strcmp(aa_profile_builtin_name(i - 1), name) < 0, "%s is out of order", name);
    int rc = aa_profile_builtin(&p, i);
    CHECK_MSG(rc == 0, "%s: %s", name, aa_last_error());
    if (rc) continue;
    CHECK(!strcmp(p.name, name) && p.version == AA_PROFILE_VERSION && p.description[0]);
    CHECK(p.intra_node.link[0] && p.inter_node.link[0]);
    for (int f = 0; f < AA_PROFILE_FIELDS; f++)
      CHECK_MSG(strlen(p.source[f]) > 10, "%s: %s has no source", name, aa_profile_field_path(f));
    /* What every GPU of the catalogue has: tensor cores faster than its
     * vector units, a node's links faster than its network, and a second
     * of HBM traffic that reads its memory many times over. */
    double *flop = p.dense_flop_per_s;
    CHECK(flop[AA_PROFILE_FP32] > 0 && flop[AA_PROFILE_TF32] > flop[AA_PROFILE_FP32]);
    /* The datasheets halve their sparse figures, rounded: bf16 is twice
     * tf32 to within that rounding (989.5 against 494.5 on an H100). */
    CHECK(flop[AA_PROFILE_BF16] == flop[AA_PROFILE_FP16]);
    CHECK(fabs(flop[AA_PROFILE_BF16] / flop[AA_PROFILE_TF32] - 2) < 0.01);
    CHECK(flop[AA_PROFILE_FP8] == 0 || flop[AA_PROFILE_FP8] == 2 * flop[AA_PROFILE_BF16]);
    CHECK(p.hbm_bytes_per_s > 10.0 * (double)p.memory_bytes);
    CHECK(p.gpus_per_node == 8);
    CHECK(p.intra_node.bytes_per_s > 4 * p.inter_node.bytes_per_s);
    CHECK(p.intra_node.latency_s < p.inter_node.latency_s && p.inter_node.latency_s < 1e-4);
  }
}

AA_TEST(the_catalogue_holds_the_datasheet_figures) {
  aa_device_profile_t p;
  CHECK(builtin_named(&p, "h100-80gb") == 0);
  CHECK(p.memory_bytes == (int64_t)(80 * GIB) && p.hbm_bytes_per_s == 3.35e12);
  CHECK(p.dense_flop_per_s[AA_PROFILE_FP32] == 67e12 && p.dense_flop_per_s[AA_PROFILE_BF16] == 989.5e12);
  CHECK(p.dense_flop_per_s[AA_PROFILE_FP8] == 1979e12);
  CHECK(p.intra_node.bytes_per_s == 450e9 && p.inter_node.bytes_per_s == 50e9);
  CHECK(aa_profile_field_value(&p, AA_PROFILE_MEMORY) == 80 * GIB);
  CHECK(aa_profile_field_value(&p, AA_PROFILE_GPUS_PER_NODE) == 8);
  CHECK(aa_profile_field_value(&p, FLOP(AA_PROFILE_BF16)) == 989.5e12);
  CHECK(strstr(p.source[FLOP(AA_PROFILE_BF16)], "1,979 teraFLOPS with sparsity"));

  CHECK(builtin_named(&p, "h200-141gb") == 0);
  CHECK(p.memory_bytes == (int64_t)(141 * GIB) && p.hbm_bytes_per_s == 4.8e12);
  CHECK(p.dense_flop_per_s[AA_PROFILE_BF16] == 989.5e12);

  CHECK(builtin_named(&p, "a100-80gb") == 0);
  CHECK(p.memory_bytes == (int64_t)(80 * GIB) && p.hbm_bytes_per_s == 2.039e12);
  CHECK(p.dense_flop_per_s[AA_PROFILE_BF16] == 312e12 && p.dense_flop_per_s[AA_PROFILE_TF32] == 156e12);
  CHECK(p.dense_flop_per_s[AA_PROFILE_FP8] == 0); /* null: no FP8 tensor cores before Hopper */
  CHECK(strstr(p.source[FLOP(AA_PROFILE_FP8)], "no FP8"));
  CHECK(p.intra_node.bytes_per_s == 300e9 && p.inter_node.bytes_per_s == 25e9);

  CHECK(builtin_named(&p, "a100-40gb") == 0);
  CHECK(p.memory_bytes == (int64_t)(40 * GIB) && p.hbm_bytes_per_s == 1.555e12);
}

AA_TEST(field_paths_and_precision_names_follow_the_enums) {
  CHECK(!strcmp(aa_profile_field_path(AA_PROFILE_MEMORY), "memory_bytes"));
  CHECK(!strcmp(aa_profile_field_path(FLOP(AA_PROFILE_FP8)), "dense_flop_per_s.fp8"));
  CHECK(!strcmp(aa_profile_field_path(AA_PROFILE_INTER_LATENCY), "inter_node.latency_s"));
  CHECK(!strcmp(aa_profile_field_path(AA_PROFILE_FIELDS), "?"));
  CHECK(!strcmp(aa_profile_precision_name(AA_PROFILE_TF32), "tf32"));
  CHECK(!strcmp(aa_profile_precision_name(AA_PROFILE_PRECISIONS), "?"));
  for (int p = 0; p < AA_PROFILE_PRECISIONS; p++) {
    char want[64];
    snprintf(want, sizeof want, "dense_flop_per_s.%s", aa_profile_precision_name(p));
    CHECK(!strcmp(aa_profile_field_path(FLOP(p)), want));
  }
}

/* p as compact JSON text (malloc'd), or NULL. */
static char *profile_text(const aa_device_profile_t *p) {
  json_t *j = NULL;
  if (aa_profile_to_json(p, &j)) return NULL;
  char *text = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  return text;
}

AA_TEST(a_profile_written_as_json_reads_back_as_the_same_bytes) {
  for (size_t i = 0; i < aa_profile_builtin_count(); i++) {
    aa_device_profile_t a, b;
    CHECK(aa_profile_builtin(&a, i) == 0);
    char *text = profile_text(&a), origin[128];
    CHECK(text != NULL);
    if (!text) continue;
    snprintf(origin, sizeof origin, "%s.json", a.name);
    int rc = aa_profile_parse(&b, text, strlen(text), origin);
    CHECK_MSG(rc == 0, "%s", aa_last_error());
    CHECK_MSG(rc == 0 && !memcmp(&a, &b, sizeof a), "%s does not read back the same", a.name);
    /* A precision the device lacks is written as the file has it. */
    if (a.dense_flop_per_s[AA_PROFILE_FP8] == 0) CHECK(strstr(text, "\"fp8\":{\"value\":null,"));
    free(text);
  }
}

/* The h100-80gb profile as a JSON object (the caller's), or NULL. */
static json_t *h100_json(void) {
  aa_device_profile_t p;
  json_t *j = NULL;
  if (builtin_named(&p, "h100-80gb") || aa_profile_to_json(&p, &j)) return NULL;
  return j;
}

/* Sets the member at the dotted path of root to the JSON text value, or
 * removes it when value is NULL. */
static void mutate(json_t *root, const char *path, const char *value) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *o = root;
  char *key = buf, *dot;
  while ((dot = strchr(key, '.'))) {
    *dot = '\0';
    o = json_object_get(o, key);
    key = dot + 1;
  }
  if (!value)
    json_object_del(o, key);
  else
    json_object_set_new(o, key, json_loads(value, JSON_DECODE_ANY, NULL));
}

/* A profile text that must be refused with code and a message holding
 * want; out must be left as it was. */
static void refused_text(const char *text, const char *origin, int code, const char *want) {
  aa_device_profile_t out;
  out.version = -7;
  int rc = aa_profile_parse(&out, text, strlen(text), origin);
  CHECK_MSG(rc == code, "rc %d, want %d, for %s", rc, code, text);
  CHECK_MSG(strstr(aa_last_error(), want) != NULL, "got \"%s\", want \"%s\"", aa_last_error(), want);
  CHECK(out.version == -7);
}

AA_TEST(a_broken_profile_is_refused_with_the_field_named) {
  static const struct {
    const char *path, *value, *want;
  } cases[] = {
      {"memory_bytes.source", NULL, "h100-80gb.json: memory_bytes.source: required field is missing"},
      {"dense_flop_per_s.bf16.source", "\"\"",
       "h100-80gb.json: dense_flop_per_s.bf16.source: must not be empty"},
      {"dense_flop_per_s.tf32.source", "\"a\\nb\"", "dense_flop_per_s.tf32.source: must not contain control"},
      {"hbm_bytes_per_s.unit", "\"TB/s\"", "hbm_bytes_per_s.unit: unknown key (allowed: value, source)"},
      {"speed", "1", "h100-80gb.json: speed: unknown key (allowed: version, name, description, memory_bytes"},
      {"dense_flop_per_s.fp4", "{}",
       "dense_flop_per_s.fp4: unknown key (allowed: fp32, tf32, bf16, fp16, fp8)"},
      {"inter_node.bytes_per_s.value", "-5",
       "inter_node.bytes_per_s.value: must be in [1e+06, 1e+14] (got -5)"},
      {"hbm_bytes_per_s.value", "3.35e21", "hbm_bytes_per_s.value: must be in [1e+09, 1e+15] (got 3.35e+21)"},
      {"intra_node.latency_s.value", "0", "intra_node.latency_s.value: must be in [1e-09, 0.1] (got 0)"},
      {"dense_flop_per_s.fp32.value", "null", "dense_flop_per_s.fp32.value: must not be null"},
      {"memory_bytes.value", "null", "memory_bytes.value: must not be null"},
      {"dense_flop_per_s.fp8.value", "\"1979e12\"",
       "dense_flop_per_s.fp8.value: must be a number (got string)"},
      {"dense_flop_per_s.fp8.value", NULL, "dense_flop_per_s.fp8.value: required field is missing"},
      {"memory_bytes.value", "80e9",
       "memory_bytes.value: must be an integer (got real number 80000000000.0)"},
      {"memory_bytes.value", "80",
       "memory_bytes.value: must be between 1073741824 and 17592186044416 (got 80)"},
      {"gpus_per_node.value", "0", "gpus_per_node.value: must be between 1 and 1024 (got 0)"},
      {"intra_node.latency_s", "3.4e-6", "intra_node.latency_s: must be an object {\"value\""},
      {"intra_node.link", NULL, "intra_node.link: required field is missing"},
      {"inter_node", NULL, "h100-80gb.json: inter_node: required field is missing"},
      {"description", "7", "description: must be a string (got integer)"},
      {"version", "2", "h100-80gb.json: version: version 2 is not supported (this build reads 1)"},
      {"version", "\"1\"", "version: must be an integer (got string)"},
      {"name", "\"h100\"", "name: must be the file's name without .json, \"h100-80gb\" (got \"h100\")"},
      {"name", "\"a/b\"", "name: must be 1 to 63 letters, digits"},
      {"name", "\"-h100\"", "name: must be 1 to 63 letters, digits"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *j = h100_json();
    CHECK(j != NULL);
    if (!j) return;
    mutate(j, cases[i].path, cases[i].value);
    char *text = json_dumps(j, JSON_COMPACT);
    refused_text(text, "dir/h100-80gb.json", AA_EINVAL, cases[i].want);
    free(text);
    json_decref(j);
  }
  /* The file's name is checked whatever directory it is in, and only for
   * a .json origin. */
  json_t *j = h100_json();
  char *text = json_dumps(j, JSON_COMPACT);
  refused_text(
      text, "h200-141gb.json", AA_EINVAL,
      "h200-141gb.json: name: must be the file's name without .json, \"h200-141gb\" (got \"h100-80gb\")");
  aa_device_profile_t p;
  CHECK_MSG(aa_profile_parse(&p, text, strlen(text), "from the planner") == 0, "%s", aa_last_error());
  CHECK_MSG(aa_profile_parse(&p, text, strlen(text), NULL) == 0, "%s", aa_last_error());
  free(text);
  json_decref(j);
  /* Lengths are bounded: a source, and the file as a whole before it is
   * parsed. */
  j = h100_json();
  char *longer = malloc(AA_PROFILE_SOURCE_MAX + 3);
  memset(longer + 1, 'x', AA_PROFILE_SOURCE_MAX);
  longer[0] = longer[AA_PROFILE_SOURCE_MAX + 1] = '"';
  longer[AA_PROFILE_SOURCE_MAX + 2] = '\0';
  mutate(j, "hbm_bytes_per_s.source", longer);
  text = json_dumps(j, JSON_COMPACT);
  refused_text(text, NULL, AA_EINVAL, "<string>: hbm_bytes_per_s.source: must be at most 511 bytes long");
  free(text);
  free(longer);
  json_decref(j);
  char *big = malloc(AA_PROFILE_MAX_BYTES + 8);
  memset(big, ' ', AA_PROFILE_MAX_BYTES + 7);
  memcpy(big, "{}", 2);
  big[AA_PROFILE_MAX_BYTES + 7] = '\0';
  refused_text(big, "big.json", AA_EINVAL,
               "big.json: too large (65543 bytes; a device profile may be at most 65536");
  free(big);
  refused_text("[1]", NULL, AA_EINVAL, "<string>: must be a JSON object, a device profile (got array)");
  refused_text("", "x.json", AA_EPARSE, "x.json: empty");
  refused_text("{\"version\": 1, \"version\": 1}", "x.json", AA_EPARSE, "x.json:1:");
}

/* Writes text to dir/name; the path in path (PATH_MAX). */
static int write_file(char *path, size_t cap, const char *dir, const char *name, const char *text) {
  snprintf(path, cap, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

AA_TEST(a_user_file_is_found_by_its_path_and_a_builtin_by_its_name) {
  char dir[] = "/tmp/aa_profile_XXXXXX", path[512], other[512], bad[512];
  CHECK(mkdtemp(dir) != NULL);
  json_t *j = h100_json();
  mutate(j, "name", "\"my-gpu\"");
  mutate(j, "gpus_per_node.value", "4");
  char *text = json_dumps(j, JSON_INDENT(2));
  CHECK(write_file(path, sizeof path, dir, "my-gpu.json", text) == 0);
  CHECK(write_file(other, sizeof other, dir, "other.json", text) == 0);
  mutate(j, "name", "\"bad\"");
  mutate(j, "intra_node.bytes_per_s.value", "-1");
  free(text);
  text = json_dumps(j, JSON_INDENT(2));
  CHECK(write_file(bad, sizeof bad, dir, "bad.json", text) == 0);
  free(text);
  json_decref(j);

  aa_device_profile_t p;
  CHECK_MSG(aa_profile_find(&p, path) == 0, "%s", aa_last_error());
  CHECK(!strcmp(p.name, "my-gpu") && p.gpus_per_node == 4);
  CHECK_MSG(aa_profile_load(&p, path) == 0, "%s", aa_last_error());
  CHECK_ERR(aa_profile_find(&p, other), AA_EINVAL, "other.json: name: must be the file's name without .json");
  CHECK_ERR(aa_profile_find(&p, bad), AA_EINVAL, "bad.json: intra_node.bytes_per_s.value: must be in");
  /* A name is never a file, even one in the working directory. */
  CHECK_ERR(aa_profile_find(&p, "my-gpu"), AA_ENOENT,
            "no device profile named \"my-gpu\" (built in: a100-40gb, a100-80gb, h100-80gb, h200-141gb");
  CHECK_ERR(aa_profile_find(&p, "h100\x1b[2J"), AA_ENOENT, "named \"h100\\x1b[2J\"");
  snprintf(path, sizeof path, "%s/missing.json", dir);
  CHECK_ERR(aa_profile_find(&p, path), AA_ENOENT, "missing.json");
  CHECK(aa_profile_find(&p, "h200-141gb") == 0 && !strcmp(p.name, "h200-141gb"));

  CHECK(aa_profile_is_path("./h100-80gb") && aa_profile_is_path("gpu.json") && aa_profile_is_path("/x"));
  CHECK(!aa_profile_is_path("h100-80gb") && !aa_profile_is_path("json") && !aa_profile_is_path("a.jso"));

  unlink(bad);
  unlink(other);
  snprintf(path, sizeof path, "%s/my-gpu.json", dir);
  unlink(path);
  CHECK(rmdir(dir) == 0);
}

/* A job on a pool of GPUs finds its device's profile by the fingerprint
 * its executors report (nvidia-smi's names, memory in MiB as the driver
 * gives it). */
AA_TEST(a_device_fingerprint_finds_its_profile) {
  static const struct {
    const char *device, *want; /* want NULL: none */
  } cases[] = {
      {"cuda:NVIDIA H100 80GB HBM3:81559MiB", "h100-80gb"},
      {"cuda:NVIDIA A100-SXM4-80GB:81920MiB", "a100-80gb"},
      {"cuda:NVIDIA A100-SXM4-40GB:40536MiB", "a100-40gb"},
      {"cuda:NVIDIA H200:143771MiB", "h200-141gb"},
      {"cuda:NVIDIA H100 PCIe:81559MiB", NULL},        /* another board */
      {"cuda:NVIDIA GeForce RTX 4090:24564MiB", NULL}, /* not in the catalogue */
      {"cuda:NVIDIA A100-SXM4-80GB:20000MiB", NULL},   /* a MIG slice: not the device */
      {"cpu:AMD EPYC 7B13 (1 threads):24000MiB", NULL},
      {"cuda:NVIDIA H100 80GB HBM3", NULL}, /* no memory */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aa_device_profile_t p;
    int rc = aa_profile_for_device(&p, cases[i].device);
    if (cases[i].want)
      CHECK_MSG(rc == 0 && !strcmp(p.name, cases[i].want), "%s: rc %d %s", cases[i].device, rc,
                rc ? aa_last_error() : p.name);
    else
      CHECK_MSG(rc == AA_ENOENT, "%s: rc %d %s", cases[i].device, rc, rc ? "" : p.name);
  }
}

int main(void) {
  RUN(every_builtin_profile_parses_with_sane_figures_and_sources);
  RUN(the_catalogue_holds_the_datasheet_figures);
  RUN(field_paths_and_precision_names_follow_the_enums);
  RUN(a_profile_written_as_json_reads_back_as_the_same_bytes);
  RUN(a_broken_profile_is_refused_with_the_field_named);
  RUN(a_user_file_is_found_by_its_path_and_a_builtin_by_its_name);
  RUN(a_device_fingerprint_finds_its_profile);
  return aa_test_summary();
}
