#!/usr/bin/env bash
# The second round of hardening (docs/service.md "Files and permissions",
# "Limits", "Signals"): what a hostile local user or an operator's mistake
# could still do, each played with real processes.
#
#  1. A symbolic link planted at the store's path (or at its -wal, or at the
#     token's) is refused at start, and the file it points to keeps its mode
#     and content: for a planner run as root and one run as nobody.
#  2. A FIFO planted at the token's path is refused at once by the planner
#     (before it listens) and by the CLI, neither hangs.
#  3. SIGHUP: a planner and an executor started from a terminal that then
#     closes stop in order (exit 0, the socket removed, the log says why); a
#     planner started under nohup ignores SIGHUP and goes on serving.
#  4. A silent flood of TCP connections from one address (80 kept open, 64
#     more every second) does not lock out a token holder nor an executor on
#     TCP: each newcomer displaces the oldest silent connection.
#  5. 20 token holders each hold a 16 MiB frame one byte short: the planner
#     closes the largest holders once all of them hold more than
#     --input-buffer-max, and its resident memory stays within that bound.
#  6. --listen on an address this host does not have fails without leaving
#     a token file behind.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=4"
chmod 0755 "$tmp" # section 1 runs a planner as nobody under it

mode_of() { stat -c %a "$1"; }

# --- 1. links at the store's and the token's paths ------------------------------------------
h1="$tmp/h1"
mkdir -p "$h1"
chmod 0700 "$h1"
echo "somebody's notes" >"$tmp/x.txt"
chmod 0644 "$tmp/x.txt"
ln -s "$tmp/x.txt" "$h1/store.db"
expect 1 "store.db is a symbolic link" env AUTOACCEL_HOME="$h1" timeout 10 "$AA" planner
check "the link's target keeps its mode 0644 (got $(mode_of "$tmp/x.txt"))" [ "$(mode_of "$tmp/x.txt")" = 644 ]
check "and its content" grep -qx "somebody's notes" "$tmp/x.txt"
check "no socket is left behind" [ ! -e "$h1/planner.sock" ]
rm "$h1/store.db"
ln -s "$tmp/x.txt" "$h1/store.db-wal"
expect 1 "store.db-wal is a symbolic link" env AUTOACCEL_HOME="$h1" timeout 10 "$AA" planner
check "a link at the -wal is not followed either" [ "$(mode_of "$tmp/x.txt")" = 644 ]
rm "$h1/store.db-wal"
shared="$tmp/shared" # a --store directory others may write to
mkdir -p "$shared"
chmod 1777 "$shared"
ln -s "$tmp/x.txt" "$shared/store.db"
expect 1 "is a symbolic link" timeout 10 "$AA" planner --home "$h1" --store "$shared/store.db"
check "--store in a shared directory: the target keeps its mode" [ "$(mode_of "$tmp/x.txt")" = 644 ]
ln -s "$tmp/x.txt" "$h1/token"
expect 1 "token file .*token is a symbolic link" timeout 10 "$AA" planner --home "$h1" --listen "127.0.0.1:$($TOOL free-port)"
check "a link at the token is not followed" [ "$(mode_of "$tmp/x.txt")" = 644 ]
rm "$h1/token"

if can_be_nobody; then
  nh="$tmp/nh"
  mkdir -p "$nh" "$tmp/nobodydir"
  chown 65534:65534 "$nh" "$tmp/nobodydir"
  chmod 0700 "$nh"
  nt="$tmp/nobodydir/notes.txt"
  as_nobody sh -c "echo notes >'$nt' && chmod 0644 '$nt' && ln -s '$nt' '$nh/store.db'"
  expect 1 "store.db is a symbolic link" as_nobody timeout 10 "$AA" planner --home "$nh"
  check "as nobody too, the link's target keeps its mode 0644" [ "$(mode_of "$nt")" = 644 ]
  as_nobody rm "$nh/store.db"
  # env and setpriv exec: $! is the planner itself, which the cleanup kills.
  env ASAN_OPTIONS=detect_leaks=0 setpriv --reuid 65534 --regid 65534 --clear-groups \
    "$AA" planner --home "$nh" >"$tmp/nplanner.log" 2>&1 &
  np=$!
  pids+=("$np")
  check "without the link, the planner as nobody starts" wait_for 20 as_nobody "$AA" status --planner "unix:$nh/planner.sock"
  check "its store is 0600" [ "$(mode_of "$nh/store.db")" = 600 ]
  kill "$np"; wait "$np" 2>/dev/null
else
  echo "skipped: the other-user case needs root (to run a planner as nobody)"
fi

# --- 2. a FIFO at the token's path ------------------------------------------------------------
h2="$tmp/h2"
mkdir -p "$h2"
chmod 0700 "$h2"
mkfifo -m 0600 "$h2/token"
t0=$SECONDS
expect 1 "token file .*token is a FIFO; only a regular file will do" \
  timeout 10 "$AA" planner --home "$h2" --listen "127.0.0.1:$($TOOL free-port)"
check "the planner refused it at once ($((SECONDS - t0)) s)" [ $((SECONDS - t0)) -lt 5 ]
check "and did not leave its socket behind" [ ! -e "$h2/planner.sock" ]
t0=$SECONDS
expect 1 "is a FIFO" timeout 10 "$AA" status --planner "tcp:127.0.0.1:1" --token-file "$h2/token"
check "the CLI refused it at once ($((SECONDS - t0)) s)" [ $((SECONDS - t0)) -lt 5 ]
t0=$SECONDS
expect 1 "is a FIFO" env AUTOACCEL_HOME="$h2" timeout 10 "$AA" status --planner "tcp:127.0.0.1:1"
check "and the state directory's token too ($((SECONDS - t0)) s)" [ $((SECONDS - t0)) -lt 5 ]
rm "$h2/token"

# --- 6. --listen that fails leaves no token -----------------------------------------------------
expect 1 "cannot listen on 192.0.2.10" timeout 10 "$AA" planner --home "$h2" --listen "192.0.2.10:$($TOOL free-port)"
check "a --listen that failed made no token file" [ ! -e "$h2/token" ]

# --- 3. SIGHUP -------------------------------------------------------------------------------------
h3="$tmp/h3"
P="--planner unix:$h3/planner.sock"
out=$($TOOL on-pty "$tmp/hup.log:CPU gangs" sh -c "exec '$AA' planner --home '$h3' 2>'$tmp/hup.log'")
check "a planner whose terminal closes stops in order (got '$out')" [ "$out" = "exit 0" ]
check "its log says why" grep -q "stopping (SIGHUP: its terminal closed)" "$tmp/hup.log"
check "its socket is gone" [ ! -e "$h3/planner.sock" ]
"$AA" planner --home "$h3" >"$tmp/h3.log" 2>&1 &
pl=$!
pids+=("$pl")
planner_up "$tmp/h3.log"
out=$($TOOL on-pty "$tmp/exhup.log:as executor" sh -c "exec '$AA' executor $P --threads 1 2>'$tmp/exhup.log'")
check "an executor whose terminal closes stops in order (got '$out')" [ "$out" = "exit 0" ]
check "its log says why" grep -q "Hangup: stopping" "$tmp/exhup.log"
no_executors() { [ "$("$AA" status $P --json | jq_ "len(d['executors'])")" = 0 ]; }
check "and it said bye to the planner" wait_for 5 no_executors
kill "$pl"; wait "$pl" 2>/dev/null
(trap '' HUP; exec "$AA" planner --home "$h3" >"$tmp/nohup.log" 2>&1) &
pl=$!
pids+=("$pl")
planner_up "$tmp/nohup.log"
kill -HUP "$pl"
sleep 0.5
check "a planner started under nohup ignores SIGHUP" kill -0 "$pl"
expect 0 "planner" "$AA" status $P
kill "$pl"; wait "$pl" 2>/dev/null

# --- 4. a silent flood from one address ----------------------------------------------------------
h4="$tmp/h4"
port=$($TOOL free-port)
T="tcp:127.0.0.1:$port"
P="--planner unix:$h4/planner.sock"
"$AA" planner --home "$h4" --listen "127.0.0.1:$port" --heartbeat-ms 200 >"$tmp/h4.log" 2>&1 &
pl=$!
pids+=("$pl")
planner_up "$tmp/h4.log"
$PEER flood "$T" 12 >"$tmp/flood.out" 2>&1 &
flood=$!
pids+=("$flood")
sleep 2 # the flood holds its connections (the planner's hello deadline is 10 s)
"$AA" executor --planner "$T" --token-file "$h4/token" --threads 1 >"$tmp/ex4.log" 2>&1 &
pids+=("$!")
ok=0
for i in 1 2 3 4 5 6 7 8 9 10; do
  "$AA" status --planner "$T" --token-file "$h4/token" >/dev/null 2>"$tmp/st$i.err" && ok=$((ok + 1))
done
check "a token holder gets in on TCP during the flood ($ok of 10 status calls answered)" [ "$ok" = 10 ]
[ "$ok" = 10 ] || cat "$tmp"/st*.err
one_executor() { [ "$("$AA" status $P --json | jq_ "len(d['executors'])")" = 1 ]; }
check "an executor on TCP registers during the flood" wait_for 4 one_executor
check "at its first try" bash -c "! grep -Eq 'refused|retrying' '$tmp/ex4.log'"
wait "$flood"
cat "$tmp/flood.out"
check "the planner made room by closing silent connections" grep -Eq "displaced [0-9]+" "$tmp/flood.out"
check "and says so, rate-limited" grep -q "made room for a new connection: closed tcp 127.0.0.1" "$tmp/h4.log"
check "the planner is alive" kill -0 "$pl"
# A token holder whose hello comes after 20 newer silent connections from
# its address (the flood's share is 8): inside the quarter-second grace
# after accept it is not displaced; silent past it, it is.
expect 0 "late-hello: welcomed" $PEER late-hello "$T" "$(head -1 "$h4/token")" 20 0
expect 0 "late-hello: closed: displaced" $PEER late-hello "$T" "$(head -1 "$h4/token")" 20 0.6

# --- 5. partial frames after hello ----------------------------------------------------------------
before=$(rss_kb "$pl")
$PEER partial "$T" "$(head -1 "$h4/token")" 20 2 >"$tmp/partial.out" 2>&1 &
partial=$!
peak=$before # the most the planner held while the holders sent and held their frames
while ! gone "$partial"; do
  r=$(rss_kb "$pl")
  [ "$r" -gt "$peak" ] && peak=$r
  sleep 0.05
done
wait "$partial"
cat "$tmp/partial.out"
echo "hostile: planner RSS $before KiB before 20 holders of 16 MiB frames, at most $peak KiB while they held them"
# The budget is 64 MiB; 32 MiB more leaves room for a buffer doubling past
# it before the largest holder goes, and for the allocator. Holding every
# frame would be 320 MiB.
check "the planner grew by less than 96 MiB ($before -> $peak KiB)" [ $((peak - before)) -lt 98304 ]
check "it closed the holders past the budget, saying why" grep -Eq "\(([1-9][0-9]*) said why\)" "$tmp/partial.out"
check "the log names them" grep -q "of unfinished input held for all peers, past the bound of 67108864" "$tmp/h4.log"
check "the planner is alive" kill -0 "$pl"
expect 0 "planner" "$AA" status $P

echo "hostile: $pass passed, $fail failed"
[ "$fail" = 0 ]
