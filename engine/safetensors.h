/* Hugging Face safetensors files: a bounded, validating reader and a
 * writer of fp32/bf16/f16 tensors.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON (an
 * object mapping each tensor name to {"dtype", "shape", "data_offsets"},
 * plus an optional "__metadata__" object of strings), then the data
 * section; data_offsets are [begin, end) byte offsets into it. The reader
 * trusts nothing in the file: N is capped (AA_ST_HEADER_MAX) and checked
 * against the file's size before the header is read, the JSON is parsed
 * with duplicate keys refused, and every tensor's dtype, shape and
 * offsets are checked (a known dtype; at most AA_ST_MAX_DIMS dimensions;
 * end - begin = prod(shape) x the dtype's size with no overflow; the
 * tensors tile the data section exactly: no overlap, no gap, nothing past
 * the end and nothing after the last), as Hugging Face's own reader
 * requires. Only then is anything else allocated. Tensor data is read
 * with pread, one tensor at a time, so memory stays bounded by the
 * largest tensor the caller asks for. Format: docs/checkpoint-format.md
 * "Import and export". */
#ifndef AA_SAFETENSORS_H
#define AA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/aa.h"

#define AA_ST_HEADER_MAX (100u << 20) /* bytes of JSON header, as Hugging Face caps it */
#define AA_ST_MAX_DIMS 8
#define AA_ST_NAME_MAX 255 /* bytes of a tensor name */

/* The dtypes of the format. Only F32, BF16 and F16 convert to fp32; the
 * others are recognised (so their sizes validate) and refused on read. */
typedef enum {
  AA_ST_BOOL,
  AA_ST_U8,
  AA_ST_I8,
  AA_ST_F8_E5M2,
  AA_ST_F8_E4M3,
  AA_ST_I16,
  AA_ST_U16,
  AA_ST_F16,
  AA_ST_BF16,
  AA_ST_I32,
  AA_ST_U32,
  AA_ST_F32,
  AA_ST_F64,
  AA_ST_I64,
  AA_ST_U64,
  AA_ST_N_DTYPES
} aa_st_dtype_t;

/* The dtype's name in the format ("F32", ...) and element size in bytes. */
const char *aa_st_dtype_name(aa_st_dtype_t t);
size_t aa_st_dtype_size(aa_st_dtype_t t);

typedef struct aa_st_tensor {
  char name[AA_ST_NAME_MAX + 1];
  aa_st_dtype_t dtype;
  int ndim; /* 0..AA_ST_MAX_DIMS (0: a scalar) */
  int64_t shape[AA_ST_MAX_DIMS];
  uint64_t numel;      /* prod(shape) */
  uint64_t begin, end; /* byte offsets into the data section */
} aa_st_tensor_t;

/* An open, validated file. */
typedef struct aa_st_file {
  int fd;
  char path[4096];
  uint64_t data_start;     /* 8 + header length */
  int n;                   /* tensors (not counting __metadata__) */
  aa_st_tensor_t *tensors; /* n entries, in the header's order; owned */
} aa_st_file_t;

/* Opens path and validates it as above. On success *out is an open file
 * the caller owns (aa_st_close); on failure *out is untouched and the
 * error (AA_EFORMAT for a file that is not valid safetensors, AA_ENOENT,
 * AA_EIO) names the file and what is wrong, and the tensor when one is. */
int aa_st_open(aa_st_file_t **out, const char *path);
void aa_st_close(aa_st_file_t *f);

/* The tensor named name, or NULL. */
const aa_st_tensor_t *aa_st_find(const aa_st_file_t *f, const char *name);

/* Reads tensor t of f (an F32, BF16 or F16 tensor, else AA_EUNSUPPORTED)
 * into dst (t->numel floats, borrowed), widening 16-bit values exactly. */
int aa_st_read_f32(const aa_st_file_t *f, const aa_st_tensor_t *t, float *dst);

/* One tensor to write: a name, its shape, and a callback that fills its
 * numel fp32 values into dst (host memory the writer owns) when its turn
 * comes. */
typedef struct aa_st_entry {
  const char *name; /* borrowed */
  int ndim;         /* 1..AA_ST_MAX_DIMS */
  int64_t shape[AA_ST_MAX_DIMS];
} aa_st_entry_t;
typedef int (*aa_st_fill_fn)(int i, float *dst, size_t numel, void *data);

/* Writes a safetensors file of the n entries, in order, with dtype
 * (AA_F32, AA_BF16 (round to nearest even) or AA_F16 (the same; overflow
 * to inf)) and the metadata {"format": "pt"}, the header padded with
 * spaces to a multiple of 8 bytes. Tensor i's values come from fill(i,
 * ...), one tensor at a time, so memory stays bounded by the largest. The
 * file is written to a temporary and renamed over path (common/file.h):
 * a failure leaves path as it was. */
int aa_st_write(const char *path, aa_dtype_t dtype, const aa_st_entry_t *entries, int n, aa_st_fill_fn fill,
                void *data);

#endif
