#!/usr/bin/env bash
# A spec's config tree and checkpoint retention from the command line:
# "extends" and --set on every command that reads a spec (help, overrides,
# refusals with the key named), `train --keep-last N` (the folder holds N,
# resuming from the newest gives the uninterrupted run's losses) and
# `--weights-only-checkpoints` (a third of the size; resuming restarts the
# optimizer and says so), in one process and over 2 ZeRO-1 ranks.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

"$AA" data synth --out "$tmp/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
mkdir -p "$tmp/lib" "$tmp/exp"
cat >"$tmp/lib/base.json" <<JSON
{"name": "base", "model": {"n_layer": 2, "n_head": 2, "d_model": 16, "d_ff": 32, "seq_len": 8, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 6, "lr": 0.001},
 "data": {"train": "../data/train.bin", "val": "../data/val.bin"}}
JSON
printf '{"extends": "../lib/base.json", "name": "tree", "model": {"n_layer": 1}}\n' >"$tmp/exp/child.json"
printf '{"format": "autoaccel-strategy", "version": 1}\n' >"$tmp/s.json"
check() { "$AA" strategy check "$tmp/s.json" --model "$tmp/exp/child.json" "$@"; }

# Every command that reads a spec lists --set.
for cmd in train auto submit plan "strategy check" import export generate query; do
  # shellcheck disable=SC2086
  expect 0 "--set KEY.PATH=VALUE" "$AA" $cmd --help
done

# extends: the child's name and n_layer, the base's data (relative to the base).
expect 0 "valid for tree" check
expect 0 "6480 parameters" "$AA" train "$tmp/exp/child.json" --steps 1 --threads 1 --out "$tmp/r0"
# --set: numbers, booleans, strings, nested objects; the last one wins.
expect 0 "valid for renamed" check --set name=renamed
expect 0 "8704 parameters, 2 layers" "$AA" train "$tmp/exp/child.json" --steps 1 --threads 1 --out "$tmp/r0" \
  --set model.n_layer=3 --set model.n_layer=2
expect 0 "valid for tree" check --set 'model.moe=null' --set train.weights_only_checkpoints=true
# An object merges into the spec's: d_model stays 16, which n_head 3 does not divide.
expect 0 "8704 parameters, 2 layers, d_model 16" "$AA" train "$tmp/exp/child.json" --steps 1 --threads 1 \
  --out "$tmp/r0" --set model='{"n_layer": 2}'
expect 1 "model.n_head: must divide model.d_model .*set by --set model=" check --set model='{"n_head": 3}'
# Refusals: unknown key (named, with the --set), bad value, bad syntax (exit 2).
expect 1 "model.n_layr: unknown key .*set by --set model.n_layr=8" check --set model.n_layr=8
expect 1 "model.n_layer: must be an integer \(got string\)" check --set model.n_layer=eight
expect 1 "train.no_save_optim: must be true or false" check --set train.no_save_optim=yes
expect 2 "--set 'model.n_layer': expected KEY.PATH=VALUE" check --set model.n_layer
expect 2 "an empty key" check --set model..n_layer=2
expect 2 "an empty key" "$AA" train "$tmp/exp/child.json" --set .x=1
# query --model hashes the overridden spec: the override is checked like the
# file's own fields; a hash, or no --model, takes none.
expect 1 "model.n_layr: unknown key .*set by --set model.n_layr=2" \
  "$AA" query jobs --model "$tmp/exp/child.json" --set model.n_layr=2
expect 2 "--set overrides a spec file, not a model hash" "$AA" query jobs --model 0123456789abcdef --set model.n_layer=2
expect 2 "--set overrides the spec given by --model" "$AA" query jobs --set model.n_layer=2
# A base's unknown key names the base; a cycle and a missing base name the chain.
printf '{"extends": "child.json", "train": {"lr_typo": 1}}\n' >"$tmp/exp/typo.json"
expect 1 "typo.json: train.lr_typo: unknown key" "$AA" plan "$tmp/exp/typo.json" --pool h100-80gb:8
printf '{"extends": "typo.json"}\n' >"$tmp/exp/leaf.json"
expect 1 "train.lr_typo is set in .*typo.json \(which .*leaf.json extends\)" \
  "$AA" plan "$tmp/exp/leaf.json" --pool h100-80gb:8
printf '{"extends": "b.json"}\n' >"$tmp/exp/a.json"
printf '{"extends": "a.json"}\n' >"$tmp/exp/b.json"
expect 1 "a.json -> .*b.json -> .*a.json: extends makes a cycle" check --model "$tmp/exp/a.json"
printf '{"extends": "gone.json"}\n' >"$tmp/exp/miss.json"
expect 1 "miss.json: extends \"gone.json\": .*gone.json: No such file" "$AA" train "$tmp/exp/miss.json"

# --keep-last 2, a checkpoint every step: the folder ends with steps 4 and
# 5 and final.ckpt; resuming from step 5 gives the uninterrupted run's last
# loss to the last digit (one thread: deterministic kernels).
expect 0 "keep-last 2: removed .*step_000003.ckpt \(1 file\)" "$AA" train "$tmp/exp/child.json" --threads 1 \
  --out "$tmp/k" --checkpoint-every 1 --keep-last 2 --losses "$tmp/lk.txt"
got=$(cd "$tmp/k" && echo *)
[ "$got" = "final.ckpt step_000004.ckpt step_000005.ckpt" ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: keep-last 2 left: $got"; }
expect 0 "done: 1 steps" "$AA" train "$tmp/exp/child.json" --threads 1 --out "$tmp/k2" \
  --resume "$tmp/k/step_000005.ckpt" --losses "$tmp/lr.txt"
[ "$(tail -1 "$tmp/lk.txt")" = "$(cat "$tmp/lr.txt")" ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: resumed loss $(cat "$tmp/lr.txt") vs $(tail -1 "$tmp/lk.txt")"; }
# Merak's name in the spec: save_total_limit 1 keeps the newest only.
expect 0 "done: 6 steps" "$AA" train "$tmp/exp/child.json" --threads 1 --out "$tmp/k3" --checkpoint-every 2 \
  --set train.save_total_limit=1
got=$(cd "$tmp/k3" && echo *)
[ "$got" = "final.ckpt step_000004.ckpt" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: limit 1 left: $got"; }

# Weights only: header + 1 section instead of 3 (6480 fp32 parameters:
# 256 + 25920 bytes against 256 + 77760); resuming restarts the optimizer.
expect 0 "checkpoint .*step_000004.ckpt \(step 4, weights only\)" "$AA" train "$tmp/exp/child.json" --threads 1 \
  --out "$tmp/w" --checkpoint-every 4 --weights-only-checkpoints
size() { wc -c <"$1" | tr -d ' '; }
[ "$(size "$tmp/w/step_000004.ckpt")" = 26176 ] && [ "$(size "$tmp/k/step_000004.ckpt")" = 78016 ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: sizes $(size "$tmp/w/step_000004.ckpt") $(size "$tmp/k/step_000004.ckpt")"; }
expect 0 "holds no optimizer state .*the optimizer restarts .*at step 4" "$AA" train "$tmp/exp/child.json" \
  --threads 1 --out "$tmp/w2" --resume "$tmp/w/step_000004.ckpt"
# Step 5's loss comes before its update: from the same step-4 weights and
# data position it is the full checkpoint's to the last digit; step 6's,
# after an update with fresh moments, is not.
"$AA" train "$tmp/exp/child.json" --threads 1 --out "$tmp/w2" --resume "$tmp/w/step_000004.ckpt" \
  --losses "$tmp/lw.txt" >/dev/null 2>&1
"$AA" train "$tmp/exp/child.json" --threads 1 --out "$tmp/w3" --resume "$tmp/k/step_000004.ckpt" \
  --losses "$tmp/lf.txt" >/dev/null 2>&1
[ "$(sed -n 1p "$tmp/lw.txt")" = "$(sed -n 1p "$tmp/lf.txt")" ] && [ -n "$(sed -n 1p "$tmp/lw.txt")" ] &&
  [ "$(sed -n 2p "$tmp/lw.txt")" != "$(sed -n 2p "$tmp/lf.txt")" ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: weights-only resume losses $(cat "$tmp/lw.txt") vs full $(cat "$tmp/lf.txt")"; }
# Over 2 ZeRO-1 ranks: every rank file holds its parameters only, and one
# process resumes from the manifest.
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2}, "zero": 1}\n' >"$tmp/z1.json"
expect 0 "done: 6 steps" "$AA" train "$tmp/exp/child.json" --out "$tmp/wz" --strategy "$tmp/z1.json" \
  --checkpoint-every 3 --weights-only-checkpoints --keep-last 1
[ "$(size "$tmp/wz/step_000003.ckpt.rank0of2")" -lt 13500 ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: weights-only rank file is $(size "$tmp/wz/step_000003.ckpt.rank0of2") bytes"; }
expect 0 "holds no optimizer state" "$AA" train "$tmp/exp/child.json" --threads 1 --out "$tmp/wz2" \
  --resume "$tmp/wz/step_000003.ckpt"
# Tensor-parallel rank files likewise (2 ranks, each a slice of the parameters).
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 2}}\n' >"$tmp/tp2.json"
expect 0 "keep-last 1: removed .*step_000003.ckpt \(3 files\)" "$AA" train "$tmp/exp/child.json" --out "$tmp/wt" \
  --strategy "$tmp/tp2.json" --checkpoint-every 3 --weights-only-checkpoints --keep-last 1 --steps 7
expect 0 "holds no optimizer state .*at step 6" "$AA" train "$tmp/exp/child.json" --threads 1 --out "$tmp/wt2" \
  --resume "$tmp/wt/step_000006.ckpt" --steps 7
expect 2 "--keep-last needs an integer" "$AA" train "$tmp/exp/child.json" --keep-last -1

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
