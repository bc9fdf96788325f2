/* The JSON of the planner's replies: RUN, JOB, the planner-wide status and
 * the `query` answers, shaped exactly as docs/service.md "Replies" says.
 * Reads the store (short single statements) and the planner's registry;
 * writes nothing. */
#include "planner_internal.h"

#include "../common/json.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

char *aa__report_dump(const json_t *v) { return json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII); }

/* A number, or null when it was not recorded (the store's 0). */
static json_t *num0(double v) { return v != 0 ? json_real(v) : json_null(); }
static json_t *int0(int64_t v) { return v != 0 ? json_integer(v) : json_null(); }
static json_t *str0(const char *s) { return s && *s ? json_string(s) : json_null(); }

/* Parses JSON text the planner itself stored; null when empty or unreadable. */
static json_t *stored_json(const char *text) {
  if (!text || !*text) return json_null();
  json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
  return v ? v : json_null();
}

json_t *aa__report_run(const aa_store_run_t *r) {
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "id", json_integer(r->id));
  json_object_set_new(o, "job", json_integer(r->job_id));
  json_object_set_new(o, "kind", json_string(aa_store_run_kind_name(r->kind)));
  json_object_set_new(o, "key", json_string(r->strategy_key));
  json_object_set_new(o, "status", json_string(aa_store_run_status_name(r->status)));
  json_object_set_new(o, "tokens_per_s", num0(r->tokens_per_s));
  json_object_set_new(o, "step_ms_median", num0(r->step_ms_median));
  json_object_set_new(o, "step_ms_spread", num0(r->step_ms_spread));
  json_object_set_new(o, "peak_bytes", int0(r->peak_bytes));
  json_object_set_new(o, "peak", stored_json(r->peak_json));
  json_object_set_new(o, "predicted_tokens_per_s", num0(r->predicted_tokens_per_s));
  json_object_set_new(o, "predicted_peak_bytes", int0(r->predicted_peak_bytes));
  json_object_set_new(o, "predicted_bubble", num0(r->predicted_bubble));
  json_object_set_new(o, "predicted", stored_json(r->predicted_json));
  json_object_set_new(o, "final_loss", num0(r->final_loss));
  json_object_set_new(o, "moe_imbalance", num0(r->moe_imbalance));
  json_object_set_new(o, "error", str0(r->error));
  json_object_set_new(o, "started_at", int0(r->started_at));
  json_object_set_new(o, "finished_at", int0(r->finished_at));
  json_object_set_new(o, "strategy", stored_json(r->strategy_json));
  return o;
}

json_t *aa__report_run_or_null(aa_store_t *st, int64_t run_id) {
  aa_store_run_t r;
  if (run_id <= 0 || aa_store_run_get(st, run_id, &r)) return json_null();
  json_t *o = aa__report_run(&r);
  aa_store_run_clear(&r);
  return o ? o : json_null();
}

void aa__report_strategy_path(const char *home, const char *name, const char *hash, char *out, size_t n) {
  char clean[AA_STORE_NAME_MAX];
  size_t k = 0;
  for (const char *s = name ? name : ""; *s && k + 1 < sizeof clean; s++) {
    char ch = *s;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
             ch == '_' || ch == '-';
    clean[k++] = ok ? ch : '_';
  }
  clean[k] = 0;
  if (!k || clean[0] == '.') snprintf(clean, sizeof clean, "model");
  snprintf(out, n, "%s/strategies/%s-%s.json", home, clean, hash);
}


/* The documented submit options from the stored options JSON. */
static json_t *job_options(const json_t *stored, const char *home, int64_t id) {
  json_t *o = json_object();
  static const char *const flags[] = {"train", "refresh", "exhaustive"};
  for (size_t i = 0; i < 3; i++)
    json_object_set_new(o, flags[i], json_boolean(json_is_true(json_object_get(stored, flags[i]))));
  static const char *const ints[] = {"time_limit_s", "max_dryruns"};
  for (size_t i = 0; i < 2; i++) {
    json_t *v = json_object_get(stored, ints[i]);
    json_object_set_new(o, ints[i], json_integer(json_is_integer(v) ? json_integer_value(v) : 0));
  }
  json_t *ex = json_object_get(stored, "exclude");
  json_object_set_new(o, "exclude", json_is_array(ex) ? json_deep_copy(ex) : json_array());
  json_t *in = json_object_get(stored, "include");
  json_object_set_new(o, "include", json_is_array(in) ? json_deep_copy(in) : json_array());
  json_t *from = json_object_get(stored, "from");
  json_object_set_new(o, "from", json_is_object(from) ? json_deep_copy(from) : json_null());
  const char *out_dir = json_string_value(json_object_get(stored, "out_dir"));
  if (out_dir) {
    json_object_set_new(o, "out_dir", json_string(out_dir));
  } else if (json_is_true(json_object_get(stored, "train"))) {
    char dir[AA_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/runs/job-%lld", home, (long long)id);
    json_object_set_new(o, "out_dir", json_string(dir));
  } else {
    json_object_set_new(o, "out_dir", json_null());
  }
  return o;
}

int aa__report_job(aa_store_t *st, const char *home, int64_t id, json_t **out) {
  aa_store_job_t j;
  int rc = aa_store_job_get(st, id, &j);
  if (rc) return rc;
  int counts[AA_STORE_RUN_NSTATUS] = {0}, unreadable = 0;
  rc = aa_store_job_run_counts(st, id, counts, &unreadable);
  if (rc) {
    aa_store_job_clear(&j);
    return rc;
  }
  int total = unreadable;
  for (int k = 0; k < AA_STORE_RUN_NSTATUS; k++)
    total += counts[k];
  json_t *stored = stored_json(j.options_json);
  const char *name = json_string_value(json_object_get(json_object_get(stored, "spec"), "name"));
  aa_store_model_t m = {0};
  int have_model = !name && aa_store_model_get(st, j.model_hash, &m) == 0;
  if (have_model) name = m.name;

  json_t *o = json_object();
  json_object_set_new(o, "id", json_integer(j.id));
  json_object_set_new(o, "model", json_pack("{s:s?, s:s}", "name", name, "hash", j.model_hash));
  json_object_set_new(o, "hardware", str0(j.hardware));
  json_object_set_new(o, "status", json_string(aa_store_job_status_name(j.status)));
  json_object_set_new(o, "from_store", json_boolean(j.from_store));
  json_object_set_new(o, "submitted_at", int0(j.submitted_at));
  json_object_set_new(o, "started_at", int0(j.started_at));
  json_object_set_new(o, "finished_at", int0(j.finished_at));
  json_object_set_new(o, "options", job_options(stored, home, j.id));
  json_t *runs = json_object();
  json_object_set_new(runs, "total", json_integer(total));
  static const aa_store_run_status_t order[] = {AA_STORE_RUN_QUEUED, AA_STORE_RUN_RUNNING, AA_STORE_RUN_OK,
                                                AA_STORE_RUN_OOM,    AA_STORE_RUN_ERROR,   AA_STORE_RUN_TIMEOUT,
                                                AA_STORE_RUN_CRASHED, AA_STORE_RUN_PRUNED, AA_STORE_RUN_CANCELLED};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
    json_object_set_new(runs, aa_store_run_status_name(order[i]), json_integer(counts[order[i]]));
  if (unreadable) json_object_set_new(runs, "unreadable", json_integer(unreadable));
  json_object_set_new(o, "runs", runs);
  json_object_set_new(o, "best_run", int0(j.best_run_id));
  if (j.status == AA_STORE_JOB_DONE && j.best_run_id) {
    char path[AA_PATH_MAX + 256];
    aa__report_strategy_path(home, name, j.model_hash, path, sizeof path);
    json_object_set_new(o, "strategy_file", json_string(path));
  } else {
    json_object_set_new(o, "strategy_file", json_null());
  }
  json_object_set_new(o, "error", str0(j.error));
  json_object_set_new(o, "note", str0(j.note));
  if (have_model) aa_store_model_clear(&m);
  json_decref(stored);
  aa_store_job_clear(&j);
  *out = o;
  return 0;
}

/* --- query ---------------------------------------------------------------- */

typedef struct {
  json_t *list;
  json_t *unreadable; /* [{"id", "error"}] of rows the store could not read */
  int64_t *ids; /* jobs: ids collected first (callbacks may not call the store) */
  size_t n, cap;
  char seen_hw[64][AA_STORE_HW_MAX]; /* best: one run per hardware */
  size_t nhw;
  int per_hardware;
  long long page; /* rows a page holds (0 = no pages): the walk stops at the row after */
  long long rows; /* rows the walk gave, readable or not */
  bool more;      /* there is a row past the page */
} collect_t;

/* Counts a row against the page: false (and more set) for the row past it. */
static bool in_page(collect_t *c) {
  if (c->page && c->rows == c->page) {
    c->more = true;
    return false;
  }
  c->rows++;
  return true;
}

/* A row that cannot be read is named in the answer, and the rest served. */
static int collect_bad(int64_t id, const char *why, void *data) {
  collect_t *c = data;
  if (!in_page(c)) return 1;
  if (!c->unreadable) c->unreadable = json_array();
  json_array_append_new(c->unreadable, json_pack("{s:I, s:s}", "id", (json_int_t)id, "error", why));
  return 0;
}

/* Puts "unreadable" into out when some rows could not be read. */
static void put_unreadable(json_t *out, collect_t *c) {
  if (c->unreadable) json_object_set_new(out, "unreadable", c->unreadable);
  c->unreadable = NULL;
}

static int collect_run(const aa_store_run_t *r, void *data) {
  collect_t *c = data;
  if (!in_page(c)) return 1;
  if (c->per_hardware) {
    for (size_t i = 0; i < c->nhw; i++)
      if (!strcmp(c->seen_hw[i], r->hardware)) return 0;
    if (c->nhw == 64) return 1;
    snprintf(c->seen_hw[c->nhw++], AA_STORE_HW_MAX, "%s", r->hardware);
  }
  json_t *o = aa__report_run(r);
  if (!o || json_array_append_new(c->list, o)) return AA_ENOMEM;
  return 0;
}

static int collect_job(const aa_store_job_t *j, void *data) {
  collect_t *c = data;
  if (!in_page(c)) return 1;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 32;
    int64_t *ids = realloc(c->ids, cap * sizeof *ids);
    if (!ids) return AA_ENOMEM;
    c->ids = ids;
    c->cap = cap;
  }
  c->ids[c->n++] = j->id;
  return 0;
}

int aa__query_check_keys(const char *what, const json_t *args, const char *const *allowed) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)args, key, v) {
    size_t i = 0;
    while (allowed[i] && strcmp(allowed[i], key)) i++;
    if (!allowed[i]) {
      char got[64], list[256];
      size_t o = 0;
      for (size_t k = 0; allowed[k]; k++) o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", k ? ", " : "", allowed[k]);
      aa_json_sanitize(got, sizeof got, key);
      return aa_error(AA_EINVAL, "query %s: unknown argument \"%s\" (accepted: %s)", what, got, list);
    }
  }
  return 0;
}

static int wrong_type(const char *what, const char *arg, const char *want, const json_t *v) {
  return aa_error(AA_EINVAL, "query %s: \"%s\" must be %s (got %s)", what, arg, want, aa_json_type_name(v));
}

int aa__query_get_str(const char *what, const json_t *args, const char *arg, const char **out) {
  json_t *v = json_object_get(args, arg);
  *out = NULL;
  if (!v) return 0;
  if (!json_is_string(v) || !*json_string_value(v)) return wrong_type(what, arg, "a non-empty string", v);
  *out = json_string_value(v);
  return 0;
}

int aa__query_get_int(const char *what, const json_t *args, const char *arg, long long min, long long max,
                   long long *out) {
  json_t *v = json_object_get(args, arg);
  *out = 0;
  if (!v) return 0;
  if (!json_is_integer(v)) return wrong_type(what, arg, "an integer", v);
  long long x = json_integer_value(v);
  if (x < min || x > max)
    return aa_error(AA_EINVAL, "query %s: \"%s\" must be in %lld..%lld (got %lld)", what, arg, min, max, x);
  *out = x;
  return 0;
}

/* A list of status names as a bit set; job statuses when jobs is set. */
static int get_statuses(const char *what, const json_t *args, int jobs, unsigned *out) {
  json_t *v = json_object_get(args, "status");
  *out = 0;
  if (!v) return 0;
  if (!json_is_array(v)) return wrong_type(what, "status", "an array of status names", v);
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) {
    if (!json_is_string(e)) return wrong_type(what, "status", "an array of status names", e);
    int rc;
    if (jobs) {
      aa_store_job_status_t s;
      if ((rc = aa_store_job_status_parse(&s, json_string_value(e))))
        return aa_error_wrap(rc, "query %s: \"status\"", what);
      *out |= AA_STORE_BIT(s);
    } else {
      aa_store_run_status_t s;
      if ((rc = aa_store_run_status_parse(&s, json_string_value(e))))
        return aa_error_wrap(rc, "query %s: \"status\"", what);
      *out |= AA_STORE_BIT(s);
    }
  }
  return 0;
}

static int query_best(aa_store_t *st, const json_t *args, json_t *out) {
  static const char *const allowed[] = {"model", "hardware", NULL};
  const char *model, *hw;
  int rc = aa__query_check_keys("best", args, allowed);
  if (!rc) rc = aa__query_get_str("best", args, "model", &model);
  if (!rc) rc = aa__query_get_str("best", args, "hardware", &hw);
  if (rc) return rc;
  if (!model) return aa_error(AA_EINVAL, "query best: \"model\" (a model hash) is required");
  collect_t c = {.list = json_array(), .per_hardware = 1};
  aa_store_run_filter_t f = {.model_hash = model, .hardware = hw, .statuses = AA_STORE_BIT(AA_STORE_RUN_OK),
                             .kinds = AA_STORE_BIT(AA_STORE_RUN_DRYRUN), .order = AA_STORE_ORDER_BEST,
                             .bad_row = collect_bad};
  rc = aa_store_runs_query(st, &f, collect_run, &c);
  if (rc < 0) {
    json_decref(c.list);
    json_decref(c.unreadable);
    return rc == AA_ENOMEM ? aa_error(rc, "query best: no memory") : rc;
  }
  json_object_set_new(out, "best", c.list);
  put_unreadable(out, &c);
  return 0;
}

/* Pages: an answer holds at most `page` rows; "next_offset" says where the
 * next page starts (null after the last), so every answer fits a frame
 * however large the store grows. The row past the page is read to tell. */
static int set_page(const char *what, const json_t *args, long long page, long long *limit, long long *offset) {
  int rc = aa__query_get_int(what, args, "limit", 0, 1000000, limit);
  if (!rc) rc = aa__query_get_int(what, args, "offset", 0, INT64_MAX, offset);
  if (!rc && (*limit == 0 || *limit > page)) *limit = page;
  return rc;
}

static void put_next(json_t *out, const collect_t *c, long long offset) {
  json_object_set_new(out, "next_offset", c->more ? json_integer(offset + c->page) : json_null());
}

static int query_runs(aa_store_t *st, const json_t *args, json_t *out) {
  static const char *const allowed[] = {"job",   "model", "hardware", "status", "kind", "key_prefix",
                                        "order", "limit", "offset",   NULL};
  aa_store_run_filter_t f = {.bad_row = collect_bad};
  long long job, limit, offset;
  const char *kind, *order;
  int rc = aa__query_check_keys("runs", args, allowed);
  if (!rc) rc = aa__query_get_int("runs", args, "job", 1, INT64_MAX, &job);
  if (!rc) rc = aa__query_get_str("runs", args, "model", &f.model_hash);
  if (!rc) rc = aa__query_get_str("runs", args, "hardware", &f.hardware);
  if (!rc) rc = get_statuses("runs", args, 0, &f.statuses);
  if (!rc) rc = aa__query_get_str("runs", args, "kind", &kind);
  if (!rc) rc = aa__query_get_str("runs", args, "key_prefix", &f.key_prefix);
  if (!rc) rc = aa__query_get_str("runs", args, "order", &order);
  if (!rc) rc = set_page("runs", args, AA_PLANNER_PAGE_RUNS, &limit, &offset);
  if (rc) return rc;
  f.job_id = job;
  f.limit = (int)limit + 1; /* the row past the page says whether there is a next one */
  f.offset = offset;
  if (kind) {
    if (!strcmp(kind, "dryrun")) f.kinds = AA_STORE_BIT(AA_STORE_RUN_DRYRUN);
    else if (!strcmp(kind, "train")) f.kinds = AA_STORE_BIT(AA_STORE_RUN_TRAIN);
    else return aa_error(AA_EINVAL, "query runs: \"kind\" must be \"dryrun\" or \"train\"");
  }
  if (order) {
    if (!strcmp(order, "id")) f.order = AA_STORE_ORDER_ID;
    else if (!strcmp(order, "best")) f.order = AA_STORE_ORDER_BEST;
    else return aa_error(AA_EINVAL, "query runs: \"order\" must be \"id\" or \"best\"");
  }
  collect_t c = {.list = json_array(), .page = limit};
  rc = aa_store_runs_query(st, &f, collect_run, &c);
  if (rc < 0) {
    json_decref(c.list);
    json_decref(c.unreadable);
    return rc == AA_ENOMEM ? aa_error(rc, "query runs: no memory") : rc;
  }
  put_next(out, &c, offset);
  json_object_set_new(out, "runs", c.list);
  put_unreadable(out, &c);
  return 0;
}

/* A rank's own figures (docs/service.md "Replies": RANK). */
static int collect_rank(const aa_store_run_rank_t *k, void *data) {
  json_t *o = json_object(), *times = json_null();
  if (!o) return AA_ENOMEM;
  if (k->has_times) {
    times = json_object();
    for (int t = 0; t < AA_PROTO_TIME_KINDS; t++)
      json_object_set_new(times, aa_proto_time_kind_name((aa_proto_time_kind_t)t), json_real(k->time_ms[t]));
  }
  json_object_set_new(o, "rank", json_integer(k->rank));
  for (int a = 0; a < AA_AXES; a++) { /* "dp_rank", "tp_rank", ...: the protocol's names */
    char name[32];
    snprintf(name, sizeof name, "%s_rank", aa_axis_info((aa_axis_t)a)->key);
    json_object_set_new(o, name, json_integer(k->coord[a]));
  }
  json_object_set_new(o, "status", json_string(aa_store_run_status_name(k->status)));
  json_object_set_new(o, "tokens_per_s", num0(k->tokens_per_s));
  json_object_set_new(o, "step_ms_median", num0(k->step_ms_median));
  json_object_set_new(o, "step_ms_spread", num0(k->step_ms_spread));
  json_object_set_new(o, "times_ms", times);
  json_object_set_new(o, "peak_bytes", int0(k->peak_bytes));
  json_object_set_new(o, "peak", stored_json(k->peak_json));
  json_object_set_new(o, "error", str0(k->error));
  return json_array_append_new(data, o) ? AA_ENOMEM : 0;
}

/* One run with every rank's own figures: {"run": RUN, "ranks": [RANK]}. */
static int query_run(aa_store_t *st, const json_t *args, json_t *out) {
  static const char *const allowed[] = {"id", NULL};
  long long id;
  int rc = aa__query_check_keys("run", args, allowed);
  if (!rc) rc = aa__query_get_int("run", args, "id", 1, INT64_MAX, &id);
  if (rc) return rc;
  if (!id) return aa_error(AA_EINVAL, "query run: \"id\" (a run id) is required");
  aa_store_run_t r;
  if ((rc = aa_store_run_get(st, id, &r))) return rc;
  json_t *run = aa__report_run(&r), *ranks = json_array();
  aa_store_run_clear(&r);
  rc = run && ranks ? aa_store_run_ranks(st, id, collect_rank, ranks) : AA_ENOMEM;
  if (rc) {
    json_decref(run);
    json_decref(ranks);
    return rc == AA_ENOMEM ? aa_error(rc, "query run: no memory") : rc;
  }
  json_object_set_new(out, "run", run);
  json_object_set_new(out, "ranks", ranks);
  return 0;
}

/* JOB objects for the ids in c (the jobs walk is over, so the store may be
 * called again), appended to list; p (may be NULL) annotates them. A job
 * the store cannot read is listed as {"id", "error"}: one bad row does not
 * hide the others. */
static int jobs_to_list(aa_store_t *st, const char *home, const collect_t *c, json_t *list, aa_planner_t *p) {
  for (size_t i = 0; i < c->n; i++) {
    json_t *j;
    int rc = aa__report_job(st, home, c->ids[i], &j);
    if (rc == AA_ENOMEM) return rc;
    if (rc) j = json_pack("{s:I, s:s}", "id", (json_int_t)c->ids[i], "error", aa_last_error());
    else if (p) aa__jobs_annotate(p, j);
    else
      json_object_set_new(j, "waiting", json_null()); /* no planner (reader.c): nothing waits */
    json_array_append_new(list, j);
  }
  return 0;
}

/* The ids of unreadable job rows go into the list too, as errors. */
static int collect_bad_job(int64_t id, const char *why, void *data) {
  (void)why;
  return collect_job(&(aa_store_job_t){.id = id}, data);
}

static int query_jobs(aa_store_t *st, const char *home, const json_t *args, json_t *out, aa_planner_t *p) {
  static const char *const allowed[] = {"model", "status", "limit", "offset", NULL};
  aa_store_job_filter_t f = {.bad_row = collect_bad_job};
  long long limit, offset;
  int rc = aa__query_check_keys("jobs", args, allowed);
  if (!rc) rc = aa__query_get_str("jobs", args, "model", &f.model_hash);
  if (!rc) rc = get_statuses("jobs", args, 1, &f.statuses);
  if (!rc) rc = set_page("jobs", args, AA_PLANNER_PAGE_JOBS, &limit, &offset);
  if (rc) return rc;
  f.limit = (int)limit + 1;
  f.offset = offset;
  collect_t c = {.page = limit};
  rc = aa_store_jobs_list(st, &f, collect_job, &c);
  json_t *list = json_array();
  if (rc >= 0) rc = jobs_to_list(st, home, &c, list, p);
  free(c.ids);
  if (rc < 0) {
    json_decref(list);
    return rc == AA_ENOMEM ? aa_error(rc, "query jobs: no memory") : rc;
  }
  put_next(out, &c, offset);
  json_object_set_new(out, "jobs", list);
  return 0;
}

int aa__report_query(aa_store_t *st, const char *home, const char *what, const char *args, char **out,
                     aa_planner_t *p) {
  json_t *a = NULL;
  char origin[300];
  char w[64];
  aa_json_sanitize(w, sizeof w, what);
  snprintf(origin, sizeof origin, "query %s: args", w);
  if (args) {
    int rc = aa_json_parse_text(args, strlen(args), AA_PROTO_JSON_MAX, origin, "query arguments", "a JSON object", &a);
    if (rc) return rc;
    if (!json_is_object(a)) {
      int e = aa_error(AA_EINVAL, "%s: must be a JSON object (got %s)", origin, aa_json_type_name(a));
      json_decref(a);
      return e;
    }
  } else {
    a = json_object();
  }
  json_t *o = json_object();
  int rc;
  if (!strcmp(what, "best")) rc = query_best(st, a, o);
  else if (!strcmp(what, "runs")) rc = query_runs(st, a, o);
  else if (!strcmp(what, "run")) rc = query_run(st, a, o);
  else if (!strcmp(what, "jobs")) rc = query_jobs(st, home, a, o, p);
  else if (!strcmp(what, "plan")) rc = aa__plan_query(st, a, o);
  else if (!strcmp(what, "calib_export"))
    rc = aa__calib_export_query(st, a, o);
  else
    rc = aa_error(AA_EINVAL, "unknown query \"%s\" (accepted: best, runs, run, jobs, plan, calib_export)", w);
  json_decref(a);
  if (!rc && !(*out = aa__report_dump(o))) rc = aa_error(AA_ENOMEM, "query %s: no memory for the reply", w);
  json_decref(o);
  return rc;
}

/* --- planner status ----------------------------------------------------------- */

static json_t *executor_json(const aa_conn_t *c) {
  const aa_msg_device_t *d = &c->dev;
  json_t *o = json_object();
  json_object_set_new(o, "id", json_integer((json_int_t)c->id));
  json_object_set_new(o, "kind", json_string(d->kind == AA_PROTO_DEV_CUDA ? "cuda" : "cpu"));
  json_object_set_new(o, "name", json_string(d->name));
  json_object_set_new(o, "index", json_integer(d->index));
  json_object_set_new(o, "memory", json_integer((json_int_t)d->memory));
  json_object_set_new(o, "host", json_string(d->host));
  json_object_set_new(o, "pid", json_integer(d->pid));
  json_object_set_new(o, "hardware", json_string(c->fingerprint));
  json_object_set_new(o, "state", json_string(c->busy_run ? "busy" : "idle"));
  json_object_set_new(o, "job", int0(c->busy_job));
  json_object_set_new(o, "run", int0(c->busy_run));
  json_object_set_new(o, "rank", c->busy_run ? json_integer(c->busy_rank) : json_null());
  return o;
}

int aa__report_status(aa_planner_t *p, char **out) {
  json_t *root = json_object(), *pl = json_object(), *ex = json_array(), *q = json_array(), *jobs = json_array();
  json_object_set_new(pl, "version", json_string(AA_PLANNER_VERSION));
  json_object_set_new(pl, "pid", json_integer(getpid()));
  json_object_set_new(pl, "address", json_string(p->address));
  if (p->tcp_address[0]) json_object_set_new(pl, "tcp", json_string(p->tcp_address));
  json_object_set_new(pl, "store", json_string(p->store_path));
  json_object_set_new(pl, "uptime_s", json_integer((json_int_t)(aa_now() - p->started)));
  json_object_set_new(root, "planner", pl);
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (c->role == AA_CONN_EXECUTOR && !c->dropped) json_array_append_new(ex, executor_json(c));
  json_object_set_new(root, "executors", ex);
  json_object_set_new(root, "hosts", aa__registry_hosts_json(p));
  for (size_t i = 0; i < p->queue_n; i++) json_array_append_new(q, json_integer(p->queue[i].id));
  json_object_set_new(root, "queue", q);
  json_object_set_new(root, "running", int0(aa__jobs_current_id(p)));
  json_object_set_new(root, "waiting", aa__jobs_waiting(p));
  aa_store_job_filter_t f = {.limit = AA_PLANNER_STATUS_JOBS, .bad_row = collect_bad_job};
  collect_t c = {0};
  int rc = aa_store_jobs_list(p->store, &f, collect_job, &c);
  if (rc >= 0) rc = jobs_to_list(p->store, p->home, &c, jobs, p);
  free(c.ids);
  json_object_set_new(root, "jobs", jobs);
  if (rc >= 0 && !(*out = aa__report_dump(root))) rc = aa_error(AA_ENOMEM, "status: no memory for the reply");
  if (rc == AA_ENOMEM && !*aa_last_error()) aa_error(rc, "status: no memory");
  json_decref(root);
  return rc < 0 ? rc : 0;
}
