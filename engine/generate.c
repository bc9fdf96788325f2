/* Generation with and without a key/value cache (generate.h). */
#define _GNU_SOURCE /* qsort_r */
#include "generate.h"

#include "kernels/cpu/cpu_moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parameters of one block, pointers into the model's fp32 buffer
 * (backend memory). gpt2 uses the first group, llama the second; the
 * fused rows (qkv, gate|up) are one matmul each. A llama MoE block has
 * the third group in place of gate|up and down (model.c's stacked expert
 * tensors, cpu_moe.h's layouts). */
typedef struct {
  const float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  const float *gateupw, *downw;
  const float *routerw, *w13, *w2, *sw13, *sw2; /* routerw NULL: a dense block */
  const float *sgate;                           /* the shared experts' gate (C); NULL: ungated */
} block_t;

struct aa_decoder {
  aa_gpt_t *m; /* borrowed */
  const aa_ops_t *ops;
  int llama;
  int L, C, NH, NKV, HS, F, V, QKV; /* QKV = (NH + 2 NKV) HS */
  int max_len, pos;
  size_t layer_cache; /* floats from one layer's cache to the next's */
  float eps, theta;
  const float *wte, *wpe, *lnfw, *lnfb, *head;
  block_t *blocks; /* host, owned, L entries */
  /* Backend memory: one allocation for the step's activations, one for
   * the caches (L, max_len, NKV HS) each. */
  void *act_mem, *cache_mem;
  int32_t *tok;                                                     /* (1) */
  float *x, *a, *mean, *rstd, *qkv, *att, *tmp, *ff, *ff2, *logits; /* one row each */
  float *kcache, *vcache;
  /* MoE blocks (cpu backend only): E experts of width Fe, top-k, S shared;
   * the one token's router logits and probs (E), its k expert rows xp, h,
   * act, yp and its shared experts' hs, as (cpu_moe.h's buffers, N = 1),
   * carved from act_mem; the routing map is host memory of its own. */
  int E, K, Fe, S;
  float *rlogits, *rprobs, *xp, *h, *act, *yp, *hs, *as;
  aa_moe_route_t route;
};

int aa_sampler_validate(const aa_sampler_t *s) {
  if (!(s->temperature >= 0.0f) || isinf(s->temperature))
    return aa_error(AA_EINVAL, "temperature must be a finite number >= 0 (0 = greedy), got %g",
                    (double)s->temperature);
  if (s->top_k < 0) return aa_error(AA_EINVAL, "top-k must be >= 0 (0 = no limit), got %d", s->top_k);
  if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
    return aa_error(AA_EINVAL, "top-p must be in (0, 1] (1 = no limit), got %g", (double)s->top_p);
  return 0;
}

/* Ranks ids by logit, largest first, ties by id (qsort_r's comparator). */
static int by_logit(const void *pa, const void *pb, void *arg) {
  const float *l = arg;
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  if (l[a] != l[b]) return l[a] > l[b] ? -1 : 1;
  return (a > b) - (a < b);
}

int aa_sample(int32_t *out, const float *logits, int V, const aa_sampler_t *s, aa_rng_t *rng, int32_t *work) {
  int rc = aa_sampler_validate(s);
  if (rc) return rc;
  if (V < 1) return aa_error(AA_EINVAL, "sampling needs at least one logit");
  for (int i = 0; i < V; i++)
    if (isnan(logits[i])) return aa_error(AA_EINVAL, "logit %d is NaN", i);
  if (s->temperature == 0.0f) {
    int best = 0;
    for (int i = 1; i < V; i++)
      if (logits[i] > logits[best]) best = i;
    *out = best;
    return 0;
  }
  for (int i = 0; i < V; i++)
    work[i] = i;
  qsort_r(work, (size_t)V, sizeof *work, by_logit, (void *)logits);
  int n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
  /* Probabilities relative to the largest (the first): exp of a
   * non-positive number, so nothing overflows. */
  double top = logits[work[0]], total = 0.0, t = s->temperature;
  for (int i = 0; i < n; i++)
    total += exp(((double)logits[work[i]] - top) / t);
  double mass = 0.0;
  for (int i = 0; i < n; i++) {
    mass += exp(((double)logits[work[i]] - top) / t);
    if (mass >= s->top_p * total) {
      n = i + 1;
      break;
    }
  }
  double u = aa_rng_uniform(rng) * mass, c = 0.0;
  for (int i = 0; i < n; i++) {
    c += exp(((double)logits[work[i]] - top) / t);
    if (u < c) {
      *out = work[i];
      return 0;
    }
  }
  *out = work[n - 1]; /* u within rounding of the whole mass */
  return 0;
}

/* Where tensor name lies in m's fp32 parameters, checking it has numel
 * elements; NULL with the reason in the last error. */
static const float *param(const aa_gpt_t *m, const char *name, size_t numel) {
  const aa_tensor_desc_t *t = aa_gpt_tensor(m, name);
  if (!t) {
    aa_error(AA_EINVAL, "the model has no tensor %s", name);
    return NULL;
  }
  if (t->numel != numel) {
    aa_error(AA_EINVAL, "tensor %s has %zu elements, the decoder expects %zu", name, t->numel, numel);
    return NULL;
  }
  return (const float *)m->params.data + t->offset;
}

/* Block l's pointer to name ("h<l>.<name>"). */
static const float *bparam(const aa_gpt_t *m, int l, const char *name, size_t numel) {
  char n[32];
  snprintf(n, sizeof n, "h%d.%s", l, name);
  return param(m, n, numel);
}

/* Fills d's parameter pointers from m's tensor table; AA_EINVAL naming
 * what is missing, or what is not laid out as one fused matmul needs. */
static int bind_params(aa_decoder_t *d) {
  const aa_gpt_t *m = d->m;
  size_t C = (size_t)d->C, F = (size_t)d->F, V = (size_t)d->V, KVD = (size_t)d->NKV * d->HS;
  if (!(d->wte = param(m, "wte", V * C))) return AA_EINVAL;
  if (d->llama) {
    if (!(d->lnfw = param(m, "lnf.w", C)) || !(d->head = param(m, "head.w", V * C))) return AA_EINVAL;
  } else {
    if (!(d->wpe = param(m, "wpe", (size_t)m->arch.seq_len * C)) || !(d->lnfw = param(m, "lnf.w", C)) ||
        !(d->lnfb = param(m, "lnf.b", C)))
      return AA_EINVAL;
    d->head = d->wte; /* tied */
  }
  for (int l = 0; l < d->L; l++) {
    block_t *b = &d->blocks[l];
    if (d->llama && !aa_arch_is_moe_layer(&m->arch, l)) {
      const float *k, *v, *up;
      if (!(b->ln1w = bparam(m, l, "ln1.w", C)) || !(b->qkvw = bparam(m, l, "q.w", C * C)) ||
          !(k = bparam(m, l, "k.w", KVD * C)) || !(v = bparam(m, l, "v.w", KVD * C)) ||
          !(b->projw = bparam(m, l, "proj.w", C * C)) || !(b->ln2w = bparam(m, l, "ln2.w", C)) ||
          !(b->gateupw = bparam(m, l, "gate.w", F * C)) || !(up = bparam(m, l, "up.w", F * C)) ||
          !(b->downw = bparam(m, l, "down.w", C * F)))
        return AA_EINVAL;
      if (k != b->qkvw + C * C || v != k + KVD * C || up != b->gateupw + F * C)
        return aa_error(AA_EINVAL, "block %d: q|k|v or gate|up are not contiguous in the parameters", l);
    } else if (d->llama) {
      const float *k, *v;
      const size_t E = (size_t)d->E, Fe = (size_t)d->Fe, S = (size_t)d->S;
      if (!(b->ln1w = bparam(m, l, "ln1.w", C)) || !(b->qkvw = bparam(m, l, "q.w", C * C)) ||
          !(k = bparam(m, l, "k.w", KVD * C)) || !(v = bparam(m, l, "v.w", KVD * C)) ||
          !(b->projw = bparam(m, l, "proj.w", C * C)) || !(b->ln2w = bparam(m, l, "ln2.w", C)) ||
          !(b->routerw = bparam(m, l, "router.w", E * C)) ||
          !(b->w13 = bparam(m, l, "experts.w13", E * 2 * Fe * C)) ||
          !(b->w2 = bparam(m, l, "experts.w2", E * C * Fe)) ||
          (S && (!(b->sw13 = bparam(m, l, "shared.w13", S * 2 * Fe * C)) ||
                 !(b->sw2 = bparam(m, l, "shared.w2", S * C * Fe)))))
        return AA_EINVAL;
      if (k != b->qkvw + C * C || v != k + KVD * C)
        return aa_error(AA_EINVAL, "block %d: q|k|v are not contiguous in the parameters", l);
    } else if (!(b->ln1w = bparam(m, l, "ln1.w", C)) || !(b->ln1b = bparam(m, l, "ln1.b", C)) ||
               !(b->qkvw = bparam(m, l, "qkv.w", 3 * C * C)) || !(b->qkvb = bparam(m, l, "qkv.b", 3 * C)) ||
               !(b->projw = bparam(m, l, "proj.w", C * C)) || !(b->projb = bparam(m, l, "proj.b", C)) ||
               !(b->ln2w = bparam(m, l, "ln2.w", C)) || !(b->ln2b = bparam(m, l, "ln2.b", C)) ||
               !(b->fcw = bparam(m, l, "fc.w", F * C)) || !(b->fcb = bparam(m, l, "fc.b", F)) ||
               !(b->fcprojw = bparam(m, l, "fcproj.w", C * F)) ||
               !(b->fcprojb = bparam(m, l, "fcproj.b", C))) {
      return AA_EINVAL;
    }
    /* Qwen2's q/k/v biases: one bias for the fused q|k|v GEMM. */
    if (d->llama && m->arch.qkv_bias) {
      const float *kb, *vb;
      if (!(b->qkvb = bparam(m, l, "q.b", C)) || !(kb = bparam(m, l, "k.b", KVD)) ||
          !(vb = bparam(m, l, "v.b", KVD)))
        return AA_EINVAL;
      if (kb != b->qkvb + C || vb != kb + KVD)
        return aa_error(AA_EINVAL, "block %d: the q|k|v biases are not contiguous in the parameters", l);
    }
    if (b->routerw && m->arch.moe.shared_expert_gate && !(b->sgate = bparam(m, l, "shared.gate", C)))
      return AA_EINVAL;
  }
  return 0;
}

/* The op-table entries the decoding step calls, or AA_EUNSUPPORTED naming
 * the first the backend lacks. */
static int check_ops(const aa_ops_t *o, int llama) {
  const char *missing = !o->attention_decode           ? "attention_decode"
                        : llama && !o->rmsnorm_forward ? "rmsnorm_forward"
                        : llama && !o->rope_forward    ? "rope_forward"
                        : llama && !o->swiglu_forward  ? "swiglu_forward"
                                                       : NULL;
  if (missing)
    return aa_error(AA_EUNSUPPORTED, "the %s backend has no %s: it cannot decode with a KV cache", o->name,
                    missing);
  return 0;
}

/* 16 floats (64 bytes) per piece, so every row the step carves is aligned
 * as alloc's own pointer. */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

int aa_decoder_create(aa_decoder_t **out, aa_gpt_t *m, int max_len) {
  if (m->tp != 1 || m->pp != 1)
    return aa_error(AA_EINVAL, "generation needs the whole model in one process (tp %d, pp %d)", m->tp,
                    m->pp);
  if (!m->params.data || m->params.dtype != AA_F32)
    return aa_error(AA_EINVAL, "generation needs the model's fp32 parameters (a model created without ZeRO)");
  if (max_len < 1 || max_len > m->arch.seq_len)
    return aa_error(AA_EINVAL, "a decoder for %d positions: the model's seq_len is %d", max_len,
                    m->arch.seq_len);
  int llama = aa_arch_is_llama(&m->arch), rc;
  if ((rc = check_ops(m->ops, llama))) return rc;
  /* MoE blocks decode with cpu_moe.h's host ops on the model's memory. */
  if (m->arch.moe.experts && strcmp(m->ops->name, "cpu"))
    return aa_error(AA_EUNSUPPORTED,
                    "model.moe: the %s decoder does not compute mixture-of-experts layers yet (the cpu "
                    "backend's does)",
                    m->ops->name);
  aa_decoder_t *d = calloc(1, sizeof *d);
  if (!d) return aa_error(AA_ENOMEM, "out of memory");
  const aa_arch_t *a = &m->arch;
  d->m = m;
  d->ops = m->ops;
  d->llama = llama;
  d->L = a->n_layer;
  d->C = a->d_model;
  d->NH = a->n_head;
  d->NKV = aa_arch_kv_heads(a);
  d->HS = a->d_model / a->n_head;
  d->F = a->d_ff;
  d->V = a->vocab_size;
  d->QKV = (d->NH + 2 * d->NKV) * d->HS;
  d->max_len = max_len;
  d->eps = a->norm_eps;
  d->theta = a->rope_theta;
  if (a->moe.experts) {
    d->E = a->moe.experts;
    d->K = a->moe.top_k;
    d->Fe = a->moe.d_ff_expert;
    d->S = a->moe.shared_experts;
  }
  d->blocks = calloc((size_t)d->L, sizeof *d->blocks);
  if (!d->blocks) {
    free(d);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  if ((rc = bind_params(d))) goto fail;
  if (d->E && (rc = aa_cpu_moe_route_alloc(&d->route, 1, d->E, d->K))) goto fail;
  d->route.raw = a->moe.topk_raw;

  /* The step's rows: tok, x, a, mean, rstd, qkv, att, tmp, ff (2F: llama's
   * gate|up), ff2, logits, and an MoE block's (none for a dense model). */
  const size_t C = (size_t)d->C, E = (size_t)d->E, K = (size_t)d->K, Fe = (size_t)d->Fe, S = (size_t)d->S;
  size_t sizes[] = {1,
                    C,
                    C,
                    1,
                    1,
                    (size_t)d->QKV,
                    C,
                    C,
                    2 * (size_t)d->F,
                    (size_t)d->F,
                    (size_t)d->V,
                    E,
                    E,
                    K * C,
                    K * 2 * Fe,
                    K * Fe,
                    K * C,
                    S * 2 * Fe,
                    S * Fe};
  size_t nfloats = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    nfloats += round16(sizes[i]);
  /* Each layer's cache starts 64-byte aligned, as alloc's pointer. */
  d->layer_cache = round16((size_t)max_len * (size_t)d->NKV * (size_t)d->HS);
  size_t cache = (size_t)d->L * d->layer_cache;
  if ((rc = d->ops->alloc(&d->act_mem, nfloats * sizeof(float))) ||
      (rc = d->ops->alloc(&d->cache_mem, 2 * cache * sizeof(float))))
    goto fail;
  float *p = d->act_mem;
  float **rows[] = {NULL,    &d->x,   &d->a,   &d->mean,   &d->rstd,    &d->qkv,    &d->att,
                    &d->tmp, &d->ff,  &d->ff2, &d->logits, &d->rlogits, &d->rprobs, &d->xp,
                    &d->h,   &d->act, &d->yp,  &d->hs,     &d->as};
  d->tok = (int32_t *)(void *)p;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (rows[i]) *rows[i] = p;
    p += round16(sizes[i]);
  }
  d->kcache = d->cache_mem;
  d->vcache = d->kcache + cache;
  *out = d;
  return 0;
fail:
  aa_decoder_free(d);
  return rc;
}

void aa_decoder_free(aa_decoder_t *d) {
  if (!d) return;
  d->ops->free(d->act_mem);
  d->ops->free(d->cache_mem);
  aa_cpu_moe_route_free(&d->route);
  free(d->blocks);
  free(d);
}

void aa_decoder_reset(aa_decoder_t *d) { d->pos = 0; }

int aa_decoder_pos(const aa_decoder_t *d) { return d->pos; }

/* gpt2 block l at position pos on the one row x (C): pre-LayerNorm
 * attention and GELU MLP, each added to the residual stream. */
static void gpt2_block(aa_decoder_t *d, int l, float *kc, float *vc) {
  const aa_ops_t *o = d->ops;
  const block_t *b = &d->blocks[l];
  int C = d->C;
  o->layernorm_forward(d->a, d->mean, d->rstd, d->x, b->ln1w, b->ln1b, 1, C);
  o->matmul_forward(d->qkv, d->a, b->qkvw, b->qkvb, 1, C, 3 * C);                          // (1,3C)
  o->attention_decode(d->att, kc, vc, d->qkv, 1, d->max_len, d->pos, d->NH, d->NH, d->HS); // (1,C)
  o->matmul_forward(d->tmp, d->att, b->projw, b->projb, 1, C, C);
  o->residual_forward(d->x, d->x, d->tmp, (size_t)C);
  o->layernorm_forward(d->a, d->mean, d->rstd, d->x, b->ln2w, b->ln2b, 1, C);
  o->matmul_forward(d->ff, d->a, b->fcw, b->fcb, 1, C, d->F); // (1,F)
  o->gelu_forward(d->ff2, d->ff, (size_t)d->F);
  o->matmul_forward(d->tmp, d->ff2, b->fcprojw, b->fcprojb, 1, d->F, C);
  o->residual_forward(d->x, d->x, d->tmp, (size_t)C);
}

/* MoE block b's MLP on the normalised row d->a into d->tmp (C): the
 * router, top-k with Mixtral's renormalised weights, the k chosen experts
 * and the shared experts, through the training forward's ops with N = 1
 * (kernels/cpu/cpu_moe.h). Routing is dropless, as Hugging Face's
 * inference is: a capacity factor bounds an expert's slots in a training
 * batch, and one token never fills one. */
static int moe_mlp(aa_decoder_t *d, const block_t *b) {
  const int C = d->C;
  aa_moe_route_t *r = &d->route;
  aa_cpu_moe_router_forward(d->rlogits, d->rprobs, d->a, b->routerw, 1, C, d->E);
  int rc = aa_cpu_moe_route(r, NULL, d->rlogits, d->rprobs, 0.0f);
  if (rc) return rc;
  aa_cpu_moe_permute(d->xp, d->a, r, C);
  aa_cpu_moe_experts_forward(d->yp, d->h, d->act, d->xp, b->w13, b->w2, r->offsets, d->E, C, d->Fe);
  aa_cpu_moe_unpermute(d->tmp, d->yp, r, C);
  if (b->sgate)
    aa_cpu_moe_shared_gate_forward(d->tmp, d->hs, d->as, d->a, b->sw13, b->sw2, b->sgate, d->S, 1, C, d->Fe);
  else
    aa_cpu_moe_shared_forward(d->tmp, d->hs, d->as, d->a, b->sw13, b->sw2, d->S, 1, C, d->Fe);
  return 0;
}

/* llama block l: RMSNorm, fused q|k|v (with Qwen2's biases when the
 * model has them), RoPE at pos, grouped-query attention over the cache,
 * RMSNorm, SwiGLU MLP or an MoE block; no other biases. */
static int llama_block(aa_decoder_t *d, int l, float *kc, float *vc) {
  const aa_ops_t *o = d->ops;
  const block_t *b = &d->blocks[l];
  int C = d->C;
  o->rmsnorm_forward(d->a, d->rstd, d->x, b->ln1w, 1, C, d->eps);
  o->matmul_forward(d->qkv, d->a, b->qkvw, b->qkvb, 1, C, d->QKV); // (1,(NH+2NKV)HS)
  o->rope_forward(d->qkv, 1, 1, d->NH, d->NKV, d->HS, d->pos, d->theta);
  o->attention_decode(d->att, kc, vc, d->qkv, 1, d->max_len, d->pos, d->NH, d->NKV, d->HS); // (1,C)
  o->matmul_forward(d->tmp, d->att, b->projw, NULL, 1, C, C);
  o->residual_forward(d->x, d->x, d->tmp, (size_t)C);
  o->rmsnorm_forward(d->a, d->rstd, d->x, b->ln2w, 1, C, d->eps);
  if (b->routerw) {
    int rc = moe_mlp(d, b);
    if (rc) return rc;
  } else {
    o->matmul_forward(d->ff, d->a, b->gateupw, NULL, 1, C, 2 * d->F); // (1,2F)
    o->swiglu_forward(d->ff2, d->ff, 1, d->F);                        // (1,F)
    o->matmul_forward(d->tmp, d->ff2, b->downw, NULL, 1, d->F, C);
  }
  o->residual_forward(d->x, d->x, d->tmp, (size_t)C);
  return 0;
}

int aa_decoder_step(aa_decoder_t *d, int32_t token, float *logits) {
  if (d->pos >= d->max_len)
    return aa_error(AA_EINVAL, "the KV cache holds %d positions: position %d is past it", d->max_len, d->pos);
  if (token < 0 || token >= d->V)
    return aa_error(AA_EINVAL, "token id %d is outside the model's vocab (0..%d)", (int)token, d->V - 1);
  const aa_ops_t *o = d->ops;
  int rc = o->upload(d->tok, &token, sizeof token);
  if (rc) return rc;
  /* The token's row, plus gpt2's position row pos (llama has none). */
  o->encoder_forward_vocab(d->x, d->tok, d->wte, d->wpe ? d->wpe + (size_t)d->pos * d->C : NULL, 0, d->V, 1, 1,
                           d->C);
  for (int l = 0; l < d->L && !rc; l++) {
    float *kc = d->kcache + l * d->layer_cache, *vc = d->vcache + l * d->layer_cache;
    if (d->llama)
      rc = llama_block(d, l, kc, vc);
    else
      gpt2_block(d, l, kc, vc);
  }
  if (rc) return rc;
  if (d->llama)
    o->rmsnorm_forward(d->a, d->rstd, d->x, d->lnfw, 1, d->C, d->eps);
  else
    o->layernorm_forward(d->a, d->mean, d->rstd, d->x, d->lnfw, d->lnfb, 1, d->C);
  o->matmul_forward(d->logits, d->a, d->head, NULL, 1, d->C, d->V); // (1,V)
  if ((rc = o->download(logits, d->logits, sizeof(float) * (size_t)d->V)) || (rc = o->sync())) return rc;
  d->pos++;
  return 0;
}

int aa_logits_nocache(aa_gpt_t *m, const int32_t *ids, int n, float *logits) {
  if (m->tp != 1 || m->pp != 1)
    return aa_error(AA_EINVAL, "generation needs the whole model in one process (tp %d, pp %d)", m->tp,
                    m->pp);
  if (n < 1 || n > m->T)
    return aa_error(AA_EINVAL, "a prefix of %d tokens: the model's activations hold 1..%d", n, m->T);
  size_t N = (size_t)m->B * m->T, V = (size_t)m->arch.vocab_size;
  int32_t *in = calloc(N, sizeof *in);
  if (!in) return aa_error(AA_ENOMEM, "out of memory");
  for (int b = 0; b < m->B; b++)
    memcpy(in + (size_t)b * m->T, ids, sizeof *ids * (size_t)n);
  int rc = aa_gpt_forward(m, in, NULL, NULL);
  free(in);
  if (rc) return rc;
  return m->ops->download(logits, aa_gpt_logits(m) + (size_t)(n - 1) * V, sizeof(float) * V);
}

int aa_generate(aa_gpt_t *m, const int32_t *prompt, int n_prompt, int max_tokens, const aa_sampler_t *s,
                uint64_t seed, int kv_cache, int32_t *out, aa_gen_token_fn on_token, void *data,
                aa_gen_stats_t *stats) {
  int V = m->arch.vocab_size, S = m->arch.seq_len, rc;
  if ((rc = aa_sampler_validate(s))) return rc;
  if (n_prompt < 1) return aa_error(AA_EINVAL, "the prompt is empty: generation needs at least one token");
  if (max_tokens < 0) return aa_error(AA_EINVAL, "max tokens must be >= 0, got %d", max_tokens);
  if ((long)n_prompt + max_tokens > S)
    return aa_error(AA_EINVAL, "the prompt (%d tokens) and %d new tokens exceed the model's seq_len %d",
                    n_prompt, max_tokens, S);
  for (int i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= V)
      return aa_error(AA_EINVAL, "prompt token %d is id %d, outside the model's vocab (0..%d)", i,
                      (int)prompt[i], V - 1);
  if (!kv_cache && n_prompt + max_tokens - 1 > m->T)
    return aa_error(AA_EINVAL, "without a KV cache the model's activations must hold %d positions, not %d",
                    n_prompt + max_tokens - 1, m->T);
  aa_decoder_t *d = NULL;
  if (kv_cache && (rc = aa_decoder_create(&d, m, n_prompt + max_tokens))) return rc;
  float *logits = malloc(sizeof *logits * (size_t)V);
  int32_t *work = malloc(sizeof *work * (size_t)V),
          *seq = malloc(sizeof *seq * (size_t)(n_prompt + max_tokens));
  if (!logits || !work || !seq) {
    rc = aa_error(AA_ENOMEM, "out of memory");
    goto cleanup;
  }
  memcpy(seq, prompt, sizeof *seq * (size_t)n_prompt);
  aa_rng_t rng;
  aa_rng_seed(&rng, seed);
  double t0 = aa_now();
  int n = n_prompt; /* tokens of seq so far */
  if (kv_cache)
    for (int i = 0; i < n_prompt - 1 && !rc; i++)
      rc = aa_decoder_step(d, seq[i], logits);
  for (int i = 0; i < max_tokens && !rc; i++) {
    rc = kv_cache ? aa_decoder_step(d, seq[n - 1], logits) : aa_logits_nocache(m, seq, n, logits);
    if (!rc) rc = aa_sample(&seq[n], logits, V, s, &rng, work);
    if (!rc) {
      out[i] = seq[n++];
      if (on_token) rc = on_token(out[i], data);
    }
  }
  if (!rc && stats) *stats = (aa_gen_stats_t){n_prompt, max_tokens, aa_now() - t0};
cleanup:
  free(logits);
  free(work);
  free(seq);
  aa_decoder_free(d);
  return rc;
}
