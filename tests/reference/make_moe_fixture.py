#!/usr/bin/python3
"""Builds tests/reference/moe_tiny.fixture: Mixtral's sparse mixture-of-experts
block computed in float64 PyTorch, against which tests/test_ops_moe.c checks
the float32 CPU ops of kernels/cpu/cpu_moe.c (forward, both auxiliary losses
and every gradient).

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_moe_fixture.py [--selftest]

--selftest also runs torch.autograd.gradcheck of the whole block (output,
aux loss and z-loss) with respect to every input and weight, per case.

The block is written out here as Hugging Face's MixtralSparseMoeBlock
computes it, with DeepSeek-style shared experts added:
    logits = x wr^T, probs = softmax(logits)
    expert (N,k) = top-k of each row, best first; weight = their probs / sum
    out[n] = sum_j keep[n,j] weight[n,j] E_{expert[n,j]}(x[n]) + sum_s S_s(x[n])
    E_e(x) = w2_e (silu(w1_e x) * w3_e x)
    aux = aux_coef * E * sum_e (c_e / N) P_e   (c_e slots routed to e, P_e mean prob)
    z   = z_coef * mean_n logsumexp(logits[n])^2
and the loss whose gradients are stored is L = sum(out * dout) + aux + z, so
every stored gradient is dL/d(tensor) with dout the upstream gradient of out.
aux is also computed by a transcription of Hugging Face's
load_balancing_loss_func (one layer, no attention mask) and the two must
agree. keep is 1 everywhere unless a capacity factor c is set: then each
expert keeps its first ceil(c N k / E) slots in token order (n, then j).

Each case's inputs are drawn until every token's top k+1 logits are at least
MIN_GAP apart, so the choice and its order are the same in float32 and in
float64 (torch.topk's order on ties is unspecified anyway), and stay the same
under tests/test_ops_moe.c's finite-difference steps; the capacity case is
drawn until it drops at least one slot.

Fixture format (little-endian, no padding):
    char    magic[8]          "AAFIXM01"
    int32   n_cases
    per case:
      int32   N, C, E, k, F, S
      float32 aux_coef, z_coef, capacity_factor (0 = dropless)
      float32 x(N,C), wr(E,C), w13(E,2F,C), w2(E,C,F), ws13(S,2F,C), ws2(S,C,F), dout(N,C)
      int32   expert(N,k), kept(E), dropped
      float32 weight(N,k), out(N,C), aux, z
      float32 dlogits(N,E), dx(N,C), dwr(E,C), dw13(E,2F,C), dw2(E,C,F), dws13(S,2F,C), dws2(S,C,F)
w13 holds per expert the rows [w1_e (F,C); w3_e (F,C)] (gate, then up); kept
is each expert's slot count after the capacity, dropped their total drop.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixture import f32  # noqa: E402

N, C, E, K, FF = 24, 16, 4, 2, 12
AUX_COEF, Z_COEF = f32(0.01), f32(0.001)
MIN_GAP = 0.08
SEED = 20240733
# (name, shared experts S, capacity factor c; 0 = dropless)
CASES = [("shared", 1, 0.0), ("plain", 0, 0.0), ("capacity", 1, f32(1.0))]


def swiglu(x, w13, w2):
    h = x @ w13.T
    return (F.silu(h[:, :FF]) * h[:, FF:]) @ w2.T


def choose(logits):
    """(N,K) experts, best first; asserts no near-ties among the top K+1."""
    order = torch.argsort(-logits, dim=-1, stable=True)
    return order[:, :K]


def min_gap(logits):
    s = torch.sort(logits, dim=-1, descending=True).values
    return float((s[:, :K] - s[:, 1:K + 1]).min())


def keep_mask(sel, cap):
    """(N,K) 1 for kept slots, walking tokens then choices in order."""
    keep = torch.ones(sel.shape, dtype=torch.float64)
    if cap <= 0:
        return keep, [int((sel == e).sum()) for e in range(E)]
    capacity = math.ceil(cap * N * K / E)
    seen = [0] * E
    for n in range(N):
        for j in range(K):
            e = int(sel[n, j])
            if seen[e] < capacity:
                seen[e] += 1
            else:
                keep[n, j] = 0.0
    return keep, seen


def hf_load_balancing_loss(gate_logits, num_experts, top_k):
    """transformers' load_balancing_loss_func for one layer, attention_mask None."""
    routing_weights = F.softmax(gate_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.double(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


def block(x, wr, w13, w2, ws13, ws2, cap):
    """out, aux, z, logits, sel, weight, kept counts."""
    logits = x @ wr.T
    probs = F.softmax(logits, dim=-1)
    sel = choose(logits.detach())
    psel = probs.gather(1, sel)
    weight = psel / psel.sum(-1, keepdim=True)
    keep, kept = keep_mask(sel, cap)
    ys = torch.stack([swiglu(x, w13[e], w2[e]) for e in range(E)])  # (E,N,C)
    tok = torch.arange(x.shape[0])
    out = sum((keep[:, j] * weight[:, j])[:, None] * ys[sel[:, j], tok] for j in range(K))
    for s in range(ws13.shape[0]):
        out = out + swiglu(x, ws13[s], ws2[s])
    counts = F.one_hot(sel, E).double().sum((0, 1))  # c_e, before any drop
    aux = AUX_COEF * E * (counts / x.shape[0] * probs.mean(0)).sum()
    z = Z_COEF * torch.logsumexp(logits, dim=-1).pow(2).mean()
    return out, aux, z, logits, sel, weight, kept


def draw(gen, S, cap):
    """Float32-representable inputs (as float64) with well-separated top-k."""
    for _ in range(1000):
        def t(shape, std):
            return (std * torch.randn(shape, generator=gen, dtype=torch.float64)).float().double()
        T = {"x": t((N, C), 1.0), "wr": t((E, C), 0.3), "w13": t((E, 2 * FF, C), 0.25),
             "w2": t((E, C, FF), 0.3), "ws13": t((S, 2 * FF, C), 0.25), "ws2": t((S, C, FF), 0.3),
             "dout": (2 * torch.rand((N, C), generator=gen, dtype=torch.float64) - 1).float().double()}
        logits = T["x"] @ T["wr"].T
        if min_gap(logits) < MIN_GAP:
            continue
        _, kept = keep_mask(choose(logits), cap)
        if cap > 0 and sum(kept) == N * K:
            continue
        return T
    raise SystemExit("no draw with separated logits in 1000 tries")


NAMES = ["x", "wr", "w13", "w2", "ws13", "ws2"]


def selftest(T, cap):
    def f(*ts):
        out, aux, z, *_ = block(*ts, cap)
        return out, aux, z

    ts = [T[n].detach().clone().requires_grad_(True) for n in NAMES]
    assert torch.autograd.gradcheck(f, ts, eps=1e-6, atol=1e-8, rtol=1e-6)


def f32_bytes(*ts):
    return b"".join(t.detach().reshape(-1).to(torch.float32).numpy().astype("<f4").tobytes() for t in ts)


def case_bytes(gen, name, S, cap, check):
    T = draw(gen, S, cap)
    if check:
        selftest(T, cap)
    P = {n: T[n].clone().requires_grad_(True) for n in NAMES}
    out, aux, z, logits, sel, weight, kept = block(*(P[n] for n in NAMES), cap)
    logits.retain_grad()
    hf = AUX_COEF * hf_load_balancing_loss(logits.detach(), E, K)
    assert abs(float(hf) - float(aux)) <= 1e-14 * float(aux), (float(hf), float(aux))
    ((out * T["dout"]).sum() + aux + z).backward()
    dropped = N * K - sum(kept)
    b = struct.pack("<6i3f", N, C, E, K, FF, S, AUX_COEF, Z_COEF, cap)
    b += f32_bytes(*(T[n] for n in NAMES + ["dout"]))
    b += sel.to(torch.int32).numpy().astype("<i4").tobytes() + struct.pack(f"<{E}i", *kept)
    b += struct.pack("<i", dropped)
    grads = [P[n].grad if P[n].grad is not None else torch.zeros_like(P[n]) for n in NAMES]  # S = 0: empty
    b += f32_bytes(weight, out, aux, z, logits.grad, *grads)
    print(f"{name}: S {S} c {cap}: kept {kept} dropped {dropped}, aux {float(aux):.6g} z {float(z):.6g}, "
          f"min top-k gap {min_gap(logits.detach()):.3f}, max |out| {float(out.abs().max()):.3f}")
    return b


def main():
    check = "--selftest" in sys.argv[1:]
    gen = torch.Generator().manual_seed(SEED)
    out = bytearray(b"AAFIXM01" + struct.pack("<i", len(CASES)))
    for name, S, cap in CASES:
        out += case_bytes(gen, name, S, cap, check)
    if check:
        print("selftest: gradcheck ok")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe_tiny.fixture")
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {path}: {len(out)} bytes")


if __name__ == "__main__":
    main()
