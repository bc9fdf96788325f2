/* Hugging Face PEFT adapter files (issue 36; engine/lora_peft.h).
 *
 * tests/reference/peft_tiny/ is a PEFT adapter directory written by
 * make_peft_fixture.py without the peft package (BF16 lora_A/lora_B of q, v,
 * o, gate and down on llama_tiny, r 3, alpha 12), and peft_tiny.fixture
 * the logits PyTorch computes in float64 as PEFT's LoraLayer does, W x +
 * (alpha / r) B A x. Imported onto llama_tiny.safetensors the engine's
 * logits must match them within test_reference.c's tolerance (atol 1e-6 +
 * rtol 1e-4: the reference is float64 on float32-representable inputs, so
 * the bound is the engine's float32 rounding alone), and the adapters
 * must move the logits by far more than that (else the check could not
 * fail). Export then import gives the adapters back bit for bit in F32
 * (BF16: each value rounded once, within 2^-8 relative); every
 * disagreement between the files and the spec is refused naming it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aa_lora_fixture.h"
#include "aa_test.h"
#include "engine/import.h"
#include "engine/lora.h"
#include "engine/lora_peft.h"
#include "engine/safetensors.h"

static char tmp[256], ref[1024];

typedef struct {
  aa_arch_t arch;
  int B, T;
  int32_t *inputs;
  float *logits, *base_logits;
  void *blob;
} fixture_t;

static fixture_t fx;

static int load(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  char b[8192];
  const size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n < 8 + AA_LORA_FIXTURE_HEADER || memcmp(b, "AAFIXP01", 8)) return -1;
  const char *p = aa_lora_fixture_header(b + 8, &fx.arch, &fx.B, &fx.T);
  const aa_arch_t *a = &fx.arch;
  const size_t N = (size_t)fx.B * fx.T, NV = N * (size_t)a->vocab_size;
  if (n != (size_t)(p - b) + 4 * N + 8 * NV) return -2;
  fx.blob = malloc(n);
  if (!fx.blob) return -1;
  memcpy(fx.blob, b, n);
  fx.inputs = (int32_t *)((char *)fx.blob + (p - b));
  fx.logits = (float *)(fx.inputs + N);
  fx.base_logits = fx.logits + NV;
  return 0;
}

AA_TEST(peft_adapters_on_llama_tiny_give_pytorchs_logits) {
  aa_gpt_t *m = NULL;
  aa_gpt_opts_t o = {.amp = AA_F32};
  char base[1200], dir[1200];
  snprintf(base, sizeof base, "%s/llama_tiny.safetensors", ref);
  snprintf(dir, sizeof dir, "%s/peft_tiny", ref);
  CHECK_MSG(aa_gpt_create(&m, &fx.arch, aa_ops_cpu(), fx.B, fx.T, &o) == 0, "%s", aa_last_error());
  if (!m) return;
  CHECK_MSG(aa_import_weights(m, base, NULL) == 0, "%s", aa_last_error());
  float *ad = NULL;
  aa_peft_info_t info;
  CHECK_MSG(aa_peft_import(dir, &fx.arch, &ad, &info) == 0, "%s", aa_last_error());
  if (!ad) {
    aa_gpt_free(m);
    return;
  }
  CHECK(info.tensors == 2 * 5 * fx.arch.n_layer && !strcmp(info.dtypes, "BF16"));
  memcpy(m->lora.data, ad, m->lora.numel * sizeof *ad);
  CHECK(aa_gpt_forward(m, fx.inputs, NULL, NULL) == 0);
  const float *lg = aa_gpt_logits(m);
  const size_t NV = (size_t)fx.B * fx.T * fx.arch.vocab_size;
  double worst = 0, moved = 0;
  for (size_t i = 0; i < NV; i++) {
    const double tol = 1e-6 + 1e-4 * fabs(fx.logits[i]);
    worst = fmax(worst, fabs(lg[i] - fx.logits[i]) / tol);
    moved = fmax(moved, fabs(fx.logits[i] - fx.base_logits[i]) / tol);
  }
  fprintf(stderr, "  logits: worst error/tolerance %.3f; the adapters move them by %.0f tolerances\n", worst,
          moved);
  CHECK(worst <= 1.0);
  CHECK(moved > 100);
  free(ad);
  aa_gpt_free(m);
}

/* Deterministic adapters for a (none zero). */
static float *adapters(const aa_arch_t *a, size_t *n) {
  *n = (size_t)a->n_layer * aa_lora_block_numel(a, 1);
  float *p = malloc(*n * sizeof *p);
  for (size_t i = 0; p && i < *n; i++)
    p[i] = (float)sin(0.37 * (double)i + 1.0) * 0.3f;
  return p;
}

static aa_arch_t gpt2_arch(int targets) {
  aa_arch_t a = {.family = "gpt2",
                 .n_layer = 2,
                 .n_head = 2,
                 .d_model = 16,
                 .d_ff = 64,
                 .seq_len = 8,
                 .vocab_size = 32,
                 .lora = {.r = 2, .alpha = 3.5f, .targets = targets}};
  return a;
}

static int slurp_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "rb");
  char b[8192] = {0};
  if (!f) return 0;
  size_t n = fread(b, 1, sizeof b - 1, f);
  fclose(f);
  b[n] = '\0';
  return strstr(b, needle) != NULL;
}

AA_TEST(export_then_import_round_trips_bit_for_bit) {
  const aa_arch_t archs[] = {
      fx.arch, gpt2_arch(1 << AA_LORA_QKV | 1 << AA_LORA_FCPROJ),
      gpt2_arch(1 << AA_LORA_QKV | 1 << AA_LORA_PROJ | 1 << AA_LORA_FC | 1 << AA_LORA_FCPROJ)};
  /* target_modules as PEFT would match them: gpt2's one c_proj by its
   * parent, both by the shared name. */
  const char *modules[] = {"\"gate_proj\"", "\"mlp.c_proj\"", "\"c_proj\""};
  for (int k = 0; k < 3; k++) {
    size_t n;
    float *ad = adapters(&archs[k], &n), *back = NULL;
    char dir[512], cfg[600], ck[512];
    snprintf(dir, sizeof dir, "%s/rt%d", tmp, k);
    CHECK_MSG(aa_peft_export(dir, &archs[k], ad, AA_F32, "base.ckpt") == 0, "%s", aa_last_error());
    CHECK_MSG(aa_peft_import(dir, &archs[k], &back, NULL) == 0, "%s", aa_last_error());
    CHECK(back && !memcmp(back, ad, n * sizeof *ad));
    snprintf(cfg, sizeof cfg, "%s/adapter_config.json", dir);
    CHECK_MSG(slurp_has(cfg, modules[k]), "%s lacks %s", cfg, modules[k]);
    CHECK(slurp_has(cfg, k ? "\"fan_in_fan_out\": true" : "\"fan_in_fan_out\": false"));
    CHECK(slurp_has(cfg, "\"task_type\": \"CAUSAL_LM\"") &&
          slurp_has(cfg, "\"base_model_name_or_path\": \"base.ckpt\""));
    free(back);
    back = NULL;
    /* The checkpoint written from them reads back as training's. */
    snprintf(ck, sizeof ck, "%s/rt%d.ckpt", tmp, k);
    CHECK(aa_peft_save_checkpoint(ck, &archs[k], ad) == 0);
    int step = -1;
    CHECK_MSG(aa_lora_load(ck, &archs[k], &back, &step) == 0, "%s", aa_last_error());
    CHECK(back && step == 0 && !memcmp(back, ad, n * sizeof *ad));
    free(back);
    back = NULL;
    /* BF16: every value rounded once to 8 significant bits, within half
     * an ulp, 2^-8 of it. */
    CHECK(aa_peft_export(dir, &archs[k], ad, AA_BF16, NULL) == 0);
    CHECK(aa_peft_import(dir, &archs[k], &back, NULL) == 0);
    double worst = 0;
    for (size_t i = 0; back && i < n; i++)
      worst = fmax(worst, fabs(back[i] - ad[i]) / fabs(ad[i]));
    CHECK_MSG(back && worst <= 1.0 / 256 && worst > 0, "bf16 relative error %g", worst);
    free(back);
    free(ad);
  }
}

/* Writes text to dir/name. */
static void put(const char *dir, const char *name, const char *text) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* A config for fx.arch's adapters with one field's value replaced (key
 * NULL: as exported), written into dir. */
static void config_with(const char *dir, const char *key, const char *value) {
  static char c[16384];
  int n = snprintf(c, sizeof c, "{");
  const char *keys[] = {"r", "lora_alpha", "target_modules", "bias", "use_rslora", "use_dora"};
  const char *vals[] = {
      "3",        "12",    "[\"q_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"down_proj\"]",
      "\"none\"", "false", "false"};
  for (int i = 0; i < 6; i++)
    n += snprintf(c + n, sizeof c - (size_t)n, "%s\"%s\": %s", i ? ", " : "", keys[i],
                  key && !strcmp(key, keys[i]) ? value : vals[i]);
  if (key && !strstr("r lora_alpha target_modules bias use_rslora use_dora", key))
    n += snprintf(c + n, sizeof c - (size_t)n, ", \"%s\": %s", key, value);
  snprintf(c + n, sizeof c - (size_t)n, "}\n");
  put(dir, "adapter_config.json", c);
}

/* dir/adapter_model.safetensors: fx's adapters as exported, less tensor
 * `drop` (-1: none) and with `extra` added (NULL: none). */
static int fill_zero(int i, float *dst, size_t numel, void *data) {
  (void)i, (void)data;
  memset(dst, 0, numel * sizeof *dst);
  return 0;
}
static void model_with(const char *dir, const char *drop, const char *extra, int64_t rows) {
  char p[600];
  snprintf(p, sizeof p, "%s/ref/adapter_model.safetensors", tmp);
  aa_st_file_t *f = NULL;
  if (aa_st_open(&f, p)) return;
  aa_st_entry_t e[64];
  int n = 0;
  for (int i = 0; i < f->n && n < 63; i++) {
    if (drop && !strcmp(f->tensors[i].name, drop)) continue;
    e[n] = (aa_st_entry_t){
        .name = f->tensors[i].name, .ndim = 2, .shape = {f->tensors[i].shape[0], f->tensors[i].shape[1]}};
    if (drop && !strcmp(drop, "*") && n == 0) e[n].shape[0] = rows;
    n++;
  }
  if (extra) e[n++] = (aa_st_entry_t){.name = extra, .ndim = 2, .shape = {rows, 4}};
  snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
  CHECK(aa_st_write(p, AA_F32, e, n, fill_zero, NULL) == 0);
  aa_st_close(f);
}

AA_TEST(disagreements_with_the_spec_are_refused_by_name) {
  const aa_arch_t *a = &fx.arch;
  char d[512], src[1200];
  size_t n;
  float *ad = adapters(a, &n), *out = NULL;
  snprintf(d, sizeof d, "%s/ref", tmp);
  CHECK(aa_peft_export(d, a, ad, AA_F32, NULL) == 0);
  free(ad);
  snprintf(d, sizeof d, "%s/bad", tmp);
  CHECK(mkdir(d, 0755) == 0);
  model_with(d, NULL, NULL, 0);
  config_with(d, NULL, NULL);
  CHECK_MSG(aa_peft_import(d, a, &out, NULL) == 0, "%s", aa_last_error()); /* the hand-written config reads */
  free(out);
  const struct {
    const char *key, *value, *needle;
    int code;
  } cfg[] = {
      {"r", "4", "r is 4, the spec's lora.r is 3", AA_EINVAL},
      {"lora_alpha", "16", "lora_alpha is 16, the spec's lora.alpha is 12", AA_EINVAL},
      {"target_modules", "[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"down_proj\"]",
       "target_modules adapt k, which the spec's lora.targets lacks", AA_EINVAL},
      {"target_modules", "[\"q_proj\", \"v_proj\", \"o_proj\", \"gate_proj\"]",
       "the spec's lora.targets has down, which target_modules does not adapt", AA_EINVAL},
      {"target_modules", "[\"q_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"down_proj\", \"lm_head\"]",
       "names \"lm_head\", which is none of the llama layers", AA_EINVAL},
      {"target_modules",
       "[\"layers.0.self_attn.q_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"down_proj\"]",
       "adapt block 1 differently from block 0", AA_EUNSUPPORTED},
      {"target_modules", "\".*proj\"", "regular expression", AA_EUNSUPPORTED},
      {"use_rslora", "true", "use_rslora is set", AA_EUNSUPPORTED},
      {"use_dora", "true", "use_dora is set", AA_EUNSUPPORTED},
      {"bias", "\"lora_only\"", "bias is not \"none\"", AA_EUNSUPPORTED},
      {"rank_pattern", "{\"q_proj\": 8}", "rank_pattern is set", AA_EUNSUPPORTED},
      {"modules_to_save", "[\"lm_head\"]", "modules_to_save is set", AA_EUNSUPPORTED},
      {"fan_in_fan_out", "true", "fan_in_fan_out is true", AA_EINVAL},
      {"peft_type", "\"IA3\"", "peft_type is not \"LORA\"", AA_EUNSUPPORTED},
  };
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    config_with(d, cfg[i].key, cfg[i].value);
    CHECK_ERR(aa_peft_import(d, a, &out, NULL), cfg[i].code, cfg[i].needle);
    CHECK(out == NULL);
  }
  /* A list too long to match against every block (bounded work). */
  char *many = malloc(1100 * 10 + 16);
  if (many) {
    size_t at = (size_t)sprintf(many, "[");
    for (int i = 0; i < 1100; i++)
      at += (size_t)sprintf(many + at, "%s\"m%d\"", i ? "," : "", i);
    sprintf(many + at, "]");
    config_with(d, "target_modules", many);
    CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EINVAL,
              "target_modules lists 1100 names, more than the 1024");
    free(many);
  }
  config_with(d, NULL, NULL);
  /* The tensors: one missing, one extra, one misshapen, one of another
   * dtype (a hand-written I32 file). */
  model_with(d, "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight", NULL, 0);
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EINVAL,
            "tensor base_model.model.model.layers.1.mlp.down_proj.lora_B.weight is missing");
  model_with(d, NULL, "base_model.model.lm_head.lora_A.weight", 3);
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EINVAL,
            "tensor base_model.model.lm_head.lora_A.weight is none of the spec's adapters");
  model_with(d, NULL, "base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight", 3);
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EINVAL, "layers.2.self_attn.q_proj.lora_A.weight is none");
  model_with(d, "*", NULL, 5);
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EINVAL, "has shape (5, ");
  const char *hdr = "{\"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight\":"
                    "{\"dtype\":\"I32\",\"shape\":[3,16],\"data_offsets\":[0,192]}}";
  snprintf(src, sizeof src, "%s/adapter_model.safetensors", d);
  FILE *f = fopen(src, "wb");
  const uint64_t hl = strlen(hdr);
  char zero[192] = {0};
  if (f) {
    fwrite(&hl, 8, 1, f), fputs(hdr, f), fwrite(zero, 1, sizeof zero, f);
    fclose(f);
  }
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EUNSUPPORTED, "is I32: only F32, BF16 and F16 convert");
  /* The .safetensors named itself (the config beside it); the files. */
  snprintf(src, sizeof src, "%s/ref/adapter_model.safetensors", tmp);
  CHECK_MSG(aa_peft_import(src, a, &out, NULL) == 0, "%s", aa_last_error());
  free(out);
  out = NULL;
  put(d, "adapter_config.json", "{\"r\": 3,");
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EPARSE, "adapter_config.json:1:");
  snprintf(src, sizeof src, "%s/adapter_config.json", d);
  unlink(src);
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_ENOENT, "no adapter_config.json beside the adapters");
  snprintf(src, sizeof src, "%s/adapter_model.safetensors", d);
  unlink(src);
  put(d, "adapter_model.bin", "pickle");
  CHECK_ERR(aa_peft_import(d, a, &out, NULL), AA_EUNSUPPORTED, "adapter_model.bin (a PyTorch pickle)");
  aa_arch_t full = *a;
  full.lora.r = 0;
  CHECK_ERR(aa_peft_import(d, &full, &out, NULL), AA_EINVAL, "the spec has no lora section");
  CHECK(out == NULL);
}

int main(void) {
  const char *s = getenv("AA_SOURCE_DIR");
  snprintf(ref, sizeof ref, "%s/tests/reference", s ? s : ".");
  char fp[1100];
  snprintf(fp, sizeof fp, "%s/peft_tiny.fixture", ref);
  if (load(fp)) {
    fprintf(stderr, "cannot read %s (set AA_SOURCE_DIR)\n", fp);
    return 1;
  }
  snprintf(tmp, sizeof tmp, "%s/aa_peft.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "mkdtemp failed\n");
    return 1;
  }
  RUN(peft_adapters_on_llama_tiny_give_pytorchs_logits);
  RUN(export_then_import_round_trips_bit_for_bit);
  RUN(disagreements_with_the_spec_are_refused_by_name);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
  free(fx.blob);
  return aa_test_summary();
}
