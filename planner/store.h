/* The planner's store: one SQLite file (WAL mode) holding the models, the
 * hardware fingerprints, the jobs submitted to the planner, every run
 * (dry run or training) with its outcome, and the calibrations of
 * devices. Schema, versioning and durability: docs/store.md.
 *
 * Every call is one short transaction, so the daemon can make it from its
 * event-loop thread: writes take BEGIN IMMEDIATE and wait at most
 * AA_STORE_BUSY_MS for another writer; reads are single statements. One
 * aa_store_t belongs to one thread at a time.
 *
 * Errors: 0 or a negative AA_E* code with the reason (including SQLite's
 * message) in aa_last_error(). SQLite's codes map to: constraint -> AA_EINVAL,
 * not a database -> AA_EFORMAT, corrupt -> AA_ECORRUPT, no memory ->
 * AA_ENOMEM, cannot open -> AA_ENOENT, busy/locked/readonly/disk -> AA_EIO.
 * A missing job or run is AA_ENOENT. Out parameters are written only on
 * success.
 *
 * Strings in returned structs: in a struct filled by a *_get call they are
 * heap copies owned by the struct, released
 * by the matching *_clear; in a struct passed to a callback they are borrowed
 * from the store and valid only until the callback returns. Absent text
 * columns read as "" (never NULL). */
#ifndef AA_STORE_H
#define AA_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/aa.h"
#include "../proto/msg.h"
#include "../strategies/strategy.h"

#define AA_STORE_SCHEMA_VERSION 8 /* the newest schema this build writes */
#define AA_STORE_BUSY_MS 2000     /* longest wait for another connection's write lock */
#define AA_STORE_HASH_MAX 65      /* model hash: 1..64 characters + NUL */
#define AA_STORE_HW_MAX 128       /* hardware fingerprint: 1..127 characters + NUL */
#define AA_STORE_NAME_MAX 128     /* model name, cut to fit */

typedef struct aa_store aa_store_t;

typedef enum {
  AA_STORE_JOB_QUEUED = 0,
  AA_STORE_JOB_RUNNING,
  AA_STORE_JOB_DONE,
  AA_STORE_JOB_FAILED,
  AA_STORE_JOB_CANCELLED,
  AA_STORE_JOB_INTERRUPTED, /* the planner stopped while the job ran (aa_store_recover) */
  AA_STORE_JOB_NSTATUS
} aa_store_job_status_t;

typedef enum {
  AA_STORE_RUN_QUEUED = 0,
  AA_STORE_RUN_RUNNING,
  AA_STORE_RUN_OK,
  AA_STORE_RUN_OOM,
  AA_STORE_RUN_ERROR,
  AA_STORE_RUN_TIMEOUT,
  AA_STORE_RUN_CRASHED, /* the runner died, or the planner did (aa_store_recover) */
  AA_STORE_RUN_PRUNED,  /* never run: the search dropped it (reason in error) */
  AA_STORE_RUN_CANCELLED,
  AA_STORE_RUN_NSTATUS
} aa_store_run_status_t;

typedef enum { AA_STORE_RUN_DRYRUN = 0, AA_STORE_RUN_TRAIN = 1, AA_STORE_RUN_NKIND } aa_store_run_kind_t;

/* The text stored for a status or kind ("queued", "oom", "dryrun", ...);
 * NULL for a value out of range. */
const char *aa_store_job_status_name(aa_store_job_status_t s);
const char *aa_store_run_status_name(aa_store_run_status_t s);
const char *aa_store_run_kind_name(aa_store_run_kind_t k);
/* The reverse, for command-line filters: AA_EINVAL naming the accepted
 * values when `name` is none of them. *out is written only on success. */
int aa_store_job_status_parse(aa_store_job_status_t *out, const char *name);
int aa_store_run_status_parse(aa_store_run_status_t *out, const char *name);

/* --- opening -------------------------------------------------------------- */

#define AA_STORE_READONLY 1 /* open flag: no writes, no schema creation or migration */

/* Opens (creating it unless AA_STORE_READONLY) the store at `path`, sets WAL
 * mode, synchronous=NORMAL, foreign keys and the busy timeout, then brings
 * the schema up to AA_STORE_SCHEMA_VERSION, one transaction per migration
 * step.
 *
 * Read-write, before SQLite opens the file (the store holds every model
 * spec and measurement, so only its owner may read it), each of PATH,
 * PATH-wal and PATH-shm is opened without following a symbolic link and
 * without blocking, and checked before anything is done to it:
 *   a link, a FIFO, a directory or any other non-regular file at one of
 *   the three names fails with AA_EIO naming it (a link is never
 *   followed, so a planted one cannot make the planner change another
 *   file's mode);
 *   a missing database file is created with mode 0600 (SQLite gives the
 *   -wal and -shm files the database file's mode); the directory must
 *   exist (AA_ENOENT otherwise);
 *   a non-empty database file without SQLite's header is AA_EFORMAT;
 *   PATH-wal or PATH-shm that lacks the owner's write bit or cannot be
 *   opened for writing fails with AA_EIO naming the file, its mode and
 *   the fix (the state a failed start can leave; SQLite's own message
 *   would name no file);
 *   then PATH, PATH-wal and PATH-shm that group or others may read or
 *   write are tightened to the owner's bits (0644 -> 0600), through the
 *   descriptor that was checked, when this process's effective uid owns
 *   them, and fail with AA_EPERM naming the file and its owner when it
 *   does not.
 * SQLite is then asked not to follow a link either (SQLITE_OPEN_NOFOLLOW,
 * read-only opens too). Read-only opens change no file.
 *
 * Refuses, leaving the file's contents untouched:
 *   a file that is not SQLite (AA_EFORMAT),
 *   a SQLite file of another application (AA_EFORMAT),
 *   a schema newer than this build (AA_EUNSUPPORTED),
 *   read-only: a missing file (AA_ENOENT) or an older schema (AA_EUNSUPPORTED).
 * Does not touch jobs left running by a dead planner: aa_store_recover does.
 * *out (transferred; release with aa_store_close) is set only on success. */
int aa_store_open(aa_store_t **out, const char *path, int flags);

/* Finalizes the statements and closes the connection. NULL is a no-op. */
void aa_store_close(aa_store_t *st);

/* Schema version of the open file (AA_STORE_SCHEMA_VERSION once opened
 * read-write). */
int aa_store_schema_version(const aa_store_t *st);

/* What aa_store_recover changed. */
typedef struct aa_store_recovery {
  int jobs_requeued;    /* running or interrupted jobs queued again to resume their search */
  int jobs_interrupted; /* running jobs past the resume limit, now interrupted */
  int runs_crashed;     /* running runs, now crashed */
} aa_store_recovery_t;

/* For the planner at start-up, never for a reader such as `autoaccel query`
 * (a live planner's running jobs would be marked dead). In one transaction:
 *   every running run becomes crashed (error: "the planner stopped while
 *   the run was in flight" unless it had one);
 *   every running or interrupted job with resumes < max_resumes becomes
 *   queued again with resumes + 1, finished_at, best_run_id and error
 *   cleared, started_at kept;
 *   every running job left (resumes >= max_resumes) becomes interrupted,
 *   its error saying the planner stopped and, once it has been resumed,
 *   how many times and that it is not resumed again; interrupted jobs at
 *   the limit stay as they are;
 *   every queued run of a job that is no longer queued or running becomes
 *   cancelled.
 * max_resumes 0 never re-queues (a running job becomes interrupted);
 * negative is AA_EINVAL. Queued jobs stay queued for the planner to pick up
 * again. A re-queued job keeps its earlier runs (ok, failed, crashed, and
 * queued ones still queued): the planner reads them with
 * aa_store_runs_query (job_id set) to resume the search where it stopped,
 * then takes the job through aa_store_job_start as any queued job.
 * *out (may be NULL) is written only on success. */
int aa_store_recover(aa_store_t *st, int max_resumes, aa_store_recovery_t *out);

/* --- models and hardware ------------------------------------------------ */

typedef struct aa_store_model {
  char hash[AA_STORE_HASH_MAX];
  char name[AA_STORE_NAME_MAX];
  int64_t params;
  int64_t created_at; /* unix seconds */
  char *spec_json;    /* owned; aa_store_model_clear frees it */
} aa_store_model_t;

typedef struct aa_store_hardware {
  char fingerprint[AA_STORE_HW_MAX];
  int64_t created_at;
  char *description_json; /* owned; aa_store_hardware_clear frees it */
} aa_store_hardware_t;

/* Inserts or updates (name, spec, params; created_at kept) a model keyed by
 * its canonical hash. spec_json (borrowed) must be valid JSON; name may be
 * NULL. */
int aa_store_put_model(aa_store_t *st, const char *hash, const char *name, const char *spec_json,
                       int64_t params);
/* Inserts or updates a hardware fingerprint; description_json (borrowed,
 * valid JSON) says what the devices are. */
int aa_store_put_hardware(aa_store_t *st, const char *fingerprint, const char *description_json);

/* AA_ENOENT when there is no such row. */
int aa_store_model_get(aa_store_t *st, const char *hash, aa_store_model_t *out);
int aa_store_hardware_get(aa_store_t *st, const char *fingerprint, aa_store_hardware_t *out);
void aa_store_model_clear(aa_store_model_t *m);
void aa_store_hardware_clear(aa_store_hardware_t *h);

/* --- jobs ------------------------------------------------------------------- */

typedef struct aa_store_job {
  int64_t id;
  char model_hash[AA_STORE_HASH_MAX];
  char hardware[AA_STORE_HW_MAX];
  aa_store_job_status_t status;
  int64_t best_run_id;                           /* 0 = none */
  int from_store;                                /* 1: answered from earlier runs, no dry run */
  int64_t submitted_at, started_at, finished_at; /* unix seconds, 0 = not yet */
  int resumes;              /* times aa_store_recover queued it again after the planner stopped */
  const char *options_json; /* "" if none; ownership: see the top of this file */
  const char *error;        /* "" if none */
  const char *note;         /* "" if none: how sure the search is of its pick (version 5) */
} aa_store_job_t;

/* Creates a queued job for a model and hardware already put in the store
 * (AA_EINVAL otherwise). options_json (borrowed, may be NULL) holds the
 * submit options. *job_id is set only on success. */
int aa_store_job_create(aa_store_t *st, const char *model_hash, const char *hardware,
                        const char *options_json, int64_t *job_id);

/* queued -> running; sets started_at unless it is already set (a job
 * re-queued by aa_store_recover keeps its first start). AA_EINVAL if the
 * job is not queued; AA_ENOENT if there is no such job. */
int aa_store_job_start(aa_store_t *st, int64_t job_id);

/* queued or running -> status (done, failed, cancelled or interrupted); sets
 * finished_at, best_run_id (0 = none; else it must be a run in the store),
 * from_store and error (borrowed, may be NULL). AA_EINVAL if the job has
 * already finished or the status is not a final one; AA_ENOENT if there is
 * no such job. */
int aa_store_job_finish(aa_store_t *st, int64_t job_id, aa_store_job_status_t status, int64_t best_run_id,
                        int from_store, const char *error);

/* Sets the job's note (borrowed, NULL clears it): the search's verdict on
 * its pick, e.g. "best X: 1.07x the runner-up Y, spread 3 %". AA_ENOENT if
 * there is no such job. */
int aa_store_job_set_note(aa_store_t *st, int64_t job_id, const char *note);

/* Fills *out (strings owned: aa_store_job_clear). AA_ENOENT if none. */
int aa_store_job_get(aa_store_t *st, int64_t job_id, aa_store_job_t *out);
void aa_store_job_clear(aa_store_job_t *j);

/* A set of statuses or kinds for the filters: AA_STORE_BIT(AA_STORE_RUN_OK)
 * | AA_STORE_BIT(AA_STORE_RUN_OOM); 0 = any. */
#define AA_STORE_BIT(x) (1u << (unsigned)(x))

/* Called by a walk (aa_store_jobs_list, aa_store_runs_query) for a row it
 * cannot read (an unknown status or kind: a manual edit with
 * ignore_check_constraints, or corruption), with the row's id, a message
 * such as "run 5 has an unknown status 'bogus'" (borrowed until it
 * returns) and the walk's `data`. It must not call into the same store.
 * Returns 0 to go on with the next row, non-zero to stop the walk with
 * that value. */
typedef int (*aa_store_bad_row_cb)(int64_t id, const char *why, void *data);

/* Filters; a zeroed filter matches everything. */
typedef struct aa_store_job_filter {
  const char *model_hash; /* NULL = any */
  const char *hardware;   /* NULL = any */
  unsigned statuses;      /* AA_STORE_BIT(aa_store_job_status_t) set; 0 = any */
  int limit;              /* 0 = no limit */
  int64_t offset;         /* rows to skip after ordering, before the limit; 0 = none */
  /* NULL: a row that cannot be read fails the walk with AA_ECORRUPT.
   * Set: it is reported here and the walk goes on. */
  aa_store_bad_row_cb bad_row;
} aa_store_job_filter_t;

/* Called per row; strings borrowed until it returns. It must not call into
 * the same store. Returns 0 to go on, non-zero to stop. */
typedef int (*aa_store_job_cb)(const aa_store_job_t *job, void *data);

/* Jobs matching the filter (NULL = all), newest first, skipping `offset`
 * of them and then stopping after `limit` (pages: offset 0, n, 2n, ...
 * with limit n). AA_EINVAL for a negative limit or offset or a status set
 * with unknown bits. Returns 0, a store error, AA_ECORRUPT for an
 * unreadable row when the filter has no bad_row, or the non-zero value of
 * cb or bad_row that stopped the walk. */
int aa_store_jobs_list(aa_store_t *st, const aa_store_job_filter_t *f, aa_store_job_cb cb, void *data);

/* --- runs --------------------------------------------------------------- */

typedef struct aa_store_run {
  int64_t id, job_id;
  char model_hash[AA_STORE_HASH_MAX];
  char hardware[AA_STORE_HW_MAX];
  aa_store_run_kind_t kind;
  char strategy_key[AA_STRATEGY_KEY_MAX];
  aa_store_run_status_t status;
  /* Measurements; 0 = not recorded (stored as NULL). */
  double tokens_per_s;
  double step_ms_median, step_ms_spread; /* spread: (max - min) over the measured steps */
  int64_t peak_bytes;                    /* per rank, the largest over ranks */
  double predicted_tokens_per_s;         /* the cost model's prediction */
  int64_t predicted_peak_bytes;          /* the cost model's bytes of its most loaded rank (schema 4) */
  double predicted_bubble;               /* the cost model's pipeline bubble, a share of the step (schema 4) */
  double final_loss;
  int64_t started_at, finished_at; /* unix seconds, 0 = not yet */
  const char *strategy_json;       /* ownership: see the top of this file */
  const char *peak_json;           /* bytes by kind, "" if none */
  const char *error;               /* "" if none; for pruned: why */
  const char *predicted_json;      /* the cost model's breakdown when dispatched (schema 5), "" if none */
  double moe_imbalance;            /* an MoE dry run's measured router load imbalance (schema 8), 0 = none */
} aa_store_run_t;

/* A run as the search creates it. */
typedef struct aa_store_run_new {
  int64_t job_id; /* model and hardware are taken from the job */
  aa_store_run_kind_t kind;
  const aa_strategy_t *strategy; /* borrowed; the key and JSON are derived here */
  aa_store_run_status_t status;  /* queued, running (started now) or pruned (finished now) */
  double predicted_tokens_per_s; /* 0 = none */
  int64_t predicted_peak_bytes;  /* 0 = none */
  double predicted_bubble;       /* 0..1 (0 = none, or no pipeline) */
  const char *error;             /* borrowed, may be NULL: the reason a run was pruned */
  /* Borrowed, NULL or "" = none: the calibrated model's breakdown of the
   * predicted step (docs/store.md "runs.predicted_json"), valid JSON. */
  const char *predicted_json;
} aa_store_run_new_t;

/* One rank's own figures in a run (table run_ranks): what its executor
 * reported, kept besides the run's (the gang's as its slowest rank saw
 * them). */
typedef struct aa_store_run_rank {
  int rank;                      /* 0..AA_PROTO_WORLD_MAX-1, its place in the gang */
  int coord[AA_AXES];            /* its mesh coordinates by aa_axis_t, 0..AA_PROTO_WORLD_MAX-1 */
  aa_store_run_status_t status;  /* ok, oom, error, timeout, crashed or cancelled */
  double tokens_per_s;           /* 0 = not recorded (NULL), as in runs */
  double step_ms_median, step_ms_spread;
  bool has_times;                      /* the rank timed steps: time_ms holds its breakdown (0 is a 0) */
  double time_ms[AA_PROTO_TIME_KINDS]; /* mean ms per step by aa_proto_time_kind_t; stored NULL without
                                          has_times */
  int64_t peak_bytes;                  /* its own peak; 0 = not recorded */
  const char *peak_json; /* bytes by kind, "" or NULL if none; ownership: see the top of this file */
  const char *error;     /* "" or NULL if none */
} aa_store_run_rank_t;

/* The outcome an executor reports. */
typedef struct aa_store_run_result {
  aa_store_run_status_t status; /* ok, oom, error, timeout, crashed or cancelled */
  double tokens_per_s;          /* > 0 required when ok */
  double step_ms_median, step_ms_spread;
  int64_t peak_bytes;
  const char *peak_json; /* borrowed, may be NULL; valid JSON */
  double final_loss;
  const char *error; /* borrowed, may be NULL */
  /* An MoE run's router load imbalance (strategies/predict.h
   * aa_predict_imbalance): >= 1, or 0 = none (NULL). */
  double moe_imbalance;
  /* Every rank's own figures (borrowed; n_ranks 0 = none, as for a run
   * stopped by the planner), distinct ranks. */
  const aa_store_run_rank_t *ranks;
  int n_ranks;
} aa_store_run_result_t;

/* The router load imbalance the runs of model_hash measured
 * (runs.moe_imbalance): their mean into *mean and how many into *n (0 and
 * 0 when none did). AA_EINVAL for a bad hash. */
int aa_store_moe_imbalance(aa_store_t *st, const char *model_hash, double *mean, int *n);

/* Inserts a run of a queued or running job (AA_ENOENT if there is no such
 * job, AA_EINVAL if it has finished or the status is not queued, running or
 * pruned). *run_id is set only on success. */
int aa_store_run_insert(aa_store_t *st, const aa_store_run_new_t *r, int64_t *run_id);

/* queued -> running; sets started_at. AA_EINVAL if the run is not queued. */
int aa_store_run_start(aa_store_t *st, int64_t run_id);

/* queued or running -> the result's status, with its measurements,
 * finished_at (started_at too if it was never set) and, in the same
 * transaction, one run_ranks row per entry of res->ranks. AA_EINVAL if the
 * run already finished (a duplicate report) or the result is inconsistent
 * (a rank's status not a result status, a rank or coordinate outside
 * 0..AA_PROTO_WORLD_MAX-1, a rank twice, a measurement negative or not
 * finite); AA_ENOENT if there is no such run. Nothing is written on
 * failure. */
int aa_store_run_finish(aa_store_t *st, int64_t run_id, const aa_store_run_result_t *res);

/* Called per rank of a run, in rank order; strings borrowed until it
 * returns. It must not call into the same store. Non-zero stops the walk. */
typedef int (*aa_store_rank_cb)(const aa_store_run_rank_t *rank, void *data);

/* The per-rank figures of a run (none for a run that is not finished, was
 * pruned, or was recorded before schema version 3). A row that cannot be
 * read (an unknown status) fails the walk with AA_ECORRUPT. Returns 0, a
 * store error, or the callback's non-zero value. */
int aa_store_run_ranks(aa_store_t *st, int64_t run_id, aa_store_rank_cb cb, void *data);

/* Fills *out (strings owned: aa_store_run_clear). AA_ENOENT if none. */
int aa_store_run_get(aa_store_t *st, int64_t run_id, aa_store_run_t *out);
void aa_store_run_clear(aa_store_run_t *r);

/* A measured run that may answer a new job of the same model and
 * hardware, and the stored options of the job that measured it (its submit
 * options and its model spec: the training settings it ran under). Both
 * are borrowed until the callback returns; it must not call the store.
 * Non-zero stops the walk. */
typedef int (*aa_store_answer_cb)(const aa_store_run_t *run, const char *measured_options_json, void *data);

/* The runs that may answer a job of (model, hardware) from the store, best
 * first (the highest mean tokens/s of the run's strategy over its job's ok
 * measurements of it, then the run's own tokens/s, then the lower
 * peak_bytes, then the lower id):
 * kind dryrun, status ok, of a job that ran its own search to the end
 * (status done, from_store 0). The runs of an interrupted, failed,
 * cancelled or live search never answer: they may have missed the best
 * strategy. The caller decides which run fits its job (its exclusions,
 * global batch, pool) and finishes the job with aa_store_job_finish (done,
 * from_store 1). Rows that cannot be read are passed over. Returns 0, a
 * store error, or the callback's non-zero value. */
int aa_store_answers(aa_store_t *st, const char *model_hash, const char *hardware, aa_store_answer_cb cb,
                     void *data);

/* The runs of one job counted by status in one query (what status
 * replies show); rows whose status the store does not know are counted in
 * *unreadable (may be NULL). Outputs are written only on success. */
int aa_store_job_run_counts(aa_store_t *st, int64_t job_id, int counts[AA_STORE_RUN_NSTATUS], int *unreadable);

typedef enum {
  AA_STORE_ORDER_ID = 0, /* oldest first */
  AA_STORE_ORDER_BEST,   /* measured first; the strategy's mean over its job's ok runs descending, then the
                            run's tokens/s, then peak_bytes, then id (as aa_store_answers) */
} aa_store_order_t;

/* A zeroed filter matches every run, oldest first. */
typedef struct aa_store_run_filter {
  int64_t job_id;         /* 0 = any */
  const char *model_hash; /* NULL = any */
  const char *hardware;   /* NULL = any */
  unsigned statuses;      /* AA_STORE_BIT(aa_store_run_status_t) set; 0 = any */
  unsigned kinds;         /* AA_STORE_BIT(aa_store_run_kind_t) set; 0 = any */
  const char *key_prefix; /* strategy keys starting with this; NULL = any */
  aa_store_order_t order;
  int limit;      /* 0 = no limit */
  int64_t offset; /* rows to skip after ordering, before the limit; 0 = none */
  /* NULL: a row that cannot be read fails the walk with AA_ECORRUPT.
   * Set: it is reported here and the walk goes on. */
  aa_store_bad_row_cb bad_row;
} aa_store_run_filter_t;

/* Called per row; strings borrowed until it returns. It must not call into
 * the same store. Returns 0 to go on, non-zero to stop. */
typedef int (*aa_store_run_cb)(const aa_store_run_t *run, void *data);

/* Runs matching the filter (NULL = all, oldest first), in its order,
 * skipping `offset` of them and then stopping after `limit` (pages: offset
 * 0, n, 2n, ... with limit n). AA_EINVAL for a negative limit, offset or
 * job id, an invalid order or a set with unknown bits. Returns 0, a store
 * error, AA_ECORRUPT for an unreadable row when the filter has no bad_row,
 * or the non-zero value of cb or bad_row that stopped the walk. */
int aa_store_runs_query(aa_store_t *st, const aa_store_run_filter_t *f, aa_store_run_cb cb, void *data);

/* The runs of one job, oldest first: aa_store_runs_query with job_id and
 * nothing else, so an unreadable row fails it with AA_ECORRUPT. A caller
 * that must go past such rows, or page, calls aa_store_runs_query with
 * .job_id and .bad_row (or .offset) set. AA_EINVAL for job_id <= 0. */
int aa_store_runs_of_job(aa_store_t *st, int64_t job_id, aa_store_run_cb cb, void *data);

/* --- calibrations ------------------------------------------------------------- */

#define AA_STORE_BACKEND_MAX 16 /* "shm", "nccl", "gloo", "self", "nccl-hosts" + NUL */

/* The device fingerprint of a hardware fingerprint: KIND:NAME:MEMORY_MiBxN
 * or KIND:NAME:MEMORY_MiBxN@H without its trailing "x<digits>" or
 * "x<digits>@<digits>" (the pool's count and hosts), so calibrations are
 * shared by every pool of that device, on one host or several. A
 * fingerprint without such a tail is copied whole. Written into device (cap
 * n > 0 bytes), cut to fit. */
void aa_store_device_of(const char *hardware, char *device, size_t n);

/* One stored calibration; strings borrowed (see the top of this file). */
typedef struct aa_store_calib {
  char device[AA_STORE_HW_MAX];
  char backend[AA_STORE_BACKEND_MAX];
  const char *json;   /* strategies/calib.h's aa_calib_to_json text */
  int64_t measured_at; /* unix seconds: the put that stored this JSON (an import: when it was measured) */
  int64_t updated_at;  /* unix seconds: the latest put or import */
} aa_store_calib_t;

/* Stores the calibration of (device, backend), replacing the JSON of an
 * earlier one; measured_at and updated_at become now on every put (a
 * caller that merges a new measurement into the old one puts the merged
 * JSON). device: 1..127 characters (aa_store_device_of); backend one of
 * "shm", "nccl", "gloo", "self", "nccl-hosts"; json (borrowed) valid JSON,
 * not checked against calib.h here. AA_EINVAL otherwise, naming the rule. */
int aa_store_calib_put(aa_store_t *st, const char *device, const char *backend, const char *json);

/* Stores n calibrations another store exported (`autoaccel calib
 * import`), in one transaction: all or none. Each row's device, backend
 * and json (borrowed) as for aa_store_calib_put; its measured_at (> 0) is
 * kept, the date it was measured elsewhere, and updated_at becomes now
 * (updated_at is ignored). A row of an existing key replaces it: the
 * caller decides beforehand what may be replaced (docs/service.md "Export
 * and import"). AA_EINVAL naming the first bad row, before anything is
 * written. */
int aa_store_calib_import(aa_store_t *st, const aa_store_calib_t *rows, size_t n);

/* The JSON of (device, backend): 0 and *json_out malloc'd (free() it), 1
 * and *json_out NULL when none is stored, or a negative error (*json_out
 * untouched). */
int aa_store_calib_get(aa_store_t *st, const char *device, const char *backend, char **json_out);

/* Called per calibration; strings borrowed until it returns. It must not
 * call into the same store. Non-zero stops the walk. */
typedef int (*aa_store_calib_cb)(const aa_store_calib_t *c, void *data);

/* The calibrations whose device starts with device_prefix ("cpu:", "cuda:",
 * a whole device; NULL or "" = all), the most recently updated first (then
 * by device, then backend). Returns 0, a store error, or the callback's
 * non-zero value. */
int aa_store_calib_list(aa_store_t *st, const char *device_prefix, aa_store_calib_cb cb, void *data);

/* --- the WAL ------------------------------------------------------------------ */

/* SQLite's own checkpoints (every 1000 pages, about 4 MiB of WAL) copy the
 * WAL into the database file and then write it again from its start, but
 * never shrink the file; on a filesystem smaller than that, the WAL alone
 * can fill it, and what it holds stays after room is made. These let the
 * planner give that room back (docs/store.md "Durability and concurrency"). */

/* Failures of this connection for lack of room or of the disk (SQLite's
 * FULL and IOERR codes, whatever the call) since it was opened. *failing
 * (may be NULL) is true while no write has committed since the latest of
 * them, false again once the store takes a write. */
uint64_t aa_store_io_failures(const aa_store_t *st, bool *failing);

/* The size in bytes of the store's WAL file (PATH-wal) into *bytes, 0 when
 * there is none. AA_EIO when it cannot be examined; *bytes is written only
 * on success. */
int aa_store_wal_bytes(aa_store_t *st, int64_t *bytes);

/* Copies every commit in the WAL into the database file and truncates the
 * WAL file to 0 bytes (PRAGMA wal_checkpoint(TRUNCATE)), without waiting
 * for other connections: it returns at once, having copied what it could,
 * when a reader still uses an older snapshot or another connection writes.
 * Returns 0 when the WAL was truncated; 1 when another connection kept it
 * from completing (the WAL keeps its size; try again later); AA_EIO when
 * the database file cannot grow (a full disk, which io_failures counts) or
 * the disk fails; AA_EINVAL on a store opened read-only. *wal_before and
 * *wal_after (either may be NULL) get the WAL's size around the call, on 0
 * and 1 only. It syncs the WAL and the database file, so the planner
 * calls it now and then (planner/wal.c), never per commit. */
int aa_store_checkpoint(aa_store_t *st, int64_t *wal_before, int64_t *wal_after);

#endif
