# Shared by the bench scripts (sourced, not run). The caller defines die()
# and sets ROOT, BUILD_DIR, WORK (may be empty) and KEEP first.

# bench_work_dir PREFIX SUBDIR...: a fresh temp dir in WORK unless --work gave
# one (removed on exit unless --keep), with the subdirectories made.
bench_work_dir() {
  local prefix=$1; shift
  if [ -z "$WORK" ]; then
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$prefix.XXXXXX")
    [ "$KEEP" = 1 ] || trap 'rm -rf "$WORK"' EXIT
  fi
  local d
  for d in "$@" logs; do mkdir -p "$WORK/$d"; done
}

# bench_build: AUTOACCEL is the binary to measure; unless the environment
# named one, a Release CPU build in BUILD_DIR is configured and brought up to
# date (log in WORK/logs/build.log).
bench_build() {
  if [ -z "${AUTOACCEL:-}" ]; then
    AUTOACCEL=$BUILD_DIR/autoaccel
    echo "building $BUILD_DIR (Release, CPU) ..." >&2
    if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
      cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DAUTOACCEL_CUDA=off >"$WORK/logs/build.log" 2>&1 ||
        { cat "$WORK/logs/build.log" >&2; die "cmake configure failed"; }
    fi
    cmake --build "$BUILD_DIR" -j2 --target autoaccel >>"$WORK/logs/build.log" 2>&1 ||
      { tail -30 "$WORK/logs/build.log" >&2; die "build failed"; }
  fi
  [ -x "$AUTOACCEL" ] || die "no autoaccel binary at $AUTOACCEL"
}

# bench_torch_deps: the PyTorch peer imports torch and numpy; if PYTHON
# cannot, Debian's python3-torch and python3-numpy are installed (sudo when
# not root), the way scripts/setup.sh --bench does. A PYTHON other than
# /usr/bin/python3 is not Debian's, so it is only reported, not fixed. A
# failed install is a warning: the table then shows n/a for the peer.
bench_torch_deps() {
  "$PYTHON" -c 'import torch, numpy' 2>/dev/null && return 0
  if [ "$PYTHON" != /usr/bin/python3 ]; then
    echo "bench: warning: $PYTHON cannot import torch and numpy; the PyTorch columns will be n/a" >&2
    return 0
  fi
  local sudo=""
  [ "$(id -u)" != 0 ] && sudo="sudo"
  echo "bench: installing python3-torch python3-numpy for the PyTorch peer ..." >&2
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
      --no-install-recommends python3-torch python3-numpy; } >"$WORK/logs/apt.log" 2>&1 &&
    "$PYTHON" -c 'import torch, numpy' 2>/dev/null ||
    echo "bench: warning: could not install python3-torch (see $WORK/logs/apt.log); the PyTorch columns will be n/a" >&2
}

# bench_spec DST DATA STEPS [N_LAYER NAME]: the bundled example's spec
# (examples/tiny/model.json) into DST with the data at DATA, STEPS steps,
# warmup_steps capped at them, validation kept out of the timed steps
# (eval_every 0, eval_batches 1), no checkpoints; N_LAYER and NAME, when
# given, replace the model's depth and name.
bench_spec() {
  "$PYTHON" - "$ROOT/examples/tiny/model.json" "$@" <<'PY'
import json, sys
src, dst, data, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = json.load(open(src))
if len(sys.argv) > 6:
    s["model"]["n_layer"] = int(sys.argv[5])
    s["name"] = sys.argv[6]
s["data"] = {"train": data + "/train.bin", "val": data + "/val.bin"}
t = s["train"]
t["steps"] = steps
t["warmup_steps"] = min(t.get("warmup_steps", 0), steps)
t["eval_every"] = 0
t["eval_batches"] = 1
t["checkpoint_every"] = 0
json.dump(s, open(dst, "w"), indent=1)
PY
}
