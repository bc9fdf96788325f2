/* Token data: shard files and the deterministic batch loader.
 * Format: docs/data-format.md. Two on-disk formats are read:
 *  - autoaccel shards ("AATOKENS" magic, version 1, uint16 or uint32 ids);
 *  - llm.c shards (256 x int32 header, magic 20240520, version 1, uint16).
 * Only autoaccel shards are written. */
#ifndef AA_DATA_H
#define AA_DATA_H

#include <stddef.h>
#include <stdint.h>

#define AA_SHARD_MAGIC "AATOKENS"
#define AA_SHARD_VERSION 1
#define AA_SHARD_HEADER_BYTES 64
#define AA_LLMC_MAGIC 20240520

/* A shard loaded into memory as int32 token ids. */
typedef struct aa_shard {
  int32_t *tokens; /* owned */
  size_t n_tokens;
  int vocab_size;  /* from the header (llm.c shards: 0 = unknown) */
} aa_shard_t;

/* Reads a shard of either format. Validates magic, version, token width,
 * that the file size matches the header's token count exactly (truncated
 * or padded files are rejected), and, when max_vocab > 0, that every id is
 * < max_vocab. Errors name the file and the problem. */
int aa_shard_read(aa_shard_t *out, const char *path, int max_vocab);
void aa_shard_free(aa_shard_t *s);

/* Writes an autoaccel shard; token width is 2 bytes if vocab_size <= 65536,
 * else 4. Written to a fresh temporary and renamed over path
 * (common/file.h): a symlink at path is replaced, never written through.
 * An id outside [0, vocab_size) is AA_EINVAL; a file that cannot be written
 * (a missing directory included) is AA_EIO. */
int aa_shard_write(const char *path, const int32_t *tokens, size_t n, int vocab_size);

/* Deterministic loader: batch i is B sequences of T+1 consecutive tokens
 * (inputs = first T, targets = shifted by one). Sequences are taken
 * back to back from `pos`; when fewer than T+1 tokens remain the position
 * wraps to 0 (an epoch boundary). The position is the only state, so a
 * checkpoint saves and restores it exactly. */
typedef struct aa_loader {
  const aa_shard_t *shard; /* borrowed */
  int B, T;
  uint64_t pos;
} aa_loader_t;

/* Fails if the shard holds fewer than T+1 tokens. */
int aa_loader_init(aa_loader_t *l, const aa_shard_t *shard, int B, int T);
/* Fills inputs(B,T) and targets(B,T) and advances. */
void aa_loader_next(aa_loader_t *l, int32_t *inputs, int32_t *targets);
/* Advances past n sequences as aa_loader_next does when it takes them
 * (the same wrap rule), reading nothing: a data-parallel rank skips the
 * other ranks' part of each global batch this way. */
void aa_loader_skip(aa_loader_t *l, uint64_t n);

/* Byte-level tokenizer: each byte of text is one token (vocab 256). */
#define AA_BYTE_VOCAB 256

/* Builds train/val shards from text files: all files' bytes are
 * concatenated; the last val_fraction (0 <= f < 1) of the stream becomes the
 * validation shard. */
int aa_data_build_text(const char *const *inputs, int n_inputs, const char *train_out, const char *val_out,
                       double val_fraction);

/* Generates the synthetic corpus for the bundled example: English-like text
 * from a small probabilistic grammar (so it has learnable structure well
 * below its unigram entropy), byte-tokenized, n_bytes long, deterministic
 * in seed; writes train/val shards split by val_fraction. */
int aa_data_synth(const char *train_out, const char *val_out, size_t n_bytes, double val_fraction, uint64_t seed);

/* Unigram entropy in nats of the shard's token distribution. */
double aa_shard_unigram_entropy(const aa_shard_t *s);

#endif
