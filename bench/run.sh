#!/usr/bin/env bash
# Training throughput benchmark: tokens/s of `autoaccel train` against the
# PyTorch peer (bench/torch_gpt.py) on the same models, batches, steps and
# thread count, and model FLOP/s against OpenBLAS sgemm FLOP/s measured in
# the same run. Prints a table; asserts nothing. See bench/README.md.
#
# usage: bench/run.sh [--threads N] [--steps N] [--rounds R] [--models LIST] [--work DIR] [--keep]
#   --threads N  worker threads for every contender (default: nproc)
#   --steps N    optimizer steps per run for every model (default: per model,
#                30 for the bundled example, 8 for gpt-6l-512)
#   --models L   comma-separated specs, each SPEC.json[:STEPS] (STEPS default
#                8), instead of the bundled example and gpt-6l-512; e.g.
#                bench/models/llama-6l-512.json
#   --rounds R   rounds, each running every model's autoaccel, PyTorch and
#                sgemm probe in turn; every ratio is taken within a round and
#                the table shows the rounds' median (default 3)
#   --work DIR   where data, specs, logs and results go (default: a temp dir,
#                removed at the end unless --keep)
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release), PYTHON (default /usr/bin/python3).
# The peer needs Debian's python3-torch and python3-numpy: when PYTHON cannot
# import them, they are installed with apt-get (as scripts/setup.sh --bench).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=$(nproc)
STEPS=""
ROUNDS=3
WORK=""
KEEP=0
MODEL_LIST=""

die() { echo "bench/run.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; THREADS=$2; shift 2 ;;
    --steps) [ $# -ge 2 ] || die "--steps needs a value"; STEPS=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --models) [ $# -ge 2 ] || die "--models needs a value"; MODEL_LIST=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$THREADS" "$ROUNDS" ${STEPS:+"$STEPS"}; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"
done

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench specs results runs
bench_torch_deps

# --- build ------------------------------------------------------------------
bench_build
# The sgemm probe and the PyTorch peer use the OpenBLAS build the engine
# loads (Debian ships a pthread and an OpenMP build): the probe is compiled
# against it with an RPATH, the peer finds it through LD_LIBRARY_PATH.
# (The engine binary beside autoaccel loads it: docs/service.md "Two binaries".)
BLAS_SO=$(ldd "$AUTOACCEL-engine" | awk '/libopenblas/ {print $3; exit}')
[ -n "$BLAS_SO" ] || die "$AUTOACCEL-engine does not load libopenblas"
BLAS_DIR=$(dirname "$(readlink -f "$BLAS_SO")")
case $BLAS_DIR in
  *openblas-pthread*)
    [ -f "${BLAS_DIR/openblas-pthread/openblas-openmp}/pkgconfig/openblas.pc" ] &&
      echo "bench/run.sh: warning: $AUTOACCEL links the pthread OpenBLAS although the OpenMP build is" \
        "installed; a stale $BUILD_DIR/CMakeCache.txt? (see bench/README.md)" >&2 ;;
esac
BLAS_PC=${PKG_CONFIG_PATH:-}
[ -f "$BLAS_DIR/pkgconfig/openblas.pc" ] && BLAS_PC=$BLAS_DIR/pkgconfig${BLAS_PC:+:$BLAS_PC}
SGEMM=$BUILD_DIR/bench_sgemm
mkdir -p "$BUILD_DIR"
# shellcheck disable=SC2046  # pkg-config output is a list of flags
cc -O3 -march=native -Wall -Wextra "$ROOT/bench/sgemm.c" -o "$SGEMM" \
  $(PKG_CONFIG_PATH=$BLAS_PC pkg-config --cflags --libs openblas) -Wl,-rpath,"$BLAS_DIR"

# --- data and specs ---------------------------------------------------------
# Both contenders read the same synthetic byte-level shards. Each model's
# spec is copied with its data paths pointed here, validation and
# checkpoints reduced to the minimum (they are outside the timed steps
# anyway), and the step count set.
"$AUTOACCEL" data synth --out "$WORK/data" --bytes 2000000 --seed 1 >"$WORK/logs/data.log" 2>&1 ||
  { cat "$WORK/logs/data.log" >&2; die "autoaccel data synth failed"; }

MODELS=("$ROOT/examples/tiny/model.json:30" "$ROOT/bench/models/gpt-6l-512.json:8")
if [ -n "$MODEL_LIST" ]; then
  IFS=, read -r -a MODELS <<<"$MODEL_LIST"
  for i in "${!MODELS[@]}"; do
    [[ ${MODELS[$i]} == *.json ]] && MODELS[$i]=${MODELS[$i]}:8
    [ -f "${MODELS[$i]%:*}" ] || die "no model spec at ${MODELS[$i]%:*}"
  done
fi
# Each model's linear-layer GEMMs for the sgemm probe (bench_sgemm --gpt or
# --llama, rows = batch * seq_len); none for a mixture of experts, whose
# GEMMs the probe does not know. report.py finds a model's figures in the
# probe's output by these dimensions.
NAMES=() PROBE=()
for entry in "${MODELS[@]}"; do
  src=${entry%:*}
  steps=${STEPS:-${entry##*:}}
  [[ $steps =~ ^[1-9][0-9]*$ ]] || die "'$entry': steps '$steps' is not a positive integer"
  name=$(basename "$(dirname "$src")")
  [ "$name" = models ] && name=$(basename "$src" .json)
  probe=$("$PYTHON" - "$src" "$WORK/specs/$name.json" "$WORK/data" "$steps" <<'EOF'
import json, sys
src, dst, data, steps = sys.argv[1:]
with open(src) as f:
    js = json.load(f)
js["data"] = {"train": data + "/train.bin", "val": data + "/val.bin"}
t = js.setdefault("train", {})
t.update(steps=int(steps), eval_every=0, eval_batches=1, checkpoint_every=0)
t["warmup_steps"] = min(int(t.get("warmup_steps", 0)), int(steps))
with open(dst, "w") as f:
    json.dump(js, f, indent=1)
m = js["model"]
dims = [t["global_batch"] * m["seq_len"], m["d_model"], m["d_ff"], m["vocab_size"], m["n_layer"]]
if m.get("moe"):
    print("")
elif m.get("family") == "llama":
    dims += [m["n_head"], m.get("n_kv_head", m["n_head"]), 1 if m.get("qkv_bias") else 0]
    print("--llama " + ",".join(map(str, dims)))
else:
    print("--gpt " + ",".join(map(str, dims)))
EOF
) || die "cannot read the model spec $src"
  NAMES+=("$name") PROBE+=("$probe")
done

# --- measure ----------------------------------------------------------------
# Contenders alternate within each round so that a noisy neighbour hurts
# both alike; a failed run is logged and left out of the table.
run_one() { # label logfile command...
  local label=$1 log=$2
  shift 2
  echo "  $label" >&2
  "$@" >"$log" 2>&1 || echo "    failed (exit $?), see $log" >&2
}
# Busy CPU time of the whole machine against our own children's, in clock
# ticks: the difference is what other processes took while we measured.
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
own_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
busy0=$(busy_ticks) own0=$(own_ticks) t0=$(date +%s.%N)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >"$WORK/results/load.txt"
# The sgemm probe runs after each model's pair, in the same round, so that
# report.py divides a round's step by a floor measured minutes from it. Its
# OpenBLAS threads idle as the engine's do: the autoaccel command sets
# GOMP_SPINCOUNT=1000 unless the environment sets OMP_WAIT_POLICY or
# GOMP_SPINCOUNT (kernels/README.md, "Idle workers"). With libgomp's default
# spin instead, a loaded machine read the bundled model's floor at 67-612 ms
# against 30-53 ms, above the engine's whole 38 ms step.
PROBE_ENV=()
[ -n "${OMP_WAIT_POLICY+x}${GOMP_SPINCOUNT+x}" ] || PROBE_ENV=(GOMP_SPINCOUNT=1000)
# What the run used, for the report: the binary and tree, the OpenBLAS
# library, how the probe's OpenMP threads idled (the engine's: the same),
# and the OpenBLAS and OpenMP variables the environment set.
"$PYTHON" - "$AUTOACCEL" "$(readlink -f "$BLAS_SO")" \
  "$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)" \
  "${PROBE_ENV[*]-}" >"$WORK/results/env.json" <<'EOF'
import json, os, sys
aa, blas, tree, probe = sys.argv[1:]
names = sorted(k for k in os.environ if k.startswith(("OPENBLAS_", "OMP_", "GOMP_")))
print(json.dumps({"autoaccel": aa, "openblas": blas, "git": tree,
                  "probe_env": probe or "the environment's",
                  "environment": {k: os.environ[k] for k in names}}))
EOF
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  for i in "${!NAMES[@]}"; do
    name=${NAMES[$i]} spec=$WORK/specs/${NAMES[$i]}.json
    run_one "$name autoaccel" "$WORK/logs/aa-$name-$r.log" \
      "$AUTOACCEL" train "$spec" --threads "$THREADS" --summary-json "$WORK/results/aa-$name-$r.json" \
      --out "$WORK/runs/$name" --log-every 1000000
    run_one "$name torch" "$WORK/logs/torch-$name-$r.log" \
      env LD_LIBRARY_PATH="$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$PYTHON" "$ROOT/bench/torch_gpt.py" "$spec" --threads "$THREADS"
    grep '^{' "$WORK/logs/torch-$name-$r.log" >"$WORK/results/torch-$name-$r.json" || rm -f "$WORK/results/torch-$name-$r.json"
    read -r -a probe <<<"${PROBE[$i]}"
    run_one "$name sgemm" "$WORK/logs/sgemm-$name-$r.log" env ${PROBE_ENV[@]+"${PROBE_ENV[@]}"} \
      "$SGEMM" --threads "$THREADS" --json ${probe[@]+"${probe[@]}"}
    grep '^{' "$WORK/logs/sgemm-$name-$r.log" >"$WORK/results/sgemm-$name-$r.json" || rm -f "$WORK/results/sgemm-$name-$r.json"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$WORK/results/load.txt"
awk -v b="$(( $(busy_ticks) - busy0 ))" -v o="$(( $(own_ticks) - own0 ))" -v t0="$t0" -v t1="$(date +%s.%N)" \
  -v n="$(nproc)" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { w = t1 - t0; f = (b - o) / (w * hz * n) * 100; if (f < 0) f = 0;
           printf "other processes used %.0f%% of the %d CPUs during the %.0f s of measurement\n", f, n, w;
           printf "{\"foreign_cpu_pct\": %.1f, \"seconds\": %.1f}\n", f, w > "/dev/stderr" }' \
  >>"$WORK/results/load.txt" 2>"$WORK/results/noise.json"

"$PYTHON" "$ROOT/bench/report.py" "$WORK" "${NAMES[@]}"
[ "$KEEP" = 1 ] && echo "results kept in $WORK" >&2
exit 0
