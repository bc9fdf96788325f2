#!/usr/bin/env bash
# Pipeline schedules on this machine: the bundled example's model deepened
# to 8 blocks, trained by `autoaccel train --devices cpu:PP` with GPipe,
# 1F1B and interleaved 1F1B (2 virtual stages a rank) at pp 2 and 4, 8
# micro-batches of 2 sequences a step. For each: tokens/s of the group,
# every stage's peak accounted memory and activations, and the bubble
# share each stage measured (the part of its step in none of forward,
# backward, optimizer or sends: train.h) beside the predicted one, (pp -
# 1) / (m + pp - 1) ((pp - 1) / (v m + pp - 1) interleaved). Prints a table;
# asserts nothing. See bench/README.md.
#
# usage: bench/pipeline.sh [--steps N] [--rounds R] [--pps "2 4"] [--work DIR] [--keep]
#   --steps N   optimizer steps per run (default 8; the first is not timed)
#   --rounds R  interleaved rounds; each figure is the best round (default 2)
#   --pps LIST  pipeline degrees (default "2 4")
#   --work DIR  where data, logs and results go (default: a temp dir)
#   --keep      keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release), PYTHON (default /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
CORES=$(nproc)
STEPS=8
ROUNDS=2
PPS="2 4"
WORK=""
KEEP=0

die() { echo "bench/pipeline.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --pps) [ $# -ge 2 ] || die "--pps needs a value"; PPS=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$STEPS" "$ROUNDS" $PPS; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done
[ "$STEPS" -ge 2 ] || die "--steps must be at least 2 (the first step is not timed)"
for pp in $PPS; do
  case $pp in 2|4) ;; *) die "pipeline degree $pp: 2 or 4 (8 blocks, 2 virtual stages a rank)" ;; esac
done

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-pipeline results runs

bench_build
"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }
bench_spec "$WORK/model.json" "$WORK/data" "$STEPS" 8 tiny-8-blocks
SCHEDULES="gpipe 1f1b interleaved"
for pp in $PPS; do
  for sch in $SCHEDULES; do
    v=1; [ "$sch" = interleaved ] && v=2
    printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"pipeline": %d}, "micro_batch": 2, "schedule": "%s", "virtual_stages": %d}\n' \
      "$pp" "$sch" "$v" >"$WORK/pp$pp.$sch.json"
  done
done

cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu_busy)
self0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
for round in $(seq 1 "$ROUNDS"); do
  for pp in $PPS; do
    for sch in $SCHEDULES; do
      echo "round $round/$ROUNDS: pp $pp $sch" >&2
      "$AUTOACCEL" train "$WORK/model.json" --devices "cpu:$pp" --threads "$CORES" --strategy "$WORK/pp$pp.$sch.json" \
        --out "$WORK/runs/pp$pp.$sch" --log-every 1000 --summary-json "$WORK/results/pp$pp.$sch.r$round.json" \
        >"$WORK/logs/pp$pp.$sch.r$round.log" 2>&1 ||
        { tail -5 "$WORK/logs/pp$pp.$sch.r$round.log" >&2; die "pp $pp $sch failed"; }
    done
  done
done
read -r busy1 idle1 < <(cpu_busy)

"$PYTHON" - "$WORK/results" "$CORES" "$STEPS" "$ROUNDS" "$PPS" <<'PY'
import glob, json, sys
results, cores, steps, rounds, pps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), [int(x) for x in sys.argv[5].split()]
scheds = ["gpipe", "1f1b", "interleaved"]
m = None
print(f"\n8 blocks of the bundled example (d_model 128), global batch 16 x 64 tokens as micro-batches of 2, "
      f"{steps} steps (median step, first excluded), best of {rounds} rounds, {cores} cores")
print(f"{'pp':>3} {'schedule':>12} {'tok/s':>8} {'rounds':>14}  {'bubble predicted':>16} {'measured':>8}   "
      "per stage: peak MiB (acts MiB), bubble %")
for pp in pps:
    for sch in scheds:
        runs = [json.load(open(f)) for f in sorted(glob.glob(f"{results}/pp{pp}.{sch}.r*.json"))]
        best = max(runs, key=lambda r: r["tokens_per_s"])
        m = best["accum_steps"]
        v = 2 if sch == "interleaved" else 1
        pred = (pp - 1) / (v * m + pp - 1)
        stages = {}
        for r in best["ranks"]:
            t = r["time_ms"]
            total = sum(t.values())
            stages[r["pp_rank"]] = (r["peak_bytes"] / 2**20, r["peak_acts_bytes"] / 2**20,
                                    100 * t["bubble"] / total if total else 0)
        meas = sum(s[2] for s in stages.values()) / len(stages)
        each = " ".join(f"{x['tokens_per_s']:.0f}" for x in runs)
        per = "; ".join(f"{p:.2f} ({a:.2f}), {b:.0f}%" for _, (p, a, b) in sorted(stages.items()))
        print(f"{pp:>3} {sch:>12} {best['tokens_per_s']:>8.0f} {each:>14}  {100 * pred:>15.1f}% {meas:>7.1f}%   {per}")
print(f"m = {m} micro-batches a step; measured bubble = a stage's step time in none of forward, backward, optimizer "
      "and sends (mostly waiting in receives), averaged over stages")
PY
self1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
"$PYTHON" -c "
b = $busy1 - $busy0; i = $idle1 - $idle0; mine = $self1 - $self0
print(f'other processes took {100 * max(0, b - mine) / max(1, b + i):.0f}% of the CPUs during the runs')"
