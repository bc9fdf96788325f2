#!/usr/bin/env bash
# Writes the compatibility fixtures of tests/compat/ with an autoaccel
# binary: what that build wrote is what every later build must read, and
# write back byte for byte (tests/cli/test_compat.sh). The committed ones
# were written by main at f189526, the last build before the axis table
# (issue 31), built with:
#   git worktree add --detach /tmp/old f189526
#   cmake -S /tmp/old -B /tmp/old/b -DCMAKE_BUILD_TYPE=Release -DAUTOACCEL_CUDA=off
#   cmake --build /tmp/old/b --target autoaccel
#   tests/compat/make.sh /tmp/old/b/autoaccel
#
# strategies/NAME.in.json   inputs: v1 files in every shape and ATorch lists
# strategies/NAME.json      `strategy show NAME.in.json --json`: the canonical file
# strategies/NAME.show.txt  `strategy show NAME.json`: the key and each knob in words
# store-v6.sql              a store after a 2-executor search (runs of data,
#                           tensor and pipeline gangs with their ranks'
#                           coordinates), as SQL text (python's iterdump)
# ckpt/                     a tensor 2 x pipeline 2 training run of model.json
#                           on data/: step_000001.ckpt* (to resume from) and
#                           final.ckpt* (what the resumed run must write)
set -euo pipefail
OLD=$(realpath "${1:?usage: make.sh AUTOACCEL_BINARY}")
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

for f in strategies/*.in.json; do
  n=${f%.in.json}
  "$OLD" strategy show "$f" --json >"$n.json"
  "$OLD" strategy show "$n.json" >"$n.show.txt"
done

rm -rf data ckpt
"$OLD" data synth --out data --bytes 20000 >/dev/null
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
export AUTOACCEL_HOME="$work/home"
"$OLD" planner --measured-steps 2 >"$work/planner.log" 2>&1 &
for _ in 1 2; do "$OLD" executor --threads 1 >>"$work/executor.log" 2>&1 & done
for _ in $(seq 100); do "$OLD" status >/dev/null 2>&1 && break; sleep 0.1; done
sed "s|data/|$here/data/|g" model.json >"$work/model.json"
"$OLD" submit "$work/model.json" --wait --exhaustive --exclude fp16,bf16,checkpoint,zero2,zero3 >/dev/null
kill $(jobs -p)
wait 2>/dev/null || true
/usr/bin/python3 - "$work/home/store.db" store-v6.sql "$here/" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
app, ver = db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]
lines = [line.replace(sys.argv[3], "") for line in db.iterdump()]
with open(sys.argv[2], "w") as f:
    f.write("PRAGMA application_id = %d;\nPRAGMA user_version = %d;\n" % (app, ver))
    f.write("\n".join(lines) + "\n")
PY

"$OLD" train model.json --strategy ckpt-strategy.json --steps 2 --checkpoint-every 1 --out ckpt --threads 4 \
  --losses "$work/losses.txt" >/dev/null
cp "$work/losses.txt" ckpt/losses.txt
echo "make.sh: fixtures written by $("$OLD" --version | head -1)"
