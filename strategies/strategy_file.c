/* Strategy files: reading either form (v1 object, ATorch list) and writing
 * the v1 object form. Format: docs/strategy-format.md.
 *
 * As in common/spec.c, every v1 field is described once, in a table (key,
 * kind, range, where it lands in aa_strategy_t). The reader and the writer
 * both walk the tables, so the key order of a written file, the unknown-key
 * list, the range checks and the fields written cannot drift apart; and the
 * writer validates what it wrote with the reader, so a saved file always
 * loads back. */
#include "strategy.h"

#include "strategy_internal.h"

#include "../common/file.h"
#include "../common/json.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A strategy is under a kilobyte; the cap keeps a wrong file (a token
 * shard, a checkpoint) from being read whole before it is rejected. */
#define STRATEGY_MAX_BYTES (1u << 20)
#define FORMAT_NAME "autoaccel-strategy"
#define MAX_DEGREE 65536

typedef enum {
  K_INT,     /* JSON integer -> int, imin..imax */
  K_F32,     /* JSON number -> float, >= fmin (> when fmin_open), finite */
  K_F64,     /* JSON number -> double, >= 0; provenance: 0 = unknown, not written */
  K_BOOL,    /* JSON boolean -> int 0/1 */
  K_CHOICE,  /* string in `choices` -> int-sized enum; the index is the enum value */
  K_TEXT,    /* string -> char[cap], 1..cap-1 bytes, no control characters */
  K_HASH,    /* string -> char[17], 16 lowercase hex digits */
  K_DATE,    /* string -> char[cap], "YYYY-MM-DDTHH:MM:SSZ" */
  K_SECTION, /* object described by `sub` */
  K_FIXED,   /* format, version, key: checked by parse_object itself */
} kind_t;

typedef struct field {
  const char *key;
  kind_t kind;
  long long imin, imax;
  double fmin;
  bool fmin_open;
  const char *const *choices; /* NULL-terminated */
  const struct field *sub;
  size_t nsub;
  size_t off, cap; /* destination in aa_strategy_t and its size */
} field_t;

/* K_CHOICE writes enums through an int pointer. */
_Static_assert(sizeof(aa_dtype_t) == sizeof(int) && sizeof(aa_ckpt_mode_t) == sizeof(int) &&
                   sizeof(aa_pp_schedule_t) == sizeof(int),
               "enums must be int-sized");

static const char *const amp_names[] = {"fp32", "bf16", "fp16", NULL};       /* = aa_dtype_t */
static const char *const ckpt_names[] = {"none", "selective", "full", NULL}; /* = aa_ckpt_mode_t */
static const char *const sched_names[] = {"1f1b", "gpipe", NULL};            /* = aa_pp_schedule_t */

#define AT(m) .off = offsetof(aa_strategy_t, m), .cap = sizeof(((aa_strategy_t *)0)->m)
#define INT_F(k, lo, hi, m)                                                                                  \
  { .key = k, .kind = K_INT, .imin = lo, .imax = hi, AT(m) }
#define F32_F(k, lo, open, m)                                                                                \
  { .key = k, .kind = K_F32, .fmin = lo, .fmin_open = open, AT(m) }
#define F64_F(k, m)                                                                                          \
  { .key = k, .kind = K_F64, AT(m) }
#define CHOICE_F(k, names, m)                                                                                \
  { .key = k, .kind = K_CHOICE, .choices = names, AT(m) }
#define STR_F(k, kind_, m)                                                                                   \
  { .key = k, .kind = kind_, AT(m) }
#define SECTION_F(k, t)                                                                                      \
  { .key = k, .kind = K_SECTION, .sub = t, .nsub = sizeof(t) / sizeof((t)[0]) }
#define FIXED_F(k)                                                                                           \
  { .key = k, .kind = K_FIXED }

static const field_t parallel_fields[] = {
    INT_F("data", 1, MAX_DEGREE, dp),
    INT_F("tensor", 1, MAX_DEGREE, tp),
    INT_F("pipeline", 1, MAX_DEGREE, pp),
};

static const field_t loss_fields[] = {
    F32_F("loss_scale", 0.0, false, loss_scale.loss_scale),
    INT_F("initial_scale_power", 0, 64, loss_scale.initial_scale_power),
    INT_F("loss_scale_window", 1, INT_MAX, loss_scale.window),
    INT_F("hysteresis", 1, INT_MAX, loss_scale.hysteresis),
    F32_F("min_loss_scale", 0.0, true, loss_scale.min_scale),
};

static const field_t provenance_fields[] = {
    STR_F("model", K_TEXT, model_name),  STR_F("model_hash", K_HASH, model_hash),
    STR_F("hardware", K_TEXT, hardware), F64_F("tokens_per_s", tokens_per_s),
    F64_F("peak_bytes", peak_bytes),     STR_F("date", K_DATE, date),
};

/* Order is the order of a written file, of checks and of error lists. */
static const field_t top_fields[] = {
    FIXED_F("format"),
    FIXED_F("version"),
    SECTION_F("parallel", parallel_fields),
    INT_F("zero", 0, 3, zero),
    CHOICE_F("amp", amp_names, amp),
    SECTION_F("loss_scaling", loss_fields),
    {.key = "skip_if_nonfinite", .kind = K_BOOL, AT(skip_if_nonfinite)},
    CHOICE_F("checkpoint", ckpt_names, ckpt),
    INT_F("checkpoint_layers", 0, INT_MAX, ckpt_layers),
    INT_F("micro_batch", 0, INT_MAX, micro_batch),
    CHOICE_F("schedule", sched_names, schedule),
    FIXED_F("key"),
    SECTION_F("provenance", provenance_fields),
};

#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- shared helpers ------------------------------------------------------ */


/* Sets the last error to "<origin>: <path>: <rule>" and returns code. */
__attribute__((format(printf, 4, 5))) static int fail(const char *origin, int code, const char *path,
                                                      const char *fmt, ...) {
  char rule[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rule, sizeof rule, fmt, ap);
  va_end(ap);
  return aa_error(code, "%s: %s: %s", origin, path, rule);
}

static int fail_type(const char *origin, const char *path, const char *expected, const json_t *v) {
  return fail(origin, AA_EINVAL, path, "must be %s (got %s)", expected, aa_json_type_name(v));
}

/* "a, b, c": the keys of table t (n entries), or when t is NULL the
 * NULL-terminated names. Cut at cap, which only shortens a message. */
static void join(char *dst, size_t cap, const field_t *t, size_t n, const char *const *names) {
  size_t o = 0;
  dst[0] = '\0';
  for (size_t i = 0; (t ? i < n : names[i] != NULL) && o < cap; i++)
    o += (size_t)snprintf(dst + o, cap - o, "%s%s", i ? ", " : "", t ? t[i].key : names[i]);
}

/* Keys are bounded by the tables (or sanitized), so a path fits; a cut
 * path would only shorten a message. */
static void field_path(char *dst, size_t cap, const char *section, const char *key) {
  if (snprintf(dst, cap, "%s%s%s", section, *section ? "." : "", key) >= (int)cap) dst[cap - 1] = '\0';
}

/* ---- reading ------------------------------------------------------------- */

/* The rule a provenance string breaks, or NULL. Hashes and dates have a
 * fixed shape, which the length check of plain text would only blur. */
static const char *text_rule(const field_t *f, const char *s, size_t len) {
  if (len == 0) return "must not be empty (leave the field out when unknown)";
  if (f->kind == K_HASH) {
    bool ok = len == 16;
    for (size_t i = 0; ok && i < len; i++)
      ok = isdigit((unsigned char)s[i]) || (s[i] >= 'a' && s[i] <= 'f');
    return ok ? NULL : "must be 16 lowercase hex digits";
  }
  if (f->kind == K_DATE) {
    static const char pattern[] = "dddd-dd-ddTdd:dd:ddZ";
    bool ok = len == sizeof pattern - 1;
    for (size_t i = 0; ok && i < len; i++)
      ok = pattern[i] == 'd' ? isdigit((unsigned char)s[i]) != 0 : s[i] == pattern[i];
    return ok ? NULL : "must be a UTC time written YYYY-MM-DDTHH:MM:SSZ";
  }
  _Static_assert(sizeof(((aa_strategy_t *)0)->model_name) == 128 &&
                     sizeof(((aa_strategy_t *)0)->hardware) == 128,
                 "the message below states the size");
  if (len >= f->cap) return "must be at most 127 bytes long";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  return NULL;
}

/* Parses one value v of field f into base. */
static int parse_value(const char *origin, const char *path, const field_t *f, const json_t *v, char *base) {
  char *dst = base + f->off;
  switch (f->kind) {
  case K_INT: {
    if (!json_is_integer(v)) return fail_type(origin, path, "an integer", v);
    long long x = json_integer_value(v);
    if (x < f->imin || x > f->imax) {
      if (f->imax == INT_MAX) return fail(origin, AA_EINVAL, path, "must be >= %lld (got %lld)", f->imin, x);
      return fail(origin, AA_EINVAL, path, "must be between %lld and %lld (got %lld)", f->imin, f->imax, x);
    }
    *(int *)dst = (int)x;
    return 0;
  }
  case K_F32:
  case K_F64: {
    if (!json_is_number(v)) return fail_type(origin, path, "a number", v);
    double x = json_number_value(v);
    bool ok = f->fmin_open ? x > f->fmin : x >= f->fmin;
    if (!ok)
      return fail(origin, AA_EINVAL, path, "must be %s %g (got %.17g)", f->fmin_open ? ">" : ">=", f->fmin,
                  x);
    if (f->kind == K_F64) {
      *(double *)dst = x;
      return 0;
    }
    if (x > FLT_MAX) return fail(origin, AA_EINVAL, path, "out of range of a 32-bit float (got %.17g)", x);
    /* Rounding to float can break the rule (1e-50 > 0 is 0.0f). */
    float y = (float)x;
    if (f->fmin_open && !(y > f->fmin))
      return fail(origin, AA_EINVAL, path, "must be > %g (got %.17g, which rounds to %g as a 32-bit float)",
                  f->fmin, x, (double)y);
    *(float *)dst = y;
    return 0;
  }
  case K_BOOL:
    if (!json_is_boolean(v)) return fail_type(origin, path, "true or false", v);
    *(int *)dst = json_is_true(v);
    return 0;
  case K_CHOICE: {
    if (!json_is_string(v)) return fail_type(origin, path, "a string", v);
    for (int i = 0; f->choices[i]; i++)
      if (strcmp(json_string_value(v), f->choices[i]) == 0) {
        *(int *)dst = i;
        return 0;
      }
    char list[128], got[256];
    join(list, sizeof list, NULL, 0, f->choices);
    aa_json_sanitize(got, sizeof got, json_string_value(v));
    return fail(origin, AA_EINVAL, path, "must be one of: %s (got \"%s\")", list, got);
  }
  case K_TEXT:
  case K_HASH:
  case K_DATE: {
    if (!json_is_string(v)) return fail_type(origin, path, "a string", v);
    /* jansson rejects \u0000 (no JSON_ALLOW_NUL): the C string is the value. */
    size_t len = json_string_length(v);
    const char *rule = text_rule(f, json_string_value(v), len);
    if (rule) return fail(origin, AA_EINVAL, path, "%s", rule);
    memcpy(dst, json_string_value(v), len + 1);
    return 0;
  }
  case K_SECTION:
  case K_FIXED: break;
  }
  return aa_error(AA_EINTERNAL, "%s: %s: no parser for this field", origin, path);
}

/* Parses the members of obj described by t into base; `section` is the
 * dotted prefix for messages ("" at top level). Unknown keys are reported
 * before any value so that a typo is named even when a later field is bad. */
static int parse_fields(const char *origin, const json_t *obj, const char *section, const field_t *t,
                        size_t n, char *base) {
  char path[160];
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    bool known = false;
    for (size_t i = 0; i < n && !known; i++)
      known = strcmp(t[i].key, key) == 0;
    if (known) continue;
    char safe[256], allowed[512];
    aa_json_sanitize(safe, sizeof safe, key);
    join(allowed, sizeof allowed, t, n, NULL);
    field_path(path, sizeof path, section, safe);
    return fail(origin, AA_EINVAL, path, "unknown key (allowed: %s)", allowed);
  }
  for (size_t i = 0; i < n; i++) {
    const field_t *f = &t[i];
    if (f->kind == K_FIXED || !(v = json_object_get(obj, f->key))) continue;
    field_path(path, sizeof path, section, f->key);
    int rc;
    if (f->kind == K_SECTION) {
      if (!json_is_object(v)) return fail_type(origin, path, "an object", v);
      rc = parse_fields(origin, v, path, f->sub, f->nsub, base);
    } else {
      rc = parse_value(origin, path, f, v, base);
    }
    if (rc) return rc;
  }
  return 0;
}

/* The v1 object form. format and version are checked before anything
 * else, so that a newer file is reported as newer, not as unknown keys. */
static int parse_object(aa_strategy_t *out, const json_t *root, const char *origin) {
  const json_t *format = json_object_get(root, "format"), *version = json_object_get(root, "version");
  if (!format)
    return fail(origin, AA_EINVAL, "format",
                "required field is missing (a strategy file has \"format\": \"%s\")", FORMAT_NAME);
  if (!json_is_string(format)) return fail_type(origin, "format", "the string \"" FORMAT_NAME "\"", format);
  if (strcmp(json_string_value(format), FORMAT_NAME) != 0) {
    char got[256];
    aa_json_sanitize(got, sizeof got, json_string_value(format));
    return fail(origin, AA_EINVAL, "format", "must be \"%s\" (got \"%s\")", FORMAT_NAME, got);
  }
  if (!version) return fail(origin, AA_EINVAL, "version", "required field is missing");
  if (!json_is_integer(version)) return fail_type(origin, "version", "an integer", version);
  long long ver = json_integer_value(version);
  if (ver > AA_STRATEGY_VERSION)
    return fail(origin, AA_EUNSUPPORTED, "version",
                "strategy format version %lld is newer than this autoaccel (%d)", ver, AA_STRATEGY_VERSION);
  if (ver < 1) return fail(origin, AA_EINVAL, "version", "must be >= 1 (got %lld)", ver);

  aa_strategy_t s;
  aa_strategy_default(&s);
  int rc = parse_fields(origin, root, "", top_fields, NFIELDS(top_fields), (char *)&s);
  if (rc) return rc;
  if (s.ckpt_layers > 0 && s.ckpt != AA_CKPT_FULL)
    return fail(
        origin, AA_EINVAL, "checkpoint_layers",
        "only applies to checkpoint \"full\" (got %d with checkpoint \"%s\"; leave it out or set it to 0)",
        s.ckpt_layers, aa_ckpt_mode_name(s.ckpt));
  const json_t *key = json_object_get(root, "key");
  if (key) {
    if (!json_is_string(key)) return fail_type(origin, "key", "a string", key);
    char want[AA_STRATEGY_KEY_MAX], got[256];
    aa_strategy_key(&s, want);
    if (strcmp(json_string_value(key), want) != 0) {
      aa_json_sanitize(got, sizeof got, json_string_value(key));
      return fail(origin, AA_EINVAL, "key", "\"%s\" does not match the fields, which give \"%s\"", got, want);
    }
  }
  *out = s;
  return 0;
}

static int parse_buffer(aa_strategy_t *out, const char *buf, size_t len, const char *origin) {
  json_t *root;
  int prc = aa_json_parse_text(buf, len, STRATEGY_MAX_BYTES, origin, "a strategy", "a JSON object or array", &root);
  if (prc) return prc;
  int rc;
  if (json_is_object(root))
    rc = parse_object(out, root, origin);
  else if (json_is_array(root))
    rc = aa__strategy_from_atorch(out, root, origin);
  else
    rc = aa_error(AA_EINVAL,
                  "%s: top level must be a JSON object (v1 strategy) or array (ATorch list) (got %s)", origin,
                  aa_json_type_name(root));
  json_decref(root);
  return rc;
}

int aa_strategy_parse(aa_strategy_t *out, const char *json, const char *origin) {
  return parse_buffer(out, json, strlen(json), origin && *origin ? origin : "<string>");
}

int aa_strategy_load(aa_strategy_t *out, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  int rc = aa_read_file(path, STRATEGY_MAX_BYTES, "a strategy", &buf, &len);
  if (rc) return rc;
  rc = parse_buffer(out, buf, len, path);
  free(buf);
  return rc;
}

/* ---- writing ------------------------------------------------------------- */

/* A number as JSON: integral values as integers (so defaults read as
 * "1000", not "1000.0"); others with jansson's 17 significant digits, which
 * read back to the same double. NULL for inf/nan, which JSON cannot hold. */
static json_t *number(double x) {
  if (!isfinite(x)) return NULL;
  if (x == floor(x) && fabs(x) < 9007199254740992.0) return json_integer((json_int_t)x);
  return json_real(x);
}

/* format, version and key: fixed or derived, never copied from a field. */
static json_t *fixed_value(const char *key, const aa_strategy_t *s) {
  if (strcmp(key, "format") == 0) return json_string(FORMAT_NAME);
  if (strcmp(key, "version") == 0) return json_integer(AA_STRATEGY_VERSION);
  char k[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(s, k);
  return json_string(k);
}

/* Builds the members of t from s into obj, in table order. Provenance
 * fields that are unknown (empty, 0) are left out, and so is a section
 * left empty. */
static int emit_fields(json_t *obj, const char *section, const field_t *t, size_t n, const aa_strategy_t *s) {
  for (size_t i = 0; i < n; i++) {
    const field_t *f = &t[i];
    const char *src = (const char *)s + f->off;
    json_t *v = NULL;
    switch (f->kind) {
    case K_FIXED: v = fixed_value(f->key, s); break;
    case K_INT: v = json_integer(*(const int *)src); break;
    case K_F32: v = number(*(const float *)src); break;
    case K_F64:
      if (*(const double *)src == 0.0) continue;
      v = number(*(const double *)src);
      break;
    case K_BOOL: v = json_boolean(*(const int *)src); break;
    case K_CHOICE: {
      int x = *(const int *)src, count = 0;
      while (f->choices[count])
        count++;
      /* An out-of-range enum becomes text the reader refuses, so the
       * message names the field. */
      v = x >= 0 && x < count ? json_string(f->choices[x]) : json_sprintf("<%d>", x);
      break;
    }
    case K_TEXT:
    case K_HASH:
    case K_DATE: {
      size_t len = strnlen(src, f->cap);
      if (len == 0) continue;
      v = json_stringn(src, len); /* NULL if not UTF-8 */
      break;
    }
    case K_SECTION: {
      char path[160];
      field_path(path, sizeof path, section, f->key);
      if (!(v = json_object())) return aa_error(AA_ENOMEM, "strategy: out of memory");
      int rc = emit_fields(v, path, f->sub, f->nsub, s);
      if (rc || json_object_size(v) == 0) {
        json_decref(v);
        if (rc) return rc;
        continue;
      }
      break;
    }
    }
    if (!v)
      return aa_error(AA_EINVAL,
                      "strategy: %s%s%s: cannot be written as JSON (not a finite number, or not UTF-8)",
                      section, *section ? "." : "", f->key);
    if (json_object_set_new(obj, f->key, v)) return aa_error(AA_ENOMEM, "strategy: out of memory");
  }
  return 0;
}

/* Builds the v1 object for s and checks it with the reader, so nothing is
 * written that would not load back. *out (a new reference) is set only on
 * success. */
static int build_checked(const aa_strategy_t *s, json_t **out) {
  json_t *root = json_object();
  if (!root) return aa_error(AA_ENOMEM, "strategy: out of memory");
  aa_strategy_t back;
  int rc = emit_fields(root, "", top_fields, NFIELDS(top_fields), s);
  if (!rc) rc = parse_object(&back, root, "strategy");
  if (rc) {
    json_decref(root);
    return rc;
  }
  *out = root;
  return 0;
}

int aa__strategy_validate(const aa_strategy_t *s) {
  json_t *root;
  int rc = build_checked(s, &root);
  if (!rc) json_decref(root);
  return rc;
}

int aa_strategy_to_json(const aa_strategy_t *s, char **out) {
  json_t *root;
  int rc = build_checked(s, &root);
  if (rc) return rc;
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  size_t n = text ? strlen(text) : 0;
  char *line = text ? realloc(text, n + 2) : NULL; /* files end with a newline */
  if (!line) {
    free(text);
    return aa_error(AA_ENOMEM, "strategy: out of memory");
  }
  memcpy(line + n, "\n", 2);
  *out = line;
  return 0;
}

int aa_strategy_save(const aa_strategy_t *s, const char *path) {
  char *text;
  int rc = aa_strategy_to_json(s, &text);
  if (rc) return rc;
  /* A fresh temporary + fsync + rename (common/file.h): a reader sees the
   * old file or the new one, never half of one, even across a crash; and a
   * symlink planted in the directory is never written through. */
  aa_wfile_t w;
  if (!(rc = aa_wfile_open(&w, path, 0666))) {
    size_t n = strlen(text);
    if (fwrite(text, 1, n, w.f) != n) rc = aa_error(AA_EIO, "%s: write failed: %s", path, strerror(errno));
    else rc = aa_wfile_commit(&w);
  }
  aa_wfile_abort(&w);
  free(text);
  return rc;
}
