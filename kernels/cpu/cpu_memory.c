/* The memory entries of the CPU op table (contracts in kernels/ops.h):
 * backend memory is host memory, so they are plain aligned_alloc, memset
 * and memcpy, and there is nothing to wait for. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/mem.h"
#include "../ops.h"

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

void aa__cpu_memset0(void *p, size_t bytes) {
  if (bytes) memset(p, 0, bytes);
}

int aa__cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
  return 0;
}

int aa__cpu_sync(void) { return 0; }
