/* One job's life as the current job: its start (answer from the store,
 * resume of a search a stop interrupted, or a new search), the dry runs
 * and the training run dispatched as gangs, their results, and the best
 * strategy (docs/service.md "Jobs"). The queue around it is in jobs.c.
 *
 * The store is the record: every decision is written there in its own
 * short transaction as it is made, so a planner killed at any point leaves
 * a history aa_store_recover can close and the job can resume from. */
#include "planner_internal.h"

#include "../strategies/calib.h"
#include "../strategies/cost.h"
#include "../strategies/predict.h"
#include "../strategies/profile.h"
#include "../strategies/roofline.h"
#include "../strategies/space.h"

#include "../common/json.h"
#include "../common/mem.h"
#include "../common/rendezvous.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- small helpers ----------------------------------------------------------------- */

/* A run's step-time spread relative to its median step (what the search's
 * early stop compares); 0 when unknown. */
static double relative_spread(double step_ms_median, double step_ms_spread) {
  return step_ms_median > 0 ? step_ms_spread / step_ms_median : 0;
}

static aa_store_run_status_t store_status(aa_proto_run_status_t s) {
  switch (s) {
  case AA_PROTO_RUN_OK: return AA_STORE_RUN_OK;
  case AA_PROTO_RUN_OOM: return AA_STORE_RUN_OOM;
  case AA_PROTO_RUN_ERROR: return AA_STORE_RUN_ERROR;
  case AA_PROTO_RUN_TIMEOUT: return AA_STORE_RUN_TIMEOUT;
  case AA_PROTO_RUN_CRASHED: return AA_STORE_RUN_CRASHED;
  case AA_PROTO_RUN_CANCELLED: return AA_STORE_RUN_CANCELLED;
  }
  return AA_STORE_RUN_ERROR;
}

static aa_proto_run_status_t proto_status(aa_store_run_status_t s) {
  switch (s) {
  case AA_STORE_RUN_OK: return AA_PROTO_RUN_OK;
  case AA_STORE_RUN_OOM: return AA_PROTO_RUN_OOM;
  case AA_STORE_RUN_TIMEOUT: return AA_PROTO_RUN_TIMEOUT;
  case AA_STORE_RUN_CRASHED: return AA_PROTO_RUN_CRASHED;
  case AA_STORE_RUN_CANCELLED: return AA_PROTO_RUN_CANCELLED;
  default: return AA_PROTO_RUN_ERROR;
  }
}

/* A calibration's gang has no run in the store; in frames its id is this,
 * far above any row id the store will reach, so it never matches a run. */
static int64_t calib_run_id(const aa_planner_job_t *j, bool across) {
  return ((int64_t)1 << 62) + (across ? (int64_t)1 << 61 : 0) + j->id;
}

/* dispatch()'s calibrate: no (a run of the store), the calibration on one
 * host, or the one across hosts. */
enum { CALIB_NONE = 0, CALIB_HOST = 1, CALIB_ACROSS = 2 };

/* The process-group backend of the job's calibration gang, which sits on
 * one host: the links it measures are that backend's. */
static const char *calib_backend(const aa_planner_t *p, const aa_planner_job_t *j) {
  return aa__registry_backend(p, j->dev_kind, 1);
}

static void gang_free(aa_planner_job_t *j) {
  for (int r = 0; r < j->world; r++) {
    free(j->ranks[r].res.error);
    free(j->ranks[r].res.calib);
  }
  free(j->ranks);
  j->ranks = NULL;
  aa__relay_close(j->relay);
  j->relay = NULL;
  j->world = j->ndone = 0;
  j->aborted = false;
}

void aa__job_free(aa_planner_job_t *j) {
  if (!j) return;
  gang_free(j);
  aa__search_free(&j->search);
  free(j->calib);
  free(j->calib_inter);
  free(j->profile);
  free(j->roof);
  free(j->model_json);
  free(j);
}

/* --- the best strategy ---------------------------------------------------------------- */

/* "no strategy could run: 3 oom, 1 timeout" from the job's dry runs. */
static void why_none(const aa_planner_job_t *j, char *out, size_t n) {
  int counts[AA_STORE_RUN_NSTATUS] = {0}, ran = 0, pruned = 0;
  uint64_t least = 0; /* the smallest of the predicted-oom ones */
  for (size_t i = 0; i < j->search.n; i++) {
    const aa_cand_t *c = &j->search.c[i];
    if (c->state == AA_CAND_DONE) {
      counts[c->status]++;
      ran++;
    } else if (c->state == AA_CAND_PRUNED) {
      pruned++;
      if (j->search.memory && c->bytes > j->search.memory && (!least || c->bytes < least)) least = c->bytes;
    }
  }
  if (!ran && least) {
    char need[32], have[32];
    snprintf(out, n,
             "no strategy could run: all %d were pruned, %d of them predicted out of memory (the smallest "
             "needs at "
             "least %s per rank, a device has %s)",
             pruned, j->search.predicted_oom, aa_mem_fmt(need, least), aa_mem_fmt(have, j->search.memory));
    return;
  }
  if (!ran) {
    snprintf(out, n, "no strategy could run: all %d were pruned", pruned);
    return;
  }
  size_t o = (size_t)snprintf(out, n, "no strategy could run:");
  const char *sep = " ";
  for (int s = 0; s < AA_STORE_RUN_NSTATUS && o < n; s++) {
    if (!counts[s]) continue;
    o += (size_t)snprintf(out + o, n - o, "%s%d %s", sep, counts[s], aa_store_run_status_name(s));
    sep = ", ";
  }
}

/* Writes the best run's strategy with provenance to the state directory
 * and the submit's out_dir; j->best keeps it for training. tokens_per_s:
 * the figure it is saved with (the mean of its measurements), 0 = the
 * run's. */
static int write_strategy(aa_planner_t *p, aa_planner_job_t *j, const aa_store_run_t *r,
                          double tokens_per_s) {
  aa_strategy_t s;
  int rc = aa_strategy_parse(&s, r->strategy_json, "the best run's strategy");
  if (rc) return rc;
  snprintf(s.model_hash, sizeof s.model_hash, "%.16s", j->hash);
  snprintf(s.model_name, sizeof s.model_name, "%s", j->spec.name);
  snprintf(s.hardware, sizeof s.hardware, "%s", j->hardware);
  s.tokens_per_s = tokens_per_s > 0 ? tokens_per_s : r->tokens_per_s;
  s.peak_bytes = (double)r->peak_bytes;
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(s.date, sizeof s.date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char path[AA_PATH_MAX + 256];
  aa__report_strategy_path(p->home, j->spec.name, j->hash, path, sizeof path);
  if ((rc = aa_strategy_save(&s, path))) return rc;
  if (j->out_dir[0] && (rc = aa__out_dir_write_strategy(j, &s))) return rc;
  j->best = s;
  return 0;
}

/* The best run `id` becomes the job's answer: strategy files written, with
 * tokens_per_s as write_strategy's. */
static int take_best(aa_planner_t *p, aa_planner_job_t *j, int64_t id, double tokens_per_s) {
  aa_store_run_t r;
  int rc = aa_store_run_get(p->store, id, &r);
  if (rc) return rc;
  rc = write_strategy(p, j, &r, tokens_per_s);
  aa_store_run_clear(&r);
  if (!rc) j->best_run = id;
  return rc;
}

/* --- gangs ---------------------------------------------------------------------------------- */

/* How telling a rank's status is about why its run failed: a crash or an
 * out-of-memory is the cause; the errors and cancellations of the other
 * ranks are usually its consequences (their group broke, or the planner
 * aborted them). */
static int severity(aa_proto_run_status_t s) {
  switch (s) {
  case AA_PROTO_RUN_OK: return 0;
  case AA_PROTO_RUN_CANCELLED: return 1;
  case AA_PROTO_RUN_ERROR: return 2;
  case AA_PROTO_RUN_TIMEOUT: return 3;
  case AA_PROTO_RUN_OOM: return 4;
  case AA_PROTO_RUN_CRASHED: return 5;
  }
  return 2;
}

/* Tells the ranks of the running run that are still going to stop, once:
 * rank `cause` failed. Their executors kill the runners (the group's own
 * checks would stop them too, but only at a probe or a timeout). */
static void gang_abort(aa_planner_t *p, aa_planner_job_t *j, int cause) {
  if (j->aborted || j->world < 2) return;
  j->aborted = true;
  const aa_gang_rank_t *g = &j->ranks[cause];
  char reason[512];
  snprintf(reason, sizeof reason, "rank %d (executor %llu) ended %s%s%.300s", cause,
           (unsigned long long)g->executor, aa_store_run_status_name(store_status(g->res.status)),
           g->res.error ? ": " : "", g->res.error ? g->res.error : "");
  aa_proto_utf8_trim(reason);
  aa__planner_log(p, "job %lld: run %lld: %s; aborting the other ranks", (long long)j->id,
                  (long long)j->run_id, reason);
  int64_t run = j->run_id;
  for (int r = 0; r < j->world; r++) {
    if (j->ranks[r].done) continue;
    aa_conn_t *c = aa__registry_find(p, j->ranks[r].executor);
    if (!c || c->busy_run != run) continue;
    aa_msg_t m = {.type = AA_MSG_ABORT};
    m.abort = (aa_msg_abort_t){.job = (uint64_t)j->id, .run = (uint64_t)run, .reason = reason};
    aa__conn_send(c, &m);
  }
}

/* Rank `rank` of the running run ended with r (borrowed). A failure makes
 * the others stop; the run itself is finished by advance(). */
static void rank_report(aa_planner_t *p, int rank, const aa_msg_result_t *r) {
  aa_planner_job_t *j = p->cur;
  if (rank < 0 || rank >= j->world || j->ranks[rank].done) return;
  aa_gang_rank_t *g = &j->ranks[rank];
  g->done = true;
  g->order = ++j->ndone;
  g->res = *r;
  g->res.key = NULL;
  g->res.error = r->error ? strdup(r->error) : NULL;
  g->res.calib = r->calib ? strdup(r->calib) : NULL;
  if (r->rank != rank && (r->rank || r->has_times))
    aa__planner_log(
        p, "job %lld: run %lld: rank %d (executor %llu) reported itself as rank %d; kept as rank %d",
        (long long)j->id, (long long)j->run_id, rank, (unsigned long long)g->executor, r->rank, rank);
  if (j->world > 1)
    aa__planner_log(p, "job %lld: run %lld: rank %d (executor %llu) %s (%d of %d ranks in)", (long long)j->id,
                    (long long)j->run_id, rank, (unsigned long long)g->executor,
                    aa_store_run_status_name(store_status(r->status)), j->ndone, j->world);
  if (r->status != AA_PROTO_RUN_OK) gang_abort(p, j, rank);
  aa__planner_kick(p);
}

static void run_finished(aa_planner_t *p, const aa_msg_result_t *r, const aa_store_run_rank_t *ranks,
                         int n_ranks);
static void calib_finished(aa_planner_t *p);

/* A peak by kind as the JSON text the store keeps (malloc'd; NULL when
 * nothing was measured or no memory: the column is then NULL). */
static char *peak_text(const aa_msg_peak_t *k) {
  if (!k->total) return NULL;
  json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "params", (json_int_t)k->params, "grads",
                        (json_int_t)k->grads, "optim", (json_int_t)k->optim, "acts", (json_int_t)k->acts,
                        "workspace", (json_int_t)k->workspace, "total", (json_int_t)k->total);
  char *text = o ? aa__report_dump(o) : NULL;
  json_decref(o);
  return text;
}

/* Rank `rank`'s own figures as the store keeps them; *peak (to free)
 * holds the text rk->peak_json borrows. */
static void rank_record(int rank, const aa_msg_result_t *x, aa_store_run_rank_t *rk, char **peak) {
  *peak = peak_text(&x->peak);
  *rk = (aa_store_run_rank_t){.rank = rank,
                              .status = store_status(x->status),
                              .tokens_per_s = x->tokens_per_s,
                              .step_ms_median = x->step_ms_median,
                              .step_ms_spread = x->step_ms_spread,
                              .has_times = x->has_times,
                              .peak_bytes = (int64_t)x->peak.total,
                              .peak_json = *peak,
                              .error = x->error};
  memcpy(rk->time_ms, x->times.ms, sizeof rk->time_ms);
  memcpy(rk->coord, x->coord, sizeof rk->coord);
}

/* Every rank of the running run is in: one result for the run. A gang's
 * figures are those of the group as its slowest rank saw them: the lowest
 * tokens/s (each rank reports the group's tokens per step over its own
 * step time), the highest median step time and spread, the largest peak
 * memory (with its breakdown) and rank 0's loss (the group's mean). Its
 * status is the most telling rank's (severity), naming it; on a tie the
 * rank that ended first. */
static void gang_finish(aa_planner_t *p) {
  aa_planner_job_t *j = p->cur;
  if (j->calibrating) {
    calib_finished(p);
    return;
  }
  char error[AA_PROTO_TEXT_MAX + 1] = "";
  aa_msg_result_t out = {.job = (uint64_t)j->id, .run = (uint64_t)j->run_id};
  int worst = 0, biggest = 0;
  for (int r = 0; r < j->world; r++) {
    const aa_msg_result_t *x = &j->ranks[r].res;
    int a = severity(x->status), b = severity(j->ranks[worst].res.status);
    if (a > b || (a == b && j->ranks[r].order < j->ranks[worst].order)) worst = r;
    if (x->peak.total > j->ranks[biggest].res.peak.total) biggest = r;
    out.tokens_per_s = r == 0 || x->tokens_per_s < out.tokens_per_s ? x->tokens_per_s : out.tokens_per_s;
    if (x->step_ms_median > out.step_ms_median) out.step_ms_median = x->step_ms_median;
    if (x->step_ms_spread > out.step_ms_spread) out.step_ms_spread = x->step_ms_spread;
    /* The same on every rank (the engine reduces it over the gang). */
    if (x->has_moe_max_tokens && x->moe_max_tokens > out.moe_max_tokens) {
      out.has_moe_max_tokens = true;
      out.moe_max_tokens = x->moe_max_tokens;
    }
  }
  const aa_gang_rank_t *w = &j->ranks[worst];
  out.status = w->res.status;
  out.peak = j->ranks[biggest].res.peak;
  out.inputs = w->res.inputs;
  out.has_final_loss = j->ranks[0].res.has_final_loss;
  out.final_loss = j->ranks[0].res.final_loss;
  if (j->world == 1) {
    if (w->res.error) snprintf(error, sizeof error, "%s", w->res.error);
  } else if (out.status != AA_PROTO_RUN_OK) {
    snprintf(error, sizeof error, "rank %d (executor %llu): %.3900s", worst, (unsigned long long)w->executor,
             w->res.error ? w->res.error : aa_store_run_status_name(store_status(w->res.status)));
    aa_proto_utf8_trim(error);
  }
  out.error = error[0] ? error : NULL;
  /* Every rank's own figures go to the store with the run's; if there is
   * no memory for them the run is still recorded, without them. */
  aa_store_run_rank_t *ranks = calloc((size_t)j->world, sizeof *ranks);
  char **texts = calloc(2 * (size_t)j->world, sizeof *texts); /* each rank's peak JSON and error */
  int n = ranks && texts ? j->world : 0;
  if (!n)
    aa__planner_log(p, "job %lld: run %lld: no memory to record its ranks", (long long)j->id,
                    (long long)j->run_id);
  for (int r = 0; r < n; r++) {
    rank_record(r, &j->ranks[r].res, &ranks[r], &texts[2 * r]);
    texts[2 * r + 1] = j->ranks[r].res.error; /* kept past gang_free */
    j->ranks[r].res.error = NULL;
  }
  /* The gang is over before run_finished, which may start the next one. */
  gang_free(j);
  run_finished(p, &out, ranks, n);
  for (int r = 0; r < 2 * n; r++)
    free(texts[r]);
  free(texts);
  free(ranks);
}

/* --- dispatch ------------------------------------------------------------------------------ */

/* Sends strategy s as one run of `kind` to a gang of dp * tp * pp idle
 * executors of the job's hardware placed by aa__registry_place (one host
 * when one has room, else each tensor-parallel group inside one host): the
 * run is inserted running (with the predictions: tokens/s, and
 * predicted_json, borrowed, may be NULL), a group of more than one rank
 * gets a fresh rendezvous of aa__registry_backend (shm on one host, gloo
 * across hosts, nccl for CUDA), and rank r goes to the executor placed
 * for it. A calibration (calibrate: the job's calibrate phase; kind is
 * then ignored) is sent the same way to a gang of `world` ranks on one
 * host with s as its default strategy, but is no run of the store: its
 * id is calib_run_id(j, across). Returns 0 when sent, 1 when the idle executors
 * cannot place it now (nothing done; logged once), or an error (the run,
 * if it was inserted, recorded error). */
static int dispatch(aa_planner_t *p, aa_planner_job_t *j, const aa_strategy_t *s, aa_store_run_kind_t kind,
                    double predicted, const char *predicted_json, int calibrate, int calib_world) {
  int world = calibrate ? calib_world : (int)aa_strategy_world(s);
  if (world < 1 || world > AA_PROTO_WORLD_MAX)
    return aa_error(AA_EINVAL, "strategy: %d ranks is outside 1..%d", world, AA_PROTO_WORLD_MAX);
  aa_conn_t **gang = calloc((size_t)world, sizeof *gang);
  if (!gang) return aa_error(AA_ENOMEM, "planner: no memory for a gang of %d", world);
  int hosts = calibrate == CALIB_ACROSS
                  ? aa__registry_place_across(p, j->hardware, world, gang)
                  : aa__registry_place(p, j->hardware, calibrate ? NULL : s, world, gang);
  if (hosts < 0) {
    free(gang);
    return hosts;
  }
  if (!hosts) {
    if (!j->waiting_logged)
      aa__planner_log(p, "job %lld waits for %d idle executor%s of %s%s", (long long)j->id, world,
                      world > 1 ? "s" : "", j->hardware,
                      calibrate == CALIB_ACROSS ? " on two hosts or more"
                      : calibrate || !aa__registry_spans(p, j->hardware)
                          ? " on one host"
                          : " with each tensor-parallel group on one host");
    j->waiting_logged = true;
    free(gang);
    return 1;
  }
  j->waiting_logged = false;
  /* What the cost model expects of it, kept beside what it will measure:
   * the most loaded rank's bytes and the pipeline's bubble. */
  const int accum = aa_strategy_accum_steps(s, &j->spec);
  aa_cost_mem_t cm;
  aa_cost_memory(&j->spec.arch, s, accum, &cm);
  aa_store_run_new_t nr = {.job_id = j->id,
                           .kind = kind,
                           .strategy = s,
                           .status = AA_STORE_RUN_RUNNING,
                           .predicted_tokens_per_s = predicted,
                           .predicted_peak_bytes = (int64_t)cm.total,
                           .predicted_bubble = aa_cost_bubble(s, accum),
                           .predicted_json = predicted_json};
  int64_t run = 0;
  char *strategy = NULL, dir[AA_PATH_MAX + 64], rdv[AA_RENDEZVOUS_MAX] = "", why[AA_PROTO_TEXT_MAX];
  aa_gang_rank_t *ranks = NULL;
  int rc = calibrate ? 0 : aa_store_run_insert(p->store, &nr, &run);
  if (rc) {
    free(gang);
    return rc;
  }
  if (calibrate) run = calib_run_id(j, calibrate == CALIB_ACROSS);
  rc = aa_strategy_to_json(s, &strategy);
  if (!rc && !(ranks = calloc((size_t)world, sizeof *ranks)))
    rc = aa_error(AA_ENOMEM, "planner: no memory for a gang of %d", world);
  if (!rc && world > 1) {
    char tag[64];
    snprintf(tag, sizeof tag, "j%lldr%lld", (long long)j->id, (long long)run);
    rc = aa_rendezvous_new(rdv, sizeof rdv, aa__registry_backend(p, j->dev_kind, hosts), tag);
  }
  aa_msg_t m = {.type = AA_MSG_JOB, .id = (uint64_t)run};
  m.job = (aa_msg_job_t){.job = (uint64_t)j->id,
                         .run = (uint64_t)run,
                         .model = j->model_json,
                         .strategy = strategy,
                         .world = world,
                         .rendezvous = world > 1 ? rdv : NULL};
  if (calibrate || kind == AA_STORE_RUN_DRYRUN) {
    m.job.kind = calibrate ? AA_PROTO_JOB_CALIBRATE : AA_PROTO_JOB_DRYRUN;
    m.job.warmup_steps = (uint64_t)p->warmup_steps;
    m.job.measured_steps = (uint64_t)p->measured_steps;
    m.job.time_limit_s = p->dryrun_time_limit_s;
    if (j->search.deadline > 0) { /* no dry run outlives the search's time limit by much */
      int left = (int)(j->search.deadline - aa_now()) + 1;
      if (left < m.job.time_limit_s) m.job.time_limit_s = left < 1 ? 1 : left;
    }
  } else {
    m.job.kind = AA_PROTO_JOB_TRAIN;
    m.job.measured_steps = (uint64_t)j->spec.train.steps;
    if (j->out_dir[0])
      snprintf(dir, sizeof dir, "%s", j->out_dir);
    else
      snprintf(dir, sizeof dir, "%.4000s/runs/job-%lld", p->home, (long long)j->id);
    m.job.out_dir = dir;
    if (j->out_dir[0] && j->has_owner) {
      m.job.has_owner = true;
      m.job.owner = (uint64_t)j->owner;
    }
  }
  /* Every rank's frame is queued before any executor is marked busy: a
   * connection that breaks while we write to it is torn down as an idle
   * one, and its rank is recorded lost below. */
  int sent = 0;
  for (; !rc && sent < world; sent++) {
    m.job.rank = sent;
    if ((rc = aa__conn_send(gang[sent], &m))) break;
  }
  free(strategy);
  if (rc) snprintf(why, sizeof why, "the planner could not send it: %s", aa_last_error());
  if (sent == 0) { /* the run never left: close its record */
    aa_store_run_result_t res = {.status = AA_STORE_RUN_ERROR, .error = why};
    if (!calibrate) aa_store_run_finish(p->store, run, &res);
    free(ranks);
    free(gang);
    return aa_error(rc, "%s", why);
  }
  j->ranks = ranks;
  j->world = world;
  j->ndone = 0;
  j->aborted = false;
  j->lost_executor = false;
  j->run_id = run;
  j->calibrating = calibrate;
  j->calibrating_inter = calibrate == CALIB_ACROSS;
  if (calibrate)
    snprintf(j->run_key, sizeof j->run_key, "calibrate");
  else
    aa_strategy_key(s, j->run_key);
  for (int r = 0; r < world; r++) {
    ranks[r].executor = gang[r]->id;
    if (r >= sent || gang[r]->dropped) continue;
    gang[r]->busy_job = j->id;
    gang[r]->busy_run = run;
    gang[r]->busy_rank = r;
  }
  aa__relay_open_gang(p, j); /* the store its ranks meet through, until gang_free */
  char who[256] = "";
  for (int r = 0, o = 0; r < world && o < (int)sizeof who - 24; r++)
    o += snprintf(who + o, sizeof who - (size_t)o, "%s%llu", r ? "," : "", (unsigned long long)gang[r]->id);
  const char *ex = world > 1 ? "executors" : "executor";
  if (hosts > 1) {
    size_t o = strlen(who);
    snprintf(who + o, sizeof who - o, " across %d hosts", hosts);
  }
  if (calibrate)
    aa__planner_log(p, "job %lld: calibrating on %d %s (%s): %s%s%s", (long long)j->id, world, ex,
                    j->calib_what, who, world > 1 ? ", rendezvous " : "", rdv);
  else if (kind == AA_STORE_RUN_DRYRUN)
    aa__planner_log(p, "job %lld: dry run %d/%d %s on %s %s (run %lld)%s%s", (long long)j->id, j->run_index,
                    j->search.valid, j->run_key, ex, who, (long long)run, world > 1 ? ", rendezvous " : "",
                    rdv);
  else
    aa__planner_log(p, "job %lld: training %s for %d steps on %s %s (run %lld) into %s", (long long)j->id,
                    j->run_key, j->spec.train.steps, ex, who, (long long)run, dir);
  /* Ranks that never got their frame are lost like a dead executor's. */
  for (int r = 0; r < world; r++) {
    if (r < sent && !gang[r]->dropped) continue;
    char lost[AA_PROTO_TEXT_MAX + 64];
    if (r < sent)
      snprintf(lost, sizeof lost, "executor %llu disconnected", (unsigned long long)gang[r]->id);
    else
      snprintf(lost, sizeof lost, "%s", why);
    aa_msg_result_t res = {
        .job = (uint64_t)j->id, .run = (uint64_t)run, .status = AA_PROTO_RUN_CRASHED, .error = lost};
    j->lost_executor = j->lost_executor || r < sent;
    rank_report(p, r, &res);
  }
  free(gang);
  return 0;
}

/* Records the candidates the search dropped since the last call. */
static int record_pruned(aa_planner_t *p, aa_planner_job_t *j) {
  for (size_t i = 0; i < j->search.n; i++) {
    aa_cand_t *c = &j->search.c[i];
    if (c->state != AA_CAND_PRUNED || c->recorded) continue;
    aa_store_run_new_t nr = {.job_id = j->id,
                             .kind = AA_STORE_RUN_DRYRUN,
                             .strategy = &c->s,
                             .status = AA_STORE_RUN_PRUNED,
                             .error = c->reason};
    int rc = aa_store_run_insert(p->store, &nr, &c->run_id);
    if (rc) return rc;
    c->recorded = true;
  }
  return 0;
}

/* A candidate whose gang the executors of the job's hardware connected
 * now cannot place, busy ones included (on one host for --cpu-backend
 * shm; else with each tensor-parallel group inside one host), cannot run: it is pruned with what the hosts have rather than
 * waited for (an executor may be gone for good). One rank alone waits, as
 * a job does for its first executor. */
static bool gang_too_big(aa_planner_t *p, aa_planner_job_t *j, aa_cand_t *c) {
  int world = (int)aa_strategy_world(&c->s);
  if (world <= 1 || aa__registry_placeable(p, j->hardware, world, aa_strategy_host_unit(&c->s), c->reason,
                                           sizeof c->reason))
    return false;
  c->state = AA_CAND_PRUNED;
  return true;
}

/* Prunes the pending candidates the connected hosts cannot place, so the
 * search's counts and order see only what can run. */
static void prune_unplaceable(aa_planner_t *p, aa_planner_job_t *j) {
  for (size_t i = 0; i < j->search.n; i++)
    if (j->search.c[i].state == AA_CAND_PENDING) gang_too_big(p, j, &j->search.c[i]);
}

/* dispatch() found no gang for a run of `world` ranks in host groups of
 * `unit`: if the executors are not merely busy but gone, the job steps aside
 * (jobs.c parks it) so that jobs for the executors still connected may
 * run. */
static void no_gang(aa_planner_t *p, int world, int unit) {
  char why[512];
  if (!aa__registry_placeable(p, p->cur->hardware, world, unit, why, sizeof why))
    aa__jobs_park(p, world, unit);
}

/* --- the calibrate phase --------------------------------------------------------------- */

/* Whether j->calib lacks an op shape the model's strategies on a pool of
 * `world` run (predict.h aa_predict_wanted). */
static bool calib_lacks_ops(const aa_planner_job_t *j, int world) {
  aa_calib_op_t *want = malloc(AA_CALIB_OPS_MAX * sizeof *want);
  if (!want) return true;
  size_t n = aa_predict_wanted(&j->spec, world, j->dev_kind == AA_PROTO_DEV_CUDA, want, AA_CALIB_OPS_MAX);
  bool lacks = n == 0;
  for (size_t i = 0; i < n && i < AA_CALIB_OPS_MAX && !lacks; i++)
    lacks = !aa_calib_find_op(j->calib, &want[i].shape, want[i].dtype);
  free(want);
  return lacks;
}

/* The pool the job's candidates are predicted on: its executors, which on
 * a CPU share the cores of their host; when its gangs span hosts, as many
 * on a host as its largest has, with the links between hosts measured; on
 * a GPU of the catalogue, its profile for what the calibration lacks
 * (roof_refit keeps it fitted to the calibration). */
static aa_predict_pool_t calib_pool(aa_planner_t *p, const aa_planner_job_t *j) {
  int world = aa__planner_hw_world(j->hardware), most = aa__registry_most_on_one_host(p, j->hardware);
  bool across = aa__registry_spans(p, j->hardware) && most >= 1 && most < world;
  return (aa_predict_pool_t){.devices = world,
                             .host_cores = j->dev_kind == AA_PROTO_DEV_CUDA ? 0 : j->calib->host_cores,
                             .host_devices = across ? most : 0,
                             .inter = across ? j->calib_inter : NULL,
                             .roofline = j->roof,
                             .moe_imbalance = j->moe_imbalance};
}

/* Fits the job's profile roofline, if it has one, to its calibration as
 * it is now: whenever the calibration is set or merged. */
static void roof_refit(aa_planner_job_t *j) {
  if (!j->roof) return;
  aa_roofline_init(j->roof, j->profile);
  aa_roofline_fit(j->roof, j->calib);
}

/* The profile of the job's GPU, when the catalogue has one (once). */
static void profile_lookup(aa_planner_t *p, aa_planner_job_t *j, const char *device) {
  if (j->dev_kind != AA_PROTO_DEV_CUDA || j->roof) return;
  aa_device_profile_t prof;
  if (aa_profile_for_device(&prof, device)) return;
  j->profile = malloc(sizeof *j->profile);
  j->roof = malloc(sizeof *j->roof);
  if (!j->profile || !j->roof) {
    free(j->profile);
    free(j->roof);
    j->profile = NULL;
    j->roof = NULL;
    return;
  }
  *j->profile = prof;
  roof_refit(j);
  aa__planner_log(p,
                  "job %lld: %s is the %s of the device profiles: op shapes and collectives its calibration "
                  "lacks are timed from that profile, refitted to the calibration",
                  (long long)j->id, device, prof.name);
}

/* Gives every candidate not pruned its calibrated prediction (the search
 * then orders, refits and stops by them); one the model cannot predict
 * keeps none and comes after the predicted ones. */
static void calib_apply(aa_planner_t *p, aa_planner_job_t *j) {
  if (!j->calib) return;
  const aa_predict_pool_t pool = calib_pool(p, j);
  int done = 0, failed = 0, stand_ins = 0;
  char first[300] = "";
  for (size_t i = 0; i < j->search.n; i++) {
    aa_cand_t *c = &j->search.c[i];
    aa_predict_t pr;
    if (c->state == AA_CAND_PRUNED) continue;
    if (aa_predict(&j->spec, &c->s, j->calib, &pool, &pr) || !(pr.tokens_per_s > 0)) {
      if (!failed++) snprintf(first, sizeof first, "%s: %.200s", c->key, aa_last_error());
      continue;
    }
    aa__search_set_prediction(&j->search, (int)i, pr.tokens_per_s);
    done++;
    stand_ins += pr.ops_estimated || pr.links_estimated || pr.ops_modelled || pr.links_modelled;
  }
  aa__planner_log(
      p,
      "job %lld: %d candidates predicted from the calibration (%d with stand-ins for shapes or group "
      "sizes it lacks)%s%s%s",
      (long long)j->id, done, stand_ins, failed ? "; not predicted: " : "", failed ? first : "",
      failed > 1 ? " and others" : "");
}

/* A dry run of candidate c measured the router's load (max_tokens, the
 * result's moe_max_tokens): its imbalance joins the job's mean, and when
 * that moves by more than 1 % every candidate is predicted again with it
 * (what the search orders, refits and stops by). Returns the run's
 * imbalance, 0 when it measured none. */
static double moe_observed(aa_planner_t *p, aa_planner_job_t *j, const aa_cand_t *c, double max_tokens) {
  const double f = aa_predict_imbalance(&j->spec.arch, &c->s, max_tokens);
  if (!(f >= 1)) return 0;
  const double before = j->moe_imbalance;
  j->moe_imbalance += (f - j->moe_imbalance) / ++j->moe_runs;
  if (fabs(j->moe_imbalance - before) > 0.01 * before) {
    aa__planner_log(
        p,
        "job %lld: %s measured a router load imbalance of %.2f (the most tokens an expert got, over "
        "the even load); the expert ranks are now predicted at %.2f, the mean of %d run%s",
        (long long)j->id, c->key, f, j->moe_imbalance, j->moe_runs, j->moe_runs > 1 ? "s" : "");
    calib_apply(p, j);
  }
  return f;
}

/* A job of an MoE model starts from the load imbalance earlier runs of
 * the model measured (the store's mean; a resumed job's own runs among
 * them), so that its first predictions already use it. */
static void moe_seed(aa_planner_t *p, aa_planner_job_t *j) {
  double mean = 0;
  int n = 0;
  if (!j->spec.arch.moe.experts) return;
  if (aa_store_moe_imbalance(p->store, j->hash, &mean, &n)) {
    aa__planner_log(p, "job %lld: cannot read the measured load imbalance: %s", (long long)j->id,
                    aa_last_error());
    return;
  }
  if (n < 1 || !(mean >= 1)) return;
  j->moe_imbalance = mean;
  j->moe_runs = n;
  aa__planner_log(p,
                  "job %lld: %d earlier run%s of the model measured a router load imbalance of %.2f (mean): "
                  "the expert ranks are predicted at it",
                  (long long)j->id, n, n > 1 ? "s" : "", mean);
}

/* The predicted step of candidate c by part as the store keeps it
 * (runs.predicted_json, docs/store.md), malloc'd; NULL without a
 * calibrated prediction. */
static char *predicted_json(aa_planner_t *p, const aa_planner_job_t *j, const aa_cand_t *c) {
  if (!j->calib || !(c->predicted > 0)) return NULL;
  const aa_predict_pool_t pool = calib_pool(p, j);
  aa_predict_t pr;
  if (aa_predict(&j->spec, &c->s, j->calib, &pool, &pr)) return NULL;
  json_t *o = aa__plan_breakdown(&pr);
  char *text = o ? aa__report_dump(o) : NULL;
  json_decref(o);
  return text;
}

/* The gang a calibration measures on: the job's pool, but on one host
 * (a pool across hosts calibrates on its largest host; the links measured
 * are that host's backend, not the network's). */
static int calib_world(aa_planner_t *p, const aa_planner_job_t *j) {
  int world = aa__planner_hw_world(j->hardware), have = aa__registry_most_on_one_host(p, j->hardware);
  return have >= 1 && have < world ? have : world;
}

/* Whether calibration j->calib (NULL = none) lacks what the job needs: the
 * all-reduce of every group size its pool can form (2 .. world in powers
 * of two) and the op shapes of the model's strategies. What is missing
 * goes into j->calib_what ("ops of the model, collectives of 2, 4"). */
/* The group sizes 2 .. world (powers of two) whose all-reduce c (NULL =
 * none) lacks, appended to what (n bytes, at *o) after sep; whether any. */
static bool links_missing(const aa_calib_t *c, int world, char *what, size_t n, size_t *o, const char *sep) {
  bool links = false;
  for (int t = 2; t <= world && *o < n; t *= 2) {
    if (c && aa_calib_find_link(c, AA_COST_ALL_REDUCE, t)) continue;
    *o += (size_t)snprintf(what + *o, n - *o, "%s%d", sep, t);
    sep = ", ";
    links = true;
  }
  return links;
}

static bool calib_missing(aa_planner_job_t *j, int world) {
  bool ops = !j->calib || calib_lacks_ops(j, world);
  size_t o = (size_t)snprintf(j->calib_what, sizeof j->calib_what, "%s", ops ? "ops of the model" : "");
  bool links = links_missing(j->calib, world, j->calib_what, sizeof j->calib_what, &o,
                             ops ? ", collectives of " : "collectives of ");
  return ops || links;
}

/* A pool whose gangs span hosts (two or more with executors of the job's
 * hardware) needs the links between hosts for every group size 2 .. its
 * world: the device's stored calibration across hosts (gloo for CPUs,
 * nccl-hosts for CUDA: aa_calib_across_hosts) becomes j->calib_inter, and
 * j->inter_wanted says whether it lacks a size. */
static void inter_lookup(aa_planner_t *p, aa_planner_job_t *j, const char *device) {
  int world = aa__planner_hw_world(j->hardware), most = aa__registry_most_on_one_host(p, j->hardware);
  j->inter_wanted = false;
  if (!aa__registry_spans(p, j->hardware) || most < 1 || most >= world) return;
  char *json = NULL;
  int rc =
      aa_store_calib_get(p->store, device, aa_calib_across_hosts(j->dev_kind == AA_PROTO_DEV_CUDA), &json);
  if (rc == 0) {
    aa_calib_t *c = malloc(sizeof *c);
    if (c && !aa_calib_parse(c, json, "the stored calibration across hosts")) {
      j->calib_inter = c;
    } else {
      aa__planner_log(p, "job %lld: the stored calibration of %s across hosts cannot be used: %s",
                      (long long)j->id, device, c ? aa_last_error() : "no memory");
      free(c);
    }
  }
  free(json);
  size_t o = 0;
  char what[sizeof j->calib_what];
  j->inter_wanted =
      links_missing(j->calib_inter, world, what, sizeof what, &o, "collectives across hosts of ");
  if (!j->inter_wanted)
    aa__planner_log(p, "job %lld: using the stored links of %s between hosts", (long long)j->id, device);
}

/* The walk of aa_store_calib_list for one (device, backend): its date. */
typedef struct {
  const char *backend;
  int64_t measured_at;
} calib_date_t;

static int calib_date(const aa_store_calib_t *c, void *data) {
  calib_date_t *d = data;
  if (strcmp(c->backend, d->backend)) return 0;
  d->measured_at = c->measured_at;
  return 1;
}

/* The start of the calibrate phase: the stored calibration of the job's
 * device and backend becomes j->calib; when there is none, or it lacks
 * what the job needs, calib_wanted sends the pool to measure (advance).
 * A calibration the store cannot give is logged and measured again. */
static void calib_lookup(aa_planner_t *p, aa_planner_job_t *j) {
  char device[AA_STORE_HW_MAX], *json = NULL;
  aa_store_device_of(j->hardware, device, sizeof device);
  int rc = aa_store_calib_get(p->store, device, calib_backend(p, j), &json);
  if (rc < 0)
    aa__planner_log(p, "job %lld: cannot read the stored calibration of %s: %s", (long long)j->id, device,
                    aa_last_error());
  if (rc == 0) {
    aa_calib_t *c = malloc(sizeof *c);
    if (c && !aa_calib_parse(c, json, "the stored calibration")) {
      j->calib = c;
    } else {
      aa__planner_log(p, "job %lld: the stored calibration of %s cannot be used: %s", (long long)j->id,
                      device, c ? aa_last_error() : "no memory");
      free(c);
    }
  }
  free(json);
  inter_lookup(p, j, device);
  profile_lookup(p, j, device);
  j->calib_wanted = calib_missing(j, calib_world(p, j));
  if (j->calib_wanted || j->inter_wanted) return;
  calib_date_t d = {.backend = calib_backend(p, j)};
  char date[32] = "at an unknown date";
  if (aa_store_calib_list(p->store, device, calib_date, &d) >= 0 && d.measured_at > 0) {
    time_t at = (time_t)d.measured_at;
    struct tm tm;
    gmtime_r(&at, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  }
  aa__planner_log(p, "job %lld: using the stored calibration of %s (measured %s)", (long long)j->id, device,
                  date);
  j->calib_over = true;
  calib_apply(p, j);
}

/* Sends the job's pool (its hardware's executors on one host, as many as
 * are connected) to measure what calib_missing found missing. Returns
 * like dispatch(): 0 sent, 1 waiting for executors, < 0 not sent. */
static int calib_send(aa_planner_t *p, aa_planner_job_t *j) {
  /* The one host's first; then, when the pool spans hosts and lacks them,
   * the links between hosts, by a gang of the whole pool, ranks on the
   * hosts in turn (aa__registry_place_across). */
  const bool across = !j->calib_wanted;
  int world = across ? aa__planner_hw_world(j->hardware) : calib_world(p, j);
  if (across) {
    size_t o = 0;
    links_missing(j->calib_inter, world, j->calib_what, sizeof j->calib_what, &o,
                  "collectives across hosts of ");
  }
  /* The job frame needs a strategy; the calibration measures every shape
   * the model's strategies produce, whatever it is. */
  aa_strategy_t d;
  aa_strategy_default(&d);
  if (aa_strategy_resolve(&d, &j->spec, 1))
    return aa_error(AA_EINVAL, "no default strategy: %s", aa_last_error());
  int rc = dispatch(p, j, &d, AA_STORE_RUN_DRYRUN, 0, NULL, across ? CALIB_ACROSS : CALIB_HOST, world);
  if (rc == 0) j->calib_started = aa_now();
  return rc;
}

/* One step of the calibrate phase is over, measured or not (across: the
 * links between hosts, else the host's calibration). When neither is
 * still wanted the phase is over and the candidates get their
 * predictions; returns whether it is. */
static bool calib_step_done(aa_planner_t *p, aa_planner_job_t *j, bool across) {
  if (across)
    j->inter_wanted = false;
  else
    j->calib_wanted = false;
  if (j->calib_wanted || j->inter_wanted) return false;
  j->calib_over = true;
  calib_apply(p, j);
  return true;
}

/* The calibration's gang is in: rank 0's measurements are merged into the
 * stored calibration (or become it) and stored; a failed calibration is
 * logged and the search goes on without it (or with the stored one it
 * meant to extend). Either way the phase is over. */
static void calib_finished(aa_planner_t *p) {
  aa_planner_job_t *j = p->cur;
  const bool across = j->calibrating_inter;
  aa_calib_t **into = across ? &j->calib_inter : &j->calib;
  const char *backend =
      across ? aa_calib_across_hosts(j->dev_kind == AA_PROTO_DEV_CUDA) : calib_backend(p, j);
  char why[AA_PROTO_TEXT_MAX + 128] = "", device[AA_STORE_HW_MAX];
  aa_store_device_of(j->hardware, device, sizeof device);
  for (int r = 0; r < j->world && !why[0]; r++) {
    const aa_gang_rank_t *g = &j->ranks[r];
    if (g->res.status != AA_PROTO_RUN_OK)
      snprintf(why, sizeof why, "rank %d (executor %llu) ended %s%s%.3900s", r,
               (unsigned long long)g->executor, aa_store_run_status_name(store_status(g->res.status)),
               g->res.error ? ": " : "", g->res.error ? g->res.error : "");
  }
  const char *text = j->world > 0 ? j->ranks[0].res.calib : NULL;
  if (!why[0] && !text) snprintf(why, sizeof why, "rank 0 sent no measurements");
  aa_calib_t *got = why[0] ? NULL : malloc(sizeof *got);
  if (!why[0] && !got) snprintf(why, sizeof why, "no memory for the calibration");
  if (got && aa_calib_parse(got, text, "the calibration")) snprintf(why, sizeof why, "%s", aa_last_error());
  if (!why[0]) {
    int ops = got->n_op, links = got->n_link;
    if (*into) {
      aa_calib_merge(*into, got);
    } else {
      *into = got;
      got = NULL;
    }
    roof_refit(j);
    char *json = aa_calib_to_json(*into);
    if (!json || aa_store_calib_put(p->store, device, backend, json))
      aa__planner_log(p, "job %lld: cannot store the calibration of %s: %s (this job uses it)",
                      (long long)j->id, device, json ? aa_last_error() : "no memory");
    else
      aa__planner_log(p, "job %lld: calibration of %s%s stored (%d ops, %d links, %.1f s)", (long long)j->id,
                      device, across ? " across hosts" : "", ops, links, aa_now() - j->calib_started);
    free(json);
  } else {
    aa_proto_utf8_trim(why);
    aa__planner_log(p, "job %lld: calibration%s failed: %s; the search goes on %s", (long long)j->id,
                    across ? " across hosts" : "", why,
                    across     ? "predicting collectives across hosts from those within one"
                    : j->calib ? "with the stored calibration"
                               : "without one (predictions from the nearest measured run)");
  }
  free(got);
  j->run_id = 0;
  j->calibrating = j->calibrating_inter = false;
  gang_free(j);
  calib_step_done(p, j, across);
  aa__planner_kick(p);
}

void aa__job_advance(aa_planner_t *p) {
  aa_planner_job_t *j = p->cur;
  char why[512];
  if (j->run_id) { /* a run is out: it ends once every rank is in */
    if (j->ndone == j->world) gang_finish(p);
    return;
  }
  if (j->phase == AA_PHASE_SEARCH && !j->calib_over) {
    const bool across = !j->calib_wanted;
    int rc = calib_send(p, j);
    if (rc == 1 && !across) {
      no_gang(p, 1, 1);
      return;
    }
    if (rc == 0) return;
    if (rc == 1)
      aa__planner_log(p,
                      "job %lld: fewer than two hosts have idle executors: the links between hosts are "
                      "predicted from those within one",
                      (long long)j->id);
    else
      aa__planner_log(p, "job %lld: cannot send the calibration%s: %s; the search goes on without it",
                      (long long)j->id, across ? " across hosts" : "", aa_last_error());
    if (!calib_step_done(p, j, across)) {
      aa__planner_kick(p);
      return;
    }
  }
  if (j->phase == AA_PHASE_SEARCH) {
    int i;
    while ((i = aa__search_next(&j->search, aa_now())) >= 0 && gang_too_big(p, j, &j->search.c[i])) {
    }
    if (record_pruned(p, j)) {
      snprintf(why, sizeof why, "cannot record a pruned run: %s", aa_last_error());
      aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
      return;
    }
    /* The pass is over: the leaders are measured again in fresh processes
     * until the winner is decided beyond their noise. */
    bool again = i < 0 && (i = aa__search_remeasure_next(&j->search, aa_now())) >= 0;
    if (i >= 0) {
      aa_cand_t *c = &j->search.c[i];
      char *pj = predicted_json(p, j, c);
      j->run_index = j->search.dispatched + 1;
      int rc =
          dispatch(p, j, &c->s, AA_STORE_RUN_DRYRUN, aa__search_predict(&j->search, i), pj, CALIB_NONE, 0);
      free(pj);
      if (rc == 1) {
        no_gang(p, 1, 1);
        return;
      }
      if (rc) {
        snprintf(why, sizeof why, "cannot start a dry run: %s", aa_last_error());
        aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
        return;
      }
      if (again)
        aa__planner_log(
            p, "job %lld: %s measured again in a fresh process (measurement %d): a leader within the noise",
            (long long)j->id, c->key, c->measures + 1);
      j->cand = i;
      c->state = AA_CAND_RUNNING;
      c->run_id = j->run_id;
      j->search.dispatched++;
      return;
    }
    /* The pick: the highest mean of the candidates' ok measurements. */
    int w = aa__search_verdict(&j->search, j->verdict, sizeof j->verdict);
    if (w < 0) {
      why_none(j, why, sizeof why);
      aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
      return;
    }
    aa__planner_log(p, "job %lld: %s", (long long)j->id, j->verdict);
    if (aa_store_job_set_note(p->store, j->id, j->verdict))
      aa__planner_log(p, "job %lld: cannot store the verdict: %s", (long long)j->id, aa_last_error());
    if (take_best(p, j, j->search.c[w].best_run_id, j->search.c[w].tokens_per_s)) {
      snprintf(why, sizeof why, "cannot write the strategy file: %s", aa_last_error());
      aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
      return;
    }
    if (!j->train) {
      aa__jobs_end(p, j, AA_STORE_JOB_DONE, NULL, false);
      return;
    }
    j->phase = AA_PHASE_TRAIN;
  }
  /* Training with a dp > 1 strategy is a gang too: it waits while its
   * executors are busy, and steps aside while they are not connected. */
  int rc = dispatch(p, j, &j->best, AA_STORE_RUN_TRAIN, 0, NULL, CALIB_NONE, 0);
  if (rc == 1) {
    no_gang(p, (int)aa_strategy_world(&j->best), aa_strategy_host_unit(&j->best));
  } else if (rc < 0) {
    snprintf(why, sizeof why, "cannot start training: %s", aa_last_error());
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
  }
}

/* --- the start of a job --------------------------------------------------------------------- */

/* Reads the job's stored options into j, and its spec unless the submit's
 * parse is at hand (spec, spec_json: transferred, may be NULL). A spec
 * read from the store is parsed once; its text there is already the
 * canonical one the executors get. */
static int load_options(aa_planner_job_t *j, const char *options, aa_model_spec_t *spec, char *spec_json) {
  json_error_t err;
  json_t *o = json_loads(options, 0, &err);
  int rc = 0;
  if (!json_is_object(o)) {
    json_decref(o);
    free(spec);
    free(spec_json);
    return aa_error(AA_ECORRUPT, "job %lld: its stored options are not a JSON object", (long long)j->id);
  }
  j->train = json_is_true(json_object_get(o, "train"));
  j->refresh = json_is_true(json_object_get(o, "refresh"));
  j->exhaustive = json_is_true(json_object_get(o, "exhaustive"));
  j->time_limit_s = (int)json_integer_value(json_object_get(o, "time_limit_s"));
  j->max_dryruns = (int)json_integer_value(json_object_get(o, "max_dryruns"));
  const char *dir = json_string_value(json_object_get(o, "out_dir"));
  snprintf(j->out_dir, sizeof j->out_dir, "%s", dir ? dir : "");
  json_t *owner = json_object_get(o, "owner_uid");
  if (json_is_integer(owner) && json_integer_value(owner) >= 0 && json_integer_value(owner) <= UINT32_MAX) {
    j->has_owner = true;
    j->owner = (uid_t)json_integer_value(owner);
  }
  json_t *ex = json_object_get(o, "exclude");
  const char *names[AA_PROTO_EXCLUDE_MAX];
  size_t n = 0, i;
  json_t *v;
  json_array_foreach(ex, i, v) if (n < AA_PROTO_EXCLUDE_MAX && json_is_string(v)) names[n++] =
      json_string_value(v);
  rc = aa_space_exclude_mask(names, n, &j->exclude);
  json_t *in = json_object_get(o, "include");
  n = 0;
  json_array_foreach(in, i, v) if (n < AA_PROTO_EXCLUDE_MAX && json_is_string(v)) names[n++] =
      json_string_value(v);
  if (!rc) rc = aa_space_include_set(names, n, j->exclude, &j->include);
  json_t *from = json_object_get(o, "from");
  char *from_json = json_is_object(from) ? json_dumps(from, JSON_COMPACT) : NULL;
  if (!rc && from_json) {
    rc = aa_strategy_parse(&j->from, from_json, "the strategy to start from");
    j->has_from = rc == 0;
  } else if (!rc && from && !json_is_null(from)) {
    rc = aa_error(AA_ECORRUPT, "job %lld: its stored strategy to start from is not a JSON object",
                  (long long)j->id);
  }
  free(from_json);
  if (!rc && spec && spec_json) {
    j->spec = *spec;
    j->model_json = spec_json;
    spec_json = NULL;
  } else if (!rc) {
    j->model_json = json_dumps(json_object_get(o, "spec"), JSON_COMPACT);
    if (!j->model_json)
      rc = aa_error(AA_ECORRUPT, "job %lld: no model spec in its stored options", (long long)j->id);
    char origin[64];
    snprintf(origin, sizeof origin, "job %lld model", (long long)j->id);
    if (!rc) rc = aa_spec_parse(&j->spec, j->model_json, NULL, origin);
  }
  if (!rc && j->has_from) rc = aa_strategy_resolve(&j->from, &j->spec, (int)aa_strategy_world(&j->from));
  free(spec);
  free(spec_json);
  json_decref(o);
  return rc;
}

static int cand_of(const aa_search_t *s, const char *key) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->c[i].key, key)) return (int)i;
  return -1;
}

/* What resume() has taken back so far. */
typedef struct {
  aa_planner_job_t *j;
  int seen, kept, again;
} resumed_t;

/* Takes back one dry run recorded before the stop (the walk comes in id
 * order: the order they were measured in). */
static int resume_run(const aa_store_run_t *r, void *data) {
  resumed_t *x = data;
  aa_search_t *s = &x->j->search;
  x->seen++;
  int i = cand_of(s, r->strategy_key);
  if (i < 0) return 0;
  aa_cand_t *c = &s->c[i];
  if (c->state == AA_CAND_DONE) {
    /* A re-measure of a leader (in a fresh process): it adds to the mean. */
    if (c->oks > 0 && r->status == AA_STORE_RUN_OK) {
      c->run_id = r->id;
      aa__search_done(s, i, r->status, r->tokens_per_s,
                      relative_spread(r->step_ms_median, r->step_ms_spread));
      s->dispatched++;
      x->kept++;
    }
    return 0;
  }
  switch (r->status) {
  case AA_STORE_RUN_OK:
  case AA_STORE_RUN_OOM:
  case AA_STORE_RUN_ERROR:
  case AA_STORE_RUN_TIMEOUT:
    c->run_id = r->id;
    aa__search_done(s, i, r->status, r->tokens_per_s, relative_spread(r->step_ms_median, r->step_ms_spread));
    s->dispatched++;
    x->kept++;
    break;
  case AA_STORE_RUN_PRUNED:
    if (c->state == AA_CAND_PENDING) {
      c->state = AA_CAND_PRUNED;
      snprintf(c->reason, sizeof c->reason, "%s", r->error);
      c->skipped = !strncmp(r->error, "skipped:", 8);
    }
    c->recorded = true;
    break;
  case AA_STORE_RUN_CRASHED:
    if (c->retries++ >= 1) {
      c->run_id = r->id;
      aa__search_done(s, i, r->status, 0, 0);
      s->dispatched++;
      x->kept++;
    } else {
      x->again++;
    }
    break;
  default: break; /* cancelled, queued, running: not measured */
  }
  return 0;
}

/* A job a stop interrupted and the store queued again: its search takes
 * back what was measured before, in the order it was measured (so the
 * search's rules decide as they did), and runs the rest. A dry run that
 * crashed or was cancelled then (the stop ended it) runs again, once: a
 * second crash is the strategy's. */
static int resume(aa_planner_t *p, aa_planner_job_t *j) {
  resumed_t x = {.j = j};
  aa_store_run_filter_t f = {.job_id = j->id, .kinds = AA_STORE_BIT(AA_STORE_RUN_DRYRUN)};
  int rc = aa_store_runs_query(p->store, &f, resume_run, &x);
  if (rc < 0) return rc;
  if (x.seen)
    aa__planner_log(
        p, "job %lld resumed: %d dry runs measured before the stop are kept, %d interrupted ones run again",
        (long long)j->id, x.kept, x.again);
  return 0;
}

/* What a stored answer is checked against, and what the walk found. */
typedef struct {
  const aa_planner_job_t *j;
  int64_t run;   /* the best stored run that fits the job, 0 = none */
  int passed;    /* stored runs that did not fit */
  char why[512]; /* why the best of them did not */
} answer_t;

/* Whether a stored run (measured under the options `measured`) answers job
 * j as well as a search of its own would: its strategy uses no method the
 * submit excluded, it was measured at the job's global batch (the batch
 * sets how many micro-batches a step accumulates, so the throughput), and
 * it is valid for the job's spec on its pool. Else why, into why. */
static bool fits(const aa_planner_job_t *j, const aa_store_run_t *r, const char *measured, char *why,
                 size_t n) {
  aa_strategy_t s;
  if (aa_strategy_parse(&s, r->strategy_json, "stored run")) {
    snprintf(why, n, "its strategy cannot be read: %s", aa_last_error());
    return false;
  }
  unsigned excluded = aa_space_methods_of(&s) & j->exclude;
  if (excluded) {
    char names[160];
    snprintf(why, n, "it uses a method the submit excludes (%s)",
             aa_space_method_names(names, sizeof names, excluded));
    return false;
  }
  unsigned unmet = aa_space_include_unmet(aa_space_methods_of(&s), j->include);
  if (unmet) {
    char names[160];
    snprintf(why, n, "it does not use the included method(s) %s",
             aa_space_include_names(names, sizeof names, unmet));
    return false;
  }
  if (j->has_from && aa_space_distance(&s, &j->from) > AA_SEARCH_FROM_RADIUS) {
    snprintf(why, n, "it differs in %d knobs from the strategy to start from (at most %d)",
             aa_space_distance(&s, &j->from), AA_SEARCH_FROM_RADIUS);
    return false;
  }
  json_t *o = json_loads(measured, 0, NULL);
  json_t *gb = json_object_get(json_object_get(json_object_get(o, "spec"), "train"), "global_batch");
  long long batch = json_is_integer(gb) ? json_integer_value(gb) : 0;
  json_decref(o);
  if (batch != j->spec.train.global_batch) {
    snprintf(why, n, "it was measured at global batch %lld, and the job's is %d", batch,
             j->spec.train.global_batch);
    return false;
  }
  int world = (int)aa_strategy_world(&s);
  if (world > aa__planner_hw_world(j->hardware) || aa_strategy_resolve(&s, &j->spec, world)) {
    snprintf(why, n, "it does not fit the job: %s",
             world > aa__planner_hw_world(j->hardware) ? "too many ranks" : aa_last_error());
    return false;
  }
  return true;
}

static int take_fitting(const aa_store_run_t *r, const char *measured, void *data) {
  answer_t *a = data;
  char why[400];
  if (fits(a->j, r, measured, why, sizeof why)) {
    a->run = r->id;
    return 1;
  }
  if (!a->passed++) snprintf(a->why, sizeof a->why, "%s: %s", r->strategy_key, why);
  return 0;
}

/* The best stored run that answers job j (0 = none, then it searches). A
 * store that only has runs which do not fit says so in the log. */
static int stored_answer(aa_planner_t *p, const aa_planner_job_t *j, int64_t *run) {
  answer_t a = {.j = j};
  int rc = aa_store_answers(p->store, j->hash, j->hardware, take_fitting, &a);
  if (rc < 0) return rc;
  *run = a.run;
  if (a.passed)
    aa__planner_log(p, "job %lld: %d stored run%s do%s not fit it (the best: %s)%s", (long long)j->id,
                    a.passed, a.passed == 1 ? "" : "s", a.passed == 1 ? "es" : "", a.why,
                    a.run ? "; a later one does" : "; it searches");
  return 0;
}

void aa__job_begin(aa_planner_t *p, const aa_store_job_t *row, aa_conn_t *e, aa_model_spec_t *spec,
                   char *spec_json) {
  aa_planner_job_t *j = calloc(1, sizeof *j);
  char why[512];
  if (!j) {
    free(spec);
    free(spec_json);
    aa__planner_log(p, "job %lld: no memory to start it", (long long)row->id);
    return;
  }
  j->id = row->id;
  snprintf(j->hash, sizeof j->hash, "%s", row->model_hash);
  snprintf(j->hardware, sizeof j->hardware, "%s", row->hardware);
  j->dev_kind = e->dev.kind;
  p->cur = j;
  int rc = load_options(j, row->options_json, spec, spec_json);
  if (rc) {
    snprintf(why, sizeof why, "%s", aa_last_error());
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
    return;
  }
  int64_t stored = 0;
  if (!j->refresh && (rc = stored_answer(p, j, &stored))) {
    snprintf(why, sizeof why, "%s", aa_last_error());
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
    return;
  }
  if (stored && !j->train) {
    j->from_store = true;
    if (take_best(p, j, stored, 0))
      aa__planner_log(p, "job %lld: cannot write the strategy file: %s", (long long)j->id, aa_last_error());
    j->best_run = stored;
    aa__jobs_end(p, j, AA_STORE_JOB_DONE, NULL, false);
    return;
  }
  if ((rc = aa_store_job_start(p->store, j->id))) {
    snprintf(why, sizeof why, "%s", aa_last_error());
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
    return;
  }
  aa__planner_log(p, "job %lld started: %s (%s) on %s%s", (long long)j->id, j->spec.name, j->hash,
                  j->hardware, row->resumes ? " (resumed after a stop)" : "");
  if (stored) { /* train: the stored best is trained without a search */
    j->from_store = true;
    if (take_best(p, j, stored, 0)) {
      snprintf(why, sizeof why, "cannot write the strategy file: %s", aa_last_error());
      aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
      return;
    }
    j->phase = AA_PHASE_TRAIN;
    aa__job_advance(p);
    return;
  }
  if ((rc = aa__search_enumerate(&j->search, &j->spec, aa__planner_hw_world(j->hardware), e->dev.kind,
                                 e->dev.memory, j->exclude, j->include, j->has_from ? &j->from : NULL)) ||
      (row->resumes && (rc = resume(p, j)))) {
    snprintf(why, sizeof why, "%s", aa_last_error());
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
    return;
  }
  j->search.exhaustive = j->exhaustive;
  j->search.peak_flops = e->dev.peak_bf16_flops;
  j->search.max_dryruns = j->max_dryruns;
  j->search.time_limit_s = j->time_limit_s;
  if (j->time_limit_s > 0) j->search.deadline = aa_now() + j->time_limit_s;
  aa__planner_log(p, "job %lld: %zu strategies, %d valid, %d of them predicted out of memory",
                  (long long)j->id, j->search.n, j->search.valid, j->search.predicted_oom);
  prune_unplaceable(p, j);
  moe_seed(p, j);
  calib_lookup(p, j);
  aa__job_advance(p);
}

/* --- frames from executors ---------------------------------------------------------------------- */

/* A run whose executor vanished says nothing of its strategy: its
 * candidate (or the training) gets one more run, on executors still
 * connected. Returns whether it will. */
static bool retry_lost(aa_planner_t *p, aa_planner_job_t *j) {
  if (!j->lost_executor) return false;
  if (j->phase == AA_PHASE_SEARCH) {
    aa_cand_t *c = &j->search.c[j->cand];
    if (c->retries >= 1 || c->measures > 0) return false; /* a lost re-measure is just one fewer */
    c->retries++;
    c->state = AA_CAND_PENDING;
    j->search.dispatched--;
    aa__planner_log(p, "job %lld: run %lld lost its executor; %s runs again on another one", (long long)j->id,
                    (long long)j->run_id, c->key);
    return true;
  }
  if (j->train_retried) return false;
  j->train_retried = true;
  aa__planner_log(p, "job %lld: training run %lld lost its executor; it runs again on another one",
                  (long long)j->id, (long long)j->run_id);
  return true;
}

/* Records the outcome of the current job's running run and moves on. A
 * store that cannot take the outcome (a full disk) ends the job with that
 * cause: the search would otherwise decide from a record that is wrong. */
static void run_finished(aa_planner_t *p, const aa_msg_result_t *r, const aa_store_run_rank_t *ranks,
                         int n_ranks) {
  aa_planner_job_t *j = p->cur;
  aa_store_run_result_t res = {.status = store_status(r->status),
                               .tokens_per_s = r->tokens_per_s,
                               .step_ms_median = r->step_ms_median,
                               .step_ms_spread = r->step_ms_spread,
                               .peak_bytes = (int64_t)r->peak.total,
                               .error = r->error,
                               .final_loss = r->has_final_loss ? r->final_loss : 0,
                               .ranks = ranks,
                               .n_ranks = n_ranks};
  if (res.status == AA_STORE_RUN_OK && !(res.tokens_per_s > 0)) {
    res.status = AA_STORE_RUN_ERROR;
    res.error = "the executor reported ok without a throughput";
  }
  if (res.status == AA_STORE_RUN_OK && j->phase == AA_PHASE_SEARCH && r->has_moe_max_tokens)
    res.moe_imbalance = moe_observed(p, j, &j->search.c[j->cand], r->moe_max_tokens);
  bool again = res.status == AA_STORE_RUN_CRASHED && retry_lost(p, j);
  char note[AA_PROTO_TEXT_MAX + 64];
  if (again) {
    snprintf(note, sizeof note, "%.4000s; run again on another executor",
             res.error ? res.error : "its executor vanished");
    res.error = note;
  }
  char *peak = peak_text(&r->peak);
  res.peak_json = peak;
  char stored[AA_PROTO_TEXT_MAX + 128] = "";
  if (aa_store_run_finish(p->store, j->run_id, &res)) {
    snprintf(stored, sizeof stored, "cannot record run %lld in the store: %s", (long long)j->run_id,
             aa_last_error());
    aa__planner_log(p, "job %lld: %s", (long long)j->id, stored);
  }
  free(peak);
  res.peak_json = NULL;
  aa__planner_log(p, "job %lld: run %lld %s %s%s%s", (long long)j->id, (long long)j->run_id, j->run_key,
                  aa_store_run_status_name(res.status), res.error && *res.error ? ": " : "",
                  res.error ? res.error : "");
  aa_msg_t m = {.type = AA_MSG_RESULT, .result = *r};
  m.result.status = proto_status(res.status);
  m.result.error = (char *)res.error;
  m.result.key = j->run_key;
  aa__jobs_relay(p, j->id, &m);
  int64_t run = j->run_id;
  j->run_id = 0;
  if (stored[0]) {
    aa__jobs_unrecorded(p, j->id, AA_STORE_JOB_FAILED, 0, false, stored, run, &res);
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, stored, false);
    return;
  }
  if (again) {
    aa__planner_kick(p);
    return;
  }
  if (j->phase == AA_PHASE_SEARCH) {
    aa__search_done(&j->search, j->cand, res.status, res.tokens_per_s,
                    relative_spread(res.step_ms_median, res.step_ms_spread));
    if (res.status == AA_STORE_RUN_ERROR && r->inputs) {
      /* The data or the initial weights: every other strategy would fail the same way. */
      char why[AA_PROTO_TEXT_MAX + 64];
      snprintf(why, sizeof why, "the model's data or initial weights cannot be used: %s",
               res.error ? res.error : "");
      aa__search_stop(&j->search,
                      "not measured: a dry run could not use the job's inputs, which no strategy changes");
      if (record_pruned(p, j))
        aa__planner_log(p, "job %lld: cannot record a pruned run: %s", (long long)j->id, aa_last_error());
      aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
      return;
    }
  } else if (res.status == AA_STORE_RUN_OK) {
    aa__jobs_end(p, j, AA_STORE_JOB_DONE, NULL, false);
    return;
  } else {
    char why[AA_PROTO_TEXT_MAX + 64];
    snprintf(why, sizeof why, "training %s%s%s", aa_store_run_status_name(res.status), res.error ? ": " : "",
             res.error ? res.error : "");
    aa__jobs_end(p, j, AA_STORE_JOB_FAILED, why, false);
    return;
  }
  aa__planner_kick(p);
}

/* A result from executor c: it is idle again; the current job takes it as
 * its rank's if it is the run it waits for (a cancelled run's late result
 * is dropped). */
static void executor_result(aa_conn_t *c, const aa_msg_result_t *r) {
  aa_planner_t *p = c->p;
  if (!c->busy_run || (int64_t)r->run != c->busy_run) {
    aa__planner_log(p, "executor %llu: result for run %llu, which it was not running: ignored",
                    (unsigned long long)c->id, (unsigned long long)r->run);
    return;
  }
  int rank = c->busy_rank;
  c->busy_run = c->busy_job = 0;
  c->busy_rank = 0;
  aa__planner_kick(p);
  if (p->cur && p->cur->run_id == (int64_t)r->run) rank_report(p, rank, r);
}

void aa__jobs_on_result(aa_conn_t *c, const aa_msg_t *m) { executor_result(c, &m->result); }

void aa__jobs_on_executor_error(aa_conn_t *c, const aa_msg_t *m) {
  aa__planner_log(c->p, "executor %llu: error %d: %s", (unsigned long long)c->id, m->error.code,
                  m->error.message);
  if (!m->id || (int64_t)m->id != c->busy_run) return;
  /* It refused the job frame (id = run id): the run ends as an error. */
  aa_msg_result_t r = {.job = (uint64_t)c->busy_job,
                       .run = (uint64_t)c->busy_run,
                       .status = AA_PROTO_RUN_ERROR,
                       .error = m->error.message};
  executor_result(c, &r);
}

void aa__jobs_on_progress(aa_conn_t *c, const aa_msg_t *m) {
  aa_planner_t *p = c->p;
  aa_planner_job_t *j = p->cur;
  /* Rank 0 speaks for a gang: its ranks step together. */
  if (!j || !j->run_id || (int64_t)m->progress.run != j->run_id || c->busy_run != j->run_id ||
      c->busy_rank != 0)
    return;
  aa_msg_t r = *m;
  r.id = 0;
  r.progress.key = j->run_key;
  if (j->phase == AA_PHASE_SEARCH) {
    r.progress.index = (uint64_t)j->run_index;
    r.progress.count = (uint64_t)(j->search.valid > j->run_index ? j->search.valid : j->run_index);
  }
  aa__jobs_relay(p, j->id, &r);
}

void aa__jobs_rank_lost(aa_planner_t *p, int64_t run, int rank, const char *why) {
  aa_planner_job_t *j = p->cur;
  if (!j || j->run_id != run) return;
  j->lost_executor = true;
  aa_msg_result_t r = {
      .job = (uint64_t)j->id, .run = (uint64_t)run, .status = AA_PROTO_RUN_CRASHED, .error = (char *)why};
  rank_report(p, rank, &r);
}

/* --- stopping a run ------------------------------------------------------------------------------------ */

void aa__job_stop_run(aa_planner_t *p, aa_store_run_status_t status, const char *why) {
  aa_planner_job_t *j = p->cur;
  int64_t run = j->run_id;
  if (!run) return;
  aa_store_run_result_t res = {.status = status, .error = why};
  if (j->calibrating)
    aa__planner_log(p, "job %lld: calibration %s: %s", (long long)j->id, aa_store_run_status_name(status),
                    why);
  else if (aa_store_run_finish(p->store, run, &res))
    aa__planner_log(p, "job %lld: cannot record run %lld: %s", (long long)j->id, (long long)run,
                    aa_last_error());
  /* The run is over for the job before any frame goes out: an executor
   * lost while we write to it no longer counts for it. */
  j->run_id = 0;
  j->calibrating = j->calibrating_inter = false;
  gang_free(j);
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (c->role != AA_CONN_EXECUTOR || c->dropped || c->busy_run != run) continue;
    aa_msg_t m = {.type = AA_MSG_CANCEL, .cancel.job = (uint64_t)j->id};
    aa__conn_send(c, &m);
  }
}
