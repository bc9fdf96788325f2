/* Private to planner/store*.c: the store handle, its prepared statements
 * and the helpers that translate SQLite's status codes. */
#ifndef AA_STORE_INTERNAL_H
#define AA_STORE_INTERNAL_H

#include <sqlite3.h>

#include "store.h"

/* Statements prepared once at open (SQL text in store.c). */
enum {
  AA__ST_BEGIN = 0,
  AA__ST_COMMIT,
  AA__ST_ROLLBACK,
  AA__ST_PUT_MODEL,
  AA__ST_PUT_HW,
  AA__ST_GET_MODEL,
  AA__ST_GET_HW,
  AA__ST_JOB_CREATE,
  AA__ST_JOB_START,
  AA__ST_JOB_FINISH,
  AA__ST_JOB_GET,
  AA__ST_JOB_STATUS,
  AA__ST_RUN_INSERT,
  AA__ST_RUN_START,
  AA__ST_RUN_FINISH,
  AA__ST_RANK_INSERT,
  AA__ST_RANKS_OF_RUN,
  AA__ST_RUN_GET,
  AA__ST_RUN_STATUS,
  AA__ST_ANSWERS,
  AA__ST_JOB_COUNTS,
  AA__ST_RECOVER_RUNS,
  AA__ST_RECOVER_REQUEUE,
  AA__ST_RECOVER_JOBS,
  AA__ST_RECOVER_QUEUED,
  AA__ST_JOB_NOTE,
  AA__ST_CALIB_PUT,
  AA__ST_CALIB_GET,
  AA__ST_CALIB_LIST,
  AA__ST_MOE_IMBALANCE,
  AA__ST_N
};

/* Filter shapes of the list queries: one bit per filter that is set (and
 * one for the order), so each shape gets its own statement that can use the
 * indexes; prepared on first use and kept until close. */
#define AA__JOBQ_N 8
#define AA__RUNQ_N 128

struct aa_store {
  sqlite3 *db;
  char *path; /* for messages */
  int version;
  int readonly;
  sqlite3_stmt *st[AA__ST_N];
  sqlite3_stmt *jobq[AA__JOBQ_N];
  sqlite3_stmt *runq[AA__RUNQ_N];
  /* Failures for lack of room or of the disk (aa_store_io_failures): how
   * many, and whether the latest came after the latest committed write. */
  uint64_t io_failures;
  bool io_failing;
};

/* A run's strategy measured by its job: the mean tokens/s of the job's ok
 * runs of that strategy and kind. The search re-measures its leaders in
 * fresh processes and picks by this mean (docs/service.md "Jobs"), so
 * whatever ranks runs as "best" ranks by it first: one lucky measurement
 * of a runner-up does not outrank the pick. */
#define AA__RUN_MEAN                                                                                         \
  "(SELECT avg(m.tokens_per_s) FROM runs m WHERE m.job_id = runs.job_id AND m.kind = runs.kind"              \
  " AND m.strategy_key = runs.strategy_key AND m.status = 'ok')"

/* Column lists shared by the statements that read whole rows. */
#define AA__JOB_COLS                                                                                         \
  "id, model_hash, hardware, status, options_json, best_run_id, from_store, error, submitted_at, "           \
  "started_at, finished_at, resumes, note"
#define AA__RUN_COLS                                                                                         \
  "id, job_id, model_hash, hardware, kind, strategy_key, strategy_json, status, tokens_per_s, "              \
  "step_ms_median, step_ms_spread, peak_bytes, peak_json, predicted_tokens_per_s, final_loss, error, "       \
  "started_at, finished_at, predicted_peak_bytes, predicted_bubble, predicted_json, moe_imbalance"
/* How many columns AA__RUN_COLS has: a statement that selects more puts
 * them from this index on. */
#define AA__RUN_NCOLS 22

#define AA__RANK_COLS                                                                                        \
  "rank, coords, status, tokens_per_s, step_ms_median, step_ms_spread, forward_ms, backward_ms, "            \
  "optimizer_ms, pipeline_comm_ms, bubble_ms, all_to_all_ms, peak_bytes, peak_json, error"

/* Translates a SQLite status (rc, with sqlite3_errmsg of st's connection)
 * into an AA_E* code and sets the last-error message
 * "store PATH: CONTEXT: SQLITE MESSAGE". Returns the code. A full disk or
 * an I/O error (SQLITE_FULL, SQLITE_IOERR) is counted in io_failures. */
int aa__store_fail(aa_store_t *st, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* BEGIN IMMEDIATE (waits up to the busy timeout for the write lock),
 * COMMIT (a success clears io_failing), ROLLBACK. Rollback never fails
 * loudly: it runs on error paths, after the message has been set. */
int aa__store_begin(aa_store_t *st);
int aa__store_commit(aa_store_t *st);
void aa__store_rollback(aa_store_t *st);

/* Steps a statement that returns no row (or whose rows are ignored), then
 * resets it and clears its bindings. Returns 0 or a translated error. A
 * write outside a transaction that succeeds clears io_failing, as a
 * commit does. */
int aa__store_exec(aa_store_t *st, sqlite3_stmt *s, const char *what);

/* A row a walk could not read (why: "run 5 has an unknown status 'x'"):
 * reported through bad_row, whose value is returned (0 goes on), or, when
 * bad_row is NULL, AA_ECORRUPT with "store PATH: WHY" as the message. */
int aa__store_bad_row(aa_store_t *st, aa_store_bad_row_cb bad_row, int64_t id, const char *why, void *data);

/* Binds the LIMIT and OFFSET of a list query (limit 0 = none). */
void aa__store_bind_page(sqlite3_stmt *s, int limit, int64_t offset);

/* Binds text, or NULL when v is NULL. */
int aa__store_bind_text(sqlite3_stmt *s, int i, const char *v);
/* Binds v, or NULL when v is 0 ("not recorded"). */
int aa__store_bind_real0(sqlite3_stmt *s, int i, double v);
int aa__store_bind_int0(sqlite3_stmt *s, int i, int64_t v);
/* Resets a statement and clears its bindings (after a read). */
void aa__store_done(sqlite3_stmt *s);

/* Column i as text, "" when NULL; valid until the statement steps or
 * resets. */
const char *aa__store_col_text(sqlite3_stmt *s, int i);
/* Copies column i into dst (cap bytes), cut to fit. */
void aa__store_col_copy(sqlite3_stmt *s, int i, char *dst, size_t cap);

/* Current time in unix seconds. */
int64_t aa__store_now(void);

/* Checks a key argument (model hash or fingerprint): non-NULL, 1..cap-1
 * characters. `what` names it in the message. */
int aa__store_check_key(const char *v, size_t cap, const char *what);

/* Writes the names of the members of a status/kind set as a JSON array
 * (for "x IN (SELECT value FROM json_each(?))") into buf. AA_EINVAL naming
 * `what` if the set has a bit at or beyond n. */
int aa__store_set_json(unsigned set, const char *const *names, int n, const char *what, char *buf,
                       size_t cap);

/* The stored texts, indexed by the enums. */
extern const char *const aa__store_job_status_names[AA_STORE_JOB_NSTATUS];
extern const char *const aa__store_run_status_names[AA_STORE_RUN_NSTATUS];
extern const char *const aa__store_run_kind_names[AA_STORE_RUN_NKIND];

/* Status text -> enum; -1 for an unknown text. */
int aa__store_job_status_of(const char *name);
int aa__store_run_status_of(const char *name);
int aa__store_run_kind_of(const char *name);

#endif
