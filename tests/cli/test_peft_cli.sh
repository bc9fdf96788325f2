#!/usr/bin/env bash
# Hugging Face PEFT adapters in and out (issue 36; docs/checkpoint-format.md
# "PEFT adapters"): `export --peft` writes a LoRA fine-tune's adapters as
# PEFT's adapter_model.safetensors and adapter_config.json, `import` with a
# LoRA spec reads them back into an adapter checkpoint, the same adapters
# bit for bit; PEFT files made in Python (tests/reference/peft_tiny, by
# make_peft_fixture.py) import onto llama_tiny's Hugging Face base, and
# their merged export is W + (alpha / r) B A computed here from the files.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
REF=$SRC/tests/reference
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

# gpt2, two of its four targets (c_attn and the MLP's c_proj): 2 blocks x
# 4 ((32 + 96) + (64 + 32)) = 1,792 adapters after 5 steps.
"$AA" data synth --out "$tmp/data" --bytes 100000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/base.json" <<'JSON'
{"name": "base", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 16, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 5, "lr": 0.003, "eval_every": 0},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
cat >"$tmp/lora.json" <<'JSON'
{"extends": "base.json", "name": "tiny-lora", "train": {"lr": 0.01}, "init_weights": "run0/final.ckpt",
 "lora": {"r": 4, "alpha": 8, "targets": ["qkv", "fcproj"]}}
JSON
expect 0 "done: 5 steps" "$AA" train "$tmp/base.json" --threads 1 --out "$tmp/run0"
expect 0 "done: 5 steps" "$AA" train "$tmp/lora.json" --threads 1 --out "$tmp/run1"
expect 0 "exported 1792 adapter parameters of .* \(step 5, r 4, alpha 8; 8 tensors, F32\)" \
  "$AA" export "$tmp/run1/final.ckpt" --model "$tmp/lora.json" --peft --out "$tmp/peft"
expect 0 "imported 1792 adapter parameters \(r 4, alpha 8; 8 tensors of F32\)" \
  "$AA" import "$tmp/peft" --model "$tmp/lora.json" --out "$tmp/back.ckpt"
# PEFT's names and config for GPT2LMHeadModel, and the adapters: the
# hashes (bytes 8-40) and the 1,792 floats after the 68-byte header equal
# the trained checkpoint's, bit for bit.
if /usr/bin/python3 - "$tmp" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: gpt2 PEFT files"; fi
import json, struct, sys
d = sys.argv[1]
b = open(f"{d}/peft/adapter_model.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
c = json.load(open(f"{d}/peft/adapter_config.json"))
want = {f"base_model.model.transformer.h.{l}.{m}.lora_{ab}.weight": s
        for l in range(2) for m, i, o in (("attn.c_attn", 32, 96), ("mlp.c_proj", 64, 32))
        for ab, s in (("A", [4, i]), ("B", [o, 4]))}
ok = {k: v["shape"] for k, v in h.items() if k != "__metadata__"} == want
ok &= c["r"] == 4 and c["lora_alpha"] == 8 and c["target_modules"] == ["c_attn", "mlp.c_proj"]
ok &= c["fan_in_fan_out"] is True and c["bias"] == "none" and c["task_type"] == "CAUSAL_LM"
ok &= c["peft_type"] == "LORA" and c["base_model_name_or_path"].endswith("run0/final.ckpt")
x, y = open(f"{d}/run1/final.ckpt", "rb").read(), open(f"{d}/back.ckpt", "rb").read()
n = 68 + 4 * 1792
ok &= len(y) == n and x[8:40] == y[8:40] and x[68:n] == y[68:n]
print("gpt2 peft:", "ok" if ok else "differs", len(h) - 1, "tensors", c["target_modules"])
sys.exit(0 if ok else 1)
PY
# The imported checkpoint is a usable adapter checkpoint: its merged
# export is the trained one's, byte for byte.
expect 0 "merged" "$AA" export "$tmp/run1/final.ckpt" --model "$tmp/lora.json" --merge --out "$tmp/m1.safetensors"
expect 0 "merged" "$AA" export "$tmp/back.ckpt" --model "$tmp/lora.json" --merge --out "$tmp/m2.safetensors"
cmp -s "$tmp/m1.safetensors" "$tmp/m2.safetensors" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: the imported adapters merge differently"; }
# Refusals.
expect 1 "r is 4, the spec's lora.r is 8" "$AA" import "$tmp/peft" --model "$tmp/lora.json" --set lora.r=8 \
  --out "$tmp/x.ckpt"
expect 1 "lora_alpha is 8, the spec's lora.alpha is 16" "$AA" import "$tmp/peft" --model "$tmp/lora.json" \
  --set lora.alpha=16 --out "$tmp/x.ckpt"
expect 1 "the spec's lora.targets has fc, which target_modules does not adapt" "$AA" import "$tmp/peft" \
  --model "$tmp/lora.json" --set 'lora.targets=["qkv", "fc", "fcproj"]' --out "$tmp/x.ckpt"
expect 1 "no adapter_model.safetensors" "$AA" import "$tmp" --model "$tmp/lora.json" --out "$tmp/x.ckpt"
expect 1 "--peft: .*base.json has no \"lora\" section" "$AA" export "$tmp/run0/final.ckpt" --model "$tmp/base.json" \
  --peft --out "$tmp/x"
expect 1 "not a LoRA adapter checkpoint" "$AA" export "$tmp/run0/final.ckpt" --model "$tmp/lora.json" --peft \
  --out "$tmp/x"
expect 2 "--merge and --peft exclude each other" "$AA" export "$tmp/run1/final.ckpt" --model "$tmp/lora.json" \
  --peft --merge --out "$tmp/x"
[ ! -e "$tmp/x.ckpt" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a refused import wrote"; }

# Python's PEFT files (BF16, q/v/o/gate/down, r 3, alpha 12) onto
# llama_tiny's Hugging Face weights; a BF16 re-export imports to the same
# checkpoint; the merged export equals W + 4 B A from the files, computed
# here in float64, within one float32 rounding of the sum (2^-23 relative,
# 1e-9 absolute), and every other tensor is the base's, bit for bit.
cat >"$tmp/llama.json" <<'JSON'
{"model": {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 16, "d_ff": 24,
           "seq_len": 8, "vocab_size": 29, "rope_theta": 10000, "norm_eps": 1e-5},
 "train": {"global_batch": 4, "steps": 2, "lr": 1e-3}, "data": {"train": "train.bin"}}
JSON
cat >"$tmp/llama-lora.json" <<'JSON'
{"extends": "llama.json", "init_weights": "llama.ckpt",
 "lora": {"r": 3, "alpha": 12, "targets": ["q", "v", "o", "gate", "down"]}}
JSON
expect 0 "imported 4848 parameters" "$AA" import "$REF/llama_tiny.safetensors" --model "$tmp/llama.json" \
  --out "$tmp/llama.ckpt"
expect 0 "imported 1008 adapter parameters \(r 3, alpha 12; 20 tensors of BF16\)" \
  "$AA" import "$REF/peft_tiny" --model "$tmp/llama-lora.json" --out "$tmp/ll.ckpt"
expect 0 "exported 1008 adapter parameters .* \(step 0, r 3, alpha 12; 20 tensors, BF16\)" \
  "$AA" export "$tmp/ll.ckpt" --model "$tmp/llama-lora.json" --peft --dtype bf16 --out "$tmp/llpeft"
expect 0 "imported 1008" "$AA" import "$tmp/llpeft/adapter_model.safetensors" --model "$tmp/llama-lora.json" \
  --out "$tmp/ll2.ckpt"
cmp -s "$tmp/ll.ckpt" "$tmp/ll2.ckpt" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: llama BF16 export then import differs"; }
expect 0 "merged" "$AA" export "$tmp/ll.ckpt" --model "$tmp/llama-lora.json" --merge --out "$tmp/llm.safetensors"
if /usr/bin/python3 - "$tmp" "$REF" <<'PY'; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: llama merge"; fi
import json, struct, sys
import numpy as np
d, ref = sys.argv[1:]
def st(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        raw = b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        if v["dtype"] == "BF16":
            x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            x = np.frombuffer(raw, dtype="<f4")
        out[k] = x.reshape(v["shape"]).astype(np.float64)
    return out
base, merged = st(f"{ref}/llama_tiny.safetensors"), st(f"{d}/llm.safetensors")
ad = st(f"{ref}/peft_tiny/adapter_model.safetensors")
worst, adapted, ok = 0.0, set(), True
for k in ad:
    if ".lora_A." not in k:
        continue
    w = k.replace("base_model.model.", "").replace(".lora_A.weight", ".weight")
    want = base[w] + 12 / 3 * ad[k.replace("lora_A", "lora_B")] @ ad[k]
    tol = 2.0 ** -23 * np.abs(want) + 1e-9
    worst = max(worst, float((np.abs(merged[w] - want) / tol).max()))
    ok &= not np.array_equal(merged[w], base[w])
    adapted.add(w)
ok &= len(adapted) == 10 and worst <= 1 and all(np.array_equal(merged[k], base[k]) for k in base if k not in adapted)
print(f"llama peft merge: {len(adapted)} adapted tensors, worst error/tolerance {worst:.3f}")
sys.exit(0 if ok else 1)
PY

echo "peft cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
