#!/usr/bin/env bash
# LoRA fine-tuning specs (issue 36; docs/model-spec.md "lora") from the
# command line: the cost model sees the frozen base (strategy check: no
# gradient or optimizer state for it, the work without its weight
# gradients), plan picks another best strategy for Llama-3 8B on 8 H100s
# than for full training, with less memory per GPU; training needs the
# base (init_weights), fine-tunes on one process, data, tensor, pipeline
# and context parallel, at any ZeRO stage (with tensor and pipeline
# parallelism too), in fp32, bf16 or fp16, and writes adapters-only
# checkpoints (one whole file) that resume at any of those layouts.
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

# Training: the base is required; then one process fine-tunes the adapters
# on it and the weights-only final checkpoint holds the adapters alone (68
# header bytes, the 80-byte training state without moments, and 2 blocks x
# (4 (32 + 96) + 4 (32 + 32) + 4 (32 + 64) + 4 (64 + 32)) = 3,072 fp32); what it does not run yet is refused by name.
"$AA" data synth --out "$tmp/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/base.json" <<'JSON'
{"name": "base", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 20, "lr": 0.003, "eval_every": 0},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
cat >"$tmp/tiny.json" <<'JSON'
{"extends": "base.json", "name": "tiny-lora", "train": {"lr": 0.01},
 "lora": {"r": 4, "alpha": 8, "targets": ["qkv", "proj", "fc", "fcproj"]}}
JSON
expect 1 "tiny-lora fine-tunes LoRA adapters \(lora\): init_weights is required" "$AA" train "$tmp/tiny.json"
expect 1 "lora.targets: \"q\" is not a gpt2 layer" "$AA" train "$tmp/tiny.json" --set 'lora.targets=["q"]'
expect 1 "init_weights" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/run" --set init_weights=missing.ckpt
expect 0 "done: 20 steps" "$AA" train "$tmp/base.json" --threads 1 --out "$tmp/run0"
expect 0 "checkpoint .*final.ckpt \(step 20, LoRA adapters, weights only\)" \
  "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/run1" --set "init_weights=$tmp/run0/final.ckpt" \
  --set train.weights_only_checkpoints=true
size=$(stat -c %s "$tmp/run1/final.ckpt" 2>/dev/null)
[ "$size" = $((68 + 80 + 4 * 3072)) ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: adapter checkpoint $size bytes"; }
# Resume: 5 steps, then 5 more from the step-5 checkpoint (the adapters,
# AdamW's moments and step, the loader's position and the RNG after them;
# the base from init_weights), write the same final checkpoint, byte for
# byte, as 10 steps at once.
expect 0 "checkpoint .*step_000005.ckpt \(step 5, LoRA adapters\)" "$AA" train "$tmp/tiny.json" --threads 1 \
  --out "$tmp/ra" --set "init_weights=$tmp/run0/final.ckpt" --set train.steps=10 --set train.checkpoint_every=5
expect 0 "done: 5 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/rb" --resume "$tmp/ra/step_000005.ckpt" \
  --set "init_weights=$tmp/run0/final.ckpt" --set train.steps=10
cmp -s "$tmp/ra/final.ckpt" "$tmp/rb/final.ckpt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: resumed adapters differ"; }
expect 1 "adapters of fine-tune" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/rc" \
  --resume "$tmp/ra/step_000005.ckpt" --set "init_weights=$tmp/run0/final.ckpt" --set train.steps=10 --set lora.alpha=4

# Data parallel: two ranks average the adapters' gradient; 10 steps match
# one process within test_parallel.c's loss tolerance (1e-5 relative, the
# final and validation losses), the adapters within 1e-3 of their largest
# (measured 2.5e-4: float32 sums in another order, which AdamW's
# normalisation magnifies for the smallest gradients). The summary's bytes:
# gradients and moments of the 3,072 adapters only.
for n in 1 2; do
  expect 0 "done: 10 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/dp$n" --devices "cpu:$n" \
    --summary-json "$tmp/dp$n.json" --losses "$tmp/dp$n.loss" --set "init_weights=$tmp/run0/final.ckpt" \
    --set train.steps=10
done
if /usr/bin/python3 - "$tmp" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: dp2 vs dp1"; fi
import json, sys
import numpy as np
d = sys.argv[1]
s1, s2 = (json.load(open(f"{d}/dp{n}.json")) for n in (1, 2))
ok = all(abs(s1[k] - s2[k]) <= 1e-5 * abs(s1[k]) for k in ("final_loss", "val_loss"))
ok &= s1["peak_bytes"]["grads"] == 4 * 3072 and s1["peak_bytes"]["optim"] == 8 * 3072
a, b = (np.fromfile(f"{d}/dp{n}/final.ckpt", dtype="<f4", offset=68, count=3072) for n in (1, 2))
ok &= a.size == 3072 and float(abs(a - b).max()) <= 1e-3 * float(abs(a).max())
print(f"dp1 {s1['final_loss']} {s1['val_loss']}, dp2 {s2['final_loss']} {s2['val_loss']}, "
      f"adapters differ {float(abs(a - b).max()):.3g} of {float(abs(a).max()):.3g}")
sys.exit(0 if ok else 1)
PY

# Tensor, pipeline and context parallelism (model.h: a column target's B
# and a row target's A cut as their base layer, the replicated halves'
# gradients summed over the tensor group once a step), gpt2 and llama: 10
# steps at tp2, pp2, dp2 x tp2 and a context-parallel layout (llama also
# tp2 with sequence parallelism) match one process within the dp test's
# bounds: every step's loss within 1e-5
# relative (measured 1e-7: float32 sums in another order), the adapters
# within 1e-3 of their largest (measured 5e-5). Checkpoints are one whole
# file at any layout: a tp2 and a pp2 step-5 checkpoint resume in one
# process to the same steps 6-10 (same bounds), and a tp2 one at tp2 to
# the very file 10 straight tp2 steps write (the moments gathered and
# sliced back exactly). bf16 at tp2 too. ZeRO over the adapters with the
# tensor and pipeline groups (engine/lora.c): dp2 x tp2 at ZeRO 1 and 3
# and dp2 x pp2 at ZeRO 1 within the same bounds, and the dp2 x tp2 ZeRO 3
# step-5 checkpoint resumes at one process and at tp2 ZeRO 0.
strat() { echo "{\"format\": \"autoaccel-strategy\", \"version\": 1, \"parallel\": $1, \"micro_batch\": $2}"; }
strat '{"tensor": 2}' 4 >"$tmp/tp2.json"
strat '{"tensor": 2, "sequence_parallel": true}' 4 >"$tmp/tp2sp.json"
strat '{"pipeline": 2}' 2 >"$tmp/pp2.json"
strat '{"data": 2, "tensor": 2}' 2 >"$tmp/dp2tp2.json"
strat '{"context": 2}' 4 >"$tmp/cp2.json"
strat '{"context": 2, "tensor": 2}' 4 >"$tmp/cp2tp2.json"
sed 's/"micro_batch"/"amp": "bf16", "micro_batch"/' "$tmp/tp2.json" >"$tmp/btp2.json"
sed 's/"micro_batch"/"zero": 1, "micro_batch"/' "$tmp/dp2tp2.json" >"$tmp/dp2tp2z1.json"
strat '{"data": 2, "tensor": 2}' 1 | sed 's/"micro_batch"/"zero": 3, "micro_batch"/' >"$tmp/dp2tp2z3.json"
strat '{"data": 2, "pipeline": 2}' 1 | sed 's/"micro_batch"/"zero": 1, "micro_batch"/' >"$tmp/dp2pp2z1.json"
cat >"$tmp/lbase.json" <<'JSON'
{"name": "lbase", "model": {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 64,
 "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 10, "lr": 0.003, "eval_every": 0},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
cat >"$tmp/ltiny.json" <<'JSON'
{"extends": "lbase.json", "name": "llama-lora", "train": {"lr": 0.01, "steps": 10},
 "lora": {"r": 4, "alpha": 8, "targets": ["q", "k", "v", "o", "gate", "up", "down"]}}
JSON
expect 0 "done: 10 steps" "$AA" train "$tmp/lbase.json" --threads 1 --out "$tmp/lrun0"
# name spec base n strategy [more args]
par() {
  local name=$1 spec=$2 base=$3 n=$4 st=$5
  shift 5
  expect 0 "done: .* steps" "$AA" train "$tmp/$spec.json" --threads 1 --out "$tmp/$name" --devices "cpu:$n" \
    --strategy "$tmp/$st.json" --losses "$tmp/$name.loss" --set "init_weights=$tmp/$base/final.ckpt" \
    --set train.steps=10 "$@"
}
strat '{}' 4 >"$tmp/one.json"
par g.tp2 tiny run0 2 tp2 --set train.checkpoint_every=5
par g.pp2 tiny run0 2 pp2
par g.dp2tp2 tiny run0 4 dp2tp2
par g.cp2 tiny run0 2 cp2
par g.tp2r tiny run0 2 tp2 --resume "$tmp/g.tp2/step_000005.ckpt"
par g.tp2to1 tiny run0 1 one --resume "$tmp/g.tp2/step_000005.ckpt"
par l.one ltiny lrun0 1 one
par l.tp2sp ltiny lrun0 2 tp2sp
par l.pp2 ltiny lrun0 2 pp2 --set train.checkpoint_every=5
par l.dp2tp2 ltiny lrun0 4 dp2tp2
par l.cp2tp2 ltiny lrun0 4 cp2tp2
par l.btp2 ltiny lrun0 2 btp2
par l.pp2to1 ltiny lrun0 1 one --resume "$tmp/l.pp2/step_000005.ckpt"
par g.dp2tp2z1 tiny run0 4 dp2tp2z1
par g.dp2tp2z3 tiny run0 4 dp2tp2z3 --set train.checkpoint_every=5 --summary-json "$tmp/g.dp2tp2z3.sum"
par g.z3to1 tiny run0 1 one --resume "$tmp/g.dp2tp2z3/step_000005.ckpt"
par g.z3totp2 tiny run0 2 tp2 --resume "$tmp/g.dp2tp2z3/step_000005.ckpt"
par l.dp2pp2z1 ltiny lrun0 4 dp2pp2z1
cp "$tmp/dp1.loss" "$tmp/g.one.loss" && cp "$tmp/dp1/final.ckpt" "$tmp/g.one.ckpt" && cp "$tmp/l.one/final.ckpt" "$tmp/l.one.ckpt"
cmp -s "$tmp/g.tp2/final.ckpt" "$tmp/g.tp2r/final.ckpt" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: tp2 resumed at tp2 differs from 10 straight tp2 steps"; }
if /usr/bin/python3 - "$tmp" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: tp/pp vs one process"; fi
import sys
import numpy as np
d = sys.argv[1]
def losses(name):
    return {int(s): float(v) for s, v in (l.split() for l in open(f"{d}/{name}.loss") if l.strip())}
def adapters(path, n):
    return np.fromfile(path, dtype="<f4", offset=68, count=n)
ok = True
# llama's 4,096 adapters: 2 blocks x 4 (q 32 + 32, k and v 32 + 16, o 32 + 32,
# gate and up 32 + 64, down 64 + 32).
for fam, n, runs in (("g", 3072, ("tp2", "pp2", "dp2tp2", "cp2", "tp2to1", "dp2tp2z1", "dp2tp2z3", "z3to1",
                                  "z3totp2")),
                     ("l", 4096, ("tp2sp", "pp2", "dp2tp2", "cp2tp2", "pp2to1", "dp2pp2z1"))):
    want, a = losses(f"{fam}.one"), adapters(f"{d}/{fam}.one.ckpt", n)
    for r in runs:
        got, b = losses(f"{fam}.{r}"), adapters(f"{d}/{fam}.{r}/final.ckpt", n)
        steps = range(6, 11) if "to" in r else range(1, 11)  # resumed at step 5
        rel = max(abs(got[s] - want[s]) / abs(want[s]) for s in steps)
        ad = float(abs(a - b).max()) / float(abs(a).max())
        good = set(steps) <= set(got) and a.size == b.size == n and rel <= 1e-5 and ad <= 1e-3
        print(f"{fam}.{r}: losses within {rel:.2g} relative, adapters within {ad:.2g} of their largest")
        ok &= good
# ZeRO 3 at dp2 x tp2: a rank holds half (1,024) of its tensor slice's
# 2,048 adapters' gradient and moments (2 blocks x (qkv 128 + 192, proj
# 64 + 128, fc 128 + 128, fcproj 128 + 128)).
import json
z = json.load(open(f"{d}/g.dp2tp2z3.sum"))["peak_bytes"]
print(f"g.dp2tp2z3: grads {z['grads']} bytes, optim {z['optim']}")
ok &= z["grads"] == 4 * 1024 and z["optim"] == 8 * 1024
# bf16 at tp2 (each rank's slice of the base in 16 bits): every step's loss
# within test_lora's bf16 bound of the fp32 run's, 2.5e-4 relative.
want, got = losses("l.one"), losses("l.btp2")
rel = max(abs(got[s] - want[s]) / abs(want[s]) for s in range(1, 11))
print(f"l.btp2 (bf16): losses within {rel:.2g} relative of fp32's")
ok &= rel <= 2.5e-4
sys.exit(0 if ok else 1)
PY

# bf16: the base in 16 bits only (25,856 x 2 bytes beside the adapters'
# 3,072 x 4).
expect 0 "memory: params 62.5 KiB, grads 12.0 KiB, optim 24.0 KiB" "$AA" train "$tmp/tiny.json" --threads 1 \
  --out "$tmp/run3" --strategy "$SRC/examples/strategies/bf16-full.json" --set "init_weights=$tmp/run0/final.ckpt"

# ZeRO over the adapters (engine/lora.h). dp2 at stage 3, one micro-batch
# at a time (two a step, so the gradient is reduce-scattered after each):
# the rank holds half the adapters' gradient (1,536 x 4 bytes) and moments
# (2 x 1,536 x 4) and the checkpoint holds them whole. It trains as one
# process does (the dp bound above), and its step-5 checkpoint resumes at
# dp1 and at dp2 stage 1 to the same adapters as 10 steps of one process,
# and at its own layout to the same file, byte for byte, as 10 straight.
for z in 1 3; do
  printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"data": 2}, "zero": %d, "micro_batch": %d}\n' \
    "$z" $((z == 3 ? 1 : 2)) >"$tmp/z$z.json"
done
expect 0 "checkpoint .*step_000005.ckpt \(step 5, LoRA adapters\)" "$AA" train "$tmp/tiny.json" --threads 1 \
  --out "$tmp/z3" --devices cpu:2 --strategy "$tmp/z3.json" --summary-json "$tmp/z3.json.sum" \
  --set "init_weights=$tmp/run0/final.ckpt" --set train.steps=10 --set train.checkpoint_every=5
[ "$(stat -c %s "$tmp/z3/step_000005.ckpt" 2>/dev/null)" = "$(stat -c %s "$tmp/ra/step_000005.ckpt")" ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a dp2 z3 checkpoint's size is not one process's"; }
expect 0 "done: 5 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/z3to1" \
  --resume "$tmp/z3/step_000005.ckpt" --set "init_weights=$tmp/run0/final.ckpt" --set train.steps=10
expect 0 "done: 5 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/z3toz1" --devices cpu:2 \
  --strategy "$tmp/z1.json" --resume "$tmp/z3/step_000005.ckpt" --set "init_weights=$tmp/run0/final.ckpt" \
  --set train.steps=10
expect 0 "done: 5 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/z3toz3" --devices cpu:2 \
  --strategy "$tmp/z3.json" --resume "$tmp/z3/step_000005.ckpt" --set "init_weights=$tmp/run0/final.ckpt" \
  --set train.steps=10
cmp -s "$tmp/z3/final.ckpt" "$tmp/z3toz3/final.ckpt" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: dp2 z3 resumed at its own layout differs from 10 straight steps"; }
if /usr/bin/python3 - "$tmp" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: ZeRO layouts"; fi
import json, sys
import numpy as np
d = sys.argv[1]
s = json.load(open(f"{d}/z3.json.sum"))
ok = s["peak_bytes"]["grads"] == 4 * 1536 and s["peak_bytes"]["optim"] == 8 * 1536
ref = np.fromfile(f"{d}/dp1/final.ckpt", dtype="<f4", offset=68, count=3072)
for run in ("z3", "z3to1", "z3toz1"):
    a = np.fromfile(f"{d}/{run}/final.ckpt", dtype="<f4", offset=68, count=3072)
    err = float(abs(a - ref).max())
    print(f"{run}: adapters differ {err:.3g} of {float(abs(ref).max()):.3g} from one process's")
    ok &= a.size == 3072 and err <= 1e-3 * float(abs(ref).max())
sys.exit(0 if ok else 1)
PY

# fp16 with loss scaling (2^16, dynamic) at dp2 stage 1: the final and
# validation losses within 1e-3 relative of fp32's (test_lora_zero.c
# measures fp16's step losses 5e-6 from fp32's on one process; here ten
# steps and the averaging over two ranks); a static scale of 3.4e38
# overflows the gradient every step, so every step is skipped, as in full
# training.
sed 's/"zero": 1/"zero": 1, "amp": "fp16"/' "$tmp/z1.json" >"$tmp/fp16.json"
expect 0 "done: 10 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/fp16" --devices cpu:2 \
  --strategy "$tmp/fp16.json" --summary-json "$tmp/fp16.sum" --set "init_weights=$tmp/run0/final.ckpt" \
  --set train.steps=10
sed 's/"amp": "fp16"/"amp": "fp16", "loss_scaling": {"loss_scale": 3.4e38}/' "$tmp/fp16.json" >"$tmp/fp16x.json"
expect 0 "done: 10 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/fp16x" --devices cpu:2 \
  --strategy "$tmp/fp16x.json" --summary-json "$tmp/fp16x.sum" --set "init_weights=$tmp/run0/final.ckpt" \
  --set train.steps=10
if /usr/bin/python3 - "$tmp" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: fp16"; fi
import json, sys
d = sys.argv[1]
a, h, x = (json.load(open(f"{d}/{n}")) for n in ("dp1.json", "fp16.sum", "fp16x.sum"))
ok = all(abs(a[k] - h[k]) <= 1e-3 * abs(a[k]) for k in ("final_loss", "val_loss")) and h["skipped_steps"] == 0
ok &= x["skipped_steps"] == 10
print(f"fp16: final {h['final_loss']} val {h['val_loss']} (fp32 {a['final_loss']} {a['val_loss']}); "
      f"scale 3.4e38: {x['skipped_steps']} steps skipped")
sys.exit(0 if ok else 1)
PY
# A dynamic scale from 2^24 (hysteresis 1) overflows the fp16 activations'
# gradients in the first three steps and halves each time (3 skipped,
# 2^21 at the end; a resume that restarted the scaler would skip 3 more):
# the checkpoint holds the scaler, so 5 + 5 steps write the same file, byte
# for byte, as 10.
sed 's/"amp": "fp16"/"amp": "fp16", "loss_scaling": {"initial_scale_power": 24, "hysteresis": 1}/' \
  "$tmp/fp16.json" >"$tmp/fp16d.json"
expect 0 "checkpoint .*step_000005.ckpt \(step 5, LoRA adapters\)" "$AA" train "$tmp/tiny.json" --threads 1 \
  --out "$tmp/fp16d" --devices cpu:2 --strategy "$tmp/fp16d.json" --summary-json "$tmp/fp16d.sum" \
  --set "init_weights=$tmp/run0/final.ckpt" --set train.steps=10 --set train.checkpoint_every=5
expect 0 "done: 5 steps" "$AA" train "$tmp/tiny.json" --threads 1 --out "$tmp/fp16e" --devices cpu:2 \
  --strategy "$tmp/fp16d.json" --resume "$tmp/fp16d/step_000005.ckpt" --set "init_weights=$tmp/run0/final.ckpt" \
  --set train.steps=10
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(not (d["skipped_steps"] == 3 and
d["loss_scale"] == 2 ** 21))' "$tmp/fp16d.sum" && cmp -s "$tmp/fp16d/final.ckpt" "$tmp/fp16e/final.ckpt" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: fp16 with a dynamic scale: skips or resume"; }

# export --merge: the base with the adapters folded in. Against the base's
# own export: every tensor that no target adapts is bit-identical, every
# adapted one is W + (alpha / r) B A (gpt2's Conv1D layout: transposed),
# computed here in float64 from the adapter checkpoint, within one float32
# rounding of the sum (2^-23 relative, 1e-9 absolute).
expect 0 "exported 25856 parameters .* \(step 10, r 4, alpha 8\) merged" "$AA" export "$tmp/dp1/final.ckpt" \
  --model "$tmp/tiny.json" --set "init_weights=$tmp/run0/final.ckpt" --out "$tmp/merged.safetensors" --merge
expect 0 "exported 25856 parameters" "$AA" export "$tmp/run0/final.ckpt" --model "$tmp/base.json" \
  --out "$tmp/base.safetensors"
if /usr/bin/python3 - "$tmp" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: merged export"; fi
import json, struct, sys
import numpy as np
d = sys.argv[1]
def st(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype="<f4")
            .reshape(v["shape"]).astype(np.float64) for k, v in h.items() if k != "__metadata__"}
m, b = st(f"{d}/merged.safetensors"), st(f"{d}/base.safetensors")
ad = np.fromfile(f"{d}/dp1/final.ckpt", dtype="<f4", offset=68, count=3072).astype(np.float64)
r, s, C, F = 4, 8 / 4, 32, 64
names = {"qkv": ("attn.c_attn", C, 3 * C), "proj": ("attn.c_proj", C, C), "fc": ("mlp.c_fc", C, F),
         "fcproj": ("mlp.c_proj", F, C)}
ok, o, adapted, worst = True, 0, set(), 0.0
for l in range(2):
    for t in ("qkv", "proj", "fc", "fcproj"):
        hf, i, out = names[t]
        A = ad[o:o + r * i].reshape(r, i); o += r * i
        B = ad[o:o + out * r].reshape(out, r); o += out * r
        k = f"h.{l}.{hf}.weight"
        adapted.add(k)
        want = b[k] + s * (B @ A).T
        err = np.abs(m[k] - want)
        ok &= bool((err <= 2.0 ** -23 * np.abs(want) + 1e-9).all()) and bool((m[k] != b[k]).any())
        worst = max(worst, float((err / (2.0 ** -23 * np.abs(want) + 1e-9)).max()))
ok &= o == ad.size and all(np.array_equal(m[k], b[k]) for k in b if k not in adapted)
print(f"merged: {len(adapted)} adapted tensors, worst error/tolerance {worst:.3f}")
sys.exit(0 if ok else 1)
PY
expect 1 "--merge writes its base with them folded in, --peft the adapters alone" "$AA" export "$tmp/dp1/final.ckpt" \
  --model "$tmp/tiny.json" --set "init_weights=$tmp/run0/final.ckpt" --out "$tmp/x.safetensors"
expect 1 "not a LoRA adapter checkpoint" "$AA" export "$tmp/run0/final.ckpt" --model "$tmp/tiny.json" \
  --set "init_weights=$tmp/run0/final.ckpt" --out "$tmp/x.safetensors" --merge
expect 1 "adapters of fine-tune [0-9a-f]{16} \(r, alpha or targets differ\)" "$AA" export "$tmp/dp1/final.ckpt" \
  --model "$tmp/tiny.json" --set "init_weights=$tmp/run0/final.ckpt" --set lora.r=8 --out "$tmp/x.safetensors" --merge

# generate with a base and an adapter checkpoint: the same text, token for
# token, as generating from the merged export imported as a plain model
# (sampled at temperature 1 with one seed, so every logit matters).
expect 0 "imported 25856 parameters" "$AA" import "$tmp/merged.safetensors" --model "$tmp/base.json" \
  --out "$tmp/merged.ckpt"
"$AA" generate "$tmp/dp1/final.ckpt" --model "$tmp/tiny.json" --set "init_weights=$tmp/run0/final.ckpt" \
  --prompt "the " --max-tokens 12 --temperature 1 --seed 3 --threads 1 >"$tmp/gen_lora.txt" 2>/dev/null
"$AA" generate "$tmp/merged.ckpt" --model "$tmp/base.json" --prompt "the " --max-tokens 12 --temperature 1 \
  --seed 3 --threads 1 >"$tmp/gen_merged.txt" 2>/dev/null
[ "$(wc -c <"$tmp/gen_lora.txt")" -gt 5 ] && cmp -s "$tmp/gen_lora.txt" "$tmp/gen_merged.txt" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: generate with the adapters differs from the merged model's"; }
expect 1 "init_weights must name the base" "$AA" generate "$tmp/dp1/final.ckpt" --model "$tmp/tiny.json" \
  --prompt "the " --max-tokens 2

# Llama: the same chain on a tiny grouped-query llama (2 blocks, 4 query and
# 2 key/value heads, all seven targets): pretrain, fine-tune the adapters,
# merge them into an export, and generate the merged model's text from the
# base and the adapters.
cat >"$tmp/lbase.json" <<'JSON'
{"name": "lbase", "model": {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32,
 "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 10, "lr": 0.003, "eval_every": 0},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
cat >"$tmp/llora.json" <<'JSON'
{"extends": "lbase.json", "name": "llama-lora", "train": {"lr": 0.01}, "init_weights": "lrun0/final.ckpt",
 "lora": {"r": 4, "alpha": 8, "targets": ["q", "k", "v", "o", "gate", "up", "down"]}}
JSON
expect 0 "done: 10 steps" "$AA" train "$tmp/lbase.json" --threads 1 --out "$tmp/lrun0"
# 2 blocks x (q, o: 4 (32 + 32); k, v: 4 (32 + 16); gate, up: 4 (32 + 64);
# down: 4 (64 + 32)) = 4,096 adapters.
expect 0 "checkpoint .*final.ckpt \(step 10, LoRA adapters, weights only\)" "$AA" train "$tmp/llora.json" --threads 1 \
  --out "$tmp/lrun1" --set train.weights_only_checkpoints=true
size=$(stat -c %s "$tmp/lrun1/final.ckpt" 2>/dev/null)
[ "$size" = $((68 + 80 + 4 * 4096)) ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: llama adapter checkpoint $size bytes"; }
expect 0 "exported [0-9]+ parameters .* \(step [0-9]+, r 4, alpha 8\) merged" "$AA" export "$tmp/lrun1/final.ckpt" \
  --model "$tmp/llora.json" --out "$tmp/lmerged.safetensors" --merge
expect 0 "imported [0-9]+ parameters" "$AA" import "$tmp/lmerged.safetensors" --model "$tmp/lbase.json" \
  --out "$tmp/lmerged.ckpt"
"$AA" generate "$tmp/lrun1/final.ckpt" --model "$tmp/llora.json" --prompt "the " --max-tokens 12 \
  --temperature 1 --seed 5 --threads 1 >"$tmp/lgen_lora.txt" 2>/dev/null
"$AA" generate "$tmp/lmerged.ckpt" --model "$tmp/lbase.json" --prompt "the " --max-tokens 12 --temperature 1 \
  --seed 5 --threads 1 >"$tmp/lgen_merged.txt" 2>/dev/null
[ "$(wc -c <"$tmp/lgen_lora.txt")" -gt 5 ] && cmp -s "$tmp/lgen_lora.txt" "$tmp/lgen_merged.txt" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: llama: generate with the adapters differs from the merged model's"; }

echo "lora cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
