#!/usr/bin/env bash
# `autoaccel report` of a job with 100,160 runs against a live planner
# (docs/cli.md "autoaccel report"): the command takes the runs page by page
# and keeps only what the page draws, so its peak memory stays bounded
# whatever the number of runs (holding every run's JSON, it grew by 530 MiB
# here), and charts of so many runs are drawn as densities, so the file
# stays small (it was 34 MiB). The store is written directly with python's
# sqlite3, as test_daemon_state.sh section 5 does: 100,000 ok dry runs with
# predictions and peaks, and 160 pruned ones of two reasons.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
home="$tmp/home"
P="--planner unix:$home/planner.sock"
start_planner() {
  "$AA" planner --home "$home" >>"$tmp/planner.log" 2>&1 &
  planner=$!
  pids+=("$planner")
  planner_up "$tmp/planner.log"
}
start_planner # makes the store
kill "$planner"; wait "$planner" 2>/dev/null
ids=$(/usr/bin/python3 - "$home/store.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO models VALUES ('f00df00df00df00d', 'large', '{}', 1, 0)")
db.execute("INSERT INTO hardware VALUES ('cpu:large:1MiBx1', '{}', 0)")
def job():
    return db.execute("INSERT INTO jobs (model_hash, hardware, status, options_json, submitted_at)"
                      " VALUES ('f00df00df00df00d', 'cpu:large:1MiBx1', 'done', '{}', 0)").lastrowid
small, large = job(), job()
# Strategies as small as section 5 of test_daemon_state.sh stores them: a
# planner's own strategy, peak and predicted texts triple the time the
# pages take (most of it the ASan build's planner), not the report's memory.
s = json.dumps({"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 1}, "amp": "fp32"})
def ok(job, i):
    t = 1000.0 + (i * 7919) % 100000
    return (job, "dp1.tp1.pp1.z0.fp32.ckpt-none.mb%d" % (i + 1), s, "ok", t, 409216 + 4096 * (i % 500),
            t * (0.8 + (i % 41) / 100.0), None)
def pruned(job, i):
    key = "dp1.tp1.pp1.z0.fp32.ckpt-full.mb%d" % (i + 1)
    why = ("predicted out of memory: a rank needs at least %d.0 MiB (params 1.0 MiB), the device has 1.0 MiB" % (i + 2)
           if i % 2 else "not measured: %s does at least the work of dp1.tp1.pp1.z0.fp32.ckpt-none.mb1 (1000 "
           "tokens/s): full checkpointing instead of none" % key)
    return (job, key, s, "pruned", None, None, None, why)
sql = ("INSERT INTO runs (job_id, model_hash, hardware, kind, strategy_key, strategy_json, status, tokens_per_s,"
       " peak_bytes, predicted_tokens_per_s, error) VALUES (?, 'f00df00df00df00d', 'cpu:large:1MiBx1', 'dryrun',"
       " ?, ?, ?, ?, ?, ?, ?)")
db.executemany(sql, [ok(small, i) for i in range(3)])
db.executemany(sql, [ok(large, i) for i in range(100000)] + [pruned(large, i) for i in range(160)])
for j in (small, large):
    db.execute("UPDATE jobs SET best_run_id = (SELECT id FROM runs WHERE job_id = ?1 AND status = 'ok'"
               " ORDER BY tokens_per_s DESC, id LIMIT 1) WHERE id = ?1", (j,))
db.commit()
print(small, large)
PY
)
read -r small large <<<"$ids"
start_planner

# peak_kib OUT COMMAND...: runs COMMAND with its output in OUT and prints
# its peak resident memory in KiB (the kernel's maximum resident set size
# of the child, which python's getrusage reads). A small ASan quarantine
# keeps freed pages from counting as held (the default holds up to 256 MiB
# of them): this measures what the command keeps, not ASan's reuse delay.
peak_kib() {
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=8" /usr/bin/python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    rc = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$@"
}
t0=$SECONDS
base=$(peak_kib "$tmp/small.out" "$AA" report "$small" $P --html "$tmp/small.html")
check "a report of 3 runs is written" grep -q "wrote $tmp/small.html: job $small, 3 runs" "$tmp/small.out"
peak=$(peak_kib "$tmp/large.out" "$AA" report "$large" $P --html "$tmp/large.html")
check "a report of 100,160 runs is written" grep -q "wrote $tmp/large.html: job $large, 100160 runs" "$tmp/large.out"
echo "report: 100,160 runs in $((SECONDS - t0)) s; peak memory $((peak / 1024)) MiB, $((base / 1024)) MiB for 3 runs," \
  "$((peak - base)) KiB more; page $(($(stat -c %s "$tmp/large.html") / 1024)) KiB"
# The bound: what the report keeps (16 bytes per point of each chart, 3.2 MB
# for 100,000 runs) and one page of 1,000 runs (about 0.5 MB of JSON, ten
# times that as jansson's objects), with ASan's shadow and its 8 MiB
# quarantine over them, grew the peak by 21 MiB; 64 MiB leaves room for the
# allocator's slack and is still far below the 530 MiB of every run's JSON.
check "the report's peak memory grows by less than 64 MiB for 100,160 runs" [ $((peak - base)) -lt 65536 ]
check "the page counts every run" grep -q '<td id="counts">100160: 100000 ok, 160 pruned</td>' "$tmp/large.html"
check "the page stays under 2 MiB" [ "$(stat -c %s "$tmp/large.html")" -lt 2097152 ]
check "each chart says it draws densities" [ "$(grep -c "100000 runs are too many to draw one by one" "$tmp/large.html")" = 2 ]
check "the pruned table groups its 160 runs in two reasons" \
  [ "$(grep -Eo '<td class="num">80</td>' "$tmp/large.html" | wc -l)" = 2 ]
check "the best run is marked" grep -q 'id="best-point"' "$tmp/large.html"
# Well-formed: every element closed, every entity known (the page is XML
# but for its doctype).
check "the page is well-formed" /usr/bin/python3 -c "
import sys, xml.etree.ElementTree as ET
ET.fromstring(open(sys.argv[1]).read().split('\n', 1)[1])" "$tmp/large.html"
kill "$planner"; wait "$planner" 2>/dev/null
echo "report_large: $pass passed, $fail failed"
[ "$fail" = 0 ]
