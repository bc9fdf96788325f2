/* The mixture-of-experts ops behind the backend table (aa_ops_t's moe,
 * issue 33): one MoE block in engine/model.c for every backend. The
 * contracts are kernels/cpu/cpu_moe.h's (shapes, layouts, what accumulates),
 * with these differences, which let a device backend keep its routing map
 * in device memory:
 *  - every op returns 0 or a negative AA_E* code (the CPU ones cannot fail
 *    past route's NaN check; the CUDA ones report the sticky error);
 *  - a routing map's arrays are backend memory (route_alloc's), so the
 *    engine never reads them; route copies the E+1 offsets into
 *    host_offsets (host memory) and the experts ops take those, since each
 *    expert's GEMM is sized on the host;
 *  - losses writes host floats.
 * A backend without an op sets it NULL and the engine refuses the option
 * that needs it (shared_gate_*: Qwen-MoE's gated shared experts). */
#ifndef AA_MOE_OPS_H
#define AA_MOE_OPS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "cpu/cpu_moe.h"

typedef struct aa_moe_ops {
  int (*route_alloc)(aa_moe_route_t *out, int N, int E, int k);
  void (*route_free)(aa_moe_route_t *r);
  int (*router_forward)(float *logits, float *probs, const float *x, const float *wr, int N, int C, int E);
  /* host_offsets (E+1) and stats (may be NULL) are host memory. */
  int (*route)(aa_moe_route_t *r, int32_t *host_offsets, aa_moe_stats_t *stats, const float *logits,
               const float *probs, float capacity_factor);
  int (*permute)(float *xp, const float *x, const aa_moe_route_t *r, int C);
  int (*permute_backward)(float *dx, const float *dxp, const aa_moe_route_t *r, int C);
  int (*unpermute)(float *out, const float *yp, const aa_moe_route_t *r, int C);
  int (*unpermute_backward)(float *dyp, float *dweight, const float *dout, const float *yp,
                            const aa_moe_route_t *r, int C);
  /* offsets (E+1) is host memory (route's host_offsets, or a dispatcher's). */
  int (*experts_forward)(float *yp, float *h, float *a, const float *xp, const float *w13, const float *w2,
                         const int32_t *offsets, int E, int C, int F);
  int (*experts_backward)(float *dxp, float *dw13, float *dw2, const float *dyp, const float *xp,
                          const float *h, const float *a, const float *w13, const float *w2,
                          const int32_t *offsets, int E, int C, int F);
  int (*shared_forward)(float *out, float *hs, float *as, const float *x, const float *ws13, const float *ws2,
                        int S, int N, int C, int F);
  int (*shared_backward)(float *dx, float *dws13, float *dws2, const float *dout, const float *x,
                         const float *hs, const float *as, const float *ws13, const float *ws2, int S, int N,
                         int C, int F);
  int (*shared_gate_forward)(float *out, float *hs, float *as, const float *x, const float *ws13,
                             const float *ws2, const float *wg, int S, int N, int C, int F);
  int (*shared_gate_backward)(float *dx, float *dws13, float *dws2, float *dwg, const float *dout,
                              const float *x, const float *hs, const float *as, const float *ws13,
                              const float *ws2, const float *wg, int S, int N, int C, int F);
  /* *aux and *z are host floats. */
  int (*losses)(float *aux, float *z, const float *logits, const float *probs, const aa_moe_route_t *r,
                float aux_coef, float z_coef);
  int (*router_backward)(float *dx, float *dwr, float *dlogits, const float *dweight, const float *x,
                         const float *wr, const float *logits, const float *probs, const aa_moe_route_t *r,
                         int C, float aux_coef, float z_coef, float dloss);
} aa_moe_ops_t;

/* The backends' tables, for their aa_ops_t: the CPU's
 * (kernels/cpu/cpu_moe_ops.c, cpu_moe.h's ops) and the CUDA one's
 * (kernels/cuda/cuda_moe.cu, cuda_moe.h's). */
extern const aa_moe_ops_t aa__cpu_moe_ops;
extern const aa_moe_ops_t aa__cuda_moe_ops;

#ifdef __cplusplus
}
#endif

#endif
