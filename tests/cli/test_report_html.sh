#!/usr/bin/env bash
# `autoaccel report`: the command's errors, and its page opened in a real
# browser. The page is written from the fixture tests/report/job.json with
# the test-only `--from-json` (no planner; tests/cli/test_service.sh writes
# one from a real job), then rendered by headless chromium (Debian's
# package, which scripts/setup.sh installs): the DOM must hold the four
# parts and the texts, and a screenshot must show the charts' colours.
# Without a chromium that runs, the browser part is skipped (exit 0, says
# so, as the other tests skip).
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
# shellcheck source=tests/cli/expect.sh
source "$SRC/tests/cli/expect.sh"
fixture="$SRC/tests/report/job.json"

# --- the command ----------------------------------------------------------------
expect 0 "usage: autoaccel report JOB --html FILE" "$AA" report --help
expect 2 "--html FILE is required" "$AA" report 3
expect 2 "expected exactly one JOB" "$AA" report --html "$tmp/x.html"
expect 2 "JOB needs an integer" "$AA" report nope --html "$tmp/x.html"
expect 2 "unknown option" "$AA" report 3 --html "$tmp/x.html" --bogus
expect 1 "no planner at" "$AA" report 3 --html "$tmp/x.html" --planner "unix:$tmp/none.sock"
expect 1 "no-such-dir" "$AA" report --from-json "$fixture" --html "$tmp/no-such-dir/r.html"
mkdir "$tmp/ro" && chmod 0500 "$tmp/ro"
if [ "$(id -u)" != 0 ]; then # root writes anywhere
  expect 1 "$tmp/ro/r.html" "$AA" report --from-json "$fixture" --html "$tmp/ro/r.html"
fi
expect 1 "bad_syntax.json" "$AA" report --from-json "$SRC/tests/specs/bad_syntax.json" --html "$tmp/x.html"
echo '{"job": {"id": 4, "model": {"name": "m"}}, "runs": []}' >"$tmp/empty.json"
expect 1 "job 4 has no runs yet: nothing to report" "$AA" report --from-json "$tmp/empty.json" --html "$tmp/x.html"
check_absent() { [ ! -e "$tmp/x.html" ]; }
if check_absent; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: a failed report left a file"; fi
# A symlink at the destination is replaced, not written through.
echo keep >"$tmp/target" && ln -s "$tmp/target" "$tmp/link.html"
expect 0 "wrote $tmp/link.html: job 7, 8 runs" "$AA" report --from-json "$fixture" --html "$tmp/link.html"
check_file() { [ "$(cat "$tmp/target")" = keep ] && [ ! -L "$tmp/link.html" ]; }
if check_file; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: the symlink's target was written"; fi
page="$tmp/report.html"
expect 0 "wrote $page" "$AA" report --from-json "$fixture" --html "$page"

# --- the browser ------------------------------------------------------------------
finish() { echo "report: $pass passed, $fail failed${1:+; $1}"; [ "$fail" = 0 ]; exit; }
browser=""
for b in chromium chromium-browser; do command -v "$b" >/dev/null 2>&1 && { browser=$b; break; }; done
if [ -z "$browser" ]; then
  echo "skipped: the browser check needs chromium (scripts/setup.sh installs it)"
  finish
fi
# --no-sandbox: chromium's sandbox cannot start as root or in most
# containers; the page is our own file. A profile of its own keeps $HOME out.
run_browser() {
  timeout 90 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
    --window-size=1000,2600 "$@" "file://$page" 2>>"$tmp/browser.log"
}
if ! run_browser --dump-dom >"$tmp/dom.html" || ! grep -q "<html" "$tmp/dom.html"; then
  echo "skipped: $browser cannot run here:"; tail -5 "$tmp/browser.log"
  finish
fi
for want in '<svg id="pred-vs-measured"' '<svg id="throughput-memory"' '<svg id="rank-breakdown"' \
  '<table id="pruned">' 'id="best-point"' 'best: dp1.tp1.pp2.z0.fp32.ckpt-none.mb4' \
  'dp1.&lt;script&gt;alert(1)&lt;/script&gt;' 'zero 3 &amp; tp 2: "not supported" &lt;yet&gt;' \
  '<td id="counts">8: 4 ok, 1 oom, 3 pruned</td>'; do
  if grep -qF -- "$want" "$tmp/dom.html"; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAIL: the browser's DOM lacks $want"
  fi
done
if grep -qi "<script" "$tmp/dom.html"; then fail=$((fail + 1)); echo "FAIL: a script element in the DOM"; else
  pass=$((pass + 1))
fi
(cd "$tmp" && run_browser --screenshot="$tmp/shot.png" >/dev/null)
# The screenshot must show the charts: the points' blue, the best's red and
# the backward phase's orange, each over many pixels (python3's standard
# library decodes the PNG; no PIL needed).
if /usr/bin/python3 - "$tmp/shot.png" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: the screenshot"; fi
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype = ihdr[:4]
assert depth == 8 and ctype in (2, 6), "unexpected PNG type %d/%d" % (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, counts = bytearray(stride), {}
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = bytes(line[x:x + 3]); counts[px] = counts.get(px, 0) + 1
    prev = line
def near(rgb):
    return sum(n for px, n in counts.items() if all(abs(px[i] - rgb[i]) <= 8 for i in range(3)))
want = {"blue": (0x1f, 0x77, 0xb4), "red": (0xd6, 0x27, 0x28), "orange": (0xff, 0x7f, 0x0e)}
seen = {k: near(v) for k, v in want.items()}
print("screenshot %dx%d, %d colours, %s" % (w, h, len(counts), seen))
assert len(counts) > 20 and all(n >= 50 for n in seen.values()), "the charts are not drawn"
PY
finish "rendered with $("$browser" --version 2>/dev/null | head -1)"
