/* JSON helpers shared by the readers of user files (jansson): the text
 * checks every reader makes before parsing, message-safe text, and the
 * table-driven field reader that the model spec (common/spec.c) and the
 * strategy file (strategies/strategy_file.c) both use, so that their
 * unknown-key rule, type checks, ranges and messages cannot drift apart. */
#ifndef AA_JSON_H
#define AA_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Checks len bytes of JSON text (at most max bytes, not blank, no NUL
 * byte) and parses them with duplicate keys rejected and any top-level
 * value allowed. *out receives the root (transferred; json_decref it).
 * Errors name origin and, for syntax errors, line:column, e.g.
 *   "model.json:3:24: invalid token near ','"
 *   "x.json: empty (expected <expected>)"
 *   "x.json: NUL byte at offset 7 (<what> must be JSON text)". */
int aa_json_parse_text(const char *buf, size_t len, size_t max, const char *origin, const char *what,
                       const char *expected, json_t **out);

/* "object", "integer", ... for "must be X (got Y)" messages. */
const char *aa_json_type_name(const json_t *v);

/* Copies user-controlled text (a key, a string value) into dst in a
 * message-safe form: at most 48 bytes of it, control bytes, quotes and
 * backslashes escaped as \xNN, "..." when cut, so a hostile value cannot
 * flood or garble a log line. dst always ends up NUL-terminated. */
void aa_json_sanitize(char *dst, size_t cap, const char *s);

/* ---- The table-driven field reader -------------------------------------
 *
 * A reader describes each member of a JSON object once, in a table of
 * aa_json_field_t: its key, its kind, its range and where its value lands
 * in a C struct (`off` bytes from a base pointer, `size` bytes). The table
 * order is the order of checks, of error lists and (for the owners'
 * writers) of written files. Every message has the form
 *   "<origin>: <path>: <rule>"      e.g. "s.json: parallel.data: must be between 1 and 65536 (got 0)"
 * where path is the dotted key ("train.lr"), and is "<path>: <rule>" when
 * the context has no origin. */

typedef enum {
  AA_JSON_INT,    /* JSON integer -> int (size 4) or int64_t/uint64_t (size 8), imin..imax */
  AA_JSON_NUMBER, /* JSON integer or real -> float (size 4) or double (size 8), fmin..fmax */
  AA_JSON_BOOL,   /* true / false -> int 0 / 1 */
  AA_JSON_ENUM,   /* a string among `names` -> its index, as an int */
  AA_JSON_STRING, /* string -> NUL-terminated char[size]; `check` gives the rule it breaks */
  AA_JSON_OBJECT, /* object: its members by `sub`, or only its type when sub is NULL */
  AA_JSON_CUSTOM, /* read by `parse` */
  AA_JSON_KEY,    /* a known key whose value the caller reads itself */
} aa_json_kind_t;

/* Where a reader is: what messages name, and the owner's data for
 * custom parsers. */
typedef struct aa_json_ctx {
  const char *origin; /* the file or "<string>"; NULL: messages start at the path */
  void *data;         /* the owner's, for AA_JSON_CUSTOM parsers (e.g. a base directory) */
} aa_json_ctx_t;

typedef struct aa_json_field aa_json_field_t;

struct aa_json_field {
  const char *key;
  aa_json_kind_t kind;
  bool required;     /* missing: "required field is missing" */
  size_t off, size;  /* destination: base + off, size bytes */
  long long imin, imax, idef; /* AA_JSON_INT: the range and the default */
  double fmin, fmax, fdef;    /* AA_JSON_NUMBER: the range (fmax may be INFINITY) and the default */
  bool fmin_open, fmax_open;  /* AA_JSON_NUMBER: an open end excludes its bound */
  const char *const *names;   /* AA_JSON_ENUM: NULL-terminated; the default is index 0 */
  /* AA_JSON_STRING: the rule s (len bytes, no NUL inside) breaks, as a
   * static string, or NULL when it is fine; NULL check = any string that
   * fits in size. */
  const char *(*check)(const char *s, size_t len);
  /* AA_JSON_CUSTOM: reads v into dst (base + off); errors through
   * aa_json_fail with path. */
  int (*parse)(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst);
  const aa_json_field_t *sub; /* AA_JSON_OBJECT: the members' table, same base */
  size_t nsub;
};

/* A document's top level read as an object of table t into base: AA_EINVAL
 * "<origin>: top level must be a JSON object (got <type>)" when root is
 * not an object, else aa_json_read_fields(c, root, "", t, n, base). */
int aa_json_read_top(const aa_json_ctx_t *c, const json_t *root, const aa_json_field_t *t, size_t n,
                     void *base);

/* Reads the members of obj that table t (n entries) describes into base.
 * section is the dotted prefix of paths ("" at top level). Unknown keys
 * are reported first, before any value, so that a typo is named even when
 * a later field is bad: "<path>: unknown key (allowed: a, b, c)". Then
 * each field in table order: a missing required one, a wrong type ("must
 * be an integer (got real number 2.0)"), a value out of range. Nested
 * objects are read in place (depth first). Fields not given keep what base
 * holds. Returns 0 or the first failure's code (AA_EINVAL, or a custom
 * parser's); base may be partly written on failure. */
int aa_json_read_fields(const aa_json_ctx_t *c, const json_t *obj, const char *section,
                        const aa_json_field_t *t, size_t n, void *base);

/* Reads one present value v of field f into base + f->off, with the
 * checks and messages of aa_json_read_fields; for custom parsers that
 * reuse a kind (an enum read into a temporary). */
int aa_json_read_value(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, const json_t *v,
                       void *base);

/* Writes each field's default into base: idef, fdef, enum index 0.
 * Strings, objects and custom fields are left alone. */
void aa_json_fields_default(const aa_json_field_t *t, size_t n, void *base);

/* The range rule of an AA_JSON_INT field for value v: 0, or AA_EINVAL with
 * "must be between A and B (got v)", or for a field bounded only by the C
 * type "must be >= A (got v)" / "must be <= B (got v)". For checking a
 * struct that did not come from JSON (aa_arch_validate). */
int aa_json_check_int(const aa_json_ctx_t *c, const char *path, const aa_json_field_t *f, long long v);

/* Checks the values a struct holds (base) against table t (n entries)
 * with the reader's rules and messages, for a struct that did not come
 * from JSON (a strategy built by the search) or to hold one to the rules
 * its writer relies on: integers in range, numbers finite and in range,
 * booleans 0 or 1 ("must be true or false (got 2)"), enum indices among
 * the names ("must be one of: a, b (got 7)"), strings NUL-terminated
 * within their size, UTF-8, and by their `check` rule (an empty string is
 * the unknown value and passes); objects depth first. Custom and key
 * fields are the owner's to check. Returns 0 or AA_EINVAL for the first
 * field that breaks its rule, in table order. */
int aa_json_check_fields(const aa_json_ctx_t *c, const char *section, const aa_json_field_t *t, size_t n,
                         const void *base);

/* Sets the last error to "<origin>: <path>: <rule>" (or "<path>: <rule>"
 * without an origin) and returns code. */
int aa_json_fail(const aa_json_ctx_t *c, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "must be <expected> (got <type>)", AA_EINVAL; a real is shown with its
 * value ("got real number 2.0") so that the reason is visible. */
int aa_json_fail_type(const aa_json_ctx_t *c, const char *path, const char *expected, const json_t *v);

/* The shortest text that reads back as x (as a float when single), so a
 * message never shows two different numbers as the same one. Returns buf. */
const char *aa_json_fmt_num(char buf[32], double x, bool single);

#endif
