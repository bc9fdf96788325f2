#!/usr/bin/env bash
# A mixture-of-experts llama against the dense llama of the same active
# parameters, trained on CPU ranks (issue 33): the dense model (SwiGLU of
# width 2F) at dp 2, the MoE model (4 experts of width F, top-2, so each
# token passes 2F columns as in the dense one, plus the router) at dp 2
# (experts replicated) and at dp 2 x expert 2 (each rank holds 2 experts;
# tokens travel by all-to-all). Prints tokens/s (the best of the rounds,
# run interleaved, each round's figure after it), the rank-0 peak bytes
# the engine accounted beside what `strategy check` predicts for that
# rank, the all-to-all's share of the step (the engine's time breakdown,
# summary-json ranks[].time_ms.all_to_all) beside the share the planner's
# calibrated cost model predicts for the ep run (one dry run through
# `autoaccel auto`, which calibrates the pool first; its runs.predicted_json
# breakdown), and how much of the CPUs other processes took meanwhile.
# Then the cost model against the planner's own dry runs of the ep run:
# the first predicted at the default load imbalance (1.25), the second (a
# second job, which starts from the first's measured imbalance) at the
# measured one, each beside its measured step and all-to-all share.
# Asserts nothing. See bench/README.md.
#
# usage: bench/moe.sh [--steps N] [--rounds R] [--work DIR] [--keep]
# Environment: AUTOACCEL (the binary; default build-release/autoaccel,
# built here), BUILD_DIR (default build-release), PYTHON (default
# /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=20
ROUNDS=3
WORK=""
KEEP=0
die() { echo "bench/moe.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$STEPS" "$ROUNDS"; do [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"; done
[ "$STEPS" -ge 2 ] || die "--steps must be at least 2 (the first step is not timed)"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-moe results runs
bench_build
"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }

# The two models: 4 llama layers of width 256, sequence 128, global batch 16.
"$PYTHON" - "$WORK" "$STEPS" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
base = {"model": {"family": "llama", "n_layer": 4, "n_head": 8, "n_kv_head": 4, "d_model": 256, "d_ff": 512,
                  "seq_len": 128, "vocab_size": 256},
        "train": {"global_batch": 16, "steps": steps, "lr": 1e-3, "eval_every": 0, "eval_batches": 1},
        "data": {"train": work + "/data/train.bin", "val": work + "/data/val.bin"}}
dense = json.loads(json.dumps(base)); dense["name"] = "dense-f512"
moe = json.loads(json.dumps(base)); moe["name"] = "moe-4x256-top2"
moe["model"]["moe"] = {"experts": 4, "top_k": 2, "d_ff_expert": 256}
json.dump(dense, open(work + "/dense.json", "w"))
json.dump(moe, open(work + "/moe.json", "w"))
for name, par in (("dp2", {"data": 2}), ("ep2", {"data": 2, "expert": 2})):
    json.dump({"format": "autoaccel-strategy", "version": 1, "parallel": par, "micro_batch": 8},
              open(f"{work}/{name}.json", "w"))
PY
runs="dense:dp2 moe:dp2 moe:ep2"
for r in $runs; do # what strategy check predicts a rank holds
  "$AUTOACCEL" strategy check "$WORK/${r#*:}.json" --model "$WORK/${r%%:*}.json" --world 2 \
    >"$WORK/results/${r/:/.}.check" 2>&1 || true # a strategy the cost model refuses: no prediction ("-")
done

cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
read -r busy0 idle0 < <(cpu_busy)
self0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
for round in $(seq 1 "$ROUNDS"); do
  for r in $runs; do
    m=${r%%:*} s=${r#*:}
    echo "round $round/$ROUNDS: $m $s" >&2
    "$AUTOACCEL" train "$WORK/$m.json" --devices cpu:2 --threads "$(nproc)" --strategy "$WORK/$s.json" \
      --out "$WORK/runs/$m.$s" --log-every 1000 --summary-json "$WORK/results/$m.$s.r$round.json" \
      >"$WORK/logs/$m.$s.r$round.log" 2>&1 || { tail -5 "$WORK/logs/$m.$s.r$round.log" >&2; die "$m $s failed"; }
  done
done
# The cost model's prediction of the ep run: one dry run through the
# planner, which calibrates the pool (cpu:2) first and stores the predicted
# step's breakdown beside the run.
echo "a dry run of moe ep2 through autoaccel auto --devices cpu:2" >&2
"$AUTOACCEL" auto "$WORK/moe.json" --devices cpu:2 --home "$WORK/state" --out "$WORK/runs/auto" --no-train \
  --refresh --from "$WORK/ep2.json" --max-dryruns 1 --measured-steps "$STEPS" >"$WORK/logs/auto.log" 2>&1 ||
  { tail -5 "$WORK/logs/auto.log" >&2; die "auto failed"; }
echo "a second job's dry run of moe ep2, predicted at the first's measured load imbalance" >&2
"$AUTOACCEL" auto "$WORK/moe.json" --devices cpu:2 --home "$WORK/state" --out "$WORK/runs/auto2" --no-train \
  --refresh --from "$WORK/ep2.json" --max-dryruns 1 --measured-steps "$STEPS" >"$WORK/logs/auto2.log" 2>&1 ||
  { tail -5 "$WORK/logs/auto2.log" >&2; die "auto (second) failed"; }
read -r busy1 idle1 < <(cpu_busy)

"$PYTHON" - "$WORK/results" "$runs" "$STEPS" "$ROUNDS" "$WORK/state/store.db" <<'PY'
import glob, json, re, sqlite3, sys
res, runs, steps, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4])
# The predicted all-to-all share of the ep run's step: the expert group's
# time over the sum of the breakdown's parts (docs/store.md predicted_json),
# of the first dry run (predicted at the default imbalance).
db = sqlite3.connect(sys.argv[5])
pred_share, dry = None, []
for rid, key, pj, ms, imb in db.execute(
        "SELECT id, strategy_key, predicted_json, step_ms_median, moe_imbalance FROM runs WHERE kind = 'dryrun'"
        " AND status = 'ok' AND predicted_json IS NOT NULL ORDER BY id"):
    b = json.loads(pj)
    b = b.get("breakdown", b)
    parts = [v for k, v in b.items() if k.endswith("_ms")]
    if ".ep2" in key and parts and sum(parts) > 0:
        pred_share = pred_share if pred_share is not None else b["expert_comm_ms"] / sum(parts)
        ranks = db.execute("SELECT forward_ms + backward_ms + optimizer_ms + pipeline_comm_ms + bubble_ms +"
                           " coalesce(all_to_all_ms, 0), all_to_all_ms FROM run_ranks WHERE run_id = ?"
                           " ORDER BY rank", (rid,)).fetchall()
        share = max(a / t for t, a in ranks if t and a is not None) if ranks else 0
        dry.append((b.get("moe_imbalance", 1.0), sum(parts), b["expert_comm_ms"] / sum(parts), ms, share, imb))
print(f"\n{steps} steps a run (median step, first excluded), 2 ranks on cpu:2, best of {rounds} rounds")
print(f"{'model':<16} {'strategy':<38} {'params':>7} {'tok/s':>8} {'x dense':>8} {'rank-0 peak':>12} {'predicted':>10} "
      f"{'a2a share':>9} {'predicted':>9}  rounds (tok/s)")
base = None
for r in runs:
    m, s = r.split(":")
    all_ = [json.load(open(f)) for f in sorted(glob.glob(f"{res}/{m}.{s}.r*.json"))]
    best = max(all_, key=lambda x: x["tokens_per_s"])
    base = base or best["tokens_per_s"]
    check = open(f"{res}/{m}.{s}.check").read()
    pred = re.search(r"needs at least ([0-9.]+ [KMGT]iB)", check)
    peak = best["ranks"][0]["peak_bytes"] / 2**20
    each = " ".join(f"{x['tokens_per_s']:.0f}" for x in all_)
    # The all-to-all's share of rank 0's mean step, over the rounds (median).
    shares = sorted(x["ranks"][0]["time_ms"].get("all_to_all", 0) / sum(x["ranks"][0]["time_ms"].values())
                    for x in all_)
    share = shares[len(shares) // 2]
    ps = f"{100 * pred_share:8.1f}%" if s == "ep2" and pred_share is not None else f"{'-':>9}"
    print(f"{best['model']:<16} {best['strategy'][:38]:<38} {best['params']/1e6:6.2f}M {best['tokens_per_s']:8.0f} "
          f"{best['tokens_per_s']/base:7.2f}x {peak:8.1f} MiB {pred.group(1) if pred else '-':>10} "
          f"{100 * share:8.1f}% {ps}  {each}")
print("\nthe planner's dry runs of moe ep2 (cpu:2), predicted against measured:")
print(f"{'timed at':>9} {'pred step':>10} {'pred a2a':>9} {'meas step':>10} {'meas a2a':>9} {'measured imbalance':>19}")
for f, step, s, ms, share, imb in dry:
    print(f"{f:9.2f} {step:7.1f} ms {100 * s:8.1f}% {ms:7.1f} ms {100 * share:8.1f}% {imb or 0:19.2f}")
PY
self1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
awk -v b="$((busy1 - busy0))" -v i="$((idle1 - idle0))" \
  'BEGIN { printf "CPUs busy %.0f%% of the time while measuring (these runs and everything else)\n", 100 * b / (b + i) }'
