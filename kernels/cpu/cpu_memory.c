/* The memory entries of the CPU op table (contracts in kernels/ops.h):
 * backend memory is host memory, so they are plain aligned_alloc, memset
 * and memcpy, and there is nothing to wait for. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/mem.h"
#include "cpu_internal.h"

#define CPU_MEM_ALIGN 64

/* aligned_alloc wants a multiple of the alignment, so the size is rounded
 * up; the whole rounded block is zeroed, as aa_mem_alloc does. */
int aa__cpu_alloc(void **out, size_t bytes) {
  if (bytes == 0) {
    *out = NULL;
    return 0;
  }
  void *p = NULL;
  if (bytes <= SIZE_MAX - (CPU_MEM_ALIGN - 1)) {
    size_t rounded = (bytes + CPU_MEM_ALIGN - 1) / CPU_MEM_ALIGN * CPU_MEM_ALIGN;
    p = aligned_alloc(CPU_MEM_ALIGN, rounded);
    if (p) memset(p, 0, rounded);
  }
  if (!p) {
    char b[32];
    return aa_error(AA_ENOMEM, "out of host memory: could not allocate %s", aa_mem_fmt(b, bytes));
  }
  *out = p;
  return 0;
}

void aa__cpu_free(void *p) { free(p); }

/* Large fills are split over the OpenMP team in 64 KiB pieces: the engine
 * zeroes gradients of tens of MiB per step, and one core filling them
 * leaves the other idle. */
void aa__cpu_memset0(void *p, size_t bytes) {
  if (bytes < AA__CPU_COPY_PAR_MIN * sizeof(float)) {
    if (bytes) memset(p, 0, bytes);
    return;
  }
  const size_t piece = 64 * 1024, npieces = (bytes + piece - 1) / piece;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < npieces; i++)
    memset((char *)p + i * piece, 0, i + 1 < npieces ? piece : bytes - i * piece);
}

int aa__cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
  return 0;
}

int aa__cpu_sync(void) { return 0; }
