#!/usr/bin/env bash
# What a peer can do to a live planner (and a planner to an executor), with
# real processes and raw sockets (tests/cli/peer_tool.py); docs/service.md
# "Limits". The planner runs with a descriptor limit of 100, small limits,
# and a TCP listener.
#
#  1. Peers that close without reading (one request, pipelined requests and
#     a reset, a shut read side) raise no SIGPIPE: the planner lives, and the
#     job it was running goes on. An executor whose planner stops reading
#     reconnects.
#  2. A client that pipelines requests and never reads is closed once its
#     unread replies pass --write-queue-max; the planner's memory stays put.
#  3. Before hello a frame may be 4 KiB: 40 peers declaring 16 MiB are
#     refused before anything is buffered; a hello trickled a byte at a time
#     is cut at --hello-timeout-ms, a frame trickled after hello at
#     --frame-timeout-ms; 150 silent TCP connections from one address keep
#     only that address's share of the waiting slots (8), each newcomer
#     displacing the oldest; 150 that say hello against a descriptor limit
#     of 100 are capped (each refusal logged) and the owner still gets in on
#     the unix socket; at most 64 submits wait for a first executor.
#  4. TCP needs a token, on loopback too: one is made in the state directory
#     (mode 0600); the CLI finds it there; a hello without it is refused.
#     --listen decides on the resolved address: "0" (0.0.0.0) is refused, and
#     status shows the address listened on.
#  5. The relay (a gang's store, docs/service.md "Relay"), with three fake
#     executors on raw sockets: only the gang's ranks may set and get its
#     keys (a stranger is refused and stays connected), a get waits for its
#     set, a key is set once, the store holds 4 x world + 16 keys, 16
#     waiting gets per rank (past them the rank is closed), a 64 KiB + 1
#     value is a bad frame, and the store ends with its run, its waiting
#     gets unanswered. Then end to end: a planner with --cpu-backend gloo
#     and two real executors, whose ranks form their gloo group through
#     the planner's relay and run the job's dry run.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
# Freed memory goes back for reuse at once, so RSS shows what is held.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=4"

"$AA" data synth --out "$tmp/data" --bytes 100000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/model.json" <<'JSON'
{"name": "peers", "model": {"n_layer": 1, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 2, "steps": 3, "lr": 0.003, "seed": 7, "eval_every": 0},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON

home="$tmp/home"
export AUTOACCEL_HOME="$home"
sock="$home/planner.sock"
P="--planner unix:$sock"
port=$($TOOL free-port)
T="tcp:127.0.0.1:$port"
log="$tmp/planner.log"
(ulimit -n 100 && exec "$AA" planner --home "$home" --listen "127.0.0.1:$port" --heartbeat-ms 100 \
  --hello-timeout-ms 1000 --frame-timeout-ms 1500 --write-queue-max 1M --measured-steps 100000 >"$log" 2>&1) &
planner=$!
pids+=("$planner")
planner_up "$log"
start_executor 1
check "an executor registers" wait_for 20 executors_up 1

# --- 4 first: the token, made for TCP ------------------------------------------------
st=$(stat -c %a "$home/token" 2>/dev/null)
check "the planner made a TCP token in its state directory, mode 0600 (got '$st')" [ "$st" = 600 ]
check "the state directory is mode 0700" [ "$(stat -c %a "$home")" = 700 ]
expect 0 "error code=-11 .*missing token" $TOOL frame "$T" no-token
expect 0 "planner" "$AA" status --planner "$T"
expect 1 "permission denied" env AUTOACCEL_HOME="$tmp/elsewhere" "$AA" status --planner "$T"
check "status shows the TCP address listened on" \
  [ "$("$AA" status $P --json | jq_ "d['planner']['tcp']")" = "$T" ]
expect 1 "resolves to 0.0.0.0, which listens on every interface" \
  "$AA" planner --home "$tmp/home0" --listen "0:$($TOOL free-port)"

# --- 1. no SIGPIPE ------------------------------------------------------------------
"$AA" submit "$tmp/model.json" $P --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1 >"$tmp/submit.txt"
job=$(grep -Eo '[0-9]+' "$tmp/submit.txt" | head -1)
job_running() { [ "$("$AA" status "$job" $P --json | jq_ "d['job']['status']")" = running ]; }
check "a job runs" wait_for 30 job_running
expect 0 "sigpipe: done" $PEER sigpipe "unix:$sock"
expect 0 "sigpipe: done" $PEER sigpipe "$T" "$(head -1 "$home/token")"
check "the planner survives peers that close without reading" kill -0 "$planner"
check "its job was not interrupted" job_running
expect 0 "cancelled job $job" "$AA" cancel "$job" $P

fake="$tmp/fake.sock"
$PEER fake-planner "$fake" 20 >"$tmp/fake.out" 2>&1 &
fp=$!
wait_for 10 test -S "$fake"
"$AA" executor --planner "unix:$fake" --threads 1 >"$tmp/executor2.log" 2>&1 &
ex2=$!
pids+=("$ex2")
wait "$fp"
check "an executor whose planner stops reading reconnects" grep -q "reconnected" "$tmp/fake.out"
check "and is alive" kill -0 "$ex2"
kill "$ex2" 2>/dev/null

# --- 2. the write-queue bound ---------------------------------------------------------
before=$(rss_kb "$planner")
expect 0 "no-read: closed by the planner" $PEER no-read "unix:$sock" 30
after=$(rss_kb "$planner")
echo "peers: planner RSS $before KiB before the client that never reads, $after KiB after"
# The bound is 1 MiB; 8 MiB leaves room for the allocator's own slack (a
# queued 200-byte reply used to hold an 8 KiB buffer: 40 MiB here).
check "the planner grew by less than 8 MiB ($before -> $after KiB)" [ $((after - before)) -lt 8192 ]
check "the log names the peer that did not read" grep -q "does not read its replies" "$log"

# --- 3. before hello, and deadlines -----------------------------------------------------
before=$(rss_kb "$planner")
expect 0 "big-hello: 40 of 40 refused" $PEER big-hello "$T" 40
after=$(rss_kb "$planner")
check "40 peers declaring 16 MiB cost less than 16 MiB ($before -> $after KiB)" [ $((after - before)) -lt 16384 ]
expect 0 "trickle: closed after [0-9.]+ s: error code=-12 .*no hello in time" $PEER trickle "$T" 0.3
check "the log says who sent no hello" grep -q "sent no hello within 1000 ms" "$log"
expect 0 "trickle: closed after [0-9.]+ s: error code=-12 .*took too long" $PEER trickle "unix:$sock" 0.3 after-hello
check "the log says whose frame took too long" grep -q "has not finished it (limit 1500 ms)" "$log"

check "the planner is alive after all of it" kill -0 "$planner"

# The connection cap, on a planner of its own with the default hello deadline
# (10 s), so silent connections stay: 100 descriptors leave it 68 connections,
# 52 of them for TCP.
home2="$tmp/home2"
port2=$($TOOL free-port)
log2="$tmp/planner2.log"
(ulimit -n 100 && exec "$AA" planner --home "$home2" --listen "127.0.0.1:$port2" >"$log2" 2>&1) &
planner2=$!
pids+=("$planner2")
P2="--planner unix:$home2/planner.sock"
planner_up "$log2" "planner 2" "$P2"
# Silent ones first: one source holds 64 / 8 = 8 of the waiting slots, and
# each newcomer beyond them displaces that source's oldest silent one once it
# is past its quarter-second grace; until then newcomers are let in over the
# share, and at the TCP cap (52) the oldest goes whatever its age. None is
# refused; how many wait at the end (8 to 52) depends on how fast the
# planner accepted them.
$PEER hold "tcp:127.0.0.1:$port2" 150 1 >"$tmp/hold.out" 2>&1
cat "$tmp/hold.out"
silent_ok() {
  [[ $(cat "$tmp/hold.out") =~ ^hold:\ ([0-9]+)\ admitted,\ 0\ refused,\ ([0-9]+)\ displaced ]] &&
    [ "${BASH_REMATCH[1]}" -ge 8 ] && [ "${BASH_REMATCH[1]}" -le 52 ] &&
    [ $((BASH_REMATCH[1] + BASH_REMATCH[2])) = 150 ]
}
check "150 silent connections from one address: none refused, 8 to 52 wait, the rest displaced" silent_ok
# Token holders say hello and keep their connections: the TCP cap is hard.
$PEER hold "tcp:127.0.0.1:$port2" 150 8 "$(head -1 "$home2/token")" >"$tmp/hold2.out" 2>&1 &
hold=$!
pids+=("$hold")
held() { grep -q "^hold:" "$tmp/hold2.out"; }
check "150 TCP connections that say hello were opened" wait_for 20 held
cat "$tmp/hold2.out"
check "52 of the 150 were admitted" grep -q "^hold: 52 admitted, 98 refused, 0 displaced" "$tmp/hold2.out"
expect 0 "planner" "$AA" status $P2
check "the owner gets in on the unix socket meanwhile" [ "$("$AA" status $P2 --json | jq_ "d['planner']['tcp']")" = "tcp:127.0.0.1:$port2" ]
check "each refusal is logged with its reason" \
  grep -q "refused a connection from tcp 127.0.0.1:[0-9]*: TCP connections are at their maximum" "$log2"
counted() { grep -q "refused [0-9]* more connections in the last second" "$log2"; }
check "a flood of refusals is logged as a count" wait_for 5 counted
kill "$hold" 2>/dev/null
# Submits wait in memory for a first executor; at most 64 of them.
/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['data']={'train': sys.argv[2]}; print(json.dumps(d))" \
  "$tmp/model.json" "$tmp/data/train.bin" >"$tmp/abs.json"
expect 0 "pending: 6 of 70 submits refused" $PEER pending "unix:$home2/planner.sock" 70 "$tmp/abs.json"
check "the planner is alive after all of it" kill -0 "$planner2"

# --- 5. the relay ---------------------------------------------------------------------
home3="$tmp/home3"
log3="$tmp/planner3.log"
"$AA" planner --home "$home3" --heartbeat-ms 500 >"$log3" 2>&1 &
planner3=$!
pids+=("$planner3")
P3="--planner unix:$home3/planner.sock"
planner_up "$log3" "planner 3" "$P3"
$PEER relay "unix:$home3/planner.sock" 60 >"$tmp/relay.out" 2>&1 &
relay=$!
pids+=("$relay")
fakes_up() { grep -q "^relay: executors .* up" "$tmp/relay.out"; }
check "three fake executors said hello" wait_for 10 fakes_up
# zero1 needs dp > 1: every candidate (and the calibration first) is a gang of the two.
expect 0 "submitted job" "$AA" submit "$tmp/abs.json" $P3 --refresh --include zero1 --max-dryruns 1
wait "$relay"
cat "$tmp/relay.out"
r() { grep -q "^relay: $1" "$tmp/relay.out"; }
check "a gang of the two fake executors got a run" r "gang run [0-9]* of job"
check "a stranger to the run can neither set nor get (and stays connected)" \
  r "non-member set refused, get refused: kv_get: executor [0-9]* is not a rank of a running gang's run"
check "a get waits for its key and the set answers it, bytes intact" \
  r "a get waited (no early answer) and was answered by the set: b'10.0.0.2.x00.xff'"
check "a set key is answered at once" r "a get of a set key is answered at once: b'10"
check "a key is set once" r "a second set of a key with another value: .*is already set (a key is set once)"
check "the store holds 4 x world + 16 keys" r "key 25 of the run: .*is full (24 keys of 24"
check "16 gets may wait per rank; the 17th closes it" \
  r "17 waiting gets: kv_get: more than 16 gets .*waiting at once; connection closed; closed"
check "a value over 64 KiB is a bad frame" r "a 65537-byte value: kv_set.value: 65537 bytes, longer than the limit 65536"
check "the store ends with its run" r "aborted yes; after the run the store is gone: kv_get: executor"
check "its waiting gets end with it" grep -q "ended with 17 gets of its store unanswered" "$log3"
check "the planner is alive after all of it" kill -0 "$planner3"

home4="$tmp/home4"
log4="$tmp/planner4.log"
"$AA" planner --home "$home4" --cpu-backend gloo >"$log4" 2>&1 &
pids+=("$!")
P="--planner unix:$home4/planner.sock"
planner_up "$log4" "planner 4"
start_executor 1
start_executor 1
check "two executors register" wait_for 20 executors_up 2
"$AA" submit "$tmp/abs.json" $P --refresh --include zero1 --max-dryruns 1 >"$tmp/submit4.txt"
job4=$(grep -Eo '[0-9]+' "$tmp/submit4.txt" | head -1)
# --max-dryruns 1 and zero1 (dp > 1): one dry run, a gang of the two.
gloo_dryrun() { grep -Eo "job $job4: dry run .* \(run [0-9]+\), rendezvous gloo:/aa-[^ ]*" "$log4"; }
check "the planner sent a dry run to a gloo gang" wait_for 60 gloo_dryrun
run4=$(gloo_dryrun | sed -E 's/.*\(run ([0-9]+)\).*/\1/')
run_status() { "$AA" query runs --job "$job4" $P --json | jq_ "[r['status'] for r in d['runs'] if r['id'] == ${run4:-0}]"; }
run_over() { run_status | grep -Eq "'(ok|error|oom|crashed|timeout|cancelled)'"; }
check "the dry run ended" wait_for 120 run_over
if "$AA" query runs --job "$job4" $P --json | grep -q "built without gloo"; then
  echo "peers: the gloo gang is skipped: built without gloo"
else
  check "it ended ok: its ranks met through the planner's relay (got $(run_status))" \
    [ "$(run_status)" = "['ok']" ]
fi

echo "peers: $pass passed, $fail failed"
[ "$fail" = 0 ]
