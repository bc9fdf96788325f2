#!/usr/bin/env bash
# Fuzzes what autoaccel reads from outside, each target for a bounded time,
# built with clang's libFuzzer plus AddressSanitizer and
# UndefinedBehaviorSanitizer into a temporary folder:
#   fuzz_proto (tests/fuzz/fuzz_proto.c): the frame reader and the message
#     decoder, seeded with every sample message;
#   fuzz_files (tests/fuzz/fuzz_files.c): the model spec, strategy file,
#     safetensors, token shard, calibration file, tokenizer.json and device
#     profile readers, and byte-level BPE's round trip on any text, seeded
#     with the bundled specs, strategy files and profiles, small safetensors
#     files and shards of both formats, a calibration file
#     (tests/fuzz/seeds/calibration.json), the test tokenizers
#     (tests/reference/tokenizer) and texts; every seed must first pass its
#     reader, so that the fuzzer starts from inputs that go deep.
# Together they run 2 x AA_FUZZ_TIME seconds (default 15): a third of it the
# protocol, whose inputs are quick (2.6 M in 10 s here), the rest the files
# (43,000 in 20 s: tokenizers are slow to parse). Passes when nothing crashed;
# skips (exit 0, says so) when no clang with libFuzzer is installed
# (scripts/setup.sh installs clang and libclang-rt-14-dev).
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
FUZZ_TIME=${AA_FUZZ_TIME:-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
  >"$tmp/probe.c"
cc=""
for c in clang clang-14; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -fsanitize=fuzzer "$tmp/probe.c" -o "$tmp/probe" >/dev/null 2>&1; then
    cc=$c; break
  fi
done
if [ -z "$cc" ]; then
  echo "skipped: clang with libFuzzer not found"
  exit 0
fi

# build NAME SOURCES...: the target into $tmp/NAME.
build() {
  local name=$1; shift
  # shellcheck disable=SC2046  # pkg-config output is a list of flags
  if ! "$cc" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$SRC" \
    $(pkg-config --cflags msgpack jansson) "$@" $(pkg-config --libs msgpack jansson) -lm \
    -o "$tmp/$name" 2>"$tmp/build-$name.log"; then
    echo "FAIL: building $name with $cc:"; cat "$tmp/build-$name.log"; exit 1
  fi
}

# fuzz NAME SECONDS: runs $tmp/NAME on its corpus $tmp/corpus-NAME.
fuzz() {
  local name=$1 secs=$2 rc
  echo "$name: fuzzing for ${secs}s with $cc ($(ls "$tmp/corpus-$name" | wc -l) seeds)"
  "$tmp/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$tmp/$name-" "$tmp/corpus-$name" >"$tmp/$name.log" 2>&1
  rc=$?
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ +DONE" "$tmp/$name.log"
  if [ "$rc" != 0 ]; then
    echo "FAIL: $name stopped with exit $rc:"
    tail -60 "$tmp/$name.log"
    for a in "$tmp/$name"-crash-* "$tmp/$name"-leak-* "$tmp/$name"-timeout-* "$tmp/$name"-oom-*; do
      [ -e "$a" ] || continue
      echo "input $(basename "$a") (base64): $(base64 -w0 "$a")"
    done
    exit 1
  fi
}

# --- the protocol ------------------------------------------------------------
build fuzz_proto "$SRC/tests/fuzz/fuzz_proto.c" "$SRC"/proto/*.c "$SRC"/common/*.c
mkdir "$tmp/corpus-fuzz_proto"
AA_FUZZ_WRITE_SEEDS="$tmp/corpus-fuzz_proto" "$tmp/fuzz_proto" || { echo "FAIL: writing the seed corpus"; exit 1; }
fuzz fuzz_proto $((2 * FUZZ_TIME / 3))

# --- the files -----------------------------------------------------------------
build fuzz_files "$SRC/tests/fuzz/fuzz_files.c" "$SRC"/common/*.c "$SRC"/strategies/strategy*.c \
  "$SRC"/strategies/{pipeline,layout,sizes,calib,calib_file,profile}.c "$SRC"/engine/{safetensors,data,tokenizer}.c
export AA_FUZZ_TOKENIZERS=$SRC/tests/reference/tokenizer
seeds=$tmp/corpus-fuzz_files
mkdir "$seeds"
# seed KIND FILE NAME: FILE as a seed of reader KIND (fuzz_files.c's byte 0).
seed() { { printf '%b' "\\x0$1"; cat "$2"; } >"$seeds/$3"; }
i=0
for f in "$SRC"/examples/models/*.json "$SRC"/examples/tiny/model.json; do
  # A spec given as text may not extend another.
  grep -q '"extends"' "$f" || seed 0 "$f" "spec-$((i++))"
done
for f in "$SRC"/examples/strategies/*.json; do seed 1 "$f" "strategy-$((i++))"; done
"$AA" data synth --out "$tmp/data" --bytes 4000 >"$tmp/data.log" 2>&1 || { cat "$tmp/data.log"; exit 1; }
seed 3 "$tmp/data/val.bin" shard-aa
seed 4 "$SRC/tests/fuzz/seeds/calibration.json" calibration
for f in "$AA_FUZZ_TOKENIZERS"/tokenizer*.json; do seed 5 "$f" "tokenizer-$((i++))"; done
for f in "$SRC"/profiles/*.json; do seed 8 "$f" "profile-$((i++))"; done
# Texts for the two test tokenizers: prose, and UTF-8 with invalid bytes.
head -c 2000 "$SRC/README.md" >"$tmp/prose.txt"
printf 'caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x82\xac12\r\n\t \xff\xfe bad \xc3 cut  end' >"$tmp/bytes.txt"
for k in 6 7; do
  seed "$k" "$tmp/prose.txt" "prose-$k"
  seed "$k" "$tmp/bytes.txt" "bytes-$k"
done
/usr/bin/python3 - "$tmp" <<'EOF'
import json, struct, sys
tmp = sys.argv[1]
def st(tensors):
    head, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, raw) in tensors.items():
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(head).encode()
    return struct.pack("<Q", len(h)) + h + data
open(tmp + "/a.safetensors", "wb").write(st({"w": ("F32", [2, 3], struct.pack("<6f", *range(6))),
                                               "b": ("BF16", [4], b"\x80\x3f" * 4)}))
open(tmp + "/b.safetensors", "wb").write(st({"x": ("F16", [2, 2], b"\x00\x3c" * 4),
                                               "i": ("I64", [1], struct.pack("<q", 7))}))
# llm.c's shard: 256 int32 of header (magic, version 1, token count), uint16 tokens.
toks = [1, 2, 3, 250, 7, 0]
open(tmp + "/llmc.bin", "wb").write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)) +
                                     struct.pack("<%dH" % len(toks), *toks))
EOF
seed 2 "$tmp/a.safetensors" st-a
seed 2 "$tmp/b.safetensors" st-b
seed 3 "$tmp/llmc.bin" shard-llmc
# Every seed passes its reader (-runs=0: the corpus once, no mutations).
if ! AA_FUZZ_SEEDS_MUST_PARSE=1 "$tmp/fuzz_files" -runs=0 -artifact_prefix="$tmp/seeds-" "$seeds" \
  >"$tmp/seeds.log" 2>&1; then
  echo "FAIL: a seed does not pass its reader:"; grep -E "a seed fails|ERROR" "$tmp/seeds.log" | head -5; exit 1
fi
fuzz fuzz_files $((2 * FUZZ_TIME - 2 * FUZZ_TIME / 3))
echo "ok: no crash"
