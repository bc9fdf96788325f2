#!/usr/bin/env bash
# `autoaccel strategy show|check` end to end: help, usage errors (exit 2),
# bad files and failed rules (exit 1 with a message naming the problem), and
# the example strategies of examples/strategies against examples/tiny.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
EX=$SRC/examples/strategies
TINY=$SRC/examples/tiny/model.json
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# Help and usage errors.
expect 0 "usage: autoaccel <command>.*" "$AA" --help
expect 0 "strategy +show a strategy file" "$AA" --help
expect 0 "usage: autoaccel strategy <subcommand>" "$AA" strategy --help
expect 0 "usage: autoaccel strategy show FILE" "$AA" strategy show --help
expect 0 "usage: autoaccel strategy check FILE --model" "$AA" strategy check --help
expect 2 "usage: autoaccel strategy" "$AA" strategy
expect 2 "unknown subcommand 'frob'" "$AA" strategy frob
expect 2 "expected exactly one FILE" "$AA" strategy show
expect 2 "unknown option" "$AA" strategy show "$EX/bf16-full.json" --yaml
expect 2 "--model MODEL.json is required" "$AA" strategy check "$EX/bf16-full.json"
expect 2 "--world needs an integer" "$AA" strategy check "$EX/bf16-full.json" --model "$TINY" --world 0

# show: the key, the knobs in words, the provenance.
expect 0 "key: +dp1.tp1.pp1.z0.bf16.ckpt-full.mb4" "$AA" strategy show "$EX/bf16-full.json"
expect 0 "amp: +bf16 compute, fp32 master weights" "$AA" strategy show "$EX/bf16-full.json"
expect 0 "checkpointing: +full, every block" "$AA" strategy show "$EX/bf16-full.json"
expect 0 "model: +tiny-synth \(hash f75588f44838cacd\)" "$AA" strategy show "$EX/bf16-full.json"
expect 0 "provenance: +none" "$AA" strategy show "$EX/minimal.json"
expect 0 "key: +dp1.tp1.pp1.z1.bf16.ckpt-full.mb0" "$AA" strategy show "$EX/atorch-list.json"

# show --json: the example is canonical, so it comes back byte for byte;
# an ATorch list converts to a v1 file that reads back to the same key.
"$AA" strategy show "$EX/bf16-full.json" --json >"$tmp/canon.json" 2>&1
if cmp -s "$tmp/canon.json" "$EX/bf16-full.json"; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL: show --json of bf16-full.json is not the file itself"; diff "$tmp/canon.json" "$EX/bf16-full.json" | head; fi
"$AA" strategy show --json "$EX/atorch-list.json" >"$tmp/converted.json"
expect 0 "key: +dp1.tp1.pp1.z1.bf16.ckpt-full.mb0" "$AA" strategy show "$tmp/converted.json"

# check: ok lines with the accumulation steps, and failed rules.
expect 0 "^ok: dp1.tp1.pp1.z0.bf16.ckpt-full.mb4 is valid for tiny-synth \(accumulation steps 4\)$" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY"
expect 0 "^ok: dp1.tp1.pp1.z1.bf16.ckpt-full.mb16 is valid for tiny-synth \(accumulation steps 1\)$" \
  "$AA" strategy check "$EX/atorch-list.json" --model "$TINY" --world 1
# --world rescales the data degree as train does (ATorch's parallel_mode rule), then checks.
expect 0 "^note: dp1 rescaled to dp2 for 2 ranks, as train does" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY" --world 2
expect 0 "^ok: dp2.tp1.pp1.z0.bf16.ckpt-full.mb4 is valid for tiny-synth \(accumulation steps 2\)$" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY" --world 2
echo '[["parallel_mode", [["tensor", 2], ["data", 1]]], "zero1"]' >"$tmp/tp2dp1.json"
expect 0 "^ok: dp2.tp2.pp1.z1.fp32.ckpt-none.mb8 is valid" \
  "$AA" strategy check "$tmp/tp2dp1.json" --model "$TINY" --world 4
expect 0 "^ok: dp1.tp2.pp1.z1.fp32.ckpt-none.mb16 is valid" \
  "$AA" strategy check "$tmp/tp2dp1.json" --model "$TINY" --world 2
expect 1 "is not valid for tiny-synth: strategy: tp \* pp \* cp = 2 does not divide the 3 ranks \(the world size 3" \
  "$AA" strategy check "$tmp/tp2dp1.json" --model "$TINY" --world 3
sed 's/"micro_batch": 4/"micro_batch": 3/; /"key"/d' "$EX/bf16-full.json" >"$tmp/mb3.json"
expect 1 "micro_batch 3 must divide global_batch / dp = 16 / 1" "$AA" strategy check "$tmp/mb3.json" --model "$TINY"
echo '[["parallel_mode", {"tensor": 2}]]' >"$tmp/tp2.json"
expect 0 "^ok: dp1.tp2.pp1.z0.fp32.ckpt-none.mb16 is valid for tiny-synth" \
  "$AA" strategy check "$tmp/tp2.json" --model "$TINY" --world 2
# Tensor and sequence parallelism: each refusal names its rule and numbers.
# (An ATorch list with parallel_mode tensor 2 is valid on 2 devices, above.)
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 3}}' >"$tmp/tp3.json"
expect 1 "tp3.json is not valid for tiny-synth: tensor parallel degree 3 must divide n_head 4 \(each rank holds n_head / tp heads\)" \
  "$AA" strategy check "$tmp/tp3.json" --model "$TINY"
sed 's/"d_ff": 512/"d_ff": 510/; s/"seq_len": 64/"seq_len": 63/' "$TINY" >"$tmp/odd.json"
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 4}}' >"$tmp/tp4.json"
expect 1 "tensor parallel degree 4 must divide d_ff 510 \(each rank holds d_ff / tp columns of the MLP\)" \
  "$AA" strategy check "$tmp/tp4.json" --model "$tmp/odd.json"
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 2, "sequence_parallel": true},
 "micro_batch": 1}' >"$tmp/sp.json"
expect 1 "sequence_parallel splits a micro-batch's micro_batch x seq_len = 1 x 63 tokens between the 2 tensor ranks: tp must divide 63" \
  "$AA" strategy check "$tmp/sp.json" --model "$tmp/odd.json"
expect 0 "^ok: dp1.tp2.pp1.sp.z0.fp32.ckpt-none.mb1 is valid for tiny-synth \(accumulation steps 16\)" \
  "$AA" strategy check "$tmp/sp.json" --model "$TINY" --world 2
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2, "sequence_parallel": true}}' >"$tmp/sp1.json"
expect 1 "sp1.json: parallel.sequence_parallel: needs tensor parallelism \(got tensor 1\): it splits the sequence between the tensor ranks" \
  "$AA" strategy check "$tmp/sp1.json" --model "$TINY"
expect 1 "parallel.sequence_parallel: needs tensor parallelism" "$AA" strategy show "$tmp/sp1.json"
echo '["zero1", ["tensor_parallel", {"sequence_parallel": true}]]' >"$tmp/splist.json"
expect 1 "item 2 \(tensor_parallel\): sequence_parallel: needs tensor parallelism \(the tensor degree is 1\)" \
  "$AA" strategy show "$tmp/splist.json"
expect 0 "key: +dp1\.tp2\.pp1\.sp\.z0\.fp32\.ckpt-none\.mb1$" "$AA" strategy show "$tmp/sp.json"
expect 0 "sequence parallel: +on: LayerNorm and the residual stream split along the sequence" \
  "$AA" strategy show "$tmp/sp.json"
expect 0 "sequence parallel: +off" "$AA" strategy show "$EX/bf16-full.json"
echo '[["parallel_mode", [["tensor", 2], ["data", 2]]], ["tensor_parallel", {"sequence_parallel": true}]]' >"$tmp/splist2.json"
expect 0 "key: +dp2\.tp2\.pp1\.sp\.z0\.fp32\.ckpt-none\.mb0$" "$AA" strategy show "$tmp/splist2.json"
expect 0 '"sequence_parallel": true' "$AA" strategy show --json "$tmp/splist2.json"
# The cost model's figures (strategies/cost.h; test_cost holds them to the
# engine's accounting). Work: 6N + 12LCT = 6 x 834,304 + 12 x 4 x 128 x 64,
# plus full checkpointing's second forward, 4 x (2 x 198,272 + 4 x 128 x 64):
# 7,116,288 FLOP per token.
expect 0 "^memory: a rank needs at least [0-9.]+ MiB \(params [0-9.]+ MiB, grads [0-9.]+ MiB, optim [0-9.]+ MiB, acts [0-9.]+ KiB, workspace [0-9.]+ MiB\)$" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY"
expect 0 "^work: 7.116 MFLOP per token \(6N \+ 12LCT and the recomputed forward\)$" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY"
# What the collectives move per step: for dp 2 at ZeRO 1, the loss and
# the gradient norm, and each of the 6 units reduce-scattered and gathered.
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2}, "zero": 1, "micro_batch": 4}' >"$tmp/dp2.json"
expect 0 "^comm: data group of 2, per step: 2 all-reduces \(8 B\), 6 all-gathers \(3\.2 MiB\), 6 reduce-scatters \(3\.2 MiB\); a ring sends 3\.2 MiB per rank$" \
  "$AA" strategy check "$tmp/dp2.json" --model "$TINY" --world 2
# Only the groups that carry something: without expert parallelism the
# expert-data group (the data ranks) carries nothing and gets no line.
expect 0 "^1$" bash -c '"$0" strategy check "$1" --model "$2" --world 2 | grep -c "^comm:"' \
  "$AA" "$tmp/dp2.json" "$TINY"
expect 0 "workspace [0-9.]+ MiB\), fits in 1.0 GiB$" "$AA" strategy check "$EX/bf16-full.json" --model "$TINY" --memory 1G
expect 1 "dp1.tp1.pp1.z0.bf16.ckpt-full.mb4 does not fit: a rank needs at least [0-9.]+ MiB, the device has 8.0 MiB" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY" --memory 8M
expect 2 "--memory: expected a positive byte count such as 80G, got 'lots'" \
  "$AA" strategy check "$EX/bf16-full.json" --model "$TINY" --memory lots
sed 's/"n_head": 4/"n_head": 2/' "$TINY" >"$tmp/other.json"
expect 0 "note: measured on another architecture" "$AA" strategy check "$EX/bf16-full.json" --model "$tmp/other.json"

# Bad files: each names the file and the problem.
expect 1 "no such file" "$AA" strategy show "$tmp/missing.json"
printf '{"format": "autoaccel-strategy",\n "version": 1,\n "zero": }\n' >"$tmp/syntax.json"
expect 1 "syntax.json:3:" "$AA" strategy show "$tmp/syntax.json"
sed 's/"zero": 0/"zero_level": 0/' "$EX/bf16-full.json" >"$tmp/unknown.json"
expect 1 "unknown.json: zero_level: unknown key \(allowed: format, version" "$AA" strategy show "$tmp/unknown.json"
sed 's/"micro_batch": 4/"micro_batch": 8/' "$EX/bf16-full.json" >"$tmp/badkey.json"
expect 1 "key: \"dp1.tp1.pp1.z0.bf16.ckpt-full.mb4\" does not match the fields, which give \"dp1.tp1.pp1.z0.bf16.ckpt-full.mb8\"" \
  "$AA" strategy show "$tmp/badkey.json"
sed 's/"version": 1/"version": 2/' "$EX/bf16-full.json" >"$tmp/v2.json"
expect 1 "strategy format version 2 is newer than this autoaccel \(1\)" "$AA" strategy show "$tmp/v2.json"
echo '["zero1", ["fp8", {}]]' >"$tmp/fp8.json"
expect 1 "fp8.json: item 2: method \"fp8\" is not supported \(autoaccel has no fp8 GEMMs.*\(supported: parallel_mode" \
  "$AA" strategy show "$tmp/fp8.json"
expect 1 "check: .*model.json|no such file" "$AA" strategy check "$EX/bf16-full.json" --model "$tmp/nomodel.json"

# ATorch's parallel_mode order and rank order show in words.
printf '[["parallel_mode", [[["data", 2], ["tensor", 2]], [3, 2, 1, 0]]]]\n' >"$tmp/order.json"
expect 0 "axis order: +data fastest, then tensor, then pipeline" "$AA" strategy show "$tmp/order.json"
expect 0 "rank order: +mesh position i runs on rank 3 2 1 0" "$AA" strategy show "$tmp/order.json"
expect 0 "key: +dp2\.tp2\.pp1\..*\.order-dt" "$AA" strategy show "$tmp/order.json"
# Pipelines: the schedule and the cut in words, the stages a model gets,
# and each refusal with its rule and numbers.
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"pipeline": 2}, "zero": 1, "micro_batch": 4,
 "schedule": "interleaved", "virtual_stages": 2}' >"$tmp/pp.json"
expect 0 "key: +dp1\.tp1\.pp2\.z1\.fp32\.ckpt-none\.mb4\.interleaved-v2$" "$AA" strategy show "$tmp/pp.json"
expect 0 "pipeline schedule: +interleaved 1F1B, 2 virtual stages per rank" "$AA" strategy show "$tmp/pp.json"
expect 0 "^ok: dp1\.tp1\.pp2\.z1\.fp32\.ckpt-none\.mb4\.interleaved-v2 is valid for tiny-synth \(accumulation steps 4\)" \
  "$AA" strategy check "$tmp/pp.json" --model "$TINY" --world 2
expect 0 "^stages: uniform, virtual stage k on pipeline rank k % 2: \[0, 1\) \[1, 2\) \[2, 3\) \[3, 4\)$" \
  "$AA" strategy check "$tmp/pp.json" --model "$TINY" --world 2
# Each stage's bytes and work, and the bubble: interleaved, 4 micro-batches
# (16 / 4), (pp - 1) / (v m + pp - 1) = 1 / 9.
expect 0 "^stage 1: [0-9.]+ MiB \(params .*\); [0-9.]+ MFLOP per token$" \
  "$AA" strategy check "$tmp/pp.json" --model "$TINY" --world 2
expect 0 "^bubble: 11\.1% of a step predicted \(interleaved, 4 micro-batches a step\)$" \
  "$AA" strategy check "$tmp/pp.json" --model "$TINY" --world 2
expect 0 "^comm: pipeline group of 2, per step: 12 sends" "$AA" strategy check "$tmp/pp.json" --model "$TINY" --world 2
"$AA" strategy show --json "$tmp/pp.json" >"$tmp/pp-canon.json"
expect 0 "key: +dp1\.tp1\.pp2\.z1\.fp32\.ckpt-none\.mb4\.interleaved-v2$" "$AA" strategy show "$tmp/pp-canon.json"
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"pipeline": 3}, "partition_method": "parameters",
 "micro_batch": 1}' >"$tmp/pp3.json"
expect 0 "^ok: dp1\.tp1\.pp3\.z0\.fp32\.ckpt-none\.mb1\.1f1b\.part-params is valid" \
  "$AA" strategy check "$tmp/pp3.json" --model "$TINY" --world 3
sed 's/"micro_batch": 4/"micro_batch": 16/' "$tmp/pp.json" >"$tmp/pp-m1.json"
expect 1 "the interleaved schedule runs micro-batches in groups of pp: the accumulation steps global_batch / \(dp \* micro_batch\) = 16 / \(1 \* 16\) = 1 must be a multiple of the pipeline degree 2" \
  "$AA" strategy check "$tmp/pp-m1.json" --model "$TINY"
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2, "pipeline": 2}, "zero": 2}' >"$tmp/ppz2.json"
expect 1 "ZeRO stage 2 with pipeline parallel degree 2: .*use ZeRO-1 \(zero1\) with pipeline parallelism" \
  "$AA" strategy check "$tmp/ppz2.json" --model "$TINY" --world 4
echo '{"format": "autoaccel-strategy", "version": 1, "parallel": {"pipeline": 8}}' >"$tmp/pp8.json"
expect 1 "pipeline parallel degree 8 x virtual_stages 1 = 8 stages: more than n_layer 4" \
  "$AA" strategy check "$tmp/pp8.json" --model "$TINY"
# ATorch's nstages counts every stage: 4 over pipeline 2 is 2 each, interleaved.
echo '[["parallel_mode", [["tensor", 2], ["pipeline", 2]]], ["pipeline_parallel", {"nstages": 4}]]' >"$tmp/pplist.json"
expect 0 "key: +dp1\.tp2\.pp2\.z0\.fp32\.ckpt-none\.mb0\.interleaved-v2$" "$AA" strategy show "$tmp/pplist.json"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
