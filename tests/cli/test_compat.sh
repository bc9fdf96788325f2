#!/usr/bin/env bash
# What earlier builds wrote, this build reads and writes back byte for
# byte (tests/compat/, written by main at f189526 with tests/compat/make.sh):
#
#  1. Strategy files: every input (v1 files in every shape, ATorch lists)
#     gives the same canonical file, key and words; the canonical file reads
#     back to itself.
#  2. A store of schema 6 with gang runs of data, tensor and pipeline
#     ranks: the planner opens (and migrates) it, and every rank's mesh
#     coordinates, every run's key and status read as they were written.
#  3. A tensor 2 x pipeline 2 checkpoint: read and saved again, it is the
#     same, file for file; resumed a step earlier at its own layout and on
#     one rank, it reaches the same loss.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
C="$SRC/tests/compat"

# --- 1. strategy files -----------------------------------------------------------------------
n=0 same=0
for in in "$C"/strategies/*.in.json; do
  name=$(basename "$in" .in.json)
  want="$C/strategies/$name.json"
  n=$((n + 1))
  if "$AA" strategy show "$in" --json >"$tmp/$name.json" 2>"$tmp/$name.err" && cmp -s "$tmp/$name.json" "$want" &&
    "$AA" strategy show "$want" --json | cmp -s - "$want" &&
    "$AA" strategy show "$want" | cmp -s - "$C/strategies/$name.show.txt"; then
    same=$((same + 1))
  else
    echo "FAIL: strategies/$name: not as f189526 wrote it:"
    cat "$tmp/$name.err"
    diff "$want" "$tmp/$name.json" | head -5
    "$AA" strategy show "$want" | diff "$C/strategies/$name.show.txt" - | head -5
  fi
done
check "every strategy file reads, writes and shows as before ($same of $n)" [ "$same" = "$n" ]

# --- 2. a store of schema 6 ------------------------------------------------------------------
home="$tmp/home"
mkdir -p "$home"
chmod 0700 "$home"
/usr/bin/python3 - "$C/store-v6.sql" "$home/store.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[2])
db.executescript(open(sys.argv[1]).read())
db.close()
PY
/usr/bin/python3 - "$home/store.db" >"$tmp/ranks-before.txt" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for row in db.execute("SELECT r.id, r.strategy_key, r.status, k.rank, k.dp_rank, k.tp_rank, k.pp_rank"
                      " FROM runs r JOIN run_ranks k ON k.run_id = r.id ORDER BY r.id, k.rank"):
    print("run %d %s %s rank %d data %d tensor %d pipeline %d" % row)
PY
P="--planner unix:$home/planner.sock"
"$AA" planner --home "$home" >"$tmp/planner.log" 2>&1 &
pids+=("$!")
planner_up "$tmp/planner.log"
: >"$tmp/ranks-after.txt"
for run in $(awk '{print $2}' "$tmp/ranks-before.txt" | sort -un); do
  "$AA" query run "$run" $P --json | $TOOL json "'\n'.join('run %d %s %s rank %d data %d tensor %d pipeline %d' % (d['run']['id'], d['run']['key'], d['run']['status'], r['rank'], r['dp_rank'], r['tp_rank'], r['pp_rank']) for r in d['ranks'])" >>"$tmp/ranks-after.txt"
done
check "the store's $(wc -l <"$tmp/ranks-before.txt") ranks keep their runs' keys, statuses and coordinates" \
  cmp -s "$tmp/ranks-before.txt" "$tmp/ranks-after.txt"
cmp -s "$tmp/ranks-before.txt" "$tmp/ranks-after.txt" || diff "$tmp/ranks-before.txt" "$tmp/ranks-after.txt" | head
check "it holds ranks of data, tensor and pipeline gangs" \
  bash -c "grep -q 'data 1 tensor 0' '$tmp/ranks-before.txt' && grep -q 'tensor 1 pipeline 0' '$tmp/ranks-before.txt' && grep -q 'pipeline 1$' '$tmp/ranks-before.txt'"
expect 0 "status: +done" "$AA" status 1 $P

# --- 3. a tensor 2 x pipeline 2 checkpoint ---------------------------------------------------------
cp -r "$C/data" "$tmp/data"
cp "$C/model.json" "$tmp/model.json"
mkdir -p "$tmp/resume"
cp "$C"/ckpt/*.ckpt* "$tmp/resume/"
# Read and written back: resumed at its last step, the run trains no step
# and saves the state it read.
"$AA" train "$tmp/model.json" --strategy "$C/ckpt-strategy.json" --steps 2 --threads 4 --out "$tmp/out" \
  --resume "$tmp/resume/final.ckpt" >"$tmp/train.log" 2>&1 || { echo "FAIL: resume"; tail -5 "$tmp/train.log"; }
n=0 same=0
for f in "$C"/ckpt/final.ckpt*; do
  n=$((n + 1))
  cmp -s "$f" "$tmp/out/$(basename "$f")" && same=$((same + 1))
done
check "read and saved again at tensor 2 x pipeline 2, the checkpoint is the same ($same of $n files)" [ "$same" = "$n" ]
# Resumed a step earlier, at its own layout and on one rank: the second
# step's loss as the writing build had it. Another build's floating point
# (compiler flags, one rank's sums in another order) moves it within 1e-5
# relative, so the files are not compared byte for byte here.
first=$(head -1 "$C/ckpt/losses.txt")
"$AA" train "$tmp/model.json" --strategy "$C/ckpt-strategy.json" --steps 2 --threads 4 --out "$tmp/out2" \
  --resume "$tmp/resume/step_000001.ckpt" --losses "$tmp/losses2.txt" >"$tmp/train2.log" 2>&1 ||
  { echo "FAIL: resume at step 1"; tail -5 "$tmp/train2.log"; }
check "resumed at step 1 at tensor 2 x pipeline 2, it reaches step 2's loss" \
  $TOOL losses-close "$C/ckpt/losses.txt" <(echo "$first"; cat "$tmp/losses2.txt") 1e-5
echo '{"format": "autoaccel-strategy", "version": 1, "micro_batch": 2}' >"$tmp/one.json"
"$AA" train "$tmp/model.json" --strategy "$tmp/one.json" --steps 2 --threads 1 --out "$tmp/out1" \
  --resume "$tmp/resume/step_000001.ckpt" --losses "$tmp/losses1.txt" >"$tmp/train1.log" 2>&1 ||
  { echo "FAIL: resume on one rank"; tail -5 "$tmp/train1.log"; }
check "resumed at step 1 on one rank, it reaches step 2's loss" \
  $TOOL losses-close "$C/ckpt/losses.txt" <(echo "$first"; cat "$tmp/losses1.txt") 1e-5

echo "compat: $pass passed, $fail failed"
[ "$fail" = 0 ]
