#!/usr/bin/env bash
# What the planner keeps true about its jobs and files when peers vanish,
# the planner dies, the disk fills or a client names a directory that is not
# its own (docs/service.md "Jobs", "Recovery", "Limits", "Files").
#
#  1. A job whose executors are gone steps aside: status says what it waits
#     for and since when, a later job on another executor runs meanwhile, and
#     past --placement-timeout the job fails with the reason.
#  2. A run whose executor vanished runs again on another executor (after
#     the pool of two calibrated).
#  3. kill -9 of the planner mid search: with --max-resumes 0 the job stays
#     interrupted and a later submit searches anew (never answered by half a
#     search); by default the job resumes, keeps what was measured, and ends
#     done; only then does a plain submit answer from the store.
#  4. The store's disk fills at a job's end (a 2 MiB tmpfs in a mount
#     namespace, most of it taken by the store's WAL): the client gets the
#     real cause, the job's end reaches the store once there is room again,
#     the WAL is then truncated, and the next job on that disk ends done; an
#     idle planner truncates a WAL past 1 MiB.
#  5. 46,080 runs in the store: `query runs` pages through all of them; a row
#     too large for a frame is an error reply, not silence.
#  6. out_dir: symlinks planted at strategy.json(.tmp) are replaced, never
#     followed; a directory owned by another user is refused (planner and
#     client run as nobody).
#  7. State directory 0700 and store files 0600, also when they were made
#     wider; a read-only store.db-shm is named with the fix; an unreadable
#     run or job row is named and the rest served.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
chmod 0755 "$tmp" # section 6 runs processes as nobody under it

"$AA" data synth --out "$tmp/data" --bytes 100000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
chmod -R a+rX "$tmp/data"
model() { # model NAME GLOBAL_BATCH [D_MODEL] > FILE
  cat <<JSON
{"name": "$1", "model": {"n_layer": 1, "n_head": 2, "d_model": ${3:-32}, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": $2, "steps": 3, "lr": 0.003, "seed": 7, "eval_every": 0},
 "data": {"train": "$tmp/data/train.bin", "val": "$tmp/data/val.bin"}}
JSON
}
model state 2 >"$tmp/model.json"
model odd 3 >"$tmp/odd.json" # global batch 3: no data parallelism over 2 executors
model other 2 48 >"$tmp/other.json" # another architecture: the store's answers for "state" are not its
chmod a+r "$tmp"/*.json

use_home() { # use_home DIR: the state directory the next planner and the CLI use
  home=$1
  P="--planner unix:$home/planner.sock"
  export AUTOACCEL_HOME="$home"
}
use_home "$tmp/home"
start_planner() { # start_planner EXTRA...: a planner on $home, its log in $home.log
  "$AA" planner --home "$home" --heartbeat-ms 100 --dead-after-ms 1500 "$@" >>"$home.log" 2>&1 &
  planner=$!
  pids+=("$planner")
  planner_up "$home.log"
}
# second_dry_run LOG JOB: the job's first dry run ended and its second started
# (read from the log: polling it costs no process start, so a short window is seen).
second_dry_run() { grep -q "job $2: dry run 2/" "$1"; }
job_field() { "$AA" status "$1" $P --json | jq_ "d['job']$2"; } # job_field JOB "['status']"
status_is() { [ "$(job_field "$1" "['status']")" = "$2" ]; }
submit() { "$AA" submit "$@" $P | grep -Eo '[0-9]+' | head -1; } # submit ARGS...: the job id

# --- 1. a job whose executors are gone does not hold the queue --------------------------
start_planner --measured-steps 100000 --dryrun-time-limit 60 --placement-timeout 6
start_executor 1
e1=$executor
check "an executor registers" wait_for 20 executors_up 1
job1=$(submit "$tmp/model.json" --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1)
check "job 1 dry-runs on its executor" wait_for 30 runner_of "$e1"
kill -9 "$e1"; wait "$e1" 2>/dev/null
waits() { job_field "$job1" "['waiting']['for']" | grep -q "1 executor of cpu:.*(1 threads).* (0 connected)"; }
check "job 1 waits for its executor, and says so" wait_for 10 waits
start_executor 2 # another hardware: its name says 2 threads
e2=$executor
check "an executor of another hardware registers" wait_for 20 executors_up 1
job2=$(submit "$tmp/model.json" --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1)
check "a later job runs meanwhile on the executor that is there" wait_for 30 runner_of "$e2"
check "job 2 is running while job 1 waits" status_is "$job2" running
expect 0 "^  job $job1: 1 executor of .* since " "$AA" status $P
expect 0 "cancelled job $job2" "$AA" cancel "$job2" $P
failed1() { status_is "$job1" failed; }
check "past the placement timeout job 1 fails" wait_for 20 failed1
check "with the reason" job_field "$job1" "['error']" | grep -q "waited [0-9]* s for 1 executor of .*longer than the placement timeout of 6 s"

# --- 2. a run whose executor vanished runs again on another ----------------------------
start_executor 2
e3=$executor
check "a second executor of that hardware registers" wait_for 20 executors_up 2
job3=$(submit "$tmp/odd.json" --refresh --exclude bf16,fp16,checkpoint --max-dryruns 1)
busy() { for e in "$e2" "$e3"; do runner_of "$e" && { busy_e=$e; return 0; }; done; return 1; }
# The pool of two calibrates first (a gang of both; no run of the store).
dry_running() { "$AA" query runs --job "$job3" $P --json | jq_ "any(r['status'] == 'running' for r in d['runs'])" | grep -q True; }
check "job 3 dry-runs once its pool is calibrated" wait_for 60 dry_running
check "job 3 dry-runs" wait_for 30 busy
other=$e2; [ "$busy_e" = "$e2" ] && other=$e3
kill -9 "$busy_e"; wait "$busy_e" 2>/dev/null
check "the run starts again on the other executor" wait_for 30 runner_of "$other"
"$AA" query runs --job "$job3" $P --json >"$tmp/runs3.json"
check "the lost run is recorded crashed, saying it runs again" \
  [ "$(jq_ "[r['status'] for r in d['runs'] if 'run again on another executor' in (r['error'] or '')]" <"$tmp/runs3.json")" = "['crashed']" ]
expect 0 "cancelled job $job3" "$AA" cancel "$job3" $P

# --- 3. kill -9 mid search: resume, and no answer from half a search --------------------
kill "$planner" "$other"; wait "$planner" "$other" 2>/dev/null
use_home "$tmp/home3"
mid_search() { second_dry_run "$home.log" "$1"; } # a dry run of about 1 s is running
start_planner --measured-steps 200
start_executor 1
check "an executor registers" wait_for 20 executors_up 1
job4=$(submit "$tmp/model.json" --refresh --exhaustive --exclude fp16,checkpoint)
check "job 4 measures a first strategy" wait_for 60 mid_search "$job4"
kill -9 "$planner"; wait "$planner" 2>/dev/null
start_planner --measured-steps 200
check "the restarted planner queues the interrupted job again" grep -q "1 interrupted jobs queued again to resume" "$home.log"
done4() { status_is "$job4" done; }
check "the resumed job ends done" wait_for 120 done4
"$AA" query runs --job "$job4" $P --json >"$tmp/runs4.json"
check "nothing measured before the stop was measured again" \
  [ "$(jq_ "(lambda ok: len(ok) == len(set(ok)) and len(ok) >= 2)([r['key'] for r in d['runs'] if r['status'] == 'ok'])" <"$tmp/runs4.json")" = True ]
check "the run the stop cut short is recorded crashed and ran again" \
  [ "$(jq_ "(lambda c: len(c) == 1 and any(r['key'] == c[0] and r['status'] == 'ok' for r in d['runs']))([r['key'] for r in d['runs'] if r['status'] == 'crashed'])" <"$tmp/runs4.json")" = True ]
job5=$(submit "$tmp/model.json" --wait --exclude fp16,checkpoint)
check "then a plain submit is answered from the store" [ "$(job_field "$job5" "['from_store']")" = True ]
kill "$planner"; wait "$planner" 2>/dev/null
start_planner --measured-steps 200 --max-resumes 0
job6=$(submit "$tmp/other.json" --refresh --exhaustive --exclude fp16,checkpoint)
check "job 6 measures a first strategy" wait_for 60 mid_search "$job6"
kill -9 "$planner"; wait "$planner" 2>/dev/null
start_planner --measured-steps 200 --max-resumes 0
check "with --max-resumes 0 the job stays interrupted" status_is "$job6" interrupted
job7=$(submit "$tmp/other.json" --wait --exclude fp16,checkpoint)
check "and a plain submit is not answered from half a search" [ "$(job_field "$job7" "['from_store']")" = False ]
check "it searched itself" [ "$("$AA" query runs --job "$job7" $P --json | jq_ "sum(r['status'] == 'ok' for r in d['runs'])")" -ge 1 ]
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null
use_home "$tmp/home"

# --- 4. the disk fills ---------------------------------------------------------------------
mnt="$tmp/small"
mkdir -p "$mnt"
if unshare -m --propagation private true 2>/dev/null; then
  dsock="$tmp/d.sock"
  unshare -m --propagation private sh -c "mount -t tmpfs -o size=2m tmpfs '$mnt' && exec '$AA' planner --home '$tmp/dhome' \
    --socket '$dsock' --store '$mnt/store.db' --heartbeat-ms 100 --measured-steps 200" >"$tmp/dplanner.log" 2>&1 &
  dplanner=$!
  pids+=("$dplanner")
  D="--planner unix:$dsock"
  wait_for 20 "$AA" status $D >/dev/null || { echo "FAIL: the planner on a small disk did not come up"; cat "$tmp/dplanner.log"; }
  "$AA" executor $D --threads 1 >>"$tmp/executor.log" 2>&1 &
  dex=$!
  pids+=("$dex")
  "$AA" submit "$tmp/model.json" $D --wait --refresh --exhaustive --exclude fp16,checkpoint >"$tmp/full.out" 2>&1 &
  sub=$!
  in_ns() { nsenter -t "$dplanner" -m "$@"; } # in_ns COMMAND...: run in the planner's mount namespace
  wal_bytes() { in_ns stat -c %s "$mnt/store.db-wal"; }
  # grow_wal FREE_KIB WAL_KIB: commits of a second connection append to the
  # WAL until the disk has at most FREE_KIB free or the WAL holds WAL_KIB, as
  # a planner's own jobs do over time (SQLite's automatic checkpoint only
  # reuses the WAL past 4 MiB, more than this disk holds). Each commit moves
  # a hardware row's created_at by one and back, so the rows end as they were.
  grow_wal() {
    in_ns /usr/bin/python3 - "$mnt/store.db" "$1" "$2" <<'PY'
import os, sqlite3, sys
path, free_kib, wal_kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
db = sqlite3.connect(path, timeout=10)
def room():
    st = os.statvfs(os.path.dirname(path))
    return st.f_bavail * st.f_frsize > free_kib << 10 and os.path.getsize(path + "-wal") < wal_kib << 10
step = 1
while room() or step < 0:
    db.execute("UPDATE hardware SET created_at = created_at + ?", (step,))
    db.commit()
    step = -step
PY
  }
  check "a dry run is recorded ok before the disk fills" wait_for 60 second_dry_run "$tmp/dplanner.log" 1
  # The WAL takes all but 200 KiB: less than the next job writes (a search
  # of 18 candidates, about 290 KiB of WAL), more than the database file
  # needs to take the WAL's pages (about 70 KiB).
  grow_wal 200 4096
  in_ns dd if=/dev/zero of="$mnt/fill" bs=64k 2>/dev/null
  wait "$sub"
  check "the client is told the real cause" grep -q "database or disk is full" "$tmp/full.out"
  check "and not that no strategy could run" bash -c "! grep -q 'no strategy could run' '$tmp/full.out'"
  djob=$(grep -Eo "job [0-9]+" "$tmp/full.out" | head -1 | grep -Eo '[0-9]+')
  dstatus() { "$AA" status "$djob" $D --json | jq_ "d['job']['status']"; }
  check "status tells the truth while the store cannot" [ "$(dstatus)" = failed ]
  in_ns rm -f "$mnt/fill"
  recorded() { grep -q "job $djob: its end (failed) is in the store now" "$tmp/dplanner.log"; }
  check "once there is room, the job's end is written to the store" wait_for 10 recorded
  truncated() { grep -q "store: WAL checkpointed and truncated (.* -> 0): $1" "$tmp/dplanner.log"; }
  check "then the WAL is checkpointed and truncated" wait_for 10 truncated "a write error cleared"
  check "to 0 bytes" [ "$(wal_bytes)" = 0 ]
  expect 0 "job $((djob + 1)) done" "$AA" submit "$tmp/model.json" $D --wait --refresh --max-dryruns 1
  grow_wal 0 1100
  check "an idle planner truncates a WAL past 1 MiB" wait_for 15 truncated "the planner is idle"
  # Polled: a look of the planner's may have truncated it while it grew.
  wal_empty() { [ "$(wal_bytes)" = 0 ]; }
  check "to 0 bytes" wait_for 10 wal_empty
  kill "$dplanner" "$dex"; wait "$dplanner" "$dex" 2>/dev/null
else
  echo "skipped: the disk-full case needs a mount namespace (unshare -m), which this user cannot make"
fi

# --- 5. a store with 46,080 runs -------------------------------------------------------------
start_planner
kill "$planner"; wait "$planner" 2>/dev/null
/usr/bin/python3 - "$home/store.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO models VALUES ('f00df00df00df00d', 'bulk', '{}', 1, 0) ON CONFLICT DO NOTHING")
db.execute("INSERT INTO hardware VALUES ('cpu:bulk:1MiBx1', '{}', 0) ON CONFLICT DO NOTHING")
cur = db.execute("INSERT INTO jobs (model_hash, hardware, status, options_json, submitted_at)"
                 " VALUES ('f00df00df00df00d', 'cpu:bulk:1MiBx1', 'done', '{}', 0)")
job = cur.lastrowid
s = json.dumps({"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 1}, "amp": "fp32"})
db.executemany("INSERT INTO runs (job_id, model_hash, hardware, kind, strategy_key, strategy_json, status,"
               " tokens_per_s, error) VALUES (?, 'f00df00df00df00d', 'cpu:bulk:1MiBx1', 'dryrun', ?, ?, 'ok', ?, ?)",
               [(job, "dp1.tp1.pp1.z0.fp32.ckpt-none.mb%d" % i, s, 1000.0 + i, "x" * 200) for i in range(46080)])
cur = db.execute("INSERT INTO jobs (model_hash, hardware, status, options_json, submitted_at)"
                 " VALUES ('f00df00df00df00d', 'cpu:bulk:1MiBx1', 'done', '{}', 0)")
db.execute("INSERT INTO runs (job_id, model_hash, hardware, kind, strategy_key, strategy_json, status, error)"
           " VALUES (?, 'f00df00df00df00d', 'cpu:bulk:1MiBx1', 'dryrun', 'huge', ?, 'error', ?)",
           (cur.lastrowid, s, "y" * (17 << 20)))
db.commit()
PY
start_planner
bulk=$(/usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT min(job_id) FROM runs WHERE model_hash='f00df00df00df00d'\").fetchone()[0])" "$home/store.db")
t0=$SECONDS
"$AA" query runs --job "$bulk" $P --json >"$tmp/bulk.json"
check "query runs answers all 46,080 runs (in pages)" [ "$(jq_ "len(d['runs'])" <"$tmp/bulk.json")" = 46080 ]
echo "state: 46,080 runs queried in $((SECONDS - t0)) s"
expect 0 "^ *[0-9]+ +[0-9]+ +dryrun" "$AA" query runs --job "$bulk" --limit 3 $P
expect 1 "does not fit in one frame" "$AA" query runs --job $((bulk + 1)) $P
/usr/bin/python3 -c "import sqlite3,sys; db=sqlite3.connect(sys.argv[1], timeout=10); db.execute(\"DELETE FROM runs WHERE strategy_key = 'huge'\"); db.commit()" "$home/store.db"
kill "$planner"; wait "$planner" 2>/dev/null

# --- 6. out_dir: planted symlinks, and another user's directory --------------------------
start_planner --measured-steps 2
start_executor 1
check "an executor registers" wait_for 20 executors_up 1
out="$tmp/out6"
mkdir -p "$out"
echo "secret" >"$tmp/victim1"
echo "secret" >"$tmp/victim2"
chmod 0600 "$tmp/victim1" "$tmp/victim2"
ln -s "$tmp/victim1" "$out/strategy.json.tmp"
ln -s "$tmp/victim2" "$out/strategy.json"
expect 0 "best" "$AA" submit "$tmp/model.json" $P --wait --refresh --exclude bf16,fp16,checkpoint --out "$out"
check "a symlink planted at strategy.json.tmp is not followed" grep -qx secret "$tmp/victim1"
check "a symlink planted at strategy.json is replaced, its target untouched" grep -qx secret "$tmp/victim2"
check "strategy.json is a regular file with the strategy" \
  bash -c "[ -f '$out/strategy.json' ] && [ ! -L '$out/strategy.json' ] && grep -q autoaccel-strategy '$out/strategy.json'"
kill "$planner" "$executor"; wait "$planner" "$executor" 2>/dev/null
if can_be_nobody; then
  nhome="$tmp/nhome"
  mkdir -p "$nhome" "$tmp/rootdir" "$tmp/nobodydir"
  chown 65534:65534 "$nhome" "$tmp/nobodydir"
  chmod 0777 "$tmp/rootdir"
  # env and setpriv exec: $! is the planner itself, which the cleanup kills.
  env ASAN_OPTIONS=detect_leaks=0 setpriv --reuid 65534 --regid 65534 --clear-groups \
    "$AA" planner --home "$nhome" >"$tmp/nplanner.log" 2>&1 &
  nplanner=$!
  pids+=("$nplanner")
  NP="--planner unix:$nhome/planner.sock"
  wait_for 20 as_nobody "$AA" status $NP >/dev/null
  expect 1 "out_dir $tmp/rootdir belongs to uid 0, not to the submitting user \(uid 65534\)" \
    as_nobody "$AA" submit "$tmp/model.json" $NP --out "$tmp/rootdir"
  check "nothing was written into the other user's directory" [ -z "$(ls -A "$tmp/rootdir")" ]
  kill "$nplanner"; wait "$nplanner" 2>/dev/null
else
  echo "skipped: the other-user case needs root (to run the planner and a client as nobody)"
fi

# --- 7. permissions, a read-only -shm, unreadable rows -----------------------------------
whome="$tmp/whome"
mkdir -p "$whome"
chmod 0755 "$whome"
"$AA" planner --home "$whome" >"$tmp/wplanner.log" 2>&1 &
wp=$!
pids+=("$wp")
WP="--planner unix:$whome/planner.sock"
wait_for 20 "$AA" status $WP >/dev/null
check "a state directory made 0755 is narrowed to 0700" [ "$(stat -c %a "$whome")" = 700 ]
check "the store and its journal files are 0600" \
  [ "$(stat -c %a "$whome/store.db" "$whome/store.db-wal" "$whome/store.db-shm" | sort -u)" = 600 ]
kill "$wp"; wait "$wp" 2>/dev/null
chmod 0644 "$whome/store.db"
"$AA" planner --home "$whome" >>"$tmp/wplanner.log" 2>&1 &
wp=$!
pids+=("$wp")
wait_for 20 "$AA" status $WP >/dev/null
check "a store made 0644 is narrowed to 0600" [ "$(stat -c %a "$whome/store.db")" = 600 ]
kill "$wp"; wait "$wp" 2>/dev/null
touch "$whome/store.db-shm"
chmod 0444 "$whome/store.db-shm"
expect 1 "$whome/store.db-shm is not writable \(mode 0?444.*chmod 600" "$AA" planner --home "$whome"
rm -f "$whome/store.db-shm"

start_planner
/usr/bin/python3 - "$home/store.db" "$job3" "$job2" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
db.execute("PRAGMA ignore_check_constraints = ON")
run = db.execute("SELECT min(id) FROM runs WHERE job_id = ?", (int(sys.argv[2]),)).fetchone()[0]
db.execute("UPDATE runs SET status = 'bogus' WHERE id = ?", (run,))
db.execute("UPDATE jobs SET status = 'lost' WHERE id = ?", (int(sys.argv[3]),))
db.commit()
PY
expect 0 "unreadable: .*job $job2 has an unknown status" "$AA" status $P
expect 0 "^job $job3: " "$AA" status "$job3" $P
expect 0 "cannot be read from the store: .*unknown status 'bogus'" "$AA" query runs --job "$job3" $P
expect 0 "^ +$job3 " "$AA" query jobs $P
total=$(/usr/bin/python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM runs').fetchone()[0])" "$home/store.db")
"$AA" query runs $P --json >"$tmp/all.json"
check "every page is served around an unreadable row ($total rows)" \
  [ "$(jq_ "len(d['runs']) + len(d['unreadable'])" <"$tmp/all.json")" = "$total" ]
kill "$planner"; wait "$planner" 2>/dev/null

echo "state: $pass passed, $fail failed"
[ "$fail" = 0 ]
