#!/usr/bin/env bash
# Full fine-tuning against LoRA (issue 36) on the same model and CPU pool:
# bench/models/llama-6l-512.json (16.9M parameters) fine-tuned from one
# base checkpoint, every weight trained (full) or LoRA r 16, alpha 32 on
# all seven linear layers of every block with the base frozen, at dp 1 and
# dp 2 (`train --devices cpu:N`, shared-memory process group, threads per
# rank = cores / N). Prints, per run, tokens/s (the best of the rounds, run
# interleaved, each round's figure after it), the CPU time of all ranks per
# 1000 tokens (less sensitive than tokens/s to other processes on the
# machine), LoRA's speed-up over full by both beside the cost model's (the
# ratio of `strategy check`'s FLOPs per token: its compute term; CPU ranks
# are compute-bound here), and the peak bytes the engine accounted on each
# rank beside what `strategy check` predicts a rank needs; then how much of
# the CPUs other processes took meanwhile. Asserts nothing. See
# bench/README.md.
#
# usage: bench/lora.sh [--steps N] [--rounds R] [--dps "1 2"] [--work DIR] [--keep]
#   --steps N   optimizer steps per run (default 6; the first is not timed)
#   --rounds R  interleaved rounds; each figure is the best round (default 2)
#   --dps LIST  data-parallel degrees (default "1 2"; each must divide the global batch 8)
#   --work DIR  where data, logs and results go (default: a temp dir)
#   --keep      keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel,
# built here), BUILD_DIR (default build-release), PYTHON (default
# /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
CORES=$(nproc)
STEPS=6
ROUNDS=2
DPS="1 2"
WORK=""
KEEP=0
die() { echo "bench/lora.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --dps) [ $# -ge 2 ] || die "--dps needs a value"; DPS=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$STEPS" "$ROUNDS" $DPS; do [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"; done
for dp in $DPS; do [ $((8 % dp)) = 0 ] || die "dp $dp does not divide the global batch 8"; done
[ "$STEPS" -ge 2 ] || die "--steps must be at least 2 (the first step is not timed)"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-lora results runs
bench_build
"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }

# The base spec with the data here; the two fine-tunes of its checkpoint;
# a strategy per dp (the global batch 8 over dp ranks, no accumulation).
"$PYTHON" - "$ROOT/bench/models/llama-6l-512.json" "$WORK" "$STEPS" "$DPS" <<'PY'
import json, sys
src, work, steps, dps = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4].split()]
base = json.load(open(src))
base["data"] = {"train": work + "/data/train.bin", "val": work + "/data/val.bin"}
base["train"].update(steps=1, eval_every=0, eval_batches=1)
json.dump(base, open(work + "/base.json", "w"))
full = {"extends": "base.json", "name": "llama-6l-512-full", "init_weights": "runs/base/final.ckpt",
        "train": {"steps": steps}}
json.dump(full, open(work + "/full.json", "w"))
lora = dict(full, name="llama-6l-512-lora",
            lora={"r": 16, "alpha": 32, "targets": ["q", "k", "v", "o", "gate", "up", "down"]})
json.dump(lora, open(work + "/lora.json", "w"))
for dp in dps:
    json.dump({"format": "autoaccel-strategy", "version": 1, "parallel": {"data": dp}, "zero": 0,
               "micro_batch": 8 // dp}, open(f"{work}/dp{dp}.json", "w"))
PY
echo "the base checkpoint (1 step of llama-6l-512)" >&2
"$AUTOACCEL" train "$WORK/base.json" --threads "$CORES" --out "$WORK/runs/base" --log-every 1000 \
  >"$WORK/logs/base.log" 2>&1 || { tail -5 "$WORK/logs/base.log" >&2; die "base training failed"; }
for m in full lora; do
  for dp in $DPS; do
    "$AUTOACCEL" strategy check "$WORK/dp$dp.json" --model "$WORK/$m.json" --world "$dp" \
      >"$WORK/results/$m.dp$dp.check" 2>&1 || { cat "$WORK/results/$m.dp$dp.check" >&2; die "strategy check $m dp$dp"; }
  done
done

cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu_busy)
self0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$ROUNDS"); do
  for dp in $DPS; do
    for m in full lora; do
      echo "round $round/$ROUNDS: $m dp $dp" >&2
      t0=$(awk '{print $16+$17}' /proc/$$/stat) # CPU ticks of the finished children so far
      "$AUTOACCEL" train "$WORK/$m.json" --devices "cpu:$dp" --threads "$CORES" --strategy "$WORK/dp$dp.json" \
        --out "$WORK/runs/$m.dp$dp" --log-every 1000 --summary-json "$WORK/results/$m.dp$dp.r$round.json" \
        >"$WORK/logs/$m.dp$dp.r$round.log" 2>&1 || { tail -5 "$WORK/logs/$m.dp$dp.r$round.log" >&2; die "$m dp $dp failed"; }
      echo $(($(awk '{print $16+$17}' /proc/$$/stat) - t0)) >"$WORK/results/$m.dp$dp.r$round.ticks"
    done
  done
done
read -r busy1 idle1 < <(cpu_busy)

"$PYTHON" - "$WORK/results" "$DPS" "$STEPS" "$ROUNDS" "$CORES" "$(getconf CLK_TCK)" <<'PY'
import glob, json, re, sys
res, dps, steps, rounds, cores = sys.argv[1], [int(x) for x in sys.argv[2].split()], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tck = int(sys.argv[6])
UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def check(m, dp):
    t = open(f"{res}/{m}.dp{dp}.check").read()
    mem = re.search(r"needs at least ([0-9.]+) ([KMGT]?i?B)", t)
    work = re.search(r"work: ([0-9.]+) ([MGT])FLOP per token", t)
    return (float(mem.group(1)) * UNIT[mem.group(2)] if mem else None,
            float(work.group(1)) * {"M": 1e6, "G": 1e9, "T": 1e12}[work.group(2)] if work else None)
print(f"\n{steps} steps a run (median step, first excluded), {cores} cores, threads per rank = cores / dp, "
      f"best of {rounds} rounds")
print(f"{'run':<10} {'trained':>8} {'tok/s':>6} {'lora/full':>9} {'per round':>15} {'cpu ms/ktok':>11} {'lora/full':>9} "
      f"{'predicted':>9} {'peak/rank MiB':>13} {'predicted':>9} {'grads+optim':>11}  rounds (tok/s)")
runs = {}
for dp in dps:
    for m in ("full", "lora"):
        runs[m, dp] = [(json.load(open(f)), int(open(f[:-5] + ".ticks").read()) / tck)
                       for f in sorted(glob.glob(f"{res}/{m}.dp{dp}.r*.json"))]
def cpu_per_ktok(r):
    s, cpu = r
    return 1e6 * cpu / ((s["steps"]) * s["global_batch"] * s["seq_len"])
for dp in dps:
    for m in ("full", "lora"):
        rs = runs[m, dp]
        b = max(rs, key=lambda x: x[0]["tokens_per_s"])[0]
        cpu = sorted(cpu_per_ktok(r) for r in rs)[len(rs) // 2]
        mem, flop = check(m, dp)
        ranks = b.get("ranks") or [{"peak_bytes": b["peak_bytes"]["total"]}]
        peaks = "/".join(f"{r['peak_bytes'] / 2**20:.0f}" for r in ranks)
        go = (b["peak_bytes"].get("grads", 0) + b["peak_bytes"].get("optim", 0)) / 2**20
        if m == "lora":
            f = runs["full", dp]
            fb = max(f, key=lambda x: x[0]["tokens_per_s"])[0]
            ratio = f"{b['tokens_per_s'] / fb['tokens_per_s']:8.2f}x"
            per = " ".join(f"{x[0]['tokens_per_s'] / y[0]['tokens_per_s']:.2f}" for x, y in zip(rs, f))
            fcpu = sorted(cpu_per_ktok(r) for r in f)[len(f) // 2]
            cratio = f"{fcpu / cpu:8.2f}x"
            pred = f"{check('full', dp)[1] / flop:8.2f}x"
        else:
            ratio = cratio = pred = f"{'-':>9}"
            per = "-"
        trained = b["peak_bytes"].get("grads", 0) // 4
        each = " ".join(f"{x[0]['tokens_per_s']:.0f}" for x in rs)
        print(f"{m + ' dp' + str(dp):<10} {trained / 1e6:7.2f}M {b['tokens_per_s']:6.0f} {ratio} {per:>15} {cpu:11.0f} "
              f"{cratio} {pred} {peaks:>13} {mem / 2**20 if mem else float('nan'):9.0f} {go:7.1f} MiB  {each}")
print("trained = parameters with a gradient (rank 0's gradient bytes / 4); lora/full: of the best rounds' tok/s, then "
      "per round (the two runs back to back); cpu ms/ktok = CPU time of all ranks per 1000 trained tokens (all steps, "
      "start-up included; median round), and lora/full of it; predicted = the ratio of strategy check's FLOPs per "
      "token; peak = each rank's accounted bytes beside strategy check's 'a rank needs at least'")
PY
self1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
# Busy ticks of all CPUs minus those of this script's children (the runs).
awk -v b="$((busy1 - busy0))" -v i="$((idle1 - idle0))" -v m="$((self1 - self0))" -v l0="$load0" \
  -v l1="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN { o = b - m; if (o < 0) o = 0
  printf "other processes took %.0f%% of the CPUs during the runs (load average %s before, %s after)\n",
         100 * o / (b + i), l0, l1 }'
