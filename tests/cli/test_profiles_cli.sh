#!/usr/bin/env bash
# `autoaccel plan --list-devices` and `plan --show-device NAME|FILE` end to
# end, with no planner and no model: the catalogue's table, one built-in
# profile with its figures and sources, a user's file read the same way, a
# broken file refused with its field named (exit 1), an unknown name
# answered with the names there are (exit 1), and usage errors (exit 2).
# The reader's rules one by one are tests/test_profile.c's.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
# No planner may be needed: one that answered would be a bug hidden.
export AUTOACCEL_HOME="$tmp/home"

# Help and usage.
expect 0 "autoaccel plan --list-devices" "$AA" plan --help
expect 0 "--show-device NAME\|FILE" "$AA" plan --help
expect 2 "take no MODEL and no --pool" "$AA" plan --list-devices "$tmp/model.json"
expect 2 "take no MODEL and no --pool" "$AA" plan --show-device h100-80gb --pool cuda:8
expect 2 "go one at a time" "$AA" plan --list-devices --show-device h100-80gb
expect 2 "unknown option or missing value: '--show-device'" "$AA" plan --show-device

# The catalogue: one row a profile, bf16 and fp8 dense TFLOP/s, links per
# direction; an A100 has no fp8.
expect 0 "^NAME +MEMORY +HBM TB/s +BF16 TFLOP/s +FP8 TFLOP/s +GPUS/NODE +NODE GB/s +NET GB/s$" \
  "$AA" plan --list-devices
expect 0 "^h100-80gb +80 GiB +3\.35 +989\.5 +1979\.0 +8 +450 +50$" "$AA" plan --list-devices
expect 0 "^h200-141gb +141 GiB +4\.8 +989\.5 +1979\.0 +8 +450 +50$" "$AA" plan --list-devices
expect 0 "^a100-80gb +80 GiB +2\.039 +312\.0 +- +8 +300 +25$" "$AA" plan --list-devices
expect 0 "^a100-40gb +40 GiB +1\.555 +312\.0 +- +8 +300 +25$" "$AA" plan --list-devices
rows=$("$AA" plan --list-devices | grep -c ' GiB ')
want=$(ls "$SRC"/profiles/*.json | wc -l)
if [ "$rows" = "$want" ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL: --list-devices shows $rows profiles, profiles/ holds $want"; fi

# One built-in profile: every figure, exactly and for people, and its source.
expect 0 "^h100-80gb: NVIDIA H100 SXM5 80 GB" "$AA" plan --show-device h100-80gb
expect 0 "^  built in$" "$AA" plan --show-device h100-80gb
expect 0 "^memory_bytes +85899345920 +80 GiB$" "$AA" plan --show-device h100-80gb
expect 0 "^dense_flop_per_s\.bf16 +9\.895e\+14 +989\.5 TFLOP/s$" "$AA" plan --show-device h100-80gb
expect 0 "^intra_node\.bytes_per_s +4\.5e\+11 +450 GB/s each way$" "$AA" plan --show-device h100-80gb
expect 0 "^inter_node\.latency_s +1\.4e-05 +14 us$" "$AA" plan --show-device h100-80gb
expect 0 "^    source: NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: BFLOAT16 Tensor Core 1,979 teraFLOPS" \
  "$AA" plan --show-device h100-80gb
expect 0 "^dense_flop_per_s\.fp8 +null +the device has no such unit$" "$AA" plan --show-device a100-40gb
n=$("$AA" plan --show-device h200-141gb | grep -c '^    source: ')
if [ "$n" = 12 ]; then pass=$((pass + 1)); else
  fail=$((fail + 1)); echo "FAIL: --show-device h200-141gb shows $n sources, want 12"; fi

# A user's file: the same reader, named by a path; a name never reads a file.
sed 's/"name": "h100-80gb"/"name": "my-gpu"/; s/"value": 8,/"value": 4,/' \
  "$SRC/profiles/h100-80gb.json" >"$tmp/my-gpu.json"
expect 0 "^my-gpu: NVIDIA H100" "$AA" plan --show-device "$tmp/my-gpu.json"
expect 0 "^  $tmp/my-gpu.json$" "$AA" plan --show-device "$tmp/my-gpu.json"
expect 0 "^gpus_per_node +4 +GPUs$" "$AA" plan --show-device "$tmp/my-gpu.json"
in_tmp() { (cd "$tmp" && "$@"); }
expect 0 "^my-gpu: " in_tmp "$AA" plan --show-device my-gpu.json
expect 1 "no device profile named \"my-gpu\"" in_tmp "$AA" plan --show-device my-gpu

# A broken file: exit 1, the file and the field named.
sed 's/"value": 450e9/"value": -450e9/' "$tmp/my-gpu.json" >"$tmp/bad.json"
sed -i 's/"name": "my-gpu"/"name": "bad"/' "$tmp/bad.json"
expect 1 "^autoaccel plan: $tmp/bad.json: intra_node\.bytes_per_s\.value: must be in \[1e\+06, 1e\+14\] \(got -4\.5e\+11\)$" \
  "$AA" plan --show-device "$tmp/bad.json"
cp "$tmp/my-gpu.json" "$tmp/other.json"
expect 1 "other\.json: name: must be the file's name without \.json, \"other\" \(got \"my-gpu\"\)" \
  "$AA" plan --show-device "$tmp/other.json"
grep -v '"source": "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: GPU memory bandwidth' "$tmp/my-gpu.json" \
  | sed 's/"value": 3.35e12,/"value": 3.35e12/' >"$tmp/nosrc.json"
sed -i 's/"name": "my-gpu"/"name": "nosrc"/' "$tmp/nosrc.json"
expect 1 "nosrc\.json: hbm_bytes_per_s\.source: required field is missing" "$AA" plan --show-device "$tmp/nosrc.json"
expect 1 "missing\.json: No such file" "$AA" plan --show-device "$tmp/missing.json"

# An unknown name: exit 1, with the names there are.
expect 1 "no device profile named \"h100\" \(built in: a100-40gb, a100-80gb, h100-80gb, h200-141gb" \
  "$AA" plan --show-device h100

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
