#!/usr/bin/env bash
# LoRA fine-tuning specs (issue 36; docs/model-spec.md "lora") from the
# command line: the cost model sees the frozen base (strategy check: no
# gradient or optimizer state for it, the work without its weight
# gradients), plan picks another best strategy for Llama-3 8B on 8 H100s
# than for full training, with less memory per GPU; training needs the
# base (init_weights) and the engine refuses adapters by name until it
# trains them.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
MODELS=$SRC/examples/models
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

LORA='lora={"r": 16, "alpha": 32, "targets": ["q", "k", "v", "o", "gate", "up", "down"]}'
cat >"$tmp/s.json" <<'JSON'
{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 8}, "zero": 1, "amp": "bf16",
 "checkpoint": "none", "micro_batch": 1}
JSON
# Full: 15.0 GiB of bf16 weights, 29.9 GiB of fp32 gradients, the ZeRO-1
# shard of master weights and moments. LoRA: the base alone in bf16 (the
# adapters' 160 MiB beside it), the adapters' gradient, their moments' shard
# (41,943,040 x 8 / 8 bytes = 40 MiB), and its data group moving the
# adapters (160 MiB), not the model (29.9 GiB).
expect 0 "^memory: a rank needs at least 105\.0 GiB \(params 15\.0 GiB, grads 29\.9 GiB, optim 11\.2 GiB" \
  "$AA" strategy check "$tmp/s.json" --model "$MODELS/llama3-8b.json"
expect 0 "^memory: a rank needs at least 62\.4 GiB \(params 15\.1 GiB, grads 160\.0 MiB, optim 40\.0 MiB" \
  "$AA" strategy check "$tmp/s.json" --model "$MODELS/llama3-8b-lora.json"
expect 0 "^memory: a rank needs at least 62\.4 GiB \(params 15\.1 GiB, grads 160\.0 MiB" \
  "$AA" strategy check "$tmp/s.json" --model "$MODELS/llama3-8b.json" --set "$LORA"
expect 0 "^work: 43\.2 GFLOP per token \(4N of the frozen base \+ the LoRA adapters' \+ 12LCT\)" \
  "$AA" strategy check "$tmp/s.json" --model "$MODELS/llama3-8b-lora.json"
expect 0 "1 all-gather \(160\.0 MiB\), 1 reduce-scatter \(160\.0 MiB\)" \
  "$AA" strategy check "$tmp/s.json" --model "$MODELS/llama3-8b-lora.json"

# plan: the best of each and its memory per GPU. Full training needs two
# pipeline stages to fit; LoRA fits data parallel on all eight.
full=$("$AA" plan "$MODELS/llama3-8b.json" --pool h100-80gb:8 2>&1 | awk '$1 == "1" && $8 == "GiB" {print $2, $7}')
lora=$("$AA" plan "$MODELS/llama3-8b-lora.json" --pool h100-80gb:8 2>&1 | awk '$1 == "1" && $8 == "GiB" {print $2, $7}')
echo "plan full: $full; lora: $lora"
case "$full" in *pp1.*) fail=$((fail + 1)); echo "FAIL: full plan's best without pipeline: $full" ;; *) pass=$((pass + 1)) ;; esac
case "$lora" in dp8.tp1.pp1.*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)); echo "FAIL: lora plan's best: $lora" ;; esac
if awk -v a="${full##* }" -v b="${lora##* }" 'BEGIN {exit !(b < a)}'; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL: lora's memory per GPU ${lora##* } not below full's ${full##* }"; fi

# Training: the base is required, then the engine refuses by name.
"$AA" data synth --out "$tmp/data" --bytes 20000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/tiny.json" <<'JSON'
{"name": "tiny-lora", "model": {"n_layer": 1, "n_head": 2, "d_model": 16, "d_ff": 32, "seq_len": 8, "vocab_size": 256},
 "train": {"global_batch": 2, "steps": 3, "lr": 0.001},
 "data": {"train": "data/train.bin", "val": "data/val.bin"},
 "lora": {"r": 2, "targets": ["qkv", "fc"]}}
JSON
expect 1 "tiny-lora fine-tunes LoRA adapters \(lora\): init_weights is required" "$AA" train "$tmp/tiny.json"
expect 1 "lora.targets: \"q\" is not a gpt2 layer" "$AA" train "$tmp/tiny.json" --set 'lora.targets=["q"]'
expect 1 "lora: the trainer does not run LoRA adapters yet" \
  "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/run" --set init_weights=base.ckpt

echo "lora cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
