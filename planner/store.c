/* The store's connection: opening (file permissions, file checks, pragmas,
 * migrations), the prepared statements, SQLite error translation,
 * transactions and recovery after a planner crash. Models, hardware and
 * jobs are in store_jobs.c, runs in store_runs.c. Schema and rules:
 * docs/store.md. */
#include "store_internal.h"

#include "../common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* PRAGMA application_id of an autoaccel store: "AAST". */
#define AA__STORE_APP_ID 0x41415354

/* --- names ------------------------------------------------------------------ */

const char *const aa__store_job_status_names[AA_STORE_JOB_NSTATUS] = {"queued", "running",   "done",
                                                                      "failed", "cancelled", "interrupted"};
const char *const aa__store_run_status_names[AA_STORE_RUN_NSTATUS] = {
    "queued", "running", "ok", "oom", "error", "timeout", "crashed", "pruned", "cancelled"};
const char *const aa__store_run_kind_names[AA_STORE_RUN_NKIND] = {"dryrun", "train"};

static int index_of(const char *const *names, int n, const char *name) {
  if (!name) return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return i;
  return -1;
}

const char *aa_store_job_status_name(aa_store_job_status_t s) {
  return (unsigned)s < AA_STORE_JOB_NSTATUS ? aa__store_job_status_names[s] : NULL;
}
const char *aa_store_run_status_name(aa_store_run_status_t s) {
  return (unsigned)s < AA_STORE_RUN_NSTATUS ? aa__store_run_status_names[s] : NULL;
}
const char *aa_store_run_kind_name(aa_store_run_kind_t k) {
  return (unsigned)k < AA_STORE_RUN_NKIND ? aa__store_run_kind_names[k] : NULL;
}
int aa__store_job_status_of(const char *name) {
  return index_of(aa__store_job_status_names, AA_STORE_JOB_NSTATUS, name);
}
int aa__store_run_status_of(const char *name) {
  return index_of(aa__store_run_status_names, AA_STORE_RUN_NSTATUS, name);
}
int aa__store_run_kind_of(const char *name) {
  return index_of(aa__store_run_kind_names, AA_STORE_RUN_NKIND, name);
}

/* Writes "a, b, c" into buf for an error message. */
static const char *join_names(char *buf, size_t cap, const char *const *names, int n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", names[i]);
  return buf;
}

int aa_store_job_status_parse(aa_store_job_status_t *out, const char *name) {
  int i = aa__store_job_status_of(name);
  char list[160];
  if (i < 0)
    return aa_error(AA_EINVAL, "unknown job status '%s' (one of: %s)", name ? name : "",
                    join_names(list, sizeof list, aa__store_job_status_names, AA_STORE_JOB_NSTATUS));
  *out = (aa_store_job_status_t)i;
  return 0;
}

int aa_store_run_status_parse(aa_store_run_status_t *out, const char *name) {
  int i = aa__store_run_status_of(name);
  char list[160];
  if (i < 0)
    return aa_error(AA_EINVAL, "unknown run status '%s' (one of: %s)", name ? name : "",
                    join_names(list, sizeof list, aa__store_run_status_names, AA_STORE_RUN_NSTATUS));
  *out = (aa_store_run_status_t)i;
  return 0;
}

/* --- helpers shared by store*.c ---------------------------------------------- */

/* SQLite's primary result code -> AA_E*. */
static int translate(int rc) {
  switch (rc & 0xff) {
  case SQLITE_CONSTRAINT:
  case SQLITE_MISMATCH:
  case SQLITE_TOOBIG:
  case SQLITE_RANGE: return AA_EINVAL;
  case SQLITE_NOTADB: return AA_EFORMAT;
  case SQLITE_CORRUPT: return AA_ECORRUPT;
  case SQLITE_NOMEM: return AA_ENOMEM;
  case SQLITE_CANTOPEN: return AA_ENOENT;
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
  case SQLITE_READONLY:
  case SQLITE_IOERR:
  case SQLITE_FULL:
  case SQLITE_PERM:
  case SQLITE_PROTOCOL: return AA_EIO;
  default: return AA_EINTERNAL;
  }
}

int aa__store_fail(aa_store_t *st, int rc, const char *fmt, ...) {
  char ctx[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  const char *msg = st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc);
  if ((rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR) {
    st->io_failures++;
    st->io_failing = true;
  }
  if ((rc & 0xff) == SQLITE_BUSY)
    return aa_error(AA_EIO, "store %s: %s: %s (another connection held the write lock for over %d ms)",
                    st->path, ctx, msg, AA_STORE_BUSY_MS);
  return aa_error(translate(rc), "store %s: %s: %s", st->path, ctx, msg);
}

int aa__store_exec(aa_store_t *st, sqlite3_stmt *s, const char *what) {
  int rc = sqlite3_step(s);
  while (rc == SQLITE_ROW)
    rc = sqlite3_step(s);
  int err = rc == SQLITE_DONE ? 0 : aa__store_fail(st, rc, "%s", what);
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  /* A write outside BEGIN ... COMMIT committed itself. */
  if (!err && !sqlite3_stmt_readonly(s) && sqlite3_get_autocommit(st->db)) st->io_failing = false;
  return err;
}

void aa__store_done(sqlite3_stmt *s) {
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
}

int aa__store_begin(aa_store_t *st) { return aa__store_exec(st, st->st[AA__ST_BEGIN], "begin immediate"); }
int aa__store_commit(aa_store_t *st) {
  int err = aa__store_exec(st, st->st[AA__ST_COMMIT], "commit");
  if (err)
    aa__store_rollback(st);
  else
    st->io_failing = false;
  return err;
}
void aa__store_rollback(aa_store_t *st) {
  if (!sqlite3_get_autocommit(st->db)) {
    sqlite3_step(st->st[AA__ST_ROLLBACK]);
    sqlite3_reset(st->st[AA__ST_ROLLBACK]);
  }
}

int aa__store_bad_row(aa_store_t *st, aa_store_bad_row_cb bad_row, int64_t id, const char *why, void *data) {
  if (!bad_row) return aa_error(AA_ECORRUPT, "store %s: %s", st->path, why);
  return bad_row(id, why, data);
}

void aa__store_bind_page(sqlite3_stmt *s, int limit, int64_t offset) {
  sqlite3_bind_int(s, sqlite3_bind_parameter_index(s, ":limit"), limit > 0 ? limit : -1);
  sqlite3_bind_int64(s, sqlite3_bind_parameter_index(s, ":offset"), offset);
}

int aa__store_bind_text(sqlite3_stmt *s, int i, const char *v) {
  return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(s, i);
}
int aa__store_bind_real0(sqlite3_stmt *s, int i, double v) {
  return v != 0 ? sqlite3_bind_double(s, i, v) : sqlite3_bind_null(s, i);
}
int aa__store_bind_int0(sqlite3_stmt *s, int i, int64_t v) {
  return v != 0 ? sqlite3_bind_int64(s, i, v) : sqlite3_bind_null(s, i);
}

const char *aa__store_col_text(sqlite3_stmt *s, int i) {
  const unsigned char *t = sqlite3_column_text(s, i);
  return t ? (const char *)t : "";
}

void aa__store_col_copy(sqlite3_stmt *s, int i, char *dst, size_t cap) {
  snprintf(dst, cap, "%s", aa__store_col_text(s, i));
}

int aa__store_set_json(unsigned set, const char *const *names, int n, const char *what, char *buf,
                       size_t cap) {
  if (n < 32 && (set >> n) != 0) return aa_error(AA_EINVAL, "%s filter: unknown value in set %#x", what, set);
  size_t used = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < n && used < cap; i++)
    if (set & AA_STORE_BIT(i))
      used += (size_t)snprintf(buf + used, cap - used, "%s\"%s\"", used > 1 ? "," : "", names[i]);
  if (used + 2 > cap) return aa_error(AA_EINTERNAL, "%s filter: set too large", what);
  snprintf(buf + used, cap - used, "]");
  return 0;
}

int64_t aa__store_now(void) { return (int64_t)time(NULL); }

int aa__store_check_key(const char *v, size_t cap, const char *what) {
  if (!v || !*v) return aa_error(AA_EINVAL, "%s must not be empty", what);
  if (strlen(v) >= cap) return aa_error(AA_EINVAL, "%s is longer than %zu characters", what, cap - 1);
  return 0;
}

/* --- schema and migrations --------------------------------------------------- */

/* migrations[v] takes a file at schema version v to v + 1. Append a step
 * for every change; never edit a step that has shipped. Each runs in one
 * transaction together with its user_version bump. */
static const char *const migrations[AA_STORE_SCHEMA_VERSION] = {
    /* 0 -> 1: the first schema. */
    "PRAGMA application_id = 1094800212;" /* AA__STORE_APP_ID */
    "CREATE TABLE models ("
    "  hash TEXT PRIMARY KEY CONSTRAINT model_hash_length CHECK (length(hash) BETWEEN 1 AND 64),"
    "  name TEXT NOT NULL DEFAULT '',"
    "  spec_json TEXT NOT NULL CONSTRAINT model_spec_is_json CHECK (json_valid(spec_json)),"
    "  params INTEGER NOT NULL DEFAULT 0 CONSTRAINT model_params_not_negative CHECK (params >= 0),"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE hardware ("
    "  fingerprint TEXT PRIMARY KEY"
    "    CONSTRAINT hardware_fingerprint_length CHECK (length(fingerprint) BETWEEN 1 AND 127),"
    "  description TEXT NOT NULL CONSTRAINT hardware_description_is_json CHECK (json_valid(description)),"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY,"
    "  model_hash TEXT NOT NULL REFERENCES models(hash),"
    "  hardware TEXT NOT NULL REFERENCES hardware(fingerprint),"
    "  status TEXT NOT NULL CONSTRAINT job_status_known CHECK (status IN"
    "    ('queued', 'running', 'done', 'failed', 'cancelled', 'interrupted')),"
    "  options_json TEXT"
    "    CONSTRAINT job_options_is_json CHECK (options_json IS NULL OR json_valid(options_json)),"
    "  best_run_id INTEGER REFERENCES runs(id),"
    "  from_store INTEGER NOT NULL DEFAULT 0 CONSTRAINT job_from_store_bool CHECK (from_store IN (0, 1)),"
    "  error TEXT,"
    "  submitted_at INTEGER NOT NULL,"
    "  started_at INTEGER,"
    "  finished_at INTEGER);"
    "CREATE TABLE runs ("
    "  id INTEGER PRIMARY KEY,"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id),"
    "  model_hash TEXT NOT NULL REFERENCES models(hash),"
    "  hardware TEXT NOT NULL REFERENCES hardware(fingerprint),"
    "  kind TEXT NOT NULL CONSTRAINT run_kind_known CHECK (kind IN ('dryrun', 'train')),"
    "  strategy_key TEXT NOT NULL CONSTRAINT run_key_not_empty CHECK (length(strategy_key) >= 1),"
    "  strategy_json TEXT NOT NULL CONSTRAINT run_strategy_is_json CHECK (json_valid(strategy_json)),"
    "  status TEXT NOT NULL CONSTRAINT run_status_known CHECK (status IN"
    "    ('queued', 'running', 'ok', 'oom', 'error', 'timeout', 'crashed', 'pruned', 'cancelled')),"
    "  tokens_per_s REAL,"
    "  step_ms_median REAL,"
    "  step_ms_spread REAL,"
    "  peak_bytes INTEGER,"
    "  peak_json TEXT CONSTRAINT run_peak_is_json CHECK (peak_json IS NULL OR json_valid(peak_json)),"
    "  predicted_tokens_per_s REAL,"
    "  final_loss REAL,"
    "  error TEXT,"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  CONSTRAINT run_ok_has_throughput CHECK (status <> 'ok' OR tokens_per_s > 0));"
    "CREATE INDEX runs_by_model_hardware_status ON runs(model_hash, hardware, status);"
    "CREATE INDEX runs_by_job ON runs(job_id);"
    "CREATE INDEX jobs_by_model_hardware ON jobs(model_hash, hardware);",
    /* 1 -> 2: how many times aa_store_recover queued a job again. */
    "ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0"
    "  CONSTRAINT job_resumes_not_negative CHECK (resumes >= 0);",
    /* 2 -> 3: every rank's own figures, not only the gang's (issue 18). The
     * time columns follow aa_proto_time_kind_t. */
    "CREATE TABLE run_ranks ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  rank INTEGER NOT NULL CONSTRAINT run_rank_in_world CHECK (rank BETWEEN 0 AND 4095),"
    "  dp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_dp_in_world CHECK (dp_rank BETWEEN 0 AND 4095),"
    "  tp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_tp_in_world CHECK (tp_rank BETWEEN 0 AND 4095),"
    "  pp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_pp_in_world CHECK (pp_rank BETWEEN 0 AND 4095),"
    "  status TEXT NOT NULL CONSTRAINT run_rank_status_known CHECK (status IN"
    "    ('ok', 'oom', 'error', 'timeout', 'crashed', 'cancelled')),"
    "  tokens_per_s REAL,"
    "  step_ms_median REAL,"
    "  step_ms_spread REAL,"
    "  forward_ms REAL,"
    "  backward_ms REAL,"
    "  optimizer_ms REAL,"
    "  pipeline_comm_ms REAL,"
    "  bubble_ms REAL,"
    "  peak_bytes INTEGER,"
    "  peak_json TEXT CONSTRAINT run_rank_peak_is_json CHECK (peak_json IS NULL OR json_valid(peak_json)),"
    "  error TEXT,"
    "  PRIMARY KEY (run_id, rank)) WITHOUT ROWID;",
    /* 3 -> 4: the cost model's memory and pipeline bubble beside its
     * tokens/s, so every run keeps what was predicted next to what was
     * measured. */
    "ALTER TABLE runs ADD COLUMN predicted_peak_bytes INTEGER"
    "  CONSTRAINT run_predicted_peak_positive CHECK (predicted_peak_bytes IS NULL OR predicted_peak_bytes > "
    "0);"
    "ALTER TABLE runs ADD COLUMN predicted_bubble REAL"
    "  CONSTRAINT run_predicted_bubble_share CHECK (predicted_bubble IS NULL OR"
    "  (predicted_bubble > 0 AND predicted_bubble < 1));",
    /* 4 -> 5: calibrations, the measurements the step-time model predicts
     * from (strategies/calib.h), one per device and process-group backend;
     * and the model's breakdown of each run's predicted step, so a run
     * shows where the prediction it was dispatched on put the time. */
    "CREATE TABLE calibrations ("
    "  device TEXT NOT NULL CONSTRAINT calibration_device_length CHECK (length(device) BETWEEN 1 AND 127),"
    "  backend TEXT NOT NULL CONSTRAINT calibration_backend_known CHECK (backend IN"
    "    ('shm', 'nccl', 'gloo', 'self')),"
    "  json TEXT NOT NULL CONSTRAINT calibration_is_json CHECK (json_valid(json)),"
    "  measured_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (device, backend));"
    "ALTER TABLE jobs ADD COLUMN note TEXT;"
    "ALTER TABLE runs ADD COLUMN predicted_json TEXT"
    "  CONSTRAINT run_predicted_is_json CHECK (predicted_json IS NULL OR json_valid(predicted_json));",
    /* 5 -> 6: a CUDA device's links between hosts, measured by NCCL gangs
     * spanning hosts, are stored under backend 'nccl-hosts'. SQLite cannot
     * change a CHECK in place: the table is copied into a new one. */
    "CREATE TABLE calibrations_6 ("
    "  device TEXT NOT NULL CONSTRAINT calibration_device_length CHECK (length(device) BETWEEN 1 AND 127),"
    "  backend TEXT NOT NULL CONSTRAINT calibration_backend_known CHECK (backend IN"
    "    ('shm', 'nccl', 'gloo', 'self', 'nccl-hosts')),"
    "  json TEXT NOT NULL CONSTRAINT calibration_is_json CHECK (json_valid(json)),"
    "  measured_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL,"
    "  PRIMARY KEY (device, backend));"
    "INSERT INTO calibrations_6 (device, backend, json, measured_at, updated_at)"
    "  SELECT device, backend, json, measured_at, updated_at FROM calibrations;"
    "DROP TABLE calibrations;"
    "ALTER TABLE calibrations_6 RENAME TO calibrations;",
    /* 6 -> 7: a rank's mesh coordinates as one JSON object keyed by axis
     * name (common/axis.h), {"data": 1, "tensor": 0, "pipeline": 0}, in
     * place of a column per axis: a new axis needs no migration. */
    "CREATE TABLE run_ranks_7 ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  rank INTEGER NOT NULL CONSTRAINT run_rank_in_world CHECK (rank BETWEEN 0 AND 4095),"
    "  coords TEXT NOT NULL DEFAULT '{}' CONSTRAINT run_rank_coords_object CHECK"
    "    (json_valid(coords) AND json_type(coords) = 'object'),"
    "  status TEXT NOT NULL CONSTRAINT run_rank_status_known CHECK (status IN"
    "    ('ok', 'oom', 'error', 'timeout', 'crashed', 'cancelled')),"
    "  tokens_per_s REAL,"
    "  step_ms_median REAL,"
    "  step_ms_spread REAL,"
    "  forward_ms REAL,"
    "  backward_ms REAL,"
    "  optimizer_ms REAL,"
    "  pipeline_comm_ms REAL,"
    "  bubble_ms REAL,"
    "  peak_bytes INTEGER,"
    "  peak_json TEXT CONSTRAINT run_rank_peak_is_json CHECK (peak_json IS NULL OR json_valid(peak_json)),"
    "  error TEXT,"
    "  PRIMARY KEY (run_id, rank)) WITHOUT ROWID;"
    "INSERT INTO run_ranks_7 (run_id, rank, coords, status, tokens_per_s, step_ms_median, step_ms_spread,"
    "  forward_ms, backward_ms, optimizer_ms, pipeline_comm_ms, bubble_ms, peak_bytes, peak_json, error)"
    "  SELECT run_id, rank, json_object('data', dp_rank, 'tensor', tp_rank, 'pipeline', pp_rank), status,"
    "  tokens_per_s, step_ms_median, step_ms_spread, forward_ms, backward_ms, optimizer_ms,"
    "  pipeline_comm_ms, bubble_ms, peak_bytes, peak_json, error FROM run_ranks;"
    "DROP TABLE run_ranks;"
    "ALTER TABLE run_ranks_7 RENAME TO run_ranks;",
    /* 7 -> 8: an MoE run's measured router load imbalance; a rank's
     * expert all-to-all time. */
    "ALTER TABLE runs ADD COLUMN moe_imbalance REAL"
    "  CONSTRAINT run_moe_imbalance_at_least_1 CHECK (moe_imbalance IS NULL OR moe_imbalance >= 1);"
    "ALTER TABLE run_ranks ADD COLUMN all_to_all_ms REAL",
};

/* The runs that can answer a job: measured dry runs of a job that ran its
 * own search to the end. An interrupted or failed search may have missed
 * the best strategy, and a live one has not finished looking. */
#define AA__ANSWERING_RUN                                                                                    \
  "status = 'ok' AND kind = 'dryrun' AND EXISTS (SELECT 1 FROM jobs WHERE jobs.id = runs.job_id"             \
  " AND jobs.status = 'done' AND jobs.from_store = 0)"

/* The statements prepared at open, indexed by AA__ST_*. */
static const char *const stmt_sql[AA__ST_N] = {
    [AA__ST_BEGIN] = "BEGIN IMMEDIATE",
    [AA__ST_COMMIT] = "COMMIT",
    [AA__ST_ROLLBACK] = "ROLLBACK",
    [AA__ST_PUT_MODEL] =
        "INSERT INTO models (hash, name, spec_json, params, created_at) VALUES (?1, ?2, ?3, ?4, ?5)"
        " ON CONFLICT (hash) DO UPDATE SET name = excluded.name,"
        " spec_json = excluded.spec_json, params = excluded.params",
    [AA__ST_PUT_HW] = "INSERT INTO hardware (fingerprint, description, created_at) VALUES (?1, ?2, ?3)"
                      " ON CONFLICT (fingerprint) DO UPDATE SET description = excluded.description",
    [AA__ST_GET_MODEL] = "SELECT hash, name, spec_json, params, created_at FROM models WHERE hash = ?1",
    [AA__ST_GET_HW] = "SELECT fingerprint, description, created_at FROM hardware WHERE fingerprint = ?1",
    [AA__ST_JOB_CREATE] = "INSERT INTO jobs (model_hash, hardware, status, options_json, submitted_at)"
                          " VALUES (?1, ?2, 'queued', ?3, ?4)",
    [AA__ST_JOB_START] = "UPDATE jobs SET status = 'running', started_at = coalesce(started_at, ?2)"
                         " WHERE id = ?1 AND status = 'queued'",
    [AA__ST_JOB_FINISH] = "UPDATE jobs SET status = ?2, best_run_id = ?3, from_store = ?4, error = ?5,"
                          " finished_at = ?6 WHERE id = ?1 AND status IN ('queued', 'running')",
    [AA__ST_JOB_NOTE] = "UPDATE jobs SET note = ?2 WHERE id = ?1",
    [AA__ST_JOB_GET] = "SELECT " AA__JOB_COLS " FROM jobs WHERE id = ?1",
    [AA__ST_JOB_STATUS] = "SELECT status FROM jobs WHERE id = ?1",
    [AA__ST_RUN_INSERT] =
        "INSERT INTO runs (job_id, model_hash, hardware, kind, strategy_key, strategy_json, status,"
        " predicted_tokens_per_s, error, started_at, finished_at, predicted_peak_bytes, predicted_bubble,"
        " predicted_json)"
        " SELECT id, model_hash, hardware, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12 FROM jobs"
        " WHERE id = ?1 AND status IN ('queued', 'running')",
    [AA__ST_RUN_START] =
        "UPDATE runs SET status = 'running', started_at = ?2 WHERE id = ?1 AND status = 'queued'",
    [AA__ST_RUN_FINISH] =
        "UPDATE runs SET status = ?2, tokens_per_s = ?3, step_ms_median = ?4,"
        " step_ms_spread = ?5, peak_bytes = ?6, peak_json = ?7, final_loss = ?8, error = ?9,"
        " finished_at = ?10, started_at = coalesce(started_at, ?10), moe_imbalance = ?11"
        " WHERE id = ?1 AND status IN ('queued', 'running')",
    [AA__ST_RANK_INSERT] =
        "INSERT INTO run_ranks (run_id, rank, coords, status, tokens_per_s, step_ms_median, step_ms_spread,"
        " forward_ms, backward_ms, optimizer_ms, pipeline_comm_ms, bubble_ms, all_to_all_ms, peak_bytes,"
        " peak_json, error)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    [AA__ST_RANKS_OF_RUN] = "SELECT " AA__RANK_COLS " FROM run_ranks WHERE run_id = ?1 ORDER BY rank",
    [AA__ST_RUN_GET] = "SELECT " AA__RUN_COLS " FROM runs WHERE id = ?1",
    [AA__ST_RUN_STATUS] = "SELECT status FROM runs WHERE id = ?1",
    [AA__ST_ANSWERS] =
        "SELECT " AA__RUN_COLS ", (SELECT options_json FROM jobs WHERE jobs.id = runs.job_id) FROM runs"
        " WHERE model_hash = ?1 AND hardware = ?2 AND " AA__ANSWERING_RUN " ORDER BY " AA__RUN_MEAN
        " DESC, tokens_per_s DESC, peak_bytes IS NULL, peak_bytes, id",
    [AA__ST_JOB_COUNTS] = "SELECT status, count(*) FROM runs WHERE job_id = ?1 GROUP BY status",
    [AA__ST_RECOVER_RUNS] = "UPDATE runs SET status = 'crashed', finished_at = ?1,"
                            " error = coalesce(error, 'the planner stopped while the run was in flight')"
                            " WHERE status = 'running'",
    [AA__ST_RECOVER_REQUEUE] = "UPDATE jobs SET status = 'queued', resumes = resumes + 1, finished_at = NULL,"
                               " best_run_id = NULL, error = NULL, note = NULL"
                               " WHERE status IN ('running', 'interrupted') AND resumes < ?1",
    [AA__ST_RECOVER_JOBS] =
        "UPDATE jobs SET status = 'interrupted', finished_at = ?1,"
        " error = coalesce(error, 'the planner stopped while the job was running')"
        " || CASE WHEN resumes = 0 THEN ''"
        " ELSE ' (resumed ' || resumes || CASE WHEN resumes = 1 THEN ' time' ELSE ' times' END"
        " || ' already: not resumed again)' END"
        " WHERE status = 'running'",
    [AA__ST_RECOVER_QUEUED] =
        "UPDATE runs SET status = 'cancelled', finished_at = ?1 WHERE status = 'queued'"
        " AND job_id IN (SELECT id FROM jobs WHERE status NOT IN ('queued', 'running'))",
    [AA__ST_CALIB_PUT] = "INSERT INTO calibrations (device, backend, json, measured_at, updated_at)"
                         " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (device, backend) DO UPDATE SET"
                         " json = excluded.json, measured_at = excluded.measured_at,"
                         " updated_at = excluded.updated_at",
    [AA__ST_CALIB_GET] = "SELECT json FROM calibrations WHERE device = ?1 AND backend = ?2",
    [AA__ST_MOE_IMBALANCE] = "SELECT avg(moe_imbalance), count(moe_imbalance) FROM runs"
                             " WHERE model_hash = ?1 AND moe_imbalance IS NOT NULL",
    [AA__ST_CALIB_LIST] = "SELECT device, backend, json, measured_at, updated_at FROM calibrations"
                          " WHERE ?1 IS NULL OR substr(device, 1, length(?1)) = ?1"
                          " ORDER BY updated_at DESC, device, backend",
};

/* Runs a one-off statement that returns a single integer (a PRAGMA or a
 * count) into *out. */
static int query_int(aa_store_t *st, const char *sql, int64_t *out) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) return aa__store_fail(st, rc, "%s", sql);
  rc = sqlite3_step(s);
  int err = 0;
  if (rc == SQLITE_ROW)
    *out = sqlite3_column_int64(s, 0);
  else
    err = aa__store_fail(st, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc, "%s", sql);
  sqlite3_finalize(s);
  return err;
}

/* Runs SQL text (several statements) with no result rows. */
static int exec_sql(aa_store_t *st, const char *sql, const char *what) {
  int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);
  return rc == SQLITE_OK ? 0 : aa__store_fail(st, rc, "%s", what);
}

/* Refuses files that are not ours before anything is written to them. */
static int check_file(aa_store_t *st) {
  int64_t version, app_id, objects;
  int err = query_int(st, "PRAGMA user_version", &version);
  if (err == AA_EFORMAT)
    return aa_error(AA_EFORMAT, "store %s: not a SQLite database (is this the right file?)", st->path);
  if (!err) err = query_int(st, "PRAGMA application_id", &app_id);
  if (!err) err = query_int(st, "SELECT count(*) FROM sqlite_schema", &objects);
  if (err) return err;
  if (app_id != 0 && app_id != AA__STORE_APP_ID)
    return aa_error(AA_EFORMAT, "store %s: a SQLite database of another application (application_id %#llx)",
                    st->path, (unsigned long long)app_id);
  if (app_id == 0 && objects > 0)
    return aa_error(AA_EFORMAT, "store %s: a SQLite database with %lld objects but no autoaccel schema",
                    st->path, (long long)objects);
  if (version > AA_STORE_SCHEMA_VERSION)
    return aa_error(AA_EUNSUPPORTED,
                    "store %s: schema version %lld is newer than this build supports (%d); "
                    "use a newer autoaccel",
                    st->path, (long long)version, AA_STORE_SCHEMA_VERSION);
  if (version < 0)
    return aa_error(AA_EFORMAT, "store %s: negative schema version %lld", st->path, (long long)version);
  st->version = (int)version;
  return 0;
}

/* Applies migrations from the file's version to the newest. The version is
 * read again inside each write transaction, so two processes opening a new
 * file at once migrate it once. */
static int migrate(aa_store_t *st) {
  for (;;) {
    int64_t v;
    int err = exec_sql(st, "BEGIN IMMEDIATE", "begin migration");
    if (err) return err;
    err = query_int(st, "PRAGMA user_version", &v);
    if (!err && v >= AA_STORE_SCHEMA_VERSION) {
      err = exec_sql(st, "COMMIT", "commit");
      st->version = (int)v;
      return err;
    }
    char bump[64];
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", (int)v + 1);
    if (!err) err = exec_sql(st, migrations[v], "migrate schema");
    if (!err) err = exec_sql(st, bump, "set schema version");
    if (!err) err = exec_sql(st, "COMMIT", "commit migration");
    if (err) {
      aa_error_wrap(err, "schema version %d -> %d", (int)v, (int)v + 1);
      sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
      return err;
    }
  }
}

/* WAL: readers (`autoaccel query`) never block the planner's writes nor
 * wait for them. synchronous=NORMAL: a commit is in the WAL file (the OS
 * page cache) when COMMIT returns, so it survives a kill -9 of the planner;
 * only a power loss or an OS crash can drop the last commits, never corrupt
 * the file, and each commit then costs no fsync on the loop thread. */
static int set_pragmas(aa_store_t *st) {
  int err = exec_sql(st, "PRAGMA foreign_keys = ON", "foreign_keys");
  if (err || st->readonly) return err;
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) {
    err = aa__store_fail(st, rc, "journal_mode = WAL");
  } else if (strcmp(aa__store_col_text(s, 0), "wal") != 0) {
    err = aa_error(AA_EIO, "store %s: cannot use WAL mode (journal_mode stays %s)", st->path,
                   aa__store_col_text(s, 0));
  }
  sqlite3_finalize(s);
  if (!err) err = exec_sql(st, "PRAGMA synchronous = NORMAL", "synchronous");
  return err;
}

/* --- file permissions (read-write opens) ------------------------------------------ */

/* Writes "alice (uid 1000)", or "uid 1000" for a user without a name. */
static const char *owner_name(uid_t uid, char *buf, size_t cap) {
  struct passwd pw, *found = NULL;
  char tmp[1024];
  if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &found) == 0 && found)
    snprintf(buf, cap, "%s (uid %u)", found->pw_name, (unsigned)uid);
  else
    snprintf(buf, cap, "uid %u", (unsigned)uid);
  return buf;
}

/* One of the store's three files (the database, -wal, -shm) as checked
 * before SQLite opens them: its descriptor (-1 when it does not exist) and
 * what fstat said of that very file. */
typedef struct {
  const char *path;
  int fd;
  struct stat sb;
} store_file_t;

/* Opens `f->path` for its checks without following a symbolic link and
 * without blocking (aa_file_open_regular): a link, a FIFO or a directory
 * planted at a store's name is refused before anything is done to it. A
 * missing file leaves f->fd at -1. */
static int open_store_file(const aa_store_t *st, store_file_t *f) {
  f->fd = -1;
  int rc = aa_file_open_regular(&f->fd, &f->sb, "store file", f->path, O_RDONLY);
  if (rc == AA_ENOENT) return 0;
  return rc ? aa_error_wrap(rc, "store %s", st->path) : 0;
}

/* Opens the database file for its checks, creating it with mode 0600 when
 * it is missing, so that the store is never readable by others, not even
 * for the moment a chmod after SQLite's creation would leave (SQLite then
 * creates the -wal and -shm files with the database file's mode). */
static int open_database(const aa_store_t *st, store_file_t *db) {
  for (int tries = 0; tries < 3; tries++) {
    int err = open_store_file(st, db);
    if (err || db->fd >= 0) return err;
    int fd = open(db->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      db->fd = fd;
      if (fstat(fd, &db->sb) == 0) return 0;
      return aa_error(AA_EIO, "store %s: cannot stat it: %s", st->path, strerror(errno));
    }
    if (errno != EEXIST) /* else made meanwhile by another process: open that one */
      return aa_error(errno == ENOENT || errno == ENOTDIR ? AA_ENOENT : AA_EIO,
                      "store %s: cannot create it: %s", st->path, strerror(errno));
  }
  return aa_error(AA_EIO, "store %s: it keeps appearing and vanishing; is another process replacing it?",
                  st->path);
}

/* Refuses a database file that is not SQLite before anything is done to it
 * (its mode included). An empty file is a new store, or one whose pages
 * are all still in its -wal. */
static int check_database_header(const aa_store_t *st, const store_file_t *db) {
  static const char magic[16] = "SQLite format 3"; /* with its NUL: the format's first 16 bytes */
  if (db->sb.st_size == 0) return 0;
  char head[sizeof magic];
  ssize_t n = pread(db->fd, head, sizeof head, 0);
  if (n < 0) return aa_error(AA_EIO, "store %s: cannot read it: %s", st->path, strerror(errno));
  if (n < (ssize_t)sizeof head || memcmp(head, magic, sizeof magic))
    return aa_error(AA_EFORMAT, "store %s: not a SQLite database (is this the right file?)", st->path);
  return 0;
}

/* Refuses a journal file (PATH-wal or PATH-shm) that SQLite could not
 * write, such as a 0444 one a failed start left: SQLite would open it
 * read-only and every write would fail with "attempt to write a readonly
 * database", naming no file. The mode is checked as well as a write open:
 * root may open a 0444 file for writing. */
static int check_journal(const aa_store_t *st, const store_file_t *f, int is_wal) {
  if (f->fd < 0) return 0;
  int w = -1;
  if ((f->sb.st_mode & S_IWUSR) &&
      (w = open(f->path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)) >= 0) {
    close(w);
    return 0;
  }
  char owner[160];
  owner_name(f->sb.st_uid, owner, sizeof owner);
  unsigned mode = (unsigned)(f->sb.st_mode & 07777);
  if (is_wal)
    return aa_error(AA_EIO,
                    "store %s: %s is not writable (mode %04o, owner %s); run chmod 600 %s "
                    "(do not remove it: it may hold commits not yet copied into the database)",
                    st->path, f->path, mode, owner, f->path);
  return aa_error(AA_EIO,
                  "store %s: %s is not writable (mode %04o, owner %s); if no planner is running, "
                  "remove it (SQLite recreates it) or run chmod 600 %s",
                  st->path, f->path, mode, owner, f->path);
}

/* Takes group and other access away from a store file this process owns
 * (0644 -> 0600: the owner's bits are kept, never added to), through the
 * descriptor its checks were made on. A file of another user that others
 * may read is refused: the process cannot fix it, and the store must not
 * stay readable. A missing file is fine. */
static int tighten(const aa_store_t *st, const store_file_t *f) {
  if (f->fd < 0 || (f->sb.st_mode & (S_IRWXG | S_IRWXO)) == 0) return 0;
  unsigned mode = (unsigned)(f->sb.st_mode & 07777);
  if (f->sb.st_uid != geteuid()) {
    char owner[160];
    return aa_error(AA_EPERM,
                    "store %s: %s is open to group or others (mode %04o) and belongs to %s, not to this "
                    "process (uid %u); its owner should run chmod 600 %s",
                    st->path, f->path, mode, owner_name(f->sb.st_uid, owner, sizeof owner),
                    (unsigned)geteuid(), f->path);
  }
  if (fchmod(f->fd, f->sb.st_mode & (S_IRUSR | S_IWUSR)) != 0)
    return aa_error(AA_EIO, "store %s: chmod %s (mode %04o): %s", st->path, f->path, mode, strerror(errno));
  return 0;
}

/* Before a read-write open (the contract in store.h): each of the three
 * files opened without following a link, the database created 0600 when
 * missing, every file checked (a regular file; the database is SQLite; the
 * journals writable), and only then the modes narrowed, on the
 * descriptors that were checked. SQLite itself is then asked not to
 * follow a link (SQLITE_OPEN_NOFOLLOW), and it opens the journals with
 * O_NOFOLLOW. */
static int prepare_files(const aa_store_t *st) {
  char wal[PATH_MAX + 8], shm[PATH_MAX + 8];
  if (snprintf(wal, sizeof wal, "%s-wal", st->path) >= (int)sizeof wal)
    return aa_error(AA_EINVAL, "store %s: path too long", st->path);
  snprintf(shm, sizeof shm, "%s-shm", st->path);
  store_file_t f[3] = {{.path = st->path, .fd = -1}, {.path = wal, .fd = -1}, {.path = shm, .fd = -1}};
  int err = open_database(st, &f[0]);
  if (!err) err = open_store_file(st, &f[1]);
  if (!err) err = open_store_file(st, &f[2]);
  if (!err) err = check_database_header(st, &f[0]);
  if (!err) err = check_journal(st, &f[1], 1);
  if (!err) err = check_journal(st, &f[2], 0);
  for (int i = 0; i < 3 && !err; i++)
    err = tighten(st, &f[i]);
  for (int i = 0; i < 3; i++)
    if (f[i].fd >= 0) close(f[i].fd);
  return err;
}

/* --- open, close, recover ----------------------------------------------------------- */

int aa_store_open(aa_store_t **out, const char *path, int flags) {
  if (!path || !*path) return aa_error(AA_EINVAL, "store: empty path");
  aa_store_t *st = calloc(1, sizeof *st);
  if (!st || !(st->path = strdup(path))) {
    free(st);
    return aa_error(AA_ENOMEM, "store %s: out of memory", path);
  }
  st->readonly = (flags & AA_STORE_READONLY) != 0;
  int err = 0;
  struct stat sb;
  if (st->readonly && lstat(path, &sb) != 0) {
    err = aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "store %s: %s", path, strerror(errno));
    goto cleanup;
  }
  if (st->readonly && S_ISLNK(sb.st_mode)) {
    err = aa_error(AA_EIO, "store %s is a symbolic link, which autoaccel does not follow to its state files",
                   path);
    goto cleanup;
  }
  if (!st->readonly && (err = prepare_files(st))) goto cleanup;
  int oflags = SQLITE_OPEN_NOFOLLOW |
               (st->readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  int rc = sqlite3_open_v2(path, &st->db, oflags, NULL);
  if (rc != SQLITE_OK) {
    err = aa__store_fail(st, rc, "open");
    goto cleanup;
  }
  sqlite3_busy_timeout(st->db, AA_STORE_BUSY_MS);
  sqlite3_extended_result_codes(st->db, 1);
  err = check_file(st);
  if (!err) err = set_pragmas(st);
  if (!err && st->version < AA_STORE_SCHEMA_VERSION) {
    if (st->readonly)
      err = aa_error(AA_EUNSUPPORTED,
                     "store %s: schema version %d is older than this build's (%d); "
                     "open it read-write once (the planner does) to migrate it",
                     path, st->version, AA_STORE_SCHEMA_VERSION);
    else
      err = migrate(st);
  }
  for (int i = 0; !err && i < AA__ST_N; i++) {
    rc = sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->st[i], NULL);
    if (rc != SQLITE_OK) err = aa__store_fail(st, rc, "prepare \"%.60s\"", stmt_sql[i]);
  }
cleanup:
  if (err) {
    aa_store_close(st);
    return err;
  }
  *out = st;
  return 0;
}

void aa_store_close(aa_store_t *st) {
  if (!st) return;
  for (int i = 0; i < AA__ST_N; i++)
    sqlite3_finalize(st->st[i]);
  for (int i = 0; i < AA__JOBQ_N; i++)
    sqlite3_finalize(st->jobq[i]);
  for (int i = 0; i < AA__RUNQ_N; i++)
    sqlite3_finalize(st->runq[i]);
  sqlite3_close(st->db);
  free(st->path);
  free(st);
}

int aa_store_schema_version(const aa_store_t *st) { return st->version; }

/* Runs one recovery UPDATE with ?1 bound to v; *changed (may be NULL)
 * gets the number of rows it changed. */
static int recover_step(aa_store_t *st, int which, int64_t v, const char *what, int *changed) {
  sqlite3_stmt *s = st->st[which];
  sqlite3_bind_int64(s, 1, v);
  int err = aa__store_exec(st, s, what);
  if (!err && changed) *changed = sqlite3_changes(st->db);
  return err;
}

int aa_store_recover(aa_store_t *st, int max_resumes, aa_store_recovery_t *out) {
  if (max_resumes < 0)
    return aa_error(AA_EINVAL, "store %s: recover: negative max_resumes %d", st->path, max_resumes);
  aa_store_recovery_t n = {0};
  int64_t now = aa__store_now();
  int err = aa__store_begin(st);
  if (err) return err;
  /* Runs first, so a re-queued job finds its in-flight runs crashed; the
   * orphaned queued runs last, once the jobs' statuses are final. */
  err = recover_step(st, AA__ST_RECOVER_RUNS, now, "crash running runs", &n.runs_crashed);
  if (!err) err = recover_step(st, AA__ST_RECOVER_REQUEUE, max_resumes, "queue jobs again", &n.jobs_requeued);
  if (!err) err = recover_step(st, AA__ST_RECOVER_JOBS, now, "interrupt running jobs", &n.jobs_interrupted);
  if (!err) err = recover_step(st, AA__ST_RECOVER_QUEUED, now, "cancel orphaned runs", NULL);
  if (!err) err = aa__store_commit(st);
  if (err) {
    aa__store_rollback(st);
    return err;
  }
  if (out) *out = n;
  return 0;
}

/* --- the WAL ------------------------------------------------------------------------ */

uint64_t aa_store_io_failures(const aa_store_t *st, bool *failing) {
  if (failing) *failing = st->io_failing;
  return st->io_failures;
}

int aa_store_wal_bytes(aa_store_t *st, int64_t *bytes) {
  /* SQLite's own name for the file: the database path as it resolved it,
   * plus "-wal". */
  const char *db = sqlite3_db_filename(st->db, "main");
  const char *wal = db && *db ? sqlite3_filename_wal(db) : NULL;
  if (!wal || !*wal) return aa_error(AA_EINTERNAL, "store %s: SQLite names no WAL file", st->path);
  struct stat sb;
  if (lstat(wal, &sb) != 0) {
    if (errno != ENOENT) return aa_error(AA_EIO, "store %s: %s: %s", st->path, wal, strerror(errno));
    sb.st_size = 0; /* none yet, or removed by the last connection's close */
  }
  *bytes = (int64_t)sb.st_size;
  return 0;
}

int aa_store_checkpoint(aa_store_t *st, int64_t *wal_before, int64_t *wal_after) {
  if (st->readonly) return aa_error(AA_EINVAL, "store %s: checkpoint: the store is open read-only", st->path);
  int64_t before, after;
  int err = aa_store_wal_bytes(st, &before);
  if (err) return err;
  /* TRUNCATE waits through the busy handler for readers of older
   * snapshots and for a writer; with the store's timeout that could hold
   * the caller (the planner's loop) for AA_STORE_BUSY_MS. Without one it
   * copies what it can now and says SQLITE_BUSY, and the caller tries
   * again later. */
  sqlite3_busy_timeout(st->db, 0);
  int rc = sqlite3_wal_checkpoint_v2(st->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
  sqlite3_busy_timeout(st->db, AA_STORE_BUSY_MS);
  if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY) return aa__store_fail(st, rc, "checkpoint the WAL");
  if ((err = aa_store_wal_bytes(st, &after))) return err;
  if (wal_before) *wal_before = before;
  if (wal_after) *wal_after = after;
  return rc == SQLITE_OK ? 0 : 1;
}
