#!/usr/bin/env bash
# The main job on the bundled example: sets up, builds, generates the
# synthetic corpus (once), then `autoaccel auto`: searches the fastest
# strategy on this machine by dry runs, saves it, and trains with it.
#
#   scripts/run-example.sh [extra 'autoaccel auto' options]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build-dir build
cmake --build build -j"$(nproc)" --target autoaccel
if [ ! -f examples/tiny/data/train.bin ]; then
  build/autoaccel data synth --out examples/tiny/data
fi
build/autoaccel auto examples/tiny/model.json --out runs/tiny-synth "$@"
