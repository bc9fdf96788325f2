#!/usr/bin/python3
"""Builds tests/reference/llama_moe_tiny.fixture, llama_moe2_tiny.fixture and
qwen_moe_tiny.fixture: tiny mixture-of-experts Llamas computed in float64
PyTorch, against which tests/test_reference.c (`test_reference moe`, `moe2`,
`qwen`) checks the float32 C engine (logits, the loss with the aux and z
losses, every parameter gradient and five AdamW steps).

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_moe_llama_fixture.py [--selftest]

--selftest also runs make_fixture.py's checks of this script's model:
torch.autograd.gradcheck of every parameter gradient, and causality.

The model is make_llama_fixture.py's Llama in which the SwiGLU MLP of every
MoE layer (layer l with l % every == 0) is Hugging Face's
MixtralSparseMoeBlock, as make_moe_fixture.py writes it out, with
DeepSeek-style shared experts added:
    logits = n2 wr^T, probs = softmax(logits), the top-k experts of each
    token (best first), their probs renormalised to sum to 1,
    moe(n2) = sum_j weight_j w2_e (silu(w1_e n2) * w3_e n2) + sum_s shared_s(n2)
and the loss is the mean token cross-entropy plus, per MoE layer, its
    aux = aux_coef * E * sum_e (c_e / N) P_e   (c_e slots routed to e, P_e mean prob)
    z   = z_coef * mean_n logsumexp(logits[n])^2
summed over the MoE layers. qwen_moe_tiny is Qwen2-MoE's block
(Qwen2MoeSparseMoeBlock with norm_topk_prob false, Qwen1.5-MoE's: the
chosen probabilities weigh their experts as they are, not renormalised)
and attention: q, k and v
projections with biases (q = n2 wq^T + bq, ...; o without), and the
shared experts' sum times sigmoid(n2 wg^T), wg (1,C) the
shared_expert_gate. That sum is Megatron's and Switch's (each layer
balanced on its own); Hugging Face's MixtralForCausalLM computes one
load_balancing_loss_func over every layer's router logits concatenated,
which is the same for one MoE layer and differs for more.

Routing is a discontinuous function of the weights: the draw is repeated
until, in every forward the fixture makes (the first one and each AdamW
step's), every token's top k+1 router logits in every MoE layer are at
least MIN_GAP apart, so that the float32 engine picks the same experts in
the same order (its logits differ from these by ~1e-6).

Fixture format (little-endian, no padding): llama_tiny.fixture's (see
make_llama_fixture.py) with magic "AAFIXE01" and after rope_theta, norm_eps:
    int32   experts, top_k, d_ff_expert, shared_experts, every
    float32 aux_loss_coef, z_loss_coef, capacity_factor (0: dropless)
qwen_moe_tiny.fixture has magic "AAFIXQ01" and after those fields:
    int32   qkv_bias, shared_expert_gate, norm_topk_prob (0 or 1)
The engine layout is llama's (engine/model.h) with, in an MoE layer,
router.w (E,C), experts.w13 (E*2Fe,C), experts.w2 (E*C,Fe) and with shared
experts shared.w13 (S*2Fe,C), shared.w2 (S*C,Fe) in place of gate.w, up.w,
down.w; w13 holds per expert the rows [w1 (Fe,C); w3 (Fe,C)]; with
qkv_bias q.b (NH*hs), k.b, v.b (NKV*hs) after v.w in every layer, and with
shared_expert_gate shared.gate (1,C) after shared.w2.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixture as gpt  # noqa: E402 (f32, selftest, write_fixture, the optimizer settings)

N_LAYER, N_HEAD, N_KV_HEAD, D_MODEL, D_FF, SEQ_LEN, VOCAB = 2, 4, 2, 16, 24, 8, 29
HS = D_MODEL // N_HEAD
B, T = 3, 8
E, K, FE = 4, 2, 12
AUX_COEF, Z_COEF = gpt.f32(0.01), gpt.f32(0.001)
ROPE_THETA, NORM_EPS = gpt.f32(10000.0), gpt.f32(1e-5)
MIN_GAP = 1e-3
SEED = 20241128
# (file stem, shared experts S, every); Qwen2-MoE's variant has a seed of its
# own, so that adding it left the other two fixtures' draws as they were.
VARIANTS = [("llama_moe_tiny", 1, 1), ("llama_moe2_tiny", 0, 2)]
QWEN = ("qwen_moe_tiny", 2, 2)
QWEN_SEED = 20261129

ATTN = ["ln1.w", "q.w", "k.w", "v.w", "proj.w", "ln2.w"]
ATTN_QKVB = ["ln1.w", "q.w", "k.w", "v.w", "q.b", "k.b", "v.b", "proj.w", "ln2.w"]


def is_moe(l, every):
    return l % every == 0


def param_specs(S, every, qwen=False):
    """(name, shape, decay) in the engine's flat layout order."""
    C, KV = D_MODEL, N_KV_HEAD * HS
    shapes = {"ln1.w": (C,), "q.w": (N_HEAD * HS, C), "k.w": (KV, C), "v.w": (KV, C), "proj.w": (C, C),
              "q.b": (N_HEAD * HS,), "k.b": (KV,), "v.b": (KV,),
              "ln2.w": (C,), "gate.w": (D_FF, C), "up.w": (D_FF, C), "down.w": (C, D_FF),
              "router.w": (E, C), "experts.w13": (E * 2 * FE, C), "experts.w2": (E * C, FE),
              "shared.w13": (S * 2 * FE, C), "shared.w2": (S * C, FE), "shared.gate": (1, C)}
    specs = [("wte", (VOCAB, C), True)]
    for l in range(N_LAYER):
        shared = ["shared.w13", "shared.w2"] + (["shared.gate"] if qwen else []) if S else []
        names = (ATTN_QKVB if qwen else ATTN) + (["router.w", "experts.w13", "experts.w2"] + shared
                                                 if is_moe(l, every) else ["gate.w", "up.w", "down.w"])
        specs += [(f"h{l}.{n}", shapes[n], len(shapes[n]) == 2) for n in names]
    return specs + [("lnf.w", (C,), False), ("head.w", (VOCAB, C), True)]


def init_params(gen, specs):
    """make_llama_fixture.py's draws (embedding N(0, 0.02), linear weights std
    0.15, gains in [0.5, 1.5)), the router std 0.5 so that its logits are
    O(1) apart and the experts' choices well separated; q/k/v biases N(0,
    0.2), of the size of a projection's output."""
    params = {}
    for name, shape, _ in specs:
        if name == "wte":
            p = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith(".b"):
            p = 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif len(shape) == 1:
            p = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("router.w"):
            p = 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            p = 0.15 * torch.randn(shape, generator=gen, dtype=torch.float64)
        params[name] = p.float().double().requires_grad_(True)
    return params


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w


def rope(x):
    """Hugging Face's rotate_half RoPE on x (B,H,T,hs), positions 0..T-1."""
    Tn = x.shape[2]
    inv = torch.tensor([ROPE_THETA ** (-2.0 * i / HS) for i in range(HS // 2)], dtype=torch.float64)
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., :HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def swiglu(x, w13, w2):
    h = x @ w13.T
    return (F.silu(h[:, :FE]) * h[:, FE:]) @ w2.T


# The smallest gap between a token's k-th and (k+1)-th... top logits seen by
# any forward since it was last reset (the draw's acceptance test).
seen = {"gap": math.inf}


def moe(x, P, h, S, gated=False):
    """MixtralSparseMoeBlock on x (N,C), shared experts added (gated: their
    sum times Qwen2-MoE's sigmoid(x wg^T)); out, aux, z."""
    Nn = x.shape[0]
    logits = x @ P[h + "router.w"].T
    probs = F.softmax(logits, dim=-1)
    s = torch.sort(logits.detach(), dim=-1, descending=True).values
    seen["gap"] = min(seen["gap"], float((s[:, :K] - s[:, 1:K + 1]).min()))
    sel = torch.argsort(-logits.detach(), dim=-1, stable=True)[:, :K]
    psel = probs.gather(1, sel)
    weight = psel if gated else psel / psel.sum(-1, keepdim=True)  # Qwen's norm_topk_prob false
    w13 = P[h + "experts.w13"].view(E, 2 * FE, D_MODEL)
    w2 = P[h + "experts.w2"].view(E, D_MODEL, FE)
    ys = torch.stack([swiglu(x, w13[e], w2[e]) for e in range(E)])  # (E,N,C)
    tok = torch.arange(Nn)
    out = sum(weight[:, j][:, None] * ys[sel[:, j], tok] for j in range(K))
    if S:
        ws13 = P[h + "shared.w13"].view(S, 2 * FE, D_MODEL)
        ws2 = P[h + "shared.w2"].view(S, D_MODEL, FE)
        ys = sum(swiglu(x, ws13[i], ws2[i]) for i in range(S))
        if gated:
            ys = torch.sigmoid(x @ P[h + "shared.gate"].T) * ys  # (N,1) * (N,C)
        out = out + ys
    counts = F.one_hot(sel, E).double().sum((0, 1))  # c_e
    aux = AUX_COEF * E * (counts / Nn * probs.mean(0)).sum()
    z = Z_COEF * torch.logsumexp(logits, dim=-1).pow(2).mean()
    return out, aux, z


def make_forward(S, every, qwen=False):
    def forward(P, inputs, targets=None):
        """logits (B,T,V) and, with targets, the mean cross-entropy plus every
        MoE layer's aux and z losses."""
        Bn, Tn = inputs.shape
        C, group = D_MODEL, N_HEAD // N_KV_HEAD
        x = P["wte"][inputs]
        mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
        extra = 0.0
        for l in range(N_LAYER):
            h = f"h{l}."
            n = rmsnorm(x, P[h + "ln1.w"])
            q, k, v = n @ P[h + "q.w"].T, n @ P[h + "k.w"].T, n @ P[h + "v.w"].T
            if qwen:  # Qwen2's q/k/v biases
                q, k, v = q + P[h + "q.b"], k + P[h + "k.b"], v + P[h + "v.b"]
            q = q.view(Bn, Tn, N_HEAD, HS).transpose(1, 2)
            k = k.view(Bn, Tn, N_KV_HEAD, HS).transpose(1, 2)
            v = v.view(Bn, Tn, N_KV_HEAD, HS).transpose(1, 2)
            q, k = rope(q), rope(k)
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
            x = x + y @ P[h + "proj.w"].T
            n = rmsnorm(x, P[h + "ln2.w"])
            if is_moe(l, every):
                out, aux, z = moe(n.reshape(Bn * Tn, C), P, h, S, qwen)
                x = x + out.view(Bn, Tn, C)
                extra = extra + aux + z
            else:
                x = x + (F.silu(n @ P[h + "gate.w"].T) * (n @ P[h + "up.w"].T)) @ P[h + "down.w"].T
        logits = rmsnorm(x, P["lnf.w"]) @ P["head.w"].T
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1)) + extra
    return forward


def variant(gen, stem, S, every, check, here, qwen=False):
    specs = param_specs(S, every, qwen)
    forward = make_forward(S, every, qwen)
    path = os.path.join(here, stem + ".fixture")
    for attempt in range(100):
        P = init_params(gen, specs)
        inputs = torch.randint(0, VOCAB, (B, T), generator=gen)
        targets = torch.randint(0, VOCAB, (B, T), generator=gen)
        magic = b"AAFIXQ01" if qwen else b"AAFIXE01"
        head = magic + struct.pack("<8i", N_LAYER, N_HEAD, D_MODEL, D_FF, SEQ_LEN, VOCAB, B, T)
        head += struct.pack("<i2f", N_KV_HEAD, ROPE_THETA, NORM_EPS)
        head += struct.pack("<5i3f", E, K, FE, S, every, AUX_COEF, Z_COEF, 0.0)
        if qwen:
            head += struct.pack("<3i", 1, 1, 0)
        seen["gap"] = math.inf
        P0 = {n: p.detach().clone().requires_grad_(True) for n, p in P.items()}
        gpt.write_fixture(path, head, forward, P, [(n, s, d) for n, s, d in specs], inputs, targets)
        print(f"{stem}: attempt {attempt}: smallest top-k gap {seen['gap']:.2e}")
        if seen["gap"] >= MIN_GAP:
            if check:
                gpt.selftest(forward, [s[0] for s in specs], VOCAB, P0, inputs, targets)
            return
    raise SystemExit(f"{stem}: no draw with separated router logits in 100 tries")


def main():
    check = "--selftest" in sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    gen = torch.Generator().manual_seed(SEED)
    for stem, S, every in VARIANTS:
        variant(gen, stem, S, every, check, here)
    stem, S, every = QWEN
    variant(torch.Generator().manual_seed(QWEN_SEED), stem, S, every, check, here, qwen=True)


if __name__ == "__main__":
    main()
