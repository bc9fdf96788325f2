#!/usr/bin/env bash
# One prepared run that proves the CUDA path on a lent GPU (docs/gpu-check.md).
#
#   scripts/gpu-check.sh bundle [--dir DIR] [--build-dir DIR] [--max-mib N] [--no-build]
#       Here, with the CUDA toolkit: a Release build with CUDA for sm_90, then DIR
#       (default gpu-bundle/, ignored) holding every executable that build put in its
#       top folder named autoaccel*, the CUDA tests and benches `run` starts, each shared
#       library they need that a bare CUDA image lacks (from ldd), the fixtures and
#       this script (bin/, lib/ and src/ packed in payload.tar.gz, which run unpacks).
#       Fails if DIR is over --max-mib (default 64 MiB less the tracked
#       tree, which travels with it). --no-build bundles the --build-dir as it is (the
#       suite's test does so with its own build).
#   scripts/gpu-check.sh run [--bundle DIR] [--budget S] [--only STEP,STEP...]
#       There (or anywhere): every CUDA step under its own timeout, the whole run within
#       S seconds (default 450); writes $OUT/gpu-check/summary.{json,txt} (OUT default
#       ./gpu-check-out). Without a GPU each step is skipped with the reason, exit 0.
#       --only runs the steps named (a rerun of those that failed), the others skipped.
#   scripts/gpu-check.sh collect-libs LIBDIR BIN...
#       Copies into LIBDIR each library ldd resolves for BIN that is not allowed to
#       come from the device image (the allowed list: aa_gc_allowed below).
#   scripts/gpu-check.sh check-libs LIBDIR BIN...
#       With LD_LIBRARY_PATH=LIBDIR alone, every library BIN needs must resolve inside
#       LIBDIR or be allowed from the image; exit 1 naming each one that does not.
#
# Exit codes: 0 done (run: whatever the steps' outcomes), 1 failure, 2 usage.
set -uo pipefail

aa_gc_self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

aa_gc_usage() {
  sed -n '2,/^# Exit codes/p' "$aa_gc_self" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

aa_gc_die() {
  echo "gpu-check: $*" >&2
  exit 1
}

# Libraries a CUDA image has and the bundle must not carry: the C runtime and
# the C++ runtime every program there uses, the driver (libcuda, libnvidia-*:
# mounted from the host, it must match the kernel module), and the CUDA
# toolkit's runtime, cuBLAS, cuBLASLt and NCCL (the image's toolkit is the
# nvcc 13.0 this builds with; cuBLASLt alone is 540 MB and NCCL 220 MB, far
# over what the device tool carries). `run` finds the toolkit's libraries.
aa_gc_allowed() {
  case "$1" in
  linux-vdso.so* | linux-gate.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | \
    librt.so* | libresolv.so* | libutil.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | libnvidia-*.so* | \
    libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so*)
    return 0
    ;;
  esac
  return 1
}

# Prints "NAME PATH" for each library ldd lists for $2 (PATH "-" when not
# found), with LD_LIBRARY_PATH=$1 (empty: the binary's own paths only).
aa_gc_ldd() {
  local out
  if ! out=$(env -u LD_PRELOAD LD_LIBRARY_PATH="$1" ldd "$2" 2>&1); then
    echo "gpu-check: ldd $2: $out" >&2
    return 1
  fi
  awk '$2 == "=>" && $3 == "not" { print $1, "-"; next }
       $2 == "=>" && $3 ~ /^\// { print $1, $3; next }
       $1 ~ /^\// && $2 ~ /^\(0x/ { n = split($1, p, "/"); print p[n], $1 }' <<<"$out"
}

aa_gc_collect_libs() {
  local libdir=$1 bin name path bad=0
  shift
  mkdir -p "$libdir" || return 1
  for bin in "$@"; do
    [ -f "$bin" ] || aa_gc_die "collect-libs: $bin: no such file"
    while read -r name path; do
      aa_gc_allowed "$name" && continue
      if [ "$path" = - ]; then
        echo "gpu-check: $bin needs $name, which ldd does not find here" >&2
        bad=1
      elif [ ! -e "$libdir/$name" ]; then
        cp -L "$path" "$libdir/$name" && chmod u+w "$libdir/$name" || bad=1
      fi
    done < <(aa_gc_ldd "" "$bin" || echo "? -")
  done
  return $bad
}

aa_gc_check_libs() {
  local libdir bin name path bad=0
  libdir=$(cd "$1" && pwd) || aa_gc_die "check-libs: $1: no such directory"
  shift
  for bin in "$@"; do
    [ -f "$bin" ] || aa_gc_die "check-libs: $bin: no such file"
    while read -r name path; do
      aa_gc_allowed "$name" && continue
      if [ "$path" = - ]; then
        echo "gpu-check: $bin: $name is not found" >&2
        bad=1
      elif [ "$(cd "$(dirname "$path")" && pwd -P)" != "$(cd "$libdir" && pwd -P)" ]; then
        echo "gpu-check: $bin: $name resolves to $path, outside $libdir" >&2
        bad=1
      fi
    done < <(aa_gc_ldd "$libdir" "$bin" || echo "? -")
  done
  return $bad
}

# The CUDA tests and benches `run` starts, besides every autoaccel* executable.
AA_GC_TARGETS="test_cuda test_cuda_ops test_cuda_train test_reference test_generate test_comm
test_comm_alltoall bench_cuda_ops"

# Builds every target named autoaccel* (the command, and any binary it
# starts) and the CUDA tests and benches in $1.
aa_gc_build() {
  local targets
  # (Makefiles list "... NAME", Ninja "NAME: phony".)
  targets=$(cmake --build "$1" --target help | awk '{ print ($1 == "..." ? $2 : $1) }' | sed 's/:.*//' |
    grep -E '^autoaccel[A-Za-z0-9_-]*$' | sort -u | tr '\n' ' ')
  [ -n "$targets" ] || aa_gc_die "bundle: the build has no autoaccel target"
  echo "gpu-check: building $targets${AA_GC_TARGETS//$'\n'/ } in $1" >&2
  # shellcheck disable=SC2086
  cmake --build "$1" -j"$(nproc)" --target $targets $AA_GC_TARGETS >"$1/gpu-check-build.log" 2>&1 ||
    aa_gc_die "bundle: the build failed (see $1/gpu-check-build.log)"
}

aa_gc_bundle() {
  local dir="" build="" max_mib="" repo no_build=0
  repo=$(cd "$(dirname "$aa_gc_self")/.." && pwd)
  while [ $# -gt 0 ]; do
    case "$1" in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a value}; shift 2 ;;
    --max-mib) max_mib=${2:?--max-mib needs a value}; shift 2 ;;
    --no-build) no_build=1; shift ;;
    *) aa_gc_usage ;;
    esac
  done
  [[ "$max_mib" =~ ^[0-9]*$ ]] || { echo "gpu-check: bundle: --max-mib takes a whole number of MiB, not '$max_mib'" >&2; exit 2; }
  dir=${dir:-$repo/gpu-bundle}
  build=${build:-$repo/build-gpu}
  local targets t
  if [ $no_build = 0 ]; then
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || aa_gc_die "bundle: no nvcc: the bundle needs the CUDA toolkit"
    mkdir -p "$build" || aa_gc_die "bundle: cannot make $build"
    local launch=()
    command -v ccache >/dev/null && launch=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
      -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    # -march=x86-64-v3 (AVX2, FMA): the device's host CPU is not this one.
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DAUTOACCEL_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DAUTOACCEL_MARCH=x86-64-v3 -DAUTOACCEL_SANITIZE=OFF -DAUTOACCEL_WERROR=OFF "${launch[@]}" \
      >"$build/gpu-check-configure.log" 2>&1 ||
      aa_gc_die "bundle: cmake configure failed (see $build/gpu-check-configure.log)"
    aa_gc_build "$build"
  fi
  [ -x "$build/autoaccel" ] || aa_gc_die "bundle: $build/autoaccel: not built"
  # Only a bundle is replaced: never a folder this script did not make.
  if [ -e "$dir" ] && [ ! -f "$dir/MANIFEST" ]; then
    aa_gc_die "bundle: $dir exists and is no bundle (no MANIFEST): remove it or pick another --dir"
  fi
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" "$dir/src/tests" "$dir/src/bench" "$dir/src/examples/tiny" ||
    aa_gc_die "bundle: cannot make $dir"
  echo "incomplete: scripts/gpu-check.sh bundle did not finish" >"$dir/MANIFEST"
  local f
  for f in "$build"/autoaccel*; do
    [ -f "$f" ] && [ -x "$f" ] && cp "$f" "$dir/bin/"
  done
  local absent=""
  for t in $AA_GC_TARGETS; do
    if [ -f "$build/$t" ]; then
      cp "$build/$t" "$dir/bin/"
    elif [ $no_build = 1 ]; then
      absent+=" $t" # --no-build takes the build as it is; run fails the steps they serve
    else
      aa_gc_die "bundle: $build/$t was not built"
    fi
  done
  strip --strip-unneeded "$dir"/bin/* || aa_gc_die "bundle: strip failed"
  aa_gc_collect_libs "$dir/lib" "$dir"/bin/* || aa_gc_die "bundle: collecting the libraries failed"
  aa_gc_check_libs "$dir/lib" "$dir"/bin/* || aa_gc_die "bundle: a binary needs a library the bundle lacks"
  cp -r "$repo/tests/reference" "$dir/src/tests/" && rm -f "$dir"/src/tests/reference/*.py &&
    cp "$repo/bench/cuda_train.sh" "$dir/src/bench/" && cp "$repo/examples/tiny/model.json" "$dir/src/examples/tiny/" &&
    cp "$aa_gc_self" "$dir/gpu-check.sh" || aa_gc_die "bundle: copying the fixtures failed"
  {
    echo "built $(date -u +%FT%TZ) from $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo '+changes')"
    echo "nvcc $( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "binaries: $(cd "$dir/bin" && echo *)"
    [ -z "$absent" ] || echo "not built:$absent"
    echo "libraries: $(cd "$dir/lib" && echo *)"
    echo "from the image: $(for b in "$dir"/bin/*; do aa_gc_ldd "$dir/lib" "$b"; done | awk '{ print $1 }' | sort -u |
      while read -r n; do aa_gc_allowed "$n" && printf '%s ' "$n"; done)"
  } >"$dir/MANIFEST"
  local listing
  listing=$(ls -l "$dir/lib" | awk 'NR > 1 { printf "  %-28s %9d\n", $9, $5 }')
  # Packed, the folder travels in 40 % of the room (OpenBLAS alone is 36 MB); run unpacks it.
  # gzip -1: 20 MB in a third of -6's time (which packs to 17).
  tar -C "$dir" -cf - bin lib src | gzip -1 >"$dir/payload.tar.gz" && rm -rf "${dir:?}/bin" "${dir:?}/lib" "${dir:?}/src" ||
    aa_gc_die "bundle: packing $dir/payload.tar.gz failed"
  local kib tree_kib
  kib=$(du -sk "$dir" | awk '{ print $1 }')
  tree_kib=$(git -C "$repo" ls-files -z 2>/dev/null | (cd "$repo" && xargs -0 du -ckL 2>/dev/null) | awk 'END { print $1 + 0 }')
  [ -n "$max_mib" ] || max_mib=$(((64 * 1024 - tree_kib) / 1024))
  cat "$dir/MANIFEST"
  echo "$listing"
  echo "bundle $dir: $((kib / 1024)) MiB ($kib KiB); the tracked tree $((tree_kib / 1024)) MiB; limit $max_mib MiB"
  [ "$kib" -le $((max_mib * 1024)) ] || aa_gc_die "bundle: $dir is $((kib / 1024)) MiB, over $max_mib MiB"
}

# ---------------------------------------------------------------- run --------

# JSON string of $1.
aa_gc_json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}

aa_gc_steps="" # one line per step: name<TAB>status<TAB>seconds<TAB>reason<TAB>figures JSON

# aa_gc_record NAME STATUS SECONDS REASON [FIGURES_JSON]
aa_gc_record() {
  local figs=${5:-"{}"}
  [ -n "$figs" ] || figs="{}"
  aa_gc_steps+="$1"$'\t'"$2"$'\t'"$3"$'\t'"${4//$'\t'/ }"$'\t'"$figs"$'\n'
  printf 'gpu-check: %-18s %-7s %5ss  %s\n' "$1" "$2" "$3" "$4" >&2
}

# Seconds left of the run's budget.
aa_gc_left() { echo $((aa_gc_deadline - $(date +%s))); }

# aa_gc_limit WANT: the step's time limit, WANT or what the budget has left
# (20 s kept for the summary); empty when under 10 s are left.
aa_gc_limit() {
  local left
  left=$(($(aa_gc_left) - 20))
  [ "$left" -ge 10 ] || return 1
  [ "$1" -le "$left" ] && echo "$1" || echo "$left"
}

# aa_gc_timed LIMIT LOG CMD...: CMD under `timeout`, stdout and stderr to LOG;
# sets aa_gc_rc and aa_gc_secs.
aa_gc_timed() {
  local limit=$1 log=$2 t0
  shift 2
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  aa_gc_rc=$?
  aa_gc_secs=$(($(date +%s) - t0))
}

# aa_gc_have STEP BIN: BIN is in the bundle, else the step is recorded failed.
aa_gc_have() {
  [ -x "$aa_gc_bin/$2" ] && return 0
  aa_gc_record "$1" failed 0 "$2 is not in the bundle (its MANIFEST says what was built)"
  return 1
}

# The losses a training test compared ("  NAME: cpu A -> B, cuda C -> D, max relative
# difference X", test_cuda_train's lines), as JSON members "NAME": X, comma-separated;
# empty when the log has none.
aa_gc_loss_diffs() {
  sed -n 's/^  \([A-Za-z0-9_]*\): cpu .*max relative difference \([-+.0-9eE]*\)$/"\1": \2/p' "$1" | paste -sd, - |
    sed 's/,/, /g'
}

# A suite test binary as a step: passed when it exits 0 having passed a test,
# skipped when every test it ran skipped (the first reason), failed otherwise.
# Where it compared training losses with the CPU, figures.loss_max_rel_diff
# holds each comparison's worst relative difference, and a passed step's
# reason names them.
# aa_gc_test NAME LIMIT ONLY BIN [ARGS...] (ONLY: AA_TEST_ONLY, "" for all)
aa_gc_test() {
  local name=$1 want=$2 only=$3 bin=$4 limit log counts p f s reason
  shift 4
  aa_gc_have "$name" "$bin" || return
  limit=$(aa_gc_limit "$want") || { aa_gc_record "$name" skipped 0 "the run's budget ran out"; return; }
  log=$aa_gc_logs/$name.log
  if [ -n "$only" ]; then
    aa_gc_timed "$limit" "$log" env AA_TEST_ONLY="$only" "$aa_gc_bin/$bin" "$@"
  else
    aa_gc_timed "$limit" "$log" "$aa_gc_bin/$bin" "$@"
  fi
  counts=$(grep -Eo '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -1)
  read -r p _ f _ s _ <<<"${counts:-0 x 0 x 0 x}"
  # The tests that failed, by name (the harness prints "- NAME" before each, "-> FAILED" after).
  local failed_tests
  failed_tests=$(awk '/^- / { t = $2 } /-> FAILED/ { printf "%s\"%s\"", (n++ ? ", " : ""), t }' "$log")
  local diffs figs
  diffs=$(aa_gc_loss_diffs "$log")
  figs="{\"passed\": $p, \"failed\": $f, \"skipped\": $s, \"failed_tests\": [$failed_tests]${diffs:+, \"loss_max_rel_diff\": {$diffs\}}}"
  # The test under way when it hung or died.
  local last
  last=$(awk '/^- / { t = $2 } END { print t }' "$log")
  if [ "$aa_gc_rc" = 124 ] || [ "$aa_gc_rc" = 137 ]; then
    aa_gc_record "$name" failed "$aa_gc_secs" "timed out after $limit s in ${last:-its start} (log: logs/$name.log)" "$figs"
  elif [ "$aa_gc_rc" -gt 128 ]; then
    aa_gc_record "$name" failed "$aa_gc_secs" "died of signal $((aa_gc_rc - 128)) in ${last:-its start}: $(tail -1 "$log" | head -c 300)" "$figs"
  elif [ "$aa_gc_rc" != 0 ] || [ "$f" != 0 ]; then
    reason=$(awk '/^- / { t = $2 } /FAIL / { sub(/^ +/, ""); print t ": " $0; exit }' "$log")
    [ -n "$reason" ] || reason=$(grep -m1 -E 'error|not found|Assert|Sanitizer' "$log" || tail -1 "$log")
    aa_gc_record "$name" failed "$aa_gc_secs" "exit $aa_gc_rc: ${reason:0:300}" "$figs"
  elif [ "$p" = 0 ]; then
    reason=$(grep -m1 'skipped:' "$log" | sed 's/^ *skipped: *//')
    aa_gc_record "$name" skipped "$aa_gc_secs" "every test skipped: ${reason:-no reason printed}" "$figs"
  else
    reason="$p passed"
    [ -z "$diffs" ] || reason+="; loss vs cpu, max relative difference: ${diffs//\"/}"
    [ "$s" = 0 ] || reason+=", $s skipped: $(grep -m1 'skipped:' "$log" | sed 's/^ *skipped: *//')"
    aa_gc_record "$name" passed "$aa_gc_secs" "${reason:0:300}" "$figs"
  fi
}

# The GPU's name, driver, memory and clocks from nvidia-smi, as JSON ("{}"
# when it answers none of them; fields an older driver lacks are left out).
aa_gc_smi() {
  local q=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,power.limit,temperature.gpu
  local line
  line=$(nvidia-smi --query-gpu=$q --format=csv,noheader 2>/dev/null | head -1)
  if [ -z "$line" ] || [[ "$line" == *"nvalid"* ]]; then
    q=name,driver_version,memory.total,clocks.sm,clocks.mem
    line=$(nvidia-smi --query-gpu=$q --format=csv,noheader 2>/dev/null | head -1)
  fi
  if [ -z "$line" ] || [[ "$line" == *"nvalid"* ]]; then
    echo "{}"
    return
  fi
  awk -F', *' -v q="$q" 'BEGIN { n = split(q, k, ",") }
    { printf "{"; for (i = 1; i <= n; i++) { gsub(/["\\]/, "", $i); printf "%s\"%s\": \"%s\"", (i > 1 ? ", " : ""), k[i], $i }; printf "}" }' <<<"$line"
}

# Python, for the steps' JSON, without the bundle's libraries on its path.
aa_gc_py() { env -u LD_LIBRARY_PATH python3 "$@"; }

aa_gc_model() { # FILE GLOBAL_BATCH: GPT-2 124M's shape (as bench/cuda_train.sh), on DATA
  cat >"$1" <<JSON
{"name": "gpt2-124m", "model": {"n_layer": 12, "n_head": 12, "d_model": 768, "d_ff": 3072, "seq_len": 1024,
 "vocab_size": 50304}, "train": {"global_batch": $2, "steps": 10, "lr": 6e-4, "warmup_steps": 2, "eval_every": 0},
 "data": {"train": "$3"}}
JSON
}

aa_gc_step_bench_ops() {
  local limit
  if ! aa_gc_have bench_cuda_ops bench_cuda_ops; then
    :
  elif limit=$(aa_gc_limit 60); then
    aa_gc_timed "$limit" "$aa_gc_logs/bench_cuda_ops.log" "$aa_gc_bin/bench_cuda_ops" 20
    # Its table's rows: op, math, N, C, OC | fwd ms, TFLOP/s | bwd ms, TFLOP/s.
    local figs
    figs=$(aa_gc_py - "$aa_gc_logs/bench_cuda_ops.log" <<'PY'
import json, re, sys
rows, device = [], None
for line in open(sys.argv[1], errors="replace"):
  if line.startswith("device:"):
      device = line[7:].strip()
  m = re.match(r"(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+([\d.]+)\s+([\d.]+)\s+\|\s+([\d.]+)\s+([\d.]+)", line)
  if m:
      rows.append({"op": m[1], "math": m[2], "shape": [int(m[3]), int(m[4]), int(m[5])], "fwd_ms": float(m[6]),
                   "fwd_tflops": float(m[7]), "bwd_ms": float(m[8]), "bwd_tflops": float(m[9])})
print(json.dumps({"device": device, "rows": rows}))
PY
    )
    if [ "$aa_gc_rc" = 0 ]; then
      aa_gc_record bench_cuda_ops passed "$aa_gc_secs" "GEMM and attention timings: logs/bench_cuda_ops.log" "$figs"
    else
      aa_gc_record bench_cuda_ops failed "$aa_gc_secs" "exit $aa_gc_rc: $(tail -1 "$aa_gc_logs/bench_cuda_ops.log")"
    fi
  else
    aa_gc_record bench_cuda_ops skipped 0 "the run's budget ran out"
  fi
}

aa_gc_step_bench_train() {
  local limit figs
  limit=$(aa_gc_limit 200) || { aa_gc_record bench_cuda_train skipped 0 "the run's budget ran out"; return; }
  aa_gc_timed "$limit" "$aa_gc_logs/bench_cuda_train.log" env AUTOACCEL="$aa_gc_bin/autoaccel" \
    bash "$aa_gc_src/bench/cuda_train.sh" "$aa_gc_work/cuda_train"
  figs=$(aa_gc_py - "$aa_gc_work/cuda_train" <<'PY'
import json, os, sys
out = {}
for name in ("fp32", "tf32", "bf16", "bf16_flash"):
    p = os.path.join(sys.argv[1], name + ".json")
    if os.path.exists(p):
        s = json.load(open(p))
        out[name] = {"tokens_per_s": round(s["tokens_per_s"]), "mfu": round(s["mfu"], 4),
                     "step_ms_median": round(s["step_ms_median"], 2), "final_loss": s["final_loss"],
                     "peak_tflops": round(s["peak_flops"] / 1e12, 1)}
print(json.dumps(out))
PY
  )
  local mfu
  mfu=$(aa_gc_py -c 'import json,sys; d=json.loads(sys.argv[1]); print(" ".join("%s %.1f%%" % (k, 100*v["mfu"]) for k, v in d.items()))' "${figs:-{\}}" 2>/dev/null)
  if [ "$aa_gc_rc" = 0 ]; then
    aa_gc_record bench_cuda_train passed "$aa_gc_secs" "MFU: $mfu (targets: bf16_flash 45 %, then 55 %)" "$figs"
  else
    aa_gc_record bench_cuda_train failed "$aa_gc_secs" "exit $aa_gc_rc${mfu:+ (done: $mfu)}: $(tail -1 "$aa_gc_logs/bench_cuda_train.log")" "$figs"
  fi
}

# auto on the GPUs, a planner on its store, calib export, and the dry runs'
# predicted against measured tokens/s.
aa_gc_step_calib() {
  local limit home=$aa_gc_work/calib-home log=$aa_gc_logs/calib.log rc pid figs
  limit=$(aa_gc_limit 180) || { aa_gc_record calib skipped 0 "the run's budget ran out"; return; }
  aa_gc_model "$aa_gc_work/gpt2-b16.json" 16 "$aa_gc_work/data/train.bin"
  mkdir -p "$home"
  aa_gc_timed "$limit" "$log" "$aa_gc_bin/autoaccel" auto "$aa_gc_work/gpt2-b16.json" --devices cuda --no-train \
    --home "$home" --out "$aa_gc_work/calib-out" --max-dryruns 8 --time-limit $((limit - 40 > 30 ? limit - 40 : 30))
  rc=$aa_gc_rc
  local secs=$aa_gc_secs
  "$aa_gc_bin/autoaccel" planner --home "$home" >"$aa_gc_logs/calib-planner.log" 2>&1 &
  pid=$!
  local _
  for _ in $(seq 50); do
    [ -S "$home/planner.sock" ] && break
    sleep 0.2
  done
  timeout 30 "$aa_gc_bin/autoaccel" calib export cuda --planner "unix:$home/planner.sock" \
    >"$aa_gc_work/calib.json" 2>>"$log"
  local erc=$?
  timeout 30 "$aa_gc_bin/autoaccel" query runs --kind dryrun --planner "unix:$home/planner.sock" --json \
    >"$aa_gc_work/runs.json" 2>>"$log"
  # The calibration's own plan for the pool it measured (one GPU), to set
  # against what the dry runs measured.
  timeout 60 "$aa_gc_bin/autoaccel" plan "$aa_gc_work/gpt2-b16.json" --pool cuda:1 --top 1000 --json \
    --planner "unix:$home/planner.sock" >"$aa_gc_work/plan-cuda1.json" 2>>"$log"
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ "$erc" = 0 ]; then
    aa_gc_calib_name=calib-$(echo "$aa_gc_gpu_name" | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/-$//').json
    cp "$aa_gc_work/calib.json" "$aa_gc_outdir/$aa_gc_calib_name"
  fi
  figs=$(aa_gc_py - "$aa_gc_work/runs.json" "$aa_gc_work/plan-cuda1.json" "$aa_gc_work/calib.json" <<'PY'
import json, sys
out = {}
def load(p):
    try:
        return json.load(open(p))
    except Exception as e:
        out.setdefault("errors", []).append("%s: %s" % (p.rsplit("/", 1)[-1], str(e)[:200]))
        return {}
runs = load(sys.argv[1]).get("runs", [])
plan = {s["key"]: s["tokens_per_s"] for s in load(sys.argv[2]).get("strategies", [])}
ok = [r for r in runs if r.get("status") == "ok" and r.get("tokens_per_s")]
out["dryruns"] = len(runs)
out["dryruns_ok"] = len(ok)
measured = {}
for r in ok:
    measured.setdefault(r["key"], []).append(r["tokens_per_s"])
errs = []
for k, ms in sorted(measured.items()):
    m = sum(ms) / len(ms)
    if k in plan:
        errs.append({"key": k, "measured": round(m), "planned": round(plan[k]), "error": round(plan[k] / m - 1, 4)})
out["plan_vs_dryruns"] = errs
if errs:
    a = sorted(abs(e["error"]) for e in errs)
    out["median_abs_error"] = a[len(a) // 2]
    out["max_abs_error"] = a[-1]
    out["within_20pct"] = sum(x <= 0.2 for x in a)
if ok:
    best = max(ok, key=lambda r: r["tokens_per_s"])
    out["best"] = {"key": best["key"], "tokens_per_s": round(best["tokens_per_s"])}
f = load(sys.argv[3])
if f:
    c = f["calibrations"][0]["calibration"]
    out["calibration"] = {"device": c["device"], "ops": len(c["ops"]), "links": len(c["links"]),
                          "measured_s": c.get("measured_s")}
print(json.dumps(out))
PY
  )
  local summary
  summary=$(aa_gc_py -c '
import json, sys
d = json.loads(sys.argv[1]); c = d.get("calibration", {})
s = "%d ops measured; %d dry runs ok" % (c.get("ops", 0), d.get("dryruns_ok", 0))
if "median_abs_error" in d:
    s += "; its plan vs the dry runs: median error %.0f %%, max %.0f %%, %d of %d within 20 %%" % (
        100 * d["median_abs_error"], 100 * d["max_abs_error"], d["within_20pct"], len(d["plan_vs_dryruns"]))
print(s)' "${figs:-{\}}" 2>/dev/null)
  if [ "$erc" = 0 ] && [ "$rc" = 0 ]; then
    aa_gc_record calib passed "$secs" "$summary; kept as $aa_gc_calib_name" "$figs"
  elif [ "$erc" = 0 ]; then
    aa_gc_record calib failed "$secs" "auto exit $rc (the calibration was exported: $aa_gc_calib_name); $summary; $(tail -1 "$log")" "$figs"
  else
    aa_gc_record calib failed "$secs" "auto exit $rc ($(grep -m1 '^autoaccel auto:' "$log" || tail -1 "$log")); calib export failed: $(grep -m1 'calib export' "$log")" "$figs"
  fi
}

# plan from the datasheet profile against plan from the measured calibration.
aa_gc_step_plan() {
  local profile=$1 limit figs n src rc=0
  if [ -z "$profile" ]; then
    aa_gc_record plan_compare skipped 0 "no datasheet profile for '$aa_gc_gpu_name' (h100-80gb, h200-141gb, a100-*)"
    return
  fi
  if [ -z "$aa_gc_calib_name" ]; then
    aa_gc_record plan_compare skipped 0 "no calibration file (the calib step did not export one)"
    return
  fi
  limit=$(aa_gc_limit 60) || { aa_gc_record plan_compare skipped 0 "the run's budget ran out"; return; }
  aa_gc_model "$aa_gc_work/gpt2-b512.json" 512 "$aa_gc_work/data/train.bin"
  local t0
  t0=$(date +%s)
  for n in 8 1024; do
    for src in profile calib; do
      local extra=()
      [ "$src" = calib ] && extra=(--calib "$aa_gc_outdir/$aa_gc_calib_name")
      timeout -k 5 "$limit" "$aa_gc_bin/autoaccel" plan "$aa_gc_work/gpt2-b512.json" --pool "$profile:$n" --top 1000 \
        --json "${extra[@]}" >"$aa_gc_work/plan-$src-$n.json" 2>"$aa_gc_logs/plan-$src-$n.err" || rc=1
      timeout -k 5 "$limit" "$aa_gc_bin/autoaccel" plan "$aa_gc_work/gpt2-b512.json" --pool "$profile:$n" --top 5 \
        "${extra[@]}" >"$aa_gc_logs/plan-$src-$n.txt" 2>&1 || rc=1
    done
  done
  figs=$(aa_gc_py - "$aa_gc_work" <<'PY'
import json, os, re, sys
out = {}
for n in (8, 1024):
    try:
        a, b = (json.load(open(os.path.join(sys.argv[1], "plan-%s-%d.json" % (s, n)))) for s in ("profile", "calib"))
    except Exception as e:
        out[str(n)] = {"error": str(e)[:200]}
        continue
    sa = {s["key"]: s for s in a["strategies"]}
    sb = {s["key"]: s for s in b["strategies"]}
    common = [k for k in sa if k in sb]
    ratios = sorted(sb[k]["tokens_per_s"] / sa[k]["tokens_per_s"] for k in common)
    ta, tb = a["strategies"][0], b["strategies"][0]
    d = {"profile_best": {"key": ta["key"], "tokens_per_s": round(ta["tokens_per_s"]), "mfu": round(ta["mfu"], 4)},
         "calib_best": {"key": tb["key"], "tokens_per_s": round(tb["tokens_per_s"]), "mfu": round(tb["mfu"], 4)},
         "same_best": ta["key"] == tb["key"], "common_strategies": len(common)}
    if ratios:
        d["calib_over_profile_tokens"] = {"min": round(ratios[0], 3), "median": round(ratios[len(ratios) // 2], 3),
                                          "max": round(ratios[-1], 3)}
    # Each op class's level refitted to the measured ops ("GEMMs x1.44, ...").
    m = re.search(r"GEMMs x([0-9.]+), attention x([0-9.]+), memory-bound x([0-9.]+)", " ".join(b.get("assumptions", [])))
    if m:
        d["calib_over_profile_op_times"] = dict(zip(("gemm", "attention", "memory_bound"), map(float, m.groups())))
    out[str(n)] = d
print(json.dumps(out))
PY
  )
  local summary
  summary=$(aa_gc_py -c '
import json, sys
d = json.loads(sys.argv[1]); parts = []
for n, v in d.items():
    if "error" in v: parts.append("%s: %s" % (n, v["error"])); continue
    r = v.get("calib_over_profile_tokens", {})
    parts.append("%s GPUs: best %s (profile) vs %s (calib), calib/profile tokens/s median %s [%s..%s]" % (
        n, v["profile_best"]["key"], v["calib_best"]["key"], r.get("median"), r.get("min"), r.get("max")))
    t = v.get("calib_over_profile_op_times")
if t:
    parts.append("measured/datasheet op times: GEMMs x%s, attention x%s, memory-bound x%s" % (
        t["gemm"], t["attention"], t["memory_bound"]))
print("; ".join(parts))' "${figs:-{\}}" 2>/dev/null)
  if [ "$rc" = 0 ]; then
    aa_gc_record plan_compare passed "$(($(date +%s) - t0))" "$profile: $summary" "$figs"
  else
    aa_gc_record plan_compare failed "$(($(date +%s) - t0))" "a plan failed: $(cat "$aa_gc_logs"/plan-*.err | head -2 | tr '\n' ' ')" "$figs"
  fi
}

aa_gc_step_auto() {
  local limit log=$aa_gc_logs/auto_tiny.log
  limit=$(aa_gc_limit 90) || { aa_gc_record auto_tiny skipped 0 "the run's budget ran out"; return; }
  sed "s|\"data/train.bin\"|\"$aa_gc_work/tiny-data/train.bin\"|; s|\"data/val.bin\"|\"$aa_gc_work/tiny-data/val.bin\"|" \
    "$aa_gc_src/examples/tiny/model.json" >"$aa_gc_work/tiny.json"
  mkdir -p "$aa_gc_work/auto-home"
  aa_gc_timed "$limit" "$log" "$aa_gc_bin/autoaccel" auto "$aa_gc_work/tiny.json" --devices cuda --no-train \
    --home "$aa_gc_work/auto-home" --out "$aa_gc_work/auto-out" --max-dryruns 6
  local best
  best=$(grep -m1 '^best:' "$log")
  if [ "$aa_gc_rc" = 0 ]; then
    aa_gc_record auto_tiny passed "$aa_gc_secs" "${best:-done}" "{\"best\": $(aa_gc_json_str "$best")}"
  else
    aa_gc_record auto_tiny failed "$aa_gc_secs" "exit $aa_gc_rc: $(tail -1 "$log")"
  fi
}

# The steps of run, in their order.
AA_GC_STEPS="cuda_device cuda_ops reference_gpt2_cuda reference_llama_cuda reference_moe_cuda reference_moe2_cuda
reference_qwen_cuda generate_cuda cuda_train moe_train lora_train bench_cuda_ops bench_cuda_train calib plan_compare auto_tiny
nccl_group nccl_hosts nccl_all_to_all"
aa_gc_only=""

# aa_gc_step NAME CMD...: CMD, unless --only leaves the step NAME out.
aa_gc_step() {
  if [ -n "$aa_gc_only" ] && [[ "$aa_gc_only" != *",$1,"* ]]; then
    aa_gc_record "$1" skipped 0 "not asked for (--only)"
    return
  fi
  "${@:2}"
}

aa_gc_run() {
  local bundle="" budget=450
  while [ $# -gt 0 ]; do
    case "$1" in
    --bundle) bundle=${2:?--bundle needs a value}; shift 2 ;;
    --budget) budget=${2:?--budget needs a value}; shift 2 ;;
    --only) aa_gc_only=,${2:?--only needs a value},; shift 2 ;;
    *) aa_gc_usage ;;
    esac
  done
  local w
  for w in ${aa_gc_only//,/ }; do
    if ! [[ " ${AA_GC_STEPS//$'\n'/ } " == *" $w "* ]]; then
      echo "gpu-check: run: --only takes steps of: ${AA_GC_STEPS//$'\n'/ } (not '$w')" >&2
      exit 2
    fi
  done
  if ! [[ "$budget" =~ ^[0-9]+$ ]] || [ "$budget" -lt 30 ] || [ "$budget" -gt 3600 ]; then
    echo "gpu-check: run: --budget takes seconds, 30 to 3600, not '$budget'" >&2
    exit 2
  fi
  local here
  here=$(dirname "$aa_gc_self")
  if [ -z "$bundle" ]; then
    # Inside the bundle its own folder; in the repository gpu-bundle/.
    if [ -f "$here/payload.tar.gz" ] || [ -d "$here/bin" ]; then bundle=$here; else bundle=$here/../gpu-bundle; fi
  fi
  aa_gc_deadline=$(($(date +%s) + budget))
  local t_start
  t_start=$(date +%s)
  aa_gc_outdir=${OUT:-$PWD/gpu-check-out}/gpu-check
  mkdir -p "$aa_gc_outdir" || aa_gc_die "run: cannot make $aa_gc_outdir"
  aa_gc_outdir=$(cd "$aa_gc_outdir" && pwd)
  aa_gc_work=$(mktemp -d "${TMPDIR:-/tmp}/aa-gpu-check.XXXXXX") || aa_gc_die "run: mktemp failed"
  aa_gc_logs=$aa_gc_work/logs
  mkdir -p "$aa_gc_logs"
  aa_gc_calib_name="" aa_gc_gpu_name=""
  local gpu_json="{}" no_gpu=""

  # Is there a GPU? nvidia-smi's word, and CUDA_VISIBLE_DEVICES as CUDA reads it.
  if [ "${CUDA_VISIBLE_DEVICES+set}" = set ] && { [ -z "$CUDA_VISIBLE_DEVICES" ] || [ "${CUDA_VISIBLE_DEVICES#-}" != "$CUDA_VISIBLE_DEVICES" ]; }; then
    no_gpu="no GPU: CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU"
  elif ! command -v nvidia-smi >/dev/null; then
    no_gpu="no GPU: nvidia-smi is not installed (no NVIDIA driver)"
  elif ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    no_gpu="no GPU: nvidia-smi lists none ($(nvidia-smi -L 2>&1 | head -1))"
  else
    gpu_json=$(aa_gc_smi)
    aa_gc_gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  fi

  # The binaries and their libraries: the bundle's, then the image's CUDA
  # toolkit (wherever it keeps them; PyTorch's NVIDIA wheels as a last resort).
  local bundle_err="" libs_json="{}"
  if [ -z "$no_gpu" ]; then
    # The packed bundle unpacks into the work folder; an unpacked one (bin/, lib/, src/) runs as it is.
    local root=$bundle
    if [ -f "$bundle/payload.tar.gz" ]; then
      root=$aa_gc_work/bundle
      mkdir -p "$root" && tar -C "$root" -xzf "$bundle/payload.tar.gz" 2>"$aa_gc_logs/unpack.log" ||
        bundle_err="cannot unpack $bundle/payload.tar.gz: $(head -c 300 "$aa_gc_logs/unpack.log")"
    fi
    if [ -n "$bundle_err" ]; then
      :
    elif [ ! -x "$root/bin/autoaccel" ]; then
      bundle_err="no bundle at $bundle (make one with scripts/gpu-check.sh bundle)"
    else
      bundle=$(cd "$bundle" && pwd) root=$(cd "$root" && pwd)
      aa_gc_bin=$root/bin aa_gc_src=$root/src
      local ldpath=$root/lib name path missing="" d
      missing=$(for b in "$aa_gc_bin"/*; do aa_gc_ldd "$ldpath" "$b"; done | awk '$2 == "-" { print $1 }' | sort -u)
      for name in $missing; do
        for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
          /usr/local/cuda-*/lib64 /usr/local/cuda-*/lib /usr/lib/x86_64-linux-gnu; do
          [ -e "$d/$name" ] && { ldpath+=":$d"; continue 2; }
        done
        path=$(find /opt /usr/local/lib /usr/lib/python3* -maxdepth 9 -name "$name" -path '*nvidia*' 2>/dev/null | head -1)
        [ -n "$path" ] && ldpath+=":$(dirname "$path")"
      done
      export LD_LIBRARY_PATH=$ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      missing=$(for b in "$aa_gc_bin"/*; do aa_gc_ldd "$LD_LIBRARY_PATH" "$b"; done | awk '$2 == "-" { print $1 }' | sort -u | tr '\n' ' ')
      [ -z "$missing" ] || bundle_err="libraries not found in the bundle or the image: $missing"
      # The loader's last word (a symbol version the image's libraries lack, say).
      local v
      if [ -z "$bundle_err" ] && ! v=$("$aa_gc_bin/autoaccel" --version 2>&1); then
        bundle_err="autoaccel does not start: ${v:0:300}"
      fi
      libs_json="{$(for b in "$aa_gc_bin"/*; do aa_gc_ldd "$LD_LIBRARY_PATH" "$b"; done | sort -u |
        awk '{ printf "%s\"%s\": \"%s\"", (NR > 1 ? ", " : ""), $1, $2 }')}"
      export AA_SOURCE_DIR=$aa_gc_src OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
    fi
  fi

  local steps=$AA_GC_STEPS s
  if [ -n "$no_gpu" ] || [ -n "$bundle_err" ]; then
    for s in $steps; do
      if [ -n "$no_gpu" ]; then aa_gc_record "$s" skipped 0 "$no_gpu"; else aa_gc_record "$s" failed 0 "$bundle_err"; fi
    done
  else
    local profile=""
    case "$aa_gc_gpu_name" in
    *H200*) profile=h200-141gb ;;
    *H100*) profile=h100-80gb ;;
    *A100*80GB*) profile=a100-80gb ;;
    *A100*) profile=a100-40gb ;;
    esac
    "$aa_gc_bin/autoaccel" data synth --out "$aa_gc_work/data" --bytes 4000000 >/dev/null 2>&1
    "$aa_gc_bin/autoaccel" data synth --out "$aa_gc_work/tiny-data" --bytes 200000 >/dev/null 2>&1
    aa_gc_step cuda_device aa_gc_test cuda_device 60 "" test_cuda
    aa_gc_step cuda_ops aa_gc_test cuda_ops 120 "" test_cuda_ops
    aa_gc_step reference_gpt2_cuda aa_gc_test reference_gpt2_cuda 60 "" test_reference cuda
    aa_gc_step reference_llama_cuda aa_gc_test reference_llama_cuda 60 "" test_reference llama cuda
    aa_gc_step reference_moe_cuda aa_gc_test reference_moe_cuda 60 "" test_reference moe cuda
    aa_gc_step reference_moe2_cuda aa_gc_test reference_moe2_cuda 60 "" test_reference moe2 cuda
    aa_gc_step reference_qwen_cuda aa_gc_test reference_qwen_cuda 60 "" test_reference qwen cuda
    aa_gc_step generate_cuda aa_gc_test generate_cuda 60 cuda test_generate
    aa_gc_step cuda_train aa_gc_test cuda_train 90 "" test_cuda_train
    aa_gc_step moe_train aa_gc_test moe_train 90 "" test_cuda_train moe
    aa_gc_step lora_train aa_gc_test lora_train 90 "" test_cuda_train lora
    aa_gc_step bench_cuda_ops aa_gc_step_bench_ops
    aa_gc_step bench_cuda_train aa_gc_step_bench_train
    local clocks_loaded
    clocks_loaded=$(aa_gc_smi)
    aa_gc_step calib aa_gc_step_calib
    aa_gc_step plan_compare aa_gc_step_plan "$profile"
    aa_gc_step auto_tiny aa_gc_step_auto
    # NCCL last: a collective that hangs in this sandbox costs its own step only.
    aa_gc_step nccl_group aa_gc_test nccl_group 45 nccl_backend test_comm
    aa_gc_step nccl_hosts aa_gc_test nccl_hosts 45 nccl_hosts test_comm
    aa_gc_step nccl_all_to_all aa_gc_test nccl_all_to_all 45 nccl test_comm_alltoall
    gpu_json="{\"idle\": $gpu_json, \"after_bench\": ${clocks_loaded:-{\}}}"
  fi
  aa_gc_write_summary "$gpu_json" "$libs_json" "$(($(date +%s) - t_start))" "$bundle"
  # The logs, as one file (the device tool brings back 8 files at most).
  tar -C "$aa_gc_work" -czf "$aa_gc_outdir/logs.tar.gz" logs 2>/dev/null
  rm -rf "$aa_gc_work"
  cat "$aa_gc_outdir/summary.txt"
  return 0
}

# aa_gc_write_summary GPU_JSON LIBS_JSON SECONDS BUNDLE
aa_gc_write_summary() {
  local j=$aa_gc_outdir/summary.json t=$aa_gc_outdir/summary.txt
  local name status secs reason figs first=1 np=0 nf=0 ns=0
  {
    printf '{"format": "autoaccel-gpu-check", "version": 1, "date": "%s", "host": %s, "seconds": %s,\n' \
      "$(date -u +%FT%TZ)" "$(aa_gc_json_str "$(hostname 2>/dev/null || echo '?')")" "$3"
    printf ' "bundle": %s, "manifest": %s,\n' "$(aa_gc_json_str "$4")" \
      "$(aa_gc_json_str "$(cat "$4/MANIFEST" 2>/dev/null)")"
    printf ' "gpu": %s,\n "libraries": %s,\n "steps": [\n' "$1" "$2"
    while IFS=$'\t' read -r name status secs reason figs; do
      [ -n "$name" ] || continue
      [ $first = 1 ] || printf ',\n'
      first=0
      printf '  {"name": "%s", "status": "%s", "seconds": %s, "reason": %s, "figures": %s}' \
        "$name" "$status" "$secs" "$(aa_gc_json_str "$reason")" "$figs"
    done <<<"$aa_gc_steps"
    printf '\n ]}\n'
  } >"$j"
  {
    echo "autoaccel gpu-check $(date -u +%FT%TZ): ${aa_gc_gpu_name:-no GPU}, $3 s"
    [ "$1" = "{}" ] || echo "gpu: $1"
    printf '%-20s %-8s %6s  %s\n' STEP STATUS SECONDS RESULT
    while IFS=$'\t' read -r name status secs reason figs; do
      [ -n "$name" ] || continue
      case $status in passed) np=$((np + 1)) ;; failed) nf=$((nf + 1)) ;; *) ns=$((ns + 1)) ;; esac
      printf '%-20s %-8s %6s  %s\n' "$name" "$status" "$secs" "$reason"
    done <<<"$aa_gc_steps"
    echo "$np passed, $nf failed, $ns skipped"
  } >"$t"
}

case "${1:-}" in
bundle) shift; aa_gc_bundle "$@" ;;
run) shift; aa_gc_run "$@" ;;
collect-libs) [ $# -ge 3 ] || aa_gc_usage; shift; aa_gc_collect_libs "$@" ;;
check-libs) [ $# -ge 3 ] || aa_gc_usage; shift; aa_gc_check_libs "$@" ;;
*) aa_gc_usage ;;
esac
