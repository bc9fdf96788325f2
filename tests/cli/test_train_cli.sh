#!/usr/bin/env bash
# `autoaccel train` end to end: help, usage errors (exit 2), bad inputs
# (exit 1 with a message naming the problem), and a short real run.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

"$AA" data synth --out "$tmp/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
spec() { # spec FILE EXTRA_TRAIN_FIELDS
  cat >"$1" <<JSON
{"name": "cli", "model": {"n_layer": 1, "n_head": 2, "d_model": 16, "d_ff": 32, "seq_len": 8, "vocab_size": 256},
 "train": {"global_batch": 2, "steps": 3, "lr": 0.001 $2},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
}
spec "$tmp/ok.json" ""

expect 0 "usage: autoaccel train" "$AA" train --help
expect 2 "expected exactly one MODEL.json" "$AA" train
expect 2 "unknown option" "$AA" train "$tmp/ok.json" --frobnicate
expect 2 "--threads needs an integer" "$AA" train "$tmp/ok.json" --threads zero
expect 2 "unknown command" "$AA" trian
expect 1 "no such file" "$AA" train "$tmp/missing.json"

printf '{"model": {"n_layer": 2,\n  "n_head": }\n}\n' >"$tmp/syntax.json"
expect 1 "syntax.json:2:" "$AA" train "$tmp/syntax.json"
spec "$tmp/range.json" ', "warmup_steps": 10'
expect 1 "train.warmup_steps" "$AA" train "$tmp/range.json"
sed 's/"n_head": 2/"n_head": 3/' "$tmp/ok.json" >"$tmp/div.json"
expect 1 "model.n_head.*divide" "$AA" train "$tmp/div.json"
sed 's/"lr": 0.001/"lr": 0.001, "lr_typo": 1/' "$tmp/ok.json" >"$tmp/unknown.json"
expect 1 "lr_typo" "$AA" train "$tmp/unknown.json"

# Foreign and truncated shards.
mkdir -p "$tmp/bad/data"
sed 's#data/train.bin#bad/data/train.bin#' "$tmp/ok.json" >"$tmp/badshard.json"
printf 'this is not a token shard at all, just some text that is long enough for a header......\n' \
  >"$tmp/bad/data/train.bin"
expect 1 "training data.*bad magic" "$AA" train "$tmp/badshard.json"
head -c 1000 "$tmp/data/train.bin" >"$tmp/bad/data/train.bin"
expect 1 "training data.*truncated" "$AA" train "$tmp/badshard.json"

# A real short run, then resume errors.
expect 0 "done: 3 steps" "$AA" train "$tmp/ok.json" --threads 1 --out "$tmp/run" --summary-json "$tmp/s.json"
grep -q '"tokens_per_s"' "$tmp/s.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: summary json"; }
expect 1 "no such file" "$AA" train "$tmp/ok.json" --resume "$tmp/nope.ckpt" --out "$tmp/run2"
head -c 300 "$tmp/run/final.ckpt" >"$tmp/trunc.ckpt"
expect 1 "truncated" "$AA" train "$tmp/ok.json" --resume "$tmp/trunc.ckpt" --out "$tmp/run2"
sed 's/"d_model": 16/"d_model": 32/' "$tmp/ok.json" >"$tmp/wide.json"
expect 1 "d_model is 16 but the model has 32" "$AA" train "$tmp/wide.json" --resume "$tmp/run/final.ckpt" \
  --out "$tmp/run3"

# Strategies: applied, printed in the log, refused with the rule, and the
# memory limit as a clean out-of-memory failure.
printf '{"format": "autoaccel-strategy", "version": 1, "amp": "bf16", "checkpoint": "full", "micro_batch": 1}\n' \
  >"$tmp/bf16.json"
expect 0 "strategy dp1.tp1.pp1.z0.bf16.ckpt-full.mb1: batch 2 x 8 tokens as 2 micro-batches of 1" \
  "$AA" train "$tmp/ok.json" --threads 1 --out "$tmp/run4" --strategy "$tmp/bf16.json"
expect 0 "memory: params .*acts .*workspace .*peak total" \
  "$AA" train "$tmp/ok.json" --threads 1 --out "$tmp/run4" --strategy "$tmp/bf16.json"
# The CPU's GEMM kernels are named (the machine's OPENBLAS_CORETYPE, when it sets one).
expect 0 "device cpu: OpenBLAS ${OPENBLAS_CORETYPE:-[A-Za-z0-9]+} kernels" \
  "$AA" train "$tmp/ok.json" --threads 1 --out "$tmp/run4" --strategy "$tmp/bf16.json"
printf '["parallel_mode", ["amp_native", {"dtype": "fp16"}], "checkpoint"]\n' >"$tmp/atorch.json"
expect 0 "strategy dp1.tp1.pp1.z0.fp16.ckpt-full.mb2" \
  "$AA" train "$tmp/ok.json" --threads 1 --out "$tmp/run5" --strategy "$tmp/atorch.json"
printf '{"format": "autoaccel-strategy", "version": 1, "micro_batch": 3}\n' >"$tmp/mb3.json"
expect 1 "micro_batch 3" "$AA" train "$tmp/ok.json" --out "$tmp/run6" --strategy "$tmp/mb3.json"
printf '["fp8", "zero1"]\n' >"$tmp/unsup.json"
expect 1 "method .fp8. is not supported .autoaccel has no fp8 GEMMs" "$AA" train "$tmp/ok.json" --out "$tmp/run6" --strategy "$tmp/unsup.json"
expect 1 "no such file" "$AA" train "$tmp/ok.json" --out "$tmp/run6" --strategy "$tmp/none.json"
expect 1 "out of memory: .* would exceed the memory limit of 64.0 KiB" \
  "$AA" train "$tmp/ok.json" --out "$tmp/run6" --memory-limit 64K
expect 2 "--memory-limit: expected a positive byte count" "$AA" train "$tmp/ok.json" --memory-limit 12Q
expect 0 "done: 3 steps" "$AA" train "$tmp/ok.json" --threads 1 --out "$tmp/run7" --memory-limit 64M

# Data parallelism on this host: N rank processes in one shm process group.
# The same global batch split over 2 ranks must give the single process's
# losses. Tolerance 1e-5 relative: fp32 sums of the same terms in another
# order (per-rank partial means, then the all-reduce) differ by a few ulp per
# step (measured ~1e-7); a wrong slice or a missing average is off by >1e-2.
spec "$tmp/dp.json" ""
sed -i 's/"global_batch": 2, "steps": 3/"global_batch": 4, "steps": 6/' "$tmp/dp.json"
expect 0 "done: 6 steps" "$AA" train "$tmp/dp.json" --threads 1 --out "$tmp/dp1" --losses "$tmp/l1.txt"
expect 0 "done: 6 steps" "$AA" train "$tmp/dp.json" --devices cpu:2 --out "$tmp/dp2" --losses "$tmp/l2.txt"
same_losses() { # same_losses A B: equal step count, every loss within 1e-5 relative
  awk 'NR==FNR { a[$1] = $2; n++; next }
       { m++; d = a[$1] - $2; if (d < 0) d = -d; s = a[$1] < 0 ? -a[$1] : a[$1]
         if (!($1 in a) || d > 1e-5 * s) { print "FAIL: step " $1 ": " a[$1] " vs " $2; bad = 1 } }
       END { if (n != m || n == 0) { print "FAIL: " n " vs " m " steps"; bad = 1 }; exit bad }' "$1" "$2"
}
same_losses "$tmp/l1.txt" "$tmp/l2.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: dp2 losses"; }
# The same 2 ranks over gloo (TCP on loopback): its sums are shm's, in rank
# order, so the losses are the same text. The ranks' store directory (under
# TMPDIR) is gone afterwards.
mkdir -p "$tmp/gtmp"
expect 0 "done: 6 steps" env TMPDIR="$tmp/gtmp" "$AA" train "$tmp/dp.json" --devices cpu:2 --backend gloo \
  --out "$tmp/dpg" --losses "$tmp/lg.txt"
cmp -s "$tmp/l2.txt" "$tmp/lg.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: gloo losses differ from shm's"; }
[ -z "$(ls -A "$tmp/gtmp")" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: gloo store left in TMPDIR"; }
expect 2 "--backend: expected shm or gloo" "$AA" train "$tmp/dp.json" --devices cpu:2 --backend tcp
expect 2 "--backend gloo is for CPU ranks" "$AA" train "$tmp/dp.json" --devices cuda:0,1 --backend gloo
# A saved dp2 ZeRO-2 strategy trains on 2 ranks by itself, and rescales on 1.
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2}, "zero": 2}\n' >"$tmp/dp2z2.json"
expect 0 "strategy dp2.tp1.pp1.z2.fp32" \
  "$AA" train "$tmp/dp.json" --out "$tmp/dp3" --strategy "$tmp/dp2z2.json" --losses "$tmp/l3.txt"
same_losses "$tmp/l1.txt" "$tmp/l3.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: dp2 z2 losses"; }
expect 0 "rescaled to dp1 for 1 rank .ZeRO dropped" \
  "$AA" train "$tmp/dp.json" --devices cpu:1 --out "$tmp/dp4" --strategy "$tmp/dp2z2.json"
# Context parallelism: each of 2 ranks holds half of every sequence (seq_len
# 8: chunks of 2 tokens), attention as a ring. The single process's losses
# within 1e-5 (the same fp32 reordering bound: the ring merges each row's
# attention block by block), over shm and over gloo (whose point-to-point
# transfers the ring uses). On 4 ranks the data degree takes the rest.
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"context": 2}}\n' >"$tmp/cp2.json"
expect 0 "strategy dp1.tp1.pp1.cp2.z0.fp32" \
  "$AA" train "$tmp/dp.json" --out "$tmp/cp2" --strategy "$tmp/cp2.json" --losses "$tmp/lc.txt"
same_losses "$tmp/l1.txt" "$tmp/lc.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: cp2 losses"; }
expect 0 "done: 6 steps" env TMPDIR="$tmp/gtmp" "$AA" train "$tmp/dp.json" --devices cpu:2 --backend gloo \
  --out "$tmp/cp2g" --strategy "$tmp/cp2.json" --losses "$tmp/lcg.txt"
same_losses "$tmp/l1.txt" "$tmp/lcg.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: cp2 gloo losses"; }
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"context": 2}, "zero": 1}\n' >"$tmp/cp2z1.json"
expect 0 "rescaled to dp2 for 4 ranks" \
  "$AA" train "$tmp/dp.json" --devices cpu:4 --out "$tmp/cp2d" --strategy "$tmp/cp2z1.json" --losses "$tmp/lcd.txt"
same_losses "$tmp/l1.txt" "$tmp/lcd.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: dp2 cp2 losses"; }
# Megatron's name inside "parallel" is the same axis; a degree whose 2c
# chunks do not divide seq_len is refused with the numbers.
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"context_parallel_size": 8}}\n' >"$tmp/cp8.json"
expect 1 "context parallel degree 8 cuts every sequence into 2 x 8 = 16 chunks.*16 must divide seq_len 8" \
  "$AA" train "$tmp/dp.json" --out "$tmp/cp8" --strategy "$tmp/cp8.json"
expect 2 "expected cpu, cpu:N, cuda or cuda:I,J" "$AA" train "$tmp/dp.json" --devices gpu:2
expect 2 "cuda:0 is named twice" "$AA" train "$tmp/dp.json" --devices cuda:0,0
expect 2 "do not combine" "$AA" train "$tmp/dp.json" --devices cuda:0,1 --device cuda:0
# CUDA_VISIBLE_DEVICES=-1 hides every GPU (a GPU machine too): the driver's reason, exit 1.
expect 1 "--devices cuda:0,1: .*(CUDA|cuda)" env CUDA_VISIBLE_DEVICES=-1 "$AA" train "$tmp/dp.json" --devices cuda:0,1
expect 1 "--devices cuda: .*(CUDA|cuda)" env CUDA_VISIBLE_DEVICES=-1 "$AA" train "$tmp/dp.json" --devices cuda
expect 2 "--devices cpu:N" "$AA" train "$tmp/dp.json" --devices cpu:0
expect 1 "data parallel degree 3 must divide global_batch 4" "$AA" train "$tmp/dp.json" --devices cpu:3 --out "$tmp/dp5"
# One rank failing (out of memory on its own slice) fails the whole run.
expect 1 "rank 0: out of memory" "$AA" train "$tmp/dp.json" --devices cpu:2 --out "$tmp/dp6" --memory-limit 64K

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
