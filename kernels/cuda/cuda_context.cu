/* The backend context (stream, cuBLAS handles, workspace, scratch), the
 * sticky error and the device-memory helpers of cuda_backend.h.
 *
 * The engine drives the op table from one thread, so the context is a plain
 * process-wide static; nothing here is thread-safe. */
#include "cuda_common.cuh"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* 32 MiB: what cuBLASLt's heuristics ask for on Hopper for large GEMMs. */
#define AA_CUDA_WORKSPACE (32u << 20)

static aa__cuda_ctx_t g_ctx;
static int g_ready;
static int g_err;
static char g_msg[512];

extern "C" int aa_cuda_last_error(void) { return g_err; }
extern "C" const char *aa_cuda_last_error_message(void) { return g_msg; }
extern "C" void aa_cuda_clear_error(void) {
  g_err = 0;
  g_msg[0] = '\0';
}

int aa__cuda_fail(int code, const char *file, int line, const char *fmt, ...) {
  char buf[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (!g_err) {
    g_err = code;
    snprintf(g_msg, sizeof g_msg, "%s:%d: %s", file, line, buf);
  }
  return aa_error(code, "cuda backend: %s:%d: %s", file, line, buf);
}

int aa__cuda_fail_cuda(cudaError_t err, const char *what, const char *file, int line) {
  /* Consume a non-sticky error (a failed allocation, a bad launch
   * configuration) so that the next launch check does not report it again. */
  (void)cudaGetLastError();
  int code = err == cudaErrorMemoryAllocation ? AA_EOOM
             : (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) ? AA_EUNSUPPORTED
                                                                                 : AA_EINTERNAL;
  return aa__cuda_fail(code, file, line, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

int aa__cuda_fail_cublas(cublasStatus_t st, const char *what, const char *file, int line) {
  int code = st == CUBLAS_STATUS_ALLOC_FAILED ? AA_EOOM : AA_EINTERNAL;
  return aa__cuda_fail(code, file, line, "%s: %s (%s)", what, cublasGetStatusString(st), cublasGetStatusName(st));
}

/* Creates the context's resources on the current device; on failure what
 * was created stays in g_ctx for aa_cuda_shutdown to release. */
static int ctx_create(void) {
  aa__cuda_ctx_t *c = &g_ctx;
  AA_CUDA_TRY(cudaGetDevice(&c->device));
  AA_CUDA_TRY(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, c->device));
  /* A blocking stream: it orders with the legacy default stream, so plain
   * cudaMemcpy by a caller sees the results of enqueued ops. */
  AA_CUDA_TRY(cudaStreamCreate(&c->stream));
  AA_CUBLAS_TRY(cublasCreate(&c->blas));
  AA_CUBLAS_TRY(cublasLtCreate(&c->lt));
  AA_CUDA_TRY(cudaMalloc(&c->workspace, AA_CUDA_WORKSPACE));
  c->workspace_size = AA_CUDA_WORKSPACE;
  AA_CUDA_TRY(cudaMalloc((void **)&c->sumsq, 257 * sizeof(double)));
  AA_CUDA_TRY(cudaMallocHost((void **)&c->sumsq_host, sizeof(double)));
  AA_CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
  AA_CUBLAS_TRY(cublasSetWorkspace(c->blas, c->workspace, c->workspace_size));
  /* Pedantic fp32 unless TF32 was asked for: no reduced-precision inputs,
   * whatever NVIDIA_TF32_OVERRIDE says. */
  AA_CUBLAS_TRY(cublasSetMathMode(c->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
  return 0;
}

extern "C" int aa_cuda_init(int device) {
  if (g_ready) {
    if (g_ctx.device == device) return 0;
    aa_cuda_shutdown();
  }
  AA_CUDA_TRY(cudaSetDevice(device));
  int rc = ctx_create();
  if (rc) {
    aa_cuda_shutdown();
    return rc;
  }
  g_ready = 1;
  return 0;
}

extern "C" void aa_cuda_shutdown(void) {
  aa__cuda_ctx_t *c = &g_ctx;
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->lt) cublasLtDestroy(c->lt);
  if (c->blas) cublasDestroy(c->blas);
  cudaFree(c->workspace);
  cudaFree(c->scratch);
  aa__cuda_llama_release();
  cudaFree(c->sumsq);
  if (c->sumsq_host) cudaFreeHost(c->sumsq_host);
  if (c->stream) cudaStreamDestroy(c->stream);
  int tf32 = c->tf32;
  aa_dtype_t gemm_inputs = c->gemm_inputs;
  memset(c, 0, sizeof *c);
  c->tf32 = tf32;
  c->gemm_inputs = gemm_inputs;
  g_ready = 0;
}

aa__cuda_ctx_t *aa__cuda_ctx(void) {
  if (g_ready) return &g_ctx;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) {
    aa__cuda_fail_cuda(err, "cudaGetDevice", __FILE__, __LINE__);
    return NULL;
  }
  return aa_cuda_init(dev) ? NULL : &g_ctx;
}

extern "C" void aa_cuda_set_tf32(int enabled) {
  g_ctx.tf32 = enabled != 0;
  if (g_ready)
    cublasSetMathMode(g_ctx.blas, g_ctx.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
}

void aa__cuda_set_gemm_inputs(aa_dtype_t dtype) { g_ctx.gemm_inputs = dtype; }

size_t aa__cuda_scratch_bytes(void) {
  return g_ready ? g_ctx.scratch_size + g_ctx.workspace_size + 257 * sizeof(double) : 0;
}

int aa__cuda_scratch(aa__cuda_ctx_t *ctx, size_t bytes, void **out) {
  if (bytes > ctx->scratch_size) {
    /* cudaFree waits for the device, so no enqueued op still reads it. */
    AA_CUDA_TRY(cudaFree(ctx->scratch));
    ctx->scratch = NULL;
    ctx->scratch_size = 0;
    AA_CUDA_TRY(cudaMalloc(&ctx->scratch, bytes));
    ctx->scratch_size = bytes;
  }
  *out = ctx->scratch;
  return 0;
}

extern "C" int aa_cuda_sync(void) {
  if (g_ready) {
    cudaError_t err = cudaStreamSynchronize(g_ctx.stream);
    if (err != cudaSuccess) aa__cuda_fail_cuda(err, "cudaStreamSynchronize", __FILE__, __LINE__);
  }
  return g_err;
}

extern "C" int aa_cuda_alloc(void **out, size_t bytes) {
  if (!aa__cuda_ctx()) return aa_cuda_last_error();
  void *p = NULL;
  AA_CUDA_TRY(cudaMalloc(&p, bytes ? bytes : 1));
  *out = p;
  return 0;
}

extern "C" void aa_cuda_free(void *dev) {
  if (dev) cudaFree(dev);
}

extern "C" int aa_cuda_upload(void *dev_dst, const void *host_src, size_t bytes) {
  AA_CUDA_CTX(c);
  AA_CUDA_TRY(cudaMemcpyAsync(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
  AA_CUDA_TRY(cudaStreamSynchronize(c->stream));
  return 0;
}

extern "C" int aa_cuda_download(void *host_dst, const void *dev_src, size_t bytes) {
  AA_CUDA_CTX(c);
  AA_CUDA_TRY(cudaMemcpyAsync(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, c->stream));
  AA_CUDA_TRY(cudaStreamSynchronize(c->stream));
  return 0;
}

extern "C" int aa_cuda_memset0(void *dev, size_t bytes) {
  AA_CUDA_CTX(c);
  AA_CUDA_TRY(cudaMemsetAsync(dev, 0, bytes, c->stream));
  return 0;
}
