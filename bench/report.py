#!/usr/bin/python3
"""Turns the results bench/run.sh collected into the benchmark table.

usage: report.py WORK NAME...
Reads WORK/specs/NAME.json and, per round R, WORK/results/aa-NAME-R.json,
torch-NAME-R.json and sgemm-NAME-R.json (the sgemm probe run next to that
round's training runs); prints the tables and writes
WORK/results/summary.json.

Every ratio (aa/torch, step / GEMM floor, aa/sgemm) is computed within one
round, from figures measured minutes apart, and the table shows the median
of the rounds; the per-round values, their best and how far the rounds
differed follow, and the targets are judged on the median. (Taking each
figure's best round separately, as before, could divide one round's step by
another round's probe.)

Model FLOPs per token (README.md, "FLOP formula"):
    6 * N + 6 * L * C * T
N = parameters that take part in a matrix multiply's worth of work, i.e.
all parameters except the lookup tables (gpt2's position table wpe; llama's
embedding, whose head is its own tensor; gpt2's tied wte counts: it is the
output head); the second term is causal attention (QK^T and AV over the
T/2 keys a query sees on average, forward + backward).
"""

import glob
import json
import os
import re
import statistics
import sys

# Issue 37's targets: autoaccel tok/s over PyTorch tok/s per model, and
# gpt-6l-512's step over its GEMMs timed alone (the GEMM floor); a model
# without one is reported without a verdict.
SPEED_TARGETS = {"tiny": 1.5, "gpt-6l-512": 1.3, "llama-6l-512": 1.4}
FLOOR_TARGETS = {"gpt-6l-512": 1.15}
FLOP_TARGET = 0.5  # model FLOP/s over square sgemm FLOP/s
NOISE_LIMIT_PCT = 10  # CPU share other processes may take before the run is flagged


def is_llama(m):
    return m.get("family") == "llama"


def kv_width(m):
    return m.get("n_kv_head", m["n_head"]) * (m["d_model"] // m["n_head"])


def param_count(m):
    C, F, L, V, T = m["d_model"], m["d_ff"], m["n_layer"], m["vocab_size"], m["seq_len"]
    if is_llama(m):  # docs/model-spec.md: untied head, no biases but qkv_bias's, no position table
        QKV = C + 2 * kv_width(m)
        return 2 * V * C + C + L * (2 * C + QKV * (C + (1 if m.get("qkv_bias") else 0)) + C * C + 3 * F * C)
    per_layer = 4 * C * C + 2 * C * F + 9 * C + F  # 2 LN, qkv, proj, fc, fcproj with biases
    return V * C + T * C + L * per_layer + 2 * C


def matrix_weights(m):
    """The weights of the linear layers' matrices alone, the ones bench_sgemm
    multiplies by (engine/model.c): gpt2 qkv 3C x C, proj C x C, fc F x C,
    fcproj C x F and the tied head V x C; llama q|k|v (C + 2K) x C, o C x C,
    gate|up 2F x C, down C x F and the head V x C."""
    C, F, L, V = m["d_model"], m["d_ff"], m["n_layer"], m["vocab_size"]
    if is_llama(m):
        return V * C + L * ((C + 2 * kv_width(m)) * C + C * C + 3 * F * C)
    return V * C + L * (4 * C * C + 2 * C * F)


def flops_per_token(m):
    """6 FLOPs per token per weight a GEMM multiplies by (not the lookup
    tables: gpt2's position table, llama's embedding, whose head is its own
    tensor), plus the attention's 6 L C T."""
    C, L, T, V = m["d_model"], m["n_layer"], m["seq_len"], m["vocab_size"]
    n = param_count(m) - (V * C if is_llama(m) else T * C)
    return 6 * n + 6 * L * C * T


def probe_key(m, rows):
    """What bench_sgemm echoes for this model (run.sh's --gpt / --llama), or
    None for a model the probe does not know (a mixture of experts)."""
    if m.get("moe"):
        return None
    key = {"family": "llama" if is_llama(m) else "gpt2", "rows": rows, "C": m["d_model"], "F": m["d_ff"],
           "V": m["vocab_size"], "L": m["n_layer"]}
    if is_llama(m):
        key.update(NH=m["n_head"], NKV=m.get("n_kv_head", m["n_head"]), qkv_bias=1 if m.get("qkv_bias") else 0)
    return key


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def by_round(work, prefix):
    """{round: JSON} of WORK/results/PREFIX-ROUND.json (round a number)."""
    out = {}
    pat = re.compile(re.escape(prefix) + r"-([0-9]+)\.json$")
    for p in glob.glob(os.path.join(glob.escape(os.path.join(work, "results")), prefix + "-*.json")):
        mt = pat.match(os.path.basename(p))
        js = load(p) if mt else None
        if js is not None:
            out[int(mt.group(1))] = js
    return out


def fmt(v, spec="{:.0f}"):
    return "n/a" if v is None else spec.format(v)


def ratio(a, b):
    return a / b if a is not None and b else None


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def spread(vals):
    """How far the rounds differed: largest over smallest, less 1."""
    vals = [v for v in vals if v is not None]
    return max(vals) / min(vals) - 1 if len(vals) > 1 and min(vals) > 0 else None


# The per-round figures of a model: key, label, format, and which way is
# better (for "best").
FIGURES = [
    ("aa_tokens_per_s", "aa tok/s", "{:.0f}", max),
    ("torch_tokens_per_s", "torch tok/s", "{:.0f}", max),
    ("gemm_ms_per_step", "GEMM floor ms", "{:.1f}", min),
    ("sgemm_square_gflops", "sgemm GFLOP/s", "{:.1f}", max),
    ("speed_ratio", "aa/torch", "{:.2f}x", max),
    ("floor_ratio", "aa step/floor", "{:.3f}x", min),
    ("torch_floor_ratio", "torch step/floor", "{:.3f}x", min),
    ("flop_ratio", "aa/sgemm", "{:.0%}", max),
]


def model_rounds(work, name, m, rows, fpt):
    """{round: figures} of one model, each ratio from that round alone."""
    aa, th, sg = by_round(work, "aa-" + name), by_round(work, "torch-" + name), by_round(work, "sgemm-" + name)
    key = probe_key(m, rows)
    out = {}
    for r in sorted(set(aa) | set(th) | set(sg)):
        a, t, s = aa.get(r, {}), th.get(r, {}), sg.get(r, {})
        probe = next((p for p in s.get("models", []) if key and all(p.get(k) == v for k, v in key.items())), {})
        f = {
            "aa_tokens_per_s": a.get("tokens_per_s"),
            "torch_tokens_per_s": t.get("tokens_per_s"),
            "aa_step_ms": a.get("step_ms_median"),
            "torch_step_ms": t.get("step_ms_median"),
            "gemm_ms_per_step": probe.get("step_gemm_ms"),
            "gemm_step_flop": probe.get("step_flop"),
            "sgemm_mix_gflops": probe.get("mix_gflops"),
            "sgemm_square_gflops": s.get("square_gflops"),
        }
        f["speed_ratio"] = ratio(f["aa_tokens_per_s"], f["torch_tokens_per_s"])
        f["floor_ratio"] = ratio(f["aa_step_ms"], f["gemm_ms_per_step"])
        f["torch_floor_ratio"] = ratio(f["torch_step_ms"], f["gemm_ms_per_step"])
        f["aa_non_gemm_ms"] = (f["aa_step_ms"] - f["gemm_ms_per_step"]
                               if f["aa_step_ms"] is not None and f["gemm_ms_per_step"] is not None else None)
        f["aa_gflops"] = f["aa_tokens_per_s"] * fpt * 1e-9 if f["aa_tokens_per_s"] else None
        f["torch_gflops"] = f["torch_tokens_per_s"] * fpt * 1e-9 if f["torch_tokens_per_s"] else None
        f["flop_ratio"] = ratio(f["aa_gflops"], f["sgemm_square_gflops"])
        f["torch_flop_ratio"] = ratio(f["torch_gflops"], f["sgemm_square_gflops"])
        out[r] = f
    return out, aa, th, sg


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: report.py WORK NAME...")
    work, names = sys.argv[1], sys.argv[2:]
    rows, notes, probes, all_rounds = [], [], {}, set()
    aa_all, th_all = [], []
    for name in names:
        spec = load(os.path.join(work, "specs", name + ".json"))
        if not spec or "model" not in spec or "train" not in spec:
            sys.exit(f"report.py: no readable spec at {os.path.join(work, 'specs', name + '.json')}")
        m, B = spec["model"], spec["train"]["global_batch"]
        fpt = flops_per_token(m)
        per, aa, th, sg = model_rounds(work, name, m, B * m["seq_len"], fpt)
        all_rounds |= set(per)
        aa_all += aa.values()
        th_all += th.values()
        probes[name] = {str(r): s for r, s in sorted(sg.items())}
        first_aa = next(iter(aa.values()), {})
        if first_aa.get("params") not in (None, param_count(m)):
            notes.append(f"note: {name}: autoaccel reports {first_aa['params']} params, formula {param_count(m)}")
        want = 6 * B * m["seq_len"] * matrix_weights(m)
        got = {round(f["gemm_step_flop"]) for f in per.values() if f["gemm_step_flop"] is not None}
        if got and got != {want}:
            notes.append(f"WARNING: {name}: the sgemm probe's GEMMs make {sorted(got)} FLOPs a step, "
                         f"the model's matrices {want}: the probe does not issue this model's GEMMs")
        elif got:
            n = param_count(m) - (m["vocab_size"] * m["d_model"] if is_llama(m) else m["seq_len"] * m["d_model"])
            notes.append(f"note: {name}: the probe's GEMMs are 6 x tokens x the {matrix_weights(m) / 1e6:.3f} M "
                         f"matrix weights ({want / 1e9:.3f} GFLOP a step); 6N also counts "
                         f"{n - matrix_weights(m)} norm and bias weights (+{(n / matrix_weights(m) - 1):.2%})")
        elif probe_key(m, B * m["seq_len"]) is None:
            notes.append(f"note: {name}: a mixture of experts; the sgemm probe has no GEMMs for it (GEMM columns n/a)")
        row = {"model": name, "params": param_count(m), "batch": B, "seq_len": m["seq_len"], "flops_per_token": fpt}
        for k in ["aa_tokens_per_s", "torch_tokens_per_s", "speed_ratio", "aa_gflops", "torch_gflops",
                  "sgemm_square_gflops", "sgemm_mix_gflops", "gemm_ms_per_step", "aa_step_ms", "torch_step_ms",
                  "aa_non_gemm_ms", "floor_ratio", "torch_floor_ratio", "flop_ratio", "torch_flop_ratio"]:
            row[k] = median(f[k] for f in per.values())
        for k, _, _, better in FIGURES:
            vals = [f[k] for f in per.values() if f[k] is not None]
            row["best_" + k] = better(vals) if vals else None
            row["spread_" + k] = spread(vals)
        row["rounds"] = {str(r): f for r, f in per.items()}
        rows.append(row)

    threads = next((r.get("threads") for r in aa_all), None)
    core = next((s.get("core") for p in probes.values() for s in p.values()), "?")
    print(
        f"\nautoaccel train vs PyTorch {next((r.get('torch_version') for r in th_all), '?')}"
        f" (eager, OMP_WAIT_POLICY={next((r.get('omp_wait_policy') for r in th_all), '?')}),"
        f" {threads} thread(s), OpenBLAS core {core}; median of {len(all_rounds)} round(s),"
        " each ratio taken within one round"
    )
    env = load(os.path.join(work, "results", "env.json")) or {}
    print(f"autoaccel {env.get('autoaccel', '?')} (tree {env.get('git', '?')}); "
          f"engine, sgemm probe and PyTorch use {env.get('openblas', '?')}")
    if "probe_env" in env:
        print(f"sgemm probe's OpenMP idling: {env['probe_env']}; environment: "
              + (", ".join(f"{k}={v}" for k, v in sorted(env.get("environment", {}).items())) or "none set"))
    peer_blas = {r.get("openblas") for r in th_all}
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

    print("\nwhere the step goes (GEMM ms = the step's linear-layer GEMMs timed alone in bench_sgemm, "
          "the same round; medians):\n")
    table = [["model", "MFLOP/token", "GEMM ms", "GEMM-mix GFLOP/s", "aa step ms", "torch step ms",
              "aa non-GEMM ms", "step/floor"]]
    for r in rows:
        table.append([
            r["model"], f"{r['flops_per_token'] / 1e6:.2f}", fmt(r["gemm_ms_per_step"], "{:.1f}"),
            fmt(r["sgemm_mix_gflops"], "{:.1f}"), fmt(r["aa_step_ms"], "{:.1f}"), fmt(r["torch_step_ms"], "{:.1f}"),
            fmt(r["aa_non_gemm_ms"], "{:.1f}"), fmt(r["floor_ratio"], "{:.3f}x"),
        ])
    print_table(table)

    order = sorted(all_rounds)
    print("\nper round, their median and best, and how far the rounds differed (largest / smallest - 1):\n")
    table = [["model", "figure"] + [f"round {i}" for i in order] + ["median", "best", "rounds differ"]]
    for r in rows:
        for k, label, spec, _ in FIGURES:
            vals = [r["rounds"].get(str(i), {}).get(k) for i in order]
            if all(v is None for v in vals):
                continue
            table.append([r["model"], label] + [fmt(v, spec) for v in vals] +
                         [fmt(median(vals), spec), fmt(r["best_" + k], spec), fmt(r["spread_" + k], "{:.0%}")])
    print_table(table)

    print()
    for r in rows:
        sr, fr, st = r["speed_ratio"], r["flop_ratio"], SPEED_TARGETS.get(r["model"])
        speed = f" (want >= {st:.1f}x: {'met' if sr and sr >= st else 'not met'})" if st else ""
        line = (f"target {r['model']} (medians): aa/torch {fmt(sr, '{:.2f}x')}{speed}, aa/sgemm {fmt(fr, '{:.0%}')} "
                f"(want >= {FLOP_TARGET:.0%}: {'met' if fr and fr >= FLOP_TARGET else 'not met'})")
        ft, floor = FLOOR_TARGETS.get(r["model"]), r["floor_ratio"]
        if ft and floor:
            line += f", step/GEMM floor {floor:.3f}x (want <= {ft:.2f}x: {'met' if floor <= ft else 'not met'})"
        print(line)
        # What the speed target asks of the step: PyTorch's step/floor over
        # the target. Below 1 it asks for a step shorter than the GEMMs alone.
        tfr = r["torch_floor_ratio"]
        if st and tfr:
            need = tfr / st
            print(f"  {r['model']}: aa/torch >= {st:.1f}x needs aa step/floor <= {need:.3f}x (PyTorch's step is "
                  f"{tfr:.3f}x the floor){': shorter than its GEMMs alone' if need < 1 else ''}")
    for n in notes:
        print(n)
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
        json.dump({"rows": rows, "sgemm": probes, "noise": noise}, f, indent=1)


def print_table(table):
    widths = [max(len(str(row[c])) for row in table) for c in range(len(table[0]))]
    for i, row in enumerate(table):
        print("  ".join(str(v).ljust(w) if c == 0 else str(v).rjust(w) for c, (v, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
