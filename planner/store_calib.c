/* Calibrations in the store: one JSON text (strategies/calib.h) per device
 * fingerprint and process-group backend, written by the planner when a
 * calibration job reports and read by the search and by `autoaccel plan`.
 * Schema and rules: docs/store.md "calibrations". */
#include "store_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of s[0..len) without a tail of `mark` and digits; len when
 * it has none, or when nothing would be left before it. */
static size_t before_count(const char *s, size_t len, char mark) {
  size_t digits = 0;
  while (digits < len && isdigit((unsigned char)s[len - 1 - digits]))
    digits++;
  return digits > 0 && digits + 1 < len && s[len - 1 - digits] == mark ? len - digits - 1 : len;
}

void aa_store_device_of(const char *hardware, char *device, size_t n) {
  if (n == 0) return;
  size_t len = hardware ? strlen(hardware) : 0;
  /* "…MiBx4@2": strip "x4@2", "…MiBx2": strip "x2"; a name that merely
   * ends in digits keeps them, and so does one that ends in "@2" with no
   * count before it. */
  size_t at = before_count(hardware, len, '@'), x = before_count(hardware, at, 'x');
  if (x < at) len = x;
  snprintf(device, n, "%.*s", (int)len, hardware ? hardware : "");
}

/* The backends a calibration may be measured on (the table's
 * calibration_backend_known says the same, for writers past the API). */
static int backend_ok(const char *b) {
  static const char *const known[] = {"shm", "nccl", "gloo", "self", "nccl-hosts"};
  for (size_t i = 0; b && i < sizeof known / sizeof known[0]; i++)
    if (strcmp(b, known[i]) == 0) return 1;
  return 0;
}

/* Checks the key of a calibration; AA_EINVAL naming what is wrong. */
static int check_calib_key(const char *device, const char *backend) {
  int err = aa__store_check_key(device, AA_STORE_HW_MAX, "calibration device");
  if (err) return err;
  if (!backend_ok(backend))
    return aa_error(AA_EINVAL,
                    "calibration of %s: unknown backend '%s' (one of: shm, nccl, gloo, self, nccl-hosts)",
                    device, backend ? backend : "");
  return 0;
}

/* Binds and runs one put of the open transaction. */
static int put_row(aa_store_t *st, const char *device, const char *backend, const char *json,
                   int64_t measured_at, int64_t now) {
  sqlite3_stmt *s = st->st[AA__ST_CALIB_PUT];
  sqlite3_bind_text(s, 1, device, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, backend, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, json, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 4, measured_at);
  sqlite3_bind_int64(s, 5, now);
  char what[AA_STORE_HW_MAX + 48];
  snprintf(what, sizeof what, "put calibration of %s (%s)", device, backend);
  return aa__store_exec(st, s, what);
}

int aa_store_calib_put(aa_store_t *st, const char *device, const char *backend, const char *json) {
  int err = check_calib_key(device, backend);
  if (err) return err;
  if (!json) return aa_error(AA_EINVAL, "calibration of %s (%s): no JSON", device, backend);
  if ((err = aa__store_begin(st))) return err;
  int64_t now = aa__store_now();
  err = put_row(st, device, backend, json, now, now);
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

int aa_store_calib_import(aa_store_t *st, const aa_store_calib_t *rows, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int err = check_calib_key(rows[i].device, rows[i].backend);
    if (err) return err;
    if (!rows[i].json)
      return aa_error(AA_EINVAL, "calibration of %s (%s): no JSON", rows[i].device, rows[i].backend);
    if (rows[i].measured_at <= 0)
      return aa_error(AA_EINVAL, "calibration of %s (%s): measured_at %lld must be a time (> 0)",
                      rows[i].device, rows[i].backend, (long long)rows[i].measured_at);
  }
  int err = aa__store_begin(st);
  if (err) return err;
  int64_t now = aa__store_now();
  for (size_t i = 0; i < n && !err; i++)
    err = put_row(st, rows[i].device, rows[i].backend, rows[i].json, rows[i].measured_at, now);
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

int aa_store_calib_get(aa_store_t *st, const char *device, const char *backend, char **json_out) {
  int err = check_calib_key(device, backend);
  if (err) return err;
  sqlite3_stmt *s = st->st[AA__ST_CALIB_GET];
  sqlite3_bind_text(s, 1, device, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, backend, -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(s);
  char *json = NULL;
  if (rc == SQLITE_ROW) {
    if (!(json = strdup(aa__store_col_text(s, 0)))) err = aa_error(AA_ENOMEM, "store: out of memory");
  } else if (rc != SQLITE_DONE) {
    err = aa__store_fail(st, rc, "calibration of %s (%s)", device, backend);
  }
  aa__store_done(s);
  if (err) return err;
  *json_out = json;
  return json ? 0 : 1;
}

int aa_store_calib_list(aa_store_t *st, const char *device_prefix, aa_store_calib_cb cb, void *data) {
  sqlite3_stmt *s = st->st[AA__ST_CALIB_LIST];
  aa__store_bind_text(s, 1, device_prefix && *device_prefix ? device_prefix : NULL);
  int rc = SQLITE_DONE, err = 0;
  while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    aa_store_calib_t c = {.json = aa__store_col_text(s, 2),
                          .measured_at = sqlite3_column_int64(s, 3),
                          .updated_at = sqlite3_column_int64(s, 4)};
    aa__store_col_copy(s, 0, c.device, sizeof c.device);
    aa__store_col_copy(s, 1, c.backend, sizeof c.backend);
    err = cb(&c, data);
  }
  if (!err && rc != SQLITE_DONE) err = aa__store_fail(st, rc, "list calibrations");
  aa__store_done(s);
  return err;
}
