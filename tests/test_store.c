/* The planner's SQLite store (planner/store*.c): schema creation and
 * versioning (with a migration from version 1), file permissions, refusal
 * of foreign files and of journal files it cannot write,
 * models/hardware/jobs/runs, the best run and answer-from-store rules,
 * recovery and resumption after a crash, durability across a SIGKILL,
 * the WAL's checkpoint and the count of writes the disk refused,
 * query filters, paging, unreadable rows and the schema's CHECK
 * constraints. Every test works in its own fresh file under one temporary
 * directory. */
#include "common/aa.h"
#include "planner/store.h"
#include "strategies/strategy.h"
#include "tests/aa_test.h"

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MODEL "f75588f44838cacd"
#define HW "cpu:2x Test CPU"
#define HW2 "cuda:1x Test GPU"

static char tmp_dir[256];
static int db_counter;

/* The path of the latest fresh database (fresh_path, fresh_store). */
static void cur_path(char out[512]) { snprintf(out, 512, "%s/store%d.db", tmp_dir, db_counter); }

/* A fresh database path in the temporary directory; valid until the next
 * call. */
static const char *fresh_path(void) {
  static char buf[512];
  ++db_counter;
  cur_path(buf);
  return buf;
}

/* Opens a fresh store with one model and two hardware fingerprints; NULL
 * (and a failed check) on error. */
static aa_store_t *fresh_store(void) {
  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, fresh_path(), 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return NULL;
  rc = aa_store_put_model(st, MODEL, "tiny", "{\"model\": {\"n_layer\": 2}}", 1000);
  if (!rc) rc = aa_store_put_hardware(st, HW, "{\"devices\": [\"cpu\"]}");
  if (!rc) rc = aa_store_put_hardware(st, HW2, "{\"devices\": [\"cuda:0\"]}");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return st;
}

static aa_strategy_t strat(int zero, aa_dtype_t amp, int mb) {
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.zero = zero;
  s.amp = amp;
  s.micro_batch = mb;
  return s;
}

static int64_t new_job(aa_store_t *st, const char *hw) {
  int64_t id = 0;
  int rc = aa_store_job_create(st, MODEL, hw, "{\"refresh\": false}", &id);
  CHECK_MSG(rc == 0 && id > 0, "%s", aa_last_error());
  return id;
}

/* The runs that may answer a job of (MODEL, hw), best first: their ids (the
 * first 32), how many, and the options of the job that measured the best. */
typedef struct {
  int n;
  int64_t ids[32];
  char options[256];
} answers_t;

static int collect_answer(const aa_store_run_t *r, const char *options, void *data) {
  answers_t *a = data;
  if (a->n == 0) snprintf(a->options, sizeof a->options, "%s", options);
  if (a->n < 32) a->ids[a->n] = r->id;
  a->n++;
  return 0;
}

static answers_t answers(aa_store_t *st, const char *hw) {
  answers_t a = {0};
  int rc = aa_store_answers(st, MODEL, hw, collect_answer, &a);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return a;
}

/* Inserts a run of job_id and finishes it with status and measurements
 * (status queued/running/pruned: inserted only). Returns its id. */
static int64_t add_run(aa_store_t *st, int64_t job_id, aa_store_run_kind_t kind, int mb,
                       aa_store_run_status_t status, double tps, int64_t peak) {
  aa_strategy_t s = strat(0, AA_F32, mb);
  int inserted_only =
      status == AA_STORE_RUN_QUEUED || status == AA_STORE_RUN_RUNNING || status == AA_STORE_RUN_PRUNED;
  aa_store_run_new_t nr = {.job_id = job_id,
                           .kind = kind,
                           .strategy = &s,
                           .status = inserted_only ? status : AA_STORE_RUN_RUNNING,
                           .predicted_tokens_per_s = 50,
                           .error = status == AA_STORE_RUN_PRUNED ? "predicted out of memory" : NULL};
  int64_t id = 0;
  int rc = aa_store_run_insert(st, &nr, &id);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc || inserted_only) return id;
  aa_store_run_result_t res = {
      .status = status, .tokens_per_s = tps, .step_ms_median = 10, .step_ms_spread = 1, .peak_bytes = peak};
  rc = aa_store_run_finish(st, id, &res);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return id;
}

/* Runs one SQL statement on the file through a separate connection;
 * returns the SQLite code and copies the message into msg. */
static int raw_sql(const char *path, const char *sql, char *msg, size_t cap) {
  sqlite3 *db = NULL;
  int rc = sqlite3_open(path, &db);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  if (msg) snprintf(msg, cap, "%s", sqlite3_errmsg(db));
  sqlite3_close(db);
  return rc;
}

/* Writes past the CHECK constraints, as a manual edit or corruption would. */
static void force_sql(const char *path, const char *fmt, long long id) {
  char sql[256], msg[256];
  char stmt[160];
  snprintf(stmt, sizeof stmt, fmt, id);
  snprintf(sql, sizeof sql, "PRAGMA ignore_check_constraints = ON; %s", stmt);
  int rc = raw_sql(path, sql, msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s: %s", stmt, msg);
}

/* One text value of a query on the file, through a separate connection. */
static void raw_text(const char *path, const char *sql, char *out, size_t cap) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  out[0] = '\0';
  if (sqlite3_open(path, &db) == SQLITE_OK && sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(db);
}

/* Collects the ids of a walk (the first 32), stopping it with 42 after
 * stop_after rows. */
typedef struct {
  int n;
  int64_t ids[32];
  int stop_after; /* 0 = never */
} collected_t;

static int collect_runs(const aa_store_run_t *r, void *data) {
  collected_t *c = data;
  if (c->n < 32) c->ids[c->n] = r->id;
  c->n++;
  return c->stop_after && c->n >= c->stop_after ? 42 : 0;
}

static int stop_at_first_rank(const aa_store_run_rank_t *k, void *data) {
  (void)k;
  (void)data;
  return 7;
}

static int count_ranks(const aa_store_run_rank_t *k, void *data) {
  (void)k;
  ++*(int *)data;
  return 0;
}

/* The ranks a walk gave, copied (the strings into fixed buffers). */
typedef struct {
  int n;
  aa_store_run_rank_t k[8];
  char peak[8][128], error[8][128];
} ranks_t;

static int collect_ranks(const aa_store_run_rank_t *k, void *data) {
  ranks_t *c = data;
  if (c->n == 8) return 1;
  c->k[c->n] = *k;
  snprintf(c->peak[c->n], sizeof c->peak[c->n], "%s", k->peak_json);
  snprintf(c->error[c->n], sizeof c->error[c->n], "%s", k->error);
  c->k[c->n].peak_json = c->peak[c->n];
  c->k[c->n].error = c->error[c->n];
  c->n++;
  return 0;
}

/* --- opening, versions, foreign files ---------------------------------------------------- */

AA_TEST(open_creates_the_newest_schema_in_wal_mode) {
  const char *path = fresh_path();
  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(aa_store_schema_version(st) == AA_STORE_SCHEMA_VERSION);
  CHECK(AA_STORE_SCHEMA_VERSION == 8);
  char v[64];
  raw_text(path, "PRAGMA journal_mode", v, sizeof v);
  CHECK_MSG(strcmp(v, "wal") == 0, "journal_mode %s", v);
  raw_text(path, "PRAGMA user_version", v, sizeof v);
  CHECK(strcmp(v, "8") == 0);
  raw_text(path,
           "SELECT count(*) FROM pragma_table_info('runs') WHERE name IN ('predicted_peak_bytes', "
           "'predicted_bubble', 'predicted_json', 'moe_imbalance')",
           v, sizeof v);
  CHECK(strcmp(v, "4") == 0);
  raw_text(path, "SELECT count(*) FROM pragma_table_info('jobs') WHERE name = 'resumes'", v, sizeof v);
  CHECK(strcmp(v, "1") == 0);
  raw_text(path, "PRAGMA application_id", v, sizeof v);
  CHECK_MSG(strcmp(v, "1094800212") == 0, "application_id %s", v);
  raw_text(path,
           "SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_schema WHERE type = 'table' "
           "ORDER BY name)",
           v, sizeof v);
  CHECK_MSG(strcmp(v, "calibrations,hardware,jobs,models,run_ranks,runs") == 0, "tables %s", v);
  raw_text(path,
           "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name IN "
           "('runs_by_model_hardware_status', 'runs_by_job')",
           v, sizeof v);
  CHECK(strcmp(v, "2") == 0);
  aa_store_close(st);
}

AA_TEST(reopen_keeps_data) {
  const char *p = fresh_path();
  char path[512];
  snprintf(path, sizeof path, "%s", p);
  aa_store_t *st = NULL;
  int64_t job = 0;
  int rc = aa_store_open(&st, path, 0);
  if (!rc) rc = aa_store_put_model(st, MODEL, "tiny", "{}", 7);
  if (!rc) rc = aa_store_put_hardware(st, HW, "{}");
  if (!rc) rc = aa_store_job_create(st, MODEL, HW, NULL, &job);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  aa_store_close(st);
  st = NULL;
  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  aa_store_job_t j;
  rc = aa_store_job_get(st, job, &j);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!rc) {
    CHECK(strcmp(j.model_hash, MODEL) == 0 && strcmp(j.hardware, HW) == 0);
    CHECK(j.status == AA_STORE_JOB_QUEUED && strcmp(j.options_json, "") == 0);
    aa_store_job_clear(&j);
  }
  aa_store_close(st);
  /* A reader opens it read-only alongside. */
  rc = aa_store_open(&st, path, AA_STORE_READONLY);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  aa_store_model_t m;
  rc = aa_store_model_get(st, MODEL, &m);
  CHECK_MSG(rc == 0 && m.params == 7, "%s", aa_last_error());
  if (!rc) aa_store_model_clear(&m);
  CHECK_ERR(aa_store_put_hardware(st, HW2, "{}"), AA_EIO, "readonly");
  aa_store_close(st);
}

AA_TEST(newer_schema_version_is_refused) {
  const char *p = fresh_path();
  char path[512];
  snprintf(path, sizeof path, "%s", p);
  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  aa_store_close(st);
  CHECK(raw_sql(path, "PRAGMA user_version = 9", NULL, 0) == SQLITE_OK);
  st = (aa_store_t *)&rc; /* must stay untouched */
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EUNSUPPORTED,
            "schema version 9 is newer than this build supports (8)");
  CHECK(st == (aa_store_t *)&rc);
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EUNSUPPORTED, "newer");
}

AA_TEST(file_that_is_not_sqlite_is_refused_and_left_alone) {
  const char *path = fresh_path();
  char text[2048];
  memset(text, 'x', sizeof text);
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(text, 1, sizeof text, f) == sizeof text);
  if (f) fclose(f);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EFORMAT, "not a SQLite database");
  CHECK(st == NULL);
  char back[sizeof text + 1];
  f = fopen(path, "rb");
  size_t n = f ? fread(back, 1, sizeof back, f) : 0;
  if (f) fclose(f);
  CHECK(n == sizeof text && memcmp(back, text, n) == 0);
}

/* The mode of a file that is not a store is not the planner's business: it
 * is checked first, and left as it was (0644 stays 0644). */
AA_TEST(a_file_that_is_not_sqlite_keeps_its_mode) {
  const char *path = fresh_path();
  FILE *f = fopen(path, "wb");
  CHECK(f && fputs("notes, not a store\n", f) >= 0);
  if (f) fclose(f);
  CHECK(chmod(path, 0644) == 0);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EFORMAT, "not a SQLite database");
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 07777) == 0644);
}

/* A link at any of the store's three names, planted where the store is
 * kept (a shared --store directory), is refused: neither its target's mode
 * nor its content changes, for a read-write or a read-only open. A FIFO at
 * the store's name is refused at once, not waited on. */
AA_TEST(links_and_fifos_at_the_store_names_are_refused_and_their_targets_untouched) {
  const char *path = fresh_path();
  char victim[528], wal[520];
  snprintf(victim, sizeof victim, "%s.victim", path);
  snprintf(wal, sizeof wal, "%s-wal", path);
  FILE *f = fopen(victim, "wb");
  CHECK(f && fputs("somebody's notes\n", f) >= 0);
  if (f) fclose(f);
  CHECK(chmod(victim, 0644) == 0);
  CHECK(symlink(victim, path) == 0);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EIO, "is a symbolic link");
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EIO, "is a symbolic link");
  struct stat sb;
  CHECK(stat(victim, &sb) == 0 && (sb.st_mode & 07777) == 0644 && sb.st_size == 17);
  CHECK(unlink(path) == 0);

  /* The store itself is fine; a link at its -wal is not followed either. */
  CHECK(aa_store_open(&st, path, 0) == 0);
  aa_store_close(st);
  st = NULL;
  CHECK(symlink(victim, wal) == 0);
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EIO, "-wal is a symbolic link");
  CHECK(stat(victim, &sb) == 0 && (sb.st_mode & 07777) == 0644 && sb.st_size == 17);
  CHECK(unlink(wal) == 0);

  CHECK(unlink(path) == 0 && mkfifo(path, 0600) == 0);
  double t0 = aa_now();
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EIO, "is a FIFO");
  CHECK_MSG(aa_now() - t0 < 1.0, "refusing a FIFO took %.1f s", aa_now() - t0);
  CHECK(st == NULL);
  unlink(path);
  unlink(victim);
}

AA_TEST(database_of_another_application_is_refused) {
  const char *path = fresh_path();
  CHECK(raw_sql(path, "CREATE TABLE photos (id INTEGER)", NULL, 0) == SQLITE_OK);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EFORMAT, "no autoaccel schema");
  CHECK(raw_sql(path, "PRAGMA application_id = 7", NULL, 0) == SQLITE_OK);
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EFORMAT, "another application");
  CHECK(st == NULL);
}

AA_TEST(readonly_open_of_a_missing_file_fails) {
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, fresh_path(), AA_STORE_READONLY), AA_ENOENT, "No such file");
  CHECK(st == NULL);
}

AA_TEST(readonly_open_of_an_unmigrated_file_asks_for_a_migration) {
  const char *path = fresh_path();
  FILE *f = fopen(path, "wb"); /* an empty file is an empty SQLite database at version 0 */
  CHECK(f != NULL);
  if (f) fclose(f);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EUNSUPPORTED, "older than this build's (8)");
  CHECK(st == NULL);
  CHECK_MSG(aa_store_open(&st, path, 0) == 0, "%s", aa_last_error());
  CHECK(st && aa_store_schema_version(st) == 8);
  aa_store_close(st);
}

AA_TEST(a_held_write_lock_fails_a_write_after_the_busy_timeout_but_not_reads) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512];
  cur_path(path);
  sqlite3 *other = NULL;
  CHECK(sqlite3_open(path, &other) == SQLITE_OK);
  CHECK(sqlite3_exec(other, "BEGIN IMMEDIATE; INSERT INTO hardware VALUES ('held', '{}', 0)", NULL, NULL,
                     NULL) == SQLITE_OK);
  double t0 = aa_now();
  CHECK_ERR(aa_store_put_hardware(st, "blocked", "{}"), AA_EIO, "write lock for over 2000 ms");
  double waited = aa_now() - t0;
  CHECK_MSG(waited >= 1.5 && waited < 10, "waited %.2f s", waited);
  t0 = aa_now();
  CHECK(answers(st, HW).n == 0); /* WAL: readers do not wait */
  CHECK(aa_now() - t0 < 0.5);
  CHECK(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(other);
  CHECK_MSG(aa_store_put_hardware(st, "blocked", "{}") == 0, "%s", aa_last_error());
  aa_store_hardware_t h;
  CHECK(aa_store_hardware_get(st, "held", &h) == 0);
  aa_store_hardware_clear(&h);
  aa_store_close(st);
}

/* --- file permissions and journal files ------------------------------------------------ */

/* The permission bits of a file; -1 if it cannot be stat'ed. */
static int file_mode(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
}

/* Creates an empty file with the given mode. */
static void make_file(const char *path, mode_t mode) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) fclose(f);
  CHECK(chmod(path, mode) == 0);
}

/* The path of the latest fresh store and of its journal files. */
static void store_files(char path[512], char wal[520], char shm[520]) {
  cur_path(path);
  snprintf(wal, 520, "%s-wal", path);
  snprintf(shm, 520, "%s-shm", path);
}

AA_TEST(a_new_store_and_its_journal_files_are_private) {
  mode_t old = umask(022); /* the usual umask, under which SQLite alone creates 0644 files */
  fresh_path();
  char path[512], wal[520], shm[520];
  store_files(path, wal, shm);
  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, path, 0);
  if (!rc) rc = aa_store_put_hardware(st, HW, "{}"); /* a write: the -wal and -shm files exist */
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK_MSG(file_mode(path) == 0600, "db mode %o", file_mode(path));
  CHECK_MSG(file_mode(wal) == 0600, "wal mode %o", file_mode(wal));
  CHECK_MSG(file_mode(shm) == 0600, "shm mode %o", file_mode(shm));
  aa_store_close(st);
  umask(old);
}

AA_TEST(open_tightens_store_files_that_group_or_others_can_read) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512], wal[520], shm[520];
  store_files(path, wal, shm);
  /* A second connection keeps the -wal and -shm files after the store closes. */
  sqlite3 *other = NULL;
  CHECK(sqlite3_open(path, &other) == SQLITE_OK);
  CHECK(sqlite3_exec(other, "SELECT count(*) FROM jobs", NULL, NULL, NULL) == SQLITE_OK);
  aa_store_close(st);
  const char *files[] = {path, wal, shm};
  for (int i = 0; i < 3; i++)
    CHECK_MSG(chmod(files[i], 0644) == 0, "chmod %s", files[i]);

  /* A reader changes nothing. */
  int rc = aa_store_open(&st, path, AA_STORE_READONLY);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!rc) aa_store_close(st);
  for (int i = 0; i < 3; i++)
    CHECK_MSG(file_mode(files[i]) == 0644, "%s: %o", files[i], file_mode(files[i]));

  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!rc) aa_store_close(st);
  for (int i = 0; i < 3; i++)
    CHECK_MSG(file_mode(files[i]) == 0600, "%s: %o", files[i], file_mode(files[i]));

  /* Another user's file that others can read is refused and left as it is. */
  if (geteuid() == 0) {
    CHECK(chmod(path, 0644) == 0 && chown(path, 65534, 65534) == 0);
    st = NULL;
    CHECK_ERR(aa_store_open(&st, path, 0), AA_EPERM, "uid 65534");
    char needle[64];
    snprintf(needle, sizeof needle, "store%d.db is open to group or others (mode 0644)", db_counter);
    CHECK_MSG(strstr(aa_last_error(), needle), "%s", aa_last_error());
    CHECK(st == NULL && file_mode(path) == 0644);
    CHECK(chown(path, 0, 0) == 0);
  } else {
    fprintf(stderr, "  (not root: the file of another user is not checked)\n");
  }
  sqlite3_close(other);
}

AA_TEST(a_journal_file_the_planner_cannot_write_is_named_with_the_fix) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512], wal[520], shm[520];
  store_files(path, wal, shm);
  aa_store_close(st); /* the last connection: SQLite removes the -wal and -shm files */
  CHECK(file_mode(shm) == -1 && file_mode(wal) == -1);

  /* What a failed start can leave behind. */
  make_file(shm, 0444);
  char needle[96];
  snprintf(needle, sizeof needle, "store%d.db-shm is not writable (mode 0444", db_counter);
  st = NULL;
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EIO, needle);
  CHECK_MSG(strstr(aa_last_error(), "remove it (SQLite recreates it) or run chmod 600 "), "%s",
            aa_last_error());
  CHECK(st == NULL && file_mode(shm) == 0444);
  CHECK(chmod(shm, 0600) == 0);
  int rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!rc) aa_store_close(st);

  /* A -wal file may hold commits: the advice is chmod, never remove. */
  make_file(wal, 0444);
  snprintf(needle, sizeof needle, "store%d.db-wal is not writable (mode 0444", db_counter);
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EIO, needle);
  CHECK_MSG(strstr(aa_last_error(), "run chmod 600 ") && strstr(aa_last_error(), "do not remove it"), "%s",
            aa_last_error());
  CHECK(unlink(wal) == 0);

  unlink(shm);
  CHECK(mkdir(shm, 0700) == 0);
  CHECK_ERR(aa_store_open(&st, path, 0), AA_EIO, "-shm is a directory");
  CHECK(rmdir(shm) == 0);

  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  aa_store_model_t m;
  CHECK(aa_store_model_get(st, MODEL, &m) == 0);
  aa_store_model_clear(&m);
  aa_store_close(st);
}

/* Schema version 1 as it shipped (migrations[0] in planner/store.c), to
 * build a store of the previous version by hand. */
static const char schema_v1[] =
    "PRAGMA application_id = 1094800212;"
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
    "CREATE INDEX jobs_by_model_hardware ON jobs(model_hash, hardware);";

AA_TEST(a_schema_version_1_store_migrates_to_the_newest_and_keeps_its_rows) {
  char path[512];
  snprintf(path, sizeof path, "%s", fresh_path());
  char msg[256];
  int rc = raw_sql(path, schema_v1, msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  rc =
      raw_sql(path,
              "INSERT INTO models VALUES ('" MODEL "', 'tiny', '{}', 1, 100);"
              "INSERT INTO hardware VALUES ('" HW "', '{}', 100);"
              "INSERT INTO jobs (id, model_hash, hardware, status, submitted_at, started_at)"
              "  VALUES (1, '" MODEL "', '" HW "', 'running', 100, 101);"
              "INSERT INTO runs (id, job_id, model_hash, hardware, kind, strategy_key, strategy_json, status,"
              "  tokens_per_s) VALUES (1, 1, '" MODEL "', '" HW "', 'dryrun', 'k', '{}', 'ok', 10);"
              "PRAGMA user_version = 1;",
              msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EUNSUPPORTED,
            "schema version 1 is older than this build's (8)");
  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(aa_store_schema_version(st) == 8);
  char v[32];
  raw_text(path, "PRAGMA user_version", v, sizeof v);
  CHECK(strcmp(v, "8") == 0);
  raw_text(path,
           "SELECT count(*) FROM pragma_table_info('runs') WHERE name IN ('predicted_peak_bytes', "
           "'predicted_bubble', 'predicted_json', 'moe_imbalance')",
           v, sizeof v);
  CHECK(strcmp(v, "4") == 0);
  raw_text(path, "SELECT count(*) FROM runs WHERE moe_imbalance IS NOT NULL", v, sizeof v);
  CHECK(strcmp(v, "0") == 0); /* the runs it had measured none */
  aa_store_job_t j;
  CHECK(aa_store_job_get(st, 1, &j) == 0);
  CHECK(j.status == AA_STORE_JOB_RUNNING && j.resumes == 0 && j.started_at == 101 && j.submitted_at == 100);
  aa_store_job_clear(&j);
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, 1, &r) == 0 && r.job_id == 1 && r.tokens_per_s == 10);
  aa_store_run_clear(&r);
  CHECK((raw_sql(path, "UPDATE jobs SET resumes = -1", msg, sizeof msg) & 0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "job_resumes_not_negative"), "%s", msg);
  /* The new column is in use at once: the job left running is resumed. */
  aa_store_recovery_t rec;
  CHECK(aa_store_recover(st, 1, &rec) == 0 && rec.jobs_requeued == 1);
  CHECK(aa_store_job_get(st, 1, &j) == 0 && j.status == AA_STORE_JOB_QUEUED && j.resumes == 1);
  aa_store_job_clear(&j);
  aa_store_close(st);
}

/* A version 2 file: version 1 plus jobs.resumes, with one finished run. */
AA_TEST(a_schema_version_2_store_migrates_to_the_newest_and_its_runs_have_no_ranks_or_predictions) {
  char path[512];
  snprintf(path, sizeof path, "%s", fresh_path());
  char msg[256];
  int rc = raw_sql(path, schema_v1, msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  rc =
      raw_sql(path,
              "ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0"
              "  CONSTRAINT job_resumes_not_negative CHECK (resumes >= 0);"
              "INSERT INTO models VALUES ('" MODEL "', 'tiny', '{}', 1, 100);"
              "INSERT INTO hardware VALUES ('" HW "', '{}', 100);"
              "INSERT INTO jobs (id, model_hash, hardware, status, submitted_at) VALUES (1, '" MODEL "', '" HW
              "', 'running', 100);"
              "INSERT INTO runs (id, job_id, model_hash, hardware, kind, strategy_key, strategy_json, status,"
              "  tokens_per_s) VALUES (1, 1, '" MODEL "', '" HW "', 'dryrun', 'k', '{}', 'ok', 10);"
              "PRAGMA user_version = 2;",
              msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EUNSUPPORTED,
            "schema version 2 is older than this build's (8)");
  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(aa_store_schema_version(st) == 8);
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, 1, &r) == 0 && r.tokens_per_s == 10);
  aa_store_run_clear(&r);
  int n = 0;
  CHECK(aa_store_run_ranks(st, 1, count_ranks, &n) == 0 && n == 0);
  /* The new table takes rows at once, under its rules. */
  CHECK(raw_sql(path, "INSERT INTO run_ranks (run_id, rank, status) VALUES (1, 0, 'ok')", msg, sizeof msg) ==
        SQLITE_OK);
  CHECK(
      (raw_sql(path, "INSERT INTO run_ranks (run_id, rank, status) VALUES (1, 4096, 'ok')", msg, sizeof msg) &
       0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "run_rank_in_world"), "%s", msg);
  CHECK((raw_sql(path, "INSERT INTO run_ranks (run_id, rank, status) VALUES (1, 1, 'pruned')", msg,
                 sizeof msg) &
         0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "run_rank_status_known"), "%s", msg);
  CHECK(aa_store_run_ranks(st, 1, count_ranks, &n) == 0 && n == 1);
  /* Version 4's predictions: none for the old run, and the rules hold. */
  CHECK(aa_store_run_get(st, 1, &r) == 0 && r.predicted_peak_bytes == 0 && r.predicted_bubble == 0);
  aa_store_run_clear(&r);
  CHECK((raw_sql(path, "UPDATE runs SET predicted_bubble = 1.5", msg, sizeof msg) & 0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "run_predicted_bubble_share"), "%s", msg);
  CHECK((raw_sql(path, "UPDATE runs SET predicted_peak_bytes = -1", msg, sizeof msg) & 0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "run_predicted_peak_positive"), "%s", msg);
  aa_store_close(st);
}

/* Versions 2 to 4 as they shipped (migrations[1..3] in planner/store.c),
 * applied to schema_v1 to build a version 4 store by hand. */
static const char schema_v1_to_v4[] =
    "ALTER TABLE jobs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0"
    "  CONSTRAINT job_resumes_not_negative CHECK (resumes >= 0);"
    "CREATE TABLE run_ranks ("
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  rank INTEGER NOT NULL CONSTRAINT run_rank_in_world CHECK (rank BETWEEN 0 AND 4095),"
    "  dp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_dp_in_world CHECK (dp_rank BETWEEN 0 AND 4095),"
    "  tp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_tp_in_world CHECK (tp_rank BETWEEN 0 AND 4095),"
    "  pp_rank INTEGER NOT NULL DEFAULT 0 CONSTRAINT run_rank_pp_in_world CHECK (pp_rank BETWEEN 0 AND 4095),"
    "  status TEXT NOT NULL CONSTRAINT run_rank_status_known CHECK (status IN"
    "    ('ok', 'oom', 'error', 'timeout', 'crashed', 'cancelled')),"
    "  tokens_per_s REAL, step_ms_median REAL, step_ms_spread REAL, forward_ms REAL, backward_ms REAL,"
    "  optimizer_ms REAL, pipeline_comm_ms REAL, bubble_ms REAL, peak_bytes INTEGER,"
    "  peak_json TEXT CONSTRAINT run_rank_peak_is_json CHECK (peak_json IS NULL OR json_valid(peak_json)),"
    "  error TEXT,"
    "  PRIMARY KEY (run_id, rank)) WITHOUT ROWID;"
    "ALTER TABLE runs ADD COLUMN predicted_peak_bytes INTEGER"
    "  CONSTRAINT run_predicted_peak_positive CHECK (predicted_peak_bytes IS NULL OR predicted_peak_bytes > 0);"
    "ALTER TABLE runs ADD COLUMN predicted_bubble REAL"
    "  CONSTRAINT run_predicted_bubble_share CHECK (predicted_bubble IS NULL OR"
    "  (predicted_bubble > 0 AND predicted_bubble < 1));";

/* A version 4 file gains the calibrations table (empty) and
 * runs.predicted_json (NULL for the runs it had), under their rules. */
AA_TEST(a_schema_version_4_store_migrates_to_5_with_no_calibrations_and_no_predicted_breakdowns) {
  char path[512];
  snprintf(path, sizeof path, "%s", fresh_path());
  char msg[256];
  int rc = raw_sql(path, schema_v1, msg, sizeof msg);
  if (rc == SQLITE_OK) rc = raw_sql(path, schema_v1_to_v4, msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  rc = raw_sql(path,
               "INSERT INTO models VALUES ('" MODEL "', 'tiny', '{}', 1, 100);"
               "INSERT INTO hardware VALUES ('" HW "', '{}', 100);"
               "INSERT INTO jobs (id, model_hash, hardware, status, submitted_at) VALUES (1, '" MODEL "', '" HW
               "', 'done', 100);"
               "INSERT INTO runs (id, job_id, model_hash, hardware, kind, strategy_key, strategy_json, status,"
               "  tokens_per_s, predicted_peak_bytes) VALUES (1, 1, '" MODEL "', '" HW
               "', 'dryrun', 'k', '{}', 'ok', 10, 99);"
               "PRAGMA user_version = 4;",
               msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EUNSUPPORTED,
            "schema version 4 is older than this build's (8)");
  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(aa_store_schema_version(st) == 8);
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, 1, &r) == 0 && r.tokens_per_s == 10 && r.predicted_peak_bytes == 99 &&
        strcmp(r.predicted_json, "") == 0);
  aa_store_run_clear(&r);
  char *json = (char *)"untouched";
  CHECK(aa_store_calib_get(st, "cpu:x:1MiB", "shm", &json) == 1 && json == NULL);
  CHECK((raw_sql(path, "UPDATE runs SET predicted_json = '{bad'", msg, sizeof msg) & 0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "run_predicted_is_json"), "%s", msg);
  CHECK((raw_sql(path, "INSERT INTO calibrations VALUES ('cpu:x:1MiB', 'mpi', '{}', 1, 1)", msg, sizeof msg) &
         0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "calibration_backend_known"), "%s", msg);
  CHECK(aa_store_calib_put(st, "cpu:x:1MiB", "shm", "{\"version\": 1}") == 0);
  aa_store_close(st);
}

/* Version 5 as it shipped (migrations[4]), applied after schema_v1_to_v4. */
static const char schema_v4_to_v5[] =
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
    "  CONSTRAINT run_predicted_is_json CHECK (predicted_json IS NULL OR json_valid(predicted_json));";

/* A version 5 file keeps its calibrations, with their dates, and takes a
 * CUDA device's links between hosts under 'nccl-hosts'; other backends
 * are still refused by name. */
AA_TEST(a_schema_version_5_store_keeps_its_calibrations_and_takes_nccl_hosts) {
  char path[512];
  snprintf(path, sizeof path, "%s", fresh_path());
  char msg[256];
  int rc = raw_sql(path, schema_v1, msg, sizeof msg);
  if (rc == SQLITE_OK) rc = raw_sql(path, schema_v1_to_v4, msg, sizeof msg);
  if (rc == SQLITE_OK) rc = raw_sql(path, schema_v4_to_v5, msg, sizeof msg);
  if (rc == SQLITE_OK)
    rc = raw_sql(path,
                 "INSERT INTO calibrations VALUES ('cpu:x:1MiB', 'shm', '{\"v\": 1}', 11, 12);"
                 "INSERT INTO calibrations VALUES ('cpu:x:1MiB', 'gloo', '{\"v\": 2}', 13, 14);"
                 "PRAGMA user_version = 5;",
                 msg, sizeof msg);
  CHECK_MSG(rc == SQLITE_OK, "%s", msg);
  aa_store_t *st = NULL;
  CHECK_ERR(aa_store_open(&st, path, AA_STORE_READONLY), AA_EUNSUPPORTED,
            "schema version 5 is older than this build's (8)");
  rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  CHECK(aa_store_schema_version(st) == 8);
  char *json = NULL;
  CHECK(aa_store_calib_get(st, "cpu:x:1MiB", "gloo", &json) == 0 && json && strstr(json, "2"));
  free(json);
  json = NULL;
  CHECK(aa_store_calib_get(st, "cpu:x:1MiB", "shm", &json) == 0 && json && strstr(json, "1"));
  free(json);
  char dates[64] = "";
  raw_text(path, "SELECT measured_at || '/' || updated_at FROM calibrations WHERE backend = 'gloo'", dates,
           sizeof dates);
  CHECK_MSG(!strcmp(dates, "13/14"), "the dates after the copy: '%s'", dates);
  CHECK(aa_store_calib_put(st, "cuda:H:80MiB", "nccl-hosts", "{\"version\": 1}") == 0);
  json = NULL;
  CHECK(aa_store_calib_get(st, "cuda:H:80MiB", "nccl-hosts", &json) == 0 && json);
  free(json);
  CHECK((raw_sql(path, "INSERT INTO calibrations VALUES ('cpu:x:1MiB', 'mpi', '{}', 1, 1)", msg, sizeof msg) &
         0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "calibration_backend_known"), "%s", msg);
  CHECK_ERR(aa_store_calib_put(st, "cpu:x:1MiB", "mpi", "{}"), AA_EINVAL, "unknown backend 'mpi'");
  aa_store_close(st);
}

/* A run keeps the cost model's breakdown of its predicted step as it was
 * given; "" is none, and text that is not JSON is refused. */
AA_TEST(a_run_keeps_its_predicted_breakdown) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW), run = 0, bare = 0;
  aa_strategy_t s = strat(0, AA_F32, 2);
  const char *breakdown = "{\"forward_ms\":1.5,\"backward_ms\":3,\"ops_estimated\":2,\"links_estimated\":0}";
  aa_store_run_new_t nr = {.job_id = job, .kind = AA_STORE_RUN_DRYRUN, .strategy = &s,
                           .status = AA_STORE_RUN_QUEUED, .predicted_tokens_per_s = 100,
                           .predicted_json = breakdown};
  CHECK_MSG(aa_store_run_insert(st, &nr, &run) == 0, "%s", aa_last_error());
  nr.predicted_json = "";
  CHECK_MSG(aa_store_run_insert(st, &nr, &bare) == 0, "%s", aa_last_error());
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, run, &r) == 0 && strcmp(r.predicted_json, breakdown) == 0);
  aa_store_run_clear(&r);
  CHECK(aa_store_run_get(st, bare, &r) == 0 && strcmp(r.predicted_json, "") == 0);
  aa_store_run_clear(&r);
  /* The walks read the column too, and the answers still get their job's options. */
  aa_store_run_filter_t f = {.job_id = job, .limit = 1};
  collected_t c = {0};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &c) == 0 && c.n == 1 && c.ids[0] == run);
  nr.predicted_json = "{not json";
  int64_t id = 0;
  CHECK_ERR(aa_store_run_insert(st, &nr, &id), AA_EINVAL, "run_predicted_is_json");
  aa_store_close(st);
}

/* An MoE run's measured load imbalance (schema 8) reads back as it was
 * recorded; a run without one reads 0 (NULL); one below 1 is refused
 * before anything is written, and the column's rule holds for raw SQL.
 * aa_store_moe_imbalance averages a model's. */
AA_TEST(a_run_keeps_its_measured_moe_imbalance) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW), run = 0, bare = 0, bad = 0;
  aa_strategy_t s = strat(0, AA_F32, 2);
  aa_store_run_new_t nr = {
      .job_id = job, .kind = AA_STORE_RUN_DRYRUN, .strategy = &s, .status = AA_STORE_RUN_RUNNING};
  CHECK_MSG(aa_store_run_insert(st, &nr, &run) == 0 && aa_store_run_insert(st, &nr, &bare) == 0 &&
                aa_store_run_insert(st, &nr, &bad) == 0,
            "%s", aa_last_error());
  aa_store_run_result_t res = {.status = AA_STORE_RUN_OK, .tokens_per_s = 10, .moe_imbalance = 1.75};
  CHECK_MSG(aa_store_run_finish(st, run, &res) == 0, "%s", aa_last_error());
  res.moe_imbalance = 0;
  CHECK(aa_store_run_finish(st, bare, &res) == 0);
  res.moe_imbalance = 0.5;
  CHECK_ERR(aa_store_run_finish(st, bad, &res), AA_EINVAL, "load imbalance of 0.5");
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, run, &r) == 0 && r.moe_imbalance == 1.75);
  aa_store_run_clear(&r);
  CHECK(aa_store_run_get(st, bare, &r) == 0 && r.moe_imbalance == 0);
  aa_store_run_clear(&r);
  CHECK(aa_store_run_get(st, bad, &r) == 0 && r.status == AA_STORE_RUN_RUNNING);
  aa_store_run_clear(&r);
  /* The model's mean over the runs that measured one. */
  double mean = -1;
  int n = -1;
  CHECK(aa_store_moe_imbalance(st, MODEL, &mean, &n) == 0 && n == 1 && mean == 1.75);
  res.moe_imbalance = 1.25;
  CHECK(aa_store_run_finish(st, bad, &res) == 0);
  CHECK(aa_store_moe_imbalance(st, MODEL, &mean, &n) == 0 && n == 2 && mean == 1.5);
  CHECK(aa_store_moe_imbalance(st, "0123456789abcdef", &mean, &n) == 0 && n == 0 && mean == 0);
  CHECK_ERR(aa_store_moe_imbalance(st, "", &mean, &n), AA_EINVAL, "model hash");
  char msg[256] = "", path[512];
  cur_path(path);
  CHECK(
      (raw_sql(path, "UPDATE runs SET moe_imbalance = 0.9 WHERE moe_imbalance IS NOT NULL", msg, sizeof msg) &
       0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "run_moe_imbalance_at_least_1"), "%s", msg);
  aa_store_close(st);
}

/* The predicted breakdown of a walked run, copied. */
static int copy_predicted(const aa_store_run_t *r, void *data) {
  snprintf(data, 256, "%s", r->predicted_json);
  return 0;
}

AA_TEST(answers_read_the_predicted_breakdown_and_the_job_options_after_it) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW), run = 0;
  aa_strategy_t s = strat(0, AA_F32, 2);
  aa_store_run_new_t nr = {.job_id = job, .kind = AA_STORE_RUN_DRYRUN, .strategy = &s,
                           .status = AA_STORE_RUN_RUNNING, .predicted_json = "{\"bubble_ms\":0}"};
  CHECK_MSG(aa_store_run_insert(st, &nr, &run) == 0, "%s", aa_last_error());
  aa_store_run_result_t res = {.status = AA_STORE_RUN_OK, .tokens_per_s = 10};
  CHECK(aa_store_run_finish(st, run, &res) == 0);
  CHECK(aa_store_job_finish(st, job, AA_STORE_JOB_DONE, run, 0, NULL) == 0);
  answers_t a = answers(st, HW);
  CHECK(a.n == 1 && a.ids[0] == run && strcmp(a.options, "{\"refresh\": false}") == 0);
  char pred[256] = "";
  aa_store_run_filter_t f = {.job_id = job};
  CHECK(aa_store_runs_query(st, &f, copy_predicted, pred) == 0 && strcmp(pred, "{\"bubble_ms\":0}") == 0);
  aa_store_close(st);
}

/* --- calibrations ------------------------------------------------------------------ */

AA_TEST(device_of_strips_the_pool_count_only) {
  char d[AA_STORE_HW_MAX];
  aa_store_device_of("cpu:AMD EPYC 7B13 (2 threads):24000MiBx2", d, sizeof d);
  CHECK_MSG(strcmp(d, "cpu:AMD EPYC 7B13 (2 threads):24000MiB") == 0, "%s", d);
  aa_store_device_of("cuda:NVIDIA H100 80GB HBM3:81559MiBx128", d, sizeof d);
  CHECK_MSG(strcmp(d, "cuda:NVIDIA H100 80GB HBM3:81559MiB") == 0, "%s", d);
  aa_store_device_of("cpu:Test:100MiB", d, sizeof d); /* already a device */
  CHECK(strcmp(d, "cpu:Test:100MiB") == 0);
  aa_store_device_of("cpu:box:100MiBx", d, sizeof d); /* no digits: no count */
  CHECK(strcmp(d, "cpu:box:100MiBx") == 0);
  aa_store_device_of("x12", d, sizeof d); /* nothing would be left */
  CHECK(strcmp(d, "x12") == 0);
  /* A pool on several hosts: its count and hosts go, so both topologies share the device's calibration. */
  aa_store_device_of("cpu:AMD EPYC (1 threads):24105MiBx4@2", d, sizeof d);
  CHECK_MSG(strcmp(d, "cpu:AMD EPYC (1 threads):24105MiB") == 0, "%s", d);
  aa_store_device_of("cuda:NVIDIA H100 80GB HBM3:81559MiBx128@16", d, sizeof d);
  CHECK_MSG(strcmp(d, "cuda:NVIDIA H100 80GB HBM3:81559MiB") == 0, "%s", d);
  aa_store_device_of("cpu:box@2", d, sizeof d); /* hosts with no count before them: not a pool */
  CHECK(strcmp(d, "cpu:box@2") == 0);
  aa_store_device_of("cpu:box:100MiBx@2", d, sizeof d);
  CHECK(strcmp(d, "cpu:box:100MiBx@2") == 0);
  aa_store_device_of("x4@2", d, sizeof d); /* nothing would be left */
  CHECK(strcmp(d, "x4@2") == 0);
  char small[8];
  aa_store_device_of("cpu:long name:1MiBx4", small, sizeof small);
  CHECK(strcmp(small, "cpu:lon") == 0);
}

/* The calibrations a walk gave: "device/backend/json" per row, in order. */
typedef struct {
  int n;
  char row[8][160];
  int64_t updated[8];
} calibs_t;

static int collect_calib(const aa_store_calib_t *c, void *data) {
  calibs_t *l = data;
  if (l->n == 8) return 1;
  snprintf(l->row[l->n], sizeof l->row[l->n], "%s/%s/%s", c->device, c->backend, c->json);
  l->updated[l->n] = c->updated_at;
  CHECK(c->measured_at == c->updated_at && c->updated_at > 0);
  l->n++;
  return 0;
}

static int stop_calib(const aa_store_calib_t *c, void *data) {
  (void)c;
  (void)data;
  return 9;
}

AA_TEST(calibrations_put_get_replace_and_list_newest_first) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char *json = NULL;
  CHECK(aa_store_calib_get(st, "cpu:A:1MiB", "shm", &json) == 1 && json == NULL);
  CHECK_MSG(aa_store_calib_put(st, "cpu:A:1MiB", "shm", "{\"v\":1}") == 0, "%s", aa_last_error());
  CHECK(aa_store_calib_put(st, "cuda:G:80MiB", "nccl", "{\"v\":2}") == 0);
  CHECK(aa_store_calib_put(st, "cpu:B:2MiB", "gloo", "{\"v\":3}") == 0);
  CHECK(aa_store_calib_get(st, "cpu:A:1MiB", "shm", &json) == 0 && json && strcmp(json, "{\"v\":1}") == 0);
  free(json);
  json = NULL;
  CHECK(aa_store_calib_get(st, "cpu:A:1MiB", "gloo", &json) == 1 && json == NULL); /* other backend */
  /* A put replaces the JSON of the same key. */
  CHECK(aa_store_calib_put(st, "cpu:A:1MiB", "shm", "{\"v\":4}") == 0);
  CHECK(aa_store_calib_get(st, "cpu:A:1MiB", "shm", &json) == 0 && strcmp(json, "{\"v\":4}") == 0);
  free(json);
  /* Newest first: make the times differ by hand (puts within one second tie). */
  char path[512];
  cur_path(path);
  CHECK(raw_sql(path,
                "UPDATE calibrations SET updated_at = 300, measured_at = 300 WHERE device = 'cpu:B:2MiB';"
                "UPDATE calibrations SET updated_at = 200, measured_at = 200 WHERE device = 'cpu:A:1MiB';"
                "UPDATE calibrations SET updated_at = 100, measured_at = 100 WHERE device = 'cuda:G:80MiB';",
                NULL, 0) == SQLITE_OK);
  calibs_t l = {0};
  CHECK(aa_store_calib_list(st, "cpu:", collect_calib, &l) == 0 && l.n == 2);
  CHECK_MSG(strcmp(l.row[0], "cpu:B:2MiB/gloo/{\"v\":3}") == 0, "%s", l.row[0]);
  CHECK_MSG(strcmp(l.row[1], "cpu:A:1MiB/shm/{\"v\":4}") == 0, "%s", l.row[1]);
  CHECK(l.updated[0] == 300 && l.updated[1] == 200);
  memset(&l, 0, sizeof l);
  CHECK(aa_store_calib_list(st, NULL, collect_calib, &l) == 0 && l.n == 3);
  CHECK(strncmp(l.row[2], "cuda:G:80MiB/nccl/", 18) == 0);
  memset(&l, 0, sizeof l);
  CHECK(aa_store_calib_list(st, "rocm:", collect_calib, &l) == 0 && l.n == 0);
  CHECK(aa_store_calib_list(st, "", stop_calib, NULL) == 9);
  aa_store_close(st);
}

AA_TEST(a_calibration_with_bad_json_or_key_is_refused_and_nothing_is_written) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  CHECK_ERR(aa_store_calib_put(st, "cpu:A:1MiB", "shm", "{not json"), AA_EINVAL, "calibration_is_json");
  CHECK_ERR(aa_store_calib_put(st, "cpu:A:1MiB", "shm", ""), AA_EINVAL, "calibration_is_json");
  CHECK_ERR(aa_store_calib_put(st, "cpu:A:1MiB", "shm", NULL), AA_EINVAL, "no JSON");
  CHECK_ERR(aa_store_calib_put(st, "cpu:A:1MiB", "mpi", "{}"), AA_EINVAL, "unknown backend 'mpi'");
  CHECK_ERR(aa_store_calib_put(st, "", "shm", "{}"), AA_EINVAL, "calibration device must not be empty");
  char long_dev[200];
  memset(long_dev, 'd', sizeof long_dev - 1);
  long_dev[sizeof long_dev - 1] = '\0';
  CHECK_ERR(aa_store_calib_put(st, long_dev, "shm", "{}"), AA_EINVAL, "longer than 127");
  char *json = NULL;
  CHECK_ERR(aa_store_calib_get(st, "cpu:A:1MiB", NULL, &json), AA_EINVAL, "unknown backend");
  CHECK(json == NULL);
  calibs_t l = {0};
  CHECK(aa_store_calib_list(st, NULL, collect_calib, &l) == 0 && l.n == 0);
  /* A good put after the refused ones works: no transaction was left open. */
  CHECK_MSG(aa_store_calib_put(st, "cpu:A:1MiB", "self", "{}") == 0, "%s", aa_last_error());
  aa_store_close(st);
}

/* "device/backend/json measured_at" per row, the dates of an import. */
static int collect_dated(const aa_store_calib_t *c, void *data) {
  calibs_t *l = data;
  if (l->n == 8) return 1;
  snprintf(l->row[l->n], sizeof l->row[l->n], "%s/%s/%s %lld", c->device, c->backend, c->json,
           (long long)c->measured_at);
  l->updated[l->n++] = c->updated_at;
  return 0;
}

/* `calib import`: the rows keep the date they were measured elsewhere,
 * are stored now, replace their keys, and go in all together or not at all. */
AA_TEST(an_import_keeps_measured_dates_and_is_all_or_nothing) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  CHECK(aa_store_calib_put(st, "cpu:A:1MiB", "shm", "{\"v\":1}") == 0);
  aa_store_calib_t rows[3] = {
      {.device = "cpu:A:1MiB", .backend = "shm", .json = "{\"v\":2}", .measured_at = 1000},
      {.device = "cpu:A:1MiB", .backend = "gloo", .json = "{\"v\":3}", .measured_at = 2000},
      {.device = "cuda:G:1MiB", .backend = "nccl-hosts", .json = "{\"v\":4}", .measured_at = 3000}};
  int64_t before = (int64_t)time(NULL);
  CHECK_MSG(aa_store_calib_import(st, rows, 3) == 0, "%s", aa_last_error());
  calibs_t l = {0};
  CHECK(aa_store_calib_list(st, "cpu:A:1MiB", collect_dated, &l) == 0 && l.n == 2);
  /* Both were stored now: by device, then backend. */
  CHECK_MSG(strcmp(l.row[0], "cpu:A:1MiB/gloo/{\"v\":3} 2000") == 0, "%s", l.row[0]);
  CHECK_MSG(strcmp(l.row[1], "cpu:A:1MiB/shm/{\"v\":2} 1000") == 0, "%s", l.row[1]);
  CHECK(l.updated[0] >= before && l.updated[1] >= before);
  /* A row the table refuses (not JSON) undoes the rows before it. */
  aa_store_calib_t bad[2] = {
      {.device = "cpu:A:1MiB", .backend = "shm", .json = "{\"v\":5}", .measured_at = 5},
      {.device = "cpu:B:1MiB", .backend = "shm", .json = "{not json", .measured_at = 5}};
  CHECK_ERR(aa_store_calib_import(st, bad, 2), AA_EINVAL, "calibration_is_json");
  char *json = NULL;
  CHECK(aa_store_calib_get(st, "cpu:A:1MiB", "shm", &json) == 0 && json && !strcmp(json, "{\"v\":2}"));
  free(json);
  json = NULL;
  CHECK(aa_store_calib_get(st, "cpu:B:1MiB", "shm", &json) == 1);
  /* Keys and dates are checked before anything is written. */
  bad[1] = (aa_store_calib_t){.device = "cpu:B:1MiB", .backend = "mpi", .json = "{}", .measured_at = 5};
  CHECK_ERR(aa_store_calib_import(st, bad, 2), AA_EINVAL, "unknown backend 'mpi'");
  bad[1] = (aa_store_calib_t){.device = "cpu:B:1MiB", .backend = "shm", .json = "{}", .measured_at = 0};
  CHECK_ERR(aa_store_calib_import(st, bad, 2), AA_EINVAL, "measured_at 0 must be a time");
  CHECK(aa_store_calib_get(st, "cpu:A:1MiB", "shm", &json) == 0 && json && !strcmp(json, "{\"v\":2}"));
  free(json);
  /* The store works on: no transaction was left open. */
  CHECK_MSG(aa_store_calib_put(st, "cpu:B:1MiB", "shm", "{}") == 0, "%s", aa_last_error());
  aa_store_close(st);
}

/* A run keeps the cost model's memory and bubble beside its tokens/s;
 * out-of-range predictions are refused before anything is written. */
AA_TEST(a_run_keeps_its_predicted_memory_and_bubble) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW), run = 0;
  aa_strategy_t s = strat(0, AA_F32, 2);
  s.degree[AA_AXIS_PIPELINE] = 2;
  aa_store_run_new_t nr = {.job_id = job, .kind = AA_STORE_RUN_DRYRUN, .strategy = &s,
                           .status = AA_STORE_RUN_RUNNING, .predicted_tokens_per_s = 1000,
                           .predicted_peak_bytes = 12345678, .predicted_bubble = 0.2};
  CHECK_MSG(aa_store_run_insert(st, &nr, &run) == 0, "%s", aa_last_error());
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, run, &r) == 0 && r.predicted_peak_bytes == 12345678 && r.predicted_bubble == 0.2 &&
        r.predicted_tokens_per_s == 1000);
  aa_store_run_clear(&r);
  nr.predicted_bubble = 1;
  CHECK_ERR(aa_store_run_insert(st, &nr, &run), AA_EINVAL, "predicted bubble must be in [0, 1)");
  nr.predicted_bubble = 0;
  nr.predicted_peak_bytes = -5;
  CHECK_ERR(aa_store_run_insert(st, &nr, &run), AA_EINVAL, "predicted peak bytes must be >= 0");
  aa_store_close(st);
}

/* --- models, hardware, jobs ------------------------------------------------------- */

AA_TEST(model_and_hardware_upsert_keeps_created_at) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  aa_store_model_t m;
  int rc = aa_store_model_get(st, MODEL, &m);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) goto done;
  int64_t created = m.created_at;
  CHECK(strcmp(m.name, "tiny") == 0 && m.params == 1000 && strstr(m.spec_json, "n_layer"));
  CHECK(llabs(created - (int64_t)time(NULL)) <= 5);
  aa_store_model_clear(&m);
  CHECK(aa_store_put_model(st, MODEL, "renamed", "{\"v\": 2}", 2000) == 0);
  CHECK(aa_store_model_get(st, MODEL, &m) == 0);
  CHECK(strcmp(m.name, "renamed") == 0 && m.params == 2000 && strcmp(m.spec_json, "{\"v\": 2}") == 0);
  CHECK(m.created_at == created);
  aa_store_model_clear(&m);

  aa_store_hardware_t h;
  CHECK(aa_store_put_hardware(st, HW, "{\"devices\": 2}") == 0);
  CHECK(aa_store_hardware_get(st, HW, &h) == 0 && strcmp(h.description_json, "{\"devices\": 2}") == 0);
  aa_store_hardware_clear(&h);
  CHECK_ERR(aa_store_hardware_get(st, "nope", &h), AA_ENOENT, "hardware nope: not found");
  CHECK_ERR(aa_store_put_model(st, "", "x", "{}", 1), AA_EINVAL, "model hash must not be empty");
  char long_hash[80];
  memset(long_hash, 'a', sizeof long_hash - 1);
  long_hash[sizeof long_hash - 1] = '\0';
  CHECK_ERR(aa_store_put_model(st, long_hash, "x", "{}", 1), AA_EINVAL, "longer than 64");
done:
  aa_store_close(st);
}

AA_TEST(job_lifecycle_sets_timestamps_and_refuses_bad_transitions) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t now = (int64_t)time(NULL);
  int64_t id = new_job(st, HW);
  aa_store_job_t j;
  CHECK(aa_store_job_get(st, id, &j) == 0);
  CHECK(j.status == AA_STORE_JOB_QUEUED && llabs(j.submitted_at - now) <= 5);
  CHECK(j.started_at == 0 && j.finished_at == 0 && j.best_run_id == 0 && !j.from_store);
  CHECK(strcmp(j.options_json, "{\"refresh\": false}") == 0 && strcmp(j.error, "") == 0 && !strcmp(j.note, ""));
  aa_store_job_clear(&j);

  CHECK_MSG(aa_store_job_start(st, id) == 0, "%s", aa_last_error());
  CHECK_ERR(aa_store_job_start(st, id), AA_EINVAL, "is running, not queued");
  int64_t run = add_run(st, id, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_OK, 100, 1000);
  CHECK_ERR(aa_store_job_finish(st, id, AA_STORE_JOB_RUNNING, 0, 0, NULL), AA_EINVAL, "not a final status");
  CHECK_ERR(aa_store_job_finish(st, id, AA_STORE_JOB_DONE, 999, 0, NULL), AA_EINVAL, "FOREIGN KEY");
  CHECK_MSG(aa_store_job_finish(st, id, AA_STORE_JOB_DONE, run, 0, NULL) == 0, "%s", aa_last_error());
  CHECK(aa_store_job_set_note(st, id, "best X: 1.07x the runner-up Y, spread 3 %") == 0);
  CHECK_ERR(aa_store_job_set_note(st, 4242, "x"), AA_ENOENT, "job 4242: not found");
  CHECK(aa_store_job_get(st, id, &j) == 0);
  CHECK(j.status == AA_STORE_JOB_DONE && j.best_run_id == run);
  CHECK(!strcmp(j.note, "best X: 1.07x the runner-up Y, spread 3 %") && !strcmp(j.error, ""));
  CHECK(j.started_at >= j.submitted_at && j.finished_at >= j.started_at && j.finished_at > 0);
  aa_store_job_clear(&j);
  CHECK_ERR(aa_store_job_finish(st, id, AA_STORE_JOB_FAILED, 0, 0, "late"), AA_EINVAL, "is done");
  CHECK_ERR(aa_store_job_start(st, 4242), AA_ENOENT, "job 4242: not found");
  CHECK_ERR(aa_store_job_get(st, 4242, &j), AA_ENOENT, "not found");

  /* A queued job can be cancelled without ever starting. */
  int64_t id2 = new_job(st, HW);
  CHECK(aa_store_job_finish(st, id2, AA_STORE_JOB_CANCELLED, 0, 0, "by user") == 0);
  CHECK(aa_store_job_get(st, id2, &j) == 0);
  CHECK(j.status == AA_STORE_JOB_CANCELLED && j.started_at == 0 && j.finished_at > 0);
  CHECK(strcmp(j.error, "by user") == 0);
  aa_store_job_clear(&j);

  int64_t none = -1;
  CHECK_ERR(aa_store_job_create(st, "0000000000000000", HW, NULL, &none), AA_EINVAL, "FOREIGN KEY");
  CHECK(none == -1);
  aa_store_close(st);
}

static int collect_job_ids(const aa_store_job_t *j, void *data) {
  int64_t *ids = data;
  ids[++ids[0]] = j->id;
  return 0;
}

AA_TEST(jobs_list_filters_newest_first) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t a = new_job(st, HW), b = new_job(st, HW2), c = new_job(st, HW);
  CHECK(aa_store_job_start(st, c) == 0);
  int64_t ids[8] = {0};
  CHECK(aa_store_jobs_list(st, NULL, collect_job_ids, ids) == 0);
  CHECK(ids[0] == 3 && ids[1] == c && ids[2] == b && ids[3] == a);
  memset(ids, 0, sizeof ids);
  aa_store_job_filter_t f = {.hardware = HW, .statuses = AA_STORE_BIT(AA_STORE_JOB_QUEUED)};
  CHECK(aa_store_jobs_list(st, &f, collect_job_ids, ids) == 0);
  CHECK(ids[0] == 1 && ids[1] == a);
  memset(ids, 0, sizeof ids);
  f = (aa_store_job_filter_t){.model_hash = MODEL, .limit = 2};
  CHECK(aa_store_jobs_list(st, &f, collect_job_ids, ids) == 0);
  CHECK(ids[0] == 2 && ids[1] == c);
  memset(ids, 0, sizeof ids);
  f = (aa_store_job_filter_t){.statuses =
                                  AA_STORE_BIT(AA_STORE_JOB_RUNNING) | AA_STORE_BIT(AA_STORE_JOB_DONE)};
  CHECK(aa_store_jobs_list(st, &f, collect_job_ids, ids) == 0);
  CHECK(ids[0] == 1 && ids[1] == c);
  f.statuses = AA_STORE_BIT(AA_STORE_JOB_NSTATUS);
  CHECK_ERR(aa_store_jobs_list(st, &f, collect_job_ids, ids), AA_EINVAL, "job status filter: unknown value");
  aa_store_close(st);
}

/* --- runs ---------------------------------------------------------------------------- */

AA_TEST(run_insert_and_finish_round_trip) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  aa_strategy_t s = strat(1, AA_BF16, 8);
  s.ckpt = AA_CKPT_FULL;
  char key[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(&s, key);
  aa_store_run_new_t nr = {.job_id = job,
                           .kind = AA_STORE_RUN_DRYRUN,
                           .strategy = &s,
                           .status = AA_STORE_RUN_QUEUED,
                           .predicted_tokens_per_s = 1234.5};
  int64_t id = 0;
  CHECK_MSG(aa_store_run_insert(st, &nr, &id) == 0 && id > 0, "%s", aa_last_error());
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, id, &r) == 0);
  CHECK(r.status == AA_STORE_RUN_QUEUED && r.started_at == 0 && r.finished_at == 0);
  CHECK(r.tokens_per_s == 0 && r.peak_bytes == 0 && strcmp(r.peak_json, "") == 0);
  aa_store_run_clear(&r);
  CHECK(aa_store_run_start(st, id) == 0);
  CHECK_ERR(aa_store_run_start(st, id), AA_EINVAL, "is running, not queued");

  aa_store_run_result_t res = {.status = AA_STORE_RUN_OK,
                               .tokens_per_s = 5000.25,
                               .step_ms_median = 12.5,
                               .step_ms_spread = 0.75,
                               .peak_bytes = INT64_C(3) << 33,
                               .peak_json = "{\"params\": 100, \"acts\": 200}",
                               .final_loss = 5.5};
  CHECK_MSG(aa_store_run_finish(st, id, &res) == 0, "%s", aa_last_error());
  CHECK(aa_store_run_get(st, id, &r) == 0);
  CHECK(r.id == id && r.job_id == job && strcmp(r.model_hash, MODEL) == 0 && strcmp(r.hardware, HW) == 0);
  CHECK(r.kind == AA_STORE_RUN_DRYRUN && r.status == AA_STORE_RUN_OK);
  CHECK_MSG(strcmp(r.strategy_key, key) == 0, "%s != %s", r.strategy_key, key);
  CHECK(r.tokens_per_s == 5000.25 && r.step_ms_median == 12.5 && r.step_ms_spread == 0.75);
  CHECK(r.peak_bytes == INT64_C(3) << 33 && r.predicted_tokens_per_s == 1234.5 && r.final_loss == 5.5);
  CHECK(strcmp(r.peak_json, res.peak_json) == 0 && strcmp(r.error, "") == 0);
  CHECK(r.started_at > 0 && r.finished_at >= r.started_at);
  aa_strategy_t back;
  CHECK_MSG(aa_strategy_parse(&back, r.strategy_json, "stored") == 0, "%s", aa_last_error());
  char key2[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(&back, key2);
  CHECK(strcmp(key2, key) == 0);
  aa_store_run_clear(&r);

  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "is ok, not queued or running");
  CHECK_ERR(aa_store_run_finish(st, 777, &res), AA_ENOENT, "run 777: not found");
  int64_t id2 = add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_RUNNING, 0, 0);
  res = (aa_store_run_result_t){.status = AA_STORE_RUN_OK};
  CHECK_ERR(aa_store_run_finish(st, id2, &res), AA_EINVAL, "needs its tokens/s");
  res = (aa_store_run_result_t){.status = AA_STORE_RUN_OOM, .peak_bytes = -1};
  CHECK_ERR(aa_store_run_finish(st, id2, &res), AA_EINVAL, "not negative");
  res = (aa_store_run_result_t){.status = AA_STORE_RUN_OOM, .error = "out of memory: 12 MiB of activations"};
  CHECK(aa_store_run_finish(st, id2, &res) == 0);
  CHECK(aa_store_run_get(st, id2, &r) == 0);
  CHECK(r.status == AA_STORE_RUN_OOM && strstr(r.error, "12 MiB"));
  aa_store_run_clear(&r);

  /* A pruned run is finished at insert, with its reason. */
  int64_t pr = add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_PRUNED, 0, 0);
  CHECK(aa_store_run_get(st, pr, &r) == 0);
  CHECK(r.status == AA_STORE_RUN_PRUNED && r.finished_at > 0 && r.started_at == 0);
  CHECK(strcmp(r.error, "predicted out of memory") == 0);
  aa_store_run_clear(&r);

  /* Runs cannot be added to a finished or missing job. */
  CHECK(aa_store_job_finish(st, job, AA_STORE_JOB_DONE, id, 0, NULL) == 0);
  CHECK_ERR(aa_store_run_insert(st, &nr, &id), AA_EINVAL, "is done; runs can be added only");
  nr.job_id = 555;
  CHECK_ERR(aa_store_run_insert(st, &nr, &id), AA_ENOENT, "job 555: not found");
  aa_store_close(st);
}

/* A rank's coordinates are one JSON object keyed by axis name (schema 7):
 * written from the axis table, an axis a row does not name reads as 0 (a
 * run from before that axis), and a member that is not a coordinate is
 * named as unreadable instead of read as something else. */
AA_TEST(rank_coordinates_are_an_object_by_axis_name) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  int64_t id = add_run(st, job, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_RUNNING, 0, 0);
  aa_store_run_rank_t ranks[2] = {
      {.rank = 0, .coord = {[AA_AXIS_TENSOR] = 1, [AA_AXIS_PIPELINE] = 2}, .status = AA_STORE_RUN_OK},
      {.rank = 1, .coord = {[AA_AXIS_DATA] = 3}, .status = AA_STORE_RUN_OK}};
  aa_store_run_result_t res = {.status = AA_STORE_RUN_OK, .tokens_per_s = 1, .ranks = ranks, .n_ranks = 2};
  CHECK_MSG(aa_store_run_finish(st, id, &res) == 0, "%s", aa_last_error());
  char v[128], path[512], sql[256];
  cur_path(path);
  raw_text(path, "SELECT coords FROM run_ranks WHERE rank = 0", v, sizeof v);
  CHECK_MSG(!strcmp(v, "{\"data\":0,\"tensor\":1,\"pipeline\":2,\"context\":0}"), "%s", v);
  snprintf(sql, sizeof sql,
           "UPDATE run_ranks SET coords = '{\"pipeline\": 5}' WHERE run_id = %lld AND rank = 1",
           (long long)id);
  CHECK(raw_sql(path, sql, NULL, 0) == SQLITE_OK);
  ranks_t c = {0};
  CHECK_MSG(aa_store_run_ranks(st, id, collect_ranks, &c) == 0, "%s", aa_last_error());
  CHECK(c.n == 2 && c.k[1].coord[AA_AXIS_DATA] == 0 && c.k[1].coord[AA_AXIS_TENSOR] == 0 &&
        c.k[1].coord[AA_AXIS_PIPELINE] == 5);
  CHECK(c.k[0].coord[AA_AXIS_TENSOR] == 1 && c.k[0].coord[AA_AXIS_PIPELINE] == 2);
  snprintf(sql, sizeof sql,
           "UPDATE run_ranks SET coords = '{\"tensor\": \"x\"}' WHERE run_id = %lld AND rank = 1",
           (long long)id);
  CHECK(raw_sql(path, sql, NULL, 0) == SQLITE_OK);
  c.n = 0;
  CHECK_ERR(aa_store_run_ranks(st, id, collect_ranks, &c), AA_ECORRUPT,
            "rank 1 has unreadable coordinates '{\"tensor\": \"x\"}'");
  /* Not an object at all: the table refuses it. */
  snprintf(sql, sizeof sql, "UPDATE run_ranks SET coords = '[1, 2]' WHERE run_id = %lld", (long long)id);
  CHECK(raw_sql(path, sql, NULL, 0) != SQLITE_OK);
  aa_store_close(st);
}

AA_TEST(every_rank_of_a_run_round_trips_with_its_breakdown) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  int64_t id = add_run(st, job, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_RUNNING, 0, 0);
  /* A 2-stage pipeline of dp 2, given out of rank order: the store keeps
   * every rank, read back by rank. Rank 3 failed before it timed a step. */
  aa_store_run_rank_t ranks[4] = {
      {.rank = 2,
       .coord[AA_AXIS_DATA] = 1,
       .coord[AA_AXIS_PIPELINE] = 0,
       .status = AA_STORE_RUN_OK,
       .tokens_per_s = 900,
       .step_ms_median = 40,
       .step_ms_spread = 2,
       .has_times = true,
       .time_ms = {10.5, 20.25, 3, 0, 6.25, 7.75},
       .peak_bytes = 1000,
       .peak_json = "{\"total\": 1000}"},
      {.rank = 0,
       .status = AA_STORE_RUN_OK,
       .tokens_per_s = 1000,
       .step_ms_median = 38,
       .has_times = true,
       .time_ms = {11, 21, 3.5, 1.25, 1.25},
       .peak_bytes = 1200},
      {.rank = 1,
       .coord[AA_AXIS_PIPELINE] = 1,
       .status = AA_STORE_RUN_OK,
       .tokens_per_s = 950,
       .has_times = true,
       .time_ms = {0, 0, 0, 0, 0}},
      {.rank = 3,
       .coord[AA_AXIS_DATA] = 1,
       .coord[AA_AXIS_PIPELINE] = 1,
       .status = AA_STORE_RUN_CANCELLED,
       .error = "aborted by the planner"},
  };
  aa_store_run_result_t res = {.status = AA_STORE_RUN_OK,
                               .tokens_per_s = 900,
                               .step_ms_median = 40,
                               .peak_bytes = 1200,
                               .ranks = ranks,
                               .n_ranks = 4};
  CHECK_MSG(aa_store_run_finish(st, id, &res) == 0, "%s", aa_last_error());
  ranks_t c = {0};
  CHECK_MSG(aa_store_run_ranks(st, id, collect_ranks, &c) == 0, "%s", aa_last_error());
  CHECK(c.n == 4);
  for (int i = 0; i < c.n; i++)
    CHECK(c.k[i].rank == i);
  const aa_store_run_rank_t *k = c.k;
  CHECK(k[0].coord[AA_AXIS_DATA] == 0 && k[0].coord[AA_AXIS_TENSOR] == 0 &&
        k[0].coord[AA_AXIS_PIPELINE] == 0 && k[0].tokens_per_s == 1000);
  CHECK(k[0].has_times && k[0].time_ms[AA_PROTO_TIME_FORWARD] == 11 &&
        k[0].time_ms[AA_PROTO_TIME_BACKWARD] == 21 && k[0].time_ms[AA_PROTO_TIME_OPTIMIZER] == 3.5 &&
        k[0].time_ms[AA_PROTO_TIME_PIPELINE_COMM] == 1.25 && k[0].time_ms[AA_PROTO_TIME_BUBBLE] == 1.25 &&
        k[0].peak_bytes == 1200 && !strcmp(k[0].peak_json, ""));
  /* Zeros measured are zeros, not "not recorded". */
  CHECK(k[1].coord[AA_AXIS_PIPELINE] == 1 && k[1].has_times && k[1].time_ms[AA_PROTO_TIME_BUBBLE] == 0 &&
        k[1].step_ms_median == 0);
  CHECK(k[2].coord[AA_AXIS_DATA] == 1 && k[2].coord[AA_AXIS_PIPELINE] == 0 &&
        k[2].status == AA_STORE_RUN_OK && k[2].step_ms_spread == 2);
  CHECK(k[2].time_ms[AA_PROTO_TIME_FORWARD] == 10.5 && k[2].time_ms[AA_PROTO_TIME_BUBBLE] == 6.25 &&
        k[2].time_ms[AA_PROTO_TIME_ALL_TO_ALL] == 7.75);
  CHECK(k[0].time_ms[AA_PROTO_TIME_ALL_TO_ALL] == 0); /* a rank without expert parallelism */
  CHECK(!strcmp(k[2].peak_json, "{\"total\": 1000}") && !strcmp(k[2].error, ""));
  CHECK(k[3].status == AA_STORE_RUN_CANCELLED && !k[3].has_times && k[3].time_ms[AA_PROTO_TIME_FORWARD] == 0);
  CHECK(!strcmp(k[3].error, "aborted by the planner") && k[3].coord[AA_AXIS_DATA] == 1 &&
        k[3].coord[AA_AXIS_PIPELINE] == 1);
  char v[64], path[512];
  cur_path(path);
  raw_text(path, "SELECT count(*) FROM run_ranks WHERE forward_ms IS NULL", v, sizeof v);
  CHECK_MSG(strcmp(v, "1") == 0, "%s", v);
  /* A callback's non-zero value stops the walk and is returned. */
  CHECK(aa_store_run_ranks(st, id, stop_at_first_rank, NULL) == 7);
  /* Runs without ranks: a run stopped by the planner, an unknown run. */
  int n = 0;
  int64_t id2 = add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_CANCELLED, 0, 0);
  CHECK(aa_store_run_ranks(st, id2, count_ranks, &n) == 0 && n == 0);
  CHECK(aa_store_run_ranks(st, 4242, count_ranks, &n) == 0 && n == 0);
  aa_store_close(st);
}

AA_TEST(bad_rank_figures_are_refused_and_nothing_is_written) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  int64_t id = add_run(st, job, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_RUNNING, 0, 0);
  aa_store_run_rank_t ranks[2] = {{.rank = 0, .status = AA_STORE_RUN_OK},
                                  {.rank = 1, .status = AA_STORE_RUN_OK}};
  aa_store_run_result_t res = {.status = AA_STORE_RUN_OK, .tokens_per_s = 10, .ranks = ranks, .n_ranks = 2};
  ranks[1].status = AA_STORE_RUN_RUNNING;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "rank 1: status 1 is not a result status");
  ranks[1].status = AA_STORE_RUN_OK;
  ranks[1].coord[AA_AXIS_PIPELINE] = AA_PROTO_WORLD_MAX;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL,
            "rank 1 (dp 0, tp 0, pp 4096, cp 0) is outside 0..4095");
  ranks[1].coord[AA_AXIS_PIPELINE] = 0;
  ranks[1].rank = -1;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "is outside 0..4095");
  ranks[1].rank = 1;
  ranks[1].has_times = true;
  ranks[1].time_ms[AA_PROTO_TIME_BUBBLE] = -1;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL,
            "rank 1: measurements must be finite and not negative");
  ranks[1].time_ms[AA_PROTO_TIME_BUBBLE] = INFINITY;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "rank 1: measurements must be finite");
  /* Without has_times the times are not looked at (they are stored NULL). */
  ranks[1].has_times = false;
  ranks[1].peak_bytes = -5;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "rank 1: measurements");
  ranks[1].peak_bytes = 0;
  res.n_ranks = -1;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "-1 ranks is outside");
  /* A rank twice: the run's finish is rolled back with it. */
  ranks[1].rank = 0;
  res.n_ranks = 2;
  CHECK_ERR(aa_store_run_finish(st, id, &res), AA_EINVAL, "record rank 0 of run");
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, id, &r) == 0 && r.status == AA_STORE_RUN_RUNNING);
  aa_store_run_clear(&r);
  int n = 0;
  CHECK(aa_store_run_ranks(st, id, count_ranks, &n) == 0 && n == 0);
  ranks[1].rank = 1;
  CHECK_MSG(aa_store_run_finish(st, id, &res) == 0, "%s", aa_last_error());
  CHECK(aa_store_run_ranks(st, id, count_ranks, &n) == 0 && n == 2);
  /* A row the store cannot read fails the walk, naming it. */
  char path[512];
  cur_path(path);
  force_sql(path, "UPDATE run_ranks SET status = 'bogus' WHERE run_id = %lld AND rank = 1", (long long)id);
  CHECK_ERR(aa_store_run_ranks(st, id, count_ranks, &n), AA_ECORRUPT, "rank 1 has an unknown status 'bogus'");
  aa_store_close(st);
}

AA_TEST(answers_come_best_first_throughput_then_lower_peak_then_lower_id) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  CHECK(answers(st, HW).n == 0);
  int64_t slow = add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 500);
  int64_t big = add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 200, 900);
  int64_t want = add_run(st, job, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_OK, 200, 300);
  int64_t twin = add_run(st, job, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_OK, 200, 300); /* same: the older id first */
  add_run(st, job, AA_STORE_RUN_DRYRUN, 5, AA_STORE_RUN_OOM, 0, 99);                  /* failed: never answers */
  add_run(st, job, AA_STORE_RUN_TRAIN, 6, AA_STORE_RUN_OK, 900, 10);                  /* training, not a dry run */
  int64_t other = new_job(st, HW2);
  add_run(st, other, AA_STORE_RUN_DRYRUN, 7, AA_STORE_RUN_OK, 999, 10); /* other hardware */
  CHECK(answers(st, HW).n == 0);                                        /* searches not finished */
  CHECK(aa_store_job_finish(st, job, AA_STORE_JOB_DONE, want, 0, NULL) == 0);
  CHECK(aa_store_job_finish(st, other, AA_STORE_JOB_DONE, 0, 0, NULL) == 0);
  answers_t a = answers(st, HW);
  CHECK_MSG(a.n == 4 && a.ids[0] == want && a.ids[1] == twin && a.ids[2] == big && a.ids[3] == slow,
            "%d answers, first %lld, want %lld", a.n, (long long)a.ids[0], (long long)want);
  CHECK_MSG(!strcmp(a.options, "{\"refresh\": false}"), "the measuring job's options: %s", a.options);
  CHECK(answers(st, HW2).n == 1);
  aa_store_close(st);
}

/* A strategy the search measured again ranks by its mean: one lucky run of
 * mb 1 (300, then 100: mean 200) does not outrank mb 2 (250, 230: mean 240),
 * in the answers and in the runs' "best" order alike. */
AA_TEST(answers_and_the_best_order_rank_a_remeasured_strategy_by_its_mean) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  int64_t lucky = add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 300, 100);
  int64_t steady = add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 250, 100);
  int64_t again = add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 100);
  int64_t steady2 = add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 230, 100);
  CHECK(aa_store_job_finish(st, job, AA_STORE_JOB_DONE, steady, 0, NULL) == 0);
  answers_t a = answers(st, HW);
  CHECK_MSG(a.n == 4 && a.ids[0] == steady && a.ids[1] == steady2 && a.ids[2] == lucky && a.ids[3] == again,
            "%d answers: %lld %lld %lld %lld", a.n, (long long)a.ids[0], (long long)a.ids[1], (long long)a.ids[2],
            (long long)a.ids[3]);
  aa_store_run_filter_t f = {.job_id = job, .order = AA_STORE_ORDER_BEST};
  collected_t c = {0};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &c) == 0 && c.n == 4);
  CHECK_MSG(c.ids[0] == steady && c.ids[1] == steady2 && c.ids[2] == lucky && c.ids[3] == again, "%lld first",
            (long long)c.ids[0]);
  aa_store_close(st);
}

AA_TEST(answers_leave_out_failed_pruned_and_unfinished_runs) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 1);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 150, 1);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_OOM, 0, 1);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_ERROR, 0, 0);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 5, AA_STORE_RUN_TIMEOUT, 0, 0);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 6, AA_STORE_RUN_PRUNED, 0, 0);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 7, AA_STORE_RUN_QUEUED, 0, 0);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 8, AA_STORE_RUN_RUNNING, 0, 0);
  add_run(st, job, AA_STORE_RUN_TRAIN, 9, AA_STORE_RUN_OK, 120, 1);
  CHECK(answers(st, HW).n == 0); /* the search has not finished */
  CHECK(aa_store_job_finish(st, job, AA_STORE_JOB_DONE, 0, 0, NULL) == 0);
  CHECK(answers(st, HW).n == 2);
  CHECK(answers(st, HW2).n == 0);
  aa_store_close(st);
}

AA_TEST(job_run_counts_count_each_status_in_one_query) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512];
  cur_path(path);
  int64_t job = new_job(st, HW), other = new_job(st, HW);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 1);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 150, 1);
  add_run(st, job, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_OOM, 0, 1);
  int64_t bad = add_run(st, job, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_PRUNED, 0, 0);
  add_run(st, other, AA_STORE_RUN_DRYRUN, 5, AA_STORE_RUN_OK, 100, 1);
  force_sql(path, "UPDATE runs SET status = 'bogus' WHERE id = %lld", (long long)bad);
  int counts[AA_STORE_RUN_NSTATUS], unreadable = -1;
  CHECK_MSG(aa_store_job_run_counts(st, job, counts, &unreadable) == 0, "%s", aa_last_error());
  CHECK(counts[AA_STORE_RUN_OK] == 2 && counts[AA_STORE_RUN_OOM] == 1 && counts[AA_STORE_RUN_PRUNED] == 0);
  CHECK(unreadable == 1);
  int total = 0;
  for (int k = 0; k < AA_STORE_RUN_NSTATUS; k++) total += counts[k];
  CHECK(total == 3);
  CHECK(aa_store_job_run_counts(st, 999, counts, NULL) == 0 && counts[AA_STORE_RUN_OK] == 0);
  aa_store_close(st);
}

AA_TEST(a_queued_job_answered_from_the_store_is_done_with_from_store) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t first = new_job(st, HW);
  CHECK(aa_store_job_start(st, first) == 0);
  add_run(st, first, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 1);
  int64_t best = add_run(st, first, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 300, 1);
  CHECK(aa_store_job_finish(st, first, AA_STORE_JOB_DONE, best, 0, NULL) == 0);

  int64_t again = new_job(st, HW);
  CHECK(answers(st, HW).ids[0] == best);
  CHECK_MSG(aa_store_job_finish(st, again, AA_STORE_JOB_DONE, best, 1, NULL) == 0, "%s", aa_last_error());
  aa_store_job_t j;
  CHECK(aa_store_job_get(st, again, &j) == 0);
  CHECK(j.status == AA_STORE_JOB_DONE && j.from_store == 1 && j.best_run_id == best && j.finished_at > 0);
  aa_store_job_clear(&j);
  /* A job answered from the store did not search: it adds no answers of its own. */
  CHECK(answers(st, HW).n == 2);
  aa_store_close(st);
}

AA_TEST(only_runs_of_completed_searches_answer_from_the_store) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t stopped = new_job(st, HW); /* the planner stopped mid-search */
  CHECK(aa_store_job_start(st, stopped) == 0);
  add_run(st, stopped, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 500, 1);
  CHECK(aa_store_job_finish(st, stopped, AA_STORE_JOB_INTERRUPTED, 0, 0, "planner stopped") == 0);
  int64_t failed = new_job(st, HW);
  CHECK(aa_store_job_start(st, failed) == 0);
  add_run(st, failed, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 450, 1);
  CHECK(aa_store_job_finish(st, failed, AA_STORE_JOB_FAILED, 0, 0, "executor lost") == 0);
  int64_t copied = new_job(st, HW); /* done from the store: it did not search */
  int64_t copied_run = add_run(st, copied, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_OK, 600, 1);
  CHECK(aa_store_job_finish(st, copied, AA_STORE_JOB_DONE, copied_run, 1, NULL) == 0);
  int64_t live = new_job(st, HW);
  CHECK(aa_store_job_start(st, live) == 0);
  int64_t best = add_run(st, live, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_OK, 400, 1);
  CHECK(answers(st, HW).n == 0);

  /* The live search ends: its runs, and only its, answer. */
  CHECK(aa_store_job_finish(st, live, AA_STORE_JOB_DONE, best, 0, NULL) == 0);
  answers_t a = answers(st, HW);
  CHECK(a.n == 1 && a.ids[0] == best);
  aa_store_close(st);
}

AA_TEST(recover_without_resumes_marks_running_jobs_interrupted_and_running_runs_crashed) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t done = new_job(st, HW);
  int64_t done_run = add_run(st, done, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 10, 1);
  CHECK(aa_store_job_finish(st, done, AA_STORE_JOB_DONE, done_run, 0, NULL) == 0);
  int64_t live = new_job(st, HW);
  CHECK(aa_store_job_start(st, live) == 0);
  int64_t ok = add_run(st, live, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 10, 1);
  int64_t r1 = add_run(st, live, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_RUNNING, 0, 0);
  int64_t r2 = add_run(st, live, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_RUNNING, 0, 0);
  int64_t q = add_run(st, live, AA_STORE_RUN_DRYRUN, 5, AA_STORE_RUN_QUEUED, 0, 0);
  int64_t waiting = new_job(st, HW2);
  aa_store_recovery_t rec = {-1, -1, -1};
  CHECK_MSG(aa_store_recover(st, 0, &rec) == 0, "%s", aa_last_error());
  CHECK_MSG(rec.jobs_interrupted == 1 && rec.runs_crashed == 2 && rec.jobs_requeued == 0,
            "jobs %d runs %d requeued %d", rec.jobs_interrupted, rec.runs_crashed, rec.jobs_requeued);
  aa_store_job_t j;
  CHECK(aa_store_job_get(st, live, &j) == 0);
  CHECK(j.status == AA_STORE_JOB_INTERRUPTED && j.finished_at > 0 && j.resumes == 0);
  CHECK_MSG(strcmp(j.error, "the planner stopped while the job was running") == 0, "%s", j.error);
  aa_store_job_clear(&j);
  CHECK(aa_store_job_get(st, waiting, &j) == 0 && j.status == AA_STORE_JOB_QUEUED);
  aa_store_job_clear(&j);
  CHECK(aa_store_job_get(st, done, &j) == 0 && j.status == AA_STORE_JOB_DONE);
  aa_store_job_clear(&j);
  aa_store_run_t r;
  const int64_t ids[] = {ok, r1, r2, q};
  const aa_store_run_status_t want[] = {AA_STORE_RUN_OK, AA_STORE_RUN_CRASHED, AA_STORE_RUN_CRASHED,
                                        AA_STORE_RUN_CANCELLED};
  for (int i = 0; i < 4; i++) {
    CHECK(aa_store_run_get(st, ids[i], &r) == 0);
    CHECK_MSG(r.status == want[i], "run %d: %s", i, aa_store_run_status_name(r.status));
    aa_store_run_clear(&r);
  }
  CHECK(aa_store_recover(st, 0, &rec) == 0);
  CHECK(rec.jobs_interrupted == 0 && rec.runs_crashed == 0 && rec.jobs_requeued == 0);
  CHECK(aa_store_recover(st, 0, NULL) == 0);
  CHECK_ERR(aa_store_recover(st, -1, &rec), AA_EINVAL, "negative max_resumes");
  aa_store_close(st);
}

/* The job's status and resumes, for short checks. */
static aa_store_job_t job_of(aa_store_t *st, int64_t id) {
  aa_store_job_t j = {0};
  int rc = aa_store_job_get(st, id, &j);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return j;
}

static aa_store_run_status_t run_status(aa_store_t *st, int64_t id) {
  aa_store_run_t r;
  if (aa_store_run_get(st, id, &r) != 0) return AA_STORE_RUN_NSTATUS;
  aa_store_run_status_t s = r.status;
  aa_store_run_clear(&r);
  return s;
}

AA_TEST(recover_requeues_running_and_interrupted_jobs_until_max_resumes) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512];
  cur_path(path);
  int64_t live = new_job(st, HW);
  CHECK(aa_store_job_start(st, live) == 0);
  int64_t ok = add_run(st, live, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 10, 1);
  int64_t flying = add_run(st, live, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_RUNNING, 0, 0);
  int64_t next = add_run(st, live, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_QUEUED, 0, 0);
  CHECK(raw_sql(path, "UPDATE jobs SET started_at = 1000", NULL, 0) == SQLITE_OK);
  int64_t stopped = new_job(st, HW);
  CHECK(aa_store_job_start(st, stopped) == 0);
  int64_t stopped_run = add_run(st, stopped, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_OK, 10, 1);
  CHECK(aa_store_job_finish(st, stopped, AA_STORE_JOB_INTERRUPTED, stopped_run, 0, "stopped") == 0);
  int64_t waiting = new_job(st, HW2);

  aa_store_recovery_t rec = {-1, -1, -1};
  CHECK_MSG(aa_store_recover(st, 3, &rec) == 0, "%s", aa_last_error());
  CHECK_MSG(rec.jobs_requeued == 2 && rec.jobs_interrupted == 0 && rec.runs_crashed == 1,
            "requeued %d interrupted %d crashed %d", rec.jobs_requeued, rec.jobs_interrupted,
            rec.runs_crashed);
  aa_store_job_t j = job_of(st, live);
  CHECK(j.status == AA_STORE_JOB_QUEUED && j.resumes == 1 && j.started_at == 1000 && j.finished_at == 0);
  CHECK(strcmp(j.error, "") == 0 && j.best_run_id == 0);
  aa_store_job_clear(&j);
  j = job_of(st, stopped);
  CHECK(j.status == AA_STORE_JOB_QUEUED && j.resumes == 1 && strcmp(j.error, "") == 0 && j.best_run_id == 0);
  aa_store_job_clear(&j);
  j = job_of(st, waiting);
  CHECK(j.status == AA_STORE_JOB_QUEUED && j.resumes == 0);
  aa_store_job_clear(&j);
  /* The resumed search keeps its runs: measured, crashed in flight, and still queued. */
  CHECK(run_status(st, ok) == AA_STORE_RUN_OK && run_status(st, flying) == AA_STORE_RUN_CRASHED);
  CHECK(run_status(st, next) == AA_STORE_RUN_QUEUED);
  collected_t got = {0};
  aa_store_run_filter_t f = {.job_id = live};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &got) == 0 && got.n == 3);

  /* Started again it keeps its first start; two more crashes reach the limit. */
  for (int k = 2; k <= 3; k++) {
    CHECK_MSG(aa_store_job_start(st, live) == 0, "%s", aa_last_error());
    CHECK(aa_store_recover(st, 3, &rec) == 0 && rec.jobs_requeued == 1 && rec.jobs_interrupted == 0);
    j = job_of(st, live);
    CHECK_MSG(j.status == AA_STORE_JOB_QUEUED && j.resumes == k, "resumes %d", j.resumes);
    CHECK(j.started_at == 1000);
    aa_store_job_clear(&j);
  }
  CHECK(aa_store_job_start(st, live) == 0);
  CHECK(aa_store_recover(st, 3, &rec) == 0 && rec.jobs_requeued == 0 && rec.jobs_interrupted == 1);
  j = job_of(st, live);
  CHECK(j.status == AA_STORE_JOB_INTERRUPTED && j.resumes == 3 && j.finished_at > 0);
  CHECK_MSG(strcmp(j.error, "the planner stopped while the job was running (resumed 3 times already: not "
                            "resumed again)") == 0,
            "%s", j.error);
  aa_store_job_clear(&j);
  CHECK(run_status(st, next) == AA_STORE_RUN_CANCELLED); /* its job is over */
  /* An interrupted job at the limit stays as it is. */
  CHECK(aa_store_recover(st, 3, &rec) == 0 && rec.jobs_requeued == 0 && rec.jobs_interrupted == 0);
  j = job_of(st, live);
  CHECK(j.status == AA_STORE_JOB_INTERRUPTED && j.resumes == 3);
  aa_store_job_clear(&j);

  /* max_resumes 0: today's behaviour, the running job is interrupted. */
  CHECK(aa_store_job_start(st, waiting) == 0);
  CHECK(aa_store_recover(st, 0, &rec) == 0 && rec.jobs_requeued == 0 && rec.jobs_interrupted == 1);
  j = job_of(st, waiting);
  CHECK(j.status == AA_STORE_JOB_INTERRUPTED && j.resumes == 0);
  CHECK(strcmp(j.error, "the planner stopped while the job was running") == 0);
  aa_store_job_clear(&j);
  j = job_of(st, stopped);
  CHECK(j.status == AA_STORE_JOB_QUEUED && j.resumes == 1); /* queued jobs are left alone */
  aa_store_job_clear(&j);
  aa_store_close(st);
}

/* The WAL of a fresh store (its schema's commits) is truncated to 0 bytes
 * with every row kept; a reader on an older snapshot makes the checkpoint
 * answer 1 at once instead of waiting the busy timeout, and the next one,
 * once the reader is gone, completes. */
AA_TEST(checkpoint_truncates_the_wal_and_never_waits_for_a_reader) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512];
  cur_path(path);
  int64_t job = 0, bytes = -1, before = -1, after = -1;
  CHECK(aa_store_job_create(st, MODEL, HW, NULL, &job) == 0);
  CHECK(aa_store_wal_bytes(st, &bytes) == 0 && bytes > 0);

  sqlite3 *reader = NULL;
  CHECK(sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  CHECK(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM jobs;", NULL, NULL, NULL) == SQLITE_OK);
  CHECK(aa_store_job_create(st, MODEL, HW, NULL, &job) == 0); /* past the reader's snapshot */
  double t0 = aa_now();
  CHECK(aa_store_checkpoint(st, &before, &after) == 1);
  CHECK_MSG(aa_now() - t0 < AA_STORE_BUSY_MS / 4000.0, "waited %.3f s", aa_now() - t0);
  CHECK(before > 0 && after == before);
  sqlite3_exec(reader, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(reader);

  CHECK_MSG(aa_store_checkpoint(st, &before, &after) == 0, "%s", aa_last_error());
  CHECK(before > 0 && after == 0);
  CHECK(aa_store_wal_bytes(st, &bytes) == 0 && bytes == 0);
  aa_store_job_t j;
  CHECK(aa_store_job_get(st, job, &j) == 0 && j.status == AA_STORE_JOB_QUEUED);
  aa_store_job_clear(&j);
  CHECK(aa_store_checkpoint(st, NULL, NULL) == 0); /* an empty WAL: nothing to do, still 0 */
  aa_store_close(st);

  CHECK(aa_store_open(&st, path, AA_STORE_READONLY) == 0);
  if (st) {
    CHECK(aa_store_checkpoint(st, NULL, NULL) == AA_EINVAL);
    CHECK(strstr(aa_last_error(), "read-only") != NULL);
    aa_store_close(st);
  }
}

/* A write the disk refuses (here: past RLIMIT_FSIZE, which the WAL cannot
 * grow beyond) is counted and leaves the store failing until a write
 * commits; reads change neither. In a child, whose file size limit does
 * not reach the other tests; it exits with the number of the first check
 * that failed. */
AA_TEST(io_failures_count_a_refused_write_until_one_commits) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    aa_store_t *st = fresh_store();
    int64_t job = 0, bytes = 0;
    bool failing = true;
    if (!st || aa_store_io_failures(st, &failing) != 0 || failing) _exit(10);
    if (aa_store_wal_bytes(st, &bytes) || bytes <= 0) _exit(11);
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
    struct rlimit lim;
    if (getrlimit(RLIMIT_FSIZE, &lim)) _exit(12);
    struct rlimit small = {(rlim_t)bytes, lim.rlim_max};
    if (setrlimit(RLIMIT_FSIZE, &small)) _exit(13);
    if (aa_store_job_create(st, MODEL, HW, NULL, &job) != AA_EIO) _exit(14);
    if (aa_store_io_failures(st, &failing) != 1 || !failing) _exit(15);
    aa_store_model_t m;
    if (aa_store_model_get(st, MODEL, &m)) _exit(16);
    aa_store_model_clear(&m);
    if (aa_store_io_failures(st, &failing) != 1 || !failing) _exit(17);
    if (setrlimit(RLIMIT_FSIZE, &lim)) _exit(18);
    if (aa_store_job_create(st, MODEL, HW, NULL, &job)) _exit(19);
    if (aa_store_io_failures(st, &failing) != 1 || failing) _exit(20);
    if (aa_store_checkpoint(st, NULL, NULL) || aa_store_wal_bytes(st, &bytes) || bytes != 0) _exit(21);
    aa_store_close(st);
    _exit(0);
  }
  int status = -1;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed check %d",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

AA_TEST(commits_survive_sigkill_of_the_writer) {
  const char *p = fresh_path();
  char path[512];
  snprintf(path, sizeof path, "%s", p);
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    /* The child commits a job and a finished run, tells the parent, and
     * waits to be killed with its connection still open. */
    close(fds[0]);
    aa_store_t *st = NULL;
    int64_t job = 0, run = 0;
    aa_strategy_t s = strat(0, AA_F32, 4);
    int rc = aa_store_open(&st, path, 0);
    if (!rc) rc = aa_store_put_model(st, MODEL, "tiny", "{}", 1);
    if (!rc) rc = aa_store_put_hardware(st, HW, "{}");
    if (!rc) rc = aa_store_job_create(st, MODEL, HW, NULL, &job);
    if (!rc) rc = aa_store_job_start(st, job);
    aa_store_run_new_t nr = {
        .job_id = job, .kind = AA_STORE_RUN_DRYRUN, .strategy = &s, .status = AA_STORE_RUN_RUNNING};
    if (!rc) rc = aa_store_run_insert(st, &nr, &run);
    aa_store_run_result_t res = {.status = AA_STORE_RUN_OK, .tokens_per_s = 4321, .peak_bytes = 77};
    if (!rc) rc = aa_store_run_finish(st, run, &res);
    char c = rc ? 'E' : 'K';
    if (write(fds[1], &c, 1) != 1) _exit(2);
    for (;;)
      pause();
  }
  close(fds[1]);
  char c = 0;
  CHECK(read(fds[0], &c, 1) == 1 && c == 'K');
  close(fds[0]);
  kill(pid, SIGKILL);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  aa_store_run_t r;
  CHECK(aa_store_run_get(st, 1, &r) == 0 && r.status == AA_STORE_RUN_OK && r.tokens_per_s == 4321 &&
        r.peak_bytes == 77);
  aa_store_run_clear(&r);
  CHECK(answers(st, HW).n == 0); /* its search never finished */
  aa_store_recovery_t rec;
  CHECK(aa_store_recover(st, 0, &rec) == 0 && rec.jobs_interrupted == 1 && rec.runs_crashed == 0);
  aa_store_job_t j;
  CHECK(aa_store_job_get(st, 1, &j) == 0 && j.status == AA_STORE_JOB_INTERRUPTED);
  aa_store_job_clear(&j);
  aa_store_close(st);
}

/* --- queries and constraints ---------------------------------------------------------------------- */

AA_TEST(run_queries_filter_order_and_stop) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t j1 = new_job(st, HW), j2 = new_job(st, HW2);
  int64_t a = add_run(st, j1, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 1);
  int64_t b = add_run(st, j1, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OOM, 0, 1);
  int64_t c = add_run(st, j1, AA_STORE_RUN_DRYRUN, 12, AA_STORE_RUN_OK, 300, 1);
  int64_t d = add_run(st, j2, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 200, 1);
  int64_t e = add_run(st, j2, AA_STORE_RUN_TRAIN, 1, AA_STORE_RUN_OK, 250, 1);

  collected_t got = {0};
  CHECK(aa_store_runs_of_job(st, j1, collect_runs, &got) == 0);
  CHECK(got.n == 3 && got.ids[0] == a && got.ids[1] == b && got.ids[2] == c);

  got = (collected_t){0};
  aa_store_run_filter_t f = {.statuses = AA_STORE_BIT(AA_STORE_RUN_OK),
                             .kinds = AA_STORE_BIT(AA_STORE_RUN_DRYRUN),
                             .model_hash = MODEL,
                             .order = AA_STORE_ORDER_BEST};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &got) == 0);
  CHECK(got.n == 3 && got.ids[0] == c && got.ids[1] == d && got.ids[2] == a);

  got = (collected_t){0};
  f = (aa_store_run_filter_t){.hardware = HW2};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &got) == 0);
  CHECK(got.n == 2 && got.ids[0] == d && got.ids[1] == e);

  /* "mb1" is a prefix of "mb12": the key prefix is literal text. */
  got = (collected_t){0};
  f = (aa_store_run_filter_t){.key_prefix = "dp1.tp1.pp1.z0.fp32.ckpt-none.mb1", .job_id = j1};
  CHECK_MSG(aa_store_runs_query(st, &f, collect_runs, &got) == 0, "%s", aa_last_error());
  CHECK_MSG(got.n == 2 && got.ids[0] == a && got.ids[1] == c, "n %d", got.n);

  got = (collected_t){0};
  f = (aa_store_run_filter_t){.limit = 2};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &got) == 0 && got.n == 2);
  got = (collected_t){.stop_after = 1};
  CHECK(aa_store_runs_query(st, NULL, collect_runs, &got) == 42 && got.n == 1);
  got = (collected_t){0};
  f = (aa_store_run_filter_t){.statuses = AA_STORE_BIT(AA_STORE_RUN_OK) | AA_STORE_BIT(AA_STORE_RUN_OOM),
                              .kinds = AA_STORE_BIT(AA_STORE_RUN_DRYRUN),
                              .job_id = j1};
  CHECK(aa_store_runs_query(st, &f, collect_runs, &got) == 0 && got.n == 3);
  f = (aa_store_run_filter_t){.statuses = AA_STORE_BIT(20)};
  CHECK_ERR(aa_store_runs_query(st, &f, collect_runs, &got), AA_EINVAL, "run status filter: unknown value");
  aa_store_close(st);
}

/* A walk that keeps readable rows and unreadable ones apart. */
typedef struct {
  collected_t good;
  int nbad;
  int64_t bad[8];
  char why[8][128];
  int stop_with; /* what bad_row returns */
} walk_t;

static int walk_run(const aa_store_run_t *r, void *data) { return collect_runs(r, &((walk_t *)data)->good); }

static int walk_job(const aa_store_job_t *j, void *data) {
  collected_t *c = &((walk_t *)data)->good;
  if (c->n < 32) c->ids[c->n] = j->id;
  c->n++;
  return 0;
}

static int walk_bad(int64_t id, const char *why, void *data) {
  walk_t *w = data;
  if (w->nbad < 8) {
    w->bad[w->nbad] = id;
    snprintf(w->why[w->nbad], sizeof w->why[0], "%s", why);
  }
  w->nbad++;
  return w->stop_with;
}

AA_TEST(a_walk_reports_unreadable_rows_through_bad_row_and_goes_on) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char path[512];
  cur_path(path);
  int64_t j1 = new_job(st, HW), j2 = new_job(st, HW), j3 = new_job(st, HW2);
  int64_t a = add_run(st, j1, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_OK, 100, 1);
  int64_t b = add_run(st, j1, AA_STORE_RUN_DRYRUN, 2, AA_STORE_RUN_OK, 200, 1);
  int64_t c = add_run(st, j1, AA_STORE_RUN_DRYRUN, 3, AA_STORE_RUN_OK, 300, 1);
  int64_t d = add_run(st, j2, AA_STORE_RUN_DRYRUN, 4, AA_STORE_RUN_OK, 400, 1);
  force_sql(path, "UPDATE runs SET status = 'bogus' WHERE id = %lld", (long long)b);
  char want[96];
  snprintf(want, sizeof want, "run %lld has an unknown status 'bogus'", (long long)b);

  walk_t w = {0};
  aa_store_run_filter_t f = {.job_id = j1, .bad_row = walk_bad};
  CHECK_MSG(aa_store_runs_query(st, &f, walk_run, &w) == 0, "%s", aa_last_error());
  CHECK(w.good.n == 2 && w.good.ids[0] == a && w.good.ids[1] == c);
  CHECK(w.nbad == 1 && w.bad[0] == b);
  CHECK_MSG(strcmp(w.why[0], want) == 0, "%s", w.why[0]);

  /* Without bad_row the walk fails as it always did. */
  w = (walk_t){0};
  f.bad_row = NULL;
  CHECK_ERR(aa_store_runs_query(st, &f, walk_run, &w), AA_ECORRUPT, want);
  CHECK(w.good.n == 1 && w.nbad == 0);
  CHECK_ERR(aa_store_runs_of_job(st, j1, walk_run, &w), AA_ECORRUPT, want);
  aa_store_run_t r;
  CHECK_ERR(aa_store_run_get(st, b, &r), AA_ECORRUPT, want);

  /* An unknown kind too, in the best order over every run. */
  force_sql(path, "UPDATE runs SET kind = 'weird' WHERE id = %lld", (long long)d);
  w = (walk_t){0};
  f = (aa_store_run_filter_t){.order = AA_STORE_ORDER_BEST, .bad_row = walk_bad};
  CHECK(aa_store_runs_query(st, &f, walk_run, &w) == 0);
  CHECK(w.good.n == 2 && w.good.ids[0] == c && w.good.ids[1] == a && w.nbad == 2);
  snprintf(want, sizeof want, "run %lld has an unknown kind 'weird'", (long long)d);
  CHECK_MSG(w.bad[0] == d && strcmp(w.why[0], want) == 0, "%s", w.why[0]);

  /* A non-zero value from bad_row stops the walk with it. */
  w = (walk_t){.stop_with = 7};
  f = (aa_store_run_filter_t){.bad_row = walk_bad};
  CHECK(aa_store_runs_query(st, &f, walk_run, &w) == 7 && w.good.n == 1 && w.nbad == 1);

  /* Jobs. */
  force_sql(path, "UPDATE jobs SET status = 'paused' WHERE id = %lld", (long long)j2);
  snprintf(want, sizeof want, "job %lld has an unknown status 'paused'", (long long)j2);
  w = (walk_t){0};
  aa_store_job_filter_t jf = {.bad_row = walk_bad};
  CHECK_MSG(aa_store_jobs_list(st, &jf, walk_job, &w) == 0, "%s", aa_last_error());
  CHECK(w.good.n == 2 && w.good.ids[0] == j3 && w.good.ids[1] == j1);
  CHECK(w.nbad == 1 && w.bad[0] == j2);
  CHECK_MSG(strcmp(w.why[0], want) == 0, "%s", w.why[0]);
  w = (walk_t){0};
  CHECK_ERR(aa_store_jobs_list(st, NULL, walk_job, &w), AA_ECORRUPT, want);
  CHECK(w.good.n == 1);
  aa_store_close(st);
}

AA_TEST(pages_give_every_row_once_in_order) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int64_t job = new_job(st, HW);
  for (int i = 0; i < 10; i++) /* (i * 7) % 10: distinct speeds, in an order unlike the ids' */
    add_run(st, job, AA_STORE_RUN_DRYRUN, i + 1, AA_STORE_RUN_OK, 100 + (i * 7 % 10) * 10, 1);
  const aa_store_order_t orders[] = {AA_STORE_ORDER_ID, AA_STORE_ORDER_BEST};
  collected_t all[2] = {{0}, {0}};
  for (int o = 0; o < 2; o++) {
    aa_store_run_filter_t f = {.job_id = job, .order = orders[o]};
    CHECK(aa_store_runs_query(st, &f, collect_runs, &all[o]) == 0 && all[o].n == 10);
    collected_t paged = {0};
    for (int off = 0; off < 10; off += 3) { /* 0, 3, 6, 9 */
      f.offset = off;
      f.limit = 3;
      int before = paged.n;
      CHECK_MSG(aa_store_runs_query(st, &f, collect_runs, &paged) == 0, "%s", aa_last_error());
      CHECK_MSG(paged.n - before == (off < 9 ? 3 : 1), "order %d offset %d: %d rows", o, off,
                paged.n - before);
    }
    CHECK(paged.n == 10 && memcmp(paged.ids, all[o].ids, 10 * sizeof paged.ids[0]) == 0);
    /* A limit of 0 with an offset: the rest. */
    collected_t rest = {0};
    f.limit = 0;
    f.offset = 4;
    CHECK(aa_store_runs_query(st, &f, collect_runs, &rest) == 0);
    CHECK(rest.n == 6 && memcmp(rest.ids, all[o].ids + 4, 6 * sizeof rest.ids[0]) == 0);
    rest = (collected_t){0};
    f.offset = 10;
    CHECK(aa_store_runs_query(st, &f, collect_runs, &rest) == 0 && rest.n == 0);
  }
  CHECK(memcmp(all[0].ids, all[1].ids, 10 * sizeof all[0].ids[0]) != 0);
  aa_store_run_filter_t bad = {.offset = -1};
  collected_t none = {0};
  CHECK_ERR(aa_store_runs_query(st, &bad, collect_runs, &none), AA_EINVAL, "negative limit, offset");

  for (int i = 0; i < 4; i++)
    new_job(st, HW);
  int64_t ids[8] = {0}, paged[8] = {0};
  CHECK(aa_store_jobs_list(st, NULL, collect_job_ids, ids) == 0 && ids[0] == 5);
  for (int off = 0; off < 5; off += 2) {
    aa_store_job_filter_t jf = {.limit = 2, .offset = off};
    CHECK(aa_store_jobs_list(st, &jf, collect_job_ids, paged) == 0);
  }
  CHECK(paged[0] == 5 && memcmp(paged + 1, ids + 1, 5 * sizeof ids[0]) == 0);
  aa_store_job_filter_t jbad = {.offset = -2};
  CHECK_ERR(aa_store_jobs_list(st, &jbad, collect_job_ids, paged), AA_EINVAL, "negative limit or offset");
  aa_store_close(st);
}

AA_TEST(invalid_status_is_rejected_by_the_api_and_by_the_schema) {
  const char *p = fresh_path();
  char path[512];
  snprintf(path, sizeof path, "%s", p);
  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, path, 0);
  if (!rc) rc = aa_store_put_model(st, MODEL, "tiny", "{}", 1);
  if (!rc) rc = aa_store_put_hardware(st, HW, "{}");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (rc) return;
  int64_t job = new_job(st, HW);
  int64_t run = add_run(st, job, AA_STORE_RUN_DRYRUN, 1, AA_STORE_RUN_RUNNING, 0, 0);
  aa_store_run_result_t res = {.status = (aa_store_run_status_t)42};
  CHECK_ERR(aa_store_run_finish(st, run, &res), AA_EINVAL, "invalid run status 42");
  CHECK_ERR(aa_store_job_finish(st, job, (aa_store_job_status_t)17, 0, 0, NULL), AA_EINVAL,
            "invalid job status 17");
  aa_store_job_status_t js;
  CHECK_ERR(aa_store_job_status_parse(&js, "finished"), AA_EINVAL, "one of: queued, running, done");
  aa_store_run_status_t rs = AA_STORE_RUN_QUEUED;
  CHECK(aa_store_run_status_parse(&rs, "oom") == 0 && rs == AA_STORE_RUN_OOM);
  for (int i = 0; i < AA_STORE_RUN_NSTATUS; i++)
    CHECK(aa_store_run_status_parse(&rs, aa_store_run_status_name((aa_store_run_status_t)i)) == 0 &&
          (int)rs == i);
  CHECK(aa_store_run_status_name((aa_store_run_status_t)-1) == NULL);

  /* Writers that bypass the API (the sqlite3 shell) meet the same rules. */
  char msg[256];
  char sql[128];
  snprintf(sql, sizeof sql, "UPDATE runs SET status = 'exploded' WHERE id = %lld", (long long)run);
  CHECK((raw_sql(path, sql, msg, sizeof msg) & 0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "CHECK constraint failed: run_status_known"), "%s", msg);
  CHECK((raw_sql(path, "UPDATE jobs SET status = 'paused'", msg, sizeof msg) & 0xff) == SQLITE_CONSTRAINT);
  CHECK_MSG(strstr(msg, "job_status_known"), "%s", msg);
  /* And a CHECK failure reached through the API says which rule failed. */
  CHECK_ERR(aa_store_put_model(st, MODEL, "tiny", "{not json", 1), AA_EINVAL,
            "CHECK constraint failed: model_spec_is_json");
  CHECK_ERR(aa_store_put_model(st, MODEL, "tiny", "{not json", 1), AA_EINVAL, "put model " MODEL);
  aa_store_close(st);
}

/* Removes the temporary directory and the store files in it. */
static void remove_tmp_dir(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/aa_test_store_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(open_creates_the_newest_schema_in_wal_mode);
  RUN(reopen_keeps_data);
  RUN(newer_schema_version_is_refused);
  RUN(file_that_is_not_sqlite_is_refused_and_left_alone);
  RUN(a_file_that_is_not_sqlite_keeps_its_mode);
  RUN(links_and_fifos_at_the_store_names_are_refused_and_their_targets_untouched);
  RUN(database_of_another_application_is_refused);
  RUN(readonly_open_of_a_missing_file_fails);
  RUN(readonly_open_of_an_unmigrated_file_asks_for_a_migration);
  RUN(a_held_write_lock_fails_a_write_after_the_busy_timeout_but_not_reads);
  RUN(a_new_store_and_its_journal_files_are_private);
  RUN(open_tightens_store_files_that_group_or_others_can_read);
  RUN(a_journal_file_the_planner_cannot_write_is_named_with_the_fix);
  RUN(a_schema_version_1_store_migrates_to_the_newest_and_keeps_its_rows);
  RUN(a_schema_version_2_store_migrates_to_the_newest_and_its_runs_have_no_ranks_or_predictions);
  RUN(a_schema_version_4_store_migrates_to_5_with_no_calibrations_and_no_predicted_breakdowns);
  RUN(a_run_keeps_its_measured_moe_imbalance);
  RUN(a_schema_version_5_store_keeps_its_calibrations_and_takes_nccl_hosts);
  RUN(a_run_keeps_its_predicted_memory_and_bubble);
  RUN(a_run_keeps_its_predicted_breakdown);
  RUN(answers_read_the_predicted_breakdown_and_the_job_options_after_it);
  RUN(device_of_strips_the_pool_count_only);
  RUN(calibrations_put_get_replace_and_list_newest_first);
  RUN(an_import_keeps_measured_dates_and_is_all_or_nothing);
  RUN(a_calibration_with_bad_json_or_key_is_refused_and_nothing_is_written);
  RUN(rank_coordinates_are_an_object_by_axis_name);
  RUN(every_rank_of_a_run_round_trips_with_its_breakdown);
  RUN(bad_rank_figures_are_refused_and_nothing_is_written);
  RUN(model_and_hardware_upsert_keeps_created_at);
  RUN(job_lifecycle_sets_timestamps_and_refuses_bad_transitions);
  RUN(jobs_list_filters_newest_first);
  RUN(run_insert_and_finish_round_trip);
  RUN(answers_come_best_first_throughput_then_lower_peak_then_lower_id);
  RUN(answers_and_the_best_order_rank_a_remeasured_strategy_by_its_mean);
  RUN(answers_leave_out_failed_pruned_and_unfinished_runs);
  RUN(job_run_counts_count_each_status_in_one_query);
  RUN(a_queued_job_answered_from_the_store_is_done_with_from_store);
  RUN(only_runs_of_completed_searches_answer_from_the_store);
  RUN(recover_without_resumes_marks_running_jobs_interrupted_and_running_runs_crashed);
  RUN(recover_requeues_running_and_interrupted_jobs_until_max_resumes);
  RUN(commits_survive_sigkill_of_the_writer);
  RUN(checkpoint_truncates_the_wal_and_never_waits_for_a_reader);
  RUN(io_failures_count_a_refused_write_until_one_commits);
  RUN(run_queries_filter_order_and_stop);
  RUN(a_walk_reports_unreadable_rows_through_bad_row_and_goes_on);
  RUN(pages_give_every_row_once_in_order);
  RUN(invalid_status_is_rejected_by_the_api_and_by_the_schema);
  remove_tmp_dir();
  return aa_test_summary();
}
