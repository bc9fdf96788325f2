#!/usr/bin/env bash
# Sets up, builds with AddressSanitizer + UndefinedBehaviorSanitizer and
# warnings as errors, and runs the whole test suite with ctest.
#
#   scripts/test.sh [ctest args, e.g. -R test_ops]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build-test
scripts/setup.sh --build-dir "$build_dir" -- -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DAUTOACCEL_SANITIZE=ON -DAUTOACCEL_WERROR=ON
cmake --build "$build_dir" -j"$(nproc)"
# detect_leaks: every test must free what it allocates.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:protect_shadow_gap=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Idle OpenMP workers sleep after a short spin, as the `autoaccel` command
# sets for its engine processes (kernels/README.md "Idle workers"): the
# suite's ranks share the cores, where libgomp's long default spin takes the
# core a partner rank needs.
[ -n "${OMP_WAIT_POLICY:-}" ] || export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}"
cd "$build_dir"
ctest --output-on-failure "$@"
