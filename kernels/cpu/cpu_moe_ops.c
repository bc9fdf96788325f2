/* The CPU backend's MoE table (kernels/moe_ops.h): cpu_moe.h's ops, which
 * return nothing, behind entries that return 0. The routing map is host
 * memory here, so route's host_offsets is a copy of the map's own. */
#include <string.h>

#include "../moe_ops.h"

static int route(aa_moe_route_t *r, int32_t *host_offsets, aa_moe_stats_t *stats, const float *logits,
                 const float *probs, float capacity_factor) {
  int rc = aa_cpu_moe_route(r, stats, logits, probs, capacity_factor);
  if (!rc && host_offsets != r->offsets)
    memcpy(host_offsets, r->offsets, (size_t)(r->E + 1) * sizeof(int32_t));
  return rc;
}

static int router_forward(float *logits, float *probs, const float *x, const float *wr, int N, int C, int E) {
  aa_cpu_moe_router_forward(logits, probs, x, wr, N, C, E);
  return 0;
}

static int permute(float *xp, const float *x, const aa_moe_route_t *r, int C) {
  aa_cpu_moe_permute(xp, x, r, C);
  return 0;
}

static int permute_backward(float *dx, const float *dxp, const aa_moe_route_t *r, int C) {
  aa_cpu_moe_permute_backward(dx, dxp, r, C);
  return 0;
}

static int unpermute(float *out, const float *yp, const aa_moe_route_t *r, int C) {
  aa_cpu_moe_unpermute(out, yp, r, C);
  return 0;
}

static int unpermute_backward(float *dyp, float *dweight, const float *dout, const float *yp,
                              const aa_moe_route_t *r, int C) {
  aa_cpu_moe_unpermute_backward(dyp, dweight, dout, yp, r, C);
  return 0;
}

static int experts_forward(float *yp, float *h, float *a, const float *xp, const float *w13, const float *w2,
                           const int32_t *offsets, int E, int C, int F) {
  aa_cpu_moe_experts_forward(yp, h, a, xp, w13, w2, offsets, E, C, F);
  return 0;
}

static int experts_backward(float *dxp, float *dw13, float *dw2, const float *dyp, const float *xp,
                            const float *h, const float *a, const float *w13, const float *w2,
                            const int32_t *offsets, int E, int C, int F) {
  aa_cpu_moe_experts_backward(dxp, dw13, dw2, dyp, xp, h, a, w13, w2, offsets, E, C, F);
  return 0;
}

static int shared_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                          const float *ws2, int S, int N, int C, int F) {
  aa_cpu_moe_shared_forward(out, hs, as, x, ws13, ws2, S, N, C, F);
  return 0;
}

static int shared_backward(float *dx, float *dws13, float *dws2, const float *dout, const float *x,
                           const float *hs, const float *as, const float *ws13, const float *ws2, int S,
                           int N, int C, int F) {
  aa_cpu_moe_shared_backward(dx, dws13, dws2, dout, x, hs, as, ws13, ws2, S, N, C, F);
  return 0;
}

static int shared_gate_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                               const float *ws2, const float *wg, int S, int N, int C, int F) {
  aa_cpu_moe_shared_gate_forward(out, hs, as, x, ws13, ws2, wg, S, N, C, F);
  return 0;
}

static int shared_gate_backward(float *dx, float *dws13, float *dws2, float *dwg, const float *dout,
                                const float *x, const float *hs, const float *as, const float *ws13,
                                const float *ws2, const float *wg, int S, int N, int C, int F) {
  aa_cpu_moe_shared_gate_backward(dx, dws13, dws2, dwg, dout, x, hs, as, ws13, ws2, wg, S, N, C, F);
  return 0;
}

static int losses(float *aux, float *z, const float *logits, const float *probs, const aa_moe_route_t *r,
                  float aux_coef, float z_coef) {
  aa_cpu_moe_losses(aux, z, logits, probs, r, aux_coef, z_coef);
  return 0;
}

static int router_backward(float *dx, float *dwr, float *dlogits, const float *dweight, const float *x,
                           const float *wr, const float *logits, const float *probs, const aa_moe_route_t *r,
                           int C, float aux_coef, float z_coef, float dloss) {
  aa_cpu_moe_router_backward(dx, dwr, dlogits, dweight, x, wr, logits, probs, r, C, aux_coef, z_coef, dloss);
  return 0;
}

const aa_moe_ops_t aa__cpu_moe_ops = {
    .route_alloc = aa_cpu_moe_route_alloc,
    .route_free = aa_cpu_moe_route_free,
    .router_forward = router_forward,
    .route = route,
    .permute = permute,
    .permute_backward = permute_backward,
    .unpermute = unpermute,
    .unpermute_backward = unpermute_backward,
    .experts_forward = experts_forward,
    .experts_backward = experts_backward,
    .shared_forward = shared_forward,
    .shared_backward = shared_backward,
    .shared_gate_forward = shared_gate_forward,
    .shared_gate_backward = shared_gate_backward,
    .losses = losses,
    .router_backward = router_backward,
};
