/* Jobs around the one being run: submits, the queue, placement (a job
 * whose executors are not connected waits aside, visibly, and fails after
 * placement_timeout_s, while later jobs run), cancel, the stop, the
 * clients waiting for a job, and job ends the store could not take yet
 * (docs/service.md "Jobs" and "Waiting clients"). One job's life is in
 * job_run.c. */
#include "planner_internal.h"

#include "../strategies/space.h"

#include "../common/json.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t aa__jobs_current_id(const aa_planner_t *p) { return p->cur ? p->cur->id : 0; }

/* --- the queue ------------------------------------------------------------------------- */

static void queue_remove(aa_planner_t *p, size_t i) {
  free(p->queue[i].spec);
  free(p->queue[i].spec_json);
  memmove(p->queue + i, p->queue + i + 1, (p->queue_n - i - 1) * sizeof *p->queue);
  p->queue_n--;
}

/* Queues job id of `hardware` (its fingerprint in the store); spec and
 * spec_json (may be NULL) are transferred on success only. */
static int queue_push(aa_planner_t *p, int64_t id, const char *hardware, aa_model_spec_t *spec,
                      char *spec_json) {
  if (p->queue_n == p->queue_cap) {
    size_t cap = p->queue_cap ? 2 * p->queue_cap : 16;
    aa_queued_t *q = realloc(p->queue, cap * sizeof *q);
    if (!q) return aa_error(AA_ENOMEM, "planner: no memory for the job queue");
    p->queue = q;
    p->queue_cap = cap;
  }
  aa_queued_t *q = &p->queue[p->queue_n++];
  *q = (aa_queued_t){.id = id, .spec = spec, .spec_json = spec_json};
  snprintf(q->hardware, sizeof q->hardware, "%s", hardware);
  return 0;
}

/* --- waiting clients ----------------------------------------------------------------- */

void aa__jobs_relay(aa_planner_t *p, int64_t job, const aa_msg_t *m) {
  for (aa_waiter_t *w = p->waiters; w; w = w->next)
    if (w->job == job) aa__conn_send(w->conn, m);
}

/* The train run of a job as RUN, or null. */
static int find_train(const aa_store_run_t *r, void *data) {
  *(int64_t *)data = r->id;
  return 0;
}

/* The final reply to every client waiting for job `id`:
 * {"job": JOB, "best": RUN|null, "train": RUN|null, "strategy_file": ...}. */
static void reply_waiters(aa_planner_t *p, int64_t id) {
  bool any = false;
  for (aa_waiter_t *w = p->waiters; w; w = w->next)
    any = any || w->job == id;
  if (!any) return;
  json_t *job = NULL;
  char *text = NULL;
  int rc = aa__report_job(p->store, p->home, id, &job);
  if (!rc) {
    aa__jobs_annotate(p, job);
    int64_t train = 0;
    aa_store_run_filter_t f = {.job_id = id, .kinds = AA_STORE_BIT(AA_STORE_RUN_TRAIN)};
    aa_store_runs_query(p->store, &f, find_train, &train);
    json_t *best = json_object_get(job, "best_run");
    json_t *sf = json_object_get(job, "strategy_file");
    json_t *o = json_object();
    json_object_set_new(
        o, "best", aa__report_run_or_null(p->store, json_is_integer(best) ? json_integer_value(best) : 0));
    json_object_set_new(o, "train", aa__report_run_or_null(p->store, train));
    json_object_set(o, "strategy_file", sf ? sf : json_null());
    json_object_set(o, "job", job);
    text = aa__report_dump(o);
    json_decref(o);
    json_decref(job);
    if (!text) rc = aa_error(AA_ENOMEM, "job %lld: no memory for the reply", (long long)id);
  }
  aa_waiter_t **pw = &p->waiters;
  while (*pw) {
    aa_waiter_t *w = *pw;
    if (w->job != id) {
      pw = &w->next;
      continue;
    }
    if (rc)
      aa__conn_send_error(w->conn, w->req_id, rc, aa_last_error());
    else
      aa__conn_reply(w->conn, w->req_id, text);
    *pw = w->next;
    free(w);
  }
  free(text);
}

void aa__jobs_client_gone(aa_conn_t *c) {
  aa_planner_t *p = c->p;
  for (aa_waiter_t **pw = &p->waiters; *pw;) {
    aa_waiter_t *w = *pw;
    if (w->conn == c) {
      *pw = w->next;
      free(w);
    } else {
      pw = &w->next;
    }
  }
  for (aa_pending_submit_t **pp = &p->pending; *pp;) {
    aa_pending_submit_t *s = *pp;
    if (s->conn == c) {
      aa__planner_log(p, "client %llu left before an executor came: its submit is dropped",
                      (unsigned long long)c->id);
      *pp = s->next;
      p->npending--;
      aa_msg_free(&s->msg);
      free(s->spec);
      free(s->spec_json);
      free(s);
    } else {
      pp = &s->next;
    }
  }
}

/* --- job ends the store did not take -------------------------------------------------------- */

static aa_unrecorded_t *find_unrecorded(aa_planner_t *p, int64_t job) {
  for (aa_unrecorded_t *u = p->unrecorded; u; u = u->next)
    if (u->job == job) return u;
  return NULL;
}

void aa__jobs_unrecorded(aa_planner_t *p, int64_t job, aa_store_job_status_t status, int64_t best_run,
                         bool from_store, const char *error, int64_t run, const aa_store_run_result_t *res) {
  aa_unrecorded_t *u = find_unrecorded(p, job);
  if (!u) {
    if (!(u = calloc(1, sizeof *u))) {
      aa__planner_log(p, "job %lld: no memory to keep its end for the store", (long long)job);
      return;
    }
    u->job = job;
    u->next = p->unrecorded;
    p->unrecorded = u;
  }
  u->status = status;
  u->best_run = best_run;
  u->from_store = from_store;
  snprintf(u->error, sizeof u->error, "%s", error ? error : "");
  if (run && res) {
    u->run = run;
    u->run_result = *res;
    snprintf(u->run_error, sizeof u->run_error, "%s", res->error ? res->error : "");
    u->run_result.error = u->run_error[0] ? u->run_error : NULL;
    u->run_result.peak_json = NULL;
    /* The ranks' figures are borrowed from the finished gang: kept only
     * when the store takes them with the run the first time. */
    u->run_result.ranks = NULL;
    u->run_result.n_ranks = 0;
  }
}

/* Writes what the store refused before; an end it takes leaves the list. */
static void retry_unrecorded(aa_planner_t *p) {
  for (aa_unrecorded_t **pu = &p->unrecorded; *pu;) {
    aa_unrecorded_t *u = *pu;
    int rc = 0;
    if (u->run) {
      rc = aa_store_run_finish(p->store, u->run, &u->run_result);
      if (rc == AA_EINVAL) rc = 0; /* it was recorded after all */
      if (!rc) u->run = 0;
    }
    if (!rc)
      rc = aa_store_job_finish(p->store, u->job, u->status, u->best_run, u->from_store,
                               u->error[0] ? u->error : NULL);
    if (rc == AA_EINVAL) rc = 0; /* already final */
    if (rc) {
      pu = &u->next;
      continue;
    }
    aa__planner_log(p, "job %lld: its end (%s) is in the store now", (long long)u->job,
                    aa_store_job_status_name(u->status));
    *pu = u->next;
    free(u);
  }
}

/* --- the end of a job ------------------------------------------------------------------- */

static void unpark(aa_planner_t *p, aa_planner_job_t *j) {
  for (aa_planner_job_t **pj = &p->parked; *pj; pj = &(*pj)->next)
    if (*pj == j) {
      *pj = j->next;
      j->next = NULL;
      j->waiting.since = 0;
      return;
    }
}

/* Writes the end of job `id` to the store; one the store refuses is kept
 * in p->unrecorded for the tick to write later, and the log says so. */
static void record_end(aa_planner_t *p, int64_t id, aa_store_job_status_t status, int64_t best,
                       bool from_store, const char *error) {
  if (!aa_store_job_finish(p->store, id, status, best, from_store, error)) return;
  aa__planner_log(p, "job %lld: cannot record its end (%s) in the store: %s; the planner keeps trying",
                  (long long)id, aa_store_job_status_name(status), aa_last_error());
  aa__jobs_unrecorded(p, id, status, best, from_store, error, 0, NULL);
}

void aa__jobs_end(aa_planner_t *p, aa_planner_job_t *j, aa_store_job_status_t status, const char *error,
                  bool recorded) {
  if (!recorded)
    record_end(p, j->id, status, status == AA_STORE_JOB_DONE ? j->best_run : 0, j->from_store, error);
  if (status == AA_STORE_JOB_DONE) {
    char key[AA_STRATEGY_KEY_MAX];
    aa_strategy_key(&j->best, key);
    aa__planner_log(p, "job %lld done%s: best %s, %.1f tokens/s%s%s", (long long)j->id,
                    j->from_store ? " from the store" : "", key, j->best.tokens_per_s, error ? "; " : "",
                    error ? error : "");
  } else {
    aa__planner_log(p, "job %lld %s: %s", (long long)j->id, aa_store_job_status_name(status),
                    error ? error : "");
  }
  if (p->cur == j)
    p->cur = NULL;
  else
    unpark(p, j);
  reply_waiters(p, j->id);
  aa__job_free(j);
  aa__planner_kick(p);
}

/* --- placement ---------------------------------------------------------------------------- */

/* A wait for executors starts now; `fmt` says what it waits for. */
static void wait_start(aa_waiting_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wait_start(aa_waiting_t *w, const char *fmt, ...) {
  w->since = aa_now();
  w->since_wall = (int64_t)time(NULL);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->what, sizeof w->what, fmt, ap);
  va_end(ap);
}

void aa__jobs_park(aa_planner_t *p, int world, int unit) {
  aa_planner_job_t *j = p->cur;
  p->cur = NULL;
  j->need_world = world;
  j->need_unit = unit;
  char need[sizeof j->waiting.what];
  aa__registry_need(p, j->hardware, world, unit, need, sizeof need);
  wait_start(&j->waiting, "%s", need);
  j->next = NULL;
  aa_planner_job_t **pj = &p->parked;
  while (*pj)
    pj = &(*pj)->next;
  *pj = j;
  aa__planner_log(p, "job %lld steps aside: it waits for %s, up to %d s; later jobs may run meanwhile",
                  (long long)j->id, j->waiting.what, p->lim.placement_timeout_s);
  aa__planner_kick(p);
}

/* Whether any executor of `hardware` is connected at all (busy or not). */
static bool connected(aa_planner_t *p, const char *hardware) {
  return aa__registry_most_on_one_host(p, hardware) > 0;
}

/* Whether the hosts connected now can place the gang parked job j waits for. */
static bool placeable(aa_planner_t *p, const aa_planner_job_t *j) {
  char why[512];
  return aa__registry_placeable(p, j->hardware, j->need_world, j->need_unit, why, sizeof why);
}

/* The oldest parked job whose executors are back takes the planner. */
static bool resume_parked(aa_planner_t *p) {
  for (aa_planner_job_t *j = p->parked; j; j = j->next) {
    if (!placeable(p, j)) continue;
    unpark(p, j);
    aa__planner_log(p, "job %lld: its executors are back; it goes on", (long long)j->id);
    p->cur = j;
    aa__job_advance(p);
    return true;
  }
  return false;
}

/* Starts the oldest queued job that an idle executor can take. A job none
 * can take because none of its hardware is connected is marked waiting
 * (the tick fails it after placement_timeout_s); one whose executors are
 * merely busy is not: its turn comes. The queue holds each job's hardware,
 * so only the job that starts is read from the store. */
static void start_queued(aa_planner_t *p) {
  for (size_t i = 0; !p->cur && i < p->queue_n;) {
    aa_queued_t *q = &p->queue[i];
    aa_conn_t *e = aa__registry_idle(p, q->hardware);
    if (e) {
      aa_store_job_t row;
      if (aa_store_job_get(p->store, q->id, &row)) {
        aa__planner_log(p, "job %lld: %s; dropped from the queue", (long long)q->id, aa_last_error());
        queue_remove(p, i);
        continue;
      }
      if (row.status == AA_STORE_JOB_QUEUED) {
        aa_model_spec_t *spec = q->spec;
        char *spec_json = q->spec_json;
        q->spec = NULL;
        q->spec_json = NULL;
        queue_remove(p, i);
        aa__job_begin(p, &row, e, spec, spec_json);
      } else {
        queue_remove(p, i);
      }
      aa_store_job_clear(&row);
      continue;
    }
    if (!connected(p, q->hardware)) {
      if (!q->waiting.since) {
        wait_start(&q->waiting, "an executor of %s (none connected)", q->hardware);
        aa__planner_log(p, "job %lld waits for %s, up to %d s; later jobs may run meanwhile",
                        (long long)q->id, q->waiting.what, p->lim.placement_timeout_s);
      }
    } else {
      q->waiting.since = 0;
    }
    i++;
  }
}

void aa__jobs_schedule(aa_planner_t *p) {
  if (p->stopping) return;
  if (p->cur) aa__job_advance(p);
  if (!p->cur) resume_parked(p);
  if (!p->cur) start_queued(p);
}

/* Fails a queued job that waited too long for its executors. */
static void fail_queued(aa_planner_t *p, size_t i, const char *why) {
  int64_t id = p->queue[i].id;
  queue_remove(p, i);
  record_end(p, id, AA_STORE_JOB_FAILED, 0, false, why);
  aa__planner_log(p, "job %lld failed: %s", (long long)id, why);
  reply_waiters(p, id);
}

/* Whether wait w has passed the placement timeout at `now`; why says so. */
static bool waited_too_long(const aa_planner_t *p, const aa_waiting_t *w, double now, char *why, size_t n) {
  if (now - w->since < p->lim.placement_timeout_s) return false;
  snprintf(why, n, "it waited %.0f s for %s, longer than the placement timeout of %d s", now - w->since,
           w->what, p->lim.placement_timeout_s);
  return true;
}

void aa__jobs_tick(aa_planner_t *p) {
  if (p->unrecorded) retry_unrecorded(p);
  aa__wal_tick(p);
  double now = aa_now();
  char why[512];
  /* The timeout counts while the executors are missing: a job whose
   * executors came back while another job ran is waiting its turn, and
   * its clock starts again should they go once more. */
  for (size_t i = 0; i < p->queue_n;) {
    aa_queued_t *q = &p->queue[i];
    if (q->waiting.since > 0 && connected(p, q->hardware)) {
      q->waiting.since = 0;
    } else if (q->waiting.since > 0 && waited_too_long(p, &q->waiting, now, why, sizeof why)) {
      fail_queued(p, i, why);
      continue;
    }
    i++;
  }
  for (aa_planner_job_t *j = p->parked, *next; j; j = next) {
    next = j->next;
    if (placeable(p, j))
      j->waiting.since = now;
    else if (waited_too_long(p, &j->waiting, now, why, sizeof why))
      aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
  }
}

/* {"for": WHAT, "since": UNIX_SECONDS} of a wait (new reference). */
static json_t *waiting_json(const aa_waiting_t *w) {
  return json_pack("{s:s, s:I}", "for", w->what, "since", (json_int_t)w->since_wall);
}

/* The wait of job `id`, NULL when it does not wait for executors. */
static const aa_waiting_t *waiting_of(const aa_planner_t *p, int64_t id) {
  for (const aa_planner_job_t *j = p->parked; j; j = j->next)
    if (j->id == id) return &j->waiting;
  for (size_t i = 0; i < p->queue_n; i++)
    if (p->queue[i].id == id) return p->queue[i].waiting.since > 0 ? &p->queue[i].waiting : NULL;
  return NULL;
}

void aa__jobs_annotate(aa_planner_t *p, json_t *job) {
  int64_t id = json_integer_value(json_object_get(job, "id"));
  const aa_waiting_t *w = waiting_of(p, id);
  json_object_set_new(job, "waiting", w ? waiting_json(w) : json_null());
  const aa_unrecorded_t *u = find_unrecorded(p, id);
  if (u) {
    json_object_set_new(job, "status", json_string(aa_store_job_status_name(u->status)));
    json_object_set_new(job, "error", u->error[0] ? json_string(u->error) : json_null());
  }
}

/* Appends {"job": id, "for", "since"} of wait w to array a. */
static void append_waiting(json_t *a, int64_t id, const aa_waiting_t *w) {
  json_t *o = waiting_json(w);
  json_object_set_new(o, "job", json_integer(id));
  json_array_append_new(a, o);
}

json_t *aa__jobs_waiting(aa_planner_t *p) {
  json_t *a = json_array();
  for (aa_planner_job_t *j = p->parked; j; j = j->next)
    append_waiting(a, j->id, &j->waiting);
  for (size_t i = 0; i < p->queue_n; i++)
    if (p->queue[i].waiting.since > 0) append_waiting(a, p->queue[i].id, &p->queue[i].waiting);
  return a;
}

/* --- submit ---------------------------------------------------------------------------- */

/* The options stored with the job: the submit's options, the user who
 * submitted it (the out_dir must stay theirs) and the spec, so a restarted
 * planner can run a queued job from the store alone. */
static char *options_json(const aa_msg_submit_t *s, const char *spec_json, uid_t owner) {
  json_t *spec = json_loads(spec_json, 0, NULL);
  json_t *ex = json_array();
  json_t *in = json_array();
  for (size_t i = 0; i < s->exclude.n; i++)
    json_array_append_new(ex, json_string(s->exclude.v[i]));
  for (size_t i = 0; i < s->include.n; i++)
    json_array_append_new(in, json_string(s->include.v[i]));
  /* The strategy to start from as the submit sent it, checked by then. */
  json_t *from = s->from ? json_loads(s->from, 0, NULL) : NULL;
  json_t *o = json_pack("{s:b, s:b, s:b, s:i, s:i, s:o, s:o, s:o, s:s?, s:I, s:o}", "train", s->train, "refresh",
                        s->refresh, "exhaustive", s->exhaustive, "time_limit_s", s->time_limit_s,
                        "max_dryruns", s->max_dryruns, "exclude", ex, "include", in, "from",
                        from ? from : json_null(), "out_dir", s->out_dir, "owner_uid", (json_int_t)owner, "spec",
                        spec ? spec : json_null());
  char *text = o ? aa__report_dump(o) : NULL;
  json_decref(o);
  return text;
}

/* The user a submit acts for: the kernel's word on the unix socket; on TCP
 * the token's holder, who is the planner's own user. */
static uid_t submitter(const aa_conn_t *c) { return c->has_uid ? c->uid : geteuid(); }

/* The model row of the store: its architecture (what its hash names).
 * The spec as a whole, training settings included, is stored once, with
 * the job that submitted it. */
static char *arch_json(const aa_arch_t *a) {
  json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i}", "family", a->family, "n_layer", a->n_layer, "n_head",
                        a->n_head, "d_model", a->d_model, "d_ff", a->d_ff, "seq_len", a->seq_len, "vocab_size",
                        a->vocab_size);
  if (o && aa_arch_is_llama(a)) {
    json_t *l = json_pack("{s:i, s:f, s:f}", "n_kv_head", aa_arch_kv_heads(a), "rope_theta", (double)a->rope_theta,
                          "norm_eps", (double)a->norm_eps);
    if (!l || json_object_update(o, l)) {
      json_decref(o);
      o = NULL;
    }
    json_decref(l);
  }
  char *text = o ? aa__report_dump(o) : NULL;
  json_decref(o);
  return text;
}

/* Records the model, the hardware and the job of a validated submit on
 * executor e's hardware, answers `ack` and queues the job. spec and
 * spec_json (transferred) are the submit's model as parsed and written
 * back once; the queued job keeps them until it starts. */
static void create_job(aa_planner_t *p, aa_conn_t *c, const aa_msg_t *m, aa_conn_t *e, aa_model_spec_t *spec,
                       char *spec_json) {
  const aa_msg_submit_t *s = &m->submit;
  char hash[17], *opts = NULL, *hw = NULL, *arch = NULL, fp[AA_STORE_HW_MAX];
  int64_t id = 0;
  /* The job's hardware is the pool its search may use: e's device times
   * the executors with that device now, on e's host or, when its gangs
   * span hosts, on all of them; and how many hosts those are, since the
   * best strategy on 2 hosts x 2 is not the one on 1 host x 4. */
  int pool = aa__registry_pool(p, e), hosts = aa__registry_pool_hosts(p, e);
  aa__planner_pool_fingerprint(&e->dev, pool, hosts, fp);
  aa_arch_hash(&spec->arch, hash);
  opts = options_json(s, spec_json, submitter(c));
  hw = aa__planner_hw_description(&e->dev, pool, hosts);
  arch = arch_json(&spec->arch);
  int rc = opts && hw && arch ? 0 : aa_error(AA_ENOMEM, "planner: no memory for the job");
  aa_strategy_t from;
  if (!rc && s->from && !aa_strategy_parse(&from, s->from, "submit.from") &&
      (int)aa_strategy_world(&from) > pool)
    rc = aa_error(AA_EINVAL, "submit: the strategy to start from needs %d ranks, and the pool has %d devices",
                  (int)aa_strategy_world(&from), pool);
  /* What the executors of the job's pool can measure (an MoE model on CPUs only). */
  if (!rc) rc = aa_spec_require_planned(spec, e->dev.kind == AA_PROTO_DEV_CUDA, "submit");
  if (!rc) rc = aa_store_put_model(p->store, hash, spec->name, arch, (int64_t)aa_arch_param_count(&spec->arch));
  if (!rc) rc = aa_store_put_hardware(p->store, fp, hw);
  if (!rc) rc = aa_store_job_create(p->store, hash, fp, opts, &id);
  char name[sizeof spec->name];
  snprintf(name, sizeof name, "%s", spec->name);
  if (!rc) rc = queue_push(p, id, fp, spec, spec_json);
  if (rc) {
    free(spec);
    free(spec_json);
  }
  free(opts);
  free(hw);
  free(arch);
  if (rc) {
    aa__planner_log(p, "submit from client %llu: %s", (unsigned long long)c->id, aa_last_error());
    aa__conn_send_error(c, m->id, rc, aa_last_error());
    return;
  }
  if (s->wait) {
    aa_waiter_t *w = calloc(1, sizeof *w);
    if (w) {
      *w = (aa_waiter_t){.conn = c, .req_id = m->id, .job = id, .next = NULL};
      aa_waiter_t **pw = &p->waiters;
      while (*pw)
        pw = &(*pw)->next;
      *pw = w;
    }
  }
  aa_msg_t ack = {.type = AA_MSG_ACK, .id = m->id, .ack.job = (uint64_t)id};
  aa__conn_send(c, &ack);
  aa__planner_log(p, "job %lld submitted by client %llu: model %s (%s) on %s%s%s", (long long)id,
                  (unsigned long long)c->id, name, hash, fp, s->train ? ", train" : "",
                  s->refresh ? ", refresh" : "");
  aa__planner_kick(p);
}

/* The executor a new job will run on: an idle one, else the first. */
static aa_conn_t *target_executor(aa_planner_t *p) {
  aa_conn_t *e = aa__registry_idle(p, NULL);
  if (e) return e;
  for (aa_conn_t *c = p->conns; c; c = c->next)
    if (c->role == AA_CONN_EXECUTOR && !c->dropped) e = c; /* the oldest: the list is newest first */
  return e;
}

/* Whether the strategy to start from (JSON text, borrowed) can be: it
 * parses, resolves against the submitted model, uses no excluded method
 * and every included one. AA_EINVAL naming the rule. */
static int check_from(const char *json, const aa_model_spec_t *spec, unsigned exclude, unsigned include) {
  aa_strategy_t st;
  char names[160];
  if (aa_strategy_parse(&st, json, "submit.from")) return AA_EINVAL;
  if (aa_strategy_resolve(&st, spec, (int)aa_strategy_world(&st)))
    return aa_error_wrap(AA_EINVAL, "submit: the strategy to start from does not fit the model");
  unsigned used = aa_space_methods_of(&st);
  if (used & exclude)
    return aa_error(AA_EINVAL, "submit: the strategy to start from uses excluded methods (%s)",
                    aa_space_method_names(names, sizeof names, used & exclude));
  unsigned unmet = aa_space_include_unmet(used, include);
  if (unmet)
    return aa_error(AA_EINVAL, "submit: the strategy to start from does not use the included method(s) %s",
                    aa_space_include_names(names, sizeof names, unmet));
  return 0;
}

void aa__jobs_on_submit(aa_conn_t *c, aa_msg_t *m) {
  aa_planner_t *p = c->p;
  const aa_msg_submit_t *s = &m->submit;
  aa_model_spec_t *spec = malloc(sizeof *spec);
  char *spec_json = NULL;
  unsigned mask = 0, include = 0;
  /* The one parse of the model in this process, and its one canonical text. */
  int rc = spec ? aa_spec_parse(spec, s->model, NULL, "submitted model") : aa_error(AA_ENOMEM, "planner: no memory");
  /* A search measures, and measuring reads tokens: a spec made for planning is refused here. */
  if (!rc) rc = aa_spec_require_data(spec, "submit");
  if (!rc) rc = aa_spec_to_json(spec, &spec_json);
  if (!rc) rc = aa_space_exclude_mask((const char *const *)s->exclude.v, s->exclude.n, &mask);
  if (!rc) rc = aa_space_include_set((const char *const *)s->include.v, s->include.n, mask, &include);
  if (!rc && s->from) rc = check_from(s->from, spec, mask, include);
  if (!rc && s->out_dir && s->out_dir[0] != '/')
    rc = aa_error(AA_EINVAL, "submit: out_dir must be an absolute directory");
  if (!rc && s->out_dir) rc = aa__out_dir_check(s->out_dir, submitter(c));
  if (!rc && p->queue_n >= AA_PLANNER_QUEUE_MAX)
    rc = aa_error(AA_EINVAL, "submit: the queue is full (%d jobs); try again when some have run", AA_PLANNER_QUEUE_MAX);
  if (rc) {
    aa__planner_log(p, "submit from client %llu refused: %s", (unsigned long long)c->id, aa_last_error());
    aa__conn_send_error(c, m->id, rc, aa_last_error());
    free(spec);
    free(spec_json);
    return;
  }
  aa_conn_t *e = target_executor(p);
  if (e) {
    create_job(p, c, m, e, spec, spec_json);
    return;
  }
  /* The job's hardware is that of the executor that will run it, and the
   * store records it with the job: the job is created when one comes. */
  aa_pending_submit_t *ps = p->npending < AA_PLANNER_PENDING_MAX ? calloc(1, sizeof *ps) : NULL;
  if (!ps) {
    aa__conn_send_error(c, m->id, AA_EINVAL,
                        p->npending < AA_PLANNER_PENDING_MAX
                            ? "planner: no memory for the submit"
                            : "submit: no executor is connected and enough submits already wait for one; start an "
                              "executor");
    free(spec);
    free(spec_json);
    return;
  }
  ps->conn = c;
  ps->spec = spec;
  ps->spec_json = spec_json;
  ps->msg = *m;
  memset(m, 0, sizeof *m); /* the strings now belong to ps */
  aa_pending_submit_t **pp = &p->pending;
  while (*pp)
    pp = &(*pp)->next;
  *pp = ps;
  p->npending++;
  aa__planner_log(p, "submit from client %llu waits for an executor to connect", (unsigned long long)c->id);
}

void aa__jobs_executor_arrived(aa_planner_t *p) {
  while (p->pending) {
    aa_pending_submit_t *ps = p->pending;
    aa_conn_t *e = target_executor(p);
    if (!e) return;
    p->pending = ps->next;
    p->npending--;
    create_job(p, ps->conn, &ps->msg, e, ps->spec, ps->spec_json);
    aa_msg_free(&ps->msg);
    free(ps);
  }
}

/* Queues a job the store lists (the walk may not call the store itself). */
static int queue_stored(const aa_store_job_t *j, void *data) {
  return queue_push(data, j->id, j->hardware, NULL, NULL);
}

/* A queued job whose row cannot be read is left out, and the log says so. */
static int skip_bad_job(int64_t id, const char *why, void *data) {
  aa__planner_log(data, "job %lld cannot be read from the store and is not queued: %s", (long long)id, why);
  return 0;
}

int aa__jobs_load_queue(aa_planner_t *p) {
  aa_store_job_filter_t f = {.statuses = AA_STORE_BIT(AA_STORE_JOB_QUEUED), .bad_row = skip_bad_job};
  size_t first = p->queue_n;
  int rc = aa_store_jobs_list(p->store, &f, queue_stored, p);
  if (rc < 0) return rc;
  /* The store lists newest first; the queue runs oldest first. */
  for (size_t i = first, k = p->queue_n; i + 1 < k; i++, k--) {
    aa_queued_t t = p->queue[i];
    p->queue[i] = p->queue[k - 1];
    p->queue[k - 1] = t;
  }
  if (p->queue_n) aa__planner_log(p, "%zu queued jobs from the store", p->queue_n);
  return 0;
}

/* --- cancel, stop ------------------------------------------------------------------------------------ */

void aa__jobs_on_cancel(aa_conn_t *c, const aa_msg_t *m) {
  aa_planner_t *p = c->p;
  int64_t id = (int64_t)m->cancel.job;
  aa_msg_t ack = {.type = AA_MSG_ACK, .id = m->id, .ack.job = m->cancel.job};
  if (p->cur && p->cur->id == id) {
    aa__planner_log(p, "job %lld: cancelled by client %llu", (long long)id, (unsigned long long)c->id);
    aa__job_stop_run(p, AA_STORE_RUN_CANCELLED, "cancelled by a client");
    aa__jobs_end(p, p->cur, AA_STORE_JOB_CANCELLED, "cancelled by a client", false);
    aa__conn_send(c, &ack);
    return;
  }
  for (aa_planner_job_t *j = p->parked; j; j = j->next) {
    if (j->id != id) continue;
    aa__planner_log(p, "job %lld: cancelled by client %llu while it waited", (long long)id,
                    (unsigned long long)c->id);
    aa__jobs_end(p, j, AA_STORE_JOB_CANCELLED, "cancelled by a client", false);
    aa__conn_send(c, &ack);
    return;
  }
  for (size_t i = 0; i < p->queue_n; i++) {
    if (p->queue[i].id != id) continue;
    if (aa_store_job_finish(p->store, id, AA_STORE_JOB_CANCELLED, 0, 0, "cancelled by a client")) {
      aa__conn_send_error(c, m->id, AA_EIO, aa_last_error());
      return;
    }
    queue_remove(p, i);
    aa__planner_log(p, "job %lld: cancelled by client %llu while queued", (long long)id,
                    (unsigned long long)c->id);
    reply_waiters(p, id);
    aa__conn_send(c, &ack);
    return;
  }
  aa_store_job_t row;
  int rc = aa_store_job_get(p->store, id, &row);
  if (rc) {
    aa__conn_send_error(c, m->id, rc, aa_last_error());
    return;
  }
  char msg[128];
  snprintf(msg, sizeof msg, "job %lld is already over (%s)", (long long)id,
           aa_store_job_status_name(row.status));
  aa_store_job_clear(&row);
  aa__conn_send_error(c, m->id, AA_EINVAL, msg);
}

void aa__jobs_interrupt(aa_planner_t *p) {
  if (p->cur) {
    aa__job_stop_run(p, AA_STORE_RUN_CANCELLED, "the planner stopped");
    aa__jobs_end(p, p->cur, AA_STORE_JOB_INTERRUPTED, "the planner stopped while the job ran", false);
  }
  while (p->parked)
    aa__jobs_end(p, p->parked, AA_STORE_JOB_INTERRUPTED,
                 "the planner stopped while the job waited for executors", false);
}

void aa__jobs_free(aa_planner_t *p) {
  aa__job_free(p->cur);
  p->cur = NULL;
  while (p->parked) {
    aa_planner_job_t *j = p->parked;
    p->parked = j->next;
    aa__job_free(j);
  }
  for (size_t i = 0; i < p->queue_n; i++) {
    free(p->queue[i].spec);
    free(p->queue[i].spec_json);
  }
  free(p->queue);
  p->queue = NULL;
  p->queue_n = p->queue_cap = 0;
  while (p->pending) {
    aa_pending_submit_t *s = p->pending;
    p->pending = s->next;
    aa_msg_free(&s->msg);
    free(s->spec);
    free(s->spec_json);
    free(s);
  }
  while (p->waiters) {
    aa_waiter_t *w = p->waiters;
    p->waiters = w->next;
    free(w);
  }
  while (p->unrecorded) {
    aa_unrecorded_t *u = p->unrecorded;
    p->unrecorded = u->next;
    free(u);
  }
}
