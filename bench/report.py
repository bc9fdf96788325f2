#!/usr/bin/python3
"""Turns the results bench/run.sh collected into the benchmark table.

usage: report.py WORK NAME...
Reads WORK/specs/NAME.json, WORK/results/{aa,torch}-NAME-ROUND.json and
WORK/results/sgemm-ROUND.json; prints the table and writes
WORK/results/summary.json. Each figure is the best of the rounds (the least
disturbed one on a shared machine); per-round values follow the table.

Model FLOPs per token (README.md, "FLOP formula"):
    6 * N + 6 * L * C * T
N = parameters that take part in a matrix multiply's worth of work, i.e.
all parameters except the position table wpe (the tied wte counts: it is the
output head); the second term is causal attention (QK^T and AV over the
T/2 keys a query sees on average, forward + backward).
"""

import glob
import json
import os
import sys

# Issue 37's targets: autoaccel tok/s over PyTorch tok/s per model, and
# gpt-6l-512's step over its GEMMs timed alone (the GEMM floor); a model
# without one is reported without a verdict.
SPEED_TARGETS = {"tiny": 1.5, "gpt-6l-512": 1.3, "llama-6l-512": 1.4}
FLOOR_TARGETS = {"gpt-6l-512": 1.15}
FLOP_TARGET = 0.5  # model FLOP/s over square sgemm FLOP/s
NOISE_LIMIT_PCT = 10  # CPU share other processes may take before the run is flagged


def param_count(m):
    C, F, L, V, T = m["d_model"], m["d_ff"], m["n_layer"], m["vocab_size"], m["seq_len"]
    if m.get("family") == "llama":  # docs/model-spec.md: untied head, no biases, no position table
        K = m.get("n_kv_head", m["n_head"]) * (C // m["n_head"])
        return 2 * V * C + C + L * (2 * C + (C + 2 * K) * C + C * C + 3 * F * C)
    per_layer = 4 * C * C + 2 * C * F + 9 * C + F  # 2 LN, qkv, proj, fc, fcproj with biases
    return V * C + T * C + L * per_layer + 2 * C


def flops_per_token(m):
    """6 FLOPs per token per weight a GEMM multiplies by (not the lookup
    tables: gpt2's position table, llama's embedding, whose head is its own
    tensor), plus the attention's 6 L C T."""
    C, L, T, V = m["d_model"], m["n_layer"], m["seq_len"], m["vocab_size"]
    n = param_count(m) - (V * C if m.get("family") == "llama" else T * C)
    return 6 * n + 6 * L * C * T


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rounds(work, prefix):
    out = []
    for p in sorted(glob.glob(os.path.join(work, "results", prefix + "-*.json"))):
        js = load(p)
        if js is not None:
            out.append(js)
    return out


def fmt(v, spec="{:.0f}"):
    return "n/a" if v is None else spec.format(v)


def ratio(a, b):
    return a / b if a is not None and b else None


def main():
    work, names = sys.argv[1], sys.argv[2:]
    sg = [s for s in rounds(work, "sgemm") if "square_gflops" in s]
    peak = max((s["square_gflops"] for s in sg), default=None)
    rows, details = [], []
    for i, name in enumerate(names):
        spec = load(os.path.join(work, "specs", name + ".json"))
        m, B = spec["model"], spec["train"]["global_batch"]
        fpt = flops_per_token(m)
        aa = rounds(work, "aa-" + name)
        th = rounds(work, "torch-" + name)
        aa_tps = max((r["tokens_per_s"] for r in aa), default=None)
        th_tps = max((r["tokens_per_s"] for r in th), default=None)
        mixes = [s["gpt"][i] for s in sg if len(s.get("gpt", [])) > i]
        mix = max(mixes, key=lambda g: g["mix_gflops"], default=None)
        if aa and aa[0].get("params") not in (None, param_count(m)):
            details.append(f"note: {name}: autoaccel reports {aa[0]['params']} params, formula {param_count(m)}")
        row = {
            "model": name,
            "params": param_count(m),
            "batch": B,
            "seq_len": m["seq_len"],
            "flops_per_token": fpt,
            "aa_tokens_per_s": aa_tps,
            "torch_tokens_per_s": th_tps,
            "speed_ratio": ratio(aa_tps, th_tps),
            "aa_gflops": aa_tps * fpt * 1e-9 if aa_tps else None,
            "torch_gflops": th_tps * fpt * 1e-9 if th_tps else None,
            "sgemm_square_gflops": peak,
            "sgemm_mix_gflops": mix["mix_gflops"] if mix else None,
            "gemm_ms_per_step": mix["step_gemm_ms"] if mix else None,
            "aa_step_ms": min((r["step_ms_median"] for r in aa), default=None),
            "torch_step_ms": min((r["step_ms_median"] for r in th), default=None),
        }
        row["flop_ratio"] = ratio(row["aa_gflops"], peak)
        row["torch_flop_ratio"] = ratio(row["torch_gflops"], peak)
        rows.append(row)
        details.append(
            f"{name}: autoaccel tok/s per round {[round(r['tokens_per_s']) for r in aa]}, "
            f"torch {[round(r['tokens_per_s']) for r in th]}"
        )

    threads = next((r.get("threads") for n in names for r in rounds(work, "aa-" + n)), None)
    core = sg[0]["core"] if sg else "?"
    print(
        f"\nautoaccel train vs PyTorch {next((r.get('torch_version') for n in names for r in rounds(work, 'torch-' + n)), '?')}"
        f" (eager, OMP_WAIT_POLICY="
        f"{next((r.get('omp_wait_policy') for n in names for r in rounds(work, 'torch-' + n)), '?')}),"
        f" {threads} thread(s), OpenBLAS core {core}, best of {len(sg)} round(s)"
    )
    env = load(os.path.join(work, "results", "env.json")) or {}
    print(f"autoaccel {env.get('autoaccel', '?')} (tree {env.get('git', '?')}); "
          f"engine, sgemm probe and PyTorch use {env.get('openblas', '?')}")
    peer_blas = {r.get("openblas") for n in names for r in rounds(work, "torch-" + n)}
    if env.get("openblas") and peer_blas - {env["openblas"]}:
        print(f"WARNING: the PyTorch peer loaded {', '.join(sorted(map(str, peer_blas)))}")
    print()
    head = ["model", "params", "B x T", "aa tok/s", "torch tok/s", "aa/torch", "aa GFLOP/s", "torch GFLOP/s",
            "sgemm GFLOP/s", "aa/sgemm", "torch/sgemm"]
    table = [head]
    for r in rows:
        table.append([
            r["model"], f"{r['params'] / 1e6:.2f}M", f"{r['batch']}x{r['seq_len']}",
            fmt(r["aa_tokens_per_s"]), fmt(r["torch_tokens_per_s"]), fmt(r["speed_ratio"], "{:.2f}x"),
            fmt(r["aa_gflops"], "{:.1f}"), fmt(r["torch_gflops"], "{:.1f}"), fmt(r["sgemm_square_gflops"], "{:.1f}"),
            fmt(r["flop_ratio"], "{:.0%}"), fmt(r["torch_flop_ratio"], "{:.0%}"),
        ])
    print_table(table)

    print("\nwhere the step goes (GEMM ms = the step's 15 linear-layer GEMMs timed alone in bench_sgemm):\n")
    table = [["model", "MFLOP/token", "GEMM ms", "GEMM-mix GFLOP/s", "aa step ms", "torch step ms", "aa non-GEMM ms"]]
    for r in rows:
        non_gemm = r["aa_step_ms"] - r["gemm_ms_per_step"] if r["aa_step_ms"] and r["gemm_ms_per_step"] else None
        table.append([
            r["model"], f"{r['flops_per_token'] / 1e6:.2f}", fmt(r["gemm_ms_per_step"], "{:.1f}"),
            fmt(r["sgemm_mix_gflops"], "{:.1f}"), fmt(r["aa_step_ms"], "{:.1f}"), fmt(r["torch_step_ms"], "{:.1f}"),
            fmt(non_gemm, "{:.1f}"),
        ])
    print_table(table)

    print()
    for r in rows:
        sr, fr, st = r["speed_ratio"], r["flop_ratio"], SPEED_TARGETS.get(r["model"])
        speed = f" (want >= {st:.1f}x: {'met' if sr and sr >= st else 'not met'})" if st else ""
        line = (f"target {r['model']}: aa/torch {fmt(sr, '{:.2f}x')}{speed}, aa/sgemm {fmt(fr, '{:.0%}')} "
                f"(want >= {FLOP_TARGET:.0%}: {'met' if fr and fr >= FLOP_TARGET else 'not met'})")
        ft = FLOOR_TARGETS.get(r["model"])
        if ft and r["aa_step_ms"] and r["gemm_ms_per_step"]:
            floor = r["aa_step_ms"] / r["gemm_ms_per_step"]
            line += f", step/GEMM floor {floor:.3f}x (want <= {ft:.2f}x: {'met' if floor <= ft else 'not met'})"
        print(line)
    for d in details:
        print(d)
    try:
        with open(os.path.join(work, "results", "load.txt")) as f:
            print(f.read().strip())
    except OSError:
        pass
    noise = load(os.path.join(work, "results", "noise.json")) or {}
    if noise.get("foreign_cpu_pct", 0) > NOISE_LIMIT_PCT:
        print(
            f"WARNING: other processes took {noise['foreign_cpu_pct']:.0f}% of the CPUs while this ran; "
            "the figures are disturbed. Rerun on a quiet machine."
        )
    with open(os.path.join(work, "results", "summary.json"), "w") as f:
        json.dump({"rows": rows, "sgemm": sg, "noise": noise}, f, indent=1)


def print_table(table):
    widths = [max(len(str(row[c])) for row in table) for c in range(len(table[0]))]
    for i, row in enumerate(table):
        print("  ".join(str(v).ljust(w) if c == 0 else str(v).rjust(w) for c, (v, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
