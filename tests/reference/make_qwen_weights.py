#!/usr/bin/python3
"""Writes a tiny Qwen2 (Qwen2ForCausalLM) and a tiny Qwen2-MoE
(Qwen2MoeForCausalLM) under their Hugging Face names, and the logits
Hugging Face's math computes from them in float64, for tests/test_import.c.

    /usr/bin/python3 tests/reference/make_qwen_weights.py --out DIR

Exits 3 with "skipped: ..." on stderr when torch cannot be imported (the
tests then skip with that reason). The safetensors writer is
make_weights.py's.

Qwen2 (test_import.c's qwen2_arch): a Llama (n_layer 2, n_head 4, n_kv_head
2, d_model 16, d_ff 24, seq_len 8, vocab 29, rope_theta 10000, norm_eps
1e-5, untied head) whose q, k and v projections have biases
(self_attn.q_proj.bias (C), k_proj.bias, v_proj.bias (NKV hs)); o_proj has
none.

Qwen2-MoE (qwen_moe_arch): n_layer 3 of Qwen2's attention (biases too);
layers 0 and 2 are Qwen2MoeSparseMoeBlock (moe.every 2) of E 4 experts of
width Fe 12, top-2 with norm_topk_prob false (the two probabilities weigh
their experts as they are, as Qwen1.5-MoE's config says), and one shared expert of width 24 = 2 Fe (autoaccel's
shared_experts 2) whose output is multiplied by sigmoid(x wg^T), wg the
shared_expert_gate (1,C); layer 1 is a dense SwiGLU of d_ff 24 (Qwen2MoeMLP,
mlp.gate_proj/up_proj/down_proj, as mlp_only_layers keeps it).
Names: mlp.gate.weight (E,C), mlp.experts.{e}.gate_proj/up_proj.weight
(Fe,C), down_proj.weight (C,Fe), mlp.shared_expert.gate_proj/up_proj.weight
(2Fe,C), down_proj.weight (C,2Fe), mlp.shared_expert_gate.weight (1,C).

Files in DIR (F32, every name under "model." but lm_head.weight):
    qwen2.safetensors, qwen2_logits.bin
    qwen2_moe.safetensors, qwen2_moe_logits.bin
A logits file is int32 ids (T), then float32 logits (T,V) of the float64
forward from the float32 weights. The router's weights have std 0.5 and
draws repeat until every token's 2nd and 3rd router logits in every MoE
layer are at least 1e-3 apart, so the float32 engine routes as the
reference does.
"""
import math
import os
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

NH, NKV, C, FF, T, V = 4, 2, 16, 24, 8, 29
E, K, FE, SH = 4, 2, 12, 24  # SH: the shared expert's width, 2 FE
HS = C // NH
THETA, EPS = 10000.0, 1e-5
MIN_GAP = 1e-3
SEED = 20261129


def specs(L, moe_layers):
    """(name without "model.", shape) in the engine's order."""
    out = [("embed_tokens.weight", (V, C))]
    for l in range(L):
        p = f"layers.{l}."
        out += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (C, C)),
                (p + "self_attn.k_proj.weight", (NKV * HS, C)), (p + "self_attn.v_proj.weight", (NKV * HS, C)),
                (p + "self_attn.q_proj.bias", (C,)), (p + "self_attn.k_proj.bias", (NKV * HS,)),
                (p + "self_attn.v_proj.bias", (NKV * HS,)), (p + "self_attn.o_proj.weight", (C, C)),
                (p + "post_attention_layernorm.weight", (C,))]
        if l in moe_layers:
            out.append((p + "mlp.gate.weight", (E, C)))
            # The engine's order (every expert's gate and up, then every
            # down), so that its export is this file byte for byte.
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                out += [(q + "gate_proj.weight", (FE, C)), (q + "up_proj.weight", (FE, C))]
            out += [(f"{p}mlp.experts.{e}.down_proj.weight", (C, FE)) for e in range(E)]
            out += [(p + "mlp.shared_expert.gate_proj.weight", (SH, C)),
                    (p + "mlp.shared_expert.up_proj.weight", (SH, C)),
                    (p + "mlp.shared_expert.down_proj.weight", (C, SH)),
                    (p + "mlp.shared_expert_gate.weight", (1, C))]
        else:
            out += [(p + "mlp.gate_proj.weight", (FF, C)), (p + "mlp.up_proj.weight", (FF, C)),
                    (p + "mlp.down_proj.weight", (C, FF))]
    return out + [("norm.weight", (C,)), ("lm_head.weight", (V, C))]


def draw(gen, sp):
    """Float32 weights: embeddings N(0, 0.02), linear weights std 0.15,
    biases std 0.2, RMSNorm gains in [0.5, 1.5), the router std 0.5."""
    p = {}
    for name, shape in sp:
        if name == "embed_tokens.weight":
            t = 0.02 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.2 * torch.randn(shape, generator=gen)
        elif len(shape) == 1:
            t = 0.5 + torch.rand(shape, generator=gen)
        elif name.endswith("mlp.gate.weight"):
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


def swiglu(x, q, pre):
    return (F.silu(x @ q[pre + "gate_proj.weight"].T) * (x @ q[pre + "up_proj.weight"].T)) @ \
        q[pre + "down_proj.weight"].T


def forward(p, ids, L, moe_layers):
    """Qwen2(Moe)ForCausalLM's logits (T,V) in float64, and the smallest gap
    between a token's k-th and (k+1)-th router logits."""
    q = {k: v.to(torch.float64) for k, v in p.items()}
    Tn = ids.shape[0]
    x = q["embed_tokens.weight"][ids]
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    gap = math.inf
    for l in range(L):
        h = f"layers.{l}."
        n = rmsnorm(x, q[h + "input_layernorm.weight"])
        proj = [(n @ q[f"{h}self_attn.{w}_proj.weight"].T + q[f"{h}self_attn.{w}_proj.bias"]) for w in "qkv"]
        qq = proj[0].view(Tn, NH, HS).transpose(0, 1)
        kk = proj[1].view(Tn, NKV, HS).transpose(0, 1)
        vv = proj[2].view(Tn, NKV, HS).transpose(0, 1)
        qq, kk = rope(qq), rope(kk)
        kk, vv = kk.repeat_interleave(NH // NKV, 0), vv.repeat_interleave(NH // NKV, 0)
        att = ((qq @ kk.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + (att @ vv).transpose(0, 1).reshape(Tn, C) @ q[h + "self_attn.o_proj.weight"].T
        n = rmsnorm(x, q[h + "post_attention_layernorm.weight"])
        if l in moe_layers:
            # Qwen2MoeSparseMoeBlock with norm_topk_prob false: softmax,
            # top-k, not renormalised; plus the shared expert times its
            # sigmoid gate.
            logits = n @ q[h + "mlp.gate.weight"].T
            s = torch.sort(logits, dim=-1, descending=True).values
            gap = min(gap, float((s[:, K - 1] - s[:, K]).min()))
            w, sel = torch.topk(logits.softmax(-1), K, dim=-1)
            out = torch.zeros_like(n)
            for t in range(Tn):
                for j in range(K):
                    out[t] += w[t, j] * swiglu(n[t], q, f"{h}mlp.experts.{int(sel[t, j])}.")
            shared = swiglu(n, q, h + "mlp.shared_expert.")
            out += torch.sigmoid(n @ q[h + "mlp.shared_expert_gate.weight"].T) * shared
            x = x + out
        else:
            x = x + swiglu(n, q, h + "mlp.")
    return rmsnorm(x, q["norm.weight"]) @ q["lm_head.weight"].T, gap


def write(out, stem, p, sp, ids, logits):
    make_weights.write_safetensors(
        os.path.join(out, stem + ".safetensors"),
        [(("" if n == "lm_head.weight" else "model.") + n, "F32", s, make_weights.raw(p[n], "F32")) for n, s in sp])
    with open(os.path.join(out, stem + "_logits.bin"), "wb") as f:
        f.write(ids.numpy().astype("<i4").tobytes())
        f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--out":
        print("usage: make_qwen_weights.py --out DIR", file=sys.stderr)
        return 2
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    sp = specs(2, ())
    p = draw(gen, sp)
    ids = torch.randint(0, V, (T,), generator=gen)
    write(out, "qwen2", p, sp, ids, forward(p, ids, 2, ())[0])
    sp = specs(3, (0, 2))
    for _ in range(100):
        p = draw(gen, sp)
        ids = torch.randint(0, V, (T,), generator=gen)
        logits, gap = forward(p, ids, 3, (0, 2))
        if gap >= MIN_GAP:
            break
    else:
        print(f"no draw with top-{K} router logits {MIN_GAP} apart in 100 tries", file=sys.stderr)
        return 1
    write(out, "qwen2_moe", p, sp, ids, logits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
