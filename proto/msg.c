/* Message encode/decode, driven by one field table per message type: each
 * entry names the key, its kind, whether it is required, its range or
 * length cap, and where it lives in the C struct. The encoder and the
 * decoder walk the same tables through the same check functions, so what
 * one side may send is exactly what the other accepts. */
#include "msg.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto_internal.h"

typedef enum { K_U64, K_INT, K_F64, K_BOOL, K_STR, K_ENUM, K_LIST, K_MAP, K_BIN } kind_t;

typedef struct table table_t;

typedef struct field {
  const char *key;
  kind_t kind;
  bool required;
  size_t off;               /* of the value in the struct */
  ptrdiff_t has;            /* of a bool presence flag, or -1: then zero / NULL / empty = absent */
  uint64_t umin, umax;      /* K_U64 */
  int64_t imin, imax;       /* K_INT */
  double dmin, dmax;        /* K_F64 (always also finite) */
  size_t smin, smax;        /* K_STR, K_BIN: bytes; K_LIST: entries */
  size_t item_max;          /* K_LIST: each entry is 1..item_max bytes */
  const char *const *names; /* K_ENUM: wire names, index = C value */
  int n_names;
  const table_t *sub; /* K_MAP */
} field_t;

struct table {
  const char *name;
  const field_t *f;
  int n;
  /* Rules between fields, run after a decode and before an encode. */
  int (*check)(const void *st, const char *path);
};

#define F_U64(st, m, req, lo, hi)                                                                            \
  { .key = #m, .kind = K_U64, .required = req, .off = offsetof(st, m), .has = -1, .umin = lo, .umax = hi }
#define F_U64_HAS(st, m, hasm, lo, hi)                                                                       \
  { .key = #m, .kind = K_U64, .off = offsetof(st, m), .has = offsetof(st, hasm), .umin = lo, .umax = hi }
#define F_INT(st, m, req, lo, hi)                                                                            \
  { .key = #m, .kind = K_INT, .required = req, .off = offsetof(st, m), .has = -1, .imin = lo, .imax = hi }
#define F_F64(st, m, req, lo, hi)                                                                            \
  { .key = #m, .kind = K_F64, .required = req, .off = offsetof(st, m), .has = -1, .dmin = lo, .dmax = hi }
#define F_F64_HAS(st, m, hasm, lo, hi)                                                                       \
  { .key = #m, .kind = K_F64, .off = offsetof(st, m), .has = offsetof(st, hasm), .dmin = lo, .dmax = hi }
#define F_BOOL(st, m)                                                                                        \
  { .key = #m, .kind = K_BOOL, .off = offsetof(st, m), .has = -1 }
#define F_STR(st, m, req, lo, hi)                                                                            \
  { .key = #m, .kind = K_STR, .required = req, .off = offsetof(st, m), .has = -1, .smin = lo, .smax = hi }
#define F_ENUM(st, m, nm)                                                                                    \
  {                                                                                                          \
    .key = #m, .kind = K_ENUM, .required = true, .off = offsetof(st, m), .has = -1, .names = nm,             \
    .n_names = (int)(sizeof nm / sizeof nm[0])                                                               \
  }
#define F_LIST(st, m, maxn, itemmax)                                                                         \
  { .key = #m, .kind = K_LIST, .off = offsetof(st, m), .has = -1, .smax = maxn, .item_max = itemmax }
#define F_MAP(st, m, sb)                                                                                     \
  { .key = #m, .kind = K_MAP, .required = true, .off = offsetof(st, m), .has = -1, .sub = sb }
#define F_MAP_HAS(st, m, hasm, sb)                                                                           \
  { .key = #m, .kind = K_MAP, .off = offsetof(st, m), .has = offsetof(st, hasm), .sub = sb }
#define F_BIN(st, m, lo, hi)                                                                                 \
  { .key = #m, .kind = K_BIN, .required = true, .off = offsetof(st, m), .has = -1, .smin = lo, .smax = hi }
#define TABLE(nm, arr, chk)                                                                                  \
  { .name = nm, .f = arr, .n = (int)(sizeof arr / sizeof arr[0]), .check = chk }

#define ID_HI ((uint64_t)AA_PROTO_ID_MAX)
#define BYTES_HI ((uint64_t)AA_PROTO_BYTES_MAX)

static const char *const role_names[] = {"executor", "client"};
static const char *const dev_names[] = {"cpu", "cuda"};
static const char *const job_kind_names[] = {"dryrun", "train", "calibrate"};
static const char *const status_names[] = {"ok", "oom", "error", "timeout", "crashed", "cancelled"};

static int bad(const char *path, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(const char *path, const char *key, const char *fmt, ...) {
  char rule[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rule, sizeof rule, fmt, ap);
  va_end(ap);
  return aa_error(AA_EFORMAT, "%s.%s: %s", path, key, rule);
}

/* --- rules between fields --------------------------------------------- */

static int device_check(const void *st, const char *path) {
  const aa_msg_device_t *d = st;
  int any = d->sm_count || d->cc_major || d->cc_minor || d->peak_bf16_flops != 0;
  if (d->kind == AA_PROTO_DEV_CUDA && !(d->sm_count && d->cc_major))
    return aa_error(AA_EFORMAT, "%s: a cuda device needs sm_count and cc_major", path);
  if (d->kind == AA_PROTO_DEV_CPU && any)
    return aa_error(AA_EFORMAT,
                    "%s: a cpu device must not carry sm_count, cc_major, cc_minor or peak_bf16_flops", path);
  return 0;
}

static int hello_check(const void *st, const char *path) {
  const aa_msg_hello_t *h = st;
  if (h->role == AA_PROTO_ROLE_EXECUTOR && !h->has_device)
    return aa_error(AA_EFORMAT, "%s: an executor must describe its device", path);
  if (h->role == AA_PROTO_ROLE_CLIENT && h->has_device)
    return aa_error(AA_EFORMAT, "%s: a client has no device", path);
  return 0;
}

static int job_check(const void *st, const char *path) {
  const aa_msg_job_t *j = st;
  if (j->rank >= j->world)
    return aa_error(AA_EFORMAT, "%s: rank %d must be below world %d", path, j->rank, j->world);
  /* The ranks of a gang build their process group from the rendezvous alone. */
  if (j->world > 1 && !j->rendezvous)
    return aa_error(AA_EFORMAT, "%s: world %d needs a rendezvous", path, j->world);
  return 0;
}

static int progress_check(const void *st, const char *path) {
  const aa_msg_progress_t *p = st;
  if (p->index > p->count)
    return aa_error(AA_EFORMAT, "%s: index %llu is past count %llu", path, (unsigned long long)p->index,
                    (unsigned long long)p->count);
  if (p->step > p->total)
    return aa_error(AA_EFORMAT, "%s: step %llu is past total %llu", path, (unsigned long long)p->step,
                    (unsigned long long)p->total);
  return 0;
}

/* A store key is a name the ranks agree on, never text a human reads:
 * a small character set keeps it safe to log and to use in a path. */
static int kv_check(const void *st, const char *path) {
  const aa_msg_kv_t *kv = st;
  for (const char *k = kv->key; *k; k++)
    if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') || *k == '_' ||
          *k == '.' || *k == '/' || *k == '-'))
      return aa_error(AA_EFORMAT, "%s.key: byte 0x%02x at %zu is not one of [A-Za-z0-9_./-]", path,
                      (unsigned)(unsigned char)*k, (size_t)(k - kv->key));
  return 0;
}

/* --- tables -------------------------------------------------------------- */

static const field_t device_f[] = {
    F_ENUM(aa_msg_device_t, kind, dev_names),
    F_STR(aa_msg_device_t, name, true, 1, AA_PROTO_NAME_MAX),
    F_INT(aa_msg_device_t, index, true, 0, AA_PROTO_DEVICE_INDEX_MAX),
    F_U64(aa_msg_device_t, memory, true, 1, (uint64_t)AA_PROTO_BYTES_MAX),
    F_STR(aa_msg_device_t, host, true, 1, AA_PROTO_NAME_MAX),
    F_INT(aa_msg_device_t, pid, true, 1, INT32_MAX),
    F_INT(aa_msg_device_t, sm_count, false, 1, 65535),
    F_INT(aa_msg_device_t, cc_major, false, 1, 99),
    F_INT(aa_msg_device_t, cc_minor, false, 0, 99),
    F_F64(aa_msg_device_t, peak_bf16_flops, false, 1, 1e20),
};
static const table_t device_t = TABLE("device", device_f, device_check);

static const field_t peak_f[] = {
    F_U64(aa_msg_peak_t, params, true, 0, BYTES_HI),    F_U64(aa_msg_peak_t, grads, true, 0, BYTES_HI),
    F_U64(aa_msg_peak_t, optim, true, 0, BYTES_HI),     F_U64(aa_msg_peak_t, acts, true, 0, BYTES_HI),
    F_U64(aa_msg_peak_t, workspace, true, 0, BYTES_HI), F_U64(aa_msg_peak_t, total, true, 0, BYTES_HI),
};
static const table_t peak_t = TABLE("peak", peak_f, NULL);

/* Keys in aa_proto_time_kind_t order; aa_proto_time_kind_name reads them here. */
#define F_TIME(name, k)                                                                                      \
  {                                                                                                          \
    .key = name, .kind = K_F64, .required = true,                                                            \
    .off = offsetof(aa_msg_times_t, ms) + (size_t)(k) * sizeof(double), .has = -1, .dmin = 0, .dmax = 1e9    \
  }
static const field_t times_f[AA_PROTO_TIME_KINDS] = {
    F_TIME("forward", AA_PROTO_TIME_FORWARD),
    F_TIME("backward", AA_PROTO_TIME_BACKWARD),
    F_TIME("optimizer", AA_PROTO_TIME_OPTIMIZER),
    F_TIME("pipeline_comm", AA_PROTO_TIME_PIPELINE_COMM),
    F_TIME("bubble", AA_PROTO_TIME_BUBBLE),
    {.key = "all_to_all", /* optional (msg.h), so not F_TIME */
     .kind = K_F64,
     .off = offsetof(aa_msg_times_t, ms) + (size_t)AA_PROTO_TIME_ALL_TO_ALL * sizeof(double),
     .has = -1,
     .dmin = 0,
     .dmax = 1e9},
};
static const table_t times_t = TABLE("times", times_f, NULL);

const char *aa_proto_time_kind_name(aa_proto_time_kind_t k) {
  return (unsigned)k < AA_PROTO_TIME_KINDS ? times_f[k].key : "?";
}

static const field_t hello_f[] = {
    F_ENUM(aa_msg_hello_t, role, role_names),
    F_MAP_HAS(aa_msg_hello_t, device, has_device, &device_t),
    F_STR(aa_msg_hello_t, token, false, 1, AA_PROTO_NAME_MAX),
};
static const field_t welcome_f[] = {
    F_U64(aa_msg_welcome_t, peer_id, true, 1, ID_HI),
    F_INT(aa_msg_welcome_t, heartbeat_ms, true, 100, 3600000),
};
static const field_t heartbeat_f[] = {F_U64(aa_msg_heartbeat_t, job, false, 1, ID_HI)};
static const field_t bye_f[] = {F_STR(aa_msg_bye_t, reason, false, 0, AA_PROTO_TEXT_MAX)};
static const field_t submit_f[] = {
    F_STR(aa_msg_submit_t, model, true, 1, AA_PROTO_JSON_MAX),
    F_BOOL(aa_msg_submit_t, wait),
    F_BOOL(aa_msg_submit_t, train),
    F_BOOL(aa_msg_submit_t, refresh),
    F_INT(aa_msg_submit_t, time_limit_s, false, 0, AA_PROTO_TIME_LIMIT_MAX),
    F_LIST(aa_msg_submit_t, exclude, AA_PROTO_EXCLUDE_MAX, AA_PROTO_METHOD_MAX),
    F_INT(aa_msg_submit_t, max_dryruns, false, 0, 1000000),
    F_BOOL(aa_msg_submit_t, exhaustive),
    F_STR(aa_msg_submit_t, out_dir, false, 1, AA_PROTO_PATH_MAX),
    F_LIST(aa_msg_submit_t, include, AA_PROTO_EXCLUDE_MAX, AA_PROTO_METHOD_MAX),
    F_STR(aa_msg_submit_t, from, false, 1, AA_PROTO_JSON_MAX),
};
static const field_t ack_f[] = {F_U64(aa_msg_ack_t, job, false, 1, ID_HI)};
static const field_t job_f[] = {
    F_U64(aa_msg_job_t, job, true, 1, ID_HI),
    F_U64(aa_msg_job_t, run, true, 1, ID_HI),
    F_ENUM(aa_msg_job_t, kind, job_kind_names),
    F_STR(aa_msg_job_t, model, true, 1, AA_PROTO_JSON_MAX),
    F_STR(aa_msg_job_t, strategy, true, 1, AA_PROTO_JSON_MAX),
    F_U64(aa_msg_job_t, warmup_steps, true, 0, AA_PROTO_STEPS_MAX),
    F_U64(aa_msg_job_t, measured_steps, true, 1, AA_PROTO_STEPS_MAX),
    F_INT(aa_msg_job_t, time_limit_s, true, 0, AA_PROTO_TIME_LIMIT_MAX),
    F_U64(aa_msg_job_t, memory_limit, true, 0, BYTES_HI),
    F_INT(aa_msg_job_t, rank, true, 0, AA_PROTO_WORLD_MAX - 1),
    F_INT(aa_msg_job_t, world, true, 1, AA_PROTO_WORLD_MAX),
    F_STR(aa_msg_job_t, rendezvous, false, 1, AA_PROTO_NAME_MAX),
    F_STR(aa_msg_job_t, out_dir, false, 1, AA_PROTO_PATH_MAX),
    F_U64_HAS(aa_msg_job_t, owner, has_owner, 0, UINT32_MAX - 1),
};
static const field_t progress_f[] = {
    F_U64(aa_msg_progress_t, job, true, 1, ID_HI),
    F_U64(aa_msg_progress_t, run, true, 1, ID_HI),
    F_U64(aa_msg_progress_t, step, true, 0, AA_PROTO_STEPS_MAX),
    F_U64(aa_msg_progress_t, total, true, 1, AA_PROTO_STEPS_MAX),
    F_F64(aa_msg_progress_t, tokens_per_s, true, 0, 1e12),
    F_F64(aa_msg_progress_t, loss, true, -DBL_MAX, DBL_MAX),
    F_STR(aa_msg_progress_t, phase, true, 1, AA_PROTO_PHASE_MAX),
    F_STR(aa_msg_progress_t, key, false, 1, AA_PROTO_KEY_MAX),
    F_U64(aa_msg_progress_t, index, false, 0, AA_PROTO_STEPS_MAX),
    F_U64(aa_msg_progress_t, count, false, 0, AA_PROTO_STEPS_MAX),
};
static const field_t result_f[] = {
    F_U64(aa_msg_result_t, job, true, 1, ID_HI),
    F_U64(aa_msg_result_t, run, true, 1, ID_HI),
    F_ENUM(aa_msg_result_t, status, status_names),
    F_F64(aa_msg_result_t, tokens_per_s, true, 0, 1e12),
    F_F64(aa_msg_result_t, step_ms_median, true, 0, 1e9),
    F_F64(aa_msg_result_t, step_ms_spread, true, 0, 1e9),
    F_MAP(aa_msg_result_t, peak, &peak_t),
    F_F64_HAS(aa_msg_result_t, final_loss, has_final_loss, -DBL_MAX, DBL_MAX),
    F_STR(aa_msg_result_t, error, false, 0, AA_PROTO_TEXT_MAX),
    F_STR(aa_msg_result_t, key, false, 1, AA_PROTO_KEY_MAX),
    F_BOOL(aa_msg_result_t, inputs),
    F_INT(aa_msg_result_t, rank, false, 0, AA_PROTO_WORLD_MAX - 1),
/* One coordinate per axis, "dp_rank", "tp_rank", ... (common/axis.h). */
#define COORD_F(id, name_, key_, ...)                                                                        \
  {.key = key_ "_rank",                                                                                      \
   .kind = K_INT,                                                                                            \
   .off = offsetof(aa_msg_result_t, coord[AA_AXIS_##id]),                                                    \
   .has = -1,                                                                                                \
   .imin = 0,                                                                                                \
   .imax = AA_PROTO_WORLD_MAX - 1},
    AA_AXIS_LIST(COORD_F)
#undef COORD_F
        F_MAP_HAS(aa_msg_result_t, times, has_times, &times_t),
    F_STR(aa_msg_result_t, calib, false, 1, AA_PROTO_JSON_MAX),
    F_F64_HAS(aa_msg_result_t, moe_max_tokens, has_moe_max_tokens, 0, 2147483648.0),
};
static const field_t cancel_f[] = {F_U64(aa_msg_cancel_t, job, true, 1, ID_HI)};
static const field_t abort_f[] = {
    F_U64(aa_msg_abort_t, job, true, 1, ID_HI),
    F_U64(aa_msg_abort_t, run, true, 1, ID_HI),
    F_STR(aa_msg_abort_t, reason, false, 0, AA_PROTO_TEXT_MAX),
};
static const field_t status_f[] = {F_U64(aa_msg_status_t, job, false, 1, ID_HI)};
static const field_t query_f[] = {
    F_STR(aa_msg_query_t, what, true, 1, AA_PROTO_NAME_MAX),
    F_STR(aa_msg_query_t, args, false, 1, AA_PROTO_JSON_MAX),
};
static const field_t reply_f[] = {F_STR(aa_msg_reply_t, json, true, 1, AA_PROTO_JSON_MAX)};
static const field_t error_f[] = {
    F_INT(aa_msg_error_t, code, true, -1000, -1),
    F_STR(aa_msg_error_t, message, true, 1, AA_PROTO_TEXT_MAX),
};

static const field_t kv_set_f[] = {
    F_U64(aa_msg_kv_t, run, true, 1, ID_HI),
    F_STR(aa_msg_kv_t, key, true, 1, AA_PROTO_KV_KEY_MAX),
    F_BIN(aa_msg_kv_t, value, 0, AA_PROTO_KV_VALUE_MAX),
};
static const field_t kv_get_f[] = {
    F_U64(aa_msg_kv_t, run, true, 1, ID_HI),
    F_STR(aa_msg_kv_t, key, true, 1, AA_PROTO_KV_KEY_MAX),
};

static const field_t calib_import_f[] = {
    F_STR(aa_msg_calib_import_t, json, true, 1, AA_PROTO_CALIB_FILE_MAX),
    F_BOOL(aa_msg_calib_import_t, force),
};

static const table_t msg_tables[AA_MSG_TYPE_COUNT] = {
    [AA_MSG_HELLO] = TABLE("hello", hello_f, hello_check),
    [AA_MSG_WELCOME] = TABLE("welcome", welcome_f, NULL),
    [AA_MSG_HEARTBEAT] = TABLE("heartbeat", heartbeat_f, NULL),
    [AA_MSG_BYE] = TABLE("bye", bye_f, NULL),
    [AA_MSG_SUBMIT] = TABLE("submit", submit_f, NULL),
    [AA_MSG_ACK] = TABLE("ack", ack_f, NULL),
    [AA_MSG_JOB] = TABLE("job", job_f, job_check),
    [AA_MSG_PROGRESS] = TABLE("progress", progress_f, progress_check),
    [AA_MSG_RESULT] = TABLE("result", result_f, NULL),
    [AA_MSG_CANCEL] = TABLE("cancel", cancel_f, NULL),
    [AA_MSG_ABORT] = TABLE("abort", abort_f, NULL),
    [AA_MSG_STATUS] = TABLE("status", status_f, NULL),
    [AA_MSG_QUERY] = TABLE("query", query_f, NULL),
    [AA_MSG_REPLY] = TABLE("reply", reply_f, NULL),
    [AA_MSG_ERROR] = TABLE("error", error_f, NULL),
    [AA_MSG_KV_SET] = TABLE("kv_set", kv_set_f, kv_check),
    [AA_MSG_KV_GET] = TABLE("kv_get", kv_get_f, kv_check),
    [AA_MSG_KV_VALUE] = TABLE("kv_value", kv_set_f, kv_check),
    [AA_MSG_CALIB_IMPORT] = TABLE("calib_import", calib_import_f, NULL),
};

const char *aa_msg_type_name(aa_msg_type_t t) {
  return t > AA_MSG_NONE && t < AA_MSG_TYPE_COUNT ? msg_tables[t].name : "?";
}

/* --- shared value checks ------------------------------------------------- */

static int check_u64(const char *path, const field_t *f, uint64_t v) {
  if (v < f->umin || v > f->umax)
    return bad(path, f->key, "%llu is outside %llu..%llu", (unsigned long long)v, (unsigned long long)f->umin,
               (unsigned long long)f->umax);
  return 0;
}

static int check_int(const char *path, const field_t *f, int64_t v) {
  if (v < f->imin || v > f->imax)
    return bad(path, f->key, "%lld is outside %lld..%lld", (long long)v, (long long)f->imin,
               (long long)f->imax);
  return 0;
}

static int check_f64(const char *path, const field_t *f, double v) {
  if (!isfinite(v)) return bad(path, f->key, "must be a finite number");
  if (v < f->dmin || v > f->dmax) return bad(path, f->key, "%g is outside %g..%g", v, f->dmin, f->dmax);
  return 0;
}

/* A string of n bytes (s may hold a NUL: wire strings are counted). */
static int check_str(const char *path, const char *key, const char *s, size_t n, size_t lo, size_t hi) {
  if (n > hi) return bad(path, key, "%zu bytes, longer than the limit %zu", n, hi);
  if (n < lo) return bad(path, key, "must not be empty");
  if (memchr(s, '\0', n)) return bad(path, key, "contains a NUL byte");
  if (!aa__utf8_valid((const unsigned char *)s, n)) return bad(path, key, "is not valid UTF-8");
  return 0;
}

/* --- encode -------------------------------------------------------------- */

static bool is_present(const field_t *f, const void *st) {
  const char *p = (const char *)st + f->off;
  if (f->required) return true;
  if (f->has >= 0) return *(const bool *)((const char *)st + f->has);
  switch (f->kind) {
  case K_U64: return *(const uint64_t *)p != 0;
  case K_INT: return *(const int *)p != 0;
  case K_F64: return *(const double *)p != 0;
  case K_BOOL: return *(const bool *)p;
  case K_STR: return *(char *const *)p != NULL;
  case K_LIST: return ((const aa_msg_strlist_t *)p)->n != 0;
  case K_ENUM:
  case K_MAP:
  case K_BIN: return true;
  }
  return true;
}

static int validate(const table_t *t, const void *st, const char *path) {
  for (int i = 0; i < t->n; i++) {
    const field_t *f = &t->f[i];
    const char *p = (const char *)st + f->off;
    int rc = 0;
    if (!is_present(f, st)) continue;
    switch (f->kind) {
    case K_U64: rc = check_u64(path, f, *(const uint64_t *)p); break;
    case K_INT: rc = check_int(path, f, *(const int *)p); break;
    case K_F64: rc = check_f64(path, f, *(const double *)p); break;
    case K_BOOL: break;
    case K_STR: {
      const char *s = *(char *const *)p;
      if (!s) return aa_error(AA_EFORMAT, "%s: missing required field \"%s\"", path, f->key);
      rc = check_str(path, f->key, s, strlen(s), f->smin, f->smax);
      break;
    }
    case K_ENUM: {
      int v = *(const int *)p;
      if (v < 0 || v >= f->n_names) rc = bad(path, f->key, "enum value %d is not defined", v);
      break;
    }
    case K_LIST: {
      const aa_msg_strlist_t *l = (const aa_msg_strlist_t *)p;
      if (l->n > f->smax) return bad(path, f->key, "%zu entries, more than the limit %zu", l->n, f->smax);
      for (size_t j = 0; j < l->n && !rc; j++) {
        char key[64];
        snprintf(key, sizeof key, "%s[%zu]", f->key, j);
        if (!l->v[j]) return bad(path, key, "entry is NULL");
        rc = check_str(path, key, l->v[j], strlen(l->v[j]), 1, f->item_max);
      }
      break;
    }
    case K_MAP: {
      char sub[128];
      snprintf(sub, sizeof sub, "%s.%s", path, f->key);
      rc = validate(f->sub, p, sub);
      break;
    }
    case K_BIN: {
      const aa_msg_bin_t *b = (const aa_msg_bin_t *)p;
      if (b->n > f->smax)
        rc = bad(path, f->key, "%zu bytes, longer than the limit %zu", b->n, f->smax);
      else if (b->n < f->smin)
        rc = bad(path, f->key, "must not be empty");
      else if (b->n && !b->p)
        rc = bad(path, f->key, "%zu bytes at NULL", b->n);
      break;
    }
    }
    if (rc) return rc;
  }
  return t->check ? t->check(st, path) : 0;
}

static int pack_cstr(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s, n);
}

/* Packs the present fields of a validated struct as one map, plus the
 * envelope when env is given. Returns nonzero when msgpack-c failed to
 * grow its buffer. */
static int pack_map(msgpack_packer *pk, const table_t *t, const void *st, const aa_msg_t *env) {
  size_t n = 0;
  int rc = 0;
  for (int i = 0; i < t->n; i++)
    n += is_present(&t->f[i], st);
  if (env) n += 2 + (env->id != 0);
  rc |= msgpack_pack_map(pk, n);
  if (env) {
    rc |= pack_cstr(pk, "v") || msgpack_pack_uint64(pk, AA_PROTO_VERSION);
    rc |= pack_cstr(pk, "t") || pack_cstr(pk, t->name);
    if (env->id) rc |= pack_cstr(pk, "id") || msgpack_pack_uint64(pk, env->id);
  }
  for (int i = 0; i < t->n && !rc; i++) {
    const field_t *f = &t->f[i];
    const char *p = (const char *)st + f->off;
    if (!is_present(f, st)) continue;
    rc |= pack_cstr(pk, f->key);
    switch (f->kind) {
    case K_U64: rc |= msgpack_pack_uint64(pk, *(const uint64_t *)p); break;
    case K_INT: rc |= msgpack_pack_int64(pk, *(const int *)p); break;
    case K_F64: rc |= msgpack_pack_double(pk, *(const double *)p); break;
    case K_BOOL: rc |= *(const bool *)p ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
    case K_STR: rc |= pack_cstr(pk, *(char *const *)p); break;
    case K_ENUM: rc |= pack_cstr(pk, f->names[*(const int *)p]); break;
    case K_LIST: {
      const aa_msg_strlist_t *l = (const aa_msg_strlist_t *)p;
      rc |= msgpack_pack_array(pk, l->n);
      for (size_t j = 0; j < l->n; j++)
        rc |= pack_cstr(pk, l->v[j]);
      break;
    }
    case K_MAP: rc |= pack_map(pk, f->sub, p, NULL); break;
    case K_BIN: {
      const aa_msg_bin_t *b = (const aa_msg_bin_t *)p;
      rc |= msgpack_pack_bin(pk, b->n) || (b->n && msgpack_pack_bin_body(pk, b->p, b->n));
      break;
    }
    }
  }
  return rc;
}

int aa_msg_encode(const aa_msg_t *m, char **out, size_t *out_len) {
  if (m->type <= AA_MSG_NONE || m->type >= AA_MSG_TYPE_COUNT)
    return aa_error(AA_EINVAL, "cannot encode message type %d", (int)m->type);
  const table_t *t = &msg_tables[m->type];
  if (m->id > AA_PROTO_ID_MAX)
    return aa_error(AA_EINVAL, "%s.id: %llu is outside 1..%lld", t->name, (unsigned long long)m->id,
                    (long long)AA_PROTO_ID_MAX);
  int rc = validate(t, &m->hello, t->name);
  if (rc) return rc == AA_EFORMAT ? AA_EINVAL : rc;

  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  static const char hdr0[AA_FRAME_HEADER] = {0};
  if (msgpack_sbuffer_write(&sb, hdr0, sizeof hdr0) || pack_map(&pk, t, &m->hello, m)) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory while encoding", t->name);
    goto cleanup;
  }
  size_t payload = sb.size - AA_FRAME_HEADER;
  if (payload > AA_FRAME_MAX) {
    rc = aa_error(AA_EINVAL, "%s: encoded message of %zu bytes exceeds the frame maximum %u", t->name,
                  payload, AA_FRAME_MAX);
    goto cleanup;
  }
  aa_frame_put_header((unsigned char *)sb.data, (uint32_t)payload);
  *out_len = sb.size;
  /* The buffer grew in steps from 8 KiB: give back what the frame does not
   * use, since a sender may hold many frames queued (a 200-byte reply kept
   * 8 KiB, so a peer that did not read made the planner hold 40 times more
   * than its queue bound counted). */
  char *data = msgpack_sbuffer_release(&sb), *fit = realloc(data, *out_len);
  *out = fit ? fit : data;
cleanup:
  msgpack_sbuffer_destroy(&sb);
  return rc;
}

/* --- decode -------------------------------------------------------------- */

static const char *obj_type_name(const msgpack_object *o) {
  switch (o->type) {
  case MSGPACK_OBJECT_NIL: return "nil";
  case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
  case MSGPACK_OBJECT_POSITIVE_INTEGER: return "an unsigned integer";
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "a negative integer";
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: return "a float";
  case MSGPACK_OBJECT_STR: return "a string";
  case MSGPACK_OBJECT_ARRAY: return "an array";
  case MSGPACK_OBJECT_MAP: return "a map";
  case MSGPACK_OBJECT_BIN: return "binary";
  case MSGPACK_OBJECT_EXT: return "an ext value";
  }
  return "an unknown value";
}

static int wrong_type(const char *path, const char *key, const char *want, const msgpack_object *o) {
  return bad(path, key, "expected %s, got %s", want, obj_type_name(o));
}

static int key_is(const msgpack_object *k, const char *s) {
  size_t n = strlen(s);
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
}

/* Copies a checked wire string into a new NUL-terminated buffer. */
static int dup_str(const char *path, const char *key, const msgpack_object *o, size_t lo, size_t hi,
                   char **out) {
  if (o->type != MSGPACK_OBJECT_STR) return wrong_type(path, key, "a string", o);
  int rc = check_str(path, key, o->via.str.ptr, o->via.str.size, lo, hi);
  if (rc) return rc;
  char *s = malloc((size_t)o->via.str.size + 1);
  if (!s) return aa_error(AA_ENOMEM, "%s.%s: out of memory", path, key);
  memcpy(s, o->via.str.ptr, o->via.str.size);
  s[o->via.str.size] = '\0';
  *out = s;
  return 0;
}

static int decode_u64(const char *path, const char *key, const field_t *f, const msgpack_object *o,
                      uint64_t *v) {
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    return bad(path, key, "%lld is outside %llu..%llu", (long long)o->via.i64, (unsigned long long)f->umin,
               (unsigned long long)f->umax);
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return wrong_type(path, key, "an unsigned integer", o);
  int rc = check_u64(path, f, o->via.u64);
  if (!rc) *v = o->via.u64;
  return rc;
}


static int decode_map(const table_t *t, const msgpack_object *o, void *st, const char *path, aa_msg_t *env);

static int decode_field(const field_t *f, const msgpack_object *o, void *st, const char *path) {
  char *p = (char *)st + f->off;
  switch (f->kind) {
  case K_U64: return decode_u64(path, f->key, f, o, (uint64_t *)p);
  case K_INT: {
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 > (uint64_t)INT64_MAX)
      return bad(path, f->key, "%llu is outside %lld..%lld", (unsigned long long)o->via.u64,
                 (long long)f->imin, (long long)f->imax);
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      v = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
      v = o->via.i64;
    else
      return wrong_type(path, f->key, "an integer", o);
    int rc = check_int(path, f, v);
    if (!rc) *(int *)p = (int)v;
    return rc;
  }
  case K_F64: {
    double v;
    /* Integers are accepted for numbers, as in the JSON files. */
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
      v = o->via.f64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      v = (double)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
      v = (double)o->via.i64;
    else
      return wrong_type(path, f->key, "a number", o);
    int rc = check_f64(path, f, v);
    if (!rc) *(double *)p = v;
    return rc;
  }
  case K_BOOL:
    if (o->type != MSGPACK_OBJECT_BOOLEAN) return wrong_type(path, f->key, "a boolean", o);
    *(bool *)p = o->via.boolean;
    return 0;
  case K_STR: return dup_str(path, f->key, o, f->smin, f->smax, (char **)p);
  case K_ENUM: {
    if (o->type != MSGPACK_OBJECT_STR) return wrong_type(path, f->key, "a string", o);
    for (int i = 0; i < f->n_names; i++)
      if (key_is(o, f->names[i])) {
        *(int *)p = i;
        return 0;
      }
    char got[AA__SANITIZE_CAP], allowed[128] = "";
    aa__proto_sanitize(got, o->via.str.ptr, o->via.str.size);
    for (int i = 0; i < f->n_names; i++)
      snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s", i ? ", " : "",
               f->names[i]);
    return bad(path, f->key, "\"%s\" is not one of %s", got, allowed);
  }
  case K_LIST: {
    aa_msg_strlist_t *l = (aa_msg_strlist_t *)p;
    if (o->type != MSGPACK_OBJECT_ARRAY) return wrong_type(path, f->key, "an array of strings", o);
    size_t n = o->via.array.size;
    if (n > f->smax) return bad(path, f->key, "%zu entries, more than the limit %zu", n, f->smax);
    if (n == 0) return 0;
    l->v = calloc(n, sizeof *l->v); /* n <= smax: bounded by us, not the peer */
    if (!l->v) return aa_error(AA_ENOMEM, "%s.%s: out of memory", path, f->key);
    l->n = n;
    for (size_t j = 0; j < n; j++) {
      char key[64];
      snprintf(key, sizeof key, "%s[%zu]", f->key, j);
      int rc = dup_str(path, key, &o->via.array.ptr[j], 1, f->item_max, &l->v[j]);
      if (rc) return rc;
    }
    return 0;
  }
  case K_MAP: {
    char sub[128];
    snprintf(sub, sizeof sub, "%s.%s", path, f->key);
    if (o->type != MSGPACK_OBJECT_MAP) return wrong_type(path, f->key, "a map", o);
    return decode_map(f->sub, o, p, sub, NULL);
  }
  case K_BIN: {
    aa_msg_bin_t *b = (aa_msg_bin_t *)p;
    if (o->type != MSGPACK_OBJECT_BIN) return wrong_type(path, f->key, "binary", o);
    size_t n = o->via.bin.size;
    if (n > f->smax) return bad(path, f->key, "%zu bytes, longer than the limit %zu", n, f->smax);
    if (n < f->smin) return bad(path, f->key, "must not be empty");
    b->p = malloc(n ? n : 1); /* n <= smax: bounded by us, not the peer */
    if (!b->p) return aa_error(AA_ENOMEM, "%s.%s: out of memory", path, f->key);
    if (n) memcpy(b->p, o->via.bin.ptr, n);
    b->n = n;
    return 0;
  }
  }
  return aa_error(AA_EINTERNAL, "%s.%s: unhandled field kind", path, f->key);
}

static int unknown_key(const table_t *t, const char *path, const msgpack_object *k, int top) {
  char got[AA__SANITIZE_CAP], allowed[512];
  size_t o = 0;
  aa__proto_sanitize(got, k->via.str.ptr, k->via.str.size);
  o += (size_t)snprintf(allowed, sizeof allowed, "%s", top ? "v, t, id" : "");
  for (int i = 0; i < t->n && o < sizeof allowed; i++)
    o += (size_t)snprintf(allowed + o, sizeof allowed - o, "%s%s", o ? ", " : "", t->f[i].key);
  return aa_error(AA_EFORMAT, "%s: unknown key \"%s\" (allowed: %s)", path, got, allowed);
}

/* Decodes map o into st (zeroed by the caller) by table t. With env, the
 * map is a whole message: `v` and `t` were checked by the caller and are
 * skipped, `id` goes to env->id. On failure st may hold allocated strings;
 * the caller frees them. */
static int decode_map(const table_t *t, const msgpack_object *o, void *st, const char *path, aa_msg_t *env) {
  uint64_t seen = 0; /* one bit per field: tables hold fewer than 64 */
  int seen_id = 0;
  const msgpack_object_kv *kv = o->via.map.ptr;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object *k = &kv[i].key;
    if (k->type != MSGPACK_OBJECT_STR)
      return aa_error(AA_EFORMAT, "%s: key %u is %s, not a string", path, i + 1, obj_type_name(k));
    if (env && (key_is(k, "v") || key_is(k, "t"))) continue;
    if (env && key_is(k, "id")) {
      static const field_t id_f = F_U64(aa_msg_t, id, false, 1, ID_HI);
      if (seen_id++) return aa_error(AA_EFORMAT, "%s: duplicate key \"id\"", path);
      int rc = decode_u64(path, "id", &id_f, &kv[i].val, &env->id);
      if (rc) return rc;
      continue;
    }
    int j = 0;
    while (j < t->n && !key_is(k, t->f[j].key))
      j++;
    if (j == t->n) return unknown_key(t, path, k, env != NULL);
    if (seen & (UINT64_C(1) << j)) return aa_error(AA_EFORMAT, "%s: duplicate key \"%s\"", path, t->f[j].key);
    seen |= UINT64_C(1) << j;
    int rc = decode_field(&t->f[j], &kv[i].val, st, path);
    if (rc) return rc;
    if (t->f[j].has >= 0) *(bool *)((char *)st + t->f[j].has) = true;
  }
  for (int j = 0; j < t->n; j++)
    if (t->f[j].required && !(seen & (UINT64_C(1) << j)))
      return aa_error(AA_EFORMAT, "%s: missing required field \"%s\"", path, t->f[j].key);
  return t->check ? t->check(st, path) : 0;
}

/* Finds the envelope key `name` in the top map; duplicates are an error. */
static int find_env(const msgpack_object *map, const char *name, const msgpack_object **out) {
  const msgpack_object *found = NULL;
  for (uint32_t i = 0; i < map->via.map.size; i++)
    if (key_is(&map->via.map.ptr[i].key, name)) {
      if (found) return aa_error(AA_EFORMAT, "message: duplicate key \"%s\"", name);
      found = &map->via.map.ptr[i].val;
    }
  *out = found;
  return 0;
}

int aa_msg_decode(const void *payload, size_t len, aa_msg_t *out) {
  aa_msg_t m;
  msgpack_unpacked up;
  const msgpack_object *v = NULL, *t = NULL;
  size_t off = 0;
  int rc;
  memset(&m, 0, sizeof m);
  msgpack_unpacked_init(&up);
  if (len == 0) {
    rc = aa_error(AA_EPARSE, "empty message");
    goto cleanup;
  }
  if ((rc = aa__msgpack_scan(payload, len))) goto cleanup;
  msgpack_unpack_return ur = msgpack_unpack_next(&up, payload, len, &off);
  if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
    rc = aa_error(AA_ENOMEM, "out of memory while decoding a message of %zu bytes", len);
    goto cleanup;
  }
  if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
    rc = aa_error(AA_EPARSE, "msgpack-c rejected the message (%d at offset %zu)", (int)ur, off);
    goto cleanup;
  }
  const msgpack_object *root = &up.data;
  if (root->type != MSGPACK_OBJECT_MAP) {
    rc = aa_error(AA_EFORMAT, "message: expected a map, got %s", obj_type_name(root));
    goto cleanup;
  }
  if ((rc = find_env(root, "v", &v)) || (rc = find_env(root, "t", &t))) goto cleanup;
  if (!v) {
    rc = aa_error(AA_EFORMAT, "message: missing protocol version \"v\"");
    goto cleanup;
  }
  if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
    rc = aa_error(AA_EFORMAT, "message.v: expected an unsigned integer, got %s", obj_type_name(v));
    goto cleanup;
  }
  if (v->via.u64 != AA_PROTO_VERSION) {
    rc = aa_error(AA_EUNSUPPORTED, "wrong protocol version %llu, this side speaks %d",
                  (unsigned long long)v->via.u64, AA_PROTO_VERSION);
    goto cleanup;
  }
  if (!t) {
    rc = aa_error(AA_EFORMAT, "message: missing message type \"t\"");
    goto cleanup;
  }
  if (t->type != MSGPACK_OBJECT_STR) {
    rc = aa_error(AA_EFORMAT, "message.t: expected a string, got %s", obj_type_name(t));
    goto cleanup;
  }
  for (int i = AA_MSG_NONE + 1; i < AA_MSG_TYPE_COUNT && !m.type; i++)
    if (key_is(t, msg_tables[i].name)) m.type = (aa_msg_type_t)i;
  if (!m.type) {
    char got[AA__SANITIZE_CAP];
    aa__proto_sanitize(got, t->via.str.ptr, t->via.str.size);
    rc = aa_error(AA_EFORMAT, "message.t: unknown message type \"%s\"", got);
    goto cleanup;
  }
  rc = decode_map(&msg_tables[m.type], root, &m.hello, msg_tables[m.type].name, &m);
  if (rc) goto cleanup;
  *out = m;
  memset(&m, 0, sizeof m); /* ownership moved to *out */
cleanup:
  aa_msg_free(&m);
  msgpack_unpacked_destroy(&up);
  return rc;
}

/* --- free ---------------------------------------------------------------- */

static void free_fields(const table_t *t, void *st) {
  for (int i = 0; i < t->n; i++) {
    const field_t *f = &t->f[i];
    char *p = (char *)st + f->off;
    if (f->kind == K_STR) {
      free(*(char **)p);
    } else if (f->kind == K_LIST) {
      aa_msg_strlist_t *l = (aa_msg_strlist_t *)p;
      for (size_t j = 0; j < l->n; j++)
        free(l->v[j]);
      free(l->v);
    } else if (f->kind == K_MAP) {
      free_fields(f->sub, p);
    } else if (f->kind == K_BIN) {
      free(((aa_msg_bin_t *)p)->p);
    }
  }
}

void aa_msg_free(aa_msg_t *m) {
  if (!m) return;
  if (m->type > AA_MSG_NONE && m->type < AA_MSG_TYPE_COUNT) free_fields(&msg_tables[m->type], &m->hello);
  memset(m, 0, sizeof *m);
}

/* --- helpers ------------------------------------------------------------- */

int aa_msg_encode_error(char **out, size_t *out_len, uint64_t id, int code, const char *message) {
  char text[AA_PROTO_TEXT_MAX + 1];
  size_t o = 0;
  if (code < -1000 || code > -1) code = AA_EINTERNAL;
  if (!message || !*message) message = aa_strerror(code);
  /* Copy whole UTF-8 characters while they fit; a byte that starts no
   * valid character becomes '?', so any C string makes a valid reply. */
  const unsigned char *s = (const unsigned char *)message;
  size_t n = strlen(message);
  for (size_t i = 0; i < n;) {
    size_t k = s[i] < 0x80             ? 1
               : (s[i] & 0xe0) == 0xc0 ? 2
               : (s[i] & 0xf0) == 0xe0 ? 3
               : (s[i] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (k == 0 || k > n - i || !aa__utf8_valid(s + i, k)) {
      k = 1;
      if (o + 1 > AA_PROTO_TEXT_MAX) break;
      text[o++] = '?';
    } else {
      if (o + k > AA_PROTO_TEXT_MAX) break;
      memcpy(text + o, s + i, k);
      o += k;
    }
    i += k;
  }
  text[o] = '\0';
  aa_msg_t m = {.type = AA_MSG_ERROR, .id = id > AA_PROTO_ID_MAX ? 0 : id};
  m.error.code = code;
  m.error.message = text;
  return aa_msg_encode(&m, out, out_len);
}

void aa_proto_utf8_trim(char *s) {
  size_t n = strlen(s), i = n;
  while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
    i--;
  if (i == 0) return;
  unsigned char lead = (unsigned char)s[i - 1];
  size_t want = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
  if (n - (i - 1) < want) s[i - 1] = '\0';
}

int aa_proto_parse_device(const char *device, int *cuda) {
  if (!device || !strcmp(device, "cpu")) {
    *cuda = -1;
    return 0;
  }
  const char *d = device;
  if (!strncmp(d, "cuda:", 5) && d[5] >= '0' && d[5] <= '9') {
    char *end;
    errno = 0;
    long n = strtol(d + 5, &end, 10);
    if (!*end && !errno && n >= 0 && n <= AA_PROTO_DEVICE_INDEX_MAX) {
      *cuda = (int)n;
      return 0;
    }
  }
  return aa_error(AA_EINVAL, "--device: expected cpu or cuda:N (N = 0..%d, the CUDA ordinal), got '%s'",
                  AA_PROTO_DEVICE_INDEX_MAX, device);
}
