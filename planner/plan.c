/* `query plan` (`autoaccel plan MODEL --pool cpu:8`): the best strategies
 * of a pool that need not be connected, predicted from the stored
 * calibration of its kind of device with the step-time model
 * (strategies/predict.h). Nothing is dry-run: the answer says so, and
 * lists every assumption the prediction leaned on. The store is read on
 * the loop (plan_prepare); the enumeration and predictions (plan_compute)
 * run on libuv's thread pool for the planner's clients (aa__plan_start).
 * Rules: docs/service.md "Plan". */
#include "planner_internal.h"

#include "../common/json.h"
#include "../common/mem.h"
#include "../strategies/calib.h"
#include "../strategies/cost.h"
#include "../strategies/plan_rank.h"
#include "../strategies/predict.h"
#include "../strategies/space.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AA__PLAN_TOP_DEFAULT 5
#define AA__PLAN_TOP_MAX AA_PLAN_TOP_MAX
#define AA__PLAN_CANDIDATES_MAX 20000 /* enumerated strategies one plan predicts at most */

json_t *aa__plan_breakdown(const aa_predict_t *p) {
  json_t *o =
      json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i}", "forward_ms", p->forward_s * 1e3,
                "backward_ms", p->backward_s * 1e3, "tensor_comm_ms", p->tensor_comm_s * 1e3,
                "pipeline_comm_ms", p->pipeline_comm_s * 1e3, "context_comm_ms", p->context_comm_s * 1e3,
                "expert_comm_ms", p->expert_comm_s * 1e3, "bubble_ms", p->bubble_s * 1e3, "optimizer_ms",
                p->optimizer_s * 1e3, "data_comm_ms", p->data_comm_s * 1e3, "ops_estimated", p->ops_estimated,
                "links_estimated", p->links_estimated);
  /* Expert parallelism timed past even routing: the factor it took. */
  if (o && p->moe_imbalance > 1) json_object_set_new(o, "moe_imbalance", json_real(p->moe_imbalance));
  return o;
}

/* The request, checked. */
typedef struct {
  aa_model_spec_t spec;
  int cuda;
  int devices;
  const char *device; /* NULL = the newest calibration of the kind */
  int top;
  int hosts; /* the pool's devices spread evenly over this many hosts */
  int moe_runs; /* the stored runs of the model whose load imbalance the pool's moe_imbalance averages */
  bool separate_hosts;
} plan_args_t;

static int parse_args(const json_t *args, plan_args_t *a) {
  static const char *const allowed[] = {"model", "pool", "device", "top", "separate_hosts", NULL};
  static const char *const pool_allowed[] = {"kind", "devices", "hosts", NULL};
  long long top = 0, devices = 0, hosts = 0;
  const char *kind = NULL;
  int rc = aa__query_check_keys("plan", args, allowed);
  if (!rc) rc = aa__query_get_str("plan", args, "device", &a->device);
  if (!rc) rc = aa__query_get_int("plan", args, "top", 1, AA__PLAN_TOP_MAX, &top);
  if (rc) return rc;
  a->top = top ? (int)top : AA__PLAN_TOP_DEFAULT;
  json_t *sep = json_object_get(args, "separate_hosts");
  if (sep && !json_is_boolean(sep))
    return aa_error(AA_EINVAL, "query plan: \"separate_hosts\" must be a boolean (got %s)",
                    aa_json_type_name(sep));
  a->separate_hosts = json_is_true(sep);
  json_t *pool = json_object_get(args, "pool");
  if (!json_is_object(pool))
    return aa_error(AA_EINVAL,
                    "query plan: \"pool\" ({\"kind\": \"cpu\" or \"cuda\", \"devices\": N}) is required");
  rc = aa__query_check_keys("plan", pool, pool_allowed);
  if (!rc) rc = aa__query_get_str("plan", pool, "kind", &kind);
  if (!rc) rc = aa__query_get_int("plan", pool, "devices", 1, AA_PROTO_WORLD_MAX, &devices);
  if (!rc) rc = aa__query_get_int("plan", pool, "hosts", 1, AA_PROTO_WORLD_MAX, &hosts);
  if (rc) return aa_error_wrap(rc, "\"pool\"");
  if (!kind || (strcmp(kind, "cpu") && strcmp(kind, "cuda")))
    return aa_error(AA_EINVAL, "query plan: \"pool\".\"kind\" must be \"cpu\" or \"cuda\"");
  if (!devices)
    return aa_error(AA_EINVAL, "query plan: \"pool\".\"devices\" (1..%d) is required", AA_PROTO_WORLD_MAX);
  a->cuda = !strcmp(kind, "cuda");
  a->devices = (int)devices;
  a->hosts = hosts ? (int)hosts : 1;
  if (devices % a->hosts)
    return aa_error(AA_EINVAL,
                    "query plan: \"pool\": %lld devices do not spread evenly over %d hosts (give a "
                    "multiple of the hosts)",
                    devices, a->hosts);
  if (a->device && strncmp(a->device, kind, strlen(kind)) != 0)
    return aa_error(AA_EINVAL, "query plan: device \"%.127s\" is not a %s device", a->device, kind);
  /* The model: the spec as an object (what `autoaccel plan` sends) or as text. */
  json_t *model = json_object_get(args, "model");
  char *text = json_is_object(model) ? json_dumps(model, JSON_COMPACT) : NULL;
  if (!model) return aa_error(AA_EINVAL, "query plan: \"model\" (a model spec) is required");
  if (!json_is_object(model) && !json_is_string(model))
    return aa_error(AA_EINVAL, "query plan: \"model\" must be a model spec object or its text (got %s)",
                    aa_json_type_name(model));
  if (json_is_object(model) && !text) return aa_error(AA_ENOMEM, "query plan: no memory");
  rc = aa_spec_parse(&a->spec, text ? text : json_string_value(model), NULL, "query plan: model");
  free(text);
  return rc ? rc : aa_spec_require_planned(&a->spec, a->cuda, "query plan");
}

/* The chosen calibration: the one of `want` when given, else the newest
 * of the kind; and the others of the kind, named when `want` is none. */
typedef struct {
  const char *prefix, *want;
  bool cuda, found, take_gloo;
  aa_store_calib_t row;
  char *json;
  char others[512];
} pick_t;

static int pick_calib(const aa_store_calib_t *c, void *data) {
  pick_t *p = data;
  /* The links between hosts are read beside the pick; a device calibrated
   * on one host under --cpu-backend gloo has only that row, taken when
   * nothing else is (the second walk). */
  if (!strcmp(c->backend, aa_calib_across_hosts(p->cuda)) && !p->take_gloo) return 0;
  if (p->found || (p->want && strcmp(c->device, p->want))) {
    size_t n = strlen(p->others);
    snprintf(p->others + n, sizeof p->others - n, "%s%s (%s)", n ? ", " : "", c->device, c->backend);
    return 0;
  }
  if (!(p->json = strdup(c->json))) return AA_ENOMEM;
  p->row = *c;
  p->row.json = NULL;
  p->found = true;
  return 0;
}

static int no_calibration(const plan_args_t *a, const pick_t *p) {
  const char *kind = a->cuda ? "cuda" : "cpu";
  if (a->device)
    return aa_error(
        AA_ENOENT,
        "no calibration of device \"%.127s\" is stored (of %s devices: %s); leave out --device, or run "
        "a job on that device first",
        a->device, kind, p->others[0] ? p->others : "none");
  return aa_error(
      AA_ENOENT,
      "no calibration of a %s device is stored: run a job on %s devices first (e.g. `autoaccel auto "
      "--devices %s MODEL`), which measures one, then plan again%s",
      kind, kind, a->cuda ? "cuda" : "cpu:2",
      a->cuda
          ? "; or plan from a GPU's datasheet figures, with no planner: --pool h100-80gb:N (autoaccel plan "
            "--list-devices)"
          : "");
}

/* The device memory in a device fingerprint KIND:NAME:MEMORY_MiB; 0 when it
 * names none. */
static uint64_t device_memory(const char *device) {
  const char *colon = strrchr(device, ':');
  char *end;
  if (!colon) return 0;
  unsigned long long mib = strtoull(colon + 1, &end, 10);
  if (end == colon + 1 || strcmp(end, "MiB") != 0) return 0;
  return (uint64_t)mib << 20;
}

typedef aa_plan_entry_t planned_t;
typedef aa_plan_rank_t plan_t;

/* The pool's candidates ranked (strategies/plan_rank.h): every gang size
 * up to the pool's, so their count is bounded here. */
static int plan_pool(const plan_args_t *a, const aa_calib_t *c, uint64_t memory,
                     const aa_predict_pool_t *pool, plan_t *out) {
  /* A pool of GPUs plans MoE layers without expert or context
   * parallelism, as the planner's search measures them (search.c: not yet
   * run on GPUs). */
  const aa_space_pool_t sp = {.devices = a->devices,
                              .global_batch = a->spec.train.global_batch,
                              .cuda = a->cuda,
                              .exclude =
                                  a->cuda && a->spec.arch.moe.experts ? AA_SPACE_EX_EP | AA_SPACE_EX_CP : 0u,
                              .arch = &a->spec.arch};
  size_t n = aa_space_each(&sp, NULL, NULL);
  if (n == 0) return aa_error(AA_EINVAL, "query plan: the pool of %d devices has no strategy", a->devices);
  /* About 50 us a candidate: at most a second or so on one core. */
  if (n > AA__PLAN_CANDIDATES_MAX)
    return aa_error(
        AA_EINVAL,
        "query plan: a pool of %d devices has %zu candidate strategies for this model, more than one "
        "plan predicts (%d); plan for fewer devices",
        a->devices, n, AA__PLAN_CANDIDATES_MAX);
  *out = (plan_t){.spec = &a->spec, .calib = c, .pool = *pool, .space = sp, .memory = memory,
                  .top = (size_t)a->top};
  return aa_plan_rank(out);
}

/* "2, 4" of the distinct group sizes the calibration measured, ascending. */
static json_t *measured_sizes(const aa_calib_t *c) {
  json_t *a = json_array();
  for (int size = 2; size <= AA_PROTO_WORLD_MAX; size++)
    for (int i = 0; i < c->n_link; i++)
      if (c->link[i].ranks == size) {
        json_array_append_new(a, json_integer(size));
        break;
      }
  return a;
}

static bool size_measured(const aa_calib_t *c, int ranks) {
  for (int i = 0; i < c->n_link; i++)
    if (c->link[i].ranks == ranks) return true;
  return false;
}

static void add(json_t *list, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(json_t *list, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  json_array_append_new(list, json_string(text));
}

/* "2, 4 and 8" of the n sizes in v. */
static const char *sizes_text(const int *v, int n, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%d", i == 0 ? "" : i == n - 1 ? " and " : ", ", v[i]);
  return buf;
}

/* What the predictions of the shown strategies leaned on, in words. */
static json_t *assumptions(const plan_args_t *a, const aa_calib_t *c, uint64_t memory,
                           const aa_predict_pool_t *pool, const plan_t *plan, size_t shown) {
  json_t *out = json_array();
  char mem[32];
  add(out, "no dry run: predictions only, from the calibration's op times and collective lines");
  /* Group sizes the shown strategies use that the calibration did not
   * measure: the model extrapolates them (strategies/predict.h). */
  int missing[32], nmissing = 0, ops = 0, links = 0, modelled = 0;
  for (size_t i = 0; i < shown; i++) {
    const aa_strategy_t *s = &plan->list[i].s;
    /* Each axis's collectives span its group; a pipeline's are sends
     * between two neighbouring stages. */
    int sizes[AA_AXES];
    for (int k = 0; k < AA_AXES; k++)
      sizes[k] = k == AA_AXIS_PIPELINE && s->degree[k] > 1 ? 2 : s->degree[k];
    for (int k = 0; k < AA_AXES; k++) {
      bool seen = sizes[k] < 2 || size_measured(c, sizes[k]);
      for (int j = 0; j < nmissing && !seen; j++)
        seen = missing[j] == sizes[k];
      if (!seen && nmissing < 32) missing[nmissing++] = sizes[k];
    }
    if (plan->list[i].p.ops_estimated > ops) ops = plan->list[i].p.ops_estimated;
    if (plan->list[i].p.ops_modelled > modelled) modelled = plan->list[i].p.ops_modelled;
    links += plan->list[i].p.links_estimated;
  }
  for (int i = 1; i < nmissing; i++) /* ascending, for the sentence */
    for (int j = i; j > 0 && missing[j - 1] > missing[j]; j--) {
      int t = missing[j];
      missing[j] = missing[j - 1];
      missing[j - 1] = t;
    }
  int measured[32], nmeasured = 0;
  for (int size = 2; size <= AA_PROTO_WORLD_MAX && nmeasured < 32; size++)
    if (size_measured(c, size)) measured[nmeasured++] = size;
  char m1[160], m2[160];
  if (nmissing && nmeasured)
    add(out,
        "collectives of %s ranks extrapolated from measured groups of %s (latency x (t-1)/(t0-1), bandwidth "
        "kept)",
        sizes_text(missing, nmissing, m1, sizeof m1), sizes_text(measured, nmeasured, m2, sizeof m2));
  else if (links)
    add(out,
        "collective kinds the calibration did not measure take the all-reduce's line of the same group size");
  if (ops)
    add(out,
        "up to %d op shape%s of a strategy taken from neighbours (the nearest measured shape of the kind, "
        "scaled by its work)",
        ops, ops == 1 ? "" : "s");
  if (modelled)
    add(out,
        "up to %d op shape%s of a strategy of a kind the calibration did not measure, timed at the rate it "
        "measured for the kind's class (GEMM FLOP/s, attention FLOP/s or memory-bound bytes/s: "
        "strategies/roofline.h)",
        modelled, modelled == 1 ? "" : "s");
  if (a->cuda)
    add(out, "each GPU computes at the rate measured with %d computing at once", c->ranks);
  else if (pool->host_cores)
    add(out,
        "the %d CPU executors share the host the calibration ran on (%d cores, %d threads each): compute "
        "runs "
        "at the measured rate times min(1, cores / (executors x threads)) relative to the measuring gang of "
        "%d",
        a->devices, c->host_cores, c->threads, c->ranks);
  else
    add(out,
        "each CPU executor has cores of its own (%s): compute runs at the rate measured with %d executors at "
        "once",
        a->separate_hosts ? "separate hosts" : "the calibration names no host cores", c->ranks);
  if (!a->cuda && pool->host_cores && a->devices * (c->threads > 0 ? c->threads : 1) > pool->host_cores)
    add(out,
        "collectives are timed on cores of their own: where the %d executors outnumber the %d cores, a "
        "collective also waits for its peers to be scheduled, which this prediction leaves out (tensor "
        "parallelism, which meets its group several times a block, suffers most: its strategies measured "
        "at 55-60 %% of their prediction at cpu:4 on 2 cores, tests/cli/test_predict_pool.sh)",
        a->devices, pool->host_cores);
  add(out, "collectives on the %s backend, as calibrated", c->backend);
  bool ep = false;
  for (size_t i = 0; i < shown && !ep; i++)
    ep = plan->list[i].s.ep > 1;
  if (ep && a->moe_runs)
    add(out,
        "expert parallelism: the busiest expert rank timed at a router load imbalance of %.2f (its rows "
        "over the mean), the mean that %d run%s of the model measured",
        pool->moe_imbalance, a->moe_runs, a->moe_runs == 1 ? "" : "s");
  else if (ep)
    add(out,
        "expert parallelism: the busiest expert rank timed at a router load imbalance of %.2f (its rows "
        "over the mean), Switch Transformer's training capacity factor: no run of the model measured one",
        AA_PREDICT_MOE_IMBALANCE);
  if (pool->host_devices) {
    add(out,
        "%d hosts of %d devices: each tensor group inside one host (%zu strategies with a wider one left "
        "out); a gang larger than a host runs its data and pipeline groups across hosts",
        a->hosts, pool->host_devices, plan->tensor_too_wide);
    if (pool->inter)
      add(out, "collectives across hosts on the lines a gang spanning hosts measured over %s",
          pool->inter->backend);
    else
      add(out,
          "no gang spanning hosts has been calibrated for this device: collectives across hosts take the "
          "lines within a host, which is likely optimistic (run a job on executors of two hosts to "
          "measure them)");
  }
  if (memory)
    add(out,
        "memory: a rank's predicted bytes (strategies/cost.h) against the device's %s; %zu strategies "
        "predicted out of memory are left out",
        aa_mem_fmt(mem, memory), plan->predicted_oom);
  else
    add(out, "memory: the device fingerprint names no memory, so no strategy was left out for it");
  if (plan->unpredicted)
    add(out, "%zu strategies could not be predicted: %s", plan->unpredicted, plan->unpredicted_why);
  return out;
}

static json_t *calibration_json(const aa_store_calib_t *row, const aa_calib_t *c) {
  return json_pack("{s:s, s:s, s:I, s:I, s:b, s:i, s:i, s:i, s:o}", "device", row->device, "backend",
                   row->backend, "measured_at", (json_int_t)row->measured_at, "updated_at",
                   (json_int_t)row->updated_at, "cuda", c->cuda, "ranks", c->ranks, "threads", c->threads,
                   "host_cores", c->host_cores, "links_measured", measured_sizes(c));
}

static json_t *strategy_json(const planned_t *t) {
  char *text = NULL, key[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(&t->s, key);
  json_t *strategy = aa_strategy_to_json(&t->s, &text) ? NULL : json_loads(text, 0, NULL);
  free(text);
  if (!strategy) return NULL;
  return json_pack("{s:s, s:o, s:f, s:f, s:o, s:I, s:f, s:i, s:i}", "key", key, "strategy", strategy,
                   "tokens_per_s", t->p.tokens_per_s, "step_ms", t->p.step_s * 1e3, "breakdown",
                   aa__plan_breakdown(&t->p), "peak_bytes", (json_int_t)t->p.mem.total, "bubble", t->p.bubble,
                   "ops_estimated", t->p.ops_estimated, "links_estimated", t->p.links_estimated);
}

/* What a plan needs once the store has been read: the request and the
 * calibration, so the rest (plan_compute) touches neither the store nor
 * the planner and may run on another thread. */
typedef struct {
  plan_args_t a;
  aa_store_calib_t row; /* json NULL: parsed into c */
  aa_calib_t *c;        /* owned (large: on the heap) */
  aa_calib_t *inter;    /* owned: the device's links between hosts (gloo, nccl-hosts); NULL = none stored */
  uint64_t memory;      /* of the device, from its fingerprint; 0 = unknown */
  aa_predict_pool_t pool;
  char origin[AA_STORE_HW_MAX + 64]; /* names the calibration in messages */
} plan_prep_t;

static void plan_prep_free(plan_prep_t *pp);

/* Checks args and reads the calibration they pick (the store's thread).
 * On success *pp holds it (plan_prep_free). */
static int plan_prepare(aa_store_t *st, const json_t *args, plan_prep_t *pp) {
  memset(pp, 0, sizeof *pp);
  int rc = parse_args(args, &pp->a);
  if (rc) return rc;
  pick_t pick = {.prefix = pp->a.cuda ? "cuda:" : "cpu:", .want = pp->a.device, .cuda = pp->a.cuda};
  rc = aa_store_calib_list(st, pick.prefix, pick_calib, &pick);
  if (!rc && !pick.found) {
    pick.take_gloo = true;
    pick.others[0] = '\0';
    rc = aa_store_calib_list(st, pick.prefix, pick_calib, &pick);
  }
  if (rc) {
    free(pick.json);
    return rc == AA_ENOMEM ? aa_error(rc, "query plan: no memory") : rc;
  }
  if (!pick.found) return no_calibration(&pp->a, &pick);
  pp->a.device = NULL; /* borrowed from args: not needed past the pick */
  pp->row = pick.row;
  snprintf(pp->origin, sizeof pp->origin, "the stored calibration of %s (%s)", pick.row.device,
           pick.row.backend);
  pp->c = malloc(sizeof *pp->c);
  rc = pp->c ? aa_calib_parse(pp->c, pick.json, pp->origin) : aa_error(AA_ENOMEM, "query plan: no memory");
  free(pick.json);
  if (rc) {
    free(pp->c);
    pp->c = NULL;
    return rc;
  }
  pp->memory = device_memory(pick.row.device);
  pp->pool = (aa_predict_pool_t){.devices = pp->a.devices,
                                 .host_cores = pp->a.cuda || pp->a.separate_hosts ? 0 : pp->c->host_cores,
                                 .host_devices = pp->a.hosts > 1 ? pp->a.devices / pp->a.hosts : 0};
  if (pp->a.spec.arch.moe.experts) { /* what the model's runs measured (docs/training-knobs.md) */
    char hash[17];
    double mean = 0;
    int n = 0;
    aa_arch_hash(&pp->a.spec.arch, hash);
    if (aa_store_moe_imbalance(st, hash, &mean, &n) == 0 && n > 0 && mean >= 1) {
      pp->pool.moe_imbalance = mean;
      pp->a.moe_runs = n;
    }
  }
  if (pp->a.hosts > 1) { /* the links a gang spanning hosts measured, if any */
    char *json = NULL, origin[AA_STORE_HW_MAX + 64];
    const char *across = aa_calib_across_hosts(pp->a.cuda);
    rc = aa_store_calib_get(st, pick.row.device, across, &json);
    if (rc == 0 && json) {
      snprintf(origin, sizeof origin, "the stored calibration of %s (%s)", pick.row.device, across);
      pp->inter = malloc(sizeof *pp->inter);
      rc = pp->inter ? aa_calib_parse(pp->inter, json, origin) : aa_error(AA_ENOMEM, "query plan: no memory");
      if (rc || !pp->inter->n_link) {
        free(pp->inter);
        pp->inter = NULL;
      }
    }
    free(json);
    pp->pool.inter = pp->inter;
    if (rc < 0) {
      plan_prep_free(pp);
      return rc;
    }
  }
  return 0;
}

static void plan_prep_free(plan_prep_t *pp) {
  free(pp->c);
  free(pp->inter);
  pp->c = NULL;
  pp->inter = NULL;
}

/* Enumerates, predicts and fills out (borrowed) from a prepared plan:
 * pure, any thread. */
static int plan_compute(const plan_prep_t *pp, json_t *out) {
  const plan_args_t *a = &pp->a;
  plan_t plan = {0};
  /* A kind of op the calibration lacks (a llama planned from a gpt2's
   * calibration) is timed at the rate it measured for the kind's class. */
  aa_roofline_t roof;
  aa_roofline_init(&roof, NULL);
  aa_roofline_fit(&roof, pp->c);
  aa_predict_pool_t pool = pp->pool;
  pool.roofline = &roof;
  int rc = plan_pool(a, pp->c, pp->memory, &pool, &plan);
  if (!rc && plan.predicted == 0 && plan.unpredicted)
    rc = aa_error(AA_EINVAL, "query plan: no strategy could be predicted from %s: %s", pp->origin,
                  plan.unpredicted_why);
  if (!rc) {
    json_t *list = json_array();
    for (size_t i = 0; i < plan.n && list; i++) {
      json_t *o = strategy_json(&plan.list[i]);
      if (!o || json_array_append_new(list, o)) {
        json_decref(list);
        list = NULL;
      }
    }
    json_t *calib = calibration_json(&pp->row, pp->c);
    json_t *as = assumptions(a, pp->c, pp->memory, &pool, &plan, plan.n);
    json_t *pool_json = json_pack("{s:s, s:i, s:i, s:I, s:i, s:b, s:b}", "kind", a->cuda ? "cuda" : "cpu",
                                  "devices", a->devices, "hosts", a->hosts, "memory_bytes",
                                  (json_int_t)pp->memory, "host_cores", pp->pool.host_cores, "separate_hosts",
                                  a->separate_hosts, "inter_host_calibrated", pp->inter != NULL);
    if (!list || !calib || !as || !pool_json) {
      json_decref(list);
      json_decref(calib);
      json_decref(as);
      json_decref(pool_json);
      rc = aa_error(AA_ENOMEM, "query plan: no memory");
    } else {
      json_object_set_new(out, "calibration", calib);
      json_object_set_new(out, "pool", pool_json);
      json_object_set_new(out, "assumptions", as);
      json_object_set_new(out, "candidates", json_integer((json_int_t)plan.candidates));
      json_object_set_new(out, "valid", json_integer((json_int_t)(plan.candidates - plan.invalid)));
      json_object_set_new(out, "predicted_oom", json_integer((json_int_t)plan.predicted_oom));
      json_object_set_new(out, "tensor_wider_than_a_host", json_integer((json_int_t)plan.tensor_too_wide));
      json_object_set_new(out, "predicted", json_integer((json_int_t)plan.predicted));
      json_object_set_new(out, "strategies", list);
    }
  }
  aa_plan_rank_free(&plan);
  return rc;
}

int aa__plan_query(aa_store_t *st, const json_t *args, json_t *out) {
  plan_prep_t pp;
  int rc = plan_prepare(st, args, &pp);
  if (rc) return rc;
  rc = plan_compute(&pp, out);
  plan_prep_free(&pp);
  return rc;
}

/* --- off the loop ------------------------------------------------------------------ */

/* One plan on libuv's thread pool: what the worker needs, and what it
 * hands back to the loop. */
typedef struct {
  uv_work_t work;
  aa_planner_t *p;
  uint64_t client, req; /* the asking client (its id: it may be gone by the end) and its request */
  plan_prep_t prep;
  int rc;
  char *text;                        /* the answer (malloc'd) when rc is 0 */
  char error[AA_PROTO_TEXT_MAX + 1]; /* the worker's last error when rc is not 0 */
} plan_job_t;

static void plan_work(uv_work_t *w) {
  plan_job_t *j = w->data;
  json_t *o = json_object();
  j->rc = o ? plan_compute(&j->prep, o) : aa_error(AA_ENOMEM, "query plan: no memory");
  if (!j->rc && !(j->text = aa__report_dump(o)))
    j->rc = aa_error(AA_ENOMEM, "query plan: no memory for the reply");
  if (j->rc) snprintf(j->error, sizeof j->error, "%s", aa_last_error()); /* the message is this thread's */
  json_decref(o);
}

static void plan_done(uv_work_t *w, int status) {
  plan_job_t *j = w->data;
  aa_planner_t *p = j->p;
  p->plans--;
  aa_conn_t *c = NULL;
  for (aa_conn_t *o = p->conns; o && !c; o = o->next)
    if (o->role == AA_CONN_CLIENT && !o->dropped && o->id == j->client) c = o;
  if (c && status == 0 && !j->rc)
    aa__conn_reply(c, j->req, j->text);
  else if (c)
    aa__conn_send_error(c, j->req, j->rc ? j->rc : AA_EINTERNAL, j->rc ? j->error : uv_strerror(status));
  free(j->text);
  plan_prep_free(&j->prep);
  free(j);
}

void aa__plan_start(aa_conn_t *c, uint64_t req, const char *args) {
  aa_planner_t *p = c->p;
  json_t *a = NULL;
  plan_job_t *j = NULL;
  int rc = 0;
  if (p->plans >= AA_PLANNER_PLANS)
    rc = aa_error(AA_EUNSUPPORTED,
                  "query plan: the planner is computing %d plan%s already; ask again when %s answered",
                  p->plans, p->plans == 1 ? "" : "s", p->plans == 1 ? "it is" : "they are");
  if (!rc && args)
    rc = aa_json_parse_text(args, strlen(args), AA_PROTO_JSON_MAX, "query plan: args", "query arguments",
                            "a JSON object", &a);
  if (!rc && !a) a = json_object();
  if (!rc && !json_is_object(a))
    rc = aa_error(AA_EINVAL, "query plan: args: must be a JSON object (got %s)", aa_json_type_name(a));
  if (!rc && !(j = calloc(1, sizeof *j))) rc = aa_error(AA_ENOMEM, "query plan: no memory");
  if (!rc) rc = plan_prepare(p->store, a, &j->prep);
  json_decref(a);
  if (!rc) {
    *j = (plan_job_t){.p = p, .client = c->id, .req = req, .prep = j->prep};
    j->work.data = j;
    int uv = uv_queue_work(&p->loop, &j->work, plan_work, plan_done);
    if (!uv) {
      p->plans++;
      return;
    }
    rc = aa_error(AA_EINTERNAL, "query plan: cannot start the work: %s", uv_strerror(uv));
    plan_prep_free(&j->prep);
  }
  free(j);
  aa__conn_send_error(c, req, rc, aa_last_error());
}
