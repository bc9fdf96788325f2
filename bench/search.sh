#!/usr/bin/env bash
# How close the fast search gets to the exhaustive one, and what it saves:
# `autoaccel auto --no-train --refresh` on the bundled example (or --model), once with the
# search's shortcuts and once --exhaustive, in fresh state directories,
# interleaved for R rounds. Per run: dry runs measured, pruned, the search's
# wall time (a calibration in each fresh state directory included), the cost
# model's median and 90th-percentile relative error over the ok dry runs it predicted (and how
# many; a strategy's first measurement), and the pick with the mean tokens/s
# of its measurements and how sure the search is of it; per round the ratios of
# fast to exhaustive (wall time, and the fast pick's tokens/s as the
# exhaustive run of the same round measured it, over the exhaustive best).
# Prints a table; asserts nothing. See bench/README.md.
#
# usage: bench/search.sh [--devices cpu:N] [--model FILE] [--rounds R] [--memory-limit B] [--work DIR] [--keep]
#   --devices cpu:N    executors (default cpu:1)
#   --model FILE       a model spec (its data is replaced by the synthetic corpus; default
#                      examples/tiny/model.json)
#   --rounds R         interleaved rounds (default 2)
#   --memory-limit B   the executors' memory limit (e.g. 64M), for the oom pruning
#   --work DIR         where data, state and logs go (default: a temp dir)
#   --keep             keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release), PYTHON (default /usr/bin/python3).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
DEVICES=cpu:1
MODEL=""
ROUNDS=2
MEMLIMIT=""
WORK=""
KEEP=0

die() { echo "bench/search.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --devices) [ $# -ge 2 ] || die "--devices needs a value"; DEVICES=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --model) [ $# -ge 2 ] || die "--model needs a value"; MODEL=$2; shift 2 ;;
    --memory-limit) [ $# -ge 2 ] || die "--memory-limit needs a value"; MEMLIMIT=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "'$ROUNDS' is not a positive integer"
[[ $DEVICES =~ ^cpu:[1-9][0-9]*$ ]] || die "--devices takes cpu:N here, not '$DEVICES'"
MODEL=${MODEL:-$ROOT/examples/tiny/model.json}
[ -r "$MODEL" ] || die "cannot read the model spec '$MODEL'"

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-search state results

bench_build

"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "data synth failed"; }
"$PYTHON" - "$MODEL" "$WORK/model.json" "$WORK/data" <<'PY'
import json, sys
src, dst, data = sys.argv[1:4]
s = json.load(open(src))
s["data"] = {"train": data + "/train.bin", "val": data + "/val.bin"}
json.dump(s, open(dst, "w"), indent=1)
PY

extra=()
[ -z "$MEMLIMIT" ] || extra+=(--memory-limit "$MEMLIMIT")
for round in $(seq 1 "$ROUNDS"); do
  for mode in fast exhaustive; do
    name=$mode.r$round
    flags=()
    [ "$mode" = fast ] || flags+=(--exhaustive)
    echo "round $round/$ROUNDS: $mode search" >&2
    t0=$(date +%s.%N)
    "$AUTOACCEL" auto "$WORK/model.json" --devices "$DEVICES" --home "$WORK/state/$name" --out "$WORK/out/$name" \
      --no-train --refresh "${flags[@]}" "${extra[@]}" >"$WORK/logs/$name.log" 2>&1 ||
      { tail -5 "$WORK/logs/$name.log" >&2; die "$mode search failed"; }
    t1=$(date +%s.%N)
    echo "$t0 $t1" >"$WORK/results/$name.time"
  done
done

# The runs straight from each state directory's store (the planner that
# `auto` embeds is gone by now).
"$PYTHON" - "$WORK" "$ROUNDS" "$DEVICES" "$(basename "$MODEL")" <<'PY'
import sqlite3, sys
work, rounds, devices, model = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def load(name):
    db = sqlite3.connect(f"{work}/state/{name}/store.db")
    db.row_factory = sqlite3.Row
    runs = [dict(r, key=r["strategy_key"]) for r in db.execute("SELECT * FROM runs WHERE kind = 'dryrun'")]
    t0, t1 = map(float, open(f"{work}/results/{name}.time").read().split())
    ok = [r for r in runs if r["status"] == "ok"]
    # The job's pick: the strategy of highest mean over its measurements
    # (the fast search re-measures leaders), with that mean.
    job = db.execute("SELECT best_run_id, note FROM jobs ORDER BY id DESC LIMIT 1").fetchone()
    pick = next(r for r in ok if r["id"] == job["best_run_id"])
    same = [r["tokens_per_s"] for r in ok if r["key"] == pick["key"]]
    best = dict(pick, tokens_per_s=sum(same) / len(same), verdict=job["note"] or "")
    first = {}
    for r in sorted(ok, key=lambda r: r["id"]):
        first.setdefault(r["key"], r)  # a re-measure is predicted from what the first measured
    errs = sorted(abs(r["predicted_tokens_per_s"] / r["tokens_per_s"] - 1) for r in first.values()
                  if r["predicted_tokens_per_s"])
    def pct(q):
        return errs[min(len(errs) - 1, int(q * len(errs)))]
    return {"runs": runs, "ok": ok, "best": best, "wall": t1 - t0,
            "pred": f"{pct(0.5):.2f}/{pct(0.9):.2f} ({len(errs)})" if errs else "-",
            "measured": sum(r["status"] not in ("pruned",) for r in runs),
            "pruned": sum(r["status"] == "pruned" for r in runs),
            "predicted_oom": sum("predicted out of memory" in (r["error"] or "") for r in runs)}

print(f"search on {model}, --devices {devices}, {rounds} interleaved rounds")
print(f"{'run':<14} {'dry runs':>8} {'pruned':>7} {'pred. oom':>9} {'wall s':>7} {'err 50/90%':>15}  best (tokens/s)")
for k in range(1, rounds + 1):
    f, e = load(f"fast.r{k}"), load(f"exhaustive.r{k}")
    for name, d in (("fast", f), ("exhaustive", e)):
        print(f"{name + ' r' + str(k):<14} {d['measured']:>8} {d['pruned']:>7} {d['predicted_oom']:>9} "
              f"{d['wall']:>7.1f} {d['pred']:>15}  {d['best']['key']} ({d['best']['tokens_per_s']:.0f})")
        print(f"    {d['best']['verdict']}")
    same = [r for r in e["ok"] if r["key"] == f["best"]["key"]]  # the exhaustive search measures each once
    pick = same[0]["tokens_per_s"] / e["best"]["tokens_per_s"] if same else float("nan")
    eb = max(e["ok"], key=lambda r: r["tokens_per_s"])
    noise = eb["step_ms_spread"] / eb["step_ms_median"] if eb["step_ms_median"] else float("nan")
    print(f"  round {k}: fast/exhaustive wall time {f['wall'] / e['wall']:.2f}, dry runs "
          f"{f['measured']}/{e['measured']}; the fast pick measured by the exhaustive run: "
          f"{pick:.3f} of its best (whose own step times spread {100 * noise:.1f} %); fast best / "
          f"exhaustive best as each measured it: {f['best']['tokens_per_s'] / e['best']['tokens_per_s']:.3f}")
PY
