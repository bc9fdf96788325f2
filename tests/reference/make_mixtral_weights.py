#!/usr/bin/python3
"""Writes a tiny mixture-of-experts Llama under Hugging Face Mixtral's names
(MixtralForCausalLM), the same weights under Qwen-MoE's names
(Qwen2MoeForCausalLM), and the logits Hugging Face's Mixtral computes from
them in float64, for tests/test_import.c.

    /usr/bin/python3 tests/reference/make_mixtral_weights.py --out DIR

Exits 3 with "skipped: ..." on stderr when torch cannot be imported (the
tests then skip with that reason). The safetensors writer is
make_weights.py's.

The model (test_import.c's mixtral_arch): n_layer 3, n_head 4, n_kv_head 2,
d_model 16, seq_len 8, vocab 29, rope_theta 10000, norm_eps 1e-5; layers 0
and 2 are sparse MoE blocks (moe.every 2) of E 4 experts of width Fe 12,
top-2, no shared experts; layer 1 is a dense SwiGLU MLP of d_ff 24 under
Llama's names (mlp.gate_proj, up_proj, down_proj), as a Mixtral-style model
with dense layers keeps them.

Files in DIR (all F32, every name under "model." but lm_head.weight):
    mixtral.safetensors  model.layers.{l}.block_sparse_moe.gate.weight (E,C),
                         ...experts.{e}.w1.weight (Fe,C) gate, w3 (Fe,C) up,
                         w2 (C,Fe) down; the rest as Llama
    qwen.safetensors     the same weights as Qwen-MoE names them:
                         mlp.gate.weight, mlp.experts.{e}.gate_proj/up_proj/
                         down_proj.weight
    qwen_shared.safetensors
                         qwen.safetensors plus a shared expert
                         (mlp.shared_expert.gate_proj/up_proj/down_proj) and
                         its sigmoid gate mlp.shared_expert_gate.weight (1,C)
                         in layer 0, which the import refuses
    logits.bin           int32 ids (T), then float32 logits (T,V): the forward
                         of Hugging Face's MixtralForCausalLM (RMSNorm, RoPE
                         rotate_half, causal grouped-query attention, router
                         softmax, top-2, the two weights renormalised to sum
                         1, experts w2(silu(w1 x) * w3 x)) in float64 from
                         the float32 weights

The router's weights have std 0.5, and draws are repeated until every
token's 2nd and 3rd largest router logits, in every MoE layer, are at least
1e-3 apart, so the float32 engine routes every token as the float64
reference does (a tie broken the other way would change the expert, not
just round the result).
"""
import math
import os
import struct
import sys

try:
    import numpy  # noqa: F401 (Tensor.numpy needs it)
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the C test skips with this reason
    print(f"skipped: {e} (Debian's python3-torch and python3-numpy are needed)", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_weights  # noqa: E402 (write_safetensors, raw)

L, NH, NKV, C, FF, T, V = 3, 4, 2, 16, 24, 8, 29
E, K, FE, EVERY = 4, 2, 12, 2
HS = C // NH
THETA, EPS = 10000.0, 1e-5
MIN_GAP = 1e-3
SEED = 20241129


def is_moe(l):
    return l % EVERY == 0


def hf_specs():
    """(Mixtral name without "model.", shape) in the engine's order."""
    out = [("embed_tokens.weight", (V, C))]
    for l in range(L):
        p = f"layers.{l}."
        out += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (C, C)),
                (p + "self_attn.k_proj.weight", (NKV * HS, C)), (p + "self_attn.v_proj.weight", (NKV * HS, C)),
                (p + "self_attn.o_proj.weight", (C, C)), (p + "post_attention_layernorm.weight", (C,))]
        if is_moe(l):
            out.append((p + "block_sparse_moe.gate.weight", (E, C)))
            for e in range(E):
                q = f"{p}block_sparse_moe.experts.{e}."
                out += [(q + "w1.weight", (FE, C)), (q + "w3.weight", (FE, C)), (q + "w2.weight", (C, FE))]
        else:
            out += [(p + "mlp.gate_proj.weight", (FF, C)), (p + "mlp.up_proj.weight", (FF, C)),
                    (p + "mlp.down_proj.weight", (C, FF))]
    return out + [("norm.weight", (C,)), ("lm_head.weight", (V, C))]


def draw(gen):
    """Float32 weights: embeddings N(0, 0.02), linear weights std 0.15,
    RMSNorm gains in [0.5, 1.5), the router std 0.5."""
    p = {}
    for name, shape in hf_specs():
        if name == "embed_tokens.weight":
            t = 0.02 * torch.randn(shape, generator=gen)
        elif len(shape) == 1:
            t = 0.5 + torch.rand(shape, generator=gen)
        elif name.endswith("gate.weight") and "block_sparse_moe" in name:
            t = 0.5 * torch.randn(shape, generator=gen)
        else:
            t = 0.15 * torch.randn(shape, generator=gen)
        p[name] = t.to(torch.float32)
    return p


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope(x):
    """Hugging Face's rotate_half RoPE on x (H,T,hs), positions 0..T-1."""
    inv = 1.0 / (THETA ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    ang = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., :HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(p, ids):
    """MixtralForCausalLM's logits (T,V) in float64, and the smallest gap
    between a token's k-th and (k+1)-th router logits."""
    q = {k: v.to(torch.float64) for k, v in p.items()}
    Tn = ids.shape[0]
    x = q["embed_tokens.weight"][ids]
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    gap = math.inf
    for l in range(L):
        h = f"layers.{l}."
        n = rmsnorm(x, q[h + "input_layernorm.weight"])
        qq = (n @ q[h + "self_attn.q_proj.weight"].T).view(Tn, NH, HS).transpose(0, 1)
        kk = (n @ q[h + "self_attn.k_proj.weight"].T).view(Tn, NKV, HS).transpose(0, 1)
        vv = (n @ q[h + "self_attn.v_proj.weight"].T).view(Tn, NKV, HS).transpose(0, 1)
        qq, kk = rope(qq), rope(kk)
        kk, vv = kk.repeat_interleave(NH // NKV, 0), vv.repeat_interleave(NH // NKV, 0)
        att = ((qq @ kk.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + (att @ vv).transpose(0, 1).reshape(Tn, C) @ q[h + "self_attn.o_proj.weight"].T
        n = rmsnorm(x, q[h + "post_attention_layernorm.weight"])
        if is_moe(l):
            # MixtralSparseMoeBlock: softmax over the router logits, top-k,
            # the k weights renormalised, the chosen experts' SwiGLU.
            logits = n @ q[h + "block_sparse_moe.gate.weight"].T
            s = torch.sort(logits, dim=-1, descending=True).values
            gap = min(gap, float((s[:, K - 1] - s[:, K]).min()))
            w, sel = torch.topk(logits.softmax(-1), K, dim=-1)
            w = w / w.sum(-1, keepdim=True)
            out = torch.zeros_like(n)
            for t in range(Tn):
                for j in range(K):
                    e = f"{h}block_sparse_moe.experts.{int(sel[t, j])}."
                    a = F.silu(n[t] @ q[e + "w1.weight"].T) * (n[t] @ q[e + "w3.weight"].T)
                    out[t] += w[t, j] * (a @ q[e + "w2.weight"].T)
            x = x + out
        else:
            a = F.silu(n @ q[h + "mlp.gate_proj.weight"].T) * (n @ q[h + "mlp.up_proj.weight"].T)
            x = x + a @ q[h + "mlp.down_proj.weight"].T
    return rmsnorm(x, q["norm.weight"]) @ q["lm_head.weight"].T, gap


def qwen_name(name):
    """Qwen2MoeForCausalLM's name of a Mixtral tensor."""
    for a, b in ((".block_sparse_moe.gate.", ".mlp.gate."), (".block_sparse_moe.experts.", ".mlp.experts."),
                 (".w1.weight", ".gate_proj.weight"), (".w3.weight", ".up_proj.weight"),
                 (".w2.weight", ".down_proj.weight")):
        name = name.replace(a, b)
    return name


def entries(p, rename=lambda n: n):
    return [(("" if n == "lm_head.weight" else "model.") + rename(n), "F32", p[n].shape,
             make_weights.raw(p[n], "F32")) for n, _ in hf_specs()]


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--out":
        print("usage: make_mixtral_weights.py --out DIR", file=sys.stderr)
        return 2
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(100):
        p = draw(gen)
        ids = torch.randint(0, V, (T,), generator=gen)
        logits, gap = forward(p, ids)
        if gap >= MIN_GAP:
            break
    else:
        print(f"no draw with top-{K} router logits {MIN_GAP} apart in 100 tries", file=sys.stderr)
        return 1
    make_weights.write_safetensors(os.path.join(out, "mixtral.safetensors"), entries(p))
    make_weights.write_safetensors(os.path.join(out, "qwen.safetensors"), entries(p, qwen_name))
    shared = [("model.layers.0.mlp.shared_expert.gate_proj.weight", (FE, C)),
              ("model.layers.0.mlp.shared_expert.up_proj.weight", (FE, C)),
              ("model.layers.0.mlp.shared_expert.down_proj.weight", (C, FE)),
              ("model.layers.0.mlp.shared_expert_gate.weight", (1, C))]
    extra = [(n, "F32", s, make_weights.raw(0.15 * torch.randn(s, generator=gen), "F32")) for n, s in shared]
    make_weights.write_safetensors(os.path.join(out, "qwen_shared.safetensors"), entries(p, qwen_name) + extra)
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(ids.numpy().astype("<i4").tobytes())
        f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
