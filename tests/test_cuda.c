/* CUDA backend presence. With no CUDA build or no GPU the checks report
 * "skipped" with the reason; the build itself proves the CUDA code
 * compiles and links. */
#include "aa_test.h"
#include "common/aa.h"
#include <string.h>
#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

AA_TEST(cuda_device_query_answers_without_crashing) {
#ifndef AA_HAVE_CUDA
  SKIP("built without CUDA (AUTOACCEL_CUDA=off or no nvcc)");
#else
  int n = -1;
  int rc = aa_cuda_device_count(&n);
  if (rc) {
    CHECK(rc == AA_EUNSUPPORTED);
    CHECK(strstr(aa_last_error(), "no usable CUDA device") != NULL);
    SKIP("no GPU: %s", aa_last_error());
  }
  CHECK(n >= 1);
  fprintf(stderr, "  %d CUDA device(s)\n", n);
#endif
}

int main(void) {
  RUN(cuda_device_query_answers_without_crashing);
  return aa_test_summary();
}
