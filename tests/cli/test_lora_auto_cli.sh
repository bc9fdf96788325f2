#!/usr/bin/env bash
# A LoRA fine-tune through the whole product (issue 36): `auto` on two CPU
# executors searches it by dry runs that fine-tune from the spec's base
# (init_weights, relative to the spec, read by the executors), stores the
# runs under the fine-tune's own hash, writes the best strategy and
# OUT/report.html and fine-tunes from the base; `submit` to a running
# planner does the same, and a LoRA spec and its base submitted one after the
# other are searched separately (neither answered from the other's store
# entry). Then weights-only LoRA checkpoints keep their step and training
# state: export --merge names it, and --resume continues there on the saved
# data with a fresh optimizer, as a full model's weights-only checkpoint does;
# and `autoaccel --help` describes import and export as they are.
set -u
# shellcheck source=tests/cli/service_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/service_lib.sh"

# The base and its fine-tune, beside the data; init_weights relative to the spec.
mkdir -p "$tmp/m"
"$AA" data synth --out "$tmp/m/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/m/base.json" <<'JSON'
{"name": "base", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 20, "lr": 0.003, "seed": 3, "eval_every": 0, "eval_batches": 2},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
cat >"$tmp/m/tiny.json" <<'JSON'
{"extends": "base.json", "name": "tiny-lora", "train": {"lr": 0.01, "steps": 10}, "init_weights": "run0/final.ckpt",
 "lora": {"r": 4, "alpha": 8, "targets": ["qkv", "proj", "fc", "fcproj"]}}
JSON
expect 0 "done: 20 steps" "$AA" train "$tmp/m/base.json" --threads 1 --out "$tmp/m/run0" --losses "$tmp/base.losses"
# The base's last loss; a model from random weights starts near ln 256 = 5.55.
base_last=$(awk 'END {print $2}' "$tmp/base.losses")

# --- 1. auto, run from another directory than the spec's -----------------------
cd / || exit 1
timeout 120 "$AA" auto "$tmp/m/tiny.json" --devices cpu:2 --home "$tmp/ahome" --out "$tmp/aout" --threads 1 \
  --measured-steps 2 --exclude checkpoint >"$tmp/auto.out" 2>&1
rc=$?
check "auto of a LoRA spec succeeds" [ "$rc" = 0 ]
[ "$rc" = 0 ] || tail -20 "$tmp/auto.out"
check "auto's dry runs all ran (none failed on the base)" \
  bash -c "grep -q '^dryrun ok' '$tmp/auto.out' && ! grep -Eq '^dryrun +(error|crashed)' '$tmp/auto.out'"
check "auto named its best strategy" grep -Eq '^best: dp[12]\.tp1\.pp1\.' "$tmp/auto.out"
check "auto wrote OUT/strategy.json" [ -s "$tmp/aout/strategy.json" ]
check "auto wrote OUT/report.html" [ -s "$tmp/aout/report.html" ]
check "auto's last line is the report" [ "$(tail -1 "$tmp/auto.out")" = "report: $tmp/aout/report.html" ]
lora_saved=$(ls "$tmp/ahome/strategies/" 2>/dev/null)
check "the strategy is saved under the fine-tune's name and hash ($lora_saved)" \
  bash -c "[[ '$lora_saved' =~ ^tiny-lora-[0-9a-f]{16}\.json$ ]]"
# The final training fine-tuned from the base: an adapter checkpoint, and a
# first loss near the base's last (B starts at zero, so step 1 is the base's
# forward on the next batch), far below a random model's.
check "the final checkpoint holds adapters" [ "$(head -c 8 "$tmp/aout/final.ckpt" 2>/dev/null)" = AALORA01 ]
first=$(awk 'NR == 1 {print $2}' "$tmp/aout/losses.txt" 2>/dev/null)
check "training started from the base (first loss $first, base's last $base_last)" \
  awk -v a="${first:-9}" -v b="$base_last" 'BEGIN {exit !(a - b < 0.3 && b - a < 0.3)}'
# The executors read the base in every dry run: a missing one fails the job.
expect 1 "init_weights: $tmp/m/nope\.ckpt: cannot open" timeout 60 "$AA" auto "$tmp/m/tiny.json" \
  --home "$tmp/ahome-nope" --threads 1 --measured-steps 2 --no-train --set "init_weights=$tmp/m/nope.ckpt"

# --- 2. submit to a running planner: the fine-tune and its base apart ----------
home="$tmp/home"
P="--planner unix:$home/planner.sock"
"$AA" planner --home "$home" --warmup-steps 1 --measured-steps 2 >>"$tmp/planner.log" 2>&1 &
pids+=("$!")
planner_up "$tmp/planner.log"
start_executor 1
check "an executor registers" wait_for 20 executors_up 1
expect 0 "best" timeout 120 "$AA" submit "$tmp/m/tiny.json" $P --wait --train --out "$tmp/sout" --exclude checkpoint
check "submit's training wrote adapters" [ "$(head -c 8 "$tmp/sout/final.ckpt" 2>/dev/null)" = AALORA01 ]
first=$(awk 'NR == 1 {print $2}' "$tmp/sout/losses.txt" 2>/dev/null)
check "submit's training started from the base (first loss $first)" \
  awk -v a="${first:-9}" -v b="$base_last" 'BEGIN {exit !(a - b < 0.3 && b - a < 0.3)}'
"$AA" submit "$tmp/m/base.json" $P --wait --exclude checkpoint >"$tmp/base.out" 2>&1
check "the base after its fine-tune is searched, not answered from the store" \
  bash -c "grep -q best '$tmp/base.out' && ! grep -Eq 'from the store|from_store' '$tmp/base.out'"
expect 0 "from the store|from_store" timeout 60 "$AA" submit "$tmp/m/tiny.json" $P --wait --exclude checkpoint
"$AA" query runs --job 2 $P --json >"$tmp/runs2.json"
check "the base's search measured its own dry runs" \
  [ "$(jq_ "len([r for r in d['runs'] if r['kind'] == 'dryrun' and r['status'] == 'ok'])" <"$tmp/runs2.json")" -ge 1 ]
h1=$("$AA" status 1 $P --json | jq_ "d['job']['model']['hash']" 2>/dev/null)
h2=$("$AA" status 2 $P --json | jq_ "d['job']['model']['hash']" 2>/dev/null)
check "the two jobs' models hash apart ($h1, $h2)" bash -c "[ -n '$h1' ] && [ -n '$h2' ] && [ '$h1' != '$h2' ]"

# --- 3. weights-only LoRA checkpoints keep the step and the training state -----
cd "$tmp/m" || exit 1
expect 0 "checkpoint .*step_000005\.ckpt \(step 5, LoRA adapters, weights only\)" "$AA" train tiny.json \
  --threads 1 --out w1 --losses "$tmp/w1.losses" --set train.checkpoint_every=5 --set train.weights_only_checkpoints=true
# 68 header bytes, the state section (80) and 3,072 fp32 adapters: no moments.
size=$(stat -c %s w1/step_000005.ckpt 2>/dev/null)
check "the weights-only adapter checkpoint has no moments ($size bytes)" [ "$size" = $((68 + 80 + 4 * 3072)) ]
expect 0 "adapters of w1/step_000005\.ckpt \(step 5, r 4, alpha 8\) merged" \
  "$AA" export w1/step_000005.ckpt --model tiny.json --merge --out "$tmp/merged.safetensors"
expect 0 "resume: w1/step_000005\.ckpt holds no optimizer state \(a weights-only checkpoint\): the optimizer restarts .* at step 5" \
  "$AA" train tiny.json --threads 1 --out w2 --losses "$tmp/w2.losses" --resume w1/step_000005.ckpt
# Step 6's loss is the forward of the step-5 adapters on the batch after the
# saved position: the straight run's, to the bit. Step 7 follows a fresh
# AdamW's first step (a sign step of lr), so it differs.
s6=$(awk '$1 == 6 {print $2}' "$tmp/w1.losses")
r6=$(awk '$1 == 6 {print $2}' "$tmp/w2.losses")
check "the resumed run's step 6 loss is the straight run's ($r6, $s6)" bash -c "[ -n '$s6' ] && [ '$s6' = '$r6' ]"
check "the resumed run has steps 6 to 10" [ "$(awk '{print $1}' "$tmp/w2.losses" | tr '\n' ' ')" = "6 7 8 9 10 " ]
s7=$(awk '$1 == 7 {print $2}' "$tmp/w1.losses")
r7=$(awk '$1 == 7 {print $2}' "$tmp/w2.losses")
check "then the restarted optimizer takes another path ($r7, $s7)" bash -c "[ -n '$r7' ] && [ '$s7' != '$r7' ]"

# --- 4. autoaccel --help says what import and export do now -------------------
expect 0 "import +read GPT-2, Llama, Mixtral or Qwen2\(-MoE\) weights" "$AA" --help
expect 0 "with a LoRA spec, Hugging Face PEFT adapters" "$AA" --help
expect 0 "merged into the base \(--merge\) or as PEFT's \(--peft\)" "$AA" --help

echo "lora auto cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
