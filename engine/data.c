/* Token shards (the autoaccel format, written and read, and the llm.c
 * format, read only), the deterministic batch loader and shard statistics.
 * The byte layouts are in docs/data-format.md. Every count a file declares
 * is checked against the file's real size before anything is allocated. */
#include "engine/data.h"
#include "common/aa.h"
#include "common/file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_HEADER_BYTES (256 * 4)
#define LLMC_VERSION 1
/* Tokens converted per fread/fwrite; bounds the staging buffer to 256 KiB. */
#define CHUNK_TOKENS ((size_t)1 << 16)
/* Above this many distinct ids, entropy counts by sorting instead of a table. */
#define ENTROPY_TABLE_MAX ((size_t)1 << 22)

/* What a header says about the payload that follows it. */
typedef struct {
  size_t header_bytes;
  uint32_t width; /* bytes per token id: 2 or 4 */
  int vocab_size; /* 0 = unknown (llm.c) */
  uint64_t n_tokens;
  int has_checksum;
  uint64_t checksum;
} layout_t;

/* Opens `path` for reading and returns its size; a missing file is
 * AA_ENOENT, anything that is not a regular file is AA_EIO. */
static int open_regular(const char *path, FILE **out, uint64_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return aa_error(AA_ENOENT, "%s: no such file", path);
    return aa_error(AA_EIO, "%s: cannot open: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    int e = errno;
    fclose(f);
    return aa_error(AA_EIO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    fclose(f);
    return aa_error(AA_EIO, "%s: not a regular file", path);
  }
  *out = f;
  *size = (uint64_t)st.st_size;
  return 0;
}

/* Reads exactly n bytes; a short read is an i/o error naming the file
 * (the size was checked up front, so it means the file changed under us). */
static int read_exact(FILE *f, void *buf, size_t n, const char *path) {
  if (fread(buf, 1, n, f) == n) return 0;
  if (ferror(f)) return aa_error(AA_EIO, "%s: read failed: %s", path, strerror(errno));
  return aa_error(AA_EIO, "%s: unexpected end of file (file changed while being read?)", path);
}

/* Writes up to 8 leading bytes as text, non-printable ones as \xNN, so an
 * error message shows what the file starts with without echoing binary. */
static void sanitize_magic(char *out, size_t cap, const unsigned char *p, size_t n) {
  size_t o = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && i < 8; i++) {
    int w = (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\')
                ? snprintf(out + o, cap - o, "%c", p[i])
                : snprintf(out + o, cap - o, "\\x%02x", p[i]);
    if (w < 0 || (size_t)w >= cap - o) break;
    o += (size_t)w;
  }
}

/* The size check shared by both formats: the payload must be exactly
 * n_tokens * width bytes. */
static int check_size(const layout_t *l, uint64_t size, const char *path) {
  uint64_t payload = size - l->header_bytes;
  if (l->n_tokens > payload / l->width) {
    if (l->n_tokens > (UINT64_MAX - l->header_bytes) / l->width)
      return aa_error(AA_EFORMAT,
                      "%s: header declares %llu tokens, more than any file can hold; file has %llu bytes",
                      path, (unsigned long long)l->n_tokens, (unsigned long long)size);
    return aa_error(AA_EFORMAT,
                    "%s: truncated: expected %llu bytes (%zu header + %llu tokens x %u), file has %llu", path,
                    (unsigned long long)(l->header_bytes + l->n_tokens * l->width), l->header_bytes,
                    (unsigned long long)l->n_tokens, l->width, (unsigned long long)size);
  }
  uint64_t expected = l->header_bytes + l->n_tokens * l->width;
  if (expected != size)
    return aa_error(
        AA_EFORMAT,
        "%s: %llu trailing bytes: expected %llu bytes (%zu header + %llu tokens x %u), file has %llu", path,
        (unsigned long long)(size - expected), (unsigned long long)expected, l->header_bytes,
        (unsigned long long)l->n_tokens, l->width, (unsigned long long)size);
  if (l->n_tokens > SIZE_MAX / sizeof(int32_t))
    return aa_error(AA_ENOMEM, "%s: %llu tokens do not fit in this process's address space", path,
                    (unsigned long long)l->n_tokens);
  return 0;
}

static int parse_aa_header(layout_t *l, const unsigned char *h, uint64_t size, const char *path) {
  if (size < AA_SHARD_HEADER_BYTES)
    return aa_error(AA_EFORMAT, "%s: truncated header: file has %llu bytes, an autoaccel shard header is %d",
                    path, (unsigned long long)size, AA_SHARD_HEADER_BYTES);
  uint32_t version = aa_get_le32(h + 8), width = aa_get_le32(h + 12), vocab = aa_get_le32(h + 16);
  uint32_t reserved = aa_get_le32(h + 20);
  if (version != AA_SHARD_VERSION)
    return aa_error(AA_EFORMAT, "%s: unsupported autoaccel shard version %u (this build reads version %d)",
                    path, version, AA_SHARD_VERSION);
  if (width != 2 && width != 4)
    return aa_error(AA_EFORMAT, "%s: token_bytes is %u, must be 2 or 4", path, width);
  if (vocab == 0) return aa_error(AA_EFORMAT, "%s: vocab_size is 0", path);
  if (vocab > INT32_MAX) return aa_error(AA_EFORMAT, "%s: vocab_size %u is larger than 2^31-1", path, vocab);
  if (reserved != 0)
    return aa_error(AA_EFORMAT, "%s: reserved header field is %u, must be 0", path, reserved);
  for (int i = 40; i < AA_SHARD_HEADER_BYTES; i++)
    if (h[i] != 0)
      return aa_error(AA_EFORMAT, "%s: header byte %d is 0x%02x, must be 0 (padding)", path, i, h[i]);
  l->header_bytes = AA_SHARD_HEADER_BYTES;
  l->width = width;
  l->vocab_size = (int)vocab;
  l->n_tokens = aa_get_le64(h + 24);
  l->has_checksum = 1;
  l->checksum = aa_get_le64(h + 32);
  return check_size(l, size, path);
}

static int parse_llmc_header(layout_t *l, const unsigned char *h, uint64_t size, const char *path) {
  if (size < LLMC_HEADER_BYTES)
    return aa_error(AA_EFORMAT, "%s: truncated header: file has %llu bytes, an llm.c shard header is %d",
                    path, (unsigned long long)size, LLMC_HEADER_BYTES);
  int32_t version = (int32_t)aa_get_le32(h + 4), n = (int32_t)aa_get_le32(h + 8);
  if (version != LLMC_VERSION)
    return aa_error(AA_EFORMAT,
                    "%s: unsupported llm.c shard version %d (only version 1, uint16 tokens, is read)", path,
                    version);
  if (n < 0) return aa_error(AA_EFORMAT, "%s: llm.c header declares a negative token count %d", path, n);
  l->header_bytes = LLMC_HEADER_BYTES;
  l->width = 2;
  l->vocab_size = 0;
  l->n_tokens = (uint64_t)n;
  l->has_checksum = 0;
  l->checksum = 0;
  return check_size(l, size, path);
}

/* Decides the format from the leading bytes. A file too short to hold a
 * whole magic but consistent with one is a truncated header, not a bad
 * magic, so an empty or cut-off shard gets the more useful message. */
static int parse_header(layout_t *l, const unsigned char *h, size_t have, uint64_t size, const char *path) {
  unsigned char llmc[4];
  aa_put_le32(llmc, AA_LLMC_MAGIC);
  size_t aa_n = have < 8 ? have : 8, llmc_n = have < 4 ? have : 4;
  if (memcmp(h, AA_SHARD_MAGIC, aa_n) == 0) return parse_aa_header(l, h, size, path);
  if (memcmp(h, llmc, llmc_n) == 0) return parse_llmc_header(l, h, size, path);
  char sample[40];
  sanitize_magic(sample, sizeof sample, h, have);
  return aa_error(AA_EFORMAT,
                  "%s: not a token shard (bad magic \"%s\"; expected \"" AA_SHARD_MAGIC
                  "\" or the llm.c magic %d)",
                  path, sample, AA_LLMC_MAGIC);
}

/* Reads the payload in chunks into `tokens`, checking the checksum and the
 * id bound. The checksum is reported before a bad id: a flipped byte is
 * corruption, not a vocabulary mismatch. */
static int read_payload(int32_t *tokens, FILE *f, const layout_t *l, int max_vocab, const char *path) {
  unsigned char *buf = malloc(CHUNK_TOKENS * l->width);
  if (!buf) return aa_error(AA_ENOMEM, "%s: out of memory for the read buffer", path);
  int64_t bound = INT64_MAX;
  int bound_from_model = 0;
  if (l->vocab_size > 0) bound = l->vocab_size;
  if (max_vocab > 0 && max_vocab < bound) {
    bound = max_vocab;
    bound_from_model = 1;
  }
  uint64_t h = AA_FNV_INIT, bad_id = 0;
  size_t bad_at = SIZE_MAX;
  int rc = 0;
  for (size_t done = 0; done < l->n_tokens;) {
    size_t n = l->n_tokens - done < CHUNK_TOKENS ? (size_t)(l->n_tokens - done) : CHUNK_TOKENS;
    rc = read_exact(f, buf, n * l->width, path);
    if (rc) break;
    h = aa_fnv1a(h, buf, n * l->width);
    for (size_t i = 0; i < n; i++) {
      uint32_t id =
          l->width == 2 ? (uint32_t)buf[2 * i] | (uint32_t)buf[2 * i + 1] << 8 : aa_get_le32(buf + 4 * i);
      if ((int64_t)id >= bound && bad_at == SIZE_MAX) {
        bad_at = done + i;
        bad_id = id;
      }
      tokens[done + i] = (int32_t)(id & INT32_MAX);
    }
    done += n;
  }
  free(buf);
  if (rc) return rc;
  if (l->has_checksum && h != l->checksum)
    return aa_error(AA_ECORRUPT, "%s: checksum mismatch: header says %016llx, payload hashes to %016llx",
                    path, (unsigned long long)l->checksum, (unsigned long long)h);
  if (bad_at != SIZE_MAX)
    return aa_error(AA_EINVAL, "%s: token id %llu at index %zu >= vocab_size %lld%s", path,
                    (unsigned long long)bad_id, bad_at, (long long)bound,
                    bound_from_model ? " (the model's)" : " (the shard header's)");
  return 0;
}

int aa_shard_read(aa_shard_t *out, const char *path, int max_vocab) {
  if (!out || !path) return aa_error(AA_EINVAL, "aa_shard_read: NULL argument");
  if (max_vocab < 0) return aa_error(AA_EINVAL, "%s: max_vocab %d is negative", path, max_vocab);
  FILE *f = NULL;
  int32_t *tokens = NULL;
  uint64_t size = 0;
  int rc = open_regular(path, &f, &size);
  if (rc) return rc;
  unsigned char head[LLMC_HEADER_BYTES];
  size_t have = size < sizeof head ? (size_t)size : sizeof head;
  layout_t l;
  rc = read_exact(f, head, have, path);
  if (rc) goto cleanup;
  rc = parse_header(&l, head, have, size, path);
  if (rc) goto cleanup;
  if (fseeko(f, (off_t)l.header_bytes, SEEK_SET) != 0) {
    rc = aa_error(AA_EIO, "%s: seek failed: %s", path, strerror(errno));
    goto cleanup;
  }
  /* One extra element so an empty shard still gets a non-NULL buffer. */
  tokens = malloc(((size_t)l.n_tokens + 1) * sizeof *tokens);
  if (!tokens) {
    rc = aa_error(AA_ENOMEM, "%s: out of memory for %llu tokens", path, (unsigned long long)l.n_tokens);
    goto cleanup;
  }
  rc = read_payload(tokens, f, &l, max_vocab, path);
  if (rc) goto cleanup;
  out->tokens = tokens;
  out->n_tokens = (size_t)l.n_tokens;
  out->vocab_size = l.vocab_size;
  tokens = NULL;
cleanup:
  free(tokens);
  fclose(f);
  return rc;
}

void aa_shard_free(aa_shard_t *s) {
  if (!s) return;
  free(s->tokens);
  s->tokens = NULL;
  s->n_tokens = 0;
}

/* Encodes tokens[0..n) little-endian at `width` bytes each into buf. */
static void encode(unsigned char *buf, const int32_t *tokens, size_t n, uint32_t width) {
  for (size_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)tokens[i];
    if (width == 2) {
      buf[2 * i] = (unsigned char)v;
      buf[2 * i + 1] = (unsigned char)(v >> 8);
    } else {
      aa_put_le32(buf + 4 * i, v);
    }
  }
}

/* The shard is written to a fresh temporary and renamed into place
 * (common/file.h), so a failed write never leaves a half shard under the
 * final name and a symlink planted beside it is never written through. */
int aa_shard_write(const char *path, const int32_t *tokens, size_t n, int vocab_size) {
  if (!path || (!tokens && n > 0)) return aa_error(AA_EINVAL, "aa_shard_write: NULL argument");
  if (vocab_size < 1) return aa_error(AA_EINVAL, "%s: vocab_size %d must be >= 1", path, vocab_size);
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      return aa_error(AA_EINVAL, "%s: token id %d at index %zu outside [0, vocab_size %d)", path, tokens[i],
                      i, vocab_size);
  uint32_t width = vocab_size <= 65536 ? 2 : 4;
  unsigned char *buf = malloc(CHUNK_TOKENS * width);
  if (!buf) return aa_error(AA_ENOMEM, "%s: out of memory", path);

  uint64_t h = AA_FNV_INIT;
  for (size_t done = 0; done < n; done += CHUNK_TOKENS) {
    size_t k = n - done < CHUNK_TOKENS ? n - done : CHUNK_TOKENS;
    encode(buf, tokens + done, k, width);
    h = aa_fnv1a(h, buf, k * width);
  }
  unsigned char head[AA_SHARD_HEADER_BYTES] = {0};
  memcpy(head, AA_SHARD_MAGIC, 8);
  aa_put_le32(head + 8, AA_SHARD_VERSION);
  aa_put_le32(head + 12, width);
  aa_put_le32(head + 16, (uint32_t)vocab_size);
  aa_put_le64(head + 24, (uint64_t)n);
  aa_put_le64(head + 32, h);

  aa_wfile_t w;
  int rc = aa_wfile_open(&w, path, 0666);
  if (rc == AA_ENOENT) rc = AA_EIO; /* data.h: any failure to write is an i/o error */
  int ok = !rc && fwrite(head, 1, sizeof head, w.f) == sizeof head;
  for (size_t done = 0; ok && done < n; done += CHUNK_TOKENS) {
    size_t k = n - done < CHUNK_TOKENS ? n - done : CHUNK_TOKENS;
    encode(buf, tokens + done, k, width);
    ok = fwrite(buf, width, k, w.f) == k;
  }
  if (!rc && !ok) rc = aa_error(AA_EIO, "%s: write failed: %s", path, strerror(errno));
  if (!rc) rc = aa_wfile_commit(&w);
  aa_wfile_abort(&w);
  free(buf);
  return rc;
}

int aa_loader_init(aa_loader_t *l, const aa_shard_t *shard, int B, int T) {
  if (!l || !shard) return aa_error(AA_EINVAL, "aa_loader_init: NULL argument");
  if (B < 1 || T < 1)
    return aa_error(AA_EINVAL, "loader: batch %d and sequence length %d must be >= 1", B, T);
  if (shard->n_tokens < (size_t)T + 1)
    return aa_error(AA_EINVAL, "loader: shard holds %zu tokens, fewer than one sequence of T+1 = %d",
                    shard->n_tokens, T + 1);
  l->shard = shard;
  l->B = B;
  l->T = T;
  l->pos = 0;
  return 0;
}

/* Sequence b starts at pos; pos then advances by T, so consecutive
 * sequences share one token (the last target of one is the first input of
 * the next), as in llm.c. A position that leaves fewer than T+1 tokens,
 * including one restored from a checkpoint of a different shard, wraps to
 * 0 before the sequence is taken. */
void aa_loader_next(aa_loader_t *l, int32_t *inputs, int32_t *targets) {
  const int32_t *tok = l->shard->tokens;
  uint64_t last_start = (uint64_t)l->shard->n_tokens - (uint64_t)l->T - 1;
  for (int b = 0; b < l->B; b++) {
    if (l->pos > last_start) l->pos = 0;
    const int32_t *seq = tok + l->pos;
    memcpy(inputs + (size_t)b * l->T, seq, (size_t)l->T * sizeof *seq);
    memcpy(targets + (size_t)b * l->T, seq + 1, (size_t)l->T * sizeof *seq);
    l->pos += (uint64_t)l->T;
  }
}

void aa_loader_skip(aa_loader_t *l, uint64_t n) {
  uint64_t last_start = (uint64_t)l->shard->n_tokens - (uint64_t)l->T - 1;
  for (uint64_t i = 0; i < n; i++) {
    if (l->pos > last_start) l->pos = 0;
    l->pos += (uint64_t)l->T;
  }
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static double plogp_sum(double acc, size_t count, double n) {
  if (count == 0) return acc;
  double p = (double)count / n;
  return acc - p * log(p);
}

/* Counts ids in a table when the id range is small (every byte-level or
 * GPT-2 shard), else sorts a copy; returns NAN with the last error set if
 * memory runs out. An empty shard has entropy 0. */
double aa_shard_unigram_entropy(const aa_shard_t *s) {
  if (!s || s->n_tokens == 0) return 0.0;
  int32_t max_id = 0;
  for (size_t i = 0; i < s->n_tokens; i++)
    if (s->tokens[i] > max_id) max_id = s->tokens[i];
  double n = (double)s->n_tokens, H = 0.0;
  if ((size_t)max_id + 1 <= ENTROPY_TABLE_MAX) {
    size_t *counts = calloc((size_t)max_id + 1, sizeof *counts);
    if (!counts) {
      aa_error(AA_ENOMEM, "entropy: out of memory for %d counts", max_id + 1);
      return NAN;
    }
    for (size_t i = 0; i < s->n_tokens; i++)
      counts[s->tokens[i] < 0 ? 0 : s->tokens[i]]++;
    for (size_t v = 0; v <= (size_t)max_id; v++)
      H = plogp_sum(H, counts[v], n);
    free(counts);
    return H;
  }
  int32_t *copy = malloc(s->n_tokens * sizeof *copy);
  if (!copy) {
    aa_error(AA_ENOMEM, "entropy: out of memory for a copy of %zu tokens", s->n_tokens);
    return NAN;
  }
  memcpy(copy, s->tokens, s->n_tokens * sizeof *copy);
  qsort(copy, s->n_tokens, sizeof *copy, cmp_i32);
  size_t run = 1;
  for (size_t i = 1; i <= s->n_tokens; i++) {
    if (i < s->n_tokens && copy[i] == copy[i - 1]) {
      run++;
    } else {
      H = plogp_sum(H, run, n);
      run = 1;
    }
  }
  free(copy);
  return H;
}
