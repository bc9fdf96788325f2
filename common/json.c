/* JSON helpers and the table-driven field reader (see json.h). */
#include "json.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa.h"

static int all_space(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') return 0;
  return 1;
}

int aa_json_parse_text(const char *buf, size_t len, size_t max, const char *origin, const char *what,
                       const char *expected, json_t **out) {
  if (len > max)
    return aa_error(AA_EINVAL, "%s: too large (%zu bytes; %s may be at most %zu bytes)", origin, len, what, max);
  if (all_space(buf, len)) return aa_error(AA_EPARSE, "%s: empty (expected %s)", origin, expected);
  const char *nul = memchr(buf, '\0', len);
  if (nul)
    return aa_error(AA_EPARSE, "%s: NUL byte at offset %zu (%s must be JSON text)", origin, (size_t)(nul - buf),
                    what);
  json_error_t jerr;
  json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  if (!root) {
    if (jerr.line > 0) return aa_error(AA_EPARSE, "%s:%d:%d: %s", origin, jerr.line, jerr.column, jerr.text);
    return aa_error(AA_EPARSE, "%s: %s", origin, jerr.text);
  }
  *out = root;
  return 0;
}

void aa_json_sanitize(char *dst, size_t cap, const char *s) {
  size_t o = 0, i = 0;
  for (; s[i] && i < 48 && o + 5 < cap; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\')
      o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", ch);
    else
      dst[o++] = (char)ch;
  }
  if (s[i] && o + 4 < cap) {
    memcpy(dst + o, "...", 3);
    o += 3;
  }
  dst[o] = '\0';
}

const char *aa_json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "object";
  case JSON_ARRAY: return "array";
  case JSON_STRING: return "string";
  case JSON_INTEGER: return "integer";
  case JSON_REAL: return "real number";
  case JSON_TRUE:
  case JSON_FALSE: return "boolean";
  case JSON_NULL: return "null";
  }
  return "unknown";
}

/* ---- The table-driven field reader --------------------------------------- */

int aa_json_fail(const aa_json_ctx_t *c, int code, const char *path, const char *fmt, ...) {
  char rule[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rule, sizeof rule, fmt, ap);
  va_end(ap);
  if (c->origin) return aa_error(code, "%s: %s: %s", c->origin, path, rule);
  return aa_error(code, "%s: %s", path, rule);
}

const char *aa_json_fmt_num(char buf[32], double x, bool single) {
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, 32, "%.*g", p, x);
    if (single ? strtof(buf, NULL) == (float)x : strtod(buf, NULL) == x) break;
  }
  return buf;
}

int aa_json_fail_type(const aa_json_ctx_t *c, const char *path, const char *expected, const json_t *v) {
  if (json_is_real(v)) {
    double x = json_real_value(v);
    if (fabs(x) < 1e15 && x == floor(x))
      return aa_json_fail(c, AA_EINVAL, path, "must be %s (got real number %.1f)", expected, x);
    char num[32];
    return aa_json_fail(c, AA_EINVAL, path, "must be %s (got real number %s)", expected,
                        aa_json_fmt_num(num, x, false));
  }
  return aa_json_fail(c, AA_EINVAL, path, "must be %s (got %s)", expected, aa_json_type_name(v));
}

/* "a, b, c": the keys of table t, or the NULL-terminated names. Cut at
 * cap, which only shortens a message. */
static void join(char *dst, size_t cap, const aa_json_field_t *t, size_t n, const char *const *names) {
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

/* The range is checked on the JSON value (a long long) before any
 * conversion, so an out-of-range value is reported, never wrapped. */
int aa_json_check_int(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, long long v) {
  if (v >= f->imin && v <= f->imax) return 0;
  if (f->imax == INT_MAX || f->imax == LLONG_MAX) {
    if (v < f->imin) return aa_json_fail(c, AA_EINVAL, path, "must be >= %lld (got %lld)", f->imin, v);
    return aa_json_fail(c, AA_EINVAL, path, "must be <= %lld (got %lld)", f->imax, v);
  }
  return aa_json_fail(c, AA_EINVAL, path, "must be between %lld and %lld (got %lld)", f->imin, f->imax, v);
}

static bool float_in_range(const aa_json_field_t *f, double x) {
  if (f->fmin_open ? !(x > f->fmin) : !(x >= f->fmin)) return false;
  if (f->fmax_open ? !(x < f->fmax) : !(x <= f->fmax)) return false;
  return true;
}

static void describe_float_range(char *dst, size_t cap, const aa_json_field_t *f) {
  if (isinf(f->fmax))
    snprintf(dst, cap, "must be %s %g", f->fmin_open ? ">" : ">=", f->fmin);
  else
    snprintf(dst, cap, "must be in %c%g, %g%c", f->fmin_open ? '(' : '[', f->fmin, f->fmax,
             f->fmax_open ? ')' : ']');
}

/* A number becomes a float only after its range is checked in double; the
 * rule is then checked again on the float, because rounding can break it
 * (beta1 = 0.999999999 is 1.0f, lr = 1e-50 is 0.0f). */
static int read_number(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, const json_t *v,
                       char *dst) {
  if (!json_is_number(v)) return aa_json_fail_type(c, path, "a number", v);
  double x = json_number_value(v);
  char rule[96], num[32], num32[32];
  describe_float_range(rule, sizeof rule, f);
  if (!float_in_range(f, x))
    return aa_json_fail(c, AA_EINVAL, path, "%s (got %s)", rule, aa_json_fmt_num(num, x, false));
  if (f->size == sizeof(double)) {
    *(double *)dst = x;
    return 0;
  }
  if (fabs(x) > FLT_MAX)
    return aa_json_fail(c, AA_EINVAL, path, "out of range of a 32-bit float (got %s)",
                        aa_json_fmt_num(num, x, false));
  float y = (float)x;
  if (!float_in_range(f, y))
    return aa_json_fail(c, AA_EINVAL, path, "%s (got %s, which rounds to %s as a 32-bit float)", rule,
                        aa_json_fmt_num(num, x, false), aa_json_fmt_num(num32, y, true));
  *(float *)dst = y;
  return 0;
}

static int read_enum(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, const json_t *v,
                     char *dst) {
  if (!json_is_string(v)) return aa_json_fail_type(c, path, "a string", v);
  for (int i = 0; f->names[i]; i++)
    if (strcmp(json_string_value(v), f->names[i]) == 0) {
      *(int *)dst = i;
      return 0;
    }
  char list[128], got[256];
  join(list, sizeof list, NULL, 0, f->names);
  aa_json_sanitize(got, sizeof got, json_string_value(v));
  return aa_json_fail(c, AA_EINVAL, path, "must be one of: %s (got \"%s\")", list, got);
}

static int read_string(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, const json_t *v,
                       char *dst) {
  if (!json_is_string(v)) return aa_json_fail_type(c, path, "a string", v);
  /* jansson rejects \u0000 in strings (no JSON_ALLOW_NUL), so the C string
   * is the whole value. */
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  const char *rule = f->check ? f->check(s, len) : NULL;
  if (rule) return aa_json_fail(c, AA_EINVAL, path, "%s", rule);
  if (len >= f->size) return aa_json_fail(c, AA_EINVAL, path, "must be at most %zu bytes long", f->size - 1);
  memcpy(dst, s, len + 1);
  return 0;
}

int aa_json_read_value(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, const json_t *v,
                       void *base) {
  char *dst = (char *)base + f->off;
  int rc;
  switch (f->kind) {
  case AA_JSON_INT:
    if (!json_is_integer(v)) return aa_json_fail_type(c, path, "an integer", v);
    if ((rc = aa_json_check_int(c, path, f, json_integer_value(v)))) return rc;
    if (f->size == sizeof(int64_t))
      *(int64_t *)dst = (int64_t)json_integer_value(v);
    else
      *(int *)dst = (int)json_integer_value(v);
    return 0;
  case AA_JSON_NUMBER: return read_number(c, path, f, v, dst);
  case AA_JSON_BOOL:
    if (!json_is_boolean(v)) return aa_json_fail_type(c, path, "true or false", v);
    *(int *)dst = json_is_true(v);
    return 0;
  case AA_JSON_ENUM: return read_enum(c, path, f, v, dst);
  case AA_JSON_STRING: return read_string(c, path, f, v, dst);
  case AA_JSON_OBJECT:
    if (!json_is_object(v)) return aa_json_fail_type(c, path, "an object", v);
    return f->sub ? aa_json_read_fields(c, v, path, f->sub, f->nsub, base) : 0;
  case AA_JSON_CUSTOM: return f->parse(c, path, v, dst);
  case AA_JSON_KEY: return 0;
  }
  return aa_json_fail(c, AA_EINTERNAL, path, "no reader for this field");
}

int aa_json_read_fields(const aa_json_ctx_t *c, const json_t *obj, const char *section,
                        const aa_json_field_t *t, size_t n, void *base) {
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
    return aa_json_fail(c, AA_EINVAL, path, "unknown key (allowed: %s)", allowed);
  }
  for (size_t i = 0; i < n; i++) {
    const aa_json_field_t *f = &t[i];
    field_path(path, sizeof path, section, f->key);
    if (!(v = json_object_get(obj, f->key))) {
      if (f->required) return aa_json_fail(c, AA_EINVAL, path, "required field is missing");
      continue;
    }
    int rc = aa_json_read_value(c, path, f, v, base);
    if (rc) return rc;
  }
  return 0;
}

/* Whether s[0..len) is UTF-8 text (no overlong forms, no surrogates). */
static bool utf8_valid(const unsigned char *s, size_t len) {
  for (size_t i = 0; i < len;) {
    unsigned c = s[i];
    size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 4;
    if (k == 4 || (k && i + k >= len)) return false;
    unsigned cp = k == 0 ? c : c & (0x3f >> k);
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (s[i + j] & 0x3f);
    }
    static const unsigned least[] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += k + 1;
  }
  return true;
}

/* One field's value in base against its rule (aa_json_check_fields). */
static int check_value(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, const void *base) {
  const char *src = (const char *)base + f->off;
  char num[32], rule[96];
  switch (f->kind) {
  case AA_JSON_INT:
    return aa_json_check_int(
        c, path, f, f->size == sizeof(int64_t) ? (long long)*(const int64_t *)src : *(const int *)src);
  case AA_JSON_NUMBER: {
    double x = f->size == sizeof(double) ? *(const double *)src : *(const float *)src;
    if (!isfinite(x)) return aa_json_fail(c, AA_EINVAL, path, "must be a finite number (got %g)", x);
    describe_float_range(rule, sizeof rule, f);
    if (!float_in_range(f, x))
      return aa_json_fail(c, AA_EINVAL, path, "%s (got %s)", rule,
                          aa_json_fmt_num(num, x, f->size != sizeof(double)));
    return 0;
  }
  case AA_JSON_BOOL: {
    int v = *(const int *)src;
    return v == 0 || v == 1 ? 0 : aa_json_fail(c, AA_EINVAL, path, "must be true or false (got %d)", v);
  }
  case AA_JSON_ENUM: {
    int v = *(const int *)src, count = 0;
    while (f->names[count])
      count++;
    if (v >= 0 && v < count) return 0;
    char list[128];
    join(list, sizeof list, NULL, 0, f->names);
    return aa_json_fail(c, AA_EINVAL, path, "must be one of: %s (got %d)", list, v);
  }
  case AA_JSON_STRING: {
    size_t len = strnlen(src, f->size);
    if (len == f->size)
      return aa_json_fail(c, AA_EINVAL, path, "must be at most %zu bytes long", f->size - 1);
    if (len == 0) return 0;
    if (!utf8_valid((const unsigned char *)src, len))
      return aa_json_fail(c, AA_EINVAL, path, "must be UTF-8 text");
    const char *broken = f->check ? f->check(src, len) : NULL;
    return broken ? aa_json_fail(c, AA_EINVAL, path, "%s", broken) : 0;
  }
  case AA_JSON_OBJECT: return f->sub ? aa_json_check_fields(c, path, f->sub, f->nsub, base) : 0;
  case AA_JSON_CUSTOM:
  case AA_JSON_KEY: return 0;
  }
  return aa_json_fail(c, AA_EINTERNAL, path, "no rule for this field");
}

int aa_json_check_fields(const aa_json_ctx_t *c, const char *section, const aa_json_field_t *t, size_t n,
                         const void *base) {
  char path[160];
  for (size_t i = 0; i < n; i++) {
    field_path(path, sizeof path, section, t[i].key);
    int rc = check_value(c, path, &t[i], base);
    if (rc) return rc;
  }
  return 0;
}

void aa_json_fields_default(const aa_json_field_t *t, size_t n, void *base) {
  for (size_t i = 0; i < n; i++) {
    char *dst = (char *)base + t[i].off;
    switch (t[i].kind) {
    case AA_JSON_INT:
      if (t[i].size == sizeof(int64_t))
        *(int64_t *)dst = (int64_t)t[i].idef;
      else
        *(int *)dst = (int)t[i].idef;
      break;
    case AA_JSON_NUMBER:
      if (t[i].size == sizeof(double))
        *(double *)dst = t[i].fdef;
      else
        *(float *)dst = (float)t[i].fdef;
      break;
    case AA_JSON_ENUM: *(int *)dst = 0; break;
    case AA_JSON_BOOL:
    case AA_JSON_STRING:
    case AA_JSON_OBJECT:
    case AA_JSON_CUSTOM:
    case AA_JSON_KEY: break;
    }
  }
}

int aa_json_read_top(const aa_json_ctx_t *c, const json_t *root, const aa_json_field_t *t, size_t n,
                     void *base) {
  if (!json_is_object(root))
    return aa_error(AA_EINVAL, "%s%stop level must be a JSON object (got %s)", c->origin ? c->origin : "",
                    c->origin ? ": " : "", aa_json_type_name(root));
  return aa_json_read_fields(c, root, "", t, n, base);
}
