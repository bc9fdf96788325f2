/* Checkpoint files (see checkpoint.h and docs/checkpoint-format.md).
 * All integers little-endian; the header is a fixed 256 bytes. */
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/json.h"

enum { FLAG_OPTIMIZER = 1, FLAG_SHARD = 2 };

/* Header fields in file order. The struct is only an in-memory view; it is
 * serialised field by field so padding never reaches the file. */
typedef struct {
  uint32_t version, header_bytes;
  int32_t arch[6]; /* n_layer, n_head, d_model, d_ff, seq_len, vocab_size */
  uint32_t dtype, flags;
  uint64_t n_params;
  int32_t step, adam_t;
  uint64_t rng, data_pos, seed;
  char model_hash[16];
  uint64_t checksum; /* FNV-1a 64 over the payload */
  double loss_scale;
  int64_t scaler_iter, scaler_last_overflow;
  int32_t scaler_hysteresis_left;
  int64_t skipped_steps;
} header_t;

static const char *arch_names[6] = {"n_layer", "n_head", "d_model", "d_ff", "seq_len", "vocab_size"};

/* Cursor forms of the common little-endian helpers: each advances *p. */
static void put32(unsigned char **p, uint32_t v) {
  aa_put_le32(*p, v);
  *p += 4;
}
static void put64(unsigned char **p, uint64_t v) {
  aa_put_le64(*p, v);
  *p += 8;
}
static uint32_t get32(const unsigned char **p) {
  *p += 4;
  return aa_get_le32(*p - 4);
}
static uint64_t get64(const unsigned char **p) {
  *p += 8;
  return aa_get_le64(*p - 8);
}

static void encode_header(unsigned char out[AA_CKPT_HEADER_BYTES], const header_t *h) {
  memset(out, 0, AA_CKPT_HEADER_BYTES);
  memcpy(out, AA_CKPT_MAGIC, 8);
  unsigned char *p = out + 8;
  put32(&p, h->version);
  put32(&p, h->header_bytes);
  for (int i = 0; i < 6; i++) put32(&p, (uint32_t)h->arch[i]);
  put32(&p, h->dtype);
  put32(&p, h->flags);
  put64(&p, h->n_params);
  put32(&p, (uint32_t)h->step);
  put32(&p, (uint32_t)h->adam_t);
  put64(&p, h->rng);
  put64(&p, h->data_pos);
  put64(&p, h->seed);
  memcpy(p, h->model_hash, 16);
  p += 16;
  put64(&p, h->checksum);
  uint64_t bits;
  memcpy(&bits, &h->loss_scale, 8);
  put64(&p, bits);
  put64(&p, (uint64_t)h->scaler_iter);
  put64(&p, (uint64_t)h->scaler_last_overflow);
  put32(&p, (uint32_t)h->scaler_hysteresis_left);
  put32(&p, 0);
  put64(&p, (uint64_t)h->skipped_steps);
}

static void decode_header(header_t *h, const unsigned char in[AA_CKPT_HEADER_BYTES]) {
  const unsigned char *p = in + 8;
  h->version = get32(&p);
  h->header_bytes = get32(&p);
  for (int i = 0; i < 6; i++) h->arch[i] = (int32_t)get32(&p);
  h->dtype = get32(&p);
  h->flags = get32(&p);
  h->n_params = get64(&p);
  h->step = (int32_t)get32(&p);
  h->adam_t = (int32_t)get32(&p);
  h->rng = get64(&p);
  h->data_pos = get64(&p);
  h->seed = get64(&p);
  memcpy(h->model_hash, p, 16);
  p += 16;
  h->checksum = get64(&p);
  uint64_t bits = get64(&p);
  memcpy(&h->loss_scale, &bits, 8);
  h->scaler_iter = (int64_t)get64(&p);
  h->scaler_last_overflow = (int64_t)get64(&p);
  h->scaler_hysteresis_left = (int32_t)get32(&p);
  (void)get32(&p);
  h->skipped_steps = (int64_t)get64(&p);
}

static void arch_fields(const aa_arch_t *a, int32_t out[6]) {
  out[0] = a->n_layer;
  out[1] = a->n_head;
  out[2] = a->d_model;
  out[3] = a->d_ff;
  out[4] = a->seq_len;
  out[5] = a->vocab_size;
}

static int write_all(FILE *f, const void *p, size_t n, const char *path) {
  if (fwrite(p, 1, n, f) != n) return aa_error(AA_EIO, "%s: write failed: %s", path, strerror(errno));
  return 0;
}

/* Host staging for backend buffers: 16 MiB at a time, so neither a save nor
 * a load needs a host copy of the model whatever the backend. */
#define STAGE_BYTES ((size_t)16 << 20)

/* The header of a file of m: architecture, hash and st (may be NULL). */
static void state_header(header_t *h, const aa_gpt_t *m, const aa_train_state_t *st) {
  memset(h, 0, sizeof *h);
  h->version = AA_CKPT_VERSION;
  h->header_bytes = AA_CKPT_HEADER_BYTES;
  h->dtype = AA_F32;
  arch_fields(&m->arch, h->arch);
  char hash[17];
  aa_arch_hash(&m->arch, hash);
  memcpy(h->model_hash, hash, 16);
  if (st) {
    h->step = st->step;
    h->rng = st->rng.s;
    h->data_pos = st->data_pos;
    h->seed = st->seed;
    h->loss_scale = st->loss_scale;
    h->scaler_iter = st->scaler_iter;
    h->scaler_last_overflow = st->scaler_last_overflow;
    h->scaler_hysteresis_left = st->scaler_hysteresis_left;
    h->skipped_steps = st->skipped_steps;
  }
}

/* A run of payload bytes in backend memory. */
typedef struct {
  const void *data;
  size_t bytes;
} seg_t;

/* Writes header h and then the segments (backend memory of ops, in order)
 * to a fresh temporary, fsyncs it and renames it to path (common/file.h),
 * so a crash never leaves a torn file under the real name and a symlink
 * planted in the directory is never written through. Sets h->checksum:
 * FNV-1a 64 over the payload, hashed as it streams out (byte-sequential, so
 * the staging does not change it); the header is written once without it
 * and again at the end. */
static int write_file(const char *path, header_t *h, const aa_ops_t *ops, const seg_t *seg, int nseg) {
  unsigned char *stage = malloc(STAGE_BYTES);
  if (!stage) return aa_error(AA_ENOMEM, "%s: cannot allocate a staging buffer", path);
  aa_wfile_t w;
  int rc = aa_wfile_open(&w, path, 0666);
  if (rc) {
    free(stage);
    return rc;
  }
  FILE *f = w.f;
  unsigned char hdr[AA_CKPT_HEADER_BYTES];
  uint64_t sum = AA_FNV_INIT;
  h->checksum = 0;
  encode_header(hdr, h);
  rc = write_all(f, hdr, sizeof hdr, path);
  for (int i = 0; i < nseg && !rc; i++) {
    for (size_t off = 0; off < seg[i].bytes && !rc; off += STAGE_BYTES) {
      size_t n = seg[i].bytes - off < STAGE_BYTES ? seg[i].bytes - off : STAGE_BYTES;
      if ((rc = ops->download(stage, (const char *)seg[i].data + off, n))) {
        rc = aa_error_wrap(rc, "%s: reading the model", path);
        break;
      }
      sum = aa_fnv1a(sum, stage, n);
      rc = write_all(f, stage, n, path);
    }
  }
  if (!rc) {
    h->checksum = sum;
    encode_header(hdr, h);
    if (fseek(f, 0, SEEK_SET)) rc = aa_error(AA_EIO, "%s: seek failed: %s", path, strerror(errno));
    else rc = write_all(f, hdr, sizeof hdr, path);
  }
  free(stage);
  if (!rc) rc = aa_wfile_commit(&w);
  aa_wfile_abort(&w);
  return rc;
}

int aa_ckpt_save(const char *path, const aa_gpt_t *m, const aa_adamw_t *opt, const aa_train_state_t *st) {
  header_t h;
  state_header(&h, m, st);
  h.flags = opt ? FLAG_OPTIMIZER : 0;
  h.n_params = m->n_params;
  h.adam_t = opt ? opt->t : 0;
  size_t bytes = m->n_params * sizeof(float);
  seg_t seg[3] = {{m->params.data, bytes}, {opt ? opt->m.data : NULL, bytes}, {opt ? opt->v.data : NULL, bytes}};
  return write_file(path, &h, m->ops, seg, opt ? 3 : 1);
}

/* --- reading ------------------------------------------------------------------------- */

/* Opens path as one checkpoint file and checks, in this order, everything
 * that can be checked without the model's values: the header is there,
 * magic, version, architecture, kind (a whole-model file, or with shard
 * set one rank's file of a sharded checkpoint), element type and count n,
 * the optimizer state when want_opt, the exact size, and the checksum,
 * streamed over the whole payload. *out and *h are set only on success. */
static int open_file(const char *path, const aa_gpt_t *m, int shard, size_t n, int want_opt, FILE **out,
                     header_t *h) {
  FILE *f = fopen(path, "rb");
  if (!f) return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", path, strerror(errno));
  unsigned char hdr[AA_CKPT_HEADER_BYTES];
  unsigned char *buf = NULL;
  struct stat sb;
  int rc = 0;
  if (fstat(fileno(f), &sb)) {
    rc = aa_error(AA_EIO, "%s: stat failed: %s", path, strerror(errno));
    goto done;
  }
  if ((size_t)sb.st_size < sizeof hdr || fread(hdr, 1, sizeof hdr, f) != sizeof hdr) {
    rc = aa_error(AA_EFORMAT, "%s: too short to be a checkpoint (%lld bytes)", path, (long long)sb.st_size);
    goto done;
  }
  if (memcmp(hdr, AA_CKPT_MAGIC, 8)) {
    rc = aa_error(AA_EFORMAT, "%s: not an autoaccel checkpoint (bad magic)", path);
    goto done;
  }
  decode_header(h, hdr);
  if (h->version != AA_CKPT_VERSION || h->header_bytes != AA_CKPT_HEADER_BYTES) {
    rc = aa_error(AA_EFORMAT, "%s: unsupported checkpoint version %u (this build reads %d)", path, h->version,
                  AA_CKPT_VERSION);
    goto done;
  }
  int32_t want[6];
  arch_fields(&m->arch, want);
  for (int i = 0; i < 6; i++) {
    if (h->arch[i] != want[i]) {
      rc = aa_error(AA_EINVAL, "%s: checkpoint %s is %d but the model has %d", path, arch_names[i], h->arch[i],
                    want[i]);
      goto done;
    }
  }
  int is_shard = (h->flags & FLAG_SHARD) != 0;
  if (is_shard && !shard) {
    rc = aa_error(AA_EINVAL, "%s: is one rank's file of a sharded checkpoint; load its manifest", path);
    goto done;
  }
  if (!is_shard && shard) {
    rc = aa_error(AA_ECORRUPT, "%s: is not a rank file of a sharded checkpoint", path);
    goto done;
  }
  if (h->dtype != AA_F32 || h->n_params != n) {
    rc = aa_error(AA_ECORRUPT, "%s: header says %llu parameters of type %u, %s %zu of %u", path,
                  (unsigned long long)h->n_params, h->dtype, shard ? "the rank's share is" : "the architecture needs",
                  n, (unsigned)AA_F32);
    goto done;
  }
  int has_opt = (h->flags & FLAG_OPTIMIZER) != 0;
  if (want_opt && !has_opt) {
    rc = aa_error(AA_EINVAL, "%s: holds weights only; resuming training needs a training checkpoint", path);
    goto done;
  }
  /* Sizes are now known from the architecture, not from the file. */
  size_t total = n * sizeof(float) * (has_opt ? 3 : 1);
  if ((uint64_t)sb.st_size != sizeof hdr + total) {
    rc = aa_error(AA_EFORMAT, "%s: size %lld bytes, expected %zu (%s)", path, (long long)sb.st_size,
                  sizeof hdr + total, (size_t)sb.st_size < sizeof hdr + total ? "truncated" : "trailing bytes");
    goto done;
  }
  if (!(buf = malloc(STAGE_BYTES))) {
    rc = aa_error(AA_ENOMEM, "%s: cannot allocate a staging buffer", path);
    goto done;
  }
  uint64_t sum = AA_FNV_INIT;
  for (size_t off = 0; off < total; off += STAGE_BYTES) {
    size_t k = total - off < STAGE_BYTES ? total - off : STAGE_BYTES;
    if (fread(buf, 1, k, f) != k) {
      rc = aa_error(AA_EFORMAT, "%s: truncated checkpoint", path);
      goto done;
    }
    sum = aa_fnv1a(sum, buf, k);
  }
  if (sum != h->checksum) rc = aa_error(AA_ECORRUPT, "%s: checksum mismatch: the checkpoint is corrupt", path);
done:
  free(buf);
  if (rc) fclose(f);
  else *out = f;
  return rc;
}

#define MAX_WORLD 4096
#define MANIFEST_MAX ((size_t)1 << 20)
#define MANIFEST_FORMAT "autoaccel-sharded-checkpoint"

/* Start and length of rank r's chunk of a unit of n elements over world
 * ranks: the unit is padded to world * c, c = ceil(n / world), and rank r
 * owns [r c, (r + 1) c), of which the part below n is real (optim.h). */
static void chunk_of(size_t n, int world, int r, size_t *lo, size_t *len) {
  size_t c = (n + (size_t)world - 1) / (size_t)world, a = (size_t)r * c;
  *lo = a;
  *len = n > a ? (n - a < c ? n - a : c) : 0;
}

/* Name of rank r's file of the sharded checkpoint at path. */
static int rank_file(char *out, size_t cap, const char *path, int r, int world) {
  if (snprintf(out, cap, "%s.rank%dof%d", path, r, world) >= (int)cap)
    return aa_error(AA_EINVAL, "%s: path too long", path);
  return 0;
}

/* Where a checkpoint's elements are read from: one whole-model file
 * (world 0), or the world rank files of a manifest, in each of which
 * section s (0 parameters, 1 first moment, 2 second moment) holds the
 * rank's chunk of every unit in unit order. */
typedef struct {
  const aa_gpt_t *m;
  int world, n_units;
  FILE **f;       /* world files (one when world = 0) */
  size_t *E;      /* elements per section of rank r's file */
  size_t *prefix; /* [r * n_units + u]: elements of rank r's section before its chunk of unit u */
  header_t h;     /* the replicated state: the (first) file's header */
} source_t;

static void source_close(source_t *s) {
  for (int i = 0; s->f && i < (s->world ? s->world : 1); i++)
    if (s->f[i]) fclose(s->f[i]);
  free(s->f);
  free(s->E);
  free(s->prefix);
  memset(s, 0, sizeof *s);
}

/* Reads and checks the manifest at path, then opens and checks every rank
 * file it names (open_file, so each is checksummed whole), and that each
 * file is the one the manifest names (its checksum) and all hold the same
 * training state. */
static int open_manifest(source_t *s, const char *path, const aa_gpt_t *m) {
  FILE *f = fopen(path, "rb");
  if (!f) return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  char *text = NULL;
  size_t len = 0;
  int rc = 0;
  if (fstat(fileno(f), &sb)) rc = aa_error(AA_EIO, "%s: stat failed: %s", path, strerror(errno));
  else if ((size_t)sb.st_size > MANIFEST_MAX)
    rc = aa_error(AA_EFORMAT, "%s: %lld bytes, more than a checkpoint manifest may have (%zu)", path,
                  (long long)sb.st_size, MANIFEST_MAX);
  else if (!(text = malloc((size_t)sb.st_size + 1))) rc = aa_error(AA_ENOMEM, "out of memory");
  else if ((len = fread(text, 1, (size_t)sb.st_size, f)) != (size_t)sb.st_size)
    rc = aa_error(AA_EIO, "%s: read failed", path);
  fclose(f);
  json_t *root = NULL;
  if (!rc) rc = aa_json_parse_text(text, len, MANIFEST_MAX, path, "a checkpoint manifest", "a JSON object", &root);
  free(text);
  if (rc) return rc;
  const char *fmt = json_string_value(json_object_get(root, "format"));
  json_t *jw = json_object_get(root, "world"), *units = json_object_get(root, "units");
  json_t *files = json_object_get(root, "files");
  json_int_t world = json_is_integer(jw) ? json_integer_value(jw) : 0;
  int U = aa_gpt_n_units(m);
  if (!fmt || strcmp(fmt, MANIFEST_FORMAT) || json_integer_value(json_object_get(root, "version")) != 1) {
    rc = aa_error(AA_EFORMAT, "%s: not an autoaccel checkpoint (neither a checkpoint file nor a version 1 manifest)",
                  path);
  } else if (world < 1 || world > MAX_WORLD || !json_is_array(files) || json_array_size(files) != (size_t)world) {
    rc = aa_error(AA_EFORMAT, "%s: world must be 1..%d with one entry in files per rank", path, MAX_WORLD);
  } else if (json_integer_value(json_object_get(root, "n_params")) != (json_int_t)m->n_params ||
             !json_is_array(units) || json_array_size(units) != (size_t)U) {
    rc = aa_error(AA_EINVAL, "%s: the checkpoint is of a model with other parameters (n_params, units)", path);
  }
  for (int u = 0; u < U && !rc; u++) {
    size_t off, n;
    aa_gpt_unit(m, u, &off, &n);
    json_t *e = json_array_get(units, u);
    if (json_array_size(e) != 2 || json_integer_value(json_array_get(e, 0)) != (json_int_t)off ||
        json_integer_value(json_array_get(e, 1)) != (json_int_t)n)
      rc = aa_error(AA_EINVAL, "%s: unit %d is not [%zu, %zu] as in this model", path, u, off, n);
  }
  if (!rc) {
    s->world = (int)world;
    s->n_units = U;
    s->f = calloc((size_t)world, sizeof *s->f);
    s->E = calloc((size_t)world, sizeof *s->E);
    s->prefix = calloc((size_t)world * (size_t)U, sizeof *s->prefix);
    if (!s->f || !s->E || !s->prefix) rc = aa_error(AA_ENOMEM, "out of memory");
  }
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path + 1) : 0;
  for (int r = 0; r < world && !rc; r++) {
    json_t *e = json_array_get(files, r);
    const char *name = json_string_value(json_object_get(e, "file"));
    const char *want = json_string_value(json_object_get(e, "checksum"));
    if (json_integer_value(json_object_get(e, "rank")) != r || !name || !*name || strchr(name, '/') ||
        strlen(name) > 255 || !want || strlen(want) != 16) {
      rc = aa_error(AA_EFORMAT,
                    "%s: files[%d] must be {\"rank\": %d, \"file\": a plain file name, \"checksum\": 16 hex "
                    "digits}",
                    path, r, r);
      break;
    }
    for (int u = 0; u < U; u++) {
      size_t off, n, lo, len;
      aa_gpt_unit(m, u, &off, &n);
      chunk_of(n, (int)world, r, &lo, &len);
      s->prefix[(size_t)r * U + u] = s->E[r];
      s->E[r] += len;
    }
    char file[AA_PATH_MAX + 300];
    if (snprintf(file, sizeof file, "%.*s%s", dir_len, path, name) >= (int)sizeof file) {
      rc = aa_error(AA_EINVAL, "%s: path too long", path);
      break;
    }
    header_t h;
    if ((rc = open_file(file, m, 1, s->E[r], 1, &s->f[r], &h))) break;
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)h.checksum);
    if (strcmp(got, want)) {
      rc = aa_error(AA_ECORRUPT, "%s: checksum %s, but the manifest %s names %s: the file is from another save", file,
                    got, path, want);
    } else if (r == 0) {
      s->h = h;
    } else if (h.step != s->h.step || h.adam_t != s->h.adam_t || h.rng != s->h.rng || h.data_pos != s->h.data_pos) {
      rc = aa_error(AA_ECORRUPT, "%s: the training state (step %d) differs from rank 0's (step %d)", file, h.step,
                    s->h.step);
    }
  }
  json_decref(root);
  return rc;
}

/* Opens path as whichever it is: a manifest (JSON text) or one file. */
static int source_open(source_t *s, const char *path, const aa_gpt_t *m, int want_opt) {
  memset(s, 0, sizeof *s);
  s->m = m;
  FILE *f = fopen(path, "rb");
  if (!f) return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", path, strerror(errno));
  int c;
  while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
  fclose(f);
  int rc;
  if (c == '{') {
    rc = open_manifest(s, path, m);
  } else if (!(s->f = calloc(1, sizeof *s->f))) {
    rc = aa_error(AA_ENOMEM, "out of memory");
  } else {
    rc = open_file(path, m, 0, m->n_params, want_opt, &s->f[0], &s->h);
  }
  if (rc) source_close(s);
  return rc;
}

/* Reads elements [a, a + n) of section sec, all inside unit u, into dst
 * (host). */
static int source_read(source_t *s, int sec, int u, size_t a, size_t n, float *dst) {
  if (!s->world) {
    off_t pos = (off_t)(AA_CKPT_HEADER_BYTES + ((size_t)sec * s->m->n_params + a) * sizeof(float));
    if (fseeko(s->f[0], pos, SEEK_SET) || fread(dst, sizeof(float), n, s->f[0]) != n)
      return aa_error(AA_EIO, "checkpoint: read failed");
    return 0;
  }
  size_t uoff, un;
  aa_gpt_unit(s->m, u, &uoff, &un);
  size_t c = (un + (size_t)s->world - 1) / (size_t)s->world;
  while (n) {
    int r = (int)((a - uoff) / c);
    size_t lo = uoff + (size_t)r * c, take = lo + c - a < n ? lo + c - a : n;
    size_t el = (size_t)sec * s->E[r] + s->prefix[(size_t)r * s->n_units + u] + (a - lo);
    if (fseeko(s->f[r], (off_t)(AA_CKPT_HEADER_BYTES + el * sizeof(float)), SEEK_SET) ||
        fread(dst, sizeof(float), take, s->f[r]) != take)
      return aa_error(AA_EIO, "checkpoint: read of rank %d's file failed", r);
    a += take;
    dst += take;
    n -= take;
  }
  return 0;
}

/* The load behind aa_ckpt_load (z NULL: the full buffers of m and opt) and
 * aa_ckpt_load_zero (what z holds). Every file is checked before anything
 * is written. */
static int load(const char *path, aa_gpt_t *m, aa_adamw_t *opt, aa_zero_t *z, aa_train_state_t *st) {
  int want_opt = z ? st != NULL : opt != NULL;
  source_t s;
  int rc = source_open(&s, path, m, want_opt);
  if (rc) return rc;
  int U = aa_gpt_n_units(m);
  size_t most = 0;
  for (int u = 0; u < U; u++) {
    size_t off, n;
    aa_gpt_unit(m, u, &off, &n);
    if (n > most) most = n;
  }
  float *buf = malloc(most * sizeof(float));
  if (!buf) rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
  for (int which = 0; which < (want_opt ? 3 : 1) && !rc; which++) {
    for (int u = 0; u < U && !rc; u++) {
      aa_zero_range_t r;
      if (z) {
        aa_zero_range(z, m, which, u, &r);
      } else {
        const aa_flatbuf_t *b = which == 0 ? &m->params : which == 1 ? &opt->m : &opt->v;
        aa_gpt_unit(m, u, &r.offset, &r.n);
        r.data = (float *)b->data + r.offset;
      }
      if (!r.n) continue;
      if (!(rc = source_read(&s, which, u, r.offset, r.n, buf)))
        rc = m->ops->upload(r.data, buf, r.n * sizeof(float));
    }
  }
  free(buf);
  if (!rc) {
    aa_gpt_params_changed(m);
    if (z) z->held[0] = z->held[1] = z->held[2] = -1;
    if (want_opt) {
      if (z) z->opt.t = s.h.adam_t;
      else opt->t = s.h.adam_t;
    }
    if (st) {
      st->step = s.h.step;
      st->rng.s = s.h.rng;
      st->data_pos = s.h.data_pos;
      st->seed = s.h.seed;
      st->loss_scale = s.h.loss_scale;
      st->scaler_iter = s.h.scaler_iter;
      st->scaler_last_overflow = s.h.scaler_last_overflow;
      st->scaler_hysteresis_left = s.h.scaler_hysteresis_left;
      st->skipped_steps = s.h.skipped_steps;
    }
  }
  source_close(&s);
  return rc;
}

int aa_ckpt_load(const char *path, aa_gpt_t *m, aa_adamw_t *opt, aa_train_state_t *st) {
  return load(path, m, opt, NULL, st);
}

int aa_ckpt_load_zero(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_train_state_t *st) {
  return load(path, m, NULL, z, st);
}

/* --- data-parallel saves ------------------------------------------------------------- */

/* Makes each rank's outcome of one part of a collective save everyone's:
 * the failing rank gets its own error back, the others an error naming the
 * save, and 0 only when every rank succeeded. A collective: every rank
 * calls it, whatever happened before. */
static int agree(aa_zero_t *z, int rc, const char *path) {
  char msg[512] = "";
  if (rc) snprintf(msg, sizeof msg, "%s", aa_last_error());
  float failed = rc ? 1.0f : 0.0f;
  int crc = aa_zero_all_reduce_host(z, &failed, 1, AA_COMM_SUM);
  if (rc) return aa_error(rc, "%s", msg);
  if (crc) return aa_error_wrap(crc, "%s: checkpoint", path);
  if (failed > 0)
    return aa_error(AA_EIO, "%s: %d of %d ranks could not write their part of the checkpoint", path, (int)failed,
                    z->world);
  return 0;
}

/* This rank's file: its chunk of every unit, in the three sections. */
static int write_shard(const char *file, const aa_gpt_t *m, const aa_zero_t *z, const aa_train_state_t *st) {
  int U = z->n_units;
  seg_t *seg = calloc(3 * (size_t)U, sizeof *seg);
  if (!seg) return aa_error(AA_ENOMEM, "out of memory");
  header_t h;
  state_header(&h, m, st);
  h.flags = FLAG_OPTIMIZER | FLAG_SHARD;
  h.adam_t = z->opt.t;
  int k = 0;
  for (int which = 0; which < 3; which++) {
    for (int u = 0; u < U; u++) {
      aa_zero_range_t r;
      aa_zero_range(z, m, which, u, &r);
      size_t lo = z->unit_off[u] + (size_t)z->rank * z->chunk[u];
      if (which == 0) h.n_params += z->valid[u];
      if (z->valid[u]) seg[k++] = (seg_t){r.data + (lo - r.offset), z->valid[u] * sizeof(float)};
    }
  }
  int rc = write_file(file, &h, m->ops, seg, k);
  free(seg);
  return rc;
}

/* Rank 0, once every rank file is in place: the manifest that names them
 * with their checksums (read back from their headers), written atomically
 * as the files are. */
static int write_manifest(const char *path, const aa_gpt_t *m, const aa_zero_t *z, int step) {
  char file[AA_PATH_MAX + 32];
  aa_wfile_t w;
  int rc = aa_wfile_open(&w, path, 0666);
  if (rc) return rc;
  FILE *f = w.f;
  char hash[17];
  aa_arch_hash(&m->arch, hash);
  fprintf(f,
          "{\"format\": \"" MANIFEST_FORMAT "\", \"version\": 1, \"world\": %d, \"zero\": %d, \"step\": %d, "
          "\"n_params\": %zu, \"model_hash\": \"%s\",\n \"units\": [",
          z->world, z->stage, step, m->n_params, hash);
  for (int u = 0; u < z->n_units; u++) fprintf(f, "%s[%zu, %zu]", u ? ", " : "", z->unit_off[u], z->unit_n[u]);
  fprintf(f, "],\n \"files\": [");
  const char *slash = strrchr(path, '/');
  for (int r = 0; r < z->world && !rc; r++) {
    unsigned char hdr[AA_CKPT_HEADER_BYTES];
    if ((rc = rank_file(file, sizeof file, path, r, z->world))) break;
    FILE *rf = fopen(file, "rb");
    size_t got = rf ? fread(hdr, 1, sizeof hdr, rf) : 0;
    if (rf) fclose(rf);
    if (got != sizeof hdr) {
      rc = aa_error(AA_EIO, "%s: cannot read back the header of rank %d's file", file, r);
      break;
    }
    header_t h;
    decode_header(&h, hdr);
    fprintf(f, "%s\n  {\"rank\": %d, \"file\": \"%s\", \"elements\": %llu, \"checksum\": \"%016llx\"}", r ? "," : "",
            r, slash ? strrchr(file, '/') + 1 : file, (unsigned long long)h.n_params,
            (unsigned long long)h.checksum);
  }
  fprintf(f, "]}\n");
  if (!rc) rc = aa_wfile_commit(&w);
  aa_wfile_abort(&w);
  return rc;
}

int aa_ckpt_save_zero(const char *path, const aa_gpt_t *m, aa_zero_t *z, const aa_train_state_t *st) {
  if (z->stage == 0) return agree(z, z->rank == 0 ? aa_ckpt_save(path, m, &z->opt, st) : 0, path);
  char file[AA_PATH_MAX + 32];
  int rc = rank_file(file, sizeof file, path, z->rank, z->world);
  if (!rc) rc = write_shard(file, m, z, st);
  if ((rc = agree(z, rc, path))) return rc;
  return agree(z, z->rank == 0 ? write_manifest(path, m, z, st ? st->step : 0) : 0, path);
}
