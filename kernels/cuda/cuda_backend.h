/* CUDA backend entry points callable from C. Built only when nvcc is found
 * (AA_HAVE_CUDA); the kernels of the op table arrive with the CUDA backend
 * issue. The executor parent never calls these: CUDA is initialised only in
 * runner children. */
#ifndef AA_CUDA_BACKEND_H
#define AA_CUDA_BACKEND_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices in *out. Returns 0, or AA_EUNSUPPORTED with
 * the CUDA runtime's reason in the last-error message (no driver, no
 * device). */
int aa_cuda_device_count(int *out);

#ifdef __cplusplus
}
#endif

#endif
