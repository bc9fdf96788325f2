#!/usr/bin/python3
"""Builds tests/reference/generate_tiny.txt: the token ids that greedy
decoding picks, in float64 PyTorch, on the fixture models, against which
tests/test_generate.c checks the engine's KV-cache decoder.

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 tests/reference/make_generate.py

The models are the fixtures' own parameters (gpt_tiny.fixture, read through
make_fixture.py's layout and forward; llama_tiny.fixture through
make_llama_fixture.py's, when it is there), so no weights are duplicated
here. Each line carries the FNV-1a 64 of the fixture it was computed from,
so that a regenerated fixture makes the C test fail saying this script must
be run again, rather than compare against ids of other weights.
Each step recomputes the whole prefix (no cache: the reference is the plain
model) and takes the argmax of the last position's logits. The script
refuses to write a reference whose decisions are fragile: at every step the
best logit must beat the runner-up by MARGIN, far above the float32
rounding of the engine (~1e-6 at these sizes), so a float32 decoder that is
right cannot pick another token.

Output format, one line per model (# lines are comments):
    <fixture> fnv1a <16 hex digits> prompt <ids...> greedy <ids...>
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
LLAMA_PROMPT = [12]  # a prompt whose greedy path varies
LLAMA_NEW = 7


def fnv1a(data):
    """FNV-1a 64, as common/aa.h's aa_fnv1a."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def read_params(buf, pos, specs):
    """float32 parameters at buf[pos:] in specs' order, as float64 tensors."""
    params = {}
    for spec in specs:
        name, shape = spec[0], spec[1]
        n = 1
        for d in shape:
            n *= d
        params[name] = torch.tensor(struct.unpack_from(f"<{n}f", buf, pos), dtype=torch.float64).reshape(shape)
        pos += 4 * n
    return params


def read_gpt(path):
    """The gpt fixture's parameters by name, and its checksum."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == b"AAFIXT01", "not a gpt fixture"
    dims = struct.unpack_from("<8i", buf, 8)
    assert dims[:6] == (gpt.N_LAYER, gpt.N_HEAD, gpt.D_MODEL, gpt.D_FF, gpt.SEQ_LEN, gpt.VOCAB), dims
    pos = 8 + 32 + 24 + 4 + 2 * 4 * dims[6] * dims[7]
    return read_params(buf, pos, gpt.param_specs()), fnv1a(buf)


def read_llama(path, llama):
    """The llama fixture's parameters by name, and its checksum."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:8] == b"AAFIXL01", "not a llama fixture"
    dims = struct.unpack_from("<8i", buf, 8)
    assert dims[:6] == (llama.N_LAYER, llama.N_HEAD, llama.D_MODEL, llama.D_FF, llama.SEQ_LEN, llama.VOCAB), dims
    pos = 8 + 32 + 12 + 24 + 4 + 2 * 4 * dims[6] * dims[7]
    return read_params(buf, pos, llama.param_specs()), fnv1a(buf)


def greedy(logits_of, prompt, n_new):
    """Greedy ids after prompt, and the smallest top-1 margin seen."""
    seq, worst = list(prompt), float("inf")
    for _ in range(n_new):
        row = logits_of(seq)
        top2 = torch.topk(row, 2).values
        worst = min(worst, float(top2[0] - top2[1]))
        seq.append(int(torch.argmax(row)))
    return seq[len(prompt):], worst


def line(name, digest, prompt, ids):
    return f"{name} fnv1a {digest} prompt {' '.join(map(str, prompt))} greedy {' '.join(map(str, ids))}"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    lines = ["# greedy decoding in float64 PyTorch (tests/reference/make_generate.py)"]
    P, digest = read_gpt(os.path.join(here, "gpt_tiny.fixture"))
    with torch.no_grad():
        ids, margin = greedy(lambda s: gpt.forward(P, torch.tensor([s]))[0][0, -1], GPT_PROMPT, GPT_NEW)
    assert margin > MARGIN, f"gpt_tiny: top-1 margin {margin} <= {MARGIN}: pick another prompt"
    print(f"gpt_tiny: prompt {GPT_PROMPT} -> {ids} (smallest top-1 margin {margin:.4g})")
    lines.append(line("gpt_tiny.fixture", digest, GPT_PROMPT, ids))
    llama_path = os.path.join(here, "llama_tiny.fixture")
    if os.path.exists(llama_path):
        import make_llama_fixture as llama
        P, digest = read_llama(llama_path, llama)
        with torch.no_grad():
            ids, margin = greedy(lambda s: llama.forward(P, torch.tensor([s]))[0][0, -1], LLAMA_PROMPT, LLAMA_NEW)
        assert margin > MARGIN, f"llama_tiny: top-1 margin {margin} <= {MARGIN}: pick another prompt"
        print(f"llama_tiny: prompt {LLAMA_PROMPT} -> {ids} (smallest top-1 margin {margin:.4g})")
        lines.append(line("llama_tiny.fixture", digest, LLAMA_PROMPT, ids))
    else:
        print("llama_tiny.fixture: not there, no llama line")
    path = os.path.join(here, "generate_tiny.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
