/* Strategy files: reading either form (v1 object, ATorch list) and writing
 * the v1 object form. Format: docs/strategy-format.md.
 *
 * Every v1 field is described once, in a table of the field reader the
 * model spec uses too (common/json.h: key, kind, range, where it lands in
 * aa_strategy_t). The reader and the writer both walk the tables, so the
 * key order of a written file, the unknown-key list, the range checks and
 * the fields written cannot drift apart; and the reader and the writer
 * hold the value to the same rules (aa_strategy_check, which walks the
 * same tables), so a saved file always loads back. */
#include "strategy.h"

#include "pipeline.h"
#include "strategy_internal.h"

#include "../common/file.h"
#include "../common/json.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A strategy is under a kilobyte (a rank order of 4096 ranks, 30 KB); the
 * cap keeps a wrong file (a token shard, a checkpoint) from being read
 * whole before it is rejected. */
#define STRATEGY_MAX_BYTES (1u << 20)
#define FORMAT_NAME "autoaccel-strategy"
#define MAX_DEGREE AA__STRATEGY_DEGREE_MAX

/* AA_JSON_ENUM reads enums as ints. */
_Static_assert(sizeof(aa_dtype_t) == sizeof(int) && sizeof(aa_ckpt_mode_t) == sizeof(int) &&
                   sizeof(aa_pp_schedule_t) == sizeof(int) && sizeof(aa_axis_t) == sizeof(int) &&
                   sizeof(aa_pp_partition_t) == sizeof(int),
               "enums must be int-sized");

static const char *const amp_names[] = {"fp32", "bf16", "fp16", NULL};       /* = aa_dtype_t */
static const char *const ckpt_names[] = {"none", "selective", "full", NULL}; /* = aa_ckpt_mode_t */

/* ---- provenance text: the rule a string breaks, or NULL ------------------ */

_Static_assert(sizeof(((aa_strategy_t *)0)->model_name) == 128 && sizeof(((aa_strategy_t *)0)->hardware) == 128,
               "text_rule states the size");

static const char *text_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty (leave the field out when unknown)";
  if (len >= 128) return "must be at most 127 bytes long";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  return NULL;
}

/* Hashes and dates have a fixed shape, which a length rule would only blur. */
static const char *hash_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty (leave the field out when unknown)";
  bool ok = len == 16;
  for (size_t i = 0; ok && i < len; i++)
    ok = isdigit((unsigned char)s[i]) || (s[i] >= 'a' && s[i] <= 'f');
  return ok ? NULL : "must be 16 lowercase hex digits";
}

static const char *date_rule(const char *s, size_t len) {
  static const char pattern[] = "dddd-dd-ddTdd:dd:ddZ";
  if (len == 0) return "must not be empty (leave the field out when unknown)";
  bool ok = len == sizeof pattern - 1;
  for (size_t i = 0; ok && i < len; i++)
    ok = pattern[i] == 'd' ? isdigit((unsigned char)s[i]) != 0 : s[i] == pattern[i];
  return ok ? NULL : "must be a UTC time written YYYY-MM-DDTHH:MM:SSZ";
}

/* ---- the mesh's numbering: parallel.order and parallel.rank_order -------- */

/* ["tensor", "pipeline", "data"]: the axes of the first three once each,
 * fastest first, and those added later (context) when the file places
 * them; one left out goes where the default order puts it relative to
 * the others (aa_axis_order_from), so files written before it existed
 * read as they did. */
static int read_order(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const char *const count[] = {"", "one", "two", "three", "four", "five", "six"};
  aa_axis_t axes[AA_AXES];
  size_t i, o = 0, k = 0;
  const json_t *x;
  char need[128], names[128];
  int nalways = 0;
  for (int a = 0; a < AA_AXES; a++) {
    k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", a ? ", " : "", aa_axis_name((aa_axis_t)a));
    if (aa_axis_info((aa_axis_t)a)->always)
      o += (size_t)snprintf(need + o, sizeof need - o, "%s\"%s\"", nalways++ ? ", " : "",
                            aa_axis_name((aa_axis_t)a));
  }
  if (!json_is_array(v) || json_array_size(v) < (size_t)nalways || json_array_size(v) > AA_AXES)
    return aa_json_fail(c, AA_EINVAL, path,
                        "must list the %s axes %s once each, fastest first (and any of %s)",
                        nalways < 7 ? count[nalways] : "", need, names);
  json_array_foreach(v, i, x) {
    int a = json_is_string(x) ? aa_axis_from_name(json_string_value(x)) : -1;
    if (a < 0) {
      char got[256];
      aa_json_sanitize(got, sizeof got, json_is_string(x) ? json_string_value(x) : aa_json_type_name(x));
      return aa_json_fail(c, AA_EINVAL, path, "unknown axis %s%s%s (allowed: %s)",
                          json_is_string(x) ? "\"" : "", got, json_is_string(x) ? "\"" : "", names);
    }
    for (size_t j = 0; j < i; j++)
      if (axes[j] == (aa_axis_t)a)
        return aa_json_fail(c, AA_EINVAL, path, "axis \"%s\" is given twice", aa_axis_name((aa_axis_t)a));
    axes[i] = (aa_axis_t)a;
  }
  for (int a = 0; a < AA_AXES; a++) {
    bool listed = false;
    for (size_t j = 0; j < json_array_size(v); j++)
      listed = listed || axes[j] == (aa_axis_t)a;
    if (!listed && aa_axis_info((aa_axis_t)a)->always)
      return aa_json_fail(c, AA_EINVAL, path,
                          "must list the %s axes %s once each, fastest first (and any of %s)",
                          nalways < 7 ? count[nalways] : "", need, names);
  }
  aa_axis_order_from(dst, axes, (int)json_array_size(v));
  return 0;
}

/* A parallel degree, 1..MAX_DEGREE. Custom so that the writer can leave
 * out an axis added after the first three at degree 1 (common/axis.h
 * `always`), which keeps every earlier file as it was. */
static int read_degree(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const aa_json_field_t degree = {
      .kind = AA_JSON_INT, .imin = 1, .imax = MAX_DEGREE, .size = sizeof(int)};
  return aa_json_read_value(c, path, &degree, v, dst);
}

/* sequence_parallel: strictly true or false, as every boolean field. A
 * custom field only so that the writer can leave it out when false. */
static int read_sequence_parallel(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const aa_json_field_t flag = {.kind = AA_JSON_BOOL, .size = sizeof(int)};
  return aa_json_read_value(c, path, &flag, v, dst);
}

/* parallel.expert: 1..AA_STRATEGY_EP_MAX ranks an MoE layer's experts
 * are split over. Custom only so that the writer leaves it out at 1. */
static int read_expert(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const aa_json_field_t degree = {
      .kind = AA_JSON_INT, .imin = 1, .imax = AA_STRATEGY_EP_MAX, .size = sizeof(int)};
  return aa_json_read_value(c, path, &degree, v, dst);
}

/* parallel.expert_tensor (Megatron's expert_tensor_parallel_size): a
 * degree here; aa__strategy_check holds it to 1 or the tensor degree. */
static int read_expert_tensor(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const aa_json_field_t degree = {
      .kind = AA_JSON_INT, .imin = 1, .imax = AA__STRATEGY_DEGREE_MAX, .size = sizeof(int)};
  return aa_json_read_value(c, path, &degree, v, dst);
}

/* Fills nranks and rank_order of the strategy being read (c->data). */
static int read_rank_order(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  (void)dst;
  char rule[256];
  int rc = aa__rank_order_read(c->data, v, rule, sizeof rule);
  return rc ? aa_json_fail(c, rc, path, "%s", rule) : 0;
}

/* ---- the pipeline: schedule, virtual_stages, partition ------------------ */

/* The schedule's names: ours, then the spellings of PyTorch's pipelining
 * (torchtitan, ATorch: "1F1B", "GPipe", "Interleaved1F1B"), all read
 * case-insensitively. Merak's train_schedule "1f1b" is ours already. */
static const struct {
  const char *name;
  aa_pp_schedule_t schedule;
} schedule_names[] = {{"1f1b", AA_SCHEDULE_1F1B},
                      {"gpipe", AA_SCHEDULE_GPIPE},
                      {"interleaved", AA_SCHEDULE_INTERLEAVED},
                      {"interleaved1f1b", AA_SCHEDULE_INTERLEAVED}};

/* Merak's other train_schedule values: each is a schedule autoaccel does
 * not run, refused with what it is rather than read as a near one. */
static const struct {
  const char *name, *why;
} schedule_refused[] = {
    {"ds_default",
     "DeepSpeed's own TrainSchedule; autoaccel runs its own 1F1B (PipeDream-flush) order: give \"1f1b\""},
    {"pre_recompute_1f1b",
     "Merak's 1F1B that recomputes ahead of the backward; autoaccel recomputes within the "
     "backward (\"checkpoint\"): give \"1f1b\""},
    {"last_no_recompute_1f1b",
     "Merak's 1F1B that skips recomputation on the last stage; autoaccel checkpoints "
     "every stage alike: give \"1f1b\""},
    {"full_critical_path_1f1b", "Merak's critical-path 1F1B; give \"1f1b\""},
    {"shifted_critical_path", "Merak's shifted critical-path schedule; give \"1f1b\""},
};

static int read_schedule(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_string(v)) return aa_json_fail_type(c, path, "a string", v);
  const char *name = json_string_value(v);
  for (size_t i = 0; i < sizeof schedule_names / sizeof schedule_names[0]; i++)
    if (strcasecmp(name, schedule_names[i].name) == 0) {
      *(aa_pp_schedule_t *)dst = schedule_names[i].schedule;
      return 0;
    }
  char got[256];
  aa_json_sanitize(got, sizeof got, name);
  for (size_t i = 0; i < sizeof schedule_refused / sizeof schedule_refused[0]; i++)
    if (strcmp(name, schedule_refused[i].name) == 0)
      return aa_json_fail(c, AA_EUNSUPPORTED, path, "\"%s\" is not supported by autoaccel (%s)", got,
                          schedule_refused[i].why);
  return aa_json_fail(c, AA_EINVAL, path, "must be one of: 1f1b, gpipe, interleaved (got \"%s\")", got);
}

/* virtual_stages: 1..AA_PP_CHUNKS_MAX (pipeline.h). Custom only so that
 * the writer can leave the default out where there is no pipeline. */
static int read_virtual_stages(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const aa_json_field_t count = {
      .kind = AA_JSON_INT, .imin = 1, .imax = AA_PP_CHUNKS_MAX, .size = sizeof(int)};
  return aa_json_read_value(c, path, &count, v, dst);
}

/* "uniform", "parameters", or the custom cut as a list of block
 * boundaries [0, 3, 6, 8] (Merak's custom_partition). The count and the
 * ends are checked against the degrees once every field is read. */
static int read_partition(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  aa_strategy_t *s = c->data;
  (void)dst;
  if (json_is_string(v)) {
    const char *name = json_string_value(v);
    /* Merak's "uniform_floor" (n_layer / stages blocks each, the remainder
     * one each to the stages after the first) is autoaccel's uniform cut
     * exactly. */
    if (strcmp(name, "uniform") == 0 || strcmp(name, "parameters") == 0 ||
        strcmp(name, "uniform_floor") == 0) {
      s->partition = name[0] == 'u' ? AA_PARTITION_UNIFORM : AA_PARTITION_PARAMETERS;
      aa_strategy_set_bounds(s, NULL, 0);
      return 0;
    }
    char got[256];
    aa_json_sanitize(got, sizeof got, name);
    if (strncmp(name, "type:", 5) == 0)
      return aa_json_fail(
          c, AA_EUNSUPPORTED, path,
          "\"%s\" is not supported by autoaccel (it balances the layers of a class; every block of "
          "autoaccel's model is the same class, so \"uniform\" gives that cut)",
          got);
    return aa_json_fail(
        c, AA_EINVAL, path,
        "must be \"uniform\" (Merak's \"uniform_floor\"), \"parameters\" or a list of block boundaries such "
        "as [0, 3, 6, 8] (got \"%s\")",
        got);
  }
  if (!json_is_array(v))
    return aa_json_fail_type(c, path, "\"uniform\", \"parameters\" or a list of block boundaries", v);
  size_t n = json_array_size(v), i;
  const json_t *x;
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
  if (n < 2 || n > AA_STRATEGY_STAGES_MAX + 1)
    return aa_json_fail(c, AA_EINVAL, path, "must list between 2 and %d block boundaries (got %zu)",
                        AA_STRATEGY_STAGES_MAX + 1, n);
  json_array_foreach(v, i, x) {
    if (!json_is_integer(x))
      return aa_json_fail(c, AA_EINVAL, path, "boundary %zu must be an integer (got %s)", i,
                          aa_json_type_name(x));
    if (json_integer_value(x) < 0 || json_integer_value(x) > INT_MAX)
      return aa_json_fail(c, AA_EINVAL, path,
                          "boundary %zu must be a block index between 0 and %d (got %lld)", i, INT_MAX,
                          (long long)json_integer_value(x));
    bounds[i] = (int)json_integer_value(x);
  }
  if (aa_strategy_set_bounds(s, bounds, (int)n))
    return aa_json_fail(c, AA_EINVAL, path, "%s", aa_last_error());
  s->partition = AA_PARTITION_CUSTOM;
  return 0;
}

/* The pipeline rules that need no model (aa_pp_bounds holds the rest
 * against n_layer), so that a file never says what no model can run. */
int aa__strategy_check_pipeline(const aa_json_ctx_t *c, const aa_strategy_t *s) {
  const int v = s->vpp > 1 ? s->vpp : 1, pp = s->degree[AA_AXIS_PIPELINE];
  if ((unsigned)s->schedule > AA_SCHEDULE_INTERLEAVED)
    return aa_json_fail(c, AA_EINVAL, "schedule", "must be one of: 1f1b, gpipe, interleaved (got %d)",
                        (int)s->schedule);
  if (s->vpp < 0 || s->vpp > AA_PP_CHUNKS_MAX)
    return aa_json_fail(c, AA_EINVAL, "virtual_stages", "must be between 1 and %d (got %d)", AA_PP_CHUNKS_MAX,
                        s->vpp);
  if ((unsigned)s->partition > AA_PARTITION_CUSTOM)
    return aa_json_fail(c, AA_EINVAL, "partition",
                        "must be \"uniform\", \"parameters\" or a list of block "
                        "boundaries (got %d)",
                        (int)s->partition);
  if (v > 1 && pp < 2)
    return aa_json_fail(c, AA_EINVAL, "virtual_stages",
                        "%d needs pipeline parallelism (got pipeline %d): the virtual stages are chunks of a "
                        "pipeline rank's blocks",
                        v, pp);
  if (v > 1 && s->schedule != AA_SCHEDULE_INTERLEAVED)
    return aa_json_fail(c, AA_EINVAL, "virtual_stages",
                        "%d needs the interleaved schedule (schedule is \"%s\"), the one that runs several "
                        "chunks per rank",
                        v, aa_pp_schedule_name(s->schedule));
  if (pp > 1 && v == 1 && s->schedule == AA_SCHEDULE_INTERLEAVED)
    return aa_json_fail(
        c, AA_EINVAL, "schedule",
        "\"interleaved\" needs \"virtual_stages\" >= 2 (each pipeline rank holds several chunks)");
  if (s->partition != AA_PARTITION_CUSTOM) return 0;
  const long long S = (long long)pp * v;
  if (S > AA_STRATEGY_STAGES_MAX)
    return aa_json_fail(c, AA_EINVAL, "partition",
                        "pipeline %d x virtual_stages %d = %lld stages; a custom cut holds at most %d", pp, v,
                        S, AA_STRATEGY_STAGES_MAX);
  if (s->n_bounds != S + 1)
    return aa_json_fail(
        c, AA_EINVAL, "partition",
        "lists %d boundaries; pipeline %d x virtual_stages %d = %lld stages need %lld (0, ..., n_layer)",
        s->n_bounds, pp, v, S, S + 1);
  if (s->bounds[0] != 0)
    return aa_json_fail(c, AA_EINVAL, "partition", "must start at block 0 (got %d)", s->bounds[0]);
  for (int k = 0; k < (int)S; k++)
    if (s->bounds[k + 1] <= s->bounds[k])
      return aa_json_fail(
          c, AA_EINVAL, "partition",
          "boundaries must increase (stage %d would hold blocks [%d, %d): every stage holds at "
          "least one block)",
          k, s->bounds[k], s->bounds[k + 1]);
  return 0;
}

/* ---- the seeds' names: Megatron's, Merak's, megatron-wrap's ------------- */

/* Moves root[from] to root[section][to] (creating the section), refusing
 * a value the section gives already. */
static int move_into(const aa_json_ctx_t *c, json_t *root, const char *from, const char *section,
                     const char *to) {
  json_t *v = json_object_get(root, from), *sec = json_object_get(root, section);
  if (!v) return 0;
  if (sec && !json_is_object(sec)) return aa_json_fail_type(c, section, "an object", sec);
  if (!sec) {
    if (!(sec = json_object()) || json_object_set_new(root, section, sec))
      return aa_error(AA_ENOMEM, "strategy: out of memory");
  }
  if (json_object_get(sec, to))
    return aa_json_fail(c, AA_EINVAL, from, "gives %s.%s again; give one of them", section, to);
  if (json_object_set(sec, to, v) || json_object_del(root, from))
    return aa_error(AA_ENOMEM, "strategy: out of memory");
  return 0;
}

/* A boolean switch that picks a value of `key` (Megatron's fp16 / bf16 for
 * amp, Merak's activation_checkpointing for checkpoint): true sets it,
 * false only says "not this one"; either conflicts with a key that says
 * otherwise. */
static int switch_key(const aa_json_ctx_t *c, json_t *root, const char *sw, const char *key, const char *on,
                      const char *off) {
  json_t *v = json_object_get(root, sw), *cur = json_object_get(root, key);
  if (!v) return 0;
  if (!json_is_boolean(v)) return aa_json_fail_type(c, sw, "true or false", v);
  const char *want = json_is_true(v) ? on : off, *got = json_is_string(cur) ? json_string_value(cur) : NULL;
  if (cur && want && (!got || strcmp(got, want)))
    return aa_json_fail(c, AA_EINVAL, sw, "%s conflicts with %s \"%s\"; give one of them",
                        json_is_true(v) ? "true" : "false", key, got ? got : "?");
  if (cur && !want && got && !strcmp(got, on))
    return aa_json_fail(c, AA_EINVAL, sw, "false conflicts with %s \"%s\"; give one of them", key, got);
  if (json_object_del(root, sw)) return aa_error(AA_ENOMEM, "strategy: out of memory");
  if (want && !cur && json_object_set_new(root, key, json_string(want)))
    return aa_error(AA_ENOMEM, "strategy: out of memory");
  return 0;
}

/* Keys of the seeds that are no strategy field. `ok` is the value that
 * asks for nothing autoaccel does not do, accepted with no effect (JSON
 * text; "bool" for either boolean); NULL: refused whatever the value.
 * Another value is refused with what the key is and what to use instead
 * (docs/strategy-format.md "Seed names"). */
static const struct {
  const char *key, *ok, *why;
} seed_refused[] = {
    {"save_total_limit", NULL,
     "Merak's checkpoint retention is a training option, not a strategy: give autoaccel train --keep-last N "
     "(or train.save_total_limit in the model spec)"},
    {"no_save_optim", "false",
     "Merak's checkpoint contents are a training option, not a strategy: give autoaccel train --weights-only-checkpoints "
     "(or train.no_save_optim in the model spec) to save the weights alone"},
    {"no_save_rng", NULL,
     "Merak's checkpoint contents are a training option, not a strategy: give autoaccel train --weights-only-checkpoints "
     "to save the weights alone"},
    {"global_batch_size", NULL, "the global batch belongs to the model spec: give train.global_batch there"},
    {"num_layers", NULL, "the model's shape belongs to the model spec: give model.n_layer there"},
    {"seq_length", NULL, "the model's shape belongs to the model spec: give model.seq_len there"},
    {"num_heads", NULL, "the model's shape belongs to the model spec: give model.n_head there"},
    {"activation_checkpoint_ratio", NULL,
     "Merak checkpoints a fraction of the first stage's layers; autoaccel checkpoints the first k blocks: "
     "give "
     "\"checkpoint\": \"full\" with \"checkpoint_layers\": k"},
    {"split_method", NULL,
     "Merak cuts a traced PyTorch graph; autoaccel's models are its own blocks, cut between blocks: give "
     "\"partition\""},
    {"custom_split_points", NULL,
     "Merak cuts a traced PyTorch graph; autoaccel cuts between blocks: give \"partition\" as a list of "
     "block "
     "boundaries"},
    {"trace_method", NULL, "Merak traces a PyTorch model; autoaccel's models are its own: leave it out"},
    {"zero_allgather_bucket_size", NULL,
     "DeepSpeed's communication buckets; autoaccel's ZeRO gathers one transformer block at a time: leave it "
     "out"},
    {"zero_reduce_bucket_size", NULL,
     "DeepSpeed's communication buckets; autoaccel's ZeRO reduces one transformer block at a time: leave it "
     "out"},
    {"tp_overlapping_level", "0",
     "autoaccel does not overlap tensor-parallel communication with compute (level 0): give 0 or leave it "
     "out"},
    {"parallel_vocab", "true",
     "autoaccel always splits the vocabulary over the tensor ranks (docs/training-knobs.md): give true or "
     "leave "
     "it out"},
    {"wall_clock_breakdown", "bool", NULL}, /* logging only: train always times forward, backward, bubble */
    {"hierarchical_context_parallel_sizes", NULL,
     "autoaccel's context parallelism is one ring (Megatron's p2p): give parallel.context alone"},
    {"cpu_offloading", "false",
     "autoaccel keeps every activation and state on the device: give false or leave it out"},
    {"tp_comm_overlap", "false",
     "autoaccel does not overlap tensor-parallel communication with compute: give false or leave it out"},
};

/* Removes the keys of seed_refused that ask for nothing autoaccel does
 * not do, refusing the others. */
static int seed_fields(const aa_json_ctx_t *c, json_t *r) {
  for (size_t i = 0; i < sizeof seed_refused / sizeof seed_refused[0]; i++) {
    json_t *v = json_object_get(r, seed_refused[i].key), *ok = NULL;
    if (!v) continue;
    const char *want = seed_refused[i].ok;
    bool fine = want && !strcmp(want, "bool") ? json_is_boolean(v) : false;
    if (want && strcmp(want, "bool")) {
      ok = json_loads(want, JSON_DECODE_ANY, NULL);
      fine = ok && json_equal(ok, v);
      json_decref(ok);
    }
    if (!fine && want && !strcmp(want, "bool"))
      return aa_json_fail_type(c, seed_refused[i].key, "true or false", v);
    if (!fine && !want)
      return aa_json_fail(c, AA_EUNSUPPORTED, seed_refused[i].key, "is not a strategy field (%s)",
                          seed_refused[i].why);
    if (!fine) {
      char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT), got[64];
      aa_json_sanitize(got, sizeof got, text ? text : "?");
      free(text);
      return aa_json_fail(c, AA_EUNSUPPORTED, seed_refused[i].key, "%s is not supported by autoaccel (%s)",
                          got, seed_refused[i].why);
    }
    json_object_del(r, seed_refused[i].key);
  }
  return 0;
}

/* In `parallel`: Megatron's expert_tensor_parallel_size, read as
 * expert_tensor (1 or the tensor degree, which aa__strategy_check holds it
 * to), and moe_extended_tp, its deprecated predecessor, taken as false
 * only. */
static int parallel_seed_names(const aa_json_ctx_t *c, json_t *par) {
  json_t *etp = json_object_get(par, "expert_tensor_parallel_size"),
         *ext = json_object_get(par, "moe_extended_tp");
  if (etp) {
    if (json_object_get(par, "expert_tensor"))
      return aa_json_fail(c, AA_EINVAL, "parallel.expert_tensor_parallel_size",
                          "gives parallel.expert_tensor again; give one of them");
    if (json_object_set(par, "expert_tensor", etp) || json_object_del(par, "expert_tensor_parallel_size"))
      return aa_error(AA_ENOMEM, "strategy: out of memory");
  }
  if (ext) {
    if (!json_is_boolean(ext)) return aa_json_fail_type(c, "parallel.moe_extended_tp", "true or false", ext);
    if (json_is_true(ext))
      return aa_json_fail(
          c, AA_EUNSUPPORTED, "parallel.moe_extended_tp",
          "true is not supported by autoaccel (deprecated since Megatron Core 0.10, which ignores "
          "it): give \"expert_tensor_parallel_size\" equal to the tensor degree to split experts over "
          "the tensor ranks, or leave it out");
    json_object_del(par, "moe_extended_tp");
  }
  return 0;
}

/* The names a user of the seed systems writes in a flat config, each read
 * as the v1 field it is or refused with the one to use: Megatron's
 * ModelParallelConfig parallel fields (moved into `parallel`), fp16 and
 * bf16 (amp); Merak's fp16 loss-scale knobs (loss_scaling),
 * activation_checkpointing (checkpoint) and checkpoint_num_layers. r is
 * the caller's copy; names that are aliases of a key (train_schedule, ...)
 * are renamed by rename_aliases after this. */
static int seed_names(const aa_json_ctx_t *c, json_t *r) {
  static const char *const to_parallel[] = {
      "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
      "expert_model_parallel_size", "expert_tensor_parallel_size",  "moe_extended_tp",
      "sequence_parallel"};
  static const char *const loss_knobs[] = {"loss_scale", "initial_scale_power", "loss_scale_window",
                                           "hysteresis", "min_loss_scale"};
  int rc = 0;
  if ((rc = seed_fields(c, r))) return rc;
  for (size_t i = 0; !rc && i < sizeof to_parallel / sizeof to_parallel[0]; i++)
    rc = move_into(c, r, to_parallel[i], "parallel", to_parallel[i]);
  for (size_t i = 0; !rc && i < sizeof loss_knobs / sizeof loss_knobs[0]; i++)
    rc = move_into(c, r, loss_knobs[i], "loss_scaling", loss_knobs[i]);
  if (!rc && json_is_true(json_object_get(r, "fp16")) && json_is_true(json_object_get(r, "bf16")))
    return aa_json_fail(c, AA_EINVAL, "bf16", "true conflicts with fp16 true; give one of them");
  if (!rc) rc = switch_key(c, r, "fp16", "amp", "fp16", NULL);
  if (!rc) rc = switch_key(c, r, "bf16", "amp", "bf16", NULL);
  if (!rc) rc = switch_key(c, r, "activation_checkpointing", "checkpoint", "full", "none");
  json_t *n = json_object_get(r, "checkpoint_num_layers");
  if (rc || !n) return rc;
  /* Merak's chunk of layers recomputed together: 1 is a block at a time,
   * autoaccel's full mode; more keeps only every n-th block's input. */
  if (!json_is_integer(n) || json_integer_value(n) < 1)
    return aa_json_fail(c, AA_EINVAL, "checkpoint_num_layers", "must be an integer >= 1");
  if (json_integer_value(n) != 1)
    return aa_json_fail(
        c, AA_EUNSUPPORTED, "checkpoint_num_layers",
        "%lld is not supported by autoaccel (it recomputes chunks of %lld blocks from one kept "
        "input; autoaccel recomputes one block at a time): give 1, and \"checkpoint_layers\": k "
        "to checkpoint only the first k blocks",
        (long long)json_integer_value(n), (long long)json_integer_value(n));
  const json_t *ck = json_object_get(r, "checkpoint");
  if (!json_is_string(ck) || strcmp(json_string_value(ck), "full"))
    return aa_json_fail(
        c, AA_EINVAL, "checkpoint_num_layers",
        "applies with activation checkpointing only: give \"checkpoint\": \"full\" (or Merak's "
        "\"activation_checkpointing\": true) with it, or leave it out");
  json_object_del(r, "checkpoint_num_layers");
  return 0;
}

/* Other projects' names for a v1 key, read as that key: Megatron's
 * virtual_pipeline_model_parallel_size and micro_batch_size, Merak's
 * partition_method, custom_partition, train_schedule and zero_stage. A
 * file gives a key once, under one of its names. */
static const struct {
  const char *alias, *key;
} key_aliases[] = {{"virtual_pipeline_model_parallel_size", "virtual_stages"},
                   {"partition_method", "partition"},
                   {"custom_partition", "partition"},
                   {"train_schedule", "schedule"},
                   {"zero_stage", "zero"},
                   {"micro_batch_size", "micro_batch"}};

/* A copy of root with the aliases renamed (*out: a new reference), or
 * AA_EINVAL naming both names when a key is given twice. json_copy copies
 * the top object only, so `parallel` is replaced by a copy of its own
 * before its names change: the caller's value is never touched. */
static int rename_aliases(const aa_json_ctx_t *c, const json_t *root, json_t **out) {
  json_t *r = json_deep_copy(root); /* deep: the seeds' names move into sections */
  if (!r) return aa_error(AA_ENOMEM, "strategy: out of memory");
  int src = seed_names(c, r);
  if (src) {
    json_decref(r);
    return src;
  }
  for (size_t i = 0; i < sizeof key_aliases / sizeof key_aliases[0]; i++) {
    json_t *v = json_object_get(r, key_aliases[i].alias);
    if (!v) continue;
    if (json_object_get(r, key_aliases[i].key)) {
      const char *other = key_aliases[i].key;
      for (size_t k = 0; k < i; k++)
        if (strcmp(key_aliases[k].key, key_aliases[i].key) == 0 &&
            json_object_get(root, key_aliases[k].alias))
          other = key_aliases[k].alias;
      json_decref(r);
      return aa_json_fail(c, AA_EINVAL, key_aliases[i].alias, "gives %s again (as \"%s\"); give one of them",
                          key_aliases[i].key, other);
    }
    if (json_object_set(r, key_aliases[i].key, v) || json_object_del(r, key_aliases[i].alias)) {
      json_decref(r);
      return aa_error(AA_ENOMEM, "strategy: out of memory");
    }
  }
  /* In `parallel`, Megatron's ModelParallelConfig name of each axis
   * (common/axis.h: tensor_model_parallel_size, ...) reads as the axis. */
  json_t *par = json_object_get(r, "parallel");
  if (json_is_object(par)) {
    if (!(par = json_deep_copy(par)) || json_object_set_new(r, "parallel", par)) {
      json_decref(r);
      return aa_error(AA_ENOMEM, "strategy: out of memory");
    }
  }
  if (json_is_object(par)) {
    int prc = parallel_seed_names(c, par);
    if (prc) {
      json_decref(r);
      return prc;
    }
  }
  for (int a = 0; json_is_object(par) && a <= 2 * AA_AXES; a++) {
    /* the axes by Megatron's names, by Merak.init's (dp, tp, pp), then
     * Megatron's expert degree, which is no mesh axis */
    const aa_axis_info_t *ax = a < 2 * AA_AXES ? aa_axis_info((aa_axis_t)(a % AA_AXES)) : NULL;
    const char *alias = !ax ? "expert_model_parallel_size" : a < AA_AXES ? ax->megatron : ax->merak;
    const char *key = ax ? ax->name : "expert";
    json_t *v = alias ? json_object_get(par, alias) : NULL;
    if (!v) continue;
    if (json_object_get(par, key)) {
      json_decref(r);
      char path[96];
      snprintf(path, sizeof path, "parallel.%s", alias);
      return aa_json_fail(c, AA_EINVAL, path, "gives parallel.%s again; give one of them", key);
    }
    if (json_object_set(par, key, v) || json_object_del(par, alias)) {
      json_decref(r);
      return aa_error(AA_ENOMEM, "strategy: out of memory");
    }
  }
  *out = r;
  return 0;
}

int aa_strategy_canonical_names(const json_t *root, const char *origin, json_t **out) {
  aa_strategy_t s;
  const aa_json_ctx_t ctx = {.origin = origin && *origin ? origin : "<json>", .data = &s};
  if (!json_is_object(root))
    return aa_error(AA_EINVAL, "%s: a v1 strategy is a JSON object (got %s)", ctx.origin,
                    aa_json_type_name(root));
  return rename_aliases(&ctx, root, out);
}

/* ---- the tables ---------------------------------------------------------- */

#define AT(m) .off = offsetof(aa_strategy_t, m), .size = sizeof(((aa_strategy_t *)0)->m)
#define INT_F(k, lo, hi, m)                                                                                  \
  { .key = k, .kind = AA_JSON_INT, .imin = lo, .imax = hi, AT(m) }
#define F32_F(k, lo, open, m)                                                                                \
  { .key = k, .kind = AA_JSON_NUMBER, .fmin = lo, .fmin_open = open, .fmax = INFINITY, AT(m) }
#define F64_F(k, m)                                                                                          \
  { .key = k, .kind = AA_JSON_NUMBER, .fmax = INFINITY, AT(m) }
#define ENUM_F(k, names_, m)                                                                                 \
  { .key = k, .kind = AA_JSON_ENUM, .names = names_, AT(m) }
#define STR_F(k, rule, m)                                                                                    \
  { .key = k, .kind = AA_JSON_STRING, .check = rule, AT(m) }
#define CUSTOM_F(k, fn, m)                                                                                   \
  { .key = k, .kind = AA_JSON_CUSTOM, .parse = fn, AT(m) }
#define SECTION_F(k, t)                                                                                      \
  { .key = k, .kind = AA_JSON_OBJECT, .sub = t, .nsub = sizeof(t) / sizeof((t)[0]) }
#define KEY_F(k)                                                                                             \
  { .key = k, .kind = AA_JSON_KEY }

/* One degree per axis, in the axis table's order (axis.h). */
#define AXIS_F(id, name, ...) CUSTOM_F(name, read_degree, degree[AA_AXIS_##id]),
static const aa_json_field_t parallel_fields[] = {
    AA_AXIS_LIST(AXIS_F) CUSTOM_F("sequence_parallel", read_sequence_parallel, sp),
    CUSTOM_F("expert", read_expert, ep),
    CUSTOM_F("expert_tensor", read_expert_tensor, etp),
    CUSTOM_F("order", read_order, order),
    CUSTOM_F("rank_order", read_rank_order, nranks),
};

static const aa_json_field_t loss_fields[] = {
    F32_F("loss_scale", 0.0, false, loss_scale.loss_scale),
    INT_F("initial_scale_power", 0, 64, loss_scale.initial_scale_power),
    INT_F("loss_scale_window", 1, INT_MAX, loss_scale.window),
    INT_F("hysteresis", 1, INT_MAX, loss_scale.hysteresis),
    F32_F("min_loss_scale", 0.0, true, loss_scale.min_scale),
};

static const aa_json_field_t provenance_fields[] = {
    STR_F("model", text_rule, model_name),  STR_F("model_hash", hash_rule, model_hash),
    STR_F("hardware", text_rule, hardware), F64_F("tokens_per_s", tokens_per_s),
    F64_F("peak_bytes", peak_bytes),        STR_F("date", date_rule, date),
};

/* Order is the order of a written file, of checks and of error lists. */
const aa_json_field_t aa__strategy_fields[] = {
    KEY_F("format"),
    KEY_F("version"),
    SECTION_F("parallel", parallel_fields),
    INT_F("zero", 0, 3, zero),
    ENUM_F("amp", amp_names, amp),
    SECTION_F("loss_scaling", loss_fields),
    {.key = "skip_if_nonfinite", .kind = AA_JSON_BOOL, AT(skip_if_nonfinite)},
    ENUM_F("checkpoint", ckpt_names, ckpt),
    INT_F("checkpoint_layers", 0, INT_MAX, ckpt_layers),
    INT_F("micro_batch", 0, INT_MAX, micro_batch),
    CUSTOM_F("schedule", read_schedule, schedule),
    CUSTOM_F("virtual_stages", read_virtual_stages, vpp),
    CUSTOM_F("partition", read_partition, partition),
    KEY_F("key"),
    SECTION_F("provenance", provenance_fields),
};

#define NFIELDS(t) (sizeof(t) / sizeof((t)[0]))
const size_t aa__strategy_nfields = NFIELDS(aa__strategy_fields);

/* ---- reading ------------------------------------------------------------- */

/* The v1 object form into *out (when out is not NULL: NULL only checks).
 * format and version are checked before anything else, so that a newer
 * file is reported as newer, not as unknown keys. */
static int parse_object(aa_strategy_t *out, const json_t *root, const char *origin) {
  aa_strategy_t s;
  const aa_json_ctx_t ctx = {.origin = origin, .data = &s}, *c = &ctx;
  const json_t *format = json_object_get(root, "format"), *version = json_object_get(root, "version");
  if (!format)
    return aa_json_fail(c, AA_EINVAL, "format",
                        "required field is missing (a strategy file has \"format\": \"%s\")", FORMAT_NAME);
  if (!json_is_string(format))
    return aa_json_fail_type(c, "format", "the string \"" FORMAT_NAME "\"", format);
  if (strcmp(json_string_value(format), FORMAT_NAME) != 0) {
    char got[256];
    aa_json_sanitize(got, sizeof got, json_string_value(format));
    return aa_json_fail(c, AA_EINVAL, "format", "must be \"%s\" (got \"%s\")", FORMAT_NAME, got);
  }
  if (!version) return aa_json_fail(c, AA_EINVAL, "version", "required field is missing");
  if (!json_is_integer(version)) return aa_json_fail_type(c, "version", "an integer", version);
  long long ver = json_integer_value(version);
  if (ver > AA_STRATEGY_VERSION)
    return aa_json_fail(c, AA_EUNSUPPORTED, "version",
                        "strategy format version %lld is newer than this autoaccel (%d)", ver, AA_STRATEGY_VERSION);
  if (ver < 1) return aa_json_fail(c, AA_EINVAL, "version", "must be >= 1 (got %lld)", ver);

  aa_strategy_default(&s);
  json_t *fields;
  int rc = rename_aliases(c, root, &fields);
  if (rc) return rc;
  rc = aa_json_read_fields(c, fields, "", aa__strategy_fields, aa__strategy_nfields, &s);
  json_decref(fields);
  if (rc) return rc;
  if ((rc = aa__strategy_check(c, &s))) return rc;
  const json_t *key = json_object_get(root, "key");
  if (key) {
    if (!json_is_string(key)) return aa_json_fail_type(c, "key", "a string", key);
    char want[AA_STRATEGY_KEY_MAX], got[256];
    aa_strategy_key(&s, want);
    if (strcmp(json_string_value(key), want) != 0) {
      aa_json_sanitize(got, sizeof got, json_string_value(key));
      return aa_json_fail(c, AA_EINVAL, "key", "\"%s\" does not match the fields, which give \"%s\"", got,
                          want);
    }
  }
  if (out) *out = s;
  return 0;
}

static int parse_buffer(aa_strategy_t *out, const char *buf, size_t len, const char *origin) {
  json_t *root;
  int prc = aa_json_parse_text(buf, len, STRATEGY_MAX_BYTES, origin, "a strategy", "a JSON object or array", &root);
  if (prc) return prc;
  int rc;
  if (json_is_object(root))
    rc = parse_object(out, root, origin);
  else if (json_is_array(root))
    rc = aa__strategy_from_atorch(out, root, origin);
  else
    rc = aa_error(AA_EINVAL,
                  "%s: top level must be a JSON object (v1 strategy) or array (ATorch list) (got %s)", origin,
                  aa_json_type_name(root));
  json_decref(root);
  return rc;
}

int aa_strategy_parse(aa_strategy_t *out, const char *json, const char *origin) {
  return parse_buffer(out, json, strlen(json), origin && *origin ? origin : "<string>");
}

int aa_strategy_load(aa_strategy_t *out, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  int rc = aa_read_file(path, STRATEGY_MAX_BYTES, "a strategy", &buf, &len);
  if (rc) return rc;
  rc = parse_buffer(out, buf, len, path);
  free(buf);
  return rc;
}

/* ---- writing ------------------------------------------------------------- */

/* A number as JSON: integral values as integers (so defaults read as
 * "1000", not "1000.0"); others with jansson's 17 significant digits, which
 * read back to the same double. NULL for inf/nan, which JSON cannot hold. */
static json_t *number(double x) {
  if (!isfinite(x)) return NULL;
  if (x == floor(x) && fabs(x) < 9007199254740992.0) return json_integer((json_int_t)x);
  return json_real(x);
}

/* format, version and key: fixed or derived, never copied from a field. */
static json_t *fixed_value(const char *key, const aa_strategy_t *s) {
  if (strcmp(key, "format") == 0) return json_string(FORMAT_NAME);
  if (strcmp(key, "version") == 0) return json_integer(AA_STRATEGY_VERSION);
  char k[AA_STRATEGY_KEY_MAX];
  aa_strategy_key(s, k);
  return json_string(k);
}

/* One of the pipeline's fields as written (NULL: out of memory); s has
 * passed aa_strategy_check. */
static json_t *emit_pipeline(const aa_json_field_t *f, const aa_strategy_t *s) {
  if (f->parse == read_schedule) return json_string(aa_pp_schedule_name(s->schedule));
  if (f->parse == read_virtual_stages) return json_integer(s->vpp > 1 ? s->vpp : 1);
  if (s->partition != AA_PARTITION_CUSTOM) return json_string(aa_pp_partition_name(s->partition));
  json_t *list = json_array();
  for (int k = 0; list && k < s->n_bounds; k++)
    if (json_array_append_new(list, json_integer(s->bounds[k]))) {
      json_decref(list);
      return NULL;
    }
  return list;
}

/* The schedule, virtual_stages and partition, and
 * parallel.sequence_parallel, parallel.order and parallel.rank_order,
 * these three written only when they are not the defaults, so that files without them
 * round-trip byte for byte. s has passed aa_strategy_check. Sets *v to
 * NULL with 0 to leave the field out. */
static int emit_custom(const aa_json_field_t *f, const aa_strategy_t *s, json_t **v) {
  *v = NULL;
  if (f->parse == read_schedule || f->parse == read_virtual_stages || f->parse == read_partition) {
    /* The schedule always (as before pipelines existed); virtual_stages
     * and partition where there is a pipeline or they are not the
     * defaults, so that a pipeline's file states its cut and other files
     * round-trip byte for byte. */
    bool set = f->parse == read_virtual_stages ? s->vpp > 1 : s->partition != AA_PARTITION_UNIFORM;
    if (f->parse != read_schedule && s->degree[AA_AXIS_PIPELINE] <= 1 && !set) return 0;
    *v = emit_pipeline(f, s);
  } else if (f->parse == read_sequence_parallel) {
    if (s->sp == 0) return 0;
    *v = json_true();
  } else if (f->parse == read_expert) {
    if (s->ep <= 1) return 0;
    *v = json_integer(s->ep);
  } else if (f->parse == read_expert_tensor) {
    if (s->etp <= 1) return 0;
    *v = json_integer(s->etp);
  } else if (f->parse == read_degree) {
    int a = (int)((f->off - offsetof(aa_strategy_t, degree)) / sizeof(int));
    if (!aa_strategy_axis_shown(s, (aa_axis_t)a)) return 0;
    *v = json_integer(s->degree[a]);
  } else if (f->parse == read_order) {
    /* The shown axes only (aa_strategy_axis_shown), and only when they are
     * not in the default's order. */
    aa_axis_t dflt[AA_AXES];
    aa_axis_default_order(dflt);
    char mine[AA_AXES + 1], usual[AA_AXES + 1];
    if (!strcmp(aa_strategy_order_letters(s, s->order, mine), aa_strategy_order_letters(s, dflt, usual)))
      return 0;
    if ((*v = json_array()))
      for (int i = 0; i < AA_AXES; i++)
        if (aa_strategy_axis_shown(s, s->order[i]) &&
            json_array_append_new(*v, json_string(aa_axis_name(s->order[i]))))
          break;
  } else {
    if (s->nranks == 0) return 0;
    if ((*v = json_array()))
      for (int i = 0; i < s->nranks; i++)
        if (json_array_append_new(*v, json_integer(s->rank_order[i]))) break;
  }
  return *v ? 0 : aa_error(AA_ENOMEM, "strategy: out of memory");
}

/* Builds the members of t from s into obj, in table order. Provenance
 * fields that are unknown (empty, 0) are left out, and so is a section
 * left empty. */
static int emit_fields(json_t *obj, const char *section, const aa_json_field_t *t, size_t n,
                       const aa_strategy_t *s) {
  for (size_t i = 0; i < n; i++) {
    const aa_json_field_t *f = &t[i];
    const char *src = (const char *)s + f->off;
    json_t *v = NULL;
    int rc;
    switch (f->kind) {
    case AA_JSON_KEY: v = fixed_value(f->key, s); break;
    case AA_JSON_INT: v = json_integer(*(const int *)src); break;
    case AA_JSON_NUMBER:
      if (f->size == sizeof(float)) {
        v = number(*(const float *)src);
        break;
      }
      if (*(const double *)src == 0.0) continue; /* provenance: 0 = unknown */
      v = number(*(const double *)src);
      break;
    case AA_JSON_BOOL: v = json_boolean(*(const int *)src); break;
    case AA_JSON_ENUM: v = json_string(f->names[*(const int *)src]); break; /* checked: in range */
    case AA_JSON_STRING: {
      size_t len = strnlen(src, f->size);
      if (len == 0) continue;
      v = json_stringn(src, len);
      break;
    }
    case AA_JSON_CUSTOM:
      if ((rc = emit_custom(f, s, &v))) return rc;
      if (!v) continue;
      break;
    case AA_JSON_OBJECT: {
      char path[160];
      snprintf(path, sizeof path, "%s%s%s", section, *section ? "." : "", f->key);
      if (!(v = json_object())) return aa_error(AA_ENOMEM, "strategy: out of memory");
      rc = emit_fields(v, path, f->sub, f->nsub, s);
      if (rc || json_object_size(v) == 0) {
        json_decref(v);
        if (rc) return rc;
        continue;
      }
      break;
    }
    }
    /* The values passed aa_strategy_check (finite numbers, UTF-8 text), so
     * a value jansson cannot make is a failed allocation. */
    if (!v || json_object_set_new(obj, f->key, v)) return aa_error(AA_ENOMEM, "strategy: out of memory");
  }
  return 0;
}

/* Builds the v1 object for s once it passed aa_strategy_check, so nothing
 * is written that would not load back. *out (a new reference) is set only
 * on success. */
static int build_checked(const aa_strategy_t *s, json_t **out) {
  int rc = aa_strategy_check(s);
  if (rc) return rc;
  json_t *root = json_object();
  if (!root) return aa_error(AA_ENOMEM, "strategy: out of memory");
  if ((rc = emit_fields(root, "", aa__strategy_fields, aa__strategy_nfields, s))) {
    json_decref(root);
    return rc;
  }
  *out = root;
  return 0;
}

int aa_strategy_to_json(const aa_strategy_t *s, char **out) {
  json_t *root;
  int rc = build_checked(s, &root);
  if (rc) return rc;
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  size_t n = text ? strlen(text) : 0;
  char *line = text ? realloc(text, n + 2) : NULL; /* files end with a newline */
  if (!line) {
    free(text);
    return aa_error(AA_ENOMEM, "strategy: out of memory");
  }
  memcpy(line + n, "\n", 2);
  *out = line;
  return 0;
}

/* The one writer of strategy files: s as JSON to `path`, or to `name` in
 * the directory open as dirfd when path is NULL. */
static int save(const aa_strategy_t *s, const char *path, int dirfd, const char *name, int mode) {
  char *text;
  int rc = aa_strategy_to_json(s, &text);
  if (rc) return rc;
  /* A fresh temporary + fsync + rename (common/file.h): a reader sees the
   * old file or the new one, never half of one, even across a crash; and a
   * symlink planted in the directory is never written through. */
  aa_wfile_t w;
  if (!(rc = path ? aa_wfile_open(&w, path, mode) : aa_wfile_openat(&w, dirfd, name, mode))) {
    size_t n = strlen(text);
    if (fwrite(text, 1, n, w.f) != n)
      rc = aa_error(AA_EIO, "%s: write failed: %s", w.path, strerror(errno));
    else rc = aa_wfile_commit(&w);
  }
  aa_wfile_abort(&w);
  free(text);
  return rc;
}

int aa_strategy_save(const aa_strategy_t *s, const char *path) { return save(s, path, -1, NULL, 0666); }

int aa_strategy_save_at(const aa_strategy_t *s, int dirfd, const char *name, int mode) {
  return save(s, NULL, dirfd, name, mode);
}
