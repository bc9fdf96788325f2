/* Models, hardware fingerprints and jobs in the store. */
#include "store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- models and hardware ------------------------------------------------------ */

int aa_store_put_model(aa_store_t *st, const char *hash, const char *name, const char *spec_json,
                       int64_t params) {
  int err = aa__store_check_key(hash, AA_STORE_HASH_MAX, "model hash");
  if (err) return err;
  if (!spec_json) return aa_error(AA_EINVAL, "model %s: no spec", hash);
  if (params < 0) return aa_error(AA_EINVAL, "model %s: negative parameter count", hash);
  char cut[AA_STORE_NAME_MAX];
  snprintf(cut, sizeof cut, "%s", name ? name : "");
  if ((err = aa__store_begin(st))) return err;
  sqlite3_stmt *s = st->st[AA__ST_PUT_MODEL];
  sqlite3_bind_text(s, 1, hash, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, cut, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, spec_json, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 4, params);
  sqlite3_bind_int64(s, 5, aa__store_now());
  char what[128];
  snprintf(what, sizeof what, "put model %s", hash);
  err = aa__store_exec(st, s, what);
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

int aa_store_put_hardware(aa_store_t *st, const char *fingerprint, const char *description_json) {
  int err = aa__store_check_key(fingerprint, AA_STORE_HW_MAX, "hardware fingerprint");
  if (err) return err;
  if (!description_json) return aa_error(AA_EINVAL, "hardware %s: no description", fingerprint);
  if ((err = aa__store_begin(st))) return err;
  sqlite3_stmt *s = st->st[AA__ST_PUT_HW];
  sqlite3_bind_text(s, 1, fingerprint, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, description_json, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 3, aa__store_now());
  char what[192];
  snprintf(what, sizeof what, "put hardware %s", fingerprint);
  err = aa__store_exec(st, s, what);
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

/* Steps a single-row lookup: 0 with the row current, AA_ENOENT (message
 * "<what>: not found") when there is no row, or a store error; on non-zero
 * the statement has been reset. */
static int step_row(aa_store_t *st, sqlite3_stmt *s, const char *what) {
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return 0;
  int err = rc == SQLITE_DONE ? aa_error(AA_ENOENT, "store %s: %s: not found", st->path, what)
                              : aa__store_fail(st, rc, "%s", what);
  aa__store_done(s);
  return err;
}

/* strdup that reports failure through the last-error slot. */
static int dup_text(const char *v, char **out) {
  if (!(*out = strdup(v))) return aa_error(AA_ENOMEM, "store: out of memory");
  return 0;
}

int aa_store_model_get(aa_store_t *st, const char *hash, aa_store_model_t *out) {
  int err = aa__store_check_key(hash, AA_STORE_HASH_MAX, "model hash");
  if (err) return err;
  sqlite3_stmt *s = st->st[AA__ST_GET_MODEL];
  sqlite3_bind_text(s, 1, hash, -1, SQLITE_TRANSIENT);
  char what[128];
  snprintf(what, sizeof what, "model %s", hash);
  if ((err = step_row(st, s, what))) return err;
  aa_store_model_t m = {0};
  aa__store_col_copy(s, 0, m.hash, sizeof m.hash);
  aa__store_col_copy(s, 1, m.name, sizeof m.name);
  m.params = sqlite3_column_int64(s, 3);
  m.created_at = sqlite3_column_int64(s, 4);
  err = dup_text(aa__store_col_text(s, 2), &m.spec_json);
  aa__store_done(s);
  if (!err) *out = m;
  return err;
}

int aa_store_hardware_get(aa_store_t *st, const char *fingerprint, aa_store_hardware_t *out) {
  int err = aa__store_check_key(fingerprint, AA_STORE_HW_MAX, "hardware fingerprint");
  if (err) return err;
  sqlite3_stmt *s = st->st[AA__ST_GET_HW];
  sqlite3_bind_text(s, 1, fingerprint, -1, SQLITE_TRANSIENT);
  char what[192];
  snprintf(what, sizeof what, "hardware %s", fingerprint);
  if ((err = step_row(st, s, what))) return err;
  aa_store_hardware_t h = {0};
  aa__store_col_copy(s, 0, h.fingerprint, sizeof h.fingerprint);
  h.created_at = sqlite3_column_int64(s, 2);
  err = dup_text(aa__store_col_text(s, 1), &h.description_json);
  aa__store_done(s);
  if (!err) *out = h;
  return err;
}

void aa_store_model_clear(aa_store_model_t *m) {
  if (!m) return;
  free(m->spec_json);
  m->spec_json = NULL;
}

void aa_store_hardware_clear(aa_store_hardware_t *h) {
  if (!h) return;
  free(h->description_json);
  h->description_json = NULL;
}

/* --- jobs ------------------------------------------------------------------------ */

int aa_store_job_create(aa_store_t *st, const char *model_hash, const char *hardware,
                        const char *options_json, int64_t *job_id) {
  int err = aa__store_check_key(model_hash, AA_STORE_HASH_MAX, "model hash");
  if (!err) err = aa__store_check_key(hardware, AA_STORE_HW_MAX, "hardware fingerprint");
  if (err) return err;
  if ((err = aa__store_begin(st))) return err;
  sqlite3_stmt *s = st->st[AA__ST_JOB_CREATE];
  sqlite3_bind_text(s, 1, model_hash, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, hardware, -1, SQLITE_TRANSIENT);
  aa__store_bind_text(s, 3, options_json);
  sqlite3_bind_int64(s, 4, aa__store_now());
  char what[256];
  snprintf(what, sizeof what, "create job for model %s on %s (both must be in the store)", model_hash,
           hardware);
  err = aa__store_exec(st, s, what);
  int64_t id = sqlite3_last_insert_rowid(st->db);
  if (!err) err = aa__store_commit(st);
  if (err) {
    aa__store_rollback(st);
    return err;
  }
  *job_id = id;
  return 0;
}

/* Reads a job's status. AA_ENOENT "job N: not found" when there is none. */
static int job_status(aa_store_t *st, int64_t job_id, aa_store_job_status_t *status) {
  sqlite3_stmt *s = st->st[AA__ST_JOB_STATUS];
  sqlite3_bind_int64(s, 1, job_id);
  char what[48];
  snprintf(what, sizeof what, "job %lld", (long long)job_id);
  int err = step_row(st, s, what);
  if (err) return err;
  int v = aa__store_job_status_of(aa__store_col_text(s, 0));
  aa__store_done(s);
  if (v < 0)
    return aa_error(AA_ECORRUPT, "store %s: job %lld has an unknown status", st->path, (long long)job_id);
  *status = (aa_store_job_status_t)v;
  return 0;
}

/* After an UPDATE guarded by the job's current status changed no row:
 * says whether the job is missing or in the wrong state. */
static int job_not_changed(aa_store_t *st, int64_t job_id, const char *want) {
  aa_store_job_status_t cur = AA_STORE_JOB_QUEUED; /* set by job_status on success; this quiets -O2's doubt */
  int err = job_status(st, job_id, &cur);
  if (err) return err;
  return aa_error(AA_EINVAL, "store %s: job %lld is %s, not %s", st->path, (long long)job_id,
                  aa_store_job_status_name(cur), want);
}

int aa_store_job_start(aa_store_t *st, int64_t job_id) {
  sqlite3_stmt *s = st->st[AA__ST_JOB_START];
  int err = aa__store_begin(st);
  if (err) return err;
  sqlite3_bind_int64(s, 1, job_id);
  sqlite3_bind_int64(s, 2, aa__store_now());
  err = aa__store_exec(st, s, "start job");
  if (!err && sqlite3_changes(st->db) == 0) err = job_not_changed(st, job_id, "queued");
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

/* The UPDATE of aa_store_job_finish, inside the caller's transaction. */
static int job_finish_tx(aa_store_t *st, int64_t job_id, aa_store_job_status_t status, int64_t best_run_id,
                         int from_store, const char *error) {
  sqlite3_stmt *s = st->st[AA__ST_JOB_FINISH];
  sqlite3_bind_int64(s, 1, job_id);
  sqlite3_bind_text(s, 2, aa_store_job_status_name(status), -1, SQLITE_STATIC);
  aa__store_bind_int0(s, 3, best_run_id);
  sqlite3_bind_int(s, 4, from_store ? 1 : 0);
  aa__store_bind_text(s, 5, error);
  sqlite3_bind_int64(s, 6, aa__store_now());
  char what[96];
  snprintf(what, sizeof what, "finish job %lld (best run %lld must exist)", (long long)job_id,
           (long long)best_run_id);
  int err = aa__store_exec(st, s, what);
  if (!err && sqlite3_changes(st->db) == 0) err = job_not_changed(st, job_id, "queued or running");
  return err;
}

int aa_store_job_finish(aa_store_t *st, int64_t job_id, aa_store_job_status_t status, int64_t best_run_id,
                        int from_store, const char *error) {
  if (status != AA_STORE_JOB_DONE && status != AA_STORE_JOB_FAILED && status != AA_STORE_JOB_CANCELLED &&
      status != AA_STORE_JOB_INTERRUPTED) {
    const char *name = aa_store_job_status_name(status);
    return name ? aa_error(AA_EINVAL, "job %lld: %s is not a final status", (long long)job_id, name)
                : aa_error(AA_EINVAL, "job %lld: invalid job status %d", (long long)job_id, (int)status);
  }
  if (best_run_id < 0) return aa_error(AA_EINVAL, "job %lld: negative best run id", (long long)job_id);
  int err = aa__store_begin(st);
  if (err) return err;
  err = job_finish_tx(st, job_id, status, best_run_id, from_store, error);
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

int aa_store_job_set_note(aa_store_t *st, int64_t job_id, const char *note) {
  sqlite3_stmt *s = st->st[AA__ST_JOB_NOTE];
  sqlite3_bind_int64(s, 1, job_id);
  aa__store_bind_text(s, 2, note);
  char what[48];
  snprintf(what, sizeof what, "note of job %lld", (long long)job_id);
  int err = aa__store_exec(st, s, what);
  if (!err && sqlite3_changes(st->db) == 0)
    err = aa_error(AA_ENOENT, "store %s: job %lld: not found", st->path, (long long)job_id);
  return err;
}

/* Reads the current row of a statement selecting AA__JOB_COLS; strings
 * borrowed from the statement. A row that cannot be read (an unknown
 * status) returns -1 with the reason in why (cap bytes), setting no
 * last-error message: the caller decides whether it fails. */
static int job_from_row(sqlite3_stmt *s, aa_store_job_t *j, char *why, size_t cap) {
  memset(j, 0, sizeof *j);
  j->id = sqlite3_column_int64(s, 0);
  aa__store_col_copy(s, 1, j->model_hash, sizeof j->model_hash);
  aa__store_col_copy(s, 2, j->hardware, sizeof j->hardware);
  const char *status = aa__store_col_text(s, 3);
  int v = aa__store_job_status_of(status);
  if (v < 0) {
    snprintf(why, cap, "job %lld has an unknown status '%.40s'", (long long)j->id, status);
    return -1;
  }
  j->status = (aa_store_job_status_t)v;
  j->options_json = aa__store_col_text(s, 4);
  j->best_run_id = sqlite3_column_int64(s, 5);
  j->from_store = sqlite3_column_int(s, 6);
  j->error = aa__store_col_text(s, 7);
  j->submitted_at = sqlite3_column_int64(s, 8);
  j->started_at = sqlite3_column_int64(s, 9);
  j->finished_at = sqlite3_column_int64(s, 10);
  j->resumes = sqlite3_column_int(s, 11);
  j->note = aa__store_col_text(s, 12);
  return 0;
}

int aa_store_job_get(aa_store_t *st, int64_t job_id, aa_store_job_t *out) {
  sqlite3_stmt *s = st->st[AA__ST_JOB_GET];
  sqlite3_bind_int64(s, 1, job_id);
  char what[48];
  snprintf(what, sizeof what, "job %lld", (long long)job_id);
  int err = step_row(st, s, what);
  if (err) return err;
  aa_store_job_t j;
  char *opts = NULL, *error = NULL, *note = NULL, why[128];
  if (job_from_row(s, &j, why, sizeof why)) err = aa_error(AA_ECORRUPT, "store %s: %s", st->path, why);
  if (!err) err = dup_text(j.options_json, &opts);
  if (!err) err = dup_text(j.error, &error);
  if (!err) err = dup_text(j.note, &note);
  aa__store_done(s);
  if (err) {
    free(opts);
    free(error);
    free(note);
    return err;
  }
  j.options_json = opts;
  j.error = error;
  j.note = note;
  *out = j;
  return 0;
}

void aa_store_job_clear(aa_store_job_t *j) {
  if (!j) return;
  free((char *)j->options_json);
  free((char *)j->error);
  free((char *)j->note);
  j->options_json = j->error = j->note = NULL;
}

/* The statement for one filter shape (bits: 1 model, 2 hardware, 4 statuses),
 * prepared on first use. */
static int jobq_stmt(aa_store_t *st, unsigned shape, sqlite3_stmt **out) {
  if (st->jobq[shape]) {
    *out = st->jobq[shape];
    return 0;
  }
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT " AA__JOB_COLS " FROM jobs WHERE 1%s%s%s ORDER BY id DESC LIMIT :limit OFFSET :offset",
           shape & 1 ? " AND model_hash = :model" : "", shape & 2 ? " AND hardware = :hw" : "",
           shape & 4 ? " AND status IN (SELECT value FROM json_each(:statuses))" : "");
  int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st->jobq[shape], NULL);
  if (rc != SQLITE_OK) return aa__store_fail(st, rc, "prepare job list");
  *out = st->jobq[shape];
  return 0;
}

/* Walks the rows of a bound job list statement: each readable row to cb,
 * each unreadable one to aa__store_bad_row. Returns 0, the first non-zero
 * value of either, or a store error; leaves the statement to the caller to
 * reset. */
static int jobs_walk(aa_store_t *st, sqlite3_stmt *s, const aa_store_job_filter_t *f, aa_store_job_cb cb,
                     void *data) {
  int rc = SQLITE_DONE, err = 0;
  while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    aa_store_job_t j;
    char why[128];
    if (job_from_row(s, &j, why, sizeof why))
      err = aa__store_bad_row(st, f->bad_row, j.id, why, data);
    else
      err = cb(&j, data);
  }
  if (!err && rc != SQLITE_DONE) err = aa__store_fail(st, rc, "list jobs");
  return err;
}

int aa_store_jobs_list(aa_store_t *st, const aa_store_job_filter_t *f, aa_store_job_cb cb, void *data) {
  aa_store_job_filter_t all = {0};
  if (!f) f = &all;
  char statuses[128];
  int err = aa__store_set_json(f->statuses, aa__store_job_status_names, AA_STORE_JOB_NSTATUS, "job status",
                               statuses, sizeof statuses);
  if (err) return err;
  if (f->limit < 0 || f->offset < 0) return aa_error(AA_EINVAL, "job filter: negative limit or offset");
  unsigned shape = (f->model_hash ? 1u : 0) | (f->hardware ? 2u : 0) | (f->statuses ? 4u : 0);
  sqlite3_stmt *s = NULL;
  if ((err = jobq_stmt(st, shape, &s))) return err;
  aa__store_bind_page(s, f->limit, f->offset);
  if (f->model_hash) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":model"), f->model_hash);
  if (f->hardware) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":hw"), f->hardware);
  if (f->statuses) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":statuses"), statuses);
  err = jobs_walk(st, s, f, cb, data);
  aa__store_done(s);
  return err;
}
