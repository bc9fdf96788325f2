#!/usr/bin/python3
"""Builds tests/reference/llama_tiny.fixture: a tiny Llama computed in float64
PyTorch, against which tests/test_reference.c (`test_reference llama`)
checks the float32 C engine; and tests/reference/llama_tiny.safetensors, the same initial
parameters under Hugging Face Llama's names (F32), which test_import,
cli/test_import_cli.sh and test_llama_reference import.

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_llama_fixture.py [--selftest]

--selftest also checks this script's own model: torch.autograd.gradcheck of
every parameter gradient, and causality (changing a later token never changes
an earlier position's logits).

The model is written out here, as Hugging Face's LlamaForCausalLM computes it:
    x = wte[tokens]
    per block: h = x + o_proj(attn(rope(q), rope(k), v)) of n = rmsnorm(x)*ln1.w
               x = h + down(silu(gate(n2)) * up(n2)), n2 = rmsnorm(h)*ln2.w
    logits = head(rmsnorm(x)*lnf.w), loss = mean token cross-entropy
with rmsnorm(x) = x / sqrt(mean(x^2) + norm_eps), no biases, RoPE in the
"rotate_half" pairing (x[i] with x[i + hs/2], angle pos * theta^(-2i/hs)),
causal grouped-query attention (query head h reads key/value head
h // (n_head / n_kv_head), scale 1/sqrt(hs)) and an untied head.

Fixture format (little-endian, no padding): gpt_tiny.fixture's (see
make_fixture.py) with magic "AAFIXL01" and three more header fields after T:
    char    magic[8]          "AAFIXL01"
    int32   n_layer, n_head, d_model, d_ff, seq_len, vocab, B, T
    int32   n_kv_head
    float32 rope_theta, norm_eps
    float32 lr, beta1, beta2, eps, weight_decay, grad_clip
    int32   n_steps
    int32   inputs[B*T], targets[B*T]
    float32 params[n_params]        engine layout (engine/model.h, llama)
    float32 logits[B*T*vocab]       forward on inputs
    float32 loss                    mean cross-entropy
    float32 grads[n_params]         d loss / d params, same layout
    float32 step_losses[n_steps]    loss before each AdamW update
    float32 params_after[n_params]  after n_steps updates on the same batch
The engine layout is wte (V,C), then per layer ln1.w (C), q.w (NH*hs,C), k.w
(NKV*hs,C), v.w (NKV*hs,C), proj.w (C,C), ln2.w (C), gate.w (F,C), up.w (F,C),
down.w (C,F), then lnf.w (C), head.w (V,C). Linear weights are (out,in) as
nn.Linear and Hugging Face store them; head h uses rows h*hs..h*hs+hs-1 of
q.w (k.w, v.w: key/value head h).
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixture as gpt  # noqa: E402 (f32, selftest, write_fixture, the optimizer settings)
import make_weights  # noqa: E402 (write_safetensors)

N_LAYER, N_HEAD, N_KV_HEAD, D_MODEL, D_FF, SEQ_LEN, VOCAB = 2, 4, 2, 16, 24, 8, 29
HS = D_MODEL // N_HEAD
B, T = 3, 8
N_STEPS = 5
SEED = 20240602


# As float32 values, so the float64 reference uses exactly the numbers the C
# test passes to the engine (the spec holds them as float32 too). The
# optimizer settings are make_fixture.py's.
ROPE_THETA, NORM_EPS = gpt.f32(10000.0), gpt.f32(1e-5)

# The engine's block tensors and Hugging Face's names for them.
BLOCK = [("ln1.w", "input_layernorm.weight"), ("q.w", "self_attn.q_proj.weight"),
         ("k.w", "self_attn.k_proj.weight"), ("v.w", "self_attn.v_proj.weight"),
         ("proj.w", "self_attn.o_proj.weight"), ("ln2.w", "post_attention_layernorm.weight"),
         ("gate.w", "mlp.gate_proj.weight"), ("up.w", "mlp.up_proj.weight"),
         ("down.w", "mlp.down_proj.weight")]


def param_specs():
    """(name, shape, decay, hf_name) in the engine's flat layout order."""
    C, F_, V, KV = D_MODEL, D_FF, VOCAB, N_KV_HEAD * HS
    shapes = {"ln1.w": (C,), "q.w": (N_HEAD * HS, C), "k.w": (KV, C), "v.w": (KV, C),
              "proj.w": (C, C), "ln2.w": (C,), "gate.w": (F_, C), "up.w": (F_, C),
              "down.w": (C, F_)}
    specs = [("wte", (V, C), True, "model.embed_tokens.weight")]
    for l in range(N_LAYER):
        for name, hf in BLOCK:
            s = shapes[name]
            specs.append((f"h{l}.{name}", s, len(s) == 2, f"model.layers.{l}.{hf}"))
    specs += [("lnf.w", (C,), False, "model.norm.weight"), ("head.w", (V, C), True, "lm_head.weight")]
    return specs


def init_params(gen):
    """Random float32-representable weights, returned as float64 tensors.

    The embedding is N(0, 0.02); linear weights (the head too) have std 0.15
    as in make_fixture.py, so that at d_model 16 the attention scores and
    SwiGLU inputs are O(1) and no softmax is almost uniform; RMSNorm gains are
    in [0.5, 1.5), so no gradient path is trivially one."""
    params = {}
    for name, shape, _, _ in param_specs():
        if name == "wte":
            p = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif len(shape) == 1:
            p = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
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
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * inv[None, :]  # (T,hs/2)
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., :HS // 2], x[..., HS // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(P, inputs, targets=None):
    """logits (B,T,V) and, with targets, the mean cross-entropy."""
    Bn, Tn = inputs.shape
    C, group = D_MODEL, N_HEAD // N_KV_HEAD
    x = P["wte"][inputs]  # (B,T,C)
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(N_LAYER):
        h = f"h{l}."
        n = rmsnorm(x, P[h + "ln1.w"])
        q = (n @ P[h + "q.w"].T).view(Bn, Tn, N_HEAD, HS).transpose(1, 2)  # (B,NH,T,hs)
        k = (n @ P[h + "k.w"].T).view(Bn, Tn, N_KV_HEAD, HS).transpose(1, 2)  # (B,NKV,T,hs)
        v = (n @ P[h + "v.w"].T).view(Bn, Tn, N_KV_HEAD, HS).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)  # (B,NH,T,T)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ P[h + "proj.w"].T
        n = rmsnorm(x, P[h + "ln2.w"])
        u = F.silu(n @ P[h + "gate.w"].T) * (n @ P[h + "up.w"].T)
        x = x + u @ P[h + "down.w"].T
    logits = rmsnorm(x, P["lnf.w"]) @ P["head.w"].T
    if targets is None:
        return logits, None
    return logits, F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def write_safetensors(path, P):
    """The initial parameters as Hugging Face Llama's F32 safetensors."""
    make_weights.write_safetensors(path, [(hf, "F32", shape, make_weights.raw(P[name].detach(), "F32"))
                                          for name, shape, _, hf in param_specs()])


def main():
    gen = torch.Generator().manual_seed(SEED)
    P = init_params(gen)
    inputs = torch.randint(0, VOCAB, (B, T), generator=gen)
    targets = torch.randint(0, VOCAB, (B, T), generator=gen)
    if "--selftest" in sys.argv[1:]:
        gpt.selftest(forward, [s[0] for s in param_specs()], VOCAB, P, inputs, targets)

    here = os.path.dirname(os.path.abspath(__file__))
    write_safetensors(os.path.join(here, "llama_tiny.safetensors"), P)
    head = b"AAFIXL01" + struct.pack("<8i", N_LAYER, N_HEAD, D_MODEL, D_FF, SEQ_LEN, VOCAB, B, T)
    head += struct.pack("<i2f", N_KV_HEAD, ROPE_THETA, NORM_EPS)
    gpt.write_fixture(os.path.join(here, "llama_tiny.fixture"), head, forward, P, param_specs(), inputs, targets)


if __name__ == "__main__":
    main()
