/* The CPU op table: wires the kernels of this folder into an aa_ops_t. */
#include "../moe_ops.h"
#include "cpu_internal.h"

#include <cblas.h>
#include <omp.h>

/* Sets the OpenMP team size for parallel regions started from the calling
 * thread (the engine's thread) and the OpenBLAS pool size. With OpenBLAS's
 * OpenMP build the second call sets the same OpenMP count again; with the
 * pthread build it sizes BLAS's own pool. */
static void cpu_set_threads(int n) {
  if (n < 1) n = 1;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

const char *aa_cpu_blas_core(void) { return openblas_get_corename(); }

/* The memory entries, in cpu_memory.c. */
int aa__cpu_alloc(void **out, size_t bytes);
void aa__cpu_free(void *p);
void aa__cpu_memset0(void *p, size_t bytes);
int aa__cpu_copy(void *dst, const void *src, size_t bytes);
int aa__cpu_sync(void);

static size_t cpu_scratch_bytes(void) { return 0; }

/* OpenBLAS 0.3.21 has no 16-bit GEMM (no cblas_sbgemm): fp32 it is. */
static void cpu_set_gemm_inputs(aa_dtype_t dtype) { (void)dtype; }

static const aa_ops_t cpu_ops = {
    .name = "cpu",
    .set_threads = cpu_set_threads,
    .set_gemm_inputs = cpu_set_gemm_inputs,
    .encoder_forward = aa__cpu_encoder_forward,
    .encoder_backward = aa__cpu_encoder_backward,
    .layernorm_forward = aa__cpu_layernorm_forward,
    .layernorm_backward = aa__cpu_layernorm_backward,
    .matmul_forward = aa__cpu_matmul_forward,
    .matmul_backward = aa__cpu_matmul_backward,
    .attention_forward = aa__cpu_attention_forward,
    .attention_backward = aa__cpu_attention_backward,
    .gelu_forward = aa__cpu_gelu_forward,
    .gelu_backward = aa__cpu_gelu_backward,
    .residual_forward = aa__cpu_residual_forward,
    .accumulate = aa__cpu_accumulate,
    .crossentropy_forward = aa__cpu_crossentropy_forward,
    .crossentropy_backward = aa__cpu_crossentropy_backward,
    .encoder_forward_vocab = aa__cpu_encoder_forward_vocab,
    .encoder_backward_vocab = aa__cpu_encoder_backward_vocab,
    .xent_vocab_partial = aa__cpu_xent_vocab_partial,
    .xent_vocab_forward = aa__cpu_xent_vocab_forward,
    .xent_vocab_backward = aa__cpu_xent_vocab_backward,
    .adamw_update = aa__cpu_adamw_update,
    .sum_squares = aa__cpu_sum_squares,
    .scale = aa__cpu_scale,
    .cast_from_f32 = aa__cpu_cast_from_f32,
    .cast_to_f32 = aa__cpu_cast_to_f32,
    .round_store = aa__cpu_round_store,
    .alloc = aa__cpu_alloc,
    .free = aa__cpu_free,
    .memset0 = aa__cpu_memset0,
    .upload = aa__cpu_copy,
    .download = aa__cpu_copy,
    .sync = aa__cpu_sync,
    .scratch_bytes = cpu_scratch_bytes,
    .rmsnorm_forward = aa__cpu_rmsnorm_forward,
    .rmsnorm_backward = aa__cpu_rmsnorm_backward,
    .swiglu_forward = aa__cpu_swiglu_forward,
    .swiglu_backward = aa__cpu_swiglu_backward,
    .rope_forward = aa__cpu_rope_forward,
    .rope_backward = aa__cpu_rope_backward,
    .attention_gqa_forward = aa__cpu_attention_gqa_forward,
    .attention_block_forward = aa__cpu_attention_block_forward,
    .attention_block_merge = aa__cpu_attention_block_merge,
    .attention_block_delta = aa__cpu_attention_block_delta,
    .attention_block_backward = aa__cpu_attention_block_backward,
    .rows_copy = aa__cpu_rows_copy,
    .rows_accumulate = aa__cpu_rows_accumulate,
    .attention_gqa_backward = aa__cpu_attention_gqa_backward,
    .attention_decode = aa__cpu_attention_decode,
    .moe = &aa__cpu_moe_ops,
    .matmul_backward_set = aa__cpu_matmul_backward_set,
    .bias_gelu_forward = aa__cpu_bias_gelu_forward,
    .gelu_backward_bias = aa__cpu_gelu_backward_bias,
    .swiglu_backward_set = aa__cpu_swiglu_backward_set,
    .adamw_update_scaled = aa__cpu_adamw_update_scaled,
};

const aa_ops_t *aa_ops_cpu(void) { return &cpu_ops; }
