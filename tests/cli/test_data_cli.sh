#!/usr/bin/env bash
# `autoaccel data` end to end: synth, build and info on real files, and the
# exit codes and messages for bad input (0 ok, 1 failure, 2 usage error).
# Needs AUTOACCEL=path to the binary (ctest sets it).
set -euo pipefail
: "${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}"

T=$(mktemp -d "${TMPDIR:-/tmp}/aa_data_cli.XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0
fail=0

# check NAME WANT_RC STREAM TEXT -- CMD...
# Runs CMD and passes if it exits WANT_RC and STREAM (out or err) contains
# TEXT as a fixed string.
check() {
  local name=$1 want=$2 stream=$3 text=$4
  shift 5
  local rc=0
  "$@" >"$T/out" 2>"$T/err" || rc=$?
  if [[ $rc -eq $want ]] && grep -qF -- "$text" "$T/$stream"; then
    pass=$((pass + 1))
    echo "ok   $name"
  else
    fail=$((fail + 1))
    echo "FAIL $name: exit $rc (want $want); std$stream should contain '$text'"
    sed 's/^/  out| /' "$T/out"
    sed 's/^/  err| /' "$T/err"
  fi
}

# files NAME WANT A B: passes if files A and B are identical (WANT 0) or differ (WANT 1).
files() {
  local name=$1 want=$2 a=$3 b=$4 rc=0
  cmp -s "$a" "$b" || rc=$?
  if [[ $rc -eq $want ]]; then
    pass=$((pass + 1))
    echo "ok   $name"
  else
    fail=$((fail + 1))
    echo "FAIL $name: cmp $a $b exited $rc, want $want"
  fi
}

A=$AUTOACCEL

# Help and usage errors.
check "data --help" 0 out "usage: autoaccel data <subcommand>" -- "$A" data --help
check "synth --help" 0 out "usage: autoaccel data synth" -- "$A" data synth --help
check "build --help" 0 out "usage: autoaccel data build" -- "$A" data build -h
check "info --help" 0 out "usage: autoaccel data info" -- "$A" data info --help
check "no subcommand" 2 err "autoaccel data: expected a subcommand" -- "$A" data
check "unknown subcommand" 2 err "unknown subcommand 'frob'" -- "$A" data frob
check "unknown option" 2 err "unknown option or missing value: '--frob'" -- "$A" data synth --out "$T/x" --frob
check "option without value" 2 err "missing value: '--out'" -- "$A" data synth --out
check "synth without --out" 2 err "--out DIR is required" -- "$A" data synth
check "bad --bytes" 2 err "--bytes needs an integer" -- "$A" data synth --out "$T/x" --bytes abc
check "bad --val-fraction" 2 err "--val-fraction needs a number in [0, 1)" -- \
  "$A" data synth --out "$T/x" --val-fraction 1.5
check "info without file" 2 err "expected a shard FILE" -- "$A" data info
check "build without files" 2 err "expected at least one text FILE" -- "$A" data build --out "$T/x"

# synth: creates nested directories, splits 90/10, deterministic in seed.
check "synth" 0 out "(18000 tokens)" -- "$A" data synth --out "$T/syn/a" --bytes 20000 --seed 5
check "synth reports entropy" 0 out "nats (" -- "$A" data synth --out "$T/syn/b" --bytes 20000 --seed 5
check "synth other seed" 0 out "(2000 tokens)" -- "$A" data synth --out "$T/syn/c" --bytes 20000 --seed 6
files "same seed, same shard" 0 "$T/syn/a/train.bin" "$T/syn/b/train.bin"
files "other seed, other shard" 1 "$T/syn/a/train.bin" "$T/syn/c/train.bin"
size=$(wc -c <"$T/syn/a/train.bin")
if [[ $size -eq $((64 + 2 * 18000)) ]]; then
  pass=$((pass + 1))
  echo "ok   train.bin is 64 + 2*18000 bytes"
else
  fail=$((fail + 1))
  echo "FAIL train.bin is $size bytes, want $((64 + 2 * 18000))"
fi

# info on good shards.
check "info format" 0 out "autoaccel shard v1, uint16 ids" -- "$A" data info "$T/syn/a/train.bin"
check "info tokens" 0 out "tokens:          18000" -- "$A" data info "$T/syn/a/train.bin"
check "info vocab" 0 out "vocab_size:      256" -- "$A" data info "$T/syn/a/val.bin"
check "info entropy" 0 out "unigram entropy:" -- "$A" data info "$T/syn/a/train.bin"
check "info --max-vocab" 1 err "(the model's)" -- "$A" data info --max-vocab 100 "$T/syn/a/train.bin"

# A hand-made llm.c shard: magic 20240520, version 1, 3 tokens, uint16 ids.
{
  printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x03\x00\x00\x00'
  head -c 1012 /dev/zero
  printf '\x01\x00\x02\x01\xff\xff'
} >"$T/llmc.bin"
check "info llm.c" 0 out "llm.c shard v1" -- "$A" data info "$T/llmc.bin"
check "info llm.c ids" 0 out "min 1, max 65535" -- "$A" data info "$T/llmc.bin"

# info on bad shards: exit 1 and a message naming the file and the problem.
check "info missing file" 1 err "autoaccel data info: $T/nope.bin: no such file" -- "$A" data info "$T/nope.bin"
printf 'hello, this is not a shard at all, just some text.............\n' >"$T/text.bin"
check "info bad magic" 1 err "not a token shard (bad magic" -- "$A" data info "$T/text.bin"
head -c 40 "$T/syn/a/train.bin" >"$T/short.bin"
check "info truncated header" 1 err "truncated header" -- "$A" data info "$T/short.bin"
head -c 1000 "$T/syn/a/train.bin" >"$T/cut.bin"
check "info truncated payload" 1 err "truncated: expected 36064 bytes" -- "$A" data info "$T/cut.bin"
{ cat "$T/syn/a/train.bin"; printf 'xx'; } >"$T/long.bin"
check "info trailing bytes" 1 err "2 trailing bytes" -- "$A" data info "$T/long.bin"
cp "$T/syn/a/train.bin" "$T/flip.bin"
printf '\x7f' | dd of="$T/flip.bin" bs=1 seek=100 conv=notrunc status=none
check "info checksum" 1 err "checksum mismatch" -- "$A" data info "$T/flip.bin"

# build from text files.
printf 'the quick brown fox\n' >"$T/a.txt"
printf 'jumps over the lazy dog\n' >"$T/b.txt"
check "build" 0 out "(40 tokens)" -- "$A" data build --out "$T/built" --val-fraction 0.1 "$T/a.txt" "$T/b.txt"
check "build info" 0 out "tokens:          4" -- "$A" data info "$T/built/val.bin"
check "build missing input" 1 err "autoaccel data build: $T/missing.txt: no such file" -- \
  "$A" data build --out "$T/built2" "$T/a.txt" "$T/missing.txt"
: >"$T/empty.txt"
check "build empty input" 1 err "empty" -- "$A" data build --out "$T/built3" "$T/empty.txt"

# build --tokenizer and decode: the fixture BPE of tests/reference/make_tokenizer.py.
TOK="${AA_SOURCE_DIR:-.}/tests/reference/tokenizer/tokenizer.json"
printf 'The quick brown fox didn'"'"'t mind. Привет, мир! 漢字 42\n<|endoftext|>' >"$T/bpe_a.txt"
printf 'Hello, world!\tCafé, Straße. 😀\n' >"$T/bpe_b.txt"
check "decode --help" 0 out "usage: autoaccel data decode" -- "$A" data decode --help
check "decode without shard" 2 err "expected a shard FILE" -- "$A" data decode --tokenizer "$TOK"
check "build --tokenizer" 0 out "vocab 405" -- \
  "$A" data build --tokenizer "$TOK" --out "$T/bpe" --val-fraction 0 "$T/bpe_a.txt" "$T/bpe_b.txt"
check "build --tokenizer info" 0 out "vocab_size:      405" -- "$A" data info "$T/bpe/train.bin"
cat "$T/bpe_a.txt" "$T/bpe_b.txt" >"$T/bpe_ab.txt"
"$A" data decode --tokenizer "$TOK" "$T/bpe/train.bin" >"$T/bpe_back.txt"
files "decode gives the text back" 0 "$T/bpe_ab.txt" "$T/bpe_back.txt"
"$A" data decode --tokenizer "$TOK" --count 3 "$T/bpe/train.bin" >"$T/bpe_3.txt"
printf 'The q' >"$T/bpe_3_want.txt"
files "decode --count 3: The, space, q" 0 "$T/bpe_3_want.txt" "$T/bpe_3.txt"
"$A" data decode "$T/built/train.bin" >"$T/byte_back.txt"
head -c 40 <(cat "$T/a.txt" "$T/b.txt") >"$T/byte_want.txt"
files "decode of a byte-level shard" 0 "$T/byte_want.txt" "$T/byte_back.txt"
check "decode with the wrong tokenizer" 1 err "vocab_size is 256, the tokenizer's is 405" -- \
  "$A" data decode --tokenizer "$TOK" "$T/built/train.bin"
printf '{"model": {"type": "WordPiece"}}' >"$T/wp.json"
check "build with a WordPiece tokenizer" 1 err "model.type: must be \"BPE\"" -- \
  "$A" data build --tokenizer "$T/wp.json" --out "$T/bpe2" "$T/bpe_a.txt"
check "build with a missing tokenizer" 1 err "$T/none.json" -- \
  "$A" data build --tokenizer "$T/none.json" --out "$T/bpe3" "$T/bpe_a.txt"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
