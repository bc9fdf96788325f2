#!/usr/bin/env bash
# Data-parallel scaling on this machine: the bundled example trained by
# `autoaccel train --devices cpu:N` (N rank processes in one shared-memory
# process group, threads per rank = cores / N, at least 1) at dp = 1, 2, 4,
# with tokens/s of the whole group, scaling efficiency and per-core
# efficiency. Prints a table; asserts nothing. See bench/README.md.
#
# usage: bench/dp.sh [--steps N] [--rounds R] [--zero Z] [--dps "1 2 4"] [--backends "shm gloo"]
#                    [--work DIR] [--keep]
#   --steps N   optimizer steps per run (default 20; the first is not timed)
#   --rounds R  interleaved rounds; each figure is the best round (default 3)
#   --zero Z    ZeRO stage for dp > 1 (default 0)
#   --dps LIST  data-parallel degrees (default "1 2 4"; each must divide the global batch 16)
#   --backends LIST  process groups of the dp > 1 runs (default "shm"; "shm gloo" runs both,
#               interleaved in each round, so their ratio is measured under the same load)
#   --work DIR  where data, logs and results go (default: a temp dir)
#   --keep      keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release), PYTHON (default /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
CORES=$(nproc)
STEPS=20
ROUNDS=3
ZERO=0
DPS="1 2 4"
BACKENDS="shm"
WORK=""
KEEP=0

die() { echo "bench/dp.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --zero) [ $# -ge 2 ] || die "--zero needs a value"; ZERO=$2; shift 2 ;;
    --dps) [ $# -ge 2 ] || die "--dps needs a value"; DPS=$2; shift 2 ;;
    --backends) [ $# -ge 2 ] || die "--backends needs a value"; BACKENDS=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$STEPS" "$ROUNDS" $DPS; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done
[[ $ZERO =~ ^[0-3]$ ]] || die "--zero must be 0..3"
for b in $BACKENDS; do [[ $b =~ ^(shm|gloo)$ ]] || die "backend '$b': expected shm or gloo"; done
[ "$STEPS" -ge 2 ] || die "--steps must be at least 2 (the first step is not timed)"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-dp results runs

bench_build
"$AUTOACCEL" train --help 2>&1 | grep -q -- "--devices" || die "$AUTOACCEL has no 'train --devices cpu:N'"

"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }
# The example spec with the data pointed here and validation kept out of the timed steps.
bench_spec "$WORK/model.json" "$WORK/data" "$STEPS"
printf '{"format": "autoaccel-strategy", "version": 1, "zero": %d}\n' "$ZERO" >"$WORK/strategy.json"

# CPU ticks, to tell how much other processes took during the measurement.
cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu_busy)
self0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)

for round in $(seq 1 "$ROUNDS"); do
  for dp in $DPS; do
    for b in $BACKENDS; do
      [ "$dp" = 1 ] && [ "$b" != "${BACKENDS%% *}" ] && continue # one process: no group to compare
      echo "round $round/$ROUNDS: dp $dp ($b)" >&2
      # --threads is the whole machine; the CLI gives each of the dp ranks cores / dp (at least 1).
      backend=()
      [ "$dp" -gt 1 ] && backend=(--backend "$b")
      "$AUTOACCEL" train "$WORK/model.json" --devices "cpu:$dp" "${backend[@]}" --threads "$CORES" \
        --strategy "$WORK/strategy.json" --out "$WORK/runs/dp$dp" --log-every 1000 \
        --summary-json "$WORK/results/dp$dp.$b.r$round.json" >"$WORK/logs/dp$dp.$b.r$round.log" 2>&1 ||
        { tail -5 "$WORK/logs/dp$dp.$b.r$round.log" >&2; die "dp $dp ($b) failed"; }
    done
  done
done
read -r busy1 idle1 < <(cpu_busy)

"$PYTHON" - "$WORK/results" "$CORES" "$STEPS" "$ZERO" "$ROUNDS" "$DPS" "$BACKENDS" <<'PY'
import glob, json, os, sys
results, cores, steps, zero, rounds, dps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), [int(x) for x in sys.argv[6].split()]
backends = sys.argv[7].split()
rows = [(dp, b) for dp in dps for b in (backends[:1] if dp == 1 else backends)]
runs = {k: [json.load(open(f)) for f in sorted(glob.glob(f"{results}/dp{k[0]}.{k[1]}.r*.json"))] for k in rows}
best = {k: max(runs[k], key=lambda r: r["tokens_per_s"]) for k in rows}
base = best[rows[0]]["tokens_per_s"] if dps[0] == 1 else None
model = best[rows[0]]
print(f"\nmodel {model['model']} ({model['params']/1e6:.2f}M parameters), global batch {model['global_batch']} x "
      f"{model['seq_len']} tokens, {steps} steps (median step, first excluded), best of {rounds} rounds, "
      f"{cores} cores, ZeRO {zero} for dp > 1")
print(f"{'dp':>3} {'group':>5} {'threads/rank':>12} {'cores used':>10} {'tok/s':>9} {'speedup':>8} {'efficiency':>10} "
      f"{'per-core eff':>12} {'rank-0 peak':>11}  rounds (tok/s)")
for dp, b in rows:
    r = best[(dp, b)]
    threads = max(1, cores // dp)
    used = min(cores, dp * threads)
    tps = r["tokens_per_s"]
    if base:
        used1 = cores  # dp 1 runs one rank with all cores
        speed = f"{tps / base:7.2f}x"
        eff = f"{100 * tps / (dp * base):9.1f}%"
        pce = f"{100 * (tps / used) / (base / used1):11.1f}%"
    else:
        speed = eff = pce = "-"
    peak = r["peak_bytes"]["total"] / 2**20
    each = " ".join(f"{x['tokens_per_s']:.0f}" for x in runs[(dp, b)])
    print(f"{dp:>3} {b if dp > 1 else '-':>5} {threads:>12} {used:>10} {tps:>9.0f} {speed:>8} {eff:>10} {pce:>12} {peak:>8.1f} MiB  {each}")
if len(backends) > 1:
    for dp in dps[1:] if dps[0] == 1 else dps:
        a, g = (best[(dp, x)]["tokens_per_s"] for x in backends[:2])
        print(f"dp {dp}: {backends[1]} / {backends[0]} = {g / a:.2f} (best rounds; per round: " +
              " ".join(f"{y['tokens_per_s'] / x['tokens_per_s']:.2f}" for x, y in zip(runs[(dp, backends[0])], runs[(dp, backends[1])])) + ")")
print("efficiency = tok/s(dp) / (dp x tok/s(1)); per-core efficiency = (tok/s(dp) / cores used) / (tok/s(1) / cores "
      "used at dp 1), cores used = min(cores, dp x threads per rank)")
PY
self1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
# Busy ticks of all CPUs minus those of this script's children (the runs).
"$PYTHON" -c "
b = $busy1 - $busy0; i = $idle1 - $idle0; mine = $self1 - $self0
print(f'other processes took {100 * max(0, b - mine) / max(1, b + i):.0f}% of the CPUs during the runs')"
