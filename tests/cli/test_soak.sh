#!/usr/bin/env bash
# Soak (bounded): a planner with two executors serves good submits while a
# client runs every abuse of tests/cli/test_daemon_peers.sh and
# test_daemon_hostile.sh (a silent flood of TCP connections from one
# address, token holders holding 16 MiB frames one byte short past a 17 MiB
# input budget) and malformed frames, round after round for 30 s, on the
# unix socket and on TCP. At the
# end: the planner and both executors are alive, the planner's resident
# memory grew by less than 48 MiB over the run and is under 300 MiB (ASan
# build: an idle planner is ~186 MiB, 62 of them the CUDA libraries' pages
# and ~110 ASan's own), every good job ended done, and no job is left
# running, queued or waiting.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=4"

"$AA" data synth --out "$tmp/data" --bytes 100000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
for d in 32 48 64; do
  cat >"$tmp/m$d.json" <<JSON
{"name": "soak$d", "model": {"n_layer": 1, "n_head": 2, "d_model": $d, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 2, "steps": 4, "lr": 0.003, "seed": 7, "eval_every": 0},
 "data": {"train": "$tmp/data/train.bin", "val": "$tmp/data/val.bin"}}
JSON
done

home="$tmp/home"
export AUTOACCEL_HOME="$home"
P="--planner unix:$home/planner.sock"
port=$($TOOL free-port)
"$AA" planner --home "$home" --listen "127.0.0.1:$port" --heartbeat-ms 100 --dead-after-ms 3000 --measured-steps 2 \
  --hello-timeout-ms 1000 --frame-timeout-ms 1500 --write-queue-max 1M --input-buffer-max 17M >"$tmp/planner.log" 2>&1 &
planner=$!
pids+=("$planner")
planner_up "$tmp/planner.log"
for i in 1 2; do
  start_executor 1
  ex[$i]=$executor
done
# Exactly two: an executor counted twice (one that registered again) fails here.
two_executors() { [ "$("$AA" status $P --json | jq_ "len(d['executors'])")" = 2 ]; }
check "two executors register" wait_for 20 two_executors
rss0=$(rss_kb "$planner")

$PEER soak "unix:$home/planner.sock" "tcp:127.0.0.1:$port" "$(head -1 "$home/token")" 30 >"$tmp/soak.out" 2>&1 &
soak=$!
pids+=("$soak")
good=0 ok=0
t0=$SECONDS
while [ $((SECONDS - t0)) -lt 26 ]; do
  for d in 32 48 64; do
    extra=(); [ $((good % 3)) = 0 ] && extra=(--refresh); [ $((good % 4)) = 1 ] && extra+=(--train)
    if timeout 120 "$AA" submit "$tmp/m$d.json" $P --wait --exclude fp16,checkpoint "${extra[@]}" >"$tmp/good$good.out" 2>&1; then
      ok=$((ok + 1))
    else
      echo "FAIL: good submit $good (${extra[*]}) did not end well:"; tail -3 "$tmp/good$good.out"
    fi
    good=$((good + 1))
  done
done
wait "$soak"
cat "$tmp/soak.out"
echo "soak: $ok of $good good submits ended done meanwhile"
check "every good submit ended done ($ok of $good)" [ "$ok" = "$good" ]
check "the abuse ran for the whole time" grep -q "^soak: [1-9][0-9]* rounds" "$tmp/soak.out"
check "the flood's silent connections were displaced" grep -q "made room for a new connection: closed tcp" "$tmp/planner.log"
check "the partial frames past the input budget were closed" grep -q "of unfinished input held for all peers, past the bound of 17825792" "$tmp/planner.log"
check "the planner is alive" kill -0 "$planner"
check "both executors are alive" kill -0 "${ex[1]}" "${ex[2]}"
rss=$(rss_kb "$planner")
echo "soak: planner RSS at the end: $rss KiB ($rss0 KiB before the soak)"
# Growth is what a leak or an unbounded per-peer buffer shows as; the
# absolute figure includes the idle planner's pages, which move with the
# libraries and ASan's allocator, not with what peers do.
check "the planner's resident memory grew by less than 48 MiB ($((rss - rss0)) KiB)" [ $((rss - rss0)) -lt 49152 ]
check "the planner's resident memory is under 300 MiB ($rss KiB)" [ "$rss" -lt 307200 ]
"$AA" status $P --json >"$tmp/status.json"
check "no job is left running, queued or waiting" \
  [ "$(jq_ "d['running'] is None and d['queue'] == [] and d['waiting'] == [] and all(j.get('status') in ('done',) for j in d['jobs'])" <"$tmp/status.json")" = True ]
check "both executors are still registered" [ "$(jq_ "len(d['executors'])" <"$tmp/status.json")" = 2 ]

echo "soak: $pass passed, $fail failed"
[ "$fail" = 0 ]
