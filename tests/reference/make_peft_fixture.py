#!/usr/bin/python3
"""Builds tests/reference/peft_tiny/ (a Hugging Face PEFT adapter directory,
written by hand: no peft package) and tests/reference/peft_tiny.fixture (the
logits PyTorch computes with it), for tests/test_lora_peft.c.

The base is llama_tiny.safetensors (make_llama_fixture.py: its seed, its
weights). The adapters are LoRA on five of Llama's seven linear layers of
every block (q_proj, v_proj, o_proj, gate_proj, down_proj), r 3, lora_alpha
12, stored as PEFT's save_pretrained names them for a LlamaForCausalLM:
    base_model.model.model.layers.<i>.self_attn.q_proj.lora_A.weight  (r, in)
    base_model.model.model.layers.<i>.self_attn.q_proj.lora_B.weight  (out, r)
in BF16 (as a bf16 fine-tune saves them), with an adapter_config.json as
PEFT writes it. A is Kaiming-uniform as PEFT draws it; B is 0.2 N(0, 1)
rather than PEFT's zeros, so that the adapters change the logits. The
logits are computed in float64 as PEFT's LoraLayer does (no dropout):
    y = W x + (alpha / r) B (A x)
from the BF16 values widened (so the C engine, which widens them exactly,
sees the same adapters), on make_llama_fixture.py's inputs.

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_peft_fixture.py

Fixture format (little-endian, no padding):
    char[8] "AAFIXP01"
    int32   n_layer, n_head, d_model, d_ff, seq_len, vocab, B, T
    int32   n_kv_head
    float32 rope_theta, norm_eps
    int32   r
    float32 alpha
    int32   targets                  mask of spec.h aa_lora_target_t bits
    int32   inputs[B*T]
    float32 logits[B*T*vocab]        with the adapters
    float32 base_logits[B*T*vocab]   without them
"""
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_llama_fixture as ll  # noqa: E402 (the base)
import make_lora_fixture as lf  # noqa: E402 (the llama forward with adapters)
import make_weights  # noqa: E402 (the safetensors writer)

R, ALPHA = 3, 12.0
# spec.h's aa_lora_target_t bits of llama's targets, and their PEFT modules.
TARGETS = {"q": (0, "self_attn.q_proj"), "v": (2, "self_attn.v_proj"), "o": (3, "self_attn.o_proj"),
           "gate": (4, "mlp.gate_proj"), "down": (6, "mlp.down_proj")}
BASE_OF = {"q": "q.w", "k": "k.w", "v": "v.w", "o": "proj.w", "gate": "gate.w", "up": "up.w", "down": "down.w"}
SEED = 20240605


def shapes():
    C, F_, KV = ll.D_MODEL, ll.D_FF, ll.N_KV_HEAD * ll.HS
    return {"q": (C, C), "v": (C, KV), "o": (C, C), "gate": (C, F_), "down": (F_, C)}


def init_adapters(gen):
    """{(layer, target): (A, B)}, float64 holding bf16 values."""
    L = {}
    for l in range(ll.N_LAYER):
        for t in TARGETS:
            i, o = shapes()[t]
            A = (2 * torch.rand((R, i), generator=gen, dtype=torch.float64) - 1) / math.sqrt(i)
            B = 0.2 * torch.randn((o, R), generator=gen, dtype=torch.float64)
            L[l, t] = tuple(x.to(torch.bfloat16).to(torch.float64) for x in (A, B))
    return L


def forward(P, L, inputs):
    """make_llama_fixture.forward with the adapted layers' LoRA update."""

    def lin(l, t, x):
        y = x @ P[f"h{l}.{BASE_OF[t]}"].T
        if (l, t) in L:
            A, B = L[l, t]
            y = y + (ALPHA / R) * ((x @ A.T) @ B.T)
        return y

    return lf.llama_forward(P, lin, inputs)


def peft_config():
    """adapter_config.json as PEFT 0.10's save_pretrained writes it."""
    return {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "llama_tiny", "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
            "layer_replication": None, "layers_pattern": None, "layers_to_transform": None,
            "loftq_config": {}, "lora_alpha": int(ALPHA), "lora_dropout": 0.05, "megatron_config": None,
            "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA", "r": R,
            "rank_pattern": {}, "revision": None,
            "target_modules": sorted(m.split(".")[1] for _, m in TARGETS.values()), "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": False}


def main():
    gen = torch.Generator().manual_seed(ll.SEED)
    P = {k: v.detach().to(torch.float64) for k, v in ll.init_params(gen).items()}
    inputs = torch.randint(0, ll.VOCAB, (ll.B, ll.T), generator=gen)
    L = init_adapters(torch.Generator().manual_seed(SEED))
    logits = forward(P, L, inputs)
    base_logits = forward(P, {}, inputs)

    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = os.path.join(here, "peft_tiny")
    os.makedirs(out_dir, exist_ok=True)
    tensors = []
    for (l, t), (A, B) in L.items():
        for ab, x in (("A", A), ("B", B)):
            name = f"base_model.model.model.layers.{l}.{TARGETS[t][1]}.lora_{ab}.weight"
            tensors.append((name, "BF16", tuple(x.shape), make_weights.raw(x, "BF16")))
    make_weights.write_safetensors(os.path.join(out_dir, "adapter_model.safetensors"), sorted(tensors))
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(peft_config(), f, indent=2, sort_keys=True)
        f.write("\n")

    mask = sum(1 << b for b, _ in TARGETS.values())
    out = bytearray(b"AAFIXP01")
    out += struct.pack("<8i", ll.N_LAYER, ll.N_HEAD, ll.D_MODEL, ll.D_FF, ll.SEQ_LEN, ll.VOCAB, ll.B, ll.T)
    out += struct.pack("<i2f", ll.N_KV_HEAD, ll.ROPE_THETA, ll.NORM_EPS)
    out += struct.pack("<ifi", R, ALPHA, mask)
    out += inputs.to(torch.int32).numpy().astype("<i4").tobytes()
    for t in (logits, base_logits):
        out += t.reshape(-1).to(torch.float32).numpy().astype("<f4").tobytes()
    path = os.path.join(here, "peft_tiny.fixture")
    with open(path, "wb") as f:
        f.write(out)
    print(f"wrote {out_dir}/ ({len(tensors)} tensors) and {path}: {len(out)} bytes; the adapters move the "
          f"logits by up to {float((logits - base_logits).abs().max()):.4f}")


if __name__ == "__main__":
    main()
