/* Hugging Face PEFT adapter files in and out (lora_peft.h). */
#include "lora_peft.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/file.h"
#include "lora.h"
#include "safetensors.h"

#define PEFT_PREFIX "base_model.model."
#define PEFT_MODEL "adapter_model.safetensors"
#define PEFT_CONFIG "adapter_config.json"

/* The Hugging Face module each target adapts, under its block's key. */
static const char *const peft_module[AA_LORA_NTARGETS] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",    "attn.c_attn",
    "attn.c_proj",      "mlp.c_fc",         "mlp.c_proj"};

/* The family's targets (a mask) and what precedes a block's index in a
 * module's key in the Hugging Face model PEFT wraps. */
static int family_targets(const aa_arch_t *a) {
  return aa_arch_is_llama(a) ? (1 << AA_LORA_QKV) - 1
                             : ((1 << AA_LORA_NTARGETS) - 1) & ~((1 << AA_LORA_QKV) - 1);
}
static const char *block_key(const aa_arch_t *a) {
  return aa_arch_is_llama(a) ? "model.layers." : "transformer.h.";
}

/* The module name an export lists in target_modules for target t: the
 * last component, but gpt2's two c_proj (attention and MLP) by their
 * parent when only one of them is a target. */
static const char *export_module(const aa_arch_t *a, int t) {
  const char *m = peft_module[t];
  const int both = 1 << AA_LORA_PROJ | 1 << AA_LORA_FCPROJ;
  if ((t == AA_LORA_PROJ || t == AA_LORA_FCPROJ) && (a->lora.targets & both) != both) return m;
  return strchr(m, '.') + 1;
}

/* The tensor of block l's target t (ab 0: lora_A, 1: lora_B). */
static void tensor_name(char *dst, size_t n, const aa_arch_t *a, int l, int t, int ab) {
  snprintf(dst, n, PEFT_PREFIX "%s%d.%s.lora_%c.weight", block_key(a), l, peft_module[t], ab ? 'B' : 'A');
}

/* Tensor i of an export (block-major, targets in order, A then B). */
static void tensor_at(const aa_arch_t *a, int i, int *l, int *t, int *ab) {
  const int per = 2 * aa_lora_n_targets(a);
  *l = i / per;
  int k = i % per / 2, tt = 0;
  for (; tt < AA_LORA_NTARGETS; tt++)
    if (a->lora.targets >> tt & 1 && k-- == 0) break;
  *t = tt;
  *ab = i % 2;
}

typedef struct {
  const aa_arch_t *a;
  const float *adapters;
} export_ctx_t;

static int fill(int i, float *dst, size_t numel, void *data) {
  const export_ctx_t *c = data;
  int l, t, ab, in, out, row;
  tensor_at(c->a, i, &l, &t, &ab);
  aa_lora_shape(c->a, t, 1, &in, &out, &row);
  const float *src = c->adapters + aa_gpt_lora_offset(c->a, l, t) + (ab ? (size_t)c->a->lora.r * in : 0);
  memcpy(dst, src, numel * sizeof *dst);
  return 0;
}

/* dir, created when missing. */
static int make_dir(const char *dir) {
  struct stat st;
  if (mkdir(dir, 0755) == 0) return 0;
  if (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
  if (errno == EEXIST) return aa_error(AA_EINVAL, "%s: exists and is not a directory", dir);
  return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot create the directory: %s", dir,
                  strerror(errno));
}

/* PEFT's LoraConfig for a, as save_pretrained writes it (keys sorted). */
static json_t *export_config(const aa_arch_t *a, const char *base) {
  const aa_lora_t *lo = &a->lora;
  json_t *tm = json_array(), *c = json_object();
  for (int t = 0; t < AA_LORA_NTARGETS; t++) {
    if (!(lo->targets >> t & 1)) continue;
    const char *m = export_module(a, t);
    size_t i;
    json_t *e;
    int dup = 0;
    json_array_foreach(tm, i, e) { dup |= !strcmp(json_string_value(e), m); }
    if (!dup) json_array_append_new(tm, json_string(m));
  }
  const double alpha = lo->alpha;
  json_object_set_new(c, "alpha_pattern", json_object());
  json_object_set_new(c, "auto_mapping", json_null());
  json_object_set_new(c, "base_model_name_or_path", base && base[0] ? json_string(base) : json_null());
  json_object_set_new(c, "bias", json_string("none"));
  json_object_set_new(c, "fan_in_fan_out", json_boolean(!aa_arch_is_llama(a)));
  json_object_set_new(c, "inference_mode", json_true());
  json_object_set_new(c, "init_lora_weights", json_true());
  json_object_set_new(c, "layers_pattern", json_null());
  json_object_set_new(c, "layers_to_transform", json_null());
  json_object_set_new(c, "lora_alpha",
                      alpha == (double)(json_int_t)alpha ? json_integer((json_int_t)alpha)
                                                         : json_real(alpha));
  json_object_set_new(c, "lora_dropout", json_real(0.0));
  json_object_set_new(c, "modules_to_save", json_null());
  json_object_set_new(c, "peft_type", json_string("LORA"));
  json_object_set_new(c, "r", json_integer(lo->r));
  json_object_set_new(c, "rank_pattern", json_object());
  json_object_set_new(c, "revision", json_null());
  json_object_set_new(c, "target_modules", tm);
  json_object_set_new(c, "task_type", json_string("CAUSAL_LM"));
  json_object_set_new(c, "use_dora", json_false());
  json_object_set_new(c, "use_rslora", json_false());
  return c;
}

int aa_peft_export(const char *dir, const aa_arch_t *a, const float *adapters, aa_dtype_t dtype,
                   const char *base) {
  if (!a->lora.r) return aa_error(AA_EINVAL, "peft: the spec has no lora section");
  char path[AA_PATH_MAX + 64];
  int rc = make_dir(dir);
  if (rc) return rc;
  const int n = 2 * a->n_layer * aa_lora_n_targets(a);
  aa_st_entry_t *e = calloc((size_t)n, sizeof *e);
  char(*names)[128] = calloc((size_t)n, sizeof *names);
  if (!e || !names) rc = aa_error(AA_ENOMEM, "peft: out of memory");
  for (int i = 0; !rc && i < n; i++) {
    int l, t, ab, in, out, row;
    tensor_at(a, i, &l, &t, &ab);
    aa_lora_shape(a, t, 1, &in, &out, &row);
    tensor_name(names[i], sizeof names[i], a, l, t, ab);
    e[i] = (aa_st_entry_t){.name = names[i], .ndim = 2, .shape = {ab ? out : a->lora.r, ab ? a->lora.r : in}};
  }
  export_ctx_t ctx = {a, adapters};
  snprintf(path, sizeof path, "%s/" PEFT_MODEL, dir);
  if (!rc) rc = aa_st_write(path, dtype, e, n, fill, &ctx);
  free(e);
  free(names);
  if (rc) return rc;
  json_t *c = export_config(a, base);
  char *text = c ? json_dumps(c, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
  json_decref(c);
  if (!text) return aa_error(AA_ENOMEM, "peft: out of memory writing the config");
  snprintf(path, sizeof path, "%s/" PEFT_CONFIG, dir);
  aa_wfile_t w;
  rc = aa_wfile_open(&w, path, 0644);
  if (!rc && (fputs(text, w.f) < 0 || fputc('\n', w.f) == EOF)) {
    aa_wfile_abort(&w);
    rc = aa_error(AA_EIO, "%s: write failed", path);
  } else if (!rc) {
    rc = aa_wfile_commit(&w);
  }
  free(text);
  return rc;
}

/* Whether PEFT's list matching adapts the module with key: the key itself
 * or one that ends in "." + entry. */
static int key_matches(const char *key, const char *entry) {
  const size_t k = strlen(key), e = strlen(entry);
  return !strcmp(key, entry) || (k > e && key[k - e - 1] == '.' && !strcmp(key + k - e, entry));
}

/* The targets of block l that the config's target_modules adapt (a list:
 * entries matched as above; "all-linear": every target); used[i] is set
 * for every entry i that adapts one. */
static int targets_of(const aa_arch_t *a, const json_t *tm, int l, int *used) {
  const int fam = family_targets(a);
  if (json_is_string(tm)) return fam;
  int mask = 0;
  size_t i;
  const json_t *e;
  json_array_foreach(tm, i, e) {
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      char key[128];
      if (!(fam >> t & 1)) continue;
      snprintf(key, sizeof key, "%s%d.%s", block_key(a), l, peft_module[t]);
      if (key_matches(key, json_string_value(e))) mask |= 1 << t, used[i] = 1;
    }
  }
  return mask;
}

/* A's target names of mask, comma-separated, into dst. */
static void mask_names(char *dst, size_t n, int mask) {
  size_t at = 0;
  dst[0] = '\0';
  for (int t = 0; t < AA_LORA_NTARGETS && at < n; t++)
    if (mask >> t & 1)
      at += (size_t)snprintf(dst + at, n - at, "%s%s", at ? ", " : "", aa_lora_target_name(t));
}

/* Checks the config at path (parsed as c) against a. */
static int check_config(const char *path, const json_t *c, const aa_arch_t *a) {
  const aa_lora_t *lo = &a->lora;
  const json_t *v;
  if (!json_is_object(c)) return aa_error(AA_EFORMAT, "%s: not a JSON object", path);
  if ((v = json_object_get(c, "peft_type")) && !json_is_null(v) &&
      (!json_is_string(v) || strcmp(json_string_value(v), "LORA")))
    return aa_error(AA_EUNSUPPORTED, "%s: peft_type is not \"LORA\": only LoRA adapters are read", path);
  static const char *const flags[][2] = {
      {"use_rslora", "rank-stabilised scaling, alpha / sqrt(r) (autoaccel's LoRA scales by alpha / r),"},
      {"use_dora", "weight-decomposed LoRA (DoRA)"}};
  for (int i = 0; i < 2; i++)
    if ((v = json_object_get(c, flags[i][0])) && json_is_true(v))
      return aa_error(AA_EUNSUPPORTED, "%s: %s is set: %s is not supported", path, flags[i][0], flags[i][1]);
  if ((v = json_object_get(c, "bias")) && !json_is_null(v) &&
      (!json_is_string(v) || strcmp(json_string_value(v), "none")))
    return aa_error(AA_EUNSUPPORTED, "%s: bias is not \"none\": trained biases are not supported", path);
  /* Fields that are empty or null in a config autoaccel can compute. */
  static const char *const empty[][2] = {{"rank_pattern", "a per-module r"},
                                         {"alpha_pattern", "a per-module alpha"},
                                         {"layers_to_transform", "adapters on some blocks only"},
                                         {"exclude_modules", "adapters on some blocks only"},
                                         {"modules_to_save", "modules trained in full beside the adapters"}};
  for (int i = 0; i < 5; i++) {
    v = json_object_get(c, empty[i][0]);
    if (v && !json_is_null(v) && !(json_is_object(v) && !json_object_size(v)) &&
        !(json_is_array(v) && !json_array_size(v)))
      return aa_error(AA_EUNSUPPORTED, "%s: %s is set: %s is not supported", path, empty[i][0], empty[i][1]);
  }
  if (aa_arch_is_llama(a) && (v = json_object_get(c, "fan_in_fan_out")) && json_is_true(v))
    return aa_error(AA_EINVAL, "%s: fan_in_fan_out is true, but Llama's linear layers are (out, in)", path);
  v = json_object_get(c, "r");
  if (!json_is_integer(v)) return aa_error(AA_EINVAL, "%s: r: expected an integer", path);
  if (json_integer_value(v) != lo->r)
    return aa_error(AA_EINVAL, "%s: r is %lld, the spec's lora.r is %d", path,
                    (long long)json_integer_value(v), lo->r);
  v = json_object_get(c, "lora_alpha");
  if (!json_is_number(v)) return aa_error(AA_EINVAL, "%s: lora_alpha: expected a number", path);
  if ((float)json_number_value(v) != lo->alpha)
    return aa_error(AA_EINVAL, "%s: lora_alpha is %g, the spec's lora.alpha is %g", path,
                    json_number_value(v), (double)lo->alpha);
  const json_t *tm = json_object_get(c, "target_modules");
  if (json_is_string(tm) && strcmp(json_string_value(tm), "all-linear"))
    return aa_error(AA_EUNSUPPORTED,
                    "%s: target_modules is the regular expression \"%s\": list the module names instead",
                    path, json_string_value(tm));
  if (!json_is_string(tm) && (!json_is_array(tm) || !json_array_size(tm)))
    return aa_error(AA_EINVAL, "%s: target_modules: expected a non-empty list of module names", path);
  /* Every entry is matched against every block's targets: bounded. */
  if (json_array_size(tm) > AA_PEFT_MODULES_MAX)
    return aa_error(AA_EINVAL, "%s: target_modules lists %zu names, more than the %d accepted", path,
                    json_array_size(tm), AA_PEFT_MODULES_MAX);
  size_t i;
  const json_t *e;
  json_array_foreach(tm, i, e) {
    if (!json_is_string(e))
      return aa_error(AA_EINVAL, "%s: target_modules[%zu]: expected a module name", path, i);
  }
  const size_t ne = json_is_array(tm) ? json_array_size(tm) : 0;
  int *used = calloc(ne + 1, sizeof *used);
  if (!used) return aa_error(AA_ENOMEM, "peft: out of memory");
  int mask = -1, rc = 0;
  for (int l = 0; l < a->n_layer && !rc; l++) {
    const int ml = targets_of(a, tm, l, used);
    if (mask >= 0 && ml != mask)
      rc = aa_error(AA_EUNSUPPORTED,
                    "%s: target_modules adapt block %d differently from block 0: every block "
                    "has the same targets in autoaccel's LoRA",
                    path, l);
    mask = ml;
  }
  for (i = 0; !rc && i < ne; i++)
    if (!used[i])
      rc = aa_error(AA_EINVAL, "%s: target_modules names \"%s\", which is none of the %s layers LoRA adapts",
                    path, json_string_value(json_array_get(tm, i)), a->family);
  free(used);
  if (rc) return rc;
  char names[128];
  if (mask & ~lo->targets) {
    mask_names(names, sizeof names, mask & ~lo->targets);
    return aa_error(AA_EINVAL, "%s: target_modules adapt %s, which the spec's lora.targets lacks", path,
                    names);
  }
  if (lo->targets & ~mask) {
    mask_names(names, sizeof names, lo->targets & ~mask);
    return aa_error(AA_EINVAL, "%s: the spec's lora.targets has %s, which target_modules does not adapt",
                    path, names);
  }
  return 0;
}

/* Parses a tensor's name as block l's target t's lora_A (ab 0) or lora_B
 * (1) of a: 0, or -1 for any other name. */
static int parse_name(const aa_arch_t *a, const char *name, int *l, int *t, int *ab) {
  const char *bk = block_key(a);
  const size_t np = strlen(PEFT_PREFIX), nb = strlen(bk);
  if (strncmp(name, PEFT_PREFIX, np) || strncmp(name + np, bk, nb)) return -1;
  const char *p = name + np + nb;
  long v = 0;
  if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) return -1;
  for (; *p >= '0' && *p <= '9' && v <= a->n_layer; p++)
    v = v * 10 + (*p - '0');
  if (*p++ != '.' || v >= a->n_layer) return -1;
  for (int tt = 0; tt < AA_LORA_NTARGETS; tt++) {
    const size_t nm = strlen(peft_module[tt]);
    if (!(a->lora.targets >> tt & 1) || strncmp(p, peft_module[tt], nm)) continue;
    for (int k = 0; k < 2; k++)
      if (!strcmp(p + nm, k ? ".lora_B.weight" : ".lora_A.weight")) {
        *l = (int)v, *t = tt, *ab = k;
        return 0;
      }
  }
  return -1;
}

/* src's model and config paths. */
static int resolve(const char *src, char *model, char *config, size_t n) {
  struct stat st;
  if (stat(src, &st) != 0) return aa_error(AA_ENOENT, "%s: %s", src, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    snprintf(model, n, "%s/" PEFT_MODEL, src);
    snprintf(config, n, "%s/" PEFT_CONFIG, src);
    if (stat(model, &st) != 0) {
      char bin[AA_PATH_MAX + 64];
      snprintf(bin, sizeof bin, "%s/adapter_model.bin", src);
      return stat(bin, &st) == 0
                 ? aa_error(AA_EUNSUPPORTED,
                            "%s holds adapter_model.bin (a PyTorch pickle), which is not read: "
                            "save the adapter with safe_serialization=True",
                            src)
                 : aa_error(AA_ENOENT, "%s: no " PEFT_MODEL, src);
    }
  } else {
    snprintf(model, n, "%s", src);
    const char *slash = strrchr(src, '/');
    snprintf(config, n, "%.*s" PEFT_CONFIG, slash ? (int)(slash - src + 1) : 0, src);
  }
  if (stat(config, &st) != 0)
    return aa_error(AA_ENOENT, "%s: no " PEFT_CONFIG " beside the adapters", config);
  if (st.st_size > (off_t)AA_PEFT_CONFIG_MAX)
    return aa_error(AA_EFORMAT, "%s: %lld bytes, over the %u a config may have", config,
                    (long long)st.st_size, AA_PEFT_CONFIG_MAX);
  return 0;
}

int aa_peft_import(const char *src, const aa_arch_t *a, float **out, aa_peft_info_t *info) {
  *out = NULL;
  if (!a->lora.r) return aa_error(AA_EINVAL, "peft: the spec has no lora section");
  char model[AA_PATH_MAX + 64], config[AA_PATH_MAX + 64];
  int rc = resolve(src, model, config, sizeof model);
  if (rc) return rc;
  json_error_t je;
  json_t *c = json_load_file(config, JSON_REJECT_DUPLICATES, &je);
  if (!c) return aa_error(AA_EPARSE, "%s:%d:%d: %s", config, je.line, je.column, je.text);
  rc = check_config(config, c, a);
  json_decref(c);
  if (rc) return rc;
  aa_st_file_t *f = NULL;
  if ((rc = aa_st_open(&f, model))) return rc;
  /* Every tensor one of the spec's adapters, of its shape and a float
   * type; then every adapter present (the names are distinct). */
  const int want = 2 * a->n_layer * aa_lora_n_targets(a);
  unsigned seen = 0;
  for (int i = 0; i < f->n && !rc; i++) {
    const aa_st_tensor_t *t = &f->tensors[i];
    int l, tg, ab, in, o, row;
    if (parse_name(a, t->name, &l, &tg, &ab)) {
      rc = aa_error(AA_EINVAL,
                    "%s: tensor %s is none of the spec's adapters (PEFT's %s%s<i>.<module>.lora_A/B.weight "
                    "for lora.targets, blocks 0..%d)",
                    model, t->name, PEFT_PREFIX, block_key(a), a->n_layer - 1);
      break;
    }
    aa_lora_shape(a, tg, 1, &in, &o, &row);
    const int64_t r0 = ab ? o : a->lora.r, r1 = ab ? a->lora.r : in;
    if (t->dtype != AA_ST_F32 && t->dtype != AA_ST_BF16 && t->dtype != AA_ST_F16)
      rc = aa_error(AA_EUNSUPPORTED, "%s: tensor %s is %s: only F32, BF16 and F16 convert", model, t->name,
                    aa_st_dtype_name(t->dtype));
    else if (t->ndim != 2 || t->shape[0] != r0 || t->shape[1] != r1)
      rc = aa_error(AA_EINVAL, "%s: tensor %s has shape %s(%lld, %lld), the spec's is (%lld, %lld)", model,
                    t->name, t->ndim == 2 ? "" : "of another rank ",
                    (long long)(t->ndim > 0 ? t->shape[0] : 0), (long long)(t->ndim > 1 ? t->shape[1] : 0),
                    (long long)r0, (long long)r1);
    seen |= 1u << t->dtype;
  }
  for (int i = 0; i < want && !rc && f->n != want; i++) {
    int l, t, ab;
    char name[128];
    tensor_at(a, i, &l, &t, &ab);
    tensor_name(name, sizeof name, a, l, t, ab);
    if (!aa_st_find(f, name)) rc = aa_error(AA_EINVAL, "%s: tensor %s is missing", model, name);
  }
  const size_t n = (size_t)a->n_layer * aa_lora_block_numel(a, 1);
  float *p = rc ? NULL : malloc(n * sizeof *p);
  if (!rc && !p) rc = aa_error(AA_ENOMEM, "peft: out of memory for %zu adapter values", n);
  for (int i = 0; i < want && !rc; i++) {
    int l, t, ab, in, o, row;
    char name[128];
    tensor_at(a, i, &l, &t, &ab);
    tensor_name(name, sizeof name, a, l, t, ab);
    aa_lora_shape(a, t, 1, &in, &o, &row);
    rc = aa_st_read_f32(f, aa_st_find(f, name),
                        p + aa_gpt_lora_offset(a, l, t) + (ab ? (size_t)a->lora.r * in : 0));
  }
  aa_st_close(f);
  if (rc) {
    free(p);
    return rc;
  }
  if (info) {
    memset(info, 0, sizeof *info);
    info->tensors = want;
    snprintf(info->model, sizeof info->model, "%s", model);
    size_t at = 0;
    for (int d = 0; d < AA_ST_N_DTYPES; d++)
      if (seen >> d & 1u && at < sizeof info->dtypes)
        at += (size_t)snprintf(info->dtypes + at, sizeof info->dtypes - at, "%s%s", at ? "+" : "",
                               aa_st_dtype_name((aa_st_dtype_t)d));
  }
  *out = p;
  return 0;
}

int aa_peft_save_checkpoint(const char *path, const aa_arch_t *a, const float *adapters) {
  /* aa_lora_save reads the architecture, the adapters and the backend (to
   * download them) of the model it is given, nothing else: a host model of
   * no base but these adapters. */
  aa_gpt_t m;
  memset(&m, 0, sizeof m);
  m.arch = *a;
  m.lora.dtype = AA_F32;
  m.lora.numel = (size_t)a->n_layer * aa_lora_block_numel(a, 1);
  m.lora.data = (void *)adapters;
  m.lora_scale = a->lora.alpha / (float)a->lora.r;
  m.tp = m.pp = 1;
  m.ops = aa_ops_cpu();
  return aa_lora_save(path, &m, NULL, NULL, 1);
}
