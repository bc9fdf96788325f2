#!/usr/bin/env bash
# How long `autoaccel plan MODEL --pool PROFILE:N` takes, and how much
# memory, for the largest pools of the issue: PTD-P's 1 T-parameter GPT on
# 3,072 A100s (target: 10 s and 256 MiB on a 2-core machine), GPT-3 175B on
# 1,024 H100s, Llama 3 405B and the 1 T GPT on 16,384 H100s (target: 60 s).
# Each plan runs R times (default 3); the table gives the candidates, the
# fastest and slowest wall time, and the peak resident memory beside that
# of `autoaccel --help` in the same binary (a CUDA build maps its CUDA
# libraries at start: that much is not the plan's). Asserts nothing.
#
# usage: bench/plan_scale.sh [--rounds R]
# Environment: AUTOACCEL (the binary; default build-release/autoaccel,
# built here), BUILD_DIR (default build-release), PYTHON (default
# /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
WORK=""
KEEP=0
ROUNDS=3
die() { echo "bench/plan_scale.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds: '$ROUNDS' is not a positive integer"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-plan-scale out
bench_build
M=$ROOT/examples/models

load0=$(cut -d' ' -f1-3 /proc/loadavg)
base=$( { /usr/bin/time -f "%M" "$AUTOACCEL" --help >/dev/null; } 2>&1 | tail -1)
printf '%-22s %-18s %10s %9s %9s %10s %10s\n' model pool candidates "min s" "max s" "peak MiB" "idle MiB"
for run in "ptdp-gpt-1008b a100-80gb:3072" "gpt3-175b h100-80gb:1024" "llama3.1-405b h100-80gb:16384" \
  "ptdp-gpt-1008b h100-80gb:16384"; do
  set -- $run
  times=() peak=0 cand=?
  for ((r = 1; r <= ROUNDS; r++)); do
    start=$(date +%s%N)
    /usr/bin/time -f "%M" -o "$WORK/out/rss" "$AUTOACCEL" plan "$M/$1.json" --pool "$2" --top 5 --json \
      >"$WORK/out/plan.json" 2>"$WORK/logs/plan.log" || die "plan $1 $2 failed: $(cat "$WORK/logs/plan.log")"
    end=$(date +%s%N)
    times+=("$(( (end - start) / 1000000 ))e-3")
    rss=$(tail -1 "$WORK/out/rss")
    [ "$rss" -gt "$peak" ] && peak=$rss
    cand=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["candidates"])' "$WORK/out/plan.json")
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -g)
  printf '%-22s %-18s %10s %9.2f %9.2f %10d %10d\n' "$1" "$2" "$cand" "$(head -1 <<<"$sorted")" \
    "$(tail -1 <<<"$sorted")" "$((peak / 1024))" "$((base / 1024))"
done
echo "load average (1, 5, 15 min) before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg) (this plan is one thread)"
