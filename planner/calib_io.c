/* Calibrations in and out of the store as files (docs/service.md "Export
 * and import"): `query calib_export` writes the stored calibrations of one
 * device as a calibration file (strategies/calib_file.h), and the
 * `calib_import` message stores those of a file another planner wrote.
 * Both run on the loop: the rows of one device are at most five, the file
 * is bounded (4 MiB, its values counted before it is parsed) and the
 * import is one short transaction. */
#include "planner_internal.h"

#include "../common/json.h"
#include "../strategies/calib_file.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(AA_PROTO_CALIB_FILE_MAX == AA_CALIB_FILE_MAX,
               "calib_import.json is bounded by the calibration file's own cap");

/* A unix time as "2026-01-02T03:04:05Z" into out (32 bytes). */
static void iso_time(int64_t t, char out[32]) {
  time_t tt = (time_t)t;
  struct tm tm;
  if (!gmtime_r(&tt, &tm) || !strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
    snprintf(out, 32, "%lld", (long long)t);
}

/* --- export ------------------------------------------------------------------------ */

/* The walk that resolves the asked device: a fingerprint, or a kind, which
 * means the device `query plan` takes for that kind without "device": the
 * one of the most recently updated calibration other than its links
 * between hosts, else of any. */
typedef struct {
  const char *want; /* a whole fingerprint, NULL = by kind */
  bool cuda;
  char device[AA_STORE_HW_MAX];
  char any[AA_STORE_HW_MAX];
} resolve_t;

static int resolve_cb(const aa_store_calib_t *c, void *data) {
  resolve_t *r = data;
  if (r->want) {
    if (!strcmp(c->device, r->want)) snprintf(r->device, sizeof r->device, "%s", c->device);
    return r->device[0] ? 1 : 0;
  }
  if (!r->any[0]) snprintf(r->any, sizeof r->any, "%s", c->device);
  if (strcmp(c->backend, aa_calib_across_hosts(r->cuda))) {
    snprintf(r->device, sizeof r->device, "%s", c->device);
    return 1;
  }
  return 0;
}

/* The walk that collects a device's rows into a file, each parsed again so
 * that what is written is what the file reader accepts. */
typedef struct {
  const char *device;
  aa_calib_file_t f;
  int rc;
} collect_t;

static int collect_cb(const aa_store_calib_t *c, void *data) {
  collect_t *k = data;
  if (strcmp(c->device, k->device)) return 0; /* a longer fingerprint with the same start */
  if (k->f.n == AA_CALIB_FILE_ENTRIES_MAX) {
    k->rc = aa_error(AA_EINTERNAL, "query calib_export: %s has more than %d calibrations", c->device,
                     AA_CALIB_FILE_ENTRIES_MAX);
    return 1;
  }
  aa_calib_entry_t *e = &k->f.e[k->f.n];
  char origin[AA_STORE_HW_MAX + 64];
  snprintf(origin, sizeof origin, "the stored calibration of %s (%s)", c->device, c->backend);
  if (!(e->calib = malloc(sizeof *e->calib))) {
    k->rc = aa_error(AA_ENOMEM, "query calib_export: no memory");
    return 1;
  }
  const char *rule = NULL;
  if ((k->rc = aa_calib_parse(e->calib, c->json, origin)) ||
      (rule = aa_calib_key_rule(c->device, c->backend, e->calib))) {
    /* An export holds only what an import takes. */
    if (rule) k->rc = aa_error(AA_EINVAL, "query calib_export: %s: %s", origin, rule);
    free(e->calib);
    e->calib = NULL;
    return 1;
  }
  snprintf(e->device, sizeof e->device, "%s", c->device);
  snprintf(e->backend, sizeof e->backend, "%s", c->backend);
  e->measured_at = c->measured_at;
  k->f.n++;
  return 0;
}

static int by_backend(const void *a, const void *b) {
  return strcmp(((const aa_calib_entry_t *)a)->backend, ((const aa_calib_entry_t *)b)->backend);
}

int aa__calib_export_query(aa_store_t *st, const json_t *args, json_t *out) {
  static const char *const allowed[] = {"device", NULL};
  const char *dev = NULL;
  int rc = aa__query_check_keys("calib_export", args, allowed);
  if (!rc) rc = aa__query_get_str("calib_export", args, "device", &dev);
  if (rc) return rc;
  if (!dev)
    return aa_error(AA_EINVAL,
                    "query calib_export: \"device\" (a device fingerprint, cpu or cuda) is required");
  bool kind = !strcmp(dev, "cpu") || !strcmp(dev, "cuda");
  resolve_t r = {.want = kind ? NULL : dev, .cuda = !strcmp(dev, "cuda")};
  rc = aa_store_calib_list(st, kind ? (r.cuda ? "cuda:" : "cpu:") : dev, resolve_cb, &r);
  if (rc < 0) return rc;
  if (!r.device[0] && r.any[0]) snprintf(r.device, sizeof r.device, "%s", r.any);
  if (!r.device[0]) {
    char shown[AA_STORE_HW_MAX];
    aa_json_sanitize(shown, sizeof shown, dev);
    return aa_error(AA_ENOENT,
                    kind ? "query calib_export: no calibration of a %s device is stored"
                         : "query calib_export: no calibration of device \"%s\" is stored",
                    shown);
  }
  collect_t k = {.device = r.device};
  rc = aa_store_calib_list(st, r.device, collect_cb, &k);
  if (rc < 0 || k.rc) {
    aa_calib_file_clear(&k.f);
    return k.rc ? k.rc : rc;
  }
  /* The store lists by the time of the latest write, which an import
   * changes: by backend, a round trip through another planner writes the
   * same file. */
  qsort(k.f.e, (size_t)k.f.n, sizeof k.f.e[0], by_backend);
  char *text = aa_calib_file_to_json(&k.f);
  json_t *rows = json_array();
  for (int i = 0; i < k.f.n && rows; i++)
    if (json_array_append_new(rows, json_pack("{s:s, s:I}", "backend", k.f.e[i].backend, "measured_at",
                                              (json_int_t)k.f.e[i].measured_at))) {
      json_decref(rows);
      rows = NULL;
    }
  aa_calib_file_clear(&k.f);
  if (!text || !rows) {
    free(text);
    json_decref(rows);
    return aa_error(AA_ENOMEM, "query calib_export: no memory");
  }
  json_object_set_new(out, "device", json_string(r.device));
  json_object_set_new(out, "calibrations", rows);
  json_object_set_new(out, "file", json_string(text));
  free(text);
  return 0;
}

/* --- import ------------------------------------------------------------------------ */

/* The stored row of a key: its measured_at, 0 when none is stored. */
typedef struct {
  const char *device, *backend;
  int64_t measured_at;
} stored_t;

static int stored_cb(const aa_store_calib_t *c, void *data) {
  stored_t *s = data;
  if (strcmp(c->device, s->device) || strcmp(c->backend, s->backend)) return 0;
  s->measured_at = c->measured_at;
  return 1;
}

/* Checks the file, decides what it may replace and stores it; the reply
 * JSON into *out (malloc'd) on success. */
static int import_file(aa_store_t *st, const aa_msg_calib_import_t *m, char **out) {
  aa_calib_file_t f;
  int rc = aa_calib_file_parse(&f, m->json, strlen(m->json), "calib_import.json");
  if (rc) return rc;
  aa_store_calib_t rows[AA_CALIB_FILE_ENTRIES_MAX] = {0};
  int64_t before[AA_CALIB_FILE_ENTRIES_MAX] = {0};
  char *texts[AA_CALIB_FILE_ENTRIES_MAX] = {0};
  for (int i = 0; i < f.n && !rc; i++) {
    const aa_calib_entry_t *e = &f.e[i];
    stored_t s = {.device = e->device, .backend = e->backend};
    rc = aa_store_calib_list(st, e->device, stored_cb, &s);
    if (rc < 0) break;
    rc = 0;
    before[i] = s.measured_at;
    if (s.measured_at > e->measured_at && !m->force) {
      char was[32], file[32];
      iso_time(s.measured_at, was);
      iso_time(e->measured_at, file);
      rc = aa_error(AA_EINVAL,
                    "calibrations[%d]: the stored calibration of %s (%s) was measured %s, after "
                    "the file's (%s): nothing was stored (--force replaces it)",
                    i, e->device, e->backend, was, file);
      break;
    }
    /* Stored as calib.h writes it, so an export gives the file's bytes. */
    if (!(texts[i] = aa_calib_to_json(e->calib))) {
      rc = aa_error(AA_ENOMEM, "calib import: no memory");
      break;
    }
    rows[i] = (aa_store_calib_t){.json = texts[i], .measured_at = e->measured_at};
    snprintf(rows[i].device, sizeof rows[i].device, "%s", e->device);
    snprintf(rows[i].backend, sizeof rows[i].backend, "%s", e->backend);
  }
  if (!rc) rc = aa_store_calib_import(st, rows, (size_t)f.n);
  json_t *list = rc ? NULL : json_array();
  for (int i = 0; i < f.n && list; i++) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:o}", "device", f.e[i].device, "backend", f.e[i].backend,
                          "measured_at", (json_int_t)f.e[i].measured_at, "replaced",
                          before[i] ? json_integer((json_int_t)before[i]) : json_null());
    if (!o || json_array_append_new(list, o)) {
      json_decref(list);
      list = NULL;
    }
  }
  json_t *o = list ? json_pack("{s:o, s:b}", "calibrations", list, "forced", m->force) : NULL;
  if (!rc && !(o && (*out = aa__report_dump(o))))
    rc = aa_error(AA_ENOMEM, "calib import: no memory for the reply (the calibrations were stored)");
  json_decref(o);
  for (int i = 0; i < f.n; i++)
    free(texts[i]);
  aa_calib_file_clear(&f);
  return rc;
}

void aa__calib_on_import(aa_conn_t *c, const aa_msg_t *m) {
  char *text = NULL;
  int rc = import_file(c->p->store, &m->calib_import, &text);
  if (rc) {
    aa__planner_log(c->p, "client %llu: calib import refused: %s", (unsigned long long)c->id,
                    aa_last_error());
    aa__conn_send_error(c, m->id, rc, aa_last_error());
    return;
  }
  aa__planner_log(c->p, "client %llu: calib import stored%s: %s", (unsigned long long)c->id,
                  m->calib_import.force ? " (forced)" : "", text);
  aa__conn_reply(c, m->id, text);
  free(text);
}
