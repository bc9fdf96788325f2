#!/usr/bin/env bash
# Context parallelism on this machine: the bundled example's model with
# long sequences (--seq-len, default 1024; global batch 4), at context
# degree 1, 2 and 4 (each rank two of the 2c chunks of every sequence,
# attention as a ring). For each degree:
#   - the cost model's bytes a rank needs (total and activations:
#     `autoaccel strategy check`) beside what the engine accounted in a
#     dry run through the planner (`autoaccel auto --from`, one dry run);
#   - the planner's predicted tokens/s (its calibration of the pool)
#     beside the dry run's measured tokens/s;
#   - then `autoaccel train --memory-limit L` with L halfway between the
#     predicted bytes of cp 1 and cp 2: cp 1 must fail cleanly (out of
#     memory) and cp 2 and 4 train, their tokens/s the best of R rounds.
# Prints a table and how busy the other processes kept the CPUs; asserts
# nothing. See bench/README.md.
#
# usage: bench/context.sh [--seq-len T] [--steps N] [--rounds R] [--work DIR] [--keep]
#   --seq-len T  tokens a sequence (default 1024; 8 must divide it)
#   --steps N    optimizer steps per training run and measured steps per dry run (default 4)
#   --rounds R   interleaved rounds of the training runs (default 2)
#   --work DIR   where data, state, logs and results go (default: a temp dir)
#   --keep       keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release), PYTHON (default /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
CORES=$(nproc)
SEQ=1024
STEPS=4
ROUNDS=2
WORK=""
KEEP=0
CPS="1 2 4"

die() { echo "bench/context.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --seq-len) [ $# -ge 2 ] || die "--seq-len needs a value"; SEQ=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$SEQ" "$STEPS" "$ROUNDS"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done
[ $((SEQ % 8)) = 0 ] || die "--seq-len $SEQ: 8 must divide it (2 x context 4 chunks)"
[ "$STEPS" -ge 2 ] || die "--steps must be at least 2 (the first step is not timed)"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-context results runs state

bench_build
"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }
bench_spec "$WORK/model.json" "$WORK/data" "$STEPS"
"$PYTHON" - "$WORK/model.json" "$SEQ" <<'PY'
import json, sys
path, seq = sys.argv[1], int(sys.argv[2])
s = json.load(open(path))
s["name"] = f"tiny-seq{seq}"
s["model"]["seq_len"] = seq
s["train"]["global_batch"] = 4
json.dump(s, open(path, "w"), indent=1)
PY
for c in $CPS; do
  printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"context": %d}}\n' "$c" >"$WORK/cp$c.json"
  "$AUTOACCEL" strategy check "$WORK/cp$c.json" --model "$WORK/model.json" --world "$c" \
    >"$WORK/results/check.cp$c.txt" 2>&1 || { cat "$WORK/results/check.cp$c.txt" >&2; die "cp $c: strategy check failed"; }
done

cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu_busy)
self0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)

# Dry runs through the planner, one pool size each (each calibrates once).
for c in $CPS; do
  echo "cp $c: a dry run through autoaccel auto --devices cpu:$c" >&2
  "$AUTOACCEL" auto "$WORK/model.json" --devices "cpu:$c" --home "$WORK/state" --out "$WORK/runs/auto$c" \
    --no-train --refresh --from "$WORK/cp$c.json" --max-dryruns 1 --measured-steps "$STEPS" \
    >"$WORK/logs/auto.cp$c.log" 2>&1 || { tail -5 "$WORK/logs/auto.cp$c.log" >&2; die "cp $c: auto failed"; }
done

# The memory limit: halfway between cp 1's and cp 2's predicted bytes.
LIMIT=$("$PYTHON" - "$WORK/state/store.db" "$WORK/model.json" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
pred = {}
for key, b in db.execute("SELECT strategy_key, predicted_peak_bytes FROM runs WHERE kind = 'dryrun' AND status = 'ok'"):
    c = int(key.split(".cp")[1].split(".")[0]) if ".cp" in key else 1
    pred[c] = b
print((pred[1] + pred[2]) // 2)
PY
)
for round in $(seq 1 "$ROUNDS"); do
  for c in $CPS; do
    echo "round $round/$ROUNDS: train cp $c under --memory-limit $LIMIT" >&2
    rc=0
    "$AUTOACCEL" train "$WORK/model.json" --devices "cpu:$c" --threads "$CORES" --strategy "$WORK/cp$c.json" \
      --memory-limit "$LIMIT" --out "$WORK/runs/cp$c" --log-every 1000 \
      --summary-json "$WORK/results/train.cp$c.r$round.json" >"$WORK/logs/train.cp$c.r$round.log" 2>&1 || rc=$?
    echo "$rc" >"$WORK/results/train.cp$c.r$round.rc"
    if [ "$c" != 1 ] && [ "$rc" != 0 ]; then tail -5 "$WORK/logs/train.cp$c.r$round.log" >&2; die "cp $c failed"; fi
  done
done
read -r busy1 idle1 < <(cpu_busy)

"$PYTHON" - "$WORK" "$CORES" "$STEPS" "$ROUNDS" "$SEQ" "$LIMIT" "$CPS" <<'PY'
import glob, json, re, sqlite3, sys
work, cores, steps, rounds, seq, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
cps = [int(x) for x in sys.argv[7].split()]
MiB = 2**20
unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def check(c):
    t = open(f"{work}/results/check.cp{c}.txt").read()
    m = re.search(r"needs at least ([0-9.]+) (\w+) \(.*acts ([0-9.]+) (\w+),", t)
    return float(m.group(1)) * unit[m.group(2)], float(m.group(3)) * unit[m.group(4)]
db = sqlite3.connect(f"{work}/state/store.db")
runs = {}
for key, tps, pred, peak, ppeak, pj in db.execute(
        "SELECT strategy_key, tokens_per_s, predicted_tokens_per_s, peak_bytes, predicted_peak_bytes, peak_json "
        "FROM runs WHERE kind = 'dryrun' AND status = 'ok'"):
    c = int(key.split(".cp")[1].split(".")[0]) if ".cp" in key else 1
    runs[c] = (key, tps, pred, peak, ppeak, json.loads(pj or "{}"))
print(f"\nthe bundled example at seq_len {seq} (global batch 4 sequences, one micro-batch a rank), {cores} cores, "
      f"{steps} measured steps a dry run, training runs best of {rounds} rounds under --memory-limit "
      f"{limit / MiB:.1f} MiB")
print(f"{'cp':>3} {'ranks':>5} {'peak MiB/rank':>14} {'(predicted)':>11} {'acts MiB':>9} {'(predicted)':>11}  "
      f"{'dry-run tok/s':>13} {'(predicted)':>11}  train under limit (each round)")
for c in cps:
    key, tps, pred, peak, ppeak, pj = runs.get(c, ("-", 0, 0, 0, 0, {}))
    tot, acts = check(c)
    trains = []
    for f in sorted(glob.glob(f"{work}/results/train.cp{c}.r*.rc")):
        rc = int(open(f).read())
        j = f[:-3] + ".json"
        trains.append(json.load(open(j))["tokens_per_s"] if rc == 0 else None)
    ok = [t for t in trains if t]
    if ok:
        tr = f"{max(ok):.0f} tok/s ({' '.join(f'{t:.0f}' for t in ok)})"
    else:
        log = open(glob.glob(f"{work}/logs/train.cp{c}.r1.log")[0]).read()
        tr = "out of memory" if "out of memory" in log else "failed"
    print(f"{c:>3} {c:>5} {peak / MiB:>14.2f} {ppeak / MiB:>11.2f} {pj.get('acts', 0) / MiB:>9.2f} {acts / MiB:>11.1f}  "
          f"{tps:>13.0f} {pred or 0:>11.0f}  {tr}")
print("peak = the engine's accounted bytes on rank 0 of the dry run; predicted = strategies/cost.h (bytes: "
      "`strategy check`, whose acts are printed to 0.1 MiB) and the planner's calibrated step-time model (tok/s)")
PY
self1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
"$PYTHON" -c "
b = $busy1 - $busy0; i = $idle1 - $idle0; mine = $self1 - $self0
print(f'other processes took {100 * max(0, b - mine) / max(1, b + i):.0f}% of the CPUs during the runs')"
