/* The calibration file (calib_file.h): the wrapper around stored
 * calibrations that `autoaccel calib export` writes and `calib import`
 * reads, on both sides of the wire. The text comes from a user or a peer,
 * so it is bounded before it is parsed and every field is checked, named
 * in the message that refuses it. */
#include "calib_file.h"

#include "../common/json.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The JSON values of text, at most: a value is the first of its array or
 * object, or follows a comma. Counted outside strings; stops past max. */
static size_t count_values(const char *text, size_t len, size_t max) {
  size_t n = 1;
  bool in_string = false;
  for (size_t i = 0; i < len && n <= max; i++) {
    char ch = text[i];
    if (in_string) {
      if (ch == '\\')
        i++;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == ',' || ch == '[' || ch == '{') {
      n++;
    }
  }
  return n;
}

static const char *format_rule(const char *s, size_t len) {
  (void)len;
  return strcmp(s, AA_CALIB_FILE_FORMAT) ? "must be \"" AA_CALIB_FILE_FORMAT "\"" : NULL;
}

static int read_version(const aa_json_ctx_t *c, const char *path, const json_t *v, void *dst) {
  if (!json_is_integer(v)) return aa_json_fail_type(c, path, "an integer", v);
  if (json_integer_value(v) != AA_CALIB_FILE_VERSION)
    return aa_json_fail(c, AA_EINVAL, path, "version %lld is not supported (this build reads %d)",
                        (long long)json_integer_value(v), AA_CALIB_FILE_VERSION);
  *(int *)dst = AA_CALIB_FILE_VERSION;
  return 0;
}

/* The top level, read into this. */
typedef struct {
  char format[sizeof AA_CALIB_FILE_FORMAT];
  int version;
} top_t;

static const aa_json_field_t top_fields[] = {
    {.key = "format",
     .kind = AA_JSON_STRING,
     .required = true,
     .check = format_rule,
     .off = offsetof(top_t, format),
     .size = sizeof(((top_t *)0)->format)},
    {.key = "version",
     .kind = AA_JSON_CUSTOM,
     .required = true,
     .parse = read_version,
     .off = offsetof(top_t, version),
     .size = sizeof(int)},
    {.key = "calibrations", .kind = AA_JSON_KEY, .required = true},
};

static const char *key_device_rule(const char *s, size_t len) {
  if (len == 0) return "must not be empty";
  if (len >= AA_CALIB_DEVICE_MAX) return "must be at most 127 bytes long";
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return "must not contain control characters";
  if (strncmp(s, "cpu:", 4) && strncmp(s, "cuda:", 5))
    return "must be a device fingerprint of a cpu or cuda device (\"cpu:...\" or \"cuda:...\")";
  return NULL;
}

static const char *const key_backends[] = {"shm", "nccl", "gloo", "self", "nccl-hosts"};

static const char *key_backend_rule(const char *s, size_t len) {
  (void)len;
  for (size_t i = 0; i < sizeof key_backends / sizeof key_backends[0]; i++)
    if (!strcmp(s, key_backends[i])) return NULL;
  return "must be one of: shm, nccl, gloo, self, nccl-hosts";
}

#define AT(m) .off = offsetof(aa_calib_entry_t, m), .size = sizeof(((aa_calib_entry_t *)0)->m)

static const aa_json_field_t entry_fields[] = {
    {.key = "device", .kind = AA_JSON_STRING, .required = true, .check = key_device_rule, AT(device)},
    {.key = "backend", .kind = AA_JSON_STRING, .required = true, .check = key_backend_rule, AT(backend)},
    {.key = "measured_at",
     .kind = AA_JSON_INT,
     .required = true,
     .imin = 1,
     .imax = AA_CALIB_FILE_TIME_MAX,
     AT(measured_at)},
    {.key = "calibration", .kind = AA_JSON_KEY, .required = true},
};

/* The store's backends of each kind of device and the backend the
 * calibration under each ran on; a pool of one ("self") measures no links
 * and is stored under the backend of its host. */
static const struct {
  const char *key, *calib;
  bool cuda, one_host;
} key_rows[] = {
    {"shm", "shm", false, true},  {"gloo", "gloo", false, true},       {"self", "self", false, false},
    {"nccl", "nccl", true, true}, {"nccl-hosts", "nccl", true, false}, {"self", "self", true, false},
};

const char *aa_calib_key_rule(const char *device, const char *backend, const aa_calib_t *c) {
  bool cuda = !strncmp(device, "cuda:", 5);
  if (cuda != (c->cuda == 1))
    return cuda ? "a cuda device's calibration must have run on a GPU (cuda 1)"
                : "a cpu device's calibration must have run on a CPU (cuda 0)";
  for (size_t i = 0; i < sizeof key_rows / sizeof key_rows[0]; i++) {
    if (key_rows[i].cuda != cuda || strcmp(key_rows[i].key, backend)) continue;
    if (!strcmp(c->backend, key_rows[i].calib) || (key_rows[i].one_host && !strcmp(c->backend, "self")))
      return NULL;
    if (key_rows[i].one_host)
      return "the calibration must have run on the backend it is stored under, or on self";
    return strcmp(backend, "self") ? "the calibration under nccl-hosts must have run on nccl"
                                   : "the calibration under self must have run on self";
  }
  return cuda ? "a cuda device's calibration is stored under nccl, nccl-hosts or self"
              : "a cpu device's calibration is stored under shm, gloo or self";
}

/* Reads entry i (v) into e; e->calib is allocated here and freed by the
 * caller whatever happens. */
static int read_entry(const aa_json_ctx_t *c, size_t i, const json_t *v, aa_calib_entry_t *e) {
  char path[64], origin[512];
  snprintf(path, sizeof path, "calibrations[%zu]", i);
  if (!json_is_object(v)) return aa_json_fail_type(c, path, "an object", v);
  int rc = aa_json_read_fields(c, v, path, entry_fields, sizeof entry_fields / sizeof entry_fields[0], e);
  if (rc) return rc;
  const json_t *cal = json_object_get(v, "calibration");
  snprintf(path, sizeof path, "calibrations[%zu].calibration", i);
  if (!json_is_object(cal)) return aa_json_fail_type(c, path, "an object", cal);
  /* The calibration is read by its own reader, from its text: what is
   * stored is what that reader accepts. */
  char *text = json_dumps(cal, JSON_COMPACT);
  if (!text) return aa_error(AA_ENOMEM, "%s: %s: out of memory", c->origin, path);
  if (!(e->calib = malloc(sizeof *e->calib))) {
    free(text);
    return aa_error(AA_ENOMEM, "%s: %s: out of memory", c->origin, path);
  }
  snprintf(origin, sizeof origin, "%s: %s", c->origin, path);
  rc = aa_calib_parse(e->calib, text, origin);
  free(text);
  if (rc) return rc;
  const char *broken = aa_calib_key_rule(e->device, e->backend, e->calib);
  if (broken) {
    snprintf(path, sizeof path, "calibrations[%zu]", i);
    return aa_json_fail(c, AA_EINVAL, path,
                        "%s (device %.127s, backend %s; the calibration: cuda %d, backend %s)", broken,
                        e->device, e->backend, e->calib->cuda, e->calib->backend);
  }
  return 0;
}

int aa_calib_file_parse(aa_calib_file_t *out, const char *text, size_t len, const char *origin) {
  aa_json_ctx_t c = {.origin = origin && *origin ? origin : "<string>"};
  if (len > AA_CALIB_FILE_MAX)
    return aa_error(AA_EINVAL, "%s: too large (%zu bytes; a calibration file may be at most %u bytes)",
                    c.origin, len, AA_CALIB_FILE_MAX);
  if (count_values(text, len, AA_CALIB_FILE_VALUES_MAX) > AA_CALIB_FILE_VALUES_MAX)
    return aa_error(AA_EINVAL,
                    "%s: more than %d JSON values, more than %d calibrations at their largest hold; not a "
                    "calibration file",
                    c.origin, AA_CALIB_FILE_VALUES_MAX, AA_CALIB_FILE_ENTRIES_MAX);
  json_t *root;
  int rc = aa_json_parse_text(text, len, AA_CALIB_FILE_MAX, c.origin, "a calibration file", "a JSON object",
                              &root);
  if (rc) return rc;
  aa_calib_file_t *f = calloc(1, sizeof *f);
  top_t top = {0};
  if (!f) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory", c.origin);
    goto cleanup;
  }
  if ((rc = aa_json_read_top(&c, root, top_fields, sizeof top_fields / sizeof top_fields[0], &top)))
    goto cleanup;
  const json_t *list = json_object_get(root, "calibrations");
  if (!json_is_array(list)) {
    rc = aa_json_fail_type(&c, "calibrations", "an array", list);
    goto cleanup;
  }
  if (json_array_size(list) < 1 || json_array_size(list) > AA_CALIB_FILE_ENTRIES_MAX) {
    rc = aa_json_fail(&c, AA_EINVAL, "calibrations", "must list 1 to %d calibrations (got %zu)",
                      AA_CALIB_FILE_ENTRIES_MAX, json_array_size(list));
    goto cleanup;
  }
  size_t i;
  const json_t *v;
  json_array_foreach(list, i, v) {
    aa_calib_entry_t *e = &f->e[f->n++];
    if ((rc = read_entry(&c, i, v, e))) goto cleanup;
    /* Two entries of one key: which one would the store keep? */
    for (size_t j = 0; j < i; j++)
      if (!strcmp(f->e[j].device, e->device) && !strcmp(f->e[j].backend, e->backend)) {
        char path[48];
        snprintf(path, sizeof path, "calibrations[%zu]", i);
        rc = aa_json_fail(&c, AA_EINVAL, path, "repeats calibrations[%zu] (the same device and backend)", j);
        goto cleanup;
      }
  }
  *out = *f;
  f->n = 0; /* its calibrations are out's now */

cleanup:
  if (f) aa_calib_file_clear(f);
  free(f);
  json_decref(root);
  return rc;
}

/* Appends n bytes of s to the buffer *b (length *len, capacity *cap). */
static bool append(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < *len + n + 1)
      c *= 2;
    char *nb = realloc(*b, c);
    if (!nb) return false;
    *b = nb;
    *cap = c;
  }
  memcpy(*b + *len, s, n);
  *len += n;
  (*b)[*len] = '\0';
  return true;
}

static bool append_str(char **b, size_t *len, size_t *cap, const char *s) {
  return append(b, len, cap, s, strlen(s));
}

/* s as a JSON string, appended. */
static bool append_json_string(char **b, size_t *len, size_t *cap, const char *s) {
  json_t *v = json_string(s);
  char *t = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
  bool ok = t && append_str(b, len, cap, t);
  free(t);
  json_decref(v);
  return ok;
}

char *aa_calib_file_to_json(const aa_calib_file_t *f) {
  char *b = NULL, num[32];
  size_t len = 0, cap = 0;
  bool ok = append_str(&b, &len, &cap,
                       "{\"format\":\"" AA_CALIB_FILE_FORMAT "\",\"version\":1,\"calibrations\":[\n");
  for (int i = 0; ok && i < f->n; i++) {
    const aa_calib_entry_t *e = &f->e[i];
    if (!e->calib) {
      free(b);
      aa_error(AA_EINVAL, "calibration file: entry %d has no calibration", i);
      return NULL;
    }
    char *cal = aa_calib_to_json(e->calib);
    snprintf(num, sizeof num, "%lld", (long long)e->measured_at);
    ok = cal && append_str(&b, &len, &cap, "{\"device\":") && append_json_string(&b, &len, &cap, e->device) &&
         append_str(&b, &len, &cap, ",\"backend\":") && append_json_string(&b, &len, &cap, e->backend) &&
         append_str(&b, &len, &cap, ",\"measured_at\":") && append_str(&b, &len, &cap, num) &&
         append_str(&b, &len, &cap, ",\"calibration\":") && append_str(&b, &len, &cap, cal) &&
         append_str(&b, &len, &cap, i + 1 < f->n ? "},\n" : "}\n");
    free(cal);
  }
  ok = ok && append_str(&b, &len, &cap, "]}\n");
  if (!ok) {
    free(b);
    aa_error(AA_ENOMEM, "calibration file: out of memory");
    return NULL;
  }
  return b;
}

void aa_calib_file_clear(aa_calib_file_t *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++)
    free(f->e[i].calib);
  memset(f, 0, sizeof *f);
}
