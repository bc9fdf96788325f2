#!/usr/bin/env bash
# `autoaccel calib export` and `calib import` (issue 32): a calibration
# stored by one planner, exported, imported into a second planner with an
# empty state directory, plans there exactly as it did on the first, and
# exports again byte for byte (export/import round-trips). A broken file is
# refused with the field named, by the CLI and by the planner itself, and
# nothing is stored; over TCP an import needs the planner's token; a file
# measured before what a planner holds is refused unless --force, and says
# what it replaced.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"
export AUTOACCEL_HOME="$tmp/nohome"
NOP="--planner unix:$tmp/nobody.sock"
dev="cpu:Synthetic CPU (1 threads):4096MiB"
devre="cpu:Synthetic CPU \\(1 threads\\):4096MiB" # $dev as a pattern of expect (grep -E)

cat >"$tmp/model.json" <<'JSON'
{"name": "calib", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 3, "lr": 0.001},
 "data": {"train": "data/train.bin"}}
JSON

# --- help and usage ---------------------------------------------------------------------
expect 0 "usage: autoaccel calib export DEVICE" "$AA" calib --help
expect 0 "calib +export a device's stored calibration" "$AA" --help
expect 2 "expected export DEVICE or import FILE" "$AA" calib
expect 2 "unknown subcommand 'frob'" "$AA" calib frob x
expect 2 "export takes one DEVICE" "$AA" calib export
expect 2 "import takes one FILE" "$AA" calib import a.json b.json
expect 2 "DEVICE is a device fingerprint .* not 'tpu'" "$AA" calib export tpu
expect 2 "--force and --json are options of import" "$AA" calib export cpu --force
expect 1 "no planner at unix:$tmp/nobody.sock" "$AA" calib export cpu $NOP
expect 1 "nothing.json" "$AA" calib import "$tmp/nothing.json" $NOP

# --- planner A, with a calibration -------------------------------------------------------
# Written into A's store by hand as a job would store one (tests/cli/test_plan.sh does the
# same): the device's shm row, and its gloo row, the links a gang spanning hosts measured.
# Measured at fixed dates (2026-05-27 and -28), older than now.
homeA="$tmp/a" homeB="$tmp/b"
PA="--planner unix:$homeA/planner.sock" PB="--planner unix:$homeB/planner.sock"
"$AA" planner --home "$homeA" >>"$tmp/plannerA.log" 2>&1 &
pids+=("$!")
planner_up "$tmp/plannerA.log" "planner A" "$PA"
/usr/bin/python3 - "$homeA/store.db" "$dev" <<'PY'
import json, sqlite3, sys
ops = [["matmul", [64, 32, 96, 0]], ["attention", [4, 16, 32, 2]], ["layernorm", [64, 32, 0, 0]],
       ["gelu", [4096, 0, 0, 0]], ["residual", [2048, 0, 0, 0]], ["xent", [64, 256, 0, 0]],
       ["encoder", [64, 32, 0, 0]], ["cast", [4096, 0, 0, 0]], ["adamw", [10000, 0, 0, 0]]]
def cal(backend, link_s):
    return {"version": 1, "device": sys.argv[2], "backend": backend, "cuda": 0,
            "threads": 1, "host_cores": 2, "ranks": 2, "measured_s": 1.0,
            "ops": [[k, d, "fp32", 1e-5, 0 if k == "adamw" else 2e-5] for k, d in ops],
            "links": [[k, 2, link_s, 1e9] for k in ("all_reduce", "all_gather", "reduce_scatter", "send", "recv")]}
db = sqlite3.connect(sys.argv[1])
for backend, link_s, at in (("shm", 1e-5, 1779926400), ("gloo", 1e-4, 1779840000)):
    db.execute("INSERT INTO calibrations VALUES (?, ?, ?, ?, ?)", (sys.argv[2], backend, json.dumps(cal(backend, link_s)), at, at))
db.commit()
PY
"$AA" calib export cpu $PA >"$tmp/a.json" 2>"$tmp/exportA.err"
check "export cpu from A succeeds" test $? -eq 0 || cat "$tmp/exportA.err"
check "export names the device and both rows on stderr" \
  grep -q "^autoaccel calib export: $dev: gloo (measured 2026-05-27 00:00:00 UTC), shm (measured 2026-05-28 00:00:00 UTC)$" "$tmp/exportA.err"
check "the file holds both rows, links between hosts included" \
  [ "$(jq_ "[(e['device'], e['backend'], e['measured_at']) for e in d['calibrations']] == [('$dev', 'gloo', 1779840000), ('$dev', 'shm', 1779926400)] and d['format'] == 'autoaccel-calibration'" <"$tmp/a.json")" = True ]
"$AA" calib export "$dev" $PA >"$tmp/a-by-name.json" 2>/dev/null
check "export by fingerprint writes the same file as by kind" cmp -s "$tmp/a.json" "$tmp/a-by-name.json"
expect 1 "no calibration of device \"cpu:Other:1MiB\" is stored" "$AA" calib export cpu:Other:1MiB $PA
expect 1 "no calibration of a cuda device is stored" "$AA" calib export cuda $PA
"$AA" plan "$tmp/model.json" --pool cpu:4 --top 10 $PA >"$tmp/planA.txt" 2>&1
check "A plans cpu:4" grep -q "^plan for cpu:4 from the calibration of $dev (shm, measured 2026-05-28 00:00 UTC)" "$tmp/planA.txt" ||
  cat "$tmp/planA.txt"
"$AA" plan "$tmp/model.json" --pool cpu:4 --hosts 2 --top 10 $PA >"$tmp/planA-h2.txt" 2>&1
check "A plans two hosts on its measured lines between hosts" \
  grep -q "collectives across hosts on the lines a gang spanning hosts measured over gloo" "$tmp/planA-h2.txt"

# --- a file the reader refuses: the CLI names the field and sends nothing -------------------
sed 's/"backend":"gloo"/"backend":"tpu"/' "$tmp/a.json" >"$tmp/bad-backend.json"
expect 1 "autoaccel calib import: .*bad-backend.json: calibrations\[0\]\.backend" \
  "$AA" calib import "$tmp/bad-backend.json" $NOP
/usr/bin/python3 - "$tmp/a.json" "$tmp/bad-op.json" <<'PY'
import json, sys
lines = open(sys.argv[1]).read()
f = json.loads(lines)
f["calibrations"][1]["calibration"]["ops"][3][3] = 0
json.dump(f, open(sys.argv[2], "w"))
PY
expect 1 "bad-op.json: calibrations\[1\]\.calibration: ops\[3\]\.fwd_s: must be finite and > 0 \(got 0\)" \
  "$AA" calib import "$tmp/bad-op.json" $NOP

# --- planner B, empty: import, plan, export -----------------------------------------------
port=$($TOOL free-port)
TB="--planner tcp:127.0.0.1:$port"
"$AA" planner --home "$homeB" --listen "127.0.0.1:$port" >>"$tmp/plannerB.log" 2>&1 &
pids+=("$!")
planner_up "$tmp/plannerB.log" "planner B" "$PB"
expect 1 "no calibration of a cpu device is stored" "$AA" plan "$tmp/model.json" --pool cpu:4 $PB
# The planner checks a file itself, whatever its client did: refused, the field named, the
# connection kept, nothing stored.
check "B refuses a broken file sent past the CLI, naming the field" \
  grep -q "error code=-1 .*calib_import.json: calibrations\[1\]\.calibration: ops\[3\]\.fwd_s: must be finite" \
  <($TOOL calib-import "unix:$homeB/planner.sock" "$tmp/bad-op.json")
# Over TCP an import needs the planner's token, as every request does.
printf 'wrong\n' >"$tmp/wrong-token"
chmod 600 "$tmp/wrong-token"
expect 1 "permission denied: the planner at tcp:127.0.0.1:$port refused the token" \
  "$AA" calib import "$tmp/a.json" $TB --token-file "$tmp/wrong-token"
expect 1 "no calibration of a cpu device is stored" "$AA" calib export cpu $PB
"$AA" calib import "$tmp/a.json" $PB >"$tmp/importB.txt" 2>&1
check "import into B succeeds" test $? -eq 0 || cat "$tmp/importB.txt"
check "import says what it stored, with the measured dates" [ "$(cat "$tmp/importB.txt")" = \
  "stored $dev (gloo), measured 2026-05-27 00:00:00 UTC: new on this planner
stored $dev (shm), measured 2026-05-28 00:00:00 UTC: new on this planner" ]
"$AA" plan "$tmp/model.json" --pool cpu:4 --top 10 $PB >"$tmp/planB.txt" 2>&1
check "B plans cpu:4 exactly as A did" cmp -s "$tmp/planA.txt" "$tmp/planB.txt" ||
  diff "$tmp/planA.txt" "$tmp/planB.txt"
"$AA" plan "$tmp/model.json" --pool cpu:4 --hosts 2 --top 10 $PB >"$tmp/planB-h2.txt" 2>&1
check "B plans two hosts exactly as A did (the lines between hosts came along)" \
  cmp -s "$tmp/planA-h2.txt" "$tmp/planB-h2.txt"
"$AA" calib export cpu $PB >"$tmp/b.json" 2>/dev/null
check "export from B is A's file byte for byte" cmp -s "$tmp/a.json" "$tmp/b.json"
expect 0 "measured 2026-05-28 00:00:00 UTC: replaced one measured 2026-05-28 00:00:00 UTC \(the same date\)" \
  "$AA" calib import "$tmp/a.json" $TB --token-file "$homeB/token"

# --- dates: a newer file replaces, an older one is refused unless --force -------------------
# A later measurement of the shm row (one op slower), as another cluster would export it.
/usr/bin/python3 - "$tmp/a.json" "$tmp/newer.json" <<'PY'
import json, sys
f = json.loads(open(sys.argv[1]).read())
e = f["calibrations"][1]
e["measured_at"] = 1780012800  # 2026-05-29
e["calibration"]["ops"][0][3] = 3e-5
f["calibrations"] = [e]
json.dump(f, open(sys.argv[2], "w"))
PY
expect 0 "stored $devre \(shm\), measured 2026-05-29 00:00:00 UTC: replaced one measured 2026-05-28 00:00:00 UTC \(older\)" \
  "$AA" calib import "$tmp/newer.json" $PB
"$AA" calib export cpu $PB >"$tmp/b2.json" 2>/dev/null
expect 1 "autoaccel calib import: calibrations\[1\]: the stored calibration of $devre \(shm\) was measured 2026-05-29T00:00:00Z, after the file's \(2026-05-28T00:00:00Z\): nothing was stored \(--force replaces it\)" \
  "$AA" calib import "$tmp/a.json" $PB
"$AA" calib export cpu $PB >"$tmp/b3.json" 2>/dev/null
check "a refused import stored nothing, not even its gloo row" cmp -s "$tmp/b2.json" "$tmp/b3.json"
check "the newer measurement is what B holds" \
  [ "$(jq_ "[e['measured_at'] for e in d['calibrations']] == [1779840000, 1780012800]" <"$tmp/b3.json")" = True ]
expect 0 "stored $devre \(shm\), measured 2026-05-28 00:00:00 UTC: replaced one measured 2026-05-29 00:00:00 UTC \(newer: --force\)" \
  "$AA" calib import "$tmp/a.json" --force $PB
"$AA" calib export cpu $PB >"$tmp/b4.json" 2>/dev/null
check "after --force, B exports A's file again" cmp -s "$tmp/a.json" "$tmp/b4.json"
"$AA" calib import "$tmp/a.json" --json $PB >"$tmp/import.json"
check "--json: the planner's reply" \
  [ "$(jq_ "d['forced'] == False and [c['replaced'] for c in d['calibrations']] == [1779840000, 1779926400]" <"$tmp/import.json")" = True ]
expect 0 "executors" "$AA" status $PB

echo "calib cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
