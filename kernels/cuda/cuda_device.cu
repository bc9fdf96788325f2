/* Device discovery through the CUDA runtime. */
#include "cuda_backend.h"

#include <cuda_runtime.h>

extern "C" {
#include "common/aa.h"
}

extern "C" int aa_cuda_device_count(int *out) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    return aa_error(AA_EUNSUPPORTED, "no usable CUDA device: %s (%s)", cudaGetErrorString(err),
                    cudaGetErrorName(err));
  }
  *out = n;
  return 0;
}
