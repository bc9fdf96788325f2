#!/bin/bash
# Two hosts on one machine: gangs across hosts on gloo, placed by topology.
#
# The test makes two network namespaces (its "hosts" h1 and h2) joined by a
# veth pair of its own, with addresses only inside them (10.231.<n>.1/.2,
# <n> from the pid), and removes them on exit. The planner listens on TCP in
# h1; executors say --host h1 / h2 and listen for their gangs on their
# namespace's address. Every peer dials over TCP with the token.
#
#  1. A peer without the token cannot register, submit or query over TCP
#     (from the other host).
#  2. One executor per host: a dp2 job (--from a dp2 strategy) dry-runs and
#     trains on a gang that spans both hosts over gloo; its losses equal the
#     single process's within 1e-5 relative (fp32 sums of the same terms in
#     another order: the data group's mean of two micro-batch gradients).
#  3. Two executors per host: dp2 x tp2 trains with each tensor pair inside
#     one host (the planner log names the hosts of every rank); same losses.
#  4. A host goes away mid-run: h2's executors are killed while a long
#     training runs; h1's ranks end within seconds and the run is recorded
#     crashed.
#
# Skips (exit 0, saying why) without the privileges to make namespaces.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
n=$(($$ % 200 + 20))
ns1="aa-h1-$$"
ns2="aa-h2-$$"
a1="10.231.$n.1"
a2="10.231.$n.2"
hosts_cleanup() { # the processes service_lib's cleanup kills, then whatever still runs on a "host"
  for ns in "$ns1" "$ns2"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  cleanup
  ip netns del "$ns1" 2>/dev/null
  ip netns del "$ns2" 2>/dev/null
}
trap hosts_cleanup EXIT

if ! ip netns add "$ns1" 2>"$tmp/netns.err"; then
  echo "skipped: cannot make a network namespace here ($(head -1 "$tmp/netns.err")); the test needs root"
  exit 0
fi
ip netns add "$ns2"
ip link add "aa$$a" netns "$ns1" type veth peer name "aa$$b" netns "$ns2" || {
  echo "FAIL: no veth pair"; exit 1; }
ip -n "$ns1" addr add "$a1/24" dev "aa$$a"
ip -n "$ns2" addr add "$a2/24" dev "aa$$b"
for ns in "$ns1" "$ns2"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns1" link set "aa$$a" up
ip -n "$ns2" link set "aa$$b" up
in1() { ip netns exec "$ns1" "$@"; }
in2() { ip netns exec "$ns2" "$@"; }

home="$tmp/home"
mkdir -m 700 "$home"
port=7070
T="tcp:$a1:$port"
ip netns exec "$ns1" "$AA" planner --home "$home" --listen "$a1:$port" --heartbeat-ms 200 --dead-after-ms 2000 \
  >"$tmp/planner.log" 2>&1 &
pids+=($!)
P="--planner $T --token-file $home/token"
wait_for 20 in1 "$AA" status $P >/dev/null || { echo "FAIL: the planner did not come up"; cat "$tmp/planner.log"; exit 1; }
check "h2 reaches the planner on h1 over the veth pair" in2 "$AA" status $P

# --- 1. the token, from the other host -----------------------------------------------
echo "not-the-token" >"$tmp/bad.token"
chmod 600 "$tmp/bad.token"
expect 1 "token" in2 "$AA" status --planner "$T" --token-file "$tmp/bad.token"
expect 1 "token" in2 "$AA" submit "$SRC/examples/tiny/model.json" --planner "$T" --token-file "$tmp/bad.token"
expect 1 "token" in2 "$AA" query jobs --planner "$T" --token-file "$tmp/bad.token"
expect 1 "token" in2 timeout 20 "$AA" executor --planner "$T" --token-file "$tmp/bad.token" --threads 1
check "no executor registered without the token" \
  [ "$(in1 "$AA" status $P --json | jq_ "len(d['executors'])")" = 0 ]

# start_on NS HOST ADDR: an executor in namespace NS that says it is HOST.
start_on() {
  ip netns exec "$1" "$AA" executor $P --threads 1 --host "$2" --address "$3" >>"$tmp/executor-$2.log" 2>&1 &
  pids+=($!)
  last=$!
}
executors_up() { [ "$(in1 "$AA" status $P --json | jq_ "len(d['executors'])")" -ge "$1" ]; }

# A small model; global batch 4 = dp2 x micro-batch 2.
"$AA" data synth --out "$tmp/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
model() { # model FILE STEPS
  cat >"$1" <<JSON
{"name": "mh", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": $2, "lr": 0.003, "seed": 7, "eval_every": 0, "eval_batches": 2},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
}
model "$tmp/model.json" 6
strat() { # strat FILE DP TP: an fp32 strategy file of that layout
  /usr/bin/python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
dp, tp = int(sys.argv[2]), int(sys.argv[3])
json.dump({"format": "autoaccel-strategy", "version": 1, "parallel": {"data": dp, "tensor": tp, "pipeline": 1},
           "zero": 0, "amp": "fp32", "checkpoint": "none", "micro_batch": 4 // dp}, open(sys.argv[1], "w"))
EOF
}
same_losses() { # same_losses A B: equal step count, every loss within 1e-5 relative
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
ok = len(a) == len(b) and len(a) > 0 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))
print("losses", a, b)
sys.exit(0 if ok else 1)
EOF
}
"$AA" train "$tmp/model.json" --threads 1 --out "$tmp/single" --losses "$tmp/single.txt" >/dev/null ||
  echo "FAIL: the single-process run"

# --- 2. dp2 across the two hosts ----------------------------------------------------------
start_on "$ns1" h1 "$a1"
start_on "$ns2" h2 "$a2"
check "one executor per host registers" wait_for 30 executors_up 2
expect 0 "h1" in1 "$AA" status $P
strat "$tmp/dp2.json" 2 1
expect 0 "best" in1 timeout 300 "$AA" submit "$tmp/model.json" $P --wait --train --out "$tmp/out-dp2" \
  --from "$tmp/dp2.json" --max-dryruns 1 --refresh
check "the dp2 gang met over gloo" grep -q "rendezvous gloo:" "$tmp/planner.log"
check "dp2 across hosts: the single process's losses" same_losses "$tmp/single.txt" "$tmp/out-dp2/losses.txt"
# hw_ends TAIL: the newest job's hardware fingerprint ends with TAIL.
hw_ends() { [[ "$(in1 "$AA" query jobs $P --json | jq_ "d['jobs'][0]['hardware']")" == *"$1" ]]; }
check "its hardware names the pool's 2 hosts (x2@2)" hw_ends MiBx2@2

# --- 3. dp2 x tp2, each tensor pair inside a host -------------------------------------------
start_on "$ns1" h1 "$a1"
start_on "$ns2" h2 "$a2"
check "two executors per host register" wait_for 30 executors_up 4
strat "$tmp/dp2tp2.json" 2 2
expect 0 "best" in1 timeout 300 "$AA" submit "$tmp/model.json" $P --wait --train --out "$tmp/out-dp2tp2" \
  --from "$tmp/dp2tp2.json" --max-dryruns 1 --refresh
check "dp2 x tp2: the single process's losses" same_losses "$tmp/single.txt" "$tmp/out-dp2tp2/losses.txt"
check "its hardware is 2 hosts x 2 (x4@2), not one host's x4" hw_ends MiBx4@2

# --- 4. a host goes away mid-run -------------------------------------------------------------
# 4a. Silent: h2's link goes down, so no connection closes; the planner
#     hears no heartbeat for --dead-after-ms (2 s), drops h2's executors
#     and aborts the gang's ranks on h1. 4b. Dead: h2's processes are
#     killed; their connections close at once.
model "$tmp/long.json" 100000
strat "$tmp/dp4.json" 4 1
crashed_runs() { in1 "$AA" query runs $P --json | jq_ "len([r for r in d['runs'] if r['kind'] == 'train' and r['status'] == 'crashed'])"; }
h1_runners() { pgrep -f "autoaccel executor .*--host h1" | xargs -r -n1 pgrep -P | wc -l; }
lose_h2() { # lose_h2 HOW N: start a long dp4 training, take h2 away by HOW mid-run, check its end
  how=$1 want=$2
  ip netns exec "$ns1" "$AA" submit "$tmp/long.json" $P --wait --train --out "$tmp/out-$how" \
    --from "$tmp/dp4.json" --max-dryruns 1 --refresh >"$tmp/long-$how.out" 2>&1 &
  pids+=($!)
  check "$how: the long dp4 training runs across both hosts" wait_for 120 training
  sleep 1
  local t0=$SECONDS
  if [ "$how" = silent ]; then ip -n "$ns2" link set "aa$$b" down; else ip netns pids "$ns2" | xargs -r kill -9; fi
  check "$how: the training run is recorded crashed" wait_for 30 crashed
  check "$how: within seconds ($((SECONDS - t0)) s, dead-after 2 s)" [ $((SECONDS - t0)) -le 12 ]
  check "$how: h1's ranks have ended" wait_for 10 no_runners
  # The job would train again once it has four executors (a run that lost
  # its executor runs once more): end it here.
  local job
  job=$(grep -Eo '^job [0-9]+' "$tmp/long-$how.out" | head -1 | cut -d' ' -f2)
  expect 0 "cancelled job $job" in1 "$AA" cancel "$job" $P
}
training() { grep -q "training" "$tmp/long-$how.out" && [ "$(h1_runners)" -ge 2 ]; }
crashed() { [ "$(crashed_runs)" -ge "$want" ]; }
no_runners() { [ "$(h1_runners)" = 0 ]; }
lose_h2 silent 1
ip -n "$ns2" link set "aa$$b" up
check "h2's executors come back when its link does" wait_for 60 executors_up 4
lose_h2 killed 2
check "the planner is still up" in1 "$AA" status $P

echo "multihost: $pass passed, $fail failed"
[ "$fail" = 0 ]
