/* CUDA backend entry points callable from C. Built only when nvcc is found
 * (AA_HAVE_CUDA). The executor parent never calls these: CUDA is
 * initialised only in runner children.
 *
 * The op table aa_ops_cuda() implements kernels/ops.h on DEVICE pointers:
 * every float/int32/uint16 pointer passed to its ops must come from
 * aa_cuda_alloc (or cudaMalloc on the backend's device). Ops are enqueued on
 * the backend's one stream and return before the GPU has finished, except
 * sum_squares, which returns a host double and so waits for its result.
 *
 * Errors: the table's ops return void, so the backend keeps a sticky error.
 * The first failure (a CUDA or cuBLAS call, a launch, an allocation of
 * scratch) stores its code and message, with file and line, and later
 * failures do not overwrite it; ops keep running (they may then produce
 * garbage). Callers check aa_cuda_last_error() at a step boundary, normally
 * through aa_cuda_sync(), which also surfaces asynchronous kernel faults.
 * The message also goes to the failing thread's aa_last_error(). */
#ifndef AA_CUDA_BACKEND_H
#define AA_CUDA_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Inside the extern "C" block: ops.h and common/aa.h declare C functions. */
#include "kernels/ops.h"

/* Number of usable CUDA devices in *out. Returns 0, or AA_EUNSUPPORTED with
 * the CUDA runtime's reason in the last-error message (no driver, no
 * device). */
int aa_cuda_device_count(int *out);

typedef struct aa_cuda_device_info {
  char name[256];
  size_t total_mem;     /* bytes */
  int sm_count;         /* streaming multiprocessors */
  int cc_major;         /* compute capability */
  int cc_minor;
  int clock_khz;        /* peak SM clock the driver reports */
  double peak_bf16_flops; /* dense bf16 tensor FLOP/s estimate; 0 when unknown */
} aa_cuda_device_info_t;

/* Fills *out for device `index` (out is written only on success).
 * peak_bf16_flops = sm_count * clock * dense bf16 FLOP per SM per clock,
 * the last being 2048 on sm_80 (A100: 1024 FMA/clk/SM, 312 TFLOP/s at
 * 1410 MHz) and 4096 on sm_90 (H100: 2048 FMA/clk/SM, 989 TFLOP/s at
 * 1830 MHz); other architectures report 0. The clock is the maximum the
 * driver reports, so this is an upper bound for MFU: sustained clocks
 * under tensor load are often lower. Returns 0, AA_EINVAL for a bad index,
 * AA_EUNSUPPORTED when CUDA cannot answer. */
int aa_cuda_device_info(int index, aa_cuda_device_info_t *out);

/* Makes `device` current and creates the backend's stream, cuBLAS and
 * cuBLASLt handles and workspace. Ops initialise on the current device by
 * themselves if this was not called. Returns 0 or a negative AA_E* code. */
int aa_cuda_init(int device);
/* Releases everything aa_cuda_init (or an op) created, after waiting for the
 * stream. Safe to call when nothing was created. */
void aa_cuda_shutdown(void);

/* The CUDA op table (device pointers; see the top of this file). */
const aa_ops_t *aa_ops_cuda(void);

/* TF32 tensor-core math for the fp32 GEMMs (matmul and attention). Off by
 * default so results stay within fp32 rounding of the CPU backend; with it
 * on, products carry ~1e-3 relative error. */
void aa_cuda_set_tf32(int enabled);

/* Which attention kernels the op table runs (kernels/README.md): GEMM =
 * cuBLAS strided-batched products over the full T x T in transient scratch
 * (tensor cores under TF32); FLASH = the flash-style kernels (no T x T
 * anywhere, fp32 CUDA cores); AUTO (the default) = the variable
 * AUTOACCEL_CUDA_ATTENTION (gemm or flash) if set, else GEMM while one
 * B*NH*T*T fp32 buffer fits in 1 GiB, FLASH past that. Both keep the same
 * logsumexp, so a forward of one and a backward of the other agree. */
typedef enum { AA_CUDA_ATT_AUTO = 0, AA_CUDA_ATT_GEMM = 1, AA_CUDA_ATT_FLASH = 2 } aa_cuda_attention_t;
void aa_cuda_set_attention(aa_cuda_attention_t mode);

/* The sticky error: 0 or the first negative AA_E* code since the last
 * aa_cuda_clear_error(), and its message ("" when none). */
int aa_cuda_last_error(void);
const char *aa_cuda_last_error_message(void);
void aa_cuda_clear_error(void);

/* Waits for the backend's stream; returns the sticky error (0 when all ops
 * so far succeeded). */
int aa_cuda_sync(void);

/* Device memory. aa_cuda_alloc stores a device pointer in *out (owned by the
 * caller, released with aa_cuda_free) or returns AA_EOOM / AA_EUNSUPPORTED.
 * The copies are synchronous with respect to the backend's stream (they
 * wait for enqueued ops) and return 0 or a negative code. */
int aa_cuda_alloc(void **out, size_t bytes);
void aa_cuda_free(void *dev);
int aa_cuda_upload(void *dev_dst, const void *host_src, size_t bytes);
int aa_cuda_download(void *host_dst, const void *dev_src, size_t bytes);
int aa_cuda_memset0(void *dev, size_t bytes);

/* Internal to kernels/cuda (the aa__ prefix): the llama family's launchers in
 * cuda_llama.cu, which cuda_ops.cu wires into the op table (contracts in
 * kernels/ops.h). Each returns 0 or the negative AA_E* code it recorded as
 * the sticky error. */
int aa__cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                             float eps);
int aa__cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int N, int C);
int aa__cuda_swiglu_forward(float *out, const float *inp, int N, int F);
int aa__cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
int aa__cuda_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta);
int aa__cuda_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta);
int aa__cuda_attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                   int HS);
int aa__cuda_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, int HS);
int aa__cuda_attention_decode(float *out, float *kcache, float *vcache, const float *qkv, int B, int Tmax,
                              int pos, int NH, int NKV, int HS);
/* Bytes of the buffer the GQA ops keep for their expanded copy of qkv (0
 * until one runs with NKV < NH), and its release (aa_cuda_shutdown's, after
 * the stream has drained). */
size_t aa__cuda_llama_scratch_bytes(void);
void aa__cuda_llama_release(void);

#ifdef __cplusplus
}
#endif

#endif
