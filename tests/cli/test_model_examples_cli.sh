#!/usr/bin/env bash
# The specs of examples/models/ (and any spec without a data section) from
# the command line: `strategy check` takes each as it is and predicts what a
# rank needs, and everything that reads tokens (train, auto, submit) refuses
# it with exit 1 and a message that names data.train, before it starts or
# contacts anything. `plan` on them, against a planner: tests/cli/test_plan.sh.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
MODELS=$SRC/examples/models
MINIMAL=$SRC/examples/strategies/minimal.json
PY=/usr/bin/python3
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# strategy check: every example under the minimal strategy (one process,
# bf16, micro-batch 4: valid for all of them), with what a rank would need,
# the figure a newcomer came for.
n=0
for f in "$MODELS"/*.json; do
  name=$(basename "$f" .json)
  expect 0 "^ok: dp1\.tp1\.pp1\.z0\.bf16\.ckpt-none\.mb4 is valid for $name \(accumulation steps [0-9]+\)$" \
    "$AA" strategy check "$MINIMAL" --model "$f"
  expect 0 "^memory: a rank needs at least [0-9.]+ [GT]iB \(params" "$AA" strategy check "$MINIMAL" --model "$f"
  n=$((n + 1))
done
[ "$n" -ge 15 ] || { fail=$((fail + 1)); echo "FAIL: $n specs in $MODELS, expected 15"; }

# A strategy that spreads GPT-3 175B over 64 devices the way Megatron's
# papers do (tp 8 with sequence parallelism, pp 8, selective recomputation),
# against the world size and a device's memory.
cat >"$tmp/ptdp.json" <<'JSON'
{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 8, "pipeline": 8, "sequence_parallel": true},
 "amp": "bf16", "checkpoint": "selective", "micro_batch": 1}
JSON
expect 0 "^ok: dp1\.tp8\.pp8\.sp\.z0\.bf16\.ckpt-sel\.mb1\.1f1b is valid for gpt3-175b \(accumulation steps 1536\)$" \
  "$AA" strategy check "$tmp/ptdp.json" --model "$MODELS/gpt3-175b.json" --world 64 --memory 141G
expect 0 "^memory: the most loaded stage's rank needs at least .*fits in 141\.0 GiB" \
  "$AA" strategy check "$tmp/ptdp.json" --model "$MODELS/gpt3-175b.json" --world 64 --memory 141G
expect 1 "world size 8" "$AA" strategy check "$tmp/ptdp.json" --model "$MODELS/gpt3-175b.json" --world 8
# Llama 3 8B with grouped-query attention: tp 8 divides its 8 key/value heads.
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 8}, "amp": "bf16", "micro_batch": 1}' >"$tmp/tp8.json"
expect 0 "^ok: dp1\.tp8\.pp1\.z0\.bf16\.ckpt-none\.mb1 is valid for llama3-8b \(accumulation steps 512\)$" \
  "$AA" strategy check "$tmp/tp8.json" --model "$MODELS/llama3-8b.json" --world 8

# What reads tokens refuses a spec without data: exit 1, naming the field
# and the model, whatever the model (a tiny one too), before anything runs.
NODATA='has no training data: data\.train is required to train or measure a model'
for f in "$MODELS/llama3-8b.json" "$SRC/tests/specs/no_data.json"; do
  name=$(basename "$f" .json)
  [ "$name" = no_data ] && name=plan-only
  expect 1 "^autoaccel train: $f: $name $NODATA" "$AA" train "$f"
  expect 1 "^autoaccel train: $f: $name $NODATA" "$AA" train "$f" --strategy "$MINIMAL" --steps 1
  # auto would start a planner in its home: it must refuse before that.
  expect 1 "^autoaccel auto: $f: $name $NODATA" env AUTOACCEL_HOME="$tmp/home" "$AA" auto "$f"
  expect 1 "^autoaccel submit: $f: $name $NODATA" "$AA" submit "$f" --planner "unix:$tmp/nobody.sock"
done
if [ -e "$tmp/home" ]; then fail=$((fail + 1)); echo "FAIL: auto created $tmp/home for a spec it refused"; else
  pass=$((pass + 1)); fi
# The message says what to add.
expect 1 "add \"data\": \{\"train\": \"PATH\"\} to its spec" "$AA" train "$MODELS/gpt3-175b.json"

# Long contexts: a spec takes seq_len up to 1,048,576 and strategy check
# predicts it; the engine trains at most 65,536 tokens a sequence, so what
# would run it or build its model refuses a longer one before it starts or
# contacts anything, naming both limits.
for len in 131072 1048576; do
  "$PY" - "$MODELS/llama3-8b.json" "$tmp/long$len.json" "$len" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"], m["model"]["seq_len"] = "llama3-8b-long", int(sys.argv[3])
m["data"] = {"train": "never-read.bin"}
json.dump(m, open(sys.argv[2], "w"))
EOF
  f=$tmp/long$len.json
  expect 0 "^ok: dp1\.tp1\.pp1\.z0\.bf16\.ckpt-none\.mb4 is valid for llama3-8b-long" \
    "$AA" strategy check "$MINIMAL" --model "$f"
  LONG="$f: seq_len $len: the engine trains at most 65,536 tokens per sequence; plan and strategy check accept up to 1,048,576"
  expect 1 "^autoaccel train: $LONG$" "$AA" train "$f" --strategy "$MINIMAL" --steps 1
  expect 1 "^autoaccel auto: $LONG$" env AUTOACCEL_HOME="$tmp/home" "$AA" auto "$f"
  expect 1 "^autoaccel submit: $LONG$" "$AA" submit "$f" --planner "unix:$tmp/nobody.sock"
  # So does what builds the model, before it reads anything else.
  expect 1 "^autoaccel import: $LONG$" "$AA" import "$tmp/none.bin" --model "$f" --out "$tmp/none.ckpt"
  expect 1 "^autoaccel export: $LONG$" "$AA" export "$tmp/none.ckpt" --model "$f" --out "$tmp/none.st"
  expect 1 "^autoaccel generate: $LONG$" "$AA" generate "$tmp/none.ckpt" --model "$f" --prompt hi
done
if [ -e "$tmp/home" ]; then fail=$((fail + 1)); echo "FAIL: auto created $tmp/home for a long spec it refused"; else
  pass=$((pass + 1)); fi

# A mixture-of-experts spec trains (on one process, data, expert, tensor or pipeline parallel),
# the cost model predicts it (strategy check, plan from a device profile)
# and CPU pools measure it (auto, below); so do GPU pools, Qwen-MoE's gated
# shared experts included (here: past the spec's check, to the missing
# planner).
MOE=$SRC/tests/specs/moe_tiny.json
expect 0 "^ok: dp1\.tp1\.pp1\.z0\.bf16\.ckpt-none\.mb4 is valid for moe-tiny" "$AA" strategy check "$MINIMAL" --model "$MOE"
# Expert parallelism: predicted at ZeRO 0, and at ZeRO 1 with each MoE
# layer's expert slices (2 experts x 3 x 24 x 32 = 4,608 floats, 18 KiB)
# reduce-scattered and all-gathered over the expert-data group (4 / 2 ranks).
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2, "expert": 2}, "micro_batch": 2}' >"$tmp/ep2.json"
expect 0 "^comm: expert group of 2, per step: 1 all-reduce \(4 B\), 10 all-to-alls" \
  "$AA" strategy check "$tmp/ep2.json" --model "$MOE" --world 2
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 4, "expert": 2}, "micro_batch": 1, "zero": 1}' >"$tmp/ep2z1.json"
expect 0 "^comm: expert-data group of 2, per step: 2 all-gathers \(36\.0 KiB\), 2 reduce-scatters \(36\.0 KiB\)" \
  "$AA" strategy check "$tmp/ep2z1.json" --model "$MOE" --world 4
expect 1 "^autoaccel plan: no planner at unix:" "$AA" plan "$MOE" --pool cuda:2 --planner "unix:$tmp/nobody.sock"
$PY - "$MOE" >"$tmp/qwen-moe.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "qwen-moe-tiny"
m["model"]["moe"].update(shared_experts=1, shared_expert_gate=True)
print(json.dumps(m))
PY
expect 1 "^autoaccel plan: no planner at unix:" "$AA" plan "$tmp/qwen-moe.json" --pool cuda:2 --planner "unix:$tmp/nobody.sock"

# train: moe_tiny on real tokens for 3 steps, each step's line with the
# fewest and most tokens an expert computed and the slots dropped (none:
# dropless); and the parallelism it does not take yet, by name.
"$AA" data synth --out "$tmp/moe-data" --bytes 60000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
$PY - "$MOE" "$tmp/moe-data" >"$tmp/moe.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["model"]["vocab_size"] = 256
m["train"].update(steps=3, eval_every=0, eval_batches=1)
m["data"] = {"train": sys.argv[2] + "/train.bin", "val": sys.argv[2] + "/val.bin"}
print(json.dumps(m))
PY
MOELINE="^moe +[0-9]+/3 \| 1 rank: tokens per expert min [0-9]+, max [0-9]+ \(over 4 experts x 2 MoE layers, per micro-batch of 64 tokens a rank\) \| dropped 0 \| grown past the room: 0 rows$"
expect 0 "$MOELINE" "$AA" train "$tmp/moe.json" --out "$tmp/moe-run" --log-every 1 --threads 1
expect 0 "^done: 3 steps" "$AA" train "$tmp/moe.json" --out "$tmp/moe-run2" --devices cpu:2 --threads 2
# The moe line is over every rank; at dp 2 x expert 2 the time line has the
# all-to-alls apart.
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2, "expert": 2}, "micro_batch": 2}' >"$tmp/ep2run.json"
expect 0 "^moe +3/3 \| 2 ranks: tokens per expert min [0-9]+, max [0-9]+ .* \| grown past the room: [0-9]+ rows$" \
  "$AA" train "$tmp/moe.json" --out "$tmp/moe-run3" --devices cpu:2 --threads 2 --strategy "$tmp/ep2run.json" --log-every 1
expect 0 "^time +3/3 \| rank 0: forward [0-9.]+, backward [0-9.]+, optimizer [0-9.]+, pipeline comm 0\.0, bubble [0-9.]+, all-to-all [0-9.]+ ms$" \
  "$AA" train "$tmp/moe.json" --out "$tmp/moe-run4" --devices cpu:2 --threads 2 --strategy "$tmp/ep2run.json" --log-every 1
# auto on 2 CPU executors: the expert-parallel candidates (ep 2 over dp 2
# or over cp 2, ZeRO 0 here: test_moe_train covers the other stages)
# dry-run, the best is one and trains.
expect 0 "^best: dp(2\.tp1\.pp1|1\.tp1\.pp1\.cp2)\.z0\.fp32\.ckpt-none\.mb[124]\.ep2 " "$AA" auto "$tmp/moe.json" --devices cpu:2 \
  --threads 1 --home "$tmp/home-moe" --out "$tmp/moe-auto" --exclude bf16,fp16,checkpoint,zero --include expert_parallel
# The trained MoE checkpoint exports under Hugging Face Mixtral's names
# (one tensor per expert and projection), imports back to the same weights
# (its re-export is the same file) and generates with the KV cache as
# without it.
CK=$tmp/moe-run/final.ckpt
expect 0 "^exported [0-9]+ parameters from $CK to $tmp/moe\.safetensors \(41 tensors, F32\)$" \
  "$AA" export "$CK" --model "$tmp/moe.json" --out "$tmp/moe.safetensors"
expect 0 "^1$" grep -ac "model\.layers\.1\.block_sparse_moe\.experts\.3\.w2\.weight" "$tmp/moe.safetensors"
expect 0 "^imported [0-9]+ parameters from $tmp/moe\.safetensors \(safetensors, 1 file, 41 tensors of F32\)" \
  "$AA" import "$tmp/moe.safetensors" --model "$tmp/moe.json" --out "$tmp/moe-x.ckpt"
"$AA" export "$tmp/moe-x.ckpt" --model "$tmp/moe.json" --out "$tmp/moe-x.safetensors" >/dev/null 2>&1
expect 0 "" cmp "$tmp/moe.safetensors" "$tmp/moe-x.safetensors"
mgen() { "$AA" generate "$CK" --model "$tmp/moe.json" --prompt "ab" --max-tokens 8 "$@"; }
expect 0 "generated 8 tokens in .*KV cache on" mgen
mgen >"$tmp/moe-kv.txt" 2>/dev/null
mgen --no-kv-cache >"$tmp/moe-nokv.txt" 2>/dev/null
expect 0 "" cmp "$tmp/moe-kv.txt" "$tmp/moe-nokv.txt"
# Expert parallelism: 2 ranks, each holding 2 of the 4 experts.
cat >"$tmp/ep2.json" <<'JSON'
{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2, "expert": 2}, "micro_batch": 2}
JSON
expect 0 "^expert parallel: 2 ranks an expert group \(shm\), each holding 2 of the 4 experts of every MoE layer; 1 expert groups$" \
  "$AA" train "$tmp/moe.json" --out "$tmp/moe-ep2" --devices cpu:2 --strategy "$tmp/ep2.json" --threads 2
# Its final checkpoint is a whole-model file (replica 0 gathers the expert
# slices): it exports like one process's.
expect 0 "^exported [0-9]+ parameters from $tmp/moe-ep2/final\.ckpt to $tmp/moe-ep2\.safetensors \(41 tensors, F32\)$" \
  "$AA" export "$tmp/moe-ep2/final.ckpt" --model "$tmp/moe.json" --out "$tmp/moe-ep2.safetensors"
# Tensor parallelism (expert_tensor_parallel_size 1: every tensor rank
# computes the same whole experts) trains; so does context parallelism
# (its moe line counts the context group's micro-batch), and with a
# capacity factor its ranks drop, summed, the slots one process drops.
cat >"$tmp/tp2.json" <<'JSON'
{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 2}, "micro_batch": 4}
JSON
expect 0 "" "$AA" train "$tmp/moe.json" --out "$tmp/moe-tp2" --devices cpu:2 --strategy "$tmp/tp2.json" --threads 2
cat >"$tmp/cp2.json" <<'JSON'
{"format": "autoaccel-strategy", "version": 1, "parallel": {"context": 2}, "micro_batch": 4}
JSON
expect 0 "^moe +3/3 \| 2 ranks: tokens per expert min [0-9]+, max [0-9]+ \(over 4 experts x 2 MoE layers, per micro-batch of 64 tokens a context group\) \| dropped 0 \| grown past the room: 0 rows$" \
  "$AA" train "$tmp/moe.json" --out "$tmp/moe-cp2" --devices cpu:2 --strategy "$tmp/cp2.json" --threads 2 --log-every 1
$PY - "$tmp/moe.json" >"$tmp/moe-cap.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["model"]["moe"]["capacity_factor"] = 0.5
print(json.dumps(m))
PY
echo '{"format": "autoaccel-strategy", "version": 1, "micro_batch": 4}' >"$tmp/mb4.json"
drops() { "$@" 2>&1 | sed -nE 's/^moe +3\/3 .*\| dropped ([0-9]+) \|.*/\1/p'; }
d1=$(drops "$AA" train "$tmp/moe-cap.json" --out "$tmp/moe-cap-1" --strategy "$tmp/mb4.json" --threads 2 --log-every 1)
d2=$(drops "$AA" train "$tmp/moe-cap.json" --out "$tmp/moe-cap-cp2" --devices cpu:2 --strategy "$tmp/cp2.json" \
  --threads 2 --log-every 1)
if [ -n "$d1" ] && [ "$d1" -gt 0 ] && [ "$d1" = "$d2" ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: capacity 0.5: one process dropped '$d1' slots at step 3, cp 2 '$d2'"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
