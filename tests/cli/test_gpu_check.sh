#!/usr/bin/env bash
# scripts/gpu-check.sh (issue 35) without a GPU: the library collection of
# `bundle` on the suite's own autoaccel binaries (every library ldd resolves
# that a CUDA image lacks is copied, and the check finds each one inside the
# folder; a folder missing one library, needed directly or only through
# another, fails the check naming it), and `run`, which skips every step with
# its reason in seconds and exits 0. The bundle's own build (a Release CUDA
# build) is too slow for the suite: `scripts/gpu-check.sh bundle` runs the
# same collection and check on it.
set -u
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
GC=$SRC/scripts/gpu-check.sh
PY=/usr/bin/python3
check() { # check DESCRIPTION COMMAND...: the command must succeed
  if "${@:2}"; then pass=$((pass + 1)); else
    fail=$((fail + 1))
    echo "FAIL: $1"
  fi
}

# --- usage ------------------------------------------------------------------------------
expect 2 "usage|gpu-check.sh bundle" bash "$GC"
expect 2 "gpu-check.sh run" bash "$GC" frob
expect 2 "--budget takes seconds, 30 to 3600, not 'abc'" bash "$GC" run --budget abc
expect 1 "check-libs: $tmp/nolib: no such directory" bash "$GC" check-libs "$tmp/nolib" "$AA"
expect 1 "collect-libs: $tmp/nobin: no such file" bash "$GC" collect-libs "$tmp/lib0" "$tmp/nobin"

# --- the libraries of the suite's binaries ------------------------------------------------
# Every executable named autoaccel* beside the binary (the command, and any it starts).
bins=()
for f in "$(dirname "$AA")"/autoaccel*; do
  [ -f "$f" ] && [ -x "$f" ] && bins+=("$f")
done
lib=$tmp/lib
expect 0 "" bash "$GC" collect-libs "$lib" "${bins[@]}"
check "jansson, SQLite, libuv and msgpack-c were collected" \
  test -f "$lib/libjansson.so.4" -a -f "$lib/libsqlite3.so.0" -a -f "$lib/libuv.so.1" -a -f "$lib/libmsgpackc.so.2"
check "OpenBLAS's Fortran runtime, needed only through OpenBLAS, was collected" test -f "$lib/libgfortran.so.5"
check "no C library, C++ runtime or CUDA library was collected" \
  bash -c '! ls "$1" | grep -E "^(libc|libm|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnccl)\.so"' _ "$lib"
# What was copied is what ldd names: each file is a shared object (ELF), none a link.
check "each collected library is a real ELF file" \
  bash -c 'for f in "$1"/*; do [ -f "$f" ] && [ ! -L "$f" ] && head -c4 "$f" | grep -q ELF || exit 1; done' _ "$lib"
expect 0 "" bash "$GC" check-libs "$lib" "${bins[@]}"

# A folder without jansson (a direct need) or libgfortran (OpenBLAS's) fails the check, naming it.
cp -r "$lib" "$tmp/lib-nojansson" && rm "$tmp/lib-nojansson/libjansson.so.4"
expect 1 "libjansson.so.4 resolves to .*, outside $tmp/lib-nojansson" bash "$GC" check-libs "$tmp/lib-nojansson" "${bins[@]}"
cp -r "$lib" "$tmp/lib-nofortran" && rm "$tmp/lib-nofortran/libgfortran.so.5"
expect 1 "libgfortran.so.5 resolves to .*, outside" bash "$GC" check-libs "$tmp/lib-nofortran" "${bins[@]}"

# --- run without a GPU -------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES=-1 hides the GPUs of a machine that has some, so this holds there too.
steps=19
t0=$SECONDS
out=$(cd "$tmp" && CUDA_VISIBLE_DEVICES=-1 OUT="$tmp/out" bash "$GC" run 2>&1)
rc=$?
check "run without a GPU exits 0 (got $rc): $out" test "$rc" = 0
check "run without a GPU takes seconds ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 10
summary() { # summary FILE REASON: every step skipped, with REASON
  "$PY" - "$1" "$2" "$steps" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["steps"]
bad = [x["name"] for x in s if x["status"] != "skipped" or not x["reason"].startswith(sys.argv[2])]
assert d["format"] == "autoaccel-gpu-check" and len(s) == int(sys.argv[3]) and not bad, (len(s), bad)
assert {"cuda_ops", "nccl_hosts", "bench_cuda_train", "calib", "plan_compare", "auto_tiny"} <= {x["name"] for x in s}
EOF
}
check "summary.json: every step skipped, reason CUDA_VISIBLE_DEVICES" \
  summary "$tmp/out/gpu-check/summary.json" "no GPU: CUDA_VISIBLE_DEVICES='-1' hides every GPU"
check "summary.txt: the table and the count" \
  grep -q "^0 passed, 0 failed, $steps skipped" "$tmp/out/gpu-check/summary.txt"

# A driver that sees no GPU: nvidia-smi's own words are the reason.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$tmp/fakebin/nvidia-smi"
chmod +x "$tmp/fakebin/nvidia-smi"
(cd "$tmp" && env -u CUDA_VISIBLE_DEVICES PATH="$tmp/fakebin:$PATH" OUT="$tmp/out2" bash "$GC" run >/dev/null 2>&1)
check "run with a driver and no GPU exits 0" test $? = 0
check "summary.json: every step skipped, reason nvidia-smi's" \
  summary "$tmp/out2/gpu-check/summary.json" "no GPU: nvidia-smi lists none (No devices were found)"

# --- a bundle of the suite's build, and a run on it behind a driver that names an H200 ----
# `bundle --no-build` assembles the folder from a build as it is (the suite's: sanitizers, maybe
# no CUDA) with the same collection and check as the real bundle. The run goes through every
# step: CUDA_VISIBLE_DEVICES names a GPU that does not exist, so the binaries see none, even on
# a GPU machine, while the fake nvidia-smi names one. Each step then records what happened:
# the tests skip (no GPU), the training bench and auto fail with the reason, the plan comparison
# skips for want of a calibration; the summary is valid JSON and fits what the device tool
# brings back (8 files at most, no folder below gpu-check/).
build=$(dirname "$AA")
have_tests=1
for t in test_cuda test_cuda_ops test_reference test_comm; do [ -x "$build/$t" ] || have_tests=0; done
if [ $have_tests = 0 ]; then
  echo "skipped: the bundle and fake-driver run (the test binaries are not built in $build)"
else
  b=$tmp/bundle
  expect 0 "^bundle $b: [0-9]+ MiB" bash "$GC" bundle --no-build --build-dir "$build" --dir "$b" --max-mib 4000
  u=$tmp/unpacked
  mkdir -p "$u" && tar -C "$u" -xzf "$b/payload.tar.gz"
  check "the bundle holds the script and the packed binaries, libraries and fixtures" \
    test -x "$b/gpu-check.sh" -a -x "$u/bin/autoaccel" -a -x "$u/bin/test_cuda_ops" \
    -a -f "$u/src/tests/reference/gpt_tiny.fixture" -a -f "$u/src/bench/cuda_train.sh" -a -f "$u/lib/libjansson.so.4"
  check "its MANIFEST names the libraries carried" grep -q "^libraries: .*libjansson.so.4" "$b/MANIFEST"
  expect 0 "" bash "$GC" check-libs "$u/lib" "$u"/bin/*
  expect 1 "over 1 MiB" bash "$GC" bundle --no-build --build-dir "$build" --dir "$b" --max-mib 1
  mkdir -p "$tmp/mine" && touch "$tmp/mine/keep"
  expect 1 "exists and is no bundle" bash "$GC" bundle --no-build --build-dir "$build" --dir "$tmp/mine"
  check "a folder that is no bundle is left alone" test -f "$tmp/mine/keep"

  cat >"$tmp/fakebin/nvidia-smi" <<'SH'
#!/bin/sh
case "$*" in
*-L*) echo "GPU 0: NVIDIA H200 (UUID: GPU-fake)" ;;
*driver*) echo "NVIDIA H200, 580.159.04, 143771 MiB, 345 MHz, 3201 MHz, 1980 MHz, 3201 MHz, 75 W, 700 W, 30" ;;
*) echo "NVIDIA H200" ;;
esac
SH
  t0=$SECONDS
  (cd "$tmp" && PATH="$tmp/fakebin:$PATH" CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000 \
    OUT="$tmp/out3" bash "$b/gpu-check.sh" run --budget 120 >"$tmp/run3.log" 2>&1)
  check "the run in the bundle exits 0 ($(tail -3 "$tmp/run3.log"))" test $? = 0
  check "it takes seconds without a GPU ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -le 60
  out=$("$PY" - "$tmp/out3/gpu-check/summary.json" "$steps" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = {x["name"]: x for x in d["steps"]}
bad = []
if len(d["steps"]) != int(sys.argv[2]):
    bad.append("%d steps" % len(d["steps"]))
g = d["gpu"]["idle"]
if g["name"] != "NVIDIA H200" or g["clocks.max.sm"] != "1980 MHz":
    bad.append("gpu %s" % g)
bad += ["%s: %s" % (k, x) for k, x in s.items() if x["status"] not in ("passed", "failed", "skipped") or not x["reason"]]
if s["cuda_ops"]["status"] != "skipped" or s["cuda_ops"]["figures"].get("skipped", 0) < 1:
    bad.append("cuda_ops %s" % s["cuda_ops"])
if s["bench_cuda_train"]["status"] != "failed" or "cuda:0" not in s["bench_cuda_train"]["reason"]:
    bad.append("bench %s" % s["bench_cuda_train"])
if s["calib"]["status"] != "failed" or s["auto_tiny"]["status"] != "failed":
    bad.append("calib/auto %s %s" % (s["calib"], s["auto_tiny"]))
if not s["plan_compare"]["reason"].startswith("no calibration file"):
    bad.append("plan %s" % s["plan_compare"])
if "libjansson.so.4" not in d["libraries"] or "libjansson.so.4" not in d["manifest"]:
    bad.append("libraries")
print("ok" if not bad else "; ".join(bad))
PY
  )
  check "summary.json of the run: $out" test "$out" = ok
  check "what comes back fits the device tool: 8 files at most, no folder" \
    bash -c '[ "$(ls "$1" | wc -l)" -le 8 ] && [ -z "$(find "$1" -mindepth 1 -type d)" ]' _ "$tmp/out3/gpu-check"
  check "the steps' logs are in logs.tar.gz" \
    bash -c 'tar -tzf "$1" | grep -q "logs/cuda_ops.log"' _ "$tmp/out3/gpu-check/logs.tar.gz"

  # The unpacked bundle runs as it is; --only reruns the steps named. A test binary that fails
  # (a stand-in printing what the harness prints) fails its step with the test's name and line,
  # and one that crashes with the signal and the test under way.
  cp "$b/gpu-check.sh" "$b/MANIFEST" "$u/"
  cat >"$u/bin/test_cuda" <<'SH'
#!/bin/sh
printf -- '- device_query_answers\n  FAIL tests/test_cuda.c:12: n >= 1: got 0\n  -> FAILED\n- other\n0 passed, 1 failed, 1 skipped\n' >&2
exit 1
SH
  cat >"$u/bin/test_cuda_ops" <<'SH'
#!/bin/sh
printf -- '- matmul_matches_cpu\n' >&2
kill -SEGV $$
SH
  # A training test that passes: its loss comparisons become the step's figures.
  cat >"$u/bin/test_cuda_train" <<'SH'
#!/bin/sh
[ "$1" = moe ] || exit 3
printf -- '- moe_training_matches_cpu_and_is_deterministic\n  moe_fp32: cpu 5.5451775 -> 5.2140150, cuda 5.5451775 -> 5.2140141, max relative difference 1.73e-07\n' >&2
printf -- '- moe_qwen_gate_raw_topk_with_capacity_matches_cpu\n  moe_qwen: cpu 5.5 -> 5.2, cuda 5.5 -> 5.2, max relative difference 0\n2 passed, 0 failed, 0 skipped\n' >&2
SH
  (cd "$tmp" && PATH="$tmp/fakebin:$PATH" CUDA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000 \
    OUT="$tmp/out4" bash "$u/gpu-check.sh" run --only cuda_device,cuda_ops,moe_train >"$tmp/run4.log" 2>&1)
  check "the rerun exits 0" test $? = 0
  out=$("$PY" - "$tmp/out4/gpu-check/summary.json" <<'PY'
import json, sys
s = {x["name"]: x for x in json.load(open(sys.argv[1]))["steps"]}
bad = []
c = s["cuda_device"]
if c["status"] != "failed" or c["reason"] != "exit 1: device_query_answers: FAIL tests/test_cuda.c:12: n >= 1: got 0":
    bad.append("cuda_device %s" % c)
if c["figures"] != {"passed": 0, "failed": 1, "skipped": 1, "failed_tests": ["device_query_answers"]}:
    bad.append("figures %s" % c["figures"])
if s["cuda_ops"]["status"] != "failed" or not s["cuda_ops"]["reason"].startswith("died of signal 11 in matmul_matches_cpu"):
    bad.append("cuda_ops %s" % s["cuda_ops"])
m = s["moe_train"]
if m["status"] != "passed" or m["reason"] != "2 passed; loss vs cpu, max relative difference: moe_fp32: 1.73e-07, moe_qwen: 0":
    bad.append("moe_train %s" % m)
if m["figures"].get("loss_max_rel_diff") != {"moe_fp32": 1.73e-07, "moe_qwen": 0}:
    bad.append("moe_train figures %s" % m["figures"])
bad += [k for k, x in s.items() if k not in ("cuda_device", "cuda_ops", "moe_train") and x["reason"] != "not asked for (--only)"]
print("ok" if not bad else "; ".join(bad))
PY
  )
  check "--only and a failing test: $out" test "$out" = ok
  expect 2 "--only takes steps of: .* \(not 'frob'\)" bash "$u/gpu-check.sh" run --only cuda_ops,frob
fi

echo "gpu-check: $pass passed, $fail failed"
[ "$fail" = 0 ]
