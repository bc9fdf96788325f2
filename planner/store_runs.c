/* Runs in the store: insert, start, finish, the best measured run, and the
 * filtered queries behind `autoaccel query`. */
#include "store_internal.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the current row of a statement selecting AA__RUN_COLS; strings
 * borrowed from the statement. A row that cannot be read (an unknown kind
 * or status) returns -1 with the reason in why (cap bytes), setting no
 * last-error message: the caller decides whether it fails. */
static int run_from_row(sqlite3_stmt *s, aa_store_run_t *r, char *why, size_t cap) {
  memset(r, 0, sizeof *r);
  r->id = sqlite3_column_int64(s, 0);
  r->job_id = sqlite3_column_int64(s, 1);
  aa__store_col_copy(s, 2, r->model_hash, sizeof r->model_hash);
  aa__store_col_copy(s, 3, r->hardware, sizeof r->hardware);
  int kind = aa__store_run_kind_of(aa__store_col_text(s, 4));
  if (kind < 0) {
    snprintf(why, cap, "run %lld has an unknown kind '%.40s'", (long long)r->id, aa__store_col_text(s, 4));
    return -1;
  }
  int status = aa__store_run_status_of(aa__store_col_text(s, 7));
  if (status < 0) {
    snprintf(why, cap, "run %lld has an unknown status '%.40s'", (long long)r->id, aa__store_col_text(s, 7));
    return -1;
  }
  aa__store_col_copy(s, 5, r->strategy_key, sizeof r->strategy_key);
  r->strategy_json = aa__store_col_text(s, 6);
  r->kind = (aa_store_run_kind_t)kind;
  r->status = (aa_store_run_status_t)status;
  r->tokens_per_s = sqlite3_column_double(s, 8);
  r->step_ms_median = sqlite3_column_double(s, 9);
  r->step_ms_spread = sqlite3_column_double(s, 10);
  r->peak_bytes = sqlite3_column_int64(s, 11);
  r->peak_json = aa__store_col_text(s, 12);
  r->predicted_tokens_per_s = sqlite3_column_double(s, 13);
  r->final_loss = sqlite3_column_double(s, 14);
  r->error = aa__store_col_text(s, 15);
  r->started_at = sqlite3_column_int64(s, 16);
  r->finished_at = sqlite3_column_int64(s, 17);
  r->predicted_peak_bytes = sqlite3_column_int64(s, 18);
  r->predicted_bubble = sqlite3_column_double(s, 19);
  r->predicted_json = aa__store_col_text(s, 20);
  r->moe_imbalance = sqlite3_column_double(s, 21);
  return 0;
}

/* Replaces the borrowed strings of *r by heap copies. On failure *r's
 * strings are left borrowed and nothing is allocated. */
static int run_own(aa_store_run_t *r) {
  char *sj = strdup(r->strategy_json), *pj = strdup(r->peak_json), *e = strdup(r->error);
  char *pr = strdup(r->predicted_json);
  if (!sj || !pj || !e || !pr) {
    free(sj);
    free(pj);
    free(e);
    free(pr);
    return aa_error(AA_ENOMEM, "store: out of memory");
  }
  r->strategy_json = sj;
  r->peak_json = pj;
  r->error = e;
  r->predicted_json = pr;
  return 0;
}

void aa_store_run_clear(aa_store_run_t *r) {
  if (!r) return;
  free((char *)r->strategy_json);
  free((char *)r->peak_json);
  free((char *)r->error);
  free((char *)r->predicted_json);
  r->strategy_json = r->peak_json = r->error = r->predicted_json = NULL;
}

/* Steps a lookup of at most one run into *out (owned strings). */
static int run_one(aa_store_t *st, sqlite3_stmt *s, const char *what, aa_store_run_t *out) {
  int rc = sqlite3_step(s);
  int err;
  aa_store_run_t r;
  char why[128];
  if (rc == SQLITE_ROW) {
    err = run_from_row(s, &r, why, sizeof why) ? aa_error(AA_ECORRUPT, "store %s: %s", st->path, why) : 0;
    if (!err) err = run_own(&r);
  } else if (rc == SQLITE_DONE) {
    err = aa_error(AA_ENOENT, "store %s: %s: not found", st->path, what);
  } else {
    err = aa__store_fail(st, rc, "%s", what);
  }
  aa__store_done(s);
  if (!err) *out = r;
  return err;
}

int aa_store_run_get(aa_store_t *st, int64_t run_id, aa_store_run_t *out) {
  char what[48];
  snprintf(what, sizeof what, "run %lld", (long long)run_id);
  sqlite3_bind_int64(st->st[AA__ST_RUN_GET], 1, run_id);
  return run_one(st, st->st[AA__ST_RUN_GET], what, out);
}

int aa_store_moe_imbalance(aa_store_t *st, const char *model_hash, double *mean, int *n) {
  int err = aa__store_check_key(model_hash, AA_STORE_HASH_MAX, "model hash");
  if (err) return err;
  sqlite3_stmt *s = st->st[AA__ST_MOE_IMBALANCE];
  sqlite3_bind_text(s, 1, model_hash, -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *n = sqlite3_column_int(s, 1);
    *mean = *n ? sqlite3_column_double(s, 0) : 0;
  } else {
    err = aa__store_fail(st, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc, "load imbalance of model %s",
                         model_hash);
  }
  aa__store_done(s);
  return err;
}

int aa_store_answers(aa_store_t *st, const char *model_hash, const char *hardware, aa_store_answer_cb cb,
                     void *data) {
  int err = aa__store_check_key(model_hash, AA_STORE_HASH_MAX, "model hash");
  if (!err) err = aa__store_check_key(hardware, AA_STORE_HW_MAX, "hardware fingerprint");
  if (err) return err;
  sqlite3_stmt *s = st->st[AA__ST_ANSWERS];
  sqlite3_bind_text(s, 1, model_hash, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, hardware, -1, SQLITE_TRANSIENT);
  int rc, stop = 0;
  while (!stop && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    aa_store_run_t r;
    char why[128];
    if (run_from_row(s, &r, why, sizeof why)) continue; /* a row that cannot be read answers nothing */
    stop = cb(&r, aa__store_col_text(s, AA__RUN_NCOLS), data);
  }
  if (!stop && rc != SQLITE_DONE) err = aa__store_fail(st, rc, "runs that answer model %s on %s", model_hash, hardware);
  aa__store_done(s);
  return err ? err : stop;
}

int aa_store_job_run_counts(aa_store_t *st, int64_t job_id, int counts[AA_STORE_RUN_NSTATUS], int *unreadable) {
  int c[AA_STORE_RUN_NSTATUS] = {0}, bad = 0, rc, err = 0;
  sqlite3_stmt *s = st->st[AA__ST_JOB_COUNTS];
  sqlite3_bind_int64(s, 1, job_id);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int k = aa__store_run_status_of(aa__store_col_text(s, 0));
    if (k < 0) bad += sqlite3_column_int(s, 1);
    else c[k] = sqlite3_column_int(s, 1);
  }
  if (rc != SQLITE_DONE) err = aa__store_fail(st, rc, "count the runs of job %lld", (long long)job_id);
  aa__store_done(s);
  if (err) return err;
  memcpy(counts, c, sizeof c);
  if (unreadable) *unreadable = bad;
  return 0;
}

/* After an UPDATE guarded by the run's current status changed no row:
 * says whether the run is missing or in the wrong state. */
static int run_not_changed(aa_store_t *st, int64_t run_id, const char *want) {
  sqlite3_stmt *s = st->st[AA__ST_RUN_STATUS];
  sqlite3_bind_int64(s, 1, run_id);
  int rc = sqlite3_step(s);
  int err;
  if (rc == SQLITE_ROW)
    err = aa_error(AA_EINVAL, "store %s: run %lld is %s, not %s", st->path, (long long)run_id,
                   aa__store_col_text(s, 0), want);
  else if (rc == SQLITE_DONE)
    err = aa_error(AA_ENOENT, "store %s: run %lld: not found", st->path, (long long)run_id);
  else
    err = aa__store_fail(st, rc, "run %lld", (long long)run_id);
  aa__store_done(s);
  return err;
}

/* Why a job refused a new run: missing or finished. */
static int run_job_refused(aa_store_t *st, int64_t job_id) {
  aa_store_job_t j;
  int err = aa_store_job_get(st, job_id, &j);
  if (err) return err;
  err = aa_error(AA_EINVAL, "store %s: job %lld is %s; runs can be added only to a queued or running job",
                 st->path, (long long)job_id, aa_store_job_status_name(j.status));
  aa_store_job_clear(&j);
  return err;
}

int aa_store_run_insert(aa_store_t *st, const aa_store_run_new_t *r, int64_t *run_id) {
  const char *kind = aa_store_run_kind_name(r->kind);
  if (!kind)
    return aa_error(AA_EINVAL, "run of job %lld: invalid kind %d", (long long)r->job_id, (int)r->kind);
  if (r->status != AA_STORE_RUN_QUEUED && r->status != AA_STORE_RUN_RUNNING &&
      r->status != AA_STORE_RUN_PRUNED) {
    const char *name = aa_store_run_status_name(r->status);
    return name ? aa_error(AA_EINVAL, "run of job %lld: a new run is queued, running or pruned, not %s",
                           (long long)r->job_id, name)
                : aa_error(AA_EINVAL, "run of job %lld: invalid run status %d", (long long)r->job_id,
                           (int)r->status);
  }
  if (!r->strategy) return aa_error(AA_EINVAL, "run of job %lld: no strategy", (long long)r->job_id);
  if (!(r->predicted_tokens_per_s >= 0) || isinf(r->predicted_tokens_per_s))
    return aa_error(AA_EINVAL, "run of job %lld: predicted tokens/s must be finite and >= 0",
                    (long long)r->job_id);
  if (r->predicted_peak_bytes < 0)
    return aa_error(AA_EINVAL, "run of job %lld: predicted peak bytes must be >= 0", (long long)r->job_id);
  if (!(r->predicted_bubble >= 0 && r->predicted_bubble < 1))
    return aa_error(AA_EINVAL, "run of job %lld: predicted bubble must be in [0, 1)", (long long)r->job_id);
  char key[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(r->strategy, key);
  char *json = NULL;
  int err = aa_strategy_to_json(r->strategy, &json);
  if (err) return err;
  if ((err = aa__store_begin(st))) {
    free(json);
    return err;
  }
  int64_t now = aa__store_now();
  sqlite3_stmt *s = st->st[AA__ST_RUN_INSERT];
  sqlite3_bind_int64(s, 1, r->job_id);
  sqlite3_bind_text(s, 2, kind, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, key, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 4, json, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 5, aa_store_run_status_name(r->status), -1, SQLITE_STATIC);
  aa__store_bind_real0(s, 6, r->predicted_tokens_per_s);
  aa__store_bind_text(s, 7, r->error);
  aa__store_bind_int0(s, 8, r->status == AA_STORE_RUN_RUNNING ? now : 0);
  aa__store_bind_int0(s, 9, r->status == AA_STORE_RUN_PRUNED ? now : 0);
  aa__store_bind_int0(s, 10, r->predicted_peak_bytes);
  aa__store_bind_real0(s, 11, r->predicted_bubble);
  aa__store_bind_text(s, 12, r->predicted_json && *r->predicted_json ? r->predicted_json : NULL);
  char what[64];
  snprintf(what, sizeof what, "insert run of job %lld", (long long)r->job_id);
  err = aa__store_exec(st, s, what);
  free(json);
  if (!err && sqlite3_changes(st->db) == 0) err = run_job_refused(st, r->job_id);
  int64_t id = sqlite3_last_insert_rowid(st->db);
  if (!err) err = aa__store_commit(st);
  if (err) {
    aa__store_rollback(st);
    return err;
  }
  *run_id = id;
  return 0;
}

int aa_store_run_start(aa_store_t *st, int64_t run_id) {
  int err = aa__store_begin(st);
  if (err) return err;
  sqlite3_stmt *s = st->st[AA__ST_RUN_START];
  sqlite3_bind_int64(s, 1, run_id);
  sqlite3_bind_int64(s, 2, aa__store_now());
  err = aa__store_exec(st, s, "start run");
  if (!err && sqlite3_changes(st->db) == 0) err = run_not_changed(st, run_id, "queued");
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

/* A measurement: finite and >= 0 (0 = not recorded). */
static int measure_ok(double v) { return v >= 0 && !isinf(v); }

static int coord_ok(int v) { return v >= 0 && v < AA_PROTO_WORLD_MAX; }

/* A rank's coordinates as the store keeps them, one member per axis named
 * as in common/axis.h: {"data":1,"tensor":0,"pipeline":0}. */
static void coords_json(const int coord[AA_AXES], char *out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "{");
  for (int a = 0; a < AA_AXES && o < cap; a++)
    o +=
        (size_t)snprintf(out + o, cap - o, "%s\"%s\":%d", a ? "," : "", aa_axis_name((aa_axis_t)a), coord[a]);
  if (o < cap) snprintf(out + o, cap - o, "}");
}

/* Reads coords_json's text back: an axis the object does not name is 0
 * (a rank of a run before that axis existed sat at its only place). A
 * member that is not an integer in 0..AA_PROTO_WORLD_MAX-1 is AA_ECORRUPT. */
static int coords_read(const char *text, int coord[AA_AXES]) {
  json_t *o = json_loads(text, 0, NULL);
  int err = json_is_object(o) ? 0 : AA_ECORRUPT;
  for (int a = 0; a < AA_AXES && !err; a++) {
    json_t *v = json_object_get(o, aa_axis_name((aa_axis_t)a));
    if (!v) {
      coord[a] = 0;
    } else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) < AA_PROTO_WORLD_MAX) {
      coord[a] = (int)json_integer_value(v);
    } else {
      err = AA_ECORRUPT;
    }
  }
  json_decref(o);
  return err;
}

/* Checks one rank's figures before they are written (the table's
 * constraints say the same, but the message here names the rank). */
static int check_rank(int64_t run_id, const aa_store_run_rank_t *k) {
  aa_store_run_status_t s = k->status;
  if (!aa_store_run_status_name(s) || s == AA_STORE_RUN_QUEUED || s == AA_STORE_RUN_RUNNING ||
      s == AA_STORE_RUN_PRUNED)
    return aa_error(AA_EINVAL, "run %lld rank %d: status %d is not a result status", (long long)run_id,
                    k->rank, (int)s);
  bool in_world = coord_ok(k->rank);
  for (int a = 0; a < AA_AXES; a++)
    in_world = in_world && coord_ok(k->coord[a]);
  if (!in_world) {
    char coords[32 * AA_AXES]; /* "dp 0, tp 0, pp 4096" */
    size_t o = 0;
    for (int a = 0; a < AA_AXES && o < sizeof coords; a++)
      o += (size_t)snprintf(coords + o, sizeof coords - o, "%s%s %d", a ? ", " : "",
                            aa_axis_info((aa_axis_t)a)->key, k->coord[a]);
    return aa_error(AA_EINVAL, "run %lld: rank %d (%s) is outside 0..%d", (long long)run_id, k->rank, coords,
                    AA_PROTO_WORLD_MAX - 1);
  }
  int ok = measure_ok(k->tokens_per_s) && measure_ok(k->step_ms_median) && measure_ok(k->step_ms_spread) &&
           k->peak_bytes >= 0;
  for (int t = 0; t < AA_PROTO_TIME_KINDS; t++)
    ok = ok && (!k->has_times || measure_ok(k->time_ms[t]));
  if (!ok)
    return aa_error(AA_EINVAL, "run %lld rank %d: measurements must be finite and not negative",
                    (long long)run_id, k->rank);
  return 0;
}

/* Checks a reported result before it is written. */
static int check_result(int64_t run_id, const aa_store_run_result_t *res) {
  aa_store_run_status_t s = res->status;
  const char *name = aa_store_run_status_name(s);
  if (!name) return aa_error(AA_EINVAL, "run %lld: invalid run status %d", (long long)run_id, (int)s);
  if (s == AA_STORE_RUN_QUEUED || s == AA_STORE_RUN_RUNNING || s == AA_STORE_RUN_PRUNED)
    return aa_error(AA_EINVAL, "run %lld: %s is not a result status", (long long)run_id, name);
  if (!measure_ok(res->tokens_per_s) || !measure_ok(res->step_ms_median) ||
      !measure_ok(res->step_ms_spread) || res->peak_bytes < 0 || isnan(res->final_loss) ||
      isinf(res->final_loss))
    return aa_error(AA_EINVAL, "run %lld: measurements must be finite and not negative", (long long)run_id);
  if (s == AA_STORE_RUN_OK && !(res->tokens_per_s > 0))
    return aa_error(AA_EINVAL, "run %lld: an ok run needs its tokens/s", (long long)run_id);
  if (res->moe_imbalance != 0 && !(res->moe_imbalance >= 1 && isfinite(res->moe_imbalance)))
    return aa_error(AA_EINVAL, "run %lld: a load imbalance of %g is not 0 (none) or at least 1",
                    (long long)run_id, res->moe_imbalance);
  if (res->n_ranks < 0 || res->n_ranks > AA_PROTO_WORLD_MAX || (res->n_ranks && !res->ranks))
    return aa_error(AA_EINVAL, "run %lld: %d ranks is outside 0..%d", (long long)run_id, res->n_ranks,
                    AA_PROTO_WORLD_MAX);
  for (int i = 0; i < res->n_ranks; i++) {
    int err = check_rank(run_id, &res->ranks[i]);
    if (err) return err;
  }
  return 0;
}

_Static_assert(AA_PROTO_TIME_KINDS == 6,
               "run_ranks has one time column per kind, forward_ms .. bubble_ms, all_to_all_ms");

/* Writes one rank's row of a run being finished (inside its transaction).
 * A rank given twice breaks the primary key: AA_EINVAL. */
static int rank_insert(aa_store_t *st, int64_t run_id, const aa_store_run_rank_t *k) {
  sqlite3_stmt *s = st->st[AA__ST_RANK_INSERT];
  char coords[32 * AA_AXES];
  coords_json(k->coord, coords, sizeof coords);
  sqlite3_bind_int64(s, 1, run_id);
  sqlite3_bind_int(s, 2, k->rank);
  sqlite3_bind_text(s, 3, coords, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 4, aa_store_run_status_name(k->status), -1, SQLITE_STATIC);
  aa__store_bind_real0(s, 5, k->tokens_per_s);
  aa__store_bind_real0(s, 6, k->step_ms_median);
  aa__store_bind_real0(s, 7, k->step_ms_spread);
  for (int t = 0; t < AA_PROTO_TIME_KINDS; t++) {
    if (k->has_times)
      sqlite3_bind_double(s, 8 + t, k->time_ms[t]);
    else
      sqlite3_bind_null(s, 8 + t);
  }
  aa__store_bind_int0(s, 14, k->peak_bytes);
  aa__store_bind_text(s, 15, k->peak_json && *k->peak_json ? k->peak_json : NULL);
  aa__store_bind_text(s, 16, k->error && *k->error ? k->error : NULL);
  char what[64];
  snprintf(what, sizeof what, "record rank %d of run %lld", k->rank, (long long)run_id);
  return aa__store_exec(st, s, what);
}

int aa_store_run_finish(aa_store_t *st, int64_t run_id, const aa_store_run_result_t *res) {
  int err = check_result(run_id, res);
  if (err) return err;
  if ((err = aa__store_begin(st))) return err;
  sqlite3_stmt *s = st->st[AA__ST_RUN_FINISH];
  sqlite3_bind_int64(s, 1, run_id);
  sqlite3_bind_text(s, 2, aa_store_run_status_name(res->status), -1, SQLITE_STATIC);
  aa__store_bind_real0(s, 3, res->tokens_per_s);
  aa__store_bind_real0(s, 4, res->step_ms_median);
  aa__store_bind_real0(s, 5, res->step_ms_spread);
  aa__store_bind_int0(s, 6, res->peak_bytes);
  aa__store_bind_text(s, 7, res->peak_json && *res->peak_json ? res->peak_json : NULL);
  aa__store_bind_real0(s, 8, res->final_loss);
  aa__store_bind_text(s, 9, res->error && *res->error ? res->error : NULL);
  sqlite3_bind_int64(s, 10, aa__store_now());
  aa__store_bind_real0(s, 11, res->moe_imbalance);
  char what[48];
  snprintf(what, sizeof what, "finish run %lld", (long long)run_id);
  err = aa__store_exec(st, s, what);
  if (!err && sqlite3_changes(st->db) == 0) err = run_not_changed(st, run_id, "queued or running");
  for (int i = 0; !err && i < res->n_ranks; i++)
    err = rank_insert(st, run_id, &res->ranks[i]);
  if (!err) err = aa__store_commit(st);
  if (err) aa__store_rollback(st);
  return err;
}

int aa_store_run_ranks(aa_store_t *st, int64_t run_id, aa_store_rank_cb cb, void *data) {
  sqlite3_stmt *s = st->st[AA__ST_RANKS_OF_RUN];
  sqlite3_bind_int64(s, 1, run_id);
  int rc = SQLITE_DONE, err = 0;
  while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    aa_store_run_rank_t k = {.rank = sqlite3_column_int(s, 0),
                             .tokens_per_s = sqlite3_column_double(s, 3),
                             .step_ms_median = sqlite3_column_double(s, 4),
                             .step_ms_spread = sqlite3_column_double(s, 5),
                             .has_times = sqlite3_column_type(s, 6) != SQLITE_NULL,
                             .peak_bytes = sqlite3_column_int64(s, 12),
                             .peak_json = aa__store_col_text(s, 13),
                             .error = aa__store_col_text(s, 14)};
    for (int t = 0; t < AA_PROTO_TIME_KINDS; t++)
      k.time_ms[t] = sqlite3_column_double(s, 6 + t);
    if (coords_read(aa__store_col_text(s, 1), k.coord)) {
      err = aa_error(AA_ECORRUPT, "store %s: run %lld rank %d has unreadable coordinates '%.60s'", st->path,
                     (long long)run_id, k.rank, aa__store_col_text(s, 1));
      break;
    }
    int status = aa__store_run_status_of(aa__store_col_text(s, 2));
    if (status < 0) {
      err = aa_error(AA_ECORRUPT, "store %s: run %lld rank %d has an unknown status '%.40s'", st->path,
                     (long long)run_id, k.rank, aa__store_col_text(s, 2));
      break;
    }
    k.status = (aa_store_run_status_t)status;
    err = cb(&k, data);
  }
  if (!err && rc != SQLITE_DONE) err = aa__store_fail(st, rc, "ranks of run %lld", (long long)run_id);
  aa__store_done(s);
  return err;
}

/* --- queries ----------------------------------------------------------------------- */

enum { Q_JOB = 1, Q_MODEL = 2, Q_HW = 4, Q_STATUS = 8, Q_KIND = 16, Q_PREFIX = 32, Q_BEST = 64 };

/* The statement for one filter shape (Q_* bits), prepared on first use. */
static int runq_stmt(aa_store_t *st, unsigned shape, sqlite3_stmt **out) {
  if (!st->runq[shape]) {
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT " AA__RUN_COLS " FROM runs WHERE 1%s%s%s%s%s%s ORDER BY %s LIMIT :limit OFFSET :offset",
             shape & Q_JOB ? " AND job_id = :job" : "", shape & Q_MODEL ? " AND model_hash = :model" : "",
             shape & Q_HW ? " AND hardware = :hw" : "",
             shape & Q_STATUS ? " AND status IN (SELECT value FROM json_each(:statuses))" : "",
             shape & Q_KIND ? " AND kind IN (SELECT value FROM json_each(:kinds))" : "",
             shape & Q_PREFIX ? " AND substr(strategy_key, 1, length(:prefix)) = :prefix" : "",
             shape & Q_BEST ? "tokens_per_s IS NULL, " AA__RUN_MEAN " DESC, tokens_per_s DESC, peak_bytes IS NULL, "
                              "peak_bytes, id"
                            : "id");
    int rc = sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st->runq[shape], NULL);
    if (rc != SQLITE_OK) return aa__store_fail(st, rc, "prepare run query");
  }
  *out = st->runq[shape];
  return 0;
}

/* Walks the rows of a bound run query: each readable row to cb, each
 * unreadable one to aa__store_bad_row. Returns 0, the first non-zero value
 * of either, or a store error; leaves the statement to the caller to
 * reset. */
static int runs_walk(aa_store_t *st, sqlite3_stmt *s, const aa_store_run_filter_t *f, aa_store_run_cb cb,
                     void *data) {
  int rc = SQLITE_DONE, err = 0;
  while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    aa_store_run_t r;
    char why[128];
    if (run_from_row(s, &r, why, sizeof why))
      err = aa__store_bad_row(st, f->bad_row, r.id, why, data);
    else
      err = cb(&r, data);
  }
  if (!err && rc != SQLITE_DONE) err = aa__store_fail(st, rc, "query runs");
  return err;
}

int aa_store_runs_query(aa_store_t *st, const aa_store_run_filter_t *f, aa_store_run_cb cb, void *data) {
  aa_store_run_filter_t all = {0};
  if (!f) f = &all;
  char statuses[160], kinds[32];
  int err = aa__store_set_json(f->statuses, aa__store_run_status_names, AA_STORE_RUN_NSTATUS, "run status",
                               statuses, sizeof statuses);
  if (!err)
    err = aa__store_set_json(f->kinds, aa__store_run_kind_names, AA_STORE_RUN_NKIND, "run kind", kinds,
                             sizeof kinds);
  if (err) return err;
  if (f->order != AA_STORE_ORDER_ID && f->order != AA_STORE_ORDER_BEST)
    return aa_error(AA_EINVAL, "run filter: invalid order %d", (int)f->order);
  if (f->limit < 0 || f->offset < 0 || f->job_id < 0)
    return aa_error(AA_EINVAL, "run filter: negative limit, offset or job id");
  unsigned shape = (f->job_id ? Q_JOB : 0) | (f->model_hash ? Q_MODEL : 0) | (f->hardware ? Q_HW : 0) |
                   (f->statuses ? Q_STATUS : 0) | (f->kinds ? Q_KIND : 0) | (f->key_prefix ? Q_PREFIX : 0) |
                   (f->order == AA_STORE_ORDER_BEST ? Q_BEST : 0);
  sqlite3_stmt *s = NULL;
  if ((err = runq_stmt(st, shape, &s))) return err;
  aa__store_bind_page(s, f->limit, f->offset);
  if (shape & Q_JOB) sqlite3_bind_int64(s, sqlite3_bind_parameter_index(s, ":job"), f->job_id);
  if (shape & Q_MODEL) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":model"), f->model_hash);
  if (shape & Q_HW) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":hw"), f->hardware);
  if (shape & Q_STATUS) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":statuses"), statuses);
  if (shape & Q_KIND) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":kinds"), kinds);
  if (shape & Q_PREFIX) aa__store_bind_text(s, sqlite3_bind_parameter_index(s, ":prefix"), f->key_prefix);
  err = runs_walk(st, s, f, cb, data);
  aa__store_done(s);
  return err;
}

int aa_store_runs_of_job(aa_store_t *st, int64_t job_id, aa_store_run_cb cb, void *data) {
  if (job_id <= 0) return aa_error(AA_EINVAL, "runs of job: invalid job id %lld", (long long)job_id);
  aa_store_run_filter_t f = {.job_id = job_id};
  return aa_store_runs_query(st, &f, cb, data);
}
