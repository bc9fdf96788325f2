#!/usr/bin/env bash
# Trains a GPT-2 124M-shaped model (12 layers, 12 heads, d_model 768,
# seq_len 1024, vocab 50304; random init) on the synthetic byte corpus with
# `autoaccel train --device cuda:N` and prints tokens/s and MFU for three
# settings: fp32 GEMMs, TF32 GEMMs, and amp bf16 (bf16 storage and bf16
# tensor-core GEMMs; the remaining fp32 ops, e.g. attention, in fp32), the
# last once more with the flash attention kernels instead of the cuBLAS ones
# (AUTOACCEL_CUDA_ATTENTION=flash; kernels/README.md).
#
#   bench/cuda_train.sh [OUTDIR]      (env: AUTOACCEL, DEVICE=cuda:0, STEPS=20, BATCH=16)
#
# MFU = tokens/s x (6N + 6*L*C*T) / peak dense bf16 FLOP/s of the device
# (aa_cuda_device_info: SMs x max clock x 4096 on sm_90), as train's summary
# JSON reports it. Byte data (vocab 256) is valid input for vocab 50304.
# The first step is untimed; tokens/s is over the median step.
set -euo pipefail
aa=${AUTOACCEL:-build/autoaccel}
dev=${DEVICE:-cuda:0}
steps=${STEPS:-20}
batch=${BATCH:-16}
out=${1:-$(mktemp -d /tmp/aa_cuda_train.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

"$aa" data synth --out "$out/data" --bytes 4000000 > /dev/null
cat > "$out/gpt2-124m.json" <<JSON
{
  "name": "gpt2-124m",
  "model": {"n_layer": 12, "n_head": 12, "d_model": 768, "d_ff": 3072, "seq_len": 1024, "vocab_size": 50304},
  "train": {"global_batch": $batch, "steps": $steps, "lr": 6e-4, "warmup_steps": 2, "eval_every": 0,
            "eval_batches": 1},
  "data": {"train": "$out/data/train.bin"}
}
JSON
printf '{"format": "autoaccel-strategy", "version": 1, "amp": "bf16"}\n' > "$out/bf16.json"

run() { # name, extra args...
  local name=$1
  shift
  "$aa" train "$out/gpt2-124m.json" --device "$dev" --out "$out/$name" --log-every 5 \
    --summary-json "$out/$name.json" "$@" 2>&1 | tee "$out/$name.log"
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"RESULT {sys.argv[2]:>10}: {s['tokens_per_s']:10.0f} tok/s, step {s['step_ms_median']:8.1f} ms, "
      f"MFU {100 * s['mfu']:5.2f}% of {s['peak_flops'] / 1e12:.0f} TFLOP/s, final loss {s['final_loss']:.4f}, "
      f"peak accounted {s['peak_bytes']['total'] / 2**30:.1f} GiB")
PY
}

run fp32
run tf32 --tf32
run bf16 --strategy "$out/bf16.json"
AUTOACCEL_CUDA_ATTENTION=flash run bf16_flash --strategy "$out/bf16.json"
grep -h RESULT "$out"/*.log 2>/dev/null || true
