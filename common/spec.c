/* Model-spec parsing and validation: a JSON file (read with jansson) into an
 * aa_model_spec_t, plus the architecture's canonical hash, its parameter
 * count and the learning-rate schedule. Format: docs/model-spec.md.
 *
 * Every field is described once, in a table (key, type, range, default,
 * where it lands). The parser walks the tables, so the unknown-key check, the
 * type check, the range check and the defaults cannot drift apart, and
 * aa_arch_validate() reuses the same ranges. */
#include "spec.h"

#include "aa.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A spec is a few hundred bytes; the cap keeps a wrong file (a token shard,
 * a checkpoint) from being read whole before it is rejected. */
#define SPEC_MAX_BYTES (1u << 20)
#define NAME_MAX_LEN ((int)sizeof(((aa_model_spec_t *)0)->name) - 1)

typedef enum {
  K_INT,     /* JSON integer -> int, range imin..imax */
  K_SEED,    /* JSON integer -> uint64_t, range imin..imax (non-negative) */
  K_FLOAT,   /* JSON number -> float, range fmin..fmax (open ends flagged) */
  K_FAMILY,  /* string, one of `choices`, copied into char family[16] */
  K_SCHED,   /* string, one of `choices`, its index is the aa_lr_schedule_t */
  K_NAME,    /* string -> char name[128] */
  K_PATH,    /* string path -> char[AA_PATH_MAX], resolved against base_dir */
  K_SECTION, /* object; the caller parses its contents with another table */
} kind_t;

typedef struct {
  const char *key;
  kind_t kind;
  bool required;
  long long imin, imax, idef;
  double fmin, fmax, fdef;
  bool fmin_open, fmax_open;
  const char *const *choices; /* NULL-terminated, first is the default */
  size_t off;                 /* offset of the destination in the table's struct */
} field_t;

static const char *const family_choices[] = {"gpt2", NULL};
static const char *const sched_choices[] = {"cosine", "constant", NULL}; /* = aa_lr_schedule_t */

#define INT_F(k, req, lo, hi, def, type, m)                                                                  \
  { .key = k, .kind = K_INT, .required = req, .imin = lo, .imax = hi, .idef = def, .off = offsetof(type, m) }
#define FLOAT_F(k, req, lo, lo_open, hi, hi_open, def, type, m)                                              \
  {                                                                                                          \
    .key = k, .kind = K_FLOAT, .required = req, .fmin = lo, .fmin_open = lo_open, .fmax = hi,                \
    .fmax_open = hi_open, .fdef = def, .off = offsetof(type, m)                                              \
  }

/* Order is the order fields are checked, documented and listed in errors. */
static const field_t top_fields[] = {
    {.key = "name", .kind = K_NAME, .off = offsetof(aa_model_spec_t, name)},
    {.key = "model", .kind = K_SECTION, .required = true},
    {.key = "train", .kind = K_SECTION, .required = true},
    {.key = "data", .kind = K_SECTION, .required = true},
    {.key = "init_weights", .kind = K_PATH, .off = offsetof(aa_model_spec_t, init_weights)},
};

/* d_ff's default (4 * d_model) depends on another field; parse_model sets it. */
static const field_t model_fields[] = {
    {.key = "family", .kind = K_FAMILY, .choices = family_choices, .off = offsetof(aa_arch_t, family)},
    INT_F("n_layer", true, 1, 256, 0, aa_arch_t, n_layer),
    INT_F("n_head", true, 1, 256, 0, aa_arch_t, n_head),
    INT_F("d_model", true, 1, 65536, 0, aa_arch_t, d_model),
    INT_F("d_ff", false, 1, 262144, 0, aa_arch_t, d_ff),
    INT_F("seq_len", true, 1, 65536, 0, aa_arch_t, seq_len),
    INT_F("vocab_size", true, 2, 1048576, 0, aa_arch_t, vocab_size),
};

/* min_lr's default (lr / 10) depends on lr; parse_train sets it. */
static const field_t train_fields[] = {
    INT_F("global_batch", true, 1, INT_MAX, 0, aa_train_cfg_t, global_batch),
    INT_F("steps", true, 1, INT_MAX, 0, aa_train_cfg_t, steps),
    FLOAT_F("lr", true, 0.0, true, INFINITY, false, 0.0, aa_train_cfg_t, lr),
    FLOAT_F("min_lr", false, 0.0, false, INFINITY, false, 0.0, aa_train_cfg_t, min_lr),
    INT_F("warmup_steps", false, 0, INT_MAX, 0, aa_train_cfg_t, warmup_steps),
    {.key = "schedule", .kind = K_SCHED, .choices = sched_choices, .off = offsetof(aa_train_cfg_t, schedule)},
    FLOAT_F("weight_decay", false, 0.0, false, INFINITY, false, 0.1, aa_train_cfg_t, weight_decay),
    FLOAT_F("beta1", false, 0.0, false, 1.0, true, 0.9, aa_train_cfg_t, beta1),
    FLOAT_F("beta2", false, 0.0, false, 1.0, true, 0.95, aa_train_cfg_t, beta2),
    FLOAT_F("eps", false, 0.0, true, INFINITY, false, 1e-8, aa_train_cfg_t, eps),
    FLOAT_F("grad_clip", false, 0.0, false, INFINITY, false, 1.0, aa_train_cfg_t, grad_clip),
    {.key = "seed",
     .kind = K_SEED,
     .imin = 0,
     .imax = LLONG_MAX,
     .idef = 1234,
     .off = offsetof(aa_train_cfg_t, seed)},
    INT_F("eval_every", false, 0, INT_MAX, 100, aa_train_cfg_t, eval_every),
    INT_F("eval_batches", false, 1, INT_MAX, 8, aa_train_cfg_t, eval_batches),
    INT_F("checkpoint_every", false, 0, INT_MAX, 0, aa_train_cfg_t, checkpoint_every),
};

static const field_t data_fields[] = {
    {.key = "train", .kind = K_PATH, .required = true, .off = offsetof(aa_model_spec_t, train_data)},
    {.key = "val", .kind = K_PATH, .off = offsetof(aa_model_spec_t, val_data)},
};

#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))

/* What every error message needs: where the spec came from, and where its
 * relative paths are anchored. origin may be NULL (aa_arch_validate). */
typedef struct {
  const char *origin;
  const char *base_dir;
  const char *stem_of; /* the default name is this path's stem */
} ctx_t;

/* Sets the last error to "<origin>: <field>: <rule>" and returns code. */
__attribute__((format(printf, 4, 5))) static int fail(const ctx_t *c, int code, const char *field,
                                                      const char *fmt, ...) {
  char rule[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rule, sizeof rule, fmt, ap);
  va_end(ap);
  if (c->origin) return aa_error(code, "%s: %s: %s", c->origin, field, rule);
  return aa_error(code, "%s: %s", field, rule);
}


/* Shortest text that reads back as x (as a float when `single`), so that a
 * message never shows two different numbers as the same "1". */
static const char *fmt_num(char buf[32], double x, bool single) {
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, 32, "%.*g", p, x);
    if (single ? strtof(buf, NULL) == (float)x : strtod(buf, NULL) == x) break;
  }
  return buf;
}

/* "must be an integer (got real number 2.0)": a real that happens to be
 * integral is printed with its decimal point so the reason is visible. */
static int fail_type(const ctx_t *c, const char *field, const char *expected, const json_t *v) {
  if (json_is_real(v)) {
    double x = json_real_value(v);
    if (fabs(x) < 1e15 && x == floor(x))
      return fail(c, AA_EINVAL, field, "must be %s (got real number %.1f)", expected, x);
    char num[32];
    return fail(c, AA_EINVAL, field, "must be %s (got real number %s)", expected, fmt_num(num, x, false));
  }
  return fail(c, AA_EINVAL, field, "must be %s (got %s)", expected, aa_json_type_name(v));
}

static void join_keys(char *dst, size_t cap, const field_t *t, size_t n) {
  size_t o = 0;
  dst[0] = '\0';
  for (size_t i = 0; i < n && o < cap; i++)
    o += (size_t)snprintf(dst + o, cap - o, "%s%s", i ? ", " : "", t[i].key);
}

static const field_t *find_field(const field_t *t, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(t[i].key, key) == 0) return &t[i];
  return NULL;
}

/* Keys are bounded by the field tables, so the path always fits; a cut
 * path would only shorten an error message. */
static void field_path(char *dst, size_t cap, const char *section, const char *key) {
  if (snprintf(dst, cap, "%s%s%s", section, *section ? "." : "", key) >= (int)cap) dst[cap - 1] = '\0';
}

/* Integer range check on the JSON value (a long long) before any
 * conversion, so an out-of-range value is reported, never wrapped. */
static int check_int_range(const ctx_t *c, const char *path, const field_t *f, long long v) {
  if (v >= f->imin && v <= f->imax) return 0;
  if (f->imax == INT_MAX || f->imax == LLONG_MAX) {
    if (v < f->imin) return fail(c, AA_EINVAL, path, "must be >= %lld (got %lld)", f->imin, v);
    return fail(c, AA_EINVAL, path, "must be <= %lld (got %lld)", f->imax, v);
  }
  return fail(c, AA_EINVAL, path, "must be between %lld and %lld (got %lld)", f->imin, f->imax, v);
}

static bool float_in_range(const field_t *f, double x) {
  if (f->fmin_open ? !(x > f->fmin) : !(x >= f->fmin)) return false;
  if (f->fmax_open ? !(x < f->fmax) : !(x <= f->fmax)) return false;
  return true;
}

static void describe_float_range(char *dst, size_t cap, const field_t *f) {
  if (isinf(f->fmax))
    snprintf(dst, cap, "must be %s %g", f->fmin_open ? ">" : ">=", f->fmin);
  else
    snprintf(dst, cap, "must be in %c%g, %g%c", f->fmin_open ? '(' : '[', f->fmin, f->fmax,
             f->fmax_open ? ')' : ']');
}

/* A number becomes a float only after its range is checked in double; the
 * rule is then checked again on the float, because rounding can break it
 * (beta1 = 0.999999999 is 1.0f, lr = 1e-50 is 0.0f). */
static int parse_float(const ctx_t *c, const char *path, const field_t *f, const json_t *v, float *out) {
  if (!json_is_number(v)) return fail_type(c, path, "a number", v);
  double x = json_number_value(v);
  char rule[96], num[32], num32[32];
  describe_float_range(rule, sizeof rule, f);
  if (!float_in_range(f, x)) return fail(c, AA_EINVAL, path, "%s (got %s)", rule, fmt_num(num, x, false));
  if (fabs(x) > FLT_MAX)
    return fail(c, AA_EINVAL, path, "out of range of a 32-bit float (got %s)", fmt_num(num, x, false));
  float y = (float)x;
  if (!float_in_range(f, y))
    return fail(c, AA_EINVAL, path, "%s (got %s, which rounds to %s as a 32-bit float)", rule,
                fmt_num(num, x, false), fmt_num(num32, y, true));
  *out = y;
  return 0;
}

static int parse_choice(const ctx_t *c, const char *path, const field_t *f, const json_t *v, int *index) {
  if (!json_is_string(v)) return fail_type(c, path, "a string", v);
  const char *s = json_string_value(v);
  for (int i = 0; f->choices[i]; i++)
    if (strcmp(s, f->choices[i]) == 0) {
      *index = i;
      return 0;
    }
  char list[128], got[256];
  size_t o = 0;
  list[0] = '\0';
  for (int i = 0; f->choices[i] && o < sizeof list; i++)
    o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", f->choices[i]);
  aa_json_sanitize(got, sizeof got, s);
  return fail(c, AA_EINVAL, path, "must be one of: %s (got \"%s\")", list, got);
}

/* A name is shown in tables and logs: 1..127 bytes, no control bytes. */
static const char *name_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty";
  if (len > (size_t)NAME_MAX_LEN) return "must be at most 127 bytes long";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  return NULL;
}

/* Resolves a spec-relative path against base_dir (absolute paths are kept;
 * no base_dir keeps the path relative to the current directory) into
 * out[AA_PATH_MAX]. */
static int resolve_path(const ctx_t *c, const char *path, const char *p, size_t len, char *out) {
  if (len == 0) return fail(c, AA_EINVAL, path, "must not be empty");
  const char *dir = (p[0] == '/' || !c->base_dir) ? "" : c->base_dir;
  size_t dlen = strlen(dir);
  const char *sep = (dlen > 0 && dir[dlen - 1] != '/') ? "/" : "";
  size_t total = dlen + strlen(sep) + len;
  if (total >= AA_PATH_MAX) {
    if (dlen)
      return fail(c, AA_EINVAL, path,
                  "path too long (%zu bytes after resolving against the spec's directory; max %d)", total,
                  AA_PATH_MAX - 1);
    return fail(c, AA_EINVAL, path, "path too long (%zu bytes; max %d)", total, AA_PATH_MAX - 1);
  }
  memcpy(out, dir, dlen);
  memcpy(out + dlen, sep, strlen(sep));
  memcpy(out + dlen + strlen(sep), p, len);
  out[total] = '\0';
  return 0;
}

/* Writes each field's default into base (the struct the table describes). */
static void apply_defaults(const field_t *t, size_t n, void *base) {
  for (size_t i = 0; i < n; i++) {
    char *dst = (char *)base + t[i].off;
    switch (t[i].kind) {
    case K_INT: *(int *)dst = (int)t[i].idef; break;
    case K_SEED: *(uint64_t *)dst = (uint64_t)t[i].idef; break;
    case K_FLOAT: *(float *)dst = (float)t[i].fdef; break;
    case K_FAMILY: snprintf(dst, sizeof(((aa_arch_t *)0)->family), "%s", t[i].choices[0]); break;
    case K_SCHED: *(aa_lr_schedule_t *)dst = AA_SCHED_COSINE; break;
    case K_NAME:
    case K_PATH:
    case K_SECTION: break;
    }
  }
}

/* Parses the members of obj described by table t into base. `section` is
 * the dotted prefix for messages ("" at top level). Rejects keys the table
 * does not know and missing required fields. Sets bit i of *present for
 * each field i given. K_SECTION fields are only checked to be objects. */
static int parse_fields(const ctx_t *c, const json_t *obj, const char *section, const field_t *t, size_t n,
                        void *base, unsigned *present) {
  char path[160];
  const char *key;
  json_t *v;
  *present = 0;
  json_object_foreach((json_t *)obj, key, v) {
    if (find_field(t, n, key)) continue;
    char safe[256], allowed[512];
    aa_json_sanitize(safe, sizeof safe, key);
    join_keys(allowed, sizeof allowed, t, n);
    field_path(path, sizeof path, section, safe);
    return fail(c, AA_EINVAL, path, "unknown key (allowed: %s)", allowed);
  }
  for (size_t i = 0; i < n; i++) {
    const field_t *f = &t[i];
    char *dst = (char *)base + f->off;
    int rc = 0;
    field_path(path, sizeof path, section, f->key);
    v = json_object_get(obj, f->key);
    if (!v) {
      if (f->required) return fail(c, AA_EINVAL, path, "required field is missing");
      continue;
    }
    switch (f->kind) {
    case K_INT:
    case K_SEED:
      if (!json_is_integer(v)) return fail_type(c, path, "an integer", v);
      if ((rc = check_int_range(c, path, f, json_integer_value(v)))) return rc;
      if (f->kind == K_INT)
        *(int *)dst = (int)json_integer_value(v);
      else
        *(uint64_t *)dst = (uint64_t)json_integer_value(v);
      break;
    case K_FLOAT:
      if ((rc = parse_float(c, path, f, v, (float *)dst))) return rc;
      break;
    case K_FAMILY:
    case K_SCHED: {
      int idx = 0;
      if ((rc = parse_choice(c, path, f, v, &idx))) return rc;
      if (f->kind == K_SCHED)
        *(aa_lr_schedule_t *)dst = (aa_lr_schedule_t)idx;
      else
        snprintf(dst, sizeof(((aa_arch_t *)0)->family), "%s", f->choices[idx]);
      break;
    }
    case K_NAME: {
      if (!json_is_string(v)) return fail_type(c, path, "a string", v);
      /* jansson rejects \u0000 in strings (no JSON_ALLOW_NUL), so the C
       * string is the whole value. */
      const char *rule = name_rule(json_string_value(v), json_string_length(v));
      if (rule) return fail(c, AA_EINVAL, path, "%s", rule);
      memcpy(dst, json_string_value(v), json_string_length(v) + 1);
      break;
    }
    case K_PATH:
      if (!json_is_string(v)) return fail_type(c, path, "a string", v);
      if ((rc = resolve_path(c, path, json_string_value(v), json_string_length(v), dst))) return rc;
      break;
    case K_SECTION:
      if (!json_is_object(v)) return fail_type(c, path, "an object", v);
      break;
    }
    *present |= 1u << i;
  }
  return 0;
}

static size_t field_index(const field_t *t, size_t n, const char *key) {
  const field_t *f = find_field(t, n, key);
  return f ? (size_t)(f - t) : n;
}

/* Architecture rules beyond a single field's range. */
static int check_arch(const ctx_t *c, const aa_arch_t *a) {
  if (a->d_model % a->n_head != 0)
    return fail(c, AA_EINVAL, "model.n_head", "must divide model.d_model (%d %% %d != 0)", a->d_model,
                a->n_head);
  return 0;
}

static int parse_model(const ctx_t *c, const json_t *obj, aa_arch_t *a) {
  unsigned present;
  apply_defaults(model_fields, NFIELDS(model_fields), a);
  int rc = parse_fields(c, obj, "model", model_fields, NFIELDS(model_fields), a, &present);
  if (rc) return rc;
  if (!(present & (1u << field_index(model_fields, NFIELDS(model_fields), "d_ff")))) a->d_ff = 4 * a->d_model;
  return check_arch(c, a);
}

static int parse_train(const ctx_t *c, const json_t *obj, aa_train_cfg_t *t) {
  unsigned present;
  apply_defaults(train_fields, NFIELDS(train_fields), t);
  int rc = parse_fields(c, obj, "train", train_fields, NFIELDS(train_fields), t, &present);
  if (rc) return rc;
  if (!(present & (1u << field_index(train_fields, NFIELDS(train_fields), "min_lr"))))
    t->min_lr = t->lr / 10.0f;
  if (t->min_lr > t->lr) {
    char a[32], b[32];
    return fail(c, AA_EINVAL, "train.min_lr", "must be <= train.lr (%s > %s)", fmt_num(a, t->min_lr, true),
                fmt_num(b, t->lr, true));
  }
  if (t->warmup_steps > t->steps)
    return fail(c, AA_EINVAL, "train.warmup_steps", "must be <= train.steps (%d > %d)", t->warmup_steps,
                t->steps);
  return 0;
}

/* The default name: the basename of origin without a ".json" suffix. */
static int default_name(const ctx_t *c, char *dst) {
  const char *o = c->stem_of;
  const char *slash = strrchr(o, '/');
  const char *b = slash ? slash + 1 : o;
  size_t len = strlen(b);
  if (len > 5 && strcmp(b + len - 5, ".json") == 0) len -= 5;
  const char *rule = name_rule(b, len);
  if (rule) return fail(c, AA_EINVAL, "name", "the file stem %s; set \"name\" in the spec", rule);
  memcpy(dst, b, len);
  dst[len] = '\0';
  return 0;
}


/* Parses len bytes of JSON text into *out (written only on success). */
static int parse_buffer(aa_model_spec_t *out, const char *buf, size_t len, const ctx_t *c) {
  const char *origin = c->origin;
  json_t *root;
  int prc = aa_json_parse_text(buf, len, SPEC_MAX_BYTES, origin, "a spec", "a JSON object", &root);
  if (prc) return prc;

  /* Parsed into a local so *out stays untouched on any failure. */
  aa_model_spec_t *s = calloc(1, sizeof *s);
  int rc = 0;
  unsigned present;
  if (!s) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory", origin);
    goto cleanup;
  }
  if (!json_is_object(root)) {
    rc = aa_error(AA_EINVAL, "%s: top level must be a JSON object (got %s)", origin, aa_json_type_name(root));
    goto cleanup;
  }
  if ((rc = parse_fields(c, root, "", top_fields, NFIELDS(top_fields), s, &present))) goto cleanup;
  if ((rc = parse_model(c, json_object_get(root, "model"), &s->arch))) goto cleanup;
  if ((rc = parse_train(c, json_object_get(root, "train"), &s->train))) goto cleanup;
  if ((rc = parse_fields(c, json_object_get(root, "data"), "data", data_fields, NFIELDS(data_fields), s,
                         &present)))
    goto cleanup;
  if (!s->name[0] && (rc = default_name(c, s->name))) goto cleanup;
  *out = *s;

cleanup:
  free(s);
  json_decref(root);
  return rc;
}

int aa_spec_parse(aa_model_spec_t *out, const char *json, const char *base_dir, const char *origin) {
  ctx_t c = {.origin = origin ? origin : "<string>",
             .base_dir = (base_dir && *base_dir) ? base_dir : NULL,
             .stem_of = (origin && *origin) ? origin : "model"};
  return parse_buffer(out, json, strlen(json), &c);
}

int aa_spec_load(aa_model_spec_t *out, const char *path) {
  char *buf = NULL, *dir = NULL;
  size_t len = 0;
  int rc = aa_read_file(path, SPEC_MAX_BYTES, "a spec", &buf, &len);
  if (rc) return rc;
  /* The spec's directory: everything before the last '/', "/" for a file
   * in the root, none (stay relative to the cwd) for a bare file name. */
  const char *slash = strrchr(path, '/');
  if (slash) {
    size_t dlen = slash == path ? 1 : (size_t)(slash - path);
    dir = malloc(dlen + 1);
    if (!dir) {
      free(buf);
      return aa_error(AA_ENOMEM, "%s: out of memory", path);
    }
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
  }
  ctx_t c = {.origin = path, .base_dir = dir, .stem_of = path};
  rc = parse_buffer(out, buf, len, &c);
  free(dir);
  free(buf);
  return rc;
}

int aa_arch_validate(const aa_arch_t *a) {
  ctx_t c = {.origin = NULL};
  char path[64];
  if (!memchr(a->family, '\0', sizeof a->family) || strcmp(a->family, family_choices[0]) != 0) {
    char got[64];
    char fam[sizeof a->family + 1];
    memcpy(fam, a->family, sizeof a->family);
    fam[sizeof a->family] = '\0';
    aa_json_sanitize(got, sizeof got, fam);
    return fail(&c, AA_EINVAL, "model.family", "must be one of: gpt2 (got \"%s\")", got);
  }
  for (size_t i = 0; i < NFIELDS(model_fields); i++) {
    const field_t *f = &model_fields[i];
    if (f->kind != K_INT) continue;
    field_path(path, sizeof path, "model", f->key);
    int rc = check_int_range(&c, path, f, *(const int *)((const char *)a + f->off));
    if (rc) return rc;
  }
  return check_arch(&c, a);
}

void aa_arch_hash(const aa_arch_t *a, char out[17]) {
  char text[256];
  int n = snprintf(text, sizeof text,
                   "family=%.*s;n_layer=%d;n_head=%d;d_model=%d;d_ff=%d;seq_len=%d;vocab_size=%d",
                   (int)strnlen(a->family, sizeof a->family), a->family, a->n_layer, a->n_head, a->d_model,
                   a->d_ff, a->seq_len, a->vocab_size);
  uint64_t h = aa_fnv1a(AA_FNV_INIT, text, (size_t)n);
  snprintf(out, 17, "%016llx", (unsigned long long)h);
}

uint64_t aa_arch_param_count(const aa_arch_t *a) {
  uint64_t C = (uint64_t)a->d_model, F = (uint64_t)a->d_ff, L = (uint64_t)a->n_layer;
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
static int fields_to_json(json_t *obj, const field_t *t, size_t n, const void *base) {
  for (size_t i = 0; i < n; i++) {
    const field_t *f = &t[i];
    const char *p = (const char *)base + f->off;
    json_t *v = NULL;
    switch (f->kind) {
    case K_INT: v = json_integer(*(const int *)p); break;
    case K_SEED: v = json_integer((json_int_t) * (const uint64_t *)p); break;
    case K_FLOAT: v = json_real(*(const float *)p); break;
    case K_FAMILY: v = json_stringn(p, strnlen(p, sizeof(((aa_arch_t *)0)->family))); break;
    case K_SCHED: v = json_string(f->choices[*(const aa_lr_schedule_t *)p]); break;
    case K_NAME: v = json_string(p); break;
    case K_PATH: {
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
    case K_SECTION: continue; /* the caller writes sections */
    }
    if (!v || json_object_set_new(obj, f->key, v)) return aa_error(AA_ENOMEM, "spec: out of memory");
  }
  return 0;
}

int aa_spec_to_json(const aa_model_spec_t *s, char **out) {
  json_t *root = json_object(), *model = json_object(), *train = json_object(), *data = json_object();
  int rc = AA_ENOMEM;
  if (!root || !model || !train || !data) goto cleanup;
  if ((rc = fields_to_json(root, top_fields, NFIELDS(top_fields), s)) ||
      (rc = fields_to_json(model, model_fields, NFIELDS(model_fields), &s->arch)) ||
      (rc = fields_to_json(train, train_fields, NFIELDS(train_fields), &s->train)) ||
      (rc = fields_to_json(data, data_fields, NFIELDS(data_fields), s)))
    goto cleanup;
  rc = AA_ENOMEM;
  if (json_object_set(root, "model", model) || json_object_set(root, "train", train) ||
      json_object_set(root, "data", data))
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
