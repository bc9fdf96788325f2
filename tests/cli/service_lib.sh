# Shared by the service tests (sourced, not run): the binary and the source
# tree from the environment ctest gives, expect.sh, checks, JSON field reads,
# polling, and the processes a test starts, killed on exit.
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
# shellcheck source=tests/cli/expect.sh
source "$SRC/tests/cli/expect.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
TOOL="/usr/bin/python3 $SRC/tests/cli/service_tool.py"
PEER="/usr/bin/python3 $SRC/tests/cli/peer_tool.py"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT

check() { # check DESCRIPTION COMMAND...: the command must succeed
  if "${@:2}"; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "FAIL: $1"
  fi
}
jq_() { $TOOL json "$1"; } # jq_ EXPR < FILE

# wait_for SECONDS COMMAND...: polls until the command succeeds.
wait_for() {
  local end=$((SECONDS + $1)); shift
  until "$@" 2>/dev/null; do
    [ $SECONDS -ge $end ] && return 1
    sleep 0.1
  done
}

# rss_kb PID: resident memory of a process in KiB.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# gone PID: the process has exited (or is a zombie).
gone() { ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# planner_up LOG [NAME [PLANNER]]: waits up to 20 s for the planner PLANNER
# names (default $P, "--planner ADDRESS") to answer status; one that does
# not fails the test, showing its LOG.
planner_up() {
  wait_for 20 "$AA" status ${3:-$P} >/dev/null || { echo "FAIL: ${2:-planner} did not come up"; cat "$1"; exit 1; }
}

# start_executor THREADS [ARGS...]: an executor of $P, its log in
# $tmp/executor.log; sets $executor.
start_executor() {
  "$AA" executor $P --threads "$1" "${@:2}" >>"$tmp/executor.log" 2>&1 &
  executor=$!
  pids+=("$executor")
}

# executors_up N: at least N executors are registered with $P.
executors_up() { [ "$("$AA" status $P --json | jq_ "len(d['executors'])")" -ge "$1" ]; }

# as_nobody CMD...: runs CMD as nobody (uid and gid 65534), without leak
# checks; can_be_nobody: this test runs as root and can do that. A process
# started in the background that the cleanup must kill is started with the
# same env/setpriv line inline instead, so that $! is the process itself.
as_nobody() { env ASAN_OPTIONS=detect_leaks=0 setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
can_be_nobody() { [ "$(id -u)" = 0 ] && as_nobody "$AA" --version >/dev/null 2>&1; }

# runner_of PID: the executor PID has a runner child; sets $r to it.
runner_of() { r=$($TOOL children "$1"); [ -n "$r" ]; }
