#!/usr/bin/env bash
# Installs what autoaccel needs from Debian packages (only what is missing)
# and configures a build tree.
#
#   scripts/setup.sh [--build-dir DIR] [--bench] [-- extra cmake args]
#
# python3 (standard library only) serves the service tests, which build raw
# frames by hand; procps gives them ps/kill. chromium renders the job
# report in tests/cli/test_report_html.sh (headless; skipped without it).
# --bench also installs PyTorch (python3-torch), used by bench/ and by
# tests/reference/make_fixture.py; the test suite itself does not need it.
# CUDA: if nvcc is on the machine (/usr/local/cuda), the CUDA backend is
# configured too (AUTOACCEL_CUDA=auto); pass -- -DAUTOACCEL_CUDA=off to skip.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
bench=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --bench) bench=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

pkgs=(build-essential cmake pkg-config libuv1-dev libmsgpack-dev libsqlite3-dev libjansson-dev
      libopenblas-dev libopenblas-openmp-dev libgloo-dev iproute2 clang libclang-rt-14-dev python3 procps chromium)
[ "$bench" = 1 ] && pkgs+=(python3-torch python3-numpy)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" != 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" >/dev/null
echo "setup: configured $build_dir"
