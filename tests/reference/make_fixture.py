#!/usr/bin/python3
"""Builds tests/reference/gpt_tiny.fixture: a tiny GPT-2 computed in float64
PyTorch, against which tests/test_reference.c checks the float32 C engine.

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_fixture.py [--selftest]

--selftest also checks this script's own model: torch.autograd.gradcheck of
every parameter gradient, and causality (changing a later token never changes
an earlier position's logits).

Fixture format (little-endian, no padding):
    char    magic[8]          "AAFIXT01"
    int32   n_layer, n_head, d_model, d_ff, seq_len, vocab, B, T
    float32 lr, beta1, beta2, eps, weight_decay, grad_clip
    int32   n_steps
    int32   inputs[B*T], targets[B*T]
    float32 params[n_params]        engine layout (engine/model.h)
    float32 logits[B*T*vocab]       forward on inputs
    float32 loss                    mean cross-entropy
    float32 grads[n_params]         d loss / d params, same layout
    float32 step_losses[n_steps]    loss before each AdamW update
    float32 params_after[n_params]  after n_steps updates on the same batch
The engine layout is wte (V,C), wpe (T,C), then per layer ln1.w ln1.b qkv.w
(3C,C) qkv.b proj.w (C,C) proj.b ln2.w ln2.b fc.w (F,C) fc.b fcproj.w (C,F)
fcproj.b, then lnf.w lnf.b. Linear weights are (out,in) as nn.Linear; qkv.w
holds rows [Wq; Wk; Wv] and head h uses rows h*hs..h*hs+hs-1 of each.
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

N_LAYER, N_HEAD, D_MODEL, D_FF, SEQ_LEN, VOCAB = 2, 2, 16, 40, 8, 23
B, T = 3, 8
N_STEPS = 5
SEED = 20240601


def f32(x):
    """Rounds a Python float to the float32 the engine will see."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# Hyper-parameters as float32 values, so the float64 reference uses exactly
# the numbers the C test passes to the engine.
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = map(f32, (1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0))


def param_specs():
    """(name, shape, decay) in the engine's flat layout order."""
    C, F_, V = D_MODEL, D_FF, VOCAB
    specs = [("wte", (V, C), True), ("wpe", (SEQ_LEN, C), True)]
    for l in range(N_LAYER):
        h = f"h{l}."
        specs += [(h + "ln1.w", (C,), False), (h + "ln1.b", (C,), False),
                  (h + "qkv.w", (3 * C, C), True), (h + "qkv.b", (3 * C,), False),
                  (h + "proj.w", (C, C), True), (h + "proj.b", (C,), False),
                  (h + "ln2.w", (C,), False), (h + "ln2.b", (C,), False),
                  (h + "fc.w", (F_, C), True), (h + "fc.b", (F_,), False),
                  (h + "fcproj.w", (C, F_), True), (h + "fcproj.b", (C,), False)]
    specs += [("lnf.w", (C,), False), ("lnf.b", (C,), False)]
    return specs


def init_params(gen):
    """Random float32-representable weights, returned as float64 tensors.

    Embeddings are N(0, 0.02) as in GPT-2. Linear weights use a larger std
    (0.15, about 0.02*sqrt(768/16)) so that at C=16 the attention scores and
    GELU inputs have GPT-2-small magnitudes: with 0.02 the softmax would be
    almost uniform and the attention gradient path barely tested. Biases and
    LayerNorm parameters are random too, so no gradient path is trivially
    zero or one."""
    params = {}
    for name, shape, _ in param_specs():
        if name in ("wte", "wpe"):
            p = 0.02 * torch.randn(shape, generator=gen, dtype=torch.float64)
        elif name.endswith("ln1.w") or name.endswith("ln2.w") or name == "lnf.w":
            p = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
        elif len(shape) == 2:
            p = 0.15 * torch.randn(shape, generator=gen, dtype=torch.float64)
        else:
            p = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64)
        params[name] = p.float().double().requires_grad_(True)
    return params


def forward(P, inputs, targets=None):
    """logits (B,T,V) and, with targets, the mean cross-entropy."""
    Bn, Tn = inputs.shape
    C, hs = D_MODEL, D_MODEL // N_HEAD
    x = P["wte"][inputs] + P["wpe"][:Tn]  # (B,T,C)
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    for l in range(N_LAYER):
        h = f"h{l}."
        a = F.layer_norm(x, (C,), P[h + "ln1.w"], P[h + "ln1.b"], eps=1e-5)
        qkv = a @ P[h + "qkv.w"].T + P[h + "qkv.b"]  # (B,T,3C)
        q, k, v = (t.view(Bn, Tn, N_HEAD, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B,NH,T,T)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ P[h + "proj.w"].T + P[h + "proj.b"]
        a = F.layer_norm(x, (C,), P[h + "ln2.w"], P[h + "ln2.b"], eps=1e-5)
        u = F.gelu(a @ P[h + "fc.w"].T + P[h + "fc.b"], approximate="tanh")
        x = x + u @ P[h + "fcproj.w"].T + P[h + "fcproj.b"]
    x = F.layer_norm(x, (C,), P["lnf.w"], P["lnf.b"], eps=1e-5)
    logits = x @ P["wte"].T  # tied head
    if targets is None:
        return logits, None
    return logits, F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def selftest(forward, names, vocab, P, inputs, targets):
    """Checks a model written in this folder (forward over parameters P named
    names, vocab tokens): torch.autograd.gradcheck of every parameter
    gradient, and causality (changing a later token never changes an earlier
    position's logits)."""

    def loss_of(*ps):
        return forward(dict(zip(names, ps)), inputs, targets)[1]

    ps = [P[n].detach().clone().requires_grad_(True) for n in names]
    assert torch.autograd.gradcheck(loss_of, ps, eps=1e-6, atol=1e-8, rtol=1e-6)
    with torch.no_grad():
        base, _ = forward(P, inputs)
        changed = inputs.clone()
        changed[:, -1] = (changed[:, -1] + 1) % vocab
        other, _ = forward(P, changed)
        assert torch.equal(base[:, :-1], other[:, :-1]) and not torch.equal(base[:, -1], other[:, -1])
    print("selftest: gradcheck and causality ok")


def write_fixture(path, head, forward, P, specs, inputs, targets):
    """Computes the reference of the model (forward over P, whose tensors
    specs lists as (name, shape, decay, ...) in the engine's order) on one
    batch and writes the fixture: head (the magic and the model's header
    fields), the optimizer settings above, the batch, the parameters, logits,
    loss and gradients, and the losses of N_STEPS AdamW steps and the
    parameters after them. make_llama_fixture.py writes its fixture here too."""
    names = [s[0] for s in specs]
    params0 = flat(P[n] for n in names)
    logits, loss = forward(P, inputs, targets)
    loss.backward()
    grads = flat(P[n].grad for n in names)

    decay = [P[s[0]] for s in specs if s[2]]
    no_decay = [P[s[0]] for s in specs if not s[2]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS)
    step_losses, norms = [], []
    for _ in range(N_STEPS):
        opt.zero_grad(set_to_none=True)
        _, step_loss = forward(P, inputs, targets)
        step_loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(P.values()), GRAD_CLIP)))
        opt.step()
        step_losses.append(float(step_loss))
    # The fixture must exercise clipping, or the engine's clip path is untested.
    assert norms[0] > GRAD_CLIP, f"grad norm {norms[0]} does not exceed grad_clip {GRAD_CLIP}"
    params_after = flat(P[n] for n in names)

    out = bytearray(head)
    out += struct.pack("<6f", LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP)
    out += struct.pack("<i", N_STEPS)
    out += inputs.to(torch.int32).numpy().tobytes() + targets.to(torch.int32).numpy().tobytes()
    for t in (params0, logits.detach().reshape(-1), loss.detach().reshape(1), grads,
              torch.tensor(step_losses, dtype=torch.float64), params_after):
        out += t.to(torch.float32).numpy().astype("<f4").tobytes()
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {path}: {len(out)} bytes, {params0.numel()} params")
    print(f"loss {float(loss):.6f}, step losses {[round(s, 6) for s in step_losses]}")
    print(f"grad norms {[round(n, 4) for n in norms]} (clip {GRAD_CLIP})")


def main():
    gen = torch.Generator().manual_seed(SEED)
    P = init_params(gen)
    inputs = torch.randint(0, VOCAB, (B, T), generator=gen)
    targets = torch.randint(0, VOCAB, (B, T), generator=gen)
    if "--selftest" in sys.argv[1:]:
        selftest(forward, [n for n, _, _ in param_specs()], VOCAB, P, inputs, targets)
    head = b"AAFIXT01" + struct.pack("<8i", N_LAYER, N_HEAD, D_MODEL, D_FF, SEQ_LEN, VOCAB, B, T)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_tiny.fixture")
    write_fixture(path, head, forward, P, param_specs(), inputs, targets)


if __name__ == "__main__":
    main()
