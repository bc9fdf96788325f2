#!/usr/bin/env bash
# `autoaccel import` and `export` end to end: Hugging Face safetensors (one
# file, shards, bf16; GPT-2 and Llama names), llm.c, export then import giving the same checkpoint
# byte for byte, the imported checkpoint as a spec's init_weights for
# `train`, and the exit codes and messages of bad input (0 ok, 1 failure,
# 2 usage error). The Llama part reads the committed
# tests/reference/llama_tiny.safetensors; the GPT-2 weights come from
# tests/reference/make_weights.py (Debian's /usr/bin/python3 with
# python3-torch); without it that part says "skipped" and passes. Needs AUTOACCEL=path to the binary (ctest sets it).
set -uo pipefail
: "${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}"
SRC=${AA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
A=$AUTOACCEL

T=$(mktemp -d "${TMPDIR:-/tmp}/aa_import_cli.XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

# check NAME WANT_RC TEXT -- CMD...: CMD exits WANT_RC and its stdout+stderr contains TEXT.
check() {
  local name=$1 want=$2 text=$3
  shift 4
  local rc=0
  "$@" >"$T/out" 2>&1 || rc=$?
  if [[ $rc -eq $want ]] && grep -qF -- "$text" "$T/out"; then
    pass=$((pass + 1))
    echo "ok   $name"
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc (want $want); output should contain '$text'"
    sed 's/^/  | /' "$T/out"
  fi
}

same() {
  if cmp -s "$2" "$3"; then
    pass=$((pass + 1))
    echo "ok   $1"
  else
    fail=$((fail + 1))
    echo "FAIL $1: $2 and $3 differ"
  fi
}

# Usage errors need no weights.
check "import --help" 0 "usage: autoaccel import SRC" -- "$A" import --help
check "export --help" 0 "usage: autoaccel export CKPT" -- "$A" export -h
check "import without SRC" 2 "expected exactly one SRC" -- "$A" import --model m.json --out x
check "import without --model" 2 "--model MODEL.json is required" -- "$A" import a.bin --out x
check "import without --out" 2 "--out is required" -- "$A" import a.bin --model m.json
check "import --dtype" 2 "unknown option or missing value: '--dtype'" -- "$A" import a --model m --out x --dtype f16
check "export bad --dtype" 2 "--dtype: expected f32, bf16 or f16, got 'f8'" -- \
  "$A" export c --model m --out x --dtype f8

# Llama: Hugging Face names in and out, with a llama spec (make_llama_fixture.py's model).
LW=$SRC/tests/reference/llama_tiny.safetensors
llama_spec() { # FILE N_KV_HEAD
  cat >"$1" <<EOF
{"model": {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": $2, "d_model": 16, "d_ff": 24,
           "seq_len": 8, "vocab_size": 29, "rope_theta": 10000, "norm_eps": 1e-5},
 "train": {"global_batch": 4, "steps": 2, "lr": 1e-3}, "data": {"train": "train.bin"}}
EOF
}
llama_spec "$T/llama.json" 2
llama_spec "$T/llama_mha.json" 4
check "import llama safetensors" 0 \
  "imported 4848 parameters from $LW (safetensors, 1 file, 21 tensors of F32) into $T/llama.ckpt" -- \
  "$A" import "$LW" --model "$T/llama.json" --out "$T/llama.ckpt"
check "export llama f32" 0 "exported 4848 parameters from $T/llama.ckpt to $T/llama_x.safetensors (21 tensors, F32)" -- \
  "$A" export "$T/llama.ckpt" --model "$T/llama.json" --out "$T/llama_x.safetensors"
same "a llama f32 export is the Hugging Face file" "$LW" "$T/llama_x.safetensors"
check "re-import the llama export" 0 "imported 4848" -- \
  "$A" import "$T/llama_x.safetensors" --model "$T/llama.json" --out "$T/llama_x.ckpt"
same "llama export then import is lossless" "$T/llama.ckpt" "$T/llama_x.ckpt"
check "export llama bf16" 0 "(21 tensors, BF16)" -- \
  "$A" export "$T/llama.ckpt" --model "$T/llama.json" --out "$T/llama16.safetensors" --dtype bf16
check "import llama bf16" 0 "21 tensors of BF16" -- \
  "$A" import "$T/llama16.safetensors" --model "$T/llama.json" --out "$T/llama16.ckpt"
check "llama weights, wrong kv heads" 1 \
  "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 16] but the model needs [16, 16]" -- \
  "$A" import "$LW" --model "$T/llama_mha.json" --out "$T/bad.ckpt"
check "llama weights into a gpt2 spec" 1 "unexpected tensor 'model.embed_tokens.weight' (not a GPT-2 weight)" -- \
  "$A" import "$LW" --model "$SRC/examples/tiny/model.json" --out "$T/bad.ckpt"
[[ ! -e $T/bad.ckpt ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a failed llama import wrote its --out"; }

# A tied checkpoint (no lm_head.weight): the head is embed_tokens, and the line says so.
if /usr/bin/python3 - "$LW" "$T/llama_tied.safetensors" <<'EOF'; then
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr, data = json.loads(raw[8:8 + n]), raw[8 + n:]
head = hdr.pop("lm_head.weight")["data_offsets"]
assert head[1] == len(data)  # the last tensor: dropping it leaves the others' offsets
h = json.dumps(hdr, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data[:head[0]])
EOF
  check "import a tied llama" 0 "20 tensors of F32; no lm_head.weight: the head is a copy of embed_tokens (tied)" -- \
    "$A" import "$T/llama_tied.safetensors" --model "$T/llama.json" --out "$T/llama_tied.ckpt"
else
  echo "skipped: tied llama import (/usr/bin/python3 could not write the file)"
fi

if ! /usr/bin/python3 "$SRC/tests/reference/make_weights.py" --out "$T/w" 2>"$T/py.err"; then
  echo "skipped: make_weights.py: $(tail -1 "$T/py.err")"
  echo "$pass passed, $fail failed"
  exit $((fail > 0))
fi
W=$T/w
M=$W/model.json

check "import f32 safetensors" 0 "imported 7088 parameters from $W/f32.safetensors (safetensors, 1 file, 28 tensors of F32" -- \
  "$A" import "$W/f32.safetensors" --model "$M" --out "$T/f32.ckpt"
check "import sharded" 0 "(sharded safetensors, 2 files" -- "$A" import "$W/sharded" --model "$M" --out "$T/sh.ckpt"
same "sharded and single file give the same checkpoint" "$T/f32.ckpt" "$T/sh.ckpt"
check "import llm.c fp32" 0 "(llm.c, 1 file, 16 tensors of F32)" -- \
  "$A" import "$W/gpt2_f32.bin" --model "$M" --out "$T/llmc.ckpt"
same "llm.c and safetensors give the same checkpoint" "$T/f32.ckpt" "$T/llmc.ckpt"
check "import bf16" 0 "tensors of BF16" -- "$A" import "$W/bf16.safetensors" --model "$M" --out "$T/bf16.ckpt"
check "import llm.c bf16" 0 "of BF16" -- "$A" import "$W/gpt2_bf16.bin" --model "$M" --out "$T/llmc16.ckpt"
same "llm.c bf16 and safetensors bf16 agree" "$T/bf16.ckpt" "$T/llmc16.ckpt"

check "export f32" 0 "exported 7088 parameters" -- "$A" export "$T/f32.ckpt" --model "$M" --out "$T/x.safetensors"
check "re-import the export" 0 "imported 7088" -- "$A" import "$T/x.safetensors" --model "$M" --out "$T/x.ckpt"
same "export then import is lossless" "$T/f32.ckpt" "$T/x.ckpt"
check "export bf16" 0 "BF16" -- "$A" export "$T/f32.ckpt" --model "$M" --out "$T/x16.safetensors" --dtype bf16
check "re-import the bf16 export" 0 "of BF16" -- "$A" import "$T/x16.safetensors" --model "$M" --out "$T/x16.ckpt"
same "a bf16 export rounds as torch does" "$T/bf16.ckpt" "$T/x16.ckpt"

# The imported checkpoint starts a training run.
sed 's/"data": {/"init_weights": "f32.ckpt", "data": {/' "$M" >"$W/init.json"
cp "$T/f32.ckpt" "$W/f32.ckpt"
check "train from the import" 0 "step" -- "$A" train "$W/init.json" --threads 1 --out "$T/run"

# Failures name the file and the tensor.
sed 's/"d_model": 16/"d_model": 32/' "$M" >"$T/wide.json"
check "wrong architecture" 1 "tensor 'wte.weight' has shape [23, 16] but the model needs [23, 32]" -- \
  "$A" import "$W/f32.safetensors" --model "$T/wide.json" --out "$T/bad.ckpt"
head -c 1000 "$W/f32.safetensors" >"$T/trunc.safetensors"
check "truncated safetensors" 1 "truncated" -- "$A" import "$T/trunc.safetensors" --model "$M" --out "$T/bad.ckpt"
head -c 5000 "$W/gpt2_f32.bin" >"$T/trunc.bin"
check "truncated llm.c" 1 "an llm.c checkpoint of this model (version 3) has" -- \
  "$A" import "$T/trunc.bin" --model "$M" --out "$T/bad.ckpt"
printf '\377\377\377\377\377\377\377\377{}' >"$T/huge.safetensors"
check "huge header length" 1 "is over the 104857600-byte limit" -- \
  "$A" import "$T/huge.safetensors" --model "$M" --out "$T/bad.ckpt"
check "missing source" 1 "No such file" -- "$A" import "$T/nope" --model "$M" --out "$T/bad.ckpt"
check "empty directory" 1 "holds neither model.safetensors.index.json nor model.safetensors" -- \
  "$A" import "$T/run" --model "$M" --out "$T/bad.ckpt"
[[ ! -e $T/bad.ckpt ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a failed import wrote its --out"; }
check "export a missing checkpoint" 1 "cannot open" -- "$A" export "$T/nope.ckpt" --model "$M" --out "$T/y.safetensors"

echo "$pass passed, $fail failed"
exit $((fail > 0))
