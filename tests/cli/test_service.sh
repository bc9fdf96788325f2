#!/usr/bin/env bash
# The service end to end, with real processes on temporary sockets: a
# planner daemon, executors, and the CLI. Nothing of ours is mocked; the raw
# frames of the bad-client cases are built by tests/cli/service_tool.py.
#
#  1. submit --wait --train: dry runs, best strategy saved, training; the
#     store holds every run.
#  2. the same submit again is answered from the store with zero dry runs;
#     one that excludes the stored best's method, or has another global
#     batch, is not (it searches).
#  3. replay: `train --strategy` with the saved file gives the same losses.
#  4. kill -9 of a runner during a dry run: recorded crashed, the job goes on;
#     kill -9 of an executor during a dry run: its run crashed, planner serves
#     on, the job waits (visibly) and a new executor runs the strategy again;
#     an executor stopped (SIGSTOP) during a dry run: crashed, "stopped
#     responding"; continued, it stops its runner, registers again and runs
#     the strategy again.
#  5. kill -9 of the planner and a restart: earlier jobs and runs queryable.
#  6. a dry run past its time limit is recorded timeout; past the executor's
#     memory limit, oom.
#  7. malformed, oversized, truncated frames, wrong version, wrong token:
#     error replies, and the daemon serves the next client.
#  8. `auto`: search, table (measured runs, then one line per pruning reason),
#     strategy saved, training; its replay matches.
#  9. two executors: the search measures dp 2 at ZeRO 0-3 (gangs of both)
#     next to dp 1, on hardware "x2"; the tensor-parallel candidates this
#     engine refuses yet are recorded pruned with the rule, not failed.
# 10. kill -9 of one rank's runner during a dp 2 dry run: the other rank is
#     gone within 10 s, the run is recorded crashed naming the rank, the
#     planner and the executors serve on and the job goes on; kill -9 of a
#     rank's executor: the same, and the dp 2 strategies left are pruned
#     while dp 1 goes on on the survivor (then cancel).
# 11. `auto --devices cpu:2` with a memory limit that only ZeRO over both
#     ranks fits: the best is dp 2 and training runs as a gang, with the
#     single process's losses.
#     `auto --cpu-backend gloo`: its gangs meet over gloo on this host.
# 12. the calibrated search: the first job calibrates and stores it, the
#     search measures fewer strategies than an exhaustive one and says how
#     sure its pick is; the next job reuses the calibration. An executor
#     killed during a calibration fails it, not the job; a cancel ends it.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"

"$AA" data synth --out "$tmp/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
# A small model: global batch 4 gives micro-batches 4, 2, 1.
cat >"$tmp/model.json" <<'JSON'
{"name": "svc", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 12, "lr": 0.003, "seed": 7, "eval_every": 0, "eval_batches": 2},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON

home="$tmp/home"
sock="$home/planner.sock"
P="--planner unix:$sock"
start_planner() { # start_planner EXTRA...
  "$AA" planner --home "$home" --heartbeat-ms 100 --dead-after-ms 1500 --warmup-steps 1 --measured-steps 2 \
    "$@" >>"$tmp/planner.log" 2>&1 &
  planner=$!
  pids+=("$planner")
  planner_up "$tmp/planner.log"
}

# --- 1. submit -> dry runs -> best -> training --------------------------------
start_planner
start_executor 1
check "an executor registers" wait_for 20 executors_up 1
expect 0 "best" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --train --out "$tmp/out1" \
  --exclude fp16,checkpoint
"$AA" query runs --job 1 $P --json >"$tmp/runs1.json"
# fp32 and bf16 x micro-batch 4, 2, 1: fp32 measured from mb 4 down (until
# one is slower), bf16 skipped (on a CPU it does at least fp32's work); the training run.
check "the store holds the dry runs" [ "$(jq_ "len([r for r in d['runs'] if r['kind'] == 'dryrun'])" <"$tmp/runs1.json")" -ge 2 ]
check "every measured dry run is ok" [ "$(jq_ "all(r['status'] in ('ok', 'pruned') for r in d['runs'])" <"$tmp/runs1.json")" = True ]
# (or, when the calibrated search stops first, predicted below the best).
check "bf16 is skipped for the fp32 run that does less work" \
  [ "$(jq_ "all(r['status'] == 'pruned' and ('bf16 storage on a CPU instead of fp32' in r['error'] or 'below the best measured' in r['error']) for r in d['runs'] if '.bf16.' in r['key'])" <"$tmp/runs1.json")" = True ]
# The job calibrated its executor first, so every dry run, the first too,
# carries the calibrated model's prediction and its breakdown.
check "dry runs carry the calibrated model's prediction" \
  [ "$(jq_ "all(r['predicted_tokens_per_s'] > 0 and r['predicted']['forward_ms'] > 0 for r in d['runs'] if r['kind'] == 'dryrun' and r['status'] == 'ok')" <"$tmp/runs1.json")" = True ]
check "the training run is recorded ok" \
  [ "$(jq_ "[r['status'] for r in d['runs'] if r['kind'] == 'train']" <"$tmp/runs1.json")" = "['ok']" ]
check "the strategy file is written" [ -s "$tmp/out1/strategy.json" ]
expect 0 "dp1.tp1.pp1.z0" "$AA" strategy show "$tmp/out1/strategy.json"
check "training wrote one loss per step" [ "$(wc -l <"$tmp/out1/losses.txt")" = 12 ]
# The saved strategy is the search's pick (the highest mean of a strategy's
# measurements): the job's best run. (`query best` still names the single
# fastest run, which re-measures can make another strategy's.)
best_run=$("$AA" status 1 $P --json | jq_ "d['job']['best_run']")
best_key=$("$AA" query run "$best_run" $P --json | jq_ "d['run']['key']")
check "the job's best run is the strategy saved ($best_key)" grep -q "\"$best_key\"" "$tmp/out1/strategy.json"

# --- 2. the same submit is answered from the store -----------------------------
expect 0 "from the store|from_store" timeout 60 "$AA" submit "$tmp/model.json" $P --wait --exclude fp16,checkpoint
"$AA" status 2 $P --json >"$tmp/job2.json"
check "job 2 answered from the store" [ "$(jq_ "d['job']['from_store']" <"$tmp/job2.json")" = True ]
check "job 2 ran no dry run" [ "$("$AA" query runs --job 2 $P --json | jq_ "len(d['runs'])")" = 0 ]
# A stored answer must fit the new submit: not a method it excludes, and the
# same global batch (the model hash covers the architecture only).
"$AA" submit "$tmp/model.json" $P --wait --exclude fp32,fp16,checkpoint --json >"$tmp/nofp32.json" 2>/dev/null
check "a submit that excludes fp32 is not answered with the stored fp32 strategy" \
  [ "$(jq_ "d['job']['from_store'] is False and '.fp32.' not in d['best']['key']" <"$tmp/nofp32.json")" = True ]
check "the log says why the stored answer did not fit" grep -q "uses a method the submit excludes (fp32)" "$tmp/planner.log"
sed 's/"global_batch": 4/"global_batch": 2/' "$tmp/model.json" >"$tmp/batch2.json"
"$AA" submit "$tmp/batch2.json" $P --wait --exclude fp16,checkpoint --json >"$tmp/batch2.out" 2>/dev/null
check "a spec with another global batch is not answered from runs measured at 4" \
  [ "$(jq_ "d['job']['from_store'] is False and d['best'] is not None" <"$tmp/batch2.out")" = True ]
check "the log says so" grep -q "it was measured at global batch 4, and the job's is 2" "$tmp/planner.log"

# --- 3. replay reproduces the loss curve ----------------------------------------
expect 0 "done" "$AA" train "$tmp/model.json" --strategy "$tmp/out1/strategy.json" --threads 1 \
  --out "$tmp/replay1" --losses "$tmp/replay1.txt"
check "replay gives the same losses as the planner's training" cmp -s "$tmp/out1/losses.txt" "$tmp/replay1.txt"

# --- 4. kill -9 of a runner during a dry run -----------------------------------
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null
start_planner --measured-steps 100000 --dryrun-time-limit 120
start_executor 1
wait_for 20 executors_up 1
"$AA" submit "$tmp/model.json" $P --refresh --exclude bf16,fp16,checkpoint --max-dryruns 2 >"$tmp/submit3.txt"
job3=$(grep -Eo '[0-9]+' "$tmp/submit3.txt" | head -1)
check "a runner child starts" wait_for 30 runner_of "$executor"
kill -9 $r
job_over() { "$AA" status "$job3" $P --json | jq_ "d['job']['status']" | grep -Eq 'done|failed'; }
# The second dry run (100000 steps) is killed too when it has started, so the job ends soon.
sleep 1
r2=$($TOOL children "$executor"); [ -n "$r2" ] && kill -9 $r2
check "the job ends after its runners were killed" wait_for 60 job_over
"$AA" query runs --job "$job3" $P --json >"$tmp/runs3.json"
check "the killed run is recorded crashed" \
  [ "$(jq_ "sum(r['status'] == 'crashed' for r in d['runs'])" <"$tmp/runs3.json")" -ge 1 ]
check "the crash says which signal" grep -q "signal 9" "$tmp/runs3.json"
check "the executor survived its runner" kill -0 "$executor"

# --- 4b. kill -9 of an executor during a dry run: its run is crashed ------------
# A run whose executor vanished says nothing of its strategy: it runs again on
# another executor. With none left the job steps aside and says what it waits
# for; a new executor takes the run again.
"$AA" submit "$tmp/model.json" $P --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1 >"$tmp/submit4.txt"
job4=$(grep -Eo '[0-9]+' "$tmp/submit4.txt" | head -1)
check "a runner starts for the next job" wait_for 30 runner_of "$executor"
kill -9 "$executor"; wait "$executor" 2>/dev/null
job4_waits() { "$AA" status "$job4" $P --json | jq_ "d['job']['waiting']['for']" | grep -q "1 executor of .* (0 connected)"; }
check "the job waits, visibly, when its only executor died" wait_for 30 job4_waits
expect 0 "waiting: +1 executor of .*\(0 connected\) since " "$AA" status "$job4" $P
"$AA" query runs --job "$job4" $P --json >"$tmp/runs4.json"
check "the dead executor's run is recorded crashed, naming the executor, and runs again" \
  [ "$(jq_ "sum(r['status'] == 'crashed' and 'executor' in r['error'] and 'run again on another executor' in r['error'] \
  for r in d['runs'])" <"$tmp/runs4.json")" = 1 ]
check "the dead executor's runner did not outlive it" wait_for 10 gone "$r"
check "the planner survived the dead executor" kill -0 "$planner"
start_executor 1
check "a new executor takes the run again" wait_for 30 runner_of "$executor"
expect 0 "cancelled job $job4" "$AA" cancel "$job4" $P

# --- 4c. an executor that stops responding (SIGSTOP) during a dry run ------------
# The planner (heartbeat 100 ms, dead after 1.5 s) drops it and records its
# run crashed; once it runs again it finds the connection closed, stops its
# runner and registers anew.
check "the new executor registers" wait_for 20 executors_up 1
check "the cancelled run's runner is stopped" wait_for 10 gone "$r"
"$AA" submit "$tmp/model.json" $P --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1 >"$tmp/submit4c.txt"
job4c=$(grep -Eo '[0-9]+' "$tmp/submit4c.txt" | head -1)
check "a runner starts on it" wait_for 30 runner_of "$executor"
kill -STOP "$executor"
job4c_waits() { "$AA" status "$job4c" $P --json | jq_ "d['job']['waiting'] is not None"; }
job4c_waits_() { [ "$(job4c_waits)" = True ]; }
check "the job waits when its executor stops responding" wait_for 30 job4c_waits_
"$AA" query runs --job "$job4c" $P --json >"$tmp/runs4c.json"
check "the silent executor's run is recorded crashed: stopped responding" \
  [ "$(jq_ "sum(r['status'] == 'crashed' and 'stopped responding' in (r['error'] or '') for r in d['runs'])" <"$tmp/runs4c.json")" = 1 ]
kill -CONT "$executor"
check "its runner is stopped once the executor runs again" wait_for 10 gone "$r"
check "the executor registers again" wait_for 20 executors_up 1
check "the registered executor takes the run again" wait_for 30 runner_of "$executor"
expect 0 "cancelled job $job4c" "$AA" cancel "$job4c" $P

# --- 5. kill -9 of the planner; restart; history queryable ---------------------
kill -9 "$planner"; wait "$planner" 2>/dev/null
start_planner
check "job 1 is still queryable after kill -9" \
  [ "$("$AA" status 1 $P --json | jq_ "d['job']['status']")" = done ]
check "job 1's runs are still queryable" \
  [ "$("$AA" query runs --job 1 $P --json | jq_ "len(d['runs'])")" = "$(jq_ "len(d['runs'])" <"$tmp/runs1.json")" ]
check "the executor reconnected" wait_for 20 executors_up 1

# --- 6. timeout and oom ---------------------------------------------------------
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null
start_planner --measured-steps 100000 --dryrun-time-limit 1
start_executor 1
wait_for 20 executors_up 1
expect 1 "" timeout 60 "$AA" submit "$tmp/model.json" $P --wait --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1
check "a dry run past its time limit is recorded timeout" \
  [ "$("$AA" query runs --status timeout $P --json | jq_ "len(d['runs'])")" -ge 1 ]
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null
start_planner
start_executor 1 --memory-limit 64K
wait_for 20 executors_up 1
# The search knows the bytes a rank needs at least (strategies/cost.h): no
# strategy fits in 64 KiB, so none is dry-run, and the job says so.
expect 1 "no strategy could run: all [0-9]+ were pruned, [0-9]+ of them predicted out of memory \(the smallest needs at least [0-9.]+ [KMG]iB per rank, a device has 64.0 KiB\)" \
  timeout 120 "$AA" submit "$tmp/model.json" $P --wait --exclude bf16,fp16,checkpoint
"$AA" query runs $P --json >"$tmp/runs6.json"
check "strategies too big for the memory limit are pruned with their figures, not run" \
  [ "$(jq_ "len([r for r in d['runs'] if r['job'] == max(x['job'] for x in d['runs'])]) > 0 and all(r['status'] == 'pruned' and 'predicted out of memory: a rank needs at least' in r['error'] for r in d['runs'] if r['job'] == max(x['job'] for x in d['runs']))" <"$tmp/runs6.json")" = True ]

# --- 7. bad clients -------------------------------------------------------------
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null
port=$($TOOL free-port)
printf 's3cret-token\n' >"$tmp/token"; chmod 600 "$tmp/token"
start_planner --listen "127.0.0.1:$port" --token-file "$tmp/token"
U="unix:$sock" T="tcp:127.0.0.1:$port"
expect 0 "error code=-4 .*closed" $TOOL frame "$U" malformed
expect 0 "error code=-5 .*closed" $TOOL frame "$U" oversized
expect 0 "closed" $TOOL frame "$U" truncated
expect 0 "error code=-5 .*closed" $TOOL frame "$U" zero-length
expect 0 "error code=-9 .*version 2.*closed" $TOOL frame "$U" version
expect 0 "error .*hello.*closed" $TOOL frame "$U" before-hello
expect 0 "error code=-11 .*closed" $TOOL frame "$T" token wrong-token
expect 0 "error code=-11 .*closed" $TOOL frame "$T" no-token
expect 0 "executors" "$AA" status --planner "$T" --token-file "$tmp/token"
expect 1 "permission denied|token" "$AA" status --planner "$T"
check "the planner logged the wrong token" grep -qi "token" "$tmp/planner.log"
check "the planner is still alive after the bad clients" kill -0 "$planner"
expect 0 "executors" "$AA" status $P --json
kill "$planner"; wait "$planner" 2>/dev/null

# --- 8. auto --------------------------------------------------------------------
timeout 300 "$AA" auto "$tmp/model.json" --home "$tmp/home-auto" --threads 1 \
  --out "$tmp/auto" --exclude fp16,checkpoint --measured-steps 2 >"$tmp/auto.out" 2>&1
check "auto ends well" grep -q "^best: " "$tmp/auto.out"
check "auto saved the strategy" [ -s "$tmp/auto/strategy.json" ]
# The table lists the measured runs; the strategies not run are counted by reason.
check "auto's table has no row per pruned strategy" bash -c "! grep -q '^dryrun .* pruned ' '$tmp/auto.out'"
check "it counts them by reason instead" grep -Eq "^ +[0-9]+  does at least the work of one measured or skipped" "$tmp/auto.out"
expect 0 "done" "$AA" train "$tmp/model.json" --strategy "$tmp/auto/strategy.json" --threads 1 \
  --out "$tmp/replay2" --losses "$tmp/replay2.txt"
check "replay of auto's strategy gives auto's loss curve" cmp -s "$tmp/auto/losses.txt" "$tmp/replay2.txt"
check "auto left no socket behind" [ -z "$(find /tmp -maxdepth 2 -name planner.sock -newer "$tmp/model.json" 2>/dev/null | grep -v "$tmp")" ]

# A job that fails before any run says so, not "answered from the store"
# (one device offers no ZeRO: nothing to shard over).
expect 1 "^none: job [0-9]+ failed before any run: search: every strategy is excluded" \
  timeout 60 "$AA" auto "$tmp/model.json" --home "$tmp/home-auto-fail" --no-train --include zero1

# --- 9. two executors: dp 2 and ZeRO next to dp 1 -------------------------------
home="$tmp/home-gang"
sock="$home/planner.sock"
P="--planner unix:$sock"
start_planner
start_executor 1; e1=$executor
start_executor 1; e2=$executor
check "two executors register" wait_for 20 executors_up 2
# Status lists the hosts with their executors: both on this one.
expect 0 "hosts: 1" "$AA" status $P
check "the status JSON has one host with both executors" \
  [ "$("$AA" status $P --json | jq_ "[len(h['executors']) for h in d['hosts']]")" = "[2]" ]
expect 0 "job 1 done" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --exhaustive --exclude bf16,fp16,checkpoint
"$AA" query runs --job 1 $P --json >"$tmp/runs9.json"
"$AA" status 1 $P --json >"$tmp/job9.json"
check "the job's hardware is the pool of two" [ "$(jq_ "d['job']['hardware'].endswith('x2')" <"$tmp/job9.json")" = True ]
for z in 0 1 2 3; do
  check "dp 2 at ZeRO $z is measured ok with its figures" [ "$(jq_ "any(r['key'].startswith('dp2.tp1.pp1.z$z.') and \
    r['status'] == 'ok' and r['tokens_per_s'] > 0 and r['step_ms_median'] > 0 and r['peak_bytes'] > 0 \
    and r['peak']['optim'] > 0 for r in d['runs'])" <"$tmp/runs9.json")" = True ]
done
check "dp 1 is measured next to them" \
  [ "$(jq_ "sum(r['key'].startswith('dp1.tp1.pp1.z') and r['status'] == 'ok' for r in d['runs'])" <"$tmp/runs9.json")" = 3 ]
# Context parallelism: each of the two ranks holds half of every sequence
# (seq_len 16: chunks of 4), at every ZeRO stage (sharded over the data x
# context pair) and micro-batches 4, 2, 1, measured through the gang.
check "the context-parallel gangs of two are measured ok" \
  [ "$(jq_ "sum(r['key'].startswith('dp1.tp1.pp1.cp2.') and r['status'] == 'ok' for r in d['runs'])" <"$tmp/runs9.json")" = 12 ]
# pp 2 (the model's 2 blocks, one a stage) with 1f1b and gpipe at mb 2, 1.
# The cost model's bytes are what a CPU rank accounts, to the byte, and a
# pipeline run carries its predicted bubble beside the measured one.
check "every ok dry run keeps its predicted bytes, equal to its measured peak" [ "$(jq_ "all(r['predicted_peak_bytes'] \
  == r['peak_bytes'] for r in d['runs'] if r['status'] == 'ok' and r['kind'] == 'dryrun')" <"$tmp/runs9.json")" = True ]
check "a pipeline run keeps its predicted bubble" [ "$(jq_ "all(0 < r['predicted_bubble'] < 1 for r in d['runs'] \
  if r['key'].startswith('dp1.tp1.pp2.'))" <"$tmp/runs9.json")" = True ]
check "the pipeline gangs of two are measured ok" \
  [ "$(jq_ "sum(r['key'].startswith('dp1.tp1.pp2.') and r['status'] == 'ok' for r in d['runs'])" <"$tmp/runs9.json")" = 4 ]
pp_run=$(jq_ "[r['id'] for r in d['runs'] if r['key'].startswith('dp1.tp1.pp2.')][0]" <"$tmp/runs9.json")
"$AA" query run "$pp_run" $P --json >"$tmp/run9pp.json"
check "a pipeline run keeps both stages' own time breakdown" [ "$(jq_ "sorted(r['pp_rank'] for r in d['ranks']) == [0, 1] \
  and all(r['times_ms']['forward'] > 0 and r['times_ms']['backward'] > 0 for r in d['ranks'])" <"$tmp/run9pp.json")" = True ]
# dp 1 x tp 2, without and with sequence parallelism, at mb 4, 2, 1.
check "the search lists the tensor-parallel gangs of two" \
  [ "$(jq_ "sum(r['key'].startswith('dp1.tp2.pp1.') for r in d['runs'])" <"$tmp/runs9.json")" = 6 ]
check "every run of the gang search is ok, the tensor-parallel gangs included" \
  [ "$(jq_ "all(r['status'] == 'ok' for r in d['runs'])" <"$tmp/runs9.json")" = True ]
check "ZeRO 3 holds less per rank than ZeRO 0" [ "$(jq_ "min(r['peak']['params'] for r in d['runs'] \
  if r['key'].startswith('dp2.tp1.pp1.z3.')) < min(r['peak']['params'] for r in d['runs'] \
  if r['key'].startswith('dp2.tp1.pp1.z0.'))" <"$tmp/runs9.json")" = True ]
expect 0 "wrote $tmp/report9.html: job 1" "$AA" report 1 $P --html "$tmp/report9.html"
check "the job's report marks the best and breaks down its ranks" [ "$(grep -c \
  -e 'id="best-point"' -e '<svg id="rank-breakdown"' -e '<g class="rank">' "$tmp/report9.html")" -ge 3 ]
expect 1 "not found" "$AA" report 99 $P --html "$tmp/report99.html"

# --include zero1: ZeRO stage 1 only (dp 2, and cp 2, whose ZeRO shards
# over the context pair). --from: the strategy first, then the strategies
# at most 2 knobs from it (dp 2 at every ZeRO stage and micro-batch, dp 1
# at mb 1, and cp 2 at zero 1 and mb 1), none farther.
expect 0 "job 2 done" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --refresh --exhaustive \
  --exclude bf16,fp16,checkpoint --include zero1
"$AA" query runs --job 2 $P --json >"$tmp/runs9z1.json"
check "--include zero1 runs ZeRO 1 only" [ "$(jq_ "sorted(r['key'] for r in d['runs']) == \
  ['dp1.tp1.pp1.cp2.z1.fp32.ckpt-none.mb1', 'dp1.tp1.pp1.cp2.z1.fp32.ckpt-none.mb2', \
   'dp1.tp1.pp1.cp2.z1.fp32.ckpt-none.mb4', 'dp2.tp1.pp1.z1.fp32.ckpt-none.mb1', \
   'dp2.tp1.pp1.z1.fp32.ckpt-none.mb2']" <"$tmp/runs9z1.json")" = True ]
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2}, "zero": 1, "micro_batch": 1}\n' \
  >"$tmp/from9.json"
expect 0 "job 3 done" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --refresh --exhaustive \
  --exclude bf16,fp16,checkpoint --from "$tmp/from9.json"
"$AA" query runs --job 3 $P --json >"$tmp/runs9from.json"
check "--from measures the strategy first and its neighbourhood only" [ "$(jq_ "[r['key'] for r in \
  sorted(d['runs'], key=lambda r: r['id'])][0] == 'dp2.tp1.pp1.z1.fp32.ckpt-none.mb1' and len(d['runs']) == 10 \
  and sum(r['key'].startswith('dp1.tp1.pp1.z') for r in d['runs']) == 1 \
  and sum(r['key'] == 'dp1.tp1.pp1.cp2.z1.fp32.ckpt-none.mb1' for r in d['runs']) == 1" <"$tmp/runs9from.json")" = True ]
# A context-parallel strategy file through a submitted job: measured first,
# then trained by the planner's gang of two executors with it; the losses
# are the single process's (relative 1e-4, as section 11's dp 2).
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"context": 2}, "micro_batch": 2}\n' >"$tmp/cp9.json"
expect 0 "job 4 done" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --refresh --from "$tmp/cp9.json" \
  --max-dryruns 1 --train --out "$tmp/cp9"
expect 0 "dp1\.tp1\.pp1\.cp2\.z0\.fp32\.ckpt-none\.mb2" "$AA" strategy show "$tmp/cp9/strategy.json"
"$AA" train "$tmp/model.json" --threads 1 --out "$tmp/single9" --losses "$tmp/single9.txt" >/dev/null 2>&1
check "the cp 2 gang's training wrote one loss per step" [ "$(wc -l <"$tmp/cp9/losses.txt")" = 12 ]
check "cp 2 training through the gang gives the single process's losses (relative 1e-4)" \
  $TOOL losses-close "$tmp/cp9/losses.txt" "$tmp/single9.txt" 1e-4

# --- 10. kill -9 of one rank of a gang -----------------------------------------
kill "$planner"; wait "$planner" 2>/dev/null
start_planner --measured-steps 100000 --dryrun-time-limit 120
check "both executors reconnect" wait_for 20 executors_up 2
"$AA" submit "$tmp/model.json" $P --refresh --exclude bf16,fp16,checkpoint,tensor_parallel --max-dryruns 3 >"$tmp/submit10.txt"
job10=$(grep -Eo '[0-9]+' "$tmp/submit10.txt" | head -1)
pid_of_rank() { "$AA" status $P --json | jq_ "[e['pid'] for e in d['executors'] if e['rank'] == $1 and e['job'] == $job10][0]"; }
gang_runs() { r0=$($TOOL children "$(pid_of_rank 0)"); r1=$($TOOL children "$(pid_of_rank 1)"); [ -n "$r0" ] && [ -n "$r1" ]; }
check "both ranks of the first dry run start" wait_for 30 gang_runs
sleep 1 # into the measured steps
t0=$(date +%s.%N)
kill -9 $r1
wait_for 30 gone "$r0"
secs=$(python3 -c "print('%.2f' % ($(date +%s.%N) - $t0))")
echo "service: the surviving rank exited ${secs} s after the other was killed"
check "the surviving rank exits within 10 s (took ${secs} s)" python3 -c "import sys; sys.exit(not $secs < 10)"
run10_over() { "$AA" query runs --job "$job10" $P --json | jq_ "d['runs'][0]['status']" | grep -q crashed; }
check "the gang's run is recorded crashed" wait_for 10 run10_over
"$AA" query runs --job "$job10" $P --json >"$tmp/runs10.json"
check "the crash names the killed rank and its signal" \
  [ "$(jq_ "d['runs'][0]['error'].startswith('rank 1 (executor ') and 'signal 9' in d['runs'][0]['error']" <"$tmp/runs10.json")" = True ]
check "the job goes on with the next dry run on both ranks" wait_for 30 gang_runs
check "both executors survived their runners" kill -0 "$e1" "$e2"
# kill -9 of rank 1's executor: its rank is lost, rank 0 is aborted; the
# remaining dp 2 strategies cannot run on one executor and are pruned, and
# the search goes on with dp 1 on the survivor.
x1=$(pid_of_rank 1)
kill -9 "$x1"; wait "$x1" 2>/dev/null
check "the survivor of the dead executor's gang is gone within 10 s" wait_for 10 gone "$r0"
runs10() { "$AA" query runs --job "$job10" $P --json >"$tmp/runs10.json"; }
dp1_runs() { runs10 && [ "$(jq_ "d['runs'][-1]['key'].startswith('dp1.') and d['runs'][-1]['status'] == 'running'" \
  <"$tmp/runs10.json")" = True ]; }
check "the job goes on with dp 1 on the surviving executor" wait_for 30 dp1_runs
check "the dead executor's gang run is recorded crashed, naming the rank and the executor" [ "$(jq_ "\
  d['runs'][1]['status'] == 'crashed' and d['runs'][1]['error'].startswith('rank 1 (executor ') and \
  'disconnected' in d['runs'][1]['error']" <"$tmp/runs10.json")" = True ]
# 11: the dp 2 strategies not yet measured, the one whose executor vanished,
# which would have run again, and the pp 2 ones, as their turn comes.
# (The calibrated search goes in predicted order, so which of them have had
# their turn by now varies; none was dispatched.)
check "gangs of two are pruned while one executor is left" [ "$(jq_ "all((r['status'] != 'pruned' and \
  r['key'].startswith('dp1.tp1.pp1.')) or (r['status'] == 'pruned' and ('needs 2 executors' in r['error'] or \
  r['key'].startswith('dp1.'))) for r in sorted(d['runs'], key=lambda r: r['id'])[2:])" <"$tmp/runs10.json")" = True ]
expect 0 "cancelled job $job10" "$AA" cancel "$job10" $P
run10_cancelled() { runs10 && [ "$(jq_ "d['runs'][-1]['status']" <"$tmp/runs10.json")" = cancelled ]; }
check "the running run is recorded cancelled" wait_for 10 run10_cancelled
check "the planner survived the gang's crashes" kill -0 "$planner"
# --time-limit is a hard limit: every dry run here would take hours
# (measured steps 100000), so the search ends at its limit, the running dry
# run killed there and what was not measured pruned with that reason.
t0=$(date +%s.%N)
"$AA" submit "$tmp/model.json" $P --refresh --exclude bf16,fp16,checkpoint --time-limit 3 --wait >"$tmp/submit10t.txt" 2>&1
secs=$(python3 -c "print('%.2f' % ($(date +%s.%N) - $t0))")
echo "service: a search with --time-limit 3 ended after ${secs} s"
check "the search ends within a second of its --time-limit (took ${secs} s)" python3 -c "import sys; sys.exit(not $secs < 4)"
job10t=$(grep -Eo 'job [0-9]+' "$tmp/submit10t.txt" | head -1 | grep -Eo '[0-9]+')
"$AA" query runs --job "$job10t" $P --json >"$tmp/runs10t.json"
check "what the limit cut is recorded with the reason" [ "$(jq_ "any(r['status'] == 'pruned' and \
  'time limit of 3 s' in r['error'] for r in d['runs'])" <"$tmp/runs10t.json")" = True ]
survivor=$e1; [ "$x1" = "$e1" ] && survivor=$e2
check "the surviving executor serves on" kill -0 "$survivor"
kill "$planner" "$e1" "$e2" 2>/dev/null; wait "$planner" "$e1" "$e2" 2>/dev/null

# --- 11. auto --devices cpu:2: a dp 2 best trains as a gang ---------------------
# A limit between the smallest dp 1 peak and the smallest ZeRO-3 one of
# section 9 leaves only dp 2 runs that fit (tensor, pipeline and context
# parallelism, which also split a rank's memory, are left out: this section
# is about data-parallel gangs).
limit=$(jq_ "(min(r['peak_bytes'] for r in d['runs'] if r['key'].startswith('dp1.tp1.pp1.z')) + \
  min(r['peak_bytes'] for r in d['runs'] if r['key'].startswith('dp2.tp1.pp1.z3.'))) // 2" <"$tmp/runs9.json")
check "ZeRO 3 over two ranks needs less memory per rank than one process" \
  [ "$(jq_ "min(r['peak_bytes'] for r in d['runs'] if r['key'].startswith('dp2.tp1.pp1.z3.')) < \
  min(r['peak_bytes'] for r in d['runs'] if r['key'].startswith('dp1.tp1.pp1.z'))" <"$tmp/runs9.json")" = True ]
timeout 300 "$AA" auto "$tmp/model.json" --devices cpu:2 --home "$tmp/home-auto2" --out "$tmp/auto2" \
  --exclude bf16,fp16,checkpoint,tensor_parallel,pipeline_parallel,context_parallel --measured-steps 2 \
  --memory-limit "$limit" \
  >"$tmp/auto2.out" 2>&1
rc=$?
check "auto --devices cpu:2 runs to the end" [ "$rc" = 0 ]
[ "$rc" = 0 ] || tail -20 "$tmp/auto2.out"
check "its best is a dp 2 strategy" grep -q "^best: dp2\." "$tmp/auto2.out"
check "training ran with it, as a gang" grep -Eq "^train +dp2\..* ok " "$tmp/auto2.out"
expect 0 "dp2\.tp1\.pp1" "$AA" strategy show "$tmp/auto2/strategy.json"
check "the gang's training wrote one loss per step" [ "$(wc -l <"$tmp/auto2/losses.txt")" = 12 ]
"$AA" train "$tmp/model.json" --threads 1 --out "$tmp/single" --losses "$tmp/single.txt" >/dev/null 2>&1
check "dp 2 training gives the single process's losses (relative 1e-4)" \
  $TOOL losses-close "$tmp/auto2/losses.txt" "$tmp/single.txt" 1e-4
# `auto --from` a context-parallel file: measured first, then trained as a
# gang of the two executors auto starts; the single process's losses.
timeout 300 "$AA" auto "$tmp/model.json" --devices cpu:2 --home "$tmp/home-autocp" --out "$tmp/autocp" \
  --from "$tmp/cp9.json" --max-dryruns 1 --measured-steps 2 >"$tmp/autocp.out" 2>&1
rc=$?
check "auto --from a cp 2 file runs to the end" [ "$rc" = 0 ]
[ "$rc" = 0 ] || tail -20 "$tmp/autocp.out"
check "auto trained with the cp 2 strategy, as a gang" grep -Eq "^train +dp1\.tp1\.pp1\.cp2\..* ok " "$tmp/autocp.out"
check "cp 2 training through auto gives the single process's losses (relative 1e-4)" \
  $TOOL losses-close "$tmp/autocp/losses.txt" "$tmp/single.txt" 1e-4

# `auto --cpu-backend gloo` passes the option to its planner: the pool's gang
# of 2 (its calibration) meets over gloo on this one host, so the device's
# calibration is stored for gloo (auto's default, shm here, stores it for shm).
timeout 120 "$AA" auto "$tmp/model.json" --devices cpu:2 --threads 1 --cpu-backend gloo --home "$tmp/home-gloo" \
  --out "$tmp/auto-gloo" --no-train --max-dryruns 1 --warmup-steps 0 --measured-steps 1 >"$tmp/auto-gloo.out" 2>&1
rc=$?
check "auto --cpu-backend gloo runs to the end" [ "$rc" = 0 ]
[ "$rc" = 0 ] || tail -20 "$tmp/auto-gloo.out"
calib_backends() { # calib_backends STORE: the backends of its calibrations
  python3 -c "import sqlite3, sys
print(' '.join(b for (b,) in sqlite3.connect(sys.argv[1]).execute('SELECT backend FROM calibrations')))" "$1"
}
check "its gang met over gloo: the calibration is gloo's" [ "$(calib_backends "$tmp/home-gloo/store.db")" = gloo ]

# --- 12. the calibrated search ---------------------------------------------------
# A job first has its pool measure the model's ops (its calibration, stored
# per device), dry-runs in predicted order, stops once no prediction can
# beat the best measured, and re-measures leaders within the noise; the
# next job of the model reuses the stored calibration.
home="$tmp/home-calib"
sock="$home/planner.sock"
P="--planner unix:$sock"
log0=$(wc -l <"$tmp/planner.log")
start_planner
start_executor 1
check "an executor registers for the calibrated search" wait_for 20 executors_up 1
expect 0 "job 1 done" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --exclude fp16
tail -n +"$((log0 + 1))" "$tmp/planner.log" >"$tmp/planner12.log"
check "the first job calibrates on its executor" grep -q "job 1: calibrating on 1 executor (ops of the model)" "$tmp/planner12.log"
check "and stores the calibration" grep -Eq "job 1: calibration of cpu:.* stored \([0-9]+ ops, 0 links, [0-9.]+ s\)" "$tmp/planner12.log"
"$AA" query runs --job 1 $P --json >"$tmp/runs12.json"
valid=$(grep -Eo "job 1: [0-9]+ strategies, [0-9]+ valid" "$tmp/planner12.log" | grep -Eo "[0-9]+ valid" | grep -Eo "[0-9]+")
measured=$(jq_ "len(set(r['key'] for r in d['runs'] if r['status'] != 'pruned'))" <"$tmp/runs12.json")
echo "service: the calibrated search measured $measured of $valid strategies"
check "it measures fewer strategies than an exhaustive search ($measured of $valid)" [ "$measured" -lt "$valid" ]
check "every dry run carries the calibrated prediction" [ "$(jq_ "all(r['predicted_tokens_per_s'] > 0 for r in d['runs'] \
  if r['status'] == 'ok')" <"$tmp/runs12.json")" = True ]
verdict=$("$AA" status 1 $P --json | jq_ "d['job']['note']")
echo "service: $verdict"
check "the job says how sure its pick is" grep -Eq "× the runner-up|within the noise of|the only strategy measured ok" <<<"$verdict"
check "the log says it too" grep -Eq "job 1: best .*(× the runner-up|within the noise of|the only strategy)" "$tmp/planner12.log"
expect 0 "job 2 done" timeout 300 "$AA" submit "$tmp/model.json" $P --wait --refresh --exclude fp16
tail -n +"$((log0 + 1))" "$tmp/planner.log" >"$tmp/planner12.log"
check "the second job uses the stored calibration" grep -Eq "job 2: using the stored calibration of cpu:.* \(measured [0-9T:Z-]+\)" "$tmp/planner12.log"
check "and does not calibrate again" bash -c "! grep -q 'job 2: calibrating' '$tmp/planner12.log'"
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null

# An executor killed while it calibrates fails the calibration, not the job,
# which goes on without one on a new executor; a cancel during a calibration
# ends it as it ends a dry run.
home="$tmp/home-calib2"
sock="$home/planner.sock"
P="--planner unix:$sock"
log0=$(wc -l <"$tmp/planner.log")
start_planner
start_executor 1
check "an executor registers for the calibration's failures" wait_for 20 executors_up 1
"$AA" submit "$tmp/model.json" $P --exclude fp16,checkpoint >/dev/null
in_log() { tail -n +"$((log0 + 1))" "$tmp/planner.log" | grep -Eq "$1"; }
check "the job calibrates" wait_for 30 in_log "job 1: calibrating on 1 executor"
check "in a runner" wait_for 30 runner_of "$executor"
kill -9 "$executor"; wait "$executor" 2>/dev/null
check "the dead executor fails the calibration, not the job" \
  wait_for 10 in_log "job 1: calibration failed: rank 0 \(executor [0-9]+\) ended crashed.*the search goes on without one"
start_executor 1
job_done() { "$AA" status "$1" $P --json | jq_ "d['job']['status']" | grep -q "$2"; }
check "the job is done on a new executor without a calibration" wait_for 120 job_done 1 done
"$AA" submit "$tmp/model.json" $P --refresh --exclude fp16,checkpoint >/dev/null
check "the next job calibrates, none being stored" wait_for 30 in_log "job 2: calibrating on 1 executor"
check "in a runner" wait_for 30 runner_of "$executor"
expect 0 "cancelled job 2" "$AA" cancel 2 $P
check "a cancel ends the calibration" wait_for 10 in_log "job 2: calibration cancelled: cancelled by a client"
check "and its runner" wait_for 10 gone "$r"
check "the job is cancelled" wait_for 10 job_done 2 cancelled
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null

echo "service: $pass passed, $fail failed"
[ "$fail" = 0 ]
