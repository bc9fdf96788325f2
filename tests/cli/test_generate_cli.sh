#!/usr/bin/env bash
# `autoaccel generate` end to end on a checkpoint that `autoaccel train`
# makes from the synthetic corpus: greedy text with and without the KV
# cache (the same), sampling the same for a seed, the rate line, and the
# exit codes and messages of bad input (1 failure, 2 usage error).
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

"$AA" data synth --out "$tmp/data" --bytes 200000 >/dev/null || { echo "FAIL: data synth"; exit 1; }
cat >"$tmp/m.json" <<JSON
{"name": "gen", "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 64, "seq_len": 32, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 30, "lr": 0.01, "eval_every": 0, "eval_batches": 1},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
expect 0 "done: 30 steps" "$AA" train "$tmp/m.json" --threads 1 --out "$tmp/run"
CK=$tmp/run/final.ckpt

# Usage errors (exit 2).
expect 0 "usage: autoaccel generate CKPT" "$AA" generate --help
expect 0 "generate .*KV cache" "$AA" --help
expect 2 "expected exactly one CKPT" "$AA" generate --model "$tmp/m.json" --prompt hi
expect 2 "--model MODEL.json is required" "$AA" generate "$CK" --prompt hi
expect 2 "--prompt TEXT is required" "$AA" generate "$CK" --model "$tmp/m.json"
expect 2 "--prompt is empty" "$AA" generate "$CK" --model "$tmp/m.json" --prompt ""
expect 2 "--temperature needs a number in \[0" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --temperature -1
expect 2 "--temperature needs a number" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --temperature nan
expect 2 "--top-p needs a number in \(0, 1\]" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --top-p 0
expect 2 "--top-p needs a number in \(0, 1\]" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --top-p 1.5
expect 2 "--top-k needs an integer" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --top-k -1
expect 2 "--max-tokens needs an integer" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --max-tokens x
expect 2 "unknown option" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --frobnicate

# Failures (exit 1), each naming the problem.
expect 1 "missing.ckpt" "$AA" generate "$tmp/missing.ckpt" --model "$tmp/m.json" --prompt hi
sed 's/"d_model": 32/"d_model": 16/' "$tmp/m.json" >"$tmp/other.json"
expect 1 "d_model" "$AA" generate "$CK" --model "$tmp/other.json" --prompt hi
expect 1 "the prompt is 40 tokens: the model's seq_len 32 leaves no room" \
  "$AA" generate "$CK" --model "$tmp/m.json" --prompt "$(printf 'x%.0s' {1..40})" --max-tokens 1
expect 1 "prompt \(5 tokens\) and --max-tokens 28 exceed the model's seq_len 32" \
  "$AA" generate "$CK" --model "$tmp/m.json" --prompt "hello" --max-tokens 28
expect 1 "the prompt is 32 tokens: the model's seq_len 32 leaves no room" \
  "$AA" generate "$CK" --model "$tmp/m.json" --prompt "$(printf 'y%.0s' {1..32})"
expect 1 "outside the model's vocab_size 256.*tokenizer" \
  "$AA" generate "$CK" --model "$tmp/m.json" --prompt "the the the" --tokenizer "$SRC/tests/reference/tokenizer/tokenizer.json"
expect 1 "unknown device 'tpu'" "$AA" generate "$CK" --model "$tmp/m.json" --prompt hi --device tpu
printf 'not a checkpoint, just text long enough to be read as a header....................\n' >"$tmp/bad.ckpt"
expect 1 "bad.ckpt" "$AA" generate "$tmp/bad.ckpt" --model "$tmp/m.json" --prompt hi

# Greedy: the prompt then its continuation on stdout, the rate on stderr;
# the KV cache and the recomputation give the same text.
gen() { "$AA" generate "$CK" --model "$tmp/m.json" --prompt "the cat " --max-tokens 20 "$@"; }
expect 0 "generated 20 tokens in [0-9.]+ s: [0-9.]+ tokens/s \(prompt 8 tokens, KV cache on\)" gen
expect 0 "KV cache off" gen --no-kv-cache
gen >"$tmp/kv.txt" 2>/dev/null
gen --no-kv-cache >"$tmp/nokv.txt" 2>/dev/null
if [ -s "$tmp/kv.txt" ] && cmp -s "$tmp/kv.txt" "$tmp/nokv.txt" && [ "$(head -c 8 "$tmp/kv.txt")" = "the cat " ] &&
  [ "$(wc -c <"$tmp/kv.txt")" = 29 ]; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: greedy text with and without the KV cache:"; cat "$tmp/kv.txt" "$tmp/nokv.txt"
fi

# Sampling: the same seed gives the same text; top-k 1 is greedy.
gen --temperature 1 --top-p 0.9 --seed 7 >"$tmp/s1.txt" 2>/dev/null
gen --temperature 1 --top-p 0.9 --seed 7 >"$tmp/s2.txt" 2>/dev/null
gen --temperature 0.8 --top-k 1 --seed 3 >"$tmp/k1.txt" 2>/dev/null
if [ -s "$tmp/s1.txt" ] && cmp -s "$tmp/s1.txt" "$tmp/s2.txt" && cmp -s "$tmp/k1.txt" "$tmp/kv.txt"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: sampling per seed / top-k 1"; cat "$tmp/s1.txt" "$tmp/s2.txt" "$tmp/k1.txt"
fi
expect 0 "generated 26 tokens .*prompt 6 tokens" "$AA" generate "$CK" --model "$tmp/m.json" --prompt "a dog "

# A BPE tokenizer (404 ids) encodes the prompt and decodes every new token.
sed 's/"vocab_size": 256/"vocab_size": 404/; s/"steps": 30/"steps": 3/' "$tmp/m.json" >"$tmp/bpe.json"
expect 0 "done: 3 steps" "$AA" train "$tmp/bpe.json" --threads 1 --out "$tmp/bperun"
expect 0 "generated 10 tokens .*prompt 9 tokens" "$AA" generate "$tmp/bperun/final.ckpt" \
  --model "$tmp/bpe.json" --prompt "the cat sat" --max-tokens 10 --tokenizer "$SRC/tests/reference/tokenizer/tokenizer.json"

# llama (grouped-query attention, RoPE): a checkpoint of its own, the same
# text with and without the cache; a gpt2 checkpoint under a llama spec of
# the same dimensions is refused.
cat >"$tmp/l.json" <<JSON
{"name": "genl", "model": {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32,
  "d_ff": 48, "seq_len": 32, "vocab_size": 256},
 "train": {"global_batch": 4, "steps": 10, "lr": 0.01, "eval_every": 0, "eval_batches": 1},
 "data": {"train": "data/train.bin", "val": "data/val.bin"}}
JSON
expect 0 "done: 10 steps" "$AA" train "$tmp/l.json" --threads 1 --out "$tmp/lrun"
lgen() { "$AA" generate "$tmp/lrun/final.ckpt" --model "$tmp/l.json" --prompt "a cat " --temperature 0.7 --seed 5 "$@"; }
expect 0 "generated 26 tokens .*KV cache on" lgen
lgen >"$tmp/lkv.txt" 2>/dev/null
lgen --no-kv-cache >"$tmp/lnokv.txt" 2>/dev/null
if [ -s "$tmp/lkv.txt" ] && cmp -s "$tmp/lkv.txt" "$tmp/lnokv.txt"; then
  pass=$((pass + 1))
else
  fail=$((fail + 1))
  echo "FAIL: llama text with and without the KV cache:"; cat "$tmp/lkv.txt" "$tmp/lnokv.txt"
fi
sed 's/"n_layer": 2/"family": "llama", "n_layer": 2/' "$tmp/m.json" >"$tmp/m_llama.json"
expect 1 "final.ckpt: checkpoint is of another model .*this llama model" "$AA" generate "$CK" --model "$tmp/m_llama.json" --prompt hi

# The PyTorch reference end to end: llama_tiny's Hugging Face weights
# imported, then decoded greedily from id 12 (a byte: without --tokenizer
# each byte is an id) must print the ids of tests/reference/generate_tiny.txt.
touch "$tmp/train.bin"
cat >"$tmp/lt.json" <<JSON
{"model": {"family": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 16, "d_ff": 24,
           "seq_len": 8, "vocab_size": 29, "rope_theta": 10000, "norm_eps": 1e-5},
 "train": {"global_batch": 4, "steps": 2, "lr": 1e-3}, "data": {"train": "train.bin"}}
JSON
want=$(sed -n 's/^llama_tiny.fixture fnv1a [0-9a-f]* prompt 12 greedy //p' "$SRC/tests/reference/generate_tiny.txt")
if [ -n "$want" ] && "$AA" import "$SRC/tests/reference/llama_tiny.safetensors" --model "$tmp/lt.json" \
  --out "$tmp/lt.ckpt" >/dev/null; then
  got=$("$AA" generate "$tmp/lt.ckpt" --model "$tmp/lt.json" --prompt $'\x0c' 2>/dev/null | od -An -v -tu1 |
    tr -s ' \n' ' ' | sed 's/^ *12 //; s/ *10 *$//')
  if [ "$got" = "$want" ]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: llama_tiny greedy through the CLI: '$got', PyTorch '$want'"
  fi
else
  fail=$((fail + 1))
  echo "FAIL: llama_tiny: no reference line or the import failed"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
