#!/usr/bin/env bash
# Generation tokens/s with and without the KV cache (`autoaccel generate`
# and `generate --no-kv-cache`) on one small model, interleaved in each
# round, with their ratio. The model is the bundled example's shape (4
# layers, d_model 128, 4 heads, d_ff 512, byte vocabulary) with seq_len
# 256, trained 2 steps on synthetic data (the rate does not depend on the
# weights); each run feeds a 16-byte prompt and generates until the
# context is full. Prints a table; asserts nothing. See bench/README.md.
#
# usage: bench/generate.sh [--rounds R] [--threads N] [--work DIR] [--keep]
#   --rounds R   interleaved rounds; each figure is the best round (default 3)
#   --threads N  --threads of the runs (default: nproc)
#   --work DIR   where data, logs and results go (default: a temp dir)
#   --keep       keep the temp dir
# Environment: AUTOACCEL (the binary; default build-release/autoaccel, built
# here), BUILD_DIR (default build-release).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-release}
ROUNDS=3
THREADS=$(nproc)
WORK=""
KEEP=0
SEQ=256
PROMPT="the cat sat on a"

die() { echo "bench/generate.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; ROUNDS=$2; shift 2 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; THREADS=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for v in "$ROUNDS" "$THREADS"; do [[ $v =~ ^[1-9][0-9]*$ ]] || die "'$v' is not a positive integer"; done

# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
bench_work_dir aa-bench-gen data run
bench_build
"$AUTOACCEL" generate --help >/dev/null 2>&1 || die "$AUTOACCEL has no 'generate'"

"$AUTOACCEL" data synth --out "$WORK/data" --bytes 400000 >/dev/null
cat >"$WORK/model.json" <<JSON
{"name": "gen-bench", "model": {"family": "gpt2", "n_layer": 4, "n_head": 4, "d_model": 128, "d_ff": 512,
  "seq_len": $SEQ, "vocab_size": 256},
 "train": {"global_batch": 2, "steps": 2, "lr": 0.001, "eval_every": 0, "eval_batches": 1},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
"$AUTOACCEL" train "$WORK/model.json" --threads "$THREADS" --out "$WORK/run" >"$WORK/logs/train.log" 2>&1 ||
  { tail -5 "$WORK/logs/train.log" >&2; die "train failed"; }

# rate MODE: the tokens/s of one run (its stderr line), its text kept.
rate() {
  local flag=() name=$1
  [ "$name" = nocache ] && flag=(--no-kv-cache)
  "$AUTOACCEL" generate "$WORK/run/final.ckpt" --model "$WORK/model.json" --prompt "$PROMPT" --threads "$THREADS" "${flag[@]}" \
    >"$WORK/logs/$name.txt" 2>"$WORK/logs/$name.err" || { cat "$WORK/logs/$name.err" >&2; die "generate failed"; }
  sed -n 's/.*: \([0-9.]*\) tokens\/s.*/\1/p' "$WORK/logs/$name.err"
}

best_kv=0 best_no=0
for r in $(seq "$ROUNDS"); do
  kv=$(rate kv)
  no=$(rate nocache)
  cmp -s "$WORK/logs/kv.txt" "$WORK/logs/nocache.txt" || die "round $r: the two paths generated different text"
  echo "round $r: KV cache $kv tokens/s, no cache $no tokens/s" >&2
  best_kv=$(awk -v a="$best_kv" -v b="$kv" 'BEGIN { print (b > a ? b : a) }')
  best_no=$(awk -v a="$best_no" -v b="$no" 'BEGIN { print (b > a ? b : a) }')
done
new=$((SEQ - ${#PROMPT}))
printf '\ngeneration, gpt2 4 layers d_model 128 seq_len %d, prompt %d tokens + %d new, %s threads, best of %s\n' \
  "$SEQ" "${#PROMPT}" "$new" "$THREADS" "$ROUNDS"
printf '%-14s %12s\n' "path" "tokens/s"
printf '%-14s %12s\n' "KV cache" "$best_kv"
printf '%-14s %12s\n' "no cache" "$best_no"
awk -v a="$best_kv" -v b="$best_no" 'BEGIN { printf "%-14s %11.1fx\n", "ratio", a / b }'
