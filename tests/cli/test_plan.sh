#!/usr/bin/env bash
# `autoaccel plan`: help, usage errors (exit 2), a bad model file and a
# missing planner (exit 1), and, against a real planner whose store has no
# calibration yet, the error that says which job to run first (exit 1). The
# predictions themselves are tests/test_plan.c's, on a synthetic
# calibration; a plan from a calibration that a real job measured belongs to
# the calibrated search's service test.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
export AUTOACCEL_HOME="$tmp/home"
NOP="--planner unix:$tmp/nobody.sock"

cat >"$tmp/model.json" <<'JSON'
{"name": "plan", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 3, "lr": 0.001},
 "data": {"train": "data/train.bin"}}
JSON
sed 's/"n_head": 2/"n_head": 3/' "$tmp/model.json" >"$tmp/div.json"

# --- help and usage ---------------------------------------------------------------------
expect 0 "usage: autoaccel plan MODEL --pool KIND:N" "$AA" plan --help
expect 0 "plan +predict the best strategies" "$AA" --help
expect 2 "expected one MODEL" "$AA" plan --pool cpu:4
expect 2 "--pool KIND:N is required" "$AA" plan "$tmp/model.json"
expect 2 "--pool is cpu:N or cuda:N, not 'tpu:4'" "$AA" plan "$tmp/model.json" --pool tpu:4
expect 2 "--pool is cpu:N or cuda:N, not 'cpu'" "$AA" plan "$tmp/model.json" --pool cpu
expect 2 "--pool's N needs an integer in \[1, 4096\], got '0'" "$AA" plan "$tmp/model.json" --pool cuda:0
expect 2 "--pool's N needs an integer in \[1, 4096\], got '4097'" "$AA" plan "$tmp/model.json" --pool cuda:4097
expect 2 "--top needs an integer in \[1, 1000\]" "$AA" plan "$tmp/model.json" --pool cpu:4 --top 0
expect 2 "--device must be a device of the pool's kind" "$AA" plan "$tmp/model.json" --pool cpu:4 --device cuda:x:1MiB
expect 2 "unknown option" "$AA" plan "$tmp/model.json" --pool cpu:4 --frobnicate

# --- failures before and at the planner ---------------------------------------------------------
expect 1 "div.json.*n_head" "$AA" plan "$tmp/div.json" --pool cpu:4 $NOP
expect 1 "no planner at unix:$tmp/nobody.sock" "$AA" plan "$tmp/model.json" --pool cpu:4 $NOP

home="$tmp/home"
P="--planner unix:$home/planner.sock"
"$AA" planner --home "$home" >>"$tmp/planner.log" 2>&1 &
planner=$!
pids+=("$planner")
planner_up "$tmp/planner.log"
expect 1 "autoaccel plan: no calibration of a cpu device is stored: run a job on cpu devices first \(e\.g\. .autoaccel auto --devices cpu:2 MODEL.\)" \
  "$AA" plan "$tmp/model.json" --pool cpu:4 $P
expect 1 "no calibration of a cuda device is stored" "$AA" plan "$tmp/model.json" --pool cuda:8 $P --json
expect 1 "no calibration of device \"cpu:X:1MiB\" is stored \(of cpu devices: none\)" \
  "$AA" plan "$tmp/model.json" --pool cpu:4 --device cpu:X:1MiB $P
# A refused plan leaves the planner serving.
expect 0 "executors" "$AA" status $P

echo "plan cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
