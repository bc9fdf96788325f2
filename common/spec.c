/* Model-spec parsing and validation: a JSON file (read with jansson) into an
 * aa_model_spec_t, plus the architecture's canonical hash, its parameter
 * count and the learning-rate schedule. Format: docs/model-spec.md.
 *
 * Every field is described once, in a table of the shared field reader
 * (common/json.h: key, kind, range, default, where it lands), the same
 * reader the strategy file uses. Walking the tables, the unknown-key check,
 * the type check, the range check and the defaults cannot drift apart, and
 * aa_arch_validate() reuses the same ranges. */
#include "spec.h"

#include "aa.h"
#include "json.h"
#include "spec_tree.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A spec is a few hundred bytes; the cap keeps a wrong file (a token shard,
 * a checkpoint) from being read whole before it is rejected. */
#define SPEC_MAX_BYTES (1u << 20)
#define NAME_MAX_LEN ((int)sizeof(((aa_model_spec_t *)0)->name) - 1)

/* What every error message needs (json: where the spec came from), and
 * where its relative paths are anchored; json.data points back here. */
typedef struct {
  aa_json_ctx_t json;
  const char *base_dir;
  const char *stem_of; /* the default name is this path's stem */
} ctx_t;

static const char *const family_choices[] = {"gpt2", "llama", NULL};
static const char *const sched_choices[] = {"cosine", "constant", NULL}; /* = aa_lr_schedule_t */

/* A name is shown in tables and logs: 1..127 bytes, no control bytes. */
static const char *name_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty";
  if (len > (size_t)NAME_MAX_LEN) return "must be at most 127 bytes long";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  return NULL;
}

/* The family: one of family_choices, kept as text in char family[16]. */
static int read_family(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  int idx = 0;
  const aa_json_field_t f = {.kind = AA_JSON_ENUM, .names = family_choices, .size = sizeof idx};
  int rc = aa_json_read_value(c, path, &f, v, &idx);
  if (!rc) snprintf(dst, sizeof(((aa_arch_t *)0)->family), "%s", family_choices[idx]);
  return rc;
}

/* A boolean stored negated: "norm_topk_prob" (Hugging Face's name, true by
 * default) into moe.topk_raw, so that a zeroed aa_moe_t is Mixtral's. */
static int read_not_bool(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  int b = 0;
  const aa_json_field_t f = {.kind = AA_JSON_BOOL, .size = sizeof b};
  int rc = aa_json_read_value(c, path, &f, v, &b);
  if (!rc) *(int *)dst = !b;
  return rc;
}

static const char *const lora_target_names[AA_LORA_NTARGETS + 1] = {
    "q", "k", "v", "o", "gate", "up", "down", "qkv", "proj", "fc", "fcproj", NULL};
static const char *const lora_init_choices[] = {"default", NULL};

const char *aa_lora_target_name(int t) { return t >= 0 && t < AA_LORA_NTARGETS ? lora_target_names[t] : "?"; }

/* lora.targets: a non-empty array of distinct target names into a mask
 * (which family they belong to is check_lora's). */
static int read_targets(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_array(v) || json_array_size(v) == 0)
    return aa_json_fail_type(c, path, "a non-empty array of layer names", v);
  int mask = 0;
  size_t i;
  const json_t *e;
  json_array_foreach(v, i, e) {
    int idx = 0;
    char ep[64];
    snprintf(ep, sizeof ep, "%s[%zu]", path, i);
    const aa_json_field_t f = {.kind = AA_JSON_ENUM, .names = lora_target_names, .size = sizeof idx};
    int rc = aa_json_read_value(c, ep, &f, e, &idx);
    if (rc) return rc;
    if (mask & (1 << idx))
      return aa_json_fail(c, AA_EINVAL, ep, "names \"%s\" twice", lora_target_names[idx]);
    mask |= 1 << idx;
  }
  *(int *)dst = mask;
  return 0;
}

/* A spec-relative path resolved against the spec's directory (absolute
 * paths are kept; no base_dir keeps the path relative to the current
 * directory) into char[AA_PATH_MAX]. */
static int read_path(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_string(v)) return aa_json_fail_type(c, path, "a string", v);
  const ctx_t *sc = c->data;
  const char *p = json_string_value(v);
  size_t len = json_string_length(v);
  if (len == 0) return aa_json_fail(c, AA_EINVAL, path, "must not be empty");
  const char *dir = (p[0] == '/' || !sc->base_dir) ? "" : sc->base_dir;
  size_t dlen = strlen(dir);
  const char *sep = (dlen > 0 && dir[dlen - 1] != '/') ? "/" : "";
  size_t total = dlen + strlen(sep) + len;
  if (total >= AA_PATH_MAX) {
    if (dlen)
      return aa_json_fail(c, AA_EINVAL, path,
                          "path too long (%zu bytes after resolving against the spec's directory; max %d)", total,
                          AA_PATH_MAX - 1);
    return aa_json_fail(c, AA_EINVAL, path, "path too long (%zu bytes; max %d)", total, AA_PATH_MAX - 1);
  }
  char *out = dst;
  memcpy(out, dir, dlen);
  memcpy(out + dlen, sep, strlen(sep));
  memcpy(out + dlen + strlen(sep), p, len);
  out[total] = '\0';
  return 0;
}

#define AT(type, m) .off = offsetof(type, m), .size = sizeof(((type *)0)->m)
#define INT_F(k, req, lo, hi, def, type, m)                                                                  \
  { .key = k, .kind = AA_JSON_INT, .required = req, .imin = lo, .imax = hi, .idef = def, AT(type, m) }
#define FLOAT_F(k, req, lo, lo_open, hi, hi_open, def, type, m)                                              \
  {                                                                                                          \
    .key = k, .kind = AA_JSON_NUMBER, .required = req, .fmin = lo, .fmin_open = lo_open, .fmax = hi,         \
    .fmax_open = hi_open, .fdef = def, AT(type, m)                                                           \
  }
#define BOOL_F(k, type, m)                                                                                   \
  { .key = k, .kind = AA_JSON_BOOL, AT(type, m) }
#define PATH_F(k, req, m)                                                                                    \
  { .key = k, .kind = AA_JSON_CUSTOM, .required = req, .parse = read_path, AT(aa_model_spec_t, m) }
#define SECTION_F(k, req)                                                                                    \
  { .key = k, .kind = AA_JSON_OBJECT, .required = req }

/* Order is the order fields are checked, documented and listed in errors.
 * Sections are only type-checked here; parse_root reads each with its
 * own table, after the top level. */
static const aa_json_field_t top_fields[] = {
    {.key = "name", .kind = AA_JSON_STRING, .check = name_rule, AT(aa_model_spec_t, name)},
    SECTION_F("model", true),
    SECTION_F("train", true),
    SECTION_F("data", false), /* planning needs none; training checks (aa_spec_require_data) */
    PATH_F("init_weights", false, init_weights),
    SECTION_F("lora", false), /* fine-tune adapters (aa_lora_t); training needs init_weights */
};

/* model.moe (llama only): the first three required when the object is
 * given. Read into aa_arch_t's moe; check_arch holds the rules between
 * fields. */
static const aa_json_field_t moe_fields[] = {
    INT_F("experts", true, 1, 1024, 0, aa_arch_t, moe.experts),
    INT_F("top_k", true, 1, 1024, 0, aa_arch_t, moe.top_k),
    INT_F("d_ff_expert", true, 1, 262144, 0, aa_arch_t, moe.d_ff_expert),
    INT_F("shared_experts", false, 0, 64, 0, aa_arch_t, moe.shared_experts),
    INT_F("every", false, 1, 256, 1, aa_arch_t, moe.every),
    FLOAT_F("aux_loss_coef", false, 0.0, false, 1e3, false, 0.01, aa_arch_t, moe.aux_loss_coef),
    FLOAT_F("z_loss_coef", false, 0.0, false, 1e3, false, 0.0, aa_arch_t, moe.z_loss_coef),
    FLOAT_F("capacity_factor", false, 0.0, false, 1024.0, false, 0.0, aa_arch_t, moe.capacity_factor),
    BOOL_F("shared_expert_gate", aa_arch_t, moe.shared_expert_gate),
    {.key = "norm_topk_prob", .kind = AA_JSON_CUSTOM, .parse = read_not_bool, AT(aa_arch_t, moe.topk_raw)},
};
#define NMOE (sizeof moe_fields / sizeof moe_fields[0])

/* The top-level "lora" section (read into aa_arch_t's lora); alpha's
 * default (r) depends on r: parse_lora sets it. */
static const aa_json_field_t lora_fields[] = {
    INT_F("r", true, 1, 4096, 0, aa_arch_t, lora.r),
    FLOAT_F("alpha", false, 0.0, true, 1e6, false, 0.0, aa_arch_t, lora.alpha),
    {.key = "targets",
     .kind = AA_JSON_CUSTOM,
     .required = true,
     .parse = read_targets,
     AT(aa_arch_t, lora.targets)},
    {.key = "init", .kind = AA_JSON_ENUM, .names = lora_init_choices, AT(aa_arch_t, lora.init)},
};
#define NLORA (sizeof lora_fields / sizeof lora_fields[0])

/* d_ff's default (4 * d_model) depends on another field; parse_model sets it. */
static const aa_json_field_t model_fields[] = {
    {.key = "family", .kind = AA_JSON_CUSTOM, .parse = read_family, AT(aa_arch_t, family)},
    INT_F("n_layer", true, 1, 256, 0, aa_arch_t, n_layer),
    INT_F("n_head", true, 1, 256, 0, aa_arch_t, n_head),
    INT_F("d_model", true, 1, 65536, 0, aa_arch_t, d_model),
    INT_F("d_ff", false, 1, 262144, 0, aa_arch_t, d_ff),
    INT_F("seq_len", true, 1, AA_SEQ_LEN_MAX, 0, aa_arch_t, seq_len),
    INT_F("vocab_size", true, 2, 1048576, 0, aa_arch_t, vocab_size),
    INT_F("n_kv_head", false, 1, 256, 0, aa_arch_t, n_kv_head),
    FLOAT_F("rope_theta", false, 0.0, true, 1e9, false, 10000.0, aa_arch_t, rope_theta),
    FLOAT_F("norm_eps", false, 0.0, true, 1.0, false, 1e-5, aa_arch_t, norm_eps),
    BOOL_F("qkv_bias", aa_arch_t, qkv_bias),
    {.key = "moe", .kind = AA_JSON_OBJECT, .sub = moe_fields, .nsub = NMOE},
};

/* min_lr's default (lr / 10) depends on lr; parse_train sets it. */
static const aa_json_field_t train_fields[] = {
    INT_F("global_batch", true, 1, INT_MAX, 0, aa_train_cfg_t, global_batch),
    INT_F("steps", true, 1, INT_MAX, 0, aa_train_cfg_t, steps),
    FLOAT_F("lr", true, 0.0, true, INFINITY, false, 0.0, aa_train_cfg_t, lr),
    FLOAT_F("min_lr", false, 0.0, false, INFINITY, false, 0.0, aa_train_cfg_t, min_lr),
    INT_F("warmup_steps", false, 0, INT_MAX, 0, aa_train_cfg_t, warmup_steps),
    {.key = "schedule", .kind = AA_JSON_ENUM, .names = sched_choices, AT(aa_train_cfg_t, schedule)},
    FLOAT_F("weight_decay", false, 0.0, false, INFINITY, false, 0.1, aa_train_cfg_t, weight_decay),
    FLOAT_F("beta1", false, 0.0, false, 1.0, true, 0.9, aa_train_cfg_t, beta1),
    FLOAT_F("beta2", false, 0.0, false, 1.0, true, 0.95, aa_train_cfg_t, beta2),
    FLOAT_F("eps", false, 0.0, true, INFINITY, false, 1e-8, aa_train_cfg_t, eps),
    FLOAT_F("grad_clip", false, 0.0, false, INFINITY, false, 1.0, aa_train_cfg_t, grad_clip),
    INT_F("seed", false, 0, LLONG_MAX, 1234, aa_train_cfg_t, seed),
    INT_F("eval_every", false, 0, INT_MAX, 100, aa_train_cfg_t, eval_every),
    INT_F("eval_batches", false, 1, INT_MAX, 8, aa_train_cfg_t, eval_batches),
    INT_F("checkpoint_every", false, 0, INT_MAX, 0, aa_train_cfg_t, checkpoint_every),
    INT_F("keep_last", false, 0, INT_MAX, 0, aa_train_cfg_t, keep_last),
    {.key = "weights_only_checkpoints", .kind = AA_JSON_BOOL, AT(aa_train_cfg_t, weights_only)},
    /* Merak's names of the two above; parse_train reads them. */
    {.key = "save_total_limit", .kind = AA_JSON_KEY},
    {.key = "no_save_optim", .kind = AA_JSON_KEY},
};

static const aa_json_field_t data_fields[] = {
    PATH_F("train", true, train_data),
    PATH_F("val", false, val_data),
};

#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))

_Static_assert(sizeof(aa_lr_schedule_t) == sizeof(int), "an enum field is read as an int");
_Static_assert(sizeof(((aa_train_cfg_t *)0)->seed) == sizeof(int64_t), "seed is read as a 64-bit integer");

/* The MoE rules between fields (each field's range is its table's). */
static int check_moe(const aa_json_ctx_t *c, const aa_arch_t *a) {
  const aa_moe_t *m = &a->moe;
  if (m->experts == 0) return 0;
  if (!aa_arch_is_llama(a))
    return aa_json_fail(c, AA_EINVAL, "model.moe",
                        "mixture-of-experts layers need family \"llama\" (SwiGLU experts; got \"%.*s\")",
                        (int)strnlen(a->family, sizeof a->family), a->family);
  if (m->top_k > m->experts)
    return aa_json_fail(c, AA_EINVAL, "model.moe.top_k", "must be at most model.moe.experts (%d > %d)",
                        m->top_k, m->experts);
  if (m->every > a->n_layer)
    return aa_json_fail(c, AA_EINVAL, "model.moe.every",
                        "must be at most model.n_layer (%d > %d): no layer would be an MoE layer", m->every,
                        a->n_layer);
  if (m->shared_expert_gate && !m->shared_experts)
    return aa_json_fail(c, AA_EINVAL, "model.moe.shared_expert_gate",
                        "gates the shared experts: it needs model.moe.shared_experts >= 1");
  return 0;
}

/* The LoRA rules between fields: the targets are the family's layers, of
 * a dense model. */
static int check_lora(const aa_json_ctx_t *c, const aa_arch_t *a) {
  const aa_lora_t *l = &a->lora;
  if (l->r == 0) return 0;
  const int llama = aa_arch_is_llama(a);
  const int mine = llama ? (1 << AA_LORA_QKV) - 1 : ((1 << AA_LORA_NTARGETS) - 1) & ~((1 << AA_LORA_QKV) - 1);
  for (int t = 0; t < AA_LORA_NTARGETS; t++)
    if ((l->targets & (1 << t)) && !(mine & (1 << t)))
      return aa_json_fail(c, AA_EINVAL, "lora.targets", "\"%s\" is not a %s layer (%s: %s)",
                          lora_target_names[t], a->family, a->family,
                          llama ? "q, k, v, o, gate, up, down" : "qkv, proj, fc, fcproj");
  if (!l->targets || (l->targets & ~mine))
    return aa_json_fail(c, AA_EINVAL, "lora.targets", "must name at least one %s layer", a->family);
  if (!(l->alpha > 0)) return aa_json_fail(c, AA_EINVAL, "lora.alpha", "must be > 0");
  if (a->moe.experts)
    return aa_json_fail(c, AA_EINVAL, "lora",
                        "adapters on mixture-of-experts models are not supported yet (model.moe is set)");
  return 0;
}

/* Architecture rules beyond a single field's range. */
static int check_arch(const aa_json_ctx_t *c, const aa_arch_t *a) {
  if (a->d_model % a->n_head != 0)
    return aa_json_fail(c, AA_EINVAL, "model.n_head", "must divide model.d_model (%d %% %d != 0)", a->d_model,
                        a->n_head);
  const int kv = aa_arch_kv_heads(a);
  if (!aa_arch_is_llama(a) && a->n_kv_head && a->n_kv_head != a->n_head)
    return aa_json_fail(c, AA_EINVAL, "model.n_kv_head",
                        "grouped-query attention needs family \"llama\" (gpt2 has n_kv_head = n_head = %d, got %d)",
                        a->n_head, a->n_kv_head);
  if (a->n_head % kv != 0)
    return aa_json_fail(c, AA_EINVAL, "model.n_kv_head", "must divide model.n_head (%d %% %d != 0)", a->n_head, kv);
  if (aa_arch_is_llama(a) && (a->d_model / a->n_head) % 2 != 0)
    return aa_json_fail(c, AA_EINVAL, "model.n_head",
                        "rotary embeddings rotate pairs: the head size d_model / n_head must be even (got %d)",
                        a->d_model / a->n_head);
  if (a->qkv_bias && !aa_arch_is_llama(a))
    return aa_json_fail(c, AA_EINVAL, "model.qkv_bias",
                        "is a llama option (gpt2's q, k and v always have biases)");
  if (aa_arch_is_llama(a) && !(a->rope_theta > 0 && a->norm_eps > 0))
    return aa_json_fail(c, AA_EINVAL, "model.rope_theta", "rope_theta and norm_eps must be > 0 for llama");
  int rc = check_moe(c, a);
  return rc ? rc : check_lora(c, a);
}

int aa_arch_is_llama(const aa_arch_t *a) { return !strncmp(a->family, "llama", sizeof a->family); }

int aa_arch_kv_heads(const aa_arch_t *a) {
  return aa_arch_is_llama(a) && a->n_kv_head > 0 ? a->n_kv_head : a->n_head;
}

static int parse_model(const ctx_t *c, const json_t *obj, aa_arch_t *a) {
  aa_json_fields_default(model_fields, NFIELDS(model_fields), a);
  aa_json_fields_default(moe_fields, NMOE, a);
  snprintf(a->family, sizeof a->family, "%s", family_choices[0]);
  a->qkv_bias = a->moe.shared_expert_gate = a->moe.topk_raw = 0; /* the bools' defaults */
  int rc = aa_json_read_fields(&c->json, obj, "model", model_fields, NFIELDS(model_fields), a);
  if (rc) return rc;
  if (!json_object_get(obj, "moe")) memset(&a->moe, 0, sizeof a->moe); /* dense: no MoE field set */
  if (!json_object_get(obj, "d_ff")) a->d_ff = 4 * a->d_model;
  if (!json_object_get(obj, "n_kv_head")) a->n_kv_head = a->n_head;
  return check_arch(&c->json, a);
}

/* The optional "lora" section into a->lora (zero without one), checked
 * against the model already read. */
static int parse_lora(const ctx_t *c, const json_t *obj, aa_arch_t *a) {
  memset(&a->lora, 0, sizeof a->lora);
  if (!obj) return 0;
  int rc = aa_json_read_fields(&c->json, obj, "lora", lora_fields, NLORA, a);
  if (rc) return rc;
  if (!json_object_get(obj, "alpha")) a->lora.alpha = (float)a->lora.r;
  return check_lora(&c->json, a);
}

/* Merak's save_total_limit (-1: keep all, else at least 1) and
 * no_save_optim, read into keep_last and weights_only; a setting is given
 * under one of its names only. */
static int parse_merak_names(const ctx_t *c, const json_t *obj, aa_train_cfg_t *t) {
  const json_t *lim = json_object_get(obj, "save_total_limit"), *nso = json_object_get(obj, "no_save_optim");
  if (lim && json_object_get(obj, "keep_last"))
    return aa_json_fail(&c->json, AA_EINVAL, "train.save_total_limit",
                        "is Merak's name for train.keep_last: give one of the two");
  if (nso && json_object_get(obj, "weights_only_checkpoints"))
    return aa_json_fail(&c->json, AA_EINVAL, "train.no_save_optim",
                        "is Merak's name for train.weights_only_checkpoints: give one of the two");
  if (lim) {
    if (!json_is_integer(lim))
      return aa_json_fail_type(&c->json, "train.save_total_limit", "an integer", lim);
    json_int_t v = json_integer_value(lim);
    if (v != -1 && (v < 1 || v > INT_MAX))
      return aa_json_fail(&c->json, AA_EINVAL, "train.save_total_limit",
                          "must be -1 (keep every checkpoint) or between 1 and %d (got %lld)", INT_MAX,
                          (long long)v);
    t->keep_last = v < 0 ? 0 : (int)v;
  }
  if (nso) {
    if (!json_is_boolean(nso))
      return aa_json_fail_type(&c->json, "train.no_save_optim", "true or false", nso);
    t->weights_only = json_is_true(nso);
  }
  return 0;
}

static int parse_train(const ctx_t *c, const json_t *obj, aa_train_cfg_t *t) {
  aa_json_fields_default(train_fields, NFIELDS(train_fields), t);
  int rc = aa_json_read_fields(&c->json, obj, "train", train_fields, NFIELDS(train_fields), t);
  if (rc) return rc;
  if (!json_object_get(obj, "min_lr")) t->min_lr = t->lr / 10.0f;
  if (t->min_lr > t->lr) {
    char a[32], b[32];
    return aa_json_fail(&c->json, AA_EINVAL, "train.min_lr", "must be <= train.lr (%s > %s)",
                        aa_json_fmt_num(a, t->min_lr, true), aa_json_fmt_num(b, t->lr, true));
  }
  if (t->warmup_steps > t->steps)
    return aa_json_fail(&c->json, AA_EINVAL, "train.warmup_steps", "must be <= train.steps (%d > %d)",
                        t->warmup_steps, t->steps);
  return parse_merak_names(c, obj, t);
}

/* The default name: the basename of origin without a ".json" suffix. */
static int default_name(const ctx_t *c, char *dst) {
  const char *o = c->stem_of;
  const char *slash = strrchr(o, '/');
  const char *b = slash ? slash + 1 : o;
  size_t len = strlen(b);
  if (len > 5 && strcmp(b + len - 5, ".json") == 0) len -= 5;
  const char *rule = name_rule(b, len);
  if (rule) return aa_json_fail(&c->json, AA_EINVAL, "name", "the file stem %s; set \"name\" in the spec", rule);
  memcpy(dst, b, len);
  dst[len] = '\0';
  return 0;
}

/* Whether top-level key (section "") or data.key is a file path: the
 * fields read_path reads, which a base file's directory anchors. */
static bool is_path_field(const char *section, const char *key) {
  const aa_json_field_t *t = !*section ? top_fields : !strcmp(section, "data") ? data_fields : NULL;
  size_t n = !*section ? NFIELDS(top_fields) : NFIELDS(data_fields);
  for (size_t i = 0; t && i < n; i++)
    if (t[i].parse == read_path && !strcmp(t[i].key, key)) return true;
  return false;
}

/* Validates the document root into *out (written only on success). */
static int parse_root(aa_model_spec_t *out, const json_t *root, ctx_t *c) {
  c->json.data = c;
  /* A file's "extends" is merged away before this (spec_tree.c): one left
   * here came from text (the planner's, a --set), which names no file. */
  if (json_is_object(root) && json_object_get(root, "extends"))
    return aa_json_fail(&c->json, AA_EINVAL, "extends",
                        "only a spec file may extend another (not a spec given as text, nor a --set)");
  /* Parsed into a local so *out stays untouched on any failure. */
  aa_model_spec_t *s = calloc(1, sizeof *s);
  int rc = 0;
  if (!s) return aa_error(AA_ENOMEM, "%s: out of memory", c->json.origin);
  if ((rc = aa_json_read_top(&c->json, root, top_fields, NFIELDS(top_fields), s))) goto cleanup;
  if ((rc = parse_model(c, json_object_get(root, "model"), &s->arch))) goto cleanup;
  if ((rc = parse_lora(c, json_object_get(root, "lora"), &s->arch))) goto cleanup;
  if ((rc = parse_train(c, json_object_get(root, "train"), &s->train))) goto cleanup;
  /* A data section, when given, must name the training shard. */
  const json_t *data = json_object_get(root, "data");
  if (data && (rc = aa_json_read_fields(&c->json, data, "data", data_fields, NFIELDS(data_fields), s)))
    goto cleanup;
  if (!s->name[0] && (rc = default_name(c, s->name))) goto cleanup;
  *out = *s;

cleanup:
  free(s);
  return rc;
}

int aa_spec_parse(aa_model_spec_t *out, const char *json, const char *base_dir, const char *origin) {
  ctx_t c = {.json = {.origin = origin ? origin : "<string>"},
             .base_dir = (base_dir && *base_dir) ? base_dir : NULL,
             .stem_of = (origin && *origin) ? origin : "model"};
  json_t *root;
  int rc =
      aa_json_parse_text(json, strlen(json), SPEC_MAX_BYTES, c.json.origin, "a spec", "a JSON object", &root);
  if (rc) return rc;
  rc = parse_root(out, root, &c);
  json_decref(root);
  return rc;
}

int aa_spec_set_check(const char *set) { return aa_spec_tree_check_set(set); }

int aa_spec_load_set(aa_model_spec_t *out, const char *path, const char *const *sets, size_t nsets) {
  aa_spec_tree_t *tree = NULL;
  json_t *root = NULL;
  int rc = aa_spec_tree_load(&tree, &root, path, SPEC_MAX_BYTES, sets, nsets, is_path_field);
  if (rc) return rc;
  /* The spec's directory: everything before the last '/', "/" for a file
   * in the root, none (stay relative to the cwd) for a bare file name. */
  char *dir = NULL;
  const char *slash = strrchr(path, '/');
  if (slash) {
    size_t dlen = slash == path ? 1 : (size_t)(slash - path);
    if (!(dir = strndup(path, dlen))) rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
  }
  ctx_t c = {.json = {.origin = path}, .base_dir = dir, .stem_of = path};
  if (!rc && (rc = parse_root(out, root, &c))) aa_spec_tree_blame(tree, path);
  free(dir);
  json_decref(root);
  aa_spec_tree_free(tree);
  return rc;
}

int aa_spec_load(aa_model_spec_t *out, const char *path) { return aa_spec_load_set(out, path, NULL, 0); }

int aa_spec_require_planned(const aa_model_spec_t *s, bool cuda, const char *what) {
  if (!cuda) return 0;
  if (s->arch.lora.r)
    return aa_error(AA_EUNSUPPORTED,
                    "%s: %s fine-tunes LoRA adapters (lora): autoaccel measures and plans them on CPUs, and "
                    "`train --device cuda:N` fine-tunes them on one GPU, "
                    "but the planner does not search them on cuda pools yet (docs/model-spec.md \"lora\")",
                    what, s->name);
  return 0;
}

int aa_spec_require_data(const aa_model_spec_t *s, const char *what) {
  if (!s->train_data[0])
    return aa_error(
        AA_EINVAL,
        "%s: %s has no training data: data.train is required to train or measure a model (add \"data\": "
        "{\"train\": \"PATH\"} to its spec; plan and strategy check take a spec without one)",
        what, s->name);
  if (s->arch.lora.r && !s->init_weights[0])
    return aa_error(AA_EINVAL,
                    "%s: %s fine-tunes LoRA adapters (lora): init_weights is required, the base they adapt "
                    "(plan and strategy check take a spec without one)",
                    what, s->name);
  return aa_arch_require_engine(&s->arch, what);
}

_Static_assert(AA_SEQ_LEN_ENGINE_MAX == 65536 && AA_SEQ_LEN_MAX == 1048576,
               "aa_arch_require_engine's message spells the two limits out");

int aa_arch_require_engine(const aa_arch_t *a, const char *what) {
  if (a->seq_len <= AA_SEQ_LEN_ENGINE_MAX) return 0;
  return aa_error(AA_EINVAL,
                  "%s: seq_len %d: the engine trains at most 65,536 tokens per sequence; plan and strategy "
                  "check accept up to 1,048,576",
                  what, a->seq_len);
}

/* Whether family (NUL-terminated) is one of family_choices. */
static int family_known(const char *family) {
  for (int i = 0; family_choices[i]; i++)
    if (!strcmp(family, family_choices[i])) return 1;
  return 0;
}

int aa_arch_validate(const aa_arch_t *a) {
  const aa_json_ctx_t c = {.origin = NULL};
  char path[64];
  if (!memchr(a->family, '\0', sizeof a->family) || !family_known(a->family)) {
    char got[64];
    char fam[sizeof a->family + 1];
    memcpy(fam, a->family, sizeof a->family);
    fam[sizeof a->family] = '\0';
    aa_json_sanitize(got, sizeof got, fam);
    return aa_json_fail(&c, AA_EINVAL, "model.family", "must be one of: gpt2, llama (got \"%s\")", got);
  }
  for (size_t i = 0; i < NFIELDS(model_fields); i++) {
    const aa_json_field_t *f = &model_fields[i];
    if (f->kind != AA_JSON_INT) continue;
    if (f->off == offsetof(aa_arch_t, n_kv_head) && a->n_kv_head == 0) continue; /* 0: n_head */
    snprintf(path, sizeof path, "model.%s", f->key);
    int rc = aa_json_check_int(&c, path, f, *(const int *)((const char *)a + f->off));
    if (rc) return rc;
  }
  if (a->moe.experts) {
    int rc = aa_json_check_fields(&c, "model.moe", moe_fields, NMOE, a);
    if (rc) return rc;
  }
  if (a->lora.r) {
    if (a->lora.r < 1 || a->lora.r > 4096)
      return aa_json_fail(&c, AA_EINVAL, "lora.r", "must be between 1 and 4096 (got %d)", a->lora.r);
    if (a->lora.init != 0) return aa_json_fail(&c, AA_EINVAL, "lora.init", "must be \"default\"");
  }
  return check_arch(&c, a);
}

void aa_arch_hash(const aa_arch_t *a, char out[17]) {
  char text[320];
  int n = snprintf(text, sizeof text,
                   "family=%.*s;n_layer=%d;n_head=%d;d_model=%d;d_ff=%d;seq_len=%d;vocab_size=%d",
                   (int)strnlen(a->family, sizeof a->family), a->family, a->n_layer, a->n_head, a->d_model,
                   a->d_ff, a->seq_len, a->vocab_size);
  if (aa_arch_is_llama(a))
    n += snprintf(text + n, sizeof text - (size_t)n, ";n_kv_head=%d;rope_theta=%.9g;norm_eps=%.9g",
                  aa_arch_kv_heads(a), (double)a->rope_theta, (double)a->norm_eps);
  if (aa_arch_is_llama(a) && a->qkv_bias) n += snprintf(text + n, sizeof text - (size_t)n, ";qkv_bias=1");
  if (a->moe.experts)
    n += snprintf(text + n, sizeof text - (size_t)n, ";moe=%d,%d,%d,%d,%d,%.9g,%.9g,%.9g", a->moe.experts,
                  a->moe.top_k, a->moe.d_ff_expert, a->moe.shared_experts, a->moe.every,
                  (double)a->moe.capacity_factor, (double)a->moe.aux_loss_coef, (double)a->moe.z_loss_coef);
  if (a->moe.experts && a->moe.shared_expert_gate)
    n += snprintf(text + n, sizeof text - (size_t)n, ";shared_expert_gate=1");
  if (a->moe.experts && a->moe.topk_raw)
    n += snprintf(text + n, sizeof text - (size_t)n, ";norm_topk_prob=0");
  if (a->lora.r) /* a fine-tune is its own model to plan (its own stored answers) */
    n += snprintf(text + n, sizeof text - (size_t)n, ";lora=%d,%.9g,%x,%d", a->lora.r, (double)a->lora.alpha,
                  (unsigned)a->lora.targets, a->lora.init);
  uint64_t h = aa_fnv1a(AA_FNV_INIT, text, (size_t)n);
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}

void aa_lora_shape(const aa_arch_t *a, int t, int tp, int *in, int *out, int *row) {
  const int C = a->d_model, F = a->d_ff, KV = aa_arch_kv_heads(a) * (a->d_model / a->n_head);
  int i = C, o = C, rw = 0;
  switch (t) {
  case AA_LORA_K:
  case AA_LORA_V: o = KV; break;
  case AA_LORA_O:
  case AA_LORA_PROJ: rw = 1; break;
  case AA_LORA_GATE:
  case AA_LORA_UP:
  case AA_LORA_FC: o = F; break;
  case AA_LORA_DOWN:
  case AA_LORA_FCPROJ: i = F, rw = 1; break;
  case AA_LORA_QKV: o = 3 * C; break;
  default: break; /* q: C -> C */
  }
  if (tp < 1) tp = 1;
  if (rw)
    i /= tp;
  else
    o /= tp;
  *in = i, *out = o, *row = rw;
}

uint64_t aa_lora_block_numel(const aa_arch_t *a, int tp) {
  uint64_t n = 0;
  for (int t = 0; a->lora.r && t < AA_LORA_NTARGETS; t++) {
    if (!(a->lora.targets & (1 << t))) continue;
    int in, out, row;
    aa_lora_shape(a, t, tp, &in, &out, &row);
    n += (uint64_t)a->lora.r * ((uint64_t)in + (uint64_t)out);
  }
  return n;
}

int aa_lora_n_targets(const aa_arch_t *a) {
  int n = 0;
  for (int t = 0; a->lora.r && t < AA_LORA_NTARGETS; t++)
    n += (a->lora.targets >> t) & 1;
  return n;
}

int aa_arch_is_moe_layer(const aa_arch_t *a, int l) {
  return a->moe.experts > 0 && a->moe.every > 0 && l % a->moe.every == 0;
}

int aa_arch_moe_layers(const aa_arch_t *a) {
  if (a->moe.experts <= 0 || a->moe.every <= 0) return 0;
  return (a->n_layer + a->moe.every - 1) / a->moe.every;
}

uint64_t aa_arch_moe_mlp_params(const aa_arch_t *a, int routed) {
  const uint64_t C = (uint64_t)a->d_model, Fe = (uint64_t)a->moe.d_ff_expert;
  return (uint64_t)a->moe.experts * C + (uint64_t)(routed + a->moe.shared_experts) * 3 * Fe * C +
         (a->moe.shared_expert_gate ? C : 0);
}

/* One MoE layer's feed-forward parameters, counting `routed` of its
 * experts, beyond the dense layer's 3 F C it replaces. */
static int64_t moe_extra(const aa_arch_t *a, int routed) {
  return (int64_t)aa_arch_moe_mlp_params(a, routed) - 3 * (int64_t)a->d_ff * a->d_model;
}

uint64_t aa_arch_active_param_count(const aa_arch_t *a) {
  return (uint64_t)((int64_t)aa_arch_param_count(a) +
                    (int64_t)aa_arch_moe_layers(a) *
                        (moe_extra(a, a->moe.top_k) - moe_extra(a, a->moe.experts)));
}

uint64_t aa_arch_param_count(const aa_arch_t *a) {
  uint64_t C = (uint64_t)a->d_model, F = (uint64_t)a->d_ff, L = (uint64_t)a->n_layer;
  if (aa_arch_is_llama(a)) {
    uint64_t KV = (uint64_t)aa_arch_kv_heads(a) * (C / (uint64_t)a->n_head); /* k (and v) width */
    uint64_t per = C                                                         /* RMSNorm weight */
                   + (C + 2 * KV) * C                                        /* q, k, v */
                   + (a->qkv_bias ? C + 2 * KV : 0)                          /* their biases (Qwen2) */
                   + C * C                                                   /* o */
                   + C                                                       /* RMSNorm weight */
                   + 3 * F * C;                                              /* gate, up, down */
    return 2 * (uint64_t)a->vocab_size * C /* embedding and the untied head */
           + L * per + C                   /* final RMSNorm */
           + (uint64_t)((int64_t)aa_arch_moe_layers(a) * moe_extra(a, a->moe.experts)); /* MoE layers' MLPs */
  }
  uint64_t per_layer = 2 * C               /* ln1 weight + bias */
                       + 3 * C * C + 3 * C /* qkv */
                       + C * C + C         /* attention output projection */
                       + 2 * C             /* ln2 */
                       + F * C + F         /* fc */
                       + C * F + C;        /* fc projection */
  return (uint64_t)a->vocab_size * C       /* wte, tied with the output head */
         + (uint64_t)a->seq_len * C        /* wpe */
         + L * per_layer + 2 * C;          /* lnf */
}

float aa_lr_at(const aa_train_cfg_t *t, int step) {
  if (step < 0) step = 0;
  if (step < t->warmup_steps) return (float)((double)t->lr * (step + 1) / t->warmup_steps);
  if (t->schedule == AA_SCHED_CONSTANT) return t->lr;
  int span = t->steps - t->warmup_steps;
  double p = (double)(step - t->warmup_steps) / (span > 1 ? span : 1);
  if (p > 1.0) p = 1.0;
  double lo = t->min_lr, hi = t->lr;
  return (float)(lo + 0.5 * (hi - lo) * (1.0 + cos(3.14159265358979323846 * p)));
}

/* Writes one table's fields of the struct at base into obj. Paths are made
 * absolute against the current directory, so the text means the same thing
 * to a process started elsewhere (a planner, an executor's runner). */
static int fields_to_json(json_t *obj, const aa_json_field_t *t, size_t n, const void *base) {
  for (size_t i = 0; i < n; i++) {
    const aa_json_field_t *f = &t[i];
    const char *p = (const char *)base + f->off;
    json_t *v = NULL;
    switch (f->kind) {
    case AA_JSON_INT:
      v = json_integer(f->size == sizeof(uint64_t) ? (json_int_t) * (const uint64_t *)p : *(const int *)p);
      break;
    case AA_JSON_NUMBER: v = json_real(*(const float *)p); break;
    case AA_JSON_ENUM: v = json_string(f->names[*(const int *)p]); break;
    case AA_JSON_STRING: v = json_string(p); break;
    case AA_JSON_CUSTOM: {
      if (f->parse == read_family) {
        v = json_stringn(p, strnlen(p, f->size));
        break;
      }
      if (f->parse == read_not_bool) {
        v = json_boolean(!*(const int *)p);
        break;
      }
      if (!p[0]) continue; /* optional path left out */
      if (p[0] == '/') {
        v = json_string(p);
        break;
      }
      char cwd[AA_PATH_MAX];
      if (!getcwd(cwd, sizeof cwd)) return aa_error(AA_EIO, "spec: current directory: %s", strerror(errno));
      char abs[2 * AA_PATH_MAX + 2];
      snprintf(abs, sizeof abs, "%s/%s", cwd, p);
      if (strlen(abs) >= AA_PATH_MAX)
        return aa_error(AA_EINVAL, "spec: %s: the absolute path is longer than %d bytes", f->key, AA_PATH_MAX - 1);
      v = json_string(abs);
      break;
    }
    case AA_JSON_BOOL: v = json_boolean(*(const int *)p); break;
    case AA_JSON_OBJECT:
    case AA_JSON_KEY: continue; /* the caller writes sections; a KEY is another name of a field */
    }
    if (!v || json_object_set_new(obj, f->key, v)) return aa_error(AA_ENOMEM, "spec: out of memory");
  }
  return 0;
}

int aa_spec_to_json(const aa_model_spec_t *s, char **out) {
  json_t *root = json_object(), *model = json_object(), *train = json_object(), *data = json_object();
  int rc = AA_ENOMEM;
  if (!root || !model || !train || !data) goto cleanup;
  json_t *moe = NULL;
  if (s->arch.moe.experts) {
    if (!(moe = json_object()) || json_object_set_new(model, "moe", moe)) goto cleanup;
  }
  if ((rc = fields_to_json(root, top_fields, NFIELDS(top_fields), s)) ||
      (rc = fields_to_json(model, model_fields, NFIELDS(model_fields), &s->arch)) ||
      (moe && (rc = fields_to_json(moe, moe_fields, NMOE, &s->arch))) ||
      (rc = fields_to_json(train, train_fields, NFIELDS(train_fields), &s->train)) ||
      (rc = fields_to_json(data, data_fields, NFIELDS(data_fields), s)))
    goto cleanup;
  rc = AA_ENOMEM;
  if (s->arch.lora.r) {
    const aa_lora_t *l = &s->arch.lora;
    json_t *lo = json_object(), *tg = json_array();
    if (!lo || !tg) {
      json_decref(lo);
      json_decref(tg);
      goto cleanup;
    }
    /* set_new takes its value even when it fails: nothing left to free. */
    if (json_object_set_new(root, "lora", lo) || json_object_set_new(lo, "targets", tg)) goto cleanup;
    for (int t = 0; t < AA_LORA_NTARGETS; t++)
      if ((l->targets & (1 << t)) && json_array_append_new(tg, json_string(lora_target_names[t])))
        goto cleanup;
    if (json_object_set_new(lo, "r", json_integer(l->r)) ||
        json_object_set_new(lo, "alpha", json_real(l->alpha)) ||
        json_object_set_new(lo, "init", json_string(lora_init_choices[l->init])))
      goto cleanup;
  }
  /* No data section in, none out: the text parses back to the same spec. */
  if (json_object_set(root, "model", model) || json_object_set(root, "train", train) ||
      (s->train_data[0] && json_object_set(root, "data", data)))
    goto cleanup;
  /* jansson writes a real with 17 significant digits, so each float32
   * field, widened to double, reads back as the same float. */
  char *text = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
  if (!text) goto cleanup;
  *out = text;
  rc = 0;
cleanup:
  if (rc == AA_ENOMEM) aa_error(AA_ENOMEM, "spec: out of memory");
  json_decref(model);
  json_decref(train);
  json_decref(data);
  json_decref(root);
  return rc;
}
