#!/usr/bin/python3
"""Writes small GPT-2 checkpoints in foreign formats, with the values the
import must produce and PyTorch's logits, for tests/test_import.c and
tests/cli/test_import_cli.sh.

    /usr/bin/python3 tests/reference/make_weights.py --out DIR

Exits 3 with "skipped: ..." on stderr when torch cannot be imported (the
tests then skip with that reason). Everything is written by hand here:
safetensors is 8 bytes of little-endian header length, the JSON header
(padded with spaces to a multiple of 8) and the raw data; llm.c's format
follows karpathy/llm.c train_gpt2.c (gpt2_build_from_checkpoint,
fill_in_parameter_sizes).

Files in DIR (model: n_layer 2, n_head 2, d_model 16, d_ff 64, seq_len 8,
vocab 23; the weights are random and float32-representable):
    model.json               the model spec (data: train.bin, an llm.c token shard)
    train.bin                llm.c token shard (ids < 23) for a short training run
    f32.safetensors          F32, GPT-2 names without prefix, with the attention
                             buffers (attn.bias, attn.masked_bias) and a tied lm_head
    bf16.safetensors         BF16, every name under "transformer."
    f16.safetensors          F16
    sharded/model.safetensors.index.json + two shards (F32, "transformer." names)
    gpt2_f32.bin             llm.c version 3 (fp32), vocabulary padded to 32 rows
    gpt2_bf16.bin            llm.c version 5 (bf16)
    params_f32.bin, params_bf16.bin, params_f16.bin
                             what an import must give: float32, the engine's layout
                             (engine/model.h), values rounded by torch to the dtype
    logits.bin               int32 inputs (B,T) then float32 logits (B,T,V) of a
                             float64 forward written the way Hugging Face's GPT-2
                             computes (Conv1D: x @ W + b, tanh GELU, LayerNorm eps
                             1e-5, head tied to wte) from the F32 weights
"""
import json
import math
import os
import struct
import sys

try:
    import numpy  # noqa: F401 (Tensor.numpy needs it)
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the C and shell tests skip with this reason
    print(f"skipped: {e} (Debian's python3-torch and python3-numpy are needed)", file=sys.stderr)
    sys.exit(3)

L, NH, C, FF, T, V, VP = 2, 2, 16, 64, 8, 23, 32
B = 2
SEED = 20241124

BLOCK = [  # (HF suffix, shape in HF's layout, Conv1D: stored [in, out])
    ("ln_1.weight", (C,), False), ("ln_1.bias", (C,), False),
    ("attn.c_attn.weight", (C, 3 * C), True), ("attn.c_attn.bias", (3 * C,), False),
    ("attn.c_proj.weight", (C, C), True), ("attn.c_proj.bias", (C,), False),
    ("ln_2.weight", (C,), False), ("ln_2.bias", (C,), False),
    ("mlp.c_fc.weight", (C, FF), True), ("mlp.c_fc.bias", (FF,), False),
    ("mlp.c_proj.weight", (FF, C), True), ("mlp.c_proj.bias", (C,), False),
]


def hf_names():
    """(name, shape, conv1d) in the engine's order (engine/model.h)."""
    out = [("wte.weight", (V, C), False), ("wpe.weight", (T, C), False)]
    for l in range(L):
        out += [(f"h.{l}.{s}", shape, conv) for s, shape, conv in BLOCK]
    return out + [("ln_f.weight", (C,), False), ("ln_f.bias", (C,), False)]


def make_params(gen):
    """Float32 weights by name. Linear weights have std 0.15, so that at
    C=16 attention and GELU see GPT-2-small-sized inputs (as in
    make_fixture.py); LayerNorm gains and all biases are random."""
    p = {}
    for name, shape, conv in hf_names():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = 1 + 0.1 * torch.randn(shape, generator=gen)
        elif name in ("wte.weight", "wpe.weight"):
            t = 0.02 * torch.randn(shape, generator=gen)
        elif name.endswith(".weight"):
            t = 0.15 * torch.randn(shape, generator=gen)
        else:
            t = 0.1 * torch.randn(shape, generator=gen)
        p[name] = t.to(torch.float32)
    return p


def raw(t, dtype):
    """Little-endian bytes of t in dtype ("F32", "BF16", "F16")."""
    if dtype == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes), written in order."""
    header, data, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        data.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(data))


def st_entries(p, dtype, prefix="", extras=True):
    out = []
    for name, shape, _ in hf_names():
        out.append((prefix + name, dtype, shape, raw(p[name], dtype)))
        if extras and name.endswith("ln_1.weight"):
            l = name.split(".")[1]
            mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            out.append((f"{prefix}h.{l}.attn.bias", "F32", (1, 1, T, T), raw(mask, "F32")))
            out.append((f"{prefix}h.{l}.attn.masked_bias", "F32", (), raw(torch.tensor(-1e4), "F32")))
    if extras:
        out.append(("lm_head.weight", dtype, (V, C), raw(p["wte.weight"], dtype)))
    return out


def engine_layout(p, dtype):
    """Float32 bytes of the engine's flat buffer for weights rounded to dtype."""
    torch_dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[dtype]
    out = []
    for name, _, conv in hf_names():
        t = p[name].to(torch_dtype).to(torch.float32)
        out.append((t.t() if conv else t).contiguous().numpy().astype("<f4").tobytes())
    return b"".join(out)


def write_llmc(path, p, version, gen):
    """llm.c's checkpoint: 256 int32 of header, then its 16 arrays, each
    over all blocks, weights (out, in). The padding rows of wte are random,
    so an import that kept them would be caught."""
    hdr = [0] * 256
    hdr[:8] = [20240326, version, T, V, L, NH, C, VP]
    pad = 0.5 * torch.randn((VP - V, C), generator=gen)
    arrays = [torch.cat([p["wte.weight"], pad]), p["wpe.weight"]]
    for s, _, conv in BLOCK:
        arrays.append(torch.stack([p[f"h.{l}.{s}"].t() if conv else p[f"h.{l}.{s}"] for l in range(L)]))
    arrays += [p["ln_f.weight"], p["ln_f.bias"]]
    dtype = "F32" if version == 3 else "BF16"
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        for a in arrays:
            f.write(raw(a.contiguous(), dtype))


def forward(p, idx):
    """Hugging Face GPT-2's forward in float64, from the HF-layout weights."""
    q = {k: v.to(torch.float64) for k, v in p.items()}
    Bn, Tn = idx.shape
    hs = C // NH
    x = q["wte.weight"][idx] + q["wpe.weight"][:Tn]
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    for l in range(L):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), q[h + "ln_1.weight"], q[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ q[h + "attn.c_attn.weight"] + q[h + "attn.c_attn.bias"]
        qq, kk, vv = (t.reshape(Bn, Tn, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ vv).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ q[h + "attn.c_proj.weight"] + q[h + "attn.c_proj.bias"]
        a = F.layer_norm(x, (C,), q[h + "ln_2.weight"], q[h + "ln_2.bias"], eps=1e-5)
        a = F.gelu(a @ q[h + "mlp.c_fc.weight"] + q[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + a @ q[h + "mlp.c_proj.weight"] + q[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), q["ln_f.weight"], q["ln_f.bias"], eps=1e-5)
    return x @ q["wte.weight"].t()


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "--out":
        print("usage: make_weights.py --out DIR", file=sys.stderr)
        return 2
    out = sys.argv[2]
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
    gen = torch.Generator().manual_seed(SEED)
    p = make_params(gen)

    spec = {"name": "import-tiny",
            "model": {"family": "gpt2", "n_layer": L, "n_head": NH, "d_model": C, "d_ff": FF,
                      "seq_len": T, "vocab_size": V},
            "train": {"global_batch": 4, "steps": 2, "lr": 1e-3, "eval_every": 0},
            "data": {"train": "train.bin"}}
    with open(os.path.join(out, "model.json"), "w") as f:
        json.dump(spec, f, indent=1)
    tokens = torch.randint(0, V, (4096,), generator=gen)
    with open(os.path.join(out, "train.bin"), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(tokens.numpy().astype("<u2").tobytes())

    write_safetensors(os.path.join(out, "f32.safetensors"), st_entries(p, "F32"))
    write_safetensors(os.path.join(out, "bf16.safetensors"), st_entries(p, "BF16", "transformer.", False))
    write_safetensors(os.path.join(out, "f16.safetensors"), st_entries(p, "F16", "", False))
    entries = st_entries(p, "F32", "transformer.", False)
    first = [e for e in entries if not e[0].startswith("transformer.h.1.") and not e[0].startswith("transformer.ln_f")]
    second = [e for e in entries if e not in first]
    files = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
    weight_map = {}
    for fn, es in files.items():
        write_safetensors(os.path.join(out, "sharded", fn), es)
        weight_map.update({e[0]: fn for e in es})
    total = sum(len(e[3]) for e in entries)
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)

    write_llmc(os.path.join(out, "gpt2_f32.bin"), p, 3, gen)
    write_llmc(os.path.join(out, "gpt2_bf16.bin"), p, 5, gen)
    for d in ("F32", "BF16", "F16"):
        with open(os.path.join(out, f"params_{d.lower()}.bin"), "wb") as f:
            f.write(engine_layout(p, d))

    idx = torch.randint(0, V, (B, T), generator=gen)
    logits = forward(p, idx)
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(idx.numpy().astype("<i4").tobytes())
        f.write(logits.to(torch.float32).numpy().astype("<f4").tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
