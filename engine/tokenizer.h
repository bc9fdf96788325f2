/* Byte-level BPE tokenizers read from a Hugging Face `tokenizer.json`, as
 * GPT-2 and Llama 3 use: the model's vocab and merges, the pre-tokenizer
 * (GPT-2's or Llama 3's split pattern, then GPT-2's bytes_to_unicode
 * alphabet) and the added (special) tokens. What is read, what is refused and the limits of
 * the Unicode tables are in docs/data-format.md, "BPE tokenizers". */
#ifndef AA_TOKENIZER_H
#define AA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* Bounds on what a tokenizer file may declare, checked before anything
 * is allocated from its counts. */
#define AA_TOKENIZER_MAX_FILE_BYTES ((size_t)64 << 20)
#define AA_TOKENIZER_MAX_VOCAB (1 << 21)
#define AA_TOKENIZER_MAX_MERGES (1 << 21)
#define AA_TOKENIZER_MAX_ADDED 4096
#define AA_TOKENIZER_MAX_TOKEN_BYTES 256

typedef struct aa_tokenizer aa_tokenizer_t;

/* Reads and validates a tokenizer.json file (at most
 * AA_TOKENIZER_MAX_FILE_BYTES). *out receives the tokenizer (transferred;
 * aa_tokenizer_free it) and is set only on success. A malformed file is
 * AA_EPARSE (not JSON) or AA_EINVAL naming the field
 * ("tok.json: model.merges[3]: ..."); a well-formed file of a kind this
 * reader does not implement (WordPiece, a normalizer, another split
 * pattern) is AA_EUNSUPPORTED. */
int aa_tokenizer_load(aa_tokenizer_t **out, const char *path);

/* As aa_tokenizer_load, from len bytes of JSON text (borrowed); origin
 * names it in messages. */
int aa_tokenizer_parse(aa_tokenizer_t **out, const char *json, size_t len, const char *origin);

void aa_tokenizer_free(aa_tokenizer_t *t);

/* One more than the largest id of the vocab and the added tokens: the
 * vocab_size of the shards and of a model that reads them. */
int aa_tokenizer_vocab_size(const aa_tokenizer_t *t);

/* Encodes len bytes of text (borrowed; any bytes: invalid UTF-8 is split
 * one byte at a time and still round-trips). Added tokens are matched
 * whole first (leftmost, then longest), the text between them is split by
 * the tokenizer's pattern and each piece BPE-merged by rank. *out_ids receives
 * *out_n ids (transferred, free(); NULL when *out_n is 0); both are set
 * only on success. */
int aa_tokenizer_encode(const aa_tokenizer_t *t, const unsigned char *text, size_t len, int32_t **out_ids,
                        size_t *out_n);

/* Decodes n ids to the bytes they stand for. *out receives *out_len bytes
 * (transferred, free(); NUL-terminated for convenience, the terminator not
 * counted); set only on success. An id with no token is AA_EINVAL naming
 * it and its index. */
int aa_tokenizer_decode(const aa_tokenizer_t *t, const int32_t *ids, size_t n, unsigned char **out,
                        size_t *out_len);

/* Builds train/val shards as aa_data_build_text does, with this tokenizer:
 * each input file (borrowed paths) is encoded on its own and the ids are
 * concatenated in order; the last floor(n_ids * val_fraction) ids go to
 * val_out. Shards carry aa_tokenizer_vocab_size(t). Inputs total at most
 * 1 GiB. */
int aa_tokenizer_build_shards(const aa_tokenizer_t *t, const char *const *inputs, int n_inputs,
                              const char *train_out, const char *val_out, double val_fraction);

#endif
