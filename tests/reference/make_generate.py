#!/usr/bin/python3
"""Builds tests/reference/generate_tiny.txt: the token ids that greedy
decoding picks, in float64 PyTorch, on the fixture models, against which
tests/test_generate.c checks the engine's KV-cache decoder.

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_generate.py

The models are the fixtures' own parameters (gpt_tiny.fixture, read through
make_fixture.py's layout and forward), so no weights are duplicated here.
Each step recomputes the whole prefix (no cache: the reference is the plain
model) and takes the argmax of the last position's logits. The script
refuses to write a reference whose decisions are fragile: at every step the
best logit must beat the runner-up by MARGIN, far above the float32
rounding of the engine (~1e-6 at these sizes), so a float32 decoder that is
right cannot pick another token.

Output format, one line per model (# lines are comments):
    <fixture> prompt <ids...> greedy <ids...>
"""
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixture as gpt  # noqa: E402

MARGIN = 1e-3
GPT_PROMPT = [3, 14, 7]
GPT_NEW = 5  # prompt + new = seq_len 8


def read_gpt_params(path):
    """The fixture's float32 parameters as float64 tensors by name."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == b"AAFIXT01", "not a gpt fixture"
    dims = struct.unpack_from("<8i", buf, 8)
    assert dims[:6] == (gpt.N_LAYER, gpt.N_HEAD, gpt.D_MODEL, gpt.D_FF, gpt.SEQ_LEN, gpt.VOCAB), dims
    bsz, t = dims[6], dims[7]
    pos = 8 + 32 + 24 + 4 + 2 * 4 * bsz * t
    params = {}
    for name, shape, _ in gpt.param_specs():
        n = 1
        for s in shape:
            n *= s
        vals = struct.unpack_from(f"<{n}f", buf, pos)
        pos += 4 * n
        params[name] = torch.tensor(vals, dtype=torch.float64).reshape(shape)
    return params


def greedy(logits_of, prompt, n_new):
    """Greedy ids after prompt, and the smallest top-1 margin seen."""
    seq, worst = list(prompt), float("inf")
    for _ in range(n_new):
        row = logits_of(seq)
        top2 = torch.topk(row, 2).values
        worst = min(worst, float(top2[0] - top2[1]))
        seq.append(int(torch.argmax(row)))
    return seq[len(prompt):], worst


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    lines = ["# greedy decoding in float64 PyTorch (tests/reference/make_generate.py)"]
    P = read_gpt_params(os.path.join(here, "gpt_tiny.fixture"))
    with torch.no_grad():
        ids, margin = greedy(lambda s: gpt.forward(P, torch.tensor([s]))[0][0, -1], GPT_PROMPT, GPT_NEW)
    assert margin > MARGIN, f"gpt_tiny: top-1 margin {margin} <= {MARGIN}: pick another prompt"
    print(f"gpt_tiny: prompt {GPT_PROMPT} -> {ids} (smallest top-1 margin {margin:.4g})")
    lines.append("gpt_tiny.fixture prompt " + " ".join(map(str, GPT_PROMPT)) + " greedy " + " ".join(map(str, ids)))
    path = os.path.join(here, "generate_tiny.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
