/* Weights in and out (engine/import.h, engine/safetensors.h).
 *
 * The checks against PyTorch use files that tests/reference/make_weights.py
 * writes into a temporary directory at start (Debian's /usr/bin/python3
 * with python3-torch): safetensors F32/BF16/F16, with and without the
 * "transformer." prefix, one file and shards, llm.c version 3 and 5, the
 * parameters each must import to (rounded by torch, transposed by torch)
 * and the logits of a float64 forward written as Hugging Face's GPT-2
 * computes. Without torch those tests are skipped with the reason. The
 * rest (hostile headers, name and shape mismatches, an untied head,
 * export then import) need no Python: their files are written here. */
#include "aa_test.h"

#include "common/half.h"
#include "engine/checkpoint.h"
#include "engine/import.h"
#include "engine/safetensors.h"

#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];         /* this run's directory */
static char wdir[300];        /* make_weights.py's output, inside tmp */
static char py_skip[600];     /* non-empty: why the PyTorch files are missing */
static aa_model_spec_t wspec; /* wdir/model.json */

#define NEED_WEIGHTS()                                                                                       \
  do {                                                                                                       \
    if (py_skip[0]) SKIP("%s", py_skip);                                                                     \
  } while (0)

static void path_in(char *out, size_t cap, const char *dir, const char *name) {
  snprintf(out, cap, "%s/%s", dir, name);
}

/* The whole file at path with a NUL after it (so text can be printed;
 * caller frees), or NULL. */
static void *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (n < 0) n = 0;
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return b;
}

static aa_gpt_t *model(const aa_arch_t *a, int B, int T) {
  aa_gpt_t *m = NULL;
  int rc = aa_gpt_create(&m, a, aa_ops_cpu(), B, T, NULL);
  CHECK_MSG(rc == 0, "create: %s", aa_last_error());
  return m;
}

static aa_arch_t tiny_arch(int n_layer, int d_ff) {
  aa_arch_t a = {.n_layer = n_layer, .n_head = 2, .d_model = 8, .d_ff = d_ff, .seq_len = 4, .vocab_size = 11};
  strcpy(a.family, "gpt2");
  return a;
}

/* Imports src into a fresh model of wspec and checks its parameters are
 * exactly the floats in expect_file (a make_weights.py params_*.bin). */
static void check_import(const char *src_name, const char *expect_file, aa_import_format_t fmt,
                         const char *dtypes) {
  char src[512], exp[512];
  path_in(src, sizeof src, wdir, src_name);
  path_in(exp, sizeof exp, wdir, expect_file);
  aa_gpt_t *m = model(&wspec.arch, 1, 1);
  if (!m) return;
  aa_import_info_t info;
  int rc = aa_import_weights(m, src, &info);
  CHECK_MSG(rc == 0, "import %s: %s", src_name, aa_last_error());
  size_t len = 0;
  float *want = slurp(exp, &len);
  CHECK(want && len == m->n_params * sizeof(float));
  if (!rc && want && len == m->n_params * sizeof(float)) {
    size_t bad = 0, first = 0;
    const float *got = m->params.data;
    for (size_t i = 0; i < m->n_params; i++)
      if (memcmp(&got[i], &want[i], sizeof(float)) && !bad++) first = i;
    CHECK_MSG(bad == 0, "%s: %zu of %zu parameters differ, first at %zu: %.9g vs %.9g", src_name, bad,
              m->n_params, first, got[first], want[first]);
    CHECK(info.format == fmt);
    CHECK_MSG(!strcmp(info.dtypes, dtypes), "dtypes %s, want %s", info.dtypes, dtypes);
  }
  free(want);
  aa_gpt_free(m);
}

AA_TEST(f32_safetensors_imports_bit_exact_with_buffers_and_tied_head) {
  NEED_WEIGHTS();
  check_import("f32.safetensors", "params_f32.bin", AA_IMPORT_SAFETENSORS, "F32");
  aa_gpt_t *m = model(&wspec.arch, 1, 1);
  char src[512];
  path_in(src, sizeof src, wdir, "f32.safetensors");
  aa_import_info_t info;
  CHECK(m && aa_import_weights(m, src, &info) == 0);
  CHECK_MSG(info.ignored == 2 * wspec.arch.n_layer + 1, "ignored %d", info.ignored);
  CHECK(info.files == 1 && info.tensors == m->n_tensors);
  aa_gpt_free(m);
}

AA_TEST(bf16_safetensors_with_transformer_prefix_imports_torch_rounding) {
  NEED_WEIGHTS();
  check_import("bf16.safetensors", "params_bf16.bin", AA_IMPORT_SAFETENSORS, "BF16");
}

AA_TEST(f16_safetensors_imports_torch_rounding) {
  NEED_WEIGHTS();
  check_import("f16.safetensors", "params_f16.bin", AA_IMPORT_SAFETENSORS, "F16");
}

AA_TEST(sharded_index_and_its_directory_import) {
  NEED_WEIGHTS();
  check_import("sharded/model.safetensors.index.json", "params_f32.bin", AA_IMPORT_SHARDED, "F32");
  check_import("sharded", "params_f32.bin", AA_IMPORT_SHARDED, "F32");
}

AA_TEST(llmc_fp32_and_bf16_import_the_same_weights) {
  NEED_WEIGHTS();
  check_import("gpt2_f32.bin", "params_f32.bin", AA_IMPORT_LLMC, "F32");
  check_import("gpt2_bf16.bin", "params_bf16.bin", AA_IMPORT_LLMC, "BF16");
}

/* The n logits got against PyTorch's float64 want within test_reference.c's
 * tolerance (atol 1e-6, rtol 1e-4: float32 rounding), the worst ratio
 * printed under `what`. */
static void check_logits(const char *what, const float *got, const float *want, size_t n) {
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < n; i++) {
    double tol = 1e-6 + 1e-4 * fabs(want[i]), r = fabs(got[i] - want[i]) / tol;
    if (r > 1) bad++;
    if (r > worst_ratio) worst_ratio = r, worst = i;
  }
  fprintf(stderr, "  %s: worst error/tolerance %.3f at %zu (%.9g vs %.9g)\n", what, worst_ratio, worst,
          got[worst], want[worst]);
  CHECK_MSG(bad == 0, "%zu of %zu logits differ", bad, n);
}

/* The logits of the imported model against PyTorch's float64 forward of
 * the same weights in Hugging Face's layout (Conv1D: x @ W + b). The
 * weights have the magnitudes of tests/reference/gpt_tiny.fixture, so the
 * tolerance is test_reference.c's (atol 1e-6, rtol 1e-4: float32
 * rounding); a wrong transpose or q/k/v order moves logits by O(0.1). */
AA_TEST(logits_after_import_match_pytorch) {
  NEED_WEIGHTS();
  char src[512], lp[512];
  path_in(src, sizeof src, wdir, "f32.safetensors");
  path_in(lp, sizeof lp, wdir, "logits.bin");
  const int B = 2, T = wspec.arch.seq_len, V = wspec.arch.vocab_size;
  size_t len = 0, n = (size_t)B * T * V;
  unsigned char *ref = slurp(lp, &len);
  CHECK(ref && len == (size_t)B * T * 4 + n * 4);
  aa_gpt_t *m = model(&wspec.arch, B, T);
  if (!ref || !m || len != (size_t)B * T * 4 + n * 4) goto done;
  CHECK_MSG(aa_import_weights(m, src, NULL) == 0, "import: %s", aa_last_error());
  int32_t *inputs = (int32_t *)ref;
  const float *want = (const float *)(ref + (size_t)B * T * 4);
  CHECK_MSG(aa_gpt_forward(m, inputs, NULL, NULL) == 0, "forward: %s", aa_last_error());
  check_logits("logits", aa_gpt_logits(m), want, n);
done:
  free(ref);
  aa_gpt_free(m);
}

/* Export then import: F32 gives back every bit; BF16 and F16 round as
 * torch rounds (make_weights.py's params_bf16/f16.bin). */
AA_TEST(export_then_import_is_lossless_in_f32_and_rounds_as_torch) {
  NEED_WEIGHTS();
  char src[512], out[512];
  path_in(src, sizeof src, wdir, "f32.safetensors");
  aa_gpt_t *m = model(&wspec.arch, 1, 1);
  CHECK(m && aa_import_weights(m, src, NULL) == 0);
  static const struct {
    aa_dtype_t d;
    const char *file, *expect, *name;
  } cases[] = {{AA_F32, "x_f32.safetensors", "params_f32.bin", "F32"},
               {AA_BF16, "x_bf16.safetensors", "params_bf16.bin", "BF16"},
               {AA_F16, "x_f16.safetensors", "params_f16.bin", "F16"}};
  for (int i = 0; m && i < 3; i++) {
    path_in(out, sizeof out, wdir, cases[i].file);
    CHECK_MSG(aa_export_weights(m, out, cases[i].d) == 0, "export: %s", aa_last_error());
    check_import(cases[i].file, cases[i].expect, AA_IMPORT_SAFETENSORS, cases[i].name);
  }
  aa_gpt_free(m);
}

/* The checkpoint written from an import loads as init_weights does. */
AA_TEST(imported_checkpoint_loads_back) {
  NEED_WEIGHTS();
  char src[512], ck[512];
  path_in(src, sizeof src, wdir, "bf16.safetensors");
  path_in(ck, sizeof ck, tmp, "imported.ckpt");
  aa_gpt_t *m = model(&wspec.arch, 1, 1), *m2 = model(&wspec.arch, 1, 1);
  CHECK(m && m2 && aa_import_weights(m, src, NULL) == 0);
  CHECK_MSG(aa_ckpt_save(ck, m, NULL, NULL) == 0, "save: %s", aa_last_error());
  CHECK_MSG(aa_ckpt_load(ck, m2, NULL, NULL) == 0, "load: %s", aa_last_error());
  CHECK(m && m2 && !memcmp(m->params.data, m2->params.data, m->n_params * sizeof(float)));
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* --- files written here: mismatches ---------------------------------------- */

/* A model of a with seeded weights exported (F32) to tmp/name. */
static aa_gpt_t *exported(const aa_arch_t *a, const char *name, char *path, size_t cap) {
  path_in(path, cap, tmp, name);
  aa_gpt_t *m = model(a, 1, 1);
  if (!m) return NULL;
  CHECK(aa_gpt_init_weights(m, 7) == 0);
  CHECK_MSG(aa_export_weights(m, path, AA_F32) == 0, "export: %s", aa_last_error());
  return m;
}

/* Imports path into a model of a and expects rc with want in the message. */
static void expect_import_error(const aa_arch_t *a, const char *path, int rc_want, const char *want) {
  aa_gpt_t *m = model(a, 1, 1);
  if (!m) return;
  int rc = aa_import_weights(m, path, NULL);
  CHECK_MSG(rc == rc_want && strstr(aa_last_error(), want), "rc %d (want %d): '%s' (want '%s')", rc, rc_want,
            aa_last_error(), want);
  aa_gpt_free(m);
}

AA_TEST(missing_extra_and_misshapen_tensors_are_named) {
  aa_arch_t a = tiny_arch(2, 32);
  char p[512];
  aa_gpt_t *m = exported(&a, "two.safetensors", p, sizeof p);
  aa_arch_t three = tiny_arch(3, 32), one = tiny_arch(1, 32), wide = tiny_arch(2, 24), vocab = a;
  vocab.vocab_size = 12;
  expect_import_error(&three, p, AA_EINVAL, "missing tensor 'h.2.ln_1.weight'");
  expect_import_error(&one, p, AA_EINVAL,
                      "tensor 'h.1.ln_1.weight' belongs to a block the model does not have");
  expect_import_error(&wide, p, AA_EINVAL,
                      "tensor 'h.0.mlp.c_fc.weight' has shape [8, 32] but the model needs [8, 24]");
  expect_import_error(&vocab, p, AA_EINVAL,
                      "tensor 'wte.weight' has shape [11, 8] but the model needs [12, 8]");
  aa_gpt_free(m);
}

/* The entries of a file to write: the n - 1 tensors of tmp/base.safetensors
 * (names[i], values read back from it) and a last entry filled with value,
 * or with base's tensor names[n - 1] when value is 0. */
typedef struct {
  int n;
  aa_st_entry_t e[64];
  char names[64][64];
  float value;
} mk_t;

static int mk_fill(int i, float *dst, size_t numel, void *data) {
  mk_t *k = data;
  if (i == k->n - 1 && k->value != 0) {
    for (size_t j = 0; j < numel; j++)
      dst[j] = k->value;
    return 0;
  }
  /* The first n-1 entries are the model's, read back from its export. */
  aa_st_file_t *f;
  char p[512];
  path_in(p, sizeof p, tmp, "base.safetensors");
  int rc = aa_st_open(&f, p);
  if (rc) return rc;
  rc = aa_st_read_f32(f, aa_st_find(f, k->names[i]), dst);
  aa_st_close(f);
  return rc;
}

AA_TEST(untied_head_is_refused_and_tied_head_accepted) {
  aa_arch_t a = tiny_arch(1, 16);
  char base[512], p[512];
  aa_gpt_t *m = exported(&a, "base.safetensors", base, sizeof base);
  if (!m) return;
  aa_st_file_t *f = NULL;
  CHECK(aa_st_open(&f, base) == 0);
  if (!f) goto done;
  mk_t k = {0};
  for (int i = 0; i < f->n && i < 63; i++) {
    snprintf(k.names[i], sizeof k.names[i], "%.63s", f->tensors[i].name);
    k.e[i].name = k.names[i];
    k.e[i].ndim = f->tensors[i].ndim;
    for (int d = 0; d < f->tensors[i].ndim; d++)
      k.e[i].shape[d] = f->tensors[i].shape[d];
  }
  k.n = f->n + 1;
  aa_st_close(f);
  snprintf(k.names[k.n - 1], sizeof k.names[0], "lm_head.weight");
  k.e[k.n - 1] = (aa_st_entry_t){.name = k.names[k.n - 1], .ndim = 2, .shape = {a.vocab_size, a.d_model}};
  k.value = 0.5f;
  path_in(p, sizeof p, tmp, "untied.safetensors");
  CHECK_MSG(aa_st_write(p, AA_F32, k.e, k.n, mk_fill, &k) == 0, "write: %s", aa_last_error());
  expect_import_error(&a, p, AA_EINVAL, "tensor 'lm_head.weight' differs from 'wte.weight'");
  /* The same head holding wte's values is a tied head: skipped. */
  snprintf(k.names[k.n - 1], sizeof k.names[0], "wte.weight");
  k.value = 0;
  path_in(p, sizeof p, tmp, "tied.safetensors");
  k.e[k.n - 1].name = "lm_head.weight";
  CHECK_MSG(aa_st_write(p, AA_F32, k.e, k.n, mk_fill, &k) == 0, "write: %s", aa_last_error());
  aa_gpt_t *m2 = model(&a, 1, 1);
  aa_import_info_t info;
  CHECK_MSG(m2 && aa_import_weights(m2, p, &info) == 0, "import: %s", aa_last_error());
  CHECK(m2 && info.ignored == 1 && !memcmp(m->params.data, m2->params.data, m->n_params * sizeof(float)));
  aa_gpt_free(m2);
  /* A tensor twice, under both spellings. */
  snprintf(k.names[k.n - 1], sizeof k.names[0], "wte.weight");
  k.e[k.n - 1].name = "transformer.wte.weight";
  path_in(p, sizeof p, tmp, "twice.safetensors");
  CHECK(aa_st_write(p, AA_F32, k.e, k.n, mk_fill, &k) == 0);
  expect_import_error(&a, p, AA_EINVAL, "tensor 'wte.weight' appears twice");
  /* A name that is no GPT-2 weight. */
  k.e[k.n - 1].name = "h.0.attn.q_proj.weight";
  k.value = 1;
  path_in(p, sizeof p, tmp, "foreign.safetensors");
  CHECK(aa_st_write(p, AA_F32, k.e, k.n, mk_fill, &k) == 0);
  expect_import_error(&a, p, AA_EINVAL, "unexpected tensor 'h.0.attn.q_proj.weight'");
done:
  aa_gpt_free(m);
}

/* --- hostile safetensors headers ---------------------------------------------- */

/* Writes tmp/hostile.safetensors: length (the declared header length, or
 * the JSON's own when ~0), the JSON, then data_len bytes of data. */
static const char *hostile(uint64_t length, const char *json, size_t data_len) {
  static char p[512];
  path_in(p, sizeof p, tmp, "hostile.safetensors");
  FILE *f = fopen(p, "wb");
  if (!f) return p;
  unsigned char len8[8];
  aa_put_le64(len8, length == ~0ull ? strlen(json) : length);
  fwrite(len8, 1, 8, f);
  fwrite(json, 1, strlen(json), f);
  for (size_t i = 0; i < data_len; i++)
    fputc(0, f);
  fclose(f);
  return p;
}

static void expect_open_error(const char *path, int rc_want, const char *want) {
  aa_st_file_t *f = NULL;
  int rc = aa_st_open(&f, path);
  CHECK_MSG(rc == rc_want && !f && strstr(aa_last_error(), want), "rc %d (want %d): '%s' (want '%s')", rc,
            rc_want, aa_last_error(), want);
  aa_st_close(f);
}

#define T1(dtype, shape, b, e)                                                                               \
  "{\"w\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}}"

AA_TEST(hostile_headers_are_clear_errors) {
  const uint64_t huge = 1ull << 40;
  expect_open_error(hostile(huge, "{}", 0), AA_EFORMAT,
                    "header length 1099511627776 is over the 104857600-byte limit");
  expect_open_error(hostile(~0ull - 1, "{}", 0), AA_EFORMAT, "is over the");
  expect_open_error(hostile(4096, "{}", 0), AA_EFORMAT, "header length 4096 but only 2 bytes follow");
  expect_open_error(hostile(~0ull, "{\"w\":", 0), AA_EFORMAT, "header JSON");
  expect_open_error(hostile(~0ull, "[1,2]", 0), AA_EFORMAT, "not a JSON object");
  expect_open_error(hostile(~0ull, "{\"w\":1}", 0), AA_EFORMAT, "tensor 'w': entry is not a JSON object");
  expect_open_error(hostile(~0ull, "{\"w\":{},\"w\":{}}", 0), AA_EFORMAT, "duplicate");
  expect_open_error(hostile(~0ull, T1("F33", "[2]", 0, 8), 8), AA_EFORMAT,
                    "tensor 'w': unknown dtype \"F33\"");
  expect_open_error(hostile(~0ull, T1("F32", "[3]", 0, 8), 8), AA_EFORMAT,
                    "tensor 'w': data_offsets [0, 8) hold 8 bytes but F32 of 3 elements needs 12");
  expect_open_error(hostile(~0ull, T1("F32", "[4611686018427387904,8]", 0, 8), 8), AA_EFORMAT,
                    "shape overflows 64 bits");
  expect_open_error(hostile(~0ull, T1("F32", "[-2]", 0, 8), 8), AA_EFORMAT, "shape[0] is not a non-negative");
  expect_open_error(hostile(~0ull, T1("F32", "[2]", 8, 0), 8), AA_EFORMAT, "0 <= begin <= end");
  expect_open_error(hostile(~0ull, T1("F32", "[100]", 0, 400), 16), AA_EFORMAT,
                    "data_offsets [0, 400) end past the data section's 16 bytes");
  expect_open_error(hostile(~0ull, T1("F32", "[2]", 0, 8), 4), AA_EFORMAT,
                    "end past the data section's 4 bytes");
  expect_open_error(hostile(~0ull, T1("F32", "[2]", 0, 8), 12), AA_EFORMAT,
                    "4 bytes after the last tensor's data");
  expect_open_error(hostile(~0ull, T1("F32", "[2]", 4, 12), 12), AA_EFORMAT, "leaving a gap after byte 0");
  expect_open_error(hostile(~0ull,
                            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                            12),
                    AA_EFORMAT, "tensor 'b': data_offsets [4, 12) overlap tensor 'a''s [0, 8)");
  expect_open_error(
      hostile(~0ull, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8),
      AA_EFORMAT, "unknown key 'x'");
  expect_open_error(hostile(~0ull, "{\"__metadata__\":{\"a\":1}}", 0), AA_EFORMAT,
                    "__metadata__ 'a' is not a string");
  /* Through the import too: the error reaches the caller, named. */
  aa_arch_t a = tiny_arch(1, 16);
  expect_import_error(&a, hostile(~0ull, T1("F32", "[2]", 0, 8), 4), AA_EFORMAT, "end past the data section");
  /* A valid file: a scalar, an I32 tensor refused on read, and metadata. */
  const char *ok =
      hostile(~0ull,
              "{\"__metadata__\":{\"format\":\"pt\"},\"s\":{\"dtype\":\"F32\",\"shape\":[],"
              "\"data_offsets\":[0,4]},\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              8);
  aa_st_file_t *f = NULL;
  CHECK_MSG(aa_st_open(&f, ok) == 0, "open: %s", aa_last_error());
  if (f) {
    float x[1];
    CHECK(f->n == 2 && aa_st_find(f, "s") && aa_st_find(f, "s")->numel == 1);
    CHECK(aa_st_read_f32(f, aa_st_find(f, "s"), x) == 0 && x[0] == 0);
    CHECK(aa_st_read_f32(f, aa_st_find(f, "i"), x) == AA_EUNSUPPORTED);
    aa_st_close(f);
  }
}

/* An llm.c file whose header or size is wrong. */
AA_TEST(llmc_bad_header_and_size_are_clear_errors) {
  aa_arch_t a = tiny_arch(1, 32);
  char p[512];
  path_in(p, sizeof p, tmp, "bad_llmc.bin");
  int32_t h[256] = {AA_LLMC_MAGIC, 3, a.seq_len, a.vocab_size, a.n_layer, a.n_head, a.d_model, 16};
  static const struct {
    int field, value, rc;
    const char *want;
  } cases[] = {{1, 4, AA_EFORMAT, "llm.c checkpoint version 4"},
               {6, 16, AA_EINVAL, "llm.c header channels is 16 but the model's d_model is 8"},
               {7, 5, AA_EFORMAT, "padded_vocab_size 5 is not in"},
               {0, AA_LLMC_MAGIC, AA_EFORMAT, "an llm.c checkpoint of this model (version 3) has"}};
  for (int i = 0; i < 4; i++) {
    int32_t hh[256];
    memcpy(hh, h, sizeof hh);
    hh[cases[i].field] = cases[i].value;
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(hh, sizeof hh, 1, f) == 1);
    if (f) fclose(f);
    expect_import_error(&a, p, cases[i].rc, cases[i].want);
  }
}

AA_TEST(export_then_import_round_trips_without_python) {
  aa_arch_t a = tiny_arch(2, 32);
  char p[512];
  aa_gpt_t *m = exported(&a, "rt.safetensors", p, sizeof p);
  aa_gpt_t *m2 = model(&a, 1, 1);
  CHECK_MSG(m && m2 && aa_import_weights(m2, p, NULL) == 0, "import: %s", aa_last_error());
  CHECK(m && m2 && !memcmp(m->params.data, m2->params.data, m->n_params * sizeof(float)));
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* Writes text to tmp/name; returns the path (static). */
static const char *text_file(const char *name, const char *text) {
  static char p[512];
  path_in(p, sizeof p, tmp, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  return p;
}

/* Shard indexes written here, one shard: a valid one, then each way one
 * can be wrong. */
AA_TEST(shard_index_without_python_and_its_errors) {
  aa_arch_t a = tiny_arch(1, 16);
  char p[512];
  aa_gpt_t *m = exported(&a, "idx.safetensors", p, sizeof p);
  aa_st_file_t *f = NULL;
  CHECK(m && aa_st_open(&f, p) == 0);
  if (!f) goto done;
  char map[8192] = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {";
  for (int i = 0; i < f->n; i++)
    snprintf(map + strlen(map), sizeof map - strlen(map), "%s\"%s\": \"idx.safetensors\"", i ? ", " : "",
             f->tensors[i].name);
  strcat(map, "}}");
  aa_st_close(f);
  aa_gpt_t *m2 = model(&a, 1, 1);
  aa_import_info_t info;
  CHECK_MSG(m2 && aa_import_weights(m2, text_file("good.index.json", map), &info) == 0, "import: %s",
            aa_last_error());
  CHECK(m2 && info.format == AA_IMPORT_SHARDED && info.files == 1 &&
        !memcmp(m->params.data, m2->params.data, m->n_params * sizeof(float)));
  aa_gpt_free(m2);
  expect_import_error(&a,
                      text_file("a.index.json", "{\"weight_map\": {\"wte.weight\": \"../idx.safetensors\"}}"),
                      AA_EFORMAT, "weight_map['wte.weight'] must be a plain file name");
  expect_import_error(&a,
                      text_file("b.index.json", "{\"weight_map\": {\"wte.weight\": \"gone.safetensors\"}}"),
                      AA_ENOENT, "gone.safetensors: cannot open");
  expect_import_error(&a, text_file("c.index.json", "{\"weight_map\": {\"foo\": \"idx.safetensors\"}}"),
                      AA_EFORMAT,
                      "weight_map puts tensor 'foo' in idx.safetensors, which has no such tensor");
  expect_import_error(&a, text_file("d.index.json", "{\"weight_map\": {}}"), AA_EFORMAT, "non-empty object");
  expect_import_error(
      &a, text_file("e.index.json", "{\"weight_map\": {\"wte.weight\": \"idx.safetensors\"}, \"x\": 1}"),
      AA_EFORMAT, "unknown key 'x'");
  expect_import_error(&a, text_file("f.index.json", "{\"weight_map\": "), AA_EPARSE, "f.index.json:1:");
  expect_import_error(&a,
                      text_file("g.index.json", "{\"weight_map\": {\"wte.weight\": \"idx.safetensors\"}}"),
                      AA_EINVAL, "missing tensor 'wpe.weight'");
done:
  aa_gpt_free(m);
}

/* A valid export with bytes of its header overwritten or the file cut
 * short at random: each import either succeeds or fails with a message,
 * and never crashes or reads out of bounds (ASan and UBSan watch). 3000
 * variants of a 1-block model, a fixed seed. */
AA_TEST(mutated_files_fail_cleanly) {
  aa_arch_t a = tiny_arch(1, 16);
  char p[512], q[512];
  aa_gpt_t *m = exported(&a, "mut_base.safetensors", p, sizeof p), *m2 = model(&a, 1, 1);
  size_t len = 0;
  unsigned char *orig = slurp(p, &len), *buf = malloc(len ? len : 1);
  CHECK(m && m2 && orig && buf && len > 8);
  if (!m || !m2 || !orig || !buf || len <= 8) goto done;
  size_t hlen = aa_get_le64(orig) + 8;
  path_in(q, sizeof q, tmp, "mut.safetensors");
  aa_rng_t rng;
  aa_rng_seed(&rng, 99);
  int ok = 0, failed = 0, unexplained = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(buf, orig, len);
    size_t n = len;
    int kind = (int)(aa_rng_u64(&rng) % 3);
    if (kind == 0) { /* a few bytes of the header, including its length, replaced */
      for (int k = 0; k < 1 + (int)(aa_rng_u64(&rng) % 4); k++)
        buf[aa_rng_u64(&rng) % hlen] = (unsigned char)aa_rng_u64(&rng);
    } else if (kind == 1) { /* a digit of the header replaced by another (offsets, shapes) */
      size_t at = aa_rng_u64(&rng) % hlen;
      while (at < hlen && (buf[at] < '0' || buf[at] > '9'))
        at++;
      if (at < hlen) buf[at] = (unsigned char)('0' + aa_rng_u64(&rng) % 10);
    } else { /* cut short */
      n = (size_t)(aa_rng_u64(&rng) % len);
    }
    FILE *f = fopen(q, "wb");
    if (!f || fwrite(buf, 1, n, f) != n) {
      CHECK(0);
      if (f) fclose(f);
      break;
    }
    fclose(f);
    aa_error(0, "%s", ""); /* so that a failure without a message shows */
    if (aa_import_weights(m2, q, NULL) == 0)
      ok++;
    else if (aa_last_error()[0])
      failed++;
    else
      unexplained++;
  }
  fprintf(stderr, "  3000 mutations: %d imported, %d refused with a message\n", ok, failed);
  CHECK(unexplained == 0 && failed > 2000);
done:
  free(orig);
  free(buf);
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* --- llama ---------------------------------------------------------------- */

/* tests/reference/make_llama_fixture.py's tiny Llama. */
static aa_arch_t llama_arch(int n_layer, int n_kv_head) {
  aa_arch_t a = {.n_layer = n_layer,
                 .n_head = 4,
                 .d_model = 16,
                 .d_ff = 24,
                 .seq_len = 8,
                 .vocab_size = 29,
                 .n_kv_head = n_kv_head,
                 .rope_theta = 10000.0f,
                 .norm_eps = 1e-5f};
  strcpy(a.family, "llama");
  return a;
}

static void source_path(char *out, size_t cap, const char *rel) {
  const char *src = getenv("AA_SOURCE_DIR");
  snprintf(out, cap, "%s/%s", src && *src ? src : ".", rel);
}

/* Whether m's parameters equal the n floats at want, bit for bit. */
static int same_params(const aa_gpt_t *m, const float *want, size_t n, const char *what) {
  if (!m || m->n_params != n) return 0;
  const float *got = m->params.data;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)) && !bad++) first = i;
  if (bad)
    fprintf(stderr, "  %s: %zu of %zu parameters differ, first at %zu: %.9g vs %.9g\n", what, bad, n, first,
            got[first], want[first]);
  return bad == 0;
}

/* The committed Hugging Face file (Llama names, F32) imports to exactly the
 * parameters llama_tiny.fixture holds in the engine's layout: the name map
 * puts every tensor where the engine's tensor table has it. */
AA_TEST(llama_safetensors_import_to_the_fixture_layout) {
  aa_arch_t a = llama_arch(2, 2);
  char st[AA_PATH_MAX], fx[AA_PATH_MAX];
  source_path(st, sizeof st, "tests/reference/llama_tiny.safetensors");
  source_path(fx, sizeof fx, "tests/reference/llama_tiny.fixture");
  size_t len = 0;
  unsigned char *blob = slurp(fx, &len);
  aa_gpt_t *m = model(&a, 1, 1);
  /* The fixture's header is 80 bytes, then B*T inputs and targets (3 x 8). */
  const size_t at = 80 + 2 * 24 * sizeof(int32_t);
  CHECK_MSG(blob && !memcmp(blob, "AAFIXL01", 8), "%s: not a llama fixture", fx);
  if (!m || !blob || len < at + m->n_params * sizeof(float)) goto done;
  aa_import_info_t info;
  CHECK_MSG(aa_import_weights(m, st, &info) == 0, "import: %s", aa_last_error());
  CHECK(same_params(m, (const float *)(blob + at), m->n_params, "llama_tiny.safetensors"));
  CHECK(info.format == AA_IMPORT_SAFETENSORS && info.files == 1 && info.tensors == m->n_tensors &&
        info.ignored == 0 && !info.tied_head && !strcmp(info.dtypes, "F32"));
done:
  free(blob);
  aa_gpt_free(m);
}

/* Copies the tensors of tmp/<from> into tmp/<to>, each renamed by
 * rename(name) (NULL drops it), plus an optional extra tensor: a small
 * hand-written variant of a real export. */
typedef struct {
  aa_st_file_t *f;
  int n;
  const aa_st_tensor_t *src[64]; /* NULL: the extra tensor, filled with 1 */
  aa_st_entry_t e[64];
  char names[64][128];
} rw_t;

static int rw_fill(int i, float *dst, size_t numel, void *data) {
  rw_t *r = data;
  if (r->src[i]) return aa_st_read_f32(r->f, r->src[i], dst);
  for (size_t j = 0; j < numel; j++)
    dst[j] = 1;
  return 0;
}

static const char *rewrite(const char *from, const char *to, const char *(*rename)(const char *, char *),
                           const char *extra, int64_t extra_len, aa_dtype_t dtype) {
  static char p[512];
  char q[512];
  path_in(q, sizeof q, tmp, from);
  path_in(p, sizeof p, tmp, to);
  rw_t r = {0};
  CHECK_MSG(aa_st_open(&r.f, q) == 0, "open: %s", aa_last_error());
  if (!r.f) return p;
  for (int i = 0; i < r.f->n && r.n < 63; i++) {
    const char *nm = rename(r.f->tensors[i].name, r.names[r.n]);
    if (!nm) continue;
    if (nm != r.names[r.n]) snprintf(r.names[r.n], sizeof r.names[0], "%s", nm);
    r.src[r.n] = &r.f->tensors[i];
    r.e[r.n].name = r.names[r.n];
    r.e[r.n].ndim = r.f->tensors[i].ndim;
    for (int d = 0; d < r.e[r.n].ndim; d++)
      r.e[r.n].shape[d] = r.f->tensors[i].shape[d];
    r.n++;
  }
  if (extra) {
    snprintf(r.names[r.n], sizeof r.names[0], "%s", extra);
    r.e[r.n] = (aa_st_entry_t){.name = r.names[r.n], .ndim = 1, .shape = {extra_len}};
    r.src[r.n++] = NULL;
  }
  CHECK_MSG(aa_st_write(p, dtype, r.e, r.n, rw_fill, &r) == 0, "write: %s", aa_last_error());
  aa_st_close(r.f);
  return p;
}

static const char *keep(const char *n, char *buf) {
  (void)buf;
  return n;
}
static const char *no_head(const char *n, char *buf) {
  (void)buf;
  return strcmp(n, "lm_head.weight") ? n : NULL;
}
static const char *no_prefix(const char *n, char *buf) {
  return strncmp(n, "model.", 6) ? n : strcpy(buf, n + 6);
}
static const char *no_up_proj(const char *n, char *buf) {
  (void)buf;
  return strcmp(n, "model.layers.1.mlp.up_proj.weight") ? n : NULL;
}

AA_TEST(llama_export_names_and_import_round_trip) {
  aa_arch_t a = llama_arch(2, 2);
  char p[512];
  aa_gpt_t *m = exported(&a, "llama.safetensors", p, sizeof p), *m2 = model(&a, 1, 1);
  aa_st_file_t *f = NULL;
  CHECK_MSG(m && aa_st_open(&f, p) == 0, "open: %s", aa_last_error());
  if (!m || !m2 || !f) goto done;
  /* Hugging Face's names, in the engine's order, (out, in) shapes. */
  CHECK(f->n == m->n_tensors);
  CHECK(!strcmp(f->tensors[0].name, "model.embed_tokens.weight"));
  CHECK(!strcmp(f->tensors[2].name, "model.layers.0.self_attn.q_proj.weight") &&
        f->tensors[2].shape[0] == 16 && f->tensors[2].shape[1] == 16);
  CHECK(!strcmp(f->tensors[3].name, "model.layers.0.self_attn.k_proj.weight") &&
        f->tensors[3].shape[0] == 8 && f->tensors[3].shape[1] == 16);
  CHECK(!strcmp(f->tensors[9].name, "model.layers.0.mlp.down_proj.weight") && f->tensors[9].shape[0] == 16 &&
        f->tensors[9].shape[1] == 24);
  CHECK(!strcmp(f->tensors[f->n - 2].name, "model.norm.weight"));
  CHECK(!strcmp(f->tensors[f->n - 1].name, "lm_head.weight"));
  aa_st_close(f);
  aa_import_info_t info;
  CHECK_MSG(aa_import_weights(m2, p, &info) == 0, "import: %s", aa_last_error());
  CHECK(same_params(m2, m->params.data, m->n_params, "f32 round trip"));
  /* Without the "model." prefix, with rotary buffers: the same weights. */
  const char *q = rewrite("llama.safetensors", "llama_bare.safetensors", no_prefix,
                          "model.layers.1.self_attn.rotary_emb.inv_freq", 2, AA_F32);
  memset(m2->params.data, 0, m2->n_params * sizeof(float));
  CHECK_MSG(aa_import_weights(m2, q, &info) == 0, "import: %s", aa_last_error());
  CHECK(same_params(m2, m->params.data, m->n_params, "no prefix") && info.ignored == 1);
done:
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* BF16 and F16 files (written by the exporter, whose rounding test_import's
 * PyTorch checks pin to torch's) import as each value rounded. */
AA_TEST(llama_bf16_and_f16_import_rounded_values) {
  aa_arch_t a = llama_arch(1, 2);
  char p[512];
  aa_gpt_t *m = exported(&a, "llama_r.safetensors", p, sizeof p), *m2 = model(&a, 1, 1);
  if (!m || !m2) goto done;
  float *want = malloc(m->n_params * sizeof *want);
  if (!want) abort();
  for (int d = 0; d < 2; d++) {
    const float *src = m->params.data;
    for (size_t i = 0; i < m->n_params; i++)
      want[i] = d ? aa_f16_to_f32(aa_f32_to_f16(src[i])) : aa_bf16_to_f32(aa_f32_to_bf16(src[i]));
    const char *q = rewrite("llama_r.safetensors", d ? "llama_f16.safetensors" : "llama_bf16.safetensors",
                            keep, NULL, 0, d ? AA_F16 : AA_BF16);
    aa_import_info_t info;
    CHECK_MSG(aa_import_weights(m2, q, &info) == 0, "import: %s", aa_last_error());
    CHECK(same_params(m2, want, m->n_params, d ? "f16" : "bf16"));
    CHECK_MSG(!strcmp(info.dtypes, d ? "F16" : "BF16"), "dtypes %s", info.dtypes);
  }
  free(want);
done:
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* A checkpoint without lm_head.weight (tied embeddings) gets embed_tokens
 * as its head, and says so. */
AA_TEST(llama_without_lm_head_ties_the_head_to_embed_tokens) {
  aa_arch_t a = llama_arch(1, 2);
  char p[512];
  aa_gpt_t *m = exported(&a, "llama_t.safetensors", p, sizeof p), *m2 = model(&a, 1, 1);
  if (!m || !m2) goto done;
  const char *q = rewrite("llama_t.safetensors", "llama_tied.safetensors", no_head, NULL, 0, AA_F32);
  aa_import_info_t info;
  CHECK_MSG(aa_import_weights(m2, q, &info) == 0, "import: %s", aa_last_error());
  const aa_tensor_desc_t *wte = &m2->tensors[0], *head = &m2->tensors[m2->n_tensors - 1];
  const float *got = m2->params.data;
  CHECK(!strcmp(head->name, "head.w") && head->numel == wte->numel);
  CHECK(info.tied_head == 1 && info.tensors == m2->n_tensors - 1);
  CHECK(!memcmp(got + head->offset, got + wte->offset, wte->numel * sizeof(float)));
  CHECK(!memcmp(got, m->params.data, head->offset * sizeof(float)));
done:
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

AA_TEST(llama_missing_extra_and_misshapen_tensors_are_named) {
  aa_arch_t a = llama_arch(2, 2);
  char p[512];
  aa_gpt_t *m = exported(&a, "llama_e.safetensors", p, sizeof p);
  aa_arch_t three = llama_arch(3, 2), one = llama_arch(1, 2), mha = llama_arch(2, 4), ff = a;
  ff.d_ff = 32;
  expect_import_error(&three, p, AA_EINVAL, "missing tensor 'model.layers.2.input_layernorm.weight'");
  expect_import_error(
      &one, p, AA_EINVAL,
      "tensor 'model.layers.1.input_layernorm.weight' belongs to a block the model does not have");
  expect_import_error(&mha, p, AA_EINVAL,
                      "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 16] but the model needs "
                      "[16, 16]");
  expect_import_error(&ff, p, AA_EINVAL,
                      "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [24, 16] but the model needs "
                      "[32, 16]");
  expect_import_error(&a,
                      rewrite("llama_e.safetensors", "llama_gap.safetensors", no_up_proj, NULL, 0, AA_F32),
                      AA_EINVAL, "missing tensor 'model.layers.1.mlp.up_proj.weight'");
  expect_import_error(&a,
                      rewrite("llama_e.safetensors", "llama_x.safetensors", keep,
                              "model.layers.0.self_attn.o_proj.bias", 16, AA_F32),
                      AA_EINVAL,
                      "unexpected tensor 'model.layers.0.self_attn.o_proj.bias' (not a Llama weight)");
  expect_import_error(
      &a, rewrite("llama_e.safetensors", "llama_dup.safetensors", keep, "norm.weight", 16, AA_F32), AA_EINVAL,
      "tensor 'norm.weight' appears twice");
  /* GPT-2 weights are not a Llama's, nor Llama's a GPT-2's. */
  aa_arch_t g = tiny_arch(1, 16);
  char gp[512];
  aa_gpt_t *gm = exported(&g, "gpt2_for_llama.safetensors", gp, sizeof gp);
  expect_import_error(&a, gp, AA_EINVAL, "unexpected tensor 'wte.weight' (not a Llama weight)");
  expect_import_error(&g, p, AA_EINVAL, "unexpected tensor 'model.embed_tokens.weight' (not a GPT-2 weight)");
  aa_gpt_free(gm);
  aa_gpt_free(m);
}

AA_TEST(llama_sharded_index_imports) {
  aa_arch_t a = llama_arch(2, 2);
  char p[512], q[512];
  aa_gpt_t *m = exported(&a, "llama_s.safetensors", p, sizeof p), *m2 = model(&a, 1, 1);
  aa_st_file_t *f = NULL;
  CHECK(m && aa_st_open(&f, p) == 0);
  if (!m || !m2 || !f) goto done;
  /* Two shards: the tensors before layer 1 in one, the rest in the other. */
  rw_t r[2] = {{.f = f}, {.f = f}};
  char map[8192] = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (int i = 0; i < f->n; i++) {
    int s = strncmp(f->tensors[i].name, "model.layers.1.", 15) && i < f->n - 2 ? 0 : 1;
    rw_t *w = &r[s];
    snprintf(w->names[w->n], sizeof w->names[0], "%.127s", f->tensors[i].name);
    w->src[w->n] = &f->tensors[i];
    w->e[w->n] = (aa_st_entry_t){.name = w->names[w->n], .ndim = f->tensors[i].ndim};
    for (int d = 0; d < f->tensors[i].ndim; d++)
      w->e[w->n].shape[d] = f->tensors[i].shape[d];
    w->n++;
    snprintf(map + strlen(map), sizeof map - strlen(map), "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
             i ? ", " : "", f->tensors[i].name, s + 1);
  }
  strcat(map, "}}");
  char dir[320];
  path_in(dir, sizeof dir, tmp, "llama_sharded");
  CHECK(mkdir(dir, 0755) == 0);
  for (int s = 0; s < 2; s++) {
    snprintf(q, sizeof q, "%s/model-0000%d-of-00002.safetensors", dir, s + 1);
    CHECK_MSG(aa_st_write(q, AA_F32, r[s].e, r[s].n, rw_fill, &r[s]) == 0, "write: %s", aa_last_error());
  }
  snprintf(q, sizeof q, "%s/model.safetensors.index.json", dir);
  FILE *fp = fopen(q, "w");
  CHECK(fp && fputs(map, fp) >= 0);
  if (fp) fclose(fp);
  aa_import_info_t info;
  CHECK_MSG(aa_import_weights(m2, dir, &info) == 0, "import: %s", aa_last_error());
  CHECK(info.format == AA_IMPORT_SHARDED && info.files == 2);
  CHECK(same_params(m2, m->params.data, m->n_params, "sharded"));
done:
  aa_st_close(f);
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* An llm.c file holds GPT-2 weights only. */
AA_TEST(llama_refuses_llmc_files) {
  aa_arch_t a = llama_arch(1, 2);
  char p[512];
  path_in(p, sizeof p, tmp, "llama_llmc.bin");
  int32_t h[256] = {AA_LLMC_MAGIC, 3};
  FILE *f = fopen(p, "wb");
  CHECK(f && fwrite(h, sizeof h, 1, f) == 1);
  if (f) fclose(f);
  expect_import_error(&a, p, AA_EINVAL, "an llm.c checkpoint holds GPT-2 weights, but the model is llama");
}

/* --- mixture-of-experts Llama (Mixtral, Qwen-MoE names) ------------------- */

static char mxdir[300];   /* make_mixtral_weights.py's output, inside tmp */
static char mx_skip[600]; /* non-empty: why its files are missing */

/* make_mixtral_weights.py's model: layers 0 and 2 sparse MoE blocks of 4
 * experts (top-2, width 12, no shared experts), layer 1 dense. */
static aa_arch_t mixtral_arch(int shared) {
  aa_arch_t a = llama_arch(3, 2);
  a.moe = (aa_moe_t){.experts = 4, .top_k = 2, .d_ff_expert = 12, .shared_experts = shared, .every = 2};
  return a;
}

/* Runs make_mixtral_weights.py into tmp/mx; on failure mx_skip says why. */
static void make_mixtral_weights(void) {
  const char *src = getenv("AA_SOURCE_DIR");
  char cmd[2048], log[400];
  snprintf(mxdir, sizeof mxdir, "%s/mx", tmp);
  snprintf(log, sizeof log, "%s/make_mixtral_weights.log", tmp);
  if (access("/usr/bin/python3", X_OK)) {
    snprintf(mx_skip, sizeof mx_skip, "/usr/bin/python3 not found (needed with python3-torch)");
    return;
  }
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s/tests/reference/make_mixtral_weights.py' --out '%s' >'%s' 2>&1",
           src ? src : ".", mxdir, log);
  int rc = system(cmd);
  if (rc != 0) {
    size_t len = 0;
    char *text = slurp(log, &len);
    snprintf(mx_skip, sizeof mx_skip, "make_mixtral_weights.py failed (status %d): %.400s", rc,
             text ? text : "");
    free(text);
  }
}

#define NEED_MIXTRAL()                                                                                       \
  do {                                                                                                       \
    if (mx_skip[0]) SKIP("%s", mx_skip);                                                                     \
  } while (0)

/* The Mixtral-named file imports into the engine's stacked expert tensors:
 * the next-token logits of every position equal Hugging Face Mixtral's
 * float64 forward within 1e-6 + 1e-4 |want| (the GPT-2 check's tolerance:
 * float32 rounding alone, the routing being the reference's by the
 * fixture's router gap). */
AA_TEST(mixtral_safetensors_logits_match_hugging_face) {
  NEED_MIXTRAL();
  aa_arch_t a = mixtral_arch(0);
  char src[512], lp[512];
  path_in(src, sizeof src, mxdir, "mixtral.safetensors");
  path_in(lp, sizeof lp, mxdir, "logits.bin");
  const int T = a.seq_len, V = a.vocab_size;
  size_t len = 0, n = (size_t)T * V;
  unsigned char *ref = slurp(lp, &len);
  CHECK(ref && len == (size_t)T * 4 + n * 4);
  aa_gpt_t *m = model(&a, 1, T);
  if (!ref || !m || len != (size_t)T * 4 + n * 4) goto done;
  aa_import_info_t info;
  CHECK_MSG(aa_import_weights(m, src, &info) == 0, "import: %s", aa_last_error());
  /* wte, 2 MoE blocks of 6 + 1 + 4 x 3, a dense block of 9, norm, head. */
  CHECK_MSG(info.tensors == 50 && info.ignored == 0 && !info.tied_head, "%d tensors", info.tensors);
  const float *want = (const float *)(ref + (size_t)T * 4);
  CHECK_MSG(aa_gpt_forward(m, (const int32_t *)ref, NULL, NULL) == 0, "forward: %s", aa_last_error());
  check_logits("mixtral logits", aa_gpt_logits(m), want, n);
done:
  free(ref);
  aa_gpt_free(m);
}

/* Export writes Mixtral's names; its file imports back to the same
 * parameters bit for bit and exports again to the same bytes. Qwen-MoE's
 * names of the same weights import to the same parameters. */
AA_TEST(mixtral_export_reimport_round_trips_byte_for_byte) {
  NEED_MIXTRAL();
  aa_arch_t a = mixtral_arch(0);
  char src[512], qw[512], p1[512], p2[512];
  path_in(src, sizeof src, mxdir, "mixtral.safetensors");
  path_in(qw, sizeof qw, mxdir, "qwen.safetensors");
  path_in(p1, sizeof p1, tmp, "mixtral_1.safetensors");
  path_in(p2, sizeof p2, tmp, "mixtral_2.safetensors");
  aa_gpt_t *m = model(&a, 1, 1), *m2 = model(&a, 1, 1);
  aa_st_file_t *f = NULL;
  size_t l1 = 0, l2 = 0;
  char *b1 = NULL, *b2 = NULL;
  if (!m || !m2) goto done;
  CHECK_MSG(aa_import_weights(m, src, NULL) == 0, "import: %s", aa_last_error());
  CHECK_MSG(aa_export_weights(m, p1, AA_F32) == 0, "export: %s", aa_last_error());
  CHECK_MSG(aa_import_weights(m2, p1, NULL) == 0, "re-import: %s", aa_last_error());
  CHECK(same_params(m2, m->params.data, m->n_params, "mixtral round trip"));
  CHECK_MSG(aa_export_weights(m2, p2, AA_F32) == 0, "export: %s", aa_last_error());
  b1 = slurp(p1, &l1);
  b2 = slurp(p2, &l2);
  CHECK(b1 && b2 && l1 == l2 && !memcmp(b1, b2, l1));
  CHECK_MSG(aa_st_open(&f, p1) == 0, "open: %s", aa_last_error());
  if (f) {
    CHECK(f->n == 50);
    CHECK(!strcmp(f->tensors[7].name, "model.layers.0.block_sparse_moe.gate.weight") &&
          f->tensors[7].shape[0] == 4 && f->tensors[7].shape[1] == 16);
    CHECK(!strcmp(f->tensors[8].name, "model.layers.0.block_sparse_moe.experts.0.w1.weight") &&
          f->tensors[8].shape[0] == 12 && f->tensors[8].shape[1] == 16);
    CHECK(!strcmp(f->tensors[9].name, "model.layers.0.block_sparse_moe.experts.0.w3.weight"));
    CHECK(!strcmp(f->tensors[16].name, "model.layers.0.block_sparse_moe.experts.0.w2.weight") &&
          f->tensors[16].shape[0] == 16 && f->tensors[16].shape[1] == 12);
    CHECK(!strcmp(f->tensors[26].name, "model.layers.1.mlp.gate_proj.weight"));
    aa_st_close(f);
  }
  memset(m2->params.data, 0, m2->n_params * sizeof(float));
  CHECK_MSG(aa_import_weights(m2, qw, NULL) == 0, "qwen import: %s", aa_last_error());
  CHECK(same_params(m2, m->params.data, m->n_params, "qwen names"));
done:
  free(b1);
  free(b2);
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* Qwen-MoE's shared expert is gated by a sigmoid of its own
 * (shared_expert_gate): a spec without model.moe.shared_expert_gate
 * refuses it naming that tensor and the options it needs. */
AA_TEST(qwen_moe_shared_expert_gate_needs_the_spec_option) {
  NEED_MIXTRAL();
  aa_arch_t a = mixtral_arch(0);
  char p[512];
  path_in(p, sizeof p, mxdir, "qwen_shared.safetensors");
  expect_import_error(
      &a, p, AA_EINVAL,
      "tensor 'model.layers.0.mlp.shared_expert_gate.weight' is Qwen-MoE's sigmoid gate on its "
      "shared expert: the spec needs model.moe.shared_expert_gate true");
}

/* --- Qwen2 and Qwen2-MoE ------------------------------------------------ */

static char qwdir[300];   /* make_qwen_weights.py's output, inside tmp */
static char qw_skip[600]; /* non-empty: why its files are missing */

/* make_qwen_weights.py's Qwen2: llama_arch(2, 2) with q/k/v biases. */
static aa_arch_t qwen2_arch(void) {
  aa_arch_t a = llama_arch(2, 2);
  a.qkv_bias = 1;
  return a;
}

/* Its Qwen2-MoE: 3 layers with q/k/v biases, layers 0 and 2 sparse blocks
 * of 4 experts (top-2, width 12, norm_topk_prob false) and one gated
 * shared expert of width 24 (2 of 12), layer 1 dense. */
static aa_arch_t qwen_moe_arch(void) {
  aa_arch_t a = llama_arch(3, 2);
  a.qkv_bias = 1;
  a.moe = (aa_moe_t){.experts = 4,
                     .top_k = 2,
                     .d_ff_expert = 12,
                     .shared_experts = 2,
                     .every = 2,
                     .shared_expert_gate = 1,
                     .topk_raw = 1};
  return a;
}

/* Runs make_qwen_weights.py into tmp/qw; on failure qw_skip says why. */
static void make_qwen_weights(void) {
  const char *src = getenv("AA_SOURCE_DIR");
  char cmd[2048], log[400];
  snprintf(qwdir, sizeof qwdir, "%s/qw", tmp);
  snprintf(log, sizeof log, "%s/make_qwen_weights.log", tmp);
  if (access("/usr/bin/python3", X_OK)) {
    snprintf(qw_skip, sizeof qw_skip, "/usr/bin/python3 not found (needed with python3-torch)");
    return;
  }
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s/tests/reference/make_qwen_weights.py' --out '%s' >'%s' 2>&1",
           src ? src : ".", qwdir, log);
  int rc = system(cmd);
  if (rc != 0) {
    size_t len = 0;
    char *text = slurp(log, &len);
    snprintf(qw_skip, sizeof qw_skip, "make_qwen_weights.py failed (status %d): %.400s", rc,
             text ? text : "");
    free(text);
  }
}

#define NEED_QWEN()                                                                                          \
  do {                                                                                                       \
    if (qw_skip[0]) SKIP("%s", qw_skip);                                                                     \
  } while (0)

/* stem.safetensors imports into a model of a with `tensors` Hugging Face
 * tensors, and its next-token logits equal Hugging Face's float64 forward
 * (stem_logits.bin) within the GPT-2 and Mixtral checks' tolerance (1e-6 +
 * 1e-4 |want|: float32 rounding; the MoE routing is the reference's by the
 * script's router gap). The model is returned for more checks. */
static aa_gpt_t *qwen_logits_match(const aa_arch_t *a, const char *stem, int tensors) {
  char src[512], lp[512], name[64];
  snprintf(name, sizeof name, "%s.safetensors", stem);
  path_in(src, sizeof src, qwdir, name);
  snprintf(name, sizeof name, "%s_logits.bin", stem);
  path_in(lp, sizeof lp, qwdir, name);
  const int T = a->seq_len, V = a->vocab_size;
  size_t len = 0, n = (size_t)T * V;
  unsigned char *ref = slurp(lp, &len);
  CHECK(ref && len == (size_t)T * 4 + n * 4);
  aa_gpt_t *m = model(a, 1, T);
  if (ref && m && len == (size_t)T * 4 + n * 4) {
    aa_import_info_t info;
    CHECK_MSG(aa_import_weights(m, src, &info) == 0, "import: %s", aa_last_error());
    CHECK_MSG(info.tensors == tensors && info.ignored == 0 && !info.tied_head, "%d tensors", info.tensors);
    CHECK_MSG(aa_gpt_forward(m, (const int32_t *)ref, NULL, NULL) == 0, "forward: %s", aa_last_error());
    check_logits(stem, aa_gpt_logits(m), (const float *)(ref + (size_t)T * 4), n);
  }
  free(ref);
  return m;
}

/* Qwen2ForCausalLM's names, the q/k/v biases with them: wte, 2 blocks of
 * 9 + 3 biases, norm, head. Without the biases the logits move by O(0.1),
 * 1000 times the tolerance. */
AA_TEST(qwen2_safetensors_logits_match_hugging_face) {
  NEED_QWEN();
  aa_arch_t a = qwen2_arch();
  aa_gpt_free(qwen_logits_match(&a, "qwen2", 27));
}

/* Qwen2MoeForCausalLM's names: the router, the experts, the shared expert
 * spread over the engine's 2 shared experts and its sigmoid gate. Export
 * writes the same names in the same order: the F32 export of the import is
 * the script's file byte for byte (so the shared expert's gather is
 * put_shared's inverse), and imports back to the same parameters. */
AA_TEST(qwen2_moe_safetensors_logits_match_and_export_writes_the_same_file) {
  NEED_QWEN();
  aa_arch_t a = qwen_moe_arch();
  /* wte, 2 MoE blocks of 12 + 1 + 4 x 3 + 4, a dense block of 15, norm, head. */
  aa_gpt_t *m = qwen_logits_match(&a, "qwen2_moe", 67), *m2 = model(&a, 1, 1);
  char src[512], out[512];
  path_in(src, sizeof src, qwdir, "qwen2_moe.safetensors");
  path_in(out, sizeof out, tmp, "qwen2_moe_export.safetensors");
  size_t l1 = 0, l2 = 0;
  char *b1 = NULL, *b2 = NULL;
  if (!m || !m2) goto done;
  CHECK_MSG(aa_export_weights(m, out, AA_F32) == 0, "export: %s", aa_last_error());
  b1 = slurp(src, &l1);
  b2 = slurp(out, &l2);
  size_t at = 0;
  while (b1 && b2 && at < l1 && at < l2 && b1[at] == b2[at])
    at++;
  CHECK_MSG(b1 && b2 && l1 == l2 && at == l1, "export differs from the source at byte %zu (%zu vs %zu bytes)",
            at, l2, l1);
  CHECK_MSG(aa_import_weights(m2, out, NULL) == 0, "re-import: %s", aa_last_error());
  CHECK(same_params(m2, m->params.data, m->n_params, "qwen2-moe round trip"));
done:
  free(b1);
  free(b2);
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

static const char *no_v_bias(const char *n, char *buf) {
  (void)buf;
  return strcmp(n, "model.layers.1.self_attn.v_proj.bias") ? n : NULL;
}

/* A Qwen2 file into a spec without qkv_bias names the bias and the option;
 * a missing bias, and a Qwen2-MoE file into a spec with ungated shared
 * experts, are refused naming the tensor. */
AA_TEST(qwen_biases_and_gate_without_their_options_are_named) {
  NEED_QWEN();
  aa_arch_t plain = llama_arch(2, 2), a = qwen2_arch(), ungated = qwen_moe_arch();
  ungated.moe.shared_expert_gate = 0;
  char p[512], q[512];
  path_in(p, sizeof p, qwdir, "qwen2.safetensors");
  expect_import_error(&plain, p, AA_EINVAL,
                      "tensor 'model.layers.0.self_attn.q_proj.bias' is a q/k/v projection bias (Qwen2): the "
                      "spec needs model.qkv_bias true");
  path_in(q, sizeof q, tmp, "qwen2.safetensors");
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", p, q);
  CHECK(system(cmd) == 0);
  expect_import_error(&a, rewrite("qwen2.safetensors", "qwen2_nov.safetensors", no_v_bias, NULL, 0, AA_F32),
                      AA_EINVAL, "missing tensor 'model.layers.1.self_attn.v_proj.bias'");
  path_in(p, sizeof p, qwdir, "qwen2_moe.safetensors");
  expect_import_error(&ungated, p, AA_EINVAL, "is Qwen-MoE's sigmoid gate on its shared expert");
}

static const char *no_expert_w3(const char *n, char *buf) {
  (void)buf;
  return strcmp(n, "model.layers.2.block_sparse_moe.experts.3.w3.weight") ? n : NULL;
}
static const char *shared_as_dense(const char *n, char *buf) {
  (void)buf;
  return strcmp(n, "model.layers.0.block_sparse_moe.shared_experts.0.w2.weight") ? n : NULL;
}

/* Without Python: an MoE model with a shared expert exports and imports
 * back bit for bit; a missing expert tensor, an expert the model does not
 * have, a misshapen expert and a block the model does not have are refused
 * naming the tensor. */
AA_TEST(moe_missing_extra_and_misshapen_experts_are_named) {
  aa_arch_t a = mixtral_arch(1), small = a, dense = llama_arch(3, 2);
  small.moe.d_ff_expert = 8;
  char p[512];
  aa_gpt_t *m = exported(&a, "moe_e.safetensors", p, sizeof p), *m2 = model(&a, 1, 1);
  if (!m || !m2) goto done;
  CHECK_MSG(aa_import_weights(m2, p, NULL) == 0, "import: %s", aa_last_error());
  CHECK(same_params(m2, m->params.data, m->n_params, "moe with a shared expert"));
  expect_import_error(&a, rewrite("moe_e.safetensors", "moe_gap.safetensors", no_expert_w3, NULL, 0, AA_F32),
                      AA_EINVAL, "missing tensor 'model.layers.2.block_sparse_moe.experts.3.w3.weight'");
  expect_import_error(&a,
                      rewrite("moe_e.safetensors", "moe_x.safetensors", keep,
                              "model.layers.0.block_sparse_moe.experts.4.w1.weight", 2, AA_F32),
                      AA_EINVAL, "unexpected tensor 'model.layers.0.block_sparse_moe.experts.4.w1.weight'");
  expect_import_error(&a,
                      rewrite("moe_e.safetensors", "moe_l.safetensors", keep,
                              "model.layers.4.block_sparse_moe.gate.weight", 2, AA_F32),
                      AA_EINVAL, "tensor 'model.layers.4.block_sparse_moe.gate.weight' belongs to a block");
  expect_import_error(&small, p, AA_EINVAL,
                      "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight' has shape [12, 16] but "
                      "the model needs [8, 16]");
  expect_import_error(&a, rewrite("moe_e.safetensors", "moe_s.safetensors", shared_as_dense, NULL, 0, AA_F32),
                      AA_EINVAL,
                      "missing tensor 'model.layers.0.block_sparse_moe.shared_experts.0.w2.weight'");
  expect_import_error(&dense, p, AA_EINVAL,
                      "unexpected tensor 'model.layers.0.block_sparse_moe.gate.weight'");
done:
  aa_gpt_free(m);
  aa_gpt_free(m2);
}

/* Runs make_weights.py into tmp/w; on failure py_skip says why. */
static void make_weights(void) {
  const char *src = getenv("AA_SOURCE_DIR");
  char cmd[2048], log[400];
  snprintf(wdir, sizeof wdir, "%s/w", tmp);
  snprintf(log, sizeof log, "%s/make_weights.log", tmp);
  if (access("/usr/bin/python3", X_OK)) {
    snprintf(py_skip, sizeof py_skip, "/usr/bin/python3 not found (needed with python3-torch)");
    return;
  }
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/reference/make_weights.py' --out '%s' >'%s' 2>&1",
           src ? src : ".", wdir, log);
  int rc = system(cmd);
  if (rc != 0) {
    size_t len = 0;
    char *text = slurp(log, &len);
    snprintf(py_skip, sizeof py_skip, "make_weights.py failed (status %d): %.400s", rc, text ? text : "");
    free(text);
    return;
  }
  char spec[512];
  path_in(spec, sizeof spec, wdir, "model.json");
  if (aa_spec_load(&wspec, spec)) snprintf(py_skip, sizeof py_skip, "model.json: %s", aa_last_error());
}

int main(void) {
  snprintf(tmp, sizeof tmp, "%s/aa_import.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "mkdtemp failed\n");
    return 1;
  }
  make_weights();
  make_mixtral_weights();
  make_qwen_weights();
  RUN(f32_safetensors_imports_bit_exact_with_buffers_and_tied_head);
  RUN(bf16_safetensors_with_transformer_prefix_imports_torch_rounding);
  RUN(f16_safetensors_imports_torch_rounding);
  RUN(sharded_index_and_its_directory_import);
  RUN(llmc_fp32_and_bf16_import_the_same_weights);
  RUN(logits_after_import_match_pytorch);
  RUN(export_then_import_is_lossless_in_f32_and_rounds_as_torch);
  RUN(imported_checkpoint_loads_back);
  RUN(missing_extra_and_misshapen_tensors_are_named);
  RUN(untied_head_is_refused_and_tied_head_accepted);
  RUN(hostile_headers_are_clear_errors);
  RUN(llmc_bad_header_and_size_are_clear_errors);
  RUN(export_then_import_round_trips_without_python);
  RUN(shard_index_without_python_and_its_errors);
  RUN(mutated_files_fail_cleanly);
  RUN(llama_safetensors_import_to_the_fixture_layout);
  RUN(llama_export_names_and_import_round_trip);
  RUN(llama_bf16_and_f16_import_rounded_values);
  RUN(llama_without_lm_head_ties_the_head_to_embed_tokens);
  RUN(llama_missing_extra_and_misshapen_tensors_are_named);
  RUN(llama_sharded_index_imports);
  RUN(llama_refuses_llmc_files);
  RUN(mixtral_safetensors_logits_match_hugging_face);
  RUN(mixtral_export_reimport_round_trips_byte_for_byte);
  RUN(qwen_moe_shared_expert_gate_needs_the_spec_option);
  RUN(qwen2_safetensors_logits_match_hugging_face);
  RUN(qwen2_moe_safetensors_logits_match_and_export_writes_the_same_file);
  RUN(qwen_biases_and_gate_without_their_options_are_named);
  RUN(moe_missing_extra_and_misshapen_experts_are_named);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
  return aa_test_summary();
}
