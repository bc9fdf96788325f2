/* Device profiles (profile.h): the reader of the file format, the writer
 * it reads back, and the catalogue built into the binary. A profile may be
 * a user's own file, so the reader checks every field as a user file's
 * and a refusal names the field by its dotted path
 * ("gpu.json: intra_node.bytes_per_s.value: must be in [1e+06, 1e+14]
 * (got -5)"), through the table-driven reader of common/json.h. */
#include "profile.h"

#include "../common/aa.h"
#include "../common/json.h"
#include "profile_builtin.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const precision_names[AA_PROFILE_PRECISIONS] = {"fp32", "tf32", "bf16", "fp16", "fp8"};

const char *aa_profile_precision_name(aa_profile_precision_t p) {
  return (unsigned)p < AA_PROFILE_PRECISIONS ? precision_names[p] : "?";
}

#define AT(m) .off = offsetof(aa_device_profile_t, m), .size = sizeof(((aa_device_profile_t *)0)->m)
#define NUM(k, lo, hi, m)                                                                                    \
  { .key = k, .kind = AA_JSON_NUMBER, .fmin = lo, .fmax = hi, AT(m) }
#define INT(k, lo, hi, m)                                                                                    \
  { .key = k, .kind = AA_JSON_INT, .imin = lo, .imax = hi, AT(m) }
#define FLOP(i, k) [AA_PROFILE_FLOP_FP32 + (i)] = NUM("dense_flop_per_s." k, 1e9, 1e18, dense_flop_per_s[i])

/* How each figure's value is read, indexed by aa_profile_field_t: key is
 * the figure's dotted path (not a key of one object), the rest is the
 * value's kind, range and place. The ranges only refuse the absurd (a
 * wrong unit, a missing exponent, a sign), not a device yet to come: from
 * 1 GiB to 16 TiB of memory, up to an exaFLOP/s, a thousand GPUs to a
 * node, a link from 1 MB/s to 100 TB/s with a latency from 1 ns to 0.1 s. */
static const aa_json_field_t figures[AA_PROFILE_FIELDS] = {
    [AA_PROFILE_MEMORY] = INT("memory_bytes", 1LL << 30, 1LL << 44, memory_bytes),
    [AA_PROFILE_HBM] = NUM("hbm_bytes_per_s", 1e9, 1e15, hbm_bytes_per_s),
    FLOP(AA_PROFILE_FP32, "fp32"),
    FLOP(AA_PROFILE_TF32, "tf32"),
    FLOP(AA_PROFILE_BF16, "bf16"),
    FLOP(AA_PROFILE_FP16, "fp16"),
    FLOP(AA_PROFILE_FP8, "fp8"),
    [AA_PROFILE_GPUS_PER_NODE] = INT("gpus_per_node", 1, 1024, gpus_per_node),
    [AA_PROFILE_INTRA_BYTES] = NUM("intra_node.bytes_per_s", 1e6, 1e14, intra_node.bytes_per_s),
    [AA_PROFILE_INTRA_LATENCY] = NUM("intra_node.latency_s", 1e-9, 0.1, intra_node.latency_s),
    [AA_PROFILE_INTER_BYTES] = NUM("inter_node.bytes_per_s", 1e6, 1e14, inter_node.bytes_per_s),
    [AA_PROFILE_INTER_LATENCY] = NUM("inter_node.latency_s", 1e-9, 0.1, inter_node.latency_s),
};

const char *aa_profile_field_path(aa_profile_field_t f) {
  return (unsigned)f < AA_PROFILE_FIELDS ? figures[f].key : "?";
}

/* Only a tensor-core precision may be missing: every device has fp32. */
static bool may_lack(int f) { return f > AA_PROFILE_FLOP_FP32 && f < AA_PROFILE_GPUS_PER_NODE; }

double aa_profile_field_value(const aa_device_profile_t *p, aa_profile_field_t f) {
  if ((unsigned)f >= AA_PROFILE_FIELDS) return 0;
  const char *at = (const char *)p + figures[f].off;
  if (figures[f].kind == AA_JSON_NUMBER) return *(const double *)at;
  if (figures[f].size == sizeof(int64_t)) return (double)*(const int64_t *)at;
  return *(const int *)at;
}

/* ---- reading ------------------------------------------------------------ */

/* The figure whose path is path[0..len), or -1. */
static int figure_at(const char *path, size_t len) {
  for (int f = 0; f < AA_PROFILE_FIELDS; f++)
    if (strlen(figures[f].key) == len && !memcmp(figures[f].key, path, len)) return f;
  return -1;
}

/* Text for people (a description, a link, a source): not empty, one line. */
static const char *text_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  return NULL;
}

/* A name is what --show-device and (to come) --pool take, and a file
 * name: so no '/', no ".json" at its end (aa_profile_is_path), nothing a
 * shell would need quoted. */
static const char *name_rule(const char *s, size_t len) {
  static const char *const rule =
      "must be 1 to 63 letters, digits, '-', '_' or '.', starting with a letter or a digit";
  if (len == 0 || len >= AA_PROFILE_NAME_MAX) return rule;
  for (size_t i = 0; i < len; i++) {
    char ch = s[i];
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (!alnum && (i == 0 || (ch != '-' && ch != '_' && ch != '.'))) return rule;
  }
  if (len >= 5 && !strcmp(s + len - 5, ".json")) return "must not end in .json (that names a file)";
  return NULL;
}

static int read_version(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_integer(v)) return aa_json_fail_type(c, path, "an integer", v);
  if (json_integer_value(v) != AA_PROFILE_VERSION)
    return aa_json_fail(c, AA_EINVAL, path, "version %lld is not supported (this build reads %d)",
                        (long long)json_integer_value(v), AA_PROFILE_VERSION);
  *(int *)dst = AA_PROFILE_VERSION;
  return 0;
}

/* The name by name_rule, and equal to the file's name when the origin is
 * a .json file, so that the name a user types finds the file it came
 * from. */
static int read_name(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  static const aa_json_field_t as_string = {
      .key = "name", .kind = AA_JSON_STRING, .check = name_rule, .size = AA_PROFILE_NAME_MAX};
  char *name = dst;
  int rc = aa_json_read_value(c, path, &as_string, v, name);
  if (rc) return rc;
  const char *origin = c->origin, *slash = strrchr(origin, '/'), *base = slash ? slash + 1 : origin;
  size_t n = strlen(base);
  if (n < 5 || strcmp(base + n - 5, ".json")) return 0;
  if (n - 5 == strlen(name) && !memcmp(base, name, n - 5)) return 0;
  char stem[256], want[256], got[256];
  snprintf(stem, sizeof stem, "%.*s", (int)(n - 5 < 200 ? n - 5 : 200), base);
  aa_json_sanitize(want, sizeof want, stem);
  aa_json_sanitize(got, sizeof got, name);
  return aa_json_fail(c, AA_EINVAL, path, "must be the file's name without .json, \"%s\" (got \"%s\")", want,
                      got);
}

/* A figure's value at path "<figure>.value" into c->data: null (0) only
 * where the device may lack the figure, else by the figure's range. */
static int read_value(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  size_t len = strlen(path);
  int f = len > 6 ? figure_at(path, len - 6) : -1;
  if (f < 0) return aa_json_fail(c, AA_EINTERNAL, path, "not the value of a figure");
  if (json_is_null(v)) {
    if (!may_lack(f))
      return aa_json_fail(c, AA_EINVAL, path,
                          "must not be null (only a tensor-core precision the device lacks may be: "
                          "tf32, bf16, fp16, fp8) (got null)");
    *(double *)dst = 0;
    return 0;
  }
  return aa_json_read_value(c, path, &figures[f], v, c->data);
}

/* A figure at path: {"value": ..., "source": "..."}, the source landing in
 * the profile's source[] under the figure's index. */
static int read_figure(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  (void)dst;
  int f = figure_at(path, strlen(path));
  if (f < 0) return aa_json_fail(c, AA_EINTERNAL, path, "not a figure");
  if (!json_is_object(v))
    return aa_json_fail_type(c, path, "an object {\"value\": ..., \"source\": \"...\"}", v);
  const aa_json_field_t t[] = {
      {.key = "value", .kind = AA_JSON_CUSTOM, .required = true, .parse = read_value, .off = figures[f].off},
      {.key = "source",
       .kind = AA_JSON_STRING,
       .required = true,
       .check = text_rule,
       .off = offsetof(aa_device_profile_t, source) + (size_t)f * AA_PROFILE_SOURCE_MAX,
       .size = AA_PROFILE_SOURCE_MAX},
  };
  return aa_json_read_fields(c, v, path, t, sizeof t / sizeof t[0], c->data);
}

#define FIGURE(k)                                                                                            \
  { .key = k, .kind = AA_JSON_CUSTOM, .required = true, .parse = read_figure }

static const aa_json_field_t flop_fields[] = {FIGURE("fp32"), FIGURE("tf32"), FIGURE("bf16"), FIGURE("fp16"),
                                              FIGURE("fp8")};
static const aa_json_field_t intra_fields[] = {
    {.key = "link", .kind = AA_JSON_STRING, .required = true, .check = text_rule, AT(intra_node.link)},
    FIGURE("bytes_per_s"),
    FIGURE("latency_s"),
};
static const aa_json_field_t inter_fields[] = {
    {.key = "link", .kind = AA_JSON_STRING, .required = true, .check = text_rule, AT(inter_node.link)},
    FIGURE("bytes_per_s"),
    FIGURE("latency_s"),
};

#define OBJECT(k, t)                                                                                         \
  { .key = k, .kind = AA_JSON_OBJECT, .required = true, .sub = t, .nsub = sizeof t / sizeof t[0] }

/* The file's members in file order: the order of checks and of
 * aa_profile_to_json's output. */
static const aa_json_field_t top_fields[] = {
    {.key = "version", .kind = AA_JSON_CUSTOM, .required = true, .parse = read_version, AT(version)},
    {.key = "name", .kind = AA_JSON_CUSTOM, .required = true, .parse = read_name, AT(name)},
    {.key = "description", .kind = AA_JSON_STRING, .required = true, .check = text_rule, AT(description)},
    FIGURE("memory_bytes"),
    FIGURE("hbm_bytes_per_s"),
    OBJECT("dense_flop_per_s", flop_fields),
    FIGURE("gpus_per_node"),
    OBJECT("intra_node", intra_fields),
    OBJECT("inter_node", inter_fields),
};

int aa_profile_parse(aa_device_profile_t *out, const char *text, size_t len, const char *origin) {
  origin = origin && *origin ? origin : "<string>";
  json_t *root;
  int rc =
      aa_json_parse_text(text, len, AA_PROFILE_MAX_BYTES, origin, "a device profile", "a JSON object", &root);
  if (rc) return rc;
  /* Zeroed, so that the unused tail of every string is too and two
   * profiles read from the same text are the same bytes. */
  aa_device_profile_t *p = calloc(1, sizeof *p);
  const aa_json_ctx_t ctx = {.origin = origin, .data = p};
  if (!p)
    rc = aa_error(AA_ENOMEM, "%s: out of memory", origin);
  else if (!json_is_object(root))
    rc = aa_error(AA_EINVAL, "%s: must be a JSON object, a device profile (got %s)", origin,
                  aa_json_type_name(root));
  else
    rc = aa_json_read_fields(&ctx, root, "", top_fields, sizeof top_fields / sizeof top_fields[0], p);
  json_decref(root);
  if (!rc) memcpy(out, p, sizeof *p);
  free(p);
  return rc;
}

int aa_profile_load(aa_device_profile_t *out, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  int rc = aa_read_file(path, AA_PROFILE_MAX_BYTES, "a device profile", &buf, &len);
  if (rc) return rc;
  rc = aa_profile_parse(out, buf, len, path);
  free(buf);
  return rc;
}

/* ---- the catalogue -------------------------------------------------------- */

size_t aa_profile_builtin_count(void) { return aa__profile_nblobs; }

const char *aa_profile_builtin_name(size_t i) {
  return i < aa__profile_nblobs ? aa__profile_blobs[i].name : NULL;
}

int aa_profile_builtin(aa_device_profile_t *out, size_t i) {
  if (i >= aa__profile_nblobs)
    return aa_error(AA_EINVAL, "built-in device profile %zu: there are %zu", i, aa__profile_nblobs);
  /* The origin ends in the file's name, so the name rule holds for the
   * catalogue too. */
  char origin[512];
  snprintf(origin, sizeof origin, "built-in profiles/%.200s.json", aa__profile_blobs[i].name);
  return aa_profile_parse(out, aa__profile_blobs[i].text, aa__profile_blobs[i].len, origin);
}

int aa_profile_is_path(const char *arg) {
  size_t n = strlen(arg);
  return strchr(arg, '/') != NULL || (n >= 5 && !strcmp(arg + n - 5, ".json"));
}

int aa_profile_find(aa_device_profile_t *out, const char *name_or_path) {
  if (aa_profile_is_path(name_or_path)) return aa_profile_load(out, name_or_path);
  for (size_t i = 0; i < aa__profile_nblobs; i++)
    if (!strcmp(aa__profile_blobs[i].name, name_or_path)) return aa_profile_builtin(out, i);
  char known[1024] = "", safe[256];
  size_t o = 0;
  for (size_t i = 0; i < aa__profile_nblobs && o < sizeof known; i++)
    o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "", aa__profile_blobs[i].name);
  aa_json_sanitize(safe, sizeof safe, name_or_path);
  return aa_error(AA_ENOENT,
                  "no device profile named \"%s\" (built in: %s; a profile file of your own is named by a "
                  "path holding '/' or ending in .json)",
                  safe, aa__profile_nblobs ? known : "none");
}

/* Whether needle occurs in hay, ignoring ASCII case. */
static bool has_word(const char *hay, const char *needle, size_t n) {
  for (; *hay; hay++)
    if (!strncasecmp(hay, needle, n)) return true;
  return false;
}

int aa_profile_for_device(aa_device_profile_t *out, const char *device) {
  /* "cuda:NVIDIA H100 80GB HBM3:81559MiB": the name between the colons,
   * the memory after the last. */
  const char *name = strchr(device, ':'), *mem = strrchr(device, ':');
  if (strncmp(device, "cuda:", 5) || !name || mem == name)
    return aa_error(AA_ENOENT, "%s: not a CUDA device fingerprint", device);
  char model[AA_PROFILE_TEXT_MAX];
  snprintf(model, sizeof model, "%.*s", (int)(mem - name - 1), name + 1);
  char *end = NULL;
  double mib = strtod(mem + 1, &end);
  if (!end || strcmp(end, "MiB") || !(mib > 0)) return aa_error(AA_ENOENT, "%s: no memory in MiB", device);
  /* The catalogue's are SXM boards: a PCIe one has other links and clocks. */
  if (has_word(model, "pcie", 4)) return aa_error(AA_ENOENT, "%s: no profile of a PCIe board", device);
  for (size_t i = 0; i < aa__profile_nblobs; i++) {
    const char *pn = aa__profile_blobs[i].name, *dash = strchr(pn, '-');
    size_t n = dash ? (size_t)(dash - pn) : strlen(pn);
    if (!has_word(model, pn, n)) continue;
    aa_device_profile_t p;
    if (aa_profile_builtin(&p, i)) continue;
    const double want = (double)p.memory_bytes / (1024.0 * 1024.0);
    if (fabs(mib - want) <= 0.1 * want) {
      *out = p;
      return 0;
    }
  }
  return aa_error(AA_ENOENT, "%s: no built-in profile of this device", device);
}

/* ---- writing ------------------------------------------------------------ */

/* A figure as the file holds it. Reals are written by jansson with 17
 * significant digits, which read back as the same double. */
static json_t *figure_json(const aa_device_profile_t *p, int f) {
  const char *at = (const char *)p + figures[f].off;
  json_t *v;
  if (figures[f].kind == AA_JSON_INT)
    v = json_integer(figures[f].size == sizeof(int64_t) ? (json_int_t) * (const int64_t *)at
                                                        : *(const int *)at);
  else if (may_lack(f) && *(const double *)at == 0)
    v = json_null();
  else
    v = json_real(*(const double *)at);
  return v ? json_pack("{s:o, s:s}", "value", v, "source", p->source[f]) : NULL;
}

/* The members of table t (n entries) under section into obj, in order. */
static bool put_fields(json_t *obj, const aa_device_profile_t *p, const char *section,
                       const aa_json_field_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char path[160];
    snprintf(path, sizeof path, "%s%s%s", section, *section ? "." : "", t[i].key);
    const char *at = (const char *)p + t[i].off;
    json_t *v = NULL;
    int f = figure_at(path, strlen(path));
    if (f >= 0)
      v = figure_json(p, f);
    else if (t[i].kind == AA_JSON_OBJECT) {
      v = json_object();
      if (v && !put_fields(v, p, path, t[i].sub, t[i].nsub)) {
        json_decref(v);
        v = NULL;
      }
    } else if (!strcmp(t[i].key, "version"))
      v = json_integer(p->version);
    else
      v = json_string(at); /* name, description, link */
    /* json_object_set_new takes v's reference, on failure too. */
    if (!v || json_object_set_new(obj, t[i].key, v)) return false;
  }
  return true;
}

int aa_profile_to_json(const aa_device_profile_t *p, json_t **out) {
  json_t *root = json_object();
  if (!root || !put_fields(root, p, "", top_fields, sizeof top_fields / sizeof top_fields[0])) {
    json_decref(root);
    return aa_error(AA_ENOMEM,
                    "device profile %s: cannot write JSON (out of memory, or text that is not UTF-8)",
                    p->name);
  }
  *out = root;
  return 0;
}
