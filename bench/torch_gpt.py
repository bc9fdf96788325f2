#!/usr/bin/python3
"""PyTorch peer for the autoaccel training benchmark.

Trains the same model that `autoaccel train` trains, for either family of
docs/model-spec.md: gpt2 (pre-LN blocks, learned positions, causal
multi-head attention, GELU tanh, output head tied to the token embedding) or
llama (RMSNorm, rotate_half RoPE, grouped-query attention, SwiGLU, no
biases, untied head; the math of tests/reference/make_llama_fixture.py),
both with mean cross-entropy, with the same AdamW
settings, the same global-norm clipping and the same learning-rate schedule,
in fp32, from the same model spec and the same token shard. It times every
optimizer step and prints one JSON object on stdout whose "tokens_per_s" has
the same definition as `autoaccel train --summary-json`: tokens per optimizer
step divided by the median step time, the first step excluded.

The model is plain eager nanoGPT: PyTorch 1.13 has neither
F.scaled_dot_product_attention nor torch.compile, so attention is the
standard masked softmax(QK^T)V. Run it with /usr/bin/python3 (the Debian
python3-torch build). Debian's torch does its GEMMs in the system OpenBLAS;
bench/run.sh points LD_LIBRARY_PATH at the OpenBLAS build the engine links,
so that both contenders multiply matrices with the same library.

usage: torch_gpt.py MODEL.json [--threads N] [--steps N] [--seed S]
"""

import argparse
import json
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec", help="model spec JSON (same file autoaccel train reads)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--steps", type=int, default=0, help="optimizer steps (default: the spec's train.steps)")
    p.add_argument("--seed", type=int, default=None, help="init seed (default: the spec's train.seed)")
    return p.parse_args()


ARGS = parse_args()
# Thread counts must be fixed before torch (and the OpenBLAS it calls for
# sgemm) start their pools: torch.set_num_threads covers ATen's OpenMP pool,
# the environment covers OpenBLAS's own pthread pool.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(ARGS.threads)


def load_openblas():
    """Loads the OpenBLAS that torch is about to use (the dynamic loader
    resolves the same soname the same way: LD_LIBRARY_PATH, then the
    alternatives link) and returns its path and whether it is an OpenMP
    build (it then brings libgomp in with it)."""
    import ctypes

    ctypes.CDLL("libopenblas.so.0")
    with open("/proc/self/maps") as f:
        maps = [line.split()[-1] for line in f if "/" in line]
    path = next((m for m in maps if "libopenblas" in m), "?")
    return path, any("libgomp" in m for m in maps)


BLAS_PATH, BLAS_OPENMP = load_openblas()
# With the pthread build, ATen's OpenMP workers and OpenBLAS's own threads
# take turns on the same cores, and libgomp's default spin-wait makes the
# idle OpenMP workers steal the cores the sgemm threads need (on 2 cores, 2
# threads ran slower than 1). Passive waiting is then PyTorch's best simple
# configuration. With the OpenMP build both share one pool and the default
# is best. An explicit OMP_WAIT_POLICY always wins. libgomp reads it when it
# is loaded, which for the pthread build has not happened yet.
if not BLAS_OPENMP:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SHARD_MAGIC = b"AATOKENS"
SHARD_HEADER_BYTES = 64


def load_spec(path):
    """Reads the model spec with the defaults of common/spec.h."""
    with open(path) as f:
        js = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    m = js["model"]
    t = js.get("train", {})
    lr = float(t.get("lr", 3e-4))
    steps = int(t.get("steps", 1))
    train = {
        "global_batch": int(t["global_batch"]),
        "steps": steps,
        "lr": lr,
        "min_lr": float(t.get("min_lr", lr / 10)),
        "warmup_steps": int(t.get("warmup_steps", 0)),
        "schedule": t.get("schedule", "cosine"),
        "weight_decay": float(t.get("weight_decay", 0.1)),
        "beta1": float(t.get("beta1", 0.9)),
        "beta2": float(t.get("beta2", 0.95)),
        "eps": float(t.get("eps", 1e-8)),
        "grad_clip": float(t.get("grad_clip", 1.0)),
        "seed": int(t.get("seed", 1234)),
    }
    arch = {k: int(m[k]) for k in ("n_layer", "n_head", "d_model", "seq_len", "vocab_size")}
    arch["family"] = m.get("family", "gpt2")
    if arch["family"] not in ("gpt2", "llama"):
        sys.exit(f"torch_gpt.py: {path}: unknown model.family {arch['family']!r}")
    arch["d_ff"] = int(m.get("d_ff", 4 * arch["d_model"]))
    arch["n_kv_head"] = int(m.get("n_kv_head", arch["n_head"]))
    arch["rope_theta"] = float(m.get("rope_theta", 10000.0))
    arch["norm_eps"] = float(m.get("norm_eps", 1e-5))
    data = os.path.join(base, js["data"]["train"])
    return js.get("name", os.path.splitext(os.path.basename(path))[0]), arch, train, data


def read_shard(path):
    """Reads an autoaccel shard: 64-byte header ("AATOKENS", u32 version,
    u32 token_bytes, u32 vocab, u32 reserved, u64 n_tokens, u64 checksum)
    then the ids. The checksum is not verified: the engine does that."""
    with open(path, "rb") as f:
        hdr = f.read(SHARD_HEADER_BYTES)
    if len(hdr) != SHARD_HEADER_BYTES or hdr[:8] != SHARD_MAGIC:
        sys.exit(f"torch_gpt.py: {path}: not an autoaccel shard")
    version, token_bytes, vocab, _ = np.frombuffer(hdr, dtype="<u4", count=4, offset=8)
    (n_tokens,) = np.frombuffer(hdr, dtype="<u8", count=1, offset=24)
    if version != 1 or token_bytes not in (2, 4):
        sys.exit(f"torch_gpt.py: {path}: unsupported version {version} / token width {token_bytes}")
    dtype = "<u2" if token_bytes == 2 else "<u4"
    ids = np.fromfile(path, dtype=dtype, offset=SHARD_HEADER_BYTES)
    if ids.size != n_tokens:
        sys.exit(f"torch_gpt.py: {path}: header says {n_tokens} tokens, file holds {ids.size}")
    return torch.from_numpy(ids.astype(np.int64)), int(vocab)


def lr_at(t, step):
    """aa_lr_at: linear warm-up, then cosine to min_lr (or constant)."""
    if step < t["warmup_steps"]:
        return t["lr"] * (step + 1) / t["warmup_steps"]
    if t["schedule"] == "constant":
        return t["lr"]
    span = max(1, t["steps"] - t["warmup_steps"])
    frac = min(1.0, (step - t["warmup_steps"]) / span)
    return t["min_lr"] + 0.5 * (t["lr"] - t["min_lr"]) * (1 + math.cos(math.pi * frac))


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, F_ = a["d_model"], a["d_ff"]
        self.n_head = a["n_head"]
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, F_)
        self.fcproj = nn.Linear(F_, C)
        T = a["seq_len"]
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B,NH,T,hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B,NH,T,T)
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte = nn.Embedding(a["vocab_size"], a["d_model"])
        self.wpe = nn.Embedding(a["seq_len"], a["d_model"])
        self.h = nn.ModuleList(Block(a) for _ in range(a["n_layer"]))
        self.lnf = nn.LayerNorm(a["d_model"])
        # aa_gpt_init_weights: N(0, 0.02); residual projections scaled by
        # 1/sqrt(2 L); biases 0; LayerNorm weights 1 (the nn default).
        resid_std = 0.02 / math.sqrt(2 * a["n_layer"])
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = resid_std if name.endswith(("proj.weight", "fcproj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.lnf(x)
        logits = x @ self.wte.weight.t()  # tied head, (B,T,V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, as Hugging Face's LlamaRMSNorm (in
    fp32 throughout, so without its up-cast)."""

    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(nn.Module):
    """One llama block as Hugging Face's LlamaDecoderLayer computes it: separate
    q/k/v/o and gate/up/down projections without biases."""

    def __init__(self, a):
        super().__init__()
        C, F_ = a["d_model"], a["d_ff"]
        self.n_head, self.n_kv = a["n_head"], a["n_kv_head"]
        self.hs = C // self.n_head
        self.ln1 = RMSNorm(C, a["norm_eps"])
        self.q = nn.Linear(C, self.n_head * self.hs, bias=False)
        self.k = nn.Linear(C, self.n_kv * self.hs, bias=False)
        self.v = nn.Linear(C, self.n_kv * self.hs, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.ln2 = RMSNorm(C, a["norm_eps"])
        self.gate = nn.Linear(C, F_, bias=False)
        self.up = nn.Linear(C, F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def attn(self, x, cos, sin, mask):
        B, T, C = x.shape
        hs, half = self.hs, self.hs // 2
        q = self.q(x).view(B, T, self.n_head, hs).transpose(1, 2)  # (B,NH,T,hs)
        k = self.k(x).view(B, T, self.n_kv, hs).transpose(1, 2)  # (B,NKV,T,hs)
        v = self.v(x).view(B, T, self.n_kv, hs).transpose(1, 2)

        def rope(t):  # rotate_half: x[i] pairs with x[i + hs/2]
            t1, t2 = t[..., :half], t[..., half:]
            return t * cos + torch.cat((-t2, t1), dim=-1) * sin

        q, k = rope(q), rope(k)
        group = self.n_head // self.n_kv
        if group > 1:  # query head h reads key/value head h // group
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B,NH,T,T)
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.ln1(x), cos, sin, mask)
        n = self.ln2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, T = a["d_model"], a["seq_len"]
        hs = C // a["n_head"]
        if hs % 2:
            sys.exit(f"torch_gpt.py: llama head size {hs} must be even")
        self.wte = nn.Embedding(a["vocab_size"], C)
        self.h = nn.ModuleList(LlamaBlock(a) for _ in range(a["n_layer"]))
        self.lnf = RMSNorm(C, a["norm_eps"])
        self.head = nn.Linear(C, a["vocab_size"], bias=False)
        # RoPE angles pos * theta^(-2i/hs), computed in float64 as the
        # reference does, then kept as fp32 (T,hs) tables.
        inv = a["rope_theta"] ** (-2.0 * torch.arange(hs // 2, dtype=torch.float64) / hs)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cat((ang.cos(), ang.cos()), -1).float())
        self.register_buffer("sin", torch.cat((ang.sin(), ang.sin()), -1).float())
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T))
        # aa_gpt_init_weights: every matrix N(0, 0.02) (embedding and head
        # too), proj and down N(0, 0.02/sqrt(2 L)); RMSNorm gains 1.
        resid_std = 0.02 / math.sqrt(2 * a["n_layer"])
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = resid_std if name.endswith(("proj.weight", "down.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:, :, :T, :T]
        for block in self.h:
            x = block(x, cos, sin, mask)
        logits = self.head(self.lnf(x))  # (B,T,V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    name, arch, tcfg, data_path = load_spec(ARGS.spec)
    steps = ARGS.steps or tcfg["steps"]
    seed = ARGS.seed if ARGS.seed is not None else tcfg["seed"]
    torch.set_num_threads(ARGS.threads)
    torch.manual_seed(seed)

    tokens, vocab = read_shard(data_path)
    if vocab > arch["vocab_size"]:
        sys.exit(f"torch_gpt.py: shard vocab {vocab} > model vocab {arch['vocab_size']}")
    B, T = tcfg["global_batch"], arch["seq_len"]
    if tokens.numel() < T + 1:
        sys.exit(f"torch_gpt.py: shard holds {tokens.numel()} tokens, need at least {T + 1}")

    model = Llama(arch) if arch["family"] == "llama" else GPT(arch)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    # foreach=True is the multi-tensor AdamW: the fastest CPU variant 1.13 has
    # (fused AdamW is CUDA-only).
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": tcfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=tcfg["lr"],
        betas=(tcfg["beta1"], tcfg["beta2"]),
        eps=tcfg["eps"],
        foreach=True,
    )

    # Same loader shape as aa_loader: B windows of T+1 tokens taken back to
    # back from a cursor that wraps to 0 when fewer than T+1 remain.
    pos = 0
    step_ms = []
    loss_val = first_loss = float("nan")
    model.train()
    for step in range(steps):
        t0 = time.perf_counter()
        rows = []
        for _ in range(B):
            if pos + T + 1 > tokens.numel():
                pos = 0
            rows.append(tokens[pos : pos + T + 1])
            pos += T + 1
        batch = torch.stack(rows)
        x, y = batch[:, :T].contiguous(), batch[:, 1:].contiguous()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if tcfg["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg["grad_clip"])
        lr = lr_at(tcfg, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        loss_val = loss.item()
        if step == 0:
            first_loss = loss_val
        step_ms.append((time.perf_counter() - t0) * 1e3)

    timed = step_ms[1:] if len(step_ms) > 1 else step_ms
    med = float(np.median(timed))
    print(
        json.dumps(
            {
                "impl": "torch",
                "family": arch["family"],
                "torch_version": torch.__version__,
                "name": name,
                "tokens_per_s": B * T / (med / 1e3),
                "step_ms_median": med,
                "step_ms": [round(v, 3) for v in step_ms],
                "steps": steps,
                "params": n_params,
                "threads": ARGS.threads,
                "batch": B,
                "seq_len": T,
                "first_loss": first_loss,
                "final_loss": loss_val,
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
                "openblas": BLAS_PATH,
            }
        )
    )


if __name__ == "__main__":
    main()
