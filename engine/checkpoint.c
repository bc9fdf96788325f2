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
  /* A tensor-parallel rank file's place (all 0 in every other file): the
   * tensor degree and rank, the data shards of the rank's state and which
   * one the file holds. */
  uint32_t tp, tp_rank, shards, shard;
  /* A pipeline rank file's place (all 0 in every other file): the
   * pipeline degree and rank, the rank's chunks (vpp) and the first block
   * of each (the virtual stages' boundaries, which the manifest collects). */
  uint32_t pp, pp_rank, vpp, chunk_lo[AA_PP_CHUNKS_MAX];
} header_t;

/* The pipeline place ends at byte 244 of the header. */
_Static_assert(168 + 12 + 4 * AA_PP_CHUNKS_MAX <= AA_CKPT_HEADER_BYTES,
               "the header has no room for the place");

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
  put32(&p, h->tp);
  put32(&p, h->tp_rank);
  put32(&p, h->shards);
  put32(&p, h->shard);
  put32(&p, h->pp);
  put32(&p, h->pp_rank);
  put32(&p, h->vpp);
  for (int c = 0; c < AA_PP_CHUNKS_MAX; c++) put32(&p, h->chunk_lo[c]);
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
  h->tp = get32(&p);
  h->tp_rank = get32(&p);
  h->shards = get32(&p);
  h->shard = get32(&p);
  h->pp = get32(&p);
  h->pp_rank = get32(&p);
  h->vpp = get32(&p);
  for (int c = 0; c < AA_PP_CHUNKS_MAX; c++) h->chunk_lo[c] = get32(&p);
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
  if (m->tp > 1)
    return aa_error(AA_EINVAL, "%s: tensor rank %d of %d holds a slice of the model (its group saves together)",
                    path, m->tp_rank, m->tp);
  if (m->pp > 1)
    return aa_error(AA_EINVAL,
                    "%s: pipeline rank %d of %d holds part of the model (its group saves together)", path,
                    m->pipe.stage, m->pp);
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
  /* The six fields agree; the hash also covers the family and llama's
   * fields (a gpt2 and a llama of one shape differ only there). */
  char mh[17];
  aa_arch_hash(&m->arch, mh);
  if (memcmp(h->model_hash, mh, 16) != 0) {
    rc = aa_error(AA_EINVAL, "%s: checkpoint is of another model (architecture hash %.16s, this %s model's %s)", path,
                  h->model_hash, m->arch.family, mh);
    goto done;
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

/* Name of the file that holds data shard r of `shards` of the state of
 * pipeline rank p and tensor rank t in the sharded checkpoint at path:
 * "path.rank<r>of<shards>" at tensor and pipeline degree 1 (as before
 * either existed), "path.tp<t>of<tp>.rank<r>of<shards>" at pipeline degree
 * 1, else "path.pp<p>of<pp>.tp<t>of<tp>.rank<r>of<shards>". */
static int rank_file(char *out, size_t cap, const char *path, int pp, int p, int tp, int t, int r,
                     int shards) {
  int n = pp > 1    ? snprintf(out, cap, "%s.pp%dof%d.tp%dof%d.rank%dof%d", path, p, pp, t, tp, r, shards)
          : tp == 1 ? snprintf(out, cap, "%s.rank%dof%d", path, r, shards)
                    : snprintf(out, cap, "%s.tp%dof%d.rank%dof%d", path, t, tp, r, shards);
  if (n >= (int)cap) return aa_error(AA_EINVAL, "%s: path too long", path);
  return 0;
}

/* --- saved layouts ------------------------------------------------------------------ */

/* Every rank's table in one layout (tensor degree, pipeline place), from
 * which a checkpoint saved in one layout is read in another: each tensor's
 * slice on each rank and where it lies in the whole model. The units
 * (wte|wpe, each block, lnf) are the same size on every tensor rank of one
 * pipeline rank; a pipeline rank holds only some of them. */
typedef struct {
  int tp, pp, vpp, n_tensors, n_units;
  aa_pp_place_t *place; /* pp places (what each pipeline rank holds) */
  /* pp * tp tables: pipeline rank p's tensor rank t's at tab + (p * tp + t)
   * * n_tensors. A copy of wte|wpe (the last stage's) has no runs: only its
   * owner's is saved, and read. */
  aa_tensor_desc_t *tab;
  /* [p * n_units + u]: pipeline rank p's units in its buffer as its files
   * hold them (0 elements for a unit it does not hold, or holds a copy of). */
  size_t *unit_off, *unit_n;
  size_t n_local;  /* the elements of the rank of table 0: the single-file layout's at tp = pp = 1 */
  size_t n_global; /* the whole model's */
} layout_t;

static void layout_free(layout_t *l) {
  free(l->tab);
  free(l->unit_off);
  free(l->place);
  memset(l, 0, sizeof *l);
}

/* The layout of architecture a at tensor degree tp, which must divide
 * n_head and d_ff, and pipeline degree pp with vpp chunks a rank cut at
 * bounds (pp * vpp + 1 boundaries; NULL at pp 1), which must obey the
 * pipeline rules (strategies/pipeline.h); else AA_EFORMAT naming path,
 * whose checkpoint claims the layout. */
static int layout_init(layout_t *l, const aa_arch_t *a, int tp, int pp, int vpp, const int *bounds,
                       const char *path) {
  memset(l, 0, sizeof *l);
  /* Saved files hold whole experts: a save with experts split over the
   * tensor ranks writes one whole-model file (save_experts). */
  aa_arch_t whole = *a;
  whole.moe.etp = 0;
  a = &whole;
  if (tp < 1 || tp > MAX_WORLD || a->n_head % tp || a->d_ff % tp || aa_arch_kv_heads(a) % tp)
    return aa_error(AA_EFORMAT, "%s: tensor degree %d, which does not divide this model's n_head %d, d_ff %d and key/value heads %d",
                    path, tp, a->n_head, a->d_ff, aa_arch_kv_heads(a));
  if (pp < 1 || vpp < 1 || (pp > 1 && !bounds) || (long long)pp * vpp > AA_STRATEGY_STAGES_MAX ||
      (pp == 1 && vpp != 1))
    return aa_error(AA_EFORMAT, "%s: pipeline degree %d with %d virtual stages a rank is no layout", path, pp,
                    vpp);
  /* The pipeline rules are the strategy's: a custom partition at bounds. */
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.degree[AA_AXIS_PIPELINE] = pp;
  s.vpp = vpp;
  s.schedule = vpp > 1 ? AA_SCHEDULE_INTERLEAVED : AA_SCHEDULE_1F1B;
  if (pp > 1) {
    s.partition = AA_PARTITION_CUSTOM;
    int rc = aa_strategy_set_bounds(&s, bounds, pp * vpp + 1);
    if (rc) return rc;
  }
  l->tp = tp;
  l->pp = pp;
  l->vpp = vpp;
  l->n_tensors = aa_gpt_n_tensors(a);
  l->n_units = aa_sizes_units(a);
  l->place = calloc((size_t)pp, sizeof *l->place);
  l->tab = calloc((size_t)pp * (size_t)tp * (size_t)l->n_tensors, sizeof *l->tab);
  l->unit_off = calloc(2 * (size_t)pp * (size_t)l->n_units, sizeof *l->unit_off);
  if (!l->place || !l->tab || !l->unit_off) {
    layout_free(l);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  l->unit_n = l->unit_off + (size_t)pp * l->n_units;
  for (int p = 0; p < pp; p++) {
    if (aa_pp_place(a, &s, 0, p, &l->place[p])) {
      char why[512];
      snprintf(why, sizeof why, "%s", aa_last_error());
      layout_free(l);
      return aa_error(AA_EFORMAT, "%s: the saved pipeline layout is not one of this model: %s", path, why);
    }
    size_t *off = l->unit_off + (size_t)p * l->n_units, *n = l->unit_n + (size_t)p * l->n_units;
    for (int t = 0; t < tp; t++) {
      aa_tensor_desc_t *tab = l->tab + ((size_t)p * tp + t) * l->n_tensors;
      aa_gpt_tensor_table_pp(a, tp, t, pp > 1 ? &l->place[p] : NULL, tab);
      for (int i = 0, prev = -1; i < l->n_tensors; i++) {
        aa_tensor_desc_t *d = &tab[i];
        int u = d->unit;
        if (d->copy) d->runs = 0;
        if (t) continue;
        if (u != prev) off[u] = d->offset;
        if (!d->copy) n[u] += d->numel;
        prev = u;
      }
    }
  }
  const aa_tensor_desc_t *last = &l->tab[l->n_tensors - 1];
  l->n_local = last->offset + last->numel;
  l->n_global = last->goffset + last->gnumel;
  return 0;
}

/* Whether model m's own files would be the saved layout's: the same tensor
 * degree and pipeline place. */
static int layout_is_models(const layout_t *l, const aa_gpt_t *m) {
  /* A saved layout has whole experts: an expert-parallel rank's slices are
   * read through the tables. */
  if (l->tp != m->tp || l->pp != m->pp || m->ep > 1 || aa_sizes_etp(&m->arch, m->tp) > 1) return 0;
  if (m->pp == 1) return 1;
  const aa_pp_place_t *p = &l->place[m->pipe.stage];
  return p->vpp == m->pipe.vpp && !memcmp(p->lo, m->pipe.lo, (size_t)p->vpp * sizeof *p->lo) &&
         !memcmp(p->hi, m->pipe.hi, (size_t)p->vpp * sizeof *p->hi);
}

/* --- reading checkpoints ------------------------------------------------------------- */

/* Where a checkpoint's elements are read from: one whole-model file
 * (shards = 0), or the files of a manifest, pp * tp * shards of them: file
 * (p * tp + t) * shards + r holds data shard r of the state of pipeline
 * rank p's tensor rank t (saved rank q = p * tp + t, its table q of the
 * layout), and in it section s (0 parameters, 1 first moment, 2 second
 * moment) holds the shard's chunk of every unit it saves, in unit order. */
typedef struct {
  const aa_gpt_t *m;
  layout_t lay;   /* the layout the checkpoint was saved in */
  int shards, n_files;
  FILE **f;       /* n_files files */
  size_t *E;      /* elements per section of each file */
  size_t *prefix; /* [file * n_units + u]: elements of the file's section before its chunk of unit u */
  header_t h;     /* the replicated state: the first file's header */
} source_t;

static void source_close(source_t *s) {
  for (int i = 0; s->f && i < s->n_files; i++)
    if (s->f[i]) fclose(s->f[i]);
  free(s->f);
  free(s->E);
  free(s->prefix);
  layout_free(&s->lay);
  memset(s, 0, sizeof *s);
}

/* The manifest at path as JSON (*out transferred), at most MANIFEST_MAX
 * bytes. */
static int read_manifest(const char *path, json_t **out) {
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
  if (!rc) rc = aa_json_parse_text(text, len, MANIFEST_MAX, path, "a checkpoint manifest", "a JSON object", out);
  free(text);
  return rc;
}

/* Integer member key of o, or -1 when it is missing or not an integer
 * in [0, max]. */
static int json_count(const json_t *o, const char *key, int max) {
  json_t *v = json_object_get(o, key);
  json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
  return x >= 0 && x <= max ? (int)x : -1;
}

/* The manifest's layout fields: version 1 has only "world"; 2 adds the
 * tensor degree; 3 the pipeline degree, the chunks a rank and every
 * virtual stage's first block. */
typedef struct {
  int version, dp, tp, pp, vpp, zero, shards;
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
} manifest_layout_t;

/* Reads root's layout fields into *ml and checks their ranges (the
 * pipeline rules are layout_init's). Every count is bounded before
 * anything is sized from it. */
static int manifest_layout(manifest_layout_t *ml, json_t *root, const aa_arch_t *a, const char *path) {
  const char *fmt = json_string_value(json_object_get(root, "format"));
  json_t *files = json_object_get(root, "files"), *jv = json_object_get(root, "version");
  memset(ml, 0, sizeof *ml);
  ml->version = json_is_integer(jv) ? (int)json_integer_value(jv) : 0;
  ml->tp = ml->pp = ml->vpp = 1;
  if (!fmt || strcmp(fmt, MANIFEST_FORMAT) || ml->version < 1 || ml->version > 3)
    return aa_error(
        AA_EFORMAT,
        "%s: not an autoaccel checkpoint (neither a checkpoint file nor a version 1, 2 or 3 manifest)", path);
  if (ml->version == 1) {
    ml->dp = ml->shards = json_count(root, "world", MAX_WORLD);
    if (ml->shards < 1 || !json_is_array(files) || json_array_size(files) != (size_t)ml->shards)
      return aa_error(AA_EFORMAT, "%s: world must be 1..%d with one entry in files per rank", path,
                      MAX_WORLD);
    return 0;
  }
  ml->dp = json_count(root, "dp", MAX_WORLD);
  ml->zero = json_count(root, "zero", 3);
  ml->tp = json_count(root, "tp", MAX_WORLD);
  if (ml->version == 3) {
    ml->pp = json_count(root, "pp", MAX_WORLD);
    ml->vpp = json_count(root, "vpp", AA_PP_CHUNKS_MAX);
  }
  ml->shards = ml->zero > 0 ? ml->dp : 1;
  if (ml->dp < 1 || ml->tp < 1 || ml->pp < 1 || ml->vpp < 1 || ml->zero < 0 ||
      (long long)ml->dp * ml->tp * ml->pp > MAX_WORLD)
    return aa_error(AA_EFORMAT,
                    "%s: dp, tp and pp must be at least 1, dp x tp x pp at most %d, vpp 1..%d and zero 0..3",
                    path, MAX_WORLD, AA_PP_CHUNKS_MAX);
  if (ml->version == 3) {
    json_t *jb = json_object_get(root, "bounds");
    int S = ml->pp * ml->vpp;
    if (ml->pp < 2 || S > AA_STRATEGY_STAGES_MAX || !json_is_array(jb) ||
        json_array_size(jb) != (size_t)S + 1)
      return aa_error(AA_EFORMAT,
                      "%s: a version 3 manifest has pp >= 2 and bounds: pp x vpp + 1 = %d block boundaries",
                      path, S + 1);
    for (int k = 0; k <= S; k++) {
      json_t *e = json_array_get(jb, (size_t)k);
      json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
      if (x < 0 || x > a->n_layer)
        return aa_error(AA_EFORMAT, "%s: bounds[%d] must be a block boundary 0..n_layer %d", path, k,
                        a->n_layer);
      ml->bounds[k] = (int)x;
    }
  }
  size_t want = (size_t)ml->pp * (size_t)ml->tp * (size_t)ml->shards;
  if (!json_is_array(files) || json_array_size(files) != want)
    return aa_error(AA_EFORMAT, "%s: files must have %stp x %s = %zu entries", path,
                    ml->version == 3 ? "pp x " : "", ml->zero ? "dp" : "1", want);
  return 0;
}

/* Whether the units entry e is pipeline rank p's units in layout l. */
static int units_match(const json_t *e, const layout_t *l, int p, int *bad_unit) {
  const int U = l->n_units;
  if (!json_is_array(e) || json_array_size(e) != (size_t)U) return *bad_unit = -1, 0;
  for (int u = 0; u < U; u++) {
    json_t *x = json_array_get(e, (size_t)u);
    size_t i = (size_t)p * U + u;
    if (json_array_size(x) != 2 || json_integer_value(json_array_get(x, 0)) != (json_int_t)l->unit_off[i] ||
        json_integer_value(json_array_get(x, 1)) != (json_int_t)l->unit_n[i])
      return *bad_unit = u, 0;
  }
  return 1;
}

/* Reads and checks the manifest at path, then opens and checks every rank
 * file it names (open_file, so each is checksummed whole), and that each
 * file is the one the manifest names (its checksum), sits where the
 * manifest puts it (a tensor or pipeline rank's file header says where),
 * and all hold the same training state. Version 1: the files of a run
 * without tensor or pipeline parallelism, one per data rank ("world");
 * version 2: the layout (dp, tp, zero) and one file per tensor rank and
 * data shard; version 3: the pipeline layout too (pp, vpp, bounds), the
 * units of each pipeline rank, and one file per pipeline rank, tensor rank
 * and data shard. */
static int open_manifest(source_t *s, const char *path, const aa_gpt_t *m, int want_opt) {
  json_t *root = NULL;
  int rc = read_manifest(path, &root);
  if (rc) return rc;
  json_t *units = json_object_get(root, "units"), *files = json_object_get(root, "files");
  manifest_layout_t ml;
  rc = manifest_layout(&ml, root, &m->arch, path);
  const int version = ml.version, tp = ml.tp, pp = ml.pp, shards = ml.shards;
  if (!rc) rc = layout_init(&s->lay, &m->arch, tp, pp, ml.vpp, pp > 1 ? ml.bounds : NULL, path);
  const int U = s->lay.n_units;
  if (!rc && (json_integer_value(json_object_get(root, "n_params")) != (json_int_t)s->lay.n_global ||
              !json_is_array(units) || json_array_size(units) != (size_t)(version == 3 ? pp : U)))
    rc =
        aa_error(AA_EINVAL, "%s: the checkpoint is of a model with other parameters (n_params, units)", path);
  /* Version 3 lists each pipeline rank's units, earlier ones the units of
   * the one (tensor rank's) layout. */
  for (int p = 0; p < (version == 3 ? pp : 1) && !rc; p++) {
    int u;
    if (!units_match(version == 3 ? json_array_get(units, (size_t)p) : units, &s->lay, p, &u))
      rc = u < 0 ? aa_error(AA_EINVAL, "%s: units[%d] must list the %d units of pipeline rank %d", path, p, U,
                            p)
           : version == 3
               ? aa_error(AA_EINVAL, "%s: unit %d of pipeline rank %d is not [%zu, %zu] as in its layout",
                          path, u, p, s->lay.unit_off[(size_t)p * U + u], s->lay.unit_n[(size_t)p * U + u])
               : aa_error(AA_EINVAL, "%s: unit %d is not [%zu, %zu] as in this model", path, u,
                          s->lay.unit_off[u], s->lay.unit_n[u]);
  }
  if (!rc) {
    s->shards = shards;
    s->n_files = pp * tp * shards;
    s->f = calloc((size_t)s->n_files, sizeof *s->f);
    s->E = calloc((size_t)s->n_files, sizeof *s->E);
    s->prefix = calloc((size_t)s->n_files * (size_t)U, sizeof *s->prefix);
    if (!s->f || !s->E || !s->prefix) rc = aa_error(AA_ENOMEM, "out of memory");
  }
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path + 1) : 0;
  for (int i = 0; i < s->n_files && !rc; i++) {
    int p = i / (tp * shards), t = i / shards % tp, r = i % shards;
    json_t *e = json_array_get(files, (size_t)i);
    const char *name = json_string_value(json_object_get(e, "file"));
    const char *want = json_string_value(json_object_get(e, "checksum"));
    if (json_integer_value(json_object_get(e, "rank")) != r ||
        (version >= 2 && json_integer_value(json_object_get(e, "tensor")) != t) ||
        (version == 3 && json_integer_value(json_object_get(e, "pipe")) != p) || !name || !*name ||
        strchr(name, '/') || strlen(name) > 255 || !want || strlen(want) != 16) {
      if (version == 1)
        rc =
            aa_error(AA_EFORMAT,
                     "%s: files[%d] must be {\"rank\": %d, \"file\": a plain file name, \"checksum\": 16 hex "
                     "digits}",
                     path, i, r);
      else if (version == 2)
        rc = aa_error(AA_EFORMAT,
                      "%s: files[%d] must be {\"tensor\": %d, \"rank\": %d, \"file\": a plain file name, "
                      "\"checksum\": 16 hex digits}",
                      path, i, t, r);
      else
        rc = aa_error(
            AA_EFORMAT,
            "%s: files[%d] must be {\"pipe\": %d, \"tensor\": %d, \"rank\": %d, \"file\": a plain file "
            "name, \"checksum\": 16 hex digits}",
            path, i, p, t, r);
      break;
    }
    for (int u = 0; u < U; u++) {
      size_t lo, len;
      chunk_of(s->lay.unit_n[(size_t)p * U + u], shards, r, &lo, &len);
      s->prefix[(size_t)i * U + u] = s->E[i];
      s->E[i] += len;
    }
    char file[AA_PATH_MAX + 300];
    if (snprintf(file, sizeof file, "%.*s%s", dir_len, path, name) >= (int)sizeof file) {
      rc = aa_error(AA_EINVAL, "%s: path too long", path);
      break;
    }
    header_t h;
    if ((rc = open_file(file, m, 1, s->E[i], want_opt, &s->f[i], &h))) break;
    char got[17];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)h.checksum);
    /* Files written at tensor degree 1 have zeros where a tensor rank's
     * file says where it belongs, and files written at pipeline degree 1
     * zeros where a pipeline rank's does. */
    uint32_t place[4] = {version >= 2 ? (uint32_t)tp : 0, version >= 2 ? (uint32_t)t : 0,
                         version >= 2 ? (uint32_t)shards : 0, version >= 2 ? (uint32_t)r : 0};
    header_t pipe = {0};
    if (version == 3) {
      const aa_pp_place_t *pl = &s->lay.place[p];
      pipe.pp = (uint32_t)pp;
      pipe.pp_rank = (uint32_t)p;
      pipe.vpp = (uint32_t)pl->vpp;
      for (int c = 0; c < pl->vpp; c++)
        pipe.chunk_lo[c] = (uint32_t)pl->lo[c];
    }
    if (strcmp(got, want)) {
      rc = aa_error(AA_ECORRUPT, "%s: checksum %s, but the manifest %s names %s: the file is from another save", file,
                    got, path, want);
    } else if (h.tp != place[0] || h.tp_rank != place[1] || h.shards != place[2] || h.shard != place[3]) {
      rc = aa_error(
          AA_ECORRUPT,
          "%s: holds shard %u of %u of tensor rank %u of %u, but the manifest %s lists it as shard %d of "
          "%d of tensor rank %d of %d",
          file, h.shard, h.shards, h.tp_rank, h.tp, path, r, shards, t, tp);
    } else if (h.pp != pipe.pp || h.pp_rank != pipe.pp_rank || h.vpp != pipe.vpp ||
               memcmp(h.chunk_lo, pipe.chunk_lo, sizeof h.chunk_lo)) {
      rc = aa_error(
          AA_ECORRUPT,
          "%s: holds pipeline rank %u of %u (%u chunks from block %u), but the manifest %s lists it as "
          "pipeline rank %d of %d (%u chunks from block %u)",
          file, h.pp_rank, h.pp, h.vpp, h.chunk_lo[0], path, p, pp, pipe.vpp, pipe.chunk_lo[0]);
    } else if (i == 0) {
      s->h = h;
    } else if (h.step != s->h.step || h.adam_t != s->h.adam_t || h.rng != s->h.rng ||
               h.data_pos != s->h.data_pos || (h.flags & FLAG_OPTIMIZER) != (s->h.flags & FLAG_OPTIMIZER)) {
      rc = aa_error(AA_ECORRUPT, "%s: the training state (step %d) differs from the first file's (step %d)", file,
                    h.step, s->h.step);
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
    rc = open_manifest(s, path, m, want_opt);
  } else if (!(rc = layout_init(&s->lay, &m->arch, 1, 1, 1, NULL, path))) {
    /* One file: the whole model, in the layout of tensor and pipeline
     * degree 1. */
    if (!(s->f = calloc(1, sizeof *s->f))) {
      rc = aa_error(AA_ENOMEM, "out of memory");
    } else {
      s->n_files = 1;
      rc = open_file(path, m, 0, s->lay.n_local, want_opt, &s->f[0], &s->h);
    }
  }
  if (rc) source_close(s);
  return rc;
}

/* Reads elements [a, a + n) of section sec of saved rank q's state (q =
 * p * tp + t), in its layout and all inside unit u, into dst (host). */
static int source_read(source_t *s, int sec, int q, int u, size_t a, size_t n, float *dst) {
  if (!s->shards) {
    off_t pos = (off_t)(AA_CKPT_HEADER_BYTES + ((size_t)sec * s->lay.n_local + a) * sizeof(float));
    if (fseeko(s->f[0], pos, SEEK_SET) || fread(dst, sizeof(float), n, s->f[0]) != n)
      return aa_error(AA_EIO, "checkpoint: read failed");
    return 0;
  }
  const size_t pu = (size_t)(q / s->lay.tp) * s->lay.n_units + u;
  size_t uoff = s->lay.unit_off[pu], un = s->lay.unit_n[pu];
  if (a < uoff || a + n > uoff + un)
    return aa_error(AA_EINTERNAL, "checkpoint: elements [%zu, %zu) lie outside saved rank %d's unit %d", a,
                    a + n, q, u);
  size_t c = (un + (size_t)s->shards - 1) / (size_t)s->shards;
  while (n) {
    int r = (int)((a - uoff) / c), i = q * s->shards + r;
    size_t lo = uoff + (size_t)r * c, take = lo + c - a < n ? lo + c - a : n;
    size_t el = (size_t)sec * s->E[i] + s->prefix[(size_t)i * s->lay.n_units + u] + (a - lo);
    if (fseeko(s->f[i], (off_t)(AA_CKPT_HEADER_BYTES + el * sizeof(float)), SEEK_SET) ||
        fread(dst, sizeof(float), take, s->f[i]) != take)
      return aa_error(AA_EIO,
                      "checkpoint: read of file %d (pipeline rank %d, tensor rank %d, shard %d) failed", i,
                      q / s->lay.tp, q % s->lay.tp, r);
    a += take;
    dst += take;
    n -= take;
  }
  return 0;
}

/* Reads whole-model elements [x, x + n) of tensor i (all inside it), of
 * section sec, into dst: from the saved ranks whose slices hold them, the
 * lowest such rank for elements several hold (a replicated tensor: the
 * same on every tensor rank of the one pipeline rank that saved it). */
static int read_whole(source_t *s, int sec, int i, size_t x, size_t n, float *dst) {
  const int nt = s->lay.n_tensors, u = s->lay.tab[i].unit, ranks = s->lay.pp * s->lay.tp;
  while (n) {
    int t = 0;
    for (; t < ranks; t++) {
      const aa_tensor_desc_t *d = &s->lay.tab[(size_t)t * nt + i];
      if (!d->runs || x < d->run_global) continue;
      size_t rel = x - d->run_global, k = d->run_gstride ? rel / d->run_gstride : 0, off = rel - k * d->run_gstride;
      if (k >= (size_t)d->runs || off >= d->run_n) continue;
      size_t take = d->run_n - off < n ? d->run_n - off : n;
      int rc = source_read(s, sec, t, u, d->offset + k * d->run_lstride + off, take, dst);
      if (rc) return rc;
      x += take;
      dst += take;
      n -= take;
      break;
    }
    if (t == ranks)
      return aa_error(AA_EINTERNAL, "checkpoint: element %zu of %s lies in no saved rank's slice",
                      x - s->lay.tab[i].goffset, s->lay.tab[i].name);
  }
  return 0;
}

/* The model's elements [a, a + n) of section sec, all inside its unit u,
 * into dst, from a checkpoint saved in another layout: each run of each of
 * the model's tensors (its slice's place in the whole model; a copy of
 * wte|wpe's too) read through read_whole. Elements no run covers (the
 * padding rows of a vocabulary slice) are 0. */
static int read_resharded(source_t *s, const aa_gpt_t *m, int sec, size_t a, size_t n, float *dst) {
  memset(dst, 0, n * sizeof(float));
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *d = &m->tensors[i];
    if (d->offset >= a + n || d->offset + d->numel <= a) continue;
    for (int k = 0; k < d->runs; k++) {
      size_t l = d->offset + (size_t)k * d->run_lstride;
      size_t lo = l > a ? l : a, hi = l + d->run_n < a + n ? l + d->run_n : a + n;
      if (lo >= hi) continue;
      int rc = read_whole(s, sec, i, d->run_global + (size_t)k * d->run_gstride + (lo - l), hi - lo, dst + (lo - a));
      if (rc) return rc;
    }
  }
  return 0;
}

/* What a load reads besides the parameters: nothing, the optimizer
 * moments (a file without them is an error), or the moments when the file
 * has them (a resume from a weights-only checkpoint restarts the optimizer). */
typedef enum { LOAD_WEIGHTS, LOAD_OPTIMIZER, LOAD_IF_ANY } load_mode_t;

/* The load behind aa_ckpt_load (z NULL: the full buffers of m and opt) and
 * aa_ckpt_load_zero (what z holds), in mode; *read_opt (may be NULL) says
 * whether the moments were read. Every file is checked before anything
 * is written. A checkpoint of m's layout (tensor degree, pipeline place)
 * is read slice for slice (the rank's own files); one of another layout,
 * and a last stage's copy of wte|wpe (whose owner's files hold it),
 * through both layouts' tables. */
static int load(const char *path, aa_gpt_t *m, aa_adamw_t *opt, aa_zero_t *z, aa_train_state_t *st,
                load_mode_t mode, bool *read_opt) {
  source_t s;
  int rc = source_open(&s, path, m, mode == LOAD_OPTIMIZER);
  if (rc) return rc;
  /* The moments are read when asked for and (LOAD_IF_ANY) present. */
  const int want_opt = mode != LOAD_WEIGHTS && (s.h.flags & FLAG_OPTIMIZER);
  const int U = aa_gpt_n_units(m), same = layout_is_models(&s.lay, m);
  const int q = (m->pp > 1 ? m->pipe.stage : 0) * m->tp + m->tp_rank;
  const int copy = aa_pp_unit0_is_copy(m->pp > 1 ? &m->pipe : NULL, &m->arch);
  size_t most = 0;
  for (int u = 0; u < U; u++) {
    size_t off, n;
    aa_gpt_unit(m, u, &off, &n);
    if (n > most) most = n;
  }
  float *buf = malloc(most * sizeof(float));
  if (!buf) rc = aa_error(AA_ENOMEM, "%s: out of memory", path);
  /* What z holds is a piece's chunk (at ep 1 the pieces are the units). */
  const int n_ranges = z ? z->n_pieces : U;
  for (int which = 0; which < (want_opt ? 3 : 1) && !rc; which++) {
    for (int i = 0; i < n_ranges && !rc; i++) {
      aa_zero_range_t r;
      int u = i;
      if (z) {
        aa_zero_range(z, m, which, i, &r);
        u = z->piece_unit[i];
      } else {
        const aa_flatbuf_t *b = which == 0 ? &m->params : which == 1 ? &opt->m : &opt->v;
        aa_gpt_unit(m, u, &r.offset, &r.n);
        r.data = (float *)b->data + r.offset;
      }
      if (!r.n) continue;
      rc = same && !(u == 0 && copy) ? source_read(&s, which, q, u, r.offset, r.n, buf)
                                     : read_resharded(&s, m, which, r.offset, r.n, buf);
      if (!rc) rc = m->ops->upload(r.data, buf, r.n * sizeof(float));
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
    if (read_opt) *read_opt = want_opt;
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
  return load(path, m, opt, NULL, st, opt ? LOAD_OPTIMIZER : LOAD_WEIGHTS, NULL);
}

int aa_ckpt_load_zero(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_train_state_t *st) {
  return load(path, m, NULL, z, st, st ? LOAD_OPTIMIZER : LOAD_WEIGHTS, NULL);
}

int aa_ckpt_load_resume(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_train_state_t *st, bool *optimizer) {
  return load(path, m, NULL, z, st, LOAD_IF_ANY, optimizer);
}

/* --- collective saves ---------------------------------------------------------------- */

/* A save's gang: the model, its data group (z) and pipeline group (pipe,
 * NULL at pp 1) with 16 floats of the model's backend memory to stage the
 * pipeline group's sums through (NULL over a group of one). */
typedef struct {
  aa_gpt_t *m;
  aa_zero_t *z;
  aa_comm_t *pipe;
  float *staging;
  int sections; /* 3: parameters and both moments; 1: the parameters alone (weights only) */
} gang_t;

/* Makes each rank's outcome of one part of a collective save everyone's:
 * the failing rank gets its own error back, the others an error naming the
 * save, and 0 only when every rank of the gang succeeded. The failures are
 * summed over the data group, then over the tensor group, then over the
 * pipeline group, each of which every rank joins even when an earlier sum
 * failed, so that no peer is left waiting. A collective: every rank calls
 * it, whatever happened before. */
static int agree(const gang_t *g, int rc, const char *path) {
  char msg[512] = "";
  if (rc) snprintf(msg, sizeof msg, "%s", aa_last_error());
  float failed = rc ? 1.0f : 0.0f;
  int crc = aa_zero_all_reduce_host(g->z, &failed, 1, AA_COMM_SUM);
  int trc = aa_gpt_tensor_sum(g->m, &failed, 1);
  int prc = g->pipe ? aa_all_reduce_host(g->pipe, g->m->ops, g->staging, &failed, 1, AA_COMM_SUM) : 0;
  if (rc) return aa_error(rc, "%s", msg);
  if (crc || trc || prc) return aa_error_wrap(crc ? crc : trc ? trc : prc, "%s: checkpoint", path);
  if (failed > 0)
    return aa_error(AA_EIO, "%s: %d of %d ranks could not write their part of the checkpoint", path,
                    (int)failed, g->z->world * g->m->tp * (g->pipe ? aa_comm_world(g->pipe) : 1));
  return 0;
}

/* This rank's file: shard r of `shards` of the rank's state (r 0 of 1:
 * all of it), its chunk of every unit it holds in the three sections,
 * except a copy of wte|wpe (its owner saves it). */
static int write_shard(const char *file, const aa_gpt_t *m, const aa_zero_t *z, const aa_train_state_t *st,
                       int shards, int r, int sections) {
  int U = z->n_units;
  seg_t *seg = calloc(3 * (size_t)U, sizeof *seg);
  if (!seg) return aa_error(AA_ENOMEM, "out of memory");
  header_t h;
  state_header(&h, m, st);
  h.flags = (sections == 3 ? FLAG_OPTIMIZER : 0) | FLAG_SHARD;
  h.adam_t = sections == 3 ? z->opt.t : 0;
  if (m->tp > 1 || m->pp > 1) {
    h.tp = (uint32_t)m->tp;
    h.tp_rank = (uint32_t)m->tp_rank;
    h.shards = (uint32_t)shards;
    h.shard = (uint32_t)r;
  }
  if (m->pp > 1) {
    h.pp = (uint32_t)m->pp;
    h.pp_rank = (uint32_t)m->pipe.stage;
    h.vpp = (uint32_t)m->pipe.vpp;
    for (int c = 0; c < m->pipe.vpp; c++)
      h.chunk_lo[c] = (uint32_t)m->pipe.lo[c];
  }
  const int copy = aa_pp_unit0_is_copy(m->pp > 1 ? &m->pipe : NULL, &m->arch);
  int k = 0;
  for (int which = 0; which < sections; which++) {
    for (int u = copy ? 1 : 0; u < U; u++) {
      aa_zero_range_t held;
      aa_zero_range(z, m, which, u, &held);
      size_t lo, len;
      chunk_of(z->unit_n[u], shards, r, &lo, &len);
      lo += z->unit_off[u];
      if (which == 0) h.n_params += len;
      if (len) seg[k++] = (seg_t){held.data + (lo - held.offset), len * sizeof(float)};
    }
  }
  int rc = write_file(file, &h, m->ops, seg, k);
  free(seg);
  return rc;
}

/* The pipeline layout of a save at pp > 1 from its files' headers h
 * (file (p * tp + t) * shards + r at h[that]): each pipeline rank's file
 * names the first block of each of its chunks, virtual stage c * pp + p,
 * into bounds[0..pp * vpp]. AA_EIO when a file disagrees with the
 * model's degree or chunks. */
static int gather_bounds(const aa_gpt_t *m, const header_t *h, int shards, int *bounds, const char *path) {
  const int pp = m->pp, vpp = m->pipe.vpp;
  for (int p = 0; p < pp; p++) {
    const header_t *x = &h[(size_t)p * m->tp * shards];
    if (x->pp != (uint32_t)pp || x->pp_rank != (uint32_t)p || x->vpp != (uint32_t)vpp)
      return aa_error(AA_EIO, "%s: the file of pipeline rank %d says pipeline rank %u of %u with %u chunks",
                      path, p, x->pp_rank, x->pp, x->vpp);
    for (int c = 0; c < vpp; c++)
      bounds[c * pp + p] = (int)x->chunk_lo[c];
  }
  bounds[pp * vpp] = m->arch.n_layer;
  return 0;
}

/* Rank 0 of the gang (data, tensor and pipeline rank 0), once every rank
 * file is in place: the manifest that names them with their checksums
 * (read back from their headers), written atomically as the files are.
 * Version 1 at tensor and pipeline degree 1 (as before either existed),
 * version 2 with the tensor layout and each file's place, version 3 (pp >
 * 1) with the pipeline layout too, gathered from the files' headers, and
 * each pipeline rank's units. */
static int write_manifest(const char *path, const aa_gpt_t *m, const aa_zero_t *z, int step, int shards) {
  const int n_files = m->pp * m->tp * shards, version = m->pp > 1 ? 3 : m->tp > 1 ? 2 : 1;
  char file[AA_PATH_MAX + 64];
  header_t *h = calloc((size_t)n_files, sizeof *h);
  if (!h) return aa_error(AA_ENOMEM, "out of memory");
  int rc = 0;
  for (int i = 0; i < n_files && !rc; i++) {
    int p = i / (m->tp * shards), t = i / shards % m->tp, r = i % shards;
    unsigned char hdr[AA_CKPT_HEADER_BYTES];
    if ((rc = rank_file(file, sizeof file, path, m->pp, p, m->tp, t, r, shards))) break;
    FILE *rf = fopen(file, "rb");
    size_t got = rf ? fread(hdr, 1, sizeof hdr, rf) : 0;
    if (rf) fclose(rf);
    if (got != sizeof hdr)
      rc = aa_error(AA_EIO, "%s: cannot read back the header of rank %d's file", file, r);
    else
      decode_header(&h[i], hdr);
  }
  int bounds[AA_STRATEGY_STAGES_MAX + 1];
  layout_t lay = {0};
  if (!rc && version == 3 && !(rc = gather_bounds(m, h, shards, bounds, path)))
    rc = layout_init(&lay, &m->arch, m->tp, m->pp, m->pipe.vpp, bounds, path);
  aa_wfile_t w;
  if (!rc) rc = aa_wfile_open(&w, path, 0666);
  if (rc) {
    layout_free(&lay);
    free(h);
    return rc;
  }
  FILE *f = w.f;
  char hash[17];
  aa_arch_hash(&m->arch, hash);
  if (version == 1)
    fprintf(f,
            "{\"format\": \"" MANIFEST_FORMAT "\", \"version\": 1, \"world\": %d, \"zero\": %d, \"step\": %d, "
            "\"n_params\": %zu, \"model_hash\": \"%s\",\n \"units\": [",
            z->world, z->stage, step, m->n_params, hash);
  else if (version == 2)
    fprintf(f,
            "{\"format\": \"" MANIFEST_FORMAT "\", \"version\": 2, \"dp\": %d, \"tp\": %d, \"zero\": %d, "
            "\"step\": %d, \"n_params\": %zu, \"model_hash\": \"%s\",\n \"units\": [",
            z->world, m->tp, z->stage, step, (size_t)aa_arch_param_count(&m->arch), hash);
  else
    fprintf(
        f,
        "{\"format\": \"" MANIFEST_FORMAT "\", \"version\": 3, \"dp\": %d, \"tp\": %d, \"pp\": %d, "
        "\"vpp\": %d, \"zero\": %d, \"step\": %d, \"n_params\": %zu, \"model_hash\": \"%s\",\n \"bounds\": [",
        z->world, m->tp, m->pp, m->pipe.vpp, z->stage, step, (size_t)aa_arch_param_count(&m->arch), hash);
  if (version < 3) {
    for (int u = 0; u < z->n_units; u++)
      fprintf(f, "%s[%zu, %zu]", u ? ", " : "", z->unit_off[u], z->unit_n[u]);
  } else {
    for (int k = 0; k <= m->pp * m->pipe.vpp; k++)
      fprintf(f, "%s%d", k ? ", " : "", bounds[k]);
    fprintf(f, "],\n \"units\": [");
    for (int p = 0; p < m->pp; p++) {
      fprintf(f, "%s\n  [", p ? "," : "");
      for (int u = 0; u < lay.n_units; u++) {
        size_t i = (size_t)p * lay.n_units + u;
        fprintf(f, "%s[%zu, %zu]", u ? ", " : "", lay.unit_off[i], lay.unit_n[i]);
      }
      fprintf(f, "]");
    }
  }
  fprintf(f, "],\n \"files\": [");
  const char *slash = strrchr(path, '/');
  for (int i = 0; i < n_files && !rc; i++) {
    int p = i / (m->tp * shards), t = i / shards % m->tp, r = i % shards;
    if ((rc = rank_file(file, sizeof file, path, m->pp, p, m->tp, t, r, shards))) break;
    fprintf(f, "%s\n  {", i ? "," : "");
    if (version == 3) fprintf(f, "\"pipe\": %d, ", p);
    if (version >= 2) fprintf(f, "\"tensor\": %d, ", t);
    fprintf(f, "\"rank\": %d, \"file\": \"%s\", \"elements\": %llu, \"checksum\": \"%016llx\"}", r,
            slash ? strrchr(file, '/') + 1 : file, (unsigned long long)h[i].n_params,
            (unsigned long long)h[i].checksum);
  }
  fprintf(f, "]}\n");
  if (!rc) rc = aa_wfile_commit(&w);
  aa_wfile_abort(&w);
  layout_free(&lay);
  free(h);
  return rc;
}

/* Expert parallelism, or experts split over the tensor ranks (model.h
 * opts.etp): the sections of the whole model (three, or the parameters
 * alone for a weights-only save: g->sections) assembled on
 * replica 0 from its expert group, which holds every expert (at pp > 1
 * each stage's replica 0 assembles its units and the pipeline group sums
 * the stages' parts into pipeline rank 0's; at tp > 1 likewise each tensor
 * rank's slices over the tensor group), and written as one whole-model
 * file, which loads at any expert degree, ZeRO stage and
 * in one process (load reads an expert slice through the tables). Each rank first gathers its own model's
 * sections whole (at ZeRO 1-3 each piece's chunks over its group, aa_zero_gather), then its slices of every
 * MoE block go over the expert group and are placed by each rank's table. */
static int save_experts(const char *path, const gang_t *g, const aa_train_state_t *st) {
  aa_gpt_t *m = g->m;
  aa_zero_t *z = g->z;
  const int ep = m->ep, nt = m->n_tensors, S = g->sections;
  size_t ne = 0; /* the expert slices' elements of one section: the same on every rank */
  for (int i = 0; i < nt; i++)
    if (m->tensors[i].expert) ne += m->tensors[i].numel;
  const aa_tensor_desc_t *last = &m->tensors[nt - 1];
  const size_t ng = last->goffset + last->gnumel, nl = m->n_params;
  /* One more float each: no expert slices (ep 1) is no allocation failure. */
  float *local = malloc(S * nl * sizeof(float)), *pack = malloc((S * ne + 1) * sizeof(float));
  float *all = malloc(((size_t)ep * S * ne + 1) * sizeof(float));
  float *scratch = malloc(aa_zero_gather_scratch(z) * sizeof(float) + sizeof(float));
  float *whole = z->rank == 0 ? malloc(S * ng * sizeof(float)) : NULL;
  aa_tensor_desc_t *tab = malloc((size_t)nt * sizeof *tab);
  int rc = !local || !pack || !all || !scratch || !tab || (z->rank == 0 && !whole)
               ? aa_error(AA_ENOMEM, "out of memory")
               : 0;
  /* Every rank joins the gathers, or none does. */
  if (!(rc = agree(g, rc, path)))
    for (int s = 0; s < S && !rc; s++)
      if ((rc = aa_zero_gather(z, m, s, local + s * nl, scratch)))
        rc = aa_error_wrap(rc, "%s: gathering the ZeRO shards", path);
  free(scratch);
  size_t o = 0;
  for (int s = 0; s < S && !rc; s++)
    for (int i = 0; i < nt; i++)
      if (m->tensors[i].expert) {
        memcpy(pack + o, local + s * nl + m->tensors[i].offset, m->tensors[i].numel * sizeof(float));
        o += m->tensors[i].numel;
      }
  /* Every rank joins the gather, or none does. */
  if (!(rc = agree(g, rc, path)) && ep > 1 &&
      (rc = aa_comm_all_gather(m->opts.expert, pack, all, S * ne, AA_F32)))
    rc = aa_error_wrap(rc, "%s: gathering the expert slices", path);
  const aa_pp_place_t *pp = m->pp > 1 ? &m->pipe : NULL;
  if (!rc && z->rank == 0) {
    /* A pipeline stage fills the units it holds, a tensor rank its slices
     * (tensor rank 0 the replicated tensors, the experts included), zeros
     * elsewhere. */
    if (pp || m->tp > 1) memset(whole, 0, S * ng * sizeof(float));
    for (int s = 0; s < S; s++) {
      float *w = whole + s * ng;
      for (int i = 0; i < nt; i++) { /* the dense tensors: the rank's slices through their runs */
        const aa_tensor_desc_t *t = &m->tensors[i];
        if (t->expert || t->copy || !t->numel || (t->replicated && m->tp_rank > 0)) continue;
        for (int k = 0; k < t->runs; k++)
          memcpy(w + t->run_global + (size_t)k * t->run_gstride,
                 local + s * nl + t->offset + (size_t)k * t->run_lstride, t->run_n * sizeof(float));
      }
      /* The expert slices (ep > 1) of each rank q of the expert group at
       * this tensor rank: whole experts on tensor rank 0, or the rank's
       * share of every expert when they are split. */
      const int split = aa_sizes_etp(&m->arch, m->tp) > 1;
      if (m->tp_rank > 0 && !split) continue;
      for (int q = 0; q < ep && ne; q++) {
        aa_gpt_tensor_table_ep(&m->arch, split ? m->tp : 1, split ? m->tp_rank : 0, ep, q, pp, tab);
        const float *from = all + ((size_t)q * S + (size_t)s) * ne;
        for (int i = 0; i < nt; i++)
          if (tab[i].expert && tab[i].numel) {
            for (int k = 0; k < tab[i].runs; k++)
              memcpy(w + tab[i].run_global + (size_t)k * tab[i].run_gstride,
                     from + (size_t)k * tab[i].run_lstride, tab[i].run_n * sizeof(float));
            from += tab[i].numel;
          }
      }
    }
    /* The stages' parts summed over the pipeline group (each element is
     * one stage's, the others' zeros), which its rank 0 writes. */
    if (g->pipe && (rc = aa_comm_all_reduce(g->pipe, whole, whole, S * ng, AA_F32, AA_COMM_SUM)))
      rc = aa_error_wrap(rc, "%s: gathering the pipeline stages", path);
    /* ... and the tensor ranks' over the tensor group. */
    if (!rc && m->tp > 1 &&
        (rc = aa_comm_all_reduce(m->opts.tensor, whole, whole, S * ng, AA_F32, AA_COMM_SUM)))
      rc = aa_error_wrap(rc, "%s: gathering the tensor slices", path);
  }
  if (!rc && z->rank == 0 && m->tp_rank == 0 && (!pp || m->pipe.stage == 0)) {
    header_t h;
    state_header(&h, m, st);
    h.flags = S == 3 ? FLAG_OPTIMIZER : 0;
    h.n_params = ng;
    h.adam_t = S == 3 ? z->opt.t : 0;
    seg_t seg[3] = {{whole, ng * sizeof(float)},
                    {S == 3 ? whole + ng : NULL, ng * sizeof(float)},
                    {S == 3 ? whole + 2 * ng : NULL, ng * sizeof(float)}};
    rc = write_file(path, &h, aa_ops_cpu(), seg, S);
  }
  free(local);
  free(pack);
  free(all);
  free(whole);
  free(tab);
  return agree(g, rc, path);
}

/* The collective save of gang g (aa_ckpt_save_pipe's contract). */
static int save_gang(const char *path, const gang_t *g, const aa_train_state_t *st) {
  aa_gpt_t *m = g->m;
  aa_zero_t *z = g->z;
  if (m->ep > 1 || aa_sizes_etp(&m->arch, m->tp) > 1) return save_experts(path, g, st);
  if (z->stage == 0 && m->tp == 1 && m->pp == 1)
    return agree(g, z->rank == 0 ? aa_ckpt_save(path, m, g->sections == 3 ? &z->opt : NULL, st) : 0, path);
  /* At stage 0 the data ranks hold the same state: data rank 0 of each
   * tensor and pipeline rank writes all of its own. */
  const int p = m->pp > 1 ? m->pipe.stage : 0;
  int shards = z->stage ? z->world : 1, rc = 0;
  if (z->stage || z->rank == 0) {
    char file[AA_PATH_MAX + 64];
    int r = z->stage ? z->rank : 0;
    if (!(rc = rank_file(file, sizeof file, path, m->pp, p, m->tp, m->tp_rank, r, shards)))
      rc = write_shard(file, m, z, st, shards, r, g->sections);
  }
  if ((rc = agree(g, rc, path))) return rc;
  return agree(
      g,
      z->rank == 0 && m->tp_rank == 0 && p == 0 ? write_manifest(path, m, z, st ? st->step : 0, shards) : 0,
      path);
}

int aa_ckpt_save_zero(const char *path, aa_gpt_t *m, aa_zero_t *z, const aa_train_state_t *st) {
  return aa_ckpt_save_pipe(path, m, z, NULL, st);
}

/* aa_ckpt_save_pipe of `sections` sections (gang_t). */
static int save_pipe(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_comm_t *pipe, const aa_train_state_t *st,
                     int sections) {
  if (m->pp > 1 && !pipe)
    return aa_error(AA_EINVAL,
                    "%s: pipeline rank %d of %d holds part of the model: save with its pipeline group", path,
                    m->pipe.stage, m->pp);
  gang_t g = {m, z, pipe && aa_comm_world(pipe) > 1 ? pipe : NULL, NULL, sections};
  aa_flatbuf_t staging = {0};
  /* Allocated before the first collective: a rank that cannot stage its
   * sums cannot take part in any. */
  if (g.pipe) {
    int rc = aa_flatbuf_alloc(&staging, m->ops, NULL, AA_MEM_WORKSPACE, AA_F32, 16);
    if (rc) return aa_error_wrap(rc, "%s: checkpoint", path);
    g.staging = staging.data;
  }
  int rc = save_gang(path, &g, st);
  aa_flatbuf_free(&staging, NULL);
  return rc;
}

int aa_ckpt_save_pipe(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_comm_t *pipe,
                      const aa_train_state_t *st) {
  return save_pipe(path, m, z, pipe, st, 3);
}

int aa_ckpt_save_weights(const char *path, aa_gpt_t *m, aa_zero_t *z, aa_comm_t *pipe,
                         const aa_train_state_t *st) {
  return save_pipe(path, m, z, pipe, st, 1);
}
