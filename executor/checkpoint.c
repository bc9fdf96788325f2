/* Checkpoint files (see checkpoint.h and docs/checkpoint-format.md).
 * All integers little-endian; the header is a fixed 256 bytes. */
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { FLAG_OPTIMIZER = 1 };

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

/* Host staging for backend buffers: 16 MiB at a time, so a save needs no
 * host copy of the model whatever the backend. */
#define STAGE_BYTES ((size_t)16 << 20)

/* Writes the first `bytes` of backend buffer b to f through stage, chaining
 * the FNV-1a checksum in *sum (byte-sequential, so chunking does not change
 * it). */
static int write_buf(FILE *f, const aa_flatbuf_t *b, size_t bytes, unsigned char *stage, uint64_t *sum,
                     const char *path) {
  for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
    size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
    int rc = b->ops->download(stage, (const char *)b->data + off, n);
    if (rc) return aa_error_wrap(rc, "%s: reading the model", path);
    *sum = aa_fnv1a(*sum, stage, n);
    if ((rc = write_all(f, stage, n, path))) return rc;
  }
  return 0;
}

int aa_ckpt_save(const char *path, const aa_gpt_t *m, const aa_adamw_t *opt, const aa_train_state_t *st) {
  header_t h = {0};
  h.version = AA_CKPT_VERSION;
  h.header_bytes = AA_CKPT_HEADER_BYTES;
  arch_fields(&m->arch, h.arch);
  h.dtype = m->params.dtype;
  h.flags = opt ? FLAG_OPTIMIZER : 0;
  h.n_params = m->n_params;
  h.adam_t = opt ? opt->t : 0;
  if (st) {
    h.step = st->step;
    h.rng = st->rng.s;
    h.data_pos = st->data_pos;
    h.seed = st->seed;
    h.loss_scale = st->loss_scale;
    h.scaler_iter = st->scaler_iter;
    h.scaler_last_overflow = st->scaler_last_overflow;
    h.scaler_hysteresis_left = st->scaler_hysteresis_left;
    h.skipped_steps = st->skipped_steps;
  }
  char hash[17];
  aa_arch_hash(&m->arch, hash);
  memcpy(h.model_hash, hash, 16);
  size_t pbytes = m->n_params * aa_dtype_size(m->params.dtype);
  unsigned char hdr[AA_CKPT_HEADER_BYTES];
  unsigned char *stage = malloc(STAGE_BYTES);
  if (!stage) return aa_error(AA_ENOMEM, "%s: cannot allocate a staging buffer", path);

  char tmp[AA_PATH_MAX + 8];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return aa_error(AA_EINVAL, "%s: path too long", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    free(stage);
    return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot create: %s", tmp, strerror(errno));
  }
  /* The payload is hashed as it streams out, so the header goes first with
   * no checksum and is written again, complete, at the end. */
  uint64_t sum = AA_FNV_INIT;
  encode_header(hdr, &h);
  int rc = write_all(f, hdr, sizeof hdr, tmp);
  if (!rc) rc = write_buf(f, &m->params, pbytes, stage, &sum, tmp);
  if (!rc && opt) rc = write_buf(f, &opt->m, m->n_params * sizeof(float), stage, &sum, tmp);
  if (!rc && opt) rc = write_buf(f, &opt->v, m->n_params * sizeof(float), stage, &sum, tmp);
  if (!rc) {
    h.checksum = sum;
    encode_header(hdr, &h);
    if (fseek(f, 0, SEEK_SET)) rc = aa_error(AA_EIO, "%s: seek failed: %s", tmp, strerror(errno));
    else rc = write_all(f, hdr, sizeof hdr, tmp);
  }
  free(stage);
  if (!rc && (fflush(f) || fsync(fileno(f)))) rc = aa_error(AA_EIO, "%s: sync failed: %s", tmp, strerror(errno));
  if (fclose(f) && !rc) rc = aa_error(AA_EIO, "%s: close failed: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, path)) rc = aa_error(AA_EIO, "%s: rename failed: %s", path, strerror(errno));
  if (rc) unlink(tmp);
  return rc;
}

/* Reads n bytes or fails with a truncation error. */
static int read_all(FILE *f, void *p, size_t n, const char *path) {
  if (fread(p, 1, n, f) != n) return aa_error(AA_EFORMAT, "%s: truncated checkpoint", path);
  return 0;
}

int aa_ckpt_load(const char *path, aa_gpt_t *m, aa_adamw_t *opt, aa_train_state_t *st) {
  FILE *f = fopen(path, "rb");
  if (!f) return aa_error(errno == ENOENT ? AA_ENOENT : AA_EIO, "%s: cannot open: %s", path, strerror(errno));
  int rc = 0;
  float *payload = NULL;
  unsigned char hdr[AA_CKPT_HEADER_BYTES];
  header_t h;
  struct stat sb;
  if (fstat(fileno(f), &sb)) {
    rc = aa_error(AA_EIO, "%s: stat failed: %s", path, strerror(errno));
    goto cleanup;
  }
  if ((size_t)sb.st_size < sizeof hdr || (rc = read_all(f, hdr, sizeof hdr, path))) {
    rc = aa_error(AA_EFORMAT, "%s: too short to be a checkpoint (%lld bytes)", path, (long long)sb.st_size);
    goto cleanup;
  }
  if (memcmp(hdr, AA_CKPT_MAGIC, 8)) {
    rc = aa_error(AA_EFORMAT, "%s: not an autoaccel checkpoint (bad magic)", path);
    goto cleanup;
  }
  decode_header(&h, hdr);
  if (h.version != AA_CKPT_VERSION || h.header_bytes != AA_CKPT_HEADER_BYTES) {
    rc = aa_error(AA_EFORMAT, "%s: unsupported checkpoint version %u (this build reads %d)", path, h.version,
                  AA_CKPT_VERSION);
    goto cleanup;
  }
  int32_t want[6];
  arch_fields(&m->arch, want);
  for (int i = 0; i < 6; i++) {
    if (h.arch[i] != want[i]) {
      rc = aa_error(AA_EINVAL, "%s: checkpoint %s is %d but the model has %d", path, arch_names[i], h.arch[i],
                    want[i]);
      goto cleanup;
    }
  }
  if (h.dtype != (uint32_t)m->params.dtype || h.n_params != m->n_params) {
    rc = aa_error(AA_ECORRUPT, "%s: header says %llu parameters of type %u, the architecture needs %zu of %u", path,
                  (unsigned long long)h.n_params, h.dtype, m->n_params, (unsigned)m->params.dtype);
    goto cleanup;
  }
  int has_opt = (h.flags & FLAG_OPTIMIZER) != 0;
  if (opt && !has_opt) {
    rc = aa_error(AA_EINVAL, "%s: holds weights only; resuming training needs a training checkpoint", path);
    goto cleanup;
  }
  /* Sizes are now known from the architecture, not from the file. */
  size_t pbytes = m->n_params * sizeof(float);
  size_t total = pbytes * (has_opt ? 3 : 1);
  if ((uint64_t)sb.st_size != sizeof hdr + total) {
    rc = aa_error(AA_EFORMAT, "%s: size %lld bytes, expected %zu (%s)", path, (long long)sb.st_size,
                  sizeof hdr + total, (size_t)sb.st_size < sizeof hdr + total ? "truncated" : "trailing bytes");
    goto cleanup;
  }
  payload = malloc(total);
  if (!payload) {
    rc = aa_error(AA_ENOMEM, "%s: cannot allocate %zu bytes", path, total);
    goto cleanup;
  }
  if ((rc = read_all(f, payload, total, path))) goto cleanup;
  if (aa_fnv1a(AA_FNV_INIT, payload, total) != h.checksum) {
    rc = aa_error(AA_ECORRUPT, "%s: checksum mismatch: the checkpoint is corrupt", path);
    goto cleanup;
  }
  if ((rc = m->params.ops->upload(m->params.data, payload, pbytes))) goto cleanup;
  aa_gpt_params_changed(m);
  if (opt) {
    if ((rc = opt->m.ops->upload(opt->m.data, (char *)payload + pbytes, pbytes)) ||
        (rc = opt->v.ops->upload(opt->v.data, (char *)payload + 2 * pbytes, pbytes)))
      goto cleanup;
    opt->t = h.adam_t;
  }
  if (st) {
    st->step = h.step;
    st->rng.s = h.rng;
    st->data_pos = h.data_pos;
    st->seed = h.seed;
    st->loss_scale = h.loss_scale;
    st->scaler_iter = h.scaler_iter;
    st->scaler_last_overflow = h.scaler_last_overflow;
    st->scaler_hysteresis_left = h.scaler_hysteresis_left;
    st->skipped_steps = h.skipped_steps;
  }
cleanup:
  free(payload);
  fclose(f);
  return rc;
}
