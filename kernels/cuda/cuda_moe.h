/* The mixture-of-experts layer's ops on CUDA: the same ops, math and
 * layouts as the CPU's (kernels/cpu/cpu_moe.h, whose comments are the
 * contract), on DEVICE pointers, enqueued on the backend's stream
 * (cuda_backend.h), each returning 0 or the backend's sticky error code.
 * The engine reaches them through the backend table's moe entry
 * (kernels/moe_ops.h, aa__cuda_moe_ops). Written without a GPU to run on:
 * tests/test_cuda_ops.c compares every op with the CPU's, and skips without
 * a GPU; scripts/gpu-check.sh's moe_train step trains the MoE test model on
 * cuda:0 against the CPU.
 *
 * Differences from the CPU functions, all about where things live:
 *  - a routing map's arrays are device memory (aa_cuda_moe_route_alloc);
 *  - aa_cuda_moe_route also copies the E+1 offsets to host_offsets and
 *    fills *stats, so it waits for the stream: the per-expert GEMMs are
 *    sized on the host from host_offsets, which the experts ops take;
 *  - aa_cuda_moe_losses returns host floats, so it waits too.
 * Routing runs on the GPU in plain kernels: top-k one thread per token, the
 * counting sort one thread per expert scanning the slots in token order
 * (O(N k E) work, deterministic, adequate for the tens of experts and
 * thousands of tokens of a first slice; a parallel scan is the next step). */
#ifndef AA_CUDA_MOE_H
#define AA_CUDA_MOE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/cpu/cpu_moe.h"

/* As aa_cpu_moe_route_alloc, the arrays in device memory (AA_EOOM or the
 * sticky error when an allocation fails; *out untouched then). */
int aa_cuda_moe_route_alloc(aa_moe_route_t *out, int N, int E, int k);
void aa_cuda_moe_route_free(aa_moe_route_t *r);

int aa_cuda_moe_router_forward(float *logits, float *probs, const float *x, const float *wr, int N, int C,
                               int E);
/* host_offsets (E+1) is HOST memory; stats may be NULL. Waits for the
 * stream. */
int aa_cuda_moe_route(aa_moe_route_t *r, int32_t *host_offsets, aa_moe_stats_t *stats, const float *logits,
                      const float *probs, float capacity_factor);
int aa_cuda_moe_permute(float *xp, const float *x, const aa_moe_route_t *r, int C);
int aa_cuda_moe_permute_backward(float *dx, const float *dxp, const aa_moe_route_t *r, int C);
int aa_cuda_moe_unpermute(float *out, const float *yp, const aa_moe_route_t *r, int C);
int aa_cuda_moe_unpermute_backward(float *dyp, float *dweight, const float *dout, const float *yp,
                                   const aa_moe_route_t *r, int C);
/* offsets (E+1) is HOST memory (aa_cuda_moe_route's host_offsets). */
int aa_cuda_moe_experts_forward(float *yp, float *h, float *a, const float *xp, const float *w13,
                                const float *w2, const int32_t *offsets, int E, int C, int F);
int aa_cuda_moe_experts_backward(float *dxp, float *dw13, float *dw2, const float *dyp, const float *xp,
                                 const float *h, const float *a, const float *w13, const float *w2,
                                 const int32_t *offsets, int E, int C, int F);
int aa_cuda_moe_shared_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                               const float *ws2, int S, int N, int C, int F);
int aa_cuda_moe_shared_backward(float *dx, float *dws13, float *dws2, const float *dout, const float *x,
                                const float *hs, const float *as, const float *ws13, const float *ws2, int S,
                                int N, int C, int F);
/* Qwen-MoE's gated shared experts (aa_cpu_moe_shared_gate_*): the gate's
 * dot products in double, one thread a token, and dwg summed in token order
 * one thread a column, as the CPU's; scratch from cudaMallocAsync. */
int aa_cuda_moe_shared_gate_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                                    const float *ws2, const float *wg, int S, int N, int C, int F);
int aa_cuda_moe_shared_gate_backward(float *dx, float *dws13, float *dws2, float *dwg, const float *dout,
                                     const float *x, const float *hs, const float *as, const float *ws13,
                                     const float *ws2, const float *wg, int S, int N, int C, int F);
/* *aux and *z are HOST floats. Waits for the stream. */
int aa_cuda_moe_losses(float *aux, float *z, const float *logits, const float *probs, const aa_moe_route_t *r,
                       float aux_coef, float z_coef);
int aa_cuda_moe_router_backward(float *dx, float *dwr, float *dlogits, const float *dweight, const float *x,
                                const float *wr, const float *logits, const float *probs,
                                const aa_moe_route_t *r, int C, float aux_coef, float z_coef, float dloss);

#ifdef __cplusplus
}
#endif

#endif
