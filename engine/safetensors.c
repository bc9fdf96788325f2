/* Hugging Face safetensors: the validating reader and the writer
 * (safetensors.h). */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/file.h"
#include "../common/half.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[AA_ST_N_DTYPES] = {
    [AA_ST_BOOL] = {"BOOL", 1},       [AA_ST_U8] = {"U8", 1},           [AA_ST_I8] = {"I8", 1},
    [AA_ST_F8_E5M2] = {"F8_E5M2", 1}, [AA_ST_F8_E4M3] = {"F8_E4M3", 1}, [AA_ST_I16] = {"I16", 2},
    [AA_ST_U16] = {"U16", 2},         [AA_ST_F16] = {"F16", 2},         [AA_ST_BF16] = {"BF16", 2},
    [AA_ST_I32] = {"I32", 4},         [AA_ST_U32] = {"U32", 4},         [AA_ST_F32] = {"F32", 4},
    [AA_ST_F64] = {"F64", 8},         [AA_ST_I64] = {"I64", 8},         [AA_ST_U64] = {"U64", 8},
};

const char *aa_st_dtype_name(aa_st_dtype_t t) { return (unsigned)t < AA_ST_N_DTYPES ? dtypes[t].name : "?"; }
size_t aa_st_dtype_size(aa_st_dtype_t t) { return (unsigned)t < AA_ST_N_DTYPES ? dtypes[t].size : 0; }

/* Reads exactly n bytes at off, or fails naming path. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return aa_error(AA_EIO, "%s: read failed: %s", path, strerror(errno));
    if (r == 0)
      return aa_error(AA_EFORMAT, "%s: truncated (ends before byte %llu)", path, (unsigned long long)off);
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

/* A JSON integer in [0, max], else -1. */
static int64_t json_uint(const json_t *v, int64_t max) {
  if (!json_is_integer(v)) return -1;
  json_int_t x = json_integer_value(v);
  return x < 0 || x > max ? -1 : (int64_t)x;
}

/* Fills t from the header entry v of tensor name, checking its fields and
 * that its byte length is its shape's. */
static int parse_entry(aa_st_tensor_t *t, const char *path, const char *name, json_t *v) {
  if (strlen(name) > AA_ST_NAME_MAX)
    return aa_error(AA_EFORMAT, "%s: a tensor name is %zu bytes long (at most %d)", path, strlen(name),
                    AA_ST_NAME_MAX);
  strcpy(t->name, name);
  if (!json_is_object(v))
    return aa_error(AA_EFORMAT, "%s: tensor '%s': entry is not a JSON object", path, name);
  const char *key;
  json_t *x;
  json_object_foreach(v, key, x) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return aa_error(AA_EFORMAT, "%s: tensor '%s': unknown key '%s' (allowed: dtype, shape, data_offsets)",
                      path, name, key);
  }
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!json_is_string(dt)) return aa_error(AA_EFORMAT, "%s: tensor '%s': dtype must be a string", path, name);
  int d = -1;
  for (int i = 0; i < AA_ST_N_DTYPES; i++)
    if (!strcmp(json_string_value(dt), dtypes[i].name)) d = i;
  if (d < 0)
    return aa_error(AA_EFORMAT, "%s: tensor '%s': unknown dtype \"%.32s\"", path, name,
                    json_string_value(dt));
  t->dtype = (aa_st_dtype_t)d;
  if (!json_is_array(sh) || json_array_size(sh) > AA_ST_MAX_DIMS)
    return aa_error(AA_EFORMAT, "%s: tensor '%s': shape must be an array of at most %d integers", path, name,
                    AA_ST_MAX_DIMS);
  t->ndim = (int)json_array_size(sh);
  uint64_t bytes = dtypes[d].size;
  t->numel = 1;
  for (int i = 0; i < t->ndim; i++) {
    int64_t s = json_uint(json_array_get(sh, (size_t)i), INT64_MAX);
    if (s < 0)
      return aa_error(AA_EFORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
    t->shape[i] = s;
    if (__builtin_mul_overflow(t->numel, (uint64_t)s, &t->numel) ||
        __builtin_mul_overflow(bytes, (uint64_t)s, &bytes))
      return aa_error(AA_EFORMAT, "%s: tensor '%s': shape overflows 64 bits", path, name);
  }
  if (!json_is_array(off) || json_array_size(off) != 2)
    return aa_error(AA_EFORMAT, "%s: tensor '%s': data_offsets must be [begin, end]", path, name);
  int64_t b = json_uint(json_array_get(off, 0), INT64_MAX), e = json_uint(json_array_get(off, 1), INT64_MAX);
  if (b < 0 || e < 0 || e < b)
    return aa_error(AA_EFORMAT, "%s: tensor '%s': data_offsets must be two integers 0 <= begin <= end", path,
                    name);
  t->begin = (uint64_t)b;
  t->end = (uint64_t)e;
  if (t->end - t->begin != bytes)
    return aa_error(
        AA_EFORMAT,
        "%s: tensor '%s': data_offsets [%llu, %llu) hold %llu bytes but %s of %llu elements needs %llu", path,
        name, (unsigned long long)t->begin, (unsigned long long)t->end,
        (unsigned long long)(t->end - t->begin), dtypes[d].name, (unsigned long long)t->numel,
        (unsigned long long)bytes);
  return 0;
}

static int by_begin(const void *a, const void *b) {
  const aa_st_tensor_t *x = *(const aa_st_tensor_t *const *)a, *y = *(const aa_st_tensor_t *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors must tile [0, data_len) exactly. */
static int check_tiling(const aa_st_file_t *f, uint64_t data_len) {
  if (f->n == 0) {
    if (data_len)
      return aa_error(AA_EFORMAT, "%s: %llu bytes of data but no tensors", f->path,
                      (unsigned long long)data_len);
    return 0;
  }
  const aa_st_tensor_t **order = malloc((size_t)f->n * sizeof *order);
  if (!order) return aa_error(AA_ENOMEM, "%s: out of memory", f->path);
  for (int i = 0; i < f->n; i++)
    order[i] = &f->tensors[i];
  qsort(order, (size_t)f->n, sizeof *order, by_begin);
  int rc = 0;
  uint64_t at = 0;
  for (int i = 0; i < f->n && !rc; i++) {
    const aa_st_tensor_t *t = order[i];
    if (t->end > data_len)
      rc = aa_error(AA_EFORMAT,
                    "%s: tensor '%s': data_offsets [%llu, %llu) end past the data section's %llu bytes "
                    "(truncated file?)",
                    f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)data_len);
    else if (t->begin < at)
      rc = aa_error(AA_EFORMAT,
                    "%s: tensor '%s': data_offsets [%llu, %llu) overlap tensor '%s''s [%llu, %llu)", f->path,
                    t->name, (unsigned long long)t->begin, (unsigned long long)t->end, order[i - 1]->name,
                    (unsigned long long)order[i - 1]->begin, (unsigned long long)order[i - 1]->end);
    else if (t->begin > at)
      rc = aa_error(AA_EFORMAT, "%s: tensor '%s': data_offsets start at %llu, leaving a gap after byte %llu",
                    f->path, t->name, (unsigned long long)t->begin, (unsigned long long)at);
    at = t->end;
  }
  if (!rc && at != data_len)
    rc = aa_error(AA_EFORMAT, "%s: %llu bytes after the last tensor's data", f->path,
                  (unsigned long long)(data_len - at));
  free(order);
  return rc;
}

int aa_st_open(aa_st_file_t **out, const char *path) {
  aa_st_file_t *f = calloc(1, sizeof *f);
  if (!f) return aa_error(AA_ENOMEM, "%s: out of memory", path);
  f->fd = -1;
  snprintf(f->path, sizeof f->path, "%s", path);
  char *hdr = NULL;
  json_t *root = NULL;
  int rc = 0;
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) {
    rc = aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", path, strerror(errno));
    goto cleanup;
  }
  struct stat sb;
  if (fstat(f->fd, &sb)) {
    rc = aa_error(AA_EIO, "%s: stat failed: %s", path, strerror(errno));
    goto cleanup;
  }
  if (!S_ISREG(sb.st_mode)) {
    rc = aa_error(AA_EINVAL, "%s: not a regular file", path);
    goto cleanup;
  }
  uint64_t size = (uint64_t)sb.st_size;
  unsigned char len8[8];
  if (size < 8) {
    rc = aa_error(AA_EFORMAT, "%s: too short to be a safetensors file (%llu bytes)", path,
                  (unsigned long long)size);
    goto cleanup;
  }
  if ((rc = pread_all(f->fd, len8, 8, 0, path))) goto cleanup;
  uint64_t n = aa_get_le64(len8);
  if (n > AA_ST_HEADER_MAX) {
    rc = aa_error(AA_EFORMAT, "%s: header length %llu is over the %u-byte limit", path, (unsigned long long)n,
                  AA_ST_HEADER_MAX);
    goto cleanup;
  }
  if (n > size - 8) {
    rc = aa_error(AA_EFORMAT, "%s: header length %llu but only %llu bytes follow (truncated file?)", path,
                  (unsigned long long)n, (unsigned long long)(size - 8));
    goto cleanup;
  }
  if (n < 2) {
    rc = aa_error(AA_EFORMAT, "%s: header length %llu is too short for a JSON object", path,
                  (unsigned long long)n);
    goto cleanup;
  }
  hdr = malloc(n);
  if (!hdr) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)n);
    goto cleanup;
  }
  if ((rc = pread_all(f->fd, hdr, n, 8, path))) goto cleanup;
  if (hdr[0] != '{') {
    rc = aa_error(AA_EFORMAT, "%s: the header is not a JSON object (starts with byte 0x%02x)", path,
                  (unsigned char)hdr[0]);
    goto cleanup;
  }
  json_error_t jerr;
  root = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    rc = aa_error(AA_EFORMAT, "%s: header JSON: %s (at byte %d)", path, jerr.text, jerr.position);
    goto cleanup;
  }
  if (!json_is_object(root)) {
    rc = aa_error(AA_EFORMAT, "%s: the header is not a JSON object", path);
    goto cleanup;
  }
  json_t *meta = json_object_get(root, "__metadata__");
  if (meta) {
    const char *k;
    json_t *v;
    if (!json_is_object(meta)) {
      rc = aa_error(AA_EFORMAT, "%s: __metadata__ must be an object of strings", path);
      goto cleanup;
    }
    json_object_foreach(meta, k, v) {
      if (!json_is_string(v)) {
        rc = aa_error(AA_EFORMAT, "%s: __metadata__ '%.64s' is not a string", path, k);
        goto cleanup;
      }
    }
  }
  size_t count = json_object_size(root) - (meta ? 1 : 0);
  /* Each entry takes dozens of header bytes, so count <= n: bounded. */
  f->tensors = calloc(count ? count : 1, sizeof *f->tensors);
  if (!f->tensors) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory for %zu tensors", path, count);
    goto cleanup;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) continue;
    if ((rc = parse_entry(&f->tensors[f->n], path, key, v))) goto cleanup;
    f->n++;
  }
  f->data_start = 8 + n;
  if ((rc = check_tiling(f, size - f->data_start))) goto cleanup;
cleanup:
  json_decref(root);
  free(hdr);
  if (rc) {
    aa_st_close(f);
    return rc;
  }
  *out = f;
  return 0;
}

void aa_st_close(aa_st_file_t *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  free(f->tensors);
  free(f);
}

const aa_st_tensor_t *aa_st_find(const aa_st_file_t *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
  return NULL;
}

int aa_st_read_f32(const aa_st_file_t *f, const aa_st_tensor_t *t, float *dst) {
  if (t->dtype != AA_ST_F32 && t->dtype != AA_ST_BF16 && t->dtype != AA_ST_F16)
    return aa_error(AA_EUNSUPPORTED, "%s: tensor '%s' is %s (only F32, BF16 and F16 convert to fp32)",
                    f->path, t->name, dtypes[t->dtype].name);
  uint64_t bytes = t->end - t->begin;
  if (t->dtype == AA_ST_F32) {
    int rc = pread_all(f->fd, dst, bytes, f->data_start + t->begin, f->path);
    if (rc) return rc;
    for (uint64_t i = 0; i < t->numel; i++) { /* the file is little-endian, as is every host we build on */
      unsigned char *p = (unsigned char *)&dst[i];
      uint32_t u = aa_get_le32(p);
      memcpy(p, &u, 4);
    }
    return 0;
  }
  /* 16-bit values: read into the second half of dst, widen front to back
   * (element i's 4 bytes never reach element j >= i's 2 before it is read). */
  unsigned char *src = (unsigned char *)dst + bytes;
  int rc = pread_all(f->fd, src, bytes, f->data_start + t->begin, f->path);
  if (rc) return rc;
  for (uint64_t i = 0; i < t->numel; i++) {
    uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
    dst[i] = t->dtype == AA_ST_BF16 ? aa_bf16_to_f32(h) : aa_f16_to_f32(h);
  }
  return 0;
}

/* --- writing ------------------------------------------------------------------ */

static const char *out_name(aa_dtype_t d) { return d == AA_BF16 ? "BF16" : d == AA_F16 ? "F16" : "F32"; }

int aa_st_write(const char *path, aa_dtype_t dtype, const aa_st_entry_t *entries, int n, aa_st_fill_fn fill,
                void *data) {
  size_t es = aa_dtype_size(dtype);
  json_t *root = json_object(), *meta = json_object();
  char *hdr = NULL;
  float *buf = NULL;
  unsigned char *conv = NULL;
  aa_wfile_t w = {0};
  w.dirfd = -1;
  int rc = 0;
  if (!root || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
      json_object_set_new(root, "__metadata__", meta)) {
    json_decref(meta);
    rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
    goto cleanup;
  }
  uint64_t off = 0, max_numel = 0;
  for (int i = 0; i < n; i++) {
    const aa_st_entry_t *e = &entries[i];
    uint64_t numel = 1;
    json_t *shape = json_array(), *ent = json_object();
    for (int k = 0; k < e->ndim; k++) {
      numel *= (uint64_t)e->shape[k];
      json_array_append_new(shape, json_integer(e->shape[k]));
    }
    json_object_set_new(ent, "dtype", json_string(out_name(dtype)));
    json_object_set_new(ent, "shape", shape);
    json_object_set_new(ent, "data_offsets",
                        json_pack("[II]", (json_int_t)off, (json_int_t)(off + numel * es)));
    if (json_object_set_new(root, e->name, ent)) {
      rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
      goto cleanup;
    }
    off += numel * es;
    if (numel > max_numel) max_numel = numel;
  }
  /* Entries in the header in data order keep the file readable by eye. */
  hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  buf = malloc((max_numel ? max_numel : 1) * sizeof *buf);
  conv = malloc((max_numel ? max_numel : 1) * es);
  if (!hdr || !buf || !conv) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
    goto cleanup;
  }
  size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
  if ((rc = aa_wfile_open(&w, path, 0644))) goto cleanup;
  unsigned char len8[8];
  aa_put_le64(len8, padded);
  int ok = fwrite(len8, 1, 8, w.f) == 8 && fwrite(hdr, 1, hlen, w.f) == hlen;
  for (size_t i = hlen; i < padded && ok; i++)
    ok = fputc(' ', w.f) != EOF;
  for (int i = 0; i < n && ok; i++) {
    uint64_t numel = 1;
    for (int k = 0; k < entries[i].ndim; k++)
      numel *= (uint64_t)entries[i].shape[k];
    if ((rc = fill(i, buf, numel, data))) goto cleanup;
    for (uint64_t j = 0; j < numel; j++) {
      unsigned char *p = conv + j * es;
      if (dtype == AA_F32) {
        uint32_t u;
        memcpy(&u, &buf[j], 4);
        aa_put_le32(p, u);
      } else {
        uint16_t h = dtype == AA_BF16 ? aa_f32_to_bf16(buf[j]) : aa_f32_to_f16(buf[j]);
        p[0] = (unsigned char)h;
        p[1] = (unsigned char)(h >> 8);
      }
    }
    ok = fwrite(conv, es, numel, w.f) == numel;
  }
  if (!ok) {
    rc = aa_error(AA_EIO, "%s: write failed: %s", path, strerror(errno));
    goto cleanup;
  }
  rc = aa_wfile_commit(&w);
cleanup:
  aa_wfile_abort(&w);
  json_decref(root);
  free(hdr);
  free(buf);
  free(conv);
  return rc;
}
