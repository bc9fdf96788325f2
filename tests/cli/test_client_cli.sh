#!/usr/bin/env bash
# The client commands (submit, status, cancel, query, auto) where no planner
# is needed: help, usage errors (exit 2), a missing planner (exit 1 with a
# clear message), bad model files (exit 1 with file:line:col), bad --model
# values. The service itself is tests/cli/test_service.sh.
set -u
AA=${AUTOACCEL:?set AUTOACCEL to the autoaccel binary}
# shellcheck source=tests/cli/expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"
# No planner anywhere this test could reach by default.
export AUTOACCEL_HOME="$tmp/home"
NOP="--planner unix:$tmp/nobody.sock"

cat >"$tmp/ok.json" <<'JSON'
{"name": "cli", "model": {"n_layer": 1, "n_head": 2, "d_model": 16, "d_ff": 32, "seq_len": 8, "vocab_size": 256},
 "train": {"global_batch": 2, "steps": 3, "lr": 0.001},
 "data": {"train": "data/train.bin"}}
JSON
printf '{"model": {"n_layer": 2,\n  "n_head": }\n}\n' >"$tmp/syntax.json"
sed 's/"n_head": 2/"n_head": 3/' "$tmp/ok.json" >"$tmp/div.json"

# --- help ------------------------------------------------------------------------
expect 0 "^autoaccel [0-9]+\.[0-9]+\.[0-9]+ \((CUDA backend built|no CUDA backend)" "$AA" --version
expect 0 "usage: autoaccel submit" "$AA" submit --help
expect 0 "usage: autoaccel status" "$AA" status --help
expect 0 "usage: autoaccel cancel" "$AA" cancel --help
expect 0 "usage: autoaccel query best" "$AA" query --help
expect 0 "usage: autoaccel query" "$AA" query runs --help
expect 0 "usage: autoaccel auto" "$AA" auto --help

# --- usage errors -----------------------------------------------------------------
expect 2 "expected exactly one MODEL.json" "$AA" submit
expect 2 "unknown option" "$AA" submit "$tmp/ok.json" --frobnicate
expect 2 "--max-dryruns needs an integer" "$AA" submit "$tmp/ok.json" --max-dryruns many
expect 2 "--time-limit needs an integer" "$AA" submit "$tmp/ok.json" --time-limit -1
expect 2 "--exclude.*1\.\.64 bytes" "$AA" submit "$tmp/ok.json" --exclude fp16,,ckpt
expect 2 "include: unknown method \"dp\" \(accepted: amp," "$AA" submit "$tmp/ok.json" --include dp
expect 2 "include: method \"zero1\" is also excluded \(exclude leaves out zero1\)" \
  "$AA" submit "$tmp/ok.json" --include zero1 --exclude zero
expect 2 "include: method \"amp\" is also excluded" "$AA" auto "$tmp/ok.json" --include amp --exclude bf16,fp16
expect 2 "at most one JOB" "$AA" status 1 2
expect 2 "JOB needs an integer" "$AA" status one
expect 2 "unknown option" "$AA" status --frobnicate
expect 2 "exactly one JOB" "$AA" cancel
expect 2 "JOB needs an integer" "$AA" cancel 0
expect 2 "expected what to query" "$AA" query
expect 2 "unknown query 'fastest'" "$AA" query fastest
expect 2 "query best needs --model" "$AA" query best
expect 2 "--kind is dryrun or train" "$AA" query runs --kind eval
expect 2 "--order is id or best" "$AA" query runs --order fast
expect 2 "--limit needs an integer" "$AA" query runs --limit 0
expect 2 "takes only the options" "$AA" query jobs --job 3
expect 2 "expected exactly one MODEL.json" "$AA" auto
expect 2 "expected cpu, cpu:N, cuda or cuda:I,J" "$AA" auto "$tmp/ok.json" --devices tpu:0
expect 2 "N must be a count from 1 to 64, got '0'" "$AA" auto "$tmp/ok.json" --devices cpu:0
expect 2 "cuda:1 is named twice" "$AA" auto "$tmp/ok.json" --devices cuda:1,0,1
expect 2 "expected cpu or cuda:N" "$AA" auto "$tmp/ok.json" --devices cuda:0,x
expect 2 "expected CUDA ordinals" "$AA" auto "$tmp/ok.json" --devices cuda:0,,1
expect 2 "expected cpu or cuda:N" "$AA" executor --device cuda:x
expect 2 "expected cpu or cuda:N" "$AA" executor --device cuda:99999

# --- CUDA devices that cannot be used: the reason, exit 1 -------------------------
# CUDA_VISIBLE_DEVICES=-1 hides every GPU, so this holds on a GPU machine too;
# the reason is the driver's, or "no CUDA backend" in a build without nvcc.
expect 1 "--device cuda:0: .*(CUDA|cuda)" env CUDA_VISIBLE_DEVICES=-1 "$AA" executor --device cuda:0 $NOP
expect 1 "--devices cuda: .*(CUDA|cuda)" env CUDA_VISIBLE_DEVICES=-1 "$AA" auto "$tmp/ok.json" --devices cuda
expect 1 "--devices cuda:0,1: .*(CUDA|cuda)" env CUDA_VISIBLE_DEVICES=-1 "$AA" auto "$tmp/ok.json" --devices cuda:0,1
expect 2 "--memory-limit" "$AA" auto "$tmp/ok.json" --memory-limit lots
expect 2 "--measured-steps needs an integer" "$AA" auto "$tmp/ok.json" --measured-steps 0
expect 2 "--cpu-backend: expected auto, shm or gloo, got 'mpi'" "$AA" auto "$tmp/ok.json" --cpu-backend mpi

# --- bad --model values -----------------------------------------------------------
expect 2 "neither a model spec file nor a 16-hex-digit" "$AA" query best --model 123abc $NOP
expect 2 "neither a model spec file nor a 16-hex-digit" "$AA" query runs --model 0123456789abcdeg $NOP
expect 1 "no such file" "$AA" query best --model "$tmp/missing.json" $NOP
expect 1 "syntax.json:2:" "$AA" query jobs --model "$tmp/syntax.json" $NOP

# --- bad model files: named before any planner is contacted -------------------------
expect 1 "no such file" "$AA" submit "$tmp/missing.json" $NOP
expect 1 "syntax.json:2:" "$AA" submit "$tmp/syntax.json" $NOP
expect 1 "model.n_head.*divide" "$AA" submit "$tmp/div.json" $NOP
# --from: the strategy must run on the model before any planner is contacted.
printf '{"format": "autoaccel-strategy", "version": 1, "parallel": {"tensor": 3}}\n' >"$tmp/tp3.json"
expect 1 "--from .*tp3.json: the strategy does not fit model cli: .*tp" "$AA" submit "$tmp/ok.json" --from "$tmp/tp3.json" $NOP
expect 1 "missing-strategy.json" "$AA" auto "$tmp/ok.json" --from "$tmp/missing-strategy.json" --home "$tmp/auto-home"
expect 1 "syntax.json:2:" "$AA" auto "$tmp/syntax.json" --home "$tmp/auto-home"
# ok.json's data does not exist: the first dry run says so, and the search
# stops there instead of trying the other 17 strategies on the same data.
expect 1 "job 1 failed: the model's data or initial weights cannot be used: training data: .*data/train.bin: no such file" \
  "$AA" auto "$tmp/ok.json" --home "$tmp/auto-nodata" --no-train
expect 1 "job 1: 18 runs: 1 error 17 pruned" "$AA" auto "$tmp/ok.json" --home "$tmp/auto-nodata2" --no-train

# --- no planner ---------------------------------------------------------------------
expect 1 "no planner at unix:$tmp/home/planner.sock: is .autoaccel planner. running" "$AA" status
expect 1 "no planner at unix:$tmp/nobody.sock" "$AA" status 3 $NOP
expect 1 "no planner at" "$AA" cancel 3 $NOP
expect 1 "no planner at" "$AA" query runs --job 1 $NOP
expect 1 "no planner at" "$AA" query best --model 0123456789ABCDEF $NOP
expect 1 "no planner at" "$AA" submit "$tmp/ok.json" $NOP --wait
expect 1 "no planner at tcp:127.0.0.1:1" "$AA" status --planner tcp:127.0.0.1:1
expect 1 "a TCP address needs HOST:PORT" "$AA" status --planner nohost
: >"$tmp/plain.sock" # a file that is not a socket
expect 1 "cannot connect to the planner|no planner" "$AA" status --planner "unix:$tmp/plain.sock"
printf 'secret\n' >"$tmp/token"
chmod 644 "$tmp/token"
expect 1 "chmod 600" "$AA" status $NOP --token-file "$tmp/token"
expect 1 "token file .*no such file|token file" "$AA" status $NOP --token-file "$tmp/no-token"

echo "client cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
