/* Device discovery through the CUDA runtime. */
#include "cuda_backend.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

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

/* Dense bf16 tensor-core FLOP per SM per clock (2 per FMA); 0 when this
 * backend does not know the architecture. */
static double bf16_flop_per_sm_clock(int major, int minor) {
  if (major == 8 && minor == 0) return 2048.0; /* A100 */
  if (major == 9 && minor == 0) return 4096.0; /* H100, H200 */
  return 0.0;
}

extern "C" int aa_cuda_device_info(int index, aa_cuda_device_info_t *out) {
  int n = 0;
  int rc = aa_cuda_device_count(&n);
  if (rc) return rc;
  if (index < 0 || index >= n) return aa_error(AA_EINVAL, "CUDA device %d does not exist (%d found)", index, n);
  cudaDeviceProp prop;
  cudaError_t err = cudaGetDeviceProperties(&prop, index);
  int clock_khz = 0;
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index);
  if (err != cudaSuccess) {
    return aa_error(AA_EUNSUPPORTED, "cannot query CUDA device %d: %s (%s)", index, cudaGetErrorString(err),
                    cudaGetErrorName(err));
  }
  aa_cuda_device_info_t info;
  memset(&info, 0, sizeof info);
  snprintf(info.name, sizeof info.name, "%.*s", (int)sizeof info.name - 1, prop.name);
  info.total_mem = prop.totalGlobalMem;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.clock_khz = clock_khz;
  info.peak_bf16_flops = info.sm_count * (clock_khz * 1e3) * bf16_flop_per_sm_clock(prop.major, prop.minor);
  *out = info;
  return 0;
}
