/* `query plan` (planner/plan.c): the best strategies of a pool predicted
 * from a stored calibration, with no dry run. The calibration is synthetic
 * (every op shape the model's strategies run, timed in proportion to its
 * work; collective lines for groups of 2 only), stored with
 * aa_store_calib_put as the planner stores a measured one. Checks the
 * order by predicted tokens/s, the choice of calibration, pruning against
 * the device's memory, the assumptions' text, and every refusal; and
 * `query calib_export` (planner/calib_io.c), the file of a device's
 * stored calibrations that another planner imports to plan the same. */
#include "common/aa.h"
#include "common/spec.h"
#include "planner/planner_internal.h"
#include "planner/store.h"
#include "strategies/calib.h"
#include "strategies/calib_file.h"
#include "strategies/predict.h"
#include "tests/aa_test.h"

#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPU_BIG "cpu:Test CPU (1 threads):100000MiB"
#define MODEL_JSON                                                                                           \
  "{\"name\": \"p\", \"model\": {\"n_layer\": 2, \"n_head\": 4, \"d_model\": 256, \"d_ff\": 1024,"           \
  " \"seq_len\": 64, \"vocab_size\": 2048}, \"train\": {\"global_batch\": 8, \"steps\": 3, \"lr\": 0.001},"  \
  " \"data\": {\"train\": \"/nonexistent/train.bin\"}}"

static char tmp_dir[256];
static int db_counter;
static char db_path[512];

static aa_store_t *fresh_store(void) {
  snprintf(db_path, sizeof db_path, "%s/plan%d.db", tmp_dir, ++db_counter);
  aa_store_t *st = NULL;
  int rc = aa_store_open(&st, db_path, 0);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return st;
}

static aa_model_spec_t model_spec(void) {
  aa_model_spec_t s;
  int rc = aa_spec_parse(&s, MODEL_JSON, NULL, "test spec");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  return s;
}

/* A CPU calibration of `device` measured by `ranks` executors of one thread
 * on a host of host_cores: every op shape of the model's strategies on up
 * to 8 devices at 1 ns per unit of work (+1 us a call), backward twice the
 * forward; each collective kind on groups of 2 only, 10 us + bytes / 1 GB/s. */
static char *calibration(const char *device, int ranks, int host_cores, bool every_matmul) {
  aa_model_spec_t spec = model_spec();
  aa_calib_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->version = AA_CALIB_VERSION;
  snprintf(c->device, sizeof c->device, "%s", device);
  snprintf(c->backend, sizeof c->backend, "shm");
  c->threads = 1;
  c->host_cores = host_cores;
  c->ranks = ranks;
  c->measured_s = 3;
  static aa_calib_op_t wanted[AA_CALIB_OPS_MAX];
  size_t n = aa_predict_wanted(&spec, 8, 0, wanted, AA_CALIB_OPS_MAX);
  CHECK(n > 0 && n <= AA_CALIB_OPS_MAX);
  /* Once per (shape, dtype), as aa_calib_parse requires: the wanted list
   * may name a cast twice. */
  for (size_t i = 0; i < n; i++) {
    if (aa_calib_find_op(c, &wanted[i].shape, wanted[i].dtype)) continue;
    /* Without every_matmul, the GEMMs of one row count only (N = 64): the
     * others must come from neighbours. */
    if (!every_matmul && wanted[i].shape.op == AA_OP_MATMUL && wanted[i].shape.d[0] != 64) continue;
    aa_calib_op_t *op = &c->op[c->n_op++];
    *op = wanted[i];
    op->fwd_s = 1e-6 + 1e-9 * aa_op_work(&op->shape);
    op->bwd_s = op->shape.op == AA_OP_ADAMW ? 0 : 2 * op->fwd_s;
  }
  for (int k = 0; k < AA_COST_COLLECTIVES; k++)
    c->link[c->n_link++] =
        (aa_calib_link_t){.kind = (aa_cost_collective_t)k, .ranks = 2, .latency_s = 1e-5, .bytes_per_s = 1e9};
  char *json = aa_calib_to_json(c);
  CHECK_MSG(json, "%s", aa_last_error());
  free(c);
  return json;
}

static void put_calibration(aa_store_t *st, const char *device, int ranks, int host_cores) {
  char *json = calibration(device, ranks, host_cores, true);
  int rc = json ? aa_store_calib_put(st, device, "shm", json) : -1;
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  free(json);
}

/* Runs `query plan` with args (JSON text) through the query dispatch, as a
 * client's query reaches it; returns the reply (NULL on failure, rc set). */
static json_t *plan(aa_store_t *st, const char *args, int *rc) {
  char *text = NULL;
  *rc = aa__report_query(st, "/h", "plan", args, &text, NULL);
  json_t *root = *rc ? NULL : json_loads(text, 0, NULL);
  free(text);
  CHECK(*rc || root);
  return root;
}

static const char *args_for(const char *pool, const char *extra) {
  static char buf[2048];
  snprintf(buf, sizeof buf, "{\"model\": %s, \"pool\": %s%s}", MODEL_JSON, pool, extra ? extra : "");
  return buf;
}

static bool has_assumption(const json_t *root, const char *needle) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(root, "assumptions"), i,
                     v) if (strstr(json_string_value(v), needle)) return true;
  return false;
}

static void print_assumptions(const json_t *root) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(root, "assumptions"), i, v)
      fprintf(stderr, "    %s\n", json_string_value(v));
}

AA_TEST(strategies_come_best_predicted_first_with_their_breakdown) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  put_calibration(st, CPU_BIG, 2, 8);
  int rc;
  json_t *root = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"top\": 1000"), &rc);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!root) goto done;
  json_t *list = json_object_get(root, "strategies");
  long long predicted = json_integer_value(json_object_get(root, "predicted"));
  CHECK(predicted > 10 && json_array_size(list) == (size_t)(predicted < 1000 ? predicted : 1000));
  CHECK(json_integer_value(json_object_get(root, "candidates")) >=
        json_integer_value(json_object_get(root, "valid")));
  CHECK(json_integer_value(json_object_get(root, "predicted_oom")) == 0);
  double last = 1e300;
  bool dp4 = false;
  size_t i;
  json_t *s;
  json_array_foreach(list, i, s) {
    double tps = json_number_value(json_object_get(s, "tokens_per_s"));
    CHECK_MSG(tps > 0 && tps <= last, "strategy %zu: %g after %g", i, tps, last);
    last = tps;
    /* tokens/s = global batch x seq_len / step. */
    CHECK_NEAR(tps * json_number_value(json_object_get(s, "step_ms")) / 1e3, 8 * 64, 1e-6);
    json_t *b = json_object_get(s, "breakdown");
    static const char *const parts[] = {"forward_ms",       "backward_ms",     "tensor_comm_ms",
                                        "pipeline_comm_ms", "context_comm_ms", "bubble_ms",
                                        "optimizer_ms",     "data_comm_ms"};
    double sum = 0;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
      sum += json_number_value(json_object_get(b, parts[k]));
    CHECK_NEAR(sum, json_number_value(json_object_get(s, "step_ms")), 1e-6 * sum + 1e-9);
    CHECK(json_is_integer(json_object_get(b, "ops_estimated")) &&
          json_is_integer(json_object_get(b, "links_estimated")));
    CHECK(json_integer_value(json_object_get(s, "peak_bytes")) > 0);
    CHECK(json_is_object(json_object_get(s, "strategy")) && json_string_value(json_object_get(s, "key")));
    dp4 = dp4 || !strncmp(json_string_value(json_object_get(s, "key")), "dp4.", 4);
  }
  CHECK(dp4);
  json_t *cal = json_object_get(root, "calibration");
  CHECK(!strcmp(json_string_value(json_object_get(cal, "device")), CPU_BIG));
  CHECK(!strcmp(json_string_value(json_object_get(cal, "backend")), "shm"));
  CHECK(json_integer_value(json_object_get(cal, "ranks")) == 2 &&
        json_integer_value(json_object_get(cal, "host_cores")) == 8);
  CHECK(json_array_size(json_object_get(cal, "links_measured")) == 1);
  json_t *pool = json_object_get(root, "pool");
  CHECK(json_integer_value(json_object_get(pool, "devices")) == 4 &&
        json_integer_value(json_object_get(pool, "host_cores")) == 8);
  CHECK(json_integer_value(json_object_get(pool, "memory_bytes")) == (json_int_t)100000 << 20);
  /* The assumptions say what the predictions rest on. */
  CHECK(has_assumption(root, "no dry run: predictions only"));
  CHECK(has_assumption(
      root, "collectives of 4 ranks extrapolated from measured groups of 2 (latency x (t-1)/(t0-1), "
            "bandwidth kept)"));
  CHECK(has_assumption(
      root, "the 4 CPU executors share the host the calibration ran on (8 cores, 1 threads each)"));
  CHECK(!has_assumption(root, "taken from neighbours")); /* every shape was measured */
  if (aa_test_failed_checks) print_assumptions(root);
  json_decref(root);
  /* The default shows 5; --top 2 shows the same first two. */
  root = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", NULL), &rc);
  CHECK(root && json_array_size(json_object_get(root, "strategies")) == 5);
  json_decref(root);
done:
  aa_store_close(st);
}

/* A strategy whose predicted bytes pass the device's memory is left out and
 * counted; the device is the one asked for, whatever is newer. */
AA_TEST(strategies_past_the_device_memory_are_left_out_and_counted) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  put_calibration(st, CPU_BIG, 2, 8);
  int rc;
  json_t *root = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"top\": 1000"), &rc);
  if (!root) goto done;
  /* A memory between the smallest and the largest rank's bytes. */
  json_int_t lo = INT64_MAX, hi = 0;
  size_t i, all = (size_t)json_integer_value(json_object_get(root, "predicted"));
  json_t *s;
  json_array_foreach(json_object_get(root, "strategies"), i, s) {
    json_int_t b = json_integer_value(json_object_get(s, "peak_bytes"));
    lo = b < lo ? b : lo;
    hi = b > hi ? b : hi;
  }
  json_decref(root);
  long long mib = (long long)((lo + hi) / 2 >> 20);
  CHECK_MSG(mib >= 1 && ((json_int_t)mib << 20) > lo && ((json_int_t)mib << 20) < hi, "lo %lld hi %lld",
            (long long)lo, (long long)hi);
  char small[128], extra[256];
  snprintf(small, sizeof small, "cpu:Small CPU:%lldMiB", mib);
  put_calibration(st, small, 2, 8);
  /* Named: that device's calibration, and its memory. */
  snprintf(extra, sizeof extra, ", \"top\": 1000, \"device\": \"%s\"", small);
  root = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", extra), &rc);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  if (!root) goto done;
  CHECK(!strcmp(json_string_value(json_object_get(json_object_get(root, "calibration"), "device")), small));
  long long oom = json_integer_value(json_object_get(root, "predicted_oom"));
  size_t kept = (size_t)json_integer_value(json_object_get(root, "predicted"));
  CHECK_MSG(oom > 0 && kept > 0 && kept + (size_t)oom == all, "oom %lld kept %zu all %zu", oom, kept, all);
  CHECK(json_array_size(json_object_get(root, "strategies")) == (kept < 1000 ? kept : 1000));
  json_array_foreach(json_object_get(root, "strategies"), i, s)
      CHECK(json_integer_value(json_object_get(s, "peak_bytes")) <= (json_int_t)mib << 20);
  CHECK(has_assumption(root, "strategies predicted out of memory are left out"));
  json_decref(root);
  /* Not named: the newest of the kind. */
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
  char sql[256];
  snprintf(sql, sizeof sql, "UPDATE calibrations SET updated_at = updated_at - 100 WHERE device = '%s'",
           small);
  CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  root = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", NULL), &rc);
  CHECK(root &&
        !strcmp(json_string_value(json_object_get(json_object_get(root, "calibration"), "device")), CPU_BIG));
  json_decref(root);
done:
  aa_store_close(st);
}

/* Op shapes the calibration lacks are taken from measured neighbours, and
 * the assumptions say how many. */
AA_TEST(op_shapes_taken_from_neighbours_are_counted_and_said) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char *json = calibration(CPU_BIG, 2, 8, false);
  CHECK(json && aa_store_calib_put(st, CPU_BIG, "shm", json) == 0);
  free(json);
  int rc;
  json_t *root = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 2}", ", \"top\": 1000"), &rc);
  CHECK_MSG(root, "%s", aa_last_error());
  if (root) {
    int most = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(root, "strategies"), i, s) {
      int n = (int)json_integer_value(json_object_get(s, "ops_estimated"));
      most = n > most ? n : most;
    }
    char want[64];
    snprintf(want, sizeof want, "up to %d op shapes of a strategy taken from neighbours", most);
    CHECK_MSG(most > 0 && has_assumption(root, want), "most %d", most);
  }
  json_decref(root);
  aa_store_close(st);
}

AA_TEST(separate_hosts_give_each_executor_its_own_cores) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  put_calibration(st, CPU_BIG, 2, 2);
  int rc;
  json_t *shared = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 8}", NULL), &rc);
  json_t *apart =
      plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 8}", ", \"separate_hosts\": true"), &rc);
  CHECK_MSG(shared && apart, "%s", aa_last_error());
  if (shared && apart) {
    CHECK(json_integer_value(json_object_get(json_object_get(apart, "pool"), "host_cores")) == 0);
    CHECK(has_assumption(apart, "each CPU executor has cores of its own"));
    /* Eight executors on a 2-core host are slower than on their own cores. */
    double t_shared = json_number_value(
        json_object_get(json_array_get(json_object_get(shared, "strategies"), 0), "tokens_per_s"));
    double t_apart = json_number_value(
        json_object_get(json_array_get(json_object_get(apart, "strategies"), 0), "tokens_per_s"));
    CHECK_MSG(t_apart > t_shared, "apart %g shared %g", t_apart, t_shared);
  }
  json_decref(shared);
  json_decref(apart);
  aa_store_close(st);
}

/* The strategy of key `key` in a plan's list, or NULL. */
static const json_t *planned(const json_t *root, const char *key) {
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(root, "strategies"), i,
                     v) if (!strcmp(json_string_value(json_object_get(v, "key")), key)) return v;
  return NULL;
}

/* 8 devices on 4 hosts: no tensor group wider than 2; without a gang
 * spanning hosts measured, the intra-host lines stand in (said, counted);
 * with the device's gloo lines stored (10x slower here), the data groups
 * of a gang of 8 are slower than on one host, while its tensor groups,
 * inside a host, are not. The main calibration is never a gloo one. */
AA_TEST(hosts_keep_tensor_groups_inside_and_take_the_inter_host_lines) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  put_calibration(st, CPU_BIG, 2, 64);
  int rc;
  const char *pool8 = "{\"kind\": \"cpu\", \"devices\": 8}",
             *pool8h2 = "{\"kind\": \"cpu\", \"devices\": 8, \"hosts\": 4}";
  const char *top = ", \"top\": 1000";
  json_t *one = plan(st, args_for(pool8, top), &rc);
  json_t *est = plan(st, args_for(pool8h2, top), &rc);
  CHECK_MSG(one && est, "%s", aa_last_error());
  if (one && est) {
    CHECK(json_integer_value(json_object_get(one, "tensor_wider_than_a_host")) == 0);
    CHECK(json_integer_value(json_object_get(est, "tensor_wider_than_a_host")) > 0);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(est, "strategies"), i, v)
        CHECK_MSG(json_integer_value(json_object_get(
                      json_object_get(json_object_get(v, "strategy"), "parallel"), "tensor")) <= 2,
                  "%s", json_string_value(json_object_get(v, "key")));
    CHECK(has_assumption(est, "4 hosts of 2 devices"));
    CHECK(has_assumption(est, "no gang spanning hosts has been calibrated"));
    CHECK(json_is_false(json_object_get(json_object_get(est, "pool"), "inter_host_calibrated")));
  }
  /* The inter-host lines: the same calibration, 10x latency, 1/10 bandwidth, backend gloo. */
  aa_calib_t *x = calloc(1, sizeof *x);
  char *json = calibration(CPU_BIG, 2, 64, true);
  CHECK(x && json && aa_calib_parse(x, json, "t") == 0);
  free(json);
  for (int i = 0; x && i < x->n_link; i++)
    x->link[i].latency_s *= 10, x->link[i].bytes_per_s /= 10;
  if (x) snprintf(x->backend, sizeof x->backend, "gloo");
  json = x ? aa_calib_to_json(x) : NULL;
  CHECK(json && aa_store_calib_put(st, CPU_BIG, AA_CALIB_ACROSS_HOSTS, json) == 0);
  free(json);
  free(x);
  json_t *meas = plan(st, args_for(pool8h2, top), &rc);
  CHECK_MSG(meas, "%s", aa_last_error());
  if (one && meas) {
    CHECK(has_assumption(meas, "measured over gloo"));
    CHECK(
        !strcmp(json_string_value(json_object_get(json_object_get(meas, "calibration"), "backend")), "shm"));
    const json_t *a8 = planned(one, "dp8.tp1.pp1.z0.fp32.ckpt-none.mb1"),
                 *b8 = planned(meas, "dp8.tp1.pp1.z0.fp32.ckpt-none.mb1"),
                 *a4 = planned(one, "dp4.tp2.pp1.z0.fp32.ckpt-none.mb2"),
                 *b4 = planned(meas, "dp4.tp2.pp1.z0.fp32.ckpt-none.mb2");
    CHECK(a8 && b8 && a4 && b4);
    if (a8 && b8 && a4 && b4) {
      double d_one = json_number_value(json_object_get(json_object_get(a8, "breakdown"), "data_comm_ms"));
      double d_two = json_number_value(json_object_get(json_object_get(b8, "breakdown"), "data_comm_ms"));
      CHECK_MSG(d_two > 5 * d_one, "data comm across hosts %g ms, on one host %g ms", d_two, d_one);
      const json_t *ba = json_object_get(a4, "breakdown"), *bb = json_object_get(b4, "breakdown");
      CHECK_NEAR(json_number_value(json_object_get(bb, "tensor_comm_ms")) /
                     json_number_value(json_object_get(ba, "tensor_comm_ms")),
                 1, 1e-9);
      CHECK(json_number_value(json_object_get(bb, "data_comm_ms")) >
            5 * json_number_value(json_object_get(ba, "data_comm_ms")));
    }
  }
  /* Uneven spreads are refused. */
  json_t *bad = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 8, \"hosts\": 3}", NULL), &rc);
  CHECK_ERR(rc, AA_EINVAL, "do not spread evenly over 3 hosts");
  json_decref(bad);
  json_decref(one);
  json_decref(est);
  json_decref(meas);
  aa_store_close(st);
}

/* A device calibrated on one host under --cpu-backend gloo has only its
 * gloo row: the plan takes it (and, across hosts, reads it for the links
 * between them too). */
AA_TEST(a_device_with_only_a_gloo_calibration_is_planned_from_it) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  char *json = calibration(CPU_BIG, 2, 64, true);
  CHECK(json && aa_store_calib_put(st, CPU_BIG, "gloo", json) == 0);
  free(json);
  int rc;
  json_t *r = plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4, \"hosts\": 2}", NULL), &rc);
  CHECK_MSG(r, "%s", aa_last_error());
  if (r) {
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(r, "calibration"), "backend")), "gloo"));
    CHECK(json_is_true(json_object_get(json_object_get(r, "pool"), "inter_host_calibrated")));
    CHECK(json_array_size(json_object_get(r, "strategies")) > 0);
  }
  json_decref(r);
  aa_store_close(st);
}

AA_TEST(without_a_calibration_of_the_kind_the_error_says_which_job_measures_one) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  int rc;
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_ENOENT,
            "no calibration of a cpu device is stored: run a job on cpu devices first (e.g. `autoaccel auto "
            "--devices cpu:2 MODEL`)");
  put_calibration(st, CPU_BIG, 2, 8);
  CHECK(plan(st, args_for("{\"kind\": \"cuda\", \"devices\": 8}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_ENOENT, "no calibration of a cuda device is stored");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"device\": \"cpu:Other:1MiB\""), &rc) ==
        NULL);
  CHECK_ERR(rc, AA_ENOENT,
            "no calibration of device \"cpu:Other:1MiB\" is stored (of cpu devices: " CPU_BIG " (shm))");
  aa_store_close(st);
}

AA_TEST(bad_arguments_are_refused_naming_the_fault) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  put_calibration(st, CPU_BIG, 2, 8);
  int rc;
  CHECK(plan(st, args_for("{\"kind\": \"tpu\", \"devices\": 4}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"kind\" must be \"cpu\" or \"cuda\"");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 0}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"devices\" must be in 1..4096 (got 0)");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\"}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"devices\" (1..4096) is required");
  /* 64 devices give this model 54,306 candidates (20,322 without context
   * groups): more than one plan predicts. */
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 64}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL,
            "a pool of 64 devices has 54306 candidate strategies for this model, more than one plan "
            "predicts (20000); plan for fewer devices");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"top\": 0"), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"top\" must be in 1..1000");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"speed\": 1"), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "unknown argument \"speed\"");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"separate_hosts\": 1"), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"separate_hosts\" must be a boolean");
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", ", \"device\": \"cuda:G:1MiB\""), &rc) ==
        NULL);
  CHECK_ERR(rc, AA_EINVAL, "device \"cuda:G:1MiB\" is not a cpu device");
  CHECK(plan(st, "{\"pool\": {\"kind\": \"cpu\", \"devices\": 4}}", &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"model\" (a model spec) is required");
  CHECK(plan(st, "{\"model\": 3, \"pool\": {\"kind\": \"cpu\", \"devices\": 4}}", &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"model\" must be a model spec object or its text (got integer)");
  CHECK(plan(st,
             "{\"model\": {\"model\": {\"n_layer\": 2, \"n_head\": 3, \"d_model\": 32}},"
             " \"pool\": {\"kind\": \"cpu\", \"devices\": 4}}",
             &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "query plan: model");
  CHECK(plan(st, "{\"model\": {}}", &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "\"pool\"");
  /* The model may come as text too. */
  char *text = NULL;
  json_t *a = json_pack("{s:s, s:{s:s, s:i}}", "model", MODEL_JSON, "pool", "kind", "cpu", "devices", 2);
  char *args = json_dumps(a, JSON_COMPACT);
  json_decref(a);
  CHECK_MSG(aa__report_query(st, "/h", "plan", args, &text, NULL) == 0, "%s", aa_last_error());
  free(args);
  free(text);
  aa_store_close(st);
}

AA_TEST(a_calibration_that_is_not_one_is_named) {
  aa_store_t *st = fresh_store();
  if (!st) return;
  CHECK(aa_store_calib_put(st, CPU_BIG, "shm", "{\"version\": 1}") == 0);
  int rc;
  CHECK(plan(st, args_for("{\"kind\": \"cpu\", \"devices\": 4}", NULL), &rc) == NULL);
  CHECK_ERR(rc, AA_EINVAL, "the stored calibration of " CPU_BIG " (shm)");
  aa_store_close(st);
}

/* The breakdown a run stores (runs.predicted_json) is the prediction's,
 * in milliseconds. */
/* Runs `query calib_export` with args; the reply, or NULL with rc set. */
static json_t *calib_export(aa_store_t *st, const char *args, int *rc) {
  char *text = NULL;
  *rc = aa__report_query(st, "/h", "calib_export", args, &text, NULL);
  json_t *root = *rc ? NULL : json_loads(text, 0, NULL);
  free(text);
  CHECK(*rc || root);
  return root;
}

/* The export of a device holds its rows and no other's, even one whose
 * fingerprint starts with it, the links between hosts included, in backend
 * order, as a file the importing reader takes; what it cannot export
 * (nothing stored, a row that is no calibration) is named. */
AA_TEST(calib_export_writes_every_row_of_one_device_as_a_file) {
  aa_store_t *st = fresh_store();
  const char *shorter = "cpu:Test CPU";
  put_calibration(st, CPU_BIG, 2, 4);
  put_calibration(st, shorter, 2, 4);
  char *json = calibration(CPU_BIG, 2, 4, false);
  char *gloo = json ? strstr(json, "\"backend\":\"shm\"") : NULL;
  CHECK(gloo);
  char *fixed = calloc(1, strlen(json) + 8);
  snprintf(fixed, strlen(json) + 8, "%.*s\"backend\":\"gloo\"%s", (int)(gloo - json), json,
           gloo + strlen("\"backend\":\"shm\""));
  CHECK(aa_store_calib_put(st, CPU_BIG, "gloo", fixed) == 0);
  free(fixed);
  free(json);

  int rc;
  json_t *r = calib_export(st, "{\"device\": \"" CPU_BIG "\"}", &rc);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(!strcmp(json_string_value(json_object_get(r, "device")), CPU_BIG));
  json_t *rows = json_object_get(r, "calibrations");
  CHECK(json_array_size(rows) == 2);
  CHECK(!strcmp(json_string_value(json_object_get(json_array_get(rows, 0), "backend")), "gloo"));
  CHECK(!strcmp(json_string_value(json_object_get(json_array_get(rows, 1), "backend")), "shm"));
  const char *file = json_string_value(json_object_get(r, "file"));
  aa_calib_file_t f;
  CHECK_MSG(file && aa_calib_file_parse(&f, file, strlen(file), "export") == 0, "%s", aa_last_error());
  CHECK(f.n == 2 && !strcmp(f.e[0].device, CPU_BIG) && !strcmp(f.e[0].backend, "gloo") &&
        !strcmp(f.e[1].backend, "shm") && f.e[1].measured_at > 0);
  /* Written again from what was read, the same bytes: an import stores
   * what a later export writes. */
  char *again = aa_calib_file_to_json(&f);
  CHECK(again && !strcmp(again, file));
  free(again);
  aa_calib_file_clear(&f);
  json_decref(r);

  r = calib_export(st, "{\"device\": \"cpu:Test CPU\"}", &rc);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  CHECK(!strcmp(json_string_value(json_object_get(r, "device")), shorter));
  CHECK(json_array_size(json_object_get(r, "calibrations")) == 1);
  json_decref(r);
  /* A kind: the device plan takes by default, a whole one. */
  r = calib_export(st, "{\"device\": \"cpu\"}", &rc);
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  const char *dev = json_string_value(json_object_get(r, "device"));
  CHECK(dev && (!strcmp(dev, shorter) || !strcmp(dev, CPU_BIG)));
  json_decref(r);

  CHECK(!calib_export(st, "{\"device\": \"cuda\"}", &rc) && rc == AA_ENOENT);
  CHECK(strstr(aa_last_error(), "no calibration of a cuda device is stored"));
  CHECK(!calib_export(st, "{\"device\": \"cpu:Test\"}", &rc) && rc == AA_ENOENT);
  CHECK(strstr(aa_last_error(), "no calibration of device \"cpu:Test\" is stored"));
  CHECK(!calib_export(st, NULL, &rc) && rc == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "\"device\" (a device fingerprint, cpu or cuda) is required"));
  CHECK(!calib_export(st, "{\"device\": \"cpu\", \"top\": 1}", &rc) && rc == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "unknown argument \"top\""));
  CHECK(aa_store_calib_put(st, shorter, "self", "{\"version\": 1}") == 0);
  CHECK(!calib_export(st, "{\"device\": \"cpu:Test CPU\"}", &rc) && rc == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "the stored calibration of cpu:Test CPU (self)"), "%s", aa_last_error());
  aa_store_close(st);
}

AA_TEST(the_breakdown_is_the_prediction_in_milliseconds) {
  aa_predict_t p = {.forward_s = 0.001,
                    .backward_s = 0.002,
                    .tensor_comm_s = 0.003,
                    .pipeline_comm_s = 0.004,
                    .context_comm_s = 0.008,
                    .expert_comm_s = 0.009,
                    .bubble_s = 0.005,
                    .optimizer_s = 0.006,
                    .data_comm_s = 0.007,
                    .ops_estimated = 2,
                    .links_estimated = 3};
  json_t *b = aa__plan_breakdown(&p);
  CHECK(b && json_object_size(b) == 11);
  CHECK_NEAR(json_number_value(json_object_get(b, "context_comm_ms")), 8, 1e-12);
  CHECK_NEAR(json_number_value(json_object_get(b, "expert_comm_ms")), 9, 1e-12);
  CHECK_NEAR(json_number_value(json_object_get(b, "forward_ms")), 1, 1e-12);
  CHECK_NEAR(json_number_value(json_object_get(b, "data_comm_ms")), 7, 1e-12);
  CHECK(json_integer_value(json_object_get(b, "links_estimated")) == 3);
  json_decref(b);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/aa_test_plan_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(strategies_come_best_predicted_first_with_their_breakdown);
  RUN(strategies_past_the_device_memory_are_left_out_and_counted);
  RUN(op_shapes_taken_from_neighbours_are_counted_and_said);
  RUN(separate_hosts_give_each_executor_its_own_cores);
  RUN(hosts_keep_tensor_groups_inside_and_take_the_inter_host_lines);
  RUN(a_device_with_only_a_gloo_calibration_is_planned_from_it);
  RUN(without_a_calibration_of_the_kind_the_error_says_which_job_measures_one);
  RUN(bad_arguments_are_refused_naming_the_fault);
  RUN(a_calibration_that_is_not_one_is_named);
  RUN(the_breakdown_is_the_prediction_in_milliseconds);
  RUN(calib_export_writes_every_row_of_one_device_as_a_file);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
  return aa_test_summary();
}
