/* Calibrations (calib.h): the op and link tables, their JSON text and the
 * alpha-beta fit of a link's measurements. A calibration arrives from an
 * executor and is stored by the planner, so the reader checks every field
 * as a user file's: counts are bounded before anything is copied, and a
 * message names the field that broke a rule ("ops[3].fwd_s: must be finite
 * and > 0 (got nan)"). */
#include "calib.h"

#include "../common/json.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2048 ops of about 80 bytes and 64 links: well under a megabyte. The cap
 * keeps a wrong text from being parsed whole before it is rejected. */
#define CALIB_MAX_BYTES (4u << 20)
#define CALIB_RANKS_MAX 4096

/* Stored calibrations name their kinds: a kind keeps its name. */
static const char *const op_names[AA_OP_KINDS] = {
    "matmul", "attention", "layernorm", "gelu", "residual", "xent",      "encoder",   "cast",
    "adamw",  "rmsnorm",   "swiglu",    "rope", "gqa",      "ring_diag", "ring_block"};
/* How many of the four dimensions each kind uses (the rest are 0). */
static const int op_dims[AA_OP_KINDS] = {3, 4, 2, 1, 1, 2, 2, 1, 1, 2, 2, 4, 4, 4, 4};
static const char *const link_names[AA_COST_COLLECTIVES] = {"all_reduce", "all_gather", "reduce_scatter",
                                                            "send",       "recv",       "all_to_all"};
static const char *const dtype_names[] = {"fp32", "bf16", "fp16"}; /* = aa_dtype_t */
static const char *const backend_names[] = {"shm", "nccl", "gloo", "self"};

const char *aa_op_kind_name(aa_op_kind_t k) { return (unsigned)k < AA_OP_KINDS ? op_names[k] : "?"; }

int aa_op_kind_parse(const char *name) {
  for (int k = 0; name && k < AA_OP_KINDS; k++)
    if (!strcmp(name, op_names[k])) return k;
  return -1;
}

double aa_op_work(const aa_op_shape_t *s) {
  const double a = (double)s->d[0], b = (double)s->d[1], c = (double)s->d[2], d = (double)s->d[3];
  switch (s->op) {
  case AA_OP_MATMUL: return 2.0 * a * b * c;
  /* B·NH·T²·(C/NH): the heads' widths add up to C whatever NH is. */
  case AA_OP_ATTENTION: return a * b * b * c;
  case AA_OP_GQA:
  case AA_OP_RING_DIAG:
  case AA_OP_RING_BLOCK: return a * b * b * c * d;
  case AA_OP_ROPE: return a * b * (c + 1) * d;
  case AA_OP_LAYERNORM:
  case AA_OP_XENT:
  case AA_OP_ENCODER:
  case AA_OP_RMSNORM:
  case AA_OP_SWIGLU: return a * b;
  default: return a;
  }
}

/* ---- writing ------------------------------------------------------------ */

/* Appends v to arr, taking the reference whatever happens (jansson's
 * append releases it on failure too); false when either is NULL or the
 * append fails. */
static bool push(json_t *arr, json_t *v) {
  if (!arr || !v) {
    json_decref(v);
    return false;
  }
  return json_array_append_new(arr, v) == 0;
}

static json_t *op_json(const aa_calib_op_t *o) {
  json_t *dims = json_array(), *a = json_array();
  bool ok = dims != NULL;
  for (int i = 0; ok && i < 4; i++)
    ok = push(dims, json_integer(o->shape.d[i]));
  ok = push(a, json_string(aa_op_kind_name(o->shape.op))) && ok;
  ok = push(a, dims) && ok; /* dims is a's (or released) from here */
  ok = ok && (unsigned)o->dtype < 3 && push(a, json_string(dtype_names[o->dtype]));
  ok = ok && push(a, json_real(o->fwd_s)) && push(a, json_real(o->bwd_s));
  if (!ok) json_decref(a);
  return ok ? a : NULL;
}

static json_t *link_json(const aa_calib_link_t *l) {
  json_t *a = json_array();
  bool ok = a && (unsigned)l->kind < AA_COST_COLLECTIVES && push(a, json_string(link_names[l->kind])) &&
            push(a, json_integer(l->ranks)) && push(a, json_real(l->latency_s)) &&
            push(a, json_real(l->bytes_per_s));
  if (!ok) json_decref(a);
  return ok ? a : NULL;
}

char *aa_calib_to_json(const aa_calib_t *c) {
  json_t *root = json_object(), *ops = json_array(), *links = json_array();
  char *text = NULL;
  bool ok = root && ops && links;
  ok = ok && !json_object_set_new(root, "version", json_integer(c->version));
  ok = ok && !json_object_set_new(root, "device", json_string(c->device));
  ok = ok && !json_object_set_new(root, "backend", json_string(c->backend));
  ok = ok && !json_object_set_new(root, "cuda", json_integer(c->cuda));
  ok = ok && !json_object_set_new(root, "threads", json_integer(c->threads));
  ok = ok && !json_object_set_new(root, "host_cores", json_integer(c->host_cores));
  ok = ok && !json_object_set_new(root, "ranks", json_integer(c->ranks));
  ok = ok && !json_object_set_new(root, "measured_s", json_real(c->measured_s));
  for (int i = 0; ok && i < c->n_op && i < AA_CALIB_OPS_MAX; i++)
    ok = push(ops, op_json(&c->op[i]));
  for (int i = 0; ok && i < c->n_link && i < AA_CALIB_LINKS_MAX; i++)
    ok = push(links, link_json(&c->link[i]));
  /* json_object_set_new takes the value's reference, on failure too. */
  if (ok) {
    ok = !json_object_set_new(root, "ops", ops);
    ops = NULL;
  }
  if (ok) {
    ok = !json_object_set_new(root, "links", links);
    links = NULL;
  }
  /* jansson writes reals with 17 significant digits: the text reads back
   * as the same doubles. */
  if (ok) text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!text)
    aa_error(AA_ENOMEM, "calibration: cannot write JSON (out of memory, or a time that is not finite)");
  json_decref(ops);
  json_decref(links);
  json_decref(root);
  return text;
}

/* ---- reading ------------------------------------------------------------ */

static const char *backend_rule(const char *s, size_t len) {
  for (size_t i = 0; i < sizeof backend_names / sizeof backend_names[0]; i++)
    if (len == strlen(backend_names[i]) && !memcmp(s, backend_names[i], len)) return NULL;
  return "must be one of: shm, nccl, gloo, self";
}

static const char *device_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty";
  if (len >= AA_CALIB_DEVICE_MAX) return "must be at most 127 bytes long";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  return NULL;
}

static int read_version(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_integer(v)) return aa_json_fail_type(c, path, "an integer", v);
  if (json_integer_value(v) != AA_CALIB_VERSION)
    return aa_json_fail(c, AA_EINVAL, path, "version %lld is not supported (this build reads %d)",
                        (long long)json_integer_value(v), AA_CALIB_VERSION);
  *(int *)dst = AA_CALIB_VERSION;
  return 0;
}

#define AT(m) .off = offsetof(aa_calib_t, m), .size = sizeof(((aa_calib_t *)0)->m)

/* ops and links are AA_JSON_KEY: read by read_ops and read_links after the
 * table, so the unknown-key rule covers them too. */
static const aa_json_field_t top_fields[] = {
    {.key = "version", .kind = AA_JSON_CUSTOM, .required = true, .parse = read_version, AT(version)},
    {.key = "device", .kind = AA_JSON_STRING, .required = true, .check = device_rule, AT(device)},
    {.key = "backend", .kind = AA_JSON_STRING, .required = true, .check = backend_rule, AT(backend)},
    {.key = "cuda", .kind = AA_JSON_INT, .required = true, .imin = 0, .imax = 1, AT(cuda)},
    {.key = "threads", .kind = AA_JSON_INT, .required = true, .imin = 0, .imax = 65536, AT(threads)},
    {.key = "host_cores", .kind = AA_JSON_INT, .required = true, .imin = 0, .imax = 1 << 20, AT(host_cores)},
    {.key = "ranks", .kind = AA_JSON_INT, .required = true, .imin = 1, .imax = CALIB_RANKS_MAX, AT(ranks)},
    {.key = "measured_s",
     .kind = AA_JSON_NUMBER,
     .required = true,
     .fmin = 0,
     .fmax = INFINITY,
     AT(measured_s)},
    {.key = "ops", .kind = AA_JSON_KEY, .required = true},
    {.key = "links", .kind = AA_JSON_KEY, .required = true},
};

/* A time at v: finite and > 0, or >= 0 where zero_ok. */
static int read_time(const aa_json_ctx_t *c, const char *path, const json_t *v, bool zero_ok, double *out) {
  if (!json_is_number(v)) return aa_json_fail_type(c, path, "a number", v);
  double x = json_number_value(v);
  if (!isfinite(x) || x < 0 || (!zero_ok && x == 0)) {
    char b[32];
    return aa_json_fail(c, AA_EINVAL, path, "must be finite and %s (got %s)", zero_ok ? ">= 0" : "> 0",
                        aa_json_fmt_num(b, x, false));
  }
  *out = x;
  return 0;
}

/* A name among names[0..n) at v, as its index. */
static int read_name(const aa_json_ctx_t *c, const char *path, const json_t *v, const char *const *names,
                     int n, int *out) {
  if (!json_is_string(v)) return aa_json_fail_type(c, path, "a string", v);
  for (int i = 0; i < n; i++)
    if (!strcmp(json_string_value(v), names[i])) {
      *out = i;
      return 0;
    }
  char got[64], list[160];
  size_t o = 0;
  aa_json_sanitize(got, sizeof got, json_string_value(v));
  for (int i = 0; i < n && o < sizeof list; i++)
    o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", names[i]);
  return aa_json_fail(c, AA_EINVAL, path, "unknown name \"%s\" (allowed: %s)", got, list);
}

/* ["matmul",[N,C,OC,0],"fp32",fwd_s,bwd_s] */
static int read_op(const aa_json_ctx_t *c, size_t i, const json_t *v, aa_calib_op_t *o) {
  char path[64];
  int rc, k = 0, dt = 0;
  snprintf(path, sizeof path, "ops[%zu]", i);
  if (!json_is_array(v) || json_array_size(v) != 5)
    return aa_json_fail(c, AA_EINVAL, path, "must be [kind, [4 dimensions], dtype, fwd_s, bwd_s]");
  snprintf(path, sizeof path, "ops[%zu].kind", i);
  if ((rc = read_name(c, path, json_array_get(v, 0), op_names, AA_OP_KINDS, &k))) return rc;
  o->shape.op = (aa_op_kind_t)k;
  const json_t *dims = json_array_get(v, 1);
  snprintf(path, sizeof path, "ops[%zu].dims", i);
  if (!json_is_array(dims) || json_array_size(dims) != 4)
    return aa_json_fail(c, AA_EINVAL, path, "must be an array of 4 integers");
  for (int d = 0; d < 4; d++) {
    const json_t *x = json_array_get(dims, (size_t)d);
    snprintf(path, sizeof path, "ops[%zu].dims[%d]", i, d);
    if (!json_is_integer(x)) return aa_json_fail_type(c, path, "an integer", x);
    long long n = json_integer_value(x);
    if (d < op_dims[k] && (n < 1 || n > ((long long)1 << 40)))
      return aa_json_fail(c, AA_EINVAL, path, "must be between 1 and 2^40 for %s (got %lld)", op_names[k], n);
    if (d >= op_dims[k] && n != 0)
      return aa_json_fail(c, AA_EINVAL, path, "must be 0: %s uses %d dimensions (got %lld)", op_names[k],
                          op_dims[k], n);
    o->shape.d[d] = n;
  }
  /* The heads divide the width they share. */
  if (k == AA_OP_ATTENTION && o->shape.d[2] % o->shape.d[3])
    return aa_json_fail(c, AA_EINVAL, path, "heads %lld must divide the width %lld", (long long)o->shape.d[3],
                        (long long)o->shape.d[2]);
  snprintf(path, sizeof path, "ops[%zu].dtype", i);
  if ((rc = read_name(c, path, json_array_get(v, 2), dtype_names, 3, &dt))) return rc;
  o->dtype = (aa_dtype_t)dt;
  snprintf(path, sizeof path, "ops[%zu].fwd_s", i);
  if ((rc = read_time(c, path, json_array_get(v, 3), false, &o->fwd_s))) return rc;
  snprintf(path, sizeof path, "ops[%zu].bwd_s", i);
  return read_time(c, path, json_array_get(v, 4), true, &o->bwd_s);
}

/* ["all_reduce",ranks,latency_s,bytes_per_s] */
static int read_link(const aa_json_ctx_t *c, size_t i, const json_t *v, aa_calib_link_t *l) {
  char path[64];
  int rc, k = 0;
  snprintf(path, sizeof path, "links[%zu]", i);
  if (!json_is_array(v) || json_array_size(v) != 4)
    return aa_json_fail(c, AA_EINVAL, path, "must be [kind, ranks, latency_s, bytes_per_s]");
  snprintf(path, sizeof path, "links[%zu].kind", i);
  if ((rc = read_name(c, path, json_array_get(v, 0), link_names, AA_COST_COLLECTIVES, &k))) return rc;
  l->kind = (aa_cost_collective_t)k;
  const json_t *r = json_array_get(v, 1);
  snprintf(path, sizeof path, "links[%zu].ranks", i);
  if (!json_is_integer(r)) return aa_json_fail_type(c, path, "an integer", r);
  if (json_integer_value(r) < 2 || json_integer_value(r) > CALIB_RANKS_MAX)
    return aa_json_fail(c, AA_EINVAL, path, "must be between 2 and %d (got %lld)", CALIB_RANKS_MAX,
                        (long long)json_integer_value(r));
  l->ranks = (int)json_integer_value(r);
  snprintf(path, sizeof path, "links[%zu].latency_s", i);
  if ((rc = read_time(c, path, json_array_get(v, 2), true, &l->latency_s))) return rc;
  snprintf(path, sizeof path, "links[%zu].bytes_per_s", i);
  return read_time(c, path, json_array_get(v, 3), false, &l->bytes_per_s);
}

bool aa_op_shape_equal(const aa_op_shape_t *a, const aa_op_shape_t *b) {
  return a->op == b->op && a->d[0] == b->d[0] && a->d[1] == b->d[1] && a->d[2] == b->d[2] && a->d[3] == b->d[3];
}

static bool same_op(const aa_calib_op_t *a, const aa_op_shape_t *s, aa_dtype_t dtype) {
  return a->dtype == dtype && aa_op_shape_equal(&a->shape, s);
}

static int read_ops(const aa_json_ctx_t *c, const json_t *v, aa_calib_t *out) {
  if (!json_is_array(v)) return aa_json_fail_type(c, "ops", "an array", v);
  if (json_array_size(v) > AA_CALIB_OPS_MAX)
    return aa_json_fail(c, AA_EINVAL, "ops", "must list at most %d ops (got %zu)", AA_CALIB_OPS_MAX,
                        json_array_size(v));
  size_t i;
  const json_t *x;
  json_array_foreach(v, i, x) {
    int rc = read_op(c, i, x, &out->op[i]);
    if (rc) return rc;
    /* A shape measured twice would make lookups depend on the order. */
    for (size_t j = 0; j < i; j++)
      if (same_op(&out->op[j], &out->op[i].shape, out->op[i].dtype)) {
        char path[32];
        snprintf(path, sizeof path, "ops[%zu]", i);
        return aa_json_fail(c, AA_EINVAL, path, "repeats ops[%zu] (the same kind, dimensions and dtype)", j);
      }
    out->n_op = (int)i + 1;
  }
  return 0;
}

static int read_links(const aa_json_ctx_t *c, const json_t *v, aa_calib_t *out) {
  if (!json_is_array(v)) return aa_json_fail_type(c, "links", "an array", v);
  if (json_array_size(v) > AA_CALIB_LINKS_MAX)
    return aa_json_fail(c, AA_EINVAL, "links", "must list at most %d links (got %zu)", AA_CALIB_LINKS_MAX,
                        json_array_size(v));
  size_t i;
  const json_t *x;
  json_array_foreach(v, i, x) {
    int rc = read_link(c, i, x, &out->link[i]);
    if (rc) return rc;
    for (size_t j = 0; j < i; j++)
      if (out->link[j].kind == out->link[i].kind && out->link[j].ranks == out->link[i].ranks) {
        char path[32];
        snprintf(path, sizeof path, "links[%zu]", i);
        return aa_json_fail(c, AA_EINVAL, path, "repeats links[%zu] (the same kind and ranks)", j);
      }
    out->n_link = (int)i + 1;
  }
  return 0;
}

int aa_calib_parse(aa_calib_t *out, const char *json, const char *origin) {
  aa_json_ctx_t c = {.origin = origin && *origin ? origin : "<string>"};
  json_t *root;
  int rc = aa_json_parse_text(json, strlen(json), CALIB_MAX_BYTES, c.origin, "a calibration", "a JSON object",
                              &root);
  if (rc) return rc;
  /* Parsed into a copy so *out stays untouched on any failure. */
  aa_calib_t *t = calloc(1, sizeof *t);
  if (!t) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory", c.origin);
    goto cleanup;
  }
  if ((rc = aa_json_read_top(&c, root, top_fields, sizeof top_fields / sizeof top_fields[0], t)))
    goto cleanup;
  if ((rc = read_ops(&c, json_object_get(root, "ops"), t))) goto cleanup;
  if ((rc = read_links(&c, json_object_get(root, "links"), t))) goto cleanup;
  memcpy(out, t, sizeof *t);

cleanup:
  free(t);
  json_decref(root);
  return rc;
}

/* ---- lookups ------------------------------------------------------------ */

void aa_calib_merge(aa_calib_t *dst, const aa_calib_t *src) {
  /* The newest op timings set how they were taken (a pool of 2 measured
   * after one of 1 times every shape of its model again), and collective
   * lines name the backend they ran on; a calibration of one executor has
   * neither ("self"). */
  if (src->n_op > 0) {
    dst->ranks = src->ranks;
    dst->threads = src->threads;
    dst->host_cores = src->host_cores;
  }
  if (src->n_link > 0 || !strcmp(dst->backend, "self")) snprintf(dst->backend, sizeof dst->backend, "%s", src->backend);
  dst->measured_s = src->measured_s;
  for (int i = 0; i < src->n_op; i++) {
    const aa_calib_op_t *o = &src->op[i];
    aa_calib_op_t *d = (aa_calib_op_t *)aa_calib_find_op(dst, &o->shape, o->dtype);
    if (d)
      *d = *o;
    else if (dst->n_op < AA_CALIB_OPS_MAX)
      dst->op[dst->n_op++] = *o;
  }
  for (int i = 0; i < src->n_link; i++) {
    const aa_calib_link_t *l = &src->link[i];
    aa_calib_link_t *d = (aa_calib_link_t *)aa_calib_find_link(dst, l->kind, l->ranks);
    if (d)
      *d = *l;
    else if (dst->n_link < AA_CALIB_LINKS_MAX)
      dst->link[dst->n_link++] = *l;
  }
}

const aa_calib_op_t *aa_calib_find_op(const aa_calib_t *c, const aa_op_shape_t *s, aa_dtype_t dtype) {
  for (int i = 0; i < c->n_op; i++)
    if (same_op(&c->op[i], s, dtype)) return &c->op[i];
  return NULL;
}

const aa_calib_link_t *aa_calib_find_link(const aa_calib_t *c, aa_cost_collective_t kind, int ranks) {
  for (int i = 0; i < c->n_link; i++)
    if (c->link[i].kind == kind && c->link[i].ranks == ranks) return &c->link[i];
  return NULL;
}

/* Ordinary least squares of t = a + b x, in deviations from the means (so
 * that bytes in the gigabytes do not swamp microsecond times). A negative
 * intercept is noise on a link whose latency is below what the sizes
 * resolve: the latency is then 0 and the slope refitted through the origin,
 * the least-squares slope of t = b x. */
int aa_calib_fit_link(const double *bytes, const double *seconds, int n, double *latency_s,
                      double *bytes_per_s) {
  if (n < 2) return aa_error(AA_EINVAL, "link fit: needs at least 2 measurements (got %d)", n);
  for (int i = 0; i < n; i++)
    if (!isfinite(bytes[i]) || bytes[i] < 0 || !isfinite(seconds[i]) || seconds[i] <= 0)
      return aa_error(AA_EINVAL,
                      "link fit: measurement %d (%g bytes, %g s) must have bytes >= 0 and seconds > 0", i,
                      bytes[i], seconds[i]);
  /* Least squares on the relative error (weights 1/t^2): sizes spread over
   * three decades, and an unweighted fit lets the largest message set the
   * line alone, which puts a 5 us latency at 0 whenever that message runs
   * a little slower per byte than the small ones. */
  double sw = 0, mx = 0, mt = 0;
  for (int i = 0; i < n; i++) {
    const double w = 1 / (seconds[i] * seconds[i]);
    sw += w;
    mx += w * bytes[i];
    mt += w * seconds[i];
  }
  mx /= sw;
  mt /= sw;
  double sxx = 0, sxt = 0;
  for (int i = 0; i < n; i++) {
    const double w = 1 / (seconds[i] * seconds[i]);
    sxx += w * (bytes[i] - mx) * (bytes[i] - mx);
    sxt += w * (bytes[i] - mx) * (seconds[i] - mt);
  }
  if (!(sxx > 0)) return aa_error(AA_EINVAL, "link fit: needs at least two distinct message sizes");
  double b = sxt / sxx, a = mt - b * mx;
  if (a < 0) { /* the line through the origin, same weights */
    double xx = 0, xt = 0;
    for (int i = 0; i < n; i++) {
      const double w = 1 / (seconds[i] * seconds[i]);
      xx += w * bytes[i] * bytes[i];
      xt += w * bytes[i] * seconds[i];
    }
    a = 0;
    b = xt / xx;
  }
  if (!(b > 0))
    return aa_error(AA_EINVAL,
                    "link fit: the times do not grow with the message size (measure larger messages)");
  *latency_s = a;
  *bytes_per_s = 1.0 / b;
  return 0;
}
