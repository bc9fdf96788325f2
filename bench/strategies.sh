#!/usr/bin/env bash
# Single-device strategy table: for the bundled example, every amp x
# activation-checkpointing combination trained for a few steps, with
# tokens/s and the accounted peak memory by kind, each relative to
# fp32 / no checkpointing. Prints a table; asserts nothing. See bench/README.md.
#
# usage: bench/strategies.sh [--threads N] [--steps N] [--rounds R] [--micro-batch N] [--work DIR] [--keep]
#   --threads N      worker threads (default: nproc)
#   --steps N        optimizer steps per run (default 20; the first is not timed)
#   --rounds R       interleaved rounds; tokens/s is the best round (default 2)
#   --micro-batch N  micro-batch for every run (default: the whole batch)
#   --work DIR       where data, strategies, logs and results go (default: a temp dir)
#   --keep           keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release), PYTHON (default /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=$(nproc)
STEPS=20
ROUNDS=2
MB=0
WORK=""
KEEP=0

die() { echo "bench/strategies.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; THREADS=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --micro-batch) [ $# -ge 2 ] || die "--micro-batch needs a value"; MB=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$THREADS" "$ROUNDS" "$STEPS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done
[[ $MB =~ ^[0-9]+$ ]] || die "'$MB' is not a micro-batch size"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-strat strategies results runs

bench_build

"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }
# The example spec with the data pointed here and validation kept out of the timed steps.
bench_spec "$WORK/model.json" "$WORK/data" "$STEPS"

AMPS="fp32 bf16 fp16"
CKPTS="none selective full"
for amp in $AMPS; do
  for ck in $CKPTS; do
    printf '{"format": "autoaccel-strategy", "version": 1, "amp": "%s", "checkpoint": "%s", "micro_batch": %d}\n' \
      "$amp" "$ck" "$MB" >"$WORK/strategies/$amp-$ck.json"
  done
done

for round in $(seq 1 "$ROUNDS"); do
  for amp in $AMPS; do
    for ck in $CKPTS; do
      name=$amp-$ck
      echo "round $round/$ROUNDS: $name" >&2
      "$AUTOACCEL" train "$WORK/model.json" --strategy "$WORK/strategies/$name.json" --threads "$THREADS" \
        --out "$WORK/runs/$name" --log-every 1000 --summary-json "$WORK/results/$name.r$round.json" \
        >"$WORK/logs/$name.r$round.log" 2>&1 ||
        { tail -5 "$WORK/logs/$name.r$round.log" >&2; die "$name failed"; }
    done
  done
done
"$PYTHON" "$ROOT/bench/strategies_report.py" "$WORK/results" "$THREADS" "$STEPS"
