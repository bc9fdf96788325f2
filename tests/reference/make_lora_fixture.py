#!/usr/bin/python3
"""Builds tests/reference/lora_tiny.fixture: LoRA adapters on the tiny Llama of
make_llama_fixture.py (the same base: its seed, its weights), computed in
float64 PyTorch as Hugging Face PEFT's LoraLayer does (no dropout):
    y = base(x) + (alpha / r) * lora_B(lora_A(x))
with A (r, in) and B (out, r) on every one of the seven targets (q, k, v, o,
gate, up, down) of every block, the base frozen. tests/test_reference.c
(`test_reference lora`) checks the float32 C engine against it: logits, loss,
the adapters' gradients, AdamW steps over the adapters alone, and the base
bit-identical after them.

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_lora_fixture.py [--selftest]

--selftest also runs torch.autograd.gradcheck on the adapters' gradients.

PEFT initialises B to zeros, so A's gradient would be zero at the start; the
fixture draws B non-zero (0.2 N(0,1)) so that both gradients are checked. A
is PEFT's Kaiming-uniform (U(-1/sqrt(in), 1/sqrt(in))) from this script's
generator. The optimizer is make_fixture.py's AdamW (weight decay on A and
B, the global-norm clip at 0.5), over the adapters only.

Fixture format (little-endian, no padding): llama_tiny.fixture's header with
magic "AAFIXR01", then
    int32   r
    float32 alpha
    int32   targets                  mask of spec.h aa_lora_target_t bits
    float32 lr, beta1, beta2, eps, weight_decay, grad_clip
    int32   n_steps
    int32   inputs[B*T], targets[B*T]
    float32 base[n_params]           the frozen base, engine layout (llama_tiny's)
    float32 adapters[n_adapters]     engine/model.h aa_gpt_lora_offset's layout
    float32 logits[B*T*vocab]
    float32 loss
    float32 grads[n_adapters]        d loss / d adapters
    float32 step_losses[n_steps]
    float32 adapters_after[n_adapters]
The adapters' layout: per block, per target in the order q, k, v, o, gate, up,
down, A (r, in) then B (out, r), row-major.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixture as gpt  # noqa: E402 (f32, the optimizer settings)
import make_llama_fixture as ll  # noqa: E402 (the base)

R, ALPHA = 4, gpt.f32(8.0)
TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]  # spec.h's order: mask bits 0..6
MASK = (1 << len(TARGETS)) - 1
SCALE = ALPHA / R
# The base tensor each target adapts and its (in, out).
BASE_OF = {"q": "q.w", "k": "k.w", "v": "v.w", "o": "proj.w", "gate": "gate.w", "up": "up.w", "down": "down.w"}
N_STEPS = 5
SEED = 20240603
# make_fixture.py's clip is 1.0, above the adapters' first norm (0.85): this
# fixture clips at 0.5 so that the engine's clip path is checked.
GRAD_CLIP = gpt.f32(0.5)


def shapes():
    C, F_, KV = ll.D_MODEL, ll.D_FF, ll.N_KV_HEAD * ll.HS
    return {"q": (C, C), "k": (C, KV), "v": (C, KV), "o": (C, C), "gate": (C, F_), "up": (C, F_),
            "down": (F_, C)}


def adapter_names():
    """(name, shape) of A and B of every target in the engine's order."""
    out = []
    for l in range(ll.N_LAYER):
        for t in TARGETS:
            i, o = shapes()[t]
            out += [(f"h{l}.{t}.A", (R, i)), (f"h{l}.{t}.B", (o, R))]
    return out


def init_adapters(gen):
    L = {}
    for name, shape in adapter_names():
        if name.endswith(".A"):
            bound = 1.0 / math.sqrt(shape[1])
            p = (2 * torch.rand(shape, generator=gen, dtype=torch.float64) - 1) * bound
        else:
            p = 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)
        L[name] = p.float().double().requires_grad_(True)
    return L


def llama_forward(P, lin, inputs):
    """make_llama_fixture.forward's logits with every projection lin(l,
    target, x): the base's, and whatever update the caller adds."""
    Bn, Tn = inputs.shape
    C, HS, group = ll.D_MODEL, ll.HS, ll.N_HEAD // ll.N_KV_HEAD
    x = P["wte"][inputs]
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(ll.N_LAYER):
        h = f"h{l}."
        n = ll.rmsnorm(x, P[h + "ln1.w"])
        q = lin(l, "q", n).view(Bn, Tn, ll.N_HEAD, HS).transpose(1, 2)
        k = lin(l, "k", n).view(Bn, Tn, ll.N_KV_HEAD, HS).transpose(1, 2)
        v = lin(l, "v", n).view(Bn, Tn, ll.N_KV_HEAD, HS).transpose(1, 2)
        q, k = ll.rope(q), ll.rope(k)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + lin(l, "o", y)
        n = ll.rmsnorm(x, P[h + "ln2.w"])
        u = F.silu(lin(l, "gate", n)) * lin(l, "up", n)
        x = x + lin(l, "down", u)
    return ll.rmsnorm(x, P["lnf.w"]) @ P["head.w"].T


def forward(P, L, inputs, targets=None):
    """make_llama_fixture.forward with every target's LoRA update added."""

    def lin(l, t, x):
        h = f"h{l}."
        return x @ P[h + BASE_OF[t]].T + SCALE * ((x @ L[f"{h}{t}.A"].T) @ L[f"{h}{t}.B"].T)

    logits = llama_forward(P, lin, inputs)
    if targets is None:
        return logits, None
    return logits, F.cross_entropy(logits.reshape(-1, ll.VOCAB), targets.reshape(-1))


def flat(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def main():
    # The base exactly as make_llama_fixture.py draws it (its seed, its order).
    gen = torch.Generator().manual_seed(ll.SEED)
    P = ll.init_params(gen)
    inputs = torch.randint(0, ll.VOCAB, (ll.B, ll.T), generator=gen)
    targets = torch.randint(0, ll.VOCAB, (ll.B, ll.T), generator=gen)
    for p in P.values():
        p.requires_grad_(False)
    L = init_adapters(torch.Generator().manual_seed(SEED))
    names = [n for n, _ in adapter_names()]
    if "--selftest" in sys.argv[1:]:
        for n in names[:4] + names[-2:]:
            def f(t, n=n):
                Q = dict(L)
                Q[n] = t
                return forward(P, Q, inputs, targets)[1]
            assert torch.autograd.gradcheck(f, (L[n].detach().clone().requires_grad_(True),)), n
        print("selftest: gradcheck of", names[:4] + names[-2:], "passed")

    base = flat(P[s[0]] for s in ll.param_specs())
    adapters0 = flat(L[n] for n in names)
    logits, loss = forward(P, L, inputs, targets)
    loss.backward()
    grads = flat(L[n].grad for n in names)
    opt = torch.optim.AdamW([L[n] for n in names], lr=gpt.LR, betas=(gpt.BETA1, gpt.BETA2), eps=gpt.EPS,
                            weight_decay=gpt.WEIGHT_DECAY)
    step_losses, norms = [], []
    for _ in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        _, step_loss = forward(P, L, inputs, targets)
        step_loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_([L[n] for n in names], GRAD_CLIP)))
        opt.step()
        step_losses.append(float(step_loss))
    assert norms[0] > GRAD_CLIP, f"grad norm {norms[0]} does not exceed grad_clip {GRAD_CLIP}"
    assert torch.equal(base, flat(P[s[0]] for s in ll.param_specs())), "the base moved"
    after = flat(L[n] for n in names)

    out = bytearray(b"AAFIXR01")
    out += struct.pack("<8i", ll.N_LAYER, ll.N_HEAD, ll.D_MODEL, ll.D_FF, ll.SEQ_LEN, ll.VOCAB, ll.B, ll.T)
    out += struct.pack("<i2f", ll.N_KV_HEAD, ll.ROPE_THETA, ll.NORM_EPS)
    out += struct.pack("<ifi", R, ALPHA, MASK)
    out += struct.pack("<6f", gpt.LR, gpt.BETA1, gpt.BETA2, gpt.EPS, gpt.WEIGHT_DECAY, GRAD_CLIP)
    out += struct.pack("<i", N_STEPS)
    out += inputs.to(torch.int32).numpy().tobytes() + targets.to(torch.int32).numpy().tobytes()
    for t in (base, adapters0, logits.detach().reshape(-1), loss.detach().reshape(1), grads,
              torch.tensor(step_losses, dtype=torch.float64), after):
        out += t.to(torch.float32).numpy().astype("<f4").tobytes()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lora_tiny.fixture")
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {path}: {len(out)} bytes, {base.numel()} base and {adapters0.numel()} adapter parameters")
    print(f"loss {float(loss):.6f}, step losses {[round(s, 6) for s in step_losses]}")
    print(f"grad norms {[round(n, 4) for n in norms]} (clip {GRAD_CLIP})")


if __name__ == "__main__":
    main()
