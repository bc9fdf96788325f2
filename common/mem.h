/* Memory accounting. Every engine allocation of a model-sized buffer goes
 * through an accountant that records it under a kind, keeps the current and
 * peak bytes per kind and in total, and refuses an allocation that would
 * take the total past the limit (AA_EOOM with a message naming the kind,
 * the request, the limit and what is in use). The planner uses the limit to
 * exercise the out-of-memory path of a dry run on CPU; the CUDA allocator
 * accounts device memory through the same type. */
#ifndef AA_MEM_H
#define AA_MEM_H

#include <stddef.h>

typedef enum {
  AA_MEM_PARAMS = 0, /* parameters in the compute dtype (fp32, or the 16-bit copy under amp) */
  AA_MEM_GRADS,      /* parameter gradients */
  AA_MEM_OPTIM,      /* optimizer state: AdamW moments, and fp32 master weights under amp */
  AA_MEM_ACTS,       /* activations kept from forward for backward */
  AA_MEM_WORKSPACE,  /* scratch: recompute buffers, activation gradients, fp32 staging */
  AA_MEM_NKINDS
} aa_mem_kind_t;

typedef struct aa_mem {
  size_t limit;                    /* 0 = unlimited */
  size_t cur[AA_MEM_NKINDS];
  size_t peak[AA_MEM_NKINDS];      /* per kind */
  size_t total, peak_total;        /* peak_total is the peak of the sum, not the sum of peaks */
} aa_mem_t;

/* Zeroes the accountant and sets the limit (0 = none). */
void aa_mem_init(aa_mem_t *mem, size_t limit);

/* Allocates `bytes` zeroed bytes, 64-byte aligned, accounted to kind.
 * *out receives the memory (owned by the caller; release with aa_mem_free
 * and the same bytes and kind). bytes == 0 gives *out = NULL and 0.
 * Fails with AA_EOOM (limit) or AA_ENOMEM (the system) and a message such as
 *   "out of memory: 12.0 MiB of activations would exceed the memory limit
 *    of 8.0 MiB (in use: 3.1 MiB)". *out is untouched on failure.
 * mem may be NULL: plain allocation, no accounting. */
int aa_mem_alloc(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes, void **out);

/* Accounting without allocating, for memory that someone else provides (a
 * backend's alloc, a backend's own scratch). check: would `bytes` more of
 * kind stay within the limit (0, or AA_EOOM with aa_mem_alloc's message)?
 * charge: check, then count them (current and peaks); uncharge gives them
 * back. A NULL mem or 0 bytes passes and counts nothing. Check before
 * allocating and charge after, so a failed allocation leaves no peak. */
int aa_mem_check(const aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes);
int aa_mem_charge(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes);
void aa_mem_uncharge(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes);
void aa_mem_free(aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes, void *p);

const char *aa_mem_kind_name(aa_mem_kind_t kind); /* "params", "grads", "optim", "acts", "workspace" */

/* Human-readable size ("512 B", "3.2 KiB", "1.5 MiB", "2.0 GiB") into buf. */
const char *aa_mem_fmt(char buf[32], size_t bytes);

/* Parses a byte count: a non-negative integer with an optional suffix
 * K, M, G, T (powers of 1024, also KiB/MiB/GiB/TiB) or KB/MB/GB/TB (powers
 * of 1000). Returns AA_EINVAL for anything else or an overflow. */
int aa_mem_parse_bytes(const char *s, size_t *out);

#endif
