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
sed 's/"seq_len": 16/"seq_len": 131072/' "$tmp/model.json" >"$tmp/long.json"

# --- help and usage ---------------------------------------------------------------------
expect 0 "usage: autoaccel plan MODEL --pool KIND:N" "$AA" plan --help
expect 0 "plan +predict the best strategies" "$AA" --help
expect 2 "expected one MODEL" "$AA" plan --pool cpu:4
expect 2 "--pool KIND:N is required" "$AA" plan "$tmp/model.json"
expect 1 'no device profile named "tpu" \(built in: a100-40gb' "$AA" plan "$tmp/model.json" --pool tpu:4
expect 2 "--pool is cpu:N, cuda:N or PROFILE:N \(plan --list-devices\), not 'cpu'" "$AA" plan "$tmp/model.json" --pool cpu
expect 2 "--pool's N needs an integer in \[1, 4096\], got '0'" "$AA" plan "$tmp/model.json" --pool cuda:0
expect 2 "--pool's N needs an integer in \[1, 4096\], got '4097'" "$AA" plan "$tmp/model.json" --pool cuda:4097
expect 2 "--top needs an integer in \[1, 1000\]" "$AA" plan "$tmp/model.json" --pool cpu:4 --top 0
expect 2 "--device must be a device of the pool's kind" "$AA" plan "$tmp/model.json" --pool cpu:4 --device cuda:x:1MiB
expect 2 "unknown option" "$AA" plan "$tmp/model.json" --pool cpu:4 --frobnicate
expect 2 "--hosts must divide the pool's devices evenly" "$AA" plan "$tmp/model.json" --pool cpu:4 --hosts 3
expect 2 "--hosts needs an integer" "$AA" plan "$tmp/model.json" --pool cpu:4 --hosts 0

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
expect 1 "or plan from a GPU's datasheet figures, with no planner: --pool h100-80gb:N \(autoaccel plan --list-devices\)" \
  "$AA" plan "$tmp/model.json" --pool cuda:8 $P
expect 1 "no calibration of device \"cpu:X:1MiB\" is stored \(of cpu devices: none\)" \
  "$AA" plan "$tmp/model.json" --pool cpu:4 --device cpu:X:1MiB $P
# A spec without data (examples/models/) is a model to plan: it gets as far
# as the calibration. A submit of one is a search, which measures: the
# planner itself refuses it (the CLI would have, before sending it).
expect 1 "no calibration of a cuda device is stored" "$AA" plan "$SRC/examples/models/gpt3-175b.json" --pool cuda:8 $P
expect 0 "^submit: error .*submit: gpt3-175b has no training data: data\.train is required" \
  $PEER submit "unix:$home/planner.sock" "$SRC/examples/models/gpt3-175b.json"
# So is a sequence longer than the engine trains (docs/model-spec.md "Long
# contexts"), data or not; a plan of it gets as far as the calibration.
expect 1 "no calibration of a cuda device is stored" "$AA" plan "$tmp/long.json" --pool cuda:8 $P
expect 0 "^submit: error .*submit: seq_len 131072: the engine trains at most 65,536 tokens per sequence; plan and strategy check accept up to 1,048,576" \
  $PEER submit "unix:$home/planner.sock" "$tmp/long.json"
# A refused plan leaves the planner serving.
expect 0 "executors" "$AA" status $P

# --- a plan from a stored calibration ---------------------------------------------------
# Real calibrations come from jobs on the pool (docs/service.md "Calibration"); here one is
# written into the planner's store by hand, as the planner stores one: an op of each kind at
# one shape (the others are taken from neighbours) and each collective on groups of 2.
/usr/bin/python3 - "$home/store.db" <<'PY'
import json, sqlite3, sys, time
ops = [["matmul", [64, 32, 96, 0]], ["attention", [4, 16, 32, 2]], ["layernorm", [64, 32, 0, 0]],
       ["gelu", [4096, 0, 0, 0]], ["residual", [2048, 0, 0, 0]], ["xent", [64, 256, 0, 0]],
       ["encoder", [64, 32, 0, 0]], ["cast", [4096, 0, 0, 0]], ["adamw", [10000, 0, 0, 0]]]
cal = {"version": 1, "device": "cpu:Synthetic CPU (1 threads):4096MiB", "backend": "shm", "cuda": 0,
       "threads": 1, "host_cores": 2, "ranks": 2, "measured_s": 1.0,
       "ops": [[k, d, "fp32", 1e-5, 0 if k == "adamw" else 2e-5] for k, d in ops],
       "links": [[k, 2, 1e-5, 1e9] for k in ("all_reduce", "all_gather", "reduce_scatter", "send", "recv")]}
db = sqlite3.connect(sys.argv[1])
now = int(time.time())
db.execute("INSERT INTO calibrations VALUES (?, 'shm', ?, ?, ?)", (cal["device"], json.dumps(cal), now, now))
db.commit()
PY
expect 0 "plan for cpu:4 from the calibration of cpu:Synthetic CPU \(1 threads\):4096MiB \(shm, measured [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC\): [0-9]+ strategies, 0 predicted out of memory" \
  "$AA" plan "$tmp/model.json" --pool cpu:4 $P
"$AA" plan "$tmp/model.json" --pool cpu:4 $P >"$tmp/plan.txt" 2>&1
check "the table has a header and five strategies" [ "$(grep -cE '^ +[1-5]  dp[0-9]' "$tmp/plan.txt")" = 5 ]
check "the assumptions say no dry run" grep -q "no dry run: predictions only" "$tmp/plan.txt"
check "the assumptions say shapes come from neighbours" grep -qE "up to [0-9]+ op shapes of a strategy taken from neighbours" "$tmp/plan.txt"
check "the assumptions say the host's cores are shared" grep -q "share the host the calibration ran on (2 cores" "$tmp/plan.txt"
"$AA" plan "$tmp/model.json" --pool cpu:4 --top 3 --json $P >"$tmp/plan.json"
check "--json: three strategies, best predicted first" \
  [ "$(jq_ "(lambda s: len(s) == 3 and s[0]['tokens_per_s'] >= s[1]['tokens_per_s'] >= s[2]['tokens_per_s'])(d['strategies'])" <"$tmp/plan.json")" = True ]
check "--json: the calibration and the pool" \
  [ "$(jq_ "d['calibration']['links_measured'] == [2] and d['pool']['devices'] == 4 and d['pool']['host_cores'] == 2" <"$tmp/plan.json")" = True ]
expect 0 "each CPU executor has cores of its own" "$AA" plan "$tmp/model.json" --pool cpu:4 --separate-hosts $P
# Two hosts of two (the model's 2 heads allow no tensor group wider than a
# host: test_plan covers the pruning); no gang spanning hosts calibrated, said so.
"$AA" plan "$tmp/model.json" --pool cpu:4 --hosts 2 --top 1000 $P >"$tmp/plan-h2.txt" 2>&1
check "--hosts 2: the top line says the hosts" grep -qE "^plan for cpu:4 on 2 hosts .*, 0 with a tensor group wider than a host" "$tmp/plan-h2.txt"
check "--hosts 2: says the lines across hosts are not measured" grep -q "no gang spanning hosts has been calibrated" "$tmp/plan-h2.txt"
expect 1 "a pool of 1024 devices has [0-9]+ candidate strategies for this model, more than one plan predicts" \
  "$AA" plan "$tmp/model.json" --pool cpu:1024 $P
expect 0 "executors" "$AA" status $P

# A planner asked to stop while a plan is being computed (12,465 candidates on 64 devices)
# waits for it and stops cleanly; the client gets the answer or a clear error, never a hang.
"$AA" plan "$tmp/model.json" --pool cpu:64 $P >"$tmp/plan64.txt" 2>&1 &
client=$!
sleep 0.3
kill -TERM "$planner"
wait "$planner"
check "the planner stops cleanly with a plan in flight (exit $?)" [ $? = 0 ]
check "the planner says it stopped" wait_for 5 grep -q "stopped" "$tmp/planner.log"
wait "$client"
check "the client got the plan or a clear error" grep -qE "^plan for cpu:64|autoaccel plan: " "$tmp/plan64.txt"

echo "plan cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
